/*
 * nn.c - a model bound to a backend (dp_nn.h): its memory, its initial
 * weights, the forward and backward passes as calls into the backend,
 * and fine-tuning's selection of tensors by name.  The model language is
 * spec.c's, the graph graph.c's.
 *
 * Nothing numeric happens here beyond initial weights: every tensor
 * operation is a dp_backend call, so this file is the same for every
 * backend.  Plans made once per model:
 *  - an activation item right after dense, conv or a residual sum, and a
 *    ReLU right after batchnorm, is computed by that layer (fused: one
 *    pass over its output while in cache, its backward reading the
 *    gradient masked); the item keeps its own index, so tensor names
 *    still follow the spec;
 *  - flatten, fused activations, a final softmax, and dropout outside
 *    training are views of their input: no copy;
 *  - a frozen convolution followed by a frozen (evaluation-mode)
 *    batchnorm that no backward pass goes through is one convolution
 *    with the batchnorm folded into its weights and bias (fold_conv), and
 *    the batchnorm's fused ReLU its activation (nn_folded);
 *  - the backward pass stops at the first layer with parameters (no
 *    input gradient is ever computed for the data), and passes gradients
 *    between two buffers, elementwise layers working in place.
 */
#define _GNU_SOURCE
#include "nn_impl.h"
#include "dp_rng.h"

#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A standard normal deviate from two of the stream's numbers (Box-Muller). */
static double normal_at(uint64_t key, size_t j)
{
	double u1 = dp_rng_unit(dp_rng_at(key, 2 * (uint64_t)j)),
	       u2 = dp_rng_unit(dp_rng_at(key, 2 * (uint64_t)j + 1));
	return sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2);
}

void dp_model_init(dp_model *m, uint64_t seed)
{
	/* the stage's layers alone, each as in the whole model (offsets from
	 * the stage's first parameter and buffer) */
	float *host = malloc((m->sp + m->sb + 1) * sizeof(float));
	if (!host)
		return;
	float *hb = host + m->sp - m->blo;
	host -= m->plo;
	for (int i = m->lo; i < m->hi; i++) {
		layer *L = &m->l[i];
		if (L->kind == DP_LAYER_BATCHNORM) {
			for (size_t j = 0; j < L->wn; j++) {
				host[L->woff + j] = 1;
				host[L->boff + j] = 0;
				hb[L->roff + j] = 0;
				hb[L->roff + L->wn + j] = 1;
			}
			L->tracked = 0;
			continue;
		}
		if (!L->wn)
			continue;
		uint64_t key = dp_rng_key(seed, 2, (uint64_t[]){DP_RNG_INIT, (uint64_t)i});
		if (L->he) { /* kaiming_normal_(mode="fan_out", nonlinearity="relu"), bias 0 */
			double sd = sqrt(2.0 / ((double)L->units * L->kh * L->kw));
			for (size_t j = 0; j < L->wn; j++)
				host[L->woff + j] = (float)(sd * normal_at(key, j));
			for (size_t j = 0; j < L->bn; j++)
				host[L->boff + j] = 0;
			continue;
		}
		size_t fan_in = L->wn / (size_t)L->units;
		float bound = (float)(1.0 / sqrt((double)fan_in));
		for (size_t j = 0; j < L->wn + L->bn; j++)
			host[L->woff + j] = (2 * dp_rng_unit(dp_rng_at(key, j)) - 1) * bound;
	}
	host += m->plo;
	m->be->upload(m->ctx, m->params, host, m->sp * sizeof(float));
	if (m->sb)
		m->be->upload(m->ctx, m->bufs, host + m->sp, m->sb * sizeof(float));
	free(host);
}

/* ---- passes --------------------------------------------------------------- */

static dp_conv2d conv_geom(const layer *L, size_t n)
{
	dp_conv2d g = {(int)n,   L->in.c, L->in.h, L->in.w, L->units, L->out.h, L->out.w,
		       L->kh,    L->kw,   L->sh,   L->sw,   L->ph,    L->pw};
	return g;
}

static dp_pool2d pool_geom(const layer *L, size_t n)
{
	dp_pool2d g = {(int)n, L->in.c, L->in.h, L->in.w, L->out.h, L->out.w,
		       L->kh,  L->kw,   L->sh,   L->sw,   L->ph,    L->pw};
	return g;
}

static dp_bnorm bnorm_geom(const layer *L, size_t n)
{
	dp_bnorm g = {(int)n,      L->in.c,  L->in.rank == 3 ? L->in.h * L->in.w : 1,
		      L->eps,      L->momentum, L->count, L->frozen, L->act};
	return g;
}

static dp_dropout dropout_of(const dp_model *m, int i, size_t n, const dp_pass *p)
{
	const layer *L = &m->l[i];
	dp_dropout d;
	d.key = dp_rng_key(p->seed, 3, (uint64_t[]){DP_RNG_DROPOUT, p->step, (uint64_t)i});
	d.sample0 = p->sample0;
	d.per_sample = dp_shape_size(&L->in);
	double t = (double)L->p * 4294967296.0;
	d.threshold = t >= 4294967295.0 ? 0xffffffffu : (uint32_t)t;
	d.scale = 1.0f / (1.0f - L->p);
	return d;
}

/* --sync-bn: v (dev, k doubles) summed over the workers, with the count
 * `*count` of this one (NULL: none).  The sums stay in m->hsums. */
static int sync_sums(dp_model *m, double *v, int k, double *count, dp_err *e)
{
	const dp_backend *be = m->be;
	if (v)
		be->download(m->ctx, m->hsums, v, (size_t)k * sizeof(double));
	else
		memset(m->hsums, 0, (size_t)k * sizeof(double));
	int rc = be->sync(m->ctx, e);
	if (rc < 0)
		return rc;
	if (count)
		m->hsums[k] = *count;
	if ((rc = m->sync(m->sync_ctx, m->hsums, (size_t)k + (count != NULL), e)) < 0)
		return rc;
	if (count)
		*count = m->hsums[k];
	if (v)
		be->upload(m->ctx, v, m->hsums, (size_t)k * sizeof(double));
	return DP_OK;
}

/* Is batchnorm layer L's training forward synchronised? */
static int bn_synced(const dp_model *m, const layer *L)
{
	return m->sync && L->kind == DP_LAYER_BATCHNORM && !L->frozen;
}

size_t nn_node_size(const dp_model *m, int i)
{
	if (i >= m->n)
		return m->lo > 0 ? dp_shape_size(&m->l[m->lo - 1].out) : dp_shape_size(&m->in);
	return i < 0 ? dp_shape_size(&m->in) : dp_shape_size(&m->l[i].out);
}

/* Batchnorm layer L's forward.  A replay normalises with the statistics
 * the first pass had (its own batch's again, or --sync-bn's sums it
 * kept) and moves a scratch copy of the running statistics, not the
 * model's: they move once a micro-batch. */
static int bnorm_fwd(dp_model *m, layer *L, size_t n, int train, int replay, const float *cur,
		     float *y, dp_err *e)
{
	const dp_backend *be = m->be;
	int t = train && !L->frozen;
	dp_bnorm g = bnorm_geom(L, n);
	const double *sums = NULL;
	float *rm = nn_run(m, L), *rv = rm + L->in.c;
	if (t && replay) {
		rm = m->runs;
		rv = m->runs + L->in.c;
	}
	if (t && bn_synced(m, L) && replay) {
		sums = L->ssum;
	} else if (t && bn_synced(m, L)) {
		double count = (double)n * g.hw;
		be->bnorm_sums(m->ctx, &g, cur, m->sums);
		int rc = sync_sums(m, m->sums, 2 * g.c, &count, e);
		if (rc < 0)
			return rc;
		L->count = g.count = count;
		sums = m->sums;
		if (L->ssum) /* a recomputed segment's: for its replay */
			be->copy(m->ctx, L->ssum, m->sums, 2 * (size_t)g.c * sizeof(double));
	}
	be->bnorm_fwd(m->ctx, &g, t, cur, nn_w(m, L), nn_b(m, L), rm, rv, sums, L->aux, y);
	if (t && !replay)
		L->tracked++;
	return DP_OK;
}

/* Convolution i with batchnorm i + 1 folded into it (nn_folded): its
 * weights and bias for the pass, made now from the parameters and running
 * statistics as they are (a product a weight: every pass, so nothing goes
 * stale when parameters are loaded or given by another rank), in m->fold
 * after those of the folded convolutions before it. */
static int fold_conv(dp_model *m, int i, const float **w, const float **b, dp_err *e)
{
	size_t at = 0, need = 0;
	for (int j = m->lo; j + 1 < m->hi; j++)
		if (nn_folded(m, j + 1)) {
			if (j == i)
				at = need;
			need += m->l[j].wn + (size_t)m->l[j].units;
		}
	if (need > m->fold_n) {
		if (m->fold)
			m->be->free(m->ctx, m->fold);
		m->fold_n = 0;
		if (!(m->fold = m->be->alloc(m->ctx, need * sizeof(float))))
			return dp_seterr(e, DP_ENOMEM, "out of memory for the folded convolutions");
		m->fold_n = need;
	}
	const layer *C = &m->l[i], *B = &m->l[i + 1];
	float *wf = m->fold + at, *bf = wf + C->wn, *rm = nn_run(m, B);
	m->be->bnorm_fold(m->ctx, C->units, C->wn / (size_t)C->units, B->eps, nn_w(m, C),
			  C->bn ? nn_b(m, C) : NULL, nn_w(m, B), nn_b(m, B), rm, rm + B->in.c, wf,
			  bf);
	*w = wf;
	*b = bf;
	return DP_OK;
}

int nn_layer_fwd(dp_model *m, int i, size_t n, int train, const dp_pass *p, int replay, dp_err *e)
{
	const dp_backend *be = m->be;
	dp_bectx *c = m->ctx;
	layer *L = &m->l[i];
	float *y = L->ybuf;
	const float *cur = L->src >= m->lo ? m->l[L->src].y : m->xin;
	int isz = (int)dp_shape_size(&L->in), out = (int)dp_shape_size(&L->out);
	L->x = cur;
	switch (L->kind) {
	case DP_LAYER_DENSE:
		be->dense_fwd(c, (int)n, isz, out, cur, nn_w(m, L), L->bn ? nn_b(m, L) : NULL, y,
			      L->act);
		break;
	case DP_LAYER_CONV: {
		dp_conv2d g = conv_geom(L, n);
		const float *w = nn_w(m, L), *b = L->bn ? nn_b(m, L) : NULL;
		int act = L->act;
		if (nn_folded(m, i + 1)) { /* conv + batchnorm (+ ReLU) in one */
			int rc = fold_conv(m, i, &w, &b, e);
			if (rc < 0)
				return rc;
			act = m->l[i + 1].act;
		}
		be->conv_fwd(c, &g, cur, w, b, y, act, m->ws);
		break;
	}
	case DP_LAYER_MAXPOOL: {
		dp_pool2d g = pool_geom(L, n);
		be->maxpool_fwd(c, &g, cur, y, L->aux);
		break;
	}
	case DP_LAYER_AVGPOOL: {
		dp_pool2d g = pool_geom(L, n);
		be->avgpool_fwd(c, &g, cur, y);
		break;
	}
	case DP_LAYER_DROPOUT:
		if (train && L->p > 0) {
			dp_dropout d = dropout_of(m, i, n, p);
			be->dropout_fwd(c, &d, (int)n, cur, y);
		} else {
			y = (float *)cur;
		}
		break;
	case DP_LAYER_RELU:
	case DP_LAYER_TANH:
	case DP_LAYER_SIGMOID:
		if (L->fused)
			y = (float *)cur; /* done by the layer before (a folded convolution too) */
		else if (L->inplace)
			be->act_fwd(c, act_of(L->kind), n * (size_t)isz, cur, y = (float *)cur);
		else
			be->act_fwd(c, act_of(L->kind), n * (size_t)isz, cur, y);
		break;
	case DP_LAYER_BATCHNORM: {
		if (nn_folded(m, i)) { /* the convolution before it did it */
			y = (float *)cur;
			break;
		}
		int rc = bnorm_fwd(m, L, n, train, replay, cur, y, e);
		if (rc < 0)
			return rc;
		break;
	}
	case DP_LAYER_ADD: {
		const float *b = L->src2 >= m->lo ? m->l[L->src2].y : m->xin;
		if (L->inplace)
			y = (float *)cur;
		be->add(c, n * (size_t)out, cur, b, y, L->act);
		break;
	}
	default: /* flatten, softmax (applied by the loss or predict) */
		y = (float *)cur;
		break;
	}
	L->y = y;
	return DP_OK;
}

int dp_model_forward(dp_model *m, const float *x, size_t n, const dp_pass *p, dp_err *e)
{
	if (!m->be)
		return dp_seterr(e, DP_EARG, "model not bound to a backend");
	if (n == 0 || n > m->max_batch)
		return dp_seterr(e, DP_EARG, "batch of %zu samples: the model takes 1 to %zu", n,
				 m->max_batch);
	m->slots[m->slot].valid = 0;
	m->xin = m->be->stage(m->ctx, m->xbuf, x, n * nn_node_size(m, m->n) * sizeof(float));
	int train = p && p->train;
	if (p)
		m->last_pass = *p;
	for (int i = m->lo; i < m->hi; i++) {
		int rc = nn_layer_fwd(m, i, n, train, p, 0, e);
		if (rc < 0)
			return rc;
	}
	m->out = m->l[m->hi - 1].y;
	m->last_n = n;
	m->last_train = train;
	m->dout = NULL;
	nn_keep_slot(m);
	return DP_OK;
}

int dp_model_loss_queue(dp_model *m, const void *y, size_t n, float scale, int want_grad,
			dp_err *e)
{
	if (!m->out || n != m->last_n)
		return dp_seterr(e, DP_EARG, "loss: no forward pass of %zu samples", n);
	if (m->hi != m->n)
		return dp_seterr(e, DP_EARG, "loss: a pipeline stage but the last has no loss");
	const dp_backend *be = m->be;
	int k = (int)dp_model_out_size(m);
	float *dout = want_grad ? m->gbuf[0] : NULL;
	if (m->loss == DP_LOSS_XENT) {
		const int32_t *lab = y;
		for (size_t i = 0; i < n; i++)
			if (lab[i] < 0 || lab[i] >= k)
				return dp_seterr(e, DP_EDATA, "sample %zu: label %d out of range 0..%d",
						 i, lab[i], k - 1);
		const void *dl = be->stage(m->ctx, m->ybuf, y, n * sizeof(int32_t));
		be->xent(m->ctx, (int)n, k, m->out, dl, m->smooth, scale, dout, m->stats);
	} else {
		const void *dt = be->stage(m->ctx, m->ybuf, y, n * (size_t)k * sizeof(float));
		be->mse(m->ctx, (int)n, k, m->out, dt, scale, dout, m->stats);
	}
	be->fetch(m->ctx, m->hstats, m->stats, 2 * sizeof(double));
	m->dout = dout;
	return DP_OK;
}

int dp_model_loss_wait(dp_model *m, double stats[2], dp_err *e)
{
	int rc = m->be->wait(m->ctx, e); /* a device fault shows here, once a step */
	stats[0] = rc < 0 ? NAN : m->hstats[0];
	stats[1] = rc < 0 ? 0 : m->hstats[1];
	return rc;
}

int dp_model_loss(dp_model *m, const void *y, size_t n, float scale, int want_grad,
		  double stats[2], dp_err *e)
{
	int rc = dp_model_loss_queue(m, y, n, scale, want_grad, e);
	return rc < 0 ? rc : dp_model_loss_wait(m, stats, e);
}

/* The backward pass's gradient buffers: a bit each in *busy. */
static int take(uint64_t *busy, int *most)
{
	int s = 0;
	while (*busy & (1ull << s))
		s++;
	*busy |= 1ull << s;
	if (s + 1 > *most)
		*most = s + 1;
	return s;
}

/* The node a layer reads as src: itself, or m->n for the stage's input. */
static int node(const dp_model *m, int src) { return src >= m->lo ? src : m->n; }

/* Does the output of node src (m->n: the stage's input) need a gradient? */
static int wants(const dp_model *m, int src)
{
	return src >= m->lo ? m->l[src].needg : m->need_dx;
}

/* Hand buffer t, the gradient from one reader of node src, to src: it
 * becomes src's gradient, or is added to what other readers gave. */
static void deliver(dp_model *m, size_t n, int exec, int src, int t, uint64_t *busy)
{
	int *gs = m->gslot;
	if (gs[src] < 0) {
		gs[src] = t;
		return;
	}
	if (exec)
		m->be->add(m->ctx, n * nn_node_size(m, src), m->gbuf[gs[src]], m->gbuf[t],
			   m->gbuf[gs[src]], DP_ACT_NONE);
	*busy &= ~(1ull << t);
}

/* Recomputation: segment L->seg's layers run again, from the input and
 * the statistics its first pass kept, when the backward pass reaches its
 * last layer i. */
static int replay(dp_model *m, int i, size_t n, dp_err *e)
{
	const layer *L = &m->l[i];
	if (L->seg < 0)
		return DP_OK;
	int a = m->seg[L->seg][0] > m->lo ? m->seg[L->seg][0] : m->lo;
	int f = m->seg[L->seg][1] < m->hi - 1 ? m->seg[L->seg][1] : m->hi - 1;
	if (i != f)
		return DP_OK;
	for (int j = a; j <= f; j++) {
		int rc = nn_layer_fwd(m, j, n, 1, &m->last_pass, 1, e);
		if (rc < 0)
			return rc;
	}
	return DP_OK;
}

/* The backward step of a layer that writes its input gradient dx to a
 * fresh buffer (dense, conv, pooling, batchnorm) from its output gradient
 * dy; dx NULL when no one wants it.  Parameter gradients go to the
 * layer's place in the gradient vector. */
static int fresh_bwd(dp_model *m, const layer *L, size_t n, float *dy, float *dx, dp_err *e)
{
	const dp_backend *be = m->be;
	dp_bectx *c = m->ctx;
	float *dw = nn_dw(m, L), *db = L->bn ? nn_db(m, L) : NULL;
	const float *w = nn_w(m, L);
	if (L->kind == DP_LAYER_DENSE) {
		be->dense_bwd(c, (int)n, (int)dp_shape_size(&L->in), (int)dp_shape_size(&L->out),
			      L->x, w, L->y, dy, dx, dw, db, L->act);
	} else if (L->kind == DP_LAYER_CONV) {
		dp_conv2d g = conv_geom(L, n);
		be->conv_bwd(c, &g, L->x, w, L->y, dy, dx, dw, db, L->act, m->ws);
	} else if (L->kind == DP_LAYER_MAXPOOL) {
		dp_pool2d g = pool_geom(L, n);
		be->maxpool_bwd(c, &g, dy, L->aux, dx);
	} else if (L->kind == DP_LAYER_AVGPOOL) {
		dp_pool2d g = pool_geom(L, n);
		be->avgpool_bwd(c, &g, dy, dx);
	} else {
		dp_bnorm g = bnorm_geom(L, n);
		const double *sums = NULL;
		if (dx && bn_synced(m, L)) {
			be->bnorm_bwd_sums(c, &g, L->x, L->aux, L->act ? L->y : NULL, dy, m->sums);
			int rc = sync_sums(m, m->sums, 2 * g.c, NULL, e);
			if (rc < 0)
				return rc;
			sums = m->sums;
		}
		be->bnorm_bwd(c, &g, L->x, w, L->aux, sums, L->act ? L->y : NULL, dy, dx, dw, db);
	}
	return DP_OK;
}

/* The backward pass, last layer first (exec 0: only count the gradient
 * buffers it takes, which is returned; exec 2: only the sums of --sync-bn
 * and the hooks, as a worker without samples makes them).  Each layer's
 * output gradient is in buffer gslot[i]; a layer working in place hands
 * its buffer down, others write a fresh one; where two layers read one
 * output (a residual block's input) their gradients are added.  The
 * stage's input is node m->n: its gradient, when wanted, is left in
 * buffer m->dx_slot. */
static int walk(dp_model *m, size_t n, int exec, dp_grad_hook hook, void *hook_ctx, dp_err *e)
{
	const dp_backend *be = m->be;
	dp_bectx *c = m->ctx;
	int *gs = m->gslot, most = 1, rc;
	uint64_t busy = 1; /* buffer 0: the loss's gradient */
	for (int i = 0; i <= m->n; i++)
		gs[i] = -1;
	gs[m->hi - 1] = 0;
	if (exec)
		m->dx_slot = -1;
	for (int i = m->hi - 1; i >= m->lo; i--) {
		layer *L = &m->l[i];
		int s = gs[i];
		if (exec == 2) {
			if (bn_synced(m, L) && L->needg && wants(m, L->src) &&
			    (rc = sync_sums(m, NULL, 2 * L->in.c, NULL, e)) < 0)
				return rc;
		} else if (L->needg && s >= 0) {
			if (exec && (rc = replay(m, i, n, e)) < 0)
				return rc;
			float *dy = exec ? m->gbuf[s] : NULL;
			int want = wants(m, L->src), t = -1;
			int isz = (int)dp_shape_size(&L->in), out = (int)dp_shape_size(&L->out);
			switch (L->kind) {
			case DP_LAYER_DENSE:
			case DP_LAYER_CONV:
			case DP_LAYER_MAXPOOL:
			case DP_LAYER_AVGPOOL:
			case DP_LAYER_BATCHNORM: {
				if (want)
					t = take(&busy, &most);
				if (exec && (rc = fresh_bwd(m, L, n, dy, want ? m->gbuf[t] : NULL, e)) < 0)
					return rc;
				busy &= ~(1ull << s);
				if (want)
					deliver(m, n, exec, node(m, L->src), t, &busy);
				break;
			}
			case DP_LAYER_ADD: {
				if (exec && L->act)
					be->act_bwd(c, L->act, n * (size_t)out, L->y, dy, dy);
				int s2 = node(m, L->src2);
				if (wants(m, L->src2)) {
					if (gs[s2] < 0) {
						gs[s2] = take(&busy, &most);
						if (exec)
							be->copy(c, m->gbuf[gs[s2]], dy,
								 n * (size_t)out * sizeof(float));
					} else if (exec) {
						be->add(c, n * (size_t)out, m->gbuf[gs[s2]], dy,
							m->gbuf[gs[s2]], DP_ACT_NONE);
					}
				}
				goto pass;
			}
			default: /* in place: dropout, activations; flatten, softmax pass it on */
				if (exec && L->kind == DP_LAYER_DROPOUT && L->p > 0) {
					dp_dropout d = dropout_of(m, i, n, &m->last_pass);
					be->dropout_bwd(c, &d, (int)n, dy, dy);
				} else if (exec && is_act(L->kind) && !L->fused) {
					be->act_bwd(c, act_of(L->kind), n * (size_t)isz, L->y, dy, dy);
				}
			pass:
				if (want)
					deliver(m, n, exec, node(m, L->src), s, &busy);
				else
					busy &= ~(1ull << s);
				break;
			}
			gs[i] = -1;
			if (exec && L->frozen && L->wn) /* frozen: no gradient, as requires_grad=False */
				be->fill(c, nn_dw(m, L), 0, L->wn + L->bn);
		} else if (exec && L->wn && !L->frozen) {
			be->fill(c, nn_dw(m, L), 0, L->wn + L->bn);
		} /* frozen, no gradient through it (a frozen start): nothing writes
		   * its gradients, zeros since the buffer was made or the layer
		   * frozen (dp_model_freeze), so no fill each step */
		if (exec && L->wn && hook &&
		    (rc = hook(hook_ctx, i, L->woff - m->plo, L->wn + L->bn, e)) < 0)
			return rc;
	}
	if (exec)
		m->dx_slot = gs[m->n];
	return exec ? DP_OK : most;
}

int nn_walk_count(dp_model *m) { return walk(m, 0, 0, NULL, NULL, NULL); }

int dp_model_backward(dp_model *m, size_t n, dp_grad_hook hook, void *hook_ctx, dp_err *e)
{
	if (!m->dout || n != m->last_n || !m->last_train)
		return dp_seterr(e, DP_EARG, "backward: no training forward and loss of %zu samples",
				 n);
	int rc = walk(m, n, 1, hook, hook_ctx, e);
	m->dout = NULL;
	return rc;
}

int dp_model_idle(dp_model *m, dp_grad_hook hook, void *hook_ctx, dp_err *e)
{
	int rc;
	for (int i = m->lo; i < m->hi && m->sync; i++) {
		layer *L = &m->l[i];
		double count = 0;
		if (!bn_synced(m, L))
			continue;
		if ((rc = sync_sums(m, NULL, 2 * L->in.c, &count, e)) < 0)
			return rc;
		if (count <= 0)
			continue;
		/* the running statistics move as on the other ranks: from the
		 * sums of the whole batch, over no samples of this one's */
		dp_bnorm g = bnorm_geom(L, 0);
		L->count = g.count = count;
		m->be->upload(m->ctx, m->sums, m->hsums, 2 * (size_t)L->in.c * sizeof(double));
		m->be->bnorm_fwd(m->ctx, &g, 1, m->xbuf, nn_w(m, L), nn_b(m, L), nn_run(m, L),
				 nn_run(m, L) + L->in.c, m->sums, L->aux, L->ybuf);
		L->tracked++;
	}
	return walk(m, 0, 2, hook, hook_ctx, e);
}

int dp_model_predict(dp_model *m, const float *x, size_t n, float *out, dp_err *e)
{
	dp_pass p = {0};
	int rc = dp_model_forward(m, x, n, &p, e);
	if (rc < 0)
		return rc;
	size_t k = dp_model_out_size(m);
	const float *src = m->out;
	if (m->loss == DP_LOSS_XENT) {
		m->be->softmax(m->ctx, (int)n, (int)k, m->out, m->prob);
		src = m->prob;
	}
	m->be->download(m->ctx, out, src, n * k * sizeof(float));
	return m->be->sync(m->ctx, e);
}

/* ---- fine-tuning: tensors by name ------------------------------------------- */

int dp_model_set_label_smoothing(dp_model *m, double s, dp_err *e)
{
	if (!(s >= 0 && s <= 1))
		return dp_seterr(e, DP_EARG, "label smoothing %g: want 0 <= s <= 1", s);
	if (s > 0 && m->loss != DP_LOSS_XENT)
		return dp_seterr(e, DP_EARG, "label smoothing needs the cross-entropy loss");
	m->smooth = (float)s;
	return DP_OK;
}

/* Does item (without its =VALUE) select tensor t? */
static int item_selects(const dp_model *m, const char *item, const dp_tensor_info *t)
{
	const char *dot = strrchr(t->name, '.');
	if (!strcmp(item, "bias"))
		return dot && !strcmp(dot, ".bias");
	if (!strcmp(item, "bn"))
		return m->l[t->layer].kind == DP_LAYER_BATCHNORM;
	if (!strcmp(item, "1d"))
		return t->role == DP_TENSOR_PARAM && t->ndim == 1;
	char pre[sizeof t->name];
	for (size_t n = 0; t->name[n]; n++) /* "3" of "3.weight", "layer1" of "layer1.0.x" */
		if (t->name[n] == '.') {
			memcpy(pre, t->name, n);
			pre[n] = 0;
			if (fnmatch(item, pre, 0) == 0)
				return 1;
		}
	return fnmatch(item, t->name, 0) == 0;
}

/* dp_model_select over the tensors of the whole graph (sel: nn_ntensors(m, 1)
 * of them): a stage's patterns name tensors of other stages too. */
static int select_all(const dp_model *m, const char *patterns, int *sel, dp_err *e)
{
	int nt = nn_ntensors(m, 1);
	for (int i = 0; i < nt; i++)
		sel[i] = 0;
	if (!patterns)
		return DP_OK;
	int k = 0;
	for (const char *p = patterns;; k++) {
		const char *end = strchr(p, ','), *eq;
		size_t len = end ? (size_t)(end - p) : strlen(p);
		char item[128];
		eq = memchr(p, '=', len);
		size_t il = eq ? (size_t)(eq - p) : len;
		if (!il || il >= sizeof item)
			return dp_seterr(e, DP_EARG, "'%s': item %d is %s", patterns, k + 1,
					 il ? "too long" : "empty");
		memcpy(item, p, il);
		item[il] = 0;
		int any = 0;
		for (int i = 0; i < nt; i++) {
			dp_tensor_info t;
			nn_tensor(m, i, 1, &t);
			if (item_selects(m, item, &t)) {
				any = 1;
				if (!sel[i])
					sel[i] = k + 1;
			}
		}
		if (!any)
			return dp_seterr(e, DP_EARG, "'%s' selects no tensor of the model (names: "
					 "0.weight, 0.bias, ...: see --summary)", item);
		if (!end)
			break;
		p = end + 1;
	}
	return DP_OK;
}

int dp_model_select(const dp_model *m, const char *patterns, int *sel, dp_err *e)
{
	int nt = nn_ntensors(m, 1), base = nt - nn_ntensors(m, 0), rc;
	for (int i = m->hi; i < m->n; i++) /* the stage's tensors: [base, base + its count) */
		base -= m->l[i].kind == DP_LAYER_BATCHNORM ? 5 : m->l[i].wn ? 1 + (m->l[i].bn > 0) : 0;
	int *all = calloc((size_t)nt + 1, sizeof *all);
	if (!all)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	if ((rc = select_all(m, patterns, all, e)) == DP_OK)
		memcpy(sel, all + base, (size_t)nn_ntensors(m, 0) * sizeof *sel);
	free(all);
	return rc;
}

int dp_model_freeze(dp_model *m, const char *patterns, dp_err *e)
{
	int nt = nn_ntensors(m, 1);
	int *sel = calloc((size_t)nt + 1, sizeof *sel);
	if (!sel)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	int rc = select_all(m, patterns, sel, e);
	if (rc == DP_OK) { /* every layer's, a stage's or not: which need gradients */
		for (int i = 0; i < m->n; i++)
			m->l[i].frozen = m->l[i].wn > 0;
		for (int i = 0; i < nt; i++) {
			dp_tensor_info t;
			nn_tensor(m, i, 1, &t);
			if (t.role == DP_TENSOR_PARAM && !sel[i])
				m->l[t.layer].frozen = 0;
		}
		nn_plan_grads(m);
		/* a frozen layer's gradients: zeros from here on (backward no
		 * longer clears those of a frozen start; the optimizer and the
		 * allreduce leave zeros zeros) */
		for (int i = m->lo; i < m->hi && m->grads; i++)
			if (m->l[i].frozen)
				m->be->fill(m->ctx, nn_dw(m, &m->l[i]), 0, m->l[i].wn + m->l[i].bn);
		rc = nn_plan_memory(m, e); /* what the frozen layers made is kept no more */
	}
	free(sel);
	return rc;
}

void dp_model_set_sync(dp_model *m, dp_sum_fn sum, void *ctx)
{
	m->sync = sum;
	m->sync_ctx = ctx;
}
