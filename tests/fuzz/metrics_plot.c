/*
 * metrics_plot.c - libFuzzer target: the SVG chart on any values.
 *
 * The input is a list of 25-byte points: a series byte (8 series, 3
 * panels) and three doubles (step, line, y) taken as raw bits, so NaN,
 * infinities, denormals, huge and equal values all occur.  Checks: a chart
 * with points renders; it has no "nan" or "inf" text, one series group per
 * series, and every coordinate printed is finite.
 */
#define _GNU_SOURCE
#include "dp_plot.h"
#include "fuzz.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	dp_plot *p = dp_plot_new();
	int ids[8];
	char label[32], panel[32];
	for (int i = 0; i < 8; i++) {
		snprintf(label, sizeof label, "s%d <&>", i);
		snprintf(panel, sizeof panel, "p%d", i % 3);
		ids[i] = dp_plot_series(p, label, panel);
	}
	int used[8] = {0};
	for (size_t off = 0; off + 25 <= size; off += 25) {
		double st, ln, y;
		memcpy(&st, data + off + 1, 8);
		memcpy(&ln, data + off + 9, 8);
		memcpy(&y, data + off + 17, 8);
		if (!isfinite(ln))
			ln = 0;
		int s = data[off] & 7;
		dp_plot_add(p, ids[s], st, ln, y);
		used[s] |= isfinite(y); /* what dp_plot keeps: any finite y */
	}
	dp_err e;
	size_t len;
	char *svg = dp_plot_svg(p, "fuzz", &len, &e);
	int nused = 0;
	for (int i = 0; i < 8; i++)
		nused += used[i];
	if (nused) {
		CHECK(svg, "no chart: %s", e.msg);
		CHECK(!strstr(svg, "nan") && !strstr(svg, "inf"), "non-finite text in the SVG");
		int groups = 0;
		for (const char *q = svg; (q = strstr(q, "class=\"series\"")); q++)
			groups++;
		CHECK(groups == 8, "%d series groups", groups);
	} else {
		CHECK(!svg, "a chart without points");
	}
	free(svg);
	dp_plot_free(p);
	return 0;
}
