/*
 * resume.c - a run that starts from a checkpoint (dp_train.h, "starting
 * from a checkpoint"): the model the checkpoint holds against the one to
 * train, said in words a user can act on (another model or input shape,
 * or the same layers trained with another loss: give that loss).
 */
#define _GNU_SOURCE
#include "dp_train.h"

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
