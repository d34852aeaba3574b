/*
 * s3xml.c - S3's XML answers (listings, errors, multipart results), read
 * with expat: a well-kept, streaming, non-validating parser in every Linux
 * distribution, rather than a hand-written one.
 *
 * s3x_parse flattens a document into (path, text) events; each caller picks
 * the paths it knows.  Limits: 64 levels, 1 MiB of text per element.
 */
#define _GNU_SOURCE
#include "s3_int.h"

#include <ctype.h>
#include <expat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- The event parser -------------------------------------------------------- */

#define MAX_DEPTH 64
#define MAX_TEXT (1 << 20)

typedef struct xp {
	XML_Parser p;
	s3x_cb cb;
	void *ctx;
	dp_buf path;
	size_t mark[MAX_DEPTH + 1]; /* path length before each level */
	int depth;
	dp_buf text; /* capped at MAX_TEXT */
	int failed; /* 1 too deep, 2 text too long, 3 out of memory */
} xp;

static const char *local_name(const char *n)
{
	/* expat without namespace processing hands over "prefix:name" */
	const char *c = strrchr(n, ':');
	return c && c[1] ? c + 1 : n;
}

static void XMLCALL on_start(void *ud, const XML_Char *name, const XML_Char **atts)
{
	xp *x = ud;
	if (x->failed)
		return;
	if (x->depth >= MAX_DEPTH) {
		x->failed = 1;
		XML_StopParser(x->p, XML_FALSE);
		return;
	}
	x->mark[x->depth++] = x->path.len;
	if (x->path.len)
		dp_buf_add(&x->path, "/", 1);
	if (dp_buf_addstr(&x->path, local_name(name)) < 0) {
		x->failed = 3;
		XML_StopParser(x->p, XML_FALSE);
		return;
	}
	dp_buf_reset(&x->text);
	x->cb(x->ctx, x->path.p, NULL, 0);
}

static void XMLCALL on_end(void *ud, const XML_Char *name)
{
	xp *x = ud;
	if (x->failed || x->depth == 0)
		return;
	x->cb(x->ctx, x->path.p, x->text.p ? x->text.p : "", x->text.len);
	x->depth--;
	x->path.len = x->mark[x->depth];
	x->path.p[x->path.len] = 0;
	dp_buf_reset(&x->text);
}

static void XMLCALL on_text(void *ud, const XML_Char *s, int len)
{
	xp *x = ud;
	if (x->failed)
		return;
	if (dp_buf_add(&x->text, s, (size_t)len) < 0) {
		x->failed = x->text.err == DP_ELIMIT ? 2 : 3;
		XML_StopParser(x->p, XML_FALSE);
	}
}

int s3x_parse(const char *doc, size_t len, s3x_cb cb, void *ctx, dp_err *e)
{
	xp x = {0};
	dp_buf_init(&x.path, 0);
	dp_buf_init(&x.text, MAX_TEXT);
	x.cb = cb;
	x.ctx = ctx;
	x.p = XML_ParserCreate("UTF-8");
	if (!x.p)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	XML_SetUserData(x.p, &x);
	XML_SetElementHandler(x.p, on_start, on_end);
	XML_SetCharacterDataHandler(x.p, on_text);
	int rc = DP_OK;
	if (len > (size_t)1 << 30) {
		rc = dp_seterr(e, DP_ELIMIT, "XML answer too large (%zu bytes)", len);
	} else if (XML_Parse(x.p, doc, (int)len, XML_TRUE) == XML_STATUS_ERROR || x.failed) {
		if (x.failed == 3)
			rc = dp_seterr(e, DP_ENOMEM, "out of memory");
		else if (x.failed == 1)
			rc = dp_seterr(e, DP_EDATA, "malformed XML answer: nested too deep");
		else if (x.failed == 2)
			rc = dp_seterr(e, DP_EDATA, "malformed XML answer: element text too long");
		else
			rc = dp_seterr(e, DP_EDATA, "malformed XML answer: line %lu: %s",
				       (unsigned long)XML_GetCurrentLineNumber(x.p),
				       XML_ErrorString(XML_GetErrorCode(x.p)));
	}
	XML_ParserFree(x.p);
	dp_buf_free(&x.path);
	dp_buf_free(&x.text);
	return rc;
}

/* ---- S3 errors ------------------------------------------------------------------ */

typedef struct errx {
	char *code, *msg;
	size_t codelen, msglen;
	int is_error;
	char region[64], endpoint[256];
} errx;

static void err_cb(void *ctx, const char *path, const char *text, size_t len)
{
	errx *x = ctx;
	if (!text) {
		if (strcmp(path, "Error") == 0)
			x->is_error = 1;
		return;
	}
	if (strcmp(path, "Error/Code") == 0)
		snprintf(x->code, x->codelen, "%s", text);
	else if (strcmp(path, "Error/Message") == 0)
		snprintf(x->msg, x->msglen, "%s", text);
	else if (strcmp(path, "Error/Region") == 0)
		snprintf(x->region, sizeof x->region, "%s", text);
	else if (strcmp(path, "Error/Endpoint") == 0)
		snprintf(x->endpoint, sizeof x->endpoint, "%s", text);
}

int s3x_error(const char *doc, size_t len, char *code, size_t codelen, char *msg, size_t msglen)
{
	errx x = {.code = code, .msg = msg, .codelen = codelen, .msglen = msglen};
	code[0] = msg[0] = 0;
	if (!doc || !len || s3x_parse(doc, len, err_cb, &x, NULL) < 0)
		return 0;
	if (x.is_error && x.region[0] && strlen(msg) + 40 < msglen)
		snprintf(msg + strlen(msg), msglen - strlen(msg), " (bucket region: %s)", x.region);
	else if (x.is_error && x.endpoint[0] && strlen(msg) + 40 < msglen)
		snprintf(msg + strlen(msg), msglen - strlen(msg), " (endpoint: %.200s)", x.endpoint);
	/* control characters from a hostile server stay out of messages */
	for (char *p = msg; *p; p++)
		if ((unsigned char)*p < 32)
			*p = ' ';
	for (char *p = code; *p; p++)
		if ((unsigned char)*p < 32)
			*p = ' ';
	return x.is_error && code[0];
}

/* ---- Small helpers ------------------------------------------------------------- */

int64_t s3_parse_time(const char *s)
{
	struct tm tm = {0};
	const char *end = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
	if (!end) {
		end = strptime(s, "%a, %d %b %Y %H:%M:%S", &tm); /* Last-Modified */
		return end ? (int64_t)timegm(&tm) : -1;
	}
	int64_t t = (int64_t)timegm(&tm);
	if (*end == '.')
		for (end++; isdigit((unsigned char)*end); end++)
			;
	if ((*end == '+' || *end == '-') && isdigit((unsigned char)end[1]) &&
	    isdigit((unsigned char)end[2]) && end[3] == ':' && isdigit((unsigned char)end[4]) &&
	    isdigit((unsigned char)end[5])) {
		/* an offset from UTC: the time is that much ahead of UTC */
		int off = ((end[1] - '0') * 10 + end[2] - '0') * 3600 +
			  ((end[4] - '0') * 10 + end[5] - '0') * 60;
		t += *end == '+' ? -off : off;
	}
	return t;
}

int s3_hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = (char)tolower((unsigned char)c);
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

int s3_url_decode(char *s)
{
	char *d = s;
	int nul = 0;
	for (; *s; s++) {
		if (*s == '%' && s3_hexval(s[1]) >= 0 && s3_hexval(s[2]) >= 0) {
			*d++ = (char)(s3_hexval(s[1]) * 16 + s3_hexval(s[2]));
			nul |= d[-1] == 0;
			s += 2;
		} else if (*s == '+') {
			*d++ = ' ';
		} else {
			*d++ = *s;
		}
	}
	*d = 0;
	return nul ? -1 : 0;
}
