/*
 * cpu_pool.c - the CPU backend's pool of helper threads (cpu_impl.h).
 *
 * With threads > 1 OpenBLAS runs each GEMM on that many threads, while the
 * backend's own loops (Winograd's transforms, batchnorm, pooling) would
 * run on the calling thread alone.  cpu_par_run(ctx, n, fn, arg) runs
 * fn(arg, i, worker) for every i < n on the calling thread (worker 0) and
 * threads - 1 helpers, each taking the next i from a shared counter.
 * What an i computes does not depend on the thread that runs it, so
 * results stay the same for any number of threads.  The helpers sleep on
 * a condition variable between jobs and run with every signal blocked
 * (the program's handlers run on its own threads).
 */
#define _GNU_SOURCE
#include "cpu_impl.h"

#include <signal.h>
#include <stdlib.h>

static void par_take(par_pool *p, par_fn *fn, void *arg, int n, int worker)
{
	for (int i; (i = atomic_fetch_add(&p->next, 1)) < n;)
		fn(arg, i, worker);
}

static void *par_main(void *a)
{
	par_helper *h = a;
	par_pool *p = h->pool;
	unsigned seen = 0;
	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->quit && p->gen == seen)
			pthread_cond_wait(&p->go, &p->mu);
		if (p->quit)
			break;
		seen = p->gen;
		par_fn *fn = p->fn;
		void *arg = p->arg;
		int n = p->n;
		pthread_mutex_unlock(&p->mu);
		par_take(p, fn, arg, n, h->worker);
		pthread_mutex_lock(&p->mu);
		if (--p->busy == 0)
			pthread_cond_signal(&p->idle);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

void cpu_par_stop(par_pool *p, par_helper *h)
{
	pthread_mutex_lock(&p->mu);
	p->quit = 1;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	for (int k = 0; k < p->nhelp; k++)
		pthread_join(p->tid[k], NULL);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->go);
	pthread_cond_destroy(&p->idle);
	free(p->tid);
	free(h);
}


/* Start threads - 1 helpers; with fewer (no memory, no thread), the loops
 * run on fewer threads, with the same results. */
void cpu_par_start(dp_bectx *c)
{
	par_pool *p = &c->pool;
	int want = c->threads - 1;
	if (want <= 0)
		return;
	p->tid = calloc((size_t)want, sizeof *p->tid);
	c->helpers = calloc((size_t)want, sizeof *c->helpers);
	if (!p->tid || !c->helpers) {
		free(p->tid);
		free(c->helpers);
		p->tid = NULL;
		c->helpers = NULL;
		return;
	}
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->go, NULL);
	pthread_cond_init(&p->idle, NULL);
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (int k = 0; k < want; k++) {
		c->helpers[k] = (par_helper){p, k + 1};
		if (pthread_create(&p->tid[k], NULL, par_main, &c->helpers[k]) != 0)
			break;
		p->nhelp++;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

void cpu_par_run(dp_bectx *c, int n, par_fn *fn, void *arg)
{
	par_pool *p = &c->pool;
	if (p->nhelp == 0 || n <= 1) {
		for (int i = 0; i < n; i++)
			fn(arg, i, 0);
		return;
	}
	pthread_mutex_lock(&p->mu);
	p->fn = fn;
	p->arg = arg;
	p->n = n;
	atomic_store(&p->next, 0);
	p->busy = p->nhelp;
	p->gen++;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	par_take(p, fn, arg, n, 0);
	pthread_mutex_lock(&p->mu);
	while (p->busy)
		pthread_cond_wait(&p->idle, &p->mu);
	pthread_mutex_unlock(&p->mu);
}
