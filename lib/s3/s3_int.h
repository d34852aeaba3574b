/*
 * s3_int.h - what libdp's S3 files share among themselves (not installed).
 *
 *   s3conf.c  settings: environment, config and credentials files
 *   creds.c   the credential chain and the refresh of temporary
 *             credentials; creds_fetch.c the providers that fetch (STS web
 *             identity, credential_process, container endpoint, instance
 *             metadata), creds_parse.c their answers; behind creds.h
 *   s3xml.c   the XML answers, read with expat
 *   s3.c      one request: URL, signature, libcurl options, response
 *             headers, S3 errors, retries; the simple operations
 *   s3get.c   the streaming reader (parallel ranged GETs, in order), with
 *             s3get_threads.c and s3get_xfer.c behind s3get.h
 *   s3put.c   the streaming writer (multipart upload)
 *   s3objs.c  locations, object lists, shuffle and shard, manifests
 *   s3batch.c many objects at once: DeleteObjects, parallel uploads
 */
#ifndef S3_INT_H
#define S3_INT_H

#include "dp_s3.h"
#include "sigv4.h"

#include <curl/curl.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>

/* ---- Settings --------------------------------------------------------------- */

/* One section of an INI file, nested keys flattened to "parent.key". */
typedef struct s3_ini {
	char **k, **v;
	size_t n;
} s3_ini;

/* The profile's sections of the shared credentials and config files. */
typedef struct s3_profile {
	const char *name; /* "default" unless named */
	int named;        /* by conf or AWS_PROFILE */
	int by_conf;      /* by conf (--profile) */
	char *cred_path, *conf_path;
	s3_ini cred, conf;
	int have_cred, have_conf; /* the section was found */
} s3_profile;

/* A key of the profile: from the credentials file (S3_IN_CRED), the config
 * file (S3_IN_CONF), or either, the credentials file's winning (S3_IN_ANY,
 * as botocore merges them).  NULL when absent. */
enum { S3_IN_CRED = 1, S3_IN_CONF = 2, S3_IN_ANY = 3 };
const char *s3_profile_get(const s3_profile *p, int where, const char *key);

/* The credentials a provider hands out (creds.c, freed by creds_parse.c). */
typedef struct s3_cval {
	char *key_id, *secret, *token; /* token NULL or "" when none */
	int64_t expires;               /* seconds since the epoch; 0: never */
} s3_cval;
void s3_cval_free(s3_cval *v);

typedef struct s3_creds s3_creds; /* a fetching provider's state (creds.c) */

struct dp_s3 {
	dp_s3_conf conf;
	/* endpoint */
	char *scheme;    /* "http" or "https" */
	char *host;      /* host[:port] as given */
	char *base_path; /* path of the endpoint URL without trailing '/', often "" */
	int custom_endpoint;
	char *region;
	char *profile;
	/* credentials */
	char *key_id, *secret, *token;
	int anonymous;
	char cred_source[64];
	char cred_method[32]; /* botocore's name of the provider */
	s3_creds *cr;         /* a provider that fetches (shared with workers), or NULL */
	unsigned cred_gen;    /* the generation of cr's credentials copied here */
	int region_default;   /* nothing named a region: us-east-1, or IMDS's */
	dp_err cred_err; /* set when no credentials were found */
	int cred_failed;
	char *ca_bundle;
	CURL *easy; /* for one request at a time */
	volatile sig_atomic_t cancelled;
	/* a worker's client (s3batch.c) is cancelled with its parent too */
	dp_s3 *parent;
	/* set while an upload is aborted: cancellation does not stop that */
	int cleanup;
	int redirects; /* times a request was sent on to its bucket's region */
	/* buckets that S3 said live outside region: signed for theirs and, on
	 * AWS's own endpoint, sent to their region's host (s3_where) */
	struct s3_breg {
		char *bucket, *region, *host;
	} *breg;
	size_t nbreg;
	/* > 0: requests end by this time (dp_now()): a clean-up after a
	 * signal gets a few seconds, not a full set of retries */
	double deadline;
	uint64_t nreq, nretry;
};

/* Seconds an upload's abort may take after a signal cancelled it. */
#define S3_ABORT_SECONDS 5.0

/* Was s (or the client it works for) cancelled?  Not while it cleans up. */
static inline int s3_cancelled(const dp_s3 *s)
{
	return !s->cleanup && (s->cancelled || (s->parent && s->parent->cancelled));
}

/* Read the environment and files into s (s3conf.c). */
int s3_conf_load(dp_s3 *s, dp_err *e);
/* Learn that bucket lives in region (S3 said so): its requests are signed
 * for that region from now on and, on AWS's own endpoint, go to that
 * region's host; other buckets keep theirs.  DP_EARG for a name that is
 * no region. */
int s3_learn_region(dp_s3 *s, const char *bucket, const char *region);
/* The region of every bucket not learnt otherwise (the client's default,
 * e.g. from the instance metadata), and on AWS's endpoint its host. */
int s3_set_region(dp_s3 *s, const char *region);
/* The region to sign for and the host (host[:port]) for bucket. */
void s3_where(const dp_s3 *s, const char *bucket, const char **region, const char **host);
/* DP_OK when S3 requests can be made, else the credential error; fetches
 * or refreshes the credentials of a provider that fetches (creds.c). */
int s3_ready(dp_s3 *s, dp_err *e);
/* Virtual-hosted addressing for this bucket? */
int s3_virtual_host(const dp_s3 *s, const char *bucket);

/* ---- Credentials (creds.c) ---------------------------------------------------- */

/* Walk the chain (s3-pipe(1) CREDENTIALS) for s, whose region is known:
 * static keys are set now, a fetching provider is only prepared (s->cr).
 * Fails only for lack of memory; no credentials is s->cred_err. */
int s3_creds_pick(dp_s3 *s, const s3_profile *p);
/* Credentials fit to sign with now in s->key_id...: fetched the first time,
 * refreshed in the advisory window (failure: the old ones kept, logged) and
 * in the mandatory one (failure: an error). */
int s3_creds_current(dp_s3 *s, dp_err *e);
/* dst signs with src's provider from now on (a worker of src). */
void s3_creds_share(dp_s3 *dst, dp_s3 *src);
void s3_creds_release(dp_s3 *s);
/* When the credentials s signs with expire (seconds since the epoch), 0
 * when they do not (or are not fetched yet). */
int64_t s3_creds_expires(const dp_s3 *s);
/* The parsers of what providers answer (creds_parse.c; fuzzed: tests/fuzz/creds.c).
 * kind: S3_CJ_PROCESS (credential_process: Version 1), S3_CJ_CONTAINER,
 * S3_CJ_IMDS (Code "Success" when present; Token and Expiration required). */
enum { S3_CJ_PROCESS, S3_CJ_CONTAINER, S3_CJ_IMDS };
int s3_creds_parse_json(const char *doc, size_t len, int kind, s3_cval *v, dp_err *e);
/* STS's AssumeRoleWithWebIdentityResponse (or its ErrorResponse: DP_EDENIED
 * "Code: Message"). */
int s3_creds_parse_sts(const char *doc, size_t len, s3_cval *v, dp_err *e);
/* Split a command line as Python's shlex.split does (botocore runs
 * credential_process so): NULL-terminated, malloc'd; NULL on a dangling
 * quote or escape. */
char **s3_shell_split(const char *cmd);
void s3_argv_free(char **argv);

/* ---- XML (s3xml.c) ------------------------------------------------------------ */

/* Calls cb at every element start (text NULL) and end (text: the element's
 * own character data, NUL-terminated) with the path from the root,
 * "ListBucketResult/Contents/Key".  Returns DP_EDATA on malformed XML. */
typedef void (*s3x_cb)(void *ctx, const char *path, const char *text, size_t len);
int s3x_parse(const char *doc, size_t len, s3x_cb cb, void *ctx, dp_err *e);
/* S3's <Error><Code>..</Code><Message>..</Message></Error>; returns 1 when
 * doc is such an error. */
int s3x_error(const char *doc, size_t len, char *code, size_t codelen, char *msg,
	      size_t msglen);
/* "2013-05-24T00:00:00.000Z" (any fraction; "Z", "+HH:MM" or "-HH:MM", or
 * no zone: UTC) or an HTTP date -> seconds since the epoch; -1 if
 * malformed. */
int64_t s3_parse_time(const char *s);
/* Decode %XX (and '+' as space) in place: keys with encoding-type=url.
 * -1 when it decoded a NUL (%00), which would cut the key short: the
 * caller refuses it. */
int s3_url_decode(char *s);
/* A hex digit's value (either case); -1 for another character. */
int s3_hexval(char c);

/* ---- One request (s3.c) ---------------------------------------------------------- */

/* S3_AGAIN: sent on to the bucket's region; send it again at once (no
 * failure, no backoff) */
enum { S3_OK = 0, S3_RETRY = 1, S3_FAIL = 2, S3_AGAIN = 3 };
enum { S3_STOP_NONE = 0, S3_STOP_STALL, S3_STOP_CANCEL, S3_STOP_DEADLINE };

typedef struct s3_call {
	/* the request */
	const char *method; /* GET HEAD PUT POST DELETE */
	const char *bucket; /* NULL: the service (list buckets) */
	const char *key;    /* NULL or "": the bucket */
	s3_sigv4_kv q[8];   /* query parameters, raw */
	size_t nq;
	s3_sigv4_kv h[6];   /* extra headers, sent and signed */
	size_t nh;
	const char *body;   /* request body (PUT, POST) */
	size_t body_len;
	const char *body_sha; /* its hex SHA-256 (computed when NULL) */
	/* data of a successful answer goes to sink when set, else to resp */
	size_t (*sink)(void *ctx, const char *p, size_t n);
	void *sink_ctx;
	size_t resp_max; /* cap on resp (default 16 MiB) */
	/* the answer */
	long status;
	char etag[80], content_range[96], region_hdr[64], sse[64], last_modified[64];
	int64_t content_length; /* -1 when absent */
	dp_buf resp;            /* body (errors always land here) */
	char code[64], message[1024];
	CURLcode cc;
	char curl_err[CURL_ERROR_SIZE];
	int sink_failed; /* the sink refused data (1), the answer was too large (2) */
	int sink_rc;     /* the sink's status, when it set one */
	/* the progress watchdog (s3.c): paused is set by a sink holding the
	 * transfer back for a slow reader (time paused is not a stall) */
	int paused;
	int stopped;     /* S3_STOP_*: why the watchdog ended the transfer */
	int redirected;  /* times S3 sent this request to its bucket's region */
	char signed_for[48]; /* the region its last attempt was signed for */
	uint64_t prog_bytes;
	double prog_t;
	/* internal */
	dp_s3 *s;
	char *url;
	struct curl_slist *hl;
	size_t body_pos;
	double t0;
} s3_call;

/* The URL for messages: "s3://bucket/key". */
char *s3_obj_url(const char *bucket, const char *key);
/* what, or when longer than max bytes its head and tail around "..." in
 * buf (bufsz bytes): a name that leaves room in a message for the reason
 * (S3's error code above all) whatever the key's length. */
const char *s3_fit_name(const char *what, size_t max, char *buf, size_t bufsz);
/* Prepare c on handle h (reset first) for one attempt: URL, date,
 * signature, options.  Clears the previous answer. */
int s3_call_setup(dp_s3 *s, s3_call *c, CURL *h, dp_err *e);
/* s3_call_setup, then h added to multi to run beside the others (h
 * NULL: out of memory, as a handle not had). */
int s3_call_add(dp_s3 *s, s3_call *c, CURL *h, CURLM *multi, dp_err *e);
/* The end of c's transfer on handle h (may be NULL): taken off multi when
 * running, h cleaned up, c cleaned. */
void s3_call_drop(s3_call *c, CURL *h, int running, CURLM *multi);
/* The next transfer of multi that has finished (after curl_multi_perform),
 * NULL when no more have. */
CURLMsg *s3_multi_done(CURLM *multi);
/* After the transfer of c finished with cc: the answer's class (S3_OK,
 * S3_RETRY, S3_FAIL, S3_AGAIN).  Reads the error body. */
int s3_call_finish(dp_s3 *s, s3_call *c, CURL *h, CURLcode cc);
/* The failure of c as a dp_err: status from the S3 code or HTTP status,
 * "s3://b/k: Code: Message".  what overrides the object named. */
int s3_call_error(dp_s3 *s, s3_call *c, const char *what, dp_err *e);
/* The dp status of S3's error code (else of the HTTP status). */
int s3_code_status(const char *code, long http);
/* Free what setup allocated and the answer. */
void s3_call_clean(s3_call *c);
/* Run c to completion on s->easy, retrying; DP_OK when the answer is 2xx. */
int s3_perform(dp_s3 *s, s3_call *c, const char *what, dp_err *e);

/* A transfer's retry waiting for the time at (0: none): whether it is due
 * at now; when it is not, *wake brought forward to it. */
static inline int s3_retry_due(double at, double now, double *wake)
{
	if (at <= 0)
		return 0;
	if (at <= now)
		return 1;
	if (at < *wake)
		*wake = at;
	return 0;
}
/* Seconds to wait before retry number attempt (1, 2, ...): half of it fixed,
 * half random (a generator per thread: any thread may call it). */
double s3_backoff(const dp_s3 *s, int attempt);
/* When a request of the transfer engines that ended k goes again
 * (*retry_at): at once when sent on to the bucket's region (S3_AGAIN),
 * after a backoff when it failed in a way that may pass (S3_RETRY) with
 * retries left, *attempts counting them.  Returns the wait in seconds,
 * -1 for no more tries. */
double s3_retry_at(const dp_s3 *s, int k, int *attempts, double *retry_at);
/* A request that failed attempts times and may not go again: DP_ETRANSFER,
 * e's message (that of s3_call_error) saying so. */
int s3_gave_up(dp_err *e, int attempts);
/* Log a line through conf.log (printf-style). */
#define s3_log(s, ...) dp_msgf((s)->conf.log, (s)->conf.log_ctx, __VA_ARGS__)
/* Sleep up to secs, returning early (-1) when cancelled. */
int s3_sleep(dp_s3 *s, double secs);
/* HEAD an object: size, etag, mtime. */
int s3_head(dp_s3 *s, const char *bucket, const char *key, dp_obj *o, dp_err *e);

/* ---- Object lists and local files (s3objs.c) ----------------------------------------- */
/* Free the bucket and key that dp_objs_add copied into o: for an entry
 * dropped from a list. */
void s3_obj_clear(dp_obj *o);
int s3_file_stat(const char *path, dp_obj *o, dp_err *e);
/* After a system call on the local path failed: dp_syserr's message, and
 * the code DP_ENOTFOUND when it (or a directory on its way) is missing,
 * DP_EDENIED when it is not ours to use. */
int s3_file_err(dp_err *e, const char *path);

#endif
