/*
 * eval.c - libFuzzer target: dp_eval.h's parsers of outside text (the
 * --require gates and metric names, as a user or a script writes them)
 * and its exact sums of arbitrary doubles.
 *
 * The first byte picks: a gate and a metric lookup on a small report
 * (even), or the rest as doubles (odd).  Checks: an accepted gate names a
 * metric and has a finite threshold, a rejected one has a message; a
 * lookup either finds a value or says why; the exact sum of any doubles
 * gives the same bits forwards, backwards and split in two and combined
 * through the exported form; no crash, leak or hang.
 */
#include "dp_eval.h"
#include "fuzz.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int same(double a, double b) { return memcmp(&a, &b, sizeof a) == 0 || (isnan(a) && isnan(b)); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	dp_err e;
	if (!(data[0] & 1)) {
		char *s = malloc(size);
		memcpy(s, data + 1, size - 1);
		s[size - 1] = 0;
		dp_gate g;
		if (dp_gate_parse(s, &g, &e) == 0) {
			CHECK(g.metric[0] && isfinite(g.threshold) && g.op >= DP_GATE_LT && g.op <= DP_GATE_GE,
			      "accepted gate '%s'", s);
			static const int32_t y[4] = {0, 1, 2, 2};
			static const float z[12] = {1, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 1};
			dp_eval *ev = dp_eval_new(DP_EVAL_CLASS, 3, 2, &e);
			dp_eval_add_class(ev, z, y, 4, NULL, NULL, NULL, &e);
			dp_eval_report r;
			CHECK(dp_eval_report_get(ev, &r, &e) == 0, "report");
			const char *names[] = {"a", "b<c", "]"};
			double v;
			int rc = dp_eval_metric(&r, g.metric, names, &v, &e);
			CHECK(rc == 0 || (rc == DP_ENOTFOUND && e.msg[0]), "lookup of '%s'", g.metric);
			dp_gate_pass(&g, v);
			dp_eval_free(ev);
		} else {
			CHECK(e.msg[0], "a refused gate has a message");
		}
		free(s);
		return 0;
	}
	size_t n = (size - 1) / sizeof(double);
	double *v = malloc((n + 1) * sizeof *v);
	memcpy(v, data + 1, n * sizeof *v);
	dp_xsum f, b, h1, h2;
	dp_xsum_init(&f);
	dp_xsum_init(&b);
	dp_xsum_init(&h1);
	dp_xsum_init(&h2);
	for (size_t i = 0; i < n; i++) {
		dp_xsum_add(&f, v[i]);
		dp_xsum_add(&b, v[n - 1 - i]);
		dp_xsum_add(i % 2 ? &h1 : &h2, v[i]);
	}
	double x1[DP_XSUM_DOUBLES], x2[DP_XSUM_DOUBLES];
	dp_xsum_export(&h1, x1);
	dp_xsum_export(&h2, x2);
	for (int i = 0; i < DP_XSUM_DOUBLES; i++)
		x1[i] += x2[i];
	dp_xsum c;
	CHECK(dp_xsum_import(&c, x1) == 0, "import of summed exports");
	double a = dp_xsum_value(&f);
	CHECK(same(a, dp_xsum_value(&b)), "forwards and backwards: %a vs %a", a, dp_xsum_value(&b));
	CHECK(same(a, dp_xsum_value(&c)), "split and combined: %a vs %a", a, dp_xsum_value(&c));
	if (n == 1)
		CHECK(same(a, v[0] == 0 ? 0.0 : v[0]), "one term is itself: %a vs %a", a, v[0]);
	free(v);
	return 0;
}
