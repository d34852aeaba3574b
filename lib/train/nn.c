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
	char *text;
	dp_shape in, out;
	int units;                 /* dense outputs, conv filters */
	int kh, kw, sh, sw, ph, pw; /* conv and pool geometry */
	float p;                   /* dropout rate */
	float eps, momentum;       /* batchnorm */
	int act;                   /* activation fused into this layer */
	int fused;                 /* this activation is done by the layer before */
	size_t woff, wn, boff, bn; /* weight and bias in the parameter buffer */
	size_t roff;               /* running mean, then var, in the buffers */
	int64_t tracked;           /* batchnorm: batches seen in training */
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
	int n;
	size_t nparams, nbuffers;
	int first_param; /* first layer with parameters; -1 if none */
	/* bound */
	const dp_backend *be;
	dp_bectx *ctx;
	size_t max_batch;
	float *params, *grads, *bufs;
	float *xbuf;       /* (dev) staged input */
	void *ybuf;        /* (dev) staged labels */
	float *gbuf[2];    /* (dev) gradient ping-pong */
	float *dout;       /* gradient of the output, set by loss */
	void *ws;          /* (dev) convolution workspace */
	double *stats;     /* (dev) 2 doubles */
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
	[DP_LAYER_BATCHNORM] = "batchnorm",
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
static int too_large(dp_err *e, int idx, const char *it, const char *val, long max,
		     const char *what)
{
	return dp_seterr(e, DP_EARG, "model: item %d '%s': %s is too large (at most %ld %s)", idx,
			 it, val, max, what);
}

#define PAD_VALID (-1)
#define PAD_SAME (-2)

/* Parse one item into L (kind and hyperparameters; shapes later). */
static int parse_item(layer *L, int idx, dp_err *e)
{
	char buf[256], *f[8];
	if (strlen(L->text) >= sizeof buf)
		return dp_seterr(e, DP_EARG, "model: item %d: too long", idx);
	strcpy(buf, L->text);
	int nf = fields(buf, f, 7);
	const char *it = L->text;
	if (nf > 7)
		return dp_seterr(e, DP_EARG, "model: item %d '%s': too many fields", idx, it);
	L->kind = kind_of(f[0]);
	if (!L->kind)
		return dp_seterr(e, DP_EARG,
				 "model: item %d '%s': unknown layer '%s' (dense, conv, maxpool, "
				 "avgpool, flatten, dropout, relu, tanh, sigmoid, batchnorm, softmax)",
				 idx, it, f[0]);
	int rc;
	switch (L->kind) {
	case DP_LAYER_DENSE:
		if (nf == 2 && (rc = parse_int(f[1], strlen(f[1]), MAX_UNITS, &L->units)) == -2)
			return too_large(e, idx, it, f[1], MAX_UNITS, "units");
		if (nf != 2 || rc < 0 || L->units <= 0)
			return dp_seterr(e, DP_EARG, "model: item %d '%s': want dense:UNITS", idx, it);
		break;
	case DP_LAYER_CONV: {
		if (nf >= 3 && parse_int(f[1], strlen(f[1]), MAX_FILTERS, &L->units) == -2)
			return too_large(e, idx, it, f[1], MAX_FILTERS, "filters");
		if (nf >= 3 && parse_pair(f[2], strlen(f[2]), MAX_WINDOW, &L->kh, &L->kw) == -2)
			return too_large(e, idx, it, f[2], MAX_WINDOW, "for a kernel side");
		if (nf < 3 || parse_int(f[1], strlen(f[1]), MAX_FILTERS, &L->units) < 0 ||
		    L->units <= 0 || parse_pair(f[2], strlen(f[2]), MAX_WINDOW, &L->kh, &L->kw) < 0)
			return dp_seterr(e, DP_EARG,
					 "model: item %d '%s': want conv:FILTERS:KERNEL[:STRIDE][:same|valid]",
					 idx, it);
		L->sh = L->sw = 1;
		L->ph = PAD_VALID;
		int got_stride = 0, got_pad = 0;
		for (int i = 3; i < nf; i++) {
			const char *v = f[i];
			int is_stride = 0, is_pad = 0;
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
					 "model: item %d '%s': '%s' is not a stride or padding "
					 "(same, valid, or a number)",
					 idx, it, f[i]);
		}
		if (L->ph == PAD_SAME && (L->sh != 1 || L->sw != 1))
			return dp_seterr(e, DP_EARG,
					 "model: item %d '%s': padding 'same' needs stride 1 (as in "
					 "PyTorch); give the padding as a number",
					 idx, it);
		break;
	}
	case DP_LAYER_MAXPOOL:
	case DP_LAYER_AVGPOOL:
		if (nf >= 2 && nf <= 3) {
			if (parse_pair(f[1], strlen(f[1]), MAX_WINDOW, &L->kh, &L->kw) == -2)
				return too_large(e, idx, it, f[1], MAX_WINDOW, "for a window side");
			if (nf == 3 && parse_pair(f[2], strlen(f[2]), MAX_WINDOW, &L->sh, &L->sw) == -2)
				return too_large(e, idx, it, f[2], MAX_WINDOW, "for a stride");
		}
		if (nf < 2 || nf > 3 || parse_pair(f[1], strlen(f[1]), MAX_WINDOW, &L->kh, &L->kw) < 0 ||
		    (nf == 3 && parse_pair(f[2], strlen(f[2]), MAX_WINDOW, &L->sh, &L->sw) < 0))
			return dp_seterr(e, DP_EARG, "model: item %d '%s': want %s:SIZE[:STRIDE]", idx,
					 it, f[0]);
		if (nf == 2) {
			L->sh = L->kh;
			L->sw = L->kw;
		}
		break;
	case DP_LAYER_DROPOUT: {
		char *end;
		errno = 0;
		double p = nf == 2 ? strtod(f[1], &end) : -1;
		if (nf != 2 || errno || end == f[1] || *end || !(p >= 0 && p < 1))
			return dp_seterr(e, DP_EARG,
					 "model: item %d '%s': want dropout:RATE with 0 <= RATE < 1", idx,
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
						 "model: item %d '%s': want batchnorm[:eps=E][:momentum=M]",
						 idx, it);
			*dst = (float)v;
		}
		break;
	default:
		if (nf != 1)
			return dp_seterr(e, DP_EARG, "model: item %d '%s': %s takes no arguments", idx,
					 it, f[0]);
	}
	return DP_OK;
}

/* Output size of a window of k with stride s over n with total padding. */
static int window_out(int n, int k, int s, int pad_total)
{
	int span = n + pad_total - k;
	return span < 0 ? 0 : span / s + 1;
}

static int shape_error(dp_err *e, int i, const layer *L, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int shape_error(dp_err *e, int i, const layer *L, const char *fmt, ...)
{
	char why[512], sb[64];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	return dp_seterr(e, DP_EARG, "model: layer %d (%s): input is %s: %s", i, L->text,
			 dp_shape_format(&L->in, sb, sizeof sb), why);
}

/* Infer L->out from L->in; check; count parameters. */
static int plan_layer(layer *L, int i, dp_err *e)
{
	dp_shape o = L->in;
	size_t insz = dp_shape_size(&L->in);
	switch (L->kind) {
	case DP_LAYER_DENSE:
		if (L->in.rank != 1)
			return shape_error(e, i, L, "dense needs a vector: add flatten before it");
		o.c = L->units;
		L->wn = (size_t)L->units * insz;
		L->bn = (size_t)L->units;
		break;
	case DP_LAYER_CONV: {
		if (L->in.rank != 3)
			return shape_error(e, i, L, "conv needs C x H x W");
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
			return shape_error(e, i, L, "the %dx%d kernel does not fit", L->kh, L->kw);
		L->wn = (size_t)L->units * L->in.c * L->kh * L->kw;
		L->bn = (size_t)L->units;
		break;
	}
	case DP_LAYER_MAXPOOL:
	case DP_LAYER_AVGPOOL:
		if (L->in.rank != 3)
			return shape_error(e, i, L, "pooling needs C x H x W");
		o.h = window_out(L->in.h, L->kh, L->sh, 0);
		o.w = window_out(L->in.w, L->kw, L->sw, 0);
		if (o.h <= 0 || o.w <= 0)
			return shape_error(e, i, L, "the %dx%d window does not fit", L->kh, L->kw);
		break;
	case DP_LAYER_FLATTEN:
		o.rank = 1;
		o.c = (int)insz;
		o.h = o.w = 1;
		break;
	case DP_LAYER_BATCHNORM:
		L->wn = L->bn = (size_t)L->in.c;
		break;
	default:
		break;
	}
	L->out = o;
	if (dp_shape_size(&o) > MAX_VALUES)
		return shape_error(e, i, L, "an output of %zu values is too large (at most %d)",
				   dp_shape_size(&o), MAX_VALUES);
	return DP_OK;
}

static void free_layers(dp_model *m)
{
	for (int i = 0; i < m->n; i++)
		free(m->l[i].text);
	free(m->l);
}

dp_model *dp_model_new(const char *spec, const dp_shape *in, int loss, dp_err *e)
{
	dp_model *m = calloc(1, sizeof *m);
	if (!m) {
		dp_seterr(e, DP_ENOMEM, "out of memory");
		return NULL;
	}
	m->in = *in;
	m->loss = loss;
	m->first_param = -1;
	size_t cap = 0, speclen = 0;
	int rc = DP_OK;
	for (const char *p = spec;;) {
		size_t len = strcspn(p, ",");
		const char *a = p, *b = p + len;
		while (a < b && isspace((unsigned char)*a))
			a++;
		while (b > a && isspace((unsigned char)b[-1]))
			b--;
		if (a == b) {
			rc = dp_seterr(e, DP_EARG, "model: item %d is empty", m->n);
			goto fail;
		}
		if ((size_t)m->n == cap) {
			cap = cap ? cap * 2 : 16;
			layer *t = realloc(m->l, cap * sizeof *t);
			if (!t)
				goto nomem;
			m->l = t;
		}
		layer *L = &m->l[m->n];
		memset(L, 0, sizeof *L);
		L->text = strndup(a, (size_t)(b - a));
		if (!L->text)
			goto nomem;
		m->n++;
		speclen += (size_t)(b - a) + 1;
		if ((rc = parse_item(L, m->n - 1, e)) < 0)
			goto fail;
		if (!p[len])
			break;
		p += len + 1;
	}
	if (m->n > 1000) {
		rc = dp_seterr(e, DP_EARG, "model: more than 1000 items");
		goto fail;
	}
	m->spec = malloc(speclen + 1);
	if (!m->spec)
		goto nomem;
	m->spec[0] = 0;
	for (int i = 0; i < m->n; i++) {
		if (i)
			strcat(m->spec, ",");
		strcat(m->spec, m->l[i].text);
	}
	dp_shape cur = *in;
	for (int i = 0; i < m->n; i++) {
		layer *L = &m->l[i];
		L->in = cur;
		if ((rc = plan_layer(L, i, e)) < 0)
			goto fail;
		cur = L->out;
		if (L->kind == DP_LAYER_SOFTMAX && (i != m->n - 1 || loss != DP_LOSS_XENT)) {
			rc = dp_seterr(e, DP_EARG,
				       "model: layer %d (softmax): softmax is allowed only as the last "
				       "item, with the xent loss (which applies it)",
				       i);
			goto fail;
		}
		/* fuse an activation into the dense or conv before it */
		if (i > 0 && (L->kind == DP_LAYER_RELU || L->kind == DP_LAYER_TANH ||
			      L->kind == DP_LAYER_SIGMOID)) {
			layer *P = &m->l[i - 1];
			if ((P->kind == DP_LAYER_DENSE || P->kind == DP_LAYER_CONV) && !P->act) {
				P->act = L->kind == DP_LAYER_RELU   ? DP_ACT_RELU
					 : L->kind == DP_LAYER_TANH ? DP_ACT_TANH
								    : DP_ACT_SIGMOID;
				L->fused = 1;
			}
		}
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
		}
	}
	if (loss == DP_LOSS_XENT && (cur.rank != 1 || cur.c < 2)) {
		char sb[64];
		rc = dp_seterr(e, DP_EARG,
			       "model: the output is %s: the xent loss needs a vector of at least 2 "
			       "classes (end with dense:CLASSES)",
			       dp_shape_format(&cur, sb, sizeof sb));
		goto fail;
	}
	if (loss != DP_LOSS_XENT && loss != DP_LOSS_MSE) {
		rc = dp_seterr(e, DP_EARG, "model: unknown loss");
		goto fail;
	}
	return m;
nomem:
	rc = dp_seterr(e, DP_ENOMEM, "out of memory");
fail:
	(void)rc;
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
	void *bufs[] = {m->params, m->grads, m->bufs, m->xbuf, m->ybuf, m->gbuf[0],
			m->gbuf[1], m->ws, m->stats, m->prob};
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		be->free(m->ctx, bufs[i]);
	m->params = m->grads = m->bufs = m->xbuf = m->gbuf[0] = m->gbuf[1] = m->prob = NULL;
	m->ybuf = m->ws = NULL;
	m->stats = NULL;
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

static int same_shape(const dp_shape *a, const dp_shape *b)
{
	return a->rank == b->rank && a->c == b->c && a->h == b->h && a->w == b->w;
}

int dp_model_same(const dp_model *a, const dp_model *b)
{
	if (a->n != b->n || !same_shape(&a->in, &b->in) || a->loss != b->loss)
		return 0;
	for (int i = 0; i < a->n; i++) {
		const layer *x = &a->l[i], *y = &b->l[i];
		if (x->kind != y->kind || !same_shape(&x->out, &y->out) || x->units != y->units ||
		    x->kh != y->kh || x->kw != y->kw || x->sh != y->sh || x->sw != y->sw ||
		    x->ph != y->ph || x->pw != y->pw || x->p != y->p || x->eps != y->eps ||
		    x->momentum != y->momentum)
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
}

int dp_model_ntensors(const dp_model *m)
{
	int n = 0;
	for (int i = 0; i < m->n; i++)
		n += m->l[i].kind == DP_LAYER_BATCHNORM ? 5 : m->l[i].wn ? 2 : 0;
	return n;
}

void dp_model_tensor(const dp_model *m, int idx, dp_tensor_info *t)
{
	memset(t, 0, sizeof *t);
	for (int i = 0; i < m->n; i++) {
		const layer *L = &m->l[i];
		int nt = L->kind == DP_LAYER_BATCHNORM ? 5 : L->wn ? 2 : 0;
		if (idx >= nt) {
			idx -= nt;
			continue;
		}
		t->layer = i;
		t->role = DP_TENSOR_PARAM;
		static const char *const names[] = {"weight", "bias", "running_mean", "running_var",
						    "num_batches_tracked"};
		snprintf(t->name, sizeof t->name, "%d.%s", i, names[idx]);
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
		return !L->fused;
	default:
		return 1;
	}
}

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
	ALLOC(m->params, (m->nparams ? m->nparams : 1) * sizeof(float));
	ALLOC(m->grads, (m->nparams ? m->nparams : 1) * sizeof(float));
	ALLOC(m->bufs, (m->nbuffers ? m->nbuffers : 1) * sizeof(float));
	ALLOC(m->xbuf, nb * dp_shape_size(&m->in) * sizeof(float));
	ALLOC(m->ybuf, nb * (outsz > 1 ? outsz : 1) * sizeof(float));
	ALLOC(m->gbuf[0], nb * maxact * sizeof(float));
	ALLOC(m->gbuf[1], nb * maxact * sizeof(float));
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
		size_t fan_in = L->wn / (size_t)L->units;
		float bound = (float)(1.0 / sqrt((double)fan_in));
		uint64_t key = dp_rng_key(seed, 2, (uint64_t[]){DP_RNG_INIT, (uint64_t)i});
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
		       L->kh,  L->kw,   L->sh,   L->sw};
	return g;
}

static dp_bnorm bnorm_geom(const layer *L, size_t n)
{
	dp_bnorm g = {(int)n, L->in.c, L->in.rank == 3 ? L->in.h * L->in.w : 1, L->eps,
		      L->momentum};
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

static int act_of(int kind)
{
	return kind == DP_LAYER_RELU ? DP_ACT_RELU : kind == DP_LAYER_TANH ? DP_ACT_TANH
									: DP_ACT_SIGMOID;
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
	const float *cur =
		be->stage(c, m->xbuf, x, n * dp_shape_size(&m->in) * sizeof(float));
	int train = p && p->train;
	for (int i = 0; i < m->n; i++) {
		layer *L = &m->l[i];
		float *y = L->ybuf;
		int in = (int)dp_shape_size(&L->in), out = (int)dp_shape_size(&L->out);
		L->x = cur;
		switch (L->kind) {
		case DP_LAYER_DENSE:
			be->dense_fwd(c, (int)n, in, out, cur, m->params + L->woff,
				      m->params + L->boff, y, L->act);
			break;
		case DP_LAYER_CONV: {
			dp_conv2d g = conv_geom(L, n);
			be->conv_fwd(c, &g, cur, m->params + L->woff, m->params + L->boff, y, L->act,
				     m->ws);
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
			else
				be->act_fwd(c, act_of(L->kind), n * (size_t)in, cur, y);
			break;
		case DP_LAYER_BATCHNORM: {
			dp_bnorm g = bnorm_geom(L, n);
			be->bnorm_fwd(c, &g, train, cur, m->params + L->woff, m->params + L->boff,
				      m->bufs + L->roff, m->bufs + L->roff + L->in.c, NULL, L->aux, y);
			if (train)
				L->tracked++;
			break;
		}
		default: /* flatten, softmax (applied by the loss or predict) */
			y = (float *)cur;
			break;
		}
		L->y = y;
		cur = y;
	}
	m->out = cur;
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

int dp_model_backward(dp_model *m, size_t n, dp_grad_hook hook, void *hook_ctx, dp_err *e)
{
	if (!m->dout || n != m->last_n || !m->last_train)
		return dp_seterr(e, DP_EARG, "backward: no training forward and loss of %zu samples",
				 n);
	const dp_backend *be = m->be;
	dp_bectx *c = m->ctx;
	float *dy = m->dout;
	int cur = 0; /* dy lives in gbuf[cur] */
	for (int i = m->n - 1; i >= m->first_param && i >= 0; i--) {
		layer *L = &m->l[i];
		int in = (int)dp_shape_size(&L->in), out = (int)dp_shape_size(&L->out);
		float *dx = i > m->first_param ? m->gbuf[1 - cur] : NULL;
		int swap = 1;
		switch (L->kind) {
		case DP_LAYER_DENSE:
			be->dense_bwd(c, (int)n, in, out, L->x, m->params + L->woff, L->y, dy, dx,
				      m->grads + L->woff, m->grads + L->boff, L->act);
			break;
		case DP_LAYER_CONV: {
			dp_conv2d g = conv_geom(L, n);
			be->conv_bwd(c, &g, L->x, m->params + L->woff, L->y, dy, dx,
				     m->grads + L->woff, m->grads + L->boff, L->act, m->ws);
			break;
		}
		case DP_LAYER_MAXPOOL: {
			dp_pool2d g = pool_geom(L, n);
			be->maxpool_bwd(c, &g, dy, L->aux, dx);
			break;
		}
		case DP_LAYER_AVGPOOL: {
			dp_pool2d g = pool_geom(L, n);
			be->avgpool_bwd(c, &g, dy, dx);
			break;
		}
		case DP_LAYER_BATCHNORM: {
			dp_bnorm g = bnorm_geom(L, n);
			be->bnorm_bwd(c, &g, L->x, m->params + L->woff, L->aux, NULL, dy, dx,
				      m->grads + L->woff, m->grads + L->boff);
			break;
		}
		case DP_LAYER_DROPOUT:
			swap = 0;
			if (L->p > 0) {
				dp_dropout d = dropout_of(m, i, n, &m->last_pass);
				be->dropout_bwd(c, &d, (int)n, dy, dy);
			}
			break;
		case DP_LAYER_RELU:
		case DP_LAYER_TANH:
		case DP_LAYER_SIGMOID:
			swap = 0;
			if (!L->fused)
				be->act_bwd(c, act_of(L->kind), n * (size_t)in, L->y, dy, dy);
			break;
		default: /* flatten, softmax: the gradient passes through */
			swap = 0;
			break;
		}
		if (L->wn && hook) {
			int rc = hook(hook_ctx, i, L->woff, L->wn + L->bn, e);
			if (rc < 0)
				return rc;
		}
		if (swap) {
			dy = dx;
			cur = 1 - cur;
		}
	}
	m->dout = NULL;
	return DP_OK;
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
