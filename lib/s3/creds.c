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

static int is_true(const char *v) { return v && strcasecmp(v, "true") == 0; }

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
		rc = s3_creds_fetch(s, c, &v, &e2);
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
