/*
 * mpi_wait.c - the MPI side's waiting (comm_impl.h): every request is
 * completed by polling, and the stall inspector lives in that loop.
 *
 * Polling: spin for a few microseconds, then sched_yield (a busy core is
 * handed to whoever needs it, the other threads of this process or an
 * oversubscribed peer), then short sleeps.  Once a wait passes `announce`
 * seconds the rank tells the others (a message on a communicator of its
 * own: rank and the number of the collective), once it passes
 * conf.stall_warn the lowest waiting rank reports the ranks it has not
 * heard from, again every stall_warn seconds; after conf.stall_abort the
 * wait fails.  Collectives are numbered by `seq` (mpi.c): the numbers
 * tell announcements of the current stall from stale ones.
 */
#define _GNU_SOURCE
#include "comm_impl.h"

#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <time.h>

#define TAG_STALL 7

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
void comm_mpi_listen(dp_comm *c)
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
	comm_mpi_listen(c);
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

int comm_mpi_poll(dp_comm *c, uint64_t seq, const char *what, int (*test)(void *arg, dp_err *e),
		  void *arg, dp_err *e)
{
	int rc = test(arg, e);
	if (rc)
		return rc < 0 ? rc : DP_OK;
	poll_state p;
	poll_start(c, &p, seq, what);
	while (!(rc = test(arg, e)))
		if ((rc = poll_idle(c, &p, e)) < 0)
			return rc;
	if (rc < 0)
		return rc;
	poll_end(c, &p);
	return DP_OK;
}

typedef struct requests {
	MPI_Request *r;
	int n;
	const char *what;
} requests;

static int all_done(void *arg, dp_err *e)
{
	requests *q = arg;
	int flag = 0, rc = MPI_Testall(q->n, q->r, &flag, MPI_STATUSES_IGNORE);
	return rc != MPI_SUCCESS ? comm_mpi_err(rc, q->what, e) : flag;
}

int comm_mpi_wait_all(dp_comm *c, MPI_Request *r, int n, uint64_t seq, const char *what, dp_err *e)
{
	requests q = {r, n, what};
	return comm_mpi_poll(c, seq, what, all_done, &q, e);
}
