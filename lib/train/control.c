/*
 * control.c - what a training job does by itself at the end of an epoch
 * (dp_train.h): Keras' EarlyStopping, ReduceLROnPlateau and
 * ModelCheckpoint(save_best_only=True) on one monitored metric.
 *
 * The rules, as Keras (2.11 to 3.x) has them, epochs counted from 0:
 *  EarlyStopping, on each epoch's value v (none before start_from_epoch):
 *    wait += 1;
 *    improvement: min mode v + min_delta < best, max mode v - min_delta >
 *    best (best starts at +inf or -inf): best = v, and wait = 0 unless a
 *    baseline is set and v does not improve on it as well;
 *    otherwise, once wait >= patience and epoch > 0: stop.
 *  ReduceLROnPlateau:
 *    in cooldown: cooldown -= 1, wait = 0;
 *    min mode v < best - min_delta, max mode v > best + min_delta: best =
 *    v, wait = 0;
 *    otherwise, when not in cooldown: wait += 1; once wait >= patience
 *    and lr > min_lr: lr = max(lr * factor, min_lr), cooldown = its
 *    setting, wait = 0.
 *  ModelCheckpoint(save_best_only): v < best (min) or v > best (max),
 *    strictly, best starting at +-inf: save.
 * A NaN compares false everywhere, as numpy's comparisons do.  Keras keeps
 * the rate in float32; here it is a double.
 */
#define _GNU_SOURCE
#include "dp_train.h"
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dp_control_init(dp_control_conf *c)
{
	memset(c, 0, sizeof *c);
	snprintf(c->monitor, sizeof c->monitor, "val_loss");
	c->mode = DP_MODE_MIN;
	c->rlr_factor = 0.1;
	c->rlr_patience = 10;
	c->rlr_min_delta = 1e-4;
}

/* Metrics that are better larger (dp_eval.h's names). */
static int higher_is_better(const char *m)
{
	static const char *const up[] = {"accuracy", "precision", "recall", "f1", "r2"};
	for (size_t i = 0; i < sizeof up / sizeof up[0]; i++)
		if (strstr(m, up[i]))
			return 1;
	return 0;
}

int dp_control_monitor(dp_control_conf *c, const char *metric, const char *mode, dp_err *e)
{
	if (metric) {
		size_t n = strlen(metric);
		if (strncmp(metric, "val_", 4) || n <= 4 || n >= sizeof c->monitor ||
		    strspn(metric, "abcdefghijklmnopqrstuvwxyz0123456789_[]") != n)
			return dp_seterr(e, DP_EARG,
					 "monitor '%.80s': want val_ and a validation metric of "
					 "dp-eval (val_loss, val_accuracy, val_f1_macro...)",
					 metric);
		memcpy(c->monitor, metric, n + 1);
	}
	if (!mode || !strcmp(mode, "auto"))
		c->mode = higher_is_better(c->monitor + 4) ? DP_MODE_MAX : DP_MODE_MIN;
	else if (!strcmp(mode, "min") || !strcmp(mode, "max"))
		c->mode = !strcmp(mode, "min") ? DP_MODE_MIN : DP_MODE_MAX;
	else
		return dp_seterr(e, DP_EARG, "monitor mode '%.40s': want auto, min or max", mode);
	return DP_OK;
}

/* ---- key=value lists ---------------------------------------------------------- */

/* A setting of a key=value list, in dp_control_conf; a list's first is the
 * one a bare value sets. */
#define AT(field) offsetof(dp_control_conf, field)
struct field {
	const char *name;
	int real;          /* a double, else a count */
	size_t off;        /* of the value */
	double def;        /* the value when not given */
	double min, max;   /* bounds of a double (min excluded when open) */
	int open;
	size_t set;        /* of an int set to 1 when given (0: none) */
};

/* Keras' EarlyStopping */
static const struct field es_fields[] = {
	{"patience", 0, AT(es_patience), 0, 0, 0, 0, 0},
	{"min_delta", 1, AT(es_min_delta), 0, 0, 1e300, 0, 0},
	{"baseline", 1, AT(es_baseline), 0, -1e300, 1e300, 0, AT(es_has_baseline)},
	{"start_from_epoch", 0, AT(es_start_from_epoch), 0, 0, 0, 0, 0},
};

/* Keras' ReduceLROnPlateau */
static const struct field rlr_fields[] = {
	{"patience", 0, AT(rlr_patience), 10, 0, 0, 0, 0},
	{"factor", 1, AT(rlr_factor), 0.1, 0, 1, 1, 0},
	{"cooldown", 0, AT(rlr_cooldown), 0, 0, 0, 0, 0},
	{"min_lr", 1, AT(rlr_min_lr), 0, 0, 1e300, 0, 0},
	{"min_delta", 1, AT(rlr_min_delta), 1e-4, 0, 1e300, 0, 0},
};

/* A feature's key=value list spec into c: the feature's int at offset on
 * set and the fields given over their defaults, or for an empty spec that
 * int cleared and the fields left as they are; c unchanged on error. */
static int parse_fields(dp_control_conf *c, size_t on, const char *spec, const struct field *f,
			size_t nf, dp_err *e)
{
	if (!spec || !*spec) {
		*(int *)((char *)c + on) = 0;
		return DP_OK;
	}
	dp_control_conf t = *c;
	char *base = (char *)&t;
	*(int *)(base + on) = 1;
	for (size_t i = 0; i < nf; i++) {
		if (f[i].real)
			*(double *)(base + f[i].off) = f[i].def;
		else
			*(uint64_t *)(base + f[i].off) = (uint64_t)f[i].def;
		if (f[i].set)
			*(int *)(base + f[i].set) = 0;
	}
	char *s = strdup(spec), *save = NULL;
	if (!s)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	int rc = DP_OK;
	for (char *tok = strtok_r(s, ",", &save); tok && rc == DP_OK; tok = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(tok, '='), *val = eq ? eq + 1 : tok;
		if (eq)
			*eq = 0;
		const char *key = eq ? tok : f[0].name; /* a bare value: the first field */
		size_t i = 0;
		while (i < nf && strcmp(key, f[i].name))
			i++;
		if (i == nf) {
			rc = dp_seterr(e, DP_EARG, "unknown setting '%.40s' (known: %s%s%s%s%s%s%s%s%s)",
				       key, f[0].name, nf > 1 ? ", " : "", nf > 1 ? f[1].name : "",
				       nf > 2 ? ", " : "", nf > 2 ? f[2].name : "", nf > 3 ? ", " : "",
				       nf > 3 ? f[3].name : "", nf > 4 ? ", " : "", nf > 4 ? f[4].name : "");
			break;
		}
		char *end;
		errno = 0;
		if (f[i].real) {
			double d = strtod(val, &end);
			if (end == val || *end || !isfinite(d) || d > f[i].max ||
			    (f[i].open ? d <= f[i].min : d < f[i].min))
				rc = dp_seterr(e, DP_EARG, "%s '%.40s': want a number %s %g%s%s",
					       f[i].name, val, f[i].open ? "above" : "from", f[i].min,
					       f[i].max < 1e300 ? (f[i].open ? " and below " : " to ") : "",
					       f[i].max < 1e300 ? "1" : "");
			else
				*(double *)(base + f[i].off) = d;
		} else {
			unsigned long long n = strtoull(val, &end, 10);
			if (end == val || *end || errno || *val == '-' || n > (1ull << 40))
				rc = dp_seterr(e, DP_EARG, "%s '%.40s': want a whole number from 0",
					       f[i].name, val);
			else
				*(uint64_t *)(base + f[i].off) = n;
		}
		if (f[i].set)
			*(int *)(base + f[i].set) = 1;
	}
	free(s);
	if (rc == DP_OK)
		*c = t;
	return rc;
}

int dp_control_early_stop(dp_control_conf *c, const char *spec, dp_err *e)
{
	if (parse_fields(c, AT(early_stop), spec, es_fields, sizeof es_fields / sizeof es_fields[0],
			 e) < 0)
		return DP_EARG;
	return DP_OK;
}

int dp_control_plateau(dp_control_conf *c, const char *spec, dp_err *e)
{
	dp_control_conf t = *c;
	if (parse_fields(&t, AT(plateau), spec, rlr_fields, sizeof rlr_fields / sizeof rlr_fields[0],
			 e) < 0)
		return DP_EARG;
	if (t.plateau && t.rlr_factor >= 1) /* Keras: "does not support a factor >= 1.0" */
		return dp_seterr(e, DP_EARG, "factor %g: want below 1", t.rlr_factor);
	*c = t;
	return DP_OK;
}

const char *dp_control_early_stop_text(const dp_control_conf *c, char *buf, size_t len)
{
	char a[32], b[32];
	if (!c->early_stop) {
		snprintf(buf, len, "%s", "");
		return buf;
	}
	int n = snprintf(buf, len, "patience=%" PRIu64 ",min_delta=%s", c->es_patience,
			 dp_fmt_double(c->es_min_delta, a, sizeof a));
	if (c->es_has_baseline && n >= 0 && (size_t)n < len)
		n += snprintf(buf + n, len - (size_t)n, ",baseline=%s",
			      dp_fmt_double(c->es_baseline, b, sizeof b));
	if (c->es_start_from_epoch && n >= 0 && (size_t)n < len)
		snprintf(buf + n, len - (size_t)n, ",start_from_epoch=%" PRIu64, c->es_start_from_epoch);
	return buf;
}

const char *dp_control_plateau_text(const dp_control_conf *c, char *buf, size_t len)
{
	char a[32], b[32], d[32];
	if (!c->plateau)
		snprintf(buf, len, "%s", "");
	else
		snprintf(buf, len, "patience=%" PRIu64 ",factor=%s,cooldown=%" PRIu64 ",min_lr=%s,min_delta=%s",
			 c->rlr_patience, dp_fmt_double(c->rlr_factor, a, sizeof a), c->rlr_cooldown,
			 dp_fmt_double(c->rlr_min_lr, b, sizeof b), dp_fmt_double(c->rlr_min_delta, d, sizeof d));
	return buf;
}

/* ---- the decisions --------------------------------------------------------------- */

void dp_control_start(const dp_control_conf *c, double lr, dp_control_state *s)
{
	double worst = c->mode == DP_MODE_MAX ? -INFINITY : INFINITY;
	memset(s, 0, sizeof *s);
	s->es_best = s->rlr_best = s->best = worst;
	s->lr = lr;
}

/* EarlyStopping's _is_improvement: monitor_op(v - min_delta, ref), its
 * min_delta negated in min mode (so v - (-d), which is v + d). */
static int es_better(const dp_control_conf *c, double v, double ref)
{
	return c->mode == DP_MODE_MAX ? v - c->es_min_delta > ref : v + c->es_min_delta < ref;
}

static void early_stop(const dp_control_conf *c, dp_control_state *s, uint64_t epoch, double v,
		       dp_control_result *r)
{
	if (!c->early_stop || s->stopped || epoch < c->es_start_from_epoch)
		return;
	s->es_wait++;
	if (es_better(c, v, s->es_best)) {
		s->es_best = v;
		s->es_best_epoch = epoch;
		if (!c->es_has_baseline || es_better(c, v, c->es_baseline))
			s->es_wait = 0;
		return;
	}
	if (s->es_wait >= c->es_patience && epoch > 0) {
		s->stopped = 1;
		s->stopped_epoch = epoch;
		r->stop = 1;
	}
}

static void plateau(const dp_control_conf *c, dp_control_state *s, double v, dp_control_result *r)
{
	if (!c->plateau)
		return;
	if (s->rlr_cooldown > 0) {
		s->rlr_cooldown--;
		s->rlr_wait = 0;
	}
	int better = c->mode == DP_MODE_MAX ? v > s->rlr_best + c->rlr_min_delta
					    : v < s->rlr_best - c->rlr_min_delta;
	if (better) {
		s->rlr_best = v;
		s->rlr_wait = 0;
	} else if (s->rlr_cooldown == 0 && ++s->rlr_wait >= c->rlr_patience && s->lr > c->rlr_min_lr) {
		r->reduced = 1;
		r->old_lr = s->lr;
		r->new_lr = fmax(s->lr * c->rlr_factor, c->rlr_min_lr);
		s->lr = r->new_lr;
		s->rlr_cooldown = c->rlr_cooldown;
		s->rlr_wait = 0;
	}
}

void dp_control_epoch(const dp_control_conf *c, dp_control_state *s, uint64_t epoch, double value,
		      dp_control_result *r)
{
	memset(r, 0, sizeof *r);
	r->old_lr = r->new_lr = s->lr;
	if (c->save_best && (c->mode == DP_MODE_MAX ? value > s->best : value < s->best)) {
		s->best = value;
		s->best_epoch = epoch;
		s->have_best = 1;
		r->improved = 1;
	}
	plateau(c, s, value, r);
	early_stop(c, s, epoch, value, r);
}

/* ---- the state as text ---------------------------------------------------------------- */

#define CNT(name, field) {name, 0, offsetof(dp_control_state, field)}
#define DBL(name, field) {name, 1, offsetof(dp_control_state, field)}
#define INT(name, field) {name, 2, offsetof(dp_control_state, field)}
static const struct skey {
	const char *name;
	int kind; /* 0 uint64_t, 1 double, 2 int */
	size_t off;
} skeys[] = {
	DBL("lr", lr),
	CNT("es_wait", es_wait),         DBL("es_best", es_best),      CNT("es_best_epoch", es_best_epoch),
	INT("stopped", stopped),         CNT("stopped_epoch", stopped_epoch),
	CNT("rlr_wait", rlr_wait),       CNT("rlr_cooldown", rlr_cooldown), DBL("rlr_best", rlr_best),
	INT("have_best", have_best),     DBL("best", best),            CNT("best_epoch", best_epoch),
};
#define NSKEYS (sizeof skeys / sizeof skeys[0])

char *dp_control_state_format(const dp_control_state *s, dp_err *e)
{
	dp_buf b = DP_BUF_INIT;
	for (size_t i = 0; i < NSKEYS; i++) {
		const void *f = (const char *)s + skeys[i].off;
		char d[32];
		dp_buf_printf(&b, "%s%s=", i ? "," : "", skeys[i].name);
		if (skeys[i].kind == 1)
			dp_buf_addstr(&b, dp_fmt_double(*(const double *)f, d, sizeof d));
		else if (skeys[i].kind == 2)
			dp_buf_printf(&b, "%d", *(const int *)f);
		else
			dp_buf_printf(&b, "%" PRIu64, *(const uint64_t *)f);
	}
	char *t = dp_buf_take(&b);
	if (!t)
		dp_seterr(e, DP_ENOMEM, "out of memory");
	return t;
}

int dp_control_state_parse(dp_control_state *s, const char *text, dp_err *e)
{
	dp_control_state t = *s;
	unsigned char seen[NSKEYS] = {0};
	const char *p = text;
	while (*p) {
		size_t kl = strcspn(p, "=,"), vl;
		size_t i = 0;
		while (i < NSKEYS && (strlen(skeys[i].name) != kl || strncmp(p, skeys[i].name, kl)))
			i++;
		if (p[kl] != '=' || i == NSKEYS)
			return dp_seterr(e, DP_EDATA, "control state: unknown key '%.*s'", (int)(kl > 40 ? 40 : kl), p);
		const char *v = p + kl + 1;
		vl = strcspn(v, ",");
		char val[64], *end;
		if (vl >= sizeof val)
			return dp_seterr(e, DP_EDATA, "control state: %s: value too long", skeys[i].name);
		memcpy(val, v, vl);
		val[vl] = 0;
		void *f = (char *)&t + skeys[i].off;
		errno = 0;
		if (skeys[i].kind == 1) {
			double d = strtod(val, &end);
			if (end == val || *end || isnan(d))
				goto bad;
			*(double *)f = d;
		} else {
			unsigned long long n = strtoull(val, &end, 10);
			if (end == val || *end || errno || *val == '-' || (skeys[i].kind == 2 && n > 1))
				goto bad;
			if (skeys[i].kind == 2)
				*(int *)f = (int)n;
			else
				*(uint64_t *)f = n;
		}
		seen[i] = 1;
		p = v + vl + (v[vl] == ',');
		continue;
	bad:
		return dp_seterr(e, DP_EDATA, "control state: %s is '%s'", skeys[i].name, val);
	}
	for (size_t i = 0; i < NSKEYS; i++)
		if (!seen[i])
			return dp_seterr(e, DP_EDATA, "control state: no %s", skeys[i].name);
	*s = t;
	return DP_OK;
}

int dp_control_check_monitor(const dp_control_conf *c, const dp_model *m, dp_err *e)
{
	dp_eval *ev = dp_eval_new_for(m, 0, e);
	size_t k = dp_model_out_size(m);
	float *out = calloc(k ? k : 1, sizeof *out);
	int32_t label = 0;
	dp_eval_report r;
	double v;
	int rc = !ev ? -1
		 : !out ? dp_seterr(e, DP_ENOMEM, "out of memory")
		 : dp_model_loss_kind(m) == DP_LOSS_XENT
		     ? dp_eval_add_class(ev, out, &label, 1, NULL, NULL, NULL, e)
		     : dp_eval_add_regression(ev, out, out, 1, NULL, e);
	if (rc == 0)
		rc = dp_eval_report_get(ev, &r, e);
	if (rc == 0)
		rc = dp_eval_metric(&r, c->monitor + 4, NULL, &v, e);
	dp_eval_free(ev);
	free(out);
	return rc < 0 ? -1 : 0;
}
