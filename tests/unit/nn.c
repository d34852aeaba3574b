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
#include <string.h>

static const dp_backend *be;
static dp_bectx *ctx;
static float step = 3e-3f; /* the finite difference's step (GC_H overrides) */

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

static int no_sum(void *c, double *v, size_t n, dp_err *e) { return 0; }

/* A ReLU right after a batchnorm is computed by it (fused); one after a
 * dropout:0 in between is a layer of its own, the same math: the two
 * models' losses, gradients and running statistics must be the same bits
 * over two steps, with the batchnorms frozen (evaluation mode, a gradient
 * through them), folded into a frozen convolution, --sync-bn's path,
 * recomputed blocks, and the ReLU read by two layers (a residual). */
static void fused_as_apart(const char *what, const char *fused, const char *apart,
			   const char *freeze, const char *recompute, int sync, int train)
{
	dp_err e;
	dp_shape in;
	dp_shape_parse("3x6x6", &in, &e);
	dp_model *m[2];
	const char *spec[2] = {fused, apart};
	for (int k = 0; k < 2; k++) {
		m[k] = dp_model_new(spec[k], &in, DP_LOSS_XENT, &e);
		if (!m[k] || dp_model_bind(m[k], be, ctx, 6, &e) < 0 ||
		    (freeze && dp_model_freeze(m[k], freeze, &e) < 0) ||
		    (recompute && dp_model_set_recompute(m[k], recompute, &e) < 0)) {
			ok(0, "%s: %s", what, e.msg);
			return;
		}
		if (sync)
			dp_model_set_sync(m[k], no_sum, NULL);
		dp_model_init(m[k], 9);
	}
	size_t np = dp_model_nparams(m[0]), nb = dp_model_nbuffers(m[0]);
	memcpy(dp_model_params(m[1]), dp_model_params(m[0]), np * sizeof(float));
	float x[6 * 3 * 6 * 6];
	int32_t y[6];
	dp_rng r = {9, 0};
	for (size_t i = 0; i < sizeof x / sizeof x[0]; i++)
		x[i] = (float)(2 * dp_rng_unit(dp_rng_next(&r)) - 1);
	for (int i = 0; i < 6; i++)
		y[i] = i % 3;
	int same = np == dp_model_nparams(m[1]) && nb == dp_model_nbuffers(m[1]), okk = 1;
	for (int it = 0; it < 2 && okk; it++) {
		dp_pass p = {train, 5, (uint64_t)it, 0};
		double st[2][2];
		for (int k = 0; k < 2; k++) {
			okk &= dp_model_forward(m[k], x, 6, &p, &e) == 0 &&
			       dp_model_loss(m[k], y, 6, 1.0f / 6, 1, st[k], &e) == 0 &&
			       (!train || dp_model_backward(m[k], 6, NULL, NULL, &e) == 0);
		}
		same &= okk && st[0][0] == st[1][0] &&
			!memcmp(dp_model_buffers(m[0]), dp_model_buffers(m[1]), nb * sizeof(float)) &&
			(!train ||
			 !memcmp(dp_model_grads(m[0]), dp_model_grads(m[1]), np * sizeof(float)));
	}
	if (!okk)
		printf("# %s\n", e.msg);
	ok(same, "batchnorm + ReLU fused as apart, %s: the same loss, gradients, statistics", what);
	dp_model_free(m[0]);
	dp_model_free(m[1]);
}

/* Check spec over input shape with loss, the parameters freeze selects
 * (dp_model_freeze; NULL: none) fixed: their gradient must be zero, the
 * others' must match finite differences of the loss. */
static void gradcheck_frozen(const char *spec, const char *shape, int loss, int n,
			     const char *freeze)
{
	dp_err e;
	dp_shape in;
	dp_shape_parse(shape, &in, &e);
	dp_model *m = dp_model_new(spec, &in, loss, &e);
	if (!ok(m != NULL, "build %s", spec)) {
		printf("# %s\n", e.msg);
		return;
	}
	if (freeze && !ok(dp_model_freeze(m, freeze, &e) == 0, "%s: freeze %s", spec, freeze)) {
		printf("# %s\n", e.msg);
		dp_model_free(m);
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
	if (!freeze) /* frozen layers: no hook for them */
		ok(rc == 0 && h.ok && h.next_end == 0,
		   "%s: hooks cover the gradient buffer, last first", spec);
	else if (!ok(rc == 0, "%s, %s frozen: backward", spec, freeze))
		printf("# %s\n", e.msg);
	/* fixed[i]: parameter i is frozen */
	char *fixed = calloc(np ? np : 1, 1);
	int nt = dp_model_ntensors(m), *sel = calloc((size_t)nt, sizeof *sel);
	if (freeze && dp_model_select(m, freeze, sel, &e) == 0)
		for (int t = 0; t < nt; t++) {
			dp_tensor_info ti;
			dp_model_tensor(m, t, &ti);
			if (sel[t] && ti.role == DP_TENSOR_PARAM)
				memset(fixed + ti.off, 1, ti.count);
		}
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
	const float h_ = getenv("GC_H") ? (float)atof(getenv("GC_H")) : step;
	size_t nfixed = 0, nonzero = 0;
	for (size_t i = 0; i < np; i++) {
		if (fixed[i]) {
			nfixed++;
			nonzero += an[i] != 0;
			continue;
		}
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
	if (!ok(rel < 1e-2 && an2 > 0, "%s (%s, %s%s%s): gradient matches finite differences",
		spec, shape, dp_loss_name(loss), freeze ? ", frozen " : "", freeze ? freeze : ""))
		printf("#   relative error %.3g; worst element %zu: relative %.3g\n", rel, worst_i,
		       worst);
	if (freeze && !ok(nfixed > 0 && nonzero == 0, "%s: the %zu frozen parameters' gradients are 0",
			  spec, nfixed))
		printf("#   %zu of them are not\n", nonzero);
	free(fixed);
	free(sel);
	free(an);
	free(x);
	free(tgt);
	dp_model_free(m);
}

static void gradcheck(const char *spec, const char *shape, int loss, int n)
{
	gradcheck_frozen(spec, shape, loss, n, NULL);
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

	/* the graph: residual blocks with identity and projection shortcuts (a
	 * layer's output read twice: its gradients add up), an activation after
	 * the sum or none, gap, maxpool with padding, convolutions without bias,
	 * nested blocks and groups, names.  Batchnorm over 2 to 4 samples is
	 * strongly curved: a smaller step (at 3e-3 the error of the central
	 * difference itself reaches 5%, and falls as the step does) */
	step = 2e-4f;
	gradcheck("conv:4:3:1:1:bias=0,bn,relu,res(conv:4:3:1:1:bias=0,bn,relu,"
		  "conv:4:3:1:1:bias=0,bn):relu,flatten,dense:3",
		  "2x5x5", DP_LOSS_XENT, 3);
	gradcheck("conv:4:3:1:1,res(conv:6:3:2:1:bias=0,bn,relu,conv:6:3:1:1:bias=0,bn|"
		  "conv:6:1:2:bias=0,bn):relu,gap,flatten,dense:3",
		  "2x6x6", DP_LOSS_XENT, 3);
	gradcheck("dense:6,res(dense:6,tanh,dense:6),res(dense:6|dense:6):sigmoid,dense:3", "5",
		  DP_LOSS_MSE, 3);
	gradcheck("conv:3:3:1:1:bias=0,maxpool:3:2:1,tanh,conv:2:2:bias=0,flatten,dense:3", "2x6x6",
		  DP_LOSS_XENT, 3);
	gradcheck("conv:3:3:1:1,maxpool:2:2:1,gap,flatten,dense:3", "1x5x5", DP_LOSS_XENT, 3);
	gradcheck("stem=seq(conv:3:3:bias=0,seq(bn,relu)),b=res(seq(conv:3:3:1:1,tanh),"
		  "res(conv:3:1,relu):tanh),gap,head=seq(flatten,dense:4),dense:3",
		  "2x6x6", DP_LOSS_XENT, 3);
	gradcheck("conv:4:3:1:1,res(res(conv:4:3:1:1,bn):relu|conv:4:1,bn):relu,avgpool:global,"
		  "flatten,dense:3",
		  "1x5x5", DP_LOSS_XENT, 2);
	/* frozen batchnorm (evaluation mode: its running statistics) with
	 * trainable layers below it, and frozen layers at the bottom of a
	 * residual net (no backward below them) */
	gradcheck_frozen("conv:3:3,bn,relu,flatten,dense:5,bn,dense:3", "2x5x5", DP_LOSS_XENT, 4,
			 "1");
	gradcheck_frozen("conv:3:3,bn,relu,flatten,dense:5,bn,dense:3", "2x5x5", DP_LOSS_XENT, 4,
			 "bn");
	gradcheck_frozen("c=conv:4:3:1:1:bias=0,n=bn,relu,r=res(conv:4:3:1:1:bias=0,bn,relu,"
			 "conv:4:3:1:1:bias=0,bn):relu,gap,flatten,fc=dense:3",
			 "2x5x5", DP_LOSS_XENT, 3, "c,n,r.0*");
	/* the syntax of the graph */
	bad_spec("res(dense:4,dense:4", "4", DP_LOSS_XENT, "block 0: want ')' at byte 19, not the end");
	bad_spec("dense:4),dense:2", "4", DP_LOSS_XENT, "unexpected ')' at byte 7");
	bad_spec("seq(dense:4|dense:4),dense:2", "4", DP_LOSS_XENT,
		 "a shortcut is for res(...) only");
	bad_spec("res(dense:5),dense:2", "4", DP_LOSS_XENT,
		 "block 0: its items give 5 but its input is 4: add a projection shortcut");
	bad_spec("res(dense:5|dense:6),dense:2", "4", DP_LOSS_XENT,
		 "its items give 5 but its shortcut gives 6: make them agree");
	bad_spec("conv:4:3:1:1,res(conv:4:3:2:1),flatten,dense:2", "1x6x6", DP_LOSS_XENT,
		 "block 1: its items give 4x3x3 but its input is 4x6x6");
	bad_spec("a=dense:4,a=dense:2", "4", DP_LOSS_XENT, "two items named 'a'");
	bad_spec("b=seq(x=dense:4,x=relu),dense:2", "4", DP_LOSS_XENT, "two items named 'x' in b");
	bad_spec("foo(dense:4),dense:2", "4", DP_LOSS_XENT, "item 0 'foo(': unknown block (res, seq)");
	bad_spec("res(dense:4):softmax,dense:2", "4", DP_LOSS_XENT,
		 "block 0: 'softmax' after res(...): want :relu, :tanh or :sigmoid");
	bad_spec("res(dense:4,softmax),dense:2", "4", DP_LOSS_XENT, "softmax is allowed only as");
	bad_spec("dense:4,res(),dense:2", "4", DP_LOSS_XENT, "item 1.0 is empty");
	bad_spec("resnet18:0", "3x64x64", DP_LOSS_XENT, "want resnet18 or resnet18:CLASSES");

	/* batchnorm + ReLU fused (graph.c) against the two apart */
#define BNR(mid) "c=conv:4:3:1:1,n=batchnorm," mid "relu,d=conv:4:3:1:1,m=batchnorm," mid "relu,flatten,dense:3"
#define BNRES(mid)                                                                         \
	"c=conv:4:3:1:1,n=batchnorm," mid "relu,r=res(conv:4:3:1:1,b=batchnorm," mid "relu," \
	"conv:4:3:1:1,batchnorm):relu,flatten,dense:3"
	fused_as_apart("training", BNR(""), BNR("dropout:0,"), NULL, NULL, 0, 1);
	fused_as_apart("evaluation", BNR(""), BNR("dropout:0,"), NULL, NULL, 0, 0);
	fused_as_apart("a frozen batchnorm under a trained convolution", BNR(""), BNR("dropout:0,"),
		       "n,m", NULL, 0, 1);
	fused_as_apart("conv + batchnorm frozen, folded", BNR(""), BNR("dropout:0,"), "c,n", NULL, 0,
		       1);
	fused_as_apart("--sync-bn", BNR(""), BNR("dropout:0,"), NULL, NULL, 1, 1);
	fused_as_apart("the ReLU read by two layers", BNRES(""), BNRES("dropout:0,"), NULL, NULL, 0,
		       1);
	fused_as_apart("the ReLU read by two layers, recomputed, --sync-bn", BNRES(""),
		       BNRES("dropout:0,"), NULL, "", 1, 1);
	fused_as_apart("a frozen batchnorm in a recomputed block", BNRES(""), BNRES("dropout:0,"),
		       "r.b", "", 0, 1);

	be->close(ctx);
	return done_testing();
}
