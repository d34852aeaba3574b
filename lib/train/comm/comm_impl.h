/*
 * comm_impl.h - private to lib/train/comm/: the dp_comm object and the
 * calls of the MPI side (mpi.c) and the NCCL side (nccl.c).  Not installed.
 *
 * comm.c holds the public API (dp_comm.h), the single-process job, the
 * gradient buckets and the timeline; mpi.c every call into MPI, so a
 * program that never opens a dp_comm links no MPI code from libdp.a.
 */
#ifndef DP_COMM_IMPL_H
#define DP_COMM_IMPL_H

#include "dp_comm.h"

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

/* ---- mpi.c ---- */
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
 * waits for every send to be done. */
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
