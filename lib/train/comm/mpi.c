/*
 * mpi.c - the MPI side of dp_comm (comm_impl.h): opening and closing a
 * job, and the blocking collectives (small sums, broadcasts, gathers:
 * MPI's non-blocking collectives, polled).  Every call into MPI is in the
 * mpi*.c files (Open MPI; any MPI-3 library should do): this one,
 * mpi_wait.c (polling and the stall inspector), mpi_p2p.c (point-to-point
 * messages), mpi_grads.c (gradient sums and the communication thread).
 *
 * Threads: MPI is initialised MPI_THREAD_SERIALIZED.  The caller's thread
 * makes the blocking collectives; the communication thread (started when
 * overlap is on) sums gradient buckets during the backward pass.  The two
 * never call MPI at the same time: the caller's thread calls MPI only
 * when the communication thread has no work (it waits for it to drain
 * first), and hands work over under a mutex.
 *
 * Collectives are started in the same order on every rank (the rule of
 * MPI), numbered by `seq`; the numbers tell announcements of the current
 * stall from stale ones, and tag the ring's messages.
 */
#define _GNU_SOURCE
#include "comm_impl.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHUNK (1 << 28) /* elements per MPI call: counts are ints */

int comm_mpi_err(int code, const char *what, dp_err *e)
{
	char s[MPI_MAX_ERROR_STRING];
	int len = 0;
	if (MPI_Error_string(code, s, &len) != MPI_SUCCESS)
		snprintf(s, sizeof s, "error %d", code);
	return dp_seterr(e, DP_EIO, "%s: MPI: %.*s", what, len, s);
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
		return comm_mpi_err(rc, "MPI_Comm_split_type", e);
	MPI_Comm_rank(m->local, &m->lrank);
	MPI_Comm_size(m->local, &m->lsize);
	int lowest = c->rank;
	if ((rc = MPI_Allreduce(MPI_IN_PLACE, &lowest, 1, MPI_INT, MPI_MIN, m->local)) != MPI_SUCCESS)
		return comm_mpi_err(rc, "hosts", e);
	if (!(m->host_of = malloc((size_t)c->size * sizeof *m->host_of)))
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	if ((rc = MPI_Allgather(&lowest, 1, MPI_INT, m->host_of, 1, MPI_INT, m->world)) != MPI_SUCCESS)
		return comm_mpi_err(rc, "hosts", e);
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
		return comm_mpi_err(rc, "MPI_Comm_split", e);
	int most = m->lsize, least = m->lsize;
	if ((rc = MPI_Allreduce(MPI_IN_PLACE, &most, 1, MPI_INT, MPI_MAX, m->world)) != MPI_SUCCESS ||
	    (rc = MPI_Allreduce(MPI_IN_PLACE, &least, 1, MPI_INT, MPI_MIN, m->world)) != MPI_SUCCESS)
		return comm_mpi_err(rc, "hosts", e);
	m->hier_ok = m->nhosts > 1 && most == least && most > 1;
	c->st.hosts = m->nhosts;
	return DP_OK;
}

static int join(dp_comm *c, dp_err *e);

int comm_mpi_open(dp_comm *c, dp_err *e)
{
	int inited = 0, prov = 0, rc;
	MPI_Initialized(&inited);
	if (!inited && (rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &prov)) != MPI_SUCCESS)
		return comm_mpi_err(rc, "MPI_Init", e);
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
		return comm_mpi_err(rc, "MPI_Comm_dup", e);
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
		return comm_mpi_err(rc, "MPI_Comm_dup", e);
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
		return comm_mpi_err(rc, "MPI_Comm_split", e);
	snprintf(c->lib, sizeof c->lib, "%s", parent->lib);
	if ((rc = join(c, e)) < 0)
		return rc;
	snprintf(c->desc, sizeof c->desc, "%.100s, a group of %d rank%s", c->lib, c->size,
		 c->size == 1 ? "" : "s");
	return comm_mpi_configure(c, e);
}

void comm_mpi_close(dp_comm *c)
{
	struct comm_mpi *m = c->mpi;
	comm_mpi_thread_stop(m);
	if (m->world != MPI_COMM_NULL && m->ctl != MPI_COMM_NULL) {
		/* everyone here (a polled barrier: a rank that never comes is
		 * reported), then the announcements nobody read */
		MPI_Request r;
		dp_err e;
		if (MPI_Ibarrier(m->world, &r) == MPI_SUCCESS &&
		    comm_mpi_wait_all(c, &r, 1, m->seq++, "the end of the job", &e) < 0) {
			comm_report(c, "%s", e.msg); /* --stall-abort: MPI_Finalize would hang */
			comm_mpi_abort(c, 1);
		}
		comm_mpi_listen(c);
	}
	comm_mpi_send_wait(c, NULL);
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
			return comm_mpi_err(rc, what, e);
		if ((rc = comm_mpi_wait_all(c, &r, 1, m->seq++, what, e)) < 0)
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
			return comm_mpi_err(rc, what, e);
		if ((rc = comm_mpi_wait_all(c, &r, 1, m->seq++, what, e)) < 0)
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
		return comm_mpi_err(rc, what, e);
	return comm_mpi_wait_all(c, &r, 1, m->seq++, what, e);
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
		rc = comm_mpi_err(mr, what, e);
	else
		rc = comm_mpi_wait_all(c, &r, 1, m->seq++, what, e);
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
