/*
 * dp_s3.h - libdp's S3 client: stream objects from S3 (or any S3-compatible
 * store) and local files through one interface.
 *
 * A location is an s3:// URL, a file:// URL or a plain path; every call
 * that takes one works on all three, so a pipeline runs offline on local
 * files first.  Requests are signed with AWS Signature V4 (lib/s3/sigv4.c) and
 * sent with libcurl; XML answers are read with expat.
 *
 * Reads (dp_s3_get) keep several GETs in flight (small objects side by
 * side; large ones in parallel ranged parts, or in a few long requests where
 * one connection is fast) and write the bytes out in order, in bounded
 * memory (concurrency x part size), resuming a broken body from its last
 * byte with If-Match on the ETag, verifying sizes and (for single-part
 * objects) the MD5 in the ETag.  Writes (dp_s3_put) stream a
 * descriptor of unknown length as a multipart upload with parallel parts,
 * aborting the upload on failure.  Every request is retried with jittered
 * exponential backoff on 5xx, 429/SlowDown, timeouts and dropped
 * connections.
 *
 * Errors name the object and carry S3's code and message:
 * "s3://b/k: NoSuchKey: The specified key does not exist".  Secrets never
 * appear in messages or logs.  The library prints nothing (logs go to the
 * conf.log callback) and never exits.
 */
#ifndef DP_S3_H
#define DP_S3_H

#include "dp.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Statuses beyond dp.h's (S3 failures the tools tell apart). */
#define DP_EDENIED (-20)   /* access denied, bad signature, no credentials */
#define DP_ETRANSFER (-21) /* network or server failure, retries exhausted */

/* ---- Locations ---------------------------------------------------------- */

enum { DP_LOC_FILE = 0, DP_LOC_S3 = 1 };

typedef struct dp_loc {
	int kind;
	char *bucket; /* S3: the bucket, "" for "s3://" alone */
	char *key;    /* S3: key or prefix ("" for the bucket's root); FILE: the path */
} dp_loc;

/* Parse "s3://bucket/key", "file:///path", "file:rel/path" or a plain path.
 * Returns DP_EARG for a malformed URL (unknown scheme, empty path). */
DP_EXPORT int dp_loc_parse(const char *s, dp_loc *l, dp_err *e);
DP_EXPORT void dp_loc_free(dp_loc *l);
/* True when l names a prefix or directory rather than one object: an S3 key
 * that is empty or ends in '/', or a local directory. */
DP_EXPORT int dp_loc_is_dir(const dp_loc *l);

/* ---- Objects ------------------------------------------------------------ */

typedef struct dp_obj {
	int kind;       /* DP_LOC_S3 or DP_LOC_FILE */
	char *bucket;   /* S3 */
	char *key;      /* S3 key, or local path */
	uint64_t size;
	int64_t mtime;  /* seconds since the epoch, UTC; -1 unknown */
	char etag[80];  /* as the store gives it, with its quotes; "" unknown */
	int known;      /* size (and etag) known */
	int prefix;     /* a common prefix ("directory") in a listing */
} dp_obj;

typedef struct dp_objs {
	dp_obj *v;
	size_t n, cap;
} dp_objs;

/* Append a copy of o (its strings duplicated). */
DP_EXPORT int dp_objs_add(dp_objs *l, const dp_obj *o, dp_err *e);
DP_EXPORT void dp_objs_free(dp_objs *l);
/* Put the list in a pseudo-random order that depends only on seed, epoch
 * and the list's length: a Fisher-Yates shuffle (from the last entry down,
 * swapping entry i-1 with entry dp_rng_below(i)) drawing from libdp's
 * generator (dp_hash.h) seeded (seed, DP_S3_SHUFFLE_STREAM + epoch). */
#define DP_S3_SHUFFLE_STREAM 0x73336b6579730000ull /* "s3keys" */
DP_EXPORT void dp_objs_shuffle(dp_objs *l, uint64_t seed, uint64_t epoch);
/* Keep entries index, index + count, index + 2 count, ...: worker index of
 * count.  The count workers' shares are disjoint and cover the list. */
DP_EXPORT void dp_objs_shard(dp_objs *l, int index, int count);

/* ---- The client ----------------------------------------------------------- */

enum { DP_S3_ADDR_AUTO = 0, DP_S3_ADDR_PATH, DP_S3_ADDR_VIRTUAL };

typedef struct dp_s3_conf {
	const char *endpoint_url; /* NULL: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, config, AWS */
	const char *region;       /* NULL: AWS_REGION, AWS_DEFAULT_REGION, config, us-east-1 */
	const char *profile;      /* NULL: AWS_PROFILE, else "default" */
	int no_sign;              /* anonymous requests (--no-sign-request) */
	int addressing;           /* DP_S3_ADDR_*; AUTO: virtual-hosted on AWS, path elsewhere */
	int concurrency;          /* requests in flight, at most (default 8) */
	uint64_t part_size;       /* bytes per part of a read or an upload (default 8 MiB) */
	int retries;              /* retries of a request after its first attempt (default 10) */
	double retry_base;        /* first backoff, seconds (default 0.1; doubles, jittered) */
	double timeout;           /* seconds without progress before a request is retried (30) */
	int no_verify;            /* skip the MD5 check of single-part objects */
	/* Log lines (logfmt, no newline), or NULL: one per retry; with verbose
	 * also one per request. */
	dp_msg_fn log;
	void *log_ctx;
	int verbose;
	/* Bytes delivered so far, called a few times a second by long
	 * transfers (from the calling thread), or NULL. */
	void (*progress)(void *ctx, uint64_t bytes);
	void *progress_ctx;
} dp_s3_conf;

typedef struct dp_s3 dp_s3;

/* Fill c with the defaults. */
DP_EXPORT void dp_s3_conf_init(dp_s3_conf *c);
/* A client.  Reads the environment and the shared config and credentials
 * files now; a missing credential is only an error when an S3 request is
 * made.  Returns NULL with e filled on failure. */
DP_EXPORT dp_s3 *dp_s3_new(const dp_s3_conf *c, dp_err *e);
DP_EXPORT void dp_s3_free(dp_s3 *s);
/* Ask running transfers to stop (async-signal-safe): they fail with DP_EIO
 * "interrupted", aborting a multipart upload on the way. */
DP_EXPORT void dp_s3_cancel(dp_s3 *s);

/* What the client resolved (for diagnostics; no secret in it). */
typedef struct dp_s3_info {
	char endpoint[512];   /* "https://s3.us-east-1.amazonaws.com" */
	char region[64];
	char profile[128];
	char cred_source[64]; /* "environment", "shared credentials file", ..., "none" */
	char method[32];      /* the same as botocore names it: "env", "iam-role"...,
				 "" when none or anonymous */
	char key_id[128];     /* the access key id, "" when anonymous or not
				 fetched yet (dp_s3_credentials) */
	int64_t expires;      /* when temporary credentials expire (seconds since
				 the epoch), 0 when they do not */
	int path_style;       /* addressing when a bucket allows both */
} dp_s3_info;
DP_EXPORT void dp_s3_get_info(dp_s3 *s, dp_s3_info *i);
/* Fetch the credentials now, from a provider that fetches them (STS, a
 * process, the container or instance metadata endpoint), as the first
 * request otherwise does; or refresh them when they are about to expire.
 * DP_EDENIED when none are found; the message names the provider. */
DP_EXPORT int dp_s3_credentials(dp_s3 *s, dp_err *e);

/* ---- Operations ------------------------------------------------------------ */

typedef int (*dp_obj_cb)(void *ctx, const dp_obj *o);

/* List what l names: the objects under an S3 prefix or in a local directory
 * (with their sizes, times and ETags) in key order, one object, or with
 * recursive == 0 only the first level, "directories" coming as prefixes
 * (o->prefix).  A prefix without a trailing '/' matches keys that start
 * with it, as in S3.  page_size: keys per ListObjectsV2 request (0: 1000).
 * "s3://" lists the buckets (o->bucket set, o->key "").  cb returning
 * non-zero stops the listing and is returned. */
DP_EXPORT int dp_s3_list(dp_s3 *s, const dp_loc *l, int recursive, int page_size, dp_obj_cb cb,
	       void *ctx, dp_err *e);

/* Append to out the objects a read of url covers: one object, every object
 * under a prefix or directory (key order; keys ending in '/' skipped), or,
 * with manifest set, the entries of a manifest file in SageMaker's format
 * (a JSON array: {"prefix": URL} then keys relative to it).  A missing
 * object is DP_ENOTFOUND. */
DP_EXPORT int dp_s3_expand(dp_s3 *s, const char *url, int manifest, dp_objs *out, dp_err *e);

/* A byte range: first..last inclusive; last < 0 means to the end; suffix
 * set means the last `first` bytes. */
typedef struct dp_range {
	int set;
	int suffix;
	int64_t first, last;
} dp_range;
/* Parse "A-B", "A-", "-N" (bytes=... accepted). */
DP_EXPORT int dp_range_parse(const char *s, dp_range *r);

typedef struct dp_s3_stats {
	uint64_t bytes;    /* bytes delivered */
	uint64_t requests; /* HTTP requests made */
	uint64_t retries;  /* requests retried */
	int out_closed;    /* the reader of fd went away (EPIPE) */
} dp_s3_stats;

/* Write the objects, in order, to fd (outname names it in messages).  With
 * r set (one object only) just that range.  Objects of unknown size are
 * looked up (HEAD) a few ahead of the stream.  A pipe as fd is enlarged
 * (F_SETPIPE_SZ, 1 MiB) where allowed.  Runs two threads of its own (the
 * writer; the MD5 digests), with every signal blocked.  DP_S3_GET_MODE=stream|parts in the environment
 * forces how objects of several parts are fetched (s3get.c).  st may be
 * NULL. */
DP_EXPORT int dp_s3_get(dp_s3 *s, dp_objs *objs, const dp_range *r, int fd, const char *outname,
	      dp_s3_stats *st, dp_err *e);

/* Store everything read from fd (srcname in messages) at dst: one PUT when
 * it fits in a part, else a multipart upload with parallel parts, aborted on
 * failure.  size_hint >= 0 when the length is known (chooses the part size
 * for very large inputs).  A local dst is written whole or not at all.
 * Reads fd in a thread of its own, with every signal blocked. */
DP_EXPORT int dp_s3_put(dp_s3 *s, const dp_loc *dst, int fd, const char *srcname, int64_t size_hint,
	      dp_s3_stats *st, dp_err *e);

/* Delete one object or local file.  Deleting what does not exist is
 * DP_ENOTFOUND for files; S3 itself reports success. */
DP_EXPORT int dp_s3_rm(dp_s3 *s, const dp_loc *l, dp_err *e);

/* The "folder marker" of an S3 prefix: an empty object whose key (ending
 * in '/') is the prefix, as the S3 console's "Create folder" makes; for a
 * local location, the directory (its parent must exist; one that exists
 * already is fine). */
DP_EXPORT int dp_s3_mkdir(dp_s3 *s, const dp_loc *l, dp_err *e);

/* Delete every object of objs (S3 objects and local files alike): the S3
 * keys of one bucket in DeleteObjects requests of up to 1,000 keys (a key
 * XML cannot carry, or a store without DeleteObjects: one DELETE each),
 * local files one by one.  cb (or NULL) is told of each object deleted.
 * Every object is tried; then the first refusal is the call's failure:
 * "s3://b/k: AccessDenied: Access Denied (and 3 more not deleted)". */
DP_EXPORT int dp_s3_rm_many(dp_s3 *s, const dp_objs *objs, dp_obj_cb cb, void *ctx, dp_err *e);

/* One file to upload: src, a local path, to dst, a location's URL; or
 * to download (dp_s3_get_files): src an S3 URL, dst a local path. */
typedef struct dp_s3_file {
	const char *src;
	const char *dst;
	/* downloads: the object's size when known (no HEAD then) and its
	 * time, given to the file (0: the time of the download) */
	uint64_t size;
	int known;
	int64_t mtime;
} dp_s3_file;

/* Upload files[0..n) (each as dp_s3_put does), up to jobs at a time, each
 * by a thread of its own (every signal blocked) with a client of its own
 * made from s's settings, the concurrency shared out between them;
 * dp_s3_cancel(s) cancels them all (their multipart uploads aborted).  cb
 * (or NULL) is told of each file uploaded, one call at a time, from the
 * workers.  After a failure no further file is started; the first failure
 * is returned.  st (or NULL) gets the sums. */
DP_EXPORT int dp_s3_put_files(dp_s3 *s, const dp_s3_file *files, size_t n, int jobs,
			      void (*cb)(void *ctx, size_t i), void *ctx, dp_s3_stats *st,
			      dp_err *e);

/* Download S3 objects files[i].src to local files files[i].dst as
 * dp_s3_put_files uploads: up to jobs at a time, each whole or not at
 * all (a temporary file beside it, renamed), its directories made, its
 * time set to files[i].mtime. */
DP_EXPORT int dp_s3_get_files(dp_s3 *s, const dp_s3_file *files, size_t n, int jobs,
			      void (*cb)(void *ctx, size_t i), void *ctx, dp_s3_stats *st,
			      dp_err *e);

/* ---- What a command covers: filters, put's plan (s3plan.c) ------------------
 * aws s3's --include/--exclude, in the order given: every name is kept,
 * then each filter whose pattern matches the name decides in turn, so the
 * last one that matches wins.  Patterns are fnmatch(3)'s without
 * FNM_PATHNAME ('*' and '?' match '/' too); names are relative to their
 * URL's directory, dp_s3_filter_base.  Patterns are not copied. */
typedef struct dp_s3_filters {
	struct dp_s3_filter {
		int include;
		const char *pattern;
	} *v;
	size_t n, cap;
} dp_s3_filters;
DP_EXPORT int dp_s3_filters_add(dp_s3_filters *f, int include, const char *pattern, dp_err *e);
DP_EXPORT void dp_s3_filters_free(dp_s3_filters *f);
/* Is name kept?  f NULL or empty: yes. */
DP_EXPORT int dp_s3_filters_keep(const dp_s3_filters *f, const char *name);
/* The directory of a location's names, which filters see past: the key of
 * a prefix or local directory (with its '/'), else up to its last '/'.
 * malloc'd; NULL when out of memory. */
DP_EXPORT char *dp_s3_filter_base(const dp_loc *l);
/* name past base, when it starts with it. */
DP_EXPORT const char *dp_s3_rel_name(const char *name, const char *base);
/* Drop (and free) objs->v[from..] that f leaves out, names under base. */
DP_EXPORT void dp_s3_filters_apply(const dp_s3_filters *f, dp_objs *objs, size_t from,
				   const char *base);

/* The uploads a put of files and directories under prefix (ending in '/')
 * makes: a file under its base name, a directory's files (all levels)
 * under their paths relative to it, as aws s3 cp --recursive names them;
 * what f keeps.  With markers, dirs: the folder markers to make besides
 * prefix's own (the directories walked that f keeps, and those of every
 * file), sorted, each once.  Two files on one key are refused (DP_EARG)
 * before anything is sent.  bad_arg is set when the failure is in args
 * (a usage error).  Free with dp_s3_plan_free, after a failure too. */
typedef struct dp_s3_plan {
	dp_s3_file *v; /* src and dst malloc'd */
	size_t n, cap;
	char **dirs;
	size_t ndirs, dcap;
	int bad_arg;
} dp_s3_plan;
DP_EXPORT int dp_s3_plan_put(dp_s3 *s, const char *prefix, char *const *args, int n,
			     const dp_s3_filters *f, int markers, dp_s3_plan *p, dp_err *e);
DP_EXPORT void dp_s3_plan_free(dp_s3_plan *p);

/* ---- SageMaker Pipe mode's FIFOs (s3fifo.c) ---------------------------------
 * The FIFOs of one channel: DIR/CHANNEL_EPOCH.  path[0] is the epoch being
 * written (or waiting for its reader), path[1] the next one, made before
 * [0] ends; "" when none.  Fixed buffers, changed only with every signal
 * blocked: dp_s3_fifos_break may run in a signal handler.  Start zeroed. */
#define DP_S3_FIFO_MARK "\nS3PIPE:ERR" /* what a reader of a broken epoch reads last:
					* never a whole TFRecord header, a line of its own */
#define DP_S3_FIFO_PATH 4096 /* bytes of a FIFO's or directory's name, at most */
typedef struct dp_s3_fifos {
	char path[2][DP_S3_FIFO_PATH];
	char made[DP_S3_FIFO_PATH]; /* the deepest directory made, [0..made_len) */
	size_t made_len, made_keep; /* made_keep: the length of what was there */
} dp_s3_fifos;
/* dir and its missing parents made (and noted, to be removed at the end). */
DP_EXPORT int dp_s3_fifos_mkdirs(dp_s3_fifos *f, const char *dir, dp_err *e);
/* Make the FIFO of epoch in path[slot]; an existing FIFO is used as it is. */
DP_EXPORT int dp_s3_fifos_make(dp_s3_fifos *f, const char *dir, const char *channel,
			       uint64_t epoch, int slot, dp_err *e);
/* The epoch in path[0] ended well (fd its write end, or -1): it goes, and
 * the next one (if made) takes its place.  A reader that opens the name
 * again finds nothing, not a FIFO that nobody will write. */
DP_EXPORT void dp_s3_fifos_done(dp_s3_fifos *f, int fd);
/* The first epoch's reader: the FIFOs of epoch and epoch + 1 are both
 * made, and whichever a reader opens first is served the first epoch
 * (polled with non-blocking opens).  SageMaker numbers FIFOs from 0,
 * dp-train's {epoch} from 1: a reader that opens CHANNEL_1 first is served
 * so from then on (*shift 1).  The FIFO not taken goes.  Returns the write
 * end (blocking), or a negative status. */
DP_EXPORT int dp_s3_fifos_first_reader(dp_s3_fifos *f, const char *dir, const char *channel,
				       uint64_t epoch, uint64_t *shift, dp_err *e);
/* Every FIFO broken (a failure or a signal): removed, and a reader that
 * has one open (or is blocked opening it) reads what was written, then
 * DP_S3_FIFO_MARK, then end of file; when the pipe stays full for wait_ms,
 * bytes are taken from its head until the mark fits.  Then
 * dp_s3_fifos_rmdirs.  Async-signal-safe. */
DP_EXPORT void dp_s3_fifos_break(dp_s3_fifos *f, int wait_ms);
/* Remove the directories mkdirs made, deepest first, those left empty
 * (async-signal-safe). */
DP_EXPORT void dp_s3_fifos_rmdirs(dp_s3_fifos *f);

/* ---- Buckets, sync ------------------------------------------------------------ */

/* Make bucket (in the client's region: a LocationConstraint outside
 * us-east-1), or remove it, empty (S3's BucketNotEmpty otherwise). */
DP_EXPORT int dp_s3_mb(dp_s3 *s, const char *bucket, dp_err *e);
DP_EXPORT int dp_s3_rb(dp_s3 *s, const char *bucket, dp_err *e);

/* aws s3 sync's rule: does src (an object or file, with its size and
 * time) need copying over dst (NULL: there is none)?  Yes when dst is
 * missing or of another size; else, uploading, when the file is newer
 * than the object; downloading, when the local file is newer than the
 * object (changed since a download gave it the object's time: an object
 * rewritten at the same size is not downloaded, as with aws), or (exact)
 * when the times differ at all. */
DP_EXPORT int dp_s3_sync_needed(const dp_obj *src, const dp_obj *dst, int download, int exact);

typedef struct dp_s3_sync_conf {
	int exact_timestamps; /* --exact-timestamps (downloads) */
	int delete_extra;     /* --delete: what the destination has and the source has not */
	int dryrun;           /* report what would be done, do nothing */
	int jobs;             /* files at a time */
	/* names relative to the two prefixes: kept (1) or left alone (0) by
	 * --include/--exclude; NULL keeps all */
	int (*keep)(void *ctx, const char *rel);
	/* told of each file copied ("upload", "download") or deleted
	 * ("delete"), one call at a time: after it was done, or with dryrun
	 * instead; dst NULL for a delete */
	void (*report)(void *ctx, const char *verb, const char *src, const char *dst);
	void *ctx;
} dp_s3_sync_conf;

typedef struct dp_s3_sync_stats {
	size_t copied, deleted, same; /* files */
	dp_s3_stats io;
} dp_s3_sync_stats;

/* Make dst the same as src, one a local directory and the other an S3
 * prefix (either may be the source): each name is a "directory" (an S3
 * key is taken as key + '/', so that neither its neighbours nor the
 * object of that very name are touched).  What dp_s3_sync_needed says is
 * copied (uploads as dp_s3_put_files, downloads as dp_s3_get_files); with
 * delete_extra the destination's files the source lacks are deleted,
 * under that prefix alone.  A failure part-way leaves every file copied so
 * far whole, and nothing of the others (multipart uploads aborted,
 * downloads never renamed): the next sync copies what is still missing.
 * Deletes come after the copies, and not after a failed copy. */
DP_EXPORT int dp_s3_sync(dp_s3 *s, const char *src, const char *dst, const dp_s3_sync_conf *c,
			 dp_s3_sync_stats *st, dp_err *e);

/* A presigned URL for method ("GET" or "PUT") on an S3 object, valid for
 * expires seconds (1 to 604800).  malloc'd. */
DP_EXPORT char *dp_s3_presign(dp_s3 *s, const dp_loc *l, const char *method, long expires, dp_err *e);

/* Multipart uploads in progress under an S3 prefix. */
typedef int (*dp_upload_cb)(void *ctx, const char *bucket, const char *key,
			    const char *upload_id, int64_t initiated);
DP_EXPORT int dp_s3_list_uploads(dp_s3 *s, const dp_loc *l, dp_upload_cb cb, void *ctx, dp_err *e);
DP_EXPORT int dp_s3_abort_upload(dp_s3 *s, const char *bucket, const char *key, const char *upload_id,
		       dp_err *e);

/* Read a whole (small) object or file into memory: at most max bytes, else
 * DP_ELIMIT.  *data is malloc'd and NUL-terminated. */
DP_EXPORT int dp_s3_read_all(dp_s3 *s, const dp_loc *l, size_t max, char **data, size_t *len,
		   dp_err *e);


#ifdef __cplusplus
}
#endif
#endif
