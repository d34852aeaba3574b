/* run.c - a run of dp-train without the CLI (dp_train.h, dp_run): the
 * set-up's failures and the kind each says (usage, a checkpoint's
 * setting, this rank's), the output checks, then a whole run on one rank:
 * the set-up, an epoch of steps, its log lines, validation, training
 * control, a checkpoint read back.  Under mpirun the same calls run in the
 * CLI tests (tests/dp-train-mpi*.t). */
#define _GNU_SOURCE
#include "dp_record.h"
#include "dp_train.h"
#include "tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[] = "/tmp/dprun.XXXXXX";
static char train[300], val[300];

/* n samples of 3 floats, label i % 2: the first float says it. */
static void write_file(const char *path, int n)
{
	dp_err e;
	dp_writer *w = dp_writer_open_mem(DP_COMP_NONE, 0, &e);
	dp_exbuild b = {0};
	for (int i = 0; i < n; i++) {
		float x[3] = {i % 2 ? 1.0f : -1.0f, 0.5f, (float)i / n};
		int64_t y = i % 2;
		dp_exbuild_reset(&b);
		dp_exbuild_floats(&b, "image", 5, x, 3);
		dp_exbuild_int64s(&b, "label", 5, &y, 1);
		const uint8_t *p;
		size_t len;
		dp_exbuild_finish(&b, &p, &len);
		dp_writer_write(w, p, len, &e);
	}
	dp_writer_finish(w, &e);
	size_t len;
	const uint8_t *m = dp_writer_mem(w, &len);
	FILE *f = fopen(path, "wb");
	fwrite(m, 1, len, f);
	fclose(f);
	dp_writer_free(w);
	dp_exbuild_free(&b);
}

static dp_buf notes = DP_BUF_INIT;

static void note(void *ctx, const char *msg)
{
	dp_buf_printf(&notes, "%s\n", msg);
}

/* A run of conf c over the files above, as dp-train's defaults set it. */
static void run_init(dp_run *r, dp_run_conf *c)
{
	static const char *tr[1], *va[1];
	tr[0] = train, va[0] = val;
	dp_run_conf_init(c);
	c->model = "dense:8,relu,dense:2";
	c->input_shape = "3";
	c->batch = 4;
	*r = (dp_run){.c = c, .train = tr, .ntrain = 1, .shard = -1, .overlap = 1, .bucket = 1 << 20,
		      .prefetch = 0, .threads = 1, .gpu = -1, .log_every = 2, .stages = 1, .note = note};
	dp_optim_defaults(&c->opt, DP_OPTIM_ADAM);
	dp_gate_max_skipped(DP_MAX_SKIPPED_DEFAULT, &r->skip_gate, NULL);
	(void)va;
}

static void failures(void)
{
	dp_run_conf c;
	dp_run r;
	dp_err e;
	run_init(&r, &c);
	c.model = NULL;
	ok(dp_run_model(&r, &e) == DP_EARG && r.fail == DP_RUN_FAIL_USAGE &&
		   strstr(e.msg, "no model: give --model"),
	   "no model: a usage error: %s", e.msg);
	c.model = "dense:2";
	c.input_shape = "3x";
	ok(dp_run_model(&r, &e) < 0 && r.fail == DP_RUN_FAIL_USAGE, "a bad --input-shape given: usage: %s",
	   e.msg);
	c.from[DP_RUN_INPUT_SHAPE] = 1;
	c.src = strdup("ck.safetensors");
	ok(dp_run_model(&r, &e) < 0 && r.fail == DP_RUN_FAIL_JOB &&
		   !strncmp(e.msg, "ck.safetensors: metadata: ", 26),
	   "... taken from a checkpoint: the checkpoint's, every rank's: %s", e.msg);
	c.input_shape = "3";
	r.classes = 10;
	ok(dp_run_model(&r, &e) < 0 && r.fail == DP_RUN_FAIL_USAGE && strstr(e.msg, "named model"),
	   "--classes of a model without a name: %s", e.msg);
	r.classes = 0;
	c.model = "dense:2";
	ok(dp_run_model(&r, &e) == 0 && dp_model_out_size(r.m) == 2, "a model");

	r.size = 1, r.reps = 1;
	r.ntrain = 0;
	ok(dp_run_check(&r, &e) < 0 && r.fail == DP_RUN_FAIL_USAGE && strstr(e.msg, "no training data"),
	   "no --train: %s", e.msg);
	r.ntrain = 1;
	c.schedule = "cosine:x";
	c.from[DP_RUN_SCHEDULE] = 1;
	ok(dp_run_check(&r, &e) < 0 && r.fail == DP_RUN_FAIL_JOB && strstr(e.msg, "metadata"),
	   "a checkpoint's bad schedule: %s", e.msg);
	c.schedule = "constant";
	r.pipe_opt = "micro-batches";
	ok(dp_run_check(&r, &e) < 0 && r.fail == DP_RUN_FAIL_USAGE &&
		   strstr(e.msg, "--micro-batches needs --pipeline-stages"),
	   "a pipeline's option without one: %s", e.msg);
	r.pipe_opt = NULL;
	r.save_best = "best.safetensors";
	ok(dp_run_check(&r, &e) < 0 && r.fail == DP_RUN_FAIL_USAGE && strstr(e.msg, "give --val"),
	   "--save-best without validation: %s", e.msg);
	r.save_best = NULL;
	ok(dp_run_check(&r, &e) == 0, "the settings hold together");

	char o[400], l[400];
	snprintf(o, sizeof o, "%s/run.log", dir);
	snprintf(l, sizeof l, "%s/./run.log", dir);
	r.output = o;
	r.log = l;
	ok(dp_run_check_outputs(&r, &e) < 0 && r.fail == DP_RUN_FAIL_USAGE && strstr(e.msg, "name one file"),
	   "-o and --log one file: %s", e.msg);
	r.log = NULL;
	r.output = "/nonexistent/x.safetensors";
	ok(dp_run_check_outputs(&r, &e) < 0 && r.fail == DP_RUN_FAIL_RANK && !strncmp(e.msg, "-o /nonexistent", 15),
	   "an output that cannot be made: %s", e.msg);
	dp_model_free(r.m);
	dp_run_conf_free(&c);
}

static void whole_run(void)
{
	dp_run_conf c;
	dp_run r;
	dp_err e;
	run_init(&r, &c);
	static const char *va[1];
	va[0] = val;
	r.val = va, r.nval = 1;
	char out[400], best[400], logp[400];
	snprintf(out, sizeof out, "%s/model.safetensors", dir);
	snprintf(best, sizeof best, "%s/best-{epoch}.safetensors", dir);
	snprintf(logp, sizeof logp, "%s/train.log", dir);
	r.output = out;
	r.save_best = best;
	c.early_stop = "patience=5";
	c.epochs = 2;
	ok(dp_run_join(&r, &e) == 0 && r.size == 1 && r.reps == 1, "the job: one rank");
	ok(dp_run_check_same(&r, &e) == 0, "alike with itself");
	ok(dp_run_start_from(&r, &e) == 0 && !r.ck, "no checkpoint to start from");
	ok(dp_run_model(&r, &e) == 0 && r.xent, "a classifier");
	ok(dp_run_check(&r, &e) == 0 && r.ctl_on && r.ctl.early_stop && r.ctl.save_best,
	   "checked: training control on");
	ok(dp_run_check_outputs(&r, &e) == 0, "the outputs can be made");
	ok(dp_run_setup(&r, &e) == 0 && r.td && r.vd && r.eval && r.tr, "set up: %s",
	   r.fail ? e.msg : "the data, the trainer");
	like(notes.p, " parameters, ", "a note of the model and the job");
	const char *in_out = r.output;
	r.output = train;
	ok(dp_run_check_inputs(&r, &e) < 0 && strstr(e.msg, "is one of the training files"),
	   "an output that is an input: %s", e.msg);
	r.output = in_out;
	ok(dp_run_check_inputs(&r, &e) == 0, "no output is an input");

	char *text = NULL;
	size_t len = 0;
	r.logfp = open_memstream(&text, &len);
	for (uint64_t epoch = 0; epoch < c.epochs; epoch++) {
		ok(dp_run_epoch_begin(&r, epoch, &e) == 0, "epoch %d begins", (int)epoch + 1);
		dp_step s;
		double t0, loss;
		int updates = 0;
		while (dp_run_next(&r, &s, &t0, &e) == 0 && s.gn) {
			int u = dp_run_step(&r, epoch, &s, t0, &loss, &e);
			updates += u == 1;
			if (u == 1 && r.ts.step % r.log_every == 0)
				dp_run_log_train(&r, epoch, &e);
		}
		is_int(updates, 5, "... 5 updates of 4 of 20 samples, the last short");
		is_int(r.ts.epoch_step, 5, "... where the run is");
		ok(dp_run_epoch_input(&r, epoch, 0, &e) == 0, "... its input");
		ok(dp_run_validate(&r, epoch, &e) == 0, "... validation");
		r.ts.epoch = epoch + 1, r.ts.epoch_step = 0; /* as dp-train: the next epoch's checkpoint */
		double v;
		dp_control_result res;
		int rc = dp_run_control(&r, epoch, &v, &res, &e);
		ok(rc == 0 && (epoch > 0 || res.improved) && !res.stop,
		   "... training control: val_loss %g%s", v, res.improved ? ", the best so far" : "");
		char *path = NULL;
		if (res.improved) {
			rc = dp_run_save(&r, best, "trainrun", &path, &e);
			ok(rc == 0 && strstr(path, epoch ? "best-2." : "best-1."), "... the best epoch saved: %s", rc ? e.msg : path);
		}
		ok(dp_run_control_log(&r, epoch, v, &res, path ? path : "", &e) == 0, "... its events");
		free(path);
	}
	fflush(r.logfp);
	like(text, "epoch=1 step=2 loss=", "a training line every 2 updates");
	like(text, "epoch=1 step=5 val_loss=", "the validation line at the epoch's end");
	like(text, "epoch=1 step=5 event=save_best val_loss=", "training control's event");
	like(text, "epoch=2 step=10 val_loss=", "the second epoch's");
	r.json = 1;
	const char *k[] = {"a"}, *vv[] = {"1"};
	ok(dp_run_log_line(&r, k, vv, 1, 0, &e) == 0, "a line as JSON");
	fflush(r.logfp);
	like(text, "\n{\"a\":1}\n", "... an object");
	fclose(r.logfp);
	r.logfp = NULL;
	free(text);

	char *path;
	ok(dp_run_save(&r, out, "trainrun", &path, &e) == 0 && !strcmp(path, out), "the final checkpoint");
	int alike;
	dp_st *ck = dp_job_st_open(r.comm, out, &alike, &e);
	ok(ck != NULL, "... read back");
	const char *p = ck ? dp_st_meta(ck, "producer") : NULL;
	ok(p && !strncmp(p, "trainrun ", 9), "... its producer: %s", p ? p : "none");
	p = ck ? dp_st_meta(ck, "control_state") : NULL;
	ok(p && strstr(p, "es_wait="), "... training control's state: %s", p ? p : "none");
	ok(ck && dp_run_check_model(ck, r.m, &e) == 0, "... holds the model");
	dp_st_close(ck);
	free(path);
	dp_run_close(&r);
	ok(!r.m && !r.comm, "closed");
	dp_run_conf_free(&c);
}

int main(void)
{
	ok(mkdtemp(dir) != NULL, "a folder");
	snprintf(train, sizeof train, "%s/train.tfrecord", dir);
	snprintf(val, sizeof val, "%s/val.tfrecord", dir);
	write_file(train, 20);
	write_file(val, 8);
	failures();
	whole_run();
	dp_buf_free(&notes);
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -r '%s'", dir);
	ok(system(cmd) == 0, "(cleaned up)");
	return done_testing();
}
