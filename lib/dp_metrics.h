/*
 * dp_metrics.h - pull numeric metrics out of log lines.
 *
 * The pieces metrics-grep is made of, usable on their own:
 *  - numbers: validate a decimal number in a byte span, convert it
 *    (locale-independent), print a double as the shortest text that reads
 *    back to the same value;
 *  - logfmt: a tokenizer for `key=value key="quoted value"` lines, the format
 *    of dp-train's logs;
 *  - Open MPI's `--tag-output` prefix `[1,3]<stdout>:` (job 1, rank 3);
 *  - a matcher: metric definitions (a name and a PCRE2 regex whose first
 *    capture group is the value, as SageMaker's metric_definitions), or
 *    every numeric key=value pair of logfmt and JSON-object lines, applied
 *    line by line, with the step, epoch and rank of each line.
 *
 * Lines are bytes: nothing here needs valid UTF-8, NUL bytes are allowed,
 * and nothing allocates per line in the regex path.  Lines are given
 * without their newline.
 */
#ifndef DP_METRICS_H
#define DP_METRICS_H

#include "dp.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Numbers ---------------------------------------------------------- */

/* 1 when s[0..n) is a whole decimal number: [+-] digits [. digits]
 * [e [+-] digits] (".5" and "5." included), or nan, inf, infinity in any
 * case with an optional sign; 0 otherwise (empty, hex, spaces, "1.2.3"). */
DP_EXPORT int dp_number_valid(const char *s, size_t n);
/* 1 when s[0..n) is a number written as JSON writes numbers. */
DP_EXPORT int dp_number_is_json(const char *s, size_t n);
/* The value of a span dp_number_valid accepts, read in the C locale
 * whatever setlocale() says; NaN when the span is not a number. */
DP_EXPORT double dp_number_value(const char *s, size_t n);
/* A number's text as the tools write it: dp_fmt_double (dp.h) into
 * DP_NUMBER_BUF bytes. */
#define DP_NUMBER_BUF DP_DOUBLE_BUF

/* ---- logfmt ----------------------------------------------------------- */

typedef struct dp_logfmt_kv {
	const char *key;
	size_t key_len;
	const char *val; /* inside the quotes when quoted, escapes left as is;
			    never NULL (empty for a bare key) */
	size_t val_len;
	int has_value;   /* 0 for a bare key (no '=') */
	int quoted;
} dp_logfmt_kv;

/* Next pair of the logfmt line s[0..n) from *pos (start at 0).  Returns 1
 * with kv filled, 0 at the end of the line.  Any bytes are accepted: a stray
 * '=' or '"' is skipped, an unterminated quoted value runs to the end. */
DP_EXPORT int dp_logfmt_next(const char *s, size_t n, size_t *pos, dp_logfmt_kv *kv);

/* ---- Open MPI --tag-output ---------------------------------------------- */

/* When s[0..n) starts with Open MPI's `[job,rank]<stdout>:` (also
 * <stderr>, <stddiag>; one space after the colon is allowed, as Open MPI 5
 * writes), return the prefix length and set *rank; otherwise return 0. */
DP_EXPORT size_t dp_mpi_tag(const char *s, size_t n, int *rank);

/* ---- The matcher -------------------------------------------------------- */

/* A matcher holds the match state of its regexes: one thread at a time. */
typedef struct dp_matcher dp_matcher;

typedef struct dp_sample {
	int metric;       /* id, see dp_matcher_name() */
	const char *text; /* the value as written: dp_number_valid() holds */
	size_t len;
} dp_sample;

typedef struct dp_match {
	const dp_sample *samples; /* valid until the next match or free */
	int n;
	int rank;                 /* from the tag prefix or a rank= key; -1 if none */
	const char *step, *epoch; /* numeric text, NULL when the line has none */
	size_t step_len, epoch_len;
} dp_match;

DP_EXPORT dp_matcher *dp_matcher_new(void);
DP_EXPORT void dp_matcher_free(dp_matcher *m);

/* Add a metric: name (UTF-8, no control characters, at most 256 bytes) and
 * a PCRE2 regex with at least one capture group, compiled with JIT when the
 * platform has it.  A regex with bytes >= 0x80 or (*UTF) is matched in UTF
 * mode, where invalid UTF-8 in a line simply does not match.  origin names
 * the definition in messages ("-m loss", "defs.json: entry 2").  Returns 0,
 * or DP_EARG with a message giving the regex error and its offset. */
DP_EXPORT int dp_matcher_add(dp_matcher *m, const char *name, const char *regex, const char *origin,
		   dp_err *e);

/* Add the metrics of a SageMaker metric_definitions JSON text: a list of
 * {"Name": ..., "Regex": ...} objects, or an object holding that list under
 * "MetricDefinitions" or "metric_definitions" (describe-training-job's and
 * the estimator's spellings).  origin names the file in messages.
 * Returns 0 or DP_EARG. */
DP_EXPORT int dp_matcher_add_definitions(dp_matcher *m, const char *json, size_t len, const char *origin,
			       dp_err *e);

/* Also take every numeric key=value pair of logfmt lines, and every numeric
 * member of lines holding one JSON object, as a metric named by its key
 * (keys of [A-Za-z0-9_.:/@-], at most 128 bytes; step, epoch and rank are
 * coordinates, not metrics).  keys, when not NULL, is a comma-separated
 * list: only those keys are metrics.  Returns 0 or DP_EARG/DP_ENOMEM. */
DP_EXPORT int dp_matcher_logfmt(dp_matcher *m, const char *keys, dp_err *e);

/* Match one line (without its newline; a trailing '\r' is ignored).
 * Returns the number of samples (0 or more) and fills *out, or DP_EDATA
 * when the line would give samples but holds NUL bytes (binary: skipped). */
DP_EXPORT int dp_matcher_match(dp_matcher *m, const char *line, size_t len, dp_match *out);

/* Metric names: ids are 0 .. dp_matcher_nmetrics()-1, defined metrics first
 * in the order added, then logfmt keys in the order first seen. */
DP_EXPORT int dp_matcher_nmetrics(const dp_matcher *m);
DP_EXPORT const char *dp_matcher_name(const dp_matcher *m, int metric);
/* 1 when the metric was defined (-m, definitions, a logfmt key list),
 * 0 when it was found in the log. */
DP_EXPORT int dp_matcher_defined(const dp_matcher *m, int metric);

typedef struct dp_matcher_stats {
	unsigned long long not_numbers;  /* captures that were not numbers */
	unsigned long long match_errors; /* regex gave up (match limit...) */
	unsigned long long binary_lines; /* lines with NUL bytes, skipped */
	unsigned long long keys_dropped; /* logfmt keys past the name limit */
	char first_not_number[80];       /* "loss: \"1.2.3\"" for messages */
	char first_match_error[160];
} dp_matcher_stats;
DP_EXPORT const dp_matcher_stats *dp_matcher_stats_get(const dp_matcher *m);

/* ---- Plot grouping ------------------------------------------------------ */

/* The family of a metric name: the name without a split prefix such as
 * "val_", "train_", "test_", "eval_", "validation:" or "train:", so that
 * loss, val_loss and validation:loss share one chart.  Returns the length
 * of the family and sets *start. */
DP_EXPORT size_t dp_metric_family(const char *name, size_t len, const char **start);


#ifdef __cplusplus
}
#endif
#endif
