/*
 * md5.c - MD5 (RFC 1321), one message at a time or up to 16 side by side.
 *
 * One MD5 stream is 64 dependent steps per 64-byte block, so a core
 * hashes one message at roughly 5 cycles a byte whatever the code.  The
 * steps are all 32-bit adds, rotates and bitwise functions, which vector
 * units do in every lane at once: s3_md5_update_many() runs the whole
 * blocks of independent messages in lanes (the technique of Intel's
 * multi-buffer hashing).  Per block step that costs about what one scalar
 * block does, so 8 or 16 messages hash for the CPU time of one or two.
 *
 * Kernels: scalar C (everywhere), AVX2 (8 lanes), AVX-512F (16 lanes, with
 * the rotate and three-input logic instructions that fit MD5's F, G, H and
 * I exactly), chosen once at run time; DP_MD5 forces one.  A lane whose
 * message runs out takes the next waiting job; lanes without a job compute
 * on another lane's bytes and are discarded.  With few jobs left the
 * scalar code finishes them (a mostly idle vector is slower than it).
 *
 * The S3 code's one MD5: the reader's checks, the writer's multipart ETag
 * and the parsing of ETags all come here (no other MD5 in lib/s3).
 */
#include "dp.h"
#include "md5.h"
#include "s3_int.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86 1
#endif

/* The 64 steps: f, the registers in their rotation, message word, constant
 * (floor(abs(sin(i + 1)) * 2^32)) and rotation. */
#define MD5_STEPS(S)                                                                               \
	S(F, a, b, c, d, 0, 0xd76aa478, 7)                                                         \
	S(F, d, a, b, c, 1, 0xe8c7b756, 12)                                                        \
	S(F, c, d, a, b, 2, 0x242070db, 17)                                                        \
	S(F, b, c, d, a, 3, 0xc1bdceee, 22)                                                        \
	S(F, a, b, c, d, 4, 0xf57c0faf, 7)                                                         \
	S(F, d, a, b, c, 5, 0x4787c62a, 12)                                                        \
	S(F, c, d, a, b, 6, 0xa8304613, 17)                                                        \
	S(F, b, c, d, a, 7, 0xfd469501, 22)                                                        \
	S(F, a, b, c, d, 8, 0x698098d8, 7)                                                         \
	S(F, d, a, b, c, 9, 0x8b44f7af, 12)                                                        \
	S(F, c, d, a, b, 10, 0xffff5bb1, 17)                                                       \
	S(F, b, c, d, a, 11, 0x895cd7be, 22)                                                       \
	S(F, a, b, c, d, 12, 0x6b901122, 7)                                                        \
	S(F, d, a, b, c, 13, 0xfd987193, 12)                                                       \
	S(F, c, d, a, b, 14, 0xa679438e, 17)                                                       \
	S(F, b, c, d, a, 15, 0x49b40821, 22)                                                       \
	S(G, a, b, c, d, 1, 0xf61e2562, 5)                                                         \
	S(G, d, a, b, c, 6, 0xc040b340, 9)                                                         \
	S(G, c, d, a, b, 11, 0x265e5a51, 14)                                                       \
	S(G, b, c, d, a, 0, 0xe9b6c7aa, 20)                                                        \
	S(G, a, b, c, d, 5, 0xd62f105d, 5)                                                         \
	S(G, d, a, b, c, 10, 0x02441453, 9)                                                        \
	S(G, c, d, a, b, 15, 0xd8a1e681, 14)                                                       \
	S(G, b, c, d, a, 4, 0xe7d3fbc8, 20)                                                        \
	S(G, a, b, c, d, 9, 0x21e1cde6, 5)                                                         \
	S(G, d, a, b, c, 14, 0xc33707d6, 9)                                                        \
	S(G, c, d, a, b, 3, 0xf4d50d87, 14)                                                        \
	S(G, b, c, d, a, 8, 0x455a14ed, 20)                                                        \
	S(G, a, b, c, d, 13, 0xa9e3e905, 5)                                                        \
	S(G, d, a, b, c, 2, 0xfcefa3f8, 9)                                                         \
	S(G, c, d, a, b, 7, 0x676f02d9, 14)                                                        \
	S(G, b, c, d, a, 12, 0x8d2a4c8a, 20)                                                       \
	S(H, a, b, c, d, 5, 0xfffa3942, 4)                                                         \
	S(H, d, a, b, c, 8, 0x8771f681, 11)                                                        \
	S(H, c, d, a, b, 11, 0x6d9d6122, 16)                                                       \
	S(H, b, c, d, a, 14, 0xfde5380c, 23)                                                       \
	S(H, a, b, c, d, 1, 0xa4beea44, 4)                                                         \
	S(H, d, a, b, c, 4, 0x4bdecfa9, 11)                                                        \
	S(H, c, d, a, b, 7, 0xf6bb4b60, 16)                                                        \
	S(H, b, c, d, a, 10, 0xbebfbc70, 23)                                                       \
	S(H, a, b, c, d, 13, 0x289b7ec6, 4)                                                        \
	S(H, d, a, b, c, 0, 0xeaa127fa, 11)                                                        \
	S(H, c, d, a, b, 3, 0xd4ef3085, 16)                                                        \
	S(H, b, c, d, a, 6, 0x04881d05, 23)                                                        \
	S(H, a, b, c, d, 9, 0xd9d4d039, 4)                                                         \
	S(H, d, a, b, c, 12, 0xe6db99e5, 11)                                                       \
	S(H, c, d, a, b, 15, 0x1fa27cf8, 16)                                                       \
	S(H, b, c, d, a, 2, 0xc4ac5665, 23)                                                        \
	S(I, a, b, c, d, 0, 0xf4292244, 6)                                                         \
	S(I, d, a, b, c, 7, 0x432aff97, 10)                                                        \
	S(I, c, d, a, b, 14, 0xab9423a7, 15)                                                       \
	S(I, b, c, d, a, 5, 0xfc93a039, 21)                                                        \
	S(I, a, b, c, d, 12, 0x655b59c3, 6)                                                        \
	S(I, d, a, b, c, 3, 0x8f0ccc92, 10)                                                        \
	S(I, c, d, a, b, 10, 0xffeff47d, 15)                                                       \
	S(I, b, c, d, a, 1, 0x85845dd1, 21)                                                        \
	S(I, a, b, c, d, 8, 0x6fa87e4f, 6)                                                         \
	S(I, d, a, b, c, 15, 0xfe2ce6e0, 10)                                                       \
	S(I, c, d, a, b, 6, 0xa3014314, 15)                                                        \
	S(I, b, c, d, a, 13, 0x4e0811a1, 21)                                                       \
	S(I, a, b, c, d, 4, 0xf7537e82, 6)                                                         \
	S(I, d, a, b, c, 11, 0xbd3af235, 10)                                                       \
	S(I, c, d, a, b, 2, 0x2ad7d2bb, 15)                                                        \
	S(I, b, c, d, a, 9, 0xeb86d391, 21)

/* ---- Scalar ------------------------------------------------------------------ */

#define SF(x, y, z) ((z) ^ ((x) & ((y) ^ (z))))
#define SG(x, y, z) ((y) ^ ((z) & ((x) ^ (y))))
#define SH(x, y, z) ((x) ^ (y) ^ (z))
#define SI(x, y, z) ((y) ^ ((x) | ~(z)))
#define SROL(x, s) (((x) << (s)) | ((x) >> (32 - (s))))
#define SSTEP(f, a, b, c, d, g, k, s)                                                              \
	a += S##f(b, c, d) + w[g] + (uint32_t)k;                                                   \
	a = SROL(a, s) + b;

static uint32_t load32(const unsigned char *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v; /* MD5 is little-endian, as are the hosts libdp supports */
}

static void blocks_scalar(uint32_t h[4], const unsigned char *p, size_t nblocks)
{
	uint32_t a = h[0], b = h[1], c = h[2], d = h[3];
	for (; nblocks; nblocks--, p += 64) {
		uint32_t w[16];
		for (int i = 0; i < 16; i++)
			w[i] = load32(p + 4 * i);
		uint32_t a0 = a, b0 = b, c0 = c, d0 = d;
		MD5_STEPS(SSTEP)
		a += a0;
		b += b0;
		c += c0;
		d += d0;
	}
	h[0] = a;
	h[1] = b;
	h[2] = c;
	h[3] = d;
}

/* ---- Vector kernels ------------------------------------------------------------ */

/* A kernel hashes nblocks blocks in each of L lanes: lane l reads
 * ptr[l], ptr[l] + 64, ...; st holds the states word-major, st[w * L + l]. */
typedef void (*kernel_fn)(uint32_t *st, const unsigned char *const *ptr, size_t nblocks);

#ifdef HAVE_X86

#define VF 0xca /* b ? c : d */
#define VG 0xe4 /* d ? b : c */
#define VH 0x96 /* b ^ c ^ d */
#define VI 0x39 /* c ^ (b | ~d) */
#define ZSTEP(f, a, b, c, d, g, k, s)                                                              \
	a = _mm512_add_epi32(a, _mm512_add_epi32(_mm512_ternarylogic_epi32(b, c, d, V##f),         \
						  _mm512_add_epi32(m[g], _mm512_set1_epi32((int)k)))); \
	a = _mm512_add_epi32(_mm512_rol_epi32(a, s), b);

__attribute__((target("avx512f"))) static void kernel_avx512(uint32_t *st,
							      const unsigned char *const *ptr,
							      size_t nblocks)
{
	__m512i a = _mm512_loadu_si512(st), b = _mm512_loadu_si512(st + 16);
	__m512i c = _mm512_loadu_si512(st + 32), d = _mm512_loadu_si512(st + 48);
	for (size_t blk = 0; blk < nblocks; blk++) {
		size_t off = blk * 64;
		__m512i r[16], t[16], u[16], m[16];
		for (int l = 0; l < 16; l++)
			r[l] = _mm512_loadu_si512(ptr[l] + off);
		/* transpose 16 x 16 words: m[j] = word j of every lane */
		for (int l = 0; l < 16; l += 2) {
			t[l] = _mm512_unpacklo_epi32(r[l], r[l + 1]);
			t[l + 1] = _mm512_unpackhi_epi32(r[l], r[l + 1]);
		}
		for (int q = 0; q < 16; q += 4) {
			u[q] = _mm512_unpacklo_epi64(t[q], t[q + 2]);
			u[q + 1] = _mm512_unpackhi_epi64(t[q], t[q + 2]);
			u[q + 2] = _mm512_unpacklo_epi64(t[q + 1], t[q + 3]);
			u[q + 3] = _mm512_unpackhi_epi64(t[q + 1], t[q + 3]);
		}
		/* u[4g + j], 128-bit lane k: word 4k + j of rows 4g .. 4g + 3 */
		for (int j = 0; j < 4; j++) {
			__m512i v0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44);
			__m512i w0 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44);
			__m512i v1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xee);
			__m512i w1 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xee);
			m[j] = _mm512_shuffle_i32x4(v0, w0, 0x88);
			m[4 + j] = _mm512_shuffle_i32x4(v0, w0, 0xdd);
			m[8 + j] = _mm512_shuffle_i32x4(v1, w1, 0x88);
			m[12 + j] = _mm512_shuffle_i32x4(v1, w1, 0xdd);
		}
		__m512i a0 = a, b0 = b, c0 = c, d0 = d;
		MD5_STEPS(ZSTEP)
		a = _mm512_add_epi32(a, a0);
		b = _mm512_add_epi32(b, b0);
		c = _mm512_add_epi32(c, c0);
		d = _mm512_add_epi32(d, d0);
	}
	_mm512_storeu_si512(st, a);
	_mm512_storeu_si512(st + 16, b);
	_mm512_storeu_si512(st + 32, c);
	_mm512_storeu_si512(st + 48, d);
}

#define YF(x, y, z) _mm256_xor_si256(z, _mm256_and_si256(x, _mm256_xor_si256(y, z)))
#define YG(x, y, z) _mm256_xor_si256(y, _mm256_and_si256(z, _mm256_xor_si256(x, y)))
#define YH(x, y, z) _mm256_xor_si256(_mm256_xor_si256(x, y), z)
#define YI(x, y, z) _mm256_xor_si256(y, _mm256_or_si256(x, _mm256_xor_si256(z, ones)))
#define YSTEP(f, a, b, c, d, g, k, s)                                                              \
	a = _mm256_add_epi32(a, _mm256_add_epi32(Y##f(b, c, d),                                    \
						  _mm256_add_epi32(m[g], _mm256_set1_epi32((int)k)))); \
	a = _mm256_add_epi32(                                                                      \
		_mm256_or_si256(_mm256_slli_epi32(a, s), _mm256_srli_epi32(a, 32 - (s))), b);

/* 8 x 8 words: rows r[0..7] (8 words of one lane each) to columns. */
__attribute__((target("avx2"))) static inline void transpose8(__m256i *out, const __m256i *r)
{
	__m256i t[8], u[8];
	for (int l = 0; l < 8; l += 2) {
		t[l] = _mm256_unpacklo_epi32(r[l], r[l + 1]);
		t[l + 1] = _mm256_unpackhi_epi32(r[l], r[l + 1]);
	}
	for (int q = 0; q < 8; q += 4) {
		u[q] = _mm256_unpacklo_epi64(t[q], t[q + 2]);
		u[q + 1] = _mm256_unpackhi_epi64(t[q], t[q + 2]);
		u[q + 2] = _mm256_unpacklo_epi64(t[q + 1], t[q + 3]);
		u[q + 3] = _mm256_unpackhi_epi64(t[q + 1], t[q + 3]);
	}
	for (int j = 0; j < 4; j++) {
		out[j] = _mm256_permute2x128_si256(u[j], u[4 + j], 0x20);
		out[4 + j] = _mm256_permute2x128_si256(u[j], u[4 + j], 0x31);
	}
}

__attribute__((target("avx2"))) static void kernel_avx2(uint32_t *st,
							 const unsigned char *const *ptr,
							 size_t nblocks)
{
	__m256i a = _mm256_loadu_si256((const __m256i *)st);
	__m256i b = _mm256_loadu_si256((const __m256i *)(st + 8));
	__m256i c = _mm256_loadu_si256((const __m256i *)(st + 16));
	__m256i d = _mm256_loadu_si256((const __m256i *)(st + 24));
	const __m256i ones = _mm256_set1_epi32(-1);
	for (size_t blk = 0; blk < nblocks; blk++) {
		size_t off = blk * 64;
		__m256i r[8], m[16];
		for (int l = 0; l < 8; l++)
			r[l] = _mm256_loadu_si256((const __m256i *)(ptr[l] + off));
		transpose8(m, r);
		for (int l = 0; l < 8; l++)
			r[l] = _mm256_loadu_si256((const __m256i *)(ptr[l] + off + 32));
		transpose8(m + 8, r);
		__m256i a0 = a, b0 = b, c0 = c, d0 = d;
		MD5_STEPS(YSTEP)
		a = _mm256_add_epi32(a, a0);
		b = _mm256_add_epi32(b, b0);
		c = _mm256_add_epi32(c, c0);
		d = _mm256_add_epi32(d, d0);
	}
	_mm256_storeu_si256((__m256i *)st, a);
	_mm256_storeu_si256((__m256i *)(st + 8), b);
	_mm256_storeu_si256((__m256i *)(st + 16), c);
	_mm256_storeu_si256((__m256i *)(st + 24), d);
}
#endif /* HAVE_X86 */

/* ---- Choosing ----------------------------------------------------------------------- */

static kernel_fn kernel;
static int lanes = 1;    /* of the kernel */
static int min_lanes = 1; /* busy lanes below which scalar code is faster */
static const char *impl_name = "scalar";
static pthread_once_t once = PTHREAD_ONCE_INIT;

static int select_impl(const char *name)
{
	int want = 3; /* 3: the best there is, 2: avx2, 1: scalar */
	if (name && !strcmp(name, "scalar"))
		want = 1;
	else if (name && !strcmp(name, "avx2"))
		want = 2;
	kernel = NULL;
	lanes = min_lanes = 1;
	impl_name = "scalar";
#ifdef HAVE_X86
	__builtin_cpu_init();
	if (want >= 3 && __builtin_cpu_supports("avx512f")) {
		kernel = kernel_avx512;
		lanes = 16;
		min_lanes = 3;
		impl_name = "avx512";
	} else if (want >= 2 && __builtin_cpu_supports("avx2")) {
		kernel = kernel_avx2;
		lanes = 8;
		min_lanes = 2;
		impl_name = "avx2";
	}
#endif
	return name && strcmp(name, impl_name) ? -1 : 0;
}

static void choose(void)
{
	select_impl(dp_setting("DP_MD5"));
}

int s3_md5_lanes(void)
{
	pthread_once(&once, choose);
	return lanes;
}

int s3_md5_select(const char *name)
{
	pthread_once(&once, choose);
	return select_impl(name);
}

const char *s3_md5_impl(void)
{
	pthread_once(&once, choose);
	return impl_name;
}

/* ---- The API ---------------------------------------------------------------------------- */

void s3_md5_init(s3_md5 *m)
{
	m->h[0] = 0x67452301;
	m->h[1] = 0xefcdab89;
	m->h[2] = 0x98badcfe;
	m->h[3] = 0x10325476;
	m->len = 0;
}

/* Take bytes into m's partial block; returns how many were taken. */
static size_t top_up(s3_md5 *m, const unsigned char *p, size_t n)
{
	size_t r = (size_t)(m->len % 64);
	if (!r)
		return 0;
	size_t take = 64 - r < n ? 64 - r : n;
	memcpy(m->buf + r, p, take);
	if (r + take == 64)
		blocks_scalar(m->h, m->buf, 1);
	return take;
}

void s3_md5_update(s3_md5 *m, const void *data, size_t n)
{
	const unsigned char *p = data;
	size_t took = top_up(m, p, n);
	p += took;
	m->len += n;
	n -= took;
	if (n >= 64)
		blocks_scalar(m->h, p, n / 64);
	memcpy(m->buf, p + n / 64 * 64, n % 64);
}

void s3_md5_final(s3_md5 *m, unsigned char out[16])
{
	uint64_t bits = m->len * 8;
	static const unsigned char pad[64] = {0x80};
	size_t r = (size_t)(m->len % 64);
	s3_md5_update(m, pad, r < 56 ? 56 - r : 120 - r);
	unsigned char len[8];
	for (int i = 0; i < 8; i++)
		len[i] = (unsigned char)(bits >> (8 * i));
	s3_md5_update(m, len, 8);
	for (int i = 0; i < 4; i++)
		for (int k = 0; k < 4; k++)
			out[4 * i + k] = (unsigned char)(m->h[i] >> (8 * k));
}

typedef struct bulk {
	uint32_t *h;
	const unsigned char *p;
	size_t nb; /* whole blocks left */
} bulk;

/* Hash the whole blocks of jobs in the kernel's lanes. */
static void run_lanes(bulk *jobs, size_t n)
{
	uint32_t st[4 * 16];
	const unsigned char *ptr[16];
	bulk *lane[16] = {0};
	size_t next = 0;
	for (;;) {
		int busy = 0;
		for (int l = 0; l < lanes; l++) {
			if (!lane[l] && next < n) {
				lane[l] = &jobs[next++];
				for (int w = 0; w < 4; w++)
					st[w * lanes + l] = lane[l]->h[w];
			}
			busy += lane[l] != NULL;
		}
		if (busy < min_lanes) {
			for (int l = 0; l < lanes; l++)
				if (lane[l]) {
					for (int w = 0; w < 4; w++)
						lane[l]->h[w] = st[w * lanes + l];
					blocks_scalar(lane[l]->h, lane[l]->p, lane[l]->nb);
				}
			return;
		}
		size_t step = SIZE_MAX;
		const unsigned char *any = NULL;
		for (int l = 0; l < lanes; l++)
			if (lane[l] && lane[l]->nb < step) {
				step = lane[l]->nb;
				any = lane[l]->p;
			}
		for (int l = 0; l < lanes; l++)
			ptr[l] = lane[l] ? lane[l]->p : any; /* idle: recompute a busy lane */
		kernel(st, ptr, step);
		for (int l = 0; l < lanes; l++) {
			if (!lane[l])
				continue;
			lane[l]->p += step * 64;
			lane[l]->nb -= step;
			if (!lane[l]->nb) {
				for (int w = 0; w < 4; w++)
					lane[l]->h[w] = st[w * lanes + l];
				lane[l] = NULL;
			}
		}
	}
}

void s3_md5_update_many(s3_md5_job *jobs, size_t n)
{
	pthread_once(&once, choose);
	bulk b[64];
	while (n) {
		size_t k = n < 64 ? n : 64, nb = 0;
		for (size_t i = 0; i < k; i++) {
			s3_md5 *m = jobs[i].m;
			const unsigned char *p = jobs[i].p;
			size_t len = jobs[i].n;
			size_t took = top_up(m, p, len);
			p += took;
			m->len += len;
			len -= took;
			if (len >= 64)
				b[nb++] = (bulk){m->h, p, len / 64};
			/* the tail: the whole blocks only read p, never m->buf */
			memcpy(m->buf, p + len / 64 * 64, len % 64);
		}
		if (kernel && nb >= (size_t)min_lanes)
			run_lanes(b, nb);
		else
			for (size_t i = 0; i < nb; i++)
				blocks_scalar(b[i].h, b[i].p, b[i].nb);
		jobs += k;
		n -= k;
	}
}

/* ---- S3 ETags ---------------------------------------------------------------------------- */

int s3_md5_etag(const char *etag, unsigned char md[16])
{
	const char *p = etag;
	if (*p == '"')
		p++;
	for (int i = 0; i < 16; i++) {
		int hi = s3_hexval(p[2 * i]), lo = hi < 0 ? -1 : s3_hexval(p[2 * i + 1]);
		if (lo < 0)
			return 0;
		md[i] = (unsigned char)(hi << 4 | lo);
	}
	p += 32;
	return *p == 0 || (*p == '"' && p[1] == 0);
}

void s3_md5_multipart_etag(const char (*parts)[80], int n, char out[80])
{
	static const char hexd[] = "0123456789abcdef";
	s3_md5 m;
	unsigned char md[16];
	out[0] = 0;
	s3_md5_init(&m);
	for (int i = 0; i < n; i++) {
		if (!s3_md5_etag(parts[i], md))
			return;
		s3_md5_update(&m, md, 16);
	}
	s3_md5_final(&m, md);
	char *o = out;
	*o++ = '"';
	for (int k = 0; k < 16; k++) {
		*o++ = hexd[md[k] >> 4];
		*o++ = hexd[md[k] & 15];
	}
	snprintf(o, 80 - 33, "-%d\"", n);
}
