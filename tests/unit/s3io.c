/*
 * s3io.c - lib/s3's streaming reader and writer, and put's plan, on local
 * files (the same paths as S3 objects take, read with pread, without a
 * server): several objects of several parts, in order, to a file and to a
 * pipe; a range; a missing file; dp_s3_put of a stream to a file, whole;
 * --include/--exclude filters; the uploads, folder markers and collisions
 * of a put of files and directories.  Against a server: tests/s3-pipe*.t.
 */
#define _GNU_SOURCE
#include "dp_s3.h"
#include "tap.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[4096];
static uint64_t seed = 0x2545f4914f6cdd1dull;

/* A file of n pseudo-random bytes under dir, its bytes in *data. */
static char *make_file(const char *name, size_t n, unsigned char **data)
{
	char *path = NULL;
	if (asprintf(&path, "%s/%s", dir, name) < 0)
		abort();
	unsigned char *d = malloc(n ? n : 1);
	for (size_t i = 0; i < n; i++)
		d[i] = (unsigned char)(tap_xorshift(&seed) >> 24);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(d, 1, n, f) != n || fclose(f) != 0)
		abort();
	*data = d;
	return path;
}

/* The whole of fd from its start. */
static unsigned char *slurp(int fd, size_t *n)
{
	struct stat st;
	fstat(fd, &st);
	unsigned char *b = malloc((size_t)st.st_size + 1);
	*n = (size_t)pread(fd, b, (size_t)st.st_size, 0);
	return b;
}

static dp_s3 *client(int concurrency, uint64_t part_size)
{
	dp_s3_conf c;
	dp_s3_conf_init(&c);
	c.concurrency = concurrency;
	c.part_size = part_size;
	c.no_sign = 1;
	dp_err e;
	dp_s3 *s = dp_s3_new(&c, &e);
	if (!s)
		printf("# %s\n", e.msg);
	return s;
}

static void add_obj(dp_s3 *s, dp_objs *objs, const char *path)
{
	dp_err e;
	if (dp_s3_expand(s, path, 0, objs, &e) < 0)
		printf("# %s\n", e.msg);
}

static void get(void)
{
	size_t sz[] = {0, 1, 65536, 300000, 1 << 20, 77777};
	enum { N = sizeof sz / sizeof sz[0] };
	unsigned char *data[N];
	char *path[N];
	size_t total = 0;
	for (int i = 0; i < N; i++) {
		char name[32];
		snprintf(name, sizeof name, "obj%d", i);
		path[i] = make_file(name, sz[i], &data[i]);
		total += sz[i];
	}
	unsigned char *want = malloc(total);
	size_t off = 0;
	for (int i = 0; i < N; i++)
		memcpy(want + off, data[i], sz[i]), off += sz[i];
	/* parts of 64 KiB, 1 to 4 in flight, to a file */
	for (int w = 1; w <= 4; w *= 2) {
		dp_s3 *s = client(w, 65536);
		dp_objs objs = {0};
		for (int i = 0; i < N; i++)
			add_obj(s, &objs, path[i]);
		char out[4200];
		snprintf(out, sizeof out, "%s/out", dir);
		int fd = open(out, O_RDWR | O_CREAT | O_TRUNC, 0600);
		dp_s3_stats st = {0};
		dp_err e = {0};
		int rc = dp_s3_get(s, &objs, NULL, fd, "out", &st, &e);
		size_t n;
		unsigned char *got = slurp(fd, &n);
		ok(rc == 0 && n == total && !memcmp(got, want, total) && st.bytes == total,
		   "get: %d objects (%zu bytes) in 64 KiB parts, %d at a time, in order", N, total,
		   w);
		if (rc)
			printf("# %s\n", e.msg);
		free(got);
		close(fd);
		dp_objs_free(&objs);
		dp_s3_free(s);
	}
	/* to a pipe, read as it comes */
	dp_s3 *s = client(3, 65536);
	dp_objs objs = {0};
	for (int i = 0; i < N; i++)
		add_obj(s, &objs, path[i]);
	int pfd[2];
	if (pipe(pfd) < 0)
		abort();
	pid_t pid = fork();
	if (pid == 0) {
		close(pfd[0]);
		dp_err e;
		_exit(dp_s3_get(s, &objs, NULL, pfd[1], "pipe", NULL, &e) ? 1 : 0);
	}
	close(pfd[1]);
	unsigned char *got = malloc(total + 1);
	size_t n = 0;
	ssize_t r;
	while ((r = read(pfd[0], got + n, total + 1 - n)) > 0)
		n += (size_t)r;
	close(pfd[0]);
	int status;
	waitpid(pid, &status, 0);
	ok(WIFEXITED(status) && WEXITSTATUS(status) == 0 && n == total && !memcmp(got, want, total),
	   "get: the same bytes through a pipe");
	free(got);
	dp_objs_free(&objs);
	/* a range of one object */
	dp_range rg;
	dp_range_parse("1000-299999", &rg);
	add_obj(s, &objs, path[3]);
	char out[4200];
	snprintf(out, sizeof out, "%s/range", dir);
	int fd = open(out, O_RDWR | O_CREAT | O_TRUNC, 0600);
	dp_err e = {0};
	int rc = dp_s3_get(s, &objs, &rg, fd, "range", NULL, &e);
	got = slurp(fd, &n);
	ok(rc == 0 && n == 299000 && !memcmp(got, data[3] + 1000, n), "get: bytes 1000-299999");
	free(got);
	close(fd);
	dp_objs_free(&objs);
	/* a file gone between the listing and the read */
	add_obj(s, &objs, path[2]);
	unlink(path[2]);
	fd = open(out, O_RDWR | O_TRUNC);
	rc = dp_s3_get(s, &objs, NULL, fd, "range", NULL, &e);
	ok(rc < 0 && strstr(e.msg, path[2]), "get: a file gone is an error naming it (%s)", e.msg);
	close(fd);
	dp_objs_free(&objs);
	dp_s3_free(s);
	for (int i = 0; i < N; i++) {
		free(data[i]);
		free(path[i]);
	}
	free(want);
}

static void put(void)
{
	unsigned char *data;
	char *src = make_file("src", 3000000, &data);
	dp_s3 *s = client(4, 5u << 20);
	char dst[4200];
	snprintf(dst, sizeof dst, "%s/sub/dst", dir);
	char sub[4200];
	snprintf(sub, sizeof sub, "%s/sub", dir);
	mkdir(sub, 0700);
	dp_loc l;
	dp_err e = {0};
	dp_loc_parse(dst, &l, &e);
	int fd = open(src, O_RDONLY);
	dp_s3_stats st = {0};
	int rc = dp_s3_put(s, &l, fd, "src", -1, &st, &e);
	close(fd);
	fd = open(dst, O_RDONLY);
	size_t n = 0;
	unsigned char *got = fd >= 0 ? slurp(fd, &n) : NULL;
	ok(rc == 0 && n == 3000000 && got && !memcmp(got, data, n), "put: a stream to a file, whole");
	if (fd >= 0)
		close(fd);
	free(got);
	dp_loc_free(&l);
	dp_s3_free(s);
	free(data);
	free(src);
}

static int has(const dp_s3_plan *p, const char *src, const char *dst)
{
	for (size_t i = 0; i < p->n; i++)
		if (!strcmp(p->v[i].src, src) && !strcmp(p->v[i].dst, dst))
			return 1;
	return 0;
}

static void plan(void)
{
	dp_s3_filters f = {0};
	dp_err e;
	ok(dp_s3_filters_keep(&f, "a.txt"), "filters: none keeps all");
	dp_s3_filters_add(&f, 0, "*", &e);
	dp_s3_filters_add(&f, 1, "*.tfrecord", &e);
	ok(dp_s3_filters_keep(&f, "d/x.tfrecord") && !dp_s3_filters_keep(&f, "x.txt"),
	   "filters: the last that matches wins; '*' matches '/'");
	dp_loc l = {.kind = DP_LOC_S3, .bucket = "b", .key = "data/train"};
	char *base = dp_s3_filter_base(&l);
	is_str(base, "data/", "filter base of an object: up to its last '/'");
	free(base);
	is_str(dp_s3_rel_name("data/x/y", "data/"), "x/y", "a name past its base");

	/* dir/tree/{a.tfrecord, b.txt, deep/c.tfrecord, empty/} */
	char t[4200], p1[4300];
	snprintf(t, sizeof t, "%s/tree", dir);
	mkdir(t, 0700);
	const char *files[] = {"a.tfrecord", "b.txt", "deep/c.tfrecord"};
	snprintf(p1, sizeof p1, "%s/deep", t);
	mkdir(p1, 0700);
	snprintf(p1, sizeof p1, "%s/empty", t);
	mkdir(p1, 0700);
	for (int i = 0; i < 3; i++) {
		snprintf(p1, sizeof p1, "%s/%s", t, files[i]);
		fclose(fopen(p1, "w"));
	}
	dp_s3 *s = client(2, 8u << 20);
	char *args[] = {t};
	dp_s3_plan pl;
	int rc = dp_s3_plan_put(s, "s3://b/up/", args, 1, &f, 1, &pl, &e);
	char s1[4300], s2[4300];
	snprintf(s1, sizeof s1, "%s/a.tfrecord", t);
	snprintf(s2, sizeof s2, "%s/deep/c.tfrecord", t);
	ok(rc == 0 && pl.n == 2 && has(&pl, s1, "s3://b/up/a.tfrecord") &&
		   has(&pl, s2, "s3://b/up/deep/c.tfrecord"),
	   "plan: a directory's files the filters keep, under their relative names");
	ok(pl.ndirs == 1 && !strcmp(pl.dirs[0], "s3://b/up/deep/"),
	   "plan: the folder markers of the files' directories (the filters leave out empty/)");
	dp_s3_plan_free(&pl);
	rc = dp_s3_plan_put(s, "s3://b/up/", args, 1, NULL, 1, &pl, &e);
	ok(rc == 0 && pl.n == 3 && pl.ndirs == 2 && !strcmp(pl.dirs[0], "s3://b/up/deep/") &&
		   !strcmp(pl.dirs[1], "s3://b/up/empty/"),
	   "plan: without filters every file, and empty directories' markers, sorted, once");
	dp_s3_plan_free(&pl);
	char *two[] = {s1, s1};
	rc = dp_s3_plan_put(s, "s3://b/up/", two, 2, NULL, 0, &pl, &e);
	ok(rc == DP_EARG && pl.bad_arg && strstr(e.msg, "would both be s3://b/up/a.tfrecord"),
	   "plan: two files on one key refused (%s)", e.msg);
	dp_s3_plan_free(&pl);
	char *dash[] = {"-"};
	rc = dp_s3_plan_put(s, "s3://b/up/", dash, 1, NULL, 0, &pl, &e);
	ok(rc == DP_EARG && pl.bad_arg, "plan: stdin has no name to put under a prefix");
	dp_s3_plan_free(&pl);
	dp_s3_free(s);
	dp_s3_filters_free(&f);
}

int main(void)
{
	/* no credentials, config or metadata service reached: local files only */
	setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
	setenv("AWS_CONFIG_FILE", "/dev/null", 1);
	setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null", 1);
	snprintf(dir, sizeof dir, "%s/s3io.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(dir)) {
		ok(0, "mkdtemp");
		return done_testing();
	}
	get();
	put();
	plan();
	char cmd[4200];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		ok(0, "rm -rf %s", dir);
	return done_testing();
}
