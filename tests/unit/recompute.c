/* recompute.c - a model's activation memory (dp_nn.h, lib/train/model/
 * memory.c) against the plain model: recomputed segments give the same
 * gradients, running statistics and predictions bit for bit (dropout
 * masks and batchnorm statistics replayed, --sync-bn's sums not asked
 * twice), with fewer bytes kept; a frozen start of the model keeps no
 * activation; micro-batches in slots (a pipeline stage's) go back
 * through what their own forward pass kept; bad patterns are named.
 * The CPU backend: weights and gradients are host memory, read directly. */
#define _GNU_SOURCE
#include "dp_nn.h"
#include "tap.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const dp_backend *be = &dp_backend_cpu;
static dp_bectx *ctx;

#define N 6
#define MAXIN (3 * 12 * 12)

static float X[2][N * MAXIN];
static int32_t Y[2][N];

static void make_data(size_t in)
{
	uint64_t s = 99;
	for (int k = 0; k < 2; k++) {
		for (size_t i = 0; i < N * in; i++) {
			s = s * 6364136223846793005ull + 1442695040888963407ull;
			X[k][i] = (float)((double)(s >> 40) / (double)(1ull << 24)) * 2 - 1;
		}
		for (int i = 0; i < N; i++)
			Y[k][i] = (i + k) % 4;
	}
}

/* The --sync-bn sums of a job of one: nothing to add, but counted. */
static int sums_called;
static int count_sum(void *c, double *v, size_t n, dp_err *e)
{
	sums_called++;
	return DP_OK;
}

static dp_model *make(const char *spec, const char *shape, const char *recompute,
		      const char *freeze, int sync)
{
	dp_err e;
	dp_shape in;
	dp_shape_parse(shape, &in, &e);
	dp_model *m = dp_model_new(spec, &in, DP_LOSS_XENT, &e);
	if (!m || dp_model_bind(m, be, ctx, N, &e) < 0 ||
	    (freeze && dp_model_freeze(m, freeze, &e) < 0) ||
	    (recompute && dp_model_set_recompute(m, recompute, &e) < 0)) {
		printf("# %s: %s\n", spec, e.msg);
		exit(1);
	}
	if (sync)
		dp_model_set_sync(m, count_sum, NULL);
	dp_model_init(m, 5);
	return m;
}

static int same(const float *a, const float *b, size_t n)
{
	return memcmp(a, b, n * sizeof *a) == 0;
}

/* Each hook's range, in order: the same calls with and without recomputation. */
typedef struct calls {
	size_t off[256];
	int n;
} calls;
static int note_hook(void *c, int layer, size_t off, size_t count, dp_err *e)
{
	calls *k = c;
	if (k->n < 256)
		k->off[k->n++] = off;
	return DP_OK;
}

/* One training step of m on batch k: forward, loss, backward, SGD. */
static int step(dp_model *m, int k, uint64_t stepno, calls *hooks)
{
	dp_err e;
	dp_pass p = {1, 11, stepno, (uint64_t)k * N};
	double st[2];
	if (dp_model_forward(m, X[k], N, &p, &e) < 0 ||
	    dp_model_loss(m, Y[k], N, 1.0f / N, 1, st, &e) < 0 ||
	    dp_model_backward(m, N, note_hook, hooks, &e) < 0) {
		printf("# step: %s\n", e.msg);
		return -1;
	}
	float *w = dp_model_params(m), *g = dp_model_grads(m);
	for (size_t i = 0; i < dp_model_nparams(m); i++)
		w[i] -= 0.05f * g[i];
	return 0;
}

static int same_counters(dp_model *a, dp_model *b)
{
	for (int i = 0; i < dp_model_nlayers(a); i++) {
		int64_t *x = dp_model_counter(a, i), *y = dp_model_counter(b, i);
		if (*x != *y)
			return 0;
	}
	return 1;
}

/* A model with and without recomputation, three steps each: the same bits. */
static void check_same(const char *what, const char *spec, const char *shape, const char *rc,
		       const char *freeze, int sync)
{
	dp_err e;
	dp_shape in;
	dp_shape_parse(shape, &in, &e);
	make_data(dp_shape_size(&in));
	dp_model *a = make(spec, shape, NULL, freeze, sync), *b = make(spec, shape, rc, freeze, sync);
	size_t np = dp_model_nparams(a);
	int grads_same = 1, hooks_same = 1, calls_a = 0, calls_b = 0;
	for (int s = 0; s < 3; s++) {
		calls ha = {0}, hb = {0};
		sums_called = 0;
		step(a, s & 1, (uint64_t)s, &ha);
		calls_a += sums_called;
		sums_called = 0;
		step(b, s & 1, (uint64_t)s, &hb);
		calls_b += sums_called;
		grads_same &= same(dp_model_grads(a), dp_model_grads(b), np);
		hooks_same &= ha.n == hb.n && !memcmp(ha.off, hb.off, (size_t)ha.n * sizeof ha.off[0]);
	}
	ok(dp_model_nsegments(b) > 0, "%s: %d segments", what, dp_model_nsegments(b));
	ok(grads_same, "%s: the same gradients, bit for bit", what);
	ok(same(dp_model_params(a), dp_model_params(b), np), "%s: the same weights", what);
	ok(same(dp_model_buffers(a), dp_model_buffers(b), dp_model_nbuffers(a)) &&
		   same_counters(a, b),
	   "%s: running statistics moved once a step", what);
	ok(hooks_same, "%s: the hooks called alike", what);
	if (sync)
		ok(calls_a == calls_b && calls_a > 0, "%s: --sync-bn's sums asked %d times, not again "
		   "in the replay (%d)", what, calls_a, calls_b);
	float pa[N * 16], pb[N * 16];
	ok(dp_model_predict(a, X[0], N, pa, &e) == 0 && dp_model_predict(b, X[0], N, pb, &e) == 0 &&
		   same(pa, pb, N * dp_model_out_size(a)),
	   "%s: the same predictions", what);
	dp_model_mem ma, mb;
	dp_model_memory(a, &ma);
	dp_model_memory(b, &mb);
	ok(mb.kept < ma.kept && mb.activations <= ma.activations,
	   "%s: fewer bytes kept (%zu, %zu in all) than without (%zu, %zu)", what, mb.kept,
	   mb.activations, ma.kept, ma.activations);
	dp_model_free(a);
	dp_model_free(b);
}

/* Two micro-batches in slots, forward both, then backward both (a
 * pipeline stage's order): each gets the gradients of its own. */
static void check_slots(const char *spec, const char *shape, const char *rc)
{
	dp_err e;
	dp_shape in;
	dp_shape_parse(shape, &in, &e);
	make_data(dp_shape_size(&in));
	dp_model *a = make(spec, shape, NULL, NULL, 0), *b = make(spec, shape, rc, NULL, 0);
	size_t np = dp_model_nparams(a);
	float *ref[2] = {malloc(np * sizeof(float)), malloc(np * sizeof(float))};
	double st[2];
	for (int k = 0; k < 2; k++) { /* one after the other */
		dp_pass p = {1, 3, 0, (uint64_t)k * N};
		dp_model_forward(a, X[k], N, &p, &e);
		dp_model_loss(a, Y[k], N, 1.0f / N, 1, st, &e);
		dp_model_backward(a, N, NULL, NULL, &e);
		memcpy(ref[k], dp_model_grads(a), np * sizeof(float));
	}
	int okk = dp_model_set_slots(b, 2, &e) == 0;
	for (int k = 0; k < 2 && okk; k++) {
		dp_pass p = {1, 3, 0, (uint64_t)k * N};
		okk &= dp_model_use_slot(b, k, &e) == 0 && dp_model_forward(b, X[k], N, &p, &e) == 0;
	}
	int same_g = 1;
	for (int k = 1; k >= 0 && okk; k--) {
		okk &= dp_model_use_slot(b, k, &e) == 0 &&
		       dp_model_loss(b, Y[k], N, 1.0f / N, 1, st, &e) == 0 &&
		       dp_model_backward(b, N, NULL, NULL, &e) == 0;
		same_g &= same(ref[k], dp_model_grads(b), np);
	}
	if (!okk)
		printf("# %s\n", e.msg);
	ok(okk && same_g, "%s%s: two micro-batches in slots, backward in reverse: the gradients of "
	   "each", spec, rc ? " recomputed" : "");
	dp_model_mem m1, m2;
	dp_model_memory(a, &m1);
	dp_model_memory(b, &m2);
	ok(m2.kept == 2 * m1.kept || rc, "two slots keep twice the bytes of one (%zu, %zu)",
	   m2.kept, m1.kept);
	free(ref[0]);
	free(ref[1]);
	dp_model_free(a);
	dp_model_free(b);
}

int main(void)
{
	dp_err e;
	if (be->open(&ctx, NULL, NULL, 0, &e) < 0)
		return 1;
	const char *cnn = "seq(conv:6:3,batchnorm,relu,conv:6:3,relu),maxpool:2,"
			  "seq(dropout:0.3,flatten,dense:16,relu,dropout:0.5),dense:4";
	const char *res = "conv:8:3:1:1,batchnorm,relu,"
			  "res(conv:8:3:1:1,batchnorm,relu,dropout:0.2,conv:8:3:1:1,batchnorm):relu,"
			  "res(conv:16:3:2:1,batchnorm,relu,conv:16:3:1:1,batchnorm|conv:16:1:2,batchnorm):relu,"
			  "gap,flatten,dense:4";
	check_same("blocks of a CNN (batchnorm, dropout, maxpool)", cnn, "3x12x12", "", NULL, 0);
	check_same("residual blocks", res, "3x12x12", "", NULL, 0);
	check_same("residual blocks, --sync-bn", res, "3x12x12", "blocks", NULL, 1);
	check_same("layers named", "dense:32,tanh,dropout:0.4,dense:32,sigmoid,dropout:0.1,dense:4",
		   "20", "[0-4]", NULL, 0);
	check_same("a frozen start and a recomputed block", res, "3x12x12", "3", "0,1", 0);
	check_same("resnet20", "resnet20:4", "3x12x12", "", NULL, 0);

	/* a frozen start keeps nothing: its outputs are scratch */
	make_data(3 * 12 * 12);
	dp_model *a = make(cnn, "3x12x12", NULL, NULL, 0), *b = make(cnn, "3x12x12", NULL, "0.0,0.1", 0);
	dp_model_mem ma, mb;
	dp_model_memory(a, &ma);
	dp_model_memory(b, &mb);
	/* the frozen conv's output (6x10x10), read by nothing that trains */
	ok(ma.kept - mb.kept >= N * 600 * sizeof(float),
	   "a frozen conv keeps no activation (%zu bytes kept, %zu unfrozen)", mb.kept,
	   ma.kept);
	dp_model_free(a);
	dp_model_free(b);

	check_slots(res, "3x12x12", NULL);
	check_slots(res, "3x12x12", "");
	check_slots(cnn, "3x12x12", NULL);

	/* patterns */
	dp_shape s;
	dp_shape_parse("3x12x12", &s, &e);
	dp_model *m = dp_model_new(res, &s, DP_LOSS_XENT, &e);
	ok(dp_model_set_recompute(m, "nothing*", &e) < 0, "a pattern that names nothing is refused");
	like(e.msg, "'nothing*' names no layer or block", "and named");
	ok(dp_model_set_recompute(m, "1,2,3.0", &e) < 0, "a run read from after it is refused");
	like(e.msg, "are not one segment", "as not a segment");
	ok(dp_model_set_recompute(m, "3", &e) == 0 && dp_model_nsegments(m) == 1,
	   "a block by its path");
	int f, l;
	dp_model_segment(m, 0, &f, &l);
	dp_layer_info li;
	dp_model_layer(m, l, &li);
	is_str(li.name, "3", "the segment ends at the block's sum");
	ok(dp_model_set_recompute(m, NULL, &e) == 0 && dp_model_nsegments(m) == 0, "and off");
	dp_model_free(m);
	dp_shape_parse("20", &s, &e);
	m = dp_model_new("dense:8,relu,dense:4", &s, DP_LOSS_XENT, &e);
	ok(dp_model_set_recompute(m, "", &e) < 0, "no blocks to recompute");
	like(e.msg, "has no blocks", "said so");
	dp_model_free(m);
	be->close(ctx);
	return done_testing();
}
