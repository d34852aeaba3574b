/*
 * dp_comm.h - what workers of a data-parallel job say to each other.
 *
 * One interface for every way of running: this file's implementation
 * (lib/comm.c) is the single process, where every call is trivial (the
 * mean of one worker's gradients is its gradients); a multi-process
 * implementation (MPI, NCCL) provides the same calls.  A training step is
 *
 *     dp_comm_grads_begin(c, grads, n)          before the backward pass
 *     dp_model_backward(m, n, hook, c)          the hook calls
 *         dp_comm_grads_ready(c, off, count)    as each layer finishes,
 *                                               last layer first: start
 *                                               reducing that range
 *     dp_comm_grads_wait(c)                     all ranges averaged
 *     dp_optim_step(...)
 *
 * so an implementation may average the whole buffer at wait() in one call,
 * or reduce ranges (buckets) while the backward pass goes on.  Buffers
 * marked (dev) are backend memory: an implementation that needs host
 * memory stages them through the backend it was opened with.
 */
#ifndef DP_COMM_H
#define DP_COMM_H

#include "dp.h"
#include "dp_backend.h"

typedef struct dp_comm dp_comm;

/* Join the job (single process: rank 0 of 1).  be/ctx: the backend that
 * owns the buffers passed in later. */
dp_comm *dp_comm_open(const dp_backend *be, dp_bectx *ctx, dp_err *e);
void dp_comm_close(dp_comm *c);
int dp_comm_rank(const dp_comm *c);
int dp_comm_size(const dp_comm *c);
/* "single process", "MPI (Open MPI 4.1.4), 4 ranks", ... */
const char *dp_comm_desc(const dp_comm *c);

/* Average n floats (dev) over all workers, in place. */
int dp_comm_allreduce_mean(dp_comm *c, float *buf, size_t n, dp_err *e);
/* Sum n doubles of host memory over all workers, in place (metrics). */
int dp_comm_allreduce_sum(dp_comm *c, double *v, size_t n, dp_err *e);
/* Copy bytes of (dev) memory from worker root to all. */
int dp_comm_bcast(dp_comm *c, void *buf, size_t bytes, int root, dp_err *e);

/* The gradient protocol of a step (above).  grads: the model's gradient
 * buffer (dev) of n floats. */
int dp_comm_grads_begin(dp_comm *c, float *grads, size_t n, dp_err *e);
int dp_comm_grads_ready(dp_comm *c, size_t off, size_t count, dp_err *e);
int dp_comm_grads_wait(dp_comm *c, dp_err *e);

/* A dp_grad_hook (dp_nn.h) that forwards to dp_comm_grads_ready; pass the
 * dp_comm as its context. */
int dp_comm_hook(void *c, int layer, size_t off, size_t count, dp_err *e);

#endif
