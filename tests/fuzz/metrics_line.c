/*
 * metrics_line.c - libFuzzer target: log lines through the line reader and
 * the metric matcher.
 *
 * The first input byte picks the matcher (bits 0-1: SageMaker-style
 * regexes, logfmt for every key, logfmt for a key list, both) and the
 * reader's maximum line length (bits 2-7: 1 to 64 bytes when small, else
 * 1 MiB); the rest is the log.  The log is read with dp_lines from a memfd
 * and every line is matched.
 *
 * Checks beyond "no crash, no leak, no hang": the reader returns exactly the
 * newline-separated segments of the input that fit in the maximum, in
 * order, and counts the others as long; every sample names a known metric
 * and its text is a number (dp_number_valid) that converts; step and epoch,
 * when set, are numbers; the fast coordinate scan of the regex path agrees
 * with the logfmt tokenizer on the same line; the log's text through
 * dp_shown (how messages quote data) holds no control character and no
 * byte that is not UTF-8.
 */
#define _GNU_SOURCE
#include "dp_lines.h"
#include "fuzz.h"
#include "dp_metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static dp_matcher *matchers[4], *coord_rx, *coord_lf;

static void setup(void)
{
	dp_err e;
	for (int i = 0; i < 4; i++)
		matchers[i] = dp_matcher_new();
	const char *defs = "[{\"Name\": \"train:loss\", \"Regex\": \"loss: ([0-9\\\\.]+)\"},"
			   "{\"Name\": \"acc\", \"Regex\": \"(?<!_)accuracy=(\\\\S+)\"},"
			   "{\"Name\": \"u\", \"Regex\": \"é=([^ ]*)\"},"
			   "{\"Name\": \"opt\", \"Regex\": \"lr=(x)?([-+.0-9eE]+)|(z)\"}]";
	if (dp_matcher_add_definitions(matchers[0], defs, strlen(defs), "defs", &e) < 0 ||
	    dp_matcher_logfmt(matchers[1], NULL, &e) < 0 ||
	    dp_matcher_logfmt(matchers[2], "loss,val_loss,step", &e) < 0 ||
	    dp_matcher_add_definitions(matchers[3], defs, strlen(defs), "defs", &e) < 0 ||
	    dp_matcher_logfmt(matchers[3], NULL, &e) < 0) {
		fprintf(stderr, "setup: %s\n", e.msg);
		abort();
	}
	coord_rx = dp_matcher_new();
	coord_lf = dp_matcher_new();
	if (dp_matcher_add(coord_rx, "z", "(?:^|\\s)zz=(1)$", "-m z", &e) < 0 ||
	    dp_matcher_logfmt(coord_lf, "zz", &e) < 0)
		abort();
}

static void check_match(dp_matcher *m, const char *line, size_t len)
{
	dp_match mt;
	int n = dp_matcher_match(m, line, len, &mt);
	CHECK(n >= 0 || n == DP_EDATA, "match returned %d", n);
	for (int i = 0; i < n; i++) {
		const dp_sample *s = &mt.samples[i];
		CHECK(s->metric >= 0 && s->metric < dp_matcher_nmetrics(m), "metric id %d", s->metric);
		CHECK(dp_number_valid(s->text, s->len), "sample '%.*s' not a number", (int)s->len,
		      s->text);
		double v = dp_number_value(s->text, s->len);
		(void)v;
	}
	if (n > 0) {
		if (mt.step)
			CHECK(dp_number_valid(mt.step, mt.step_len), "step not a number");
		if (mt.epoch)
			CHECK(dp_number_valid(mt.epoch, mt.epoch_len), "epoch not a number");
	}
}

/* Regex-path coordinates (scan_coords) against logfmt-path coordinates
 * (the tokenizer), on the line with " zz=1" appended so both give a sample. */
static void check_coords(const char *line, size_t len)
{
	if (len > 4000 || memchr(line, '\n', len) || memchr(line, 0, len))
		return;
	char buf[4100];
	memcpy(buf, line, len);
	memcpy(buf + len, " zz=1", 5);
	size_t n = len + 5;
	size_t i = 0;
	while (i < n && (unsigned char)buf[i] <= ' ')
		i++;
	if (i < n && buf[i] == '{')
		return; /* JSON lines take another path in both */
	dp_match a, b;
	int na = dp_matcher_match(coord_rx, buf, n, &a);
	int nb = dp_matcher_match(coord_lf, buf, n, &b);
	if (na != 1 || nb < 1)
		return;
	CHECK(a.rank == b.rank, "rank %d vs %d", a.rank, b.rank);
	CHECK((a.step == NULL) == (b.step == NULL) &&
		      (!a.step || (a.step_len == b.step_len && !memcmp(a.step, b.step, a.step_len))),
	      "step differs");
	CHECK((a.epoch == NULL) == (b.epoch == NULL) &&
		      (!a.epoch ||
		       (a.epoch_len == b.epoch_len && !memcmp(a.epoch, b.epoch, a.epoch_len))),
	      "epoch differs");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int ready;
	if (!ready) {
		setup();
		ready = 1;
	}
	if (size < 1)
		return 0;
	dp_matcher *m = matchers[data[0] & 3];
	size_t max_line = (data[0] >> 2) < 48 ? (size_t)(data[0] >> 2) + 1 : (size_t)1 << 20;
	const char *log = (const char *)data + 1;
	size_t len = size - 1;

	int fd = memfd_create("log", 0);
	if (fd < 0 || write(fd, log, len) != (ssize_t)len || lseek(fd, 0, SEEK_SET) != 0)
		abort();
	dp_err e;
	dp_lines *r = dp_lines_fdopen(fd, "log", 0, max_line, &e);
	CHECK(r, "open: %s", e.msg);
	/* The reference: segments between newlines (a last one without a
	 * newline counts when not empty). */
	size_t pos = 0, nlong = 0;
	const char *line;
	size_t n;
	int rc;
	while ((rc = dp_lines_next(r, &line, &n, &e)) == DP_LINES_LINE) {
		for (;;) {
			CHECK(pos <= len, "more lines than the input has");
			const char *nl = memchr(log + pos, '\n', len - pos);
			size_t seg = nl ? (size_t)(nl - log) - pos : len - pos;
			size_t start = pos;
			pos += seg + (nl != NULL);
			if (seg > max_line) {
				nlong++;
				continue;
			}
			CHECK(n == seg && memcmp(line, log + start, n) == 0,
			      "line at byte %zu differs", start);
			break;
		}
		check_match(m, line, n);
		check_coords(line, n);
	}
	CHECK(rc == DP_LINES_END, "reader ended with %d", rc);
	while (pos < len) { /* what is left must all be long lines */
		const char *nl = memchr(log + pos, '\n', len - pos);
		size_t seg = nl ? (size_t)(nl - log) - pos : len - pos;
		CHECK(seg > max_line, "a line of %zu bytes at %zu was not returned", seg, pos);
		nlong++;
		pos += seg + (nl != NULL);
	}
	CHECK(dp_lines_long(r) == nlong, "long lines %llu, want %zu",
	      (unsigned long long)dp_lines_long(r), nlong);
	dp_lines_close(r);
	close(fd);

	/* The whole input as one line too (no reader limits). */
	check_match(m, log, len);

	/* The log's text as messages quote it (dp_shown): no control
	 * character, C0 or C1, no DEL, no byte that is not UTF-8 comes out */
	char *q = dp_shown(log, len);
	CHECK(q != NULL, "dp_shown: out of memory");
	CHECK(strlen(q) >= (memchr(log, 0, len) ? 0 : len), "dp_shown shortened the text");
	for (const unsigned char *p = (const unsigned char *)q; *p; p++) {
		CHECK(*p >= 0x20 && *p != 0x7f, "dp_shown let byte 0x%02x through", *p);
		if (*p == 0xc2)
			CHECK(p[1] >= 0xa0 || p[1] < 0x80, "dp_shown let a C1 control through");
	}
	free(q);
	return 0;
}
