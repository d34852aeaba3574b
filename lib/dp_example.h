/*
 * dp_example.h - tf.train.Example: a zero-copy view and a builder.
 *
 *  - dp_example_parse(): validates the wire format of an Example completely
 *    (tags, wire types, varints, lengths, UTF-8 names, list payloads) and
 *    indexes its features by name without allocating per record or copying
 *    values: the fast path for verifying, training and typed access.  It
 *    follows protobuf's merge rules: a repeated map key or `features` field
 *    takes the last value; a Feature whose oneof is set twice keeps the last
 *    kind; the same list appearing twice concatenates.  Packed and unpacked
 *    float/int64 lists are both accepted.  It accepts what protobuf-c's
 *    parser accepts, but for field numbers 0 and past 2^29-1, length
 *    prefixes of 2^32 or more, and names that are not UTF-8 (the rules are in
 *    lib/records/example.c; tests/fuzz/example.c checks them differentially
 *    against protobuf-c's code generated from lib/records/example.proto,
 *    which only the tests link).
 * The builder writes canonical Examples (packed lists, map entries with key
 * and value, features in the order added), byte for byte what TensorFlow's
 * serializer writes for the same features in the same order.
 */
#ifndef DP_EXAMPLE_H
#define DP_EXAMPLE_H

#include "dp.h"

#ifdef __cplusplus
extern "C" {
#endif

enum dp_kind { DP_KIND_NONE = 0, DP_KIND_BYTES = 1, DP_KIND_FLOAT = 2, DP_KIND_INT64 = 3 };

/* "bytes", "float", "int64", "none" */
DP_EXPORT const char *dp_kind_name(int kind);

/* 1 when s[0..n) is valid UTF-8 (no overlongs, surrogates or code points
 * past U+10FFFF): the rule for feature names. */
DP_EXPORT int dp_utf8_valid(const void *s, size_t n);

typedef struct dp_feature {
	const char *name;    /* UTF-8, not NUL-terminated: use name_len */
	size_t name_len;
	int kind;            /* enum dp_kind; NONE for a Feature with no list set */
	size_t count;        /* number of values */
	const uint8_t *body; /* the map entry's body (inside the record's bytes) */
	size_t body_len;
	size_t seg;          /* offset in body of the first list field of the kept kind */
} dp_feature;

/* Reusable view of one Example: features in wire order (first appearance),
 * duplicates resolved.  Zero-initialise; reuse across records; free once. */
typedef struct dp_example {
	dp_feature *f;
	size_t n, cap;
	int has_features; /* the Example's `features` field is present (even if empty) */
	uint32_t *ht;     /* private: name index past 16 features */
	size_t htcap;
} dp_example;

/* Parse len bytes.  Returns 0, DP_EDATA with the reason in e (no file or
 * record: the caller prefixes them), or DP_ENOMEM.  The view points into
 * buf, which must outlive its use. */
DP_EXPORT int dp_example_parse(dp_example *ex, const void *buf, size_t len, dp_err *e);
/* The feature called name (NUL-terminated), or NULL. */
DP_EXPORT const dp_feature *dp_example_get(const dp_example *ex, const char *name);
DP_EXPORT void dp_example_free(dp_example *ex);

/* Copy up to max values of a float (int64) feature into out; returns the
 * feature's count (which may exceed max).  0 for a feature of another kind. */
DP_EXPORT size_t dp_feature_floats(const dp_feature *f, float *out, size_t max);
DP_EXPORT size_t dp_feature_int64s(const dp_feature *f, int64_t *out, size_t max);
/* Call fn on each value of a bytes feature, in order, until fn returns
 * non-zero (which is returned).  Values point into the record. */
DP_EXPORT int dp_feature_bytes_each(const dp_feature *f, int (*fn)(const uint8_t *p, size_t len, void *ctx),
			  void *ctx);
/* The first value of a bytes feature: 1 with *p, *len set, 0 if none. */
DP_EXPORT int dp_feature_bytes0(const dp_feature *f, const uint8_t **p, size_t *len);

/* ---- Builder ----------------------------------------------------------- */

typedef struct dp_exbuild {
	uint8_t *p; /* encoded map entries, then the finished Example */
	size_t n, cap;
	size_t nfeat;
	int failed;
} dp_exbuild;

/* Start a new Example (keeps the buffer). */
DP_EXPORT void dp_exbuild_reset(dp_exbuild *b);
/* Add a feature.  The name is copied; values are encoded at once.
 * Returns 0 or DP_ENOMEM (sticky until reset). */
DP_EXPORT int dp_exbuild_floats(dp_exbuild *b, const char *name, size_t name_len, const float *v, size_t n);
DP_EXPORT int dp_exbuild_int64s(dp_exbuild *b, const char *name, size_t name_len, const int64_t *v,
		      size_t n);
/* A bytes feature of n values. */
DP_EXPORT int dp_exbuild_bytes(dp_exbuild *b, const char *name, size_t name_len, const uint8_t *const *vals,
		     const size_t *lens, size_t n);
/* A feature whose Feature message has no list set (kind NONE). */
DP_EXPORT int dp_exbuild_none(dp_exbuild *b, const char *name, size_t name_len);
/* The serialized Example, valid until the next call on b. */
DP_EXPORT int dp_exbuild_finish(dp_exbuild *b, const uint8_t **out, size_t *len);
DP_EXPORT void dp_exbuild_free(dp_exbuild *b);

/* The hash of a feature's values: the canonical bytes of dp_hash.h through
 * dp_hash64, the key of tfr-shard --by hash:NAME.  Returns 0 and *h, or
 * DP_ENOMEM. */
DP_EXPORT int dp_feature_hash(const dp_feature *f, uint64_t *h);


#ifdef __cplusplus
}
#endif
#endif
