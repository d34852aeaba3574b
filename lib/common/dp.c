/*
 * dp.c - errors, atomic outputs, ranks from the environment, templates.
 */
#define _GNU_SOURCE
#include "dp.h"

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

/* ---- Atomic outputs ----------------------------------------------------
 * The registry holds the temporary names still open, for dp_out_cleanup(),
 * which a signal handler calls in whatever thread took the signal.  So it
 * never moves and is read without locks: chunks of slots, each slot an
 * atomic pointer, chunks linked once and never freed.  Writers (open,
 * commit, abort) take a mutex among themselves and block the cleanup
 * signals in their own thread while they hold it; the threads libdp
 * starts block every signal (dp_thread_create), so a handler runs only in
 * the program's own threads and never meets a half-made change. */

#define CLEANUP_SIGNALS {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT}
#define REG_CHUNK 64

struct reg_chunk {
	char *_Atomic slot[REG_CHUNK];
	struct reg_chunk *_Atomic next;
};
static struct reg_chunk reg_head;
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;

static void block_signals(sigset_t *old)
{
	sigset_t s;
	int sigs[] = CLEANUP_SIGNALS;
	sigemptyset(&s);
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
		sigaddset(&s, sigs[i]);
	pthread_sigmask(SIG_BLOCK, &s, old);
}

/* Register tmp; the caller has the cleanup signals blocked.  Returns the
 * slot's number, or -1 when out of memory (the file is then not removed
 * by a signal, only by commit or abort). */
static int reg_add(char *tmp)
{
	int slot = -1, base = 0;
	pthread_mutex_lock(&reg_lock);
	struct reg_chunk *c = &reg_head, *last = c;
	for (; c && slot < 0; last = c, c = atomic_load(&c->next), base += REG_CHUNK)
		for (int i = 0; i < REG_CHUNK; i++)
			if (!atomic_load(&c->slot[i])) {
				atomic_store(&c->slot[i], tmp);
				slot = base + i;
				break;
			}
	if (slot < 0) {
		struct reg_chunk *n = calloc(1, sizeof *n);
		if (n) {
			atomic_store(&n->slot[0], tmp);
			atomic_store(&last->next, n); /* published whole */
			slot = base;
		}
	}
	pthread_mutex_unlock(&reg_lock);
	return slot;
}

static void reg_del(int slot)
{
	sigset_t old;
	if (slot < 0)
		return;
	block_signals(&old);
	pthread_mutex_lock(&reg_lock);
	struct reg_chunk *c = &reg_head;
	for (int k = slot / REG_CHUNK; k > 0 && c; k--)
		c = atomic_load(&c->next);
	if (c)
		atomic_store(&c->slot[slot % REG_CHUNK], NULL);
	pthread_mutex_unlock(&reg_lock);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* Async-signal-safe: atomic loads and unlink(2) only. */
void dp_out_cleanup(void)
{
	for (struct reg_chunk *c = &reg_head; c; c = atomic_load(&c->next))
		for (int i = 0; i < REG_CHUNK; i++) {
			char *t = atomic_load(&c->slot[i]);
			if (t)
				unlink(t);
		}
}

static void cleanup_handler(int sig)
{
	dp_out_cleanup();
	signal(sig, SIG_DFL);
	raise(sig);
}

int dp_thread_create(pthread_t *t, void *(*fn)(void *), void *arg)
{
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old); /* the new thread inherits it */
	int rc = pthread_create(t, NULL, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}

void dp_out_install_signal_cleanup(void)
{
	int sigs[] = CLEANUP_SIGNALS;
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
		struct sigaction sa, old;
		if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
			continue; /* keep what the parent chose (nohup, ignored SIGPIPE) */
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = cleanup_handler;
		sigemptyset(&sa.sa_mask);
		sigaction(sigs[i], &sa, NULL);
	}
}

int dp_out_open(dp_out *o, const char *path, dp_err *e)
{
	memset(o, 0, sizeof *o);
	o->slot = -1;
	if (strcmp(path, "-") == 0) {
		o->fd = STDOUT_FILENO;
		o->path = strdup("stdout");
		return o->path ? DP_OK : dp_seterr(e, DP_ENOMEM, "out of memory");
	}
	struct stat st;
	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
		/* a device, FIFO or socket (/dev/null, a named pipe): write to it
		 * as it is; a rename would replace it with a regular file */
		o->fd = open(path, O_WRONLY | O_CLOEXEC);
		if (o->fd < 0)
			return dp_syserr(e, "%s: cannot open", path);
		o->path = strdup(path);
		if (!o->path) {
			close(o->fd);
			return dp_seterr(e, DP_ENOMEM, "out of memory");
		}
		return DP_OK;
	}
	const char *slash = strrchr(path, '/');
	size_t dirlen = slash ? (size_t)(slash - path + 1) : 0;
	const char *base = path + dirlen;
	if (!*base)
		return dp_seterr(e, DP_EARG, "%s: not a file name", path);
	size_t n = strlen(path) + 16;
	o->path = strdup(path);
	o->tmp = malloc(n);
	if (!o->path || !o->tmp) {
		free(o->path);
		free(o->tmp);
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	}
	snprintf(o->tmp, n, "%.*s.%s.tmp.XXXXXX", (int)dirlen, path, base);
	sigset_t old;
	block_signals(&old); /* no window where the file exists unregistered */
	o->fd = mkostemp(o->tmp, O_CLOEXEC);
	int saved = errno;
	if (o->fd >= 0)
		o->slot = reg_add(o->tmp);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (o->fd < 0) {
		errno = saved;
		dp_syserr(e, "%s: cannot create", path);
		free(o->path);
		free(o->tmp);
		o->path = o->tmp = NULL;
		return e ? e->code : DP_EIO;
	}
	/* mkstemp makes 0600; outputs get the usual umask'd 0666. */
	mode_t um = umask(0);
	umask(um);
	fchmod(o->fd, 0666 & ~um);
	return DP_OK;
}

int dp_out_commit(dp_out *o, dp_err *e)
{
	int rc = DP_OK;
	if (!o->tmp) { /* stdout or a device: the caller checks its writes */
		if (o->fd != STDOUT_FILENO && close(o->fd) < 0)
			rc = dp_syserr(e, "%s: close", o->path);
		free(o->path);
		o->path = NULL;
		o->fd = -1;
		return rc;
	}
	if (close(o->fd) < 0)
		rc = dp_syserr(e, "%s: close", o->path);
	else if (rename(o->tmp, o->path) < 0)
		rc = dp_syserr(e, "%s: rename", o->path);
	if (rc < 0)
		unlink(o->tmp);
	reg_del(o->slot);
	free(o->path);
	free(o->tmp);
	o->path = o->tmp = NULL;
	o->fd = -1;
	return rc;
}

void dp_out_abort(dp_out *o)
{
	if (o->tmp) {
		close(o->fd);
		unlink(o->tmp);
		reg_del(o->slot);
	} else if (o->fd > STDOUT_FILENO) {
		close(o->fd); /* a device opened as it is */
	}
	free(o->path);
	free(o->tmp);
	o->path = o->tmp = NULL;
	o->fd = -1;
}

/* ---- Ranks and templates ---------------------------------------------- */

static int env_int(const char *name, int *out)
{
	const char *s = getenv(name);
	if (!s || !*s)
		return 0;
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || *end || v < 0 || v > INT_MAX)
		return 0;
	*out = (int)v;
	return 1;
}

void dp_rank_size(int *rank, int *size)
{
	static const char *const pairs[][2] = {
		{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
		{"PMI_RANK", "PMI_SIZE"},
		{"PMIX_RANK", "PMI_SIZE"},
		{"SLURM_PROCID", "SLURM_NTASKS"},
	};
	int r = -1, s = -1;
	for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
		int a, b;
		if (env_int(pairs[i][0], &a) && env_int(pairs[i][1], &b) && b > 0 && a < b) {
			r = a;
			s = b;
			break;
		}
	}
	if (*rank < 0)
		*rank = r >= 0 ? r : 0;
	if (*size < 0)
		*size = s > 0 ? s : 1;
}

/* The value of variable name[0..len) for dp_expand, or NULL. */
static const char *expand_var(const char *name, size_t len, const char *const *vars,
			      const char *rank, const char *size)
{
	for (const char *const *v = vars; v && v[0]; v += 2)
		if (strlen(v[0]) == len && memcmp(v[0], name, len) == 0)
			return v[1];
	if (len == 4 && memcmp(name, "rank", 4) == 0)
		return rank;
	if (len == 4 && memcmp(name, "size", 4) == 0)
		return size;
	return NULL;
}

char *dp_expand(const char *tmpl, const char *const *vars)
{
	int rank = -1, size = -1;
	char rbuf[16], sbuf[16], pbuf[64];
	dp_rank_size(&rank, &size);
	snprintf(rbuf, sizeof rbuf, "%d", rank);
	snprintf(sbuf, sizeof sbuf, "%d", size);
	size_t cap = strlen(tmpl) + 64, n = 0;
	char *out = malloc(cap);
	if (!out)
		return NULL;
	for (const char *p = tmpl; *p;) {
		const char *val = NULL;
		size_t skip = 1;
		if (*p == '{') {
			const char *close = strchr(p, '}');
			if (close) {
				size_t klen = (size_t)(close - p - 1);
				const char *colon = memchr(p + 1, ':', klen);
				val = expand_var(p + 1, klen, vars, rbuf, sbuf);
				/* {NAME:W}: a whole number zero-padded to W digits (1-32),
				 * e.g. {rank:5} as tfr-shard names shards: 00001 */
				if (!val && colon && close - colon >= 2 && close - colon <= 3) {
					int wd = 0;
					for (const char *q = colon + 1; q < close; q++)
						wd = *q >= '0' && *q <= '9' ? wd * 10 + (*q - '0') : -1000;
					const char *v = expand_var(p + 1, (size_t)(colon - p - 1), vars,
								   rbuf, sbuf);
					size_t vl = v ? strlen(v) : 0;
					if (v && wd >= 1 && wd <= 32 && vl && vl < 32 &&
					    strspn(v, "0123456789") == vl) {
						size_t z = vl < (size_t)wd ? (size_t)wd - vl : 0;
						memset(pbuf, '0', z);
						memcpy(pbuf + z, v, vl + 1);
						val = pbuf;
					}
				}
				if (val)
					skip = klen + 2;
			}
		}
		size_t add = val ? strlen(val) : 1;
		if (n + add + 1 > cap) {
			cap = (n + add + 1) * 2;
			char *t = realloc(out, cap);
			if (!t) {
				free(out);
				return NULL;
			}
			out = t;
		}
		if (val)
			memcpy(out + n, val, add);
		else
			out[n] = *p;
		n += add;
		p += skip;
	}
	out[n] = 0;
	return out;
}

int dp_parse_count(const char *opt, const char *s, uint64_t min, uint64_t max, uint64_t *out,
		   dp_err *e)
{
	int hex = s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
	const char *d = hex ? s + 2 : s;
	char *end;
	errno = 0;
	unsigned long long v = 0;
	if (isxdigit((unsigned char)*d)) /* strtoull would take a sign or space */
		v = strtoull(d, &end, hex ? 16 : 10);
	if (!isxdigit((unsigned char)*d) || errno || *end || v < min || v > max) {
		if (max == UINT64_MAX)
			return dp_seterr(e, DP_EARG, "%s '%s': want a whole number, %" PRIu64 " or more",
					 opt, s, min);
		return dp_seterr(e, DP_EARG,
				 "%s '%s': want a whole number from %" PRIu64 " to %" PRIu64, opt, s,
				 min, max);
	}
	*out = v;
	return 0;
}

int dp_parse_part(const char *opt, const char *s, const char *const *vars, uint64_t *index,
		  uint64_t *count, dp_err *e)
{
	char *x = dp_expand(s, vars);
	if (!x)
		return dp_seterr(e, DP_ENOMEM, "%s: out of memory", opt);
	char *slash = strchr(x, '/');
	uint64_t i = 0, n = 0;
	int ok = slash != NULL;
	if (ok) {
		*slash = 0;
		ok = dp_parse_count(opt, slash + 1, 1, DP_PART_MAX, &n, NULL) == 0 &&
		     dp_parse_count(opt, x, 0, n - 1, &i, NULL) == 0;
		*slash = '/';
	}
	if (!ok) {
		if (strcmp(x, s))
			dp_seterr(e, DP_EARG,
				  "%s '%s' (%s): want I/N, part I from 0 to N-1 of N from 1 to %u", opt,
				  s, x, DP_PART_MAX);
		else
			dp_seterr(e, DP_EARG,
				  "%s '%s': want I/N, part I from 0 to N-1 of N from 1 to %u (e.g. 3/8 "
				  "or {rank}/{size})",
				  opt, s, DP_PART_MAX);
		free(x);
		return DP_EARG;
	}
	free(x);
	*index = i;
	*count = n;
	return 0;
}

int dp_parse_size(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (end == s || errno || !(v >= 0)) /* NaN too */
		return DP_EARG;
	double mul = 1;
	switch (*end) {
	case 'k': case 'K': mul = 1024.0; end++; break;
	case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
	case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
	case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
	}
	if (*end == 'i' || *end == 'I')
		end++;
	if (*end == 'b' || *end == 'B')
		end++;
	if (*end)
		return DP_EARG;
	v *= mul;
	if (v > 1.8e19)
		return DP_EARG;
	*out = (uint64_t)v;
	return DP_OK;
}

double dp_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
