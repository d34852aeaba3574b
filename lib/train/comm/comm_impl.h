/*
 * comm_impl.h - private to lib/train/comm/: the dp_comm object and the
 * calls of the MPI side (mpi.c) and the NCCL side (nccl.c).  Not installed.
 *
 * comm.c holds the public API (dp_comm.h), the single-process job, the
 * gradient buckets and the timeline; the mpi*.c files every call into MPI
 * (mpi.c opening, closing and the blocking collectives, mpi_wait.c the
 * polled waits and the stall inspector, mpi_p2p.c point-to-point
 * messages, mpi_grads.c the gradient sums), so a program that never
 * opens a dp_comm links no MPI code from libdp.a.
 */
#ifndef DP_COMM_IMPL_H
#define DP_COMM_IMPL_H

#include "dp_comm.h"

#include <mpi.h>
#include <pthread.h>

typedef struct comm_event {
	const char *name;
	int tid;
	double t0, t1;
} comm_event;

struct comm_mpi;  /* mpi.c */
struct comm_nccl; /* nccl.c */

struct dp_comm {
	const dp_backend *be;
	dp_bectx *ctx;
	int rank, size;
	int host; /* backend memory is host memory: no staging */
	char desc[160];
	char lib[104]; /* the MPI library */
	dp_comm_conf conf;
	/* the gradient step in progress */
	float *grads;  /* (dev) */
	float *hgrads; /* host copy when staging, hcap floats */
	size_t hcap;
	size_t n;
	size_t ready;   /* [ready, n) reported ready */
	size_t flushed; /* [flushed, n) handed to the reduction */
	int in_step;
	double t_begin;
	dp_comm_stats st;
	pthread_mutex_t smu; /* st.busy_time, written by the communication thread */
	/* timeline */
	int trace;
	double t0;
	pthread_mutex_t tmu;
	comm_event *ev;
	size_t nev, cap;
	struct comm_mpi *mpi; /* NULL: a job of one */
	struct comm_nccl *nccl; /* gradients GPU to GPU; NULL: staged through the host */
};

/* Reports (stall warnings) through conf.report. */
#define comm_report(c, ...) dp_msgf((c)->conf.report, (c)->conf.report_ctx, __VA_ARGS__)

/* ---- mpi*.c: what comm.c calls ---- */
enum { COMM_F32 = 1, COMM_F64 = 2, COMM_BYTE = 3 };

/* MPI_Init_thread; sets c->rank, c->size, c->desc, c->lib. */
int comm_mpi_open(dp_comm *c, dp_err *e);
void comm_mpi_close(dp_comm *c);
void comm_mpi_abort(dp_comm *c, int code) __attribute__((noreturn));
/* Start or stop the communication thread as c->conf says. */
int comm_mpi_configure(dp_comm *c, dp_err *e);
/* Blocking collectives of the calling thread (host memory).  `what`
 * names the operation in stall reports. */
int comm_mpi_allreduce_sum(dp_comm *c, void *buf, size_t n, int type, const char *what,
			   dp_err *e);
int comm_mpi_bcast(dp_comm *c, void *buf, size_t bytes, int root, const char *what, dp_err *e);
int comm_mpi_allgather(dp_comm *c, const void *mine, void *all, size_t bytes, const char *what,
		       dp_err *e);
/* Worker 0 receives every worker's `len` bytes at `mine`: *all (malloc'd,
 * concatenated in rank order) and lens[size]; others get *all = NULL. */
int comm_mpi_gather(dp_comm *c, const void *mine, size_t len, char **all, size_t *lens,
		    const char *what, dp_err *e);
/* A group of parent's job (dp_comm_split): c's MPI side, from parent's. */
int comm_mpi_split(dp_comm *parent, dp_comm *c, int color, int key, dp_err *e);
/* Point to point: send takes copy (malloc'd, bytes long: freed once
 * sent, or on failure); recv waits for exactly bytes (polled); send_wait
 * waits for every send to be done (e NULL, closing: frees those that are
 * done and leaves the rest). */
int comm_mpi_send(dp_comm *c, void *copy, size_t bytes, int to, int tag, dp_err *e);
int comm_mpi_recv(dp_comm *c, void *buf, size_t bytes, int from, int tag, const char *what,
		  dp_err *e);
int comm_mpi_send_wait(dp_comm *c, dp_err *e);
/* Gradients: sum floats [lo, hi) of buf (host) in place, in the
 * background when the communication thread runs, else at once. */
int comm_mpi_grads_submit(dp_comm *c, float *buf, size_t lo, size_t hi, dp_err *e);
/* Wait for everything submitted this step. */
int comm_mpi_grads_drain(dp_comm *c, dp_err *e);
/* 1 while the communication thread has work of this step. */
int comm_mpi_grads_busy(dp_comm *c);

/* ---- the mpi*.c files' own ---- */

typedef struct comm_job {
	float *buf;
	size_t lo, hi;
} comm_job;

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
	comm_job *q;
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

/* e set to "what: MPI: the library's message" (DP_EIO), returned. */
int comm_mpi_err(int code, const char *what, dp_err *e);
/* Poll test(arg, e) until it says done (1) or fails (< 0, returned),
 * backing off and running the stall inspector for the collective seq
 * (mpi_wait.c). */
int comm_mpi_poll(dp_comm *c, uint64_t seq, const char *what, int (*test)(void *arg, dp_err *e),
		  void *arg, dp_err *e);
/* Complete n requests of the collective seq, polled. */
int comm_mpi_wait_all(dp_comm *c, MPI_Request *r, int n, uint64_t seq, const char *what, dp_err *e);
/* Read the stall announcements that have arrived. */
void comm_mpi_listen(dp_comm *c);
/* Stop the communication thread, if it runs. */
void comm_mpi_thread_stop(struct comm_mpi *m);

/* ---- nccl.c (BACKEND=cuda with NCCL; stubs otherwise) ----
 * open: after comm_mpi_open; sets c->nccl when every rank has a GPU of its
 * own and NCCL is allowed, else leaves the host path (and says which in
 * c->desc).  The rest are called only when c->nccl is set: buffers are
 * (dev), work is queued in order with the backend's stream. */
int comm_nccl_open(dp_comm *c, dp_err *e);
void comm_nccl_close(dp_comm *c);
int comm_nccl_submit(dp_comm *c, float *buf, size_t lo, size_t hi, dp_err *e);
int comm_nccl_drain(dp_comm *c, dp_err *e);
int comm_nccl_allreduce_mean(dp_comm *c, float *buf, size_t n, dp_err *e);
int comm_nccl_bcast(dp_comm *c, void *buf, size_t bytes, int root, dp_err *e);

#endif
