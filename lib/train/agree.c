/*
 * agree.c - what the ranks of a job share, and the checks that they are
 * alike (dp_train.h, "the ranks alike"): the checkpoint a run starts
 * from, read by rank 0 alone and sent to all (only rank 0's machine
 * needs the file); rank 0's convolution algorithms on every rank (a rank
 * whose own timing chose otherwise would keep the others waiting, and
 * compute other bits); each replica's position in its data for a
 * checkpoint; and at the end, every rank's weights and optimizer state
 * against those of the rank it must equal; and first of all, the
 * settings every rank must share, one a line, for dp_comm_check_same.
 *
 * Every function here is a collective: each rank of the job calls it at
 * the same point.
 */
#define _GNU_SOURCE
#include "train_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *train_allgather(dp_comm *c, const void *mine, size_t n, dp_err *e)
{
	void *all = calloc((size_t)dp_comm_size(c), n);
	if (!all)
		return dp_seterr(e, DP_ENOMEM, "out of memory"), NULL;
	if (dp_comm_allgather(c, mine, all, n, e) < 0) {
		free(all);
		return NULL;
	}
	return all;
}

/* A pattern's text (none: ""). */
static const char *pat(const char *v) { return v && *v ? v : ""; }

char *dp_job_settings_text(const dp_run_conf *c, const dp_job_settings *j, dp_comm *comm)
{
	char *t = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&t, &len);
	if (!f)
		return NULL;
	const dp_optim_conf *oc = &c->opt;
	char a[40], b[40], d[40], g[40], h[40], k[40], l[40], m[40], sc[40], cn[40];
	/* first: the stages decide which ranks are replicas (the data's split) */
	fprintf(f, "pipeline_stages=%d\nmicro_batches=%" PRIu64 "\npipeline_schedule=%s\n", j->stages,
		j->micro, dp_pipe_schedule_name(j->schedule));
	fprintf(f,
		"build=%s\nbackend=%s\nmpi=%s\nresume=%d\ninit=%d\nsummary=%d\nscale=%s\n"
		"model=%s\ninput_shape=%s\nloss=%s\nbatch_size=%" PRIu64
		"\nepochs=%" PRIu64 "\nmax_steps=%" PRIu64 "\noptimizer=%s\nlr=%s\nmomentum=%s\n"
		"dampening=%s\nnesterov=%d\nbetas=%s,%s\neps=%s\nweight_decay=%s\nlr_schedule=%s\n"
		"warmup=%" PRIu64 "\nwarmup_epochs=%s\nscale_lr=%d\nseed=%" PRIu64
		"\nshuffle_buffer=%" PRIu64 "\nlast_batch=%s\nuneven=%s\nprecision=%s\n"
		"train=%s\nval=%s\nfeature=%s\nlabel=%s\ndecode_raw=%s\nlog_every=%" PRIu64
		"\ncheckpoint_every=%" PRIu64 "%s\ncheckpoint=%d\noutput=%d\noverlap=%d\nbucket_size=%" PRIu64
		"\ntimeline=%s\naccumulate=%" PRIu64 "\nclip_norm=%s\ngrad_dtype=%s\nallreduce=%s\n",
		dp_build(), dp_backend_default()->name, dp_comm_library(comm), j->resume, j->init,
		j->summary, dp_fmt_double(c->scale, sc, sizeof sc), c->model ? c->model : "(none)",
		c->input_shape ? c->input_shape : "(none)", dp_loss_name(c->loss), c->batch, c->epochs,
		j->max_steps, dp_optim_name(oc->kind), dp_fmt_double(c->lr, a, sizeof a),
		dp_fmt_double(oc->momentum, b, sizeof b), dp_fmt_double(oc->dampening, d, sizeof d),
		oc->nesterov, dp_fmt_double(oc->beta1, g, sizeof g), dp_fmt_double(oc->beta2, h, sizeof h),
		dp_fmt_double(oc->eps, k, sizeof k), dp_fmt_double(oc->weight_decay, l, sizeof l),
		c->schedule, c->warmup, dp_fmt_double(c->warmup_epochs, m, sizeof m), c->scale_lr,
		c->seed, c->shuffle, c->drop_last ? "drop" : "keep", j->uneven_drop ? "drop" : "join",
		dp_precision_name(c->precision), j->train, j->val, c->feature, c->label,
		dp_decode_name(c->decode), j->log_every, j->ckpt_every, j->ckpt_epochs ? "e" : "",
		j->ckpt, j->output, j->overlap, j->bucket, j->timeline, c->accumulate,
		dp_fmt_double(c->clip_norm, cn, sizeof cn), dp_comm_wire_name(j->wire),
		dp_comm_algo_name(j->algo));
	fprintf(f, "reset=%s\nfreeze=%s\nlr_mult=%s\nno_decay=%s\nlabel_smoothing=%s\n",
		pat(j->reset), pat(c->freeze), pat(c->lr_mult), pat(c->no_decay),
		dp_fmt_double(c->smooth, a, sizeof a));
	char imgb[512];
	dp_image_spec(&c->img, imgb, sizeof imgb);
	fprintf(f, "classes=%d\nimage=%s\nlayout=%s\nsync_bn=%d\n", j->classes,
		c->decode == DP_DECODE_IMAGE ? imgb : "", c->hwc ? "hwc" : "chw", c->sync_bn);
	/* what decides collectives (the skip counts' allreduce) and the ramp */
	fprintf(f, "monitor=%s\nmonitor_mode=%s\nearly_stopping=%s\nreduce_lr_on_plateau=%s\n"
		"save_best=%d\n",
		pat(c->monitor), pat(c->monitor_mode), pat(c->early_stop), pat(c->plateau), j->save_best);
	fprintf(f, "skip_corrupt=%d\nmax_skipped=%s\nsteps_per_epoch=%" PRIu64 "\n", j->skip_corrupt,
		j->max_skipped ? j->max_skipped : DP_MAX_SKIPPED_DEFAULT, c->steps_per_epoch);
	if (fclose(f) != 0) {
		free(t);
		return NULL;
	}
	return t;
}

dp_st *dp_job_st_open(dp_comm *c, const char *path, int *alike, dp_err *e)
{
	int rank = dp_comm_rank(c);
	*alike = 1;
	if (dp_comm_size(c) == 1)
		return dp_st_open(path, e);
	size_t n = 0;
	uint64_t len = UINT64_MAX; /* rank 0 could not read it */
	char *buf = NULL;
	dp_st *ck = rank == 0 ? dp_st_open(path, e) : NULL;
	if (ck)
		buf = (char *)dp_st_bytes(ck, &n), len = n;
	*alike = 0;
	if (dp_comm_bcast_host(c, &len, sizeof len, 0, e) < 0)
		return dp_preferr(e, "%s", path), NULL;
	*alike = 1;
	if (len == UINT64_MAX) /* rank 0's e says why */
		return rank == 0 ? NULL : (dp_seterr(e, DP_EIO, "%s: not read by rank 0", path), NULL);
	*alike = 0;
	if (rank != 0 && !(buf = malloc(len ? len : 1)))
		return dp_seterr(e, DP_ENOMEM, "%s: out of memory", path), NULL;
	if (dp_comm_bcast_host(c, buf, len, 0, e) < 0) {
		if (rank != 0)
			free(buf);
		dp_st_close(ck);
		return dp_preferr(e, "%s", path), NULL;
	}
	*alike = 1;
	if (rank != 0) {
		ck = dp_st_open_mem(buf, len, strcmp(path, "-") ? path : "stdin", e);
		free(buf);
	}
	return ck;
}

int dp_job_conv_algos_agree(dp_comm *c, const dp_backend *be, dp_bectx *ctx, dp_err *e)
{
	int rank = dp_comm_rank(c);
	if (dp_comm_size(c) == 1 || !be->conv_algos || !be->conv_algos_take)
		return 0;
	char *t = rank == 0 ? dp_backend_conv_algos_text(be, ctx) : NULL;
	uint64_t len = t ? strlen(t) + 1 : 0;
	int rc = dp_comm_bcast_host(c, &len, sizeof len, 0, e);
	if (rc == 0 && len && rank != 0 && !(t = calloc(len, 1)))
		rc = dp_seterr(e, DP_ENOMEM, "out of memory");
	if (rc == 0 && len)
		rc = dp_comm_bcast_host(c, t, len, 0, e);
	if (rc == 0 && len && rank != 0)
		be->conv_algos_take(ctx, t);
	free(t);
	return rc < 0 ? -1 : 0;
}

char *dp_trainer_epoch_records(dp_trainer *t, dp_comm *c, uint64_t pos, int in_epoch, dp_err *e)
{
	int size = dp_comm_size(c), reps = dp_trainer_replicas(t, NULL);
	uint64_t *all = train_allgather(c, &pos, sizeof pos, e);
	if (!all)
		return NULL;
	for (int r = 0; r < reps; r++) /* a replica's first stage reads */
		all[r] = all[r * (size / reps)];
	char *text = dp_run_epoch_records_text(all, in_epoch ? reps : 0);
	free(all);
	if (!text)
		dp_seterr(e, DP_ENOMEM, "out of memory");
	return text;
}

int dp_trainer_check_same(dp_trainer *t, dp_comm *c, uint64_t *hash, char **diff, dp_err *e)
{
	int size = dp_comm_size(c);
	*diff = NULL;
	uint64_t *all;
	if (dp_trainer_state_hash(t, hash, e) < 0 || !(all = train_allgather(c, hash, sizeof *hash, e)))
		return -1;
	dp_buf b = DP_BUF_INIT;
	for (int r = 1; r < size; r++) {
		int r0 = dp_trainer_same_as(t, r); /* a pipeline: r's stage's first replica */
		if (all[r] != all[r0])
			dp_buf_printf(&b, "rank %d: weights or optimizer state differ from rank %d's "
				      "(hash %016" PRIx64 ", not %016" PRIx64 ")\n",
				      r, r0, all[r], all[r0]);
	}
	free(all);
	if (b.err) {
		dp_buf_free(&b);
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	}
	*diff = b.len ? dp_buf_take(&b) : NULL;
	dp_buf_free(&b);
	return 0;
}

int dp_control_agree(dp_comm *c, const dp_control_result *r, dp_err *e)
{
	double f[3] = {r->stop, r->reduced, r->improved};
	int size = dp_comm_size(c);
	if (size == 1)
		return 0;
	if (dp_comm_allreduce_sum(c, f, 3, e) < 0)
		return -1;
	for (int i = 0; i < 3; i++)
		if (f[i] != 0 && f[i] != size)
			return dp_seterr(e, DP_EDATA,
					 "training control: %.0f of %d ranks decided to %s: the ranks "
					 "are out of step (a bug; please report it)",
					 f[i], size,
					 i == 0 ? "stop" : i == 1 ? "lower the rate" : "save the best");
	return 0;
}
