/*
 * feature_hash.c - the hash of a tf.train.Example feature's values, the
 * key of tfr-shard --by hash:NAME (canonical bytes: see dp_hash.h).
 */
#include "dp_example.h"
#include "dp_hash.h"
#include "dp_record.h" /* little-endian hosts only */

#include <stdlib.h>

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
