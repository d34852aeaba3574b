/* fold.c - a frozen convolution + evaluation-mode batchnorm (+ ReLU) folded
 * into one convolution with a bias (lib/train/model/nn.c, fold_conv; the
 * backend's bnorm_fold) against the same layers run one after the other
 * (the CPU backend without bnorm_fold), on a residual net whose frozen
 * start has convolutions with and without a bias, a ReLU after a
 * batchnorm and a residual sum after one, random weights and running
 * statistics:
 *  - predictions, and a training step's loss and gradients of the layers
 *    left to train, within 1e-5 of the unfolded run (float rounding: the
 *    folded weights are products), and bitwise the same from one step to
 *    the next;
 *  - the frozen batchnorms write no buffer of their own: no more
 *    activation memory than unfolded;
 *  - after new parameters are loaded, the next pass folds them (nothing
 *    stale);
 *  - nothing is folded where a backward pass goes through the pair (only
 *    the batchnorm frozen). */
#define _GNU_SOURCE
#include "dp_nn.h"
#include "dp_rng.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>

#define SPEC                                                                                       \
	"c=conv:8:3:1:1:bias=0,n=bn,relu,r=res(conv:8:3:1:1,bn,relu,conv:8:3:1:1:bias=0,bn):relu," \
	"t=conv:6:3:2:1,u=bn,relu,flatten,fc=dense:5"
#define N 4

static dp_bectx *ctx;
static dp_backend unfolded; /* the CPU backend without bnorm_fold */
static dp_backend counting; /* with it, counting its calls */
static int folds;

static void count_fold(dp_bectx *c, int k, size_t per, float eps, const float *w, const float *b,
		       const float *gamma, const float *beta, const float *mean, const float *var,
		       float *wout, float *bout)
{
	folds++;
	dp_backend_cpu.bnorm_fold(c, k, per, eps, w, b, gamma, beta, mean, var, wout, bout);
}

static double rel(const float *a, const float *b, size_t n)
{
	double d = 0, m = 0;
	for (size_t i = 0; i < n; i++) {
		d = fmax(d, fabs((double)a[i] - b[i]));
		m = fmax(m, fabs((double)b[i]));
	}
	return m > 0 ? d / m : d;
}

static dp_model *make(const dp_backend *be, const char *freeze)
{
	dp_err e;
	dp_shape in;
	dp_shape_parse("3x9x9", &in, &e);
	dp_model *m = dp_model_new(SPEC, &in, DP_LOSS_XENT, &e);
	if (!m || (freeze && dp_model_freeze(m, freeze, &e) < 0) ||
	    dp_model_bind(m, be, ctx, N, &e) < 0) {
		printf("# %s\n", e.msg);
		exit(1);
	}
	dp_model_init(m, 7);
	return m;
}

/* The same random parameters and running statistics (variances > 0) in
 * every model: seed s. */
static void randomise(dp_model *m, uint64_t s)
{
	dp_rng r = {dp_mix64(s), 0};
	float *p = dp_model_params(m), *b = dp_model_buffers(m); /* CPU: host memory */
	for (size_t i = 0; i < dp_model_nparams(m); i++)
		p[i] = (float)(dp_rng_unit(dp_rng_next(&r)) - 0.5);
	size_t nb = dp_model_nbuffers(m);
	/* batchnorm buffers: each layer's means, then its variances; all
	 * positive values serve as either */
	for (size_t i = 0; i < nb; i++)
		b[i] = (float)(0.25 + dp_rng_unit(dp_rng_next(&r)));
}

/* A training step on (x, lab): loss into *loss, gradients copied to g. */
static void step(dp_model *m, const float *x, const int32_t *lab, double *loss, float *g)
{
	dp_err e;
	dp_pass p = {1, 99, 5, 0};
	double st[2];
	if (dp_model_forward(m, x, N, &p, &e) < 0 ||
	    dp_model_loss(m, lab, N, 1.0f / N, 1, st, &e) < 0 ||
	    dp_model_backward(m, N, NULL, NULL, &e) < 0)
		printf("# %s\n", e.msg);
	*loss = st[0];
	memcpy(g, dp_model_grads(m), dp_model_nparams(m) * sizeof *g);
}

int main(void)
{
	dp_err e;
	const dp_backend *be = &dp_backend_cpu;
	dp_backend_opts o = {.threads = 1, .device = -1, .precision = DP_PREC_FP32};
	if (!ok(be->open(&ctx, &o, NULL, 0, &e) == 0, "open the CPU backend"))
		return done_testing();
	ok(be->bnorm_fold != NULL, "the CPU backend folds");
	unfolded = counting = *be;
	unfolded.bnorm_fold = NULL;
	counting.bnorm_fold = count_fold;
	const char *frozen = "c,n,r,t"; /* all but the last batchnorm and fc */
	dp_model *a = make(&counting, frozen), *b = make(&unfolded, frozen);
	randomise(a, 3);
	randomise(b, 3);
	size_t np = dp_model_nparams(a), insz = dp_model_in_size(a), k = dp_model_out_size(a);
	float *x = malloc(N * insz * sizeof *x), *pa = malloc(N * k * sizeof *pa),
	      *pb = malloc(N * k * sizeof *pb), *ga = malloc(np * sizeof *ga),
	      *gb = malloc(np * sizeof *gb), *g2 = malloc(np * sizeof *g2);
	dp_rng r = {dp_mix64(11), 0};
	for (size_t i = 0; i < N * insz; i++)
		x[i] = (float)(2 * dp_rng_unit(dp_rng_next(&r)) - 1);
	int32_t lab[N] = {0, 4, 1, 2};

	dp_model_mem ma, mb;
	dp_model_memory(a, &ma);
	dp_model_memory(b, &mb);
	ok(ma.activations <= mb.activations,
	   "folded batchnorms write no buffer: activations %zu <= %zu bytes unfolded",
	   ma.activations, mb.activations);

	ok(dp_model_predict(a, x, N, pa, &e) == 0 && dp_model_predict(b, x, N, pb, &e) == 0,
	   "predict, folded and not");
	is_int(folds, 3, "a pass folds the 3 frozen convolution + batchnorm pairs");
	double d = rel(pa, pb, N * k);
	ok(d <= 1e-5, "predictions: folded within 1e-5 of unfolded (%.2e)", d);

	double la, lb, l2;
	step(a, x, lab, &la, ga);
	step(b, x, lab, &lb, gb);
	ok(fabs(la - lb) <= 1e-5 * fabs(lb), "training loss: %.7g folded, %.7g unfolded", la, lb);
	d = rel(ga, gb, np);
	ok(d <= 1e-5, "gradients: folded within 1e-5 of unfolded (%.2e)", d);
	int zero = 1;
	for (size_t i = 0; i < np; i++)
		zero &= ga[i] == 0;
	ok(!zero, "some gradient is not zero");
	step(a, x, lab, &l2, g2);
	ok(l2 == la && !memcmp(g2, ga, np * sizeof *ga), "the next step: the same bits");

	/* new parameters loaded: the next pass folds those */
	randomise(a, 5);
	randomise(b, 5);
	ok(dp_model_predict(a, x, N, pa, &e) == 0 && dp_model_predict(b, x, N, pb, &e) == 0,
	   "predict after new parameters");
	d = rel(pa, pb, N * k);
	ok(d <= 1e-5, "new parameters: folded within 1e-5 of unfolded (%.2e)", d);
	dp_model_free(a);
	dp_model_free(b);

	/* only the batchnorms frozen: the backward pass goes through them, so
	 * nothing is folded (the same memory as without bnorm_fold) */
	folds = 0;
	a = make(&counting, "bn");
	b = make(&unfolded, "bn");
	dp_model_memory(a, &ma);
	dp_model_memory(b, &mb);
	ok(ma.activations == mb.activations, "trainable convolutions: nothing folded (%zu bytes)",
	   ma.activations);
	randomise(a, 3);
	randomise(b, 3);
	step(a, x, lab, &la, ga);
	step(b, x, lab, &lb, gb);
	ok(la == lb && !memcmp(ga, gb, np * sizeof *ga) && folds == 0,
	   "...and the same bits as unfolded, bnorm_fold not called");
	dp_model_free(a);
	dp_model_free(b);
	free(x), free(pa), free(pb), free(ga), free(gb), free(g2);
	be->close(ctx);
	return done_testing();
}
