/*
 * cpu_conv.c - the CPU backend's own GEMM convolutions (cpu_impl.h): im2col
 * + SGEMM one sample at a time ("im2col", the reference), the same for 1x1
 * kernels with oneDNN's SGEMM ("pointwise"), and the same over the whole
 * batch in one GEMM ("gemm", for small planes).  All run on
 * the backend's threads: im2col a block of samples a thread (each its own
 * columns; the filter gradient summed a block at a time, then the blocks
 * in order), gemm's GEMMs cut by rows or columns (cpu_sgemm).
 *
 *  - im2col: NCHW, the sample's column matrix (c*kh*kw, oh*ow) stays in the
 *    L2 cache, the GEMM output is the sample's NCHW block directly (no
 *    transpose), and bias and activation are applied while that block is
 *    still in cache; the backward pass rebuilds the columns instead of
 *    keeping a batch-sized copy.  A 1x1 stride-1 convolution reads x as
 *    its columns.  Good where oh*ow is wide enough for a GEMM to reach
 *    SGEMM's speed on its own.
 *  - pointwise: im2col's loops for 1x1 kernels, each GEMM by oneDNN's
 *    SGEMM (its JIT kernels) rather than OpenBLAS's: on ResNet-50's 1x1
 *    layers at 56x56 and 28x28 (GEMMs of 64-512 rows, 784-3136 columns
 *    and a depth of 64-512) 10-35% faster on one AVX-512 core, about even
 *    at 14x14 and 7x7, where gemm or oneDNN's convolution wins.  One GEMM
 *    over the whole batch instead (oneDNN's matmul primitive with the filters
 *    broadcast over samples, or gemm's copies into (c, n*oh*ow)) measured
 *    slower at every plane but 7x7: in NCHW a batch is not one matrix.
 *  - gemm: the columns of all samples side by side, (c*kh*kw, n*oh*ow), so
 *    that layers with small planes (ResNet's layer4 at 2x2, 7x7) make one
 *    GEMM n times as wide instead of n narrow ones; y and dy pass through
 *    a (k, n*oh*ow) copy.  Its workspace grows with the batch: offered
 *    for planes under 16x16 within GEMM_WS_MAX.  Where every output
 *    position sees every input position through a tap of the kernel
 *    inside it and the plane is smaller than the kernel (3x3 "same" on
 *    2x2 or 1x1 planes: ResNet's layer4 at 64x64 or 32x32), the layer is
 *    a dense map from (c, h, w) to (k, oh, ow), and gemm runs it as one:
 *    y (n, k oh ow) = x (n, c h w) W^T with W (k oh ow, c h w) made of
 *    the filters' taps, h w / (kh kw) of the columns' multiplications
 *    (4/9 on 2x2 planes: im2col's columns there are mostly padding) and
 *    no copies of x or y (dense_fits).
 * Both are deterministic: a fixed order of sums for a number of threads,
 * the filter gradient summed over samples inside one GEMM (gemm) or sample
 * after sample within a thread's block (im2col: one block on one thread,
 * so one thread sums as before threads were cut in).
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

/* Threads' blocks of samples: as many as threads, at most one a sample. */
static int blocks_of(const dp_bectx *ctx, const dp_conv2d *g)
{
	return ctx->threads < g->n ? ctx->threads : g->n;
}

static size_t col_floats(const dp_conv2d *g)
{
	return conv_is_pointwise(g) ? 0 : (size_t)g->c * g->kh * g->kw * g->oh * g->ow;
}

/* Columns for each block (forward, input gradient), and for the filter
 * gradient the sums of every block but the first. */
size_t cpu_im2col_ws(const dp_bectx *ctx, const dp_conv2d *g, int pass)
{
	size_t b = (size_t)blocks_of(ctx, g), col = (b * col_floats(g) + 16 * b) * sizeof(float);
	if (pass == CPU_PASS_DW)
		col += (b - 1) * ((size_t)g->k * g->c * g->kh * g->kw + 16) * sizeof(float);
	return col;
}

/* The context whose threads cut a block's GEMMs: only where blocks leave
 * threads idle (else NULL: one thread a GEMM). */
static dp_bectx *gemm_ctx(dp_bectx *ctx, const dp_conv2d *g)
{
	return blocks_of(ctx, g) < ctx->threads ? ctx : NULL;
}

/* A block's own columns (64-byte aligned) */
static float *block_col(const dp_conv2d *g, void *ws, int b)
{
	return (float *)ws + (size_t)b * ((col_floats(g) + 15) / 16 * 16);
}

typedef struct im2col_job {
	dp_bectx *ctx; /* for cpu_sgemm: NULL (each GEMM on its block's thread)
			* unless there are fewer blocks than threads (a batch of 1) */
	dp_bectx *owner; /* the backend (pointwise: where oneDNN's failure goes) */
	int dnnl;        /* the GEMMs by oneDNN's SGEMM (pointwise), else OpenBLAS's */
	const dp_conv2d *g;
	const float *x, *w, *b, *dy;
	float *y, *dx, *dw;
	int act, blocks;
	void *ws;
} im2col_job;

/* C = op(A) op(B) + beta C (row-major) for a block: cpu_sgemm, or oneDNN's
 * SGEMM on the block's thread (all the backend's where j->ctx is set). */
static void job_gemm(const im2col_job *j, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m,
		     int n, int k, const float *a, int lda, const float *b, int ldb, float beta,
		     float *c, int ldc)
{
	if (j->dnnl)
		cpu_dnnl_sgemm(j->owner, j->ctx != NULL, ta, tb, m, n, k, a, lda, b, ldb, beta, c,
			       ldc);
	else
		cpu_sgemm(j->ctx, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

static void block_range(const im2col_job *j, int blk, int *s0, int *s1)
{
	*s0 = (int)((long)j->g->n * blk / j->blocks);
	*s1 = (int)((long)j->g->n * (blk + 1) / j->blocks);
}

static void im2col_fwd_part(void *a, int blk, int worker)
{
	const im2col_job *j = a;
	const dp_conv2d *g = j->g;
	int ckk = g->c * g->kh * g->kw, ohw = g->oh * g->ow, s0, s1;
	size_t xs = (size_t)g->c * g->h * g->w, ys = (size_t)g->k * ohw;
	float *col = block_col(g, j->ws, blk);
	block_range(j, blk, &s0, &s1);
	for (int s = s0; s < s1; s++) {
		const float *xn = j->x + s * xs;
		float *yn = j->y + s * ys;
		const float *cn = xn;
		if (!conv_is_pointwise(g)) {
			im2col(g, xn, col, (size_t)ohw);
			cn = col;
		}
		/* y_n (k, ohw) = b + w (k, ckk) col (ckk, ohw): starting from the
		 * bias with beta 1 spares OpenBLAS a pass clearing y_n */
		if (j->b)
			fill_rows(yn, (size_t)g->k, (size_t)ohw, j->b);
		job_gemm(j, CblasNoTrans, CblasNoTrans, g->k, ohw, ckk, j->w, ckk, cn, ohw,
			 j->b ? 1.0f : 0.0f, yn, ohw);
		if (j->act)
			cpu_bias_act(yn, ys, 0.0f, j->act);
	}
}

/* The job of a pass: im2col's GEMMs by OpenBLAS, pointwise's by oneDNN */
static im2col_job job_of(dp_bectx *ctx, const dp_conv2d *g, int dnnl, void *ws)
{
	return (im2col_job){.ctx = gemm_ctx(ctx, g), .owner = ctx, .dnnl = dnnl, .g = g,
			    .blocks = blocks_of(ctx, g), .ws = ws};
}

static void im2col_fwd(dp_bectx *ctx, const dp_conv2d *g, int dnnl, const float *x,
		       const float *w, const float *b, float *y, int act, void *ws)
{
	im2col_job j = job_of(ctx, g, dnnl, ws);
	j.x = x, j.w = w, j.b = b, j.y = y, j.act = act;
	cpu_par_run(ctx, j.blocks, im2col_fwd_part, &j);
}

void cpu_im2col_fwd(dp_bectx *ctx, const dp_conv2d *g, const float *x, const float *w,
		    const float *b, float *y, int act, void *ws)
{
	im2col_fwd(ctx, g, 0, x, w, b, y, act, ws);
}

/* Block blk's filter gradient: into dw (the first block), else into its
 * sums after the columns. */
static float *block_dw(const im2col_job *j, int blk)
{
	const dp_conv2d *g = j->g;
	if (!blk)
		return j->dw;
	float *after = block_col(g, j->ws, j->blocks);
	return after + (size_t)(blk - 1) * (((size_t)g->k * g->c * g->kh * g->kw + 15) / 16 * 16);
}

static void im2col_dw_part(void *a, int blk, int worker)
{
	const im2col_job *j = a;
	const dp_conv2d *g = j->g;
	int ckk = g->c * g->kh * g->kw, ohw = g->oh * g->ow, s0, s1;
	size_t xs = (size_t)g->c * g->h * g->w, ys = (size_t)g->k * ohw;
	float *col = block_col(g, j->ws, blk), *dw = block_dw(j, blk);
	block_range(j, blk, &s0, &s1);
	for (int s = s0; s < s1; s++) {
		const float *cn = j->x + s * xs;
		if (!conv_is_pointwise(g)) {
			im2col(g, cn, col, (size_t)ohw);
			cn = col;
		}
		/* dw (k, ckk) += dy_n (k, ohw) col^T (ohw, ckk) */
		job_gemm(j, CblasNoTrans, CblasTrans, g->k, ckk, ohw, j->dy + s * ys, ohw, cn, ohw,
			 s > s0 ? 1.0f : 0.0f, dw, ckk);
	}
}

/* dw += the other blocks' sums, in block order, over dw's elements lo..hi */
static void dw_sum_part(void *a, size_t lo, size_t hi)
{
	const im2col_job *j = a;
	for (int blk = 1; blk < j->blocks; blk++) {
		const float *p = block_dw(j, blk);
		for (size_t i = lo; i < hi; i++)
			j->dw[i] += p[i];
	}
}

static void im2col_dw(dp_bectx *ctx, const dp_conv2d *g, int dnnl, const float *x,
		      const float *dy, float *dw, void *ws)
{
	im2col_job j = job_of(ctx, g, dnnl, ws);
	j.x = x, j.dy = dy, j.dw = dw;
	cpu_par_run(ctx, j.blocks, im2col_dw_part, &j);
	if (j.blocks > 1)
		cpu_par_range(ctx, (size_t)g->k * g->c * g->kh * g->kw, CPU_EW_MIN, dw_sum_part, &j);
}

static void im2col_dx_part(void *a, int blk, int worker)
{
	const im2col_job *j = a;
	const dp_conv2d *g = j->g;
	int ckk = g->c * g->kh * g->kw, ohw = g->oh * g->ow, pointwise = conv_is_pointwise(g), s0, s1;
	size_t xs = (size_t)g->c * g->h * g->w, ys = (size_t)g->k * ohw;
	float *dcol = block_col(g, j->ws, blk);
	block_range(j, blk, &s0, &s1);
	for (int s = s0; s < s1; s++) {
		/* dcol (ckk, ohw) = w^T (ckk, k) dy_n (k, ohw) */
		float *dxn = j->dx + s * xs;
		job_gemm(j, CblasTrans, CblasNoTrans, ckk, ohw, g->k, j->w, ckk, j->dy + s * ys, ohw,
			 0.0f, pointwise ? dxn : dcol, ohw);
		if (!pointwise)
			col2im(g, dcol, dxn, (size_t)ohw);
	}
}

void cpu_im2col_dw(dp_bectx *ctx, const dp_conv2d *g, const float *x, const float *dy, float *dw,
		   void *ws)
{
	im2col_dw(ctx, g, 0, x, dy, dw, ws);
}

static void im2col_dx(dp_bectx *ctx, const dp_conv2d *g, int dnnl, const float *dy,
		      const float *w, float *dx, void *ws)
{
	im2col_job j = job_of(ctx, g, dnnl, ws);
	j.w = w, j.dy = dy, j.dx = dx;
	cpu_par_run(ctx, j.blocks, im2col_dx_part, &j);
}

void cpu_im2col_dx(dp_bectx *ctx, const dp_conv2d *g, const float *dy, const float *w, float *dx,
		   void *ws)
{
	im2col_dx(ctx, g, 0, dy, w, dx, ws);
}

/* ---- pointwise: im2col's loops for 1x1 kernels, oneDNN's SGEMM ---- */

int cpu_pw_fits(const dp_conv2d *g)
{
	return g->kh == 1 && g->kw == 1 && cpu_dnnl_version(0) != NULL;
}

void cpu_pw_fwd(dp_bectx *ctx, const dp_conv2d *g, const float *x, const float *w,
		const float *b, float *y, int act, void *ws)
{
	im2col_fwd(ctx, g, 1, x, w, b, y, act, ws);
}

void cpu_pw_dw(dp_bectx *ctx, const dp_conv2d *g, const float *x, const float *dy, float *dw,
	       void *ws)
{
	im2col_dw(ctx, g, 1, x, dy, dw, ws);
}

void cpu_pw_dx(dp_bectx *ctx, const dp_conv2d *g, const float *dy, const float *w, float *dx,
	       void *ws)
{
	im2col_dx(ctx, g, 1, dy, w, dx, ws);
}

/* ---- gemm: the whole batch in one GEMM ---- */

/* The most workspace the batch-wide GEMM may take, and the largest plane
 * it is offered for (wider planes make GEMMs wide enough alone). */
#define GEMM_WS_MAX ((size_t)256 << 20)
#define GEMM_PLANE_MAX 255

/* Is conv g a dense map: each output position's window, stride 1 or
 * not, holds every input position, and the plane smaller than the kernel
 * (fewer multiplications than the columns')?  (DENSE_MAP_MAX bounds the
 * table of taps by output and input position.) */
#define DENSE_MAP_MAX 1024
static int dense_fits(const dp_conv2d *g)
{
	return g->h * g->w < g->kh * g->kw && g->ph - (g->oh - 1) * g->sh >= 0 &&
	       g->h - 1 + g->ph < g->kh && g->pw - (g->ow - 1) * g->sw >= 0 &&
	       g->w - 1 + g->pw < g->kw && g->oh * g->ow * g->h * g->w <= DENSE_MAP_MAX &&
	       (size_t)g->k * g->oh * g->ow * g->c * g->h * g->w * sizeof(float) <= GEMM_WS_MAX;
}

size_t cpu_gemm_ws(const dp_conv2d *g)
{
	if (dense_fits(g))
		return (size_t)g->k * g->oh * g->ow * g->c * g->h * g->w * sizeof(float);
	size_t cols = (size_t)g->n * g->oh * g->ow;
	return ((size_t)g->c * g->kh * g->kw + (size_t)g->k) * cols * sizeof(float);
}

int cpu_gemm_fits(const dp_conv2d *g)
{
	return g->oh * g->ow <= GEMM_PLANE_MAX && cpu_gemm_ws(g) <= GEMM_WS_MAX;
}

typedef struct gemm_conv_job {
	const dp_conv2d *g;
	const float *x, *b, *dy;
	float *col, *t, *y, *dx;
	int act;
	int ckk;   /* the columns' rows: c kh kw */
	size_t ld; /* their columns: n oh ow */
} gemm_conv_job;

/* j's columns in the workspace ws: col (ckk, n ohw), then t (k, n ohw). */
static void gemm_place(gemm_conv_job *j, void *ws)
{
	const dp_conv2d *g = j->g;
	j->ckk = g->c * g->kh * g->kw;
	j->ld = (size_t)g->n * g->oh * g->ow;
	j->col = ws;
	j->t = j->col + (size_t)j->ckk * j->ld;
}

/* Samples lo..hi of col (ckk, n ohw), every sample's columns side by
 * side: from x, or (j->dx given) summed back into dx. */
static void batch_cols_part(void *a, size_t lo, size_t hi)
{
	const gemm_conv_job *j = a;
	const dp_conv2d *g = j->g;
	size_t xs = (size_t)g->c * g->h * g->w, ohw = (size_t)g->oh * g->ow;
	for (size_t s = lo; s < hi; s++)
		if (j->dx)
			col2im(g, j->col + s * ohw, j->dx + s * xs, j->ld);
		else
			im2col(g, j->x + s * xs, j->col + s * ohw, j->ld);
}

/* t (k, n ohw) from dy (n, k, ohw), samples lo..hi */
static void gather_k_part(void *a, size_t lo, size_t hi)
{
	const gemm_conv_job *j = a;
	const dp_conv2d *g = j->g;
	size_t ohw = (size_t)g->oh * g->ow, ld = g->n * ohw;
	for (size_t s = lo; s < hi; s++)
		for (int k = 0; k < g->k; k++)
			memcpy(j->t + k * ld + s * ohw, j->dy + (s * g->k + k) * ohw,
			       ohw * sizeof *j->t);
}

/* y (n, k, ohw) = act(t (k, n ohw) + b), samples lo..hi */
static void scatter_k_part(void *a, size_t lo, size_t hi)
{
	const gemm_conv_job *j = a;
	const dp_conv2d *g = j->g;
	size_t ohw = (size_t)g->oh * g->ow, ld = g->n * ohw;
	for (size_t s = lo; s < hi; s++)
		for (int k = 0; k < g->k; k++) {
			float *yr = j->y + (s * g->k + k) * ohw;
			memcpy(yr, j->t + k * ld + s * ohw, ohw * sizeof *yr);
			if (j->b || j->act)
				cpu_bias_act(yr, ohw, j->b ? j->b[k] : 0.0f, j->act);
		}
}

/* ---- the dense map (dense_fits): rows r = (k, o), o = (oy, ox), columns
 * (c, i), i = (iy, ix): W[r][c, i] = w[k][c][tap(o, i)] with tap(o, i) =
 * (iy - oy sh + ph, ix - ox sw + pw) ---- */
typedef struct dense_job {
	const dp_conv2d *g;
	const float *w, *b;
	float *big, *y, *dw;
	int act;
	int tap[DENSE_MAP_MAX]; /* by o * h w + i: the tap's index in a filter's kh kw */
} dense_job;

static void dense_taps(const dp_conv2d *g, dense_job *j)
{
	int hw = g->h * g->w;
	for (int o = 0; o < g->oh * g->ow; o++)
		for (int i = 0; i < hw; i++)
			j->tap[o * hw + i] = (i / g->w - o / g->ow * g->sh + g->ph) * g->kw +
					     (i % g->w - o % g->ow * g->sw + g->pw);
}

/* Filters lo..hi: the rows of W from w (j->dw NULL), or dw from dW (in
 * big), each tap the sum of its places, output positions then input
 * positions in order. */
static void dense_map_part(void *a, size_t lo, size_t hi)
{
	const dense_job *j = a;
	const dp_conv2d *g = j->g;
	size_t ohw = (size_t)g->oh * g->ow, hw = (size_t)g->h * g->w, kk = (size_t)g->kh * g->kw,
	       cols = g->c * hw;
	for (size_t k = lo; k < hi; k++)
		for (int c = 0; c < g->c; c++) {
			const float *f = j->w ? j->w + (k * g->c + c) * kk : NULL;
			float *df = j->dw ? j->dw + (k * g->c + c) * kk : NULL;
			if (df)
				memset(df, 0, kk * sizeof *df);
			for (size_t o = 0; o < ohw; o++) {
				float *row = j->big + (k * ohw + o) * cols + c * hw;
				const int *t = j->tap + o * hw;
				for (size_t i = 0; df && i < hw; i++)
					df[t[i]] += row[i];
				for (size_t i = 0; !df && i < hw; i++)
					row[i] = f[t[i]];
			}
		}
}

/* y's samples lo..hi: act(y + b) */
static void dense_bias_part(void *a, size_t lo, size_t hi)
{
	const dense_job *j = a;
	const dp_conv2d *g = j->g;
	size_t ohw = (size_t)g->oh * g->ow;
	for (size_t s = lo; s < hi; s++)
		for (int k = 0; k < g->k; k++)
			cpu_bias_act(j->y + (s * g->k + k) * ohw, ohw, j->b ? j->b[k] : 0.0f, j->act);
}

static void dense_fwd(dp_bectx *ctx, const dp_conv2d *g, const float *x, const float *w,
		      const float *b, float *y, int act, void *ws)
{
	int rows = g->k * g->oh * g->ow, cols = g->c * g->h * g->w;
	dense_job j = {.g = g, .w = w, .b = b, .big = ws, .y = y, .act = act};
	dense_taps(g, &j);
	cpu_par_range(ctx, (size_t)g->k, 1, dense_map_part, &j);
	/* y (n, rows) = x (n, cols) W^T */
	cpu_sgemm(ctx, CblasNoTrans, CblasTrans, g->n, rows, cols, 1.0f, x, cols, j.big, cols, 0.0f,
		  y, rows);
	if (b || act)
		cpu_par_range(ctx, (size_t)g->n, 1, dense_bias_part, &j);
}

static void dense_dx(dp_bectx *ctx, const dp_conv2d *g, const float *dy, const float *w,
		     float *dx, void *ws)
{
	int rows = g->k * g->oh * g->ow, cols = g->c * g->h * g->w;
	dense_job j = {.g = g, .w = w, .big = ws};
	dense_taps(g, &j);
	cpu_par_range(ctx, (size_t)g->k, 1, dense_map_part, &j);
	/* dx (n, cols) = dy (n, rows) W */
	cpu_sgemm(ctx, CblasNoTrans, CblasNoTrans, g->n, cols, rows, 1.0f, dy, rows, j.big, cols,
		  0.0f, dx, cols);
}

static void dense_dw(dp_bectx *ctx, const dp_conv2d *g, const float *x, const float *dy,
		     float *dw, void *ws)
{
	int rows = g->k * g->oh * g->ow, cols = g->c * g->h * g->w;
	dense_job j = {.g = g, .big = ws, .dw = dw};
	dense_taps(g, &j);
	/* dW (rows, cols) = dy^T (rows, n) x (n, cols) */
	cpu_sgemm(ctx, CblasTrans, CblasNoTrans, rows, cols, g->n, 1.0f, dy, rows, x, cols, 0.0f,
		  j.big, cols);
	cpu_par_range(ctx, (size_t)g->k, 1, dense_map_part, &j);
}

static void batch_fwd(dp_bectx *ctx, const dp_conv2d *g, const float *x, const float *w,
		      const float *b, float *y, int act, void *ws)
{
	gemm_conv_job j = {.g = g, .x = x, .b = b, .y = y, .act = act};
	gemm_place(&j, ws);
	cpu_par_range(ctx, (size_t)g->n, 1, batch_cols_part, &j);
	/* t (k, n ohw) = w (k, ckk) col (ckk, n ohw) */
	cpu_sgemm(ctx, CblasNoTrans, CblasNoTrans, g->k, (int)j.ld, j.ckk, 1.0f, w, j.ckk, j.col,
		  (int)j.ld, 0.0f, j.t, (int)j.ld);
	cpu_par_range(ctx, (size_t)g->n, 1, scatter_k_part, &j);
}

static void batch_dw(dp_bectx *ctx, const dp_conv2d *g, const float *x, const float *dy,
		     float *dw, void *ws)
{
	gemm_conv_job j = {.g = g, .x = x, .dy = dy};
	gemm_place(&j, ws);
	cpu_par_range(ctx, (size_t)g->n, 1, batch_cols_part, &j);
	cpu_par_range(ctx, (size_t)g->n, 1, gather_k_part, &j);
	/* dw (k, ckk) = t (k, n ohw) col^T (n ohw, ckk) */
	cpu_sgemm(ctx, CblasNoTrans, CblasTrans, g->k, j.ckk, (int)j.ld, 1.0f, j.t, (int)j.ld, j.col,
		  (int)j.ld, 0.0f, dw, j.ckk);
}

static void batch_dx(dp_bectx *ctx, const dp_conv2d *g, const float *dy, const float *w,
		     float *dx, void *ws)
{
	gemm_conv_job j = {.g = g, .dy = dy, .dx = dx};
	gemm_place(&j, ws);
	cpu_par_range(ctx, (size_t)g->n, 1, gather_k_part, &j);
	/* dcol (ckk, n ohw) = w^T (ckk, k) t (k, n ohw) */
	cpu_sgemm(ctx, CblasTrans, CblasNoTrans, j.ckk, (int)j.ld, g->k, 1.0f, w, j.ckk, j.t,
		  (int)j.ld, 0.0f, j.col, (int)j.ld);
	cpu_par_range(ctx, (size_t)g->n, 1, batch_cols_part, &j);
}

/* gemm: the dense map where it fits, else the batch's columns. */
void cpu_gemm_fwd(dp_bectx *ctx, const dp_conv2d *g, const float *x, const float *w,
		  const float *b, float *y, int act, void *ws)
{
	(dense_fits(g) ? dense_fwd : batch_fwd)(ctx, g, x, w, b, y, act, ws);
}

void cpu_gemm_dw(dp_bectx *ctx, const dp_conv2d *g, const float *x, const float *dy, float *dw,
		 void *ws)
{
	(dense_fits(g) ? dense_dw : batch_dw)(ctx, g, x, dy, dw, ws);
}

void cpu_gemm_dx(dp_bectx *ctx, const dp_conv2d *g, const float *dy, const float *w, float *dx,
		 void *ws)
{
	(dense_fits(g) ? dense_dx : batch_dx)(ctx, g, dy, w, dx, ws);
}
