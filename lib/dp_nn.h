/*
 * dp_nn.h - models: a graph of layers from a spec, shapes, forward, backward.
 *
 * A model is a Keras-Sequential-like list of items written as a spec,
 *     conv:32:3,relu,conv:64:3,relu,maxpool:2,dropout:0.25,flatten,
 *     dense:128,relu,dropout:0.5,dense:10
 * over an input of shape C x H x W (or a plain vector length), in which
 * an item may also be a block (see dp-train(1) for the full grammar):
 *     dense:N[:bias=0]  fully connected, N outputs (alias linear)
 *     conv:F:K[:S][:same|valid|P][:bias=0][:init=he]
 *                       F filters of K (or KxK2) with stride S
 *                       (alias conv2d; also stride=S, padding=same|valid|P)
 *     maxpool:K[:S[:P]] max over KxK windows, stride S (default K), padding P
 *     avgpool:K[:S]     mean over windows
 *     gap               mean over each whole plane: C x 1 x 1 (PyTorch's
 *                       AdaptiveAvgPool2d(1); alias avgpool:global)
 *     flatten           C x H x W -> C*H*W, in C, H, W order
 *     dropout:P         zero a fraction P while training (inverted scaling)
 *     relu, tanh, sigmoid
 *     batchnorm         per channel (after conv) or per feature (after dense)
 *     softmax           last item only, with the cross-entropy loss
 *     res(ITEMS)        a residual block: ITEMS applied to the block's input,
 *                       plus the input itself
 *     res(ITEMS|SHORT)  ... plus SHORT applied to the input (a projection)
 *     res(...):relu     an activation after the sum
 *     seq(ITEMS)        a group of items (a name for them)
 *     NAME=ITEM         any item or block under a name of its own
 * or is a whole named architecture, torchvision's ImageNet ResNets
 * "resnet18", "resnet34", "resnet50", "resnet101", "resnet152" and the
 * CIFAR ones (He et al. 2015) "resnet20", "resnet32", "resnet44",
 * "resnet56", "resnet110", each with ":CLASSES" (default 1000 and 10).
 * Spaces, newlines and '#' comments to the end of a line may come between
 * items.
 * Tensors follow PyTorch: a tensor's name is the path of its item, names
 * joined by '.' (an unnamed item is named by its index in its list, as in
 * torch.nn.Sequential; a shortcut's items are under "downsample"), then
 * "weight", "bias", and for batchnorm "running_mean", "running_var",
 * "num_batches_tracked": "0.weight" for a plain list, "layer2.0.
 * downsample.0.weight" for torchvision's resnet18.  Dense weights are
 * (out, in), conv weights (out, in, kh, kw).
 *
 * Memory: once bound to a backend, all trainable parameters live in ONE
 * contiguous buffer and all their gradients in another of the same layout
 * (item i's weight then bias, items in order), so a data-parallel step can
 * average the whole gradient in one call, or a range at a time as the
 * backward pass finishes each layer (the hook).
 *
 * A training step (dp_train.h's dp_step_run makes it data-parallel):
 *     dp_model_forward(m, x, n, &pass)         activations
 *     dp_model_loss(m, y, n, 1.0f / n, 1, st)  loss, d loss / d output (or its
 *                                              halves: _queue, then _wait)
 *     dp_model_backward(m, n, hook, ctx)       gradients; hook per layer
 *     (average gradients across workers: dp_comm.h)
 *     dp_optim_step(...)                       update (dp_optim.h)
 * Inference: dp_model_predict(), or forward + loss with grad off.
 */
#ifndef DP_NN_H
#define DP_NN_H

#include "dp.h"
#include "dp_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

enum dp_layer_kind {
	DP_LAYER_DENSE = 1,
	DP_LAYER_CONV,
	DP_LAYER_MAXPOOL,
	DP_LAYER_AVGPOOL,
	DP_LAYER_FLATTEN,
	DP_LAYER_DROPOUT,
	DP_LAYER_RELU,
	DP_LAYER_TANH,
	DP_LAYER_SIGMOID,
	DP_LAYER_SOFTMAX,
	DP_LAYER_BATCHNORM,
	DP_LAYER_ADD /* the sum of a residual block (and its activation) */
};

enum dp_loss {
	DP_LOSS_XENT = 1, /* softmax cross-entropy; labels are class indices */
	DP_LOSS_MSE = 2   /* mean squared error; labels are vectors of the output size */
};
/* "xent", "mse"; parse returns 0 for anything else (also accepts
 * "cross-entropy", "crossentropy"). */
DP_EXPORT const char *dp_loss_name(int loss);
DP_EXPORT int dp_loss_parse(const char *s);

/* A tensor shape without the batch: rank 1 (c) or rank 3 (c, h, w). */
typedef struct dp_shape {
	int rank;
	int c, h, w;
} dp_shape;

/* "1x28x28" (C x H x W), "28x28" (1 x H x W) or "784".  DP_EARG with a
 * message on anything else. */
DP_EXPORT int dp_shape_parse(const char *s, dp_shape *out, dp_err *e);
/* "1x28x28" or "784" into buf. */
DP_EXPORT const char *dp_shape_format(const dp_shape *s, char *buf, size_t len);
DP_EXPORT size_t dp_shape_size(const dp_shape *s);

typedef struct dp_model dp_model;

/* Parse a spec over input shape `in`, infer and check every layer's
 * shape, plan the parameter layout.  No memory for tensors yet.  Errors
 * name the item: "layer 6 (dense:128): input is 64x12x12: add flatten
 * before dense".  loss: enum dp_loss; it constrains the output (xent:
 * a vector of at least 2 classes). */
DP_EXPORT dp_model *dp_model_new(const char *spec, const dp_shape *in, int loss, dp_err *e);
DP_EXPORT void dp_model_free(dp_model *m);
/* Is spec a named architecture?  0: no, 1: a bare name ("resnet18"), 2: a
 * name with its classes ("resnet18:10"). */
DP_EXPORT int dp_model_named(const char *spec);

DP_EXPORT const char *dp_model_spec(const dp_model *m); /* the items as given, joined by ',' */
DP_EXPORT dp_shape dp_model_input(const dp_model *m);
DP_EXPORT dp_shape dp_model_output_shape(const dp_model *m);
DP_EXPORT int dp_model_loss_kind(const dp_model *m);
DP_EXPORT size_t dp_model_in_size(const dp_model *m);  /* floats per input sample */
DP_EXPORT size_t dp_model_out_size(const dp_model *m); /* floats per output (classes for xent) */
DP_EXPORT size_t dp_model_nparams(const dp_model *m);  /* trainable floats */
DP_EXPORT size_t dp_model_nbuffers(const dp_model *m); /* non-trainable floats (running stats) */
/* 1 when a and b have the same layers, shapes and hyperparameters. */
DP_EXPORT int dp_model_same(const dp_model *a, const dp_model *b);

typedef struct dp_layer_info {
	int kind;
	const char *kind_name; /* "dense", "conv", ... */
	const char *text;      /* the spec item as written */
	dp_shape in, out;
	size_t nparams;        /* trainable floats of this layer */
	size_t param_off;      /* where they start in the parameter buffer (the stage's) */
	int staged;            /* in the stage bound (dp_model_set_stage; every layer without) */
	int fused;             /* an activation computed by the layer before it */
	const char *name;      /* its path: "4", "layer1.0.conv1", "layer1.0" (an add) */
	int depth;             /* the blocks it is in */
	int src, src2;         /* the layers it reads; -1: the input (src2: an add's other) */
	int frozen;            /* dp_model_freeze: every parameter fixed */
	/* the item's settings (what an exporter writes out) */
	int units;             /* dense outputs, conv filters */
	int kh, kw, sh, sw, ph, pw; /* conv and pooling: window, stride, padding (each side) */
	int global;            /* avgpool over the whole plane (gap) */
	int bias;              /* dense, conv: has a bias */
	float p;               /* dropout rate */
	float eps;             /* batchnorm: added to the variance */
	int act;               /* an add's own activation after the sum (res(...):relu),
				  DP_ACT_*; 0: none, or one a layer of its own stands for */
} dp_layer_info;

DP_EXPORT int dp_model_nlayers(const dp_model *m);
DP_EXPORT void dp_model_layer(const dp_model *m, int i, dp_layer_info *out);

/* The named tensors of the model, in checkpoint order. */
enum dp_tensor_role {
	DP_TENSOR_PARAM = 1,  /* trainable: off/count in the parameter buffer */
	DP_TENSOR_BUFFER = 2, /* running statistics: off/count in the buffer area */
	DP_TENSOR_COUNTER = 3 /* an int64 scalar kept on the host (num_batches_tracked) */
};
typedef struct dp_tensor_info {
	char name[96]; /* "3.weight", "layer2.0.downsample.1.running_var" */
	int layer, role;
	int ndim;
	int64_t shape[4];
	size_t off, count;
} dp_tensor_info;

DP_EXPORT int dp_model_ntensors(const dp_model *m);
DP_EXPORT void dp_model_tensor(const dp_model *m, int i, dp_tensor_info *out);
/* Is name a tensor of the model's graph (of any stage)? */
DP_EXPORT int dp_model_knows_tensor(const dp_model *m, const char *name);
/* The int64 counter behind a DP_TENSOR_COUNTER tensor (by layer). */
DP_EXPORT int64_t *dp_model_counter(dp_model *m, int layer);

/* ---- fine-tuning ------------------------------------------------------------
 * Tensors selected by name, for --reset, --freeze, --lr-mult, --no-decay:
 * PATTERNS is a comma-separated list of items, each one of
 *   bias      every tensor named *.bias
 *   bn        every tensor of a batchnorm layer
 *   1d        every trainable tensor of one dimension (biases, batchnorm's)
 *   PATTERN   an fnmatch(3) pattern over the name or over a prefix of it
 *             that ends before a '.': "3" selects "3.weight" and
 *             "3.bias", "layer1*" every tensor whose name begins so
 * and may end in =VALUE, which is skipped here (--lr-mult's multipliers).
 * sel (dp_model_ntensors ints) receives for each tensor 1 + the index of
 * the first item that selects it, or 0.  DP_EARG naming an item that
 * selects no tensor (a typo, most likely). */
DP_EXPORT int dp_model_select(const dp_model *m, const char *patterns, int *sel, dp_err *e);
/* Keep the parameters of the tensors PATTERNS selects fixed: a layer all of
 * whose parameters are selected computes no weight gradients (they stay
 * zero), the backward pass stops where no gradient is needed below, and
 * a batchnorm layer runs in evaluation mode (running statistics, not
 * updated), as torch's module.eval() on frozen layers.  NULL: none. */
DP_EXPORT int dp_model_freeze(dp_model *m, const char *patterns, dp_err *e);
/* Synchronised batch normalisation (--sync-bn): in training, each
 * batchnorm layer's statistics are those of the batch over all workers.
 * sum(ctx, v, n, e) must add v (host, n doubles) over all workers in
 * place, every worker calling it in the same order (a collective).  NULL:
 * each worker's own batch (the default). */
typedef int (*dp_sum_fn)(void *ctx, double *v, size_t n, dp_err *e);
DP_EXPORT void dp_model_set_sync(dp_model *m, dp_sum_fn sum, void *ctx);
/* Label smoothing s (0 <= s <= 1, cross-entropy only): the loss and its
 * gradient are PyTorch's CrossEntropyLoss(label_smoothing=s). */
DP_EXPORT int dp_model_set_label_smoothing(dp_model *m, double s, dp_err *e);

/* ---- bound to a backend -------------------------------------------------
 * Allocate parameters, gradients, activations for batches of up to
 * max_batch samples on backend be (instance ctx, which must outlive m). */
DP_EXPORT int dp_model_bind(dp_model *m, const dp_backend *be, dp_bectx *ctx, size_t max_batch, dp_err *e);
DP_EXPORT size_t dp_model_max_batch(const dp_model *m);
/* The backend and instance m is bound to (NULL before dp_model_bind). */
DP_EXPORT const dp_backend *dp_model_backend(const dp_model *m, dp_bectx **ctx);

/* Fresh weights as PyTorch initialises the same modules: dense and conv
 * weights and biases uniform in +-1/sqrt(fan_in), batchnorm 1 and 0,
 * running statistics 0 and 1.  A function of seed alone. */
DP_EXPORT void dp_model_init(dp_model *m, uint64_t seed);

DP_EXPORT float *dp_model_params(dp_model *m);  /* (dev) nparams floats */
DP_EXPORT float *dp_model_grads(dp_model *m);   /* (dev) nparams floats, same layout */
DP_EXPORT float *dp_model_buffers(dp_model *m); /* (dev) nbuffers floats */

/* One pass.  train: dropout on, batchnorm on batch statistics (and its
 * running statistics updated).  Dropout masks are drawn from
 * (seed, step, layer, sample0 + sample index): see dp_rng.h. */
typedef struct dp_pass {
	int train;
	uint64_t seed, step;
	uint64_t sample0; /* index of this batch's first sample in the global batch */
} dp_pass;

/* Forward n <= max_batch samples x (host, (n, in_size) floats, from the
 * backend's host_alloc or, on the CPU, any memory; unchanged until the
 * backward pass returns: a recomputed segment reads it again). */
DP_EXPORT int dp_model_forward(dp_model *m, const float *x, size_t n, const dp_pass *p, dp_err *e);
/* The output of the last forward: (dev) (n, out_size) logits or values. */
DP_EXPORT const float *dp_model_output(const dp_model *m);

/* The loss of the last forward against labels y (host: n int32 class
 * indices for xent, (n, out_size) floats for mse).  stats[0] receives the
 * summed loss over the n samples, stats[1] the number of correct
 * predictions (xent).  With want_grad, d loss / d output * scale is kept
 * for the backward pass: scale = 1/n gives the gradient of the batch mean
 * (PyTorch's default reduction); a data-parallel step can pass 1/global_n.
 * DP_EDATA when a class label is out of range. */
DP_EXPORT int dp_model_loss(dp_model *m, const void *y, size_t n, float scale, int want_grad,
		  double stats[2], dp_err *e);

/* dp_model_loss in two halves: queue the loss (labels checked, the
 * gradient kept for the backward pass), then wait for its stats alone,
 * not for the work queued between (a backward pass): a GPU's host queues
 * the backward while the device runs the forward. */
DP_EXPORT int dp_model_loss_queue(dp_model *m, const void *y, size_t n, float scale,
				  int want_grad, dp_err *e);
DP_EXPORT int dp_model_loss_wait(dp_model *m, double stats[2], dp_err *e);

/* Called by dp_model_backward as soon as the gradients of one layer are
 * final: `count` floats at `off` in the gradient buffer.  Layers come last
 * first, so the ranges arrive from the end of the buffer to its start.
 * A negative return stops the pass and is returned. */
typedef int (*dp_grad_hook)(void *ctx, int layer, size_t off, size_t count, dp_err *e);

/* Gradients of the loss of the last forward/loss into dp_model_grads().
 * hook may be NULL. */
DP_EXPORT int dp_model_backward(dp_model *m, size_t n, dp_grad_hook hook, void *hook_ctx, dp_err *e);

/* A worker without samples in a step calls this in place of forward,
 * loss and backward: the sums of --sync-bn (and the running statistics
 * they move, as on the other workers), and the hook for every layer with
 * parameters, in the order a backward pass makes them (the gradient
 * buffer is left as it is). */
DP_EXPORT int dp_model_idle(dp_model *m, dp_grad_hook hook, void *hook_ctx, dp_err *e);

/* ---- memory: recomputation, micro-batches in flight ------------------------
 * A bound model keeps from a training forward pass only what its backward
 * pass reads (lib/train/model/memory.c): the input of each dense, conv
 * and batchnorm layer, the output of each activation, the model's
 * output; what no backward pass reads (the layers of a frozen start of
 * the model: they keep no activation) is scratch shared by every pass.
 *
 * Recomputation (torch.utils.checkpoint): the layers of each segment
 * keep nothing from the forward pass but the segment's input and output;
 * the backward pass runs the segment again when it gets there, with the
 * same dropout masks and the batchnorm statistics of the first pass (its
 * running statistics move once), so the gradients are the same bits.
 * patterns: NULL, none; "" or "blocks", every innermost block (res(...)
 * or seq(...) holding no other block: torchvision ResNets' residual
 * blocks) and each run of layers between them (a ResNet's stem, its
 * head); else comma-separated fnmatch(3) patterns over the paths of
 * blocks and layers ("layer3.*", "[2-7]"): each block named is a segment
 * (with what is inside it), each run of consecutive layers named outside
 * them another.  DP_EARG for a pattern that names nothing and for a run
 * that is not a segment (a layer after it reads inside it).  Before or
 * after dp_model_bind (the activations are planned again). */
DP_EXPORT int dp_model_set_recompute(dp_model *m, const char *patterns, dp_err *e);
DP_EXPORT int dp_model_nsegments(const dp_model *m);
/* Segment s: its layers first to last. */
DP_EXPORT void dp_model_segment(const dp_model *m, int s, int *first, int *last);

/* Slots: the activations of k micro-batches in flight (a pipeline stage
 * runs the forward passes of several before their backward passes):
 * dp_model_use_slot(m, j) makes the next forward, loss and backward
 * those of slot j, and a backward pass of slot j goes back through what
 * slot j's forward kept.  1 by default. */
DP_EXPORT int dp_model_set_slots(dp_model *m, int k, dp_err *e);
DP_EXPORT int dp_model_slots(const dp_model *m);
DP_EXPORT int dp_model_use_slot(dp_model *m, int j, dp_err *e);

/* ---- pipeline stages ---------------------------------------------------------
 * A model cut into stages of consecutive layers, each stage on ranks of
 * its own (dp_train.h's pipeline): a stage ends where one tensor alone
 * goes on (no later layer reads an earlier one, nor the model's input):
 * after a residual block, not inside it.
 *
 * dp_model_cuts: the cut of about equal cost, the largest stage's cost as
 * small as the cut points allow (a linear partition): first[s] is stage
 * s's first layer, first[stages] the number of layers.  cost: each
 * layer's (measured), or NULL for dp_model_layer_cost's estimate.
 * DP_EARG when the model has fewer than stages - 1 cut points. */
DP_EXPORT int dp_model_can_cut(const dp_model *m, int after);
/* Multiply-adds of layer i's forward and backward passes, a sample: 3x
 * the forward's for dense and conv layers, a few per output for the rest. */
DP_EXPORT double dp_model_layer_cost(const dp_model *m, int i);
DP_EXPORT int dp_model_cuts(const dp_model *m, int stages, const double *cost, int *first,
			    dp_err *e);
/* Before dp_model_bind: m becomes its layers [first, end) alone.  Its
 * parameters, buffers and tensors are theirs (dp_model_nparams, _tensor:
 * offsets from the stage's first; names the whole model's), its input the
 * output of layer first - 1 (floats a sample: dp_model_stage_in), its
 * output layer end - 1's (dp_model_stage_out); dp_model_loss only in the
 * last stage, dp_model_set_output_grad in the others; the gradient of its
 * input, wanted when an earlier layer trains, is dp_model_input_grad's. */
DP_EXPORT int dp_model_set_stage(dp_model *m, int first, int end, dp_err *e);
DP_EXPORT void dp_model_stage(const dp_model *m, int *first, int *end);
DP_EXPORT size_t dp_model_stage_in(const dp_model *m);
DP_EXPORT size_t dp_model_stage_out(const dp_model *m);
/* Does the stage have a backward pass (a layer of it trains, or one
 * before it)?  Its input gradient is wanted when the stage before has one. */
DP_EXPORT int dp_model_stage_trains(const dp_model *m);
DP_EXPORT int dp_model_stage_wants_dx(const dp_model *m);
/* The whole model's parameters (a stage's model: all the stages'). */
DP_EXPORT size_t dp_model_total_params(const dp_model *m);
/* A stage but the last: d loss / d output of the last forward pass (dy,
 * host, (n, stage_out) floats: the next stage's dp_model_input_grad), for
 * dp_model_backward. */
DP_EXPORT int dp_model_set_output_grad(dp_model *m, const float *dy, size_t n, dp_err *e);
/* After dp_model_backward: (dev) (n, stage_in) floats, the gradient of the
 * stage's input; NULL when no layer before the stage trains. */
DP_EXPORT const float *dp_model_input_grad(const dp_model *m);

/* What the bound model allocated on its backend, in bytes. */
typedef struct dp_model_mem {
	size_t params, grads, buffers; /* weights, their gradients, running statistics */
	size_t activations;            /* kept + scratch */
	size_t kept;                   /* of them, kept from forward to backward (all slots) */
	size_t scratch;                /* of them, shared: what nothing keeps, recomputed insides */
	size_t grad_scratch;           /* the backward pass's gradient buffers */
	size_t total;                  /* all of the above */
} dp_model_mem;
DP_EXPORT void dp_model_memory(const dp_model *m, dp_model_mem *mm);
/* The same for a model not bound yet, as dp_model_bind would allocate it
 * for batches of max_batch (but the backend's convolution workspace). */
DP_EXPORT int dp_model_plan(dp_model *m, size_t max_batch, dp_model_mem *mm, dp_err *e);

/* Inference on n samples: out (host, (n, out_size)) receives class
 * probabilities (xent: softmax of the logits) or the outputs (mse). */
DP_EXPORT int dp_model_predict(dp_model *m, const float *x, size_t n, float *out, dp_err *e);


#ifdef __cplusplus
}
#endif
#endif
