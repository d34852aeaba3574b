/*
 * crc32c.c - CRC-32C (Castagnoli), the checksum of TFRecord framing.
 *
 * Two implementations behind dp_crc32c(), chosen once at run time:
 *  - x86-64 with SSE4.2: the crc32 instruction on three interleaved streams.
 *    The instruction has a latency of 3 cycles and a throughput of 1, so one
 *    stream runs at a third of the speed the unit allows.  We checksum three
 *    adjacent blocks independently and join them with the "append n zero
 *    bytes" operator (a 32x32 matrix over GF(2), applied by four 256-entry
 *    tables), the method of Mark Adler's crc32c.c.
 *  - everywhere else: slicing-by-8 tables, about 1 byte per cycle.
 * DP_CRC32C=sw in the environment forces the portable path (for tests and
 * benchmarks).
 */
#include "dp_record.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define POLY 0x82f63b78u /* reflected Castagnoli polynomial */

static uint32_t sw_table[8][256];

static void sw_init(void)
{
	for (uint32_t n = 0; n < 256; n++) {
		uint32_t c = n;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
		sw_table[0][n] = c;
	}
	for (uint32_t n = 0; n < 256; n++) {
		uint32_t c = sw_table[0][n];
		for (int k = 1; k < 8; k++) {
			c = sw_table[0][c & 0xff] ^ (c >> 8);
			sw_table[k][n] = c;
		}
	}
}

static uint64_t load64(const unsigned char *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v; /* little-endian hosts only: see the check in dp_record.h */
}

static uint32_t crc_sw(uint32_t crc, const unsigned char *p, size_t len)
{
	crc = ~crc;
	while (len && ((uintptr_t)p & 7)) {
		crc = sw_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
		len--;
	}
	while (len >= 8) {
		uint64_t w = load64(p) ^ crc;
		crc = sw_table[7][w & 0xff] ^ sw_table[6][(w >> 8) & 0xff] ^
		      sw_table[5][(w >> 16) & 0xff] ^ sw_table[4][(w >> 24) & 0xff] ^
		      sw_table[3][(w >> 32) & 0xff] ^ sw_table[2][(w >> 40) & 0xff] ^
		      sw_table[1][(w >> 48) & 0xff] ^ sw_table[0][w >> 56];
		p += 8;
		len -= 8;
	}
	while (len--)
		crc = sw_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return ~crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define HAVE_HW 1

#define LONG 8192
#define SHORT 256

static uint32_t long_shift[4][256], short_shift[4][256];

static uint32_t gf2_times(const uint32_t *mat, uint32_t vec)
{
	uint32_t sum = 0;
	for (; vec; vec >>= 1, mat++)
		if (vec & 1)
			sum ^= *mat;
	return sum;
}

static void gf2_square(uint32_t *sq, const uint32_t *mat)
{
	for (int n = 0; n < 32; n++)
		sq[n] = gf2_times(mat, mat[n]);
}

/* Fill t with the operator that appends `len` zero bytes (len a power of two)
 * to a raw (not inverted) CRC register, split into four byte tables. */
static void zeros_table(uint32_t t[4][256], size_t len)
{
	uint32_t a[32], b[32];
	a[0] = POLY; /* one zero bit */
	for (int n = 1; n < 32; n++)
		a[n] = 1u << (n - 1);
	gf2_square(b, a); /* two bits */
	gf2_square(a, b); /* four bits */
	gf2_square(b, a); /* one byte */
	for (; len > 1; len >>= 1) {
		gf2_square(a, b);
		memcpy(b, a, sizeof b);
	}
	for (uint32_t n = 0; n < 256; n++)
		for (int k = 0; k < 4; k++)
			t[k][n] = gf2_times(b, n << (8 * k));
}

static uint32_t shift(uint32_t t[4][256], uint32_t crc)
{
	return t[0][crc & 0xff] ^ t[1][(crc >> 8) & 0xff] ^ t[2][(crc >> 16) & 0xff] ^
	       t[3][crc >> 24];
}

/* The crc c0 carried over p[0 .. 3n): three streams of n bytes, each
 * through the instruction at once, then joined by the table t that shifts
 * a crc over n zero bytes. */
__attribute__((target("sse4.2"), always_inline)) static inline uint64_t
crc_streams(uint64_t c0, const unsigned char *p, size_t n, uint32_t t[4][256])
{
	uint64_t c1 = 0, c2 = 0;
	for (const unsigned char *end = p + n; p < end; p += 8) {
		c0 = _mm_crc32_u64(c0, load64(p));
		c1 = _mm_crc32_u64(c1, load64(p + n));
		c2 = _mm_crc32_u64(c2, load64(p + 2 * n));
	}
	c0 = shift(t, (uint32_t)c0) ^ c1;
	return shift(t, (uint32_t)c0) ^ c2;
}

__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const unsigned char *p,
							   size_t len)
{
	uint64_t c0 = ~crc;
	while (len && ((uintptr_t)p & 7)) {
		c0 = _mm_crc32_u8((uint32_t)c0, *p++);
		len--;
	}
	/* Three streams of LONG bytes, then of SHORT bytes. */
	for (; len >= 3 * LONG; p += 3 * LONG, len -= 3 * LONG)
		c0 = crc_streams(c0, p, LONG, long_shift);
	for (; len >= 3 * SHORT; p += 3 * SHORT, len -= 3 * SHORT)
		c0 = crc_streams(c0, p, SHORT, short_shift);
	while (len >= 8) {
		c0 = _mm_crc32_u64(c0, load64(p));
		p += 8;
		len -= 8;
	}
	while (len--)
		c0 = _mm_crc32_u8((uint32_t)c0, *p++);
	return ~(uint32_t)c0;
}
#endif

static uint32_t (*impl)(uint32_t, const unsigned char *, size_t);
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void choose(void)
{
	const char *force = dp_setting("DP_CRC32C");
	sw_init();
	impl = crc_sw;
#ifdef HAVE_HW
	if (!(force && strcmp(force, "sw") == 0) && __builtin_cpu_supports("sse4.2")) {
		zeros_table(long_shift, LONG);
		zeros_table(short_shift, SHORT);
		impl = crc_hw;
	}
#else
	(void)force;
#endif
}

uint32_t dp_crc32c(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&once, choose);
	return impl(crc, buf, len);
}

uint32_t dp_crc32c_portable(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&once, choose);
	return crc_sw(crc, buf, len);
}

const char *dp_crc32c_impl(void)
{
	pthread_once(&once, choose);
	return impl == crc_sw ? "portable" : "sse4.2";
}
