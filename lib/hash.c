/*
 * hash.c - stable key hashes and the seeded generator (see dp_hash.h for
 * the exact definitions, which are a compatibility promise: changing a
 * constant here moves records between shards).
 */
#include "dp_hash.h"
#include "dp_record.h" /* little-endian hosts only */

#include <stdlib.h>
#include <string.h>

uint64_t dp_fnv1a64(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;
	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= DP_FNV1A64_PRIME;
	}
	return h;
}

uint64_t dp_mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

uint64_t dp_hash64(const void *p, size_t n)
{
	return dp_mix64(dp_fnv1a64(DP_FNV1A64_INIT, p, n));
}

static int bytes_fn(const uint8_t *p, size_t len, void *ctx)
{
	uint64_t *h = ctx;
	*h = dp_fnv1a64(*h, p, len);
	return 0;
}

int dp_feature_hash(const dp_feature *f, uint64_t *out)
{
	uint64_t h = DP_FNV1A64_INIT;
	if (f->kind == DP_KIND_BYTES) {
		dp_feature_bytes_each(f, bytes_fn, &h);
	} else if (f->kind == DP_KIND_INT64 || f->kind == DP_KIND_FLOAT) {
		/* Values are copied out whole; key features are short. */
		int64_t small[64];
		size_t n = f->count;
		void *v = small;
		if (n > 64 && !(v = malloc(n * 8)))
			return DP_ENOMEM;
		if (f->kind == DP_KIND_INT64) {
			n = dp_feature_int64s(f, v, n);
			h = dp_fnv1a64(h, v, n * 8); /* little-endian host (dp_record.h) */
		} else {
			float *fl = v;
			n = dp_feature_floats(f, fl, n);
			for (size_t i = 0; i < n; i++)
				if (fl[i] == 0.0f)
					fl[i] = 0.0f; /* -0.0 -> +0.0 */
			h = dp_fnv1a64(h, fl, n * 4);
		}
		if (v != small)
			free(v);
	}
	*out = dp_mix64(h);
	return DP_OK;
}

void dp_rng_seed(dp_rng *r, uint64_t seed, uint64_t stream)
{
	r->s = dp_mix64(seed ^ dp_mix64(stream));
}

uint64_t dp_rng_next(dp_rng *r)
{
	r->s += 0x9e3779b97f4a7c15ull;
	return dp_mix64(r->s);
}

uint64_t dp_rng_below(dp_rng *r, uint64_t n)
{
	return (uint64_t)(((unsigned __int128)dp_rng_next(r) * n) >> 64);
}
