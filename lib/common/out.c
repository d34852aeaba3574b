/*
 * out.c - outputs written whole or not at all, and the signal cleanup
 * of their temporary names (dp.h, "Outputs written whole or not at all").
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
		/* keep what the parent chose (nohup's SIGHUP, a background job's
		 * SIGINT), but for SIGPIPE: a reader that went away ends every
		 * program the same way, quietly with 141 as in a shell, even
		 * when the parent (Python's subprocess) ignored it */
		if (sigs[i] != SIGPIPE && sigaction(sigs[i], NULL, &old) == 0 &&
		    old.sa_handler == SIG_IGN)
			continue;
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = cleanup_handler;
		sigemptyset(&sa.sa_mask);
		sigaction(sigs[i], &sa, NULL);
	}
}

int dp_tmpfile(const char *dir, dp_err *e)
{
	dir = dp_tmpdir(dir);
#ifdef O_TMPFILE
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd >= 0)
		return fd;
	if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
		return dp_syserr(e, "%s: cannot create a temporary file", dir);
#endif
	/* No O_TMPFILE here: a name, unlinked at once, with the signals that
	 * would end the process held off in between. */
	size_t n = strlen(dir) + 32;
	char *path = malloc(n);
	if (!path)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	snprintf(path, n, "%s/.dp-tmp.XXXXXX", dir);
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	int tfd = mkostemp(path, O_CLOEXEC);
	int saved = errno;
	if (tfd >= 0)
		unlink(path);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	free(path);
	errno = saved;
	if (tfd < 0)
		return dp_syserr(e, "%s: cannot create a temporary file", dir);
	return tfd;
}

/* N when p names a descriptor of this process: /dev/stdout (1),
 * /dev/stderr (2), /dev/stdin (0), /dev/fd/N, /proc/self/fd/N,
 * /proc/PID/fd/N for our own PID; else -1. */
static int fd_path(const char *p)
{
	static const char *const pre[] = {"/dev/fd/", "/proc/self/fd/"};
	if (!strcmp(p, "/dev/stdin"))
		return 0;
	if (!strcmp(p, "/dev/stdout"))
		return 1;
	if (!strcmp(p, "/dev/stderr"))
		return 2;
	const char *n = NULL;
	for (size_t k = 0; k < 2 && !n; k++)
		if (!strncmp(p, pre[k], strlen(pre[k])))
			n = p + strlen(pre[k]);
	char own[48];
	snprintf(own, sizeof own, "/proc/%ld/fd/", (long)getpid());
	if (!n && !strncmp(p, own, strlen(own)))
		n = p + strlen(own);
	if (!n || !isdigit((unsigned char)*n))
		return -1;
	char *end;
	long v = strtol(n, &end, 10);
	return *end || v > INT_MAX ? -1 : (int)v;
}

/* Follow the symbolic links of path (up to 40) to where a file would be
 * written: *dst (malloc'd) is the last hop, which is not a link (or does
 * not exist yet).  *fdn is N when a hop names one of our descriptors
 * (fd_path: written in place), else -1.  Returns 0 or a status. */
static int resolve_out(const char *path, char **dst, int *fdn, dp_err *e)
{
	char *cur = strdup(path);
	*fdn = -1;
	if (!cur)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	for (int hop = 0;; hop++) {
		int n = fd_path(cur);
		if (n >= 0) {
			*fdn = n;
			*dst = cur;
			return 0;
		}
		struct stat st;
		if (lstat(cur, &st) < 0 || !S_ISLNK(st.st_mode)) {
			*dst = cur; /* a file, a device, a directory, or nothing yet */
			return 0;
		}
		if (hop == 40) {
			free(cur);
			errno = ELOOP;
			return dp_syserr(e, "%s", path);
		}
		char target[PATH_MAX];
		ssize_t len = readlink(cur, target, sizeof target - 1);
		if (len < 0) {
			int rc = dp_syserr(e, "%s: readlink", path);
			free(cur);
			return rc;
		}
		target[len] = 0;
		char *next;
		const char *slash = strrchr(cur, '/');
		if (target[0] == '/' || !slash) {
			next = strdup(target);
		} else { /* relative to the link's own directory */
			size_t dl = (size_t)(slash - cur + 1);
			next = malloc(dl + (size_t)len + 1);
			if (next) {
				memcpy(next, cur, dl);
				memcpy(next + dl, target, (size_t)len + 1);
			}
		}
		free(cur);
		if (!next)
			return dp_seterr(e, DP_ENOMEM, "out of memory");
		cur = next;
	}
}

/* The directory part of p ("." for a bare name), malloc'd. */
static char *dir_of(const char *p)
{
	const char *slash = strrchr(p, '/');
	if (!slash)
		return strdup(".");
	if (slash == p)
		return strdup("/");
	return strndup(p, (size_t)(slash - p));
}

/* path with its folder resolved ("./x" and "x" alike) and its links
 * followed, a dangling one too (writing to it creates what it names),
 * malloc'd; NULL when a folder does not exist. */
static char *canonical(const char *path)
{
	char *cur = strdup(path);
	for (int hops = 0; cur && hops < 40; hops++) { /* links, as the kernel would */
		char target[PATH_MAX];
		ssize_t n = readlink(cur, target, sizeof target - 1);
		if (n < 0)
			break;
		target[n] = 0;
		char *dir = dir_of(cur), *next = NULL;
		if (dir && asprintf(&next, "%s%s%s", target[0] == '/' ? "" : dir,
				    target[0] == '/' ? "" : "/", target) < 0)
			next = NULL;
		free(dir);
		free(cur);
		cur = next;
	}
	if (!cur)
		return NULL;
	char *dir = dir_of(cur), *real = dir ? realpath(dir, NULL) : NULL, *r = NULL;
	const char *slash = strrchr(cur, '/'), *base = slash ? slash + 1 : cur;
	if (real && asprintf(&r, "%s/%s", real, base) < 0)
		r = NULL;
	free(dir);
	free(real);
	free(cur);
	return r;
}

int dp_same_output(const char *a, const char *b)
{
	if (!strcmp(a, b))
		return 1;
	if (!strcmp(a, "-") || !strcmp(b, "-"))
		return 0;
	struct stat sa, sb;
	if (stat(a, &sa) == 0 && stat(b, &sb) == 0)
		return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
	char *ca = canonical(a), *cb = canonical(b);
	int same = ca && cb && !strcmp(ca, cb);
	free(ca);
	free(cb);
	return same;
}

int dp_out_check(const char *path, dp_err *e)
{
	if (!strcmp(path, "-"))
		return DP_OK;
	char *dst;
	int fdn;
	int rc = resolve_out(path, &dst, &fdn, e);
	if (rc < 0)
		return rc;
	struct stat st;
	if (fdn >= 0) {
		rc = fcntl(fdn, F_GETFL) < 0 ? dp_syserr(e, "%s: not an open descriptor", path) : 0;
	} else if (stat(dst, &st) == 0) {
		if (S_ISDIR(st.st_mode))
			rc = dp_seterr(e, DP_EIO, "%s: is a directory", path);
		else if (!S_ISREG(st.st_mode) && access(dst, W_OK) < 0)
			rc = dp_syserr(e, "%s: cannot write", path);
	}
	if (rc == 0 && fdn < 0 && (stat(dst, &st) < 0 || S_ISREG(st.st_mode))) {
		char *dir = dir_of(dst);
		if (!dir)
			rc = dp_seterr(e, DP_ENOMEM, "out of memory");
		else if (stat(dir, &st) < 0)
			rc = dp_syserr(e, "%s: cannot create (directory %s)", path, dir);
		else if (!S_ISDIR(st.st_mode))
			rc = dp_seterr(e, DP_EIO, "%s: cannot create (%s is not a directory)", path, dir);
		else if (access(dir, W_OK | X_OK) < 0)
			rc = dp_syserr(e, "%s: cannot create (directory %s)", path, dir);
		free(dir);
	}
	free(dst);
	return rc;
}

/* Write in place on descriptor fd (a device, a FIFO, a duplicate of one
 * of ours). */
static int out_in_place(dp_out *o, int fd, const char *path, char *dst, dp_err *e)
{
	o->fd = fd;
	o->dst = dst;
	o->path = strdup(path);
	if (!o->path) {
		close(fd);
		free(dst);
		o->dst = NULL;
		o->fd = -1;
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	}
	return DP_OK;
}

int dp_out_open(dp_out *o, const char *path, dp_err *e)
{
	memset(o, 0, sizeof *o);
	o->slot = -1;
	o->fd = -1;
	if (strcmp(path, "-") == 0) {
		o->fd = STDOUT_FILENO;
		o->path = strdup("stdout");
		return o->path ? DP_OK : dp_seterr(e, DP_ENOMEM, "out of memory");
	}
	char *dst;
	int fdn, rc = resolve_out(path, &dst, &fdn, e);
	if (rc < 0)
		return rc;
	if (fdn >= 0) { /* /dev/stdout and friends: that descriptor, as it is */
		int fd = fcntl(fdn, F_DUPFD_CLOEXEC, 3);
		if (fd < 0) {
			free(dst);
			return dp_syserr(e, "%s", path);
		}
		return out_in_place(o, fd, path, dst, e);
	}
	struct stat st;
	int exists = stat(dst, &st) == 0;
	if (exists && S_ISDIR(st.st_mode)) {
		free(dst);
		return dp_seterr(e, DP_EIO, "%s: is a directory", path);
	}
	if (exists && !S_ISREG(st.st_mode)) {
		/* a device, FIFO or socket (/dev/null, a named pipe): write to it
		 * as it is; a rename would replace it with a regular file */
		int fd = open(dst, O_WRONLY | O_CLOEXEC);
		if (fd < 0) {
			free(dst);
			return dp_syserr(e, "%s: cannot open", path);
		}
		return out_in_place(o, fd, path, dst, e);
	}
	const char *slash = strrchr(dst, '/');
	size_t dirlen = slash ? (size_t)(slash - dst + 1) : 0;
	const char *base = dst + dirlen;
	if (!*base) {
		free(dst);
		return dp_seterr(e, DP_EARG, "%s: not a file name", path);
	}
	size_t n = strlen(dst) + 16;
	o->dst = dst;
	o->path = strdup(path);
	o->tmp = malloc(n);
	char *dir = dir_of(dst);
	if (!o->path || !o->tmp || !dir) {
		free(dir);
		dp_out_abort(o);
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	}
	snprintf(o->tmp, n, "%.*s.%s.tmp.XXXXXX", (int)dirlen, dst, base);
	mode_t um = umask(0);
	umask(um);
	mode_t mode = exists ? (st.st_mode & 07777) : (0666 & ~um);
#ifdef O_TMPFILE
	o->fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
	o->anon = o->fd >= 0;
	int saved = errno;
	if (o->fd < 0 && saved != EOPNOTSUPP && saved != EISDIR && saved != EINVAL) {
		errno = saved;
		free(dir);
		dp_syserr(e, "%s: cannot create", path);
		dp_out_abort(o);
		return e ? e->code : DP_EIO;
	}
#endif
	free(dir);
	if (o->fd < 0) { /* no O_TMPFILE here: a named temporary, registered */
		sigset_t old;
		block_signals(&old); /* no window where the file exists unregistered */
		o->fd = mkostemp(o->tmp, O_CLOEXEC);
		int err = errno;
		if (o->fd >= 0)
			o->slot = reg_add(o->tmp);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		if (o->fd < 0) {
			errno = err;
			dp_syserr(e, "%s: cannot create", path);
			free(o->tmp);
			o->tmp = NULL; /* nothing to remove */
			dp_out_abort(o);
			return e ? e->code : DP_EIO;
		}
	}
	fchmod(o->fd, mode);
	if (exists && geteuid() == 0 && (st.st_uid != 0 || st.st_gid != 0))
		if (fchown(o->fd, st.st_uid, st.st_gid) < 0) {
			/* a file system without owners: keep ours */
		}
	return DP_OK;
}

int dp_out_retarget(dp_out *o, const char *path, dp_err *e)
{
	if (!o->tmp)
		return DP_OK;
	char *dst, *name = strdup(path);
	int fdn, rc = name ? resolve_out(path, &dst, &fdn, e) : dp_seterr(e, DP_ENOMEM, "out of memory");
	if (rc < 0) {
		free(name);
		return rc;
	}
	free(o->path);
	free(o->dst);
	o->path = name;
	o->dst = dst;
	return DP_OK;
}

/* Give an O_TMPFILE temporary its name (o->tmp, a fresh random one),
 * registered for the signal cleanup until the rename. */
static int out_name_anon(dp_out *o, dp_err *e)
{
	char proc[64];
	snprintf(proc, sizeof proc, "/proc/self/fd/%d", o->fd);
	size_t n = strlen(o->tmp);
	for (int tries = 0; tries < 100; tries++) {
		static const char az[] = "abcdefghijklmnopqrstuvwxyz0123456789";
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		dp_rng r;
		dp_rng_seed(&r, (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec,
			    (uint64_t)getpid() << 8 | (uint64_t)tries);
		for (size_t k = n - 6; k < n; k++)
			o->tmp[k] = az[dp_rng_below(&r, sizeof az - 1)];
		sigset_t old;
		block_signals(&old);
		int rc = linkat(AT_FDCWD, proc, AT_FDCWD, o->tmp, AT_SYMLINK_FOLLOW);
		int err = errno;
		if (rc == 0)
			o->slot = reg_add(o->tmp);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		if (rc == 0) {
			o->anon = 0;
			return 0;
		}
		if (err != EEXIST) {
			errno = err;
			return dp_syserr(e, "%s: cannot link the temporary file", o->path);
		}
	}
	errno = EEXIST;
	return dp_syserr(e, "%s: cannot name the temporary file", o->path);
}

static void out_free(dp_out *o)
{
	free(o->path);
	free(o->tmp);
	free(o->dst);
	o->path = o->tmp = o->dst = NULL;
	o->fd = -1;
	o->slot = -1;
	o->anon = 0;
}

/* Close an output written in place (never stdout itself). */
static int out_close_in_place(dp_out *o, dp_err *e)
{
	int rc = DP_OK;
	if (o->fd > STDOUT_FILENO && close(o->fd) < 0)
		rc = dp_syserr(e, "%s: close", o->path);
	out_free(o);
	return rc;
}

int dp_out_commit(dp_out *o, dp_err *e)
{
	dp_out *one = o;
	return dp_out_commit_all(&one, 1, e);
}

void dp_out_abort(dp_out *o)
{
	if (o->tmp) {
		if (o->fd >= 0)
			close(o->fd);
		if (!o->anon) {
			unlink(o->tmp);
			reg_del(o->slot);
		}
	} else if (o->fd > STDOUT_FILENO) {
		close(o->fd); /* a device opened as it is */
	}
	out_free(o);
}

/* Keep the file that o will replace aside, as a hard link named
 * aside (registered for the signal cleanup); "" when there is none. */
static int keep_aside(const dp_out *o, char *aside, size_t cap, int *slot, dp_err *e)
{
	aside[0] = 0;
	*slot = -1;
	struct stat st;
	if (lstat(o->dst, &st) < 0)
		return errno == ENOENT ? 0 : dp_syserr(e, "%s", o->path);
	snprintf(aside, cap, "%s.old", o->tmp);
	sigset_t old;
	block_signals(&old);
	int rc = link(o->dst, aside);
	if (rc == 0)
		*slot = reg_add(aside);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc < 0) {
		aside[0] = 0;
		return dp_syserr(e, "%s: cannot keep the old file aside", o->path);
	}
	return 0;
}

struct landing {
	char aside[PATH_MAX + 32]; /* the replaced file, kept until all landed */
	int aside_slot;
	int landed;
};

int dp_out_commit_all(dp_out *const *outs, size_t n, dp_err *e)
{
	int rc = DP_OK;
	struct landing *l = calloc(n ? n : 1, sizeof *l);
	if (!l)
		rc = dp_seterr(e, DP_ENOMEM, "out of memory");
	/* 1. every destination checked, every temporary named and closed */
	for (size_t i = 0; rc == DP_OK && i < n; i++) {
		dp_out *o = outs[i];
		struct stat st;
		if (!o->tmp)
			continue;
		if (stat(o->dst, &st) == 0 && S_ISDIR(st.st_mode))
			rc = dp_seterr(e, DP_EIO, "%s: is a directory", o->path);
		else if (o->anon)
			rc = out_name_anon(o, e);
	}
	for (size_t i = 0; rc == DP_OK && i < n; i++) {
		dp_out *o = outs[i];
		if (o->tmp && o->fd >= 0) {
			if (close(o->fd) < 0)
				rc = dp_syserr(e, "%s: close", o->path);
			o->fd = -1;
		}
	}
	/* 2. the renames; with several outputs the files replaced are kept
	 * aside until every rename is done, and put back if one fails */
	size_t k = 0;
	for (; rc == DP_OK && k < n; k++) {
		dp_out *o = outs[k];
		if (!o->tmp)
			continue;
		if (n > 1 && (rc = keep_aside(o, l[k].aside, sizeof l[k].aside, &l[k].aside_slot, e)) < 0)
			break;
		if (rename(o->tmp, o->dst) < 0) {
			rc = dp_syserr(e, "%s: rename", o->path);
			break;
		}
		l[k].landed = 1;
		reg_del(o->slot);
		o->slot = -1;
	}
	for (size_t i = 0; rc < 0 && l && i < n; i++)
		if (l[i].landed && l[i].aside[0])
			rename(l[i].aside, outs[i]->dst); /* the old file back */
		else if (l[i].landed)
			unlink(outs[i]->dst); /* there was none */
	for (size_t i = 0; l && i < n; i++)
		if (l[i].aside[0]) {
			unlink(l[i].aside);
			reg_del(l[i].aside_slot);
		}
	/* 3. close or remove what is left */
	for (size_t i = 0; i < n; i++) {
		dp_out *o = outs[i];
		if (l && l[i].landed)
			out_free(o);
		else if (o->tmp)
			dp_out_abort(o);
		else if (out_close_in_place(o, rc == DP_OK ? e : NULL) < 0 && rc == DP_OK)
			rc = e ? e->code : DP_EIO;
	}
	free(l);
	return rc;
}

int dp_out_is_input(const dp_out *o, int fd)
{
	struct stat a, b;
	if (o->tmp || fstat(o->fd, &a) < 0 || fstat(fd, &b) < 0)
		return 0; /* a temporary renamed over the input leaves it intact */
	return S_ISREG(a.st_mode) && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}
