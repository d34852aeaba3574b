/*
 * graph.c - a model's graph from its spec (dp_nn.h): items, blocks and
 * their names (PyTorch's module paths), the named architectures
 * (torchvision's and the CIFAR ResNets), the plan (shapes, parameters,
 * what runs in place), and what a model says about its layers and
 * tensors.
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

/* A block of layers [lo, the last so far] named path. */
static int add_block(dp_model *m, int lo, const char *path, dp_err *e)
{
	if (lo > m->n - 1)
		return DP_OK; /* an empty seq() */
	nn_block *b = realloc(m->blk, ((size_t)m->nblk + 1) * sizeof *b);
	if (!b)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	m->blk = b;
	b += m->nblk;
	if (!(b->name = strdup(path)))
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	m->nblk++;
	b->lo = lo;
	b->hi = m->n - 1;
	b->inner = 1; /* blocks end inner first: one that holds this ends before it */
	for (int j = 0; j < m->nblk - 1; j++)
		if (m->blk[j].lo >= lo && m->blk[j].hi <= b->hi)
			b->inner = 0;
	return DP_OK;
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
		int rc, in = *cur, first = m->n;
		if (it[k].type == 's') {
			if ((rc = flatten(m, it[k].kid, it[k].nkid, self, depth + 1, cur, e)) < 0 ||
			    (rc = add_block(m, first, self, e)) < 0)
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
			if ((rc = nn_parse_item(L, self, e)) < 0)
				return rc;
		}
		*cur = m->n - 1;
		if (it[k].type == 'r' && (rc = add_block(m, first, self, e)) < 0)
			return rc;
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
	if (spec[len] && (nn_parse_int(spec + len + 1, strlen(spec + len + 1), MAX_UNITS, &classes) < 0 ||
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

/* Which outputs need a gradient: a layer's with parameters to train, and
 * every layer's after one. */
void nn_plan_grads(dp_model *m)
{
	for (int i = 0; i < m->n; i++) {
		layer *L = &m->l[i];
		L->needg = (L->wn && !L->frozen) || (L->src >= 0 && m->l[L->src].needg) ||
			   (L->src2 >= 0 && m->l[L->src2].needg);
	}
	m->need_dx = m->lo > 0 && m->l[m->lo - 1].needg;
}

int nn_folded(const dp_model *m, int i)
{
	if (i <= m->lo || i >= m->hi || !m->be || !m->be->bnorm_fold)
		return 0;
	const layer *B = &m->l[i], *C = &m->l[i - 1];
	return B->kind == DP_LAYER_BATCHNORM && B->frozen && !B->needg && B->src == i - 1 &&
	       B->in.rank == 3 && C->kind == DP_LAYER_CONV && C->frozen && C->uses == 1 && !C->act;
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
		int rc = nn_plan_layer(L, &o2, e);
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
		/* an activation right after a dense, conv or sum is computed by it,
		 * and a ReLU after a batchnorm (dp_bnorm.act); after a batchnorm or
		 * pooling, others in its output's memory */
		if (is_act(L->kind) && L->src == i - 1 && i > 0 && m->l[i - 1].uses == 1) {
			layer *P = &m->l[i - 1];
			if ((P->kind == DP_LAYER_DENSE || P->kind == DP_LAYER_CONV ||
			     P->kind == DP_LAYER_ADD ||
			     (P->kind == DP_LAYER_BATCHNORM && L->kind == DP_LAYER_RELU)) &&
			    !P->act) {
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
	nn_plan_grads(m);
	m->lo = 0;
	m->hi = m->n;
	m->sp = m->nparams;
	m->sb = m->nbuffers;
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
	m->dx_slot = -1;
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
	dp_model_free(m); /* not bound yet: its layers and spec */
	return NULL;
}

void dp_model_free(dp_model *m)
{
	if (!m)
		return;
	nn_unbind(m);
	nn_free_layers(m);
	free(m->spec);
	free(m->recompute);
	free(m->seg);
	free(m);
}

const char *dp_model_spec(const dp_model *m) { return m->spec; }
dp_shape dp_model_input(const dp_model *m) { return m->in; }
dp_shape dp_model_output_shape(const dp_model *m) { return m->l[m->n - 1].out; }
int dp_model_loss_kind(const dp_model *m) { return m->loss; }
size_t dp_model_in_size(const dp_model *m) { return dp_shape_size(&m->in); }
size_t dp_model_out_size(const dp_model *m) { return dp_shape_size(&m->l[m->n - 1].out); }
size_t dp_model_nparams(const dp_model *m) { return m->sp; }
size_t dp_model_nbuffers(const dp_model *m) { return m->sb; }
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
	if (a->n != b->n || !nn_same_shape(&a->in, &b->in) || a->loss != b->loss)
		return 0;
	for (int i = 0; i < a->n; i++) {
		const layer *x = &a->l[i], *y = &b->l[i];
		if (x->kind != y->kind || !nn_same_shape(&x->out, &y->out) || x->units != y->units ||
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
	out->kind_name = nn_kind_names[L->kind];
	out->text = L->text;
	out->in = L->in;
	out->out = L->out;
	out->nparams = L->wn + L->bn;
	out->param_off = L->woff >= m->plo ? L->woff - m->plo : 0; /* in the stage's buffer */
	out->staged = i >= m->lo && i < m->hi;
	out->fused = L->fused;
	out->name = L->name;
	out->depth = L->depth;
	out->src = L->src;
	out->src2 = L->src2;
	out->frozen = L->frozen;
	out->units = L->units;
	out->kh = L->kh, out->kw = L->kw, out->sh = L->sh, out->sw = L->sw;
	out->ph = L->ph, out->pw = L->pw;
	out->global = L->global;
	out->bias = L->bn > 0 && L->kind != DP_LAYER_BATCHNORM;
	out->p = L->p;
	out->eps = L->eps;
	/* a fused activation is a layer of the list too: only a block's own counts */
	int next_fused = i + 1 < m->n && m->l[i + 1].fused && m->l[i + 1].src == i;
	out->act = L->kind == DP_LAYER_ADD && !next_fused ? L->act : 0;
}

/* The tensors of layer L: weight and bias (or the weight alone), and a
 * batchnorm's three more. */
static int tensors_of(const layer *L)
{
	return L->kind == DP_LAYER_BATCHNORM ? 5 : L->wn ? 1 + (L->bn > 0) : 0;
}

int nn_ntensors(const dp_model *m, int all)
{
	int n = 0;
	for (int i = all ? 0 : m->lo; i < (all ? m->n : m->hi); i++)
		n += tensors_of(&m->l[i]);
	return n;
}

int dp_model_ntensors(const dp_model *m) { return nn_ntensors(m, 0); }

void dp_model_tensor(const dp_model *m, int idx, dp_tensor_info *t)
{
	nn_tensor(m, idx, 0, t);
	if (t->role == DP_TENSOR_PARAM)
		t->off -= m->plo;
	else if (t->role == DP_TENSOR_BUFFER)
		t->off -= m->blo;
}

int dp_model_knows_tensor(const dp_model *m, const char *name)
{
	for (int i = 0; i < nn_ntensors(m, 1); i++) {
		dp_tensor_info t;
		nn_tensor(m, i, 1, &t);
		if (!strcmp(t.name, name))
			return 1;
	}
	return 0;
}

void nn_tensor(const dp_model *m, int idx, int all, dp_tensor_info *t)
{
	memset(t, 0, sizeof *t);
	for (int i = all ? 0 : m->lo; i < m->n; i++) {
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

