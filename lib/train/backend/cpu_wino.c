/*
 * cpu_wino.c - the CPU backend's 3x3 stride-1 convolutions by Winograd
 * F(2x2, 3x3) (cpu_impl.h): forward, input gradient, filter gradient.
 */
#define _GNU_SOURCE
#include "cpu_impl.h"

#include <cblas.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- Winograd F(2x2, 3x3) ------------------------------------------------
 * A 3x3 convolution with stride 1 computes each 2x2 block of outputs from a
 * 4x4 block of inputs with 16 multiplications per channel pair instead of
 * 36 (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks",
 * 2016):  Y = A^T [ sum_c (G g G^T) .* (B^T d B) ] A.  The products become
 * 16 GEMMs, one per position of the 4x4 block, over all the tiles of a
 * group of samples: M[xi] (tiles, cout) = V[xi] (tiles, cin) U[xi]^T.  Used
 * for the forward pass, for the input gradient (a convolution of dy with
 * the filters flipped and transposed) and for the filter gradient (the
 * transpose of the forward map, below) of 3x3 stride-1 layers that are
 * wide enough for the GEMMs to pay.
 * The transforms take 16 channels at a time as the lanes of a vector: the
 * planes are first transposed to pixel-major (16x16 blocks in registers),
 * so that a tile's arithmetic is whole vectors however small the plane
 * (ResNet's 7x7 planes made loops over a plane's rows 4 tiles long), and
 * V, M and Q keep the channels innermost.
 * The rounding differs from the direct sum by a few ulps (the transforms'
 * coefficients are 1/2 and +-1). */

typedef struct wino {
	int n, cin, h, w;    /* input (n, cin, h, w) */
	int cout, oh, ow;    /* output (n, cout, oh, ow) */
	int ph, pw;          /* zero padding before the input */
	int th, tw;          /* tiles of 2x2 outputs */
	int hp, wp;          /* padded input plane: (2 th + 2) x (2 tw + 2) */
	int group;           /* samples per round of GEMMs */
	int workers;         /* threads running the transforms (planes each) */
} wino;

static int wino_fits(const dp_conv2d *g)
{
	return g->kh == 3 && g->kw == 3 && g->sh == 1 && g->sw == 1 && g->c >= 8 && g->k >= 8 &&
	       g->oh * g->ow >= 16 && g->ph <= 2 && g->pw <= 2 && g->oh >= 2 && g->ow >= 2;
}

static wino wino_plan(int n, int cin, int h, int w, int cout, int oh, int ow, int ph, int pw,
		       int workers)
{
	wino p = {n, cin, h, w, cout, oh, ow, ph, pw, 0, 0, 0, 0, 0, workers};
	p.th = (oh + 1) / 2;
	p.tw = (ow + 1) / 2;
	p.hp = 2 * p.th + 2;
	p.wp = 2 * p.tw + 2;
	int tiles = p.th * p.tw;
	p.group = tiles >= 512 ? 1 : 512 / tiles;
	if (p.group > n)
		p.group = n;
	return p;
}

static size_t wino_ws(const wino *p)
{
	size_t t = (size_t)p->group * p->th * p->tw;
	return (16 * (size_t)p->cout * p->cin       /* U */
		+ 16 * (size_t)p->cin * t           /* V */
		+ 16 * (size_t)p->cout * t          /* M */
		+ 16 * (size_t)p->hp * p->wp * p->workers + 16) /* 16 padded planes, pixel-major */
	       * sizeof(float) + 64 * 8;
}

/* The workspace's parts: U (16, cout, cin), V (16, t, cin), M (16, t,
 * cout), each worker's gathered planes (64-byte aligned). */
typedef float v16 __attribute__((vector_size(64)));
typedef int v16i __attribute__((vector_size(64)));
typedef struct wino_bufs {
	float *u, *v, *m;
	v16 *planes;
} wino_bufs;

static wino_bufs wino_split(const wino *p, float *ws)
{
	size_t tmax = (size_t)p->group * p->th * p->tw;
	wino_bufs b;
	b.u = ws;
	b.v = b.u + 16 * (size_t)p->cout * p->cin;
	b.m = b.v + 16 * (size_t)p->cin * tmax;
	b.planes = (v16 *)(((uintptr_t)(b.m + 16 * (size_t)p->cout * tmax) + 63) & ~(uintptr_t)63);
	return b;
}

/* Lanes 0 .. L-1 of a vector to or from memory (pointers: a vector
 * argument's ABI would differ between the clones of a HOT caller). */
#define store_lanes(dst, val, L)                                        \
	do {                                                            \
		v16 sl_ = (val);                                        \
		if ((L) == 16)                                          \
			memcpy((dst), &sl_, sizeof sl_);                \
		else                                                    \
			memcpy((dst), &sl_, (size_t)(L) * sizeof(float)); \
	} while (0)

static inline void load_lanes(v16 *val, const float *src, int L)
{
	if (L == 16) {
		memcpy(val, src, sizeof *val);
		return;
	}
	memset(val, 0, sizeof *val);
	memcpy(val, src, (size_t)L * sizeof(float));
}

/* U[xi][o][i] = (G g G^T)[xi] for the 3x3 filter g of output o, input i:
 * w[o][i] (flip 0: forward), or w[i][o] turned by 180 degrees (flip 1:
 * the input gradient, where o runs over the layer's input channels).
 * Sixteen inputs i at a time are the vector lanes. */
HOT static void wino_filters(const float *w, int cout, int cin, int flip, float *u)
{
	size_t plane = (size_t)cout * cin;
	for (int o = 0; o < cout; o++)
		for (int i0 = 0; i0 < cin; i0 += 16) {
			int L = cin - i0 < 16 ? cin - i0 : 16;
			v16 g[9] = {{0}};
			for (int l = 0; l < L; l++) {
				int i = i0 + l;
				const float *src = flip ? w + ((size_t)i * cout + o) * 9
							: w + ((size_t)o * cin + i) * 9;
				for (int k = 0; k < 9; k++)
					g[k][l] = flip ? src[8 - k] : src[k];
			}
			v16 t[4][3];
			for (int j = 0; j < 3; j++) {
				t[0][j] = g[j];
				t[1][j] = 0.5f * (g[j] + g[3 + j] + g[6 + j]);
				t[2][j] = 0.5f * (g[j] - g[3 + j] + g[6 + j]);
				t[3][j] = g[6 + j];
			}
			float *dst = u + (size_t)o * cin + i0;
			for (int r = 0; r < 4; r++) {
				store_lanes(dst + (size_t)(r * 4) * plane, t[r][0], L);
				store_lanes(dst + (size_t)(r * 4 + 1) * plane,
					    0.5f * (t[r][0] + t[r][1] + t[r][2]), L);
				store_lanes(dst + (size_t)(r * 4 + 2) * plane,
					    0.5f * (t[r][0] - t[r][1] + t[r][2]), L);
				store_lanes(dst + (size_t)(r * 4 + 3) * plane, t[r][2], L);
			}
		}
}

/* r[i] (16 lanes) becomes column i of the 16x16 matrix whose rows were
 * r: the off-diagonal blocks of 8, then 4, 2 and 1 swapped (two-vector
 * shuffles, 64 in all: vpermt2ps with AVX-512). */
#ifdef __clang__
#define SHUFFLE16(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define SHUFFLE16(a, b, ...) __builtin_shuffle(a, b, (v16i){__VA_ARGS__})
#endif
/* One round: rows i and i + b (i without bit b) swap their lanes with bit
 * b clear in one and set in the other; LO and HI are the two shuffles'
 * lane lists, in parentheses. */
#define T16_LANES(...) __VA_ARGS__
#define T16_ROUND(b, LO, HI)                                            \
	for (int i = 0; i < 16; i++)                                    \
		if (!(i & (b))) {                                       \
			v16 a = r[i], c = r[i + (b)];                   \
			r[i] = SHUFFLE16(a, c, T16_LANES LO);           \
			r[i + (b)] = SHUFFLE16(a, c, T16_LANES HI);     \
		}

static inline void transpose16(v16 *r)
{
	T16_ROUND(8, (0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23),
		  (8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31))
	T16_ROUND(4, (0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27),
		  (4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31))
	T16_ROUND(2, (0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29),
		  (2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31))
	T16_ROUND(1, (0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30),
		  (1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31))
}

/* The planes (h, w) of L <= 16 channels (x: the first, hw floats apart),
 * pixel-major in a grid (hp, wp) with the planes at (ph, pw): lane l of
 * planes[iy wp + ix] is channel l at (iy - ph, ix - pw), zero outside the
 * plane (and in lanes from L on).  Sixteen pixels at a time (in the
 * flattened plane, across rows) go through one transpose. */
HOT static void gather_planes(const float *x, int h, int w, int ph, int pw, int hp, int wp, int L,
			      v16 *planes)
{
	size_t hw = (size_t)h * w, p = 0;
	v16 zero = {0};
	if (L < 16)
		for (size_t i = 0; i < (size_t)hp * wp; i++)
			planes[i] = zero;
	for (int iy = 0; iy < hp; iy++) {
		int sy = iy - ph;
		v16 *row = planes + (size_t)iy * wp;
		for (int ix = 0; ix < wp; ix++)
			if (sy < 0 || sy >= h || ix < pw || ix >= pw + w)
				row[ix] = zero;
	}
	if (L == 16)
		for (; p + 16 <= hw; p += 16) {
			v16 r[16];
			for (int l = 0; l < 16; l++)
				memcpy(&r[l], x + (size_t)l * hw + p, sizeof r[l]);
			transpose16(r);
			for (int i = 0; i < 16; i++) {
				size_t q = p + i, sy = q / w, sx = q % w;
				planes[(sy + ph) * wp + sx + pw] = r[i];
			}
		}
	for (; p < hw; p++) {
		size_t sy = p / w, sx = p % w;
		float *dst = (float *)&planes[(sy + ph) * wp + sx + pw];
		for (int l = 0; l < L; l++)
			dst[l] = x[(size_t)l * hw + p];
	}
}

/* The inverse for outputs: lane l of planes (a grid of width wp) into
 * channel l's plane (h, w) of y, hw floats apart, for l < L. */
HOT static void scatter_planes(const v16 *planes, int wp, int h, int w, int L, float *y)
{
	size_t hw = (size_t)h * w, p = 0;
	if (L == 16)
		for (; p + 16 <= hw; p += 16) {
			v16 r[16];
			for (int i = 0; i < 16; i++) {
				size_t q = p + i;
				r[i] = planes[q / w * wp + q % w];
			}
			transpose16(r);
			for (int l = 0; l < 16; l++)
				memcpy(y + (size_t)l * hw + p, &r[l], sizeof r[l]);
		}
	for (; p < hw; p++) {
		const float *src = (const float *)&planes[p / w * wp + p % w];
		for (int l = 0; l < L; l++)
			y[(size_t)l * hw + p] = src[l];
	}
}

/* V[xi][t0 + ty tw + tx][l] = (B^T d B)[xi] for every tile of the L
 * gathered planes; v points at V[0][0][c0], rows (tiles) ldv floats apart
 * and each xi's matrix xs floats after the last.  Channels are the vector
 * lanes, so every operation is a whole vector whatever the plane's size. */
HOT static void wino_input(const wino *p, const v16 *planes, int L, float *v, size_t ldv,
			   size_t xs, size_t t0)
{
	int wp = p->wp;
	for (int ty = 0; ty < p->th; ty++)
		for (int tx = 0; tx < p->tw; tx++) {
			const v16 *b0 = planes + (size_t)(2 * ty) * wp + 2 * tx;
			const v16 *b1 = b0 + wp, *b2 = b1 + wp, *b3 = b2 + wp;
			v16 e[4][4];
			for (int c = 0; c < 4; c++) { /* B^T d: rows */
				e[0][c] = b0[c] - b2[c];
				e[1][c] = b1[c] + b2[c];
				e[2][c] = b2[c] - b1[c];
				e[3][c] = b1[c] - b3[c];
			}
			float *dst = v + (t0 + (size_t)ty * p->tw + tx) * ldv;
			for (int i = 0; i < 4; i++) { /* ... B: columns */
				store_lanes(dst + (size_t)(4 * i) * xs, e[i][0] - e[i][2], L);
				store_lanes(dst + (size_t)(4 * i + 1) * xs, e[i][1] + e[i][2], L);
				store_lanes(dst + (size_t)(4 * i + 2) * xs, e[i][2] - e[i][1], L);
				store_lanes(dst + (size_t)(4 * i + 3) * xs, e[i][1] - e[i][3], L);
			}
		}
}

/* Output channels o0 .. o0+L-1 of sample g of a round: y = A^T m A + b,
 * then act, from M (16, t, cout), into the planes (oh, ow) at y (channel
 * o0's).  Channels are the vector lanes: each tile's 2x2 block goes into a
 * pixel-major grid (2 th, 2 tw), scattered to the planes at the end. */
HOT static void wino_output(const wino *p, const float *m, size_t t, size_t g, int o0, int L,
			    const float *b, int act, float *y, v16 *grid)
{
	size_t tiles = (size_t)p->th * p->tw, xs = t * p->cout;
	int gw = 2 * p->tw, relu = act == DP_ACT_RELU;
	v16 bias = {0}, zero = {0};
	if (b)
		load_lanes(&bias, b + o0, L);
	for (int ty = 0; ty < p->th; ty++)
		for (int tx = 0; tx < p->tw; tx++) {
			const float *src = m + (g * tiles + (size_t)ty * p->tw + tx) * p->cout + o0;
			v16 s0[4], s1[4];
			for (int j = 0; j < 4; j++) { /* A^T m: rows */
				v16 m0, m1, m2, m3;
				load_lanes(&m0, src + (size_t)j * xs, L);
				load_lanes(&m1, src + (size_t)(4 + j) * xs, L);
				load_lanes(&m2, src + (size_t)(8 + j) * xs, L);
				load_lanes(&m3, src + (size_t)(12 + j) * xs, L);
				s0[j] = m0 + m1 + m2;
				s1[j] = m1 - m2 - m3;
			}
			v16 *o = grid + (size_t)(2 * ty) * gw + 2 * tx;
			o[0] = s0[0] + s0[1] + s0[2] + bias; /* ... A: columns */
			o[1] = s0[1] - s0[2] - s0[3] + bias;
			o[gw] = s1[0] + s1[1] + s1[2] + bias;
			o[gw + 1] = s1[1] - s1[2] - s1[3] + bias;
			if (relu) /* v > 0 ? v : 0, as bias_act (a NaN becomes 0) */
				for (int k = 0; k < 4; k++) {
					v16 *q = o + (k >> 1) * gw + (k & 1);
					*q = (v16)((v16i)*q & (*q > zero));
				}
		}
	scatter_planes(grid, gw, p->oh, p->ow, L, y);
	if (act && !relu)
		for (int l = 0; l < L; l++)
			cpu_bias_act(y + (size_t)l * p->oh * p->ow, (size_t)p->oh * p->ow, 0.0f, act);
}

/* One round of a Winograd pass, cut into parts for cpu_par_run: a part is a
 * sample of the round and a block of 16 channels. */
typedef struct wino_job {
	const wino *p;
	wino_bufs w;
	size_t t;          /* the round's columns */
	int gn;            /* its samples */
	int nbi, nbo;      /* blocks of 16 input, output channels */
	const float *x;    /* the round's first sample */
	const float *dy;   /* its output gradient (the filter gradient) */
	const float *b;    /* bias, or NULL */
	int act;
	float *y;          /* the round's first output */
} wino_job;

static v16 *job_planes(const wino_job *j, int worker)
{
	return j->w.planes + (size_t)worker * j->p->hp * j->p->wp;
}

/* Part i of nb blocks of 16 channels a sample: its sample *g, its first
 * channel *c0, and its channels (16, or what is left of n). */
static int job_block(int i, int nb, int n, size_t *g, int *c0)
{
	*g = (size_t)(i / nb);
	*c0 = i % nb * 16;
	return n - *c0 < 16 ? n - *c0 : 16;
}

/* Part i < gn nbi: V for sample i / nbi, input channels 16 (i % nbi) on. */
static void wino_input_part(void *a, int i, int worker)
{
	const wino_job *j = a;
	const wino *p = j->p;
	size_t hw = (size_t)p->h * p->w, g;
	int c0, L = job_block(i, j->nbi, p->cin, &g, &c0);
	v16 *planes = job_planes(j, worker);
	gather_planes(j->x + g * p->cin * hw + (size_t)c0 * hw, p->h, p->w, p->ph, p->pw, p->hp, p->wp,
		      L, planes);
	wino_input(p, planes, L, j->w.v + c0, (size_t)p->cin, j->t * p->cin,
		   g * (size_t)p->th * p->tw);
}

/* Part i < gn nbo: the output of sample i / nbo, channels 16 (i % nbo) on. */
static void wino_output_part(void *a, int i, int worker)
{
	const wino_job *j = a;
	const wino *p = j->p;
	size_t ohw = (size_t)p->oh * p->ow, g;
	int o0, L = job_block(i, j->nbo, p->cout, &g, &o0);
	wino_output(p, j->w.m, j->t, g, o0, L, j->b, j->act,
		    j->y + g * p->cout * ohw + (size_t)o0 * ohw, job_planes(j, worker));
}

/* The 16 GEMMs of a round, one a part: forward (and input gradient)
 * M[xi] (t, cout) = V[xi] (t, cin) U[xi]^T, or filter gradient dU[xi]
 * (cout, cin) (+)= Q[xi]^T (cout, t) V[xi] (t, cin), Q in M's place. */
typedef struct wino_gemms {
	const wino *p;
	wino_bufs w;
	size_t t;
	const float *u;
	int dw;
	float beta;
} wino_gemms;

static void wino_gemm_part(void *a, int xi, int worker)
{
	const wino_gemms *j = a;
	const wino *p = j->p;
	(void)worker;
	if (j->dw)
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, p->cout, p->cin, (int)j->t, 1.0f,
			    j->w.m + (size_t)xi * j->t * p->cout, p->cout,
			    j->w.v + (size_t)xi * j->t * p->cin, p->cin, j->beta,
			    j->w.u + (size_t)xi * p->cout * p->cin, p->cin);
	else
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)j->t, p->cout, p->cin, 1.0f,
			    j->w.v + (size_t)xi * j->t * p->cin, p->cin,
			    j->u + (size_t)xi * p->cout * p->cin, p->cin, 0.0f,
			    j->w.m + (size_t)xi * j->t * p->cout, p->cout);
}

/* The job of the round of samples from s0 on: x and dy or y (the other
 * NULL) at its first sample. */
static wino_job wino_round(const wino *p, wino_bufs w, int s0, const float *x, const float *dy,
			   float *y)
{
	size_t xs = (size_t)p->cin * p->h * p->w, ys = (size_t)p->cout * p->oh * p->ow;
	wino_job j = {.p = p, .w = w, .nbi = (p->cin + 15) / 16, .nbo = (p->cout + 15) / 16};
	j.gn = p->n - s0 < p->group ? p->n - s0 : p->group;
	j.t = (size_t)j.gn * p->th * p->tw;
	j.x = x + (size_t)s0 * xs;
	j.dy = dy ? dy + (size_t)s0 * ys : NULL;
	j.y = y ? y + (size_t)s0 * ys : NULL;
	return j;
}

/* y = conv(x, filters u already transformed) + b, act: all samples.
 * V (16, t, cin) and M (16, t, cout): channels are the transforms' vector
 * lanes; each GEMM is M[xi] (t, cout) = V[xi] (t, cin) U[xi]^T. */
static void wino_conv(dp_bectx *ctx, const wino *p, const float *x, const float *u,
		      const float *b, int act, float *y, float *ws)
{
	wino_bufs w = wino_split(p, ws);
	for (int s0 = 0; s0 < p->n; s0 += p->group) {
		wino_job j = wino_round(p, w, s0, x, NULL, y);
		j.b = b;
		j.act = act;
		cpu_par_run(ctx, j.gn * j.nbi, wino_input_part, &j);
		wino_gemms gj = {p, j.w, j.t, u, 0, 0.0f};
		cpu_par_run(ctx, 16, wino_gemm_part, &gj);
		cpu_par_run(ctx, j.gn * j.nbo, wino_output_part, &j);
	}
}

/* The filter gradient (Winograd's transpose): a 2x2 block of outputs Y =
 * A^T (U .* V) A gives dU = V .* (A dY A^T), summed over every tile of
 * every sample, and dw = G^T dU G.  So 16 GEMMs as deep as the batch's
 * tiles: dU[xi] (cout, cin) += Q[xi] (cout, t) V[xi]^T (t, cin), with
 * Q = A dY A^T per tile (outputs past the plane count as zero).  The
 * forward plan's workspace holds it: dU in U's place, Q in M's. */

/* Q[xi][t0 + ty tw + tx][l] = (A dY A^T)[xi] for the 2x2 blocks of the L
 * gathered planes of dy (a grid (2 th, 2 tw), zero past the planes); q
 * points at Q[0][0][o0], rows ldq floats apart, each xi's matrix xs after
 * the last. */
HOT static void wino_dy(const wino *p, const v16 *grid, int L, float *q, size_t ldq, size_t xs,
			size_t t0)
{
	int gw = 2 * p->tw;
	for (int ty = 0; ty < p->th; ty++)
		for (int tx = 0; tx < p->tw; tx++) {
			const v16 *r0 = grid + (size_t)(2 * ty) * gw + 2 * tx, *r1 = r0 + gw;
			v16 a = r0[0], b = r0[1], c = r1[0], d = r1[1];
			/* rows of A dY: (a, b), (a + c, b + d), (a - c, b - d), (-c, -d);
			 * each row (u, v) then gives the columns (u, u + v, u - v, -v) */
			v16 u[4] = {a, a + c, a - c, -c}, v[4] = {b, b + d, b - d, -d};
			float *dst = q + (t0 + (size_t)ty * p->tw + tx) * ldq;
			for (int r = 0; r < 4; r++) {
				store_lanes(dst + (size_t)(4 * r) * xs, u[r], L);
				store_lanes(dst + (size_t)(4 * r + 1) * xs, u[r] + v[r], L);
				store_lanes(dst + (size_t)(4 * r + 2) * xs, u[r] - v[r], L);
				store_lanes(dst + (size_t)(4 * r + 3) * xs, -v[r], L);
			}
		}
}

/* dw (cout, cin, 3, 3) = G^T dU G for every filter; du (16, cout, cin). */
HOT static void wino_filters_grad(const float *du, int cout, int cin, float *dw)
{
	size_t plane = (size_t)cout * cin;
	for (size_t f = 0; f < plane; f++) {
		float d[4][4], r[3][4];
		for (int xi = 0; xi < 16; xi++)
			d[xi / 4][xi % 4] = du[(size_t)xi * plane + f];
		for (int c = 0; c < 4; c++) {
			r[0][c] = d[0][c] + 0.5f * (d[1][c] + d[2][c]);
			r[1][c] = 0.5f * (d[1][c] - d[2][c]);
			r[2][c] = 0.5f * (d[1][c] + d[2][c]) + d[3][c];
		}
		float *o = dw + f * 9;
		for (int k = 0; k < 3; k++) {
			o[3 * k] = r[k][0] + 0.5f * (r[k][1] + r[k][2]);
			o[3 * k + 1] = 0.5f * (r[k][1] - r[k][2]);
			o[3 * k + 2] = 0.5f * (r[k][1] + r[k][2]) + r[k][3];
		}
	}
}

/* Parts below gn nbi: V, as wino_input_part; then Q for sample k / nbo,
 * output channels 16 (k % nbo) on (k: the part's index past those). */
static void wino_dw_part(void *a, int i, int worker)
{
	const wino_job *j = a;
	const wino *p = j->p;
	if (i < j->gn * j->nbi) {
		wino_input_part(a, i, worker);
		return;
	}
	size_t ohw = (size_t)p->oh * p->ow, g;
	int o0, L = job_block(i - j->gn * j->nbi, j->nbo, p->cout, &g, &o0);
	v16 *planes = job_planes(j, worker);
	gather_planes(j->dy + g * p->cout * ohw + (size_t)o0 * ohw, p->oh, p->ow, 0, 0, 2 * p->th,
		      2 * p->tw, L, planes);
	wino_dy(p, planes, L, j->w.m + o0, (size_t)p->cout, j->t * p->cout,
		g * (size_t)p->th * p->tw);
}

/* dw = the filter gradient of y = conv(x, w) for dy, all samples: dU in
 * U's place, Q (16, t, cout) in M's. */
static void wino_conv_dw(dp_bectx *ctx, const wino *p, const float *x, const float *dy, float *dw,
			 float *ws)
{
	wino_bufs w = wino_split(p, ws);
	for (int s0 = 0; s0 < p->n; s0 += p->group) {
		wino_job j = wino_round(p, w, s0, x, dy, NULL);
		cpu_par_run(ctx, j.gn * (j.nbi + j.nbo), wino_dw_part, &j);
		/* dU[xi] (cout, cin) += Q[xi]^T (cout, t) V[xi] (t, cin) */
		wino_gemms gj = {p, w, j.t, NULL, 1, s0 ? 1.0f : 0.0f};
		cpu_par_run(ctx, 16, wino_gemm_part, &gj);
	}
	wino_filters_grad(w.u, p->cout, p->cin, dw);
}

static wino wino_fwd_plan(const dp_bectx *ctx, const dp_conv2d *g)
{
	return wino_plan(g->n, g->c, g->h, g->w, g->k, g->oh, g->ow, g->ph, g->pw,
			 ctx->threads);
}

/* The input gradient: dy (n, k, oh, ow) convolved with the flipped,
 * transposed filters and padding 2 - p gives dx (n, c, h, w). */
static wino wino_bwd_plan(const dp_bectx *ctx, const dp_conv2d *g)
{
	return wino_plan(g->n, g->k, g->oh, g->ow, g->c, g->h, g->w, 2 - g->ph, 2 - g->pw,
			 ctx->threads);
}

/* Whether a layer takes it: cpu_plan.c decides where it runs.  Measured
 * before that choice was made per shape (resnet20, 1x28x28, batch 128,
 * one thread on this project's AMD EPYC with AVX-512, OpenBLAS's
 * Cooperlake kernels, CPU time, alternated): the forward pass 7.86-7.94 s
 * against 8.07-8.28 s for 16 steps; the input gradient of padded layers
 * 7.47-7.51 against 7.86-8.29; without padding the input gradient's
 * transform covers an output larger than the layer's and im2col stayed
 * faster (the seed CNN's step: 2.23-2.31 s against 2.29-2.48); the filter
 * gradient 10.96 -> 7.77 ms at 16x28x28, 8.78 -> 6.17 at 32x14x14, 8.00 ->
 * 8.16 at 64x7x7 (where the 2x2 tiles cover 8x8). */
int cpu_wino_fits(const dp_conv2d *g) { return wino_fits(g); }

size_t cpu_wino_ws(const dp_bectx *ctx, const dp_conv2d *g, int backward)
{
	wino p = backward ? wino_bwd_plan(ctx, g) : wino_fwd_plan(ctx, g);
	return wino_ws(&p);
}

void cpu_wino_fwd(dp_bectx *ctx, const dp_conv2d *g, const float *x, const float *w, const float *b,
		  float *y, int act, void *ws)
{
	wino p = wino_fwd_plan(ctx, g);
	wino_filters(w, g->k, g->c, 0, ws);
	wino_conv(ctx, &p, x, ws, b, act, y, ws);
}

void cpu_wino_dx(dp_bectx *ctx, const dp_conv2d *g, const float *dy, const float *w, float *dx,
		 void *ws)
{
	wino p = wino_bwd_plan(ctx, g);
	wino_filters(w, g->c, g->k, 1, ws);
	wino_conv(ctx, &p, dy, ws, NULL, 0, dx, ws);
}

void cpu_wino_dw(dp_bectx *ctx, const dp_conv2d *g, const float *x, const float *dy, float *dw,
		 void *ws)
{
	wino p = wino_fwd_plan(ctx, g);
	wino_conv_dw(ctx, &p, x, dy, dw, ws);
}
