/* step.c - the trainer's step (dp_train.h) against the plain step of a
 * single process: forward over the whole global batch, loss scaled by its
 * size, backward, optimizer update (dp_nn.h, dp_optim.h), no trainer.
 *
 * Cases: plain updates; gradient accumulation (2 micro-batches an update),
 * a short update at an epoch's end (dp_step_flush: the mean over the
 * samples it has), an update dropped (dp_step_drop); ranks without
 * samples (idle ranks send zeros, alone and within an accumulated
 * update); a frozen start of the model (its gradients not summed, its
 * weights unchanged); synchronised batchnorm; a loss that is not finite.
 *
 * Run plainly it checks the job of one; tests/dp-step.t runs it under
 * mpirun with 2 ranks (and 4: a batch of 8 split four ways), where each
 * rank takes its slice of every global batch, rank 0 prints the TAP and
 * every rank's failures fail the job.  The CPU backend: weights are host
 * memory, read directly. */
#define _GNU_SOURCE
#include "dp_train.h"
#include "tap.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NIN 5
#define NOUT 3
#define NDATA 32

static const dp_backend *be = &dp_backend_cpu;
static dp_bectx *ctx;
static dp_comm *comm;
static int rank, size;
static float X[NDATA][NIN]; /* the data set: the same on every rank */
static int32_t Y[NDATA];

static void make_data(void)
{
	uint64_t s = 12345;
	for (int i = 0; i < NDATA; i++) {
		for (int j = 0; j < NIN; j++) {
			s = s * 6364136223846793005ull + 1442695040888963407ull;
			X[i][j] = (float)((double)(s >> 40) / (double)(1ull << 24)) * 2 - 1;
		}
		Y[i] = i % NOUT;
	}
}

typedef struct run {
	dp_model *m;
	dp_optim *o;
} run;

/* A model (spec over NIN inputs, cross-entropy) with fresh weights of
 * seed 7, SGD with momentum; freeze: patterns of tensors kept fixed. */
static run make_run(const char *spec, const char *freeze)
{
	dp_err e;
	dp_shape in;
	run r = {0};
	dp_shape_parse("5", &in, &e);
	dp_optim_conf oc;
	dp_optim_defaults(&oc, DP_OPTIM_SGD);
	oc.momentum = 0.9;
	if (!(r.m = dp_model_new(spec, &in, DP_LOSS_XENT, &e)) || dp_model_bind(r.m, be, ctx, NDATA, &e) < 0 ||
	    !(r.o = dp_optim_new(&oc, be, ctx, dp_model_nparams(r.m), &e)) ||
	    (freeze && (dp_model_freeze(r.m, freeze, &e) < 0 ||
			dp_optim_set_tensors(r.o, r.m, freeze, NULL, NULL, &e) < 0))) {
		printf("# %s: %s\n", spec, e.msg);
		exit(1);
	}
	dp_model_init(r.m, 7);
	return r;
}

static void free_run(run *r)
{
	dp_optim_free(r->o);
	dp_model_free(r->m);
}

/* The reference: one update over samples idx[0..n) in one process, in
 * `chunks` passes of n / chunks samples (a micro-batch of the whole job
 * each: what batchnorm sees), their gradients summed. */
static void ref_update(run *r, const int *idx, size_t n, size_t chunks, uint64_t step, double lr)
{
	dp_err e;
	float x[NDATA][NIN];
	int32_t y[NDATA];
	size_t np = dp_model_nparams(r->m), c = n / chunks;
	float *sum = calloc(np, sizeof *sum), *g = dp_model_grads(r->m);
	for (size_t i = 0; i < n; i++) {
		memcpy(x[i], X[idx[i]], sizeof x[i]);
		y[i] = Y[idx[i]];
	}
	for (size_t k = 0; k < chunks; k++) {
		dp_pass p = {1, 1, step, 0};
		double st[2];
		if (dp_model_forward(r->m, &x[k * c][0], c, &p, &e) < 0 ||
		    dp_model_loss(r->m, &y[k * c], c, 1.0f / (float)n, 1, st, &e) < 0 ||
		    dp_model_backward(r->m, c, NULL, NULL, &e) < 0)
			printf("# reference: %s\n", e.msg);
		for (size_t i = 0; i < np; i++)
			sum[i] += g[i];
	}
	dp_optim_step(r->o, dp_model_params(r->m), sum, lr);
	free(sum);
}

/* The largest difference between two runs' weights and running statistics. */
static double max_diff(run *a, run *b)
{
	double d = 0;
	const float *pa = dp_model_params(a->m), *pb = dp_model_params(b->m);
	for (size_t i = 0; i < dp_model_nparams(a->m); i++)
		d = fmax(d, fabs((double)pa[i] - pb[i]));
	pa = dp_model_buffers(a->m), pb = dp_model_buffers(b->m);
	for (size_t i = 0; i < dp_model_nbuffers(a->m); i++)
		d = fmax(d, fabs((double)pa[i] - pb[i]));
	return d;
}

static dp_trainer *make_trainer(run *r, uint64_t batch, uint64_t accumulate, int sync_bn)
{
	dp_err e;
	dp_step_conf sc = {.batch = batch, .accumulate = accumulate, .seed = 1, .sync_bn = sync_bn};
	dp_trainer *t = dp_trainer_new(r->m, r->o, comm, &sc, &e);
	if (!t) {
		printf("# trainer: %s\n", e.msg);
		exit(1);
	}
	return t;
}

/* A micro-batch of this rank: samples first, first + 1, ... (n of them,
 * 0: none), agreed with the other ranks. */
static int step_of(dp_trainer *t, dp_step *s, int first, size_t n, dp_err *e)
{
	*s = (dp_step){.x = n ? X[first] : NULL, .y = n ? &Y[first] : NULL, .n = n};
	return dp_step_agree(t, s, e);
}

/* Updates of a global batch of 8 (2 updates), each rank its slice of
 * each micro-batch, against the reference over the 8 samples; accumulate
 * micro-batches an update. */
static void test_updates(const char *spec, const char *freeze, uint64_t accumulate, int sync_bn,
			 const char *what)
{
	dp_err e;
	run a = make_run(spec, freeze), ref = make_run(spec, freeze);
	float *w0 = malloc(dp_model_nparams(a.m) * sizeof *w0);
	memcpy(w0, dp_model_params(a.m), dp_model_nparams(a.m) * sizeof *w0);
	uint64_t B = 8 / accumulate / (uint64_t)size; /* a rank's micro-batch */
	dp_trainer *t = make_trainer(&a, B, accumulate, sync_bn);
	int good = 1, updates = 0, zeros = 1;
	uint64_t samples = 0;
	dp_layer_info l0;
	dp_model_layer(a.m, 0, &l0);
	for (uint64_t u = 0; u < 2; u++) {
		for (uint64_t k = 0; k < accumulate; k++) {
			dp_step s;
			dp_step_result r;
			int first = (int)(8 * u + (k * (uint64_t)size + (uint64_t)rank) * B);
			good &= step_of(t, &s, first, B, &e) == 0 && s.gn == B * (uint64_t)size &&
				s.nout == 0 && s.first_out == -1;
			good &= dp_step_run(t, &s, u, 0.1, &r, &e) == 0;
			good &= r.updated == (k + 1 == accumulate);
			updates += r.updated;
			samples += r.samples;
			good &= dp_step_pending(t) == (k + 1) % accumulate;
			/* a frozen start's gradients: zeros after every micro-batch
			 * (backward does not clear them each step) */
			for (size_t i = 0; freeze && i < l0.nparams; i++)
				zeros &= dp_model_grads(a.m)[i] == 0;
		}
		int idx[8];
		for (int i = 0; i < 8; i++)
			idx[i] = (int)(8 * u) + i;
		ref_update(&ref, idx, 8, (size_t)accumulate, u, 0.1);
	}
	ok(good && updates == 2 && samples == 2 * B * accumulate, "%s: 2 updates of %d x %" PRIu64 " x %" PRIu64,
	   what, size, accumulate, B);
	double d = max_diff(&a, &ref);
	ok(d < 1e-5, "%s: the reference's weights%s (max difference %g)", what,
	   dp_model_nbuffers(a.m) ? " and running statistics" : "", d);
	if (freeze) { /* the frozen start of the model did not move */
		dp_layer_info li;
		dp_model_layer(a.m, 0, &li);
		ok(li.frozen && li.nparams && !memcmp(w0, dp_model_params(a.m), li.nparams * sizeof *w0) &&
			   memcmp(w0, dp_model_params(a.m), dp_model_nparams(a.m) * sizeof *w0),
		   "%s: the frozen layer's %zu weights unchanged, the rest trained", what, li.nparams);
		ok(zeros, "%s: the frozen layer's gradients zeros after every step", what);
	}
	uint64_t h, *all = calloc((size_t)size, sizeof *all);
	good = dp_trainer_state_hash(t, &h, &e) == 0 && dp_comm_allgather(comm, &h, all, sizeof h, &e) == 0;
	for (int r = 1; r < size; r++)
		good &= all[r] == all[0];
	ok(good, "%s: every rank holds the same state", what);
	free(all);
	free(w0);
	dp_trainer_free(t);
	free_run(&a);
	free_run(&ref);
}

/* A layer frozen after steps that gave it gradients (dp_model_freeze on
 * a model that trained): its gradients zeros from the freeze on, through
 * steps with weight decay and clipping, and its weights unchanged. */
static void test_freeze_late(void)
{
	dp_err e;
	run a = make_run("dense:6,relu,dense:3", NULL);
	dp_trainer *t = make_trainer(&a, 8 / (uint64_t)size, 1, 0);
	dp_step s;
	dp_step_result r;
	dp_layer_info l0;
	dp_model_layer(a.m, 0, &l0);
	int good = step_of(t, &s, 8 * rank / size, 8 / (size_t)size, &e) == 0 &&
		   dp_step_run(t, &s, 0, 0.1, &r, &e) == 0, nonzero = 0, zeros = 1;
	for (size_t i = 0; i < l0.nparams; i++)
		nonzero += dp_model_grads(a.m)[i] != 0;
	dp_trainer_free(t);
	good &= dp_model_freeze(a.m, "0", &e) == 0 &&
		dp_optim_set_tensors(a.o, a.m, "0", NULL, NULL, &e) == 0;
	for (size_t i = 0; i < l0.nparams; i++)
		zeros &= dp_model_grads(a.m)[i] == 0;
	float *w0 = malloc(l0.nparams * sizeof *w0);
	memcpy(w0, dp_model_params(a.m), l0.nparams * sizeof *w0);
	dp_step_conf sc = {.batch = 8 / (uint64_t)size, .accumulate = 1, .seed = 1, .clip_norm = 1e-3};
	dp_optim_conf oc = *dp_optim_conf_get(a.o);
	oc.weight_decay = 0.1;
	dp_optim_free(a.o);
	t = NULL;
	if (!(a.o = dp_optim_new(&oc, be, ctx, dp_model_nparams(a.m), &e)) ||
	    dp_optim_set_tensors(a.o, a.m, "0", NULL, NULL, &e) < 0 ||
	    !(t = dp_trainer_new(a.m, a.o, comm, &sc, &e)))
		good = 0;
	for (uint64_t u = 1; t && u < 4; u++) {
		good &= step_of(t, &s, (int)(8 * u) + 8 * rank / size, 8 / (size_t)size, &e) == 0 &&
			dp_step_run(t, &s, u, 0.1, &r, &e) == 0 && r.updated;
		for (size_t i = 0; i < l0.nparams; i++)
			zeros &= dp_model_grads(a.m)[i] == 0;
	}
	ok(good && nonzero > 0, "a step before the freeze gave layer 0 gradients (%d of %zu nonzero)",
	   nonzero, l0.nparams);
	ok(zeros, "frozen after it: its gradients zeros at the freeze and after 3 more steps");
	ok(!memcmp(w0, dp_model_params(a.m), l0.nparams * sizeof *w0),
	   "... its weights unchanged (weight decay 0.1, clipping to 1e-3)");
	free(w0);
	dp_trainer_free(t);
	free_run(&a);
}

/* An update whose last micro-batch rank `idle` has no samples for: it
 * sends zeros (accumulate 1) or what it accumulated (accumulate 2); the
 * update is the mean over the samples the job had. */
static void test_idle(uint64_t accumulate, int sync_bn, const char *spec)
{
	dp_err e;
	run a = make_run(spec, NULL), ref = make_run(spec, NULL);
	uint64_t B = 2, full = B * accumulate * (uint64_t)size;
	int idle = size - 1, idx[NDATA], nidx = 0, good = 1;
	dp_trainer *t = make_trainer(&a, B, accumulate, sync_bn);
	dp_step_result r = {0};
	for (uint64_t k = 0; k < accumulate; k++) {
		int last = k + 1 == accumulate;
		for (int q = 0; q < size; q++) /* the reference's samples, in order */
			for (int i = 0; i < (int)B && !(last && q == idle); i++)
				idx[nidx++] = (int)((k * (uint64_t)size + (uint64_t)q) * B) + i;
		dp_step s;
		int first = (int)((k * (uint64_t)size + (uint64_t)rank) * B);
		good &= step_of(t, &s, first, last && rank == idle ? 0 : B, &e) == 0;
		good &= s.gn == (last ? full / accumulate - B : full / accumulate) && s.nout == last &&
			s.first_out == (last ? idle : -1);
		good &= dp_step_run(t, &s, 0, 0.1, &r, &e) == 0;
	}
	ref_update(&ref, idx, (size_t)nidx, 1, 0, 0.1);
	double d = max_diff(&a, &ref);
	ok(good && r.updated, "rank %d idle in the last of %" PRIu64 " micro-batch%s%s: one update of %d samples", idle,
	   accumulate, accumulate == 1 ? "" : "es", sync_bn ? " (sync-bn)" : "", nidx);
	ok(d < 1e-5, "... the reference's over those samples (max difference %g)", d);
	dp_trainer_free(t);
	free_run(&a);
	free_run(&ref);
}

/* The data ends within an update: flushed, the mean over what it has;
 * dropped, nothing. */
static void test_flush_drop(void)
{
	dp_err e;
	const char *spec = "dense:6,relu,dense:3";
	run a = make_run(spec, NULL), ref = make_run(spec, NULL), b = make_run(spec, NULL);
	uint64_t B = 2;
	dp_trainer *t = make_trainer(&a, B, 3, 0), *tb = make_trainer(&b, B, 2, 0);
	dp_step_result r;
	int good = 1, idx[NDATA], nidx = 0;
	for (uint64_t k = 0; k < 2; k++) {
		dp_step s;
		good &= step_of(t, &s, (int)((k * (uint64_t)size + (uint64_t)rank) * B), B, &e) == 0 &&
			dp_step_run(t, &s, 0, 0.1, &r, &e) == 0 && !r.updated;
		for (int i = 0; i < (int)B * size; i++)
			idx[nidx++] = (int)(k * B * (uint64_t)size) + i;
	}
	good &= dp_step_pending(t) == 2;
	good &= dp_step_flush(t, 0, 0.1, &r, &e) == 0 && r.updated && dp_step_pending(t) == 0 &&
		r.samples == 2 * B;
	ref_update(&ref, idx, (size_t)nidx, 1, 0, 0.1);
	double d = max_diff(&a, &ref);
	ok(good, "2 micro-batches of an update of 3, flushed: one update of %d samples", nidx);
	ok(d < 1e-5, "... the reference's over them (max difference %g)", d);
	good = dp_step_flush(t, 0, 0.1, &r, &e) == 0 && !r.updated;
	ok(good, "a flush with nothing pending updates nothing");

	float *w0 = malloc(dp_model_nparams(b.m) * sizeof *w0);
	memcpy(w0, dp_model_params(b.m), dp_model_nparams(b.m) * sizeof *w0);
	dp_step s;
	good = step_of(tb, &s, rank * (int)B, B, &e) == 0 && dp_step_run(tb, &s, 0, 0.1, &r, &e) == 0 &&
	       !r.updated && dp_step_pending(tb) == 1;
	dp_step_drop(tb);
	good &= dp_step_pending(tb) == 0 && dp_step_flush(tb, 0, 0.1, &r, &e) == 0 && !r.updated;
	ok(good && !memcmp(w0, dp_model_params(b.m), dp_model_nparams(b.m) * sizeof *w0),
	   "a micro-batch dropped: nothing pending, the weights unchanged");
	free(w0);
	dp_trainer_free(t);
	dp_trainer_free(tb);
	free_run(&a);
	free_run(&ref);
	free_run(&b);
}

/* A loss that is not finite (every rank's input holds a NaN): DP_EDATA,
 * the loss given back, no update; in an update of one micro-batch, and in
 * the first or the last of an update of two (whose loss is read after its
 * backward pass is queued: its gradients must not reach the weights). */
static void test_diverged(uint64_t accumulate, int bad)
{
	dp_err e;
	run a = make_run("dense:6,tanh,dense:3", NULL); /* (relu would take the NaN to 0) */
	dp_trainer *t = make_trainer(&a, 2, accumulate, 0);
	float x[2][NIN];
	memcpy(x, X, sizeof x);
	x[1][2] = NAN;
	float *w0 = malloc(dp_model_nparams(a.m) * sizeof *w0);
	memcpy(w0, dp_model_params(a.m), dp_model_nparams(a.m) * sizeof *w0);
	dp_step good = {.x = X[0], .y = Y, .n = 2}, s = {.x = &x[0][0], .y = Y, .n = 2};
	dp_step_result r;
	int ag = 0, rc = 0;
	for (int i = 0; i < bad && rc == 0; i++)
		if ((ag |= dp_step_agree(t, &good, &e)) == 0)
			rc = dp_step_run(t, &good, 0, 0.1, &r, &e);
	ok(ag == 0 && rc == 0 && dp_step_pending(t) == (uint64_t)bad, "micro-batch %d of %d: the ones before pass",
	   bad + 1, (int)accumulate);
	ag = dp_step_agree(t, &s, &e);
	rc = dp_step_run(t, &s, 0, 0.1, &r, &e);
	ok(ag == 0 && rc == DP_EDATA && isnan(r.loss) && !r.updated, "a NaN loss: DP_EDATA, the loss given back");
	like(e.msg, "loss is NaN", "... said so");
	ok(!memcmp(w0, dp_model_params(a.m), dp_model_nparams(a.m) * sizeof *w0) &&
		   dp_step_pending(t) == (uint64_t)bad,
	   "... the weights unchanged, the micro-batch not counted");
	free(w0);
	dp_trainer_free(t);
	free_run(&a);
}

int main(void)
{
	dp_err e;
	dp_settings_from_env();
	if (be->open(&ctx, NULL, NULL, 0, &e) < 0 || !(comm = dp_comm_open(be, ctx, &e))) {
		printf("# %s\n", e.msg);
		return 1;
	}
	if (tap_comm_start(comm, &rank, &size) < 0)
		return 1;
	ok(size == 1 || size == 2 || size == 4, "rank %d of %d", rank, size);
	make_data();
	const char *mlp = "dense:6,relu,dense:3", *bn = "dense:6,batchnorm,relu,dense:3";
	test_updates(mlp, NULL, 1, 0, "plain");
	test_updates(mlp, NULL, 2, 0, "accumulate 2");
	test_updates(mlp, "0", 1, 0, "--freeze 0");
	test_updates(mlp, "0", 2, 0, "--freeze 0, accumulate 2");
	test_updates(bn, NULL, 1, 1, "batchnorm, sync-bn");
	test_updates(bn, NULL, 2, 1, "batchnorm, sync-bn, accumulate 2");
	if (size > 1) {
		test_idle(1, 0, mlp);
		test_idle(2, 0, mlp);
		test_idle(1, 1, bn);
	}
	test_flush_drop();
	test_freeze_late();
	test_diverged(1, 0);
	test_diverged(2, 0);
	test_diverged(2, 1);
	dp_comm_close(comm);
	be->close(ctx);
	return done_testing();
}
