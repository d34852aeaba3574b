/*
 * comm.c - the single-process dp_comm (dp_comm.h): one worker, so every
 * collective leaves its buffer as it is.  Kept as the reference for what
 * each call must leave behind.
 */
#include "dp_comm.h"

#include <stdlib.h>

struct dp_comm {
	const dp_backend *be;
	dp_bectx *ctx;
	float *grads;
	size_t n;
};

dp_comm *dp_comm_open(const dp_backend *be, dp_bectx *ctx, dp_err *e)
{
	dp_comm *c = calloc(1, sizeof *c);
	if (!c) {
		dp_seterr(e, DP_ENOMEM, "out of memory");
		return NULL;
	}
	c->be = be;
	c->ctx = ctx;
	return c;
}

void dp_comm_close(dp_comm *c) { free(c); }
int dp_comm_rank(const dp_comm *c) { return 0; }
int dp_comm_size(const dp_comm *c) { return 1; }
const char *dp_comm_desc(const dp_comm *c) { return "single process"; }

int dp_comm_allreduce_mean(dp_comm *c, float *buf, size_t n, dp_err *e) { return DP_OK; }
int dp_comm_allreduce_sum(dp_comm *c, double *v, size_t n, dp_err *e) { return DP_OK; }
int dp_comm_bcast(dp_comm *c, void *buf, size_t bytes, int root, dp_err *e) { return DP_OK; }

int dp_comm_grads_begin(dp_comm *c, float *grads, size_t n, dp_err *e)
{
	c->grads = grads;
	c->n = n;
	return DP_OK;
}

int dp_comm_grads_ready(dp_comm *c, size_t off, size_t count, dp_err *e)
{
	if (off + count > c->n)
		return dp_seterr(e, DP_EARG, "gradient range %zu+%zu beyond %zu", off, count, c->n);
	return DP_OK;
}

int dp_comm_grads_wait(dp_comm *c, dp_err *e) { return DP_OK; }

int dp_comm_hook(void *c, int layer, size_t off, size_t count, dp_err *e)
{
	return dp_comm_grads_ready(c, off, count, e);
}
