/*
 * pass.c - a model's pass over data into a dp_eval, and the sum of
 * the ranks' accumulators (dp_eval.h): dp-eval's evaluation and dp-train's
 * validation, written once.
 *
 * The pass runs on the backend (forward) and on the host (the metrics:
 * the outputs are downloaded batch by batch, a few floats a sample); the
 * accumulator's exact sums make the figures independent of how the
 * records are split between ranks and batches.
 */
#include "dp_eval.h"

#include <stdlib.h>
#include <string.h>

dp_eval *dp_eval_new_for(const dp_model *m, size_t topk, dp_err *e)
{
	int cls = dp_model_loss_kind(m) == DP_LOSS_XENT;
	return dp_eval_new(cls ? DP_EVAL_CLASS : DP_EVAL_REGRESSION, dp_model_out_size(m),
			   cls ? topk : 0, e);
}

/* The host buffers of a pass, for batches of up to cap samples. */
typedef struct rows_buf {
	size_t cap;
	float *out, *prob; /* (cap, k) */
	int32_t *pred;     /* (cap) */
	double *loss;      /* (cap) */
} rows_buf;

static int rows_grow(rows_buf *rb, size_t n, size_t k, int want_prob, dp_err *e)
{
	if (n <= rb->cap)
		return DP_OK;
	free(rb->out);
	free(rb->prob);
	free(rb->pred);
	free(rb->loss);
	memset(rb, 0, sizeof *rb);
	rb->out = malloc(n * k * sizeof(float));
	rb->prob = want_prob ? malloc(n * k * sizeof(float)) : NULL;
	rb->pred = malloc(n * sizeof(int32_t));
	rb->loss = malloc(n * sizeof(double));
	if (!rb->out || !rb->pred || !rb->loss || (want_prob && !rb->prob))
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	rb->cap = n;
	return DP_OK;
}

int dp_eval_data(dp_eval *ev, dp_model *m, dp_data *d, int want_prob, dp_eval_rows_fn each,
		 void *arg, dp_err *e)
{
	dp_bectx *ctx;
	const dp_backend *be = dp_model_backend(m, &ctx);
	int cls = dp_eval_kind(ev) == DP_EVAL_CLASS;
	size_t k = dp_eval_k(ev);
	if (k != dp_model_out_size(m) || cls != (dp_model_loss_kind(m) == DP_LOSS_XENT))
		return dp_seterr(e, DP_EARG, "eval: the accumulator is not for this model");
	want_prob = want_prob && cls;
	rows_buf rb = {0};
	const dp_batch *b;
	int rc;
	while ((rc = dp_data_next(d, &b, e)) == 1) {
		dp_pass pass = {0};
		if ((rc = rows_grow(&rb, b->n, k, want_prob, e)) < 0 ||
		    (rc = dp_model_forward(m, b->x, b->n, &pass, e)) < 0)
			break;
		be->download(ctx, rb.out, dp_model_output(m), b->n * k * sizeof(float));
		if ((rc = be->sync(ctx, e)) < 0)
			break;
		rc = cls ? dp_eval_add_class(ev, rb.out, b->y, b->n, rb.pred, rb.loss, rb.prob, e)
			 : dp_eval_add_regression(ev, rb.out, b->t, b->n, rb.loss, e);
		if (rc < 0)
			break;
		dp_eval_rows r = {b, rb.out, cls ? rb.pred : NULL, rb.loss, rb.prob};
		if (each && (rc = each(arg, &r, e)) < 0)
			break;
	}
	free(rb.out);
	free(rb.prob);
	free(rb.pred);
	free(rb.loss);
	if (rc < 0)
		return rc;
	dp_data_stats st; /* exact: the pass has reached the epoch's end */
	dp_data_stats_get(d, &st);
	dp_eval_add_skipped(ev, st.corrupt);
	return DP_OK;
}

int dp_eval_data_many(dp_eval *const *evs, dp_model *const *ms, size_t n, dp_data *d, dp_err *e)
{
	rows_buf *rb = calloc(n ? n : 1, sizeof *rb);
	if (!rb)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	int rc = DP_OK;
	for (size_t i = 0; i < n && rc == DP_OK; i++)
		if (dp_eval_k(evs[i]) != dp_model_out_size(ms[i]) ||
		    (dp_eval_kind(evs[i]) == DP_EVAL_CLASS) != (dp_model_loss_kind(ms[i]) == DP_LOSS_XENT) ||
		    dp_model_in_size(ms[i]) != dp_model_in_size(ms[0]))
			rc = dp_seterr(e, DP_EARG, "eval: model %zu: its accumulator or its input "
				       "differs", i);
	const dp_batch *b;
	while (rc == DP_OK && (rc = dp_data_next(d, &b, e)) == 1) {
		rc = DP_OK;
		for (size_t i = 0; i < n && rc == DP_OK; i++) {
			dp_bectx *ctx;
			const dp_backend *be = dp_model_backend(ms[i], &ctx);
			size_t k = dp_eval_k(evs[i]);
			dp_pass pass = {0};
			if ((rc = rows_grow(&rb[i], b->n, k, 0, e)) < 0 ||
			    (rc = dp_model_forward(ms[i], b->x, b->n, &pass, e)) < 0)
				break;
			be->download(ctx, rb[i].out, dp_model_output(ms[i]), b->n * k * sizeof(float));
			if ((rc = be->sync(ctx, e)) < 0)
				break;
			rc = dp_eval_kind(evs[i]) == DP_EVAL_CLASS
				     ? dp_eval_add_class(evs[i], rb[i].out, b->y, b->n, NULL, NULL, NULL, e)
				     : dp_eval_add_regression(evs[i], rb[i].out, b->t, b->n, NULL, e);
		}
	}
	for (size_t i = 0; i < n; i++) {
		free(rb[i].out);
		free(rb[i].prob);
		free(rb[i].pred);
		free(rb[i].loss);
	}
	free(rb);
	if (rc < 0)
		return rc;
	dp_data_stats st;
	dp_data_stats_get(d, &st);
	for (size_t i = 0; i < n; i++)
		dp_eval_add_skipped(evs[i], st.corrupt);
	return DP_OK;
}

int dp_eval_allreduce(dp_eval *ev, dp_comm *c, double *extra, size_t nextra, dp_err *e)
{
	if (dp_comm_size(c) == 1)
		return DP_OK;
	size_t ns = dp_eval_state_size(ev);
	double *v = calloc(ns + nextra, sizeof *v);
	if (!v)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	dp_eval_state_get(ev, v);
	if (nextra)
		memcpy(v + ns, extra, nextra * sizeof *v);
	int rc = dp_comm_allreduce_sum(c, v, ns + nextra, e);
	if (rc == DP_OK) {
		if (nextra)
			memcpy(extra, v + ns, nextra * sizeof *v);
		rc = dp_eval_state_set(ev, v, e);
	}
	free(v);
	return rc;
}
