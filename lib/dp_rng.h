/*
 * dp_rng.h - libdp's one random number generator: counter-based,
 * reproducible, the same on every machine.
 *
 * Every random number dp-train draws is a pure function of (seed, purpose,
 * counters): weight initialisation of (seed, layer, element), dropout masks
 * of (seed, step, layer, sample, element), the shuffle of (seed, epoch).
 * So the same seed gives the same run bit for bit, a resumed run needs only
 * the counters (step, epoch) to continue exactly, a GPU backend can draw
 * the same masks in parallel, and the masks of a sample do not depend on
 * which worker holds it (data-parallel runs with the same global batch see
 * the same dropout as one process).
 *
 * The mixing function is SplitMix64's finaliser (Steele, Lea, Flood 2014),
 * applied to key + counter * golden ratio: a Weyl sequence per key.  A
 * generator seeded with dp_rng_seed() is therefore exactly splitmix64 with
 * state mix64(seed ^ mix64(stream)): tfr-shard's shuffles and splits and
 * s3-pipe's key shuffles are specified that way (dp_hash.h), and stay so.
 * The generator has no hidden state: each thread owns the dp_rng it draws
 * from.
 */
#ifndef DP_RNG_H
#define DP_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The stateless functions compile for the GPU too (lib/train/backend/cuda.cu
 * draws dropout masks with them), so both backends share one definition. */
#ifdef __CUDACC__
#define DP_RNG_FN static inline __host__ __device__
#else
#define DP_RNG_FN static inline
#endif

#define DP_RNG_GOLDEN 0x9e3779b97f4a7c15ull

DP_RNG_FN uint64_t dp_mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* A key for one purpose: dp_rng_key(seed, 3, (uint64_t[]){tag, a, b}). */
DP_RNG_FN uint64_t dp_rng_key(uint64_t seed, int n, const uint64_t *parts)
{
	uint64_t k = dp_mix64(seed + DP_RNG_GOLDEN);
	for (int i = 0; i < n; i++)
		k = dp_mix64(k ^ (parts[i] + DP_RNG_GOLDEN));
	return k;
}

/* The counter-th 64-bit number of the stream `key`. */
DP_RNG_FN uint64_t dp_rng_at(uint64_t key, uint64_t counter)
{
	return dp_mix64(key + (counter + 1) * DP_RNG_GOLDEN);
}

/* A uniform float in [0, 1) from the top 24 bits. */
DP_RNG_FN float dp_rng_unit(uint64_t r)
{
	return (float)(r >> 40) * (1.0f / 16777216.0f);
}

/* Sequential generator: state advances by one counter per draw. */
typedef struct dp_rng {
	uint64_t key, counter;
} dp_rng;

/* A generator for one use (`stream`) of a user's seed: splitmix64 started
 * at mix64(seed ^ mix64(stream)).  Streams of one seed are independent. */
static inline void dp_rng_seed(dp_rng *r, uint64_t seed, uint64_t stream)
{
	r->key = dp_mix64(seed ^ dp_mix64(stream));
	r->counter = 0;
}

static inline uint64_t dp_rng_next(dp_rng *r)
{
	return dp_rng_at(r->key, r->counter++);
}

/* A uniform integer in [0, n), n > 0 (Lemire's multiply-shift; the bias is
 * below 2^-32 for the n used here). */
static inline uint64_t dp_rng_below(dp_rng *r, uint64_t n)
{
	__extension__ typedef unsigned __int128 u128; /* GCC and Clang */
	return (uint64_t)(((u128)dp_rng_next(r) * n) >> 64);
}

/* Purposes, mixed into keys so that streams never overlap. */
enum { DP_RNG_INIT = 1, DP_RNG_DROPOUT = 2, DP_RNG_SHUFFLE = 3, DP_RNG_FILES = 4, DP_RNG_AUGMENT = 5 };


#ifdef __cplusplus
}
#endif
#endif
