/*
 * creds.c - where the S3 client's credentials come from, in botocore's
 * order (botocore/credentials.py, create_credential_resolver), first found
 * wins:
 *
 *   --no-sign-request                    none (anonymous)
 *   env            AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN)
 *                  (not with an explicit --profile)
 *   [assume-role]  a profile's role_arn with source_profile or credential_source:
 *                  not done, an error rather than other credentials
 *   assume-role-with-web-identity
 *                  AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN (+ AWS_ROLE_SESSION_NAME),
 *                  or the profile's web_identity_token_file, role_arn...:
 *                  STS AssumeRoleWithWebIdentity (an unsigned POST)
 *   [sso]          a profile's sso_start_url or sso_session: an error
 *   shared-credentials-file   the profile's keys in ~/.aws/credentials
 *   custom-process the profile's credential_process: its JSON (Version 1)
 *   config-file    the profile's keys in ~/.aws/config
 *   container-role AWS_CONTAINER_CREDENTIALS_RELATIVE_URI (on 169.254.170.2) or
 *                  _FULL_URI (https, or http to a loopback address,
 *                  169.254.170.2 or 169.254.170.23), with the Authorization of
 *                  AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE or _TOKEN
 *   iam-role       the EC2 instance metadata service, IMDSv2: PUT api/token,
 *                  GET meta-data/iam/security-credentials/ (the role), then the
 *                  role's credentials; unless AWS_EC2_METADATA_DISABLED=true
 *
 * The providers that fetch are only prepared when the client is made; they
 * fetch at the first request (s3_ready), so a run on local files contacts
 * nothing.  Temporary credentials (those with an Expiration) are fetched
 * again before they expire, as botocore does: in the advisory window (15
 * minutes left) a failure keeps the old ones; in the mandatory window (10
 * minutes) it is an error.  DP_S3_CREDS_REFRESH=ADVISORY,MANDATORY
 * (seconds) changes the windows, for tests.  One provider's state is shared
 * by a client and its workers (s3batch.c), under a mutex.
 *
 * No secret appears in a message or a log line: errors name the provider,
 * its URL and what failed.
 */
#define _GNU_SOURCE
#include "s3_int.h"

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


enum { K_WEB = 1, K_PROCESS, K_CONTAINER, K_IMDS };

#define RESP_MAX (64u << 10)  /* a provider's answer */
#define TOKEN_MAX (64u << 10) /* a web identity or authorization token file */
#define IMDS_URL "http://169.254.169.254/"
#define IMDS_URL6 "http://[fd00:ec2::254]/"
#define ECS_HOST "169.254.170.2"

struct s3_creds {
	pthread_mutex_t mu;
	int refs;
	int kind;
	char what[600]; /* the provider in messages: "container endpoint http://..." */
	/* what the provider needs */
	char *url;                                /* STS, container URL, IMDS base ("/" ended) */
	char *role_arn, *token_file, *session;    /* web identity */
	char *auth, *auth_file;                   /* container */
	char *process;                            /* credential_process */
	double timeout;                           /* seconds per HTTP request */
	int attempts;                             /* HTTP attempts */
	int v1_disabled;                          /* IMDS: no fallback without a token */
	int want_region;                          /* IMDS: the instance's region too */
	/* the credentials */
	s3_cval v;
	unsigned gen;  /* bumped at each fetch */
	double last_try;
	int fetched;
	int failed; /* the first fetch failed: for good */
	dp_err err;
	char region[64]; /* IMDS's placement/region, "" when unknown */
	char hint[700];  /* IMDS: what to say when it is not there either */
	double advisory, mandatory;
};

void s3_cval_free(s3_cval *v)
{
	char *p[3] = {v->key_id, v->secret, v->token};
	for (int i = 0; i < 3; i++)
		if (p[i]) {
			memset(p[i], 0, strlen(p[i]));
			free(p[i]);
		}
	memset(v, 0, sizeof *v);
}


static int is_true(const char *v) { return v && strcasecmp(v, "true") == 0; }

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

/* ---- The parsers ------------------------------------------------------------------ */

static int json_str(json_t *o, const char *key, int need, char **out, const char *what,
		    dp_err *e)
{
	json_t *v = json_object_get(o, key);
	if (!v && !need)
		return DP_OK;
	if (!v || !json_is_string(v))
		return dp_seterr(e, DP_EDATA, "%s: %s %s", what, key,
				 v ? "is not a string" : "is missing");
	if (!(*out = strdup(json_string_value(v))))
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	return DP_OK;
}

static int expiry(const char *t, s3_cval *v, const char *what, dp_err *e)
{
	if (!t)
		return DP_OK;
	int64_t x = s3_parse_time(t);
	if (x <= 0)
		return dp_seterr(e, DP_EDATA, "%s: Expiration is not an ISO 8601 time", what);
	v->expires = x;
	return DP_OK;
}

int s3_creds_parse_json(const char *doc, size_t len, int kind, s3_cval *v, dp_err *e)
{
	memset(v, 0, sizeof *v);
	const char *what = "the answer";
	json_error_t je;
	json_t *o = json_loadb(doc, len, JSON_REJECT_DUPLICATES, &je);
	if (!o || !json_is_object(o)) {
		json_decref(o);
		return dp_seterr(e, DP_EDATA, "%s is not a JSON object", what);
	}
	int rc = DP_OK;
	char *exp = NULL, *code = NULL;
	if (kind == S3_CJ_PROCESS) {
		json_t *ver = json_object_get(o, "Version");
		if (!json_is_integer(ver) || json_integer_value(ver) != 1)
			rc = dp_seterr(e, DP_EDATA, "%s: Version is not 1", what);
	}
	if (rc == DP_OK && kind == S3_CJ_IMDS)
		rc = json_str(o, "Code", 0, &code, what, e);
	if (rc == DP_OK && code && strcmp(code, "Success") != 0)
		rc = dp_seterr(e, DP_EDENIED, "%s: Code is not Success", what);
	if (rc == DP_OK)
		rc = json_str(o, "AccessKeyId", 1, &v->key_id, what, e);
	if (rc == DP_OK)
		rc = json_str(o, "SecretAccessKey", 1, &v->secret, what, e);
	if (rc == DP_OK)
		rc = json_str(o, kind == S3_CJ_PROCESS ? "SessionToken" : "Token",
			      kind == S3_CJ_IMDS, &v->token, what, e);
	if (rc == DP_OK)
		rc = json_str(o, "Expiration", kind == S3_CJ_IMDS, &exp, what, e);
	if (rc == DP_OK)
		rc = expiry(exp, v, what, e);
	if (rc == DP_OK && (!*v->key_id || !*v->secret))
		rc = dp_seterr(e, DP_EDATA, "%s: an empty AccessKeyId or SecretAccessKey", what);
	free(exp);
	free(code);
	json_decref(o);
	if (rc < 0)
		s3_cval_free(v);
	return rc;
}

typedef struct stsx {
	s3_cval *v;
	char *exp;
	char code[64], msg[256];
	int nomem;
} stsx;

static int ends_with(const char *s, const char *tail)
{
	size_t n = strlen(s), m = strlen(tail);
	return n >= m && strcmp(s + n - m, tail) == 0;
}

static void sts_event(void *ctx, const char *path, const char *text, size_t len)
{
	stsx *x = ctx;
	(void)len;
	if (!text)
		return;
	char **dst = NULL;
	if (!strcmp(path, "AssumeRoleWithWebIdentityResponse/AssumeRoleWithWebIdentityResult/"
			  "Credentials/AccessKeyId"))
		dst = &x->v->key_id;
	else if (!strcmp(path, "AssumeRoleWithWebIdentityResponse/AssumeRoleWithWebIdentityResult/"
			       "Credentials/SecretAccessKey"))
		dst = &x->v->secret;
	else if (!strcmp(path, "AssumeRoleWithWebIdentityResponse/AssumeRoleWithWebIdentityResult/"
			       "Credentials/SessionToken"))
		dst = &x->v->token;
	else if (!strcmp(path, "AssumeRoleWithWebIdentityResponse/AssumeRoleWithWebIdentityResult/"
			       "Credentials/Expiration"))
		dst = &x->exp;
	else if (ends_with(path, "Error/Code"))
		snprintf(x->code, sizeof x->code, "%s", text);
	else if (ends_with(path, "Error/Message"))
		snprintf(x->msg, sizeof x->msg, "%s", text);
	if (dst) {
		free(*dst);
		if (!(*dst = strdup(text)))
			x->nomem = 1;
	}
}

int s3_creds_parse_sts(const char *doc, size_t len, s3_cval *v, dp_err *e)
{
	memset(v, 0, sizeof *v);
	stsx x = {.v = v};
	int rc = s3x_parse(doc, len, sts_event, &x, e);
	if (rc == DP_OK && x.nomem)
		rc = dp_seterr(e, DP_ENOMEM, "out of memory");
	for (char *c = x.msg; *c; c++)
		if ((unsigned char)*c < 32)
			*c = ' ';
	for (char *c = x.code; *c; c++)
		if ((unsigned char)*c < 32)
			*c = ' ';
	if (rc == DP_OK && x.code[0])
		rc = dp_seterr(e, DP_EDENIED, "%s: %s", x.code, x.msg[0] ? x.msg : "(no message)");
	else if (rc == DP_OK && (!v->key_id || !v->secret || !*v->key_id || !*v->secret))
		rc = dp_seterr(e, DP_EDATA, "no Credentials in the answer");
	if (rc == DP_OK)
		rc = expiry(x.exp, v, "the answer", e);
	free(x.exp);
	if (rc < 0)
		s3_cval_free(v);
	return rc;
}

/* ---- Splitting a command line (Python's shlex.split, POSIX mode) -------------------- */

void s3_argv_free(char **argv)
{
	if (!argv)
		return;
	for (char **a = argv; *a; a++)
		free(*a);
	free(argv);
}

char **s3_shell_split(const char *cmd)
{
	size_t cap = 8, n = 0;
	char **argv = calloc(cap, sizeof *argv);
	char *word = malloc(strlen(cmd) + 1);
	if (!argv || !word)
		goto fail;
	const char *p = cmd;
	for (;;) {
		while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
			p++;
		if (!*p)
			break;
		size_t w = 0;
		while (*p && !(*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) {
			if (*p == '\\') {
				if (!p[1])
					goto fail;
				word[w++] = p[1];
				p += 2;
			} else if (*p == '\'') {
				const char *q = strchr(p + 1, '\'');
				if (!q)
					goto fail;
				memcpy(word + w, p + 1, (size_t)(q - p - 1));
				w += (size_t)(q - p - 1);
				p = q + 1;
			} else if (*p == '"') {
				for (p++; *p && *p != '"'; p++) {
					if (*p == '\\' && (p[1] == '"' || p[1] == '\\'))
						p++;
					word[w++] = *p;
				}
				if (*p != '"')
					goto fail;
				p++;
			} else {
				word[w++] = *p++;
			}
		}
		if (n + 2 > cap) {
			char **na = realloc(argv, (cap *= 2) * sizeof *na);
			if (!na)
				goto fail;
			argv = na;
		}
		if (!(argv[n] = strndup(word, w)))
			goto fail;
		argv[++n] = NULL;
	}
	free(word);
	if (n == 0) {
		free(argv);
		return NULL;
	}
	return argv;
fail:
	free(word);
	s3_argv_free(argv);
	return NULL;
}

/* ---- The providers' fetches ---------------------------------------------------------- */

/* A whole small file (a token) into *out, trailing newlines kept. */
static int read_small(const char *path, char **out, const char *what, dp_err *e)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return dp_syserr(e, "%s: %s", what, path);
	dp_buf b;
	dp_buf_init(&b, TOKEN_MAX);
	char chunk[4096];
	size_t n;
	while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
		if (dp_buf_add(&b, chunk, n) < 0)
			break;
	int bad = ferror(f);
	fclose(f);
	if (b.err || bad) {
		int code = b.err == DP_ENOMEM ? DP_ENOMEM : DP_EDATA;
		dp_buf_free(&b);
		return dp_seterr(e, code, "%s: %s: %s", what, path,
				 bad ? "read error" : "larger than 64 KiB");
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

static int fetch(dp_s3 *s, s3_creds *c, s3_cval *v, dp_err *e)
{
	switch (c->kind) {
	case K_WEB: return fetch_web(s, c, v, e);
	case K_PROCESS: return fetch_process(s, c, v, e);
	case K_CONTAINER: return fetch_container(s, c, v, e);
	default: return fetch_imds(s, c, v, e);
	}
}

/* ---- Fetch, refresh, share ------------------------------------------------------------ */

static void fmt_time(int64_t t, char *buf, size_t n)
{
	time_t tt = (time_t)t;
	struct tm tm;
	gmtime_r(&tt, &tm);
	strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* The client's copy of c's credentials (c locked). */
static int copy_out(dp_s3 *s, s3_creds *c)
{
	if (s->cred_gen == c->gen)
		return DP_OK;
	char *k = strdup(c->v.key_id), *sec = strdup(c->v.secret);
	char *t = c->v.token && *c->v.token ? strdup(c->v.token) : NULL;
	if (!k || !sec || (c->v.token && *c->v.token && !t)) {
		free(k);
		free(sec);
		free(t);
		return DP_ENOMEM;
	}
	s3_cval old = {s->key_id, s->secret, s->token, 0};
	s3_cval_free(&old);
	s->key_id = k;
	s->secret = sec;
	s->token = t;
	s->cred_gen = c->gen;
	if (s->region_default && c->region[0] && strcmp(c->region, s->region) != 0 &&
	    s3_set_region(s, c->region) == DP_OK)
		s->region_default = 0;
	return DP_OK;
}

/* e2, a fetch's failure, as the client reports it. */
static void fetch_error(const s3_creds *c, const dp_err *e2, dp_err *out)
{
	if (e2->code == DP_ENOMEM)
		*out = *e2;
	else if (c->hint[0]) /* the instance metadata service, the chain's last resort */
		dp_seterr(out, DP_EDENIED, "%s (%s)", c->hint, e2->msg);
	else
		dp_seterr(out, DP_EDENIED, "credentials: %s", e2->msg);
}

int s3_creds_current(dp_s3 *s, dp_err *e)
{
	s3_creds *c = s->cr;
	pthread_mutex_lock(&c->mu);
	int rc = DP_OK;
	double now = (double)time(NULL);
	double left = c->v.expires ? (double)c->v.expires - now : 1e18;
	/* no fetch more often than this while the current ones still hold */
	double gap = (c->advisory - c->mandatory) / 5;
	int recent = dp_now() - c->last_try < gap;
	if (c->failed) {
		rc = c->err.code;
		if (e)
			*e = c->err;
	} else if (!c->fetched || left <= 0 || (left < c->advisory && !(recent && left > 0))) {
		s3_cval v = {0};
		dp_err e2 = {0};
		c->last_try = dp_now();
		rc = fetch(s, c, &v, &e2);
		char when[32] = "never";
		if (rc == DP_OK) {
			s3_cval_free(&c->v);
			c->v = v;
			c->gen++;
			if (v.expires)
				fmt_time(v.expires, when, sizeof when);
			s3_log(s, "credentials=%s key_id=%s expires=%s%s", s->cred_method, v.key_id,
			       when, c->fetched ? " refreshed=1" : "");
			c->fetched = 1;
		} else if (!c->fetched) {
			c->failed = 1; /* for good: no second wait on a provider that is not there */
			fetch_error(c, &e2, &c->err);
			if (e)
				*e = c->err;
		} else if (left > c->mandatory && rc != DP_ENOMEM) {
			s3_log(s, "credentials=%s refresh_failed=\"%s\" valid_s=%.0f", s->cred_method,
			       e2.msg, left);
			rc = DP_OK;
		} else if (e) {
			fetch_error(c, &e2, e);
			size_t l = strlen(e->msg);
			if (left > 0)
				snprintf(e->msg + l, sizeof e->msg - l,
					 " (the current ones expire in %.0f s)", left);
			else
				snprintf(e->msg + l, sizeof e->msg - l, " (the current ones expired)");
		}
	}
	if (rc == DP_OK && copy_out(s, c) < 0)
		rc = dp_seterr(e, DP_ENOMEM, "out of memory");
	pthread_mutex_unlock(&c->mu);
	return rc;
}

int dp_s3_credentials(dp_s3 *s, dp_err *e) { return s3_ready(s, e); }

void s3_creds_share(dp_s3 *dst, dp_s3 *src)
{
	if (!src->cr || dst->cr == src->cr)
		return;
	s3_creds_release(dst);
	pthread_mutex_lock(&src->cr->mu);
	src->cr->refs++;
	pthread_mutex_unlock(&src->cr->mu);
	dst->cr = src->cr;
	dst->cred_gen = 0;
	dst->cred_failed = src->cred_failed;
	dst->cred_err = src->cred_err;
	memcpy(dst->cred_source, src->cred_source, sizeof dst->cred_source);
	memcpy(dst->cred_method, src->cred_method, sizeof dst->cred_method);
}

void s3_creds_release(dp_s3 *s)
{
	s3_creds *c = s->cr;
	if (!c)
		return;
	s->cr = NULL;
	pthread_mutex_lock(&c->mu);
	int last = --c->refs == 0;
	pthread_mutex_unlock(&c->mu);
	if (!last)
		return;
	pthread_mutex_destroy(&c->mu);
	s3_cval_free(&c->v);
	free(c->url);
	free(c->role_arn);
	free(c->token_file);
	free(c->session);
	if (c->auth)
		memset(c->auth, 0, strlen(c->auth));
	free(c->auth);
	free(c->auth_file);
	free(c->process);
	free(c);
}

int64_t s3_creds_expires(const dp_s3 *s)
{
	if (!s->cr)
		return 0;
	pthread_mutex_lock(&s->cr->mu);
	int64_t x = s->cr->v.expires;
	pthread_mutex_unlock(&s->cr->mu);
	return x;
}

/* ---- The chain ------------------------------------------------------------------------ */

static s3_creds *creds_new(dp_s3 *s, int kind, const char *method, const char *source)
{
	s3_creds *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	pthread_mutex_init(&c->mu, NULL);
	c->refs = 1;
	c->kind = kind;
	c->timeout = 2;
	c->attempts = 3;
	c->advisory = 15 * 60;
	c->mandatory = 10 * 60;
	const char *w = dp_setting("DP_S3_CREDS_REFRESH"); /* tests */
	double a, m;
	if (w && sscanf(w, "%lf,%lf", &a, &m) == 2 && a >= m && m >= 0) {
		c->advisory = a;
		c->mandatory = m;
	}
	s->cr = c;
	snprintf(s->cred_method, sizeof s->cred_method, "%s", method);
	snprintf(s->cred_source, sizeof s->cred_source, "%s", source);
	return c;
}

static void no_creds(dp_s3 *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void no_creds(dp_s3 *s, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	dp_vseterr(&s->cred_err, DP_EDENIED, fmt, ap);
	va_end(ap);
	s->cred_failed = 1;
	snprintf(s->cred_source, sizeof s->cred_source, "none");
	s->cred_method[0] = 0;
}

static int set_keys(dp_s3 *s, const char *k, const char *sec, const char *tok,
		    const char *method, const char *source)
{
	if (!(s->key_id = strdup(k)) || !(s->secret = strdup(sec)) ||
	    (tok && *tok && !(s->token = strdup(tok))))
		return DP_ENOMEM;
	snprintf(s->cred_method, sizeof s->cred_method, "%s", method);
	snprintf(s->cred_source, sizeof s->cred_source, "%s", source);
	return DP_OK;
}

/* The endpoint of a service other than S3 (STS), as the SDKs find it:
 * AWS_ENDPOINT_URL_<SVC>, AWS_ENDPOINT_URL, the profile's "svc =
 * endpoint_url" block, its endpoint_url; else def. */
static const char *service_endpoint(const s3_profile *p, const char *svc, const char *def)
{
	if (is_true(dp_env("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")))
		return def;
	char name[64];
	snprintf(name, sizeof name, "AWS_ENDPOINT_URL_%s", svc);
	for (char *c = name; *c; c++)
		*c = (char)toupper((unsigned char)*c);
	const char *v = dp_env(name);
	if (!v)
		v = dp_env("AWS_ENDPOINT_URL");
	snprintf(name, sizeof name, "%s.endpoint_url", svc);
	if (!v)
		v = s3_profile_get(p, S3_IN_CONF, name);
	if (!v)
		v = s3_profile_get(p, S3_IN_CONF, "endpoint_url");
	return v ? v : def;
}

static int pick_web(dp_s3 *s, const s3_profile *p, const char *file)
{
	int env_ok = !p->by_conf;
	const char *arn = env_ok ? dp_env("AWS_ROLE_ARN") : NULL;
	if (!arn)
		arn = s3_profile_get(p, S3_IN_ANY, "role_arn");
	const char *sess = env_ok ? dp_env("AWS_ROLE_SESSION_NAME") : NULL;
	if (!sess)
		sess = s3_profile_get(p, S3_IN_ANY, "role_session_name");
	if (!arn) {
		no_creds(s, "credentials: web identity token %s: no role ARN (set AWS_ROLE_ARN, "
			    "or role_arn in the profile)", file);
		return DP_OK;
	}
	char defsess[64], defurl[128];
	snprintf(defsess, sizeof defsess, "dptools-%lld", (long long)time(NULL));
	snprintf(defurl, sizeof defurl, "https://sts.%s.amazonaws.com%s", s->region,
		 strncmp(s->region, "cn-", 3) == 0 ? ".cn" : "");
	const char *url = service_endpoint(p, "sts", defurl);
	s3_creds *c = creds_new(s, K_WEB, "assume-role-with-web-identity", "web identity token");
	if (!c || !(c->url = strdup(url)) || !(c->role_arn = strdup(arn)) ||
	    !(c->token_file = strdup(file)) || !(c->session = strdup(sess ? sess : defsess)))
		return DP_ENOMEM;
	c->timeout = s->conf.timeout;
	snprintf(c->what, sizeof c->what, "web identity token %s (STS %s)", file, url);
	return DP_OK;
}

/* Is host one a container endpoint may be on over http: a loopback
 * address (a name must resolve to loopback addresses only), ECS's
 * 169.254.170.2 or EKS's 169.254.170.23 / fd00:ec2::23? */
static int container_host_ok(const char *host)
{
	char h[256];
	size_t n = strlen(host);
	if (n >= sizeof h)
		return 0;
	if (host[0] == '[' && host[n - 1] == ']')
		snprintf(h, sizeof h, "%.*s", (int)(n - 2), host + 1);
	else
		snprintf(h, sizeof h, "%s", host);
	if (!strcmp(h, ECS_HOST) || !strcmp(h, "169.254.170.23"))
		return 1;
	struct in6_addr a6, eks;
	inet_pton(AF_INET6, "fd00:ec2::23", &eks);
	if (inet_pton(AF_INET6, h, &a6) == 1)
		return IN6_IS_ADDR_LOOPBACK(&a6) || !memcmp(&a6, &eks, sizeof a6);
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
	if (getaddrinfo(h, NULL, &hints, &res) != 0 || !res)
		return 0;
	int ok = 1;
	for (struct addrinfo *r = res; r && ok; r = r->ai_next) {
		if (r->ai_family == AF_INET)
			ok = (ntohl(((struct sockaddr_in *)r->ai_addr)->sin_addr.s_addr) >> 24) == 127;
		else if (r->ai_family == AF_INET6)
			ok = IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)r->ai_addr)->sin6_addr);
		else
			ok = 0;
	}
	freeaddrinfo(res);
	return ok;
}

static int pick_container(dp_s3 *s, const char *rel, const char *full)
{
	char *url = NULL;
	if (rel) {
		if (asprintf(&url, "http://" ECS_HOST "%s%s", rel[0] == '/' ? "" : "/", rel) < 0)
			return DP_ENOMEM;
	} else {
		CURLU *u = curl_url();
		char *scheme = NULL, *host = NULL;
		int ok = u && curl_url_set(u, CURLUPART_URL, full, 0) == CURLUE_OK &&
			 curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
			 curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK;
		int allowed = ok && (!strcmp(scheme, "https") ||
				     (!strcmp(scheme, "http") && container_host_ok(host)));
		curl_free(scheme);
		curl_free(host);
		curl_url_cleanup(u);
		if (!allowed) {
			no_creds(s, "credentials: container endpoint %s: %s", full,
				 ok ? "not https, nor http to a loopback address, 169.254.170.2 or "
				      "169.254.170.23"
				    : "not a URL");
			return DP_OK;
		}
		if (!(url = strdup(full)))
			return DP_ENOMEM;
	}
	s3_creds *c = creds_new(s, K_CONTAINER, "container-role", "container endpoint");
	if (!c) {
		free(url);
		return DP_ENOMEM;
	}
	c->url = url;
	const char *af = dp_env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
	const char *at = dp_env("AWS_CONTAINER_AUTHORIZATION_TOKEN");
	if ((af && !(c->auth_file = strdup(af))) || (!af && at && !(c->auth = strdup(at))))
		return DP_ENOMEM;
	c->timeout = 2; /* botocore's ContainerMetadataFetcher: 2 s, 3 attempts 1 s apart */
	c->attempts = 3;
	snprintf(c->what, sizeof c->what, "container endpoint %s", url);
	return DP_OK;
}

/* The environment's name, else the profile's key (botocore's config chain). */
static const char *setting(const s3_profile *p, const char *name, const char *key)
{
	const char *v = dp_env(name);
	return v ? v : s3_profile_get(p, S3_IN_ANY, key);
}

static int pick_imds(dp_s3 *s, const s3_profile *p)
{
	const char *ep = setting(p, "AWS_EC2_METADATA_SERVICE_ENDPOINT", "ec2_metadata_service_endpoint");
	const char *mode = setting(p, "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE",
				   "ec2_metadata_service_endpoint_mode");
	if (!ep)
		ep = mode && strcasecmp(mode, "ipv6") == 0 ? IMDS_URL6 : IMDS_URL;
	s3_creds *c = creds_new(s, K_IMDS, "iam-role", "instance metadata");
	if (!c || asprintf(&c->url, "%s%s", ep, ep[strlen(ep) - 1] == '/' ? "" : "/") < 0) {
		if (c)
			c->url = NULL;
		return DP_ENOMEM;
	}
	const char *t = setting(p, "AWS_METADATA_SERVICE_TIMEOUT", "metadata_service_timeout");
	const char *na = setting(p, "AWS_METADATA_SERVICE_NUM_ATTEMPTS",
				 "metadata_service_num_attempts");
	c->timeout = t && atof(t) > 0 ? atof(t) : 1;
	c->attempts = na && atoi(na) > 0 ? atoi(na) : 1;
	c->v1_disabled = is_true(setting(p, "AWS_EC2_METADATA_V1_DISABLED", "ec2_metadata_v1_disabled"));
	c->want_region = s->region_default;
	snprintf(c->what, sizeof c->what, "instance metadata %s", c->url);
	if (p->named || p->have_cred || p->have_conf)
		snprintf(c->hint, sizeof c->hint,
			 "profile '%s' has no aws_access_key_id and aws_secret_access_key", p->name);
	else
		snprintf(c->hint, sizeof c->hint,
			 "no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile "
			 "in %s, or use --no-sign-request", p->cred_path);
	return DP_OK;
}

int s3_creds_pick(dp_s3 *s, const s3_profile *p)
{
	int by_env = !p->by_conf; /* an explicit --profile passes over the environment */
	const char *ek = by_env ? dp_env("AWS_ACCESS_KEY_ID") : NULL;
	const char *es = by_env ? dp_env("AWS_SECRET_ACCESS_KEY") : NULL;
	const char *role = s3_profile_get(p, S3_IN_ANY, "role_arn");
	const char *wif = by_env ? dp_env("AWS_WEB_IDENTITY_TOKEN_FILE") : NULL;
	if (!wif)
		wif = s3_profile_get(p, S3_IN_ANY, "web_identity_token_file");
	const char *ck = s3_profile_get(p, S3_IN_CRED, "aws_access_key_id");
	const char *cs = s3_profile_get(p, S3_IN_CRED, "aws_secret_access_key");
	const char *fk = s3_profile_get(p, S3_IN_CONF, "aws_access_key_id");
	const char *fs = s3_profile_get(p, S3_IN_CONF, "aws_secret_access_key");
	const char *proc = s3_profile_get(p, S3_IN_ANY, "credential_process");
	const char *rel = dp_env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
	const char *full = dp_env("AWS_CONTAINER_CREDENTIALS_FULL_URI");
	snprintf(s->cred_source, sizeof s->cred_source, "none");
	s->cred_method[0] = 0;
	if (s->conf.no_sign) {
		s->anonymous = 1;
		snprintf(s->cred_source, sizeof s->cred_source, "none (--no-sign-request)");
	} else if (!ek != !es) {
		/* half a key pair: refused, as aws refuses it, rather than
		 * signing with the profile's (some other identity's) keys */
		no_creds(s, "partial credentials in the environment: %s is set but %s is not",
			 ek ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY",
			 ek ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID");
	} else if (ek && es) {
		return set_keys(s, ek, es, dp_env("AWS_SESSION_TOKEN"), "env", "environment");
	} else if (p->named && !p->have_cred && !p->have_conf) {
		no_creds(s, "profile '%s' not found in %s or %s", p->name, p->cred_path,
			 p->conf_path);
	} else if (role && !s3_profile_get(p, S3_IN_ANY, "web_identity_token_file")) {
		no_creds(s, "profile '%s': role_arn without web_identity_token_file (an assumed "
			    "role, with source_profile or credential_source) is not supported",
			 p->name);
	} else if (wif) {
		return pick_web(s, p, wif);
	} else if (s3_profile_get(p, S3_IN_ANY, "sso_start_url") ||
		   s3_profile_get(p, S3_IN_ANY, "sso_session")) {
		no_creds(s, "profile '%s': SSO (sso_start_url, sso_session) is not supported",
			 p->name);
	} else if (ck && cs) {
		return set_keys(s, ck, cs, s3_profile_get(p, S3_IN_CRED, "aws_session_token"),
				"shared-credentials-file", "shared credentials file");
	} else if (proc) {
		s3_creds *c = creds_new(s, K_PROCESS, "custom-process", "credential_process");
		if (!c || !(c->process = strdup(proc)))
			return DP_ENOMEM;
		char **argv = s3_shell_split(proc);
		snprintf(c->what, sizeof c->what, "credential_process %s",
			 argv ? argv[0] : "(unreadable)");
		s3_argv_free(argv);
	} else if (fk && fs) {
		return set_keys(s, fk, fs, s3_profile_get(p, S3_IN_CONF, "aws_session_token"),
				"config-file", "config file");
	} else if (rel || full) {
		return pick_container(s, rel, full);
	} else if (!is_true(dp_env("AWS_EC2_METADATA_DISABLED"))) {
		return pick_imds(s, p);
	} else if (p->named || p->have_cred || p->have_conf) {
		no_creds(s, "profile '%s' has no aws_access_key_id and aws_secret_access_key",
			 p->name);
	} else {
		no_creds(s, "no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
			    "a profile in %s, or use --no-sign-request", p->cred_path);
	}
	return DP_OK;
}
