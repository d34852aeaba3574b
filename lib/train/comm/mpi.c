/*
 * mpi.c - the MPI side of dp_comm (comm_impl.h): every call into MPI
 * (Open MPI; any MPI-3 library should do).
 *
 * Gradients are summed by a ring allreduce over point-to-point messages
 * (ring_allreduce): the fewest bytes per rank, a fixed order of additions
 * (bit-identical results on every rank), and every wait polled here.
 * Small sums, broadcasts and gathers are MPI's non-blocking collectives.
 *
 * Threads: MPI is initialised MPI_THREAD_SERIALIZED.  The caller's thread
 * makes the blocking collectives; the communication thread (started when
 * overlap is on) sums gradient buckets during the backward pass.  The two
 * never call MPI at the same time: the caller's thread calls MPI only
 * when the communication thread has no work (it waits for it to drain
 * first), and hands work over under a mutex.
 *
 * Waiting: every request is completed by polling MPI_Test: spin for a few
 * microseconds, then sched_yield (a busy core is handed to whoever needs
 * it, the other threads of this process or an oversubscribed peer), then
 * short sleeps.  The stall inspector lives in that loop: once a wait
 * passes `announce` seconds the rank tells the others (a message on a
 * communicator of its own: rank and the number of the collective), once
 * it passes conf.stall_warn the lowest waiting rank reports the ranks it
 * has not heard from, again every stall_warn seconds; after
 * conf.stall_abort the wait fails.
 *
 * Collectives are started in the same order on every rank (the rule of
 * MPI), numbered by `seq`; the numbers tell announcements of the current
 * stall from stale ones, and tag the ring's messages.
 */
#define _GNU_SOURCE
#include "comm_impl.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TAG_STALL 7
#define CHUNK (1 << 28) /* elements per MPI call: counts are ints */

typedef struct job {
	float *buf;
	size_t lo, hi;
} job;

struct comm_mpi {
	MPI_Comm world; /* our collectives */
	MPI_Comm ctl;   /* stall announcements */
	MPI_Comm p2p;   /* point-to-point messages (dp_comm_send, dp_comm_recv) */
	int child;      /* a group of another dp_comm's job (dp_comm_split): no MPI_Finalize */
	/* sends not known to be done: their bytes, copied out */
	MPI_Request *sreq;
	void **sbuf;
	size_t ns, scap;
	int thread_ok;  /* MPI gave MPI_THREAD_SERIALIZED or better */
	uint64_t seq;   /* collectives posted */
	int64_t *heard; /* per rank: the collective it said it waits in, -1: none */
	/* the communication thread */
	int running;
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;  /* work for the thread; quit */
	pthread_cond_t dcv; /* the thread drained */
	job *q;
	size_t qn, qcap;    /* jobs of this step */
	size_t done;        /* jobs summed */
	int quit;
	int status;
	dp_err err;
	float *tmp; /* the chunk being received (ring_allreduce) */
	size_t tcap;
	unsigned char *wire[2]; /* 16-bit messages out and in (ring_allreduce) */
	size_t wcap[2];
	MPI_Request *rq; /* a ring step's requests */
	size_t rqcap;
	/* hosts, by MPI's shared-memory split: this host's ranks (local), the
	 * ranks of this local index on every host (cross) */
	MPI_Comm local, cross;
	int lrank, lsize, nhosts;
	int hier_ok; /* several hosts, each with the same number (> 1) of ranks */
	int *host_of; /* world rank -> host index */
};

static int mpierr(int code, const char *what, dp_err *e)
{
	char s[MPI_MAX_ERROR_STRING];
	int len = 0;
	if (MPI_Error_string(code, s, &len) != MPI_SUCCESS)
		snprintf(s, sizeof s, "error %d", code);
	return dp_seterr(e, DP_EIO, "%s: MPI: %.*s", what, len, s);
}

/* ---- waiting, and the stall inspector ---------------------------------------- */

typedef struct poll_state {
	double t0, next_report, last;
	uint64_t seq;
	int announced, reported;
	const char *what;
} poll_state;

static void poll_start(dp_comm *c, poll_state *p, uint64_t seq, const char *what)
{
	p->t0 = p->last = dp_now();
	p->next_report = c->conf.stall_warn > 0 ? p->t0 + c->conf.stall_warn : INFINITY;
	p->seq = seq;
	p->announced = p->reported = 0;
	p->what = what;
}

static int heard_now(struct comm_mpi *m, int r, uint64_t seq)
{
	int64_t h = m->heard[r];
	return h >= 0 && (uint64_t)h + 8 >= seq && (uint64_t)h <= seq + 8;
}

/* Read the announcements that have arrived. */
static void listen_ctl(dp_comm *c)
{
	struct comm_mpi *m = c->mpi;
	for (;;) {
		int flag = 0;
		MPI_Status st;
		if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_STALL, m->ctl, &flag, &st) != MPI_SUCCESS || !flag)
			return;
		int64_t v[2];
		if (MPI_Recv(v, 2, MPI_INT64_T, st.MPI_SOURCE, TAG_STALL, m->ctl, MPI_STATUS_IGNORE) !=
		    MPI_SUCCESS)
			return;
		if (st.MPI_SOURCE >= 0 && st.MPI_SOURCE < c->size)
			m->heard[st.MPI_SOURCE] = v[0];
	}
}

/* "2, 5, 7" of the ranks that are (want 1) or are not (want 0) heard. */
static void rank_list(dp_comm *c, uint64_t seq, int want, char *buf, size_t len, int *count)
{
	size_t n = 0;
	int k = 0;
	buf[0] = 0;
	for (int r = 0; r < c->size; r++) {
		int h = r == c->rank || heard_now(c->mpi, r, seq);
		if (h != want)
			continue;
		if (++k <= 16 && n < len)
			n += (size_t)snprintf(buf + n, len - n, "%s%d", k > 1 ? ", " : "", r);
	}
	if (k > 16 && n < len)
		snprintf(buf + n, len - n, " and %d more", k - 16);
	*count = k;
}

/* Called while a wait is not over: back off, announce, report, give up. */
static int poll_idle(dp_comm *c, poll_state *p, dp_err *e)
{
	struct comm_mpi *m = c->mpi;
	double now = dp_now();
	if (now - p->last > 0.5) {
		/* this process did not run (stopped, swapped out): the others
		 * were not the ones keeping it waiting */
		p->t0 += now - p->last;
		p->next_report += now - p->last;
	}
	p->last = now;
	double w = now - p->t0;
	if (w < 20e-6) {
		/* spin */
	} else if (w < 1e-3) {
		sched_yield();
	} else {
		struct timespec ts = {0, w < 0.05 ? 20000 : 500000};
		nanosleep(&ts, NULL);
	}
	if (c->conf.stall_warn <= 0 && c->conf.stall_abort <= 0)
		return DP_OK;
	double lim = c->conf.stall_warn > 0 ? c->conf.stall_warn : c->conf.stall_abort;
	double announce = lim / 2 < 1 ? lim / 2 : 1;
	if (w < announce)
		return DP_OK;
	if (!p->announced) {
		int64_t v[2] = {(int64_t)p->seq, c->rank};
		for (int r = 0; r < c->size; r++)
			if (r != c->rank && (c->size <= 64 || r < 2))
				MPI_Send(v, 2, MPI_INT64_T, r, TAG_STALL, m->ctl);
		p->announced = 1;
	}
	listen_ctl(c);
	char missing[160], waiting[160];
	int nmiss, nwait;
	if (now >= p->next_report) {
		p->next_report += c->conf.stall_warn;
		rank_list(c, p->seq, 0, missing, sizeof missing, &nmiss);
		rank_list(c, p->seq, 1, waiting, sizeof waiting, &nwait);
		int lowest = c->rank;
		for (int r = 0; r < c->rank; r++)
			if (heard_now(m, r, p->seq)) {
				lowest = r;
				break;
			}
		if (lowest == c->rank && nmiss) {
			comm_report(c,
				    "%s: waited %.0f s for rank%s %s (stopped, stuck or far behind); "
				    "rank%s %s waiting",
				    p->what, w, nmiss == 1 ? "" : "s", missing, nwait == 1 ? "" : "s",
				    waiting);
			p->reported = 1;
		}
	}
	if (c->conf.stall_abort > 0 && w >= c->conf.stall_abort) {
		rank_list(c, p->seq, 0, missing, sizeof missing, &nmiss);
		return dp_seterr(e, DP_ELIMIT,
				 "%s: waited %.0f s for rank%s %s: giving up (--stall-abort)", p->what,
				 w, nmiss == 1 ? "" : "s", nmiss ? missing : "(unknown)");
	}
	return DP_OK;
}

static void poll_end(dp_comm *c, poll_state *p)
{
	if (p->reported)
		comm_report(c, "%s: going on after %.0f s", p->what, dp_now() - p->t0);
}

/* Complete n requests, polling. */
static int wait_all(dp_comm *c, MPI_Request *r, int n, uint64_t seq, const char *what, dp_err *e)
{
	int flag = 0, rc;
	if ((rc = MPI_Testall(n, r, &flag, MPI_STATUSES_IGNORE)) != MPI_SUCCESS)
		return mpierr(rc, what, e);
	if (flag)
		return DP_OK;
	poll_state p;
	poll_start(c, &p, seq, what);
	for (;;) {
		if ((rc = MPI_Testall(n, r, &flag, MPI_STATUSES_IGNORE)) != MPI_SUCCESS)
			return mpierr(rc, what, e);
		if (flag)
			break;
		if ((rc = poll_idle(c, &p, e)) < 0)
			return rc;
	}
	poll_end(c, &p);
	return DP_OK;
}

/* ---- open, close ---------------------------------------------------------------- */

/* Which ranks share a host: MPI's shared-memory split (or, with the
 * setting DP_COMM_HOST_RANKS=K, every K consecutive ranks: hosts emulated
 * on one machine); the host of a rank is numbered by the lowest world rank
 * on it.  At open, every rank. */
static int find_hosts(dp_comm *c, dp_err *e)
{
	struct comm_mpi *m = c->mpi;
	int rc;
	const char *hr = dp_setting("DP_COMM_HOST_RANKS");
	char *end = NULL;
	long per = hr ? strtol(hr, &end, 10) : 0;
	if (hr && (per < 1 || per > INT_MAX || *end))
		return dp_seterr(e, DP_EARG,
				 "DP_COMM_HOST_RANKS '%s': want a number of ranks, 1 or more", hr);
	if (per)
		rc = MPI_Comm_split(m->world, c->rank / (int)per, c->rank, &m->local);
	else
		rc = MPI_Comm_split_type(m->world, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL,
					 &m->local);
	if (rc != MPI_SUCCESS)
		return mpierr(rc, "MPI_Comm_split_type", e);
	MPI_Comm_rank(m->local, &m->lrank);
	MPI_Comm_size(m->local, &m->lsize);
	int lowest = c->rank;
	if ((rc = MPI_Allreduce(MPI_IN_PLACE, &lowest, 1, MPI_INT, MPI_MIN, m->local)) != MPI_SUCCESS)
		return mpierr(rc, "hosts", e);
	if (!(m->host_of = malloc((size_t)c->size * sizeof *m->host_of)))
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	if ((rc = MPI_Allgather(&lowest, 1, MPI_INT, m->host_of, 1, MPI_INT, m->world)) != MPI_SUCCESS)
		return mpierr(rc, "hosts", e);
	/* lowest ranks -> 0, 1, 2... in order */
	m->nhosts = 0;
	for (int r = 0; r < c->size; r++)
		if (m->host_of[r] == r)
			m->nhosts++;
	for (int r = 0; r < c->size; r++) {
		int k = 0;
		for (int q = 0; q < m->host_of[r]; q++)
			k += m->host_of[q] == q;
		m->host_of[r] = k;
	}
	if ((rc = MPI_Comm_split(m->world, m->lrank, c->rank, &m->cross)) != MPI_SUCCESS)
		return mpierr(rc, "MPI_Comm_split", e);
	int most = m->lsize, least = m->lsize;
	if ((rc = MPI_Allreduce(MPI_IN_PLACE, &most, 1, MPI_INT, MPI_MAX, m->world)) != MPI_SUCCESS ||
	    (rc = MPI_Allreduce(MPI_IN_PLACE, &least, 1, MPI_INT, MPI_MIN, m->world)) != MPI_SUCCESS)
		return mpierr(rc, "hosts", e);
	m->hier_ok = m->nhosts > 1 && most == least && most > 1;
	c->st.hosts = m->nhosts;
	return DP_OK;
}

static int join(dp_comm *c, dp_err *e);
static int drain_sends(dp_comm *c, dp_err *e);

int comm_mpi_open(dp_comm *c, dp_err *e)
{
	int inited = 0, prov = 0, rc;
	MPI_Initialized(&inited);
	if (!inited && (rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &prov)) != MPI_SUCCESS)
		return mpierr(rc, "MPI_Init", e);
	if (inited)
		MPI_Query_thread(&prov);
	struct comm_mpi *m = calloc(1, sizeof *m);
	if (!m)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	c->mpi = m;
	m->world = m->ctl = m->p2p = m->local = m->cross = MPI_COMM_NULL;
	m->thread_ok = prov >= MPI_THREAD_SERIALIZED;
	pthread_mutex_init(&m->mu, NULL);
	pthread_cond_init(&m->cv, NULL);
	pthread_cond_init(&m->dcv, NULL);
	if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &m->world)) != MPI_SUCCESS ||
	    (rc = MPI_Comm_dup(MPI_COMM_WORLD, &m->ctl)) != MPI_SUCCESS)
		return mpierr(rc, "MPI_Comm_dup", e);
	char v[MPI_MAX_LIBRARY_VERSION_STRING];
	int vl = 0;
	MPI_Get_library_version(v, &vl);
	v[strcspn(v, ",\n")] = 0;
	snprintf(c->lib, sizeof c->lib, "%.100s", v);
	if ((rc = join(c, e)) < 0)
		return rc;
	snprintf(c->desc, sizeof c->desc, "%.100s, %d rank%s", v, c->size, c->size == 1 ? "" : "s");
	return comm_mpi_configure(c, e);
}

/* A job's communicators set up (world and ctl made): its rank, size,
 * hosts, point-to-point communicator.  Every member. */
static int join(dp_comm *c, dp_err *e)
{
	struct comm_mpi *m = c->mpi;
	int rc;
	if ((rc = MPI_Comm_dup(m->world, &m->p2p)) != MPI_SUCCESS)
		return mpierr(rc, "MPI_Comm_dup", e);
	MPI_Comm_set_errhandler(m->world, MPI_ERRORS_RETURN);
	MPI_Comm_set_errhandler(m->ctl, MPI_ERRORS_RETURN);
	MPI_Comm_set_errhandler(m->p2p, MPI_ERRORS_RETURN);
	MPI_Comm_rank(m->world, &c->rank);
	MPI_Comm_size(m->world, &c->size);
	if (!(m->heard = malloc((size_t)c->size * sizeof *m->heard)))
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	for (int r = 0; r < c->size; r++)
		m->heard[r] = -1;
	return find_hosts(c, e);
}

int comm_mpi_split(dp_comm *parent, dp_comm *c, int color, int key, dp_err *e)
{
	struct comm_mpi *pm = parent->mpi, *m = calloc(1, sizeof *m);
	int rc;
	if (!m)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	c->mpi = m;
	m->world = m->ctl = m->p2p = m->local = m->cross = MPI_COMM_NULL;
	m->child = 1;
	m->thread_ok = pm->thread_ok;
	pthread_mutex_init(&m->mu, NULL);
	pthread_cond_init(&m->cv, NULL);
	pthread_cond_init(&m->dcv, NULL);
	if ((rc = MPI_Comm_split(pm->world, color, key, &m->world)) != MPI_SUCCESS ||
	    (rc = MPI_Comm_split(pm->ctl, color, key, &m->ctl)) != MPI_SUCCESS)
		return mpierr(rc, "MPI_Comm_split", e);
	snprintf(c->lib, sizeof c->lib, "%s", parent->lib);
	if ((rc = join(c, e)) < 0)
		return rc;
	snprintf(c->desc, sizeof c->desc, "%.100s, a group of %d rank%s", c->lib, c->size,
		 c->size == 1 ? "" : "s");
	return comm_mpi_configure(c, e);
}

static void stop_thread(struct comm_mpi *m)
{
	if (!m->running)
		return;
	pthread_mutex_lock(&m->mu);
	m->quit = 1;
	pthread_cond_broadcast(&m->cv);
	pthread_mutex_unlock(&m->mu);
	pthread_join(m->th, NULL);
	m->running = 0;
	m->quit = 0;
}

void comm_mpi_close(dp_comm *c)
{
	struct comm_mpi *m = c->mpi;
	stop_thread(m);
	if (m->world != MPI_COMM_NULL && m->ctl != MPI_COMM_NULL) {
		/* everyone here (a polled barrier: a rank that never comes is
		 * reported), then the announcements nobody read */
		MPI_Request r;
		dp_err e;
		if (MPI_Ibarrier(m->world, &r) == MPI_SUCCESS &&
		    wait_all(c, &r, 1, m->seq++, "the end of the job", &e) < 0) {
			comm_report(c, "%s", e.msg); /* --stall-abort: MPI_Finalize would hang */
			comm_mpi_abort(c, 1);
		}
		listen_ctl(c);
	}
	drain_sends(c, NULL);
	if (m->p2p != MPI_COMM_NULL)
		MPI_Comm_free(&m->p2p);
	if (m->local != MPI_COMM_NULL)
		MPI_Comm_free(&m->local);
	if (m->cross != MPI_COMM_NULL)
		MPI_Comm_free(&m->cross);
	if (m->world != MPI_COMM_NULL)
		MPI_Comm_free(&m->world);
	if (m->ctl != MPI_COMM_NULL)
		MPI_Comm_free(&m->ctl);
	int fin = 0;
	MPI_Finalized(&fin);
	if (!fin && !m->child)
		MPI_Finalize();
	pthread_mutex_destroy(&m->mu);
	pthread_cond_destroy(&m->cv);
	pthread_cond_destroy(&m->dcv);
	free(m->heard);
	free(m->q);
	free(m->tmp);
	free(m->wire[0]);
	free(m->wire[1]);
	free(m->rq);
	free(m->host_of);
	free(m->sreq);
	free(m->sbuf);
	free(m);
	c->mpi = NULL;
}

void comm_mpi_abort(dp_comm *c, int code)
{
	MPI_Abort(MPI_COMM_WORLD, code);
	_exit(code);
}

/* ---- blocking collectives -------------------------------------------------------------- */

static MPI_Datatype mtype(int type, size_t *unit)
{
	switch (type) {
	case COMM_F32: *unit = 4; return MPI_FLOAT;
	case COMM_F64: *unit = 8; return MPI_DOUBLE;
	default: *unit = 1; return MPI_BYTE;
	}
}

int comm_mpi_allreduce_sum(dp_comm *c, void *buf, size_t n, int type, const char *what,
			   dp_err *e)
{
	struct comm_mpi *m = c->mpi;
	size_t unit;
	MPI_Datatype t = mtype(type, &unit);
	for (size_t i = 0; i < n; i += CHUNK) {
		int k = (int)(n - i < CHUNK ? n - i : CHUNK);
		MPI_Request r;
		int rc = MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + i * unit, k, t, MPI_SUM, m->world,
					&r);
		if (rc != MPI_SUCCESS)
			return mpierr(rc, what, e);
		if ((rc = wait_all(c, &r, 1, m->seq++, what, e)) < 0)
			return rc;
	}
	return DP_OK;
}

int comm_mpi_bcast(dp_comm *c, void *buf, size_t bytes, int root, const char *what, dp_err *e)
{
	struct comm_mpi *m = c->mpi;
	for (size_t i = 0; i < bytes; i += CHUNK) {
		int k = (int)(bytes - i < CHUNK ? bytes - i : CHUNK);
		MPI_Request r;
		int rc = MPI_Ibcast((char *)buf + i, k, MPI_BYTE, root, m->world, &r);
		if (rc != MPI_SUCCESS)
			return mpierr(rc, what, e);
		if ((rc = wait_all(c, &r, 1, m->seq++, what, e)) < 0)
			return rc;
	}
	return DP_OK;
}

int comm_mpi_allgather(dp_comm *c, const void *mine, void *all, size_t bytes, const char *what,
		       dp_err *e)
{
	struct comm_mpi *m = c->mpi;
	if (bytes > INT_MAX)
		return dp_seterr(e, DP_ELIMIT, "%s: %zu bytes per rank: too many", what, bytes);
	MPI_Request r;
	int rc = MPI_Iallgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, m->world, &r);
	if (rc != MPI_SUCCESS)
		return mpierr(rc, what, e);
	return wait_all(c, &r, 1, m->seq++, what, e);
}

int comm_mpi_gather(dp_comm *c, const void *mine, size_t len, char **all, size_t *lens,
		    const char *what, dp_err *e)
{
	struct comm_mpi *m = c->mpi;
	uint64_t l = len, *ls = malloc((size_t)c->size * sizeof *ls);
	int *cnt = malloc((size_t)c->size * sizeof *cnt), *dsp = malloc((size_t)c->size * sizeof *dsp);
	*all = NULL;
	int rc = DP_OK;
	if (!ls || !cnt || !dsp) {
		rc = dp_seterr(e, DP_ENOMEM, "out of memory");
		goto out;
	}
	if ((rc = comm_mpi_allgather(c, &l, ls, sizeof l, what, e)) < 0)
		goto out;
	uint64_t total = 0;
	for (int r = 0; r < c->size; r++) {
		if (ls[r] > INT_MAX || total + ls[r] > INT_MAX) {
			rc = dp_seterr(e, DP_ELIMIT, "%s: more than 2 GiB to gather on rank 0", what);
			goto out;
		}
		dsp[r] = (int)total;
		cnt[r] = (int)ls[r];
		lens[r] = (size_t)ls[r];
		total += ls[r];
	}
	if (c->rank == 0 && !(*all = malloc(total ? total : 1))) {
		rc = dp_seterr(e, DP_ENOMEM, "out of memory");
		goto out;
	}
	MPI_Request r;
	int mr = MPI_Igatherv(mine, (int)len, MPI_BYTE, *all, cnt, dsp, MPI_BYTE, 0, m->world, &r);
	if (mr != MPI_SUCCESS)
		rc = mpierr(mr, what, e);
	else
		rc = wait_all(c, &r, 1, m->seq++, what, e);
out:
	if (rc < 0) {
		free(*all);
		*all = NULL;
	}
	free(ls);
	free(cnt);
	free(dsp);
	return rc;
}

/* ---- point to point -------------------------------------------------------------------
 *
 * Messages of a pipeline: each send's bytes are copied out and sent with
 * MPI_Isend, so a rank that sends goes on at once (two neighbours sending
 * to each other never wait on each other, whatever MPI's eager limit); the
 * copies are freed as their sends complete, tested at every send and
 * receive.  A message is one MPI message (of floats: 8 GiB at most). */

/* Wait for every send (e: report a failure), or (e NULL: closing) free
 * those that are done and leave the rest. */
static int drain_sends(dp_comm *c, dp_err *e)
{
	struct comm_mpi *m = c->mpi;
	int rc = DP_OK;
	if (e && m->ns)
		rc = wait_all(c, m->sreq, (int)m->ns, m->seq, "sending to the next stages", e);
	size_t k = 0;
	for (size_t i = 0; i < m->ns; i++) {
		int done = 1;
		if (!e)
			MPI_Test(&m->sreq[i], &done, MPI_STATUS_IGNORE);
		if (done && rc >= 0) {
			free(m->sbuf[i]);
		} else {
			m->sreq[k] = m->sreq[i];
			m->sbuf[k++] = m->sbuf[i];
		}
	}
	m->ns = k;
	return rc;
}

/* The sends that are done, freed (without waiting). */
static void reap_sends(struct comm_mpi *m)
{
	size_t k = 0;
	for (size_t i = 0; i < m->ns; i++) {
		int done = 0;
		MPI_Test(&m->sreq[i], &done, MPI_STATUS_IGNORE);
		if (done) {
			free(m->sbuf[i]);
		} else {
			m->sreq[k] = m->sreq[i];
			m->sbuf[k++] = m->sbuf[i];
		}
	}
	m->ns = k;
}

/* A message of bytes as MPI counts it: floats when it is whole floats (8
 * GiB at most), else bytes (2 GiB). */
static int msg_type(size_t bytes, MPI_Datatype *t, int *count)
{
	if (bytes % 4 == 0 && bytes / 4 <= INT_MAX) {
		*t = MPI_FLOAT;
		*count = (int)(bytes / 4);
		return 1;
	}
	*t = MPI_BYTE;
	*count = (int)bytes;
	return bytes <= INT_MAX;
}

int comm_mpi_send(dp_comm *c, void *copy, size_t bytes, int to, int tag, dp_err *e)
{
	struct comm_mpi *m = c->mpi;
	MPI_Datatype t;
	int count;
	reap_sends(m);
	if (!msg_type(bytes, &t, &count)) {
		free(copy);
		return dp_seterr(e, DP_ELIMIT, "send: a message of %zu bytes: too long", bytes);
	}
	if (m->ns == m->scap) {
		size_t nc = m->scap ? 2 * m->scap : 16;
		MPI_Request *r = realloc(m->sreq, nc * sizeof *r);
		if (r)
			m->sreq = r;
		void **b = realloc(m->sbuf, nc * sizeof *b);
		if (b)
			m->sbuf = b;
		if (!r || !b) {
			free(copy);
			return dp_seterr(e, DP_ENOMEM, "out of memory");
		}
		m->scap = nc;
	}
	int rc = MPI_Isend(copy, count, t, to, tag, m->p2p, &m->sreq[m->ns]);
	if (rc != MPI_SUCCESS) {
		free(copy);
		return mpierr(rc, "send", e);
	}
	m->sbuf[m->ns++] = copy;
	return DP_OK;
}

int comm_mpi_recv(dp_comm *c, void *buf, size_t bytes, int from, int tag, const char *what,
		  dp_err *e)
{
	struct comm_mpi *m = c->mpi;
	MPI_Datatype t;
	MPI_Request r;
	MPI_Status st;
	int count, flag = 0, rc;
	if (!msg_type(bytes, &t, &count))
		return dp_seterr(e, DP_ELIMIT, "%s: a message of %zu bytes: too long", what, bytes);
	if ((rc = MPI_Irecv(buf, count, t, from, tag, m->p2p, &r)) != MPI_SUCCESS)
		return mpierr(rc, what, e);
	poll_state p;
	poll_start(c, &p, m->seq, what);
	for (;;) {
		reap_sends(m);
		memset(&st, 0, sizeof st);
		if ((rc = MPI_Test(&r, &flag, &st)) != MPI_SUCCESS) {
			int cls = 0;
			MPI_Error_class(rc, &cls);
			if (cls == MPI_ERR_TRUNCATE)
				return dp_seterr(e, DP_EDATA, "%s: a message longer than the %zu bytes "
						 "expected", what, bytes);
			return mpierr(rc, what, e);
		}
		if (flag)
			break;
		if ((rc = poll_idle(c, &p, e)) < 0)
			return rc;
	}
	poll_end(c, &p);
	int got = 0;
	MPI_Get_count(&st, t, &got);
	if (got != count)
		return dp_seterr(e, DP_EDATA, "%s: %zu bytes, not the %zu expected", what,
				 (size_t)got * (t == MPI_FLOAT ? 4 : 1), bytes);
	return DP_OK;
}

int comm_mpi_send_wait(dp_comm *c, dp_err *e) { return drain_sends(c, e); }

/* ---- gradients ----------------------------------------------------------------------- */

/* ---- the wire: float32, or 16-bit messages ---- */

/* Bytes of a ring message at most.  Where the right neighbour is also the
 * left one on another host (a ring of 2 hosts), 64,000: under Open MPI's
 * eager limit over TCP (64 KiB with its header).  A larger message goes
 * by rendezvous: its sender waits for the receiver's go-ahead, which
 * travels on the one socket of the pair, behind megabytes of the
 * receiver's own data in that socket's send buffer; each side then waits
 * for the other in turn and the link carries one direction at a time
 * (48% of 1 Gbit/s, bench/REPORT).  Eager messages go as soon as they
 * are posted, both ways at once.  In a longer ring the go-ahead goes back
 * to the left neighbour, on a socket that carries no data that way, and
 * fewer, larger messages cost less of the CPU (an eager message is
 * copied once more on arrival). */
#define MSG_PAIR 64000
#define MSG_RING 262144

/* Values a message at most: several in flight per ring step. */
static size_t seg_values(int wire, size_t most)
{
	return wire == DP_WIRE_F32 ? most / 4 : wire == DP_WIRE_BF16 ? most / 2 : (most - 4) / 2;
}

/* Bytes of a message of len values. */
static size_t msg_bytes(int wire, size_t len)
{
	return wire == DP_WIRE_F32 ? 4 * len : wire == DP_WIRE_BF16 ? 2 * len : 4 + 2 * len;
}

/* x[0..len) as a message at out.  fp16: a float32 power-of-two scale,
 * then x / scale as float16, the scale chosen so that the largest finite
 * magnitude lands in [16384, 32768]: nothing finite overflows (fp16's
 * largest is 65504), and small gradients keep their bits instead of
 * flushing to zero.  Infinities and NaNs stay what they are. */
static void encode(int wire, const float *x, size_t len, unsigned char *out, float *scratch)
{
	if (wire == DP_WIRE_BF16) {
		dp_f32_to_bf16((uint16_t *)out, x, len);
		return;
	}
	float big = 0;
	for (size_t i = 0; i < len; i++) {
		float a = fabsf(x[i]);
		if (a > big && a <= FLT_MAX)
			big = a;
	}
	int ex = 0;
	if (big > 0) {
		frexpf(big, &ex); /* big = f * 2^ex, f in [0.5, 1) */
		ex -= 15;         /* big / 2^ex in [16384, 32768) */
	}
	float scale = ldexpf(1.0f, ex), inv = ldexpf(1.0f, -ex);
	memcpy(out, &scale, 4);
	for (size_t i = 0; i < len; i++)
		scratch[i] = x[i] * inv;
	dp_f32_to_f16((uint16_t *)(out + 4), scratch, len);
}

/* A message of len values back to float32 at x. */
static void decode(int wire, const unsigned char *in, size_t len, float *x)
{
	if (wire == DP_WIRE_BF16) {
		dp_bf16_to_f32(x, (const uint16_t *)in, len);
		return;
	}
	float scale;
	memcpy(&scale, in, 4);
	dp_f16_to_f32(x, (const uint16_t *)(in + 4), len);
	for (size_t i = 0; i < len; i++)
		x[i] *= scale;
}

static int grow(void **p, size_t *cap, size_t want, dp_err *e)
{
	if (want <= *cap)
		return DP_OK;
	void *q = realloc(*p, want);
	if (!q)
		return dp_seterr(e, DP_ENOMEM, "out of memory for %zu bytes", want);
	*p = q;
	*cap = want;
	return DP_OK;
}

/* Where the gradient sums go over one communicator: the world, or the
 * hosts' leaders. */
typedef struct ring {
	MPI_Comm comm;
	int r, p;
	int cross; /* the right neighbour is on another host */
} ring;

/* Sum n floats in place over the ranks of g: a ring (reduce-scatter, then
 * allgather) over point-to-point messages, polled like every wait.
 * Rank r's chunk k travels r -> r+1 -> ... and is added in that fixed
 * order; each chunk's sum is made on one rank and copied to the others,
 * so the result is bit-identical on every rank and from run to run.
 * Each rank sends and receives 2 (p-1)/p of the buffer, the least any
 * allreduce can (Open MPI's non-blocking allreduce of one buffer in place
 * goes through a binomial tree, 1.5 to 2.5 times slower here).
 *
 * A step's chunk goes as messages of MSG_PAIR or MSG_RING bytes at most,
 * all posted at once: the link carries the next while the last is added.
 * With a 16-bit wire the partial sums are rounded to it at every hop and
 * added in float32; the rank that completes a chunk rounds its own copy
 * the same way, and the allgather forwards the messages as received, so
 * every rank decodes the same bytes.
 *
 * phases: RING_RS alone leaves rank r holding the whole sum of chunk
 * (r+1) % p (the rest partial); RING_AG alone starts from there (float32
 * wire only: the 16-bit allgather sends what the reduce-scatter encoded). */
enum { RING_RS = 1, RING_AG = 2, RING_ALL = 3 };

static int ring_allreduce(dp_comm *c, const ring *g, float *buf, size_t n, int wire, int phases,
			  const char *what, dp_err *e)
{
	struct comm_mpi *m = c->mpi;
	int p = g->p, r = g->r, right = (r + 1) % p, left = (r + p - 1) % p;
	if (p < 2)
		return DP_OK;
	if (n / (size_t)p + 1 > INT_MAX)
		return dp_seterr(e, DP_ELIMIT, "%s: %zu floats: too many for one allreduce", what, n);
	size_t seg = seg_values(wire, left == right && g->cross ? MSG_PAIR : MSG_RING);
	size_t most = n / (size_t)p + 1, nseg = (most + seg - 1) / seg;
	size_t wmost = msg_bytes(wire, most) + 4 * nseg;
	int rc;
	if ((rc = grow((void **)&m->tmp, &m->tcap, (most > seg ? most : seg) * sizeof(float), e)) < 0 ||
	    (rc = grow((void **)&m->rq, &m->rqcap, 2 * nseg * sizeof(MPI_Request), e)) < 0 ||
	    (wire != DP_WIRE_F32 && ((rc = grow((void **)&m->wire[0], &m->wcap[0], wmost, e)) < 0 ||
				     (rc = grow((void **)&m->wire[1], &m->wcap[1], wmost, e)) < 0)))
		return rc;
#define OFF(k) (n * (size_t)(k) / (size_t)p)
#define LEN(k) (OFF((k) + 1) - OFF(k))
	uint64_t seq = m->seq++, sent = 0;
	int tag = (int)(seq & 0x7fff);
	int out = 0; /* wire[out]: the message going out in an allgather step */
	for (int s = 0; s < 2 * (p - 1); s++) {
		int rs = s < p - 1; /* reduce-scatter, then allgather */
		if (!(phases & (rs ? RING_RS : RING_AG)))
			continue;
		int t = rs ? s : s - (p - 1);
		int ks = ((rs ? r - t : r + 1 - t) % p + p) % p; /* the chunk sent */
		int kr = ((rs ? r - t - 1 : r - t) % p + p) % p; /* the chunk received */
		size_t ls = LEN(ks), lr = LEN(kr);
		float *sx = buf + OFF(ks), *rx = buf + OFF(kr);
		unsigned char *win = wire == DP_WIRE_F32 ? NULL : m->wire[!out];
		unsigned char *wout = wire == DP_WIRE_F32 ? NULL : m->wire[out];
		int nr = 0, ns = 0;
		/* receives, then sends, every message of the step */
		for (size_t o = 0, at = 0; o < lr; o += seg) {
			size_t len = lr - o < seg ? lr - o : seg, b = msg_bytes(wire, len);
			void *into = wire != DP_WIRE_F32 ? (void *)(win + at)
				     : rs			? (void *)((float *)m->tmp + o)
								: (void *)(rx + o);
			if ((rc = MPI_Irecv(into, (int)b, MPI_BYTE, left, tag, g->comm, &m->rq[nr++])) !=
			    MPI_SUCCESS)
				return mpierr(rc, what, e);
			at += b;
		}
		if (rs && wire != DP_WIRE_F32) {
			/* this step's partial sums, rounded for the wire */
			for (size_t o = 0, at = 0; o < ls; o += seg) {
				size_t len = ls - o < seg ? ls - o : seg;
				encode(wire, sx + o, len, wout + at, m->tmp);
				at += msg_bytes(wire, len);
			}
		}
		for (size_t o = 0, at = 0; o < ls; o += seg) {
			size_t len = ls - o < seg ? ls - o : seg, b = msg_bytes(wire, len);
			const void *from = wire == DP_WIRE_F32 ? (const void *)(sx + o) : (const void *)(wout + at);
			if ((rc = MPI_Isend(from, (int)b, MPI_BYTE, right, tag, g->comm,
					    &m->rq[nr + ns++])) != MPI_SUCCESS)
				return mpierr(rc, what, e);
			at += b;
			sent += b;
		}
		/* each message as it lands: added (reduce-scatter) or decoded */
		for (size_t o = 0, at = 0, j = 0; o < lr; o += seg, j++) {
			size_t len = lr - o < seg ? lr - o : seg;
			if ((rc = wait_all(c, &m->rq[j], 1, seq, what, e)) < 0)
				return rc;
			float *d = rx + o;
			if (rs) {
				/* in the fp32 wire, the float32 scratch is where it landed */
				float *a = (float *)m->tmp + (wire == DP_WIRE_F32 ? o : 0);
				if (wire != DP_WIRE_F32)
					decode(wire, win + at, len, a);
				for (size_t i = 0; i < len; i++)
					d[i] = a[i] + d[i];
			} else if (wire != DP_WIRE_F32) {
				decode(wire, win + at, len, d);
			}
			at += msg_bytes(wire, len);
		}
		if ((rc = wait_all(c, m->rq + nr, ns, seq, what, e)) < 0)
			return rc;
		if (wire != DP_WIRE_F32 && s == p - 2) {
			/* chunk kr is complete here: round it as the others
			 * will see it, and send those bytes on */
			for (size_t o = 0, at = 0; o < lr; o += seg) {
				size_t len = lr - o < seg ? lr - o : seg;
				encode(wire, rx + o, len, m->wire[0] + at, m->tmp);
				decode(wire, m->wire[0] + at, len, rx + o);
				at += msg_bytes(wire, len);
			}
			out = 0;
		} else if (!rs) {
			out = !out; /* what came in goes out next */
		}
	}
#undef OFF
#undef LEN
	pthread_mutex_lock(&c->smu);
	c->st.wire_bytes += sent;
	if (g->cross)
		c->st.cross_bytes += sent;
	pthread_mutex_unlock(&c->smu);
	return DP_OK;
}

/* Hierarchical (Horovod's, NCCL's): a reduce-scatter within each host
 * (shared memory, float32) leaves local rank i with the host's sum of
 * chunk i+1; the ranks of the same local index on every host then sum
 * that chunk between the hosts, L rings side by side (the wire's format
 * here), and an allgather within each host shares the chunks back.  A
 * host sends 2 (h-1)/h of the gradient across, spread over its L ranks.
 * Every host must hold the same number of ranks (hier_ok). */
static int hier_allreduce(dp_comm *c, float *buf, size_t n, const char *what, dp_err *e)
{
	struct comm_mpi *m = c->mpi;
	int L = m->lsize, k = (m->lrank + 1) % L;
	size_t lo = n * (size_t)k / (size_t)L, hi = n * (size_t)(k + 1) / (size_t)L;
	ring local = {m->local, m->lrank, L, 0}, cross = {m->cross, 0, m->nhosts, 1};
	MPI_Comm_rank(m->cross, &cross.r);
	int rc = ring_allreduce(c, &local, buf, n, DP_WIRE_F32, RING_RS, what, e);
	if (rc == DP_OK)
		rc = ring_allreduce(c, &cross, buf + lo, hi - lo, c->conf.wire, RING_ALL, what, e);
	if (rc == DP_OK)
		rc = ring_allreduce(c, &local, buf, n, DP_WIRE_F32, RING_AG, what, e);
	return rc;
}

/* The MPI library's reduce-scatter and allgather: each chunk summed on
 * one rank, so every rank still gets the same bits. */
static int mpi_allreduce(dp_comm *c, float *buf, size_t n, const char *what, dp_err *e)
{
	struct comm_mpi *m = c->mpi;
	int p = c->size, r = c->rank, rc;
	if (n / (size_t)p + 1 > INT_MAX)
		return dp_seterr(e, DP_ELIMIT, "%s: %zu floats: too many for one allreduce", what, n);
	int *cnt = malloc(2 * (size_t)p * sizeof *cnt);
	if (!cnt)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	int *dsp = cnt + p;
	for (int k = 0; k < p; k++) {
		dsp[k] = (int)(n * (size_t)k / (size_t)p);
		cnt[k] = (int)(n * (size_t)(k + 1) / (size_t)p) - dsp[k];
	}
	uint64_t seq = m->seq++;
	MPI_Request q;
	if ((rc = grow((void **)&m->tmp, &m->tcap, ((size_t)cnt[r] + 1) * sizeof(float), e)) == DP_OK) {
		int mr = MPI_Ireduce_scatter(buf, m->tmp, cnt, MPI_FLOAT, MPI_SUM, m->world, &q);
		rc = mr != MPI_SUCCESS ? mpierr(mr, what, e) : wait_all(c, &q, 1, seq, what, e);
	}
	if (rc == DP_OK) {
		memcpy(buf + dsp[r], m->tmp, (size_t)cnt[r] * sizeof(float));
		int mr = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, cnt, dsp, MPI_FLOAT,
					 m->world, &q);
		rc = mr != MPI_SUCCESS ? mpierr(mr, what, e) : wait_all(c, &q, 1, seq, what, e);
	}
	free(cnt);
	if (rc == DP_OK) {
		uint64_t b = (uint64_t)(2 * (n - n / (size_t)p) * sizeof(float)); /* nominal */
		pthread_mutex_lock(&c->smu);
		c->st.wire_bytes += b;
		pthread_mutex_unlock(&c->smu);
	}
	return rc;
}

static void busy_add(dp_comm *c, double t0, double t1)
{
	pthread_mutex_lock(&c->smu);
	c->st.busy_time += t1 - t0;
	pthread_mutex_unlock(&c->smu);
}

/* Sum one bucket, timed; on the thread tid. */
static int reduce_job(dp_comm *c, const job *j, int tid, dp_err *e)
{
	struct comm_mpi *m = c->mpi;
	double t0 = dp_now();
	float *buf = j->buf + j->lo;
	size_t n = j->hi - j->lo;
	int rc;
	if (c->conf.algo == DP_ALLREDUCE_MPI) {
		rc = mpi_allreduce(c, buf, n, "gradients", e);
	} else if (c->conf.algo == DP_ALLREDUCE_HIER && m->hier_ok) {
		rc = hier_allreduce(c, buf, n, "gradients", e);
	} else {
		int r = c->rank, p = c->size;
		ring g = {m->world, r, p, m->host_of[(r + 1) % p] != m->host_of[r]};
		rc = ring_allreduce(c, &g, buf, n, c->conf.wire, RING_ALL, "gradients", e);
	}
	double t1 = dp_now();
	dp_comm_event(c, "allreduce", tid, t0, t1);
	busy_add(c, t0, t1);
	return rc;
}

/* The communication thread: sums the buckets of a step in the order they
 * were queued, as each arrives. */
static void *comm_thread(void *arg)
{
	dp_comm *c = arg;
	struct comm_mpi *m = c->mpi;
	pthread_mutex_lock(&m->mu);
	for (;;) {
		if (m->quit)
			break;
		if (m->done == m->qn) {
			pthread_cond_broadcast(&m->dcv);
			pthread_cond_wait(&m->cv, &m->mu);
			continue;
		}
		job j = m->q[m->done];
		pthread_mutex_unlock(&m->mu);
		dp_err e;
		int rc = m->status < 0 ? DP_OK : reduce_job(c, &j, 2, &e);
		pthread_mutex_lock(&m->mu);
		if (rc < 0 && m->status >= 0) {
			/* the step failed: the caller dies or aborts the job */
			m->status = rc;
			m->err = e;
		}
		m->done++;
	}
	pthread_mutex_unlock(&m->mu);
	return NULL;
}

int comm_mpi_configure(dp_comm *c, dp_err *e)
{
	struct comm_mpi *m = c->mpi;
	int want = c->conf.overlap && c->size > 1 && m->thread_ok;
	if (want && !m->running) {
		int rc = dp_thread_create(&m->th, comm_thread, c);
		if (rc) {
			errno = rc;
			return dp_syserr(e, "communication thread");
		}
		m->running = 1;
	} else if (!want && m->running) {
		stop_thread(m);
	}
	return DP_OK;
}

int comm_mpi_grads_busy(dp_comm *c)
{
	struct comm_mpi *m = c->mpi;
	if (!m->running)
		return 0;
	pthread_mutex_lock(&m->mu);
	int busy = m->done < m->qn;
	pthread_mutex_unlock(&m->mu);
	return busy;
}

int comm_mpi_grads_submit(dp_comm *c, float *buf, size_t lo, size_t hi, dp_err *e)
{
	struct comm_mpi *m = c->mpi;
	job j = {.buf = buf, .lo = lo, .hi = hi};
	/* from the hook, or with buckets still queued: to the thread (in
	 * order); else at once in this thread, with no hand-over */
	if (!m->running || (!c->in_step && !comm_mpi_grads_busy(c)))
		return reduce_job(c, &j, 1, e);
	pthread_mutex_lock(&m->mu);
	if (m->qn == m->qcap) {
		size_t nc = m->qcap ? 2 * m->qcap : 16;
		job *q = realloc(m->q, nc * sizeof *q); /* the thread copies jobs out under the lock */
		if (!q) {
			pthread_mutex_unlock(&m->mu);
			return dp_seterr(e, DP_ENOMEM, "out of memory");
		}
		m->q = q;
		m->qcap = nc;
	}
	m->q[m->qn++] = j;
	pthread_cond_signal(&m->cv);
	pthread_mutex_unlock(&m->mu);
	return DP_OK;
}

int comm_mpi_grads_drain(dp_comm *c, dp_err *e)
{
	struct comm_mpi *m = c->mpi;
	if (!m->running)
		return DP_OK;
	pthread_mutex_lock(&m->mu);
	while (m->done < m->qn)
		pthread_cond_wait(&m->dcv, &m->mu);
	int rc = m->status;
	if (rc < 0 && e)
		*e = m->err;
	m->status = 0;
	m->qn = m->done = 0;
	pthread_mutex_unlock(&m->mu);
	return rc;
}
