/*
 * dp.h - libdp, the library shared by the dptools programs: the basics.
 *
 * Everything every other part of libdp uses: the error type and status
 * codes, outputs written whole or not at all, rank and size from the
 * environment, and {rank}/{size} path templates.
 *
 * Conventions of the whole library (see STYLE in the README):
 *  - libdp never prints and never exits.  A call that can fail takes a
 *    `dp_err *` (may be NULL) and returns a negative dp_status on failure,
 *    with a message naming the object (file, record, byte offset) in err->msg.
 *    Tools print it as "prog: <msg>".
 *  - Public names start with dp_; everything else is static.
 */
#ifndef DP_H
#define DP_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What libdp.so exports: the declarations marked DP_EXPORT in the public
 * headers (lib/dp*.h), all named dp_*; the library is built with
 * -fvisibility=hidden, so everything else stays inside it. */
#if defined(__GNUC__)
#define DP_EXPORT __attribute__((visibility("default")))
#else
#define DP_EXPORT
#endif

/* The version of dptools ("0.1.0"): the one number, set in the Makefile. */
DP_EXPORT const char *dp_version(void);

/* Status codes.  0 is success; failures are negative. */
enum dp_status {
	DP_OK = 0,
	DP_EIO = -1,    /* a system call failed; msg carries strerror */
	DP_EDATA = -2,  /* the input is corrupt or not of the expected form */
	DP_ENOMEM = -3, /* out of memory */
	DP_EARG = -4,   /* invalid argument from the caller (a usage error) */
	DP_ELIMIT = -5, /* a configured limit was exceeded */
	DP_ENOTFOUND = -6 /* a named thing does not exist */
};

typedef struct dp_err {
	int code;       /* enum dp_status of the last failure */
	char msg[1024]; /* "train.tfrecord: record 17 at byte 52311: data CRC mismatch" */
	int sys;        /* the errno of a failed system call (dp_syserr), else 0 */
} dp_err;

/* Record a failure in e (when e is not NULL); returns code, so that callers
 * can write `return dp_seterr(e, DP_EDATA, "%s: ...", name);`. */
DP_EXPORT int dp_seterr(dp_err *e, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
DP_EXPORT int dp_vseterr(dp_err *e, int code, const char *fmt, va_list ap);
/* Like dp_seterr, appending ": strerror(errno)". */
DP_EXPORT int dp_syserr(dp_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefix an existing message: "ctx: old message". */
DP_EXPORT int dp_preferr(dp_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The one shape of message callback: a line of text (no newline) that the
 * caller prints as it chooses (libdp never prints), ctx its own. */
typedef void (*dp_msg_fn)(void *ctx, const char *msg);
/* Format a message (cut at 2 KiB) and hand it to fn; fn NULL: nothing. */
DP_EXPORT void dp_msgf(dp_msg_fn fn, void *ctx, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* ---- Outputs written whole or not at all ------------------------------
 *
 * dp_out_open opens a temporary file in the directory of the destination
 * (so that rename(2) is atomic) and returns its descriptor; dp_out_commit
 * closes it and renames it over the destination; dp_out_abort removes it.
 *  - The destination is where `path` leads: symbolic links are followed
 *    (a dangling one creates its target), so the link stays and the file
 *    it names is replaced.
 *  - A file replaced keeps its permission bits (and, for root, its owner
 *    and group); a new one gets 0666 less the umask.
 *  - Where the file system has O_TMPFILE the temporary has no name until
 *    the commit (SIGKILL leaves nothing behind); elsewhere it is
 *    ".NAME.tmp.XXXXXX" beside the destination.  Named temporaries still
 *    open are removed by dp_out_cleanup(), which is async-signal-safe:
 *    tools call dp_out_install_signal_cleanup() once so that SIGINT,
 *    SIGTERM, SIGHUP, SIGQUIT and SIGPIPE leave no partial output behind.
 *  - "-" means stdout; /dev/stdout, /dev/stderr, /dev/fd/N and
 *    /proc/self/fd/N mean that descriptor (a duplicate of it), written in
 *    place wherever it leads; so is an existing destination that is not a
 *    regular file (/dev/null, a FIFO, a terminal): renaming over it would
 *    replace it.  Commit and abort close these (never stdout itself) and
 *    report errors.  A destination that is a directory is refused at open.
 * o->tmp is NULL exactly when the output is written in place. */
typedef struct dp_out {
	int fd;
	char *path; /* the name given, for messages */
	char *tmp;  /* temporary name (made at commit under O_TMPFILE), NULL in place */
	int slot;   /* index in the cleanup registry, -1 if none */
	char *dst;  /* where it lands: path with its links followed */
	int anon;   /* the temporary is an O_TMPFILE with no name yet */
} dp_out;

/* Make path (its links followed) the destination of an output still open,
 * for a name known only at the end (tfr-shard's {nshards}); o->path
 * becomes a copy of path.  Outputs written in place keep theirs. */
DP_EXPORT int dp_out_retarget(dp_out *o, const char *path, dp_err *e);
/* An anonymous temporary file in dir (NULL: $TMPDIR, else /tmp), for
 * reading and writing: O_TMPFILE where the file system has it, else a name
 * unlinked at once with signals held off in between, so that no name is
 * ever left behind.  Returns the descriptor or a negative status. */
DP_EXPORT int dp_tmpfile(const char *dir, dp_err *e);
/* Check before the work that dp_out_open(path) can succeed: the
 * destination's directory exists and is writable, and the destination is
 * not a directory.  Creates nothing.  Returns 0 or a status naming path. */
DP_EXPORT int dp_out_check(const char *path, dp_err *e);
/* 1 when output paths a and b name one file ("x" and "./x", two links to
 * one file, "-" and "-"): two outputs of a run that would lose one. */
DP_EXPORT int dp_same_output(const char *a, const char *b);
/* Commit n outputs all or none: every destination is checked first (the
 * first that cannot be written is named); files they replace are kept
 * aside until all renames succeeded, and put back if one fails.  Outputs
 * written in place are closed.  Every output is closed or removed on
 * return. */
DP_EXPORT int dp_out_commit_all(dp_out *const *outs, size_t n, dp_err *e);
/* 1 when fd is the same regular file as o's destination, or the same
 * file as o's descriptor (for `prog f >> f`: an output that is its own
 * input). */
DP_EXPORT int dp_out_is_input(const dp_out *o, int fd);
DP_EXPORT int dp_out_open(dp_out *o, const char *path, dp_err *e);
DP_EXPORT int dp_out_commit(dp_out *o, dp_err *e);
DP_EXPORT void dp_out_abort(dp_out *o);
DP_EXPORT void dp_out_cleanup(void);
DP_EXPORT void dp_out_install_signal_cleanup(void);

/* pthread_create with every signal blocked in the new thread: each thread
 * libdp starts is made this way, so that signals reach only the program's
 * own threads (whose handlers, such as dp_out_cleanup's, then never run
 * beside a half-made change of theirs).  Returns pthread_create's code. */
DP_EXPORT int dp_thread_create(pthread_t *t, void *(*fn)(void *), void *arg);

/* ---- One growable buffer (curl's dynbuf) -------------------------------
 * p[0..len) holds the bytes, followed by a NUL once anything was added.
 * An append that would pass `max` bytes fails with DP_ELIMIT, one that
 * cannot allocate with DP_ENOMEM; the first failure sticks in err and
 * every later append returns it at once, so a run of appends can be checked
 * once at its end.  On failure the contents so far are kept. */
typedef struct dp_buf {
	char *p;
	size_t len, cap;
	size_t max; /* the cap on len (dp_buf_init(b, 0): none) */
	int err;    /* 0, DP_ENOMEM or DP_ELIMIT: the first failure */
} dp_buf;

#define DP_BUF_INIT {NULL, 0, 0, SIZE_MAX / 2, 0}

DP_EXPORT void dp_buf_init(dp_buf *b, size_t max);
DP_EXPORT void dp_buf_free(dp_buf *b);
/* Empty it (keeping the memory) and clear the error. */
DP_EXPORT void dp_buf_reset(dp_buf *b);
/* Room for n more bytes (and the NUL) without reallocating. */
DP_EXPORT int dp_buf_reserve(dp_buf *b, size_t n);
DP_EXPORT int dp_buf_add(dp_buf *b, const void *p, size_t n);
DP_EXPORT int dp_buf_addstr(dp_buf *b, const char *s);
DP_EXPORT int dp_buf_printf(dp_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
DP_EXPORT int dp_buf_vprintf(dp_buf *b, const char *fmt, va_list ap);
/* The string, now the caller's to free ("" when empty); the buffer is left
 * empty.  NULL after a failure. */
DP_EXPORT char *dp_buf_take(dp_buf *b);

/* One growable array: room in the array *pp (of *cap elements of size
 * bytes) for at least n, its capacity doubled from 16 until they fit.
 * DP_OK, or DP_ENOMEM with the array as it was. */
DP_EXPORT int dp_grow(void *pp, size_t *cap, size_t n, size_t size);
/* A new object's size bytes, zeroed; NULL with DP_ENOMEM ("out of memory")
 * in e when there is no room. */
DP_EXPORT void *dp_zalloc(size_t size, dp_err *e);

/* Append s[0..n) as a JSON string, quotes included: the one escaper of
 * libdp and the tools.  '"', '\\' and control characters are escaped (\n,
 * \t... or \u00XX); bytes that are not UTF-8 become U+FFFD; with
 * DP_JSON_ASCII every code point past 0x7e is written \uXXXX (surrogate
 * pairs above U+FFFF), as Python's json.dumps does by default. */
#define DP_JSON_ASCII 1
DP_EXPORT int dp_buf_json_str(dp_buf *b, const void *s, size_t n, int flags);

/* Append s[0..n), data from outside (a file name, a feature name, an S3
 * key, a log's text), as a message or a line of output may quote it: as
 * it is when it is printable UTF-8 (no control character, C0 or C1, no
 * DEL) not beginning with "$'"; else in the shell's $'...' form, each
 * control and each byte that is not UTF-8 escaped (\n, \x1b), so that data
 * can neither rewrite the terminal nor split a line, and the text pasted
 * into a shell is the name itself.  The one escaper of quoted data.
 * dp_shown: the same as a new string (NULL when out of memory). */
DP_EXPORT int dp_buf_shown(dp_buf *b, const void *s, size_t n);
DP_EXPORT char *dp_shown(const void *s, size_t n);

/* Write all of buf to fd, retrying on EINTR and short writes.  `name`
 * names the file in the error message. */
DP_EXPORT int dp_write_all(int fd, const void *buf, size_t len, const char *name, dp_err *e);
/* Read up to len bytes, retrying until len bytes or end of file.  Returns
 * bytes read (< len only at end of file) or a negative status. */
DP_EXPORT long dp_read_full(int fd, void *buf, size_t len, const char *name, dp_err *e);
/* The whole of file path ("-": stdin) into b (initialised, DP_BUF_INIT),
 * which is emptied first (its memory kept) and holds a NUL after the
 * bytes: the one whole-file
 * reader of libdp and the tools.  More than max bytes is DP_ELIMIT
 * ("NAME: larger than 1 MiB"); name names the file in messages (NULL:
 * path, or "stdin").  Returns 0 or a negative status. */
DP_EXPORT int dp_read_file(const char *path, const char *name, size_t max, dp_buf *b, dp_err *e);

/* ---- Folder trees ------------------------------------------------------
 * dp_walk: every entry under dir whose name does not begin with '.', in
 * byte order of names, folders in place (symbolic links followed); fn
 * sees each (its path, its path under dir, its stat) and returns DP_OK (go
 * on; into it, a folder), 1 (a folder: not into it) or an error, which
 * ends the walk.  A folder met twice (a link loop such as cat/loop -> ..,
 * or two links to one folder) is DP_EDATA naming both; a tree deeper than
 * DP_WALK_MAX_DEPTH is DP_ELIMIT. */
#define DP_WALK_MAX_DEPTH 64
struct stat;
typedef struct dp_walk_entry {
	const char *path, *rel, *name;
	int depth;                /* 0: directly in dir */
	const struct stat *st;
} dp_walk_entry;
typedef int (*dp_walk_fn)(void *ctx, const dp_walk_entry *w, dp_err *e);
DP_EXPORT int dp_walk(const char *dir, dp_walk_fn fn, void *ctx, dp_err *e);
/* dp_make_parents: `mkdir -p` of the folder part of path (all before its
 * last '/'; nothing when that is empty or "/"), mode 0777 less the umask,
 * folders already there left as they are.  made, when not NULL, is told of
 * each folder this call creates, parents first (a caller that removes
 * them again on failure keeps the list); an error it returns ends the
 * call.  A folder that cannot be made: "DIR: cannot create directory:
 * REASON" (dp_syserr). */
typedef int (*dp_made_fn)(void *ctx, const char *dir, dp_err *e);
DP_EXPORT int dp_make_parents(const char *path, dp_made_fn made, void *ctx, dp_err *e);

/* ---- One holder of a name on the machine ------------------------------
 * dp_hold_name: hold `name` (any text) for as long as the process lives,
 * or until the descriptor returned is closed: an abstract unix socket
 * (Linux), so nothing is left behind however the process ends.  DP_EARG
 * when another process holds it, its pid in *holder (0 if unknown). */
DP_EXPORT int dp_hold_name(const char *name, int *holder, dp_err *e);

/* ---- Shell commands ----------------------------------------------------
 * dp_shell_quote appends s to b as one word of the POSIX shell: in single
 * quotes, each ' written '\''.  dp_shell_run runs `/bin/sh -c cmd` and
 * waits for it: stdin from /dev/null, stdout on out_fd (-1: ours), env a
 * NULL-terminated list of "NAME=VALUE" added to the environment (may be
 * NULL).  The command gets SIGTERM if the calling thread dies first
 * (PR_SET_PDEATHSIG), so a program killed while it waits leaves none
 * behind.  Returns 0 when it exited 0; otherwise DP_EIO with "exited with
 * status N" or "killed by signal N (NAME)" in e, and *status the exit
 * status (128 + N for a signal; may be NULL). */
DP_EXPORT int dp_shell_quote(dp_buf *b, const char *s);
DP_EXPORT int dp_shell_run(const char *cmd, const char *const *env, int out_fd, int *status,
			   dp_err *e);
/* dp_shell_run of template cmd, its {NAME} placeholders (dp_expand) filled
 * in with vars' n values, shell-quoted (dp_shell_quote) where quote says,
 * each value also in the environment as env_prefix and NAME in capitals
 * ("DP_", "epoch": DP_EPOCH=...). */
typedef struct dp_shell_var {
	const char *name, *value;
	int quote;
} dp_shell_var;
DP_EXPORT int dp_shell_run_vars(const char *cmd, const dp_shell_var *vars, size_t n,
				const char *env_prefix, int out_fd, int *status, dp_err *e);

/* The one way libdp starts a child (dp_shell_run, --train-cmd, an S3
 * credential_process): program path, or when NULL argv[0] found on PATH
 * (unless it holds a '/'); the
 * child's stdin, stdout and stderr from in, out and err (in -1: /dev/null;
 * out or err -1: ours); every signal unblocked and at its default action
 * (the threads libdp starts block them all, and SIGPIPE ignored by a tool
 * would stay ignored across exec); env's "NAME=VALUE" pairs added to the
 * environment (may be NULL); with die_with_thread, SIGTERM when the
 * calling thread ends first (PR_SET_PDEATHSIG), so that a program killed
 * leaves no child behind.  The pid to wait for in *pid; 0 or a negative
 * status ("cannot run NAME: ..."). */
typedef struct dp_child {
	const char *path;
	char *const *argv;
	const char *const *env;
	int in, out, err;
	int die_with_thread;
} dp_child;
DP_EXPORT int dp_spawn(const dp_child *c, int *pid, dp_err *e);

/* ---- Settings ----------------------------------------------------------
 * libdp reads no environment variable behind its caller's back.  The
 * overrides meant for tests, benchmarks and the curious (DP_BACKEND,
 * DP_COMM, DP_NCCL, DP_MD5, DP_CRC32C, DP_S3_GET_MODE, DP_THREADS, DP_CPU_CONV,
 * DP_CUDA_CONV_BUDGET: each documented where it acts) reach the library
 * only through dp_setting_set(), or dp_settings_from_env(), which a program
 * calls once, before it starts threads, to take every DP_* variable of its
 * environment (the dptools programs do).  dp_setting() is what the library
 * consults: NULL when unset. */
DP_EXPORT void dp_settings_from_env(void);
DP_EXPORT int dp_setting_set(const char *name, const char *value);
DP_EXPORT const char *dp_setting(const char *name);
/* The environment variable name, NULL when unset or empty: the one way
 * libdp reads its environment.  What it reads, all of it (libdp(3),
 * ENVIRONMENT): TMPDIR (dp_tmpdir), the launchers' rank variables
 * (dp_rank_size, dp_comm, dp_default_threads), CUDA_VISIBLE_DEVICES (the CUDA backend),
 * AWS_* and HOME (dp_s3_conf), DP_* through dp_settings_from_env only. */
DP_EXPORT const char *dp_env(const char *name);
/* Where temporary files go: dir when given and not empty, else $TMPDIR
 * when set and not empty, else "/tmp". */
DP_EXPORT const char *dp_tmpdir(const char *dir);

/* ---- Ranks without linking MPI ----------------------------------------
 * rank and size from, in order: the explicit values when >= 0,
 * OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/PMI_SIZE, PMIX_RANK, SLURM_PROCID/
 * SLURM_NTASKS; otherwise 0 and 1. */
DP_EXPORT void dp_rank_size(int *rank, int *size);
/* The math threads a process uses when not told: the CPUs of its host
 * shared by the ranks it runs (OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS,
 * SLURM_NTASKS_PER_NODE; else every rank of dp_rank_size on this host),
 * at most the CPUs it may run on (its affinity mask, the container's
 * cgroup CPU limit), 1 to 256.  *cpus gets the CPUs it may run on, *local
 * the ranks on its host (either may be NULL).  The setting DP_THREADS
 * (tests: one thread, the same figures on any machine) gives the answer
 * (*cpus and *local 0). */
DP_EXPORT int dp_default_threads(int *cpus, int *local);

/* Expand {rank} and {size} (and any {name} in vars) in tmpl into a new
 * malloc'd string.  {name:W} zero-pads a whole number to W digits (1 to
 * 32), as a number ("00003" at width 3 is 003): 'train-{rank:5}-of-{size:5}'.
 * vars is a NULL-terminated list of name, value pairs checked before
 * rank/size (may be NULL).  An unknown {name} is left as is.  Returns NULL
 * on allocation failure. */
DP_EXPORT char *dp_expand(const char *tmpl, const char *const *vars);
/* dp_expand refusing what it would leave as is: a {NAME} or {NAME:W}
 * (NAME of letters, digits and '_') that is not in vars, rank or size, a
 * width that is not 1 to 32 digits, or a width on a value that is not a
 * number.  NULL with DP_EARG in e ("unknown placeholder {shrad} (known:
 * {shard}, ..., {rank}, {size})"), or DP_ENOMEM.  Other braces are text. */
DP_EXPORT char *dp_expand_strict(const char *tmpl, const char *const *vars, dp_err *e);
/* Whether tmpl names {rank} (or {rank:W}): a file a rank, not one for the
 * whole job. */
DP_EXPORT int dp_names_rank(const char *tmpl);

/* Parse "I/N", part I (0 to N-1) of N (1 to DP_PART_MAX), after filling
 * in {rank}, {size} and vars as dp_expand() does: the one parser of
 * tfr-shard --take and s3-pipe --shard.  Decimal or 0x hex, no sign or
 * space.  Returns 0, or DP_EARG with e saying "OPT 'S': want I/N, ...". */
#define DP_PART_MAX (1u << 30)
DP_EXPORT int dp_parse_part(const char *opt, const char *s, const char *const *vars,
			    uint64_t *index, uint64_t *count, dp_err *e);

/* Parse a byte count such as "256M", "1.5G", "4096", "64k" (binary units:
 * k=1024).  Returns 0 or DP_EARG. */
DP_EXPORT int dp_parse_size(const char *s, uint64_t *out);
/* A byte count as people read it, in buf: "512 bytes", "100 KiB", "4 GiB",
 * "1.5 MiB" (binary units, one decimal when not whole).  Returns buf. */
DP_EXPORT const char *dp_fmt_size(uint64_t n, char *buf, size_t len);
/* A rate (samples/s) as logs and progress lines print it: fixed point,
 * never an exponent (a regex of [0-9.]+ reads it whole), with at least 3
 * significant digits: whole from 100 up ("123457", "100"), "34.1",
 * "3.41", "0.0341" (at most 9 decimals), "0"; nan and the infinities as
 * dp_fmt_double words.  DP_DOUBLE_BUF bytes hold it below 1e20.  Returns
 * buf. */
DP_EXPORT const char *dp_fmt_rate(double v, char *buf, size_t len);

/* Parse a whole number from min to max for an option: decimal digits, or
 * 0x and hex digits; no sign, space or suffix.  Returns 0, or DP_EARG with
 * e saying "OPT 'S': want a whole number from MIN to MAX" (", MIN or more"
 * when max is UINT64_MAX). */
DP_EXPORT int dp_parse_count(const char *opt, const char *s, uint64_t min, uint64_t max, uint64_t *out,
		   dp_err *e);

/* The shortest %g text that reads back as v ("0.001", not
 * "0.0010000000000000000208"; "1e-05", "123456"), or "nan", "inf", "-inf":
 * libdp's one formatter of doubles, for metadata, logs and metrics.
 * DP_DOUBLE_BUF bytes always hold it.  Returns buf. */
#define DP_DOUBLE_BUF 32
DP_EXPORT const char *dp_fmt_double(double v, char *buf, size_t len);
/* The same for a float: the shortest text that reads back as f ("0.1",
 * not "0.100000001"); "NaN", "Infinity", "-Infinity" (JSON5's words). */
DP_EXPORT const char *dp_fmt_float(float f, char *buf, size_t len);

/* Monotonic time in seconds. */
DP_EXPORT double dp_now(void);

/* 16-bit floats (lib/common/half.c): IEEE binary16 ("fp16", "F16") and
 * bfloat16 (the top half of a float32), n values at a time.  To 16 bits:
 * rounded to nearest, ties to even, as PyTorch's and numpy's casts; a value
 * past fp16's range becomes infinity; NaN stays NaN.  Back: exact. */
DP_EXPORT void dp_f32_to_f16(uint16_t *dst, const float *src, size_t n);
DP_EXPORT void dp_f16_to_f32(float *dst, const uint16_t *src, size_t n);
DP_EXPORT void dp_f32_to_bf16(uint16_t *dst, const float *src, size_t n);
DP_EXPORT void dp_bf16_to_f32(float *dst, const uint16_t *src, size_t n);


#ifdef __cplusplus
}
#endif
#endif
