/* convimpl.c - the CPU backend's convolution implementations, each forced
 * in turn (im2col, winograd, gemm, onednn, pointwise:
 * dp_backend_opts.conv_algo 1-5),
 * against the definition in double: forward with bias and activation, the
 * input, filter and bias gradients, over strides 1 and 2, 1x1, 3x3 and 7x7
 * kernels, planes from 1x1 to 15x15, padding that leaves the bottom rows
 * out; the choice per shape (measured, pinned, given) through conv_algos,
 * conv_algos_take and conv_explain; DP_CPU_CONV.  oneDNN's checks (onednn,
 * pointwise) skip in a build without it (said so). */
#define _GNU_SOURCE
#include "dp_backend.h"
#include "dp_rng.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>

static void fill(float *p, size_t n, uint64_t seed)
{
	dp_rng r = {dp_mix64(seed), 0};
	for (size_t i = 0; i < n; i++)
		p[i] = 2 * (float)dp_rng_unit(dp_rng_next(&r)) - 1;
}

/* max |got - want| / max |want| */
static double relerr(const float *got, const double *want, size_t n)
{
	double m = 0, scale = 1e-30;
	for (size_t i = 0; i < n; i++) {
		m = fmax(m, fabs(got[i] - want[i]));
		scale = fmax(scale, fabs(want[i]));
	}
	return m / scale;
}

typedef struct ref {
	double *y, *dx, *dw, *db;
} ref;

#define X(g, s, c, i, j) (((size_t)(s) * (g)->c + (c)) * (g)->h + (i)) * (g)->w + (j)
#define Y(g, s, k, i, j) (((size_t)(s) * (g)->k + (k)) * (g)->oh + (i)) * (g)->ow + (j)
#define W(g, k, c, i, j) (((size_t)(k) * (g)->c + (c)) * (g)->kh + (i)) * (g)->kw + (j)

/* The definition: y = act(conv(x, w) + b); for dy0 (before the
 * activation's derivative), dx, dw, db. */
static void reference(const dp_conv2d *g, const float *x, const float *w, const float *b, int act,
		      const float *dy0, ref *r)
{
	size_t ys = (size_t)g->n * g->k * g->oh * g->ow;
	double *dy = calloc(ys, sizeof *dy);
	for (int s = 0; s < g->n; s++)
		for (int k = 0; k < g->k; k++)
			for (int oy = 0; oy < g->oh; oy++)
				for (int ox = 0; ox < g->ow; ox++) {
					double acc = b[k];
					for (int c = 0; c < g->c; c++)
						for (int i = 0; i < g->kh; i++)
							for (int j = 0; j < g->kw; j++) {
								int iy = oy * g->sh - g->ph + i,
								    ix = ox * g->sw - g->pw + j;
								if (iy >= 0 && ix >= 0 && iy < g->h && ix < g->w)
									acc += (double)w[W(g, k, c, i, j)] *
									       x[X(g, s, c, iy, ix)];
							}
					size_t o = Y(g, s, k, oy, ox);
					double d = dy0[o];
					if (act == DP_ACT_RELU) {
						d = acc > 0 ? d : 0;
						acc = acc > 0 ? acc : 0;
					} else if (act == DP_ACT_TANH) {
						acc = tanh(acc);
						d *= 1 - acc * acc;
					}
					r->y[o] = acc;
					dy[o] = d;
				}
	memset(r->dx, 0, (size_t)g->n * g->c * g->h * g->w * sizeof *r->dx);
	memset(r->dw, 0, (size_t)g->k * g->c * g->kh * g->kw * sizeof *r->dw);
	memset(r->db, 0, (size_t)g->k * sizeof *r->db);
	for (int s = 0; s < g->n; s++)
		for (int k = 0; k < g->k; k++)
			for (int oy = 0; oy < g->oh; oy++)
				for (int ox = 0; ox < g->ow; ox++) {
					double d = dy[Y(g, s, k, oy, ox)];
					r->db[k] += d;
					for (int c = 0; c < g->c; c++)
						for (int i = 0; i < g->kh; i++)
							for (int j = 0; j < g->kw; j++) {
								int iy = oy * g->sh - g->ph + i,
								    ix = ox * g->sw - g->pw + j;
								if (iy < 0 || ix < 0 || iy >= g->h || ix >= g->w)
									continue;
								r->dx[X(g, s, c, iy, ix)] += d * w[W(g, k, c, i, j)];
								r->dw[W(g, k, c, i, j)] += d * x[X(g, s, c, iy, ix)];
							}
				}
	free(dy);
}

static const char *const names[] = {"", "im2col", "winograd", "gemm", "onednn", "pointwise"};

/* One shape through backend context ctx: forward and backward against
 * the reference, for act; the tests named by `what`. */
static void check(const dp_backend *be, dp_bectx *ctx, const dp_conv2d *g, int act,
		  const char *what, uint64_t seed)
{
	size_t xs = (size_t)g->n * g->c * g->h * g->w, ys = (size_t)g->n * g->k * g->oh * g->ow,
	       wn = (size_t)g->k * g->c * g->kh * g->kw;
	float *x = malloc(xs * 4), *w = malloc(wn * 4), *b = malloc((size_t)g->k * 4),
	      *y = malloc(ys * 4), *dy = malloc(ys * 4), *dy0 = malloc(ys * 4), *dx = malloc(xs * 4),
	      *dw = malloc(wn * 4), *db = malloc((size_t)g->k * 4);
	ref r = {malloc(ys * 8), malloc(xs * 8), malloc(wn * 8), malloc((size_t)g->k * 8)};
	fill(x, xs, seed);
	fill(w, wn, seed + 1);
	fill(b, (size_t)g->k, seed + 2);
	fill(dy0, ys, seed + 3);
	memcpy(dy, dy0, ys * 4);
	reference(g, x, w, b, act, dy0, &r);
	size_t wsz = be->conv_ws(ctx, g);
	void *ws = malloc(wsz + 64);
	be->conv_fwd(ctx, g, x, w, b, y, act, ws);
	be->conv_bwd(ctx, g, x, w, y, dy, dx, dw, db, act, ws);
	dp_err e;
	int synced = be->sync(ctx, &e) == DP_OK;
	double ey = relerr(y, r.y, ys), ex = relerr(dx, r.dx, xs), ew = relerr(dw, r.dw, wn),
	       eb = relerr(db, r.db, (size_t)g->k);
	ok(synced && ey < 1e-5 && ex < 1e-5 && ew < 1e-5 && eb < 1e-5,
	   "%s %dx%dx%dx%d -> %d, %dx%d /%d pad %d, act %d: y, dx, dw, db = the definition "
	   "(%.2g %.2g %.2g %.2g)",
	   what, g->n, g->c, g->h, g->w, g->k, g->kh, g->kw, g->sh, g->ph, act, ey, ex, ew, eb);
	/* without a bias, without dx (a first layer) */
	be->conv_fwd(ctx, g, x, w, NULL, y, DP_ACT_NONE, ws);
	double m = 0;
	for (size_t i = 0; i < ys; i++) {
		int k = (int)(i / ((size_t)g->oh * g->ow) % (size_t)g->k);
		double want = act == DP_ACT_NONE ? r.y[i] - b[k] : NAN;
		if (act == DP_ACT_NONE)
			m = fmax(m, fabs(y[i] - want));
	}
	memcpy(dy, dy0, ys * 4);
	be->conv_bwd(ctx, g, x, w, y, dy, NULL, dw, NULL, DP_ACT_NONE, ws);
	if (act == DP_ACT_NONE)
		ok(m < 1e-4 && relerr(dw, r.dw, wn) < 1e-5,
		   "%s: no bias, no input gradient (%.2g)", what, m);
	free(ws), free(x), free(w), free(b), free(y), free(dy), free(dy0), free(dx), free(dw);
	free(db), free(r.y), free(r.dx), free(r.dw), free(r.db);
}

/* n, c, h, w, k, kh, sh, ph */
static const int shapes[][8] = {
	{2, 8, 9, 9, 16, 3, 1, 1},   /* Winograd's, odd plane */
	{3, 16, 8, 8, 8, 3, 1, 1},
	{2, 8, 6, 7, 12, 3, 1, 0},   /* no padding */
	{2, 16, 2, 2, 16, 3, 1, 1},  /* 2x2 planes (layer4 at 64x64) */
	{4, 16, 9, 9, 24, 3, 2, 1},  /* stride 2, bottom row left out */
	{2, 8, 8, 8, 16, 1, 2, 0},   /* 1x1 stride 2 (a downsample) */
	{3, 12, 5, 5, 20, 1, 1, 0},  /* 1x1 stride 1 (pointwise) */
	{3, 16, 7, 9, 24, 1, 2, 0},  /* 1x1 stride 2 on an odd plane */
	{2, 6, 4, 5, 7, 1, 1, 1},    /* 1x1 padded (not ResNet's, but taken) */
	{2, 3, 15, 15, 8, 7, 2, 3},  /* 7x7 stride 2 (conv1) */
	{2, 4, 1, 1, 6, 3, 1, 1},    /* a 1x1 plane, all padding */
};

int main(void)
{
	dp_err e;
	const dp_backend *be = &dp_backend_cpu;
	int have_dnnl = 0;
	char desc[256];
	{
		dp_bectx *c;
		dp_backend_opts o = {.threads = 1, .device = -1, .conv_algo = 4};
		if (be->open(&c, &o, desc, sizeof desc, &e) == DP_OK) {
			have_dnnl = 1;
			be->close(c);
		} else {
			like(e.msg, "not in this build", "forcing oneDNN without it: said so (%s)", e.msg);
		}
	}
	if (!have_dnnl) {
		dp_bectx *c;
		dp_backend_opts o = {.threads = 1, .device = -1, .conv_algo = 5};
		ok(be->open(&c, &o, NULL, 0, &e) < 0 && strstr(e.msg, "not in this build"),
		   "forcing pointwise (oneDNN's SGEMM) without oneDNN: said so (%s)", e.msg);
	}
#ifdef DP_EXPECT_NO_DNNL /* Makefile: built over the backend without oneDNN */
	ok(!have_dnnl && !strstr(dp_build(), "oneDNN"), "a build without oneDNN: none (%s)",
	   dp_build());
#endif
	for (int algo = 1; algo <= 5; algo++) {
		if (algo >= 4 && !have_dnnl) {
			printf("# no oneDNN in this build: %s is not checked\n", names[algo]);
			continue;
		}
		for (int threads = 1; threads <= 2; threads++) {
			dp_bectx *c;
			dp_backend_opts o = {.threads = threads, .device = -1, .conv_algo = algo};
			if (!ok(be->open(&c, &o, NULL, 0, &e) == DP_OK, "open, %s, %d threads",
				names[algo], threads))
				continue;
			for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
				const int *S = shapes[si];
				dp_conv2d g = {S[0], S[1], S[2], S[3], S[4], 0, 0, S[5], S[5], S[6], S[6], S[7], S[7]};
				g.oh = (g.h + 2 * g.ph - g.kh) / g.sh + 1;
				g.ow = (g.w + 2 * g.pw - g.kw) / g.sw + 1;
				for (int act = 0; act <= 2; act += threads == 1 ? 1 : 2) {
					char what[64];
					snprintf(what, sizeof what, "%s, %d thread%s", names[algo], threads,
						 threads > 1 ? "s" : "");
					check(be, c, &g, act, what, 10 * si + (uint64_t)act);
				}
				/* a smaller batch of a bound shape: its choices, in its
				 * workspace; at 2 threads one sample, whose GEMMs the
				 * threads share instead of the samples */
				if (g.n > 1) {
					dp_conv2d s = g;
					s.n = 1;
					check(be, c, &s, DP_ACT_RELU,
					      threads == 1 ? "smaller batch" : "a batch of 1, 2 threads",
					      77 + si);
				}
			}
			char t[4096];
			int n = be->conv_algos(c, t, sizeof t);
			ok(n > 0 && strstr(t, "|2x8x9x9-16x3x3-s1x1-p1x1=") &&
				   strstr(t, algo == 2 ? "=winograd,winograd,winograd" : names[algo]),
			   "%s: conv_algos names the shapes and the implementation", names[algo]);
			be->close(c);
		}
	}

	/* measured, pinned, given */
	dp_bectx *m, *p1, *p2, *gv;
	dp_backend_opts om = {.threads = 1, .device = -1}, op = {.threads = 1, .device = -1,
								 .deterministic = 1};
	be->open(&m, &om, NULL, 0, &e);
	be->open(&p1, &op, NULL, 0, &e);
	be->open(&p2, &op, NULL, 0, &e);
	dp_conv2d g4 = {16, 64, 8, 8, 64, 8, 8, 3, 3, 1, 1, 1, 1},
		  g7 = {8, 16, 14, 14, 32, 7, 7, 3, 3, 2, 2, 1, 1};
	char tm[4096], t1[4096], t2[4096], ex[512];
	for (int i = 0; i < 2; i++) {
		const dp_conv2d *g = i ? &g7 : &g4;
		be->conv_ws(m, g);
		be->conv_ws(p1, g);
		be->conv_ws(p2, g);
	}
	be->conv_algos(m, tm, sizeof tm);
	be->conv_algos(p1, t1, sizeof t1);
	be->conv_algos(p2, t2, sizeof t2);
	is_str(t1, t2, "pinned: the same choices twice, untimed");
	ok(be->conv_explain(m, &g4, ex, sizeof ex) > 0 && strstr(ex, "measured:") &&
		   strstr(ex, "im2col ") && strstr(ex, " ms"),
	   "conv_explain: measured, with every candidate's time (%s)", ex);
	ok(be->conv_explain(p1, &g4, ex, sizeof ex) > 0 && strstr(ex, "pinned:") && !strstr(ex, " ms"),
	   "conv_explain: pinned, nothing timed (%s)", ex);
	dp_conv2d tiny = {2, 8, 4, 4, 8, 4, 4, 3, 3, 1, 1, 1, 1};
	be->conv_ws(m, &tiny);
	ok(be->conv_explain(m, &tiny, ex, sizeof ex) > 0 && strstr(ex, "too small to time") &&
		   !strstr(ex, " ms"),
	   "a shape of few multiply-adds: the pinned choice, untimed (%s)", ex);
	dp_conv2d never = g4;
	never.k = 3;
	is_int(be->conv_explain(m, &never, ex, sizeof ex), -1, "conv_explain of a shape not seen: -1");
	ok(be->conv_algos(m, tm, 10) == -1, "conv_algos: -1 when it does not fit");
	/* given: another's choices (every pass im2col) taken by a measured instance */
	char give[4096];
	be->conv_algos(m, tm, sizeof tm);
	snprintf(give, sizeof give, "%.*s|16x64x8x8-64x3x3-s1x1-p1x1=im2col,im2col,im2col;"
				    "8x16x14x14-32x3x3-s2x2-p1x1=gemm,im2col,gemm",
		 (int)(strchr(tm, '|') - tm), tm);
	dp_backend_opts og = {.threads = 1, .device = -1, .algos = give};
	be->open(&gv, &og, NULL, 0, &e);
	be->conv_ws(gv, &g4);
	be->conv_ws(gv, &g7);
	char tg[4096];
	be->conv_algos(gv, tg, sizeof tg);
	ok(strstr(tg, "16x64x8x8-64x3x3-s1x1-p1x1=im2col,im2col,im2col") &&
		   strstr(tg, "8x16x14x14-32x3x3-s2x2-p1x1=gemm,im2col,gemm"),
	   "dp_backend_opts.algos: the choices given are taken (%s)", tg);
	ok(be->conv_explain(gv, &g4, ex, sizeof ex) > 0 && strstr(ex, "given:"), "...and said so");
	int changed = be->conv_algos_take(m, give);
	be->conv_algos(m, tm, sizeof tm);
	ok(changed >= 0 && strstr(tm, "16x64x8x8-64x3x3-s1x1-p1x1=im2col,im2col,im2col"),
	   "conv_algos_take: taken after binding (%d changed)", changed);
	/* from another machine or thread count: ignored */
	int n0 = be->conv_algos_take(p1, "cpu (OpenBLAS Other, no oneDNN)/fp32/64 threads|"
					  "16x64x8x8-64x3x3-s1x1-p1x1=im2col,im2col,im2col");
	be->conv_algos(p1, tg, sizeof tg);
	ok(n0 == 0 && !strcmp(tg, t1), "another CPU's or thread count's choices: ignored");
	/* a choice that cannot run the shape (Winograd on a stride-2 layer): ignored */
	snprintf(give, sizeof give, "%.*s|8x16x14x14-32x3x3-s2x2-p1x1=winograd,im2col,im2col",
		 (int)(strchr(t1, '|') - t1), t1);
	n0 = be->conv_algos_take(p1, give);
	be->conv_algos(p1, tg, sizeof tg);
	ok(n0 == 0 && !strcmp(tg, t1), "a choice that does not apply to the shape: ignored");
	snprintf(give, sizeof give, "%.*s|8x16x14x14-32x3x3-s2x2-p1x1=pointwise,im2col,im2col",
		 (int)(strchr(t1, '|') - t1), t1);
	n0 = be->conv_algos_take(p1, give);
	be->conv_algos(p1, tg, sizeof tg);
	ok(n0 == 0 && !strcmp(tg, t1), "pointwise on a 3x3 layer: ignored");
	if (have_dnnl) { /* on a 1x1 stride-2 layer, a checkpoint's choice: taken */
		dp_conv2d g1 = {8, 32, 14, 14, 64, 7, 7, 1, 1, 2, 2, 0, 0};
		be->conv_ws(p1, &g1);
		snprintf(give, sizeof give, "%.*s|8x32x14x14-64x1x1-s2x2-p0x0=pointwise,pointwise,im2col",
			 (int)(strchr(t1, '|') - t1), t1);
		n0 = be->conv_algos_take(p1, give);
		be->conv_algos(p1, tg, sizeof tg);
		ok(n0 == 1 && strstr(tg, "8x32x14x14-64x1x1-s2x2-p0x0=pointwise,pointwise,im2col"),
		   "pointwise on a 1x1 layer: taken (%s)", tg);
	}
	be->close(m);
	be->close(p1);
	be->close(p2);
	be->close(gv);

	/* DP_CPU_CONV */
	dp_bectx *c;
	dp_setting_set("DP_CPU_CONV", "fft");
	ok(be->open(&c, &om, NULL, 0, &e) < 0 && strstr(e.msg, "DP_CPU_CONV=fft") &&
		   strstr(e.msg, "im2col, winograd, gemm, onednn, pointwise"),
	   "DP_CPU_CONV=fft: refused, the names listed (%s)", e.msg);
	dp_setting_set("DP_CPU_CONV", "gemm");
	if (ok(be->open(&c, &om, NULL, 0, &e) == DP_OK, "DP_CPU_CONV=gemm")) {
		be->conv_ws(c, &g4);
		be->conv_algos(c, tm, sizeof tm);
		like(tm, "=gemm,gemm,gemm", "...every pass of a shape it takes runs it");
		be->close(c);
	}
	dp_setting_set("DP_CPU_CONV", NULL);
	return done_testing();
}
