/*
 * serve_impl.h - private to lib/train/serve/: the server's state (struct
 * dp_serve), a checkpoint generation and a request, shared by serve.c
 * (generations, the queue, the model threads, answers) and body.c
 * (request bodies into samples).  Not installed.
 */
#ifndef DP_SERVE_IMPL_H
#define DP_SERVE_IMPL_H

#include "dp_serve.h"
#include "dp_backend.h"
#include "dp_ckpt.h"
#include "dp_data.h"
#include "dp_image.h"
#include "dp_nn.h"

#include <pthread.h>

/* A worker's copy of a generation's model, on a backend context of its own. */
typedef struct serve_copy {
	dp_bectx *ctx;
	dp_model *m;           /* bound for max_batch */
	float *xbuf, *obuf;    /* (max_batch, in_size) host, (max_batch, k) */
} serve_copy;

/* One checkpoint loaded for every worker; requests hold references. */
typedef struct serve_gen {
	int refs;              /* under dp_serve.mu */
	uint64_t id;
	char *path;
	dp_st *ck;             /* worker 0's, open: its metadata */
	const dp_backend *be;
	unsigned nw;
	serve_copy *copy;      /* (nw) */
	dp_run_conf rc;        /* the checkpoint's settings (its strings) */
	dp_data_opts dopts;    /* how its records and raw samples are read */
	dp_image_tf img;       /* image bodies: the evaluation transform, sized */
	size_t in_size, k, topk;
	int cls;
	char input[48];        /* the input shape as text */
} serve_gen;

struct dp_req {
	dp_serve *s;
	serve_gen *g;          /* decoded for (a reference) */
	size_t n;              /* samples */
	float *x;              /* (n, in_size) */
	float *out;            /* (n, k) probabilities or outputs */
	int status;
	dp_err err;
	double deadline, t_enq, t_start, t_done;
	void (*done)(void *ctx);
	void *ctx;
	struct dp_req *next;   /* in the queue */
};

typedef struct serve_worker {
	dp_serve *s;
	unsigned idx;
	pthread_t th;
	int started;
} serve_worker;

struct dp_serve {
	dp_serve_conf c;
	unsigned nw;
	size_t max_batch, max_queue;
	double max_delay;
	pthread_mutex_t mu;
	pthread_cond_t cv;     /* CLOCK_MONOTONIC (dp_now) */
	serve_gen *cur;
	uint64_t gens;
	dp_req *head, **tail;
	size_t queued;         /* samples */
	int stop;
	dp_serve_stats st;
	serve_worker *w;
};

/* ---- serve.c ---- */
/* The generation serving now, with a reference for the caller. */
serve_gen *serve_current(dp_serve *s);
/* Drop a reference (freeing g after its last). */
void serve_release(dp_serve *s, serve_gen *g);

#endif
