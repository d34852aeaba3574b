/*
 * s3get.c - the streaming reader: objects, in order, to one descriptor.
 *
 * The objects are cut into parts of conf.part_size bytes.  At most
 * W = conf.concurrency parts are alive at a time, always the next W in
 * output order (a window sliding over the stream): each is fetched by its
 * own ranged GET, all through one curl multi handle, into the buffer of its
 * ring slot (allocated once, reused).  A writer thread writes the head part
 * as its bytes arrive and hands its slot back when done, so memory stays
 * below W x part_size whatever the object sizes, and a slow reader of the
 * output never stalls the transfers.
 *
 * Every GET of an object whose ETag is known carries If-Match: a changed
 * object fails (412) instead of mixing two versions into the stream.  A
 * part whose transfer breaks is fetched again from its first missing byte
 * (Range: bytes=from-to), so output never repeats or loses a byte; every
 * answer's Content-Range, length and ETag are checked, and a single-part
 * object's bytes against the MD5 in its ETag.  Objects listed without a
 * size (named one by one, or in a manifest) are looked up with HEAD, a few
 * ahead of the stream.  Local files take the same path, read with pread.
 *
 * Threads: the calling thread runs curl and owns everything but the
 * writer's fields (written, md5); the ring's head/count and each part's
 * filled/done are shared under mu.
 */
#define _GNU_SOURCE
#include "s3_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct getter getter;

typedef struct part {
	getter *g;
	size_t obj;
	uint64_t off, len; /* object bytes [off, off + len) */
	char *buf;
	uint64_t filled;   /* received; shared under mu */
	uint64_t signalled; /* filled when the writer was last woken */
	int done;          /* all received; shared under mu */
	int last;          /* last part of its object's span */
	int sse;           /* the store encrypts: the ETag is no MD5 */
	/* the transfer (calling thread) */
	s3_call call;
	CURL *h;
	int running;
	int attempts;      /* failures since the last progress */
	double retry_at;   /* > 0: waiting to retry at this time */
	uint64_t req_from; /* object offset the current request starts at */
	int ranged, checked;
	char range[64];
	/* the writer's */
	uint64_t written;
} part;

typedef struct hslot {
	size_t obj;
	int busy, running, attempts;
	double retry_at;
	s3_call call;
	CURL *h;
} hslot;

struct getter {
	dp_s3 *s;
	dp_objs *objs;
	const dp_range *range;
	int fd;
	const char *outname;
	int W;
	uint64_t *lo, *hi; /* each object's span, once known */
	unsigned char *spanned;
	/* ring of live parts, in output order */
	part *ring;
	size_t head, count;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int eof;      /* every part is in the ring */
	int abort;    /* stop everything */
	uint64_t bytes;
	dp_err werr;  /* the writer's failure */
	int wfailed, closed;
	/* the writer's per-object state */
	EVP_MD_CTX *md5;
	int md5_on;
	/* curl */
	CURLM *multi;
	CURL **pool;
	size_t npool;
	hslot *heads;
	int nheads;
	size_t next_head; /* objects before this were considered for HEAD */
	uint64_t nreq, nretry;
};

/* ---- Helpers ------------------------------------------------------------------ */

static CURL *take_handle(getter *g)
{
	if (g->npool)
		return g->pool[--g->npool];
	return curl_easy_init();
}

static void give_handle(getter *g, CURL *h)
{
	if (h)
		g->pool[g->npool++] = h;
}

static const char *obj_name(getter *g, size_t i, char *buf, size_t n)
{
	dp_obj *o = &g->objs->v[i];
	if (o->kind == DP_LOC_FILE)
		snprintf(buf, n, "%s", o->key);
	else
		snprintf(buf, n, "s3://%s/%s", o->bucket, o->key);
	return buf;
}

static void set_abort(getter *g)
{
	pthread_mutex_lock(&g->mu);
	g->abort = 1;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
}

/* An ETag that is the MD5 of the bytes: 32 hex digits, quoted or not. */
static int etag_md5(const char *etag, unsigned char md[16])
{
	const char *p = etag;
	if (*p == '"')
		p++;
	for (int i = 0; i < 16; i++) {
		unsigned v = 0;
		for (int k = 0; k < 2; k++) {
			char c = p[2 * i + k];
			v <<= 4;
			if (c >= '0' && c <= '9')
				v |= (unsigned)(c - '0');
			else if (c >= 'a' && c <= 'f')
				v |= (unsigned)(c - 'a' + 10);
			else if (c >= 'A' && c <= 'F')
				v |= (unsigned)(c - 'A' + 10);
			else
				return 0;
		}
		md[i] = (unsigned char)v;
	}
	p += 32;
	return *p == 0 || (*p == '"' && p[1] == 0);
}

/* ETags compare without quotes and a weak W/ mark. */
static int same_etag(const char *a, const char *b)
{
	if (!*a || !*b)
		return 1;
	if (!strncmp(a, "W/", 2))
		a += 2;
	if (!strncmp(b, "W/", 2))
		b += 2;
	size_t la = strlen(a), lb = strlen(b);
	if (la >= 2 && a[0] == '"' && a[la - 1] == '"')
		a++, la -= 2;
	if (lb >= 2 && b[0] == '"' && b[lb - 1] == '"')
		b++, lb -= 2;
	return la == lb && !strncmp(a, b, la);
}

/* ---- The writer thread ---------------------------------------------------------------- */

static int writer_fail(getter *g, int rc, dp_err *e)
{
	pthread_mutex_lock(&g->mu);
	if (!g->wfailed) {
		g->werr = *e;
		g->werr.code = rc;
		g->wfailed = 1;
	}
	g->abort = 1;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
	curl_multi_wakeup(g->multi);
	return rc;
}

/* Check a finished object: bytes and, when the ETag is an MD5, the digest. */
static int finish_object(getter *g, part *p, dp_err *e)
{
	if (!g->md5_on)
		return DP_OK;
	g->md5_on = 0;
	unsigned char want[16], got[16];
	unsigned int n = 0;
	EVP_DigestFinal_ex(g->md5, got, &n);
	dp_obj *o = &g->objs->v[p->obj];
	if (p->sse || !etag_md5(o->etag, want))
		return DP_OK;
	if (memcmp(want, got, 16) != 0) {
		char name[1200];
		return dp_seterr(e, DP_EDATA, "%s: MD5 of the bytes read does not match the ETag %s",
				 obj_name(g, p->obj, name, sizeof name), o->etag);
	}
	return DP_OK;
}

static void *writer_main(void *arg)
{
	getter *g = arg;
	dp_err e = {0};
	for (;;) {
		pthread_mutex_lock(&g->mu);
		part *p = NULL;
		for (;;) {
			if (g->abort)
				break;
			if (g->count > 0) {
				p = &g->ring[g->head];
				if (p->filled > p->written || p->done)
					break;
				p = NULL;
			} else if (g->eof) {
				break;
			}
			pthread_cond_wait(&g->cv, &g->mu);
		}
		if (!p) {
			pthread_mutex_unlock(&g->mu);
			return NULL;
		}
		uint64_t avail = p->filled;
		int done = p->done;
		pthread_mutex_unlock(&g->mu);

		if (p->written == 0 && p->off == g->lo[p->obj]) {
			/* an object starts: digest it when the check can apply */
			dp_obj *o = &g->objs->v[p->obj];
			unsigned char md[16];
			g->md5_on = !g->s->conf.no_verify && o->kind == DP_LOC_S3 &&
				    g->lo[p->obj] == 0 && g->hi[p->obj] == o->size && etag_md5(o->etag, md);
			if (g->md5_on)
				EVP_DigestInit_ex(g->md5, EVP_md5(), NULL);
		}
		if (avail > p->written) {
			size_t n = (size_t)(avail - p->written);
			const char *src = p->buf + p->written;
			int rc = dp_write_all(g->fd, src, n, g->outname, &e);
			if (rc < 0) {
				if (errno == EPIPE)
					g->closed = 1;
				writer_fail(g, rc, &e);
				return NULL;
			}
			if (g->md5_on)
				EVP_DigestUpdate(g->md5, src, n);
			p->written = avail;
			pthread_mutex_lock(&g->mu);
			g->bytes += n;
			pthread_mutex_unlock(&g->mu);
		}
		if (done && p->written == p->len) {
			if (p->last) {
				int rc = finish_object(g, p, &e);
				if (rc < 0) {
					writer_fail(g, rc, &e);
					return NULL;
				}
			}
			/* the buffer stays with its ring slot for the next part */
			pthread_mutex_lock(&g->mu);
			g->head = (g->head + 1) % (size_t)g->W;
			g->count--;
			pthread_mutex_unlock(&g->mu);
			curl_multi_wakeup(g->multi);
		}
	}
}

/* ---- Parts ---------------------------------------------------------------------- */

/* Validate the answer's headers once, at its first byte. */
static int check_answer(getter *g, part *p, dp_err *e)
{
	s3_call *c = &p->call;
	dp_obj *o = &g->objs->v[p->obj];
	char name[1200];
	obj_name(g, p->obj, name, sizeof name);
	uint64_t end = p->off + p->len - 1;
	if (!same_etag(c->etag, o->etag))
		return dp_seterr(e, DP_EDATA, "%s: the object changed while being read (ETag %s, "
				 "then %s)", name, o->etag, c->etag);
	if (p->ranged) {
		unsigned long long a, b, t;
		if (c->status != 206)
			return dp_seterr(e, DP_EDATA, "%s: asked for bytes %s, the server answered %ld "
					 "without a range", name, p->range, c->status);
		if (sscanf(c->content_range, "bytes %llu-%llu/%llu", &a, &b, &t) != 3 ||
		    a != p->req_from || b != end || t != o->size)
			return dp_seterr(e, DP_EDATA, "%s: asked for bytes %" PRIu64 "-%" PRIu64
					 " of %" PRIu64 ", got Content-Range '%s'", name, p->req_from,
					 end, o->size, c->content_range);
	} else if (c->content_length >= 0 && (uint64_t)c->content_length != o->size) {
		return dp_seterr(e, DP_EDATA, "%s: %" PRId64 " bytes, the listing said %" PRIu64,
				 name, c->content_length, o->size);
	}
	if (c->sse[0] && strcmp(c->sse, "AES256") != 0)
		p->sse = 1;
	return DP_OK;
}

static size_t part_sink(void *ctx, const char *data, size_t n)
{
	part *p = ctx;
	getter *g = p->g;
	if (!p->checked) {
		dp_err e = {0};
		int rc = check_answer(g, p, &e);
		if (rc < 0) {
			snprintf(p->call.message, sizeof p->call.message, "%s", e.msg);
			p->call.sink_rc = rc;
			return 0;
		}
		p->checked = 1;
	}
	if (n > p->len - p->filled) {
		char name[1200];
		snprintf(p->call.message, sizeof p->call.message, "%s: more bytes than asked for",
			 obj_name(g, p->obj, name, sizeof name));
		p->call.sink_rc = DP_EDATA;
		return 0;
	}
	memcpy(p->buf + p->filled, data, n);
	pthread_mutex_lock(&g->mu);
	p->filled += n;
	/* wake the writer for whole chunks, not every packet */
	if (p->filled - p->signalled >= (256u << 10) || p->filled == p->len) {
		pthread_cond_signal(&g->cv);
		p->signalled = p->filled;
	}
	pthread_mutex_unlock(&g->mu);
	p->attempts = 0; /* progress: the retry budget starts over */
	return n;
}

static int start_part(getter *g, part *p, dp_err *e)
{
	dp_obj *o = &g->objs->v[p->obj];
	p->req_from = p->off + p->filled;
	p->ranged = !(p->req_from == 0 && p->len == o->size);
	p->checked = 0;
	p->retry_at = 0;
	memset(&p->call, 0, sizeof p->call);
	s3_call *c = &p->call;
	c->method = "GET";
	c->bucket = o->bucket;
	c->key = o->key;
	if (p->ranged) {
		snprintf(p->range, sizeof p->range, "bytes=%" PRIu64 "-%" PRIu64, p->req_from,
			 p->off + p->len - 1);
		c->h[c->nh++] = (dp_sigv4_kv){"Range", p->range};
	}
	if (o->etag[0])
		c->h[c->nh++] = (dp_sigv4_kv){"If-Match", o->etag};
	c->sink = part_sink;
	c->sink_ctx = p;
	if (!p->h && !(p->h = take_handle(g)))
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	int rc = s3_call_setup(g->s, c, p->h, e);
	if (rc < 0)
		return rc;
	if (curl_multi_add_handle(g->multi, p->h) != CURLM_OK)
		return dp_seterr(e, DP_ENOMEM, "cannot add a transfer");
	p->running = 1;
	g->nreq++;
	return DP_OK;
}

/* A local file's part: read it now. */
static int read_file_part(getter *g, part *p, dp_err *e)
{
	dp_obj *o = &g->objs->v[p->obj];
	int fd = open(o->key, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int saved = errno;
		dp_syserr(e, "%s", o->key);
		if (saved == ENOENT)
			e->code = DP_ENOTFOUND;
		return e->code;
	}
	uint64_t got = 0;
	while (got < p->len) {
		ssize_t n = pread(fd, p->buf + got, (size_t)(p->len - got), (off_t)(p->off + got));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int rc = dp_syserr(e, "%s: read", o->key);
			close(fd);
			return rc;
		}
		if (n == 0) {
			close(fd);
			return dp_seterr(e, DP_EDATA, "%s: the file shrank while being read "
					 "(%" PRIu64 " bytes expected)", o->key, o->size);
		}
		got += (uint64_t)n;
	}
	close(fd);
	pthread_mutex_lock(&g->mu);
	p->filled = p->len;
	p->done = 1;
	pthread_cond_signal(&g->cv);
	pthread_mutex_unlock(&g->mu);
	return DP_OK;
}

/* ---- Looking objects up -------------------------------------------------------------- */

static int start_head(getter *g, hslot *h, dp_err *e)
{
	dp_obj *o = &g->objs->v[h->obj];
	memset(&h->call, 0, sizeof h->call);
	h->call.method = "HEAD";
	h->call.bucket = o->bucket;
	h->call.key = o->key;
	h->retry_at = 0;
	if (!h->h && !(h->h = take_handle(g)))
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	int rc = s3_call_setup(g->s, &h->call, h->h, e);
	if (rc < 0)
		return rc;
	if (curl_multi_add_handle(g->multi, h->h) != CURLM_OK)
		return dp_seterr(e, DP_ENOMEM, "cannot add a transfer");
	h->running = 1;
	g->nreq++;
	return DP_OK;
}

static int stop_cb(void *ctx, const dp_obj *o)
{
	(void)o;
	*(int *)ctx = 1;
	return 1;
}

/* The error of a failed lookup, with S3's code and a hint for a prefix
 * given without its trailing '/'. */
static int head_error(getter *g, size_t i, dp_err *e)
{
	dp_obj *o = &g->objs->v[i], tmp;
	int rc = s3_head(g->s, o->bucket, o->key, &tmp, e);
	if (rc == DP_OK) /* there now: odd, but the first answer stands */
		return dp_seterr(e, DP_ETRANSFER, "s3://%s/%s: lookup failed", o->bucket, o->key);
	if (rc == DP_ENOTFOUND && e && !strstr(e->msg, "NoSuchBucket")) {
		char *pfx = NULL;
		if (asprintf(&pfx, "%s/", o->key) >= 0) {
			dp_loc l = {.kind = DP_LOC_S3, .bucket = o->bucket, .key = pfx};
			int found = 0;
			dp_err e2;
			dp_s3_list(g->s, &l, 1, 1, stop_cb, &found, &e2);
			size_t len = strlen(e->msg);
			if (found)
				snprintf(e->msg + len, sizeof e->msg - len,
					 " (s3://%s/%s is a prefix: add the trailing '/')", o->bucket, pfx);
			free(pfx);
		}
	}
	return rc;
}

/* ---- The main loop ----------------------------------------------------------------------- */

static int span_of(getter *g, size_t i, dp_err *e)
{
	dp_obj *o = &g->objs->v[i];
	uint64_t lo = 0, hi = o->size;
	if (g->range && g->range->set) {
		const dp_range *r = g->range;
		char name[1200];
		if (r->suffix) {
			lo = (uint64_t)r->first >= o->size ? 0 : o->size - (uint64_t)r->first;
		} else {
			lo = (uint64_t)r->first;
			if (r->last >= 0 && (uint64_t)r->last + 1 < hi)
				hi = (uint64_t)r->last + 1;
			if (lo >= o->size && !(lo == 0 && o->size == 0))
				return dp_seterr(e, DP_EARG, "%s: range starts at byte %" PRIu64
						 " of a %" PRIu64 "-byte object",
						 obj_name(g, i, name, sizeof name), lo, o->size);
		}
	}
	g->lo[i] = lo;
	g->hi[i] = hi;
	g->spanned[i] = 1;
	return DP_OK;
}

static part *find_part(getter *g, CURL *h)
{
	for (int k = 0; k < g->W; k++) {
		part *p = &g->ring[k];
		if (p->h == h && p->running)
			return p;
	}
	return NULL;
}

static int finish_part(getter *g, part *p, CURLcode cc, dp_err *e)
{
	s3_call *c = &p->call;
	curl_multi_remove_handle(g->multi, p->h);
	p->running = 0;
	int k = s3_call_finish(g->s, c, p->h, cc);
	char name[1200];
	obj_name(g, p->obj, name, sizeof name);
	if (c->sink_failed == 1 && c->sink_rc < 0) {
		/* our own check failed: the message is in c->message */
		int code = c->sink_rc;
		dp_seterr(e, code, "%s", c->message);
		s3_call_clean(c);
		return code;
	}
	if (k == S3_OK && p->filled < p->len) {
		k = S3_RETRY; /* a short body that curl did not notice */
		snprintf(c->curl_err, sizeof c->curl_err, "body ended after %" PRIu64 " of %" PRIu64
			 " bytes", p->filled, p->len);
	}
	if (g->s->conf.verbose)
		s3_log(g->s, "op=GET url=%s range=%s status=%ld bytes=%" PRIu64 " ms=%.0f", name,
		       p->ranged ? p->range + 6 : "all", c->status, p->filled - (p->req_from - p->off),
		       (dp_now() - c->t0) * 1000);
	if (k == S3_OK) {
		s3_call_clean(c);
		pthread_mutex_lock(&g->mu);
		p->done = 1;
		pthread_cond_signal(&g->cv);
		pthread_mutex_unlock(&g->mu);
		give_handle(g, p->h);
		p->h = NULL;
		return DP_OK;
	}
	if (k == S3_RETRY && p->attempts < g->s->conf.retries) {
		p->attempts++;
		double w = s3_backoff(g->s, p->attempts);
		p->retry_at = dp_now() + w;
		g->nretry++;
		s3_log(g->s, "retry=%d op=GET url=%s error=\"%s\" resume_at=%" PRIu64 " wait_ms=%.0f",
		       p->attempts, name,
		       c->curl_err[0] ? c->curl_err
		       : c->code[0]   ? c->code
		       : cc           ? curl_easy_strerror(cc)
				      : "HTTP error",
		       p->off + p->filled, w * 1000);
		s3_call_clean(c);
		return DP_OK;
	}
	int rc = s3_call_error(g->s, c, name, e);
	if (c->status == 412 && e) {
		rc = dp_seterr(e, DP_EDATA, "%s: the object changed while being read (If-Match %s "
			       "failed)", name, g->objs->v[p->obj].etag);
	} else if (k == S3_RETRY && e) {
		rc = e->code = DP_ETRANSFER;
		size_t l = strlen(e->msg);
		snprintf(e->msg + l, sizeof e->msg - l, " (gave up after %d attempts)",
			 p->attempts + 1);
	}
	s3_call_clean(c);
	return rc;
}

static int finish_head(getter *g, hslot *h, CURLcode cc, dp_err *e)
{
	curl_multi_remove_handle(g->multi, h->h);
	h->running = 0;
	int k = s3_call_finish(g->s, &h->call, h->h, cc);
	dp_obj *o = &g->objs->v[h->obj];
	char name[1200];
	obj_name(g, h->obj, name, sizeof name);
	if (g->s->conf.verbose)
		s3_log(g->s, "op=HEAD url=%s status=%ld ms=%.0f", name, h->call.status,
		       (dp_now() - h->call.t0) * 1000);
	if (k == S3_OK) {
		if (h->call.content_length < 0) {
			s3_call_clean(&h->call);
			return dp_seterr(e, DP_EDATA, "%s: HEAD answer without Content-Length", name);
		}
		o->size = (uint64_t)h->call.content_length;
		snprintf(o->etag, sizeof o->etag, "%s", h->call.etag);
		o->mtime = h->call.last_modified[0] ? s3_parse_time(h->call.last_modified) : -1;
		o->known = 1;
		s3_call_clean(&h->call);
		h->busy = 0;
		give_handle(g, h->h);
		h->h = NULL;
		return DP_OK;
	}
	if (k == S3_RETRY && h->attempts < g->s->conf.retries) {
		h->attempts++;
		double w = s3_backoff(g->s, h->attempts);
		h->retry_at = dp_now() + w;
		g->nretry++;
		s3_log(g->s, "retry=%d op=HEAD url=%s error=\"%s\" wait_ms=%.0f", h->attempts, name,
		       h->call.code[0] ? h->call.code : cc ? curl_easy_strerror(cc) : "HTTP error",
		       w * 1000);
		s3_call_clean(&h->call);
		return DP_OK;
	}
	int rc;
	if (k == S3_FAIL && cc == CURLE_OK && h->call.status >= 400 && h->call.status < 500) {
		rc = head_error(g, h->obj, e);
	} else {
		rc = s3_call_error(g->s, &h->call, name, e);
		if (k == S3_RETRY && e) {
			rc = e->code = DP_ETRANSFER;
			size_t l = strlen(e->msg);
			snprintf(e->msg + l, sizeof e->msg - l, " (gave up after %d attempts)",
				 h->attempts + 1);
		}
	}
	s3_call_clean(&h->call);
	return rc;
}

int dp_s3_get(dp_s3 *s, dp_objs *objs, const dp_range *r, int fd, const char *outname,
	      dp_s3_stats *st, dp_err *e)
{
	if (r && r->set && objs->n != 1)
		return dp_seterr(e, DP_EARG, "a range applies to one object (%zu given)", objs->n);
	for (size_t i = 0; i < objs->n; i++)
		if (objs->v[i].kind == DP_LOC_S3) {
			int rc = s3_ready(s, e);
			if (rc < 0)
				return rc;
			break;
		}
	getter G = {0}, *g = &G;
	g->s = s;
	g->objs = objs;
	g->range = r;
	g->fd = fd;
	g->outname = outname ? outname : "stdout";
	g->W = s->conf.concurrency;
	int rc = DP_OK;
	size_t n = objs->n;
	g->lo = calloc(n ? n : 1, sizeof *g->lo);
	g->hi = calloc(n ? n : 1, sizeof *g->hi);
	g->spanned = calloc(n ? n : 1, 1);
	g->ring = calloc((size_t)g->W, sizeof *g->ring);
	g->nheads = g->W;
	g->heads = calloc((size_t)g->nheads, sizeof *g->heads);
	g->pool = calloc((size_t)(g->W + g->nheads), sizeof *g->pool);
	g->md5 = EVP_MD_CTX_new();
	g->multi = curl_multi_init();
	if (!g->lo || !g->hi || !g->spanned || !g->ring || !g->heads || !g->pool || !g->md5 ||
	    !g->multi) {
		rc = dp_seterr(e, DP_ENOMEM, "out of memory");
		goto out;
	}
	pthread_mutex_init(&g->mu, NULL);
	pthread_cond_init(&g->cv, NULL);
	pthread_t wt;
	if (pthread_create(&wt, NULL, writer_main, g) != 0) {
		rc = dp_seterr(e, DP_ENOMEM, "cannot start the writer thread");
		goto out_sync;
	}

	size_t tail = 0;       /* the ring slot of the next part */
	size_t oi = 0;         /* the object being cut into parts */
	uint64_t next = 0;     /* its next offset */
	int started = 0;       /* next is valid for oi */
	double last_prog = dp_now();
	int running = 0;
	for (;;) {
		if (s->cancelled) {
			rc = dp_seterr(e, DP_EIO, "%s: interrupted", g->outname);
			break;
		}
		pthread_mutex_lock(&g->mu);
		int wfailed = g->wfailed;
		size_t count = g->count;
		pthread_mutex_unlock(&g->mu);
		if (wfailed)
			break;

		/* 1. new parts, in output order, while the window has room */
		while (rc == DP_OK && count < (size_t)g->W && oi < n) {
			dp_obj *o = &objs->v[oi];
			if (!o->known) {
				if (o->kind == DP_LOC_FILE) {
					dp_obj fo;
					if ((rc = s3_file_stat(o->key, &fo, e)) < 0)
						break;
					o->size = fo.size;
					o->mtime = fo.mtime;
					o->known = 1;
				} else {
					break; /* wait for its HEAD */
				}
			}
			if (!g->spanned[oi] && (rc = span_of(g, oi, e)) < 0)
				break;
			if (!started) {
				next = g->lo[oi];
				started = 1;
			}
			if (next >= g->hi[oi]) {
				oi++;
				started = 0;
				continue;
			}
			uint64_t len = g->hi[oi] - next;
			if (len > s->conf.part_size)
				len = s->conf.part_size;
			part *p = &g->ring[tail];
			tail = (tail + 1) % (size_t)g->W;
			/* keep the slot's buffer: touched once, its pages stay mapped */
			char *buf = p->buf;
			memset(p, 0, sizeof *p);
			p->buf = buf;
			p->g = g;
			p->obj = oi;
			p->off = next;
			p->len = len;
			p->last = next + len == g->hi[oi];
			if (!p->buf)
				p->buf = malloc((size_t)s->conf.part_size);
			if (!p->buf) {
				rc = dp_seterr(e, DP_ENOMEM, "out of memory (%" PRIu64 " bytes)", len);
				break;
			}
			pthread_mutex_lock(&g->mu);
			g->count++;
			count = g->count;
			pthread_cond_signal(&g->cv);
			pthread_mutex_unlock(&g->mu);
			next += len;
			if (o->kind == DP_LOC_FILE)
				rc = read_file_part(g, p, e);
			else
				rc = start_part(g, p, e);
		}
		if (rc < 0)
			break;
		if (oi == n) {
			pthread_mutex_lock(&g->mu);
			if (!g->eof) {
				g->eof = 1;
				pthread_cond_broadcast(&g->cv);
			}
			pthread_mutex_unlock(&g->mu);
		}

		/* 2. look objects up a little ahead of the stream */
		size_t ahead = oi + (size_t)g->W * 2;
		if (g->next_head < oi)
			g->next_head = oi;
		for (size_t i = g->next_head; i < n && i < ahead; i++) {
			dp_obj *o = &objs->v[i];
			if (o->known || o->kind != DP_LOC_S3)
				continue;
			int busy = 0, free_slot = -1;
			for (int k = 0; k < g->nheads; k++) {
				if (g->heads[k].busy && g->heads[k].obj == i)
					busy = 1;
				if (!g->heads[k].busy && free_slot < 0)
					free_slot = k;
			}
			if (busy)
				continue;
			if (free_slot < 0)
				break;
			hslot *h = &g->heads[free_slot];
			CURL *hh = h->h;
			memset(h, 0, sizeof *h);
			h->h = hh;
			h->busy = 1;
			h->obj = i;
			if ((rc = start_head(g, h, e)) < 0)
				break;
		}
		if (rc < 0)
			break;

		/* 3. done? */
		pthread_mutex_lock(&g->mu);
		int finished = g->eof && g->count == 0;
		pthread_mutex_unlock(&g->mu);
		if (finished)
			break;

		/* 4. move the transfers on, collect the finished ones */
		curl_multi_perform(g->multi, &running);
		CURLMsg *m;
		int left, moved = 0;
		while (rc == DP_OK && (m = curl_multi_info_read(g->multi, &left))) {
			if (m->msg != CURLMSG_DONE)
				continue;
			moved = 1;
			CURL *h = m->easy_handle;
			CURLcode cc = m->data.result;
			part *p = find_part(g, h);
			if (p) {
				rc = finish_part(g, p, cc, e);
				continue;
			}
			for (int k = 0; k < g->nheads; k++)
				if (g->heads[k].busy && g->heads[k].running && g->heads[k].h == h) {
					rc = finish_head(g, &g->heads[k], cc, e);
					break;
				}
		}
		if (rc < 0)
			break;

		/* 5. retries that are due */
		double now = dp_now(), wake = now + 0.2;
		for (int k = 0; k < g->W && rc == DP_OK; k++) {
			part *p = &g->ring[k];
			if (p->retry_at > 0 && !p->running) {
				if (p->retry_at <= now)
					rc = start_part(g, p, e);
				else if (p->retry_at < wake)
					wake = p->retry_at;
			}
		}
		for (int k = 0; k < g->nheads && rc == DP_OK; k++) {
			hslot *h = &g->heads[k];
			if (h->busy && !h->running && h->retry_at > 0) {
				if (h->retry_at <= now)
					rc = start_head(g, h, e);
				else if (h->retry_at < wake)
					wake = h->retry_at;
			}
		}
		if (rc < 0)
			break;

		/* 6. progress, then wait for the network, a retry or the writer */
		if (s->conf.progress && now - last_prog >= 0.25) {
			pthread_mutex_lock(&g->mu);
			uint64_t b = g->bytes;
			pthread_mutex_unlock(&g->mu);
			s->conf.progress(s->conf.progress_ctx, b);
			last_prog = now;
		}
		int ms = moved ? 0 : (int)((wake - now) * 1000) + 1;
		curl_multi_poll(g->multi, NULL, 0, ms < 0 ? 0 : ms, NULL);
	}

	if (rc < 0 || g->wfailed)
		set_abort(g);
	pthread_join(wt, NULL);
	if (rc == DP_OK && g->wfailed) {
		rc = g->werr.code;
		if (e)
			*e = g->werr;
	}
out_sync:
	/* stop what still runs, free the parts the writer did not */
	for (int k = 0; k < g->W; k++) {
		part *p = &g->ring[k];
		if (p->running)
			curl_multi_remove_handle(g->multi, p->h);
		if (p->h)
			curl_easy_cleanup(p->h);
		s3_call_clean(&p->call);
		free(p->buf);
	}
	for (int k = 0; k < g->nheads; k++) {
		hslot *h = &g->heads[k];
		if (h->running)
			curl_multi_remove_handle(g->multi, h->h);
		if (h->h)
			curl_easy_cleanup(h->h);
		s3_call_clean(&h->call);
	}
	pthread_mutex_destroy(&g->mu);
	pthread_cond_destroy(&g->cv);
out:
	if (st) {
		st->bytes += g->bytes;
		st->requests += g->nreq;
		st->retries += g->nretry;
		st->out_closed = g->closed;
	}
	s->nreq += g->nreq;
	s->nretry += g->nretry;
	for (size_t k = 0; k < g->npool; k++)
		curl_easy_cleanup(g->pool[k]);
	if (g->multi)
		curl_multi_cleanup(g->multi);
	EVP_MD_CTX_free(g->md5);
	free(g->pool);
	free(g->heads);
	free(g->ring);
	free(g->lo);
	free(g->hi);
	free(g->spanned);
	return rc;
}
