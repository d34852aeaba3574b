/*
 * dp_train.h - the trainer: one step of synchronous data-parallel
 * training behind one call, and the run's settings that checkpoints keep.
 *
 * A step reads as llm.c's train_gpt2.c: the next batch (the caller's,
 * dp_data.h), then
 *     dp_step_agree(t, &s, e)            every rank's samples in it (a collective)
 *     dp_step_run(t, &s, step, lr, &r, e)
 *         forward, loss             scaled by the job's samples of the update
 *         backward                  each layer's gradients to the allreduce as
 *                                   they are ready (dp_comm.h), but those of
 *                                   the frozen layers at the model's start
 *         wait for the sums, clip, update (dp_optim.h)
 * Under mpirun every rank makes the same calls in the same order.  What
 * lives here and nowhere else:
 *  - gradient accumulation (conf.accumulate micro-batches an update): the
 *    micro-batches before the last are summed on the backend; the last
 *    adds them to its own gradients layer by layer, as they go to the
 *    allreduce;
 *  - ranks without samples in a step (their data is over: uneven shards)
 *    send zeros, or what they accumulated, through the same allreduce
 *    calls, and --sync-bn's sums through the same collectives, so that the
 *    ranks never wait on each other for ever;
 *  - the frozen prefix: the gradients of the frozen layers at the start
 *    of the model are zero on every rank and are not summed;
 *  - synchronised batch normalisation: the statistics' sums over the ranks;
 *  - a short update (an epoch's last, with fewer samples): the mean over
 *    the samples it has.
 * The tool keeps the options, the messages and the loop over epochs
 * (tools/dp-train.c); the run it sets up, with its log and checkpoints,
 * is dp_run below.  tests/unit/step.c tests the step, tests/unit/run.c
 * the run, without the tool.
 *
 * dp_run_conf: the settings of a run that a checkpoint's __metadata__
 * keeps (dp-checkpoint(5)), each key named once, here: dp-train writes them
 * and takes them back when resuming, dp-eval reads how the data was
 * decoded, the SageMaker entry where a run was.
 */
#ifndef DP_TRAIN_H
#define DP_TRAIN_H

#include "dp.h"
#include "dp_ckpt.h"
#include "dp_comm.h"
#include "dp_data.h"
#include "dp_eval.h"
#include "dp_events.h"
#include "dp_nn.h"
#include "dp_optim.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the step ------------------------------------------------------------ */

typedef struct dp_trainer dp_trainer;

typedef struct dp_step_conf {
	uint64_t batch;      /* samples of a micro-batch on each rank (--batch-size);
				a pipeline: of a step of each replica */
	uint64_t accumulate; /* micro-batches an update (0 and 1: each is an update);
				a pipeline: steps */
	double clip_norm;    /* the gradients' global L2 norm at most this; 0: no clipping */
	uint64_t seed;       /* dropout masks: (seed, step, layer, sample) */
	int sync_bn;         /* batchnorm statistics over every rank's batch */
	/* a pipeline (below): the model in `stages` stages (0, 1: none), a
	 * step cut into `micro` micro-batches (0: batch or 4 x stages, the
	 * fewer), the schedule */
	int stages;
	uint64_t micro;
	int schedule; /* DP_PIPE_1F1B (0), DP_PIPE_GPIPE */
} dp_step_conf;

/* A trainer of model m (bound, its frozen tensors set with dp_model_freeze
 * and dp_optim_set_tensors) with optimizer o over job c: the buffer of
 * accumulated gradients (on m's backend), the frozen prefix, the sums of
 * sync_bn.  m, o and c must outlive it. */
DP_EXPORT dp_trainer *dp_trainer_new(dp_model *m, dp_optim *o, dp_comm *c, const dp_step_conf *conf,
				     dp_err *e);
DP_EXPORT void dp_trainer_free(dp_trainer *t);

/* A micro-batch of the job. */
typedef struct dp_step {
	const float *x;  /* (n, in_size) this rank's inputs (host: dp_batch.x) */
	const void *y;   /* labels: (n) int32 classes (xent), (n, out_size) floats (mse) */
	size_t n;        /* this rank's samples; 0 when its data is over */
	uint64_t gn;     /* the job's samples: the sum of n over the ranks */
	int nout;        /* ranks without samples, */
	int first_out;   /* the first of them (-1: none) */
} dp_step;

/* Every rank's s->n, summed into s->gn, s->nout and s->first_out set: an
 * allgather, which every rank calls once a micro-batch, with or without
 * samples.  s->gn 0: the data is over everywhere. */
DP_EXPORT int dp_step_agree(dp_trainer *t, dp_step *s, dp_err *e);

/* What a call of dp_step_run did.  The sums are this rank's, over the
 * micro-batches of the update it ended (0 when it did not end one). */
typedef struct dp_step_result {
	int updated;     /* 1: the optimizer stepped (the update's last micro-batch) */
	double loss;     /* the summed loss of this micro-batch (a NaN or infinity: diverged) */
	double loss_sum, correct; /* this rank's summed loss and correct predictions of the update */
	uint64_t samples;         /* this rank's samples in it */
} dp_step_result;

/* One micro-batch s (agreed) of update `step` (0-based over the run) at
 * learning rate lr: forward, loss, backward; the update's last
 * micro-batch (every one without accumulation) also has the gradients
 * summed over the ranks, clipped and applied.  Returns 0, or a negative
 * status: a loss that is not finite is DP_EDATA with r->loss holding it,
 * and nothing is updated.  Every rank calls it for every agreed s. */
DP_EXPORT int dp_step_run(dp_trainer *t, const dp_step *s, uint64_t step, double lr, dp_step_result *r,
			  dp_err *e);
/* The micro-batches accumulated so far towards the next update (0 with
 * none, and always without accumulation). */
DP_EXPORT uint64_t dp_step_pending(const dp_trainer *t);
/* The update of what was accumulated, when the data ends before the
 * update's last micro-batch: the mean over the samples it has.  Every
 * rank calls it at the same point.  Returns 0 with r->updated 0 when
 * nothing is pending. */
DP_EXPORT int dp_step_flush(dp_trainer *t, uint64_t step, double lr, dp_step_result *r, dp_err *e);
/* Forget what was accumulated (an epoch's last, short update dropped). */
DP_EXPORT void dp_step_drop(dp_trainer *t);

/* Every rank's running statistics (batchnorm) become their mean over the
 * ranks (each moved them with its own batches): before a checkpoint or a
 * validation.  A collective. */
DP_EXPORT int dp_trainer_average_buffers(dp_trainer *t, dp_err *e);
/* FNV-1a 64 (mixed) of everything a rank trains: weights, running
 * statistics, optimizer state; the same on every rank after every step. */
DP_EXPORT int dp_trainer_state_hash(dp_trainer *t, uint64_t *hash, dp_err *e);

/* ---- pipelines: a model larger than one rank --------------------------------
 *
 * SageMaker's model parallelism, GPipe's pipeline: the model cut into S
 * stages of about equal cost (dp_model_cuts), each on ranks of its own;
 * under mpirun -np S x D, rank r is stage r % S of data-parallel replica
 * r / S.  A replica's step (conf.batch samples, read by its first stage,
 * its slice of every global batch as a data-parallel rank's) is cut into
 * conf.micro micro-batches that flow through the stages: activations
 * forward and their gradients back as MPI point-to-point messages
 * (dp_comm_send), the labels from the first stage to the last.  The
 * schedule of each stage (F: a micro-batch's forward pass, B: its
 * backward pass):
 *   gpipe  F0 F1 ... F(M-1), then B0 ... B(M-1) (fill, drain): the
 *          activations of all M micro-batches are kept;
 *   1f1b   S - 1 - s forwards, then a forward and a backward in turn,
 *          then the backwards left (PipeDream-Flush): at most S - s kept.
 * Both leave the same S - 1 bubbles a step: (S-1)/(M+S-1) of its time.
 * Each stage's gradients are summed over its replicas (a group of the
 * job: dp_comm_split), clipped by the norm over every stage, and its
 * optimizer steps its own parameters.  The result is the update of one
 * rank over the same global batch in micro-batches of the same size
 * (--batch-size batch/micro --accumulate micro x D), dropout masks
 * included (drawn by the samples' places in it), batchnorm's statistics
 * over each micro-batch; the stages' checkpoints are one file
 * (dp_trainer_save).  --sync-bn is refused. */

#define DP_MAX_STAGES 64
enum { DP_PIPE_1F1B = 0, DP_PIPE_GPIPE = 1 };
/* "1f1b", "gpipe"; -1 for anything else. */
DP_EXPORT int dp_pipe_schedule_parse(const char *s);
DP_EXPORT const char *dp_pipe_schedule_name(int schedule);

typedef struct dp_pipe_plan {
	int stages, replicas;  /* S, D */
	int stage, replica;    /* this rank's */
	uint64_t micro;        /* micro-batches a step */
	size_t micro_batch;    /* samples of a micro-batch at most */
	int slots;             /* micro-batches in flight on this stage at most */
	int first[DP_MAX_STAGES + 1]; /* stage k is layers [first[k], first[k + 1]) */
} dp_pipe_plan;

/* The pipeline of conf (conf.stages > 1) for rank `rank` of a job of
 * size, and model m (unbound) set up for it: its stage
 * (dp_model_set_stage) and the micro-batches it keeps in flight
 * (dp_model_set_slots); bind it for p->micro_batch samples next.  DP_EARG
 * when size is not stages x replicas, a step has fewer samples than
 * micro-batches, or the model fewer cut points than stages - 1. */
DP_EXPORT int dp_pipe_plan_model(dp_model *m, const dp_step_conf *conf, int rank, int size,
				 dp_pipe_plan *p, dp_err *e);

/* Where a pipeline's time went, this rank's, since the trainer began. */
typedef struct dp_pipe_stats {
	uint64_t steps, micro;  /* pipeline steps, micro-batches */
	double step_time;       /* seconds in the steps' micro-batches */
	double busy_time;       /* of them, in forward and backward passes */
	double theory;          /* the schedule's bubble: (S-1)/(M+S-1) */
} dp_pipe_stats;
DP_EXPORT int dp_trainer_pipe(const dp_trainer *t, dp_pipe_plan *p, dp_pipe_stats *st);

/* ---- the trainer over its ranks, with or without a pipeline ---------------- */

/* The data-parallel replicas (the ranks, without a pipeline) and this
 * rank's among them (*replica); dp_trainer_reads: 1 when this rank reads
 * training batches (a pipeline's first stages). */
DP_EXPORT int dp_trainer_replicas(const dp_trainer *t, int *replica);
DP_EXPORT int dp_trainer_reads(const dp_trainer *t);
/* The lowest rank that trains the same weights as rank r (0, or r's
 * stage's first replica). */
DP_EXPORT int dp_trainer_same_as(const dp_trainer *t, int r);
/* Every rank starts from the weights and running statistics of the first
 * rank that trains the same ones.  A collective. */
DP_EXPORT int dp_trainer_broadcast(dp_trainer *t, dp_err *e);
/* Validation: the batches of d's current epoch (dp_data_epoch first)
 * through the model in inference mode, added to ev (dp_eval_data's
 * figures): without a pipeline dp_eval_data itself; with one, d is read
 * by each replica's first stage (NULL on the other ranks), the batches go
 * through the stages in pieces of the micro-batch the model is bound for,
 * and the last stage adds them to its ev (the others' stay empty: sum
 * them with dp_eval_allreduce over the job).  A collective of each
 * replica's stages. */
DP_EXPORT int dp_trainer_eval(dp_trainer *t, dp_eval *ev, dp_data *d, dp_err *e);
/* The checkpoint of the whole model (dp_ckpt_save's file), written by rank
 * 0 at path: a pipeline's first replica's stages send it their tensors.
 * A collective. */
DP_EXPORT int dp_trainer_save(dp_trainer *t, const char *path, const dp_train_state *ts,
			      const char *const *meta, dp_err *e);

/* ---- training control: what a job does by itself at an epoch's end -------
 *
 * Keras' three callbacks on one monitored validation metric (val_loss,
 * val_accuracy, val_f1_macro...: "val_" and a dp_eval_metric name):
 *   EarlyStopping      patience, min_delta, baseline, start_from_epoch
 *   ReduceLROnPlateau  factor, patience, cooldown, min_lr, min_delta
 *   ModelCheckpoint(save_best_only=True)
 * with Keras' documented rules (lib/train/control.c says them, the
 * comparisons written as Keras writes them, so that they round alike).
 * dp_control_epoch decides from the epoch's value alone: under mpirun
 * that value comes from the exact validation sums (dp_eval_allreduce), the
 * same bits on every rank, so every rank decides the same.  The state is
 * text (dp_control_state_format, doubles in their shortest exact form)
 * that a checkpoint keeps and --resume takes back bit for bit. */

enum dp_monitor_mode { DP_MODE_AUTO = 0, DP_MODE_MIN, DP_MODE_MAX };

typedef struct dp_control_conf {
	char monitor[64]; /* "val_loss" ... */
	int mode;         /* DP_MODE_MIN or DP_MODE_MAX once parsed (auto resolved) */
	/* EarlyStopping (early_stop 0: off) */
	int early_stop;
	uint64_t es_patience, es_start_from_epoch;
	double es_min_delta; /* >= 0 */
	int es_has_baseline;
	double es_baseline;
	/* ReduceLROnPlateau (plateau 0: off) */
	int plateau;
	double rlr_factor, rlr_min_delta, rlr_min_lr;
	uint64_t rlr_patience, rlr_cooldown;
	/* ModelCheckpoint(save_best_only): the best so far is tracked */
	int save_best;
} dp_control_conf;

typedef struct dp_control_state {
	uint64_t es_wait, es_best_epoch;
	double es_best;
	int stopped;            /* early stopping fired ... */
	uint64_t stopped_epoch; /* ... after this epoch (0-based) */
	uint64_t rlr_wait, rlr_cooldown;
	double rlr_best;
	double lr;              /* the rate the plateau holds (the schedule's base) */
	double best;            /* save_best: the best value, ... */
	uint64_t best_epoch;    /* ... of this epoch (0-based); */
	int have_best;          /* 0: none yet */
} dp_control_state;

/* What dp_control_epoch decided. */
typedef struct dp_control_result {
	int improved;         /* save_best: a new best: save it */
	int reduced;          /* the plateau lowered the rate ... */
	double old_lr, new_lr; /* ... from, to */
	int stop;             /* early stopping: end the run after this epoch */
} dp_control_result;

/* The settings: Keras' defaults (monitor val_loss, mode auto; EarlyStopping
 * patience 0, min_delta 0; ReduceLROnPlateau factor 0.1, patience 10,
 * cooldown 0, min_lr 0, min_delta 1e-4), all three off. */
DP_EXPORT void dp_control_init(dp_control_conf *c);
/* --monitor METRIC (val_ and a dp-eval metric name) and --monitor-mode
 * auto|min|max; auto: max for accuracy, precision, recall, f1 and r2,
 * min for the rest (Keras' "acc in the name" rule, extended to the
 * metrics Keras has not). */
DP_EXPORT int dp_control_monitor(dp_control_conf *c, const char *metric, const char *mode, dp_err *e);
/* "patience=N,min_delta=X,baseline=X,start_from_epoch=N" (a bare N:
 * patience) turns EarlyStopping on; "" leaves it off. */
DP_EXPORT int dp_control_early_stop(dp_control_conf *c, const char *spec, dp_err *e);
/* "factor=X,patience=N,cooldown=N,min_lr=X,min_delta=X" (a bare N:
 * patience): ReduceLROnPlateau on; "" off.  factor in (0, 1). */
DP_EXPORT int dp_control_plateau(dp_control_conf *c, const char *spec, dp_err *e);
/* Their messages name the setting ("patience 'x': want ..."), not the
 * option.  The spec as text (buf), every setting, read back the same;
 * "" when off. */
DP_EXPORT const char *dp_control_early_stop_text(const dp_control_conf *c, char *buf, size_t len);
DP_EXPORT const char *dp_control_plateau_text(const dp_control_conf *c, char *buf, size_t len);

/* on_train_begin: a state with nothing seen, the plateau's rate lr. */
DP_EXPORT void dp_control_start(const dp_control_conf *c, double lr, dp_control_state *s);
/* on_epoch_end of epoch (0-based) with the monitored value: the state
 * moved on, r said what fired.  A NaN is never an improvement. */
DP_EXPORT void dp_control_epoch(const dp_control_conf *c, dp_control_state *s, uint64_t epoch,
				double value, dp_control_result *r);
/* The state as one line of key=value pairs (exact), and back.  parse:
 * DP_EDATA naming the key that is wrong. */
DP_EXPORT char *dp_control_state_format(const dp_control_state *s, dp_err *e);
DP_EXPORT int dp_control_state_parse(dp_control_state *s, const char *text, dp_err *e);
/* c's monitored metric is one that validation reports for model m (asked
 * of a report of one sample, before the work): else e says why. */
DP_EXPORT int dp_control_check_monitor(const dp_control_conf *c, const dp_model *m, dp_err *e);

/* ---- the run's data (lib/train/data.c) ------------------------------------- */

/* o's fields that c's settings and model m (over input shape in) decide:
 * the features and their decoding, the labels of m's loss and outputs,
 * the batch, the shuffle and its seed; for training (train) the image
 * transform, the last batch kept or dropped and the class names'
 * feature (a classifier of images whose names c does not give), for
 * validation the image transform of evaluation (dp_image_tf_eval). */
DP_EXPORT void dp_run_data_opts(const dp_run_conf *c, const dp_model *m, const dp_shape *in,
				int train, dp_data_opts *o);
/* The updates an epoch of td holds (the ramp of --warmup-epochs): every
 * rank reads its epoch 0 once without decoding (td NULL: a pipeline's
 * later stage), and the ranks agree as the training loop does: the
 * longest replica's batches, or the shortest with take_min (--uneven
 * drop) or rc->drop_last, in updates of rc->accumulate.  A collective. */
DP_EXPORT int dp_trainer_count_steps(dp_trainer *t, dp_comm *c, dp_data *td, const dp_run_conf *rc,
				     int take_min, uint64_t *steps, dp_err *e);

/* The class names td's records gave (dp_data_class_names) as the JSON
 * array a checkpoint keeps (dp_classes_json), once every class was met
 * under one distinct name; else (or td NULL) NULL. */
DP_EXPORT char *dp_run_data_classes(dp_data *td);

/* ---- the ranks alike (lib/train/agree.c) ------------------------------------
 * What the ranks of a job share and check with each other; each is a
 * collective over the job c. */

/* The job's settings beyond the run's (dp_run_conf) that every rank must
 * share: dp-train's options as the ranks see them. */
typedef struct dp_job_settings {
	int stages;              /* pipeline stages (1: none), ... */
	uint64_t micro;          /* ... micro-batches a step (0: the default), ... */
	int schedule;            /* ... DP_PIPE_* */
	int resume, init, summary; /* given (0, 1) */
	uint64_t max_steps;      /* 0: none */
	int uneven_drop;         /* --uneven drop */
	const char *train, *val; /* how the data is read: "shared", "per-rank", "none" */
	uint64_t log_every, ckpt_every;
	int ckpt_epochs;         /* ckpt_every counts epochs */
	int ckpt, output;        /* --checkpoint, -o given */
	int overlap;
	uint64_t bucket;
	const char *timeline;    /* "none", "per-rank", "gathered" */
	int wire, algo;          /* DP_WIRE_*, DP_ALLREDUCE_* */
	const char *reset;       /* --reset's patterns (NULL: none) */
	int classes;             /* --classes of a named model (0: its default) */
	int save_best;           /* --save-best given */
	int skip_corrupt;
	const char *max_skipped; /* as given (NULL: DP_MAX_SKIPPED_DEFAULT) */
} dp_job_settings;

/* What every rank must agree on, one setting a line (key=value): the
 * build, the backend and the MPI library, then c's and j's settings, the
 * pipeline's first (they decide which ranks are replicas).  Compare it
 * with dp_comm_check_same: ranks started with different options (mpirun's
 * MPMD syntax) or builds are told apart before they train out of step.
 * malloc'd; NULL when out of memory. */
DP_EXPORT char *dp_job_settings_text(const dp_run_conf *c, const dp_job_settings *j, dp_comm *comm);
/* The checkpoint at path (dp_st_open), read by rank 0 and sent to every
 * rank.  NULL with e set on failure: *alike 1 when every rank fails alike
 * (rank 0's e says why: a bad file), 0 when the job's messages failed. */
DP_EXPORT dp_st *dp_job_st_open(dp_comm *c, const char *path, int *alike, dp_err *e);
/* Rank 0's convolution algorithms (dp_backend_conv_algos_text) taken by
 * every rank's backend (be->conv_algos_take), so that the ranks run the
 * same ones. */
DP_EXPORT int dp_job_conv_algos_agree(dp_comm *c, const dp_backend *be, dp_bectx *ctx, dp_err *e);
/* The "epoch_records" text of a checkpoint (dp_run_epoch_records_text):
 * every replica's position pos in its data (its first stage's), none
 * when !in_epoch.  NULL with e set. */
DP_EXPORT char *dp_trainer_epoch_records(dp_trainer *t, dp_comm *c, uint64_t pos, int in_epoch,
					 dp_err *e);
/* This rank's state hash (dp_trainer_state_hash) in *hash, and each rank
 * whose state is not that of the rank it must equal (dp_trainer_same_as),
 * a line each ("rank 2: weights or optimizer state differ from rank 0's
 * (hash ..., not ...)") in *diff (malloc'd), NULL when all agree. */
DP_EXPORT int dp_trainer_check_same(dp_trainer *t, dp_comm *c, uint64_t *hash, char **diff,
				    dp_err *e);
/* Every rank of c decided r alike (training control): DP_EDATA saying
 * how many ranks decided what when not (a bug). */
DP_EXPORT int dp_control_agree(dp_comm *c, const dp_control_result *r, dp_err *e);

/* ---- starting from a checkpoint (lib/train/resume.c) --------------------- */

/* Checkpoint ck holds model m (dp_model_same): else DP_EDATA naming ck
 * and saying what it holds instead (another model or input shape; the
 * same layers trained with another loss: the --loss to give). */
DP_EXPORT int dp_run_check_model(const dp_st *ck, const dp_model *m, dp_err *e);
/* Resume checkpoint ck, saved by c->ranks replicas (dp_run_conf_from
 * took c from it): the optimizer state into o (of model m), where the
 * run was into *ts; DP_EDATA when c gives another seed than ck's.  With
 * reps replicas now: the same job (ranks, batch, accumulation) puts this
 * replica's position in its epoch into *pos (ck's epoch_records); another
 * number of replicas with the same global batch, its data split between
 * the ranks (split), goes on where it was (*moved 1); else DP_EARG saying
 * how ck can be resumed (dp_run_resume_ranks). */
DP_EXPORT int dp_run_resume(const dp_st *ck, dp_model *m, dp_optim *o, const dp_run_conf *c, int reps,
			    int replica, int split, dp_train_state *ts, uint64_t *pos, int *moved,
			    dp_err *e);

/* ---- the run in words (lib/train/summary.c) ----------------------------------
 * What dp-train --summary prints and the notes of a run, as text for the
 * caller to print: malloc'd, NULL when out of memory. */

/* The micro-batches of a pipeline's step: c->micro, or by default
 * 4 x c->stages, at most c->batch. */
DP_EXPORT uint64_t dp_pipe_micro(const dp_step_conf *c);
/* The layers (name, item indented by its blocks, output shape,
 * parameters, frozen), the total, the recomputed segments and the memory
 * at batch: lines. */
DP_EXPORT char *dp_train_summary(dp_model *m, uint64_t batch);
/* The algorithm be chooses for each convolution layer of m at batch and
 * why (be->conv_explain), under a heading naming desc (the backend), in
 * *text; m is bound at batch first (be times them now, as a run would).
 * *text "" (and m not bound) without convolutions or explanations. */
DP_EXPORT int dp_train_summary_convs(dp_model *m, const dp_backend *be, dp_bectx *ctx,
				     uint64_t batch, const char *desc, char **text, dp_err *e);
/* The cut of m into c->stages stages: each stage's layers, estimated
 * cost, parameters and memory, then the schedule's bubble.  NULL with e
 * set when m has too few cut points (DP_EARG) or memory runs out. */
DP_EXPORT char *dp_train_summary_pipeline(dp_model *m, const dp_step_conf *c, dp_err *e);
/* What m (bound) and optimizer o take, one line ("memory: ..."). */
DP_EXPORT char *dp_train_memory_note(dp_model *m, const dp_optim *o);
/* limit (bytes; 0: any): DP_ELIMIT, e saying what m and o take and what
 * would cut it, when they take more. */
DP_EXPORT int dp_train_memory_check(dp_model *m, const dp_optim *o, uint64_t limit, dp_err *e);
/* Trainer t's pipeline (of model m, steps of batch samples, schedule) in
 * one line: stages, replicas, micro-batches, the bubble in theory, the
 * parameters of each stage.  NULL without a pipeline. */
DP_EXPORT char *dp_train_pipeline_note(const dp_trainer *t, dp_model *m, uint64_t batch,
				       int schedule);
/* The bubble measured on each stage (its replicas' mean) against the
 * schedule's, one line in *text (NULL without a pipeline or steps).  A
 * collective over c. */
DP_EXPORT int dp_train_pipeline_report(const dp_trainer *t, dp_comm *c, char **text, dp_err *e);

/* How the gradients' allreduce went over c's steps of step_s seconds
 * each, in one line: part 0 the calls, their bytes and the time not
 * hidden by the backward pass; part 1 the bytes this rank sent (wire,
 * algo: DP_WIRE_*, DP_ALLREDUCE_*) and to other hosts.  NULL without
 * steps, or part 1 on one rank. */
DP_EXPORT char *dp_train_comm_note(dp_comm *c, double step_s, int wire, int algo, int part);

/* ---- a run, set up (lib/train/setup.c, outputs.c) ---------------------------
 *
 * dp-train's set-up of its options, one call a stage, in the order the tool
 * makes them:
 *     dp_run_join            the backend and the job (MPI under a launcher)
 *     dp_run_check_same      every rank started alike (a collective)
 *     dp_run_start_from      the checkpoint of --resume or --init, its settings
 *     dp_run_model           the model of the settings
 *     dp_run_check           the settings that go together, and those that do not
 *     dp_run_check_outputs   every output can be made, no two name one file
 *     dp_run_setup           the model on the backend, the optimizer, the
 *                            trainer, the weights, the data
 *     dp_run_check_inputs    no output is one of the inputs
 * Each returns 0, or a negative status with e saying why and r->fail its
 * kind, which decides who says it and the exit status. */
enum dp_run_fail {
	DP_RUN_FAIL_RANK = 0, /* this rank's alone (exit 1) */
	DP_RUN_FAIL_JOB,      /* every rank's alike, said once: a bad checkpoint, or
				 a setting taken from one ("ck: metadata: ...") (exit 1) */
	DP_RUN_FAIL_SETTINGS, /* every rank's alike, said once: settings that cannot
				 run (exit 2) */
	DP_RUN_FAIL_USAGE     /* every rank's alike: the command line (exit 2, with
				 the usage line) */
};

/* A run's training sums since t0: of the next log line, of an epoch. */
typedef struct dp_run_meter {
	double loss, correct;
	uint64_t samples, steps;
	double t0;
} dp_run_meter;

typedef struct dp_run {
	/* the caller's: the settings (completed by the set-up) and the options */
	dp_run_conf *c;
	const char **train, **val;       /* the sources: path templates ... */
	size_t ntrain, nval;
	const char *train_cmd, *val_cmd; /* ... or commands */
	int shard;                       /* -1: split shared sources; 0: no; 1: yes */
	int cache, cache_given;          /* DP_CACHE_*, and whether given */
	uint64_t cache_limit;
	const char *cache_dir;
	int prefetch;
	unsigned decode_threads;
	int decode_given;                /* else on a GPU, a share of the CPUs (dp_run_join) */
	int skip_corrupt;
	uint64_t max_record;
	const char *max_skipped;         /* as given (NULL: DP_MAX_SKIPPED_DEFAULT) */
	dp_gate skip_gate;               /* ... as a gate */
	int summary;
	const char *recompute;           /* patterns; "": every innermost block */
	int classes;                     /* a named model's outputs (0: its default) */
	char **names;                    /* the class names given (nnames), or NULL */
	size_t nnames;
	char *classes_json;              /* c->classes when the run made it (malloc'd) */
	int model_given;                 /* --model or --input-shape given */
	int threads, gpu, deterministic; /* gpu -1: the local rank's */
	uint64_t mem_limit;              /* bytes a rank's model may take (0: any) */
	int stages;                      /* pipeline stages (1: none), ... */
	uint64_t micro;                  /* ... micro-batches a step (0: the default), ... */
	int schedule;                    /* ... DP_PIPE_* */
	const char *pipe_opt;            /* a pipeline's option given without one */
	uint64_t max_steps;
	int uneven_drop, overlap;
	uint64_t bucket;
	int wire, algo;
	double stall, stall_abort;
	dp_msg_fn stall_report;          /* stall reports, from the communication thread */
	void (*on_skip)(void *ctx, const dp_err *e); /* an image skipped as corrupt */
	uint64_t ckpt_every, log_every;
	int ckpt_epochs, log_all, steps_given;
	const char *ckpt, *output, *resume, *init, *reset, *save_best, *log, *timeline;
	dp_msg_fn note;                  /* the run's notes (rank 0's matter) */
	void *note_ctx;
	FILE *logfp;                     /* this rank's log (NULL: none; lib/train/log.c) */
	int json;                        /* its lines JSON objects, not logfmt */
	void (*before_line)(void);       /* before a line is written (a progress bar cleared) */
	dp_tb_run *tb;                   /* the job's lines as TensorBoard events too (NULL: none) */
	/* the set-up's */
	int fail;                        /* DP_RUN_FAIL_* of the last failure */
	const dp_backend *be;
	dp_bectx *ctx;
	char desc[256];                  /* the backend in words */
	int cpus, local;                 /* dp_default_threads's (threads not given) */
	dp_comm *comm;
	int rank, size;
	int reps, rep;                   /* the data-parallel replicas, this rank's */
	dp_st *ck;                       /* the checkpoint started from, until dp_run_setup */
	dp_shape in;
	int xent;                        /* a classifier (else mse) */
	dp_model *m;
	dp_optim *opt;
	dp_trainer *tr;
	dp_data *td, *vd;                /* training (NULL: a pipeline's later stage), validation */
	dp_eval *eval;                   /* validation's figures (NULL: none) */
	dp_sched sched;
	uint64_t ramp;                   /* the updates of --warmup-epochs' ramp (0: none) */
	dp_train_state ts;               /* where the run is */
	uint64_t resume_pos;             /* where this rank's data resumes (0: count batches) */
	dp_control_conf ctl;             /* training control, on when ctl_on */
	dp_control_state cs;
	int ctl_on, stopped;             /* stopped: early stopping fired */
	/* the epochs' (lib/train/epoch.c) */
	dp_run_meter mt;                 /* the sums of the next training line, ... */
	dp_run_meter ep;                 /* ... the job's of the epoch so far (TensorBoard) */
	double lr;                       /* the rate of the last update */
	double iter_time;                /* seconds of the steps, ... */
	uint64_t iters;                  /* ... and their number */
	uint64_t data_pos;               /* the pos of the last batch trained on (dp_batch) */
	int out;                         /* this rank's data is over for the epoch */
	double epoch_t0;                 /* when the epoch began */
} dp_run;

DP_EXPORT int dp_run_join(dp_run *r, dp_err *e);
/* The settings as every rank sees them (dp_job_settings_text), compared
 * with every rank's: a collective.  DP_RUN_FAIL_SETTINGS when they differ. */
DP_EXPORT int dp_run_check_same(dp_run *r, dp_err *e);
/* The checkpoint of --resume (every setting r->c was not given) or --init
 * (the model, unless given), read by rank 0 and sent to every rank. */
DP_EXPORT int dp_run_start_from(dp_run *r, dp_err *e);
/* The model of r->c (--model @FILE read, --classes applied), its spec as
 * parsed into r->c->model. */
DP_EXPORT int dp_run_model(dp_run *r, dp_err *e);
/* --summary's model: its frozen and recomputed parts, the convolution
 * algorithms of the checkpoint resumed (the backend times the rest). */
DP_EXPORT int dp_run_summary_model(dp_run *r, dp_err *e);
/* The step's settings of r (dp_train.h). */
DP_EXPORT dp_step_conf dp_run_step_conf(const dp_run *r);
/* The checkpoint holds the model; the options, the schedule, the
 * optimizer's settings and training control hold together. */
DP_EXPORT int dp_run_check(dp_run *r, dp_err *e);
/* Whether the ranks split the records of these sources (the training
 * data's: val 0) between them. */
DP_EXPORT int dp_run_shared(const dp_run *r, int val);
DP_EXPORT int dp_run_setup(dp_run *r, dp_err *e);
/* Path template tmpl as this rank names it ({rank}, {size}); malloc'd. */
DP_EXPORT char *dp_run_path(const dp_run *r, const char *tmpl);
DP_EXPORT int dp_run_check_outputs(dp_run *r, dp_err *e);
DP_EXPORT int dp_run_check_inputs(dp_run *r, dp_err *e);
/* The epochs (lib/train/epoch.c): epoch begins (the rest of it,
 * resuming: where r->ts says), its training data in place.  Then, each a
 * collective: dp_run_next the job's next micro-batch s (this rank's batch,
 * none once r->out; s->gn 0: the epoch is over everywhere), *t0 when it
 * began; dp_run_step its step (s NULL: the update of the micro-batches
 * accumulated, dp_step_flush) at update r->ts.step's rate: 1 when it made
 * the update (r->ts, r->mt and the time of the steps moved on), 0 when
 * not, or a negative status: a loss that is not finite in *loss (e then
 * dp_step_run's, else "train: ..."). */
DP_EXPORT int dp_run_epoch_begin(dp_run *r, uint64_t epoch, dp_err *e);
DP_EXPORT int dp_run_next(dp_run *r, dp_step *s, double *t0, dp_err *e);
DP_EXPORT int dp_run_step(dp_run *r, uint64_t epoch, const dp_step *s, double t0, double *loss,
			  dp_err *e);
/* The learning rate of update `step`: the schedule over --lr (times the
 * ranks with --scale-lr; the plateau's rate), the ramps of --warmup and
 * --warmup-epochs. */
DP_EXPORT double dp_run_rate(const dp_run *r, uint64_t epoch, uint64_t step);
/* --max-skipped: the job's count of records skipped as corrupt (of
 * `read`) in an epoch's training or validation (what), against
 * r->skip_gate; every rank holds the same counts and stops alike
 * (DP_RUN_FAIL_JOB). */
DP_EXPORT int dp_run_check_skipped(dp_run *r, const char *what, uint64_t epoch, uint64_t skipped,
				   uint64_t read, dp_err *e);
/* The epoch's input, after its updates: the note of the time waited for
 * it (images decoded, threads, a GPU), the job's images skipped against
 * --max-skipped (unless stopped by --max-steps).  A collective. */
DP_EXPORT int dp_run_epoch_input(dp_run *r, uint64_t epoch, int stopped, dp_err *e);
/* The checkpoint of the run where r->ts says, at path template tmpl
 * ({step}, {epoch}; *path: the path, malloc'd), written by rank 0
 * (dp_trainer_save) after every rank's running statistics became their
 * mean: the run's settings, every rank's place in its epoch, training
 * control's state, the convolution algorithms, the class names the
 * records gave, and "producer" (prog and the version).  DP_EDATA: the
 * weights are not finite.  A collective. */
DP_EXPORT int dp_run_save(dp_run *r, const char *tmpl, const char *prog, char **path, dp_err *e);
/* The end of an epoch (lib/train/epoch_end.c), each a collective:
 * dp_run_validate: the validation data through the model (d r->vd; every
 * rank its share), the figures summed over the ranks, this rank's line
 * and the job's, --max-skipped.  dp_run_control: training control of the
 * monitored value (*value) decided in *res (dp_control_epoch), checked
 * alike on every rank; dp_run_control_log its events in the log (with
 * best, the checkpoint save_best wrote) and the notes (r->stopped set when
 * early stopping fired). */
DP_EXPORT int dp_run_validate(dp_run *r, uint64_t epoch, dp_err *e);
DP_EXPORT int dp_run_control(dp_run *r, uint64_t epoch, double *value, dp_control_result *res,
			     dp_err *e);
DP_EXPORT int dp_run_control_log(dp_run *r, uint64_t epoch, double value, const dp_control_result *res,
				 const char *best, dp_err *e);

/* The log (lib/train/log.c).  dp_run_log_line: a line of n pairs (values
 * as they are written: numbers, "quoted" text), the job's (rank 0's, and
 * TensorBoard's) or this rank's own (own: with --log-all-ranks, after
 * rank=R).  dp_run_log_train: the training line of r->mt, this rank's and
 * then the job's, summed over the ranks (a collective), into r->ep;
 * dp_run_log_val: the validation line of r->eval (own: this rank's
 * share); dp_run_log_event: a line of training control, epoch, step,
 * event=NAME, then n pairs; dp_run_log_state: the hash of this rank's
 * state (dp_trainer_check_same, a collective; hash the hex, *diff the
 * ranks that differ); dp_run_log_epoch: the epoch's TensorBoard metrics
 * (r->ep and the validation's). */
DP_EXPORT int dp_run_log_line(dp_run *r, const char *const *keys, const char *const *vals, int n,
			      int own, dp_err *e);
DP_EXPORT int dp_run_log_train(dp_run *r, uint64_t epoch, dp_err *e);
DP_EXPORT int dp_run_log_val(dp_run *r, uint64_t epoch, int own, dp_err *e);
DP_EXPORT int dp_run_log_event(dp_run *r, uint64_t epoch, const char *event, const char *const *k,
			       const char *const *v, int n, dp_err *e);
DP_EXPORT int dp_run_log_state(dp_run *r, char hash[17], char **diff, dp_err *e);
DP_EXPORT int dp_run_log_epoch(dp_run *r, uint64_t epoch, dp_err *e);
/* Everything the set-up made, closed. */
DP_EXPORT void dp_run_close(dp_run *r);

/* ---- TensorBoard (lib/train/tensorboard.c) ----------------------------------
 * A run's event files as Keras' TensorBoard callback writes them (the run
 * folder of dp_events.h). */

/* The run folder dir, its settings first: the command line (argv[0] as
 * prog, the words quoted where the shell needs it) and c's settings
 * (dp_run_conf_settings) as hparams. */
DP_EXPORT dp_tb_run *dp_train_tb_open(const char *dir, const char *prog, int argc, char **argv,
				      const dp_run_conf *c, dp_err *e);
/* A log line of the job (n keys and their values as logged: numbers,
 * "quoted" text) as one event at its step: a scalar a number, but step
 * and epoch; a line of training control (event=NAME) gives one scalar,
 * NAME, the first number after it. */
DP_EXPORT int dp_train_tb_line(dp_tb_run *tb, const char *const *keys, const char *const *vals,
			       int n, dp_err *e);
/* An epoch's metrics as Keras writes them, at step epoch (from 0):
 * train/'s loss, accuracy (has_acc: a classifier) and learning_rate
 * (train[0..2]) when the epoch trained samples, validation/'s loss and
 * accuracy (or mae) of val unless NULL. */
DP_EXPORT int dp_train_tb_epoch(dp_tb_run *tb, int64_t epoch, const double train[3],
				uint64_t samples, int has_acc, const dp_eval_report *val, dp_err *e);
/* The histograms of m's weights (weights/NAME) and its last gradients
 * (gradients/NAME), each trainable tensor, at step. */
DP_EXPORT int dp_train_tb_histograms(dp_tb_run *tb, dp_model *m, int64_t step, dp_err *e);

#ifdef __cplusplus
}
#endif
#endif
