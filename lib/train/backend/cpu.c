/*
 * cpu.c - the CPU backend: OpenBLAS SGEMM and plain C loops.
 *
 * The reference backend (see dp_backend.h).  Where the time goes, and how
 * it is spent well:
 *  - dense layers are one SGEMM each way over the whole batch;
 *  - convolutions are im2col + SGEMM one sample at a time, NCHW: the
 *    sample's column matrix (c*kh*kw, oh*ow) stays in the L2 cache, the
 *    GEMM output is the sample's NCHW block directly (no transpose), and
 *    bias and activation are applied while that block is still in cache;
 *    the backward pass rebuilds the columns instead of keeping a
 *    batch-sized copy;
 *  - elementwise work is fused where a layer allows (bias + activation,
 *    activation derivative + bias gradient), and nothing is cleared that
 *    is about to be overwritten.
 * Every part runs on the threads given to open() (OpenMP's: cpu_pool.c):
 * GEMMs cut by rows or columns, elementwise loops by ranges, batchnorm by
 * channels, pooling by planes, convolutions by samples (cpu_conv.c, and
 * cpu_plan.c's choice among it, cpu_wino.c and oneDNN).  Summation orders
 * are fixed, so results are deterministic, and a part computes the same
 * whichever thread runs it.
 */
#define _GNU_SOURCE
#include "cpu_impl.h"
#include "math_impl.h"
#include "dp_rng.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* OpenBLAS extensions (declared in its cblas.h; repeated for other BLAS
 * headers that lack them). */
void openblas_set_num_threads(int num_threads);
char *openblas_get_corename(void);

static int cpu_open(dp_bectx **ctx, const dp_backend_opts *o, char *desc, size_t desc_len,
		    dp_err *e)
{
	if (o && o->precision != DP_PREC_FP32)
		return dp_seterr(e, DP_EARG,
				 "precision %s: the cpu backend computes in fp32 only (%s needs a "
				 "GPU: make BACKEND=cuda)",
				 dp_precision_name(o->precision), dp_precision_name(o->precision));
	dp_bectx *c = calloc(1, sizeof *c);
	if (!c)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	c->threads = o && o->threads > 0 ? o->threads : 1;
	int rc = cpu_conv_open(c, o, e);
	if (rc < 0) {
		cpu_conv_close(c);
		free(c);
		return rc;
	}
	/* OpenBLAS on the thread that calls it: the parts are ours (cpu_pool.c) */
	openblas_set_num_threads(1);
	cpu_par_start(c);
	if (desc) {
		const char *dn = cpu_dnnl_version(1);
		snprintf(desc, desc_len, "cpu: OpenBLAS (%s kernels)%s%s, %d thread%s",
			 openblas_get_corename(), dn ? ", " : "", dn ? dn : "", c->threads,
			 c->threads == 1 ? "" : "s");
	}
	*ctx = c;
	return DP_OK;
}

static void cpu_close(dp_bectx *ctx)
{
	if (!ctx)
		return;
	cpu_conv_close(ctx);
	free(ctx);
}

static void *cpu_alloc(dp_bectx *ctx, size_t bytes)
{
	void *p = NULL;
	if (posix_memalign(&p, 64, bytes ? (bytes + 63) / 64 * 64 : 64))
		return NULL;
	return p;
}

static void cpu_free(dp_bectx *ctx, void *p) { free(p); }

static void cpu_upload(dp_bectx *ctx, void *dev, const void *host, size_t bytes)
{
	if (bytes && dev != host)
		memcpy(dev, host, bytes);
}

static const void *cpu_stage(dp_bectx *ctx, void *dev, const void *host, size_t bytes)
{
	return host; /* the CPU reads host memory where it is */
}

/* The work is done when the calls return; a library's failure since the
 * last sync (cpu_dnnl.c) is reported once. */
static int cpu_sync(dp_bectx *ctx, dp_err *e)
{
	if (!ctx->fail[0])
		return DP_OK;
	dp_seterr(e, DP_EIO, "%s", ctx->fail);
	ctx->fail[0] = 0;
	return DP_EIO;
}

/* An elementwise call's arguments, for cpu_par_range. */
typedef struct ew_job {
	int act;
	float v;
	const float *a, *b;
	float *y;
	const dp_dropout *d;
	const dp_sgd_args *sgd;
	const dp_adam_args *adam;
	float *m, *w;
} ew_job;

static void fill_part(void *arg, size_t lo, size_t hi)
{
	const ew_job *j = arg;
	for (size_t i = lo; i < hi; i++)
		j->y[i] = j->v;
}

static void cpu_fill(dp_bectx *ctx, float *p, float v, size_t n)
{
	ew_job j = {.v = v, .y = p};
	cpu_par_range(ctx, n, CPU_EW_MIN, fill_part, &j);
}

static void scale_part(void *arg, size_t lo, size_t hi)
{
	const ew_job *j = arg;
	for (size_t i = lo; i < hi; i++)
		j->y[i] *= j->v;
}

static void cpu_scale(dp_bectx *ctx, float *p, float s, size_t n)
{
	ew_job j = {.v = s, .y = p};
	cpu_par_range(ctx, n, CPU_EW_MIN, scale_part, &j);
}

static double cpu_sumsq(dp_bectx *ctx, const float *p, size_t n)
{
	double ss = 0;
	for (size_t i = 0; i < n; i++)
		ss += (double)p[i] * p[i];
	return ss;
}

/* ---- activations ---------------------------------------------------- */

/* y = act(y + b) over n elements (b a scalar: one conv channel). */
HOT static void bias_act(float *y, size_t n, float b, int act)
{
	switch (act) {
	case DP_ACT_RELU:
		for (size_t i = 0; i < n; i++) {
			float v = y[i] + b;
			y[i] = v > 0.0f ? v : 0.0f;
		}
		break;
	case DP_ACT_TANH:
		for (size_t i = 0; i < n; i++)
			y[i] = tanhf(y[i] + b);
		break;
	case DP_ACT_SIGMOID:
		for (size_t i = 0; i < n; i++)
			y[i] = 1.0f / (1.0f + expf(-(y[i] + b)));
		break;
	default:
		for (size_t i = 0; i < n; i++)
			y[i] += b;
	}
}

/* For cpu_wino.c (GCC gives a target_clones function default visibility:
 * a plain function in between keeps it out of libdp.so's exports). */
void cpu_bias_act(float *y, size_t n, float b, int act) { bias_act(y, n, b, act); }

/* y (rows, cols) = act(y + b) with b (cols): a dense layer's output.
 * b NULL: no bias. */
HOT static void bias_rows_act(float *y, size_t rows, size_t cols, const float *b, int act)
{
	if (!b) {
		if (act)
			bias_act(y, rows * cols, 0.0f, act);
		return;
	}
	for (size_t r = 0; r < rows; r++) {
		float *p = y + r * cols;
		if (act == DP_ACT_RELU) {
			for (size_t j = 0; j < cols; j++) {
				float v = p[j] + b[j];
				p[j] = v > 0.0f ? v : 0.0f;
			}
		} else {
			for (size_t j = 0; j < cols; j++)
				p[j] += b[j];
			if (act)
				bias_act(p, cols, 0.0f, act);
		}
	}
}

static void act_apply(int act, float *y, size_t n)
{
	if (act)
		bias_act(y, n, 0.0f, act);
}

/* dy *= act'(from the output y), in place. */
HOT static void act_grad(int act, const float *y, float *dy, size_t n)
{
	switch (act) {
	case DP_ACT_RELU:
		for (size_t i = 0; i < n; i++)
			dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
		break;
	case DP_ACT_TANH:
		for (size_t i = 0; i < n; i++)
			dy[i] *= 1.0f - y[i] * y[i];
		break;
	case DP_ACT_SIGMOID:
		for (size_t i = 0; i < n; i++)
			dy[i] *= y[i] * (1.0f - y[i]);
		break;
	}
}

/* The sum of n floats in a fixed order: 16 running sums, then those in
 * order (vectorises, and gives the same bits on every instruction set). */
static inline float sum16(const float *p, size_t n)
{
	float acc[16] = {0};
	size_t i = 0;
	for (; i + 16 <= n; i += 16)
		for (int j = 0; j < 16; j++)
			acc[j] += p[i + j];
	float s = 0;
	for (int j = 0; j < 16; j++)
		s += acc[j];
	for (; i < n; i++)
		s += p[i];
	return s;
}

/* acc[r] += the sum of row r of x (rows, cols), as sum16. */
HOT static void add_row_sums(float *acc, const float *x, size_t rows, size_t cols)
{
	for (size_t r = 0; r < rows; r++)
		acc[r] += sum16(x + r * cols, cols);
}

/* acc (cols) += each row of x (rows, cols), rows in order. */
HOT static void add_rows(float *acc, const float *x, size_t rows, size_t cols)
{
	for (size_t r = 0; r < rows; r++)
		for (size_t j = 0; j < cols; j++)
			acc[j] += x[r * cols + j];
}

/* For cpu_plan.c (plain functions in between, as cpu_bias_act). */
void cpu_act_grad(int act, const float *y, float *dy, size_t n) { act_grad(act, y, dy, n); }
void cpu_add_row_sums(float *acc, const float *x, size_t rows, size_t cols)
{
	add_row_sums(acc, x, rows, cols);
}

static void act_fwd_part(void *arg, size_t lo, size_t hi)
{
	const ew_job *j = arg;
	if (j->a != j->y)
		memcpy(j->y + lo, j->a + lo, (hi - lo) * sizeof *j->y);
	act_apply(j->act, j->y + lo, hi - lo);
}

static void cpu_act_fwd(dp_bectx *ctx, int act, size_t n, const float *x, float *y)
{
	ew_job j = {.act = act, .a = x, .y = y};
	cpu_par_range(ctx, n, CPU_EW_MIN, act_fwd_part, &j);
}

/* a: the output, b: its gradient, y: the input's */
static void act_bwd_part(void *arg, size_t lo, size_t hi)
{
	const ew_job *j = arg;
	if (j->b != j->y)
		memcpy(j->y + lo, j->b + lo, (hi - lo) * sizeof *j->y);
	act_grad(j->act, j->a + lo, j->y + lo, hi - lo);
}

static void cpu_act_bwd(dp_bectx *ctx, int act, size_t n, const float *y, const float *dy,
			float *dx)
{
	ew_job j = {.act = act, .a = y, .b = dy, .y = dx};
	cpu_par_range(ctx, n, CPU_EW_MIN, act_bwd_part, &j);
}

HOT static void add_act(size_t n, const float *a, const float *b, float *y, int act)
{
	if (act == DP_ACT_RELU) {
		for (size_t i = 0; i < n; i++) {
			float v = a[i] + b[i];
			y[i] = v > 0.0f ? v : 0.0f;
		}
		return;
	}
	for (size_t i = 0; i < n; i++)
		y[i] = a[i] + b[i];
	act_apply(act, y, n);
}

static void add_part(void *arg, size_t lo, size_t hi)
{
	const ew_job *j = arg;
	add_act(hi - lo, j->a + lo, j->b + lo, j->y + lo, j->act);
}

static void cpu_add(dp_bectx *ctx, size_t n, const float *a, const float *b, float *y, int act)
{
	ew_job j = {.act = act, .a = a, .b = b, .y = y};
	cpu_par_range(ctx, n, CPU_EW_MIN, add_part, &j);
}

/* ---- dense ------------------------------------------------------------ */

static void cpu_dense_fwd(dp_bectx *ctx, int n, int in, int out, const float *x, const float *w,
			  const float *b, float *y, int act)
{
	/* y = x w^T: (n, in) (in, out) */
	cpu_sgemm(ctx, CblasNoTrans, CblasTrans, n, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
	bias_rows_act(y, (size_t)n, (size_t)out, b, act);
}

static void cpu_dense_bwd(dp_bectx *ctx, int n, int in, int out, const float *x, const float *w,
			  const float *y, float *dy, float *dx, float *dw, float *db, int act)
{
	act_grad(act, y, dy, (size_t)n * out);
	if (db) {
		memset(db, 0, (size_t)out * sizeof *db);
		add_rows(db, dy, (size_t)n, (size_t)out);
	}
	/* dw = dy^T x: (out, n) (n, in) */
	cpu_sgemm(ctx, CblasTrans, CblasNoTrans, out, in, n, 1.0f, dy, out, x, in, 0.0f, dw, in);
	/* dx = dy w: (n, out) (out, in) */
	if (dx)
		cpu_sgemm(ctx, CblasNoTrans, CblasNoTrans, n, in, out, 1.0f, dy, out, w, in, 0.0f, dx,
			  in);
}

/* ---- pooling ------------------------------------------------------------ */

/* 2x2 windows, stride 2: one output row from two input rows.  The four
 * corners are first split into contiguous arrays, then compared in raster
 * order with selects (the data decide them at random; branches would
 * mispredict), so both loops vectorise. */
#define POOL_ROW_MAX 512
static inline void maxpool22_row(const float *r0, const float *r1, int w, int ow, float *y,
			      int32_t *arg, int32_t base)
{
	float a[POOL_ROW_MAX], b[POOL_ROW_MAX], c[POOL_ROW_MAX], d[POOL_ROW_MAX];
	for (int ox = 0; ox < ow; ox++) {
		a[ox] = r0[2 * ox];
		b[ox] = r0[2 * ox + 1];
		c[ox] = r1[2 * ox];
		d[ox] = r1[2 * ox + 1];
	}
	for (int ox = 0; ox < ow; ox++) {
		/* v != v: a NaN wins, as in the general loop (and PyTorch) */
		int32_t i = base + 2 * ox;
		float m = a[ox];
		int tb = b[ox] > m || b[ox] != b[ox];
		i = tb ? base + 2 * ox + 1 : i;
		m = tb ? b[ox] : m;
		int tc = c[ox] > m || c[ox] != c[ox];
		i = tc ? base + 2 * ox + w : i;
		m = tc ? c[ox] : m;
		int td = d[ox] > m || d[ox] != d[ox];
		i = td ? base + 2 * ox + w + 1 : i;
		m = td ? d[ox] : m;
		y[ox] = m;
		arg[ox] = i;
	}
}

/* Planes lo..hi-1 of a 2x2, stride 2 pooling (one call: the multiversioned
 * function is chosen once, not per row). */
HOT static void maxpool22(const dp_pool2d *g, const float *x, float *y, int32_t *arg, size_t lo,
			  size_t hi)
{
	size_t hw = (size_t)g->h * g->w, ohw = (size_t)g->oh * g->ow;
	for (size_t pl = lo; pl < hi; pl++) {
		const float *xp = x + pl * hw;
		for (int oy = 0; oy < g->oh; oy++)
			maxpool22_row(xp + (size_t)2 * oy * g->w, xp + (size_t)(2 * oy + 1) * g->w, g->w,
				      g->ow, y + pl * ohw + (size_t)oy * g->ow,
				      arg + pl * ohw + (size_t)oy * g->ow, 2 * oy * g->w);
	}
}

/* The window's rows (or columns) inside the image: [lo, hi) of the input
 * for output position o (stride s, kernel k, padding p, input size in). */
static inline void pool_range(int o, int s, int k, int p, int in, int *lo, int *hi)
{
	int a = o * s - p, b = a + k;
	*lo = a < 0 ? 0 : a;
	*hi = b > in ? in : b;
}

/* A pooling call's arguments, for cpu_par_range over its planes (sample,
 * channel): each plane's work its own. */
typedef struct pool_job {
	const dp_pool2d *g;
	const float *x;
	float *y;
	int32_t *arg;
	const int32_t *carg;
} pool_job;

#define PLANES_MIN 4

/* Output (oy, ox) of a plane: its value into *m, the index of the input
 * that holds it into *best. */
static inline void maxpool_at(const dp_pool2d *g, const float *xp, int oy, int ox, float *m,
			      int32_t *best)
{
	int y0, y1, x0, x1;
	pool_range(oy, g->sh, g->kh, g->ph, g->h, &y0, &y1);
	pool_range(ox, g->sw, g->kw, g->pw, g->w, &x0, &x1);
	/* as PyTorch: from -infinity at the first position inside the image
	 * (padding never wins) */
	int b = y0 < y1 && x0 < x1 ? y0 * g->w + x0 : -1;
	float v = -INFINITY;
	for (int i = y0; i < y1; i++)
		for (int j = x0; j < x1; j++) {
			int idx = i * g->w + j;
			/* NaN propagates, as in PyTorch */
			if (xp[idx] > v || isnan(xp[idx])) {
				v = xp[idx];
				b = idx;
			}
		}
	*m = v;
	*best = b;
}

/* Planes lo..hi-1 of a pooling whose rows fit POOL_ROW_MAX: the columns
 * whose windows lie inside the image (oxa..oxb-1) a window position at a
 * time over the whole row, with selects in maxpool_at's raster order (the
 * same results, ties and NaNs included) so that it vectorises and no
 * branch depends on the data; the edge columns by maxpool_at. */
HOT static void maxpool_rows(const dp_pool2d *g, const float *x, float *y, int32_t *arg, size_t lo,
			     size_t hi)
{
	size_t hw = (size_t)g->h * g->w, ohw = (size_t)g->oh * g->ow;
	int s = g->sw, oxa = (g->pw + s - 1) / s, oxb = g->w + g->pw - g->kw;
	oxb = oxb < 0 ? 0 : oxb / s + 1;
	oxb = oxb > g->ow ? g->ow : oxb;
	oxa = oxa > oxb ? oxb : oxa;
	int n = oxb - oxa, c0 = oxa * s - g->pw; /* the first inner window's first column */
	float m[POOL_ROW_MAX];
	int32_t b[POOL_ROW_MAX];
	for (size_t pl = lo; pl < hi; pl++) {
		const float *xp = x + pl * hw;
		for (int oy = 0; oy < g->oh; oy++) {
			int y0, y1;
			pool_range(oy, g->sh, g->kh, g->ph, g->h, &y0, &y1);
			for (int t = 0; t < n; t++) {
				m[t] = -INFINITY;
				b[t] = y0 < y1 ? y0 * g->w + c0 + t * s : -1;
			}
			for (int i = y0; i < y1; i++)
				for (int j = 0; j < g->kw; j++) {
					int32_t base = i * g->w + c0 + j;
					const float *r = xp + base;
					for (int t = 0; t < n; t++) {
						float v = r[t * s];
						int u = v > m[t] || v != v;
						m[t] = u ? v : m[t];
						b[t] = u ? base + t * s : b[t];
					}
				}
			float *yr = y + pl * ohw + (size_t)oy * g->ow;
			int32_t *ar = arg + pl * ohw + (size_t)oy * g->ow;
			for (int t = 0; t < n; t++) {
				yr[oxa + t] = m[t];
				ar[oxa + t] = b[t];
			}
			for (int ox = 0; ox < oxa; ox++)
				maxpool_at(g, xp, oy, ox, yr + ox, ar + ox);
			for (int ox = oxb; ox < g->ow; ox++)
				maxpool_at(g, xp, oy, ox, yr + ox, ar + ox);
		}
	}
}

static void maxpool_part(void *a, size_t lo, size_t hi)
{
	const pool_job *j = a;
	const dp_pool2d *g = j->g;
	if (g->kh == 2 && g->kw == 2 && g->sh == 2 && g->sw == 2 && !g->ph && !g->pw &&
	    g->ow <= POOL_ROW_MAX) {
		maxpool22(g, j->x, j->y, j->arg, lo, hi);
		return;
	}
	if (g->ow <= POOL_ROW_MAX) {
		maxpool_rows(g, j->x, j->y, j->arg, lo, hi);
		return;
	}
	size_t hw = (size_t)g->h * g->w, ohw = (size_t)g->oh * g->ow;
	for (size_t pl = lo; pl < hi; pl++)
		for (int oy = 0; oy < g->oh; oy++)
			for (int ox = 0; ox < g->ow; ox++)
				maxpool_at(g, j->x + pl * hw, oy, ox,
					   j->y + pl * ohw + (size_t)oy * g->ow + ox,
					   j->arg + pl * ohw + (size_t)oy * g->ow + ox);
}

static void cpu_maxpool_fwd(dp_bectx *ctx, const dp_pool2d *g, const float *x, float *y,
			    int32_t *arg)
{
	pool_job j = {g, x, y, arg, NULL};
	cpu_par_range(ctx, (size_t)g->n * g->c, PLANES_MIN, maxpool_part, &j);
}

static void maxpool_bwd_part(void *a, size_t lo, size_t hi)
{
	const pool_job *j = a;
	const dp_pool2d *g = j->g;
	size_t hw = (size_t)g->h * g->w, ohw = (size_t)g->oh * g->ow;
	for (size_t pl = lo; pl < hi; pl++) {
		float *dp = j->y + pl * hw;
		const float *dyp = j->x + pl * ohw;
		const int32_t *ap = j->carg + pl * ohw;
		memset(dp, 0, hw * sizeof *dp); /* one plane: stays in L1 for the scatter */
		for (size_t o = 0; o < ohw; o++)
			if (ap[o] >= 0) /* -1: a window of padding only */
				dp[ap[o]] += dyp[o];
	}
}

static void cpu_maxpool_bwd(dp_bectx *ctx, const dp_pool2d *g, const float *dy, const int32_t *arg,
			    float *dx)
{
	pool_job j = {g, dy, dx, NULL, arg};
	cpu_par_range(ctx, (size_t)g->n * g->c, PLANES_MIN, maxpool_bwd_part, &j);
}

static void avgpool_part(void *a, size_t lo, size_t hi)
{
	const pool_job *jb = a;
	const dp_pool2d *g = jb->g;
	size_t hw = (size_t)g->h * g->w, ohw = (size_t)g->oh * g->ow;
	float inv = 1.0f / (float)(g->kh * g->kw);
	for (size_t pl = lo; pl < hi; pl++) {
		const float *xp = jb->x + pl * hw;
		float *yp = jb->y + pl * ohw;
		for (int oy = 0; oy < g->oh; oy++)
			for (int ox = 0; ox < g->ow; ox++) {
				const float *w0 = xp + (size_t)oy * g->sh * g->w + (size_t)ox * g->sw;
				float s = 0;
				for (int i = 0; i < g->kh; i++)
					for (int j = 0; j < g->kw; j++)
						s += w0[i * g->w + j];
				yp[oy * g->ow + ox] = s * inv;
			}
	}
}

static void cpu_avgpool_fwd(dp_bectx *ctx, const dp_pool2d *g, const float *x, float *y)
{
	pool_job j = {g, x, y, NULL, NULL};
	cpu_par_range(ctx, (size_t)g->n * g->c, PLANES_MIN, avgpool_part, &j);
}

static void avgpool_bwd_part(void *a, size_t lo, size_t hi)
{
	const pool_job *jb = a;
	const dp_pool2d *g = jb->g;
	size_t hw = (size_t)g->h * g->w, ohw = (size_t)g->oh * g->ow;
	float inv = 1.0f / (float)(g->kh * g->kw);
	for (size_t pl = lo; pl < hi; pl++) {
		float *dp = jb->y + pl * hw;
		const float *dyp = jb->x + pl * ohw;
		memset(dp, 0, hw * sizeof *dp);
		for (int oy = 0; oy < g->oh; oy++)
			for (int ox = 0; ox < g->ow; ox++) {
				float *w0 = dp + (size_t)oy * g->sh * g->w + (size_t)ox * g->sw;
				float v = dyp[oy * g->ow + ox] * inv;
				for (int i = 0; i < g->kh; i++)
					for (int j = 0; j < g->kw; j++)
						w0[i * g->w + j] += v;
			}
	}
}

static void cpu_avgpool_bwd(dp_bectx *ctx, const dp_pool2d *g, const float *dy, float *dx)
{
	pool_job j = {g, dy, dx, NULL, NULL};
	cpu_par_range(ctx, (size_t)g->n * g->c, PLANES_MIN, avgpool_bwd_part, &j);
}

/* ---- dropout ------------------------------------------------------------ */

/* out[i] = in[i] masked and scaled for elements lo..hi-1 of the batch */
HOT static void dropout_apply(const dp_dropout *d, size_t lo, size_t hi, const float *in,
			      float *out)
{
	uint64_t c0 = d->sample0 * d->per_sample, key = d->key;
	uint32_t thr = d->threshold;
	float sc = d->scale;
	for (size_t i = lo; i < hi; i++) {
		uint32_t r = (uint32_t)(dp_rng_at(key, c0 + i) >> 32);
		out[i] = r >= thr ? in[i] * sc : 0.0f;
	}
}

static void dropout_part(void *arg, size_t lo, size_t hi)
{
	const ew_job *j = arg;
	dropout_apply(j->d, lo, hi, j->a, j->y);
}

static void cpu_dropout_fwd(dp_bectx *ctx, const dp_dropout *d, int n, const float *x, float *y)
{
	ew_job j = {.d = d, .a = x, .y = y};
	cpu_par_range(ctx, (size_t)n * d->per_sample, CPU_EW_MIN, dropout_part, &j);
}

static void cpu_dropout_bwd(dp_bectx *ctx, const dp_dropout *d, int n, const float *dy, float *dx)
{
	cpu_dropout_fwd(ctx, d, n, dy, dx);
}

/* ---- batch normalisation ---------------------------------------------- */

/* Values per channel that the statistics cover: g->count when the sums
 * of all ranks are given, else this batch's n * hw. */
static double bn_count(const dp_bnorm *g, const double *sums)
{
	return sums && g->count > 0 ? g->count : (double)g->n * g->hw;
}

/* Plane i of channel c of a tensor (n, C, hw). */
#define BN_PLANE(g, p, c, i) ((p) + ((size_t)(i) * (g)->c + (size_t)(c)) * (g)->hw)

/* Over channel c of x: the sum of x - mu and of its squares, in double:
 * 8 running sums through all the channel's planes, their remainders in a
 * ninth (vectorises; a fixed order). */
HOT static void chan_sums(const dp_bnorm *g, const float *x, int c, double mu, double *s,
			  double *s2)
{
	double a[8] = {0}, b[8] = {0}, sa = 0, sb = 0;
	size_t hw = (size_t)g->hw;
	for (int i = 0; i < g->n; i++) {
		const float *p = BN_PLANE(g, x, c, i);
		size_t j = 0;
		for (; j + 8 <= hw; j += 8)
			for (int k = 0; k < 8; k++) {
				double v = (double)p[j + k] - mu;
				a[k] += v;
				b[k] += v * v;
			}
		for (; j < hw; j++) {
			double v = (double)p[j] - mu;
			sa += v;
			sb += v * v;
		}
	}
	for (int k = 0; k < 8; k++) {
		sa += a[k];
		sb += b[k];
	}
	*s = sa;
	*s2 = sb;
}

/* d where a fused ReLU's output r is positive, else +0 (as the ReLU's own
 * backward writes it): by a mask of the bits, so that loops vectorise. */
static inline float bn_dy_masked(float r, float d)
{
	uint32_t u;
	memcpy(&u, &d, sizeof u);
	u &= -(uint32_t)(r > 0.0f);
	memcpy(&d, &u, sizeof d);
	return d;
}

/* chan_grad_sums for one case of masked (a constant where inlined: a
 * loop of its own each). */
static inline __attribute__((always_inline)) void grad_sums(const dp_bnorm *g, const float *x,
							    const float *y, const float *dy, int c,
							    float mean, float inv, int masked,
							    double *s, double *sx)
{
	double a[8] = {0}, b[8] = {0}, sa = 0, sb = 0;
	size_t hw = (size_t)g->hw;
	for (int i = 0; i < g->n; i++) {
		const float *p = BN_PLANE(g, x, c, i), *d = BN_PLANE(g, dy, c, i);
		const float *r = masked ? BN_PLANE(g, y, c, i) : d;
		size_t j = 0;
		for (; j + 8 <= hw; j += 8)
			for (int k = 0; k < 8; k++) {
				float dv = masked ? bn_dy_masked(r[j + k], d[j + k]) : d[j + k];
				a[k] += dv;
				b[k] += (double)dv * ((p[j + k] - mean) * inv);
			}
		for (; j < hw; j++) {
			float dv = masked ? bn_dy_masked(r[j], d[j]) : d[j];
			sa += dv;
			sb += (double)dv * ((p[j] - mean) * inv);
		}
	}
	for (int k = 0; k < 8; k++) {
		sa += a[k];
		sb += b[k];
	}
	*s = sa;
	*sx = sb;
}

/* Over channel c: the sum of dy and of dy * xhat, xhat = (x - mean) inv,
 * as chan_sums; y (not NULL: a fused ReLU's output) masks dy. */
HOT static void chan_grad_sums(const dp_bnorm *g, const float *x, const float *y, const float *dy,
			       int c, float mean, float inv, double *s, double *sx)
{
	if (y)
		grad_sums(g, x, y, dy, c, mean, inv, 1, s, sx);
	else
		grad_sums(g, x, y, dy, c, mean, inv, 0, s, sx);
}

/* y = x a + b over channel c, then max(0, y) when relu. */
HOT static void chan_affine(const dp_bnorm *g, const float *x, float *y, int c, float a, float b,
			    int relu)
{
	for (int i = 0; i < g->n; i++) {
		const float *p = BN_PLANE(g, x, c, i);
		float *q = BN_PLANE(g, y, c, i);
		if (relu)
			for (int j = 0; j < g->hw; j++) {
				float v = p[j] * a + b;
				q[j] = v > 0.0f ? v : 0.0f;
			}
		else
			for (int j = 0; j < g->hw; j++)
				q[j] = p[j] * a + b;
	}
}

/* chan_dx for one case of masked, as grad_sums. */
static inline __attribute__((always_inline)) void dx_of(const dp_bnorm *g, const float *x,
							const float *y, const float *dy, float *dx,
							int c, float k, float mdy, float mean,
							float inv, float mdyx, int masked)
{
	for (int i = 0; i < g->n; i++) {
		const float *p = BN_PLANE(g, x, c, i), *d = BN_PLANE(g, dy, c, i);
		const float *r = masked ? BN_PLANE(g, y, c, i) : d;
		float *q = BN_PLANE(g, dx, c, i);
		if (g->eval)
			for (int j = 0; j < g->hw; j++)
				q[j] = (masked ? bn_dy_masked(r[j], d[j]) : d[j]) * k + 0.0f;
		else
			for (int j = 0; j < g->hw; j++)
				q[j] = k * ((masked ? bn_dy_masked(r[j], d[j]) : d[j]) - mdy -
					    (p[j] - mean) * inv * mdyx);
	}
}

/* dx = k (dy - mdy - (x - mean) inv mdyx) over channel c, or k dy
 * (g->eval), dy masked by y as in chan_grad_sums. */
HOT static void chan_dx(const dp_bnorm *g, const float *x, const float *y, const float *dy,
			float *dx, int c, float k, float mdy, float mean, float inv, float mdyx)
{
	if (y)
		dx_of(g, x, y, dy, dx, c, k, mdy, mean, inv, mdyx, 1);
	else
		dx_of(g, x, y, dy, dx, c, k, mdy, mean, inv, mdyx, 0);
}

static void cpu_bnorm_sums(dp_bectx *ctx, const dp_bnorm *g, const float *x, double *sums)
{
	for (int c = 0; c < g->c; c++)
		chan_sums(g, x, c, 0.0, &sums[c], &sums[g->c + c]);
}

/* A batchnorm call's arguments, for cpu_par_run over its channels (each
 * channel's work is its own: the same results on any number of threads). */
typedef struct bn_job {
	const dp_bnorm *g;
	int train;
	const float *x, *gamma, *beta, *save, *dy, *yout; /* yout: a fused ReLU's output */
	float *run_mean, *run_var, *save_out, *y, *dx, *dgamma, *dbeta;
	const double *sums;
	double *sums_out;
	double m;
} bn_job;

static void bn_fwd_chan(void *arg, int c, int worker)
{
	const bn_job *j = arg;
	const dp_bnorm *g = j->g;
	float mean, inv;
	(void)worker;
	if (j->train) {
		double mu, var, m = j->m;
		if (j->sums) {
			mu = j->sums[c] / m;
			var = j->sums[g->c + c] / m - mu * mu;
			var = var > 0 ? var : 0;
		} else { /* two passes: the mean, then the squares about it */
			double s, s2, d, d2;
			chan_sums(g, j->x, c, 0.0, &s, &s2);
			mu = s / m;
			chan_sums(g, j->x, c, mu, &d, &d2);
			var = d2 / m;
		}
		mean = (float)mu;
		inv = (float)(1.0 / sqrt(var + g->eps));
		bn_running(g->momentum, mean, var, m, &j->run_mean[c], &j->run_var[c]);
	} else {
		mean = j->run_mean[c];
		inv = 1.0f / sqrtf(j->run_var[c] + g->eps);
	}
	if (j->save_out) {
		j->save_out[c] = mean;
		j->save_out[g->c + c] = inv;
	}
	float a = j->gamma[c] * inv;
	chan_affine(g, j->x, j->y, c, a, j->beta[c] - mean * a, g->act == DP_ACT_RELU);
}

static void cpu_bnorm_fwd(dp_bectx *ctx, const dp_bnorm *g, int train, const float *x,
			  const float *gamma, const float *beta, float *run_mean, float *run_var,
			  const double *sums, float *save, float *y)
{
	bn_job j = {.g = g, .train = train, .x = x, .gamma = gamma, .beta = beta,
		    .run_mean = run_mean, .run_var = run_var, .sums = sums, .save_out = save,
		    .y = y, .m = bn_count(g, sums)};
	cpu_par_run(ctx, g->c, bn_fwd_chan, &j);
}

static void bn_bwd_sums_chan(void *arg, int c, int worker)
{
	const bn_job *j = arg;
	(void)worker;
	chan_grad_sums(j->g, j->x, j->yout, j->dy, c, j->save[c], j->save[j->g->c + c],
		       &j->sums_out[c], &j->sums_out[j->g->c + c]);
}

static void cpu_bnorm_bwd_sums(dp_bectx *ctx, const dp_bnorm *g, const float *x, const float *save,
			       const float *y, const float *dy, double *sums)
{
	bn_job j = {.g = g, .x = x, .save = save, .yout = g->act ? y : NULL, .dy = dy,
		    .sums_out = sums};
	cpu_par_run(ctx, g->c, bn_bwd_sums_chan, &j);
}

static void bn_bwd_chan(void *arg, int c, int worker)
{
	const bn_job *j = arg;
	const dp_bnorm *g = j->g;
	float mean = j->save[c], inv = j->save[g->c + c];
	double sdy, sdyx;
	(void)worker;
	chan_grad_sums(g, j->x, j->yout, j->dy, c, mean, inv, &sdy, &sdyx);
	j->dgamma[c] = (float)sdyx;
	j->dbeta[c] = (float)sdy;
	if (!j->dx)
		return;
	float k = j->gamma[c] * inv;
	if (g->eval) { /* dx = gamma inv dy: no path through the statistics */
		chan_dx(g, j->x, j->yout, j->dy, j->dx, c, k, 0.0f, mean, inv, 0.0f);
		return;
	}
	/* dx = gamma inv (dy - mean(dy) - xhat mean(dy xhat)), the means over
	 * this batch or (sums) over all ranks */
	float mdy = (float)((j->sums ? j->sums[c] : sdy) / j->m),
	      mdyx = (float)((j->sums ? j->sums[g->c + c] : sdyx) / j->m);
	chan_dx(g, j->x, j->yout, j->dy, j->dx, c, k, mdy, mean, inv, mdyx);
}

static void cpu_bnorm_bwd(dp_bectx *ctx, const dp_bnorm *g, const float *x, const float *gamma,
			  const float *save, const double *sums, const float *y, const float *dy,
			  float *dx, float *dgamma, float *dbeta)
{
	bn_job j = {.g = g, .x = x, .gamma = gamma, .save = save, .sums = sums,
		    .yout = g->act ? y : NULL, .dy = dy, .dx = dx, .dgamma = dgamma, .dbeta = dbeta,
		    .m = bn_count(g, sums)};
	cpu_par_run(ctx, g->c, bn_bwd_chan, &j);
}

static void cpu_bnorm_fold(dp_bectx *ctx, int k, size_t per, float eps, const float *w,
			   const float *b, const float *gamma, const float *beta, const float *mean,
			   const float *var, float *wout, float *bout)
{
	for (int c = 0; c < k; c++) {
		float a = gamma[c] * (1.0f / sqrtf(var[c] + eps)); /* as bn_fwd_chan's */
		for (size_t j = 0; j < per; j++)
			wout[(size_t)c * per + j] = w[(size_t)c * per + j] * a;
		bout[c] = beta[c] + ((b ? b[c] : 0.0f) - mean[c]) * a;
	}
}

/* ---- losses ------------------------------------------------------------- */

static void cpu_xent(dp_bectx *ctx, int n, int k, const float *logits, const int32_t *labels,
		     float smooth, float scale, float *dlogits, double *stats)
{
	double loss = 0, correct = 0;
	for (int i = 0; i < n; i++)
		correct += xent_row(k, logits + (size_t)i * k, labels[i], smooth, scale,
				    dlogits ? dlogits + (size_t)i * k : NULL, &loss);
	stats[0] = loss;
	stats[1] = correct;
}

static void cpu_mse(dp_bectx *ctx, int n, int k, const float *pred, const float *target,
		    float scale, float *dpred, double *stats)
{
	double loss = 0;
	float f = 2.0f / (float)k * scale;
	for (int i = 0; i < n; i++)
		loss += mse_row(k, pred + (size_t)i * k, target + (size_t)i * k, f,
				dpred ? dpred + (size_t)i * k : NULL);
	stats[0] = loss;
	stats[1] = 0;
}

static void cpu_softmax(dp_bectx *ctx, int n, int k, const float *x, float *y)
{
	for (int i = 0; i < n; i++)
		softmax_row(k, x + (size_t)i * k, y + (size_t)i * k);
}

/* ---- optimizers --------------------------------------------------------- */

HOT static void sgd(size_t n, float *p, const float *g, float *buf, const dp_sgd_args *a)
{
	dp_sgd_args v = *a;
	for (size_t i = 0; i < n; i++)
		sgd_one(&p[i], g[i], &buf[i], v);
}

static void sgd_part(void *arg, size_t lo, size_t hi)
{
	const ew_job *j = arg;
	sgd(hi - lo, j->y + lo, j->a + lo, j->m + lo, j->sgd);
}

/* p: y, g: a, buf: m */
static void cpu_sgd(dp_bectx *ctx, size_t n, float *p, const float *g, float *buf,
		    const dp_sgd_args *a)
{
	ew_job j = {.y = p, .a = g, .m = buf, .sgd = a};
	cpu_par_range(ctx, n, CPU_EW_MIN, sgd_part, &j);
}

HOT static void adam(size_t n, float *p, const float *g, float *m, float *v, const dp_adam_args *a)
{
	dp_adam_args w = *a;
	for (size_t i = 0; i < n; i++)
		adam_one(&p[i], g[i], &m[i], &v[i], w);
}

static void adam_part(void *arg, size_t lo, size_t hi)
{
	const ew_job *j = arg;
	adam(hi - lo, j->y + lo, j->a + lo, j->m + lo, j->w + lo, j->adam);
}

/* p: y, g: a, m: m, v: w */
static void cpu_adam(dp_bectx *ctx, size_t n, float *p, const float *g, float *m, float *v,
		     const dp_adam_args *a)
{
	ew_job j = {.y = p, .a = g, .m = m, .w = v, .adam = a};
	cpu_par_range(ctx, n, CPU_EW_MIN, adam_part, &j);
}

const dp_backend dp_backend_cpu = {
	.name = "cpu",
	.caps = DP_CAP_HOST_MEMORY,
	.open = cpu_open,
	.close = cpu_close,
	.alloc = cpu_alloc,
	.free = cpu_free,
	.host_alloc = cpu_alloc,
	.host_free = cpu_free,
	.upload = cpu_upload,
	.download = cpu_upload,
	.copy = cpu_upload,
	.stage = cpu_stage,
	.sync = cpu_sync,
	.fetch = cpu_upload, /* done when called: wait() has nothing to wait for */
	.wait = cpu_sync,
	.fill = cpu_fill,
	.scale = cpu_scale,
	.sumsq = cpu_sumsq,
	.dense_fwd = cpu_dense_fwd,
	.dense_bwd = cpu_dense_bwd,
	.conv_ws = cpu_conv_ws,
	.conv_fwd = cpu_conv_fwd,
	.conv_bwd = cpu_conv_bwd,
	.conv_algos = cpu_conv_algos,
	.conv_algos_take = cpu_conv_algos_take,
	.conv_explain = cpu_conv_explain,
	.maxpool_fwd = cpu_maxpool_fwd,
	.maxpool_bwd = cpu_maxpool_bwd,
	.avgpool_fwd = cpu_avgpool_fwd,
	.avgpool_bwd = cpu_avgpool_bwd,
	.act_fwd = cpu_act_fwd,
	.act_bwd = cpu_act_bwd,
	.add = cpu_add,
	.dropout_fwd = cpu_dropout_fwd,
	.dropout_bwd = cpu_dropout_bwd,
	.bnorm_sums = cpu_bnorm_sums,
	.bnorm_fwd = cpu_bnorm_fwd,
	.bnorm_bwd_sums = cpu_bnorm_bwd_sums,
	.bnorm_bwd = cpu_bnorm_bwd,
	.bnorm_fold = cpu_bnorm_fold,
	.xent = cpu_xent,
	.mse = cpu_mse,
	.softmax = cpu_softmax,
	.sgd = cpu_sgd,
	.adam = cpu_adam,
};
