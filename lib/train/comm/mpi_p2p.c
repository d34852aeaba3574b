/*
 * mpi_p2p.c - point-to-point messages over MPI (comm_impl.h): dp_comm_send,
 * dp_comm_recv.
 *
 * Messages of a pipeline: each send's bytes are copied out and sent with
 * MPI_Isend, so a rank that sends goes on at once (two neighbours sending
 * to each other never wait on each other, whatever MPI's eager limit); the
 * copies are freed as their sends complete, tested at every send and
 * receive.  A message is one MPI message (of floats: 8 GiB at most).
 */
#define _GNU_SOURCE
#include "comm_impl.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

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
		return comm_mpi_err(rc, "send", e);
	}
	m->sbuf[m->ns++] = copy;
	return DP_OK;
}

typedef struct arrival {
	struct comm_mpi *m;
	MPI_Request r;
	MPI_Status st;
	size_t bytes;
	const char *what;
} arrival;

/* The receive done (1), not yet (0), or failed; the sends done freed. */
static int arrived(void *arg, dp_err *e)
{
	arrival *a = arg;
	int flag = 0, rc;
	reap_sends(a->m);
	memset(&a->st, 0, sizeof a->st);
	if ((rc = MPI_Test(&a->r, &flag, &a->st)) != MPI_SUCCESS) {
		int cls = 0;
		MPI_Error_class(rc, &cls);
		if (cls == MPI_ERR_TRUNCATE)
			return dp_seterr(e, DP_EDATA, "%s: a message longer than the %zu bytes "
					 "expected", a->what, a->bytes);
		return comm_mpi_err(rc, a->what, e);
	}
	return flag;
}

int comm_mpi_recv(dp_comm *c, void *buf, size_t bytes, int from, int tag, const char *what,
		  dp_err *e)
{
	struct comm_mpi *m = c->mpi;
	MPI_Datatype t;
	arrival a = {.m = m, .bytes = bytes, .what = what};
	int count, rc;
	if (!msg_type(bytes, &t, &count))
		return dp_seterr(e, DP_ELIMIT, "%s: a message of %zu bytes: too long", what, bytes);
	if ((rc = MPI_Irecv(buf, count, t, from, tag, m->p2p, &a.r)) != MPI_SUCCESS)
		return comm_mpi_err(rc, what, e);
	if ((rc = comm_mpi_poll(c, m->seq, what, arrived, &a, e)) < 0)
		return rc;
	int got = 0;
	MPI_Get_count(&a.st, t, &got);
	if (got != count)
		return dp_seterr(e, DP_EDATA, "%s: %zu bytes, not the %zu expected", what,
				 (size_t)got * (t == MPI_FLOAT ? 4 : 1), bytes);
	return DP_OK;
}

int comm_mpi_send_wait(dp_comm *c, dp_err *e)
{
	struct comm_mpi *m = c->mpi;
	if (!e) {
		reap_sends(m);
		return DP_OK;
	}
	if (m->ns) {
		int rc = comm_mpi_wait_all(c, m->sreq, (int)m->ns, m->seq, "sending to the next stages", e);
		if (rc < 0)
			return rc;
	}
	for (size_t i = 0; i < m->ns; i++)
		free(m->sbuf[i]);
	m->ns = 0;
	return DP_OK;
}
