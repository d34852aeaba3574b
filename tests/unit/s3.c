/*
 * s3.c - libdp's S3 client without a server: locations, ranges, shuffle
 * and shard, the XML readers, and where settings and credentials come from
 * (environment, credentials and config files, profiles).  The requests
 * themselves are tested against radosgw in tests/s3-pipe-s3.t.
 */
#define _GNU_SOURCE
#include "s3/s3_int.h"
#include "tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void locations(void)
{
	dp_loc l;
	dp_err e;
	ok(dp_loc_parse("s3://bkt/a/b c", &l, &e) == 0 && l.kind == DP_LOC_S3 &&
		   !strcmp(l.bucket, "bkt") && !strcmp(l.key, "a/b c"),
	   "s3://bkt/a/b c");
	ok(!dp_loc_is_dir(&l), "an object is no prefix");
	dp_loc_free(&l);
	ok(dp_loc_parse("s3://bkt", &l, &e) == 0 && !strcmp(l.key, "") && dp_loc_is_dir(&l),
	   "s3://bkt: the bucket's root, a prefix");
	dp_loc_free(&l);
	ok(dp_loc_parse("s3://bkt/train/", &l, &e) == 0 && dp_loc_is_dir(&l), "s3://bkt/train/: a prefix");
	dp_loc_free(&l);
	ok(dp_loc_parse("s3://", &l, &e) == 0 && !strcmp(l.bucket, ""), "s3://: no bucket");
	dp_loc_free(&l);
	is_int(dp_loc_parse("s3:///k", &l, &e), DP_EARG, "s3:///k: no bucket name");
	is_int(dp_loc_parse("s3://b b/k", &l, &e), DP_EARG, "s3://b b/k: not a bucket name");
	like(e.msg, "not a bucket name", "bad bucket: message");
	ok(dp_loc_parse("file:///tmp/x", &l, &e) == 0 && l.kind == DP_LOC_FILE &&
		   !strcmp(l.key, "/tmp/x"),
	   "file:///tmp/x");
	dp_loc_free(&l);
	ok(dp_loc_parse("file://localhost/tmp/x", &l, &e) == 0 && !strcmp(l.key, "/tmp/x"),
	   "file://localhost/tmp/x");
	dp_loc_free(&l);
	ok(dp_loc_parse("file:rel/x", &l, &e) == 0 && !strcmp(l.key, "rel/x"), "file:rel/x");
	dp_loc_free(&l);
	is_int(dp_loc_parse("file://host/x", &l, &e), DP_EARG, "file://host/x: another host");
	ok(dp_loc_parse("plain/path", &l, &e) == 0 && l.kind == DP_LOC_FILE, "a plain path");
	dp_loc_free(&l);
	is_int(dp_loc_parse("gs://b/k", &l, &e), DP_EARG, "gs://: unsupported");
	is_int(dp_loc_parse("", &l, &e), DP_EARG, "empty");
}

static void ranges(void)
{
	dp_range r;
	ok(dp_range_parse("5-9", &r) == 0 && r.first == 5 && r.last == 9 && !r.suffix, "5-9");
	ok(dp_range_parse("bytes=5-", &r) == 0 && r.first == 5 && r.last == -1, "bytes=5-");
	ok(dp_range_parse("-7", &r) == 0 && r.suffix && r.first == 7, "-7");
	is_int(dp_range_parse("9-5", &r), DP_EARG, "9-5");
	is_int(dp_range_parse("-0", &r), DP_EARG, "-0");
	is_int(dp_range_parse("5", &r), DP_EARG, "5");
	is_int(dp_range_parse("a-b", &r), DP_EARG, "a-b");
	is_int(dp_range_parse("1-2-3", &r), DP_EARG, "1-2-3");
	is_int(dp_range_parse("-", &r), DP_EARG, "-");
}

static void make_list(dp_objs *l, int n)
{
	memset(l, 0, sizeof *l);
	for (int i = 0; i < n; i++) {
		char k[32];
		snprintf(k, sizeof k, "k%05d", i);
		dp_obj o = {.kind = DP_LOC_S3, .bucket = "b", .key = k};
		dp_objs_add(l, &o, NULL);
	}
}

static int key_index(const dp_obj *o) { return atoi(o->key + 1); }

static void shuffle_shard(void)
{
	dp_objs a, b;
	make_list(&a, 1000);
	make_list(&b, 1000);
	dp_objs_shuffle(&a, 42, 0);
	dp_objs_shuffle(&b, 42, 0);
	int same = 1, moved = 0;
	char seen[1000] = {0};
	for (size_t i = 0; i < a.n; i++) {
		same &= !strcmp(a.v[i].key, b.v[i].key);
		moved += key_index(&a.v[i]) != (int)i;
		seen[key_index(&a.v[i])]++;
	}
	int perm = 1;
	for (int i = 0; i < 1000; i++)
		perm &= seen[i] == 1;
	ok(same, "shuffle: the same seed and epoch give the same order");
	ok(perm, "shuffle: a permutation");
	ok(moved > 900, "shuffle: most keys move (%d of 1000)", moved);
	dp_objs_free(&b);
	make_list(&b, 1000);
	dp_objs_shuffle(&b, 42, 1);
	int diff = 0;
	for (size_t i = 0; i < a.n; i++)
		diff += strcmp(a.v[i].key, b.v[i].key) != 0;
	ok(diff > 900, "shuffle: another epoch, another order (%d differ)", diff);
	dp_objs_free(&b);
	make_list(&b, 1000);
	dp_objs_shuffle(&b, 43, 0);
	diff = 0;
	for (size_t i = 0; i < a.n; i++)
		diff += strcmp(a.v[i].key, b.v[i].key) != 0;
	ok(diff > 900, "shuffle: another seed, another order");
	dp_objs_free(&a);
	dp_objs_free(&b);

	/* shards of 10 over 7 workers: disjoint, covering, sizes 2 or 1 */
	char cover[10] = {0};
	int sizes_ok = 1;
	for (int w = 0; w < 7; w++) {
		make_list(&a, 10);
		dp_objs_shuffle(&a, 5, 2);
		dp_objs_shard(&a, w, 7);
		sizes_ok &= a.n == (w < 3 ? 2u : 1u);
		for (size_t i = 0; i < a.n; i++)
			cover[key_index(&a.v[i])]++;
		dp_objs_free(&a);
	}
	int once = 1;
	for (int i = 0; i < 10; i++)
		once &= cover[i] == 1;
	ok(once, "shard: every key goes to exactly one of 7 workers");
	ok(sizes_ok, "shard: shares differ by at most one key");
	make_list(&a, 3);
	dp_objs_shard(&a, 4, 5);
	is_int(a.n, 0, "shard: a worker beyond the keys gets none");
	dp_objs_free(&a);
}

typedef struct evlog {
	char buf[4096];
} evlog;

static void ev_cb(void *ctx, const char *path, const char *text, size_t len)
{
	evlog *l = ctx;
	size_t n = strlen(l->buf);
	snprintf(l->buf + n, sizeof l->buf - n, "%s%s%s;", text ? "" : "+", path,
		 text ? "=" : "");
	if (text) {
		n = strlen(l->buf);
		snprintf(l->buf + n - 1, sizeof l->buf - n + 1, "%.*s;", (int)len, text);
	}
}

static void xml(void)
{
	char code[64], msg[512];
	const char *err = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchKey</Code>"
			  "<Message>The specified key does not exist.</Message><Key>a&amp;b</Key>"
			  "<RequestId>x</RequestId></Error>";
	ok(s3x_error(err, strlen(err), code, sizeof code, msg, sizeof msg), "an S3 error document");
	is_str(code, "NoSuchKey", "error code");
	is_str(msg, "The specified key does not exist.", "error message");
	const char *reg = "<Error><Code>AuthorizationHeaderMalformed</Code><Message>wrong region"
			  "</Message><Region>eu-west-1</Region></Error>";
	s3x_error(reg, strlen(reg), code, sizeof code, msg, sizeof msg);
	is_str(msg, "wrong region (bucket region: eu-west-1)", "error message with the region");
	const char *ctl = "<Error><Code>X</Code><Message>a&#10;b</Message></Error>";
	s3x_error(ctl, strlen(ctl), code, sizeof code, msg, sizeof msg);
	is_str(msg, "a b", "control characters kept out of messages");
	ok(!s3x_error("<html>502</html>", 16, code, sizeof code, msg, sizeof msg),
	   "not an S3 error document");
	ok(!s3x_error("<Error><Code>", 13, code, sizeof code, msg, sizeof msg), "truncated XML");

	evlog l = {""};
	const char *doc = "<?xml version=\"1.0\"?><ListBucketResult xmlns=\"http://s3.amazonaws.com/"
			  "doc/2006-03-01/\"><Contents><Key>a%20b</Key><Size>3</Size></Contents>"
			  "</ListBucketResult>";
	is_int(s3x_parse(doc, strlen(doc), ev_cb, &l, NULL), 0, "parse a listing");
	is_str(l.buf,
	       "+ListBucketResult;+ListBucketResult/Contents;+ListBucketResult/Contents/Key;"
	       "ListBucketResult/Contents/Key=a%20b;+ListBucketResult/Contents/Size;"
	       "ListBucketResult/Contents/Size=3;ListBucketResult/Contents=;ListBucketResult=;",
	       "events: starts, then each element's own text at its end");
	dp_err e;
	is_int(s3x_parse("<a><b></a>", 10, ev_cb, &l, &e), DP_EDATA, "mismatched tags");
	like(e.msg, "malformed XML answer: line 1", "malformed: line named");
	char deep[2000] = "";
	for (int i = 0; i < 100; i++)
		strcat(deep, "<a>");
	is_int(s3x_parse(deep, strlen(deep), ev_cb, &l, &e), DP_EDATA, "nested 100 deep: refused");
	const char *bomb = "<!DOCTYPE x [<!ENTITY a \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\">"
			   "<!ENTITY b \"&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;\">"
			   "<!ENTITY c \"&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;\">"
			   "<!ENTITY d \"&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;\">]>"
			   "<x>&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;</x>";
	ok(s3x_parse(bomb, strlen(bomb), ev_cb, &l, &e) < 0, "entity expansion: refused");

	char s[] = "a%2Fb+c%zz%4";
	s3_url_decode(s);
	is_str(s, "a/b c%zz%4", "url-decoding of listed keys");
	is_int(s3_parse_time("2013-05-24T00:00:00.000Z"), 1369353600, "ISO time");
	is_int(s3_parse_time("Fri, 24 May 2013 00:00:00 GMT"), 1369353600, "HTTP time");
	is_int(s3_parse_time("yesterday"), -1, "a bad time");
	is_int(s3_parse_time("2013-05-24T00:00:00Z"), 1369353600, "ISO time without a fraction");
	is_int(s3_parse_time("2013-05-24T02:30:00+02:30"), 1369353600, "ISO time ahead of UTC");
	is_int(s3_parse_time("2013-05-23T23:00:00.5-01:00"), 1369353600, "ISO time behind UTC");
}

static void creds_parsers(void)
{
	s3_cval v;
	dp_err e;
	const char *p1 = "{\"Version\": 1, \"AccessKeyId\": \"AK\", \"SecretAccessKey\": \"S\","
			 " \"SessionToken\": \"T\", \"Expiration\": \"2013-05-24T00:00:00Z\"}";
	is_int(s3_creds_parse_json(p1, strlen(p1), S3_CJ_PROCESS, &v, &e), 0, "process JSON");
	ok(v.key_id && !strcmp(v.key_id, "AK") && !strcmp(v.secret, "S") && !strcmp(v.token, "T"),
	   "... its keys and token");
	is_int(v.expires, 1369353600, "... its Expiration");
	s3_cval_free(&v);
	const char *p2 = "{\"Version\": 2, \"AccessKeyId\": \"AK\", \"SecretAccessKey\": \"S\"}";
	is_int(s3_creds_parse_json(p2, strlen(p2), S3_CJ_PROCESS, &v, &e), DP_EDATA, "Version 2 refused");
	like(e.msg, "Version is not 1", "... saying so");
	const char *p3 = "{\"Code\": \"Success\", \"AccessKeyId\": \"AK\", \"SecretAccessKey\": \"S\"}";
	is_int(s3_creds_parse_json(p3, strlen(p3), S3_CJ_IMDS, &v, &e), DP_EDATA,
	       "IMDS: Token and Expiration required");
	is_int(s3_creds_parse_json(p3, strlen(p3), S3_CJ_CONTAINER, &v, &e), 0,
	       "container: static keys accepted");
	is_int(v.expires, 0, "... that do not expire");
	s3_cval_free(&v);
	const char *x1 = "<AssumeRoleWithWebIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">"
			 "<AssumeRoleWithWebIdentityResult><Credentials><AccessKeyId>ASIA1</AccessKeyId>"
			 "<SecretAccessKey>sec</SecretAccessKey><SessionToken>tok</SessionToken>"
			 "<Expiration>2013-05-24T00:00:00Z</Expiration></Credentials>"
			 "</AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>";
	is_int(s3_creds_parse_sts(x1, strlen(x1), &v, &e), 0, "STS answer");
	ok(v.key_id && !strcmp(v.key_id, "ASIA1") && !strcmp(v.token, "tok") && v.expires == 1369353600,
	   "... its credentials");
	s3_cval_free(&v);
	const char *x2 = "<ErrorResponse><Error><Type>Sender</Type><Code>InvalidIdentityToken</Code>"
			 "<Message>bad\njwt</Message></Error></ErrorResponse>";
	is_int(s3_creds_parse_sts(x2, strlen(x2), &v, &e), DP_EDENIED, "STS error");
	is_str(e.msg, "InvalidIdentityToken: bad jwt", "... its code and message, one line");
	char **a = s3_shell_split("  /bin/echo 'a b' \"c \\\" d\" e\\ f ");
	ok(a && !strcmp(a[0], "/bin/echo") && !strcmp(a[1], "a b") && !strcmp(a[2], "c \" d") &&
	   !strcmp(a[3], "e f") && !a[4], "a command split as shlex.split does");
	s3_argv_free(a);
	ok(!s3_shell_split("echo 'open"), "... a dangling quote refused");
}

static char tmpdir[] = "/tmp/dps3unit.XXXXXX";

static void put_file(const char *name, const char *text)
{
	char p[256];
	snprintf(p, sizeof p, "%s/%s", tmpdir, name);
	FILE *f = fopen(p, "w");
	fputs(text, f);
	fclose(f);
}

static void clear_env(void)
{
	const char *v[] = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
			   "AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL",
			   "AWS_ENDPOINT_URL_S3", "AWS_CA_BUNDLE", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS",
			   NULL};
	for (int i = 0; v[i]; i++)
		unsetenv(v[i]);
	/* nothing fetched from a provider a test did not start */
	const char *f[] = {"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN",
			   "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
			   "AWS_CONTAINER_CREDENTIALS_FULL_URI", NULL};
	for (int i = 0; f[i]; i++)
		unsetenv(f[i]);
	setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
}

static dp_s3 *client(const dp_s3_conf *c0, dp_s3_info *info, dp_err *e)
{
	dp_s3_conf c;
	if (c0)
		c = *c0;
	else
		dp_s3_conf_init(&c);
	dp_s3 *s = dp_s3_new(&c, e);
	if (s)
		dp_s3_get_info(s, info);
	return s;
}

static void settings(void)
{
	if (!mkdtemp(tmpdir)) {
		ok(0, "mkdtemp");
		return;
	}
	char p[256];
	clear_env();
	setenv("HOME", tmpdir, 1);
	snprintf(p, sizeof p, "%s/credentials", tmpdir);
	setenv("AWS_SHARED_CREDENTIALS_FILE", p, 1);
	snprintf(p, sizeof p, "%s/config", tmpdir);
	setenv("AWS_CONFIG_FILE", p, 1);
	dp_s3_info i;
	dp_err e;

	/* nothing anywhere */
	dp_s3 *s = client(NULL, &i, &e);
	ok(s != NULL, "a client without credentials is made");
	is_str(i.cred_source, "none", "no credentials found");
	is_str(i.region, "us-east-1", "default region");
	is_str(i.endpoint, "https://s3.us-east-1.amazonaws.com", "default endpoint");
	ok(!i.path_style, "AWS: virtual-hosted");
	is_int(s3_ready(s, &e), DP_EDENIED, "a request without credentials: denied");
	like(e.msg, "no credentials", "... saying so");
	dp_s3_free(s);

	/* the environment */
	setenv("AWS_ACCESS_KEY_ID", "AKENV", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
	setenv("AWS_DEFAULT_REGION", "eu-west-3", 1);
	s = client(NULL, &i, &e);
	is_str(i.cred_source, "environment", "keys from the environment");
	is_str(i.key_id, "AKENV", "... the key id");
	is_str(i.region, "eu-west-3", "AWS_DEFAULT_REGION");
	is_str(i.endpoint, "https://s3.eu-west-3.amazonaws.com", "the region's endpoint");
	dp_s3_free(s);
	setenv("AWS_REGION", "ap-south-1", 1);
	setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000/base/", 1);
	s = client(NULL, &i, &e);
	is_str(i.region, "ap-south-1", "AWS_REGION before AWS_DEFAULT_REGION");
	is_str(i.endpoint, "http://127.0.0.1:9000/base", "AWS_ENDPOINT_URL, trailing '/' dropped");
	ok(i.path_style, "another endpoint: path-style");
	dp_s3_free(s);
	setenv("AWS_ENDPOINT_URL_S3", "https://minio.example:9443", 1);
	s = client(NULL, &i, &e);
	is_str(i.endpoint, "https://minio.example:9443", "AWS_ENDPOINT_URL_S3 first");
	dp_s3_free(s);
	setenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true", 1);
	s = client(NULL, &i, &e);
	is_str(i.endpoint, "https://s3.ap-south-1.amazonaws.com", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS");
	dp_s3_free(s);
	clear_env();

	/* files and profiles */
	put_file("credentials", "[default]\naws_access_key_id = AKDEF\naws_secret_access_key = s1\n"
				"\n# a comment\n[ci]\n  aws_access_key_id=AKCI\naws_secret_access_key= s2\n"
				"aws_session_token = tok\n");
	put_file("config", "[default]\nregion = us-west-2\n[profile ci]\nregion = eu-central-1\n"
			   "s3 =\n  addressing_style = path\n  endpoint_url = http://10.0.0.1:7480\n"
			   "[profile   cfgonly]\naws_access_key_id = AKCFG\naws_secret_access_key = s3\n"
			   "endpoint_url = http://cfg:1\n");
	s = client(NULL, &i, &e);
	is_str(i.cred_source, "shared credentials file", "default profile from the credentials file");
	is_str(i.key_id, "AKDEF", "... its key");
	is_str(i.region, "us-west-2", "... its region from the config file");
	dp_s3_free(s);
	setenv("AWS_PROFILE", "ci", 1);
	s = client(NULL, &i, &e);
	is_str(i.key_id, "AKCI", "AWS_PROFILE=ci");
	is_str(i.region, "eu-central-1", "... region from [profile ci]");
	is_str(i.endpoint, "http://10.0.0.1:7480", "... endpoint from its s3 = block");
	ok(i.path_style, "... addressing_style = path");
	ok(s->token && !strcmp(s->token, "tok"), "... session token");
	dp_s3_free(s);
	setenv("AWS_ACCESS_KEY_ID", "AKENV", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
	s = client(NULL, &i, &e);
	is_str(i.key_id, "AKENV", "environment keys before AWS_PROFILE's");
	dp_s3_free(s);
	dp_s3_conf c;
	dp_s3_conf_init(&c);
	c.profile = "cfgonly";
	s = client(&c, &i, &e);
	is_str(i.key_id, "AKCFG", "--profile before the environment; keys from the config file");
	is_str(i.cred_source, "config file", "... found in the config file");
	is_str(i.endpoint, "http://cfg:1", "... its endpoint_url");
	dp_s3_free(s);
	c.profile = "nope";
	s = client(&c, &i, &e);
	is_int(s3_ready(s, &e), DP_EDENIED, "a missing profile: denied");
	like(e.msg, "profile 'nope' not found", "... named");
	dp_s3_free(s);
	c.profile = NULL;
	c.no_sign = 1;
	s = client(&c, &i, &e);
	is_str(i.key_id, "", "--no-sign-request: no key");
	is_int(s3_ready(s, &e), 0, "--no-sign-request: requests can be made");
	dp_s3_free(s);
	c.no_sign = 0;
	c.endpoint_url = "ftp://x";
	ok(client(&c, &i, &e) == NULL && e.code == DP_EARG, "an ftp:// endpoint: refused");
	like(e.msg, "not http or https", "... saying so");
	clear_env();

	/* addressing of bucket names */
	dp_s3_conf_init(&c);
	c.no_sign = 1;
	s = client(&c, &i, &e);
	ok(s3_virtual_host(s, "my-bucket"), "AWS, my-bucket: virtual-hosted");
	ok(!s3_virtual_host(s, "my.bucket"), "AWS over https, my.bucket: path-style");
	ok(!s3_virtual_host(s, "My_Bucket"), "AWS, My_Bucket: path-style");
	dp_s3_free(s);

	snprintf(p, sizeof p, "rm -rf '%s'", tmpdir);
	ok(system(p) == 0, "scratch directory removed");
}

/* aws s3 sync's rule, case by case (tests/s3-pipe-sync.t checks it
 * against aws itself) */
static void sync_rule(void)
{
	dp_obj a = {.size = 10, .mtime = 100}, b = {.size = 10, .mtime = 100};
	ok(dp_s3_sync_needed(&a, NULL, 0, 0) && dp_s3_sync_needed(&a, NULL, 1, 0), "sync: missing: copied");
	ok(!dp_s3_sync_needed(&a, &b, 0, 0) && !dp_s3_sync_needed(&a, &b, 1, 1), "sync: same size and time: not");
	b.size = 11;
	ok(dp_s3_sync_needed(&a, &b, 0, 0) && dp_s3_sync_needed(&a, &b, 1, 0), "sync: another size: copied");
	b.size = 10, a.mtime = 101;
	ok(dp_s3_sync_needed(&a, &b, 0, 0), "sync up: the file newer than its object: uploaded");
	ok(!dp_s3_sync_needed(&a, &b, 1, 0), "sync down: the object newer, same size: not downloaded (aws)");
	ok(dp_s3_sync_needed(&a, &b, 1, 1), "... with exact timestamps: downloaded");
	a.mtime = 99;
	ok(!dp_s3_sync_needed(&a, &b, 0, 0), "sync up: the file older than its object: not");
	ok(dp_s3_sync_needed(&a, &b, 1, 0), "sync down: the local file newer than the object: downloaded");
}

int main(void)
{
	sync_rule();
	locations();
	ranges();
	shuffle_shard();
	xml();
	creds_parsers();
	settings();
	return done_testing();
}
