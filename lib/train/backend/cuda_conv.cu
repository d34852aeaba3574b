/*
 * cuda_conv.cu - the CUDA backend's convolutions (lib/train/backend/
 * cuda_impl.h): cuDNN's, as PyTorch's, where the build found cuDNN
 * (CUDNN=auto|1, -DDP_WITH_CUDNN); im2col + cuBLAS GEMMs otherwise, and
 * with dp_backend_opts.conv_algo 1.
 *
 * cuDNN: one plan per shape (the batch size included): tensor, filter and
 * convolution descriptors and an algorithm for each of the three passes
 * (forward, data gradient, filter gradient), chosen once, at the shape's
 * first use (conv_ws at bind time for the largest batch):
 *  - measured, as torch.backends.cudnn.benchmark: cuDNN times every
 *    algorithm (cudnnFind*) and the fastest deterministic one whose
 *    workspace fits is taken (deterministic: no atomics, so a step repeats
 *    bit for bit with the same algorithms);
 *  - pinned (dp_backend_opts.deterministic): cuDNN's heuristic order,
 *    untimed, so that two runs on the same GPU and cuDNN choose the same;
 *  - given (dp_backend_opts.algos, the text conv_algos writes: from another
 *    rank, or from a checkpoint for --resume): taken as given.
 * Every candidate's workspace is bounded (CUDNN_WS_MAX, DP_CUDNN_WS_MAX),
 * and conv_ws reports the most that any candidate takes, so that another
 * rank's choice fits the workspace this rank allocated.
 * Math: fp32 is IEEE float (CUDNN_FMA_MATH, NCHW float32, the CPU's
 * layout); tf32 and bf16 use tensor cores (CUDNN_TENSOR_OP_MATH) on
 * channels-last tensors (cuda_nhwc.cu): float32 under tf32, bfloat16
 * under bf16, with the filters converted from the float32 master weights
 * at each pass and the filter gradient converted back.
 * A shape cuDNN cannot compute (padding at the bottom or right other than
 * at the top or left) goes through im2col, converted to and from NCHW.
 *
 * im2col + GEMM: over a chunk of samples at a time (as many as fit a
 * fixed workspace budget, the whole batch for small layers): the columns
 * of a chunk form one (c*kh*kw, chunk*oh*ow) matrix; the forward pass
 * multiplies each sample's block by the filters in one strided-batched
 * GEMM writing NCHW directly; the backward pass transposes dy to
 * (k, chunk*oh*ow) so that the filter gradient of the whole chunk is ONE
 * GEMM (summing over samples in its inner dimension), and the input
 * gradient is a GEMM into columns then a gather back to the image (col2im
 * without atomics).
 */
#include "cuda_impl.h"

/* ---- im2col + GEMM ---------------------------------------------------------------- */


/* col (c*kh*kw, cnt*oh*ow) from samples s0 .. s0+cnt-1 of x (n, c, h, w):
 * row (ci, ki, kj), column s*oh*ow + oy*ow + ox. */
template <typename T>
__global__ void k_im2col(const float *x, dp_conv2d g, int s0, int cnt, T *col)
{
	size_t ohw = (size_t)g.oh * g.ow, S = (size_t)cnt * ohw;
	size_t total = (size_t)g.c * g.kh * g.kw * S;
	FOR_EACH(i, total) {
		size_t row = i / S, q = i % S;
		int s = (int)(q / ohw), p = (int)(q % ohw);
		int oy = p / g.ow, ox = p % g.ow;
		int kj = (int)(row % g.kw), ki = (int)(row / g.kw % g.kh), ci = (int)(row / g.kw / g.kh);
		int iy = oy * g.sh - g.ph + ki, ix = ox * g.sw - g.pw + kj;
		float v = 0.0f;
		if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w)
			v = x[(((size_t)(s0 + s) * g.c + ci) * g.h + iy) * g.w + ix];
		col[i] = to<T>(v);
	}
}

/* dyt (k, cnt*ohw) from samples s0 .. of dy (n, k, ohw). */
template <typename T>
__global__ void k_chw_to_cnhw(const float *dy, int k, size_t ohw, int s0, int cnt, T *dyt)
{
	size_t S = (size_t)cnt * ohw, total = (size_t)k * S;
	FOR_EACH(i, total) {
		size_t kk = i / S, q = i % S, s = q / ohw, p = q % ohw;
		dyt[i] = to<T>(dy[(((size_t)s0 + s) * k + kk) * ohw + p]);
	}
}

/* The output row (column) of n whose window, stride s, puts the tap at
 * offset t of the padded input: t / s, or -1 when there is none. */
__device__ __forceinline__ int out_at(int t, int s, int n)
{
	return t < 0 || t % s || t / s >= n ? -1 : t / s;
}

/* dx of samples s0 .. (c, h, w each) = the sum of the column entries that
 * read each input position, in (ki, kj) order, as the CPU's col2im adds. */
__global__ void k_col2im(const float *dcol, dp_conv2d g, int s0, int cnt, float *dx)
{
	size_t ohw = (size_t)g.oh * g.ow, S = (size_t)cnt * ohw;
	size_t chw = (size_t)g.c * g.h * g.w, total = (size_t)cnt * chw;
	FOR_EACH(i, total) {
		int s = (int)(i / chw);
		size_t r = i % chw;
		int ci = (int)(r / ((size_t)g.h * g.w)), iy = (int)(r / g.w % g.h), ix = (int)(r % g.w);
		float acc = 0.0f;
		for (int ki = 0; ki < g.kh; ki++) {
			int oy = out_at(iy + g.ph - ki, g.sh, g.oh);
			if (oy < 0)
				continue;
			for (int kj = 0; kj < g.kw; kj++) {
				int ox = out_at(ix + g.pw - kj, g.sw, g.ow);
				if (ox < 0)
					continue;
				size_t row = ((size_t)ci * g.kh + ki) * g.kw + kj;
				acc += dcol[row * S + (size_t)s * ohw + (size_t)oy * g.ow + ox];
			}
		}
		dx[((size_t)s0 + s) * chw + r] = acc;
	}
}


typedef struct gemm_plan {
	int ckk, chunk;
	size_t ohw;
	size_t es;                 /* bytes per GEMM input element: 4, or 2 (bf16) */
	size_t col, dyt, dcol, wb; /* byte offsets in the workspace */
	size_t bytes;
} gemm_plan;

/* Samples per chunk: as many as the budget holds (at least one), and the
 * workspace: columns, transposed dy and column gradient of a chunk, and a
 * bf16 copy of the filters.  The chunk depends on g->n only as a cap, so
 * the workspace sized for the largest batch serves every smaller one. */
static gemm_plan plan_gemm(const dp_bectx *c, const dp_conv2d *g)
{
	gemm_plan p;
	p.ckk = g->c * g->kh * g->kw;
	p.ohw = (size_t)g->oh * g->ow;
	p.es = c->prec == DP_PREC_BF16 ? 2 : 4;
	size_t per = p.ohw * ((size_t)p.ckk * p.es + (size_t)g->k * p.es + (size_t)p.ckk * 4);
	size_t chunk = per ? c->conv_budget / per : 1;
	if (chunk < 1)
		chunk = 1;
	if (chunk > (size_t)g->n)
		chunk = (size_t)g->n > 0 ? (size_t)g->n : 1;
	/* cuBLAS takes int dimensions: the widest matrix has chunk * ohw columns */
	while (chunk > 1 && chunk * p.ohw * (size_t)(p.ckk > g->k ? p.ckk : g->k) > (size_t)INT32_MAX)
		chunk /= 2;
	p.chunk = (int)chunk;
	size_t S = chunk * p.ohw;
	p.col = 0;
	p.dyt = p.col + align256((size_t)p.ckk * S * p.es);
	p.dcol = p.dyt + align256((size_t)g->k * S * p.es);
	p.wb = p.dcol + align256((size_t)p.ckk * S * 4);
	p.bytes = p.wb + (p.es == 2 ? align256((size_t)g->k * p.ckk * 2) : 0);
	return p;
}


template <typename T>
static void im2col(dp_bectx *c, const float *x, const dp_conv2d *g, int s0, int cnt, void *col)
{
	size_t total = (size_t)g->c * g->kh * g->kw * cnt * g->oh * g->ow;
	LAUNCH(k_im2col<T>, grid(total), THREADS, c->s, x, *g, s0, cnt, (T *)col);
	LAUNCHED(c, "im2col");
}

template <typename T>
static void transpose_dy(dp_bectx *c, const float *dy, const dp_conv2d *g, int s0, int cnt,
			 void *dyt)
{
	size_t ohw = (size_t)g->oh * g->ow, total = (size_t)g->k * cnt * ohw;
	LAUNCH(k_chw_to_cnhw<T>, grid(total), THREADS, c->s, dy, g->k, ohw, s0, cnt, (T *)dyt);
	LAUNCHED(c, "transpose");
}

static void gemm_fwd(dp_bectx *c, const dp_conv2d *g, const float *x, const float *w,
			const float *b, float *y, int act, void *ws)
{
	gemm_plan p = plan_gemm(c, g);
	bool lowp = p.es == 2;
	char *base = (char *)ws;
	void *col = base + p.col;
	const void *W = w;
	if (lowp) {
		cu_to_bf16(c, w, (bf16 *)(base + p.wb), (size_t)g->k * p.ckk);
		W = base + p.wb;
	}
	for (int s0 = 0; s0 < g->n; s0 += p.chunk) {
		int cnt = g->n - s0 < p.chunk ? g->n - s0 : p.chunk;
		if (lowp)
			im2col<bf16>(c, x, g, s0, cnt, col);
		else
			im2col<float>(c, x, g, s0, cnt, col);
		/* per sample s: y_s (k, ohw) = w (k, ckk) col_s (ckk, ohw); column-
		 * major y_s^T (ohw, k) = col_s^T (ohw, ckk) w^T (ckk, k), where
		 * col_s is the block of ohw columns at s*ohw of the (ckk, S) matrix */
		int S = (int)((size_t)cnt * p.ohw);
		cu_gemm_batched(c, CUBLAS_OP_N, CUBLAS_OP_N, (int)p.ohw, g->k, p.ckk, col, S,
			     (long long)p.ohw, W, p.ckk, 0, y + (size_t)s0 * g->k * p.ohw, (int)p.ohw,
			     (long long)g->k * p.ohw, cnt, lowp, "convolution");
	}
	cu_bias_act(c, y, (size_t)g->n * g->k * p.ohw, b, g->k, p.ohw, act);
}

static void gemm_bwd(dp_bectx *c, const dp_conv2d *g, const float *x, const float *w,
			const float *y, float *dy, float *dx, float *dw, float *db, int act,
			void *ws)
{
	gemm_plan p = plan_gemm(c, g);
	bool lowp = p.es == 2;
	char *base = (char *)ws;
	void *col = base + p.col, *dyt = base + p.dyt;
	float *dcol = (float *)(base + p.dcol);
	cu_act_grad(c, act, y, dy, dy, (size_t)g->n * g->k * p.ohw);
	if (db)
		cu_chan_sums(c, dy, g->n, g->k, (int)p.ohw, db);
	const void *W = w;
	if (lowp && dx) {
		cu_to_bf16(c, w, (bf16 *)(base + p.wb), (size_t)g->k * p.ckk);
		W = base + p.wb;
	}
	for (int s0 = 0; s0 < g->n; s0 += p.chunk) {
		int cnt = g->n - s0 < p.chunk ? g->n - s0 : p.chunk;
		int S = (int)((size_t)cnt * p.ohw);
		if (lowp) {
			im2col<bf16>(c, x, g, s0, cnt, col);
			transpose_dy<bf16>(c, dy, g, s0, cnt, dyt);
		} else {
			im2col<float>(c, x, g, s0, cnt, col);
			transpose_dy<float>(c, dy, g, s0, cnt, dyt);
		}
		/* dw (k, ckk) += dyt (k, S) col^T (S, ckk); column-major
		 * dw^T (ckk, k) = op_T(col as (S, ckk)) dyt as (S, k) */
		cu_gemm(c, CUBLAS_OP_T, CUBLAS_OP_N, p.ckk, g->k, S, col, S, dyt, S, s0 ? 1.0f : 0.0f, dw,
		     p.ckk, lowp, "convolution weight gradient");
		if (!dx)
			continue;
		/* dcol (ckk, S) = w^T (ckk, k) dyt (k, S); column-major
		 * dcol^T (S, ckk) = dyt as (S, k) op_T(w as (ckk, k)) */
		cu_gemm(c, CUBLAS_OP_N, CUBLAS_OP_T, S, p.ckk, g->k, dyt, S, W, p.ckk, 0.0f, dcol, S,
		     lowp, "convolution input gradient");
		size_t total = (size_t)cnt * g->c * g->h * g->w;
		LAUNCH(k_col2im, grid(total), THREADS, c->s, dcol, *g, s0, cnt, dx);
		LAUNCHED(c, "col2im");
	}
}


/* ---- cuDNN ---------------------------------------------------------------------- */

#ifdef DP_WITH_CUDNN

static bool same_geo(const dp_conv2d *a, const dp_conv2d *b)
{
	return a->n == b->n && a->c == b->c && a->h == b->h && a->w == b->w && a->k == b->k &&
	       a->oh == b->oh && a->ow == b->ow && a->kh == b->kh && a->kw == b->kw &&
	       a->sh == b->sh && a->sw == b->sw && a->ph == b->ph && a->pw == b->pw;
}

static int geo_text(const dp_conv2d *g, char *buf, size_t len)
{
	return snprintf(buf, len, "%dx%dx%dx%d-%dx%dx%d-s%dx%d-p%dx%d", g->n, g->c, g->h, g->w, g->k,
			g->kh, g->kw, g->sh, g->sw, g->ph, g->pw);
}

/* What a record of choices is valid for: "GPU name/cuDNN version/precision" */
static int algos_whose(const dp_bectx *c, char *buf, size_t len)
{
	cudaDeviceProp prop;
	if (cudaGetDeviceProperties(&prop, c->dev) != cudaSuccess)
		prop.name[0] = 0;
	return snprintf(buf, len, "%s/cudnn %zu/%s", prop.name, (size_t)cudnnGetVersion(),
			dp_precision_name(c->prec));
}

/* The algorithms dp_backend_opts.algos gives for g, from a record
 * "WHOSE|SHAPE=F,D,W;..." made on this GPU model, cuDNN and precision (a
 * record of another is no guide, and ignored). */
static bool given_algos(const dp_bectx *c, const dp_conv2d *g, int a[3])
{
	char key[96], whose[400];
	int n = geo_text(g, key, sizeof key), w = algos_whose(c, whose, sizeof whose);
	if (!c->algos || strncmp(c->algos, whose, (size_t)w) || c->algos[w] != '|')
		return false;
	for (const char *p = c->algos + w + 1; *p; p = strchr(p, ';') ? strchr(p, ';') + 1 : "") {
		if (!strncmp(p, key, (size_t)n) && p[n] == '=' &&
		    sscanf(p + n + 1, "%d,%d,%d", &a[0], &a[1], &a[2]) == 3)
			return true;
	}
	return false;
}

/* The FFT and non-fused Winograd algorithms (their numbers in each pass's
 * enum: forward 4, 5, 7; data 2, 3, 5; filter 2, 5, 6) round more than
 * float32 sums do (relative errors near 1e-4 seen on an H200): left out
 * under fp32, whose results must stay those of IEEE float arithmetic. */
static bool inexact(int pass, int algo)
{
	static const int bad[3][3] = {{4, 5, 7}, {2, 3, 5}, {2, 5, 6}};
	for (int i = 0; i < 3; i++)
		if (bad[pass][i] == algo)
			return true;
	return false;
}

/* Choose among perf results (cuDNN's order: fastest first when measured,
 * its heuristic's otherwise): the first that succeeded, is deterministic,
 * exact enough (fp32: not inexact) and fits max; *any the largest
 * workspace of those that qualify. */
template <typename P>
static int pick(const dp_bectx *c, int pass, const P *r, int n, size_t max, size_t *ws, float *ms,
		size_t *any)
{
	int best = -1;
	for (int i = 0; i < n; i++) {
		if (r[i].status != CUDNN_STATUS_SUCCESS || r[i].determinism != CUDNN_DETERMINISTIC ||
		    r[i].memory > max || (c->prec == DP_PREC_FP32 && inexact(pass, (int)r[i].algo)))
			continue;
		if (r[i].memory > *any)
			*any = r[i].memory;
		if (best < 0) {
			best = i;
			*ws = r[i].memory;
			*ms = r[i].time > 0 ? r[i].time : 0;
		}
	}
	return best < 0 ? -1 : (int)r[best].algo;
}

/* (cuDNN's destroy functions take NULL: nothing to do, success) */
static void plan_free(conv_plan *p)
{
	cudnnDestroyTensorDescriptor(p->x);
	cudnnDestroyTensorDescriptor(p->y);
	cudnnDestroyFilterDescriptor(p->w);
	cudnnDestroyConvolutionDescriptor(p->conv);
	memset(p, 0, sizeof *p);
}

/* Descriptors for g; false where cuDNN's output shape is not g's (padding
 * at the bottom or right other than at the top or left). */
static bool plan_describe(dp_bectx *c, const dp_conv2d *g, conv_plan *p)
{
	cudnnDataType_t dt = c->prec == DP_PREC_BF16 && c->nhwc ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
	cudnnTensorFormat_t f = c->nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
	int on, oc, oh, ow;
	if (!ckd(c, cudnnCreateTensorDescriptor(&p->x), "cuDNN") ||
	    !ckd(c, cudnnCreateTensorDescriptor(&p->y), "cuDNN") ||
	    !ckd(c, cudnnCreateFilterDescriptor(&p->w), "cuDNN") ||
	    !ckd(c, cudnnCreateConvolutionDescriptor(&p->conv), "cuDNN") ||
	    !ckd(c, cudnnSetTensor4dDescriptor(p->x, f, dt, g->n, g->c, g->h, g->w), "cuDNN tensor") ||
	    !ckd(c, cudnnSetFilter4dDescriptor(p->w, dt, f, g->k, g->c, g->kh, g->kw), "cuDNN filter") ||
	    !ckd(c, cudnnSetConvolution2dDescriptor(p->conv, g->ph, g->pw, g->sh, g->sw, 1, 1,
						    CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
		 "cuDNN convolution") ||
	    !ckd(c, cudnnSetConvolutionMathType(p->conv, c->prec == DP_PREC_FP32 ? CUDNN_FMA_MATH
									       : CUDNN_TENSOR_OP_MATH),
		 "cuDNN math") ||
	    !ckd(c, cudnnGetConvolution2dForwardOutputDim(p->conv, p->x, p->w, &on, &oc, &oh, &ow),
		 "cuDNN output shape"))
		return false;
	if (oh != g->oh || ow != g->ow)
		return false;
	return ckd(c, cudnnSetTensor4dDescriptor(p->y, f, dt, g->n, g->k, g->oh, g->ow), "cuDNN tensor");
}

/* The workspace a plan's filters take under nhwc: the converted filters
 * and their gradient, before cuDNN's own. */
static size_t filter_bytes(const dp_bectx *c, const dp_conv2d *g)
{
	return c->nhwc ? 2 * align256(nhwc_bytes(c, (size_t)g->k * g->c * g->kh * g->kw)) : 0;
}

/* ---- filters kept from the forward pass for the backward ------------------------
 * Under nhwc both passes read the filters channels-last in the activation
 * type, (k, kh, kw, c): the forward converts the float32 master weights
 * into a slot of their own (found by their address), and the backward's
 * data gradient reads that conversion where it is still current rather
 * than making its own (one pass over the filters and a launch fewer per
 * layer and step).  Current: converted since the optimizer last changed
 * weights (dp_bectx.wgen), as nothing else writes a layer's weights
 * between its forward and its backward; each forward converts anew
 * whatever wrote the weights before it (an upload, another rank's).  A
 * layer's slot is made by its first backward pass, so that a context that
 * only infers holds none.  Where no slot can be had (NFILT of them,
 * FILT_MAX bytes in all, or no memory) the filters are converted into the
 * workspace at each pass. */

static filt_slot *filt_slot_of(dp_bectx *c, const float *w, const dp_conv2d *g, bool make)
{
	size_t bytes = nhwc_bytes(c, (size_t)g->k * g->c * g->kh * g->kw);
	if (!c->filt && (!make || !(c->filt = (filt_slot *)calloc(NFILT, sizeof *c->filt))))
		return NULL;
	filt_slot *f = NULL;
	for (int i = 0; i < c->nfilt && !f; i++)
		if (c->filt[i].w == w)
			f = &c->filt[i];
	if (!f) {
		if (!make || c->nfilt == NFILT)
			return NULL;
		f = &c->filt[c->nfilt++];
		f->w = w;
	}
	if (f->k != g->k || f->c != g->c || f->kh != g->kh || f->kw != g->kw) {
		f->k = g->k, f->c = g->c, f->kh = g->kh, f->kw = g->kw;
		f->valid = 0;
	}
	if (f->cap < bytes) { /* new, or the address reused for larger filters */
		void *p = NULL;
		if (c->filt_bytes - f->cap + bytes > FILT_MAX)
			return NULL;
		if (cudaMalloc(&p, bytes) != cudaSuccess) {
			cudaGetLastError();
			return NULL;
		}
		cudaFree(f->buf); /* waits for the device: NULL, or after a re-bind */
		c->filt_bytes += bytes - f->cap;
		f->buf = p;
		f->cap = bytes;
		f->valid = 0;
	}
	return f;
}

/* w channels-last for a forward pass (fwd, converted) or a backward one
 * (the forward's conversion where current): in its slot, else in wt */
static const void *conv_filters(dp_bectx *c, const float *w, const dp_conv2d *g, void *wt, bool fwd)
{
	/* made by a backward pass: a context that only infers (dp-eval,
	 * dp-serve) keeps none */
	filt_slot *f = filt_slot_of(c, w, g, !fwd);
	if (!f) {
		nhwc_filter(c, w, g, wt);
		return wt;
	}
	if (fwd || !f->valid || f->gen != c->wgen) {
		nhwc_filter(c, w, g, f->buf);
		f->valid = 1;
		f->gen = c->wgen;
	}
	return f->buf;
}

static void filt_free(dp_bectx *c)
{
	for (int i = 0; c->filt && i < c->nfilt; i++)
		cudaFree(c->filt[i].buf);
	free(c->filt);
	c->filt = NULL;
	c->nfilt = 0;
	c->filt_bytes = 0;
}

enum { NALGO = 16 };

/* Take the given algorithms a for p if cuDNN knows them for its shape
 * and their workspace fits max (nothing changed otherwise). */
static bool take_given(dp_bectx *c, conv_plan *p, const int a[3], size_t max)
{
	size_t wf, wd, ww;
	if (cudnnGetConvolutionForwardWorkspaceSize(c->dnn, p->x, p->w, p->conv, p->y,
						    (cudnnConvolutionFwdAlgo_t)a[0], &wf) != CUDNN_STATUS_SUCCESS ||
	    cudnnGetConvolutionBackwardDataWorkspaceSize(c->dnn, p->w, p->y, p->conv, p->x,
							 (cudnnConvolutionBwdDataAlgo_t)a[1], &wd) != CUDNN_STATUS_SUCCESS ||
	    cudnnGetConvolutionBackwardFilterWorkspaceSize(c->dnn, p->x, p->y, p->conv, p->w,
							   (cudnnConvolutionBwdFilterAlgo_t)a[2], &ww) != CUDNN_STATUS_SUCCESS ||
	    wf > max || wd > max || ww > max)
		return false;
	p->fwd = (cudnnConvolutionFwdAlgo_t)a[0];
	p->bwd_data = (cudnnConvolutionBwdDataAlgo_t)a[1];
	p->bwd_filter = (cudnnConvolutionBwdFilterAlgo_t)a[2];
	p->ws_fwd = wf, p->ws_data = wd, p->ws_filter = ww;
	size_t m = wf > wd ? wf : wd;
	if (m < ww)
		m = ww;
	if (m > p->ws_any)
		p->ws_any = m;
	return true;
}

static bool plan_choose(dp_bectx *c, const dp_conv2d *g, conv_plan *p, size_t max)
{
	int a[3] = {-1, -1, -1}, n = 0;
	if (given_algos(c, g, a) && take_given(c, p, a, max))
		return true; /* else chosen here, as if none were given */
	cudnnConvolutionFwdAlgoPerf_t rf[NALGO];
	cudnnConvolutionBwdDataAlgoPerf_t rd[NALGO];
	cudnnConvolutionBwdFilterAlgoPerf_t rw[NALGO];
	/* pinned: cuDNN's heuristics; else timed, cuDNN allocating what it
	 * times on: the queue must be idle */
	if (!c->pinned)
		ck(c, cudaStreamSynchronize(c->s), "synchronize");
	if (!(c->pinned ? ckd(c, cudnnGetConvolutionForwardAlgorithm_v7(c->dnn, p->x, p->w, p->conv, p->y, NALGO, &n, rf), "cuDNN heuristics")
			: ckd(c, cudnnFindConvolutionForwardAlgorithm(c->dnn, p->x, p->w, p->conv, p->y, NALGO, &n, rf), "cuDNN: timing the forward algorithms")))
		return false;
	a[0] = pick(c, 0, rf, n, max, &p->ws_fwd, &p->ms[0], &p->ws_any);
	if (!(c->pinned ? ckd(c, cudnnGetConvolutionBackwardDataAlgorithm_v7(c->dnn, p->w, p->y, p->conv, p->x, NALGO, &n, rd), "cuDNN heuristics")
			: ckd(c, cudnnFindConvolutionBackwardDataAlgorithm(c->dnn, p->w, p->y, p->conv, p->x, NALGO, &n, rd), "cuDNN: timing the data gradient algorithms")))
		return false;
	a[1] = pick(c, 1, rd, n, max, &p->ws_data, &p->ms[1], &p->ws_any);
	if (!(c->pinned ? ckd(c, cudnnGetConvolutionBackwardFilterAlgorithm_v7(c->dnn, p->x, p->y, p->conv, p->w, NALGO, &n, rw), "cuDNN heuristics")
			: ckd(c, cudnnFindConvolutionBackwardFilterAlgorithm(c->dnn, p->x, p->y, p->conv, p->w, NALGO, &n, rw), "cuDNN: timing the filter gradient algorithms")))
		return false;
	a[2] = pick(c, 2, rw, n, max, &p->ws_filter, &p->ms[2], &p->ws_any);
	if (a[0] < 0 || a[1] < 0 || a[2] < 0)
		return false; /* none deterministic within the bound: im2col */
	p->fwd = (cudnnConvolutionFwdAlgo_t)a[0];
	p->bwd_data = (cudnnConvolutionBwdDataAlgo_t)a[1];
	p->bwd_filter = (cudnnConvolutionBwdFilterAlgo_t)a[2];
	return true;
}

/* The most cuDNN workspace a shape first met in a pass may take: the
 * caller's workspace was sized by conv_ws for its largest batch (other
 * batch sizes, a last short batch, evaluation, are planned when met), so
 * what conv_ws reported, less the shape's filters, within ws_max */
static size_t pass_room(const dp_bectx *c, const dp_conv2d *g)
{
	/* the caller's workspace holds what conv_ws said for this layer at the
	 * batch it sized (the least of several: dp-eval binds its models on
	 * one context); ws_cap, the context's most, for a layer never sized */
	size_t room = c->ws_cap;
	for (int i = 0; i < c->nplan; i++) {
		dp_conv2d s = c->plan[i].g;
		s.n = g->n;
		if (c->plan[i].sized && c->plan[i].room && c->plan[i].g.n >= g->n && same_geo(&s, g) &&
		    c->plan[i].room < room)
			room = c->plan[i].room;
	}
	size_t fb = filter_bytes(c, g), cap = room > fb ? room - fb : 0;
	return c->ws_cap && cap < c->ws_max ? cap : c->ws_max;
}

/* g's plan, made at its first use (sizing: by conv_ws, its algorithms'
 * workspace within ws_max; else within pass_room); NULL: im2col for this
 * shape */
static conv_plan *plan_for(dp_bectx *c, const dp_conv2d *g, bool sizing)
{
	if (!c->dnn || c->conv_algo == 1)
		return NULL;
	c->plan_clock++;
	for (int i = 0; i < c->nplan; i++)
		if (same_geo(&c->plan[i].g, g)) {
			c->plan[i].last = c->plan_clock;
			c->plan[i].sized |= sizing;
			return c->plan[i].used ? &c->plan[i] : NULL;
		}
	size_t max = sizing ? c->ws_max : pass_room(c, g); /* (before a slot is taken) */
	conv_plan *p = NULL;
	if (c->nplan < NPLAN) {
		p = &c->plan[c->nplan++];
	} else { /* full (a server's batches of every size): the shape a pass
		  * met least recently goes, not one conv_ws sized */
		for (int i = 0; i < c->nplan; i++)
			if (!c->plan[i].sized && (!p || c->plan[i].last < p->last))
				p = &c->plan[i];
		if (!p) {
			cu_fail(c, "cuDNN", "more than 256 convolution shapes");
			return NULL;
		}
		plan_free(p);
	}
	memset(p, 0, sizeof *p);
	p->g = *g;
	p->last = c->plan_clock;
	p->sized = sizing;
	if (plan_describe(c, g, p) && plan_choose(c, g, p, max)) {
		p->used = 1;
		return p;
	}
	conv_plan keep = *p;
	plan_free(p); /* a shape for im2col: remembered as such */
	p->g = keep.g;
	p->last = keep.last;
	p->sized = keep.sized;
	return NULL;
}

int cu_conv_algos(dp_bectx *c, char *buf, size_t len)
{
	size_t at = 0;
	int any = 0;
	if (len)
		buf[0] = 0;
	for (int i = 0; i < c->nplan; i++) {
		conv_plan *p = &c->plan[i];
		if (!p->used)
			continue;
		char key[96], whose[400];
		if (!any++) {
			algos_whose(c, whose, sizeof whose);
			at += (size_t)snprintf(buf, len, "%s|", whose);
		}
		geo_text(&p->g, key, sizeof key);
		int n = snprintf(buf + at, at < len ? len - at : 0, "%s%s=%d,%d,%d",
				 buf[at - 1] == '|' ? "" : ";", key, (int)p->fwd, (int)p->bwd_data,
				 (int)p->bwd_filter);
		at += (size_t)n;
	}
	return at < len ? (int)at : -1;
}

/* Another rank's choices (or a checkpoint's) for the shapes planned
 * already, where they fit the workspace conv_ws reported; the record kept
 * for shapes to come.  The number of shapes whose choice changed. */
int cu_conv_algos_take(dp_bectx *c, const char *algos)
{
	if (!c->dnn)
		return 0;
	if (be_conv_algos_keep(&c->algos, algos) < 0)
		return -1;
	int changed = 0, a[3];
	for (int i = 0; i < c->nplan; i++) {
		conv_plan *p = &c->plan[i];
		if (!p->used || !given_algos(c, &p->g, a))
			continue;
		if (a[0] == (int)p->fwd && a[1] == (int)p->bwd_data && a[2] == (int)p->bwd_filter)
			continue;
		changed += take_given(c, p, a, pass_room(c, &p->g));
	}
	return changed;
}

int cu_conv_open(dp_bectx *c, const dp_backend_opts *o, dp_err *e)
{
	c->ws_max = CUDNN_WS_MAX;
	const char *wm = dp_setting("DP_CUDNN_WS_MAX");
	if (wm && atoll(wm) > 0)
		c->ws_max = (size_t)atoll(wm);
	if (c->conv_algo == 1)
		return DP_OK;
	cudnnStatus_t r = cudnnCreate(&c->dnn);
	if (r == CUDNN_STATUS_SUCCESS)
		r = cudnnSetStream(c->dnn, c->s);
	if (r != CUDNN_STATUS_SUCCESS)
		return dp_seterr(e, DP_EIO, "GPU %d: cuDNN: %s", c->dev, cudnnGetErrorString(r));
	if (!(c->plan = (conv_plan *)calloc(NPLAN, sizeof *c->plan)))
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	if (o && o->algos && !(c->algos = strdup(o->algos)))
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	c->pinned = o && o->deterministic;
	c->nhwc = c->prec != DP_PREC_FP32;
	return DP_OK;
}

void cu_conv_close(dp_bectx *c)
{
	for (int i = 0; c->plan && i < c->nplan; i++)
		plan_free(&c->plan[i]);
	free(c->plan);
	filt_free(c);
	free(c->algos);
	if (c->dnn)
		cudnnDestroy(c->dnn);
}

/* What conv_ws reported for g, kept on its entry (a cuDNN plan or im2col's)
 * for pass_room */
static void plan_room(dp_bectx *c, const dp_conv2d *g, size_t ws)
{
	for (int i = 0; i < c->nplan; i++)
		if (same_geo(&c->plan[i].g, g))
			c->plan[i].room = ws;
}

#else /* no cuDNN in this build: im2col for every shape */

static conv_plan *plan_for(dp_bectx *c, const dp_conv2d *g, bool sizing) { return NULL; }
static void plan_room(dp_bectx *c, const dp_conv2d *g, size_t ws) {}
int cu_conv_algos(dp_bectx *c, char *buf, size_t len)
{
	if (len)
		buf[0] = 0;
	return 0;
}
int cu_conv_open(dp_bectx *c, const dp_backend_opts *o, dp_err *e) { return DP_OK; }
int cu_conv_algos_take(dp_bectx *c, const char *algos) { return 0; }
void cu_conv_close(dp_bectx *c) {}
static size_t filter_bytes(const dp_bectx *c, const dp_conv2d *g) { return 0; }

#endif

/* ---- the backend's calls ------------------------------------------------------------ */

/* channels-last bfloat16 of channel counts cuDNN's data gradient refuses */
static bool bf16_unaligned(const dp_bectx *c, const dp_conv2d *g)
{
	return c->nhwc && c->prec == DP_PREC_BF16 && (g->c % 8 || g->k % 8);
}

size_t cu_conv_ws(dp_bectx *c, const dp_conv2d *g)
{
	cu_use(c);
	conv_plan *p = plan_for(c, g, true);
	size_t ws = p ? filter_bytes(c, g) + p->ws_any : plan_gemm(c, g).bytes;
	if (p && bf16_unaligned(c, g) && plan_gemm(c, g).bytes > ws)
		ws = plan_gemm(c, g).bytes; /* its backward may go through im2col */
	if (ws > c->ws_cap)
		c->ws_cap = ws;
	plan_room(c, g, ws);
	return ws;
}

/* im2col for a shape cuDNN cannot do, under nhwc: x converted to NCHW
 * float32, y converted back (scratch: x, then y) */
static void gemm_fwd_nhwc(dp_bectx *c, const dp_conv2d *g, const float *x, const float *w,
			  const float *b, float *y, int act, void *ws)
{
	size_t xn = (size_t)g->n * g->c * g->h * g->w, yn = (size_t)g->n * g->k * g->oh * g->ow;
	char *s = (char *)cu_scratch(c, align256(xn * 4) + yn * 4);
	if (!s)
		return;
	const nhwc_tag *t = tag_of(c, x);
	const float *xs = x;
	if (t) {
		nhwc_to_nchw(c, x, t, (float *)s);
		xs = (const float *)s;
	}
	float *ys = (float *)(s + align256(xn * 4));
	gemm_fwd(c, g, xs, w, b, ys, act, ws);
	nhwc_from_nchw(c, ys, g->n, g->k, g->oh, g->ow, y);
	tag_set(c, y, g->n, g->k, g->oh, g->ow);
}

static void gemm_bwd_nhwc(dp_bectx *c, const dp_conv2d *g, const float *x, const float *w,
			  const float *y, float *dy, float *dx, float *dw, float *db, int act, void *ws)
{
	size_t xn = (size_t)g->n * g->c * g->h * g->w, yn = (size_t)g->n * g->k * g->oh * g->ow;
	char *s = (char *)cu_scratch(c, 3 * align256(xn * 4) + 2 * align256(yn * 4));
	if (!s)
		return;
	float *xs = (float *)s, *dxs = (float *)(s + align256(xn * 4)),
	      *ys = (float *)(s + 2 * align256(xn * 4)),
	      *dys = (float *)(s + 2 * align256(xn * 4) + align256(yn * 4));
	const nhwc_tag *tx = tag_of(c, x), *ty = tag_of(c, y), *td = tag_of(c, dy);
	if (tx)
		nhwc_to_nchw(c, x, tx, xs);
	else
		ck(c, cudaMemcpyAsync(xs, x, xn * 4, cudaMemcpyDeviceToDevice, c->s), "copy");
	if (ty)
		nhwc_to_nchw(c, y, ty, ys);
	if (td)
		nhwc_to_nchw(c, dy, td, dys);
	else
		ck(c, cudaMemcpyAsync(dys, dy, yn * 4, cudaMemcpyDeviceToDevice, c->s), "copy");
	gemm_bwd(c, g, xs, w, ty ? ys : y, dys, dx ? dxs : NULL, dw, db, act, ws);
	if (dx) {
		if (tx) {
			nhwc_from_nchw(c, dxs, g->n, g->c, g->h, g->w, dx);
			tag_set(c, dx, g->n, g->c, g->h, g->w);
		} else {
			ck(c, cudaMemcpyAsync(dx, dxs, xn * 4, cudaMemcpyDeviceToDevice, c->s), "copy");
			tag_drop(c, dx);
		}
	}
}

#ifdef DP_WITH_CUDNN
/* cuDNN's three passes with plan p, workspace cws, each a kind of its own
 * in DP_CUDA_PROFILE (the host time of cuDNN's call alone) */
static void cudnn_fwd(dp_bectx *c, const conv_plan *p, const void *x, const void *w, void *y,
		      void *cws)
{
	const float one = 1.0f, zero = 0.0f;
	PROF_PART(c, "cudnn forward");
	ckd(c, cudnnConvolutionForward(c->dnn, &one, p->x, x, p->w, w, p->conv, p->fwd, cws, p->ws_fwd,
				       &zero, p->y, y),
	    "cuDNN convolution");
}

static void cudnn_filter_grad(dp_bectx *c, const conv_plan *p, const void *x, const void *dy,
			      void *dw, void *cws)
{
	const float one = 1.0f, zero = 0.0f;
	PROF_PART(c, "cudnn filter gradient");
	ckd(c, cudnnConvolutionBackwardFilter(c->dnn, &one, p->x, x, p->y, dy, p->conv, p->bwd_filter,
					      cws, p->ws_filter, &zero, p->w, dw),
	    "cuDNN filter gradient");
}

static void cudnn_data_grad(dp_bectx *c, const conv_plan *p, const void *w, const void *dy,
			    void *dx, void *cws)
{
	const float one = 1.0f, zero = 0.0f;
	PROF_PART(c, "cudnn data gradient");
	ckd(c, cudnnConvolutionBackwardData(c->dnn, &one, p->w, w, p->y, dy, p->conv, p->bwd_data, cws,
					    p->ws_data, &zero, p->x, dx),
	    "cuDNN data gradient");
}
#endif

void cu_conv_fwd(dp_bectx *c, const dp_conv2d *g, const float *x, const float *w, const float *b,
		 float *y, int act, void *ws)
{
	cu_use(c);
	PROF(c, "convolution");
	conv_plan *p = plan_for(c, g, false);
	if (!p) {
		if (c->nhwc)
			gemm_fwd_nhwc(c, g, x, w, b, y, act, ws);
		else
			gemm_fwd(c, g, x, w, b, y, act, ws);
		return;
	}
#ifdef DP_WITH_CUDNN
	char *base = (char *)ws, *cws = base + filter_bytes(c, g);
	if (!c->nhwc) {
		cudnn_fwd(c, p, x, w, y, cws);
		cu_bias_act(c, y, (size_t)g->n * g->k * g->oh * g->ow, b, g->k, (size_t)g->oh * g->ow, act);
		return;
	}
	size_t xn = (size_t)g->n * g->c * g->h * g->w;
	const void *wt = conv_filters(c, w, g, base, true);
	const void *xs = nhwc_in(c, x, g->n, g->c, g->h, g->w,
				 tag_of(c, x) ? NULL : cu_scratch(c, nhwc_bytes(c, xn)));
	cudnn_fwd(c, p, xs, wt, y, cws);
	nhwc_bias_act(c, y, (size_t)g->n * g->oh * g->ow, g->k, b, act);
	tag_set(c, y, g->n, g->k, g->oh, g->ow);
#endif
}

void cu_conv_bwd(dp_bectx *c, const dp_conv2d *g, const float *x, const float *w, const float *y,
		 float *dy, float *dx, float *dw, float *db, int act, void *ws)
{
	cu_use(c);
	PROF(c, "convolution backward");
	conv_plan *p = plan_for(c, g, false);
	/* cuDNN refuses (CUDNN_STATUS_BAD_PARAM, seen on an H200 with cuDNN
	 * 9.14) the bfloat16 channels-last data gradient of channel counts not
	 * a multiple of 8, which its forward pass and filter gradient take:
	 * such layers (a few channels: never a network's large ones) go
	 * through im2col */
	if (p && dx && bf16_unaligned(c, g))
		p = NULL;
	if (!p) {
		if (c->nhwc)
			gemm_bwd_nhwc(c, g, x, w, y, dy, dx, dw, db, act, ws);
		else
			gemm_bwd(c, g, x, w, y, dy, dx, dw, db, act, ws);
		return;
	}
#ifdef DP_WITH_CUDNN
	char *base = (char *)ws, *cws = base + filter_bytes(c, g);
	size_t ohw = (size_t)g->oh * g->ow, yn = (size_t)g->n * g->k * ohw;
	if (!c->nhwc) {
		cu_act_grad(c, act, y, dy, dy, yn);
		if (db)
			cu_chan_sums(c, dy, g->n, g->k, (int)ohw, db);
		cudnn_filter_grad(c, p, x, dy, dw, cws);
		if (dx)
			cudnn_data_grad(c, p, w, dy, dx, cws);
		return;
	}
	/* scratch: dy converted, x converted (then dx before its conversion),
	 * y converted (for act), the bias gradient's sums; a tensor that
	 * comes as NCHW float32 (from upload) is converted */
	size_t xn = (size_t)g->n * g->c * g->h * g->w, rows = (size_t)g->n * ohw;
	const nhwc_tag *tx = tag_of(c, x), *td = tag_of(c, dy), *ty = tag_of(c, y);
	size_t a = td ? 0 : align256(nhwc_bytes(c, yn)), bx = tx ? 0 : align256(nhwc_bytes(c, xn));
	size_t by = ty || !act ? 0 : align256(nhwc_bytes(c, yn));
	char *s = (char *)cu_scratch(c, a + bx + by + (db ? nhwc_chan_scratch(rows, g->k) : 0) + 256);
	if (!s)
		return;
	void *d = (void *)nhwc_in(c, dy, g->n, g->k, g->oh, g->ow, s);
	const void *xs = nhwc_in(c, x, g->n, g->c, g->h, g->w, s + a);
	/* cuDNN's two gradients read dy times act'(y): written here, in the
	 * pass that sums the bias gradient where there is one */
	const void *ys = act ? nhwc_in(c, y, g->n, g->k, g->oh, g->ow, s + a + bx) : NULL;
	if (!act || !db || !nhwc_act_grad_sums(c, act, ys, d, rows, g->k, db, s + a + bx + by)) {
		if (act)
			nhwc_act_grad(c, act, ys, d, d, yn);
		if (db)
			nhwc_chan_sums(c, d, rows, g->k, db, s + a + bx + by);
	}
	size_t fb = filter_bytes(c, g) / 2;
	void *dwt = base + fb;
	cudnn_filter_grad(c, p, xs, d, dwt, cws);
	nhwc_filter_grad(c, dwt, g, dw);
	if (!dx)
		return;
	const void *wt = conv_filters(c, w, g, base, false);
	void *dxs = tx ? (void *)dx : (void *)(s + a); /* x's conversion is read by now */
	cudnn_data_grad(c, p, wt, d, dxs, cws);
	if (tx) {
		tag_set(c, dx, g->n, g->c, g->h, g->w);
	} else {
		nhwc_tag t = {dxs, g->n, g->c, g->h, g->w};
		nhwc_to_nchw(c, dxs, &t, dx);
		tag_drop(c, dx);
	}
#endif
}
