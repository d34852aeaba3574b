/* shard.c - libdp's assignment rules: the key hash (published FNV-1a
 * vectors; dp_hash64 and feature hashes against values computed by the
 * independent Python implementation in tests/tfrshard.py), the seeded
 * generator, splits by seed and by hash, contiguous shards. */
#include "dp_example.h"
#include "dp_hash.h"
#include "dp_shard.h"
#include "tap.h"

#include <stdlib.h>

static uint64_t feature_hash(const char *name, int kind, const void *vals, size_t n)
{
	dp_exbuild b = {0};
	dp_example ex = {0};
	dp_err e;
	const uint8_t *out;
	size_t len;
	uint64_t h = 0;
	dp_exbuild_reset(&b);
	if (kind == DP_KIND_INT64)
		dp_exbuild_int64s(&b, name, strlen(name), vals, n);
	else if (kind == DP_KIND_FLOAT)
		dp_exbuild_floats(&b, name, strlen(name), vals, n);
	else {
		const uint8_t *v[1] = {vals};
		size_t l[1] = {strlen(vals)};
		dp_exbuild_bytes(&b, name, strlen(name), v, l, n);
	}
	dp_exbuild_finish(&b, &out, &len);
	if (dp_example_parse(&ex, out, len, &e) == 0) {
		const dp_feature *f = dp_example_get(&ex, name);
		if (f)
			dp_feature_hash(f, &h);
	}
	dp_example_free(&ex);
	dp_exbuild_free(&b);
	return h;
}

int main(void)
{
	/* Published FNV-1a 64 vectors (Fowler/Noll/Vo test suite). */
	is_int(dp_fnv1a64(DP_FNV1A64_INIT, "", 0), 0xcbf29ce484222325ull, "fnv1a64('')");
	is_int(dp_fnv1a64(DP_FNV1A64_INIT, "a", 1), 0xaf63dc4c8601ec8cull, "fnv1a64('a')");
	is_int(dp_fnv1a64(DP_FNV1A64_INIT, "foobar", 6), 0x85944171f73967e8ull, "fnv1a64('foobar')");
	is_int(dp_fnv1a64(dp_fnv1a64(DP_FNV1A64_INIT, "foo", 3), "bar", 3), 0x85944171f73967e8ull,
	       "fnv1a64 streams");

	/* dp_hash64 against tests/tfrshard.py h64 (an independent implementation). */
	is_int(dp_hash64("", 0), 0xf52a15e9a9b5e89bull, "dp_hash64('') = python");
	is_int(dp_hash64("a", 1), 0x02c0bdbf481420f8ull, "dp_hash64('a') = python");
	is_int(dp_hash64("alice", 5), 0xc5d1556d66774a5cull, "dp_hash64('alice') = python");
	is_int(dp_hash64("u0", 2), 0x36c69dda1869ce5full, "dp_hash64('u0') = python");
	is_int(dp_mix64(0), 0, "mix64(0) = 0");

	/* Feature values: canonical bytes, as the Python reference builds them. */
	is_int(feature_hash("user", DP_KIND_BYTES, "alice", 1), dp_hash64("alice", 5),
	       "bytes feature hashes its value");
	int64_t i42 = 42, im[2] = {-1, 7};
	is_int(feature_hash("id", DP_KIND_INT64, &i42, 1), 0xe15f07fef55b9454ull,
	       "int64 [42] = python");
	is_int(feature_hash("id", DP_KIND_INT64, im, 2), 0xd16d19047e0c46beull,
	       "int64 [-1, 7] = python");
	float f0[2] = {0.0f, 1.5f}, fm[2] = {-0.0f, 1.5f};
	is_int(feature_hash("x", DP_KIND_FLOAT, f0, 2), 0x33cd7be5e0576a3full, "float [0, 1.5] = python");
	is_int(feature_hash("x", DP_KIND_FLOAT, fm, 2), 0x33cd7be5e0576a3full, "-0.0 hashes as +0.0");
	int64_t many[300];
	for (int i = 0; i < 300; i++)
		many[i] = i;
	is_int(feature_hash("id", DP_KIND_INT64, many, 300),
	       dp_hash64(many, sizeof many), "a long int64 list hashes its 8-byte values");

	/* Generator: reproducible, streams differ, draws in range. */
	dp_rng a, b, c;
	dp_rng_seed(&a, 7, 1);
	dp_rng_seed(&b, 7, 1);
	dp_rng_seed(&c, 7, 2);
	int same = 1, differ = 0, inrange = 1;
	for (int i = 0; i < 1000; i++) {
		uint64_t x = dp_rng_next(&a), y = dp_rng_next(&b), z = dp_rng_next(&c);
		same &= x == y;
		differ += x != z;
		inrange &= dp_rng_below(&a, 10) < 10;
		dp_rng_below(&b, 10);
	}
	ok(same, "same seed, same draws");
	ok(differ == 1000, "other stream, other draws");
	ok(inrange, "dp_rng_below stays below n");

	/* Splits: parsing. */
	dp_splits s, w;
	dp_err e;
	is_int(dp_splits_parse(&s, "train=0.8,val=0.1,test=0.1", 3, &e), 0, "parse splits");
	is_int(s.n, 3, "three splits");
	is_str(s.name[2], "test", "names kept in order");
	is_int(dp_splits_find(&s, "val"), 1, "find val");
	is_int(dp_splits_find(&s, "nope"), -1, "find a missing split");
	const char *bad[] = {"", "train", "train=", "=0.5", "a=0", "a=-1", "a=x", "a=1,a=2",
			     "a/b=1", "a=1,", "a=nan", "a=1e7"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		is_int(dp_splits_parse(&w, bad[i], 0, &e), DP_EARG, "reject '%s'", bad[i]);
	like(e.msg, "--split", "messages name --split");

	/* By seed: exact per 1000-block; weights normalised; seeds matter. */
	uint64_t cnt[3] = {0}, cnt2[3];
	for (uint64_t p = 0; p < 3000; p++)
		cnt[dp_split_at(&s, p)]++;
	ok(cnt[0] == 2400 && cnt[1] == 300 && cnt[2] == 300, "3000 records: 2400/300/300 exactly");
	dp_splits_parse(&w, "train=8,val=1,test=1", 3, &e);
	int eq = 1;
	for (uint64_t p = 0; p < 5000; p++)
		eq &= dp_split_at(&s, p) == dp_split_at(&w, p);
	ok(eq, "train=8,val=1,test=1 assigns as train=0.8,val=0.1,test=0.1");
	dp_splits_parse(&w, "train=0.8,val=0.1,test=0.1", 4, &e);
	int diff = 0;
	for (uint64_t p = 0; p < 1000; p++)
		diff += dp_split_at(&s, p) != dp_split_at(&w, p);
	ok(diff > 50, "another seed, another draw (%d of 1000 differ)", diff);
	dp_splits_parse(&w, "a=1,b=1,c=1", 0, &e);
	uint64_t c3[3] = {0};
	for (uint64_t p = 0; p < 3000; p++)
		c3[dp_split_at(&w, p)]++;
	ok(c3[0] == 1000 && c3[1] == 1000 && c3[2] == 1000, "thirds: rounding carried across blocks");
	dp_splits_parse(&w, "big=0.9995,tiny=0.0005", 0, &e);
	uint64_t ct[2] = {0};
	for (uint64_t p = 0; p < 10000; p++)
		ct[dp_split_at(&w, p)]++;
	is_int(ct[1], 5, "a 0.05%% split gets 5 of 10000");
	uint64_t n = 2345;
	memset(cnt, 0, sizeof cnt);
	for (uint64_t p = 0; p < n; p++)
		cnt[dp_split_at(&s, p)]++;
	dp_split_counts(&s, n, cnt2);
	ok(cnt[0] == cnt2[0] && cnt[1] == cnt2[1] && cnt[2] == cnt2[2],
	   "dp_split_counts agrees with dp_split_at over a partial block");

	/* By hash: the 53-bit bounds. */
	dp_splits_parse(&w, "a=0.5,b=0.5", 0, &e);
	is_int(dp_split_of_hash(&w, 0), 0, "hash 0 in the first split");
	is_int(dp_split_of_hash(&w, (1ull << 63) - 1), 0, "just below half: first");
	is_int(dp_split_of_hash(&w, 1ull << 63), 1, "half: second");
	is_int(dp_split_of_hash(&w, UINT64_MAX), 1, "top: last");

	/* Contiguous shards. */
	int good = 1;
	for (uint64_t nn = 0; nn < 60; nn++)
		for (uint64_t N = 1; N < 8; N++) {
			uint64_t prev = 0, sizes[8] = {0};
			for (uint64_t j = 0; j < nn; j++) {
				uint64_t k = dp_shard_contiguous(j, nn, N);
				good &= k < N && k >= prev;
				prev = k;
				sizes[k]++;
			}
			for (uint64_t k = 0; k < N; k++) {
				good &= sizes[k] == nn / N + (k < nn % N);
				good &= dp_shard_begin(k + 1, nn, N) - dp_shard_begin(k, nn, N) == sizes[k];
			}
			good &= dp_shard_begin(N, nn, N) == nn;
		}
	ok(good, "contiguous: in order, sizes differ by at most one, longer first, begin agrees");
	return done_testing();
}
