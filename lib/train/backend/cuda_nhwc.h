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

/* ---- sums over the rows of (rows, k), in two launches -------------------------
 * nhwc_col_parts (cuda_nhwc.cu) sums each block's rows into scr: op 0 sum
 * x; 1 sum (x - m0), sum (x - m0)^2; 2 sum dy, sum dy (x - mean) inv (mean,
 * inv from save); 3 as 2 with dy read as 0 where y <= 0 (a fused ReLU's
 * output).  col_total then adds the blocks' parts into the (2, k) doubles
 * tot after them in scr (nhwc_chan_scratch bytes in all), returned, and
 * for each channel, once its sums are in tot, calls tail(ch, tot): what a
 * batchnorm makes of its sums per channel, in the same launch rather than
 * one of its own. */
void nhwc_col_parts(dp_bectx *c, int op, const void *x, const void *dy, const void *y, size_t rows,
		    int k, const float *m0, const float *save, void *scr);

/* the blocks that sum the rows, and the bytes of their parts (nb, 2, k) */
static inline int col_blocks(size_t rows)
{
	size_t nb = rows / 64;
	return (int)(nb < 1 ? 1 : nb > 1024 ? 1024 : nb);
}
static inline size_t col_part_bytes(size_t rows, int k)
{
	return align256((size_t)col_blocks(rows) * 2 * k * sizeof(float));
}

struct no_tail {
	__device__ void operator()(int ch, const double *tot) const {}
};

/* tot (2, k) doubles = the sums of part over its nb blocks: a block per
 * 32 channels, its 8 warps taking every 8th block's part, then the warps'
 * sums in order (a thread a channel summing all nb in turn kept a few
 * hundred threads busy a millisecond per batchnorm on an H200).  static:
 * each file's own (the emulation's barriers are a file's). */
template <typename Tail>
static __global__ void k_col_total(const float *part, int nb, int k, double *tot, Tail tail)
{
	__shared__ double sh[2][THREADS];
	int ch = blockIdx.x * 32 + (int)threadIdx.x % 32, lane = (int)threadIdx.x / 32;
	double s1 = 0, s2 = 0;
	if (ch < k)
		for (int b = lane; b < nb; b += THREADS / 32) {
			s1 += part[((size_t)b * 2) * k + ch];
			s2 += part[((size_t)b * 2 + 1) * k + ch];
		}
	sh[0][threadIdx.x] = s1;
	sh[1][threadIdx.x] = s2;
	__syncthreads();
	if (lane == 0 && ch < k) {
		double t1 = 0, t2 = 0;
		for (int l = 0; l < THREADS / 32; l++) {
			t1 += sh[0][l * 32 + threadIdx.x];
			t2 += sh[1][l * 32 + threadIdx.x];
		}
		tot[ch] = t1;
		tot[k + ch] = t2;
		tail(ch, tot);
	}
}

template <typename Tail> static double *col_total(dp_bectx *c, size_t rows, int k, void *scr, Tail tail)
{
	double *tot = (double *)((char *)scr + col_part_bytes(rows, k));
	LAUNCH(k_col_total<Tail>, (k + 31) / 32, THREADS, c->s, (const float *)scr, col_blocks(rows), k, tot,
	       tail);
	LAUNCHED(c, "channel sums");
	return tot;
}

#endif
