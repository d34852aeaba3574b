/*
 * s3xml.c - libFuzzer target: the readers of S3's XML answers (lib/s3/s3xml.c),
 * which see whatever a server, or anything between it and us, sends.
 *
 * The input is given to the event parser (which S3 listings, bucket lists,
 * multipart results go through), to the error reader, and, as text, to the
 * URL decoder and the time parser.  Checks beyond "no crash, no leak, no
 * hang": every event path is well formed ("A/B/C", no empty step) and
 * starts and ends nest; an error document's code and message are
 * NUL-terminated within their buffers and free of control characters; URL
 * decoding never lengthens a string.
 */
#define _GNU_SOURCE
#include "s3/s3_int.h"
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct walk {
	int depth;
	size_t events;
} walk;

static void on_event(void *ctx, const char *path, const char *text, size_t len)
{
	walk *w = ctx;
	size_t n = strlen(path);
	CHECK(n > 0, "empty path");
	CHECK(path[0] != '/' && path[n - 1] != '/' && !strstr(path, "//"), "malformed path '%s'", path);
	int steps = 1;
	for (const char *p = path; *p; p++)
		steps += *p == '/';
	if (!text) {
		w->depth++;
		CHECK(steps == w->depth, "start at depth %d with %d steps", w->depth, steps);
	} else {
		CHECK(steps == w->depth, "end at depth %d with %d steps", w->depth, steps);
		CHECK(strlen(text) <= len, "text length");
		w->depth--;
	}
	w->events++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	walk w = {0};
	dp_err e;
	int rc = s3x_parse((const char *)data, size, on_event, &w, &e);
	if (rc == DP_OK)
		CHECK(w.depth == 0, "unbalanced document accepted");
	else
		CHECK(e.msg[0] && (rc == DP_EDATA || rc == DP_ENOMEM || rc == DP_ELIMIT), "status %d", rc);

	char code[64], msg[512];
	memset(code, 'x', sizeof code);
	memset(msg, 'x', sizeof msg);
	if (s3x_error((const char *)data, size, code, sizeof code, msg, sizeof msg)) {
		CHECK(memchr(code, 0, sizeof code) && code[0], "code");
		CHECK(memchr(msg, 0, sizeof msg), "message");
		for (const char *p = msg; *p; p++)
			CHECK((unsigned char)*p >= 32, "control character in a message");
	}

	char *s = malloc(size + 1);
	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = 0;
	size_t before = strlen(s);
	s3_url_decode(s);
	CHECK(strlen(s) <= before, "decoding lengthened a key");
	memcpy(s, data, size);
	s[size] = 0;
	(void)s3_parse_time(s);
	free(s);
	return 0;
}
