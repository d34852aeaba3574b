/* pipeline.c - the trainer's pipeline (dp_train.h) against the plain
 * updates of one process over the same global batch in micro-batches of
 * the same size (what one rank does with --batch-size B/M --accumulate
 * M x D): GPipe's and 1F1B's schedules, data-parallel replicas, gradient
 * accumulation, clipping over every stage, a frozen start of the model,
 * recomputation in the stages, and the whole model's checkpoint written
 * from the stages.  Batchnorm and dropout in the model: the masks come
 * from the samples' places in the global batch, the statistics from each
 * micro-batch.
 *
 * tests/dp-pipeline.t runs it under mpirun: 2 ranks (2 stages), 4 ranks
 * (4 stages, and 2 stages x 2 replicas); every rank computes the
 * reference itself and compares its stage's piece of it: with one
 * replica the same bits (the same operations in the same order), with
 * more within 1e-5 (the replicas' sums in another order).  Run plainly
 * (one process) it checks that a pipeline needs stages x replicas ranks.
 * The CPU backend: weights are host memory, read directly. */
#define _GNU_SOURCE
#include "dp_train.h"
#include "tap.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define IN (3 * 6 * 6)
#define NDATA 96
static const char *SPEC =
	"conv:4:3:1:1,batchnorm,relu,"
	"res(conv:4:3:1:1,batchnorm,relu,dropout:0.2,conv:4:3:1:1,batchnorm):relu,"
	"res(conv:8:3:2:1,batchnorm,relu,conv:8:3:1:1,batchnorm|conv:8:1:2,batchnorm):relu,"
	"gap,flatten,dropout:0.3,dense:3";

static const dp_backend *be = &dp_backend_cpu;
static dp_bectx *ctx;
static dp_comm *comm;
static int rank, size;
static float X[NDATA][IN];
static int32_t Y[NDATA];

static dp_model *model(void)
{
	dp_err e;
	dp_shape in;
	dp_shape_parse("3x6x6", &in, &e);
	dp_model *m = dp_model_new(SPEC, &in, DP_LOSS_XENT, &e);
	if (!m) {
		printf("# %s\n", e.msg);
		exit(1);
	}
	return m;
}

static dp_optim *sgd(dp_model *m)
{
	dp_err e;
	dp_optim_conf oc;
	dp_optim_defaults(&oc, DP_OPTIM_SGD);
	oc.momentum = 0.9;
	dp_optim *o = dp_optim_new(&oc, be, ctx, dp_model_nparams(m), &e);
	if (!o) {
		printf("# %s\n", e.msg);
		exit(1);
	}
	return o;
}

typedef struct setup {
	int S, D, M, A, sched;
	uint64_t B;
	double clip;
	const char *freeze, *recompute;
} setup;

/* The reference: one process, `updates` updates of the global batch (A
 * x D x B samples) in micro-batches of B / M; its weights, running
 * statistics and optimizer state are left in m, o. */
static void reference(const setup *c, int updates, dp_model *m, dp_optim *o)
{
	dp_err e;
	size_t np = dp_model_nparams(m), b = c->B / (uint64_t)c->M;
	float *acc = calloc(np, sizeof *acc), *g = dp_model_grads(m);
	uint64_t full = (uint64_t)c->A * (uint64_t)c->D * c->B;
	for (int u = 0; u < updates; u++) {
		size_t base = (size_t)u * full;
		for (uint64_t j = 0; j < full / b; j++) {
			dp_pass p = {1, 1, (uint64_t)u, j * b};
			double st[2];
			if (dp_model_forward(m, X[base + j * b], b, &p, &e) < 0 ||
			    dp_model_loss(m, &Y[base + j * b], b, 1.0f / (float)full, 1, st, &e) < 0 ||
			    dp_model_backward(m, b, NULL, NULL, &e) < 0)
				printf("# reference: %s\n", e.msg);
			for (size_t i = 0; i < np; i++)
				acc[i] = j ? acc[i] + g[i] : g[i];
		}
		memcpy(g, acc, np * sizeof *g);
		if (c->clip > 0)
			dp_grads_clip(be, ctx, g, np, c->clip);
		dp_optim_step(o, dp_model_params(m), g, 0.05);
	}
	free(acc);
}

static double max_diff(const float *a, const float *b, size_t n)
{
	double d = 0;
	for (size_t i = 0; i < n; i++)
		d = fmax(d, fabs((double)a[i] - b[i]));
	return d;
}

static void run(const char *what, setup c, int updates)
{
	dp_err e;
	if (size != c.S * c.D)
		return;
	dp_step_conf sc = {c.B, (uint64_t)c.A, c.clip, 1, 0, c.S, (uint64_t)c.M, c.sched};
	dp_model *m = model(), *ref = model();
	dp_pipe_plan pl;
	dp_optim *o = NULL, *ro = NULL;
	dp_trainer *t = NULL;
	int okk = dp_pipe_plan_model(m, &sc, rank, size, &pl, &e) == 0 &&
		  dp_model_bind(m, be, ctx, pl.micro_batch, &e) == 0 &&
		  dp_model_bind(ref, be, ctx, c.B / (uint64_t)c.M, &e) == 0 &&
		  (!c.freeze || (dp_model_freeze(m, c.freeze, &e) == 0 &&
				 dp_model_freeze(ref, c.freeze, &e) == 0)) &&
		  (!c.recompute || dp_model_set_recompute(m, c.recompute, &e) == 0);
	if (okk) {
		o = sgd(m);
		ro = sgd(ref);
		okk = (!c.freeze || (dp_optim_set_tensors(o, m, c.freeze, NULL, NULL, &e) == 0 &&
				     dp_optim_set_tensors(ro, ref, c.freeze, NULL, NULL, &e) == 0)) &&
		      (t = dp_trainer_new(m, o, comm, &sc, &e)) != NULL;
	}
	if (!okk) {
		ok(0, "%s: set up: %s", what, e.msg);
		exit(1);
	}
	dp_model_init(m, 3);
	dp_model_init(ref, 3);
	int dr = 0, D = dp_trainer_replicas(t, &dr);
	double loss = 0;
	uint64_t samples = 0;
	for (int u = 0; u < updates && okk; u++)
		for (int a = 0; a < c.A && okk; a++) {
			size_t first = ((size_t)u * (size_t)c.A * (size_t)D + (size_t)a * (size_t)D +
					(size_t)dr) * c.B;
			dp_step s = {0};
			if (dp_trainer_reads(t))
				s = (dp_step){.x = X[first], .y = &Y[first], .n = c.B};
			dp_step_result r;
			okk = dp_step_agree(t, &s, &e) == 0 && s.gn == (uint64_t)D * c.B &&
			      dp_step_run(t, &s, (uint64_t)u, 0.05, &r, &e) == 0;
			loss += r.loss_sum;
			samples += r.samples;
		}
	if (!okk)
		printf("# rank %d: %s\n", rank, e.msg);
	reference(&c, updates, ref, ro);
	/* this stage's piece of the whole */
	dp_tensor_info t0;
	dp_model_tensor(m, 0, &t0);
	size_t off = 0, boff = 0;
	for (int i = 0; i < dp_model_ntensors(ref); i++) {
		dp_tensor_info ti;
		dp_model_tensor(ref, i, &ti);
		if (!strcmp(ti.name, t0.name)) {
			off = ti.off;
			break;
		}
	}
	for (int i = 0; i < pl.first[pl.stage]; i++) { /* the running statistics before it */
		dp_layer_info li;
		dp_model_layer(ref, i, &li);
		if (li.kind == DP_LAYER_BATCHNORM)
			boff += 2 * (size_t)li.in.c;
	}
	size_t np = dp_model_nparams(m), nb = dp_model_nbuffers(m);
	double dw = max_diff(dp_model_params(m), dp_model_params(ref) + off, np);
	double ds = max_diff(dp_optim_state(o, 0), dp_optim_state(ro, 0) + off, np);
	double lim = c.D == 1 ? 0 : 1e-5;
	double flags[2] = {okk ? 0 : 1, dw > lim || ds > lim ? 1 : 0};
	dp_comm_allreduce_sum(comm, flags, 2, &e); /* every rank's verdict */
	ok(flags[0] == 0, "%s: %d updates on every rank", what, updates);
	ok(flags[1] == 0, "%s: rank %d's stage %d (layers %d-%d) ends with the reference's weights "
	   "and momentum (%s; differs by %.3g, %.3g)", what, rank, pl.stage, pl.first[pl.stage],
	   pl.first[pl.stage + 1] - 1, c.D == 1 ? "bit for bit" : "within 1e-5", dw, ds);
	if (c.D == 1 && !c.freeze)
		ok(!memcmp(dp_model_buffers(m), dp_model_buffers(ref) + boff, nb * sizeof(float)),
		   "%s: the same running statistics", what);
	double ls[2] = {loss, (double)samples};
	dp_comm_allreduce_sum(comm, ls, 2, &e);
	ok(ls[1] == (double)updates * c.A * D * (double)c.B && ls[0] > 0,
	   "%s: the last stages report the job's loss over its %.0f samples", what, ls[1]);
	/* the whole model's checkpoint: the reference's tensors */
	char path[64];
	snprintf(path, sizeof path, "/tmp/dp-pipeline-%d.st", (int)getppid());
	dp_train_state ts = {1, (uint64_t)updates, 0, 0};
	int rc = dp_trainer_save(t, path, &ts, NULL, &e);
	double v[2] = {rc == 0 ? 0 : 1, 0};
	if (rank == 0 && rc == 0) {
		dp_model *w = model();
		dp_st *ck = dp_st_open(path, &e);
		if (!ck || dp_model_bind(w, be, ctx, 1, &e) < 0 || dp_ckpt_load_weights(ck, w, &e) < 0)
			v[1] = 1;
		else
			v[1] = max_diff(dp_model_params(w), dp_model_params(ref), dp_model_nparams(ref)) > lim;
		dp_st_close(ck);
		dp_model_free(w);
		unlink(path);
	}
	dp_comm_allreduce_sum(comm, v, 2, &e);
	ok(v[0] == 0 && v[1] == 0, "%s: the checkpoint of the whole model, from the stages, holds "
	   "the reference's weights", what);
	dp_trainer_free(t);
	dp_optim_free(o);
	dp_optim_free(ro);
	dp_model_free(m);
	dp_model_free(ref);
}

int main(void)
{
	dp_err e;
	if (be->open(&ctx, NULL, NULL, 0, &e) < 0 || !(comm = dp_comm_open(be, ctx, &e))) {
		printf("# %s\n", e.msg);
		return 1;
	}
	if (tap_comm_start(comm, &rank, &size) < 0)
		return 1;
	uint64_t s = 4242;
	for (int i = 0; i < NDATA; i++) {
		for (int j = 0; j < IN; j++) {
			s = s * 6364136223846793005ull + 1442695040888963407ull;
			X[i][j] = (float)((double)(s >> 40) / (double)(1ull << 24)) * 2 - 1;
		}
		Y[i] = (i * 7) % 3;
	}
	/* a plan that cannot be */
	dp_model *m = model();
	dp_pipe_plan pl;
	dp_step_conf bad = {8, 1, 0, 1, 0, 3, 2, 0};
	ok(dp_pipe_plan_model(m, &bad, 0, 4, &pl, &e) < 0 && strstr(e.msg, "4 ranks for 3 pipeline stages"),
	   "4 ranks for 3 stages: refused (%s)", e.msg);
	bad.stages = 2;
	bad.micro = 9;
	ok(dp_pipe_plan_model(m, &bad, 0, 2, &pl, &e) < 0 && strstr(e.msg, "9 micro-batches"),
	   "more micro-batches than samples: refused");
	bad.micro = 0;
	ok(dp_pipe_plan_model(m, &bad, 1, 2, &pl, &e) == 0 && pl.micro == 8 && pl.micro_batch == 1 &&
		   pl.stage == 1 && pl.slots == 1,
	   "2 stages, batch 8: 8 micro-batches of 1 (4 x stages at most), 1 in flight on the last "
	   "stage with 1F1B");
	dp_model_free(m);

	setup g = {2, 1, 4, 1, DP_PIPE_GPIPE, 8, 0, NULL, NULL};
	run("2 stages, GPipe", g, 3);
	g.sched = DP_PIPE_1F1B;
	run("2 stages, 1F1B", g, 3);
	g.A = 2, g.clip = 0.05;
	run("2 stages, 1F1B, 2 steps an update, clipped", g, 2);
	g = (setup){2, 1, 2, 1, DP_PIPE_1F1B, 8, 0, "0,1", "blocks"};
	run("2 stages, a frozen start, recomputed", g, 2);
	g.freeze = "0,1,3", g.recompute = NULL;
	run("2 stages, the first frozen whole (no gradient goes back)", g, 2);
	g = (setup){4, 1, 4, 1, DP_PIPE_1F1B, 8, 0, NULL, NULL};
	run("4 stages, 1F1B", g, 3);
	g.sched = DP_PIPE_GPIPE;
	g.M = 8;
	run("4 stages, GPipe, 8 micro-batches", g, 2);
	g = (setup){2, 2, 4, 1, DP_PIPE_1F1B, 8, 0, NULL, NULL};
	run("2 stages x 2 replicas, 1F1B", g, 3);
	g.sched = DP_PIPE_GPIPE;
	g.clip = 0.05;
	run("2 stages x 2 replicas, GPipe, clipped", g, 2);
	dp_comm_close(comm);
	be->close(ctx);
	return done_testing();
}
