/*
 * example.c - libFuzzer target: the zero-copy Example view against
 * protobuf-c's generated parser (differential).
 *
 * Both must accept or both reject every input; when both accept, they must
 * see the same features with the same kinds and values, protobuf-c's
 * repeated map entries resolved as protobuf does (the last entry for a key
 * wins) and `features` present in one exactly when in the other.
 *
 * Where the two legitimately differ, the rule the view follows is applied
 * to protobuf-c's result before comparing (documented in lib/records/example.c):
 *  - feature names must be valid UTF-8 (proto3 `string`; protobuf-c does
 *    not check, Google's parsers do);
 *  - protobuf-c keeps map keys as C strings, so a name with a NUL byte
 *    cannot be compared: such inputs are checked for agreement on
 *    acceptance only;
 *  - the view rejects field number 0 and length prefixes of 2^32 or more,
 *    which protobuf-c takes as an unknown field or wraps: a rejection for
 *    those two reasons is not compared (nor given to protobuf-c);
 *  - a list kind appearing again in a Feature (or across the value fields
 *    of one map entry) concatenates, as in protobuf; protobuf-c keeps only
 *    the last list: kinds are compared, counts and values are not;
 *  - protobuf-c 1.4.1 rejects a map entry whose first two value fields
 *    both have no list set (its merge of two Features with no oneof case
 *    fails); protobuf's parsers and the view accept it.
 * The builder is checked too: re-encoding what the view sees and parsing
 * that again must give the same features.
 */
#include "dp_example.h"
#include "example.pb-c.h" /* protobuf-c: the reference parser */
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static dp_example ex, ex2;
static dp_exbuild eb;

struct bvec {
	const uint8_t **p;
	size_t *l, n;
};

static int collect(const uint8_t *p, size_t len, void *ctx)
{
	struct bvec *v = ctx;
	v->p[v->n] = p;
	v->l[v->n++] = len;
	return 0;
}

/* The last protobuf-c entry called name, or NULL. */
static Tensorflow__Features__FeatureEntry *last_entry(Tensorflow__Features *fs, const char *name,
						       size_t len)
{
	Tensorflow__Features__FeatureEntry *hit = NULL;
	for (size_t i = 0; i < fs->n_feature; i++) {
		const char *k = fs->feature[i]->key;
		if (strlen(k) == len && memcmp(k, name, len) == 0)
			hit = fs->feature[i];
	}
	return hit;
}

/* Compare feature f of the view with protobuf-c's Feature v (NULL: unset);
 * kinds only when a list kind repeats (see above). */
static void same_feature(const dp_feature *f, const Tensorflow__Feature *v, int kinds_only)
{
	int kind = v ? (int)v->kind_case : 0;
	CHECK(f->kind == kind, "kind %d vs %d", f->kind, kind);
	if (kinds_only)
		return;
	if (kind == DP_KIND_FLOAT) {
		CHECK(f->count == v->float_list->n_value, "float count");
		float *a = malloc(f->count * 4 + 4);
		CHECK(dp_feature_floats(f, a, f->count) == f->count, "float copy count");
		CHECK(!f->count || memcmp(a, v->float_list->value, f->count * 4) == 0, "float values");
		free(a);
	} else if (kind == DP_KIND_INT64) {
		CHECK(f->count == v->int64_list->n_value, "int64 count %zu vs %zu", f->count,
		      v->int64_list->n_value);
		int64_t *a = malloc(f->count * 8 + 8);
		CHECK(dp_feature_int64s(f, a, f->count) == f->count, "int64 copy count");
		CHECK(!f->count || memcmp(a, v->int64_list->value, f->count * 8) == 0, "int64 values");
		free(a);
	} else if (kind == DP_KIND_BYTES) {
		CHECK(f->count == v->bytes_list->n_value, "bytes count");
		struct bvec b = {malloc((f->count + 1) * sizeof *b.p), malloc((f->count + 1) * sizeof *b.l), 0};
		dp_feature_bytes_each(f, collect, &b);
		CHECK(b.n == f->count, "bytes each count");
		for (size_t i = 0; i < b.n; i++)
			CHECK(b.l[i] == v->bytes_list->value[i].len &&
			      (!b.l[i] || !memcmp(b.p[i], v->bytes_list->value[i].data, b.l[i])),
			      "bytes value %zu", i);
		free(b.p);
		free(b.l);
	}
}

/* Re-encode the view with the builder; the result must parse to the same. */
static void rebuild(void)
{
	dp_exbuild_reset(&eb);
	for (size_t i = 0; i < ex.n; i++) {
		const dp_feature *f = &ex.f[i];
		if (f->kind == DP_KIND_FLOAT) {
			float *a = malloc(f->count * 4 + 4);
			dp_feature_floats(f, a, f->count);
			dp_exbuild_floats(&eb, f->name, f->name_len, a, f->count);
			free(a);
		} else if (f->kind == DP_KIND_INT64) {
			int64_t *a = malloc(f->count * 8 + 8);
			dp_feature_int64s(f, a, f->count);
			dp_exbuild_int64s(&eb, f->name, f->name_len, a, f->count);
			free(a);
		} else if (f->kind == DP_KIND_BYTES) {
			struct bvec b = {malloc((f->count + 1) * sizeof *b.p),
					 malloc((f->count + 1) * sizeof *b.l), 0};
			dp_feature_bytes_each(f, collect, &b);
			dp_exbuild_bytes(&eb, f->name, f->name_len, b.p, b.l, b.n);
			free(b.p);
			free(b.l);
		} else {
			dp_exbuild_none(&eb, f->name, f->name_len);
		}
	}
	const uint8_t *p;
	size_t n;
	CHECK(dp_exbuild_finish(&eb, &p, &n) == 0, "builder failed");
	CHECK(dp_example_parse(&ex2, p, n, NULL) == 0, "rebuilt Example does not parse");
	CHECK(ex2.n == ex.n, "rebuilt feature count");
	for (size_t i = 0; i < ex.n; i++) {
		CHECK(ex2.f[i].name_len == ex.f[i].name_len &&
		      memcmp(ex2.f[i].name, ex.f[i].name, ex.f[i].name_len) == 0, "rebuilt name");
		CHECK(ex2.f[i].kind == ex.f[i].kind && ex2.f[i].count == ex.f[i].count, "rebuilt kind");
	}
}

/* ---- A minimal wire walker (bounds-checked, lenient) ------------------ */

static int var(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	*v = 0;
	for (int s = 0; *p < end; s += 7) {
		uint8_t b = *(*p)++;
		if (s < 64)
			*v |= (uint64_t)(b & 0x7f) << s;
		if (!(b & 0x80))
			return 1;
	}
	return 0;
}

/* Next field in [*p, end): number, wire type, payload of type 2; 0 at the
 * end or on anything malformed. */
static int next(const uint8_t **p, const uint8_t *end, uint32_t *num, int *wt, const uint8_t **d,
		size_t *len)
{
	uint64_t tag, v;
	if (*p >= end || !var(p, end, &tag))
		return 0;
	*num = (uint32_t)(tag >> 3);
	*wt = (int)(tag & 7);
	switch (*wt) {
	case 0: return var(p, end, &v);
	case 1: if (end - *p < 8) return 0; *p += 8; return 1;
	case 5: if (end - *p < 4) return 0; *p += 4; return 1;
	case 2:
		if (!var(p, end, &v) || v > (uint64_t)(end - *p))
			return 0;
		*len = (size_t)v;
		*d = *p;
		*p += *len;
		return 1;
	}
	return 0;
}

/* Next length-delimited field numbered want in [*p, end), the others
 * skipped: its payload d[0..len); 0 at the end or on anything malformed. */
static int next_len(const uint8_t **p, const uint8_t *end, uint32_t want, const uint8_t **d,
		    size_t *len)
{
	uint32_t num;
	int wt;
	while (next(p, end, &num, &wt, d, len))
		if (num == want && wt == 2)
			return 1;
	return 0;
}

/* fn(ctx, entry, len) for each map entry of the Example p[0..n): field 1
 * (Features) of the Example, field 1 (a map entry) of that, on the wire. */
static void each_entry(const uint8_t *p, size_t n, void (*fn)(void *, const uint8_t *, size_t),
		       void *ctx)
{
	const uint8_t *end = p + n, *d, *d2;
	size_t l, l2;
	while (next_len(&p, end, 1, &d, &l)) {
		const uint8_t *q = d, *qe = d + l;
		while (next_len(&q, qe, 1, &d2, &l2))
			fn(ctx, d2, l2);
	}
}

typedef struct keyscan {
	int has_nul, bad_utf8; /* some feature name holds a NUL byte, is not UTF-8 */
	int runs, empty2;      /* see same_kind_runs */
} keyscan;

static void entry_key(void *ctx, const uint8_t *r, size_t n)
{
	keyscan *k = ctx;
	const uint8_t *re = r + n, *d3;
	size_t l3;
	while (next_len(&r, re, 1, &d3, &l3)) {
		if (memchr(d3, 0, l3))
			k->has_nul = 1;
		if (!dp_utf8_valid(d3, l3))
			k->bad_utf8 = 1;
	}
}

/* Whether some feature name holds a NUL byte, or is not UTF-8. */
static void scan_keys(const uint8_t *p, size_t n, int *has_nul, int *bad_utf8)
{
	keyscan k = {0};
	each_entry(p, n, entry_key, &k);
	*has_nul = k.has_nul;
	*bad_utf8 = k.bad_utf8;
}

static void entry_runs(void *ctx, const uint8_t *r, size_t n)
{
	keyscan *k = ctx;
	const uint8_t *re = r + n, *d3;
	size_t l3;
	uint32_t num;
	int wt;
	uint32_t last = 0; /* a run of one list kind */
	int run = 0, values = 0;
	while (next_len(&r, re, 2, &d3, &l3)) {
		const uint8_t *s = d3, *se = d3 + l3;
		const uint8_t *d4;
		size_t l4;
		int lists = 0;
		while (next(&s, se, &num, &wt, &d4, &l4)) {
			if (num < 1 || num > 3)
				continue;
			run = num == last ? run + 1 : 1;
			last = num;
			lists++;
		}
		if (++values >= 2 && !last && !lists)
			k->empty2 = 1;
	}
	if (run > 1)
		k->runs = 1;
}

/* 1 when some map entry ends with a run of two or more lists of one kind;
 * *empty2 set when some entry's first two value fields have no list. */
static int same_kind_runs(const uint8_t *p, size_t n, int *empty2)
{
	keyscan k = {0};
	each_entry(p, n, entry_runs, &k);
	if (k.empty2)
		*empty2 = 1;
	return k.runs;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	dp_err e;
	int mine = dp_example_parse(&ex, data, size, &e);
	if (mine < 0 && (strstr(e.msg, "invalid field number") ||
			 strstr(e.msg, "length prefix out of range")))
		return 0; /* documented: stricter than protobuf-c */
	Tensorflow__Example *m = tensorflow__example__unpack(NULL, size, data);
	int theirs = m != NULL;
	int has_nul = 0, bad_utf8 = 0;
	if (m) /* protobuf-c's keys are C strings: look at the wire */
		scan_keys(data, size, &has_nul, &bad_utf8);
	if (bad_utf8)
		theirs = 0; /* the view's rule: names are UTF-8 */
	int empty2 = 0, kinds_only = mine == 0 ? same_kind_runs(data, size, &empty2) : 0;
	if (mine == 0 && !m && empty2) /* protobuf-c's merge bug, see above */
		return 0;
	if (!has_nul)
		CHECK((mine == 0) == theirs, "view %s (%s), protobuf-c %s", mine == 0 ? "accepts" : "rejects",
		      mine == 0 ? "" : e.msg, m ? (bad_utf8 ? "accepts, bad UTF-8" : "accepts") : "rejects");
	if (mine == 0 && m && !has_nul && !bad_utf8) {
		CHECK(ex.has_features == (m->features != NULL), "features presence");
		size_t distinct = 0;
		if (m->features) {
			for (size_t i = 0; i < m->features->n_feature; i++) {
				const char *k = m->features->feature[i]->key;
				if (last_entry(m->features, k, strlen(k)) == m->features->feature[i])
					distinct++;
			}
		}
		CHECK(ex.n == distinct, "feature count %zu vs %zu", ex.n, distinct);
		for (size_t i = 0; i < ex.n; i++) {
			Tensorflow__Features__FeatureEntry *en =
				last_entry(m->features, ex.f[i].name, ex.f[i].name_len);
			CHECK(en, "feature %zu missing in protobuf-c", i);
			same_feature(&ex.f[i], en->value, kinds_only);
			CHECK(dp_example_get(&ex, en->key) == &ex.f[i], "get by name");
		}
	}
	if (mine == 0)
		rebuild();
	if (m)
		tensorflow__example__free_unpacked(m, NULL);
	return 0;
}
