/*
 * safetensors.c - safetensors reading and writing (dp_ckpt.h), whatever
 * the tensors: dp-train's layout of them is ckpt.c's.  JSON through
 * jansson; the file is read whole into memory (checkpoints are tens of
 * megabytes) and validated before anything in it is used.
 */
#define _GNU_SOURCE
#include "dp_ckpt.h"
#include "pth_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_HEADER (100u << 20) /* as the reference implementation */

static const struct {
	const char *name;
	size_t size;
} dtypes[] = {
	[DP_DT_F32] = {"F32", 4}, [DP_DT_F64] = {"F64", 8}, [DP_DT_F16] = {"F16", 2},
	[DP_DT_BF16] = {"BF16", 2}, [DP_DT_I64] = {"I64", 8}, [DP_DT_I32] = {"I32", 4},
	[DP_DT_I16] = {"I16", 2}, [DP_DT_I8] = {"I8", 1}, [DP_DT_U64] = {"U64", 8},
	[DP_DT_U32] = {"U32", 4}, [DP_DT_U16] = {"U16", 2}, [DP_DT_U8] = {"U8", 1},
	[DP_DT_BOOL] = {"BOOL", 1},
};
#define NDTYPES ((int)(sizeof dtypes / sizeof dtypes[0]))

const char *dp_dtype_name(int dt) { return dt > 0 && dt < NDTYPES ? dtypes[dt].name : "?"; }
size_t dp_dtype_size(int dt) { return dt > 0 && dt < NDTYPES ? dtypes[dt].size : 0; }

int dp_dtype_parse(const char *s)
{
	for (int i = 1; i < NDTYPES; i++)
		if (!strcmp(s, dtypes[i].name))
			return i;
	return 0;
}


/* ---- writer ---------------------------------------------------------------- */

typedef struct wentry {
	char *name;
	int dtype, ndim;
	int64_t shape[DP_ST_MAXDIM];
	const void *data;
	size_t nbytes;
} wentry;

struct dp_st_writer {
	wentry *t;
	size_t n, cap;
	char **meta; /* key, value, ... */
	size_t nmeta, metacap;
	int failed;
};

dp_st_writer *dp_st_writer_new(void) { return calloc(1, sizeof(dp_st_writer)); }

int dp_st_add(dp_st_writer *w, const char *name, int dtype, int ndim, const int64_t *shape,
	      const void *data)
{
	if (ndim < 0 || ndim > DP_ST_MAXDIM || !dp_dtype_size(dtype))
		return w->failed = DP_EARG;
	if (dp_grow(&w->t, &w->cap, w->n + 1, sizeof *w->t) < 0)
		return w->failed = DP_ENOMEM;
	wentry *x = &w->t[w->n];
	memset(x, 0, sizeof *x);
	if (!(x->name = strdup(name)))
		return w->failed = DP_ENOMEM;
	x->dtype = dtype;
	x->ndim = ndim;
	size_t count = 1;
	for (int i = 0; i < ndim; i++) {
		x->shape[i] = shape[i];
		count *= (size_t)shape[i];
	}
	x->data = data;
	x->nbytes = count * dp_dtype_size(dtype);
	w->n++;
	return DP_OK;
}

int dp_st_set_meta(dp_st_writer *w, const char *key, const char *value)
{
	for (size_t i = 0; i < w->nmeta; i++)
		if (!strcmp(w->meta[2 * i], key)) {
			char *v = strdup(value);
			if (!v)
				return w->failed = DP_ENOMEM;
			free(w->meta[2 * i + 1]);
			w->meta[2 * i + 1] = v;
			return DP_OK;
		}
	if (dp_grow(&w->meta, &w->metacap, w->nmeta + 1, 2 * sizeof *w->meta) < 0) /* (key, value) */
		return w->failed = DP_ENOMEM;
	char *k = strdup(key), *v = strdup(value);
	if (!k || !v) {
		free(k);
		free(v);
		return w->failed = DP_ENOMEM;
	}
	w->meta[2 * w->nmeta] = k;
	w->meta[2 * w->nmeta + 1] = v;
	w->nmeta++;
	return DP_OK;
}

void dp_st_writer_free(dp_st_writer *w)
{
	if (!w)
		return;
	for (size_t i = 0; i < w->n; i++)
		free(w->t[i].name);
	for (size_t i = 0; i < 2 * w->nmeta; i++)
		free(w->meta[i]);
	free(w->t);
	free(w->meta);
	free(w);
}

static char *header_json(dp_st_writer *w)
{
	json_t *root = json_object(), *meta = NULL;
	if (!root)
		return NULL;
	if (w->nmeta) {
		meta = json_object();
		json_object_set_new(root, "__metadata__", meta);
		for (size_t i = 0; i < w->nmeta; i++)
			json_object_set_new(meta, w->meta[2 * i], json_string(w->meta[2 * i + 1]));
	}
	size_t off = 0;
	for (size_t i = 0; i < w->n; i++) {
		wentry *x = &w->t[i];
		json_t *shape = json_array();
		for (int d = 0; d < x->ndim; d++)
			json_array_append_new(shape, json_integer(x->shape[d]));
		json_t *t = json_pack("{s:s, s:o, s:[I, I]}", "dtype", dp_dtype_name(x->dtype), "shape",
				      shape, "data_offsets", (json_int_t)off,
				      (json_int_t)(off + x->nbytes));
		if (!t) {
			json_decref(root);
			return NULL;
		}
		json_object_set_new(root, x->name, t);
		off += x->nbytes;
	}
	char *s = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(root);
	return s;
}

int dp_st_write(dp_st_writer *w, const char *path, dp_err *e)
{
	if (w->failed)
		return dp_seterr(e, w->failed, "%s: %s", path,
				 w->failed == DP_ENOMEM ? "out of memory" : "bad tensor");
	char *h = header_json(w);
	if (!h)
		return dp_seterr(e, DP_ENOMEM, "%s: out of memory", path);
	size_t hl = strlen(h), padded = (hl + 7) / 8 * 8;
	char *hdr = malloc(8 + padded);
	if (!hdr) {
		free(h);
		return dp_seterr(e, DP_ENOMEM, "%s: out of memory", path);
	}
	uint64_t n = padded;
	memcpy(hdr, &n, 8); /* little endian: see dp_record.h */
	memcpy(hdr + 8, h, hl);
	memset(hdr + 8 + hl, ' ', padded - hl);
	free(h);
	dp_out o;
	int rc = dp_out_open(&o, path, e);
	if (rc < 0) {
		free(hdr);
		return rc;
	}
	rc = dp_write_all(o.fd, hdr, 8 + padded, path, e);
	free(hdr);
	for (size_t i = 0; rc == DP_OK && i < w->n; i++)
		rc = dp_write_all(o.fd, w->t[i].data, w->t[i].nbytes, path, e);
	if (rc == DP_OK && o.tmp && fsync(o.fd) < 0)
		rc = dp_syserr(e, "%s: fsync", path);
	if (rc < 0) {
		dp_out_abort(&o);
		return rc;
	}
	return dp_out_commit(&o, e);
}

/* ---- reader ------------------------------------------------------------------ */

struct dp_st {
	const char *format; /* "safetensors", "pth" */
	uint8_t *buf; /* the whole file (a .pth: its tensors) */
	size_t len;
	uint8_t *raw; /* a .pth: the whole file */
	size_t rawlen;
	dp_st_tensor *t;
	int n;
	char **meta; /* key, value, ... */
	int nmeta;
	char name[];  /* in the same block */
};

void dp_st_close(dp_st *s)
{
	if (!s)
		return;
	for (int i = 0; i < s->n; i++)
		free((char *)s->t[i].name);
	for (int i = 0; i < 2 * s->nmeta; i++)
		free(s->meta[i]);
	free(s->t);
	free(s->meta);
	free(s->buf);
	free(s->raw);
	free(s);
}

static int by_offset(const void *a, const void *b)
{
	const dp_st_tensor *x = a, *y = b;
	if (x->data != y->data)
		return (const uint8_t *)x->data < (const uint8_t *)y->data ? -1 : 1;
	return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* why, formatted; returns DP_EDATA. */
static int bad(char *why, size_t wl, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, wl, fmt, ap);
	va_end(ap);
	return DP_EDATA;
}

/* An error about tensor key, its name escaped (a name may hold a terminal
 * control): "FILE: tensor 'KEY'" sep why. */
static int tensor_err(dp_err *e, const char *nm, const char *key, const char *sep, const char *why)
{
	char *k = dp_shown(key, strlen(key));
	dp_seterr(e, DP_EDATA, "%s: tensor '%s'%s%s", nm, k ? k : "?", sep, why);
	free(k);
	return DP_EDATA;
}

/* Tensor key from its header entry v.  DP_EDATA with what is wrong in why
 * (the caller names the tensor, escaped), or DP_ENOMEM. */
static int parse_tensor(const char *key, json_t *v, const uint8_t *data, size_t dlen,
			dp_st_tensor *t, char *why, size_t wl)
{
	memset(t, 0, sizeof *t);
	json_t *dt = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape"),
	       *offs = json_object_get(v, "data_offsets");
	if (!json_is_object(v) || !json_is_string(dt) || !json_is_array(shape) ||
	    !json_is_array(offs) || json_array_size(offs) != 2)
		return bad(why, wl, "want dtype, shape and data_offsets");
	if (json_object_size(v) != 3)
		return bad(why, wl, "unexpected fields");
	t->dtype = dp_dtype_parse(json_string_value(dt));
	if (!t->dtype) {
		char *d = dp_shown(json_string_value(dt), json_string_length(dt));
		bad(why, wl, "unknown dtype '%s'", d ? d : "?");
		free(d);
		return DP_EDATA;
	}
	if (json_array_size(shape) > DP_ST_MAXDIM)
		return bad(why, wl, "more than %d dimensions", DP_ST_MAXDIM);
	t->ndim = (int)json_array_size(shape);
	unsigned __int128 bytes = dp_dtype_size(t->dtype);
	for (int d = 0; d < t->ndim; d++) {
		json_t *x = json_array_get(shape, (size_t)d);
		if (!json_is_integer(x) || json_integer_value(x) < 0)
			return bad(why, wl, "bad shape");
		t->shape[d] = json_integer_value(x);
		bytes *= (uint64_t)t->shape[d];
		if (bytes > dlen)
			return bad(why, wl, "shape larger than the file (truncated?)");
	}
	json_t *b = json_array_get(offs, 0), *en = json_array_get(offs, 1);
	if (!json_is_integer(b) || !json_is_integer(en) || json_integer_value(b) < 0 ||
	    json_integer_value(en) < json_integer_value(b))
		return bad(why, wl, "bad data_offsets");
	uint64_t ob = (uint64_t)json_integer_value(b), oe = (uint64_t)json_integer_value(en);
	if (oe > dlen)
		return bad(why, wl, "data ends at byte %" PRIu64 " of %zu: file truncated", oe, dlen);
	if (oe - ob != (uint64_t)bytes)
		return bad(why, wl, "%" PRIu64 " bytes for a shape of %" PRIu64 " bytes", oe - ob,
			   (uint64_t)bytes);
	t->data = data + ob;
	t->nbytes = (size_t)(oe - ob);
	if (!(t->name = strdup(key)))
		return DP_ENOMEM;
	return DP_OK;
}

/* The header's __metadata__ object v: string keys to string values. */
static int parse_meta(dp_st *s, json_t *v, dp_err *e)
{
	if (!json_is_object(v))
		return dp_seterr(e, DP_EDATA, "%s: __metadata__ is not an object", s->name);
	if (!(s->meta = calloc(2 * json_object_size(v) + 1, sizeof *s->meta)))
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	const char *key;
	json_t *mv;
	json_object_foreach(v, key, mv) {
		if (!json_is_string(mv)) {
			char *k = dp_shown(key, strlen(key)); /* the file's words, escaped */
			dp_seterr(e, DP_EDATA, "%s: __metadata__ '%s' is not a string", s->name,
				  k ? k : "?");
			free(k);
			return DP_EDATA;
		}
		s->meta[2 * s->nmeta] = strdup(key);
		s->meta[2 * s->nmeta + 1] = strdup(json_string_value(mv));
		s->nmeta++;
		if (!s->meta[2 * s->nmeta - 2] || !s->meta[2 * s->nmeta - 1])
			return dp_seterr(e, DP_ENOMEM, "out of memory");
	}
	return DP_OK;
}

static int parse_header(dp_st *s, dp_err *e)
{
	const char *nm = s->name;
	if (s->len < 8)
		return dp_seterr(e, DP_EDATA, "%s: not a safetensors file (%zu bytes)", nm, s->len);
	uint64_t hl;
	memcpy(&hl, s->buf, 8);
	if (hl > MAX_HEADER)
		return dp_seterr(e, DP_EDATA,
				 "%s: not a safetensors file (header length %" PRIu64 ")", nm, hl);
	if (hl > s->len - 8)
		return dp_seterr(e, DP_EDATA,
				 "%s: truncated: header of %" PRIu64 " bytes, file of %zu", nm, hl,
				 s->len);
	const uint8_t *data = s->buf + 8 + hl;
	size_t dlen = s->len - 8 - (size_t)hl;
	json_error_t je;
	json_t *root = json_loadb((const char *)s->buf + 8, (size_t)hl, JSON_REJECT_DUPLICATES, &je);
	if (!root)
		return dp_seterr(e, DP_EDATA, "%s: header: %s at byte %d", nm, je.text,
				 8 + je.position);
	int rc = DP_OK;
	if (!json_is_object(root)) {
		rc = dp_seterr(e, DP_EDATA, "%s: header is not a JSON object", nm);
		goto out;
	}
	size_t n = json_object_size(root);
	s->t = calloc(n ? n : 1, sizeof *s->t);
	if (!s->t) {
		rc = dp_seterr(e, DP_ENOMEM, "out of memory");
		goto out;
	}
	const char *key;
	json_t *v;
	json_object_foreach(root, key, v) {
		if (!strcmp(key, "__metadata__")) {
			if ((rc = parse_meta(s, v, e)) < 0)
				goto out;
			continue;
		}
		char why[160];
		rc = parse_tensor(key, v, data, dlen, &s->t[s->n], why, sizeof why);
		if (rc == DP_ENOMEM)
			rc = dp_seterr(e, DP_ENOMEM, "out of memory");
		else if (rc < 0)
			rc = tensor_err(e, nm, key, ": ", why);
		if (rc < 0)
			goto out;
		s->n++;
	}
	qsort(s->t, (size_t)s->n, sizeof *s->t, by_offset);
	size_t at = 0;
	for (int i = 0; i < s->n; i++) {
		size_t b = (size_t)((const uint8_t *)s->t[i].data - data);
		if (b != at) {
			rc = tensor_err(e, nm, s->t[i].name, " ",
					b < at ? "overlaps the one before it"
					       : "leaves a hole after the one before it");
			goto out;
		}
		at = b + s->t[i].nbytes;
	}
	if (at != dlen)
		rc = dp_seterr(e, DP_EDATA, "%s: %zu bytes after the last tensor", nm, dlen - at);
out:
	json_decref(root);
	return rc;
}

static dp_st *st_new(const char *name, dp_err *e)
{
	size_t n = strlen(name) + 1;
	dp_st *s = calloc(1, sizeof *s + n);
	if (!s) {
		dp_seterr(e, DP_ENOMEM, "out of memory");
		return NULL;
	}
	memcpy(s->name, name, n);
	s->format = "safetensors";
	return s;
}

dp_st *ckpt_st_adopt(const char *name, const char *format, uint8_t *buf, size_t len,
		     dp_st_tensor *t, int n, dp_err *e)
{
	dp_st *s = st_new(name, e);
	if (!s) {
		for (int i = 0; i < n; i++)
			free((char *)t[i].name);
		free(t);
		free(buf);
		return NULL;
	}
	s->format = format;
	s->buf = buf;
	s->len = len;
	s->t = t;
	s->n = n;
	return s;
}

/* s->buf holds a whole file: parse it as what it is (safetensors, or
 * torch.save's formats) into s, or into the dp_st returned in its place. */
static dp_st *parse_file(dp_st *s, dp_err *e)
{
	if (pth_detect(s->buf, s->len)) {
		dp_st *p = pth_open_mem(s->buf, s->len, s->name, e);
		if (p) { /* the file's bytes, for dp_st_bytes */
			p->raw = s->buf;
			p->rawlen = s->len;
			s->buf = NULL;
		}
		dp_st_close(s);
		return p;
	}
	if (parse_header(s, e) < 0) {
		dp_st_close(s);
		return NULL;
	}
	return s;
}

dp_st *dp_st_open_mem(const void *buf, size_t len, const char *name, dp_err *e)
{
	dp_st *s = st_new(name, e);
	if (!s)
		return NULL;
	s->buf = malloc(len ? len : 1);
	if (!s->buf) {
		dp_st_close(s);
		dp_seterr(e, DP_ENOMEM, "out of memory");
		return NULL;
	}
	if (len)
		memcpy(s->buf, buf, len);
	s->len = len;
	return parse_file(s, e);
}

/* The bytes of tensor data a header (hdr[0..n), JSON) describes: the
 * largest end of its data_offsets; 0 when it is not JSON (parse_header
 * says why). */
static uint64_t data_extent(const uint8_t *hdr, size_t n)
{
	json_t *root = json_loadb((const char *)hdr, n, 0, NULL);
	uint64_t end = 0;
	const char *k;
	json_t *v;
	json_object_foreach(root, k, v) {
		json_t *o = json_object_get(v, "data_offsets");
		json_t *b = json_array_get(o, 1);
		if (json_is_integer(b) && json_integer_value(b) > 0 &&
		    (uint64_t)json_integer_value(b) > end)
			end = (uint64_t)json_integer_value(b);
	}
	json_decref(root);
	return end;
}

/* The rest of a stream that began with head[0..n), to its end: at most
 * the machine's memory (a file of torch.save is read whole). */
static int read_all(dp_st *s, int fd, const uint8_t *head, size_t n, dp_err *e)
{
	long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
	uint64_t max = pages > 0 && psize > 0 ? (uint64_t)pages * (uint64_t)psize : (1ull << 34);
	size_t cap = 1 << 20;
	if (!(s->buf = malloc(cap)))
		return dp_seterr(e, DP_ENOMEM, "%s: out of memory", s->name);
	memcpy(s->buf, head, n);
	s->len = n;
	for (;;) {
		if (s->len == cap) {
			if (cap >= max)
				return dp_seterr(e, DP_ELIMIT, "%s: more than the machine's memory", s->name);
			uint8_t *b = realloc(s->buf, cap * 2);
			if (!b)
				return dp_seterr(e, DP_ENOMEM, "%s: out of memory", s->name);
			s->buf = b;
			cap *= 2;
		}
		long got = dp_read_full(fd, s->buf + s->len, cap - s->len, s->name, e);
		if (got < 0)
			return (int)got;
		s->len += (size_t)got;
		if (s->len < cap)
			return DP_OK;
	}
}

/* A checkpoint that is not a regular file (a FIFO, stdin, /dev/zero): its
 * header's length, its header, then the data the header describes and not
 * a byte more; never read until memory runs out. */
static int read_stream(dp_st *s, int fd, dp_err *e)
{
	uint8_t len8[8];
	long got = dp_read_full(fd, len8, 8, s->name, e);
	if (got < 0)
		return (int)got;
	uint64_t hl = 0;
	memcpy(&hl, len8, 8);
	if (got >= 4 && (!memcmp(len8, "PK", 2) || (len8[0] == 0x80 && len8[1] >= 2 && len8[1] <= 5)))
		return read_all(s, fd, len8, (size_t)got, e); /* torch.save's, perhaps */
	if (got < 8 || hl > MAX_HEADER) { /* parse_header says so */
		s->buf = malloc(8);
		if (!s->buf)
			return dp_seterr(e, DP_ENOMEM, "out of memory");
		memcpy(s->buf, len8, (size_t)got);
		s->len = (size_t)got;
		return DP_OK;
	}
	if (!(s->buf = malloc(8 + hl)))
		return dp_seterr(e, DP_ENOMEM, "%s: out of memory", s->name);
	memcpy(s->buf, len8, 8);
	if ((got = dp_read_full(fd, s->buf + 8, hl, s->name, e)) < 0)
		return (int)got;
	s->len = 8 + (size_t)got;
	if ((uint64_t)got < hl)
		return DP_OK;
	uint64_t dl = data_extent(s->buf + 8, hl);
	if (dl > SIZE_MAX / 2 - s->len)
		return dp_seterr(e, DP_ELIMIT, "%s: its header describes %" PRIu64 " bytes of data",
				 s->name, dl);
	uint8_t *b = realloc(s->buf, s->len + dl + 1);
	if (!b)
		return dp_seterr(e, DP_ENOMEM, "%s: out of memory for the %" PRIu64
				 " bytes of data its header describes", s->name, dl);
	s->buf = b;
	if ((got = dp_read_full(fd, s->buf + s->len, dl + 1, s->name, e)) < 0)
		return (int)got;
	if ((uint64_t)got > dl)
		return dp_seterr(e, DP_EDATA, "%s: more bytes than its header describes (%" PRIu64
				 "): not a safetensors file", s->name, 8 + hl + dl);
	s->len += (size_t)got;
	return DP_OK;
}

dp_st *dp_st_open(const char *path, dp_err *e)
{
	int std = !strcmp(path, "-");
	dp_st *s = st_new(std ? "stdin" : path, e);
	if (!s)
		return NULL;
	int fd = std ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		dp_syserr(e, "%s", path);
		dp_st_close(s);
		return NULL;
	}
	struct stat st;
	int known = fstat(fd, &st) == 0, isreg = known && S_ISREG(st.st_mode);
	if (known && S_ISDIR(st.st_mode)) {
		dp_seterr(e, DP_EIO, "%s: is a directory, not a checkpoint", s->name);
		goto fail;
	}
	if (!isreg) {
		if (read_stream(s, fd, e) < 0)
			goto fail;
	}
	size_t cap = (size_t)st.st_size + 1;
	for (; isreg;) {
		if (s->len == cap || !s->buf) {
			if (s->buf)
				cap *= 2;
			uint8_t *b = realloc(s->buf, cap);
			if (!b) {
				dp_seterr(e, DP_ENOMEM, "%s: out of memory", s->name);
				goto fail;
			}
			s->buf = b;
		}
		long got = dp_read_full(fd, s->buf + s->len, cap - s->len, s->name, e);
		if (got < 0)
			goto fail;
		s->len += (size_t)got;
		if (s->len < cap)
			break;
	}
	if (!std)
		close(fd);
	return parse_file(s, e);
fail:
	if (!std)
		close(fd);
	dp_st_close(s);
	return NULL;
}

int dp_st_count(const dp_st *s) { return s->n; }
const dp_st_tensor *dp_st_at(const dp_st *s, int i) { return i >= 0 && i < s->n ? &s->t[i] : NULL; }
const char *dp_st_name(const dp_st *s) { return s->name; }
const char *dp_st_format(const dp_st *s) { return s->format; }
int dp_st_meta_count(const dp_st *s) { return s->nmeta; }

void dp_st_meta_at(const dp_st *s, int i, const char **key, const char **value)
{
	*key = s->meta[2 * i];
	*value = s->meta[2 * i + 1];
}

const void *dp_st_bytes(const dp_st *s, size_t *len)
{
	*len = s->raw ? s->rawlen : s->len;
	return s->raw ? s->raw : s->buf;
}

const dp_st_tensor *dp_st_find(const dp_st *s, const char *name)
{
	for (int i = 0; i < s->n; i++)
		if (!strcmp(s->t[i].name, name))
			return &s->t[i];
	return NULL;
}

const char *dp_st_meta(const dp_st *s, const char *key)
{
	for (int i = 0; i < s->nmeta; i++)
		if (!strcmp(s->meta[2 * i], key))
			return s->meta[2 * i + 1];
	return NULL;
}
