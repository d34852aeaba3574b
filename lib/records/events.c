/*
 * events.c - TensorBoard event files (dp_events.h): Event, Summary and
 * HistogramProto encoding, event files written through the record writer,
 * and a reader of an event's scalars in every form TensorFlow and PyTorch
 * write them (simple_value, or a one-number TensorProto).
 *
 * The wire rules of the reader are example.c's (wire.h): a known field of
 * the wrong wire type, a group, a length past the message's end are
 * malformed; unknown fields are skipped.
 */
#define _GNU_SOURCE
#include "dp_events.h"
#include "dp_record.h"
#include "wire.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- Encoding ------------------------------------------------------------ */

static double wall_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

static void pb_varint(dp_buf *b, uint64_t v)
{
	uint8_t t[10];
	dp_buf_add(b, t, (size_t)(put_varint(t, v) - t));
}

static void pb_tag(dp_buf *b, uint32_t num, int wt)
{
	pb_varint(b, (uint64_t)num << 3 | (uint64_t)wt);
}

static void pb_bytes(dp_buf *b, uint32_t num, const void *p, size_t n)
{
	pb_tag(b, num, WT_LEN);
	pb_varint(b, n);
	dp_buf_add(b, p, n);
}

static void pb_double(dp_buf *b, uint32_t num, double d)
{
	pb_tag(b, num, WT_I64);
	dp_buf_add(b, &d, 8); /* little-endian hosts only (dp_record.h) */
}

static size_t varint_len(uint64_t v)
{
	size_t n = 1;
	while (v >= 0x80)
		v >>= 7, n++;
	return n;
}

int dp_summary_scalar(dp_buf *summary, const char *tag, float v)
{
	size_t tl = strlen(tag);
	/* Value { tag = 1; simple_value = 2 }, as Summary.value = 1 */
	pb_tag(summary, 1, WT_LEN);
	pb_varint(summary, 1 + varint_len(tl) + tl + 1 + 4);
	pb_bytes(summary, 1, tag, tl);
	pb_tag(summary, 2, WT_I32);
	dp_buf_add(summary, &v, 4);
	return summary->err;
}

int dp_summary_histogram(dp_buf *summary, const char *tag, const float *x, size_t n, int buckets)
{
	if (buckets < 1)
		buckets = 1;
	double lo = INFINITY, hi = -INFINITY, num = 0, sum = 0, sq = 0;
	for (size_t i = 0; i < n; i++) {
		double v = x[i];
		if (isnan(v))
			continue;
		lo = fmin(lo, v);
		hi = fmax(hi, v);
		num++;
		sum += v;
		sq += v * v;
	}
	if (num == 0)
		lo = hi = 0, buckets = 1;
	double *cnt = calloc((size_t)buckets, sizeof *cnt);
	if (!cnt)
		return summary->err = DP_ENOMEM;
	double w = (hi - lo) / buckets;
	for (size_t i = 0; i < n; i++) {
		if (isnan(x[i]))
			continue;
		int k = w > 0 && isfinite(w) ? (int)((x[i] - lo) / w) : buckets - 1;
		cnt[k < 0 ? 0 : k >= buckets ? buckets - 1 : k]++;
	}
	dp_buf h = DP_BUF_INIT;
	pb_double(&h, 1, lo);
	pb_double(&h, 2, hi);
	pb_double(&h, 3, num);
	pb_double(&h, 4, sum);
	pb_double(&h, 5, sq);
	pb_tag(&h, 6, WT_LEN);
	pb_varint(&h, 8 * (uint64_t)buckets);
	for (int k = 0; k < buckets; k++) {
		double lim = k == buckets - 1 ? hi : lo + w * (k + 1);
		dp_buf_add(&h, &lim, 8);
	}
	pb_tag(&h, 7, WT_LEN);
	pb_varint(&h, 8 * (uint64_t)buckets);
	dp_buf_add(&h, cnt, 8 * (size_t)buckets);
	free(cnt);
	dp_buf v = DP_BUF_INIT;
	pb_bytes(&v, 1, tag, strlen(tag));
	pb_bytes(&v, 5, h.p, h.len);
	pb_bytes(summary, 1, v.p, v.len);
	int err = h.err ? h.err : v.err;
	dp_buf_free(&h);
	dp_buf_free(&v);
	if (err && !summary->err)
		summary->err = err;
	return summary->err;
}

/* Summary.value of tag with metadata naming plugin (its content, when
 * given) and the TensorProto body tensor (a sub-message, as is). */
static int plugin_value(dp_buf *summary, const char *tag, const char *plugin, const dp_buf *content,
			const dp_buf *tensor)
{
	dp_buf pd = DP_BUF_INIT, md = DP_BUF_INIT, v = DP_BUF_INIT;
	pb_bytes(&pd, 1, plugin, strlen(plugin));   /* PluginData.plugin_name */
	if (content && content->len)
		pb_bytes(&pd, 2, content->p, content->len); /* .content */
	pb_bytes(&md, 1, pd.p, pd.len);              /* SummaryMetadata.plugin_data */
	pb_bytes(&v, 1, tag, strlen(tag));           /* Value.tag */
	pb_bytes(&v, 9, md.p, md.len);               /* Value.metadata */
	pb_bytes(&v, 8, tensor->p, tensor->len);     /* Value.tensor */
	pb_bytes(summary, 1, v.p, v.len);
	int err = pd.err ? pd.err : md.err ? md.err : v.err;
	if (err && !summary->err)
		summary->err = err;
	dp_buf_free(&pd);
	dp_buf_free(&md);
	dp_buf_free(&v);
	return summary->err;
}

int dp_summary_text(dp_buf *summary, const char *tag, const char *text)
{
	/* TensorProto { dtype = DT_STRING (7); tensor_shape = {} (a scalar,
	 * as tf.summary.text writes); string_val = 8 } */
	dp_buf t = DP_BUF_INIT;
	pb_tag(&t, 1, WT_VARINT);
	pb_varint(&t, 7);
	pb_bytes(&t, 2, "", 0);
	pb_bytes(&t, 8, text, strlen(text));
	int rc = t.err ? (summary->err = t.err) : plugin_value(summary, tag, "text", NULL, &t);
	dp_buf_free(&t);
	return rc;
}

/* The hparams plugin's values carry TensorBoard's NULL_TENSOR: an empty
 * float vector, TensorProto { dtype = DT_FLOAT; tensor_shape { dim {} } }. */
static int hparams_value(dp_buf *summary, const char *tag, const dp_buf *data)
{
	static const uint8_t null_tensor[] = {0x08, 0x01, 0x12, 0x02, 0x12, 0x00};
	dp_buf t = DP_BUF_INIT, c = DP_BUF_INIT;
	dp_buf_add(&t, null_tensor, sizeof null_tensor);
	/* HParamsPluginData { version = 1 (0: left out); the data's field } */
	dp_buf_add(&c, data->p, data->len);
	int rc = t.err || c.err || data->err ? (summary->err = DP_ENOMEM)
					      : plugin_value(summary, tag, "hparams", &c, &t);
	dp_buf_free(&t);
	dp_buf_free(&c);
	return rc;
}

int dp_summary_hparams_start(dp_buf *summary, const char *const *kv, const char *types,
			     double start_time)
{
	dp_buf ssi = DP_BUF_INIT, ent = DP_BUF_INIT, val = DP_BUF_INIT, d = DP_BUF_INIT;
	for (const char *const *x = kv; x && x[0] && x[1]; x += 2) {
		int type = types ? types[(x - kv) / 2] : 0;
		if (!x[1][0])
			continue;
		/* google.protobuf.Value { number_value = 2 | string_value = 3 |
		 * bool_value = 4 } */
		char *end;
		errno = 0;
		double num = strtod(x[1], &end);
		dp_buf_reset(&val);
		if (type != 's' && type != 'n' && (!strcmp(x[1], "true") || !strcmp(x[1], "false"))) {
			pb_tag(&val, 4, WT_VARINT);
			pb_varint(&val, x[1][0] == 't');
		} else if (type != 's' && type != 'b' && !*end && !errno && isfinite(num) &&
			   strspn(x[1], "0123456789+-.eE") == strlen(x[1])) { /* no hex, inf, nan */
			pb_double(&val, 2, num);
		} else {
			pb_bytes(&val, 3, x[1], strlen(x[1]));
		}
		/* map<string, Value> hparams = 1: entries { key = 1; value = 2 } */
		dp_buf_reset(&ent);
		pb_bytes(&ent, 1, x[0], strlen(x[0]));
		pb_bytes(&ent, 2, val.p, val.len);
		pb_bytes(&ssi, 1, ent.p, ent.len);
	}
	pb_double(&ssi, 5, start_time ? start_time : wall_now()); /* start_time_secs */
	pb_bytes(&d, 3, ssi.p, ssi.len);                         /* .session_start_info */
	if (ssi.err || ent.err || val.err)
		d.err = DP_ENOMEM;
	int rc = hparams_value(summary, "_hparams_/session_start_info", &d);
	dp_buf_free(&ssi);
	dp_buf_free(&ent);
	dp_buf_free(&val);
	dp_buf_free(&d);
	return rc;
}

int dp_summary_hparams_end(dp_buf *summary, int ok, double end_time)
{
	/* SessionEndInfo { status = 1 (STATUS_SUCCESS 1, STATUS_FAILURE 2);
	 * end_time_secs = 2 } as HParamsPluginData.session_end_info = 4 */
	dp_buf sei = DP_BUF_INIT, d = DP_BUF_INIT;
	pb_tag(&sei, 1, WT_VARINT);
	pb_varint(&sei, ok ? 1 : 2);
	pb_double(&sei, 2, end_time ? end_time : wall_now());
	pb_bytes(&d, 4, sei.p, sei.len);
	if (sei.err)
		d.err = DP_ENOMEM;
	int rc = hparams_value(summary, "_hparams_/session_end_info", &d);
	dp_buf_free(&sei);
	dp_buf_free(&d);
	return rc;
}

int dp_event_encode(dp_buf *out, double wall_time, int64_t step, const char *file_version,
		    const dp_buf *summary)
{
	pb_double(out, 1, wall_time);
	if (step) {
		pb_tag(out, 2, WT_VARINT);
		pb_varint(out, (uint64_t)step);
	}
	if (file_version)
		pb_bytes(out, 3, file_version, strlen(file_version));
	else if (summary)
		pb_bytes(out, 5, summary->p, summary->len);
	return out->err;
}

/* ---- Writing a file ------------------------------------------------------ */

struct dp_events {
	char *path;
	int fd;
	dp_writer *w;
	dp_buf sum, ev;
};

/* mkdir -p dir */
static int make_dirs(const char *dir, dp_err *e)
{
	char *p = strdup(dir);
	if (!p)
		return dp_seterr(e, DP_ENOMEM, "%s: out of memory", dir);
	for (char *s = p + 1;; s++) {
		if (*s && *s != '/')
			continue;
		char c = *s;
		*s = 0;
		if (mkdir(p, 0777) < 0 && errno != EEXIST) {
			int rc = dp_syserr(e, "%s", p);
			free(p);
			return rc;
		}
		*s = c;
		if (!c)
			break;
	}
	free(p);
	struct stat st;
	if (stat(dir, &st) < 0)
		return dp_syserr(e, "%s", dir);
	if (!S_ISDIR(st.st_mode))
		return dp_seterr(e, DP_EIO, "%s: Not a directory", dir);
	return DP_OK;
}

static int write_event(dp_events *w, double wall, int64_t step, const char *version, dp_err *e)
{
	dp_buf_reset(&w->ev);
	if (dp_event_encode(&w->ev, wall ? wall : wall_now(), step, version, &w->sum) < 0)
		return dp_seterr(e, w->ev.err, "%s: out of memory", w->path);
	dp_buf_reset(&w->sum);
	if (dp_writer_write(w->w, w->ev.p, w->ev.len, e) < 0 || dp_writer_flush(w->w, e) < 0)
		return e ? e->code : DP_EIO;
	return DP_OK;
}

dp_events *dp_events_create(const char *dir, dp_err *e)
{
	if (make_dirs(dir, e) < 0)
		return NULL;
	char host[256] = "localhost";
	if (gethostname(host, sizeof host - 1) < 0 || !host[0])
		strcpy(host, "localhost");
	for (char *h = host; *h; h++) /* a name, not a path */
		if (*h == '/')
			*h = '_';
	dp_events *w = calloc(1, sizeof *w);
	if (!w)
		return dp_seterr(e, DP_ENOMEM, "%s: out of memory", dir), NULL;
	w->fd = -1;
	dp_buf_init(&w->sum, 0);
	dp_buf_init(&w->ev, 0);
	long long t = (long long)time(NULL);
	for (int k = 0; k < 1000 && w->fd < 0; k++) {
		free(w->path);
		w->path = NULL;
		dp_buf b = DP_BUF_INIT;
		dp_buf_printf(&b, "%s%sevents.out.tfevents.%010lld.%s", dir,
			      dir[strlen(dir) - 1] == '/' ? "" : "/", t, host);
		if (k)
			dp_buf_printf(&b, ".%d", k);
		if (!(w->path = dp_buf_take(&b))) {
			dp_seterr(e, DP_ENOMEM, "%s: out of memory", dir);
			goto fail;
		}
		w->fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0666);
		if (w->fd < 0 && errno != EEXIST) {
			dp_syserr(e, "%s", w->path);
			goto fail;
		}
	}
	if (w->fd < 0) {
		dp_seterr(e, DP_EIO, "%s: 1000 event files of this second already", dir);
		goto fail;
	}
	if (!(w->w = dp_writer_open_fd(w->fd, w->path, DP_COMP_NONE, -1, e)) ||
	    write_event(w, 0, 0, DP_EVENTS_VERSION, e) < 0)
		goto fail;
	return w;
fail:
	dp_events_close(w, NULL);
	return NULL;
}

const char *dp_events_path(const dp_events *w)
{
	return w->path;
}

dp_buf *dp_events_summary(dp_events *w)
{
	return &w->sum;
}

int dp_events_write(dp_events *w, int64_t step, double wall_time, dp_err *e)
{
	if (w->sum.err)
		return dp_seterr(e, w->sum.err, "%s: out of memory", w->path);
	if (!w->sum.len)
		return DP_OK;
	return write_event(w, wall_time, step, NULL, e);
}

int dp_events_close(dp_events *w, dp_err *e)
{
	if (!w)
		return DP_OK;
	int rc = DP_OK;
	if (w->w) {
		rc = dp_writer_finish(w->w, e);
		dp_writer_free(w->w);
	}
	if (w->fd >= 0 && close(w->fd) < 0 && rc == DP_OK)
		rc = dp_syserr(e, "%s", w->path);
	dp_buf_free(&w->sum);
	dp_buf_free(&w->ev);
	free(w->path);
	free(w);
	return rc;
}

/* ---- Reading -------------------------------------------------------------- */

/* A field of a known number must have its wire type. */
#define WANT(f, t)                                                                                 \
	do {                                                                                       \
		if ((f).wt != (t)) {                                                               \
			*why = "a known field with the wrong wire type";                           \
			return -1;                                                                 \
		}                                                                                  \
	} while (0)

static double half_to_double(uint32_t h)
{
	int ex = (int)(h >> 10 & 0x1f), m = (int)(h & 0x3ff);
	double v = ex == 0 ? ldexp(m, -24) : ex == 31 ? (m ? NAN : INFINITY) : ldexp(m | 0x400, ex - 25);
	return h & 0x8000 ? -v : v;
}

static double bf16_to_double(uint32_t b)
{
	uint32_t u = (b & 0xffff) << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* One list of a TensorProto: how many values it gave, and the first. */
struct vals {
	uint64_t n;
	uint64_t first; /* varint, or fixed bits */
};

/* Count a field's values into l: packed (one length-delimited run of
 * fixed-size or varint values) or not (one value). */
static int take_vals(struct vals *l, const field *f, int fixed, const char **why)
{
	if (f->wt != WT_LEN) {
		if ((fixed == 4 && f->wt != WT_I32) || (fixed == 8 && f->wt != WT_I64) ||
		    (!fixed && f->wt != WT_VARINT)) {
			*why = "a known field with the wrong wire type";
			return -1;
		}
		if (!l->n++)
			l->first = f->v;
		return 0;
	}
	if (fixed) {
		if (f->len % (size_t)fixed) {
			*why = "a packed list of fixed-size values with a partial value";
			return -1;
		}
		if (f->len && !l->n) {
			uint32_t x;
			if (fixed == 4)
				memcpy(&x, f->data, 4), l->first = x;
			else
				memcpy(&l->first, f->data, 8);
		}
		l->n += f->len / (size_t)fixed;
		return 0;
	}
	const uint8_t *q = f->data, *qe = q + f->len;
	while (q < qe) {
		uint64_t v;
		if (rd_varint(&q, qe, &v) < 0) {
			*why = "a bad varint in a packed list";
			return -1;
		}
		if (!l->n++)
			l->first = v;
	}
	return 0;
}

/* The number of elements of a TensorShapeProto { repeated Dim dim = 2 {
 * int64 size = 1 } }: -1 when unknown or not a count (a negative size,
 * unknown_rank), capped at 2; -2 when malformed. */
static int64_t shape_elems(const uint8_t *p, size_t len, const char **why)
{
	const uint8_t *end = p + len;
	field f;
	int64_t n = 1;
	int r;
	while ((r = rd_field(&p, end, &f, why)) > 0) {
		if ((f.num == 3 && f.wt != WT_VARINT) || (f.num == 2 && f.wt != WT_LEN))
			goto bad_type;
		if (f.num == 3) {
			if (f.v)
				n = -1;
		} else if (f.num == 2) {
			const uint8_t *q = f.data, *qe = q + f.len;
			field g;
			int64_t size = 0;
			while ((r = rd_field(&q, qe, &g, why)) > 0)
				if (g.num == 1) {
					if (g.wt != WT_VARINT)
						goto bad_type;
					size = (int64_t)g.v;
				}
			if (r < 0)
				return -2;
			if (size < 0 || n < 0)
				n = -1;
			else if (size == 0 || n == 0)
				n = 0;
			else
				n = size >= 2 || n >= 2 ? 2 : 1;
		}
	}
	return r < 0 ? -2 : n;
bad_type:
	*why = "a known field with the wrong wire type";
	return -2;
}

enum {
	DT_FLOAT = 1, DT_DOUBLE = 2, DT_INT32 = 3, DT_UINT8 = 4, DT_INT16 = 5, DT_INT8 = 6,
	DT_INT64 = 9, DT_BFLOAT16 = 14, DT_UINT16 = 17, DT_HALF = 19
};

/* A TensorProto of one number: 1 with *v (and *single for float32), 0 for
 * any other tensor, -1 malformed. */
static int tensor_number(const uint8_t *p, size_t len, double *v, int *single, const char **why)
{
	const uint8_t *end = p + len;
	field f;
	uint64_t dtype = 0;
	int64_t elems = 1;
	const uint8_t *content = NULL;
	size_t clen = 0;
	struct vals half = {0, 0}, fl = {0, 0}, db = {0, 0}, in = {0, 0}, i64 = {0, 0};
	int r;
	while ((r = rd_field(&p, end, &f, why)) > 0) {
		switch (f.num) {
		case 1: WANT(f, WT_VARINT); dtype = f.v; break;
		case 2:
			WANT(f, WT_LEN);
			if ((elems = shape_elems(f.data, f.len, why)) == -2)
				return -1;
			break;
		case 4: WANT(f, WT_LEN); content = f.data, clen = f.len; break;
		case 13: if (take_vals(&half, &f, 0, why) < 0) return -1; break;
		case 5: if (take_vals(&fl, &f, 4, why) < 0) return -1; break;
		case 6: if (take_vals(&db, &f, 8, why) < 0) return -1; break;
		case 7: if (take_vals(&in, &f, 0, why) < 0) return -1; break;
		case 10: if (take_vals(&i64, &f, 0, why) < 0) return -1; break;
		default: break;
		}
	}
	if (r < 0)
		return -1;
	if (elems != 1)
		return 0;
	size_t size = dtype == DT_FLOAT || dtype == DT_INT32 ? 4
		      : dtype == DT_DOUBLE || dtype == DT_INT64 ? 8
		      : dtype == DT_UINT8 || dtype == DT_INT8 ? 1
		      : dtype == DT_INT16 || dtype == DT_UINT16 || dtype == DT_HALF || dtype == DT_BFLOAT16
			      ? 2
			      : 0;
	if (!size)
		return 0;
	uint64_t raw = 0;
	const struct vals *l = dtype == DT_FLOAT ? &fl : dtype == DT_DOUBLE ? &db
			       : dtype == DT_INT64 ? &i64 : dtype == DT_HALF || dtype == DT_BFLOAT16 ? &half
			       : &in;
	if (content && clen == size)
		memcpy(&raw, content, size);
	else if (!content && l->n == 1)
		raw = l->first;
	else
		return 0;
	*single = dtype == DT_FLOAT;
	switch (dtype) {
	case DT_FLOAT: {
		uint32_t u = (uint32_t)raw;
		float x;
		memcpy(&x, &u, 4);
		*v = x;
		break;
	}
	case DT_DOUBLE: memcpy(v, &raw, 8); break;
	case DT_INT64: *v = (double)(int64_t)raw; break;
	case DT_HALF: *v = half_to_double((uint32_t)raw); break;
	case DT_BFLOAT16: *v = bf16_to_double((uint32_t)raw); break;
	case DT_UINT8: *v = (double)(uint8_t)raw; break;
	case DT_INT8: *v = (double)(int8_t)raw; break;
	case DT_UINT16: *v = (double)(uint16_t)raw; break;
	case DT_INT16: *v = (double)(int16_t)raw; break;
	default: *v = (double)(int32_t)raw; break; /* int_val: sign-extended varints */
	}
	return 1;
}

/* SummaryMetadata: 1 when it names a plugin other than "scalars". */
static int other_plugin(const uint8_t *p, size_t len, const char **why)
{
	const uint8_t *end = p + len;
	field f, g;
	int r, other = 0;
	while ((r = rd_field(&p, end, &f, why)) > 0) {
		if (f.num != 1)
			continue;
		WANT(f, WT_LEN);
		const uint8_t *q = f.data, *qe = q + f.len;
		while ((r = rd_field(&q, qe, &g, why)) > 0)
			if (g.num == 1) {
				WANT(g, WT_LEN);
				other = !(g.len == 7 && memcmp(g.data, "scalars", 7) == 0);
			}
		if (r < 0)
			return -1;
	}
	return r < 0 ? -1 : other;
}

static int add_scalar(dp_event *ev, const uint8_t *tag, size_t tl, double v, int single)
{
	if (dp_grow(&ev->scalars, &ev->cap, ev->nscalars + 1, sizeof *ev->scalars) < 0)
		return -1;
	ev->scalars[ev->nscalars++] = (dp_event_scalar){(const char *)tag, tl, v, single};
	return 0;
}

/* One Summary.Value: a scalar added to ev, or counted as other. */
static int parse_value(dp_event *ev, const uint8_t *p, size_t len, const char **why)
{
	const uint8_t *end = p + len;
	field f;
	const uint8_t *tag = NULL, *tensor = NULL;
	size_t tl = 0, tlen = 0;
	int kind = 0, other = 0, r; /* kind: the oneof's field number */
	uint32_t simple = 0;
	while ((r = rd_field(&p, end, &f, why)) > 0) {
		switch (f.num) {
		case 1: WANT(f, WT_LEN); tag = f.data, tl = f.len; break;
		case 2: WANT(f, WT_I32); kind = 2, simple = (uint32_t)f.v; break;
		case 3: case 4: case 5: case 6: WANT(f, WT_LEN); kind = (int)f.num; break;
		case 8: WANT(f, WT_LEN); kind = 8, tensor = f.data, tlen = f.len; break;
		case 9:
			WANT(f, WT_LEN);
			if ((other = other_plugin(f.data, f.len, why)) < 0)
				return -1;
			break;
		default: break;
		}
	}
	if (r < 0)
		return -1;
	double v = 0;
	int single = 1, is = 0;
	if (kind == 2) {
		float x;
		memcpy(&x, &simple, 4);
		v = x, is = 1;
	} else if (kind == 8 && !other) {
		if ((is = tensor_number(tensor, tlen, &v, &single, why)) < 0)
			return -1;
	}
	if (is && tl) {
		if (add_scalar(ev, tag, tl, v, single) < 0) {
			*why = NULL; /* out of memory */
			return -1;
		}
	} else if (kind) {
		ev->nother++;
	}
	return 0;
}

static int parse_summary(dp_event *ev, const uint8_t *p, size_t len, const char **why)
{
	const uint8_t *end = p + len;
	field f;
	int r;
	while ((r = rd_field(&p, end, &f, why)) > 0) {
		if (f.num != 1)
			continue;
		WANT(f, WT_LEN);
		if (parse_value(ev, f.data, f.len, why) < 0)
			return -1;
	}
	return r;
}

int dp_event_parse(dp_event *ev, const void *buf, size_t len, dp_err *e)
{
	const uint8_t *p = buf, *end = p + len;
	const uint8_t *summary = NULL;
	size_t slen = 0;
	field f;
	int r;
	const char *why = "malformed";
	ev->wall_time = 0;
	ev->step = 0;
	ev->file_version = NULL;
	ev->file_version_len = 0;
	ev->nscalars = ev->nother = 0;
	while ((r = rd_field(&p, end, &f, &why)) > 0) {
		switch (f.num) {
		case 1:
			if (f.wt != WT_I64)
				goto bad_type;
			memcpy(&ev->wall_time, &f.v, 8);
			break;
		case 2:
			if (f.wt != WT_VARINT)
				goto bad_type;
			ev->step = (int64_t)f.v;
			break;
		case 3:
			if (f.wt != WT_LEN)
				goto bad_type;
			ev->file_version = (const char *)f.data;
			ev->file_version_len = f.len;
			summary = NULL; /* a oneof: the last one set wins */
			break;
		case 5:
			if (f.wt != WT_LEN)
				goto bad_type;
			/* repeated occurrences of a message field merge: the
			 * values of every one count */
			if (summary && parse_summary(ev, summary, slen, &why) < 0)
				goto bad;
			summary = f.data, slen = f.len;
			ev->file_version = NULL;
			break;
		default: break;
		}
	}
	if (r < 0)
		goto bad;
	if (summary && parse_summary(ev, summary, slen, &why) < 0)
		goto bad;
	return DP_OK;
bad_type:
	why = "a known field with the wrong wire type";
bad:
	if (!why)
		return dp_seterr(e, DP_ENOMEM, "event: out of memory");
	return dp_seterr(e, DP_EDATA, "not an Event: %s", why);
}

void dp_event_free(dp_event *ev)
{
	free(ev->scalars);
	ev->scalars = NULL;
	ev->cap = ev->nscalars = 0;
}

int dp_events_detect(const void *head, size_t len)
{
	const uint8_t *p = head;
	if (len < DP_TFR_HEADER + DP_TFR_FOOTER)
		return 0;
	uint64_t n;
	uint32_t c;
	memcpy(&n, p, 8);
	memcpy(&c, p + 8, 4);
	if (dp_crc_mask(dp_crc32c(0, p, 8)) != c || n > len - DP_TFR_HEADER - DP_TFR_FOOTER)
		return 0;
	memcpy(&c, p + DP_TFR_HEADER + n, 4);
	if (dp_crc_mask(dp_crc32c(0, p + DP_TFR_HEADER, (size_t)n)) != c)
		return 0;
	dp_event ev = DP_EVENT_INIT;
	int ok = dp_event_parse(&ev, p + DP_TFR_HEADER, (size_t)n, NULL) == 0 && ev.file_version &&
		 ev.file_version_len >= 12 && memcmp(ev.file_version, "brain.Event:", 12) == 0;
	dp_event_free(&ev);
	return ok;
}
