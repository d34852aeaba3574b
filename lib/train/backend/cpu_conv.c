/*
 * cpu_conv.c - the CPU backend's own GEMM convolutions (cpu_impl.h): im2col
 * + SGEMM one sample at a time ("im2col", the reference), and the same
 * over the whole batch in one GEMM ("gemm", for small planes).
 *
 *  - im2col: NCHW, the sample's column matrix (c*kh*kw, oh*ow) stays in the
 *    L2 cache, the GEMM output is the sample's NCHW block directly (no
 *    transpose), and bias and activation are applied while that block is
 *    still in cache; the backward pass rebuilds the columns instead of
 *    keeping a batch-sized copy.  A 1x1 stride-1 convolution reads x as
 *    its columns.  Good where oh*ow is wide enough for a GEMM to reach
 *    SGEMM's speed on its own.
 *  - gemm: the columns of all samples side by side, (c*kh*kw, n*oh*ow), so
 *    that layers with small planes (ResNet's layer4 at 2x2, 7x7) make one
 *    GEMM n times as wide instead of n narrow ones; y and dy pass through
 *    a (k, n*oh*ow) copy.  Its workspace grows with the batch: offered
 *    for planes under 16x16 within GEMM_WS_MAX.
 * Both are deterministic: a fixed order of sums, the filter gradient summed
 * over samples inside one GEMM (gemm) or sample after sample (im2col).
 * The bias gradient and the activation's derivative are cpu_plan.c's,
 * applied to dy before these run.
 */
#define _GNU_SOURCE
#include "cpu_impl.h"

#include <cblas.h>
#include <stdint.h>
#include <string.h>

/* Columns of one input position (ki, kj) of the kernel: output x ranges
 * [lo, hi) read inside the image; the rest is padding. */
static void out_range(int pad, int k, int stride, int in, int out, int *lo, int *hi)
{
	/* ix = ox * stride - pad + k must lie in [0, in) */
	int l = pad - k > 0 ? (pad - k + stride - 1) / stride : 0;
	int h = (in + pad - k + stride - 1) / stride; /* first ox with ix >= in */
	if (h > out)
		h = out;
	if (h < l)
		h = l;
	if (l > out)
		l = out;
	*lo = l;
	*hi = h;
}

/* y (rows, n): row r filled with v[r]. */
HOT static void fill_rows(float *y, size_t rows, size_t n, const float *v)
{
	for (size_t r = 0; r < rows; r++)
		for (size_t i = 0; i < n; i++)
			y[r * n + i] = v[r];
}

/* Short rows: an inline loop beats a call to memcpy. */
static inline void copy_to(float *restrict y, const float *restrict x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		y[i] = x[i];
}

static inline void add_to(float *restrict y, const float *restrict x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		y[i] += x[i];
}

/* col (c*kh*kw, oh*ow), rows ld floats apart, from one sample x (c, h, w).
 * Its rows are short
 * (a row of the output plane, with a pixel or two of padding): GCC would
 * turn the copy and the zero fills into calls to memmove and memset, two
 * or three a row, which took longer than the copying (7% of a resnet20
 * step); the loops are kept as loops. */
NO_LIBCALLS HOT static void im2col(const dp_conv2d *g, const float *x, float *col, size_t ld)
{
	for (int ci = 0; ci < g->c; ci++) {
		const float *xc = x + (size_t)ci * g->h * g->w;
		for (int ki = 0; ki < g->kh; ki++)
			for (int kj = 0; kj < g->kw; kj++) {
				float *row = col + ((size_t)(ci * g->kh + ki) * g->kw + kj) * ld;
				int lo, hi;
				out_range(g->pw, kj, g->sw, g->w, g->ow, &lo, &hi);
				for (int oy = 0; oy < g->oh; oy++) {
					float *r = row + (size_t)oy * g->ow;
					int iy = oy * g->sh - g->ph + ki;
					if (iy < 0 || iy >= g->h) {
						memset(r, 0, (size_t)g->ow * sizeof *r);
						continue;
					}
					const float *xr = xc + (size_t)iy * g->w - g->pw + kj;
					for (int ox = 0; ox < lo; ox++)
						r[ox] = 0;
					if (g->sw == 1)
						copy_to(r + lo, xr + lo, (size_t)(hi - lo));
					else
						for (int ox = lo; ox < hi; ox++)
							r[ox] = xr[ox * g->sw];
					for (int ox = hi; ox < g->ow; ox++)
						r[ox] = 0;
				}
			}
	}
}

/* dx (c, h, w) = the sum of col's entries (rows ld floats apart) at each
 * input position. */
HOT static void col2im(const dp_conv2d *g, const float *col, float *dx, size_t ld)
{
	memset(dx, 0, (size_t)g->c * g->h * g->w * sizeof *dx);
	for (int ci = 0; ci < g->c; ci++) {
		float *xc = dx + (size_t)ci * g->h * g->w;
		for (int ki = 0; ki < g->kh; ki++)
			for (int kj = 0; kj < g->kw; kj++) {
				const float *row =
					col + ((size_t)(ci * g->kh + ki) * g->kw + kj) * ld;
				int lo, hi;
				out_range(g->pw, kj, g->sw, g->w, g->ow, &lo, &hi);
				for (int oy = 0; oy < g->oh; oy++) {
					int iy = oy * g->sh - g->ph + ki;
					if (iy < 0 || iy >= g->h)
						continue;
					const float *r = row + (size_t)oy * g->ow;
					float *xr = xc + (size_t)iy * g->w - g->pw + kj;
					if (g->sw == 1)
						add_to(xr + lo, r + lo, (size_t)(hi - lo));
					else
						for (int ox = lo; ox < hi; ox++)
							xr[ox * g->sw] += r[ox];
				}
			}
	}
}

/* A 1x1 convolution with stride 1 and no padding reads x as its columns. */
static int conv_is_pointwise(const dp_conv2d *g)
{
	return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0 &&
	       g->oh == g->h && g->ow == g->w;
}

/* ---- im2col, a sample at a time ---- */

size_t cpu_im2col_ws(const dp_conv2d *g, int pass)
{
	if (conv_is_pointwise(g))
		return 0;
	size_t col = (size_t)g->c * g->kh * g->kw * g->oh * g->ow * sizeof(float);
	return pass == CPU_PASS_FWD ? col : 2 * col;
}

void cpu_im2col_fwd(dp_bectx *ctx, const dp_conv2d *g, const float *x, const float *w,
		    const float *b, float *y, int act, void *ws)
{
	int ckk = g->c * g->kh * g->kw, ohw = g->oh * g->ow;
	size_t xs = (size_t)g->c * g->h * g->w, ys = (size_t)g->k * ohw;
	float *col = ws;
	for (int s = 0; s < g->n; s++) {
		const float *xn = x + s * xs;
		float *yn = y + s * ys;
		const float *cn = xn;
		if (!conv_is_pointwise(g)) {
			im2col(g, xn, col, (size_t)ohw);
			cn = col;
		}
		/* y_n (k, ohw) = b + w (k, ckk) col (ckk, ohw): starting from the
		 * bias with beta 1 spares OpenBLAS a pass clearing y_n */
		if (b)
			fill_rows(yn, (size_t)g->k, (size_t)ohw, b);
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->k, ohw, ckk, 1.0f, w, ckk,
			    cn, ohw, b ? 1.0f : 0.0f, yn, ohw);
		if (act)
			cpu_bias_act(yn, ys, 0.0f, act);
	}
}

void cpu_im2col_dw(dp_bectx *ctx, const dp_conv2d *g, const float *x, const float *dy, float *dw,
		   void *ws)
{
	int ckk = g->c * g->kh * g->kw, ohw = g->oh * g->ow;
	size_t xs = (size_t)g->c * g->h * g->w, ys = (size_t)g->k * ohw;
	float *col = ws;
	for (int s = 0; s < g->n; s++) {
		const float *cn = x + s * xs;
		if (!conv_is_pointwise(g)) {
			im2col(g, cn, col, (size_t)ohw);
			cn = col;
		}
		/* dw (k, ckk) += dy_n (k, ohw) col^T (ohw, ckk) */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g->k, ckk, ohw, 1.0f,
			    dy + s * ys, ohw, cn, ohw, s ? 1.0f : 0.0f, dw, ckk);
	}
}

void cpu_im2col_dx(dp_bectx *ctx, const dp_conv2d *g, const float *dy, const float *w, float *dx,
		   void *ws)
{
	int ckk = g->c * g->kh * g->kw, ohw = g->oh * g->ow, pointwise = conv_is_pointwise(g);
	size_t xs = (size_t)g->c * g->h * g->w, ys = (size_t)g->k * ohw;
	float *dcol = ws;
	for (int s = 0; s < g->n; s++) {
		/* dcol (ckk, ohw) = w^T (ckk, k) dy_n (k, ohw) */
		float *dxn = dx + s * xs;
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ckk, ohw, g->k, 1.0f, w, ckk,
			    dy + s * ys, ohw, 0.0f, pointwise ? dxn : dcol, ohw);
		if (!pointwise)
			col2im(g, dcol, dxn, (size_t)ohw);
	}
}

/* ---- gemm: the whole batch in one GEMM ---- */

/* The most workspace the batch-wide GEMM may take, and the largest plane
 * it is offered for (wider planes make GEMMs wide enough alone). */
#define GEMM_WS_MAX ((size_t)256 << 20)
#define GEMM_PLANE_MAX 255

size_t cpu_gemm_ws(const dp_conv2d *g)
{
	size_t cols = (size_t)g->n * g->oh * g->ow;
	return ((size_t)g->c * g->kh * g->kw + (size_t)g->k) * cols * sizeof(float);
}

int cpu_gemm_fits(const dp_conv2d *g)
{
	return g->oh * g->ow <= GEMM_PLANE_MAX && cpu_gemm_ws(g) <= GEMM_WS_MAX;
}

/* col (ckk, n ohw): every sample's columns side by side. */
static void batch_cols(const dp_conv2d *g, const float *x, float *col)
{
	size_t xs = (size_t)g->c * g->h * g->w, ohw = (size_t)g->oh * g->ow, ld = g->n * ohw;
	for (int s = 0; s < g->n; s++)
		im2col(g, x + s * xs, col + s * ohw, ld);
}

/* t (k, n ohw) from dy (n, k, ohw) */
static void gather_k(const dp_conv2d *g, const float *dy, float *t)
{
	size_t ohw = (size_t)g->oh * g->ow, ld = g->n * ohw;
	for (int s = 0; s < g->n; s++)
		for (int k = 0; k < g->k; k++)
			memcpy(t + k * ld + s * ohw, dy + ((size_t)s * g->k + k) * ohw,
			       ohw * sizeof *t);
}

void cpu_gemm_fwd(dp_bectx *ctx, const dp_conv2d *g, const float *x, const float *w,
		  const float *b, float *y, int act, void *ws)
{
	int ckk = g->c * g->kh * g->kw;
	size_t ohw = (size_t)g->oh * g->ow, ld = g->n * ohw;
	float *col = ws, *t = col + (size_t)ckk * ld;
	batch_cols(g, x, col);
	/* t (k, n ohw) = w (k, ckk) col (ckk, n ohw) */
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->k, (int)ld, ckk, 1.0f, w, ckk, col,
		    (int)ld, 0.0f, t, (int)ld);
	for (int s = 0; s < g->n; s++)
		for (int k = 0; k < g->k; k++) {
			float *yr = y + ((size_t)s * g->k + k) * ohw;
			memcpy(yr, t + k * ld + s * ohw, ohw * sizeof *yr);
			if (b || act)
				cpu_bias_act(yr, ohw, b ? b[k] : 0.0f, act);
		}
}

void cpu_gemm_dw(dp_bectx *ctx, const dp_conv2d *g, const float *x, const float *dy, float *dw,
		 void *ws)
{
	int ckk = g->c * g->kh * g->kw;
	size_t ld = (size_t)g->n * g->oh * g->ow;
	float *col = ws, *t = col + (size_t)ckk * ld;
	batch_cols(g, x, col);
	gather_k(g, dy, t);
	/* dw (k, ckk) = t (k, n ohw) col^T (n ohw, ckk) */
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g->k, ckk, (int)ld, 1.0f, t, (int)ld,
		    col, (int)ld, 0.0f, dw, ckk);
}

void cpu_gemm_dx(dp_bectx *ctx, const dp_conv2d *g, const float *dy, const float *w, float *dx,
		 void *ws)
{
	int ckk = g->c * g->kh * g->kw;
	size_t xs = (size_t)g->c * g->h * g->w, ohw = (size_t)g->oh * g->ow, ld = g->n * ohw;
	float *dcol = ws, *t = dcol + (size_t)ckk * ld;
	gather_k(g, dy, t);
	/* dcol (ckk, n ohw) = w^T (ckk, k) t (k, n ohw) */
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ckk, (int)ld, g->k, 1.0f, w, ckk, t,
		    (int)ld, 0.0f, dcol, (int)ld);
	for (int s = 0; s < g->n; s++)
		col2im(g, dcol + s * ohw, dx + s * xs, ld);
}
