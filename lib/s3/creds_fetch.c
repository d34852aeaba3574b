/*
 * creds_fetch.c - the providers that fetch credentials over HTTP or from a
 * command: STS AssumeRoleWithWebIdentity, credential_process, the container
 * endpoint, the EC2 instance metadata service (IMDSv2).  creds.c says when
 * each is used; their answers are read by creds_parse.c.
 */
#define _GNU_SOURCE
#include "creds.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>


/* ---- HTTP to a provider --------------------------------------------------------- */

typedef struct hreq {
	const char *method, *url, *body;
	const char *hdr[4]; /* "Name: value" */
	double timeout;
	long status;
	dp_buf resp;
	CURLcode cc;
	int connected; /* a connection was made (a timeout came later) */
	char err[CURL_ERROR_SIZE];
} hreq;

static size_t hr_body(char *p, size_t sz, size_t nm, void *ud)
{
	hreq *r = ud;
	size_t n = sz * nm;
	return dp_buf_add(&r->resp, p, n) < 0 ? 0 : n;
}

/* One request, its own handle (s->easy may be mid-request).  DP_OK when an
 * answer came (any status), else DP_ETRANSFER with r->err. */
static int http_do(dp_s3 *s, hreq *r)
{
	dp_buf_free(&r->resp);
	dp_buf_init(&r->resp, RESP_MAX);
	r->status = 0;
	r->err[0] = 0;
	r->connected = 0;
	CURL *h = curl_easy_init();
	struct curl_slist *hl = NULL;
	for (int i = 0; i < 4 && r->hdr[i]; i++) {
		struct curl_slist *n = curl_slist_append(hl, r->hdr[i]);
		if (!n) {
			curl_slist_free_all(hl);
			hl = NULL;
			h = (curl_easy_cleanup(h), NULL);
			break;
		}
		hl = n;
	}
	if (!h) {
		snprintf(r->err, sizeof r->err, "out of memory");
		r->cc = CURLE_OUT_OF_MEMORY;
		return DP_ENOMEM;
	}
	curl_easy_setopt(h, CURLOPT_URL, r->url);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
	curl_easy_setopt(h, CURLOPT_USERAGENT, "dptools-s3-pipe/" DP_VERSION);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, hr_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, r->err);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(r->timeout * 1000));
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)(r->timeout * 1000));
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	if (s->ca_bundle)
		curl_easy_setopt(h, CURLOPT_CAINFO, s->ca_bundle);
	if (strcmp(r->method, "GET") != 0) {
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, r->body ? r->body : "");
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE,
				 (curl_off_t)(r->body ? strlen(r->body) : 0));
		if (strcmp(r->method, "POST") != 0)
			curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, r->method);
	}
	r->cc = curl_easy_perform(h);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
	double ct = 0;
	curl_easy_getinfo(h, CURLINFO_CONNECT_TIME, &ct);
	r->connected = ct > 0;
	curl_easy_cleanup(h);
	curl_slist_free_all(hl);
	if (r->cc != CURLE_OK) {
		if (!r->err[0])
			snprintf(r->err, sizeof r->err, "%s", curl_easy_strerror(r->cc));
		return DP_ETRANSFER;
	}
	return DP_OK;
}

/* The answer's body as text ("" when none). */
static const char *hr_text(const hreq *r) { return r->resp.p ? r->resp.p : ""; }

/* r until an answer of status 200, attempts times, a pause of pause_s
 * between: DP_OK, or an error "WHAT: HTTP 500" / "WHAT: reason". */
static int http_get_ok(dp_s3 *s, hreq *r, int attempts, double pause_s, const char *what,
		       dp_err *e)
{
	int rc = DP_OK;
	for (int i = 0; i < attempts; i++) {
		if (i && s3_sleep(s, pause_s) < 0)
			return dp_seterr(e, DP_EIO, "%s: interrupted", what);
		rc = http_do(s, r);
		if (rc == DP_ENOMEM)
			return dp_seterr(e, DP_ENOMEM, "out of memory");
		if (rc == DP_OK && r->status == 200)
			return DP_OK;
	}
	if (rc != DP_OK)
		return dp_seterr(e, DP_EDENIED, "%s: %s", what, r->err);
	return dp_seterr(e, DP_EDENIED, "%s: HTTP %ld", what, r->status);
}

/* ---- The providers' fetches ---------------------------------------------------------- */

/* A whole small file (a token) into *out, trailing newlines kept; more
 * than TOKEN_MAX bytes is DP_EDATA. */
static int read_small(const char *path, char **out, const char *what, dp_err *e)
{
	char name[1200];
	snprintf(name, sizeof name, "%s: %s", what, path);
	dp_buf b = DP_BUF_INIT;
	int rc = dp_read_file(strcmp(path, "-") ? path : "./-", name, TOKEN_MAX, &b, e);
	if (rc < 0) {
		dp_buf_free(&b);
		return rc == DP_ELIMIT ? (e->code = DP_EDATA) : rc;
	}
	*out = dp_buf_take(&b);
	return *out ? DP_OK : dp_seterr(e, DP_ENOMEM, "out of memory");
}

static int fetch_web(dp_s3 *s, s3_creds *c, s3_cval *v, dp_err *e)
{
	char *tok = NULL;
	int rc = read_small(c->token_file, &tok, c->what, e);
	if (rc < 0)
		return rc;
	size_t tl = strlen(tok);
	while (tl && (tok[tl - 1] == '\n' || tok[tl - 1] == '\r'))
		tok[--tl] = 0;
	char *er = s3_uri_encode(c->role_arn, strlen(c->role_arn), 0);
	char *es = s3_uri_encode(c->session, strlen(c->session), 0);
	char *et = s3_uri_encode(tok, tl, 0);
	memset(tok, 0, tl);
	free(tok);
	char *body = NULL;
	if (!er || !es || !et ||
	    asprintf(&body, "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=%s"
			    "&RoleSessionName=%s&WebIdentityToken=%s", er, es, et) < 0)
		body = NULL;
	free(er);
	free(es);
	if (et) {
		memset(et, 0, strlen(et));
		free(et);
	}
	if (!body)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	hreq r = {.method = "POST", .url = c->url, .body = body, .timeout = c->timeout,
		  .hdr = {"Content-Type: application/x-www-form-urlencoded; charset=utf-8",
			  "Accept:"}};
	/* STS's own errors are final but for IDPCommunicationError and 5xx */
	for (int i = 0; i < c->attempts; i++) {
		if (i && s3_sleep(s, 1.0) < 0) {
			rc = dp_seterr(e, DP_EIO, "%s: interrupted", c->what);
			break;
		}
		rc = http_do(s, &r);
		if (rc == DP_ENOMEM) {
			rc = dp_seterr(e, DP_ENOMEM, "out of memory");
			break;
		}
		if (rc < 0) {
			rc = dp_seterr(e, DP_EDENIED, "%s: %s", c->what, r.err);
			continue;
		}
		rc = s3_creds_parse_sts(hr_text(&r), r.resp.len, v, e);
		if (rc == DP_OK && r.status != 200) {
			s3_cval_free(v);
			rc = dp_seterr(e, DP_EDENIED, "HTTP %ld", r.status);
		}
		if (rc < 0 && rc != DP_ENOMEM)
			dp_preferr(e, "%s", c->what);
		if (rc == DP_OK || rc == DP_ENOMEM ||
		    (r.status < 500 && !strstr(e->msg, ": IDPCommunicationError:")))
			break;
	}
	memset(body, 0, strlen(body));
	free(body);
	dp_buf_free(&r.resp);
	if (rc < 0 && rc != DP_ENOMEM)
		rc = e->code = DP_EDENIED;
	return rc;
}

/* Run argv with stdin from /dev/null; its stdout (at most RESP_MAX) in
 * out, the head of its stderr in errtxt; *status as waitpid's. */
static int run_cmd(char **argv, dp_buf *out, char *errtxt, size_t errsz, int *status,
		   const char *what, dp_err *e)
{
	int po[2] = {-1, -1}, pe[2] = {-1, -1};
	if (pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0) {
		int rc = dp_syserr(e, "%s: pipe", what);
		for (int i = 0; i < 2; i++) {
			if (po[i] >= 0)
				close(po[i]);
			if (pe[i] >= 0)
				close(pe[i]);
		}
		return rc;
	}
	dp_child ch = {NULL, argv, NULL, -1, po[1], pe[1], 0};
	int pid, rc = dp_spawn(&ch, &pid, e);
	close(po[1]);
	close(pe[1]);
	if (rc < 0) {
		close(po[0]);
		close(pe[0]);
		return dp_preferr(e, "%s", what);
	}
	size_t el = 0;
	struct pollfd pf[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
	int open_fds = 2;
	while (open_fds) {
		if (poll(pf, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		for (int i = 0; i < 2; i++) {
			if (pf[i].fd < 0 || !pf[i].revents)
				continue;
			char buf[4096];
			ssize_t n = read(pf[i].fd, buf, sizeof buf);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				close(pf[i].fd);
				pf[i].fd = -1;
				open_fds--;
				continue;
			}
			if (i == 0) {
				dp_buf_add(out, buf, (size_t)n); /* capped: out->err */
			} else if (el + 1 < errsz) {
				size_t k = (size_t)n < errsz - 1 - el ? (size_t)n : errsz - 1 - el;
				memcpy(errtxt + el, buf, k);
				el += k;
			}
		}
	}
	for (int i = 0; i < 2; i++)
		if (pf[i].fd >= 0)
			close(pf[i].fd);
	errtxt[el] = 0;
	while (waitpid(pid, status, 0) < 0)
		if (errno != EINTR)
			return dp_syserr(e, "%s: wait", what);
	return DP_OK;
}

static int fetch_process(dp_s3 *s, s3_creds *c, s3_cval *v, dp_err *e)
{
	(void)s;
	char **argv = s3_shell_split(c->process);
	if (!argv)
		return dp_seterr(e, DP_EDENIED, "%s: cannot split the command (quotes?)", c->what);
	dp_buf out;
	dp_buf_init(&out, RESP_MAX);
	char errtxt[512];
	int status = 0;
	int rc = run_cmd(argv, &out, errtxt, sizeof errtxt, &status, c->what, e);
	s3_argv_free(argv);
	if (rc == DP_OK) {
		/* the first line of its stderr, as printable text */
		char *nl = strchr(errtxt, '\n');
		if (nl)
			*nl = 0;
		for (char *p = errtxt; *p; p++)
			if ((unsigned char)*p < 32)
				*p = ' ';
		if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
			rc = dp_seterr(e, DP_EDENIED, "%s: exit status %d%s%s", c->what,
				       WEXITSTATUS(status), errtxt[0] ? ": " : "", errtxt);
		else if (WIFSIGNALED(status))
			rc = dp_seterr(e, DP_EDENIED, "%s: killed by signal %d", c->what,
				       WTERMSIG(status));
		else if (out.err)
			rc = dp_seterr(e, out.err == DP_ENOMEM ? DP_ENOMEM : DP_EDENIED,
				       "%s: more than 64 KiB of output", c->what);
		else if ((rc = s3_creds_parse_json(out.p ? out.p : "", out.len, S3_CJ_PROCESS, v,
						   e)) < 0 && rc != DP_ENOMEM)
			rc = dp_preferr(e, "%s", c->what);
	}
	if (out.p)
		memset(out.p, 0, out.len);
	dp_buf_free(&out);
	if (rc < 0 && rc != DP_ENOMEM)
		rc = e->code = DP_EDENIED;
	return rc;
}

static int fetch_container(dp_s3 *s, s3_creds *c, s3_cval *v, dp_err *e)
{
	char *tok = NULL;
	int rc = DP_OK;
	if (c->auth_file)
		rc = read_small(c->auth_file, &tok, c->what, e);
	else if (c->auth && !(tok = strdup(c->auth)))
		rc = dp_seterr(e, DP_ENOMEM, "out of memory");
	if (rc < 0)
		return rc == DP_ENOMEM ? rc : (e->code = DP_EDENIED);
	char *hdr = NULL;
	if (tok && (strchr(tok, '\r') || strchr(tok, '\n')))
		rc = dp_seterr(e, DP_EDENIED, "%s: the authorization token holds a line break",
			       c->what);
	else if (tok && asprintf(&hdr, "Authorization: %s", tok) < 0)
		rc = dp_seterr(e, DP_ENOMEM, "out of memory"), hdr = NULL;
	if (tok) {
		memset(tok, 0, strlen(tok));
		free(tok);
	}
	if (rc < 0)
		return rc;
	hreq r = {.method = "GET", .url = c->url, .timeout = c->timeout,
		  .hdr = {"Accept: application/json", hdr}};
	rc = http_get_ok(s, &r, c->attempts, 1.0, c->what, e);
	if (rc == DP_OK && (rc = s3_creds_parse_json(hr_text(&r), r.resp.len, S3_CJ_CONTAINER, v,
						     e)) < 0 && rc != DP_ENOMEM)
		rc = dp_preferr(e, "%s", c->what);
	if (hdr) {
		memset(hdr, 0, strlen(hdr));
		free(hdr);
	}
	if (r.resp.p)
		memset(r.resp.p, 0, r.resp.len);
	dp_buf_free(&r.resp);
	if (rc < 0 && rc != DP_ENOMEM)
		rc = e->code = DP_EDENIED;
	return rc;
}

/* IMDSv2's session token in *tok (NULL: go on without, as IMDSv1). */
static int imds_token(dp_s3 *s, s3_creds *c, char **tok, dp_err *e)
{
	*tok = NULL;
	char url[700];
	snprintf(url, sizeof url, "%slatest/api/token", c->url);
	hreq r = {.method = "PUT", .url = url, .timeout = c->timeout,
		  .hdr = {"X-aws-ec2-metadata-token-ttl-seconds: 21600"}};
	int rc = DP_OK;
	for (int i = 0; i < c->attempts; i++) {
		rc = http_do(s, &r);
		if (rc == DP_ENOMEM)
			break;
		if (rc < 0 && r.connected && r.cc == CURLE_OPERATION_TIMEDOUT)
			break; /* connected, no answer: a PUT over too many hops */
		if (rc == DP_OK)
			break;
	}
	if (rc == DP_ENOMEM) {
		rc = dp_seterr(e, DP_ENOMEM, "out of memory");
	} else if (rc == DP_OK && r.status == 200 && r.resp.len) {
		*tok = dp_buf_take(&r.resp);
		if (!*tok)
			rc = dp_seterr(e, DP_ENOMEM, "out of memory");
	} else if (rc == DP_OK && r.status == 400) {
		rc = dp_seterr(e, DP_EDENIED, "%s: token: HTTP 400", c->what);
	} else if (rc < 0 && !r.connected) {
		rc = dp_seterr(e, DP_EDENIED, "%s: token: %s", c->what, r.err); /* not on EC2 */
	} else if (c->v1_disabled) {
		rc = rc < 0 ? dp_seterr(e, DP_EDENIED, "%s: token: %s", c->what, r.err)
			    : dp_seterr(e, DP_EDENIED, "%s: token: HTTP %ld (and IMDSv1 is disabled)",
					c->what, r.status);
	} else {
		rc = DP_OK; /* 403, 404, 405 or no answer: IMDSv1, as botocore */
	}
	dp_buf_free(&r.resp);
	return rc;
}

/* GET base + path with the token (or without) into *out. */
static int imds_get(dp_s3 *s, s3_creds *c, const char *path, const char *tok, char **out,
		    dp_err *e)
{
	char url[900], what[1000], *hdr = NULL;
	snprintf(url, sizeof url, "%s%s", c->url, path);
	snprintf(what, sizeof what, "%s: %s", c->what, path);
	if (tok && asprintf(&hdr, "X-aws-ec2-metadata-token: %s", tok) < 0)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	hreq r = {.method = "GET", .url = url, .timeout = c->timeout, .hdr = {hdr}};
	int rc = http_get_ok(s, &r, c->attempts, 0, what, e);
	if (rc == DP_OK && !r.resp.len)
		rc = dp_seterr(e, DP_EDENIED, "%s: an empty answer", what);
	if (rc == DP_OK && !(*out = dp_buf_take(&r.resp)))
		rc = dp_seterr(e, DP_ENOMEM, "out of memory");
	dp_buf_free(&r.resp);
	if (hdr) {
		memset(hdr, 0, strlen(hdr));
		free(hdr);
	}
	return rc;
}

static int fetch_imds(dp_s3 *s, s3_creds *c, s3_cval *v, dp_err *e)
{
	char *tok = NULL, *role = NULL, *doc = NULL;
	int rc = imds_token(s, c, &tok, e);
	if (rc == DP_OK)
		rc = imds_get(s, c, "latest/meta-data/iam/security-credentials/", tok, &role, e);
	if (rc == DP_OK) {
		char *nl = strchr(role, '\n');
		if (nl)
			*nl = 0;
		char path[400];
		if (!*role || strlen(role) > 200 || strchr(role, '/') || strchr(role, '?'))
			rc = dp_seterr(e, DP_EDENIED, "%s: no role name", c->what);
		else {
			snprintf(path, sizeof path, "latest/meta-data/iam/security-credentials/%s",
				 role);
			rc = imds_get(s, c, path, tok, &doc, e);
		}
	}
	if (rc == DP_OK && (rc = s3_creds_parse_json(doc, strlen(doc), S3_CJ_IMDS, v, e)) < 0 &&
	    rc != DP_ENOMEM)
		rc = dp_preferr(e, "%s", c->what);
	if (rc == DP_OK && c->want_region && !c->region[0]) {
		char *reg = NULL;
		dp_err e2;
		if (imds_get(s, c, "latest/meta-data/placement/region", tok, &reg, &e2) == DP_OK)
			snprintf(c->region, sizeof c->region, "%s", reg);
		free(reg);
	}
	if (doc) {
		memset(doc, 0, strlen(doc));
		free(doc);
	}
	free(role);
	if (tok) {
		memset(tok, 0, strlen(tok));
		free(tok);
	}
	if (rc < 0 && rc != DP_ENOMEM)
		rc = e->code = DP_EDENIED;
	return rc;
}

int s3_creds_fetch(dp_s3 *s, s3_creds *c, s3_cval *v, dp_err *e)
{
	switch (c->kind) {
	case K_WEB: return fetch_web(s, c, v, e);
	case K_PROCESS: return fetch_process(s, c, v, e);
	case K_CONTAINER: return fetch_container(s, c, v, e);
	default: return fetch_imds(s, c, v, e);
	}
}
