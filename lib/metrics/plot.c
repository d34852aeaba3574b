/*
 * plot.c - SVG line charts of metric series (dp_plot.h).
 *
 * Layout, in SVG user units (pixels): an optional title line, then one
 * panel per group of series, stacked.  A panel is a title, a plot area of
 * PLOT_W x PLOT_H with a grid at the y and x ticks, tick labels, the x
 * axis label, and a legend to the right of the plot area.  All panels share
 * the x range so that steps line up vertically.
 *
 * Any finite value can be drawn, up to +-DBL_MAX: sums of averaged points
 * go on scaled by a power of two when they would overflow, ranges wider
 * than DBL_MAX are measured in halves, and an axis whose nice ends would
 * lie beyond a double's range ends at the data instead.
 */
#define _GNU_SOURCE
#include "dp_plot.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MARGIN_L 76
#define PLOT_W 600
#define PLOT_H 220
#define LEGEND_GAP 18
#define LEGEND_W 190
#define WIDTH (MARGIN_L + PLOT_W + LEGEND_GAP + LEGEND_W)
#define TITLE_H 34
#define PANEL_TITLE_H 26
#define PANEL_BOTTOM 46
#define PANEL_GAP 14
#define PANEL_H (PANEL_TITLE_H + PLOT_H + PANEL_BOTTOM)
#define MARKERS_UPTO 60  /* series this short get a dot per point */
#define LABEL_CHARS 24   /* legend labels longer than this are cut */
#define LEGEND_ROW 18

static const char *const palette[] = {
	"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
	"#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
};
#define NCOLORS (sizeof palette / sizeof palette[0])

struct pt {
	double step, line, y; /* step NaN when any point averaged in had none */
};

/* A sum of finite values, in units of 2^-SUM_SCALE once it would have
 * overflowed (scaled = 1): 2^64 values of at most DBL_MAX stay below 2^960. */
#define SUM_SCALE 128
struct sum {
	double s;
	int scaled;
};

struct series {
	char *label;
	int panel;
	struct pt *pts;
	size_t n;
	size_t group; /* raw points per stored point */
	struct sum acc_step, acc_line, acc_y; /* sums of the group being filled */
	size_t nacc;
	int acc_nostep;
};

struct panel {
	char *name;
};

struct dp_plot {
	struct series *s;
	int ns;
	size_t cap_s;
	struct panel *p;
	int np;
	size_t cap_p;
};

dp_plot *dp_plot_new(void) { return calloc(1, sizeof(dp_plot)); }

void dp_plot_free(dp_plot *p)
{
	if (!p)
		return;
	for (int i = 0; i < p->ns; i++) {
		free(p->s[i].label);
		free(p->s[i].pts);
	}
	for (int i = 0; i < p->np; i++)
		free(p->p[i].name);
	free(p->s);
	free(p->p);
	free(p);
}

static int find_panel(dp_plot *p, const char *name)
{
	for (int i = 0; i < p->np; i++)
		if (strcmp(p->p[i].name, name) == 0)
			return i;
	if (dp_grow(&p->p, &p->cap_p, (size_t)p->np + 1, sizeof *p->p) < 0)
		return DP_ENOMEM;
	char *copy = strdup(name);
	if (!copy)
		return DP_ENOMEM;
	p->p[p->np].name = copy;
	return p->np++;
}

int dp_plot_series(dp_plot *p, const char *label, const char *panel)
{
	for (int i = 0; i < p->ns; i++)
		if (strcmp(p->s[i].label, label) == 0)
			return i;
	int pi = find_panel(p, panel);
	if (pi < 0)
		return pi;
	if (dp_grow(&p->s, &p->cap_s, (size_t)p->ns + 1, sizeof *p->s) < 0)
		return DP_ENOMEM;
	struct series *s = &p->s[p->ns];
	memset(s, 0, sizeof *s);
	s->label = strdup(label);
	s->pts = malloc(DP_PLOT_MAX_POINTS * sizeof *s->pts);
	if (!s->label || !s->pts) {
		free(s->label);
		free(s->pts);
		return DP_ENOMEM;
	}
	s->panel = pi;
	s->group = 1;
	return p->ns++;
}

static void sum_add(struct sum *a, double v)
{
	if (!a->scaled) {
		double t = a->s + v;
		if (isfinite(t)) {
			a->s = t;
			return;
		}
		a->scaled = 1;
		a->s = ldexp(a->s, -SUM_SCALE);
	}
	a->s += ldexp(v, -SUM_SCALE);
}

static double sum_mean(const struct sum *a, double k)
{
	double m = a->s / k;
	return a->scaled ? ldexp(m, SUM_SCALE) : m;
}

/* The middle of a and b, whose sum may overflow. */
static double mid(double a, double b)
{
	double m = (a + b) / 2;
	return isfinite(m) || isnan(a) || isnan(b) ? m : a / 2 + b / 2;
}

static struct pt acc_mean(const struct series *s)
{
	double k = (double)s->nacc;
	struct pt m = {s->acc_nostep ? NAN : sum_mean(&s->acc_step, k), sum_mean(&s->acc_line, k),
		       sum_mean(&s->acc_y, k)};
	return m;
}

int dp_plot_add(dp_plot *p, int id, double step, double line, double y)
{
	if (id < 0 || id >= p->ns)
		return DP_EARG;
	if (!isfinite(y) || !isfinite(line))
		return DP_OK; /* no place on a chart */
	if (!isfinite(step))
		step = NAN;
	struct series *s = &p->s[id];
	if (isnan(step))
		s->acc_nostep = 1;
	else
		sum_add(&s->acc_step, step);
	sum_add(&s->acc_line, line);
	sum_add(&s->acc_y, y);
	if (++s->nacc < s->group)
		return DP_OK;
	if (s->n == DP_PLOT_MAX_POINTS) {
		/* Full: average neighbours in pairs; groups double in size. */
		for (size_t i = 0; i < s->n / 2; i++) {
			struct pt a = s->pts[2 * i], b = s->pts[2 * i + 1];
			s->pts[i] = (struct pt){mid(a.step, b.step), mid(a.line, b.line), mid(a.y, b.y)};
		}
		s->n /= 2;
		s->group *= 2;
		if (s->nacc < s->group)
			return DP_OK;
	}
	s->pts[s->n++] = acc_mean(s);
	s->acc_step = s->acc_line = s->acc_y = (struct sum){0, 0};
	s->nacc = 0;
	s->acc_nostep = 0;
	return DP_OK;
}

size_t dp_plot_points(const dp_plot *p)
{
	size_t n = 0;
	for (int i = 0; i < p->ns; i++)
		n += p->s[i].n + (p->s[i].nacc > 0);
	return n;
}

/* ---- Ticks -------------------------------------------------------------- */

/* An axis from lo to hi with n ticks at t0 + i * step (i < n). */
struct axis {
	double lo, hi, t0, step;
	int n;
	int frac;      /* decimals the tick labels need */
	double absmax; /* the largest magnitude on the axis, for labels */
};

/* The nice number (1, 2 or 5 times a power of ten) near x > 0, at most
 * 1e308 (the largest a double holds). */
static double nicenum(double x, int round)
{
	if (!(x > 0))
		return x;
	x = fmin(x, DBL_MAX);
	double ex = floor(log10(x));
	double f = x / pow(10, ex), nf;
	if (round)
		nf = f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10;
	else
		nf = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
	double v = nf * pow(10, ex);
	return isfinite(v) ? v : 1e308;
}

/* floor(log10(x)) as an int, for x > 0 (0 otherwise). */
static int ilog10(double x)
{
	double l = floor(log10(x) + 1e-9);
	return x > 0 && isfinite(l) ? (int)fmax(fmin(l, 400), -400) : 0;
}

/* hi - lo, which may pass DBL_MAX: then the width in halves, doubled only
 * once divided by k >= 2.  (k >= 1; for k == 1 an overflowing width is
 * DBL_MAX.) */
static double width_over(double lo, double hi, double k)
{
	double w = hi - lo;
	if (isfinite(w))
		return w / k;
	w = (hi / 2 - lo / 2) / k * 2;
	return isfinite(w) ? w : DBL_MAX;
}

/* lo <= hi widened by pad on each side, within +-DBL_MAX. */
static void widen(double *lo, double *hi, double pad)
{
	*lo = fmax(*lo - pad, -DBL_MAX);
	*hi = fmin(*hi + pad, DBL_MAX);
}

/* Nice ticks for [lo, hi] (after Heckbert, Graphics Gems I): a step 1, 2
 * or 5 times a power of ten giving about `want` ticks, the axis from the
 * multiple of the step at or below lo to the one at or above hi.  Where
 * such a multiple is beyond a double's range, the axis ends at the data
 * (lo or hi) and the ticks are the multiples inside it.  Where the range
 * is too narrow for the precision of doubles, the axis is the range, in
 * one step. */
static void axis_make(struct axis *a, double lo, double hi, int want)
{
	if (!(hi > lo))
		widen(&lo, &hi, fmax(fabs(lo) * 1e-6, 1));
	if (want < 2)
		want = 2;
	double d = nicenum(width_over(lo, hi, want - 1), 1);
	if (!(d > 0) || !isfinite(d))
		d = width_over(lo, hi, 1);
	double k0 = floor(lo / d + 1e-9), k1 = ceil(hi / d - 1e-9);
	double first = k0 * d, last = k1 * d;
	if (!isfinite(first))
		first = lo, k0 = ceil(lo / d - 1e-9);
	if (!isfinite(last))
		last = hi, k1 = floor(hi / d + 1e-9);
	double n = k1 - k0 + 1;
	if (!(n >= 1 && n <= 101) || !(last > first) || !(first <= lo + d * 1e-6) ||
	    !(last >= hi - d * 1e-6)) {
		first = lo;
		last = hi;
		d = width_over(lo, hi, 1);
		k0 = 0;
		n = hi - lo == d ? 2 : 0; /* no ticks where the width overflows */
		a->t0 = lo;
	} else {
		a->t0 = k0 * d;
	}
	a->lo = first;
	a->hi = last;
	a->step = d;
	a->n = (int)n;
	int nfrac = -ilog10(d);
	a->frac = nfrac > 0 ? (nfrac < 30 ? nfrac : 30) : 0;
	a->absmax = fmax(fabs(first), fabs(last));
}

int dp_plot_ticks(double lo, double hi, int want, double *first, double *last, double *step)
{
	struct axis a;
	axis_make(&a, lo, hi, want);
	*first = a.lo;
	*last = a.hi;
	*step = a.step;
	return a.frac;
}

/* Where v lies on the axis, from 0 (lo) to 1 (hi); a width past DBL_MAX
 * is measured in halves. */
static double axis_frac(const struct axis *a, double v)
{
	double w = a->hi - a->lo;
	if (isfinite(w))
		return (v - a->lo) / w;
	return (v / 2 - a->lo / 2) / (a->hi / 2 - a->lo / 2);
}

/* Tick i (t0 + i * step, whose product may pass DBL_MAX when the tick does
 * not: then in units of the step). */
static double axis_tick(const struct axis *a, int i)
{
	double t = a->t0 + i * a->step;
	return isfinite(t) ? t : (a->t0 / a->step + i) * a->step;
}

/* A tick label for v on an axis with tick spacing step and largest
 * magnitude absmax: fixed decimals, k/M/G suffixes for big numbers,
 * exponents for tiny ones and from 1e12 up. */
static void fmt_tick(char *buf, size_t size, double v, double step, double absmax)
{
	if (fabs(v) < step * 1e-6)
		v = 0;
	if (absmax >= 1e5 && absmax < 1e12) {
		double scale = absmax >= 1e9 ? 1e9 : absmax >= 1e6 ? 1e6 : 1e3;
		const char *suf = absmax >= 1e9 ? "G" : absmax >= 1e6 ? "M" : "k";
		int dec = -ilog10(step / scale);
		snprintf(buf, size, "%.*f%s", dec > 0 ? dec : 0, v / scale, suf);
		return;
	}
	int nfrac = -ilog10(step);
	if (nfrac <= 4 && absmax < 1e12) {
		snprintf(buf, size, "%.*f", nfrac > 0 ? nfrac : 0, v);
		return;
	}
	/* tiny or huge: an exponent */
	int dec = ilog10(absmax) - ilog10(step);
	if (dec > 17)
		dec = 17;
	char tmp[64];
	snprintf(tmp, sizeof tmp, "%.*e", dec > 0 ? dec : 0, v);
	/* 1.5e-05 -> 1.5e-5 */
	char *e = strchr(tmp, 'e');
	if (e && v != 0) {
		char sign = e[1];
		char *d = e + 2;
		while (*d == '0' && d[1])
			d++;
		snprintf(buf, size, "%.*se%s%s", (int)(e - tmp), tmp, sign == '-' ? "-" : "", d);
	} else {
		snprintf(buf, size, "0");
	}
}

/* ---- XML text ------------------------------------------------------------ */

/* Characters (UTF-8 sequences) in s. */
static size_t utf8_chars(const char *s)
{
	size_t n = 0;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		n += (*p & 0xc0) != 0x80;
	return n;
}

/* XML text of s, at most maxchars characters (when > 0; cut with an
 * ellipsis); invalid UTF-8 and control characters become '?'. */
static void xml_text(dp_buf *b, const char *s, int maxchars)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t limit = (size_t)-1;
	if (maxchars > 0 && utf8_chars(s) > (size_t)maxchars)
		limit = (size_t)maxchars - 1;
	for (size_t chars = 0; *p && chars < limit; chars++) {
		unsigned c = *p;
		size_t k = c < 0x80 ? 0 : c >= 0xf0 && c <= 0xf4 ? 3 : c >= 0xe0 ? 2 : c >= 0xc2 ? 1 : 9;
		int okc = k != 9;
		for (size_t j = 1; okc && j <= k; j++)
			okc = (p[j] & 0xc0) == 0x80;
		if (!okc || c < 0x20 || c == 0x7f) {
			dp_buf_add(b, "?", 1);
			p++;
			continue;
		}
		if (k) {
			dp_buf_add(b, p, k + 1);
			p += k + 1;
			continue;
		}
		switch (c) {
		case '&': dp_buf_addstr(b, "&amp;"); break;
		case '<': dp_buf_addstr(b, "&lt;"); break;
		case '>': dp_buf_addstr(b, "&gt;"); break;
		case '"': dp_buf_addstr(b, "&quot;"); break;
		case '\'': dp_buf_addstr(b, "&apos;"); break;
		default: dp_buf_add(b, p, 1);
		}
		p++;
	}
	if (*p)
		dp_buf_addstr(b, "\xe2\x80\xa6"); /* ... */
}

/* ---- Rendering ---------------------------------------------------------- */

struct xy {
	double x, y;
	size_t order;
};

static int cmp_xy(const void *a, const void *b)
{
	const struct xy *p = a, *q = b;
	if (p->x != q->x)
		return p->x < q->x ? -1 : 1;
	return p->order < q->order ? -1 : p->order > q->order;
}

/* The points of s to draw, sorted by x: stored points plus the partial
 * group.  *n their count; NULL on ENOMEM. */
static struct xy *series_xy(const struct series *s, int by_step, size_t *n)
{
	size_t k = s->n + (s->nacc > 0);
	struct xy *v = malloc((k ? k : 1) * sizeof *v);
	if (!v)
		return NULL;
	for (size_t i = 0; i < k; i++) {
		struct pt t = i < s->n ? s->pts[i] : acc_mean(s);
		v[i] = (struct xy){by_step ? t.step : t.line, t.y, i};
	}
	qsort(v, k, sizeof *v, cmp_xy);
	*n = k;
	return v;
}

/* What the panels share: the points to draw and the x axis. */
struct frame {
	const dp_plot *p;
	struct xy **pts; /* per series: its points sorted by x */
	size_t *npts;
	int by_step;     /* x is the step (else the line number) */
	struct axis x;
	int top0;        /* the first panel's top */
};

/* One panel's place and y axis. */
struct panel_y {
	int pi, top, y0; /* y0: the plot area's top */
	struct axis y;
};

static double px(const struct frame *f, double x)
{
	return MARGIN_L + axis_frac(&f->x, x) * PLOT_W;
}

static double py(const struct panel_y *a, double y)
{
	return a->y0 + PLOT_H - axis_frac(&a->y, y) * PLOT_H;
}

/* x: steps when every point has one, else line numbers. */
static int x_is_step(const dp_plot *p)
{
	for (int i = 0; i < p->ns; i++) {
		const struct series *s = &p->s[i];
		for (size_t j = 0; j < s->n; j++)
			if (isnan(s->pts[j].step))
				return 0;
		if (s->nacc && s->acc_nostep)
			return 0;
	}
	return 1;
}

static void frame_free(struct frame *f)
{
	for (int i = 0; f->pts && i < f->p->ns; i++)
		free(f->pts[i]);
	free(f->pts);
	free(f->npts);
}

/* The points of every series, and the x axis over all of them: nice ticks,
 * one per step when steps are few whole numbers.  DP_ENOMEM or 0. */
static int frame_init(struct frame *f, const dp_plot *p)
{
	memset(f, 0, sizeof *f);
	f->p = p;
	f->by_step = x_is_step(p);
	size_t ns = p->ns > 0 ? (size_t)p->ns : 1;
	f->pts = calloc(ns, sizeof *f->pts);
	f->npts = calloc(ns, sizeof *f->npts);
	if (!f->pts || !f->npts)
		return DP_ENOMEM;
	int x_int = 1;
	double xmin = INFINITY, xmax = -INFINITY;
	for (int i = 0; i < p->ns; i++) {
		f->pts[i] = series_xy(&p->s[i], f->by_step, &f->npts[i]);
		if (!f->pts[i])
			return DP_ENOMEM;
		for (size_t j = 0; j < f->npts[i]; j++) {
			double x = f->pts[i][j].x;
			xmin = fmin(xmin, x);
			xmax = fmax(xmax, x);
			if (x != floor(x))
				x_int = 0;
		}
	}
	if (!(xmax > xmin))
		widen(&xmin, &xmax, 1);
	axis_make(&f->x, xmin, xmax, 7);
	if (x_int && f->x.step < 1) { /* a few integer steps: one tick each */
		f->x.lo = f->x.t0 = floor(xmin);
		f->x.hi = ceil(xmax);
		f->x.step = 1;
		f->x.n = (int)(f->x.hi - f->x.lo) + 1;
		f->x.frac = 0;
		f->x.absmax = fmax(fabs(f->x.lo), fabs(f->x.hi));
	}
	return 0;
}

/* Panel pi's place, and its y axis over its series' points. */
static void panel_axis(const struct frame *f, int pi, struct panel_y *a)
{
	const dp_plot *p = f->p;
	a->pi = pi;
	a->top = f->top0 + pi * (PANEL_H + PANEL_GAP);
	a->y0 = a->top + PANEL_TITLE_H;
	double ymin = INFINITY, ymax = -INFINITY;
	for (int i = 0; i < p->ns; i++)
		if (p->s[i].panel == pi)
			for (size_t j = 0; j < f->npts[i]; j++) {
				ymin = fmin(ymin, f->pts[i][j].y);
				ymax = fmax(ymax, f->pts[i][j].y);
			}
	if (!(ymax >= ymin)) /* a panel of series without points */
		ymin = 0, ymax = 1;
	if (!(ymax > ymin))
		widen(&ymin, &ymax, ymin == 0 ? 1 : fabs(ymin) * 0.1);
	axis_make(&a->y, ymin, ymax, 5);
}

/* The XML declaration, <svg>, the document's title, the background and
 * the chart's title line. */
static void svg_head(dp_buf *b, int height, const char *title)
{
	const char *font = "DejaVu Sans, Helvetica, Arial, sans-serif";
	dp_buf_addstr(b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
	dp_buf_printf(b,
		      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
		      "viewBox=\"0 0 %d %d\" font-family=\"%s\" font-size=\"12\">\n",
		      WIDTH, height, WIDTH, height, font);
	dp_buf_addstr(b, "<title>");
	xml_text(b, title && *title ? title : "metrics", 0);
	dp_buf_addstr(b, "</title>\n");
	dp_buf_addstr(b, "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n");
	if (title && *title) {
		dp_buf_printf(b,
			      "<text x=\"%d\" y=\"22\" font-size=\"15\" font-weight=\"bold\" "
			      "fill=\"#222\">",
			      MARGIN_L);
		xml_text(b, title, 80);
		dp_buf_addstr(b, "</text>\n");
	}
}

/* Grid lines at the ticks, tick labels, the x axis's name, the axes. */
static void svg_axes(dp_buf *b, const struct frame *f, const struct panel_y *a)
{
	char lab[48];
	dp_buf_addstr(b, "<g stroke=\"#e6e6e6\" stroke-width=\"1\">\n");
	for (int i = 0; i < a->y.n; i++) {
		double t = axis_tick(&a->y, i);
		dp_buf_printf(b, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\"/>\n", MARGIN_L,
			      MARGIN_L + PLOT_W, py(a, t), py(a, t));
	}
	for (int i = 0; i < f->x.n; i++) {
		double t = axis_tick(&f->x, i);
		dp_buf_printf(b, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\"/>\n", px(f, t),
			      px(f, t), a->y0, a->y0 + PLOT_H);
	}
	dp_buf_addstr(b, "</g>\n");
	dp_buf_addstr(b, "<g fill=\"#555\" text-anchor=\"end\">\n");
	for (int i = 0; i < a->y.n; i++) {
		double t = axis_tick(&a->y, i);
		fmt_tick(lab, sizeof lab, t, a->y.step, a->y.absmax);
		dp_buf_printf(b, "<text x=\"%d\" y=\"%.1f\">%s</text>\n", MARGIN_L - 8,
			      py(a, t) + 4, lab);
	}
	dp_buf_addstr(b, "</g>\n<g fill=\"#555\" text-anchor=\"middle\">\n");
	for (int i = 0; i < f->x.n; i++) {
		double t = axis_tick(&f->x, i);
		fmt_tick(lab, sizeof lab, t, f->x.step, f->x.absmax);
		dp_buf_printf(b, "<text x=\"%.1f\" y=\"%d\">%s</text>\n", px(f, t),
			      a->y0 + PLOT_H + 17, lab);
	}
	dp_buf_addstr(b, "</g>\n");
	dp_buf_printf(b, "<text x=\"%d\" y=\"%d\" fill=\"#333\" text-anchor=\"middle\">%s</text>\n",
		      MARGIN_L + PLOT_W / 2, a->y0 + PLOT_H + 36, f->by_step ? "step" : "line");
	dp_buf_printf(b,
		      "<path d=\"M%d %dV%dH%d\" fill=\"none\" stroke=\"#333\" "
		      "stroke-width=\"1\"/>\n",
		      MARGIN_L, a->y0, a->y0 + PLOT_H, MARGIN_L + PLOT_W);
}

/* " x,y" of a polyline (no space before the first).  dp_buf_printf formats
 * twice (to measure, then to write): the points, the bulk of a chart, are
 * formatted once into t, then added. */
static void add_point(dp_buf *b, int first, double x, double y)
{
	char t[128];
	const char *fmt = first ? "%.1f,%.1f" : " %.1f,%.1f";
	int n = snprintf(t, sizeof t, fmt, x, y);
	if (n >= 0 && (size_t)n < sizeof t)
		dp_buf_add(b, t, (size_t)n);
	else
		dp_buf_printf(b, fmt, x, y);
}

/* Series i: a polyline, with a dot per point when it has few. */
static void svg_series(dp_buf *b, const struct frame *f, const struct panel_y *a, int i,
		       const char *color)
{
	const struct xy *v = f->pts[i];
	size_t n = f->npts[i];
	dp_buf_addstr(b, "<g class=\"series\" data-label=\"");
	xml_text(b, f->p->s[i].label, 0);
	dp_buf_printf(b, "\" data-points=\"%zu\">\n", n);
	if (n > 1) {
		dp_buf_printf(b,
			      "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.8\" "
			      "stroke-linejoin=\"round\" stroke-linecap=\"round\" points=\"",
			      color);
		for (size_t j = 0; j < n; j++)
			add_point(b, j == 0, px(f, v[j].x), py(a, v[j].y));
		dp_buf_addstr(b, "\"/>\n");
	}
	if (n <= MARKERS_UPTO)
		for (size_t j = 0; j < n; j++)
			dp_buf_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.6\" fill=\"%s\"/>\n",
				      px(f, v[j].x), py(a, v[j].y), color);
	dp_buf_addstr(b, "</g>\n");
}

/* The legend right of the plot area: a row per series, "+N more" in the
 * last row when they do not fit. */
static void svg_legend(dp_buf *b, const struct frame *f, const struct panel_y *a)
{
	const dp_plot *p = f->p;
	int lx = MARGIN_L + PLOT_W + LEGEND_GAP, ly = a->y0 + 4, rows = 0;
	int maxrows = PLOT_H / LEGEND_ROW;
	int k = 0, inpanel = 0;
	for (int i = 0; i < p->ns; i++)
		inpanel += p->s[i].panel == a->pi;
	dp_buf_addstr(b, "<g class=\"legend\" fill=\"#333\">\n");
	for (int i = 0; i < p->ns; i++) {
		if (p->s[i].panel != a->pi)
			continue;
		const char *color = palette[k++ % NCOLORS];
		if (rows == maxrows - 1 && inpanel > maxrows) {
			dp_buf_printf(b, "<text x=\"%d\" y=\"%d\">+%d more</text>\n", lx + 26,
				      ly + rows * LEGEND_ROW + 8, inpanel - rows);
			break;
		}
		int yy = ly + rows * LEGEND_ROW;
		dp_buf_printf(b,
			      "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"%s\" "
			      "stroke-width=\"3\" stroke-linecap=\"round\"/>\n",
			      lx + 2, lx + 20, yy + 4, yy + 4, color);
		dp_buf_printf(b, "<text x=\"%d\" y=\"%d\">", lx + 26, yy + 8);
		xml_text(b, p->s[i].label, LABEL_CHARS);
		dp_buf_addstr(b, "</text>\n");
		rows++;
	}
	dp_buf_addstr(b, "</g>\n");
}

/* Panel pi: its title, axes, series (colours in order within the panel)
 * and legend. */
static void svg_panel(dp_buf *b, const struct frame *f, int pi)
{
	const dp_plot *p = f->p;
	struct panel_y a;
	panel_axis(f, pi, &a);
	dp_buf_addstr(b, "<g class=\"panel\">\n");
	dp_buf_printf(b,
		      "<text x=\"%d\" y=\"%d\" font-size=\"13\" font-weight=\"bold\" "
		      "fill=\"#333\">",
		      MARGIN_L, a.top + 17);
	xml_text(b, p->p[pi].name, 60);
	dp_buf_addstr(b, "</text>\n");
	svg_axes(b, f, &a);
	int k = 0;
	for (int i = 0; i < p->ns; i++)
		if (p->s[i].panel == pi)
			svg_series(b, f, &a, i, palette[k++ % NCOLORS]);
	svg_legend(b, f, &a);
	dp_buf_addstr(b, "</g>\n");
}

char *dp_plot_svg(const dp_plot *p, const char *title, size_t *len, dp_err *e)
{
	if (dp_plot_points(p) == 0)
		return dp_seterr(e, DP_EARG, "no points to plot"), NULL;
	struct frame f;
	dp_buf b = DP_BUF_INIT;
	if (frame_init(&f, p) < 0 || dp_buf_reserve(&b, 65536) < 0) {
		frame_free(&f);
		dp_buf_free(&b);
		return dp_seterr(e, DP_ENOMEM, "out of memory"), NULL;
	}
	f.top0 = title && *title ? TITLE_H : 8;
	svg_head(&b, f.top0 + p->np * PANEL_H + (p->np - 1) * PANEL_GAP + 8, title);
	for (int pi = 0; pi < p->np; pi++)
		svg_panel(&b, &f, pi);
	dp_buf_addstr(&b, "</svg>\n");
	frame_free(&f);
	*len = b.len;
	char *svg = dp_buf_take(&b);
	if (!svg)
		return dp_seterr(e, DP_ENOMEM, "out of memory"), NULL;
	return svg;
}
