/*
 * s3-pipe - stream datasets between S3 and pipes, files and FIFOs.
 *
 *   s3-pipe get URL...            objects, prefixes or manifests to stdout (or -o FILE)
 *   s3-pipe put URL [FILE...]     stdin (or files) to S3
 *   s3-pipe ls [URL...]           list keys, sizes, times
 *   s3-pipe fifo --dir D URL...   SageMaker Pipe mode: D/<channel>_<epoch> FIFOs
 *   s3-pipe presign URL           a presigned URL
 *   s3-pipe rm URL...             delete objects (and abandoned uploads)
 *   s3-pipe whoami                which credentials, region and endpoint it uses
 *   s3-pipe sync SRC DST          a directory and an S3 prefix made the same
 *   s3-pipe mb|rb s3://BUCKET     make a bucket, remove an empty one
 *
 * URLs are s3://bucket/key, file:///path or plain paths.  Options may come
 * before or after the command and the URLs.  The work is done by libdp's
 * S3 client (dp_s3.h); this file holds the options, messages and exit
 * codes.  See s3-pipe(1).
 */
#define _GNU_SOURCE
#include "cli.h"
#include "dp.h"
#include "dp_s3.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef DP_PROG
#define DP_PROG "s3-pipe"
#endif

/* Exit statuses beyond CLI_OK, CLI_FAIL and CLI_USAGE (s3-pipe(1), EXIT
 * STATUS). */
enum {
	S3P_NOTFOUND = 3, /* no such object, bucket or file; an empty prefix */
	S3P_DENIED = 4,   /* access denied, bad signature, no credentials or profile */
	S3P_TRANSFER = 5, /* the network or the server failed, retries exhausted */
};

enum { C_NONE, C_GET, C_PUT, C_LS, C_FIFO, C_PRESIGN, C_RM, C_WHOAMI, C_SYNC, C_MB, C_RB, C_LAST };
static const char *const cmd_names[] = {"", "get", "put", "ls", "fifo", "presign", "rm", "whoami",
					"sync", "mb", "rb"};

/* The command line. */
static struct {
	int cmd;
	const char *output, *range, *shard, *channel, *dir, *method;
	int shuffle, manifest, recursive, json, uploads, quiet, verbose, dryrun, expand, markers;
	int delete_extra, exact; /* sync --delete, --exact-timestamps */
	uint64_t seed, epoch, epochs;
	uint64_t shard_i, shard_n; /* --shard I/N */
	long expires;
	int page_size;
	dp_s3_conf conf;
} O = {
	.channel = "train",
	.epochs = 1,
	.expires = 3600,
	.method = "GET",
};

static dp_s3 *S;
static volatile sig_atomic_t caught;
static volatile sig_atomic_t soft_cancel; /* a signal cancels (put to S3) */

/* ---- Messages and exits ------------------------------------------------------ */

static int exit_code(int status)
{
	switch (status) {
	case DP_EARG:
		return CLI_USAGE;
	case DP_ENOTFOUND:
		return S3P_NOTFOUND;
	case DP_EDENIED:
		return S3P_DENIED;
	case DP_ETRANSFER:
		return S3P_TRANSFER;
	default:
		return CLI_FAIL;
	}
}

/* The FIFOs this run serves (fifo): broken by the failure paths, the
 * signal handler among them. */
static dp_s3_fifos fifos;

static void signals_blocked(int on)
{
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(on ? SIG_BLOCK : SIG_UNBLOCK, &all, NULL);
}

/* cli.on_fail: half-written outputs go, and a signal that cancelled an
 * upload (once the upload was aborted) kills s3-pipe as a shell expects. */
static void on_fail(int code)
{
	(void)code;
	cli_progress_clear();
	signals_blocked(1);
	dp_s3_fifos_break(&fifos, 0);
	signals_blocked(0);
	dp_out_cleanup();
	dp_s3 *s = S;
	S = NULL;
	dp_s3_free(s);
	if (caught) {
		signal(caught, SIG_DFL);
		raise(caught);
	}
}

/* A URL argument held "{rank}" or "{size}" taken literally (no --expand). */
static int literal_braces;

/* Report e and exit with its class's status (a reader gone: quietly,
 * CLI_PIPE, as for every program).  Something not found, when a URL held
 * placeholders taken literally, gets a hint. */
static void __attribute__((noreturn)) die_err(const dp_err *e)
{
	if (e->code == DP_ENOTFOUND && literal_braces)
		cli_die_code(exit_code(e->code), "%s (braces in URLs are literal: --expand fills in "
			     "{rank} and {size})", e->msg);
	cli_die_err(exit_code(e->code), e);
}

/* A template (-o, --dir, and URLs with --expand): {rank} and {size} filled
 * in as cli_expand does, "{{" and "}}" written as literal braces (a field
 * is read first: "{rank}}}" is the rank, then '}'). */
static char *expand(const char *t)
{
	size_t cap = strlen(t) + 64, n = 0;
	char *out = cli_malloc(cap);
	for (const char *p = t; *p;) {
		const char *piece = p, *close;
		size_t len = 1;
		char *x = NULL;
		if ((p[0] == '{' && p[1] == '{') || (p[0] == '}' && p[1] == '}')) {
			p += 2;
		} else if (p[0] == '{' && (close = strchr(p, '}'))) {
			char *field = cli_malloc((size_t)(close - p) + 2);
			memcpy(field, p, (size_t)(close - p) + 1);
			field[close - p + 1] = 0;
			piece = x = cli_expand(field, NULL);
			len = strlen(x);
			free(field);
			p = close + 1;
		} else {
			p++;
		}
		cli_grow(&out, &cap, n + len + 1, 1);
		memcpy(out + n, piece, len);
		n += len;
		free(x);
	}
	out[n] = 0;
	return out;
}

/* A URL argument as the command uses it: as written, or with --expand its
 * {rank} and {size} filled in.  rm never expands (--expand does not apply
 * to it): it acts only on names the user spelled. */
static char *url_arg(const char *s)
{
	if (O.expand)
		return expand(s);
	if (strstr(s, "{rank") || strstr(s, "{size"))
		literal_braces = 1;
	return cli_strdup(s);
}

/* name as printed on a line of output: as it is, unless it holds a control
 * character (a newline in a key would split the line) or starts with "$'";
 * then in the shell's $'...' form, so that each line is one name and the
 * name, pasted into a shell, is the argument that addresses it.  Freed by
 * the caller. */
static char *shown(const char *name)
{
	char *r = dp_shown(name, strlen(name));
	if (!r)
		cli_die("out of memory");
	return r;
}

/* One line of output (ls, presign, --dryrun). */
static void out_line(const char *s)
{
	if (fputs(s, stdout) == EOF || fputc('\n', stdout) == EOF) {
		if (errno == EPIPE)
			cli_exit(CLI_PIPE);
		cli_die("stdout: %s", strerror(errno));
	}
}

/* --dryrun's line: "(dryrun) VERB: A" or "(dryrun) VERB: A SEP B", the
 * names as shown() prints them. */
static void dryrun(const char *verb, const char *a, const char *sep, const char *b)
{
	char *line = NULL, *sa = shown(a), *sb = b ? shown(b) : NULL;
	if ((sb ? asprintf(&line, "(dryrun) %s: %s %s %s", verb, sa, sep, sb)
		: asprintf(&line, "(dryrun) %s: %s", verb, sa)) < 0)
		cli_die("out of memory");
	out_line(line);
	free(line);
	free(sa);
	free(sb);
}

static const char usage_line[] =
	"usage: s3-pipe get|put|ls|fifo|presign|rm|whoami|sync|mb|rb [OPTION]... URL...   (s3-pipe --help lists "
	"every option)\n";

static const char help_text[] =
"usage: s3-pipe COMMAND [OPTION]... URL...\n"
"Stream objects between S3 (or any S3-compatible store) and pipes, files and\n"
"FIFOs.  URLs are s3://bucket/key, file:///path or plain paths; a URL ending\n"
"in '/' (or a directory) is a prefix.  Options may come before or after URLs.\n"
"\n"
"Commands:\n"
"  get URL...          write objects, everything under prefixes, or the entries\n"
"                      of manifests to stdout, in key order (or shuffled)\n"
"  put URL [FILE...]   upload stdin (or FILEs; several go under the prefix URL,\n"
"                      a directory's files too; --concurrency at a time)\n"
"  ls [URL...]         list objects: time (UTC), size, URL; no URL: the buckets\n"
"  fifo --dir D URL... SageMaker Pipe mode: create FIFOs D/CHANNEL_EPOCH and\n"
"                      stream one epoch into each as its reader opens it\n"
"  presign URL         print a presigned URL (--expires S, --method GET|PUT)\n"
"  rm URL...           delete objects (-r: everything under a \"directory\":\n"
"                      s3://b/a means s3://b/a/, never s3://b/ab; in requests\n"
"                      of 1000 keys)\n"
"  whoami              print the credentials' provider and key id (never the\n"
"                      secret), when they expire, the region and the endpoint\n"
"  sync SRC DST        make DST the same as SRC, a local directory and an S3\n"
"                      prefix (either way), as aws s3 sync: copy what DST\n"
"                      lacks, has in another size, or has older (-j at a time)\n"
"  mb s3://BUCKET      make a bucket (in --region)\n"
"  rb s3://BUCKET      remove an empty bucket\n"
"\n"
"Placeholders: {rank} and {size} are filled in -o, --dir and --shard (from\n"
"OMPI_COMM_WORLD_*, PMI_RANK/PMI_SIZE, SLURM_*; else 0 and 1), and in URLs only\n"
"with --expand (never for rm); {{ and }} are literal braces.\n"
"      --expand        fill {rank} and {size} in the URLs too (not rm)\n"
"\n"
"get and fifo:\n"
"  -o, --output=FILE   write to FILE, whole or not at all (get; default stdout)\n"
"      --range=A-B     only bytes A to B (also A- and -N) of one object (get)\n"
"      --shard=I/N     keep worker I's share of the keys (I of N, from 0);\n"
"                      each key goes to exactly one worker ({rank}/{size})\n"
"      --shuffle       shuffle the keys (before sharding), by --seed and --epoch\n"
"      --seed=S        shuffle seed (default 0)\n"
"      --epoch=E       epoch number (default 0): a new order each epoch; for fifo\n"
"                      the first epoch\n"
"      --manifest      the URLs are manifest files (SageMaker's ManifestFile\n"
"                      format: [{\"prefix\": URL}, \"relative/key\", ...])\n"
"      --no-verify     skip the MD5 check of single-part objects against the ETag\n"
"      --channel=NAME  fifo: channel name (default train)\n"
"      --epochs=E      fifo: number of epochs (default 1; 0: until killed)\n"
"      --dir=D         fifo: directory of the FIFOs (created if missing)\n"
"\n"
"ls, rm and put:\n"
"  -r, --recursive     ls: every key under the prefix, not only the first level;\n"
"                      rm: every object under the prefix (get, put: accepted;\n"
"                      they read prefixes and directories whole anyway)\n"
"      --json          ls: one JSON object per line\n"
"      --page-size=N   ls: keys per listing request (default 1000)\n"
"      --uploads       ls: multipart uploads in progress; rm: abort them\n"
"      --dryrun        rm, put, sync: print what would be done, do nothing\n"
"      --delete        sync: also delete what DST has and SRC has not (under\n"
"                      DST's prefix only, and what the filters keep)\n"
"      --exact-timestamps  sync from S3: copy a file of the same size whose\n"
"                      time differs at all (default: when S3's is newer)\n"
"      --dir-markers   put: also make the folder marker (an empty object KEY/)\n"
"                      of the prefix and of every directory put (empty ones\n"
"                      too); put PREFIX/ alone: only its marker\n"
"      --include=PAT, --exclude=PAT  (get, put, ls, rm, fifo, sync) keep or drop the\n"
"                      names under a URL or directory that match PAT (fnmatch:\n"
"                      '*' crosses '/'); in order, the last that matches wins\n"
"\n"
"presign:\n"
"      --expires=S     seconds the URL stays valid (default 3600, at most 604800)\n"
"      --method=M      GET (default) or PUT\n"
"\n"
"Connection:\n"
"      --endpoint-url=URL  S3-compatible endpoint (default: AWS_ENDPOINT_URL_S3,\n"
"                      AWS_ENDPOINT_URL, the profile, else AWS)\n"
"      --region=R      region (default: AWS_REGION, AWS_DEFAULT_REGION, the\n"
"                      profile, us-east-1)\n"
"      --profile=P     profile of the shared credentials and config files\n"
"                      (default: AWS_PROFILE, else default)\n"
"      --no-sign-request  anonymous requests\n"
"      --addressing-style=auto|path|virtual  bucket in the path or the host name\n"
"                      (auto: virtual-hosted on AWS, path-style elsewhere)\n"
"  -j, --concurrency=N requests in flight, at most (default 8)\n"
"      --part-size=SIZE  bytes per part of a download or an upload (default 8M)\n"
"      --retries=N     retries of a failed request (default 10)\n"
"      --timeout=S     a request that moves no byte for S seconds is retried (30)\n"
"\n"
"  -v, --verbose       log retries (-vv: every request) as key=value lines\n"
"  -q, --quiet         no progress display on a terminal\n"
"  -h, --help          this help\n"
"  -V, --version       version\n"
"\n"
"Credentials, as the AWS SDKs find them: the environment (AWS_ACCESS_KEY_ID...),\n"
"a web identity token (AWS_WEB_IDENTITY_TOKEN_FILE), the profile in\n"
"~/.aws/credentials, its credential_process, ~/.aws/config, the container\n"
"endpoint, the EC2 instance metadata service; never on the command line.\n"
"Exit status: 0 success, 1 failure, 2 usage, 3 not found, 4 access denied,\n"
"5 transfer failed (network or server, after retries), 141 reader gone.\n"
"See s3-pipe(1).\n";

static void help(void)
{
	/* all of it in the buffer: a failed write (--help >/dev/full) is then
	 * reported by cli_exit_stdout with its own errno */
	static char buf[16384];
	setvbuf(stdout, buf, _IOFBF, sizeof buf);
	fputs(help_text, stdout);
}

/* ---- Progress and logs -------------------------------------------------------------- */

static double t_start;

static void on_progress(void *ctx, uint64_t bytes)
{
	(void)ctx;
	char b[32], r[32];
	double dt = dp_now() - t_start;
	dp_fmt_size(bytes, b, sizeof b);
	dp_fmt_size(dt > 0 ? (uint64_t)((double)bytes / dt) : 0, r, sizeof r);
	cli_progress("%s: %s  %s/s", cli.prog, b, r);
}

static void on_log(void *ctx, const char *line)
{
	(void)ctx;
	cli_warn("%s", line);
}

static void summary(const dp_s3_stats *st)
{
	if (O.verbose < 1)
		return;
	double dt = dp_now() - t_start;
	cli_warn("bytes=%" PRIu64 " requests=%" PRIu64 " retries=%" PRIu64
		 " seconds=%.3f MiB_per_s=%.1f", st->bytes, st->requests, st->retries, dt,
		 dt > 0 ? (double)st->bytes / dt / 1048576 : 0);
}

/* ---- Signals ------------------------------------------------------------------------ */

static void on_signal(int sig)
{
	if (soft_cancel && !caught && S) {
		/* a multipart upload is running: let it abort, then die of sig */
		caught = sig;
		dp_s3_cancel(S);
		return;
	}
	dp_s3_fifos_break(&fifos, 0);
	dp_out_cleanup();
	signal(sig, SIG_DFL);
	raise(sig);
}

static void install_signals(void)
{
	cli_catch_signals((const int[]){SIGINT, SIGTERM, SIGHUP, SIGQUIT}, 4, on_signal, 1);
	/* SIGPIPE stays ignored: sockets may raise it in any thread (OpenSSL
	 * writes without MSG_NOSIGNAL); a closed stdout is EPIPE, and ends
	 * s3-pipe quietly with CLI_PIPE like every other program */
	signal(SIGPIPE, SIG_IGN);
}

/* ---- Standard streams ------------------------------------------------------------------------- */

/* Which of stdin, stdout, stderr the caller closed (<&-, >&-). */
static int std_closed[3];

/* Note the closed standard streams and put /dev/null in their place, so
 * that no socket or file opened later takes their numbers (a listing
 * written into an HTTP connection; put reading libcurl's own wake-up pipe
 * as its stdin, forever).  Reading a closed stdin or writing a closed
 * stdout is an error (stdin_fd, stdout_ok), as for cat. */
static void guard_std(void)
{
	for (int fd = 0; fd < 3; fd++) {
		if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
			continue;
		std_closed[fd] = 1;
		int n = open("/dev/null", fd ? O_WRONLY : O_RDONLY);
		if (n >= 0 && n != fd) {
			dup2(n, fd);
			close(n);
		}
	}
}

/* Standard input, to read from: an error when the caller closed it. */
static int stdin_fd(void)
{
	if (std_closed[0])
		cli_die("stdin: %s", strerror(EBADF));
	return STDIN_FILENO;
}

/* Before a command that writes standard output: an error when the caller
 * closed it (the output would be lost). */
static void stdout_ok(void)
{
	if (std_closed[1])
		cli_die("stdout: %s", strerror(EBADF));
}

/* ---- --include, --exclude -------------------------------------------------------------------- */

/* The filters in the order given (dp_s3_filters: aws s3's rules). */
static dp_s3_filters filters;

static void add_filter(int include, const char *pattern)
{
	dp_err e = {0};
	if (dp_s3_filters_add(&filters, include, pattern, &e) < 0)
		die_err(&e);
}

static int filtered_in(const char *name) { return dp_s3_filters_keep(&filters, name); }

static char *filter_base(const dp_loc *l)
{
	char *b = dp_s3_filter_base(l);
	if (!b)
		cli_die("out of memory");
	return b;
}

/* ---- get ---------------------------------------------------------------------------- */

static void collect(char **urls, int n, dp_objs *objs)
{
	dp_err e = {0};
	for (int i = 0; i < n; i++) {
		char *u = url_arg(urls[i]);
		size_t from = objs->n;
		if (dp_s3_expand(S, u, O.manifest, objs, &e) < 0)
			die_err(&e);
		if (filters.n) {
			dp_loc l;
			if (dp_loc_parse(u, &l, &e) < 0)
				die_err(&e);
			char *base = filter_base(&l);
			dp_s3_filters_apply(&filters, objs, from, base);
			free(base);
			dp_loc_free(&l);
		}
		free(u);
	}
}

static void copy_objs(const dp_objs *from, dp_objs *to)
{
	dp_err e = {0};
	for (size_t i = 0; i < from->n; i++)
		if (dp_objs_add(to, &from->v[i], &e) < 0)
			die_err(&e);
}

static void select_keys(dp_objs *objs, uint64_t epoch)
{
	if (O.shuffle)
		dp_objs_shuffle(objs, O.seed, epoch);
	if (O.shard)
		dp_objs_shard(objs, (int)O.shard_i, (int)O.shard_n);
}

static void cmd_get(char **urls, int n)
{
	if (n < 1)
		cli_usage_error("get: no URL");
	dp_range r = {0};
	if (O.range && dp_range_parse(O.range, &r) < 0)
		cli_bad_value("--range", O.range, "A-B, A- or -N");
	dp_objs objs = {0};
	collect(urls, n, &objs);
	if (r.set && objs.n != 1)
		cli_usage_error("--range applies to one object, not %zu", objs.n);
	select_keys(&objs, O.epoch);

	dp_err e = {0};
	dp_out out;
	char *outpath = NULL;
	if (O.output && strcmp(O.output, "-") != 0) {
		outpath = expand(O.output);
		if (dp_out_open(&out, outpath, &e) < 0)
			die_err(&e);
	} else {
		stdout_ok();
		if (dp_out_open(&out, "-", &e) < 0)
			die_err(&e);
	}
	dp_s3_stats st = {0};
	t_start = dp_now();
	int rc = dp_s3_get(S, &objs, r.set ? &r : NULL, out.fd, outpath ? outpath : "stdout", &st,
			   &e);
	dp_objs_free(&objs);
	if (rc < 0) {
		dp_out_abort(&out);
		free(outpath);
		die_err(&e);
	}
	if (dp_out_commit(&out, &e) < 0) {
		free(outpath);
		die_err(&e);
	}
	free(outpath);
	summary(&st);
}

/* ---- fifo: SageMaker Pipe mode ------------------------------------------------------------ */

/* SageMaker Pipe mode: epoch after epoch, each into its own FIFO, written
 * when a reader opens it.  The objects are listed first: no FIFO exists
 * before there is something to serve.  The next epoch's FIFO is made
 * before the current one is closed, so a reader that goes on to it at end
 * of file finds it; a finished epoch's FIFO is removed.  On a failure or a
 * signal the FIFOs are broken (dp_s3_fifos_break): removed, and a reader
 * that has one open reads DP_S3_FIFO_MARK before the end of its file. */
static void cmd_fifo(char **urls, int n)
{
	if (n < 1)
		cli_usage_error("fifo: no URL");
	if (!O.dir)
		cli_usage_error("fifo: --dir is required");
	if (!*O.channel || strchr(O.channel, '/'))
		cli_usage_error("--channel: '%s' is not a name", O.channel);
	char *dir = expand(O.dir);
	dp_objs all = {0};
	collect(urls, n, &all);
	dp_err e = {0};
	if (dp_s3_fifos_mkdirs(&fifos, dir, &e) < 0)
		die_err(&e);
	/* one writer a channel's FIFOs: a second run (a --dir without {rank},
	 * a second start) would mix its records into the first's stream, and
	 * remove its FIFOs when it ends; held until exit */
	char *real = realpath(dir, NULL), *key = NULL;
	int holder;
	if (!real || asprintf(&key, "s3-pipe fifo %s/%s", real, O.channel) < 0)
		cli_die("%s: %s", dir, strerror(errno));
	if (dp_hold_name(key, &holder, &e) < 0) {
		if (e.code != DP_EARG)
			die_err(&e);
		cli_die("%s/%s_*: served by another s3-pipe fifo (pid %d): two writers of one FIFO "
			"mix their records; give each run a --dir of its own ({rank})",
			dir, O.channel, holder);
	}
	free(real);
	free(key);
	if (dp_s3_fifos_make(&fifos, dir, O.channel, O.epoch, 0, &e) < 0)
		die_err(&e);
	uint64_t shift = 0; /* the reader's numbering over ours: 0 or 1 */
	for (uint64_t k = 0; O.epochs == 0 || k < O.epochs; k++) {
		uint64_t epoch = O.epoch + k;
		dp_objs objs = {0};
		copy_objs(&all, &objs);
		select_keys(&objs, epoch);
		if (O.verbose)
			cli_warn("fifo=%s epoch=%" PRIu64 " objects=%zu waiting for a reader",
				 fifos.path[0], epoch, objs.n);
		int fd;
		if (k == 0) {
			fd = dp_s3_fifos_first_reader(&fifos, dir, O.channel, epoch, &shift, &e);
			if (fd < 0)
				die_err(&e); /* on_fail breaks it */
			if (shift && O.verbose)
				cli_warn("fifo=%s: the reader numbers epochs from %" PRIu64
					 " ({epoch}): served so", fifos.path[0], epoch + 1);
		} else if ((fd = open(fifos.path[0], O_WRONLY | O_CLOEXEC)) < 0) {
			cli_die("%s: %s", fifos.path[0], strerror(errno));
		}
		dp_s3_stats st = {0};
		t_start = dp_now();
		int rc = dp_s3_get(S, &objs, NULL, fd, fifos.path[0], &st, &e);
		dp_objs_free(&objs);
		if (rc < 0 && !st.out_closed) {
			/* the reader must not take a short epoch for a whole one: give
			 * it a few seconds to make room for the mark */
			signals_blocked(1);
			dp_s3_fifos_break(&fifos, 2000);
			signals_blocked(0);
			close(fd);
			die_err(&e);
		}
		if (rc < 0) {
			/* the reader stopped early: its epoch is over */
			if (O.verbose)
				cli_warn("fifo=%s epoch=%" PRIu64 " reader closed after %" PRIu64
					 " bytes", fifos.path[0], epoch, st.bytes);
		} else {
			summary(&st);
		}
		dp_err e2 = {0};
		if ((O.epochs == 0 || k + 1 < O.epochs) &&
		    dp_s3_fifos_make(&fifos, dir, O.channel, epoch + 1 + shift, 1, &e2) < 0) {
			dp_s3_fifos_done(&fifos, fd); /* this epoch is whole: its reader gets all of it */
			die_err(&e2);
		}
		dp_s3_fifos_done(&fifos, fd);
	}
	signals_blocked(1);
	dp_s3_fifos_rmdirs(&fifos);
	signals_blocked(0);
	dp_objs_free(&all);
	free(dir);
}

/* ---- put ------------------------------------------------------------------------------------ */

/* Upload file (NULL or "-": stdin) to url; with --dryrun only say so. */
static void put_one(const char *url, const char *file)
{
	dp_err e = {0};
	dp_loc dst;
	if (dp_loc_parse(url, &dst, &e) < 0)
		die_err(&e);
	int fd = -1;
	int64_t size = -1;
	const char *name = "stdin";
	if (!file || !strcmp(file, "-")) {
		fd = stdin_fd();
	} else {
		fd = open(file, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			int saved = errno;
			cli_die_code(saved == ENOENT   ? S3P_NOTFOUND
				     : saved == EACCES ? S3P_DENIED
						       : CLI_FAIL,
				     "%s: %s", file, strerror(saved));
		}
		struct stat sb;
		if (fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode))
			cli_die("%s: is a directory", file);
		if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode))
			size = (int64_t)sb.st_size;
		name = file;
	}
	if (O.dryrun) {
		dryrun("upload", file ? file : "-", "to", url);
		if (fd != STDIN_FILENO)
			close(fd);
		dp_loc_free(&dst);
		return;
	}
	dp_s3_stats st = {0};
	t_start = dp_now();
	soft_cancel = dst.kind == DP_LOC_S3;
	int rc = dp_s3_put(S, &dst, fd, name, size, &st, &e);
	soft_cancel = 0;
	if (fd != STDIN_FILENO)
		close(fd);
	dp_loc_free(&dst);
	if (rc < 0)
		die_err(&e);
	if (caught)
		cli_exit(CLI_FAIL); /* on_fail re-raises it */
	summary(&st);
}

/* Make the folder marker url (a prefix ending in '/'; --dryrun: say so). */
static void put_marker(const char *url)
{
	dp_err e = {0};
	dp_loc l;
	if (dp_loc_parse(url, &l, &e) < 0)
		die_err(&e);
	if (O.dryrun) {
		dryrun("make folder", url, NULL, NULL);
	} else {
		if (dp_s3_mkdir(S, &l, &e) < 0)
			die_err(&e);
		if (O.verbose)
			cli_warn("made folder %s", url);
	}
	dp_loc_free(&l);
}

static size_t files_done, files_total;

/* dp_s3_put_files's, from its workers one at a time: progress, -v. */
static void put_done(void *ctx, size_t i)
{
	const dp_s3_file *v = ctx;
	files_done++;
	if (O.verbose)
		cli_warn("uploaded %s to %s", v[i].src, v[i].dst);
	else if (O.conf.progress && cli_progress_due())
		cli_progress("%s: %zu/%zu files", cli.prog, files_done, files_total);
}

/* Files and directories under the prefix url (dp_s3_plan_put: refused
 * whole, before anything is sent, when two would land on one key), then up
 * to --concurrency files at a time; the folder markers last. */
static void put_many(const char *url, char **args, int n)
{
	dp_s3_plan l;
	dp_err e = {0};
	if (dp_s3_plan_put(S, url, args, n, &filters, O.markers, &l, &e) < 0) {
		if (l.bad_arg)
			cli_usage_error("%s", e.msg);
		die_err(&e);
	}
	if (O.dryrun) {
		for (size_t i = 0; i < l.n; i++)
			put_one(l.v[i].dst, l.v[i].src);
	} else if (l.n) {
		dp_s3_stats st = {0};
		t_start = dp_now();
		files_total = l.n;
		soft_cancel = !strncmp(url, "s3://", 5);
		int rc = dp_s3_put_files(S, l.v, l.n, O.conf.concurrency, put_done, l.v, &st, &e);
		soft_cancel = 0;
		if (rc < 0)
			die_err(&e);
		if (caught)
			cli_exit(CLI_FAIL); /* on_fail re-raises it */
		cli_progress_clear();
		summary(&st);
	}
	if (O.markers) {
		put_marker(url);
		for (size_t i = 0; i < l.ndirs; i++)
			put_marker(l.dirs[i]);
	}
	dp_s3_plan_free(&l);
}

static void cmd_put(char **args, int n)
{
	if (n < 1)
		cli_usage_error("put: no URL");
	char *url = url_arg(args[0]);
	size_t ul = strlen(url);
	int prefix = ul && url[ul - 1] == '/';
	if (n == 1 && prefix && O.markers) {
		put_marker(url);
	} else if (n == 1) {
		if (prefix)
			cli_usage_error("put: %s ends in '/': name the object to write stdin to "
					"(or --dir-markers for its folder marker)", url);
		put_one(url, NULL);
	} else if (n == 2 && !prefix && !cli_is_dir(args[1])) {
		const char *name = strrchr(args[1], '/');
		if (filtered_in(name ? name + 1 : args[1]))
			put_one(url, args[1]);
	} else if (n == 2 && !prefix) {
		/* a directory: its files under URL/, as aws s3 cp --recursive */
		char *p = NULL;
		if (asprintf(&p, "%s/", url) < 0)
			cli_die("out of memory");
		put_many(p, args + 1, 1);
		free(p);
	} else {
		if (!prefix)
			cli_usage_error("put: several files go under a prefix ending in '/', not %s",
					url);
		put_many(url, args + 1, n - 1);
	}
	free(url);
}

/* "s3://bucket/key" or the local path of o, for messages and --dryrun. */
static char *name_of(int kind, const char *bucket, const char *key)
{
	char *u = NULL;
	if (kind == DP_LOC_FILE)
		return cli_strdup(key);
	if (asprintf(&u, "s3://%s/%s", bucket, key) < 0)
		cli_die("out of memory");
	return u;
}

/* ---- ls ------------------------------------------------------------------------------------- */

typedef struct lsctx {
	const dp_loc *loc;
	uint64_t n;
	int file_url; /* the location was given as a file: URL: answer in kind */
	const char *base; /* with --include/--exclude: what names are relative to */
} lsctx;

static void utc(int64_t t, char *buf, size_t len, int iso)
{
	if (t < 0) {
		snprintf(buf, len, iso ? "" : "                   ");
		return;
	}
	time_t tt = (time_t)t;
	struct tm tm;
	gmtime_r(&tt, &tm);
	strftime(buf, len, iso ? "%Y-%m-%dT%H:%M:%SZ" : "%Y-%m-%d %H:%M:%S", &tm);
}

static char *obj_url(const dp_obj *o, int file_url)
{
	char *u = NULL;
	if (o->kind == DP_LOC_FILE && file_url) {
		if (asprintf(&u, "file:%s%s", o->key[0] == '/' ? "//" : "", o->key) < 0)
			return NULL;
		return u;
	}
	if (o->kind == DP_LOC_FILE) {
		/* a local name that reads as a URL ("file:x") is printed as
		 * "./file:x", so that it names the same file as an argument */
		const char *sch = strstr(o->key, "://");
		int urlish = !strncmp(o->key, "file:", 5) || (sch && !memchr(o->key, '/', (size_t)(sch - o->key)));
		if (asprintf(&u, "%s%s", urlish ? "./" : "", o->key) < 0)
			return NULL;
		return u;
	}
	if (asprintf(&u, "s3://%s%s%s", o->bucket, *o->key || o->prefix ? "/" : "", o->key) < 0)
		return NULL;
	return u;
}

static int ls_cb(void *ctx, const dp_obj *o)
{
	lsctx *c = ctx;
	if (c->base && !filtered_in(dp_s3_rel_name(o->key, c->base)))
		return 0;
	c->n++;
	char *url = obj_url(o, c->file_url);
	if (!url)
		cli_die("out of memory");
	char t[32];
	if (O.json) {
		json_t *j;
		utc(o->mtime, t, sizeof t, 1);
		if (o->prefix && o->kind == DP_LOC_S3 && !*o->key)
			j = json_pack("{s:s,s:s,s:s}", "bucket", o->bucket, "url", url, "created", t);
		else if (o->prefix)
			j = json_pack("{s:s,s:s,s:b}", "key", o->key, "url", url, "prefix", 1);
		else
			j = json_pack("{s:s,s:s,s:I,s:s,s:s}", "key", o->key, "url", url, "size",
				      (json_int_t)o->size, "mtime", t, "etag", o->etag);
		char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
		if (!s)
			cli_die("%s: %s", url, j ? "out of memory" : "not UTF-8: cannot be written as JSON");
		out_line(s);
		free(s);
		json_decref(j);
	} else {
		char *line = NULL, *name = shown(url);
		utc(o->mtime, t, sizeof t, 0);
		int rc;
		if (o->prefix && o->kind == DP_LOC_S3 && !*o->key)
			rc = asprintf(&line, "%s %s", t, name);
		else if (o->prefix)
			rc = asprintf(&line, "%19s %12s %s", "", "PRE", name);
		else
			rc = asprintf(&line, "%s %12" PRIu64 " %s", t, o->size, name);
		if (rc < 0)
			cli_die("out of memory");
		out_line(line);
		free(line);
		free(name);
	}
	free(url);
	return 0;
}

static int up_cb(void *ctx, const char *bucket, const char *key, const char *id, int64_t init)
{
	lsctx *c = ctx;
	if (c->base && !filtered_in(dp_s3_rel_name(key, c->base)))
		return 0;
	c->n++;
	char t[32];
	if (O.json) {
		utc(init, t, sizeof t, 1);
		json_t *j = json_pack("{s:s,s:s,s:s,s:s}", "bucket", bucket, "key", key, "upload_id",
				      id, "initiated", t);
		char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
		if (!s)
			cli_die("s3://%s/%s: %s", bucket, key, j ? "out of memory" : "not UTF-8");
		out_line(s);
		free(s);
		json_decref(j);
	} else {
		utc(init, t, sizeof t, 0);
		char *line = NULL, *name = name_of(DP_LOC_S3, bucket, key), *sh = shown(name);
		if (asprintf(&line, "%s %s %s", t, id, sh) < 0)
			cli_die("out of memory");
		out_line(line);
		free(line);
		free(sh);
		free(name);
	}
	return 0;
}

static void cmd_ls(char **urls, int n)
{
	char *dflt[] = {"s3://"};
	if (n == 0) {
		urls = dflt;
		n = 1;
	}
	dp_err e = {0};
	for (int i = 0; i < n; i++) {
		char *u = url_arg(urls[i]);
		dp_loc l;
		if (dp_loc_parse(u, &l, &e) < 0)
			die_err(&e);
		lsctx c = {&l, 0, !strncmp(u, "file:", 5), NULL};
		char *base = filters.n && (l.kind == DP_LOC_FILE || *l.bucket) ? filter_base(&l) : NULL;
		c.base = base;
		int rc = O.uploads ? dp_s3_list_uploads(S, &l, up_cb, &c, &e)
				   : dp_s3_list(S, &l, O.recursive, O.page_size, ls_cb, &c, &e);
		if (rc < 0)
			die_err(&e);
		/* nothing at or under a key is "not found", as for a local path;
		 * a bucket's root (or the list of buckets) may be empty */
		if (c.n == 0 && !O.uploads && l.kind == DP_LOC_S3 && *l.bucket && *l.key)
			cli_die_code(S3P_NOTFOUND, "%s: no such key or prefix%s", u,
				     filters.n ? " (that the filters keep)" : "");
		free(base);
		dp_loc_free(&l);
		free(u);
	}
}

/* ---- rm, presign ------------------------------------------------------------------------------ */

/* Remove one object or file (--dryrun: say what would be removed). */
static void rm_one(int kind, const char *bucket, const char *key)
{
	char *name = name_of(kind, bucket, key);
	if (O.dryrun) {
		dryrun("delete", name, NULL, NULL);
	} else {
		dp_err e = {0};
		dp_loc l = {.kind = kind, .bucket = (char *)bucket, .key = (char *)key};
		if (dp_s3_rm(S, &l, &e) < 0)
			die_err(&e);
		if (O.verbose)
			cli_warn("removed %s", name);
	}
	free(name);
}

typedef struct rmctx {
	dp_objs objs;
	dp_err *e;
} rmctx;

/* -v: each object as it goes (dp_s3_rm_many's). */
static int removed_cb(void *ctx, const dp_obj *o)
{
	(void)ctx;
	char *name = name_of(o->kind, o->bucket, o->key);
	cli_warn("removed %s", name);
	free(name);
	return 0;
}

static int rm_collect(void *ctx, const dp_obj *o)
{
	rmctx *c = ctx;
	if (o->prefix)
		return 0;
	return dp_objs_add(&c->objs, o, c->e);
}

/* Do the filters keep the one object l names (by its base name)? */
static int rm_kept(const dp_loc *l)
{
	if (!filters.n)
		return 1;
	char *base = filter_base(l);
	int in = filtered_in(dp_s3_rel_name(l->key, base));
	free(base);
	return in;
}

/* rm -r u: everything under the "directory" u names, as aws does: an S3
 * key that does not end in '/' is taken as key + '/', so s3://b/a removes
 * s3://b/a/x but neither the object s3://b/a nor s3://b/ab; a local path
 * is a directory (its files) or a file.  Nothing there: DP_ENOTFOUND,
 * except for a bucket's root or an existing directory, empty. */
static void rm_tree(const char *u, dp_loc *l)
{
	dp_err e = {0};
	int root = 0;
	if (l->kind == DP_LOC_S3) {
		size_t n = strlen(l->key);
		if (!*l->bucket)
			cli_usage_error("rm: %s names no bucket", u);
		root = n == 0;
		if (n && l->key[n - 1] != '/') {
			l->key = cli_realloc(l->key, n + 2);
			memcpy(l->key + n, "/", 2);
		}
	} else {
		struct stat sb;
		if (stat(l->key, &sb) < 0) {
			int saved = errno;
			cli_die_code(saved == ENOENT || saved == ENOTDIR ? S3P_NOTFOUND : CLI_FAIL,
				     "%s: %s", u, strerror(saved));
		}
		if (!S_ISDIR(sb.st_mode)) {
			if (rm_kept(l))
				rm_one(l->kind, l->bucket, l->key);
			return;
		}
		root = 1;
	}
	rmctx c = {.e = &e};
	if (dp_s3_list(S, l, 1, 0, rm_collect, &c, &e) < 0)
		die_err(&e);
	size_t listed = c.objs.n;
	char *base = filter_base(l);
	dp_s3_filters_apply(&filters, &c.objs, 0, base);
	free(base);
	if (listed == 0 && !root)
		cli_die_code(S3P_NOTFOUND, "s3://%s/%s: no objects under this prefix", l->bucket,
			     l->key);
	if (O.dryrun) {
		for (size_t k = 0; k < c.objs.n; k++)
			rm_one(c.objs.v[k].kind, c.objs.v[k].bucket, c.objs.v[k].key);
	} else if (dp_s3_rm_many(S, &c.objs, O.verbose ? removed_cb : NULL, NULL, &e) < 0) {
		die_err(&e);
	}
	dp_objs_free(&c.objs);
}

static int first_cb(void *ctx, const dp_obj *o)
{
	if (!o->prefix)
		*(char **)ctx = cli_strdup(o->key);
	return 1;
}

/* Is there an object whose key is exactly l's (a key ending in '/', a
 * "folder marker")?  It comes first in a listing of that prefix. */
static int marker_exists(const dp_loc *l)
{
	dp_err e = {0};
	char *first = NULL;
	int rc = dp_s3_list(S, l, 0, 1, first_cb, &first, &e);
	if (rc < 0)
		die_err(&e);
	int yes = first && !strcmp(first, l->key);
	free(first);
	return yes;
}

typedef struct upctx {
	const dp_loc *l;
	const char *base; /* with filters */
	int n;
} upctx;

static int abort_cb(void *ctx, const char *bucket, const char *key, const char *id, int64_t t)
{
	(void)t;
	upctx *c = ctx;
	/* the uploads of the key named, or under it as a "directory": never of
	 * the neighbours that merely start with it */
	size_t n = strlen(c->l->key);
	if (n && c->l->key[n - 1] != '/' && strcmp(key, c->l->key) != 0 && key[n] != '/')
		return 0;
	if (c->base && !filtered_in(dp_s3_rel_name(key, c->base)))
		return 0;
	if (O.dryrun) {
		char *name = name_of(DP_LOC_S3, bucket, key);
		dryrun("abort upload", id, "of", name);
		free(name);
		return 0;
	}
	dp_err e = {0};
	if (dp_s3_abort_upload(S, bucket, key, id, &e) < 0 && e.code != DP_ENOTFOUND)
		die_err(&e);
	if (O.verbose)
		cli_warn("aborted upload %s of s3://%s/%s", id, bucket, key);
	c->n++;
	return 0;
}

static void cmd_rm(char **urls, int n)
{
	if (n < 1)
		cli_usage_error("rm: no URL");
	dp_err e = {0};
	for (int i = 0; i < n; i++) {
		const char *u = urls[i]; /* never expanded: rm acts on names as spelled */
		dp_loc l;
		if (dp_loc_parse(u, &l, &e) < 0)
			die_err(&e);
		if (O.uploads) {
			char *base = filters.n ? filter_base(&l) : NULL;
			upctx c = {.l = &l, .base = base};
			if (dp_s3_list_uploads(S, &l, abort_cb, &c, &e) < 0)
				die_err(&e);
			free(base);
		} else if (O.recursive) {
			rm_tree(u, &l);
		} else if (l.kind == DP_LOC_S3 && *l.bucket && *l.key && dp_loc_is_dir(&l)) {
			/* a key ending in '/': that one object (a folder marker, as
			 * ls -r lists it), if it exists; else the user meant a prefix */
			if (!marker_exists(&l))
				cli_usage_error("rm: %s is a prefix: use -r", u);
			if (rm_kept(&l))
				rm_one(l.kind, l.bucket, l.key);
		} else {
			if (dp_loc_is_dir(&l))
				cli_usage_error("rm: %s is a prefix or directory: use -r", u);
			if (rm_kept(&l))
				rm_one(l.kind, l.bucket, l.key);
		}
		dp_loc_free(&l);
	}
}

static void cmd_presign(char **urls, int n)
{
	if (n != 1)
		cli_usage_error("presign: one URL");
	cli_word("--method", O.method, "GET PUT");
	dp_err e = {0};
	char *u = url_arg(urls[0]);
	dp_loc l;
	if (dp_loc_parse(u, &l, &e) < 0)
		die_err(&e);
	char *url = dp_s3_presign(S, &l, O.method, O.expires, &e);
	dp_loc_free(&l);
	free(u);
	if (!url)
		die_err(&e);
	out_line(url);
	free(url);
}

/* What the client signs with, fetched now: one logfmt line, no secret. */
static void cmd_whoami(int n)
{
	if (n != 0)
		cli_usage_error("whoami: no URL");
	dp_err e = {0};
	if (dp_s3_credentials(S, &e) < 0)
		die_err(&e);
	dp_s3_info i;
	dp_s3_get_info(S, &i);
	char exp[32] = "never";
	if (i.expires) {
		time_t t = (time_t)i.expires;
		struct tm tm;
		gmtime_r(&t, &tm);
		strftime(exp, sizeof exp, "%Y-%m-%dT%H:%M:%SZ", &tm);
	}
	char line[2048];
	snprintf(line, sizeof line,
		 "provider=%s key_id=%s expires=%s profile=%s region=%s endpoint=%s",
		 i.method[0] ? i.method : "none", i.key_id[0] ? i.key_id : "-", exp, i.profile,
		 i.region, i.endpoint);
	out_line(line);
}

/* ---- sync, mb, rb ---------------------------------------------------------------------------- */

static int sync_keep(void *ctx, const char *rel)
{
	(void)ctx;
	return filtered_in(rel);
}

/* dp_s3_sync's report: --dryrun's lines, -v's notes, the progress. */
static void sync_report(void *ctx, const char *verb, const char *src, const char *dst)
{
	(void)ctx;
	if (O.dryrun) {
		dryrun(verb, src, dst ? "to" : NULL, dst);
	} else if (O.verbose) {
		char *a = shown(src), *b = dst ? shown(dst) : NULL;
		static const char *const done[][2] = {{"upload", "uploaded"},
			{"download", "downloaded"}, {"copy", "copied"}, {"delete", "removed"}};
		const char *what = verb;
		for (size_t i = 0; i < sizeof done / sizeof done[0]; i++)
			if (!strcmp(verb, done[i][0]))
				what = done[i][1];
		cli_warn("%s %s%s%s", what, a, b ? " to " : "", b ? b : "");
		free(a);
		free(b);
	} else if (O.conf.progress && cli_progress_due()) {
		cli_progress("%s: %zu files", cli.prog, ++files_done);
	}
}

/* sync SRC DST: a local directory and an S3 prefix, or two directories. */
static void cmd_sync(char **args, int n)
{
	if (n != 2)
		cli_usage_error("sync: want SRC and DST, a directory and an S3 prefix (either way) or two directories");
	char *src = url_arg(args[0]), *dst = url_arg(args[1]);
	dp_s3_sync_conf c = {.exact_timestamps = O.exact, .delete_extra = O.delete_extra,
			     .dryrun = O.dryrun, .jobs = O.conf.concurrency, .keep = sync_keep,
			     .report = sync_report};
	dp_s3_sync_stats st = {0};
	dp_err e = {0};
	t_start = dp_now();
	soft_cancel = 1; /* uploads abort, downloads leave no temporary: then die of the signal */
	int rc = dp_s3_sync(S, src, dst, &c, &st, &e);
	soft_cancel = 0;
	if (rc == DP_EARG)
		cli_usage_error("%s", e.msg);
	if (rc < 0)
		die_err(&e);
	if (caught)
		cli_exit(CLI_FAIL); /* on_fail re-raises it */
	cli_progress_clear();
	if (O.verbose && !O.dryrun)
		cli_warn("%zu copied, %zu deleted, %zu already the same", st.copied, st.deleted, st.same);
	summary(&st.io);
	free(src);
	free(dst);
}

/* mb / rb s3://BUCKET... */
static void cmd_bucket(char **args, int n)
{
	const char *verb = cmd_names[O.cmd];
	if (n < 1)
		cli_usage_error("%s: no bucket (s3://BUCKET)", verb);
	for (int i = 0; i < n; i++) {
		dp_err e = {0};
		dp_loc l;
		char *u = url_arg(args[i]);
		if (dp_loc_parse(u, &l, &e) < 0)
			die_err(&e);
		if (l.kind != DP_LOC_S3 || !*l.bucket || (*l.key && strcmp(l.key, "/")))
			cli_usage_error("%s: %s: want s3://BUCKET", verb, u);
		if ((O.cmd == C_MB ? dp_s3_mb : dp_s3_rb)(S, l.bucket, &e) < 0)
			die_err(&e);
		if (O.verbose)
			cli_warn("%s s3://%s", O.cmd == C_MB ? "made bucket" : "removed bucket", l.bucket);
		dp_loc_free(&l);
		free(u);
	}
}

/* ---- Command line -------------------------------------------------------------------------- */

enum {
	OPT_RANGE = 256, OPT_SHARD, OPT_SHUFFLE, OPT_SEED, OPT_EPOCH, OPT_EPOCHS, OPT_CHANNEL,
	OPT_DIR, OPT_MANIFEST, OPT_NO_VERIFY, OPT_JSON, OPT_PAGE_SIZE, OPT_UPLOADS, OPT_EXPIRES,
	OPT_METHOD, OPT_ENDPOINT, OPT_REGION, OPT_PROFILE, OPT_NO_SIGN, OPT_ADDRESSING,
	OPT_PART_SIZE, OPT_RETRIES, OPT_TIMEOUT, OPT_DRYRUN, OPT_DIR_MARKERS, OPT_EXPAND, OPT_INCLUDE, OPT_EXCLUDE,
	OPT_DELETE, OPT_EXACT,
};

/* the commands on keys and files (not whoami, mb, rb) */
#define ALL                                                                                 \
	(CLI_CMD(C_GET) | CLI_CMD(C_PUT) | CLI_CMD(C_LS) | CLI_CMD(C_FIFO) | CLI_CMD(C_PRESIGN) | \
	 CLI_CMD(C_RM) | CLI_CMD(C_SYNC))

/* The options and the commands that take each (another command given one
 * is a usage error). */
static const struct cli_cmd_option opts[] = {
	{"output", required_argument, 'o', CLI_CMD(C_GET)},
	{"range", required_argument, OPT_RANGE, CLI_CMD(C_GET)},
	{"shard", required_argument, OPT_SHARD, CLI_CMD(C_GET) | CLI_CMD(C_FIFO)},
	{"shuffle", no_argument, OPT_SHUFFLE, CLI_CMD(C_GET) | CLI_CMD(C_FIFO)},
	{"seed", required_argument, OPT_SEED, CLI_CMD(C_GET) | CLI_CMD(C_FIFO)},
	{"epoch", required_argument, OPT_EPOCH, CLI_CMD(C_GET) | CLI_CMD(C_FIFO)},
	{"manifest", no_argument, OPT_MANIFEST, CLI_CMD(C_GET) | CLI_CMD(C_FIFO)},
	{"no-verify", no_argument, OPT_NO_VERIFY, CLI_CMD(C_GET) | CLI_CMD(C_FIFO)},
	{"epochs", required_argument, OPT_EPOCHS, CLI_CMD(C_FIFO)},
	{"channel", required_argument, OPT_CHANNEL, CLI_CMD(C_FIFO)},
	{"dir", required_argument, OPT_DIR, CLI_CMD(C_FIFO)},
	{"recursive", no_argument, 'r', CLI_CMD(C_LS) | CLI_CMD(C_RM) | CLI_CMD(C_GET) | CLI_CMD(C_PUT)},
	{"include", required_argument, OPT_INCLUDE, ALL & ~CLI_CMD(C_PRESIGN)},
	{"exclude", required_argument, OPT_EXCLUDE, ALL & ~CLI_CMD(C_PRESIGN)},
	{"json", no_argument, OPT_JSON, CLI_CMD(C_LS)},
	{"page-size", required_argument, OPT_PAGE_SIZE, CLI_CMD(C_LS)},
	{"uploads", no_argument, OPT_UPLOADS, CLI_CMD(C_LS) | CLI_CMD(C_RM)},
	{"expires", required_argument, OPT_EXPIRES, CLI_CMD(C_PRESIGN)},
	{"method", required_argument, OPT_METHOD, CLI_CMD(C_PRESIGN)},
	{"dryrun", no_argument, OPT_DRYRUN, CLI_CMD(C_PUT) | CLI_CMD(C_RM) | CLI_CMD(C_SYNC)},
	{"delete", no_argument, OPT_DELETE, CLI_CMD(C_SYNC)},
	{"exact-timestamps", no_argument, OPT_EXACT, CLI_CMD(C_SYNC)},
	{"dir-markers", no_argument, OPT_DIR_MARKERS, CLI_CMD(C_PUT)},
	{"expand", no_argument, OPT_EXPAND, ALL & ~CLI_CMD(C_RM)},
	{"endpoint-url", required_argument, OPT_ENDPOINT, CLI_EVERY_CMD},
	{"region", required_argument, OPT_REGION, CLI_EVERY_CMD},
	{"profile", required_argument, OPT_PROFILE, CLI_EVERY_CMD},
	{"no-sign-request", no_argument, OPT_NO_SIGN, CLI_EVERY_CMD},
	{"addressing-style", required_argument, OPT_ADDRESSING, CLI_EVERY_CMD},
	{"concurrency", required_argument, 'j', CLI_EVERY_CMD},
	{"part-size", required_argument, OPT_PART_SIZE, CLI_EVERY_CMD},
	{"retries", required_argument, OPT_RETRIES, CLI_EVERY_CMD},
	{"timeout", required_argument, OPT_TIMEOUT, CLI_EVERY_CMD},
	{"verbose", no_argument, 'v', CLI_EVERY_CMD},
	{"quiet", no_argument, 'q', CLI_EVERY_CMD},
};
#define NOPTS (sizeof opts / sizeof opts[0])

static void set_addressing(const char *v)
{
	static const int style[] = {DP_S3_ADDR_AUTO, DP_S3_ADDR_PATH, DP_S3_ADDR_VIRTUAL};
	O.conf.addressing = style[cli_word("--addressing-style", v, "auto path virtual")];
}

/* One option (getopt_long's c) and its value. */
static void set_option(int c, const char *v, char **argv)
{
	switch (c) {
	case 'o': O.output = v; break;
	case OPT_RANGE: O.range = v; break;
	case OPT_SHARD: O.shard = v; break;
	case OPT_SHUFFLE: O.shuffle = 1; break;
	case OPT_SEED: O.seed = cli_count("--seed", v, 0, UINT64_MAX); break;
	case OPT_EPOCH: O.epoch = cli_count("--epoch", v, 0, UINT64_MAX); break;
	case OPT_EPOCHS: O.epochs = cli_count("--epochs", v, 0, UINT64_MAX); break;
	case OPT_CHANNEL: O.channel = v; break;
	case OPT_DIR: O.dir = v; break;
	case OPT_MANIFEST: O.manifest = 1; break;
	case OPT_NO_VERIFY: O.conf.no_verify = 1; break;
	case 'r': O.recursive = 1; break;
	case OPT_JSON: O.json = 1; break;
	case OPT_PAGE_SIZE: O.page_size = (int)cli_count("--page-size", v, 1, 1000); break;
	case OPT_UPLOADS: O.uploads = 1; break;
	case OPT_EXPIRES: O.expires = (long)cli_count("--expires", v, 1, 604800); break;
	case OPT_METHOD: O.method = v; break;
	case OPT_DRYRUN: O.dryrun = 1; break;
	case OPT_DIR_MARKERS: O.markers = 1; break;
	case OPT_EXPAND: O.expand = 1; break;
	case OPT_INCLUDE: add_filter(1, v); break;
	case OPT_EXCLUDE: add_filter(0, v); break;
	case OPT_DELETE: O.delete_extra = 1; break;
	case OPT_EXACT: O.exact = 1; break;
	case OPT_ENDPOINT: O.conf.endpoint_url = v; break;
	case OPT_REGION: O.conf.region = v; break;
	case OPT_PROFILE: O.conf.profile = v; break;
	case OPT_NO_SIGN: O.conf.no_sign = 1; break;
	case OPT_ADDRESSING: set_addressing(v); break;
	case 'j': O.conf.concurrency = (int)cli_count("--concurrency", v, 1, 256); break;
	case OPT_PART_SIZE: O.conf.part_size = cli_size("--part-size", v, 1024, 5ull << 30); break;
	case OPT_RETRIES: O.conf.retries = (int)cli_count("--retries", v, 0, 100); break;
	case OPT_TIMEOUT: O.conf.timeout = (double)cli_count("--timeout", v, 1, 86400); break;
	case 'v': O.verbose++; break;
	case 'q': O.quiet = 1; break;
	default: cli_default_option(c, argv, help);
	}
}

/* Read the options into O (they may come anywhere on the line) and the
 * command; returns the command's arguments (*nargs of them). */
static char **parse_args(int argc, char **argv, int *nargs)
{
	unsigned char used[NOPTS] = {0};
	cli_cmd_getopt(argc, argv, ":o:rj:vqhV", opts, NOPTS, used, set_option);
	char **args = argv + optind;
	if (optind >= argc)
		cli_usage_error("no command");
	for (int k = 1; k < C_LAST; k++)
		if (!strcmp(args[0], cmd_names[k]))
			O.cmd = k;
	if (!O.cmd)
		cli_usage_error("unknown command '%s' (get, put, ls, fifo, presign, rm, whoami, sync, "
				"mb, rb)",
				args[0]);
	cli_cmd_check(opts, NOPTS, used, O.cmd, cmd_names[O.cmd]);
	if (filters.n && O.manifest)
		cli_usage_error("--include and --exclude do not apply to --manifest (it names each key)");
	if (O.conf.part_size < (5u << 20) && (O.cmd == C_PUT || O.cmd == C_SYNC))
		cli_usage_error("--part-size: S3 parts are at least 5M");
	*nargs = argc - optind - 1;
	return args + 1;
}

int main(int argc, char **argv)
{
	cli.prog = DP_PROG;
	cli.usage = usage_line;
	cli.on_fail = on_fail;
	dp_s3_conf_init(&O.conf);
	int nargs;
	char **args = parse_args(argc, argv, &nargs);
	guard_std();
	if (O.cmd == C_LS || O.cmd == C_PRESIGN || O.cmd == C_WHOAMI || O.dryrun)
		stdout_ok();
	if (O.shard) /* checked before any request */
		cli_part("--shard", O.shard, NULL, &O.shard_i, &O.shard_n);

	if (O.verbose) {
		O.conf.log = on_log;
		O.conf.verbose = O.verbose > 1;
	}
	if (!O.quiet && isatty(STDERR_FILENO) && O.cmd != C_LS && O.cmd != C_PRESIGN &&
	    O.cmd != C_RM && O.cmd != C_WHOAMI && O.cmd != C_MB && O.cmd != C_RB) {
		O.conf.progress = on_progress;
		cli_progress_on(1);
	}
	install_signals();
	dp_err e = {0};
	S = dp_s3_new(&O.conf, &e);
	if (!S)
		die_err(&e);
	switch (O.cmd) {
	case C_GET: cmd_get(args, nargs); break;
	case C_PUT: cmd_put(args, nargs); break;
	case C_LS: cmd_ls(args, nargs); break;
	case C_FIFO: cmd_fifo(args, nargs); break;
	case C_PRESIGN: cmd_presign(args, nargs); break;
	case C_WHOAMI: cmd_whoami(nargs); break;
	case C_SYNC: cmd_sync(args, nargs); break;
	case C_MB:
	case C_RB: cmd_bucket(args, nargs); break;
	default: cmd_rm(args, nargs); break;
	}
	cli_progress_clear();
	dp_s3 *s = S;
	S = NULL;
	dp_s3_free(s);
	cli_exit_stdout();
}
