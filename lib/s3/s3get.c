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
#include "s3get.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- Helpers ------------------------------------------------------------------ */

const char *s3_get_obj_name(getter *g, size_t i, char *buf, size_t n)
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

/* The receiving side published p->filled == f: wake whoever waits for it. */
void s3_get_notify(getter *g, part *p, uint64_t f)
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
						 s3_get_obj_name(g, i, name, sizeof name), lo, o->size);
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
		if ((*rc = s3_get_start_run(g, p, e)) < 0)
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

/* n bytes rounded up to the alignment of any type. */
static size_t aligned(size_t n)
{
	size_t al = _Alignof(max_align_t);
	return (n + al - 1) / al * al;
}

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
	g->nxf = g->W + 2;
	g->nvs = g->S + 1;
	g->nheads = g->W;
	/* the arrays, all of the getter's size from here on: one allocation,
	 * each at an offset aligned for any type */
	size_t n = objs->n ? objs->n : 1, S = (size_t)g->S;
	struct {
		void **p;
		size_t n, size;
	} arr[] = {
		{(void **)&g->lo, n, sizeof *g->lo},
		{(void **)&g->hi, n, sizeof *g->hi},
		{(void **)&g->spanned, n, sizeof *g->spanned},
		{(void **)&g->vidx, n, sizeof *g->vidx},
		{(void **)&g->ring, S, sizeof *g->ring},
		{(void **)&g->pool_buf, S, sizeof *g->pool_buf},
		{(void **)&g->xf, (size_t)g->nxf, sizeof *g->xf},
		{(void **)&g->vs, (size_t)g->nvs, sizeof *g->vs},
		{(void **)&g->vfree, (size_t)g->nvs, sizeof *g->vfree},
		{(void **)&g->heads, (size_t)g->nheads, sizeof *g->heads},
		{(void **)&g->pool, (size_t)(g->nxf + g->nheads), sizeof *g->pool},
	};
	size_t narr = sizeof arr / sizeof *arr, total = 0;
	for (size_t i = 0; i < narr; i++)
		total += aligned(arr[i].n * arr[i].size);
	g->multi = curl_multi_init();
	if (!(g->arrays = calloc(1, total)) || !g->multi)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	for (size_t i = 0, off = 0; i < narr; i++) {
		*arr[i].p = g->arrays + off;
		off += aligned(arr[i].n * arr[i].size);
	}
	for (int i = 0; i < g->nvs; i++)
		g->vfree[g->nvfree++] = g->nvs - 1 - i;
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
	if (dp_thread_create(&g->wt, s3_get_writer, g) != 0)
		return dp_seterr(e, DP_ENOMEM, "cannot start the writer thread");
	g->have_wt = 1;
	if (g->verify_any) {
		if (dp_thread_create(&g->ht, s3_get_hasher, g) != 0)
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
		s3_call_drop(&h->call, h->h, h->running, g->multi);
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
	free(g->arrays);
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
		return s3_get_read_file(g, p, e);
	if (p->x && !p->x->cur && p->x->next_seq == p->seq)
		return s3_get_resume(g, p->x, e);
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
		int rc = s3_get_start_head(g, h, e);
		if (rc < 0)
			return rc;
	}
	return DP_OK;
}

/* Move the transfers on; the finished ones go to finish_xfer or
 * finish_head.  *moved: some finished. */
static int collect(getter *g, int *moved, dp_err *e)
{
	int running, rc = DP_OK;
	curl_multi_perform(g->multi, &running);
	CURLMsg *m;
	*moved = 0;
	while (rc == DP_OK && (m = s3_multi_done(g->multi))) {
		*moved = 1;
		CURL *h = m->easy_handle;
		CURLcode cc = m->data.result;
		int found = 0;
		for (int k = 0; k < g->nxf && !found; k++)
			if (g->xf[k].busy && g->xf[k].running && g->xf[k].h == h) {
				found = 1;
				rc = s3_get_finish_xfer(g, &g->xf[k], cc, e);
			}
		for (int k = 0; k < g->nheads && !found; k++)
			if (g->heads[k].busy && g->heads[k].running && g->heads[k].h == h) {
				found = 1;
				rc = s3_get_finish_head(g, &g->heads[k], cc, e);
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
		if (x->busy && !x->running && s3_retry_due(x->retry_at, now, wake))
			rc = s3_get_start_xfer(g, x, e);
	}
	for (int k = 0; k < g->nheads && rc == DP_OK; k++) {
		hslot *h = &g->heads[k];
		if (h->busy && !h->running && s3_retry_due(h->retry_at, now, wake))
			rc = s3_get_start_head(g, h, e);
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
			s3_get_decide(g, 0); /* the first long run has shown its connection's rate */
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
