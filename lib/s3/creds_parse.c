/*
 * creds_parse.c - what credential providers answer: the JSON of
 * credential_process, the container endpoint and IMDS, the XML of STS; and
 * the split of a credential_process command line.  Outside bytes: fuzzed
 * by tests/fuzz/creds.c.
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
		if (dp_grow(&argv, &cap, n + 2, sizeof *argv) < 0)
			goto fail;
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
