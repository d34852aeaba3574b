/*
 * s3.c - one S3 request, start to finish, and the simple operations.
 *
 * A request (s3_call) is prepared afresh for every attempt: the URL
 * (virtual-hosted "bucket.host/key" or path-style "host/bucket/key"), the
 * headers, and the SigV4 signature over exactly the path, query and headers
 * sent (curl is told not to touch the path: CURLOPT_PATH_AS_IS).  The answer
 * is classified OK, RETRY (5xx, 429, SlowDown, RequestTimeout, timeouts,
 * dropped or refused connections) or FAIL; retries wait with jittered
 * exponential backoff.  The transfer engines in s3get.c and s3put.c drive
 * the same calls through a curl multi handle.
 */
#define _GNU_SOURCE
#include "dp_rng.h"
#include "s3_int.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- The client ------------------------------------------------------------ */

void dp_s3_conf_init(dp_s3_conf *c)
{
	memset(c, 0, sizeof *c);
	c->concurrency = 8;
	c->part_size = 8u << 20;
	c->retries = 10;
	c->retry_base = 0.1;
	c->timeout = 30;
}

dp_s3 *dp_s3_new(const dp_s3_conf *c, dp_err *e)
{
	static int curl_ready;
	if (!curl_ready) {
		if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
			dp_seterr(e, DP_EIO, "libcurl initialisation failed");
			return NULL;
		}
		curl_ready = 1;
	}
	dp_s3 *s = dp_zalloc(sizeof *s, e);
	if (!s)
		return NULL;
	s->conf = *c;
	if (s->conf.concurrency < 1)
		s->conf.concurrency = 1;
	if (s->conf.part_size == 0)
		s->conf.part_size = 8u << 20;
	if (s->conf.retries < 0)
		s->conf.retries = 0;
	if (s->conf.retry_base <= 0)
		s->conf.retry_base = 0.1;
	if (s->conf.timeout <= 0)
		s->conf.timeout = 30;
	if (s3_conf_load(s, e) < 0) {
		dp_s3_free(s);
		return NULL;
	}
	s->easy = curl_easy_init();
	if (!s->easy) {
		dp_seterr(e, DP_ENOMEM, "out of memory");
		dp_s3_free(s);
		return NULL;
	}
	return s;
}

static void wipe(char *p)
{
	if (p) {
		memset(p, 0, strlen(p));
		free(p);
	}
}

void dp_s3_free(dp_s3 *s)
{
	if (!s)
		return;
	if (s->easy)
		curl_easy_cleanup(s->easy);
	free(s->scheme);
	free(s->host);
	free(s->base_path);
	free(s->region);
	for (size_t i = 0; i < s->nbreg; i++) {
		free(s->breg[i].bucket);
		free(s->breg[i].region);
		free(s->breg[i].host);
	}
	free(s->breg);
	free(s->profile);
	s3_creds_release(s);
	free(s->key_id);
	wipe(s->secret);
	wipe(s->token);
	free(s->ca_bundle);
	free(s);
}

void dp_s3_cancel(dp_s3 *s) { s->cancelled = 1; }

/* ---- Logging, waiting ---------------------------------------------------------- */

/* The retry jitter's generator: one per thread (no lock, nothing shared
 * between the threads of a client or between clients), seeded on first
 * use from the clock, the process and the thread, so that processes
 * retrying at once draw different waits.  Nothing reproducible depends on
 * it. */
static _Thread_local dp_rng jitter;
static _Thread_local int jitter_seeded;

static uint64_t jitter_next(void)
{
	if (!jitter_seeded) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		uint64_t t = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
		dp_rng_seed(&jitter, t ^ ((uint64_t)getpid() << 32), (uint64_t)(uintptr_t)&jitter);
		jitter_seeded = 1;
	}
	return dp_rng_next(&jitter);
}

double s3_backoff(const dp_s3 *s, int attempt)
{
	double d = s->conf.retry_base;
	for (int i = 1; i < attempt && d < 20; i++)
		d *= 2;
	if (d > 20)
		d = 20;
	/* half fixed, half random: spreads retries without waiting ~0 */
	return d / 2 + d / 2 * (double)(jitter_next() >> 11) / (double)(1ull << 53);
}

double s3_retry_at(const dp_s3 *s, int k, int *attempts, double *retry_at)
{
	if (k == S3_AGAIN) {
		*retry_at = dp_now();
		return 0;
	}
	if (k != S3_RETRY || *attempts >= s->conf.retries)
		return -1;
	double w = s3_backoff(s, ++*attempts);
	*retry_at = dp_now() + w;
	return w;
}

int s3_gave_up(dp_err *e, int attempts)
{
	if (e) {
		e->code = DP_ETRANSFER;
		size_t l = strlen(e->msg);
		snprintf(e->msg + l, sizeof e->msg - l, " (gave up after %d attempts)", attempts);
	}
	return DP_ETRANSFER;
}

int s3_sleep(dp_s3 *s, double secs)
{
	double end = dp_now() + secs;
	for (;;) {
		if (s3_cancelled(s))
			return -1;
		double left = end - dp_now();
		if (left <= 0)
			return 0;
		if (left > 0.1)
			left = 0.1;
		struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
		nanosleep(&ts, NULL);
	}
}

/* ---- Building a request ----------------------------------------------------------- */

char *s3_obj_url(const char *bucket, const char *key)
{
	char *u = NULL;
	if (asprintf(&u, "s3://%s%s%s", bucket ? bucket : "", bucket && *bucket ? "/" : "",
		     key ? key : "") < 0)
		return NULL;
	return u;
}

static size_t on_header(char *p, size_t sz, size_t nm, void *ud)
{
	s3_call *c = ud;
	size_t n = sz * nm;
	char line[1024];
	size_t l = n < sizeof line - 1 ? n : sizeof line - 1;
	memcpy(line, p, l);
	line[l] = 0;
	while (l > 0 && (line[l - 1] == '\r' || line[l - 1] == '\n' || line[l - 1] == ' '))
		line[--l] = 0;
	if (strncmp(line, "HTTP/", 5) == 0) {
		/* a new answer (after a 100 Continue, say): forget the last */
		const char *sp = strchr(line, ' ');
		c->status = sp ? strtol(sp + 1, NULL, 10) : 0;
		c->etag[0] = c->content_range[0] = c->region_hdr[0] = c->sse[0] = 0;
		c->last_modified[0] = 0;
		c->content_length = -1;
		return n;
	}
	char *colon = strchr(line, ':');
	if (!colon)
		return n;
	*colon = 0;
	char *v = colon + 1;
	while (*v == ' ' || *v == '\t')
		v++;
	if (strcasecmp(line, "etag") == 0)
		snprintf(c->etag, sizeof c->etag, "%s", v);
	else if (strcasecmp(line, "content-range") == 0)
		snprintf(c->content_range, sizeof c->content_range, "%s", v);
	else if (strcasecmp(line, "content-length") == 0)
		c->content_length = strtoll(v, NULL, 10);
	else if (strcasecmp(line, "x-amz-bucket-region") == 0)
		snprintf(c->region_hdr, sizeof c->region_hdr, "%s", v);
	else if (strcasecmp(line, "x-amz-server-side-encryption") == 0)
		snprintf(c->sse, sizeof c->sse, "%s", v);
	else if (strcasecmp(line, "x-amz-server-side-encryption-customer-algorithm") == 0)
		snprintf(c->sse, sizeof c->sse, "SSE-C");
	else if (strcasecmp(line, "last-modified") == 0)
		snprintf(c->last_modified, sizeof c->last_modified, "%s", v);
	return n;
}

static size_t on_body(char *p, size_t sz, size_t nm, void *ud)
{
	s3_call *c = ud;
	size_t n = sz * nm;
	if (c->status >= 200 && c->status < 300 && c->sink) {
		size_t r = c->sink(c->sink_ctx, p, n);
		if (r == CURL_WRITEFUNC_PAUSE)
			return r; /* the sink takes it later */
		if (r != n)
			c->sink_failed = 1;
		return r;
	}
	size_t max = c->resp_max ? c->resp_max : 16u << 20;
	if (c->status >= 300 || c->status < 200) {
		/* an error document: keep its head, drop the rest */
		if (c->resp.len < 65536)
			dp_buf_add(&c->resp, p, n < 65536 - c->resp.len ? n : 65536 - c->resp.len);
		return n;
	}
	if (c->resp.len + n > max) {
		c->sink_failed = 2;
		return 0;
	}
	return dp_buf_add(&c->resp, p, n) < 0 ? 0 : n;
}

static size_t on_read(char *p, size_t sz, size_t nm, void *ud)
{
	s3_call *c = ud;
	size_t n = sz * nm, left = c->body_len - c->body_pos;
	if (n > left)
		n = left;
	if (n)
		memcpy(p, c->body + c->body_pos, n);
	c->body_pos += n;
	return n;
}

static int on_seek(void *ud, curl_off_t off, int origin)
{
	s3_call *c = ud;
	if (origin != SEEK_SET || off < 0 || (size_t)off > c->body_len)
		return CURL_SEEKFUNC_CANTSEEK;
	c->body_pos = (size_t)off;
	return CURL_SEEKFUNC_OK;
}

void s3_call_clean(s3_call *c)
{
	free(c->url);
	c->url = NULL;
	curl_slist_free_all(c->hl);
	c->hl = NULL;
	dp_buf_free(&c->resp);
}

static int add_hdr(s3_call *c, const char *name, const char *value)
{
	char *line = NULL;
	if (asprintf(&line, "%s: %s", name, value) < 0)
		return -1;
	struct curl_slist *n = curl_slist_append(c->hl, line);
	memset(line, 0, strlen(line));
	free(line);
	if (!n)
		return -1;
	c->hl = n;
	return 0;
}

/* What one attempt at c sends: built afresh each time (the date changes). */
typedef struct req {
	char *path;  /* URI-encoded: "/bucket/a%20b" or "/a%20b" */
	char *query; /* canonical query string, "" for none */
	char *host;  /* the Host header: "bucket.host" or "host" */
	char sha[65]; /* hex SHA-256 of the body */
	char date[17];
} req;

/* The path, query and Host header of c, and its URL (c->url). */
static int call_url(dp_s3 *s, s3_call *c, req *r)
{
	int vhost = s3_virtual_host(s, c->bucket);
	const char *key = c->key ? c->key : "";
	char *ekey = s3_uri_encode(key, strlen(key), 1);
	if (!ekey)
		return -1;
	int rc;
	if (!c->bucket || !*c->bucket)
		rc = asprintf(&r->path, "%s/", s->base_path);
	else if (vhost)
		rc = asprintf(&r->path, "%s/%s", s->base_path, ekey);
	else if (*key)
		rc = asprintf(&r->path, "%s/%s/%s", s->base_path, c->bucket, ekey);
	else
		rc = asprintf(&r->path, "%s/%s", s->base_path, c->bucket);
	free(ekey);
	if (rc < 0) {
		r->path = NULL; /* asprintf leaves it undefined */
		return -1;
	}
	if (!(r->query = s3_sigv4_query(c->q, c->nq)))
		return -1;
	const char *region, *host;
	s3_where(s, c->bucket, &region, &host);
	if (vhost)
		rc = asprintf(&r->host, "%s.%s", c->bucket, host);
	else
		rc = asprintf(&r->host, "%s", host);
	if (rc < 0) {
		r->host = NULL;
		return -1;
	}
	if (asprintf(&c->url, "%s://%s%s%s%s", s->scheme, r->host, r->path, *r->query ? "?" : "",
		     r->query) < 0) {
		c->url = NULL;
		return -1;
	}
	return 0;
}

/* The headers of c (c->hl): Host, its own, and unless anonymous the date,
 * the payload hash, the session token and the signature over them all. */
static int call_headers(dp_s3 *s, s3_call *c, req *r)
{
	if (c->body_sha)
		snprintf(r->sha, sizeof r->sha, "%s", c->body_sha);
	else
		s3_sha256_hex(c->body ? c->body : "", c->body ? c->body_len : 0, r->sha);
	s3_amz_date(time(NULL), r->date);
	if (add_hdr(c, "Host", r->host) < 0)
		return -1;
	for (size_t i = 0; i < c->nh; i++)
		if (add_hdr(c, c->h[i].name, c->h[i].value) < 0)
			return -1;
	if (!s->anonymous) {
		const char *region, *host;
		s3_where(s, c->bucket, &region, &host);
		snprintf(c->signed_for, sizeof c->signed_for, "%s", region);
		s3_sigv4_kv hd[12];
		size_t nh = 0;
		hd[nh++] = (s3_sigv4_kv){"host", r->host};
		hd[nh++] = (s3_sigv4_kv){"x-amz-date", r->date};
		hd[nh++] = (s3_sigv4_kv){"x-amz-content-sha256", r->sha};
		if (s->token)
			hd[nh++] = (s3_sigv4_kv){"x-amz-security-token", s->token};
		for (size_t i = 0; i < c->nh && nh < 12; i++)
			hd[nh++] = c->h[i];
		s3_sigv4_req sr = {
			.method = c->method, .path = r->path, .query = r->query, .hdrs = hd,
			.nhdrs = nh, .payload_hash = r->sha, .amz_date = r->date, .region = region,
			.service = "s3", .key_id = s->key_id, .secret = s->secret,
		};
		char *auth = s3_sigv4_authorization(&sr);
		int bad = !auth || add_hdr(c, "x-amz-date", r->date) < 0 ||
			  add_hdr(c, "x-amz-content-sha256", r->sha) < 0 ||
			  (s->token && add_hdr(c, "x-amz-security-token", s->token) < 0) ||
			  add_hdr(c, "Authorization", auth) < 0;
		if (auth) {
			memset(auth, 0, strlen(auth));
			free(auth);
		}
		if (bad)
			return -1;
	}
	struct curl_slist *n = curl_slist_append(c->hl, "Expect:");
	if (!n)
		return -1;
	c->hl = n;
	if (strcmp(c->method, "POST") == 0) {
		if (!(n = curl_slist_append(c->hl, "Content-Type:")))
			return -1;
		c->hl = n;
	}
	return 0;
}

/* libcurl's progress callback, at least once a second: the watchdog.  A
 * transfer that moves no byte, either way, for conf.timeout seconds
 * (connecting included; time paused for a slow reader not counted) is
 * stopped and retried as a timeout; one the caller cancelled, or past the
 * deadline of a clean-up, is stopped for good.  (curl's own low-speed
 * limit averages over its last seconds and gives up about 5 s late.) */
static int on_xfer(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
		   curl_off_t ulnow)
{
	(void)dltotal;
	(void)ultotal;
	s3_call *c = ud;
	dp_s3 *s = c->s;
	double now = dp_now();
	uint64_t b = (uint64_t)dlnow + (uint64_t)ulnow;
	if (b != c->prog_bytes || c->paused) {
		c->prog_bytes = b;
		c->prog_t = now;
	}
	if (s3_cancelled(s))
		c->stopped = S3_STOP_CANCEL;
	else if (s->deadline > 0 && now >= s->deadline)
		c->stopped = S3_STOP_DEADLINE;
	else if (now - c->prog_t >= s->conf.timeout)
		c->stopped = S3_STOP_STALL;
	return c->stopped != S3_STOP_NONE;
}

/* libcurl's options for c on h (reset first). */
static void call_options(dp_s3 *s, s3_call *c, CURL *h)
{
	curl_easy_reset(h);
	curl_easy_setopt(h, CURLOPT_URL, c->url);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, c->hl);
	curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
	curl_easy_setopt(h, CURLOPT_USERAGENT, "dptools-s3-pipe/" DP_VERSION);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, c);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, c);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, c->curl_err);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)(s->conf.timeout * 1000));
	curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_xfer);
	curl_easy_setopt(h, CURLOPT_XFERINFODATA, c);
	if (s->deadline > 0) {
		double left = s->deadline - dp_now();
		curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, left > 0.001 ? (long)(left * 1000) : 1L);
	}
	curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 256L * 1024);
	curl_easy_setopt(h, CURLOPT_PRIVATE, c);
	if (s->ca_bundle)
		curl_easy_setopt(h, CURLOPT_CAINFO, s->ca_bundle);
	if (strcmp(c->method, "HEAD") == 0) {
		curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
	} else if (strcmp(c->method, "PUT") == 0) {
		curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
		curl_easy_setopt(h, CURLOPT_READDATA, c);
		curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, on_seek);
		curl_easy_setopt(h, CURLOPT_SEEKDATA, c);
		curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)c->body_len);
	} else if (strcmp(c->method, "POST") == 0) {
		curl_easy_setopt(h, CURLOPT_POST, 1L);
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, c->body ? c->body : "");
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE,
				 (curl_off_t)(c->body ? c->body_len : 0));
	} else if (strcmp(c->method, "GET") != 0) {
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, c->method);
	}
}

int s3_call_setup(dp_s3 *s, s3_call *c, CURL *h, dp_err *e)
{
	s3_call_clean(c);
	dp_buf_init(&c->resp, 0);
	c->status = 0;
	c->etag[0] = c->content_range[0] = c->region_hdr[0] = c->sse[0] = 0;
	c->last_modified[0] = c->code[0] = c->message[0] = c->curl_err[0] = 0;
	c->content_length = -1;
	c->cc = CURLE_OK;
	c->sink_failed = 0;
	c->sink_rc = 0;
	c->body_pos = 0;
	c->t0 = dp_now();
	c->s = s;
	c->paused = 0;
	c->stopped = S3_STOP_NONE;
	c->prog_bytes = 0;
	c->prog_t = c->t0;
	if (s->cr && !s->anonymous) {
		/* temporary credentials: fresh ones before these expire */
		int rc = s3_creds_current(s, e);
		if (rc < 0)
			return rc;
	}
	req r = {0};
	int rc = call_url(s, c, &r) < 0 || call_headers(s, c, &r) < 0
			 ? dp_seterr(e, DP_ENOMEM, "out of memory")
			 : DP_OK;
	if (rc == DP_OK)
		call_options(s, c, h);
	free(r.path);
	free(r.query);
	free(r.host);
	return rc;
}

CURLMsg *s3_multi_done(CURLM *multi)
{
	int left;
	CURLMsg *m;
	while ((m = curl_multi_info_read(multi, &left)))
		if (m->msg == CURLMSG_DONE)
			return m;
	return NULL;
}

void s3_call_drop(s3_call *c, CURL *h, int running, CURLM *multi)
{
	if (running)
		curl_multi_remove_handle(multi, h);
	if (h)
		curl_easy_cleanup(h);
	s3_call_clean(c);
}

int s3_call_add(dp_s3 *s, s3_call *c, CURL *h, CURLM *multi, dp_err *e)
{
	if (!h)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	int rc = s3_call_setup(s, c, h, e);
	if (rc < 0)
		return rc;
	if (curl_multi_add_handle(multi, h) != CURLM_OK)
		return dp_seterr(e, DP_ENOMEM, "cannot add a transfer");
	return DP_OK;
}

/* ---- The answer ---------------------------------------------------------------- */

static int retryable_curl(CURLcode cc)
{
	switch (cc) {
	case CURLE_COULDNT_CONNECT:
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
	case CURLE_PARTIAL_FILE:
	case CURLE_GOT_NOTHING:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
	case CURLE_WEIRD_SERVER_REPLY:
		return 1;
	default:
		return 0;
	}
}

/* A bucket in another region: S3 answers 301 PermanentRedirect (or 400
 * AuthorizationHeaderMalformed) and names the region in
 * x-amz-bucket-region (or <Region> in the error).  Requests for that
 * bucket go there from now on, as the aws CLI's do (other buckets keep
 * theirs): returns 1 when the request is to be sent again. */
static int follow_region(dp_s3 *s, s3_call *c)
{
	if ((c->status != 301 && c->status != 400) || c->redirected >= 2 || s->redirects >= 64 ||
	    !c->bucket || !*c->bucket)
		return 0;
	char region[64] = "";
	if (c->region_hdr[0]) {
		snprintf(region, sizeof region, "%s", c->region_hdr);
	} else if (c->resp.p) {
		const char *a = strstr(c->resp.p, "<Region>"), *b = a ? strstr(a, "</Region>") : NULL;
		if (a && b && b - a - 8 < (long)sizeof region)
			snprintf(region, sizeof region, "%.*s", (int)(b - a - 8), a + 8);
	}
	if (!region[0] || !strcmp(region, c->signed_for))
		return 0;
	if (c->status == 400 && !c->region_hdr[0] && strcmp(c->code, "AuthorizationHeaderMalformed"))
		return 0; /* another 400 (a HEAD's has no body, only the header) */
	/* (learnt already when a request sent beside this one came back first) */
	const char *now, *host;
	s3_where(s, c->bucket, &now, &host);
	if (strcmp(region, now) && s3_learn_region(s, c->bucket, region) != DP_OK)
		return 0;
	char *u = s3_obj_url(c->bucket, c->key);
	c->redirected++;
	s->redirects++;
	s3_log(s, "op=%s url=%s status=%ld region=%s: the bucket's region, signing for it",
	       c->method, u ? u : "s3", c->status, region);
	free(u);
	return 1;
}

int s3_call_finish(dp_s3 *s, s3_call *c, CURL *h, CURLcode cc)
{
	c->cc = cc;
	long st = 0;
	if (curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &st) == CURLE_OK && st)
		c->status = st;
	if (c->sink_failed)
		return S3_FAIL;
	if (cc == CURLE_ABORTED_BY_CALLBACK || (cc == CURLE_OPERATION_TIMEDOUT && s->deadline > 0 &&
						 dp_now() >= s->deadline - 0.01)) {
		/* the watchdog's (on_xfer) */
		if (c->stopped == S3_STOP_STALL) {
			c->cc = CURLE_OPERATION_TIMEDOUT;
			snprintf(c->curl_err, sizeof c->curl_err,
				 "Operation too slow: nothing moved for %g s", s->conf.timeout);
			return S3_RETRY;
		}
		c->cc = CURLE_ABORTED_BY_CALLBACK;
		snprintf(c->curl_err, sizeof c->curl_err, "%s",
			 c->stopped == S3_STOP_CANCEL ? "interrupted" : "out of time for the clean-up");
		return S3_FAIL;
	}
	if (cc != CURLE_OK)
		return retryable_curl(cc) ? S3_RETRY : S3_FAIL;
	if (c->status >= 200 && c->status < 300)
		return S3_OK;
	s3x_error(c->resp.p, c->resp.len, c->code, sizeof c->code, c->message, sizeof c->message);
	if (follow_region(s, c))
		return S3_AGAIN;
	if (c->status >= 500 || c->status == 429 || strcmp(c->code, "SlowDown") == 0 ||
	    strcmp(c->code, "RequestTimeout") == 0 || strcmp(c->code, "InternalError") == 0)
		return S3_RETRY;
	return S3_FAIL;
}

int s3_code_status(const char *code, long http)
{
	static const char *const denied[] = {
		"AccessDenied", "SignatureDoesNotMatch", "InvalidAccessKeyId", "ExpiredToken",
		"InvalidToken", "TokenRefreshRequired", "AllAccessDisabled", "AccountProblem",
		"InvalidSecurity", "AuthorizationHeaderMalformed", "RequestTimeTooSkewed",
		"UserSuspended", NULL,
	};
	static const char *const missing[] = {"NoSuchKey", "NoSuchBucket", "NoSuchUpload",
					      "NoSuchVersion", NULL};
	static const char *const bad_name[] = {"InvalidObjectName", "KeyTooLongError",
					       "InvalidBucketName", NULL};
	for (int i = 0; bad_name[i]; i++)
		if (strcmp(code, bad_name[i]) == 0)
			return DP_EARG;
	for (int i = 0; denied[i]; i++)
		if (strcmp(code, denied[i]) == 0)
			return DP_EDENIED;
	for (int i = 0; missing[i]; i++)
		if (strcmp(code, missing[i]) == 0)
			return DP_ENOTFOUND;
	if (http == 401 || http == 403)
		return DP_EDENIED;
	if (http == 404)
		return DP_ENOTFOUND;
	if (http >= 500 || http == 429 || strcmp(code, "SlowDown") == 0)
		return DP_ETRANSFER;
	if (http == 412)
		return DP_EDATA;
	return DP_EIO;
}

/* AWS's wording, for stores that send a code without a message. */
static const char *std_message(const char *code)
{
	static const char *const m[][2] = {
		{"NoSuchKey", "The specified key does not exist."},
		{"NoSuchBucket", "The specified bucket does not exist"},
		{"NoSuchUpload", "The specified upload does not exist."},
		{"AccessDenied", "Access Denied"},
		{"SignatureDoesNotMatch", "The request signature we calculated does not match the "
					  "signature you provided."},
		{"InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our "
				       "records."},
		{"PreconditionFailed", "At least one of the preconditions you specified did not hold"},
		{"InvalidRange", "The requested range is not satisfiable"},
		{"SlowDown", "Please reduce your request rate."},
		{"BucketAlreadyExists", "The requested bucket name is not available."},
	};
	for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
		if (!strcmp(code, m[i][0]))
			return m[i][1];
	return "(no message)";
}

const char *s3_fit_name(const char *what, size_t max, char *buf, size_t bufsz)
{
	size_t n = strlen(what);
	if (max >= bufsz)
		max = bufsz - 1;
	if (n <= max || max < 16)
		return what;
	/* keep the head (bucket, start of the key) and the tail (its end) */
	size_t head = (max - 3) / 2, tail = max - 3 - head;
	memcpy(buf, what, head);
	memcpy(buf + head, "...", 3);
	memcpy(buf + head + 3, what + n - tail, tail + 1);
	return buf;
}

int s3_call_error(dp_s3 *s, s3_call *c, const char *what, dp_err *e)
{
	(void)s;
	char *own = NULL;
	if (!what)
		what = own = s3_obj_url(c->bucket, c->key);
	if (!what)
		what = "s3";
	/* the object's name gives way, not S3's code and message: room for
	 * them, the curl error, and the notes callers append */
	char fitted[sizeof e->msg];
	size_t room = strlen(c->code) + strlen(c->curl_err) +
			(strlen(c->message) < 300 ? strlen(c->message) : 300) + 200;
	what = s3_fit_name(what, room < sizeof fitted ? sizeof fitted - room : 0, fitted,
			   sizeof fitted);
	int rc;
	if (c->sink_failed == 2)
		rc = dp_seterr(e, DP_ELIMIT, "%s: answer too large", what);
	else if (c->cc != CURLE_OK)
		rc = dp_seterr(e, DP_ETRANSFER, "%s: %s", what,
			       c->curl_err[0] ? c->curl_err : curl_easy_strerror(c->cc));
	else if (c->code[0])
		rc = dp_seterr(e, s3_code_status(c->code, c->status), "%s: %s: %s", what, c->code,
			       c->message[0] ? c->message : std_message(c->code));
	else {
		const char *reason = c->status == 404   ? "Not Found"
				     : c->status == 403 ? "Forbidden"
				     : c->status == 412 ? "Precondition Failed"
				     : c->status == 503 ? "Service Unavailable"
							: "";
		rc = dp_seterr(e, s3_code_status("", c->status), "%s: HTTP %ld%s%s%s", what, c->status,
			       *reason ? " (" : "", reason, *reason ? ")" : "");
	}
	const char *used, *host;
	s3_where(s, c->bucket, &used, &host);
	if (c->region_hdr[0] && used && strcmp(c->region_hdr, used) != 0 && e &&
	    strlen(e->msg) + 80 < sizeof e->msg)
		snprintf(e->msg + strlen(e->msg), sizeof e->msg - strlen(e->msg),
			 " (the bucket is in %s: set AWS_REGION or --region)", c->region_hdr);
	free(own);
	return rc;
}

static void log_call(dp_s3 *s, const s3_call *c, int k, const char *what)
{
	if (!s->conf.log || !s->conf.verbose)
		return;
	s3_log(s, "op=%s url=%s status=%ld%s%s ms=%.0f", c->method, what, c->status,
	       c->code[0] ? " code=" : "", c->code, (dp_now() - c->t0) * 1000);
	(void)k;
}

int s3_perform(dp_s3 *s, s3_call *c, const char *what, dp_err *e)
{
	int rc = s3_ready(s, e);
	if (rc < 0)
		return rc;
	char *own = NULL;
	if (!what)
		what = own = s3_obj_url(c->bucket, c->key);
	if (!what)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	for (int attempt = 0;; attempt++) {
		if (s3_cancelled(s)) {
			rc = dp_seterr(e, DP_EIO, "%s: interrupted", what);
			break;
		}
		if ((rc = s3_call_setup(s, c, s->easy, e)) < 0)
			break;
		CURLcode cc = curl_easy_perform(s->easy);
		s->nreq++;
		if (s3_cancelled(s)) {
			rc = dp_seterr(e, DP_EIO, "%s: interrupted", what);
			break;
		}
		int k = s3_call_finish(s, c, s->easy, cc);
		log_call(s, c, k, what);
		if (k == S3_AGAIN) {
			attempt--; /* sent on to the bucket's region: not a failure */
			continue;
		}
		if (k == S3_OK) {
			rc = DP_OK;
			break;
		}
		double w = k == S3_RETRY ? s3_backoff(s, attempt + 1) : 0;
		if (k == S3_RETRY && s->deadline > 0 && dp_now() + w >= s->deadline) {
			rc = s3_call_error(s, c, what, e);
			if (e) {
				size_t l = strlen(e->msg);
				snprintf(e->msg + l, sizeof e->msg - l,
					 " (gave up after %d attempts: out of time for the clean-up)",
					 attempt + 1);
			}
			break;
		}
		if (k == S3_RETRY && attempt < s->conf.retries) {
			s3_log(s, "retry=%d op=%s url=%s error=\"%s\" wait_ms=%.0f", attempt + 1,
			       c->method, what,
			       c->cc ? curl_easy_strerror(c->cc) : c->code[0] ? c->code : "HTTP error",
			       w * 1000);
			s->nretry++;
			if (s3_sleep(s, w) < 0) {
				rc = dp_seterr(e, DP_EIO, "%s: interrupted", what);
				break;
			}
			continue;
		}
		rc = s3_call_error(s, c, what, e);
		if (k == S3_RETRY)
			rc = s3_gave_up(e, attempt + 1);
		break;
	}
	free(own);
	return rc;
}

/* ---- Simple operations --------------------------------------------------------- */

int s3_head(dp_s3 *s, const char *bucket, const char *key, dp_obj *o, dp_err *e)
{
	s3_call c = {.method = "HEAD", .bucket = bucket, .key = key};
	int rc = s3_perform(s, &c, NULL, e);
	if (rc == DP_OK) {
		memset(o, 0, sizeof *o);
		o->kind = DP_LOC_S3;
		if (c.content_length < 0) {
			char *u = s3_obj_url(bucket, key);
			rc = dp_seterr(e, DP_EDATA, "%s: HEAD answer without Content-Length",
				       u ? u : key);
			free(u);
		} else {
			o->size = (uint64_t)c.content_length;
			snprintf(o->etag, sizeof o->etag, "%s", c.etag);
			o->mtime = c.last_modified[0] ? s3_parse_time(c.last_modified) : -1;
			o->known = 1;
		}
	} else if (c.status >= 400 && c.status < 500 && !c.code[0] && c.cc == CURLE_OK) {
		/* HEAD answers carry no body: ask for one byte to learn S3's error
		 * code and message. */
		dp_err e2 = {0};
		s3_call g = {.method = "GET", .bucket = bucket, .key = key, .resp_max = 1};
		g.h[g.nh++] = (s3_sigv4_kv){"Range", "bytes=0-0"};
		int rc2 = s3_perform(s, &g, NULL, &e2);
		if (rc2 < 0 && g.code[0] && e)
			*e = e2, rc = e2.code;
		s3_call_clean(&g);
	}
	s3_call_clean(&c);
	return rc;
}
