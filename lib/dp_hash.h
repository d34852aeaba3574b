/*
 * dp_hash.h - stable hashes, the same on every machine and in every run,
 * for assigning records and keys to shards and splits.
 *
 * The hash of a key (dp_hash64) is
 *
 *     h = mix64(fnv1a64(bytes))
 *
 * where fnv1a64 is 64-bit FNV-1a (offset basis 0xcbf29ce484222325, prime
 * 0x100000001b3: for each byte, h ^= byte; h *= prime) and mix64 is the
 * splitmix64 finaliser (a bijection of 64-bit integers):
 *
 *     x ^= x >> 30; x *= 0xbf58476d1ce4e5b9;
 *     x ^= x >> 27; x *= 0x94d049bb133111eb;
 *     x ^= x >> 31;
 *
 * FNV-1a alone has weak low bits; the finaliser spreads every input bit
 * over the whole word, so both h % n and the top bits of h are usable.
 *
 * The key of a tf.train.Example feature is its values' canonical bytes,
 * concatenated in order: a bytes value as itself, an int64 as 8 bytes
 * little-endian two's complement, a float as its 4 IEEE-754 bytes
 * little-endian (-0.0 written as +0.0).  A feature with no values hashes
 * the empty string.  The kind is not hashed.  So a record whose "user"
 * feature is the single string "alice" has h = dp_hash64("alice", 5), and
 * tfr-shard --by hash:user puts it in shard h % nshards.
 *
 * Python reference (tests/tfr-shard-hash.t checks libdp against it):
 *
 *     def h64(b):
 *         h = 0xcbf29ce484222325
 *         for c in b: h = ((h ^ c) * 0x100000001b3) & M
 *         h ^= h >> 30; h = (h * 0xbf58476d1ce4e5b9) & M
 *         h ^= h >> 27; h = (h * 0x94d049bb133111eb) & M
 *         return h ^ (h >> 31)                     # M = 2**64 - 1
 */
#ifndef DP_HASH_H
#define DP_HASH_H

#include "dp.h"
#include "dp_rng.h" /* dp_mix64 */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DP_FNV1A64_INIT 0xcbf29ce484222325ull
#define DP_FNV1A64_PRIME 0x100000001b3ull

/* Extend an FNV-1a hash h (DP_FNV1A64_INIT to start) with n bytes. */
DP_EXPORT uint64_t dp_fnv1a64(uint64_t h, const void *p, size_t n);
/* dp_mix64(dp_fnv1a64(DP_FNV1A64_INIT, p, n)): the hash of a key. */
DP_EXPORT uint64_t dp_hash64(const void *p, size_t n);
/* The hash of a feature's value (canonical bytes, above) is
 * dp_feature_hash() in dp_example.h. */


#ifdef __cplusplus
}
#endif
#endif
