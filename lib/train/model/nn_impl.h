/*
 * nn_impl.h - private to lib/train/model/: a model's layers (struct layer,
 * struct dp_model) and what the files of the model share: spec.c (the
 * spec language: items, shapes), graph.c (blocks, names, named
 * architectures, the plan of a model) and nn.c (the model bound to a
 * backend: its passes).  Not installed.
 */
#ifndef DP_NN_IMPL_H
#define DP_NN_IMPL_H

#include "dp_nn.h"

typedef struct layer {
	int kind;
	char *text;                /* the item as written (an add: "add", its activation) */
	char *name;                /* its path in the graph: "3", "layer1.0.conv1" */
	int depth;                 /* blocks it is in */
	int src, src2;             /* the nodes it reads (-1: the model's input); src2: an add's other */
	int uses;                  /* nodes that read its output */
	int shortcut;              /* an add: 0 identity, 1 a downsample branch */
	dp_shape in, out;
	int units;                 /* dense outputs, conv filters */
	int kh, kw, sh, sw, ph, pw; /* conv and pool geometry */
	int global;                /* avgpool over the whole plane (gap) */
	int nobias;                /* dense, conv: bias=0 */
	int he;                    /* conv: init=he */
	float p;                   /* dropout rate */
	float eps, momentum;       /* batchnorm */
	int act;                   /* activation fused into this layer */
	int fused;                 /* this activation is done by the layer before */
	int inplace;               /* overwrites its input (an activation, a residual sum) */
	int frozen;                /* every parameter fixed (a batchnorm: evaluation mode) */
	int needg;                 /* the gradient of its output is needed */
	size_t woff, wn, boff, bn; /* weight and bias in the parameter buffer */
	size_t roff;               /* running mean, then var, in the buffers */
	int64_t tracked;           /* batchnorm: batches seen in training */
	double count;              /* batchnorm under --sync-bn: values a channel over all ranks */
	float *ybuf;               /* (dev) own output buffer, if it needs one (the slot's) */
	const float *y;            /* output of the last forward */
	const float *x;            /* input of the last forward */
	void *aux;                 /* (dev) maxpool argmax, batchnorm saved statistics */
	double *ssum;              /* (dev) --sync-bn's sums of the forward, for a replay */
	/* the activation plan (memory.c) */
	int owner;                 /* the layer whose buffer holds this output in training; -1:
				      the stage's input */
	int seg;                   /* the recompute segment it is in; -1: none */
	int yreg, areg;            /* where ybuf and aux live: NN_NOWHERE, NN_SLOT, NN_SHARED */
	size_t yoff, aoff, soff;   /* their offsets there (soff: ssum's, in the slot) */
} layer;

/* A block of the spec (res(...) or seq(...)): its layers [lo, hi] in
 * running order, its path. */
typedef struct nn_block {
	int lo, hi;
	char *name;
	int inner; /* holds no block */
} nn_block;

/* What a slot keeps of its forward pass for the backward one. */
typedef struct nn_slot {
	const float *in;     /* the stage's input as the passes read it */
	const float *out;
	size_t n;
	int train, valid;
	dp_pass pass;
	const float **x, **y; /* each layer's (n of each) */
} nn_slot;

enum { NN_NOWHERE = 0, NN_SLOT = 1, NN_SHARED = 2 };

struct dp_model {
	char *spec;
	dp_shape in;
	int loss;
	float smooth; /* label smoothing (xent) */
	layer *l;
	int n, cap;
	size_t nparams, nbuffers;
	int first_param; /* first layer with parameters; -1 if none */
	int maxc;        /* the most channels of a batchnorm */
	dp_sum_fn sync;  /* --sync-bn: sums across ranks */
	void *sync_ctx;
	nn_block *blk;   /* the spec's blocks */
	int nblk;
	/* the stage bound (dp_model_set_stage): layers [lo, hi), their
	 * parameters from plo and running statistics from blo of the whole
	 * model's layout, sp and sb of them */
	int lo, hi;
	size_t plo, blo, sp, sb;
	int need_dx;     /* the gradient of the stage's input is wanted */
	/* recomputation (dp_model_set_recompute): segments [a, f] */
	int (*seg)[2];
	int nseg;
	char *recompute; /* the patterns as given ("" : the innermost blocks) */
	/* bound */
	const dp_backend *be;
	dp_bectx *ctx;
	size_t max_batch;
	float *params, *grads, *bufs;
	float *xbuf;       /* (dev) staged input (the slot's) */
	/* activations (memory.c): a region per slot, one shared */
	int nslots, slot;
	nn_slot *slots;
	char *slot_mem, *shared_mem; /* (dev) */
	size_t slot_bytes, shared_bytes, xoff;
	float *runs;       /* (dev) 2 maxc: a replay's running statistics, discarded */
	void *ybuf;        /* (dev) staged labels */
	float **gbuf;      /* (dev) gradient buffers of the backward pass */
	int ngbuf;
	int *gslot;        /* per node: the buffer holding the gradient of its output */
	float *dout;       /* gradient of the output, set by loss */
	void *ws;          /* (dev) convolution workspace */
	float *fold;       /* (dev) folded convolutions' weights and biases (nn.c) */
	size_t fold_n;     /* its floats */
	double *stats;     /* (dev) 2 doubles */
	double *hstats;    /* (host_alloc) 2 doubles: stats fetched by loss_queue */
	double *sums;      /* (dev) 2 maxc doubles: batchnorm sums (--sync-bn) */
	double *hsums;     /* (host) 2 maxc + 1 */
	float *prob;       /* (dev) softmax for predict */
	const float *out;  /* output of the last forward */
	const float *xin;  /* its input (staged) */
	size_t last_n;
	int last_train;
	dp_pass last_pass;
	int dx_slot;       /* after backward: the gradient buffer of the stage's input; -1 */
};


extern const char *const nn_kind_names[]; /* by DP_LAYER_* */
#define MAX_UNITS (1 << 24) /* dense outputs, and a named model's classes */

/* The activation kind an item relu, tanh or sigmoid computes. */
static inline int act_of(int kind)
{
	return kind == DP_LAYER_RELU ? DP_ACT_RELU : kind == DP_LAYER_TANH ? DP_ACT_TANH
									: DP_ACT_SIGMOID;
}

static inline int is_act(int kind)
{
	return kind == DP_LAYER_RELU || kind == DP_LAYER_TANH || kind == DP_LAYER_SIGMOID;
}

/* Layer L's weight, bias, their gradients, running statistics in the
 * bound stage's buffers (offsets are the whole model's). */
static inline float *nn_w(const dp_model *m, const layer *L) { return m->params + (L->woff - m->plo); }
static inline float *nn_b(const dp_model *m, const layer *L) { return m->params + (L->boff - m->plo); }
static inline float *nn_dw(const dp_model *m, const layer *L) { return m->grads + (L->woff - m->plo); }
static inline float *nn_db(const dp_model *m, const layer *L) { return m->grads + (L->boff - m->plo); }
static inline float *nn_run(const dp_model *m, const layer *L) { return m->bufs + (L->roff - m->blo); }

/* ---- spec.c ---- */
/* A whole number s[0..len) into *out: 0; -1 when it is not one, -2 when
 * it is larger than max. */
int nn_parse_int(const char *s, size_t len, long max, int *out);
/* One item's text (L->text) into L's kind and fields; idx names it in messages. */
int nn_parse_item(layer *L, const char *idx, dp_err *e);
int nn_same_shape(const dp_shape *a, const dp_shape *b);
/* L's output shape from its input (and o2, an add's other input). */
int nn_plan_layer(layer *L, const dp_shape *o2, dp_err *e);
void nn_free_layers(dp_model *m);

/* ---- graph.c ---- */
/* The tensors of the stage (all 0; offsets the whole model's) or of the
 * whole graph (all 1). */
int nn_ntensors(const dp_model *m, int all);
void nn_tensor(const dp_model *m, int idx, int all, dp_tensor_info *t);
/* Which layers' outputs need a gradient (those with parameters to train,
 * and every one after). */
void nn_plan_grads(dp_model *m);
/* Is batchnorm layer i folded into the convolution before it (nn.c's
 * forward pass: both frozen, the batchnorm in evaluation mode, no
 * backward pass through them, the convolution's output read by it alone,
 * both in the stage, a backend with bnorm_fold)?  Then the convolution
 * writes the batchnorm's output, which is a view of it, and applies the
 * batchnorm's fused activation (its act) too. */
int nn_folded(const dp_model *m, int i);

/* ---- memory.c ---- */
void nn_unbind(dp_model *m);
/* The plan of the activations from the layers' settings (frozen, the
 * stage, the segments, the slots), their memory allocated anew when m is
 * bound; after dp_model_freeze and the other settings that change it. */
int nn_plan_memory(dp_model *m, dp_err *e);
/* Does layer i write an output buffer of its own when training? */
int nn_has_ybuf(const dp_model *m, int i);
/* Pointers into slot k's memory (ybuf, aux, xbuf...). */
void nn_point_slot(dp_model *m, int k);
/* What a forward pass made, kept in the current slot for its backward. */
void nn_keep_slot(dp_model *m);

/* ---- nn.c ---- */
/* Layer i's forward pass (replay: again in a backward pass, from what
 * the first one kept: no running statistics moved, no collective). */
int nn_layer_fwd(dp_model *m, int i, size_t n, int train, const dp_pass *p, int replay, dp_err *e);
/* Floats a sample of node i's output (i == m->n: the stage's input). */
size_t nn_node_size(const dp_model *m, int i);
/* The gradient buffers a backward pass takes at most. */
int nn_walk_count(dp_model *m);

#endif
