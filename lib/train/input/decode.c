/*
 * decode.c - a record into a sample (dp_data.h): the feature's raw bytes,
 * float or int64 lists, or an encoded image, into floats of the model's
 * input, and its label; errors name the source, record and byte offset.
 */
#define _GNU_SOURCE
#include "data_impl.h"
#include "dp_rng.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <glob.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>


int dp_decode_parse(const char *s)
{
	if (!strcmp(s, "uint8") || !strcmp(s, "u8"))
		return DP_DECODE_UINT8;
	if (!strcmp(s, "float32") || !strcmp(s, "f32"))
		return DP_DECODE_FLOAT32;
	if (!strcmp(s, "float64") || !strcmp(s, "f64"))
		return DP_DECODE_FLOAT64;
	if (!strcmp(s, "none"))
		return DP_DECODE_NONE;
	if (!strcmp(s, "image"))
		return DP_DECODE_IMAGE;
	return -1;
}

const char *dp_decode_name(int d)
{
	switch (d) {
	case DP_DECODE_UINT8: return "uint8";
	case DP_DECODE_FLOAT32: return "float32";
	case DP_DECODE_FLOAT64: return "float64";
	case DP_DECODE_IMAGE: return "image";
	default: return "none";
	}
}

int dp_parse_scale(const char *opt, const char *s, double *out, dp_err *e)
{
	char *end;
	errno = 0;
	double a = strtod(s, &end), b = 1;
	int ok = end != s && !errno;
	if (ok && *end == '/') {
		const char *q = end + 1;
		b = strtod(q, &end);
		ok = end != q && !errno;
	}
	if (!ok || *end || !isfinite(a) || !isfinite(b) || b == 0 || !isfinite(a / b) || a / b == 0)
		return dp_seterr(e, DP_EARG, "%s '%s': want a non-zero number such as 0.5 or 1/255",
				 opt, s);
	/* inputs are float32: a scale past its range makes every value
	 * infinite (or zero) */
	if (fabs(a / b) > FLT_MAX || (float)(a / b) == 0)
		return dp_seterr(e, DP_ELIMIT,
				 "%s '%s': beyond float32's range (inputs are float32: a "
				 "magnitude from 1.4e-45 to 3.4e+38)",
				 opt, s);
	*out = a / b;
	return DP_OK;
}

int dp_data_opt(const char *name, const char *value, int *hwc, unsigned *threads, dp_err *e)
{
	if (!strcmp(name, "layout")) {
		if (strcmp(value, "chw") && strcmp(value, "hwc"))
			return dp_seterr(e, DP_EARG, "--layout '%s': want chw or hwc", value);
		*hwc = !strcmp(value, "hwc");
		return DP_OK;
	}
	if (!strcmp(name, "decode-threads")) {
		uint64_t n;
		int rc = dp_parse_count("--decode-threads", value, 0, 256, &n, e);
		if (rc == DP_OK)
			*threads = (unsigned)n;
		return rc;
	}
	return dp_seterr(e, DP_EARG, "unknown input option '%s'", name);
}

unsigned dp_data_default_threads(int host)
{
	int n = host ? 0 : dp_default_threads(NULL, NULL) - 2;
	return n < 0 ? 0 : n > 8 ? 8 : (unsigned)n;
}

static int rec_err(dp_data *d, size_t src, uint64_t index, uint64_t offset, dp_err *e,
		   const char *fmt, ...) __attribute__((format(printf, 6, 7)));

static int rec_err(dp_data *d, size_t src, uint64_t index, uint64_t offset, dp_err *e,
		   const char *fmt, ...)
{
	char why[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	return dp_seterr(e, DP_EDATA, "%s: record %" PRIu64 " at byte %" PRIu64 ": %s",
			 d->src[src].name, index, offset, why);
}

/* The names of a record's features, for "missing" messages. */
static void feature_names(const dp_example *ex, char *buf, size_t len)
{
	size_t n = 0;
	buf[0] = 0;
	for (size_t i = 0; i < ex->n && n + 4 < len; i++) {
		char *nm = dp_shown(ex->f[i].name, ex->f[i].name_len > 40 ? 40 : ex->f[i].name_len);
		int w = snprintf(buf + n, len - n, "%s%s", i ? ", " : "", nm ? nm : "?");
		free(nm);
		if (w < 0 || (size_t)w >= len - n) {
			snprintf(buf + (len > 5 ? len - 5 : 0), 5, "...");
			return;
		}
		n += (size_t)w;
	}
	if (!ex->n)
		snprintf(buf, len, "none");
}

struct bytes_ctx {
	uint8_t *dst;
	size_t n, cap;
};

static int bytes_cat(const uint8_t *p, size_t len, void *c)
{
	struct bytes_ctx *b = c;
	if (len > b->cap - b->n) {
		b->n = b->cap + 1; /* too long */
		return 1;
	}
	memcpy(b->dst + b->n, p, len);
	b->n += len;
	return 0;
}

/* Fill out[0..n) from feature f as floats, bytes decoded as `raw` (enum
 * dp_decode; NONE: bytes are an error).  0, or -1 with a message in why
 * (a wrong size says what was found and what was expected: n, which is
 * `size_what`). */
static int decode_values(worker *w, const dp_feature *f, int raw, const char *what,
			 const char *fname, float *out, size_t n, const char *size_what, char *why,
			 size_t wl)
{
	switch (f->kind) {
	case DP_KIND_FLOAT:
	case DP_KIND_INT64:
		if (raw != DP_DECODE_NONE) {
			snprintf(why, wl, "%s '%s' is a%s list: --decode-raw is for bytes", what,
				 fname, f->kind == DP_KIND_FLOAT ? " float" : "n int64");
			return -1;
		}
		if (f->count != n) {
			snprintf(why, wl, "%s '%s' has %zu values, expected %zu (%s)", what, fname,
				 f->count, n, size_what);
			return -1;
		}
		if (f->kind == DP_KIND_FLOAT) {
			dp_feature_floats(f, out, n);
		} else {
			dp_feature_int64s(f, w->iscratch, n);
			for (size_t i = 0; i < n; i++)
				out[i] = (float)w->iscratch[i];
		}
		return 0;
	case DP_KIND_BYTES: {
		if (raw == DP_DECODE_NONE) {
			snprintf(why, wl, "%s '%s' is a bytes list%s", what, fname,
				 what[0] == 'f' ? ": give --decode-raw uint8, float32 or float64" : "");
			return -1;
		}
		size_t es = raw == DP_DECODE_UINT8 ? 1 : raw == DP_DECODE_FLOAT32 ? 4 : 8;
		size_t want = n * es, len;
		const uint8_t *p;
		if (f->count == 1) {
			dp_feature_bytes0(f, &p, &len);
		} else { /* several values: concatenated, through the scratch buffer */
			struct bytes_ctx bc = {(uint8_t *)w->iscratch, 0, want};
			dp_feature_bytes_each(f, bytes_cat, &bc);
			p = bc.dst;
			len = bc.n;
		}
		if (len != want) {
			char found[48];
			if (len > want && f->count > 1) /* not all counted */
				snprintf(found, sizeof found, "more than %zu", want);
			else
				snprintf(found, sizeof found, "%zu", len);
			snprintf(why, wl, "%s '%s' holds %s bytes, expected %zu (%zu %s values: %s)",
				 what, fname, found, want, n, dp_decode_name(raw), size_what);
			return -1;
		}
		if (es == 1) {
			for (size_t i = 0; i < n; i++)
				out[i] = (float)p[i];
		} else if (es == 4) {
			memcpy(out, p, want);
		} else {
			for (size_t i = 0; i < n; i++) {
				double v;
				memcpy(&v, p + 8 * i, 8);
				out[i] = (float)v;
				if (isfinite(v) && !isfinite(out[i])) {
					snprintf(why, wl, "%s '%s': value %zu is %g, beyond float32's range",
						 what, fname, i, v);
					return -1;
				}
			}
		}
		return 0;
	}
	default:
		snprintf(why, wl, "%s '%s' has no values", what, fname);
		return -1;
	}
}

/* The record's image in x: (C, H, W) floats.  BAD_IMAGE when it does not
 * decode. */
static int decode_image(worker *w, const dp_feature *fx, size_t src, uint64_t index,
			uint64_t offset, float *x, dp_err *e)
{
	dp_data *d = w->d;
	const uint8_t *p;
	size_t len;
	if (fx->kind != DP_KIND_BYTES || fx->count != 1 || dp_feature_bytes0(fx, &p, &len) != 1)
		return rec_err(d, src, index, offset, e,
			       "feature '%s' is a%s %s list of %zu values: --decode image wants one "
			       "bytes value, the image file",
			       d->feature, fx->kind == DP_KIND_INT64 ? "n" : "",
			       dp_kind_name(fx->kind), fx->count);
	uint64_t seed = dp_rng_key(d->o.seed, 4,
				   (uint64_t[]){DP_RNG_AUGMENT, d->epoch, src, index});
	dp_err ie;
	int rc = dp_image_transform(w->img, p, len, &d->o.image, seed, x, &ie);
	if (rc == DP_ENOMEM)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	if (rc < 0) { /* named by its image/filename too, when it has one */
		const dp_feature *fn = dp_example_get(&w->ex, "image/filename");
		const uint8_t *np = NULL;
		size_t nl = 0;
		char *shown = NULL; /* escaped: a name can hold terminal controls */
		if (fn && fn->kind == DP_KIND_BYTES && dp_feature_bytes0(fn, &np, &nl) == 1 &&
		    nl < 256 && (shown = dp_shown(np, nl)))
			rec_err(d, src, index, offset, e, "%s: %s", shown, ie.msg);
		else
			rec_err(d, src, index, offset, e, "feature '%s': %s", d->feature, ie.msg);
		free(shown);
		return BAD_IMAGE;
	}
	return DP_OK;
}

/* Whether x[0..n) and each x[j] * sc are all finite: a pass with no branch
 * per value, so that it vectorises (decode.c is built -O3, as the
 * backend's loops); the messages come from a second look, when not. */
static int all_finite(const float *x, size_t n, float sc)
{
	int bad = 0;
	for (size_t j = 0; j < n; j++)
		bad |= !(fabsf(x[j]) <= FLT_MAX) | !(fabsf(x[j] * sc) <= FLT_MAX);
	return !bad;
}

int dp_data_sample(const dp_data_opts *o, float *x, float *tmp, dp_err *e)
{
	size_t n = o->in_size;
	if (o->hwc) { /* a raw array stored (H, W, C), to (C, H, W) */
		size_t c = o->shape[0], hw = o->shape[1] * o->shape[2];
		memcpy(tmp, x, c * hw * sizeof *x);
		for (size_t i = 0; i < hw; i++)
			for (size_t k = 0; k < c; k++)
				x[k * hw + i] = tmp[i * c + k];
	}
	float sc = o->scale != 0 ? (float)o->scale : 1.0f;
	if (!all_finite(x, n, sc)) {
		for (size_t j = 0; j < n; j++)
			if (!isfinite(x[j]))
				return dp_seterr(e, DP_EDATA, "value %zu is %s", j,
						 isnan(x[j]) ? "NaN" : "infinite");
		for (size_t j = 0; j < n; j++)
			if (!isfinite(x[j] * sc)) /* the scale's doing, not the data's */
				return dp_seterr(e, DP_EDATA,
						 "value %zu (%g) times --scale %g is beyond "
						 "float32's range: lower --scale",
						 j, (double)x[j], o->scale);
	}
	if (sc != 1.0f)
		for (size_t j = 0; j < n; j++)
			x[j] *= sc;
	return DP_OK;
}

/* An int64 feature of one value, by either of two names; -1 if none. */
static int64_t dim_of(const dp_example *ex, const char *a, const char *b)
{
	const dp_feature *f = dp_example_get(ex, a);
	if (!f)
		f = dp_example_get(ex, b);
	int64_t v;
	if (!f || f->kind != DP_KIND_INT64 || f->count != 1 || dp_feature_int64s(f, &v, 1) != 1)
		return -1;
	return v;
}

/* A raw record that says its height, width and channels (TensorFlow's
 * image/height... or height, width, depth) where the input shape read as
 * C x H x W disagrees but H x W x C agrees: the shape was given
 * channels-last. */
static int check_dims(worker *w, size_t src, uint64_t index, uint64_t offset, dp_err *e)
{
	dp_data *d = w->d;
	const size_t *sh = d->o.shape;
	int64_t h = dim_of(&w->ex, "image/height", "height");
	int64_t wd = dim_of(&w->ex, "image/width", "width");
	int64_t c = dim_of(&w->ex, "image/channels", "depth");
	if (h < 0 || wd < 0 || c < 0 || !sh[0])
		return DP_OK;
	if ((size_t)c == sh[0] && (size_t)h == sh[1] && (size_t)wd == sh[2])
		return DP_OK;
	if ((size_t)h == sh[0] && (size_t)wd == sh[1] && (size_t)c == sh[2])
		return rec_err(d, src, index, offset, e,
			       "the record says %" PRId64 "x%" PRId64 " pixels of %" PRId64
			       " channels, but the input shape %zux%zux%zu is C x H x W: give "
			       "--input-shape %" PRId64 "x%" PRId64 "x%" PRId64 "%s",
			       h, wd, c, sh[0], sh[1], sh[2], c, h, wd,
			       d->o.hwc ? "" : " --layout hwc (if the bytes are channels-last)");
	return DP_OK;
}

/* Class `label` is named by the record's class_text feature, if it has
 * one: the first name met is kept, another one later marks the names bad. */
static void note_class(dp_data *d, const dp_example *ex, size_t label)
{
	const dp_feature *f = dp_example_get(ex, d->class_text);
	const uint8_t *p;
	size_t n;
	if (!f || f->kind != DP_KIND_BYTES || f->count != 1 || !dp_feature_bytes0(f, &p, &n) || !n ||
	    memchr(p, 0, n))
		return;
	pthread_mutex_lock(&d->names_mu);
	char *have = d->names[label];
	if (!have) {
		if ((have = malloc(n + 1))) {
			memcpy(have, p, n);
			have[n] = 0;
			d->names[label] = have;
		}
	} else if (strlen(have) != n || memcmp(have, p, n)) {
		d->names_bad = 1;
	}
	pthread_mutex_unlock(&d->names_mu);
}

/* Decode record (data, len) into sample i of batch b with worker w.
 * DP_OK, BAD_IMAGE (e set), or an error. */
int data_decode(worker *w, const uint8_t *data, size_t len, size_t src, uint64_t index,
		  uint64_t offset, dp_batch *b, size_t i, dp_err *e)
{
	dp_data *d = w->d;
	dp_err pe;
	if (dp_example_parse(&w->ex, data, len, &pe) < 0)
		return pe.code == DP_ENOMEM ? dp_seterr(e, DP_ENOMEM, "out of memory")
					    : rec_err(d, src, index, offset, e, "%s", pe.msg);
	const dp_feature *fx = dp_example_get(&w->ex, d->feature);
	const dp_feature *fy = d->o.label_kind == DP_LABEL_NONE ? NULL : dp_example_get(&w->ex, d->label);
	char why[512], names[256];
	if (!fx || (!fy && d->o.label_kind != DP_LABEL_NONE)) {
		feature_names(&w->ex, names, sizeof names);
		return rec_err(d, src, index, offset, e, "no %s '%s' (the record has: %s)",
			       fx ? "label" : "feature", fx ? d->label : d->feature, names);
	}
	size_t n = d->o.in_size;
	float *x = b->x + i * n;
	if (b->src) {
		b->src[i] = (uint32_t)src;
		b->rec[i] = index;
	}
	if (b->name) { /* the record's name (image/filename), if it has one */
		const dp_feature *fn = dp_example_get(&w->ex, d->sample_name);
		const uint8_t *p;
		size_t pl;
		free(b->name[i]);
		b->name[i] = NULL;
		if (fn && fn->kind == DP_KIND_BYTES && dp_feature_bytes0(fn, &p, &pl) && !memchr(p, 0, pl) &&
		    (b->name[i] = malloc(pl + 1))) {
			memcpy(b->name[i], p, pl);
			b->name[i][pl] = 0;
		}
	}
	int rc;
	if (d->o.decode == DP_DECODE_IMAGE) {
		if ((rc = decode_image(w, fx, src, index, offset, x, e)) != DP_OK)
			return rc;
		goto label;
	}
	if (index == 0 && (rc = check_dims(w, src, index, offset, e)) < 0)
		return rc;
	if (decode_values(w, fx, d->o.decode, "feature", d->feature, x, n,
			  "the size of the input shape", why, sizeof why) < 0)
		return rec_err(d, src, index, offset, e, "%s", why);
	dp_err se;
	if (dp_data_sample(&d->o, x, w->tmp, &se) < 0)
		return rec_err(d, src, index, offset, e, "feature '%s': %s", d->feature, se.msg);
label:
	if (d->o.label_kind == DP_LABEL_NONE)
		return DP_OK;
	if (d->o.label_kind == DP_LABEL_CLASS) {
		int64_t v;
		if (fy->kind == DP_KIND_INT64 && fy->count == 1) {
			dp_feature_int64s(fy, &v, 1);
		} else if (fy->kind == DP_KIND_FLOAT && fy->count == 1) {
			float fv;
			dp_feature_floats(fy, &fv, 1);
			if (!(fv == floorf(fv)) || fabsf(fv) > 1e9f)
				return rec_err(d, src, index, offset, e,
					       "label '%s' is %g, not a class number", d->label, fv);
			v = (int64_t)fv;
		} else {
			return rec_err(d, src, index, offset, e,
				       "label '%s' is a %s list of %zu values: want one int64 class",
				       d->label, dp_kind_name(fy->kind), fy->count);
		}
		if (v < 0 || (uint64_t)v >= d->o.nclass)
			return rec_err(d, src, index, offset, e,
				       "label '%s' is %" PRId64 ", outside 0..%zu (the model has %zu "
				       "classes)",
				       d->label, v, d->o.nclass - 1, d->o.nclass);
		b->y[i] = (int32_t)v;
		if (d->class_text)
			note_class(d, &w->ex, (size_t)v);
	} else {
		size_t k = d->o.label_size;
		float *t = b->t + i * k;
		if (decode_values(w, fy, DP_DECODE_NONE, "label", d->label, t, k,
				  "the model's output size", why, sizeof why) < 0)
			return rec_err(d, src, index, offset, e, "%s", why);
		for (size_t j = 0; j < k; j++)
			if (!isfinite(t[j]))
				return rec_err(d, src, index, offset, e, "label '%s': value %zu is %s",
					       d->label, j, isnan(t[j]) ? "NaN" : "infinite");
	}
	return DP_OK;
}
