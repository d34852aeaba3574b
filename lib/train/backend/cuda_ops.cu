/*
 * cuda_ops.cu - the CUDA backend's layers other than the dense and
 * convolutional ones (lib/train/backend/cuda_impl.h): pooling, dropout,
 * batch normalisation, the losses and the optimizers, on NCHW float32
 * (channels-last tensors go to cuda_nhwc_layers.cu).  Each follows the
 * CPU reference (lib/train/backend/cpu.c) operation by operation: gathers
 * and fixed-shape tree reductions, never atomics, so that the same inputs
 * give the same bits run after run; elementwise code compiled without FMA
 * contraction (--fmad=false), as the CPU's is with -ffp-contract=off.
 */
#include "cuda_impl.h"
#include "math_impl.h"

/* ---- pooling ------------------------------------------------------------- */

__global__ void k_maxpool_fwd(dp_pool2d g, const float *x, float *y, int32_t *arg)
{
	size_t ohw = (size_t)g.oh * g.ow, total = (size_t)g.n * g.c * ohw;
	FOR_EACH(i, total) {
		size_t pl = i / ohw;
		int o = (int)(i % ohw), oy = o / g.ow, ox = o % g.ow;
		int best;
		float m = pool_max(g, oy, ox, x + pl * g.h * g.w, 1, &best);
		y[i] = m;
		arg[i] = best;
	}
}

/* dx = the sum of dy over the windows whose maximum was this input, in
 * raster order of the windows (the CPU's order of additions). */
__global__ void k_maxpool_bwd(dp_pool2d g, const float *dy, const int32_t *arg, float *dx)
{
	size_t hw = (size_t)g.h * g.w, ohw = (size_t)g.oh * g.ow, total = (size_t)g.n * g.c * hw;
	FOR_EACH(i, total) {
		size_t pl = i / hw;
		int r = (int)(i % hw), iy = r / g.w, ix = r % g.w;
		int ylo, yhi, xlo, xhi;
		pool_windows(iy + g.ph, g.kh, g.sh, g.oh, &ylo, &yhi);
		pool_windows(ix + g.pw, g.kw, g.sw, g.ow, &xlo, &xhi);
		float acc = 0.0f;
		for (int oy = ylo; oy <= yhi; oy++)
			for (int ox = xlo; ox <= xhi; ox++) {
				size_t o = pl * ohw + (size_t)oy * g.ow + ox;
				if (arg[o] == r)
					acc += dy[o];
			}
		dx[i] = acc;
	}
}

__global__ void k_avgpool_fwd(dp_pool2d g, const float *x, float *y)
{
	size_t ohw = (size_t)g.oh * g.ow, total = (size_t)g.n * g.c * ohw;
	float inv = 1.0f / (float)(g.kh * g.kw);
	FOR_EACH(i, total) {
		size_t pl = i / ohw;
		int o = (int)(i % ohw), oy = o / g.ow, ox = o % g.ow;
		const float *w0 = x + pl * g.h * g.w + (size_t)oy * g.sh * g.w + (size_t)ox * g.sw;
		float s = 0.0f;
		for (int a = 0; a < g.kh; a++)
			for (int b = 0; b < g.kw; b++)
				s += w0[a * g.w + b];
		y[i] = s * inv;
	}
}

__global__ void k_avgpool_bwd(dp_pool2d g, const float *dy, float *dx)
{
	size_t hw = (size_t)g.h * g.w, ohw = (size_t)g.oh * g.ow, total = (size_t)g.n * g.c * hw;
	FOR_EACH(i, total) {
		size_t pl = i / hw;
		int r = (int)(i % hw), iy = r / g.w, ix = r % g.w;
		dx[i] = avgpool_grad(g, iy, ix, dy + pl * ohw, 1);
	}
}

/* ---- dropout: the masks of dp_rng.h ------------------------------------- */

__global__ void k_dropout(dp_dropout d, size_t total, const float *in, float *out)
{
	uint64_t c0 = d.sample0 * d.per_sample;
	FOR_EACH(i, total) {
		uint32_t r = (uint32_t)(dp_rng_at(d.key, c0 + i) >> 32);
		out[i] = r >= d.threshold ? in[i] * d.scale : 0.0f;
	}
}

/* ---- batch normalisation: one block per channel -------------------------- */

__device__ __forceinline__ size_t bn_at(const dp_bnorm &g, int c, size_t i)
{
	size_t s = i / (size_t)g.hw, j = i % (size_t)g.hw;
	return (s * g.c + c) * g.hw + j;
}

/* Values per channel of the statistics: all ranks' (g.count) when sums
 * are given, else this batch's. */
__host__ __device__ __forceinline__ double bn_count(const dp_bnorm &g, const double *sums)
{
	return sums && g.count > 0 ? g.count : (double)g.n * g.hw;
}

__global__ void k_bnorm_sums(dp_bnorm g, const float *x, double *sums)
{
	int c = blockIdx.x;
	size_t m = (size_t)g.n * g.hw;
	double s = 0, s2 = 0;
	for (size_t i = threadIdx.x; i < m; i += THREADS) {
		double v = x[bn_at(g, c, i)];
		s += v;
		s2 += v * v;
	}
	s = block_sum(s);
	s2 = block_sum(s2);
	if (threadIdx.x == 0) {
		sums[c] = s;
		sums[g.c + c] = s2;
	}
}

__global__ void k_bnorm_fwd(dp_bnorm g, int train, const float *x, const float *gamma,
			    const float *beta, float *run_mean, float *run_var, const double *sums,
			    float *save, float *y)
{
	int c = blockIdx.x;
	size_t m = (size_t)g.n * g.hw;
	double cnt = bn_count(g, sums);
	float mean, inv;
	if (train) {
		double mu, var;
		if (sums) {
			mu = sums[c] / cnt;
			var = sums[g.c + c] / cnt - mu * mu;
			var = var > 0 ? var : 0;
		} else {
			double s = 0;
			for (size_t i = threadIdx.x; i < m; i += THREADS)
				s += x[bn_at(g, c, i)];
			mu = block_sum(s) / cnt;
			double s2 = 0;
			for (size_t i = threadIdx.x; i < m; i += THREADS) {
				double d = (double)x[bn_at(g, c, i)] - mu;
				s2 += d * d;
			}
			var = block_sum(s2) / cnt;
		}
		mean = (float)mu;
		inv = (float)(1.0 / sqrt(var + g.eps));
		if (threadIdx.x == 0)
			bn_running(g.momentum, mean, var, cnt, &run_mean[c], &run_var[c]);
	} else {
		mean = run_mean[c];
		inv = 1.0f / sqrtf(run_var[c] + g.eps);
	}
	if (save && threadIdx.x == 0) {
		save[c] = mean;
		save[g.c + c] = inv;
	}
	float a = gamma[c] * inv, bb = beta[c] - mean * a;
	for (size_t i = threadIdx.x; i < m; i += THREADS) {
		size_t at = bn_at(g, c, i);
		float v = x[at] * a + bb;
		y[at] = g.act == DP_ACT_RELU && !(v > 0.0f) ? 0.0f : v;
	}
}

/* dy at i, masked where a fused ReLU's output y (NULL: none) is not positive */
__device__ __forceinline__ float bn_dy(const float *y, const float *dy, size_t i)
{
	return y && !(y[i] > 0.0f) ? 0.0f : dy[i];
}

/* This batch's sum of dy and of dy * xhat over channel c (all threads),
 * dy masked by y (bn_dy). */
__device__ void bn_grad_sums(const dp_bnorm &g, int c, const float *x, const float *save,
			     const float *y, const float *dy, double *sdy, double *sdyx)
{
	size_t m = (size_t)g.n * g.hw;
	float mean = save[c], inv = save[g.c + c];
	double s = 0, sx = 0;
	for (size_t i = threadIdx.x; i < m; i += THREADS) {
		size_t at = bn_at(g, c, i);
		float d = bn_dy(y, dy, at);
		s += d;
		sx += (double)d * ((x[at] - mean) * inv);
	}
	*sdy = block_sum(s);
	*sdyx = block_sum(sx);
}

__global__ void k_bnorm_bwd_sums(dp_bnorm g, const float *x, const float *save, const float *y,
				 const float *dy, double *sums)
{
	int c = blockIdx.x;
	double sdy, sdyx;
	bn_grad_sums(g, c, x, save, y, dy, &sdy, &sdyx);
	if (threadIdx.x == 0) {
		sums[c] = sdy;
		sums[g.c + c] = sdyx;
	}
}

__global__ void k_bnorm_bwd(dp_bnorm g, const float *x, const float *gamma, const float *save,
			    const double *sums, const float *y, const float *dy, float *dx,
			    float *dgamma, float *dbeta)
{
	int c = blockIdx.x;
	size_t m = (size_t)g.n * g.hw;
	float mean = save[c], inv = save[g.c + c];
	double sdy, sdyx;
	bn_grad_sums(g, c, x, save, y, dy, &sdy, &sdyx);
	if (threadIdx.x == 0) {
		dgamma[c] = (float)sdyx;
		dbeta[c] = (float)sdy;
	}
	if (!dx)
		return;
	float k = gamma[c] * inv;
	if (g.eval) { /* dx = gamma inv dy: no path through the statistics */
		for (size_t i = threadIdx.x; i < m; i += THREADS) {
			size_t at = bn_at(g, c, i);
			dx[at] = bn_dy(y, dy, at) * k + 0.0f;
		}
		return;
	}
	/* dx = gamma inv (dy - mean(dy) - xhat mean(dy xhat)), the means over
	 * this batch or (sums) over all ranks */
	double cnt = bn_count(g, sums);
	float mdy = (float)((sums ? sums[c] : sdy) / cnt),
	      mdyx = (float)((sums ? sums[g.c + c] : sdyx) / cnt);
	for (size_t i = threadIdx.x; i < m; i += THREADS) {
		size_t at = bn_at(g, c, i);
		dx[at] = k * (bn_dy(y, dy, at) - mdy - (x[at] - mean) * inv * mdyx);
	}
}

/* ---- losses: a thread per sample, then a fixed-order sum ----------------- */

__global__ void k_xent(int n, int k, const float *logits, const int32_t *labels, float smooth, float scale,
		       float *dlogits, double *rows)
{
	FOR_EACH(i, (size_t)n) {
		rows[i] = 0;
		rows[n + i] = xent_row(k, logits + i * k, labels[i], smooth, scale,
				       dlogits ? dlogits + i * k : NULL, &rows[i]);
	}
}

__global__ void k_mse(int n, int k, const float *pred, const float *target, float f,
		      float *dpred, double *rows)
{
	FOR_EACH(i, (size_t)n) {
		rows[i] = mse_row(k, pred + i * k, target + i * k, f, dpred ? dpred + i * k : NULL);
		rows[n + i] = 0;
	}
}

/* stats[0] = sum of rows[0..n), stats[1] = sum of rows[n..2n): one block. */
__global__ void k_sum_rows(int n, const double *rows, double *stats)
{
	double a = 0, b = 0;
	for (int i = threadIdx.x; i < n; i += THREADS) {
		a += rows[i];
		b += rows[n + i];
	}
	a = block_sum(a);
	b = block_sum(b);
	if (threadIdx.x == 0) {
		stats[0] = a;
		stats[1] = b;
	}
}

__global__ void k_softmax(int n, int k, const float *x, float *y)
{
	FOR_EACH(i, (size_t)n)
		softmax_row(k, x + i * k, y + i * k);
}

/* ---- optimizers: the CPU's formulas, element by element ------------------ */

__global__ void k_sgd(size_t n, float *p, const float *g, float *buf, dp_sgd_args a)
{
	FOR_EACH(i, n)
		sgd_one(&p[i], g[i], &buf[i], a);
}

__global__ void k_adam(size_t n, float *p, const float *g, float *m, float *v, dp_adam_args a)
{
	FOR_EACH(i, n)
		adam_one(&p[i], g[i], &m[i], &v[i], a);
}

/* ---- pooling ------------------------------------------------------------------ */

/* Max (arg: (n, c, oh, ow), the index of each output's input) or average
 * pooling, NCHW unless x is channels-last (cuda_nhwc_layers.cu). */
static void pool_fwd(dp_bectx *c, int max, const dp_pool2d *g, const float *x, float *y, int32_t *arg)
{
	size_t n = (size_t)g->n * g->c * g->oh * g->ow;
	cu_use(c);
	PROF(c, "pooling");
	if (nhwc_pool_fwd(c, max, g, x, y, arg))
		return;
	tag_drop(c, y);
	tag_drop(c, arg);
	if (!n)
		return;
	if (max)
		LAUNCH(k_maxpool_fwd, grid(n), THREADS, c->s, *g, x, y, arg);
	else
		LAUNCH(k_avgpool_fwd, grid(n), THREADS, c->s, *g, x, y);
	LAUNCHED(c, max ? "maxpool" : "avgpool");
}

/* Their input gradients; a channels-last dy that the NCHW kernels are to
 * read (max pooling's arg NCHW) is converted first. */
static void pool_bwd(dp_bectx *c, int max, const dp_pool2d *g, const float *dy, const int32_t *arg,
		     float *dx)
{
	size_t n = (size_t)g->n * g->c * g->h * g->w;
	cu_use(c);
	PROF(c, "pooling backward");
	if (nhwc_pool_bwd(c, max, g, dy, arg, dx))
		return;
	nhwc_flat(c, &dy, (size_t)g->n * g->c * g->oh * g->ow, 0);
	tag_drop(c, dx);
	if (!n)
		return;
	if (max)
		LAUNCH(k_maxpool_bwd, grid(n), THREADS, c->s, *g, dy, arg, dx);
	else
		LAUNCH(k_avgpool_bwd, grid(n), THREADS, c->s, *g, dy, dx);
	LAUNCHED(c, max ? "maxpool gradient" : "avgpool gradient");
}

void cu_maxpool_fwd(dp_bectx *c, const dp_pool2d *g, const float *x, float *y, int32_t *arg)
{
	pool_fwd(c, 1, g, x, y, arg);
}

void cu_maxpool_bwd(dp_bectx *c, const dp_pool2d *g, const float *dy, const int32_t *arg, float *dx)
{
	pool_bwd(c, 1, g, dy, arg, dx);
}

void cu_avgpool_fwd(dp_bectx *c, const dp_pool2d *g, const float *x, float *y)
{
	pool_fwd(c, 0, g, x, y, NULL);
}

void cu_avgpool_bwd(dp_bectx *c, const dp_pool2d *g, const float *dy, float *dx)
{
	pool_bwd(c, 0, g, dy, NULL, dx);
}

/* ---- dropout ------------------------------------------------------------------- */

static void dropout(dp_bectx *c, const dp_dropout *d, int n, const float *in, float *out)
{
	size_t total = (size_t)n * d->per_sample;
	cu_use(c);
	PROF(c, "dropout");
	if (nhwc_dropout(c, d, n, in, out))
		return;
	tag_drop(c, out);
	if (!total)
		return;
	LAUNCH(k_dropout, grid(total), THREADS, c->s, *d, total, in, out);
	LAUNCHED(c, "dropout");
}

void cu_dropout_fwd(dp_bectx *c, const dp_dropout *d, int n, const float *x, float *y)
{
	dropout(c, d, n, x, y);
}

void cu_dropout_bwd(dp_bectx *c, const dp_dropout *d, int n, const float *dy, float *dx)
{
	dropout(c, d, n, dy, dx);
}

/* ---- batch normalisation -------------------------------------------------------- */

void cu_bnorm_sums(dp_bectx *c, const dp_bnorm *g, const float *x, double *sums)
{
	if (g->c <= 0)
		return;
	cu_use(c);
	PROF(c, "batchnorm");
	if (nhwc_bnorm_sums(c, g, x, NULL, sums))
		return;
	nhwc_flat(c, &x, (size_t)g->n * g->c * g->hw, 0); /* batchnorm after flatten */
	LAUNCH(k_bnorm_sums, g->c, THREADS, c->s, *g, x, sums);
	LAUNCHED(c, "batchnorm sums");
}

void cu_bnorm_fwd(dp_bectx *c, const dp_bnorm *g, int train, const float *x,
			 const float *gamma, const float *beta, float *run_mean, float *run_var,
			 const double *sums, float *save, float *y)
{
	if (g->c <= 0)
		return;
	cu_use(c);
	PROF(c, "batchnorm");
	if (nhwc_bnorm_fwd(c, g, train, x, gamma, beta, run_mean, run_var, sums, save, y))
		return;
	nhwc_flat(c, &x, (size_t)g->n * g->c * g->hw, 0); /* batchnorm after flatten */
	tag_drop(c, y);
	LAUNCH(k_bnorm_fwd, g->c, THREADS, c->s, *g, train, x, gamma, beta, run_mean, run_var, sums,
	       save, y);
	LAUNCHED(c, "batchnorm");
}

void cu_bnorm_bwd_sums(dp_bectx *c, const dp_bnorm *g, const float *x, const float *save,
			      const float *y, const float *dy, double *sums)
{
	if (g->c <= 0)
		return;
	cu_use(c);
	PROF(c, "batchnorm backward");
	if (!g->act)
		y = NULL;
	if (nhwc_bnorm_bwd_sums(c, g, x, save, y, dy, sums))
		return;
	size_t n = (size_t)g->n * g->c * g->hw;
	nhwc_flat(c, &x, n, 0);
	nhwc_flat(c, &dy, n, 1);
	if (y)
		nhwc_flat(c, &y, n, 2);
	LAUNCH(k_bnorm_bwd_sums, g->c, THREADS, c->s, *g, x, save, y, dy, sums);
	LAUNCHED(c, "batchnorm gradient sums");
}

void cu_bnorm_bwd(dp_bectx *c, const dp_bnorm *g, const float *x, const float *gamma,
			 const float *save, const double *sums, const float *y, const float *dy,
			 float *dx, float *dgamma, float *dbeta)
{
	if (g->c <= 0)
		return;
	cu_use(c);
	PROF(c, "batchnorm backward");
	if (!g->act)
		y = NULL;
	if (nhwc_bnorm_bwd(c, g, x, gamma, save, sums, y, dy, dx, dgamma, dbeta))
		return;
	size_t n = (size_t)g->n * g->c * g->hw;
	nhwc_flat(c, &x, n, 0);
	nhwc_flat(c, &dy, n, 1);
	if (y)
		nhwc_flat(c, &y, n, 2);
	tag_drop(c, dx);
	LAUNCH(k_bnorm_bwd, g->c, THREADS, c->s, *g, x, gamma, save, sums, y, dy, dx, dgamma, dbeta);
	LAUNCHED(c, "batchnorm gradient");
}

/* ---- losses ------------------------------------------------------------------------ */

void cu_xent(dp_bectx *c, int n, int k, const float *logits, const int32_t *labels,
		    float smooth, float scale, float *dlogits, double *stats)
{
	cu_use(c);
	PROF(c, "loss");
	nhwc_flat(c, &logits, (size_t)n * k, 0);
	tag_drop(c, dlogits);
	double *rows = (double *)cu_scratch(c, 2 * (size_t)(n > 0 ? n : 1) * sizeof(double));
	if (!rows)
		return;
	if (n > 0) {
		LAUNCH(k_xent, grid((size_t)n), THREADS, c->s, n, k, logits, labels, smooth, scale, dlogits, rows);
		LAUNCHED(c, "cross-entropy");
	}
	LAUNCH(k_sum_rows, 1, THREADS, c->s, n, rows, stats);
	LAUNCHED(c, "loss sum");
}

void cu_mse(dp_bectx *c, int n, int k, const float *pred, const float *target, float scale,
		   float *dpred, double *stats)
{
	cu_use(c);
	PROF(c, "loss");
	nhwc_flat(c, &pred, (size_t)n * k, 0);
	tag_drop(c, dpred);
	double *rows = (double *)cu_scratch(c, 2 * (size_t)(n > 0 ? n : 1) * sizeof(double));
	if (!rows)
		return;
	float f = 2.0f / (float)k * scale;
	if (n > 0) {
		LAUNCH(k_mse, grid((size_t)n), THREADS, c->s, n, k, pred, target, f, dpred, rows);
		LAUNCHED(c, "squared error");
	}
	LAUNCH(k_sum_rows, 1, THREADS, c->s, n, rows, stats);
	LAUNCHED(c, "loss sum");
}

void cu_softmax(dp_bectx *c, int n, int k, const float *x, float *y)
{
	if (n <= 0)
		return;
	cu_use(c);
	PROF(c, "softmax");
	nhwc_flat(c, &x, (size_t)n * k, 0);
	tag_drop(c, y);
	LAUNCH(k_softmax, grid((size_t)n), THREADS, c->s, n, k, x, y);
	LAUNCHED(c, "softmax");
}

/* ---- optimizers ---------------------------------------------------------------------- */

void cu_sgd(dp_bectx *c, size_t n, float *p, const float *g, float *buf,
		   const dp_sgd_args *a)
{
	if (!n)
		return;
	cu_use(c);
	PROF(c, "optimizer");
	c->wgen++; /* the filters converted from p are stale (cuda_conv.cu) */
	LAUNCH(k_sgd, grid(n), THREADS, c->s, n, p, g, buf, *a);
	LAUNCHED(c, "sgd");
}

void cu_adam(dp_bectx *c, size_t n, float *p, const float *g, float *m, float *v,
		    const dp_adam_args *a)
{
	if (!n)
		return;
	cu_use(c);
	PROF(c, "optimizer");
	c->wgen++; /* the filters converted from p are stale (cuda_conv.cu) */
	LAUNCH(k_adam, grid(n), THREADS, c->s, n, p, g, m, v, *a);
	LAUNCHED(c, "adam");
}

