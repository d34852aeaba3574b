/*
 * hash.c - stable key hashes (see dp_hash.h for the exact definitions,
 * which are a compatibility promise: changing a constant here moves
 * records between shards).  The generator is dp_rng.h's.
 */
#include "dp_hash.h"

uint64_t dp_fnv1a64(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;
	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= DP_FNV1A64_PRIME;
	}
	return h;
}

uint64_t dp_hash64(const void *p, size_t n)
{
	return dp_mix64(dp_fnv1a64(DP_FNV1A64_INIT, p, n));
}
