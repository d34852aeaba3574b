/*
 * cli.h - the command-line layer under every dptools program (after sbase's
 * libutil and zstd's programs/util.c): messages, exits, usage errors, the
 * option-value parsers and --version, written once.
 *
 * A tool sets cli.prog and cli.usage first thing in main, and the hooks it
 * needs; then:
 *
 *     cli_warn("%s: skipped", name);             tfr-cat: x.tfr: skipped
 *     cli_die("%s", e.msg);                      message, hooks, exit 1
 *     cli_usage_error("--head: want ...");        message + usage line, exit 2
 *     default: cli_bad_option(c, argv);          getopt_long's '?' and ':'
 *     case 'V': cli_version();                   "tfr-cat (dptools) 0.1.0"
 *
 * Messages are "prog: what: why" (with "rank N: " after the program's name
 * when cli.rank >= 0, for jobs of several ranks).  Exit statuses: CLI_OK,
 * CLI_FAIL, CLI_USAGE; a tool numbers its own from 3 (each man page's EXIT
 * STATUS).  Nothing reusable lives here: formats and protocols are libdp's.
 */
#ifndef DP_CLI_H
#define DP_CLI_H

#include "dp.h"
#include "dp_backend.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

/* CLI_PIPE: the reader of our output went away (EPIPE, or SIGPIPE's own
 * 128 + 13): the program ends quietly with it, as when SIGPIPE ends it in
 * a shell, whatever the parent did with SIGPIPE. */
enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2, CLI_PIPE = 141 };

struct cli {
	const char *prog;  /* "tfr-cat" */
	const char *usage; /* the one-line usage ("usage: tfr-cat [-cj] ...\n"), after usage errors */
	int rank;          /* >= 0: messages say "prog: rank N: " (set when a job has several ranks) */
	int quiet;         /* messages are not printed (ranks other than 0 of a job, for errors all meet) */
	/* Before a message: clear a progress bar, flush stdout. */
	void (*before_msg)(void);
	/* Before exiting with a failure (code > 0): remove half-written outputs,
	 * end an MPI job.  May not return (it exits itself).  When NULL,
	 * dp_out_cleanup() removes the temporary outputs. */
	void (*on_fail)(int code);
	/* When set: a failure (an exit with a code > 0) also writes its
	 * message, the last one printed, to this file, whole (dp_out), as
	 * SageMaker reads a job's failure reason from /opt/ml/output/failure
	 * (tools/sagemaker.h sets it).  Processes that print nothing
	 * (cli.quiet) write nothing. */
	const char *failure_file;
};
extern struct cli cli;

/* "prog: " fmt "\n" on stderr (unless cli.quiet). */
void cli_vwarn(const char *fmt, va_list ap);
void cli_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Print, then cli_exit(CLI_FAIL) or cli_exit(code). */
void cli_die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
void cli_die_code(int code, const char *fmt, ...)
	__attribute__((noreturn, format(printf, 2, 3)));
/* A failure reported by libdp: "prog: e->msg", then cli_exit(code); a
 * write that failed with EPIPE ends quietly with CLI_PIPE instead. */
void cli_die_err(int code, const dp_err *e) __attribute__((noreturn));
/* Print, then the usage line, then cli_exit(CLI_USAGE). */
void cli_usage_error(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
/* getopt_long (optstring starting with ':', opterr = 0) returned '?' or
 * ':': "unknown option '--foo'" or "option '--foo' needs a value", exit 2. */
void cli_bad_option(int c, char **argv) __attribute__((noreturn));
/* The default: of every tool's switch over getopt_long's values, after
 * its own options: 'h' and 'V' (CLI_OPTIONS_END's --help and --version,
 * and -h, -V where the tool takes them) are cli_help(help) and
 * cli_version(); anything else is cli_bad_option's. */
void cli_default_option(int c, char **argv, void (*help)(void)) __attribute__((noreturn));
/* Exit with code: for code > 0 the on_fail hook (or dp_out_cleanup) first. */
void cli_exit(int code) __attribute__((noreturn));

/* Jobs of several ranks (mpirun).  cli_set_rank: messages from here on are
 * this rank's ("prog: rank N: " when size > 1; cli.quiet cleared).
 * cli_job_says: the next message is the whole job's, printed once, by rank
 * 0, without "rank N: " (an error every rank meets alike, before an exit). */
void cli_set_rank(int rank, int size);
void cli_job_says(void);
/* A usage error every rank of the job meets alike: cli_job_says, then
 * cli_usage_error. */
void cli_job_usage_error(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/* The last rows of every tool's getopt_long table: --help and --version,
 * as 'h' and 'V' (which a tool may take as -h and -V too), and the end. */
#define CLI_OPTIONS_END                                                  \
	{"help", no_argument, 0, 'h'}, {"version", no_argument, 0, 'V'}, \
	{                                                                \
		0, 0, 0, 0                                               \
	}
/* A program of commands (s3-pipe get|put|..., dp-ckpt show|diff|...) has
 * one table of its options: getopt_long's row of each and the commands
 * that take it, as bits (CLI_CMD(the command's number)).  cli_cmd_getopt
 * reads argv with them (and --help, --version): set(c, optarg, argv) for
 * each option in turn, used[i] set for each row i given.  Once the
 * command is known, cli_cmd_check makes an option given that the command
 * does not take a usage error, "--range does not apply to ls" (the first
 * such row of the table).
 *
 *     static const struct cli_cmd_option opts[] = {
 *             {"range", required_argument, OPT_RANGE, CLI_CMD(C_GET)},
 *             {"region", required_argument, OPT_REGION, CLI_EVERY_CMD},
 *     ...
 *     unsigned char used[NOPTS] = {0};
 *     cli_cmd_getopt(argc, argv, ":o:hV", opts, NOPTS, used, set_option);
 *     cmd = ... argv[optind] ...;
 *     cli_cmd_check(opts, NOPTS, used, cmd, argv[optind]); */
struct cli_cmd_option {
	const char *name; /* "range": --range */
	int has_arg;      /* getopt_long's no_argument, required_argument, optional_argument */
	int val;          /* what getopt_long returns for it: 'o', OPT_RANGE */
	unsigned cmds;    /* the commands that take it: CLI_CMD(each one's number), or'd */
};
#define CLI_CMD(c) (1u << (c))
#define CLI_EVERY_CMD (~0u)
void cli_cmd_getopt(int argc, char **argv, const char *shortopts, const struct cli_cmd_option *opts,
		    size_t n, unsigned char *used, void (*set)(int c, const char *arg, char **argv));
void cli_cmd_check(const struct cli_cmd_option *opts, size_t n, const unsigned char *used, int cmd,
		   const char *cmd_name);

/* --help: help() (the full option list, on stdout), then
 * cli_exit_stdout().  --version: "prog (dptools) VERSION" on stdout, then
 * cli_exit_stdout().  Said once in a job of several ranks: by the one
 * whose messages are printed (cli.quiet clear, cli_job_says). */
void cli_help(void (*help)(void)) __attribute__((noreturn));
void cli_version(void) __attribute__((noreturn));
/* After --help or --version: exit 0 when stdout was written whole, else
 * say why and exit 1 (`--help > /dev/full` is a failure). */
void cli_exit_stdout(void) __attribute__((noreturn));
/* Flush and close stdout at the end of a run: 0, or -1 after saying why
 * (EPIPE: quietly, cli_exit(CLI_PIPE)). */
int cli_close_stdout(void);

/* Option values; a bad one is a usage error naming the option.
 * cli_count: a whole number from min to max (dp_parse_count).
 * cli_real: a finite number from min to max.
 * cli_size: a byte count ("512M", "1.5G", dp_parse_size) from min to max
 *   (UINT64_MAX: no bound).
 * cli_part: "I/N" with {rank}, {size} and vars filled in (dp_parse_part). */
uint64_t cli_count(const char *opt, const char *s, uint64_t min, uint64_t max);
double cli_real(const char *opt, const char *s, double min, double max);
uint64_t cli_size(const char *opt, const char *s, uint64_t min, uint64_t max);
void cli_part(const char *opt, const char *s, const char *const *vars, uint64_t *index,
	      uint64_t *count);

/* A bad value s of option opt, in the one wording of every tool:
 * "OPT 'S': want WHAT" ("--compress 'lz4': want none, gzip or zlib"), the
 * usage line, exit 2. */
void cli_bad_value(const char *opt, const char *s, const char *want) __attribute__((noreturn));
/* s, the value of option opt, as one of the words of list (separated by
 * spaces: "logfmt json"): its index there; another value is
 * cli_bad_value's "want logfmt or json". */
int cli_word(const char *opt, const char *s, const char *list);

/* s, the value of option opt, as the compression of an output
 * (dp_comp_parse's words but auto): DP_COMP_NONE, _GZIP or _ZLIB; another
 * value is cli_bad_value's "want none, gzip or zlib". */
int cli_comp_out(const char *opt, const char *s);

/* 1 when path names a folder (links followed), 0 otherwise. */
int cli_is_dir(const char *path);

/* An input path ("-": stdin) that is the file out is written to in place
 * (`prog f >> f`, dp_out_is_input) would be read for ever, as cat(1)
 * knows: "PATH: input file is output file", exit 1, before anything is
 * read.  A path that does not open passes (said when it is read). */
void cli_check_not_output(const dp_out *out, const char *path);

/* dp_expand(tmpl, vars): {rank}, {size} and vars filled in; cannot fail. */
char *cli_expand(const char *tmpl, const char *const *vars);

/* Handle each of the n signals with fn (no SA_RESTART: a blocking read
 * returns EINTR); with keep_ignored, one the parent set to be ignored
 * (nohup's SIGHUP, a background job's SIGINT) stays ignored. */
void cli_catch_signals(const int *sigs, int n, void (*fn)(int), int keep_ignored);

/* A progress line on stderr, redrawn in place: cli_progress_on(1) when
 * the program wants one (as a rule: not --quiet and stderr a terminal);
 * cli_progress_due() says whether to draw now (the first time, then at
 * most five times a second); cli_progress() draws the line, replacing the
 * last; cli_progress_clear() removes it.  Every message clears it first. */
void cli_progress_on(int on);
int cli_progress_due(void);
void cli_progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void cli_progress_clear(void);

/* Allocation that cannot fail: "prog: out of memory", exit 1. */
void *cli_malloc(size_t n);
void *cli_calloc(size_t n, size_t size);
void *cli_realloc(void *p, size_t n);
char *cli_strdup(const char *s);
/* Grow *pp (an array of *cap elements of `size` bytes) to hold at least n. */
void cli_grow(void *pp, size_t *cap, size_t n, size_t size);
/* Append s (not copied) to the list *v of *n strings, kept NULL-terminated
 * so that it serves as an argv too: repeated options (--train A --train B),
 * the command lines tools build.  The one way tools grow a list of strings. */
void cli_push(const char ***v, size_t *n, const char *s);

/* First thing in main of a program that runs the math: where OpenBLAS
 * fell back to kernels older than this CPU (dp_blas_kernels_better) and
 * OPENBLAS_CORETYPE does not choose them, start the program again with it
 * naming the better ones, so that OpenBLAS loads them.  Static inline: only
 * the programs that call it link the math. */
static inline void cli_blas_kernels(char **argv)
{
	const char *k;
	if (getenv("OPENBLAS_CORETYPE") || !(k = dp_blas_kernels_better()))
		return;
	/* the program's own path, not /proc/self/exe: the process keeps its
	 * name (ps, pgrep dp-train, mpirun's messages) */
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n > 0 && setenv("OPENBLAS_CORETYPE", k, 1) == 0) {
		self[n] = 0;
		execv(self, argv);
	}
	unsetenv("OPENBLAS_CORETYPE"); /* no /proc: OpenBLAS's own choice */
}

#endif
