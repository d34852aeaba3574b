/*
 * cpu_impl.h - private to lib/train/backend/cpu*.c: the CPU backend's
 * instance, its pool of helper threads (cpu_pool.c), its Winograd
 * convolutions (cpu_wino.c) and what they share with the reference loops
 * of cpu.c.  Not installed.
 */
#ifndef DP_CPU_IMPL_H
#define DP_CPU_IMPL_H

#include "dp_backend.h"
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

/* ---- cpu_pool.c: a pool for the backend's own loops ---- */
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

struct dp_bectx {
	int threads;
	int conv_algo; /* dp_backend_opts.conv_algo */
	par_pool pool; /* threads - 1 helpers (none for one thread) */
	par_helper *helpers;
};

/* Start threads - 1 helpers (fewer when it cannot: the same results). */
void cpu_par_start(dp_bectx *c);
void cpu_par_stop(par_pool *p, par_helper *h);
/* fn(arg, i, worker) for every i < n, on the calling thread (worker 0)
 * and the helpers. */
void cpu_par_run(dp_bectx *c, int n, par_fn *fn, void *arg);

/* ---- cpu.c ---- */
/* y = act(y + b) over n elements (b a scalar: one conv channel). */
void cpu_bias_act(float *y, size_t n, float b, int act);

/* ---- cpu_wino.c: 3x3 stride-1 convolutions by Winograd F(2x2, 3x3) ----
 * use: whether layer g takes it (forward: backward 0, and for the filter
 * gradient; the input gradient: backward 1), by ctx->conv_algo; ws: the
 * workspace it needs (the conv_ws share); fwd: y = act(conv(x, w) + b);
 * dx: the input gradient of dy; dw: the filter gradient. */
int cpu_wino_use(const dp_bectx *ctx, const dp_conv2d *g, int backward);
size_t cpu_wino_ws(const dp_bectx *ctx, const dp_conv2d *g, int backward);
void cpu_wino_fwd(dp_bectx *ctx, const dp_conv2d *g, const float *x, const float *w, const float *b,
		  int act, float *y, void *ws);
void cpu_wino_dx(dp_bectx *ctx, const dp_conv2d *g, const float *dy, const float *w, float *dx,
		 void *ws);
void cpu_wino_dw(dp_bectx *ctx, const dp_conv2d *g, const float *x, const float *dy, float *dw,
		 void *ws);

#endif
