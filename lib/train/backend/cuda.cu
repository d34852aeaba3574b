/*
 * cuda.cu - the CUDA backend: cuDNN convolutions, cuBLAS GEMMs and small
 * kernels, one GPU per process (see dp_backend.h for the contract; make
 * BACKEND=cuda).  Its parts, sharing cuda_impl.h: this file (the context,
 * memory, streams, GEMMs, activations, dense layers, the table),
 * cuda_ops.cu (pooling, dropout, batchnorm, losses, optimizers),
 * cuda_conv.cu (convolutions), cuda_nhwc.cu and cuda_nhwc_layers.cu (the
 * channels-last activations of tf32 and bf16), cuda_prof.cu (where the
 * GPU's time goes).
 *
 * It follows the CPU reference (lib/train/backend/cpu.c) operation by operation,
 * so that tests/unit/cuda.c can hold every layer to it:
 *  - dense layers are one GEMM each way over the whole batch, bias and
 *    activation in one pass after it;
 *  - convolutions are cuDNN's (cuda_conv.cu), im2col + GEMM without it;
 *  - pooling backward, bias gradients, batch-norm statistics and loss sums
 *    are gathers and fixed-shape tree reductions, never atomics: the same
 *    inputs give the same bits, run after run (cuBLAS promises the same
 *    for one GPU model and toolkit);
 *  - elementwise code is compiled without FMA contraction (--fmad=false in
 *    the Makefile), as the CPU file is with -ffp-contract=off, so the
 *    optimizer updates give the CPU's bits from the same inputs; only
 *    tanhf/expf (within 2 ulp) and GEMM summation orders differ.
 * Precision (dp_backend_opts.precision): fp32 is IEEE float throughout;
 * tf32 lets cuBLAS and cuDNN round GEMM inputs to TF32 on tensor cores;
 * bf16 feeds GEMMs bfloat16 copies of their inputs with float32
 * accumulation.  Under tf32 and bf16 with cuDNN, the activations of
 * convolutional layers are channels-last (cuda_nhwc.cu), in bfloat16 under
 * bf16, as PyTorch's AMP with channels_last; master weights, gradients,
 * batchnorm statistics, losses and optimizer state stay float32.
 *
 * Streams: all work is queued in order on one compute stream.  stage()
 * copies input batches on a second stream into one of two buffers in turn,
 * so that the copy of batch t+1 runs while the GPU still works on batch t
 * (pinned host memory from host_alloc makes the copy asynchronous); events
 * order the two streams.  upload/download wait for the copy (their host
 * buffer is free on return); sync() reports the first CUDA or cuBLAS
 * failure of anything queued before it.
 *
 * Device: opts->device, else the local rank (OMPI_COMM_WORLD_LOCAL_RANK,
 * MPI_LOCALRANKID, SLURM_LOCALID, ...) modulo the visible devices, so
 * `mpirun -np 8` on an 8-GPU host gives each rank its own GPU and ranks
 * beyond the count share them round-robin.
 */
#include "cuda_impl.h"

/* ---- errors ---------------------------------------------------------------- */

void cu_fail(dp_bectx *c, const char *what, const char *why)
{
	if (c->failed)
		return;
	c->failed = 1;
	snprintf(c->msg, sizeof c->msg, "GPU %d: %s: %s", c->dev, what, why);
}

static bool ckb(dp_bectx *c, cublasStatus_t r, const char *what)
{
	if (r == CUBLAS_STATUS_SUCCESS)
		return true;
	cu_fail(c, what, cublasGetStatusString(r));
	return false;
}

static thread_local int tl_dev = -1;
void cu_use(dp_bectx *c)
{
	if (tl_dev != c->dev) {
		cudaSetDevice(c->dev);
		tl_dev = c->dev;
	}
}

void *cu_scratch(dp_bectx *c, size_t bytes)
{
	if (bytes <= c->scratch_cap)
		return c->scratch;
	ck(c, cudaStreamSynchronize(c->s), "synchronize");
	cudaFree(c->scratch);
	c->scratch = NULL;
	c->scratch_cap = 0;
	size_t cap = bytes + bytes / 4 + 4096;
	if (!ck(c, cudaMalloc(&c->scratch, cap), "scratch memory"))
		return NULL;
	c->scratch_cap = cap;
	return c->scratch;
}

/* ---- small kernels ------------------------------------------------------- */

__global__ void k_fill(float *p, float v, size_t n)
{
	FOR_EACH(i, n) p[i] = v;
}

__global__ void k_scale(float *p, float s, size_t n)
{
	FOR_EACH(i, n) p[i] *= s;
}

/* part[b] = the sum of x[i]^2 over block b's grid-stride share of x[0, n),
 * in double, its threads' sums added as a tree; then (one block) *tot = the
 * parts' sum: an order fixed by the grid, the same bits on every run and
 * rank */
__global__ void k_sumsq_part(const float *x, size_t n, double *part)
{
	double s = 0;
	FOR_EACH(i, n) s += (double)x[i] * x[i];
	s = block_sum(s);
	if (threadIdx.x == 0)
		part[blockIdx.x] = s;
}

__global__ void k_sum_parts(const double *part, int nb, double *tot)
{
	double s = 0;
	for (int b = (int)threadIdx.x; b < nb; b += THREADS)
		s += part[b];
	s = block_sum(s);
	if (threadIdx.x == 0)
		*tot = s;
}

__global__ void k_to_bf16(const float *x, bf16 *y, size_t n)
{
	FOR_EACH(i, n) y[i] = __float2bfloat16(x[i]);
}

/* y = act(y + b[channel]) with channel = (i / inner) % nb: a dense
 * layer's rows (inner 1) or a convolution's NCHW output (inner oh*ow). */
__global__ void k_bias_act(float *y, size_t n, const float *b, int nb, size_t inner, int act)
{
	FOR_EACH(i, n) y[i] = act_f(act, y[i] + b[(i / inner) % (size_t)nb]);
}

__global__ void k_act(const float *x, float *y, size_t n, int act)
{
	FOR_EACH(i, n) y[i] = act_f(act, x[i]);
}

__global__ void k_act_grad(const float *y, const float *dy, float *dx, size_t n, int act)
{
	FOR_EACH(i, n) dx[i] = act_g(act, y[i], dy[i]);
}

__global__ void k_add(const float *a, const float *b, float *y, size_t n, int act)
{
	FOR_EACH(i, n) y[i] = act_f(act, a[i] + b[i]);
}

/* out[j] = the sum of column j of x (rows, cols): 32 columns per block,
 * 8 partial sums per column in a fixed order. */
__global__ void k_col_sums(const float *x, int rows, int cols, float *out)
{
	__shared__ float sh[8][33];
	int j = blockIdx.x * 32 + threadIdx.x;
	float acc = 0.0f;
	if (j < cols)
		for (int r = threadIdx.y; r < rows; r += 8)
			acc += x[(size_t)r * cols + j];
	sh[threadIdx.y][threadIdx.x] = acc;
	__syncthreads();
	if (threadIdx.y == 0 && j < cols) {
		float s = 0.0f;
		for (int t = 0; t < 8; t++)
			s += sh[t][threadIdx.x];
		out[j] = s;
	}
}

/* out[c] = the sum over samples s and positions p of x (n, k, hw): one
 * block per channel (a convolution's bias gradient). */
__global__ void k_chan_sums(const float *x, int n, int k, int hw, float *out)
{
	int c = blockIdx.x;
	size_t m = (size_t)n * hw;
	float acc = 0.0f;
	for (size_t i = threadIdx.x; i < m; i += THREADS) {
		size_t s = i / (size_t)hw, p = i % (size_t)hw;
		acc += x[(s * k + c) * hw + p];
	}
	acc = block_sum(acc);
	if (threadIdx.x == 0)
		out[c] = acc;
}

void cu_chan_sums(dp_bectx *c, const float *x, int n, int k, int hw, float *out)
{
	LAUNCH(k_chan_sums, k, THREADS, c->s, x, n, k, hw, out);
	LAUNCHED(c, "convolution bias gradient");
}

/* ---- open and close --------------------------------------------------------- */

/* The rank of this process among those on its host, from the launcher. */
static int local_rank(void)
{
	static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
					   "MV2_COMM_WORLD_LOCAL_RANK", "PMI_LOCAL_RANK",
					   "SLURM_LOCALID", "LOCAL_RANK"};
	for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
		const char *v = dp_env(vars[i]);
		char *end;
		long r = v && *v ? strtol(v, &end, 10) : -1;
		if (v && *v && !*end && r >= 0 && r < (1 << 20))
			return (int)r;
	}
	return 0;
}

static void cu_close(dp_bectx *c)
{
	if (!c)
		return;
	cu_use(c);
	if (c->s)
		cudaStreamSynchronize(c->s);
	if (c->cs)
		cudaStreamSynchronize(c->cs);
	cu_prof_close(c);
	for (int i = 0; i < c->nst; i++) {
		cudaFree(c->st[i].alt);
		cudaEventDestroy(c->st[i].freed[0]);
		cudaEventDestroy(c->st[i].freed[1]);
		cudaEventDestroy(c->st[i].ready);
	}
	cudaFree(c->scratch);
	for (int i = 0; i < 3; i++)
		cudaFree(c->flat[i]);
	cu_conv_close(c);
	if (c->blas)
		cublasDestroy(c->blas);
	if (c->fetched)
		cudaEventDestroy(c->fetched);
	if (c->cs)
		cudaStreamDestroy(c->cs);
	if (c->s)
		cudaStreamDestroy(c->s);
	free(c);
}

static int cu_open(dp_bectx **ctx, const dp_backend_opts *o, char *desc, size_t desc_len,
		   dp_err *e)
{
	int count = 0, prec = o ? o->precision : DP_PREC_FP32;
	cudaError_t r = cudaGetDeviceCount(&count);
	if (r != cudaSuccess || count == 0) {
		int drv = 0;
		cudaDriverGetVersion(&drv);
		cudaGetLastError();
		return dp_seterr(e, DP_ENOTFOUND, "no CUDA device: %s",
				 !drv		   ? "no NVIDIA driver loaded (libcuda.so.1 not found)"
				 : r != cudaSuccess ? cudaGetErrorString(r)
						    : "the driver sees none (CUDA_VISIBLE_DEVICES?)");
	}
	if (prec < DP_PREC_FP32 || prec > DP_PREC_BF16)
		return dp_seterr(e, DP_EARG, "unknown precision %d", prec);
	int want = o && o->device >= 0 ? o->device : -1;
	if (want >= count)
		return dp_seterr(e, DP_EARG, "GPU %d: only %d CUDA device%s visible%s%s", want, count,
				 count == 1 ? "" : "s",
				 dp_env("CUDA_VISIBLE_DEVICES") ? " with CUDA_VISIBLE_DEVICES=" : "",
				 dp_env("CUDA_VISIBLE_DEVICES") ? dp_env("CUDA_VISIBLE_DEVICES") : "");
	int dev = want >= 0 ? want : local_rank() % count;
	cudaDeviceProp prop;
	if ((r = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess)
		return dp_seterr(e, DP_EIO, "GPU %d: %s", dev, cudaGetErrorString(r));
	if (prec == DP_PREC_BF16 && prop.major < 8)
		return dp_seterr(e, DP_EARG,
				 "GPU %d (%s, sm_%d%d): bf16 needs compute capability 8.0 or later",
				 dev, prop.name, prop.major, prop.minor);
	if (prec == DP_PREC_TF32 && prop.major < 8)
		return dp_seterr(e, DP_EARG,
				 "GPU %d (%s, sm_%d%d): tf32 needs compute capability 8.0 or later",
				 dev, prop.name, prop.major, prop.minor);
	dp_bectx *c = (dp_bectx *)calloc(1, sizeof *c);
	if (!c)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	c->dev = dev;
	c->prec = prec;
	c->conv_algo = o ? o->conv_algo : 0;
	c->conv_budget = CONV_BUDGET;
	const char *cb = dp_setting("DP_CUDA_CONV_BUDGET");
	if (cb && atoll(cb) > 0)
		c->conv_budget = (size_t)atoll(cb);
	tl_dev = -1;
	cu_use(c);
	/* is there code in this build for the device? */
	cudaFuncAttributes fa;
	if ((r = cudaFuncGetAttributes(&fa, k_fill)) != cudaSuccess) {
		cudaGetLastError();
		dp_seterr(e, DP_EIO, "GPU %d (%s, sm_%d%d): %s; rebuild with CUDA_ARCH=%d%d", dev,
			  prop.name, prop.major, prop.minor, cudaGetErrorString(r), prop.major,
			  prop.minor);
		cu_close(c);
		return DP_EIO;
	}
	if ((r = cudaStreamCreateWithFlags(&c->s, cudaStreamNonBlocking)) != cudaSuccess ||
	    (r = cudaStreamCreateWithFlags(&c->cs, cudaStreamNonBlocking)) != cudaSuccess ||
	    (r = cudaEventCreateWithFlags(&c->fetched, cudaEventDisableTiming)) != cudaSuccess) {
		dp_seterr(e, DP_EIO, "GPU %d: streams: %s", dev, cudaGetErrorString(r));
		cu_close(c);
		return DP_EIO;
	}
	cublasStatus_t b = cublasCreate(&c->blas);
	if (b == CUBLAS_STATUS_SUCCESS)
		b = cublasSetStream(c->blas, c->s);
	if (b == CUBLAS_STATUS_SUCCESS)
		b = cublasSetMathMode(c->blas, prec == DP_PREC_TF32 ? CUBLAS_TF32_TENSOR_OP_MATH
								    : CUBLAS_DEFAULT_MATH);
	if (b != CUBLAS_STATUS_SUCCESS) {
		dp_seterr(e, DP_EIO, "GPU %d: cuBLAS: %s", dev, cublasGetStatusString(b));
		cu_close(c);
		return DP_EIO;
	}
	cu_prof_open(c);
	if (cu_conv_open(c, o, e) < 0) {
		cu_close(c);
		return e ? e->code : DP_EIO;
	}
	if (desc) {
		int rt = 0, bl = 0;
		cudaRuntimeGetVersion(&rt);
		cublasGetVersion(c->blas, &bl);
		char dnn[96] = "no cuDNN: im2col convolutions";
#ifdef DP_WITH_CUDNN
		if (c->dnn) {
			size_t v = cudnnGetVersion();
			snprintf(dnn, sizeof dnn, "cuDNN %zu.%zu.%zu (%s%s)", v / 10000, v / 100 % 100,
				 v % 100, c->pinned ? "algorithms pinned" : "algorithms measured",
				 c->nhwc ? ", channels-last" : "");
		}
#endif
		snprintf(desc, desc_len, "cuda: GPU %d of %d, %s (sm_%d%d, %.0f GiB), %s, CUDA %d.%d, cuBLAS %d.%d, %s",
			 dev, count, prop.name, prop.major, prop.minor,
			 (double)prop.totalGlobalMem / (1u << 30), dp_precision_name(prec), rt / 1000,
			 rt % 1000 / 10, bl / 10000, bl / 100 % 100, dnn);
	}
	*ctx = c;
	return DP_OK;
}

/* ---- memory ---------------------------------------------------------------- */

/* bytes of device memory, or (host) of pinned host memory; NULL: out of
 * memory, the caller's to report. */
static void *cu_malloc(dp_bectx *c, size_t bytes, bool host)
{
	cu_use(c);
	void *p = NULL;
	if ((host ? cudaMallocHost(&p, bytes ? bytes : 64) : cudaMalloc(&p, bytes ? bytes : 256)) !=
	    cudaSuccess) {
		cudaGetLastError();
		return NULL;
	}
	return p;
}

static void *cu_alloc(dp_bectx *c, size_t bytes) { return cu_malloc(c, bytes, false); }

static void cu_free(dp_bectx *c, void *p)
{
	if (!p)
		return;
	cu_use(c);
	tag_drop(c, p);
	cudaFree(p); /* waits for the device */
}

static void *cu_host_alloc(dp_bectx *c, size_t bytes) { return cu_malloc(c, bytes, true); }

static void cu_host_free(dp_bectx *c, void *p)
{
	if (!p)
		return;
	cu_use(c);
	cudaFreeHost(p);
}

static void cu_upload(dp_bectx *c, void *dev, const void *host, size_t bytes)
{
	tag_drop(c, dev);
	if (!bytes)
		return;
	cu_use(c);
	if (ck(c, cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, c->s), "upload"))
		ck(c, cudaStreamSynchronize(c->s), "upload");
}

static void cu_download(dp_bectx *c, void *host, const void *dev, size_t bytes)
{
	if (!bytes)
		return;
	cu_use(c);
	const nhwc_tag *t = tag_of(c, dev);
	if (t) { /* channels-last: as the (n, c, h, w) float32 it stands for */
		nhwc_tag k = *t;
		float *f = (float *)cu_scratch(c, bytes);
		if (f) {
			nhwc_to_nchw(c, dev, &k, f);
			dev = f;
		}
	}
	if (!ck(c, cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, c->s), "download") ||
	    !ck(c, cudaStreamSynchronize(c->s), "download"))
		memset(host, 0xff, bytes); /* NaN, not stale numbers; sync() says why */
}

/* dev is not a channels-last activation (a loss's figures) */
static void cu_fetch(dp_bectx *c, void *host, const void *dev, size_t bytes)
{
	if (!bytes)
		return;
	cu_use(c);
	if (ck(c, cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, c->s), "fetch"))
		ck(c, cudaEventRecord(c->fetched, c->s), "fetch");
}

/* After a wait for the device (sync, wait): the profile's calls done, and
 * the first failure, if any */
static int waited(dp_bectx *c, dp_err *e)
{
	cu_prof_collect(c);
	return c->failed ? dp_seterr(e, DP_EIO, "%s", c->msg) : DP_OK;
}

static int cu_wait(dp_bectx *c, dp_err *e)
{
	cu_use(c);
	ck(c, cudaEventSynchronize(c->fetched), "wait");
	return waited(c, e);
}

static void cu_copy(dp_bectx *c, void *dst, const void *src, size_t bytes)
{
	if (!bytes || dst == src)
		return;
	cu_use(c);
	PROF(c, "copy");
	const nhwc_tag *t = tag_of(c, src);
	if (t) {
		nhwc_tag k = *t;
		size_t nb = nhwc_bytes(c, (size_t)k.n * k.c * k.h * k.w);
		bytes = nb < bytes ? nb : bytes;
		tag_set(c, dst, k.n, k.c, k.h, k.w);
	} else {
		tag_drop(c, dst);
	}
	ck(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->s), "copy");
}

static stage_slot *stage_find(dp_bectx *c, const void *dev)
{
	for (int i = 0; i < c->nst; i++)
		if (c->st[i].dev == dev)
			return &c->st[i];
	if (c->nst == NSTAGE)
		return NULL;
	stage_slot *t = &c->st[c->nst];
	memset(t, 0, sizeof *t);
	if (cudaEventCreateWithFlags(&t->freed[0], cudaEventDisableTiming) != cudaSuccess ||
	    cudaEventCreateWithFlags(&t->freed[1], cudaEventDisableTiming) != cudaSuccess ||
	    cudaEventCreateWithFlags(&t->ready, cudaEventDisableTiming) != cudaSuccess) {
		cudaGetLastError();
		return NULL;
	}
	t->dev = dev;
	c->nst++;
	return t;
}

/* Copy host into slot k of dev's pair on the copy stream once the compute
 * stream is done with that slot's previous contents; the compute stream
 * waits for the copy.  The slot not taken is free for the next copy
 * after everything queued up to now. */
static const void *cu_stage(dp_bectx *c, void *dev, const void *host, size_t bytes)
{
	cu_use(c);
	stage_slot *t = stage_find(c, dev);
	if (t && t->next == 1 && t->cap < bytes) {
		ck(c, cudaStreamSynchronize(c->s), "stage");
		cudaFree(t->alt);
		t->alt = NULL;
		t->cap = 0;
		if (cudaMalloc(&t->alt, bytes) == cudaSuccess)
			t->cap = bytes;
		else
			cudaGetLastError();
	}
	if (!t || (t->next == 1 && !t->alt)) { /* no second buffer: copy in order */
		cu_upload(c, dev, host, bytes);
		return dev;
	}
	int k = t->next;
	void *dst = k ? t->alt : dev;
	tag_drop(c, dst);
	t->next ^= 1;
	if (bytes) {
		ck(c, cudaStreamWaitEvent(c->cs, t->freed[k], 0), "stage");
		ck(c, cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, c->cs), "stage");
		ck(c, cudaEventRecord(t->ready, c->cs), "stage");
		ck(c, cudaStreamWaitEvent(c->s, t->ready, 0), "stage");
	}
	ck(c, cudaEventRecord(t->freed[k ^ 1], c->s), "stage");
	return dst;
}

static int cu_sync(dp_bectx *c, dp_err *e)
{
	cu_use(c);
	ck(c, cudaStreamSynchronize(c->s), "synchronize");
	ck(c, cudaStreamSynchronize(c->cs), "synchronize");
	return waited(c, e);
}

/* p[0, n) by kernel k and the scalar v: fill and scale. */
static void scalar_op(dp_bectx *c, void (*k)(float *, float, size_t), const char *what, float *p,
		      float v, size_t n)
{
	tag_drop(c, p);
	if (!n)
		return;
	cu_use(c);
	PROF(c, what);
	LAUNCH(k, grid(n), THREADS, c->s, p, v, n);
	LAUNCHED(c, what);
}

static void cu_fill(dp_bectx *c, float *p, float v, size_t n)
{
	scalar_op(c, k_fill, "fill", p, v, n);
}

static void cu_scale(dp_bectx *c, float *p, float s, size_t n)
{
	scalar_op(c, k_scale, "scale", p, s, n);
}

/* The norm of the gradients for --clip-norm: 8 bytes come back, not the
 * gradients (a ResNet-50's 100 MB summed on the host took it tens of
 * milliseconds a step). */
static double cu_sumsq(dp_bectx *c, const float *x, size_t n)
{
	cu_use(c);
	PROF(c, "norm");
	unsigned nb = grid(n);
	double *part = (double *)cu_scratch(c, ((size_t)nb + 1) * sizeof(double)), ss = 0;
	if (!part)
		return -1;
	LAUNCH(k_sumsq_part, nb, THREADS, c->s, x, n, part);
	LAUNCH(k_sum_parts, 1, THREADS, c->s, part, (int)nb, part + nb);
	LAUNCHED(c, "norm");
	ck(c, cudaMemcpyAsync(&ss, part + nb, sizeof ss, cudaMemcpyDeviceToHost, c->s), "norm");
	ck(c, cudaStreamSynchronize(c->s), "norm"); /* a fault: the next sync or wait says it */
	return ss;
}

/* ---- GEMM ------------------------------------------------------------------
 * Column-major, as cuBLAS: C (m, n; ldc) = op(A) op(B) + beta C, float32 C.
 * lowp: A and B are bf16 (tensor cores, float32 accumulation), else float. */

void cu_gemm(dp_bectx *c, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
		 const void *A, int lda, const void *B, int ldb, float beta, float *C, int ldc,
		 bool lowp, const char *what)
{
	const float one = 1.0f;
	if (lowp)
		ckb(c, cublasGemmEx(c->blas, ta, tb, m, n, k, &one, A, CUDA_R_16BF, lda, B,
				    CUDA_R_16BF, ldb, &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
				    CUBLAS_GEMM_DEFAULT),
		    what);
	else
		ckb(c, cublasSgemm(c->blas, ta, tb, m, n, k, &one, (const float *)A, lda,
				   (const float *)B, ldb, &beta, C, ldc),
		    what);
}

void cu_gemm_batched(dp_bectx *c, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
			 int k, const void *A, int lda, long long sa, const void *B, int ldb,
			 long long sb, float *C, int ldc, long long sc, int count, bool lowp,
			 const char *what)
{
	const float one = 1.0f, zero = 0.0f;
	if (lowp)
		ckb(c, cublasGemmStridedBatchedEx(c->blas, ta, tb, m, n, k, &one, A, CUDA_R_16BF, lda,
						  sa, B, CUDA_R_16BF, ldb, sb, &zero, C, CUDA_R_32F,
						  ldc, sc, count, CUBLAS_COMPUTE_32F,
						  CUBLAS_GEMM_DEFAULT),
		    what);
	else
		ckb(c, cublasSgemmStridedBatched(c->blas, ta, tb, m, n, k, &one, (const float *)A, lda,
						 sa, (const float *)B, ldb, sb, &zero, C, ldc, sc,
						 count),
		    what);
}

/* A bf16 copy of n floats at dst (scratch). */
void cu_to_bf16(dp_bectx *c, const float *x, bf16 *dst, size_t n)
{
	if (!n)
		return;
	LAUNCH(k_to_bf16, grid(n), THREADS, c->s, x, dst, n);
	LAUNCHED(c, "bf16 copy");
}

/* ---- activations ----------------------------------------------------------- */

/* b NULL: the activation alone. */
void cu_bias_act(dp_bectx *c, float *y, size_t n, const float *b, int nb, size_t inner,
		     int act)
{
	if (!n || (!b && !act))
		return;
	if (!b) {
		LAUNCH(k_act, grid(n), THREADS, c->s, y, y, n, act);
		LAUNCHED(c, "activation");
		return;
	}
	LAUNCH(k_bias_act, grid(n), THREADS, c->s, y, n, b, nb, inner, act);
	LAUNCHED(c, "bias and activation");
}

void cu_act_grad(dp_bectx *c, int act, const float *y, const float *dy, float *dx, size_t n)
{
	if (!act || !n) {
		if (dx != dy && n)
			ck(c, cudaMemcpyAsync(dx, dy, n * sizeof *dx, cudaMemcpyDeviceToDevice, c->s),
			   "copy");
		return;
	}
	LAUNCH(k_act_grad, grid(n), THREADS, c->s, y, dy, dx, n, act);
	LAUNCHED(c, "activation gradient");
}

static void cu_act_fwd(dp_bectx *c, int act, size_t n, const float *x, float *y)
{
	if (!n)
		return;
	cu_use(c);
	PROF(c, "activation");
	if (nhwc_act_fwd(c, act, n, x, y))
		return;
	tag_drop(c, y);
	LAUNCH(k_act, grid(n), THREADS, c->s, x, y, n, act);
	LAUNCHED(c, "activation");
}

static void cu_act_bwd(dp_bectx *c, int act, size_t n, const float *y, const float *dy, float *dx)
{
	cu_use(c);
	PROF(c, "activation backward");
	if (nhwc_act_bwd(c, act, n, y, dy, dx))
		return;
	nhwc_flat(c, &dy, n, 0);
	tag_drop(c, dx);
	cu_act_grad(c, act, y, dy, dx, n);
}

static void cu_add(dp_bectx *c, size_t n, const float *a, const float *b, float *y, int act)
{
	if (!n)
		return;
	cu_use(c);
	PROF(c, "add");
	if (nhwc_add(c, n, a, b, y, act))
		return;
	tag_drop(c, y);
	LAUNCH(k_add, grid(n), THREADS, c->s, a, b, y, n, act);
	LAUNCHED(c, "add");
}

/* ---- dense -------------------------------------------------------------------
 * Row-major (r, c) is column-major (c, r): y (n, out) = x w^T is, column-
 * major, y^T (out, n) = w (out <- in) x^T, i.e. op_T(w as (in, out)) x. */

static void cu_dense_fwd(dp_bectx *c, int n, int in, int out, const float *x, const float *w,
			 const float *b, float *y, int act)
{
	cu_use(c);
	PROF(c, "dense");
	nhwc_flat(c, &x, (size_t)n * in, 0); /* flatten after a channels-last layer */
	tag_drop(c, y);
	bool lowp = c->prec == DP_PREC_BF16;
	const void *A = w, *B = x;
	if (lowp) {
		size_t wn = (size_t)out * in, xn = (size_t)n * in;
		bf16 *s = (bf16 *)cu_scratch(c, align256(wn * 2) + xn * 2);
		if (!s)
			return;
		bf16 *xb = (bf16 *)((char *)s + align256(wn * 2));
		cu_to_bf16(c, w, s, wn);
		cu_to_bf16(c, x, xb, xn);
		A = s;
		B = xb;
	}
	cu_gemm(c, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, A, in, B, in, 0.0f, y, out, lowp, "dense");
	cu_bias_act(c, y, (size_t)n * out, b, out, 1, act);
}

static void cu_dense_bwd(dp_bectx *c, int n, int in, int out, const float *x, const float *w,
			 const float *y, float *dy, float *dx, float *dw, float *db, int act)
{
	cu_use(c);
	PROF(c, "dense backward");
	/* x channels-last (flatten after a convolutional layer): dx too */
	const nhwc_tag *t = tag_of(c, x);
	nhwc_tag xt = t ? *t : nhwc_tag{};
	float *dxs = dx;
	nhwc_flat(c, &x, (size_t)n * in, 0);
	nhwc_flat(c, (const float **)&dy, (size_t)n * out, 1);
	if (dx && t && !(dxs = nhwc_flat_buf(c, (size_t)n * in, 2)))
		return;
	cu_act_grad(c, act, y, dy, dy, (size_t)n * out);
	if (db) {
		dim3 tb(32, 8);
		LAUNCH(k_col_sums, (out + 31) / 32, tb, c->s, dy, n, out, db);
		LAUNCHED(c, "dense bias gradient");
	}
	bool lowp = c->prec == DP_PREC_BF16;
	const void *X = x, *W = w, *D = dy;
	if (lowp) {
		size_t xn = (size_t)n * in, wn = (size_t)out * in, dn = (size_t)n * out;
		char *s = (char *)cu_scratch(c, align256(xn * 2) + align256(wn * 2) + dn * 2);
		if (!s)
			return;
		bf16 *xb = (bf16 *)s, *wb = (bf16 *)(s + align256(xn * 2)),
		     *db16 = (bf16 *)(s + align256(xn * 2) + align256(wn * 2));
		cu_to_bf16(c, x, xb, xn);
		if (dx)
			cu_to_bf16(c, w, wb, wn);
		cu_to_bf16(c, dy, db16, dn);
		X = xb;
		W = wb;
		D = db16;
	}
	/* dw (out, in) = dy^T x: column-major dw^T (in, out) = x^T (in, n) dy (n, out) */
	cu_gemm(c, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, X, in, D, out, 0.0f, dw, in, lowp,
	     "dense weight gradient");
	/* dx (n, in) = dy w: column-major dx^T (in, n) = w^T (in, out) dy^T (out, n) */
	if (!dx)
		return;
	cu_gemm(c, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, W, in, D, out, 0.0f, dxs, in, lowp,
		"dense input gradient");
	if (xt.p) {
		nhwc_from_nchw(c, dxs, xt.n, xt.c, xt.h, xt.w, dx);
		tag_set(c, dx, xt.n, xt.c, xt.h, xt.w);
	} else {
		tag_drop(c, dx);
	}
}

/* ---- for lib/comm_nccl.c: the stream gradients are produced on ---------------------- */

extern "C" void *dp_cuda_stream(dp_bectx *c) { return c->s; }
extern "C" int dp_cuda_device(dp_bectx *c) { return c->dev; }

static dp_backend make_backend(void)
{
	dp_backend b;
	memset(&b, 0, sizeof b);
	b.name = "cuda";
	b.caps = DP_CAP_NCCL;
	b.open = cu_open;
	b.close = cu_close;
	b.alloc = cu_alloc;
	b.free = cu_free;
	b.host_alloc = cu_host_alloc;
	b.host_free = cu_host_free;
	b.upload = cu_upload;
	b.download = cu_download;
	b.copy = cu_copy;
	b.stage = cu_stage;
	b.sync = cu_sync;
	b.fetch = cu_fetch;
	b.wait = cu_wait;
	b.fill = cu_fill;
	b.scale = cu_scale;
	b.sumsq = cu_sumsq;
	b.dense_fwd = cu_dense_fwd;
	b.dense_bwd = cu_dense_bwd;
	b.conv_ws = cu_conv_ws;
	b.conv_algos = cu_conv_algos;
	b.conv_algos_take = cu_conv_algos_take;
	b.conv_fwd = cu_conv_fwd;
	b.conv_bwd = cu_conv_bwd;
	b.maxpool_fwd = cu_maxpool_fwd;
	b.maxpool_bwd = cu_maxpool_bwd;
	b.avgpool_fwd = cu_avgpool_fwd;
	b.avgpool_bwd = cu_avgpool_bwd;
	b.act_fwd = cu_act_fwd;
	b.act_bwd = cu_act_bwd;
	b.add = cu_add;
	b.dropout_fwd = cu_dropout_fwd;
	b.dropout_bwd = cu_dropout_bwd;
	b.bnorm_sums = cu_bnorm_sums;
	b.bnorm_fwd = cu_bnorm_fwd;
	b.bnorm_bwd_sums = cu_bnorm_bwd_sums;
	b.bnorm_bwd = cu_bnorm_bwd;
	b.xent = cu_xent;
	b.mse = cu_mse;
	b.softmax = cu_softmax;
	b.sgd = cu_sgd;
	b.adam = cu_adam;
	return b;
}

extern "C" const dp_backend dp_backend_cuda = make_backend();
