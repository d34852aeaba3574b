/*
 * spec.c - the model language (dp_nn.h): loss names, shapes, one item of
 * a spec ("conv:32:3:same") into a layer, and the shape each layer makes
 * of its input.  The items' nesting (blocks, names) is graph.c's.
 */
#define _GNU_SOURCE
#include "nn_impl.h"
#include "dp_rng.h"

#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const nn_kind_names[] = {
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
int nn_parse_int(const char *s, size_t len, long max, int *out)
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
	int ra = nn_parse_int(s, l1, max, a), rb = x ? nn_parse_int(x + 1, len - l1 - 1, max, b) : ra;
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
		int rc = nd == 3 ? -1 : nn_parse_int(p, len, MAX_VALUES, &d[nd]);
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
	if (nf >= 3 && nn_parse_int(f[1], strlen(f[1]), MAX_FILTERS, &L->units) == -2)
		return too_large(e, idx, it, f[1], MAX_FILTERS, "filters");
	if (nf >= 3 && parse_pair(f[2], strlen(f[2]), MAX_WINDOW, &L->kh, &L->kw) == -2)
		return too_large(e, idx, it, f[2], MAX_WINDOW, "for a kernel side");
	if (nf < 3 || nn_parse_int(f[1], strlen(f[1]), MAX_FILTERS, &L->units) < 0 ||
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

/* maxpool:K[:S[:P]], avgpool:K[:S] (fields f[0..nf)) into L. */
static int parse_pool(layer *L, char **f, int nf, const char *idx, dp_err *e)
{
	const char *it = L->text;
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
	return DP_OK;
}

/* Parse one item into L (kind and hyperparameters; shapes later). */
int nn_parse_item(layer *L, const char *idx, dp_err *e)
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
		if (nf == 2 && (rc = nn_parse_int(f[1], strlen(f[1]), MAX_UNITS, &L->units)) == -2)
			return too_large(e, idx, it, f[1], MAX_UNITS, "units");
		if (nf != 2 || rc < 0 || L->units <= 0)
			return dp_seterr(e, DP_EARG, "model: item %s '%s': want dense:UNITS[:bias=0]", idx, it);
		break;
	case DP_LAYER_CONV:
		if ((rc = parse_conv(L, f, nf, idx, e)) < 0)
			return rc;
		break;
	case DP_LAYER_MAXPOOL:
	case DP_LAYER_AVGPOOL:
		if ((rc = parse_pool(L, f, nf, idx, e)) < 0)
			return rc;
		break;
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

int nn_same_shape(const dp_shape *a, const dp_shape *b)
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
int nn_plan_layer(layer *L, const dp_shape *o2, dp_err *e)
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
		if (!nn_same_shape(&L->in, o2))
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

void nn_free_layers(dp_model *m)
{
	for (int i = 0; i < m->n; i++) {
		free(m->l[i].text);
		free(m->l[i].name);
	}
	free(m->l);
	for (int i = 0; i < m->nblk; i++)
		free(m->blk[i].name);
	free(m->blk);
	m->l = NULL;
	m->blk = NULL;
	m->n = m->nblk = 0;
}

