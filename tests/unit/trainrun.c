/* trainrun.c - the trainer's glue that dp-train prints or writes, without
 * the CLI (dp_train.h): the run in words (the --summary table, a
 * pipeline's cut and the default of its micro-batches, the memory note
 * and --memory-limit), a log line as TensorBoard scalars (read back from
 * the event file), the data options of a run's settings, and the check of
 * a monitored metric.  The collectives of lib/train/agree.c run in the CLI
 * tests under mpirun (tests/dp-train-mpi*.t). */
#define _GNU_SOURCE
#include "dp_record.h"
#include "dp_train.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const dp_backend *be = &dp_backend_cpu;

static dp_model *model(const char *spec, const char *shape, int loss)
{
	dp_err e;
	dp_shape in;
	if (dp_shape_parse(shape, &in, &e) < 0)
		return NULL;
	return dp_model_new(spec, &in, loss, &e);
}

static void words(void)
{
	dp_step_conf c = {.batch = 32, .stages = 2};
	is_int(dp_pipe_micro(&c), 8, "a pipeline's micro-batches: 4 x stages by default");
	c.batch = 3;
	is_int(dp_pipe_micro(&c), 3, "... at most the batch");
	c.micro = 2;
	is_int(dp_pipe_micro(&c), 2, "... or as given");

	dp_model *m = model("dense:4,relu,dense:3", "5", DP_LOSS_XENT);
	ok(m != NULL, "a model");
	char *t = dp_train_summary(m, 8);
	like(t, "total 39 parameters, loss xent\n", "the summary's total: 5x4+4 + 4x3+3");
	like(t, "memory at batch 8: parameters ", "... and its memory at the batch");
	like(t, "0      0      dense:4", "... a line a layer");
	free(t);

	dp_err e;
	dp_step_conf pc = {.batch = 16, .stages = 2, .schedule = DP_PIPE_GPIPE};
	t = dp_train_summary_pipeline(m, &pc, &e);
	like(t, "pipeline: 2 stages of about equal cost", "a pipeline's cut");
	like(t, "bubble: (S-1)/(M+S-1) = 1/9 = 11.1% of a step with 8 micro-batches of 2",
	     "... and its bubble");
	like(t, "(1f1b, not chosen)", "... the schedule chosen");
	free(t);
	pc.stages = 9;
	ok(dp_train_summary_pipeline(m, &pc, &e) == NULL && e.code == DP_EARG,
	   "more stages than cut points: %s", e.msg);

	dp_bectx *ctx;
	dp_backend_opts bo = {.threads = 1};
	char desc[128];
	ok(be->open(&ctx, &bo, desc, sizeof desc, &e) == 0, "the CPU backend");
	ok(dp_model_bind(m, be, ctx, 8, &e) == 0, "bound");
	dp_optim_conf oc;
	dp_optim_defaults(&oc, DP_OPTIM_ADAM);
	dp_optim *o = dp_optim_new(&oc, be, ctx, dp_model_nparams(m), &e);
	t = dp_train_memory_note(m, o);
	like(t, "memory: parameters 156 bytes (+ gradients, 312 bytes of optimizer state)",
	     "the memory note: adam keeps two floats a parameter");
	free(t);
	ok(dp_train_memory_check(m, o, 0, &e) == 0, "no --memory-limit: any");
	ok(dp_train_memory_check(m, o, 1 << 30, &e) == 0, "within the limit");
	ok(dp_train_memory_check(m, o, 100, &e) == DP_ELIMIT && strstr(e.msg, "over --memory-limit 100 bytes:"),
	   "over it: %s", e.msg);
	char *convs;
	ok(dp_train_summary_convs(m, be, ctx, 8, desc, &convs, &e) == 0 && convs && !*convs,
	   "no convolutions: nothing to say");
	free(convs);
	dp_optim_free(o);
	dp_model_free(m);
	be->close(ctx);
}

/* The scalars of the events in the event files of run's folder part
 * ("": run's own): "step tag=value ..." a line an event with scalars. */
static char *scalars(const char *run, const char *part)
{
	dp_err e;
	char **found = dp_tb_find(run, &e);
	dp_buf b = DP_BUF_INIT;
	for (char **f = found; f && f[0]; f += 2) {
		if (strcmp(f[1], part))
			continue;
		dp_reader *r = dp_reader_open_path(f[0], NULL, &e);
		dp_record rec;
		dp_event ev = DP_EVENT_INIT;
		while (r && dp_reader_next(r, &rec, &e) == 1) {
			if (dp_event_parse(&ev, rec.data, rec.len, &e) < 0 || !ev.nscalars)
				continue;
			dp_buf_printf(&b, "%lld", (long long)ev.step);
			for (size_t i = 0; i < ev.nscalars; i++)
				dp_buf_printf(&b, " %.*s=%g", (int)ev.scalars[i].tag_len,
					      ev.scalars[i].tag, ev.scalars[i].value);
			dp_buf_addstr(&b, "\n");
		}
		dp_event_free(&ev);
		dp_reader_close(r);
	}
	free(found);
	return dp_buf_take(&b);
}

static void tensorboard(void)
{
	char dir[] = "/tmp/trainrun.XXXXXX";
	ok(mkdtemp(dir) != NULL, "a folder");
	char run[64];
	snprintf(run, sizeof run, "%s/run", dir);
	dp_run_conf c;
	dp_run_conf_init(&c);
	c.model = "dense:3";
	c.input_shape = "5";
	char *argv[] = {"./dp-train", "--lr", "0.1", "--model", "dense:3,relu", NULL};
	dp_err e;
	dp_tb_run *tb = dp_train_tb_open(run, "dp-train", 5, argv, &c, &e);
	ok(tb != NULL, "a run folder with its settings");
	const char *k1[] = {"epoch", "step", "loss", "accuracy", "lr"};
	const char *v1[] = {"1", "7", "0.5", "0.25", "0.01"};
	ok(dp_train_tb_line(tb, k1, v1, 5, &e) == 0, "a training line");
	const char *k2[] = {"epoch", "step", "event", "val_loss", "best", "best_epoch"};
	const char *v2[] = {"2", "9", "\"early_stopping\"", "0.75", "0.5", "1"};
	ok(dp_train_tb_line(tb, k2, v2, 6, &e) == 0, "a line of training control");
	const char *k3[] = {"epoch", "step", "state"};
	const char *v3[] = {"2", "10", "\"x\""};
	ok(dp_train_tb_line(tb, k3, v3, 3, &e) == 0, "a line without numbers");
	const double train[3] = {0.5, 0.75, 0.01};
	dp_eval_report val = {.loss = 0.25, .accuracy = 0.5, .mae = 9};
	ok(dp_train_tb_epoch(tb, 0, train, 10, 1, &val, &e) == 0, "an epoch of a classifier");
	ok(dp_train_tb_epoch(tb, 1, train, 0, 0, &val, &e) == 0,
	   "an epoch of a regression, no training samples");
	ok(dp_tb_run_close(tb, &e) == 0, "closed");
	char *s = scalars(run, "train");
	is_str(s, "0 epoch_loss=0.5 epoch_accuracy=0.75 epoch_learning_rate=0.01\n",
	       "train/: the epoch's loss, accuracy and rate; none without samples");
	free(s);
	s = scalars(run, "validation");
	is_str(s, "0 epoch_loss=0.25 epoch_accuracy=0.5\n1 epoch_loss=0.25 epoch_mae=9\n",
	       "validation/: loss and accuracy, or mae");
	free(s);
	s = scalars(run, "");
	is_str(s, "7 loss=0.5 accuracy=0.25 lr=0.01\n9 early_stopping=0.75\n",
	       "each number a scalar at the line's step, but step and epoch; an event's "
	       "first number under its name");
	free(s);
	dp_run_conf_free(&c);
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -r '%s'", dir);
	ok(system(cmd) == 0, "(cleaned up)");
}

static void data_and_monitor(void)
{
	dp_run_conf c;
	dp_run_conf_init(&c);
	c.decode = DP_DECODE_IMAGE;
	c.drop_last = 1;
	c.batch = 4;
	c.shuffle = 100;
	dp_shape in = {.rank = 3, .c = 3, .h = 4, .w = 4};
	dp_model *m = model("flatten,dense:2", "3x4x4", DP_LOSS_XENT);
	dp_data_opts o = {0};
	dp_run_data_opts(&c, m, &in, 1, &o);
	ok(o.batch == 4 && o.drop_last && o.shuffle == 100 && o.nclass == 2 && o.in_size == 48 &&
		   o.label_kind == DP_LABEL_CLASS && o.shape[0] == 3,
	   "training: the batch, the last batch dropped, the shuffle, the model's labels");
	is_str(o.class_text, "image/class/text", "... the class names of images gathered");
	memset(&o, 0, sizeof o);
	dp_run_data_opts(&c, m, &in, 0, &o);
	ok(!o.drop_last && !o.shuffle && !o.class_text, "validation: every record, in order");

	dp_control_conf cc;
	dp_err e;
	dp_control_init(&cc);
	ok(dp_control_check_monitor(&cc, m, &e) == 0, "val_loss is monitored");
	ok(dp_control_monitor(&cc, "val_f1_macro", NULL, &e) == 0 &&
		   dp_control_check_monitor(&cc, m, &e) == 0,
	   "val_f1_macro of a classifier");
	dp_model *r = model("dense:2", "3", DP_LOSS_MSE);
	ok(dp_control_check_monitor(&cc, r, &e) < 0, "... not of a regression: %s", e.msg);
	dp_model_free(r);
	dp_model_free(m);
	dp_run_conf_free(&c);
}

int main(void)
{
	words();
	tensorboard();
	data_and_monitor();
	return done_testing();
}
