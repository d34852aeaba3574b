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
	float *ybuf;               /* (dev) own output buffer, if it needs one */
	const float *y;            /* output of the last forward */
	const float *x;            /* input of the last forward */
	void *aux;                 /* (dev) maxpool argmax, batchnorm saved statistics */
} layer;

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
	/* bound */
	const dp_backend *be;
	dp_bectx *ctx;
	size_t max_batch;
	float *params, *grads, *bufs;
	float *xbuf;       /* (dev) staged input */
	void *ybuf;        /* (dev) staged labels */
	float **gbuf;      /* (dev) gradient buffers of the backward pass */
	int ngbuf;
	int *gslot;        /* per node: the buffer holding the gradient of its output */
	float *dout;       /* gradient of the output, set by loss */
	void *ws;          /* (dev) convolution workspace */
	double *stats;     /* (dev) 2 doubles */
	double *sums;      /* (dev) 2 maxc doubles: batchnorm sums (--sync-bn) */
	double *hsums;     /* (host) 2 maxc + 1 */
	float *prob;       /* (dev) softmax for predict */
	const float *out;  /* output of the last forward */
	size_t last_n;
	int last_train;
	dp_pass last_pass;
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
/* Which layers' outputs need a gradient (those with parameters to train,
 * and every one after). */
void nn_plan_grads(dp_model *m);

/* ---- nn.c ---- */
void nn_unbind(dp_model *m);

#endif
