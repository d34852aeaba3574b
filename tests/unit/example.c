/* example.c - the Example builder and zero-copy view, checked against
 * protobuf-c's generated parser and against hand-assembled wire bytes
 * (unpacked lists, repeated keys, merged oneofs, malformed messages). */
#include "dp_example.h"
#include "example.pb-c.h" /* protobuf-c: the reference parser */
#include "tap.h"

#include <stdlib.h>

static const dp_feature *get(dp_example *ex, const uint8_t *p, size_t n, const char *name)
{
	dp_err e;
	if (dp_example_parse(ex, p, n, &e) < 0) {
		printf("# parse: %s\n", e.msg);
		return NULL;
	}
	return dp_example_get(ex, name);
}

int main(void)
{
	dp_exbuild b = {0};
	dp_example ex = {0};
	dp_err e;
	const uint8_t *p;
	size_t n;

	float fv[] = {0.5f, -1.25f, 3e9f};
	int64_t iv[] = {0, 1, -1, 300, INT64_MAX, INT64_MIN};
	const uint8_t *bv[] = {(const uint8_t *)"abc", (const uint8_t *)""};
	size_t bl[] = {3, 0};
	dp_exbuild_reset(&b);
	dp_exbuild_floats(&b, "x", 1, fv, 3);
	dp_exbuild_int64s(&b, "label", 5, iv, 6);
	dp_exbuild_bytes(&b, "raw", 3, bv, bl, 2);
	dp_exbuild_floats(&b, "empty", 5, NULL, 0);
	dp_exbuild_none(&b, "nothing", 7);
	is_int(dp_exbuild_finish(&b, &p, &n), 0, "builder finishes");

	is_int(dp_example_parse(&ex, p, n, &e), 0, "view parses the built Example");
	is_int(ex.n, 5, "five features");
	ok(ex.n == 5 && ex.f[0].name_len == 1 && ex.f[4].name_len == 7, "features in the order added");
	const dp_feature *f = dp_example_get(&ex, "x");
	float fo[3] = {0};
	ok(f && f->kind == DP_KIND_FLOAT && f->count == 3, "x: float, 3 values");
	ok(f && dp_feature_floats(f, fo, 3) == 3 && memcmp(fo, fv, sizeof fv) == 0, "x: values");
	f = dp_example_get(&ex, "label");
	int64_t io[6] = {0};
	ok(f && f->kind == DP_KIND_INT64 && dp_feature_int64s(f, io, 6) == 6 &&
	   memcmp(io, iv, sizeof iv) == 0, "label: int64 values incl. negatives and extremes");
	f = dp_example_get(&ex, "raw");
	const uint8_t *bp;
	size_t bn;
	ok(f && f->count == 2 && dp_feature_bytes0(f, &bp, &bn) && bn == 3 && !memcmp(bp, "abc", 3),
	   "raw: bytes values");
	f = dp_example_get(&ex, "empty");
	ok(f && f->kind == DP_KIND_FLOAT && f->count == 0, "empty float list keeps its kind");
	f = dp_example_get(&ex, "nothing");
	ok(f && f->kind == DP_KIND_NONE, "a Feature with no list");
	ok(dp_example_get(&ex, "missing") == NULL, "missing feature is NULL");
	is_int(dp_feature_floats(dp_example_get(&ex, "label"), fo, 3), 0, "kind mismatch gives 0");

	/* protobuf-c agrees */
	Tensorflow__Example *m = tensorflow__example__unpack(NULL, n, p);
	ok(m && m->features && m->features->n_feature == 5, "protobuf-c parses the built bytes");
	if (m) {
		Tensorflow__Feature *x = m->features->feature[0]->value;
		ok(x->kind_case == TENSORFLOW__FEATURE__KIND_FLOAT_LIST && x->float_list->n_value == 3 &&
		   x->float_list->value[2] == 3e9f, "protobuf-c sees x");
		Tensorflow__Feature *l = m->features->feature[1]->value;
		ok(l->kind_case == TENSORFLOW__FEATURE__KIND_INT64_LIST && l->int64_list->n_value == 6 &&
		   l->int64_list->value[5] == INT64_MIN, "protobuf-c sees label");
		/* protobuf-c's packer agrees byte for byte where both are canonical */
		size_t pn = tensorflow__example__get_packed_size(m);
		uint8_t *pb = malloc(pn);
		tensorflow__example__pack(m, pb);
		ok(pn == n && memcmp(pb, p, n) == 0, "protobuf-c packs the same bytes");
		free(pb);
		tensorflow__example__free_unpacked(m, NULL);
	}

	/* Hand-assembled: unpacked floats, a repeated key (last wins), a
	 * Feature whose oneof changes (last kind wins) and merges. */
	static const uint8_t unpacked[] = {
		0x0a, 0x0f,                         /* Example.features, 15 bytes */
		0x0a, 0x0d,                         /* entry, 13 bytes */
		0x0a, 0x01, 'f',                    /* key "f" */
		0x12, 0x08,                         /* Feature, 8 bytes */
		0x12, 0x06,                         /* FloatList, 6 bytes... */
		0x0d, 0x00, 0x00, 0x80, 0x3f,       /* value (fixed32) 1.0 */
		0x00};
	/* fix the FloatList length to 5 and the sizes around it */
	uint8_t u[32];
	memcpy(u, unpacked, sizeof unpacked);
	u[1] = 0x0e; u[3] = 0x0c; u[8] = 0x07; u[10] = 0x05;
	f = get(&ex, u, 16, "f");
	ok(f && f->kind == DP_KIND_FLOAT && f->count == 1 && dp_feature_floats(f, fo, 1) == 1 &&
	   fo[0] == 1.0f, "unpacked float list");

	{
		static const uint8_t w[] = {
			0x0a, 0x16,
			0x0a, 0x09, 0x0a, 0x01, 'k', 0x12, 0x04, 0x1a, 0x02, 0x08, 0x05,
			0x0a, 0x09, 0x0a, 0x01, 'k', 0x12, 0x04, 0x1a, 0x02, 0x08, 0x07};
		f = get(&ex, w, sizeof w, "k");
		int64_t v = 0;
		ok(f && ex.n == 1 && f->count == 1 && dp_feature_int64s(f, &v, 1) == 1 && v == 7,
		   "repeated key: last entry wins, one feature");
	}
	{
		/* Feature { int64_list{5}, float_list{}, int64_list{6}, int64_list{7} } */
		static const uint8_t w[] = {
			0x0a, 0x15, 0x0a, 0x13, 0x0a, 0x01, 'k', 0x12, 0x0e,
			0x1a, 0x02, 0x08, 0x05, 0x12, 0x00, 0x1a, 0x02, 0x08, 0x06, 0x1a, 0x02, 0x08, 0x07};
		f = get(&ex, w, sizeof w, "k");
		int64_t v[4] = {0};
		ok(f && f->count == 2 && dp_feature_int64s(f, v, 4) == 2 && v[0] == 6 && v[1] == 7,
		   "oneof switched: last kind kept, its repeats merged");
	}

	/* malformed */
	static const struct {
		const char *what;
		uint8_t b[16];
		size_t n;
	} bad[] = {
		{"truncated length", {0x0a, 0x05, 0x0a}, 3},
		{"overlong varint", {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, 12},
		{"field number 0", {0x02, 0x00}, 2},
		{"wire type 7", {0x0f}, 1},
		{"group", {0x0b, 0x0c}, 2},
		{"features as varint", {0x08, 0x01}, 2},
		{"packed floats of 3 bytes", {0x0a, 0x0a, 0x0a, 0x08, 0x12, 0x06, 0x12, 0x04, 0x0a, 0x02, 0, 0}, 12},
		{"bad UTF-8 name", {0x0a, 0x06, 0x0a, 0x04, 0x0a, 0x02, 0xc3, 0x28}, 8},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int rc = dp_example_parse(&ex, bad[i].b, bad[i].n, &e);
		ok(rc == DP_EDATA, "malformed: %s (%s)", bad[i].what, rc ? e.msg : "accepted");
	}
	/* the rules shared with protobuf-c, and the documented stricter ones */
	static const struct {
		const char *what, *why;
		uint8_t b[16];
		size_t n;
	} rules[] = {
		{"tag of 6 bytes", "tag", {0x8a, 0x80, 0x80, 0x80, 0x80, 0x00, 0x00}, 7},
		{"field number 2^29", "invalid field number", {0x80, 0x80, 0x80, 0x80, 0x10, 0x00}, 6},
		{"length of 6 bytes", "length", {0x0a, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, 7},
		{"length 2^32", "length prefix out of range", {0x0a, 0x80, 0x80, 0x80, 0x80, 0x10}, 6},
		{"bad UTF-8 in a key given twice", "UTF-8",
		 {0x0a, 0x0a, 0x0a, 0x08, 0x0a, 0x01, 0xff, 0x0a, 0x01, 'k', 0x12, 0x00}, 12},
		{"packed int64 with an unterminated varint", "varint",
		 {0x0a, 0x0e, 0x0a, 0x0c, 0x12, 0x0a, 0x1a, 0x08, 0x0a, 0x06, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80}, 16},
	};
	for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
		int rc = dp_example_parse(&ex, rules[i].b, rules[i].n, &e);
		ok(rc == DP_EDATA && strstr(e.msg, rules[i].why), "rule: %s rejected (%s)", rules[i].what,
		   rc ? e.msg : "accepted");
	}
	{ /* an overlong but valid 5-byte tag is field 1 */
		static const uint8_t w[] = {0x8a, 0x80, 0x80, 0x80, 0x00, 0x00};
		ok(dp_example_parse(&ex, w, sizeof w, &e) == 0 && ex.has_features,
		   "a 5-byte tag for field 1 is accepted");
	}
	{ /* 40 features, then the first ten again: the hash index keeps order */
		dp_exbuild_reset(&b);
		char nm[16];
		for (int i = 0; i < 50; i++) {
			int64_t v = i;
			snprintf(nm, sizeof nm, "f%02d", i % 40);
			dp_exbuild_int64s(&b, nm, 3, &v, 1);
		}
		dp_exbuild_finish(&b, &p, &n);
		int fine = dp_example_parse(&ex, p, n, &e) == 0 && ex.n == 40;
		for (int i = 0; fine && i < 40; i++) {
			int64_t v = -1;
			snprintf(nm, sizeof nm, "f%02d", i);
			const dp_feature *g = dp_example_get(&ex, nm);
			fine = g == &ex.f[i] && dp_feature_int64s(g, &v, 1) == 1 && v == (i < 10 ? i + 40 : i);
		}
		ok(fine, "50 entries, 40 names: first positions, last values, found by name");
		ok(dp_example_get(&ex, "f40") == NULL && dp_example_get(&ex, "") == NULL,
		   "... and no others");
	}
	is_int(dp_example_parse(&ex, "", 0, &e), 0, "empty message is an empty Example");
	is_int(ex.n, 0, "... with no features");
	/* an unknown field is skipped */
	static const uint8_t unk[] = {0x10, 0x05, 0x0a, 0x00};
	is_int(dp_example_parse(&ex, unk, sizeof unk, &e), 0, "unknown field skipped");

	dp_exbuild_reset(&b);
	dp_exbuild_finish(&b, &p, &n);
	ok(n == 2 && p[0] == 0x0a && p[1] == 0x00, "no features: an empty Features (0a 00)");

	dp_example_free(&ex);
	dp_exbuild_free(&b);
	return done_testing();
}
