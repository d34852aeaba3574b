/*
 * cuda_nhwc_layers.cu - batch normalisation and pooling on channels-last
 * tensors (lib/train/backend/cuda_nhwc.cu says how the CUDA backend keeps
 * them): batchnorm's statistics as sums over the channels' rows
 * (nhwc_col_parts, float32 sums of differences from the running mean,
 * reduced in double in a fixed order, the statistics or the gradient's
 * coefficients made per channel as the last launch of the sums ends), its forward and gradient 16 bytes
 * at a time with each thread's channels' values in registers; pooling a
 * thread per output (forward) or input (backward) position and 16 bytes of
 * channels, max pooling's argmax in the same order as its output.
 */
#include "cuda_nhwc.h"
#include "math_impl.h"

/* ---- batch normalisation ---------------------------------------------------------- */

/* Per channel ch: the statistics (this batch's from tot = sums of (x - m0),
 * or all ranks' from sums), saved as (mean, inv), the running statistics
 * updated, and ab (2, k) = (gamma inv, beta - mean gamma inv) for the
 * forward: col_total's tail where this batch's sums are made, else
 * k_bn_stats. */
struct bn_stats {
	dp_bnorm g;
	int train;
	const double *sums;
	const float *gamma, *beta;
	float *run_mean, *run_var, *save, *ab;
	__device__ void operator()(int ch, const double *tot) const
	{
		int k = g.c;
		double m = (double)g.n * g.hw, mean, var;
		float mu, inv;
		if (train) {
			double cnt = sums && g.count > 0 ? g.count : m;
			if (sums) {
				mean = sums[ch] / cnt;
				var = sums[k + ch] / cnt - mean * mean;
			} else {
				double a = run_mean[ch], d = tot[ch] / m;
				mean = a + d;
				var = tot[k + ch] / m - d * d;
			}
			var = var > 0 ? var : 0;
			mu = (float)mean;
			inv = (float)(1.0 / sqrt(var + g.eps));
			bn_running(g.momentum, mu, var, cnt, &run_mean[ch], &run_var[ch]);
		} else {
			mu = run_mean[ch];
			inv = 1.0f / sqrtf(run_var[ch] + g.eps);
		}
		if (save) {
			save[ch] = mu;
			save[k + ch] = inv;
		}
		if (ab) {
			float a = gamma[ch] * inv;
			ab[ch] = a;
			ab[k + ch] = beta[ch] - mu * a;
		}
	}
};

/* the same without this batch's sums: inference, or all ranks' sums given */
__global__ void k_bn_stats(bn_stats st)
{
	FOR_EACH(ch, (size_t)st.g.c) st((int)ch, NULL);
}

/* y = x a + b, then max(0, y) when relu (a fused ReLU: as the ReLU after
 * the rounded y would give) */
template <typename T>
__global__ void k_bn_apply(const T *x, const float *ab, int k, size_t total, int relu, T *y)
{
	FOR_CHAN(i, ch, total, k)
	{
		float a = ab[ch], b = ab[k + ch], v = fl(x[i]) * a + b;
		y[i] = to<T>(relu && !(v > 0.0f) ? 0.0f : v);
	}
}

template <typename T>
__global__ void k_bn_apply_v(const T *x, const float *ab, int k, size_t nv, int relu, T *y)
{
	const int N = VN<T>::n;
	CHAN_OF(i, cv, k / N);
	float a[N], b[N];
	for (int j = 0; j < N; j++) {
		a[j] = ab[cv * N + j];
		b[j] = ab[k + cv * N + j];
	}
	CHAN_LOOP(i, nv)
	{
		float f[N];
		vld(x + i * N, f);
		for (int j = 0; j < N; j++) {
			float v = f[j] * a[j] + b[j];
			f[j] = relu && !(v > 0.0f) ? 0.0f : v;
		}
		vst(y + i * N, f);
	}
}

/* sums of x and x^2 from tot, sums of (x - a) and (x - a)^2 over m
 * values, a = m0 (col_total's tail) */
struct bn_unshift {
	const float *m0;
	int k;
	double m;
	double *sums;
	__device__ void operator()(int ch, const double *tot) const
	{
		double a = m0 ? m0[ch] : 0.0, s1 = tot[ch], s2 = tot[k + ch];
		sums[ch] = s1 + m * a;
		sums[k + ch] = s2 + 2 * a * s1 + m * a * a;
	}
};

/* x's tag when batchnorm reads it channels-last; NULL also when the
 * batchnorm is over other channels (after flatten: the caller reads x as
 * NCHW float32, nhwc_flat) */
static const nhwc_tag *bn_tag(dp_bectx *c, const dp_bnorm *g, const void *x)
{
	const nhwc_tag *t = tag_of(c, x);
	if (t && (t->n != g->n || t->c != g->c || (size_t)t->h * t->w != (size_t)g->hw))
		return NULL;
	return t;
}

bool nhwc_bnorm_sums(dp_bectx *c, const dp_bnorm *g, const float *x, const float *run_mean,
		     double *sums)
{
	const nhwc_tag *t = bn_tag(c, g, x);
	if (!t)
		return false;
	size_t rows = (size_t)g->n * g->hw;
	char *scr = (char *)cu_scratch(c, nhwc_chan_scratch(rows, g->c));
	if (!scr)
		return true;
	nhwc_col_parts(c, 1, x, NULL, NULL, rows, g->c, run_mean, NULL, scr);
	col_total(c, rows, g->c, scr, bn_unshift{run_mean, g->c, (double)rows, sums});
	return true;
}

bool nhwc_bnorm_fwd(dp_bectx *c, const dp_bnorm *g, int train, const float *x, const float *gamma,
		    const float *beta, float *run_mean, float *run_var, const double *sums,
		    float *save, float *y)
{
	const nhwc_tag *t = bn_tag(c, g, x);
	if (!t)
		return false;
	nhwc_tag s = *t;
	size_t rows = (size_t)g->n * g->hw, total = rows * g->c;
	char *scr = (char *)cu_scratch(c, nhwc_chan_scratch(rows, g->c) + align256(2 * (size_t)g->c * 4));
	if (!scr)
		return true;
	float *ab = (float *)(scr + nhwc_chan_scratch(rows, g->c));
	bn_stats st = {*g, train, sums, gamma, beta, run_mean, run_var, save, ab};
	if (train && !sums) { /* the statistics as the sums' last launch ends */
		nhwc_col_parts(c, 1, x, NULL, NULL, rows, g->c, run_mean, NULL, scr);
		col_total(c, rows, g->c, scr, st);
	} else {
		LAUNCH(k_bn_stats, grid((size_t)g->c), THREADS, c->s, st);
		LAUNCHED(c, "batchnorm statistics");
	}
	size_t N = vec_n(c);
	int relu = g->act == DP_ACT_RELU;
	if (g->c % N == 0 && vec_ok(c, total, x, y))
		BY_TYPE(c, LAUNCH(k_bn_apply_v<T>, chan_grid(total / N, g->c / (int)N), THREADS, c->s, (const T *)x,
				  ab, g->c, total / N, relu, (T *)y));
	else
		BY_TYPE(c, LAUNCH(k_bn_apply<T>, chan_grid(total, g->c), THREADS, c->s, (const T *)x, ab, g->c,
				  total, relu, (T *)y));
	LAUNCHED(c, "batchnorm");
	tag_set(c, y, s.n, s.c, s.h, s.w);
	return true;
}

/* dx = k (dy - mdy - xhat mdyx), or k dy (eval), with k = gamma inv: the
 * coefficients (3, k) of channel ch from own, this batch's sums of dy and
 * dy xhat (or all ranks', sums), and dgamma, dbeta (col_total's tail) */
struct bn_coef {
	dp_bnorm g;
	const double *sums;
	const float *gamma, *save;
	float *dgamma, *dbeta, *coef;
	__device__ void operator()(int ch, const double *own) const
	{
		int k = g.c;
		if (dgamma) {
			dgamma[ch] = (float)own[k + ch];
			dbeta[ch] = (float)own[ch];
		}
		double cnt = sums && g.count > 0 ? g.count : (double)g.n * g.hw;
		const double *s = sums ? sums : own;
		float inv = save[k + ch];
		coef[ch] = gamma[ch] * inv;
		coef[k + ch] = g.eval ? 0.0f : (float)(s[ch] / cnt);
		coef[2 * k + ch] = g.eval ? 0.0f : (float)(s[k + ch] / cnt);
	}
};

/* dx as below with dy taken as 0 where y (a fused ReLU's output; NULL:
 * none) is not positive, as the ReLU's own backward would have written it */
template <typename T>
__global__ void k_bn_dx_v(const T *x, const T *dy, const T *y, const float *save, const float *coef,
			  int k, size_t nv, T *dx)
{
	const int N = VN<T>::n;
	CHAN_OF(i, cv, k / N);
	/* dx = a dy - b - c x, folded per channel: a = k, b = k (mdy - mean inv mdyx),
	 * c = k inv mdyx */
	float a[N], b[N], cc[N];
	for (int j = 0; j < N; j++) {
		int ch = cv * N + j;
		float m = save[ch], inv = save[k + ch], kk = coef[ch], mdy = coef[k + ch], mx = coef[2 * k + ch];
		a[j] = kk;
		b[j] = kk * (mdy - m * inv * mx);
		cc[j] = kk * inv * mx;
	}
	CHAN_LOOP(i, nv)
	{
		float f[N], d[N], m[N];
		vld(x + i * N, f);
		vld(dy + i * N, d);
		if (y) {
			vld(y + i * N, m);
			for (int j = 0; j < N; j++)
				d[j] = m[j] > 0.0f ? d[j] : 0.0f;
		}
		for (int j = 0; j < N; j++)
			d[j] = a[j] * d[j] - b[j] - cc[j] * f[j];
		vst(dx + i * N, d);
	}
}

template <typename T>
__global__ void k_bn_dx(const T *x, const T *dy, const T *y, const float *save, const float *coef,
			int k, size_t total, T *dx)
{
	FOR_CHAN(i, ch, total, k)
	{
		float m = save[ch], inv = save[k + ch], a = coef[ch], b = coef[k + ch], d = coef[2 * k + ch];
		float xh = (fl(x[i]) - m) * inv, e = y && !(fl(y[i]) > 0.0f) ? 0.0f : fl(dy[i]);
		dx[i] = to<T>(a * (e - b - xh * d));
	}
}

/* Scratch for bn_dy: dy converted, then y converted (for a fused ReLU),
 * each where it comes as NCHW float32 (not channels-last already, as it
 * mostly is: a ResNet-50's first batchnorm at batch 256 would reserve 400
 * MB it never uses) */
static size_t dy_room(dp_bectx *c, const dp_bnorm *g, const float *dy)
{
	return tag_of(c, dy) ? 0 : align256(nhwc_bytes(c, (size_t)g->n * g->c * g->hw));
}

static size_t bn_dy_scratch(dp_bectx *c, const dp_bnorm *g, const float *y, const float *dy)
{
	size_t n = (size_t)g->n * g->c * g->hw;
	return dy_room(c, g, dy) + (y && !tag_of(c, y) ? nhwc_bytes(c, n) : 0);
}

/* dy channels-last (converted into scr when it comes as NCHW float32), and
 * in *ym the fused ReLU's output y (NULL: none) channels-last, converted
 * after it: the kernels that read dy mask it by y themselves (op 3 of
 * nhwc_col_parts, k_bn_dx), with no pass of the ReLU's backward between */
static const void *bn_dy(dp_bectx *c, const dp_bnorm *g, const nhwc_tag *t, const float *y,
			 const float *dy, char *scr, const void **ym)
{
	*ym = y ? nhwc_in(c, y, t->n, t->c, t->h, t->w, scr + dy_room(c, g, dy)) : NULL;
	return nhwc_in(c, dy, t->n, t->c, t->h, t->w, scr);
}

/* own sums (2, k doubles) of dy and dy xhat, dy masked by ym (NULL: not),
 * then tail per channel */
template <typename Tail>
static double *bn_grad_sums(dp_bectx *c, const dp_bnorm *g, const void *x, const float *save,
			    const void *dy, const void *ym, char *scr, Tail tail)
{
	size_t rows = (size_t)g->n * g->hw;
	nhwc_col_parts(c, ym ? 3 : 2, x, dy, ym, rows, g->c, NULL, save, scr);
	return col_total(c, rows, g->c, scr, tail);
}

bool nhwc_bnorm_bwd_sums(dp_bectx *c, const dp_bnorm *g, const float *x, const float *save,
			 const float *y, const float *dy, double *sums)
{
	const nhwc_tag *t = bn_tag(c, g, x);
	if (!t)
		return false;
	size_t rows = (size_t)g->n * g->hw, cs = nhwc_chan_scratch(rows, g->c);
	char *scr = (char *)cu_scratch(c, cs + bn_dy_scratch(c, g, y, dy));
	if (!scr)
		return true;
	const void *ym, *d = bn_dy(c, g, t, y, dy, scr + cs, &ym);
	double *own = bn_grad_sums(c, g, x, save, d, ym, scr, no_tail());
	ck(c, cudaMemcpyAsync(sums, own, 2 * (size_t)g->c * sizeof(double), cudaMemcpyDeviceToDevice, c->s),
	   "batchnorm gradient sums");
	return true;
}

bool nhwc_bnorm_bwd(dp_bectx *c, const dp_bnorm *g, const float *x, const float *gamma,
		    const float *save, const double *sums, const float *y, const float *dy,
		    float *dx, float *dgamma, float *dbeta)
{
	const nhwc_tag *t = bn_tag(c, g, x);
	if (!t)
		return false;
	nhwc_tag s = *t;
	size_t rows = (size_t)g->n * g->hw, total = rows * g->c, cs = nhwc_chan_scratch(rows, g->c);
	size_t cb = align256(3 * (size_t)g->c * sizeof(float));
	char *scr = (char *)cu_scratch(c, cs + cb + bn_dy_scratch(c, g, y, dy));
	if (!scr)
		return true;
	float *coef = (float *)(scr + cs);
	const void *ym, *d = bn_dy(c, g, &s, y, dy, scr + cs + cb, &ym);
	bn_grad_sums(c, g, x, save, d, ym, scr, bn_coef{*g, sums, gamma, save, dgamma, dbeta, coef});
	if (dx) {
		size_t N = vec_n(c);
		if (g->c % N == 0 && vec_ok(c, total, x, d, dx) && vec_ok(c, total, ym))
			BY_TYPE(c, LAUNCH(k_bn_dx_v<T>, chan_grid(total / N, g->c / (int)N), THREADS, c->s,
					  (const T *)x, (const T *)d, (const T *)ym, save, coef, g->c, total / N,
					  (T *)dx));
		else
			BY_TYPE(c, LAUNCH(k_bn_dx<T>, chan_grid(total, g->c), THREADS, c->s, (const T *)x,
					  (const T *)d, (const T *)ym, save, coef, g->c, total, (T *)dx));
		LAUNCHED(c, "batchnorm input gradient");
		tag_set(c, dx, s.n, s.c, s.h, s.w);
	}
	return true;
}

/* ---- pooling: (n, h, w, c), arg in the same order as y --------------------------- */

/* Element i of a channels-last (n, hh, ww, c) tensor taken cvn vectors of
 * channels to a pixel: its vector cv, column x, row y, sample s. */
__device__ __forceinline__ void nhwc_at(size_t i, int cvn, int hh, int ww, int *cv, int *x, int *y,
					size_t *s)
{
	*cv = (int)(i % (size_t)cvn);
	size_t r = i / (size_t)cvn;
	*x = (int)(r % ww), *y = (int)(r / ww % hh);
	*s = r / ((size_t)ww * hh);
}

template <typename T>
__global__ void k_maxpool(dp_pool2d g, const T *x, T *y, int32_t *arg, size_t total)
{
	FOR_EACH(i, total) {
		size_t ch = i % (size_t)g.c, r = i / (size_t)g.c;
		int ox = (int)(r % g.ow), oy = (int)(r / g.ow % g.oh);
		size_t s = r / ((size_t)g.ow * g.oh);
		int best;
		float m = pool_max(g, oy, ox, x + s * g.h * g.w * g.c + ch, (size_t)g.c, &best);
		y[i] = to<T>(m);
		arg[i] = best;
	}
}

template <typename T>
__global__ void k_maxpool_bwd(dp_pool2d g, const T *dy, const int32_t *arg, T *dx, size_t total)
{
	FOR_EACH(i, total) {
		size_t ch = i % (size_t)g.c, r = i / (size_t)g.c;
		int ix = (int)(r % g.w), iy = (int)(r / g.w % g.h);
		size_t s = r / ((size_t)g.w * g.h);
		int ylo, yhi, xlo, xhi, me = iy * g.w + ix;
		pool_windows(iy + g.ph, g.kh, g.sh, g.oh, &ylo, &yhi);
		pool_windows(ix + g.pw, g.kw, g.sw, g.ow, &xlo, &xhi);
		float acc = 0.0f;
		for (int oy = ylo; oy <= yhi; oy++)
			for (int ox = xlo; ox <= xhi; ox++) {
				size_t o = ((s * g.oh + oy) * g.ow + ox) * g.c + ch;
				if (arg[o] == me)
					acc += fl(dy[o]);
			}
		dx[i] = to<T>(acc);
	}
}

template <typename T> __global__ void k_avgpool(dp_pool2d g, const T *x, T *y, size_t total)
{
	float inv = 1.0f / (float)(g.kh * g.kw);
	FOR_EACH(i, total) {
		size_t ch = i % (size_t)g.c, r = i / (size_t)g.c;
		int ox = (int)(r % g.ow), oy = (int)(r / g.ow % g.oh);
		size_t s = r / ((size_t)g.ow * g.oh);
		float acc = 0.0f;
		for (int a = 0; a < g.kh; a++)
			for (int b = 0; b < g.kw; b++)
				acc += fl(x[((s * g.h + oy * g.sh + a) * g.w + ox * g.sw + b) * g.c + ch]);
		y[i] = to<T>(acc * inv);
	}
}

template <typename T> __global__ void k_avgpool_bwd(dp_pool2d g, const T *dy, T *dx, size_t total)
{
	FOR_EACH(i, total) {
		size_t ch = i % (size_t)g.c, r = i / (size_t)g.c;
		int ix = (int)(r % g.w), iy = (int)(r / g.w % g.h);
		size_t s = r / ((size_t)g.w * g.h);
		dx[i] = to<T>(avgpool_grad(g, iy, ix, dy + s * g.oh * g.ow * g.c + ch, (size_t)g.c));
	}
}

/* The same, N channels (16 bytes of them) a thread: the stem's max
 * pooling and global average pooling move a ResNet's largest and widest
 * tensors.  cv: the channel vector, r: the pixel of the output (forward)
 * or input (backward). */
template <int N> __device__ __forceinline__ void ild(const int32_t *p, int *a)
{
	for (int q = 0; q < N / 4; q++) {
		uint4 v = ((const uint4 *)p)[q];
		a[4 * q] = (int)v.x, a[4 * q + 1] = (int)v.y, a[4 * q + 2] = (int)v.z, a[4 * q + 3] = (int)v.w;
	}
}
template <int N> __device__ __forceinline__ void ist(int32_t *p, const int *a)
{
	for (int q = 0; q < N / 4; q++) {
		uint4 v;
		v.x = (unsigned)a[4 * q], v.y = (unsigned)a[4 * q + 1], v.z = (unsigned)a[4 * q + 2],
		v.w = (unsigned)a[4 * q + 3];
		((uint4 *)p)[q] = v;
	}
}

template <typename T>
__global__ void k_maxpool_v(dp_pool2d g, const T *x, T *y, int32_t *arg, size_t nv)
{
	const int N = VN<T>::n;
	int cvn = g.c / N;
	FOR_EACH(i, nv) {
		int cv, ox, oy;
		size_t s;
		nhwc_at(i, cvn, g.oh, g.ow, &cv, &ox, &oy, &s);
		int y0, y1, x0, x1;
		pool_window(g, oy, ox, &y0, &y1, &x0, &x1);
		float m[N], v[N];
		int best[N];
		for (int j = 0; j < N; j++) {
			m[j] = -INFINITY;
			best[j] = y0 < y1 && x0 < x1 ? y0 * g.w + x0 : -1;
		}
		for (int a = y0; a < y1; a++)
			for (int b = x0; b < x1; b++) {
				vld(x + ((s * g.h + a) * g.w + b) * g.c + (size_t)cv * N, v);
				for (int j = 0; j < N; j++)
					if (v[j] > m[j] || isnan(v[j])) {
						m[j] = v[j];
						best[j] = a * g.w + b;
					}
			}
		vst(y + i * N, m);
		ist<N>(arg + i * N, best);
	}
}

template <typename T>
__global__ void k_maxpool_bwd_v(dp_pool2d g, const T *dy, const int32_t *arg, T *dx, size_t nv)
{
	const int N = VN<T>::n;
	int cvn = g.c / N;
	FOR_EACH(i, nv) {
		int cv, ix, iy;
		size_t s;
		nhwc_at(i, cvn, g.h, g.w, &cv, &ix, &iy, &s);
		int ylo, yhi, xlo, xhi, me = iy * g.w + ix;
		pool_windows(iy + g.ph, g.kh, g.sh, g.oh, &ylo, &yhi);
		pool_windows(ix + g.pw, g.kw, g.sw, g.ow, &xlo, &xhi);
		float acc[N], d[N];
		int a[N];
		for (int j = 0; j < N; j++)
			acc[j] = 0.0f;
		for (int oy = ylo; oy <= yhi; oy++)
			for (int ox = xlo; ox <= xhi; ox++) {
				size_t o = ((s * g.oh + oy) * g.ow + ox) * g.c + (size_t)cv * N;
				ild<N>(arg + o, a);
				vld(dy + o, d);
				for (int j = 0; j < N; j++)
					if (a[j] == me)
						acc[j] += d[j];
			}
		vst(dx + i * N, acc);
	}
}

template <typename T> __global__ void k_avgpool_v(dp_pool2d g, const T *x, T *y, size_t nv)
{
	const int N = VN<T>::n;
	int cvn = g.c / N;
	float inv = 1.0f / (float)(g.kh * g.kw);
	FOR_EACH(i, nv) {
		int cv, ox, oy;
		size_t s;
		nhwc_at(i, cvn, g.oh, g.ow, &cv, &ox, &oy, &s);
		float acc[N], v[N];
		for (int j = 0; j < N; j++)
			acc[j] = 0.0f;
		for (int a = 0; a < g.kh; a++)
			for (int b = 0; b < g.kw; b++) {
				vld(x + ((s * g.h + oy * g.sh + a) * g.w + ox * g.sw + b) * g.c + (size_t)cv * N, v);
				for (int j = 0; j < N; j++)
					acc[j] += v[j];
			}
		for (int j = 0; j < N; j++)
			acc[j] *= inv;
		vst(y + i * N, acc);
	}
}

template <typename T> __global__ void k_avgpool_bwd_v(dp_pool2d g, const T *dy, T *dx, size_t nv)
{
	const int N = VN<T>::n;
	int cvn = g.c / N;
	float inv = 1.0f / (float)(g.kh * g.kw);
	FOR_EACH(i, nv) {
		int cv, ix, iy;
		size_t s;
		nhwc_at(i, cvn, g.h, g.w, &cv, &ix, &iy, &s);
		int ylo, yhi, xlo, xhi;
		pool_windows(iy, g.kh, g.sh, g.oh, &ylo, &yhi);
		pool_windows(ix, g.kw, g.sw, g.ow, &xlo, &xhi);
		float acc[N], d[N];
		for (int j = 0; j < N; j++)
			acc[j] = 0.0f;
		for (int oy = ylo; oy <= yhi; oy++)
			for (int ox = xlo; ox <= xhi; ox++) {
				vld(dy + ((s * g.oh + oy) * g.ow + ox) * g.c + (size_t)cv * N, d);
				for (int j = 0; j < N; j++)
					acc[j] += d[j] * inv;
			}
		vst(dx + i * N, acc);
	}
}

static const nhwc_tag *pool_tag(dp_bectx *c, const dp_pool2d *g, const void *p, int out)
{
	const nhwc_tag *t = tag_of(c, p);
	if (t && (t->n != g->n || t->c != g->c || t->h != (out ? g->oh : g->h) || t->w != (out ? g->ow : g->w)))
		cu_fail(c, "pooling", "channels-last tensor of another shape");
	return t;
}

/* Max pooling tags arg too: its backward knows the layout by it, whatever
 * the layout of the dy it is given. */
bool nhwc_pool_fwd(dp_bectx *c, int max, const dp_pool2d *g, const float *x, float *y, int32_t *arg)
{
	if (!pool_tag(c, g, x, 0))
		return false;
	size_t total = (size_t)g->n * g->c * g->oh * g->ow, N = vec_n(c), nv = total / N;
	bool v = g->c % N == 0 && vec_ok(c, total, x, y, arg);
	if (total) {
		if (max && v)
			BY_TYPE(c, LAUNCH(k_maxpool_v<T>, grid(nv), THREADS, c->s, *g, (const T *)x, (T *)y, arg, nv));
		else if (max)
			BY_TYPE(c, LAUNCH(k_maxpool<T>, grid(total), THREADS, c->s, *g, (const T *)x, (T *)y, arg, total));
		else if (v)
			BY_TYPE(c, LAUNCH(k_avgpool_v<T>, grid(nv), THREADS, c->s, *g, (const T *)x, (T *)y, nv));
		else
			BY_TYPE(c, LAUNCH(k_avgpool<T>, grid(total), THREADS, c->s, *g, (const T *)x, (T *)y, total));
		LAUNCHED(c, "pooling");
	}
	tag_set(c, y, g->n, g->c, g->oh, g->ow);
	if (max)
		tag_set(c, arg, g->n, g->c, g->oh, g->ow);
	return true;
}

bool nhwc_pool_bwd(dp_bectx *c, int max, const dp_pool2d *g, const float *dy, const int32_t *arg,
		   float *dx)
{
	if (!pool_tag(c, g, max ? (const void *)arg : (const void *)dy, 1))
		return false;
	size_t total = (size_t)g->n * g->c * g->h * g->w;
	size_t on = (size_t)g->n * g->c * g->oh * g->ow;
	const void *d = nhwc_in(c, dy, g->n, g->c, g->oh, g->ow,
				tag_of(c, dy) ? NULL : cu_scratch(c, nhwc_bytes(c, on)));
	size_t N = vec_n(c), nv = total / N;
	bool v = g->c % N == 0 && vec_ok(c, total, d, dx, arg);
	if (total) {
		if (max && v)
			BY_TYPE(c, LAUNCH(k_maxpool_bwd_v<T>, grid(nv), THREADS, c->s, *g, (const T *)d, arg, (T *)dx, nv));
		else if (max)
			BY_TYPE(c, LAUNCH(k_maxpool_bwd<T>, grid(total), THREADS, c->s, *g, (const T *)d, arg, (T *)dx, total));
		else if (v)
			BY_TYPE(c, LAUNCH(k_avgpool_bwd_v<T>, grid(nv), THREADS, c->s, *g, (const T *)d, (T *)dx, nv));
		else
			BY_TYPE(c, LAUNCH(k_avgpool_bwd<T>, grid(total), THREADS, c->s, *g, (const T *)d, (T *)dx, total));
		LAUNCHED(c, "pooling gradient");
	}
	tag_set(c, dx, g->n, g->c, g->h, g->w);
	return true;
}

