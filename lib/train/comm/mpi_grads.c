/*
 * mpi_grads.c - gradients summed over MPI (comm_impl.h): the ring
 * allreduce, its hierarchical form, MPI's own, and the communication
 * thread that sums buckets while the backward pass goes on.
 *
 * The ring (ring_allreduce) runs over point-to-point messages: the fewest
 * bytes per rank, a fixed order of additions (bit-identical results on
 * every rank), and every wait polled (mpi_wait.c).  Its messages are
 * tagged by the number of the collective (`seq`).
 */
#define _GNU_SOURCE
#include "comm_impl.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

/* One ring_allreduce call's constants. */
typedef struct ring_io {
	const ring *g;
	int wire, tag;
	size_t seg; /* values a message at most */
	uint64_t seq;
	const char *what;
} ring_io;

/* The len floats at x as messages of the wire (each seg values at most)
 * at out, back to back. */
static void encode_chunk(struct comm_mpi *m, const ring_io *io, const float *x, size_t len,
			 unsigned char *out)
{
	for (size_t o = 0, at = 0; o < len; o += io->seg) {
		size_t k = len - o < io->seg ? len - o : io->seg;
		encode(io->wire, x + o, k, out + at, m->tmp);
		at += msg_bytes(io->wire, k);
	}
}

/* Post the receives of a step's chunk: lr values from the left
 * neighbour, float32 into f32 or wire messages into win; their requests
 * first in m->rq.  Returns how many. */
static int post_recvs(dp_comm *c, const ring_io *io, float *f32, unsigned char *win, size_t lr,
		      dp_err *e)
{
	struct comm_mpi *m = c->mpi;
	const ring *g = io->g;
	int left = (g->r + g->p - 1) % g->p, nr = 0, rc;
	for (size_t o = 0, at = 0; o < lr; o += io->seg) {
		size_t len = lr - o < io->seg ? lr - o : io->seg, b = msg_bytes(io->wire, len);
		void *into = io->wire != DP_WIRE_F32 ? (void *)(win + at) : (void *)(f32 + o);
		if ((rc = MPI_Irecv(into, (int)b, MPI_BYTE, left, io->tag, g->comm, &m->rq[nr++])) !=
		    MPI_SUCCESS)
			return comm_mpi_err(rc, io->what, e);
		at += b;
	}
	return nr;
}

/* Post the sends of a step's chunk: ls values to the right neighbour,
 * float32 from sx or the wire messages at wout; their requests in m->rq
 * after the nr receives.  Returns how many; *sent counts the bytes. */
static int post_sends(dp_comm *c, const ring_io *io, const float *sx, const unsigned char *wout,
		      size_t ls, int nr, uint64_t *sent, dp_err *e)
{
	struct comm_mpi *m = c->mpi;
	const ring *g = io->g;
	int right = (g->r + 1) % g->p, ns = 0, rc;
	for (size_t o = 0, at = 0; o < ls; o += io->seg) {
		size_t len = ls - o < io->seg ? ls - o : io->seg, b = msg_bytes(io->wire, len);
		const void *from = io->wire == DP_WIRE_F32 ? (const void *)(sx + o)
							   : (const void *)(wout + at);
		if ((rc = MPI_Isend(from, (int)b, MPI_BYTE, right, io->tag, g->comm,
				    &m->rq[nr + ns++])) != MPI_SUCCESS)
			return comm_mpi_err(rc, io->what, e);
		at += b;
		*sent += b;
	}
	return ns;
}

/* Each of a step's received messages as it lands (lr values): added to
 * rx (reduce-scatter, rs) or decoded into it (allgather). */
static int land_step(dp_comm *c, const ring_io *io, int rs, const unsigned char *win, float *rx,
		     size_t lr, dp_err *e)
{
	struct comm_mpi *m = c->mpi;
	int wire = io->wire, rc;
	for (size_t o = 0, at = 0, j = 0; o < lr; o += io->seg, j++) {
		size_t len = lr - o < io->seg ? lr - o : io->seg;
		if ((rc = comm_mpi_wait_all(c, &m->rq[j], 1, io->seq, io->what, e)) < 0)
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
	return DP_OK;
}

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
	ring_io io = {g, wire, (int)(seq & 0x7fff), seg, seq, what};
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
		/* receives, then sends, every message of the step */
		int nr = post_recvs(c, &io, rs ? m->tmp : rx, win, lr, e), ns;
		if (nr < 0)
			return nr;
		if (rs && wire != DP_WIRE_F32) /* this step's partial sums, rounded for the wire */
			encode_chunk(m, &io, sx, ls, wout);
		if ((ns = post_sends(c, &io, sx, wout, ls, nr, &sent, e)) < 0)
			return ns;
		if ((rc = land_step(c, &io, rs, win, rx, lr, e)) < 0 ||
		    (rc = comm_mpi_wait_all(c, m->rq + nr, ns, seq, what, e)) < 0)
			return rc;
		if (wire != DP_WIRE_F32 && s == p - 2) {
			/* chunk kr is complete here: round it as the others
			 * will see it, and send those bytes on */
			encode_chunk(m, &io, rx, lr, m->wire[0]);
			for (size_t o = 0, at = 0; o < lr; o += seg) {
				size_t len = lr - o < seg ? lr - o : seg;
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
		rc = mr != MPI_SUCCESS ? comm_mpi_err(mr, what, e) : comm_mpi_wait_all(c, &q, 1, seq, what, e);
	}
	if (rc == DP_OK) {
		memcpy(buf + dsp[r], m->tmp, (size_t)cnt[r] * sizeof(float));
		int mr = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, cnt, dsp, MPI_FLOAT,
					 m->world, &q);
		rc = mr != MPI_SUCCESS ? comm_mpi_err(mr, what, e) : comm_mpi_wait_all(c, &q, 1, seq, what, e);
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
static int reduce_job(dp_comm *c, const comm_job *j, int tid, dp_err *e)
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

void comm_mpi_thread_stop(struct comm_mpi *m)
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
		comm_job j = m->q[m->done];
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
		comm_mpi_thread_stop(m);
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
	comm_job j = {.buf = buf, .lo = lo, .hi = hi};
	/* from the hook, or with buckets still queued: to the thread (in
	 * order); else at once in this thread, with no hand-over */
	if (!m->running || (!c->in_step && !comm_mpi_grads_busy(c)))
		return reduce_job(c, &j, 1, e);
	pthread_mutex_lock(&m->mu);
	/* the thread copies jobs out under the lock: m->q may move */
	if (dp_grow(&m->q, &m->qcap, m->qn + 1, sizeof *m->q) < 0) {
		pthread_mutex_unlock(&m->mu);
		return dp_seterr(e, DP_ENOMEM, "out of memory");
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
