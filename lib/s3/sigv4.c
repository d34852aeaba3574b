/*
 * sigv4.c - AWS Signature Version 4 (see sigv4.h).
 *
 *   CanonicalRequest = Method \n CanonicalURI \n CanonicalQuery \n
 *                      CanonicalHeaders \n SignedHeaders \n PayloadHash
 *   StringToSign     = "AWS4-HMAC-SHA256" \n AmzDate \n Scope \n hex(SHA256(CR))
 *   Scope            = Date/Region/Service/aws4_request
 *   SigningKey       = HMAC(HMAC(HMAC(HMAC("AWS4" Secret, Date), Region),
 *                      Service), "aws4_request")
 *   Signature        = hex(HMAC(SigningKey, StringToSign))
 *
 * Canonical headers: names lower-cased, values trimmed with inner runs of
 * spaces folded to one, sorted by name, one "name:value\n" each; a name
 * given twice has its values joined with ',' in the order given.
 */
#define _GNU_SOURCE
#include "sigv4.h"
#include "dp.h"

#include <ctype.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char hexd[] = "0123456789abcdef";

static void to_hex(const unsigned char *p, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hexd[p[i] >> 4];
		out[2 * i + 1] = hexd[p[i] & 15];
	}
	out[2 * n] = 0;
}

void s3_sha256_hex(const void *data, size_t len, char hex[65])
{
	unsigned char md[SHA256_DIGEST_LENGTH];
	SHA256(data, len, md);
	to_hex(md, sizeof md, hex);
}

void s3_amz_date(time_t t, char out[17])
{
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(out, 17, "%Y%m%dT%H%M%SZ", &tm);
}

static void hmac(const void *key, size_t klen, const char *msg, unsigned char out[32])
{
	unsigned int n = 32;
	HMAC(EVP_sha256(), key, (int)klen, (const unsigned char *)msg, strlen(msg), out, &n);
}

/* dp_buf's string, or NULL after a failure (the buffer is freed).  (The
 * empty add makes an empty buffer's string "": dp_buf_take leaves it
 * unterminated.) */
static char *take_str(dp_buf *b)
{
	dp_buf_add(b, "", 0);
	char *s = dp_buf_take(b);
	dp_buf_free(b);
	return s;
}

/* ---- Encoding ---------------------------------------------------------- */

static int unreserved(unsigned char c)
{
	return isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~';
}

char *s3_uri_encode(const char *s, size_t len, int keep_slash)
{
	static const char up[] = "0123456789ABCDEF";
	dp_buf b = DP_BUF_INIT;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		/* isalnum is locale-dependent: only ASCII counts. */
		if (c < 128 && (unreserved(c) || (keep_slash && c == '/'))) {
			char ch = (char)c;
			dp_buf_add(&b, &ch, 1);
		} else {
			char e[3] = {'%', up[c >> 4], up[c & 15]};
			dp_buf_add(&b, e, 3);
		}
	}
	return take_str(&b);
}

typedef struct qpair {
	char *k, *v;
} qpair;

static int qcmp(const void *a, const void *b)
{
	const qpair *x = a, *y = b;
	int c = strcmp(x->k, y->k);
	return c ? c : strcmp(x->v, y->v);
}

char *s3_sigv4_query(const s3_sigv4_kv *params, size_t n)
{
	if (n == 0)
		return strdup("");
	qpair *q = calloc(n, sizeof *q);
	if (!q)
		return NULL;
	int oom = 0;
	for (size_t i = 0; i < n; i++) {
		const char *v = params[i].value ? params[i].value : "";
		q[i].k = s3_uri_encode(params[i].name, strlen(params[i].name), 0);
		q[i].v = s3_uri_encode(v, strlen(v), 0);
		if (!q[i].k || !q[i].v)
			oom = 1;
	}
	char *out = NULL;
	if (!oom) {
		qsort(q, n, sizeof *q, qcmp);
		dp_buf b = DP_BUF_INIT;
		for (size_t i = 0; i < n; i++)
			dp_buf_printf(&b, "%s%s=%s", i ? "&" : "", q[i].k, q[i].v);
		out = take_str(&b);
	}
	for (size_t i = 0; i < n; i++) {
		free(q[i].k);
		free(q[i].v);
	}
	free(q);
	return out;
}

/* ---- Canonical headers ------------------------------------------------- */

typedef struct chdr {
	char *name;  /* lower case */
	char *value; /* trimmed, spaces folded */
	size_t order;
} chdr;

static int hcmp(const void *a, const void *b)
{
	const chdr *x = a, *y = b;
	int c = strcmp(x->name, y->name);
	if (c)
		return c;
	return x->order < y->order ? -1 : x->order > y->order;
}

static char *lower(const char *s)
{
	char *d = strdup(s);
	if (d)
		for (char *p = d; *p; p++)
			*p = (char)tolower((unsigned char)*p);
	return d;
}

static char *fold_value(const char *s)
{
	size_t n = strlen(s);
	char *d = malloc(n + 1);
	if (!d)
		return NULL;
	size_t j = 0;
	int space = 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
			space = 1;
			continue;
		}
		if (space && j > 0)
			d[j++] = ' ';
		space = 0;
		d[j++] = c;
	}
	d[j] = 0;
	return d;
}

/* Appends the canonical headers block to ch and the signed header list to
 * sh.  Returns -1 on ENOMEM. */
static int canon_headers(const s3_sigv4_kv *h, size_t n, dp_buf *ch, dp_buf *sh)
{
	chdr *v = calloc(n ? n : 1, sizeof *v);
	if (!v)
		return -1;
	int oom = 0;
	for (size_t i = 0; i < n; i++) {
		v[i].name = lower(h[i].name);
		v[i].value = fold_value(h[i].value ? h[i].value : "");
		v[i].order = i;
		if (!v[i].name || !v[i].value)
			oom = 1;
	}
	if (!oom) {
		qsort(v, n, sizeof *v, hcmp);
		for (size_t i = 0; i < n; i++) {
			if (i > 0 && strcmp(v[i].name, v[i - 1].name) == 0) {
				/* the same name again: ",value" on the same line */
				if (ch->len)
					ch->len--; /* drop the '\n' */
				dp_buf_printf(ch, ",%s\n", v[i].value);
				continue;
			}
			dp_buf_printf(ch, "%s:%s\n", v[i].name, v[i].value);
			dp_buf_printf(sh, "%s%s", sh->len ? ";" : "", v[i].name);
		}
	}
	for (size_t i = 0; i < n; i++) {
		free(v[i].name);
		free(v[i].value);
	}
	free(v);
	return oom || ch->err || sh->err ? -1 : 0;
}

/* ---- Signing ----------------------------------------------------------- */

static int signing_key(const s3_sigv4_req *r, unsigned char key[32])
{
	char date[9];
	memcpy(date, r->amz_date, 8);
	date[8] = 0;
	size_t sl = strlen(r->secret);
	char *k = malloc(sl + 5);
	unsigned char a[32], b[32];
	if (!k)
		return -1;
	memcpy(k, "AWS4", 4);
	memcpy(k + 4, r->secret, sl + 1);
	hmac(k, sl + 4, date, a);
	OPENSSL_cleanse(k, sl + 4);
	free(k);
	hmac(a, 32, r->region, b);
	hmac(b, 32, r->service, a);
	hmac(a, 32, "aws4_request", key);
	OPENSSL_cleanse(a, sizeof a);
	OPENSSL_cleanse(b, sizeof b);
	return 0;
}

/* Builds the canonical request; signed-header list into *signed_hdrs. */
static char *canonical_request(const s3_sigv4_req *r, char **signed_hdrs)
{
	dp_buf cr = DP_BUF_INIT, ch = DP_BUF_INIT, sh = DP_BUF_INIT;
	if (canon_headers(r->hdrs, r->nhdrs, &ch, &sh) < 0) {
		dp_buf_free(&ch);
		dp_buf_free(&sh);
		return NULL;
	}
	dp_buf_printf(&cr, "%s\n%s\n%s\n%s\n%s\n%s", r->method,
		      r->path && *r->path ? r->path : "/", r->query ? r->query : "",
		      ch.p ? ch.p : "", sh.p ? sh.p : "",
		      r->payload_hash ? r->payload_hash : DP_SHA256_EMPTY);
	dp_buf_free(&ch);
	*signed_hdrs = take_str(&sh);
	char *out = take_str(&cr);
	if (!out || !*signed_hdrs) {
		free(out);
		free(*signed_hdrs);
		*signed_hdrs = NULL;
		return NULL;
	}
	return out;
}

static char *string_to_sign(const s3_sigv4_req *r, const char *creq)
{
	char h[65];
	s3_sha256_hex(creq, strlen(creq), h);
	char *s = NULL;
	if (asprintf(&s, "AWS4-HMAC-SHA256\n%s\n%.8s/%s/%s/aws4_request\n%s", r->amz_date,
		     r->amz_date, r->region, r->service, h) < 0)
		return NULL;
	return s;
}

static int sign_with(const s3_sigv4_req *r, char sig[65], char **canonical, char **sts,
		     char **signed_hdrs)
{
	char *sh = NULL;
	char *creq = canonical_request(r, &sh);
	if (!creq)
		return -1;
	char *s = string_to_sign(r, creq);
	if (!s) {
		free(creq);
		free(sh);
		return -1;
	}
	unsigned char key[32], mac[32];
	if (signing_key(r, key) < 0) {
		free(creq);
		free(s);
		free(sh);
		return -1;
	}
	hmac(key, 32, s, mac);
	OPENSSL_cleanse(key, sizeof key);
	to_hex(mac, 32, sig);
	if (canonical)
		*canonical = creq;
	else
		free(creq);
	if (sts)
		*sts = s;
	else
		free(s);
	if (signed_hdrs)
		*signed_hdrs = sh;
	else
		free(sh);
	return 0;
}

int s3_sigv4_sign(const s3_sigv4_req *r, char sig[65], char **canonical, char **sts)
{
	return sign_with(r, sig, canonical, sts, NULL);
}

char *s3_sigv4_authorization(const s3_sigv4_req *r)
{
	char sig[65], *sh = NULL, *out = NULL;
	if (sign_with(r, sig, NULL, NULL, &sh) < 0)
		return NULL;
	if (asprintf(&out,
		     "AWS4-HMAC-SHA256 Credential=%s/%.8s/%s/%s/aws4_request, SignedHeaders=%s, "
		     "Signature=%s",
		     r->key_id, r->amz_date, r->region, r->service, sh, sig) < 0)
		out = NULL;
	free(sh);
	return out;
}

char *s3_sigv4_presign(const s3_sigv4_req *r, const char *host, const char *token,
		       long expires, const s3_sigv4_kv *params, size_t n)
{
	char *cred = NULL, exp[32];
	if (asprintf(&cred, "%s/%.8s/%s/%s/aws4_request", r->key_id, r->amz_date, r->region,
		     r->service) < 0)
		return NULL;
	snprintf(exp, sizeof exp, "%ld", expires);
	s3_sigv4_kv *all = calloc(n + 6, sizeof *all);
	if (!all) {
		free(cred);
		return NULL;
	}
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		all[k++] = params[i];
	all[k++] = (s3_sigv4_kv){"X-Amz-Algorithm", "AWS4-HMAC-SHA256"};
	all[k++] = (s3_sigv4_kv){"X-Amz-Credential", cred};
	all[k++] = (s3_sigv4_kv){"X-Amz-Date", r->amz_date};
	all[k++] = (s3_sigv4_kv){"X-Amz-Expires", exp};
	all[k++] = (s3_sigv4_kv){"X-Amz-SignedHeaders", "host"};
	if (token)
		all[k++] = (s3_sigv4_kv){"X-Amz-Security-Token", token};
	char *q = s3_sigv4_query(all, k);
	free(all);
	free(cred);
	if (!q)
		return NULL;
	s3_sigv4_kv hosthdr = {"host", host};
	s3_sigv4_req pr = *r;
	pr.query = q;
	pr.hdrs = &hosthdr;
	pr.nhdrs = 1;
	pr.payload_hash = "UNSIGNED-PAYLOAD";
	char sig[65];
	char *out = NULL;
	if (s3_sigv4_sign(&pr, sig, NULL, NULL) == 0 &&
	    asprintf(&out, "%s&X-Amz-Signature=%s", q, sig) < 0)
		out = NULL;
	free(q);
	return out;
}
