/*
 * dp_eval.h - evaluation metrics of a model's outputs, combined exactly
 * across workers; quality gates on them.
 *
 * A dp_eval accumulates, batch by batch, what the metrics need:
 *   classes (softmax cross-entropy models), from logits and int labels:
 *     the summed loss, correct and top-k counts, per class the support,
 *     the predictions and the true positives, the confusion matrix;
 *   regression (MSE models), from outputs and target vectors: per output
 *     the sums of squared and absolute errors, of targets and of squared
 *     targets.
 * Every real-valued sum is kept in a dp_xsum, an exact accumulator: the
 * result does not depend on the order of the additions, so a dataset
 * split between workers in any way and combined with one allreduce of
 * dp_eval_state_get()'s doubles gives the same bits as one process.
 * Counts are exact while below 2^53.
 *
 * Definitions (those of scikit-learn's metrics, checked against an
 * independent Python computation in tests/dp-eval*.t):
 *   loss          mean over samples of -log softmax(logits)[label],
 *                 computed in double from the float logits; regression:
 *                 the mean squared error (dp-train's mse loss)
 *   accuracy      fraction of samples whose argmax (the first maximum on
 *                 ties) is the label
 *   top-k accuracy  fraction whose label has fewer than k scores strictly
 *                 above its own
 *   precision, recall, f1 per class c: tp/predicted, tp/support,
 *                 2pr/(p+r); 0 where the denominator is 0
 *   macro         unweighted mean over the classes that occur among the
 *                 labels or the predictions (scikit-learn's
 *                 classification_report); weighted: weighted by support
 *   mse, mae      mean over samples and outputs of the squared / absolute
 *                 error; rmse = sqrt(mse)
 *   r2            1 - SS_res/SS_tot per output, averaged over outputs
 *                 (uniform); an output with SS_tot = 0 scores 1 if its
 *                 SS_res is 0, else 0
 */
#ifndef DP_EVAL_H
#define DP_EVAL_H

#include "dp.h"
#include "dp_comm.h"
#include "dp_data.h"
#include "dp_nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- exact sums ----------------------------------------------------------
 * Every finite double is an integer multiple of 2^-1074; the accumulator
 * holds the exact sum as a fixed-point number in 32-bit limbs (each in an
 * int64 so that additions need no carry until normalised), with counts of
 * NaN and infinite terms on the side.  Adding costs a frexp and three
 * limb additions. */
#define DP_XSUM_LIMBS 72
#define DP_XSUM_DOUBLES (DP_XSUM_LIMBS + 3) /* the exported form */

typedef struct dp_xsum {
	int64_t limb[DP_XSUM_LIMBS];
	uint32_t pending; /* additions since the last normalisation */
	uint64_t nan, pinf, ninf;
} dp_xsum;

DP_EXPORT void dp_xsum_init(dp_xsum *s);
DP_EXPORT void dp_xsum_add(dp_xsum *s, double v);
/* a += b */
DP_EXPORT void dp_xsum_merge(dp_xsum *a, const dp_xsum *b);
/* The exact sum rounded to the nearest double (ties to even; a sum in
 * the subnormal range may be rounded twice); NaN or +-inf when such terms
 * were added. */
DP_EXPORT double dp_xsum_value(const dp_xsum *s);
/* As DP_XSUM_DOUBLES doubles, each an integer below 2^33 in magnitude:
 * the element-wise sum of up to 2^19 workers' exports is exact, and
 * imports as the sum of their accumulators. */
DP_EXPORT void dp_xsum_export(const dp_xsum *s, double *v);
DP_EXPORT int dp_xsum_import(dp_xsum *s, const double *v);

/* ---- the accumulator of metrics --------------------------------------------- */

enum dp_eval_kind { DP_EVAL_CLASS = 1, DP_EVAL_REGRESSION = 2 };

/* Largest class count with a confusion matrix (k x k counts). */
#define DP_EVAL_CONFUSION_MAX 1024

typedef struct dp_eval dp_eval;

/* k: classes (DP_EVAL_CLASS, at least 2) or outputs (regression);
 * topk: the k of top-k accuracy (0: none; must be below the classes). */
DP_EXPORT dp_eval *dp_eval_new(int kind, size_t k, size_t topk, dp_err *e);
DP_EXPORT void dp_eval_free(dp_eval *ev);
DP_EXPORT int dp_eval_kind(const dp_eval *ev);
DP_EXPORT size_t dp_eval_k(const dp_eval *ev);
DP_EXPORT size_t dp_eval_topk(const dp_eval *ev);

/* Add n samples of a classifier: logits (n, k) and labels (n) in [0, k)
 * (DP_EARG naming the sample otherwise).  Per sample, when not NULL:
 * pred (n) the argmax, loss (n) the cross-entropy, prob (n, k) the softmax
 * probabilities. */
DP_EXPORT int dp_eval_add_class(dp_eval *ev, const float *logits, const int32_t *labels, size_t n,
		      int32_t *pred, double *loss, float *prob, dp_err *e);
/* Count n records that were skipped as corrupt (dp_data's skip_corrupt):
 * reported as "skipped" and "skipped_fraction" (of skipped + samples),
 * so that a gate can refuse a result on a fraction of the data.
 * dp_eval_data counts its pass's own. */
DP_EXPORT void dp_eval_add_skipped(dp_eval *ev, uint64_t n);
/* Add n samples of a regression model: out and target (n, k).  loss (n),
 * when not NULL, receives each sample's mean squared error. */
DP_EXPORT int dp_eval_add_regression(dp_eval *ev, const float *out, const float *target, size_t n,
			   double *loss, dp_err *e);

/* The whole state as doubles (see dp_xsum_export): combine workers with
 * dp_comm_allreduce_sum over dp_eval_state_size() doubles, then set. */
DP_EXPORT size_t dp_eval_state_size(const dp_eval *ev);
DP_EXPORT void dp_eval_state_get(const dp_eval *ev, double *v);
DP_EXPORT int dp_eval_state_set(dp_eval *ev, const double *v, dp_err *e);
/* Forget what was added: as new. */
DP_EXPORT void dp_eval_reset(dp_eval *ev);

/* ---- a model over data ------------------------------------------------------
 * dp-eval's pass and dp-train's validation, written once, so that both
 * report the same figures for the same model and records.
 *
 * dp_eval_data: the batches of d's current epoch (dp_data_epoch first)
 * through m in inference mode (dropout off, batch normalisation from its
 * running statistics), each added to ev: a classifier's logits against
 * the labels, a regression model's outputs against the targets (ev's kind
 * and k must be m's: dp_eval_new_for).  When `each` is not NULL it is
 * called after every batch with the per-sample results (predictions
 * files, progress); a negative return stops the pass and is returned.
 * The records the pass skipped as corrupt are counted in ev
 * (dp_eval_add_skipped).
 * The host buffers are the pass's own, allocated as the first batch
 * comes (not once a batch). */
typedef struct dp_eval_rows {
	const dp_batch *b;   /* the batch: its size, labels or targets, origins */
	const float *out;    /* (n, k) the outputs, on the host: logits or values */
	const int32_t *pred; /* classes: (n) the argmax */
	const double *loss;  /* (n) each sample's loss */
	const float *prob;   /* classes, with want_prob: (n, k) softmax probabilities */
} dp_eval_rows;
typedef int (*dp_eval_rows_fn)(void *arg, const dp_eval_rows *r, dp_err *e);

/* An accumulator for m's outputs: classes for the xent loss (with top-k
 * accuracy, topk > 0), outputs for mse. */
DP_EXPORT dp_eval *dp_eval_new_for(const dp_model *m, size_t topk, dp_err *e);
DP_EXPORT int dp_eval_data(dp_eval *ev, dp_model *m, dp_data *d, int want_prob,
			   dp_eval_rows_fn each, void *arg, dp_err *e);
/* Several models over the same data in one pass of reading: each batch of
 * d's current epoch through ms[0..n) in turn (inference mode), each
 * model's outputs added to evs[i] (dp_eval_new_for(ms[i])).  The models
 * take the same input (the same size; the caller checks that they read
 * their records alike).  The figures of each are those dp_eval_data
 * gives it alone. */
DP_EXPORT int dp_eval_data_many(dp_eval *const *evs, dp_model *const *ms, size_t n, dp_data *d,
				dp_err *e);
/* Sum every rank's accumulator (one dp_comm_allreduce_sum of the exact
 * state): afterwards each rank holds the whole job's, the bits one
 * process would have.  extra (nextra doubles, may be NULL) is summed in
 * the same call (a failure flag per rank, say).  A collective: every rank
 * calls it; a job of one returns at once. */
DP_EXPORT int dp_eval_allreduce(dp_eval *ev, dp_comm *c, double *extra, size_t nextra, dp_err *e);

/* ---- results ------------------------------------------------------------------ */

typedef struct dp_eval_class {
	uint64_t support;   /* samples with this label */
	uint64_t predicted; /* samples predicted as this class */
	uint64_t tp;        /* both */
	double precision, recall, f1;
} dp_eval_class;

typedef struct dp_eval_output {
	double mse, mae, r2;
} dp_eval_output;

typedef struct dp_eval_report {
	int kind;
	size_t k, topk;
	uint64_t samples;
	uint64_t skipped;         /* records skipped as corrupt */
	double skipped_fraction;  /* skipped / (skipped + samples) */
	double loss;
	/* classes */
	uint64_t correct, topk_correct;
	double accuracy, topk_accuracy;
	double precision_macro, recall_macro, f1_macro;
	double precision_weighted, recall_weighted, f1_weighted;
	size_t classes_seen;          /* classes among the labels or predictions */
	const dp_eval_class *classes; /* (k) */
	const uint64_t *confusion;    /* (k, k): [label * k + predicted]; NULL when
				       * k > DP_EVAL_CONFUSION_MAX */
	/* regression */
	double mse, rmse, mae, r2;
	const dp_eval_output *outputs; /* (k) */
} dp_eval_report;

/* Compute the metrics of what was added (or set).  Pointers in r stay
 * valid until the next call on ev.  DP_EDATA when there are no samples. */
DP_EXPORT int dp_eval_report_get(dp_eval *ev, dp_eval_report *r, dp_err *e);

/* ---- named metrics --------------------------------------------------------------
 * The scalar metrics of a report, in a fixed order: "samples",
 * "skipped", "skipped_fraction", "loss",
 * then for classes "accuracy", "top_K_accuracy" (with topk),
 * "precision_macro", "recall_macro", "f1_macro", "precision_weighted",
 * "recall_weighted", "f1_weighted"; for regression "mse", "rmse", "mae",
 * "r2".  Per class and per output, "precision[C]", "recall[C]", "f1[C]",
 * "support[C]" (C a class number, or a name from names) and "mse[J]",
 * "mae[J]", "r2[J]" are found by dp_eval_metric but not listed. */
DP_EXPORT size_t dp_eval_metric_count(const dp_eval_report *r);
/* The i-th scalar metric: its name (into buf) and value. */
DP_EXPORT const char *dp_eval_metric_at(const dp_eval_report *r, size_t i, char *buf, size_t len,
			      double *value);
/* Look a metric up by name; names (k strings, may be NULL) are class
 * names accepted in brackets.  DP_ENOTFOUND with a message listing the
 * metrics when there is none of that name. */
DP_EXPORT int dp_eval_metric(const dp_eval_report *r, const char *name, const char *const *names,
		   double *value, dp_err *e);

/* ---- reports (report.c) ------------------------------------------------------------
 * As dp-eval prints them (dp-eval(1)); names: k class names, or NULL.
 * dp_eval_text: one logfmt line of the scalar metrics, then per-class
 * figures (at most 1000 classes) with the confusion matrix (at most 20),
 * or per-output ones.  dp_eval_json: the metrics JSON's "metrics" object,
 * then its "classes" (and "confusion_matrix") or "outputs" array, without
 * the braces around them. */
DP_EXPORT void dp_eval_text(dp_buf *b, const dp_eval_report *r, const char *const *names);
DP_EXPORT void dp_eval_json(dp_buf *b, const dp_eval_report *r, const char *const *names);
/* A metric's value as reports print it: whole numbers as such (10000, not
 * 1e+04), others in dp_fmt_double's shortest text, NaN as "NaN".  Returns
 * buf. */
DP_EXPORT const char *dp_eval_fmt_value(double v, char *buf, size_t len);
/* v as a JSON number in dp_eval_fmt_value's text; null when v is not
 * finite (JSON has no NaN). */
DP_EXPORT void dp_eval_json_num(dp_buf *b, double v);

/* ---- gates ---------------------------------------------------------------------------
 * "accuracy>=0.9", "loss < 0.5", "recall[3]>0.8": a metric name, one of
 * < <= > >=, a finite number; spaces allowed around the operator. */
enum dp_gate_op { DP_GATE_LT = 1, DP_GATE_LE, DP_GATE_GT, DP_GATE_GE };

typedef struct dp_gate {
	char metric[128];
	int op;
	double threshold;
} dp_gate;

DP_EXPORT int dp_gate_parse(const char *s, dp_gate *g, dp_err *e);
DP_EXPORT const char *dp_gate_op_name(int op);
/* 1 when value satisfies the gate (never for NaN). */
DP_EXPORT int dp_gate_pass(const dp_gate *g, double value);

/* --max-skipped LIMIT of dp-train and dp-eval, as a gate: a count "N"
 * ("skipped<=N") or a percentage of the records read "P%"
 * ("skipped_fraction<=P/100").  DP_EARG with e saying "'x': ...". */
#define DP_MAX_SKIPPED_DEFAULT "1%"
DP_EXPORT int dp_gate_max_skipped(const char *s, dp_gate *g, dp_err *e);


#ifdef __cplusplus
}
#endif
#endif
