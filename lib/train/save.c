/*
 * save.c - a run's checkpoint (dp_train.h, dp_run): the weights, the
 * optimizer and where the run is (dp_trainer_save), with the run's
 * settings (dp_run_conf_meta) and what resuming needs beside them: every
 * rank's place in its epoch, training control's state, the convolution
 * algorithms, the class names the records gave.
 */
#define _GNU_SOURCE
#include "dp_train.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

/* The class names the training records gave (image/class/text), once
 * every class was met under one name: into the checkpoints from then on. */
static void records_classes(dp_run *r)
{
	char *json = r->c->classes ? NULL : dp_run_data_classes(r->td);
	if (json) {
		free(r->classes_json);
		r->c->classes = r->classes_json = json;
	}
}

int dp_run_save(dp_run *r, const char *tmpl, const char *prog, char **path, dp_err *e)
{
	dp_run_conf *c = r->c;
	const dp_train_state *ts = &r->ts;
	*path = NULL;
	if (dp_trainer_average_buffers(r->tr, e) < 0)
		return dp_preferr(e, "batchnorm statistics");
	char producer[64], sb[24], eb[24];
	snprintf(producer, sizeof producer, "%s %s", prog, dp_version());
	snprintf(sb, sizeof sb, "%" PRIu64, ts->step);
	snprintf(eb, sizeof eb, "%" PRIu64, ts->epoch);
	const char *vars[] = {"step", sb, "epoch", eb, NULL};
	char *p = dp_expand(tmpl, vars), *posb = NULL, *algos = NULL, *cst = NULL, **meta = NULL;
	int rc = -1;
	if (!p) {
		dp_seterr(e, DP_ENOMEM, "out of memory");
		goto out;
	}
	/* every rank's position in the epoch: a batch with a skipped image
	 * took more records than its size, so batches do not tell it */
	if (!(posb = dp_trainer_epoch_records(r->tr, r->comm, r->data_pos, ts->epoch_step != 0, e))) {
		dp_preferr(e, "checkpoint");
		goto out;
	}
	algos = dp_backend_conv_algos_text(r->be, r->ctx);
	if (r->ctl_on && !(cst = dp_control_state_format(&r->cs, e)))
		goto out;
	c->control_state = cst ? cst : "";
	const char *extra[] = {"epoch_records", posb, "producer", producer,
			       algos && *algos ? "conv_algos" : NULL, algos, NULL};
	c->ranks = r->reps;
	records_classes(r);
	if (!(meta = dp_run_conf_meta(c, extra, e)))
		goto out;
	/* DP_EDATA: the weights are not finite */
	if ((rc = dp_trainer_save(r->tr, p, ts, (const char *const *)meta, e)) == 0)
		*path = p, p = NULL;
out:
	c->control_state = NULL;
	free(p);
	free(posb);
	free(meta);
	free(algos);
	free(cst);
	return rc < 0 ? (e->code < 0 ? e->code : DP_EIO) : 0;
}
