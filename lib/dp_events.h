/*
 * dp_events.h - TensorBoard event files: write them, read their scalars.
 *
 * An event file is a TFRecord stream (dp_record.h, no compression) of
 * tensorflow.Event messages, named events.out.tfevents.<unix time>.<host>,
 * the first event carrying file_version "brain.Event:2".  The messages,
 * from the published event.proto, summary.proto and tensor.proto:
 *   Event        { double wall_time = 1; int64 step = 2; oneof { string
 *                  file_version = 3; ...; Summary summary = 5; ... } }
 *   Summary      { repeated Value value = 1 }
 *   Value        { string tag = 1; SummaryMetadata metadata = 9; oneof {
 *                  float simple_value = 2; HistogramProto histo = 5;
 *                  TensorProto tensor = 8; ... } }
 *   HistogramProto { double min = 1, max = 2, num = 3, sum = 4,
 *                  sum_squares = 5; repeated double bucket_limit = 6,
 *                  bucket = 7 (packed) }
 *   TensorProto  { DataType dtype = 1; TensorShapeProto tensor_shape = 2;
 *                  bytes tensor_content = 4; repeated (packed) half_val = 13,
 *                  float_val = 5, double_val = 6, int_val = 7, int64_val = 10 }
 *   SummaryMetadata { PluginData plugin_data = 1 { string plugin_name = 1 } }
 *
 * The writer (dp-train --tensorboard) writes scalars as simple_value, as
 * TensorFlow 1 and PyTorch's SummaryWriter do; the reader also takes the
 * tensor form of TensorFlow 2 and of PyTorch's new_style scalars: a tensor
 * of one number (float, double, half, bfloat16, integers) whose metadata,
 * when present, names the "scalars" plugin.
 *
 * dp-train --tensorboard DIR writes a run folder the way Keras's
 * TensorBoard callback does (dp_tb_run below): DIR/train/ and
 * DIR/validation/ each hold an event file of the epoch metrics under the
 * same tags (epoch_loss, epoch_accuracy...), so that TensorBoard overlays
 * the two curves; DIR itself holds the per-step scalars of the log lines
 * and the run's settings, as the hparams plugin's session (the
 * plugin's HParamsPluginData { version = 1; session_start_info = 3
 * { map<string, google.protobuf.Value> hparams = 1; start_time_secs = 5 };
 * session_end_info = 4 { Status status = 1; end_time_secs = 2 } } in the
 * metadata of a value tagged _hparams_/session_start_info or
 * _hparams_/session_end_info) and as a text summary (plugin "text", a
 * DT_STRING tensor of Markdown).
 *
 * Event files are written as they go (TensorBoard reads them while they
 * grow): each dp_events_write appends one record and hands it to the
 * kernel.  A run cut short leaves a file whose last record may be partial;
 * readers stop there.
 */
#ifndef DP_EVENTS_H
#define DP_EVENTS_H

#include "dp.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DP_EVENTS_VERSION "brain.Event:2"

/* ---- Encoding ----------------------------------------------------------- */

/* Append to summary (the body of a Summary message) a Value of tag with
 * simple_value v. */
DP_EXPORT int dp_summary_scalar(dp_buf *summary, const char *tag, float v);
/* Append a Value of tag with a HistogramProto of the n values x: min, max,
 * count, sum, sum of squares, and `buckets` equal-width buckets from min
 * to max (bucket_limit: their right edges).  NaN values are left out. */
DP_EXPORT int dp_summary_histogram(dp_buf *summary, const char *tag, const float *x, size_t n,
				   int buckets);
/* Append a Value of tag for the text plugin: text (Markdown) as a scalar
 * DT_STRING tensor, as tf.summary.text writes it. */
DP_EXPORT int dp_summary_text(dp_buf *summary, const char *tag, const char *text);
/* Append the hparams plugin's session start: the settings kv (name, value
 * pairs ending in NULL; empty values left out), each of the type types[i]
 * says for the i-th pair ('s' a string, 'n' a number, 'b' a boolean; types
 * NULL or another letter: guessed), where a value of digits, signs, points
 * and exponents that reads as a finite number is a number, "true" and
 * "false" are booleans, anything else (or a number or boolean that does
 * not read as one) a string; start_time (0: now). */
DP_EXPORT int dp_summary_hparams_start(dp_buf *summary, const char *const *kv, const char *types,
				       double start_time);
/* Append the hparams plugin's session end: STATUS_SUCCESS when ok, else
 * STATUS_FAILURE, at end_time (0: now). */
DP_EXPORT int dp_summary_hparams_end(dp_buf *summary, int ok, double end_time);
/* Append an Event to out: wall_time, step, and file_version (when not
 * NULL) or the summary (when not NULL). */
DP_EXPORT int dp_event_encode(dp_buf *out, double wall_time, int64_t step, const char *file_version,
			      const dp_buf *summary);

/* ---- Writing a file ----------------------------------------------------- */

typedef struct dp_events dp_events;

/* Create dir (and its parents) when missing, and in it a new event file
 * events.out.tfevents.<unix time>.<host> (".1", ".2"... appended when that
 * name is taken), holding the file_version event.  Never replaces a file. */
DP_EXPORT dp_events *dp_events_create(const char *dir, dp_err *e);
DP_EXPORT const char *dp_events_path(const dp_events *w);
/* The Summary of the next event: add values with dp_summary_*. */
DP_EXPORT dp_buf *dp_events_summary(dp_events *w);
/* Append the summary built since the last write as one Event at step and
 * wall_time (seconds since the epoch; 0: now), and push it to the file.
 * Nothing is written when the summary is empty. */
DP_EXPORT int dp_events_write(dp_events *w, int64_t step, double wall_time, dp_err *e);
/* Close the file (NULL: nothing); returns the first error of the close. */
DP_EXPORT int dp_events_close(dp_events *w, dp_err *e);

/* ---- A run folder, as Keras writes it -------------------------------------- */

typedef struct dp_tb_run dp_tb_run;
enum dp_tb_part { DP_TB_STEPS, DP_TB_TRAIN, DP_TB_VALIDATION };

/* A new event file in dir (dp_events_create), for the per-step scalars and
 * the settings; dir/train/ and dir/validation/ get theirs at their first
 * epoch. */
DP_EXPORT dp_tb_run *dp_tb_run_open(const char *dir, dp_err *e);
/* The event file of the per-step scalars (dir's own). */
DP_EXPORT dp_events *dp_tb_run_steps(dp_tb_run *r);
/* The run's settings, at step 0 of dir's file: the hparams session start of
 * kv of types (dp_summary_hparams_start), and a text summary tagged "settings": the
 * command line cmdline (NULL: none) and a table of kv. */
DP_EXPORT int dp_tb_run_settings(dp_tb_run *r, const char *cmdline, const char *const *kv,
				 const char *types, dp_err *e);
/* One epoch's metrics of part (DP_TB_TRAIN or DP_TB_VALIDATION): n values
 * v tagged epoch_NAME for names (loss, accuracy...), at step epoch (from 0,
 * as Keras counts them), in part's folder. */
DP_EXPORT int dp_tb_run_epoch(dp_tb_run *r, int part, int64_t epoch, const char *const *names,
			      const double *v, int n, dp_err *e);
/* The hparams session's end, when settings were written (once): success
 * when ok, else failure; a run that never ends its session shows as of
 * unknown status. */
DP_EXPORT int dp_tb_run_end(dp_tb_run *r, int ok, dp_err *e);
/* Close every file (NULL: nothing): the first error. */
DP_EXPORT int dp_tb_run_close(dp_tb_run *r, dp_err *e);

/* The event files of a log folder as TensorBoard finds them: every regular
 * file with "tfevents" in its name, at any depth (links to folders not
 * followed; 64 deep at most), in byte order of names folder by folder, each with its
 * run, the folder it is in relative to dir ("" for dir's own, "train",
 * "validation"...): path, run pairs ending in NULL, in one block to free();
 * NULL with e set when a folder cannot be read. */
DP_EXPORT char **dp_tb_find(const char *dir, dp_err *e);

/* ---- Reading ------------------------------------------------------------ */

typedef struct dp_event_scalar {
	const char *tag; /* into the record: valid while it is */
	size_t tag_len;
	double value;
	int single;      /* the value was a float32 (simple_value, DT_FLOAT...) */
} dp_event_scalar;

typedef struct dp_event {
	double wall_time;
	int64_t step;
	const char *file_version; /* NULL when the event has none */
	size_t file_version_len;
	dp_event_scalar *scalars; /* the summary's scalar values */
	size_t nscalars;
	size_t nother;            /* its other values: histograms, images... */
	size_t cap;               /* (the array's room, reused event to event) */
} dp_event;

#define DP_EVENT_INIT {0, 0, NULL, 0, NULL, 0, 0, 0}

/* Decode the Event in buf[0..len) into ev (which may hold an earlier
 * event: its array is reused).  Fields not listed above are skipped;
 * malformed wire data is DP_EDATA with the reason.  The tags point into
 * buf. */
DP_EXPORT int dp_event_parse(dp_event *ev, const void *buf, size_t len, dp_err *e);
DP_EXPORT void dp_event_free(dp_event *ev);

/* 1 when the first bytes of a stream, head[0..len), are an event file's:
 * a whole TFRecord frame, both CRCs right, holding an Event whose
 * file_version starts with "brain.Event:".  0 otherwise (give at least the
 * first 4096 bytes, or the whole stream when shorter). */
DP_EXPORT int dp_events_detect(const void *head, size_t len);

#ifdef __cplusplus
}
#endif
#endif
