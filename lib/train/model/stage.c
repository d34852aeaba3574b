/*
 * stage.c - a model cut into pipeline stages (dp_nn.h): where it can be
 * cut, what each layer costs, the cut of about equal cost, and a model
 * bound to one stage of it.
 *
 * A stage is a run of layers [first, end) whose only input is the output
 * of layer first - 1 (or the model's input): the layers keep the whole
 * model's indices, names and parameter layout, and the stage's parameters
 * and running statistics are one contiguous piece of the whole model's
 * (layers hold theirs in order), so that the stages' pieces, in order,
 * are the whole model's buffers.
 *
 * Costs are estimates (multiply-adds); the cut minimises the largest
 * stage's cost over the cut points (a linear partition by dynamic
 * programming: stages x points^2, points at most the layers).
 */
#define _GNU_SOURCE
#include "nn_impl.h"

#include <stdlib.h>
#include <string.h>

int dp_model_can_cut(const dp_model *m, int after)
{
	if (after < 0 || after >= m->n - 1)
		return 0;
	for (int j = after + 1; j < m->n; j++) {
		const layer *L = &m->l[j];
		if (L->src < after || (L->kind == DP_LAYER_ADD && L->src2 < after))
			return 0;
	}
	return 1;
}

double dp_model_layer_cost(const dp_model *m, int i)
{
	const layer *L = &m->l[i];
	double out = (double)dp_shape_size(&L->out), in = (double)dp_shape_size(&L->in);
	switch (L->kind) {
	case DP_LAYER_DENSE:
		return 3.0 * in * L->units + 2 * out;
	case DP_LAYER_CONV:
		return 3.0 * out * L->in.c * L->kh * L->kw + 2 * out;
	case DP_LAYER_MAXPOOL:
	case DP_LAYER_AVGPOOL:
		return L->global ? 2 * in : 2.0 * out * L->kh * L->kw;
	case DP_LAYER_BATCHNORM:
		return 8 * out;
	case DP_LAYER_FLATTEN:
	case DP_LAYER_SOFTMAX:
		return 0;
	default: /* activations (none when fused, but a batchnorm's ReLU: the
		  * mask its backward pass reads), dropout, sums */
		return !L->fused ? 2 * out : m->l[L->src].kind == DP_LAYER_BATCHNORM ? out : 0;
	}
}

int dp_model_cuts(const dp_model *m, int stages, const double *cost, int *first, dp_err *e)
{
	int n = m->n, nb = 0, rc = DP_OK;
	if (stages < 1)
		return dp_seterr(e, DP_EARG, "%d pipeline stages: want 1 or more", stages);
	int *b = malloc(((size_t)n + 1) * sizeof *b);
	double *pre = malloc(((size_t)n + 1) * sizeof *pre);
	double *f = malloc((size_t)stages * ((size_t)n + 1) * sizeof *f);
	int *arg = malloc((size_t)stages * ((size_t)n + 1) * sizeof *arg);
	if (!b || !pre || !f || !arg) {
		rc = dp_seterr(e, DP_ENOMEM, "out of memory");
		goto out;
	}
	pre[0] = 0;
	for (int i = 0; i < n; i++)
		pre[i + 1] = pre[i] + (cost ? cost[i] : dp_model_layer_cost(m, i));
	b[nb++] = 0; /* where a stage may begin: after a cut point; the end */
	for (int i = 0; i < n - 1; i++)
		if (dp_model_can_cut(m, i))
			b[nb++] = i + 1;
	b[nb++] = n;
	if (nb - 1 < stages) {
		rc = dp_seterr(e, DP_EARG,
			       "the model can be cut at %d point%s only: at most %d pipeline stage%s "
			       "(a stage ends where one tensor alone goes on: after a residual "
			       "block, not inside it)",
			       nb - 2, nb == 3 ? "" : "s", nb - 1, nb == 2 ? "" : "s");
		goto out;
	}
	/* f[k][j]: the least largest cost of k + 1 stages over layers [0, b[j]) */
#define F(k, j) f[(size_t)(k) * (size_t)nb + (size_t)(j)]
#define A(k, j) arg[(size_t)(k) * (size_t)nb + (size_t)(j)]
	for (int j = 0; j < nb; j++)
		F(0, j) = pre[b[j]];
	for (int k = 1; k < stages; k++)
		for (int j = 0; j < nb; j++) {
			F(k, j) = 1e300;
			A(k, j) = -1;
			for (int i = k; i < j; i++) { /* the last stage: [b[i], b[j]) */
				double c = pre[b[j]] - pre[b[i]], v = F(k - 1, i) > c ? F(k - 1, i) : c;
				if (v < F(k, j)) {
					F(k, j) = v;
					A(k, j) = i;
				}
			}
		}
	int j = nb - 1;
	first[stages] = n;
	for (int k = stages - 1; k > 0; k--) {
		j = A(k, j);
		first[k] = b[j];
	}
	first[0] = 0;
#undef F
#undef A
out:
	free(b);
	free(pre);
	free(f);
	free(arg);
	return rc;
}

int dp_model_set_stage(dp_model *m, int first, int end, dp_err *e)
{
	if (m->be)
		return dp_seterr(e, DP_EARG, "a stage is chosen before the model is bound");
	if (first < 0 || end > m->n || first >= end)
		return dp_seterr(e, DP_EARG, "stage of layers %d to %d: the model has %d", first, end,
				 m->n);
	if (first > 0 && !dp_model_can_cut(m, first - 1))
		return dp_seterr(e, DP_EARG, "the model cannot be cut after layer %s: a later layer "
				 "reads an earlier one", m->l[first - 1].name);
	m->lo = first;
	m->hi = end;
	m->plo = m->sp = m->blo = m->sb = 0;
	for (int i = 0; i < m->n; i++) {
		const layer *L = &m->l[i];
		size_t p = L->wn + L->bn, r = L->kind == DP_LAYER_BATCHNORM ? 2 * (size_t)L->in.c : 0;
		if (i < first) {
			m->plo += p;
			m->blo += r;
		} else if (i < end) {
			m->sp += p;
			m->sb += r;
		}
	}
	nn_plan_grads(m);
	return nn_plan_memory(m, e);
}

void dp_model_stage(const dp_model *m, int *first, int *end)
{
	*first = m->lo;
	*end = m->hi;
}

size_t dp_model_stage_in(const dp_model *m) { return nn_node_size(m, m->n); }
size_t dp_model_stage_out(const dp_model *m) { return nn_node_size(m, m->hi - 1); }
size_t dp_model_total_params(const dp_model *m) { return m->nparams; }
int dp_model_stage_trains(const dp_model *m) { return m->l[m->hi - 1].needg; }
int dp_model_stage_wants_dx(const dp_model *m) { return m->need_dx; }

int dp_model_set_output_grad(dp_model *m, const float *dy, size_t n, dp_err *e)
{
	if (!m->out || n != m->last_n || !m->last_train)
		return dp_seterr(e, DP_EARG, "output gradient: no training forward of %zu samples", n);
	m->be->upload(m->ctx, m->gbuf[0], dy, n * dp_model_stage_out(m) * sizeof(float));
	m->dout = m->gbuf[0];
	return DP_OK;
}

const float *dp_model_input_grad(const dp_model *m)
{
	return m->dx_slot >= 0 && m->gbuf ? m->gbuf[m->dx_slot] : NULL;
}
