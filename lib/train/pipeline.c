/*
 * pipeline.c - a model in stages across ranks (dp_train.h's pipelines):
 * the plan (which rank runs which stage, the micro-batches), a step's
 * micro-batches through the stages on the GPipe or the 1F1B schedule,
 * the stage's update over its replicas, and the whole model's checkpoint
 * from the stages' parts.
 *
 * Messages (dp_comm_send, dp_comm_recv: host memory, sends never wait
 * for their receiver) carry no header: every rank of a replica knows the
 * step's samples from dp_step_agree and cuts them into micro-batches
 * alike (as evenly as they go), so each message's length is known to
 * both sides and checked.  Between two neighbours, activations go under
 * one tag and gradients under another, each in micro-batch order; the
 * labels of a step go from the first stage to the last under a third.
 *
 * A stage with nothing to train before it (a frozen start of the model)
 * sends no gradient back, and one with nothing to train at all has no
 * backward pass (dp_model_stage_trains, _wants_dx: the two sides agree).
 *
 * Limits: --sync-bn is refused (its sums would be collectives of each
 * micro-batch, in a different order on each stage); messages are
 * staged through host memory on every backend.
 */
#define _GNU_SOURCE
#include "train_impl.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TAG_ACT 11
#define TAG_GRAD 12
#define TAG_LABELS 13
#define TAG_PART 14
#define TAG_EVAL 15     /* a validation batch's size, stage to stage */
#define TAG_EVAL_ACT 16 /* its activations */
#define TAG_EVAL_LAB 17 /* its labels, first stage to last */

int dp_pipe_schedule_parse(const char *s)
{
	return !strcmp(s, "1f1b") ? DP_PIPE_1F1B : !strcmp(s, "gpipe") ? DP_PIPE_GPIPE : -1;
}

const char *dp_pipe_schedule_name(int s) { return s == DP_PIPE_GPIPE ? "gpipe" : "1f1b"; }

/* The plan of conf for rank of size, the cut of m's graph. */
static int plan_of(dp_model *m, const dp_step_conf *conf, int rank, int size, dp_pipe_plan *p,
		   dp_err *e)
{
	int S = conf->stages;
	memset(p, 0, sizeof *p);
	if (S < 2 || S > DP_MAX_STAGES)
		return dp_seterr(e, DP_EARG, "%d pipeline stages: want 2 to %d", S, DP_MAX_STAGES);
	if (size % S)
		return dp_seterr(e, DP_EARG,
				 "%d ranks for %d pipeline stages: start stages x replicas ranks "
				 "(mpirun -np %d, %d, ...)",
				 size, S, S, 2 * S);
	if (conf->micro > conf->batch)
		return dp_seterr(e, DP_EARG,
				 "%" PRIu64 " micro-batches of a step of %" PRIu64 " samples: at most "
				 "one a sample",
				 conf->micro, conf->batch);
	p->stages = S;
	p->replicas = size / S;
	p->stage = rank % S;
	p->replica = rank / S;
	p->micro = dp_pipe_micro(conf);
	p->micro_batch = (size_t)((conf->batch + p->micro - 1) / p->micro);
	uint64_t flight = conf->schedule == DP_PIPE_GPIPE ? p->micro : (uint64_t)(S - p->stage);
	p->slots = (int)(flight < p->micro ? flight : p->micro);
	return dp_model_cuts(m, S, NULL, p->first, e);
}

int dp_pipe_plan_model(dp_model *m, const dp_step_conf *conf, int rank, int size, dp_pipe_plan *p,
		       dp_err *e)
{
	int rc = plan_of(m, conf, rank, size, p, e);
	if (rc == DP_OK)
		rc = dp_model_set_stage(m, p->first[p->stage], p->first[p->stage + 1], e);
	if (rc == DP_OK)
		rc = dp_model_set_slots(m, p->slots, e);
	return rc;
}

void pipe_free(dp_trainer *t)
{
	pipe *p = t->p;
	if (!p)
		return;
	dp_comm_close(p->grp);
	if (p->xin)
		t->be->host_free(t->ctx, p->xin);
	if (p->lab)
		t->be->host_free(t->ctx, p->lab);
	free(p->msg);
	free(p);
	t->p = NULL;
}

int pipe_open(dp_trainer *t, dp_err *e)
{
	pipe *p = calloc(1, sizeof *p);
	if (!p)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	t->p = p;
	int rc = plan_of(t->m, &t->conf, t->rank, t->size, &p->plan, e), first, end;
	if (rc < 0)
		return rc;
	const dp_pipe_plan *pl = &p->plan;
	dp_model_stage(t->m, &first, &end);
	if (first != pl->first[pl->stage] || end != pl->first[pl->stage + 1] ||
	    dp_model_slots(t->m) < pl->slots || dp_model_max_batch(t->m) < pl->micro_batch)
		return dp_seterr(e, DP_EARG, "pipeline: the model is not set up for stage %d (call "
				 "dp_pipe_plan_model before binding it)", pl->stage);
	if (t->conf.sync_bn)
		return dp_seterr(e, DP_EARG, "--sync-bn with pipeline stages: not supported (its sums "
				 "would be collectives of every micro-batch of every stage)");
	p->prev = pl->stage > 0 ? t->rank - 1 : -1;
	p->next = pl->stage < pl->stages - 1 ? t->rank + 1 : -1;
	p->first_rank = t->rank - pl->stage;
	p->in_sz = dp_model_stage_in(t->m);
	p->out_sz = dp_model_stage_out(t->m);
	p->lab_sz = t->xent ? sizeof(int32_t) : dp_model_out_size(t->m) * sizeof(float);
	size_t most = p->in_sz > p->out_sz ? p->in_sz : p->out_sz;
	if (!(p->grp = dp_comm_split(t->c, pl->stage, pl->replica, e)))
		return e ? e->code : DP_ENOMEM;
	if (!(p->msg = malloc(pl->micro_batch * most * sizeof(float) + 64)) ||
	    (pl->stage > 0 &&
	     !(p->xin = t->be->host_alloc(t->ctx, (size_t)pl->slots * pl->micro_batch * p->in_sz *
							  sizeof(float)))))
		return dp_seterr(e, DP_ENOMEM, "pipeline: out of memory for the messages");
	p->st.theory = (double)(pl->stages - 1) / (double)(pl->micro + (uint64_t)pl->stages - 1);
	return DP_OK;
}

int pipe_agree(dp_trainer *t, dp_step *s, dp_err *e)
{
	pipe *p = t->p;
	double t0 = dp_now();
	uint64_t n = p->plan.stage == 0 ? s->n : 0;
	int rc = dp_comm_allgather(t->c, &n, t->counts, sizeof n, e);
	if (rc < 0)
		return rc;
	int S = p->plan.stages;
	s->n = t->counts[p->first_rank];
	s->gn = 0;
	s->nout = 0;
	s->first_out = -1;
	for (int r = 0; r < t->size; r += S) {
		s->gn += t->counts[r];
		if (!t->counts[r] && s->first_out < 0)
			s->first_out = r;
		s->nout += !t->counts[r];
	}
	dp_comm_event(t->c, "agree", 1, t0, dp_now());
	return DP_OK;
}

/* The micro-batches of n samples: k of them (at most M), micro-batch i
 * from sample off(i), len(i) long, as evenly as they go. */
static uint64_t n_micro(const pipe *p, uint64_t n) { return n < p->plan.micro ? n : p->plan.micro; }
static uint64_t off_of(uint64_t n, uint64_t k, uint64_t i)
{
	uint64_t b = n / k, x = n % k;
	return i * b + (i < x ? i : x);
}
static size_t len_of(uint64_t n, uint64_t k, uint64_t i) { return (size_t)(n / k + (i < n % k)); }

/* The operations of a stage's step over k micro-batches: 'F' or 'B' and
 * the micro-batch, into ops (2k of them). */
static void schedule(const pipe *p, int sched, uint64_t k, char *kind, uint64_t *mb)
{
	uint64_t j = 0, S = (uint64_t)p->plan.stages, s = (uint64_t)p->plan.stage;
	if (sched == DP_PIPE_GPIPE) {
		for (uint64_t i = 0; i < k; i++, j++)
			kind[j] = 'F', mb[j] = i;
		for (uint64_t i = 0; i < k; i++, j++)
			kind[j] = 'B', mb[j] = i;
		return;
	}
	uint64_t warm = S - s - 1 < k ? S - s - 1 : k, f = 0, b = 0;
	for (; f < warm; f++, j++)
		kind[j] = 'F', mb[j] = f;
	for (; f < k; f++, b++) {
		kind[j] = 'F', mb[j++] = f;
		kind[j] = 'B', mb[j++] = b;
	}
	for (; b < k; b++, j++)
		kind[j] = 'B', mb[j] = b;
}

/* A host copy of (dev) floats for a message: the memory itself where the
 * backend's is the host's. */
static const float *host_of(dp_trainer *t, const float *dev, size_t n)
{
	if (t->be->caps & DP_CAP_HOST_MEMORY)
		return dev;
	t->be->download(t->ctx, t->p->msg, dev, n * sizeof(float));
	return t->p->msg;
}

/* Micro-batch i's forward pass (len samples, from sample off of the step). */
static int forward(dp_trainer *t, const dp_step *s, uint64_t step, uint64_t i, uint64_t off,
		   size_t len, double *busy, dp_err *e)
{
	pipe *p = t->p;
	int slot = (int)(i % (uint64_t)p->plan.slots), rc;
	const float *x;
	if (p->prev < 0) {
		x = s->x + off * p->in_sz;
	} else {
		float *in = p->xin + (size_t)slot * p->plan.micro_batch * p->in_sz;
		double w = dp_now();
		if ((rc = dp_comm_recv(t->c, in, len * p->in_sz * sizeof(float), p->prev, TAG_ACT,
				       "activations from the stage before", e)) < 0)
			return rc;
		dp_comm_event(t->c, "recv", 1, w, dp_now());
		x = in;
	}
	double t0 = dp_now();
	dp_pass pass = {1, t->conf.seed, step,
			(t->micro * (uint64_t)p->plan.replicas + (uint64_t)p->plan.replica) *
				    t->conf.batch + off};
	if ((rc = dp_model_use_slot(t->m, slot, e)) < 0 ||
	    (rc = dp_model_forward(t->m, x, len, &pass, e)) < 0)
		return rc;
	if (p->next >= 0) {
		const float *y = host_of(t, dp_model_output(t->m), len * p->out_sz);
		if ((rc = dp_comm_send(t->c, y, len * p->out_sz * sizeof(float), p->next, TAG_ACT, e)) <
		    0)
			return rc;
	}
	double t1 = dp_now();
	*busy += t1 - t0;
	dp_comm_event(t->c, "forward", 1, t0, t1);
	return DP_OK;
}

/* Micro-batch i's backward pass; its gradients added to the update's. */
static int backward(dp_trainer *t, uint64_t i, uint64_t off, size_t len, float scale,
		    dp_step_result *r, double *busy, dp_err *e)
{
	pipe *p = t->p;
	int slot = (int)(i % (uint64_t)p->plan.slots), rc;
	if (!dp_model_stage_trains(t->m))
		return DP_OK; /* frozen: no gradient comes, none goes */
	if ((rc = dp_model_use_slot(t->m, slot, e)) < 0)
		return rc;
	double t0 = dp_now();
	if (p->next < 0) {
		double st[2] = {0, 0};
		rc = dp_model_loss(t->m, (const char *)p->lab + off * p->lab_sz, len, scale, 1, st, e);
		if (rc < 0)
			return rc;
		r->loss += st[0];
		t->pend_loss += st[0];
		t->pend_correct += st[1];
		t->pend_samples += len;
		if (!isfinite(st[0]))
			return dp_seterr(e, DP_EDATA, "loss is %s", isnan(st[0]) ? "NaN" : "infinite");
	} else {
		double w = dp_now();
		if ((rc = dp_comm_recv(t->c, p->msg, len * p->out_sz * sizeof(float), p->next, TAG_GRAD,
				       "gradients from the stage after", e)) < 0)
			return rc;
		t0 = dp_now();
		dp_comm_event(t->c, "recv", 1, w, t0);
		if ((rc = dp_model_set_output_grad(t->m, p->msg, len, e)) < 0)
			return rc;
	}
	if ((rc = dp_model_backward(t->m, len, NULL, NULL, e)) < 0)
		return rc;
	if (p->prev >= 0 && dp_model_stage_wants_dx(t->m)) {
		const float *dx = host_of(t, dp_model_input_grad(t->m), len * p->in_sz);
		if ((rc = dp_comm_send(t->c, dx, len * p->in_sz * sizeof(float), p->prev, TAG_GRAD,
				       e)) < 0)
			return rc;
	}
	float *g = dp_model_grads(t->m);
	size_t np = dp_model_nparams(t->m);
	if (p->st.micro++, t->pend_micro++ == 0)
		t->be->copy(t->ctx, t->acc, g, np * sizeof *g);
	else
		dp_grads_add(t->be, t->ctx, t->acc, g, np);
	double t1 = dp_now();
	*busy += t1 - t0;
	dp_comm_event(t->c, "backward", 1, t0, t1);
	return DP_OK;
}

/* The labels of the step, from the first stage to the last. */
static int labels(dp_trainer *t, const dp_step *s, dp_err *e)
{
	pipe *p = t->p;
	size_t bytes = s->n * p->lab_sz;
	if (p->prev < 0)
		return dp_comm_send(t->c, s->y, bytes, p->first_rank + p->plan.stages - 1, TAG_LABELS,
				    e);
	if (p->next >= 0)
		return DP_OK;
	if (bytes > p->lab_cap) {
		if (p->lab)
			t->be->host_free(t->ctx, p->lab);
		p->lab_cap = 0;
		if (!(p->lab = t->be->host_alloc(t->ctx, t->conf.batch * p->lab_sz)))
			return dp_seterr(e, DP_ENOMEM, "pipeline: out of memory for the labels");
		p->lab_cap = t->conf.batch * p->lab_sz;
	}
	double w = dp_now();
	int rc = dp_comm_recv(t->c, p->lab, bytes, p->first_rank, TAG_LABELS,
			      "labels from the first stage", e);
	dp_comm_event(t->c, "recv", 1, w, dp_now());
	return rc;
}

/* The update: the stage's gradients summed over its replicas, applied. */
static int update(dp_trainer *t, double lr, dp_err *e)
{
	pipe *p = t->p;
	float *g = dp_model_grads(t->m);
	size_t np = dp_model_nparams(t->m);
	if (t->pend_micro)
		t->be->copy(t->ctx, g, t->acc, np * sizeof *g);
	else /* no micro-batch here (this replica's data is over), or a frozen stage */
		t->be->fill(t->ctx, g, 0, np);
	double t0 = dp_now();
	int rc = dp_comm_grads_begin(p->grp, g + t->glo, np - t->glo, e);
	if (rc == 0 && np > t->glo)
		rc = dp_comm_grads_ready(p->grp, 0, np - t->glo, e);
	if (rc == 0)
		rc = dp_comm_grads_wait(p->grp, e);
	dp_comm_event(t->c, "allreduce", 1, t0, dp_now());
	return rc < 0 ? rc : train_apply(t, lr, e);
}

int pipe_step(dp_trainer *t, const dp_step *s, uint64_t step, double lr, int last,
	      dp_step_result *r, dp_err *e)
{
	pipe *p = t->p;
	memset(r, 0, sizeof *r);
	uint64_t k = n_micro(p, s->n);
	float scale = 1.0f / (float)(t->conf.accumulate == 1 ? s->gn : train_full(t));
	double t0 = dp_now(), busy = 0;
	int rc = DP_OK;
	char *kind = malloc(2 * k + 1);
	uint64_t *mb = malloc((2 * k + 1) * sizeof *mb);
	if (!kind || !mb) {
		rc = dp_seterr(e, DP_ENOMEM, "out of memory");
		goto out;
	}
	if (k && (rc = labels(t, s, e)) < 0)
		goto out;
	schedule(p, t->conf.schedule, k, kind, mb);
	for (uint64_t j = 0; j < 2 * k && rc == DP_OK; j++) {
		uint64_t i = mb[j], off = off_of(s->n, k, i);
		size_t len = len_of(s->n, k, i);
		rc = kind[j] == 'F' ? forward(t, s, step, i, off, len, &busy, e)
				    : backward(t, i, off, len, scale, r, &busy, e);
	}
	if (rc == DP_OK)
		rc = dp_comm_send_wait(t->c, e);
	if (rc < 0)
		goto out;
	if (k) {
		p->st.steps++;
		p->st.step_time += dp_now() - t0;
		p->st.busy_time += busy;
	}
	t->micro_gn += s->gn;
	t->micro++;
	if (!last)
		goto out;
	if ((rc = update(t, lr, e)) == DP_OK)
		train_updated(t, r);
out:
	free(kind);
	free(mb);
	return rc;
}

/* Validation batch b (n samples: 0 on a first stage at the data's end)
 * through this stage in pieces of the micro-batch size; the last stage
 * adds the outputs to ev. */
static int eval_batch(dp_trainer *t, dp_eval *ev, const dp_batch *b, uint64_t n, float *out,
		      dp_err *e)
{
	pipe *p = t->p;
	size_t mb = p->plan.micro_batch, k = dp_model_out_size(t->m);
	int cls = dp_eval_kind(ev) == DP_EVAL_CLASS, rc;
	void *lab = p->lab;
	if (p->prev < 0 && p->next < 0)
		return dp_seterr(e, DP_EARG, "eval: a pipeline of one stage");
	if (p->prev < 0 && (rc = dp_comm_send(t->c, cls ? (const void *)b->y : b->t, n * p->lab_sz,
					     p->first_rank + p->plan.stages - 1, TAG_EVAL_LAB, e)) < 0)
		return rc;
	if (p->next < 0 && (rc = dp_comm_recv(t->c, lab, n * p->lab_sz, p->first_rank,
					     TAG_EVAL_LAB, "validation labels", e)) < 0)
		return rc;
	for (uint64_t off = 0; off < n; off += mb) {
		size_t len = (size_t)(n - off < mb ? n - off : mb);
		const float *x = p->xin;
		if (p->prev < 0)
			x = b->x + off * p->in_sz;
		else if ((rc = dp_comm_recv(t->c, p->xin, len * p->in_sz * sizeof(float), p->prev,
					    TAG_EVAL_ACT, "validation activations", e)) < 0)
			return rc;
		dp_pass pass = {0};
		if ((rc = dp_model_use_slot(t->m, 0, e)) < 0 ||
		    (rc = dp_model_forward(t->m, x, len, &pass, e)) < 0)
			return rc;
		if (p->next >= 0) {
			const float *y = host_of(t, dp_model_output(t->m), len * p->out_sz);
			if ((rc = dp_comm_send(t->c, y, len * p->out_sz * sizeof(float), p->next,
					       TAG_EVAL_ACT, e)) < 0 ||
			    (rc = dp_comm_send_wait(t->c, e)) < 0)
				return rc;
			continue;
		}
		t->be->download(t->ctx, out, dp_model_output(t->m), len * k * sizeof(float));
		if ((rc = t->be->sync(t->ctx, e)) < 0)
			return rc;
		const char *l = (const char *)lab + off * p->lab_sz;
		rc = cls ? dp_eval_add_class(ev, out, (const int32_t *)l, len, NULL, NULL, NULL, e)
			 : dp_eval_add_regression(ev, out, (const float *)l, len, NULL, e);
		if (rc < 0)
			return rc;
	}
	return DP_OK;
}

int pipe_eval(dp_trainer *t, dp_eval *ev, dp_data *d, dp_err *e)
{
	pipe *p = t->p;
	float *out = NULL;
	int rc = DP_OK;
	if (p->next < 0 && !(out = malloc(p->plan.micro_batch * dp_model_out_size(t->m) *
					   sizeof *out + 1)))
		return dp_seterr(e, DP_ENOMEM, "eval: out of memory");
	for (;;) {
		const dp_batch *b = NULL;
		uint64_t n = 0;
		if (p->prev < 0) { /* the first stage reads, and says how much */
			if ((rc = d ? dp_data_next(d, &b, e) : 0) < 0)
				break;
			n = rc == 1 ? b->n : 0;
			for (int k = 1; k < p->plan.stages && rc >= 0; k++)
				rc = dp_comm_send(t->c, &n, sizeof n, p->first_rank + k, TAG_EVAL, e);
			if (rc < 0 || (rc = dp_comm_send_wait(t->c, e)) < 0)
				break;
		} else if ((rc = dp_comm_recv(t->c, &n, sizeof n, p->first_rank, TAG_EVAL,
					      "the validation batch's size", e)) < 0) {
			break;
		}
		if (!n)
			break;
		if (p->next < 0 && n * p->lab_sz > p->lab_cap) {
			if (p->lab)
				t->be->host_free(t->ctx, p->lab);
			p->lab_cap = 0;
			if (!(p->lab = t->be->host_alloc(t->ctx, (size_t)n * p->lab_sz))) {
				rc = dp_seterr(e, DP_ENOMEM, "eval: out of memory for the labels");
				break;
			}
			p->lab_cap = (size_t)n * p->lab_sz;
		}
		if ((rc = eval_batch(t, ev, b, n, out, e)) < 0)
			break;
	}
	free(out);
	if (rc < 0)
		return rc;
	if (p->prev < 0 && d) {
		dp_data_stats st; /* exact: the pass has reached the epoch's end */
		dp_data_stats_get(d, &st);
		dp_eval_add_skipped(ev, st.corrupt);
	}
	return DP_OK;
}

int pipe_save(dp_trainer *t, const char *path, const dp_train_state *ts, const char *const *meta,
	      dp_err *e)
{
	pipe *p = t->p;
	int S = p->plan.stages, rc = DP_OK;
	if (p->plan.replica != 0)
		return DP_OK;
	size_t len = 0;
	void *mine = dp_ckpt_part(t->m, t->o, &len, e);
	if (!mine)
		return e ? e->code : DP_EDATA;
	if (t->rank != 0) { /* the length, then the part */
		uint64_t l = len;
		rc = dp_comm_send(t->c, &l, sizeof l, 0, TAG_PART, e);
		if (rc == 0)
			rc = dp_comm_send(t->c, mine, len, 0, TAG_PART, e);
		if (rc == 0)
			rc = dp_comm_send_wait(t->c, e);
		free(mine);
		return rc;
	}
	void *parts[DP_MAX_STAGES] = {mine};
	size_t lens[DP_MAX_STAGES] = {len};
	for (int k = 1; k < S && rc == DP_OK; k++) {
		uint64_t l = 0;
		rc = dp_comm_recv(t->c, &l, sizeof l, k, TAG_PART, "the checkpoint's parts", e);
		if (rc == 0 && !(parts[k] = malloc(l ? (size_t)l : 1)))
			rc = dp_seterr(e, DP_ENOMEM, "%s: out of memory for stage %d's tensors", path,
				       k);
		if (rc == 0)
			rc = dp_comm_recv(t->c, parts[k], (size_t)l, k, TAG_PART,
					  "the checkpoint's parts", e);
		lens[k] = (size_t)l;
	}
	if (rc == DP_OK)
		rc = dp_ckpt_save_parts(path, t->m, t->o, (const void *const *)parts, lens, S, ts, meta,
					e);
	for (int k = 0; k < S; k++)
		free(parts[k]);
	return rc;
}

int dp_trainer_pipe(const dp_trainer *t, dp_pipe_plan *p, dp_pipe_stats *st)
{
	if (!t->p)
		return 0;
	if (p)
		*p = t->p->plan;
	if (st)
		*st = t->p->st;
	return 1;
}
