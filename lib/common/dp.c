/*
 * dp.c - errors (dp_err), messages (dp_msgf), whole reads and writes, the
 * clock (dp.h).
 */
#define _GNU_SOURCE
#include "dp.h"
#include "dp_rng.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int dp_vseterr(dp_err *e, int code, const char *fmt, va_list ap)
{
	if (e) {
		e->code = code;
		e->sys = 0;
		vsnprintf(e->msg, sizeof e->msg, fmt, ap);
	}
	return code;
}

int dp_seterr(dp_err *e, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	dp_vseterr(e, code, fmt, ap);
	va_end(ap);
	return code;
}

int dp_syserr(dp_err *e, const char *fmt, ...)
{
	int saved = errno;
	int code = saved == ENOMEM ? DP_ENOMEM : DP_EIO;
	if (e) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(e->msg, sizeof e->msg, fmt, ap);
		va_end(ap);
		size_t n = strlen(e->msg);
		snprintf(e->msg + n, sizeof e->msg - n, ": %s", strerror(saved));
		e->code = code;
		e->sys = saved;
	}
	errno = saved;
	return code;
}

int dp_preferr(dp_err *e, const char *fmt, ...)
{
	if (!e)
		return DP_EIO;
	char old[sizeof e->msg];
	memcpy(old, e->msg, sizeof old);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof e->msg, fmt, ap);
	va_end(ap);
	size_t n = strlen(e->msg);
	snprintf(e->msg + n, sizeof e->msg - n, ": %s", old);
	return e->code;
}

/* ---- I/O helpers ------------------------------------------------------ */

void dp_msgf(dp_msg_fn fn, void *ctx, const char *fmt, ...)
{
	if (!fn)
		return;
	char msg[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	fn(ctx, msg);
}

int dp_write_all(int fd, const void *buf, size_t len, const char *name, dp_err *e)
{
	const char *p = buf;
	while (len > 0) {
		ssize_t n = write(fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return dp_syserr(e, "%s: write", name);
		}
		p += n;
		len -= (size_t)n;
	}
	return DP_OK;
}

int dp_read_file(const char *path, const char *name, size_t max, dp_buf *b, dp_err *e)
{
	int std = !strcmp(path, "-");
	int fd = std ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (!name)
		name = std ? "stdin" : path;
	if (fd < 0)
		return dp_syserr(e, "%s", name);
	dp_buf_reset(b);
	int rc = DP_OK;
	size_t chunk = 1 << 16;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size < max)
		chunk = (size_t)st.st_size + 1; /* one read, and one more to see the end */
	for (;;) {
		size_t room = max - b->len, want = chunk <= room ? chunk : room + 1;
		if (dp_buf_reserve(b, want) < 0) {
			rc = dp_seterr(e, DP_ENOMEM, "%s: out of memory", name);
			break;
		}
		long got = dp_read_full(fd, b->p + b->len, want, name, e);
		if (got < 0) {
			rc = (int)got;
			break;
		}
		b->len += (size_t)got;
		b->p[b->len] = 0;
		if (b->len > max) {
			char lim[32];
			rc = dp_seterr(e, DP_ELIMIT, "%s: larger than %s", name, dp_fmt_size(max, lim, sizeof lim));
			break;
		}
		if ((size_t)got < want)
			break;
		chunk = 1 << 16;
	}
	if (!std)
		close(fd);
	return rc;
}

long dp_read_full(int fd, void *buf, size_t len, const char *name, dp_err *e)
{
	char *p = buf;
	size_t got = 0;
	while (got < len) {
		ssize_t n = read(fd, p + got, len - got);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return dp_syserr(e, "%s: read", name);
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (long)got;
}

double dp_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
