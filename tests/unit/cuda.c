/* cuda.c - the CUDA backend against the CPU reference, operation by
 * operation, then whole models (make BACKEND=cuda check, on a machine with
 * a GPU).  Elsewhere it skips: in a CPU build ("not a CUDA build") and
 * where no device is found ("no CUDA device: ...").
 *
 * Tolerances, and why:
 *  - exact: memory moves, staging, dropout (same dp_rng masks), pooling
 *    (same comparisons, same order of additions), relu, the optimizer
 *    updates (the same float formulas, both compiled without FMA
 *    contraction), and every GPU result run twice (determinism);
 *  - 2e-5 of the largest magnitude: GEMM-based layers (other summation
 *    orders), batch norm, tanh and sigmoid (CUDA's tanhf/expf are within
 *    2 ulp), the losses;
 *  - tf32 2e-3, bf16 2e-2 (8 bits of mantissa) for matrix products;
 *  - whole models: the loss of each of 30 steps within 1e-3 relative of
 *    the CPU's, the final weights within 1e-3 of the largest weight.
 * The convolutions run with a tiny workspace budget too, so that the
 * batch is split into chunks (DP_CUDA_CONV_BUDGET). */
#define _GNU_SOURCE
#include "dp.h"
#include "dp_backend.h"
#include "dp_nn.h"
#include "dp_optim.h"
#include "dp_rng.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const dp_backend *G, *C = &dp_backend_cpu;
static dp_bectx *gc, *cc;

static void fill(float *p, size_t n, uint64_t seed)
{
	dp_rng r = {dp_mix64(seed + 1), 0};
	for (size_t i = 0; i < n; i++)
		p[i] = 2 * dp_rng_unit(dp_rng_next(&r)) - 1;
}

static float *rnd(size_t n, uint64_t seed)
{
	float *p = malloc((n ? n : 1) * sizeof *p);
	fill(p, n, seed);
	return p;
}

/* A device copy of n host floats (bytes for other types). */
static void *up(dp_bectx *c, const void *h, size_t bytes)
{
	void *d = G->alloc(c, bytes ? bytes : 4);
	if (bytes)
		G->upload(c, d, h, bytes);
	return d;
}

static float *down(dp_bectx *c, const void *d, size_t n)
{
	float *h = malloc((n ? n : 1) * sizeof *h);
	G->download(c, h, d, n * sizeof *h);
	return h;
}

/* max |a - b| / max(max |b|, tiny) */
static double rel(const float *a, const float *b, size_t n)
{
	double m = 0, s = 0;
	for (size_t i = 0; i < n; i++) {
		s = fmax(s, fabs(b[i]));
		double d = fabs((double)a[i] - b[i]);
		if (isnan(d))
			return INFINITY;
		m = fmax(m, d);
	}
	return m / fmax(s, 1e-30);
}

static int same(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

static void near(const float *got, const float *want, size_t n, double tol, const char *what)
{
	double r = rel(got, want, n);
	if (!ok(r <= tol, "%s: within %.0e (%.2e)", what, tol, r))
		printf("#   first values: got %g %g, want %g %g\n", got[0], n > 1 ? got[1] : 0, want[0],
		       n > 1 ? want[1] : 0);
}

static void exact(const void *got, const void *want, size_t bytes, const char *what)
{
	ok(same(got, want, bytes), "%s: bit for bit", what);
}

static int check_sync(dp_bectx *c, const char *what)
{
	dp_err e;
	int rc = G->sync(c, &e);
	if (!ok(rc == DP_OK, "%s: no device error", what))
		printf("#   %s\n", e.msg);
	return rc;
}

/* ---- memory ------------------------------------------------------------------ */

static void t_memory(void)
{
	size_t n = 1000;
	float *a = rnd(n, 1), *b = malloc(n * 4);
	float *d = up(gc, a, n * 4), *d2 = G->alloc(gc, n * 4);
	G->copy(gc, d2, d, n * 4);
	G->download(gc, b, d2, n * 4);
	exact(b, a, n * 4, "upload, copy, download");
	G->scale(gc, d2, 0.5f, n);
	G->download(gc, b, d2, n * 4);
	int good = 1;
	for (size_t i = 0; i < n; i++)
		good &= b[i] == a[i] * 0.5f;
	ok(good, "scale");
	G->fill(gc, d2, 3.25f, n);
	G->download(gc, b, d2, n * 4);
	good = 1;
	for (size_t i = 0; i < n; i++)
		good &= b[i] == 3.25f;
	ok(good, "fill");

	/* stage: pinned host memory, two buffers in turn, the right bytes in each */
	float *h = G->host_alloc(gc, n * 4);
	ok(h != NULL, "host_alloc");
	const float *p[4];
	float *got[4];
	for (int k = 0; k < 4; k++) {
		fill(h, n, 100 + k);
		p[k] = G->stage(gc, d, h, n * 4);
		got[k] = G->alloc(gc, n * 4);
		G->copy(gc, got[k], p[k], n * 4); /* queued work reading the staged bytes */
		G->sync(gc, NULL);                /* the host buffer may change after this */
	}
	ok(p[0] == d && p[2] == d && p[1] != d && p[1] == p[3], "stage alternates two buffers");
	good = 1;
	for (int k = 0; k < 4; k++) {
		float *w = rnd(n, 100 + k), *g = down(gc, got[k], n);
		good &= same(w, g, n * 4);
		free(w);
		free(g);
		G->free(gc, got[k]);
	}
	ok(good, "every staged batch arrived intact");
	G->host_free(gc, h);
	G->free(gc, d);
	G->free(gc, d2);
	free(a);
	free(b);
	check_sync(gc, "memory");
}

/* ---- dense ------------------------------------------------------------------- */

/* bias 0: b and db NULL (no bias) on both backends. */
static void t_dense(dp_bectx *g, int n, int in, int out, int act, double tol, const char *tag,
		    int bias)
{
	char what[160];
	size_t xn = (size_t)n * in, wn = (size_t)out * in, yn = (size_t)n * out;
	float *x = rnd(xn, 1), *w = rnd(wn, 2), *b = rnd((size_t)out, 3), *dy = rnd(yn, 4);
	float *y = malloc(yn * 4), *dx = malloc(xn * 4), *dw = malloc(wn * 4), *db = malloc(out * 4);
	float *dyc = malloc(yn * 4);
	memcpy(dyc, dy, yn * 4);
	C->dense_fwd(cc, n, in, out, x, w, bias ? b : NULL, y, act);
	C->dense_bwd(cc, n, in, out, x, w, y, dyc, dx, dw, bias ? db : NULL, act);

	float *gx = up(g, x, xn * 4), *gw = up(g, w, wn * 4), *gb = up(g, b, out * 4),
	      *gy = G->alloc(g, yn * 4), *gdy = up(g, dy, yn * 4), *gdx = G->alloc(g, xn * 4),
	      *gdw = G->alloc(g, wn * 4), *gdb = G->alloc(g, out * 4);
	G->dense_fwd(g, n, in, out, gx, gw, bias ? gb : NULL, gy, act);
	float *hy = down(g, gy, yn);
	snprintf(what, sizeof what, "%s dense %dx%d->%d act %d%s forward", tag, n, in, out, act,
		 bias ? "" : " no bias");
	near(hy, y, yn, tol, what);
	/* backward from the CPU's forward output, so that relu's mask agrees */
	G->upload(g, gy, y, yn * 4);
	G->dense_bwd(g, n, in, out, gx, gw, gy, gdy, gdx, gdw, bias ? gdb : NULL, act);
	float *hdx = down(g, gdx, xn), *hdw = down(g, gdw, wn), *hdb = down(g, gdb, out);
	snprintf(what, sizeof what, "%s dense %dx%d->%d act %d dx", tag, n, in, out, act);
	near(hdx, dx, xn, tol, what);
	snprintf(what, sizeof what, "%s dense %dx%d->%d act %d dw", tag, n, in, out, act);
	near(hdw, dw, wn, tol, what);
	snprintf(what, sizeof what, "%s dense %dx%d->%d act %d db", tag, n, in, out, act);
	if (bias)
		near(hdb, db, out, tol < 2e-5 ? 2e-5 : tol, what);
	/* dx NULL: weights only */
	G->upload(g, gdy, dy, yn * 4);
	G->dense_bwd(g, n, in, out, gx, gw, gy, gdy, NULL, gdw, bias ? gdb : NULL, act);
	float *hdw2 = down(g, gdw, wn);
	snprintf(what, sizeof what, "%s dense %dx%d->%d without dx: same dw", tag, n, in, out);
	exact(hdw2, hdw, wn * 4, what);
	check_sync(g, "dense");
	void *f[] = {gx, gw, gb, gy, gdy, gdx, gdw, gdb};
	for (size_t i = 0; i < 8; i++)
		G->free(g, f[i]);
	void *h[] = {x, w, b, dy, y, dx, dw, db, dyc, hy, hdx, hdw, hdb, hdw2};
	for (size_t i = 0; i < sizeof h / sizeof h[0]; i++)
		free(h[i]);
}

/* ---- convolution -------------------------------------------------------------- */

/* bias 0: b and db NULL (no bias) on both backends. */
static void t_conv(dp_bectx *g, dp_conv2d geo, int act, double tol, const char *tag, int bias)
{
	char what[200], name[120];
	dp_conv2d *q = &geo;
	snprintf(name, sizeof name, "%s conv n%d c%d %dx%d k%d %dx%d s%dx%d p%dx%d act %d%s", tag,
		 q->n, q->c, q->h, q->w, q->k, q->kh, q->kw, q->sh, q->sw, q->ph, q->pw, act,
		 bias ? "" : " no bias");
	size_t xn = (size_t)q->n * q->c * q->h * q->w, wn = (size_t)q->k * q->c * q->kh * q->kw,
	       yn = (size_t)q->n * q->k * q->oh * q->ow;
	float *x = rnd(xn, 11), *w = rnd(wn, 12), *b = rnd((size_t)q->k, 13), *dy = rnd(yn, 14);
	float *y = malloc(yn * 4), *dx = malloc(xn * 4), *dw = malloc(wn * 4), *db = malloc(q->k * 4);
	float *dyc = malloc(yn * 4);
	memcpy(dyc, dy, yn * 4);
	void *cws = malloc(C->conv_ws(cc, q) + 64);
	C->conv_fwd(cc, q, x, w, bias ? b : NULL, y, act, cws);
	C->conv_bwd(cc, q, x, w, y, dyc, dx, dw, bias ? db : NULL, act, cws);

	float *gx = up(g, x, xn * 4), *gw = up(g, w, wn * 4), *gb = up(g, b, q->k * 4),
	      *gy = G->alloc(g, yn * 4), *gdy = up(g, dy, yn * 4), *gdx = G->alloc(g, xn * 4),
	      *gdw = G->alloc(g, wn * 4), *gdb = G->alloc(g, q->k * 4);
	void *gws = G->alloc(g, G->conv_ws(g, q));
	G->conv_fwd(g, q, gx, gw, bias ? gb : NULL, gy, act, gws);
	float *hy = down(g, gy, yn);
	snprintf(what, sizeof what, "%s forward", name);
	near(hy, y, yn, tol, what);
	G->upload(g, gy, y, yn * 4);
	G->conv_bwd(g, q, gx, gw, gy, gdy, gdx, gdw, bias ? gdb : NULL, act, gws);
	float *hdx = down(g, gdx, xn), *hdw = down(g, gdw, wn), *hdb = down(g, gdb, q->k);
	snprintf(what, sizeof what, "%s dx", name);
	near(hdx, dx, xn, tol, what);
	snprintf(what, sizeof what, "%s dw", name);
	near(hdw, dw, wn, tol, what);
	snprintf(what, sizeof what, "%s db", name);
	if (bias)
		near(hdb, db, q->k, tol < 2e-5 ? 2e-5 : tol, what);
	/* again: the same bits */
	G->upload(g, gdy, dy, yn * 4);
	G->conv_bwd(g, q, gx, gw, gy, gdy, gdx, gdw, bias ? gdb : NULL, act, gws);
	float *hdx2 = down(g, gdx, xn), *hdw2 = down(g, gdw, wn);
	snprintf(what, sizeof what, "%s backward twice", name);
	ok(same(hdx, hdx2, xn * 4) && same(hdw, hdw2, wn * 4), "%s: the same bits", what);
	check_sync(g, "conv");
	void *f[] = {gx, gw, gb, gy, gdy, gdx, gdw, gdb, gws};
	for (size_t i = 0; i < 9; i++)
		G->free(g, f[i]);
	void *h[] = {x, w, b, dy, y, dx, dw, db, dyc, cws, hy, hdx, hdw, hdb, hdx2, hdw2};
	for (size_t i = 0; i < sizeof h / sizeof h[0]; i++)
		free(h[i]);
}

static dp_conv2d conv_geo(int n, int c, int h, int w, int k, int kh, int kw, int sh, int sw, int ph,
			  int pw)
{
	dp_conv2d g = {n, c, h, w, k, (h + 2 * ph - kh) / sh + 1, (w + 2 * pw - kw) / sw + 1,
		       kh, kw, sh, sw, ph, pw};
	return g;
}

/* ---- pooling ------------------------------------------------------------------ */

static void t_pool(dp_pool2d q)
{
	char name[120];
	snprintf(name, sizeof name, "pool n%d c%d %dx%d window %dx%d stride %dx%d pad %dx%d", q.n,
		 q.c, q.h, q.w, q.kh, q.kw, q.sh, q.sw, q.ph, q.pw);
	size_t xn = (size_t)q.n * q.c * q.h * q.w, yn = (size_t)q.n * q.c * q.oh * q.ow;
	float *x = rnd(xn, 21), *dy = rnd(yn, 22), *y = malloc(yn * 4), *dx = malloc(xn * 4);
	int32_t *arg = malloc(yn * 4);
	x[3] = x[4]; /* a tie: the first one wins */
	int padded = q.ph || q.pw;
	if (padded) { /* NaN propagates; -infinity still beats the padding */
		x[q.w + 1] = NAN;
		x[0] = -INFINITY;
	}
	float *gx = up(gc, x, xn * 4), *gy = G->alloc(gc, yn * 4), *gdy = up(gc, dy, yn * 4),
	      *gdx = G->alloc(gc, xn * 4);
	int32_t *garg = G->alloc(gc, yn * 4);
	C->maxpool_fwd(cc, &q, x, y, arg);
	C->maxpool_bwd(cc, &q, dy, arg, dx);
	G->maxpool_fwd(gc, &q, gx, gy, garg);
	G->maxpool_bwd(gc, &q, gdy, garg, gdx);
	float *hy = down(gc, gy, yn), *hdx = down(gc, gdx, xn), *harg = down(gc, garg, yn);
	char what[200];
	snprintf(what, sizeof what, "max%s forward", name);
	exact(hy, y, yn * 4, what);
	snprintf(what, sizeof what, "max%s argmax", name);
	exact(harg, arg, yn * 4, what);
	snprintf(what, sizeof what, "max%s backward", name);
	exact(hdx, dx, xn * 4, what);
	if (padded) { /* average pooling has no padding */
		free(hy);
		free(hdx);
		hy = hdx = NULL;
		goto out;
	}
	C->avgpool_fwd(cc, &q, x, y);
	C->avgpool_bwd(cc, &q, dy, dx);
	G->avgpool_fwd(gc, &q, gx, gy);
	G->avgpool_bwd(gc, &q, gdy, gdx);
	free(hy);
	free(hdx);
	hy = down(gc, gy, yn);
	hdx = down(gc, gdx, xn);
	snprintf(what, sizeof what, "avg%s forward", name);
	exact(hy, y, yn * 4, what);
	snprintf(what, sizeof what, "avg%s backward", name);
	exact(hdx, dx, xn * 4, what);
out:
	check_sync(gc, "pooling");
	G->free(gc, gx);
	G->free(gc, gy);
	G->free(gc, gdy);
	G->free(gc, gdx);
	G->free(gc, garg);
	void *h[] = {x, dy, y, dx, arg, hy, hdx, harg};
	for (size_t i = 0; i < sizeof h / sizeof h[0]; i++)
		free(h[i]);
}

/* ---- elementwise: activations, dropout ---------------------------------------- */

static void t_elementwise(void)
{
	size_t n = 5000;
	float *x = rnd(n, 31), *dy = rnd(n, 32), *y = malloc(n * 4), *dx = malloc(n * 4);
	for (size_t i = 0; i < n; i++)
		x[i] *= 6; /* tanh and sigmoid away from their linear part */
	float *gx = up(gc, x, n * 4), *gy = G->alloc(gc, n * 4), *gdy = up(gc, dy, n * 4),
	      *gdx = G->alloc(gc, n * 4);
	static const char *const names[] = {"", "relu", "tanh", "sigmoid"};
	for (int act = DP_ACT_RELU; act <= DP_ACT_SIGMOID; act++) {
		char what[64];
		C->act_fwd(cc, act, n, x, y);
		C->act_bwd(cc, act, n, y, dy, dx);
		G->act_fwd(gc, act, n, gx, gy);
		G->upload(gc, gy, y, n * 4);
		G->act_bwd(gc, act, n, gy, gdy, gdx);
		float *hdx = down(gc, gdx, n);
		G->act_fwd(gc, act, n, gx, gy);
		float *hy = down(gc, gy, n);
		snprintf(what, sizeof what, "%s forward", names[act]);
		if (act == DP_ACT_RELU)
			exact(hy, y, n * 4, what);
		else
			near(hy, y, n, 2e-6, what);
		snprintf(what, sizeof what, "%s backward", names[act]);
		if (act == DP_ACT_RELU)
			exact(hdx, dx, n * 4, what);
		else
			near(hdx, dx, n, 2e-6, what);
		free(hy);
		free(hdx);
	}
	/* in place, as nn.c calls them */
	G->upload(gc, gy, x, n * 4);
	G->act_fwd(gc, DP_ACT_TANH, n, gy, gy);
	float *hy = down(gc, gy, n);
	C->act_fwd(cc, DP_ACT_TANH, n, x, y);
	near(hy, y, n, 2e-6, "tanh in place");
	free(hy);

	/* dropout: the masks of dp_rng.h, a batch that starts at sample 3 */
	dp_dropout d = {dp_rng_key(7, 1, (uint64_t[]){DP_RNG_DROPOUT}), 3, 250, (uint32_t)(0.3 * 4294967296.0),
			1.0f / 0.7f};
	C->dropout_fwd(cc, &d, 20, x, y);
	C->dropout_bwd(cc, &d, 20, dy, dx);
	G->dropout_fwd(gc, &d, 20, gx, gy);
	G->dropout_bwd(gc, &d, 20, gdy, gdx);
	float *hd = down(gc, gy, n), *hdd = down(gc, gdx, n);
	exact(hd, y, n * 4, "dropout forward: the CPU's mask");
	exact(hdd, dx, n * 4, "dropout backward: the same mask again");
	size_t zeros = 0;
	for (size_t i = 0; i < n; i++)
		zeros += hd[i] == 0;
	ok(zeros > n / 5 && zeros < n * 2 / 5, "dropout 0.3 zeroes about 30%% (%zu of %zu)", zeros, n);
	free(hd);
	free(hdd);
	check_sync(gc, "elementwise");
	G->free(gc, gx);
	G->free(gc, gy);
	G->free(gc, gdy);
	G->free(gc, gdx);
	free(x);
	free(dy);
	free(y);
	free(dx);
}

/* ---- batch normalisation ------------------------------------------------------ */

/* Every batch-norm mode on backend B, host inputs to host outputs (o[i]
 * malloc'ed, bn_len(i) floats): 0-6 training on this batch's statistics
 * (y, save, running mean, running variance, dx, dgamma, dbeta); 7-13 the
 * same with given sums (those of bnorm_sums over this batch counted twice,
 * as two ranks with the same data); 14-15 inference (y, save); 16-18 the
 * backward of a frozen (eval) layer (dx, dgamma, dbeta).  sums[0]
 * receives bnorm_sums, sums[1] bnorm_bwd_sums (2c doubles each). */
enum { BN_OUTS = 19 };
static size_t bn_len(int i, size_t xn, int c)
{
	static const char kind[BN_OUTS + 1] = "xscc" "xcc" "xscc" "xcc" "xs" "xcc";
	return kind[i] == 'x' ? xn : kind[i] == 's' ? 2 * (size_t)c : (size_t)c;
}

static void bn_run(const dp_backend *B, dp_bectx *k, dp_bnorm q, const float *x, const float *dy,
		   const float *gam, const float *bet, float **o, double sums[2][64])
{
	int c = q.c;
	size_t xn = (size_t)q.n * c * q.hw;
	float *rv1 = malloc(c * 4);
	for (int i = 0; i < c; i++)
		rv1[i] = 1;
	float *d[BN_OUTS];
	for (int i = 0; i < BN_OUTS; i++)
		d[i] = B->alloc(k, bn_len(i, xn, c) * 4);
	/* B's own memory (up() is the GPU's: a CPU context passed to the GPU's
	 * alloc gave device memory that the CPU backend then read: a crash on a
	 * real GPU, unseen under tests/cudaemu, where device memory is host's) */
	float *gx = B->alloc(k, xn * 4), *gdy = B->alloc(k, xn * 4), *ggam = B->alloc(k, c * 4),
	      *gbet = B->alloc(k, c * 4);
	B->upload(k, gx, x, xn * 4);
	B->upload(k, ggam, gam, c * 4);
	B->upload(k, gbet, bet, c * 4);
	double *gs = B->alloc(k, 2 * c * 8), *gs2 = B->alloc(k, 2 * c * 8);
	for (int r = 0; r < 2; r++) { /* running statistics from 0 and 1 */
		B->fill(k, d[2 + 7 * r], 0, c);
		B->upload(k, d[3 + 7 * r], rv1, c * 4);
	}
	B->bnorm_fwd(k, &q, 1, gx, ggam, gbet, d[2], d[3], NULL, d[1], d[0]);
	B->upload(k, gdy, dy, xn * 4);
	B->bnorm_bwd(k, &q, gx, ggam, d[1], NULL, NULL, gdy, d[4], d[5], d[6]);
	/* given sums: two ranks with this batch each */
	B->bnorm_sums(k, &q, gx, gs);
	B->download(k, sums[0], gs, 2 * c * 8);
	double twice[128];
	for (int i = 0; i < 2 * c; i++)
		twice[i] = 2 * sums[0][i];
	B->upload(k, gs2, twice, 2 * c * 8);
	dp_bnorm q2 = q;
	q2.count = 2.0 * q.n * q.hw;
	B->bnorm_fwd(k, &q2, 1, gx, ggam, gbet, d[9], d[10], gs2, d[8], d[7]);
	B->bnorm_bwd_sums(k, &q2, gx, d[8], NULL, gdy, gs);
	B->download(k, sums[1], gs, 2 * c * 8);
	for (int i = 0; i < 2 * c; i++)
		twice[i] = 2 * sums[1][i];
	B->upload(k, gs2, twice, 2 * c * 8);
	B->bnorm_bwd(k, &q2, gx, ggam, d[8], gs2, NULL, gdy, d[11], d[12], d[13]);
	/* inference on the running statistics of the first forward, then
	 * the backward of that forward as a frozen layer's */
	B->bnorm_fwd(k, &q, 0, gx, ggam, gbet, d[2], d[3], NULL, d[15], d[14]);
	dp_bnorm qe = q;
	qe.eval = 1;
	B->upload(k, gdy, dy, xn * 4);
	B->bnorm_bwd(k, &qe, gx, ggam, d[15], NULL, NULL, gdy, d[16], d[17], d[18]);
	for (int i = 0; i < BN_OUTS; i++) {
		o[i] = malloc(bn_len(i, xn, c) * 4);
		B->download(k, o[i], d[i], bn_len(i, xn, c) * 4);
		B->free(k, d[i]);
	}
	void *f[] = {gx, gdy, ggam, gbet, gs, gs2};
	for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
		B->free(k, f[i]);
	free(rv1);
}

static void t_bnorm(int n, int c, int hw)
{
	static const char *const what[BN_OUTS] = {
		"training forward", "saved mean and 1/std", "running mean", "running variance",
		"dx", "dgamma", "dbeta",
		"forward, given sums", "saved, given sums", "running mean, given sums",
		"running variance, given sums", "dx, given sums", "dgamma, given sums",
		"dbeta, given sums", "inference forward", "inference: saved statistics",
		"frozen layer dx", "frozen layer dgamma", "frozen layer dbeta"};
	static const double tol[BN_OUTS] = {2e-5, 2e-6, 2e-6, 2e-6, 2e-5, 2e-5, 2e-5,
					    2e-5, 2e-6, 2e-6, 2e-6, 2e-5, 2e-5, 2e-5,
					    2e-6, 2e-6, 2e-6, 2e-5, 2e-5};
	dp_bnorm q = {n, c, hw, 1e-5f, 0.1f, 0, 0, DP_ACT_NONE};
	size_t xn = (size_t)n * c * hw;
	float *x = rnd(xn, 41), *dy = rnd(xn, 42), *gam = rnd(c, 43), *bet = rnd(c, 44);
	for (size_t i = 0; i < xn; i++)
		x[i] = 3 * x[i] + 0.5f;
	float *co[BN_OUTS], *go[BN_OUTS];
	double cs[2][64], gs[2][64];
	bn_run(C, cc, q, x, dy, gam, bet, co, cs);
	bn_run(G, gc, q, x, dy, gam, bet, go, gs);
	char name[120];
	for (int i = 0; i < BN_OUTS; i++) {
		snprintf(name, sizeof name, "batchnorm n%d c%d hw%d %s", n, c, hw, what[i]);
		near(go[i], co[i], bn_len(i, xn, c), tol[i], name);
	}
	for (int j = 0; j < 2; j++) {
		double m = 0, s = 0;
		for (int i = 0; i < 2 * c; i++) {
			m = fmax(m, fabs(gs[j][i] - cs[j][i]));
			s = fmax(s, fabs(cs[j][i]));
		}
		ok(m <= 1e-6 * fmax(s, 1e-30), "batchnorm n%d c%d hw%d %s sums: within 1e-6 (%.2e)",
		   n, c, hw, j ? "gradient" : "forward", m / fmax(s, 1e-30));
	}
	/* the CPU's given-sums mode with twice the batch is its own batch mode */
	snprintf(name, sizeof name, "batchnorm n%d c%d hw%d CPU: sums of 2 ranks = own batch", n, c,
		 hw);
	near(co[7], co[0], xn, 1e-5, name);
	near(co[11], co[4], xn, 1e-5, name);
	check_sync(gc, "batchnorm");
	for (int i = 0; i < BN_OUTS; i++) {
		free(co[i]);
		free(go[i]);
	}
	void *h[] = {x, dy, gam, bet};
	for (size_t i = 0; i < sizeof h / sizeof h[0]; i++)
		free(h[i]);
}

/* ---- residual connections: add ------------------------------------------------- */

/* Batchnorm with a fused ReLU (dp_bnorm.act) on backend B against the two
 * layers one after the other (bnorm_fwd, act_fwd in place; act_bwd in
 * place, then the batchnorm's backward): the same bits on each backend.
 * Outputs, host (o[i], bnr_len(i) floats): 0-6 training (y, save,
 * running mean, running variance, dx, dgamma, dbeta), 7-10 the backward
 * with given sums (bnorm_bwd_sums' 2c doubles, dx, dgamma, dbeta), 11-14
 * inference and a frozen layer's backward (y, dx, dgamma, dbeta). */
enum { BNR_OUTS = 15 };
static size_t bnr_len(int i, size_t xn, int c)
{
	static const char kind[BNR_OUTS + 1] = "xscc" "xcc" "sxcc" "xxcc";
	return kind[i] == 'x' ? xn : kind[i] == 's' ? 2 * (size_t)c : (size_t)c;
}

/* x as B's layers would pass it: through an identity 1x1 convolution
 * (on a channels-last context, x channels-last and in its precision) */
static float *bnr_x(const dp_backend *B, dp_bectx *k, const dp_bnorm *q, const float *x)
{
	dp_conv2d g = conv_geo(q->n, q->c, q->hw, 1, q->c, 1, 1, 1, 1, 0, 0);
	size_t xn = (size_t)q->n * q->c * q->hw, wn = (size_t)q->c * q->c;
	float *w = calloc(wn, 4), *gx = B->alloc(k, xn * 4), *gw = B->alloc(k, wn * 4),
	      *y = B->alloc(k, xn * 4);
	void *ws = B->alloc(k, B->conv_ws(k, &g) + 64);
	for (int i = 0; i < q->c; i++)
		w[i * q->c + i] = 1;
	B->upload(k, gx, x, xn * 4);
	B->upload(k, gw, w, wn * 4);
	B->conv_fwd(k, &g, gx, gw, NULL, y, DP_ACT_NONE, ws);
	void *f[] = {gx, gw, ws};
	for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
		B->free(k, f[i]);
	free(w);
	return y;
}

static void bnr_run(const dp_backend *B, dp_bectx *k, dp_bnorm q, int fused, const float *x,
		    const float *dy, const float *gam, const float *bet, float **o)
{
	int c = q.c;
	size_t xn = (size_t)q.n * c * q.hw;
	float *d[BNR_OUTS];
	for (int i = 0; i < BNR_OUTS; i++)
		d[i] = B->alloc(k, bnr_len(i, xn, c) * (i == 7 ? 8 : 4));
	float *gx = bnr_x(B, k, &q, x), *gdy = B->alloc(k, xn * 4), *ggam = B->alloc(k, c * 4),
	      *gbet = B->alloc(k, c * 4), *one = malloc(c * 4);
	for (int i = 0; i < c; i++)
		one[i] = 1;
	B->upload(k, ggam, gam, c * 4);
	B->upload(k, gbet, bet, c * 4);
	B->fill(k, d[2], 0, c);
	B->upload(k, d[3], one, c * 4);
	q.act = fused ? DP_ACT_RELU : DP_ACT_NONE;
	const float *y = fused ? d[0] : NULL, *ye = fused ? d[11] : NULL;
	B->bnorm_fwd(k, &q, 1, gx, ggam, gbet, d[2], d[3], NULL, d[1], d[0]);
	if (!fused)
		B->act_fwd(k, DP_ACT_RELU, xn, d[0], d[0]);
	for (int r = 0; r < 2; r++) { /* this batch's statistics, then given sums */
		dp_bnorm qs = q;
		qs.count = (double)q.n * q.hw;
		B->upload(k, gdy, dy, xn * 4);
		if (!fused)
			B->act_bwd(k, DP_ACT_RELU, xn, d[0], gdy, gdy);
		if (r)
			B->bnorm_bwd_sums(k, &qs, gx, d[1], y, gdy, (double *)d[7]);
		B->bnorm_bwd(k, &qs, gx, ggam, d[1], r ? (double *)d[7] : NULL, y, gdy, d[4 + 4 * r],
			     d[5 + 4 * r], d[6 + 4 * r]);
	}
	dp_bnorm qe = q;
	B->bnorm_fwd(k, &qe, 0, gx, ggam, gbet, d[2], d[3], NULL, d[1], d[11]);
	if (!fused)
		B->act_fwd(k, DP_ACT_RELU, xn, d[11], d[11]);
	qe.eval = 1;
	B->upload(k, gdy, dy, xn * 4);
	if (!fused)
		B->act_bwd(k, DP_ACT_RELU, xn, d[11], gdy, gdy);
	B->bnorm_bwd(k, &qe, gx, ggam, d[1], NULL, ye, gdy, d[12], d[13], d[14]);
	for (int i = 0; i < BNR_OUTS; i++) {
		size_t bytes = bnr_len(i, xn, c) * (i == 7 ? 8 : 4);
		o[i] = malloc(bytes);
		B->download(k, o[i], d[i], bytes);
		B->free(k, d[i]);
	}
	void *f[] = {gx, gdy, ggam, gbet};
	for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
		B->free(k, f[i]);
	free(one);
}

static void t_bnorm_relu(const dp_backend *B, dp_bectx *k, const char *tag, int n, int c, int hw)
{
	static const char *const what[BNR_OUTS] = {
		"forward", "saved statistics", "running mean", "running variance", "dx", "dgamma",
		"dbeta", "gradient sums", "dx, given sums", "dgamma, given sums", "dbeta, given sums",
		"inference forward", "frozen layer dx", "frozen layer dgamma", "frozen layer dbeta"};
	dp_bnorm q = {n, c, hw, 1e-5f, 0.1f, 0, 0, DP_ACT_NONE};
	size_t xn = (size_t)n * c * hw;
	float *x = rnd(xn, 51), *dy = rnd(xn, 52), *gam = rnd(c, 53), *bet = rnd(c, 54);
	float *un[BNR_OUTS], *fu[BNR_OUTS];
	bnr_run(B, k, q, 0, x, dy, gam, bet, un);
	bnr_run(B, k, q, 1, x, dy, gam, bet, fu);
	size_t zeros = 0;
	for (size_t i = 0; i < xn; i++)
		zeros += un[0][i] == 0.0f;
	ok(zeros > 0 && zeros < xn, "%s batchnorm+relu n%d c%d hw%d: the ReLU cuts %zu of %zu", tag,
	   n, c, hw, zeros, xn);
	char name[120];
	for (int i = 0; i < BNR_OUTS; i++) {
		snprintf(name, sizeof name, "%s batchnorm+relu n%d c%d hw%d fused = unfused: %s", tag,
			 n, c, hw, what[i]);
		exact(fu[i], un[i], bnr_len(i, xn, c) * (i == 7 ? 8 : 4), name);
		free(un[i]);
		free(fu[i]);
	}
	void *h[] = {x, dy, gam, bet};
	for (size_t i = 0; i < sizeof h / sizeof h[0]; i++)
		free(h[i]);
}

static void t_add(void)
{
	size_t n = 3001;
	float *a = rnd(n, 51), *b = rnd(n, 52), *y = malloc(n * 4);
	float *ga = up(gc, a, n * 4), *gb = up(gc, b, n * 4), *gy = G->alloc(gc, n * 4);
	for (int act = DP_ACT_NONE; act <= DP_ACT_TANH; act++) {
		char what[64];
		C->add(cc, n, a, b, y, act);
		G->add(gc, n, ga, gb, gy, act);
		float *hy = down(gc, gy, n);
		snprintf(what, sizeof what, "add act %d", act);
		if (act == DP_ACT_TANH)
			near(hy, y, n, 2e-6, what);
		else
			exact(hy, y, n * 4, what);
		free(hy);
	}
	/* in place, y = a and y = b */
	C->add(cc, n, a, b, y, DP_ACT_RELU);
	G->add(gc, n, ga, gb, ga, DP_ACT_RELU);
	float *h1 = down(gc, ga, n);
	exact(h1, y, n * 4, "add relu in place of a");
	G->upload(gc, ga, a, n * 4);
	G->add(gc, n, ga, gb, gb, DP_ACT_RELU);
	float *h2 = down(gc, gb, n);
	exact(h2, y, n * 4, "add relu in place of b");
	check_sync(gc, "add");
	G->free(gc, ga);
	G->free(gc, gb);
	G->free(gc, gy);
	void *h[] = {a, b, y, h1, h2};
	for (size_t i = 0; i < sizeof h / sizeof h[0]; i++)
		free(h[i]);
}

/* ---- losses --------------------------------------------------------------------- */

static void t_losses(int n, int k)
{
	size_t zn = (size_t)n * k;
	float *z = rnd(zn, 51), *t = rnd(zn, 52), *d = malloc(zn * 4), *p = malloc(zn * 4);
	int32_t *lab = malloc(n * 4);
	for (size_t i = 0; i < zn; i++)
		z[i] *= 5;
	for (int i = 0; i < n; i++)
		lab[i] = (i * 7) % k;
	double st[2], gst[2];
	float *gz = up(gc, z, zn * 4), *gt = up(gc, t, zn * 4), *gd = G->alloc(gc, zn * 4),
	      *gp = G->alloc(gc, zn * 4);
	int32_t *glab = up(gc, lab, n * 4);
	double *gstats = G->alloc(gc, 16);
	char what[96];
	C->xent(cc, n, k, z, lab, 0, 1.0f / n, d, st);
	G->xent(gc, n, k, gz, glab, 0, 1.0f / n, gd, gstats);
	G->download(gc, gst, gstats, 16);
	float *hd = down(gc, gd, zn);
	snprintf(what, sizeof what, "xent %dx%d: loss sum", n, k);
	ok(fabs(gst[0] - st[0]) <= 1e-9 * fabs(st[0]), "%s (%.17g vs %.17g)", what, gst[0], st[0]);
	snprintf(what, sizeof what, "xent %dx%d: correct count", n, k);
	is_int((long long)gst[1], (long long)st[1], "%s", what);
	snprintf(what, sizeof what, "xent %dx%d: dlogits", n, k);
	near(hd, d, zn, 1e-6, what);
	C->xent(cc, n, k, z, lab, 0.1f, 1.0f / n, d, st); /* label smoothing */
	G->xent(gc, n, k, gz, glab, 0.1f, 1.0f / n, gd, gstats);
	G->download(gc, gst, gstats, 16);
	free(hd);
	hd = down(gc, gd, zn);
	ok(fabs(gst[0] - st[0]) <= 1e-9 * fabs(st[0]), "xent %dx%d, smoothing 0.1: loss sum", n, k);
	snprintf(what, sizeof what, "xent %dx%d, smoothing 0.1: dlogits", n, k);
	near(hd, d, zn, 1e-6, what);
	C->xent(cc, n, k, z, lab, 0, 1.0f / n, d, st);
	G->xent(gc, n, k, gz, glab, 0, 1.0f, NULL, gstats); /* no gradient: stats only */
	G->download(gc, gst, gstats, 16);
	ok(fabs(gst[0] - st[0]) <= 1e-9 * fabs(st[0]), "xent without dlogits: the same loss");
	C->mse(cc, n, k, z, t, 0.5f, d, st);
	G->mse(gc, n, k, gz, gt, 0.5f, gd, gstats);
	G->download(gc, gst, gstats, 16);
	free(hd);
	hd = down(gc, gd, zn);
	snprintf(what, sizeof what, "mse %dx%d: loss sum", n, k);
	ok(fabs(gst[0] - st[0]) <= 1e-9 * fabs(st[0]) && gst[1] == 0, "%s", what);
	snprintf(what, sizeof what, "mse %dx%d: dpred", n, k);
	exact(hd, d, zn * 4, what);
	C->softmax(cc, n, k, z, p);
	G->softmax(gc, n, k, gz, gp);
	float *hp = down(gc, gp, zn);
	snprintf(what, sizeof what, "softmax %dx%d", n, k);
	near(hp, p, zn, 1e-6, what);
	check_sync(gc, "losses");
	G->free(gc, gz);
	G->free(gc, gt);
	G->free(gc, gd);
	G->free(gc, gp);
	G->free(gc, glab);
	G->free(gc, gstats);
	void *h[] = {z, t, d, p, lab, hd, hp};
	for (size_t i = 0; i < sizeof h / sizeof h[0]; i++)
		free(h[i]);
}

/* ---- optimizers: bit for bit ---------------------------------------------------- */

static void t_optim(void)
{
	size_t n = 3001;
	float *g = rnd(n, 61), *p0 = rnd(n, 62);
	for (int kind = 0; kind < 6; kind++) {
		float *p = malloc(n * 4), *m = calloc(n, 4), *v = calloc(n, 4);
		memcpy(p, p0, n * 4);
		float *gp = up(gc, p0, n * 4), *gg = up(gc, g, n * 4), *gm = up(gc, m, n * 4),
		      *gv = up(gc, v, n * 4);
		const char *name = "";
		for (int step = 1; step <= 3; step++) {
			if (kind < 3) {
				dp_sgd_args a = {0.1f, kind ? 0.9f : 0.0f, 0.0f, kind == 2 ? 1e-2f : 0.0f,
						 kind == 2, step == 1};
				name = kind == 0 ? "sgd" : kind == 1 ? "sgd momentum" : "sgd nesterov, weight decay";
				C->sgd(cc, n, p, g, m, &a);
				G->sgd(gc, n, gp, gg, gm, &a);
			} else {
				double b1 = 0.9, b2 = 0.999, lr = 1e-3;
				dp_adam_args a = {(float)lr, (float)b1, (float)b2, 1e-8f,
						  kind == 3 ? 0.0f : 1e-2f, kind == 5,
						  (float)(lr / (1 - pow(b1, step))),
						  (float)sqrt(1 - pow(b2, step))};
				name = kind == 3 ? "adam" : kind == 4 ? "adam, weight decay" : "adamw";
				C->adam(cc, n, p, g, m, v, &a);
				G->adam(gc, n, gp, gg, gm, gv, &a);
			}
		}
		float *hp = down(gc, gp, n), *hm = down(gc, gm, n);
		char what[80];
		snprintf(what, sizeof what, "%s: 3 updates", name);
		exact(hp, p, n * 4, what);
		snprintf(what, sizeof what, "%s: state", name);
		if (kind)
			exact(hm, m, n * 4, what);
		G->free(gc, gp);
		G->free(gc, gg);
		G->free(gc, gm);
		G->free(gc, gv);
		free(p);
		free(m);
		free(v);
		free(hp);
		free(hm);
	}
	check_sync(gc, "optimizers");
	free(g);
	free(p0);
}

/* ---- whole models: the same loss curve from the same weights -------------------- */

static void t_model_on(dp_bectx *gk, double tol, const char *tag, const char *spec,
		       const char *shape, int loss, int opt, int steps)
{
	dp_err e;
	dp_shape in;
	dp_shape_parse(shape, &in, &e);
	dp_model *mc = dp_model_new(spec, &in, loss, &e), *mg = dp_model_new(spec, &in, loss, &e);
	if (!ok(mc && mg, "model %s", spec)) {
		printf("#   %s\n", e.msg);
		return;
	}
	size_t B = 32, isz = dp_model_in_size(mc), osz = dp_model_out_size(mc);
	int rc = dp_model_bind(mc, C, cc, B, &e);
	if (rc == DP_OK)
		rc = dp_model_bind(mg, G, gk, B, &e);
	if (!ok(rc == DP_OK, "bind %s", spec)) {
		printf("#   %s\n", e.msg);
		return;
	}
	dp_model_init(mc, 5);
	dp_model_init(mg, 5);
	dp_optim_conf conf;
	dp_optim_defaults(&conf, opt);
	if (opt == DP_OPTIM_SGD)
		conf.momentum = 0.9;
	dp_optim *oc = dp_optim_new(&conf, C, cc, dp_model_nparams(mc), &e),
		 *og = dp_optim_new(&conf, G, gk, dp_model_nparams(mg), &e);
	float *x = G->host_alloc(gk, B * isz * 4);
	void *y = G->host_alloc(gk, B * osz * 4);
	double worst = 0;
	int good = 1;
	for (int s = 0; s < steps; s++) {
		fill(x, B * isz, 1000 + s);
		if (loss == DP_LOSS_XENT)
			for (size_t i = 0; i < B; i++)
				((int32_t *)y)[i] = (int32_t)((i * 3 + s) % osz);
		else
			fill(y, B * osz, 2000 + s);
		dp_pass p = {1, 9, (uint64_t)s, 0};
		double sc[2], sg[2];
		good &= dp_model_forward(mc, x, B, &p, &e) == DP_OK &&
			dp_model_loss(mc, y, B, 1.0f / B, 1, sc, &e) == DP_OK &&
			dp_model_backward(mc, B, NULL, NULL, &e) == DP_OK;
		good &= dp_model_forward(mg, x, B, &p, &e) == DP_OK &&
			dp_model_loss(mg, y, B, 1.0f / B, 1, sg, &e) == DP_OK &&
			dp_model_backward(mg, B, NULL, NULL, &e) == DP_OK;
		dp_optim_step(oc, dp_model_params(mc), dp_model_grads(mc), opt == DP_OPTIM_SGD ? 0.01 : 1e-3);
		dp_optim_step(og, dp_model_params(mg), dp_model_grads(mg), opt == DP_OPTIM_SGD ? 0.01 : 1e-3);
		double r = fabs(sg[0] - sc[0]) / fmax(fabs(sc[0]), 1e-30);
		worst = fmax(worst, isnan(r) ? INFINITY : r);
	}
	if (!good)
		printf("#   %s\n", e.msg);
	size_t np = dp_model_nparams(mc);
	float *pc = malloc(np * 4), *pg = malloc(np * 4);
	C->download(cc, pc, dp_model_params(mc), np * 4);
	G->download(gk, pg, dp_model_params(mg), np * 4);
	ok(good && worst <= tol, "%s %s, %s: %d steps, the loss within %.0e of the CPU's each step (%.2e)",
	   tag, spec, dp_optim_name(opt), steps, tol, worst);
	near(pg, pc, np, tol, "  and the weights after them");
	check_sync(gk, spec);
	G->host_free(gk, x);
	G->host_free(gk, y);
	free(pc);
	free(pg);
	dp_optim_free(oc);
	dp_optim_free(og);
	dp_model_free(mc);
	dp_model_free(mg);
}

static void t_model(const char *spec, const char *shape, int loss, int opt, int steps)
{
	t_model_on(gc, 1e-3, "fp32", spec, shape, loss, opt, steps);
}

/* cuDNN's convolutions: fp32 against the CPU as tight as im2col's; the
 * algorithm choices (measured, pinned, given) and the workspace they
 * report; tf32 and bf16 on channels-last tensors (cuda_nhwc.cu) through
 * whole models, within their rounding */
/* ---- passes over memory: kernel launches, counted by the emulation ----------- */

/* tests/cudaemu's count of kernels launched (absent on a GPU: NULL) */
extern unsigned long cudaemu_launches __attribute__((weak));

static unsigned long launches(void) { return &cudaemu_launches ? cudaemu_launches : 0; }

/* On a channels-last context d: a convolution's backward reads the
 * filters its forward converted (its data gradient adds no launch to a
 * backward without one) while they are current, and converts them anew
 * after an optimizer step changed them, giving the data gradient of the
 * new weights; a batchnorm's backward with a fused ReLU launches what one
 * without does (the mask read by its kernels, not a pass of its own). */
static void t_passes(dp_bectx *d, const char *tag)
{
	if (!&cudaemu_launches) {
		printf("ok %d # SKIP %s: launches are counted by the emulation only\n", ++tap_n, tag);
		return;
	}
	dp_conv2d q = conv_geo(2, 8, 6, 6, 16, 3, 3, 1, 1, 1, 1), p = conv_geo(2, 8, 6, 6, 8, 1, 1, 1, 1, 0, 0);
	size_t xn = 2 * 8 * 36, yn = 2 * 16 * 36, wn = 16 * 8 * 9;
	float *x0 = rnd(xn, 71), *w = rnd(wn, 72), *wd = rnd(wn, 73), *wp = rnd(64, 74), *g = rnd(wn, 75);
	float *gx0 = up(d, x0, xn * 4), *gw = up(d, w, wn * 4), *gwd = up(d, wd, wn * 4),
	      *gwp = up(d, wp, 64 * 4), *gg = up(d, g, wn * 4), *gx = G->alloc(d, xn * 4),
	      *gy = G->alloc(d, yn * 4), *gdy = G->alloc(d, yn * 4), *gdx = G->alloc(d, xn * 4),
	      *gdw = G->alloc(d, wn * 4), *gm = G->alloc(d, wn * 4);
	size_t wsn = G->conv_ws(d, &q), wp_ws = G->conv_ws(d, &p);
	void *ws = G->alloc(d, wsn > wp_ws ? wsn : wp_ws);
	/* x and dy channels-last, as layers pass them: no conversions counted */
	G->conv_fwd(d, &p, gx0, gwp, NULL, gx, DP_ACT_NONE, ws);
	G->conv_fwd(d, &q, gx, gwd, NULL, gdy, DP_ACT_NONE, ws);
	G->conv_fwd(d, &q, gx, gw, NULL, gy, DP_ACT_NONE, ws);
	/* a layer's first backward makes its slot, and its next forward fills
	 * it: a context that only infers makes none */
	G->conv_bwd(d, &q, gx, gw, gy, gdy, gdx, gdw, NULL, DP_ACT_NONE, ws);
	G->conv_fwd(d, &q, gx, gw, NULL, gy, DP_ACT_NONE, ws);
	unsigned long n0 = launches();
	G->conv_bwd(d, &q, gx, gw, gy, gdy, NULL, gdw, NULL, DP_ACT_NONE, ws);
	unsigned long plain = launches() - n0;
	n0 = launches();
	G->conv_bwd(d, &q, gx, gw, gy, gdy, gdx, gdw, NULL, DP_ACT_NONE, ws);
	unsigned long withdx = launches() - n0;
	ok(withdx == plain, "%s: a convolution's data gradient reads the filters its forward converted "
	   "(%lu launches, %lu without it)", tag, withdx, plain);
	dp_sgd_args a = {0.5f, 0.0f, 0.0f, 0.0f, 0, 1};
	G->sgd(d, wn, gw, gg, gm, &a);
	n0 = launches();
	G->conv_bwd(d, &q, gx, gw, gy, gdy, gdx, gdw, NULL, DP_ACT_NONE, ws);
	unsigned long after = launches() - n0;
	ok(after == withdx + 1, "%s: after an optimizer step the backward converts them anew (%lu launches)",
	   tag, after);
	float *dx1 = down(d, gdx, xn);
	G->conv_fwd(d, &q, gx, gw, NULL, gy, DP_ACT_NONE, ws);
	G->conv_bwd(d, &q, gx, gw, gy, gdy, gdx, gdw, NULL, DP_ACT_NONE, ws);
	float *dx2 = down(d, gdx, xn);
	char what[120];
	snprintf(what, sizeof what, "%s: and its data gradient is that of the new weights", tag);
	exact(dx1, dx2, xn * 4, what);

	/* with a bias and a fused ReLU: the ReLU's gradient written in the pass
	 * that sums the bias gradient, the same bits as the ReLU's own
	 * backward (act_bwd) before a convolution without it */
	float *bias = rnd(16, 78), *gb = up(d, bias, 64), *gdbias = G->alloc(d, 64),
	      *gd2 = G->alloc(d, yn * 4);
	float *o[2][3];
	unsigned long cost[2];
	G->conv_fwd(d, &q, gx, gw, gb, gy, DP_ACT_RELU, ws);
	for (int fu = 0; fu < 2; fu++) {
		G->copy(d, gd2, gdy, yn * 4);
		if (!fu)
			G->act_bwd(d, DP_ACT_RELU, yn, gy, gd2, gd2);
		n0 = launches();
		G->conv_bwd(d, &q, gx, gw, gy, gd2, gdx, gdw, gdbias, fu ? DP_ACT_RELU : DP_ACT_NONE, ws);
		cost[fu] = launches() - n0;
		o[fu][0] = down(d, gdx, xn);
		o[fu][1] = down(d, gdw, wn);
		o[fu][2] = down(d, gdbias, 16);
	}
	ok(cost[1] == cost[0], "%s: a convolution's ReLU gradient costs no launch beside its bias gradient "
	   "(%lu launches, %lu without the ReLU)", tag, cost[1], cost[0]);
	static const char *const part[3] = {"dx", "dw", "db"};
	size_t len[3] = {xn, wn, 16};
	for (int i = 0; i < 3; i++) {
		snprintf(what, sizeof what, "%s: convolution + bias + ReLU %s = with the ReLU apart", tag, part[i]);
		exact(o[1][i], o[0][i], len[i] * 4, what);
		free(o[0][i]);
		free(o[1][i]);
	}
	G->free(d, gb);
	G->free(d, gdbias);
	G->free(d, gd2);
	free(bias);

	/* batchnorm over y (16 channels), with and without its fused ReLU */
	dp_bnorm b = {2, 16, 36, 1e-5f, 0.1f, 0, 0, DP_ACT_RELU};
	float *gam = rnd(16, 76), *bet = rnd(16, 77), one[16] = {0};
	for (int i = 0; i < 16; i++)
		one[i] = 1;
	float *ggam = up(d, gam, 64), *gbet = up(d, bet, 64), *grm = G->alloc(d, 64),
	      *grv = up(d, one, 64), *gsave = G->alloc(d, 128), *gby = G->alloc(d, yn * 4),
	      *gbdx = G->alloc(d, yn * 4), *gdg = G->alloc(d, 64), *gdb = G->alloc(d, 64);
	G->fill(d, grm, 0, 16);
	n0 = launches();
	G->bnorm_fwd(d, &b, 1, gy, ggam, gbet, grm, grv, NULL, gsave, gby);
	unsigned long fwd = launches() - n0;
	unsigned long fused[2];
	for (int f = 0; f < 2; f++) {
		b.act = f ? DP_ACT_RELU : DP_ACT_NONE;
		n0 = launches();
		G->bnorm_bwd(d, &b, gy, ggam, gsave, NULL, gby, gdy, gbdx, gdg, gdb);
		fused[f] = launches() - n0;
	}
	ok(fused[1] == fused[0], "%s: batchnorm's backward with a fused ReLU: %lu launches, %lu without",
	   tag, fused[1], fused[0]);
	/* the sums' two launches and the pass over x: the statistics and the
	 * gradient's coefficients are made as the sums' last launch ends */
	ok(fwd == 3 && fused[0] == 3, "%s: batchnorm in training: 3 launches forward (%lu), 3 backward (%lu)",
	   tag, fwd, fused[0]);
	check_sync(d, "passes");
	void *f[] = {gx0, gw, gwd, gwp, gg, gx, gy, gdy, gdx, gdw, gm, ws, ggam, gbet, grm, grv, gsave, gby, gbdx, gdg, gdb};
	for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
		G->free(d, f[i]);
	void *h[] = {x0, w, wd, wp, g, dx1, dx2, gam, bet};
	for (size_t i = 0; i < sizeof h / sizeof h[0]; i++)
		free(h[i]);
}

/* DP_CUDA_PROFILE on a bf16 channels-last context: cuDNN's three passes
 * kinds of their own beside the convolutions that call them (their time
 * taken out of the convolutions'), a call each per convolution in the
 * steps counted (the first 3 syncs left out); the file's form, which
 * bench/resnet-cuda.sh reads: a header, "kind calls gpu_ms share host_ms"
 * lines (kinds of several words), the totals. */
static void t_profile(void)
{
	char path[4096], line[256];
	snprintf(path, sizeof path, "%s/dp-cuda-prof-XXXXXX", dp_tmpdir(NULL));
	int fd = mkstemp(path);
	if (!ok(fd >= 0, "profile: a temporary file"))
		return;
	close(fd);
	dp_err e;
	dp_backend_opts o = {.threads = 1, .device = -1, .precision = DP_PREC_BF16};
	dp_bectx *d;
	char desc[256];
	dp_setting_set("DP_CUDA_PROFILE", path);
	int rc = G->open(&d, &o, desc, sizeof desc, &e);
	dp_setting_set("DP_CUDA_PROFILE", NULL);
	if (rc < 0 || !strstr(desc, "cuDNN")) {
		printf("ok %d # SKIP profile: bf16 with cuDNN: %s\n", ++tap_n, rc < 0 ? e.msg : desc);
		if (rc >= 0)
			G->close(d);
		unlink(path);
		return;
	}
	dp_conv2d q = conv_geo(2, 8, 6, 6, 16, 3, 3, 1, 1, 1, 1);
	size_t xn = 2 * 8 * 36, yn = 2 * 16 * 36, wn = 16 * 8 * 9;
	float *x = rnd(xn, 81), *w = rnd(wn, 82), *dy = rnd(yn, 83);
	float *gx = up(d, x, xn * 4), *gw = up(d, w, wn * 4), *gdy = up(d, dy, yn * 4),
	      *gy = G->alloc(d, yn * 4), *gdx = G->alloc(d, xn * 4), *gdw = G->alloc(d, wn * 4);
	void *ws = G->alloc(d, G->conv_ws(d, &q));
	for (int step = 0; step < 5; step++) {
		G->conv_fwd(d, &q, gx, gw, NULL, gy, DP_ACT_NONE, ws);
		G->conv_bwd(d, &q, gx, gw, gy, gdy, gdx, gdw, NULL, DP_ACT_NONE, ws);
		check_sync(d, "profiled step");
	}
	void *f[] = {gx, gw, gdy, gy, gdx, gdw, ws};
	for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
		G->free(d, f[i]);
	G->close(d);
	static const char *const want[] = {"convolution", "convolution backward", "cudnn forward",
					   "cudnn filter gradient", "cudnn data gradient"};
	long calls[5] = {0};
	int lines = 0, bad = 0, total = 0;
	FILE *p = fopen(path, "r");
	while (p && fgets(line, sizeof line, p)) {
		if (!lines++) {
			bad += strcmp(line, "kind calls gpu_ms share host_ms\n") != 0;
			continue;
		}
		if (!strncmp(line, "total gpu_ms=", 13)) {
			total++;
			continue;
		}
		/* kind, then 4 numbers: from the right */
		char *sp[4], *end = line + strlen(line);
		int n = 0;
		for (char *c = end - 1; c > line && n < 4; c--)
			if (*c == ' ')
				sp[n++] = c;
		long k;
		double ms, share, host;
		if (n < 4 || sscanf(sp[3] + 1, "%ld %lf %lf%% %lf", &k, &ms, &share, &host) != 4) {
			bad++;
			continue;
		}
		*sp[3] = 0;
		for (int i = 0; i < 5; i++)
			if (!strcmp(line, want[i]))
				calls[i] = k;
	}
	if (p)
		fclose(p);
	ok(p && !bad && total == 1, "profile: %d lines, a header, kind lines and the totals", lines);
	for (int i = 0; i < 5; i++)
		ok(calls[i] == 2, "profile: %s, %ld calls in the 2 steps counted", want[i], calls[i]);
	unlink(path);
	void *h[] = {x, w, dy};
	for (size_t i = 0; i < sizeof h / sizeof h[0]; i++)
		free(h[i]);
}

static const char *const RES = "conv:8:3:1:1:bias=0,bn,relu,maxpool:3:2:1,"
			       "res(conv:8:3:1:1:bias=0,bn,relu,conv:8:3:1:1:bias=0,bn):relu,"
			       "res(conv:12:3:2:1:bias=0,bn|conv:12:1:2:bias=0,bn):relu,gap,flatten,fc=dense:5";
static const char *const CNN = "conv:8:3,relu,maxpool:2,dropout:0.25,flatten,dense:32,relu,dropout:0.5,dense:10";

static void t_cudnn(const dp_conv2d *convs, size_t nconv)
{
	dp_err e;
	char desc[256], algos[4096], again[4096];
	dp_backend_opts o = {.threads = 1, .device = -1, .precision = DP_PREC_FP32};
	dp_bectx *d;
	if (G->open(&d, &o, desc, sizeof desc, &e) < 0) {
		ok(0, "open the CUDA backend with cuDNN");
		printf("#   %s\n", e.msg);
		return;
	}
	if (!strstr(desc, "cuDNN")) {
		printf("ok %d # SKIP built without cuDNN: %s\n", ++tap_n, desc);
		G->close(d);
		return;
	}
	printf("# %s\n", desc);
	/* the emulation's lists (tests/cudaemu/cudnn.h) are known: timed, the
	 * fastest deterministic one that fits is 0 forward, 1 for the
	 * gradients; in cuDNN's heuristic order, 1 for all three */
	int emu = strstr(desc, "CPU emulation") != NULL;
	for (size_t i = 0; i < nconv; i++)
		for (int act = DP_ACT_NONE; act <= DP_ACT_TANH; act += 2)
			t_conv(d, convs[i], act, 2e-5, "cudnn fp32", 1);
	t_conv(d, conv_geo(2, 4, 8, 8, 6, 3, 3, 2, 2, 1, 1), DP_ACT_RELU, 2e-5, "cudnn fp32", 0);
	ok(G->conv_algos(d, algos, sizeof algos) > 0 && strchr(algos, '='),
	   "the algorithms chosen, as text: %.60s...", algos);
	if (emu)
		like(algos, "=0,1,1", "measured: the fastest deterministic algorithm within the workspace bound");
	/* given: the same choices, taken rather than measured */
	dp_backend_opts og = o;
	og.algos = algos;
	dp_bectx *d2;
	if (ok(G->open(&d2, &og, NULL, 0, &e) == DP_OK, "open with the algorithms given")) {
		for (size_t i = 0; i < nconv; i++)
			G->free(d2, G->alloc(d2, G->conv_ws(d2, &convs[i])));
		t_conv(d2, convs[0], DP_ACT_RELU, 2e-5, "cudnn given", 1);
		G->conv_algos(d2, again, sizeof again);
		ok(strstr(algos, again) != NULL, "the choices given are the ones taken");
		G->close(d2);
	}
	G->close(d);
	/* pinned: cuDNN's heuristic order, untimed */
	dp_backend_opts op = o;
	op.deterministic = 1;
	if (ok(G->open(&d, &op, desc, sizeof desc, &e) == DP_OK && strstr(desc, "pinned"),
	       "open with the algorithms pinned: %s", desc)) {
		t_conv(d, convs[2], DP_ACT_RELU, 2e-5, "cudnn pinned", 1);
		char pinned[4096];
		G->conv_algos(d, pinned, sizeof pinned);
		if (emu)
			like(pinned, "=1,1,1", "pinned: the first deterministic algorithm in the heuristic's order");
		G->close(d);
		/* another rank's choices taken by one that measured its own */
		dp_backend_opts om = o;
		if (ok(G->open(&d, &om, NULL, 0, &e) == DP_OK, "open, measuring")) {
			G->free(d, G->alloc(d, G->conv_ws(d, &convs[2])));
			char mine[4096], after[4096];
			G->conv_algos(d, mine, sizeof mine);
			int changed = G->conv_algos_take(d, pinned);
			G->conv_algos(d, after, sizeof after);
			ok(changed == (strcmp(mine, pinned) != 0) && !strcmp(after, pinned),
			   "conv_algos_take: another's choice for a shape planned (%d changed)", changed);
			t_conv(d, convs[2], DP_ACT_RELU, 2e-5, "cudnn taken", 1);
			char foreign[4200];
			snprintf(foreign, sizeof foreign, "another GPU/cudnn 1/fp32%s", strchr(mine, '|'));
			ok(G->conv_algos_take(d, foreign) == 0, "a record made elsewhere is ignored");
			G->close(d);
		}
	}
	/* a server's batches of every size, a plan each: more than the table's
	 * 256, those met least recently make room, the one sized by conv_ws
	 * stays (once, the 257th failed the context for good) */
	if (ok(G->open(&d, &o, NULL, 0, &e) == DP_OK, "open for 299 batch sizes")) {
		enum { NB = 300 };
		dp_conv2d big = conv_geo(NB, 1, 4, 4, 2, 3, 3, 1, 1, 0, 0);
		float *x = G->alloc(d, NB * 16 * sizeof(float)), *w = G->alloc(d, 18 * sizeof(float));
		float *y = G->alloc(d, NB * 8 * sizeof(float)), got[8];
		void *ws = G->alloc(d, G->conv_ws(d, &big));
		G->fill(d, x, 0.5f, NB * 16);
		G->fill(d, w, 0.25f, 18);
		for (int n = 1; n < NB; n++) {
			dp_conv2d g = big;
			g.n = n;
			G->conv_fwd(d, &g, x, w, NULL, y, DP_ACT_NONE, ws);
		}
		G->download(d, got, y + (NB - 2) * 8, sizeof got);
		int rc = G->sync(d, &e), right = 1;
		for (int i = 0; i < 8; i++)
			right &= got[i] == 9 * 0.5f * 0.25f;
		ok(rc == DP_OK && right, "299 batch sizes of one convolution, each right (%s)",
		   rc == DP_OK ? "no failure" : e.msg);
		char *all = malloc(1 << 16);
		ok(all && G->conv_algos(d, all, 1 << 16) > 0 && strstr(all, "300x1x4x4-2x3x3"),
		   "the shape conv_ws sized is kept");
		free(all);
		G->free(d, ws);
		G->free(d, y);
		G->free(d, w);
		G->free(d, x);
		G->close(d);
	}
	/* channels-last: tf32 (float32 tensors) and bf16 */
	int precs[] = {DP_PREC_TF32, DP_PREC_BF16};
	double tols[] = {2e-3, 3e-2}, mtols[] = {3e-2, 5e-2};
	for (int i = 0; i < 2; i++) {
		dp_backend_opts on = o;
		on.precision = precs[i];
		const char *pn = dp_precision_name(precs[i]);
		if (G->open(&d, &on, desc, sizeof desc, &e) < 0) {
			printf("ok %d # SKIP %s: %s\n", ++tap_n, pn, e.msg);
			continue;
		}
		ok(strstr(desc, "channels-last") != NULL, "%s: channels-last (%s)", pn, desc);
		char tag[32];
		snprintf(tag, sizeof tag, "%s channels-last", pn);
		t_conv(d, conv_geo(4, 32, 13, 13, 64, 3, 3, 1, 1, 1, 1), DP_ACT_RELU, tols[i], tag, 1);
		t_conv(d, conv_geo(2, 3, 9, 11, 5, 3, 3, 2, 2, 1, 1), DP_ACT_NONE, tols[i], tag, 0);
		t_bnorm_relu(G, d, tag, 4, 8, 10);
		t_bnorm_relu(G, d, tag, 3, 5, 7); /* channels not a whole vector */
		t_passes(d, tag);
		t_model_on(d, mtols[i], tag, CNN, "1x12x12", DP_LOSS_XENT, DP_OPTIM_ADAM, 10);
		t_model_on(d, mtols[i], tag, RES, "3x12x12", DP_LOSS_XENT, DP_OPTIM_SGD, 10);
		t_model_on(d, mtols[i], tag, "conv:6:3:same,batchnorm,tanh,avgpool:2,conv:4:3:2:1,sigmoid,flatten,dense:5",
			   "2x10x10", DP_LOSS_MSE, DP_OPTIM_SGD, 10);
		/* batchnorm after flatten: over the features, read as NCHW */
		t_model_on(d, mtols[i], tag, "conv:4:3,relu,flatten,batchnorm,dense:8,tanh,dense:3", "2x10x10",
			   DP_LOSS_MSE, DP_OPTIM_SGD, 10);
		G->close(d);
	}
}

int main(void)
{
	dp_err e;
	char desc[256];
	G = dp_backend_find("cuda");
	if (!G) {
		printf("1..0 # SKIP not a CUDA build (make BACKEND=cuda check runs this on a GPU)\n");
		return 0;
	}
	dp_backend_opts o = {.threads = 1, .device = -1, .conv_algo = 1, .precision = DP_PREC_FP32};
	if (G->open(&gc, &o, desc, sizeof desc, &e) < 0) {
		if (e.code == DP_ENOTFOUND) {
			printf("1..0 # SKIP %s\n", e.msg);
			return 0;
		}
		ok(0, "open the CUDA backend");
		printf("#   %s\n", e.msg);
		return done_testing();
	}
	printf("# %s\n", desc);
	C->open(&cc, &o, NULL, 0, &e);

	t_memory();
	t_elementwise();
	for (int act = DP_ACT_NONE; act <= DP_ACT_SIGMOID; act++)
		t_dense(gc, 5, 7, 3, act, 2e-5, "fp32", 1);
	t_dense(gc, 64, 300, 129, DP_ACT_RELU, 2e-5, "fp32", 1);
	t_dense(gc, 9, 20, 6, DP_ACT_NONE, 2e-5, "fp32", 0);
	t_dense(gc, 9, 20, 6, DP_ACT_RELU, 2e-5, "fp32", 0);
	dp_conv2d convs[] = {
		conv_geo(3, 1, 28, 28, 32, 3, 3, 1, 1, 0, 0),  /* the seed CNN's first layer */
		conv_geo(2, 32, 26, 26, 64, 3, 3, 1, 1, 0, 0), /* and its second */
		conv_geo(2, 3, 9, 11, 5, 3, 3, 2, 2, 1, 1),    /* stride 2, padding */
		conv_geo(2, 4, 7, 8, 6, 2, 3, 1, 2, 1, 0),     /* non-square kernel, mixed stride */
		conv_geo(3, 8, 5, 5, 4, 1, 1, 1, 1, 0, 0),     /* 1x1 */
		conv_geo(2, 3, 6, 6, 4, 5, 5, 1, 1, 2, 2),     /* "same" 5x5 */
	};
	for (size_t i = 0; i < sizeof convs / sizeof convs[0]; i++)
		for (int act = DP_ACT_NONE; act <= DP_ACT_TANH; act += 2)
			t_conv(gc, convs[i], act, 2e-5, "fp32", 1);
	/* without bias, as ResNet's convolutions (before a batch norm) */
	t_conv(gc, conv_geo(2, 4, 8, 8, 6, 3, 3, 1, 1, 1, 1), DP_ACT_NONE, 2e-5, "fp32", 0);
	t_conv(gc, conv_geo(2, 4, 8, 8, 6, 3, 3, 2, 2, 1, 1), DP_ACT_RELU, 2e-5, "fp32", 0);
	t_conv(gc, conv_geo(3, 8, 5, 5, 4, 1, 1, 1, 1, 0, 0), DP_ACT_NONE, 2e-5, "fp32", 0);
	/* a workspace for one or two samples at a time: the batch in chunks */
	dp_setting_set("DP_CUDA_CONV_BUDGET", "200000");
	dp_bectx *small;
	if (ok(G->open(&small, &o, NULL, 0, &e) == DP_OK, "a second instance (small workspace)")) {
		t_conv(small, conv_geo(5, 3, 12, 12, 8, 3, 3, 1, 1, 1, 1), DP_ACT_RELU, 2e-5, "chunked", 1);
		t_conv(small, conv_geo(7, 2, 9, 9, 3, 3, 3, 2, 2, 0, 0), DP_ACT_NONE, 2e-5, "chunked", 1);
		G->close(small);
	}
	dp_setting_set("DP_CUDA_CONV_BUDGET", NULL);
	dp_pool2d pools[] = {{3, 4, 8, 8, 4, 4, 2, 2, 2, 2, 0, 0}, {2, 3, 7, 9, 3, 4, 3, 3, 2, 2, 0, 0},
			     {2, 2, 6, 5, 2, 4, 3, 2, 2, 1, 0, 0},
			     /* ResNet's stem MaxPool2d(3, 2, 1), even and odd sizes */
			     {2, 3, 8, 8, 4, 4, 3, 3, 2, 2, 1, 1}, {2, 2, 9, 7, 5, 4, 3, 3, 2, 2, 1, 1},
			     {1, 2, 6, 6, 3, 3, 3, 2, 2, 2, 1, 0}};
	for (size_t i = 0; i < sizeof pools / sizeof pools[0]; i++)
		t_pool(pools[i]);
	t_bnorm(8, 5, 9);
	t_bnorm(33, 7, 1);
	t_bnorm(4, 3, 300);
	t_bnorm_relu(C, cc, "CPU", 8, 5, 9);
	t_bnorm_relu(C, cc, "CPU", 4, 3, 300);
	t_bnorm_relu(G, gc, "GPU", 8, 5, 9);
	t_bnorm_relu(G, gc, "GPU", 4, 3, 300);
	t_add();
	t_losses(37, 10);
	t_losses(300, 1000);
	t_optim();

	/* tensor cores: the products within their rounding of the fp32 ones */
	int precs[] = {DP_PREC_TF32, DP_PREC_BF16};
	double tols[] = {2e-3, 2e-2};
	for (int i = 0; i < 2; i++) {
		dp_backend_opts lo = {.threads = 1, .device = -1, .conv_algo = 1, .precision = precs[i]};
		dp_bectx *lc;
		const char *pn = dp_precision_name(precs[i]);
		if (G->open(&lc, &lo, NULL, 0, &e) < 0) {
			printf("ok %d # SKIP %s: %s\n", ++tap_n, pn, e.msg);
			continue;
		}
		t_dense(lc, 64, 300, 129, DP_ACT_RELU, tols[i], pn, 1);
		t_conv(lc, conv_geo(4, 32, 13, 13, 64, 3, 3, 1, 1, 1, 1), DP_ACT_RELU, tols[i], pn, 1);
		G->close(lc);
	}

	t_model(CNN, "1x12x12", DP_LOSS_XENT, DP_OPTIM_ADAM, 30);
	t_model("conv:6:3:same,batchnorm,tanh,avgpool:2,conv:4:3:2:1,sigmoid,flatten,dense:5",
		"2x10x10", DP_LOSS_MSE, DP_OPTIM_SGD, 30);
	t_model("dense:64,relu,batchnorm,dense:10", "40", DP_LOSS_XENT, DP_OPTIM_ADAMW, 30);
	/* residual blocks (identity and projection shortcuts, gradients added
	 * where two layers read one output), the stem's padded max pooling,
	 * convolutions without bias, global average pooling */
	t_model(RES, "3x12x12", DP_LOSS_XENT, DP_OPTIM_SGD, 20);
	/* 3 steps: on a GPU, float32's other summation orders grow chaotically
	 * through 19 batchnorms of 2x2 to 8x8 planes (1% apart after 10
	 * steps on an H200; 1e-5 after 3) */
	t_model("resnet20:4", "1x8x8", DP_LOSS_XENT, DP_OPTIM_SGD, 3);
	t_cudnn(convs, sizeof convs / sizeof convs[0]);
	t_profile();

	G->close(gc);
	C->close(cc);
	return done_testing();
}
