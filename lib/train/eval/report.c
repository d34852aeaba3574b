/*
 * report.c - a dp_eval_report as dp-eval prints it: the text table (one
 * logfmt line of the scalar metrics, per-class or per-output figures, the
 * confusion matrix) and the figures of the metrics JSON ("metrics",
 * "classes" with "confusion_matrix", or "outputs"; dp-eval(1) gives the
 * whole format).
 */
#include "dp_eval.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

const char *dp_eval_fmt_value(double v, char *buf, size_t len)
{
	if (isnan(v)) {
		snprintf(buf, len, "NaN");
		return buf;
	}
	if (v == floor(v) && fabs(v) < 9007199254740992.0) {
		snprintf(buf, len, "%.0f", v);
		return buf;
	}
	return dp_fmt_double(v, buf, len);
}

void dp_eval_json_num(dp_buf *b, double v)
{
	char t[40];
	dp_buf_addstr(b, isfinite(v) ? dp_eval_fmt_value(v, t, sizeof t) : "null");
}

static void jstr(dp_buf *b, const char *s) { dp_buf_json_str(b, s, strlen(s), 0); }

static const char *cname(const char *const *names, size_t j, char *buf, size_t len)
{
	if (names)
		return names[j];
	snprintf(buf, len, "%zu", j);
	return buf;
}

/* Per class: precision, recall, f1, support; the averages. */
static void text_classes(dp_buf *b, const dp_eval_report *r, const char *const *names)
{
	char nb[64], t[40];
	size_t k = r->k;
	int w = r->topk ? 14 + (r->topk > 9) : 12;
	for (size_t j = 0; j < k; j++) {
		int l = (int)strlen(cname(names, j, nb, sizeof nb));
		if (l > w)
			w = l;
	}
	if (w > 40)
		w = 40;
	dp_buf_printf(b, "\n%*s  %9s  %9s  %9s  %9s\n", w, "", "precision", "recall", "f1",
		      "support");
	for (size_t j = 0; j < k; j++) {
		const dp_eval_class *c = &r->classes[j];
		dp_buf_printf(b, "%*.*s  %9.4f  %9.4f  %9.4f  %9" PRIu64 "\n", w, w,
			      cname(names, j, nb, sizeof nb), c->precision, c->recall, c->f1,
			      c->support);
	}
	dp_buf_printf(b, "\n%*s  %9s  %9s  %9.4f  %9" PRIu64 "\n", w, "accuracy", "", "",
		      r->accuracy, r->samples);
	if (r->topk)
		dp_buf_printf(b, "%*s  %9s  %9s  %9.4f  %9" PRIu64 "\n", w,
			      (snprintf(t, sizeof t, "top-%zu accuracy", r->topk), t), "", "",
			      r->topk_accuracy, r->samples);
	dp_buf_printf(b, "%*s  %9.4f  %9.4f  %9.4f  %9" PRIu64 "\n", w, "macro avg",
		      r->precision_macro, r->recall_macro, r->f1_macro, r->samples);
	dp_buf_printf(b, "%*s  %9.4f  %9.4f  %9.4f  %9" PRIu64 "\n", w, "weighted avg",
		      r->precision_weighted, r->recall_weighted, r->f1_weighted, r->samples);
}

/* The confusion matrix, rows the labels (named at the end when names). */
static void text_confusion(dp_buf *b, const dp_eval_report *r, const char *const *names)
{
	char t[40];
	size_t k = r->k;
	uint64_t mx = 1;
	for (size_t j = 0; j < k * k; j++)
		if (r->confusion[j] > mx)
			mx = r->confusion[j];
	int cw = snprintf(t, sizeof t, "%" PRIu64, mx);
	if (cw < 3)
		cw = 3;
	dp_buf_printf(b, "\nconfusion matrix (rows: label, columns: prediction)\n%*s", 4, "");
	for (size_t j = 0; j < k; j++)
		dp_buf_printf(b, " %*zu", cw, j);
	dp_buf_printf(b, "\n");
	for (size_t i = 0; i < k; i++) {
		dp_buf_printf(b, "%4zu", i);
		for (size_t j = 0; j < k; j++)
			dp_buf_printf(b, " %*" PRIu64, cw, r->confusion[i * k + j]);
		dp_buf_printf(b, "%s%s\n", names ? "  " : "", names ? names[i] : "");
	}
}

void dp_eval_text(dp_buf *b, const dp_eval_report *r, const char *const *names)
{
	char nb[64];
	/* one logfmt line of every scalar metric, for metrics-grep --logfmt */
	size_t nm = dp_eval_metric_count(r);
	for (size_t i = 0; i < nm; i++) {
		double v;
		const char *name = dp_eval_metric_at(r, i, nb, sizeof nb, &v);
		if (v == floor(v) && fabs(v) < 1e15)
			dp_buf_printf(b, "%s%s=%.0f", i ? " " : "", name, v);
		else
			dp_buf_printf(b, "%s%s=%.6g", i ? " " : "", name, v);
	}
	dp_buf_printf(b, "\n");
	size_t k = r->k;
	if (r->kind == DP_EVAL_CLASS && k <= 1000) {
		text_classes(b, r, names);
		if (r->confusion && k <= 20)
			text_confusion(b, r, names);
	} else if (r->kind == DP_EVAL_REGRESSION && k > 1 && k <= 1000) {
		dp_buf_printf(b, "\n%6s  %12s  %12s  %12s\n", "output", "mse", "mae", "r2");
		for (size_t j = 0; j < k; j++)
			dp_buf_printf(b, "%6zu  %12.6g  %12.6g  %12.6g\n", j, r->outputs[j].mse,
				      r->outputs[j].mae, r->outputs[j].r2);
	}
}

/* The per-class figures, and the confusion matrix. */
static void json_classes(dp_buf *b, const dp_eval_report *r, const char *const *names)
{
	size_t k = r->k;
	dp_buf_printf(b, ",\n  \"classes\": [\n");
	for (size_t j = 0; j < k; j++) {
		const dp_eval_class *c = &r->classes[j];
		dp_buf_printf(b, "    {\"class\": %zu", j);
		if (names) {
			dp_buf_printf(b, ", \"name\": ");
			jstr(b, names[j]);
		}
		dp_buf_printf(b, ", \"precision\": ");
		dp_eval_json_num(b, c->precision);
		dp_buf_printf(b, ", \"recall\": ");
		dp_eval_json_num(b, c->recall);
		dp_buf_printf(b, ", \"f1\": ");
		dp_eval_json_num(b, c->f1);
		dp_buf_printf(b, ", \"support\": %" PRIu64 ", \"predicted\": %" PRIu64 "}%s\n",
			      c->support, c->predicted, j + 1 < k ? "," : "");
	}
	dp_buf_printf(b, "  ]");
	if (r->confusion) {
		dp_buf_printf(b, ",\n  \"confusion_matrix\": [\n");
		for (size_t i = 0; i < k; i++) {
			dp_buf_printf(b, "    [");
			for (size_t j = 0; j < k; j++)
				dp_buf_printf(b, "%s%" PRIu64, j ? ", " : "", r->confusion[i * k + j]);
			dp_buf_printf(b, "]%s\n", i + 1 < k ? "," : "");
		}
		dp_buf_printf(b, "  ]");
	}
}

/* The per-output figures (regression). */
static void json_outputs(dp_buf *b, const dp_eval_report *r)
{
	size_t k = r->k;
	dp_buf_printf(b, ",\n  \"outputs\": [\n");
	for (size_t j = 0; j < k; j++) {
		const dp_eval_output *o = &r->outputs[j];
		dp_buf_printf(b, "    {\"output\": %zu, \"mse\": ", j);
		dp_eval_json_num(b, o->mse);
		dp_buf_printf(b, ", \"mae\": ");
		dp_eval_json_num(b, o->mae);
		dp_buf_printf(b, ", \"r2\": ");
		dp_eval_json_num(b, o->r2);
		dp_buf_printf(b, "}%s\n", j + 1 < k ? "," : "");
	}
	dp_buf_printf(b, "  ]");
}

void dp_eval_json(dp_buf *b, const dp_eval_report *r, const char *const *names)
{
	char nb[64];
	dp_buf_printf(b, "  \"metrics\": {\n");
	size_t nm = dp_eval_metric_count(r);
	for (size_t i = 0; i < nm; i++) {
		double v;
		const char *name = dp_eval_metric_at(r, i, nb, sizeof nb, &v);
		dp_buf_printf(b, "    ");
		jstr(b, name);
		dp_buf_printf(b, ": {\"value\": ");
		dp_eval_json_num(b, v);
		dp_buf_printf(b, "}%s\n", i + 1 < nm ? "," : "");
	}
	dp_buf_printf(b, "  }");
	if (r->kind == DP_EVAL_CLASS)
		json_classes(b, r, names);
	else
		json_outputs(b, r);
}
