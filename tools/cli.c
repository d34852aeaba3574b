/*
 * cli.c - the command-line layer under every dptools program: see cli.h.
 */
#define _GNU_SOURCE
#include "cli.h"
#include "dp_record.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct cli cli = {.prog = "dptools", .rank = -1};

/* Every program takes the DP_* overrides of its environment (dp.h,
 * "Settings"), before main and before any thread. */
__attribute__((constructor)) static void cli_settings(void)
{
	dp_settings_from_env();
}

/* The last message printed, for cli.failure_file (SageMaker reads the
 * first 1 KiB of its failure file). */
static char last_msg[1024];

void cli_vwarn(const char *fmt, va_list ap)
{
	if (cli.quiet)
		return;
	cli_progress_clear();
	if (cli.before_msg)
		cli.before_msg();
	char prefix[64], *msg = NULL;
	if (cli.rank >= 0)
		snprintf(prefix, sizeof prefix, "%s: rank %d: ", cli.prog, cli.rank);
	else
		snprintf(prefix, sizeof prefix, "%s: ", cli.prog);
	if (vasprintf(&msg, fmt, ap) < 0)
		msg = NULL;
	snprintf(last_msg, sizeof last_msg, "%s%s", prefix, msg ? msg : fmt);
	/* one line, one call (stderr is unbuffered: glibc writes a call's
	 * output at once), so that a rank killed by mpirun's abort while it
	 * prints leaves the line whole or nothing, not "dp-train: " */
	fprintf(stderr, "%s%s\n", prefix, msg ? msg : fmt);
	free(msg);
}

/* cli.failure_file: the last message, whole or not at all. */
static void write_failure(void)
{
	dp_out o;
	dp_err e;
	size_t n = strlen(last_msg);
	if (!cli.failure_file || cli.quiet || !n)
		return;
	if (n == sizeof last_msg - 1) /* cut short: not inside a UTF-8 character */
		while (n > 1 && ((unsigned char)last_msg[n - 1] & 0xc0) == 0x80)
			n--;
	last_msg[n < sizeof last_msg - 1 ? n : n - 1] = '\n';
	n += n < sizeof last_msg - 1;
	/* its folder (SageMaker's ROOT/output) may not exist yet in a tree
	 * made by hand: made here, or the failure would go unrecorded */
	char dir[PATH_MAX];
	const char *slash = strrchr(cli.failure_file, '/');
	if (slash && (size_t)(slash - cli.failure_file) < sizeof dir) {
		memcpy(dir, cli.failure_file, (size_t)(slash - cli.failure_file));
		dir[slash - cli.failure_file] = 0;
		if (*dir)
			mkdir(dir, 0777);
	}
	if (dp_out_open(&o, cli.failure_file, &e) < 0)
		goto fail;
	if (dp_write_all(o.fd, last_msg, n, cli.failure_file, &e) < 0) {
		dp_out_abort(&o);
		goto fail;
	}
	if (dp_out_commit(&o, &e) == 0)
		return;
fail:
	fprintf(stderr, "%s: %s\n", cli.prog, e.msg);
}

void cli_warn(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	cli_vwarn(fmt, ap);
	va_end(ap);
}

void cli_exit(int code)
{
	if (code > 0) {
		fflush(stderr);
		if (code != CLI_PIPE)
			write_failure();
		if (cli.on_fail)
			cli.on_fail(code);
		else
			dp_out_cleanup();
	}
	exit(code);
}

static int job_rank; /* this process's rank in its job; 0 outside one */

void cli_set_rank(int rank, int size)
{
	job_rank = rank;
	cli.rank = size > 1 ? rank : -1;
	cli.quiet = 0;
}

void cli_job_says(void)
{
	cli.rank = -1;
	cli.quiet = job_rank != 0;
}

void cli_die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	cli_vwarn(fmt, ap);
	va_end(ap);
	cli_exit(CLI_FAIL);
}

void cli_die_code(int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	cli_vwarn(fmt, ap);
	va_end(ap);
	cli_exit(code);
}

void cli_die_err(int code, const dp_err *e)
{
	if (e->sys == EPIPE)
		cli_exit(CLI_PIPE);
	cli_die_code(code, "%s", e->msg);
}

static void __attribute__((noreturn)) usage_v(const char *fmt, va_list ap)
{
	cli_vwarn(fmt, ap);
	if (!cli.quiet && cli.usage)
		fputs(cli.usage, stderr);
	cli_exit(CLI_USAGE);
}

void cli_usage_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	usage_v(fmt, ap);
}

void cli_job_usage_error(const char *fmt, ...)
{
	va_list ap;
	cli_job_says();
	va_start(ap, fmt);
	usage_v(fmt, ap);
}

void cli_bad_option(int c, char **argv)
{
	extern int optind, optopt;
	/* the word getopt stopped at: "-x", "--name" (less any "=value") */
	char word[128];
	const char *arg = optind > 0 ? argv[optind - 1] : "";
	if (optopt && !(arg[0] == '-' && arg[1] == '-'))
		snprintf(word, sizeof word, "-%c", optopt);
	else
		snprintf(word, sizeof word, "%.*s", (int)strcspn(arg, "="), arg);
	if (c == ':')
		cli_usage_error("option '%s' needs a value", word);
	cli_usage_error("unknown option '%s'", word);
}

void cli_default_option(int c, char **argv, void (*help)(void))
{
	if (c == 'h')
		cli_help(help);
	if (c == 'V')
		cli_version();
	cli_bad_option(c, argv);
}

int cli_close_stdout(void)
{
	errno = 0;
	int bad = fflush(stdout) == EOF || ferror(stdout);
	int err = errno;
	if (bad && !err) { /* failed in an earlier flush, its errno gone: a pipe
			    * whose reader left still says so */
		struct pollfd p = {STDOUT_FILENO, POLLOUT, 0};
		if (poll(&p, 1, 0) == 1 && (p.revents & POLLERR))
			err = EPIPE;
	}
	if (fclose(stdout) == EOF && !bad) {
		bad = 1;
		err = errno;
	}
	if (!bad)
		return 0;
	if (err == EPIPE)
		cli_exit(CLI_PIPE);
	if (err)
		cli_warn("stdout: %s", strerror(err));
	else
		cli_warn("stdout: write error");
	return -1;
}

void cli_exit_stdout(void)
{
	cli_exit(cli_close_stdout() < 0 ? CLI_FAIL : CLI_OK);
}

void cli_cmd_getopt(int argc, char **argv, const char *shortopts, const struct cli_cmd_option *opts,
		    size_t n, unsigned char *used, void (*set)(int c, const char *arg, char **argv))
{
	static const struct option end[] = {CLI_OPTIONS_END};
	struct option *lopts = cli_malloc(sizeof end + n * sizeof *lopts);
	for (size_t i = 0; i < n; i++)
		lopts[i] = (struct option){opts[i].name, opts[i].has_arg, NULL, opts[i].val};
	memcpy(lopts + n, end, sizeof end);
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, shortopts, lopts, NULL)) != -1) {
		for (size_t i = 0; i < n; i++)
			used[i] |= opts[i].val == c;
		set(c, optarg, argv);
	}
	free(lopts);
}

void cli_cmd_check(const struct cli_cmd_option *opts, size_t n, const unsigned char *used, int cmd,
		   const char *cmd_name)
{
	for (size_t i = 0; i < n; i++)
		if (used[i] && !(opts[i].cmds & CLI_CMD(cmd)))
			cli_usage_error("--%s does not apply to %s", opts[i].name, cmd_name);
}

void cli_help(void (*help)(void))
{
	if (!cli.quiet)
		help();
	cli_exit_stdout();
}

void cli_version(void)
{
	if (!cli.quiet)
		printf("%s (dptools) %s\n", cli.prog, dp_version());
	cli_exit_stdout();
}

uint64_t cli_count(const char *opt, const char *s, uint64_t min, uint64_t max)
{
	uint64_t v;
	dp_err e;
	if (dp_parse_count(opt, s, min, max, &v, &e) < 0)
		cli_usage_error("%s", e.msg);
	return v;
}

double cli_real(const char *opt, const char *s, double min, double max)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (end == s || *end || errno || !isfinite(v) || v < min || v > max)
		cli_usage_error("%s '%s': want a number from %g to %g", opt, s, min, max);
	return v;
}

uint64_t cli_size(const char *opt, const char *s, uint64_t min, uint64_t max)
{
	uint64_t v;
	if ((dp_parse_size(s, &v) < 0 || v < min) && max == UINT64_MAX)
		cli_usage_error("%s '%s': want a byte count of at least %" PRIu64
				", such as 512K, 64M or 2G",
				opt, s, min);
	if (dp_parse_size(s, &v) < 0 || v < min || v > max)
		cli_usage_error("%s '%s': want a size from %" PRIu64 " to %" PRIu64
				" bytes, such as 512K, 64M or 2G",
				opt, s, min, max);
	return v;
}

void cli_part(const char *opt, const char *s, const char *const *vars, uint64_t *index,
	      uint64_t *count)
{
	dp_err e;
	int rc = dp_parse_part(opt, s, vars, index, count, &e);
	if (rc == DP_ENOMEM)
		cli_die("out of memory");
	if (rc < 0)
		cli_usage_error("%s", e.msg);
}

void cli_bad_value(const char *opt, const char *s, const char *want)
{
	cli_usage_error("%s '%s': want %s", opt, s, want);
}

int cli_word(const char *opt, const char *s, const char *list)
{
	size_t n = strlen(s), nw = 0;
	int i = 0;
	for (const char *w = list; *w; i++, nw++) {
		size_t l = strcspn(w, " ");
		if (l == n && !strncmp(w, s, n))
			return i;
		w += l + (w[l] == ' ');
	}
	/* "a, b or c" */
	char want[512];
	size_t k = 0;
	i = 0;
	for (const char *w = list; *w && k < sizeof want; i++) {
		size_t l = strcspn(w, " ");
		k += (size_t)snprintf(want + k, sizeof want - k, "%s%.*s",
				      i == 0 ? "" : (size_t)i + 1 == nw ? " or " : ", ", (int)l, w);
		w += l + (w[l] == ' ');
	}
	cli_bad_value(opt, s, want);
}

int cli_comp_out(const char *opt, const char *s)
{
	int comp = dp_comp_parse(s);
	if (comp < 0 || comp == DP_COMP_AUTO)
		cli_bad_value(opt, s, "none, gzip or zlib");
	return comp;
}

int cli_is_dir(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

void cli_check_not_output(const dp_out *out, const char *path)
{
	int std = !strcmp(path, "-");
	int fd = std ? STDIN_FILENO : open(path, O_PATH | O_CLOEXEC);
	if (fd < 0)
		return;
	int same = dp_out_is_input(out, fd);
	if (!std)
		close(fd);
	if (same)
		cli_die("%s: input file is output file", std ? "stdin" : path);
}

char *cli_expand(const char *tmpl, const char *const *vars)
{
	char *x = dp_expand(tmpl, vars);
	if (!x)
		cli_die("out of memory");
	return x;
}

void cli_catch_signals(const int *sigs, int n, void (*fn)(int), int keep_ignored)
{
	for (int i = 0; i < n; i++) {
		struct sigaction sa, old;
		if (keep_ignored && sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
			continue;
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = fn;
		sigemptyset(&sa.sa_mask);
		sigaction(sigs[i], &sa, NULL);
	}
}

static struct {
	int on, shown;
	double last;
} bar;

void cli_progress_on(int on)
{
	bar.on = on;
	bar.last = -1;
}

int cli_progress_due(void)
{
	if (!bar.on)
		return 0;
	double now = dp_now();
	if (bar.last >= 0 && now - bar.last < 0.2)
		return 0;
	bar.last = now;
	return 1;
}

void cli_progress(const char *fmt, ...)
{
	if (!bar.on)
		return;
	va_list ap;
	fputs("\r\033[K", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	bar.shown = 1;
}

void cli_progress_clear(void)
{
	if (bar.shown) {
		fputs("\r\033[K", stderr);
		bar.shown = 0;
	}
}

void *cli_malloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		cli_die("out of memory (%zu bytes)", n);
	return p;
}

void *cli_calloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);
	if (!p)
		cli_die("out of memory (%zu x %zu bytes)", n, size);
	return p;
}

void *cli_realloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);
	if (!q)
		cli_die("out of memory (%zu bytes)", n);
	return q;
}

char *cli_strdup(const char *s)
{
	char *p = strdup(s);
	if (!p)
		cli_die("out of memory");
	return p;
}

void cli_grow(void *pp, size_t *cap, size_t n, size_t size)
{
	if (dp_grow(pp, cap, n, size) < 0)
		cli_die("out of memory (%zu elements of %zu bytes)", n, size);
}

void cli_push(const char ***v, size_t *n, const char *s)
{
	*v = cli_realloc(*v, (*n + 2) * sizeof **v);
	(*v)[(*n)++] = s;
	(*v)[*n] = NULL;
}
