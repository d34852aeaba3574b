/*
 * nn.c - models: spec parsing, shape inference, parameter layout, and the
 * forward and backward passes as calls into a backend (dp_nn.h).
 *
 * Nothing numeric happens here beyond initial weights: every tensor
 * operation is a dp_backend call, so this file is the same for every
 * backend.  Plans made once per model:
 *  - an activation item right after dense or conv is computed by that
 *    layer (fused: one pass over its output while in cache); the item
 *    keeps its own index, so tensor names still follow the spec;
 *  - flatten, fused activations, a final softmax, and dropout outside
 *    training are views of their input: no copy;
 *  - the backward pass stops at the first layer with parameters (no
 *    input gradient is ever computed for the data), and passes gradients
 *    between two buffers, elementwise layers working in place.
 */
#define _GNU_SOURCE
#include "dp_nn.h"
#include "dp_rng.h"

#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static const char *const kind_names[] = {
	[DP_LAYER_DENSE] = "dense",     [DP_LAYER_CONV] = "conv",
	[DP_LAYER_MAXPOOL] = "maxpool", [DP_LAYER_AVGPOOL] = "avgpool",
	[DP_LAYER_FLATTEN] = "flatten", [DP_LAYER_DROPOUT] = "dropout",
	[DP_LAYER_RELU] = "relu",       [DP_LAYER_TANH] = "tanh",
	[DP_LAYER_SIGMOID] = "sigmoid", [DP_LAYER_SOFTMAX] = "softmax",
	[DP_LAYER_BATCHNORM] = "batchnorm", [DP_LAYER_ADD] = "add",
};

const char *dp_loss_name(int loss)
{
	return loss == DP_LOSS_XENT ? "xent" : loss == DP_LOSS_MSE ? "mse" : "?";
}

int dp_loss_parse(const char *s)
{
	if (!strcmp(s, "xent") || !strcmp(s, "cross-entropy") || !strcmp(s, "crossentropy"))
		return DP_LOSS_XENT;
	if (!strcmp(s, "mse"))
		return DP_LOSS_MSE;
	return 0;
}

/* ---- shapes ----------------------------------------------------------- */

/* The most values of a sample, and of a layer's output. */
#define MAX_VALUES (1 << 28)

/* A whole number s[0..len) into *out: 0; -1 when it is not one, -2 when
 * it is larger than max. */
static int parse_int(const char *s, size_t len, long max, int *out)
{
	if (len == 0)
		return -1;
	long v = 0;
	int big = 0;
	for (size_t i = 0; i < len; i++) {
		if (!isdigit((unsigned char)s[i]))
			return -1;
		if (!big && (v = v * 10 + (s[i] - '0')) > max)
			big = 1;
	}
	if (big)
		return -2;
	*out = (int)v;
	return 0;
}

/* "A" or "AxB" (integers from lo to max) into a, b (b = a for "A"); -1
 * when not of that form, -2 when a number is larger than max. */
static int parse_pair_from(const char *s, size_t len, int lo, long max, int *a, int *b)
{
	const char *x = memchr(s, 'x', len);
	if (!x)
		x = memchr(s, 'X', len);
	size_t l1 = x ? (size_t)(x - s) : len;
	int ra = parse_int(s, l1, max, a), rb = x ? parse_int(x + 1, len - l1 - 1, max, b) : ra;
	if (ra == -1 || rb == -1)
		return -1;
	if (ra == -2 || rb == -2)
		return -2;
	if (!x)
		*b = *a;
	if (*a < lo || *b < lo)
		return -1;
	return 0;
}

static int parse_pair(const char *s, size_t len, long max, int *a, int *b)
{
	return parse_pair_from(s, len, 1, max, a, b);
}

int dp_shape_parse(const char *s, dp_shape *out, dp_err *e)
{
	int d[3], nd = 0;
	const char *p = s;
	for (;;) {
		size_t len = strcspn(p, "xX");
		int rc = nd == 3 ? -1 : parse_int(p, len, MAX_VALUES, &d[nd]);
		if (rc == -2)
			return dp_seterr(e, DP_EARG, "input shape '%s': %.*s is too large (at most %d)",
					 s, (int)len, p, MAX_VALUES);
		if (rc < 0 || d[nd] <= 0)
			return dp_seterr(e, DP_EARG,
					 "input shape '%s': want C x H x W (like 1x28x28) or a length",
					 s);
		nd++;
		p += len;
		if (!*p)
			break;
		p++;
	}
	memset(out, 0, sizeof *out);
	if (nd == 1) {
		out->rank = 1;
		out->c = d[0];
		out->h = out->w = 1;
	} else {
		out->rank = 3;
		out->c = nd == 3 ? d[0] : 1;
		out->h = d[nd - 2];
		out->w = d[nd - 1];
	}
	if (dp_shape_size(out) > MAX_VALUES)
		return dp_seterr(e, DP_EARG,
				 "input shape '%s': %zu values is too large (at most %d a sample)", s,
				 dp_shape_size(out), MAX_VALUES);
	return DP_OK;
}

const char *dp_shape_format(const dp_shape *s, char *buf, size_t len)
{
	if (s->rank == 1)
		snprintf(buf, len, "%d", s->c);
	else
		snprintf(buf, len, "%dx%dx%d", s->c, s->h, s->w);
	return buf;
}

size_t dp_shape_size(const dp_shape *s)
{
	return s->rank == 1 ? (size_t)s->c : (size_t)s->c * s->h * s->w;
}

/* ---- spec parsing --------------------------------------------------------- */

/* Split item text into fields at ':'.  Returns the count (<= max). */
static int fields(char *t, char **f, int max)
{
	int n = 0;
	for (char *p = t;;) {
		if (n == max)
			return max + 1;
		f[n++] = p;
		char *c = strchr(p, ':');
		if (!c)
			break;
		*c = 0;
		p = c + 1;
	}
	return n;
}

static int kind_of(const char *name)
{
	static const struct {
		const char *name;
		int kind;
	} names[] = {
		{"dense", DP_LAYER_DENSE},         {"linear", DP_LAYER_DENSE},
		{"conv", DP_LAYER_CONV},           {"conv2d", DP_LAYER_CONV},
		{"maxpool", DP_LAYER_MAXPOOL},     {"maxpool2d", DP_LAYER_MAXPOOL},
		{"avgpool", DP_LAYER_AVGPOOL},     {"avgpool2d", DP_LAYER_AVGPOOL},
		{"flatten", DP_LAYER_FLATTEN},     {"dropout", DP_LAYER_DROPOUT},
		{"relu", DP_LAYER_RELU},           {"tanh", DP_LAYER_TANH},
		{"sigmoid", DP_LAYER_SIGMOID},     {"softmax", DP_LAYER_SOFTMAX},
		{"batchnorm", DP_LAYER_BATCHNORM}, {"bn", DP_LAYER_BATCHNORM},
	};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (!strcmp(name, names[i].name))
			return names[i].kind;
	return 0;
}

/* The largest numbers of a spec's items. */
#define MAX_UNITS (1 << 24)
#define MAX_FILTERS (1 << 16)
#define MAX_WINDOW 1024

/* "model: item 0 'dense:1000000000': 1000000000 is too large (at most
 * 16777216 units)" */
static int too_large(dp_err *e, const char *idx, const char *it, const char *val, long max,
		     const char *what)
{
	return dp_seterr(e, DP_EARG, "model: item %s '%s': %s is too large (at most %ld %s)", idx,
			 it, val, max, what);
}

#define PAD_VALID (-1)
#define PAD_SAME (-2)

/* The fields of conv:FILTERS:KERNEL[:STRIDE][:PAD][:bias=0][:init=he]
 * (f[0] is "conv"). */
static int parse_conv(layer *L, char **f, int nf, const char *idx, dp_err *e)
{
	const char *it = L->text;
	int rc;
	if (nf >= 3 && parse_int(f[1], strlen(f[1]), MAX_FILTERS, &L->units) == -2)
		return too_large(e, idx, it, f[1], MAX_FILTERS, "filters");
	if (nf >= 3 && parse_pair(f[2], strlen(f[2]), MAX_WINDOW, &L->kh, &L->kw) == -2)
		return too_large(e, idx, it, f[2], MAX_WINDOW, "for a kernel side");
	if (nf < 3 || parse_int(f[1], strlen(f[1]), MAX_FILTERS, &L->units) < 0 ||
	    L->units <= 0 || parse_pair(f[2], strlen(f[2]), MAX_WINDOW, &L->kh, &L->kw) < 0)
		return dp_seterr(e, DP_EARG,
				 "model: item %s '%s': want "
				 "conv:FILTERS:KERNEL[:STRIDE][:same|valid|PAD][:bias=0][:init=he]",
				 idx, it);
	L->sh = L->sw = 1;
	L->ph = PAD_VALID;
	int got_stride = 0, got_pad = 0;
	for (int i = 3; i < nf; i++) {
		const char *v = f[i];
		int is_stride = 0, is_pad = 0;
		if (!strcmp(v, "bias=0") || !strcmp(v, "nobias") || !strcmp(v, "bias=1")) {
			L->nobias = strcmp(v, "bias=1") != 0;
			continue;
		}
		if (!strcmp(v, "init=he") || !strcmp(v, "init=default")) {
			L->he = v[5] == 'h';
			continue;
		}
		if (!strncmp(v, "stride=", 7)) {
			v += 7;
			is_stride = 1;
		} else if (!strncmp(v, "padding=", 8) || !strncmp(v, "pad=", 4)) {
			v = strchr(v, '=') + 1;
			is_pad = 1;
		} else if (!strcmp(v, "same") || !strcmp(v, "valid")) {
			is_pad = 1;
		} else if (!got_stride) {
			is_stride = 1;
		} else {
			is_pad = 1;
		}
		if (is_stride && !got_stride) {
			if ((rc = parse_pair(v, strlen(v), MAX_WINDOW, &L->sh, &L->sw)) == -2)
				return too_large(e, idx, it, v, MAX_WINDOW, "for a stride");
			if (rc == 0) {
				got_stride = 1;
				continue;
			}
		}
		if (is_pad && !got_pad) {
			got_pad = 1;
			if (!strcmp(v, "same")) {
				L->ph = L->pw = PAD_SAME;
				continue;
			}
			if (!strcmp(v, "valid")) {
				L->ph = L->pw = PAD_VALID;
				continue;
			}
			int a, b;
			if ((rc = parse_pair_from(v, strlen(v), 0, MAX_WINDOW, &a, &b)) == -2)
				return too_large(e, idx, it, v, MAX_WINDOW, "for padding");
			if (rc == 0) {
				L->ph = a;
				L->pw = b;
				continue;
			}
		}
		return dp_seterr(e, DP_EARG,
				 "model: item %s '%s': '%s' is not a stride, padding (same, "
				 "valid, or a number), bias=0 or init=he",
				 idx, it, f[i]);
	}
	if (L->ph == PAD_SAME && (L->sh != 1 || L->sw != 1))
		return dp_seterr(e, DP_EARG,
				 "model: item %s '%s': padding 'same' needs stride 1 (as in "
				 "PyTorch); give the padding as a number",
				 idx, it);
	return DP_OK;
}

/* Parse one item into L (kind and hyperparameters; shapes later). */
static int parse_item(layer *L, const char *idx, dp_err *e)
{
	char buf[256], *f[8];
	if (strlen(L->text) >= sizeof buf)
		return dp_seterr(e, DP_EARG, "model: item %s: too long", idx);
	strcpy(buf, L->text);
	int nf = fields(buf, f, 7);
	if (!strcmp(f[0], "gap") || !strcmp(f[0], "globalavgpool") ||
	    (!strcmp(f[0], "avgpool") && nf == 2 && !strcmp(f[1], "global"))) {
		if (nf > 1 && strcmp(f[0], "avgpool"))
			return dp_seterr(e, DP_EARG, "model: item %s '%s': %s takes no arguments",
					 idx, L->text, f[0]);
		L->kind = DP_LAYER_AVGPOOL;
		L->global = 1;
		return DP_OK;
	}
	const char *it = L->text;
	if (nf > 7)
		return dp_seterr(e, DP_EARG, "model: item %s '%s': too many fields", idx, it);
	L->kind = kind_of(f[0]);
	if (!L->kind)
		return dp_seterr(e, DP_EARG,
				 "model: item %s '%s': unknown layer '%s' (dense, conv, maxpool, "
				 "avgpool, gap, flatten, dropout, relu, tanh, sigmoid, batchnorm, "
				 "softmax, res(...), seq(...))",
				 idx, it, f[0]);
	int rc;
	switch (L->kind) {
	case DP_LAYER_DENSE:
		if (nf == 3 && (!strcmp(f[2], "bias=0") || !strcmp(f[2], "nobias"))) {
			L->nobias = 1;
			nf = 2;
		}
		if (nf == 2 && (rc = parse_int(f[1], strlen(f[1]), MAX_UNITS, &L->units)) == -2)
			return too_large(e, idx, it, f[1], MAX_UNITS, "units");
		if (nf != 2 || rc < 0 || L->units <= 0)
			return dp_seterr(e, DP_EARG, "model: item %s '%s': want dense:UNITS[:bias=0]", idx, it);
		break;
	case DP_LAYER_CONV:
		if ((rc = parse_conv(L, f, nf, idx, e)) < 0)
			return rc;
		break;
	case DP_LAYER_MAXPOOL:
	case DP_LAYER_AVGPOOL: {
		int maxf = L->kind == DP_LAYER_MAXPOOL ? 4 : 3;
		if (nf == 4 && !strncmp(f[3], "pad=", 4))
			f[3] += 4;
		if (nf >= 2 && nf <= maxf) {
			if (parse_pair(f[1], strlen(f[1]), MAX_WINDOW, &L->kh, &L->kw) == -2)
				return too_large(e, idx, it, f[1], MAX_WINDOW, "for a window side");
			if (nf >= 3 && parse_pair(f[2], strlen(f[2]), MAX_WINDOW, &L->sh, &L->sw) == -2)
				return too_large(e, idx, it, f[2], MAX_WINDOW, "for a stride");
			if (nf == 4 && parse_pair_from(f[3], strlen(f[3]), 0, MAX_WINDOW, &L->ph, &L->pw) == -2)
				return too_large(e, idx, it, f[3], MAX_WINDOW, "for padding");
		}
		if (nf < 2 || nf > maxf || parse_pair(f[1], strlen(f[1]), MAX_WINDOW, &L->kh, &L->kw) < 0 ||
		    (nf >= 3 && parse_pair(f[2], strlen(f[2]), MAX_WINDOW, &L->sh, &L->sw) < 0) ||
		    (nf == 4 && parse_pair_from(f[3], strlen(f[3]), 0, MAX_WINDOW, &L->ph, &L->pw) < 0))
			return dp_seterr(e, DP_EARG, "model: item %s '%s': want %s:SIZE[:STRIDE%s]", idx,
					 it, f[0], maxf == 4 ? "[:PAD]" : "");
		if (nf == 2) {
			L->sh = L->kh;
			L->sw = L->kw;
		}
		if (2 * L->ph > L->kh || 2 * L->pw > L->kw)
			return dp_seterr(e, DP_EARG,
					 "model: item %s '%s': padding %dx%d is more than half the "
					 "%dx%d window (as PyTorch refuses)",
					 idx, it, L->ph, L->pw, L->kh, L->kw);
		break;
	}
	case DP_LAYER_DROPOUT: {
		char *end;
		errno = 0;
		double p = nf == 2 ? strtod(f[1], &end) : -1;
		if (nf != 2 || errno || end == f[1] || *end || !(p >= 0 && p < 1))
			return dp_seterr(e, DP_EARG,
					 "model: item %s '%s': want dropout:RATE with 0 <= RATE < 1", idx,
					 it);
		L->p = (float)p;
		break;
	}
	case DP_LAYER_BATCHNORM:
		L->eps = 1e-5f;
		L->momentum = 0.1f;
		for (int i = 1; i < nf; i++) {
			char *end;
			double v = -1;
			float *dst = NULL;
			if (!strncmp(f[i], "eps=", 4))
				dst = &L->eps, v = strtod(f[i] + 4, &end);
			else if (!strncmp(f[i], "momentum=", 9))
				dst = &L->momentum, v = strtod(f[i] + 9, &end);
			if (!dst || *end || !(v > 0 && v <= 1))
				return dp_seterr(e, DP_EARG,
						 "model: item %s '%s': want batchnorm[:eps=E][:momentum=M]",
						 idx, it);
			*dst = (float)v;
		}
		break;
	default:
		if (nf != 1)
			return dp_seterr(e, DP_EARG, "model: item %s '%s': %s takes no arguments", idx,
					 it, f[0]);
	}
	return DP_OK;
}

static int same_shape(const dp_shape *a, const dp_shape *b)
{
	return a->rank == b->rank && a->c == b->c && a->h == b->h && a->w == b->w;
}

/* Output size of a window of k with stride s over n with total padding. */
static int window_out(int n, int k, int s, int pad_total)
{
	int span = n + pad_total - k;
	return span < 0 ? 0 : span / s + 1;
}

static int shape_error(dp_err *e, const layer *L, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int shape_error(dp_err *e, const layer *L, const char *fmt, ...)
{
	char why[512], sb[64];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	return dp_seterr(e, DP_EARG, "model: layer %s (%s): input is %s: %s", L->name, L->text,
			 dp_shape_format(&L->in, sb, sizeof sb), why);
}

/* Infer L->out from L->in (and an add's other input o2); check; count
 * parameters. */
static int plan_layer(layer *L, const dp_shape *o2, dp_err *e)
{
	dp_shape o = L->in;
	size_t insz = dp_shape_size(&L->in);
	char a[64], b[64];
	switch (L->kind) {
	case DP_LAYER_DENSE:
		if (L->in.rank != 1)
			return shape_error(e, L, "dense needs a vector: add flatten before it");
		o.c = L->units;
		L->wn = (size_t)L->units * insz;
		L->bn = L->nobias ? 0 : (size_t)L->units;
		break;
	case DP_LAYER_CONV: {
		if (L->in.rank != 3)
			return shape_error(e, L, "conv needs C x H x W");
		int th, tw;
		if (L->ph == PAD_SAME) {
			th = L->kh - 1;
			tw = L->kw - 1;
			L->ph = th / 2;
			L->pw = tw / 2;
		} else if (L->ph == PAD_VALID) {
			th = tw = 0;
			L->ph = L->pw = 0;
		} else {
			th = 2 * L->ph;
			tw = 2 * L->pw;
		}
		o.c = L->units;
		o.h = window_out(L->in.h, L->kh, L->sh, th);
		o.w = window_out(L->in.w, L->kw, L->sw, tw);
		if (o.h <= 0 || o.w <= 0)
			return shape_error(e, L, "the %dx%d kernel does not fit", L->kh, L->kw);
		L->wn = (size_t)L->units * L->in.c * L->kh * L->kw;
		L->bn = L->nobias ? 0 : (size_t)L->units;
		break;
	}
	case DP_LAYER_MAXPOOL:
	case DP_LAYER_AVGPOOL:
		if (L->in.rank != 3)
			return shape_error(e, L, "pooling needs C x H x W");
		if (L->global) {
			L->kh = L->sh = L->in.h;
			L->kw = L->sw = L->in.w;
		}
		o.h = window_out(L->in.h, L->kh, L->sh, 2 * L->ph);
		o.w = window_out(L->in.w, L->kw, L->sw, 2 * L->pw);
		if (o.h <= 0 || o.w <= 0)
			return shape_error(e, L, "the %dx%d window does not fit", L->kh, L->kw);
		break;
	case DP_LAYER_FLATTEN:
		o.rank = 1;
		o.c = (int)insz;
		o.h = o.w = 1;
		break;
	case DP_LAYER_BATCHNORM:
		L->wn = L->bn = (size_t)L->in.c;
		break;
	case DP_LAYER_ADD:
		if (!same_shape(&L->in, o2))
			return dp_seterr(e, DP_EARG,
					 "model: block %s: its items give %s but %s %s: %s", L->name,
					 dp_shape_format(&L->in, a, sizeof a),
					 L->shortcut ? "its shortcut gives" : "its input is",
					 dp_shape_format(o2, b, sizeof b),
					 L->shortcut ? "make them agree"
						     : "add a projection shortcut, like res(...|conv:"
						       "C:1:STRIDE:bias=0,bn)");
		break;
	default:
		break;
	}
	L->out = o;
	if (dp_shape_size(&o) > MAX_VALUES)
		return shape_error(e, L, "an output of %zu values is too large (at most %d)",
				   dp_shape_size(&o), MAX_VALUES);
	return DP_OK;
}

static void free_layers(dp_model *m)
{
	for (int i = 0; i < m->n; i++) {
		free(m->l[i].text);
		free(m->l[i].name);
	}
	free(m->l);
}

/* ---- the graph: items, blocks, names ---------------------------------------- */

/* A parsed item: a layer, or a block of items. */
typedef struct gitem gitem;
struct gitem {
	int type;     /* 0 a layer, 'r' res(...), 's' seq(...) */
	char *name;   /* NAME=, or NULL */
	char *text;   /* a layer: its text; res: the activation after the sum, or NULL */
	gitem *kid;    /* the block's items */
	int nkid;
	gitem *sc;     /* res: the shortcut's items */
	int nsc, hassc;
};

static void items_free(gitem *it, int n)
{
	for (int i = 0; i < n; i++) {
		free(it[i].name);
		free(it[i].text);
		items_free(it[i].kid, it[i].nkid);
		items_free(it[i].sc, it[i].nsc);
	}
	free(it);
}

#define MAX_DEPTH 16
#define MAX_PATH 72 /* a path and ".num_batches_tracked" fit dp_tensor_info.name */

typedef struct parser {
	const char *spec, *p;
	dp_err *e;
	int depth;
	int items; /* layers so far */
} parser;

static void skip_space(parser *P)
{
	for (;;) {
		while (isspace((unsigned char)*P->p))
			P->p++;
		if (*P->p != '#')
			return;
		while (*P->p && *P->p != '\n')
			P->p++;
	}
}

static int parse_list(parser *P, gitem **out, int *nout, const char *path);

/* "layer1.0" of "layer1" and "0" ("0" at the top). */
static int join_path(char *dst, const char *path, const char *name, dp_err *e)
{
	int n = snprintf(dst, MAX_PATH + 1, "%s%s%s", path, *path ? "." : "", name);
	if (n > MAX_PATH)
		return dp_seterr(e, DP_EARG, "model: the name %s%s%s is longer than %d characters",
				 path, *path ? "." : "", name, MAX_PATH);
	return DP_OK;
}

static int parse_item_tree(parser *P, gitem *it, int idx, const char *path)
{
	dp_err *e = P->e;
	char self[MAX_PATH + 1], num[16];
	skip_space(P);
	const char *q = P->p;
	if (isalpha((unsigned char)*q) || *q == '_') {
		while (isalnum((unsigned char)*q) || *q == '_')
			q++;
		if (*q == '=') {
			if (!(it->name = strndup(P->p, (size_t)(q - P->p))))
				return dp_seterr(e, DP_ENOMEM, "out of memory");
			P->p = q + 1;
		}
	}
	snprintf(num, sizeof num, "%d", idx);
	if (join_path(self, path, it->name ? it->name : num, e) < 0)
		return DP_EARG;
	skip_space(P);
	if (!strncmp(P->p, "res(", 4) || !strncmp(P->p, "seq(", 4)) {
		it->type = P->p[0] == 'r' ? 'r' : 's';
		if (++P->depth > MAX_DEPTH)
			return dp_seterr(e, DP_EARG, "model: blocks nested more than %d deep",
					 MAX_DEPTH);
		P->p += 4;
		int rc = parse_list(P, &it->kid, &it->nkid, self);
		if (rc < 0)
			return rc;
		if (*P->p == '|' && it->type == 'r') {
			char sc[MAX_PATH + 1];
			P->p++;
			it->hassc = 1;
			if (join_path(sc, self, "downsample", e) < 0 ||
			    (rc = parse_list(P, &it->sc, &it->nsc, sc)) < 0)
				return rc < 0 ? rc : DP_EARG;
		}
		if (*P->p != ')')
			return dp_seterr(e, DP_EARG, "model: block %s: want ')' at byte %zu, not %s",
					 self, (size_t)(P->p - P->spec),
					 *P->p == '|' ? "'|' (a shortcut is for res(...) only)"
						      : "the end");
		P->p++;
		P->depth--;
		if (it->type == 'r' && *P->p == ':') {
			const char *a = ++P->p;
			while (isalpha((unsigned char)*P->p))
				P->p++;
			it->text = strndup(a, (size_t)(P->p - a));
			if (!it->text)
				return dp_seterr(e, DP_ENOMEM, "out of memory");
			if (strcmp(it->text, "relu") && strcmp(it->text, "tanh") &&
			    strcmp(it->text, "sigmoid"))
				return dp_seterr(e, DP_EARG,
						 "model: block %s: '%s' after res(...): want :relu, "
						 ":tanh or :sigmoid",
						 self, it->text);
		}
		skip_space(P);
		return DP_OK;
	}
	const char *a = P->p;
	while (*P->p && !strchr(",|()#", *P->p))
		P->p++;
	const char *b = P->p;
	while (b > a && isspace((unsigned char)b[-1]))
		b--;
	if (*P->p == '(')
		return dp_seterr(e, DP_EARG, "model: item %s '%.*s(': unknown block (res, seq)",
				 self, (int)(P->p - a), a);
	if (a == b)
		return dp_seterr(e, DP_EARG, "model: item %s is empty", self);
	if (++P->items > 1000)
		return dp_seterr(e, DP_EARG, "model: more than 1000 items");
	it->type = 0;
	if (!(it->text = strndup(a, (size_t)(b - a))))
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	skip_space(P);
	return DP_OK;
}

/* Items separated by ',' up to ')', '|' or the end. */
static int parse_list(parser *P, gitem **out, int *nout, const char *path)
{
	int cap = 0, n = 0;
	gitem *it = NULL;
	for (;;) {
		if (n == cap) {
			cap = cap ? 2 * cap : 8;
			gitem *t = realloc(it, (size_t)cap * sizeof *t);
			if (!t) {
				*out = it;
				*nout = n;
				return dp_seterr(P->e, DP_ENOMEM, "out of memory");
			}
			it = t;
		}
		memset(&it[n], 0, sizeof it[n]);
		n++;
		*out = it;
		*nout = n;
		int rc = parse_item_tree(P, &it[n - 1], n - 1, path);
		if (rc < 0)
			return rc;
		for (int j = 0; j < n - 1 && it[n - 1].name; j++)
			if (it[j].name && !strcmp(it[j].name, it[n - 1].name))
				return dp_seterr(P->e, DP_EARG,
						 "model: two items named '%s'%s%s", it[j].name,
						 *path ? " in " : "", path);
		if (*P->p != ',')
			return DP_OK;
		P->p++;
	}
}

/* The spec of items, one line, as parsed (spaces and comments gone). */
static void items_text(dp_buf *b, const gitem *it, int n)
{
	for (int i = 0; i < n; i++) {
		if (i)
			dp_buf_addstr(b, ",");
		if (it[i].name)
			dp_buf_printf(b, "%s=", it[i].name);
		if (!it[i].type) {
			dp_buf_addstr(b, it[i].text);
			continue;
		}
		dp_buf_addstr(b, it[i].type == 'r' ? "res(" : "seq(");
		items_text(b, it[i].kid, it[i].nkid);
		if (it[i].hassc) {
			dp_buf_addstr(b, "|");
			items_text(b, it[i].sc, it[i].nsc);
		}
		dp_buf_addstr(b, ")");
		if (it[i].text)
			dp_buf_printf(b, ":%s", it[i].text);
	}
}

static layer *new_node(dp_model *m, dp_err *e)
{
	if (m->n == m->cap) {
		int cap = m->cap ? 2 * m->cap : 16;
		layer *t = realloc(m->l, (size_t)cap * sizeof *t);
		if (!t) {
			dp_seterr(e, DP_ENOMEM, "out of memory");
			return NULL;
		}
		m->l = t;
		m->cap = cap;
	}
	layer *L = &m->l[m->n++];
	memset(L, 0, sizeof *L);
	L->src = L->src2 = -1;
	return L;
}

/* The items as nodes in the order they run; *cur: the node they read
 * first (-1: the input), then their last. */
static int flatten(dp_model *m, const gitem *it, int n, const char *path, int depth, int *cur,
		   dp_err *e)
{
	for (int k = 0; k < n; k++) {
		char self[MAX_PATH + 1], num[16];
		snprintf(num, sizeof num, "%d", k);
		if (join_path(self, path, it[k].name ? it[k].name : num, e) < 0)
			return DP_EARG;
		int rc, in = *cur;
		if (it[k].type == 's') {
			if ((rc = flatten(m, it[k].kid, it[k].nkid, self, depth + 1, cur, e)) < 0)
				return rc;
			continue;
		}
		int body = in, sc = in;
		if (it[k].type == 'r') {
			char sp[MAX_PATH + 1];
			if ((rc = flatten(m, it[k].kid, it[k].nkid, self, depth + 1, &body, e)) < 0)
				return rc;
			if (it[k].hassc && (join_path(sp, self, "downsample", e) < 0 ||
					    (rc = flatten(m, it[k].sc, it[k].nsc, sp, depth + 1, &sc, e)) < 0))
				return rc < 0 ? rc : DP_EARG;
		}
		layer *L = new_node(m, e);
		if (!L || !(L->name = strdup(self)))
			return L ? dp_seterr(e, DP_ENOMEM, "out of memory") : DP_ENOMEM;
		L->depth = depth;
		if (it[k].type == 'r') {
			const char *act = it[k].text;
			L->kind = DP_LAYER_ADD;
			L->src = body;
			L->src2 = sc;
			L->shortcut = it[k].hassc;
			L->act = !act ? DP_ACT_NONE : !strcmp(act, "relu") ? DP_ACT_RELU
						  : !strcmp(act, "tanh")     ? DP_ACT_TANH
									     : DP_ACT_SIGMOID;
			if (asprintf(&L->text, "+ %s%s%s", it[k].hassc ? "downsample" : "identity",
					act ? ", " : "", act ? act : "") < 0)
				return dp_seterr(e, DP_ENOMEM, "out of memory");
		} else {
			L->src = in;
			if (!(L->text = strdup(it[k].text)))
				return dp_seterr(e, DP_ENOMEM, "out of memory");
			if ((rc = parse_item(L, self, e)) < 0)
				return rc;
		}
		*cur = m->n - 1;
	}
	return DP_OK;
}

/* ---- named architectures --------------------------------------------------- */

/* torchvision's ResNet (v1.5: a bottleneck's stride on its 3x3) for
 * ImageNet, and the CIFAR ResNets of He et al. (2015) with projection
 * shortcuts where the shape changes.  Every convolution without bias and
 * initialised as torchvision does (kaiming_normal_, fan_out). */
static int arch_spec(const char *spec, char **out, dp_err *e)
{
	static const struct {
		const char *name;
		int blocks[4], bottleneck, cifar;
	} arch[] = {
		{"resnet18", {2, 2, 2, 2}, 0, 0},  {"resnet34", {3, 4, 6, 3}, 0, 0},
		{"resnet50", {3, 4, 6, 3}, 1, 0},  {"resnet101", {3, 4, 23, 3}, 1, 0},
		{"resnet152", {3, 8, 36, 3}, 1, 0}, {"resnet20", {3, 3, 3}, 0, 1},
		{"resnet32", {5, 5, 5}, 0, 1},     {"resnet44", {7, 7, 7}, 0, 1},
		{"resnet56", {9, 9, 9}, 0, 1},     {"resnet110", {18, 18, 18}, 0, 1},
	};
	*out = NULL;
	size_t len = strcspn(spec, ":");
	int a = -1;
	for (size_t i = 0; i < sizeof arch / sizeof arch[0]; i++)
		if (strlen(arch[i].name) == len && !strncmp(spec, arch[i].name, len))
			a = (int)i;
	if (a < 0)
		return 0;
	int classes = arch[a].cifar ? 10 : 1000;
	if (spec[len] && (parse_int(spec + len + 1, strlen(spec + len + 1), MAX_UNITS, &classes) < 0 ||
			  classes < 1))
		return dp_seterr(e, DP_EARG, "model: '%s': want %s or %s:CLASSES", spec,
				 arch[a].name, arch[a].name);
	const char *cv = "bias=0:init=he";
	dp_buf b;
	dp_buf_init(&b, 0);
	int cifar = arch[a].cifar, exp = arch[a].bottleneck ? 4 : 1;
	int in = cifar ? 16 : 64, stages = cifar ? 3 : 4;
	if (cifar)
		dp_buf_printf(&b, "conv1=conv:16:3:1:1:%s,bn1=bn,relu", cv);
	else
		dp_buf_printf(&b, "conv1=conv:64:7:2:3:%s,bn1=bn,relu,maxpool=maxpool:3:2:1", cv);
	for (int s = 0; s < stages; s++) {
		int planes = (cifar ? 16 : 64) << s, stride = s ? 2 : 1, outc = planes * exp;
		dp_buf_printf(&b, ",layer%d=seq(", s + 1);
		for (int k = 0; k < arch[a].blocks[s]; k++) {
			int st = k ? 1 : stride;
			dp_buf_addstr(&b, k ? ",res(" : "res(");
			if (exp == 1)
				dp_buf_printf(&b,
					      "conv1=conv:%d:3:%d:1:%s,bn1=bn,relu,"
					      "conv2=conv:%d:3:1:1:%s,bn2=bn",
					      planes, st, cv, planes, cv);
			else
				dp_buf_printf(&b,
					      "conv1=conv:%d:1:%s,bn1=bn,relu,"
					      "conv2=conv:%d:3:%d:1:%s,bn2=bn,relu,"
					      "conv3=conv:%d:1:%s,bn3=bn",
					      planes, cv, planes, st, cv, outc, cv);
			if (st != 1 || in != outc)
				dp_buf_printf(&b, "|conv:%d:1:%d:%s,bn", outc, st, cv);
			dp_buf_addstr(&b, "):relu");
			in = outc;
		}
		dp_buf_addstr(&b, ")");
	}
	dp_buf_printf(&b, ",avgpool=gap,flatten,fc=dense:%d", classes);
	if (!(*out = dp_buf_take(&b)))
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	return 1;
}

int dp_model_named(const char *spec)
{
	char *t = NULL;
	while (isspace((unsigned char)*spec))
		spec++;
	int rc = arch_spec(spec, &t, NULL);
	free(t);
	return rc == 1 ? (strchr(spec, ':') ? 2 : 1) : 0;
}

/* The activation kind an item relu, tanh or sigmoid computes. */
static int act_of(int kind)
{
	return kind == DP_LAYER_RELU ? DP_ACT_RELU : kind == DP_LAYER_TANH ? DP_ACT_TANH
									: DP_ACT_SIGMOID;
}

static int is_act(int kind)
{
	return kind == DP_LAYER_RELU || kind == DP_LAYER_TANH || kind == DP_LAYER_SIGMOID;
}

/* Which outputs need a gradient: a layer's with parameters to train, and
 * every layer's after one. */
static void plan_grads(dp_model *m)
{
	for (int i = 0; i < m->n; i++) {
		layer *L = &m->l[i];
		L->needg = (L->wn && !L->frozen) || (L->src >= 0 && m->l[L->src].needg) ||
			   (L->src2 >= 0 && m->l[L->src2].needg);
	}
}

/* Shapes, parameters, and what each layer may compute in place. */
static int plan(dp_model *m, dp_err *e)
{
	for (int i = 0; i < m->n; i++) {
		layer *L = &m->l[i];
		if (L->src >= 0)
			m->l[L->src].uses++;
		if (L->src2 >= 0)
			m->l[L->src2].uses++;
	}
	for (int i = 0; i < m->n; i++) {
		layer *L = &m->l[i];
		L->in = L->src >= 0 ? m->l[L->src].out : m->in;
		dp_shape o2 = L->src2 >= 0 ? m->l[L->src2].out : m->in;
		int rc = plan_layer(L, &o2, e);
		if (rc < 0)
			return rc;
		if (L->kind == DP_LAYER_SOFTMAX && (i != m->n - 1 || L->depth || m->loss != DP_LOSS_XENT))
			return dp_seterr(e, DP_EARG,
					 "model: layer %s (softmax): softmax is allowed only as the last "
					 "item, with the xent loss (which applies it)",
					 L->name);
		if (L->kind == DP_LAYER_AVGPOOL && (L->ph || L->pw))
			return dp_seterr(e, DP_EARG, "model: layer %s (%s): avgpool takes no padding",
					 L->name, L->text);
		/* an activation right after a dense, conv or sum is computed by it;
		 * after a batchnorm or pooling, in its output's memory */
		if (is_act(L->kind) && L->src == i - 1 && i > 0 && m->l[i - 1].uses == 1) {
			layer *P = &m->l[i - 1];
			if ((P->kind == DP_LAYER_DENSE || P->kind == DP_LAYER_CONV ||
			     P->kind == DP_LAYER_ADD) && !P->act) {
				P->act = act_of(L->kind);
				L->fused = 1;
			} else if (P->kind == DP_LAYER_BATCHNORM || P->kind == DP_LAYER_MAXPOOL ||
				   P->kind == DP_LAYER_AVGPOOL) {
				L->inplace = 1;
			}
		}
		/* a residual sum in the memory of its items' last output, when only
		 * it reads that and no backward pass needs it (a batchnorm's) */
		if (L->kind == DP_LAYER_ADD && L->src >= 0 && L->src != L->src2 &&
		    m->l[L->src].uses == 1 && (m->l[L->src].kind == DP_LAYER_BATCHNORM ||
					      m->l[L->src].kind == DP_LAYER_MAXPOOL ||
					      m->l[L->src].kind == DP_LAYER_AVGPOOL))
			L->inplace = 1;
		if (L->wn) {
			L->woff = m->nparams;
			L->boff = L->woff + L->wn;
			m->nparams += L->wn + L->bn;
			if (m->first_param < 0)
				m->first_param = i;
		}
		if (L->kind == DP_LAYER_BATCHNORM) {
			L->roff = m->nbuffers;
			m->nbuffers += 2 * (size_t)L->in.c;
			if (L->in.c > m->maxc)
				m->maxc = L->in.c;
		}
	}
	plan_grads(m);
	dp_shape cur = m->l[m->n - 1].out;
	if (m->loss == DP_LOSS_XENT && (cur.rank != 1 || cur.c < 2)) {
		char sb[64];
		return dp_seterr(e, DP_EARG,
				 "model: the output is %s: the xent loss needs a vector of at least 2 "
				 "classes (end with dense:CLASSES)",
				 dp_shape_format(&cur, sb, sizeof sb));
	}
	if (m->loss != DP_LOSS_XENT && m->loss != DP_LOSS_MSE)
		return dp_seterr(e, DP_EARG, "model: unknown loss");
	return DP_OK;
}

dp_model *dp_model_new(const char *spec, const dp_shape *in, int loss, dp_err *e)
{
	dp_model *m = calloc(1, sizeof *m);
	char *arch = NULL;
	gitem *top = NULL;
	int ntop = 0, rc;
	if (!m) {
		dp_seterr(e, DP_ENOMEM, "out of memory");
		return NULL;
	}
	m->in = *in;
	m->loss = loss;
	m->first_param = -1;
	while (isspace((unsigned char)*spec))
		spec++;
	if ((rc = arch_spec(spec, &arch, e)) < 0)
		goto fail;
	parser P = {arch ? arch : spec, arch ? arch : spec, e, 0, 0};
	if ((rc = parse_list(&P, &top, &ntop, "")) < 0)
		goto fail;
	if (*P.p) {
		rc = dp_seterr(e, DP_EARG, "model: unexpected '%c' at byte %zu", *P.p,
			       (size_t)(P.p - P.spec));
		goto fail;
	}
	if (arch) {
		size_t len = strlen(spec);
		while (len && isspace((unsigned char)spec[len - 1]))
			len--;
		m->spec = strndup(spec, len);
	} else {
		dp_buf b;
		dp_buf_init(&b, 0);
		items_text(&b, top, ntop);
		m->spec = dp_buf_take(&b);
	}
	if (!m->spec) {
		rc = dp_seterr(e, DP_ENOMEM, "out of memory");
		goto fail;
	}
	int cur = -1;
	if ((rc = flatten(m, top, ntop, "", 0, &cur, e)) < 0 || (rc = plan(m, e)) < 0)
		goto fail;
	items_free(top, ntop);
	free(arch);
	return m;
fail:
	items_free(top, ntop);
	free(arch);
	free_layers(m);
	free(m->spec);
	free(m);
	return NULL;
}

static void unbind(dp_model *m)
{
	if (!m->be)
		return;
	const dp_backend *be = m->be;
	for (int i = 0; i < m->n; i++) {
		be->free(m->ctx, m->l[i].ybuf);
		be->free(m->ctx, m->l[i].aux);
		m->l[i].ybuf = NULL;
		m->l[i].aux = NULL;
	}
	for (int i = 0; i < m->ngbuf; i++)
		be->free(m->ctx, m->gbuf[i]);
	free(m->gbuf);
	free(m->gslot);
	free(m->hsums);
	m->gbuf = NULL;
	m->gslot = NULL;
	m->hsums = NULL;
	m->ngbuf = 0;
	void *bufs[] = {m->params, m->grads, m->bufs, m->xbuf, m->ybuf,
			m->ws,     m->stats, m->prob, m->sums};
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		be->free(m->ctx, bufs[i]);
	m->params = m->grads = m->bufs = m->xbuf = m->prob = NULL;
	m->ybuf = m->ws = NULL;
	m->stats = m->sums = NULL;
	m->be = NULL;
}

void dp_model_free(dp_model *m)
{
	if (!m)
		return;
	unbind(m);
	free_layers(m);
	free(m->spec);
	free(m);
}

const char *dp_model_spec(const dp_model *m) { return m->spec; }
dp_shape dp_model_input(const dp_model *m) { return m->in; }
dp_shape dp_model_output_shape(const dp_model *m) { return m->l[m->n - 1].out; }
int dp_model_loss_kind(const dp_model *m) { return m->loss; }
size_t dp_model_in_size(const dp_model *m) { return dp_shape_size(&m->in); }
size_t dp_model_out_size(const dp_model *m) { return dp_shape_size(&m->l[m->n - 1].out); }
size_t dp_model_nparams(const dp_model *m) { return m->nparams; }
size_t dp_model_nbuffers(const dp_model *m) { return m->nbuffers; }
int dp_model_nlayers(const dp_model *m) { return m->n; }
size_t dp_model_max_batch(const dp_model *m) { return m->max_batch; }

const dp_backend *dp_model_backend(const dp_model *m, dp_bectx **ctx)
{
	if (ctx)
		*ctx = m->ctx;
	return m->be;
}
float *dp_model_params(dp_model *m) { return m->params; }
float *dp_model_grads(dp_model *m) { return m->grads; }
float *dp_model_buffers(dp_model *m) { return m->bufs; }
const float *dp_model_output(const dp_model *m) { return m->out; }

int dp_model_same(const dp_model *a, const dp_model *b)
{
	if (a->n != b->n || !same_shape(&a->in, &b->in) || a->loss != b->loss)
		return 0;
	for (int i = 0; i < a->n; i++) {
		const layer *x = &a->l[i], *y = &b->l[i];
		if (x->kind != y->kind || !same_shape(&x->out, &y->out) || x->units != y->units ||
		    x->kh != y->kh || x->kw != y->kw || x->sh != y->sh || x->sw != y->sw ||
		    x->ph != y->ph || x->pw != y->pw || x->p != y->p || x->eps != y->eps ||
		    x->momentum != y->momentum || x->src != y->src || x->src2 != y->src2 ||
		    x->nobias != y->nobias || (x->kind == DP_LAYER_ADD && x->act != y->act) ||
		    strcmp(x->name, y->name))
			return 0;
	}
	return 1;
}

void dp_model_layer(const dp_model *m, int i, dp_layer_info *out)
{
	const layer *L = &m->l[i];
	out->kind = L->kind;
	out->kind_name = kind_names[L->kind];
	out->text = L->text;
	out->in = L->in;
	out->out = L->out;
	out->nparams = L->wn + L->bn;
	out->param_off = L->woff;
	out->fused = L->fused;
	out->name = L->name;
	out->depth = L->depth;
	out->src = L->src;
	out->src2 = L->src2;
	out->frozen = L->frozen;
}

/* The tensors of layer L: weight and bias (or the weight alone), and a
 * batchnorm's three more. */
static int tensors_of(const layer *L)
{
	return L->kind == DP_LAYER_BATCHNORM ? 5 : L->wn ? 1 + (L->bn > 0) : 0;
}

int dp_model_ntensors(const dp_model *m)
{
	int n = 0;
	for (int i = 0; i < m->n; i++)
		n += tensors_of(&m->l[i]);
	return n;
}

void dp_model_tensor(const dp_model *m, int idx, dp_tensor_info *t)
{
	memset(t, 0, sizeof *t);
	for (int i = 0; i < m->n; i++) {
		const layer *L = &m->l[i];
		int nt = tensors_of(L);
		if (idx >= nt) {
			idx -= nt;
			continue;
		}
		t->layer = i;
		t->role = DP_TENSOR_PARAM;
		static const char *const names[] = {"weight", "bias", "running_mean", "running_var",
						    "num_batches_tracked"};
		snprintf(t->name, sizeof t->name, "%s.%s", L->name, names[idx]);
		switch (idx) {
		case 0:
			t->off = L->woff;
			t->count = L->wn;
			if (L->kind == DP_LAYER_DENSE) {
				t->ndim = 2;
				t->shape[0] = L->units;
				t->shape[1] = (int64_t)dp_shape_size(&L->in);
			} else if (L->kind == DP_LAYER_CONV) {
				t->ndim = 4;
				t->shape[0] = L->units;
				t->shape[1] = L->in.c;
				t->shape[2] = L->kh;
				t->shape[3] = L->kw;
			} else {
				t->ndim = 1;
				t->shape[0] = (int64_t)L->wn;
			}
			break;
		case 1:
			t->off = L->boff;
			t->count = L->bn;
			t->ndim = 1;
			t->shape[0] = (int64_t)L->bn;
			break;
		case 2:
		case 3:
			t->role = DP_TENSOR_BUFFER;
			t->off = L->roff + (idx == 3 ? (size_t)L->in.c : 0);
			t->count = (size_t)L->in.c;
			t->ndim = 1;
			t->shape[0] = L->in.c;
			break;
		case 4:
			t->role = DP_TENSOR_COUNTER;
			t->count = 1;
			t->ndim = 0;
			break;
		}
		return;
	}
}

int64_t *dp_model_counter(dp_model *m, int li)
{
	return li >= 0 && li < m->n ? &m->l[li].tracked : NULL;
}

/* ---- binding ------------------------------------------------------------ */

/* Does layer i produce its output in a buffer of its own? */
static int needs_ybuf(const dp_model *m, int i)
{
	const layer *L = &m->l[i];
	switch (L->kind) {
	case DP_LAYER_FLATTEN:
	case DP_LAYER_SOFTMAX:
		return 0;
	case DP_LAYER_RELU:
	case DP_LAYER_TANH:
	case DP_LAYER_SIGMOID:
	case DP_LAYER_ADD:
		return !L->fused && !L->inplace;
	default:
		return 1;
	}
}

static int walk(dp_model *m, size_t n, int exec, dp_grad_hook hook, void *hook_ctx, dp_err *e);

int dp_model_bind(dp_model *m, const dp_backend *be, dp_bectx *ctx, size_t max_batch, dp_err *e)
{
	unbind(m);
	if (max_batch == 0 || max_batch > (1u << 24))
		return dp_seterr(e, DP_EARG, "batch size %zu out of range", max_batch);
	m->be = be;
	m->ctx = ctx;
	m->max_batch = max_batch;
	size_t nb = max_batch, maxact = dp_shape_size(&m->in), ws = 0;
	size_t outsz = dp_model_out_size(m);
#define ALLOC(dst, bytes)                                                                          \
	do {                                                                                       \
		if (!((dst) = be->alloc(ctx, (bytes))))                                            \
			goto nomem;                                                                \
	} while (0)
	for (int i = 0; i < m->n; i++) {
		layer *L = &m->l[i];
		size_t osz = dp_shape_size(&L->out);
		if (osz > maxact)
			maxact = osz;
		if (needs_ybuf(m, i))
			ALLOC(L->ybuf, nb * osz * sizeof(float));
		if (L->kind == DP_LAYER_MAXPOOL)
			ALLOC(L->aux, nb * osz * sizeof(int32_t));
		if (L->kind == DP_LAYER_BATCHNORM)
			ALLOC(L->aux, 2 * (size_t)L->in.c * sizeof(float));
		if (L->kind == DP_LAYER_CONV) {
			dp_conv2d g = {(int)nb,  L->in.c, L->in.h, L->in.w, L->units, L->out.h, L->out.w,
				       L->kh,   L->kw,   L->sh,   L->sw,   L->ph,    L->pw};
			size_t w = be->conv_ws(ctx, &g);
			if (w > ws)
				ws = w;
		}
	}
	/* the gradient buffers the backward pass needs at most (nothing frozen) */
	if (!(m->gslot = malloc((size_t)m->n * sizeof *m->gslot)))
		goto nomem;
	int *frozen = malloc((size_t)m->n * sizeof *frozen);
	if (!frozen)
		goto nomem;
	for (int i = 0; i < m->n; i++) {
		frozen[i] = m->l[i].frozen;
		m->l[i].frozen = 0;
	}
	plan_grads(m);
	int most = walk(m, 0, 0, NULL, NULL, NULL);
	for (int i = 0; i < m->n; i++)
		m->l[i].frozen = frozen[i];
	free(frozen);
	plan_grads(m);
	if (!(m->gbuf = calloc((size_t)most, sizeof *m->gbuf)))
		goto nomem;
	m->ngbuf = most;
	for (int i = 0; i < most; i++)
		ALLOC(m->gbuf[i], nb * maxact * sizeof(float));
	if (m->maxc) {
		ALLOC(m->sums, 2 * (size_t)m->maxc * sizeof(double));
		if (!(m->hsums = malloc((2 * (size_t)m->maxc + 1) * sizeof(double))))
			goto nomem;
	}
	ALLOC(m->params, (m->nparams ? m->nparams : 1) * sizeof(float));
	ALLOC(m->grads, (m->nparams ? m->nparams : 1) * sizeof(float));
	ALLOC(m->bufs, (m->nbuffers ? m->nbuffers : 1) * sizeof(float));
	ALLOC(m->xbuf, nb * dp_shape_size(&m->in) * sizeof(float));
	ALLOC(m->ybuf, nb * (outsz > 1 ? outsz : 1) * sizeof(float));
	ALLOC(m->ws, ws ? ws : 64);
	ALLOC(m->stats, 2 * sizeof(double));
	ALLOC(m->prob, nb * outsz * sizeof(float));
#undef ALLOC
	be->fill(ctx, m->params, 0, m->nparams);
	be->fill(ctx, m->grads, 0, m->nparams);
	if (m->nbuffers)
		be->fill(ctx, m->bufs, 0, m->nbuffers);
	return DP_OK;
nomem:
	unbind(m);
	return dp_seterr(e, DP_ENOMEM, "out of memory for a model of %zu parameters with batch %zu",
			 m->nparams, max_batch);
}

/* A standard normal deviate from two of the stream's numbers (Box-Muller). */
static double normal_at(uint64_t key, size_t j)
{
	double u1 = dp_rng_unit(dp_rng_at(key, 2 * (uint64_t)j)),
	       u2 = dp_rng_unit(dp_rng_at(key, 2 * (uint64_t)j + 1));
	return sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2);
}

void dp_model_init(dp_model *m, uint64_t seed)
{
	float *host = malloc((m->nparams + m->nbuffers + 1) * sizeof(float));
	if (!host)
		return;
	float *hb = host + m->nparams;
	for (int i = 0; i < m->n; i++) {
		layer *L = &m->l[i];
		if (L->kind == DP_LAYER_BATCHNORM) {
			for (size_t j = 0; j < L->wn; j++) {
				host[L->woff + j] = 1;
				host[L->boff + j] = 0;
				hb[L->roff + j] = 0;
				hb[L->roff + L->wn + j] = 1;
			}
			L->tracked = 0;
			continue;
		}
		if (!L->wn)
			continue;
		uint64_t key = dp_rng_key(seed, 2, (uint64_t[]){DP_RNG_INIT, (uint64_t)i});
		if (L->he) { /* kaiming_normal_(mode="fan_out", nonlinearity="relu"), bias 0 */
			double sd = sqrt(2.0 / ((double)L->units * L->kh * L->kw));
			for (size_t j = 0; j < L->wn; j++)
				host[L->woff + j] = (float)(sd * normal_at(key, j));
			for (size_t j = 0; j < L->bn; j++)
				host[L->boff + j] = 0;
			continue;
		}
		size_t fan_in = L->wn / (size_t)L->units;
		float bound = (float)(1.0 / sqrt((double)fan_in));
		for (size_t j = 0; j < L->wn + L->bn; j++)
			host[L->woff + j] = (2 * dp_rng_unit(dp_rng_at(key, j)) - 1) * bound;
	}
	m->be->upload(m->ctx, m->params, host, m->nparams * sizeof(float));
	if (m->nbuffers)
		m->be->upload(m->ctx, m->bufs, hb, m->nbuffers * sizeof(float));
	free(host);
}

/* ---- passes --------------------------------------------------------------- */

static dp_conv2d conv_geom(const layer *L, size_t n)
{
	dp_conv2d g = {(int)n,   L->in.c, L->in.h, L->in.w, L->units, L->out.h, L->out.w,
		       L->kh,    L->kw,   L->sh,   L->sw,   L->ph,    L->pw};
	return g;
}

static dp_pool2d pool_geom(const layer *L, size_t n)
{
	dp_pool2d g = {(int)n, L->in.c, L->in.h, L->in.w, L->out.h, L->out.w,
		       L->kh,  L->kw,   L->sh,   L->sw,   L->ph,    L->pw};
	return g;
}

static dp_bnorm bnorm_geom(const layer *L, size_t n)
{
	dp_bnorm g = {(int)n,      L->in.c,  L->in.rank == 3 ? L->in.h * L->in.w : 1,
		      L->eps,      L->momentum, L->count, L->frozen};
	return g;
}

static dp_dropout dropout_of(const dp_model *m, int i, size_t n, const dp_pass *p)
{
	const layer *L = &m->l[i];
	dp_dropout d;
	d.key = dp_rng_key(p->seed, 3, (uint64_t[]){DP_RNG_DROPOUT, p->step, (uint64_t)i});
	d.sample0 = p->sample0;
	d.per_sample = dp_shape_size(&L->in);
	double t = (double)L->p * 4294967296.0;
	d.threshold = t >= 4294967295.0 ? 0xffffffffu : (uint32_t)t;
	d.scale = 1.0f / (1.0f - L->p);
	return d;
}

/* --sync-bn: v (dev, k doubles) summed over the workers, with the count
 * `*count` of this one (NULL: none).  The sums stay in m->hsums. */
static int sync_sums(dp_model *m, double *v, int k, double *count, dp_err *e)
{
	const dp_backend *be = m->be;
	if (v)
		be->download(m->ctx, m->hsums, v, (size_t)k * sizeof(double));
	else
		memset(m->hsums, 0, (size_t)k * sizeof(double));
	int rc = be->sync(m->ctx, e);
	if (rc < 0)
		return rc;
	if (count)
		m->hsums[k] = *count;
	if ((rc = m->sync(m->sync_ctx, m->hsums, (size_t)k + (count != NULL), e)) < 0)
		return rc;
	if (count)
		*count = m->hsums[k];
	if (v)
		be->upload(m->ctx, v, m->hsums, (size_t)k * sizeof(double));
	return DP_OK;
}

/* Is batchnorm layer L's training forward synchronised? */
static int bn_synced(const dp_model *m, const layer *L)
{
	return m->sync && L->kind == DP_LAYER_BATCHNORM && !L->frozen;
}

int dp_model_forward(dp_model *m, const float *x, size_t n, const dp_pass *p, dp_err *e)
{
	if (!m->be)
		return dp_seterr(e, DP_EARG, "model not bound to a backend");
	if (n == 0 || n > m->max_batch)
		return dp_seterr(e, DP_EARG, "batch of %zu samples: the model takes 1 to %zu", n,
				 m->max_batch);
	const dp_backend *be = m->be;
	dp_bectx *c = m->ctx;
	const float *in = be->stage(c, m->xbuf, x, n * dp_shape_size(&m->in) * sizeof(float));
	int train = p && p->train;
	for (int i = 0; i < m->n; i++) {
		layer *L = &m->l[i];
		float *y = L->ybuf;
		const float *cur = L->src >= 0 ? m->l[L->src].y : in;
		int isz = (int)dp_shape_size(&L->in), out = (int)dp_shape_size(&L->out);
		L->x = cur;
		switch (L->kind) {
		case DP_LAYER_DENSE:
			be->dense_fwd(c, (int)n, isz, out, cur, m->params + L->woff,
				      L->bn ? m->params + L->boff : NULL, y, L->act);
			break;
		case DP_LAYER_CONV: {
			dp_conv2d g = conv_geom(L, n);
			be->conv_fwd(c, &g, cur, m->params + L->woff, L->bn ? m->params + L->boff : NULL,
				     y, L->act, m->ws);
			break;
		}
		case DP_LAYER_MAXPOOL: {
			dp_pool2d g = pool_geom(L, n);
			be->maxpool_fwd(c, &g, cur, y, L->aux);
			break;
		}
		case DP_LAYER_AVGPOOL: {
			dp_pool2d g = pool_geom(L, n);
			be->avgpool_fwd(c, &g, cur, y);
			break;
		}
		case DP_LAYER_DROPOUT:
			if (train && L->p > 0) {
				dp_dropout d = dropout_of(m, i, n, p);
				be->dropout_fwd(c, &d, (int)n, cur, y);
			} else {
				y = (float *)cur;
			}
			break;
		case DP_LAYER_RELU:
		case DP_LAYER_TANH:
		case DP_LAYER_SIGMOID:
			if (L->fused)
				y = (float *)cur;
			else if (L->inplace)
				be->act_fwd(c, act_of(L->kind), n * (size_t)isz, cur, y = (float *)cur);
			else
				be->act_fwd(c, act_of(L->kind), n * (size_t)isz, cur, y);
			break;
		case DP_LAYER_BATCHNORM: {
			int t = train && !L->frozen;
			dp_bnorm g = bnorm_geom(L, n);
			const double *sums = NULL;
			if (t && bn_synced(m, L)) {
				double count = (double)n * g.hw;
				be->bnorm_sums(c, &g, cur, m->sums);
				int rc = sync_sums(m, m->sums, 2 * g.c, &count, e);
				if (rc < 0)
					return rc;
				L->count = g.count = count;
				sums = m->sums;
			}
			be->bnorm_fwd(c, &g, t, cur, m->params + L->woff, m->params + L->boff,
				      m->bufs + L->roff, m->bufs + L->roff + L->in.c, sums, L->aux, y);
			if (t)
				L->tracked++;
			break;
		}
		case DP_LAYER_ADD: {
			const float *b = L->src2 >= 0 ? m->l[L->src2].y : in;
			if (L->inplace)
				y = (float *)cur;
			be->add(c, n * (size_t)out, cur, b, y, L->act);
			break;
		}
		default: /* flatten, softmax (applied by the loss or predict) */
			y = (float *)cur;
			break;
		}
		L->y = y;
	}
	m->out = m->l[m->n - 1].y;
	m->last_n = n;
	m->last_train = train;
	if (p)
		m->last_pass = *p;
	m->dout = NULL;
	return DP_OK;
}

int dp_model_loss(dp_model *m, const void *y, size_t n, float scale, int want_grad,
		  double stats[2], dp_err *e)
{
	if (!m->out || n != m->last_n)
		return dp_seterr(e, DP_EARG, "loss: no forward pass of %zu samples", n);
	const dp_backend *be = m->be;
	int k = (int)dp_model_out_size(m);
	float *dout = want_grad ? m->gbuf[0] : NULL;
	if (m->loss == DP_LOSS_XENT) {
		const int32_t *lab = y;
		for (size_t i = 0; i < n; i++)
			if (lab[i] < 0 || lab[i] >= k)
				return dp_seterr(e, DP_EDATA, "sample %zu: label %d out of range 0..%d",
						 i, lab[i], k - 1);
		const void *dl = be->stage(m->ctx, m->ybuf, y, n * sizeof(int32_t));
		be->xent(m->ctx, (int)n, k, m->out, dl, m->smooth, scale, dout, m->stats);
	} else {
		const void *dt = be->stage(m->ctx, m->ybuf, y, n * (size_t)k * sizeof(float));
		be->mse(m->ctx, (int)n, k, m->out, dt, scale, dout, m->stats);
	}
	be->download(m->ctx, stats, m->stats, 2 * sizeof(double));
	int rc = be->sync(m->ctx, e); /* a device fault shows here, once a step */
	if (rc < 0)
		return rc;
	m->dout = dout;
	return DP_OK;
}

/* The backward pass's gradient buffers: a bit each in *busy. */
static int take(uint64_t *busy, int *most)
{
	int s = 0;
	while (*busy & (1ull << s))
		s++;
	*busy |= 1ull << s;
	if (s + 1 > *most)
		*most = s + 1;
	return s;
}

/* Hand buffer t, the gradient from one reader of node src, to src: it
 * becomes src's gradient, or is added to what other readers gave. */
static void deliver(dp_model *m, size_t n, int exec, int src, int t, uint64_t *busy)
{
	int *gs = m->gslot;
	if (gs[src] < 0) {
		gs[src] = t;
		return;
	}
	if (exec)
		m->be->add(m->ctx, n * dp_shape_size(&m->l[src].out), m->gbuf[gs[src]], m->gbuf[t],
			   m->gbuf[gs[src]], DP_ACT_NONE);
	*busy &= ~(1ull << t);
}

/* The backward pass, last layer first (exec 0: only count the gradient
 * buffers it takes, which is returned; exec 2: only the sums of --sync-bn
 * and the hooks, as a worker without samples makes them).  Each layer's output gradient is
 * in buffer gslot[i]; a layer working in place hands its buffer down,
 * others write a fresh one; where two layers read one output (a residual
 * block's input) their gradients are added. */
static int walk(dp_model *m, size_t n, int exec, dp_grad_hook hook, void *hook_ctx, dp_err *e)
{
	const dp_backend *be = m->be;
	dp_bectx *c = m->ctx;
	int *gs = m->gslot, most = 1, rc;
	uint64_t busy = 1; /* buffer 0: the loss's gradient */
	for (int i = 0; i < m->n; i++)
		gs[i] = -1;
	gs[m->n - 1] = 0;
	for (int i = m->n - 1; i >= 0; i--) {
		layer *L = &m->l[i];
		int s = gs[i];
		if (exec == 2) {
			if (bn_synced(m, L) && L->needg && L->src >= 0 && m->l[L->src].needg &&
			    (rc = sync_sums(m, NULL, 2 * L->in.c, NULL, e)) < 0)
				return rc;
		} else if (L->needg && s >= 0) {
			float *dy = exec ? m->gbuf[s] : NULL;
			int want = L->src >= 0 && m->l[L->src].needg, t = -1;
			int isz = (int)dp_shape_size(&L->in), out = (int)dp_shape_size(&L->out);
			float *dw = exec ? m->grads + L->woff : NULL;
			float *db = exec && L->bn ? m->grads + L->boff : NULL;
			const float *w = exec ? m->params + L->woff : NULL;
			switch (L->kind) {
			case DP_LAYER_DENSE:
			case DP_LAYER_CONV:
			case DP_LAYER_MAXPOOL:
			case DP_LAYER_AVGPOOL:
			case DP_LAYER_BATCHNORM: {
				if (want)
					t = take(&busy, &most);
				float *dx = exec && want ? m->gbuf[t] : NULL;
				if (!exec)
					;
				else if (L->kind == DP_LAYER_DENSE)
					be->dense_bwd(c, (int)n, isz, out, L->x, w, L->y, dy, dx, dw, db,
						      L->act);
				else if (L->kind == DP_LAYER_CONV) {
					dp_conv2d g = conv_geom(L, n);
					be->conv_bwd(c, &g, L->x, w, L->y, dy, dx, dw, db, L->act, m->ws);
				} else if (L->kind == DP_LAYER_MAXPOOL) {
					dp_pool2d g = pool_geom(L, n);
					be->maxpool_bwd(c, &g, dy, L->aux, dx);
				} else if (L->kind == DP_LAYER_AVGPOOL) {
					dp_pool2d g = pool_geom(L, n);
					be->avgpool_bwd(c, &g, dy, dx);
				} else {
					dp_bnorm g = bnorm_geom(L, n);
					const double *sums = NULL;
					if (want && bn_synced(m, L)) {
						be->bnorm_bwd_sums(c, &g, L->x, L->aux, dy, m->sums);
						if ((rc = sync_sums(m, m->sums, 2 * g.c, NULL, e)) < 0)
							return rc;
						sums = m->sums;
					}
					be->bnorm_bwd(c, &g, L->x, w, L->aux, sums, dy, dx, dw, db);
				}
				busy &= ~(1ull << s);
				if (want)
					deliver(m, n, exec, L->src, t, &busy);
				break;
			}
			case DP_LAYER_ADD: {
				if (exec && L->act)
					be->act_bwd(c, L->act, n * (size_t)out, L->y, dy, dy);
				int s2 = L->src2;
				if (s2 >= 0 && m->l[s2].needg) {
					if (gs[s2] < 0) {
						gs[s2] = take(&busy, &most);
						if (exec)
							be->copy(c, m->gbuf[gs[s2]], dy,
								 n * (size_t)out * sizeof(float));
					} else if (exec) {
						be->add(c, n * (size_t)out, m->gbuf[gs[s2]], dy,
							m->gbuf[gs[s2]], DP_ACT_NONE);
					}
				}
				goto pass;
			}
			default: /* in place: dropout, activations; flatten, softmax pass it on */
				if (exec && L->kind == DP_LAYER_DROPOUT && L->p > 0) {
					dp_dropout d = dropout_of(m, i, n, &m->last_pass);
					be->dropout_bwd(c, &d, (int)n, dy, dy);
				} else if (exec && is_act(L->kind) && !L->fused) {
					be->act_bwd(c, act_of(L->kind), n * (size_t)isz, L->y, dy, dy);
				}
			pass:
				if (want)
					deliver(m, n, exec, L->src, s, &busy);
				else
					busy &= ~(1ull << s);
				break;
			}
			gs[i] = -1;
			if (exec && L->frozen && L->wn) /* frozen: no gradient, as requires_grad=False */
				be->fill(c, dw, 0, L->wn + L->bn);
		} else if (exec && L->wn) {
			be->fill(c, m->grads + L->woff, 0, L->wn + L->bn);
		}
		if (exec && L->wn && hook && (rc = hook(hook_ctx, i, L->woff, L->wn + L->bn, e)) < 0)
			return rc;
	}
	return exec ? DP_OK : most;
}

int dp_model_backward(dp_model *m, size_t n, dp_grad_hook hook, void *hook_ctx, dp_err *e)
{
	if (!m->dout || n != m->last_n || !m->last_train)
		return dp_seterr(e, DP_EARG, "backward: no training forward and loss of %zu samples",
				 n);
	int rc = walk(m, n, 1, hook, hook_ctx, e);
	m->dout = NULL;
	return rc;
}

int dp_model_idle(dp_model *m, dp_grad_hook hook, void *hook_ctx, dp_err *e)
{
	int rc;
	for (int i = 0; i < m->n && m->sync; i++) {
		layer *L = &m->l[i];
		double count = 0;
		if (!bn_synced(m, L))
			continue;
		if ((rc = sync_sums(m, NULL, 2 * L->in.c, &count, e)) < 0)
			return rc;
		if (count <= 0)
			continue;
		/* the running statistics move as on the other ranks: from the
		 * sums of the whole batch, over no samples of this one's */
		dp_bnorm g = bnorm_geom(L, 0);
		L->count = g.count = count;
		m->be->upload(m->ctx, m->sums, m->hsums, 2 * (size_t)L->in.c * sizeof(double));
		m->be->bnorm_fwd(m->ctx, &g, 1, m->xbuf, m->params + L->woff, m->params + L->boff,
				 m->bufs + L->roff, m->bufs + L->roff + L->in.c, m->sums, L->aux,
				 L->ybuf);
		L->tracked++;
	}
	return walk(m, 0, 2, hook, hook_ctx, e);
}

int dp_model_predict(dp_model *m, const float *x, size_t n, float *out, dp_err *e)
{
	dp_pass p = {0};
	int rc = dp_model_forward(m, x, n, &p, e);
	if (rc < 0)
		return rc;
	size_t k = dp_model_out_size(m);
	const float *src = m->out;
	if (m->loss == DP_LOSS_XENT) {
		m->be->softmax(m->ctx, (int)n, (int)k, m->out, m->prob);
		src = m->prob;
	}
	m->be->download(m->ctx, out, src, n * k * sizeof(float));
	return m->be->sync(m->ctx, e);
}

/* ---- fine-tuning: tensors by name ------------------------------------------- */

int dp_model_set_label_smoothing(dp_model *m, double s, dp_err *e)
{
	if (!(s >= 0 && s <= 1))
		return dp_seterr(e, DP_EARG, "label smoothing %g: want 0 <= s <= 1", s);
	if (s > 0 && m->loss != DP_LOSS_XENT)
		return dp_seterr(e, DP_EARG, "label smoothing needs the cross-entropy loss");
	m->smooth = (float)s;
	return DP_OK;
}

/* Does item (without its =VALUE) select tensor t? */
static int item_selects(const dp_model *m, const char *item, const dp_tensor_info *t)
{
	const char *dot = strrchr(t->name, '.');
	if (!strcmp(item, "bias"))
		return dot && !strcmp(dot, ".bias");
	if (!strcmp(item, "bn"))
		return m->l[t->layer].kind == DP_LAYER_BATCHNORM;
	if (!strcmp(item, "1d"))
		return t->role == DP_TENSOR_PARAM && t->ndim == 1;
	char pre[sizeof t->name];
	for (size_t n = 0; t->name[n]; n++) /* "3" of "3.weight", "layer1" of "layer1.0.x" */
		if (t->name[n] == '.') {
			memcpy(pre, t->name, n);
			pre[n] = 0;
			if (fnmatch(item, pre, 0) == 0)
				return 1;
		}
	return fnmatch(item, t->name, 0) == 0;
}

int dp_model_select(const dp_model *m, const char *patterns, int *sel, dp_err *e)
{
	int nt = dp_model_ntensors(m);
	for (int i = 0; i < nt; i++)
		sel[i] = 0;
	if (!patterns)
		return DP_OK;
	int k = 0;
	for (const char *p = patterns;; k++) {
		const char *end = strchr(p, ','), *eq;
		size_t len = end ? (size_t)(end - p) : strlen(p);
		char item[128];
		eq = memchr(p, '=', len);
		size_t il = eq ? (size_t)(eq - p) : len;
		if (!il || il >= sizeof item)
			return dp_seterr(e, DP_EARG, "'%s': item %d is %s", patterns, k + 1,
					 il ? "too long" : "empty");
		memcpy(item, p, il);
		item[il] = 0;
		int any = 0;
		for (int i = 0; i < nt; i++) {
			dp_tensor_info t;
			dp_model_tensor(m, i, &t);
			if (item_selects(m, item, &t)) {
				any = 1;
				if (!sel[i])
					sel[i] = k + 1;
			}
		}
		if (!any)
			return dp_seterr(e, DP_EARG, "'%s' selects no tensor of the model (names: "
					 "0.weight, 0.bias, ...: see --summary)", item);
		if (!end)
			break;
		p = end + 1;
	}
	return DP_OK;
}

int dp_model_freeze(dp_model *m, const char *patterns, dp_err *e)
{
	int nt = dp_model_ntensors(m);
	int *sel = calloc((size_t)nt + 1, sizeof *sel);
	if (!sel)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	int rc = dp_model_select(m, patterns, sel, e);
	if (rc == DP_OK) {
		for (int i = 0; i < m->n; i++)
			m->l[i].frozen = m->l[i].wn > 0;
		for (int i = 0; i < nt; i++) {
			dp_tensor_info t;
			dp_model_tensor(m, i, &t);
			if (t.role == DP_TENSOR_PARAM && !sel[i])
				m->l[t.layer].frozen = 0;
		}
		plan_grads(m);
	}
	free(sel);
	return rc;
}

void dp_model_set_sync(dp_model *m, dp_sum_fn sum, void *ctx)
{
	m->sync = sum;
	m->sync_ctx = ctx;
}
