/*
 * eval.c - evaluation metrics and gates (dp_eval.h).
 *
 * The exact accumulator: a finite double v = m * 2^x with |m| < 2^53
 * integer and x >= -1074.  The sum is kept as an integer count of units
 * 2^XSUM_BASE, in 32-bit limbs held in int64s; adding v adds |m| shifted
 * into (at most) three consecutive limbs, with v's sign.  Limbs may go
 * past 32 bits between normalisations (a carry pass), which run every
 * 2^30 additions, so no limb overflows.  Normalised, limbs 0..N-2 lie in
 * [0, 2^32) and the top one carries the sign (two's complement in base
 * 2^32).
 */
#include "dp_eval.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XSUM_BASE (-1152) /* a multiple of 32 below 2^-1074 less 53 bits */
#define XSUM_NORM_EVERY (1u << 30)

void dp_xsum_init(dp_xsum *s) { memset(s, 0, sizeof *s); }

static void xsum_norm(dp_xsum *s)
{
	for (int i = 0; i < DP_XSUM_LIMBS - 1; i++) {
		int64_t c = s->limb[i] >> 32; /* floor division by 2^32 */
		s->limb[i] -= c * ((int64_t)1 << 32);
		s->limb[i + 1] += c;
	}
	s->pending = 0;
}

void dp_xsum_add(dp_xsum *s, double v)
{
	if (v == 0)
		return;
	if (!isfinite(v)) {
		if (isnan(v))
			s->nan++;
		else if (v > 0)
			s->pinf++;
		else
			s->ninf++;
		return;
	}
	int ex;
	double f = frexp(fabs(v), &ex); /* |v| = f 2^ex, f in [0.5, 1) */
	uint64_t m = (uint64_t)ldexp(f, 53);
	int p = ex - 53 - XSUM_BASE; /* bit position of m's unit */
	int j = p >> 5, sh = p & 31;
	unsigned __int128 u = (unsigned __int128)m << sh;
	int64_t a = (int64_t)(uint32_t)u, b = (int64_t)(uint32_t)(u >> 32),
		c = (int64_t)(uint32_t)(u >> 64);
	if (v < 0)
		a = -a, b = -b, c = -c;
	s->limb[j] += a;
	s->limb[j + 1] += b;
	s->limb[j + 2] += c;
	if (++s->pending >= XSUM_NORM_EVERY)
		xsum_norm(s);
}

void dp_xsum_merge(dp_xsum *a, const dp_xsum *b)
{
	dp_xsum t = *b;
	xsum_norm(&t);
	xsum_norm(a);
	for (int i = 0; i < DP_XSUM_LIMBS; i++)
		a->limb[i] += t.limb[i];
	xsum_norm(a);
	a->nan += b->nan;
	a->pinf += b->pinf;
	a->ninf += b->ninf;
}

double dp_xsum_value(const dp_xsum *s0)
{
	if (s0->nan || (s0->pinf && s0->ninf))
		return NAN;
	if (s0->pinf)
		return INFINITY;
	if (s0->ninf)
		return -INFINITY;
	dp_xsum s = *s0;
	xsum_norm(&s);
	int neg = s.limb[DP_XSUM_LIMBS - 1] < 0;
	if (neg) { /* negate: two's complement in base 2^32 */
		for (int i = 0; i < DP_XSUM_LIMBS; i++)
			s.limb[i] = -s.limb[i];
		xsum_norm(&s);
	}
	int h = DP_XSUM_LIMBS - 1;
	while (h >= 0 && s.limb[h] == 0)
		h--;
	if (h < 0)
		return 0.0;
	/* Round to nearest, ties to even: the top three limbs hold at least
	 * 65 significant bits (53, a round bit and more); anything below them
	 * only decides ties (sticky). */
	int lo = h - 2 < 0 ? 0 : h - 2;
	unsigned __int128 u = 0;
	for (int i = h; i >= lo; i--)
		u = (u << 32) | (uint32_t)s.limb[i];
	int sticky = 0;
	for (int i = lo - 1; i >= 0; i--)
		sticky |= s.limb[i] != 0;
	int lead = 127;
	while (!((u >> lead) & 1))
		lead--;
	int shift = lead > 52 ? lead - 52 : 0;
	uint64_t mant = (uint64_t)(u >> shift);
	if (shift) {
		unsigned __int128 rem = u & (((unsigned __int128)1 << shift) - 1),
				  half = (unsigned __int128)1 << (shift - 1);
		if (rem > half || (rem == half && (sticky || (mant & 1))))
			mant++;
	}
	double r = ldexp((double)mant, shift + 32 * lo + XSUM_BASE);
	return neg ? -r : r;
}

void dp_xsum_export(const dp_xsum *s0, double *v)
{
	dp_xsum s = *s0;
	xsum_norm(&s);
	for (int i = 0; i < DP_XSUM_LIMBS; i++)
		v[i] = (double)s.limb[i];
	v[DP_XSUM_LIMBS] = (double)s.nan;
	v[DP_XSUM_LIMBS + 1] = (double)s.pinf;
	v[DP_XSUM_LIMBS + 2] = (double)s.ninf;
}

static int int_ok(double d) { return d == floor(d) && fabs(d) < 9007199254740992.0; }

int dp_xsum_import(dp_xsum *s, const double *v)
{
	for (int i = 0; i < DP_XSUM_LIMBS + 3; i++)
		if (!int_ok(v[i]) || (i >= DP_XSUM_LIMBS && v[i] < 0))
			return DP_EDATA;
	for (int i = 0; i < DP_XSUM_LIMBS; i++)
		s->limb[i] = (int64_t)v[i];
	s->nan = (uint64_t)v[DP_XSUM_LIMBS];
	s->pinf = (uint64_t)v[DP_XSUM_LIMBS + 1];
	s->ninf = (uint64_t)v[DP_XSUM_LIMBS + 2];
	xsum_norm(s);
	return DP_OK;
}

/* ---- the accumulator ---------------------------------------------------------- */

/* A regression output's exact sums. */
typedef struct out_sums {
	dp_xsum sse, sae, sy, syy;
} out_sums;

/* The arrays live in the same block as the struct, after it: every piece
 * holds 8-byte members only, so each stays aligned. */
struct dp_eval {
	int kind;
	size_t k, topk;
	uint64_t n;
	uint64_t skipped; /* records skipped as corrupt (dp_eval_add_skipped) */
	dp_xsum loss;
	/* classes */
	uint64_t correct, topk_correct;
	dp_eval_class *cls;    /* (k): the counts, and the rates of the last report */
	uint64_t *confusion;   /* (k, k) or NULL */
	double *scratch;       /* (k) */
	/* regression */
	out_sums *sums;        /* (k) */
	dp_eval_output *outs;  /* (k): the last report's */
};

void dp_eval_free(dp_eval *ev) { free(ev); }

dp_eval *dp_eval_new(int kind, size_t k, size_t topk, dp_err *e)
{
	if ((kind != DP_EVAL_CLASS && kind != DP_EVAL_REGRESSION) || k < 1 ||
	    (kind == DP_EVAL_CLASS && (k < 2 || topk >= k)) || k > ((size_t)1 << 24)) {
		dp_seterr(e, DP_EARG, "eval: bad arguments");
		return NULL;
	}
	int cls = kind == DP_EVAL_CLASS;
	size_t nconf = cls && k <= DP_EVAL_CONFUSION_MAX ? k * k : 0;
	size_t per = cls ? sizeof(dp_eval_class) + sizeof(double)
			 : sizeof(out_sums) + sizeof(dp_eval_output);
	dp_eval *ev = calloc(1, sizeof *ev + k * per + nconf * sizeof(uint64_t));
	if (!ev) {
		dp_seterr(e, DP_ENOMEM, "out of memory");
		return NULL;
	}
	ev->kind = kind;
	ev->k = k;
	dp_xsum_init(&ev->loss);
	if (cls) {
		ev->topk = topk;
		ev->cls = (dp_eval_class *)(ev + 1);
		ev->scratch = (double *)(ev->cls + k);
		ev->confusion = nconf ? (uint64_t *)(ev->scratch + k) : NULL;
	} else {
		ev->sums = (out_sums *)(ev + 1);
		ev->outs = (dp_eval_output *)(ev->sums + k);
	}
	return ev;
}

void dp_eval_reset(dp_eval *ev)
{
	size_t k = ev->k;
	ev->n = ev->correct = ev->topk_correct = ev->skipped = 0;
	dp_xsum_init(&ev->loss);
	if (ev->kind == DP_EVAL_CLASS) {
		memset(ev->cls, 0, k * sizeof *ev->cls);
		if (ev->confusion)
			memset(ev->confusion, 0, k * k * sizeof *ev->confusion);
	} else {
		for (size_t j = 0; j < k; j++) {
			dp_xsum_init(&ev->sums[j].sse);
			dp_xsum_init(&ev->sums[j].sae);
			dp_xsum_init(&ev->sums[j].sy);
			dp_xsum_init(&ev->sums[j].syy);
		}
	}
}

int dp_eval_kind(const dp_eval *ev) { return ev->kind; }
size_t dp_eval_k(const dp_eval *ev) { return ev->k; }
size_t dp_eval_topk(const dp_eval *ev) { return ev->topk; }

int dp_eval_add_class(dp_eval *ev, const float *logits, const int32_t *labels, size_t n,
		      int32_t *pred, double *loss, float *prob, dp_err *e)
{
	if (ev->kind != DP_EVAL_CLASS)
		return dp_seterr(e, DP_EARG, "eval: not a classifier");
	size_t k = ev->k;
	for (size_t i = 0; i < n; i++)
		if (labels[i] < 0 || (size_t)labels[i] >= k)
			return dp_seterr(e, DP_EARG, "sample %zu: label %" PRId32 " outside 0..%zu", i,
					 labels[i], k - 1);
	double *ex = ev->scratch;
	for (size_t i = 0; i < n; i++) {
		const float *z = logits + i * k;
		int32_t y = labels[i];
		size_t am = 0;
		for (size_t j = 1; j < k; j++)
			if (z[j] > z[am] || (isnan(z[j]) && !isnan(z[am])))
				am = j;
		/* log-sum-exp in double, shifted by the maximum */
		double mx = z[am], s = 0;
		for (size_t j = 0; j < k; j++)
			s += ex[j] = exp((double)z[j] - mx);
		double l = log(s) - ((double)z[y] - mx);
		dp_xsum_add(&ev->loss, l);
		size_t above = 0;
		for (size_t j = 0; j < k; j++)
			above += z[j] > z[y];
		ev->correct += am == (size_t)y;
		ev->topk_correct += ev->topk && above < ev->topk;
		ev->cls[y].support++;
		ev->cls[am].predicted++;
		ev->cls[y].tp += am == (size_t)y;
		if (ev->confusion)
			ev->confusion[(size_t)y * k + am]++;
		if (pred)
			pred[i] = (int32_t)am;
		if (loss)
			loss[i] = l;
		if (prob)
			for (size_t j = 0; j < k; j++)
				prob[i * k + j] = (float)(ex[j] / s);
	}
	ev->n += n;
	return DP_OK;
}

void dp_eval_add_skipped(dp_eval *ev, uint64_t n) { ev->skipped += n; }

int dp_eval_add_regression(dp_eval *ev, const float *out, const float *target, size_t n,
			   double *loss, dp_err *e)
{
	if (ev->kind != DP_EVAL_REGRESSION)
		return dp_seterr(e, DP_EARG, "eval: not a regression model");
	size_t k = ev->k;
	for (size_t i = 0; i < n; i++) {
		double se = 0;
		for (size_t j = 0; j < k; j++) {
			double y = target[i * k + j], d = (double)out[i * k + j] - y;
			out_sums *o = &ev->sums[j];
			dp_xsum_add(&o->sse, d * d);
			dp_xsum_add(&o->sae, fabs(d));
			dp_xsum_add(&o->sy, y);
			dp_xsum_add(&o->syy, y * y); /* exact: a float squared fits a double */
			se += d * d;
		}
		double l = se / (double)k;
		dp_xsum_add(&ev->loss, l);
		if (loss)
			loss[i] = l;
	}
	ev->n += n;
	return DP_OK;
}

/* ---- state ------------------------------------------------------------------------ */

size_t dp_eval_state_size(const dp_eval *ev)
{
	size_t k = ev->k;
	if (ev->kind == DP_EVAL_CLASS)
		return 4 + 3 * k + (ev->confusion ? k * k : 0) + DP_XSUM_DOUBLES;
	return 2 + DP_XSUM_DOUBLES + 4 * k * DP_XSUM_DOUBLES;
}

void dp_eval_state_get(const dp_eval *ev, double *v)
{
	size_t k = ev->k, o = 0;
	v[o++] = (double)ev->n;
	v[o++] = (double)ev->skipped;
	if (ev->kind == DP_EVAL_CLASS) {
		v[o++] = (double)ev->correct;
		v[o++] = (double)ev->topk_correct;
		for (size_t j = 0; j < k; j++) {
			v[o++] = (double)ev->cls[j].support;
			v[o++] = (double)ev->cls[j].predicted;
			v[o++] = (double)ev->cls[j].tp;
		}
		if (ev->confusion)
			for (size_t j = 0; j < k * k; j++)
				v[o++] = (double)ev->confusion[j];
	}
	dp_xsum_export(&ev->loss, v + o);
	o += DP_XSUM_DOUBLES;
	if (ev->kind == DP_EVAL_REGRESSION)
		for (size_t j = 0; j < k; j++) {
			dp_xsum_export(&ev->sums[j].sse, v + o);
			dp_xsum_export(&ev->sums[j].sae, v + o + DP_XSUM_DOUBLES);
			dp_xsum_export(&ev->sums[j].sy, v + o + 2 * DP_XSUM_DOUBLES);
			dp_xsum_export(&ev->sums[j].syy, v + o + 3 * DP_XSUM_DOUBLES);
			o += 4 * DP_XSUM_DOUBLES;
		}
}

static int count_of(double d, uint64_t *out)
{
	if (!int_ok(d) || d < 0)
		return -1;
	*out = (uint64_t)d;
	return 0;
}

int dp_eval_state_set(dp_eval *ev, const double *v, dp_err *e)
{
	size_t k = ev->k, o = 0;
	int bad = count_of(v[o++], &ev->n);
	bad |= count_of(v[o++], &ev->skipped);
	if (ev->kind == DP_EVAL_CLASS) {
		bad |= count_of(v[o++], &ev->correct);
		bad |= count_of(v[o++], &ev->topk_correct);
		for (size_t j = 0; j < k; j++) {
			bad |= count_of(v[o++], &ev->cls[j].support);
			bad |= count_of(v[o++], &ev->cls[j].predicted);
			bad |= count_of(v[o++], &ev->cls[j].tp);
		}
		if (ev->confusion)
			for (size_t j = 0; j < k * k; j++)
				bad |= count_of(v[o++], &ev->confusion[j]);
	}
	bad |= dp_xsum_import(&ev->loss, v + o) < 0;
	o += DP_XSUM_DOUBLES;
	if (ev->kind == DP_EVAL_REGRESSION)
		for (size_t j = 0; j < k; j++) {
			bad |= dp_xsum_import(&ev->sums[j].sse, v + o) < 0;
			bad |= dp_xsum_import(&ev->sums[j].sae, v + o + DP_XSUM_DOUBLES) < 0;
			bad |= dp_xsum_import(&ev->sums[j].sy, v + o + 2 * DP_XSUM_DOUBLES) < 0;
			bad |= dp_xsum_import(&ev->sums[j].syy, v + o + 3 * DP_XSUM_DOUBLES) < 0;
			o += 4 * DP_XSUM_DOUBLES;
		}
	return bad ? dp_seterr(e, DP_EDATA, "eval: combined state is not valid") : DP_OK;
}

/* ---- results ------------------------------------------------------------------------ */

static double ratio(uint64_t a, uint64_t b) { return b ? (double)a / (double)b : 0.0; }

int dp_eval_report_get(dp_eval *ev, dp_eval_report *r, dp_err *e)
{
	memset(r, 0, sizeof *r);
	r->kind = ev->kind;
	r->k = ev->k;
	r->topk = ev->topk;
	r->samples = ev->n;
	r->skipped = ev->skipped;
	r->skipped_fraction = ratio(ev->skipped, ev->skipped + ev->n);
	if (!ev->n)
		return ev->skipped ? dp_seterr(e, DP_EDATA, "no samples to evaluate (%" PRIu64
					       " skipped as corrupt, every one)", ev->skipped)
				   : dp_seterr(e, DP_EDATA, "no samples to evaluate");
	double n = (double)ev->n;
	r->loss = dp_xsum_value(&ev->loss) / n;
	size_t k = ev->k;
	if (ev->kind == DP_EVAL_CLASS) {
		r->correct = ev->correct;
		r->topk_correct = ev->topk_correct;
		r->accuracy = ratio(ev->correct, ev->n);
		r->topk_accuracy = ratio(ev->topk_correct, ev->n);
		double pm = 0, rm = 0, fm = 0, pw = 0, rw = 0, fw = 0;
		size_t seen = 0;
		for (size_t j = 0; j < k; j++) {
			dp_eval_class *c = &ev->cls[j];
			c->precision = ratio(c->tp, c->predicted);
			c->recall = ratio(c->tp, c->support);
			c->f1 = c->precision + c->recall > 0
					? 2 * c->precision * c->recall / (c->precision + c->recall)
					: 0.0;
			if (c->support || c->predicted) {
				seen++;
				pm += c->precision;
				rm += c->recall;
				fm += c->f1;
			}
			double w = (double)c->support;
			pw += w * c->precision;
			rw += w * c->recall;
			fw += w * c->f1;
		}
		r->classes_seen = seen;
		r->precision_macro = pm / (double)seen;
		r->recall_macro = rm / (double)seen;
		r->f1_macro = fm / (double)seen;
		r->precision_weighted = pw / n;
		r->recall_weighted = rw / n;
		r->f1_weighted = fw / n;
		r->classes = ev->cls;
		r->confusion = ev->confusion;
	} else {
		double sse = 0, sae = 0, r2 = 0;
		for (size_t j = 0; j < k; j++) {
			const out_sums *u = &ev->sums[j];
			double a = dp_xsum_value(&u->sse), b = dp_xsum_value(&u->sae);
			/* SS_tot = sum y^2 - (sum y)^2 / n from the exact sums, in long double */
			long double sy = dp_xsum_value(&u->sy), syy = dp_xsum_value(&u->syy);
			double tot = (double)(syy - sy * sy / (long double)n);
			if (tot < 0)
				tot = 0;
			dp_eval_output *o = &ev->outs[j];
			o->mse = a / n;
			o->mae = b / n;
			o->r2 = tot > 0 ? 1 - a / tot : (a == 0 ? 1.0 : 0.0);
			sse += a;
			sae += b;
			r2 += o->r2;
		}
		r->mse = sse / (n * (double)k);
		r->rmse = sqrt(r->mse);
		r->mae = sae / (n * (double)k);
		r->r2 = r2 / (double)k;
		r->outputs = ev->outs;
	}
	return DP_OK;
}

/* ---- named metrics ------------------------------------------------------------------- */

/* The scalar metrics in their order; `topk` only with top-k accuracy. */
static const char *const class_names[] = {"samples", "skipped", "skipped_fraction", "loss",
					  "accuracy", "top_k_accuracy", "precision_macro",
					  "recall_macro", "f1_macro", "precision_weighted",
					  "recall_weighted", "f1_weighted"};
static const char *const reg_names[] = {"samples", "skipped", "skipped_fraction", "loss", "mse",
					"rmse", "mae", "r2"};
enum { TOPK_AT = 5 }; /* top_k_accuracy's place in class_names */

size_t dp_eval_metric_count(const dp_eval_report *r)
{
	if (r->kind == DP_EVAL_CLASS)
		return sizeof class_names / sizeof *class_names - (r->topk ? 0 : 1);
	return sizeof reg_names / sizeof *reg_names;
}

const char *dp_eval_metric_at(const dp_eval_report *r, size_t i, char *buf, size_t len,
			      double *value)
{
	double v = 0;
	const char *name;
	if (r->kind == DP_EVAL_CLASS) {
		if (!r->topk && i >= TOPK_AT)
			i++;
		if (i >= sizeof class_names / sizeof *class_names)
			return NULL;
		name = class_names[i];
		const double vals[] = {(double)r->samples, (double)r->skipped, r->skipped_fraction,
				       r->loss, r->accuracy, r->topk_accuracy, r->precision_macro,
				       r->recall_macro, r->f1_macro, r->precision_weighted,
				       r->recall_weighted, r->f1_weighted};
		v = vals[i];
		if (i == TOPK_AT) {
			snprintf(buf, len, "top_%zu_accuracy", r->topk);
			name = buf;
		}
	} else {
		if (i >= sizeof reg_names / sizeof *reg_names)
			return NULL;
		name = reg_names[i];
		const double vals[] = {(double)r->samples, (double)r->skipped, r->skipped_fraction,
				       r->loss, r->mse, r->rmse, r->mae, r->r2};
		v = vals[i];
	}
	if (name != buf)
		snprintf(buf, len, "%s", name);
	if (value)
		*value = v;
	return buf;
}

/* "recall[3]": base "recall", index 3 (a number below k, or a name). */
/* name as BASE[INDEX], INDEX a number or a class name: 1 with base and
 * *idx set; 0 when name is not of that form; -1 when INDEX is a number
 * past the classes or outputs (in *idx), -2 when it is neither a number
 * nor a name of names (base set for both). */
static int indexed(const dp_eval_report *r, const char *name, const char *const *names,
		   char *base, size_t blen, size_t *idx)
{
	const char *lb = strchr(name, '[');
	size_t nl = strlen(name);
	if (!lb || nl < 3 || name[nl - 1] != ']' || (size_t)(lb - name) >= blen)
		return 0;
	memcpy(base, name, (size_t)(lb - name));
	base[lb - name] = 0;
	const char *in = lb + 1;
	size_t il = (size_t)(name + nl - 1 - in);
	for (size_t j = 0; names && j < r->k; j++)
		if (names[j] && strlen(names[j]) == il && !memcmp(names[j], in, il)) {
			*idx = j;
			return 1;
		}
	if (!il || il > 9)
		return -2;
	size_t v = 0;
	for (size_t j = 0; j < il; j++) {
		if (in[j] < '0' || in[j] > '9')
			return -2;
		v = v * 10 + (size_t)(in[j] - '0');
	}
	*idx = v;
	return v >= r->k ? -1 : 1;
}

/* The per-class (per-output) metrics: a field of dp_eval_class (of
 * dp_eval_output), a double or, count, a uint64_t. */
static const struct per_metric {
	const char *name;
	int kind;
	size_t off;
	int count;
} per_metrics[] = {
	{"precision", DP_EVAL_CLASS, offsetof(dp_eval_class, precision), 0},
	{"recall", DP_EVAL_CLASS, offsetof(dp_eval_class, recall), 0},
	{"f1", DP_EVAL_CLASS, offsetof(dp_eval_class, f1), 0},
	{"support", DP_EVAL_CLASS, offsetof(dp_eval_class, support), 1},
	{"mse", DP_EVAL_REGRESSION, offsetof(dp_eval_output, mse), 0},
	{"mae", DP_EVAL_REGRESSION, offsetof(dp_eval_output, mae), 0},
	{"r2", DP_EVAL_REGRESSION, offsetof(dp_eval_output, r2), 0},
};

/* base as a per-class (per-output) metric of r; NULL when it is not one. */
static const struct per_metric *per_index(const dp_eval_report *r, const char *base)
{
	for (size_t i = 0; i < sizeof per_metrics / sizeof per_metrics[0]; i++)
		if (per_metrics[i].kind == r->kind && !strcmp(per_metrics[i].name, base))
			return &per_metrics[i];
	return NULL;
}

/* The class names, quoted as a gate takes them ("'T-shirt/top', 'Ankle boot',
 * ..."), escaped, the first few; "" without names. */
static void name_list(char *buf, size_t len, const dp_eval_report *r, const char *const *names)
{
	size_t l = 0;
	buf[0] = 0;
	for (size_t j = 0; names && j < r->k && l + 8 < len; j++) {
		char *sh = names[j] ? dp_shown(names[j], strlen(names[j])) : NULL;
		int w = snprintf(buf + l, len - l, "%s%s%s%s", j ? ", " : "",
				 strchr(sh ? sh : "", ']') ? "\"" : "", sh ? sh : "?",
				 strchr(sh ? sh : "", ']') ? "\"" : "");
		free(sh);
		if (w < 0 || (size_t)w >= len - l - 8) {
			snprintf(buf + l, len - l, ", ...");
			return;
		}
		l += (size_t)w;
	}
}

int dp_eval_metric(const dp_eval_report *r, const char *name, const char *const *names,
		   double *value, dp_err *e)
{
	char buf[64];
	size_t nm = dp_eval_metric_count(r);
	for (size_t i = 0; i < nm; i++) {
		double v;
		if (!strcmp(dp_eval_metric_at(r, i, buf, sizeof buf, &v), name)) {
			*value = v;
			return DP_OK;
		}
	}
	char base[32];
	size_t j = 0;
	int ix = indexed(r, name, names, base, sizeof base, &j);
	const char *what = r->kind == DP_EVAL_CLASS ? "class" : "output";
	if (ix < 0 && per_index(r, base) && r->k) {
		if (ix == -1)
			return dp_seterr(e, DP_ENOTFOUND, "no metric '%s': %s %zu is outside 0..%zu (the "
					 "model has %zu %s%s)",
					 name, what, j, r->k - 1, r->k, what,
					 r->kind == DP_EVAL_CLASS ? "es" : "s");
		char nl[400];
		name_list(nl, sizeof nl, r, names);
		return dp_seterr(e, DP_ENOTFOUND, "no metric '%s': no %s of that name (a number "
				 "0..%zu%s%s)",
				 name, what, r->k - 1, *nl ? ", or one of " : "", nl);
	}
	const struct per_metric *pm = ix > 0 ? per_index(r, base) : NULL;
	const char *rec = NULL; /* the class's or output's record */
	if (pm && r->kind == DP_EVAL_CLASS && r->classes)
		rec = (const char *)&r->classes[j];
	else if (pm && r->kind == DP_EVAL_REGRESSION && r->outputs)
		rec = (const char *)&r->outputs[j];
	if (rec) {
		*value = pm->count ? (double)*(const uint64_t *)(rec + pm->off) : *(const double *)(rec + pm->off);
		return DP_OK;
	}
	char list[512];
	size_t l = 0;
	list[0] = 0;
	for (size_t i = 0; i < nm && l < sizeof list; i++) {
		int w = snprintf(list + l, sizeof list - l, "%s%s", i ? ", " : "",
				 dp_eval_metric_at(r, i, buf, sizeof buf, NULL));
		if (w > 0)
			l += (size_t)w;
	}
	char nl[400];
	name_list(nl, sizeof nl, r, names);
	return dp_seterr(e, DP_ENOTFOUND, "no metric '%s' (there are %s, and %s%zu%s%s)", name, list,
			 r->kind == DP_EVAL_CLASS
				 ? "precision[C], recall[C], f1[C], support[C] per class C: 0.."
				 : "mse[J], mae[J], r2[J] per output J: 0..",
			 r->k ? r->k - 1 : 0, *nl ? " or a name: " : "", nl);
}

/* ---- gates ----------------------------------------------------------------------------- */

int dp_gate_max_skipped(const char *s, dp_gate *g, dp_err *e)
{
	memset(g, 0, sizeof *g);
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	int pct = *end == '%';
	if (end == s || errno || !isfinite(v) || v < 0 || end[pct] || (pct && v > 100) ||
	    (!pct && v != floor(v)))
		return dp_seterr(e, DP_EARG, "'%s': want a count of records (10) or a percentage of "
				 "those read (1%%, 0.5%%)", s);
	snprintf(g->metric, sizeof g->metric, pct ? "skipped_fraction" : "skipped");
	g->op = DP_GATE_LE;
	g->threshold = pct ? v / 100 : v;
	return DP_OK;
}

const char *dp_gate_op_name(int op)
{
	switch (op) {
	case DP_GATE_LT: return "<";
	case DP_GATE_LE: return "<=";
	case DP_GATE_GT: return ">";
	case DP_GATE_GE: return ">=";
	default: return "?";
	}
}

int dp_gate_parse(const char *s, dp_gate *g, dp_err *e)
{
	memset(g, 0, sizeof *g);
	/* METRIC[CLASS]: a class name may hold spaces and < > = (recall[Ankle
	 * boot]); one holding ']' is quoted, "..." or '...' (f1["a]b"]) */
	const char *a = s, *lb = strchr(s, '['), *rb = NULL, *q0 = NULL, *q1 = NULL;
	while (*a == ' ')
		a++;
	if (lb && (lb[1] == '"' || lb[1] == '\'')) {
		q0 = lb + 1;
		q1 = strchr(q0 + 1, *q0);
		if (!q1 || q1[1] != ']')
			return dp_seterr(e, DP_EARG, "'%s': a class name opened with %c and not closed "
					 "with %c]", s, *q0, *q0);
		rb = q1 + 1;
	} else if (lb) {
		rb = strchr(lb, ']');
	}
	const char *op = strpbrk(rb ? rb : s, "<>=!");
	if (!op)
		return dp_seterr(e, DP_EARG,
				 "'%s': want METRIC OP NUMBER, OP one of < <= > >= (e.g. accuracy>=0.9)",
				 s);
	const char *b = op;
	while (b > a && b[-1] == ' ')
		b--;
	if (b == a || (size_t)(b - a) >= sizeof g->metric)
		return dp_seterr(e, DP_EARG, "'%s': no metric name before the operator", s);
	for (const char *p = a; p < b; p++)
		if (*p == ' ' && !(lb && rb && p > lb && p < rb))
			return dp_seterr(e, DP_EARG, "'%s': a space inside the metric name", s);
	if (rb && b != rb + 1)
		return dp_seterr(e, DP_EARG, "'%s': text after the class's ']'", s);
	if (q0) { /* the name without its quotes */
		size_t n = (size_t)(q0 - a), m = (size_t)(q1 - q0 - 1);
		memcpy(g->metric, a, n);
		memcpy(g->metric + n, q0 + 1, m);
		g->metric[n + m] = ']';
	} else {
		memcpy(g->metric, a, (size_t)(b - a));
	}
	const char *num;
	if (op[0] == '<' && op[1] == '=')
		g->op = DP_GATE_LE, num = op + 2;
	else if (op[0] == '>' && op[1] == '=')
		g->op = DP_GATE_GE, num = op + 2;
	else if (op[0] == '<')
		g->op = DP_GATE_LT, num = op + 1;
	else if (op[0] == '>')
		g->op = DP_GATE_GT, num = op + 1;
	else
		return dp_seterr(e, DP_EARG, "'%s': the operator must be one of < <= > >=", s);
	while (*num == ' ')
		num++;
	char *end;
	errno = 0;
	double v = strtod(num, &end);
	while (end && *end == ' ')
		end++;
	if (end == num || *end || errno || !isfinite(v))
		return dp_seterr(e, DP_EARG, "'%s': '%s' is not a number", s, num);
	g->threshold = v;
	return DP_OK;
}

int dp_gate_pass(const dp_gate *g, double v)
{
	switch (g->op) {
	case DP_GATE_LT: return v < g->threshold;
	case DP_GATE_LE: return v <= g->threshold;
	case DP_GATE_GT: return v > g->threshold;
	case DP_GATE_GE: return v >= g->threshold;
	default: return 0;
	}
}
