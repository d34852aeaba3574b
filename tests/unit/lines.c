/* lines.c - dp_lines.h: lines across chunk boundaries, over-long lines
 * skipped in bounded memory, the last line without a newline, pipes that
 * have nothing yet, and following a file that grows, is truncated, is
 * renamed away and created anew, or does not exist yet. */
#define _GNU_SOURCE
#include "dp_lines.h"
#include "tap.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[] = "/tmp/dplines.XXXXXX";

static void path_of(char *buf, const char *name) { sprintf(buf, "%s/%s", dir, name); }

static void write_file(const char *path, const char *data, size_t n, int append)
{
	int fd = open(path, O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC), 0644);
	if (write(fd, data, n) != (ssize_t)n)
		printf("# short write\n");
	close(fd);
}

/* Line lengths i*7919 % 3000000 for i < 40 (some empty, some over 2 MiB,
 * over the 1 MiB chunk), then read them back with max_line = 2 MiB. */
static void chunks(void)
{
	char p[256];
	path_of(p, "chunks");
	size_t total = 0, nl = 40;
	size_t *len = malloc(nl * sizeof *len);
	for (size_t i = 0; i < nl; i++)
		total += (len[i] = i * 7919 * 37 % 3000000) + 1;
	char *data = malloc(total), *q = data;
	for (size_t i = 0; i < nl; i++) {
		for (size_t j = 0; j < len[i]; j++)
			*q++ = (char)('a' + (i + j) % 26);
		*q++ = '\n';
	}
	write_file(p, data, total, 0);
	dp_err e;
	size_t max = 2u << 20;
	dp_lines *r = dp_lines_open(p, 0, max, &e);
	ok(r != NULL, "open");
	const char *line;
	size_t n;
	size_t i = 0, bad = 0, want_long = 0;
	for (size_t k = 0; k < nl; k++)
		want_long += len[k] > max;
	int rc;
	while ((rc = dp_lines_next(r, &line, &n, &e)) == DP_LINES_LINE) {
		while (i < nl && len[i] > max)
			i++; /* skipped */
		if (i >= nl || n != len[i] || (n && line[0] != (char)('a' + i % 26)))
			bad++;
		i++;
	}
	is_int(rc, DP_LINES_END, "end");
	is_int(bad, 0, "every line of up to 2 MiB intact across 1 MiB chunks");
	is_int(dp_lines_long(r), want_long, "lines over 2 MiB skipped and counted");
	dp_lines_close(r);
	free(data);
	free(len);
}

static void small(void)
{
	char p[256];
	path_of(p, "small");
	write_file(p, "a\n\nbb\r\nlast", 11, 0);
	dp_err e;
	dp_lines *r = dp_lines_open(p, 0, 100, &e);
	const char *line;
	size_t n;
	char got[64] = "";
	while (dp_lines_next(r, &line, &n, &e) == DP_LINES_LINE)
		sprintf(got + strlen(got), "[%.*s]", (int)n, line);
	is_str(got, "[a][][bb\r][last]", "empty line, CR kept, last line without newline");
	dp_lines_close(r);

	/* A 10 MiB line with max_line 1 KiB: skipped, never held. */
	path_of(p, "long");
	size_t big = 10u << 20;
	char *data = malloc(big + 8);
	memset(data, 'x', big);
	memcpy(data + big, "\nok\n", 4);
	write_file(p, data, big + 4, 0);
	r = dp_lines_open(p, 0, 1024, &e);
	int rc = dp_lines_next(r, &line, &n, &e);
	ok(rc == DP_LINES_LINE && n == 2 && memcmp(line, "ok", 2) == 0,
	   "the line after a 10 MiB line");
	is_int(dp_lines_long(r), 1, "one long line");
	is_int(dp_lines_next(r, &line, &n, &e), DP_LINES_END, "end");
	dp_lines_close(r);
	/* The same line as the last one, without a newline. */
	write_file(p, data, big, 0);
	r = dp_lines_open(p, 0, 1024, &e);
	is_int(dp_lines_next(r, &line, &n, &e), DP_LINES_END, "an over-long last line: skipped");
	is_int(dp_lines_long(r), 1, "and counted");
	dp_lines_close(r);
	free(data);

	r = dp_lines_open("/nonexistent/x", 0, 100, &e);
	ok(!r, "missing file");
	like(e.msg, "/nonexistent/x: No such file or directory", "named in the message");
	r = dp_lines_open(dir, 0, 100, &e);
	ok(!r, "a directory");
	like(e.msg, "Is a directory", "said so");
}

static void pipes(void)
{
	int fds[2];
	if (pipe(fds) < 0)
		return;
	dp_err e;
	dp_lines *r = dp_lines_fdopen(fds[0], "pipe", 0, 100, &e);
	const char *line;
	size_t n;
	is_int(dp_lines_next(r, &line, &n, &e), DP_LINES_WAIT, "empty pipe: wait");
	is_int(dp_lines_fd(r), fds[0], "the fd to poll");
	if (write(fds[1], "abc", 3) != 3)
		return;
	is_int(dp_lines_next(r, &line, &n, &e), DP_LINES_WAIT, "half a line: wait");
	if (write(fds[1], "\nd", 2) != 2)
		return;
	int rc = dp_lines_next(r, &line, &n, &e);
	ok(rc == DP_LINES_LINE && n == 3 && memcmp(line, "abc", 3) == 0, "the line");
	close(fds[1]);
	rc = dp_lines_next(r, &line, &n, &e);
	ok(rc == DP_LINES_LINE && n == 1 && line[0] == 'd', "the last line when the writer closes");
	is_int(dp_lines_next(r, &line, &n, &e), DP_LINES_END, "end");
	dp_lines_close(r);
	close(fds[0]);

	/* bytes read before the reader was opened, given back */
	if (pipe(fds) < 0 || write(fds[1], "c\nd", 3) != 3)
		return;
	close(fds[1]);
	r = dp_lines_fdopen(fds[0], "pipe", 0, 100, &e);
	is_int(dp_lines_unread(r, "ab", 2, &e), 0, "dp_lines_unread before reading");
	rc = dp_lines_next(r, &line, &n, &e);
	ok(rc == DP_LINES_LINE && n == 3 && memcmp(line, "abc", 3) == 0, "given back bytes come first");
	is_int(dp_lines_unread(r, "x", 1, &e), DP_EARG, "dp_lines_unread after reading: refused");
	rc = dp_lines_next(r, &line, &n, &e);
	ok(rc == DP_LINES_LINE && n == 1 && line[0] == 'd', "then the rest");
	dp_lines_close(r);
	close(fds[0]);
}

/* Read what is there now: lines joined with '|', until WAIT. */
static int drain(dp_lines *r, char *got)
{
	const char *line;
	size_t n;
	dp_err e;
	int rc;
	got[0] = 0;
	while ((rc = dp_lines_next(r, &line, &n, &e)) == DP_LINES_LINE)
		sprintf(got + strlen(got), "%.*s|", (int)n, line);
	return rc;
}

static void follow(void)
{
	char p[256], old[256], got[1024];
	path_of(p, "f.log");
	path_of(old, "f.log.1");
	write_file(p, "a\nb", 3, 0);
	dp_err e;
	dp_lines *r = dp_lines_open(p, DP_LINES_FOLLOW, 100, &e);
	is_int(drain(r, got), DP_LINES_WAIT, "follow: wait at the end");
	is_str(got, "a|", "follow: the complete line, not the partial one");
	is_int(dp_lines_fd(r), -1, "follow: nothing to poll for a regular file");
	write_file(p, "c\nd\n", 4, 1);
	drain(r, got);
	is_str(got, "bc|d|", "follow: the line completed by the writer, and more");

	/* Truncation (copytruncate). */
	write_file(p, "e\n", 2, 0);
	drain(r, got);
	is_str(got, "e|", "truncated: read again from the start");
	is_int(dp_lines_events(r), DP_LINES_TRUNCATED, "truncated: event");

	/* Rotation: renamed away, written a little more, created anew. */
	write_file(p, "f\ng", 3, 1);
	drain(r, got);
	is_str(got, "f|", "before rotation");
	rename(p, old);
	write_file(old, "h\n", 2, 1); /* the writer still had it open */
	drain(r, got);
	is_str(got, "gh|", "renamed away: the old file still read");
	is_int(dp_lines_events(r), DP_LINES_MISSING, "renamed away: the name is missing");
	write_file(old, "tail", 4, 1);
	write_file(p, "i\n", 2, 0);
	drain(r, got);
	is_str(got, "tail|i|", "created anew: old file finished, new one followed");
	is_int(dp_lines_events(r), DP_LINES_REPLACED, "replaced: event");
	dp_lines_close(r);

	/* A file that does not exist yet. */
	path_of(p, "later.log");
	r = dp_lines_open(p, DP_LINES_FOLLOW, 100, &e);
	ok(r != NULL, "follow: a missing file is waited for");
	is_int(dp_lines_events(r), DP_LINES_MISSING, "missing: event");
	is_int(drain(r, got), DP_LINES_WAIT, "missing: wait");
	write_file(p, "j\n", 2, 0);
	drain(r, got);
	is_str(got, "j|", "appeared: read");
	is_int(dp_lines_events(r), DP_LINES_APPEARED, "appeared: event");
	dp_lines_close(r);
	unlink(p);
	path_of(p, "f.log");
	unlink(p);
	unlink(old);
}

int main(void)
{
	if (!mkdtemp(dir))
		return 1;
	chunks();
	small();
	pipes();
	follow();
	char p[256];
	const char *names[] = {"chunks", "small", "long"};
	for (size_t i = 0; i < 3; i++) {
		path_of(p, names[i]);
		unlink(p);
	}
	rmdir(dir);
	return done_testing();
}
