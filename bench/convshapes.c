/* convshapes.c - bench/resnet.sh: the CPU backend's convolutions, shape by
 * shape, against the SGEMM ceiling of the same sizes.
 *
 *   convshapes resnet20|resnet18|resnet50[:SIZE] THREADS BATCH [ROUNDS [IMPL]]
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
 * shape by how often the network uses it, and the line under each says
 * which implementation ran each pass and why (conv_explain).  IMPL: auto
 * (measured, the default), pinned (--deterministic's rule), or one forced
 * where it applies: im2col, winograd, gemm, onednn.  SIZE: the input's
 * (resnet18 and resnet50, default 224).  Built by the benchmark:
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
	char name[40];
	int uses; /* convolutions of this shape in the network */
	int c, h, k, kh, s, p;
} shape;

static int nshape;
static shape shapes[64];

/* Add a use of a shape (counted where it repeats). */
static void add(const char *name, int c, int h, int k, int kh, int s, int p)
{
	for (int i = 0; i < nshape; i++) {
		shape *t = &shapes[i];
		if (t->c == c && t->h == h && t->k == k && t->kh == kh && t->s == s && t->p == p) {
			t->uses++;
			return;
		}
	}
	shape *t = &shapes[nshape++];
	snprintf(t->name, sizeof t->name, "%s %d>%d %dx%d%s%s %d", name, c, k, kh, kh,
		 s > 1 ? "/" : "", s > 1 ? "2" : "", h);
	t->uses = 1, t->c = c, t->h = h, t->k = k, t->kh = kh, t->s = s, t->p = p;
}

/* The convolutions of torchvision's resnet18 / resnet50 at 3 x size x
 * size (size a multiple of 32), and of the CIFAR resnet20 at 1x28x28. */
static void network(const char *net, int size)
{
	char l[16];
	if (!strcmp(net, "resnet20")) {
		add("conv1", 1, 28, 16, 3, 1, 1);
		for (int i = 0, c = 16, h = 28; i < 3; i++, c *= 2) {
			snprintf(l, sizeof l, "layer%d", i + 1);
			int in = i ? c / 2 : c, h0 = h;
			h = i ? h / 2 : h;
			add(l, in, h0, c, 3, i ? 2 : 1, 1);
			for (int b = 1; b < 6; b++)
				add(l, c, h, c, 3, 1, 1);
			if (i)
				add(l, in, h0, c, 1, 2, 0);
		}
		return;
	}
	int bottleneck = !strcmp(net, "resnet50"), h = size / 4;
	int blocks[4] = {2, 2, 2, 2}, in = 64;
	if (bottleneck)
		blocks[1] = 4, blocks[2] = 6, blocks[3] = 3;
	add("conv1", 3, size, 64, 7, 2, 3);
	for (int i = 0, w = 64; i < 4; i++, w *= 2) {
		snprintf(l, sizeof l, "layer%d", i + 1);
		int out = bottleneck ? 4 * w : w;
		for (int b = 0; b < blocks[i]; b++) {
			int s = b == 0 && i > 0 ? 2 : 1, h1 = h / s;
			if (bottleneck) {
				add(l, in, h, w, 1, 1, 0);
				add(l, w, h, w, 3, s, 1);
				add(l, w, h1, out, 1, 1, 0);
			} else {
				add(l, in, h, w, 3, s, 1);
				add(l, w, h1, w, 3, 1, 1);
			}
			if (b == 0 && (s > 1 || in != out))
				add(l, in, h, out, 1, s, 0);
			in = out;
			h = h1;
		}
	}
}

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
		fprintf(stderr, "usage: convshapes resnet20|resnet18|resnet50[:SIZE] THREADS BATCH "
				"[ROUNDS [IMPL]]\n");
		return 2;
	}
	char net[32];
	int size = 224;
	snprintf(net, sizeof net, "%s", argv[1]);
	if (strchr(net, ':')) {
		size = atoi(strchr(net, ':') + 1);
		*strchr(net, ':') = 0;
	}
	network(net, size);
	int threads = atoi(argv[2]), n = atoi(argv[3]), rounds = argc > 4 ? atoi(argv[4]) : 5;
	/* the implementation (dp_backend_opts.conv_algo): auto (measured), pinned
	 * (--deterministic's), im2col, winograd, gemm, onednn */
	static const char *const impls[] = {"auto", "im2col", "winograd", "gemm", "onednn"};
	int algo = 0, pinned = argc > 5 && !strcmp(argv[5], "pinned");
	for (int i = 0; argc > 5 && i < 5; i++)
		if (!strcmp(argv[5], impls[i]))
			algo = i;
	if (threads == 1)
		clock_id = CLOCK_PROCESS_CPUTIME_ID;
	const dp_backend *be = &dp_backend_cpu;
	dp_backend_opts o = {threads, -1, algo, DP_PREC_FP32, pinned, NULL};
	dp_bectx *ctx;
	dp_err err;
	char desc[128];
	if (be->open(&ctx, &o, desc, sizeof desc, &err) != DP_OK)
		return 1;
	openblas_set_num_threads(threads);
	printf("%s, batch %d, %s, convolutions %s, times: %s\n", argv[1], n, desc,
	       argc > 5 ? argv[5] : "auto", threads == 1 ? "CPU" : "wall clock");
	printf("%-28s %4s %8s %8s %8s %7s %7s %7s\n", "convolution", "uses", "fwd_ms", "bwd_ms",
	       "gemm_ms", "GFLOP/s", "ceiling", "dw_ms");
	double tconv = 0, tgemm = 0, flops = 0;
	unsigned seed = 1;
	for (const shape *s = shapes; s < shapes + nshape; s++) {
		int oh = (s->h + 2 * s->p - s->kh) / s->s + 1;
		dp_conv2d g = {n, s->c, s->h, s->h, s->k, oh, oh, s->kh, s->kh, s->s, s->s, s->p, s->p};
		size_t xs = (size_t)n * s->c * s->h * s->h, ys = (size_t)n * s->k * oh * oh;
		int ckk = s->c * s->kh * s->kh, nohw = n * oh * oh, first = s == shapes;
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
		char why[512];
		if (be->conv_explain(ctx, &g, why, sizeof why) > 0)
			printf("    %s\n", why);
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
