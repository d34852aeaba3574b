/*
 * optim.c - SGD, Adam, AdamW and learning-rate schedules (dp_optim.h).
 * The arithmetic is the backend's; this file keeps the counters and the
 * scalars PyTorch computes in double precision (bias corrections).
 */
#define _GNU_SOURCE
#include "dp_optim.h"
#include "dp_nn.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dp_optim {
	dp_optim_conf c;
	const dp_backend *be;
	dp_bectx *ctx;
	size_t n;
	uint64_t t;
	int nstates;
	float *state[2];
	struct seg { /* fine-tuning: runs of tensors with the same settings */
		size_t off, count;
		double lr_mult;
		int decay, frozen;
	} *seg;
	int nseg;
};

int dp_optim_parse(const char *s)
{
	if (!strcmp(s, "sgd"))
		return DP_OPTIM_SGD;
	if (!strcmp(s, "adam"))
		return DP_OPTIM_ADAM;
	if (!strcmp(s, "adamw"))
		return DP_OPTIM_ADAMW;
	return 0;
}

const char *dp_optim_name(int kind)
{
	return kind == DP_OPTIM_SGD ? "sgd" : kind == DP_OPTIM_ADAM ? "adam" : kind == DP_OPTIM_ADAMW ? "adamw" : "?";
}

void dp_optim_defaults(dp_optim_conf *c, int kind)
{
	memset(c, 0, sizeof *c);
	c->kind = kind;
	c->beta1 = 0.9;
	c->beta2 = 0.999;
	c->eps = 1e-8;
	c->weight_decay = kind == DP_OPTIM_ADAMW ? 0.01 : 0.0;
}

int dp_optim_check(const dp_optim_conf *c, dp_err *e)
{
	if (c->kind < DP_OPTIM_SGD || c->kind > DP_OPTIM_ADAMW)
		return dp_seterr(e, DP_EARG, "unknown optimizer");
	if (!(c->momentum >= 0 && c->momentum < 1))
		return dp_seterr(e, DP_EARG, "momentum %g: want 0 <= momentum < 1", c->momentum);
	if (!(c->dampening >= 0 && c->dampening <= 1))
		return dp_seterr(e, DP_EARG, "dampening %g: want 0 <= dampening <= 1", c->dampening);
	if (c->nesterov && (c->momentum <= 0 || c->dampening != 0))
		return dp_seterr(e, DP_EARG, "nesterov needs a momentum and zero dampening");
	if (!(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1))
		return dp_seterr(e, DP_EARG, "betas %g, %g: want 0 <= beta < 1", c->beta1, c->beta2);
	if (!(c->eps >= 0) || !isfinite(c->eps))
		return dp_seterr(e, DP_EARG, "eps %g: want eps >= 0", c->eps);
	if (!(c->weight_decay >= 0) || !isfinite(c->weight_decay))
		return dp_seterr(e, DP_EARG, "weight decay %g: want >= 0", c->weight_decay);
	return DP_OK;
}

dp_optim *dp_optim_new(const dp_optim_conf *c, const dp_backend *be, dp_bectx *ctx, size_t n,
		       dp_err *e)
{
	if (dp_optim_check(c, e) < 0)
		return NULL;
	dp_optim *o = dp_zalloc(sizeof *o, e);
	if (!o)
		return NULL;
	o->c = *c;
	o->be = be;
	o->ctx = ctx;
	o->n = n;
	o->nstates = c->kind == DP_OPTIM_SGD ? (c->momentum > 0 ? 1 : 0) : 2;
	for (int j = 0; j < o->nstates; j++) {
		o->state[j] = be->alloc(ctx, (n ? n : 1) * sizeof(float));
		if (!o->state[j]) {
			dp_optim_free(o);
			dp_seterr(e, DP_ENOMEM, "out of memory for the optimizer state");
			return NULL;
		}
		be->fill(ctx, o->state[j], 0, n);
	}
	return o;
}

void dp_optim_free(dp_optim *o)
{
	if (!o)
		return;
	for (int j = 0; j < 2; j++)
		if (o->state[j])
			o->be->free(o->ctx, o->state[j]);
	free(o->seg);
	free(o);
}

const dp_optim_conf *dp_optim_conf_get(const dp_optim *o) { return &o->c; }
uint64_t dp_optim_steps(const dp_optim *o) { return o->t; }
void dp_optim_set_steps(dp_optim *o, uint64_t t) { o->t = t; }
int dp_optim_nstates(const dp_optim *o) { return o->nstates; }
float *dp_optim_state(dp_optim *o, int j) { return j >= 0 && j < o->nstates ? o->state[j] : NULL; }

const char *dp_optim_state_name(const dp_optim *o, int j)
{
	if (o->c.kind == DP_OPTIM_SGD)
		return j == 0 ? "momentum_buffer" : NULL;
	return j == 0 ? "exp_avg" : j == 1 ? "exp_avg_sq" : NULL;
}

/* The update of n parameters from off with learning rate lr and weight
 * decay wd (the state at the same offset). */
static void update(dp_optim *o, size_t off, size_t n, float *params, const float *grads, double lr,
		   double wd)
{
	float *s0 = o->state[0] ? o->state[0] + off : NULL, *s1 = o->state[1] ? o->state[1] + off : NULL;
	if (o->c.kind == DP_OPTIM_SGD) {
		dp_sgd_args a = {(float)lr, (float)o->c.momentum, (float)o->c.dampening, (float)wd,
				 o->c.nesterov, o->t == 1};
		o->be->sgd(o->ctx, n, params + off, grads + off, s0, &a);
		return;
	}
	double bc1 = 1 - pow(o->c.beta1, (double)o->t), bc2 = 1 - pow(o->c.beta2, (double)o->t);
	dp_adam_args a = {(float)lr,
			  (float)o->c.beta1,
			  (float)o->c.beta2,
			  (float)o->c.eps,
			  (float)wd,
			  o->c.kind == DP_OPTIM_ADAMW,
			  (float)(lr / bc1),
			  (float)sqrt(bc2)};
	o->be->adam(o->ctx, n, params + off, grads + off, s0, s1, &a);
}

void dp_optim_step(dp_optim *o, float *params, const float *grads, double lr)
{
	o->t++;
	if (!o->seg) {
		update(o, 0, o->n, params, grads, lr, o->c.weight_decay);
		return;
	}
	for (int i = 0; i < o->nseg; i++) {
		const struct seg *g = &o->seg[i];
		if (!g->frozen)
			update(o, g->off, g->count, params, grads, lr * g->lr_mult,
			       g->decay ? o->c.weight_decay : 0);
	}
}

/* ---- fine-tuning ----------------------------------------------------------- */

int dp_optim_set_tensors(dp_optim *o, const dp_model *m, const char *freeze,
			 const char *no_decay, const char *lr_mult, dp_err *e)
{
	int nt = dp_model_ntensors(m), rc = DP_OK;
	int *fz = calloc((size_t)nt + 1, sizeof *fz), *nd = calloc((size_t)nt + 1, sizeof *nd),
	    *lm = calloc((size_t)nt + 1, sizeof *lm);
	double *mult = NULL;
	struct seg *seg = calloc((size_t)nt + 1, sizeof *seg);
	if (!fz || !nd || !lm || !seg) {
		rc = dp_seterr(e, DP_ENOMEM, "out of memory");
		goto out;
	}
	if ((rc = dp_model_select(m, freeze, fz, e)) < 0 ||
	    (rc = dp_model_select(m, no_decay, nd, e)) < 0 ||
	    (rc = dp_model_select(m, lr_mult, lm, e)) < 0)
		goto out;
	int nm = 0; /* the multipliers, item by item */
	for (const char *p = lr_mult; p; p = strchr(p, ','), p = p ? p + 1 : NULL)
		nm++;
	if (!(mult = calloc((size_t)nm + 1, sizeof *mult))) {
		rc = dp_seterr(e, DP_ENOMEM, "out of memory");
		goto out;
	}
	int k = 0;
	for (const char *p = lr_mult; p; p = strchr(p, ','), p = p ? p + 1 : NULL, k++) {
		const char *eq = strchr(p, '='), *end = strchr(p, ',');
		char *stop;
		if (eq && (!end || eq < end)) {
			errno = 0;
			mult[k] = strtod(eq + 1, &stop);
		}
		if (!eq || (end && eq > end) || stop == eq + 1 || (*stop && *stop != ',') || errno ||
		    !(mult[k] >= 0) || !isfinite(mult[k])) {
			rc = dp_seterr(e, DP_EARG, "'%.*s': want PATTERN=MULTIPLIER (a number >= 0)",
				       (int)(end ? end - p : (long)strlen(p)), p);
			goto out;
		}
	}
	int ns = 0;
	for (int i = 0; i < nt; i++) {
		dp_tensor_info t;
		dp_model_tensor(m, i, &t);
		if (t.role != DP_TENSOR_PARAM)
			continue;
		struct seg g = {t.off, t.count, lm[i] ? mult[lm[i] - 1] : 1.0, !nd[i], fz[i] != 0};
		struct seg *l = ns ? &seg[ns - 1] : NULL;
		if (l && l->off + l->count == g.off && l->lr_mult == g.lr_mult && l->decay == g.decay &&
		    l->frozen == g.frozen)
			l->count += g.count;
		else
			seg[ns++] = g;
	}
	free(o->seg);
	o->seg = seg;
	o->nseg = ns;
	seg = NULL;
out:
	free(fz);
	free(nd);
	free(lm);
	free(mult);
	free(seg);
	return rc;
}

int dp_optim_frozen(const dp_optim *o, size_t off)
{
	for (int i = 0; i < o->nseg; i++)
		if (off >= o->seg[i].off && off < o->seg[i].off + o->seg[i].count)
			return o->seg[i].frozen;
	return 0;
}

/* ---- gradients ------------------------------------------------------------ */

void dp_grads_add(const dp_backend *be, dp_bectx *ctx, float *acc, const float *g, size_t n)
{
	be->add(ctx, n, acc, g, acc, DP_ACT_NONE);
}

double dp_grads_sumsq(const dp_backend *be, dp_bectx *ctx, const float *g, size_t n)
{
	return be->sumsq(ctx, g, n);
}

void dp_grads_clip_to(const dp_backend *be, dp_bectx *ctx, float *g, size_t n, double norm,
		      double max_norm)
{
	double coef = max_norm / (norm + 1e-6);
	if (coef < 1)
		be->scale(ctx, g, (float)coef, n);
}

double dp_grads_clip(const dp_backend *be, dp_bectx *ctx, float *g, size_t n, double max_norm)
{
	double ss = dp_grads_sumsq(be, ctx, g, n);
	if (ss < 0)
		return -1;
	dp_grads_clip_to(be, ctx, g, n, sqrt(ss), max_norm);
	return sqrt(ss);
}

/* ---- schedules ------------------------------------------------------------ */

static int num(const char *s, double *v)
{
	char *end;
	errno = 0;
	*v = strtod(s, &end);
	return end != s && !*end && !errno && isfinite(*v) ? 0 : -1;
}

int dp_sched_parse(const char *s, dp_sched *o, dp_err *e)
{
	uint64_t warmup = o->warmup, epochs = o->epochs;
	memset(o, 0, sizeof *o);
	o->warmup = warmup;
	o->epochs = epochs;
	char buf[128];
	if (strlen(s) >= sizeof buf)
		goto bad;
	strcpy(buf, s);
	char *a = strchr(buf, ':'), *b = NULL;
	if (a) {
		*a++ = 0;
		if ((b = strchr(a, ':')))
			*b++ = 0;
	}
	if (!strcmp(buf, "constant") && !a) {
		o->kind = DP_SCHED_CONSTANT;
	} else if (!strcmp(buf, "step") && a) {
		o->kind = DP_SCHED_STEP;
		o->gamma = 0.1;
		if (num(a, &o->every) < 0 || o->every < 1 || o->every != floor(o->every) ||
		    (b && (num(b, &o->gamma) < 0 || !(o->gamma > 0))))
			goto bad;
	} else if (!strcmp(buf, "cosine") && !b) {
		o->kind = DP_SCHED_COSINE;
		if (a && (num(a, &o->min_lr) < 0 || o->min_lr < 0))
			goto bad;
	} else {
		goto bad;
	}
	return DP_OK;
bad:
	return dp_seterr(e, DP_EARG,
			 "lr schedule '%s': want constant, step:EPOCHS[:GAMMA] or cosine[:MIN_LR]", s);
}

const char *dp_sched_format(const dp_sched *s, char *buf, size_t len)
{
	switch (s->kind) {
	case DP_SCHED_STEP:
		snprintf(buf, len, "step:%g:%g", s->every, s->gamma);
		break;
	case DP_SCHED_COSINE:
		if (s->min_lr > 0)
			snprintf(buf, len, "cosine:%g", s->min_lr);
		else
			snprintf(buf, len, "cosine");
		break;
	default:
		snprintf(buf, len, "constant");
	}
	return buf;
}

double dp_sched_lr(const dp_sched *s, double base, uint64_t epoch, uint64_t step)
{
	double lr = base;
	switch (s->kind) {
	case DP_SCHED_STEP:
		lr = base * pow(s->gamma, floor((double)epoch / s->every));
		break;
	case DP_SCHED_COSINE: {
		double T = s->epochs ? (double)s->epochs : 1;
		double x = (double)epoch < T ? (double)epoch / T : 1;
		lr = s->min_lr + (base - s->min_lr) * (1 + cos(M_PI * x)) / 2;
		break;
	}
	}
	if (s->warmup && step < s->warmup)
		lr *= (double)(step + 1) / (double)s->warmup;
	return lr;
}
