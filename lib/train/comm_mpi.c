/*
 * comm_mpi.c - the MPI side of dp_comm (comm_impl.h): every call into MPI
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
	m->thread_ok = prov >= MPI_THREAD_SERIALIZED;
	pthread_mutex_init(&m->mu, NULL);
	pthread_cond_init(&m->cv, NULL);
	pthread_cond_init(&m->dcv, NULL);
	if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &m->world)) != MPI_SUCCESS ||
	    (rc = MPI_Comm_dup(MPI_COMM_WORLD, &m->ctl)) != MPI_SUCCESS)
		return mpierr(rc, "MPI_Comm_dup", e);
	MPI_Comm_set_errhandler(m->world, MPI_ERRORS_RETURN);
	MPI_Comm_set_errhandler(m->ctl, MPI_ERRORS_RETURN);
	MPI_Comm_rank(m->world, &c->rank);
	MPI_Comm_size(m->world, &c->size);
	if (!(m->heard = malloc((size_t)c->size * sizeof *m->heard)))
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	for (int r = 0; r < c->size; r++)
		m->heard[r] = -1;
	char v[MPI_MAX_LIBRARY_VERSION_STRING];
	int vl = 0;
	MPI_Get_library_version(v, &vl);
	v[strcspn(v, ",\n")] = 0;
	snprintf(c->lib, sizeof c->lib, "%.100s", v);
	snprintf(c->desc, sizeof c->desc, "%.100s, %d rank%s", v, c->size, c->size == 1 ? "" : "s");
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
	if (m->world != MPI_COMM_NULL)
		MPI_Comm_free(&m->world);
	if (m->ctl != MPI_COMM_NULL)
		MPI_Comm_free(&m->ctl);
	int fin = 0;
	MPI_Finalized(&fin);
	if (!fin)
		MPI_Finalize();
	pthread_mutex_destroy(&m->mu);
	pthread_cond_destroy(&m->cv);
	pthread_cond_destroy(&m->dcv);
	free(m->heard);
	free(m->q);
	free(m->tmp);
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

/* ---- gradients ----------------------------------------------------------------------- */

/* Sum n floats in place over the ranks: a ring (reduce-scatter, then
 * allgather) over point-to-point messages, polled like every wait.
 * Rank r's chunk k travels r -> r+1 -> ... and is added in that fixed
 * order; each chunk's sum is made on one rank and copied to the others,
 * so the result is bit-identical on every rank and from run to run.
 * Each rank sends and receives 2 (p-1)/p of the buffer, the least any
 * allreduce can (Open MPI's non-blocking allreduce of one buffer in place
 * goes through a binomial tree, 1.5 to 2.5 times slower here). */
static int ring_allreduce(dp_comm *c, float *buf, size_t n, const char *what, dp_err *e)
{
	struct comm_mpi *m = c->mpi;
	int p = c->size, r = c->rank, right = (r + 1) % p, left = (r + p - 1) % p;
	if (n / (size_t)p + 1 > INT_MAX)
		return dp_seterr(e, DP_ELIMIT, "%s: %zu floats: too many for one allreduce", what, n);
	size_t most = n / (size_t)p + 1;
	if (most > m->tcap) {
		float *t = realloc(m->tmp, most * sizeof *t);
		if (!t)
			return dp_seterr(e, DP_ENOMEM, "out of memory for %zu floats", most);
		m->tmp = t;
		m->tcap = most;
	}
#define OFF(k) (n * (size_t)(k) / (size_t)p)
#define LEN(k) ((int)(OFF((k) + 1) - OFF(k)))
	uint64_t seq = m->seq++;
	int tag = (int)(seq & 0x7fff);
	for (int s = 0; s < 2 * (p - 1); s++) {
		int rs = s < p - 1; /* reduce-scatter, then allgather */
		int t = rs ? s : s - (p - 1);
		int ks = ((rs ? r - t : r + 1 - t) % p + p) % p; /* the chunk sent */
		int kr = ((rs ? r - t - 1 : r - t) % p + p) % p; /* the chunk received */
		MPI_Request q[2];
		float *into = rs ? m->tmp : buf + OFF(kr);
		int rc = MPI_Irecv(into, LEN(kr), MPI_FLOAT, left, tag, m->world, &q[0]);
		if (rc == MPI_SUCCESS)
			rc = MPI_Isend(buf + OFF(ks), LEN(ks), MPI_FLOAT, right, tag, m->world, &q[1]);
		if (rc != MPI_SUCCESS)
			return mpierr(rc, what, e);
		if ((rc = wait_all(c, q, 2, seq, what, e)) < 0)
			return rc;
		if (rs) {
			float *d = buf + OFF(kr);
			const float *a = m->tmp;
			for (int i = 0, len = LEN(kr); i < len; i++)
				d[i] = a[i] + d[i];
		}
	}
#undef OFF
#undef LEN
	return DP_OK;
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
	double t0 = dp_now();
	int rc = ring_allreduce(c, j->buf + j->lo, j->hi - j->lo, "gradients", e);
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
