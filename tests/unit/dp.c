/* dp.c - lib/common: option numbers (dp_parse_count), byte sizes
 * (dp_parse_size), name templates (dp_expand), I/N (dp_parse_part), the
 * buffer and JSON escaper (dp_buf), the RNG, and the registry of
 * temporary outputs under threads. */
#define _GNU_SOURCE
#include "dp.h"
#include "dp_rng.h"
#include "tap.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void test_count(void)
{
	uint64_t v = 7;
	dp_err e;
	is_int(dp_parse_count("-n", "0", 0, 10, &v, &e), 0, "'0' in 0..10");
	is_int(v, 0, "is 0");
	is_int(dp_parse_count("-n", "10", 0, 10, &v, &e), 0, "'10' in 0..10 (bounds inclusive)");
	is_int(v, 10, "is 10");
	is_int(dp_parse_count("--seed", "18446744073709551615", 0, UINT64_MAX, &v, &e), 0,
	       "UINT64_MAX");
	ok(v == UINT64_MAX, "is UINT64_MAX");
	is_int(dp_parse_count("--seed", "0xDEADbeef", 0, UINT64_MAX, &v, &e), 0, "hex");
	is_int(v, 0xdeadbeef, "is 0xdeadbeef");
	is_int(dp_parse_count("-n", "007", 0, 10, &v, &e), 0, "leading zeros are decimal");
	is_int(v, 7, "is 7");

	const char *bad[] = {"", "-1", "+1", " 1", "1 ", "1k", "1.0", "0x", "0xg", "abc",
			     "18446744073709551616", "11", "x1", NULL};
	for (int i = 0; bad[i]; i++) {
		v = 99;
		int rc = dp_parse_count("-n", bad[i], 0, 10, &v, &e);
		ok(rc == DP_EARG && v == 99, "refused: '%s' (%s)", bad[i], e.msg);
	}
	dp_parse_count("--head", "x", 1, 5, &v, &e);
	is_str(e.msg, "--head 'x': want a whole number from 1 to 5", "message names option and range");
	dp_parse_count("--skip", "-3", 0, UINT64_MAX, &v, &e);
	is_str(e.msg, "--skip '-3': want a whole number, 0 or more", "no upper bound when there is none");
	is_int(dp_parse_count("-n", "0", 1, 10, &v, &e), DP_EARG, "below min");
}

static void test_size(void)
{
	uint64_t v;
	is_int(dp_parse_size("4096", &v), 0, "4096");
	is_int(v, 4096, "is 4096");
	is_int(dp_parse_size("64k", &v), 0, "64k");
	is_int(v, 65536, "is 65536");
	is_int(dp_parse_size("1.5G", &v), 0, "1.5G");
	is_int(v, 3ull << 29, "is 1.5 GiB");
	is_int(dp_parse_size("256MiB", &v), 0, "256MiB");
	is_int(v, 256ull << 20, "is 256 MiB");
	is_int(dp_parse_size("12x", &v), DP_EARG, "refused: 12x");
	is_int(dp_parse_size("-1", &v), DP_EARG, "refused: -1");
	is_int(dp_parse_size("", &v), DP_EARG, "refused: empty");
	is_int(dp_parse_size("nan", &v), DP_EARG, "refused: nan");
	is_int(dp_parse_size("inf", &v), DP_EARG, "refused: inf");
}

static void test_expand(void)
{
	setenv("OMPI_COMM_WORLD_RANK", "3", 1);
	setenv("OMPI_COMM_WORLD_SIZE", "16", 1);
	char *s = dp_expand("d/train-{rank:5}-of-{size:5}.tfrecord {rank} {size:2} {size:1} {rank:0} "
			    "{rank:x} {rank:33} {nope:3}",
			    NULL);
	is_str(s, "d/train-00003-of-00016.tfrecord 3 16 16 {rank:0} {rank:x} {rank:33} {nope:3}",
	       "{rank:5}, {size:5} padded; bad widths and unknown names left as they are");
	free(s);
	const char *vars[] = {"rank", "7", "epoch", "12", "name", "ab", NULL};
	s = dp_expand("{rank:3} {epoch:4} {name:4} {rank}", vars);
	is_str(s, "007 0012 {name:4} 7", "padding a variable given; not a word");
	free(s);
	/* a width pads the number, whatever zeros its value has (tfr-shard
	 * hands {shard} over padded to 5) */
	const char *sh[] = {"shard", "00003", "nshards", "00016", "split", "train", NULL};
	s = dp_expand("{shard:3}-{shard:1}-{nshards:2}-{shard:7}-{shard}", sh);
	is_str(s, "003-3-16-0000003-00003", "{shard:3} of 00003 is 003: widths are honoured");
	free(s);

	dp_err e;
	s = dp_expand_strict("out/{split}/s-{shard:3}-of-{nshards}.tfr", sh, &e);
	is_str(s, "out/train/s-003-of-00016.tfr", "strict: a template of known names");
	free(s);
	s = dp_expand_strict("a{b/c}{}{ x}{-}{shard", sh, &e);
	is_str(s, "a{b/c}{}{ x}{-}{shard", "strict: braces around what is no name are text");
	free(s);
	ok(!dp_expand_strict("s-{shrad}.tfr", sh, &e) && e.code == DP_EARG,
	   "strict: an unknown name is refused");
	is_str(e.msg, "unknown placeholder {shrad} (known: {shard}, {nshards}, {split}, {rank}, {size})",
	       "... naming it and the known ones");
	ok(!dp_expand_strict("s-{nope:3}", sh, &e), "strict: an unknown name with a width");
	is_str(e.msg, "unknown placeholder {nope} (known: {shard}, {nshards}, {split}, {rank}, {size})",
	       "... named without its width");
	ok(!dp_expand_strict("{shard:40}", sh, &e), "strict: a width past 32 is refused");
	is_str(e.msg, "{shard:40}: the width after ':' must be a number of digits from 1 to 32",
	       "... saying what a width is");
	ok(!dp_expand_strict("{shard:x}", sh, &e), "strict: a width that is no number");
	ok(!dp_expand_strict("{shard:0}", sh, &e), "strict: width 0");
	ok(!dp_expand_strict("{split:3}", sh, &e), "strict: a width on a value that is no number");
	is_str(e.msg, "{split:3}: a width pads a number, and {split} is 'train'", "... says so");
}

static void test_part(void)
{
	uint64_t i = 9, n = 9;
	dp_err e;
	is_int(dp_parse_part("--shard", "3/8", NULL, &i, &n, &e), 0, "3/8 parses");
	ok(i == 3 && n == 8, "... as part 3 of 8");
	const char *vars[] = {"rank", "1", "size", "2", NULL};
	is_int(dp_parse_part("--take", "{rank}/{size}", vars, &i, &n, &e), 0, "{rank}/{size} filled in");
	ok(i == 1 && n == 2, "... from vars");
	is_int(dp_parse_part("--take", "0x3/0x10", NULL, &i, &n, &e), 0, "hex, as dp_parse_count");
	ok(i == 3 && n == 16, "... 3 of 16");
	is_int(dp_parse_part("--take", "0/1073741824", NULL, &i, &n, &e), 0, "N up to 2^30");
	const char *bad[] = {"8/8", "-1/8", "1/0", "1", "/8", "1/", "1/8/9", " 1/8", "1/+8", "a/b",
			     "0/1073741825", ""};
	for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
		is_int(dp_parse_part("--shard", bad[k], NULL, &i, &n, &e), DP_EARG, "'%s' refused",
		       bad[k]);
		ok(strstr(e.msg, "--shard '") && strstr(e.msg, "want I/N"), "... naming the option: %s",
		   e.msg);
	}
	dp_parse_part("--take", "{rank}/{size}", (const char *[]){"rank", "2", "size", "2", NULL}, &i,
		      &n, &e);
	ok(strstr(e.msg, "'{rank}/{size}' (2/2)") != NULL, "the message shows what the template gave: %s",
	   e.msg);
}

static void test_buf(void)
{
	dp_buf b;
	dp_buf_init(&b, 0);
	dp_buf_addstr(&b, "abc");
	dp_buf_printf(&b, "-%d-%s", 42, "x");
	is_str(b.p, "abc-42-x", "add and printf append");
	is_int(b.len, 8, "... len counts the bytes");
	for (int k = 0; k < 10000; k++)
		dp_buf_add(&b, "0123456789", 10);
	is_int(b.len, 100008, "grows");
	is_int(b.err, 0, "... without error");
	dp_buf_reset(&b);
	is_int(b.len, 0, "reset empties");
	char *t = dp_buf_take(&b);
	is_str(t, "", "take of an empty buffer: an empty string");
	free(t);
	dp_buf_free(&b);

	dp_buf_init(&b, 10);
	dp_buf_reserve(&b, 8); /* memory past the cap: printf must still stop at it */
	is_int(dp_buf_printf(&b, "%s", "0123456789a"), DP_ELIMIT, "printf past the cap: DP_ELIMIT");
	is_int(b.len, 0, "... adds nothing");
	dp_buf_reset(&b);
	is_int(dp_buf_printf(&b, "%d%s", 1234, "56789"), 0, "printf up to the cap");
	dp_buf_reset(&b);
	is_int(dp_buf_add(&b, "0123456789", 10), 0, "up to the cap");
	is_int(dp_buf_add(&b, "x", 1), DP_ELIMIT, "past the cap: DP_ELIMIT");
	is_int(dp_buf_addstr(&b, ""), DP_ELIMIT, "... and it sticks");
	is_str(b.p, "0123456789", "the contents stay");
	ok(dp_buf_take(&b) == NULL, "take after a failure: NULL");
	dp_buf_reset(&b);
	is_int(dp_buf_addstr(&b, "ok"), 0, "reset clears the error");
	dp_buf_free(&b);

	struct {
		const char *in;
		size_t n;
		int flags;
		const char *want;
	} js[] = {
		{"plain", 5, 0, "\"plain\""},
		{"q\"b\\s/", 6, 0, "\"q\\\"b\\\\s/\""},
		{"\n\r\t\b\f\x01\x1f\x7f", 8, 0, "\"\\n\\r\\t\\b\\f\\u0001\\u001f\\u007f\""},
		{"nul\0in", 6, 0, "\"nul\\u0000in\""},
		{"caf\xc3\xa9", 5, 0, "\"caf\xc3\xa9\""},
		{"caf\xc3\xa9", 5, DP_JSON_ASCII, "\"caf\\u00e9\""},
		{"\xf0\x9f\x98\x80", 4, DP_JSON_ASCII, "\"\\ud83d\\ude00\""},
		{"\xf0\x9f\x98\x80", 4, 0, "\"\xf0\x9f\x98\x80\""},
		{"a\xff" "b", 3, 0, "\"a\xef\xbf\xbd" "b\""},
		{"a\xff" "b", 3, DP_JSON_ASCII, "\"a\\ufffdb\""},
		{"\xc0\xaf", 2, 0, "\"\xef\xbf\xbd\xef\xbf\xbd\""}, /* overlong */
		{"\xed\xa0\x80", 3, DP_JSON_ASCII, "\"\\ufffd\\ufffd\\ufffd\""}, /* surrogate */
		{"\xe2\x82", 2, 0, "\"\xef\xbf\xbd\xef\xbf\xbd\""}, /* cut short */
	};
	for (size_t k = 0; k < sizeof js / sizeof js[0]; k++) {
		dp_buf_init(&b, 0);
		dp_buf_json_str(&b, js[k].in, js[k].n, js[k].flags);
		is_str(b.p, js[k].want, "JSON string %zu", k);
		dp_buf_free(&b);
	}
}

/* dp_grow: room for n, the capacity doubled from 16; too large a request
 * refused with the array kept. */
static void test_grow(void)
{
	int *a = NULL;
	size_t cap = 0;
	is_int(dp_grow(&a, &cap, 1, sizeof *a), DP_OK, "grow an empty array to 1");
	ok(a && cap == 16, "... 16 elements of room (got %zu)", cap);
	for (int i = 0; i < 16; i++)
		a[i] = i;
	is_int(dp_grow(&a, &cap, 16, sizeof *a), DP_OK, "16 fit in 16: nothing to do");
	is_int(dp_grow(&a, &cap, 40, sizeof *a), DP_OK, "grow to 40");
	ok(cap == 64 && a[15] == 15, "... doubled to 64 (got %zu), the elements kept", cap);
	int *was = a;
	is_int(dp_grow(&a, &cap, SIZE_MAX / 4, sizeof *a), DP_ENOMEM,
	       "room for SIZE_MAX / 4 ints: DP_ENOMEM, not an overflowed size");
	ok(a == was && cap == 64, "... the array as it was");
	free(a);
}

/* dp_zalloc: zeroes, the error left alone (its failure is calloc's: not
 * made to happen here, where ASan would stop the test instead). */
static void test_zalloc(void)
{
	dp_err e = {0};
	unsigned char *p = dp_zalloc(100, &e);
	int zero = p != NULL;
	for (int i = 0; p && i < 100; i++)
		zero &= p[i] == 0;
	ok(zero && e.code == 0, "dp_zalloc: 100 bytes of zeroes");
	free(p);
}

/* dp_rng_seed is splitmix64 from mix64(seed ^ mix64(stream)): the stream
 * tfr-shard's splits and shuffles were specified with. */
static void test_rng(void)
{
	uint64_t s = dp_mix64(42 ^ dp_mix64(7));
	dp_rng r;
	dp_rng_seed(&r, 42, 7);
	int same = 1;
	for (int k = 0; k < 1000; k++) {
		s += 0x9e3779b97f4a7c15ull;
		same &= dp_rng_next(&r) == dp_mix64(s);
	}
	ok(same, "dp_rng_seed + dp_rng_next: splitmix64's sequence");
	is_int(dp_mix64(0), 0, "mix64(0) = 0 (the finaliser's fixed point)");
	ok(dp_mix64(1) == 0x5692161d100b05e5ull, "mix64(1): the published splitmix64 finaliser");
}

/* Threads open and abort outputs (more than a chunk of the registry at
 * once) while another calls dp_out_cleanup() as a signal handler would,
 * over and over: nothing read is ever freed or half-written (ASan and
 * TSan see it), and a cleanup removes every temporary still open. */
#define NT 4
#define PER 40
static _Atomic int stop_cleaner;
static char tdir[64];

static void *opener(void *arg)
{
	long id = (long)arg;
	for (int round = 0; round < 20; round++) {
		dp_out o[PER];
		char path[128];
		for (int k = 0; k < PER; k++) {
			snprintf(path, sizeof path, "%s/t%ld-%d", tdir, id, k);
			if (dp_out_open(&o[k], path, NULL) < 0)
				return (void *)1;
		}
		for (int k = 0; k < PER; k++)
			dp_out_abort(&o[k]);
	}
	return NULL;
}

static void *committer(void *arg)
{
	long id = (long)arg;
	for (int k = 0; k < 50; k++) {
		dp_out o;
		char path[128];
		snprintf(path, sizeof path, "%s/c%ld-%d", tdir, id, k % 5);
		if (dp_out_open(&o, path, NULL) == 0) {
			dp_write_all(o.fd, "x", 1, path, NULL);
			dp_out_commit(&o, NULL); /* may fail: the cleanup took its name */
		}
	}
	return NULL;
}

static void *cleaner(void *arg)
{
	while (!stop_cleaner)
		dp_out_cleanup();
	return NULL;
}

/* The number a shell command prints; -1 when it prints none. */
static int shell_count(const char *cmd)
{
	FILE *f = popen(cmd, "r");
	int n = -1;
	if (f && fscanf(f, "%d", &n) != 1)
		n = -1;
	if (f)
		pclose(f);
	return n;
}

static int count_files(const char *dir)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "ls -A %s | wc -l", dir);
	return shell_count(cmd);
}

static void *mask_of(void *arg)
{
	pthread_sigmask(SIG_BLOCK, NULL, arg);
	return NULL;
}

static void test_out_threads(void)
{
	snprintf(tdir, sizeof tdir, "%s/dpout.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(tdir)) {
		ok(0, "mkdtemp");
		return;
	}
	pthread_t th[NT], cl;
	dp_thread_create(&cl, cleaner, NULL);
	int bad = 0;
	for (long i = 0; i < NT; i++)
		dp_thread_create(&th[i], opener, (void *)i);
	for (int i = 0; i < NT; i++) {
		void *r;
		pthread_join(th[i], &r);
		bad |= r != NULL;
	}
	stop_cleaner = 1;
	pthread_join(cl, NULL);
	ok(!bad, "%d threads x %d outputs open and abort beside a running cleanup", NT, PER);
	is_int(count_files(tdir), 0, "... and leave no file");

	/* 150 outputs open (three chunks of the registry when named); a
	 * cleanup leaves none (under O_TMPFILE they have no name at all) */
	dp_out o[150];
	char path[128];
	for (int k = 0; k < 150; k++) {
		snprintf(path, sizeof path, "%s/o%d", tdir, k);
		dp_out_open(&o[k], path, NULL);
	}
	int visible = count_files(tdir);
	ok(visible == 0 || visible == 150, "150 temporaries open (%d with names)", visible);
	dp_out_cleanup();
	is_int(count_files(tdir), 0, "dp_out_cleanup leaves none");
	for (int k = 0; k < 150; k++)
		dp_out_abort(&o[k]);

	/* commits name their temporaries (linkat) and register them while a
	 * cleanup runs beside: none is left whether or not it was removed */
	stop_cleaner = 0;
	dp_thread_create(&cl, cleaner, NULL);
	for (long i = 0; i < NT; i++)
		dp_thread_create(&th[i], committer, (void *)i);
	for (int i = 0; i < NT; i++)
		pthread_join(th[i], NULL);
	stop_cleaner = 1;
	pthread_join(cl, NULL);
	char cmd[160];
	snprintf(cmd, sizeof cmd, "ls -A %s | grep -c tmp", tdir);
	is_int(shell_count(cmd), 0, "%d threads committing beside a cleanup leave no temporary", NT);
	snprintf(cmd, sizeof cmd, "rm -f %s/c*", tdir);
	system(cmd);

	/* a thread libdp starts has every signal blocked */
	sigset_t m;
	pthread_t t;
	dp_thread_create(&t, mask_of, &m);
	pthread_join(t, NULL);
	ok(sigismember(&m, SIGINT) && sigismember(&m, SIGTERM) && sigismember(&m, SIGPIPE),
	   "dp_thread_create: SIGINT, SIGTERM and SIGPIPE blocked in the new thread");
	rmdir(tdir);
}

static char *slurp(const char *path)
{
	static char buf[256];
	FILE *f = fopen(path, "r");
	if (!f)
		return NULL;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	buf[n] = 0;
	fclose(f);
	return buf;
}

static int write_out(const char *path, const char *text, dp_err *e)
{
	dp_out o;
	int rc = dp_out_open(&o, path, e);
	if (rc < 0)
		return rc;
	if (dp_write_all(o.fd, text, strlen(text), path, e) < 0) {
		dp_out_abort(&o);
		return DP_EIO;
	}
	return dp_out_commit(&o, e);
}

/* Outputs through links, descriptors, modes, and groups that land all or
 * none (issue 12, item 1 and 3). */
static void test_out_paths(void)
{
	char d[64], p[256], q[256];
	dp_err e;
	struct stat st, st2;
	snprintf(d, sizeof d, "%s/dpout.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(d)) {
		ok(0, "mkdtemp");
		return;
	}
	/* a link to a file: the file is replaced, the link stays */
	snprintf(p, sizeof p, "%s/real", d);
	snprintf(q, sizeof q, "%s/link", d);
	write_out(p, "old", &e);
	symlink("real", q);
	is_int(write_out(q, "new", &e), 0, "an output named through a link");
	is_str(slurp(p), "new", "... writes the file the link names");
	ok(lstat(q, &st) == 0 && S_ISLNK(st.st_mode), "... and the link stays a link");
	/* a dangling link: its target is created */
	snprintf(p, sizeof p, "%s/sub", d);
	mkdir(p, 0755);
	snprintf(q, sizeof q, "%s/dangling", d);
	symlink("sub/target", q);
	is_int(write_out(q, "made", &e), 0, "a dangling link (relative, into a subdirectory)");
	snprintf(p, sizeof p, "%s/sub/target", d);
	is_str(slurp(p), "made", "... creates the file it names");
	ok(lstat(q, &st) == 0 && S_ISLNK(st.st_mode), "... the link stays");
	/* modes kept */
	snprintf(p, sizeof p, "%s/secret", d);
	write_out(p, "x", &e);
	chmod(p, 0600);
	write_out(p, "y", &e);
	ok(stat(p, &st) == 0 && (st.st_mode & 07777) == 0600, "a 0600 file replaced stays 0600 (%o)",
	   st.st_mode & 07777);
	chmod(p, 0640);
	snprintf(q, sizeof q, "%s/to-secret", d);
	symlink(p, q);
	write_out(q, "z", &e);
	ok(stat(p, &st) == 0 && (st.st_mode & 07777) == 0640, "... through a link too (%o)",
	   st.st_mode & 07777);
	/* a descriptor path: written in place, at its offset */
	snprintf(p, sizeof p, "%s/fdfile", d);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	write(fd, "head:", 5);
	fstat(fd, &st);
	snprintf(q, sizeof q, "/dev/fd/%d", fd);
	is_int(write_out(q, "tail", &e), 0, "/dev/fd/N");
	is_str(slurp(p), "head:tail", "... writes in place on that descriptor, where it stands");
	ok(stat(p, &st2) == 0 && st2.st_ino == st.st_ino, "... the file is not replaced");
	snprintf(q, sizeof q, "/proc/self/fd/%d", fd);
	write_out(q, "!", &e);
	is_str(slurp(p), "head:tail!", "/proc/self/fd/N likewise");
	dp_out o;
	dp_out_open(&o, q, &e);
	ok(o.tmp == NULL && o.fd != fd && o.fd > 2, "... on a duplicate (tmp NULL: in place)");
	ok(dp_out_is_input(&o, fd), "dp_out_is_input: the output is that input");
	dp_out_abort(&o);
	ok(fcntl(fd, F_GETFD) == 0 || fcntl(fd, F_GETFD) == FD_CLOEXEC, "... and abort leaves the original open");
	close(fd);
	/* a directory is refused at open, and by the check */
	is_int(dp_out_open(&o, d, &e), DP_EIO, "a directory as output: refused at open");
	ok(strstr(e.msg, "is a directory") != NULL, "... %s", e.msg);
	is_int(dp_out_check(d, &e), DP_EIO, "dp_out_check: a directory");
	snprintf(p, sizeof p, "%s/nodir/x", d);
	ok(dp_out_check(p, &e) < 0 && strstr(e.msg, "nodir"), "dp_out_check: %s", e.msg);
	snprintf(p, sizeof p, "%s/fresh", d);
	is_int(dp_out_check(p, &e), 0, "dp_out_check: a new file in a writable directory");
	ok(access(p, F_OK) < 0, "... creates nothing");
	/* all or none: the second destination became a directory */
	dp_out a, b;
	char pa[256], pb[256];
	snprintf(pa, sizeof pa, "%s/g1", d);
	snprintf(pb, sizeof pb, "%s/g2", d);
	write_out(pa, "old1", &e);
	dp_out_open(&a, pa, &e);
	dp_out_open(&b, pb, &e);
	write(a.fd, "new1", 4);
	write(b.fd, "new2", 4);
	mkdir(pb, 0755);
	dp_out *g[] = {&a, &b};
	ok(dp_out_commit_all(g, 2, &e) < 0 && strstr(e.msg, "g2"), "a group with a bad destination fails, naming it: %s",
	   e.msg);
	is_str(slurp(pa), "old1", "... and the first output is not replaced");
	rmdir(pb);
	/* all or none: a rename that fails after the first landed rolls back */
	dp_out_open(&a, pa, &e);
	dp_out_open(&b, pb, &e);
	write(a.fd, "new1", 4);
	write(b.fd, "new2", 4);
	chmod(d, 0555); /* no rename, no link into d: root ignores it, so use a full check */
	dp_err e2;
	int rc = dp_out_commit_all(g, 2, &e2);
	chmod(d, 0755);
	if (geteuid() != 0) {
		ok(rc < 0, "a read-only directory: the group fails");
		is_str(slurp(pa), "old1", "... the first file as it was");
	} else {
		ok(rc == 0, "as root the group lands (the directory's mode does not stop root)");
		is_str(slurp(pa), "new1", "... the first");
		is_str(slurp(pb), "new2", "... and the second");
	}
	int left = 0;
	char cmd[128];
	snprintf(cmd, sizeof cmd, "ls -A %s | grep -c tmp", d);
	FILE *f = popen(cmd, "r");
	if (f && fscanf(f, "%d", &left) != 1)
		left = -1;
	if (f)
		pclose(f);
	is_int(left, 0, "no temporary or kept-aside file is left beside the outputs");
	snprintf(cmd, sizeof cmd, "rm -rf %s", d);
	system(cmd);
}

/* The library sees DP_* variables only when the program hands them over. */
/* dp_fmt_double: the shortest text that reads back exactly (checked
 * against a search from 1 digit), nan and the infinities as words. */
static void test_fmt_double(void)
{
	int bad = 0, longer = 0;
	srand(7);
	for (int i = 0; i < 200000; i++) {
		uint64_t bits = ((uint64_t)rand() << 42) ^ ((uint64_t)rand() << 21) ^ (uint64_t)rand();
		double v;
		memcpy(&v, &bits, sizeof v);
		if (!isfinite(v))
			continue;
		char b[DP_DOUBLE_BUF], s[DP_DOUBLE_BUF];
		dp_fmt_double(v, b, sizeof b);
		if (strtod(b, NULL) != v && bad++ < 5)
			printf("#   %.17g printed as %s\n", v, b);
		for (int p = 1; p <= 17; p++) { /* the shortest, by brute force */
			snprintf(s, sizeof s, "%.*g", p, v);
			if (strtod(s, NULL) == v)
				break;
		}
		if (strlen(b) > strlen(s) && longer++ < 5)
			printf("#   %.17g printed as %s, not %s\n", v, b, s);
	}
	is_int(bad, 0, "dp_fmt_double round-trips 200000 random doubles");
	is_int(longer, 0, "... each in its shortest text");
	static const struct {
		double v;
		const char *want;
	} cases[] = {
		{0.1, "0.1"}, {1e-5, "1e-05"}, {0.1 + 0.2, "0.30000000000000004"}, {123456, "123456"},
		{0.001, "0.001"}, {4.9406564584124654e-324, "5e-324"}, {NAN, "nan"}, {-INFINITY, "-inf"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char b[DP_DOUBLE_BUF];
		is_str(dp_fmt_double(cases[i].v, b, sizeof b), cases[i].want, "%s", cases[i].want);
	}
}

/* dp_fmt_rate: 3 significant digits at least, read back as the rate to
 * half a unit of the last digit, no exponent at any size. */
static void test_fmt_rate(void)
{
	static const struct {
		double v;
		const char *want;
	} cases[] = {
		{3.4123, "3.41"}, {34.16, "34.2"}, {0.0341, "0.0341"}, {99.94, "99.9"}, {99.96, "100"},
		{9.996, "10.0"}, {123456.7, "123457"}, {1e12, "1000000000000"}, {0, "0"},
		{1e-12, "0.000000000"}, {NAN, "nan"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char b[DP_DOUBLE_BUF];
		is_str(dp_fmt_rate(cases[i].v, b, sizeof b), cases[i].want, "dp_fmt_rate %g: %s",
		       cases[i].v, cases[i].want);
	}
	int bad = 0;
	for (double v = 1e-3; v < 1e15; v *= 1.0137) {
		char b[DP_DOUBLE_BUF];
		dp_fmt_rate(v, b, sizeof b);
		const char *dot = strchr(b, '.'), *first = strpbrk(b, "123456789");
		double ulp = dot ? pow(10, -(double)strlen(dot + 1)) : 1;
		size_t sig = first ? strlen(first) - (dot && dot > first) : 0;
		if ((strspn(b, "0123456789.") != strlen(b) || fabs(strtod(b, NULL) - v) > ulp * 0.500001 ||
		     sig < 3) && bad++ < 5)
			printf("#   %.17g printed as %s\n", v, b);
	}
	is_int(bad, 0, "dp_fmt_rate from 0.001 to 1e15: fixed point, 3 significant digits or whole");
}

/* dp_read_file: a whole file, a cap, a directory, a missing file, the
 * buffer reused. */
static void test_read_file(void)
{
	char dir[256], path[320];
	snprintf(dir, sizeof dir, "%s/dpread.XXXXXX", dp_tmpdir(NULL));
	if (!mkdtemp(dir))
		return;
	snprintf(path, sizeof path, "%s/f", dir);
	FILE *f = fopen(path, "w");
	fputs("0123456789", f);
	fclose(f);
	dp_buf b = DP_BUF_INIT;
	dp_err e;
	ok(dp_read_file(path, NULL, 10, &b, &e) == 0 && b.len == 10 && !strcmp(b.p, "0123456789"),
	   "dp_read_file: ten bytes under a cap of ten");
	ok(dp_read_file(path, "f", 9, &b, &e) == DP_ELIMIT, "... refused under a cap of nine");
	is_str(e.msg, "f: larger than 9 bytes", "... saying so");
	ok(dp_read_file(path, NULL, 1 << 20, &b, &e) == 0 && b.len == 10, "... the buffer reused");
	ok(dp_read_file(dir, "d", 100, &b, &e) < 0, "a directory refused");
	like(e.msg, "d: ", "... named");
	snprintf(path, sizeof path, "%s/none", dir);
	ok(dp_read_file(path, NULL, 100, &b, &e) < 0 && strstr(e.msg, path), "a missing file named");
	dp_buf_free(&b);
	snprintf(path, sizeof path, "%s/f", dir);
	unlink(path);
	rmdir(dir);
}

/* dp_make_parents' callback: the folders made, each followed by ';'; it
 * refuses the one named stop. */
struct made {
	char list[512];
	const char *stop;
};

static int note_made(void *ctx, const char *dir, dp_err *e)
{
	struct made *m = ctx;
	size_t n = strlen(m->list);
	snprintf(m->list + n, sizeof m->list - n, "%s;", dir);
	if (m->stop && !strcmp(dir, m->stop))
		return dp_seterr(e, DP_EARG, "%s: stop", dir);
	return DP_OK;
}

/* dp_make_parents: the folders above a path made, parents first and each
 * reported once; those there already left; a file in the way named; the
 * callback's error ends it. */
static void test_make_parents(void)
{
	char dir[256], path[384], want[768];
	snprintf(dir, sizeof dir, "%s/dpmkp.XXXXXX", dp_tmpdir(NULL));
	if (!mkdtemp(dir)) {
		ok(0, "mkdtemp");
		return;
	}
	struct made m = {"", NULL};
	dp_err e;
	struct stat st;
	snprintf(path, sizeof path, "%s/a//b/c.tfr", dir);
	ok(dp_make_parents(path, note_made, &m, &e) == 0, "dp_make_parents: a/b under a folder");
	snprintf(want, sizeof want, "%s/a;%s/a//b;", dir, dir);
	is_str(m.list, want, "... each folder made reported, parents first");
	snprintf(path, sizeof path, "%s/a/b", dir);
	ok(stat(path, &st) == 0 && S_ISDIR(st.st_mode), "... a/b is a folder");
	snprintf(path, sizeof path, "%s/a/b/c.tfr", dir);
	ok(stat(path, &st) < 0, "... the last name not made");
	m.list[0] = 0;
	ok(dp_make_parents(path, note_made, &m, &e) == 0 && !m.list[0], "... again: nothing made");
	ok(dp_make_parents("x", note_made, &m, &e) == 0 && dp_make_parents("/x", note_made, &m, &e) == 0 &&
		   !m.list[0],
	   "no folder part, or only /: nothing to make");
	snprintf(path, sizeof path, "%s/f", dir);
	close(open(path, O_WRONLY | O_CREAT, 0644));
	snprintf(path, sizeof path, "%s/f/g/h", dir);
	ok(dp_make_parents(path, note_made, &m, &e) == DP_EIO && !m.list[0], "a file in the way: DP_EIO");
	snprintf(want, sizeof want, "%s/f/g: cannot create directory: Not a directory", dir);
	is_str(e.msg, want, "... naming the folder");
	snprintf(path, sizeof path, "%s/s/t/u", dir);
	snprintf(want, sizeof want, "%s/s", dir);
	m.stop = want;
	ok(dp_make_parents(path, note_made, &m, &e) == DP_EARG, "the callback's error ends it");
	snprintf(path, sizeof path, "%s/s/t", dir);
	ok(stat(want, &st) == 0 && stat(path, &st) < 0, "... after the folder it was told of");
	rmdir(want);
	snprintf(path, sizeof path, "%s/f", dir);
	unlink(path);
	snprintf(path, sizeof path, "%s/a/b", dir);
	rmdir(path);
	snprintf(path, sizeof path, "%s/a", dir);
	rmdir(path);
	ok(rmdir(dir) == 0, "nothing else made");
}

/* dp_spawn: a child with every signal unblocked and at its default
 * though its parent blocks them all and ignores SIGPIPE, the environment
 * given added, a program found on PATH, one missing named. */
static void test_spawn(void)
{
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	void (*pipe_was)(int) = signal(SIGPIPE, SIG_IGN);
	int fds[2];
	dp_err e;
	ok(pipe(fds) == 0, "pipe");
	char *argv[] = {"sh", "-c", "grep -E '^Sig(Blk|Ign)' /proc/self/status; echo \"$DPX\"", NULL};
	const char *env[] = {"DPX=spawned", NULL};
	dp_child c = {NULL, argv, env, -1, fds[1], -1, 1};
	int pid, st;
	ok(dp_spawn(&c, &pid, &e) == 0, "dp_spawn: sh found on PATH");
	close(fds[1]);
	char out[512] = "";
	long n = dp_read_full(fds[0], out, sizeof out - 1, "pipe", &e);
	out[n > 0 ? n : 0] = 0;
	close(fds[0]);
	waitpid(pid, &st, 0);
	ok(WIFEXITED(st) && WEXITSTATUS(st) == 0, "... the child ran");
	like(out, "SigBlk:\t0000000000000000", "... no signal blocked in the child");
	const char *ig = strstr(out, "SigIgn:\t");
	unsigned long long ign = ig ? strtoull(ig + 8, NULL, 16) : ~0ull;
	/* signals 1 to 31; 32 and 33 are the C library's own, beyond signal() */
	ok(!(ign & 0x7fffffffull), "... none ignored (SIGPIPE at its default): SigIgn %llx", ign);
	like(out, "spawned", "... the environment given");
	char *none[] = {"dp-no-such-program", NULL};
	dp_child m = {NULL, none, NULL, -1, -1, -1, 0};
	ok(dp_spawn(&m, &pid, &e) < 0, "a program not on PATH refused");
	like(e.msg, "cannot run dp-no-such-program", "... named");
	signal(SIGPIPE, pipe_was);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void test_settings(void)
{
	setenv("DP_UNIT_TEST_SETTING", "42", 1);
	ok(dp_setting("DP_UNIT_TEST_SETTING") == NULL, "the environment alone sets nothing");
	dp_settings_from_env();
	is_str(dp_setting("DP_UNIT_TEST_SETTING"), "42", "dp_settings_from_env takes DP_* variables");
	unsetenv("DP_UNIT_TEST_SETTING");
	is_int(dp_setting_set("DP_UNIT_TEST_SETTING", "x"), 0, "dp_setting_set");
	is_str(dp_setting("DP_UNIT_TEST_SETTING"), "x", "... replaces the value");
	dp_setting_set("DP_UNIT_TEST_SETTING", NULL);
	ok(dp_setting("DP_UNIT_TEST_SETTING") == NULL, "... and NULL unsets it");
	setenv("NOT_DP_SETTING", "1", 1);
	dp_settings_from_env();
	ok(dp_setting("NOT_DP_SETTING") == NULL, "only DP_* names are taken");
}

int main(void)
{
	test_count();
	test_size();
	test_expand();
	test_part();
	test_buf();
	test_grow();
	test_zalloc();
	test_rng();
	test_out_threads();
	test_out_paths();
	test_fmt_double();
	test_fmt_rate();
	test_read_file();
	test_make_parents();
	test_spawn();
	test_settings();
	return done_testing();
}
