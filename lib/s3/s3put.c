/*
 * s3put.c - the streaming writer: a descriptor of unknown length into one
 * S3 object (or a local file, written whole or not at all).
 *
 * A reader thread (every signal blocked in it) fills part-sized buffers
 * from the descriptor and hashes each (SHA-256: the payload signature,
 * which the server checks); the calling thread uploads them through a
 * curl multi handle, up to conf.concurrency at a time.  With W uploads in
 * flight and one buffer filling, memory stays below (W + 2) x part size.
 * Input that fits in one part goes up as a single PUT; longer input as a
 * multipart upload, which is aborted when anything fails (or the caller
 * cancels), so no parts are left behind.  A CompleteMultipartUpload whose
 * answer was lost and whose retry finds NoSuchUpload is settled by
 * comparing the object's ETag with the one the parts make.
 *
 * Part sizes: conf.part_size (at least 5 MiB, S3's minimum); for input of
 * unknown length they double every 1000 parts so that the 10,000-part limit
 * is never reached (8 MiB parts: 8 GB, then 16 MiB parts, ...); for a known
 * length, large enough for 10,000 parts.
 */
#define _GNU_SOURCE
#include "md5.h"
#include "s3_int.h"

#include <errno.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { B_FREE, B_FILLING, B_READY, B_SENDING };

/* A part: a buffer of its size, allocated once (not grown). */
typedef struct ubuf {
	char *p;
	size_t len, cap;
	int state;
	int partno;   /* 1-based */
	int eof;      /* the input ended in (or right after) this buffer */
	char sha[65];
	/* the upload (calling thread) */
	s3_call call;
	CURL *h;
	int running, attempts;
	double retry_at;
	char qpart[16];
} ubuf;

typedef struct putter {
	dp_s3 *s;
	const char *bucket, *key;
	char *what; /* "s3://bucket/key" */
	int fd;
	const char *srcname;
	uint64_t base, fixed; /* part sizes */
	ubuf *b;
	int nb;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int next_part;  /* the reader's next part number */
	int read_done;  /* the reader saw the end (or failed) */
	int abort;
	dp_err rerr;
	int rfailed;
	uint64_t bytes_read;
	pthread_t reader;
	int synced, reading; /* mu and cv made; the reader started */
	CURLM *multi;
	/* the multipart upload (calling thread) */
	char *upload_id;
	dp_buf etags;   /* part i's ETag at (i - 1) x 80 bytes, "" until it is up */
	int next_send;  /* the next part to start */
	int inflight;   /* parts uploading or waiting to be retried */
	int last_part;  /* how many parts there are, once the end is read (else 0) */
	uint64_t sent;  /* bytes of the parts that are up */
} putter;

static uint64_t part_size(const putter *u, int partno)
{
	if (u->fixed)
		return u->fixed;
	uint64_t sz = u->base;
	for (int k = (partno - 1) / 1000; k > 0 && sz < (5ull << 30); k--)
		sz *= 2;
	return sz > (5ull << 30) ? 5ull << 30 : sz;
}

/* ---- The reader thread ---------------------------------------------------------- */

/* Wait until fd is readable or the upload is abandoned (-1). */
static int wait_readable(putter *u)
{
	for (;;) {
		pthread_mutex_lock(&u->mu);
		int ab = u->abort;
		pthread_mutex_unlock(&u->mu);
		if (ab)
			return -1;
		struct pollfd pf = {u->fd, POLLIN, 0};
		int r = poll(&pf, 1, 200);
		if (r > 0 || (r < 0 && errno != EINTR))
			return 0;
	}
}

static void *reader_main(void *arg)
{
	putter *u = arg;
	EVP_MD_CTX *sha = EVP_MD_CTX_new();
	dp_err e = {0};
	for (;;) {
		pthread_mutex_lock(&u->mu);
		ubuf *b = NULL;
		while (!u->abort) {
			for (int i = 0; i < u->nb; i++)
				if (u->b[i].state == B_FREE) {
					b = &u->b[i];
					break;
				}
			if (b)
				break;
			pthread_cond_wait(&u->cv, &u->mu);
		}
		if (u->abort || !sha) {
			if (!sha && !u->rfailed) {
				dp_seterr(&u->rerr, DP_ENOMEM, "out of memory");
				u->rfailed = 1;
			}
			u->read_done = 1;
			pthread_cond_broadcast(&u->cv);
			pthread_mutex_unlock(&u->mu);
			curl_multi_wakeup(u->multi);
			break;
		}
		b->state = B_FILLING;
		b->partno = u->next_part++;
		pthread_mutex_unlock(&u->mu);

		uint64_t want = part_size(u, b->partno);
		int rc = DP_OK;
		if (b->cap < want) {
			free(b->p);
			b->p = malloc((size_t)want);
			b->cap = b->p ? (size_t)want : 0;
			if (!b->p)
				rc = dp_seterr(&e, DP_ENOMEM, "out of memory (%" PRIu64 " bytes)", want);
		}
		b->len = 0;
		b->eof = 0;
		EVP_DigestInit_ex(sha, EVP_sha256(), NULL);
		while (rc == DP_OK && b->len < want) {
			if (wait_readable(u) < 0) {
				rc = DP_EIO;
				dp_seterr(&e, DP_EIO, "%s: interrupted", u->srcname);
				break;
			}
			ssize_t n = read(u->fd, b->p + b->len, (size_t)(want - b->len));
			if (n < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			if (n < 0) {
				rc = dp_syserr(&e, "%s: read", u->srcname);
				break;
			}
			if (n == 0) {
				b->eof = 1;
				break;
			}
			EVP_DigestUpdate(sha, b->p + b->len, (size_t)n);
			b->len += (size_t)n;
		}
		unsigned char md[32];
		unsigned int mdl = 0;
		EVP_DigestFinal_ex(sha, md, &mdl);
		for (int i = 0; i < 32; i++)
			snprintf(b->sha + 2 * i, 3, "%02x", md[i]);
		pthread_mutex_lock(&u->mu);
		if (rc < 0) {
			if (!u->rfailed) {
				u->rerr = e;
				u->rfailed = 1;
			}
			b->state = B_FREE;
			u->read_done = 1;
		} else {
			b->state = B_READY;
			u->bytes_read += b->len;
			if (b->eof)
				u->read_done = 1;
		}
		int done = u->read_done;
		pthread_cond_broadcast(&u->cv);
		pthread_mutex_unlock(&u->mu);
		curl_multi_wakeup(u->multi);
		if (done)
			break;
	}
	EVP_MD_CTX_free(sha);
	return NULL;
}

/* ---- Helpers ------------------------------------------------------------------------ */

static ubuf *ready_part(putter *u, int partno)
{
	for (int i = 0; i < u->nb; i++)
		if (u->b[i].state == B_READY && u->b[i].partno == partno)
			return &u->b[i];
	return NULL;
}

static void release(putter *u, ubuf *b)
{
	pthread_mutex_lock(&u->mu);
	b->state = B_FREE;
	pthread_cond_broadcast(&u->cv);
	pthread_mutex_unlock(&u->mu);
}

typedef struct mpx {
	dp_buf id, etag;
	int is_error;
	char code[64], msg[512];
} mpx;

#define MPX_INIT {.id = DP_BUF_INIT, .etag = DP_BUF_INIT}

static void mp_cb(void *ctx, const char *path, const char *text, size_t len)
{
	mpx *x = ctx;
	(void)len;
	if (!text) {
		if (!strcmp(path, "Error"))
			x->is_error = 1;
		return;
	}
	if (!strcmp(path, "InitiateMultipartUploadResult/UploadId"))
		dp_buf_addstr(&x->id, text);
	else if (!strcmp(path, "CompleteMultipartUploadResult/ETag"))
		dp_buf_addstr(&x->etag, text);
	else if (!strcmp(path, "Error/Code"))
		snprintf(x->code, sizeof x->code, "%s", text);
	else if (!strcmp(path, "Error/Message"))
		snprintf(x->msg, sizeof x->msg, "%s", text);
}

/* Parse a multipart answer into x. */
static int mp_parse(const s3_call *c, mpx *x, dp_err *e)
{
	int rc = s3x_parse(c->resp.p ? c->resp.p : "", c->resp.len, mp_cb, x, e);
	if (rc == DP_OK && (x->id.err || x->etag.err))
		rc = dp_seterr(e, DP_ENOMEM, "out of memory");
	return rc;
}

static void mp_free(mpx *x)
{
	dp_buf_free(&x->id);
	dp_buf_free(&x->etag);
}

static int same_tag(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	if (la && a[0] == '"')
		a++, la -= 2;
	if (lb && b[0] == '"')
		b++, lb -= 2;
	return la == lb && strncasecmp(a, b, la) == 0;
}

/* ---- Single PUT and the multipart calls ------------------------------------------ */

static int put_single(putter *u, ubuf *b, dp_err *e)
{
	s3_call c = {.method = "PUT", .bucket = u->bucket, .key = u->key, .body = b->p ? b->p : "",
		     .body_len = b->len, .body_sha = b->sha};
	int rc = s3_perform(u->s, &c, u->what, e);
	s3_call_clean(&c);
	return rc;
}

static int mp_create(putter *u, char **upload_id, dp_err *e)
{
	s3_call c = {.method = "POST", .bucket = u->bucket, .key = u->key};
	c.q[c.nq++] = (s3_sigv4_kv){"uploads", ""};
	int rc = s3_perform(u->s, &c, u->what, e);
	mpx x = MPX_INIT;
	if (rc == DP_OK)
		rc = mp_parse(&c, &x, e);
	if (rc == DP_OK && !x.id.len)
		rc = dp_seterr(e, DP_EDATA, "%s: CreateMultipartUpload answered no UploadId", u->what);
	if (rc == DP_OK && !(*upload_id = dp_buf_take(&x.id)))
		rc = dp_seterr(e, DP_ENOMEM, "out of memory");
	mp_free(&x);
	s3_call_clean(&c);
	return rc;
}

static int mp_abort(putter *u, const char *upload_id, dp_err *e)
{
	/* even when cancelled: that is when it matters most; but then within
	 * S3_ABORT_SECONDS, so that the grace period of whoever sent the
	 * signal (docker stop's 10 s, Kubernetes' 30 s) still sees the message
	 * naming an upload that could not be aborted */
	int was = s3_cancelled(u->s);
	double deadline = u->s->deadline;
	u->s->cleanup = 1;
	if (was)
		u->s->deadline = dp_now() + S3_ABORT_SECONDS;
	int rc = dp_s3_abort_upload(u->s, u->bucket, u->key, upload_id, e);
	if (rc == DP_ENOTFOUND)
		rc = DP_OK; /* already gone */
	u->s->deadline = deadline;
	u->s->cleanup = 0;
	return rc;
}

/* Complete the upload of parts 1 to n (u->etags). */
static int mp_complete(putter *u, int n, dp_err *e)
{
	const char(*etags)[80] = (const char(*)[80])u->etags.p;
	dp_buf body = DP_BUF_INIT;
	dp_buf_addstr(&body, "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">");
	for (int i = 0; i < n; i++)
		dp_buf_printf(&body, "<Part><PartNumber>%d</PartNumber><ETag>%s</ETag></Part>", i + 1,
			      etags[i]);
	if (dp_buf_addstr(&body, "</CompleteMultipartUpload>") < 0) {
		dp_buf_free(&body);
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	}
	char want[80];
	s3_md5_multipart_etag(etags, n, want);
	int rc = DP_OK;
	for (int attempt = 0;; attempt++) {
		s3_call c = {.method = "POST", .bucket = u->bucket, .key = u->key, .body = body.p,
			     .body_len = body.len};
		c.q[c.nq++] = (s3_sigv4_kv){"uploadId", u->upload_id};
		rc = s3_perform(u->s, &c, u->what, e);
		mpx x = MPX_INIT;
		int retry = 0;
		if (rc == DP_OK) {
			/* 200 OK can still carry an <Error> */
			rc = mp_parse(&c, &x, e);
			if (rc == DP_OK && x.is_error) {
				retry = !strcmp(x.code, "InternalError") || !strcmp(x.code, "SlowDown");
				rc = dp_seterr(e, DP_ETRANSFER, "%s: %s: %s", u->what, x.code, x.msg);
			} else if (rc == DP_OK && want[0] && x.etag.len && !same_tag(x.etag.p, want)) {
				/* (some stores, radosgw among them, answer an empty ETag) */
				rc = dp_seterr(e, DP_EDATA, "%s: the completed object's ETag %s is not "
					       "the %s its parts make", u->what, x.etag.p, want);
			}
		} else if (rc == DP_ENOTFOUND && attempt > 0 && want[0]) {
			/* our earlier Complete may have worked and its answer been lost */
			dp_obj o;
			dp_err e2;
			if (s3_head(u->s, u->bucket, u->key, &o, &e2) == DP_OK && same_tag(o.etag, want))
				rc = DP_OK;
		} else if (rc == DP_ETRANSFER && attempt == 0) {
			retry = 1; /* one more round: s3_perform's retries were used up */
		}
		mp_free(&x);
		s3_call_clean(&c);
		if (rc == DP_OK || !retry || attempt >= u->s->conf.retries)
			break;
		if (s3_sleep(u->s, s3_backoff(u->s, attempt + 1)) < 0)
			break;
	}
	dp_buf_free(&body);
	return rc;
}

static int start_upload(putter *u, ubuf *b, dp_err *e)
{
	memset(&b->call, 0, sizeof b->call);
	s3_call *c = &b->call;
	c->method = "PUT";
	c->bucket = u->bucket;
	c->key = u->key;
	c->body = b->p;
	c->body_len = b->len;
	c->body_sha = b->sha;
	snprintf(b->qpart, sizeof b->qpart, "%d", b->partno);
	c->q[c->nq++] = (s3_sigv4_kv){"partNumber", b->qpart};
	c->q[c->nq++] = (s3_sigv4_kv){"uploadId", u->upload_id};
	b->retry_at = 0;
	if (!b->h)
		b->h = curl_easy_init();
	int rc = s3_call_add(u->s, c, b->h, u->multi, e);
	if (rc < 0)
		return rc;
	b->running = 1;
	u->s->nreq++;
	return DP_OK;
}

/* ---- A local destination ----------------------------------------------------------- */

/* Its folders are made (mkdir -p): a key needs none in S3, and file://
 * destinations behave the same. */
static int put_local(dp_s3 *s, const dp_loc *dst, int fd, const char *srcname, dp_s3_stats *st,
		     dp_err *e)
{
	dp_out out;
	int rc = dp_make_parents(dst->key, NULL, NULL, e);
	if (rc < 0)
		return rc;
	rc = dp_out_open(&out, dst->key, e);
	if (rc < 0)
		return rc;
	char *buf = malloc(1 << 20);
	if (!buf) {
		dp_out_abort(&out);
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	}
	uint64_t total = 0;
	for (;;) {
		if (s3_cancelled(s)) {
			rc = dp_seterr(e, DP_EIO, "%s: interrupted", dst->key);
			break;
		}
		long n = dp_read_full(fd, buf, 1 << 20, srcname, e);
		if (n < 0) {
			rc = (int)n;
			break;
		}
		if (n == 0)
			break;
		if ((rc = dp_write_all(out.fd, buf, (size_t)n, dst->key, e)) < 0)
			break;
		total += (uint64_t)n;
		if (s->conf.progress)
			s->conf.progress(s->conf.progress_ctx, total);
	}
	free(buf);
	if (rc < 0) {
		dp_out_abort(&out);
		return rc;
	}
	if (st)
		st->bytes += total;
	return dp_out_commit(&out, e);
}

/* ---- The upload ------------------------------------------------------------------- */

static int putter_init(putter *u, dp_s3 *s, const dp_loc *dst, int fd, const char *srcname,
		       int64_t size_hint, dp_err *e)
{
	memset(u, 0, sizeof *u);
	u->s = s;
	u->bucket = dst->bucket;
	u->key = dst->key;
	u->fd = fd;
	u->srcname = srcname ? srcname : "stdin";
	u->what = s3_obj_url(dst->bucket, dst->key);
	u->base = s->conf.part_size < (5u << 20) ? 5u << 20 : s->conf.part_size;
	if (size_hint > 0 && (uint64_t)size_hint / 10000 >= u->base) {
		uint64_t p = ((uint64_t)size_hint + 9999) / 10000;
		u->fixed = (p + (1u << 20) - 1) & ~(uint64_t)((1u << 20) - 1);
	}
	u->nb = s->conf.concurrency + 2;
	u->b = calloc((size_t)u->nb, sizeof *u->b);
	u->multi = curl_multi_init();
	u->next_part = 1;
	dp_buf_init(&u->etags, 0);
	if (!u->what || !u->b || !u->multi)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	pthread_mutex_init(&u->mu, NULL);
	pthread_cond_init(&u->cv, NULL);
	u->synced = 1;
	if (dp_thread_create(&u->reader, reader_main, u) != 0)
		return dp_seterr(e, DP_ENOMEM, "cannot start the reader thread");
	u->reading = 1;
	return DP_OK;
}

/* Stop the reader; free everything. */
static void putter_free(putter *u)
{
	if (u->reading) {
		pthread_mutex_lock(&u->mu);
		u->abort = 1;
		pthread_cond_broadcast(&u->cv);
		pthread_mutex_unlock(&u->mu);
		pthread_join(u->reader, NULL);
	}
	for (int i = 0; u->b && i < u->nb; i++) {
		s3_call_drop(&u->b[i].call, u->b[i].h, u->b[i].running, u->multi);
		free(u->b[i].p);
	}
	if (u->synced) {
		pthread_mutex_destroy(&u->mu);
		pthread_cond_destroy(&u->cv);
	}
	if (u->multi)
		curl_multi_cleanup(u->multi);
	free(u->b);
	free(u->what);
	free(u->upload_id);
	dp_buf_free(&u->etags);
}

/* The reader's failure (copied to e) once it failed, else DP_OK. */
static int reader_failed(putter *u, dp_err *e)
{
	pthread_mutex_lock(&u->mu);
	int rf = u->rfailed;
	pthread_mutex_unlock(&u->mu);
	if (!rf)
		return DP_OK;
	if (e)
		*e = u->rerr;
	return u->rerr.code;
}

/* One part, or more?  Wait for part 1, and for part 2 when part 1 is full:
 * *second stays NULL when the input ended in (or right after) part 1. */
static int wait_first_parts(putter *u, ubuf **first, ubuf **second, dp_err *e)
{
	*first = *second = NULL;
	pthread_mutex_lock(&u->mu);
	for (;;) {
		*first = ready_part(u, 1);
		if (u->rfailed || s3_cancelled(u->s))
			break;
		if (*first && ((*first)->eof || (*second = ready_part(u, 2))))
			break;
		if (*first && u->read_done) /* ended right after a full part */
			break;
		pthread_mutex_unlock(&u->mu);
		curl_multi_poll(u->multi, NULL, 0, 200, NULL);
		pthread_mutex_lock(&u->mu);
	}
	pthread_mutex_unlock(&u->mu);
	int rc = reader_failed(u, e);
	if (rc == DP_OK && s3_cancelled(u->s))
		rc = dp_seterr(e, DP_EIO, "%s: interrupted", u->what);
	return rc;
}

/* Room in u->etags for part partno's ETag. */
static int etag_room(putter *u, int partno)
{
	static const char none[80];
	while (u->etags.len < (size_t)partno * sizeof none)
		if (dp_buf_add(&u->etags, none, sizeof none) < 0)
			return DP_ENOMEM;
	return DP_OK;
}

/* Start the parts the reader has filled, in order, while fewer than
 * conf.concurrency are in flight. */
static int start_parts(putter *u, dp_err *e)
{
	while (u->inflight < u->s->conf.concurrency) {
		pthread_mutex_lock(&u->mu);
		ubuf *b = ready_part(u, u->next_send);
		if (b)
			b->state = B_SENDING;
		pthread_mutex_unlock(&u->mu);
		if (!b)
			return DP_OK;
		if (b->len == 0 && b->eof && b->partno > 1) {
			/* the end, right after a full part */
			u->last_part = b->partno - 1;
			release(u, b);
			u->next_send++;
			continue;
		}
		if (b->eof)
			u->last_part = b->partno;
		if (b->partno > 10000)
			return dp_seterr(e, DP_ELIMIT, "%s: more than 10000 parts: use a larger "
					 "--part-size", u->what);
		if (etag_room(u, b->partno) < 0)
			return dp_seterr(e, DP_ENOMEM, "out of memory");
		int rc = start_upload(u, b, e);
		if (rc < 0)
			return rc;
		u->inflight++;
		u->next_send++;
	}
	return DP_OK;
}

/* A part's request ended with cc: keep its ETag and free its buffer, set
 * its retry, or fail. */
static int part_done(putter *u, ubuf *b, CURLcode cc, dp_err *e)
{
	dp_s3 *s = u->s;
	curl_multi_remove_handle(u->multi, b->h);
	b->running = 0;
	int k = s3_call_finish(s, &b->call, b->h, cc);
	if (s->conf.verbose)
		s3_log(s, "op=PUT url=%s part=%d bytes=%zu status=%ld ms=%.0f", u->what, b->partno,
		       b->len, b->call.status, (dp_now() - b->call.t0) * 1000);
	if (k == S3_OK && !b->call.etag[0])
		return dp_seterr(e, DP_EDATA, "%s: part %d: answer without an ETag", u->what,
				 b->partno);
	if (k == S3_OK) {
		snprintf(u->etags.p + (size_t)(b->partno - 1) * 80, 80, "%s", b->call.etag);
		u->sent += b->len;
		s3_call_clean(&b->call);
		u->inflight--;
		release(u, b);
		return DP_OK;
	}
	if (k == S3_FAIL && b->call.stopped == S3_STOP_CANCEL) /* as upload_parts says it */
		return dp_seterr(e, DP_EIO, "%s: interrupted", u->what);
	double w = s3_retry_at(s, k, &b->attempts, &b->retry_at);
	if (w >= 0) {
		if (k == S3_RETRY) {
			s->nretry++;
			s3_log(s, "retry=%d op=PUT url=%s part=%d error=\"%s\" wait_ms=%.0f",
			       b->attempts, u->what, b->partno,
			       b->call.code[0] ? b->call.code
			       : b->call.cc    ? curl_easy_strerror(b->call.cc)
					       : "HTTP error",
			       w * 1000);
		}
		s3_call_clean(&b->call);
		return DP_OK;
	}
	char what[1200];
	snprintf(what, sizeof what, "%s: part %d", u->what, b->partno);
	int rc = s3_call_error(s, &b->call, what, e);
	return k == S3_RETRY ? s3_gave_up(e, b->attempts + 1) : rc;
}

/* Move the transfers on: collect the finished ones (*moved), start the
 * retries that are due; *wake: when the next one is. */
static int pump(putter *u, int *moved, double *wake, dp_err *e)
{
	int running, rc = DP_OK;
	curl_multi_perform(u->multi, &running);
	CURLMsg *m;
	*moved = 0;
	while (rc == DP_OK && (m = s3_multi_done(u->multi))) {
		*moved = 1;
		for (int i = 0; i < u->nb; i++)
			if (u->b[i].running && u->b[i].h == m->easy_handle) {
				rc = part_done(u, &u->b[i], m->data.result, e);
				break;
			}
	}
	double now = dp_now();
	*wake = now + 0.2;
	for (int i = 0; i < u->nb && rc == DP_OK; i++) {
		ubuf *b = &u->b[i];
		if (b->state == B_SENDING && !b->running && s3_retry_due(b->retry_at, now, wake))
			rc = start_upload(u, b, e);
	}
	return rc;
}

/* Upload the parts as the reader fills them, until every one is up. */
static int upload_parts(putter *u, dp_err *e)
{
	dp_s3 *s = u->s;
	double last_prog = dp_now();
	u->next_send = 1;
	for (;;) {
		if (s3_cancelled(s))
			return dp_seterr(e, DP_EIO, "%s: interrupted", u->what);
		int rc = reader_failed(u, e);
		if (rc == DP_OK)
			rc = start_parts(u, e);
		if (rc < 0)
			return rc;
		if (u->last_part && u->inflight == 0 && u->next_send > u->last_part)
			return DP_OK; /* every part is up */
		int moved;
		double wake;
		if ((rc = pump(u, &moved, &wake, e)) < 0)
			return rc;
		double now = dp_now();
		if (s->conf.progress && now - last_prog >= 0.25) {
			s->conf.progress(s->conf.progress_ctx, u->sent);
			last_prog = now;
		}
		int ms = moved ? 0 : (int)((wake - now) * 1000) + 1;
		curl_multi_poll(u->multi, NULL, 0, ms < 0 ? 0 : ms, NULL);
	}
}

/* A multipart upload of everything the reader reads; aborted when anything
 * fails, so that no parts are left behind. */
static int put_multipart(putter *u, dp_s3_stats *st, dp_err *e)
{
	int rc = mp_create(u, &u->upload_id, e);
	if (rc < 0)
		return rc;
	rc = upload_parts(u, e);
	if (rc == DP_OK)
		rc = mp_complete(u, u->last_part, e);
	if (rc == DP_OK) {
		if (st)
			st->bytes += u->sent;
		return rc;
	}
	for (int i = 0; i < u->nb; i++)
		if (u->b[i].running) {
			curl_multi_remove_handle(u->multi, u->b[i].h);
			u->b[i].running = 0;
		}
	dp_err e2 = {0};
	if (mp_abort(u, u->upload_id, &e2) < 0 && e) {
		size_t l = strlen(e->msg);
		snprintf(e->msg + l, sizeof e->msg - l,
			 "; and aborting upload %s failed (%s): run s3-pipe rm --uploads %s",
			 u->upload_id, e2.msg, u->what);
	}
	return rc;
}

int dp_s3_put(dp_s3 *s, const dp_loc *dst, int fd, const char *srcname, int64_t size_hint,
	      dp_s3_stats *st, dp_err *e)
{
	if (dst->kind == DP_LOC_FILE)
		return put_local(s, dst, fd, srcname, st, e);
	if (!*dst->bucket || !*dst->key || dst->key[strlen(dst->key) - 1] == '/')
		return dp_seterr(e, DP_EARG, "s3://%s/%s: names no object", dst->bucket, dst->key);
	int rc = s3_ready(s, e);
	if (rc < 0)
		return rc;
	putter u;
	ubuf *first, *second;
	rc = putter_init(&u, s, dst, fd, srcname, size_hint, e);
	if (rc == DP_OK)
		rc = wait_first_parts(&u, &first, &second, e);
	if (rc == DP_OK && (first->eof || !second || (second->eof && second->len == 0))) {
		rc = put_single(&u, first, e);
		if (rc == DP_OK && st)
			st->bytes += first->len;
	} else if (rc == DP_OK) {
		rc = put_multipart(&u, st, e);
	}
	putter_free(&u);
	if (st) {
		st->requests = s->nreq;
		st->retries = s->nretry;
	}
	return rc;
}
