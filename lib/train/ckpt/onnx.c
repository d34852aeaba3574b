/*
 * onnx.c - a checkpoint's model as an ONNX file (dp_onnx.h): the layers
 * of dp_nn.h's plan as ONNX operators, the tensors of the safetensors file
 * as initializers, encoded by protobuf-c from ONNX's own onnx.proto
 * (libonnx-dev's /usr/include/onnx/onnx.proto: the Makefile's ONNX_PROTO).
 * Nothing is bound to a backend: the weights go from the checkpoint's
 * bytes to the file's (both little-endian float32).
 *
 * Every protobuf-c structure of the model lives in one arena, freed
 * whole once the model is packed.
 */
#define _GNU_SOURCE
#include "dp_onnx.h"
#include "dp_image.h"
#include "dp_nn.h"

#include "onnx.pb-c.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the arena -------------------------------------------------------------- */

typedef struct chunk {
	struct chunk *next;
	max_align_t data[];
} chunk;

typedef struct build {
	chunk *chunks;
	int oom;
	const dp_st *ck;
	dp_model *m;
	Onnx__GraphProto *g;
	size_t nnode, capnode, ninit, capinit;
	int nvalue; /* names made up for values ("pre.0") */
} build;

static void *zalloc(build *b, size_t n)
{
	chunk *c = calloc(1, sizeof *c + n + 1);
	if (!c) {
		b->oom = 1;
		return NULL;
	}
	c->next = b->chunks;
	b->chunks = c;
	return c->data;
}

static char *sdup(build *b, const char *s)
{
	char *p = zalloc(b, strlen(s) + 1);
	if (p)
		strcpy(p, s);
	return p;
}

static char *sfmt(build *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *sfmt(build *b, const char *fmt, ...)
{
	va_list ap;
	char *t;
	va_start(ap, fmt);
	int n = vasprintf(&t, fmt, ap);
	va_end(ap);
	if (n < 0) {
		b->oom = 1;
		return NULL;
	}
	char *p = sdup(b, t);
	free(t);
	return p;
}

static void arena_free(build *b)
{
	while (b->chunks) {
		chunk *c = b->chunks;
		b->chunks = c->next;
		free(c);
	}
}

/* Append p to the array *v of *n (capacity *cap) pointers. */
static void push(build *b, void ***v, size_t *n, size_t *cap, void *p)
{
	if (!p) {
		b->oom = 1;
		return;
	}
	if (*n == *cap) {
		size_t nc = *cap ? 2 * *cap : 16;
		void **nv = zalloc(b, nc * sizeof *nv);
		if (!nv)
			return;
		if (*n)
			memcpy(nv, *v, *n * sizeof *nv);
		*v = nv;
		*cap = nc;
	}
	(*v)[(*n)++] = p;
}

/* ---- graph pieces ----------------------------------------------------------- */

/* An attribute name of type, its value for the caller to set. */
static Onnx__AttributeProto *attr_new(build *b, const char *name, Onnx__AttributeProto__AttributeType type)
{
	Onnx__AttributeProto *a = zalloc(b, sizeof *a);
	if (!a)
		return NULL;
	onnx__attribute_proto__init(a);
	a->name = (char *)name;
	a->has_type = 1;
	a->type = type;
	return a;
}

static Onnx__AttributeProto *attr_ints(build *b, const char *name, const int64_t *v, size_t n)
{
	Onnx__AttributeProto *a = attr_new(b, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
	int64_t *c = zalloc(b, n * sizeof *c);
	if (!a || !c)
		return NULL;
	memcpy(c, v, n * sizeof *c);
	a->ints = c;
	a->n_ints = n;
	return a;
}

static Onnx__AttributeProto *attr_int(build *b, const char *name, int64_t v)
{
	Onnx__AttributeProto *a = attr_new(b, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
	if (a) {
		a->has_i = 1;
		a->i = v;
	}
	return a;
}

static Onnx__AttributeProto *attr_float(build *b, const char *name, float v)
{
	Onnx__AttributeProto *a = attr_new(b, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
	if (a) {
		a->has_f = 1;
		a->f = v;
	}
	return a;
}

/* A node op(inputs...) -> out, named name; attributes added by the caller. */
static Onnx__NodeProto *node(build *b, const char *op, const char *name, const char *out, int nin,
			     const char *const *in)
{
	Onnx__NodeProto *n = zalloc(b, sizeof *n);
	char **iv = zalloc(b, (size_t)(nin + 1) * sizeof *iv), **ov = zalloc(b, sizeof *ov);
	if (!n || !iv || !ov)
		return NULL;
	onnx__node_proto__init(n);
	n->op_type = (char *)op;
	n->name = sdup(b, name);
	for (int i = 0; i < nin; i++)
		iv[i] = sdup(b, in[i]);
	n->input = iv;
	n->n_input = (size_t)nin;
	ov[0] = sdup(b, out);
	n->output = ov;
	n->n_output = 1;
	void **nodes = (void **)b->g->node;
	push(b, &nodes, &b->nnode, &b->capnode, n);
	b->g->node = (Onnx__NodeProto **)nodes;
	b->g->n_node = b->nnode;
	return n;
}

static void node_attrs(build *b, Onnx__NodeProto *n, Onnx__AttributeProto **a, size_t na)
{
	if (!n)
		return;
	Onnx__AttributeProto **v = zalloc(b, na * sizeof *v);
	if (!v)
		return;
	for (size_t i = 0; i < na; i++)
		if (!(v[i] = a[i]))
			b->oom = 1;
	n->attribute = v;
	n->n_attribute = na;
}

/* A float32 initializer named name of shape dims (nd) over data (count
 * floats, little-endian as the checkpoint holds them: not copied). */
static void initializer(build *b, const char *name, const int64_t *dims, int nd, const void *data,
			size_t count)
{
	Onnx__TensorProto *t = zalloc(b, sizeof *t);
	int64_t *d = zalloc(b, (size_t)(nd + 1) * sizeof *d);
	if (!t || !d)
		return;
	onnx__tensor_proto__init(t);
	t->name = sdup(b, name);
	if (nd) /* a scalar's dims may be NULL */
		memcpy(d, dims, (size_t)nd * sizeof *d);
	t->dims = d;
	t->n_dims = (size_t)nd;
	t->has_data_type = 1;
	t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
	t->has_raw_data = 1;
	t->raw_data.data = (uint8_t *)data;
	t->raw_data.len = count * sizeof(float);
	void **v = (void **)b->g->initializer;
	push(b, &v, &b->ninit, &b->capinit, t);
	b->g->initializer = (Onnx__TensorProto **)v;
	b->g->n_initializer = b->ninit;
}

/* A float32 value of shape (batch, dims...) for the graph's inputs and outputs. */
static Onnx__ValueInfoProto *value_info(build *b, const char *name, const int64_t *dims, int nd,
					const char *doc)
{
	Onnx__ValueInfoProto *v = zalloc(b, sizeof *v);
	Onnx__TypeProto *t = zalloc(b, sizeof *t);
	Onnx__TypeProto__Tensor *tt = zalloc(b, sizeof *tt);
	Onnx__TensorShapeProto *s = zalloc(b, sizeof *s);
	Onnx__TensorShapeProto__Dimension **dv = zalloc(b, (size_t)(nd + 1) * sizeof *dv);
	if (!v || !t || !tt || !s || !dv)
		return NULL;
	onnx__value_info_proto__init(v);
	onnx__type_proto__init(t);
	onnx__type_proto__tensor__init(tt);
	onnx__tensor_shape_proto__init(s);
	for (int i = 0; i <= nd; i++) {
		Onnx__TensorShapeProto__Dimension *d = zalloc(b, sizeof *d);
		if (!d)
			return NULL;
		onnx__tensor_shape_proto__dimension__init(d);
		if (i == 0) {
			d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
			d->dim_param = "batch";
		} else {
			d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
			d->dim_value = dims[i - 1];
		}
		dv[i] = d;
	}
	s->dim = dv;
	s->n_dim = (size_t)nd + 1;
	tt->has_elem_type = 1;
	tt->elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
	tt->shape = s;
	t->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
	t->tensor_type = tt;
	v->name = sdup(b, name);
	v->type = t;
	v->doc_string = doc ? sdup(b, doc) : NULL;
	return v;
}

/* ---- the model -------------------------------------------------------------- */

/* The checkpoint's float32 tensor `name` (checked by dp_ckpt_model). */
static const dp_st_tensor *tensor(build *b, const char *name)
{
	const dp_st_tensor *t = dp_st_find(b->ck, name);
	if (!t || t->dtype != DP_DT_F32)
		b->oom = 1; /* cannot happen after dp_ckpt_model's checks */
	return t;
}

/* Layer i's tensor named NAME.suffix as an initializer; its value name. */
static const char *weight(build *b, const dp_layer_info *li, const char *suffix)
{
	char *name = sfmt(b, "%s.%s", li->name, suffix);
	const dp_st_tensor *t = name ? tensor(b, name) : NULL;
	if (!t)
		return NULL;
	initializer(b, name, t->shape, t->ndim, t->data, t->nbytes / sizeof(float));
	return name;
}

static const char *act_op(int kind)
{
	switch (kind) {
	case DP_LAYER_RELU: return "Relu";
	case DP_LAYER_TANH: return "Tanh";
	default: return "Sigmoid";
	}
}

/* The scaling dp_data applies to a record's values before the model, as
 * nodes from "input"; the value the first layer reads. */
static const char *preprocess(build *b, const dp_run_conf *rc, const dp_shape *in)
{
	const char *x = "input";
	if (rc->decode != DP_DECODE_IMAGE && rc->hwc && in->rank == 3) {
		Onnx__NodeProto *n = node(b, "Transpose", "input.chw", "input.chw", 1, &x);
		Onnx__AttributeProto *a = attr_ints(b, "perm", (int64_t[]){0, 3, 1, 2}, 4);
		node_attrs(b, n, &a, 1);
		x = "input.chw";
	}
	float sc = rc->scale != 0 ? (float)rc->scale : 1.0f;
	if (rc->decode == DP_DECODE_IMAGE) { /* dp_image_transform's pack: v * mul + add */
		const dp_image_tf *t = &rc->img;
		int c = in->c;
		float *mul = zalloc(b, 2 * (size_t)c * sizeof *mul), *add = mul ? mul + c : NULL;
		if (!mul)
			return NULL;
		int any_add = 0;
		for (int ch = 0; ch < c; ch++) {
			float sd = t->std[ch] ? t->std[ch] : 1;
			mul[ch] = sc / sd;
			add[ch] = -t->mean[ch] / sd;
			any_add |= add[ch] != 0;
		}
		int64_t dims[3] = {c, 1, 1};
		initializer(b, "input.mul", dims, 3, mul, (size_t)c);
		node(b, "Mul", "input.scaled", "input.scaled", 2, (const char *[]){x, "input.mul"});
		x = "input.scaled";
		if (any_add) {
			initializer(b, "input.add", dims, 3, add, (size_t)c);
			node(b, "Add", "input.normalized", "input.normalized", 2,
			     (const char *[]){x, "input.add"});
			x = "input.normalized";
		}
	} else if (sc != 1.0f) {
		float *s = zalloc(b, sizeof *s);
		if (!s)
			return NULL;
		*s = sc;
		initializer(b, "input.scale", NULL, 0, s, 1);
		node(b, "Mul", "input.scaled", "input.scaled", 2, (const char *[]){x, "input.scale"});
		x = "input.scaled";
	}
	return x;
}

/* A convolution's or pooling's window on nd: kernel_shape, strides and
 * pads (the same at both ends, as dp_layer_info keeps them). */
static void window_attrs(build *b, Onnx__NodeProto *nd, const dp_layer_info *li)
{
	Onnx__AttributeProto *a[3] = {
		attr_ints(b, "kernel_shape", (int64_t[]){li->kh, li->kw}, 2),
		attr_ints(b, "strides", (int64_t[]){li->sh, li->sw}, 2),
		attr_ints(b, "pads", (int64_t[]){li->ph, li->pw, li->ph, li->pw}, 4)};
	node_attrs(b, nd, a, 3);
}

/* The nodes of every layer; out[i] the value layer i produces (a view's
 * is its input's).  Returns the model output's value. */
static const char *layers(build *b, const char *x0)
{
	int n = dp_model_nlayers(b->m);
	const char **out = zalloc(b, (size_t)(n + 1) * sizeof *out);
	if (!out)
		return NULL;
	for (int i = 0; i < n && !b->oom; i++) {
		dp_layer_info li;
		dp_model_layer(b->m, i, &li);
		const char *x = li.src < 0 ? x0 : out[li.src], *y = li.name;
		Onnx__NodeProto *nd = NULL;
		switch (li.kind) {
		case DP_LAYER_DENSE: {
			const char *w = weight(b, &li, "weight"), *bb = li.bias ? weight(b, &li, "bias") : NULL;
			nd = node(b, "Gemm", y, y, bb ? 3 : 2, (const char *[]){x, w, bb});
			Onnx__AttributeProto *a = attr_int(b, "transB", 1);
			node_attrs(b, nd, &a, 1);
			break;
		}
		case DP_LAYER_CONV: {
			const char *w = weight(b, &li, "weight"), *bb = li.bias ? weight(b, &li, "bias") : NULL;
			nd = node(b, "Conv", y, y, bb ? 3 : 2, (const char *[]){x, w, bb});
			window_attrs(b, nd, &li);
			break;
		}
		case DP_LAYER_MAXPOOL:
		case DP_LAYER_AVGPOOL: {
			if (li.global) {
				node(b, "GlobalAveragePool", y, y, 1, &x);
				break;
			}
			nd = node(b, li.kind == DP_LAYER_MAXPOOL ? "MaxPool" : "AveragePool", y, y, 1, &x);
			window_attrs(b, nd, &li);
			break;
		}
		case DP_LAYER_FLATTEN: {
			nd = node(b, "Flatten", y, y, 1, &x);
			Onnx__AttributeProto *a = attr_int(b, "axis", 1);
			node_attrs(b, nd, &a, 1);
			break;
		}
		case DP_LAYER_DROPOUT: /* inference: the identity */
		case DP_LAYER_SOFTMAX: /* the outputs' (logits, then probabilities) */
			y = x;
			break;
		case DP_LAYER_RELU:
		case DP_LAYER_TANH:
		case DP_LAYER_SIGMOID:
			node(b, act_op(li.kind), y, y, 1, &x);
			break;
		case DP_LAYER_BATCHNORM: {
			const char *in[5] = {x, weight(b, &li, "weight"), weight(b, &li, "bias"),
					     weight(b, &li, "running_mean"), weight(b, &li, "running_var")};
			nd = node(b, "BatchNormalization", y, y, 5, in);
			Onnx__AttributeProto *a = attr_float(b, "epsilon", li.eps);
			node_attrs(b, nd, &a, 1);
			break;
		}
		case DP_LAYER_ADD: {
			const char *x2 = li.src2 < 0 ? x0 : out[li.src2];
			if (!li.act) {
				node(b, "Add", y, y, 2, (const char *[]){x, x2});
				break;
			}
			const char *sum = sfmt(b, "%s.sum", li.name);
			node(b, "Add", sum, sum, 2, (const char *[]){x, x2});
			node(b, act_op(li.act == DP_ACT_RELU	   ? DP_LAYER_RELU
				       : li.act == DP_ACT_TANH ? DP_LAYER_TANH
							       : DP_LAYER_SIGMOID),
			     y, y, 1, &sum);
			break;
		}
		default:
			b->oom = 1;
			return NULL;
		}
		out[i] = y;
	}
	return n ? out[n - 1] : x0;
}

/* The class names as a JSON array. */
static char *classes_json(build *b, const dp_onnx_opts *o)
{
	dp_buf j = DP_BUF_INIT;
	dp_buf_addstr(&j, "[");
	for (size_t i = 0; i < o->nclasses; i++) {
		if (i)
			dp_buf_addstr(&j, ", ");
		dp_buf_json_str(&j, o->classes[i], strlen(o->classes[i]), 0);
	}
	dp_buf_addstr(&j, "]");
	char *s = j.err ? NULL : sdup(b, j.p);
	dp_buf_free(&j);
	if (!s)
		b->oom = 1;
	return s;
}

static void meta(build *b, Onnx__ModelProto *mp, const char *key, const char *value, size_t *cap)
{
	if (!value)
		return;
	Onnx__StringStringEntryProto *kv = zalloc(b, sizeof *kv);
	if (!kv)
		return;
	onnx__string_string_entry_proto__init(kv);
	kv->key = (char *)key;
	kv->value = sdup(b, value);
	void **v = (void **)mp->metadata_props;
	push(b, &v, &mp->n_metadata_props, cap, kv);
	mp->metadata_props = (Onnx__StringStringEntryProto **)v;
}

/* The graph's input (as records hold it, or the image's pixels) and its
 * outputs: y as "logits" and their softmax "probabilities" for a
 * classifier of k classes (cls), else "output".  iv (1), ov (2). */
static void graph_io(build *b, const dp_run_conf *rc, const dp_shape *in, const char *y, int cls,
		     size_t k, Onnx__ValueInfoProto **iv, Onnx__ValueInfoProto **ov)
{
	int64_t idims[3] = {in->c, in->h, in->w}, odims[1] = {(int64_t)k};
	int ind = in->rank == 3 ? 3 : 1;
	if (rc->decode != DP_DECODE_IMAGE && rc->hwc && in->rank == 3)
		idims[0] = in->h, idims[1] = in->w, idims[2] = in->c;
	iv[0] = value_info(b, "input", idims, ind,
			   rc->decode == DP_DECODE_IMAGE
				   ? "pixels 0..255 after the resize and crop of metadata 'image', "
				     "before scale/mean/std"
				   : "the feature's values as records hold them, before scale");
	size_t nout = 1;
	if (y && cls) {
		node(b, "Identity", "logits", "logits", 1, &y);
		Onnx__NodeProto *sm = node(b, "Softmax", "probabilities", "probabilities", 1,
					   (const char *[]){"logits"});
		Onnx__AttributeProto *a = attr_int(b, "axis", 1);
		node_attrs(b, sm, &a, 1);
		ov[0] = value_info(b, "logits", odims, 1, "class scores");
		ov[1] = value_info(b, "probabilities", odims, 1, "softmax of the logits");
		nout = 2;
	} else if (y) {
		node(b, "Identity", "output", "output", 1, &y);
		ov[0] = value_info(b, "output", odims, 1, "the model's outputs");
	}
	b->g->input = iv;
	b->g->n_input = 1;
	b->g->output = ov;
	b->g->n_output = nout;
}

/* The model's metadata_props: its spec, how its input is read, where it
 * comes from, the class names. */
static void model_meta(build *b, Onnx__ModelProto *mp, const dp_run_conf *rc, const dp_onnx_opts *o)
{
	const dp_st *ck = b->ck;
	size_t mcap = 0;
	char ib[512] = "", sb[40];
	if (rc->decode == DP_DECODE_IMAGE && dp_image_spec(&rc->img, ib, sizeof ib) < 0)
		ib[0] = 0;
	meta(b, mp, "model", dp_model_spec(b->m), &mcap);
	meta(b, mp, "input_shape", dp_st_meta(ck, "input_shape"), &mcap);
	meta(b, mp, "loss", dp_loss_name(dp_model_loss_kind(b->m)), &mcap);
	meta(b, mp, "decode", dp_decode_name(rc->decode), &mcap);
	meta(b, mp, "layout", rc->hwc && rc->decode != DP_DECODE_IMAGE ? "hwc" : "chw", &mcap);
	meta(b, mp, "scale", rc->scale_text ? rc->scale_text : dp_fmt_double(rc->scale ? rc->scale : 1, sb, sizeof sb), &mcap);
	if (ib[0])
		meta(b, mp, "image", ib, &mcap);
	meta(b, mp, "step", dp_st_meta(ck, "step"), &mcap);
	meta(b, mp, "source", dp_st_name(ck), &mcap);
	if (o->classes)
		meta(b, mp, "classes", classes_json(b, o), &mcap);
}

int dp_onnx_encode(const dp_st *ck, const dp_onnx_opts *o, uint8_t **outp, size_t *lenp, dp_err *e)
{
	static const dp_onnx_opts none = {0};
	if (!o)
		o = &none;
	build b = {.ck = ck};
	dp_run_conf rc;
	dp_run_conf_init(&rc);
	static const int keys[] = {DP_RUN_DECODE, DP_RUN_IMAGE, DP_RUN_LAYOUT, DP_RUN_SCALE, -1};
	int ret = DP_OK;
	if (!(b.m = dp_ckpt_model(ck, e)) || dp_run_conf_from(&rc, ck, keys, e) < 0) {
		ret = e ? e->code : DP_EDATA;
		goto out;
	}
	int cls = dp_model_loss_kind(b.m) == DP_LOSS_XENT;
	size_t k = dp_model_out_size(b.m);
	if (o->classes && (!cls || o->nclasses != k)) {
		ret = cls ? dp_seterr(e, DP_EARG, "%zu class names for a model of %zu classes",
				      o->nclasses, k)
			  : dp_seterr(e, DP_EARG, "class names for a regression model");
		goto out;
	}
	dp_shape in = dp_model_input(b.m);
	if (rc.decode == DP_DECODE_IMAGE && in.rank != 3) {
		ret = dp_seterr(e, DP_EDATA, "%s: an image model of input %zu values, not C x H x W",
				dp_st_name(ck), dp_shape_size(&in));
		goto out;
	}
	dp_image_tf ev;
	dp_image_tf_eval(&rc.img, &ev);
	rc.img = ev;

	Onnx__ModelProto mp;
	Onnx__GraphProto g;
	Onnx__OperatorSetIdProto ops;
	onnx__model_proto__init(&mp);
	onnx__graph_proto__init(&g);
	onnx__operator_set_id_proto__init(&ops);
	b.g = &g;
	const char *nm = strrchr(dp_st_name(ck), '/');
	g.name = (char *)(o->name ? o->name : nm ? nm + 1 : dp_st_name(ck));

	const char *x = preprocess(&b, &rc, &in);
	const char *y = x ? layers(&b, x) : NULL;
	Onnx__ValueInfoProto *iv[1] = {NULL}, *ov[2] = {NULL, NULL};
	graph_io(&b, &rc, &in, y, cls, k, iv, ov);
	g.doc_string = sfmt(&b, "dptools model %s over input %s", dp_model_spec(b.m),
			    dp_st_meta(ck, "input_shape"));

	ops.domain = "";
	ops.has_version = 1;
	ops.version = DP_ONNX_OPSET;
	Onnx__OperatorSetIdProto *opv[1] = {&ops};
	mp.has_ir_version = 1;
	mp.ir_version = DP_ONNX_IR_VERSION;
	mp.opset_import = opv;
	mp.n_opset_import = 1;
	mp.producer_name = "dptools";
	mp.producer_version = (char *)dp_version();
	mp.graph = &g;
	model_meta(&b, &mp, &rc, o);
	if (b.oom || !y || !iv[0] || !ov[0] || (g.n_output == 2 && !ov[1])) {
		ret = dp_seterr(e, DP_ENOMEM, "%s: out of memory", dp_st_name(ck));
		goto out;
	}
	size_t len = onnx__model_proto__get_packed_size(&mp);
	uint8_t *buf = malloc(len ? len : 1);
	if (!buf) {
		ret = dp_seterr(e, DP_ENOMEM, "%s: out of memory (%zu bytes of ONNX)", dp_st_name(ck), len);
		goto out;
	}
	onnx__model_proto__pack(&mp, buf);
	*outp = buf;
	*lenp = len;
out:
	arena_free(&b);
	dp_model_free(b.m);
	dp_run_conf_free(&rc);
	return ret;
}

int dp_onnx_write(const dp_st *ck, const dp_onnx_opts *o, const char *path, dp_err *e)
{
	uint8_t *buf;
	size_t len;
	int rc = dp_onnx_encode(ck, o, &buf, &len, e);
	if (rc < 0)
		return rc;
	dp_out out;
	if ((rc = dp_out_open(&out, path, e)) == DP_OK) {
		rc = dp_write_all(out.fd, buf, len, strcmp(path, "-") ? path : "stdout", e);
		if (rc < 0)
			dp_out_abort(&out);
		else
			rc = dp_out_commit(&out, e);
	}
	free(buf);
	return rc;
}
