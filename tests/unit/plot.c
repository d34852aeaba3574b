/* plot.c - dp_plot.h: nice ticks, bounded points per series (averaged in
 * pairs), the x axis choice, escaping of labels, panels.  The SVG's
 * validity as XML is checked with an XML parser in tests/metrics-grep-plot.t. */
#define _GNU_SOURCE
#include "dp_plot.h"
#include "tap.h"

#include <math.h>
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

int main(void)
{
	ticks();
	points();
	return done_testing();
}
