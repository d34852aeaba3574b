/* md5.c - MD5 against RFC 1321's test suite, and every implementation the
 * CPU has (scalar, AVX2, AVX-512) against OpenSSL's MD5 on random messages
 * fed in random pieces, many at a time, so that lanes run out, take new
 * jobs, sit idle, and the scalar code takes over; then the S3 ETag
 * helpers.  With an argument ("bench"), hashing speed of each
 * implementation instead. */
#include "dp.h"
#include "s3/md5.h"
#include "tap.h"

#include <openssl/evp.h>
#include <stdlib.h>

static void hex(const unsigned char *d, char *out)
{
	for (int i = 0; i < 16; i++)
		sprintf(out + 2 * i, "%02x", d[i]);
}

static void ossl_md5(const void *p, size_t n, unsigned char out[16])
{
	unsigned int len = 16;
	EVP_Digest(p, n, out, &len, EVP_md5(), NULL);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) { return tap_xorshift(&rng); }

/* nmsg messages of random lengths up to maxlen, fed by update_many in
 * rounds of random pieces; returns how many digests differ from OpenSSL's. */
static int random_round(const unsigned char *data, size_t datalen, int nmsg, size_t maxlen)
{
	s3_md5 *m = calloc((size_t)nmsg, sizeof *m);
	size_t *len = calloc((size_t)nmsg, sizeof *len), *off = calloc((size_t)nmsg, sizeof *off);
	const unsigned char **base = calloc((size_t)nmsg, sizeof *base);
	s3_md5_job *jobs = calloc((size_t)nmsg, sizeof *jobs);
	for (int i = 0; i < nmsg; i++) {
		s3_md5_init(&m[i]);
		len[i] = (size_t)(next() % (maxlen + 1));
		base[i] = data + next() % (datalen - maxlen); /* any alignment */
	}
	for (;;) {
		size_t nj = 0;
		for (int i = 0; i < nmsg; i++) {
			if (off[i] == len[i] || next() % 4 == 0)
				continue;
			size_t left = len[i] - off[i];
			size_t piece = next() % 3 == 0 ? left : (size_t)(next() % (left + 1));
			if (next() % 5 == 0)
				piece = piece / 64 * 64; /* whole blocks too */
			jobs[nj++] = (s3_md5_job){&m[i], base[i] + off[i], piece};
			off[i] += piece;
		}
		int left = 0;
		for (int i = 0; i < nmsg; i++)
			left += off[i] < len[i];
		if (nj)
			s3_md5_update_many(jobs, nj);
		if (!left && !nj)
			break;
	}
	int bad = 0;
	for (int i = 0; i < nmsg; i++) {
		unsigned char got[16], want[16];
		s3_md5_final(&m[i], got);
		ossl_md5(base[i], len[i], want);
		bad += memcmp(got, want, 16) != 0;
	}
	free(m);
	free(len);
	free(off);
	free(base);
	free(jobs);
	return bad;
}

static void bench(const unsigned char *data, size_t n)
{
	static const char *const impls[] = {"scalar", "avx2", "avx512"};
	for (int k = 0; k < 3; k++) {
		if (s3_md5_select(impls[k]) < 0)
			continue;
		for (int lanes = 1; lanes <= 16; lanes *= 2) {
			s3_md5 m[16];
			s3_md5_job j[16];
			size_t each = n / 16;
			double t0 = dp_now();
			int reps = 0;
			while (dp_now() - t0 < 0.3) {
				for (int i = 0; i < lanes; i++) {
					s3_md5_init(&m[i]);
					j[i] = (s3_md5_job){&m[i], data + (size_t)i * each, each};
				}
				s3_md5_update_many(j, (size_t)lanes);
				reps++;
			}
			double s = dp_now() - t0;
			printf("%-7s %2d messages at once: %6.0f MB/s\n", impls[k], lanes,
			       (double)reps * (double)lanes * (double)each / s / 1e6);
		}
	}
	unsigned char out[16];
	double t0 = dp_now();
	int reps = 0;
	while (dp_now() - t0 < 0.3) {
		ossl_md5(data, n / 16, out);
		reps++;
	}
	printf("OpenSSL  1 message:            %6.0f MB/s\n",
	       (double)reps * (double)(n / 16) / (dp_now() - t0) / 1e6);
}

/* S3 ETags: the digest in one, and the ETag of a multipart object. */
static void etags(void)
{
	unsigned char d[16];
	char h[33];
	ok(s3_md5_etag("\"0cc175b9c0f1b6a831c399e269772661\"", d), "ETag: quoted MD5");
	hex(d, h);
	is_str(h, "0cc175b9c0f1b6a831c399e269772661", "ETag: its digest");
	ok(s3_md5_etag("0CC175B9C0F1B6A831C399E269772661", d), "ETag: bare, upper case");
	hex(d, h);
	is_str(h, "0cc175b9c0f1b6a831c399e269772661", "ETag: upper case read");
	ok(!s3_md5_etag("\"0cc175b9c0f1b6a831c399e269772661-2\"", d), "ETag: multipart: no MD5");
	ok(!s3_md5_etag("\"0cc175b9c0f1b6a831c399e26977266\"", d), "ETag: 31 digits: no MD5");
	ok(!s3_md5_etag("\"0cc175b9c0f1b6a831c399e26977266g\"", d), "ETag: not hex: no MD5");
	ok(!s3_md5_etag("", d), "ETag: empty: no MD5");

	/* parts "a" and "b": MD5(MD5("a") MD5("b")) (Python's hashlib) */
	const char parts[2][80] = {"\"0cc175b9c0f1b6a831c399e269772661\"",
				   "\"92eb5ffee6ae2fec3ad71c777531578f\""};
	char out[80];
	s3_md5_multipart_etag(parts, 2, out);
	is_str(out, "\"96e024ba2074fe77e8e965ba43a704be-2\"", "multipart ETag of two parts");
	s3_md5_multipart_etag(parts, 1, out);
	is_str(out, "\"b6ff9a06b7e20bcb2858c5b8ff744aea-1\"", "multipart ETag of one part");
	const char odd[2][80] = {"\"0cc175b9c0f1b6a831c399e269772661\"", "\"x\""};
	s3_md5_multipart_etag(odd, 2, out);
	is_str(out, "", "multipart ETag: a part without an MD5 ETag gives none");
}

int main(int argc, char **argv)
{
	size_t datalen = 1 << 22;
	unsigned char *data = malloc(datalen);
	for (size_t i = 0; i < datalen; i++)
		data[i] = (unsigned char)(next() >> 32);
	if (argc > 1) {
		bench(data, datalen);
		free(data);
		return 0;
	}

	/* RFC 1321, appendix A.5 */
	static const char *const suite[][2] = {
		{"", "d41d8cd98f00b204e9800998ecf8427e"},
		{"a", "0cc175b9c0f1b6a831c399e269772661"},
		{"abc", "900150983cd24fb0d6963f7d28e17f72"},
		{"message digest", "f96b697d7cb7938d525a2f31aaf161d0"},
		{"abcdefghijklmnopqrstuvwxyz", "c3fcd3d76192e4007dfb496cca67e13b"},
		{"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
		 "d174ab98d277d9f5a5611c2c9f419d9f"},
		{"1234567890123456789012345678901234567890123456789012345678901234567890123456789"
		 "0",
		 "57edf4a22be3c955ac49da2e2107b67a"},
	};
	for (size_t i = 0; i < sizeof suite / sizeof suite[0]; i++) {
		s3_md5 m;
		unsigned char d[16];
		char h[33];
		s3_md5_init(&m);
		s3_md5_update(&m, suite[i][0], strlen(suite[i][0]));
		s3_md5_final(&m, d);
		hex(d, h);
		is_str(h, suite[i][1], "RFC 1321: MD5(\"%.20s\")", suite[i][0]);
	}
	/* byte by byte, across block boundaries */
	s3_md5 m;
	s3_md5_init(&m);
	for (size_t i = 0; i < 1000; i++)
		s3_md5_update(&m, data + i, 1);
	unsigned char got[16], want[16];
	s3_md5_final(&m, got);
	ossl_md5(data, 1000, want);
	ok(!memcmp(got, want, 16), "1000 bytes one at a time");

	static const char *const impls[] = {"scalar", "avx2", "avx512"};
	for (int k = 0; k < 3; k++) {
		if (s3_md5_select(impls[k]) < 0) {
			printf("ok %d # SKIP %s: not on this CPU\n", ++tap_n, impls[k]);
			continue;
		}
		is_str(s3_md5_impl(), impls[k], "%s selected", impls[k]);
		int bad = 0;
		/* short messages (lanes run out at once), long ones (lanes refill),
		 * one to 40 at a time (idle lanes, the scalar tail) */
		for (int r = 0; r < 60; r++)
			bad += random_round(data, datalen, 1 + (int)(next() % 40),
					    r % 3 == 0 ? 200 : r % 3 == 1 ? 5000 : 300000);
		is_int(bad, 0, "%s: 60 rounds of up to 40 random messages match OpenSSL", impls[k]);
		/* all lanes, equal lengths */
		s3_md5 mm[16];
		s3_md5_job j[16];
		for (int i = 0; i < 16; i++) {
			s3_md5_init(&mm[i]);
			j[i] = (s3_md5_job){&mm[i], data + 4096 * (size_t)i + (size_t)i, 65536};
		}
		s3_md5_update_many(j, 16);
		bad = 0;
		for (int i = 0; i < 16; i++) {
			s3_md5_final(&mm[i], got);
			ossl_md5(data + 4096 * (size_t)i + (size_t)i, 65536, want);
			bad += memcmp(got, want, 16) != 0;
		}
		is_int(bad, 0, "%s: 16 messages of 64 KiB side by side", impls[k]);
	}
	etags();
	free(data);
	return done_testing();
}
