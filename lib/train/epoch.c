/*
 * epoch.c - the bookkeeping of a run's epochs (dp_train.h, dp_run): where
 * an epoch starts (the rest of it, resuming), the job's next micro-batch,
 * the learning rate of an update, a step and its sums, and the input's
 * share of the epoch with the images it skipped.  The loop itself, what
 * it decides and says, is the tool's (tools/dp-train.c): a step is
 *     dp_run_next   the next batch, every rank's samples in it
 *     dp_run_step   forward, loss, backward, the update (dp_step_run)
 * Under mpirun every rank makes the same calls in the same order.
 */
#define _GNU_SOURCE
#include "dp_train.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

int dp_run_epoch_begin(dp_run *r, uint64_t epoch, dp_err *e)
{
	uint64_t skip = epoch == r->ts.epoch ? r->ts.epoch_step : 0;
	r->ts.epoch = epoch;
	r->ts.epoch_step = skip;
	r->out = 0;
	r->fail = DP_RUN_FAIL_RANK;
	if (r->td && dp_data_epoch_at(r->td, epoch, skip * r->c->accumulate, skip ? r->resume_pos : 0, e) < 0)
		return dp_preferr(e, "train");
	r->data_pos = skip ? r->resume_pos : 0;
	r->resume_pos = 0;
	r->epoch_t0 = dp_now();
	return 0;
}

int dp_run_next(dp_run *r, dp_step *s, double *t0, dp_err *e)
{
	memset(s, 0, sizeof *s);
	*t0 = dp_now();
	r->fail = DP_RUN_FAIL_RANK;
	if (!r->td) /* a pipeline's later stage: the first stage's counts come */
		r->out = 1;
	if (!r->out) {
		const dp_batch *b;
		int rc = dp_data_next(r->td, &b, e);
		if (rc < 0)
			return dp_preferr(e, "train");
		if (rc == 0) {
			r->out = 1;
		} else {
			*s = (dp_step){.x = b->x, .y = r->xent ? (const void *)b->y : b->t, .n = b->n};
			r->data_pos = b->pos;
		}
	}
	dp_comm_event(r->comm, "data", 1, *t0, dp_now());
	if (dp_step_agree(r->tr, s, e) < 0)
		return dp_preferr(e, "train");
	return 0;
}

/* The schedule over --lr (times the ranks with --scale-lr, or the rate a
 * plateau holds), then the ramps of --warmup (dp_sched) and
 * --warmup-epochs (from the single-worker rate, Horovod's recipe). */
double dp_run_rate(const dp_run *r, uint64_t epoch, uint64_t step)
{
	const dp_run_conf *c = r->c;
	double base = r->ctl.plateau ? r->cs.lr : c->lr * (c->scale_lr ? r->reps : 1);
	double lr = dp_sched_lr(&r->sched, base, epoch, step);
	if (r->ramp && step < r->ramp && c->scale_lr && r->reps > 1) {
		double f0 = 1.0 / r->reps;
		lr *= f0 + (1 - f0) * (double)step / (double)r->ramp;
	}
	return lr;
}

int dp_run_step(dp_run *r, uint64_t epoch, const dp_step *s, double t0, double *loss, dp_err *e)
{
	dp_step_result res = {0};
	r->fail = DP_RUN_FAIL_RANK;
	r->lr = dp_run_rate(r, epoch, r->ts.step);
	int rc = s ? dp_step_run(r->tr, s, r->ts.step, r->lr, &res, e)
		   : dp_step_flush(r->tr, r->ts.step, r->lr, &res, e);
	*loss = res.loss;
	if (rc < 0 && isfinite(res.loss))
		dp_preferr(e, "train");
	if (rc < 0 || !res.updated)
		return rc < 0 ? rc : 0;
	r->iter_time += dp_now() - t0;
	r->iters++;
	r->ts.step++;
	r->ts.epoch_step++;
	r->mt.loss += res.loss_sum;
	r->mt.correct += res.correct;
	r->mt.samples += res.samples;
	r->mt.steps++;
	return 1;
}

int dp_run_check_skipped(dp_run *r, const char *what, uint64_t epoch, uint64_t skipped,
			 uint64_t read, dp_err *e)
{
	double frac = read ? (double)skipped / (double)read : 0;
	int pct = !strcmp(r->skip_gate.metric, "skipped_fraction");
	if (dp_gate_pass(&r->skip_gate, pct ? frac : (double)skipped))
		return 0;
	r->fail = DP_RUN_FAIL_JOB;
	return dp_seterr(e, DP_ELIMIT, "epoch %" PRIu64 ": %s: %" PRIu64 " of %" PRIu64 " records (%.3g%%) "
			 "skipped as corrupt, more than --max-skipped %s allows: the model would be "
			 "trained or judged on a part of the data",
			 epoch + 1, what, skipped, read, 100 * frac,
			 r->max_skipped ? r->max_skipped : DP_MAX_SKIPPED_DEFAULT);
}

int dp_run_epoch_input(dp_run *r, uint64_t epoch, int stopped, dp_err *e)
{
	dp_data_stats ds = {0};
	if (r->td)
		dp_data_stats_get(r->td, &ds);
	double dt = dp_now() - r->epoch_t0;
	/* the job's images skipped as corrupt, of the records it decoded */
	double sk[2] = {(double)ds.corrupt, (double)(ds.corrupt + ds.samples + ds.dropped)};
	r->fail = DP_RUN_FAIL_RANK;
	if (r->skip_corrupt && dp_comm_allreduce_sum(r->comm, sk, 2, e) < 0)
		return dp_preferr(e, "train");
	/* the input's share: decoding images or on threads, and on a GPU,
	 * whose steps are short enough for the reader to be the limit */
	if (r->c->decode == DP_DECODE_IMAGE || r->decode_threads || ds.corrupt ||
	    !(r->be->caps & DP_CAP_HOST_MEMORY)) {
		char sk_note[64] = "";
		if (r->c->decode == DP_DECODE_IMAGE || ds.corrupt)
			snprintf(sk_note, sizeof sk_note, "; %.0f image%s skipped as corrupt", sk[0],
				 sk[0] == 1 ? "" : "s");
		dp_msgf(r->note, r->note_ctx, "epoch %" PRIu64 ": waited %.2f s for input (%.1f%% of %.2f s)%s",
			epoch + 1, ds.wait_s, dt > 0 ? 100 * ds.wait_s / dt : 0.0, dt, sk_note);
	}
	if (r->skip_corrupt && !stopped)
		return dp_run_check_skipped(r, "training", epoch, (uint64_t)sk[0], (uint64_t)sk[1], e);
	return 0;
}
