/* convshapes.c - bench/resnet.sh: the CPU backend's convolutions, shape by
 * shape, against the SGEMM ceiling of the same sizes.
 *
 *   convshapes resnet20|resnet18 THREADS BATCH [ROUNDS [CONV_ALGO]]
 *
 * For each distinct convolution of the network: the time of its forward
 * pass and of its backward pass (filter and input gradients) through
 * dp_backend_cpu at the given batch, and the time of the three plain
 * cblas_sgemm calls that the direct algorithm amounts to over the whole
 * batch, with the same M, N, K:
 *   forward  y  (k, n ohw)   = w (k, ckk) col (ckk, n ohw)
 *   filter   dw (k, ckk)     = dy (k, n ohw) col^T (n ohw, ckk)
 *   input    dcol (ckk, n ohw) = w^T (ckk, k) dy (k, n ohw)
 * (ckk = c kh kw; the first layer computes no input gradient).  Each time is the best of ROUNDS (default 5) after a
 * warm-up: on a shared machine the best is the least disturbed.  The
 * fraction of the ceiling is the GEMMs' time over the convolution's
 * (above 100%: Winograd does fewer multiplications).  Totals weigh each
 * shape by how often the network uses it.  CONV_ALGO: dp_backend_opts'
 * conv_algo (0 automatic, 1 im2col only, 2 Winograd wherever it applies).  Built by the benchmark:
 * cc -Ilib convshapes.c -Lbuild -ldp $(pkg-config --libs openblas) */
#include "dp_backend.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void openblas_set_num_threads(int);

/* One thread: the process's CPU time (on a shared machine, what the work
 * took, not how long others kept it waiting); more: the wall clock. */
static clockid_t clock_id = CLOCK_MONOTONIC;

static double now(void)
{
	struct timespec t;
	clock_gettime(clock_id, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef struct shape {
	const char *name;
	int uses; /* convolutions of this shape in the network */
	int c, h, k, kh, s, p;
} shape;

static const shape resnet20[] = {
	{"conv1 1>16 3x3 28", 1, 1, 28, 16, 3, 1, 1},
	{"layer1 16>16 3x3 28", 6, 16, 28, 16, 3, 1, 1},
	{"layer2.0 16>32 3x3/2 28", 1, 16, 28, 32, 3, 2, 1},
	{"layer2 32>32 3x3 14", 5, 32, 14, 32, 3, 1, 1},
	{"layer2.0 down 16>32 1x1/2", 1, 16, 28, 32, 1, 2, 0},
	{"layer3.0 32>64 3x3/2 14", 1, 32, 14, 64, 3, 2, 1},
	{"layer3 64>64 3x3 7", 5, 64, 7, 64, 3, 1, 1},
	{"layer3.0 down 32>64 1x1/2", 1, 32, 14, 64, 1, 2, 0},
	{NULL, 0, 0, 0, 0, 0, 0, 0},
};

static const shape resnet18[] = {
	{"conv1 3>64 7x7/2 224", 1, 3, 224, 64, 7, 2, 3},
	{"layer1 64>64 3x3 56", 4, 64, 56, 64, 3, 1, 1},
	{"layer2.0 64>128 3x3/2 56", 1, 64, 56, 128, 3, 2, 1},
	{"layer2 128>128 3x3 28", 3, 128, 28, 128, 3, 1, 1},
	{"layer2.0 down 64>128 1x1/2", 1, 64, 56, 128, 1, 2, 0},
	{"layer3.0 128>256 3x3/2 28", 1, 128, 28, 256, 3, 2, 1},
	{"layer3 256>256 3x3 14", 3, 256, 14, 256, 3, 1, 1},
	{"layer3.0 down 128>256 1x1/2", 1, 128, 28, 256, 1, 2, 0},
	{"layer4.0 256>512 3x3/2 14", 1, 256, 14, 512, 3, 2, 1},
	{"layer4 512>512 3x3 7", 3, 512, 7, 512, 3, 1, 1},
	{"layer4.0 down 256>512 1x1/2", 1, 256, 14, 512, 1, 2, 0},
	{NULL, 0, 0, 0, 0, 0, 0, 0},
};

static float *randbuf(size_t n, unsigned *seed)
{
	float *p = malloc(n * sizeof *p);
	if (!p) {
		fprintf(stderr, "convshapes: out of memory\n");
		exit(1);
	}
	for (size_t i = 0; i < n; i++) {
		*seed = *seed * 1103515245u + 12345u;
		p[i] = (float)((*seed >> 9) & 0xffff) / 65536.0f - 0.5f;
	}
	return p;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: convshapes resnet20|resnet18 THREADS BATCH [ROUNDS [CONV_ALGO]]\n");
		return 2;
	}
	const shape *net = strcmp(argv[1], "resnet18") ? resnet20 : resnet18;
	int threads = atoi(argv[2]), n = atoi(argv[3]), rounds = argc > 4 ? atoi(argv[4]) : 5;
	int algo = argc > 5 ? atoi(argv[5]) : 0;
	if (threads == 1)
		clock_id = CLOCK_PROCESS_CPUTIME_ID;
	const dp_backend *be = &dp_backend_cpu;
	dp_backend_opts o = {threads, -1, algo, DP_PREC_FP32};
	dp_bectx *ctx;
	dp_err err;
	char desc[128];
	if (be->open(&ctx, &o, desc, sizeof desc, &err) != DP_OK)
		return 1;
	openblas_set_num_threads(threads);
	printf("%s, batch %d, %s, times: %s\n", argv[1], n, desc,
	       threads == 1 ? "CPU" : "wall clock");
	printf("%-28s %4s %8s %8s %8s %7s %7s %7s\n", "convolution", "uses", "fwd_ms", "bwd_ms",
	       "gemm_ms", "GFLOP/s", "ceiling", "dw_ms");
	double tconv = 0, tgemm = 0, flops = 0;
	unsigned seed = 1;
	for (const shape *s = net; s->name; s++) {
		int oh = (s->h + 2 * s->p - s->kh) / s->s + 1;
		dp_conv2d g = {n, s->c, s->h, s->h, s->k, oh, oh, s->kh, s->kh, s->s, s->s, s->p, s->p};
		size_t xs = (size_t)n * s->c * s->h * s->h, ys = (size_t)n * s->k * oh * oh;
		int ckk = s->c * s->kh * s->kh, nohw = n * oh * oh, first = s == net;
		float *x = randbuf(xs, &seed), *w = randbuf((size_t)s->k * ckk, &seed);
		float *y = randbuf(ys, &seed), *dy = randbuf(ys, &seed), *dx = randbuf(xs, &seed);
		float *dw = randbuf((size_t)s->k * ckk, &seed);
		float *col = randbuf((size_t)ckk * nohw, &seed);
		void *ws = malloc(be->conv_ws(ctx, &g) + 64);
		double bf = 1e9, bb = 1e9, bg = 1e9, bw = 1e9;
		for (int r = 0; r <= rounds; r++) {
			double t0 = now();
			be->conv_fwd(ctx, &g, x, w, NULL, y, DP_ACT_NONE, ws);
			double t1 = now();
			be->conv_bwd(ctx, &g, x, w, y, dy, first ? NULL : dx, dw, NULL, DP_ACT_NONE, ws);
			double t2 = now();
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s->k, nohw, ckk, 1.0f, w,
				    ckk, col, nohw, 0.0f, y, nohw);
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s->k, ckk, nohw, 1.0f, dy,
				    nohw, col, nohw, 0.0f, dw, ckk);
			if (!first)
				cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ckk, nohw, s->k,
					    1.0f, w, ckk, dy, nohw, 0.0f, col, nohw);
			double t3 = now();
			be->conv_bwd(ctx, &g, x, w, y, dy, NULL, dw, NULL, DP_ACT_NONE, ws);
			double t4 = now();
			if (r) { /* round 0 warms up */
				bw = t4 - t3 < bw ? t4 - t3 : bw;
				bf = t1 - t0 < bf ? t1 - t0 : bf;
				bb = t2 - t1 < bb ? t2 - t1 : bb;
				bg = t3 - t2 < bg ? t3 - t2 : bg;
			}
		}
		double f = (first ? 2 : 3) * 2.0 * s->k * (double)ckk * nohw;
		printf("%-28s %4d %8.2f %8.2f %8.2f %7.1f %6.0f%% %7.2f\n", s->name, s->uses, 1e3 * bf,
		       1e3 * bb, 1e3 * bg, f / (bf + bb) / 1e9, 100 * bg / (bf + bb), 1e3 * bw);
		tconv += s->uses * (bf + bb);
		tgemm += s->uses * bg;
		flops += s->uses * f;
		free(x), free(w), free(y), free(dy), free(dx), free(dw), free(col), free(ws);
	}
	printf("%-28s %4s %17.1f %8.1f %7.1f %6.0f%%\n", "all (weighted by uses)", "", 1e3 * tconv,
	       1e3 * tgemm, flops / tconv / 1e9, 100 * tgemm / tconv);
	be->close(ctx);
	return 0;
}
