/*
 * s3get.c - the streaming reader: objects, in order, to one descriptor.
 *
 * Parts.  The objects are cut into parts of conf.part_size bytes, kept in
 * a window sliding over the stream in output order: at most S = 4 x W
 * parts (W = conf.concurrency) whose buffers total at most W x part_size,
 * so memory stays bounded whatever the object sizes.  Buffers go back to a
 * pool and are reused (their pages stay mapped).  A part enters the window
 * only when a request can fill it, so what fills the window is parts that
 * have arrived and wait: for the writer thread, which writes the oldest
 * part as its bytes arrive, and for the hasher thread, which digests parts
 * of objects whose ETag is an MD5.  A slot is reused once both are done
 * with it.  A slow reader of the output stalls the window, not the
 * transfers' clocks.
 *
 * Transfers.  One GET fetches a run of consecutive parts of one object: its
 * bytes flow into each part of the run in turn and, when the next part is
 * not in the window yet, the transfer pauses (libcurl's pause, TCP's flow
 * control) until the writer frees a slot.  How long runs are is the one
 * policy here:
 *  - parts mode: a run is one part, W ranged GETs in flight.  What S3 needs:
 *    one connection gives about 90 MB/s there, and parallel connections
 *    add up.
 *  - stream mode: a run is the whole window (W parts), about two requests
 *    in flight.  Where one connection already carries hundreds of MB/s (a
 *    store on the same host or LAN) more connections only divide what the
 *    server can give while every request costs it work; fewer, longer
 *    requests cost the server (and us) least.
 * The first object of more than one part decides: its first run is a whole
 * window, alone in flight, and once a part's worth has arrived its rate
 * (while not paused) is measured.  At STREAM_RATE or more the stream mode
 * stays; below, the run is cut at the end of its current part and the rest
 * is fetched in ranged parts.  Objects of one part are one GET each, W in
 * flight, whatever the mode.  DP_S3_GET_MODE=stream or parts in the
 * environment forces a mode (tests, benchmarks).
 *
 * Checks.  Every GET of an object whose ETag is known carries If-Match: a
 * changed object fails (412) instead of mixing two versions into the
 * stream.  A transfer that breaks is started again from its first missing
 * byte (Range: bytes=from-to), so output never repeats or loses a byte;
 * every answer's status, Content-Range or length, and ETag are checked, and
 * a single-part object's bytes against the MD5 in its ETag.  One MD5 is a
 * serial chain (~700 MB/s); s3_md5_update_many() digests up to 16 messages
 * for about the price of one, so the hasher lets whole small objects wait
 * until they fill its lanes (or the window is full, or the stream ends),
 * while parts of larger objects, which must be digested in order, go at
 * once.  Objects listed without a size (named one by one, or in a
 * manifest) are looked up with HEAD, a few ahead of the stream.  Local
 * files take the same path, read with pread.
 *
 * Threads.  The calling thread runs curl, allocates parts and owns the
 * transfers.  A part's `filled` is published with release stores and read
 * with acquire loads; the writer and the hasher sleep on condition
 * variables and are signalled only when they wait for that part and enough
 * bytes have come (a flag each, checked lock-free by the receiving side).
 * The ring's sequence numbers and the parts' written/hashed marks are
 * shared under mu.  Both threads run with every signal blocked: the
 * caller's handlers run in its own threads.
 */
#define _GNU_SOURCE
#include "md5.h"
#include "s3_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
};

static part *slot(getter *g, uint64_t seq) { return &g->ring[seq % (uint64_t)g->S]; }

/* ---- Helpers ------------------------------------------------------------------ */

static CURL *take_handle(getter *g)
{
	if (g->npool)
		return g->pool[--g->npool];
	return curl_easy_init();
}

static void give_handle(getter *g, CURL *h)
{
	if (h)
		g->pool[g->npool++] = h;
}

static const char *obj_name(getter *g, size_t i, char *buf, size_t n)
{
	dp_obj *o = &g->objs->v[i];
	if (o->kind == DP_LOC_FILE)
		snprintf(buf, n, "%s", o->key);
	else
		snprintf(buf, n, "s3://%s/%s", o->bucket, o->key);
	return buf;
}

static void set_abort(getter *g)
{
	pthread_mutex_lock(&g->mu);
	g->abort = 1;
	pthread_cond_broadcast(&g->wcv);
	pthread_cond_broadcast(&g->hcv);
	pthread_mutex_unlock(&g->mu);
}

/* ETags compare without quotes and a weak W/ mark. */
static int same_etag(const char *a, const char *b)
{
	if (!*a || !*b)
		return 1;
	if (!strncmp(a, "W/", 2))
		a += 2;
	if (!strncmp(b, "W/", 2))
		b += 2;
	size_t la = strlen(a), lb = strlen(b);
	if (la >= 2 && a[0] == '"' && a[la - 1] == '"')
		a++, la -= 2;
	if (lb >= 2 && b[0] == '"' && b[lb - 1] == '"')
		b++, lb -= 2;
	return la == lb && !strncmp(a, b, la);
}

/* Under mu: hand back the oldest slots both consumers are done with. */
static void release_locked(getter *g)
{
	int any = 0;
	while (g->rel_seq < g->alloc_seq) {
		part *p = slot(g, g->rel_seq);
		if (!p->wdone || !p->hdone)
			break;
		g->rel_seq++;
		any = 1;
	}
	if (any)
		curl_multi_wakeup(g->multi);
}

static int consumer_fail(getter *g, int rc, dp_err *e)
{
	pthread_mutex_lock(&g->mu);
	if (!g->wfailed) {
		g->werr = *e;
		g->werr.code = rc;
		g->wfailed = 1;
	}
	g->abort = 1;
	pthread_cond_broadcast(&g->wcv);
	pthread_cond_broadcast(&g->hcv);
	pthread_mutex_unlock(&g->mu);
	curl_multi_wakeup(g->multi);
	return rc;
}

/* The receiving side published p->filled == f: wake whoever waits for it. */
static void notify(getter *g, part *p, uint64_t f)
{
	if (atomic_load(&g->w_wait) == p &&
	    (f == p->len || f - atomic_load_explicit(&p->written, memory_order_relaxed) >=
				    WAKE_BYTES)) {
		part *want = p;
		if (atomic_compare_exchange_strong(&g->w_wait, &want, NULL)) {
			pthread_mutex_lock(&g->mu);
			pthread_cond_signal(&g->wcv);
			pthread_mutex_unlock(&g->mu);
		}
	}
	/* a whole object waits to be hashed with others: only its end counts */
	if (p->verify && atomic_load(&g->h_wait) &&
	    (f == p->len ||
	     (!(p->first && p->last) &&
	      f - atomic_load_explicit(&p->hashed, memory_order_relaxed) >= WAKE_BYTES))) {
		int one = 1;
		if (atomic_compare_exchange_strong(&g->h_wait, &one, 0)) {
			pthread_mutex_lock(&g->mu);
			pthread_cond_signal(&g->hcv);
			pthread_mutex_unlock(&g->mu);
		}
	}
}

/* ---- The writer thread ---------------------------------------------------------------- */

static void *writer_main(void *arg)
{
	getter *g = arg;
	dp_err e = {0};
	uint64_t seq = 0; /* the next part to write */
	for (;;) {
		part *p = NULL;
		uint64_t f = 0;
		pthread_mutex_lock(&g->mu);
		for (;;) {
			if (g->abort)
				break;
			if (seq < g->alloc_seq) {
				p = slot(g, seq);
				f = atomic_load_explicit(&p->filled, memory_order_acquire);
				if (f > atomic_load_explicit(&p->written, memory_order_relaxed) ||
				    f == p->len)
					break;
				/* say what we wait for, then look again (see notify) */
				atomic_store(&g->w_wait, p);
				f = atomic_load(&p->filled);
				if (f > atomic_load_explicit(&p->written, memory_order_relaxed)) {
					atomic_store(&g->w_wait, NULL);
					break;
				}
			} else if (g->eof) {
				break;
			}
			p = NULL;
			pthread_cond_wait(&g->wcv, &g->mu);
			atomic_store(&g->w_wait, NULL);
		}
		pthread_mutex_unlock(&g->mu);
		if (!p)
			return NULL;
		uint64_t w = atomic_load_explicit(&p->written, memory_order_relaxed);
		if (f > w) {
			size_t n = (size_t)(f - w);
			int rc = dp_write_all(g->fd, p->buf + w, n, g->outname, &e);
			if (rc < 0) {
				if (errno == EPIPE)
					g->closed = 1;
				consumer_fail(g, rc, &e);
				return NULL;
			}
			atomic_store_explicit(&p->written, f, memory_order_relaxed);
			atomic_fetch_add(&g->bytes, n);
		}
		if (f == p->len) {
			pthread_mutex_lock(&g->mu);
			p->wdone = 1;
			release_locked(g);
			pthread_mutex_unlock(&g->mu);
			seq++;
		}
	}
}

/* ---- The hasher thread ------------------------------------------------------------------ */

typedef struct hjob {
	part *p;
	vstate *v;
	uint64_t from, n;
} hjob;

/* The digest of p's object, begun at its first part. */
static vstate *vstate_of(getter *g, part *p)
{
	int i = g->vidx[p->obj];
	if (i)
		return &g->vs[i - 1];
	if (!p->first || !g->nvfree)
		return NULL; /* no free one cannot be: S objects at most are in the window */
	i = g->vfree[--g->nvfree];
	vstate *v = &g->vs[i];
	v->used = 1;
	v->obj = p->obj;
	v->sse = 0;
	v->next = p->off;
	s3_md5_init(&v->md);
	g->vidx[p->obj] = i + 1;
	return v;
}

/* Under mu: the hashing that can be done now: for each object in the
 * window, the next bytes of the part its digest has reached. */
static int find_jobs(getter *g, hjob *jobs, int *pending, int *urgent)
{
	int n = 0;
	size_t prev = SIZE_MAX;
	*pending = *urgent = 0;
	for (uint64_t s = g->rel_seq; s < g->alloc_seq; s++) {
		part *p = slot(g, s);
		if (!p->verify || p->hdone)
			continue;
		(*pending)++;
		if (p->obj == prev)
			continue; /* an earlier part of it (they are adjacent) comes first */
		prev = p->obj;
		vstate *v = vstate_of(g, p);
		uint64_t h = atomic_load_explicit(&p->hashed, memory_order_relaxed);
		if (!v || p->off + h != v->next)
			continue;
		uint64_t f = atomic_load(&p->filled), avail = f - h;
		uint64_t take = f == p->len ? avail : avail >= HASH_MIN ? avail / 64 * 64 : 0;
		if (!take && f != p->len)
			continue;
		jobs[n++] = (hjob){p, v, h, take};
		/* a part of a longer object gains nothing from waiting */
		*urgent |= !(p->first && p->last);
	}
	return n;
}

/* Finish an object's digest and compare it with the ETag. */
static int check_digest(getter *g, vstate *v, dp_err *e)
{
	unsigned char want[16], got[16];
	s3_md5_final(&v->md, got);
	v->used = 0;
	g->vidx[v->obj] = 0;
	g->vfree[g->nvfree++] = (int)(v - g->vs);
	dp_obj *o = &g->objs->v[v->obj];
	if (v->sse || !s3_md5_etag(o->etag, want))
		return DP_OK;
	if (memcmp(want, got, 16) != 0) {
		char name[1200];
		return dp_seterr(e, DP_EDATA, "%s: MD5 of the bytes read does not match the ETag %s",
				 obj_name(g, v->obj, name, sizeof name), o->etag);
	}
	return DP_OK;
}

static void *hasher_main(void *arg)
{
	getter *g = arg;
	dp_err e = {0};
	int lanes = s3_md5_lanes();
	hjob *jobs = calloc((size_t)g->S, sizeof *jobs);
	s3_md5_job *mj = calloc((size_t)g->S, sizeof *mj);
	if (!jobs || !mj) {
		dp_seterr(&e, DP_ENOMEM, "out of memory");
		consumer_fail(g, DP_ENOMEM, &e);
		free(jobs);
		free(mj);
		return NULL;
	}
	for (;;) {
		int n, pending, urgent;
		pthread_mutex_lock(&g->mu);
		for (;;) {
			if (g->abort) {
				n = -1;
				break;
			}
			/* Whole small objects wait until they fill the lanes,
			 * unless the window is full or the stream ends. */
			n = find_jobs(g, jobs, &pending, &urgent);
			if (n > 0 && (urgent || n >= lanes || g->eof || atomic_load(&g->full)))
				break;
			if (!pending && g->eof) {
				n = -1;
				break;
			}
			/* say that we wait, then look again (see notify) */
			atomic_store(&g->h_wait, 1);
			n = find_jobs(g, jobs, &pending, &urgent);
			if (n > 0 && (urgent || n >= lanes || g->eof || atomic_load(&g->full))) {
				atomic_store(&g->h_wait, 0);
				break;
			}
			pthread_cond_wait(&g->hcv, &g->mu);
			atomic_store(&g->h_wait, 0);
		}
		pthread_mutex_unlock(&g->mu);
		if (n < 0)
			break;
		int nm = 0;
		for (int k = 0; k < n; k++)
			if (jobs[k].n)
				mj[nm++] = (s3_md5_job){&jobs[k].v->md, jobs[k].p->buf + jobs[k].from,
							(size_t)jobs[k].n};
		s3_md5_update_many(mj, (size_t)nm);
		for (int k = 0; k < n; k++) {
			part *p = jobs[k].p;
			uint64_t h = jobs[k].from + jobs[k].n;
			atomic_store_explicit(&p->hashed, h, memory_order_relaxed);
			jobs[k].v->next += jobs[k].n;
			if (h < p->len)
				continue;
			jobs[k].v->sse |= p->sse; /* written before filled reached len */
			int rc = p->last ? check_digest(g, jobs[k].v, &e) : DP_OK;
			if (rc < 0) {
				consumer_fail(g, rc, &e);
				free(jobs);
				free(mj);
				return NULL;
			}
			pthread_mutex_lock(&g->mu);
			p->hdone = 1;
			release_locked(g);
			pthread_mutex_unlock(&g->mu);
		}
	}
	free(jobs);
	free(mj);
	return NULL;
}

/* ---- Transfers ---------------------------------------------------------------------- */

static uint64_t rcv(const xfer *x) { return x->pos + x->stash.len; }

/* Validate the answer's headers once, at its first byte. */
static int check_answer(getter *g, xfer *x, dp_err *e)
{
	s3_call *c = &x->call;
	dp_obj *o = &g->objs->v[x->obj];
	char name[1200];
	obj_name(g, x->obj, name, sizeof name);
	if (!same_etag(c->etag, o->etag))
		return dp_seterr(e, DP_EDATA, "%s: the object changed while being read (ETag %s, "
				 "then %s)", name, o->etag, c->etag);
	if (x->ranged) {
		unsigned long long a, b, t;
		if (c->status != 206)
			return dp_seterr(e, DP_EDATA, "%s: asked for bytes %s, the server answered %ld "
					 "without a range", name, x->range + 6, c->status);
		if (sscanf(c->content_range, "bytes %llu-%llu/%llu", &a, &b, &t) != 3 ||
		    a != x->req_from || b != x->end - 1 || t != o->size)
			return dp_seterr(e, DP_EDATA, "%s: asked for bytes %" PRIu64 "-%" PRIu64
					 " of %" PRIu64 ", got Content-Range '%s'", name, x->req_from,
					 x->end - 1, o->size, c->content_range);
	} else if (c->content_length >= 0 && (uint64_t)c->content_length != o->size) {
		return dp_seterr(e, DP_EDATA, "%s: %" PRId64 " bytes, the listing said %" PRIu64,
				 name, c->content_length, o->size);
	}
	if (c->sse[0] && strcmp(c->sse, "AES256") != 0)
		x->sse = 1;
	return DP_OK;
}

/* Copy bytes into x's parts while they are in the window; returns how many
 * were taken. */
static size_t place(getter *g, xfer *x, const char *data, size_t n)
{
	size_t took = 0;
	while (took < n && x->cur) {
		part *p = x->cur;
		uint64_t f = atomic_load_explicit(&p->filled, memory_order_relaxed);
		size_t k = (size_t)(p->len - f);
		if (k > n - took)
			k = n - took;
		memcpy(p->buf + f, data + took, k);
		p->sse |= x->sse;
		f += k;
		atomic_store(&p->filled, f); /* seq_cst: see notify */
		notify(g, p, f);
		took += k;
		x->pos += k;
		if (f == p->len) {
			/* on to the next part of the run, if the window has it */
			x->next_seq++;
			x->cur = x->pos < x->end && x->next_seq < g->alloc_seq ? slot(g, x->next_seq)
									       : NULL;
		}
	}
	return took;
}

/* Seconds x has been receiving (not paused) in its current request. */
static double active_time(const xfer *x)
{
	return x->active + (x->seg_t0 > 0 ? dp_now() - x->seg_t0 : 0);
}

static void seg_end(xfer *x)
{
	if (x->seg_t0 > 0) {
		x->active += dp_now() - x->seg_t0;
		x->seg_t0 = 0;
	}
}

static size_t run_sink(void *ctx, const char *data, size_t n)
{
	xfer *x = ctx;
	getter *g = x->g;
	if (!x->checked) {
		dp_err e = {0};
		int rc = check_answer(g, x, &e);
		if (rc < 0) {
			snprintf(x->call.message, sizeof x->call.message, "%s", e.msg);
			x->call.sink_rc = rc;
			return 0;
		}
		x->checked = 1;
	}
	if (n > x->end - rcv(x)) {
		if (!x->cut) {
			char name[1200];
			snprintf(x->call.message, sizeof x->call.message,
				 "%s: more bytes than asked for", obj_name(g, x->obj, name, sizeof name));
			x->call.sink_rc = DP_EDATA;
			return 0;
		}
		if (rcv(x) == x->end)
			return 0; /* the cut: stop here (finish_xfer knows) */
		/* take what is ours; answering less than curl gave stops the
		 * transfer after it (finish_xfer knows) */
		n = (size_t)(x->end - rcv(x));
	}
	if (!x->cur || x->stash.len) {
		/* the window is full: curl keeps the data until a slot frees */
		seg_end(x);
		x->paused = 1;
		x->call.paused = 1; /* not a stall (s3.c's watchdog) */
		return CURL_WRITEFUNC_PAUSE;
	}
	if (x->seg_t0 == 0)
		x->seg_t0 = dp_now();
	size_t took = place(g, x, data, n);
	x->got += n;
	x->attempts = 0; /* progress: the retry budget starts over */
	if (took < n) {
		/* the window ends inside this chunk: keep the rest; the next
		 * chunk pauses the transfer */
		size_t rest = n - took;
		dp_buf_reset(&x->stash);
		if (dp_buf_add(&x->stash, data + took, rest) < 0) {
			snprintf(x->call.message, sizeof x->call.message, "out of memory");
			x->call.sink_rc = DP_ENOMEM;
			return 0;
		}
		seg_end(x);
	}
	return n;
}

/* Send x's request for bytes rcv(x) to end. */
static int start_xfer(getter *g, xfer *x, dp_err *e)
{
	dp_obj *o = &g->objs->v[x->obj];
	x->req_from = rcv(x);
	x->ranged = !(x->req_from == 0 && x->end == o->size);
	x->checked = 0;
	x->retry_at = 0;
	x->seg_t0 = 0;
	x->paused = 0;
	memset(&x->call, 0, sizeof x->call);
	s3_call *c = &x->call;
	c->method = "GET";
	c->bucket = o->bucket;
	c->key = o->key;
	if (x->ranged) {
		snprintf(x->range, sizeof x->range, "bytes=%" PRIu64 "-%" PRIu64, x->req_from,
			 x->end - 1);
		c->h[c->nh++] = (s3_sigv4_kv){"Range", x->range};
	}
	if (o->etag[0])
		c->h[c->nh++] = (s3_sigv4_kv){"If-Match", o->etag};
	c->sink = run_sink;
	c->sink_ctx = x;
	if (!x->h && !(x->h = take_handle(g)))
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	int rc = s3_call_setup(g->s, c, x->h, e);
	if (rc < 0)
		return rc;
	if (curl_multi_add_handle(g->multi, x->h) != CURLM_OK)
		return dp_seterr(e, DP_ENOMEM, "cannot add a transfer");
	x->running = 1;
	g->nreq++;
	return DP_OK;
}

static void free_xfer(getter *g, xfer *x)
{
	if (x->running)
		curl_multi_remove_handle(g->multi, x->h);
	s3_call_clean(&x->call);
	give_handle(g, x->h);
	dp_buf stash = x->stash;
	memset(x, 0, sizeof *x);
	x->stash = stash; /* kept for the next transfer in this slot */
	dp_buf_reset(&x->stash);
	if (g->run_x == x)
		g->run_x = NULL;
	if (g->probe == x)
		g->probe = NULL;
}

/* x received everything it asked for: free it once its stash is placed. */
static void maybe_free(getter *g, xfer *x)
{
	if (!x->running && x->retry_at == 0 && rcv(x) == x->end && x->stash.len == 0)
		free_xfer(g, x);
}

static int finish_xfer(getter *g, xfer *x, CURLcode cc, dp_err *e);

/* Part p entered the window and x waits for it: give it the stash, then
 * let curl go on. */
static int resume_xfer(getter *g, xfer *x, dp_err *e)
{
	x->cur = slot(g, x->next_seq);
	if (x->stash.len) {
		dp_buf *b = &x->stash;
		size_t t = place(g, x, b->p, b->len);
		memmove(b->p, b->p + t, b->len - t);
		b->len -= t;
		b->p[b->len] = 0;
		if (b->len)
			return DP_OK; /* still more than the window holds */
	}
	if (x->paused && x->running) {
		x->paused = 0;
		x->call.paused = 0;
		x->call.prog_t = dp_now(); /* the watchdog's clock starts again */
		/* curl hands over the data it kept, through run_sink, now */
		CURLcode cc = curl_easy_pause(x->h, CURLPAUSE_CONT);
		if (cc != CURLE_OK) /* the sink refused what curl kept: end it here */
			return finish_xfer(g, x, cc, e);
	}
	maybe_free(g, x);
	return DP_OK;
}

/* Start the run beginning at part p. */
static int start_run(getter *g, part *p, dp_err *e)
{
	xfer *x = NULL;
	for (int i = 0; i < g->nxf && !x; i++)
		if (!g->xf[i].busy)
			x = &g->xf[i];
	if (!x)
		return dp_seterr(e, DP_EIO, "internal error: no free transfer");

	uint64_t len = g->mode == MODE_PARTS ? g->ps : g->ps * (uint64_t)g->W;
	uint64_t end = p->off + len < g->hi[p->obj] ? p->off + len : g->hi[p->obj];
	x->g = g;
	x->busy = 1;
	x->obj = p->obj;
	x->run_from = x->pos = p->off + atomic_load_explicit(&p->filled, memory_order_relaxed);
	x->end = end;
	x->next_seq = p->seq;
	x->cur = p;
	for (uint64_t s = p->seq; s < g->alloc_seq; s++) {
		part *q = slot(g, s);
		if (q->obj != p->obj || q->off >= end)
			break;
		q->x = x;
	}
	g->run_x = x;
	g->run_obj = p->obj;
	g->run_end = end;
	if (g->mode == MODE_PROBE && end - p->off > g->ps)
		g->probe = x;
	return start_xfer(g, x, e);
}

/* Cut x's run at the end of the part it is receiving; later parts of the
 * run get runs of their own. */
static void cut_xfer(getter *g, xfer *x)
{
	uint64_t lo = g->lo[x->obj], r = rcv(x);
	uint64_t e = lo + (r - lo + g->ps - 1) / g->ps * g->ps;
	if (e >= x->end)
		return;
	x->end = e;
	x->cut = 1;
	for (uint64_t s = g->rel_seq_seen; s < g->alloc_seq; s++) {
		part *q = slot(g, s);
		if (q->x == x && q->off >= e) {
			q->x = NULL;
			if (s < g->scan_seq)
				g->scan_seq = s;
		}
	}
	if (g->run_x == x)
		g->run_end = e;
	if (x->running && r == e) {
		/* nothing more wanted: close the connection now */
		curl_multi_remove_handle(g->multi, x->h);
		x->running = 0;
		seg_end(x);
		s3_call_clean(&x->call);
		maybe_free(g, x);
	}
}

/* The probe run has shown its rate, or failed: choose the mode. */
static void decide(getter *g, int failed)
{
	xfer *x = g->probe;
	double t = active_time(x);
	double rate = t > 0 ? (double)x->got / t : 0;
	g->mode = !failed && rate >= STREAM_RATE ? MODE_STREAM : MODE_PARTS;
	g->probe = NULL;
	if (g->s->conf.verbose) {
		char name[1200];
		s3_log(g->s, "op=GET url=%s mode=%s connection_mbps=%.0f%s",
		       obj_name(g, x->obj, name, sizeof name),
		       g->mode == MODE_STREAM ? "stream" : "parts", rate / 1e6,
		       failed ? " (the first request failed)" : "");
	}
	if (g->mode == MODE_PARTS)
		cut_xfer(g, x);
}

static int finish_xfer(getter *g, xfer *x, CURLcode cc, dp_err *e)
{
	s3_call *c = &x->call;
	curl_multi_remove_handle(g->multi, x->h);
	x->running = 0;
	seg_end(x);
	char name[1200];
	obj_name(g, x->obj, name, sizeof name);
	if (x->cut && rcv(x) == x->end) {
		/* stopped at the cut on purpose (or it ended there) */
		if (g->s->conf.verbose)
			s3_log(g->s, "op=GET url=%s range=%s status=%ld bytes=%" PRIu64 " ms=%.0f cut=%" PRIu64,
			       name, x->ranged ? x->range + 6 : "all", c->status, rcv(x) - x->req_from,
			       (dp_now() - c->t0) * 1000, x->end);
		s3_call_clean(c);
		maybe_free(g, x);
		return DP_OK;
	}
	int k = s3_call_finish(g->s, c, x->h, cc);
	if (c->sink_failed == 1 && c->sink_rc < 0) {
		/* our own check failed: the message is in c->message */
		int code = c->sink_rc;
		dp_seterr(e, code, "%s", c->message);
		s3_call_clean(c);
		return code;
	}
	if (k == S3_OK && rcv(x) < x->end) {
		k = S3_RETRY; /* a short body that curl did not notice */
		snprintf(c->curl_err, sizeof c->curl_err, "body ended after %" PRIu64 " of %" PRIu64
			 " bytes", rcv(x) - x->req_from, x->end - x->req_from);
	}
	if (g->s->conf.verbose)
		s3_log(g->s, "op=GET url=%s range=%s status=%ld bytes=%" PRIu64 " ms=%.0f", name,
		       x->ranged ? x->range + 6 : "all", c->status, rcv(x) - x->req_from,
		       (dp_now() - c->t0) * 1000);
	if (g->probe == x)
		decide(g, k != S3_OK); /* a failure says little: the safe choice */
	if (k == S3_OK || rcv(x) == x->end) {
		/* done, or the probe's cut left nothing more to fetch */
		s3_call_clean(c);
		maybe_free(g, x);
		return DP_OK;
	}
	if (k == S3_AGAIN) { /* to the bucket's region, at once */
		x->retry_at = dp_now();
		s3_call_clean(c);
		return DP_OK;
	}
	if (k == S3_RETRY && x->attempts < g->s->conf.retries) {
		x->attempts++;
		double w = s3_backoff(g->s, x->attempts);
		x->retry_at = dp_now() + w;
		g->nretry++;
		s3_log(g->s, "retry=%d op=GET url=%s error=\"%s\" resume_at=%" PRIu64 " wait_ms=%.0f",
		       x->attempts, name,
		       c->curl_err[0] ? c->curl_err
		       : c->code[0]   ? c->code
		       : cc           ? curl_easy_strerror(cc)
				      : "HTTP error",
		       rcv(x), w * 1000);
		s3_call_clean(c);
		return DP_OK;
	}
	int rc = s3_call_error(g->s, c, name, e);
	if (c->status == 412 && e) {
		rc = dp_seterr(e, DP_EDATA, "%s: the object changed while being read (If-Match %s "
			       "failed)", name, g->objs->v[x->obj].etag);
	} else if (k == S3_RETRY && e) {
		rc = e->code = DP_ETRANSFER;
		size_t l = strlen(e->msg);
		snprintf(e->msg + l, sizeof e->msg - l, " (gave up after %d attempts)",
			 x->attempts + 1);
	}
	s3_call_clean(c);
	return rc;
}

/* A local file's part: read it now. */
static int read_file_part(getter *g, part *p, dp_err *e)
{
	dp_obj *o = &g->objs->v[p->obj];
	int fd = open(o->key, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int saved = errno;
		dp_syserr(e, "%s", o->key);
		if (saved == ENOENT)
			e->code = DP_ENOTFOUND;
		return e->code;
	}
	uint64_t got = 0;
	while (got < p->len) {
		ssize_t n = pread(fd, p->buf + got, (size_t)(p->len - got), (off_t)(p->off + got));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int rc = dp_syserr(e, "%s: read", o->key);
			close(fd);
			return rc;
		}
		if (n == 0) {
			close(fd);
			return dp_seterr(e, DP_EDATA, "%s: the file shrank while being read "
					 "(%" PRIu64 " bytes expected)", o->key, o->size);
		}
		got += (uint64_t)n;
	}
	close(fd);
	atomic_store(&p->filled, p->len);
	notify(g, p, p->len);
	return DP_OK;
}

/* ---- Looking objects up -------------------------------------------------------------- */

static int start_head(getter *g, hslot *h, dp_err *e)
{
	dp_obj *o = &g->objs->v[h->obj];
	memset(&h->call, 0, sizeof h->call);
	h->call.method = "HEAD";
	h->call.bucket = o->bucket;
	h->call.key = o->key;
	h->retry_at = 0;
	if (!h->h && !(h->h = take_handle(g)))
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	int rc = s3_call_setup(g->s, &h->call, h->h, e);
	if (rc < 0)
		return rc;
	if (curl_multi_add_handle(g->multi, h->h) != CURLM_OK)
		return dp_seterr(e, DP_ENOMEM, "cannot add a transfer");
	h->running = 1;
	g->nreq++;
	return DP_OK;
}

static int stop_cb(void *ctx, const dp_obj *o)
{
	(void)o;
	*(int *)ctx = 1;
	return 1;
}

/* The error of a failed lookup, with S3's code and a hint for a prefix
 * given without its trailing '/'. */
static int head_error(getter *g, size_t i, dp_err *e)
{
	dp_obj *o = &g->objs->v[i], tmp;
	int rc = s3_head(g->s, o->bucket, o->key, &tmp, e);
	if (rc == DP_OK) /* there now: odd, but the first answer stands */
		return dp_seterr(e, DP_ETRANSFER, "s3://%s/%s: lookup failed", o->bucket, o->key);
	if (rc == DP_ENOTFOUND && e && !strstr(e->msg, "NoSuchBucket")) {
		char *pfx = NULL;
		if (asprintf(&pfx, "%s/", o->key) >= 0) {
			dp_loc l = {.kind = DP_LOC_S3, .bucket = o->bucket, .key = pfx};
			int found = 0;
			dp_err e2;
			dp_s3_list(g->s, &l, 1, 1, stop_cb, &found, &e2);
			size_t len = strlen(e->msg);
			if (found)
				snprintf(e->msg + len, sizeof e->msg - len,
					 " (s3://%s/%s is a prefix: add the trailing '/')", o->bucket, pfx);
			free(pfx);
		}
	}
	return rc;
}

static int finish_head(getter *g, hslot *h, CURLcode cc, dp_err *e)
{
	curl_multi_remove_handle(g->multi, h->h);
	h->running = 0;
	int k = s3_call_finish(g->s, &h->call, h->h, cc);
	dp_obj *o = &g->objs->v[h->obj];
	char name[1200];
	obj_name(g, h->obj, name, sizeof name);
	if (g->s->conf.verbose)
		s3_log(g->s, "op=HEAD url=%s status=%ld ms=%.0f", name, h->call.status,
		       (dp_now() - h->call.t0) * 1000);
	if (k == S3_OK) {
		if (h->call.content_length < 0) {
			s3_call_clean(&h->call);
			return dp_seterr(e, DP_EDATA, "%s: HEAD answer without Content-Length", name);
		}
		o->size = (uint64_t)h->call.content_length;
		snprintf(o->etag, sizeof o->etag, "%s", h->call.etag);
		o->mtime = h->call.last_modified[0] ? s3_parse_time(h->call.last_modified) : -1;
		o->known = 1;
		s3_call_clean(&h->call);
		h->busy = 0;
		give_handle(g, h->h);
		h->h = NULL;
		return DP_OK;
	}
	if (k == S3_AGAIN) { /* to the bucket's region, at once */
		h->retry_at = dp_now();
		s3_call_clean(&h->call);
		return DP_OK;
	}
	if (k == S3_RETRY && h->attempts < g->s->conf.retries) {
		h->attempts++;
		double w = s3_backoff(g->s, h->attempts);
		h->retry_at = dp_now() + w;
		g->nretry++;
		s3_log(g->s, "retry=%d op=HEAD url=%s error=\"%s\" wait_ms=%.0f", h->attempts, name,
		       h->call.code[0] ? h->call.code : cc ? curl_easy_strerror(cc) : "HTTP error",
		       w * 1000);
		s3_call_clean(&h->call);
		return DP_OK;
	}
	int rc;
	if (k == S3_FAIL && cc == CURLE_OK && h->call.status >= 400 && h->call.status < 500) {
		rc = head_error(g, h->obj, e);
	} else {
		rc = s3_call_error(g->s, &h->call, name, e);
		if (k == S3_RETRY && e) {
			rc = e->code = DP_ETRANSFER;
			size_t l = strlen(e->msg);
			snprintf(e->msg + l, sizeof e->msg - l, " (gave up after %d attempts)",
				 h->attempts + 1);
		}
	}
	s3_call_clean(&h->call);
	return rc;
}

/* ---- The main loop ----------------------------------------------------------------------- */

static int span_of(getter *g, size_t i, dp_err *e)
{
	dp_obj *o = &g->objs->v[i];
	uint64_t lo = 0, hi = o->size;
	if (g->range && g->range->set) {
		const dp_range *r = g->range;
		char name[1200];
		if (r->suffix) {
			lo = (uint64_t)r->first >= o->size ? 0 : o->size - (uint64_t)r->first;
		} else {
			lo = (uint64_t)r->first;
			if (r->last >= 0 && (uint64_t)r->last + 1 < hi)
				hi = (uint64_t)r->last + 1;
			if (lo >= o->size) /* as HTTP's 416, even for an empty object */
				return dp_seterr(e, DP_EARG, "%s: range starts at byte %" PRIu64
						 " of a %" PRIu64 "-byte object",
						 obj_name(g, i, name, sizeof name), lo, o->size);
		}
	}
	g->lo[i] = lo;
	g->hi[i] = hi;
	g->spanned[i] = 1;
	return DP_OK;
}

/* Start runs for the parts of the window no transfer covers, in order,
 * while fewer than W requests are in flight (and none while the first long
 * run measures a connection alone).  Returns 1 when a part is left without
 * a transfer: the window then grows no further (parts are only allocated
 * for requests that can be made, so that finished parts, not idle ones,
 * fill it). */
static int start_runs(getter *g, int *rc, dp_err *e)
{
	int inflight = 0;
	for (int k = 0; k < g->nxf; k++)
		inflight += g->xf[k].busy && (g->xf[k].running || g->xf[k].retry_at > 0);
	if (g->scan_seq < g->rel_seq_seen)
		g->scan_seq = g->rel_seq_seen;
	for (uint64_t sq = g->scan_seq; sq < g->alloc_seq; sq++) {
		part *p = slot(g, sq);
		if (p->x || g->objs->v[p->obj].kind != DP_LOC_S3 ||
		    atomic_load_explicit(&p->filled, memory_order_relaxed) == p->len) {
			if (sq == g->scan_seq)
				g->scan_seq++; /* parts before it all have transfers */
			continue;
		}
		if (g->probe || inflight >= g->W)
			return 1;
		if ((*rc = start_run(g, p, e)) < 0)
			return 1;
		inflight++;
	}
	return 0;
}

/* Keep a buffer the window gave back.  The pool has S places, and more
 * buffers than that can exist (the budget holds W x part_size / 64 KiB of
 * the smallest): a full pool keeps the larger ones, which fit more parts. */
static void pool_put(getter *g, char *buf, size_t cap)
{
	if (g->npool_buf == g->S) {
		int small = 0;
		for (int i = 1; i < g->npool_buf; i++)
			if (g->pool_buf[i].cap < g->pool_buf[small].cap)
				small = i;
		struct pbuf *s = &g->pool_buf[small];
		if (s->cap >= cap) {
			free(buf);
			g->buf_total -= cap;
			return;
		}
		free(s->p);
		g->buf_total -= s->cap;
		*s = g->pool_buf[--g->npool_buf];
	}
	g->pool_buf[g->npool_buf++] = (struct pbuf){buf, cap};
}

/* A buffer of at least len bytes for a new part, within the budget: one
 * the window gave back (the smallest that fits: its pages are mapped
 * already), else a new one, freeing unused ones to make room.  NULL when
 * the window's buffers take the whole budget. */
static char *get_buf(getter *g, uint64_t len, size_t *cap)
{
	/* buffers of parts the window released */
	for (; g->reclaimed_seq < g->rel_seq_seen; g->reclaimed_seq++) {
		part *p = slot(g, g->reclaimed_seq);
		if (p->buf) {
			pool_put(g, p->buf, p->cap);
			p->buf = NULL;
		}
	}
	int best = -1;
	for (int i = 0; i < g->npool_buf; i++)
		if (g->pool_buf[i].cap >= len && (best < 0 || g->pool_buf[i].cap < g->pool_buf[best].cap))
			best = i;
	if (best >= 0) {
		char *b = g->pool_buf[best].p;
		*cap = g->pool_buf[best].cap;
		g->pool_buf[best] = g->pool_buf[--g->npool_buf];
		return b;
	}
	size_t want = (size_t)((len + 65535) / 65536 * 65536);
	while (g->buf_total + want > g->budget && g->npool_buf > 0) {
		struct pbuf *b = &g->pool_buf[--g->npool_buf];
		free(b->p);
		g->buf_total -= b->cap;
	}
	if (g->buf_total + want > g->budget)
		return NULL;
	char *b = malloc(want);
	if (b) {
		g->buf_total += want;
		*cap = want;
	}
	return b;
}

/* Make a pipe as output larger: fewer, longer writes and wake-ups.  Only
 * grows it; failure (a lower limit for unprivileged users) is fine. */
static void grow_pipe(int fd)
{
#ifdef F_SETPIPE_SZ
	struct stat st;
	if (fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode)) {
		int cur = fcntl(fd, F_GETPIPE_SZ);
		if (cur > 0 && cur < PIPE_BYTES)
			fcntl(fd, F_SETPIPE_SZ, PIPE_BYTES);
	}
#else
	(void)fd;
#endif
}

/* ---- Set-up and the main loop ------------------------------------------------------------ */

static int getter_init(getter *g, dp_s3 *s, dp_objs *objs, const dp_range *r, int fd,
		       const char *outname, int verify, dp_err *e)
{
	memset(g, 0, sizeof *g);
	g->s = s;
	g->objs = objs;
	g->range = r;
	g->fd = fd;
	g->outname = outname ? outname : "stdout";
	g->W = s->conf.concurrency;
	g->S = g->W * SLOTS_PER_REQUEST;
	g->ps = s->conf.part_size;
	g->budget = (uint64_t)g->W * ((g->ps + 65535) / 65536 * 65536);
	g->mode = g->W > 1 ? MODE_PROBE : MODE_PARTS;
	const char *force = dp_setting("DP_S3_GET_MODE"); /* tests and benchmarks */
	if (force && !strcmp(force, "stream"))
		g->mode = MODE_STREAM;
	else if (force && !strcmp(force, "parts"))
		g->mode = MODE_PARTS;
	g->verify_any = verify;
	size_t n = objs->n ? objs->n : 1;
	g->lo = calloc(n, sizeof *g->lo);
	g->hi = calloc(n, sizeof *g->hi);
	g->spanned = calloc(n, 1);
	g->ring = calloc((size_t)g->S, sizeof *g->ring);
	g->pool_buf = calloc((size_t)g->S, sizeof *g->pool_buf);
	g->nxf = g->W + 2;
	g->xf = calloc((size_t)g->nxf, sizeof *g->xf);
	g->nvs = g->S + 1;
	g->vs = calloc((size_t)g->nvs, sizeof *g->vs);
	g->vfree = calloc((size_t)g->nvs, sizeof *g->vfree);
	g->vidx = calloc(n, sizeof *g->vidx);
	for (int i = 0; g->vfree && i < g->nvs; i++)
		g->vfree[g->nvfree++] = g->nvs - 1 - i;
	g->nheads = g->W;
	g->heads = calloc((size_t)g->nheads, sizeof *g->heads);
	g->pool = calloc((size_t)(g->nxf + g->nheads), sizeof *g->pool);
	g->multi = curl_multi_init();
	if (!g->lo || !g->hi || !g->spanned || !g->ring || !g->pool_buf || !g->xf || !g->vs ||
	    !g->vfree || !g->vidx || !g->heads || !g->pool || !g->multi)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	for (int k = 0; k < g->nxf; k++)
		dp_buf_init(&g->xf[k].stash, 0);
	grow_pipe(fd);
	pthread_mutex_init(&g->mu, NULL);
	pthread_cond_init(&g->wcv, NULL);
	pthread_cond_init(&g->hcv, NULL);
	g->synced = 1;
	return DP_OK;
}

/* The writer, and the hasher when objects are checked. */
static int start_threads(getter *g, dp_err *e)
{
	if (dp_thread_create(&g->wt, writer_main, g) != 0)
		return dp_seterr(e, DP_ENOMEM, "cannot start the writer thread");
	g->have_wt = 1;
	if (g->verify_any) {
		if (dp_thread_create(&g->ht, hasher_main, g) != 0)
			return dp_seterr(e, DP_ENOMEM, "cannot start the hasher thread");
		g->have_ht = 1;
	}
	return DP_OK;
}

/* After the main loop ended with rc: stop the threads when it failed (or
 * they did), wait for them.  Returns the status of the whole read. */
static int join_threads(getter *g, int rc, dp_err *e)
{
	if (!g->synced)
		return rc;
	pthread_mutex_lock(&g->mu);
	int wfailed = g->wfailed;
	pthread_mutex_unlock(&g->mu);
	if (rc < 0 || wfailed)
		set_abort(g);
	if (g->have_wt)
		pthread_join(g->wt, NULL);
	if (g->have_ht)
		pthread_join(g->ht, NULL);
	if (rc == DP_OK && g->wfailed) {
		rc = g->werr.code;
		if (e)
			*e = g->werr;
	}
	return rc;
}

/* Stop what still runs, free everything, add up the figures in st. */
static void getter_free(getter *g, dp_s3_stats *st)
{
	for (int k = 0; g->synced && k < g->nxf; k++) {
		xfer *x = &g->xf[k];
		if (x->busy && x->running)
			curl_multi_remove_handle(g->multi, x->h);
		if (x->busy && x->h)
			curl_easy_cleanup(x->h);
		s3_call_clean(&x->call);
		dp_buf_free(&x->stash);
	}
	for (int k = 0; g->synced && k < g->S; k++)
		free(g->ring[k].buf);
	for (int k = 0; k < g->npool_buf; k++)
		free(g->pool_buf[k].p);
	for (int k = 0; g->synced && k < g->nheads; k++) {
		hslot *h = &g->heads[k];
		if (h->running)
			curl_multi_remove_handle(g->multi, h->h);
		if (h->h)
			curl_easy_cleanup(h->h);
		s3_call_clean(&h->call);
	}
	if (g->synced) {
		pthread_mutex_destroy(&g->mu);
		pthread_cond_destroy(&g->wcv);
		pthread_cond_destroy(&g->hcv);
	}
	if (st) {
		st->bytes += atomic_load(&g->bytes);
		st->requests += g->nreq;
		st->retries += g->nretry;
		st->out_closed = g->closed;
	}
	g->s->nreq += g->nreq;
	g->s->nretry += g->nretry;
	for (size_t k = 0; k < g->npool; k++)
		curl_easy_cleanup(g->pool[k]);
	if (g->multi)
		curl_multi_cleanup(g->multi);
	free(g->pool);
	free(g->heads);
	free(g->vs);
	free(g->vfree);
	free(g->vidx);
	free(g->xf);
	free(g->ring);
	free(g->pool_buf);
	free(g->lo);
	free(g->hi);
	free(g->spanned);
}

/* The next len bytes of the object being cut, in buf (cap bytes), enter
 * the window as a part: a local file's are read now; a run that waits for
 * the part goes on. */
static int add_part(getter *g, char *buf, size_t cap, uint64_t len, dp_err *e)
{
	size_t oi = g->cut_obj;
	uint64_t off = g->cut_off;
	dp_obj *o = &g->objs->v[oi];
	part *p = slot(g, g->alloc_seq);
	memset(p, 0, sizeof *p);
	p->buf = buf;
	p->cap = cap;
	p->seq = g->alloc_seq;
	p->obj = oi;
	p->off = off;
	p->len = len;
	p->first = off == g->lo[oi];
	p->last = off + len == g->hi[oi];
	unsigned char md[16];
	p->verify = g->verify_any && o->kind == DP_LOC_S3 && g->lo[oi] == 0 &&
		    g->hi[oi] == o->size && s3_md5_etag(o->etag, md);
	p->hdone = !p->verify;
	xfer *rx = g->run_x;
	if (rx && rx->obj == oi && off < g->run_end)
		p->x = rx; /* the latest run goes on into it */
	pthread_mutex_lock(&g->mu);
	g->alloc_seq++;
	pthread_cond_signal(&g->wcv); /* the writer may wait for it */
	pthread_mutex_unlock(&g->mu);
	g->cut_off += len;
	if (o->kind == DP_LOC_FILE)
		return read_file_part(g, p, e);
	if (p->x && !p->x->cur && p->x->next_seq == p->seq)
		return resume_xfer(g, p->x, e);
	return DP_OK;
}

/* New parts, in output order, while the window has room and requests can
 * be made for them; their runs.  *full: the window or the buffer budget is
 * taken (wait for the writer). */
static int add_parts(getter *g, int *full, dp_err *e)
{
	int rc = DP_OK;
	*full = 0;
	while (rc == DP_OK && !start_runs(g, &rc, e) && g->cut_obj < g->objs->n) {
		if (g->alloc_seq - g->rel_seq_seen >= (uint64_t)g->S) {
			*full = 1;
			break;
		}
		size_t oi = g->cut_obj;
		dp_obj *o = &g->objs->v[oi];
		if (!o->known) {
			if (o->kind != DP_LOC_FILE)
				break; /* wait for its HEAD */
			dp_obj fo;
			if ((rc = s3_file_stat(o->key, &fo, e)) < 0)
				break;
			o->size = fo.size;
			o->mtime = fo.mtime;
			o->known = 1;
		}
		if (!g->spanned[oi] && (rc = span_of(g, oi, e)) < 0)
			break;
		if (!g->cut_started) {
			g->cut_off = g->lo[oi];
			g->cut_started = 1;
		}
		if (g->cut_off >= g->hi[oi]) {
			g->cut_obj++;
			g->cut_started = 0;
			continue;
		}
		uint64_t len = g->hi[oi] - g->cut_off;
		if (len > g->ps)
			len = g->ps;
		size_t cap = 0;
		char *buf = get_buf(g, len, &cap);
		if (!buf) {
			if (g->buf_total + len <= g->budget)
				rc = dp_seterr(e, DP_ENOMEM, "out of memory (%" PRIu64 " bytes)", len);
			else
				*full = 1; /* the budget is taken: wait for the writer */
			break;
		}
		rc = add_part(g, buf, cap, len, e);
	}
	return rc;
}

/* Tell the threads what add_parts found: the hasher stops waiting for
 * lanes to fill when the window is full; both stop at the end once every
 * part is allocated. */
static void publish(getter *g, int full)
{
	if (full != atomic_load(&g->full)) {
		atomic_store(&g->full, full);
		if (full && atomic_load(&g->h_wait)) {
			pthread_mutex_lock(&g->mu);
			pthread_cond_signal(&g->hcv);
			pthread_mutex_unlock(&g->mu);
		}
	}
	if (g->cut_obj == g->objs->n) {
		pthread_mutex_lock(&g->mu);
		if (!g->eof) {
			g->eof = 1;
			pthread_cond_broadcast(&g->wcv);
			pthread_cond_broadcast(&g->hcv);
		}
		pthread_mutex_unlock(&g->mu);
	}
}

/* Look objects of unknown size up (HEAD), a little ahead of the stream. */
static int start_heads(getter *g, dp_err *e)
{
	size_t n = g->objs->n, ahead = g->cut_obj + (size_t)g->W * 2;
	if (g->next_head < g->cut_obj)
		g->next_head = g->cut_obj;
	for (size_t i = g->next_head; i < n && i < ahead; i++) {
		dp_obj *o = &g->objs->v[i];
		if (o->known || o->kind != DP_LOC_S3)
			continue;
		int busy = 0, free_slot = -1;
		for (int k = 0; k < g->nheads; k++) {
			if (g->heads[k].busy && g->heads[k].obj == i)
				busy = 1;
			if (!g->heads[k].busy && free_slot < 0)
				free_slot = k;
		}
		if (busy)
			continue;
		if (free_slot < 0)
			break;
		hslot *h = &g->heads[free_slot];
		CURL *hh = h->h;
		memset(h, 0, sizeof *h);
		h->h = hh;
		h->busy = 1;
		h->obj = i;
		int rc = start_head(g, h, e);
		if (rc < 0)
			return rc;
	}
	return DP_OK;
}

/* Move the transfers on; the finished ones go to finish_xfer or
 * finish_head.  *moved: some finished. */
static int collect(getter *g, int *moved, dp_err *e)
{
	int running, left, rc = DP_OK;
	curl_multi_perform(g->multi, &running);
	CURLMsg *m;
	*moved = 0;
	while (rc == DP_OK && (m = curl_multi_info_read(g->multi, &left))) {
		if (m->msg != CURLMSG_DONE)
			continue;
		*moved = 1;
		CURL *h = m->easy_handle;
		CURLcode cc = m->data.result;
		int found = 0;
		for (int k = 0; k < g->nxf && !found; k++)
			if (g->xf[k].busy && g->xf[k].running && g->xf[k].h == h) {
				found = 1;
				rc = finish_xfer(g, &g->xf[k], cc, e);
			}
		for (int k = 0; k < g->nheads && !found; k++)
			if (g->heads[k].busy && g->heads[k].running && g->heads[k].h == h) {
				found = 1;
				rc = finish_head(g, &g->heads[k], cc, e);
			}
	}
	return rc;
}

/* Start again the transfers and lookups whose retry is due at now; *wake:
 * when the next one is (at most 0.2 s ahead). */
static int start_retries(getter *g, double now, double *wake, dp_err *e)
{
	int rc = DP_OK;
	*wake = now + 0.2;
	for (int k = 0; k < g->nxf && rc == DP_OK; k++) {
		xfer *x = &g->xf[k];
		if (x->busy && x->retry_at > 0 && !x->running) {
			if (x->retry_at <= now)
				rc = start_xfer(g, x, e);
			else if (x->retry_at < *wake)
				*wake = x->retry_at;
		}
	}
	for (int k = 0; k < g->nheads && rc == DP_OK; k++) {
		hslot *h = &g->heads[k];
		if (h->busy && !h->running && h->retry_at > 0) {
			if (h->retry_at <= now)
				rc = start_head(g, h, e);
			else if (h->retry_at < *wake)
				*wake = h->retry_at;
		}
	}
	return rc;
}

/* The calling thread's loop: parts into the window, lookups, transfers,
 * retries, progress, until every part is written (or something fails; a
 * failure of the writer or the hasher is theirs to report). */
static int get_loop(getter *g, dp_err *e)
{
	dp_s3 *s = g->s;
	double last_prog = dp_now();
	for (;;) {
		if (s3_cancelled(s))
			return dp_seterr(e, DP_EIO, "%s: interrupted", g->outname);
		pthread_mutex_lock(&g->mu);
		int wfailed = g->wfailed;
		g->rel_seq_seen = g->rel_seq;
		pthread_mutex_unlock(&g->mu);
		if (wfailed)
			return DP_OK;
		int full, rc = add_parts(g, &full, e);
		if (rc < 0)
			return rc;
		publish(g, full);
		if ((rc = start_heads(g, e)) < 0)
			return rc;
		pthread_mutex_lock(&g->mu);
		int finished = g->eof && g->rel_seq == g->alloc_seq;
		pthread_mutex_unlock(&g->mu);
		if (finished)
			return DP_OK;
		int moved;
		if ((rc = collect(g, &moved, e)) < 0)
			return rc;
		if (g->probe && g->probe->got >= g->ps)
			decide(g, 0); /* the first long run has shown its connection's rate */
		double now = dp_now(), wake;
		if ((rc = start_retries(g, now, &wake, e)) < 0)
			return rc;
		if (s->conf.progress && now - last_prog >= 0.25) {
			s->conf.progress(s->conf.progress_ctx, atomic_load(&g->bytes));
			last_prog = now;
		}
		/* wait for the network, a retry or a free slot */
		int ms = moved ? 0 : (int)((wake - now) * 1000) + 1;
		curl_multi_poll(g->multi, NULL, 0, ms < 0 ? 0 : ms, NULL);
	}
}

int dp_s3_get(dp_s3 *s, dp_objs *objs, const dp_range *r, int fd, const char *outname,
	      dp_s3_stats *st, dp_err *e)
{
	if (r && r->set && objs->n != 1)
		return dp_seterr(e, DP_EARG, "a range applies to one object (%zu given)", objs->n);
	int any_s3 = 0;
	for (size_t i = 0; i < objs->n && !any_s3; i++)
		any_s3 = objs->v[i].kind == DP_LOC_S3;
	int rc = any_s3 ? s3_ready(s, e) : DP_OK;
	if (rc < 0)
		return rc;
	getter g;
	rc = getter_init(&g, s, objs, r, fd, outname, any_s3 && !s->conf.no_verify, e);
	if (rc == DP_OK)
		rc = start_threads(&g, e);
	if (rc == DP_OK)
		rc = get_loop(&g, e);
	rc = join_threads(&g, rc, e);
	getter_free(&g, st);
	return rc;
}
