/*
 * creds.c - libFuzzer target: the readers of what credential providers
 * answer (lib/s3/creds.c), bytes from a server or a program: STS's
 * AssumeRoleWithWebIdentity XML, the JSON of credential_process, the
 * container endpoint and the instance metadata service, and the splitting
 * of a credential_process command line.
 *
 * The first byte picks the reader (0: STS, 1: process, 2: container,
 * 3: IMDS, else the command splitter); the rest is its input.  Checks beyond
 * "no crash, no leak, no hang": credentials accepted have a non-empty key
 * id and secret and a known expiry (0 or a time parsed); a refusal has a
 * message, free of control characters; split words are no longer than
 * the line.
 */
#define _GNU_SOURCE
#include "s3/s3_int.h"
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	int which = data[0] % 5;
	const char *doc = (const char *)data + 1;
	size_t len = size - 1;
	if (which == 4) {
		char *s = malloc(len + 1);
		if (!s)
			return 0;
		memcpy(s, doc, len);
		s[len] = 0;
		char **argv = s3_shell_split(s);
		for (char **a = argv; a && *a; a++)
			CHECK(strlen(*a) <= strlen(s), "a word longer than the line");
		s3_argv_free(argv);
		free(s);
		return 0;
	}
	s3_cval v;
	dp_err e = {0};
	int rc = which == 0 ? s3_creds_parse_sts(doc, len, &v, &e)
			    : s3_creds_parse_json(doc, len, which == 1   ? S3_CJ_PROCESS
							    : which == 2 ? S3_CJ_CONTAINER
									 : S3_CJ_IMDS,
						  &v, &e);
	if (rc == DP_OK) {
		CHECK(v.key_id && *v.key_id && v.secret && *v.secret, "accepted without keys");
		CHECK(v.expires >= 0, "a negative expiry");
		s3_cval_free(&v);
	} else {
		CHECK(e.msg[0], "a refusal without a message");
		CHECK(!v.key_id && !v.secret && !v.token, "a refusal that kept credentials");
		if (which == 0)
			for (const char *p = e.msg; *p; p++)
				CHECK((unsigned char)*p >= 32, "a control character in a message");
	}
	return 0;
}
