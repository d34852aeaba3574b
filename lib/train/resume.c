/*
 * resume.c - a run that starts from a checkpoint (dp_train.h, "starting
 * from a checkpoint"): the model the checkpoint holds against the one to
 * train, said in words a user can act on (another model or input shape,
 * or the same layers trained with another loss: give that loss); and a
 * run resumed: its optimizer state, where it was, and where each replica
 * was in its data, when the job reads it as the one that saved did.
 * Another number of ranks (replicas) resumes only with the same global
 * batch, its data split between the ranks (dp_run_resume_ranks).
 */
#define _GNU_SOURCE
#include "dp_train.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

int dp_run_check_model(const dp_st *ck, const dp_model *m, dp_err *e)
{
	dp_model *cm = dp_ckpt_model(ck, e);
	if (!cm)
		return -1;
	if (dp_model_same(cm, m)) {
		dp_model_free(cm);
		return 0;
	}
	char a[64], b[64];
	dp_shape ci = dp_model_input(cm), mi = dp_model_input(m);
	int lc = dp_model_loss_kind(cm), lm = dp_model_loss_kind(m);
	dp_shape_format(&ci, a, sizeof a);
	dp_shape_format(&mi, b, sizeof b);
	if (lc != lm && !strcmp(dp_model_spec(cm), dp_model_spec(m)) && !strcmp(a, b))
		dp_seterr(e, DP_EDATA,
			  "%s: a checkpoint of model '%s' over %s trained with --loss %s, not %s "
			  "(give --loss %s)",
			  dp_st_name(ck), dp_model_spec(cm), a, dp_loss_name(lc), dp_loss_name(lm),
			  dp_loss_name(lc));
	else
		dp_seterr(e, DP_EDATA, "%s: a checkpoint of model '%s' over %s, not '%s' over %s",
			  dp_st_name(ck), dp_model_spec(cm), a, dp_model_spec(m), b);
	dp_model_free(cm);
	return DP_EDATA;
}

int dp_run_resume(const dp_st *ck, dp_model *m, dp_optim *o, const dp_run_conf *c, int reps, int replica,
		  int split, dp_train_state *ts, uint64_t *pos, int *moved, dp_err *e)
{
	*moved = 0;
	if (dp_ckpt_load_optim(ck, o, m, e) < 0 || dp_ckpt_train_state(ck, ts, e) < 0)
		return -1;
	if (c->given[DP_RUN_SEED] && c->seed != ts->seed)
		return dp_seterr(e, DP_EDATA,
				 "%s: saved with --seed %" PRIu64 ", not %" PRIu64
				 ": resuming needs the same seed",
				 dp_st_name(ck), ts->seed, c->seed);
	dp_run_conf saved; /* as the checkpoint has them, given or not */
	static const int keys[] = {DP_RUN_BATCH, DP_RUN_ACCUMULATE, -1};
	dp_run_conf_init(&saved);
	saved.batch = c->batch; /* none saved: this run's */
	int rc = dp_run_conf_from(&saved, ck, keys, e);
	/* the same ranks, batch and accumulation: the saved positions hold */
	int same = c->ranks == reps && saved.batch == c->batch && saved.accumulate == c->accumulate;
	if (rc == 0 && !same && ts->epoch < c->epochs)
		rc = dp_run_resume_ranks(ck, &saved, c->ranks, c, reps, split, moved, e);
	dp_run_conf_free(&saved);
	if (rc < 0)
		return -1;
	/* this replica's position in the epoch, when the job reads as it did
	 * (else the batches of the epoch so far are counted again) */
	if (same && ts->epoch_step && dp_run_epoch_records(ck, c->ranks, replica, pos, e) < 0)
		return -1;
	return 0;
}
