/*
 * run.c - a run's settings as a checkpoint's __metadata__ keeps them
 * (dp_run_conf, dp_ckpt.h; dp-checkpoint(5)): every key named once, in
 * keys[] below, with the field it fills, how its value is read and written,
 * and the bounds the command line puts on it.
 *
 * dp_ckpt_save writes the keys of the model and the optimizer itself
 * (model, input_shape, loss, the optimizer's kind and settings: OWN
 * below) from the objects it saves; dp_run_conf_meta writes the rest;
 * dp_run_conf_from reads them all back.
 */
#define _GNU_SOURCE
#include "dp_ckpt.h"
#include <errno.h>
#include <jansson.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How a key's value reads and writes. */
enum kind {
	K_STR,    /* const char * */
	K_COUNT0, /* uint64_t, min..max, or "" for 0 (unknown) */
	K_COUNT,  /* uint64_t, min..max */
	K_INT,    /* int, min..max */
	K_REAL,   /* double, min..max */
	K_BOOL,   /* int: "true" or "false" */
	K_PATS,   /* const char *: "" for none */
	K_LOSS, K_DECODE, K_IMAGE, K_LAYOUT, K_SCALE, K_LAST_BATCH, K_SCHED, K_OPTIM, K_PREC,
	K_CLASSES /* const char *: a JSON array of the class names, "" for none */
};
enum { OWN = 1, /* written by dp_ckpt_save */ WONLY = 2 /* written, never taken back */ };

#define F(field) offsetof(dp_run_conf, field)
#define OPT(field) (offsetof(dp_run_conf, opt) + offsetof(dp_optim_conf, field))
static const struct key {
	const char *name;
	int kind, flags;
	size_t off;
	uint64_t cmin, cmax; /* K_COUNT, K_INT */
	double min, max;     /* K_REAL */
} keys[DP_RUN_NKEYS] = {
#define KEY(k, name, kind, flags, off) [k] = {name, kind, flags, off, 0, 0, 0, 0}
#define COUNT(k, name, flags, off, lo, hi) [k] = {name, K_COUNT, flags, off, lo, hi, 0, 0}
#define REAL(k, name, flags, off, lo, hi) [k] = {name, K_REAL, flags, off, 0, 0, lo, hi}
	KEY(DP_RUN_MODEL, "model", K_STR, OWN, F(model)),
	KEY(DP_RUN_INPUT_SHAPE, "input_shape", K_STR, OWN, F(input_shape)),
	KEY(DP_RUN_LOSS, "loss", K_LOSS, OWN, F(loss)),
	KEY(DP_RUN_FEATURE, "feature", K_STR, 0, F(feature)),
	KEY(DP_RUN_LABEL, "label", K_STR, 0, F(label)),
	KEY(DP_RUN_DECODE, "decode_raw", K_DECODE, 0, F(decode)),
	KEY(DP_RUN_IMAGE, "image", K_IMAGE, 0, F(img)),
	KEY(DP_RUN_LAYOUT, "layout", K_LAYOUT, 0, F(hwc)),
	KEY(DP_RUN_SCALE, "scale", K_SCALE, 0, F(scale)),
	COUNT(DP_RUN_SHUFFLE, "shuffle_buffer", 0, F(shuffle), 0, 1u << 28),
	KEY(DP_RUN_LAST_BATCH, "last_batch", K_LAST_BATCH, 0, F(drop_last)),
	COUNT(DP_RUN_BATCH, "batch_size", 0, F(batch), 1, 1u << 20),
	COUNT(DP_RUN_ACCUMULATE, "accumulate", 0, F(accumulate), 1, 1u << 16),
	REAL(DP_RUN_CLIP_NORM, "clip_norm", 0, F(clip_norm), 0, 1e30),
	COUNT(DP_RUN_EPOCHS, "epochs", 0, F(epochs), 1, 1u << 30),
	COUNT(DP_RUN_SEED, "seed", OWN, F(seed), 0, UINT64_MAX),
	KEY(DP_RUN_SCHEDULE, "lr_schedule", K_SCHED, 0, F(schedule)),
	COUNT(DP_RUN_WARMUP, "warmup", 0, F(warmup), 0, UINT64_MAX / 2),
	KEY(DP_RUN_OPTIMIZER, "optimizer", K_OPTIM, OWN, OPT(kind)),
	REAL(DP_RUN_LR, "lr", 0, F(lr), 0, 1e6),
	REAL(DP_RUN_MOMENTUM, "momentum", OWN, OPT(momentum), 0, 0.999999),
	REAL(DP_RUN_DAMPENING, "dampening", OWN, OPT(dampening), 0, 1),
	REAL(DP_RUN_BETA1, "beta1", OWN, OPT(beta1), 0, 0.999999),
	REAL(DP_RUN_BETA2, "beta2", OWN, OPT(beta2), 0, 0.999999),
	REAL(DP_RUN_EPS, "eps", OWN, OPT(eps), 0, 1),
	REAL(DP_RUN_WD, "weight_decay", OWN, OPT(weight_decay), 0, 1e6),
	KEY(DP_RUN_NESTEROV, "nesterov", K_BOOL, OWN, OPT(nesterov)),
	KEY(DP_RUN_SCALE_LR, "scale_lr", K_BOOL, 0, F(scale_lr)),
	REAL(DP_RUN_WARMUP_EPOCHS, "warmup_epochs", 0, F(warmup_epochs), 0, 1e6),
	[DP_RUN_STEPS_PER_EPOCH] = {"steps_per_epoch", K_COUNT0, 0, F(steps_per_epoch), 1, UINT64_MAX / 4, 0, 0},
	KEY(DP_RUN_FREEZE, "freeze", K_PATS, 0, F(freeze)),
	KEY(DP_RUN_LR_MULT, "lr_mult", K_PATS, 0, F(lr_mult)),
	KEY(DP_RUN_NO_DECAY, "no_decay", K_PATS, 0, F(no_decay)),
	REAL(DP_RUN_SMOOTH, "label_smoothing", 0, F(smooth), 0, 1),
	KEY(DP_RUN_SYNC_BN, "sync_bn", K_BOOL, 0, F(sync_bn)),
	[DP_RUN_RANKS] = {"ranks", K_INT, 0, F(ranks), 1, INT_MAX, 0, 0},
	KEY(DP_RUN_PRECISION, "precision", K_PREC, WONLY, F(precision)),
	KEY(DP_RUN_MONITOR, "monitor", K_PATS, 0, F(monitor)),
	KEY(DP_RUN_MONITOR_MODE, "monitor_mode", K_PATS, 0, F(monitor_mode)),
	KEY(DP_RUN_EARLY_STOP, "early_stopping", K_PATS, 0, F(early_stop)),
	KEY(DP_RUN_PLATEAU, "reduce_lr_on_plateau", K_PATS, 0, F(plateau)),
	KEY(DP_RUN_CONTROL_STATE, "control_state", K_PATS, 0, F(control_state)),
	KEY(DP_RUN_CLASSES, "classes", K_CLASSES, 0, F(classes)),
};

void dp_run_conf_init(dp_run_conf *c)
{
	memset(c, 0, sizeof *c);
	c->loss = DP_LOSS_XENT;
	c->feature = "image";
	c->label = "label";
	dp_image_tf_init(&c->img);
	c->scale = 1;
	c->shuffle = 10000;
	c->batch = 32;
	c->accumulate = 1;
	c->epochs = 1;
	c->schedule = "constant";
	dp_optim_defaults(&c->opt, DP_OPTIM_ADAM);
	c->lr = 0.001;
	c->ranks = 1;
}

void dp_run_conf_free(dp_run_conf *c)
{
	for (int k = 0; k < DP_RUN_NKEYS; k++) {
		free(c->kept[k]);
		c->kept[k] = NULL;
	}
	free(c->src);
	c->src = NULL;
}

const char *dp_run_key_name(int k) { return k >= 0 && k < DP_RUN_NKEYS ? keys[k].name : "?"; }

int dp_run_key_type(const char *name)
{
	for (int k = 0; k < DP_RUN_NKEYS; k++) {
		if (strcmp(keys[k].name, name))
			continue;
		switch (keys[k].kind) {
		case K_COUNT0: case K_COUNT: case K_INT: case K_REAL: return 'n';
		case K_BOOL: return 'b';
		default: return 's';
		}
	}
	return 0;
}

static int bad(const dp_st *ck, dp_err *e, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(const dp_st *ck, dp_err *e, const char *fmt, ...)
{
	char msg[900];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return dp_seterr(e, DP_EDATA, "%s: metadata%s", dp_st_name(ck), msg);
}

/* Key k's value v into c. */
static int take(dp_run_conf *c, const dp_st *ck, int k, const char *v, dp_err *e)
{
	const struct key *K = &keys[k];
	void *f = (char *)c + K->off;
	char *end;
	dp_err pe;
	switch (K->kind) {
	case K_STR:
	case K_SCHED:
	case K_PATS:
		if (!(c->kept[k] = strdup(v)))
			return dp_seterr(e, DP_ENOMEM, "out of memory");
		*(const char **)f = c->kept[k];
		return DP_OK;
	case K_COUNT0:
		if (!*v)
			return DP_OK;
		/* fall through */
	case K_COUNT:
	case K_INT: {
		errno = 0;
		unsigned long long n = strtoull(v, &end, 10);
		if (end == v || *end || errno || *v == '-')
			return bad(ck, e, " '%s' is '%s', not a count", K->name, v);
		if (n < K->cmin || n > K->cmax)
			return bad(ck, e, " '%s' is %s, outside %" PRIu64 "..%" PRIu64, K->name, v, K->cmin,
				   K->cmax);
		if (K->kind == K_INT)
			*(int *)f = (int)n;
		else
			*(uint64_t *)f = n;
		return DP_OK;
	}
	case K_REAL: {
		double d = strtod(v, &end);
		if (end == v || *end || !isfinite(d))
			return bad(ck, e, " '%s' is '%s', not a number", K->name, v);
		if (d < K->min || d > K->max)
			return bad(ck, e, " '%s' is %s, outside %g..%g", K->name, v, K->min, K->max);
		*(double *)f = d;
		return DP_OK;
	}
	case K_BOOL: *(int *)f = !strcmp(v, "true"); return DP_OK;
	case K_LOSS:
		if (!(*(int *)f = dp_loss_parse(v)))
			return bad(ck, e, ": unknown loss '%s'", v);
		return DP_OK;
	case K_DECODE:
		if ((*(int *)f = dp_decode_parse(v)) < 0)
			return bad(ck, e, ": unknown decode_raw '%s'", v);
		return DP_OK;
	case K_IMAGE:
		if (dp_image_spec_parse(&c->img, v, &pe) < 0)
			return bad(ck, e, ": %s", pe.msg);
		return DP_OK;
	case K_LAYOUT: *(int *)f = !strcmp(v, "hwc"); return DP_OK;
	case K_SCALE:
		if (dp_parse_scale("scale", v, &c->scale, &pe) < 0)
			return bad(ck, e, ": %s", pe.msg);
		if (!(c->kept[k] = strdup(v))) /* as written */
			return dp_seterr(e, DP_ENOMEM, "out of memory");
		c->scale_text = c->kept[k];
		return DP_OK;
	case K_LAST_BATCH: *(int *)f = !strcmp(v, "drop"); return DP_OK;
	case K_CLASSES: {
		size_t n = 0;
		char **names = NULL;
		if (!*v) {
			*(const char **)f = NULL;
			return DP_OK;
		}
		if (dp_classes_from_json(v, &n, &names, &pe) < 0)
			return bad(ck, e, " 'classes': %s", pe.msg);
		free(names);
		if (!(c->kept[k] = strdup(v)))
			return dp_seterr(e, DP_ENOMEM, "out of memory");
		*(const char **)f = c->kept[k];
		return DP_OK;
	}
	case K_OPTIM: {
		int kind = dp_optim_parse(v);
		if (!kind)
			return bad(ck, e, ": unknown optimizer '%s'", v);
		dp_optim_conf d;
		dp_optim_defaults(&d, kind);
		if (!c->given[DP_RUN_WD])
			c->opt.weight_decay = d.weight_decay;
		c->opt.kind = kind;
		if (!c->given[DP_RUN_LR])
			c->lr = kind == DP_OPTIM_SGD ? 0.01 : 0.001;
		return DP_OK;
	}
	}
	return DP_OK;
}

int dp_run_conf_from(dp_run_conf *c, const dp_st *ck, const int *want, dp_err *e)
{
	for (int k = 0; k < DP_RUN_NKEYS; k++) {
		int wanted = !want && !(keys[k].flags & WONLY);
		for (const int *w = want; w && *w >= 0 && !wanted; w++)
			wanted = *w == k;
		const char *v = wanted && !c->given[k] ? dp_st_meta(ck, keys[k].name) : NULL;
		if (!v)
			continue;
		if (!c->src && !(c->src = strdup(dp_st_name(ck))))
			return dp_seterr(e, DP_ENOMEM, "out of memory");
		free(c->kept[k]);
		c->kept[k] = NULL;
		int rc = take(c, ck, k, v, e);
		if (rc < 0)
			return rc;
		c->from[k] = 1;
	}
	return DP_OK;
}

/* Key k's value in c as text, in buf (or a string of c's). */
static const char *text(const dp_run_conf *c, int k, char *buf, size_t len, dp_err *e)
{
	const struct key *K = &keys[k];
	const void *f = (const char *)c + K->off;
	switch (K->kind) {
	case K_STR: return *(const char *const *)f;
	case K_PATS: {
		const char *p = *(const char *const *)f;
		return p ? p : "";
	}
	case K_COUNT0:
		if (!*(const uint64_t *)f)
			return "";
		/* fall through */
	case K_COUNT: snprintf(buf, len, "%" PRIu64, *(const uint64_t *)f); return buf;
	case K_INT: snprintf(buf, len, "%d", *(const int *)f); return buf;
	case K_REAL: return dp_fmt_double(*(const double *)f, buf, len);
	case K_BOOL: return *(const int *)f ? "true" : "false";
	case K_LOSS: return dp_loss_name(c->loss);
	case K_DECODE: return dp_decode_name(c->decode);
	case K_IMAGE:
		if (c->decode != DP_DECODE_IMAGE)
			return "";
		if (dp_image_spec(&c->img, buf, len) < 0) {
			dp_seterr(e, DP_ELIMIT, "image: settings too long for a checkpoint");
			return NULL;
		}
		return buf;
	case K_LAYOUT: return c->hwc ? "hwc" : "chw";
	case K_SCALE: return c->scale_text ? c->scale_text : dp_fmt_double(c->scale, buf, len);
	case K_LAST_BATCH: return c->drop_last ? "drop" : "keep";
	case K_SCHED: {
		dp_sched sc = {0};
		if (dp_sched_parse(c->schedule, &sc, e) < 0)
			return NULL;
		return dp_sched_format(&sc, buf, len);
	}
	case K_OPTIM: return dp_optim_name(c->opt.kind);
	case K_PREC: return dp_precision_name(c->precision);
	case K_CLASSES: return c->classes ? c->classes : "";
	}
	return "";
}

/* A key the settings of a run (dp_run_conf_settings) leave out: the
 * state of training control, the class names, the other optimizer's. */
static int not_setting(const dp_run_conf *c, int k)
{
	int sgd = c->opt.kind == DP_OPTIM_SGD;
	switch (k) {
	case DP_RUN_CONTROL_STATE: case DP_RUN_CLASSES: return 1;
	case DP_RUN_MOMENTUM: case DP_RUN_DAMPENING: case DP_RUN_NESTEROV: return !sgd;
	case DP_RUN_BETA1: case DP_RUN_BETA2: case DP_RUN_EPS: return sgd;
	}
	return 0;
}

/* dp_run_conf_meta (all 0) and dp_run_conf_settings (all 1). */
static char **conf_pairs(const dp_run_conf *c, const char *const *extra, int all, dp_err *e)
{
	dp_buf b = DP_BUF_INIT; /* key\0value\0... */
	size_t n = 0;
	for (const char *const *x = extra; x && x[0] && x[1]; x += 2, n++) {
		dp_buf_add(&b, x[0], strlen(x[0]) + 1);
		dp_buf_add(&b, x[1], strlen(x[1]) + 1);
	}
	for (int k = 0; k < DP_RUN_NKEYS; k++) {
		char buf[512];
		if (all ? not_setting(c, k) : (keys[k].flags & OWN) != 0)
			continue;
		const char *v = text(c, k, buf, sizeof buf, e);
		if (!v) {
			dp_buf_free(&b);
			return NULL;
		}
		dp_buf_add(&b, keys[k].name, strlen(keys[k].name) + 1);
		dp_buf_add(&b, v, strlen(v) + 1);
		n++;
	}
	char **m = b.err ? NULL : malloc((2 * n + 1) * sizeof *m + b.len);
	if (!m) {
		dp_buf_free(&b);
		dp_seterr(e, DP_ENOMEM, "out of memory");
		return NULL;
	}
	char *p = memcpy((char *)(m + 2 * n + 1), b.p, b.len);
	for (size_t i = 0; i < 2 * n; i++, p += strlen(p) + 1)
		m[i] = p;
	m[2 * n] = NULL;
	dp_buf_free(&b);
	return m;
}

char **dp_run_conf_meta(const dp_run_conf *c, const char *const *extra, dp_err *e)
{
	return conf_pairs(c, extra, 0, e);
}

char **dp_run_conf_settings(const dp_run_conf *c, dp_err *e)
{
	return conf_pairs(c, NULL, 1, e);
}

/* ---- class names as metadata --------------------------------------------------- */

char *dp_classes_json(const char *const *names, size_t k)
{
	dp_buf b = DP_BUF_INIT;
	dp_buf_addstr(&b, "[");
	for (size_t i = 0; i < k; i++) {
		if (i)
			dp_buf_addstr(&b, ",");
		dp_buf_json_str(&b, names[i], strlen(names[i]), 0);
	}
	dp_buf_addstr(&b, "]");
	return dp_buf_take(&b);
}

int dp_classes_from_json(const char *text, size_t *kp, char ***namesp, dp_err *e)
{
	json_error_t je;
	json_t *a = json_loads(text, JSON_REJECT_DUPLICATES, &je);
	size_t k = json_array_size(a), total = 0;
	if (!json_is_array(a) || !k) {
		json_decref(a);
		return dp_seterr(e, DP_EDATA, "not a JSON array of class names");
	}
	for (size_t i = 0; i < k; i++) {
		json_t *x = json_array_get(a, i);
		if (!json_is_string(x) || !json_string_length(x) ||
		    strlen(json_string_value(x)) != json_string_length(x)) {
			json_decref(a);
			return dp_seterr(e, DP_EDATA, "name %zu is not a non-empty string", i);
		}
		for (size_t j = 0; j < i; j++)
			if (json_equal(x, json_array_get(a, j))) {
				char *sh = dp_shown(json_string_value(x), json_string_length(x));
				dp_seterr(e, DP_EDATA, "'%s' twice", sh ? sh : "?");
				free(sh);
				json_decref(a);
				return DP_EDATA;
			}
		total += json_string_length(x) + 1;
	}
	char **names = malloc((k + 1) * sizeof *names + total);
	if (!names) {
		json_decref(a);
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	}
	char *p = (char *)(names + k + 1);
	for (size_t i = 0; i < k; i++) {
		json_t *x = json_array_get(a, i);
		names[i] = memcpy(p, json_string_value(x), json_string_length(x) + 1);
		p += json_string_length(x) + 1;
	}
	names[k] = NULL;
	json_decref(a);
	*kp = k;
	*namesp = names;
	return DP_OK;
}

/* ---- the position in the epoch, another number of ranks -------------------------------- */

char *dp_run_epoch_records_text(const uint64_t *pos, int ranks)
{
	dp_buf b = DP_BUF_INIT;
	for (int r = 0; r < ranks; r++)
		dp_buf_printf(&b, "%s%" PRIu64, r ? "," : "", pos[r]);
	return dp_buf_take(&b);
}

int dp_run_epoch_records(const dp_st *ck, int ranks, int rank, uint64_t *pos, dp_err *e)
{
	const char *p = dp_st_meta(ck, "epoch_records");
	for (int i = 0; p && *p; i++) {
		char *end;
		errno = 0;
		unsigned long long v = strtoull(p, &end, 10);
		if (end == p || errno || (*end && *end != ','))
			return dp_seterr(e, DP_EDATA, "%s: metadata 'epoch_records' is '%s', not %d counts",
					 dp_st_name(ck), dp_st_meta(ck, "epoch_records"), ranks);
		if (i == rank)
			*pos = v;
		p = *end ? end + 1 : end;
	}
	return DP_OK;
}

int dp_run_resume_ranks(const dp_st *ck, const dp_run_conf *saved, int ck_ranks,
			const dp_run_conf *now, int ranks, int split, int *moved, dp_err *e)
{
	uint64_t ckb = saved->batch, cka = saved->accumulate, N = now->accumulate, B = now->batch;
	uint64_t g0 = ckb * cka * (uint64_t)ck_ranks, g1 = B * N * (uint64_t)ranks;
	*moved = 0;
	if (ck_ranks == ranks && cka == N && ckb == B)
		return DP_OK;
	if (ck_ranks == ranks && g0 != g1)
		return dp_seterr(e, DP_EARG, "%s: saved by a run of global batch %" PRIu64 " (%d x %" PRIu64
				 "); this run's is %" PRIu64 ": the position in the data counts updates of "
				 "%" PRIu64 ": resume it with --batch-size %" PRIu64 "%s",
				 dp_st_name(ck), g0, ck_ranks, ckb * cka, g1, g0, ckb,
				 cka > 1 ? " and its --accumulate" : "");
	if (g0 != g1 || !split) {
		char hint[160] = "";
		if (split && g0 % (ranks * B) == 0 && N != g0 / (ranks * B))
			snprintf(hint, sizeof hint, ", or with --accumulate %" PRIu64 " to keep the global batch",
				 g0 / (ranks * B));
		else if (split && g0 % (ranks * N) == 0)
			snprintf(hint, sizeof hint,
				 ", or with --batch-size %" PRIu64 " to keep the global batch",
				 g0 / (ranks * N));
		return dp_seterr(e, DP_EARG, "%s: saved by a run of %d rank%s x batch %" PRIu64
				 " (global batch %" PRIu64 "); this run has %d x %" PRIu64 " = %" PRIu64
				 "%s: resume it with %d rank%s%s",
				 dp_st_name(ck), ck_ranks, ck_ranks == 1 ? "" : "s", ckb * cka, g0, ranks,
				 B * N, g1, split ? "" : " and its data is per rank ({rank})", ck_ranks,
				 ck_ranks == 1 ? "" : "s", hint);
	}
	*moved = 1;
	return DP_OK;
}
