/*
 * cuda_impl.h - what the CUDA backend's files share (lib/train/backend/
 * cuda.cu: the context, memory, GEMMs, dense layers, the table;
 * cuda_ops.cu: pooling, dropout, batchnorm, losses, optimizers, their
 * formulas shared with the CPU backend in math_impl.h;
 * cuda_conv.cu: convolutions, by cuDNN or im2col + cuBLAS; cuda_nhwc.cu and
 * cuda_nhwc_layers.cu: channels-last activations of the tf32 and bf16
 * modes; cuda_prof.cu: DP_CUDA_PROFILE).  Private to them.
 *
 * Kernel launches go through LAUNCH so that tests/cudaemu can run these
 * files on the CPU (g++ -DDP_CUDA_EMU): a check of the kernels' arithmetic
 * and indexing against the CPU backend where no GPU is at hand.  Every
 * launch has 256 threads a block and a 1-D grid (what the emulation runs).
 */
#ifndef DP_CUDA_IMPL_H
#define DP_CUDA_IMPL_H

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#ifdef DP_WITH_CUDNN
#include <cudnn.h>
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "dp_backend.h"
}
#include "conv_impl.h"
#include "dp_rng.h"

#ifdef DP_CUDA_EMU
#define LAUNCH(k, g, b, s, ...) emu_launch(dim3(g), dim3(b), [&] { k(__VA_ARGS__); })
#define GRID_MAX 2
#else
#define LAUNCH(k, g, b, s, ...) k<<<(g), (b), 0, (s)>>>(__VA_ARGS__)
#define GRID_MAX 65536
#endif

#define THREADS 256
#define NSTAGE 8                        /* distinct stage() targets tracked */
#define CONV_BUDGET ((size_t)256 << 20) /* bytes of im2col workspace per chunk;
					 * DP_CUDA_CONV_BUDGET overrides it (tests: chunks) */
#define CUDNN_WS_MAX ((size_t)512 << 20) /* the most workspace a cuDNN algorithm may
					  * take; DP_CUDNN_WS_MAX overrides it */
#define NTAG 1024                       /* channels-last tensors tracked (a power of 2) */
#define NPLAN 256                       /* convolution shapes planned */
#define NFILT 512                       /* channels-last filters kept (cuda_conv.cu) */
#define FILT_MAX ((size_t)1 << 30)      /* the most bytes they take */

typedef __nv_bfloat16 bf16;

struct stage_slot {
	const void *dev;      /* the caller's buffer: slot 0 */
	void *alt;            /* ours: slot 1 */
	size_t cap;           /* bytes of alt */
	int next;             /* slot of the next copy */
	cudaEvent_t freed[2]; /* on the compute stream: slot k may be overwritten */
	cudaEvent_t ready;    /* on the copy stream: the last copy is done */
};

/* A tensor held channels-last (cuda_nhwc.cu): (n, h, w, c) in the
 * context's activation type, at the start of a buffer the caller sees as
 * (n, c, h, w) float32.  p == NULL: a free slot. */
struct nhwc_tag {
	const void *p;
	int n, c, h, w;
};

/* A convolution's filters in the channels-last type, as its forward pass
 * converted them for its backward pass (cuda_conv.cu: conv_filters);
 * w == NULL: a free slot. */
struct filt_slot {
	const float *w; /* the float32 weights, (k, c, kh, kw) */
	int k, c, kh, kw;
	int valid;
	unsigned gen; /* dp_bectx.wgen at the conversion */
	void *buf;
	size_t cap; /* bytes of buf */
};

/* One convolution shape's cuDNN set-up and chosen algorithms
 * (cuda_conv.cu). */
struct conv_plan {
	dp_conv2d g;
	int used;
#ifdef DP_WITH_CUDNN
	cudnnTensorDescriptor_t x, y;
	cudnnFilterDescriptor_t w;
	cudnnConvolutionDescriptor_t conv;
	cudnnConvolutionFwdAlgo_t fwd;
	cudnnConvolutionBwdDataAlgo_t bwd_data;
	cudnnConvolutionBwdFilterAlgo_t bwd_filter;
#endif
	size_t ws_fwd, ws_data, ws_filter; /* cuDNN's workspace of each choice */
	size_t ws_any;                     /* the most that any candidate would take */
	float ms[3];                       /* the choices' measured times (0: not measured) */
	int sized;                         /* made for conv_ws: kept when the table is full */
	size_t room;                       /* what conv_ws reported for it (sized shapes) */
	unsigned long last;                /* dp_bectx.plan_clock at its last use */
};

struct dp_bectx {
	int dev, prec;
	int nhwc;        /* activations of 4-D layers channels-last (tf32, bf16 with cuDNN) */
	int conv_algo;   /* dp_backend_opts.conv_algo: 1 im2col + GEMM only */
	int pinned;      /* algorithms by cuDNN's heuristics, not measured */
	cudaStream_t s;  /* compute */
	cudaStream_t cs; /* host-to-device copies of stage() */
	cudaEvent_t fetched; /* on the compute stream: the last fetch() is done */
	cublasHandle_t blas;
#ifdef DP_WITH_CUDNN
	cudnnHandle_t dnn;
#endif
	stage_slot st[NSTAGE];
	int nst;
	void *scratch; /* bf16 copies of dense operands, per-row loss terms, conversions */
	size_t scratch_cap;
	void *flat[3]; /* channels-last tensors as NCHW float32 (cuda_nhwc.cu: nhwc_flat) */
	size_t flat_cap[3];
	size_t conv_budget;
	size_t ws_max; /* the most workspace a cuDNN algorithm may take */
	size_t ws_cap; /* the most conv_ws has reported: what a later shape must fit */
	nhwc_tag tag[NTAG];
	conv_plan *plan;
	int nplan;
	unsigned long plan_clock; /* plan_for's calls */
	char *algos; /* dp_backend_opts.algos: choices to take rather than measure */
	filt_slot *filt; /* NFILT of them, made at the first use */
	int nfilt;       /* used */
	size_t filt_bytes;
	unsigned wgen; /* changes when the optimizer changes weights */
	struct cu_prof *prof; /* DP_CUDA_PROFILE (cuda_prof.cu) */
	int prof_depth;
	int failed;
	char msg[512]; /* the first failure */
};

/* ---- errors and small host helpers (cuda.cu) ------------------------------- */

void cu_fail(dp_bectx *c, const char *what, const char *why);
static inline bool ck(dp_bectx *c, cudaError_t r, const char *what)
{
	if (r == cudaSuccess)
		return true;
	cu_fail(c, what, cudaGetErrorString(r));
	return false;
}
#ifdef DP_WITH_CUDNN
static inline bool ckd(dp_bectx *c, cudnnStatus_t r, const char *what)
{
	if (r == CUDNN_STATUS_SUCCESS)
		return true;
	cu_fail(c, what, cudnnGetErrorString(r));
	return false;
}
#endif

/* After a kernel launch: a bad configuration shows here, a fault later. */
#define LAUNCHED(c, name) ck((c), cudaGetLastError(), name)

/* Make this context's device current in the calling thread (calls may
 * come from other threads: host_alloc from a data reader). */
void cu_use(dp_bectx *c);
/* A growing scratch buffer for one call at a time (stream order keeps
 * users apart); growing waits for the work that may still read it. */
void *cu_scratch(dp_bectx *c, size_t bytes);

static inline unsigned grid(size_t n)
{
	size_t b = (n + THREADS - 1) / THREADS;
	return (unsigned)(b > GRID_MAX ? GRID_MAX : b ? b : 1);
}

static inline size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

#define FOR_EACH(i, n) \
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
	     i += (size_t)gridDim.x * blockDim.x)

/* ---- device helpers ------------------------------------------------------------ */

__device__ __forceinline__ float act_f(int act, float v)
{
	switch (act) {
	case DP_ACT_RELU: return v > 0.0f ? v : 0.0f;
	case DP_ACT_TANH: return tanhf(v);
	case DP_ACT_SIGMOID: return 1.0f / (1.0f + expf(-v));
	default: return v;
	}
}

/* dy * act'(from the output y) */
__device__ __forceinline__ float act_g(int act, float y, float d)
{
	switch (act) {
	case DP_ACT_RELU: return y > 0.0f ? d : 0.0f;
	case DP_ACT_TANH: return d * (1.0f - y * y);
	case DP_ACT_SIGMOID: return d * (y * (1.0f - y));
	default: return d;
	}
}

template <typename T> __device__ __forceinline__ T to(float v);
template <> __device__ __forceinline__ float to<float>(float v) { return v; }
template <> __device__ __forceinline__ bf16 to<bf16>(float v) { return __float2bfloat16(v); }
__device__ __forceinline__ float fl(float v) { return v; }
__device__ __forceinline__ float fl(bf16 v) { return __bfloat162float(v); }

/* Pooling: the window of output (oy, ox) inside the image, rows y0..y1-1,
 * columns x0..x1-1 (padding left out: max pooling starts from -infinity
 * at its first position, as PyTorch's, so padding never wins); and the
 * output windows lo..hi along one axis that contain input i (o s <= i <
 * o s + k). */
__device__ __forceinline__ void pool_window(const dp_pool2d &g, int oy, int ox, int *y0, int *y1,
					    int *x0, int *x1)
{
	int a = oy * g.sh - g.ph, b = ox * g.sw - g.pw;
	*y1 = a + g.kh < g.h ? a + g.kh : g.h;
	*x1 = b + g.kw < g.w ? b + g.kw : g.w;
	*y0 = a > 0 ? a : 0;
	*x0 = b > 0 ? b : 0;
}
__device__ __forceinline__ void pool_windows(int i, int k, int s, int out, int *lo, int *hi)
{
	int l = i - k + 1 <= 0 ? 0 : (i - k + s) / s;
	int h = i / s;
	*lo = l;
	*hi = h < out - 1 ? h : out - 1;
}

/* Max pooling's output (oy, ox): the largest input of its window (a NaN
 * wins, as in PyTorch), its position (row * w + column; -1 for an empty
 * window) in *best.  Input (a, b) is p[(a * w + b) * stride]: stride 1
 * in an NCHW plane, c in a channels-last image. */
template <typename T>
__device__ __forceinline__ float pool_max(const dp_pool2d &g, int oy, int ox, const T *p,
					  size_t stride, int *best)
{
	int y0, y1, x0, x1;
	pool_window(g, oy, ox, &y0, &y1, &x0, &x1);
	*best = y0 < y1 && x0 < x1 ? y0 * g.w + x0 : -1;
	float m = -INFINITY;
	for (int a = y0; a < y1; a++)
		for (int b = x0; b < x1; b++) {
			int idx = a * g.w + b;
			float v = fl(p[(size_t)idx * stride]);
			if (v > m || isnan(v)) {
				m = v;
				*best = idx;
			}
		}
	return m;
}

/* Average pooling's input gradient at (iy, ix): dy of every output window
 * that holds it, over the window's size, summed in raster order of the
 * windows.  dy of output (oy, ox) is p[(oy * ow + ox) * stride]. */
template <typename T>
__device__ __forceinline__ float avgpool_grad(const dp_pool2d &g, int iy, int ix, const T *p,
					      size_t stride)
{
	float inv = 1.0f / (float)(g.kh * g.kw), acc = 0.0f;
	int ylo, yhi, xlo, xhi;
	pool_windows(iy, g.kh, g.sh, g.oh, &ylo, &yhi);
	pool_windows(ix, g.kw, g.sw, g.ow, &xlo, &xhi);
	for (int oy = ylo; oy <= yhi; oy++)
		for (int ox = xlo; ox <= xhi; ox++)
			acc += fl(p[((size_t)oy * g.ow + ox) * stride]) * inv;
	return acc;
}

/* Tree sum of v over the block (THREADS threads); the result in thread 0
 * and returned to all.  static: a copy in each file that uses it, as the
 * emulator's barriers and __shared__ arrays are a file's own (one copy
 * shared by the linker ran one file's kernels on another's fibers). */
template <typename T> static __device__ T block_sum(T v)
{
	__shared__ T sh[THREADS];
	sh[threadIdx.x] = v;
	__syncthreads();
	for (int w = THREADS / 2; w > 0; w >>= 1) {
		if ((int)threadIdx.x < w)
			sh[threadIdx.x] += sh[threadIdx.x + w];
		__syncthreads();
	}
	T r = sh[0];
	__syncthreads();
	return r;
}

/* ---- across the files ---------------------------------------------------------- */

/* cuda.cu */
void cu_to_bf16(dp_bectx *c, const float *x, bf16 *dst, size_t n);
void cu_bias_act(dp_bectx *c, float *y, size_t n, const float *b, int nb, size_t inner, int act);
void cu_act_grad(dp_bectx *c, int act, const float *y, const float *dy, float *dx, size_t n);
void cu_chan_sums(dp_bectx *c, const float *x, int n, int k, int hw, float *out);
void cu_gemm(dp_bectx *c, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
	     const void *A, int lda, const void *B, int ldb, float beta, float *C, int ldc,
	     bool lowp, const char *what);
void cu_gemm_batched(dp_bectx *c, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
		     const void *A, int lda, long long sa, const void *B, int ldb, long long sb,
		     float *C, int ldc, long long sc, int count, bool lowp, const char *what);

/* cuda_ops.cu: the backend's pooling, dropout, batchnorm, losses and
 * optimizers (dp_backend.h) */
void cu_maxpool_fwd(dp_bectx *c, const dp_pool2d *g, const float *x, float *y, int32_t *arg);
void cu_maxpool_bwd(dp_bectx *c, const dp_pool2d *g, const float *dy, const int32_t *arg, float *dx);
void cu_avgpool_fwd(dp_bectx *c, const dp_pool2d *g, const float *x, float *y);
void cu_avgpool_bwd(dp_bectx *c, const dp_pool2d *g, const float *dy, float *dx);
void cu_dropout_fwd(dp_bectx *c, const dp_dropout *d, int n, const float *x, float *y);
void cu_dropout_bwd(dp_bectx *c, const dp_dropout *d, int n, const float *dy, float *dx);
void cu_bnorm_sums(dp_bectx *c, const dp_bnorm *g, const float *x, double *sums);
void cu_bnorm_fwd(dp_bectx *c, const dp_bnorm *g, int train, const float *x, const float *gamma,
		  const float *beta, float *run_mean, float *run_var, const double *sums, float *save,
		  float *y);
void cu_bnorm_bwd_sums(dp_bectx *c, const dp_bnorm *g, const float *x, const float *save,
		       const float *y, const float *dy, double *sums);
void cu_bnorm_bwd(dp_bectx *c, const dp_bnorm *g, const float *x, const float *gamma,
		  const float *save, const double *sums, const float *y, const float *dy, float *dx,
		  float *dgamma, float *dbeta);
void cu_xent(dp_bectx *c, int n, int k, const float *logits, const int32_t *labels, float smooth,
	     float scale, float *dlogits, double *stats);
void cu_mse(dp_bectx *c, int n, int k, const float *pred, const float *target, float scale,
	    float *dpred, double *stats);
void cu_softmax(dp_bectx *c, int n, int k, const float *x, float *y);
void cu_sgd(dp_bectx *c, size_t n, float *p, const float *g, float *buf, const dp_sgd_args *a);
void cu_adam(dp_bectx *c, size_t n, float *p, const float *g, float *m, float *v,
	     const dp_adam_args *a);

/* cuda_prof.cu: PROF(c, "kind") at the top of a backend call times it
 * (DP_CUDA_PROFILE); PROF_PART(c, "kind") in a block inside one times
 * that block as a kind of its own, left out of the call's time (cuDNN's
 * calls inside a convolution's) */
void cu_prof_open(dp_bectx *c);
int cu_prof_begin(dp_bectx *c, const char *what, int *part);
void cu_prof_end(dp_bectx *c, int i, int part);
void cu_prof_collect(dp_bectx *c);
void cu_prof_close(dp_bectx *c);
struct cu_prof_scope {
	dp_bectx *c;
	int i, part;
	cu_prof_scope(dp_bectx *k, const char *what, int p = 0) : c(k), i(-1), part(p)
	{
		if (k->prof)
			i = cu_prof_begin(k, what, &part);
	}
	~cu_prof_scope()
	{
		if (c->prof)
			cu_prof_end(c, i, part);
	}
};
#define PROF(c, what) cu_prof_scope prof_scope_((c), (what))
#define PROF_PART(c, what) cu_prof_scope prof_part_((c), (what), 1)

/* cuda_conv.cu: dp_backend's conv_ws, conv_fwd, conv_bwd, and the set-up */
be_conv_open_fn cu_conv_open;
be_conv_close_fn cu_conv_close;
be_conv_ws_fn cu_conv_ws;
be_conv_fwd_fn cu_conv_fwd;
be_conv_bwd_fn cu_conv_bwd;
be_conv_algos_fn cu_conv_algos;
be_conv_algos_take_fn cu_conv_algos_take;

/* cuda_nhwc.cu, cuda_nhwc_layers.cu: channels-last tensors.  tag_of: the tag of a buffer that
 * holds one (NULL: plain NCHW float32); nhwc_in: the tensor at x as
 * channels-last data of shape (n, c, h, w): x itself when it is one, else
 * converted into dst (nhwc_bytes of scratch); nhwc_flat: *p as NCHW
 * float32, converted into the context's buffer slot (0 to 2) when it is
 * channels-last; the nhwc_ operations of the backend's calls return false,
 * doing nothing, where their input is not channels-last. */
const nhwc_tag *tag_of(dp_bectx *c, const void *p);
void tag_set(dp_bectx *c, const void *p, int n, int cc, int h, int w);
void tag_drop(dp_bectx *c, const void *p);
size_t nhwc_bytes(const dp_bectx *c, size_t elems);
const void *nhwc_in(dp_bectx *c, const void *x, int n, int cc, int h, int w, void *dst);
void nhwc_to_nchw(dp_bectx *c, const void *x, const nhwc_tag *t, float *y);
void nhwc_from_nchw(dp_bectx *c, const float *x, int n, int cc, int h, int w, void *y);
void nhwc_flat(dp_bectx *c, const float **p, size_t n, int slot);
float *nhwc_flat_buf(dp_bectx *c, size_t n, int slot);
void nhwc_bias_act(dp_bectx *c, void *y, size_t rows, int k, const float *b, int act);
void nhwc_act_grad(dp_bectx *c, int act, const void *y, const void *dy, void *dx, size_t n);
size_t nhwc_chan_scratch(size_t rows, int k);
void nhwc_chan_sums(dp_bectx *c, const void *x, size_t rows, int k, float *out, void *scr);
/* d = act'(y) d in place and out = its sums over the rows of (rows, k), in
 * one pass: nhwc_act_grad then nhwc_chan_sums, bit for bit; false, nothing
 * done, where y's alignment would order the sums otherwise */
bool nhwc_act_grad_sums(dp_bectx *c, int act, const void *y, void *d, size_t rows, int k,
			float *out, void *scr);
void nhwc_filter(dp_bectx *c, const float *w, const dp_conv2d *g, void *wt);
void nhwc_filter_grad(dp_bectx *c, const void *dwt, const dp_conv2d *g, float *dw);
bool nhwc_act_fwd(dp_bectx *c, int act, size_t n, const float *x, float *y);
bool nhwc_act_bwd(dp_bectx *c, int act, size_t n, const float *y, const float *dy, float *dx);
bool nhwc_add(dp_bectx *c, size_t n, const float *a, const float *b, float *y, int act);
bool nhwc_dropout(dp_bectx *c, const dp_dropout *d, int n, const float *in, float *out);
bool nhwc_pool_fwd(dp_bectx *c, int max, const dp_pool2d *g, const float *x, float *y, int32_t *arg);
bool nhwc_pool_bwd(dp_bectx *c, int max, const dp_pool2d *g, const float *dy, const int32_t *arg,
		   float *dx);
bool nhwc_bnorm_sums(dp_bectx *c, const dp_bnorm *g, const float *x, const float *run_mean,
		     double *sums);
bool nhwc_bnorm_fwd(dp_bectx *c, const dp_bnorm *g, int train, const float *x, const float *gamma,
		    const float *beta, float *run_mean, float *run_var, const double *sums,
		    float *save, float *y);
bool nhwc_bnorm_bwd_sums(dp_bectx *c, const dp_bnorm *g, const float *x, const float *save,
			 const float *y, const float *dy, double *sums);
bool nhwc_bnorm_bwd(dp_bectx *c, const dp_bnorm *g, const float *x, const float *gamma,
		    const float *save, const double *sums, const float *y, const float *dy,
		    float *dx, float *dgamma, float *dbeta);

#endif
