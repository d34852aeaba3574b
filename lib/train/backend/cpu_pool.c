/*
 * cpu_pool.c - the CPU backend's threads (cpu_impl.h): one pool for all of
 * its work, OpenMP's, which oneDNN runs on too.
 *
 * cpu_par_run(ctx, n, fn, arg) runs fn(arg, i, worker) for every i < n on
 * the calling thread (worker 0) and threads - 1 helpers, each taking the
 * next i from a shared counter.  What an i computes does not depend on the
 * thread that runs it, so results stay the same run after run.  OpenBLAS
 * runs on one thread, inside these parts (cpu_sgemm cuts a GEMM into
 * them), and oneDNN's convolutions on the same OpenMP threads: so there is
 * one set of threads, as many as --threads, and none of them spins waiting
 * for work while another computes (issue 29: OpenBLAS's own threads, our
 * pthreads and oneDNN's OpenMP team took turns, each spinning after its
 * job while the next started).  OpenMP's helpers are made once, at open,
 * with every signal blocked (the program's handlers run on its own
 * threads), and keep that mask.  A build without OpenMP (clang without
 * -fopenmp: the fuzzing build) runs every part on the calling thread.
 */
#define _GNU_SOURCE
#include "cpu_impl.h"

#include <cblas.h>
#include <signal.h>
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

void cpu_par_start(dp_bectx *c)
{
#ifdef _OPENMP
	if (c->threads <= 1)
		return;
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	omp_set_num_threads(c->threads);
#pragma omp parallel num_threads(c->threads)
	{
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
#endif
}

void cpu_par_run(dp_bectx *c, int n, par_fn *fn, void *arg)
{
#ifdef _OPENMP
	int t = c->threads < n ? c->threads : n;
	if (t > 1 && !omp_in_parallel()) {
		atomic_int next = 0;
#pragma omp parallel num_threads(t)
		{
			int w = omp_get_thread_num();
			for (int i; (i = atomic_fetch_add(&next, 1)) < n;)
				fn(arg, i, w);
		}
		return;
	}
#endif
	for (int i = 0; i < n; i++)
		fn(arg, i, 0);
}

/* ---- GEMMs cut into parts ---- */

typedef struct gemm_job {
	enum CBLAS_TRANSPOSE ta, tb;
	int m, n, k, lda, ldb, ldc, parts, by_rows, step;
	float alpha, beta;
	const float *a, *b;
	float *c;
} gemm_job;

static void gemm_part(void *arg, int i, int worker)
{
	const gemm_job *j = arg;
	(void)worker;
	int lo = i * j->step, hi = lo + j->step;
	int whole = j->by_rows ? j->m : j->n;
	hi = hi < whole ? hi : whole;
	if (lo >= hi)
		return;
	if (j->by_rows) { /* rows lo..hi of C: those of op(A) */
		const float *a = j->ta == CblasNoTrans ? j->a + (size_t)lo * j->lda : j->a + lo;
		cblas_sgemm(CblasRowMajor, j->ta, j->tb, hi - lo, j->n, j->k, j->alpha, a, j->lda, j->b,
			    j->ldb, j->beta, j->c + (size_t)lo * j->ldc, j->ldc);
	} else { /* columns lo..hi of C: those of op(B) */
		const float *b = j->tb == CblasNoTrans ? j->b + lo : j->b + (size_t)lo * j->ldb;
		cblas_sgemm(CblasRowMajor, j->ta, j->tb, j->m, hi - lo, j->k, j->alpha, j->a, j->lda, b,
			    j->ldb, j->beta, j->c + lo, j->ldc);
	}
}

/* C (m, n) = alpha op(A) op(B) + beta C, row-major, as cblas_sgemm, cut
 * into the backend's threads by rows of C (where there are enough) or by
 * columns: each element is one part's, summed as OpenBLAS sums on one
 * thread, so the parts change nothing but the time.  c NULL: one call. */
void cpu_sgemm(dp_bectx *c, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m, int n, int k,
	       float alpha, const float *a, int lda, const float *b, int ldb, float beta, float *cc,
	       int ldc)
{
	int t = c ? c->threads : 1;
	gemm_job j = {ta, tb, m, n, k, lda, ldb, ldc, 1, 1, m, alpha, beta, a, b, cc};
	if (t > 1 && (double)m * n * k >= 1 << 16) {
		/* parts of 16 rows or columns at least (OpenBLAS's kernels take
		 * 16-row and 8-column blocks), the longer side cut */
		j.by_rows = m >= n || m >= 16 * t;
		int whole = j.by_rows ? m : n;
		j.step = ((whole + t - 1) / t + 15) / 16 * 16;
		j.parts = (whole + j.step - 1) / j.step;
	}
	if (j.parts <= 1) {
		cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, cc, ldc);
		return;
	}
	cpu_par_run(c, j.parts, gemm_part, &j);
}

/* ---- elementwise loops cut into parts ---- */

typedef struct range_job {
	size_t n, step;
	cpu_range_fn *fn;
	void *arg;
} range_job;

static void range_part(void *arg, int i, int worker)
{
	const range_job *j = arg;
	size_t lo = (size_t)i * j->step, hi = lo + j->step < j->n ? lo + j->step : j->n;
	if (lo < hi)
		j->fn(j->arg, lo, hi);
}

/* fn(arg, lo, hi) over [0, n) in a part a thread of at least min items,
 * each part's work its own (the same results on any threads). */
void cpu_par_range(dp_bectx *c, size_t n, size_t min, cpu_range_fn *fn, void *arg)
{
	size_t parts = (size_t)c->threads;
	if (parts > 1 && n >= 2 * min) {
		size_t step = (n + parts - 1) / parts;
		if (min >= 64)
			step = (step + 63) / 64 * 64; /* elements: whole cache lines */
		range_job j = {n, step, fn, arg};
		cpu_par_run(c, (int)((n + step - 1) / step), range_part, &j);
		return;
	}
	if (n)
		fn(arg, 0, n);
}
