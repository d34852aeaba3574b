/*
 * tensorboard.c - a training run in TensorBoard's event files (dp_train.h,
 * "TensorBoard"), as Keras' TensorBoard callback writes them, over the
 * run folder of dp_events.h (dp_tb_run): the run's settings first (the
 * command line, shell-quoted where the shell needs it, and the hparams of
 * dp_run_conf_settings), then each log line of the job as scalars at its
 * step, each epoch's training and validation metrics in train/ and
 * validation/ (Keras' epoch_loss...), and each epoch the weights' and
 * gradients' histograms.
 *
 * A log line is the logfmt/JSON pairs the trainer logs (key, value as
 * written): every value that is a number becomes the scalar of its key,
 * but step (the event's step) and epoch; a line of training control
 * (event=NAME) gives one scalar, NAME, of the first number after it.
 */
#define _GNU_SOURCE
#include "dp_train.h"
#include "dp_events.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The command line as a shell would take it back: each word quoted only
 * where the shell needs it; argv[0] as prog. */
static void command_line(dp_buf *b, const char *prog, int argc, char **argv)
{
	for (int i = 0; i < argc; i++) {
		const char *a = i ? argv[i] : prog;
		dp_buf_addstr(b, i ? " " : "");
		if (*a && strspn(a, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
				    "_@%+=:,./-") == strlen(a))
			dp_buf_addstr(b, a);
		else
			dp_shell_quote(b, a);
	}
}

dp_tb_run *dp_train_tb_open(const char *dir, const char *prog, int argc, char **argv,
			    const dp_run_conf *c, dp_err *e)
{
	dp_tb_run *tb = dp_tb_run_open(dir, e);
	if (!tb)
		return NULL;
	dp_buf cmd = DP_BUF_INIT, types = DP_BUF_INIT;
	command_line(&cmd, prog, argc, argv);
	char **kv = dp_run_conf_settings(c, e);
	for (char **x = kv; x && x[0]; x += 2)
		dp_buf_add(&types, &(char){(char)dp_run_key_type(x[0])}, 1);
	int rc = !kv ? -1
		 : cmd.err || types.err ? dp_seterr(e, DP_ENOMEM, "out of memory")
					: dp_tb_run_settings(tb, cmd.p, (const char *const *)kv, types.p, e);
	free(kv);
	dp_buf_free(&cmd);
	dp_buf_free(&types);
	if (rc < 0) {
		dp_err e2;
		dp_tb_run_close(tb, &e2);
		return NULL;
	}
	return tb;
}

int dp_train_tb_line(dp_tb_run *tb, const char *const *keys, const char *const *vals, int n,
		     dp_err *e)
{
	int64_t step = 0;
	char tag[64] = "";
	int event = 0; /* 1: an event's scalar is due; 2: written */
	for (int i = 0; i < n; i++) {
		char *end;
		if (!strcmp(keys[i], "event")) {
			snprintf(tag, sizeof tag, "%.*s", (int)strcspn(vals[i] + (vals[i][0] == '"'), "\""),
				 vals[i] + (vals[i][0] == '"'));
			event = 1;
			continue;
		}
		double v = strtod(vals[i], &end);
		if (*end || end == vals[i] || event == 2)
			continue; /* not a number, or past the event's */
		if (!strcmp(keys[i], "step"))
			step = (int64_t)v;
		else if (strcmp(keys[i], "epoch"))
			dp_summary_scalar(dp_events_summary(dp_tb_run_steps(tb)), event ? tag : keys[i],
					  (float)v);
		if (event && strcmp(keys[i], "step") && strcmp(keys[i], "epoch"))
			event = 2;
	}
	return dp_events_write(dp_tb_run_steps(tb), step, 0, e);
}

int dp_train_tb_histograms(dp_tb_run *tb, dp_model *m, int64_t step, dp_err *e)
{
	dp_bectx *ctx;
	const dp_backend *be = dp_model_backend(m, &ctx);
	size_t np = dp_model_nparams(m);
	float *w = malloc(2 * np * sizeof *w + 1);
	if (!w)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	be->download(ctx, w, dp_model_params(m), np * sizeof *w);
	be->download(ctx, w + np, dp_model_grads(m), np * sizeof *w);
	dp_buf *s = dp_events_summary(dp_tb_run_steps(tb));
	for (int i = 0; i < dp_model_ntensors(m); i++) {
		dp_tensor_info t;
		char tag[128];
		dp_model_tensor(m, i, &t);
		if (t.role != DP_TENSOR_PARAM)
			continue;
		snprintf(tag, sizeof tag, "weights/%s", t.name);
		dp_summary_histogram(s, tag, w + t.off, t.count, 30);
		snprintf(tag, sizeof tag, "gradients/%s", t.name);
		dp_summary_histogram(s, tag, w + np + t.off, t.count, 30);
	}
	free(w);
	return dp_events_write(dp_tb_run_steps(tb), step, 0, e);
}

int dp_train_tb_epoch(dp_tb_run *tb, int64_t epoch, const double train[3], uint64_t samples,
		      int has_acc, const dp_eval_report *val, dp_err *e)
{
	const char *tn[] = {"loss", "accuracy", "learning_rate"};
	double tv[] = {train[0], train[1], train[2]};
	if (!has_acc)
		tn[1] = tn[2], tv[1] = tv[2];
	if (samples && dp_tb_run_epoch(tb, DP_TB_TRAIN, epoch, tn, tv, 3 - !has_acc, e) < 0)
		return -1;
	if (!val)
		return 0;
	const char *vn[] = {"loss", has_acc ? "accuracy" : "mae"};
	double vv[] = {val->loss, has_acc ? val->accuracy : val->mae};
	return dp_tb_run_epoch(tb, DP_TB_VALIDATION, epoch, vn, vv, 2, e);
}
