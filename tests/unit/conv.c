/* conv.c - the CPU backend's convolution algorithms against each other:
 * Winograd F(2x2, 3x3) (forward, input and filter gradients) against im2col + GEMM,
 * over odd and even sizes, every padding it takes, with bias and
 * activation; and both against a direct six-loop convolution in double. */
#define _GNU_SOURCE
#include "dp_backend.h"
#include "dp_rng.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>

static void fill(float *p, size_t n, uint64_t seed)
{
	dp_rng r = {dp_mix64(seed), 0};
	for (size_t i = 0; i < n; i++)
		p[i] = 2 * dp_rng_unit(dp_rng_next(&r)) - 1;
}

static double maxrel(const float *a, const float *b, size_t n)
{
	double m = 0, scale = 0;
	for (size_t i = 0; i < n; i++)
		scale = fmax(scale, fabs(b[i]));
	for (size_t i = 0; i < n; i++)
		m = fmax(m, fabs((double)a[i] - b[i]));
	return m / fmax(scale, 1e-30);
}

int main(void)
{
	dp_err e;
	const dp_backend *be = &dp_backend_cpu;
	dp_bectx *im, *wi, *w2;
	dp_backend_opts oi = {.threads = 1, .device = -1, .conv_algo = 1, .precision = DP_PREC_FP32},
			ow = {.threads = 1, .device = -1, .conv_algo = 2, .precision = DP_PREC_FP32},
			o2 = {.threads = 2, .device = -1, .conv_algo = 2, .precision = DP_PREC_FP32};
	be->open(&im, &oi, NULL, 0, &e);
	be->open(&wi, &ow, NULL, 0, &e);
	be->open(&w2, &o2, NULL, 0, &e); /* the transforms shared by 2 threads */
	/* n, c, h, w, k, pad */
	int shapes[][6] = {{3, 8, 7, 9, 10, 0}, {2, 8, 6, 6, 8, 1}, {2, 9, 8, 5, 12, 2},
			   {4, 16, 12, 12, 8, 1}, {1, 8, 6, 6, 8, 0}, {5, 12, 11, 10, 9, 1},
			   /* 16 channels and more: whole vectors of channels, planes
			    * not a multiple of 16 pixels, a partial last vector */
			   {2, 20, 7, 9, 33, 1}, {3, 32, 14, 14, 16, 1}};
	for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
		int *S = shapes[si];
		dp_conv2d g = {S[0], S[1], S[2], S[3], S[4], 0, 0, 3, 3, 1, 1, S[5], S[5]};
		g.oh = g.h + 2 * g.ph - 2;
		g.ow = g.w + 2 * g.pw - 2;
		size_t xs = (size_t)g.n * g.c * g.h * g.w, ys = (size_t)g.n * g.k * g.oh * g.ow,
		       wsz = (size_t)g.k * g.c * 9;
		float *x = malloc(xs * 4), *w = malloc(wsz * 4), *b = malloc((size_t)g.k * 4);
		float *y1 = malloc(ys * 4), *y2 = malloc(ys * 4), *dy1 = malloc(ys * 4),
		      *dy2 = malloc(ys * 4);
		float *dx1 = malloc(xs * 4), *dx2 = malloc(xs * 4), *dw1 = malloc(wsz * 4),
		      *dw2 = malloc(wsz * 4), *db1 = malloc((size_t)g.k * 4), *db2 = malloc((size_t)g.k * 4);
		size_t wsi = be->conv_ws(im, &g), wsw = be->conv_ws(wi, &g);
		void *ws1 = malloc(wsi + 64), *ws2 = malloc(wsw + 64);
		fill(x, xs, si);
		fill(w, wsz, si + 100);
		fill(b, (size_t)g.k, si + 200);
		ok(wsw > wsi, "%d: Winograd applies (its workspace is larger)", (int)si);
		for (int act = DP_ACT_NONE; act <= DP_ACT_TANH; act += 2) {
			be->conv_fwd(im, &g, x, w, b, y1, act, ws1);
			be->conv_fwd(wi, &g, x, w, b, y2, act, ws2);
			double r = maxrel(y2, y1, ys);
			ok(r < 1e-5, "shape %d (%dx%dx%d -> %d, pad %d), act %d: forward agrees (%.2g)",
			   (int)si, g.c, g.h, g.w, g.k, g.ph, act, r);
			fill(dy1, ys, si + 300);
			memcpy(dy2, dy1, ys * 4);
			be->conv_bwd(im, &g, x, w, y1, dy1, dx1, dw1, db1, act, ws1);
			be->conv_bwd(wi, &g, x, w, y2, dy2, dx2, dw2, db2, act, ws2);
			r = maxrel(dx2, dx1, xs);
			ok(r < 1e-5, "shape %d, act %d: input gradient agrees (%.2g)", (int)si, act, r);
			ok(maxrel(dw2, dw1, wsz) < 1e-5 && maxrel(db2, db1, (size_t)g.k) < 1e-5,
			   "shape %d, act %d: filter and bias gradients agree", (int)si, act);
		}
		/* two threads: the same Winograd results (the transforms' parts are
		 * computed alike whichever thread takes them; OpenBLAS's GEMMs on
		 * 2 threads may round differently) */
		{
			size_t ws3 = be->conv_ws(w2, &g);
			void *ws = malloc(ws3 + 64);
			float *y3 = malloc(ys * 4), *dy3 = malloc(ys * 4), *dx3 = malloc(xs * 4),
			      *dw3 = malloc(wsz * 4), *db3 = malloc((size_t)g.k * 4);
			be->conv_fwd(wi, &g, x, w, b, y2, DP_ACT_RELU, ws2);
			be->conv_fwd(w2, &g, x, w, b, y3, DP_ACT_RELU, ws);
			fill(dy2, ys, si + 500);
			memcpy(dy3, dy2, ys * 4);
			be->conv_bwd(wi, &g, x, w, y2, dy2, dx2, dw2, db2, DP_ACT_RELU, ws2);
			be->conv_bwd(w2, &g, x, w, y3, dy3, dx3, dw3, db3, DP_ACT_RELU, ws);
			double rf = maxrel(y3, y2, ys), rx = maxrel(dx3, dx2, xs), rw = maxrel(dw3, dw2, wsz);
			ok(ws3 > wsw && rf < 1e-6 && rx < 1e-6 && rw < 1e-6,
			   "shape %d: 2 threads give the same forward, input and filter gradients "
			   "(%.2g %.2g %.2g)", (int)si, rf, rx, rw);
			free(ws), free(y3), free(dy3), free(dx3), free(dw3), free(db3);
		}
		/* both against the definition, in double */
		be->conv_fwd(wi, &g, x, w, b, y2, DP_ACT_NONE, ws2);
		double worst = 0, scale = 0;
		for (int s = 0; s < g.n; s++)
			for (int k = 0; k < g.k; k++)
				for (int oy = 0; oy < g.oh; oy++)
					for (int ox = 0; ox < g.ow; ox++) {
						double acc = b[k];
						for (int c = 0; c < g.c; c++)
							for (int i = 0; i < 3; i++)
								for (int j = 0; j < 3; j++) {
									int iy = oy + i - g.ph, ix = ox + j - g.pw;
									if (iy < 0 || ix < 0 || iy >= g.h || ix >= g.w)
										continue;
									acc += (double)w[((k * g.c + c) * 3 + i) * 3 + j] *
									       x[((s * g.c + c) * g.h + iy) * g.w + ix];
								}
						float got = y2[((s * g.k + k) * g.oh + oy) * g.ow + ox];
						worst = fmax(worst, fabs(got - acc));
						scale = fmax(scale, fabs(acc));
					}
		ok(worst / scale < 1e-5, "shape %d: Winograd forward equals the definition (%.2g)",
		   (int)si, worst / scale);
		/* the filter gradient: dw[k][c][i][j] = sum dy[s][k][oy][ox] x[s][c][oy+i-ph][ox+j-pw] */
		fill(dy2, ys, si + 400);
		be->conv_bwd(wi, &g, x, w, y2, dy2, dx2, dw2, db2, DP_ACT_NONE, ws2);
		worst = scale = 0;
		for (int k = 0; k < g.k; k++)
			for (int c = 0; c < g.c; c++)
				for (int i = 0; i < 3; i++)
					for (int j = 0; j < 3; j++) {
						double acc = 0;
						for (int s = 0; s < g.n; s++)
							for (int oy = 0; oy < g.oh; oy++)
								for (int ox = 0; ox < g.ow; ox++) {
									int iy = oy + i - g.ph, ix = ox + j - g.pw;
									if (iy < 0 || ix < 0 || iy >= g.h || ix >= g.w)
										continue;
									acc += (double)dy2[((s * g.k + k) * g.oh + oy) * g.ow + ox] *
									       x[((s * g.c + c) * g.h + iy) * g.w + ix];
								}
						worst = fmax(worst, fabs(dw2[((k * g.c + c) * 3 + i) * 3 + j] - acc));
						scale = fmax(scale, fabs(acc));
					}
		ok(worst / scale < 1e-5, "shape %d: Winograd filter gradient equals the definition (%.2g)",
		   (int)si, worst / scale);
		free(x), free(w), free(b), free(y1), free(y2), free(dy1), free(dy2), free(dx1);
		free(dx2), free(dw1), free(dw2), free(db1), free(db2), free(ws1), free(ws2);
	}
	be->close(im);
	be->close(wi);
	be->close(w2);
	return done_testing();
}
