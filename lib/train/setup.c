/*
 * setup.c - a run of dp-train, set up (dp_train.h, dp_run): the backend
 * and the job, the checkpoint started from and the settings it gives, the
 * model, the checks of the settings that go together, then the model on
 * the backend, the optimizer, the trainer, the weights and the data.
 *
 * The library never prints: what the set-up has to say comes back as
 * notes (r->note) and failures, each with its kind (r->fail: dp_run_fail),
 * which the tool turns into a message and an exit status.  The messages
 * name the options as dp-train(1) does.  The output checks are outputs.c's.
 */
#define _GNU_SOURCE
#include "train_impl.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int run_fail(dp_run *r, int kind, dp_err *e, int code, const char *fmt, ...)
{
	char msg[sizeof e->msg];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	r->fail = kind;
	return dp_seterr(e, code, "%s", msg);
}

/* A failure e already says. */
static int failed(dp_run *r, int kind, const dp_err *e)
{
	r->fail = kind;
	return e->code < 0 ? e->code : DP_EIO;
}

/* A setting that does not hold: a usage error when the command line gave
 * it; when it came from the checkpoint's metadata (meta), a bad
 * checkpoint, named. */
static int __attribute__((format(printf, 4, 5)))
bad_setting(dp_run *r, int meta, dp_err *e, const char *fmt, ...)
{
	char msg[sizeof e->msg];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (meta && r->c->src)
		return run_fail(r, DP_RUN_FAIL_JOB, e, DP_EDATA, "%s: metadata: %s", r->c->src, msg);
	return run_fail(r, DP_RUN_FAIL_USAGE, e, DP_EARG, "%s", msg);
}

#define usage(r, e, ...) run_fail(r, DP_RUN_FAIL_USAGE, e, DP_EARG, __VA_ARGS__)
#define note(r, ...) dp_msgf((r)->note, (r)->note_ctx, __VA_ARGS__)

/* ---- the job ---------------------------------------------------------------- */

/* The backend, and the job: MPI under a launcher. */
int dp_run_join(dp_run *r, dp_err *e)
{
	r->be = dp_backend_default();
	if (!r->threads)
		r->threads = dp_default_threads(&r->cpus, &r->local);
	dp_backend_opts bo = {.threads = r->threads, .device = r->gpu, .precision = r->c->precision,
			      .deterministic = r->deterministic};
	if (r->be->open(&r->ctx, &bo, r->desc, sizeof r->desc, e) < 0)
		return failed(r, DP_RUN_FAIL_RANK, e);
	if (!r->decode_given)
		r->decode_threads = dp_data_default_threads(r->be->caps & DP_CAP_HOST_MEMORY);
	if (!(r->comm = dp_comm_open(r->be, r->ctx, e)))
		return failed(r, DP_RUN_FAIL_RANK, e);
	r->rank = dp_comm_rank(r->comm);
	r->size = dp_comm_size(r->comm);
	/* with --pipeline-stages S, rank r is stage r % S of replica r / S */
	r->reps = r->stages > 1 && r->size % r->stages == 0 ? r->size / r->stages : r->size;
	r->rep = r->stages > 1 ? r->rank / r->stages : r->rank;
	dp_comm_conf cc;
	dp_comm_conf_defaults(&cc);
	cc.overlap = r->overlap;
	cc.bucket_bytes = (size_t)r->bucket;
	cc.wire = r->wire;
	cc.algo = r->algo;
	cc.stall_warn = r->stall;
	cc.stall_abort = r->stall_abort;
	cc.report = r->stall_report;
	if (dp_comm_configure(r->comm, &cc, e) < 0)
		return failed(r, DP_RUN_FAIL_RANK, e);
	return 0;
}

/* Sources that name {rank} (or {rank:5}) give each rank its own records. */
static int per_rank(const char *const *paths, size_t n, const char *cmd)
{
	if (cmd)
		return strstr(cmd, "{rank") != NULL;
	for (size_t i = 0; i < n; i++)
		if (strstr(paths[i], "{rank"))
			return 1;
	return 0;
}

int dp_run_shared(const dp_run *r, int val)
{
	const char *const *p = val ? r->val : r->train;
	return r->reps > 1 && (r->shard >= 0 ? r->shard
					      : !per_rank(p, val ? r->nval : r->ntrain,
							  val ? r->val_cmd : r->train_cmd));
}

/* What every rank must agree on, one setting a line: compared at the
 * start, so that ranks started with different options (mpirun's MPMD
 * syntax, another dp-train on one host) or builds are told apart before
 * they train out of step.  dp-train(1) lists the options
 * (tests/dp-train-mpi-settings.t tries each). */
int dp_run_check_same(dp_run *r, dp_err *e)
{
	dp_job_settings j = {
		.stages = r->stages, .micro = r->micro, .schedule = r->schedule, .resume = !!r->resume,
		.init = !!r->init, .summary = r->summary, .max_steps = r->max_steps,
		.uneven_drop = r->uneven_drop, .train = dp_run_shared(r, 0) ? "shared" : "per-rank",
		.val = !r->nval && !r->val_cmd ? "none" : dp_run_shared(r, 1) ? "shared" : "per-rank",
		.log_every = r->log_every, .ckpt_every = r->ckpt_every, .ckpt_epochs = r->ckpt_epochs,
		.ckpt = r->ckpt != NULL, .output = r->output != NULL, .overlap = r->overlap,
		.bucket = r->bucket,
		.timeline = !r->timeline ? "none" : dp_names_rank(r->timeline) ? "per-rank" : "gathered",
		.wire = r->wire, .algo = r->algo, .reset = r->reset, .classes = r->classes,
		.save_best = r->save_best != NULL, .skip_corrupt = r->skip_corrupt,
		.max_skipped = r->max_skipped};
	char *t = dp_job_settings_text(r->c, &j, r->comm);
	if (!t)
		return run_fail(r, DP_RUN_FAIL_RANK, e, DP_ENOMEM, "out of memory");
	int rc = dp_comm_check_same(r->comm, t, e);
	free(t);
	return rc < 0 ? failed(r, DP_RUN_FAIL_SETTINGS, e) : 0;
}

/* ---- the settings and the model ---------------------------------------------- */

int dp_run_start_from(dp_run *r, dp_err *e)
{
	static const int model_keys[] = {DP_RUN_MODEL, DP_RUN_INPUT_SHAPE, DP_RUN_LOSS, -1};
	if (!r->resume && !r->init)
		return 0;
	/* rank 0 reads and checks it and sends the bytes to all: only rank
	 * 0's machine needs the file */
	int alike;
	if (!(r->ck = dp_job_st_open(r->comm, r->resume ? r->resume : r->init, &alike, e)))
		return failed(r, alike ? DP_RUN_FAIL_JOB : DP_RUN_FAIL_RANK, e);
	if (!r->resume && r->model_given)
		return 0;
	if (!r->resume && !dp_st_meta(r->ck, "model"))
		return usage(r, e, "--init %s: no dp-train metadata (a PyTorch state_dict?): give the "
			     "model with --model and --input-shape", r->init);
	if (dp_run_conf_from(r->c, r->ck, r->resume ? NULL : model_keys, e) < 0)
		return failed(r, DP_RUN_FAIL_JOB, e);
	return 0;
}

/* --model @FILE: the spec in a file (newlines and # comments allowed). */
static char *model_file(dp_run *r, const char *path, dp_err *e)
{
	dp_buf b = DP_BUF_INIT;
	if (dp_read_file(path, path, 1 << 20, &b, e) < 0) {
		usage(r, e, "--model @%s", e->msg);
		return NULL;
	}
	if (strlen(b.p ? b.p : "") != b.len) {
		usage(r, e, "--model @%s: a NUL byte at byte %zu: not a text file", path, strlen(b.p));
		dp_buf_free(&b);
		return NULL;
	}
	char *s = b.p ? b.p : strdup("");
	if (!s)
		run_fail(r, DP_RUN_FAIL_RANK, e, DP_ENOMEM, "out of memory");
	return s;
}

/* The spec with --classes N: a named model's outputs ("resnet18:N"). */
static int spec_classes(dp_run *r, char **spec, dp_err *e)
{
	int k = dp_model_named(*spec);
	if (!k)
		return usage(r, e, "--classes is for a named model (resnet18, resnet20, ...): end "
			     "'%s' with dense:CLASSES", r->c->model);
	if (k == 2 && atoi(strchr(*spec, ':') + 1) != r->classes)
		return bad_setting(r, r->c->from[DP_RUN_MODEL], e, "--classes %d, but the model is %s",
				   r->classes, *spec);
	char *t = NULL;
	if (k == 1 && asprintf(&t, "%s:%d", *spec, r->classes) < 0)
		return run_fail(r, DP_RUN_FAIL_RANK, e, DP_ENOMEM, "out of memory");
	if (t) {
		free(*spec);
		*spec = t;
	}
	return 0;
}

int dp_run_model(dp_run *r, dp_err *e)
{
	dp_run_conf *c = r->c;
	if (!c->model)
		return usage(r, e, "no model: give --model SPEC (e.g. --model dense:128,relu,dense:10)");
	if (!c->input_shape)
		return usage(r, e, "no input shape: give --input-shape (e.g. 1x28x28 or 784)");
	if (dp_shape_parse(c->input_shape, &r->in, e) < 0)
		return bad_setting(r, c->from[DP_RUN_INPUT_SHAPE], e, "%s", e->msg);
	char *spec = c->model[0] == '@' ? model_file(r, c->model + 1, e) : strdup(c->model);
	if (!spec)
		return c->model[0] == '@' ? e->code
					  : run_fail(r, DP_RUN_FAIL_RANK, e, DP_ENOMEM, "out of memory");
	if (r->classes && (!r->names || dp_model_named(spec)) && spec_classes(r, &spec, e) < 0) {
		free(spec);
		return e->code;
	}
	r->m = dp_model_new(spec, &r->in, c->loss, e);
	free(spec);
	if (!r->m)
		return bad_setting(r, c->from[DP_RUN_MODEL], e, "%s", e->msg);
	c->model = dp_model_spec(r->m); /* as parsed: one line, comments gone */
	r->xent = dp_model_loss_kind(r->m) == DP_LOSS_XENT;
	if (r->names && (!r->xent || r->nnames != dp_model_out_size(r->m)))
		return usage(r, e, "--classes: %zu names for a model of %zu %s", r->nnames,
			     dp_model_out_size(r->m), r->xent ? "classes" : "outputs (a regression model)");
	return 0;
}

dp_step_conf dp_run_step_conf(const dp_run *r)
{
	const dp_run_conf *c = r->c;
	dp_step_conf sc = {c->batch, c->accumulate, c->clip_norm, c->seed, c->sync_bn,
			   r->stages, r->micro, r->schedule};
	return sc;
}

/* ---- the checks --------------------------------------------------------------- */

/* Under mpirun a stream read by several ranks would be torn between them. */
static int check_streams(dp_run *r, dp_err *e)
{
	for (int v = 0; v < 2 && r->size > 1; v++) {
		const char **ps = v ? r->val : r->train;
		size_t nps = v ? r->nval : r->ntrain;
		struct stat sb;
		for (size_t i = 0; i < nps && !per_rank(ps, nps, NULL); i++)
			if (!strcmp(ps[i], "-") || (stat(ps[i], &sb) == 0 && S_ISFIFO(sb.st_mode)))
				return usage(r, e, "--%s %s: under mpirun %s: give files, a FIFO a rank "
					     "({rank}), or --%s-cmd 'CMD' (a stream a rank with {rank})",
					     v ? "val" : "train", ps[i],
					     strcmp(ps[i], "-") ? "every rank would read the same FIFO"
								: "standard input reaches rank 0 only",
					     v ? "val" : "train");
	}
	return 0;
}

/* The options of the data and the checkpoints that go together, and those
 * that do not. */
static int check_options(dp_run *r, dp_err *e)
{
	dp_run_conf *c = r->c;
	if (!dp_model_nparams(r->m))
		return usage(r, e, "model '%s' has no parameters to train", c->model);
	if (!r->ntrain && !r->train_cmd)
		return usage(r, e, "no training data: give --train FILE or --train-cmd CMD");
	if (r->ntrain && r->train_cmd)
		return usage(r, e, "--train and --train-cmd exclude each other");
	if (r->nval && r->val_cmd)
		return usage(r, e, "--val and --val-cmd exclude each other");
	for (size_t i = 0; i < r->nval; i++)
		for (size_t j = 0; j < r->ntrain; j++)
			if (!strcmp(r->val[i], "-") && !strcmp(r->train[j], "-"))
				return usage(r, e, "stdin can hold the training or the validation records, not both");
	if (r->ckpt_every && !r->ckpt && !r->output)
		return usage(r, e, "--checkpoint-every needs -o or --checkpoint");
	if (r->ckpt && !r->ckpt_every)
		r->ckpt_every = 1, r->ckpt_epochs = 1;
	if (r->output && !strcmp(r->output, "-") && !r->log)
		return usage(r, e, "-o - would mix the checkpoint with the log on stdout: give --log FILE");
	return check_streams(r, e);
}

/* A pipeline's settings, the schedule's, the optimizer's. */
static int check_training(dp_run *r, dp_err *e)
{
	dp_run_conf *c = r->c;
	if (r->stages > 1) {
		if (r->size % r->stages)
			return usage(r, e, "--pipeline-stages %d under %d rank%s: start stages x replicas ranks "
				     "(mpirun -np %d, %d, ...)", r->stages, r->size, r->size == 1 ? "" : "s",
				     r->stages, 2 * r->stages);
		if (c->sync_bn)
			return usage(r, e, "--sync-bn with --pipeline-stages: not supported (batchnorm's "
				     "statistics are each micro-batch's)");
		dp_step_conf sc = dp_run_step_conf(r);
		if (dp_pipe_micro(&sc) > c->batch)
			return usage(r, e, "--micro-batches %" PRIu64 " of a step of %" PRIu64 " samples "
				     "(--batch-size): at most one a sample", dp_pipe_micro(&sc), c->batch);
	} else if (r->pipe_opt) {
		return usage(r, e, "--%s needs --pipeline-stages S (S > 1)", r->pipe_opt);
	}
	if (c->warmup_epochs > 0 && !c->scale_lr)
		return bad_setting(r, c->from[DP_RUN_WARMUP_EPOCHS] && c->from[DP_RUN_SCALE_LR], e,
				   "--warmup-epochs ramps up to the rate of --scale-lr: give --scale-lr too "
				   "(or --warmup N to ramp from 0)");
	r->sched.epochs = c->epochs;
	r->sched.warmup = c->warmup;
	if (dp_sched_parse(c->schedule, &r->sched, e) < 0)
		return bad_setting(r, c->from[DP_RUN_SCHEDULE], e, "%s", e->msg);
	int om = c->from[DP_RUN_NESTEROV]; /* an optimizer setting from the checkpoint */
	for (int k = DP_RUN_OPTIMIZER; k <= DP_RUN_WD; k++)
		om |= c->from[k];
	if (dp_optim_check(&c->opt, e) < 0)
		return bad_setting(r, om, e, "%s", e->msg);
	return 0;
}

/* Training control's settings (from the command line or the checkpoint
 * resumed), and where they stand: a run resumed takes its checkpoint's
 * state. */
static int check_control(dp_run *r, dp_err *e)
{
	dp_run_conf *c = r->c;
	static char es_text[256], rlr_text[256];
	dp_control_init(&r->ctl);
	const char *mon = c->monitor && *c->monitor ? c->monitor : NULL;
	const char *mode = c->monitor_mode && *c->monitor_mode ? c->monitor_mode : NULL;
	if (dp_control_monitor(&r->ctl, mon, mode, e) < 0)
		return bad_setting(r, 1, e, "monitor: %s", e->msg);
	if (dp_control_early_stop(&r->ctl, c->early_stop, e) < 0)
		return bad_setting(r, 1, e, "early_stopping: %s", e->msg);
	if (dp_control_plateau(&r->ctl, c->plateau, e) < 0)
		return bad_setting(r, 1, e, "reduce_lr_on_plateau: %s", e->msg);
	/* every setting in the checkpoints, defaults included */
	c->early_stop = dp_control_early_stop_text(&r->ctl, es_text, sizeof es_text);
	c->plateau = dp_control_plateau_text(&r->ctl, rlr_text, sizeof rlr_text);
	r->ctl.save_best = r->save_best != NULL;
	r->ctl_on = r->ctl.early_stop || r->ctl.plateau || r->ctl.save_best;
	if (!r->ctl_on && (mon || mode))
		return usage(r, e, "--monitor%s goes with --early-stopping, --reduce-lr-on-plateau or "
			     "--save-best", mon ? "" : "-mode");
	if (r->ctl_on && !r->nval && !r->val_cmd)
		return usage(r, e, "--%s watches a validation metric: give --val or --val-cmd",
			     r->ctl.early_stop ? "early-stopping"
			     : r->ctl.plateau  ? "reduce-lr-on-plateau"
					       : "save-best");
	/* the metric is one validation reports for this model */
	if (r->ctl_on && dp_control_check_monitor(&r->ctl, r->m, e) < 0)
		return bad_setting(r, c->from[DP_RUN_MONITOR], e, "--monitor %s: %s", r->ctl.monitor,
				   e->msg);
	dp_control_start(&r->ctl, c->lr * (c->scale_lr ? r->reps : 1), &r->cs);
	if (r->ctl_on && r->resume && c->control_state && *c->control_state &&
	    dp_control_state_parse(&r->cs, c->control_state, e) < 0)
		return run_fail(r, DP_RUN_FAIL_JOB, e, e->code, "%s: metadata: %s",
			    c->src ? c->src : r->resume, e->msg);
	if (r->ctl.early_stop && r->cs.stopped) {
		r->stopped = 1;
		note(r, "%s: the run stopped early after epoch %" PRIu64 " (--early-stopping): nothing "
		     "more to train", r->resume, r->cs.stopped_epoch + 1);
	}
	return 0;
}

int dp_run_check(dp_run *r, dp_err *e)
{
	/* the checkpoint holds the model being trained; a state_dict, or a
	 * new head: dp_ckpt_load_init checks tensor by tensor */
	if (r->ck && !(r->init && (r->reset || !dp_st_meta(r->ck, "model"))) &&
	    dp_run_check_model(r->ck, r->m, e) < 0)
		return failed(r, DP_RUN_FAIL_JOB, e);
	if (check_options(r, e) < 0 || check_training(r, e) < 0 || check_control(r, e) < 0)
		return e->code;
	return 0;
}

/* ---- the model, the optimizer, the weights -------------------------------------- */

/* The convolution algorithms (cuDNN's, the CPU's implementations): those
 * the checkpoint resumed from recorded, for its shapes (on the same GPU
 * model or CPU kernels, libraries, precision and threads; ignored
 * elsewhere); after binding, rank 0's choices on every rank, so that the
 * ranks run the same algorithms (a rank whose own timing chose otherwise
 * would keep the others waiting, and compute other bits). */
static void conv_algos_resume(dp_run *r)
{
	const char *a = r->ck && r->resume ? dp_st_meta(r->ck, "conv_algos") : NULL;
	if (a && *a && r->be->conv_algos_take)
		r->be->conv_algos_take(r->ctx, a);
}

int dp_run_summary_model(dp_run *r, dp_err *e)
{
	dp_run_conf *c = r->c;
	if (c->freeze && *c->freeze && dp_model_freeze(r->m, c->freeze, e) < 0)
		return bad_setting(r, c->from[DP_RUN_FREEZE], e, "--freeze: %s", e->msg);
	if (r->recompute && dp_model_set_recompute(r->m, r->recompute, e) < 0)
		return failed(r, DP_RUN_FAIL_USAGE, e);
	conv_algos_resume(r);
	return 0;
}

/* The optimizer state and the position in the data of the run resumed
 * (another number of ranks: only with the same global batch, and data
 * split between the ranks, so that it goes on where it was). */
static int resume_state(dp_run *r, dp_err *e)
{
	dp_run_conf *c = r->c;
	int moved, split = !per_rank(r->train, r->ntrain, r->train_cmd) && r->shard != 0;
	if (dp_run_resume(r->ck, r->m, r->opt, c, r->reps, r->rep, split, &r->ts, &r->resume_pos,
			  &moved, e) < 0)
		return failed(r, DP_RUN_FAIL_JOB, e);
	if (moved)
		note(r, "%s: saved by %d rank%s, resumed by %d with the same global batch (%" PRIu64
		     "): the data goes on where it was",
		     dp_st_name(r->ck), c->ranks, c->ranks == 1 ? "" : "s", r->reps,
		     c->batch * c->accumulate * (uint64_t)r->reps);
	return 0;
}

/* The parts of the model that do not train as the rest: frozen,
 * without decay, another rate, smoothing, recomputed. */
static int model_parts(dp_run *r, dp_err *e)
{
	dp_run_conf *c = r->c;
	const char **pats[] = {&c->freeze, &c->no_decay, &c->lr_mult}; /* "" in metadata: none */
	for (size_t i = 0; i < sizeof pats / sizeof pats[0]; i++)
		if (*pats[i] && !**pats[i])
			*pats[i] = NULL;
	if ((c->freeze || c->no_decay || c->lr_mult) &&
	    dp_optim_set_tensors(r->opt, r->m, c->freeze, c->no_decay, c->lr_mult, e) < 0)
		return bad_setting(r, c->from[DP_RUN_FREEZE] || c->from[DP_RUN_LR_MULT] ||
					      c->from[DP_RUN_NO_DECAY],
				   e, "--freeze, --lr-mult, --no-decay: %s", e->msg);
	if (dp_model_set_label_smoothing(r->m, c->smooth, e) < 0)
		return bad_setting(r, c->from[DP_RUN_SMOOTH], e, "--label-smoothing: %s", e->msg);
	if (c->freeze && dp_model_freeze(r->m, c->freeze, e) < 0)
		return bad_setting(r, c->from[DP_RUN_FREEZE], e, "--freeze: %s", e->msg);
	if (r->recompute && dp_model_set_recompute(r->m, r->recompute, e) < 0)
		return failed(r, e->code == DP_EARG ? DP_RUN_FAIL_USAGE : DP_RUN_FAIL_RANK, e);
	return 0;
}

/* The model on the backend, the optimizer, the weights (the
 * checkpoint's, or fresh), the same on every rank. */
static int setup_model(dp_run *r, dp_err *e)
{
	dp_step_conf sc = dp_run_step_conf(r);
	uint64_t bind = r->c->batch;
	if (r->stages > 1) { /* this rank's stage of the model, micro-batches in flight */
		dp_pipe_plan pl;
		if (dp_pipe_plan_model(r->m, &sc, r->rank, r->size, &pl, e) < 0)
			return run_fail(r, e->code == DP_EARG ? DP_RUN_FAIL_SETTINGS : DP_RUN_FAIL_JOB, e,
				    e->code, "--pipeline-stages: %s", e->msg);
		bind = pl.micro_batch;
	}
	conv_algos_resume(r);
	if (dp_model_bind(r->m, r->be, r->ctx, bind, e) < 0 ||
	    dp_job_conv_algos_agree(r->comm, r->be, r->ctx, e) < 0 ||
	    !(r->opt = dp_optim_new(&r->c->opt, r->be, r->ctx, dp_model_nparams(r->m), e)))
		return failed(r, DP_RUN_FAIL_RANK, e);
	if (model_parts(r, e) < 0)
		return e->code;
	if (!(r->tr = dp_trainer_new(r->m, r->opt, r->comm, &sc, e)))
		return failed(r, DP_RUN_FAIL_RANK, e);
	r->ts = (dp_train_state){r->c->seed, 0, 0, 0};
	if (!r->ck || r->init) /* --init: what --reset leaves */
		dp_model_init(r->m, r->c->seed);
	if (r->init && dp_ckpt_load_init(r->ck, r->m, r->reset, e) < 0)
		return e->code == DP_EARG
			       ? run_fail(r, DP_RUN_FAIL_SETTINGS, e, e->code, "--reset: %s", e->msg)
			       : failed(r, DP_RUN_FAIL_JOB, e);
	if (r->resume && (dp_ckpt_load_weights(r->ck, r->m, e) < 0 ? failed(r, DP_RUN_FAIL_JOB, e)
								   : resume_state(r, e)) < 0)
		return e->code;
	/* every worker starts from worker 0's weights and running statistics
	 * (a pipeline's: its stage's first replica's) */
	if (dp_trainer_broadcast(r->tr, e) < 0)
		return failed(r, DP_RUN_FAIL_RANK, e);
	return 0;
}

/* ---- the data ------------------------------------------------------------------------ */

/* The training (train) or validation data: the run's settings
 * (dp_run_data_opts), its sources and the options of the input. */
static dp_data *open_data(dp_run *r, int train, dp_err *e)
{
	dp_run_conf *c = r->c;
	dp_data_opts o = {0};
	if ((c->decode == DP_DECODE_IMAGE || c->hwc) && r->in.rank == 1) {
		usage(r, e, "%s needs --input-shape C x H x W (3x224x224), not a length",
		      c->hwc ? "--layout hwc" : "--decode image");
		return NULL;
	}
	if (train && r->in.rank == 3 && r->in.c > 4 && r->in.w <= 4)
		note(r, "--input-shape %dx%dx%d is C x H x W: %d channels of %dx%d; channels-last data "
		     "is --input-shape %dx%dx%d --layout hwc", r->in.c, r->in.h, r->in.w, r->in.c,
		     r->in.h, r->in.w, r->in.w, r->in.c, r->in.h);
	dp_run_data_opts(c, r->m, &r->in, train, &o);
	o.inputs = train ? r->train : r->val;
	o.ninputs = train ? r->ntrain : r->nval;
	o.cmd = train ? r->train_cmd : r->val_cmd;
	/* with several ranks a short global batch is dropped by all (the loop) */
	o.drop_last = train && r->reps == 1 ? c->drop_last : 0;
	/* a stream read in a single epoch needs no cache (nor counted first) */
	o.cache = train && c->epochs <= 1 && !c->warmup_epochs && !r->cache_given ? DP_CACHE_NONE
										   : r->cache;
	o.cache_limit = r->cache_limit;
	o.cache_dir = r->cache_dir;
	o.prefetch = r->prefetch;
	o.rank = r->rep; /* a pipeline's replica: its first stage reads */
	o.size = r->reps;
	if (dp_run_shared(r, !train)) {
		/* training: rank r takes the r-th slice of every global batch
		 * (dp_data.h); validation: every size-th record */
		o.shard_index = (unsigned)r->rep;
		o.shard_count = (unsigned)r->reps;
		o.shard_block = train ? c->batch : 0;
	}
	o.alloc = (void *(*)(void *, size_t))r->be->host_alloc;
	o.free = (void (*)(void *, void *))r->be->host_free;
	o.alloc_ctx = r->ctx;
	o.decode_threads = r->decode_threads;
	o.skip_corrupt = r->skip_corrupt;
	o.rec.max_record = r->max_record;
	o.on_skip = r->on_skip;
	dp_data *d = dp_data_open(&o, e);
	if (!d)
		run_fail(r, DP_RUN_FAIL_RANK, e, e->code, "%s: %s", train ? "train" : "val", e->msg);
	return d;
}

/* The notes of the run: the model, the backend, the job, the memory, the
 * pipeline, the global batch, the checkpoint resumed. */
static int notes(dp_run *r, dp_err *e)
{
	dp_run_conf *c = r->c;
	char thr[128] = ""; /* where the default thread count came from */
	if (r->cpus && (r->be->caps & DP_CAP_HOST_MEMORY))
		snprintf(thr, sizeof thr, " (the CPUs this rank may use, %d, or its share of the host's: "
			 "%d rank%s on it; --threads sets it)", r->cpus, r->local, r->local == 1 ? "" : "s");
	else if (!r->decode_given && r->decode_threads) /* the default: a GPU's */
		snprintf(thr, sizeof thr, " (input decoded by %u thread%s beside the reader, of this "
			 "rank's share of the CPUs; --decode-threads sets it)", r->decode_threads,
			 r->decode_threads == 1 ? "" : "s");
	size_t ns = r->td ? dp_data_nsources(r->td) : 0;
	note(r, "%zu parameters, %s%s, %s; %zu training source%s", dp_model_nparams(r->m), r->desc, thr,
	     dp_comm_desc(r->comm), ns, r->td && ns == 1 ? "" : "s");
	char *t = dp_train_memory_note(r->m, r->opt);
	if (!t)
		return run_fail(r, DP_RUN_FAIL_RANK, e, DP_ENOMEM, "out of memory");
	note(r, "%s", t);
	free(t);
	if ((t = dp_train_pipeline_note(r->tr, r->m, c->batch, r->schedule)))
		note(r, "%s", t);
	free(t);
	return 0;
}

/* The run in words, once it is set up. */
static void notes_batch(dp_run *r)
{
	dp_run_conf *c = r->c;
	char how[80]; /* what a global batch is made of */
	if (c->accumulate > 1)
		snprintf(how, sizeof how, "%" PRIu64 " %s of %d x %" PRIu64, c->accumulate,
			 r->stages > 1 ? "steps" : "micro-batches", r->reps, c->batch);
	else
		snprintf(how, sizeof how, "%d x %" PRIu64, r->reps, c->batch);
	if (r->reps > 1 || c->accumulate > 1)
		note(r, "global batch %" PRIu64 " (%s)%s%s%s", c->batch * c->accumulate * r->reps, how,
		     r->reps > 1 ? "; training data " : "",
		     r->reps == 1	   ? ""
		     : dp_run_shared(r, 0) ? "shared: rank r takes the r-th slice of each global batch"
					   : "per rank",
		     r->overlap ? "" : "; gradients reduced after the backward pass (--no-overlap)");
	if (!r->ck || !r->resume)
		return;
	if (r->ts.epoch >= c->epochs)
		note(r, "%s: all %" PRIu64 " epochs done (step %" PRIu64 "): nothing to train "
		     "(more with --epochs)", dp_st_name(r->ck), c->epochs, r->ts.step);
	else if (r->max_steps && r->ts.step >= r->max_steps)
		note(r, "%s: at step %" PRIu64 " already (--max-steps %" PRIu64 "): nothing to train",
		     dp_st_name(r->ck), r->ts.step, r->max_steps);
	else
		note(r, "resuming %s at epoch %" PRIu64 ", step %" PRIu64, dp_st_name(r->ck),
		     r->ts.epoch + 1, r->ts.step);
}

/* --warmup-epochs' ramp: its length given, from the checkpoint resumed,
 * or counted from the files (a pass without decoding); a command's epoch
 * can be read only once (a Pipe-mode FIFO, a download). */
static int warmup_ramp(dp_run *r, dp_err *e)
{
	dp_run_conf *c = r->c;
	if (!(c->warmup_epochs > 0 && r->reps > 1))
		return 0;
	if (!c->steps_per_epoch && r->train_cmd)
		return usage(r, e, "--warmup-epochs with --train-cmd: the updates of an epoch are not "
			     "known before it is read, and counting them would run the command of "
			     "epoch 1 twice: give --steps-per-epoch N");
	uint64_t spe = c->steps_per_epoch;
	if (!spe && dp_trainer_count_steps(r->tr, r->comm, r->td, c, r->uneven_drop, &spe, e) < 0)
		return run_fail(r, DP_RUN_FAIL_RANK, e, e->code, "train: %s", e->msg);
	c->steps_per_epoch = spe;
	r->ramp = (uint64_t)ceil(c->warmup_epochs * (double)spe);
	note(r, "--warmup-epochs %g: %" PRIu64 " updates of %" PRIu64 " an epoch%s", c->warmup_epochs,
	     r->ramp, spe, r->steps_given ? " (--steps-per-epoch)" : "");
	return 0;
}

/* The training and validation data, what the run is said to be, the
 * ramp of --warmup-epochs, the timeline. */
static int setup_data(dp_run *r, dp_err *e)
{
	if (dp_trainer_reads(r->tr) && !(r->td = open_data(r, 1, e))) /* not a pipeline's later stages */
		return e->code;
	if (r->nval || r->val_cmd) {
		if (dp_trainer_reads(r->tr) && !(r->vd = open_data(r, 0, e)))
			return e->code;
		if (!(r->eval = dp_eval_new_for(r->m, 0, e)))
			return run_fail(r, DP_RUN_FAIL_RANK, e, e->code, "val: %s", e->msg);
	}
	if (notes(r, e) < 0)
		return e->code;
	/* --memory-limit: this rank's model (bound) and optimizer within it,
	 * or the run ends, on this rank, saying what would cut it */
	if (dp_train_memory_check(r->m, r->opt, r->mem_limit, e) < 0)
		return failed(r, DP_RUN_FAIL_RANK, e);
	notes_batch(r);
	dp_st_close(r->ck);
	r->ck = NULL;
	if (warmup_ramp(r, e) < 0)
		return e->code;
	if (r->timeline && dp_comm_timeline_start(r->comm, e) < 0)
		return run_fail(r, DP_RUN_FAIL_RANK, e, e->code, "timeline: %s", e->msg);
	return 0;
}

int dp_run_setup(dp_run *r, dp_err *e)
{
	return setup_model(r, e) < 0 || setup_data(r, e) < 0 ? e->code : 0;
}

void dp_run_close(dp_run *r)
{
	dp_trainer_free(r->tr);
	dp_eval_free(r->eval);
	dp_data_close(r->td);
	dp_data_close(r->vd);
	dp_optim_free(r->opt);
	dp_model_free(r->m);
	dp_st_close(r->ck);
	dp_comm_close(r->comm);
	if (r->be && r->ctx)
		r->be->close(r->ctx);
	free(r->classes_json);
	r->classes_json = NULL;
	r->tr = NULL, r->eval = NULL, r->td = r->vd = NULL, r->opt = NULL, r->m = NULL;
	r->ck = NULL, r->comm = NULL, r->ctx = NULL;
}
