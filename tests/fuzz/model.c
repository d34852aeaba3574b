/*
 * model.c - libFuzzer target: model specs from outside (dp-train --model,
 * a checkpoint's "model" metadata), through the parser, the graph and a
 * training step.
 *
 * The first byte picks the input shape and the loss; the rest is the spec.
 * An accepted spec must: name every tensor, each name unique and fitting
 * its buffer; print back (dp_model_spec) as a spec that builds the same
 * model; lay its parameters out end to end.  When the model is small
 * enough (bounded memory and time), it is bound to the CPU backend and one
 * training step runs (forward, loss, backward) whose gradient hooks must
 * cover the parameter buffer from its end to its start, and a second one
 * with half the model frozen.  A refused spec must say why.  Beyond those
 * checks: no crash, leak or hang.
 */
#define _GNU_SOURCE
#include "dp_nn.h"
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static dp_bectx *ctx;

struct hooks {
	size_t end;
	int ok;
};

static int hook(void *c, int layer, size_t off, size_t count, dp_err *e)
{
	struct hooks *h = c;
	if (off + count != h->end)
		h->ok = 0;
	h->end = off;
	return 0;
}

static void step(dp_model *m, int loss)
{
	dp_err e;
	size_t in = dp_model_in_size(m), out = dp_model_out_size(m);
	float *x = calloc(2 * in + 1, sizeof *x), *y = calloc(2 * out + 1, sizeof *y);
	int32_t lab[2] = {0, 1};
	for (size_t i = 0; i < 2 * in; i++)
		x[i] = (float)(i % 7) - 3;
	dp_pass p = {1, 1, 0, 0};
	double st[2];
	CHECK(dp_model_forward(m, x, 2, &p, &e) == 0, "forward: %s", e.msg);
	if (dp_model_loss(m, loss == DP_LOSS_XENT ? (const void *)lab : (const void *)y, 2, 0.5f, 1,
			  st, &e) == 0) {
		struct hooks h = {dp_model_nparams(m), 1};
		CHECK(dp_model_backward(m, 2, hook, &h, &e) == 0, "backward: %s", e.msg);
		CHECK(h.ok && h.end == 0, "hooks do not cover the gradients last to first");
	} else {
		CHECK(loss == DP_LOSS_XENT && out < 2, "loss: %s", e.msg);
	}
	free(x);
	free(y);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const shapes[] = {"1x12x12", "3x16x16", "2x5x7", "20"};
	dp_err e;
	if (!ctx && dp_backend_cpu.open(&ctx, NULL, NULL, 0, &e) < 0)
		abort();
	if (size < 1 || size > 4096)
		return 0;
	dp_shape in;
	if (dp_shape_parse(shapes[data[0] & 3], &in, &e) < 0)
		abort();
	int loss = data[0] & 4 ? DP_LOSS_MSE : DP_LOSS_XENT;
	char *spec = strndup((const char *)data + 1, size - 1);
	e.msg[0] = 0;
	dp_model *m = dp_model_new(spec, &in, loss, &e);
	free(spec);
	if (!m) {
		CHECK(e.msg[0], "a refusal without a message");
		return 0;
	}
	/* the tensors: named, each name once, laid out end to end */
	int nt = dp_model_ntensors(m);
	size_t next = 0;
	for (int i = 0; i < nt; i++) {
		dp_tensor_info t;
		dp_model_tensor(m, i, &t);
		size_t len = strnlen(t.name, sizeof t.name);
		CHECK(len > 0 && len < sizeof t.name, "tensor %d: a name of %zu bytes", i, len);
		for (int j = 0; j < i; j++) {
			dp_tensor_info u;
			dp_model_tensor(m, j, &u);
			CHECK(strcmp(t.name, u.name), "two tensors named %s", t.name);
		}
		if (t.role == DP_TENSOR_PARAM) {
			CHECK(t.off == next, "tensor %s at %zu, not %zu", t.name, t.off, next);
			next += t.count;
		}
	}
	CHECK(next == dp_model_nparams(m), "tensors hold %zu of %zu parameters", next,
	      dp_model_nparams(m));
	/* the spec as printed builds the same model */
	dp_model *m2 = dp_model_new(dp_model_spec(m), &in, loss, &e);
	CHECK(m2 && dp_model_same(m, m2), "'%s' does not build the same model again", dp_model_spec(m));
	dp_model_free(m2);
	if (fuzz_model_bytes(m) < (8u << 20) && dp_model_bind(m, &dp_backend_cpu, ctx, 2, &e) == 0) {
		dp_model_init(m, 1);
		step(m, loss);
		/* frozen: tensors from the first half of the layers */
		char pat[64];
		dp_layer_info li;
		dp_model_layer(m, dp_model_nlayers(m) / 2, &li);
		snprintf(pat, sizeof pat, "%.50s*", li.name);
		if (dp_model_nparams(m) && dp_model_freeze(m, pat, &e) == 0)
			step(m, loss);
	}
	dp_model_free(m);
	return 0;
}
