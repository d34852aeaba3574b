/*
 * encode.c - the encoders of dp_encode.h: files of JSON lines, CSV and IDX
 * read as a stream of tf.train.Example records.
 *
 * Every input is a byte source: a file or stdin read through zlib (so a
 * gzip-compressed file is read as it is), or memory.  The first failure
 * sticks in the encoder (x->rc, x->err): a read error ends the source as an
 * end of file would, and whatever the parser says after it is dropped, so
 * the message is the read error's.
 */
#define _GNU_SOURCE
#include "dp_encode.h"
#include "enc_int.h"

#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

/* ---- Byte sources ---------------------------------------------------------- */

/* Where a source comes from: path ("-": stdin), else len bytes at mem. */
typedef struct input {
	const char *path;
	const void *mem;
	size_t len;
	const char *name;
} input;

typedef struct src {
	gzFile g;            /* NULL: memory */
	const uint8_t *mem;
	size_t mem_len, mem_pos;
	char *name;
	dp_buf buf;          /* read ahead: [pos, buf.len) not consumed */
	size_t pos;
	int eof;
	uint64_t off;        /* uncompressed offset of buf.p[pos] */
} src;

/* CSV column types from the spec. */
enum { T_BYTES = DP_KIND_BYTES, T_FLOAT = DP_KIND_FLOAT, T_INT64 = DP_KIND_INT64, T_SKIP = 9 };

typedef struct tspec {
	const char *pat;
	int type, list;
} tspec;

/* One column of the header row. */
typedef struct ccol {
	char *name;          /* NUL-terminated; a name may hold NULs */
	size_t nlen;
	int type, list;      /* the first spec pattern that matches the name */
} ccol;

typedef struct csv {
	char *spec;          /* the types spec, cut into patterns */
	tspec *ts;
	size_t nts;
	dp_buf f;            /* the row's fields, each NUL-terminated */
	dp_buf off;          /* size_t: the end of each field in f (past its NUL) */
	size_t nf;
	uint64_t line;       /* physical line where the row starts (from 1) */
	uint64_t next_line;
	int header;          /* a header row was read */
	size_t ncol;
	ccol *cols;
} csv;

/* An IDX file header: magic 0 0 TYPE NDIMS, then NDIMS big-endian u32. */
typedef struct idx {
	int type, ndims;
	uint32_t dims[8];
	uint64_t count, item; /* items, bytes per item */
} idx;

struct dp_encoder {
	dp_enc_opts o;
	size_t image_len, label_len; /* of o.image_name, o.label_name */
	int rc;          /* the first failure, sticky */
	dp_err err;
	src s, s2;       /* the input (IDX: images, then labels) */
	uint64_t made;   /* records returned */
	uint64_t line;   /* JSON: lines read */
	dp_exjson *j;
	dp_exbuild eb;
	enc_vals v;
	csv c;
	idx im, lb;
};

static const char E_NOMEM[] = "out of memory building an Example";

/* Record a failure unless one is recorded already.  Returns x->rc. */
static int __attribute__((format(printf, 3, 4))) fail(dp_encoder *x, int code, const char *fmt, ...)
{
	if (x->rc)
		return x->rc;
	va_list ap;
	va_start(ap, fmt);
	dp_vseterr(&x->err, code, fmt, ap);
	va_end(ap);
	return x->rc = code;
}

static int src_open(dp_encoder *x, src *s, const input *in)
{
	dp_buf_init(&s->buf, 0);
	if (!in->path) {
		s->mem = in->mem;
		s->mem_len = in->len;
		s->name = strdup(in->name ? in->name : "memory");
	} else {
		s->name = strdup(strcmp(in->path, "-") ? in->path : "stdin");
	}
	if (!s->name || dp_buf_reserve(&s->buf, 256u << 10) < 0)
		return fail(x, DP_ENOMEM, "out of memory");
	if (!in->path)
		return 0;
	int fd = strcmp(in->path, "-") ? open(in->path, O_RDONLY | O_CLOEXEC) : dup(STDIN_FILENO);
	if (fd < 0)
		return fail(x, errno == ENOMEM ? DP_ENOMEM : DP_EIO, "%s: %s", s->name, strerror(errno));
	if (!(s->g = gzdopen(fd, "rb"))) {
		close(fd);
		return fail(x, DP_ENOMEM, "%s: out of memory", s->name);
	}
	gzbuffer(s->g, 256u << 10);
	return 0;
}

static void src_close(src *s)
{
	if (s->g)
		gzclose(s->g);
	free(s->name);
	dp_buf_free(&s->buf);
}

/* A failure of gzread: the compressed byte where zlib stopped (gzoffset),
 * and for the checks of the trailer, where the trailer is (inflate fails
 * on its CRC-32 with those 4 bytes read, on ISIZE with all 8). */
static void src_fail(dp_encoder *x, src *s, int zerr, const char *msg)
{
	if (zerr == Z_ERRNO) {
		fail(x, DP_EIO, "%s: read: %s", s->name, strerror(errno));
		return;
	}
	if (zerr == Z_MEM_ERROR) {
		fail(x, DP_ENOMEM, "%s: out of memory", s->name);
		return;
	}
	const char *colon = strncmp(msg, "<fd:", 4) ? NULL : strstr(msg, ": ");
	if (colon) /* gzerror says "<fd:3>: why" for gzdopen's descriptor */
		msg = colon + 2;
	long long at = (long long)gzoffset(s->g);
	int crc = !strcmp(msg, "incorrect data check"), len = !strcmp(msg, "incorrect length check");
	if (zerr == Z_BUF_ERROR)
		fail(x, DP_EDATA, "%s: truncated gzip stream (it ends at compressed byte %lld)", s->name,
		     at);
	else if ((crc || len) && at >= (crc ? 4 : 8))
		fail(x, DP_EDATA, "%s: gzip trailer at compressed bytes %lld-%lld: %s", s->name,
		     at - (crc ? 4 : 8), at - (crc ? 4 : 8) + 7,
		     crc ? "CRC-32 of the data does not match"
			 : "length of the data (ISIZE) does not match");
	else
		fail(x, DP_EDATA, "%s: corrupt gzip data near compressed byte %lld: %s", s->name, at,
		     msg);
}

/* Read up to n bytes into p: the count (short at the end), 0 after a
 * failure (recorded). */
static size_t src_raw(dp_encoder *x, src *s, void *p, size_t n)
{
	if (x->rc)
		return 0;
	if (!s->g) {
		size_t k = s->mem_len - s->mem_pos < n ? s->mem_len - s->mem_pos : n;
		if (k)
			memcpy(p, s->mem + s->mem_pos, k);
		s->mem_pos += k;
		return k;
	}
	size_t got = 0;
	while (got < n) {
		unsigned k = n - got > (1u << 30) ? 1u << 30 : (unsigned)(n - got);
		int r = gzread(s->g, (char *)p + got, k);
		int zerr;
		const char *msg = gzerror(s->g, &zerr);
		if (r < 0 || zerr != Z_OK) {
			src_fail(x, s, zerr, msg);
			return 0;
		}
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return got;
}

/* Refill the buffer after [pos, len), keeping those bytes.  0 at the end. */
static int src_fill(dp_encoder *x, src *s)
{
	dp_buf *b = &s->buf;
	if (s->eof)
		return 0;
	if (s->pos > 0) {
		memmove(b->p, b->p + s->pos, b->len - s->pos);
		b->len -= s->pos;
		s->pos = 0;
	}
	if (b->len + 1 == b->cap && dp_buf_reserve(b, b->cap) < 0) {
		fail(x, DP_ENOMEM, "%s: out of memory", s->name);
		s->eof = 1;
		return 0;
	}
	size_t k = src_raw(x, s, b->p + b->len, b->cap - 1 - b->len);
	if (k == 0)
		s->eof = 1;
	b->len += k;
	b->p[b->len] = 0;
	return k > 0;
}

static inline int src_getc(dp_encoder *x, src *s)
{
	if (s->pos == s->buf.len && !src_fill(x, s))
		return EOF;
	s->off++;
	return (unsigned char)s->buf.p[s->pos++];
}

static inline int src_peek(dp_encoder *x, src *s)
{
	if (s->pos == s->buf.len && !src_fill(x, s))
		return EOF;
	return (unsigned char)s->buf.p[s->pos];
}

/* The next line without its "\n" or "\r\n", NUL-terminated in place; its
 * length, or -1 at the end.  Valid until the next call. */
static long src_line(dp_encoder *x, src *s, char **line)
{
	dp_buf *b = &s->buf;
	size_t scan = s->pos;
	for (;;) {
		char *nl = memchr(b->p + scan, '\n', b->len - scan);
		size_t n = nl ? (size_t)(nl - (b->p + s->pos)) : b->len - s->pos;
		if (nl || (s->eof && n)) {
			*line = b->p + s->pos;
			s->off += n + (nl != NULL);
			s->pos += n + (nl != NULL);
			if (n && (*line)[n - 1] == '\r')
				n--;
			(*line)[n] = 0; /* the "\n", or the buffer's NUL */
			return (long)n;
		}
		if (s->eof)
			return -1;
		size_t done = b->len - s->pos;
		src_fill(x, s);
		scan = s->pos + done;
	}
}

/* A UTF-8 byte order mark at the very start of a text input (JSON lines,
 * CSV) is passed over, as editors on Windows write one; one anywhere else
 * is data (and invalid JSON). */
static void src_skip_bom(dp_encoder *x, src *s)
{
	while (s->buf.len - s->pos < 3 && src_fill(x, s))
		;
	if (s->buf.len - s->pos >= 3 && !memcmp(s->buf.p + s->pos, "\xef\xbb\xbf", 3)) {
		s->pos += 3;
		s->off += 3;
	}
}

/* ---- JSON lines ------------------------------------------------------------ */

static int json_next(dp_encoder *x, const uint8_t **rec, size_t *len)
{
	char *line;
	long n;
	while ((n = src_line(x, &x->s, &line)) >= 0 && !x->rc) {
		x->line++;
		size_t i = 0;
		while (i < (size_t)n && strchr(" \t\r", line[i]))
			i++;
		if (i == (size_t)n)
			continue; /* blank line */
		int form = x->o.format == DP_ENC_JSON_PROTO ? DP_JSON_PROTO : DP_JSON_COMPACT;
		int rc = dp_exjson_parse(x->j, line, (size_t)n, form, rec, len, &x->err);
		if (rc == DP_EDATA)
			dp_preferr(&x->err, "%s: line %" PRIu64, x->s.name, x->line);
		if (rc < 0)
			return x->rc = rc;
		return 1;
	}
	if (!x->rc && !x->made && !x->o.allow_empty)
		fail(x, DP_EDATA, "%s: empty input: no records (--allow-empty accepts it)", x->s.name);
	return x->rc;
}

/* ---- CSV ------------------------------------------------------------------- */

/* Parse a types spec into c (patterns point into c->spec). */
static int types_parse(csv *c, const char *spec, dp_err *e)
{
	if (!spec)
		return 0;
	if (!(c->spec = strdup(spec)))
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	char *save = NULL;
	for (char *tok = strtok_r(c->spec, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *eq = strrchr(tok, '=');
		if (!eq || eq == tok)
			return dp_seterr(e, DP_EARG, "'%s' is not PATTERN=TYPE", tok);
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
			return dp_seterr(e, DP_EARG,
					 "unknown type '%s' for '%s' (bytes, float, int64, skip; add [] "
					 "for a list)",
					 t, tok);
		tspec *n = realloc(c->ts, (c->nts + 1) * sizeof *n);
		if (!n)
			return dp_seterr(e, DP_ENOMEM, "out of memory");
		c->ts = n;
		c->ts[c->nts++] = ts;
	}
	return 0;
}

static void csv_free(csv *c)
{
	for (size_t i = 0; c->cols && i < c->ncol; i++)
		free(c->cols[i].name);
	free(c->cols);
	free(c->spec);
	free(c->ts);
	dp_buf_free(&c->f);
	dp_buf_free(&c->off);
}

int dp_csv_types_check(const char *spec, dp_err *e)
{
	csv c = {0};
	int rc = types_parse(&c, spec, e);
	csv_free(&c);
	return rc;
}

static inline int csv_addc(dp_encoder *x, char ch)
{
	dp_buf *f = &x->c.f;
	if (f->len + 2 > f->cap && dp_buf_reserve(f, 1) < 0)
		return fail(x, DP_ENOMEM, "out of memory");
	f->p[f->len++] = ch;
	return 0;
}

static int csv_endfield(dp_encoder *x)
{
	csv *c = &x->c;
	size_t *off = enc_room(&c->off, c->nf + 1, sizeof *off);
	if (csv_addc(x, 0) < 0 || !off)
		return fail(x, DP_ENOMEM, "out of memory");
	off[c->nf++] = c->f.len;
	return 0;
}

/* The rest of a quoted field, its closing quote and what ends the field:
 * that character, or EOF. */
static int csv_quoted(dp_encoder *x)
{
	csv *c = &x->c;
	int ch;
	for (;;) {
		ch = src_getc(x, &x->s);
		if (ch == EOF) {
			fail(x, DP_EDATA, "%s: line %" PRIu64 ": unterminated quoted field", x->s.name,
			     c->line);
			return EOF;
		}
		if (ch == '\n')
			c->next_line++;
		if (ch == '"') {
			if (src_peek(x, &x->s) != '"')
				break;
			src_getc(x, &x->s);
		}
		if (csv_addc(x, (char)ch) < 0)
			return EOF;
	}
	ch = src_getc(x, &x->s);
	if (ch == '\r' && src_peek(x, &x->s) == '\n')
		ch = src_getc(x, &x->s);
	if (ch != EOF && ch != '\n' && ch != x->o.delim)
		fail(x, DP_EDATA, "%s: line %" PRIu64 ": text after a closing quote (field %zu)",
		     x->s.name, c->next_line, c->nf + 1);
	return ch;
}

/* Skip empty lines before a row.  0 at the end. */
static int csv_skip_empty(dp_encoder *x)
{
	csv *c = &x->c;
	for (;;) {
		c->f.len = 0;
		c->nf = 0;
		c->line = c->next_line;
		int ch = src_peek(x, &x->s);
		if (ch == EOF)
			return 0;
		if (ch == '\n') {
			src_getc(x, &x->s);
			c->next_line++;
			continue;
		}
		if (ch == '\r') {
			src_getc(x, &x->s);
			if (src_peek(x, &x->s) == '\n') {
				src_getc(x, &x->s);
				c->next_line++;
				continue;
			}
			csv_addc(x, '\r');
		}
		return 1;
	}
}

/* The next row (RFC 4180: quoted fields with "" escapes and line breaks,
 * CRLF or LF).  Empty lines are skipped.  Returns 1, 0 at the end, or a
 * failure. */
static int csv_row(dp_encoder *x)
{
	csv *c = &x->c;
	if (!csv_skip_empty(x))
		return x->rc;
	int start = c->f.len == 0;
	for (;;) {
		int ch = src_getc(x, &x->s);
		if (start && ch == '"')
			ch = csv_quoted(x);
		if (x->rc)
			return x->rc;
		start = 0;
		if (ch == x->o.delim) {
			if (csv_endfield(x) < 0)
				return x->rc;
			start = 1;
			continue;
		}
		if (ch == EOF || ch == '\n') {
			if (ch == '\n')
				c->next_line++;
			return csv_endfield(x) < 0 ? x->rc : 1;
		}
		if (ch == '\r' && src_peek(x, &x->s) == '\n')
			continue;
		if (csv_addc(x, (char)ch) < 0)
			return x->rc;
	}
}

/* Field i is f[off[i-1] .. off[i]-1), NUL-terminated (off[-1] taken as 0). */
static char *csv_field(const csv *c, size_t i)
{
	return c->f.p + (i ? ((const size_t *)c->off.p)[i - 1] : 0);
}

static size_t csv_flen(const csv *c, size_t i)
{
	const size_t *off = (const size_t *)c->off.p;
	return off[i] - (i ? off[i - 1] : 0) - 1;
}

/* The header row: feature names, their types.  No header row: the end. */
static int csv_header(dp_encoder *x)
{
	csv *c = &x->c;
	const char *name = x->s.name;
	c->next_line = 1;
	int rc = csv_row(x);
	if (rc <= 0) {
		if (!rc && !x->o.allow_empty)
			fail(x, DP_EDATA, "%s: empty input: no header row (--allow-empty accepts it)", name);
		return x->rc;
	}
	c->header = 1;
	size_t ncol = c->nf;
	if (!(c->cols = calloc(ncol, sizeof *c->cols)))
		return fail(x, DP_ENOMEM, "out of memory");
	c->ncol = ncol;
	for (size_t i = 0; i < ncol; i++) {
		ccol *col = &c->cols[i];
		col->nlen = csv_flen(c, i);
		if (!(col->name = malloc(col->nlen + 1)))
			return fail(x, DP_ENOMEM, "out of memory");
		memcpy(col->name, csv_field(c, i), col->nlen + 1);
		if (!dp_utf8_valid(col->name, col->nlen))
			return fail(x, DP_EDATA, "%s: line %" PRIu64 ": column %zu: the name is not valid UTF-8",
				    name, c->line, i + 1);
		for (size_t j = 0; j < i; j++)
			if (c->cols[j].nlen == col->nlen && !memcmp(c->cols[j].name, col->name, col->nlen))
				return fail(x, DP_EDATA, "%s: line %" PRIu64 ": column '%s' appears twice in the header",
					    name, c->line, col->name);
		col->type = T_BYTES;
		for (size_t k = 0; k < c->nts; k++)
			if (fnmatch(c->ts[k].pat, col->name, 0) == 0) {
				col->type = c->ts[k].type;
				col->list = c->ts[k].list;
				break;
			}
	}
	return 0;
}

static const char E_NOT_FLOAT[] = "is not a float", E_NOT_INT[] = "is not an int64";

static int is_space(char ch)
{
	return ch == ' ' || ch == '\t';
}

/* Parse one number token [s, e) into value i; returns NULL or the reason. */
static const char *csv_number(enc_vals *v, int type, char *s, char *e, size_t i)
{
	char save = *e, *end;
	*e = 0;
	const char *why = NULL;
	errno = 0;
	if (type == T_FLOAT) {
		float *fv = enc_room(&v->fv, i + 1, sizeof *fv);
		double d = strtod(s, &end);
		if (!fv)
			why = E_NOMEM;
		else if (end != e)
			why = E_NOT_FLOAT;
		else
			why = enc_to_float(d, &fv[i]);
	} else {
		int64_t *iv = enc_room(&v->iv, i + 1, sizeof *iv);
		long long n = strtoll(s, &end, 10);
		if (!iv)
			why = E_NOMEM;
		else if (end != e)
			why = E_NOT_INT;
		else if (errno == ERANGE)
			why = "is out of the int64 range";
		else
			iv[i] = n;
	}
	*e = save;
	return why;
}

/* Value nv of a bytes cell: [t, te). */
static int csv_push(enc_vals *v, size_t nv, const char *t, const char *te)
{
	if (enc_bytes_room(v, nv + 1) < 0)
		return -1;
	((const uint8_t **)v->bp.p)[nv] = (const uint8_t *)t;
	((size_t *)v->bl.p)[nv] = (size_t)(te - t);
	return 0;
}

/* A bytes cell [f, fe): one value, or for a list, values split exactly on
 * the list separator (none in an empty cell). */
static const char *csv_bytes(dp_encoder *x, size_t i, char *f, char *fe)
{
	const ccol *col = &x->c.cols[i];
	size_t nv = 0;
	if (!col->list) {
		if (csv_push(&x->v, nv++, f, fe) < 0)
			return E_NOMEM;
	} else {
		for (char *t = f; f < fe;) {
			char *sep = memchr(t, x->o.list_sep, (size_t)(fe - t));
			if (csv_push(&x->v, nv++, t, sep ? sep : fe) < 0)
				return E_NOMEM;
			if (!sep)
				break;
			t = sep + 1;
		}
	}
	if (enc_bytes_room(&x->v, nv) < 0)
		return E_NOMEM;
	return dp_exbuild_bytes(&x->eb, col->name, col->nlen, (const uint8_t **)x->v.bp.p,
				(size_t *)x->v.bl.p, nv) < 0
		       ? E_NOMEM
		       : NULL;
}

/* A number cell [f, fe): tokens split on the list separator and blanks. */
static const char *csv_numbers(dp_encoder *x, size_t i, char *f, char *fe)
{
	const ccol *col = &x->c.cols[i];
	size_t nv = 0;
	const char *why = NULL;
	for (char *t = f, *tok = f;; t++) {
		int at_end = t == fe;
		if (at_end || *t == x->o.list_sep || is_space(*t)) {
			if (t > tok) {
				if (!col->list && nv == 1)
					return "holds more than one value (a list column is typed TYPE[])";
				if ((why = csv_number(&x->v, col->type, tok, t, nv)))
					break;
				nv++;
			}
			tok = t + 1;
		}
		if (at_end)
			break;
	}
	if (why && col->list && (why == E_NOT_FLOAT || why == E_NOT_INT))
		why = why == E_NOT_FLOAT ? "holds a value that is not a float"
					 : "holds a value that is not an int64";
	if (why)
		return why;
	int rc = col->type == T_FLOAT
			 ? dp_exbuild_floats(&x->eb, col->name, col->nlen,
					     enc_room(&x->v.fv, nv, sizeof(float)), nv)
			 : dp_exbuild_int64s(&x->eb, col->name, col->nlen,
					     enc_room(&x->v.iv, nv, sizeof(int64_t)), nv);
	return rc < 0 ? E_NOMEM : NULL;
}

static int csv_next(dp_encoder *x, const uint8_t **rec, size_t *len)
{
	csv *c = &x->c;
	int rc = c->header ? csv_row(x) : 0;
	if (rc <= 0) {
		if (!rc && c->header && !x->made && !x->o.allow_empty)
			fail(x, DP_EDATA,
			     "%s: empty input: a header but no records (--allow-empty accepts it)",
			     x->s.name);
		return x->rc;
	}
	if (c->nf != c->ncol)
		return fail(x, DP_EDATA, "%s: line %" PRIu64 ": %zu fields, the header has %zu",
			    x->s.name, c->line, c->nf, c->ncol);
	dp_exbuild_reset(&x->eb);
	for (size_t i = 0; i < c->ncol; i++) {
		const ccol *col = &c->cols[i];
		if (col->type == T_SKIP)
			continue;
		char *f = csv_field(c, i), *fe = f + csv_flen(c, i);
		const char *why = col->type == T_BYTES ? csv_bytes(x, i, f, fe)
						       : csv_numbers(x, i, f, fe);
		if (why == E_NOMEM)
			return fail(x, DP_ENOMEM, "%s", E_NOMEM);
		if (why) { /* the cell quoted escaped (a control character, ESC) */
			char *cell = dp_shown(f, (size_t)(fe - f) > 80 ? 80 : (size_t)(fe - f));
			int frc = fail(x, DP_EDATA, "%s: line %" PRIu64 ": column '%s': '%s' %s",
				      x->s.name, c->line, col->name, cell ? cell : "?", why);
			free(cell);
			return frc;
		}
	}
	if (dp_exbuild_finish(&x->eb, rec, len) < 0)
		return fail(x, DP_ENOMEM, "%s", E_NOMEM);
	return 1;
}

/* ---- IDX ------------------------------------------------------------------- */

static int idx_header(dp_encoder *x, src *s, idx *h, const char *what)
{
	uint8_t b[4];
	if (src_raw(x, s, b, 4) < 4 || b[0] || b[1])
		return fail(x, DP_EDATA, "%s: not an IDX file (%s)", s->name, what);
	h->type = b[2];
	h->ndims = b[3];
	if (h->type != 0x08)
		return fail(x, DP_EDATA,
			    "%s: IDX element type 0x%02x: only unsigned bytes (0x08) are supported",
			    s->name, h->type);
	if (h->ndims < 1 || h->ndims > 8)
		return fail(x, DP_EDATA, "%s: IDX file with %d dimensions", s->name, h->ndims);
	uint64_t item = 1;
	for (int i = 0; i < h->ndims; i++) {
		if (src_raw(x, s, b, 4) < 4)
			return fail(x, DP_EDATA, "%s: truncated IDX header", s->name);
		h->dims[i] = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
		/* bytes per item: the product of dimensions 1.. (0 counts items) */
		if (i && __builtin_mul_overflow(item, h->dims[i], &item))
			return fail(x, DP_EDATA,
				    "%s: IDX header: dimension %d (%" PRIu32 ") makes the size of an "
				    "item overflow 64 bits",
				    s->name, i, h->dims[i]);
	}
	h->count = h->dims[0];
	h->item = item;
	s->off = 4 + 4 * (uint64_t)h->ndims;
	return 0;
}

static int idx_start(dp_encoder *x, const input *labels)
{
	if (idx_header(x, &x->s, &x->im, "images") < 0 || src_open(x, &x->s2, labels) < 0 ||
	    idx_header(x, &x->s2, &x->lb, "labels") < 0)
		return x->rc;
	const char *in = x->s.name, *ln = x->s2.name;
	if (x->lb.ndims != 1)
		return fail(x, DP_EDATA, "%s: a label file has one dimension, this one %d", ln,
			    x->lb.ndims);
	if (x->im.count != x->lb.count)
		return fail(x, DP_EDATA, "%s has %" PRIu64 " images but %s has %" PRIu64 " labels", in,
			    x->im.count, ln, x->lb.count);
	if (x->im.item > (1u << 30))
		return fail(x, DP_EDATA, "%s: IDX header: items of %" PRIu64 " bytes, more than 1 GiB",
			    in, x->im.item);
	return 0;
}

/* Past the last item: no bytes may follow, and no items is no input. */
static int idx_end(dp_encoder *x)
{
	uint8_t extra;
	if (src_raw(x, &x->s, &extra, 1))
		return fail(x, DP_EDATA, "%s: trailing bytes after %" PRIu64 " images", x->s.name,
			    x->im.count);
	if (src_raw(x, &x->s2, &extra, 1))
		return fail(x, DP_EDATA, "%s: trailing bytes after %" PRIu64 " labels", x->s2.name,
			    x->lb.count);
	if (x->im.count == 0 && !x->o.allow_empty)
		return fail(x, DP_EDATA, "%s: empty input: no images (--allow-empty accepts it)",
			    x->s.name);
	return x->rc;
}

static int idx_next(dp_encoder *x, const uint8_t **rec, size_t *len)
{
	uint64_t i = x->made;
	if (i == x->im.count)
		return idx_end(x);
	uint8_t *pix = enc_room(&x->v.pool, x->im.item, 1);
	uint8_t l;
	if (!pix)
		return fail(x, DP_ENOMEM, "out of memory");
	if (src_raw(x, &x->s, pix, x->im.item) < x->im.item)
		return fail(x, DP_EDATA,
			    "%s: truncated: image %" PRIu64 " of %" PRIu64 " at byte %" PRIu64
			    " is incomplete",
			    x->s.name, i, x->im.count, x->s.off);
	if (src_raw(x, &x->s2, &l, 1) < 1)
		return fail(x, DP_EDATA,
			    "%s: truncated: label %" PRIu64 " of %" PRIu64 " at byte %" PRIu64
			    " is missing",
			    x->s2.name, i, x->lb.count, x->s2.off);
	x->s.off += x->im.item;
	x->s2.off++;
	const uint8_t *pp = pix;
	size_t plen = x->im.item;
	int64_t lv = l;
	dp_exbuild_reset(&x->eb);
	if (dp_exbuild_bytes(&x->eb, x->o.image_name, x->image_len, &pp, &plen, 1) < 0 ||
	    dp_exbuild_int64s(&x->eb, x->o.label_name, x->label_len, &lv, 1) < 0 ||
	    dp_exbuild_finish(&x->eb, rec, len) < 0)
		return fail(x, DP_ENOMEM, "%s", E_NOMEM);
	return 1;
}

/* ---- The encoder ----------------------------------------------------------- */

static dp_encoder *enc_open(const input *in, const input *labels, const dp_enc_opts *o, dp_err *e)
{
	dp_encoder *x = dp_zalloc(sizeof *x, e);
	if (!x)
		return NULL;
	enc_vals_init(&x->v);
	dp_buf_init(&x->c.f, 0);
	dp_buf_init(&x->c.off, 0);
	x->o = *o;
	x->o.delim = o->delim ? o->delim : ',';
	x->o.list_sep = o->list_sep ? o->list_sep : ' ';
	x->o.image_name = o->image_name ? o->image_name : "image";
	x->o.label_name = o->label_name ? o->label_name : "label";
	x->image_len = strlen(x->o.image_name);
	x->label_len = strlen(x->o.label_name);
	x->o.types = NULL;
	if (o->format < DP_ENC_JSON || o->format > DP_ENC_IDX)
		fail(x, DP_EARG, "encoder: unknown format %d", o->format);
	else if (o->format == DP_ENC_IDX && !labels)
		fail(x, DP_EARG, "IDX takes two inputs: images and labels");
	else if (o->format == DP_ENC_CSV)
		x->rc = types_parse(&x->c, o->types, &x->err);
	if (!x->rc && src_open(x, &x->s, in) == 0) {
		if (o->format != DP_ENC_IDX)
			src_skip_bom(x, &x->s);
		if (o->format == DP_ENC_CSV)
			csv_header(x);
		else if (o->format == DP_ENC_IDX)
			idx_start(x, labels);
		else if (!(x->j = dp_exjson_new()))
			fail(x, DP_ENOMEM, "out of memory");
	}
	if (x->rc) {
		if (e)
			*e = x->err;
		dp_encoder_close(x);
		return NULL;
	}
	return x;
}

dp_encoder *dp_encoder_open(const char *path, const char *labels, const dp_enc_opts *o, dp_err *e)
{
	input in = {.path = path}, lb = {.path = labels};
	return enc_open(&in, labels ? &lb : NULL, o, e);
}

dp_encoder *dp_encoder_open_mem(const void *buf, size_t len, const void *labels, size_t labels_len,
				const char *name, const dp_enc_opts *o, dp_err *e)
{
	char lname[256];
	snprintf(lname, sizeof lname, "%s labels", name ? name : "memory");
	input in = {.mem = buf, .len = len, .name = name};
	input lb = {.mem = labels, .len = labels_len, .name = lname};
	return enc_open(&in, labels ? &lb : NULL, o, e);
}

int dp_encoder_next(dp_encoder *x, const uint8_t **rec, size_t *len, dp_err *e)
{
	int rc = x->rc;
	if (!rc) {
		switch (x->o.format) {
		case DP_ENC_CSV: rc = csv_next(x, rec, len); break;
		case DP_ENC_IDX: rc = idx_next(x, rec, len); break;
		default: rc = json_next(x, rec, len);
		}
	}
	if (rc < 0) {
		if (e)
			*e = x->err;
		return rc;
	}
	x->made += rc == 1;
	return rc;
}

const char *dp_encoder_name(const dp_encoder *x)
{
	return x->s.name;
}

void dp_encoder_close(dp_encoder *x)
{
	if (!x)
		return;
	src_close(&x->s);
	src_close(&x->s2);
	csv_free(&x->c);
	dp_exjson_free(x->j);
	dp_exbuild_free(&x->eb);
	enc_vals_free(&x->v);
	free(x);
}
