/*
 * lines.c - bounded-memory line reader with tail -F following (dp_lines.h).
 *
 * One buffer of max_line + CHUNK bytes holds the unread data [start, end);
 * `scan` is how far [start, end) is known to hold no newline, so that a
 * long line arriving in many reads is scanned once.  When the pending part
 * grows past max_line, the reader drops it and skips to the next newline.
 */
#define _GNU_SOURCE
#include "dp_lines.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHUNK (1u << 20)

struct dp_lines {
	char *name;   /* for messages; the followed path */
	int fd;       /* -1 while waiting for the file to appear */
	int own_fd;
	int follow;   /* follow growth */
	int by_name;  /* follow the name: rotation, appearance */
	int regular;  /* fd is a regular file */
	int eof;      /* the input ended (END after the last partial line) */
	int skipping; /* inside an over-long line */
	dev_t dev;
	ino_t ino;
	off_t pos;    /* bytes read from the current file */
	char *buf;
	size_t cap, start, end, scan, max_line;
	unsigned events;
	int missing_noted;
	int draining; /* the name moved on: reading the old file to its end */
	uint64_t nlong, nlines;
};

static dp_lines *alloc_reader(const char *name, size_t max_line, dp_err *e)
{
	if (max_line == 0 || max_line > ((size_t)1 << 40))
		return dp_seterr(e, DP_EARG, "%s: bad maximum line length", name), NULL;
	dp_lines *r = calloc(1, sizeof *r);
	if (r) {
		r->name = strdup(name);
		r->cap = max_line + CHUNK + 1;
		r->buf = malloc(r->cap);
	}
	if (!r || !r->name || !r->buf) {
		if (r) {
			free(r->name);
			free(r->buf);
			free(r);
		}
		dp_seterr(e, DP_ENOMEM, "%s: out of memory for a %zu-byte line buffer", name,
			  max_line + CHUNK);
		return NULL;
	}
	r->fd = -1;
	r->max_line = max_line;
	return r;
}

/* Take fd as the current file: note its identity and kind. */
static int adopt(dp_lines *r, int fd, dp_err *e)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return dp_syserr(e, "%s", r->name);
	if (S_ISDIR(st.st_mode))
		return dp_seterr(e, DP_EIO, "%s: Is a directory", r->name);
	r->fd = fd;
	r->regular = S_ISREG(st.st_mode);
	r->dev = st.st_dev;
	r->ino = st.st_ino;
	r->pos = 0;
	if (r->regular) {
		off_t cur = lseek(fd, 0, SEEK_CUR);
		if (cur > 0)
			r->pos = cur;
		posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	}
	return DP_OK;
}

dp_lines *dp_lines_fdopen(int fd, const char *name, unsigned flags, size_t max_line, dp_err *e)
{
	dp_lines *r = alloc_reader(name, max_line, e);
	if (!r)
		return NULL;
	r->follow = (flags & DP_LINES_FOLLOW) != 0;
	if (adopt(r, fd, e) < 0) {
		dp_lines_close(r);
		return NULL;
	}
	return r;
}

dp_lines *dp_lines_open(const char *path, unsigned flags, size_t max_line, dp_err *e)
{
	if (strcmp(path, "-") == 0)
		return dp_lines_fdopen(STDIN_FILENO, "stdin", flags, max_line, e);
	dp_lines *r = alloc_reader(path, max_line, e);
	if (!r)
		return NULL;
	r->follow = (flags & DP_LINES_FOLLOW) != 0;
	r->by_name = r->follow;
	r->own_fd = 1;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (r->follow && errno == ENOENT) {
			r->events |= DP_LINES_MISSING;
			r->missing_noted = 1;
			return r; /* waited for */
		}
		dp_syserr(e, "%s", path);
		dp_lines_close(r);
		return NULL;
	}
	if (adopt(r, fd, e) < 0) {
		close(fd);
		dp_lines_close(r);
		return NULL;
	}
	if (!r->regular)
		r->by_name = 0; /* a FIFO or device: no rotation to follow */
	return r;
}

int dp_lines_unread(dp_lines *r, const void *p, size_t n, dp_err *e)
{
	if (r->end || r->nlines || r->eof || n > 65536 || n > r->cap - 1)
		return dp_seterr(e, DP_EARG, "%s: bytes given back after reading began", r->name);
	memcpy(r->buf, p, n);
	r->end = n;
	r->pos += (off_t)n;
	return DP_OK;
}

void dp_lines_close(dp_lines *r)
{
	if (!r)
		return;
	if (r->own_fd && r->fd >= 0)
		close(r->fd);
	free(r->buf);
	free(r->name);
	free(r);
}

int dp_lines_fd(const dp_lines *r) { return r->regular || r->fd < 0 ? -1 : r->fd; }
uint64_t dp_lines_long(const dp_lines *r) { return r->nlong; }
uint64_t dp_lines_count(const dp_lines *r) { return r->nlines; }
const char *dp_lines_name(const dp_lines *r) { return r->name; }

unsigned dp_lines_events(dp_lines *r)
{
	unsigned ev = r->events;
	r->events = 0;
	return ev;
}

static void drop_pending(dp_lines *r)
{
	r->start = r->end = r->scan = 0;
	r->skipping = 0;
}

/* At the end of a followed regular file: truncation, replacement or
 * disappearance of the name.  Returns 0 to wait, 1 to read on (the file
 * was truncated, or appeared), 2 when the new file replaced the old one,
 * 3 to read the old file to its end once more before switching, < 0 on
 * error. */
static int check_rotation(dp_lines *r, dp_err *e)
{
	struct stat st;
	if (r->fd >= 0) {
		if (fstat(r->fd, &st) == 0 && st.st_size < r->pos) {
			if (lseek(r->fd, 0, SEEK_SET) < 0)
				return dp_syserr(e, "%s: seek after truncation", r->name);
			r->pos = 0;
			drop_pending(r);
			r->events |= DP_LINES_TRUNCATED;
			return 1;
		}
	}
	if (!r->by_name)
		return 0;
	if (stat(r->name, &st) < 0) {
		if (errno != ENOENT)
			return 0; /* transient (EACCES while recreated...): try later */
		if (!r->missing_noted) {
			r->events |= DP_LINES_MISSING;
			r->missing_noted = 1;
		}
		return 0;
	}
	if (r->fd >= 0 && st.st_dev == r->dev && st.st_ino == r->ino)
		return 0;
	if (r->fd >= 0 && !r->draining) {
		/* Read the old file to its end once more first: its writer may
		 * have added lines between our last read and the rename. */
		r->draining = 1;
		return 3;
	}
	r->draining = 0;
	int fd = open(r->name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0; /* gone again in between: next time */
	int replaced = r->fd >= 0;
	if (replaced)
		close(r->fd);
	r->events |= replaced ? DP_LINES_REPLACED : DP_LINES_APPEARED;
	r->missing_noted = 0;
	int rc = adopt(r, fd, e);
	if (rc < 0) {
		close(fd);
		r->fd = -1;
		return rc;
	}
	r->pos = 0;
	return replaced ? 2 : 1;
}

/* Hand out the pending bytes [start, end) as the input's last line. */
static int last_line(dp_lines *r, const char **line, size_t *len)
{
	size_t n = r->end - r->start;
	int skipped = r->skipping;
	r->skipping = 0;
	if (n == 0 || skipped) {
		r->start = r->end = r->scan = 0;
		return 0;
	}
	*line = r->buf + r->start;
	*len = n;
	r->start = r->end = r->scan = 0;
	r->nlines++;
	return 1;
}

int dp_lines_next(dp_lines *r, const char **line, size_t *len, dp_err *e)
{
	for (;;) {
		if (r->end > r->scan) {
			char *nl = memchr(r->buf + r->scan, '\n', r->end - r->scan);
			if (nl) {
				size_t s = r->start, n = (size_t)(nl - r->buf) - s;
				r->start = r->scan = (size_t)(nl - r->buf) + 1;
				if (r->skipping) {
					r->skipping = 0;
					continue;
				}
				if (n > r->max_line) {
					r->nlong++;
					continue;
				}
				*line = r->buf + s;
				*len = n;
				r->nlines++;
				return DP_LINES_LINE;
			}
			r->scan = r->end;
		}
		if (r->eof)
			return DP_LINES_END;
		/* No newline in [start, end): make room, or give up the line. */
		if (r->skipping) {
			r->start = r->end = r->scan = 0;
		} else if (r->end - r->start > r->max_line) {
			r->nlong++;
			r->skipping = 1;
			r->start = r->end = r->scan = 0;
		} else if (r->start > 0 && r->cap - r->end < CHUNK) {
			memmove(r->buf, r->buf + r->start, r->end - r->start);
			r->end -= r->start;
			r->scan -= r->start;
			r->start = 0;
		}
		if (r->fd < 0) {
			int c = check_rotation(r, e);
			if (c < 0)
				return c;
			if (c == 0)
				return DP_LINES_WAIT;
		}
		if (!r->regular) {
			struct pollfd p = {r->fd, POLLIN, 0};
			int pr = poll(&p, 1, 0);
			if (pr == 0)
				return DP_LINES_WAIT;
			if (pr < 0 && errno == EINTR)
				return DP_LINES_WAIT;
		}
		size_t room = r->cap - r->end;
		if (room > CHUNK)
			room = CHUNK;
		ssize_t got = read(r->fd, r->buf + r->end, room);
		if (got < 0) {
			if (errno == EINTR || errno == EAGAIN)
				return DP_LINES_WAIT;
			return dp_syserr(e, "%s: read at byte %lld", r->name, (long long)r->pos);
		}
		if (got > 0) {
			r->end += (size_t)got;
			r->pos += got;
			continue;
		}
		/* End of the data for now. */
		if (r->follow && r->regular) {
			int c = check_rotation(r, e);
			if (c < 0)
				return c;
			if (c == 2 && last_line(r, line, len))
				return DP_LINES_LINE; /* the old file's unterminated last line */
			if (c > 0)
				continue;
			return DP_LINES_WAIT;
		}
		r->eof = 1;
		if (last_line(r, line, len))
			return DP_LINES_LINE;
		return DP_LINES_END;
	}
}
