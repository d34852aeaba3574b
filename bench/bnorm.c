/* bench/bnorm.c - the CPU backend's batch normalisation, forward (training)
 * and backward, at ResNet-20's shapes for batch 128 (CIFAR-10: 16x32x32,
 * 32x16x16, 64x8x8).  Prints, per shape, the median milliseconds of REPS
 * (default 20) forward and backward calls after 3 warm-up calls:
 *     N C H W fwd_ms bwd_ms
 * bench/bnorm.sh runs it against PyTorch's BatchNorm2d. */
#define _GNU_SOURCE
#include "dp_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	int reps = argc > 1 ? atoi(argv[1]) : 20;
	static const int shapes[][4] = {{128, 16, 32, 32}, {128, 32, 16, 16}, {128, 64, 8, 8}};
	const dp_backend *B = &dp_backend_cpu;
	dp_bectx *c;
	dp_err e;
	dp_backend_opts o = {1, -1, 0, DP_PREC_FP32};
	if (reps < 1 || B->open(&c, &o, NULL, 0, &e) < 0)
		return 1;
	double *tf = malloc(reps * sizeof *tf), *tb = malloc(reps * sizeof *tb);
	for (int s = 0; s < 3; s++) {
		int n = shapes[s][0], ch = shapes[s][1], hw = shapes[s][2] * shapes[s][3];
		size_t xn = (size_t)n * ch * hw;
		dp_bnorm g = {n, ch, hw, 1e-5f, 0.1f, 0, 0};
		float *x = malloc(xn * 4), *y = malloc(xn * 4), *dy = malloc(xn * 4),
		      *dx = malloc(xn * 4), *p = malloc(6 * ch * 4);
		for (size_t i = 0; i < xn; i++) {
			x[i] = (float)((i * 2654435761u) % 1000) / 250.0f - 1.5f;
			dy[i] = (float)((i * 40503u) % 1000) / 500.0f - 1.0f;
		}
		for (int i = 0; i < ch; i++) {
			p[i] = 1; /* gamma */
			p[ch + i] = 0; /* beta */
			p[2 * ch + i] = 0; /* running mean */
			p[3 * ch + i] = 1; /* running variance */
		}
		float *save = malloc(2 * ch * 4), *dg = malloc(ch * 4), *db = malloc(ch * 4);
		for (int r = -3; r < reps; r++) {
			double t0 = now();
			B->bnorm_fwd(c, &g, 1, x, p, p + ch, p + 2 * ch, p + 3 * ch, NULL, save, y);
			double t1 = now();
			B->bnorm_bwd(c, &g, x, p, save, NULL, dy, dx, dg, db);
			double t2 = now();
			if (r >= 0) {
				tf[r] = t1 - t0;
				tb[r] = t2 - t1;
			}
		}
		qsort(tf, reps, sizeof *tf, cmp);
		qsort(tb, reps, sizeof *tb, cmp);
		printf("%d %d %d %d %.3f %.3f\n", n, ch, shapes[s][2], shapes[s][3],
		       1e3 * tf[reps / 2], 1e3 * tb[reps / 2]);
		free(x), free(y), free(dy), free(dx), free(p), free(save), free(dg), free(db);
	}
	free(tf);
	free(tb);
	B->close(c);
	return 0;
}
