/*
 * dp_comm.h - what workers of a data-parallel job say to each other.
 *
 * One interface for every way of running.  A process started by an MPI
 * launcher (mpirun, srun with PMIx: dp_comm_launched()) joins the MPI job
 * (lib/train/comm/mpi.c, Open MPI); any other process is a job of one, where
 * every collective is trivial and MPI is never initialised, so a plain run
 * needs no mpirun and pays nothing for MPI.  A training step is
 *
 *     dp_comm_grads_begin(c, grads, n)          before the backward pass
 *     dp_model_backward(m, n, hook, c)          the hook calls
 *         dp_comm_grads_ready(c, off, count)    as each layer finishes,
 *                                               last layer first: start
 *                                               reducing that range
 *     dp_comm_grads_wait(c)                     all ranges summed
 *     dp_optim_step(...)
 *
 * Gradients are SUMMED over the workers, not averaged: each worker scales
 * its loss by 1 / (the global batch, all workers' samples of the step), so
 * the sum is the gradient of the mean loss over the global batch, also
 * when the workers hold different numbers of samples (the last step of an
 * epoch).  The summed buffer is bit-identical on every worker.
 *
 * Fusion and overlap: the gradient buffer is one contiguous array and
 * ranges arrive from its end to its start, so the ranges ready so far are
 * one contiguous piece: they are reduced in place, in "buckets" of at
 * least bucket_bytes (PyTorch DDP's buckets, Horovod's fusion buffer, with
 * no copy), each by a ring allreduce.  With overlap on (the default), a
 * communication thread sums each bucket while the backward pass goes on;
 * the last bucket is summed at wait().  Off, wait() sums the whole buffer
 * in one call.
 *
 * Every blocking wait polls (spinning briefly, then yielding, then
 * sleeping), so that a stalled job is reported: after stall_warn seconds
 * in one collective the ranks that are waiting tell each other, and the
 * lowest of them reports which ranks have not arrived (Horovod's stall
 * inspector); after stall_abort seconds the call fails with DP_ELIMIT.
 *
 * Buffers marked (dev) are backend memory: on a backend other than the CPU
 * one they are staged through host memory with the backend's download and
 * upload.
 */
#ifndef DP_COMM_H
#define DP_COMM_H

#include "dp.h"
#include "dp_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dp_comm dp_comm;

/* 1 when this process was started by an MPI launcher (OMPI_COMM_WORLD_SIZE,
 * PMIX_RANK or PMI_SIZE in the environment), or DP_COMM=mpi; 0 when not,
 * or DP_COMM=single.  dp_comm_open joins an MPI job only when it is 1. */
DP_EXPORT int dp_comm_launched(void);

/* Join the job (single process: rank 0 of 1).  be/ctx: the backend that
 * owns the buffers passed in later.  Under MPI this initialises MPI.
 * Fails (DP_EARG, the fix in the message) when the launcher says it
 * started several processes (OMPI_COMM_WORLD_SIZE, PMI_SIZE,
 * SLURM_STEP_NUM_TASKS) but the job has one: plain `srun -n 2`, or a PMI
 * the MPI library does not speak; unless DP_COMM=single. */
DP_EXPORT dp_comm *dp_comm_open(const dp_backend *be, dp_bectx *ctx, dp_err *e);
/* Leave the job (MPI_Finalize): a collective, every rank calls it. */
DP_EXPORT void dp_comm_close(dp_comm *c);
DP_EXPORT int dp_comm_rank(const dp_comm *c);
DP_EXPORT int dp_comm_size(const dp_comm *c);
/* "single process", "Open MPI v4.1.4, 4 ranks", ... */
DP_EXPORT const char *dp_comm_desc(const dp_comm *c);
/* The MPI library and its version ("Open MPI v4.1.4"); "none" in a job of one. */
DP_EXPORT const char *dp_comm_library(const dp_comm *c);
/* End every process of the job with exit status code (MPI_Abort; a
 * single process exits).  For a failure on one rank: its peers would wait
 * for it forever. */
DP_EXPORT void dp_comm_abort(dp_comm *c, int code) __attribute__((noreturn));

/* How gradients travel on the wire.  Sums are made in float32 whatever
 * the wire carries, in a fixed order, so every worker gets the same bits:
 * DP_WIRE_BF16 rounds each message to bfloat16 (float32's range: nothing
 * overflows); DP_WIRE_F16 to float16 after scaling each message of at
 * most 64K values by a power of two chosen from its largest magnitude, so
 * that no finite value overflows and small ones keep fp16's 11 bits. */
enum { DP_WIRE_F32 = 0, DP_WIRE_BF16 = 1, DP_WIRE_F16 = 2 };
/* The gradient sum: a ring over all workers (the fewest bytes each);
 * hierarchical: a reduce-scatter within each host, rings between the
 * hosts' ranks of the same local index (one part each), an allgather
 * within each host (cross-host bytes 2 (h-1)/h of the gradient per host
 * instead of the flat ring's more; hosts of equal size, else the ring);
 * MPI: the library's own reduce-scatter and allgather (vendor-tuned
 * algorithms; float32 wire only). */
enum { DP_ALLREDUCE_RING = 0, DP_ALLREDUCE_HIER = 1, DP_ALLREDUCE_MPI = 2 };
/* "f32", "bf16", "f16" (also "fp32", "fp16", "float32"...) -> DP_WIRE_*,
 * "ring", "hierarchical", "mpi" -> DP_ALLREDUCE_*; -1 for anything else. */
DP_EXPORT int dp_comm_wire_parse(const char *s);
DP_EXPORT const char *dp_comm_wire_name(int wire);
DP_EXPORT int dp_comm_algo_parse(const char *s);
DP_EXPORT const char *dp_comm_algo_name(int algo);

/* How gradients travel and how long a wait may last; call before the
 * first step, with the same values on every rank. */
typedef struct dp_comm_conf {
	int wire;            /* DP_WIRE_* (default float32) */
	int algo;            /* DP_ALLREDUCE_* (default ring) */
	int overlap;         /* reduce buckets during the backward pass (default 1) */
	size_t bucket_bytes; /* a bucket is sent once it holds this much (default 1 MiB) */
	double stall_warn;   /* seconds in one collective before a report (default 60; 0 never) */
	double stall_abort;  /* seconds before the call fails (default 0: never) */
	/* Stall reports ("gradients: waiting 60 s for rank 2 ..."), from any
	 * thread; NULL: none. */
	dp_msg_fn report;
	void *report_ctx;
} dp_comm_conf;
DP_EXPORT void dp_comm_conf_defaults(dp_comm_conf *conf);
DP_EXPORT int dp_comm_configure(dp_comm *c, const dp_comm_conf *conf, dp_err *e);

/* Average n floats (dev) over all workers, in place. */
DP_EXPORT int dp_comm_allreduce_mean(dp_comm *c, float *buf, size_t n, dp_err *e);
/* Sum n doubles of host memory over all workers, in place (metrics). */
DP_EXPORT int dp_comm_allreduce_sum(dp_comm *c, double *v, size_t n, dp_err *e);
/* Copy bytes of (dev) memory from worker root to all. */
DP_EXPORT int dp_comm_bcast(dp_comm *c, void *buf, size_t bytes, int root, dp_err *e);
/* The same for host memory. */
DP_EXPORT int dp_comm_bcast_host(dp_comm *c, void *buf, size_t bytes, int root, dp_err *e);
/* Every worker's `bytes` bytes of `mine` (host) into all (size * bytes),
 * in rank order. */
DP_EXPORT int dp_comm_allgather(dp_comm *c, const void *mine, void *all, size_t bytes, dp_err *e);
/* Check that text (a worker's settings, one "key=value" per line) is the
 * same on every worker: a hash of it is compared.  When it is not, every
 * worker gets DP_EARG; worker 0's message names the ranks and the first
 * line that differs ("settings differ between ranks: rank 1 has
 * model=dense:64 where rank 0 has model=dense:128"). */
DP_EXPORT int dp_comm_check_same(dp_comm *c, const char *text, dp_err *e);

/* The gradient protocol of a step (above).  grads: the model's gradient
 * buffer (dev) of n floats. */
DP_EXPORT int dp_comm_grads_begin(dp_comm *c, float *grads, size_t n, dp_err *e);
DP_EXPORT int dp_comm_grads_ready(dp_comm *c, size_t off, size_t count, dp_err *e);
DP_EXPORT int dp_comm_grads_wait(dp_comm *c, dp_err *e);

/* A dp_grad_hook (dp_nn.h) that forwards to dp_comm_grads_ready; pass the
 * dp_comm as its context. */
DP_EXPORT int dp_comm_hook(void *c, int layer, size_t off, size_t count, dp_err *e);

/* ---- groups and messages (pipelines: dp_train.h) ------------------------------
 * dp_comm_split: the workers of c that give the same color, as a job of
 * their own (ranked by key, then by rank in c): its collectives and
 * gradient steps are among them alone.  A collective of c.  It takes c's
 * settings but reduces gradients after the backward pass (no thread of
 * its own: the caller's thread is the one in MPI), and is closed with
 * dp_comm_close before c.  In a job of one: a job of one. */
DP_EXPORT dp_comm *dp_comm_split(dp_comm *c, int color, int key, dp_err *e);
/* Send bytes of host memory buf to worker `to` of c, under tag (which message
 * of a protocol it is): returns once the bytes are copied out, before
 * they arrive, so two workers sending to each other never wait on each
 * other.  Messages from one worker to another with one tag arrive in the
 * order sent. */
DP_EXPORT int dp_comm_send(dp_comm *c, const void *buf, size_t bytes, int to, int tag, dp_err *e);
/* Receive exactly bytes from worker `from` under tag into host memory buf:
 * waits (polled: a stall is reported, what naming the message, and ends
 * after stall_abort); DP_EDATA for a message of another length. */
DP_EXPORT int dp_comm_recv(dp_comm *c, void *buf, size_t bytes, int from, int tag,
			   const char *what, dp_err *e);
/* Wait for every message sent to have been taken. */
DP_EXPORT int dp_comm_send_wait(dp_comm *c, dp_err *e);

/* Where the time of the gradient steps went, since open (seconds). */
typedef struct dp_comm_stats {
	uint64_t steps;    /* grads_wait calls */
	uint64_t calls;    /* allreduce calls for gradients */
	uint64_t bytes;    /* gradient bytes reduced (per worker) */
	double step_time;  /* grads_begin to the end of grads_wait */
	double wait_time;  /* blocked in grads_wait: communication not hidden */
	double busy_time;  /* a gradient allreduce in flight (hidden or not) */
	uint64_t wire_bytes;  /* bytes this worker sent for gradients */
	uint64_t cross_bytes; /* of them, to a worker on another host */
	int hosts;            /* hosts of the job (by MPI's shared-memory split) */
} dp_comm_stats;
DP_EXPORT void dp_comm_stats_get(const dp_comm *c, dp_comm_stats *st);

/* ---- timeline ---------------------------------------------------------------
 * Chrome trace events (the JSON array format of chrome://tracing and
 * Perfetto): what each worker's threads did when.  The comm layer records
 * its own ("allreduce" on the communication thread, "wait" in
 * grads_wait); the caller adds the rest.  Times are seconds of dp_now(),
 * shown relative to the moment the job synchronised in
 * dp_comm_timeline_start. */
DP_EXPORT int dp_comm_timeline_start(dp_comm *c, dp_err *e); /* a collective */
/* One event: name (a string constant), on thread tid (1: the caller's
 * main thread; 2 is the communication thread; 3 and up: yours). */
DP_EXPORT void dp_comm_event(dp_comm *c, const char *name, int tid, double t0, double t1);
/* Write the events (a collective).  A path with {rank} (or {rank:W}): every worker
 * writes its own file; else worker 0 gathers all and writes one file, a
 * process per rank. */
DP_EXPORT int dp_comm_timeline_write(dp_comm *c, const char *path, dp_err *e);


#ifdef __cplusplus
}
#endif
#endif
