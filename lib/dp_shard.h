/*
 * dp_shard.h - the rules that put records into splits and shards.
 *
 * Every rule is a pure function of the record's position in the stream,
 * of its key hash (dp_hash.h), or of both and a seed, so any program that
 * links libdp (tfr-shard, s3-pipe, dp-train) assigns a record the same way.
 *
 * Shards, for the j-th record (from 0) of a stream of n cut into N shards:
 *   round-robin   j % N
 *   contiguous    N runs of consecutive records, the first n % N of them
 *                 one record longer (dp_shard_contiguous)
 *   hash          h % N, h the key's dp_hash64
 *
 * Splits (train=0.8,val=0.1,test=0.1) are weighted; weights are normalised
 * by their sum, so train=8,val=1,test=1 is the same split.  Two rules:
 *   by seed       positions are cut into blocks of DP_SPLIT_BLOCK records;
 *                 block b gets floor(end*c[k+1]/W) - floor(end*c[k]/W)
 *                 - (the same at its start) records of split k (c the
 *                 cumulative weights, W their sum), so every prefix of
 *                 whole blocks is split exactly in proportion; within a
 *                 block those labels are put in a random order drawn from
 *                 (seed, b) by a Fisher-Yates shuffle.  A stream that ends
 *                 inside a block takes that block's first labels.
 *   by hash       t = h >> 11 (53 bits); split k is the first whose bound
 *                 floor(c[k+1] * 2^53 / W) is above t.  Records with the
 *                 same key always land in the same split.
 */
#ifndef DP_SHARD_H
#define DP_SHARD_H

#include "dp.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DP_SPLIT_MAX 16
#define DP_SPLIT_NAME 64
#define DP_SPLIT_BLOCK 1000

typedef struct dp_splits {
	int n;                          /* number of splits */
	char name[DP_SPLIT_MAX][DP_SPLIT_NAME];
	uint64_t cum[DP_SPLIT_MAX + 1]; /* cumulative weights in 1e-9 units; cum[n] = W */
	uint64_t seed;
	uint64_t block;                 /* the block whose labels are below */
	int have_block;
	uint8_t label[DP_SPLIT_BLOCK];
} dp_splits;

/* Parse "name=weight,name=weight..." (names of letters, digits, '_', '-',
 * '.'; weights positive decimals up to 1e6, 9 decimal places kept).
 * seed is used by dp_split_at.  Returns 0 or DP_EARG with a message. */
DP_EXPORT int dp_splits_parse(dp_splits *s, const char *spec, uint64_t seed, dp_err *e);
/* Index of the split called name, or -1. */
DP_EXPORT int dp_splits_find(const dp_splits *s, const char *name);
/* The split of the record at position pos (from 0), by seed. */
DP_EXPORT int dp_split_at(dp_splits *s, uint64_t pos);
/* The split of a record whose key hash is h. */
DP_EXPORT int dp_split_of_hash(const dp_splits *s, uint64_t h);
/* counts[k]: records of split k among positions 0..n-1, by seed. */
DP_EXPORT void dp_split_counts(dp_splits *s, uint64_t n, uint64_t *counts);

/* The fold (0 to k-1, k at most DP_SPLIT_MAX) of the record at position
 * pos, k-fold cross-validation by seed: positions are cut into blocks of
 * k, and block b's k positions get the folds 0..k-1 in a random order
 * drawn from (seed, b) by a Fisher-Yates shuffle; so any n records fall
 * into folds of n/k records, rounded down or up, as scikit-learn's KFold
 * makes them. */
DP_EXPORT int dp_fold_at(uint64_t seed, uint64_t pos, int k);

/* The contiguous shard of the j-th of n records, in nshards shards. */
DP_EXPORT uint64_t dp_shard_contiguous(uint64_t j, uint64_t n, uint64_t nshards);
/* The first record (position) of contiguous shard k; k = nshards gives n. */
DP_EXPORT uint64_t dp_shard_begin(uint64_t k, uint64_t n, uint64_t nshards);


#ifdef __cplusplus
}
#endif
#endif
