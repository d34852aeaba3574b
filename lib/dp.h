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

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#define DP_VERSION "0.1.0"

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
} dp_err;

/* Record a failure in e (when e is not NULL); returns code, so that callers
 * can write `return dp_seterr(e, DP_EDATA, "%s: ...", name);`. */
int dp_seterr(dp_err *e, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int dp_vseterr(dp_err *e, int code, const char *fmt, va_list ap);
/* Like dp_seterr, appending ": strerror(errno)". */
int dp_syserr(dp_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefix an existing message: "ctx: old message". */
int dp_preferr(dp_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- Outputs written whole or not at all ------------------------------
 *
 * dp_out_open creates a hidden temporary file beside `path`
 * (".name.tmp.XXXXXX" in the same directory, so rename(2) is atomic) and
 * returns its descriptor; dp_out_commit fsyncs nothing by default, closes
 * and renames it over `path`; dp_out_abort removes it.  Temporary files
 * still open are removed by dp_out_cleanup(), which is async-signal-safe:
 * tools call dp_out_install_signal_cleanup() once so that SIGINT, SIGTERM,
 * SIGHUP and SIGPIPE leave no partial output behind.
 * path "-" means stdout: no temporary, commit and abort do nothing but
 * report errors.  An existing path that is not a regular file (/dev/null,
 * a FIFO) is opened and written as it is: renaming over it would replace
 * it; commit and abort close it. */
typedef struct dp_out {
	int fd;
	char *path; /* final name */
	char *tmp;  /* temporary name, NULL for stdout */
	int slot;   /* index in the cleanup registry, -1 if none */
} dp_out;

int dp_out_open(dp_out *o, const char *path, dp_err *e);
int dp_out_commit(dp_out *o, dp_err *e);
void dp_out_abort(dp_out *o);
void dp_out_cleanup(void);
void dp_out_install_signal_cleanup(void);

/* Write all of buf to fd, retrying on EINTR and short writes.  `name`
 * names the file in the error message. */
int dp_write_all(int fd, const void *buf, size_t len, const char *name, dp_err *e);
/* Read up to len bytes, retrying until len bytes or end of file.  Returns
 * bytes read (< len only at end of file) or a negative status. */
long dp_read_full(int fd, void *buf, size_t len, const char *name, dp_err *e);

/* ---- Ranks without linking MPI ----------------------------------------
 * rank and size from, in order: the explicit values when >= 0,
 * OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/PMI_SIZE, PMIX_RANK, SLURM_PROCID/
 * SLURM_NTASKS; otherwise 0 and 1. */
void dp_rank_size(int *rank, int *size);

/* Expand {rank} and {size} (and any {name} in vars) in tmpl into a new
 * malloc'd string.  {name:W} zero-pads a whole number to W digits (1 to
 * 32): 'train-{rank:5}-of-{size:5}' names tfr-shard's shards.  vars is a NULL-terminated list of name, value pairs
 * checked before rank/size (may be NULL).  An unknown {name} is left as is.
 * Returns NULL on allocation failure. */
char *dp_expand(const char *tmpl, const char *const *vars);

/* Parse a byte count such as "256M", "1.5G", "4096", "64k" (binary units:
 * k=1024).  Returns 0 or DP_EARG. */
int dp_parse_size(const char *s, uint64_t *out);

/* Parse a whole number from min to max for an option: decimal digits, or
 * 0x and hex digits; no sign, space or suffix.  Returns 0, or DP_EARG with
 * e saying "OPT 'S': want a whole number from MIN to MAX" (", MIN or more"
 * when max is UINT64_MAX). */
int dp_parse_count(const char *opt, const char *s, uint64_t min, uint64_t max, uint64_t *out,
		   dp_err *e);

/* Monotonic time in seconds. */
double dp_now(void);

#endif
