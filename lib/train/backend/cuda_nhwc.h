/*
 * cuda_nhwc.h - what cuda_nhwc.cu and cuda_nhwc_layers.cu share (the
 * CUDA backend's channels-last tensors; see cuda_nhwc.cu): the activation
 * type, 16-byte vector access, kernels by channel, sums over channels.
 */
#ifndef DP_CUDA_NHWC_H
#define DP_CUDA_NHWC_H

#include "cuda_impl.h"

/* stmt with T the context's activation type (bf16 or float) */
#define BY_TYPE(c, ...)                        \
	do {                                   \
		if ((c)->prec == DP_PREC_BF16) { \
			typedef bf16 T;        \
			__VA_ARGS__;           \
		} else {                       \
			typedef float T;       \
			__VA_ARGS__;           \
		}                              \
	} while (0)

/* ---- 16 bytes at a time ------------------------------------------------------------
 * The elementwise and channel kernels move 16 bytes per access (8 bfloat16
 * or 4 floats) where the sizes and pointers allow: with one or two bytes a
 * thread there are too few bytes in flight to fill the memory bus (on an
 * H200 the 2-byte kernels ran at a quarter of its bandwidth). */

template <typename T> struct VN;
template <> struct VN<float> {
	enum { n = 4 };
};
template <> struct VN<bf16> {
	enum { n = 8 };
};

__device__ __forceinline__ float bf_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf_hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }
/* float to bfloat16 bits, rounding to nearest even (__float2bfloat16's) */
__device__ __forceinline__ unsigned bf_bits(float f)
{
	unsigned u = __float_as_uint(f);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return 0x7fc0u;
	return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

__device__ __forceinline__ void vld(const float *p, float *f)
{
	uint4 q = *(const uint4 *)p;
	f[0] = __uint_as_float(q.x), f[1] = __uint_as_float(q.y);
	f[2] = __uint_as_float(q.z), f[3] = __uint_as_float(q.w);
}
__device__ __forceinline__ void vld(const bf16 *p, float *f)
{
	uint4 q = *(const uint4 *)p;
	f[0] = bf_lo(q.x), f[1] = bf_hi(q.x), f[2] = bf_lo(q.y), f[3] = bf_hi(q.y);
	f[4] = bf_lo(q.z), f[5] = bf_hi(q.z), f[6] = bf_lo(q.w), f[7] = bf_hi(q.w);
}
__device__ __forceinline__ void vst(float *p, const float *f)
{
	uint4 q;
	q.x = __float_as_uint(f[0]), q.y = __float_as_uint(f[1]);
	q.z = __float_as_uint(f[2]), q.w = __float_as_uint(f[3]);
	*(uint4 *)p = q;
}
__device__ __forceinline__ void vst(bf16 *p, const float *f)
{
	uint4 q;
	q.x = bf_bits(f[0]) | bf_bits(f[1]) << 16, q.y = bf_bits(f[2]) | bf_bits(f[3]) << 16;
	q.z = bf_bits(f[4]) | bf_bits(f[5]) << 16, q.w = bf_bits(f[6]) | bf_bits(f[7]) << 16;
	*(uint4 *)p = q;
}

/* whether n elements at the pointers go 16 bytes at a time */
static inline bool vec_ok(const dp_bectx *c, size_t n, const void *a, const void *b = NULL, const void *d = NULL)
{
	size_t vn = c->prec == DP_PREC_BF16 ? 8 : 4;
	return n % vn == 0 && !((uintptr_t)a & 15) && !((uintptr_t)b & 15) && !((uintptr_t)d & 15);
}
static inline size_t vec_n(const dp_bectx *c) { return c->prec == DP_PREC_BF16 ? 8 : 4; }

/* Kernels over (rows, k) by channel: launched on chan_grid() blocks, whose
 * threads all step by a multiple of k, so that each keeps one channel
 * (no division per element: 64-bit division costs dozens of instructions,
 * more than the bytes these kernels move allow). */
static inline unsigned chan_grid(size_t total, int k)
{
	unsigned a = (unsigned)k, b = THREADS;
	while (b) {
		unsigned t = a % b;
		a = b;
		b = t;
	}
	unsigned q = (unsigned)k / a, g = grid(total);
	return g < q ? q : g - g % q;
}

#define FOR_CHAN(i, ch, total, k)                                                 \
	size_t i##0_ = (size_t)blockIdx.x * blockDim.x + threadIdx.x;             \
	int ch = (int)(i##0_ % (size_t)(k));                                      \
	for (size_t i = i##0_; i < (total); i += (size_t)gridDim.x * blockDim.x)
/* the same in two parts, for a thread's per-channel values in between */
#define CHAN_OF(i, ch, k)                                                         \
	size_t i##0_ = (size_t)blockIdx.x * blockDim.x + threadIdx.x;             \
	int ch = (int)(i##0_ % (size_t)(k))
#define CHAN_LOOP(i, total) for (size_t i = i##0_; i < (total); i += (size_t)gridDim.x * blockDim.x)

/* sums over the rows of (rows, k) (cuda_nhwc.cu): op 0 sum x; 1 sum
 * (x - m0), sum (x - m0)^2; 2 sum dy, sum dy (x - mean) inv (mean, inv from
 * save); 3 as 2 with dy read as 0 where y <= 0 (a fused ReLU's output);
 * into scr (nhwc_chan_scratch bytes), the (2, k) doubles returned */
double *nhwc_col_sums(dp_bectx *c, int op, const void *x, const void *dy, const void *y,
		      size_t rows, int k, const float *m0, const float *save, void *scr);

#endif
