/* plot.c - dp_plot.h: nice ticks, bounded points per series (averaged in
 * pairs), the x axis choice, escaping of labels, panels.  The SVG's
 * validity as XML is checked with an XML parser in tests/metrics-grep-plot.t. */
#define _GNU_SOURCE
#include "dp_plot.h"
#include "tap.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int count(const char *s, const char *sub)
{
	int n = 0;
	for (const char *p = s; (p = strstr(p, sub)); p += strlen(sub))
		n++;
	return n;
}

static void ticks(void)
{
	struct {
		double lo, hi;
		int want;
		double first, last, step;
		int frac;
	} t[] = {
		{0, 1, 5, 0, 1, 0.2, 1},          {0.25, 2.6, 5, 0, 3, 0.5, 1},
		{10, 2350, 7, 0, 2500, 500, 0},   {0.0009, 0.0011, 5, 0.0009, 0.0011, 0.00005, 5},
		{-3, 7, 5, -4, 8, 2, 0},          {114000, 126000, 5, 110000, 130000, 5000, 0},
		{5, 5.5, 5, 5, 5.5, 0.1, 1},
	};
	for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
		double f, l, s;
		int frac = dp_plot_ticks(t[i].lo, t[i].hi, t[i].want, &f, &l, &s);
		ok(fabs(f - t[i].first) < 1e-12 && fabs(l - t[i].last) < 1e-12 &&
			   fabs(s - t[i].step) < 1e-12 && frac == t[i].frac,
		   "ticks [%g, %g]: %g..%g by %g, %d decimals", t[i].lo, t[i].hi, t[i].first,
		   t[i].last, t[i].step, t[i].frac);
		if (!(fabs(f - t[i].first) < 1e-12 && fabs(l - t[i].last) < 1e-12))
			printf("#   got %g..%g by %g, %d\n", f, l, s, frac);
	}
}

/* Ranges at the ends of doubles: the width passes DBL_MAX; nice ends
 * beyond DBL_MAX are the data's own. */
static void huge_ticks(void)
{
	struct {
		double lo, hi;
		int want;
		double first, last, step;
	} t[] = {
		{-1e308, 1e308, 5, -1e308, 1e308, 5e307},
		{-DBL_MAX, DBL_MAX, 5, -DBL_MAX, DBL_MAX, 1e308},
		{-DBL_MAX, DBL_MAX, 2, -DBL_MAX, DBL_MAX, 1e308},
		{1.6e308, DBL_MAX, 5, 1.6e308, DBL_MAX, 5e306},
		{DBL_MAX, DBL_MAX, 5, 1.797e308, DBL_MAX, 5e301},
		{-1e308, 1, 5, -1e308, 0, 2e307}, /* 1 is within a millionth of a step of 0 */
	};
	for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
		double f, l, st;
		dp_plot_ticks(t[i].lo, t[i].hi, t[i].want, &f, &l, &st);
		int good = isfinite(f) && isfinite(l) && isfinite(st) && f <= t[i].lo && l >= t[i].hi - st * 1e-6 &&
			   fabs(st / t[i].step - 1) < 1e-9 && fabs(f - t[i].first) <= fabs(t[i].first) * 1e-3 &&
			   fabs(l - t[i].last) <= fabs(t[i].last) * 1e-3 + st * 1e-6;
		ok(good, "ticks [%g, %g]: %g..%g by %g", t[i].lo, t[i].hi, t[i].first, t[i].last,
		   t[i].step);
		if (!good)
			printf("#   got %.17g..%.17g by %.17g\n", f, l, st);
	}
}

static void points(void)
{
	dp_plot *p = dp_plot_new();
	int a = dp_plot_series(p, "loss", "loss");
	int b = dp_plot_series(p, "val_loss", "loss");
	int c = dp_plot_series(p, "lr <&> \"x\"", "lr");
	is_int(dp_plot_series(p, "loss", "other"), a, "the same label is the same series");
	for (int i = 0; i < 1000000; i++)
		dp_plot_add(p, a, i, i, 1.0 / (1 + i));
	for (int i = 0; i < 10; i++)
		dp_plot_add(p, b, i * 100000, i, 0.5);
	dp_plot_add(p, c, 1, 1, 0.001);
	dp_plot_add(p, c, 2, 2, NAN);
	dp_plot_add(p, c, 3, 3, INFINITY);
	size_t n = dp_plot_points(p);
	ok(n <= DP_PLOT_MAX_POINTS + 1 + 10 + 1 && n > DP_PLOT_MAX_POINTS / 2,
	   "a million points kept as %zu", n);
	dp_err e;
	size_t len;
	char *svg = dp_plot_svg(p, "run <1>", &len, &e);
	ok(svg != NULL, "svg");
	is_int(strlen(svg), len, "length");
	is_int(count(svg, "class=\"series\""), 3, "three series");
	is_int(count(svg, "class=\"panel\""), 2, "two panels: loss and val_loss share one");
	like(svg, "data-label=\"lr &lt;&amp;&gt; &quot;x&quot;\"", "labels escaped");
	like(svg, "<title>run &lt;1&gt;</title>", "title escaped");
	like(svg, ">step</text>", "x is the step");
	is_int(count(svg, "<circle"), 10 + 1, "dots on short series only (non-finite y dropped)");
	ok(!strstr(svg, "nan") && !strstr(svg, "inf"), "no nan or inf in the SVG");
	free(svg);
	/* One point without a step: x becomes the line number. */
	dp_plot_add(p, b, NAN, 11, 0.4);
	svg = dp_plot_svg(p, NULL, &len, &e);
	like(svg, ">line</text>", "x is the line when a step is missing");
	free(svg);
	dp_plot_free(p);

	p = dp_plot_new();
	svg = dp_plot_svg(p, NULL, &len, &e);
	ok(!svg && e.code == DP_EARG, "no points: no chart");
	dp_plot_series(p, "x\xff\x01y", "x");
	dp_plot_add(p, 0, 1, 1, 5);
	svg = dp_plot_svg(p, NULL, &len, &e);
	like(svg, "data-label=\"x??y\"", "invalid UTF-8 and controls replaced");
	like(svg, "data-points=\"1\"", "one point");
	free(svg);
	dp_plot_free(p);
}

/* Any finite value is drawn; the sums of averaged points may pass DBL_MAX. */
static void huge_points(void)
{
	dp_plot *p = dp_plot_new();
	int a = dp_plot_series(p, "flat", "big");
	int b = dp_plot_series(p, "zigzag", "big");
	int c = dp_plot_series(p, "steps", "steps");
	for (int i = 0; i < 100000; i++) {
		dp_plot_add(p, a, i, i, DBL_MAX);
		dp_plot_add(p, b, i, i, i % 2 ? 1.7e308 : -1.7e308);
	}
	dp_plot_add(p, c, -DBL_MAX, 1, 1);
	dp_plot_add(p, c, DBL_MAX, 2, 2);
	dp_plot_add(p, c, 0, 3, 3);
	dp_plot_add(p, c, 1, 4, INFINITY); /* left out */
	size_t n = dp_plot_points(p);
	ok(n > DP_PLOT_MAX_POINTS && n <= 2 * DP_PLOT_MAX_POINTS + 3, "huge values kept: %zu points", n);
	dp_err e;
	size_t len;
	char *svg = dp_plot_svg(p, NULL, &len, &e);
	ok(svg != NULL, "a chart of values up to DBL_MAX");
	ok(svg && !strstr(svg, "nan") && !strstr(svg, "inf"), "no nan or inf in it");
	like(svg, "data-label=\"steps\" data-points=\"3\"", "steps of +-DBL_MAX: 3 points");
	/* DBL_MAX averaged stays DBL_MAX: the flat series is one horizontal
	 * line at a single y. */
	const char *q = svg ? strstr(svg, "data-label=\"flat\"") : NULL;
	q = q ? strstr(q, " points=\"") : NULL;
	int flat = q != NULL;
	double y0 = NAN;
	for (q = q ? q + 9 : NULL; flat && q && *q != '"';) {
		double x, y;
		int used;
		if (sscanf(q, " %lf,%lf%n", &x, &y, &used) != 2)
			break;
		if (isnan(y0))
			y0 = y;
		flat = y == y0;
		q += used;
	}
	ok(flat && !isnan(y0), "averaged DBL_MAX values stay at one height (%g)", y0);
	free(svg);
	dp_plot_free(p);
}

int main(void)
{
	ticks();
	huge_ticks();
	points();
	huge_points();
	return done_testing();
}
