/* sgemm.c - the ceiling for bench/dp-train.sh: OpenBLAS SGEMM GFLOP/s on
 * one thread, large square matrices and the shapes of the benchmark's
 * models.  Built by the benchmark: cc sgemm.c $(pkg-config --cflags --libs openblas) */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

void openblas_set_num_threads(int);

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* GFLOP/s of C (m, n) = A (m, k) B (k, n), best of 5 timings of `reps` calls. */
static double gflops(int m, int n, int k, int reps)
{
	float *a = malloc(sizeof(float) * (size_t)m * k), *b = malloc(sizeof(float) * (size_t)k * n),
	      *c = malloc(sizeof(float) * (size_t)m * n);
	for (size_t i = 0; i < (size_t)m * k; i++)
		a[i] = (float)(i % 7) * 0.1f;
	for (size_t i = 0; i < (size_t)k * n; i++)
		b[i] = (float)(i % 5) * 0.1f;
	double best = 0;
	for (int t = 0; t < 6; t++) {
		double t0 = now();
		for (int r = 0; r < reps; r++)
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, k, b, n,
				    0.0f, c, n);
		double g = 2.0 * m * n * k * reps / (now() - t0) / 1e9;
		if (t && g > best) /* the first is a warm-up */
			best = g;
	}
	free(a);
	free(b);
	free(c);
	return best;
}

int main(void)
{
	openblas_set_num_threads(1);
	printf("sgemm_1024=%.1f\n", gflops(1024, 1024, 1024, 4));
	printf("sgemm_conv=%.1f\n", gflops(64, 576, 288, 200));  /* the CNN's second conv, one sample */
	printf("sgemm_mlp=%.1f\n", gflops(128, 128, 784, 400));  /* the MLP's first layer */
	return 0;
}
