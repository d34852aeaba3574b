/*
 * s3fifo.c - SageMaker Pipe mode's FIFOs: DIR/CHANNEL_EPOCH, one epoch
 * each, written when a reader opens it.  The next epoch's FIFO is made
 * before the current one is closed, so a reader that goes on to it at end
 * of file finds it; a finished epoch's FIFO is removed.  A run that fails
 * breaks its FIFOs: removed, and a reader that has one open reads
 * DP_S3_FIFO_MARK before the end of its file.  What changes the state
 * runs with every signal blocked, so that a handler calling
 * dp_s3_fifos_break (async-signal-safe) sees it whole.
 */
#define _GNU_SOURCE
#include "s3_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void signals_blocked(int on)
{
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(on ? SIG_BLOCK : SIG_UNBLOCK, &all, NULL);
}

int dp_s3_fifos_mkdirs(dp_s3_fifos *f, const char *dir, dp_err *e)
{
	size_t len = strlen(dir);
	if (len >= sizeof f->made)
		return dp_seterr(e, DP_EIO, "%s: name too long", dir);
	char *p = strdup(dir);
	if (!p)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	int first = 1, rc = DP_OK;
	for (char *s = p + 1;; s++) {
		if (*s != '/' && *s)
			continue;
		char c = *s;
		*s = 0;
		signals_blocked(1);
		int r = mkdir(p, 0777);
		if (r == 0 && first) {
			memcpy(f->made, dir, len + 1);
			f->made_keep = (size_t)(s - p);
			while (f->made_keep && f->made[f->made_keep - 1] != '/')
				f->made_keep--;
			f->made_keep -= f->made_keep > 0; /* the parent's length */
			first = 0;
		}
		if (r == 0)
			f->made_len = (size_t)(s - p);
		signals_blocked(0);
		if (r < 0 && errno != EEXIST) {
			rc = dp_syserr(e, "%s: cannot create", p);
			e->code = rc = DP_EIO;
			break;
		}
		*s = c;
		if (!c)
			break;
	}
	free(p);
	return rc;
}

int dp_s3_fifos_make(dp_s3_fifos *f, const char *dir, const char *channel, uint64_t epoch,
		     int slot, dp_err *e)
{
	char path[DP_S3_FIFO_PATH];
	if (snprintf(path, sizeof path, "%s/%s_%" PRIu64, dir, channel, epoch) >= (int)sizeof path)
		return dp_seterr(e, DP_EARG, "%s/%s_%" PRIu64 ": name too long", dir, channel, epoch);
	struct stat sb;
	if (lstat(path, &sb) == 0 && !S_ISFIFO(sb.st_mode))
		return dp_seterr(e, DP_EIO, "%s: exists and is not a FIFO", path);
	signals_blocked(1);
	int rc = mkfifo(path, 0666) < 0 && errno != EEXIST ? -1 : 0;
	if (rc == 0)
		memcpy(f->path[slot], path, sizeof path);
	signals_blocked(0);
	if (rc < 0)
		return dp_syserr(e, "%s: cannot create the FIFO", path);
	return DP_OK;
}

void dp_s3_fifos_done(dp_s3_fifos *f, int fd)
{
	signals_blocked(1);
	unlink(f->path[0]);
	if (fd >= 0)
		close(fd);
	memcpy(f->path[0], f->path[1], sizeof f->path[0]);
	f->path[1][0] = 0;
	signals_blocked(0);
}

int dp_s3_fifos_first_reader(dp_s3_fifos *f, const char *dir, const char *channel,
			     uint64_t epoch, uint64_t *shift, dp_err *e)
{
	if (dp_s3_fifos_make(f, dir, channel, epoch + 1, 1, e) < 0)
		return e->code;
	for (;;) {
		for (int i = 0; i < 2; i++) {
			int fd = open(f->path[i], O_WRONLY | O_NONBLOCK | O_CLOEXEC);
			if (fd < 0 && errno != ENXIO)
				return dp_syserr(e, "%s", f->path[i]);
			if (fd < 0)
				continue;
			fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
			signals_blocked(1);
			if (i == 1) { /* the reader counts from 1: its FIFO is the epoch's */
				unlink(f->path[0]);
				memcpy(f->path[0], f->path[1], sizeof f->path[0]);
			} else {
				unlink(f->path[1]);
			}
			f->path[1][0] = 0;
			signals_blocked(0);
			*shift = (uint64_t)i;
			return fd;
		}
		struct timespec ts = {0, 20 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
}

/* End the epoch of FIFO path as a failure (see dp_s3_fifos_break). */
static void fifo_break(const char *path, int wait_ms)
{
	if (!*path)
		return;
	/* read and write ends at once, without waiting: a writer for a reader
	 * blocked in open, and a reader to make room */
	int rw = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
	unlink(path);
	if (rw < 0)
		return;
	struct pollfd pf = {rw, POLLOUT, 0};
	if (wait_ms > 0)
		poll(&pf, 1, wait_ms);
	char junk[4096];
	for (int i = 0; i < 1024; i++) {
		if (write(rw, DP_S3_FIFO_MARK, sizeof DP_S3_FIFO_MARK - 1) >= 0 || errno != EAGAIN)
			break;
		if (read(rw, junk, sizeof junk) <= 0)
			break;
	}
	close(rw);
}

void dp_s3_fifos_rmdirs(dp_s3_fifos *f)
{
	for (size_t n = f->made_len; n > f->made_keep; n--) {
		if (f->made[n] != '/' && f->made[n] != 0)
			continue;
		char c = f->made[n];
		f->made[n] = 0;
		int rc = rmdir(f->made);
		f->made[n] = c;
		if (rc < 0)
			break; /* not empty: nor are those above */
	}
	f->made_len = f->made_keep = 0;
}

void dp_s3_fifos_break(dp_s3_fifos *f, int wait_ms)
{
	for (int i = 0; i < 2; i++) {
		fifo_break(f->path[i], wait_ms);
		f->path[i][0] = 0;
	}
	dp_s3_fifos_rmdirs(f);
}
