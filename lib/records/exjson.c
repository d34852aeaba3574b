/*
 * exjson.c - tf.train.Example as JSON and back (dp_encode.h): the compact
 * form of tfr-cat -j and protobuf's JSON mapping, written and parsed.
 *
 * Writing is the hot path of tfr-cat -j: values are formatted straight
 * into the caller's dp_buf (room reserved once per value), names through
 * dp_buf_json_str.  Parsing goes through jansson, with duplicate keys
 * rejected, into a dp_exbuild.
 */
#include "dp_encode.h"
#include "enc_int.h"

#include <errno.h>
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Writing: base64, numbers ------------------------------------------ */

static const char b64e[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Room for n more bytes at the end of b, or NULL: dp_buf_reserve, with
 * its common case inline (the writer asks once per value). */
static inline char *room(dp_buf *b, size_t n)
{
	if (b->len + n < b->cap && b->len + n <= b->max && !b->err)
		return b->p + b->len;
	return dp_buf_reserve(b, n) < 0 ? NULL : b->p + b->len;
}

/* The bytes written at the end of b, up to o. */
static inline void wrote(dp_buf *b, char *o)
{
	b->len = (size_t)(o - b->p);
	b->p[b->len] = 0;
}

/* dp_buf_add, inline for the writer's short pieces. */
static inline int put(dp_buf *b, const char *s, size_t n)
{
	char *o = room(b, n);
	if (!o)
		return b->err;
	memcpy(o, s, n);
	wrote(b, o + n);
	return 0;
}

#define PUT(b, lit) put(b, lit, sizeof(lit) - 1)

/* Standard base64 with padding, quoted. */
static int put_b64(dp_buf *b, const uint8_t *s, size_t n)
{
	char *o = room(b, 4 * (n / 3 + 1) + 2);
	if (!o)
		return b->err;
	*o++ = '"';
	size_t i = 0;
	for (; i + 3 <= n; i += 3) {
		uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
		o[0] = b64e[v >> 18];
		o[1] = b64e[(v >> 12) & 63];
		o[2] = b64e[(v >> 6) & 63];
		o[3] = b64e[v & 63];
		o += 4;
	}
	if (n - i == 1) {
		uint32_t v = (uint32_t)s[i] << 16;
		*o++ = b64e[v >> 18];
		*o++ = b64e[(v >> 12) & 63];
		*o++ = '=';
		*o++ = '=';
	} else if (n - i == 2) {
		uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8;
		*o++ = b64e[v >> 18];
		*o++ = b64e[(v >> 12) & 63];
		*o++ = b64e[(v >> 6) & 63];
		*o++ = '=';
	}
	*o++ = '"';
	wrote(b, o);
	return 0;
}

static char *fmt_i64(char *o, int64_t v)
{
	char tmp[24];
	int n = 0;
	uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
	do {
		tmp[n++] = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	if (v < 0)
		*o++ = '-';
	while (n)
		*o++ = tmp[--n];
	return o;
}

/* The shortest digits of x (see fmt_float) in buf as %.{p-1}e prints them. */
static void shortest_digits(char buf[48], float x, int from1)
{
	int p = from1 && fabsf(x) < FLT_MIN ? 1 : 6;
	for (;; p++) {
		snprintf(buf, 48, "%.*e", p - 1, (double)x);
		if (p >= 9 || (float)strtod(buf, NULL) == x)
			break;
	}
	uint32_t bits;
	memcpy(&bits, &x, 4);
	if (from1 && p > 6 && !(bits & 0x7fffff)) {
		/* A power of two: its interval is twice as wide above as below,
		 * and a shorter decimal may lie above where the nearest one does
		 * not.  Try rounding away from zero. */
		int e = (int)floor(log10(fabsf(x)));
		for (int q = 6; q < p; q++) {
			char alt[48];
			double scale = pow(10, e - q + 1);
			double c = ceil(fabs((double)x) / scale) * scale;
			snprintf(alt, sizeof alt, "%.*e", q - 1, copysign(c, (double)x));
			if ((float)strtod(alt, NULL) == x) {
				memcpy(buf, alt, sizeof alt);
				break;
			}
		}
	}
}

/*
 * A finite float as text: the shortest decimal digits that read back (as a
 * double, rounded to float) to the same float, printed as Python's repr()
 * prints that number: "0.5", "1.0", "1e-05", "3.4028235e+38".  At most 19
 * bytes.
 *
 * The digits are found as protobuf's ToShortestFloat does: the first
 * precision p from 6 to 9 whose %.{p}g text round-trips.  For a normal
 * float this is the shortest: a float's rounding interval (under 6e-8
 * relative) is narrower than the gap between 6-digit decimals (over 1e-6),
 * so a shorter decimal inside it is also the nearest 6-digit one, which %g
 * prints without trailing zeros.  Subnormals have wider intervals: with
 * from1, the search starts at one digit (compact JSON); protobuf's printer
 * does not, and the proto form follows it exactly.
 */
static char *fmt_float(char *o, float x, int from1)
{
	char buf[48];
	if (x == 0) {
		if (signbit(x))
			*o++ = '-';
		memcpy(o, "0.0", 3);
		return o + 3;
	}
	shortest_digits(buf, x, from1);
	/* buf: [-]d[.ddd]e[+-]XX */
	const char *s = buf;
	char dig[16];
	int nd = 0;
	if (*s == '-') {
		*o++ = '-';
		s++;
	}
	for (; *s != 'e'; s++)
		if (*s != '.')
			dig[nd++] = *s;
	int e10 = atoi(s + 1);
	while (nd > 1 && dig[nd - 1] == '0')
		nd--;
	if (e10 < -4 || e10 >= 16) {
		*o++ = dig[0];
		if (nd > 1) {
			*o++ = '.';
			memcpy(o, dig + 1, (size_t)nd - 1);
			o += nd - 1;
		}
		*o++ = 'e';
		*o++ = e10 < 0 ? '-' : '+';
		int a = abs(e10);
		if (a < 10)
			*o++ = '0';
		return fmt_i64(o, a);
	}
	if (e10 < 0) {
		*o++ = '0';
		*o++ = '.';
		for (int i = 0; i < -e10 - 1; i++)
			*o++ = '0';
		memcpy(o, dig, (size_t)nd);
		return o + nd;
	}
	int intd = e10 + 1;
	if (nd <= intd) {
		memcpy(o, dig, (size_t)nd);
		o += nd;
		for (int i = nd; i < intd; i++)
			*o++ = '0';
		*o++ = '.';
		*o++ = '0';
		return o;
	}
	memcpy(o, dig, (size_t)intd);
	o += intd;
	*o++ = '.';
	memcpy(o, dig + intd, (size_t)(nd - intd));
	return o + (nd - intd);
}

/* A float value: a number, or "NaN", "Infinity", "-Infinity". */
static char *fmt_float_json(char *o, float x, int from1)
{
	const char *s = NULL;
	if (isnan(x))
		s = "\"NaN\"";
	else if (isinf(x))
		s = x < 0 ? "\"-Infinity\"" : "\"Infinity\"";
	else
		return fmt_float(o, x, from1);
	size_t n = strlen(s);
	memcpy(o, s, n);
	return o + n;
}

/* ---- Writing: Examples --------------------------------------------------- */

/* Between values: "," (compact) or ", " (proto, as json_format prints). */
static inline char *put_sep(char *o, int proto)
{
	*o++ = ',';
	if (proto)
		*o++ = ' ';
	return o;
}

struct b64_ctx {
	dp_buf *b;
	size_t i;
	int proto, brief;
};

/* DP_JSON_BRIEF's stand-in for a long bytes value: "<12345 bytes, JPEG>". */
static int put_brief(dp_buf *b, const uint8_t *p, size_t len)
{
	const char *what = len >= 3 && p[0] == 0xff && p[1] == 0xd8 && p[2] == 0xff ? ", JPEG"
			   : len >= 8 && !memcmp(p, "\x89PNG\r\n\x1a\n", 8)  ? ", PNG"
										: "";
	return dp_buf_printf(b, "\"<%zu bytes%s>\"", len, what) < 0 ? b->err : 0;
}

static int b64_value(const uint8_t *p, size_t len, void *ctx)
{
	struct b64_ctx *c = ctx;
	if (c->i++) {
		char *o = room(c->b, 2);
		if (!o)
			return c->b->err;
		wrote(c->b, put_sep(o, c->proto));
	}
	if (c->brief && len > DP_JSON_BRIEF_MAX)
		return put_brief(c->b, p, len);
	return put_b64(c->b, p, len);
}

/* Values on the stack up to this many; past it, on the heap. */
#define STACK_VALUES 256
/* Values written after one reservation, and the room each may take: a
 * separator and a float (19 bytes) or a quoted int64 (22). */
#define RUN_VALUES 64
#define VALUE_ROOM 24

/* The numbers of f, separated (int64s quoted with proto).  Returns 0,
 * DP_ENOMEM or b's error. */
static int put_numbers(dp_buf *b, const dp_feature *f, int proto)
{
	union {
		float f[STACK_VALUES];
		int64_t i[STACK_VALUES];
	} stack;
	void *v = &stack;
	int flt = f->kind == DP_KIND_FLOAT;
	if (f->count > STACK_VALUES &&
	    !(v = malloc(f->count * (flt ? sizeof(float) : sizeof(int64_t)))))
		return DP_ENOMEM;
	if (flt)
		dp_feature_floats(f, v, f->count);
	else
		dp_feature_int64s(f, v, f->count);
	for (size_t i = 0; i < f->count;) {
		size_t end = f->count - i < RUN_VALUES ? f->count : i + RUN_VALUES;
		char *o = room(b, (end - i) * VALUE_ROOM);
		if (!o)
			break;
		for (; i < end; i++) {
			if (i)
				o = put_sep(o, proto);
			if (flt) {
				o = fmt_float_json(o, ((const float *)v)[i], !proto);
				continue;
			}
			if (proto)
				*o++ = '"';
			o = fmt_i64(o, ((const int64_t *)v)[i]);
			if (proto)
				*o++ = '"';
		}
		wrote(b, o);
	}
	if (v != &stack)
		free(v);
	return b->err;
}

/* The values of f as a JSON array. */
static int put_values(dp_buf *b, const dp_feature *f, int proto, int brief)
{
	int rc;
	PUT(b, "[");
	if (f->kind == DP_KIND_BYTES) {
		struct b64_ctx c = {b, 0, proto, brief};
		rc = dp_feature_bytes_each(f, b64_value, &c);
	} else {
		rc = put_numbers(b, f, proto);
	}
	return rc < 0 ? rc : PUT(b, "]");
}

/* Compact: {"name":{"bytes":[...]},"label":{"int64":[3]},"none":{}} */
static int json_compact(dp_buf *b, const dp_example *ex, int brief)
{
	static const char *const kinds[] = {"", "{\"bytes\":", "{\"float\":", "{\"int64\":"};
	PUT(b, "{");
	for (size_t i = 0; i < ex->n; i++) {
		const dp_feature *f = &ex->f[i];
		if (i)
			PUT(b, ",");
		dp_buf_json_str(b, f->name, f->name_len, 0);
		PUT(b, ":");
		if (f->kind == DP_KIND_NONE) {
			PUT(b, "{}");
			continue;
		}
		put(b, kinds[f->kind], strlen(kinds[f->kind]));
		int rc = put_values(b, f, 0, brief);
		if (rc < 0)
			return rc;
		PUT(b, "}");
	}
	return PUT(b, "}\n");
}

/* protobuf's JSON mapping, as json_format.MessageToJson(m, indent=None)
 * prints it: ", " and ": " separators, lowerCamelCase names, int64 as
 * strings, ASCII-only strings, empty lists and unset fields left out. */
static int json_proto(dp_buf *b, const dp_example *ex, int brief)
{
	static const char *const kinds[] = {"", "{\"bytesList\": ", "{\"floatList\": ",
					    "{\"int64List\": "};
	if (!ex->has_features)
		return PUT(b, "{}\n");
	if (ex->n == 0)
		return PUT(b, "{\"features\": {}}\n");
	PUT(b, "{\"features\": {\"feature\": {");
	for (size_t i = 0; i < ex->n; i++) {
		const dp_feature *f = &ex->f[i];
		if (i)
			PUT(b, ", ");
		dp_buf_json_str(b, f->name, f->name_len, DP_JSON_ASCII);
		PUT(b, ": ");
		if (f->kind == DP_KIND_NONE) {
			PUT(b, "{}");
			continue;
		}
		put(b, kinds[f->kind], strlen(kinds[f->kind]));
		if (f->count == 0) {
			PUT(b, "{}}");
			continue;
		}
		PUT(b, "{\"value\": ");
		int rc = put_values(b, f, 1, brief);
		if (rc < 0)
			return rc;
		PUT(b, "}}");
	}
	return PUT(b, "}}}\n");
}

int dp_example_json(dp_buf *b, const dp_example *ex, int form)
{
	int brief = (form & DP_JSON_BRIEF) != 0;
	form &= ~DP_JSON_BRIEF;
	return form == DP_JSON_PROTO ? json_proto(b, ex, brief) : json_compact(b, ex, brief);
}

/* ---- Parsing --------------------------------------------------------------- */

struct dp_exjson {
	dp_exbuild eb;
	enc_vals v;
	char why[256], msg[512];
};

static const char E_NOMEM[] = "out of memory building an Example";

dp_exjson *dp_exjson_new(void)
{
	dp_exjson *j = calloc(1, sizeof *j);
	if (j)
		enc_vals_init(&j->v);
	return j;
}

void dp_exjson_free(dp_exjson *j)
{
	if (!j)
		return;
	dp_exbuild_free(&j->eb);
	enc_vals_free(&j->v);
	free(j);
}

static int b64_val(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+' || c == '-')
		return 62;
	if (c == '/' || c == '_')
		return 63;
	return -1;
}

/* Decode base64 (standard or URL-safe alphabet, padding optional) into out
 * (room for 3 * n / 4 + 3 bytes).  Returns the length, or -1. */
static long b64_decode(const char *s, size_t n, uint8_t *out)
{
	size_t pad = 0;
	while (n && s[n - 1] == '=' && pad < 2) {
		n--;
		pad++;
	}
	if (n % 4 == 1 || (pad && (n + pad) % 4))
		return -1;
	uint8_t *o = out;
	uint32_t acc = 0;
	int bits = 0;
	for (size_t i = 0; i < n; i++) {
		int v = b64_val((unsigned char)s[i]);
		if (v < 0)
			return -1;
		acc = acc << 6 | (uint32_t)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			*o++ = (uint8_t)(acc >> bits);
		}
	}
	return (long)(o - out);
}

/* One float value: a number, "NaN", "Infinity", "-Infinity" (proto: any
 * number as a string too).  NULL or the reason. */
static const char *json_float(json_t *v, int proto, float *out)
{
	double d;
	if (json_is_number(v)) {
		d = json_number_value(v);
	} else if (json_is_string(v)) {
		const char *t = json_string_value(v);
		char *end;
		if (!strcmp(t, "NaN"))
			d = NAN;
		else if (!strcmp(t, "Infinity"))
			d = INFINITY;
		else if (!strcmp(t, "-Infinity"))
			d = -INFINITY;
		else if (proto && *t && (d = strtod(t, &end), !*end) && !isinf(d) && !isnan(d))
			;
		else
			return "invalid float value";
	} else {
		return "invalid float value";
	}
	return enc_to_float(d, out) ? "float value out of range" : NULL;
}

/* One int64 value: a whole number, or one as a string. */
static const char *json_int64(json_t *v, int64_t *out)
{
	if (json_is_integer(v)) {
		*out = (int64_t)json_integer_value(v);
		return NULL;
	}
	if (!json_is_string(v))
		return "invalid int64 value";
	const char *t = json_string_value(v);
	char *end;
	errno = 0;
	long long x = strtoll(t, &end, 10);
	if (!*t || *end || errno)
		return "invalid int64 value";
	*out = x;
	return NULL;
}

/* n base64 strings into the builder as feature name. */
static const char *json_bytes(dp_exjson *j, const char *name, size_t nlen, json_t *arr, size_t n)
{
	enc_vals *v = &j->v;
	v->pool.len = 0;
	if (enc_bytes_room(v, n) < 0)
		return E_NOMEM;
	const uint8_t **bp = (const uint8_t **)v->bp.p;
	size_t *bl = (size_t *)v->bl.p, used = 0;
	for (size_t i = 0; i < n; i++) {
		json_t *s = json_array_get(arr, i);
		if (!json_is_string(s))
			return "bytes values must be base64 strings";
		size_t sl = json_string_length(s);
		uint8_t *pool = enc_room(&v->pool, used + sl / 4 * 3 + 4, 1);
		if (!pool)
			return E_NOMEM;
		long k = b64_decode(json_string_value(s), sl, pool + used);
		if (k < 0)
			return "invalid base64";
		bp[i] = (const uint8_t *)(uintptr_t)used; /* an offset until the pool stops moving */
		bl[i] = (size_t)k;
		used += (size_t)k;
	}
	for (size_t i = 0; i < n; i++)
		bp[i] = (const uint8_t *)v->pool.p + (uintptr_t)bp[i];
	return dp_exbuild_bytes(&j->eb, name, nlen, bp, bl, n) < 0 ? E_NOMEM : NULL;
}

/* Decode one JSON array of values of kind into the builder as feature
 * name.  Returns NULL or the reason it is invalid. */
static const char *json_feature(dp_exjson *j, const char *name, size_t nlen, int kind, json_t *arr,
				int proto)
{
	if (json_is_null(arr))
		arr = NULL;
	if (arr && !json_is_array(arr))
		return "values are not an array";
	size_t n = arr ? json_array_size(arr) : 0;
	const char *why = NULL;
	if (kind == DP_KIND_BYTES)
		return json_bytes(j, name, nlen, arr, n);
	if (kind == DP_KIND_FLOAT) {
		float *fv = enc_room(&j->v.fv, n, sizeof *fv);
		if (!fv)
			return E_NOMEM;
		for (size_t i = 0; i < n && !why; i++)
			why = json_float(json_array_get(arr, i), proto, &fv[i]);
		if (!why && dp_exbuild_floats(&j->eb, name, nlen, fv, n) < 0)
			why = E_NOMEM;
	} else {
		int64_t *iv = enc_room(&j->v.iv, n, sizeof *iv);
		if (!iv)
			return E_NOMEM;
		for (size_t i = 0; i < n && !why; i++)
			why = json_int64(json_array_get(arr, i), &iv[i]);
		if (!why && dp_exbuild_int64s(&j->eb, name, nlen, iv, n) < 0)
			why = E_NOMEM;
	}
	return why;
}

/* One Feature object: {} or {"KIND": [...]} (proto: {"KINDList": {"value": [...]}}). */
static const char *json_feature_obj(dp_exjson *j, const char *name, size_t nlen, json_t *fo,
				    int proto)
{
	static const char *const compact[] = {"", "bytes", "float", "int64"};
	static const char *const camel[] = {"", "bytesList", "floatList", "int64List"};
	static const char *const snake[] = {"", "bytes_list", "float_list", "int64_list"};
	if (!json_is_object(fo))
		return "a feature must be an object";
	if (json_object_size(fo) == 0)
		return dp_exbuild_none(&j->eb, name, nlen) < 0 ? E_NOMEM : NULL;
	if (json_object_size(fo) > 1)
		return "a feature has more than one kind";
	const char *key = json_object_iter_key(json_object_iter(fo));
	json_t *val = json_object_iter_value(json_object_iter(fo));
	for (int k = DP_KIND_BYTES; k <= DP_KIND_INT64; k++) {
		if (!proto) {
			if (!strcmp(key, compact[k]))
				return json_feature(j, name, nlen, k, val, 0);
			continue;
		}
		if (strcmp(key, camel[k]) && strcmp(key, snake[k]))
			continue;
		if (json_is_null(val)) /* null: the field is unset */
			return dp_exbuild_none(&j->eb, name, nlen) < 0 ? E_NOMEM : NULL;
		if (!json_is_object(val))
			return "a list must be an object";
		json_t *vals = NULL, *lv;
		const char *lk;
		json_object_foreach(val, lk, lv)
		{
			if (strcmp(lk, "value"))
				return "unknown field in a list (only \"value\")";
			vals = lv;
		}
		return json_feature(j, name, nlen, k, vals, 1);
	}
	snprintf(j->why, sizeof j->why, "unknown feature kind \"%s\" (%s)", key,
		 proto ? "bytesList, floatList or int64List" : "bytes, float or int64");
	return j->why;
}

/* The proto form's {"features": {"feature": {...}}}: *fmap the feature map
 * (NULL if none), *present whether the features field is.  NULL or the
 * reason it is invalid. */
static const char *proto_root(json_t *root, json_t **fmap, int *present)
{
	const char *err = NULL, *key, *k2;
	json_t *val, *v2;
	*fmap = NULL;
	*present = 0;
	json_object_foreach(root, key, val)
	{
		if (strcmp(key, "features")) {
			err = "unknown field (only \"features\")";
			break;
		}
		if (json_is_null(val))
			continue;
		if (!json_is_object(val)) {
			err = "\"features\" must be an object";
			break;
		}
		*present = 1;
		json_object_foreach(val, k2, v2)
		{
			if (strcmp(k2, "feature")) {
				err = "unknown field in features (only \"feature\")";
				break;
			}
			if (json_is_object(v2))
				*fmap = v2;
			else if (!json_is_null(v2))
				err = "\"feature\" must be an object";
		}
	}
	return err;
}

int dp_exjson_parse(dp_exjson *j, const char *s, size_t n, int form, const uint8_t **rec,
		    size_t *len, dp_err *e)
{
	int proto = form == DP_JSON_PROTO;
	json_error_t je;
	json_t *root = json_loadb(s, n, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
	if (!root)
		return dp_seterr(e, DP_EDATA, "invalid JSON at column %d: %s", je.column, je.text);
	if (!json_is_object(root)) {
		json_decref(root);
		return dp_seterr(e, DP_EDATA, "not a JSON object");
	}
	dp_exbuild_reset(&j->eb);
	const char *err = NULL, *key;
	json_t *fmap = root, *val;
	size_t klen;
	int present = 1; /* the Example's features field */
	if (proto)
		err = proto_root(root, &fmap, &present);
	if (!err && fmap) {
		json_object_keylen_foreach(fmap, key, klen, val)
		{
			if ((err = json_feature_obj(j, key, klen, val, proto))) {
				if (err != E_NOMEM) {
					snprintf(j->msg, sizeof j->msg, "feature \"%.100s\": %s", key, err);
					err = j->msg;
				}
				break;
			}
		}
	}
	json_decref(root);
	if (err)
		return dp_seterr(e, err == E_NOMEM ? DP_ENOMEM : DP_EDATA, "%s", err);
	if (!present) { /* {}: an Example without features (0 bytes) */
		*rec = (const uint8_t *)"";
		*len = 0;
		return 0;
	}
	if (dp_exbuild_finish(&j->eb, rec, len) < 0)
		return dp_seterr(e, DP_ENOMEM, "%s", E_NOMEM);
	return 0;
}
