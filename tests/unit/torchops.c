/* torchops.c - the CPU backend's operations for residual networks against
 * PyTorch (tests/torchops_ref.py, Debian's python3-torch):
 *  - max pooling MaxPool2d(3, 2, padding=1), forward, argmax and backward,
 *    with ties (the first maximum wins), a NaN (it wins) and a window of
 *    -infinity only (its first position inside the image); MaxPool2d(2, 2)
 *    (the fast path) with NaNs;
 *  - BatchNorm2d in training (output, running statistics, dx, dgamma,
 *    dbeta), and the backward of an evaluation-mode (frozen) layer;
 *  - synchronised statistics: the batch split in two halves, as two ranks,
 *    each half's bnorm_sums and bnorm_bwd_sums added and given back: the
 *    halves' results are the whole batch's, within 1e-5.
 * Tolerance: 1e-5 of the largest magnitude (float rounding: PyTorch sums in
 * other orders); pooling's values and indices exactly. */
#define _GNU_SOURCE
#include "dp_backend.h"
#include "tap.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const dp_backend *B = &dp_backend_cpu;
static dp_bectx *bc;
static FILE *ref;
static int ref_ok = 1;

/* The next array of the reference: n floats (malloc'ed). */
static float *next(size_t n)
{
	uint32_t k = 0;
	float *p = calloc(n ? n : 1, sizeof *p);
	if (fread(&k, 4, 1, ref) != 1 || k != n || fread(p, 4, n, ref) != n)
		ref_ok = 0;
	return p;
}

/* max |a - b| / max |b|; NaN against NaN counts as equal */
static double rel(const float *a, const float *b, size_t n)
{
	double m = 0, s = 0;
	for (size_t i = 0; i < n; i++) {
		if (isnan(a[i]) || isnan(b[i])) {
			if (!(isnan(a[i]) && isnan(b[i])))
				return INFINITY;
			continue;
		}
		if (isinf(b[i]) || isinf(a[i])) {
			if (a[i] != b[i])
				return INFINITY;
			continue;
		}
		s = fmax(s, fabs(b[i]));
		m = fmax(m, fabs((double)a[i] - b[i]));
	}
	return m / fmax(s, 1e-30);
}

static void near(const float *got, const float *want, size_t n, double tol, const char *what)
{
	double r = rel(got, want, n);
	if (!ok(r <= tol, "%s: within %.0e of PyTorch (%.2e)", what, tol, r))
		printf("#   first values: got %g %g, torch %g %g\n", got[0], n > 1 ? got[1] : 0,
		       want[0], n > 1 ? want[1] : 0);
}

/* MaxPool2d(k, 2, p) of (n, c, h, w) */
static void t_maxpool(int n, int c, int h, int w, int k, int p)
{
	dp_pool2d q = {n, c, h, w, (h + 2 * p - k) / 2 + 1, (w + 2 * p - k) / 2 + 1, k, k, 2, 2, p, p};
	size_t xn = (size_t)n * c * h * w, yn = (size_t)n * c * q.oh * q.ow;
	float *x = next(xn), *dy = next(yn), *ty = next(yn), *tidx = next(yn), *tdx = next(xn);
	float *y = malloc(yn * 4), *dx = malloc(xn * 4), *idx = malloc(yn * 4);
	int32_t *arg = malloc(yn * 4);
	B->maxpool_fwd(bc, &q, x, y, arg);
	B->maxpool_bwd(bc, &q, dy, arg, dx);
	for (size_t i = 0; i < yn; i++)
		idx[i] = (float)arg[i];
	char what[96];
	snprintf(what, sizeof what, "MaxPool2d(%d, 2, %d) of (%d, %d, %d, %d): forward", k, p, n, c, h, w);
	near(y, ty, yn, 0, what);
	snprintf(what, sizeof what, "MaxPool2d(%d, 2, %d) of (%d, %d, %d, %d): indices", k, p, n, c, h, w);
	near(idx, tidx, yn, 0, what);
	snprintf(what, sizeof what, "MaxPool2d(%d, 2, %d) of (%d, %d, %d, %d): backward", k, p, n, c, h, w);
	near(dx, tdx, xn, 1e-6, what);
	void *f[] = {x, dy, ty, tidx, tdx, y, dx, idx, arg};
	for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
		free(f[i]);
}

static float *copy(const float *p, size_t n)
{
	float *q = malloc(n * 4);
	memcpy(q, p, n * 4);
	return q;
}

static void t_bnorm(int n, int c, int hw)
{
	char what[128];
	size_t xn = (size_t)n * c * hw, half = xn / 2;
	dp_bnorm q = {n, c, hw, 1e-5f, 0.1f, 0, 0, DP_ACT_NONE};
	float *x = next(xn), *dy = next(xn), *gam = next(c), *bet = next(c), *ty = next(xn),
	      *trm = next(c), *trv = next(c), *tdx = next(xn), *tdg = next(c), *tdb = next(c);
	float *rm = calloc(c, 4), *rv = malloc(c * 4), *save = malloc(2 * c * 4),
	      *y = malloc(xn * 4), *dx = malloc(xn * 4), *dg = malloc(c * 4), *db = malloc(c * 4);
	for (int i = 0; i < c; i++)
		rv[i] = 1;
#define CHECK(got, want, k, s)                                                                  \
	do {                                                                                    \
		snprintf(what, sizeof what, "BatchNorm2d (%d, %d, %d): %s", n, c, hw, s);        \
		near(got, want, k, 1e-5, what);                                                \
	} while (0)
	/* training, this batch's statistics */
	float *dyc = copy(dy, xn);
	B->bnorm_fwd(bc, &q, 1, x, gam, bet, rm, rv, NULL, save, y);
	B->bnorm_bwd(bc, &q, x, gam, save, NULL, NULL, dyc, dx, dg, db);
	CHECK(y, ty, xn, "training forward");
	CHECK(rm, trm, c, "running mean");
	CHECK(rv, trv, c, "running variance");
	CHECK(dx, tdx, xn, "dx");
	CHECK(dg, tdg, c, "dgamma");
	CHECK(db, tdb, c, "dbeta");

	/* two ranks of half a batch each, with the sums of both */
	dp_bnorm h = q;
	h.n = n / 2;
	h.count = (double)n * hw;
	double *s = malloc(4 * c * 8), *s2 = s + 2 * c;
	float *rm2 = calloc(2 * c, 4), *rv2 = malloc(2 * c * 4), *save2 = malloc(4 * c * 4),
	      *dg2 = malloc(2 * c * 4), *db2 = malloc(2 * c * 4);
	for (int i = 0; i < 2 * c; i++)
		rv2[i] = 1;
	B->bnorm_sums(bc, &h, x, s);
	B->bnorm_sums(bc, &h, x + half, s2);
	for (int i = 0; i < 2 * c; i++)
		s[i] += s2[i];
	for (int r = 0; r < 2; r++)
		B->bnorm_fwd(bc, &h, 1, x + r * half, gam, bet, rm2 + r * c, rv2 + r * c, s,
			     save2 + 2 * r * c, y + r * half);
	CHECK(y, ty, xn, "two halves with the sums of both: forward");
	CHECK(rm2, trm, c, "two halves: running mean of the first");
	CHECK(rv2 + c, trv, c, "two halves: running variance of the second");
	memcpy(dyc, dy, xn * 4);
	B->bnorm_bwd_sums(bc, &h, x, save2, NULL, dyc, s);
	B->bnorm_bwd_sums(bc, &h, x + half, save2 + 2 * c, NULL, dyc + half, s2);
	for (int i = 0; i < 2 * c; i++)
		s[i] += s2[i];
	for (int r = 0; r < 2; r++)
		B->bnorm_bwd(bc, &h, x + r * half, gam, save2 + 2 * r * c, s, NULL, dyc + r * half,
			     dx + r * half, dg2 + r * c, db2 + r * c);
	for (int i = 0; i < c; i++) {
		dg[i] = dg2[i] + dg2[c + i];
		db[i] = db2[i] + db2[c + i];
	}
	CHECK(dx, tdx, xn, "two halves: dx");
	CHECK(dg, tdg, c, "two halves: dgamma summed");
	CHECK(db, tdb, c, "two halves: dbeta summed");
	/* without the sums the halves differ from the batch (the test can fail) */
	B->bnorm_fwd(bc, &h, 1, x, gam, bet, rm2, rv2, NULL, save2, y);
	ok(rel(y, ty, half) > 1e-4, "BatchNorm2d (%d, %d, %d): a half alone differs (%.2e)", n, c,
	   hw, rel(y, ty, half));

	/* evaluation mode: the running statistics, and the frozen backward */
	float *erm = next(c), *erv = next(c), *ey = next(xn), *edx = next(xn), *edg = next(c),
	      *edb = next(c);
	dp_bnorm e = q;
	e.eval = 1;
	B->bnorm_fwd(bc, &q, 0, x, gam, bet, erm, erv, NULL, save, y);
	memcpy(dyc, dy, xn * 4);
	B->bnorm_bwd(bc, &e, x, gam, save, NULL, NULL, dyc, dx, dg, db);
	CHECK(y, ey, xn, "evaluation forward");
	CHECK(dx, edx, xn, "evaluation-mode backward: dx");
	CHECK(dg, edg, c, "evaluation-mode backward: dgamma");
	CHECK(db, edb, c, "evaluation-mode backward: dbeta");
#undef CHECK
	void *f[] = {x,   dy,  gam, bet,   ty,   trm, trv, tdx,   tdg, tdb, rm,  rv,  save,
		     y,   dx,  dg,  db,    dyc,  s,   rm2, rv2,   save2, dg2, db2, erm, erv,
		     ey,  edx, edg, edb};
	for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
		free(f[i]);
}

int main(void)
{
	const char *src = getenv("DP_SRC");
	char cmd[4096];
	snprintf(cmd, sizeof cmd, "timeout 300 /usr/bin/python3 %s/tests/torchops_ref.py",
		 src ? src : ".");
	ref = popen(cmd, "r");
	int ch = ref ? fgetc(ref) : EOF;
	if (ch == EOF) {
		if (ref)
			pclose(ref);
		printf("1..0 # SKIP no reference (python3 with numpy and torch: scripts/deps --test)\n");
		return 0;
	}
	ungetc(ch, ref);
	dp_err err;
	dp_backend_opts o = {.threads = 1, .device = -1, .precision = DP_PREC_FP32};
	if (!ok(B->open(&bc, &o, NULL, 0, &err) == DP_OK, "open the CPU backend"))
		return done_testing();
	t_maxpool(2, 3, 9, 8, 3, 1);
	t_maxpool(1, 2, 8, 8, 3, 1);
	t_maxpool(1, 2, 8, 8, 2, 0); /* the fast 2x2 path */
	t_bnorm(6, 3, 25);
	t_bnorm(10, 4, 1);
	ok(fgetc(ref) == EOF && ref_ok, "read the whole reference, each array of its size");
	ok(pclose(ref) == 0, "tests/torchops_ref.py exits 0");
	B->close(bc);
	return done_testing();
}
