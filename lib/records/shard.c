/*
 * shard.c - split and shard assignment rules (see dp_shard.h).
 *
 * All arithmetic is on integers (weights are fixed point, 1e-9 units), so
 * the assignment does not depend on the machine's floating point.
 */
#include "dp_shard.h"
#include "dp_hash.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define WEIGHT_MAX 1e6
#define SPLIT_STREAM 0x73706c6974000000ull /* "split" */
#define FOLD_STREAM 0x666f6c6400000000ull  /* "fold" */

static int name_ok(const char *p, size_t n)
{
	if (n == 0 || n >= DP_SPLIT_NAME)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)p[i]) && p[i] != '_' && p[i] != '-' && p[i] != '.')
			return 0;
	return 1;
}

int dp_splits_parse(dp_splits *s, const char *spec, uint64_t seed, dp_err *e)
{
	memset(s, 0, sizeof *s);
	s->seed = seed;
	const char *p = spec;
	for (;;) {
		const char *eq = strchr(p, '=');
		const char *comma = strchr(p, ',');
		if (!comma)
			comma = p + strlen(p);
		if (!eq || eq > comma)
			return dp_seterr(e, DP_EARG, "--split: '%.*s': expected NAME=RATIO",
					 (int)(comma - p), p);
		if (!name_ok(p, (size_t)(eq - p)))
			return dp_seterr(e, DP_EARG,
					 "--split: '%.*s': a split name is 1 to %d letters, digits, '_', '-' or '.'",
					 (int)(eq - p), p, DP_SPLIT_NAME - 1);
		if (s->n == DP_SPLIT_MAX)
			return dp_seterr(e, DP_EARG, "--split: more than %d splits", DP_SPLIT_MAX);
		char num[64];
		size_t nl = (size_t)(comma - eq - 1);
		if (nl == 0 || nl >= sizeof num)
			return dp_seterr(e, DP_EARG, "--split: '%.*s': bad ratio", (int)(comma - p), p);
		memcpy(num, eq + 1, nl);
		num[nl] = 0;
		char *end;
		errno = 0;
		double v = strtod(num, &end);
		if (*end || errno || !(v > 0) || v > WEIGHT_MAX)
			return dp_seterr(e, DP_EARG,
					 "--split: '%.*s': the ratio must be a number above 0 (and at most 1e6)",
					 (int)(comma - p), p);
		uint64_t w = (uint64_t)llround(v * 1e9);
		if (w == 0)
			return dp_seterr(e, DP_EARG, "--split: '%.*s': ratio too small",
					 (int)(comma - p), p);
		memcpy(s->name[s->n], p, (size_t)(eq - p));
		s->name[s->n][eq - p] = 0;
		for (int k = 0; k < s->n; k++)
			if (!strcmp(s->name[k], s->name[s->n]))
				return dp_seterr(e, DP_EARG, "--split: '%s' given twice", s->name[k]);
		s->cum[s->n + 1] = s->cum[s->n] + w;
		s->n++;
		if (!*comma)
			break;
		p = comma + 1;
	}
	return DP_OK;
}

int dp_splits_find(const dp_splits *s, const char *name)
{
	for (int k = 0; k < s->n; k++)
		if (!strcmp(s->name[k], name))
			return k;
	return -1;
}

/* Records of split k among the first m positions, by exact proportion. */
static uint64_t ideal(const dp_splits *s, int k, uint64_t m)
{
	unsigned __int128 W = s->cum[s->n];
	uint64_t hi = (uint64_t)((unsigned __int128)m * s->cum[k + 1] / W);
	uint64_t lo = (uint64_t)((unsigned __int128)m * s->cum[k] / W);
	return hi - lo;
}

static void draw_block(dp_splits *s, uint64_t b)
{
	uint64_t start = b * DP_SPLIT_BLOCK, end = start + DP_SPLIT_BLOCK;
	size_t i = 0;
	for (int k = 0; k < s->n; k++) {
		uint64_t c = ideal(s, k, end) - ideal(s, k, start);
		for (uint64_t j = 0; j < c; j++)
			s->label[i++] = (uint8_t)k;
	}
	dp_rng r;
	dp_rng_seed(&r, s->seed, SPLIT_STREAM + b);
	for (size_t j = DP_SPLIT_BLOCK - 1; j > 0; j--) {
		size_t t = (size_t)dp_rng_below(&r, j + 1);
		uint8_t x = s->label[j];
		s->label[j] = s->label[t];
		s->label[t] = x;
	}
	s->block = b;
	s->have_block = 1;
}

int dp_split_at(dp_splits *s, uint64_t pos)
{
	uint64_t b = pos / DP_SPLIT_BLOCK;
	if (!s->have_block || s->block != b)
		draw_block(s, b);
	return s->label[pos % DP_SPLIT_BLOCK];
}

int dp_split_of_hash(const dp_splits *s, uint64_t h)
{
	uint64_t t = h >> 11;
	unsigned __int128 W = s->cum[s->n];
	for (int k = 0; k < s->n - 1; k++) {
		uint64_t bound = (uint64_t)(((unsigned __int128)s->cum[k + 1] << 53) / W);
		if (t < bound)
			return k;
	}
	return s->n - 1;
}

void dp_split_counts(dp_splits *s, uint64_t n, uint64_t *counts)
{
	uint64_t full = n / DP_SPLIT_BLOCK * DP_SPLIT_BLOCK;
	for (int k = 0; k < s->n; k++)
		counts[k] = ideal(s, k, full);
	for (uint64_t p = full; p < n; p++)
		counts[dp_split_at(s, p)]++;
}

int dp_fold_at(uint64_t seed, uint64_t pos, int k)
{
	uint8_t label[DP_SPLIT_MAX];
	dp_rng r;
	dp_rng_seed(&r, seed, FOLD_STREAM + pos / (uint64_t)k);
	for (int i = 0; i < k; i++)
		label[i] = (uint8_t)i;
	for (int j = k - 1; j > 0; j--) {
		int t = (int)dp_rng_below(&r, (uint64_t)j + 1);
		uint8_t x = label[j];
		label[j] = label[t];
		label[t] = x;
	}
	return label[pos % (uint64_t)k];
}

uint64_t dp_shard_contiguous(uint64_t j, uint64_t n, uint64_t nshards)
{
	uint64_t q = n / nshards, r = n % nshards;
	uint64_t big = r * (q + 1); /* records in the longer shards */
	if (j < big)
		return j / (q + 1);
	return r + (j - big) / q;
}

uint64_t dp_shard_begin(uint64_t k, uint64_t n, uint64_t nshards)
{
	uint64_t q = n / nshards, r = n % nshards;
	return k * q + (k < r ? k : r);
}
