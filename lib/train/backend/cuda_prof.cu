/*
 * cuda_prof.cu - where a CUDA run's GPU time goes (lib/train/backend/
 * cuda_impl.h), for DP_CUDA_PROFILE=FILE: CUDA events on the compute
 * stream around each call of the backend (convolutions, batchnorm, GEMMs,
 * the optimizer...), read at each sync() and wait(), summed per kind of
 * call; at close, FILE receives one line per kind, most time first:
 *
 *   kind calls gpu_ms share host_ms
 *
 * (host_ms: the time the calls took on the host, queueing the work: when
 * it nears gpu_ms the GPU waits for the host), then the totals: the GPU
 * time inside calls against the wall time counted (the GPU's busy
 * fraction, as nvidia-smi cannot say it).  cuDNN's calls are kinds of
 * their own ("cudnn forward", "cudnn data gradient", "cudnn filter
 * gradient"), their time taken out of the convolution that makes them,
 * so that a convolution's host time tells cuDNN's from ours (PROF_PART,
 * cuda_impl.h).  The first 3 syncs or waits (steps) are left out: they
 * load kernels and choose cuDNN's algorithms.
 * An event pair also counts the GPU's idle time inside a call (waiting
 * for the host), and the events cost a few microseconds a call: profile
 * a separate short run, not the one whose speed is reported.
 */
#include "cuda_impl.h"

#include <time.h>

struct prof_pair {
	int kind;
	int more; /* the rest of a call after a part of it: not a call of its own */
	cudaEvent_t a, b;
};

struct cu_prof {
	char *path;
	const char *kind[64];
	double ms[64], host_ms[64];
	long calls[64];
	double t0; /* the host clock at the open pair's start */
	int open;  /* the pair of the call under way (-1: none) */
	int outer; /* the kind of the call a part interrupted */
	int nkind;
	prof_pair *ev;
	int nev, cap;
	double wall0, wall1; /* seconds: the first call counted, the last sync */
	int nsync;           /* syncs seen: the first SKIP are left out */
	int stale;           /* pairs first in ev that a skipped collect left pending */
};

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

void cu_prof_open(dp_bectx *c)
{
	const char *p = dp_setting("DP_CUDA_PROFILE");
	if (!p || !*p)
		return;
	cu_prof *f = (cu_prof *)calloc(1, sizeof *f);
	if (!f || !(f->path = strdup(p))) {
		free(f);
		return;
	}
	f->open = -1;
	c->prof = f;
}

/* kind what's number, or -1 (64 kinds already) */
static int kind_of(cu_prof *f, const char *what)
{
	int k = 0;
	while (k < f->nkind && strcmp(f->kind[k], what))
		k++;
	if (k == f->nkind) {
		if (k == 64)
			return -1;
		f->kind[f->nkind++] = what;
	}
	return k;
}

/* A pair of kind k (-1: none) started on the stream: its index, or -1.
 * One pair is open at a time: the host clock is f->t0. */
static int pair_start(dp_bectx *c, int k, int more)
{
	cu_prof *f = c->prof;
	if (k < 0)
		return -1;
	if (f->nev == f->cap) {
		int cap = f->cap ? 2 * f->cap : 1024;
		prof_pair *ev = (prof_pair *)realloc(f->ev, cap * sizeof *ev);
		if (!ev)
			return -1;
		for (int i = f->cap; i < cap; i++) {
			cudaEventCreate(&ev[i].a);
			cudaEventCreate(&ev[i].b);
		}
		f->ev = ev;
		f->cap = cap;
	}
	prof_pair *e = &f->ev[f->nev];
	e->kind = k;
	e->more = more;
	cudaEventRecord(e->a, c->s);
	f->t0 = now_s();
	return f->nev++;
}

static void pair_stop(dp_bectx *c, int i)
{
	cu_prof *f = c->prof;
	cudaEventRecord(f->ev[i].b, c->s);
	f->host_ms[f->ev[i].kind] += (now_s() - f->t0) * 1e3;
}

/* The start of a call of kind what (*part 0), or of a part of the call
 * under way (*part 1: the call's pair stops here and starts again, not
 * counted as a call, at the part's end; *part is set to 0 where there is
 * no call under way to take it from).  Calls inside calls are left in
 * the outer call's time.  Its event pair's index, or -1. */
int cu_prof_begin(dp_bectx *c, const char *what, int *part)
{
	cu_prof *f = c->prof;
	if (!f)
		return -1;
	*part = *part && c->prof_depth == 1 && f->open >= 0;
	if (c->prof_depth++ && !*part)
		return -1;
	if (*part) {
		f->outer = f->ev[f->open].kind;
		pair_stop(c, f->open);
	}
	int i = pair_start(c, kind_of(f, what), 0);
	f->open = *part ? -1 : i;
	return i;
}

void cu_prof_end(dp_bectx *c, int i, int part)
{
	cu_prof *f = c->prof;
	if (!f)
		return;
	c->prof_depth--;
	if (part) {
		if (i >= 0)
			pair_stop(c, i);
		f->open = pair_start(c, f->outer, 1);
	} else if (!c->prof_depth && f->open >= 0) {
		pair_stop(c, f->open);
		f->open = -1;
	}
}

/* The syncs and waits (a step's each) left out of the sums: the first
 * steps load kernels and choose algorithms. */
#define PROF_SKIP 3

/* After a sync or a wait: the times of the calls done into the sums.  A
 * wait leaves work queued after the call it waits for: those calls' events
 * stay for the next time, first in the list (swapped, not copied: the
 * events are reused). */
void cu_prof_collect(dp_bectx *c)
{
	cu_prof *f = c->prof;
	if (!f)
		return;
	int skip = ++f->nsync <= PROF_SKIP, i = 0;
	for (; i < f->nev && cudaEventQuery(f->ev[i].b) == cudaSuccess; i++) {
		float ms = 0;
		if (!skip && i >= f->stale &&
		    cudaEventElapsedTime(&ms, f->ev[i].a, f->ev[i].b) == cudaSuccess) {
			f->ms[f->ev[i].kind] += ms;
			f->calls[f->ev[i].kind] += !f->ev[i].more;
		}
	}
	cudaGetLastError();
	for (int k = i; k < f->nev; k++) {
		prof_pair t = f->ev[k - i];
		f->ev[k - i] = f->ev[k];
		f->ev[k] = t;
	}
	f->nev -= i;
	/* a skipped step's calls still queued at its wait (its backward) are
	 * left out too, when they are done */
	f->stale = skip ? f->nev : f->stale > i ? f->stale - i : 0;
	if (skip) {
		memset(f->host_ms, 0, sizeof f->host_ms);
		f->wall0 = now_s();
	} else {
		f->wall1 = now_s();
	}
}

void cu_prof_close(dp_bectx *c)
{
	cu_prof *f = c->prof;
	if (!f)
		return;
	cu_prof_collect(c);
	FILE *o = fopen(f->path, "w");
	if (o) {
		double tot = 0;
		int order[64];
		for (int k = 0; k < f->nkind; k++) {
			tot += f->ms[k];
			order[k] = k;
		}
		for (int a = 0; a < f->nkind; a++) /* most time first */
			for (int b = a + 1; b < f->nkind; b++)
				if (f->ms[order[b]] > f->ms[order[a]]) {
					int t = order[a];
					order[a] = order[b];
					order[b] = t;
				}
		double host = 0;
		fprintf(o, "kind calls gpu_ms share host_ms\n");
		for (int a = 0; a < f->nkind; a++) {
			int k = order[a];
			host += f->host_ms[k];
			fprintf(o, "%s %ld %.3f %.1f%% %.3f\n", f->kind[k], f->calls[k], f->ms[k],
				tot > 0 ? 100 * f->ms[k] / tot : 0.0, f->host_ms[k]);
		}
		double wall = (f->wall1 - f->wall0) * 1e3;
		fprintf(o, "total gpu_ms=%.3f host_ms=%.3f wall_ms=%.3f busy=%.1f%%\n", tot, host, wall,
			wall > 0 ? 100 * tot / wall : 0.0);
		fclose(o);
	}
	for (int i = 0; i < f->cap; i++) {
		cudaEventDestroy(f->ev[i].a);
		cudaEventDestroy(f->ev[i].b);
	}
	free(f->ev);
	free(f->path);
	free(f);
	c->prof = NULL;
}
