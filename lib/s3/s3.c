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
#include "s3_int.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
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
	dp_s3 *s = calloc(1, sizeof *s);
	if (!s) {
		dp_seterr(e, DP_ENOMEM, "out of memory");
		return NULL;
	}
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
	free(s->profile);
	free(s->key_id);
	wipe(s->secret);
	wipe(s->token);
	free(s->ca_bundle);
	free(s);
}

void dp_s3_cancel(dp_s3 *s) { s->cancelled = 1; }

/* ---- Logging, waiting ---------------------------------------------------------- */

void s3_log(const dp_s3 *s, const char *fmt, ...)
{
	if (!s->conf.log)
		return;
	char line[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	s->conf.log(s->conf.log_ctx, line);
}

static uint64_t rng_state;

static uint64_t rng_next(void)
{
	if (!rng_state) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		rng_state = (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_sec;
	}
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

double s3_backoff(const dp_s3 *s, int attempt)
{
	double d = s->conf.retry_base;
	for (int i = 1; i < attempt && d < 20; i++)
		d *= 2;
	if (d > 20)
		d = 20;
	/* half fixed, half random: spreads retries without waiting ~0 */
	return d / 2 + d / 2 * (double)(rng_next() >> 11) / (double)(1ull << 53);
}

int s3_sleep(dp_s3 *s, double secs)
{
	double end = dp_now() + secs;
	for (;;) {
		if (s->cancelled)
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
		if (c->resp.n < 65536)
			s3_buf_add(&c->resp, p, n < 65536 - c->resp.n ? n : 65536 - c->resp.n);
		return n;
	}
	if (c->resp.n + n > max) {
		c->sink_failed = 2;
		return 0;
	}
	s3_buf_add(&c->resp, p, n);
	return c->resp.oom ? 0 : n;
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
	s3_buf_free(&c->resp);
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

int s3_call_setup(dp_s3 *s, s3_call *c, CURL *h, dp_err *e)
{
	s3_call_clean(c);
	c->status = 0;
	c->etag[0] = c->content_range[0] = c->region_hdr[0] = c->sse[0] = 0;
	c->last_modified[0] = c->code[0] = c->message[0] = c->curl_err[0] = 0;
	c->content_length = -1;
	c->cc = CURLE_OK;
	c->sink_failed = 0;
	c->sink_rc = 0;
	c->body_pos = 0;
	c->t0 = dp_now();

	int vhost = s3_virtual_host(s, c->bucket);
	char *ekey = NULL, *path = NULL, *query = NULL, *hosthdr = NULL, *auth = NULL;
	char sha[65];
	int rc = DP_OK;
	const char *key = c->key ? c->key : "";
	ekey = dp_uri_encode(key, strlen(key), 1);
	if (!ekey)
		goto oom;
	if (!c->bucket || !*c->bucket)
		rc = asprintf(&path, "%s/", s->base_path);
	else if (vhost)
		rc = asprintf(&path, "%s/%s", s->base_path, ekey);
	else if (*key)
		rc = asprintf(&path, "%s/%s/%s", s->base_path, c->bucket, ekey);
	else
		rc = asprintf(&path, "%s/%s", s->base_path, c->bucket);
	if (rc < 0) {
		path = NULL;
		goto oom;
	}
	query = dp_sigv4_query(c->q, c->nq);
	if (!query)
		goto oom;
	if (vhost)
		rc = asprintf(&hosthdr, "%s.%s", c->bucket, s->host);
	else
		rc = asprintf(&hosthdr, "%s", s->host);
	if (rc < 0) {
		hosthdr = NULL;
		goto oom;
	}
	if (asprintf(&c->url, "%s://%s%s%s%s", s->scheme, hosthdr, path, *query ? "?" : "",
		     query) < 0) {
		c->url = NULL;
		goto oom;
	}
	if (c->body_sha)
		snprintf(sha, sizeof sha, "%s", c->body_sha);
	else
		dp_sha256_hex(c->body ? c->body : "", c->body ? c->body_len : 0, sha);
	char date[17];
	dp_amz_date(time(NULL), date);

	if (add_hdr(c, "Host", hosthdr) < 0)
		goto oom;
	for (size_t i = 0; i < c->nh; i++)
		if (add_hdr(c, c->h[i].name, c->h[i].value) < 0)
			goto oom;
	if (!s->anonymous) {
		dp_sigv4_kv hd[12];
		size_t nh = 0;
		hd[nh++] = (dp_sigv4_kv){"host", hosthdr};
		hd[nh++] = (dp_sigv4_kv){"x-amz-date", date};
		hd[nh++] = (dp_sigv4_kv){"x-amz-content-sha256", sha};
		if (s->token)
			hd[nh++] = (dp_sigv4_kv){"x-amz-security-token", s->token};
		for (size_t i = 0; i < c->nh && nh < 12; i++)
			hd[nh++] = c->h[i];
		dp_sigv4_req r = {
			.method = c->method, .path = path, .query = query, .hdrs = hd, .nhdrs = nh,
			.payload_hash = sha, .amz_date = date, .region = s->region,
			.service = "s3", .key_id = s->key_id, .secret = s->secret,
		};
		auth = dp_sigv4_authorization(&r);
		if (!auth || add_hdr(c, "x-amz-date", date) < 0 ||
		    add_hdr(c, "x-amz-content-sha256", sha) < 0 ||
		    (s->token && add_hdr(c, "x-amz-security-token", s->token) < 0) ||
		    add_hdr(c, "Authorization", auth) < 0)
			goto oom;
	}
	struct curl_slist *n = curl_slist_append(c->hl, "Expect:");
	if (!n)
		goto oom;
	c->hl = n;
	if (strcmp(c->method, "POST") == 0) {
		if (!(n = curl_slist_append(c->hl, "Content-Type:")))
			goto oom;
		c->hl = n;
	}

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
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)(s->conf.timeout * 1000 / 3 + 1000));
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)(s->conf.timeout + 0.5));
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
	goto out;
oom:
	rc = dp_seterr(e, DP_ENOMEM, "out of memory");
out:
	if (auth) {
		memset(auth, 0, strlen(auth));
		free(auth);
	}
	free(ekey);
	free(path);
	free(query);
	free(hosthdr);
	return rc < 0 ? rc : DP_OK;
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

int s3_call_finish(dp_s3 *s, s3_call *c, CURL *h, CURLcode cc)
{
	(void)s;
	c->cc = cc;
	long st = 0;
	if (curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &st) == CURLE_OK && st)
		c->status = st;
	if (c->sink_failed)
		return S3_FAIL;
	if (cc != CURLE_OK)
		return retryable_curl(cc) ? S3_RETRY : S3_FAIL;
	if (c->status >= 200 && c->status < 300)
		return S3_OK;
	s3x_error(c->resp.p, c->resp.n, c->code, sizeof c->code, c->message, sizeof c->message);
	if (c->status >= 500 || c->status == 429 || strcmp(c->code, "SlowDown") == 0 ||
	    strcmp(c->code, "RequestTimeout") == 0 || strcmp(c->code, "InternalError") == 0)
		return S3_RETRY;
	return S3_FAIL;
}

static int code_status(const char *code, long http)
{
	static const char *const denied[] = {
		"AccessDenied", "SignatureDoesNotMatch", "InvalidAccessKeyId", "ExpiredToken",
		"InvalidToken", "TokenRefreshRequired", "AllAccessDisabled", "AccountProblem",
		"InvalidSecurity", "AuthorizationHeaderMalformed", "RequestTimeTooSkewed",
		"UserSuspended", NULL,
	};
	static const char *const missing[] = {"NoSuchKey", "NoSuchBucket", "NoSuchUpload",
					      "NoSuchVersion", NULL};
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

int s3_call_error(dp_s3 *s, s3_call *c, const char *what, dp_err *e)
{
	(void)s;
	char *own = NULL;
	if (!what)
		what = own = s3_obj_url(c->bucket, c->key);
	if (!what)
		what = "s3";
	int rc;
	if (c->sink_failed == 2)
		rc = dp_seterr(e, DP_ELIMIT, "%s: answer too large", what);
	else if (c->cc != CURLE_OK)
		rc = dp_seterr(e, DP_ETRANSFER, "%s: %s", what,
			       c->curl_err[0] ? c->curl_err : curl_easy_strerror(c->cc));
	else if (c->code[0])
		rc = dp_seterr(e, code_status(c->code, c->status), "%s: %s: %s", what, c->code,
			       c->message[0] ? c->message : std_message(c->code));
	else {
		const char *reason = c->status == 404   ? "Not Found"
				     : c->status == 403 ? "Forbidden"
				     : c->status == 412 ? "Precondition Failed"
				     : c->status == 503 ? "Service Unavailable"
							: "";
		rc = dp_seterr(e, code_status("", c->status), "%s: HTTP %ld%s%s%s", what, c->status,
			       *reason ? " (" : "", reason, *reason ? ")" : "");
	}
	if (c->region_hdr[0] && s->region && strcmp(c->region_hdr, s->region) != 0 && e &&
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
		if (s->cancelled) {
			rc = dp_seterr(e, DP_EIO, "%s: interrupted", what);
			break;
		}
		if ((rc = s3_call_setup(s, c, s->easy, e)) < 0)
			break;
		CURLcode cc = curl_easy_perform(s->easy);
		s->nreq++;
		int k = s3_call_finish(s, c, s->easy, cc);
		log_call(s, c, k, what);
		if (k == S3_OK) {
			rc = DP_OK;
			break;
		}
		if (k == S3_RETRY && attempt < s->conf.retries) {
			double w = s3_backoff(s, attempt + 1);
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
		if (k == S3_RETRY) {
			rc = DP_ETRANSFER;
			if (e) {
				e->code = rc;
				size_t l = strlen(e->msg);
				snprintf(e->msg + l, sizeof e->msg - l, " (gave up after %d attempts)",
					 attempt + 1);
			}
		}
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
		g.h[g.nh++] = (dp_sigv4_kv){"Range", "bytes=0-0"};
		int rc2 = s3_perform(s, &g, NULL, &e2);
		if (rc2 < 0 && g.code[0] && e)
			*e = e2, rc = e2.code;
		s3_call_clean(&g);
	}
	s3_call_clean(&c);
	return rc;
}
