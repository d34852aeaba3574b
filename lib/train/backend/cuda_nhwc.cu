/*
 * cuda_nhwc.cu - channels-last activations for the CUDA backend's tf32 and
 * bf16 modes (lib/train/backend/cuda_impl.h), as PyTorch's channels_last
 * memory format with AMP: cuDNN's tensor-core convolutions read and write
 * (n, h, w, c), so the activations of convolutional layers stay in that
 * layout from one layer to the next, in bfloat16 under bf16 (float32 under
 * tf32), and are converted only where a layer needs the (n, c, h, w)
 * float32 that dp_backend.h promises: a dense layer after flatten, a loss,
 * a download.
 *
 * The caller (lib/train/model) still sees every activation as an
 * (n, c, h, w) float32 buffer and passes the buffers from one call to the
 * next; the backend remembers which buffers it wrote channels-last (a tag:
 * the buffer's start and its shape), and every operation reads its inputs
 * by their tag and tags its outputs:
 *  - a convolution's output is channels-last; so is the output of
 *    batchnorm, pooling, an activation, dropout or an addition whose input
 *    was;
 *  - a backward operation writes dx in the layout of its forward input
 *    (so gradients follow the activations), converting a gradient that
 *    comes in the other layout;
 *  - upload, stage, fill and free forget a buffer's tag; copy carries it.
 * Batchnorm's statistics are float32 sums of differences from the running
 * mean (so large means do not cancel), reduced over a fixed grid of blocks
 * then over the blocks in double, in a fixed order: the same bits run
 * after run, and no atomics.  Dropout draws the masks of dp_rng.h by the
 * element's (n, c, h, w) index, so every layout and backend drops the same
 * elements.
 */
#include "cuda_nhwc.h"

/* ---- tags ---------------------------------------------------------------------- */

static unsigned tag_slot(const void *p)
{
	uintptr_t v = (uintptr_t)p >> 8;
	return (unsigned)((v ^ (v >> 13) ^ (v >> 29)) & (NTAG - 1));
}

const nhwc_tag *tag_of(dp_bectx *c, const void *p)
{
	if (!c->nhwc || !p)
		return NULL;
	for (unsigned i = tag_slot(p), k = 0; k < NTAG; i = (i + 1) & (NTAG - 1), k++) {
		if (c->tag[i].p == p)
			return &c->tag[i];
		if (!c->tag[i].p)
			return NULL;
	}
	return NULL;
}

void tag_set(dp_bectx *c, const void *p, int n, int cc, int h, int w)
{
	if (!c->nhwc)
		return;
	unsigned i = tag_slot(p);
	for (unsigned k = 0; k < NTAG; i = (i + 1) & (NTAG - 1), k++)
		if (!c->tag[i].p || c->tag[i].p == p) {
			c->tag[i] = nhwc_tag{p, n, cc, h, w};
			return;
		}
	cu_fail(c, "channels-last tensors", "more than 1024 activation buffers");
}

/* Removal from an open-addressed table: the entries after the slot that
 * would have probed through it move back. */
void tag_drop(dp_bectx *c, const void *p)
{
	if (!c->nhwc || !p)
		return;
	unsigned i = tag_slot(p), k = 0;
	for (; k < NTAG && c->tag[i].p != p; i = (i + 1) & (NTAG - 1), k++)
		if (!c->tag[i].p)
			return;
	if (k == NTAG)
		return;
	c->tag[i].p = NULL;
	for (unsigned j = (i + 1) & (NTAG - 1); c->tag[j].p; j = (j + 1) & (NTAG - 1)) {
		nhwc_tag t = c->tag[j];
		c->tag[j].p = NULL;
		tag_set(c, t.p, t.n, t.c, t.h, t.w);
	}
}

size_t nhwc_bytes(const dp_bectx *c, size_t elems)
{
	return elems * (c->prec == DP_PREC_BF16 ? 2 : 4);
}

/* ---- layout conversions -------------------------------------------------------- */

template <typename T>
__global__ void k_from_nchw(const float *x, int cc, size_t hw, size_t total, T *y)
{
	FOR_EACH(i, total) {
		size_t ch = i % (size_t)cc, r = i / (size_t)cc, s = r / hw, p = r % hw;
		y[i] = to<T>(x[(s * cc + ch) * hw + p]);
	}
}

template <typename T>
__global__ void k_to_nchw(const T *x, int cc, size_t hw, size_t total, float *y)
{
	FOR_EACH(i, total) {
		size_t p = i % hw, r = i / hw, ch = r % (size_t)cc, s = r / (size_t)cc;
		y[i] = fl(x[(s * hw + p) * cc + ch]);
	}
}

void nhwc_from_nchw(dp_bectx *c, const float *x, int n, int cc, int h, int w, void *y)
{
	size_t hw = (size_t)h * w, total = (size_t)n * cc * hw;
	if (!total)
		return;
	BY_TYPE(c, LAUNCH(k_from_nchw<T>, grid(total), THREADS, c->s, x, cc, hw, total, (T *)y));
	LAUNCHED(c, "to channels-last");
}

void nhwc_to_nchw(dp_bectx *c, const void *x, const nhwc_tag *t, float *y)
{
	size_t hw = (size_t)t->h * t->w, total = (size_t)t->n * t->c * hw;
	if (!total)
		return;
	BY_TYPE(c, LAUNCH(k_to_nchw<T>, grid(total), THREADS, c->s, (const T *)x, t->c, hw, total, y));
	LAUNCHED(c, "from channels-last");
}
const void *nhwc_in(dp_bectx *c, const void *x, int n, int cc, int h, int w, void *dst)
{
	const nhwc_tag *t = tag_of(c, x);
	if (t) {
		if (t->n != n || t->c != cc || t->h != h || t->w != w)
			cu_fail(c, "channels-last tensor", "read with another shape than written");
		return x;
	}
	nhwc_from_nchw(c, (const float *)x, n, cc, h, w, dst);
	return dst;
}

/* Filters (k, c, kh, kw) float32 <-> (k, kh, kw, c) in the activation type */
template <typename T> __global__ void k_filter(const float *w, int cc, int khw, size_t total, T *wt)
{
	FOR_EACH(i, total) {
		size_t ch = i % (size_t)cc, r = i / (size_t)cc, p = r % (size_t)khw, o = r / (size_t)khw;
		wt[i] = to<T>(w[(o * cc + ch) * khw + p]);
	}
}

template <typename T>
__global__ void k_filter_grad(const T *dwt, int cc, int khw, size_t total, float *dw)
{
	FOR_EACH(i, total) {
		size_t p = i % (size_t)khw, r = i / (size_t)khw, ch = r % (size_t)cc, o = r / (size_t)cc;
		dw[i] = fl(dwt[(o * khw + p) * cc + ch]);
	}
}


void nhwc_filter(dp_bectx *c, const float *w, const dp_conv2d *g, void *wt)
{
	size_t total = (size_t)g->k * g->c * g->kh * g->kw;
	BY_TYPE(c, LAUNCH(k_filter<T>, grid(total), THREADS, c->s, w, g->c, g->kh * g->kw, total, (T *)wt));
	LAUNCHED(c, "filters to channels-last");
}

void nhwc_filter_grad(dp_bectx *c, const void *dwt, const dp_conv2d *g, float *dw)
{
	size_t total = (size_t)g->k * g->c * g->kh * g->kw;
	BY_TYPE(c, LAUNCH(k_filter_grad<T>, grid(total), THREADS, c->s, (const T *)dwt, g->c,
			  g->kh * g->kw, total, dw));
	LAUNCHED(c, "filter gradient from channels-last");
}

/* ---- elementwise --------------------------------------------------------------- */

template <typename T> __global__ void k_bias_act(T *y, size_t total, int k, const float *b, int act)
{
	FOR_CHAN(i, ch, total, k)
	{
		float bb = b ? b[ch] : 0.0f;
		y[i] = to<T>(act_f(act, fl(y[i]) + bb));
	}
}

/* by vectors: kv = k / N vectors a row, vector cv of a row holding
 * channels cv N .. cv N + N - 1 */
template <typename T> __global__ void k_bias_act_v(T *y, size_t nv, int kv, const float *b, int act)
{
	const int N = VN<T>::n;
	CHAN_OF(i, cv, kv);
	float bb[N];
	for (int j = 0; j < N; j++)
		bb[j] = b ? b[cv * N + j] : 0.0f;
	CHAN_LOOP(i, nv)
	{
		float f[N];
		vld(y + i * N, f);
		for (int j = 0; j < N; j++)
			f[j] = act_f(act, f[j] + bb[j]);
		vst(y + i * N, f);
	}
}

template <typename T> __global__ void k_act(const T *x, T *y, size_t n, int act)
{
	FOR_EACH(i, n) y[i] = to<T>(act_f(act, fl(x[i])));
}


/* the same, nv vectors of 16 bytes */
template <typename T> __global__ void k_act_v(const T *x, T *y, size_t nv, int act)
{
	const int N = VN<T>::n;
	FOR_EACH(i, nv) {
		float f[N];
		vld(x + i * N, f);
		for (int j = 0; j < N; j++)
			f[j] = act_f(act, f[j]);
		vst(y + i * N, f);
	}
}

/* y = op(a, b) element by element, n elements (_v: nv vectors of 16 bytes):
 * an add with its activation, an activation's gradient. */
template <typename T, typename Op> __global__ void k_map2(const T *a, const T *b, T *y, size_t n, Op op)
{
	FOR_EACH(i, n) y[i] = to<T>(op(fl(a[i]), fl(b[i])));
}

template <typename T, typename Op> __global__ void k_map2_v(const T *a, const T *b, T *y, size_t nv, Op op)
{
	const int N = VN<T>::n;
	FOR_EACH(i, nv) {
		float f[N], g[N];
		vld(a + i * N, f);
		vld(b + i * N, g);
		for (int j = 0; j < N; j++)
			f[j] = op(f[j], g[j]);
		vst(y + i * N, f);
	}
}

struct add_act {
	int act;
	__device__ float operator()(float a, float b) const { return act_f(act, a + b); }
};
struct act_grad { /* (the output y, dy) */
	int act;
	__device__ float operator()(float y, float dy) const { return act_g(act, y, dy); }
};

/* Element i of (n, h, w, c) is element (c * hw + p) of its sample for the
 * masks (dp_backend.h): the same elements dropped as in NCHW. */
template <typename T>
__global__ void k_dropout(dp_dropout d, int cc, size_t hw, size_t total, const T *in, T *out)
{
	FOR_EACH(i, total) {
		size_t ch = i % (size_t)cc, r = i / (size_t)cc, p = r % hw, s = r / hw;
		uint64_t j = (d.sample0 + s) * d.per_sample + ch * hw + p;
		uint32_t u = (uint32_t)(dp_rng_at(d.key, j) >> 32);
		out[i] = to<T>(u >= d.threshold ? fl(in[i]) * d.scale : 0.0f);
	}
}

void nhwc_bias_act(dp_bectx *c, void *y, size_t rows, int k, const float *b, int act)
{
	size_t total = rows * k;
	if (!total || (!b && !act))
		return;
	size_t N = vec_n(c);
	if (k % N == 0 && vec_ok(c, total, y))
		BY_TYPE(c, LAUNCH(k_bias_act_v<T>, chan_grid(total / N, k / (int)N), THREADS, c->s, (T *)y,
				  total / N, k / (int)N, b, act));
	else
		BY_TYPE(c, LAUNCH(k_bias_act<T>, chan_grid(total, k), THREADS, c->s, (T *)y, total, k, b, act));
	LAUNCHED(c, "bias and activation");
}

/* k_map2 over n elements of the context's type, by vectors where a, b
 * and y allow it. */
template <typename Op>
static void map2(dp_bectx *c, Op op, const void *a, const void *b, void *y, size_t n, const char *what)
{
	if (vec_ok(c, n, a, b, y))
		BY_TYPE(c, LAUNCH((k_map2_v<T, Op>), grid(n / vec_n(c)), THREADS, c->s, (const T *)a, (const T *)b,
				  (T *)y, n / vec_n(c), op));
	else
		BY_TYPE(c, LAUNCH((k_map2<T, Op>), grid(n), THREADS, c->s, (const T *)a, (const T *)b, (T *)y, n, op));
	LAUNCHED(c, what);
}

void nhwc_act_grad(dp_bectx *c, int act, const void *y, const void *dy, void *dx, size_t n)
{
	if (!n)
		return;
	if (!act) {
		if (dx != dy)
			ck(c, cudaMemcpyAsync(dx, dy, nhwc_bytes(c, n), cudaMemcpyDeviceToDevice, c->s),
			   "copy");
		return;
	}
	map2(c, act_grad{act}, y, dy, dx, n, "activation gradient");
}

static size_t tag_elems(const nhwc_tag *t) { return (size_t)t->n * t->c * t->h * t->w; }

bool nhwc_act_fwd(dp_bectx *c, int act, size_t n, const float *x, float *y)
{
	const nhwc_tag *t = tag_of(c, x);
	if (!t)
		return false;
	nhwc_tag s = *t;
	if (tag_elems(&s) != n)
		cu_fail(c, "activation", "channels-last tensor of another size");
	if (vec_ok(c, n, x, y))
		BY_TYPE(c, LAUNCH(k_act_v<T>, grid(n / vec_n(c)), THREADS, c->s, (const T *)x, (T *)y, n / vec_n(c), act));
	else
		BY_TYPE(c, LAUNCH(k_act<T>, grid(n), THREADS, c->s, (const T *)x, (T *)y, n, act));
	LAUNCHED(c, "activation");
	tag_set(c, y, s.n, s.c, s.h, s.w);
	return true;
}

bool nhwc_act_bwd(dp_bectx *c, int act, size_t n, const float *y, const float *dy, float *dx)
{
	const nhwc_tag *t = tag_of(c, y);
	if (!t)
		return false;
	nhwc_tag s = *t;
	const void *d = nhwc_in(c, dy, s.n, s.c, s.h, s.w, cu_scratch(c, nhwc_bytes(c, n)));
	nhwc_act_grad(c, act, y, d, dx, n);
	tag_set(c, dx, s.n, s.c, s.h, s.w);
	return true;
}

bool nhwc_add(dp_bectx *c, size_t n, const float *a, const float *b, float *y, int act)
{
	const nhwc_tag *ta = tag_of(c, a), *tb = tag_of(c, b);
	if (!ta && !tb)
		return false;
	nhwc_tag s = ta ? *ta : *tb;
	if (tag_elems(&s) != n)
		cu_fail(c, "add", "channels-last tensor of another size");
	void *tmp = !ta || !tb ? cu_scratch(c, nhwc_bytes(c, n)) : NULL;
	const void *A = nhwc_in(c, a, s.n, s.c, s.h, s.w, tmp), *B = nhwc_in(c, b, s.n, s.c, s.h, s.w, tmp);
	map2(c, add_act{act}, A, B, y, n, "add");
	tag_set(c, y, s.n, s.c, s.h, s.w);
	return true;
}

bool nhwc_dropout(dp_bectx *c, const dp_dropout *d, int n, const float *in, float *out)
{
	const nhwc_tag *t = tag_of(c, in);
	if (!t)
		return false;
	nhwc_tag s = *t;
	size_t hw = (size_t)s.h * s.w, total = tag_elems(&s);
	if (s.n != n || (size_t)s.c * hw != d->per_sample)
		cu_fail(c, "dropout", "channels-last tensor of another size");
	BY_TYPE(c, LAUNCH(k_dropout<T>, grid(total), THREADS, c->s, *d, s.c, hw, total, (const T *)in, (T *)out));
	LAUNCHED(c, "dropout");
	tag_set(c, out, s.n, s.c, s.h, s.w);
	return true;
}

/* ---- sums over the rows of (rows, k) --------------------------------------------
 * Block b of nb takes a fixed slice of the rows; its 256 threads are RG row
 * groups of CW channel lanes (CW the power of two >= k, 32 to 256); each
 * thread sums its rows in float, the block its row groups in order, into
 * part (nb, 2, k); then k_col_total adds the blocks' parts in double in
 * order.  OP 0: sum x; 1: sum (x - m0), sum (x - m0)^2 (m0: a shift per
 * channel, batchnorm's running mean); 2: sum dy, sum dy (x - mean) inv
 * (mean, inv from batchnorm's save); 3: as 2 with dy taken as 0 where y,
 * a fused ReLU's output, is not positive (as the ReLU's backward would
 * have written it: no pass of its own); 4: x = act'(y) x, x being a
 * gradient and y the activation's output, written to out and summed (an
 * activation's backward and the bias gradient in one pass). */

/* what the sums read besides x, and write (by OP, above) */
template <typename T> struct col_args {
	const T *dy, *y;
	const float *m0, *save;
	int act;
	T *out;
};

/* lanes a row: the power of two >= k (32 to 256; 1 to 256 for vectors) */
static int col_width(int k)
{
	int cw = k >= 32 ? 32 : 1;
	while (cw < k && cw < THREADS)
		cw *= 2;
	return cw;
}

template <typename T, int OP>
__global__ void k_col_part(const T *x, size_t rows, int k, int cw, col_args<T> q, float *part)
{
	__shared__ float sh[2][THREADS];
	const bool grad = OP == 2 || OP == 3;
	int rg = (int)threadIdx.x / cw, lane = (int)threadIdx.x % cw, ngr = THREADS / cw;
	size_t per = (rows + gridDim.x - 1) / gridDim.x, r0 = per * blockIdx.x;
	size_t r1 = r0 + per < rows ? r0 + per : rows;
	for (int ch0 = 0; ch0 < k; ch0 += cw) {
		int ch = ch0 + lane;
		float s1 = 0.0f, s2 = 0.0f;
		if (ch < k) {
			float a = OP == 1 ? (q.m0 ? q.m0[ch] : 0.0f) : grad ? q.save[ch] : 0.0f;
			float inv = grad ? q.save[k + ch] : 1.0f;
			for (size_t r = r0 + rg; r < r1; r += ngr) {
				size_t at = r * k + ch;
				if (OP == 0) {
					s1 += fl(x[at]);
				} else if (OP == 1) {
					float v = fl(x[at]) - a;
					s1 += v;
					s2 += v * v;
				} else if (OP == 4) {
					T v = to<T>(act_g(q.act, fl(q.y[at]), fl(x[at])));
					q.out[at] = v;
					s1 += fl(v);
				} else {
					float d = OP == 3 && !(fl(q.y[at]) > 0.0f) ? 0.0f : fl(q.dy[at]);
					s1 += d;
					s2 += d * ((fl(x[at]) - a) * inv);
				}
			}
		}
		sh[0][threadIdx.x] = s1;
		sh[1][threadIdx.x] = s2;
		__syncthreads();
		if (rg == 0 && ch < k) {
			float t1 = 0.0f, t2 = 0.0f;
			for (int g2 = 0; g2 < ngr; g2++) {
				t1 += sh[0][g2 * cw + lane];
				t2 += sh[1][g2 * cw + lane];
			}
			part[((size_t)blockIdx.x * 2) * k + ch] = t1;
			part[((size_t)blockIdx.x * 2 + 1) * k + ch] = t2;
		}
		__syncthreads();
	}
}

/* The same over vectors: a lane takes N channels (16 bytes) of a row, CW
 * lanes span up to 256 vectors of a row, RG = 256 / CW row groups; rows
 * unrolled by 4 so that each thread has several loads in flight. */
template <typename T, int OP>
__global__ void k_col_part_v(const T *x, size_t rows, int k, int cw, col_args<T> q, float *part)
{
	const int N = VN<T>::n;
	const bool grad = OP == 2 || OP == 3;
	__shared__ float sh[2][THREADS * N];
	int rg = (int)threadIdx.x / cw, lane = (int)threadIdx.x % cw, ngr = THREADS / cw, kv = k / N;
	size_t per = (rows + gridDim.x - 1) / gridDim.x, r0 = per * blockIdx.x;
	size_t r1 = r0 + per < rows ? r0 + per : rows;
	for (int cv0 = 0; cv0 < kv; cv0 += cw) {
		int cv = cv0 + lane;
		float s1[N], s2[N], a[N], inv[N];
		for (int j = 0; j < N; j++) {
			s1[j] = s2[j] = 0.0f;
			a[j] = 0.0f;
			inv[j] = 1.0f;
		}
		if (cv < kv) {
			for (int j = 0; j < N; j++) {
				int ch = cv * N + j;
				a[j] = OP == 1 ? (q.m0 ? q.m0[ch] : 0.0f) : grad ? q.save[ch] : 0.0f;
				inv[j] = grad ? q.save[k + ch] : 1.0f;
			}
#pragma unroll 4
			for (size_t r = r0 + rg; r < r1; r += ngr) {
				size_t at = r * k + (size_t)cv * N;
				float f[N], d[N], m[N];
				vld(x + at, f);
				if (grad)
					vld(q.dy + at, d);
				if (OP == 3 || OP == 4)
					vld(q.y + at, m);
				if (OP == 3)
					for (int j = 0; j < N; j++)
						d[j] = m[j] > 0.0f ? d[j] : 0.0f;
				if (OP == 4) { /* as stored: the sums read what the pass wrote */
					for (int j = 0; j < N; j++)
						f[j] = fl(to<T>(act_g(q.act, m[j], f[j])));
					vst(q.out + at, f);
				}
				for (int j = 0; j < N; j++) {
					if (OP == 0 || OP == 4) {
						s1[j] += f[j];
					} else if (OP == 1) {
						float v = f[j] - a[j];
						s1[j] += v;
						s2[j] += v * v;
					} else {
						s1[j] += d[j];
						s2[j] += d[j] * ((f[j] - a[j]) * inv[j]);
					}
				}
			}
		}
		for (int j = 0; j < N; j++) {
			sh[0][threadIdx.x * N + j] = s1[j];
			sh[1][threadIdx.x * N + j] = s2[j];
		}
		__syncthreads();
		if (rg == 0 && cv < kv) {
			for (int j = 0; j < N; j++) {
				float t1 = 0.0f, t2 = 0.0f;
				for (int g2 = 0; g2 < ngr; g2++) {
					t1 += sh[0][(g2 * cw + lane) * N + j];
					t2 += sh[1][(g2 * cw + lane) * N + j];
				}
				part[((size_t)blockIdx.x * 2) * k + (size_t)cv * N + j] = t1;
				part[((size_t)blockIdx.x * 2 + 1) * k + (size_t)cv * N + j] = t2;
			}
		}
		__syncthreads();
	}
}

/* The parts of op OP into scr (by vectors where k and every pointer
 * allow: the choice orders the sums) */
template <int OP>
static void col_parts(dp_bectx *c, const void *x, const void *dy, const void *y, size_t rows, int k,
		      const float *m0, const float *save, void *scr, int act = 0, void *out = NULL)
{
	int nb = col_blocks(rows), N = (int)vec_n(c);
	float *part = (float *)scr;
	bool v = k % N == 0 && vec_ok(c, rows * k, x, dy, y) && vec_ok(c, rows * k, out);
	BY_TYPE(c, {
		col_args<T> q = {(const T *)dy, (const T *)y, m0, save, act, (T *)out};
		if (v)
			LAUNCH((k_col_part_v<T, OP>), nb, THREADS, c->s, (const T *)x, rows, k, col_width(k / N), q,
			       part);
		else
			LAUNCH((k_col_part<T, OP>), nb, THREADS, c->s, (const T *)x, rows, k, col_width(k), q, part);
	});
	LAUNCHED(c, "channel sums");
}

void nhwc_col_parts(dp_bectx *c, int op, const void *x, const void *dy, const void *y, size_t rows,
		    int k, const float *m0, const float *save, void *scr)
{
	switch (op) {
	case 0: col_parts<0>(c, x, dy, y, rows, k, m0, save, scr); break;
	case 1: col_parts<1>(c, x, dy, y, rows, k, m0, save, scr); break;
	case 2: col_parts<2>(c, x, dy, y, rows, k, m0, save, scr); break;
	default: col_parts<3>(c, x, dy, y, rows, k, m0, save, scr); break;
	}
}

__global__ void k_tot_to_float(const double *tot, int k, float *out)
{
	FOR_EACH(ch, (size_t)k) out[ch] = (float)tot[ch];
}

size_t nhwc_chan_scratch(size_t rows, int k)
{
	return col_part_bytes(rows, k) + align256(2 * (size_t)k * sizeof(double));
}

void nhwc_chan_sums(dp_bectx *c, const void *x, size_t rows, int k, float *out, void *scr)
{
	col_parts<0>(c, x, NULL, NULL, rows, k, NULL, NULL, scr);
	double *tot = col_total(c, rows, k, scr, no_tail());
	LAUNCH(k_tot_to_float, grid((size_t)k), THREADS, c->s, tot, k, out);
	LAUNCHED(c, "bias gradient");
}

bool nhwc_act_grad_sums(dp_bectx *c, int act, const void *y, void *d, size_t rows, int k,
			float *out, void *scr)
{
	size_t n = rows * k;
	if (k % (int)vec_n(c) == 0 && vec_ok(c, n, d) && !vec_ok(c, n, y))
		return false; /* nhwc_chan_sums would go by vectors, this could not */
	col_parts<4>(c, d, NULL, y, rows, k, NULL, NULL, scr, act, d);
	double *tot = col_total(c, rows, k, scr, no_tail());
	LAUNCH(k_tot_to_float, grid((size_t)k), THREADS, c->s, tot, k, out);
	LAUNCHED(c, "activation and bias gradient");
	return true;
}

/* ---- where NCHW float32 is needed ------------------------------------------------- */

void nhwc_flat(dp_bectx *c, const float **p, size_t n, int slot)
{
	const nhwc_tag *t = tag_of(c, *p);
	if (!t)
		return;
	nhwc_tag k = *t;
	if ((size_t)k.n * k.c * k.h * k.w != n)
		cu_fail(c, "channels-last tensor", "read as another size");
	float *f = nhwc_flat_buf(c, n, slot);
	if (!f)
		return;
	nhwc_to_nchw(c, *p, &k, f);
	*p = f;
}
float *nhwc_flat_buf(dp_bectx *c, size_t n, int slot)
{
	size_t bytes = n * sizeof(float);
	if (bytes > c->flat_cap[slot]) {
		ck(c, cudaStreamSynchronize(c->s), "synchronize");
		cudaFree(c->flat[slot]);
		c->flat[slot] = NULL;
		c->flat_cap[slot] = 0;
		if (!ck(c, cudaMalloc(&c->flat[slot], bytes), "memory"))
			return NULL;
		c->flat_cap[slot] = bytes;
	}
	return (float *)c->flat[slot];
}

