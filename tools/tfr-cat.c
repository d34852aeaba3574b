/*
 * tfr-cat - the cat of TFRecords.
 *
 * Reads TFRecord streams (files or stdin, GZIP/ZLIB detected), checks every
 * CRC, and writes the records again (plain or compressed), or prints them as
 * JSON lines, a count, a schema or a verification summary.  With --encode it
 * builds tf.train.Example records from JSON lines, CSV or MNIST IDX files.
 * See tfr-cat(1); the formats are in tfrecord(5).
 *
 * Shape: every input becomes a stream of records (read_tfrecords() or one of
 * the encoders), each handed to put_record(), which applies --skip/--head
 * and the output mode.  Fatal errors go through die(), which removes a
 * half-written -o file.  The formats themselves live in libdp.
 */
#define _GNU_SOURCE
#include "dp.h"
#include "dp_example.h"
#include "dp_record.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <fnmatch.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#ifndef DP_PROG
#define DP_PROG "tfr-cat"
#endif
static const char *prog = DP_PROG;

enum { OUT_RECORDS, OUT_JSON, OUT_COUNT, OUT_SCHEMA, OUT_VERIFY };
enum { JS_COMPACT = 1, JS_PROTO = 2 };
enum { ENC_NONE, ENC_JSON, ENC_JSON_PROTO, ENC_CSV, ENC_IDX };

/* The command line. */
static struct {
	int json, count, schema, verify, skip_corrupt, allow_empty;
	int encode, comp, level;
	uint64_t head, skip, max_record;
	const char *output;
	char *types;
	char delim, list_sep;
	const char *image_name, *label_name;
} O = {
	.comp = DP_COMP_NONE,
	.level = -1,
	.head = UINT64_MAX,
	.delim = ',',
	.list_sep = ' ',
	.image_name = "image",
	.label_name = "label",
};

/* A growing text buffer, written out in large blocks. */
typedef struct obuf {
	char *p;
	size_t n, cap;
} obuf;

/* Per-feature statistics for --schema, in order of first appearance. */
typedef struct scol {
	char *name;
	size_t nlen;
	int kind;
	uint64_t records, vmin, vmax, bmin, bmax;
} scol;

static struct {
	int mode, need_parse;
	dp_out out;
	int out_open; /* out holds a temporary to commit or remove */
	int fd;
	const char *oname;
	dp_writer *w;
	obuf ob;
	dp_example ex;
	dp_exbuild eb;
	uint64_t skip_left, emitted, corrupt, bytes, files;
	int stop; /* --head reached */
	/* records mode: a run of consecutive frames in the reader's buffer,
	 * written in one piece (see dp_reader_on_move) */
	const uint8_t *run;
	size_t run_len;
	uint64_t run_n;
	/* value scratch */
	float *fv;
	int64_t *iv;
	size_t fcap, icap;
	const uint8_t **bp;
	size_t *bl, bcap;
	uint8_t *pool;
	size_t pool_n, pool_cap;
	/* --schema */
	scol *cols;
	size_t ncols, ccap;
	size_t *htab, hcap; /* index + 1 into cols, 0 empty */
} S = {.fd = -1};

/* ---- Messages and exits ------------------------------------------------ */

/* On a fatal error: a -o file is removed; on stdout (or a device) what was
 * good so far is flushed, so that a stream read up to its damage gives the
 * records before it, as a pipe would have seen them anyway.  A compressed
 * stream is flushed but not finished: it stays visibly incomplete. */
static void abort_output(void)
{
	static int once;
	if (S.out_open) {
		dp_out_abort(&S.out);
		S.out_open = 0;
		return;
	}
	if (once++ || S.fd < 0)
		return; /* an error while flushing: give up quietly */
	dp_err e;
	if (S.w && S.run_len)
		dp_writer_write_run(S.w, S.run, S.run_len, S.run_n, &e);
	if (S.w)
		dp_writer_flush(S.w, &e);
	if (S.ob.n)
		dp_write_all(S.fd, S.ob.p, S.ob.n, S.oname, &e);
}

static void __attribute__((noreturn, format(printf, 1, 2))) die(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort_output();
	exit(1);
}

static void __attribute__((format(printf, 1, 2))) warn(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static const char usage_line[] =
	"usage: tfr-cat [-cj] [-n N] [-z gzip|zlib] [-o FILE] [--encode json|csv|idx] [FILE]...\n";

static void __attribute__((noreturn, format(printf, 1, 2))) usage_error(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fputs(usage_line, stderr);
	exit(2);
}

static void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);
	if (!q)
		die("out of memory (%zu bytes)", n);
	return q;
}

/* Grow *p (of *cap elements of size sz) to hold at least n. */
static void grow(void *pp, size_t *cap, size_t n, size_t sz)
{
	if (n <= *cap)
		return;
	size_t nc = *cap ? *cap : 64;
	while (nc < n)
		nc *= 2;
	*(void **)pp = xrealloc(*(void **)pp, nc * sz);
	*cap = nc;
}

/* ---- Output ------------------------------------------------------------ */

#define OB_FLUSH (1u << 20)

static void ob_flush(void)
{
	dp_err e;
	if (S.ob.n && dp_write_all(S.fd, S.ob.p, S.ob.n, S.oname, &e) < 0)
		die("%s", e.msg);
	S.ob.n = 0;
}

static inline char *ob_reserve(size_t more)
{
	if (S.ob.n + more > S.ob.cap)
		grow(&S.ob.p, &S.ob.cap, S.ob.n + more, 1);
	return S.ob.p + S.ob.n;
}

static inline void ob_put(const void *s, size_t n)
{
	memcpy(ob_reserve(n), s, n);
	S.ob.n += n;
}

#define ob_lit(s) ob_put(s, sizeof(s) - 1)

static inline void ob_putc(char c)
{
	*ob_reserve(1) = c;
	S.ob.n++;
}

static void __attribute__((format(printf, 1, 2))) ob_printf(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	char *p = ob_reserve((size_t)n + 1);
	va_start(ap, fmt);
	vsnprintf(p, (size_t)n + 1, fmt, ap);
	va_end(ap);
	S.ob.n += (size_t)n;
}

/* Open the output: -o FILE through a temporary (renamed at the end), or
 * stdout.  An existing non-regular file (a device, a FIFO) is written in
 * place: there is nothing to rename over. */
static void open_output(void)
{
	dp_err e;
	const char *path = O.output ? O.output : "-";
	struct stat st;
	if (strcmp(path, "-") != 0 && stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
		S.fd = open(path, O_WRONLY | O_CLOEXEC);
		if (S.fd < 0)
			die("%s: %s", path, strerror(errno));
		S.oname = path;
	} else {
		if (dp_out_open(&S.out, path, &e) < 0)
			die("%s", e.msg);
		S.out_open = S.out.tmp != NULL;
		S.fd = S.out.fd;
		S.oname = S.out.tmp ? path : "stdout";
	}
#ifdef F_SETPIPE_SZ
	/* a 1 MiB pipe (the default limit of /proc/sys/fs/pipe-max-size): the
	 * large runs of frames go into it in one write, with fewer switches
	 * between this process and the reader; no matter if refused */
	if (fstat(S.fd, &st) == 0 && S_ISFIFO(st.st_mode))
		fcntl(S.fd, F_SETPIPE_SZ, 1 << 20);
#endif
	if (S.mode == OUT_RECORDS) {
		if (isatty(S.fd))
			die("refusing to write binary records to a terminal (redirect the output, or use -j, -c)");
		S.w = dp_writer_open_fd(S.fd, S.oname, O.comp, O.level, &e);
		if (!S.w)
			die("%s", e.msg);
	}
}

static void close_output(void)
{
	dp_err e;
	if (S.w) {
		if (dp_writer_finish(S.w, &e) < 0)
			die("%s", e.msg);
		dp_writer_free(S.w);
		S.w = NULL;
	}
	ob_flush();
	if (S.out_open) {
		S.out_open = 0;
		if (dp_out_commit(&S.out, &e) < 0)
			die("%s", e.msg);
	} else if (S.out.path) {
		dp_out_commit(&S.out, &e); /* stdout: frees the name */
	}
}

/* ---- JSON text --------------------------------------------------------- */

static const char hexd[] = "0123456789abcdef";

/* A JSON string of n bytes of valid UTF-8.  ascii: escape everything
 * outside printable ASCII as \uXXXX (Python's json.dumps, ensure_ascii). */
static void json_str(const uint8_t *s, size_t n, int ascii)
{
	char *o = ob_reserve(n * 12 + 2), *o0 = o;
	*o++ = '"';
	for (size_t i = 0; i < n;) {
		uint8_t c = s[i];
		if (c >= 0x20 && c != '"' && c != '\\' && (c < 0x7f || (!ascii && c >= 0x80))) {
			*o++ = (char)c;
			i++;
			continue;
		}
		*o++ = '\\';
		i++;
		switch (c) {
		case '"': *o++ = '"'; continue;
		case '\\': *o++ = '\\'; continue;
		case '\n': *o++ = 'n'; continue;
		case '\r': *o++ = 'r'; continue;
		case '\t': *o++ = 't'; continue;
		case '\b': *o++ = 'b'; continue;
		case '\f': *o++ = 'f'; continue;
		}
		uint32_t cp = c;
		if (c >= 0x80) { /* validated UTF-8: decode one code point */
			int k = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : 1;
			cp = c & (0x3f >> k);
			for (int j = 0; j < k; j++)
				cp = cp << 6 | (s[i++] & 0x3f);
		}
		uint32_t units[2] = {cp, 0};
		int nu = 1;
		if (cp > 0xffff) {
			cp -= 0x10000;
			units[0] = 0xd800 | (cp >> 10);
			units[1] = 0xdc00 | (cp & 0x3ff);
			nu = 2;
		}
		for (int u = 0; u < nu; u++) {
			if (u)
				*o++ = '\\';
			*o++ = 'u';
			for (int sh = 12; sh >= 0; sh -= 4)
				*o++ = hexd[(units[u] >> sh) & 15];
		}
	}
	*o++ = '"';
	S.ob.n += (size_t)(o - o0);
}

static const char b64e[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Standard base64 with padding, quoted. */
static void json_b64(const uint8_t *s, size_t n)
{
	char *o = ob_reserve(4 * (n / 3 + 1) + 2), *o0 = o;
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
	S.ob.n += (size_t)(o - o0);
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

/*
 * A finite float as text: the shortest decimal digits that read back (as a
 * double, rounded to float) to the same float, printed as Python's repr()
 * prints that number: "0.5", "1.0", "1e-05", "3.4028235e+38".
 *
 * The digits are found as protobuf's ToShortestFloat does: the first
 * precision p from 6 to 9 whose %.{p}g text round-trips.  For a normal
 * float this is the shortest: a float's rounding interval (under 6e-8
 * relative) is narrower than the gap between 6-digit decimals (over 1e-6),
 * so a shorter decimal inside it is also the nearest 6-digit one, which %g
 * prints without trailing zeros.  Subnormals have wider intervals: with
 * from1, the search starts at one digit (compact JSON); protobuf's printer
 * does not, and --json=proto follows it exactly.
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
	int p = from1 && fabsf(x) < FLT_MIN ? 1 : 6;
	for (;; p++) {
		snprintf(buf, sizeof buf, "%.*e", p - 1, (double)x);
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
		o = fmt_i64(o, a);
	} else if (e10 < 0) {
		*o++ = '0';
		*o++ = '.';
		for (int i = 0; i < -e10 - 1; i++)
			*o++ = '0';
		memcpy(o, dig, (size_t)nd);
		o += nd;
	} else {
		int intd = e10 + 1;
		if (nd <= intd) {
			memcpy(o, dig, (size_t)nd);
			o += nd;
			for (int i = nd; i < intd; i++)
				*o++ = '0';
			*o++ = '.';
			*o++ = '0';
		} else {
			memcpy(o, dig, (size_t)intd);
			o += intd;
			*o++ = '.';
			memcpy(o, dig + intd, (size_t)(nd - intd));
			o += nd - intd;
		}
	}
	return o;
}

/* A float value: a number, or "NaN", "Infinity", "-Infinity". */
static char *fmt_float_json(char *o, float x, int from1)
{
	if (isnan(x)) {
		memcpy(o, "\"NaN\"", 5);
		return o + 5;
	}
	if (isinf(x)) {
		if (x < 0) {
			memcpy(o, "\"-Infinity\"", 11);
			return o + 11;
		}
		memcpy(o, "\"Infinity\"", 10);
		return o + 10;
	}
	return fmt_float(o, x, from1);
}

static const float *feature_floats(const dp_feature *f)
{
	grow(&S.fv, &S.fcap, f->count, sizeof *S.fv);
	dp_feature_floats(f, S.fv, f->count);
	return S.fv;
}

static const int64_t *feature_int64s(const dp_feature *f)
{
	grow(&S.iv, &S.icap, f->count, sizeof *S.iv);
	dp_feature_int64s(f, S.iv, f->count);
	return S.iv;
}

struct bytes_ctx {
	size_t i;
	const char *sep;
};

static int emit_b64(const uint8_t *p, size_t len, void *ctx)
{
	struct bytes_ctx *c = ctx;
	if (c->i++)
		ob_put(c->sep, strlen(c->sep));
	json_b64(p, len);
	return 0;
}

/* The values of f as a JSON array; sep between values (", " for proto). */
static void json_values(const dp_feature *f, const char *sep, int proto)
{
	size_t seplen = strlen(sep);
	ob_putc('[');
	if (f->kind == DP_KIND_BYTES) {
		struct bytes_ctx c = {0, sep};
		dp_feature_bytes_each(f, emit_b64, &c);
	} else if (f->kind == DP_KIND_FLOAT) {
		const float *v = feature_floats(f);
		for (size_t i = 0; i < f->count; i++) {
			char *o = ob_reserve(40), *o0 = o;
			if (i) {
				memcpy(o, sep, seplen);
				o += seplen;
			}
			o = fmt_float_json(o, v[i], !proto);
			S.ob.n += (size_t)(o - o0);
		}
	} else {
		const int64_t *v = feature_int64s(f);
		for (size_t i = 0; i < f->count; i++) {
			char *o = ob_reserve(28), *o0 = o;
			if (i) {
				memcpy(o, sep, seplen);
				o += seplen;
			}
			if (proto)
				*o++ = '"';
			o = fmt_i64(o, v[i]);
			if (proto)
				*o++ = '"';
			S.ob.n += (size_t)(o - o0);
		}
	}
	ob_putc(']');
}

/* Compact: {"name":{"bytes":[...]},"label":{"int64":[3]},"none":{}} */
static void emit_json_compact(const dp_example *ex)
{
	static const char *const kinds[] = {"", "{\"bytes\":", "{\"float\":", "{\"int64\":"};
	ob_putc('{');
	for (size_t i = 0; i < ex->n; i++) {
		const dp_feature *f = &ex->f[i];
		if (i)
			ob_putc(',');
		json_str((const uint8_t *)f->name, f->name_len, 0);
		ob_putc(':');
		if (f->kind == DP_KIND_NONE) {
			ob_lit("{}");
			continue;
		}
		ob_put(kinds[f->kind], strlen(kinds[f->kind]));
		json_values(f, ",", 0);
		ob_putc('}');
	}
	ob_lit("}\n");
}

/* protobuf's JSON mapping, as json_format.MessageToJson(m, indent=None)
 * prints it: ", " and ": " separators, lowerCamelCase names, int64 as
 * strings, ASCII-only strings, empty lists and unset fields left out. */
static void emit_json_proto(const dp_example *ex)
{
	static const char *const kinds[] = {"", "{\"bytesList\": ", "{\"floatList\": ",
					    "{\"int64List\": "};
	if (!ex->has_features) {
		ob_lit("{}\n");
		return;
	}
	if (ex->n == 0) {
		ob_lit("{\"features\": {}}\n");
		return;
	}
	ob_lit("{\"features\": {\"feature\": {");
	for (size_t i = 0; i < ex->n; i++) {
		const dp_feature *f = &ex->f[i];
		if (i)
			ob_lit(", ");
		json_str((const uint8_t *)f->name, f->name_len, 1);
		ob_lit(": ");
		if (f->kind == DP_KIND_NONE) {
			ob_lit("{}");
			continue;
		}
		ob_put(kinds[f->kind], strlen(kinds[f->kind]));
		if (f->count == 0) {
			ob_lit("{}}");
			continue;
		}
		ob_lit("{\"value\": ");
		json_values(f, ", ", 1);
		ob_lit("}}");
	}
	ob_lit("}}}\n");
}

/* ---- --schema ---------------------------------------------------------- */

static uint64_t hash_name(const char *s, size_t n, int kind)
{
	uint64_t h = 1469598103934665603ull ^ (uint64_t)kind;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
	return h;
}

static scol *schema_col(const dp_feature *f)
{
	if (S.ncols * 2 >= S.hcap) { /* rehash */
		size_t nh = S.hcap ? S.hcap * 2 : 64;
		size_t *t = calloc(nh, sizeof *t);
		if (!t)
			die("out of memory");
		for (size_t i = 0; i < S.ncols; i++) {
			size_t j = hash_name(S.cols[i].name, S.cols[i].nlen, S.cols[i].kind) & (nh - 1);
			while (t[j])
				j = (j + 1) & (nh - 1);
			t[j] = i + 1;
		}
		free(S.htab);
		S.htab = t;
		S.hcap = nh;
	}
	size_t j = hash_name(f->name, f->name_len, f->kind) & (S.hcap - 1);
	for (; S.htab[j]; j = (j + 1) & (S.hcap - 1)) {
		scol *c = &S.cols[S.htab[j] - 1];
		if (c->kind == f->kind && c->nlen == f->name_len && !memcmp(c->name, f->name, c->nlen))
			return c;
	}
	grow(&S.cols, &S.ccap, S.ncols + 1, sizeof *S.cols);
	scol *c = &S.cols[S.ncols++];
	memset(c, 0, sizeof *c);
	c->name = xrealloc(NULL, f->name_len + 1);
	memcpy(c->name, f->name, f->name_len);
	c->name[f->name_len] = 0;
	c->nlen = f->name_len;
	c->kind = f->kind;
	c->vmin = c->bmin = UINT64_MAX;
	S.htab[j] = S.ncols;
	return c;
}

static int bytes_minmax(const uint8_t *p, size_t len, void *ctx)
{
	scol *c = ctx;
	(void)p;
	if (len < c->bmin)
		c->bmin = len;
	if (len > c->bmax)
		c->bmax = len;
	return 0;
}

static void schema_add(const dp_example *ex)
{
	for (size_t i = 0; i < ex->n; i++) {
		const dp_feature *f = &ex->f[i];
		scol *c = schema_col(f);
		c->records++;
		if (f->count < c->vmin)
			c->vmin = f->count;
		if (f->count > c->vmax)
			c->vmax = f->count;
		if (f->kind == DP_KIND_BYTES)
			dp_feature_bytes_each(f, bytes_minmax, c);
	}
}

/* A name in a TSV cell: backslash, tab, newline and CR escaped as \\ \t
 * \n \r (the text format of PostgreSQL's COPY); other bytes as they are. */
static void tsv_name(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		switch (s[i]) {
		case '\\': ob_lit("\\\\"); break;
		case '\t': ob_lit("\\t"); break;
		case '\n': ob_lit("\\n"); break;
		case '\r': ob_lit("\\r"); break;
		default: ob_putc(s[i]);
		}
	}
}

static void schema_print(void)
{
	ob_lit("feature\tkind\trecords\tmin_values\tmax_values\tmin_bytes\tmax_bytes\n");
	for (size_t i = 0; i < S.ncols; i++) {
		scol *c = &S.cols[i];
		tsv_name(c->name, c->nlen);
		if (c->kind == DP_KIND_BYTES && c->bmax >= c->bmin)
			ob_printf("\t%s\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\n",
				  dp_kind_name(c->kind), c->records, c->vmin, c->vmax, c->bmin, c->bmax);
		else
			ob_printf("\t%s\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\t-\t-\n",
				  dp_kind_name(c->kind), c->records, c->vmin, c->vmax);
	}
}

/* ---- The record sink ----------------------------------------------------- */

static void run_flush(void *unused)
{
	dp_err e;
	(void)unused;
	if (S.run_len && dp_writer_write_run(S.w, S.run, S.run_len, S.run_n, &e) < 0) {
		S.run_len = 0;
		die("%s", e.msg);
	}
	S.run_len = 0;
	S.run_n = 0;
}

/* One record for the output.  frame: its checked frame when it was read,
 * NULL when it was built here.  src, idx, off place it in messages (off
 * UINT64_MAX: not from a stream).  Returns 1 once --head is reached. */
static int put_record(const uint8_t *data, size_t len, const uint8_t *frame, size_t flen,
		      const char *src, uint64_t idx, uint64_t off)
{
	dp_err e;
	if (S.skip_left) {
		S.skip_left--;
		return 0;
	}
	if (S.need_parse && dp_example_parse(&S.ex, data, len, &e) < 0) {
		char where[64] = "";
		if (e.code == DP_ENOMEM)
			die("out of memory");
		if (off != UINT64_MAX)
			snprintf(where, sizeof where, " at byte %" PRIu64, off);
		if (!O.skip_corrupt)
			die("%s: record %" PRIu64 "%s: %s", src, idx, where, e.msg);
		warn("%s: record %" PRIu64 "%s: %s; skipped", src, idx, where, e.msg);
		S.corrupt++;
		return 0;
	}
	switch (S.mode) {
	case OUT_RECORDS:
		if (frame) { /* extend the run, or start another */
			if (S.run_len && frame != S.run + S.run_len)
				run_flush(NULL);
			if (!S.run_len)
				S.run = frame;
			S.run_len += flen;
			S.run_n++;
		} else if (dp_writer_write(S.w, data, len, &e) < 0)
			die("%s", e.msg);
		break;
	case OUT_JSON:
		if (O.json == JS_PROTO)
			emit_json_proto(&S.ex);
		else
			emit_json_compact(&S.ex);
		if (S.ob.n >= OB_FLUSH)
			ob_flush();
		break;
	case OUT_SCHEMA:
		schema_add(&S.ex);
		break;
	}
	if (++S.emitted >= O.head)
		S.stop = 1;
	return S.stop;
}

/* ---- Reading TFRecords --------------------------------------------------- */

static void read_tfrecords(const char *path)
{
	dp_err e;
	dp_reader_opts ro = {.max_record = O.max_record, .skip_corrupt = O.skip_corrupt};
	if (strcmp(path, "-") == 0 && isatty(STDIN_FILENO))
		die("stdin is a terminal: give a file, or pipe records in");
	dp_reader *r = dp_reader_open_path(path, &ro, &e);
	if (!r)
		die("%s", e.msg);
	if (S.mode == OUT_RECORDS)
		dp_reader_on_move(r, run_flush, NULL);
	dp_record rec;
	int rc;
	S.files++;
	while ((rc = dp_reader_next(r, &rec, &e)) != 0) {
		if (rc == DP_REC_SKIPPED) {
			warn("%s", e.msg);
			continue;
		}
		if (rc < 0) {
			if (rc == DP_EDATA && O.skip_corrupt) { /* a broken compressed stream */
				warn("%s; skipped the rest of the stream", e.msg);
				S.corrupt++;
				break;
			}
			die("%s", e.msg);
		}
		if (put_record(rec.data, rec.len, rec.frame, rec.frame_len, dp_reader_name(r), rec.index,
			       rec.offset))
			break;
	}
	if (S.mode == OUT_RECORDS)
		run_flush(NULL); /* before the buffer goes */
	dp_reader_stats st;
	dp_reader_stats_get(r, &st);
	S.corrupt += st.corrupt;
	S.bytes += st.bytes;
	if (rc == 0 && st.bytes == 0 && !O.allow_empty)
		die("%s: empty input: no records (--allow-empty accepts it)", dp_reader_name(r));
	dp_reader_close(r);
}

/* ---- Encoders: a byte source over zlib (plain or gzip) --------------------- */

typedef struct src {
	gzFile g;
	const char *name;
	char *buf;
	size_t pos, end, cap;
	int eof;
	uint64_t off; /* uncompressed offset of buf[pos] */
} src;

static void src_open(src *s, const char *path)
{
	memset(s, 0, sizeof *s);
	S.files++;
	int fd;
	if (strcmp(path, "-") == 0) {
		s->name = "stdin";
		fd = dup(STDIN_FILENO);
	} else {
		s->name = path;
		fd = open(path, O_RDONLY | O_CLOEXEC);
	}
	if (fd < 0)
		die("%s: %s", s->name, strerror(errno));
	if (!(s->g = gzdopen(fd, "rb")))
		die("%s: out of memory", s->name);
	gzbuffer(s->g, 256u << 10);
	s->cap = 256u << 10;
	s->buf = xrealloc(NULL, s->cap);
}

static void src_close(src *s)
{
	gzclose(s->g);
	free(s->buf);
}

/* Read up to n bytes into p; dies on a read or decompression error. */
static size_t src_raw(src *s, void *p, size_t n)
{
	size_t got = 0;
	while (got < n) {
		unsigned k = n - got > (1u << 30) ? 1u << 30 : (unsigned)(n - got);
		int r = gzread(s->g, (char *)p + got, k);
		int zerr;
		const char *msg = gzerror(s->g, &zerr);
		if (r < 0 || (zerr != Z_OK && zerr != Z_BUF_ERROR))
			die("%s: %s", s->name, zerr == Z_ERRNO ? strerror(errno) : msg);
		if (zerr == Z_BUF_ERROR)
			die("%s: truncated gzip stream", s->name);
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return got;
}

/* Refill buf after [pos, end), keeping those bytes.  Returns 0 at EOF. */
static int src_fill(src *s)
{
	if (s->eof)
		return 0;
	if (s->pos > 0) {
		memmove(s->buf, s->buf + s->pos, s->end - s->pos);
		s->end -= s->pos;
		s->pos = 0;
	}
	if (s->end == s->cap)
		grow(&s->buf, &s->cap, s->cap * 2, 1);
	size_t k = src_raw(s, s->buf + s->end, s->cap - s->end);
	if (k == 0)
		s->eof = 1;
	s->end += k;
	return k > 0;
}

static inline int src_getc(src *s)
{
	if (s->pos == s->end && !src_fill(s))
		return EOF;
	s->off++;
	return (unsigned char)s->buf[s->pos++];
}

static inline int src_peek(src *s)
{
	if (s->pos == s->end && !src_fill(s))
		return EOF;
	return (unsigned char)s->buf[s->pos];
}

/* The next line without its "\n" or "\r\n", NUL-terminated in place; its
 * length, or -1 at the end.  Valid until the next call. */
static long src_line(src *s, char **line)
{
	size_t scan = s->pos;
	for (;;) {
		char *nl = memchr(s->buf + scan, '\n', s->end - scan);
		if (nl) {
			size_t n = (size_t)(nl - (s->buf + s->pos));
			*line = s->buf + s->pos;
			s->off += n + 1;
			s->pos += n + 1;
			if (n && (*line)[n - 1] == '\r')
				n--;
			(*line)[n] = 0;
			return (long)n;
		}
		if (s->eof) {
			if (s->pos == s->end)
				return -1;
			size_t n = s->end - s->pos;
			if (s->end == s->cap)
				grow(&s->buf, &s->cap, s->cap + 1, 1);
			*line = s->buf + s->pos;
			s->off += n;
			s->pos = s->end;
			if ((*line)[n - 1] == '\r')
				n--;
			(*line)[n] = 0;
			return (long)n;
		}
		size_t done = s->end - s->pos;
		src_fill(s);
		scan = s->pos + done;
	}
}

/* ---- Encoders: shared value handling ------------------------------------ */

static void eb_check(int rc)
{
	if (rc < 0)
		die("out of memory building an Example");
}

/* Finish the Example being built and send it on.  Returns 1 at --head. */
static int eb_emit(const char *src_name, uint64_t idx)
{
	const uint8_t *p;
	size_t n;
	eb_check(dp_exbuild_finish(&S.eb, &p, &n));
	S.bytes += n + DP_TFR_HEADER + DP_TFR_FOOTER; /* as a TFRecord stream */
	return put_record(p, n, NULL, 0, src_name, idx, UINT64_MAX);
}

/* Bytes values are decoded into one pool; pointers are made at the end. */
static void pool_reset(void)
{
	S.pool_n = 0;
}

/* Room for n bytes values in S.bp and S.bl. */
static void bytes_room(size_t n)
{
	size_t cap = S.bcap;
	grow(&S.bp, &cap, n, sizeof *S.bp);
	if (cap != S.bcap)
		S.bl = xrealloc(S.bl, cap * sizeof *S.bl);
	S.bcap = cap;
}

static void bytes_push(size_t at, size_t len, size_t i)
{
	bytes_room(i + 1);
	S.bp[i] = (const uint8_t *)(uintptr_t)at; /* an offset until bytes_fix */
	S.bl[i] = len;
}

static void bytes_fix(size_t n)
{
	for (size_t i = 0; i < n; i++)
		S.bp[i] = S.pool + (uintptr_t)S.bp[i];
}

/* A double as a float value; out of float range is an error (NULL reason). */
static const char *to_float(double d, float *out)
{
	float f = (float)d;
	if (isinf(f) && !isinf(d))
		return "is out of the float range";
	*out = f;
	return NULL;
}

/* ---- --encode json ------------------------------------------------------- */

static const char *kind_key(int kind, int proto)
{
	static const char *const c[] = {"", "bytes", "float", "int64"};
	static const char *const p[] = {"", "bytesList", "floatList", "int64List"};
	return proto ? p[kind] : c[kind];
}

/* Decode one JSON array of values of kind into the builder as feature
 * name.  Returns NULL or the reason it is invalid. */
static const char *json_feature(const char *name, size_t nlen, int kind, json_t *arr, int proto)
{
	if (json_is_null(arr))
		arr = NULL;
	if (arr && !json_is_array(arr))
		return "values are not an array";
	size_t n = arr ? json_array_size(arr) : 0;
	if (kind == DP_KIND_FLOAT) {
		grow(&S.fv, &S.fcap, n, sizeof *S.fv);
		for (size_t i = 0; i < n; i++) {
			json_t *v = json_array_get(arr, i);
			double d;
			if (json_is_number(v))
				d = json_number_value(v);
			else if (json_is_string(v)) {
				const char *t = json_string_value(v);
				char *end;
				if (!strcmp(t, "NaN"))
					d = NAN;
				else if (!strcmp(t, "Infinity"))
					d = INFINITY;
				else if (!strcmp(t, "-Infinity"))
					d = -INFINITY;
				else if (proto && *t && (d = strtod(t, &end), !*end) && !isinf(d) &&
					 !isnan(d))
					;
				else
					return "invalid float value";
			} else
				return "invalid float value";
			if (to_float(d, &S.fv[i]))
				return "float value out of range";
		}
		eb_check(dp_exbuild_floats(&S.eb, name, nlen, S.fv, n));
	} else if (kind == DP_KIND_INT64) {
		grow(&S.iv, &S.icap, n, sizeof *S.iv);
		for (size_t i = 0; i < n; i++) {
			json_t *v = json_array_get(arr, i);
			if (json_is_integer(v))
				S.iv[i] = (int64_t)json_integer_value(v);
			else if (json_is_string(v)) {
				const char *t = json_string_value(v);
				char *end;
				errno = 0;
				long long x = strtoll(t, &end, 10);
				if (!*t || *end || errno)
					return "invalid int64 value";
				S.iv[i] = x;
			} else
				return "invalid int64 value";
		}
		eb_check(dp_exbuild_int64s(&S.eb, name, nlen, S.iv, n));
	} else {
		pool_reset();
		for (size_t i = 0; i < n; i++) {
			json_t *v = json_array_get(arr, i);
			if (!json_is_string(v))
				return "bytes values must be base64 strings";
			size_t sl = json_string_length(v);
			grow(&S.pool, &S.pool_cap, S.pool_n + sl / 4 * 3 + 4, 1);
			long k = b64_decode(json_string_value(v), sl, S.pool + S.pool_n);
			if (k < 0)
				return "invalid base64";
			bytes_push(S.pool_n, (size_t)k, i);
			S.pool_n += (size_t)k;
		}
		bytes_fix(n);
		eb_check(dp_exbuild_bytes(&S.eb, name, nlen, S.bp, S.bl, n));
	}
	return NULL;
}

/* One Feature object: {} or {"KIND": [...]} (proto: {"KINDList": {"value": [...]}}). */
static const char *json_feature_obj(const char *name, size_t nlen, json_t *fo, int proto,
				    char *why, size_t wlen)
{
	if (!json_is_object(fo))
		return "a feature must be an object";
	if (json_object_size(fo) == 0) {
		eb_check(dp_exbuild_none(&S.eb, name, nlen));
		return NULL;
	}
	if (json_object_size(fo) > 1)
		return "a feature has more than one kind";
	const char *key = json_object_iter_key(json_object_iter(fo));
	json_t *val = json_object_iter_value(json_object_iter(fo));
	for (int k = DP_KIND_BYTES; k <= DP_KIND_INT64; k++) {
		static const char *const snake[] = {"", "bytes_list", "float_list", "int64_list"};
		if (strcmp(key, kind_key(k, proto)) && !(proto && !strcmp(key, snake[k])))
			continue;
		if (!proto)
			return json_feature(name, nlen, k, val, 0);
		if (json_is_null(val)) { /* null: the field is unset */
			eb_check(dp_exbuild_none(&S.eb, name, nlen));
			return NULL;
		}
		if (!json_is_object(val))
			return "a list must be an object";
		json_t *vals = NULL;
		const char *lk;
		json_t *lv;
		json_object_foreach(val, lk, lv)
		{
			if (strcmp(lk, "value"))
				return "unknown field in a list (only \"value\")";
			vals = lv;
		}
		return json_feature(name, nlen, k, vals, 1);
	}
	snprintf(why, wlen, "unknown feature kind \"%s\" (%s)", key,
		 proto ? "bytesList, floatList or int64List" : "bytes, float or int64");
	return why;
}

static void encode_json(const char *path, int proto)
{
	src s;
	src_open(&s, path);
	char *line;
	long n;
	uint64_t lineno = 0, made = 0;
	char why[256], msg[512];
	while ((n = src_line(&s, &line)) >= 0) {
		lineno++;
		size_t i = 0;
		while (i < (size_t)n && strchr(" \t\r", line[i]))
			i++;
		if (i == (size_t)n)
			continue; /* blank line */
		json_error_t je;
		json_t *root = json_loadb(line, (size_t)n, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
		if (!root)
			die("%s: line %" PRIu64 ": invalid JSON at column %d: %s", s.name, lineno,
			    je.column, je.text);
		if (!json_is_object(root))
			die("%s: line %" PRIu64 ": not a JSON object", s.name, lineno);
		dp_exbuild_reset(&S.eb);
		const char *err = NULL, *key;
		json_t *fmap = root, *val;
		size_t klen;
		int present = 1; /* the Example's features field */
		if (proto) { /* {"features": {"feature": {...}}} */
			fmap = NULL;
			present = 0;
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
				present = 1;
				const char *k2;
				json_t *v2;
				json_object_foreach(val, k2, v2)
				{
					if (strcmp(k2, "feature")) {
						err = "unknown field in features (only \"feature\")";
						break;
					}
					if (json_is_object(v2))
						fmap = v2;
					else if (!json_is_null(v2))
						err = "\"feature\" must be an object";
				}
			}
			if (!err && !present) {
				/* {}: an Example without features (0 bytes) */
				json_decref(root);
				S.bytes += DP_TFR_HEADER + DP_TFR_FOOTER;
				if (put_record((const uint8_t *)"", 0, NULL, 0, s.name, made++, UINT64_MAX))
					break;
				continue;
			}
		}
		if (!err && fmap) {
			json_object_keylen_foreach(fmap, key, klen, val)
			{
				if ((err = json_feature_obj(key, klen, val, proto, why, sizeof why))) {
					snprintf(msg, sizeof msg, "feature \"%.100s\": %s", key, err);
					err = msg;
					break;
				}
			}
		}
		if (err)
			die("%s: line %" PRIu64 ": %s", s.name, lineno, err);
		json_decref(root);
		if (eb_emit(s.name, made++))
			break;
	}
	if (!made && !S.stop && !O.allow_empty)
		die("%s: empty input: no records (--allow-empty accepts it)", s.name);
	src_close(&s);
}

/* ---- --encode csv ---------------------------------------------------------- */

enum { T_BYTES = DP_KIND_BYTES, T_FLOAT = DP_KIND_FLOAT, T_INT64 = DP_KIND_INT64, T_SKIP = 9 };

typedef struct tspec {
	char *pat;
	int type, list;
} tspec;

static tspec *tspecs;
static size_t ntspecs;

/* --types: PATTERN=TYPE[,PATTERN=TYPE...], TYPE bytes|float|int64|skip,
 * optionally with [] for a list cell. */
static void parse_types(char *spec)
{
	for (char *tok = strtok(spec, ","); tok; tok = strtok(NULL, ",")) {
		char *eq = strrchr(tok, '=');
		if (!eq || eq == tok)
			usage_error("--types: '%s' is not PATTERN=TYPE", tok);
		*eq = 0;
		char *t = eq + 1;
		size_t tl = strlen(t);
		tspec ts = {.pat = tok, .list = 0};
		if (tl > 2 && !strcmp(t + tl - 2, "[]")) {
			ts.list = 1;
			t[tl - 2] = 0;
		}
		if (!strcmp(t, "bytes") || !strcmp(t, "string") || !strcmp(t, "str"))
			ts.type = T_BYTES;
		else if (!strcmp(t, "float") || !strcmp(t, "float32"))
			ts.type = T_FLOAT;
		else if (!strcmp(t, "int64") || !strcmp(t, "int"))
			ts.type = T_INT64;
		else if (!strcmp(t, "skip") && !ts.list)
			ts.type = T_SKIP;
		else
			usage_error("--types: unknown type '%s' for '%s' (bytes, float, int64, skip; "
				    "add [] for a list)",
				    t, tok);
		tspecs = xrealloc(tspecs, (ntspecs + 1) * sizeof *tspecs);
		tspecs[ntspecs++] = ts;
	}
}

typedef struct csv {
	src s;
	char *f;      /* the row's fields, each NUL-terminated */
	size_t n, cap;
	size_t *off;  /* field starts in f */
	size_t nf, offcap;
	uint64_t line; /* physical line where the row starts (from 1) */
	uint64_t next_line;
} csv;

static void csv_addc(csv *c, char ch)
{
	if (c->n == c->cap)
		grow(&c->f, &c->cap, c->n + 1, 1);
	c->f[c->n++] = ch;
}

static void csv_endfield(csv *c)
{
	csv_addc(c, 0);
	grow(&c->off, &c->offcap, c->nf + 1, sizeof *c->off);
	c->off[c->nf++] = c->n;
}

/* The next row (RFC 4180: quoted fields with "" escapes and line breaks,
 * CRLF or LF).  Empty lines are skipped.  Returns 0 at the end. */
static int csv_row(csv *c)
{
	int ch;
	for (;;) {
		c->n = 0;
		c->nf = 0;
		c->line = c->next_line;
		ch = src_peek(&c->s);
		if (ch == EOF)
			return 0;
		if (ch == '\n') {
			src_getc(&c->s);
			c->next_line++;
			continue;
		}
		if (ch == '\r') {
			src_getc(&c->s);
			if (src_peek(&c->s) == '\n') {
				src_getc(&c->s);
				c->next_line++;
				continue;
			}
			csv_addc(c, '\r');
		}
		break;
	}
	int start = c->n == 0;
	for (;;) {
		ch = src_getc(&c->s);
		if (start && ch == '"') {
			start = 0;
			for (;;) {
				ch = src_getc(&c->s);
				if (ch == EOF)
					die("%s: line %" PRIu64 ": unterminated quoted field", c->s.name,
					    c->line);
				if (ch == '\n')
					c->next_line++;
				if (ch == '"') {
					if (src_peek(&c->s) != '"')
						break;
					src_getc(&c->s);
				}
				csv_addc(c, (char)ch);
			}
			ch = src_getc(&c->s);
			if (ch == '\r' && src_peek(&c->s) == '\n')
				ch = src_getc(&c->s);
			if (ch != EOF && ch != '\n' && ch != O.delim)
				die("%s: line %" PRIu64 ": text after a closing quote (field %zu)", c->s.name,
				    c->next_line, c->nf + 1);
		}
		start = 0;
		if (ch == O.delim) {
			csv_endfield(c);
			start = 1;
			continue;
		}
		if (ch == EOF || ch == '\n') {
			if (ch == '\n')
				c->next_line++;
			csv_endfield(c);
			return 1;
		}
		if (ch == '\r' && src_peek(&c->s) == '\n')
			continue;
		csv_addc(c, (char)ch);
	}
}

/* Field i is f[off[i-1] .. off[i]-1), NUL-terminated (off[-1] taken as 0). */
static char *csv_field(csv *c, size_t i)
{
	return c->f + (i ? c->off[i - 1] : 0);
}

static size_t csv_flen(csv *c, size_t i)
{
	return c->off[i] - (i ? c->off[i - 1] : 0) - 1;
}

static int is_space(char ch)
{
	return ch == ' ' || ch == '\t';
}

static const char E_NOT_FLOAT[] = "is not a float", E_NOT_INT[] = "is not an int64";

/* Parse one number token [s, e) into value i; returns NULL or the reason. */
static const char *csv_number(int type, char *s, char *e, size_t i)
{
	char save = *e, *end;
	*e = 0;
	const char *why = NULL;
	errno = 0;
	if (type == T_FLOAT) {
		grow(&S.fv, &S.fcap, i + 1, sizeof *S.fv);
		double d = strtod(s, &end);
		if (end != e)
			why = E_NOT_FLOAT;
		else
			why = to_float(d, &S.fv[i]);
	} else {
		grow(&S.iv, &S.icap, i + 1, sizeof *S.iv);
		long long v = strtoll(s, &end, 10);
		if (end != e)
			why = E_NOT_INT;
		else if (errno == ERANGE)
			why = "is out of the int64 range";
		S.iv[i] = v;
	}
	*e = save;
	return why;
}

static void encode_csv(const char *path)
{
	csv c = {.next_line = 1};
	src_open(&c.s, path);
	const char *name = c.s.name;
	if (!csv_row(&c)) {
		if (!O.allow_empty)
			die("%s: empty input: no header row (--allow-empty accepts it)", name);
		src_close(&c.s);
		return;
	}
	/* a UTF-8 byte order mark before the header */
	if (csv_flen(&c, 0) >= 3 && !memcmp(c.f, "\xef\xbb\xbf", 3)) {
		memmove(c.f, c.f + 3, c.n - 3);
		c.n -= 3;
		for (size_t i = 0; i < c.nf; i++)
			c.off[i] -= 3;
	}
	size_t ncol = c.nf;
	char **names = xrealloc(NULL, ncol * sizeof *names);
	size_t *nlens = xrealloc(NULL, ncol * sizeof *nlens);
	int *types = xrealloc(NULL, ncol * sizeof *types), *lists = xrealloc(NULL, ncol * sizeof *lists);
	for (size_t i = 0; i < ncol; i++) {
		nlens[i] = csv_flen(&c, i);
		names[i] = xrealloc(NULL, nlens[i] + 1);
		memcpy(names[i], csv_field(&c, i), nlens[i] + 1);
		if (!dp_utf8_valid(names[i], nlens[i]))
			die("%s: line %" PRIu64 ": column %zu: the name is not valid UTF-8", name, c.line,
			    i + 1);
		for (size_t j = 0; j < i; j++)
			if (nlens[j] == nlens[i] && !memcmp(names[j], names[i], nlens[i]))
				die("%s: line %" PRIu64 ": column '%s' appears twice in the header", name,
				    c.line, names[i]);
		types[i] = T_BYTES;
		lists[i] = 0;
		for (size_t k = 0; k < ntspecs; k++)
			if (fnmatch(tspecs[k].pat, names[i], 0) == 0) {
				types[i] = tspecs[k].type;
				lists[i] = tspecs[k].list;
				break;
			}
	}
	uint64_t made = 0;
	while (!S.stop && csv_row(&c)) {
		if (c.nf != ncol)
			die("%s: line %" PRIu64 ": %zu fields, the header has %zu", name, c.line, c.nf, ncol);
		dp_exbuild_reset(&S.eb);
		for (size_t i = 0; i < ncol; i++) {
			if (types[i] == T_SKIP)
				continue;
			char *f = csv_field(&c, i), *fe = f + csv_flen(&c, i);
			size_t nv = 0;
			const char *why = NULL;
			if (types[i] == T_BYTES) {
				if (!lists[i]) {
					const uint8_t *p = (const uint8_t *)f;
					size_t l = (size_t)(fe - f);
					eb_check(dp_exbuild_bytes(&S.eb, names[i], nlens[i], &p, &l, 1));
					continue;
				}
				pool_reset();
				for (char *t = f; f < fe;) {
					char *sep = memchr(t, O.list_sep, (size_t)(fe - t));
					char *te = sep ? sep : fe;
					bytes_room(nv + 1);
					S.bp[nv] = (const uint8_t *)t;
					S.bl[nv++] = (size_t)(te - t);
					if (!sep)
						break;
					t = sep + 1;
				}
				eb_check(dp_exbuild_bytes(&S.eb, names[i], nlens[i], S.bp, S.bl, nv));
				continue;
			}
			/* numbers: tokens split on the list separator (and blanks) */
			char *t = f, *tok = f;
			for (;; t++) {
				int at_end = t == fe;
				if (at_end || *t == O.list_sep || is_space(*t)) {
					if (t > tok) {
						if (!lists[i] && nv == 1) {
							why = "holds more than one value (a list "
							      "column is typed TYPE[])";
							break;
						}
						if ((why = csv_number(types[i], tok, t, nv)))
							break;
						nv++;
					}
					tok = t + 1;
				}
				if (at_end)
					break;
			}
			if (why && lists[i] && (why == E_NOT_FLOAT || why == E_NOT_INT))
				why = why == E_NOT_FLOAT ? "holds a value that is not a float"
							 : "holds a value that is not an int64";
			if (why)
				die("%s: line %" PRIu64 ": column '%s': '%.*s' %s", name, c.line, names[i],
				    (int)(fe - f), f, why);
			if (types[i] == T_FLOAT)
				eb_check(dp_exbuild_floats(&S.eb, names[i], nlens[i], S.fv, nv));
			else
				eb_check(dp_exbuild_int64s(&S.eb, names[i], nlens[i], S.iv, nv));
		}
		if (eb_emit(name, made++))
			break;
	}
	if (!made && !S.stop && !O.allow_empty)
		die("%s: empty input: a header but no records (--allow-empty accepts it)", name);
	for (size_t i = 0; i < ncol; i++)
		free(names[i]);
	free(names);
	free(nlens);
	free(types);
	free(lists);
	free(c.f);
	free(c.off);
	src_close(&c.s);
}

/* ---- --encode idx ------------------------------------------------------------ */

/* An IDX file header: magic 0 0 TYPE NDIMS, then NDIMS big-endian u32. */
typedef struct idx {
	src s;
	int type, ndims;
	uint32_t dims[8];
	uint64_t count, item; /* items, bytes per item */
} idx;

static void idx_open(idx *x, const char *path, const char *what)
{
	uint8_t h[4];
	src_open(&x->s, path);
	if (src_raw(&x->s, h, 4) < 4 || h[0] || h[1])
		die("%s: not an IDX file (%s)", x->s.name, what);
	x->type = h[2];
	x->ndims = h[3];
	if (x->type != 0x08)
		die("%s: IDX element type 0x%02x: only unsigned bytes (0x08) are supported",
		    x->s.name, x->type);
	if (x->ndims < 1 || x->ndims > 8)
		die("%s: IDX file with %d dimensions", x->s.name, x->ndims);
	uint64_t item = 1;
	for (int i = 0; i < x->ndims; i++) {
		uint8_t d[4];
		if (src_raw(&x->s, d, 4) < 4)
			die("%s: truncated IDX header", x->s.name);
		x->dims[i] = (uint32_t)d[0] << 24 | (uint32_t)d[1] << 16 | (uint32_t)d[2] << 8 | d[3];
		if (i)
			item *= x->dims[i];
	}
	x->count = x->dims[0];
	x->item = item;
	x->s.off = 4 + 4 * (uint64_t)x->ndims;
}

static void encode_idx(const char *ipath, const char *lpath)
{
	idx im, lb;
	idx_open(&im, ipath, "images");
	idx_open(&lb, lpath, "labels");
	if (lb.ndims != 1)
		die("%s: a label file has one dimension, this one %d", lb.s.name, lb.ndims);
	if (im.count != lb.count)
		die("%s has %" PRIu64 " images but %s has %" PRIu64 " labels", im.s.name, im.count,
		    lb.s.name, lb.count);
	if (im.item > (1u << 30))
		die("%s: items of %" PRIu64 " bytes are too large", im.s.name, im.item);
	uint8_t *pix = xrealloc(NULL, im.item);
	size_t inl = strlen(O.image_name), lnl = strlen(O.label_name);
	for (uint64_t i = 0; i < im.count && !S.stop; i++) {
		uint8_t l;
		if (src_raw(&im.s, pix, im.item) < im.item)
			die("%s: truncated: image %" PRIu64 " of %" PRIu64 " at byte %" PRIu64 " is incomplete",
			    im.s.name, i, im.count, im.s.off);
		if (src_raw(&lb.s, &l, 1) < 1)
			die("%s: truncated: label %" PRIu64 " of %" PRIu64 " at byte %" PRIu64 " is missing",
			    lb.s.name, i, lb.count, lb.s.off);
		im.s.off += im.item;
		lb.s.off++;
		const uint8_t *pp = pix;
		size_t plen = im.item;
		int64_t lv = l;
		dp_exbuild_reset(&S.eb);
		eb_check(dp_exbuild_bytes(&S.eb, O.image_name, inl, &pp, &plen, 1));
		eb_check(dp_exbuild_int64s(&S.eb, O.label_name, lnl, &lv, 1));
		if (eb_emit(im.s.name, i))
			break;
	}
	if (!S.stop) {
		uint8_t extra;
		if (src_raw(&im.s, &extra, 1))
			die("%s: trailing bytes after %" PRIu64 " images", im.s.name, im.count);
		if (src_raw(&lb.s, &extra, 1))
			die("%s: trailing bytes after %" PRIu64 " labels", lb.s.name, lb.count);
		if (im.count == 0 && !O.allow_empty)
			die("%s: empty input: no images (--allow-empty accepts it)", im.s.name);
	}
	free(pix);
	src_close(&im.s);
	src_close(&lb.s);
}

/* ---- Command line ------------------------------------------------------------ */

static void help(void)
{
	printf("usage: tfr-cat [OPTION]... [FILE]...\n"
	       "Concatenate TFRecord files (or stdin) to stdout, checking every CRC; GZIP and\n"
	       "ZLIB inputs are detected.  Print records as JSON, count, verify, describe them,\n"
	       "or build tf.train.Example records from JSON lines, CSV or MNIST IDX files.\n"
	       "\n"
	       "Output (one of; default: the records themselves):\n"
	       "  -j, --json[=compact|proto]  one JSON object per Example per line: the compact\n"
	       "                         form of tfrecord(5), or protobuf's JSON mapping\n"
	       "  -c, --count            print the number of records\n"
	       "      --verify           also parse every record as an Example; print a summary\n"
	       "                         (records= bytes= files= corrupt=) or, with -c, the count\n"
	       "      --schema           print each feature's kind, how many records have it,\n"
	       "                         and the fewest/most values (and bytes per value) seen\n"
	       "  -z, --compress=none|gzip|zlib  compress the output records (default none)\n"
	       "      --level=N          compression level 1-9 (default: zlib's 6)\n"
	       "  -o, --output=FILE      write to FILE, whole or not at all (default stdout)\n"
	       "\n"
	       "Selection and damage:\n"
	       "  -n, --head=N           stop after N records\n"
	       "      --skip=N           pass over the first N records\n"
	       "      --skip-corrupt     go on past damaged records (and invalid Examples),\n"
	       "                         warning once per damaged region\n"
	       "      --max-record=SIZE  longest record accepted (default 256M)\n"
	       "      --allow-empty      an input with no records is not an error\n"
	       "\n"
	       "Encoding Examples (--encode=FORMAT reads FORMAT instead of TFRecords):\n"
	       "      --encode=json      JSON lines in the compact -j form\n"
	       "      --encode=json=proto  JSON lines in protobuf's JSON mapping (--json=proto)\n"
	       "      --encode=csv       CSV with a header row (RFC 4180)\n"
	       "      --encode=idx       IDX (MNIST) files: tfr-cat --encode=idx IMAGES LABELS\n"
	       "      --types=SPEC       CSV column types: PATTERN=TYPE,... with TYPE bytes,\n"
	       "                         float, int64 or skip, TYPE[] for a list cell; PATTERN\n"
	       "                         a shell glob; first match wins; default bytes\n"
	       "  -d, --delimiter=C      CSV field delimiter (default ','; 'tab' for TAB)\n"
	       "      --list-sep=C       separator of values in a list cell (default space)\n"
	       "      --image-feature=NAME  IDX: feature for the raw pixels (default image)\n"
	       "      --label-feature=NAME  IDX: feature for the class (default label)\n"
	       "\n"
	       "  -h, --help             this help\n"
	       "  -V, --version          version\n"
	       "\n"
	       "Exit status: 0 success, 1 failure (damaged input, I/O error), 2 usage.\n"
	       "See tfr-cat(1) and tfrecord(5).\n");
}

static uint64_t parse_count(const char *opt, const char *s)
{
	uint64_t v;
	dp_err e;
	if (dp_parse_count(opt, s, 0, UINT64_MAX, &v, &e))
		usage_error("%s", e.msg);
	return v;
}

static char parse_char(const char *opt, const char *s)
{
	if (!strcmp(s, "tab") || !strcmp(s, "\\t"))
		return '\t';
	if (strlen(s) != 1 || s[0] == '\n' || s[0] == '\r' || s[0] == '"')
		usage_error("%s: '%s' is not a single character", opt, s);
	return s[0];
}

enum {
	OPT_SKIP = 256, OPT_VERIFY, OPT_SCHEMA, OPT_SKIP_CORRUPT, OPT_MAX_RECORD, OPT_ALLOW_EMPTY,
	OPT_ENCODE, OPT_TYPES, OPT_LIST_SEP, OPT_IMAGE, OPT_LABEL, OPT_LEVEL
};

int main(int argc, char **argv)
{
	static const struct option lopts[] = {
		{"json", optional_argument, NULL, 'j'},
		{"count", no_argument, NULL, 'c'},
		{"head", required_argument, NULL, 'n'},
		{"skip", required_argument, NULL, OPT_SKIP},
		{"verify", no_argument, NULL, OPT_VERIFY},
		{"schema", no_argument, NULL, OPT_SCHEMA},
		{"skip-corrupt", no_argument, NULL, OPT_SKIP_CORRUPT},
		{"max-record", required_argument, NULL, OPT_MAX_RECORD},
		{"allow-empty", no_argument, NULL, OPT_ALLOW_EMPTY},
		{"compress", required_argument, NULL, 'z'},
		{"level", required_argument, NULL, OPT_LEVEL},
		{"output", required_argument, NULL, 'o'},
		{"encode", required_argument, NULL, OPT_ENCODE},
		{"types", required_argument, NULL, OPT_TYPES},
		{"delimiter", required_argument, NULL, 'd'},
		{"list-sep", required_argument, NULL, OPT_LIST_SEP},
		{"image-feature", required_argument, NULL, OPT_IMAGE},
		{"label-feature", required_argument, NULL, OPT_LABEL},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{0, 0, 0, 0},
	};
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":j::cn:z:o:d:hV", lopts, NULL)) != -1) {
		switch (c) {
		case 'j':
			if (!optarg || !strcmp(optarg, "compact"))
				O.json = JS_COMPACT;
			else if (!strcmp(optarg, "proto"))
				O.json = JS_PROTO;
			else
				usage_error("--json: '%s' is not compact or proto", optarg);
			break;
		case 'c': O.count = 1; break;
		case 'n': O.head = parse_count("--head", optarg); break;
		case OPT_SKIP: O.skip = parse_count("--skip", optarg); break;
		case OPT_VERIFY: O.verify = 1; break;
		case OPT_SCHEMA: O.schema = 1; break;
		case OPT_SKIP_CORRUPT: O.skip_corrupt = 1; break;
		case OPT_ALLOW_EMPTY: O.allow_empty = 1; break;
		case OPT_MAX_RECORD:
			if (dp_parse_size(optarg, &O.max_record) < 0 || O.max_record == 0)
				usage_error("--max-record: '%s' is not a size", optarg);
			break;
		case 'z':
			O.comp = dp_comp_parse(optarg);
			if (O.comp < 0 || O.comp == DP_COMP_AUTO)
				usage_error("--compress: '%s' is not none, gzip or zlib", optarg);
			break;
		case OPT_LEVEL: {
			char *end;
			long v = strtol(optarg, &end, 10);
			if (*end || !*optarg || v < 0 || v > 9)
				usage_error("--level: '%s' is not 0-9", optarg);
			O.level = (int)v;
			break;
		}
		case 'o': O.output = optarg; break;
		case OPT_ENCODE:
			if (!strcmp(optarg, "json") || !strcmp(optarg, "json=compact"))
				O.encode = ENC_JSON;
			else if (!strcmp(optarg, "json=proto"))
				O.encode = ENC_JSON_PROTO;
			else if (!strcmp(optarg, "csv"))
				O.encode = ENC_CSV;
			else if (!strcmp(optarg, "idx"))
				O.encode = ENC_IDX;
			else
				usage_error("--encode: '%s' is not json, json=proto, csv or idx", optarg);
			break;
		case OPT_TYPES: {
			size_t old = O.types ? strlen(O.types) : 0, add = strlen(optarg);
			O.types = xrealloc(O.types, old + add + 2);
			if (old)
				O.types[old++] = ',';
			memcpy(O.types + old, optarg, add + 1);
			break;
		}
		case 'd': O.delim = parse_char("--delimiter", optarg); break;
		case OPT_LIST_SEP: O.list_sep = parse_char("--list-sep", optarg); break;
		case OPT_IMAGE: O.image_name = optarg; break;
		case OPT_LABEL: O.label_name = optarg; break;
		case 'h':
			help();
			if (fflush(stdout) || ferror(stdout) || fclose(stdout))
				die("stdout: %s", strerror(errno));
			return 0;
		case 'V':
			printf("tfr-cat (dptools) %s\n", DP_VERSION);
			if (fflush(stdout) || ferror(stdout) || fclose(stdout))
				die("stdout: %s", strerror(errno));
			return 0;
		case ':':
			usage_error("option %s needs a value", argv[optind - 1]);
		default:
			if (optopt)
				usage_error("unknown option -%c", optopt);
			usage_error("unknown option %s", argv[optind - 1]);
		}
	}

	/* the output mode */
	int modes = (O.json != 0) + O.count + O.schema;
	if (modes > 1)
		usage_error("choose one of -j, -c and --schema");
	if (O.json && O.verify)
		usage_error("-j already checks every Example: drop --verify");
	S.mode = O.json ? OUT_JSON : O.count ? OUT_COUNT : O.schema ? OUT_SCHEMA
		 : O.verify ? OUT_VERIFY : OUT_RECORDS;
	S.need_parse = O.json || O.schema || O.verify;
	if (S.mode != OUT_RECORDS && (O.comp != DP_COMP_NONE || O.level >= 0))
		usage_error("-z and --level apply to record output only");
	if (O.encode != ENC_CSV && (O.types || O.delim != ',' || O.list_sep != ' '))
		usage_error("--types, --delimiter and --list-sep go with --encode=csv");
	if (O.encode == ENC_CSV && O.types)
		parse_types(O.types);
	if (O.encode == ENC_IDX && argc - optind != 2)
		usage_error("--encode=idx takes two files: IMAGES LABELS");
	if (O.encode != ENC_IDX && (strcmp(O.image_name, "image") || strcmp(O.label_name, "label")))
		usage_error("--image-feature and --label-feature go with --encode=idx");
	if (O.encode == ENC_IDX && (!*O.image_name || !*O.label_name ||
				    !strcmp(O.image_name, O.label_name)))
		usage_error("--image-feature and --label-feature must be two different names");
	S.skip_left = O.skip;

	dp_out_install_signal_cleanup();
	open_output();

	char *stdin_only[] = {"-", NULL};
	char **files = optind < argc ? argv + optind : stdin_only;
	if (O.head == 0)
		S.stop = 1;
	if (O.encode == ENC_IDX) {
		if (!S.stop)
			encode_idx(files[0], files[1]);
	} else {
		for (; *files && !S.stop; files++) {
			switch (O.encode) {
			case ENC_NONE: read_tfrecords(*files); break;
			case ENC_JSON: encode_json(*files, 0); break;
			case ENC_JSON_PROTO: encode_json(*files, 1); break;
			case ENC_CSV: encode_csv(*files); break;
			}
		}
	}

	switch (S.mode) {
	case OUT_COUNT:
		ob_printf("%" PRIu64 "\n", S.emitted);
		break;
	case OUT_SCHEMA:
		schema_print();
		break;
	case OUT_VERIFY:
		ob_printf("records=%" PRIu64 " bytes=%" PRIu64 " files=%" PRIu64 " corrupt=%" PRIu64
			  " status=%s\n",
			  S.emitted, S.bytes, S.files, S.corrupt, S.corrupt ? "corrupt" : "ok");
		break;
	}
	close_output();
	if (S.corrupt) {
		warn("skipped %" PRIu64 " damaged record%s", S.corrupt, S.corrupt == 1 ? "" : "s");
		if (O.verify)
			return 1;
	}
	dp_exbuild_free(&S.eb);
	dp_example_free(&S.ex);
	return 0;
}
