/* nn.c - models on the CPU backend: spec parsing and shape errors, and
 * finite-difference gradient checks of every layer and both losses.
 *
 * A gradient check: the analytic gradient of the mean loss with respect to
 * every parameter (dp_model_backward) against central differences of the
 * loss computed in double from float32 forward passes.  Layers without
 * parameters are checked through the parameters of a layer before them
 * (their backward pass carries that gradient).  Dropout draws the same
 * mask in every pass of a step, so it is checked the same way. */
#define _GNU_SOURCE
#include "dp_nn.h"
#include "dp_rng.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>

static const dp_backend *be;
static dp_bectx *ctx;

static double loss_of(dp_model *m, const float *x, const void *y, int n, const dp_pass *p)
{
	double st[2];
	dp_err e;
	if (dp_model_forward(m, x, (size_t)n, p, &e) < 0 ||
	    dp_model_loss(m, y, (size_t)n, 1.0f / (float)n, 0, st, &e) < 0) {
		printf("# %s\n", e.msg);
		return NAN;
	}
	return st[0] / n;
}

struct hookrec {
	size_t next_end; /* ranges must arrive from the end backwards, contiguous */
	int ok, calls;
};

static int hook(void *c, int layer, size_t off, size_t count, dp_err *e)
{
	struct hookrec *h = c;
	if (off + count != h->next_end)
		h->ok = 0;
	h->next_end = off;
	h->calls++;
	return 0;
}

/* Check spec over input shape with loss; returns the relative error. */
static void gradcheck(const char *spec, const char *shape, int loss, int n)
{
	dp_err e;
	dp_shape in;
	dp_shape_parse(shape, &in, &e);
	dp_model *m = dp_model_new(spec, &in, loss, &e);
	if (!ok(m != NULL, "build %s", spec)) {
		printf("# %s\n", e.msg);
		return;
	}
	dp_model_bind(m, be, ctx, (size_t)n, &e);
	dp_model_init(m, 7);
	size_t insz = dp_model_in_size(m), k = dp_model_out_size(m), np = dp_model_nparams(m);
	float *x = malloc(sizeof(float) * insz * (size_t)n);
	dp_rng r = {dp_mix64(42), 0};
	for (size_t i = 0; i < insz * (size_t)n; i++)
		x[i] = 2 * dp_rng_unit(dp_rng_next(&r)) - 1;
	int32_t lab[16];
	float *tgt = malloc(sizeof(float) * k * (size_t)n);
	for (int i = 0; i < n; i++)
		lab[i] = (int32_t)dp_rng_below(&r, k);
	for (size_t i = 0; i < k * (size_t)n; i++)
		tgt[i] = dp_rng_unit(dp_rng_next(&r));
	const void *y = loss == DP_LOSS_XENT ? (const void *)lab : (const void *)tgt;
	dp_pass p = {1, 99, 5, 0};
	double st[2];
	dp_model_forward(m, x, (size_t)n, &p, &e);
	dp_model_loss(m, y, (size_t)n, 1.0f / (float)n, 1, st, &e);
	struct hookrec h = {np, 1, 0};
	int rc = dp_model_backward(m, (size_t)n, hook, &h, &e);
	ok(rc == 0 && h.ok && h.next_end == 0, "%s: hooks cover the gradient buffer, last first",
	   spec);
	float *params = dp_model_params(m), *grads = dp_model_grads(m); /* CPU: host memory */
	float *an = malloc(sizeof(float) * np);
	memcpy(an, grads, sizeof(float) * np);
	/* backward overwrites: a second step on the same batch gives the same bits */
	dp_model_forward(m, x, (size_t)n, &p, &e);
	dp_model_loss(m, y, (size_t)n, 1.0f / (float)n, 1, st, &e);
	dp_model_backward(m, (size_t)n, NULL, NULL, &e);
	ok(memcmp(an, grads, sizeof(float) * np) == 0, "%s: gradients overwritten, not accumulated",
	   spec);
	double num2 = 0, diff2 = 0, an2 = 0, worst = 0;
	size_t worst_i = 0;
	const float h_ = getenv("GC_H") ? (float)atof(getenv("GC_H")) : 3e-3f;
	for (size_t i = 0; i < np; i++) {
		float keep = params[i];
		params[i] = keep + h_;
		double lp = loss_of(m, x, y, n, &p);
		params[i] = keep - h_;
		double lm = loss_of(m, x, y, n, &p);
		params[i] = keep;
		double num = (lp - lm) / (2.0 * (double)h_);
		double d = fabs(num - an[i]);
		num2 += num * num;
		an2 += (double)an[i] * an[i];
		diff2 += d * d;
		double rel = d / (1e-3 + fabs(num));
		if (rel > worst) {
			worst = rel;
			worst_i = i;
		}
	}
	double rel = sqrt(diff2) / fmax(1e-12, fmax(sqrt(num2), sqrt(an2)));
	if (!ok(rel < 1e-2 && an2 > 0, "%s (%s, %s): gradient matches finite differences", spec,
		shape, dp_loss_name(loss)))
		printf("#   relative error %.3g; worst element %zu: relative %.3g\n", rel, worst_i,
		       worst);
	free(an);
	free(x);
	free(tgt);
	dp_model_free(m);
}

static void bad_spec(const char *spec, const char *shape, int loss, const char *want)
{
	dp_err e = {0};
	dp_shape in;
	dp_shape_parse(shape, &in, &e);
	dp_model *m = dp_model_new(spec, &in, loss, &e);
	ok(m == NULL, "rejects '%s' over %s", spec, shape);
	like(e.msg, want, "message for '%s'", spec);
	dp_model_free(m);
}

int main(void)
{
	dp_err e;
	be = &dp_backend_cpu;
	if (be->open(&ctx, NULL, NULL, 0, &e) < 0)
		return 1;

	/* shapes */
	dp_shape s;
	char buf[64];
	is_int(dp_shape_parse("1x28x28", &s, &e), 0, "shape 1x28x28");
	is_str(dp_shape_format(&s, buf, sizeof buf), "1x28x28", "shape formats back");
	is_int(dp_shape_parse("28x28", &s, &e), 0, "shape 28x28");
	is_int(s.c * 1000 + s.rank, 1003, "HxW is 1xHxW");
	is_int(dp_shape_parse("784", &s, &e), 0, "shape 784");
	is_int(s.rank, 1, "a length is a vector");
	ok(dp_shape_parse("1x28x", &s, &e) < 0, "shape 1x28x rejected");
	ok(dp_shape_parse("0x3", &s, &e) < 0, "shape with 0 rejected");
	ok(dp_shape_parse("1x2x3x4", &s, &e) < 0, "shape of 4 dims rejected");

	/* the seed CNN: shapes and parameter count (torch: 1,199,882) */
	dp_shape_parse("1x28x28", &s, &e);
	dp_model *m = dp_model_new("conv:32:3,relu,conv:64:3,relu,maxpool:2,dropout:0.25,flatten,"
				   "dense:128,relu,dropout:0.5,dense:10",
				   &s, DP_LOSS_XENT, &e);
	ok(m != NULL, "seed CNN builds");
	if (m) {
		is_int(dp_model_nparams(m), 1199882, "seed CNN has PyTorch's parameter count");
		dp_layer_info li;
		dp_model_layer(m, 4, &li);
		is_str(dp_shape_format(&li.out, buf, sizeof buf), "64x12x12", "maxpool output");
		is_int(dp_model_ntensors(m), 8, "8 tensors");
		dp_tensor_info t;
		dp_model_tensor(m, 2, &t);
		is_str(t.name, "2.weight", "third tensor is 2.weight");
		is_int(t.ndim * 1000 + t.shape[0], 4064, "2.weight is (64, ...)");
		dp_model_tensor(m, 5, &t);
		is_str(t.name, "7.bias", "dense bias named by its item");
		dp_model_free(m);
	}
	dp_shape_parse("3x32x32", &s, &e);
	m = dp_model_new("conv:8:3:same,conv:8:5:2:2,conv:4:2:same,maxpool:3:2,flatten,dense:10",
			 &s, DP_LOSS_XENT, &e);
	ok(m != NULL, "strides and paddings build");
	if (m) {
		dp_layer_info li;
		dp_model_layer(m, 0, &li);
		is_str(dp_shape_format(&li.out, buf, sizeof buf), "8x32x32", "same padding keeps size");
		dp_model_layer(m, 1, &li);
		is_str(dp_shape_format(&li.out, buf, sizeof buf), "8x16x16", "stride 2 pad 2 halves");
		dp_model_layer(m, 2, &li);
		is_str(dp_shape_format(&li.out, buf, sizeof buf), "4x16x16", "even kernel, same");
		dp_model_layer(m, 3, &li);
		is_str(dp_shape_format(&li.out, buf, sizeof buf), "4x7x7", "overlapping pool");
		dp_model_free(m);
	}

	bad_spec("dense:10", "1x28x28", DP_LOSS_XENT, "layer 0 (dense:10): input is 1x28x28");
	bad_spec("conv:8:3,dense:10", "1x28x28", DP_LOSS_XENT, "add flatten");
	bad_spec("flatten,conv:8:3", "1x28x28", DP_LOSS_XENT, "layer 1 (conv:8:3)");
	bad_spec("conv:8:30,flatten,dense:2", "1x28x28", DP_LOSS_XENT, "does not fit");
	bad_spec("conv:8:3,maxpool:40,flatten,dense:2", "1x28x28", DP_LOSS_XENT, "layer 1");
	bad_spec("dense:10,frobnicate", "784", DP_LOSS_XENT, "unknown layer 'frobnicate'");
	bad_spec("dense:-3", "784", DP_LOSS_XENT, "want dense:UNITS");
	bad_spec("dense:x", "784", DP_LOSS_XENT, "item 0 'dense:x'");
	bad_spec("dropout:1.5,dense:2", "784", DP_LOSS_XENT, "0 <= RATE < 1");
	bad_spec("dense:10,,dense:2", "784", DP_LOSS_XENT, "item 1 is empty");
	bad_spec("softmax,dense:2", "784", DP_LOSS_XENT, "softmax is allowed only as the last");
	bad_spec("dense:1", "784", DP_LOSS_XENT, "at least 2 classes");
	bad_spec("conv:8:3:2:same,flatten,dense:2", "1x28x28", DP_LOSS_XENT, "needs stride 1");
	bad_spec("conv:8:3:bogus,flatten,dense:2", "1x28x28", DP_LOSS_XENT, "'bogus'");
	bad_spec("relu:3,dense:2", "784", DP_LOSS_XENT, "takes no arguments");

	/* gradient checks: every layer kind and both losses */
	gradcheck("dense:5,tanh,dense:3", "6", DP_LOSS_XENT, 4);
	gradcheck("dense:5,sigmoid,dense:2", "6", DP_LOSS_MSE, 3);
	gradcheck("dense:7,relu,dense:4,softmax", "5", DP_LOSS_XENT, 4);
	gradcheck("conv:3:3,relu,maxpool:2,flatten,dense:4", "2x6x6", DP_LOSS_XENT, 3);
	gradcheck("conv:4:3:2:1,tanh,avgpool:2,flatten,dense:3", "2x7x7", DP_LOSS_XENT, 3);
	gradcheck("conv:2:3:same,sigmoid,conv:3:2:same,flatten,dense:3", "1x5x5", DP_LOSS_XENT, 2);
	gradcheck("conv:3:1,tanh,maxpool:3:2,flatten,dense:2", "2x7x7", DP_LOSS_XENT, 3);
	gradcheck("conv:3:3x2:stride=2x1:padding=1x0,flatten,dense:3", "2x7x6", DP_LOSS_XENT, 2);
	gradcheck("dense:8,relu,dropout:0.5,dense:3", "6", DP_LOSS_XENT, 4);
	gradcheck("conv:3:3,maxpool:2,relu,flatten,tanh,dense:3", "1x6x6", DP_LOSS_XENT, 3);
	gradcheck("conv:3:3,batchnorm,relu,flatten,dense:5,batchnorm,sigmoid,dense:3", "2x5x5",
		  DP_LOSS_XENT, 4);
	gradcheck("flatten,dense:4,tanh,dense:3", "2x2x2", DP_LOSS_MSE, 3);
	/* wide enough for the CPU backend's Winograd forward pass */
	gradcheck("conv:8:3,tanh,conv:8:3:same,relu,flatten,dense:3", "8x6x6", DP_LOSS_XENT, 2);
	gradcheck("dropout:0.2,conv:2:3,avgpool:3:1,sigmoid,flatten,dense:4", "1x6x6",
		  DP_LOSS_MSE, 2);

	be->close(ctx);
	return done_testing();
}
