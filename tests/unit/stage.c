/* stage.c - a model cut into pipeline stages (dp_nn.h, lib/train/model/
 * stage.c): where a model can be cut (between residual blocks, not inside
 * one), the cut of about equal cost, and the stages' models chained by
 * hand (outputs forward, input gradients back, as the pipeline sends
 * them) against the whole model: the same weights from the same seed, the
 * same outputs and gradients bit for bit, dropout and batchnorm included,
 * recomputation and slots in a stage; a stage's tensors, and --freeze
 * patterns naming other stages' layers.  The CPU backend: weights and
 * gradients are host memory, read directly. */
#define _GNU_SOURCE
#include "dp_nn.h"
#include "tap.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const dp_backend *be = &dp_backend_cpu;
static dp_bectx *ctx;

#define N 5
static float X[N * 3 * 10 * 10];
static int32_t Y[N];

static const char *RES = "conv:8:3:1:1,batchnorm,relu,"
			 "res(conv:8:3:1:1,batchnorm,relu,dropout:0.2,conv:8:3:1:1,batchnorm):relu,"
			 "res(conv:16:3:2:1,batchnorm,relu,conv:16:3:1:1,batchnorm|conv:16:1:2,batchnorm):relu,"
			 "res(conv:16:3:1:1,batchnorm,relu,conv:16:3:1:1,batchnorm):relu,"
			 "gap,flatten,dropout:0.3,dense:4";

static dp_model *make(const char *spec, int first, int end, const char *freeze,
		      const char *recompute)
{
	dp_err e;
	dp_shape in;
	dp_shape_parse("3x10x10", &in, &e);
	dp_model *m = dp_model_new(spec, &in, DP_LOSS_XENT, &e);
	if (!m || (end && dp_model_set_stage(m, first, end, &e) < 0) ||
	    dp_model_bind(m, be, ctx, N, &e) < 0 || (freeze && dp_model_freeze(m, freeze, &e) < 0) ||
	    (recompute && dp_model_set_recompute(m, recompute, &e) < 0)) {
		printf("# %s [%d, %d): %s\n", spec, first, end, e.msg);
		exit(1);
	}
	dp_model_init(m, 9);
	return m;
}

/* The whole model against its stages first[0..S], one training pass:
 * outputs, gradients, running statistics. */
static void check_chain(const char *what, int S, const int *first, const char *freeze,
			const char *recompute)
{
	dp_err e;
	dp_model *w = make(RES, 0, 0, freeze, NULL), *st[8];
	for (int s = 0; s < S; s++)
		st[s] = make(RES, first[s], first[s + 1], freeze, recompute);
	/* the stages' parameters, in order, are the whole model's */
	size_t off = 0, boff = 0;
	int wsame = 1;
	for (int s = 0; s < S; s++) {
		wsame &= !memcmp(dp_model_params(st[s]), dp_model_params(w) + off,
				 dp_model_nparams(st[s]) * sizeof(float));
		off += dp_model_nparams(st[s]);
		boff += dp_model_nbuffers(st[s]);
	}
	ok(wsame && off == dp_model_nparams(w) && boff == dp_model_nbuffers(w) &&
		   dp_model_total_params(st[0]) == dp_model_nparams(w),
	   "%s: the stages' weights, in order, are the whole model's (%zu parameters)", what, off);
	dp_pass p = {1, 5, 2, 10};
	double sw[2], ss[2];
	dp_model_forward(w, X, N, &p, &e);
	dp_model_loss(w, Y, N, 1.0f / N, 1, sw, &e);
	dp_model_backward(w, N, NULL, NULL, &e);
	/* each stage's input kept until its backward pass (the CPU reads it in place) */
	float *act[8], *grad = malloc(N * 3 * 1000 * sizeof(float));
	int okk = 1;
	for (int s = 0; s < S && okk; s++) {
		act[s] = malloc(N * dp_model_stage_in(st[s]) * sizeof(float));
		memcpy(act[s], s ? dp_model_output(st[s - 1]) : X,
		       N * dp_model_stage_in(st[s]) * sizeof(float));
		okk &= dp_model_forward(st[s], act[s], N, &p, &e) == 0;
	}
	okk &= dp_model_loss(st[S - 1], Y, N, 1.0f / N, 1, ss, &e) == 0;
	for (int s = S - 1; s >= 0 && okk; s--) {
		if (s + 1 < S)
			okk &= dp_model_set_output_grad(st[s], grad, N, &e) == 0;
		okk &= dp_model_backward(st[s], N, NULL, NULL, &e) == 0;
		const float *dx = dp_model_input_grad(st[s]);
		if (s > 0 && !freeze)
			okk &= dx != NULL;
		if (dx)
			memcpy(grad, dx, N * dp_model_stage_in(st[s]) * sizeof(float));
	}
	if (!okk)
		printf("# %s\n", e.msg);
	ok(okk && sw[0] == ss[0], "%s: the same loss (%.9g, %.9g)", what, sw[0], ss[0]);
	int gsame = 1, bsame = 1;
	off = boff = 0;
	for (int s = 0; s < S; s++) {
		for (size_t i = 0; i < dp_model_nparams(st[s]); i++)
			if (dp_model_grads(st[s])[i] != dp_model_grads(w)[off + i]) {
				printf("# stage %d: gradient %zu: %.9g, not %.9g\n", s, i,
				       dp_model_grads(st[s])[i], dp_model_grads(w)[off + i]);
				gsame = 0;
				break;
			}
		bsame &= !memcmp(dp_model_buffers(st[s]), dp_model_buffers(w) + boff,
				 dp_model_nbuffers(st[s]) * sizeof(float));
		off += dp_model_nparams(st[s]);
		boff += dp_model_nbuffers(st[s]);
	}
	ok(gsame, "%s: the same gradients, bit for bit", what);
	ok(bsame, "%s: the same running statistics", what);
	for (int s = 0; s < S; s++)
		dp_model_free(st[s]);
	dp_model_free(w);
	for (int s = 0; s < S; s++)
		free(act[s]);
	free(grad);
}

int main(void)
{
	dp_err e;
	if (be->open(&ctx, NULL, NULL, 0, &e) < 0)
		return 1;
	uint64_t r = 7;
	for (size_t i = 0; i < sizeof X / sizeof X[0]; i++) {
		r = r * 6364136223846793005ull + 1442695040888963407ull;
		X[i] = (float)((double)(r >> 40) / (double)(1ull << 24)) * 2 - 1;
	}
	for (int i = 0; i < N; i++)
		Y[i] = (i * 3) % 4;

	dp_shape in;
	dp_shape_parse("3x10x10", &in, &e);
	dp_model *m = dp_model_new(RES, &in, DP_LOSS_XENT, &e);
	/* layers: 0 conv 1 bn 2 relu | 3.0..3.5, 3 | 4.0..4.4, 4.downsample 4.5 4.6, 4 | 5.0..5.4, 5 | gap.. */
	char cuts[256] = "";
	for (int i = 0; i < dp_model_nlayers(m); i++)
		if (dp_model_can_cut(m, i)) {
			dp_layer_info li;
			dp_model_layer(m, i, &li);
			snprintf(cuts + strlen(cuts), sizeof cuts - strlen(cuts), "%s%s", *cuts ? " " : "",
				 li.name);
		}
	is_str(cuts, "0 1 2 3 4 5 6 7 8", "cut points: between layers and after each block, none inside");
	int first[9];
	ok(dp_model_cuts(m, 3, NULL, first, &e) == 0, "3 stages");
	double c[3] = {0, 0, 0}, tot = 0;
	for (int s = 0; s < 3; s++)
		for (int i = first[s]; i < first[s + 1]; i++)
			c[s] += dp_model_layer_cost(m, i);
	tot = c[0] + c[1] + c[2];
	ok(first[0] == 0 && first[3] == dp_model_nlayers(m) && first[1] < first[2],
	   "stages cover the model in order: [%d, %d) [%d, %d) [%d, %d)", first[0], first[1],
	   first[1], first[2], first[2], first[3]);
	ok(fmax(c[0], fmax(c[1], c[2])) < 0.55 * tot, "the largest stage has %.0f%% of the cost",
	   100 * fmax(c[0], fmax(c[1], c[2])) / tot);
	ok(dp_model_cuts(m, 11, NULL, first, &e) < 0, "more stages than cut points: refused");
	like(e.msg, "can be cut at 9 points only: at most 10 pipeline stages", "...said so");
	double flat[64];
	for (int i = 0; i < dp_model_nlayers(m); i++)
		flat[i] = 1;
	ok(dp_model_cuts(m, 2, flat, first, &e) == 0 && first[1] > 3 && first[1] < 20,
	   "measured costs given: used (a cut at %d)", first[1]);
	ok(dp_model_set_stage(m, 4, 10, &e) < 0, "a stage beginning inside a block: refused");
	like(e.msg, "cannot be cut after layer 3.0", "...naming the layer");
	dp_model_free(m);

	int two[3] = {0, 10, 0}, four[5] = {0, 3, 10, 18, 0};
	m = dp_model_new(RES, &in, DP_LOSS_XENT, &e);
	two[2] = four[4] = dp_model_nlayers(m);
	dp_model_free(m);
	check_chain("2 stages", 2, two, NULL, NULL);
	check_chain("4 stages", 4, four, NULL, NULL);
	check_chain("4 stages, recomputed", 4, four, NULL, "");
	check_chain("2 stages, the first frozen", 2, two, "0,1,3*", NULL);
	/* a cut between a batchnorm and the ReLU it computes (fused) */
	int bn_relu[3] = {0, 2, two[2]};
	check_chain("2 stages cut between batchnorm and its ReLU", 2, bn_relu, NULL, NULL);
	check_chain("2 stages cut between batchnorm and its ReLU, recomputed", 2, bn_relu, NULL, "");
	check_chain("2 stages cut between batchnorm and its ReLU, frozen", 2, bn_relu, "0,1", NULL);

	/* a stage's own tensors; patterns of other stages' */
	m = make(RES, 10, two[2], "0,1", NULL);
	dp_tensor_info t;
	dp_model_tensor(m, 0, &t);
	is_str(t.name, "4.0.weight", "a stage's first tensor is its first layer's");
	is_int(t.off, 0, "at offset 0 of its buffer");
	ok(dp_model_knows_tensor(m, "0.weight") && !dp_model_knows_tensor(m, "10.weight"),
	   "the stage knows the other stages' tensors");
	int sel[64];
	ok(dp_model_select(m, "0", sel, &e) == 0, "a pattern of another stage's tensors is no error");
	ok(dp_model_select(m, "zz", sel, &e) < 0, "one of no stage's is");
	dp_model_free(m);
	be->close(ctx);
	return done_testing();
}
