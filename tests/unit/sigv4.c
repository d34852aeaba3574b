/*
 * sigv4.c - AWS Signature Version 4 against AWS's published examples.
 *
 * Golden values, none computed here:
 *  - the S3 API Reference, "Signature Calculations for the Authorization
 *    Header: Transferring Payload in a Single Chunk": GET Object with a
 *    Range, PUT Object (a key with '$', a Date header, a storage class),
 *    GET Bucket Lifecycle (a query name without value), GET Bucket (List
 *    Objects); and "Authenticating Requests: Using Query Parameters": the
 *    presigned GET of test.txt for 86400 s.  Credentials AKIAIOSFODNN7EXAMPLE
 *    / wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY, 20130524T000000Z, us-east-1.
 *  - the AWS SigV4 test suite (aws-sig-v4-test-suite, service "service",
 *    AKIDEXAMPLE, 20150830T123600Z): the cases whose canonical URI needs no
 *    normalisation (S3 does none), with their published signatures.
 */
#define _GNU_SOURCE
#include "s3/sigv4.h"
#include "tap.h"

#include <stdlib.h>
#include <string.h>

#define S3KEY "AKIAIOSFODNN7EXAMPLE"
#define S3SECRET "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
#define SUITEKEY "AKIDEXAMPLE"
#define SUITESECRET "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"

static const char *sig_of(const char *authz)
{
	const char *p = authz ? strstr(authz, "Signature=") : NULL;
	return p ? p + 10 : "";
}

/* Signs with the S3 documentation's credentials and date. */
static char *s3_authz(const char *method, const char *path, const char *query,
		      const s3_sigv4_kv *h, size_t nh, const char *payload)
{
	s3_sigv4_req r = {
		.method = method, .path = path, .query = query, .hdrs = h, .nhdrs = nh,
		.payload_hash = payload, .amz_date = "20130524T000000Z", .region = "us-east-1",
		.service = "s3", .key_id = S3KEY, .secret = S3SECRET,
	};
	return s3_sigv4_authorization(&r);
}

static void s3_examples(void)
{
	char h[65];
	s3_sha256_hex("", 0, h);
	is_str(h, DP_SHA256_EMPTY, "SHA-256 of the empty string");

	/* GET Object, first 10 bytes */
	s3_sigv4_kv get[] = {
		{"Host", "examplebucket.s3.amazonaws.com"},
		{"Range", "bytes=0-9"},
		{"x-amz-content-sha256", DP_SHA256_EMPTY},
		{"x-amz-date", "20130524T000000Z"},
	};
	s3_sigv4_req r = {
		.method = "GET", .path = "/test.txt", .query = "", .hdrs = get, .nhdrs = 4,
		.payload_hash = DP_SHA256_EMPTY, .amz_date = "20130524T000000Z",
		.region = "us-east-1", .service = "s3", .key_id = S3KEY, .secret = S3SECRET,
	};
	char sig[65], *creq = NULL, *sts = NULL;
	ok(s3_sigv4_sign(&r, sig, &creq, &sts) == 0, "sign GET Object");
	is_str(creq,
	       "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
	       "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
	       "x-amz-date:20130524T000000Z\n\nhost;range;x-amz-content-sha256;x-amz-date\n"
	       "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
	       "GET Object: canonical request as documented");
	is_str(sts,
	       "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
	       "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972",
	       "GET Object: string to sign as documented");
	is_str(sig, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
	       "GET Object: signature");
	free(creq);
	free(sts);
	char *a = s3_sigv4_authorization(&r);
	is_str(a,
	       "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
	       "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
	       "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
	       "GET Object: Authorization header");
	free(a);

	/* PUT Object: key "test$file.text", body "Welcome to Amazon S3." */
	const char *body = "Welcome to Amazon S3.";
	s3_sha256_hex(body, strlen(body), h);
	is_str(h, "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072",
	       "PUT Object: payload hash");
	char *path = s3_uri_encode("/test$file.text", 15, 1);
	is_str(path, "/test%24file.text", "PUT Object: '$' encoded in the path");
	s3_sigv4_kv put[] = {
		{"Host", "examplebucket.s3.amazonaws.com"},
		{"Date", "Fri, 24 May 2013 00:00:00 GMT"},
		{"x-amz-date", "20130524T000000Z"},
		{"x-amz-storage-class", "REDUCED_REDUNDANCY"},
		{"x-amz-content-sha256", h},
	};
	a = s3_authz("PUT", path, "", put, 5, h);
	like(a, "SignedHeaders=date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class",
	     "PUT Object: signed headers sorted");
	is_str(sig_of(a), "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd",
	       "PUT Object: signature");
	free(a);
	free(path);

	/* GETs of the bucket with a query: "?lifecycle"; "?max-keys=2&prefix=J",
	 * given out of order */
	s3_sigv4_kv bucket[] = {
		{"Host", "examplebucket.s3.amazonaws.com"},
		{"x-amz-date", "20130524T000000Z"},
		{"x-amz-content-sha256", DP_SHA256_EMPTY},
	};
	static const struct {
		const char *name;
		s3_sigv4_kv q[2];
		size_t nq;
		const char *query, *why, *sig;
	} gets[] = {
		{"GET Bucket Lifecycle", {{"lifecycle", ""}}, 1, "lifecycle=",
		 "a name without value gets '='",
		 "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"},
		{"GET Bucket (List Objects)", {{"prefix", "J"}, {"max-keys", "2"}}, 2,
		 "max-keys=2&prefix=J", "query sorted",
		 "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"},
	};
	char *q;
	for (size_t i = 0; i < sizeof gets / sizeof gets[0]; i++) {
		q = s3_sigv4_query(gets[i].q, gets[i].nq);
		is_str(q, gets[i].query, "%s: %s", gets[i].name, gets[i].why);
		a = s3_authz("GET", "/", q, bucket, 3, DP_SHA256_EMPTY);
		is_str(sig_of(a), gets[i].sig, "%s: signature", gets[i].name);
		free(a);
		free(q);
	}

	/* Presigned GET of test.txt, 86400 s */
	r = (s3_sigv4_req){
		.method = "GET", .path = "/test.txt", .amz_date = "20130524T000000Z",
		.region = "us-east-1", .service = "s3", .key_id = S3KEY, .secret = S3SECRET,
	};
	q = s3_sigv4_presign(&r, "examplebucket.s3.amazonaws.com", NULL, 86400, NULL, 0);
	is_str(q,
	       "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2F"
	       "us-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&"
	       "X-Amz-SignedHeaders=host&X-Amz-Signature="
	       "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404",
	       "presigned GET: query and signature as documented");
	free(q);
}

typedef struct suite_case {
	const char *name, *method, *path;
	s3_sigv4_kv query[2];
	size_t nq;
	s3_sigv4_kv hdrs[4]; /* besides host and x-amz-date */
	size_t nh;
	const char *body;
	const char *signed_headers, *signature;
} suite_case;

#define UNRES "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

static const suite_case suite[] = {
	{"get-vanilla", "GET", "/", {{0}}, 0, {{0}}, 0, "", "host;x-amz-date",
	 "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"},
	{"post-vanilla", "POST", "/", {{0}}, 0, {{0}}, 0, "", "host;x-amz-date",
	 "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"},
	{"get-vanilla-query-order-key-case", "GET", "/", {{"Param2", "value2"}, {"Param1", "value1"}},
	 2, {{0}}, 0, "", "host;x-amz-date",
	 "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"},
	{"get-vanilla-empty-query-key", "GET", "/", {{"Param1", "value1"}}, 1, {{0}}, 0, "",
	 "host;x-amz-date", "a67d582fa61cc504c4bae71f336f98b97f1ea3c7a6bfe1b6e45aec72011b9aeb"},
	{"get-vanilla-query-unreserved", "GET", "/", {{UNRES, UNRES}}, 1, {{0}}, 0, "",
	 "host;x-amz-date", "9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197"},
	{"get-vanilla-utf8-query", "GET", "/", {{"\xe1\x88\xb4", "bar"}}, 1, {{0}}, 0, "",
	 "host;x-amz-date", "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04"},
	{"get-unreserved", "GET", "/" UNRES, {{0}}, 0, {{0}}, 0, "", "host;x-amz-date",
	 "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f"},
	{"get-utf8", "GET", "/\xe1\x88\xb4", {{0}}, 0, {{0}}, 0, "", "host;x-amz-date",
	 "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85"},
	{"get-header-key-duplicate", "GET", "/", {{0}}, 0,
	 {{"My-Header1", "value2"}, {"My-Header1", "value2"}, {"My-Header1", "value1"}}, 3, "",
	 "host;my-header1;x-amz-date",
	 "c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea"},
	{"get-header-value-order", "GET", "/", {{0}}, 0,
	 {{"My-Header1", "value4"}, {"My-Header1", "value1"}, {"My-Header1", "value3"},
	  {"My-Header1", "value2"}},
	 4, "", "host;my-header1;x-amz-date",
	 "08c7e5a9acfcfeb3ab6b2185e75ce8b1deb5e634ec47601a50643f830c755c01"},
	{"get-header-value-trim", "GET", "/", {{0}}, 0,
	 {{"My-Header1", " value1"}, {"My-Header2", " \"a   b   c\""}}, 2, "",
	 "host;my-header1;my-header2;x-amz-date",
	 "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736"},
	{"post-header-key-sort", "POST", "/", {{0}}, 0, {{"My-Header1", "value1"}}, 1, "",
	 "host;my-header1;x-amz-date",
	 "c5410059b04c1ee005303aed430f6e6645f61f4dc9e1461ec8f8916fdf18852c"},
	{"post-header-value-case", "POST", "/", {{0}}, 0, {{"My-Header1", "VALUE1"}}, 1, "",
	 "host;my-header1;x-amz-date",
	 "cdbc9802e29d2942e5e10b5bccfdd67c5f22c7c4e8ae67b53629efa58b974b7d"},
	{"post-vanilla-query", "POST", "/", {{"Param1", "value1"}}, 1, {{0}}, 0, "",
	 "host;x-amz-date", "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11"},
	{"post-vanilla-query-nonunreserved", "POST", "/",
	 {{"@#$%^", ""}, {"+", "/,?><`\";:\\|][{}"}}, 2, {{0}}, 0, "", "host;x-amz-date",
	 "66c82657c86e26fb25238d0e69f011edc4c6df5ae71119d7cb98ed9b87393c1e"},
	{"post-x-www-form-urlencoded", "POST", "/", {{0}}, 0,
	 {{"Content-Type", "application/x-www-form-urlencoded"}}, 1, "Param1=value1",
	 "content-type;host;x-amz-date",
	 "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a"},
	{"post-x-www-form-urlencoded-parameters", "POST", "/", {{0}}, 0,
	 {{"Content-Type", "application/x-www-form-urlencoded; charset=utf8"}}, 1, "Param1=value1",
	 "content-type;host;x-amz-date",
	 "1a72ec8f64bd914b0e42e42607c7fbce7fb2c7465f63e3092b3b0d39fa77a6fe"},
	{"post-sts-header-before", "POST", "/", {{0}}, 0,
	 {{"X-Amz-Security-Token",
	   "AQoDYXdzEPT//////////wEXAMPLEtc764bNrC9SAPBSM22wDOk4x4HIZ8j4FZTwdQWLWsKWHGBuFqwAeMicRXmxfpS"
	   "PfIeoIYRqTflfKD8YUuwthAx7mSEI/qkPpKPi/kMcGdQrmGdeehM4IC1NtBmUpp2wUE8phUZampKsburEDy0KPkyQ"
	   "DYwT7WZ0wq5VSXDvp75YU9HFvlRd8Tx6q6fE8YQcHNVXAkiY9q6d+xo0rKwT38xVqr7ZD0u0iPPkUL64lIZbqBAz+"
	   "scqKmlzm8FDrypNC9Yjc8fPOLn9FX9KSYvKTr4rvx3iSIlTJabIQwj2ICCR/oLxBA=="}},
	 1, "", "host;x-amz-date;x-amz-security-token",
	 "85d96828115b5dc0cfc3bd16ad9e210dd772bbebba041836c64533a82be05ead"},
};

static void suite_cases(void)
{
	for (size_t i = 0; i < sizeof suite / sizeof suite[0]; i++) {
		const suite_case *c = &suite[i];
		s3_sigv4_kv h[8];
		size_t nh = 0;
		h[nh++] = (s3_sigv4_kv){"Host", "example.amazonaws.com"};
		h[nh++] = (s3_sigv4_kv){"X-Amz-Date", "20150830T123600Z"};
		for (size_t j = 0; j < c->nh; j++)
			h[nh++] = c->hdrs[j];
		char ph[65];
		s3_sha256_hex(c->body, strlen(c->body), ph);
		char *path = s3_uri_encode(c->path, strlen(c->path), 1);
		char *q = s3_sigv4_query(c->query, c->nq);
		s3_sigv4_req r = {
			.method = c->method, .path = path, .query = q, .hdrs = h, .nhdrs = nh,
			.payload_hash = ph, .amz_date = "20150830T123600Z", .region = "us-east-1",
			.service = "service", .key_id = SUITEKEY, .secret = SUITESECRET,
		};
		char *a = s3_sigv4_authorization(&r);
		char want[512];
		snprintf(want, sizeof want,
			 "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/"
			 "aws4_request, SignedHeaders=%s, Signature=%s",
			 c->signed_headers, c->signature);
		is_str(a, want, "suite %s", c->name);
		free(a);
		free(q);
		free(path);
	}
}

static void encoding(void)
{
	char *s = s3_uri_encode("a b/c~d+e$\xc3\xa9", 12, 1);
	is_str(s, "a%20b/c~d%2Be%24%C3%A9", "path encoding keeps '/' and unreserved");
	free(s);
	s = s3_uri_encode("a/b c", 5, 0);
	is_str(s, "a%2Fb%20c", "query encoding encodes '/'");
	free(s);
	s = s3_uri_encode("", 0, 1);
	is_str(s, "", "empty string");
	free(s);
	s3_sigv4_kv p[] = {{"b", "2"}, {"a", "z"}, {"a", "y"}, {"key", "x/y z"}};
	s = s3_sigv4_query(p, 4);
	is_str(s, "a=y&a=z&b=2&key=x%2Fy%20z", "query: sorted by name then value, encoded");
	free(s);
	char d[17];
	s3_amz_date(1369353600, d);
	is_str(d, "20130524T000000Z", "amz date");
}

int main(void)
{
	s3_examples();
	suite_cases();
	encoding();
	return done_testing();
}
