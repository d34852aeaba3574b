/*
 * dp_plot.h - line charts of metric series as self-contained SVG.
 *
 * Series are added point by point (x as a step, or as a line number when
 * the step is unknown) and grouped into panels: one chart per panel,
 * stacked, sharing the x range, each with nice tick values, grid, axis
 * labels and a legend.  The SVG has no scripts, no external fonts or
 * styles; it renders the same in browsers, rsvg-convert and Inkscape.
 *
 * Memory per series is bounded: past DP_PLOT_MAX_POINTS points, neighbours
 * are averaged in pairs (and later points in groups of the same size), so a
 * curve of a million steps keeps its shape in a few thousand points.
 */
#ifndef DP_PLOT_H
#define DP_PLOT_H

#include "dp.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DP_PLOT_MAX_POINTS 4096

typedef struct dp_plot dp_plot;

DP_EXPORT dp_plot *dp_plot_new(void);
DP_EXPORT void dp_plot_free(dp_plot *p);

/* The id of the series with this label, created in the panel named panel
 * when new.  Returns the id (>= 0) or DP_ENOMEM. */
DP_EXPORT int dp_plot_series(dp_plot *p, const char *label, const char *panel);

/* Add a point: step (NaN when the line had none), line (its line number,
 * the x used when any point lacks a step), y.  Any finite values are drawn,
 * up to +-DBL_MAX; a point whose y or line is NaN or infinite is left out
 * (it has no place on a chart), and such a step counts as none. */
DP_EXPORT int dp_plot_add(dp_plot *p, int series, double step, double line, double y);

/* Points held (after averaging) over all series. */
DP_EXPORT size_t dp_plot_points(const dp_plot *p);

/* The chart as a malloc'd, NUL-terminated SVG document; *len its length.
 * title may be NULL.  Returns NULL with e set on failure (no points: DP_EARG). */
DP_EXPORT char *dp_plot_svg(const dp_plot *p, const char *title, size_t *len, dp_err *e);

/* Nice ticks for [lo, hi] (after Heckbert, Graphics Gems I): *step is 1,
 * 2 or 5 times a power of ten giving about `want` ticks; *first and *last the
 * axis's ends: the multiples of *step around the range (first <= lo,
 * last >= hi, within a millionth of a step), or where such a multiple
 * would be beyond a double's range, lo or hi itself.  All three are finite
 * for any finite lo <= hi.  Returns the number of decimal places the
 * labels need. */
DP_EXPORT int dp_plot_ticks(double lo, double hi, int want, double *first, double *last, double *step);


#ifdef __cplusplus
}
#endif
#endif
