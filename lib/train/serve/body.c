/*
 * body.c - request bodies into samples (dp_req_new, dp_serve.h): JSON
 * through jansson, NumPy .npy (its header, a Python dict literal, read by
 * the small strict parser here: no Debian library reads .npy in C),
 * TFRecord of Examples through dp_data itself (an anonymous file: the same
 * decoding, checks and messages as dp-eval), images through
 * dp_image_transform with the checkpoint's evaluation transform.  Raw
 * values (JSON, npy) become samples as a record's would (dp_data_sample).
 * Every error says where: "sample 3 value 17", "npy header: ...".
 */
#define _GNU_SOURCE
#include "serve_impl.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

enum { T_JSON = 1, T_NPY, T_TFRECORD, T_IMAGE };

/* The media type (parameters and case ignored); 0 if not served. */
static int media_type(const char *type, const void *body, size_t len)
{
	if (!type || !*type) { /* from the bytes */
		const unsigned char *p = body;
		if (dp_image_format_of(body, len) != DP_IMAGE_UNKNOWN)
			return T_IMAGE;
		if (len >= 6 && !memcmp(p, "\x93NUMPY", 6))
			return T_NPY;
		size_t i = 0;
		while (i < len && isspace(p[i]))
			i++;
		if (i < len && (p[i] == '{' || p[i] == '['))
			return T_JSON;
		return T_TFRECORD;
	}
	size_t n = strcspn(type, ";");
	while (n && isspace((unsigned char)type[n - 1]))
		n--;
	static const struct {
		const char *name;
		int t;
	} types[] = {
		{"application/json", T_JSON},           {"application/x-npy", T_NPY},
		{"application/npy", T_NPY},             {"application/x-tfrecord", T_TFRECORD},
		{"application/tfrecord", T_TFRECORD},   {"image/jpeg", T_IMAGE},
		{"image/png", T_IMAGE},                 {"application/x-image", T_IMAGE},
	};
	for (size_t i = 0; i < sizeof types / sizeof *types; i++)
		if (strlen(types[i].name) == n && !strncasecmp(type, types[i].name, n))
			return types[i].t;
	return 0;
}

static dp_req *req_alloc(dp_serve *s, serve_gen *g, size_t n, dp_err *e)
{
	dp_req *r = calloc(1, sizeof *r);
	if (r) {
		r->s = s;
		r->g = g;
		r->n = n;
		r->x = malloc((n ? n : 1) * g->in_size * sizeof(float));
		r->out = malloc((n ? n : 1) * g->k * sizeof(float));
	}
	if (!r || !r->x || !r->out) {
		if (r) {
			free(r->x);
			free(r->out);
			free(r);
		}
		dp_seterr(e, DP_ENOMEM, "out of memory");
		return NULL;
	}
	return r;
}

/* Raw values of sample i (in x) made a sample: DP_EDATA naming it. */
static int finish(const serve_gen *g, float *x, size_t i, float *tmp, dp_err *e)
{
	dp_err se;
	if (dp_data_sample(&g->dopts, x, tmp, &se) < 0)
		return dp_seterr(e, DP_EDATA, "sample %zu: %s", i, se.msg);
	return DP_OK;
}

static int too_many(size_t n, size_t max, dp_err *e)
{
	return dp_seterr(e, DP_ELIMIT, "%zu samples, at most %zu a request", n, max);
}

/* ---- JSON ------------------------------------------------------------------------- */

/* Numbers of j (nested arrays, in order) into x (cap), counting into *n;
 * -1 at something else (a string, an object...). */
static int json_flat(const json_t *j, float *x, size_t cap, size_t *n, int depth)
{
	if (json_is_number(j)) {
		if (*n < cap)
			x[*n] = (float)json_number_value(j);
		(*n)++;
		return 0;
	}
	if (!json_is_array(j) || depth > 64)
		return -1;
	for (size_t i = 0; i < json_array_size(j); i++)
		if (json_flat(json_array_get(j, i), x, cap, n, depth + 1) < 0)
			return -1;
	return 0;
}

static size_t json_count(const json_t *j, int *bad)
{
	size_t n = 0;
	if (json_flat(j, NULL, 0, &n, 0) < 0)
		*bad = 1;
	return n;
}

static dp_req *from_json(dp_serve *s, serve_gen *g, const void *body, size_t len, size_t max,
			 dp_err *e)
{
	json_error_t je;
	json_t *root = json_loadb(body, len, JSON_DECODE_ANY, &je);
	if (!root) {
		dp_seterr(e, DP_EDATA, "JSON: line %d column %d: %s", je.line, je.column, je.text);
		return NULL;
	}
	const json_t *list = root;
	if (json_is_object(root)) {
		list = json_object_get(root, "instances");
		if (!list)
			list = json_object_get(root, "inputs");
		if (!list) {
			json_decref(root);
			dp_seterr(e, DP_EDATA, "JSON: an object without \"instances\" (or \"inputs\")");
			return NULL;
		}
	}
	if (!json_is_array(list)) {
		json_decref(root);
		dp_seterr(e, DP_EDATA, "JSON: want an array of samples, each an array of %zu numbers",
			  g->in_size);
		return NULL;
	}
	/* one sample (all numbers, or nested with in_size numbers in all),
	 * or an array of samples */
	int bad = 0, one = 1;
	size_t m = json_array_size(list);
	for (size_t i = 0; i < m && one; i++)
		one = json_is_number(json_array_get(list, i));
	if (!one && m && !json_is_array(json_array_get(list, 0)))
		bad = 1;
	if (!one && m && json_count(list, &bad) == g->in_size && !bad &&
	    json_count(json_array_get(list, 0), &bad) != g->in_size)
		one = 1;
	size_t n = one ? 1 : m;
	if (bad) {
		json_decref(root);
		dp_seterr(e, DP_EDATA, "JSON: a sample holds something not a number or an array");
		return NULL;
	}
	if (n > max) {
		json_decref(root);
		too_many(n, max, e);
		return NULL;
	}
	if (!n) {
		json_decref(root);
		dp_seterr(e, DP_EDATA, "JSON: no samples");
		return NULL;
	}
	dp_req *r = req_alloc(s, g, n, e);
	float *tmp = r ? malloc(g->in_size * sizeof *tmp) : NULL;
	if (r && !tmp)
		dp_seterr(e, DP_ENOMEM, "out of memory");
	for (size_t i = 0; r && tmp && i < n; i++) {
		const json_t *smp = one ? list : json_array_get(list, i);
		size_t got = 0;
		float *x = r->x + i * g->in_size;
		if (json_flat(smp, x, g->in_size, &got, 0) < 0 || got != g->in_size) {
			dp_seterr(e, DP_EDATA, "JSON: sample %zu has %s%zu values, the model takes %zu", i,
				  got < g->in_size ? "" : "at least ", got, g->in_size);
			goto fail;
		}
		if (finish(g, x, i, tmp, e) < 0)
			goto fail;
	}
	free(tmp);
	json_decref(root);
	return r;
fail:
	free(tmp);
	r->g = NULL; /* the caller keeps its reference */
	dp_req_free(r);
	json_decref(root);
	return NULL;
}

/* ---- NumPy .npy --------------------------------------------------------------------- */

/* The value of key in a .npy header dict (h, a NUL-terminated copy):
 * where it starts, or NULL. */
static const char *npy_key(const char *h, const char *key)
{
	char q1[64], q2[64];
	snprintf(q1, sizeof q1, "'%s'", key);
	snprintf(q2, sizeof q2, "\"%s\"", key);
	const char *p = strstr(h, q1);
	if (!p)
		p = strstr(h, q2);
	if (!p)
		return NULL;
	p += strlen(q1);
	while (isspace((unsigned char)*p))
		p++;
	if (*p != ':')
		return NULL;
	p++;
	while (isspace((unsigned char)*p))
		p++;
	return p;
}

/* A .npy file's header: its version, descr (a little-endian number
 * type), C order and shape. */
typedef struct npy_header {
	size_t off, hl;     /* the header text: p[off .. off + hl) */
	int es, kind;       /* element size; 'f' float, 'i' signed, 'u' unsigned */
	uint64_t dims[32];
	int nd;
} npy_header;

/* The header's shape, "(a, b, ...)" at sh, into dims (at most 32): their
 * number, or -1. */
static int npy_shape(const char *sh, uint64_t *dims, dp_err *e)
{
	int nd = 0;
	const char *q = sh + 1;
	for (;;) {
		while (isspace((unsigned char)*q))
			q++;
		if (*q == ')')
			break;
		if (!isdigit((unsigned char)*q) || nd == 32) {
			dp_seterr(e, DP_EDATA, "npy header: a bad 'shape'");
			return -1;
		}
		char *end;
		errno = 0;
		unsigned long long v = strtoull(q, &end, 10);
		if (errno || v > (1ull << 40)) {
			dp_seterr(e, DP_EDATA, "npy header: a dimension too large");
			return -1;
		}
		dims[nd++] = v;
		q = end;
		while (isspace((unsigned char)*q))
			q++;
		if (*q == ',')
			q++;
	}
	return nd;
}

static int npy_parse(const uint8_t *p, size_t len, npy_header *nh, dp_err *e)
{
	if (len < 10 || memcmp(p, "\x93NUMPY", 6)) {
		dp_seterr(e, DP_EDATA, "npy: not a .npy file (no \\x93NUMPY magic)");
		return -1;
	}
	int major = p[6];
	size_t hl, off;
	if (major == 1) {
		hl = p[8] | (size_t)p[9] << 8;
		off = 10;
	} else if ((major == 2 || major == 3) && len >= 12) {
		hl = p[8] | (size_t)p[9] << 8 | (size_t)p[10] << 16 | (size_t)p[11] << 24;
		off = 12;
	} else {
		dp_seterr(e, DP_EDATA, "npy: format version %d.%d (want 1.0 to 3.0)", major, p[7]);
		return -1;
	}
	if (hl > 65536 || hl > len - off) {
		dp_seterr(e, DP_EDATA, "npy: a header of %zu bytes in a body of %zu", hl, len);
		return -1;
	}
	char h[65537];
	memcpy(h, p + off, hl);
	h[hl] = 0;
	if (strlen(h) != hl) {
		dp_seterr(e, DP_EDATA, "npy: a NUL byte in the header");
		return -1;
	}
	const char *d = npy_key(h, "descr"), *fo = npy_key(h, "fortran_order"),
		   *sh = npy_key(h, "shape");
	if (!d || !fo || !sh || (*d != '\'' && *d != '"') || *sh != '(') {
		dp_seterr(e, DP_EDATA, "npy header: want 'descr', 'fortran_order' and 'shape'");
		return -1;
	}
	char descr[16];
	size_t dl = strcspn(d + 1, "'\"");
	if (dl >= sizeof descr || !d[1 + dl]) {
		dp_seterr(e, DP_EDATA, "npy header: a bad 'descr'");
		return -1;
	}
	memcpy(descr, d + 1, dl);
	descr[dl] = 0;
	if (strncmp(fo, "False", 5)) {
		dp_seterr(e, DP_EDATA, "npy: fortran_order arrays are not read (save in C order)");
		return -1;
	}
	static const struct {
		const char *descr;
		int size, kind; /* kind: 'f' float, 'i' signed, 'u' unsigned */
	} dts[] = {{"<f4", 4, 'f'}, {"<f8", 8, 'f'}, {"|u1", 1, 'u'}, {"<u1", 1, 'u'},
		   {"|i1", 1, 'i'}, {"<i1", 1, 'i'}, {"<i2", 2, 'i'}, {"<i4", 4, 'i'},
		   {"<i8", 8, 'i'}, {"<u2", 2, 'u'}, {"<u4", 4, 'u'}};
	int es = 0, kind = 0;
	for (size_t i = 0; i < sizeof dts / sizeof *dts; i++)
		if (!strcmp(descr, dts[i].descr))
			es = dts[i].size, kind = dts[i].kind;
	if (!es) {
		char *shown = dp_shown(descr, strlen(descr));
		dp_seterr(e, DP_EDATA, "npy: dtype '%s' (want <f4, <f8, |u1, <i8, ...: little-endian)",
			  shown ? shown : "?");
		free(shown);
		return -1;
	}
	int nd = npy_shape(sh, nh->dims, e);
	if (nd < 0)
		return -1;
	nh->off = off;
	nh->hl = hl;
	nh->es = es;
	nh->kind = kind;
	nh->nd = nd;
	return 0;
}

/* One element of kind and size es at src, as a float. */
static float npy_value(const uint8_t *src, int es, int kind)
{
	if (kind == 'f' && es == 4) {
		float v;
		memcpy(&v, src, 4);
		return v;
	}
	if (kind == 'f') {
		double dv;
		memcpy(&dv, src, 8);
		return (float)dv;
	}
	int64_t iv = 0;
	uint64_t u = 0;
	for (int b = es - 1; b >= 0; b--)
		u = u << 8 | src[b];
	if (kind == 'i' && es < 8 && (u >> (8 * es - 1)) & 1)
		u |= ~0ull << (8 * es);
	memcpy(&iv, &u, 8);
	return kind == 'u' ? (float)u : (float)iv;
}

static dp_req *from_npy(dp_serve *s, serve_gen *g, const uint8_t *p, size_t len, size_t max,
			dp_err *e)
{
	npy_header nh;
	if (npy_parse(p, len, &nh, e) < 0)
		return NULL;
	const uint64_t *dims = nh.dims;
	int nd = nh.nd, es = nh.es;
	size_t off = nh.off, hl = nh.hl;
	/* (n, ...) with in_size a row, or the shape of one sample */
	uint64_t total = 1;
	for (int i = 0; i < nd; i++) {
		if (dims[i] && total > UINT64_MAX / dims[i] / 8) {
			dp_seterr(e, DP_EDATA, "npy header: a shape too large");
			return NULL;
		}
		total *= dims[i];
	}
	size_t n;
	if (nd >= 2 && dims[0] && total / dims[0] == g->in_size && total % dims[0] == 0)
		n = (size_t)dims[0]; /* (n, ...) */
	else if (total == g->in_size)
		n = 1; /* one sample's shape */
	else if (nd >= 1 && !dims[0])
		n = 0;
	else {
		dp_seterr(e, DP_EDATA, "npy: shape of %llu values%s: the model takes %zu a sample",
			  (unsigned long long)(nd >= 2 && dims[0] ? total / dims[0] : total),
			  nd >= 2 ? " a row" : "", g->in_size);
		return NULL;
	}
	if (!n) {
		dp_seterr(e, DP_EDATA, "npy: no samples");
		return NULL;
	}
	if (n > max) {
		too_many(n, max, e);
		return NULL;
	}
	size_t data = off + hl, need = n * g->in_size * (size_t)es;
	if (len - data != need) {
		dp_seterr(e, DP_EDATA, "npy: %zu bytes of data, the shape wants %zu", len - data, need);
		return NULL;
	}
	dp_req *r = req_alloc(s, g, n, e);
	float *tmp = r ? malloc(g->in_size * sizeof *tmp) : NULL;
	if (r && !tmp) {
		dp_seterr(e, DP_ENOMEM, "out of memory");
		goto fail;
	}
	if (!r)
		return NULL;
	const uint8_t *src = p + data;
	for (size_t i = 0; i < n * g->in_size; i++, src += es)
		r->x[i] = npy_value(src, es, nh.kind);
	for (size_t i = 0; i < n; i++)
		if (finish(g, r->x + i * g->in_size, i, tmp, e) < 0)
			goto fail;
	free(tmp);
	return r;
fail:
	free(tmp);
	if (r) {
		r->g = NULL;
		dp_req_free(r);
	}
	return NULL;
}

/* ---- TFRecord ----------------------------------------------------------------------- */

/* "/proc/self/fd/N: record 2 ..." -> "body: record 2 ..." */
static void body_named(dp_err *e, const char *path)
{
	size_t pl = strlen(path);
	if (e && !strncmp(e->msg, path, pl)) {
		memmove(e->msg + 4, e->msg + pl, strlen(e->msg + pl) + 1);
		memcpy(e->msg, "body", 4);
	}
}

static dp_req *from_tfrecord(dp_serve *s, serve_gen *g, const void *body, size_t len, size_t max,
			     dp_err *e)
{
	int fd = memfd_create("dp-serve-body", MFD_CLOEXEC);
	if (fd < 0) {
		dp_syserr(e, "memfd_create");
		return NULL;
	}
	if (dp_write_all(fd, body, len, "body", e) < 0) {
		close(fd);
		return NULL;
	}
	char path[64];
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	const char *inputs[1] = {path};
	dp_data_opts o = g->dopts;
	o.inputs = inputs;
	o.ninputs = 1;
	o.batch = max < 256 ? max : 256;
	o.cache = DP_CACHE_NONE;
	o.prefetch = 0;
	o.rank = 0;
	o.size = 1;
	o.shard_index = 0;
	o.shard_count = 1;
	dp_req *r = NULL;
	size_t n = 0, cap = 0;
	float *x = NULL;
	dp_data *d = dp_data_open(&o, e);
	if (!d || dp_data_epoch(d, 0, 0, e) < 0)
		goto out;
	for (;;) {
		const dp_batch *b;
		int rc = dp_data_next(d, &b, e);
		if (rc < 0)
			goto out;
		if (rc == 0)
			break;
		if (n + b->n > max) {
			too_many(n + b->n, max, e);
			goto out;
		}
		if (n + b->n > cap) {
			size_t nc = cap ? 2 * cap : b->n;
			while (nc < n + b->n)
				nc *= 2;
			if (nc > max)
				nc = max;
			float *nx = realloc(x, nc * g->in_size * sizeof *x);
			if (!nx) {
				dp_seterr(e, DP_ENOMEM, "out of memory");
				goto out;
			}
			x = nx;
			cap = nc;
		}
		memcpy(x + n * g->in_size, b->x, b->n * g->in_size * sizeof *x);
		n += b->n;
	}
	if (!n) {
		dp_seterr(e, DP_EDATA, "TFRecord: no records");
		goto out;
	}
	if ((r = req_alloc(s, g, n, e))) {
		memcpy(r->x, x, n * g->in_size * sizeof *x);
	}
out:
	body_named(e, path);
	dp_data_close(d);
	close(fd);
	free(x);
	return r;
}

/* ---- images ------------------------------------------------------------------------- */

static dp_req *from_image(dp_serve *s, serve_gen *g, const void *body, size_t len, dp_err *e)
{
	if (g->rc.decode != DP_DECODE_IMAGE) {
		dp_seterr(e, DP_EARG, "an image, but the model reads %s values (send JSON, npy or "
				      "TFRecord)",
			  dp_decode_name(g->rc.decode));
		return NULL;
	}
	dp_image_dec *dec = dp_image_dec_new();
	dp_req *r = dec ? req_alloc(s, g, 1, e) : NULL;
	if (!dec)
		dp_seterr(e, DP_ENOMEM, "out of memory");
	if (r && dp_image_transform(dec, body, len, &g->img, 0, r->x, e) < 0) {
		dp_preferr(e, "image");
		r->g = NULL;
		dp_req_free(r);
		r = NULL;
	}
	dp_image_dec_free(dec);
	return r;
}

dp_req *dp_req_new(dp_serve *s, const char *type, const void *body, size_t len, size_t max,
		   dp_err *e)
{
	int t = media_type(type, body, len);
	if (!t) {
		char *shown = dp_shown(type, strlen(type) > 80 ? 80 : strlen(type));
		dp_seterr(e, DP_EARG,
			  "Content-Type '%s': want application/json, application/x-npy, "
			  "application/x-tfrecord, image/jpeg or image/png",
			  shown ? shown : "?");
		free(shown);
		return NULL;
	}
	if (!max || max > s->max_queue)
		max = s->max_queue;
	serve_gen *g = serve_current(s);
	dp_req *r = NULL;
	switch (t) {
	case T_JSON: r = from_json(s, g, body, len, max, e); break;
	case T_NPY: r = from_npy(s, g, body, len, max, e); break;
	case T_TFRECORD: r = from_tfrecord(s, g, body, len, max, e); break;
	case T_IMAGE: r = from_image(s, g, body, len, e); break;
	}
	if (!r)
		serve_release(s, g); /* the reference serve_current gave */
	return r;
}
