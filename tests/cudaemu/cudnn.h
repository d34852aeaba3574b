/* tests/cudaemu/cudnn.h - the cuDNN calls of lib/train/backend/cuda_conv.cu
 * on the CPU, for the emulation (see cuda_runtime.h): descriptors as cuDNN
 * checks them, the three convolution passes as a reference in double
 * (cross-correlation, any stride and padding, NCHW or NHWC, float or
 * bfloat16 tensors), and algorithm lists shaped to test the backend's
 * choices: each pass offers three algorithms - one fast but needing an
 * absurd workspace (never fits), one non-deterministic for the gradients,
 * one deterministic with a small workspace - in cuDNN's order (timed:
 * fastest first; heuristic: its own).  A call given less workspace than
 * its algorithm needs fails as cuDNN's does, and the workspace is filled
 * with NaN bytes first, so that data the backend kept in it is found out.
 */
#ifndef CUDAEMU_CUDNN_H
#define CUDAEMU_CUDNN_H

#include "cuda_bf16.h"
#include "cuda_runtime.h"

typedef struct emu_dnn *cudnnHandle_t;
typedef enum {
	CUDNN_STATUS_SUCCESS = 0,
	CUDNN_STATUS_BAD_PARAM = 2000,
	CUDNN_STATUS_NOT_SUPPORTED = 3000
} cudnnStatus_t;
typedef enum { CUDNN_DATA_FLOAT = 0, CUDNN_DATA_BFLOAT16 = 9 } cudnnDataType_t;
typedef enum { CUDNN_TENSOR_NCHW = 0, CUDNN_TENSOR_NHWC = 1 } cudnnTensorFormat_t;
typedef enum { CUDNN_CONVOLUTION = 0, CUDNN_CROSS_CORRELATION = 1 } cudnnConvolutionMode_t;
typedef enum {
	CUDNN_DEFAULT_MATH = 0,
	CUDNN_TENSOR_OP_MATH = 1,
	CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION = 2,
	CUDNN_FMA_MATH = 3
} cudnnMathType_t;
typedef enum { CUDNN_NON_DETERMINISTIC = 0, CUDNN_DETERMINISTIC = 1 } cudnnDeterminism_t;
typedef int cudnnConvolutionFwdAlgo_t;
typedef int cudnnConvolutionBwdDataAlgo_t;
typedef int cudnnConvolutionBwdFilterAlgo_t;

struct emu_dnn {
	int dummy;
};
struct emu_tensor {
	cudnnTensorFormat_t f;
	cudnnDataType_t dt;
	int n, c, h, w, set;
};
struct emu_conv {
	int ph, pw, sh, sw, dh, dw, set;
	cudnnMathType_t math;
};
typedef struct emu_tensor *cudnnTensorDescriptor_t;
typedef struct emu_tensor *cudnnFilterDescriptor_t; /* n = k, h = r, w = s */
typedef struct emu_conv *cudnnConvolutionDescriptor_t;

#define EMU_DNN_PERF(name, A)                                                  \
	typedef struct {                                                       \
		A algo;                                                        \
		cudnnStatus_t status;                                          \
		float time;                                                    \
		size_t memory;                                                 \
		cudnnDeterminism_t determinism;                                \
		cudnnMathType_t mathType;                                      \
		int reserved[3];                                               \
	} name;
EMU_DNN_PERF(cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t)
EMU_DNN_PERF(cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t)
EMU_DNN_PERF(cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t)

static inline const char *cudnnGetErrorString(cudnnStatus_t s)
{
	return s == CUDNN_STATUS_SUCCESS ? "CUDNN_STATUS_SUCCESS"
	       : s == CUDNN_STATUS_BAD_PARAM ? "CUDNN_STATUS_BAD_PARAM"
					     : "CUDNN_STATUS_NOT_SUPPORTED";
}
static inline size_t cudnnGetVersion(void) { return 91900; }
static inline cudnnStatus_t cudnnCreate(cudnnHandle_t *h)
{
	*h = (cudnnHandle_t)calloc(1, sizeof **h);
	return CUDNN_STATUS_SUCCESS;
}
static inline cudnnStatus_t cudnnDestroy(cudnnHandle_t h) { free(h); return CUDNN_STATUS_SUCCESS; }
static inline cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s) { return CUDNN_STATUS_SUCCESS; }

static inline cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *d)
{
	*d = (cudnnTensorDescriptor_t)calloc(1, sizeof **d);
	return CUDNN_STATUS_SUCCESS;
}
static inline cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d)
{
	free(d);
	return CUDNN_STATUS_SUCCESS;
}
static inline cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *d)
{
	return cudnnCreateTensorDescriptor(d);
}
static inline cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d)
{
	return cudnnDestroyTensorDescriptor(d);
}
static inline cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *d)
{
	*d = (cudnnConvolutionDescriptor_t)calloc(1, sizeof **d);
	return CUDNN_STATUS_SUCCESS;
}
static inline cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d)
{
	free(d);
	return CUDNN_STATUS_SUCCESS;
}

static inline cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t f,
						       cudnnDataType_t dt, int n, int c, int h, int w)
{
	if (n <= 0 || c <= 0 || h <= 0 || w <= 0 || (f != CUDNN_TENSOR_NCHW && f != CUDNN_TENSOR_NHWC))
		return CUDNN_STATUS_BAD_PARAM;
	*d = emu_tensor{f, dt, n, c, h, w, 1};
	return CUDNN_STATUS_SUCCESS;
}
static inline cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t dt,
						       cudnnTensorFormat_t f, int k, int c, int r, int s)
{
	return cudnnSetTensor4dDescriptor(d, f, dt, k, c, r, s);
}
static inline cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int ph,
							    int pw, int sh, int sw, int dh, int dw,
							    cudnnConvolutionMode_t m, cudnnDataType_t ct)
{
	if (ph < 0 || pw < 0 || sh <= 0 || sw <= 0 || dh != 1 || dw != 1 || m != CUDNN_CROSS_CORRELATION ||
	    ct != CUDNN_DATA_FLOAT)
		return CUDNN_STATUS_BAD_PARAM; /* what the backend never asks for */
	d->ph = ph, d->pw = pw, d->sh = sh, d->sw = sw, d->dh = dh, d->dw = dw, d->set = 1;
	return CUDNN_STATUS_SUCCESS;
}
static inline cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t m)
{
	d->math = m;
	return CUDNN_STATUS_SUCCESS;
}
static inline cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(cudnnConvolutionDescriptor_t d,
								  cudnnTensorDescriptor_t x,
								  cudnnFilterDescriptor_t w, int *n,
								  int *c, int *h, int *ow)
{
	if (!d->set || !x->set || !w->set || x->c != w->c)
		return CUDNN_STATUS_BAD_PARAM;
	*n = x->n;
	*c = w->n;
	*h = (x->h + 2 * d->ph - w->h) / d->sh + 1;
	*ow = (x->w + 2 * d->pw - w->w) / d->sw + 1;
	return *h > 0 && *ow > 0 ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}

/* ---- the algorithm lists ---- */

enum { EMU_ALGO_HUGE = 2, EMU_ALGO_NONDET = 0, EMU_ALGO_SMALL = 1 };
static inline size_t emu_algo_ws(int a) { return a == EMU_ALGO_HUGE ? (size_t)1 << 44 : a == EMU_ALGO_SMALL ? 4096 : 0; }

/* timed: huge (fastest), then 0 (non-deterministic unless forward), then
 * small; heuristic: small, 0, huge */
#define EMU_DNN_LIST(P, timed, fwd, n, r)                                                   \
	do {                                                                                \
		static const int order_t[3] = {EMU_ALGO_HUGE, EMU_ALGO_NONDET, EMU_ALGO_SMALL}; \
		static const int order_h[3] = {EMU_ALGO_SMALL, EMU_ALGO_NONDET, EMU_ALGO_HUGE}; \
		static const float ms[3] = {0.2f, 0.5f, 0.1f};                              \
		int k = n < 3 ? n : 3;                                                      \
		for (int i = 0; i < k; i++) {                                               \
			int a = (timed ? order_t : order_h)[i];                             \
			memset(&r[i], 0, sizeof r[i]);                                      \
			r[i].algo = a;                                                      \
			r[i].status = CUDNN_STATUS_SUCCESS;                                 \
			r[i].time = timed ? ms[a] : -1.0f;                                  \
			r[i].memory = emu_algo_ws(a);                                       \
			r[i].determinism = a == EMU_ALGO_NONDET && !fwd ? CUDNN_NON_DETERMINISTIC \
									 : CUDNN_DETERMINISTIC; \
		}                                                                           \
		*returned = k;                                                              \
	} while (0)

static inline int emu_dnn_shapes(cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t w,
				 cudnnConvolutionDescriptor_t d, cudnnTensorDescriptor_t y)
{
	int n, c, h, ww;
	return cudnnGetConvolution2dForwardOutputDim(d, x, w, &n, &c, &h, &ww) == CUDNN_STATUS_SUCCESS &&
	       y->set && y->n == n && y->c == c && y->h == h && y->w == ww && x->dt == w->dt &&
	       x->dt == y->dt && x->f == w->f && x->f == y->f;
}

/* The three passes' algorithm queries and workspace sizes: a, b, c are the
 * descriptors in each call's order (forward: x, w, y; data gradient: w,
 * dy, dx; filter gradient: x, dy, dw), SHAPES their check. */
#define EMU_DNN_QUERY(NAME, P, TIMED, FWD, SHAPES)                                              \
	static inline cudnnStatus_t NAME(cudnnHandle_t h, emu_tensor *a, emu_tensor *b,          \
					 cudnnConvolutionDescriptor_t d, emu_tensor *c, int req,   \
					 int *returned, P *r)                                      \
	{                                                                                         \
		if (!(SHAPES))                                                                    \
			return CUDNN_STATUS_BAD_PARAM;                                            \
		EMU_DNN_LIST(P, TIMED, FWD, req, r);                                              \
		return CUDNN_STATUS_SUCCESS;                                                      \
	}
#define EMU_DNN_WS(NAME, SHAPES)                                                                \
	static inline cudnnStatus_t NAME(cudnnHandle_t h, emu_tensor *a, emu_tensor *b,          \
					 cudnnConvolutionDescriptor_t d, emu_tensor *c, int algo,  \
					 size_t *bytes)                                            \
	{                                                                                         \
		return (SHAPES) ? emu_dnn_ws(algo, bytes) : CUDNN_STATUS_BAD_PARAM;               \
	}
#define EMU_FWD emu_dnn_shapes(a, b, d, c)
#define EMU_DATA emu_dnn_shapes(c, a, d, b)
#define EMU_FILTER emu_dnn_shapes(a, c, d, b)
static inline cudnnStatus_t emu_dnn_ws(int algo, size_t *bytes)
{
	if (algo < 0 || algo > 2)
		return CUDNN_STATUS_BAD_PARAM;
	*bytes = emu_algo_ws(algo);
	return CUDNN_STATUS_SUCCESS;
}
EMU_DNN_QUERY(cudnnFindConvolutionForwardAlgorithm, cudnnConvolutionFwdAlgoPerf_t, 1, 1, EMU_FWD)
EMU_DNN_QUERY(cudnnFindConvolutionBackwardDataAlgorithm, cudnnConvolutionBwdDataAlgoPerf_t, 1, 0, EMU_DATA)
EMU_DNN_QUERY(cudnnFindConvolutionBackwardFilterAlgorithm, cudnnConvolutionBwdFilterAlgoPerf_t, 1, 0, EMU_FILTER)
EMU_DNN_QUERY(cudnnGetConvolutionForwardAlgorithm_v7, cudnnConvolutionFwdAlgoPerf_t, 0, 1, EMU_FWD)
EMU_DNN_QUERY(cudnnGetConvolutionBackwardDataAlgorithm_v7, cudnnConvolutionBwdDataAlgoPerf_t, 0, 0, EMU_DATA)
EMU_DNN_QUERY(cudnnGetConvolutionBackwardFilterAlgorithm_v7, cudnnConvolutionBwdFilterAlgoPerf_t, 0, 0, EMU_FILTER)
EMU_DNN_WS(cudnnGetConvolutionForwardWorkspaceSize, EMU_FWD)
EMU_DNN_WS(cudnnGetConvolutionBackwardDataWorkspaceSize, EMU_DATA)
EMU_DNN_WS(cudnnGetConvolutionBackwardFilterWorkspaceSize, EMU_FILTER)

/* ---- the passes, in double ---- */

static inline size_t emu_at(const emu_tensor *t, int i, int j, int k, int l)
{
	return t->f == CUDNN_TENSOR_NCHW ? (((size_t)i * t->c + j) * t->h + k) * t->w + l
					 : (((size_t)i * t->h + k) * t->w + l) * t->c + j;
}
static inline double emu_get(const emu_tensor *t, const void *p, size_t at)
{
	return t->dt == CUDNN_DATA_FLOAT ? ((const float *)p)[at]
					 : __bfloat162float(((const __nv_bfloat16 *)p)[at]);
}
static inline void emu_put(const emu_tensor *t, void *p, size_t at, double v, float alpha, float beta)
{
	double old = beta != 0 ? emu_get(t, p, at) : 0;
	float r = (float)(alpha * v + beta * old);
	if (t->dt == CUDNN_DATA_FLOAT)
		((float *)p)[at] = r;
	else
		((__nv_bfloat16 *)p)[at] = __float2bfloat16(r);
}
static inline cudnnStatus_t emu_dnn_check(int algo, void *ws, size_t wsb)
{
	size_t need;
	if (emu_dnn_ws(algo, &need) != CUDNN_STATUS_SUCCESS || wsb < need || (need && !ws))
		return CUDNN_STATUS_BAD_PARAM;
	if (wsb)
		memset(ws, 0xff, wsb); /* what cuDNN may leave there */
	return CUDNN_STATUS_SUCCESS;
}

/* A convolution's three products in one loop: y (n, k, oh, ow) = sum over
 * c, r, s of x (n, c, oy sh - ph + r, ox sw - pw + s) w (k, c, r, s).
 * out says which of x, w, y is written (alpha, beta as cuDNN's), summed in
 * double over every product of the other two: y (forward), x (backward
 * data), w (backward filter). */
enum { EMU_OUT_X, EMU_OUT_W, EMU_OUT_Y };

static inline cudnnStatus_t emu_dnn_conv(int out, cudnnTensorDescriptor_t xd, const void *x,
					 cudnnFilterDescriptor_t wd, const void *w,
					 cudnnTensorDescriptor_t yd, const void *y,
					 cudnnConvolutionDescriptor_t d, int algo, void *ws, size_t wsb,
					 const void *alpha, const void *beta, void *to)
{
	if (!emu_dnn_shapes(xd, wd, d, yd) || emu_dnn_check(algo, ws, wsb) != CUDNN_STATUS_SUCCESS)
		return CUDNN_STATUS_BAD_PARAM;
	const emu_tensor *od = out == EMU_OUT_X ? xd : out == EMU_OUT_W ? wd : yd;
	size_t no = (size_t)od->n * od->c * od->h * od->w;
	double *acc = (double *)calloc(no, sizeof *acc);
	for (int n_ = 0; n_ < yd->n; n_++)
		for (int k_ = 0; k_ < yd->c; k_++)
			for (int oy_ = 0; oy_ < yd->h; oy_++)
				for (int ox_ = 0; ox_ < yd->w; ox_++)
					for (int c_ = 0; c_ < xd->c; c_++)
						for (int r_ = 0; r_ < wd->h; r_++) {
							int iy_ = oy_ * d->sh - d->ph + r_;
							if (iy_ < 0 || iy_ >= xd->h)
								continue;
							for (int s_ = 0; s_ < wd->w; s_++) {
								int ix_ = ox_ * d->sw - d->pw + s_;
								if (ix_ < 0 || ix_ >= xd->w)
									continue;
								size_t ax = emu_at(xd, n_, c_, iy_, ix_),
								       aw = emu_at(wd, k_, c_, r_, s_),
								       ay = emu_at(yd, n_, k_, oy_, ox_);
								if (out == EMU_OUT_Y)
									acc[ay] += emu_get(xd, x, ax) * emu_get(wd, w, aw);
								else if (out == EMU_OUT_X)
									acc[ax] += emu_get(yd, y, ay) * emu_get(wd, w, aw);
								else
									acc[aw] += emu_get(yd, y, ay) * emu_get(xd, x, ax);
							}
						}
	for (size_t i = 0; i < no; i++)
		emu_put(od, to, i, acc[i], *(const float *)alpha, *(const float *)beta);
	free(acc);
	return CUDNN_STATUS_SUCCESS;
}

static inline cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void *alpha,
						    cudnnTensorDescriptor_t xd, const void *x,
						    cudnnFilterDescriptor_t wd, const void *w,
						    cudnnConvolutionDescriptor_t d, int algo, void *ws,
						    size_t wsb, const void *beta,
						    cudnnTensorDescriptor_t yd, void *y)
{
	return emu_dnn_conv(EMU_OUT_Y, xd, x, wd, w, yd, NULL, d, algo, ws, wsb, alpha, beta, y);
}

static inline cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void *alpha,
							 cudnnFilterDescriptor_t wd, const void *w,
							 cudnnTensorDescriptor_t dyd, const void *dy,
							 cudnnConvolutionDescriptor_t d, int algo, void *ws,
							 size_t wsb, const void *beta,
							 cudnnTensorDescriptor_t dxd, void *dx)
{
	return emu_dnn_conv(EMU_OUT_X, dxd, NULL, wd, w, dyd, dy, d, algo, ws, wsb, alpha, beta, dx);
}

static inline cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void *alpha,
							   cudnnTensorDescriptor_t xd, const void *x,
							   cudnnTensorDescriptor_t dyd, const void *dy,
							   cudnnConvolutionDescriptor_t d, int algo,
							   void *ws, size_t wsb, const void *beta,
							   cudnnFilterDescriptor_t dwd, void *dw)
{
	return emu_dnn_conv(EMU_OUT_W, xd, x, dwd, NULL, dyd, dy, d, algo, ws, wsb, alpha, beta, dw);
}

#endif
