/*
 * cpu_plan.c - which implementation runs each convolution of the CPU
 * backend (cpu_impl.h): a choice per shape and pass, as cuDNN's benchmark
 * mode makes on a GPU.
 *
 * Implementations: im2col (a GEMM a sample, the reference), winograd
 * (F(2x2, 3x3), 3x3 stride-1 layers: cpu_wino.c), gemm (one GEMM over the
 * whole batch, small planes: cpu_conv.c), onednn (oneDNN's direct
 * convolutions, when the build has it: cpu_dnnl.c), pointwise (1x1
 * kernels: im2col's GEMMs by oneDNN's SGEMM, cpu_conv.c).  Each pass of a shape
 * (forward, input gradient, filter gradient) gets its own, chosen once,
 * at the shape's first use (conv_ws, at bind time for the largest batch):
 *  - measured (the default): every implementation that takes the shape is
 *    timed on random data at that batch, with the backend's threads (one
 *    thread: its CPU time, clock_of), and
 *    the fastest kept (the pinned choice unless another is 3% faster, so
 *    that near ties do not flip between runs); shapes of fewer than 10
 *    million multiply-adds take the pinned choice untimed;
 *  - pinned (dp_backend_opts.deterministic): a rule of shape alone
 *    (pinned_choice), untimed, so the same command gives the same bytes;
 *  - given (dp_backend_opts.algos, conv_algos_take: the text conv_algos
 *    writes, from rank 0 or a checkpoint): taken for the shapes it names
 *    when it was made for the same CPU kernels, libraries and threads;
 *  - forced (dp_backend_opts.conv_algo, or DP_CPU_CONV=NAME): one
 *    implementation wherever it applies, im2col elsewhere (tests,
 *    benchmarks).
 * A smaller batch of a shape bound at a larger one (an epoch's last batch)
 * runs the larger one's choices, untimed, in the workspace conv_ws gave
 * for it.  conv_ws reports the most any candidate takes, so that another
 * rank's choice fits the workspace this rank allocated.
 * The bias gradient and the activation's derivative are computed here,
 * the same for every implementation; results differ between
 * implementations in the last bits only (the order of sums).
 */
#define _GNU_SOURCE
#include "cpu_impl.h"
#include "dp_rng.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

char *openblas_get_corename(void);

static const char *const impl_names[CPU_NIMPL] = {"im2col", "winograd", "gemm", "onednn",
						   "pointwise"};
static const char *const pass_names[3] = {"forward", "input gradient", "filter gradient"};

/* dp_backend_opts.conv_algo: 1 im2col, 2 winograd, 3 gemm, 4 onednn, 5 pointwise */
static int impl_of_algo(int a)
{
	return a >= 1 && a <= CPU_NIMPL ? a - 1 : -1;
}

int cpu_conv_impl_parse(const char *s)
{
	for (int i = 0; i < CPU_NIMPL; i++)
		if (!strcmp(s, impl_names[i]))
			return i;
	return -1;
}

const char *cpu_conv_impl_name(int impl) { return impl_names[impl]; }

/* ---- plans ---- */

static int same_geo(const dp_conv2d *a, const dp_conv2d *b)
{
	return a->n == b->n && a->c == b->c && a->h == b->h && a->w == b->w && a->k == b->k &&
	       a->oh == b->oh && a->ow == b->ow && a->kh == b->kh && a->kw == b->kw &&
	       a->sh == b->sh && a->sw == b->sw && a->ph == b->ph && a->pw == b->pw;
}

/* The same shape but for the batch. */
static int same_but_n(const dp_conv2d *a, const dp_conv2d *b)
{
	dp_conv2d t = *b;
	t.n = a->n;
	return same_geo(a, &t);
}

static int geo_text(const dp_conv2d *g, char *buf, size_t len)
{
	return snprintf(buf, len, "%dx%dx%dx%d-%dx%dx%d-s%dx%d-p%dx%d", g->n, g->c, g->h, g->w, g->k,
			g->kh, g->kw, g->sh, g->sw, g->ph, g->pw);
}

/* What a record of choices holds for: the kernels OpenBLAS chose for this
 * CPU, oneDNN's version and instructions, the precision, the threads. */
static int algos_whose(const dp_bectx *c, char *buf, size_t len)
{
	const char *dn = cpu_dnnl_version(1);
	return snprintf(buf, len, "cpu (OpenBLAS %s, %s)/fp32/%d thread%s", openblas_get_corename(),
			dn ? dn : "no oneDNN", c->threads, c->threads == 1 ? "" : "s");
}

static int applies(const conv_plan *p, int impl)
{
	switch (impl) {
	case CPU_IM2COL:
		return 1;
	case CPU_WINO:
		return cpu_wino_fits(&p->g);
	case CPU_GEMM:
		return cpu_gemm_fits(&p->g);
	case CPU_PW:
		return cpu_pw_fits(&p->g);
	default:
		return p->dn != NULL;
	}
}

static size_t ws_of(const dp_bectx *c, const conv_plan *p, int impl, int pass)
{
	switch (impl) {
	case CPU_IM2COL:
	case CPU_PW:
		return cpu_im2col_ws(c, &p->g, pass);
	case CPU_WINO:
		return cpu_wino_ws(c, &p->g, pass == CPU_PASS_DX);
	case CPU_GEMM:
		return cpu_gemm_ws(&p->g);
	default:
		return cpu_dnnl_ws(p->dn);
	}
}

/* Whether OpenBLAS runs vector kernels of this century here (AVX2,
 * AVX-512): 0.3.21 takes an x86 it does not know (Intel's family 6 model
 * 207, 2023) for a Prescott, whose SSE3 SGEMM is 3-5 times slower, and
 * our GEMM-based implementations with it. */
static int blas_fast(void)
{
	static const char *const fast[] = {"Haswell", "Zen", "SkylakeX", "Cooperlake",
					   "SapphireRapids"};
	const char *core = openblas_get_corename();
	for (size_t i = 0; core && i < sizeof fast / sizeof fast[0]; i++)
		if (!strcmp(core, fast[i]))
			return 1;
	return 0;
}

/* The choice of shape alone (--deterministic, shapes too small to time,
 * and the measured choice's favourite).  With oneDNN: oneDNN, but our
 * Winograd for the gradients of 3x3 stride-1 layers with planes of 4x4
 * and more where OpenBLAS has fast kernels (bench/convshapes.c, resnet18
 * at 64x64, batch 64, one thread: 19.4 against oneDNN's 24.2 ms for
 * layer1's input gradient, 19.2 against 20.7 for its filters; oneDNN's
 * forward passes won); the input gradient only where the layer pads, as
 * below.  Without: Winograd for the forward pass and the filter gradient
 * wherever it applies and for the input gradient of padded ("same")
 * layers, the batch-wide GEMM for planes of 4x4 and less, im2col
 * elsewhere (cpu_wino.c's measurements). */
static int pinned_choice(const conv_plan *p, int pass)
{
	const dp_conv2d *g = &p->g;
	int padded = g->ph >= 1 && g->pw >= 1;
	int wino = applies(p, CPU_WINO) && (pass != CPU_PASS_DX || padded);
	if (p->dn)
		return wino && pass != CPU_PASS_FWD && g->oh * g->ow >= 16 && blas_fast() ? CPU_WINO
											 : CPU_DNNL;
	if (wino)
		return CPU_WINO;
	if (applies(p, CPU_GEMM) && g->oh * g->ow <= 16)
		return CPU_GEMM;
	return CPU_IM2COL;
}

/* ---- timing ---- */

static float *rand_buf(size_t n, uint64_t seed)
{
	float *p = NULL;
	if (posix_memalign((void **)&p, 64, (n ? n : 1) * sizeof *p))
		return NULL;
	dp_rng r = {dp_mix64(seed), 0};
	for (size_t i = 0; i < n; i++)
		p[i] = (float)(dp_rng_unit(dp_rng_next(&r)) - 0.5);
	return p;
}

/* A convolution's buffers, for any of its passes (cpu_impl.h); b and act
 * are the forward pass's (NULL and 0 in the timings). */
typedef struct conv_bufs {
	const float *x, *w, *b, *dy;
	float *y, *dx, *dw;
	int act;
	void *ws;
} conv_bufs;

/* The passes of each implementation but onednn's, which run on the
 * shape's primitives (p->dn). */
static const struct {
	cpu_fwd_fn *fwd;
	cpu_dx_fn *dx;
	cpu_dw_fn *dw;
} impls[CPU_NIMPL] = {
	[CPU_IM2COL] = {cpu_im2col_fwd, cpu_im2col_dx, cpu_im2col_dw},
	[CPU_WINO] = {cpu_wino_fwd, cpu_wino_dx, cpu_wino_dw},
	[CPU_GEMM] = {cpu_gemm_fwd, cpu_gemm_dx, cpu_gemm_dw},
	[CPU_PW] = {cpu_pw_fwd, cpu_pw_dx, cpu_pw_dw},
};

/* Pass `pass` of shape g (p's, NULL where it has no plan) by
 * implementation impl. */
static void run_pass(dp_bectx *c, const conv_plan *p, const dp_conv2d *g, int impl, int pass,
		     const conv_bufs *a)
{
	if (pass == CPU_PASS_FWD && impl == CPU_DNNL)
		cpu_dnnl_fwd(c, p->dn, a->x, a->w, a->b, a->act, a->y, a->ws);
	else if (pass == CPU_PASS_FWD)
		impls[impl].fwd(c, g, a->x, a->w, a->b, a->y, a->act, a->ws);
	else if (pass == CPU_PASS_DX && impl == CPU_DNNL)
		cpu_dnnl_dx(c, p->dn, a->dy, a->w, a->dx, a->ws);
	else if (pass == CPU_PASS_DX)
		impls[impl].dx(c, g, a->dy, a->w, a->dx, a->ws);
	else if (impl == CPU_DNNL)
		cpu_dnnl_dw(c, p->dn, a->x, a->dy, a->dw, a->ws);
	else
		impls[impl].dw(c, g, a->x, a->dy, a->dw, a->ws);
}

/* The clock of the timings: with one thread, the thread's CPU time (every
 * implementation runs on the calling thread then, OpenBLAS's and oneDNN's
 * included), which other processes sharing the cores do not stretch: at a
 * load of 4 on 2 cores the wall clock moved a candidate's time by 2x and
 * the choice with it; with more, the wall clock (the time the threads
 * take together). */
static double clock_of(const dp_bectx *c)
{
	struct timespec t;
	if (c->threads > 1 || clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t))
		return dp_now();
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Seconds one run of impl on pass takes. */
static double time_once(dp_bectx *c, conv_plan *p, int impl, int pass, const conv_bufs *b)
{
	double t0 = clock_of(c);
	run_pass(c, p, &p->g, impl, pass, b);
	return clock_of(c) - t0;
}

/* The best of a pass's candidates, their ms into p->ms[pass]: a warm-up run
 * each, the pinned choice first (one whose warm-up took 3 times the best
 * so far is out: it loses either way), then rounds over those left, one
 * run each a round, 3 rounds (2 when a run takes more than 50 ms).  Runs
 * in turn, not one candidate's after another's: on a loaded machine a
 * burst of other work slows one run of each, not every run of one. */
static int time_pass(dp_bectx *c, conv_plan *p, int pass, int pin, const conv_bufs *b)
{
	double t[CPU_NIMPL], best = 1e30;
	int live[CPU_NIMPL] = {0};
	for (int k = 0; k < CPU_NIMPL; k++) {
		int i = k ? k - (k <= pin) : pin; /* pin, then the others in order */
		if (!applies(p, i))
			continue;
		t[i] = time_once(c, p, i, pass, b);
		p->ms[pass][i] = (float)(1e3 * t[i]);
		live[i] = t[i] <= 3 * best;
		best = t[i] < best ? t[i] : best;
	}
	int rounds = best > 0.05 ? 2 : 3;
	for (int r = 0; r < rounds; r++)
		for (int i = 0; i < CPU_NIMPL; i++)
			if (live[i] && (r == 0 || t[i] <= 3 * best)) {
				double u = time_once(c, p, i, pass, b);
				t[i] = r == 0 || u < t[i] ? u : t[i];
				best = t[i] < best ? t[i] : best;
				p->ms[pass][i] = (float)(1e3 * t[i]);
			}
	/* another implementation only where it beats the pinned one by 3% */
	int choice = pin;
	double bar = p->ms[pass][pin] / 1.03;
	for (int i = 0; i < CPU_NIMPL; i++)
		if (applies(p, i) && p->ms[pass][i] < bar) {
			bar = p->ms[pass][i];
			choice = i;
		}
	return choice;
}

/* Time every candidate of every pass; keep the fastest.  Where the buffers
 * cannot be had, the pinned choice. */
static void measure(dp_bectx *c, conv_plan *p)
{
	const dp_conv2d *g = &p->g;
	size_t xs = (size_t)g->n * g->c * g->h * g->w, ys = (size_t)g->n * g->k * g->oh * g->ow,
	       wn = (size_t)g->k * g->c * g->kh * g->kw;
	size_t len[6] = {xs, wn, ys, ys, xs, wn};
	void *buf[7] = {NULL};
	int okay = !posix_memalign(&buf[6], 64, p->ws ? p->ws : 64);
	for (int i = 0; i < 6; i++)
		okay &= (buf[i] = rand_buf(len[i], (uint64_t)i + 1)) != NULL;
	conv_bufs b = {.x = buf[0], .w = buf[1], .y = buf[2], .dy = buf[3], .dx = buf[4],
		       .dw = buf[5], .ws = buf[6]};
	for (int pass = 0; pass < 3; pass++) {
		int pin = pinned_choice(p, pass);
		p->impl[pass] = (signed char)pin;
		if (!okay)
			continue;
		p->impl[pass] = (signed char)time_pass(c, p, pass, pin, &b);
	}
	p->how = okay ? "measured" : "pinned (no memory to measure)";
	for (int i = 0; i < 7; i++)
		free(buf[i]);
}

/* The choices the text c->algos gives for p (each an implementation that
 * applies and fits p's workspace); 0 when it has none for p. */
static int given_choice(const dp_bectx *c, const conv_plan *p, int impl[3])
{
	char key[96], whose[256];
	int n = geo_text(&p->g, key, sizeof key), w = algos_whose(c, whose, sizeof whose);
	if (!c->algos || strncmp(c->algos, whose, (size_t)w) || c->algos[w] != '|')
		return 0;
	for (const char *s = c->algos + w + 1; *s; s = strchr(s, ';') ? strchr(s, ';') + 1 : "") {
		if (strncmp(s, key, (size_t)n) || s[n] != '=')
			continue;
		const char *q = s + n + 1;
		for (int pass = 0; pass < 3; pass++) {
			size_t len = strcspn(q, ",;");
			impl[pass] = -1;
			for (int i = 0; i < CPU_NIMPL; i++)
				if (strlen(impl_names[i]) == len && !strncmp(q, impl_names[i], len))
					impl[pass] = i;
			if (impl[pass] < 0 || !applies(p, impl[pass]) ||
			    ws_of(c, p, impl[pass], pass) > p->ws || (pass < 2 && q[len] != ','))
				return 0;
			q += len + 1;
		}
		return 1;
	}
	return 0;
}

static conv_plan *plan_find(dp_bectx *c, const dp_conv2d *g)
{
	for (int i = 0; i < c->nplan; i++)
		if (same_geo(&c->plan[i].g, g))
			return &c->plan[i];
	return NULL;
}

/* A new plan for g (NULL: out of memory: the caller runs im2col). */
static conv_plan *plan_new(dp_bectx *c, const dp_conv2d *g)
{
	if (c->nplan == c->cap) {
		int cap = c->cap ? 2 * c->cap : 16;
		conv_plan *t = realloc(c->plan, (size_t)cap * sizeof *t);
		if (!t)
			return NULL;
		c->plan = t;
		c->cap = cap;
	}
	conv_plan *p = &c->plan[c->nplan];
	memset(p, 0, sizeof *p);
	p->g = *g;
	int want_dn = c->force < 0 || c->force == CPU_DNNL;
	if (want_dn)
		p->dn = cpu_dnnl_make(c, g);
	c->nplan++;
	return p;
}

/* Multiply-adds of the forward pass.  Below MEASURE_MIN (under a
 * millisecond whatever runs it) timings are noise more than signal, and
 * the shape takes the pinned choice: small models repeat bit for bit
 * without --deterministic. */
#define MEASURE_MIN 1e7
static double macs(const dp_conv2d *g)
{
	return (double)g->n * g->k * g->c * g->kh * g->kw * g->oh * g->ow;
}

/* The plan of a shape seen first by conv_ws: the most workspace any
 * candidate takes, then the choice. */
static conv_plan *plan_bind(dp_bectx *c, const dp_conv2d *g)
{
	conv_plan *p = plan_find(c, g);
	if (p && p->bound)
		return p;
	if (!p && !(p = plan_new(c, g)))
		return NULL;
	p->bound = 1;
	p->ws = 0;
	/* forced: that implementation or im2col, nothing else can be taken */
	for (int pass = 0; pass < 3; pass++)
		for (int i = 0; i < CPU_NIMPL; i++)
			if (applies(p, i) && (c->force < 0 || i == c->force || i == CPU_IM2COL) &&
			    ws_of(c, p, i, pass) > p->ws)
				p->ws = ws_of(c, p, i, pass);
	int impl[3];
	if (c->force >= 0) {
		for (int pass = 0; pass < 3; pass++)
			p->impl[pass] = (signed char)(applies(p, c->force) ? c->force : CPU_IM2COL);
		p->how = "forced";
	} else if (given_choice(c, p, impl)) {
		for (int pass = 0; pass < 3; pass++)
			p->impl[pass] = (signed char)impl[pass];
		p->how = "given";
	} else if (c->pinned || macs(g) < MEASURE_MIN) {
		for (int pass = 0; pass < 3; pass++)
			p->impl[pass] = (signed char)pinned_choice(p, pass);
		p->how = c->pinned ? "pinned" : "pinned (too small to time)";
	} else {
		measure(c, p);
	}
	return p;
}

/* The plan for a call: the bound one, else (a smaller batch of a bound
 * shape) the bound one's choices where they fit its workspace, im2col
 * elsewhere; a shape never bound is bound now. */
static conv_plan *plan_for(dp_bectx *c, const dp_conv2d *g)
{
	conv_plan *p = plan_find(c, g);
	if (p)
		return p;
	const conv_plan *big = NULL;
	for (int i = 0; i < c->nplan; i++) {
		const conv_plan *q = &c->plan[i];
		if (q->bound && q->g.n > g->n && same_but_n(&q->g, g) && (!big || q->g.n < big->g.n))
			big = q;
	}
	if (!big)
		return plan_bind(c, g);
	int bi = (int)(big - c->plan);
	if (!(p = plan_new(c, g)))
		return NULL;
	big = &c->plan[bi]; /* plan_new may have moved the table */
	p->ws = big->ws;
	for (int pass = 0; pass < 3; pass++) {
		int i = big->impl[pass];
		p->impl[pass] = (signed char)(applies(p, i) && ws_of(c, p, i, pass) <= p->ws ? i
											  : CPU_IM2COL);
	}
	p->how = "as its larger batch";
	return p;
}

/* ---- the backend's calls ---- */

size_t cpu_conv_ws(dp_bectx *c, const dp_conv2d *g)
{
	conv_plan *p = plan_bind(c, g);
	if (p)
		return p->ws;
	size_t a = cpu_im2col_ws(c, g, CPU_PASS_DW); /* out of memory: im2col */
	return a;
}

void cpu_conv_fwd(dp_bectx *c, const dp_conv2d *g, const float *x, const float *w, const float *b,
		  float *y, int act, void *ws)
{
	conv_plan *p = plan_for(c, g);
	conv_bufs a = {.x = x, .w = w, .b = b, .y = y, .act = act, .ws = ws};
	run_pass(c, p, g, p ? p->impl[CPU_PASS_FWD] : CPU_IM2COL, CPU_PASS_FWD, &a);
}

/* dy *= act'(y) and db = the sum of dy per channel, sample after sample,
 * for channels lo..hi (each channel's sum its own: any threads alike). */
typedef struct dy_job {
	const dp_conv2d *g;
	const float *y;
	float *dy, *db;
	int act;
} dy_job;

static void dy_part(void *a, size_t lo, size_t hi)
{
	const dy_job *j = a;
	const dp_conv2d *g = j->g;
	size_t ohw = (size_t)g->oh * g->ow, ys = (size_t)g->k * ohw;
	if (j->db)
		memset(j->db + lo, 0, (hi - lo) * sizeof *j->db);
	for (int s = 0; s < g->n; s++) {
		float *dyn = j->dy + s * ys + lo * ohw;
		cpu_act_grad(j->act, j->y + s * ys + lo * ohw, dyn, (hi - lo) * ohw);
		if (j->db)
			cpu_add_row_sums(j->db + lo, dyn, hi - lo, ohw);
	}
}

void cpu_conv_bwd(dp_bectx *c, const dp_conv2d *g, const float *x, const float *w, const float *y,
		  float *dy, float *dx, float *dw, float *db, int act, void *ws)
{
	conv_plan *p = plan_for(c, g);
	dy_job j = {g, y, dy, db, act};
	cpu_par_range(c, (size_t)g->k, 1, dy_part, &j);
	conv_bufs a = {.x = x, .w = w, .dy = dy, .dx = dx, .dw = dw, .ws = ws};
	run_pass(c, p, g, p ? p->impl[CPU_PASS_DW] : CPU_IM2COL, CPU_PASS_DW, &a);
	if (dx)
		run_pass(c, p, g, p ? p->impl[CPU_PASS_DX] : CPU_IM2COL, CPU_PASS_DX, &a);
}

int cpu_conv_algos(dp_bectx *c, char *buf, size_t len)
{
	size_t at = 0;
	if (len)
		buf[0] = 0;
	for (int i = 0; i < c->nplan; i++) {
		const conv_plan *p = &c->plan[i];
		char key[96], whose[256];
		if (!p->bound)
			continue;
		if (!at) {
			algos_whose(c, whose, sizeof whose);
			at += (size_t)snprintf(buf, len, "%s|", whose);
		} else {
			at += (size_t)snprintf(buf + (at < len ? at : 0), at < len ? len - at : 0, ";");
		}
		geo_text(&p->g, key, sizeof key);
		at += (size_t)snprintf(buf + (at < len ? at : 0), at < len ? len - at : 0, "%s=%s,%s,%s",
				       key, impl_names[p->impl[0]], impl_names[p->impl[1]],
				       impl_names[p->impl[2]]);
	}
	return at < len ? (int)at : -1;
}

int cpu_conv_algos_take(dp_bectx *c, const char *algos)
{
	if (be_conv_algos_keep(&c->algos, algos) < 0)
		return -1;
	int changed = 0, impl[3];
	for (int i = 0; i < c->nplan; i++) {
		conv_plan *p = &c->plan[i];
		if (!p->bound || c->force >= 0 || !given_choice(c, p, impl))
			continue;
		if (impl[0] == p->impl[0] && impl[1] == p->impl[1] && impl[2] == p->impl[2])
			continue;
		for (int pass = 0; pass < 3; pass++)
			p->impl[pass] = (signed char)impl[pass];
		p->how = "given";
		changed++;
	}
	/* the smaller batches follow their bound shape again */
	for (int i = 0; i < c->nplan; i++) {
		conv_plan *p = &c->plan[i];
		for (int j = 0; !p->bound && j < c->nplan; j++) {
			const conv_plan *q = &c->plan[j];
			if (!q->bound || q->g.n <= p->g.n || !same_but_n(&q->g, &p->g))
				continue;
			for (int pass = 0; pass < 3; pass++) {
				int k = q->impl[pass];
				p->impl[pass] = (signed char)(applies(p, k) && ws_of(c, p, k, pass) <= p->ws
								      ? k
								      : CPU_IM2COL);
			}
		}
	}
	return changed;
}

int cpu_conv_explain(dp_bectx *c, const dp_conv2d *g, char *buf, size_t len)
{
	const conv_plan *p = plan_find(c, g);
	if (!p)
		return -1;
	size_t at = (size_t)snprintf(buf, len, "%s:", p->how ? p->how : "");
	for (int pass = 0; pass < 3; pass++) {
		at += (size_t)snprintf(buf + (at < len ? at : 0), at < len ? len - at : 0, "%s %s %s",
				       pass ? ";" : "", pass_names[pass], impl_names[p->impl[pass]]);
		int any = 0;
		for (int k = 0; k < CPU_NIMPL; k++)
			if (p->ms[pass][k] > 0)
				at += (size_t)snprintf(buf + (at < len ? at : 0),
						       at < len ? len - at : 0, "%s%s %.3g ms",
						       any++ ? ", " : " (", impl_names[k],
						       p->ms[pass][k]);
		if (any)
			at += (size_t)snprintf(buf + (at < len ? at : 0), at < len ? len - at : 0, ")");
	}
	return at < len ? (int)at : -1;
}

int cpu_conv_open(dp_bectx *c, const dp_backend_opts *o, dp_err *e)
{
	c->force = impl_of_algo(o ? o->conv_algo : 0);
	const char *v = dp_setting("DP_CPU_CONV");
	if (v && *v && strcmp(v, "auto")) {
		c->force = cpu_conv_impl_parse(v);
		if (c->force < 0)
			return dp_seterr(e, DP_EARG,
					 "DP_CPU_CONV=%.32s: not an implementation (auto, im2col, "
					 "winograd, gemm, onednn, pointwise)",
					 v);
	}
	c->pinned = o && o->deterministic;
	if (o && o->algos && !(c->algos = strdup(o->algos)))
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	int rc = cpu_dnnl_open(c, e);
	if (rc < 0)
		return rc;
	if ((c->force == CPU_DNNL || c->force == CPU_PW) && !cpu_dnnl_version(1))
		return dp_seterr(e, DP_EARG,
				 "convolutions by oneDNN%s: not in this build (install "
				 "libdnnl-dev and rebuild)",
				 c->force == CPU_PW ? "'s SGEMM (pointwise)" : "");
	return DP_OK;
}

void cpu_conv_close(dp_bectx *c)
{
	for (int i = 0; i < c->nplan; i++)
		cpu_dnnl_free(c->plan[i].dn);
	free(c->plan);
	free(c->algos);
	cpu_dnnl_close(c);
}
