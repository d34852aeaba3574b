/* encode.c - dp_encode.h: Examples as JSON in both forms (floats, escaping,
 * base64), JSON back to Examples (round trips byte for byte, every error),
 * and the CSV and IDX encoders on memory (quoting quirks, types, header and
 * truncation errors with their line, item and byte offset). */
#include "dp_encode.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>

/* The JSON line of a serialized Example, in a static buffer. */
static const char *to_json(const uint8_t *p, size_t n, int form)
{
	static dp_buf b = DP_BUF_INIT;
	dp_example ex = {0};
	dp_err e;
	dp_buf_reset(&b);
	if (dp_example_parse(&ex, p, n, &e) < 0 || dp_example_json(&b, &ex, form) < 0)
		return "(failed)";
	dp_example_free(&ex);
	return b.p;
}

/* The Example of one JSON line, copied into out (a dp_buf): 0, or the
 * parser's status with its message in e. */
static int from_json(dp_exjson *j, const char *s, int form, dp_buf *out, dp_err *e)
{
	const uint8_t *p;
	size_t n;
	int rc = dp_exjson_parse(j, s, strlen(s), form, &p, &n, e);
	dp_buf_reset(out);
	if (rc == 0)
		dp_buf_add(out, p, n);
	return rc;
}

static void test_to_json(void)
{
	dp_exbuild b = {0};
	const uint8_t *p;
	size_t n;
	float fv[] = {0.1f, 1.0f / 3, 16777216.0f, 1e16f, 1.17549435e-38f, 1.4e-45f, -2.5e-6f,
		      65504.0f, 3.4028235e38f, -INFINITY, NAN, -0.0f};
	int64_t iv[] = {0, -1, INT64_MAX, INT64_MIN};
	const uint8_t *bv[] = {(const uint8_t *)"", (const uint8_t *)"a", (const uint8_t *)"ab",
			       (const uint8_t *)"abc", (const uint8_t *)"\xff\x00\x80"};
	size_t bl[] = {0, 1, 2, 3, 3};
	dp_exbuild_reset(&b);
	dp_exbuild_floats(&b, "x", 1, fv, 12);
	dp_exbuild_int64s(&b, "n", 1, iv, 4);
	dp_exbuild_bytes(&b, "b", 1, bv, bl, 5);
	dp_exbuild_floats(&b, "e", 1, NULL, 0);
	dp_exbuild_none(&b, "z", 1);
	dp_exbuild_finish(&b, &p, &n);
	is_str(to_json(p, n, DP_JSON_COMPACT),
	       "{\"x\":{\"float\":[0.1,0.33333334,16777216.0,1e+16,1.1754944e-38,1e-45,-2.5e-06,"
	       "65504.0,3.4028235e+38,\"-Infinity\",\"NaN\",-0.0]},"
	       "\"n\":{\"int64\":[0,-1,9223372036854775807,-9223372036854775808]},"
	       "\"b\":{\"bytes\":[\"\",\"YQ==\",\"YWI=\",\"YWJj\",\"/wCA\"]},"
	       "\"e\":{\"float\":[]},\"z\":{}}\n",
	       "compact: shortest floats as Python prints them, int64 as numbers, base64 padding");
	is_str(to_json(p, n, DP_JSON_PROTO),
	       "{\"features\": {\"feature\": {\"x\": {\"floatList\": {\"value\": [0.1, 0.33333334, "
	       "16777216.0, 1e+16, 1.1754944e-38, 1.4013e-45, -2.5e-06, 65504.0, 3.4028235e+38, "
	       "\"-Infinity\", \"NaN\", -0.0]}}, \"n\": {\"int64List\": {\"value\": [\"0\", \"-1\", "
	       "\"9223372036854775807\", \"-9223372036854775808\"]}}, \"b\": {\"bytesList\": "
	       "{\"value\": [\"\", \"YQ==\", \"YWI=\", \"YWJj\", \"/wCA\"]}}, \"e\": {\"floatList\": "
	       "{}}, \"z\": {}}}}\n",
	       "proto: json_format's spacing, int64 as strings, subnormals from 6 digits, empty lists left out");

	/* names: the one escaper; proto is ASCII only, compact keeps UTF-8 */
	const char name[] = "q\"b\\n\n\t\x01\x7f \xc3\xa9\xf0\x9f\x98\x80";
	dp_exbuild_reset(&b);
	dp_exbuild_none(&b, name, sizeof name - 1);
	dp_exbuild_finish(&b, &p, &n);
	is_str(to_json(p, n, DP_JSON_COMPACT),
	       "{\"q\\\"b\\\\n\\n\\t\\u0001\\u007f \xc3\xa9\xf0\x9f\x98\x80\":{}}\n",
	       "compact: quotes, backslashes, controls and DEL escaped; UTF-8 as it is");
	is_str(to_json(p, n, DP_JSON_PROTO),
	       "{\"features\": {\"feature\": {\"q\\\"b\\\\n\\n\\t\\u0001\\u007f \\u00e9\\ud83d\\ude00\": {}}}}\n",
	       "proto: every code point past 0x7e as \\uXXXX, surrogate pairs past U+FFFF");

	/* no features field, an empty one */
	is_str(to_json((const uint8_t *)"", 0, DP_JSON_PROTO), "{}\n", "proto: no features field: {}");
	is_str(to_json((const uint8_t *)"\x0a\x00", 2, DP_JSON_PROTO), "{\"features\": {}}\n",
	       "proto: an empty features field");
	is_str(to_json((const uint8_t *)"", 0, DP_JSON_COMPACT), "{}\n", "compact: no features: {}");

	/* a buffer with a cap: the error, not a crash */
	dp_buf small;
	dp_example ex = {0};
	dp_err e;
	dp_buf_init(&small, 16);
	dp_exbuild_reset(&b);
	dp_exbuild_floats(&b, "x", 1, fv, 12);
	dp_exbuild_finish(&b, &p, &n);
	dp_example_parse(&ex, p, n, &e);
	is_int(dp_example_json(&small, &ex, DP_JSON_COMPACT), DP_ELIMIT, "a full buffer: DP_ELIMIT");
	dp_buf_free(&small);
	dp_example_free(&ex);
	dp_exbuild_free(&b);
}

/* Example -> JSON -> Example gives the same bytes, in both forms. */
static void test_round_trip(void)
{
	dp_exbuild b = {0};
	dp_exjson *j = dp_exjson_new();
	dp_buf back = DP_BUF_INIT;
	dp_err e;
	const uint8_t *p;
	size_t n;
	srand(7);
	int bad[2] = {0, 0}, cases = 0;
	for (int round = 0; round < 40; round++) {
		size_t nf = 700; /* past the writer's values on the stack */
		float *fv = malloc(nf * sizeof *fv);
		int64_t *iv = malloc(nf * sizeof *iv);
		uint8_t raw[64];
		for (size_t i = 0; i < nf; i++) {
			uint32_t bits = (uint32_t)rand() << 16 ^ (uint32_t)rand();
			memcpy(&fv[i], &bits, 4);
			if (isnan(fv[i]))
				fv[i] = NAN; /* "NaN" reads back as the one quiet NaN */
			iv[i] = (int64_t)((uint64_t)rand() << 40 ^ (uint64_t)rand() << 20 ^ (uint64_t)rand());
		}
		for (size_t i = 0; i < sizeof raw; i++)
			raw[i] = (uint8_t)rand();
		const uint8_t *bv[] = {raw, raw + 1, raw + 5};
		size_t bl[] = {(size_t)round % 7, 0, 59};
		dp_exbuild_reset(&b);
		dp_exbuild_floats(&b, "f", 1, fv, (size_t)(round * 17) % nf + (round == 3 ? nf - 17 * 3 : 0));
		dp_exbuild_int64s(&b, "i\xc3\xa9", 3, iv, (size_t)round * 13 % 300);
		dp_exbuild_bytes(&b, "b\n", 2, bv, bl, (size_t)round % 4);
		if (round % 5 == 0)
			dp_exbuild_none(&b, "", 0);
		dp_exbuild_finish(&b, &p, &n);
		uint8_t *want = malloc(n ? n : 1);
		memcpy(want, p, n);
		for (int form = 0; form < 2; form++) {
			const char *line = to_json(want, n, form);
			if (from_json(j, line, form, &back, &e) < 0 || back.len != n ||
			    memcmp(back.p, want, n)) {
				bad[form]++;
				printf("# round %d, form %d: %s\n", round, form, e.msg);
			}
		}
		cases++;
		free(want);
		free(fv);
		free(iv);
	}
	is_int(bad[0], 0, "compact: %d random Examples come back byte for byte", cases);
	is_int(bad[1], 0, "proto: %d random Examples come back byte for byte", cases);
	dp_buf_free(&back);
	dp_exjson_free(j);
	dp_exbuild_free(&b);
}

static void test_from_json(void)
{
	dp_exjson *j = dp_exjson_new();
	dp_buf out = DP_BUF_INIT;
	dp_err e;
	static const struct {
		int form;
		const char *in, *msg;
	} bad[] = {
		{0, "{\"a\":", "invalid JSON at column "},
		{0, "[1]", "not a JSON object"},
		{0, "{\"a\":{},\"a\":{}}", "invalid JSON"},
		{0, "{\"a\":1}", "feature \"a\": a feature must be an object"},
		{0, "{\"a\":{\"bytes\":[],\"int64\":[]}}", "feature \"a\": a feature has more than one kind"},
		{0, "{\"a\":{\"floats\":[]}}", "feature \"a\": unknown feature kind \"floats\" (bytes, float or int64)"},
		{0, "{\"a\":{\"float\":1}}", "feature \"a\": values are not an array"},
		{0, "{\"a\":{\"float\":[\"1.5\"]}}", "feature \"a\": invalid float value"},
		{0, "{\"a\":{\"float\":[1e39]}}", "feature \"a\": float value out of range"},
		{0, "{\"a\":{\"int64\":[1.5]}}", "feature \"a\": invalid int64 value"},
		{0, "{\"a\":{\"int64\":[\"9223372036854775808\"]}}", "feature \"a\": invalid int64 value"},
		{0, "{\"a\":{\"bytes\":[\"YW*=\"]}}", "feature \"a\": invalid base64"},
		{0, "{\"a\":{\"bytes\":[\"YWJjZ\"]}}", "feature \"a\": invalid base64"},
		{0, "{\"a\":{\"bytes\":[1]}}", "feature \"a\": bytes values must be base64 strings"},
		{1, "{\"feature\": {}}", "unknown field (only \"features\")"},
		{1, "{\"features\": []}", "\"features\" must be an object"},
		{1, "{\"features\": {\"x\": 1}}", "unknown field in features (only \"feature\")"},
		{1, "{\"features\": {\"feature\": 1}}", "\"feature\" must be an object"},
		{1, "{\"features\": {\"feature\": {\"a\": {\"int64List\": []}}}}", "feature \"a\": a list must be an object"},
		{1, "{\"features\": {\"feature\": {\"a\": {\"int64List\": {\"values\": []}}}}}",
		 "feature \"a\": unknown field in a list (only \"value\")"},
		{1, "{\"features\": {\"feature\": {\"a\": {\"int64\": {}}}}}",
		 "feature \"a\": unknown feature kind \"int64\" (bytesList, floatList or int64List)"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		int rc = from_json(j, bad[i].in, bad[i].form, &out, &e);
		ok(rc == DP_EDATA && strncmp(e.msg, bad[i].msg, strlen(bad[i].msg)) == 0,
		   "%s: %s", bad[i].in, bad[i].msg);
		if (rc != DP_EDATA)
			printf("#   rc %d\n", rc);
		else if (strncmp(e.msg, bad[i].msg, strlen(bad[i].msg)))
			printf("#   got '%s'\n", e.msg);
	}
	/* what parses, and what it means */
	is_int(from_json(j, "{}", DP_JSON_PROTO, &out, &e), 0, "proto {}: parses");
	is_int(out.len, 0, "proto {}: the empty record (no features field)");
	from_json(j, "{\"features\": null}", DP_JSON_PROTO, &out, &e);
	is_int(out.len, 0, "proto null features: unset");
	from_json(j, "{}", DP_JSON_COMPACT, &out, &e);
	ok(out.len == 2 && !memcmp(out.p, "\x0a\x00", 2), "compact {}: an empty features field");
	from_json(j, "{\"features\": {}}", DP_JSON_PROTO, &out, &e);
	ok(out.len == 2 && !memcmp(out.p, "\x0a\x00", 2), "proto empty features: 0a 00");
	is_int(from_json(j,
			 "{\"features\": {\"feature\": {\"a\": {\"int64_list\": {\"value\": [\"-3\", 4]}}, "
			 "\"b\": {\"float_list\": {\"value\": [\"1e3\", \"-Infinity\", 2]}}, "
			 "\"c\": {\"bytesList\": null}, \"d\": {\"bytesList\": {\"value\": [\"-_8\"]}}}}}",
			 DP_JSON_PROTO, &out, &e),
	       0, "proto: snake_case names, numbers as strings, null lists, URL-safe base64");
	is_str(to_json((const uint8_t *)out.p, out.len, DP_JSON_COMPACT),
	       "{\"a\":{\"int64\":[-3,4]},\"b\":{\"float\":[1000.0,\"-Infinity\",2.0]},\"c\":{},"
	       "\"d\":{\"bytes\":[\"+/8=\"]}}\n",
	       "proto: ... read as json_format reads them");
	is_int(from_json(j, "{\"a\":{\"float\":[\"1e3\"]}}", DP_JSON_COMPACT, &out, &e), DP_EDATA,
	       "compact: a float as a string is NaN or an infinity only");
	is_int(from_json(j, "{\"a\":{\"int64\":null}}", DP_JSON_COMPACT, &out, &e), 0,
	       "compact: null values are an empty list");
	is_str(to_json((const uint8_t *)out.p, out.len, DP_JSON_COMPACT), "{\"a\":{\"int64\":[]}}\n",
	       "compact: ... of their kind");
	dp_buf_free(&out);
	dp_exjson_free(j);
}

/* Run an encoder over memory: the records as compact JSON lines in out;
 * the status (0 or the failure) with its message in e. */
static int encode(const dp_enc_opts *o, const char *in, size_t n, const char *labels, size_t ln,
		  dp_buf *out, dp_err *e)
{
	const uint8_t *p;
	size_t len;
	int rc;
	dp_buf_reset(out);
	dp_encoder *x = dp_encoder_open_mem(in, n, labels, ln, "in", o, e);
	if (!x)
		return e->code;
	while ((rc = dp_encoder_next(x, &p, &len, e)) > 0)
		dp_buf_addstr(out, to_json(p, len, DP_JSON_COMPACT));
	if (rc < 0)
		is_int(dp_encoder_next(x, &p, &len, e), rc, "a failure sticks");
	dp_encoder_close(x);
	return rc;
}

static int csv(const char *types, const char *in, dp_buf *out, dp_err *e)
{
	dp_enc_opts o = {.format = DP_ENC_CSV, .types = types};
	return encode(&o, in, strlen(in), NULL, 0, out, e);
}

static void test_csv(void)
{
	dp_buf out = DP_BUF_INIT;
	dp_err e;
	is_int(csv("n=int64,x=float[],l=bytes[]",
		   "\xef\xbb\xbfn,s,x,l\r\n1,\"a,\"\"b\"\"\r\nc\",0.5 -2,p q\n\n2,,,\n", &out, &e),
	       0, "csv: parses");
	is_str(out.p,
	       "{\"n\":{\"int64\":[1]},\"s\":{\"bytes\":[\"YSwiYiINCmM=\"]},\"x\":{\"float\":[0.5,-2.0]},"
	       "\"l\":{\"bytes\":[\"cA==\",\"cQ==\"]}}\n"
	       "{\"n\":{\"int64\":[2]},\"s\":{\"bytes\":[\"\"]},\"x\":{\"float\":[]},\"l\":{\"bytes\":[]}}\n",
	       "csv: BOM, CRLF, quoted delimiter, doubled quote and line break, blank line, empty cells");
	dp_enc_opts o = {.format = DP_ENC_CSV, .delim = ';', .list_sep = '|',
			 .types = "b=bytes[],c=skip,a=int64,a=float"};
	const char *semi = "a;b;c\n1;x|y|;z\n";
	is_int(encode(&o, semi, strlen(semi), NULL, 0, &out, &e), 0, "csv: ; and |");
	is_str(out.p, "{\"a\":{\"int64\":[1]},\"b\":{\"bytes\":[\"eA==\",\"eQ==\",\"\"]}}\n",
	       "csv: a bytes list split exactly, skip, the first pattern wins");
	csv("x?=int64,*=float", "x1,y\n 7 ,\t3\n", &out, &e);
	is_str(out.p, "{\"x1\":{\"int64\":[7]},\"y\":{\"float\":[3.0]}}\n",
	       "csv: glob patterns; blanks around a number");

	static const struct {
		const char *types, *in, *msg;
	} bad[] = {
		{"a=int64", "a,b\n1,2\n1,2,3\n", "in: line 3: 3 fields, the header has 2"},
		{"a=int64", "a,b\n1,\"x\n2,3\n", "in: line 2: unterminated quoted field"},
		{"a=int64", "a,b\n1,\"x\"y\n", "in: line 2: text after a closing quote (field 2)"},
		{"a=int64", "a,b\n1,\"x\ny\"\nz,2\n", "in: line 4: column 'a': 'z' is not an int64"},
		{"a=int64", "a\n9223372036854775808\n",
		 "in: line 2: column 'a': '9223372036854775808' is out of the int64 range"},
		{"a=float", "a\n1e39\n", "in: line 2: column 'a': '1e39' is out of the float range"},
		{"a=float", "a\n1 2\n",
		 "in: line 2: column 'a': '1 2' holds more than one value (a list column is typed TYPE[])"},
		{"a=float[]", "a\n1 x\n", "in: line 2: column 'a': '1 x' holds a value that is not a float"},
		{NULL, "a,a\n1,2\n", "in: line 1: column 'a' appears twice in the header"},
		{NULL, "a,\xff\n1,2\n", "in: line 1: column 2: the name is not valid UTF-8"},
		{NULL, "a,b\n", "in: empty input: a header but no records (--allow-empty accepts it)"},
		{NULL, "", "in: empty input: no header row (--allow-empty accepts it)"},
		{NULL, "\n\r\n", "in: empty input: no header row"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		int rc = csv(bad[i].types, bad[i].in, &out, &e);
		ok(rc == DP_EDATA && !strncmp(e.msg, bad[i].msg, strlen(bad[i].msg)), "csv: %s", bad[i].msg);
		if (rc != DP_EDATA || strncmp(e.msg, bad[i].msg, strlen(bad[i].msg)))
			printf("#   rc %d: '%s'\n", rc, rc < 0 ? e.msg : "");
	}
	static const char nul[] = "a\0b,c\n1,2\n";
	dp_enc_opts plain = {.format = DP_ENC_CSV};
	/* a BOM before a quoted first name: the quotes are the field's */
	is_int(encode(&plain, "\xef\xbb\xbf\"a\",b\n1,2\n", 13, NULL, 0, &out, &e), 0,
	       "csv: a BOM before a quoted name");
	is_str(out.p, "{\"a\":{\"bytes\":[\"MQ==\"]},\"b\":{\"bytes\":[\"Mg==\"]}}\n",
	       "csv: ... the name without its quotes");
	is_int(encode(&plain, nul, sizeof nul - 1, NULL, 0, &out, &e), 0, "csv: a NUL in a header name");
	is_str(out.p, "{\"a\\u0000b\":{\"bytes\":[\"MQ==\"]},\"c\":{\"bytes\":[\"Mg==\"]}}\n",
	       "csv: ... kept whole (found by tests/fuzz/encode.c)");
	dp_enc_opts empty = {.format = DP_ENC_CSV, .allow_empty = 1};
	is_int(encode(&empty, "a\n", 2, NULL, 0, &out, &e), 0, "csv: a header only, allow_empty: no records");
	is_int(encode(&empty, "", 0, NULL, 0, &out, &e), 0, "csv: nothing, allow_empty: no records");

	is_int(dp_csv_types_check("a=int64,b*=float[],c=skip,d=str", &e), 0, "types: a good spec");
	is_int(dp_csv_types_check("noequals", &e), DP_EARG, "types: no =");
	is_str(e.msg, "'noequals' is not PATTERN=TYPE", "types: ... said");
	is_int(dp_csv_types_check("a=skip[]", &e), DP_EARG, "types: skip is not a list");
	is_str(e.msg, "unknown type 'skip' for 'a' (bytes, float, int64, skip; add [] for a list)",
	       "types: ... said");
	dp_buf_free(&out);
}

/* IDX bytes: magic, dims (big endian), then payload. */
static size_t idx(uint8_t *out, int type, int ndims, const uint32_t *dims, const uint8_t *data,
		  size_t n)
{
	size_t k = 0;
	out[k++] = 0, out[k++] = 0, out[k++] = (uint8_t)type, out[k++] = (uint8_t)ndims;
	for (int i = 0; i < ndims; i++)
		for (int s = 24; s >= 0; s -= 8)
			out[k++] = (uint8_t)(dims[i] >> s);
	memcpy(out + k, data, n);
	return k + n;
}

static void test_idx(void)
{
	dp_buf out = DP_BUF_INIT;
	dp_err e;
	uint8_t im[256], lb[64], pix[32];
	for (int i = 0; i < 32; i++)
		pix[i] = (uint8_t)i;
	uint32_t d3[] = {3, 2, 2}, d1[] = {3}, d1x[] = {4}, dbig[] = {1, 65536, 65536};
	uint32_t d9[9] = {3, 2, 2, 1, 1, 1, 1, 1, 1};
	/* 65536^4 = 2^64 wraps to 0: empty images, exit 0 (issue 12, item 7);
	 * 4 x 2^64 + ... as well, to 4-byte images */
	uint32_t dwrap[] = {1, 65536, 65536, 65536, 65536}, dwrap4[] = {1, 4, 65536, 65536, 65536, 65536};
	const uint8_t labels[] = {7, 8, 9, 1};
	dp_enc_opts o = {.format = DP_ENC_IDX, .image_name = "px"};
	size_t ni = idx(im, 8, 3, d3, pix, 12), nl = idx(lb, 8, 1, d1, labels, 3);
	is_int(encode(&o, (char *)im, ni, (char *)lb, nl, &out, &e), 0, "idx: 3 images of 2x2");
	is_str(out.p,
	       "{\"px\":{\"bytes\":[\"AAECAw==\"]},\"label\":{\"int64\":[7]}}\n"
	       "{\"px\":{\"bytes\":[\"BAUGBw==\"]},\"label\":{\"int64\":[8]}}\n"
	       "{\"px\":{\"bytes\":[\"CAkKCw==\"]},\"label\":{\"int64\":[9]}}\n",
	       "idx: raw pixels and the label, named as asked");

	struct {
		size_t ni, nl;
		const char *msg;
	} bad[12];
	uint8_t ims[12][256], lbs[12][64];
	int k = 0;
	/* each case: images, labels, the message */
#define CASE(I, L, M) (bad[k].ni = (I), bad[k].nl = (L), bad[k].msg = (M), k++)
	memcpy(ims[k], "\x00\x01\x08\x03", 4), memcpy(lbs[k], lb, nl);
	CASE(4, nl, "in: not an IDX file (images)");
	CASE(idx(ims[k], 0x0d, 3, d3, pix, 12), idx(lbs[k], 8, 1, d1, labels, 3),
	     "in: IDX element type 0x0d: only unsigned bytes (0x08) are supported");
	CASE(idx(ims[k], 8, 9, d9, pix, 0), idx(lbs[k], 8, 1, d1, labels, 3), "in: IDX file with 9 dimensions");
	CASE(idx(ims[k], 8, 3, d3, pix, 0) - 6, idx(lbs[k], 8, 1, d1, labels, 3), "in: truncated IDX header");
	CASE(idx(ims[k], 8, 3, d3, pix, 12), idx(lbs[k], 8, 3, d3, pix, 12),
	     "in labels: a label file has one dimension, this one 3");
	CASE(idx(ims[k], 8, 3, d3, pix, 12), idx(lbs[k], 8, 1, d1x, labels, 4),
	     "in has 3 images but in labels has 4 labels");
	CASE(idx(ims[k], 8, 3, d3, pix, 10), idx(lbs[k], 8, 1, d1, labels, 3),
	     "in: truncated: image 2 of 3 at byte 24 is incomplete");
	CASE(idx(ims[k], 8, 3, d3, pix, 13), idx(lbs[k], 8, 1, d1, labels, 3),
	     "in: trailing bytes after 3 images");
	CASE(idx(ims[k], 8, 3, dbig, pix, 0), idx(lbs[k], 8, 1, dbig, labels, 0),
	     "in: IDX header: items of 4294967296 bytes, more than 1 GiB");
	CASE(idx(ims[k], 8, 5, dwrap, pix, 0), idx(lbs[k], 8, 1, dwrap, labels, 1),
	     "in: IDX header: dimension 4 (65536) makes the size of an item overflow 64 bits");
	CASE(idx(ims[k], 8, 6, dwrap4, pix, 4), idx(lbs[k], 8, 1, dwrap4, labels, 1),
	     "in: IDX header: dimension 5 (65536) makes the size of an item overflow 64 bits");
	for (int i = 0; i < k; i++) {
		int rc = encode(&o, (char *)ims[i], bad[i].ni, (char *)lbs[i], bad[i].nl, &out, &e);
		ok(rc == DP_EDATA && !strcmp(e.msg, bad[i].msg), "idx: %s", bad[i].msg);
		if (rc != DP_EDATA || strcmp(e.msg, bad[i].msg))
			printf("#   rc %d: '%s'\n", rc, rc < 0 ? e.msg : "");
	}
	nl = idx(lb, 8, 1, d1, labels, 2);
	is_int(encode(&o, (char *)im, ni, (char *)lb, nl, &out, &e), DP_EDATA, "idx: a label missing");
	is_str(e.msg, "in labels: truncated: label 2 of 3 at byte 10 is missing", "idx: ... said, with its byte");
	uint32_t d0[] = {0, 2, 2}, d0l[] = {0};
	ni = idx(im, 8, 3, d0, pix, 0), nl = idx(lb, 8, 1, d0l, labels, 0);
	is_int(encode(&o, (char *)im, ni, (char *)lb, nl, &out, &e), DP_EDATA, "idx: no images");
	is_str(e.msg, "in: empty input: no images (--allow-empty accepts it)", "idx: ... said");
	o.allow_empty = 1;
	is_int(encode(&o, (char *)im, ni, (char *)lb, nl, &out, &e), 0, "idx: no images, allow_empty");
	dp_buf_free(&out);
}

static void test_json_lines(void)
{
	dp_buf out = DP_BUF_INIT;
	dp_err e;
	dp_enc_opts o = {.format = DP_ENC_JSON};
	const char *in = "{\"a\":{\"int64\":[1]}}\r\n \t\n{\"a\":{\"int64\":[2]}}";
	is_int(encode(&o, in, strlen(in), NULL, 0, &out, &e), 0, "json lines: parse");
	is_str(out.p, "{\"a\":{\"int64\":[1]}}\n{\"a\":{\"int64\":[2]}}\n",
	       "json lines: CRLF, blank lines skipped, no final newline");
	in = "{}\n\n{\"a\":{\"int64\":[x]}}\n";
	is_int(encode(&o, in, strlen(in), NULL, 0, &out, &e), DP_EDATA, "json lines: an error");
	like(e.msg, "in: line 3: invalid JSON at column ", "json lines: file and line named");
	is_int(encode(&o, "\n", 1, NULL, 0, &out, &e), DP_EDATA, "json lines: no records");
	is_str(e.msg, "in: empty input: no records (--allow-empty accepts it)", "json lines: ... said");
	/* a UTF-8 byte order mark: at the start of the input, passed over as
	 * the CSV encoder does (one rule); anywhere else it is invalid JSON */
	in = "\xef\xbb\xbf{\"a\":{\"int64\":[1]}}\n";
	is_int(encode(&o, in, strlen(in), NULL, 0, &out, &e), 0, "json lines: a BOM at the start");
	is_str(out.p, "{\"a\":{\"int64\":[1]}}\n", "json lines: ... passed over");
	in = "{}\n\xef\xbb\xbf{}\n";
	is_int(encode(&o, in, strlen(in), NULL, 0, &out, &e), DP_EDATA, "json lines: a BOM on line 2");
	like(e.msg, "in: line 2: invalid JSON", "json lines: ... is an error there");
	is_int(encode(&o, "\xef\xbb\xbf", 3, NULL, 0, &out, &e), DP_EDATA, "json lines: a BOM alone");
	is_str(e.msg, "in: empty input: no records (--allow-empty accepts it)", "json lines: ... is empty");
	o.format = DP_ENC_JSON_PROTO;
	in = "\xef\xbb\xbf{}\n";
	is_int(encode(&o, in, strlen(in), NULL, 0, &out, &e), 0, "json lines, proto: a BOM at the start");
	in = "{}\n{\"features\": {}}\n";
	is_int(encode(&o, in, strlen(in), NULL, 0, &out, &e), 0, "json lines, proto: parse");
	is_str(out.p, "{}\n{}\n", "json lines, proto: two records");
	is_int(dp_encoder_open("/nonexistent/x.csv", NULL, &o, &e) == NULL, 1, "a missing file");
	is_str(e.msg, "/nonexistent/x.csv: No such file or directory", "a missing file: said");
	dp_buf_free(&out);
}

int main(void)
{
	test_to_json();
	test_round_trip();
	test_from_json();
	test_json_lines();
	test_csv();
	test_idx();
	return done_testing();
}
