/*
 * sigv4.h - AWS Signature Version 4, written out from the specification
 * (the canonical request, the string to sign, the derived signing key), for
 * the Authorization header and for presigned URLs.
 *
 * Pure functions: no I/O, no clock, no global state; the caller gives the
 * time.  Hashing and HMAC come from OpenSSL's libcrypto.  Checked against
 * AWS's published S3 examples and the SigV4 test suite (tests/unit/sigv4.c).
 *
 * The caller encodes the path (s3_uri_encode with keep_slash, which is what
 * S3 expects: no normalisation, no double encoding) and sends exactly the
 * path and query it signed.
 */
#ifndef DP_SIGV4_H
#define DP_SIGV4_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Hex SHA-256 of the empty string: the payload hash of a request without
 * a body. */
#define DP_SHA256_EMPTY "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

typedef struct s3_sigv4_kv {
	const char *name;
	const char *value; /* "" for a query parameter without a value */
} s3_sigv4_kv;

typedef struct s3_sigv4_req {
	const char *method;       /* "GET", "PUT", ... */
	const char *path;         /* canonical URI, already URI-encoded: "/bucket/a%20b" */
	const char *query;        /* canonical query string (s3_sigv4_query), "" for none */
	const s3_sigv4_kv *hdrs;  /* the headers to sign, any case, in any order; a name */
	size_t nhdrs;             /* given twice has its values joined with ',' */
	const char *payload_hash; /* hex SHA-256 of the body, or "UNSIGNED-PAYLOAD" */
	const char *amz_date;     /* "20130524T000000Z" (the x-amz-date header's value) */
	const char *region;       /* "us-east-1" */
	const char *service;      /* "s3" */
	const char *key_id;       /* access key id */
	const char *secret;       /* secret access key */
} s3_sigv4_req;

/* hex = hex SHA-256 of data (65 bytes with the NUL). */
void s3_sha256_hex(const void *data, size_t len, char hex[65]);

/* The AWS date forms of t: "YYYYMMDDTHHMMSSZ" (17 bytes with the NUL). */
void s3_amz_date(time_t t, char out[17]);

/* URI-encode s[0..len) the SigV4 way: every byte but A-Z a-z 0-9 - . _ ~
 * becomes %XX (upper-case hex); '/' is kept when keep_slash.  Returns a
 * malloc'd string or NULL when out of memory. */
char *s3_uri_encode(const char *s, size_t len, int keep_slash);

/* The canonical query string of n parameters (raw, unencoded names and
 * values): each encoded, sorted by name then value, joined with '&'.  A
 * parameter without a value reads "name=".  malloc'd; NULL on ENOMEM. */
char *s3_sigv4_query(const s3_sigv4_kv *params, size_t n);

/* The canonical request, the string to sign and the signature (64 hex
 * digits) of r.  canonical and sts may be NULL; when not, they receive
 * malloc'd copies (for tests and debugging).  Returns 0, or -1 when out of
 * memory. */
int s3_sigv4_sign(const s3_sigv4_req *r, char sig[65], char **canonical, char **sts);

/* The Authorization header's value for r (malloc'd; NULL on ENOMEM):
 * "AWS4-HMAC-SHA256 Credential=KEY/DATE/REGION/SERVICE/aws4_request,
 * SignedHeaders=a;b, Signature=..." */
char *s3_sigv4_authorization(const s3_sigv4_req *r);

/* A presigned query string: the n extra parameters plus X-Amz-Algorithm,
 * -Credential, -Date, -Expires, -SignedHeaders (host) and, when token is
 * not NULL, -Security-Token, canonicalised and signed with an unsigned
 * payload; X-Amz-Signature last.  r->query, hdrs and payload_hash are
 * ignored; host is the Host header's value.  malloc'd; NULL on ENOMEM. */
char *s3_sigv4_presign(const s3_sigv4_req *r, const char *host, const char *token,
		       long expires, const s3_sigv4_kv *params, size_t n);

#endif
