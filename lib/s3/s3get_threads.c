/*
 * s3get_threads.c - the streaming reader's two threads.  The writer writes
 * the window's parts to the output in order as their bytes arrive; the
 * hasher digests the parts of objects whose ETag is an MD5, many small
 * objects at once.  Both run with every signal blocked; s3get.c describes
 * the window they share with the calling thread.
 */
#define _GNU_SOURCE
#include "s3get.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* ---- The writer thread ---------------------------------------------------------------- */

void *s3_get_writer(void *arg)
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
				/* say what we wait for, then look again (see s3_get_notify) */
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
				 s3_get_obj_name(g, v->obj, name, sizeof name), o->etag);
	}
	return DP_OK;
}

void *s3_get_hasher(void *arg)
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
			/* say that we wait, then look again (see s3_get_notify) */
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

