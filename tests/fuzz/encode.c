/*
 * encode.c - libFuzzer target: JSON -> Example (both forms) and the
 * encoders of dp_encode.h (JSON lines, CSV, IDX) on memory.
 *
 * The first byte picks what the rest is:
 *   0, 1  one JSON line, compact or proto form (dp_exjson_parse)
 *   2, 3  a file of JSON lines, compact or proto (dp_encoder)
 *   4     a CSV file, the second byte picking the delimiter, list separator
 *         and column types
 *   5     IDX: the second and third bytes (big endian) cut the rest into an
 *         image file and a label file
 * Properties: no crash, leak or undefined behaviour; every record made is
 * a valid Example; a JSON line that parses prints (in the same form) as
 * JSON that parses back to the same bytes; every failure says why.
 */
#include "dp_encode.h"
#include "fuzz.h"

#include <stdint.h>
#include <string.h>

static dp_exjson *J, *J2;
static dp_example ex;
static dp_buf text = DP_BUF_INIT;

/* rec is a valid Example; for JSON (form >= 0) it survives a round trip. */
static void check_record(const uint8_t *rec, size_t len, int form)
{
	dp_err e;
	CHECK(dp_example_parse(&ex, rec, len, &e) == 0, "a record made is not an Example: %s", e.msg);
	if (form < 0)
		return;
	dp_buf_reset(&text);
	CHECK(dp_example_json(&text, &ex, form) == 0, "printing failed");
	CHECK(text.len && text.p[text.len - 1] == '\n', "a JSON line ends in a newline");
	const uint8_t *back;
	size_t blen;
	int rc = dp_exjson_parse(J2, text.p, text.len, form, &back, &blen, &e);
	CHECK(rc == 0, "printed JSON does not parse back: %s: %s", e.msg, text.p);
	CHECK(blen == len && !memcmp(back, rec, len), "the round trip changed the record: %s", text.p);
}

static void run_encoder(const dp_enc_opts *o, const uint8_t *p, size_t n, const uint8_t *l,
			size_t ln)
{
	dp_err e;
	const uint8_t *rec;
	size_t len;
	int rc;
	dp_encoder *x = dp_encoder_open_mem(p, n, l, ln, "in", o, &e);
	if (!x) {
		CHECK(e.msg[0], "a failed open says why");
		return;
	}
	int form = o->format == DP_ENC_JSON ? DP_JSON_COMPACT
		 : o->format == DP_ENC_JSON_PROTO ? DP_JSON_PROTO : -1;
	while ((rc = dp_encoder_next(x, &rec, &len, &e)) == 1)
		check_record(rec, len, form);
	CHECK(rc == 0 || (rc < 0 && e.msg[0]), "a failure says why");
	dp_encoder_close(x);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const types[] = {NULL, "*=float", "*=int64[]", "a*=int64,b*=float[],*=bytes[]",
					    "x=skip,*=float[]", "?=int64,*=bytes"};
	static const char seps[] = {',', ';', '\t', '|', ' '};
	if (!J && (!(J = dp_exjson_new()) || !(J2 = dp_exjson_new())))
		abort();
	if (size < 1)
		return 0;
	int mode = data[0] % 6;
	const uint8_t *p = data + 1;
	size_t n = size - 1;
	dp_enc_opts o = {0};
	if (mode < 2) {
		const uint8_t *rec;
		size_t len;
		dp_err e;
		int rc = dp_exjson_parse(J, (const char *)p, n, mode, &rec, &len, &e);
		CHECK(rc == 0 || (rc == DP_EDATA && e.msg[0]), "a failure says why (%d)", rc);
		if (rc == 0)
			check_record(rec, len, mode);
	} else if (mode < 4) {
		o.format = mode == 2 ? DP_ENC_JSON : DP_ENC_JSON_PROTO;
		o.allow_empty = n & 1;
		run_encoder(&o, p, n, NULL, 0);
	} else if (mode == 4 && n >= 1) {
		o.format = DP_ENC_CSV;
		o.delim = seps[p[0] % 3];
		o.list_sep = seps[2 + (p[0] >> 2) % 3];
		if (o.list_sep == o.delim)
			o.list_sep = ' ';
		o.types = types[(p[0] >> 4) % 6];
		o.allow_empty = p[0] >> 7;
		run_encoder(&o, p + 1, n - 1, NULL, 0);
	} else if (mode == 5 && n >= 2) {
		size_t cut = (size_t)p[0] << 8 | p[1];
		p += 2, n -= 2;
		if (cut > n)
			cut = n;
		o.format = DP_ENC_IDX;
		o.allow_empty = 1;
		run_encoder(&o, p, cut, p + cut, n - cut);
	}
	return 0;
}
