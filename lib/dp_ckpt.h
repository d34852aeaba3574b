/*
 * dp_ckpt.h - checkpoints: safetensors files, and models saved in them.
 *
 * safetensors (https://github.com/huggingface/safetensors): an 8-byte
 * little-endian header length N, N bytes of JSON, then the raw tensor
 * bytes.  The JSON maps each tensor name to {"dtype", "shape",
 * "data_offsets": [begin, end]} (offsets relative to the end of the
 * header) and may hold "__metadata__", an object of string values.  The
 * reader checks everything a malicious file could get wrong: header
 * length against the file, JSON syntax and duplicate keys, dtypes,
 * shapes against byte counts, offsets inside the data, tensors neither
 * overlapping nor leaving holes; every error names the file.
 *
 * A dp-train checkpoint (dp-checkpoint(5)) is such a file with
 *   "{i}.weight", "{i}.bias", ... the model's tensors (dp_nn.h), F32
 *                  (num_batches_tracked: I64), PyTorch's layouts and names;
 *   "optimizer.{tensor}.{state}"  optimizer state with the layout of
 *                  {tensor}: exp_avg, exp_avg_sq (adam, adamw),
 *                  momentum_buffer (sgd with momentum); none for the
 *                  tensors frozen (dp_optim_set_tensors);
 *   "rng.state"    U64 [4]: seed, step, epoch, epoch_step: the whole state
 *                  of dp-train's counter-based generators (dp_rng.h);
 *   __metadata__   format "dp-train/1", model, input_shape, loss, step,
 *                  epoch, epoch_step, seed, optimizer settings, and what
 *                  the caller adds: the run's settings (dp_run_conf below:
 *                  the data options, so dp-eval can read the data the same
 *                  way, and the rest, so a run resumes as it was).
 * The loading side is what dp-eval needs: checkpoint -> bound model ->
 * forward passes (dp_model_load).
 */
#ifndef DP_CKPT_H
#define DP_CKPT_H

#include "dp.h"
#include "dp_data.h"
#include "dp_nn.h"
#include "dp_optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- safetensors ---------------------------------------------------------- */

enum dp_dtype {
	DP_DT_F32 = 1, DP_DT_F64, DP_DT_F16, DP_DT_BF16,
	DP_DT_I64, DP_DT_I32, DP_DT_I16, DP_DT_I8,
	DP_DT_U64, DP_DT_U32, DP_DT_U16, DP_DT_U8, DP_DT_BOOL
};
DP_EXPORT const char *dp_dtype_name(int dt); /* "F32", ... */
DP_EXPORT size_t dp_dtype_size(int dt);
DP_EXPORT int dp_dtype_parse(const char *s); /* 0 if unknown */

#define DP_ST_MAXDIM 8

typedef struct dp_st_tensor {
	const char *name;
	int dtype;
	int ndim;
	int64_t shape[DP_ST_MAXDIM];
	const void *data; /* little-endian bytes, not aligned in general */
	size_t nbytes;
} dp_st_tensor;

/* Writer: tensors point to host memory that must live until write; names
 * and metadata are copied.  Tensors are written in the order added. */
typedef struct dp_st_writer dp_st_writer;
DP_EXPORT dp_st_writer *dp_st_writer_new(void);
DP_EXPORT int dp_st_add(dp_st_writer *w, const char *name, int dtype, int ndim, const int64_t *shape,
	      const void *data);
DP_EXPORT int dp_st_set_meta(dp_st_writer *w, const char *key, const char *value);
/* Write atomically to path (temporary + fsync + rename; "-" is stdout). */
DP_EXPORT int dp_st_write(dp_st_writer *w, const char *path, dp_err *e);
DP_EXPORT void dp_st_writer_free(dp_st_writer *w);

/* Reader.  dp_st_open and dp_st_open_mem read PyTorch's own files too
 * (torch.save: the zip format of torch 1.6 and later, the legacy format of
 * older ones and of torchvision's first hub files), as torch.load does
 * with weights_only=True: a restricted unpickler takes only what a
 * state_dict holds (tensors of the storage types, OrderedDict, nested
 * dicts, lists, numbers and strings) and refuses anything else, naming
 * it, without running anything from the file.  The state_dict is the
 * file's object, or the one dict of tensors in it ({"state_dict": ...,
 * "epoch": 3}); its tensors come out contiguous and little-endian, in the
 * state_dict's order, with no metadata. */
typedef struct dp_st dp_st;
DP_EXPORT dp_st *dp_st_open(const char *path, dp_err *e); /* "-": stdin */
/* Parse len bytes (copied); name is used in messages. */
DP_EXPORT dp_st *dp_st_open_mem(const void *buf, size_t len, const char *name, dp_err *e);
DP_EXPORT int dp_st_count(const dp_st *s);
DP_EXPORT const dp_st_tensor *dp_st_at(const dp_st *s, int i); /* in data-offset order */
DP_EXPORT const dp_st_tensor *dp_st_find(const dp_st *s, const char *name);
DP_EXPORT const char *dp_st_meta(const dp_st *s, const char *key); /* NULL if absent */
DP_EXPORT int dp_st_meta_count(const dp_st *s);
DP_EXPORT void dp_st_meta_at(const dp_st *s, int i, const char **key, const char **value);
DP_EXPORT const char *dp_st_name(const dp_st *s);
/* What the file was: "safetensors", or "pth" (below). */
DP_EXPORT const char *dp_st_format(const dp_st *s);
/* The file's bytes, as read and checked (to hand to dp_st_open_mem in
 * another process: dp-train's rank 0 sends them to the others). */
DP_EXPORT const void *dp_st_bytes(const dp_st *s, size_t *len);
DP_EXPORT void dp_st_close(dp_st *s);

/* ---- training checkpoints --------------------------------------------------- */

typedef struct dp_train_state {
	uint64_t seed;
	uint64_t step;       /* optimizer updates done */
	uint64_t epoch;      /* the epoch in progress (0-based) */
	uint64_t epoch_step; /* batches of it done */
} dp_train_state;

/* Save model m (weights, running statistics), the optimizer o (may be
 * NULL), the training state ts (may be NULL) and extra metadata (pairs of
 * key, value, NULL-terminated; may be NULL) to path, atomically.  Fails
 * with DP_EDATA, writing nothing, when a parameter is NaN or infinite. */
DP_EXPORT int dp_ckpt_save(const char *path, dp_model *m, dp_optim *o, const dp_train_state *ts,
		 const char *const *meta, dp_err *e);

/* A checkpoint in parts (a pipeline's stages: dp_train.h): dp_ckpt_part
 * gives the tensors of a stage's model m (bound) and its optimizer o (may
 * be NULL) as bytes (malloc'd, *len of them: DP_EDATA when a parameter is
 * not finite); dp_ckpt_save_parts writes from every stage's part the file
 * dp_ckpt_save writes of the whole model, the same bytes: m is any
 * stage's model (it knows the whole graph) and o its optimizer (the
 * settings and the steps; every stage's are alike).  DP_EARG when a
 * tensor of the model is in no part. */
DP_EXPORT void *dp_ckpt_part(dp_model *m, dp_optim *o, size_t *len, dp_err *e);
DP_EXPORT int dp_ckpt_save_parts(const char *path, dp_model *m, dp_optim *o,
				 const void *const *parts, const size_t *lens, int nparts,
				 const dp_train_state *ts, const char *const *meta, dp_err *e);

/* The model a checkpoint describes (unbound; from its metadata). */
DP_EXPORT dp_model *dp_ckpt_model(const dp_st *ck, dp_err *e);
/* Load weights and running statistics into m (bound), checking that
 * every tensor is there with the model's dtype and shape, and that the
 * file holds no other (besides the optimizer state and rng.state). */
DP_EXPORT int dp_ckpt_load_weights(const dp_st *ck, dp_model *m, dp_err *e);
/* Fine-tuning (--init): the same, from a dp-train checkpoint or a plain
 * PyTorch state_dict (no metadata: every tensor must be the model's),
 * except the tensors that `reset` selects (dp_model_select; NULL: none),
 * which keep the values m has (dp_model_init's) and may be missing from
 * the file or have other shapes there.  The first tensor that differs is
 * named: one the model lacks, one missing, or one of another shape.  As
 * torch's load_state_dict: float tensors of another width (F16, BF16,
 * F64) are converted; in a plain state_dict a missing num_batches_tracked
 * (torch before 0.4.1) is 0. */
DP_EXPORT int dp_ckpt_load_init(const dp_st *ck, dp_model *m, const char *reset, dp_err *e);
/* Load optimizer state (same kind of optimizer) and its step count. */
DP_EXPORT int dp_ckpt_load_optim(const dp_st *ck, dp_optim *o, dp_model *m, dp_err *e);
/* The training state (rng.state and metadata, checked to agree). */
DP_EXPORT int dp_ckpt_train_state(const dp_st *ck, dp_train_state *ts, dp_err *e);

/* For evaluation: open path, build its model, bind it to backend be for
 * batches up to max_batch, load the weights.  When ck is not NULL the
 * open checkpoint is returned there (metadata: dp_st_meta; close it with
 * dp_st_close), else closed. */
DP_EXPORT dp_model *dp_model_load(const char *path, const dp_backend *be, dp_bectx *ctx, size_t max_batch,
			dp_st **ck, dp_err *e);

/* ---- a checkpoint's tensors as a user looks at them (dp-ckpt(1)) ------------ */

/* What tensor `name` of ck is: a parameter of the model, a buffer of it
 * (batchnorm's running_mean, running_var, num_batches_tracked), optimizer
 * state or the generators' state (dp-train's optimizer.* and rng.state,
 * in a file with dp-train's metadata; in a plain state_dict every tensor
 * is the model's).  From names alone. */
enum { DP_CK_PARAM = 1, DP_CK_BUFFER, DP_CK_OPTIM, DP_CK_RNG };
DP_EXPORT int dp_ckpt_role(const dp_st *ck, const char *name);
/* Elements of t; element i (row-major) as a double, whatever its dtype. */
DP_EXPORT size_t dp_st_numel(const dp_st_tensor *t);
DP_EXPORT double dp_st_value(const dp_st_tensor *t, size_t i);
/* a against b, element by element (bits, then values): the elements whose
 * bits differ, and of them the one of the largest absolute difference
 * (NaN against a number: infinite; NaN against NaN: 0).  -1 when their
 * dtypes or shapes differ (nothing to compare), else 0. */
typedef struct dp_st_diff {
	size_t ndiff;   /* elements whose bits differ; 0: identical */
	size_t at;      /* the element of the largest difference, row-major */
	double max_abs; /* its absolute difference (0 when identical) */
	double a, b;    /* its values */
} dp_st_diff;
DP_EXPORT int dp_st_diff_tensors(const dp_st_tensor *a, const dp_st_tensor *b, dp_st_diff *d);
/* Write ck's weights alone to path, atomically: the model's parameters
 * and buffers in their dtypes, no optimizer state, no rng.state, and the
 * metadata without the training state's keys (seed, step, epoch,
 * epoch_step, epoch_records, optimizer_steps: --resume refuses the file,
 * --init and dp-eval take it).  The formats of dp-ckpt export. */
DP_EXPORT int dp_ckpt_export_safetensors(const dp_st *ck, const char *path, dp_err *e);
/* The same weights as torch.save writes a state_dict (the zip format that
 * torch 1.6 and later load, weights_only=True included): an OrderedDict
 * of the tensors by name, for load_state_dict(strict=True).  Up to 4 GiB;
 * a U16, U32 or U64 tensor (no torch dtype) is refused. */
DP_EXPORT int dp_ckpt_export_pth(const dp_st *ck, const char *path, dp_err *e);
/* A state_dict sd (a .pth, a plain safetensors file) as a dp-train
 * checkpoint of the model spec on input_shape with loss (DP_LOSS_*), at
 * path: its tensors checked as dp_ckpt_load_init checks them (each of the
 * model's there, in its shape; none other), then saved with the model's
 * metadata and meta's pairs (NULL-terminated; may be NULL), without
 * optimizer or training state: what dp-eval and --init take. */
DP_EXPORT int dp_ckpt_import(const dp_st *sd, const char *spec, const char *input_shape, int loss,
			     const char *path, const char *const *meta, dp_err *e);

/* ---- the run's settings: dp-checkpoint(5)'s metadata keys -----------------
 * Each key is named once, in lib/train/ckpt/run.c: dp-train writes a run's
 * settings into its checkpoints and takes them back when resuming, dp-eval
 * reads how the data was decoded.  One field of dp_run_conf a key
 * (dp_optim_conf's for the optimizer's); the values are checked as the
 * command line checks them, and a bad one is a bad checkpoint (DP_EDATA:
 * "ck.safetensors: metadata 'lr' is 'x', not a number"). */
enum dp_run_key {
	DP_RUN_MODEL, DP_RUN_INPUT_SHAPE, DP_RUN_LOSS, DP_RUN_FEATURE, DP_RUN_LABEL,
	DP_RUN_DECODE, DP_RUN_IMAGE, DP_RUN_LAYOUT, DP_RUN_SCALE, DP_RUN_SHUFFLE,
	DP_RUN_LAST_BATCH, DP_RUN_BATCH, DP_RUN_ACCUMULATE, DP_RUN_CLIP_NORM, DP_RUN_EPOCHS,
	DP_RUN_SEED, DP_RUN_SCHEDULE, DP_RUN_WARMUP, DP_RUN_OPTIMIZER, DP_RUN_LR,
	DP_RUN_MOMENTUM, DP_RUN_DAMPENING, DP_RUN_BETA1, DP_RUN_BETA2, DP_RUN_EPS, DP_RUN_WD,
	DP_RUN_NESTEROV, DP_RUN_SCALE_LR, DP_RUN_WARMUP_EPOCHS, DP_RUN_STEPS_PER_EPOCH,
	DP_RUN_FREEZE, DP_RUN_LR_MULT,
	DP_RUN_NO_DECAY, DP_RUN_SMOOTH, DP_RUN_SYNC_BN, DP_RUN_RANKS, DP_RUN_PRECISION,
	DP_RUN_MONITOR, DP_RUN_MONITOR_MODE, DP_RUN_EARLY_STOP, DP_RUN_PLATEAU, DP_RUN_CONTROL_STATE,
	DP_RUN_CLASSES,
	DP_RUN_NKEYS
};

typedef struct dp_run_conf {
	const char *model, *input_shape; /* the spec; C x H x W */
	int loss;                        /* DP_LOSS_* */
	const char *feature, *label;     /* the records' features */
	int decode;                      /* DP_DECODE_* */
	dp_image_tf img;                 /* DP_DECODE_IMAGE: the transform */
	int hwc;                         /* samples (h, w, c), else (c, h, w) */
	double scale;                    /* raw values times this ... */
	const char *scale_text;          /* ... as written ("1/255"), or NULL */
	uint64_t shuffle;                /* the shuffle buffer's records */
	int drop_last;                   /* an epoch's last, short batch dropped */
	uint64_t batch, accumulate, epochs, seed, warmup;
	double clip_norm;
	const char *schedule;            /* dp_sched_parse's text */
	dp_optim_conf opt;
	double lr;
	int scale_lr;
	double warmup_epochs, smooth;
	uint64_t steps_per_epoch;        /* updates an epoch (--warmup-epochs' ramp); 0: unknown */
	const char *freeze, *lr_mult, *no_decay; /* patterns; NULL or "": none */
	int sync_bn;
	int ranks;                       /* of the run that saved it */
	int precision;                   /* enum dp_precision; written, never taken back */
	/* training control (dp_train.h, dp_control_*): the monitored metric
	 * and its mode (min or max), the early stopping and plateau settings
	 * as their texts ("" or NULL: off), and where they stand (the text
	 * of dp_control_state_format) */
	const char *monitor, *monitor_mode, *early_stop, *plateau, *control_state;
	const char *classes;             /* the class names as a JSON array ("[\"cat\",...]"),
					    or NULL (dp_classes_json) */
	/* given[k]: the caller set key k itself: dp_run_conf_from leaves it;
	 * from[k]: dp_run_conf_from took key k from a checkpoint */
	unsigned char given[DP_RUN_NKEYS], from[DP_RUN_NKEYS];
	char *kept[DP_RUN_NKEYS];        /* the strings taken (the conf's own) */
	char *src;                       /* the checkpoint taken from, for messages */
} dp_run_conf;

/* dp-train's defaults (dp-train(1)), nothing given, nothing taken. */
DP_EXPORT void dp_run_conf_init(dp_run_conf *c);
DP_EXPORT void dp_run_conf_free(dp_run_conf *c);
/* The metadata name of key k ("batch_size"). */
DP_EXPORT const char *dp_run_key_name(int k);
/* How the value of the key named name reads: 'n' a number, 'b' true or
 * false, 's' text (the hparams' types); 0 for no such key. */
DP_EXPORT int dp_run_key_type(const char *name);
/* Take into c each of keys (a list ending in -1; NULL: every key but
 * precision) that checkpoint ck holds and c->given does not mark, in the
 * order of enum dp_run_key (the optimizer's kind before its settings:
 * another kind brings its default weight decay and learning rate, unless
 * given).  0, or DP_EDATA naming the checkpoint and the key. */
DP_EXPORT int dp_run_conf_from(dp_run_conf *c, const dp_st *ck, const int *keys, dp_err *e);
/* c as checkpoint metadata for dp_ckpt_save: key, value pairs ending in
 * NULL, those that dp_ckpt_save writes itself from the model and the
 * optimizer left out, then extra's pairs (may be NULL).  One block: free()
 * it.  NULL with e set when out of memory or the schedule does not parse. */
DP_EXPORT char **dp_run_conf_meta(const dp_run_conf *c, const char *const *extra, dp_err *e);
/* c's settings for people (the hparams of dp-train --tensorboard): every
 * key, the optimizer's own of its kind, in the order of enum dp_run_key,
 * but the training control's state and the class names; as
 * dp_run_conf_meta's block. */
DP_EXPORT char **dp_run_conf_settings(const dp_run_conf *c, dp_err *e);

/* "epoch_records": each rank's position in its epoch (records read, a
 * batch with a skipped record taking more than its size), as the text the
 * key keeps ("1200,1187,..."), malloc'd (NULL when out of memory); and
 * back, rank's count into *pos when ck holds the key (else *pos is left),
 * DP_EDATA "ck: metadata 'epoch_records' is 'x', not 4 counts" otherwise. */
DP_EXPORT char *dp_run_epoch_records_text(const uint64_t *pos, int ranks);
DP_EXPORT int dp_run_epoch_records(const dp_st *ck, int ranks, int rank, uint64_t *pos, dp_err *e);
/* Resuming ck, saved by ck_ranks ranks of saved's batch size and
 * accumulation, with ranks ranks of now's: the same job, or another
 * number of ranks with the same global batch when the data is split
 * between the ranks (split), which then goes on where it was (*moved 1).
 * Otherwise DP_EARG, e saying what ck was saved by and how to resume it
 * (--batch-size, --accumulate, the number of ranks). */
DP_EXPORT int dp_run_resume_ranks(const dp_st *ck, const dp_run_conf *saved, int ck_ranks,
				  const dp_run_conf *now, int ranks, int split, int *moved,
				  dp_err *e);

/* Class names as the metadata key "classes" keeps them: a JSON array of
 * distinct non-empty strings (malloc'd text; NULL when out of memory),
 * and back: *names (*k pointers into one block, then NULL: free(*names)
 * frees all), DP_EDATA for anything else. */
DP_EXPORT char *dp_classes_json(const char *const *names, size_t k);
DP_EXPORT int dp_classes_from_json(const char *text, size_t *k, char ***names, dp_err *e);



#ifdef __cplusplus
}
#endif
#endif
