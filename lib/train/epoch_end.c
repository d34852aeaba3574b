/*
 * epoch_end.c - what a run does after an epoch's updates (dp_train.h,
 * dp_run): validation, dp-eval's pass, its figures summed over the ranks
 * (dp_eval_allreduce: they do not depend on the number of ranks and are
 * those dp-eval reports on the checkpoint for the same records); then
 * training control (dp_control_epoch), decided by every rank from the
 * job's exact sums, the same bits everywhere, each event that fires said
 * in the log and in a note.
 */
#define _GNU_SOURCE
#include "train_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

int dp_run_validate(dp_run *r, uint64_t epoch, dp_err *e)
{
	double t0 = dp_now();
	r->fail = DP_RUN_FAIL_RANK;
	dp_eval_reset(r->eval);
	if ((r->vd && dp_data_epoch(r->vd, epoch, 0, e) < 0) || dp_trainer_eval(r->tr, r->eval, r->vd, e) < 0)
		return dp_preferr(e, "val");
	dp_comm_event(r->comm, "validate", 1, t0, dp_now());
	if (dp_run_log_val(r, epoch, 1, e) < 0)
		return e->code;
	if (dp_eval_allreduce(r->eval, r->comm, NULL, 0, e) < 0)
		return dp_preferr(e, "val");
	if (dp_run_log_val(r, epoch, 0, e) < 0)
		return e->code;
	dp_eval_report rep;
	if (dp_eval_report_get(r->eval, &rep, NULL) == DP_OK)
		return dp_run_check_skipped(r, "validation", epoch, rep.skipped, rep.skipped + rep.samples, e);
	return 0;
}

int dp_run_control(dp_run *r, uint64_t epoch, double *value, dp_control_result *res, dp_err *e)
{
	dp_eval_report rep;
	if (dp_eval_report_get(r->eval, &rep, e) < 0 ||
	    dp_eval_metric(&rep, r->ctl.monitor + 4, NULL, value, e) < 0)
		return run_fail(r, DP_RUN_FAIL_SETTINGS, e, e->code, "--monitor %s: %s", r->ctl.monitor, e->msg);
	dp_control_epoch(&r->ctl, &r->cs, epoch, *value, res);
	if (dp_control_agree(r->comm, res, e) < 0)
		return e->code == DP_EDATA ? run_fail(r, DP_RUN_FAIL_JOB, e, e->code, "%s", e->msg)
					   : run_fail(r, DP_RUN_FAIL_RANK, e, e->code, "training control: %s",
						      e->msg);
	return 0;
}

int dp_run_control_log(dp_run *r, uint64_t epoch, double value, const dp_control_result *res,
		       const char *best, dp_err *e)
{
	const char *mon = r->ctl.monitor;
	char vb[32], b1[32], b2[32];
	snprintf(vb, sizeof vb, "%.6g", value);
	if (res->improved) {
		dp_buf q = DP_BUF_INIT;
		dp_buf_json_str(&q, best, strlen(best), 0);
		const char *k[] = {mon, "checkpoint"}, *v[] = {vb, q.p ? q.p : "\"\""};
		int rc = dp_run_log_event(r, epoch, "save_best", k, v, 2, e);
		dp_buf_free(&q);
		if (rc < 0)
			return rc;
	}
	if (res->reduced) {
		snprintf(b1, sizeof b1, "%.12g", res->new_lr);
		snprintf(b2, sizeof b2, "%.12g", res->old_lr);
		const char *k[] = {"lr", "previous_lr", mon}, *v[] = {b1, b2, vb};
		if (dp_run_log_event(r, epoch, "reduce_lr_on_plateau", k, v, 3, e) < 0)
			return e->code;
		dp_msgf(r->note, r->note_ctx, "epoch %" PRIu64 ": %s has not improved for %" PRIu64
			" epoch%s: the rate lowered from %g to %g (--reduce-lr-on-plateau)", epoch + 1,
			mon, r->ctl.rlr_patience, r->ctl.rlr_patience == 1 ? "" : "s", res->old_lr,
			res->new_lr);
	}
	if (res->stop) {
		snprintf(b1, sizeof b1, "%.6g", r->cs.es_best);
		snprintf(b2, sizeof b2, "%" PRIu64, r->cs.es_best_epoch + 1);
		const char *k[] = {mon, "best", "best_epoch"}, *v[] = {vb, b1, b2};
		if (dp_run_log_event(r, epoch, "early_stopping", k, v, 3, e) < 0)
			return e->code;
		dp_msgf(r->note, r->note_ctx, "epoch %" PRIu64 ": %s has not improved on %g (epoch %" PRIu64
			") for %" PRIu64 " epoch%s: stopping early (--early-stopping)", epoch + 1, mon,
			r->cs.es_best, r->cs.es_best_epoch + 1, r->cs.es_wait, r->cs.es_wait == 1 ? "" : "s");
		r->stopped = 1;
	}
	return 0;
}
