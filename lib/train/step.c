/*
 * step.c - one step of synchronous data-parallel training (dp_train.h):
 * what a rank does with a micro-batch under mpirun, with --accumulate,
 * --freeze and --sync-bn, in one place.
 *
 * dp_step_run: forward and loss (scaled by the job's samples of the
 * update), then either
 *  - a micro-batch before the update's last: backward, its gradients
 *    added to the sum so far (acc, on the backend), no communication; or
 *  - the update's last: backward with each layer's gradients, plus those
 *    accumulated, handed to the allreduce as the layer finishes
 *    (acc_hook -> comm_hook -> dp_comm_hook), the frozen prefix left out;
 *    a rank without samples hands over zeros (or its sum so far) layer by
 *    layer instead (idle_grads); then wait for the sums, take a short
 *    update's mean over its samples, clip, and step the optimizer.
 * The loss is queued with the forward and read (waiting for the device)
 * after the backward is queued, or, in an update's last micro-batch with
 * other ranks, before it, as that backward starts their allreduce; a loss
 * that is not finite stops the step before anything reaches the weights
 * or the sum so far.
 * The timeline gets "agree", "forward", "loss", "backward" and "update"
 * events (on a GPU, "forward" and "backward" time the queueing of the
 * work, "loss" the wait for the forward's end).
 */
#define _GNU_SOURCE
#include "train_impl.h"
#include "dp_hash.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* --sync-bn: batchnorm sums over the ranks (a dp_sum_fn). */
static int bn_sum(void *comm, double *v, size_t n, dp_err *e)
{
	return dp_comm_allreduce_sum(comm, v, n, e);
}

/* The end of the frozen start of the model: the parameters below it
 * belong to frozen layers (0: none frozen first, or every one frozen). */
static size_t frozen_prefix(const dp_model *m)
{
	size_t glo = 0;
	for (int i = 0; i < dp_model_nlayers(m); i++) {
		dp_layer_info li;
		dp_model_layer(m, i, &li);
		if (!li.staged) /* another stage's (a pipeline) */
			continue;
		if (li.nparams && !li.frozen)
			break;
		if (li.nparams)
			glo = li.param_off + li.nparams;
	}
	return glo >= dp_model_nparams(m) ? 0 : glo;
}

dp_trainer *dp_trainer_new(dp_model *m, dp_optim *o, dp_comm *c, const dp_step_conf *conf,
			   dp_err *e)
{
	dp_trainer *t = calloc(1, sizeof *t);
	if (!t) {
		dp_seterr(e, DP_ENOMEM, "trainer: out of memory");
		return NULL;
	}
	t->m = m;
	t->o = o;
	t->c = c;
	t->conf = *conf;
	if (t->conf.accumulate < 1)
		t->conf.accumulate = 1;
	t->be = dp_model_backend(m, &t->ctx);
	t->rank = dp_comm_rank(c);
	t->size = dp_comm_size(c);
	t->xent = dp_model_loss_kind(m) == DP_LOSS_XENT;
	t->glo = frozen_prefix(m);
	t->counts = calloc((size_t)t->size, sizeof *t->counts);
	if (!t->be || !t->counts) {
		if (t->be)
			dp_seterr(e, DP_ENOMEM, "trainer: out of memory");
		else
			dp_seterr(e, DP_EARG, "trainer: the model is not bound to a backend");
		dp_trainer_free(t);
		return NULL;
	}
	if ((t->conf.accumulate > 1 || t->conf.stages > 1) &&
	    !(t->acc = t->be->alloc(t->ctx, (dp_model_nparams(m) + 1) * sizeof(float)))) {
		dp_trainer_free(t);
		dp_seterr(e, DP_ENOMEM, "--accumulate: out of memory for the gradients' sum");
		return NULL;
	}
	if (t->conf.stages > 1 && pipe_open(t, e) < 0) {
		dp_trainer_free(t);
		return NULL;
	}
	if (t->conf.sync_bn && t->size > 1)
		dp_model_set_sync(m, bn_sum, c);
	return t;
}

void dp_trainer_free(dp_trainer *t)
{
	if (!t)
		return;
	pipe_free(t);
	if (t->acc)
		t->be->free(t->ctx, t->acc);
	free(t->counts);
	free(t);
}

int dp_step_agree(dp_trainer *t, dp_step *s, dp_err *e)
{
	if (t->p)
		return pipe_agree(t, s, e);
	double t0 = dp_now();
	uint64_t n = s->n;
	int rc = dp_comm_allgather(t->c, &n, t->counts, sizeof n, e);
	if (rc < 0)
		return rc;
	s->gn = 0;
	s->nout = 0;
	s->first_out = -1;
	for (int r = 0; r < t->size; r++) {
		s->gn += t->counts[r];
		if (!t->counts[r] && s->first_out < 0)
			s->first_out = r;
		s->nout += !t->counts[r];
	}
	if (t->size > 1)
		dp_comm_event(t->c, "agree", 1, t0, dp_now());
	return DP_OK;
}

/* The backward hook: a range of gradients to the allreduce, but those of
 * the frozen layers at the model's start (zeros on every rank), and at
 * offsets from glo (the allreduce sums grads + glo). */
static int comm_hook(void *ctx, int layer, size_t off, size_t count, dp_err *e)
{
	dp_trainer *t = ctx;
	if (off < t->glo)
		return DP_OK;
	return dp_comm_hook(t->c, layer, off - t->glo, count, e);
}

/* The backward hook of an update's last micro-batch: each range of its
 * gradients plus those accumulated, then to the allreduce. */
static int acc_hook(void *ctx, int layer, size_t off, size_t count, dp_err *e)
{
	dp_trainer *t = ctx;
	if (t->micro)
		dp_grads_add(t->be, t->ctx, dp_model_grads(t->m) + off, t->acc + off, count);
	return comm_hook(t, layer, off, count, e);
}

/* The gradients of a rank without samples in the update's last
 * micro-batch: zeros, or those accumulated, reported layer by layer as a
 * backward pass would (with --sync-bn's sums), so that every rank makes
 * the same collective calls. */
static int idle_grads(dp_trainer *t, dp_err *e)
{
	float *g = dp_model_grads(t->m);
	size_t np = dp_model_nparams(t->m);
	if (t->micro)
		t->be->copy(t->ctx, g, t->acc, np * sizeof *g);
	else
		t->be->fill(t->ctx, g, 0, np);
	return dp_model_idle(t->m, comm_hook, t, e);
}

/* The micro-batch's loss, queued by micro_batch (none where s->n is 0),
 * into r and the update's sums; DP_EDATA where it is not finite, and no
 * update follows. */
static int loss_read(dp_trainer *t, const dp_step *s, dp_step_result *r, dp_err *e)
{
	double st[2] = {0, 0}, t0 = dp_now();
	int rc = s->n ? dp_model_loss_wait(t->m, st, e) : DP_OK;
	if (s->n) /* on a GPU, the wait for the forward's end */
		dp_comm_event(t->c, "loss", 1, t0, dp_now());
	if (rc < 0)
		return rc;
	r->loss = st[0];
	if (!isfinite(st[0]))
		return dp_seterr(e, DP_EDATA, "loss is %s", isnan(st[0]) ? "NaN" : "infinite");
	t->pend_loss += st[0];
	t->pend_correct += st[1];
	t->pend_samples += s->n;
	t->micro_gn += s->gn;
	return DP_OK;
}

/* A micro-batch before the update's last: its gradients into acc, once its
 * loss is known to be finite. */
static int accumulate(dp_trainer *t, const dp_step *s, dp_step_result *r, dp_err *e)
{
	float *g = dp_model_grads(t->m);
	size_t np = dp_model_nparams(t->m);
	/* with --sync-bn and other ranks, the backward sums batchnorm's
	 * gradients over them: the loss is read before it */
	int early = t->conf.sync_bn && t->size > 1, rc = early ? loss_read(t, s, r, e) : DP_OK;
	if (rc == 0 && s->n)
		rc = dp_model_backward(t->m, s->n, NULL, NULL, e);
	if (rc == 0 && !early)
		rc = loss_read(t, s, r, e);
	if (rc < 0)
		return rc;
	if (!t->micro && s->n)
		t->be->copy(t->ctx, t->acc, g, np * sizeof *g);
	else if (!t->micro)
		t->be->fill(t->ctx, t->acc, 0, np);
	else if (s->n)
		dp_grads_add(t->be, t->ctx, t->acc, g, np);
	t->micro++;
	return DP_OK;
}

/* The update's last micro-batch (s->n 0: none on this rank): gradients
 * summed over the ranks, the mean over a short update's samples, clip,
 * optimizer step; r: its loss is read here (else it was), before the
 * step. */
static int update(dp_trainer *t, const dp_step *s, double lr, double t0, dp_step_result *r,
		  dp_err *e)
{
	float *g = dp_model_grads(t->m);
	size_t np = dp_model_nparams(t->m);
	int rc = dp_comm_grads_begin(t->c, g + t->glo, np - t->glo, e);
	if (rc == 0)
		rc = s->n ? dp_model_backward(t->m, s->n, acc_hook, t, e) : idle_grads(t, e);
	if (rc < 0)
		return rc;
	double t1 = dp_now();
	dp_comm_event(t->c, "backward", 1, t0, t1);
	if ((rc = dp_comm_grads_wait(t->c, e)) < 0 || (r && (rc = loss_read(t, s, r, e)) < 0))
		return rc;
	return train_apply(t, lr, e);
}

uint64_t train_full(const dp_trainer *t)
{
	return t->conf.accumulate * t->conf.batch * (uint64_t)(t->p ? t->p->plan.replicas : t->size);
}

int train_apply(dp_trainer *t, double lr, dp_err *e)
{
	double t0 = dp_now();
	float *g = dp_model_grads(t->m);
	size_t np = dp_model_nparams(t->m);
	uint64_t full = train_full(t);
	if (t->conf.accumulate > 1 && t->micro_gn != full) /* a short update */
		t->be->scale(t->ctx, g, (float)((double)full / (double)t->micro_gn), np);
	if (t->conf.clip_norm > 0) {
		/* the norm of every parameter's gradient: a pipeline's stages'
		 * (each replica's are the same: the first's are summed) */
		double ss = dp_grads_sumsq(t->be, t->ctx, g, np);
		if (ss < 0)
			return dp_seterr(e, DP_ENOMEM, "--clip-norm: out of memory");
		int rc;
		if (t->p && (ss = t->p->plan.replica ? 0 : ss,
			     (rc = dp_comm_allreduce_sum(t->c, &ss, 1, e)) < 0))
			return rc;
		dp_grads_clip_to(t->be, t->ctx, g, np, sqrt(ss), t->conf.clip_norm);
	}
	dp_optim_step(t->o, dp_model_params(t->m), g, lr);
	dp_comm_event(t->c, "update", 1, t0, dp_now());
	return DP_OK;
}

/* One micro-batch; last: it ends the update.  Its loss is read once its
 * backward pass is queued: the host queues the backward while a GPU runs
 * the forward, and the device's queue is not drained each step.  But an
 * update with other ranks reads it first, as their allreduce starts inside
 * the backward: a rank whose loss is not finite stops before it. */
static int micro_batch(dp_trainer *t, const dp_step *s, uint64_t step, double lr, int last,
		       dp_step_result *r, dp_err *e)
{
	uint64_t N = t->conf.accumulate, full = train_full(t);
	double t0 = dp_now();
	memset(r, 0, sizeof *r);
	if (s->n) {
		dp_pass pass = {1, t->conf.seed, step,
				(t->micro * (uint64_t)t->size + (uint64_t)t->rank) * t->conf.batch};
		int rc = dp_model_forward(t->m, s->x, s->n, &pass, e);
		if (rc == 0) /* scaled by the update's samples: known in advance, but at
			      * an epoch's end, where update() takes the mean */
			rc = dp_model_loss_queue(t->m, s->y, s->n,
						 1.0f / (float)(N == 1 ? s->gn : full), 1, e);
		if (rc < 0)
			return rc;
	}
	double t1 = dp_now();
	dp_comm_event(t->c, "forward", 1, t0, t1);
	if (!last) {
		int rc = accumulate(t, s, r, e);
		dp_comm_event(t->c, "backward", 1, t1, dp_now());
		return rc;
	}
	int early = t->size > 1, rc;
	if ((early && (rc = loss_read(t, s, r, e)) < 0) ||
	    (rc = update(t, s, lr, t1, early ? NULL : r, e)) < 0)
		return rc;
	train_updated(t, r);
	return DP_OK;
}

void train_updated(dp_trainer *t, dp_step_result *r)
{
	r->updated = 1;
	r->loss_sum = t->pend_loss;
	r->correct = t->pend_correct;
	r->samples = t->pend_samples;
	dp_step_drop(t);
}

int dp_step_run(dp_trainer *t, const dp_step *s, uint64_t step, double lr, dp_step_result *r,
		dp_err *e)
{
	int last = t->micro + 1 >= t->conf.accumulate;
	return t->p ? pipe_step(t, s, step, lr, last, r, e) : micro_batch(t, s, step, lr, last, r, e);
}

uint64_t dp_step_pending(const dp_trainer *t) { return t->micro; }

int dp_step_flush(dp_trainer *t, uint64_t step, double lr, dp_step_result *r, dp_err *e)
{
	dp_step none = {.first_out = -1};
	if (!t->micro) {
		memset(r, 0, sizeof *r);
		return DP_OK;
	}
	return t->p ? pipe_step(t, &none, step, lr, 1, r, e) : micro_batch(t, &none, step, lr, 1, r, e);
}

void dp_step_drop(dp_trainer *t)
{
	t->micro = t->micro_gn = t->pend_micro = 0;
	t->pend_loss = t->pend_correct = 0;
	t->pend_samples = 0;
}

/* The ranks that train the same weights as this one: the job, or its
 * stage's replicas. */
static dp_comm *replicas_comm(const dp_trainer *t) { return t->p ? t->p->grp : t->c; }

int dp_trainer_average_buffers(dp_trainer *t, dp_err *e)
{
	double t0 = dp_now();
	dp_comm *c = replicas_comm(t);
	size_t nb = dp_model_nbuffers(t->m);
	int rc = dp_comm_size(c) > 1 && nb ? dp_comm_allreduce_mean(c, dp_model_buffers(t->m), nb, e)
					   : 0;
	dp_comm_event(t->c, "average", 1, t0, dp_now());
	return rc;
}

int dp_trainer_broadcast(dp_trainer *t, dp_err *e)
{
	dp_comm *c = replicas_comm(t);
	int rc = dp_comm_bcast(c, dp_model_params(t->m), dp_model_nparams(t->m) * sizeof(float), 0, e);
	if (rc == 0)
		rc = dp_comm_bcast(c, dp_model_buffers(t->m), dp_model_nbuffers(t->m) * sizeof(float), 0,
				   e);
	return rc;
}

int dp_trainer_replicas(const dp_trainer *t, int *replica)
{
	if (replica)
		*replica = t->p ? t->p->plan.replica : t->rank;
	return t->p ? t->p->plan.replicas : t->size;
}

int dp_trainer_reads(const dp_trainer *t) { return !t->p || t->p->plan.stage == 0; }

int dp_trainer_same_as(const dp_trainer *t, int r) { return t->p ? r % t->p->plan.stages : 0; }

int dp_trainer_eval(dp_trainer *t, dp_eval *ev, dp_data *d, dp_err *e)
{
	return t->p ? pipe_eval(t, ev, d, e) : dp_eval_data(ev, t->m, d, 0, NULL, NULL, e);
}

int dp_trainer_save(dp_trainer *t, const char *path, const dp_train_state *ts,
		    const char *const *meta, dp_err *e)
{
	double t0 = dp_now();
	int rc = t->p ? pipe_save(t, path, ts, meta, e)
		      : t->rank == 0 ? dp_ckpt_save(path, t->m, t->o, ts, meta, e) : DP_OK;
	dp_comm_event(t->c, "checkpoint", 1, t0, dp_now());
	return rc;
}

int dp_trainer_state_hash(dp_trainer *t, uint64_t *hash, dp_err *e)
{
	struct {
		const float *p;
		size_t n;
	} parts[8] = {{dp_model_params(t->m), dp_model_nparams(t->m)},
		      {dp_model_buffers(t->m), dp_model_nbuffers(t->m)}};
	int np = 2;
	for (int j = 0; j < dp_optim_nstates(t->o) && np < 8; j++)
		parts[np++] = (typeof(parts[0])){dp_optim_state(t->o, j), dp_model_nparams(t->m)};
	uint64_t h = DP_FNV1A64_INIT;
	for (int i = 0; i < np; i++) {
		if (!parts[i].n)
			continue;
		float *tmp = malloc(parts[i].n * sizeof(float));
		if (!tmp)
			return dp_seterr(e, DP_ENOMEM, "out of memory");
		t->be->download(t->ctx, tmp, parts[i].p, parts[i].n * sizeof(float));
		h = dp_fnv1a64(h, tmp, parts[i].n * sizeof(float));
		free(tmp);
	}
	*hash = dp_mix64(h);
	return DP_OK;
}
