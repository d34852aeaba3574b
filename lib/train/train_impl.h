/*
 * train_impl.h - private to the trainer's files (lib/train/, dp_train.h): the
 * trainer's state, which step.c (a data-parallel step) and pipeline.c (a
 * pipeline's step over stages of the model) share, and the job's
 * allgather the run's glue (agree.c, data.c, summary.c) shares, and the
 * failures of a run (setup.c, epoch_end.c).  Not installed.
 */
#ifndef DP_TRAIN_IMPL_H
#define DP_TRAIN_IMPL_H

#include "dp_train.h"

/* A pipeline (pipeline.c): this rank's stage of the model among its
 * replica's, and what travels between them. */
typedef struct pipe {
	dp_pipe_plan plan;
	int prev, next;     /* the ranks of the stages before and after (-1: none) */
	int first_rank;     /* the rank of this replica's first stage (it reads the data) */
	dp_comm *grp;       /* this stage's ranks of every replica: gradient sums */
	size_t in_sz, out_sz; /* floats a sample of the stage's input and output */
	size_t lab_sz;      /* bytes a sample of the labels */
	float *xin;         /* (host) each slot's input, received (stages after the first) */
	float *msg;         /* (host) an output or a gradient, on its way */
	void *lab;          /* (host) the labels of the step (the last stage) */
	size_t lab_cap;
	dp_pipe_stats st;
} pipe;

struct dp_trainer {
	dp_model *m;
	dp_optim *o;
	dp_comm *c;
	const dp_backend *be;
	dp_bectx *ctx;
	dp_step_conf conf;
	int rank, size, xent;
	uint64_t *counts; /* (size) every rank's samples in a micro-batch */
	size_t glo;       /* gradients below glo: the frozen prefix, zero, not summed */
	float *acc;       /* (dev) the update's gradients so far (accumulate > 1, pipelines) */
	uint64_t micro;   /* micro-batches (a pipeline: steps) in acc */
	uint64_t micro_gn; /* the job's samples in them */
	double pend_loss, pend_correct; /* this rank's sums over them */
	uint64_t pend_samples;
	uint64_t pend_micro; /* a pipeline's micro-batches in acc */
	pipe *p;          /* a pipeline; NULL: data parallelism alone */
};

/* ---- step.c ---- */
/* The samples of a full update: accumulate x batch x the replicas. */
uint64_t train_full(const dp_trainer *t);
/* The update of the summed gradients in the model's buffer: a short
 * update's mean, clipping (the norm over a pipeline's stages), the
 * optimizer's step. */
int train_apply(dp_trainer *t, double lr, dp_err *e);
/* After an update: r has the sums of its micro-batches, which are
 * forgotten. */
void train_updated(dp_trainer *t, dp_step_result *r);

/* ---- pipeline.c ---- */
int pipe_open(dp_trainer *t, dp_err *e);
void pipe_free(dp_trainer *t);
/* A step of the pipeline (s->n of this replica's samples, 0: none; last:
 * the update's last step): its micro-batches through the stages, then
 * the update. */
int pipe_step(dp_trainer *t, const dp_step *s, uint64_t step, double lr, int last,
	      dp_step_result *r, dp_err *e);
int pipe_agree(dp_trainer *t, dp_step *s, dp_err *e);
int pipe_eval(dp_trainer *t, dp_eval *ev, dp_data *d, dp_err *e);
int pipe_save(dp_trainer *t, const char *path, const dp_train_state *ts, const char *const *meta,
	      dp_err *e);

/* ---- agree.c ---- */
/* Every rank's n bytes at mine, in rank order (dp_comm_allgather), in a
 * malloc'd array; NULL with e set.  A collective. */
void *train_allgather(dp_comm *c, const void *mine, size_t n, dp_err *e);

/* ---- setup.c ---- */
/* A failure of run r (dp_run): e says fmt's message (formatted first: its
 * arguments may be e->msg), r->fail its kind (dp_run_fail); returns code. */
int run_fail(dp_run *r, int kind, dp_err *e, int code, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

#endif
