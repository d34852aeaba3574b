/*
 * cpu_dnnl.c - the CPU backend's convolutions by oneDNN (cpu_impl.h), as
 * PyTorch's are: forward, data gradient and filter gradient of one shape,
 * built when the build found oneDNN (Debian's libdnnl-dev, -DDP_WITH_DNNL).
 *
 * A shape's three passes are oneDNN primitives made once (cpu_dnnl_make,
 * at the shape's first use) with the layouts oneDNN prefers for it (its
 * blocked ones, nChw16c and the like: "format any"); our tensors stay
 * NCHW and OIHW at the interface, so each call reorders its inputs into
 * those layouts and its output back, in the workspace (what an eager
 * framework does at each convolution).  Bias and activation are the
 * forward primitive's own (a bias operand, an eltwise post-op); the
 * backward passes get dy with the activation's derivative already applied
 * and compute neither it nor the bias gradient (cpu_conv.c does, for every
 * implementation alike).  oneDNN's direct algorithm only (its Winograd is
 * ours to choose, cpu_wino.c), user-managed scratchpads in the workspace,
 * so a call allocates nothing.  oneDNN runs on OpenMP threads: as many as
 * the backend's (omp_set_num_threads before each call).  Its results are
 * deterministic for a given number of threads (no atomics in its CPU
 * convolutions), not equal to the bit to im2col's.
 */
#define _GNU_SOURCE
#include "cpu_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DP_WITH_DNNL
#include <oneapi/dnnl/dnnl.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* One operand of a pass: the layout the primitive takes (md) and, where
 * that is not the plain one, a reorder between the two (to it for inputs,
 * from it for the output) into a copy of `bytes` in the workspace. */
typedef struct dn_operand {
	int arg;              /* DNNL_ARG_SRC, ... */
	dnnl_memory_t plain;  /* the caller's tensor (NCHW, OIHW) */
	dnnl_memory_t mem;    /* what the primitive reads or writes */
	dnnl_primitive_t reorder; /* NULL: mem is the plain tensor itself */
	size_t bytes;         /* of the copy, 0 without */
} dn_operand;

/* One primitive: operands 0 and 1 in, 2 out; a bias (forward). */
typedef struct dn_pass {
	dnnl_primitive_t conv;
	dn_operand op[3];
	dnnl_memory_t bias, scratch;
	size_t scratch_bytes;
	size_t ws; /* the workspace it takes: the copies and the scratchpad */
} dn_pass;

/* The forward primitive by activation (made at its first use: none and
 * ReLU at once), the two backward ones. */
struct cpu_dnnl {
	dp_conv2d g;
	dn_pass fwd[4], dx, dw;
	float *zero; /* a bias of zeros, for calls without one */
	size_t ws;   /* the most any pass made at cpu_dnnl_make takes */
};

static void set_threads(const dp_bectx *c)
{
#ifdef _OPENMP
	omp_set_num_threads(c->threads);
#endif
}

int cpu_dnnl_open(dp_bectx *c, dp_err *e)
{
	if (dnnl_engine_create(&c->dn_engine, dnnl_cpu, 0) != dnnl_success ||
	    dnnl_stream_create(&c->dn_stream, c->dn_engine, dnnl_stream_default_flags) !=
		    dnnl_success)
		return dp_seterr(e, DP_EIO, "oneDNN: no CPU engine");
	/* oneDNN's SGEMM makes its kernels at its first call of each kind
	 * (tens of ms): made now, so that the timings at bind do not count
	 * them against the first 1x1 shape */
	float a[64] = {0}, b[64] = {0}, cc[64];
	for (int t = 0; t < 3; t++)
		dnnl_sgemm(t == 2 ? 'T' : 'N', t == 1 ? 'T' : 'N', 8, 8, 8, 1.0f, a, 8, b, 8, 0.0f, cc,
			   8);
	return DP_OK;
}

/* oneDNN's destroy functions take NULL, as free does. */
void cpu_dnnl_close(dp_bectx *c)
{
	dnnl_stream_destroy(c->dn_stream);
	dnnl_engine_destroy(c->dn_engine);
}

/* "oneDNN 2.6.3 (avx512_core_amx)": the library and (isa) the instructions
 * it runs on this CPU */
const char *cpu_dnnl_version(int isa_too)
{
	static char v[2][64];
	const dnnl_version_t *d = dnnl_version();
	static const struct {
		dnnl_cpu_isa_t isa;
		const char *name;
	} isas[] = {
		{dnnl_cpu_isa_avx512_core_amx, "avx512_core_amx"},
		{dnnl_cpu_isa_avx512_core_bf16, "avx512_core_bf16"},
		{dnnl_cpu_isa_avx512_core_vnni, "avx512_core_vnni"},
		{dnnl_cpu_isa_avx512_core, "avx512_core"},
		{dnnl_cpu_isa_avx2_vnni, "avx2_vnni"},
		{dnnl_cpu_isa_avx2, "avx2"},
		{dnnl_cpu_isa_avx, "avx"},
		{dnnl_cpu_isa_sse41, "sse41"},
	};
	dnnl_cpu_isa_t isa = isa_too ? dnnl_get_effective_cpu_isa() : dnnl_cpu_isa_all;
	const char *name = "generic";
	for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++)
		if ((isa & isas[i].isa) == isas[i].isa) {
			name = isas[i].name;
			break;
		}
	if (isa_too)
		snprintf(v[1], sizeof v[1], "oneDNN %d.%d.%d (%s)", d->major, d->minor, d->patch, name);
	else
		snprintf(v[0], sizeof v[0], "oneDNN %d.%d.%d", d->major, d->minor, d->patch);
	return v[isa_too != 0];
}

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

static void pass_free(dn_pass *p)
{
	dnnl_primitive_destroy(p->conv);
	for (int i = 0; i < 3; i++) {
		dn_operand *o = &p->op[i];
		dnnl_primitive_destroy(o->reorder);
		if (o->mem != o->plain)
			dnnl_memory_destroy(o->mem);
		dnnl_memory_destroy(o->plain);
	}
	dnnl_memory_destroy(p->bias);
	dnnl_memory_destroy(p->scratch);
	memset(p, 0, sizeof *p);
}

/* Operand o of pass p: arg, its plain layout, the primitive's (queried
 * from pd); out: the primitive writes it. */
static int operand(dp_bectx *c, dn_operand *o, int arg, const dnnl_memory_desc_t *plain,
		   const dnnl_memory_desc_t *md, int out)
{
	o->arg = arg;
	if (dnnl_memory_create(&o->plain, plain, c->dn_engine, DNNL_MEMORY_NONE) != dnnl_success)
		return -1;
	if (dnnl_memory_desc_equal(plain, md)) {
		o->mem = o->plain;
		return 0;
	}
	dnnl_primitive_desc_t rpd;
	if (dnnl_memory_create(&o->mem, md, c->dn_engine, DNNL_MEMORY_NONE) != dnnl_success ||
	    dnnl_reorder_primitive_desc_create(&rpd, out ? md : plain, c->dn_engine,
					       out ? plain : md, c->dn_engine, NULL) != dnnl_success)
		return -1;
	dnnl_status_t s = dnnl_primitive_create(&o->reorder, rpd);
	dnnl_primitive_desc_destroy(rpd);
	o->bytes = align64(dnnl_memory_desc_get_size(md));
	return s == dnnl_success ? 0 : -1;
}

/* Pass p from its primitive descriptor: operands (in, in, out) by
 * argument, their plain layouts given. */
static int pass_make(dp_bectx *c, dn_pass *p, dnnl_primitive_desc_t pd, const int arg[3],
		     const dnnl_memory_desc_t *plain[3])
{
	for (int i = 0; i < 3; i++) {
		const dnnl_memory_desc_t *md =
			dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, arg[i]);
		if (!md || operand(c, &p->op[i], arg[i], plain[i], md, i == 2) < 0)
			return -1;
	}
	const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
	p->scratch_bytes = smd ? align64(dnnl_memory_desc_get_size(smd)) : 0;
	if (p->scratch_bytes &&
	    dnnl_memory_create(&p->scratch, smd, c->dn_engine, DNNL_MEMORY_NONE) != dnnl_success)
		return -1;
	if (dnnl_primitive_create(&p->conv, pd) != dnnl_success)
		return -1;
	p->ws = p->op[0].bytes + p->op[1].bytes + p->op[2].bytes + p->scratch_bytes;
	return 0;
}

/* Plain layouts of a shape: x (n, c, h, w), w (k, c, kh, kw), y (n, k,
 * oh, ow), b (k); and the same dims with "any" layout. */
typedef struct dn_descs {
	dnnl_memory_desc_t x, w, y, b, xa, wa, ya;
	dnnl_dims_t stride, pl, pr;
} dn_descs;

static int descs(const dp_conv2d *g, dn_descs *d)
{
	dnnl_dims_t xd = {g->n, g->c, g->h, g->w}, wd = {g->k, g->c, g->kh, g->kw},
		    yd = {g->n, g->k, g->oh, g->ow}, bd = {g->k};
	/* the bottom and right padding that gives oh and ow: PyTorch's
	 * (ph again) or less, never below 0 (rows past the last window are
	 * left out, as oneDNN's floor division does) */
	long pb = (long)(g->oh - 1) * g->sh + g->kh - g->h - g->ph,
	     pr = (long)(g->ow - 1) * g->sw + g->kw - g->w - g->pw;
	d->stride[0] = g->sh;
	d->stride[1] = g->sw;
	d->pl[0] = g->ph;
	d->pl[1] = g->pw;
	d->pr[0] = pb > 0 ? pb : 0;
	d->pr[1] = pr > 0 ? pr : 0;
	if ((g->h + d->pl[0] + d->pr[0] - g->kh) / g->sh + 1 != g->oh ||
	    (g->w + d->pl[1] + d->pr[1] - g->kw) / g->sw + 1 != g->ow)
		return -1;
	return dnnl_memory_desc_init_by_tag(&d->x, 4, xd, dnnl_f32, dnnl_nchw) ||
			       dnnl_memory_desc_init_by_tag(&d->w, 4, wd, dnnl_f32, dnnl_oihw) ||
			       dnnl_memory_desc_init_by_tag(&d->y, 4, yd, dnnl_f32, dnnl_nchw) ||
			       dnnl_memory_desc_init_by_tag(&d->b, 1, bd, dnnl_f32, dnnl_x) ||
			       dnnl_memory_desc_init_by_tag(&d->xa, 4, xd, dnnl_f32,
							    dnnl_format_tag_any) ||
			       dnnl_memory_desc_init_by_tag(&d->wa, 4, wd, dnnl_f32,
							    dnnl_format_tag_any) ||
			       dnnl_memory_desc_init_by_tag(&d->ya, 4, yd, dnnl_f32,
							    dnnl_format_tag_any)
		       ? -1
		       : 0;
}

static dnnl_alg_kind_t eltwise_of(int act)
{
	return act == DP_ACT_RELU ? dnnl_eltwise_relu
	       : act == DP_ACT_TANH ? dnnl_eltwise_tanh
				    : dnnl_eltwise_logistic;
}

/* The forward primitive descriptor with bias and activation act (attr
 * scratchpad user); *pd NULL when oneDNN has none. */
static dnnl_primitive_desc_t fwd_pd(dp_bectx *c, const dn_descs *d, int act)
{
	dnnl_convolution_desc_t cd;
	dnnl_primitive_attr_t attr = NULL;
	dnnl_post_ops_t po = NULL;
	dnnl_primitive_desc_t pd = NULL;
	if (dnnl_convolution_forward_desc_init(&cd, dnnl_forward_training, dnnl_convolution_direct,
					       &d->xa, &d->wa, &d->b, &d->ya, d->stride, d->pl,
					       d->pr) != dnnl_success ||
	    dnnl_primitive_attr_create(&attr) != dnnl_success ||
	    dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) != dnnl_success)
		goto out;
	if (act && (dnnl_post_ops_create(&po) != dnnl_success ||
		    dnnl_post_ops_append_eltwise(po, 1.0f, eltwise_of(act), 0.0f, 0.0f) !=
			    dnnl_success ||
		    dnnl_primitive_attr_set_post_ops(attr, po) != dnnl_success))
		goto out;
	if (dnnl_primitive_desc_create(&pd, &cd, attr, c->dn_engine, NULL) != dnnl_success)
		pd = NULL;
out:
	dnnl_post_ops_destroy(po);
	dnnl_primitive_attr_destroy(attr);
	return pd;
}

/* The forward pass for act, made now; -1 when oneDNN has none. */
static int fwd_make(dp_bectx *c, cpu_dnnl *d, const dn_descs *ds, int act)
{
	dnnl_primitive_desc_t pd = fwd_pd(c, ds, act);
	if (!pd)
		return -1;
	static const int arg[3] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST};
	const dnnl_memory_desc_t *plain[3] = {&ds->x, &ds->w, &ds->y};
	dn_pass *p = &d->fwd[act];
	int rc = pass_make(c, p, pd, arg, plain);
	dnnl_primitive_desc_destroy(pd);
	if (rc == 0 && dnnl_memory_create(&p->bias, &ds->b, c->dn_engine, DNNL_MEMORY_NONE) !=
			       dnnl_success)
		rc = -1;
	if (rc < 0)
		pass_free(p);
	return rc;
}

/* The backward passes, with the forward's descriptor as their hint: data,
 * dy (diff_dst) and w -> dx (diff_src); filters, x (src) and dy
 * (diff_dst) -> dw (diff_weights), no bias. */
static int bwd_make(dp_bectx *c, cpu_dnnl *d, const dn_descs *ds)
{
	static const int arg[2][3] = {{DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC},
				      {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS}};
	const dnnl_memory_desc_t *plain[2][3] = {{&ds->y, &ds->w, &ds->x}, {&ds->x, &ds->y, &ds->w}};
	dn_pass *pass[2] = {&d->dx, &d->dw};
	dnnl_primitive_desc_t hint = fwd_pd(c, ds, 0);
	dnnl_primitive_attr_t attr = NULL;
	dnnl_convolution_desc_t cd[2];
	int rc = -1;
	if (!hint || dnnl_primitive_attr_create(&attr) != dnnl_success ||
	    dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) != dnnl_success ||
	    dnnl_convolution_backward_data_desc_init(&cd[0], dnnl_convolution_direct, &ds->xa,
						     &ds->wa, &ds->ya, ds->stride, ds->pl,
						     ds->pr) != dnnl_success ||
	    dnnl_convolution_backward_weights_desc_init(&cd[1], dnnl_convolution_direct, &ds->xa,
							&ds->wa, NULL, &ds->ya, ds->stride, ds->pl,
							ds->pr) != dnnl_success)
		goto out;
	for (int i = 0; i < 2; i++) {
		dnnl_primitive_desc_t pd = NULL;
		rc = dnnl_primitive_desc_create(&pd, &cd[i], attr, c->dn_engine, hint) == dnnl_success
			     ? pass_make(c, pass[i], pd, arg[i], plain[i])
			     : -1;
		dnnl_primitive_desc_destroy(pd);
		if (rc < 0)
			break;
	}
out:
	dnnl_primitive_desc_destroy(hint);
	dnnl_primitive_attr_destroy(attr);
	return rc;
}

void cpu_dnnl_free(cpu_dnnl *d)
{
	if (!d)
		return;
	for (int a = 0; a < 4; a++)
		pass_free(&d->fwd[a]);
	pass_free(&d->dx);
	pass_free(&d->dw);
	free(d->zero);
	free(d);
}

cpu_dnnl *cpu_dnnl_make(dp_bectx *c, const dp_conv2d *g)
{
	dn_descs ds;
	if (!c->dn_engine || descs(g, &ds) < 0)
		return NULL;
	cpu_dnnl *d = calloc(1, sizeof *d);
	if (!d || !(d->zero = calloc((size_t)g->k, sizeof *d->zero)))
		goto fail;
	d->g = *g;
	set_threads(c);
	if (fwd_make(c, d, &ds, DP_ACT_NONE) < 0 || fwd_make(c, d, &ds, DP_ACT_RELU) < 0 ||
	    bwd_make(c, d, &ds) < 0)
		goto fail;
	dn_pass *all[] = {&d->fwd[0], &d->fwd[DP_ACT_RELU], &d->dx, &d->dw};
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
		d->ws = all[i]->ws > d->ws ? all[i]->ws : d->ws;
	return d;
fail:
	cpu_dnnl_free(d);
	return NULL;
}

size_t cpu_dnnl_ws(const cpu_dnnl *d) { return d->ws; }

/* Run pass p: in0, in1 -> out (plain tensors), bias (forward, or NULL),
 * the copies and scratchpad in ws.  -1 when oneDNN fails (it allocates
 * nothing here, so only a broken library does). */
static int pass_run(dp_bectx *c, dn_pass *p, const void *in0, const void *in1, void *out,
		    const float *bias, void *ws)
{
	const void *user[3] = {in0, in1, out};
	char *at = ws;
	dnnl_exec_arg_t args[5];
	int na = 0;
	set_threads(c);
	for (int i = 0; i < 3; i++) {
		dn_operand *o = &p->op[i];
		if (dnnl_memory_set_data_handle(o->plain, (void *)user[i]) != dnnl_success)
			return -1;
		if (o->reorder) {
			if (dnnl_memory_set_data_handle(o->mem, at) != dnnl_success)
				return -1;
			at += o->bytes;
		}
		if (o->reorder && i < 2) {
			dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, o->plain}, {DNNL_ARG_TO, o->mem}};
			if (dnnl_primitive_execute(o->reorder, c->dn_stream, 2, ra) != dnnl_success)
				return -1;
		}
		args[na++] = (dnnl_exec_arg_t){o->arg, o->mem};
	}
	if (p->bias) {
		if (dnnl_memory_set_data_handle(p->bias, (void *)bias) != dnnl_success)
			return -1;
		args[na++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, p->bias};
	}
	if (p->scratch) {
		if (dnnl_memory_set_data_handle(p->scratch, at) != dnnl_success)
			return -1;
		args[na++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, p->scratch};
	}
	if (dnnl_primitive_execute(p->conv, c->dn_stream, na, args) != dnnl_success)
		return -1;
	dn_operand *o = &p->op[2];
	if (o->reorder) {
		dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, o->mem}, {DNNL_ARG_TO, o->plain}};
		if (dnnl_primitive_execute(o->reorder, c->dn_stream, 2, ra) != dnnl_success)
			return -1;
	}
	return dnnl_stream_wait(c->dn_stream) == dnnl_success ? 0 : -1;
}

static void failed(dp_bectx *c, const dp_conv2d *g, const char *what)
{
	if (!c->fail[0])
		snprintf(c->fail, sizeof c->fail,
			 "oneDNN: the %s of a convolution %dx%dx%dx%d -> %d (%dx%d) failed", what,
			 g->n, g->c, g->h, g->w, g->k, g->kh, g->kw);
}

void cpu_dnnl_fwd(dp_bectx *c, cpu_dnnl *d, const float *x, const float *w, const float *b,
		  int act, float *y, void *ws)
{
	dn_pass *p = &d->fwd[act];
	if (!p->conv) { /* tanh, sigmoid: made now if their copies fit */
		dn_descs ds;
		if (descs(&d->g, &ds) == 0 && fwd_make(c, d, &ds, act) == 0 && p->ws > d->ws)
			pass_free(p);
		if (!p->conv) { /* the plain forward, then the activation */
			cpu_dnnl_fwd(c, d, x, w, b, DP_ACT_NONE, y, ws);
			cpu_bias_act(y, (size_t)d->g.n * d->g.k * d->g.oh * d->g.ow, 0.0f, act);
			return;
		}
	}
	if (pass_run(c, p, x, w, y, b ? b : d->zero, ws) < 0)
		failed(c, &d->g, "forward pass");
}

void cpu_dnnl_dx(dp_bectx *c, cpu_dnnl *d, const float *dy, const float *w, float *dx, void *ws)
{
	if (pass_run(c, &d->dx, dy, w, dx, NULL, ws) < 0)
		failed(c, &d->g, "input gradient");
}

void cpu_dnnl_dw(dp_bectx *c, cpu_dnnl *d, const float *x, const float *dy, float *dw, void *ws)
{
	if (pass_run(c, &d->dw, x, dy, dw, NULL, ws) < 0)
		failed(c, &d->g, "filter gradient");
}

/* C (m, n) = op(A) op(B) + beta C, row-major, by oneDNN's SGEMM (its JIT
 * kernels, which run ResNet-50's 1x1 convolutions on 56x56 and 28x28
 * planes 10-35% faster than OpenBLAS's on one AVX-512 core: the pointwise
 * implementation, cpu_conv.c); on all of c's threads, or (whole 0) on the
 * calling one (inside cpu_par_run's parts oneDNN runs on that thread
 * alone).  Deterministic for a number of threads. */
void cpu_dnnl_sgemm(dp_bectx *c, int whole, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb,
		    int m, int n, int k, const float *a, int lda, const float *b, int ldb,
		    float beta, float *cc, int ldc)
{
#ifdef _OPENMP
	if (!omp_in_parallel())
		omp_set_num_threads(whole ? c->threads : 1);
#endif
	if (dnnl_sgemm(ta == CblasTrans ? 'T' : 'N', tb == CblasTrans ? 'T' : 'N', m, n, k, 1.0f, a,
		       lda, b, ldb, beta, cc, ldc) != dnnl_success &&
	    !c->fail[0])
		snprintf(c->fail, sizeof c->fail, "oneDNN: an SGEMM (%d, %d, %d) failed", m, n, k);
#ifdef _OPENMP
	if (!omp_in_parallel())
		omp_set_num_threads(c->threads);
#endif
}

#else /* no oneDNN in this build */

int cpu_dnnl_open(dp_bectx *c, dp_err *e) { return DP_OK; }
void cpu_dnnl_close(dp_bectx *c) {}
const char *cpu_dnnl_version(int isa_too) { return NULL; }
cpu_dnnl *cpu_dnnl_make(dp_bectx *c, const dp_conv2d *g) { return NULL; }
void cpu_dnnl_free(cpu_dnnl *d) {}
size_t cpu_dnnl_ws(const cpu_dnnl *d) { return 0; }
void cpu_dnnl_fwd(dp_bectx *c, cpu_dnnl *d, const float *x, const float *w, const float *b,
		  int act, float *y, void *ws)
{
}
void cpu_dnnl_dx(dp_bectx *c, cpu_dnnl *d, const float *dy, const float *w, float *dx, void *ws) {}
void cpu_dnnl_dw(dp_bectx *c, cpu_dnnl *d, const float *x, const float *dy, float *dw, void *ws) {}
void cpu_dnnl_sgemm(dp_bectx *c, int whole, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb,
		    int m, int n, int k, const float *a, int lda, const float *b, int ldb,
		    float beta, float *cc, int ldc)
{
	cpu_sgemm(whole ? c : NULL, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, cc, ldc);
}

#endif
