/*
 * cpu_impl.h - private to lib/train/backend/cpu*.c: the CPU backend's
 * instance, its pool of helper threads (cpu_pool.c), its convolutions
 * (the choice per shape: cpu_plan.c; im2col and batch-wide GEMMs:
 * cpu_conv.c; Winograd: cpu_wino.c; oneDNN: cpu_dnnl.c) and what they
 * share with the reference loops of cpu.c.  Not installed.
 */
#ifndef DP_CPU_IMPL_H
#define DP_CPU_IMPL_H

#include "conv_impl.h"
#include "dp_backend.h"
#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>

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

/* ---- cpu_pool.c: the backend's threads (OpenMP's, oneDNN's too) ---- */
typedef void par_fn(void *arg, int i, int worker);
typedef void cpu_range_fn(void *arg, size_t lo, size_t hi);

/* ---- cpu_plan.c: the implementation of each convolution ---- */
enum cpu_conv_impl { CPU_IM2COL, CPU_WINO, CPU_GEMM, CPU_DNNL, CPU_PW, CPU_NIMPL };
enum cpu_conv_pass { CPU_PASS_FWD, CPU_PASS_DX, CPU_PASS_DW };
typedef struct cpu_dnnl cpu_dnnl; /* a shape's oneDNN primitives (cpu_dnnl.c) */

/* One convolution shape: the implementation of each pass (enum
 * cpu_conv_impl by enum cpu_conv_pass), how it was chosen, the times
 * measured (ms, 0: not timed). */
typedef struct conv_plan {
	dp_conv2d g;
	signed char impl[3];
	int bound;        /* seen by conv_ws (else a smaller batch of such a shape) */
	size_t ws;        /* the most workspace any candidate takes (conv_ws) */
	const char *how;  /* "measured", "pinned", "given", "forced", ... */
	float ms[3][CPU_NIMPL];
	cpu_dnnl *dn;     /* NULL: oneDNN does not take it (or is not built in) */
} conv_plan;

struct dp_bectx {
	int threads;   /* OpenMP's threads for every part of the work */
	/* convolutions (cpu_plan.c) */
	int force;     /* an implementation for every shape it takes; -1: chosen */
	int pinned;    /* dp_backend_opts.deterministic */
	char *algos;   /* choices given (dp_backend_opts.algos, conv_algos_take) */
	conv_plan *plan;
	int nplan, cap;
	struct dnnl_engine *dn_engine; /* oneDNN's (cpu_dnnl.c) */
	struct dnnl_stream *dn_stream;
	char fail[160]; /* a library's failure, for sync() */
};

/* Make the threads - 1 helpers, every signal blocked. */
void cpu_par_start(dp_bectx *c);
/* fn(arg, i, worker) for every i < n on the calling thread (worker 0) and
 * the helpers (worker < threads). */
void cpu_par_run(dp_bectx *c, int n, par_fn *fn, void *arg);
/* fn(arg, lo, hi) over parts of [0, n) of min items at least (a thread's;
 * elementwise loops: CPU_EW_MIN). */
#define CPU_EW_MIN 16384
void cpu_par_range(dp_bectx *c, size_t n, size_t min, cpu_range_fn *fn, void *arg);
/* cblas_sgemm (row-major) cut into parts for the threads: the same
 * results as one call (c NULL: that one call). */
void cpu_sgemm(dp_bectx *c, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m, int n, int k,
	       float alpha, const float *a, int lda, const float *b, int ldb, float beta, float *cc,
	       int ldc);

/* ---- cpu.c ---- */
/* y = act(y + b) over n elements (b a scalar: one conv channel). */
void cpu_bias_act(float *y, size_t n, float b, int act);
/* dy *= act'(from the output y), n elements. */
void cpu_act_grad(int act, const float *y, float *dy, size_t n);
/* acc[r] += the sum of row r of x (rows, cols), in a fixed order. */
void cpu_add_row_sums(float *acc, const float *x, size_t rows, size_t cols);

/* ---- cpu_plan.c: the backend's convolution calls (dp_backend.h) ---- */
be_conv_open_fn cpu_conv_open;
be_conv_close_fn cpu_conv_close;
be_conv_ws_fn cpu_conv_ws;
be_conv_fwd_fn cpu_conv_fwd;
be_conv_bwd_fn cpu_conv_bwd;
be_conv_algos_fn cpu_conv_algos;
be_conv_algos_take_fn cpu_conv_algos_take;
int cpu_conv_explain(dp_bectx *c, const dp_conv2d *g, char *buf, size_t len);
/* "im2col", "winograd", "gemm", "onednn", "pointwise" and back (-1: none
 * of them) */
int cpu_conv_impl_parse(const char *s);
const char *cpu_conv_impl_name(int impl);

/* ---- the convolutions' implementations (cpu_conv.c, cpu_wino.c) ----
 * x (n, c, h, w), w (k, c, kh, kw), y and dy (n, k, oh, ow); fwd: y =
 * act(conv(x, w) + b) (b may be NULL); dw, dx: the filter and input
 * gradients of dy (its activation's derivative applied), overwritten;
 * ws: the workspace of *_ws bytes. */
typedef void cpu_fwd_fn(dp_bectx *ctx, const dp_conv2d *g, const float *x, const float *w,
			const float *b, float *y, int act, void *ws);
typedef void cpu_dw_fn(dp_bectx *ctx, const dp_conv2d *g, const float *x, const float *dy,
		       float *dw, void *ws);
typedef void cpu_dx_fn(dp_bectx *ctx, const dp_conv2d *g, const float *dy, const float *w,
		       float *dx, void *ws);
cpu_fwd_fn cpu_im2col_fwd, cpu_gemm_fwd, cpu_pw_fwd, cpu_wino_fwd;
cpu_dw_fn cpu_im2col_dw, cpu_gemm_dw, cpu_pw_dw, cpu_wino_dw;
cpu_dx_fn cpu_im2col_dx, cpu_gemm_dx, cpu_pw_dx, cpu_wino_dx;

/* cpu_conv.c: im2col (a GEMM a sample) and gemm (one over the batch) */
size_t cpu_im2col_ws(const dp_bectx *ctx, const dp_conv2d *g, int pass);
int cpu_gemm_fits(const dp_conv2d *g);
size_t cpu_gemm_ws(const dp_conv2d *g);
/* pointwise: im2col's loops for 1x1 kernels (stride 1: x is the columns;
 * stride 2: a strided gather, the sample's columns) with oneDNN's SGEMM;
 * fits only in a build with oneDNN; its workspace is im2col's. */
int cpu_pw_fits(const dp_conv2d *g);

/* ---- cpu_dnnl.c: oneDNN's convolutions (nothing without DP_WITH_DNNL) ----
 * open: its engine and stream; version: "oneDNN 2.6.3", with isa_too
 * "oneDNN 2.6.3 (avx512_core)", NULL when not built in; make: a shape's primitives (NULL where oneDNN does not
 * take the shape); ws: the most workspace a pass takes; the passes as
 * above (on d's shape).  A failure of the library is kept in ctx->fail. */
int cpu_dnnl_open(dp_bectx *c, dp_err *e);
void cpu_dnnl_close(dp_bectx *c);
const char *cpu_dnnl_version(int isa_too);
cpu_dnnl *cpu_dnnl_make(dp_bectx *c, const dp_conv2d *g);
void cpu_dnnl_free(cpu_dnnl *d);
size_t cpu_dnnl_ws(const cpu_dnnl *d);
void cpu_dnnl_fwd(dp_bectx *c, cpu_dnnl *d, const float *x, const float *w, const float *b,
		  int act, float *y, void *ws);
void cpu_dnnl_dx(dp_bectx *c, cpu_dnnl *d, const float *dy, const float *w, float *dx, void *ws);
void cpu_dnnl_dw(dp_bectx *c, cpu_dnnl *d, const float *x, const float *dy, float *dw, void *ws);
/* C = op(A) op(B) + beta C (row-major, alpha 1) by oneDNN's SGEMM, on c's
 * threads (whole) or the calling thread; without oneDNN, cpu_sgemm's. */
void cpu_dnnl_sgemm(dp_bectx *c, int whole, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb,
		    int m, int n, int k, const float *a, int lda, const float *b, int ldb,
		    float beta, float *cc, int ldc);

/* ---- cpu_wino.c: 3x3 stride-1 convolutions by Winograd F(2x2, 3x3) ----
 * fits: whether layer g takes it; ws: the workspace it needs (forward and
 * filter gradient: backward 0; input gradient: backward 1); the passes
 * above. */
int cpu_wino_fits(const dp_conv2d *g);
size_t cpu_wino_ws(const dp_bectx *ctx, const dp_conv2d *g, int backward);

#endif
