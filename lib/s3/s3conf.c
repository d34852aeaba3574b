/*
 * s3conf.c - the S3 client's settings, found the way the AWS CLI finds them.
 *
 * Credentials: the chain of creds.c (s3-pipe(1) CREDENTIALS), over the
 * profile read here: AWS_PROFILE, else "default", in
 * AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials), then AWS_CONFIG_FILE
 * (~/.aws/config, "[profile NAME]").
 * Region: conf, AWS_REGION, AWS_DEFAULT_REGION, the profile's region, else
 * us-east-1 (or, with credentials from the instance metadata service, the
 * instance's region: creds.c).
 * Endpoint: conf, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's
 * "s3 = endpoint_url" or endpoint_url (all but conf ignored when
 * AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true), else https://s3.REGION.amazonaws.com.
 * Addressing: conf, the profile's "s3 = addressing_style", else auto.
 */
#define _GNU_SOURCE
#include "s3_int.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef s3_ini ini;

static void ini_free(ini *s)
{
	for (size_t i = 0; i < s->n; i++) {
		free(s->k[i]);
		if (s->v[i])
			memset(s->v[i], 0, strlen(s->v[i])); /* may be a secret */
		free(s->v[i]);
	}
	free(s->k);
	free(s->v);
	memset(s, 0, sizeof *s);
}

static const char *ini_get(const ini *s, const char *key)
{
	for (size_t i = s->n; i-- > 0;)
		if (strcmp(s->k[i], key) == 0)
			return s->v[i];
	return NULL;
}

static char *trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	char *e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = 0;
	return s;
}

static int ini_put(ini *s, const char *k, const char *v)
{
	char **nk = realloc(s->k, (s->n + 1) * sizeof *nk);
	if (!nk)
		return -1;
	s->k = nk;
	char **nv = realloc(s->v, (s->n + 1) * sizeof *nv);
	if (!nv)
		return -1;
	s->v = nv;
	s->k[s->n] = strdup(k);
	s->v[s->n] = strdup(v);
	if (!s->k[s->n] || !s->v[s->n]) {
		free(s->k[s->n]);
		free(s->v[s->n]);
		return -1;
	}
	s->n++;
	return 0;
}

/* Read the section named `want` (the text between the brackets, with inner
 * spaces folded to one) of path into out.  Returns 1 when found, 0 when the
 * file or section is missing, DP_ENOMEM. */
static int ini_read(const char *path, const char *want, ini *out)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	char *line = NULL;
	size_t cap = 0;
	int in = 0, found = 0, rc = 0;
	char parent[128] = "";
	while (getline(&line, &cap, f) >= 0) {
		int indented = line[0] == ' ' || line[0] == '\t';
		char *t = trim(line);
		if (!*t || *t == '#' || *t == ';')
			continue;
		if (*t == '[') {
			char *end = strchr(t, ']');
			if (!end)
				continue;
			*end = 0;
			/* fold "profile   name" to "profile name" */
			char name[256];
			size_t j = 0;
			int sp = 0;
			for (char *p = trim(t + 1); *p && j < sizeof name - 1; p++) {
				if (isspace((unsigned char)*p)) {
					sp = 1;
					continue;
				}
				if (sp && j)
					name[j++] = ' ';
				sp = 0;
				name[j++] = *p;
			}
			name[j] = 0;
			in = strcmp(name, want) == 0;
			if (in)
				found = 1;
			parent[0] = 0;
			continue;
		}
		if (!in)
			continue;
		/* as botocore reads them (Python's configparser, then its own
		 * nested blocks): "key = value" or "key : value", whichever
		 * sign comes first, option names in any case; in a nested block
		 * ("s3 =" then indented lines) only '=' and the names as
		 * written */
		int nested = indented && parent[0];
		char *eq = strchr(t, '=');
		char *colon = nested ? NULL : strchr(t, ':');
		if (colon && (!eq || colon < eq))
			eq = colon;
		if (!eq)
			continue;
		*eq = 0;
		char *k = trim(t), *v = trim(eq + 1);
		if (!nested)
			for (char *c = k; *c; c++)
				*c = (char)tolower((unsigned char)*c);
		if (nested) {
			char full[300];
			snprintf(full, sizeof full, "%s.%s", parent, k);
			if (ini_put(out, full, v) < 0)
				rc = DP_ENOMEM;
			continue;
		}
		if (!*v) { /* "s3 =" opens a nested block */
			snprintf(parent, sizeof parent, "%s", k);
			continue;
		}
		parent[0] = 0;
		if (ini_put(out, k, v) < 0)
			rc = DP_ENOMEM;
	}
	if (line) {
		memset(line, 0, cap);
		free(line);
	}
	fclose(f);
	return rc < 0 ? rc : found;
}

static char *home_file(const char *env, const char *rel)
{
	const char *p = dp_env(env), *home = dp_env("HOME");
	if (p)
		return strdup(p);
	char *out = NULL;
	if (asprintf(&out, "%s/%s", home ? home : ".", rel) < 0)
		return NULL;
	return out;
}


static int set_str(char **dst, const char *v)
{
	free(*dst);
	*dst = v ? strdup(v) : NULL;
	return v && !*dst ? -1 : 0;
}

/* Split an endpoint URL into scheme, host[:port] and base path. */
static int parse_endpoint(dp_s3 *s, const char *url, dp_err *e)
{
	const char *p = strstr(url, "://");
	if (!p)
		return dp_seterr(e, DP_EARG, "endpoint URL '%s': no scheme (http:// or https://)", url);
	size_t sl = (size_t)(p - url);
	if (!((sl == 4 && strncasecmp(url, "http", 4) == 0) ||
	      (sl == 5 && strncasecmp(url, "https", 5) == 0)))
		return dp_seterr(e, DP_EARG, "endpoint URL '%s': scheme is not http or https", url);
	p += 3;
	const char *slash = strchr(p, '/');
	size_t hl = slash ? (size_t)(slash - p) : strlen(p);
	if (hl == 0)
		return dp_seterr(e, DP_EARG, "endpoint URL '%s': no host", url);
	if (memchr(p, '@', hl) || memchr(p, '?', hl) || memchr(p, '#', hl))
		return dp_seterr(e, DP_EARG, "endpoint URL '%s': not scheme://host[:port][/path]",
				 url);
	s->scheme = strndup(url, sl);
	s->host = strndup(p, hl);
	const char *path = slash ? slash : "";
	size_t pl = strlen(path);
	while (pl > 0 && path[pl - 1] == '/')
		pl--;
	s->base_path = strndup(path, pl);
	if (!s->scheme || !s->host || !s->base_path)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	for (char *c = s->scheme; *c; c++)
		*c = (char)tolower((unsigned char)*c);
	return DP_OK;
}

typedef s3_profile profile;

const char *s3_profile_get(const s3_profile *p, int where, const char *key)
{
	const char *v = where & S3_IN_CRED ? ini_get(&p->cred, key) : NULL;
	return v ? v : where & S3_IN_CONF ? ini_get(&p->conf, key) : NULL;
}

static int profile_read(dp_s3 *s, profile *p)
{
	const dp_s3_conf *c = &s->conf;
	p->cred_path = home_file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
	p->conf_path = home_file("AWS_CONFIG_FILE", ".aws/config");
	if (!p->cred_path || !p->conf_path)
		return DP_ENOMEM;
	p->by_conf = c->profile && *c->profile;
	p->name = p->by_conf ? c->profile : dp_env("AWS_PROFILE");
	p->named = p->by_conf || p->name;
	if (!p->name)
		p->name = "default";
	if (set_str(&s->profile, p->name) < 0)
		return DP_ENOMEM;
	char csec[300];
	if (strcmp(p->name, "default") == 0)
		snprintf(csec, sizeof csec, "default");
	else
		snprintf(csec, sizeof csec, "profile %s", p->name);
	p->have_cred = ini_read(p->cred_path, p->name, &p->cred);
	p->have_conf = ini_read(p->conf_path, csec, &p->conf);
	if (p->have_cred < 0 || p->have_conf < 0)
		return DP_ENOMEM;
	if (!p->have_conf && strcmp(p->name, "default") == 0)
		p->have_conf = ini_read(p->conf_path, "profile default", &p->conf);
	return p->have_conf < 0 ? DP_ENOMEM : DP_OK;
}

static void profile_free(profile *p)
{
	ini_free(&p->cred);
	ini_free(&p->conf);
	free(p->cred_path);
	free(p->conf_path);
}

/* AWS's host for a region.  Its partitions: China's regions live under
 * amazonaws.com.cn. */
#define AWS_HOST "s3.%s.amazonaws.com%s"
#define AWS_HOST_ARGS(region) (region), strncmp((region), "cn-", 3) == 0 ? ".cn" : ""

/* AWS's endpoint for s->region. */
static int aws_endpoint(dp_s3 *s, dp_err *e)
{
	char aws[256];
	snprintf(aws, sizeof aws, "https://" AWS_HOST, AWS_HOST_ARGS(s->region));
	return parse_endpoint(s, aws, e);
}

/* The endpoint: conf, the environment, the profile, else AWS's for the
 * region. */
static int pick_endpoint(dp_s3 *s, const profile *p, dp_err *e)
{
	const dp_s3_conf *c = &s->conf;
	const char *ep = c->endpoint_url && *c->endpoint_url ? c->endpoint_url : NULL;
	const char *ign = dp_env("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS");
	int ignore = ign && strcasecmp(ign, "true") == 0;
	if (!ep && !ignore) {
		ep = dp_env("AWS_ENDPOINT_URL_S3");
		if (!ep)
			ep = dp_env("AWS_ENDPOINT_URL");
		if (!ep)
			ep = ini_get(&p->conf, "s3.endpoint_url");
		if (!ep)
			ep = ini_get(&p->conf, "endpoint_url");
	}
	if (ep) {
		s->custom_endpoint = 1;
		return parse_endpoint(s, ep, e);
	}
	return aws_endpoint(s, e);
}

/* A region name: lower-case letters, digits and '-'. */
static int region_ok(const char *region)
{
	size_t n = strlen(region);
	return n > 0 && n <= 40 && strspn(region, "abcdefghijklmnopqrstuvwxyz0123456789-") == n;
}

int s3_set_region(dp_s3 *s, const char *region)
{
	if (!region_ok(region))
		return DP_EARG;
	char *r = strdup(region);
	if (!r)
		return DP_ENOMEM;
	free(s->region);
	s->region = r;
	if (s->custom_endpoint)
		return DP_OK; /* the store's own host: only the signature's region */
	free(s->scheme);
	free(s->host);
	free(s->base_path);
	s->scheme = s->host = s->base_path = NULL;
	return aws_endpoint(s, NULL) < 0 ? DP_ENOMEM : DP_OK;
}

int s3_learn_region(dp_s3 *s, const char *bucket, const char *region)
{
	if (!region_ok(region))
		return DP_EARG;
	struct s3_breg *b = NULL;
	for (size_t i = 0; i < s->nbreg && !b; i++)
		if (!strcmp(s->breg[i].bucket, bucket))
			b = &s->breg[i];
	if (!b) {
		struct s3_breg *v = realloc(s->breg, (s->nbreg + 1) * sizeof *v);
		if (!v)
			return DP_ENOMEM;
		s->breg = v;
		b = &v[s->nbreg];
		*b = (struct s3_breg){strdup(bucket), NULL, NULL};
		if (!b->bucket)
			return DP_ENOMEM;
		s->nbreg++;
	}
	char *r = strdup(region), *h = NULL;
	if (r && !s->custom_endpoint && asprintf(&h, AWS_HOST, AWS_HOST_ARGS(region)) < 0)
		h = NULL;
	if (!r || (!s->custom_endpoint && !h)) {
		free(r);
		return DP_ENOMEM;
	}
	free(b->region);
	free(b->host);
	b->region = r;
	b->host = h; /* NULL: the store's own host, only the signature's region */
	return DP_OK;
}

void s3_where(const dp_s3 *s, const char *bucket, const char **region, const char **host)
{
	*region = s->region;
	*host = s->host;
	for (size_t i = 0; bucket && i < s->nbreg; i++)
		if (!strcmp(s->breg[i].bucket, bucket)) {
			*region = s->breg[i].region;
			if (s->breg[i].host)
				*host = s->breg[i].host;
		}
}

int s3_conf_load(dp_s3 *s, dp_err *e)
{
	const dp_s3_conf *c = &s->conf;
	profile p = {0};
	int rc = profile_read(s, &p);
	/* region */
	const char *region = c->region && *c->region ? c->region : dp_env("AWS_REGION");
	if (!region)
		region = dp_env("AWS_DEFAULT_REGION");
	if (!region)
		region = ini_get(&p.conf, "region");
	if (!region) {
		region = "us-east-1";
		s->region_default = 1;
	}
	if (rc == DP_OK && set_str(&s->region, region) < 0)
		rc = DP_ENOMEM;
	if (rc == DP_OK)
		rc = s3_creds_pick(s, &p);
	if (rc == DP_ENOMEM)
		rc = dp_seterr(e, DP_ENOMEM, "out of memory");
	else if (rc == DP_OK)
		rc = pick_endpoint(s, &p, e);
	/* addressing */
	if (s->conf.addressing == DP_S3_ADDR_AUTO) {
		const char *st = ini_get(&p.conf, "s3.addressing_style");
		if (st && strcmp(st, "path") == 0)
			s->conf.addressing = DP_S3_ADDR_PATH;
		else if (st && strcmp(st, "virtual") == 0)
			s->conf.addressing = DP_S3_ADDR_VIRTUAL;
	}
	if (rc == DP_OK && set_str(&s->ca_bundle, dp_env("AWS_CA_BUNDLE")) < 0)
		rc = dp_seterr(e, DP_ENOMEM, "out of memory");
	profile_free(&p);
	return rc;
}

int s3_ready(dp_s3 *s, dp_err *e)
{
	if (s->cred_failed) {
		if (e)
			*e = s->cred_err;
		return s->cred_err.code;
	}
	return s->cr ? s3_creds_current(s, e) : DP_OK;
}

/* A bucket name usable as a DNS label (and, over https, without dots, which
 * would break the certificate's wildcard). */
static int dns_bucket(const char *b, int https)
{
	size_t n = strlen(b);
	if (n < 3 || n > 63)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = b[i];
		if (!(islower((unsigned char)c) || isdigit((unsigned char)c) || c == '-' || c == '.'))
			return 0;
		if (c == '.' && (https || i == 0 || b[i - 1] == '.'))
			return 0;
	}
	return b[0] != '-' && b[n - 1] != '-' && b[n - 1] != '.';
}

int s3_virtual_host(const dp_s3 *s, const char *bucket)
{
	if (!bucket || !*bucket)
		return 0;
	switch (s->conf.addressing) {
	case DP_S3_ADDR_PATH:
		return 0;
	case DP_S3_ADDR_VIRTUAL:
		return 1;
	default:
		return !s->custom_endpoint && dns_bucket(bucket, strcmp(s->scheme, "https") == 0);
	}
}

void dp_s3_get_info(dp_s3 *s, dp_s3_info *i)
{
	memset(i, 0, sizeof *i);
	snprintf(i->endpoint, sizeof i->endpoint, "%s://%s%s", s->scheme, s->host, s->base_path);
	snprintf(i->region, sizeof i->region, "%s", s->region);
	snprintf(i->profile, sizeof i->profile, "%s", s->profile ? s->profile : "");
	snprintf(i->cred_source, sizeof i->cred_source, "%s", s->cred_source);
	snprintf(i->method, sizeof i->method, "%s", s->cred_method);
	snprintf(i->key_id, sizeof i->key_id, "%s", s->key_id ? s->key_id : "");
	i->expires = s3_creds_expires(s);
	i->path_style = !s3_virtual_host(s, "bucket");
}
