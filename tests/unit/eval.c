/* eval.c - dp_eval.h: the exact accumulator (against __float128 sums that
 * are exact by construction, and the same bits in any order or split),
 * metrics on small cases worked out by hand (those scikit-learn's
 * classification_report and r2_score give), combining workers' states,
 * metric names, gates. */
#include "dp_eval.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 88172645463325252ull;
static uint64_t xr(void) { return tap_xorshift(&rs); }

static double xsum_of(const double *v, size_t n, const size_t *order)
{
	dp_xsum s;
	dp_xsum_init(&s);
	for (size_t i = 0; i < n; i++)
		dp_xsum_add(&s, v[order ? order[i] : i]);
	return dp_xsum_value(&s);
}

static int same_bits(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

static void test_xsum(void)
{
	double v1[] = {1e100, 1, -1e100};
	ok(xsum_of(v1, 3, NULL) == 1, "1e100 + 1 - 1e100 = 1");
	double v2[10];
	for (int i = 0; i < 10; i++)
		v2[i] = 0.1;
	ok(xsum_of(v2, 10, NULL) == 1.0, "ten times 0.1 rounds to 1 (a naive sum gives %.17g)",
	   0.1 + 0.1 + 0.1 + 0.1 + 0.1 + 0.1 + 0.1 + 0.1 + 0.1 + 0.1);
	double v3[] = {-2.5, 0.5, -1};
	ok(xsum_of(v3, 3, NULL) == -3, "negative sums");
	double v4[] = {0x1p-1074, 0x1p-1074, 0x1p-1074};
	ok(xsum_of(v4, 3, NULL) == 3 * 0x1p-1074, "the smallest subnormals");
	double v5[] = {0x1.fffffffffffffp1023, 0x1.fffffffffffffp1023, -0x1.fffffffffffffp1023};
	ok(xsum_of(v5, 3, NULL) == 0x1.fffffffffffffp1023, "past the largest double and back");
	double v6[] = {0x1.fffffffffffffp1023, 0x1p971};
	ok(isinf(xsum_of(v6, 2, NULL)), "a sum past the largest double is infinite");
	double v7[] = {1, NAN, 2};
	ok(isnan(xsum_of(v7, 3, NULL)), "NaN terms give NaN");
	double v8[] = {1, INFINITY, 2};
	ok(xsum_of(v8, 3, NULL) == INFINITY, "infinite terms give infinity");
	double v9[] = {INFINITY, -INFINITY};
	ok(isnan(xsum_of(v9, 2, NULL)), "inf - inf is NaN");
	/* ties: 2^53 + 1 is halfway between two doubles: to even (2^53);
	 * 2^53 + 1 + 2^-100 is above half: up */
	double v10[] = {0x1p53, 1};
	ok(xsum_of(v10, 2, NULL) == 0x1p53, "a tie rounds to even");
	double v11[] = {0x1p53, 1, 0x1p-100};
	ok(xsum_of(v11, 3, NULL) == 0x1p53 + 2, "just above a tie rounds up");
	double v12[] = {0x1p53 + 2, 1};
	ok(xsum_of(v12, 2, NULL) == 0x1p53 + 4, "a tie to even, upward");

	/* random terms from 2^-20 to 2^20, both signs, 52-bit mantissas: a
	 * __float128 (113 bits) holds every partial sum exactly */
	enum { N = 20000 };
	double *v = malloc(N * sizeof *v);
	size_t *ord = malloc(N * sizeof *ord);
	__float128 q = 0;
	for (size_t i = 0; i < N; i++) {
		double m = (double)(xr() >> 11) / 0x1p53;
		v[i] = ldexp(m, (int)(xr() % 41) - 20) * ((xr() & 1) ? -1 : 1);
		q += v[i];
		ord[i] = i;
	}
	double want = (double)q, got = xsum_of(v, N, NULL);
	ok(same_bits(got, want), "%d random terms: the correctly rounded sum (%.17g, want %.17g)", N,
	   got, want);
	for (int t = 0; t < 3; t++) {
		for (size_t i = N - 1; i > 0; i--) {
			size_t j = xr() % (i + 1), x = ord[i];
			ord[i] = ord[j];
			ord[j] = x;
		}
		ok(same_bits(xsum_of(v, N, ord), got), "the same bits in shuffled order %d", t + 1);
	}
	/* split between three "workers", exported, summed as doubles, imported */
	dp_xsum w[3];
	for (int i = 0; i < 3; i++)
		dp_xsum_init(&w[i]);
	for (size_t i = 0; i < N; i++)
		dp_xsum_add(&w[xr() % 3], v[i]);
	double ex[3][DP_XSUM_DOUBLES], sum[DP_XSUM_DOUBLES];
	for (int i = 0; i < 3; i++)
		dp_xsum_export(&w[i], ex[i]);
	for (int j = 0; j < DP_XSUM_DOUBLES; j++)
		sum[j] = (ex[2][j] + ex[0][j]) + ex[1][j];
	dp_xsum all;
	ok(dp_xsum_import(&all, sum) == 0, "the summed exports import");
	ok(same_bits(dp_xsum_value(&all), got), "three workers' exports summed give the same bits");
	dp_xsum_merge(&w[0], &w[1]);
	dp_xsum_merge(&w[0], &w[2]);
	ok(same_bits(dp_xsum_value(&w[0]), got), "merged accumulators give the same bits");
	sum[5] = 0.5;
	ok(dp_xsum_import(&all, sum) < 0, "a fractional limb is refused");
	free(v);
	free(ord);
}

static int near(double a, double b) { return fabs(a - b) <= 1e-12 * fmax(1, fabs(b)); }

static void test_class(void)
{
	/* labels 0 0 1 2 2 2, predictions 0 1 1 2 2 0 (the last with the
	 * label third: a top-2 miss) */
	const int32_t y[6] = {0, 0, 1, 2, 2, 2};
	const float z[6][3] = {{2, 0, 0}, {0, 2, 0}, {0, 2, 0}, {0, 0, 2}, {0, 0, 2}, {2, 1, 0}};
	dp_err e;
	dp_eval *ev = dp_eval_new(DP_EVAL_CLASS, 3, 2, &e);
	int32_t pred[6];
	double loss[6];
	float prob[18];
	ok(dp_eval_add_class(ev, &z[0][0], y, 4, pred, loss, prob, &e) == 0, "add 4 samples");
	ok(dp_eval_add_class(ev, &z[4][0], y + 4, 2, pred + 4, loss + 4, prob + 12, &e) == 0,
	   "add 2 more");
	is_int(pred[1], 1, "argmax");
	is_int(pred[5], 0, "argmax of the last");
	double l1 = log(exp(2) + 2) - 2, l0 = log(exp(2) + 2), lm = log(exp(2) + exp(1) + 1);
	ok(near(loss[0], l1) && near(loss[1], l0) && near(loss[5], lm), "per-sample cross-entropy");
	ok(fabs(prob[0] - exp(2) / (exp(2) + 2)) < 1e-7, "probabilities");
	dp_eval_report r;
	ok(dp_eval_report_get(ev, &r, &e) == 0, "report");
	is_int(r.samples, 6, "samples");
	ok(near(r.loss, (4 * l1 + l0 + lm) / 6), "mean loss %.17g", r.loss);
	ok(r.accuracy == 4.0 / 6, "accuracy 4/6");
	ok(r.topk_accuracy == 5.0 / 6, "top-2 accuracy 5/6");
	ok(r.classes[0].precision == 0.5 && r.classes[1].precision == 0.5 &&
		   r.classes[2].precision == 1,
	   "precision per class: 1/2 1/2 1");
	ok(r.classes[0].recall == 0.5 && r.classes[1].recall == 1 && r.classes[2].recall == 2.0 / 3,
	   "recall per class: 1/2 1 2/3");
	ok(near(r.classes[0].f1, 0.5) && near(r.classes[1].f1, 2.0 / 3) && near(r.classes[2].f1, 0.8),
	   "f1 per class: 1/2 2/3 4/5");
	ok(near(r.precision_macro, 2.0 / 3) && near(r.recall_macro, 13.0 / 18) &&
		   near(r.f1_macro, (0.5 + 2.0 / 3 + 0.8) / 3),
	   "macro averages");
	ok(near(r.precision_weighted, 0.75) && near(r.recall_weighted, 4.0 / 6) &&
		   near(r.f1_weighted, (1 + 2.0 / 3 + 2.4) / 6),
	   "weighted averages");
	const uint64_t cm[9] = {1, 1, 0, 0, 1, 0, 1, 0, 2};
	ok(r.confusion && !memcmp(r.confusion, cm, sizeof cm), "confusion matrix (rows: labels)");

	double v;
	const char *names[] = {"cat", "dog", "bird"};
	ok(dp_eval_metric(&r, "accuracy", NULL, &v, &e) == 0 && v == r.accuracy, "metric accuracy");
	ok(dp_eval_metric(&r, "top_2_accuracy", NULL, &v, &e) == 0 && v == 5.0 / 6, "metric top_2_accuracy");
	ok(dp_eval_metric(&r, "recall[2]", NULL, &v, &e) == 0 && v == 2.0 / 3, "metric recall[2]");
	ok(dp_eval_metric(&r, "f1[dog]", names, &v, &e) == 0 && near(v, 2.0 / 3), "metric f1[dog]");
	ok(dp_eval_metric(&r, "support[bird]", names, &v, &e) == 0 && v == 3, "metric support[bird]");
	ok(dp_eval_metric(&r, "recall[3]", NULL, &v, &e) == DP_ENOTFOUND, "no class 3");
	is_str(e.msg, "no metric 'recall[3]': class 3 is outside 0..2 (the model has 3 classes)",
	       "... the message says the class is out of range");
	ok(dp_eval_metric(&r, "f1[cow]", names, &v, &e) == DP_ENOTFOUND, "no class cow");
	like(e.msg, "no metric 'f1[cow]': no class of that name (a number 0..2, or one of cat, dog, bird)",
	     "... the message says no class has that name");
	ok(dp_eval_metric(&r, "r2", NULL, &v, &e) == DP_ENOTFOUND, "no r2 for a classifier");
	like(e.msg, "accuracy", "the message lists the metrics");
	char buf[64];
	is_str(dp_eval_metric_at(&r, 5, buf, sizeof buf, &v), "top_2_accuracy", "the 6th metric");
	is_int(dp_eval_metric_count(&r), 12, "12 scalar metrics");
	is_str(dp_eval_metric_at(&r, 1, buf, sizeof buf, &v), "skipped", "the 2nd: skipped");
	ok(v == 0, "... none without dp_eval_add_skipped");

	int32_t bad = 3;
	ok(dp_eval_add_class(ev, &z[0][0], &bad, 1, NULL, NULL, NULL, &e) == DP_EARG,
	   "a label out of range is refused");

	/* the same samples split between two accumulators and combined */
	dp_eval *a = dp_eval_new(DP_EVAL_CLASS, 3, 2, &e), *b = dp_eval_new(DP_EVAL_CLASS, 3, 2, &e);
	dp_eval_add_class(a, &z[0][0], y, 2, NULL, NULL, NULL, &e);
	dp_eval_add_class(b, &z[2][0], y + 2, 3, NULL, NULL, NULL, &e);
	dp_eval_add_class(a, &z[5][0], y + 5, 1, NULL, NULL, NULL, &e);
	dp_eval_add_skipped(a, 2);
	dp_eval_add_skipped(b, 1);
	size_t ns = dp_eval_state_size(a);
	double *sa = calloc(ns, sizeof *sa), *sb = calloc(ns, sizeof *sb);
	dp_eval_state_get(a, sa);
	dp_eval_state_get(b, sb);
	for (size_t i = 0; i < ns; i++)
		sa[i] += sb[i];
	ok(dp_eval_state_set(b, sa, &e) == 0, "the summed states set");
	dp_eval_report r2;
	dp_eval_report_get(ev, &r, &e);
	dp_eval_report_get(b, &r2, &e);
	ok(same_bits(r.loss, r2.loss) && r.accuracy == r2.accuracy && r.f1_macro == r2.f1_macro &&
		   !memcmp(r.confusion, r2.confusion, 9 * sizeof *r.confusion),
	   "split and combined: the same metrics, bit for bit");
	ok(r2.skipped == 3 && r2.skipped_fraction == 3.0 / 9, "... the skipped records summed: 3 of 9");
	/* reset: as new, then the same samples give the same bits */
	dp_eval_reset(b);
	ok(dp_eval_report_get(b, &r2, &e) == DP_EDATA, "reset: no samples");
	dp_eval_add_class(b, &z[0][0], y, 6, NULL, NULL, NULL, &e);
	dp_eval_report_get(ev, &r, &e);
	dp_eval_report_get(b, &r2, &e);
	ok(r2.samples == 6 && same_bits(r.loss, r2.loss) && r.topk_accuracy == r2.topk_accuracy &&
		   r.classes[1].tp == r2.classes[1].tp &&
		   !memcmp(r.confusion, r2.confusion, 9 * sizeof *r.confusion),
	   "reset, then added again: the metrics of a new accumulator");
	free(sa);
	free(sb);
	dp_eval_free(a);
	dp_eval_free(b);
	dp_eval_free(ev);

	/* a class never predicted and never seen: out of the macro average */
	ev = dp_eval_new(DP_EVAL_CLASS, 4, 0, &e);
	dp_eval_add_class(ev, &z[0][0], y, 0, NULL, NULL, NULL, &e);
	ok(dp_eval_report_get(ev, &r, &e) == DP_EDATA, "no samples: an error");
	const float z4[2][4] = {{1, 0, 0, 0}, {1, 0, 0, 0}};
	const int32_t y4[2] = {0, 1};
	dp_eval_add_class(ev, &z4[0][0], y4, 2, NULL, NULL, NULL, &e);
	dp_eval_report_get(ev, &r, &e);
	is_int(r.classes_seen, 2, "two classes seen");
	ok(r.precision_macro == 0.25 && r.recall_macro == 0.5, "macro over the classes seen");
	is_int(dp_eval_metric_count(&r), 11, "no top-k metric without topk");
	dp_eval_free(ev);
}

static void test_regression(void)
{
	const float t[6] = {1, 2, 3, 4, 5, 6}, o[6] = {1, 2.5, 2, 4, 5, 7};
	dp_err e;
	dp_eval *ev = dp_eval_new(DP_EVAL_REGRESSION, 2, 0, &e);
	double loss[3];
	ok(dp_eval_add_regression(ev, o, t, 3, loss, &e) == 0, "add 3 samples of 2 outputs");
	ok(loss[0] == 0.125 && loss[1] == 0.5 && loss[2] == 0.5, "per-sample mean squared error");
	dp_eval_report r;
	dp_eval_report_get(ev, &r, &e);
	ok(r.mse == 0.375 && r.loss == 0.375, "mse 2.25/6");
	ok(near(r.mae, 2.5 / 6), "mae 2.5/6");
	ok(r.rmse == sqrt(0.375), "rmse");
	ok(r.outputs[0].r2 == 0.875 && r.outputs[1].r2 == 0.84375 && r.r2 == 0.859375,
	   "r2 per output 1 - 1/8, 1 - 1.25/8, uniform mean");
	double v;
	ok(dp_eval_metric(&r, "r2[1]", NULL, &v, &e) == 0 && v == 0.84375, "metric r2[1]");
	ok(dp_eval_metric(&r, "accuracy", NULL, &v, &e) == DP_ENOTFOUND, "no accuracy");
	dp_eval_free(ev);
	/* constant targets: r2 is 1 when exact, else 0 */
	const float c[2] = {3, 3}, c1[2] = {3, 3}, c2[2] = {3, 4};
	ev = dp_eval_new(DP_EVAL_REGRESSION, 1, 0, &e);
	dp_eval_add_regression(ev, c1, c, 2, NULL, &e);
	dp_eval_report_get(ev, &r, &e);
	ok(r.r2 == 1, "constant targets, exact: r2 1");
	dp_eval_add_regression(ev, c2, c, 2, NULL, &e);
	dp_eval_report_get(ev, &r, &e);
	ok(r.r2 == 0, "constant targets, not exact: r2 0");
	dp_eval_reset(ev);
	dp_eval_add_regression(ev, c1, c, 2, NULL, &e);
	dp_eval_report_get(ev, &r, &e);
	ok(r.samples == 2 && r.r2 == 1 && r.mse == 0, "reset: the regression sums start again");
	dp_eval_free(ev);
}

static void test_gates(void)
{
	dp_gate g;
	dp_err e;
	ok(dp_gate_parse("accuracy>=0.9", &g, &e) == 0 && !strcmp(g.metric, "accuracy") &&
		   g.op == DP_GATE_GE && g.threshold == 0.9,
	   "accuracy>=0.9");
	ok(dp_gate_pass(&g, 0.9) && dp_gate_pass(&g, 9.0 / 10) && !dp_gate_pass(&g, 0.8999) &&
		   !dp_gate_pass(&g, NAN),
	   ">=: 0.9 and 9/10 pass, less and NaN do not");
	ok(dp_gate_parse(" loss < 0.5 ", &g, &e) == 0 && !strcmp(g.metric, "loss") && g.op == DP_GATE_LT,
	   "spaces around");
	ok(!dp_gate_pass(&g, 0.5) && dp_gate_pass(&g, 0.49), "<: strict");
	ok(dp_gate_parse("recall[a>b]>0.8", &g, &e) == 0 && !strcmp(g.metric, "recall[a>b]") &&
		   g.op == DP_GATE_GT,
	   "a class name holding an operator");
	ok(dp_gate_parse("f1_macro<=1e-1", &g, &e) == 0 && g.op == DP_GATE_LE && g.threshold == 0.1,
	   "<= with an exponent");
	ok(dp_gate_parse("recall[Ankle boot]>=0.5", &g, &e) == 0 && !strcmp(g.metric, "recall[Ankle boot]") &&
		   g.op == DP_GATE_GE && g.threshold == 0.5,
	   "a class name with a space");
	ok(dp_gate_parse(" f1[\"a]b\"] > 0.1", &g, &e) == 0 && !strcmp(g.metric, "f1[a]b]"),
	   "a class name with ] in double quotes");
	ok(dp_gate_parse("f1['it''s']<1", &g, &e) == DP_EARG, "... quotes closed before their ]");
	ok(dp_gate_parse("support['x y']<=3", &g, &e) == 0 && !strcmp(g.metric, "support[x y]"),
	   "... single quotes");
	const char *bad[] = {"accuracy", "accuracy=0.9", "accuracy==0.9", ">=0.9", "accuracy>=",
			     "accuracy>=x", "accuracy>=0.9x", "accuracy>=inf", "acc uracy>=1",
			     "accuracy!=1", "recall[a] x>1", "f1[\"a]>1", NULL};
	for (int i = 0; bad[i]; i++)
		ok(dp_gate_parse(bad[i], &g, &e) == DP_EARG, "refused: '%s' (%s)", bad[i], e.msg);
}

int main(void)
{
	test_xsum();
	test_class();
	test_regression();
	test_gates();
	return done_testing();
}
