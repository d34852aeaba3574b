/*
 * data.c - the training input pipeline (dp_data.h).
 *
 * One producer (the caller's thread, or a reader thread when prefetch > 0)
 * runs: sources in the epoch's order -> records (dp_reader) -> shard
 * filter -> shuffle buffer -> decode into a batch slot.  Records are
 * decoded straight from the reader's buffer (no shuffle) or from the
 * buffer slot that holds them (shuffle), into the batch: one copy.
 *
 * With decode threads, the producer copies the records of a batch aside
 * (the stage) instead, and the pool and the producer decode them together
 * into the batch, each sample into its own place; images skipped as
 * corrupt leave holes that are closed up and filled by the next records.
 * Every decoder (the producer's and each thread's) owns its parse and
 * image state (struct worker).
 *
 * The reader thread hands batches over through a ring of prefetch + 1
 * slots; the consumer's current batch is the slot it took last, released
 * by its next call.  Stopping an epoch early wakes a thread waiting for a
 * slot, and cancels one blocked reading a stream (cancellation is enabled
 * only around the read).
 */
#define _GNU_SOURCE
#include "dp_data.h"
#include "dp_example.h"
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

enum { SRC_FILE = 1, SRC_STREAM, SRC_CMD };

typedef struct source {
	int kind;
	char *path; /* for opening; "-" for stdin */
	char *name; /* for messages */
	int consumed;  /* a stream read once already */
	int cached;    /* its cache is complete */
	int cache_fd;  /* DP_CACHE_FILE */
	dp_writer *cw; /* the cache being written (file or memory) */
	uint8_t *mem;  /* DP_CACHE_MEMORY, complete */
	size_t memlen;
} source;

typedef struct slot {
	uint8_t *p;
	size_t len, cap;
	size_t src;
	uint64_t index, offset;
} slot;

/* One decoder's state. */
typedef struct worker {
	dp_data *d;
	dp_example ex;
	int64_t *iscratch; /* in_size doubles */
	float *tmp;        /* in_size floats: hwc transposition */
	dp_image_dec *img;
	pthread_t th;
} worker;

/* decode(): an image that did not decode (skippable), e set */
#define BAD_IMAGE 2

struct dp_data {
	dp_data_opts o;
	char *feature, *label, *cmd, *cache_dir;
	char *cmd_run; /* the command of the epoch, expanded: for messages */
	source *src;
	size_t nsrc;
	uint64_t cache_total;
	/* the epoch in progress (producer state) */
	uint64_t epoch, skip, skip_fill;
	uint64_t pos;     /* records out of the shuffle this epoch (emit) */
	uint64_t skip_to; /* resuming: those up to this position are passed over */
	size_t *order, cur;
	dp_reader *rd;
	size_t rd_src;
	pid_t child;
	int input_done;
	uint64_t rec_no; /* records seen this epoch, for the shard filter */
	uint64_t out_no; /* records out of the shuffle, for the block shard filter */
	slot *buf;
	size_t nbuf;
	dp_rng rng;
	worker *w;         /* decode_threads + 1; w[0] the producer's */
	dp_data_stats st;  /* the producer's */
	dp_data_stats pub; /* a copy for the consumer, under mu when threaded */
	uint64_t batch_no;
	/* batches */
	dp_batch *slots;
	int nslots;
	/* reader thread */
	int threaded, running, stop;
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int head, count; /* ring: head = next to hand out, count filled */
	int held;        /* slot the consumer holds, -1 none */
	int done, status;
	dp_err terr;
	double wait_s;   /* the consumer's, under mu */
	/* the decode pool: the stage of records, decoded into job_b at
	 * job_base + k; workers take k from job_next */
	slot *stage;
	size_t nstage;
	int pool_up, pool_stop;
	pthread_mutex_t pmu;
	pthread_cond_t pcv, pdone;
	dp_batch *job_b;
	size_t job_base, job_n, job_next, job_done;
	int *job_rc;
	dp_err *job_err;
};

int dp_decode_parse(const char *s)
{
	if (!strcmp(s, "uint8") || !strcmp(s, "u8"))
		return DP_DECODE_UINT8;
	if (!strcmp(s, "float32") || !strcmp(s, "f32"))
		return DP_DECODE_FLOAT32;
	if (!strcmp(s, "float64") || !strcmp(s, "f64"))
		return DP_DECODE_FLOAT64;
	if (!strcmp(s, "none"))
		return DP_DECODE_NONE;
	if (!strcmp(s, "image"))
		return DP_DECODE_IMAGE;
	return -1;
}

const char *dp_decode_name(int d)
{
	switch (d) {
	case DP_DECODE_UINT8: return "uint8";
	case DP_DECODE_FLOAT32: return "float32";
	case DP_DECODE_FLOAT64: return "float64";
	case DP_DECODE_IMAGE: return "image";
	default: return "none";
	}
}

int dp_parse_scale(const char *opt, const char *s, double *out, dp_err *e)
{
	char *end;
	errno = 0;
	double a = strtod(s, &end), b = 1;
	int ok = end != s && !errno;
	if (ok && *end == '/') {
		const char *q = end + 1;
		b = strtod(q, &end);
		ok = end != q && !errno;
	}
	if (!ok || *end || !isfinite(a) || !isfinite(b) || b == 0 || !isfinite(a / b) || a / b == 0)
		return dp_seterr(e, DP_EARG, "%s '%s': want a non-zero number such as 0.5 or 1/255",
				 opt, s);
	/* inputs are float32: a scale past its range makes every value
	 * infinite (or zero) */
	if (fabs(a / b) > FLT_MAX || (float)(a / b) == 0)
		return dp_seterr(e, DP_ELIMIT,
				 "%s '%s': beyond float32's range (inputs are float32: a "
				 "magnitude from 1.4e-45 to 3.4e+38)",
				 opt, s);
	*out = a / b;
	return DP_OK;
}

int dp_data_opt(const char *name, const char *value, int *hwc, unsigned *threads, dp_err *e)
{
	if (!strcmp(name, "layout")) {
		if (strcmp(value, "chw") && strcmp(value, "hwc"))
			return dp_seterr(e, DP_EARG, "--layout '%s': want chw or hwc", value);
		*hwc = !strcmp(value, "hwc");
		return DP_OK;
	}
	if (!strcmp(name, "decode-threads")) {
		uint64_t n;
		int rc = dp_parse_count("--decode-threads", value, 0, 256, &n, e);
		if (rc == DP_OK)
			*threads = (unsigned)n;
		return rc;
	}
	return dp_seterr(e, DP_EARG, "unknown input option '%s'", name);
}

/* ---- sources --------------------------------------------------------------- */

static int add_source(dp_data *d, int kind, const char *path, const char *name, dp_err *e)
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
		return add_source(d, SRC_STREAM, "-", "stdin", e);
	}
	struct stat st;
	if (stat(path, &st) < 0)
		return dp_syserr(e, "%s", path);
	if (S_ISDIR(st.st_mode))
		return dp_seterr(e, DP_EARG, "%s: is a directory", path);
	if (!S_ISREG(st.st_mode))
		return add_source(d, SRC_STREAM, path, path, e);
	if (access(path, R_OK) < 0)
		return dp_syserr(e, "%s", path);
	return add_source(d, SRC_FILE, path, path, e);
}

/* Expand {rank}, {size} (from the options when given) and `extra` (a
 * name, value pair or NULL) in tmpl. */
static char *expand(const dp_data *d, const char *tmpl, const char *name, const char *value)
{
	char rb[16], sb[16];
	const char *vars[7];
	int n = 0;
	if (name) {
		vars[n++] = name;
		vars[n++] = value;
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

static int find_sources(dp_data *d, dp_err *e)
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
	pid_t pid = fork();
	if (pid < 0) {
		close(fds[0]);
		close(fds[1]);
		return dp_syserr(e, "command: fork");
	}
	if (pid == 0) {
		dup2(fds[1], STDOUT_FILENO);
		signal(SIGPIPE, SIG_DFL); /* we may stop reading early: let it end quietly */
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
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
static void abandon_source(dp_data *d, int drain)
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
static int next_record(dp_data *d, dp_record *r, dp_err *e)
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

/* ---- decoding ------------------------------------------------------------------ */

static int rec_err(dp_data *d, size_t src, uint64_t index, uint64_t offset, dp_err *e,
		   const char *fmt, ...) __attribute__((format(printf, 6, 7)));

static int rec_err(dp_data *d, size_t src, uint64_t index, uint64_t offset, dp_err *e,
		   const char *fmt, ...)
{
	char why[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	return dp_seterr(e, DP_EDATA, "%s: record %" PRIu64 " at byte %" PRIu64 ": %s",
			 d->src[src].name, index, offset, why);
}

/* The names of a record's features, for "missing" messages. */
static void feature_names(const dp_example *ex, char *buf, size_t len)
{
	size_t n = 0;
	buf[0] = 0;
	for (size_t i = 0; i < ex->n && n + 4 < len; i++) {
		char *nm = dp_shown(ex->f[i].name, ex->f[i].name_len > 40 ? 40 : ex->f[i].name_len);
		int w = snprintf(buf + n, len - n, "%s%s", i ? ", " : "", nm ? nm : "?");
		free(nm);
		if (w < 0 || (size_t)w >= len - n) {
			snprintf(buf + (len > 5 ? len - 5 : 0), 5, "...");
			return;
		}
		n += (size_t)w;
	}
	if (!ex->n)
		snprintf(buf, len, "none");
}

struct bytes_ctx {
	uint8_t *dst;
	size_t n, cap;
};

static int bytes_cat(const uint8_t *p, size_t len, void *c)
{
	struct bytes_ctx *b = c;
	if (len > b->cap - b->n) {
		b->n = b->cap + 1; /* too long */
		return 1;
	}
	memcpy(b->dst + b->n, p, len);
	b->n += len;
	return 0;
}

/* Fill out[0..n) from feature f as floats, bytes decoded as `raw` (enum
 * dp_decode; NONE: bytes are an error).  0, or -1 with a message in why
 * (a wrong size says what was found and what was expected: n, which is
 * `size_what`). */
static int decode_values(worker *w, const dp_feature *f, int raw, const char *what,
			 const char *fname, float *out, size_t n, const char *size_what, char *why,
			 size_t wl)
{
	switch (f->kind) {
	case DP_KIND_FLOAT:
	case DP_KIND_INT64:
		if (raw != DP_DECODE_NONE) {
			snprintf(why, wl, "%s '%s' is a%s list: --decode-raw is for bytes", what,
				 fname, f->kind == DP_KIND_FLOAT ? " float" : "n int64");
			return -1;
		}
		if (f->count != n) {
			snprintf(why, wl, "%s '%s' has %zu values, expected %zu (%s)", what, fname,
				 f->count, n, size_what);
			return -1;
		}
		if (f->kind == DP_KIND_FLOAT) {
			dp_feature_floats(f, out, n);
		} else {
			dp_feature_int64s(f, w->iscratch, n);
			for (size_t i = 0; i < n; i++)
				out[i] = (float)w->iscratch[i];
		}
		return 0;
	case DP_KIND_BYTES: {
		if (raw == DP_DECODE_NONE) {
			snprintf(why, wl, "%s '%s' is a bytes list%s", what, fname,
				 what[0] == 'f' ? ": give --decode-raw uint8, float32 or float64" : "");
			return -1;
		}
		size_t es = raw == DP_DECODE_UINT8 ? 1 : raw == DP_DECODE_FLOAT32 ? 4 : 8;
		size_t want = n * es, len;
		const uint8_t *p;
		if (f->count == 1) {
			dp_feature_bytes0(f, &p, &len);
		} else { /* several values: concatenated, through the scratch buffer */
			struct bytes_ctx bc = {(uint8_t *)w->iscratch, 0, want};
			dp_feature_bytes_each(f, bytes_cat, &bc);
			p = bc.dst;
			len = bc.n;
		}
		if (len != want) {
			char found[48];
			if (len > want && f->count > 1) /* not all counted */
				snprintf(found, sizeof found, "more than %zu", want);
			else
				snprintf(found, sizeof found, "%zu", len);
			snprintf(why, wl, "%s '%s' holds %s bytes, expected %zu (%zu %s values: %s)",
				 what, fname, found, want, n, dp_decode_name(raw), size_what);
			return -1;
		}
		if (es == 1) {
			for (size_t i = 0; i < n; i++)
				out[i] = (float)p[i];
		} else if (es == 4) {
			memcpy(out, p, want);
		} else {
			for (size_t i = 0; i < n; i++) {
				double v;
				memcpy(&v, p + 8 * i, 8);
				out[i] = (float)v;
				if (isfinite(v) && !isfinite(out[i])) {
					snprintf(why, wl, "%s '%s': value %zu is %g, beyond float32's range",
						 what, fname, i, v);
					return -1;
				}
			}
		}
		return 0;
	}
	default:
		snprintf(why, wl, "%s '%s' has no values", what, fname);
		return -1;
	}
}

/* The record's image in x: (C, H, W) floats.  BAD_IMAGE when it does not
 * decode. */
static int decode_image(worker *w, const dp_feature *fx, size_t src, uint64_t index,
			uint64_t offset, float *x, dp_err *e)
{
	dp_data *d = w->d;
	const uint8_t *p;
	size_t len;
	if (fx->kind != DP_KIND_BYTES || fx->count != 1 || dp_feature_bytes0(fx, &p, &len) != 1)
		return rec_err(d, src, index, offset, e,
			       "feature '%s' is a%s %s list of %zu values: --decode image wants one "
			       "bytes value, the JPEG or PNG file",
			       d->feature, fx->kind == DP_KIND_INT64 ? "n" : "",
			       dp_kind_name(fx->kind), fx->count);
	uint64_t seed = dp_rng_key(d->o.seed, 4,
				   (uint64_t[]){DP_RNG_AUGMENT, d->epoch, src, index});
	dp_err ie;
	int rc = dp_image_transform(w->img, p, len, &d->o.image, seed, x, &ie);
	if (rc == DP_ENOMEM)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	if (rc < 0) { /* named by its image/filename too, when it has one */
		const dp_feature *fn = dp_example_get(&w->ex, "image/filename");
		const uint8_t *np = NULL;
		size_t nl = 0;
		char *shown = NULL; /* escaped: a name can hold terminal controls */
		if (fn && fn->kind == DP_KIND_BYTES && dp_feature_bytes0(fn, &np, &nl) == 1 &&
		    nl < 256 && (shown = dp_shown(np, nl)))
			rec_err(d, src, index, offset, e, "%s: %s", shown, ie.msg);
		else
			rec_err(d, src, index, offset, e, "feature '%s': %s", d->feature, ie.msg);
		free(shown);
		return BAD_IMAGE;
	}
	return DP_OK;
}

/* A raw array stored (H, W, C), in x, to (C, H, W). */
static void to_chw(worker *w, float *x)
{
	size_t c = w->d->o.shape[0], hw = w->d->o.shape[1] * w->d->o.shape[2];
	memcpy(w->tmp, x, c * hw * sizeof *x);
	for (size_t i = 0; i < hw; i++)
		for (size_t k = 0; k < c; k++)
			x[k * hw + i] = w->tmp[i * c + k];
}

/* An int64 feature of one value, by either of two names; -1 if none. */
static int64_t dim_of(const dp_example *ex, const char *a, const char *b)
{
	const dp_feature *f = dp_example_get(ex, a);
	if (!f)
		f = dp_example_get(ex, b);
	int64_t v;
	if (!f || f->kind != DP_KIND_INT64 || f->count != 1 || dp_feature_int64s(f, &v, 1) != 1)
		return -1;
	return v;
}

/* A raw record that says its height, width and channels (TensorFlow's
 * image/height... or height, width, depth) where the input shape read as
 * C x H x W disagrees but H x W x C agrees: the shape was given
 * channels-last. */
static int check_dims(worker *w, size_t src, uint64_t index, uint64_t offset, dp_err *e)
{
	dp_data *d = w->d;
	const size_t *sh = d->o.shape;
	int64_t h = dim_of(&w->ex, "image/height", "height");
	int64_t wd = dim_of(&w->ex, "image/width", "width");
	int64_t c = dim_of(&w->ex, "image/channels", "depth");
	if (h < 0 || wd < 0 || c < 0 || !sh[0])
		return DP_OK;
	if ((size_t)c == sh[0] && (size_t)h == sh[1] && (size_t)wd == sh[2])
		return DP_OK;
	if ((size_t)h == sh[0] && (size_t)wd == sh[1] && (size_t)c == sh[2])
		return rec_err(d, src, index, offset, e,
			       "the record says %" PRId64 "x%" PRId64 " pixels of %" PRId64
			       " channels, but the input shape %zux%zux%zu is C x H x W: give "
			       "--input-shape %" PRId64 "x%" PRId64 "x%" PRId64 "%s",
			       h, wd, c, sh[0], sh[1], sh[2], c, h, wd,
			       d->o.hwc ? "" : " --layout hwc (if the bytes are channels-last)");
	return DP_OK;
}

/* Decode record (data, len) into sample i of batch b with worker w.
 * DP_OK, BAD_IMAGE (e set), or an error. */
static int decode(worker *w, const uint8_t *data, size_t len, size_t src, uint64_t index,
		  uint64_t offset, dp_batch *b, size_t i, dp_err *e)
{
	dp_data *d = w->d;
	dp_err pe;
	if (dp_example_parse(&w->ex, data, len, &pe) < 0)
		return pe.code == DP_ENOMEM ? dp_seterr(e, DP_ENOMEM, "out of memory")
					    : rec_err(d, src, index, offset, e, "%s", pe.msg);
	const dp_feature *fx = dp_example_get(&w->ex, d->feature);
	const dp_feature *fy = dp_example_get(&w->ex, d->label);
	char why[512], names[256];
	if (!fx || !fy) {
		feature_names(&w->ex, names, sizeof names);
		return rec_err(d, src, index, offset, e, "no %s '%s' (the record has: %s)",
			       fx ? "label" : "feature", fx ? d->label : d->feature, names);
	}
	size_t n = d->o.in_size;
	float *x = b->x + i * n;
	if (b->src) {
		b->src[i] = (uint32_t)src;
		b->rec[i] = index;
	}
	int rc;
	if (d->o.decode == DP_DECODE_IMAGE) {
		if ((rc = decode_image(w, fx, src, index, offset, x, e)) != DP_OK)
			return rc;
		goto label;
	}
	if (index == 0 && (rc = check_dims(w, src, index, offset, e)) < 0)
		return rc;
	if (decode_values(w, fx, d->o.decode, "feature", d->feature, x, n,
			  "the size of the input shape", why, sizeof why) < 0)
		return rec_err(d, src, index, offset, e, "%s", why);
	if (d->o.hwc)
		to_chw(w, x);
	for (size_t j = 0; j < n; j++)
		if (!isfinite(x[j]))
			return rec_err(d, src, index, offset, e, "feature '%s': value %zu is %s",
				       d->feature, j, isnan(x[j]) ? "NaN" : "infinite");
	float sc = (float)d->o.scale;
	if (sc != 1.0f)
		for (size_t j = 0; j < n; j++) {
			float v = x[j] * sc;
			if (!isfinite(v)) /* the scale's doing, not the data's */
				return rec_err(d, src, index, offset, e,
					       "feature '%s': value %zu (%g) times --scale %g is beyond "
					       "float32's range: lower --scale",
					       d->feature, j, (double)x[j], d->o.scale);
			x[j] = v;
		}
label:
	if (d->o.label_kind == DP_LABEL_CLASS) {
		int64_t v;
		if (fy->kind == DP_KIND_INT64 && fy->count == 1) {
			dp_feature_int64s(fy, &v, 1);
		} else if (fy->kind == DP_KIND_FLOAT && fy->count == 1) {
			float fv;
			dp_feature_floats(fy, &fv, 1);
			if (!(fv == floorf(fv)) || fabsf(fv) > 1e9f)
				return rec_err(d, src, index, offset, e,
					       "label '%s' is %g, not a class number", d->label, fv);
			v = (int64_t)fv;
		} else {
			return rec_err(d, src, index, offset, e,
				       "label '%s' is a %s list of %zu values: want one int64 class",
				       d->label, dp_kind_name(fy->kind), fy->count);
		}
		if (v < 0 || (uint64_t)v >= d->o.nclass)
			return rec_err(d, src, index, offset, e,
				       "label '%s' is %" PRId64 ", outside 0..%zu (the model has %zu "
				       "classes)",
				       d->label, v, d->o.nclass - 1, d->o.nclass);
		b->y[i] = (int32_t)v;
	} else {
		size_t k = d->o.label_size;
		float *t = b->t + i * k;
		if (decode_values(w, fy, DP_DECODE_NONE, "label", d->label, t, k,
				  "the model's output size", why, sizeof why) < 0)
			return rec_err(d, src, index, offset, e, "%s", why);
		for (size_t j = 0; j < k; j++)
			if (!isfinite(t[j]))
				return rec_err(d, src, index, offset, e, "label '%s': value %zu is %s",
					       d->label, j, isnan(t[j]) ? "NaN" : "infinite");
	}
	return DP_OK;
}

/* ---- the producer ------------------------------------------------------------------ */

static int slot_store(slot *s, const uint8_t *data, size_t len, size_t src, uint64_t index,
		      uint64_t offset)
{
	if (len > s->cap) {
		size_t nc = len + len / 4 + 64;
		uint8_t *p = realloc(s->p, nc);
		if (!p)
			return DP_ENOMEM;
		s->p = p;
		s->cap = nc;
	}
	memcpy(s->p, data, len);
	s->len = len;
	s->src = src;
	s->index = index;
	s->offset = offset;
	return DP_OK;
}

/* An image that did not decode (e): 0 when skipped, else its error. */
static int skipped(dp_data *d, const dp_err *e)
{
	if (!d->o.skip_corrupt)
		return e->code;
	d->st.corrupt++;
	if (d->o.on_skip)
		d->o.on_skip(d->o.skip_ctx, e);
	return 0;
}

/* Send one record to the batch (or past it, while skipping).  Returns 1
 * when the batch is full. */
static int emit(dp_data *d, const uint8_t *data, size_t len, size_t src, uint64_t index,
		uint64_t offset, dp_batch *b, dp_err *e)
{
	d->pos++;
	if (d->o.shard_count > 1 && d->o.shard_block) {
		uint64_t k = d->out_no++;
		if ((k / d->o.shard_block) % d->o.shard_count != d->o.shard_index) {
			d->st.not_in_shard++;
			return 0;
		}
	}
	if (d->pos <= d->skip_to)
		return 0;
	if (d->skip) {
		if (++d->skip_fill == d->o.batch) {
			d->skip_fill = 0;
			d->skip--;
			d->batch_no++;
		}
		return 0;
	}
	if (d->stage) { /* for the pool */
		if (slot_store(&d->stage[d->nstage], data, len, src, index, offset) < 0)
			return dp_seterr(e, DP_ENOMEM, "out of memory for the decode stage");
		d->nstage++;
		return b->n + d->nstage == d->o.batch;
	}
	int rc = decode(&d->w[0], data, len, src, index, offset, b, b->n, e);
	if (rc == BAD_IMAGE)
		return skipped(d, e);
	if (rc < 0)
		return rc;
	b->n++;
	return b->n == d->o.batch;
}

/* ---- the decode pool ------------------------------------------------------------ */

/* Decode the staged records the pool has not taken yet.  Called with pmu
 * held; returns with it held. */
static void work(worker *w)
{
	dp_data *d = w->d;
	while (d->job_next < d->job_n) {
		size_t k = d->job_next++;
		pthread_mutex_unlock(&d->pmu);
		const slot *s = &d->stage[k];
		int rc = decode(w, s->p, s->len, s->src, s->index, s->offset, d->job_b,
				d->job_base + k, &d->job_err[k]);
		pthread_mutex_lock(&d->pmu);
		d->job_rc[k] = rc;
		if (++d->job_done == d->job_n)
			pthread_cond_broadcast(&d->pdone);
	}
}

static void *pool_thread(void *arg)
{
	worker *w = arg;
	dp_data *d = w->d;
	pthread_mutex_lock(&d->pmu);
	while (!d->pool_stop) {
		work(w);
		pthread_cond_wait(&d->pcv, &d->pmu);
	}
	pthread_mutex_unlock(&d->pmu);
	return NULL;
}

/* Decode the stage into b after its b->n samples, with the pool; close
 * up the holes of skipped images.  The first error in stage order wins,
 * so that it does not depend on the threads. */
static int run_stage(dp_data *d, dp_batch *b, dp_err *e)
{
	size_t n = d->nstage, base = b->n;
	if (!n)
		return DP_OK;
	pthread_mutex_lock(&d->pmu);
	d->job_b = b;
	d->job_base = base;
	d->job_n = n;
	d->job_next = d->job_done = 0;
	pthread_cond_broadcast(&d->pcv);
	work(&d->w[0]);
	while (d->job_done < d->job_n)
		pthread_cond_wait(&d->pdone, &d->pmu);
	d->job_n = 0;
	pthread_mutex_unlock(&d->pmu);
	d->nstage = 0;
	size_t in = d->o.in_size, k = d->o.label_size;
	for (size_t j = 0; j < n; j++) {
		int rc = d->job_rc[j];
		if (rc == BAD_IMAGE && (rc = skipped(d, &d->job_err[j])) == 0)
			continue;
		if (rc < 0) {
			if (e)
				*e = d->job_err[j];
			return rc;
		}
		size_t from = base + j, to = b->n++;
		if (from == to)
			continue;
		memcpy(b->x + to * in, b->x + from * in, in * sizeof *b->x);
		if (b->y)
			b->y[to] = b->y[from];
		if (b->t)
			memcpy(b->t + to * k, b->t + from * k, k * sizeof *b->t);
		if (b->src) {
			b->src[to] = b->src[from];
			b->rec[to] = b->rec[from];
		}
	}
	return DP_OK;
}

static void pool_stop(dp_data *d)
{
	if (!d->pool_up)
		return;
	pthread_mutex_lock(&d->pmu);
	d->pool_stop = 1;
	pthread_cond_broadcast(&d->pcv);
	pthread_mutex_unlock(&d->pmu);
	for (unsigned i = 1; i <= d->o.decode_threads; i++)
		if (d->w[i].th)
			pthread_join(d->w[i].th, NULL);
	pthread_mutex_destroy(&d->pmu);
	pthread_cond_destroy(&d->pcv);
	pthread_cond_destroy(&d->pdone);
	d->pool_up = 0;
}

static int pool_start(dp_data *d, dp_err *e)
{
	pthread_mutex_init(&d->pmu, NULL);
	pthread_cond_init(&d->pcv, NULL);
	pthread_cond_init(&d->pdone, NULL);
	d->pool_up = 1;
	for (unsigned i = 1; i <= d->o.decode_threads; i++) {
		int rc = dp_thread_create(&d->w[i].th, pool_thread, &d->w[i]);
		if (rc) {
			d->w[i].th = 0;
			errno = rc;
			return dp_syserr(e, "data: decode thread");
		}
	}
	return DP_OK;
}

/* Fill b: 1 with a batch (possibly partial at the end), 0 at the end of
 * the epoch, or an error. */
static int fill(dp_data *d, dp_batch *b, dp_err *e)
{
	b->n = 0;
	int rc;
	size_t cap = d->o.shuffle > 1 ? d->o.shuffle : 0;
	for (;;) {
		dp_record r;
		int got = 0;
		if (!d->input_done) {
			rc = next_record(d, &r, e);
			if (rc < 0)
				return rc;
			if (rc == 0)
				d->input_done = 1;
			else
				got = 1;
		}
		if (!cap) {
			if (!got)
				break;
			rc = emit(d, r.data, r.len, d->rd_src, r.index, r.offset, b, e);
		} else if (got && d->nbuf < cap) {
			if (slot_store(&d->buf[d->nbuf], r.data, r.len, d->rd_src, r.index, r.offset) < 0)
				return dp_seterr(e, DP_ENOMEM, "out of memory for the shuffle buffer");
			d->nbuf++;
			continue;
		} else if (got) {
			slot *s = &d->buf[dp_rng_below(&d->rng, d->nbuf)];
			rc = emit(d, s->p, s->len, s->src, s->index, s->offset, b, e);
			if (rc >= 0 && slot_store(s, r.data, r.len, d->rd_src, r.index, r.offset) < 0)
				return dp_seterr(e, DP_ENOMEM, "out of memory for the shuffle buffer");
		} else if (d->nbuf) {
			size_t j = (size_t)dp_rng_below(&d->rng, d->nbuf);
			slot *s = &d->buf[j];
			rc = emit(d, s->p, s->len, s->src, s->index, s->offset, b, e);
			slot t = *s; /* move the last one into the hole, keep buffers */
			*s = d->buf[d->nbuf - 1];
			d->buf[d->nbuf - 1] = t;
			d->nbuf--;
		} else {
			break;
		}
		if (rc < 0)
			return rc;
		if (rc == 1 && d->stage) {
			if ((rc = run_stage(d, b, e)) < 0)
				return rc;
			rc = b->n == d->o.batch;
		}
		if (rc == 1)
			goto full;
	}
	if (d->stage && (rc = run_stage(d, b, e)) < 0)
		return rc;
	if (b->n == 0)
		return 0;
	if (d->o.drop_last && b->n < d->o.batch) {
		d->st.dropped += b->n;
		b->n = 0;
		return 0;
	}
full:
	b->index = d->batch_no++;
	b->pos = d->pos;
	d->st.samples += b->n;
	d->st.batches++;
	return 1;
}

/* ---- the reader thread --------------------------------------------------------------- */

static void *producer(void *arg)
{
	dp_data *d = arg;
	int old;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
	pthread_mutex_lock(&d->mu);
	for (;;) {
		/* a free slot: not filled, not held */
		while (!d->stop && d->count >= d->nslots)
			pthread_cond_wait(&d->cv, &d->mu);
		if (d->stop)
			break;
		int w = (d->head + d->count) % d->nslots;
		pthread_mutex_unlock(&d->mu);
		dp_err e;
		int rc = fill(d, &d->slots[w], &e);
		pthread_mutex_lock(&d->mu);
		d->pub = d->st;
		if (rc == 1) {
			d->count++;
		} else {
			d->done = 1;
			d->status = rc;
			if (rc < 0)
				d->terr = e;
		}
		pthread_cond_broadcast(&d->cv);
		if (rc != 1)
			break;
	}
	pthread_mutex_unlock(&d->mu);
	return NULL;
}

static void stop_thread(dp_data *d)
{
	if (!d->running)
		return;
	pthread_mutex_lock(&d->mu);
	d->stop = 1;
	pthread_cond_broadcast(&d->cv);
	int done = d->done;
	pthread_mutex_unlock(&d->mu);
	if (!done)
		pthread_cancel(d->th); /* acts only while it is blocked reading */
	pthread_join(d->th, NULL);
	d->running = 0;
}

/* ---- public ------------------------------------------------------------------------------ */

void dp_data_close(dp_data *d)
{
	if (!d)
		return;
	stop_thread(d);
	pool_stop(d);
	abandon_source(d, 0);
	for (size_t i = 0; d->w && i <= d->o.decode_threads; i++) {
		worker *w = &d->w[i];
		dp_example_free(&w->ex);
		free(w->iscratch);
		free(w->tmp);
		dp_image_dec_free(w->img);
	}
	free(d->w);
	for (size_t i = 0; d->stage && i < d->o.batch; i++)
		free(d->stage[i].p);
	free(d->stage);
	free(d->job_rc);
	free(d->job_err);
	for (size_t i = 0; i < d->nsrc; i++) {
		source *s = &d->src[i];
		if (s->cw)
			dp_writer_free(s->cw);
		if (s->cache_fd >= 0)
			close(s->cache_fd);
		free(s->mem);
		free(s->path);
		free(s->name);
	}
	free(d->src);
	if (d->buf)
		for (size_t i = 0; i < (d->o.shuffle > 1 ? d->o.shuffle : 0); i++)
			free(d->buf[i].p);
	free(d->buf);
	for (int i = 0; i < d->nslots; i++) {
		dp_batch *b = &d->slots[i];
		if (d->o.free) {
			d->o.free(d->o.alloc_ctx, b->x);
			d->o.free(d->o.alloc_ctx, b->y);
			d->o.free(d->o.alloc_ctx, b->t);
		} else {
			free(b->x);
			free(b->y);
			free(b->t);
		}
		free(b->src);
		free(b->rec);
	}
	free(d->slots);
	free(d->order);
	if (d->threaded) {
		pthread_mutex_destroy(&d->mu);
		pthread_cond_destroy(&d->cv);
	}
	free(d->feature);
	free(d->label);
	free(d->cmd);
	free(d->cmd_run);
	free(d->cache_dir);
	free(d);
}

static void *balloc(dp_data *d, size_t bytes)
{
	if (!bytes)
		return NULL;
	return d->o.alloc ? d->o.alloc(d->o.alloc_ctx, bytes) : malloc(bytes);
}

dp_data *dp_data_open(const dp_data_opts *o, dp_err *e)
{
	if (!o->feature || !o->label || !o->in_size || !o->batch ||
	    (o->label_kind == DP_LABEL_CLASS && o->nclass < 1) ||
	    (o->label_kind == DP_LABEL_VECTOR && o->label_size < 1) ||
	    (o->label_kind != DP_LABEL_CLASS && o->label_kind != DP_LABEL_VECTOR) ||
	    (!o->cmd && !o->ninputs) || (o->shard_count > 1 && o->shard_index >= o->shard_count) ||
	    o->prefetch < 0 || o->prefetch > 64 || o->shuffle > (1u << 28) ||
	    o->decode_threads > 256 ||
	    ((o->hwc || o->decode == DP_DECODE_IMAGE) &&
	     o->shape[0] * o->shape[1] * o->shape[2] != o->in_size)) {
		dp_seterr(e, DP_EARG, "data: bad options");
		return NULL;
	}
	dp_data *d = calloc(1, sizeof *d);
	if (!d) {
		dp_seterr(e, DP_ENOMEM, "out of memory");
		return NULL;
	}
	d->o = *o;
	d->held = -1;
	if (!(d->o.scale != 0))
		d->o.scale = 1;
	const char *td = o->cache_dir ? o->cache_dir : getenv("TMPDIR");
	d->feature = strdup(o->feature);
	d->label = strdup(o->label);
	d->cmd = o->cmd ? strdup(o->cmd) : NULL;
	d->cache_dir = strdup(td && *td ? td : "/tmp");
	if (!d->feature || !d->label || (o->cmd && !d->cmd) || !d->cache_dir)
		goto nomem;
	if (o->decode == DP_DECODE_IMAGE) {
		dp_image_tf *t = &d->o.image;
		t->channels = (int)o->shape[0];
		t->height = (uint32_t)o->shape[1];
		t->width = (uint32_t)o->shape[2];
		t->scale = (float)d->o.scale;
		t->hwc = 0;
		if (dp_image_tf_check(t, e) < 0)
			goto fail;
	}
	size_t isz = o->in_size > o->label_size ? o->in_size : o->label_size;
	if (!(d->w = calloc(o->decode_threads + 1, sizeof *d->w)))
		goto nomem;
	for (size_t i = 0; i <= o->decode_threads; i++) {
		worker *w = &d->w[i];
		w->d = d;
		if (!(w->iscratch = malloc(isz * sizeof(double) + 8)) ||
		    (o->hwc && !(w->tmp = malloc(o->in_size * sizeof(float)))) ||
		    (o->decode == DP_DECODE_IMAGE && !(w->img = dp_image_dec_new())))
			goto nomem;
	}
	if (o->decode_threads &&
	    (!(d->stage = calloc(o->batch, sizeof *d->stage)) ||
	     !(d->job_rc = calloc(o->batch, sizeof *d->job_rc)) ||
	     !(d->job_err = calloc(o->batch, sizeof *d->job_err))))
		goto nomem;
	if (o->decode_threads && pool_start(d, e) < 0)
		goto fail;
	int rc = o->cmd ? add_source(d, SRC_CMD, "command", "command", e) : find_sources(d, e);
	if (rc < 0)
		goto fail;
	d->order = malloc(d->nsrc * sizeof *d->order);
	if (!d->order)
		goto nomem;
	if (o->shuffle > 1 && !(d->buf = calloc(o->shuffle, sizeof *d->buf)))
		goto nomem;
	d->threaded = o->prefetch > 0;
	d->nslots = d->threaded ? o->prefetch + 1 : 1;
	if (!(d->slots = calloc((size_t)d->nslots, sizeof *d->slots)))
		goto nomem;
	for (int i = 0; i < d->nslots; i++) {
		dp_batch *b = &d->slots[i];
		b->x = balloc(d, o->batch * o->in_size * sizeof(float));
		if (o->label_kind == DP_LABEL_CLASS)
			b->y = balloc(d, o->batch * sizeof(int32_t));
		else
			b->t = balloc(d, o->batch * o->label_size * sizeof(float));
		if (!b->x || (!b->y && !b->t))
			goto nomem;
		if (o->origins && (!(b->src = malloc(o->batch * sizeof *b->src)) ||
				   !(b->rec = malloc(o->batch * sizeof *b->rec))))
			goto nomem;
	}
	if (d->threaded) {
		pthread_mutex_init(&d->mu, NULL);
		pthread_cond_init(&d->cv, NULL);
	}
	return d;
nomem:
	dp_seterr(e, DP_ENOMEM, "out of memory");
fail:
	dp_data_close(d);
	return NULL;
}

int dp_data_epoch(dp_data *d, uint64_t epoch, uint64_t skip, dp_err *e)
{
	return dp_data_epoch_at(d, epoch, skip, 0, e);
}

int dp_data_epoch_at(dp_data *d, uint64_t epoch, uint64_t batches, uint64_t pos, dp_err *e)
{
	stop_thread(d);
	abandon_source(d, 1);
	d->epoch = epoch;
	d->skip = pos ? 0 : batches;
	d->skip_fill = 0;
	d->pos = 0;
	d->skip_to = pos;
	d->batch_no = pos ? batches : 0;
	d->cur = 0;
	d->input_done = 0;
	d->rec_no = 0;
	d->out_no = 0;
	d->nbuf = 0;
	d->nstage = 0;
	d->wait_s = 0;
	uint64_t cached = d->st.cached_bytes;
	memset(&d->st, 0, sizeof d->st);
	d->st.cached_bytes = cached;
	d->pub = d->st;
	for (size_t i = 0; i < d->nsrc; i++)
		d->order[i] = i;
	if (d->o.shuffle > 1 && d->nsrc > 1) {
		dp_rng r = {dp_rng_key(d->o.seed, 2, (uint64_t[]){DP_RNG_FILES, epoch}), 0};
		for (size_t i = d->nsrc - 1; i > 0; i--) {
			size_t j = (size_t)dp_rng_below(&r, i + 1), t = d->order[i];
			d->order[i] = d->order[j];
			d->order[j] = t;
		}
	}
	d->rng.key = dp_rng_key(d->o.seed, 2, (uint64_t[]){DP_RNG_SHUFFLE, epoch});
	d->rng.counter = 0;
	if (d->threaded) {
		d->stop = d->done = 0;
		d->status = 0;
		d->head = d->count = 0;
		d->held = -1;
		int rc = dp_thread_create(&d->th, producer, d);
		if (rc) {
			errno = rc;
			return dp_syserr(e, "data: reader thread");
		}
		d->running = 1;
	}
	return DP_OK;
}

int dp_data_next(dp_data *d, const dp_batch **b, dp_err *e)
{
	double t0 = dp_now();
	if (!d->threaded) {
		int rc = fill(d, &d->slots[0], e);
		if (rc == 1)
			*b = &d->slots[0];
		d->wait_s += dp_now() - t0;
		return rc;
	}
	if (!d->running)
		return dp_seterr(e, DP_EARG, "data: no epoch started");
	pthread_mutex_lock(&d->mu);
	if (d->held >= 0) { /* release the previous batch */
		d->head = (d->head + 1) % d->nslots;
		d->count--;
		d->held = -1;
		pthread_cond_broadcast(&d->cv);
	}
	while (!d->count && !d->done)
		pthread_cond_wait(&d->cv, &d->mu);
	d->wait_s += dp_now() - t0;
	int rc;
	if (d->count) {
		d->held = d->head;
		*b = &d->slots[d->head];
		rc = 1;
	} else {
		rc = d->status;
		if (rc < 0 && e)
			*e = d->terr;
	}
	pthread_mutex_unlock(&d->mu);
	return rc;
}

void dp_data_stats_get(dp_data *d, dp_data_stats *s)
{
	if (!d->threaded) {
		*s = d->st;
		s->wait_s = d->wait_s;
		return;
	}
	pthread_mutex_lock(&d->mu);
	*s = d->pub;
	s->wait_s = d->wait_s;
	pthread_mutex_unlock(&d->mu);
}

size_t dp_data_nsources(const dp_data *d) { return d->nsrc; }

const char *dp_data_source(const dp_data *d, size_t i)
{
	return i < d->nsrc ? d->src[i].name : NULL;
}
