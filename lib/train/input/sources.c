/*
 * sources.c - where the training input's records come from (dp_data.h):
 * files and globs, streams (stdin, FIFOs, cached to a file or memory for
 * later epochs), commands ({epoch} from 1, {epoch0} from 0, {rank}... filled in, run by /bin/sh),
 * opened in an epoch's order and read record by record.
 */
#define _GNU_SOURCE
#include "data_impl.h"
#include "dp_rng.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <glob.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

int data_add_source(dp_data *d, int kind, const char *path, const char *name, dp_err *e)
{
	source *s = realloc(d->src, (d->nsrc + 1) * sizeof *s);
	if (!s)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	d->src = s;
	s = &d->src[d->nsrc];
	memset(s, 0, sizeof *s);
	s->cache_fd = -1;
	s->path = strdup(path);
	s->name = strdup(name);
	if (!s->path || !s->name) {
		free(s->path);
		free(s->name);
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	}
	s->kind = kind;
	d->nsrc++;
	return DP_OK;
}

static int add_path(dp_data *d, const char *path, dp_err *e)
{
	if (!strcmp(path, "-")) {
		for (size_t i = 0; i < d->nsrc; i++)
			if (!strcmp(d->src[i].path, "-"))
				return dp_seterr(e, DP_EARG, "stdin given twice");
		return data_add_source(d, SRC_STREAM, "-", "stdin", e);
	}
	struct stat st;
	if (stat(path, &st) < 0)
		return dp_syserr(e, "%s", path);
	if (S_ISDIR(st.st_mode))
		return dp_seterr(e, DP_EARG, "%s: is a directory", path);
	if (!S_ISREG(st.st_mode))
		return data_add_source(d, SRC_STREAM, path, path, e);
	if (access(path, R_OK) < 0)
		return dp_syserr(e, "%s", path);
	return data_add_source(d, SRC_FILE, path, path, e);
}

/* Expand {rank}, {size} (from the options when given) and `extra` (a
 * name, value pair or NULL) in tmpl. */
static char *expand(const dp_data *d, const char *tmpl, const char *name, const char *value)
{
	char rb[16], sb[16], e0[24];
	const char *vars[9];
	int n = 0;
	if (name) {
		vars[n++] = name;
		vars[n++] = value;
	}
	if (name && !strcmp(name, "epoch")) { /* {epoch0}: from 0, as SageMaker's FIFOs */
		snprintf(e0, sizeof e0, "%llu", strtoull(value, NULL, 10) - 1);
		vars[n++] = "epoch0";
		vars[n++] = e0;
	}
	if (d->o.size > 0) {
		snprintf(rb, sizeof rb, "%d", d->o.rank);
		snprintf(sb, sizeof sb, "%d", d->o.size);
		vars[n++] = "rank";
		vars[n++] = rb;
		vars[n++] = "size";
		vars[n++] = sb;
	}
	vars[n] = NULL;
	return dp_expand(tmpl, vars);
}

int data_find_sources(dp_data *d, dp_err *e)
{
	for (size_t i = 0; i < d->o.ninputs; i++) {
		char *p = expand(d, d->o.inputs[i], NULL, NULL);
		if (!p)
			return dp_seterr(e, DP_ENOMEM, "out of memory");
		int rc = DP_OK;
		struct stat st;
		/* a name that exists is that file, whatever its characters (a
		 * name the shell expanded, 'd[1].tfr'); only one that does not
		 * is a pattern */
		if (strcmp(p, "-") && strpbrk(p, "*?[") && lstat(p, &st) < 0) {
			glob_t g;
			int gr = glob(p, GLOB_ERR, NULL, &g);
			if (gr == GLOB_NOMATCH)
				rc = dp_seterr(e, DP_ENOTFOUND, "%s: no file matches", p);
			else if (gr)
				rc = dp_seterr(e, DP_EIO, "%s: cannot expand", p);
			for (size_t j = 0; rc == DP_OK && !gr && j < g.gl_pathc; j++)
				rc = add_path(d, g.gl_pathv[j], e);
			if (!gr)
				globfree(&g);
		} else {
			rc = add_path(d, p, e);
		}
		free(p);
		if (rc < 0)
			return rc;
	}
	return DP_OK;
}

int dp_data_reads(const dp_data *d, const char *path)
{
	struct stat a, b;
	if (!d || stat(path, &a) < 0 || !S_ISREG(a.st_mode))
		return 0;
	for (size_t i = 0; i < d->nsrc; i++)
		if (d->src[i].kind == SRC_FILE && stat(d->src[i].path, &b) == 0 &&
		    a.st_dev == b.st_dev && a.st_ino == b.st_ino)
			return 1;
	return 0;
}

/* Start `sh -c cmd` with its stdout on a pipe; returns the read end. */
static int spawn(dp_data *d, const char *cmd, dp_err *e)
{
	int fds[2];
	if (pipe2(fds, O_CLOEXEC) < 0)
		return dp_syserr(e, "command: pipe");
	/* stdin and stderr ours; SIGPIPE at its default (dp_spawn): we may stop
	 * reading early, and the command then ends quietly */
	char *argv[] = {"sh", "-c", (char *)cmd, NULL};
	dp_child c = {"/bin/sh", argv, NULL, STDIN_FILENO, fds[1], -1, 0};
	int pid, rc = dp_spawn(&c, &pid, e);
	close(fds[1]);
	if (rc < 0) {
		close(fds[0]);
		return dp_preferr(e, "command");
	}
	d->child = pid;
	return fds[0];
}

/* Reap the command; an error unless it exited 0 (or we stopped it). */
static int reap(dp_data *d, int stopped, dp_err *e)
{
	if (d->child <= 0)
		return DP_OK;
	int status;
	if (stopped)
		kill(d->child, SIGTERM);
	while (waitpid(d->child, &status, 0) < 0)
		if (errno != EINTR) {
			d->child = 0;
			return dp_syserr(e, "command: wait");
		}
	d->child = 0;
	if (stopped)
		return DP_OK;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return DP_OK;
	if (WIFEXITED(status))
		return dp_seterr(e, DP_EIO, "command '%s' exited with status %d%s", d->cmd_run,
				 WEXITSTATUS(status),
				 WEXITSTATUS(status) == 127 ? " (not found?)" : "");
	return dp_seterr(e, DP_EIO, "command '%s' killed by signal %d", d->cmd_run,
			 WTERMSIG(status));
}

static uint64_t cache_limit(const dp_data *d)
{
	return d->o.cache_limit ? d->o.cache_limit : (uint64_t)4 << 30;
}

/* Open source i of the epoch's order. */
static int open_source(dp_data *d, size_t i, dp_err *e)
{
	source *s = &d->src[i];
	dp_reader_opts ro = d->o.rec;
	d->rd_src = i;
	if (s->kind == SRC_FILE) {
		d->rd = dp_reader_open_path(s->path, &ro, e);
		return d->rd ? DP_OK : (e ? e->code : DP_EIO);
	}
	if (s->kind == SRC_CMD) {
		char eb[24];
		snprintf(eb, sizeof eb, "%" PRIu64, d->epoch + 1);
		char *cmd = expand(d, d->cmd, "epoch", eb);
		if (!cmd)
			return dp_seterr(e, DP_ENOMEM, "out of memory");
		free(d->cmd_run); /* messages name the command run, not the template */
		d->cmd_run = cmd;
		int fd = spawn(d, cmd, e);
		if (fd < 0)
			return fd;
		d->rd = dp_reader_open_fd(fd, 1, "command output", &ro, e);
		if (!d->rd) {
			reap(d, 1, NULL);
			return e ? e->code : DP_EIO;
		}
		return DP_OK;
	}
	/* a stream: its cache, or the stream itself the first time */
	if (s->cached) {
		ro.compression = DP_COMP_NONE; /* frames were cached decompressed */
		if (s->mem) {
			d->rd = dp_reader_open_mem(s->mem, s->memlen, s->name, &ro, e);
		} else {
			int fd = dup(s->cache_fd);
			if (fd < 0 || lseek(fd, 0, SEEK_SET) < 0) {
				if (fd >= 0)
					close(fd);
				return dp_syserr(e, "%s: stream cache", s->name);
			}
			d->rd = dp_reader_open_fd(fd, 1, s->name, &ro, e);
		}
		return d->rd ? DP_OK : (e ? e->code : DP_EIO);
	}
	if (s->consumed)
		return dp_seterr(e, DP_EARG,
				 "%s: a stream can be read only once and was not cached: re-run a "
				 "command each epoch (--train-cmd) or allow caching",
				 s->name);
	s->consumed = 1;
	if (d->o.cache != DP_CACHE_NONE) {
		if (d->o.cache == DP_CACHE_MEMORY) {
			s->cw = dp_writer_open_mem(DP_COMP_NONE, 0, e);
		} else {
			const char *dir = d->cache_dir;
			char *tmpl;
			if (asprintf(&tmpl, "%s/dp-train-cache.XXXXXX", dir) < 0)
				return dp_seterr(e, DP_ENOMEM, "out of memory");
			int fd = mkostemp(tmpl, O_CLOEXEC);
			if (fd < 0) {
				int rc = dp_syserr(e, "%s: cannot create the stream cache", tmpl);
				free(tmpl);
				return rc;
			}
			unlink(tmpl); /* gone when we are, however we end */
			s->cache_fd = fd;
			/* its errors (a full --cache-dir) name the cache file, not the stream */
			char *cname;
			if (asprintf(&cname, "%s (the cache of %s)", tmpl, s->name) < 0) {
				free(tmpl);
				return dp_seterr(e, DP_ENOMEM, "out of memory");
			}
			free(tmpl);
			s->cw = dp_writer_open_fd(fd, cname, DP_COMP_NONE, 0, e);
			free(cname);
		}
		if (!s->cw)
			return e ? e->code : DP_ENOMEM;
	}
	d->rd = !strcmp(s->path, "-") ? dp_reader_open_fd(STDIN_FILENO, 0, "stdin", &ro, e)
				      : dp_reader_open_path(s->path, &ro, e);
	return d->rd ? DP_OK : (e ? e->code : DP_EIO);
}

/* The source in d->rd ended cleanly: finish its cache, reap its command. */
static int close_source(dp_data *d, dp_err *e)
{
	source *s = &d->src[d->rd_src];
	dp_reader_close(d->rd);
	d->rd = NULL;
	int rc = DP_OK;
	if (s->cw) {
		rc = dp_writer_finish(s->cw, e);
		if (rc == DP_OK) {
			if (d->o.cache == DP_CACHE_MEMORY) {
				size_t n;
				const uint8_t *m = dp_writer_mem(s->cw, &n);
				s->mem = malloc(n ? n : 1);
				if (!s->mem)
					rc = dp_seterr(e, DP_ENOMEM, "%s: out of memory for the cache",
						       s->name);
				else
					memcpy(s->mem, m, n);
				s->memlen = n;
			}
			s->cached = rc == DP_OK;
		}
		dp_writer_free(s->cw);
		s->cw = NULL;
	}
	if (s->kind == SRC_CMD && rc == DP_OK)
		rc = reap(d, 0, e);
	return rc;
}

/* Stop reading mid-source (epoch abandoned or closing).  A partly cached
 * stream cannot be read again, so its reader is drained into the cache
 * first when the caller wants it (drain). */
void data_abandon_source(dp_data *d, int drain)
{
	if (!d->rd)
		return;
	source *s = &d->src[d->rd_src];
	if (drain && s->cw) {
		dp_record r;
		dp_err e2;
		int rc;
		while ((rc = dp_reader_next(d->rd, &r, &e2)) == 1)
			if (dp_writer_write_frame(s->cw, r.frame, r.frame_len, &e2) < 0)
				break;
		if (rc == 0) {
			close_source(d, &e2);
			return;
		}
	}
	dp_reader_close(d->rd);
	d->rd = NULL;
	if (s->cw) {
		dp_writer_free(s->cw);
		s->cw = NULL;
	}
	if (s->kind == SRC_CMD)
		reap(d, 1, NULL);
}

/* The next record of the epoch (after the shard filter): 1, 0 at the end,
 * or an error. */
int data_next_record(dp_data *d, dp_record *r, dp_err *e)
{
	for (;;) {
		if (!d->rd) {
			if (d->cur == d->nsrc)
				return 0;
			int rc = open_source(d, d->order[d->cur++], e);
			if (rc < 0)
				return rc;
		}
		int old = 0;
		if (d->threaded)
			pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, &old);
		int rc = dp_reader_next(d->rd, r, e);
		if (d->threaded)
			pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
		if (rc == 0) {
			if ((rc = close_source(d, e)) < 0)
				return rc;
			continue;
		}
		if (rc < 0)
			return rc;
		source *s = &d->src[d->rd_src];
		if (s->cw) {
			char lb[32];
			if (d->cache_total + r->frame_len > cache_limit(d))
				return dp_seterr(e, DP_ELIMIT,
						 "%s: record %" PRIu64 ": the stream is larger than the "
						 "cache limit (%s) for later epochs: raise "
						 "--cache-limit or re-run a command each epoch "
						 "(--train-cmd)",
						 s->name, r->index,
						 dp_fmt_size(cache_limit(d), lb, sizeof lb));
			if ((rc = dp_writer_write_frame(s->cw, r->frame, r->frame_len, e)) < 0)
				return rc;
			d->cache_total += r->frame_len;
			d->st.cached_bytes = d->cache_total;
		}
		d->st.records++;
		uint64_t no = d->rec_no++;
		if (d->o.shard_count > 1 && !d->o.shard_block &&
		    no % d->o.shard_count != d->o.shard_index) {
			d->st.not_in_shard++;
			continue;
		}
		return 1;
	}
}
