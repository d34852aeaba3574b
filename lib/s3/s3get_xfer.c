/*
 * s3get_xfer.c - the streaming reader's transfers, on the calling thread:
 * a GET fills a run of consecutive parts, pausing when the next part is not
 * in the window; a broken transfer resumes at its first missing byte; the
 * first long run decides between the stream and parts modes (s3get.c says
 * how).  Also HEAD for objects listed without a size.
 */
#define _GNU_SOURCE
#include "s3get.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* ---- Transfers ---------------------------------------------------------------------- */

static uint64_t rcv(const xfer *x) { return x->pos + x->stash.len; }

/* Validate the answer's headers once, at its first byte. */
static int check_answer(getter *g, xfer *x, dp_err *e)
{
	s3_call *c = &x->call;
	dp_obj *o = &g->objs->v[x->obj];
	char name[1200];
	s3_get_obj_name(g, x->obj, name, sizeof name);
	if (!same_etag(c->etag, o->etag))
		return dp_seterr(e, DP_EDATA, "%s: the object changed while being read (ETag %s, "
				 "then %s)", name, o->etag, c->etag);
	if (x->ranged) {
		unsigned long long a, b, t;
		if (c->status != 206)
			return dp_seterr(e, DP_EDATA, "%s: asked for bytes %s, the server answered %ld "
					 "without a range", name, x->range + 6, c->status);
		if (sscanf(c->content_range, "bytes %llu-%llu/%llu", &a, &b, &t) != 3 ||
		    a != x->req_from || b != x->end - 1 || t != o->size)
			return dp_seterr(e, DP_EDATA, "%s: asked for bytes %" PRIu64 "-%" PRIu64
					 " of %" PRIu64 ", got Content-Range '%s'", name, x->req_from,
					 x->end - 1, o->size, c->content_range);
	} else if (c->content_length >= 0 && (uint64_t)c->content_length != o->size) {
		return dp_seterr(e, DP_EDATA, "%s: %" PRId64 " bytes, the listing said %" PRIu64,
				 name, c->content_length, o->size);
	}
	if (c->sse[0] && strcmp(c->sse, "AES256") != 0)
		x->sse = 1;
	return DP_OK;
}

/* Copy bytes into x's parts while they are in the window; returns how many
 * were taken. */
static size_t place(getter *g, xfer *x, const char *data, size_t n)
{
	size_t took = 0;
	while (took < n && x->cur) {
		part *p = x->cur;
		uint64_t f = atomic_load_explicit(&p->filled, memory_order_relaxed);
		size_t k = (size_t)(p->len - f);
		if (k > n - took)
			k = n - took;
		memcpy(p->buf + f, data + took, k);
		p->sse |= x->sse;
		f += k;
		atomic_store(&p->filled, f); /* seq_cst: see notify */
		s3_get_notify(g, p, f);
		took += k;
		x->pos += k;
		if (f == p->len) {
			/* on to the next part of the run, if the window has it */
			x->next_seq++;
			x->cur = x->pos < x->end && x->next_seq < g->alloc_seq ? slot(g, x->next_seq)
									       : NULL;
		}
	}
	return took;
}

/* Seconds x has been receiving (not paused) in its current request. */
static double active_time(const xfer *x)
{
	return x->active + (x->seg_t0 > 0 ? dp_now() - x->seg_t0 : 0);
}

static void seg_end(xfer *x)
{
	if (x->seg_t0 > 0) {
		x->active += dp_now() - x->seg_t0;
		x->seg_t0 = 0;
	}
}

static size_t run_sink(void *ctx, const char *data, size_t n)
{
	xfer *x = ctx;
	getter *g = x->g;
	if (!x->checked) {
		dp_err e = {0};
		int rc = check_answer(g, x, &e);
		if (rc < 0) {
			snprintf(x->call.message, sizeof x->call.message, "%s", e.msg);
			x->call.sink_rc = rc;
			return 0;
		}
		x->checked = 1;
	}
	if (n > x->end - rcv(x)) {
		if (!x->cut) {
			char name[1200];
			snprintf(x->call.message, sizeof x->call.message,
				 "%s: more bytes than asked for", s3_get_obj_name(g, x->obj, name, sizeof name));
			x->call.sink_rc = DP_EDATA;
			return 0;
		}
		if (rcv(x) == x->end)
			return 0; /* the cut: stop here (finish_xfer knows) */
		/* take what is ours; answering less than curl gave stops the
		 * transfer after it (finish_xfer knows) */
		n = (size_t)(x->end - rcv(x));
	}
	if (!x->cur || x->stash.len) {
		/* the window is full: curl keeps the data until a slot frees */
		seg_end(x);
		x->paused = 1;
		x->call.paused = 1; /* not a stall (s3.c's watchdog) */
		return CURL_WRITEFUNC_PAUSE;
	}
	if (x->seg_t0 == 0)
		x->seg_t0 = dp_now();
	size_t took = place(g, x, data, n);
	x->got += n;
	x->attempts = 0; /* progress: the retry budget starts over */
	if (took < n) {
		/* the window ends inside this chunk: keep the rest; the next
		 * chunk pauses the transfer */
		size_t rest = n - took;
		dp_buf_reset(&x->stash);
		if (dp_buf_add(&x->stash, data + took, rest) < 0) {
			snprintf(x->call.message, sizeof x->call.message, "out of memory");
			x->call.sink_rc = DP_ENOMEM;
			return 0;
		}
		seg_end(x);
	}
	return n;
}

/* Send x's request for bytes rcv(x) to end. */
int s3_get_start_xfer(getter *g, xfer *x, dp_err *e)
{
	dp_obj *o = &g->objs->v[x->obj];
	x->req_from = rcv(x);
	x->ranged = !(x->req_from == 0 && x->end == o->size);
	x->checked = 0;
	x->retry_at = 0;
	x->seg_t0 = 0;
	x->paused = 0;
	memset(&x->call, 0, sizeof x->call);
	s3_call *c = &x->call;
	c->method = "GET";
	c->bucket = o->bucket;
	c->key = o->key;
	if (x->ranged) {
		snprintf(x->range, sizeof x->range, "bytes=%" PRIu64 "-%" PRIu64, x->req_from,
			 x->end - 1);
		c->h[c->nh++] = (s3_sigv4_kv){"Range", x->range};
	}
	if (o->etag[0])
		c->h[c->nh++] = (s3_sigv4_kv){"If-Match", o->etag};
	c->sink = run_sink;
	c->sink_ctx = x;
	if (!x->h)
		x->h = take_handle(g);
	int rc = s3_call_add(g->s, c, x->h, g->multi, e);
	if (rc < 0)
		return rc;
	x->running = 1;
	g->nreq++;
	return DP_OK;
}

static void free_xfer(getter *g, xfer *x)
{
	if (x->running)
		curl_multi_remove_handle(g->multi, x->h);
	s3_call_clean(&x->call);
	give_handle(g, x->h);
	dp_buf stash = x->stash;
	memset(x, 0, sizeof *x);
	x->stash = stash; /* kept for the next transfer in this slot */
	dp_buf_reset(&x->stash);
	if (g->run_x == x)
		g->run_x = NULL;
	if (g->probe == x)
		g->probe = NULL;
}

/* x received everything it asked for: free it once its stash is placed. */
static void maybe_free(getter *g, xfer *x)
{
	if (!x->running && x->retry_at == 0 && rcv(x) == x->end && x->stash.len == 0)
		free_xfer(g, x);
}


/* Part p entered the window and x waits for it: give it the stash, then
 * let curl go on. */
int s3_get_resume(getter *g, xfer *x, dp_err *e)
{
	x->cur = slot(g, x->next_seq);
	if (x->stash.len) {
		dp_buf *b = &x->stash;
		size_t t = place(g, x, b->p, b->len);
		memmove(b->p, b->p + t, b->len - t);
		b->len -= t;
		b->p[b->len] = 0;
		if (b->len)
			return DP_OK; /* still more than the window holds */
	}
	if (x->paused && x->running) {
		x->paused = 0;
		x->call.paused = 0;
		x->call.prog_t = dp_now(); /* the watchdog's clock starts again */
		/* curl hands over the data it kept, through run_sink, now */
		CURLcode cc = curl_easy_pause(x->h, CURLPAUSE_CONT);
		if (cc != CURLE_OK) /* the sink refused what curl kept: end it here */
			return s3_get_finish_xfer(g, x, cc, e);
	}
	maybe_free(g, x);
	return DP_OK;
}

/* Start the run beginning at part p. */
int s3_get_start_run(getter *g, part *p, dp_err *e)
{
	xfer *x = NULL;
	for (int i = 0; i < g->nxf && !x; i++)
		if (!g->xf[i].busy)
			x = &g->xf[i];
	if (!x)
		return dp_seterr(e, DP_EIO, "internal error: no free transfer");

	uint64_t len = g->mode == MODE_PARTS ? g->ps : g->ps * (uint64_t)g->W;
	uint64_t end = p->off + len < g->hi[p->obj] ? p->off + len : g->hi[p->obj];
	x->g = g;
	x->busy = 1;
	x->obj = p->obj;
	x->run_from = x->pos = p->off + atomic_load_explicit(&p->filled, memory_order_relaxed);
	x->end = end;
	x->next_seq = p->seq;
	x->cur = p;
	for (uint64_t s = p->seq; s < g->alloc_seq; s++) {
		part *q = slot(g, s);
		if (q->obj != p->obj || q->off >= end)
			break;
		q->x = x;
	}
	g->run_x = x;
	g->run_obj = p->obj;
	g->run_end = end;
	if (g->mode == MODE_PROBE && end - p->off > g->ps)
		g->probe = x;
	return s3_get_start_xfer(g, x, e);
}

/* Cut x's run at the end of the part it is receiving; later parts of the
 * run get runs of their own. */
static void cut_xfer(getter *g, xfer *x)
{
	uint64_t lo = g->lo[x->obj], r = rcv(x);
	uint64_t e = lo + (r - lo + g->ps - 1) / g->ps * g->ps;
	if (e >= x->end)
		return;
	x->end = e;
	x->cut = 1;
	for (uint64_t s = g->rel_seq_seen; s < g->alloc_seq; s++) {
		part *q = slot(g, s);
		if (q->x == x && q->off >= e) {
			q->x = NULL;
			if (s < g->scan_seq)
				g->scan_seq = s;
		}
	}
	if (g->run_x == x)
		g->run_end = e;
	if (x->running && r == e) {
		/* nothing more wanted: close the connection now */
		curl_multi_remove_handle(g->multi, x->h);
		x->running = 0;
		seg_end(x);
		s3_call_clean(&x->call);
		maybe_free(g, x);
	}
}

/* The probe run has shown its rate, or failed: choose the mode. */
void s3_get_decide(getter *g, int failed)
{
	xfer *x = g->probe;
	double t = active_time(x);
	double rate = t > 0 ? (double)x->got / t : 0;
	g->mode = !failed && rate >= STREAM_RATE ? MODE_STREAM : MODE_PARTS;
	g->probe = NULL;
	if (g->s->conf.verbose) {
		char name[1200];
		s3_log(g->s, "op=GET url=%s mode=%s connection_mbps=%.0f%s",
		       s3_get_obj_name(g, x->obj, name, sizeof name),
		       g->mode == MODE_STREAM ? "stream" : "parts", rate / 1e6,
		       failed ? " (the first request failed)" : "");
	}
	if (g->mode == MODE_PARTS)
		cut_xfer(g, x);
}

int s3_get_finish_xfer(getter *g, xfer *x, CURLcode cc, dp_err *e)
{
	s3_call *c = &x->call;
	curl_multi_remove_handle(g->multi, x->h);
	x->running = 0;
	seg_end(x);
	char name[1200];
	s3_get_obj_name(g, x->obj, name, sizeof name);
	if (x->cut && rcv(x) == x->end) {
		/* stopped at the cut on purpose (or it ended there) */
		if (g->s->conf.verbose)
			s3_log(g->s, "op=GET url=%s range=%s status=%ld bytes=%" PRIu64 " ms=%.0f cut=%" PRIu64,
			       name, x->ranged ? x->range + 6 : "all", c->status, rcv(x) - x->req_from,
			       (dp_now() - c->t0) * 1000, x->end);
		s3_call_clean(c);
		maybe_free(g, x);
		return DP_OK;
	}
	int k = s3_call_finish(g->s, c, x->h, cc);
	if (c->sink_failed == 1 && c->sink_rc < 0) {
		/* our own check failed: the message is in c->message */
		int code = c->sink_rc;
		dp_seterr(e, code, "%s", c->message);
		s3_call_clean(c);
		return code;
	}
	if (k == S3_OK && rcv(x) < x->end) {
		k = S3_RETRY; /* a short body that curl did not notice */
		snprintf(c->curl_err, sizeof c->curl_err, "body ended after %" PRIu64 " of %" PRIu64
			 " bytes", rcv(x) - x->req_from, x->end - x->req_from);
	}
	if (g->s->conf.verbose)
		s3_log(g->s, "op=GET url=%s range=%s status=%ld bytes=%" PRIu64 " ms=%.0f", name,
		       x->ranged ? x->range + 6 : "all", c->status, rcv(x) - x->req_from,
		       (dp_now() - c->t0) * 1000);
	if (g->probe == x)
		s3_get_decide(g, k != S3_OK); /* a failure says little: the safe choice */
	if (k == S3_OK || rcv(x) == x->end) {
		/* done, or the probe's cut left nothing more to fetch */
		s3_call_clean(c);
		maybe_free(g, x);
		return DP_OK;
	}
	double w = s3_retry_at(g->s, k, &x->attempts, &x->retry_at);
	if (w >= 0) {
		if (k == S3_RETRY) {
			g->nretry++;
			s3_log(g->s,
			       "retry=%d op=GET url=%s error=\"%s\" resume_at=%" PRIu64 " wait_ms=%.0f",
			       x->attempts, name,
			       c->curl_err[0] ? c->curl_err
			       : c->code[0]   ? c->code
			       : cc           ? curl_easy_strerror(cc)
					      : "HTTP error",
			       rcv(x), w * 1000);
		}
		s3_call_clean(c);
		return DP_OK;
	}
	int rc = s3_call_error(g->s, c, name, e);
	if (c->status == 412 && e) {
		rc = dp_seterr(e, DP_EDATA, "%s: the object changed while being read (If-Match %s "
			       "failed)", name, g->objs->v[x->obj].etag);
	} else if (k == S3_RETRY) {
		rc = s3_gave_up(e, x->attempts + 1);
	}
	s3_call_clean(c);
	return rc;
}

/* A local file's part: read it now. */
int s3_get_read_file(getter *g, part *p, dp_err *e)
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
	atomic_store(&p->filled, p->len);
	s3_get_notify(g, p, p->len);
	return DP_OK;
}

/* ---- Looking objects up -------------------------------------------------------------- */

int s3_get_start_head(getter *g, hslot *h, dp_err *e)
{
	dp_obj *o = &g->objs->v[h->obj];
	memset(&h->call, 0, sizeof h->call);
	h->call.method = "HEAD";
	h->call.bucket = o->bucket;
	h->call.key = o->key;
	h->retry_at = 0;
	if (!h->h)
		h->h = take_handle(g);
	int rc = s3_call_add(g->s, &h->call, h->h, g->multi, e);
	if (rc < 0)
		return rc;
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

int s3_get_finish_head(getter *g, hslot *h, CURLcode cc, dp_err *e)
{
	curl_multi_remove_handle(g->multi, h->h);
	h->running = 0;
	int k = s3_call_finish(g->s, &h->call, h->h, cc);
	dp_obj *o = &g->objs->v[h->obj];
	char name[1200];
	s3_get_obj_name(g, h->obj, name, sizeof name);
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
	double w = s3_retry_at(g->s, k, &h->attempts, &h->retry_at);
	if (w >= 0) {
		if (k == S3_RETRY) {
			g->nretry++;
			s3_log(g->s, "retry=%d op=HEAD url=%s error=\"%s\" wait_ms=%.0f", h->attempts,
			       name,
			       h->call.code[0] ? h->call.code : cc ? curl_easy_strerror(cc) : "HTTP error",
			       w * 1000);
		}
		s3_call_clean(&h->call);
		return DP_OK;
	}
	int rc;
	if (k == S3_FAIL && cc == CURLE_OK && h->call.status >= 400 && h->call.status < 500) {
		rc = head_error(g, h->obj, e);
	} else {
		rc = s3_call_error(g->s, &h->call, name, e);
		if (k == S3_RETRY)
			rc = s3_gave_up(e, h->attempts + 1);
	}
	s3_call_clean(&h->call);
	return rc;
}

