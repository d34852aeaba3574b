/*
 * s3get.h - what the streaming reader's files share (not installed).
 *
 *   s3get.c          set-up, the window of parts and the main loop (the
 *                    design is described there)
 *   s3get_threads.c  the writer and the hasher threads
 *   s3get_xfer.c     transfers: ranged GETs into the window, retries, the
 *                    stream/parts decision; HEAD for objects without a size
 */
#ifndef S3GET_H
#define S3GET_H

#include "md5.h"
#include "s3_int.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/* A connection at least this fast keeps the stream mode (bytes/s). */
#define STREAM_RATE (256.0 * 1024 * 1024)
/* The writer and the hasher are woken for this many new bytes of the part
 * they wait for (or its end), not for every packet. */
#define WAKE_BYTES (1u << 20)
/* The hasher takes at least this much of a part at a time (or its end). */
#define HASH_MIN (16u << 10)
/* Window slots per request in flight: room for finished parts to wait for
 * the writer and for the hasher to gather a lane's worth. */
#define SLOTS_PER_REQUEST 4
/* A pipe as output is enlarged to this (fewer context switches). */
#define PIPE_BYTES (1 << 20)

enum { MODE_PROBE, MODE_STREAM, MODE_PARTS };

typedef struct getter getter;
typedef struct xfer xfer;

typedef struct part {
	uint64_t seq;      /* position in the stream of parts */
	size_t obj;
	uint64_t off, len; /* object bytes [off, off + len) */
	char *buf;
	size_t cap;        /* of buf */
	_Atomic uint64_t filled; /* received; the receiving thread stores */
	int first, last;   /* first / last part of its object's span */
	int verify;        /* digested for the ETag check */
	int sse;           /* an answer said the store encrypts: the ETag is no MD5 */
	xfer *x;           /* the transfer whose run covers it (calling thread) */
	/* the writer's */
	_Atomic uint64_t written;
	/* the hasher's */
	_Atomic uint64_t hashed;
	/* under mu */
	int wdone, hdone;
} part;

/* One GET: the run [run_from, end) of an object.  Bytes before pos are in
 * parts; [pos, pos + stash.len) came past the window and wait in stash. */
struct xfer {
	getter *g;
	int busy;
	size_t obj;
	uint64_t run_from, end;
	uint64_t pos;      /* the next byte to take */
	uint64_t next_seq; /* the part holding pos */
	part *cur;         /* that part, NULL while not in the window */
	dp_buf stash;      /* bytes past the window, taken before pausing */
	int paused;        /* curl holds data for us */
	int cut;           /* end moved down: stop there, drop the rest */
	/* the request */
	s3_call call;
	CURL *h;
	int running, attempts, ranged, checked, sse;
	double retry_at;
	uint64_t req_from;
	char range[64];
	/* the rate while receiving */
	double seg_t0, active;
	uint64_t got;
};

typedef struct hslot {
	size_t obj;
	int busy, running, attempts;
	double retry_at;
	s3_call call;
	CURL *h;
} hslot;

/* The digest of one object being checked (the hasher's). */
typedef struct vstate {
	int used;
	size_t obj;
	uint64_t next; /* object offset of the next byte to digest */
	int sse;
	s3_md5 md;
} vstate;

struct getter {
	dp_s3 *s;
	dp_objs *objs;
	const dp_range *range;
	int fd;
	const char *outname;
	int W;         /* requests in flight, at most */
	int S;         /* window slots: parts alive at once */
	uint64_t ps;   /* part size */
	uint64_t budget; /* bytes of part buffers, at most (W x part size) */
	uint64_t *lo, *hi; /* each object's span, once known */
	unsigned char *spanned;
	/* the ring: part seq lives in slot seq % S */
	part *ring;
	/* buffers not in the window (calling thread), their total with those in it */
	struct pbuf {
		char *p;
		size_t cap;
	} *pool_buf;
	int npool_buf;
	uint64_t buf_total, reclaimed_seq, rel_seq_seen;
	uint64_t scan_seq; /* parts before this one all have a transfer (or are done) */
	atomic_int full; /* the window has no room for the next part */
	uint64_t alloc_seq, rel_seq; /* under mu */
	pthread_mutex_t mu;
	pthread_cond_t wcv, hcv;
	int eof;      /* every part was allocated */
	int abort;    /* stop everything */
	_Atomic uint64_t bytes;
	dp_err werr;  /* the writer's or the hasher's failure */
	int wfailed, closed;
	/* who sleeps, waiting for which part (NULL: nobody) */
	_Atomic(part *) w_wait;
	atomic_int h_wait;
	/* the transfers (calling thread) */
	xfer *xf;
	int nxf;
	int mode;
	xfer *probe;      /* the run that decides the mode, while it does */
	xfer *run_x;      /* the latest run, for parts allocated later */
	size_t run_obj;
	uint64_t run_end;
	int verify_any;
	/* the hasher's: digests, the free ones, each object's (index + 1) */
	vstate *vs;
	int nvs, nvfree, *vfree, *vidx;
	/* curl */
	CURLM *multi;
	CURL **pool;
	size_t npool;
	hslot *heads;
	int nheads;
	size_t next_head; /* objects before this were considered for HEAD */
	uint64_t nreq, nretry;
	/* cutting the objects into parts (calling thread) */
	size_t cut_obj;   /* the object being cut */
	uint64_t cut_off; /* its next offset, when cut_started */
	int cut_started;
	/* the threads */
	pthread_t wt, ht;
	int synced, have_wt, have_ht; /* mu and the cvs made; the threads started */
	char *arrays; /* the one allocation of lo, hi, ..., heads, pool */
};

static inline part *slot(getter *g, uint64_t seq) { return &g->ring[seq % (uint64_t)g->S]; }

/* ---- Shared among the reader's files ---------------------------------------------- */

/* s3get.c */
/* Object i's name for messages: the file, or s3://bucket/key, in buf. */
const char *s3_get_obj_name(getter *g, size_t i, char *buf, size_t n);
/* The receiving side published p->filled == f: wake whoever waits for it. */
void s3_get_notify(getter *g, part *p, uint64_t f);

/* s3get_threads.c: the threads' bodies (arg: the getter) */
void *s3_get_writer(void *arg);
void *s3_get_hasher(void *arg);

/* s3get_xfer.c: transfers; each returns DP_OK or a DP_E* status with e set */
/* Start the run beginning at part p. */
int s3_get_start_run(getter *g, part *p, dp_err *e);
/* Send x's request for its bytes not received yet, to its end. */
int s3_get_start_xfer(getter *g, xfer *x, dp_err *e);
/* Part p entered the window and x waits for it: give it the stash, then
 * let curl go on. */
int s3_get_resume(getter *g, xfer *x, dp_err *e);
/* x's request ended with cc: check it, retry or resume, or fail. */
int s3_get_finish_xfer(getter *g, xfer *x, CURLcode cc, dp_err *e);
/* The probe run has shown its rate, or failed: choose the mode. */
void s3_get_decide(getter *g, int failed);
/* A local file's part: read it now. */
int s3_get_read_file(getter *g, part *p, dp_err *e);
/* HEAD for object h->obj, listed without a size; its answer. */
int s3_get_start_head(getter *g, hslot *h, dp_err *e);
int s3_get_finish_head(getter *g, hslot *h, CURLcode cc, dp_err *e);

#endif
