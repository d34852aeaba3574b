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
 * SGEMM uses the threads given to open() (1 by default: bit-reproducible
 * and the fair one-core comparison), and so do Winograd's transforms,
 * batchnorm and max pooling (par_run); the rest runs in the calling
 * thread.  Summation orders are
 * fixed, so results are deterministic.
 */
#define _GNU_SOURCE
#include "dp_backend.h"
#include "dp_rng.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Elementwise loops are compiled for AVX-512, AVX2 and baseline x86-64 and
 * the best is picked at load time (GCC function multiversioning); the
 * Makefile builds this file with -O3 so they vectorise. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(DP_NO_CLONES)
#define HOT __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define HOT
#endif

/* Loops that GCC would otherwise replace by calls to memcpy and memset. */
#if defined(__GNUC__) && !defined(__clang__)
#define NO_LIBCALLS __attribute__((optimize("no-tree-loop-distribute-patterns")))
#else
#define NO_LIBCALLS
#endif

/* OpenBLAS extensions (declared in its cblas.h; repeated for other BLAS
 * headers that lack them). */
void openblas_set_num_threads(int num_threads);
char *openblas_get_corename(void);

/* ---- A pool for the backend's own loops ---------------------------------
 * With threads > 1 OpenBLAS runs each GEMM on that many threads, while the
 * backend's own loops (Winograd's transforms, batchnorm, pooling) ran on
 * the calling thread alone.  par_run(ctx, n, fn, arg) runs fn(arg, i, worker) for every i < n
 * on the calling thread (worker 0) and threads - 1 helpers, each taking
 * the next i from a shared counter.  What an i computes does not depend on
 * the thread that runs it, so results stay the same for any number of
 * threads.  The helpers sleep on a condition variable between jobs and run
 * with every signal blocked (the program's handlers run on its own
 * threads). */
typedef void par_fn(void *arg, int i, int worker);

typedef struct par_pool {
	int nhelp;
	pthread_t *tid;
	pthread_mutex_t mu;
	pthread_cond_t go, idle;
	par_fn *fn;
	void *arg;
	int n;
	atomic_int next;
	int busy;      /* helpers still in the current job */
	unsigned gen;  /* jobs started */
	int quit;
} par_pool;

typedef struct par_helper {
	par_pool *pool;
	int worker;
} par_helper;

static void par_take(par_pool *p, par_fn *fn, void *arg, int n, int worker)
{
	for (int i; (i = atomic_fetch_add(&p->next, 1)) < n;)
		fn(arg, i, worker);
}

static void *par_main(void *a)
{
	par_helper *h = a;
	par_pool *p = h->pool;
	unsigned seen = 0;
	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->quit && p->gen == seen)
			pthread_cond_wait(&p->go, &p->mu);
		if (p->quit)
			break;
		seen = p->gen;
		par_fn *fn = p->fn;
		void *arg = p->arg;
		int n = p->n;
		pthread_mutex_unlock(&p->mu);
		par_take(p, fn, arg, n, h->worker);
		pthread_mutex_lock(&p->mu);
		if (--p->busy == 0)
			pthread_cond_signal(&p->idle);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

static void par_stop(par_pool *p, par_helper *h)
{
	pthread_mutex_lock(&p->mu);
	p->quit = 1;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	for (int k = 0; k < p->nhelp; k++)
		pthread_join(p->tid[k], NULL);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->go);
	pthread_cond_destroy(&p->idle);
	free(p->tid);
	free(h);
}

struct dp_bectx {
	int threads;
	int conv_algo; /* dp_backend_opts.conv_algo */
	par_pool pool; /* threads - 1 helpers (none for one thread) */
	par_helper *helpers;
};

/* Start threads - 1 helpers; with fewer (no memory, no thread), the loops
 * run on fewer threads, with the same results. */
static void par_start(dp_bectx *c)
{
	par_pool *p = &c->pool;
	int want = c->threads - 1;
	if (want <= 0)
		return;
	p->tid = calloc((size_t)want, sizeof *p->tid);
	c->helpers = calloc((size_t)want, sizeof *c->helpers);
	if (!p->tid || !c->helpers) {
		free(p->tid);
		free(c->helpers);
		p->tid = NULL;
		c->helpers = NULL;
		return;
	}
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->go, NULL);
	pthread_cond_init(&p->idle, NULL);
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (int k = 0; k < want; k++) {
		c->helpers[k] = (par_helper){p, k + 1};
		if (pthread_create(&p->tid[k], NULL, par_main, &c->helpers[k]) != 0)
			break;
		p->nhelp++;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void par_run(dp_bectx *c, int n, par_fn *fn, void *arg)
{
	par_pool *p = &c->pool;
	if (p->nhelp == 0 || n <= 1) {
		for (int i = 0; i < n; i++)
			fn(arg, i, 0);
		return;
	}
	pthread_mutex_lock(&p->mu);
	p->fn = fn;
	p->arg = arg;
	p->n = n;
	atomic_store(&p->next, 0);
	p->busy = p->nhelp;
	p->gen++;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	par_take(p, fn, arg, n, 0);
	pthread_mutex_lock(&p->mu);
	while (p->busy)
		pthread_cond_wait(&p->idle, &p->mu);
	pthread_mutex_unlock(&p->mu);
}

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
	c->conv_algo = o ? o->conv_algo : 0;
	openblas_set_num_threads(c->threads);
	par_start(c);
	if (desc)
		snprintf(desc, desc_len, "cpu: OpenBLAS (%s kernels), %d thread%s",
			 openblas_get_corename(), c->threads, c->threads == 1 ? "" : "s");
	*ctx = c;
	return DP_OK;
}

static void cpu_close(dp_bectx *ctx)
{
	if (ctx && ctx->pool.tid)
		par_stop(&ctx->pool, ctx->helpers);
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

static int cpu_sync(dp_bectx *ctx, dp_err *e) { return DP_OK; }

static void cpu_fill(dp_bectx *ctx, float *p, float v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = v;
}

static void cpu_scale(dp_bectx *ctx, float *p, float s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] *= s;
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

static void cpu_act_fwd(dp_bectx *ctx, int act, size_t n, const float *x, float *y)
{
	if (x != y)
		memcpy(y, x, n * sizeof *y);
	act_apply(act, y, n);
}

static void cpu_act_bwd(dp_bectx *ctx, int act, size_t n, const float *y, const float *dy,
			float *dx)
{
	if (dx != dy)
		memcpy(dx, dy, n * sizeof *dx);
	act_grad(act, y, dx, n);
}

HOT static void cpu_add(dp_bectx *ctx, size_t n, const float *a, const float *b, float *y, int act)
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

/* ---- dense ------------------------------------------------------------ */

static void cpu_dense_fwd(dp_bectx *ctx, int n, int in, int out, const float *x, const float *w,
			  const float *b, float *y, int act)
{
	/* y = x w^T: (n, in) (in, out) */
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f, x, in, w, in, 0.0f,
		    y, out);
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
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, n, 1.0f, dy, out, x, in,
		    0.0f, dw, in);
	/* dx = dy w: (n, out) (out, in) */
	if (dx)
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in, out, 1.0f, dy, out, w,
			    in, 0.0f, dx, in);
}

/* ---- convolution ------------------------------------------------------- */

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

/* col (c*kh*kw, oh*ow) from one sample x (c, h, w).  Its rows are short
 * (a row of the output plane, with a pixel or two of padding): GCC would
 * turn the copy and the zero fills into calls to memmove and memset, two
 * or three a row, which took longer than the copying (7% of a resnet20
 * step); the loops are kept as loops. */
NO_LIBCALLS HOT static void im2col(const dp_conv2d *g, const float *x, float *col)
{
	int ohw = g->oh * g->ow;
	for (int ci = 0; ci < g->c; ci++) {
		const float *xc = x + (size_t)ci * g->h * g->w;
		for (int ki = 0; ki < g->kh; ki++)
			for (int kj = 0; kj < g->kw; kj++) {
				float *row = col + ((size_t)(ci * g->kh + ki) * g->kw + kj) * ohw;
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

/* dx (c, h, w) = the sum of col's entries at each input position. */
HOT static void col2im(const dp_conv2d *g, const float *col, float *dx)
{
	int ohw = g->oh * g->ow;
	memset(dx, 0, (size_t)g->c * g->h * g->w * sizeof *dx);
	for (int ci = 0; ci < g->c; ci++) {
		float *xc = dx + (size_t)ci * g->h * g->w;
		for (int ki = 0; ki < g->kh; ki++)
			for (int kj = 0; kj < g->kw; kj++) {
				const float *row =
					col + ((size_t)(ci * g->kh + ki) * g->kw + kj) * ohw;
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

/* ---- Winograd F(2x2, 3x3) ------------------------------------------------
 * A 3x3 convolution with stride 1 computes each 2x2 block of outputs from a
 * 4x4 block of inputs with 16 multiplications per channel pair instead of
 * 36 (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks",
 * 2016):  Y = A^T [ sum_c (G g G^T) .* (B^T d B) ] A.  The products become
 * 16 GEMMs, one per position of the 4x4 block, over all the tiles of a
 * group of samples: M[xi] (tiles, cout) = V[xi] (tiles, cin) U[xi]^T.  Used
 * for the forward pass, for the input gradient (a convolution of dy with
 * the filters flipped and transposed) and for the filter gradient (the
 * transpose of the forward map, below) of 3x3 stride-1 layers that are
 * wide enough for the GEMMs to pay.
 * The transforms take 16 channels at a time as the lanes of a vector: the
 * planes are first transposed to pixel-major (16x16 blocks in registers),
 * so that a tile's arithmetic is whole vectors however small the plane
 * (ResNet's 7x7 planes made loops over a plane's rows 4 tiles long), and
 * V, M and Q keep the channels innermost.
 * The rounding differs from the direct sum by a few ulps (the transforms'
 * coefficients are 1/2 and +-1). */

typedef struct wino {
	int n, cin, h, w;    /* input (n, cin, h, w) */
	int cout, oh, ow;    /* output (n, cout, oh, ow) */
	int ph, pw;          /* zero padding before the input */
	int th, tw;          /* tiles of 2x2 outputs */
	int hp, wp;          /* padded input plane: (2 th + 2) x (2 tw + 2) */
	int group;           /* samples per round of GEMMs */
	int workers;         /* threads running the transforms (planes each) */
} wino;

static int wino_fits(const dp_conv2d *g)
{
	return g->kh == 3 && g->kw == 3 && g->sh == 1 && g->sw == 1 && g->c >= 8 && g->k >= 8 &&
	       g->oh * g->ow >= 16 && g->ph <= 2 && g->pw <= 2 && g->oh >= 2 && g->ow >= 2;
}

static wino wino_plan(int n, int cin, int h, int w, int cout, int oh, int ow, int ph, int pw,
		       int workers)
{
	wino p = {n, cin, h, w, cout, oh, ow, ph, pw, 0, 0, 0, 0, 0, workers};
	p.th = (oh + 1) / 2;
	p.tw = (ow + 1) / 2;
	p.hp = 2 * p.th + 2;
	p.wp = 2 * p.tw + 2;
	int tiles = p.th * p.tw;
	p.group = tiles >= 512 ? 1 : 512 / tiles;
	if (p.group > n)
		p.group = n;
	return p;
}

static size_t wino_ws(const wino *p)
{
	size_t t = (size_t)p->group * p->th * p->tw;
	return (16 * (size_t)p->cout * p->cin       /* U */
		+ 16 * (size_t)p->cin * t           /* V */
		+ 16 * (size_t)p->cout * t          /* M */
		+ 16 * (size_t)p->hp * p->wp * p->workers + 16) /* 16 padded planes, pixel-major */
	       * sizeof(float) + 64 * 8;
}

/* The workspace's parts: U (16, cout, cin), V (16, t, cin), M (16, t,
 * cout), each worker's gathered planes (64-byte aligned). */
typedef float v16 __attribute__((vector_size(64)));
typedef int v16i __attribute__((vector_size(64)));
typedef struct wino_bufs {
	float *u, *v, *m;
	v16 *planes;
} wino_bufs;

static wino_bufs wino_split(const wino *p, float *ws)
{
	size_t tmax = (size_t)p->group * p->th * p->tw;
	wino_bufs b;
	b.u = ws;
	b.v = b.u + 16 * (size_t)p->cout * p->cin;
	b.m = b.v + 16 * (size_t)p->cin * tmax;
	b.planes = (v16 *)(((uintptr_t)(b.m + 16 * (size_t)p->cout * tmax) + 63) & ~(uintptr_t)63);
	return b;
}

/* Lanes 0 .. L-1 of a vector to or from memory (pointers: a vector
 * argument's ABI would differ between the clones of a HOT caller). */
#define store_lanes(dst, val, L)                                        \
	do {                                                            \
		v16 sl_ = (val);                                        \
		if ((L) == 16)                                          \
			memcpy((dst), &sl_, sizeof sl_);                \
		else                                                    \
			memcpy((dst), &sl_, (size_t)(L) * sizeof(float)); \
	} while (0)

static inline void load_lanes(v16 *val, const float *src, int L)
{
	if (L == 16) {
		memcpy(val, src, sizeof *val);
		return;
	}
	memset(val, 0, sizeof *val);
	memcpy(val, src, (size_t)L * sizeof(float));
}

/* U[xi][o][i] = (G g G^T)[xi] for the 3x3 filter g of output o, input i:
 * w[o][i] (flip 0: forward), or w[i][o] turned by 180 degrees (flip 1:
 * the input gradient, where o runs over the layer's input channels).
 * Sixteen inputs i at a time are the vector lanes. */
HOT static void wino_filters(const float *w, int cout, int cin, int flip, float *u)
{
	size_t plane = (size_t)cout * cin;
	for (int o = 0; o < cout; o++)
		for (int i0 = 0; i0 < cin; i0 += 16) {
			int L = cin - i0 < 16 ? cin - i0 : 16;
			v16 g[9] = {{0}};
			for (int l = 0; l < L; l++) {
				int i = i0 + l;
				const float *src = flip ? w + ((size_t)i * cout + o) * 9
							: w + ((size_t)o * cin + i) * 9;
				for (int k = 0; k < 9; k++)
					g[k][l] = flip ? src[8 - k] : src[k];
			}
			v16 t[4][3];
			for (int j = 0; j < 3; j++) {
				t[0][j] = g[j];
				t[1][j] = 0.5f * (g[j] + g[3 + j] + g[6 + j]);
				t[2][j] = 0.5f * (g[j] - g[3 + j] + g[6 + j]);
				t[3][j] = g[6 + j];
			}
			float *dst = u + (size_t)o * cin + i0;
			for (int r = 0; r < 4; r++) {
				store_lanes(dst + (size_t)(r * 4) * plane, t[r][0], L);
				store_lanes(dst + (size_t)(r * 4 + 1) * plane,
					    0.5f * (t[r][0] + t[r][1] + t[r][2]), L);
				store_lanes(dst + (size_t)(r * 4 + 2) * plane,
					    0.5f * (t[r][0] - t[r][1] + t[r][2]), L);
				store_lanes(dst + (size_t)(r * 4 + 3) * plane, t[r][2], L);
			}
		}
}

/* r[i] (16 lanes) becomes column i of the 16x16 matrix whose rows were
 * r: the off-diagonal blocks of 8, then 4, 2 and 1 swapped (two-vector
 * shuffles, 64 in all: vpermt2ps with AVX-512). */
#ifdef __clang__
#define SHUFFLE16(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define SHUFFLE16(a, b, ...) __builtin_shuffle(a, b, (v16i){__VA_ARGS__})
#endif
/* One round: rows i and i + b (i without bit b) swap their lanes with bit
 * b clear in one and set in the other; LO and HI are the two shuffles'
 * lane lists, in parentheses. */
#define T16_LANES(...) __VA_ARGS__
#define T16_ROUND(b, LO, HI)                                            \
	for (int i = 0; i < 16; i++)                                    \
		if (!(i & (b))) {                                       \
			v16 a = r[i], c = r[i + (b)];                   \
			r[i] = SHUFFLE16(a, c, T16_LANES LO);           \
			r[i + (b)] = SHUFFLE16(a, c, T16_LANES HI);     \
		}

static inline void transpose16(v16 *r)
{
	T16_ROUND(8, (0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23),
		  (8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31))
	T16_ROUND(4, (0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27),
		  (4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31))
	T16_ROUND(2, (0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29),
		  (2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31))
	T16_ROUND(1, (0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30),
		  (1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31))
}

/* The planes (h, w) of L <= 16 channels (x: the first, hw floats apart),
 * pixel-major in a grid (hp, wp) with the planes at (ph, pw): lane l of
 * planes[iy wp + ix] is channel l at (iy - ph, ix - pw), zero outside the
 * plane (and in lanes from L on).  Sixteen pixels at a time (in the
 * flattened plane, across rows) go through one transpose. */
HOT static void gather_planes(const float *x, int h, int w, int ph, int pw, int hp, int wp, int L,
			      v16 *planes)
{
	size_t hw = (size_t)h * w, p = 0;
	v16 zero = {0};
	if (L < 16)
		for (size_t i = 0; i < (size_t)hp * wp; i++)
			planes[i] = zero;
	for (int iy = 0; iy < hp; iy++) {
		int sy = iy - ph;
		v16 *row = planes + (size_t)iy * wp;
		for (int ix = 0; ix < wp; ix++)
			if (sy < 0 || sy >= h || ix < pw || ix >= pw + w)
				row[ix] = zero;
	}
	if (L == 16)
		for (; p + 16 <= hw; p += 16) {
			v16 r[16];
			for (int l = 0; l < 16; l++)
				memcpy(&r[l], x + (size_t)l * hw + p, sizeof r[l]);
			transpose16(r);
			for (int i = 0; i < 16; i++) {
				size_t q = p + i, sy = q / w, sx = q % w;
				planes[(sy + ph) * wp + sx + pw] = r[i];
			}
		}
	for (; p < hw; p++) {
		size_t sy = p / w, sx = p % w;
		float *dst = (float *)&planes[(sy + ph) * wp + sx + pw];
		for (int l = 0; l < L; l++)
			dst[l] = x[(size_t)l * hw + p];
	}
}

/* The inverse for outputs: lane l of planes (a grid of width wp) into
 * channel l's plane (h, w) of y, hw floats apart, for l < L. */
HOT static void scatter_planes(const v16 *planes, int wp, int h, int w, int L, float *y)
{
	size_t hw = (size_t)h * w, p = 0;
	if (L == 16)
		for (; p + 16 <= hw; p += 16) {
			v16 r[16];
			for (int i = 0; i < 16; i++) {
				size_t q = p + i;
				r[i] = planes[q / w * wp + q % w];
			}
			transpose16(r);
			for (int l = 0; l < 16; l++)
				memcpy(y + (size_t)l * hw + p, &r[l], sizeof r[l]);
		}
	for (; p < hw; p++) {
		const float *src = (const float *)&planes[p / w * wp + p % w];
		for (int l = 0; l < L; l++)
			y[(size_t)l * hw + p] = src[l];
	}
}

/* V[xi][t0 + ty tw + tx][l] = (B^T d B)[xi] for every tile of the L
 * gathered planes; v points at V[0][0][c0], rows (tiles) ldv floats apart
 * and each xi's matrix xs floats after the last.  Channels are the vector
 * lanes, so every operation is a whole vector whatever the plane's size. */
HOT static void wino_input(const wino *p, const v16 *planes, int L, float *v, size_t ldv,
			   size_t xs, size_t t0)
{
	int wp = p->wp;
	for (int ty = 0; ty < p->th; ty++)
		for (int tx = 0; tx < p->tw; tx++) {
			const v16 *b0 = planes + (size_t)(2 * ty) * wp + 2 * tx;
			const v16 *b1 = b0 + wp, *b2 = b1 + wp, *b3 = b2 + wp;
			v16 e[4][4];
			for (int c = 0; c < 4; c++) { /* B^T d: rows */
				e[0][c] = b0[c] - b2[c];
				e[1][c] = b1[c] + b2[c];
				e[2][c] = b2[c] - b1[c];
				e[3][c] = b1[c] - b3[c];
			}
			float *dst = v + (t0 + (size_t)ty * p->tw + tx) * ldv;
			for (int i = 0; i < 4; i++) { /* ... B: columns */
				store_lanes(dst + (size_t)(4 * i) * xs, e[i][0] - e[i][2], L);
				store_lanes(dst + (size_t)(4 * i + 1) * xs, e[i][1] + e[i][2], L);
				store_lanes(dst + (size_t)(4 * i + 2) * xs, e[i][2] - e[i][1], L);
				store_lanes(dst + (size_t)(4 * i + 3) * xs, e[i][1] - e[i][3], L);
			}
		}
}

/* Output channels o0 .. o0+L-1 of sample g of a round: y = A^T m A + b,
 * then act, from M (16, t, cout), into the planes (oh, ow) at y (channel
 * o0's).  Channels are the vector lanes: each tile's 2x2 block goes into a
 * pixel-major grid (2 th, 2 tw), scattered to the planes at the end. */
HOT static void wino_output(const wino *p, const float *m, size_t t, size_t g, int o0, int L,
			    const float *b, int act, float *y, v16 *grid)
{
	size_t tiles = (size_t)p->th * p->tw, xs = t * p->cout;
	int gw = 2 * p->tw, relu = act == DP_ACT_RELU;
	v16 bias = {0}, zero = {0};
	if (b)
		load_lanes(&bias, b + o0, L);
	for (int ty = 0; ty < p->th; ty++)
		for (int tx = 0; tx < p->tw; tx++) {
			const float *src = m + (g * tiles + (size_t)ty * p->tw + tx) * p->cout + o0;
			v16 s0[4], s1[4];
			for (int j = 0; j < 4; j++) { /* A^T m: rows */
				v16 m0, m1, m2, m3;
				load_lanes(&m0, src + (size_t)j * xs, L);
				load_lanes(&m1, src + (size_t)(4 + j) * xs, L);
				load_lanes(&m2, src + (size_t)(8 + j) * xs, L);
				load_lanes(&m3, src + (size_t)(12 + j) * xs, L);
				s0[j] = m0 + m1 + m2;
				s1[j] = m1 - m2 - m3;
			}
			v16 *o = grid + (size_t)(2 * ty) * gw + 2 * tx;
			o[0] = s0[0] + s0[1] + s0[2] + bias; /* ... A: columns */
			o[1] = s0[1] - s0[2] - s0[3] + bias;
			o[gw] = s1[0] + s1[1] + s1[2] + bias;
			o[gw + 1] = s1[1] - s1[2] - s1[3] + bias;
			if (relu) /* v > 0 ? v : 0, as bias_act (a NaN becomes 0) */
				for (int k = 0; k < 4; k++) {
					v16 *q = o + (k >> 1) * gw + (k & 1);
					*q = (v16)((v16i)*q & (*q > zero));
				}
		}
	scatter_planes(grid, gw, p->oh, p->ow, L, y);
	if (act && !relu)
		for (int l = 0; l < L; l++)
			bias_act(y + (size_t)l * p->oh * p->ow, (size_t)p->oh * p->ow, 0.0f, act);
}

/* One round of a Winograd pass, cut into parts for par_run: a part is a
 * sample of the round and a block of 16 channels. */
typedef struct wino_job {
	const wino *p;
	wino_bufs w;
	size_t t;          /* the round's columns */
	int gn;            /* its samples */
	int nbi, nbo;      /* blocks of 16 input, output channels */
	const float *x;    /* the round's first sample */
	const float *dy;   /* its output gradient (the filter gradient) */
	const float *b;    /* bias, or NULL */
	int act;
	float *y;          /* the round's first output */
} wino_job;

static v16 *job_planes(const wino_job *j, int worker)
{
	return j->w.planes + (size_t)worker * j->p->hp * j->p->wp;
}

/* Part i of nb blocks of 16 channels a sample: its sample *g, its first
 * channel *c0, and its channels (16, or what is left of n). */
static int job_block(int i, int nb, int n, size_t *g, int *c0)
{
	*g = (size_t)(i / nb);
	*c0 = i % nb * 16;
	return n - *c0 < 16 ? n - *c0 : 16;
}

/* Part i < gn nbi: V for sample i / nbi, input channels 16 (i % nbi) on. */
static void wino_input_part(void *a, int i, int worker)
{
	const wino_job *j = a;
	const wino *p = j->p;
	size_t hw = (size_t)p->h * p->w, g;
	int c0, L = job_block(i, j->nbi, p->cin, &g, &c0);
	v16 *planes = job_planes(j, worker);
	gather_planes(j->x + g * p->cin * hw + (size_t)c0 * hw, p->h, p->w, p->ph, p->pw, p->hp, p->wp,
		      L, planes);
	wino_input(p, planes, L, j->w.v + c0, (size_t)p->cin, j->t * p->cin,
		   g * (size_t)p->th * p->tw);
}

/* Part i < gn nbo: the output of sample i / nbo, channels 16 (i % nbo) on. */
static void wino_output_part(void *a, int i, int worker)
{
	const wino_job *j = a;
	const wino *p = j->p;
	size_t ohw = (size_t)p->oh * p->ow, g;
	int o0, L = job_block(i, j->nbo, p->cout, &g, &o0);
	wino_output(p, j->w.m, j->t, g, o0, L, j->b, j->act,
		    j->y + g * p->cout * ohw + (size_t)o0 * ohw, job_planes(j, worker));
}

static wino_job wino_round(const wino *p, wino_bufs w, int s0)
{
	wino_job j = {.p = p, .w = w, .nbi = (p->cin + 15) / 16, .nbo = (p->cout + 15) / 16};
	j.gn = p->n - s0 < p->group ? p->n - s0 : p->group;
	j.t = (size_t)j.gn * p->th * p->tw;
	return j;
}

/* y = conv(x, filters u already transformed) + b, act: all samples.
 * V (16, t, cin) and M (16, t, cout): channels are the transforms' vector
 * lanes; each GEMM is M[xi] (t, cout) = V[xi] (t, cin) U[xi]^T. */
static void wino_conv(dp_bectx *ctx, const wino *p, const float *x, const float *u,
		      const float *b, int act, float *y, float *ws)
{
	size_t xs = (size_t)p->cin * p->h * p->w, ys = (size_t)p->cout * p->oh * p->ow;
	wino_bufs w = wino_split(p, ws);
	for (int s0 = 0; s0 < p->n; s0 += p->group) {
		wino_job j = wino_round(p, w, s0);
		j.x = x + (size_t)s0 * xs;
		j.y = y + (size_t)s0 * ys;
		j.b = b;
		j.act = act;
		par_run(ctx, j.gn * j.nbi, wino_input_part, &j);
		for (int xi = 0; xi < 16; xi++)
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)j.t, p->cout, p->cin,
				    1.0f, j.w.v + (size_t)xi * j.t * p->cin, p->cin,
				    u + (size_t)xi * p->cout * p->cin, p->cin, 0.0f,
				    j.w.m + (size_t)xi * j.t * p->cout, p->cout);
		par_run(ctx, j.gn * j.nbo, wino_output_part, &j);
	}
}

/* The filter gradient (Winograd's transpose): a 2x2 block of outputs Y =
 * A^T (U .* V) A gives dU = V .* (A dY A^T), summed over every tile of
 * every sample, and dw = G^T dU G.  So 16 GEMMs as deep as the batch's
 * tiles: dU[xi] (cout, cin) += Q[xi] (cout, t) V[xi]^T (t, cin), with
 * Q = A dY A^T per tile (outputs past the plane count as zero).  The
 * forward plan's workspace holds it: dU in U's place, Q in M's. */

/* Q[xi][t0 + ty tw + tx][l] = (A dY A^T)[xi] for the 2x2 blocks of the L
 * gathered planes of dy (a grid (2 th, 2 tw), zero past the planes); q
 * points at Q[0][0][o0], rows ldq floats apart, each xi's matrix xs after
 * the last. */
HOT static void wino_dy(const wino *p, const v16 *grid, int L, float *q, size_t ldq, size_t xs,
			size_t t0)
{
	int gw = 2 * p->tw;
	for (int ty = 0; ty < p->th; ty++)
		for (int tx = 0; tx < p->tw; tx++) {
			const v16 *r0 = grid + (size_t)(2 * ty) * gw + 2 * tx, *r1 = r0 + gw;
			v16 a = r0[0], b = r0[1], c = r1[0], d = r1[1];
			/* rows of A dY: (a, b), (a + c, b + d), (a - c, b - d), (-c, -d);
			 * each row (u, v) then gives the columns (u, u + v, u - v, -v) */
			v16 u[4] = {a, a + c, a - c, -c}, v[4] = {b, b + d, b - d, -d};
			float *dst = q + (t0 + (size_t)ty * p->tw + tx) * ldq;
			for (int r = 0; r < 4; r++) {
				store_lanes(dst + (size_t)(4 * r) * xs, u[r], L);
				store_lanes(dst + (size_t)(4 * r + 1) * xs, u[r] + v[r], L);
				store_lanes(dst + (size_t)(4 * r + 2) * xs, u[r] - v[r], L);
				store_lanes(dst + (size_t)(4 * r + 3) * xs, -v[r], L);
			}
		}
}

/* dw (cout, cin, 3, 3) = G^T dU G for every filter; du (16, cout, cin). */
HOT static void wino_filters_grad(const float *du, int cout, int cin, float *dw)
{
	size_t plane = (size_t)cout * cin;
	for (size_t f = 0; f < plane; f++) {
		float d[4][4], r[3][4];
		for (int xi = 0; xi < 16; xi++)
			d[xi / 4][xi % 4] = du[(size_t)xi * plane + f];
		for (int c = 0; c < 4; c++) {
			r[0][c] = d[0][c] + 0.5f * (d[1][c] + d[2][c]);
			r[1][c] = 0.5f * (d[1][c] - d[2][c]);
			r[2][c] = 0.5f * (d[1][c] + d[2][c]) + d[3][c];
		}
		float *o = dw + f * 9;
		for (int k = 0; k < 3; k++) {
			o[3 * k] = r[k][0] + 0.5f * (r[k][1] + r[k][2]);
			o[3 * k + 1] = 0.5f * (r[k][1] - r[k][2]);
			o[3 * k + 2] = 0.5f * (r[k][1] + r[k][2]) + r[k][3];
		}
	}
}

/* Parts below gn nbi: V, as wino_input_part; then Q for sample k / nbo,
 * output channels 16 (k % nbo) on (k: the part's index past those). */
static void wino_dw_part(void *a, int i, int worker)
{
	const wino_job *j = a;
	const wino *p = j->p;
	if (i < j->gn * j->nbi) {
		wino_input_part(a, i, worker);
		return;
	}
	size_t ohw = (size_t)p->oh * p->ow, g;
	int o0, L = job_block(i - j->gn * j->nbi, j->nbo, p->cout, &g, &o0);
	v16 *planes = job_planes(j, worker);
	gather_planes(j->dy + g * p->cout * ohw + (size_t)o0 * ohw, p->oh, p->ow, 0, 0, 2 * p->th,
		      2 * p->tw, L, planes);
	wino_dy(p, planes, L, j->w.m + o0, (size_t)p->cout, j->t * p->cout,
		g * (size_t)p->th * p->tw);
}

/* dw = the filter gradient of y = conv(x, w) for dy, all samples: dU in
 * U's place, Q (16, t, cout) in M's. */
static void wino_conv_dw(dp_bectx *ctx, const wino *p, const float *x, const float *dy, float *dw,
			 float *ws)
{
	size_t xs = (size_t)p->cin * p->h * p->w, ys = (size_t)p->cout * p->oh * p->ow;
	wino_bufs w = wino_split(p, ws);
	for (int s0 = 0; s0 < p->n; s0 += p->group) {
		wino_job j = wino_round(p, w, s0);
		j.x = x + (size_t)s0 * xs;
		j.dy = dy + (size_t)s0 * ys;
		par_run(ctx, j.gn * (j.nbi + j.nbo), wino_dw_part, &j);
		/* dU[xi] (cout, cin) += Q[xi]^T (cout, t) V[xi] (t, cin) */
		for (int xi = 0; xi < 16; xi++)
			cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, p->cout, p->cin, (int)j.t,
				    1.0f, w.m + (size_t)xi * j.t * p->cout, p->cout,
				    w.v + (size_t)xi * j.t * p->cin, p->cin, s0 ? 1.0f : 0.0f,
				    w.u + (size_t)xi * p->cout * p->cin, p->cin);
	}
	wino_filters_grad(w.u, p->cout, p->cin, dw);
}

static wino wino_fwd_plan(const dp_bectx *ctx, const dp_conv2d *g)
{
	return wino_plan(g->n, g->c, g->h, g->w, g->k, g->oh, g->ow, g->ph, g->pw,
			 ctx->pool.nhelp + 1);
}

/* The input gradient: dy (n, k, oh, ow) convolved with the flipped,
 * transposed filters and padding 2 - p gives dx (n, c, h, w). */
static wino wino_bwd_plan(const dp_bectx *ctx, const dp_conv2d *g)
{
	return wino_plan(g->n, g->k, g->oh, g->ow, g->c, g->h, g->w, 2 - g->ph, 2 - g->pw,
			 ctx->pool.nhelp + 1);
}

/* conv_algo of the instance: 0 automatic, 1 im2col always, 2 Winograd
 * wherever it applies (tests compare the two).  Automatic uses it for the
 * forward pass, and for the input gradient of padded ("same")
 * convolutions, the ResNets' (resnet20, 1x28x28, batch 128, one thread
 * on this project's AMD EPYC with AVX-512 (OpenBLAS's Cooperlake kernels),
 * 16 steps, CPU time, alternated, load 2:
 * 7.86-7.94 s against 8.07-8.28 s with Adam, 7.47-7.51 against 7.86-8.29
 * with SGD when every input gradient took Winograd).  Without padding
 * the input gradient's transform covers an output larger than the layer's
 * and im2col stays faster (the seed CNN's step: 2.23-2.31 s against
 * 2.29-2.48 with Winograd). */
static int use_wino(const dp_bectx *ctx, const dp_conv2d *g, int backward)
{
	if (ctx->conv_algo == 1 || !wino_fits(g))
		return 0;
	return !backward || ctx->conv_algo == 2 || (g->ph >= 1 && g->pw >= 1);
}

/* The filter gradient takes Winograd wherever the forward pass does:
 * resnet20's (bench/convshapes.c, batch 128, one thread, CPU time)
 * 10.96 -> 7.77 ms at 16x28x28, 8.78 -> 6.17 at 32x14x14, 8.00 -> 8.16 at
 * 64x7x7 (where the 2x2 tiles cover 8x8), all convolutions 405 -> 363 ms
 * a step. */
static int use_wino_dw(const dp_bectx *ctx, const dp_conv2d *g)
{
	return use_wino(ctx, g, 0);
}

static size_t cpu_conv_ws(dp_bectx *ctx, const dp_conv2d *g)
{
	size_t ws = conv_is_pointwise(g) ? 0
					 : 2 * (size_t)g->c * g->kh * g->kw * g->oh * g->ow * sizeof(float);
	if (use_wino(ctx, g, 0)) {
		wino a = wino_fwd_plan(ctx, g);
		size_t wa = wino_ws(&a);
		ws = ws > wa ? ws : wa;
	}
	if (use_wino(ctx, g, 1)) {
		wino b = wino_bwd_plan(ctx, g);
		size_t wb = wino_ws(&b);
		ws = ws > wb ? ws : wb;
	}
	return ws;
}

static void cpu_conv_fwd(dp_bectx *ctx, const dp_conv2d *g, const float *x, const float *w,
			 const float *b, float *y, int act, void *ws)
{
	if (use_wino(ctx, g, 0)) {
		wino p = wino_fwd_plan(ctx, g);
		wino_filters(w, g->k, g->c, 0, ws);
		wino_conv(ctx, &p, x, ws, b, act, y, ws);
		return;
	}
	int ckk = g->c * g->kh * g->kw, ohw = g->oh * g->ow;
	size_t xs = (size_t)g->c * g->h * g->w, ys = (size_t)g->k * ohw;
	float *col = ws;
	for (int s = 0; s < g->n; s++) {
		const float *xn = x + s * xs;
		float *yn = y + s * ys;
		const float *cn = xn;
		if (!conv_is_pointwise(g)) {
			im2col(g, xn, col);
			cn = col;
		}
		/* y_n (k, ohw) = b + w (k, ckk) col (ckk, ohw): starting from the
		 * bias with beta 1 spares OpenBLAS a pass clearing y_n */
		if (b)
			fill_rows(yn, (size_t)g->k, (size_t)ohw, b);
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->k, ohw, ckk, 1.0f, w, ckk,
			    cn, ohw, b ? 1.0f : 0.0f, yn, ohw);
		if (act)
			act_apply(act, yn, ys);
	}
}

static void cpu_conv_bwd(dp_bectx *ctx, const dp_conv2d *g, const float *x, const float *w,
			 const float *y, float *dy, float *dx, float *dw, float *db, int act,
			 void *ws)
{
	int ckk = g->c * g->kh * g->kw, ohw = g->oh * g->ow;
	size_t xs = (size_t)g->c * g->h * g->w, ys = (size_t)g->k * ohw;
	int pointwise = conv_is_pointwise(g), wino_dx = dx && use_wino(ctx, g, 1);
	int wino_dw = use_wino_dw(ctx, g);
	float *col = ws, *dcol = pointwise ? NULL : col + (size_t)ckk * ohw;
	if (db)
		memset(db, 0, (size_t)g->k * sizeof *db);
	for (int s = 0; s < g->n; s++) {
		const float *xn = x + s * xs;
		float *dyn = dy + s * ys;
		act_grad(act, y + s * ys, dyn, ys);
		if (db)
			add_row_sums(db, dyn, (size_t)g->k, (size_t)ohw);
		if (!wino_dw) {
			const float *cn = xn;
			if (!pointwise) {
				im2col(g, xn, col);
				cn = col;
			}
			/* dw (k, ckk) += dy_n (k, ohw) col^T (ohw, ckk) */
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g->k, ckk, ohw, 1.0f, dyn,
				    ohw, cn, ohw, s ? 1.0f : 0.0f, dw, ckk);
		}
		if (!dx || wino_dx)
			continue;
		/* dcol (ckk, ohw) = w^T (ckk, k) dy_n (k, ohw) */
		float *dxn = dx + s * xs;
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ckk, ohw, g->k, 1.0f, w, ckk, dyn,
			    ohw, 0.0f, pointwise ? dxn : dcol, ohw);
		if (!pointwise)
			col2im(g, dcol, dxn);
	}
	if (wino_dw) {
		wino p = wino_fwd_plan(ctx, g);
		wino_conv_dw(ctx, &p, x, dy, dw, ws);
	}
	if (wino_dx) {
		wino p = wino_bwd_plan(ctx, g);
		wino_filters(w, g->c, g->k, 1, ws);
		wino_conv(ctx, &p, dy, ws, NULL, 0, dx, ws);
	}
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

/* All planes of a 2x2, stride 2 pooling (one call: the multiversioned
 * function is chosen once, not per row). */
HOT static void maxpool22(const dp_pool2d *g, const float *x, float *y, int32_t *arg)
{
	size_t planes = (size_t)g->n * g->c, hw = (size_t)g->h * g->w, ohw = (size_t)g->oh * g->ow;
	for (size_t pl = 0; pl < planes; pl++) {
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

/* The general max pooling, a plane (sample, channel) a part of par_run. */
typedef struct pool_job {
	const dp_pool2d *g;
	const float *x;
	float *y;
	int32_t *arg;
} pool_job;

static void maxpool_one(const pool_job *jb, size_t plane)
{
	const dp_pool2d *g = jb->g;
	size_t hw = (size_t)g->h * g->w, ohw = (size_t)g->oh * g->ow;
	const float *xp = jb->x + plane * hw;
	float *yp = jb->y + plane * ohw;
	int32_t *ap = jb->arg + plane * ohw;
	for (int oy = 0; oy < g->oh; oy++)
		for (int ox = 0; ox < g->ow; ox++) {
			int y0, y1, x0, x1;
			pool_range(oy, g->sh, g->kh, g->ph, g->h, &y0, &y1);
			pool_range(ox, g->sw, g->kw, g->pw, g->w, &x0, &x1);
			/* as PyTorch: from -infinity at the first position inside
			 * the image (padding never wins) */
			int best = y0 < y1 && x0 < x1 ? y0 * g->w + x0 : -1;
			float m = -INFINITY;
			for (int i = y0; i < y1; i++)
				for (int j = x0; j < x1; j++) {
					int idx = i * g->w + j;
					/* NaN propagates, as in PyTorch */
					if (xp[idx] > m || isnan(xp[idx])) {
						m = xp[idx];
						best = idx;
					}
				}
			yp[oy * g->ow + ox] = m;
			ap[oy * g->ow + ox] = best;
		}
}

static void maxpool_plane(void *a, int plane, int worker)
{
	(void)worker;
	maxpool_one(a, (size_t)plane);
}

static void cpu_maxpool_fwd(dp_bectx *ctx, const dp_pool2d *g, const float *x, float *y,
			    int32_t *arg)
{
	if (g->kh == 2 && g->kw == 2 && g->sh == 2 && g->sw == 2 && !g->ph && !g->pw &&
	    g->ow <= POOL_ROW_MAX) {
		maxpool22(g, x, y, arg);
		return;
	}
	pool_job j = {g, x, y, arg};
	size_t planes = (size_t)g->n * g->c;
	if (planes <= INT_MAX) {
		par_run(ctx, (int)planes, maxpool_plane, &j);
		return;
	}
	for (size_t pl = 0; pl < planes; pl++) /* more planes than par_run counts */
		maxpool_one(&j, pl);
}

static void cpu_maxpool_bwd(dp_bectx *ctx, const dp_pool2d *g, const float *dy, const int32_t *arg,
			    float *dx)
{
	size_t planes = (size_t)g->n * g->c, hw = (size_t)g->h * g->w, ohw = (size_t)g->oh * g->ow;
	for (size_t pl = 0; pl < planes; pl++) {
		float *dp = dx + pl * hw;
		const float *dyp = dy + pl * ohw;
		const int32_t *ap = arg + pl * ohw;
		memset(dp, 0, hw * sizeof *dp); /* one plane: stays in L1 for the scatter */
		for (size_t o = 0; o < ohw; o++)
			if (ap[o] >= 0) /* -1: a window of padding only */
				dp[ap[o]] += dyp[o];
	}
}

static void cpu_avgpool_fwd(dp_bectx *ctx, const dp_pool2d *g, const float *x, float *y)
{
	size_t planes = (size_t)g->n * g->c, hw = (size_t)g->h * g->w, ohw = (size_t)g->oh * g->ow;
	float inv = 1.0f / (float)(g->kh * g->kw);
	for (size_t pl = 0; pl < planes; pl++) {
		const float *xp = x + pl * hw;
		float *yp = y + pl * ohw;
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

static void cpu_avgpool_bwd(dp_bectx *ctx, const dp_pool2d *g, const float *dy, float *dx)
{
	size_t planes = (size_t)g->n * g->c, hw = (size_t)g->h * g->w, ohw = (size_t)g->oh * g->ow;
	float inv = 1.0f / (float)(g->kh * g->kw);
	for (size_t pl = 0; pl < planes; pl++) {
		float *dp = dx + pl * hw;
		const float *dyp = dy + pl * ohw;
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

/* ---- dropout ------------------------------------------------------------ */

HOT static void dropout_apply(const dp_dropout *d, int n, const float *in, float *out)
{
	size_t total = (size_t)n * d->per_sample;
	uint64_t c0 = d->sample0 * d->per_sample, key = d->key;
	uint32_t thr = d->threshold;
	float sc = d->scale;
	for (size_t i = 0; i < total; i++) {
		uint32_t r = (uint32_t)(dp_rng_at(key, c0 + i) >> 32);
		out[i] = r >= thr ? in[i] * sc : 0.0f;
	}
}

static void cpu_dropout_fwd(dp_bectx *ctx, const dp_dropout *d, int n, const float *x, float *y)
{
	dropout_apply(d, n, x, y);
}

static void cpu_dropout_bwd(dp_bectx *ctx, const dp_dropout *d, int n, const float *dy, float *dx)
{
	dropout_apply(d, n, dy, dx);
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

/* Over channel c: the sum of dy and of dy * xhat, xhat = (x - mean) inv,
 * as chan_sums. */
HOT static void chan_grad_sums(const dp_bnorm *g, const float *x, const float *dy, int c,
			       float mean, float inv, double *s, double *sx)
{
	double a[8] = {0}, b[8] = {0}, sa = 0, sb = 0;
	size_t hw = (size_t)g->hw;
	for (int i = 0; i < g->n; i++) {
		const float *p = BN_PLANE(g, x, c, i), *d = BN_PLANE(g, dy, c, i);
		size_t j = 0;
		for (; j + 8 <= hw; j += 8)
			for (int k = 0; k < 8; k++) {
				a[k] += d[j + k];
				b[k] += (double)d[j + k] * ((p[j + k] - mean) * inv);
			}
		for (; j < hw; j++) {
			sa += d[j];
			sb += (double)d[j] * ((p[j] - mean) * inv);
		}
	}
	for (int k = 0; k < 8; k++) {
		sa += a[k];
		sb += b[k];
	}
	*s = sa;
	*sx = sb;
}

/* y = x a + b over channel c. */
HOT static void chan_affine(const dp_bnorm *g, const float *x, float *y, int c, float a, float b)
{
	for (int i = 0; i < g->n; i++) {
		const float *p = BN_PLANE(g, x, c, i);
		float *q = BN_PLANE(g, y, c, i);
		for (int j = 0; j < g->hw; j++)
			q[j] = p[j] * a + b;
	}
}

/* dx = k (dy - mdy - (x - mean) inv mdyx) over channel c. */
HOT static void chan_dx(const dp_bnorm *g, const float *x, const float *dy, float *dx, int c,
			float k, float mdy, float mean, float inv, float mdyx)
{
	for (int i = 0; i < g->n; i++) {
		const float *p = BN_PLANE(g, x, c, i), *d = BN_PLANE(g, dy, c, i);
		float *q = BN_PLANE(g, dx, c, i);
		for (int j = 0; j < g->hw; j++)
			q[j] = k * (d[j] - mdy - (p[j] - mean) * inv * mdyx);
	}
}

static void cpu_bnorm_sums(dp_bectx *ctx, const dp_bnorm *g, const float *x, double *sums)
{
	for (int c = 0; c < g->c; c++)
		chan_sums(g, x, c, 0.0, &sums[c], &sums[g->c + c]);
}

/* A batchnorm call's arguments, for par_run over its channels (each
 * channel's work is its own: the same results on any number of threads). */
typedef struct bn_job {
	const dp_bnorm *g;
	int train;
	const float *x, *gamma, *beta, *save, *dy;
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
		double unb = m > 1 ? var * m / (m - 1) : var;
		j->run_mean[c] = (1 - g->momentum) * j->run_mean[c] + g->momentum * mean;
		j->run_var[c] = (1 - g->momentum) * j->run_var[c] + g->momentum * (float)unb;
	} else {
		mean = j->run_mean[c];
		inv = 1.0f / sqrtf(j->run_var[c] + g->eps);
	}
	if (j->save_out) {
		j->save_out[c] = mean;
		j->save_out[g->c + c] = inv;
	}
	float a = j->gamma[c] * inv;
	chan_affine(g, j->x, j->y, c, a, j->beta[c] - mean * a);
}

static void cpu_bnorm_fwd(dp_bectx *ctx, const dp_bnorm *g, int train, const float *x,
			  const float *gamma, const float *beta, float *run_mean, float *run_var,
			  const double *sums, float *save, float *y)
{
	bn_job j = {.g = g, .train = train, .x = x, .gamma = gamma, .beta = beta,
		    .run_mean = run_mean, .run_var = run_var, .sums = sums, .save_out = save,
		    .y = y, .m = bn_count(g, sums)};
	par_run(ctx, g->c, bn_fwd_chan, &j);
}

static void bn_bwd_sums_chan(void *arg, int c, int worker)
{
	const bn_job *j = arg;
	(void)worker;
	chan_grad_sums(j->g, j->x, j->dy, c, j->save[c], j->save[j->g->c + c], &j->sums_out[c],
		       &j->sums_out[j->g->c + c]);
}

static void cpu_bnorm_bwd_sums(dp_bectx *ctx, const dp_bnorm *g, const float *x, const float *save,
			       const float *dy, double *sums)
{
	bn_job j = {.g = g, .x = x, .save = save, .dy = dy, .sums_out = sums};
	par_run(ctx, g->c, bn_bwd_sums_chan, &j);
}

static void bn_bwd_chan(void *arg, int c, int worker)
{
	const bn_job *j = arg;
	const dp_bnorm *g = j->g;
	float mean = j->save[c], inv = j->save[g->c + c];
	double sdy, sdyx;
	(void)worker;
	chan_grad_sums(g, j->x, j->dy, c, mean, inv, &sdy, &sdyx);
	j->dgamma[c] = (float)sdyx;
	j->dbeta[c] = (float)sdy;
	if (!j->dx)
		return;
	float k = j->gamma[c] * inv;
	if (g->eval) { /* dx = gamma inv dy: no path through the statistics */
		chan_affine(g, j->dy, j->dx, c, k, 0.0f);
		return;
	}
	/* dx = gamma inv (dy - mean(dy) - xhat mean(dy xhat)), the means over
	 * this batch or (sums) over all ranks */
	float mdy = (float)((j->sums ? j->sums[c] : sdy) / j->m),
	      mdyx = (float)((j->sums ? j->sums[g->c + c] : sdyx) / j->m);
	chan_dx(g, j->x, j->dy, j->dx, c, k, mdy, mean, inv, mdyx);
}

static void cpu_bnorm_bwd(dp_bectx *ctx, const dp_bnorm *g, const float *x, const float *gamma,
			  const float *save, const double *sums, const float *dy, float *dx,
			  float *dgamma, float *dbeta)
{
	bn_job j = {.g = g, .x = x, .gamma = gamma, .save = save, .sums = sums, .dy = dy,
		    .dx = dx, .dgamma = dgamma, .dbeta = dbeta, .m = bn_count(g, sums)};
	par_run(ctx, g->c, bn_bwd_chan, &j);
}

/* ---- losses ------------------------------------------------------------- */

static void cpu_xent(dp_bectx *ctx, int n, int k, const float *logits, const int32_t *labels,
		     float smooth, float scale, float *dlogits, double *stats)
{
	double loss = 0, correct = 0;
	for (int i = 0; i < n; i++) {
		const float *z = logits + (size_t)i * k;
		int arg = 0;
		float m = z[0];
		for (int j = 1; j < k; j++)
			if (z[j] > m) {
				m = z[j];
				arg = j;
			}
		double s = 0;
		for (int j = 0; j < k; j++)
			s += exp((double)z[j] - m);
		double lse = m + log(s);
		int y = labels[i];
		loss += lse - z[y];
		if (smooth != 0) { /* (1 - s)(lse - z_y) + s/k sum_j (lse - z_j) */
			double zs = 0;
			for (int j = 0; j < k; j++)
				zs += z[j];
			loss += smooth * ((double)z[y] - zs / k);
		}
		correct += arg == y;
		if (dlogits) {
			float *d = dlogits + (size_t)i * k;
			for (int j = 0; j < k; j++)
				d[j] = (float)(exp((double)z[j] - lse)) * scale;
			if (smooth != 0) {
				float u = smooth / (float)k * scale;
				for (int j = 0; j < k; j++)
					d[j] -= u;
				d[y] -= (1 - smooth) * scale;
			} else {
				d[y] -= scale;
			}
		}
	}
	stats[0] = loss;
	stats[1] = correct;
}

static void cpu_mse(dp_bectx *ctx, int n, int k, const float *pred, const float *target,
		    float scale, float *dpred, double *stats)
{
	double loss = 0;
	float f = 2.0f / (float)k * scale;
	for (int i = 0; i < n; i++) {
		const float *p = pred + (size_t)i * k, *t = target + (size_t)i * k;
		double s = 0;
		for (int j = 0; j < k; j++) {
			float d = p[j] - t[j];
			s += (double)d * d;
			if (dpred)
				dpred[(size_t)i * k + j] = d * f;
		}
		loss += s / k;
	}
	stats[0] = loss;
	stats[1] = 0;
}

static void cpu_softmax(dp_bectx *ctx, int n, int k, const float *x, float *y)
{
	for (int i = 0; i < n; i++) {
		const float *z = x + (size_t)i * k;
		float *o = y + (size_t)i * k, m = z[0];
		for (int j = 1; j < k; j++)
			m = z[j] > m ? z[j] : m;
		double s = 0;
		for (int j = 0; j < k; j++)
			s += exp((double)z[j] - m);
		for (int j = 0; j < k; j++)
			o[j] = (float)(exp((double)z[j] - m) / s);
	}
}

/* ---- optimizers --------------------------------------------------------- */

HOT static void cpu_sgd(dp_bectx *ctx, size_t n, float *p, const float *g, float *buf,
		    const dp_sgd_args *a)
{
	float lr = a->lr, mu = a->momentum, wd = a->weight_decay, damp = 1.0f - a->dampening;
	for (size_t i = 0; i < n; i++) {
		float d = g[i];
		if (wd != 0)
			d += wd * p[i];
		if (mu != 0) {
			float b = a->first ? d : mu * buf[i] + damp * d;
			buf[i] = b;
			d = a->nesterov ? d + mu * b : b;
		}
		p[i] -= lr * d;
	}
}

HOT static void cpu_adam(dp_bectx *ctx, size_t n, float *p, const float *g, float *m, float *v,
		     const dp_adam_args *a)
{
	float b1 = a->beta1, b2 = a->beta2, c1 = 1.0f - a->beta1, c2 = 1.0f - a->beta2;
	float wd = a->weight_decay, eps = a->eps, ss = a->step_size, bc2 = a->bias2_sqrt;
	float decay = a->decoupled ? 1.0f - a->lr * wd : 1.0f;
	float l2 = a->decoupled ? 0.0f : wd;
	for (size_t i = 0; i < n; i++) {
		float gi = g[i] + l2 * p[i];
		float mi = b1 * m[i] + c1 * gi;
		float vi = b2 * v[i] + c2 * gi * gi;
		m[i] = mi;
		v[i] = vi;
		float denom = sqrtf(vi) / bc2 + eps;
		p[i] = p[i] * decay - ss * mi / denom;
	}
}

const dp_backend dp_backend_cpu = {
	.name = "cpu",
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
	.fill = cpu_fill,
	.scale = cpu_scale,
	.dense_fwd = cpu_dense_fwd,
	.dense_bwd = cpu_dense_bwd,
	.conv_ws = cpu_conv_ws,
	.conv_fwd = cpu_conv_fwd,
	.conv_bwd = cpu_conv_bwd,
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
	.xent = cpu_xent,
	.mse = cpu_mse,
	.softmax = cpu_softmax,
	.sgd = cpu_sgd,
	.adam = cpu_adam,
};
