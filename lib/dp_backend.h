/*
 * dp_backend.h - the math of training behind one interface.
 *
 * A backend owns the memory of tensors (weights, gradients, activations,
 * optimizer state) and does every numeric operation on them: the forward
 * and backward pass of each kind of layer, the losses and the optimizer
 * updates.  Everything above it (lib/train/model/, the tools) only
 * plans shapes and calls these functions, so a GPU backend replaces the
 * CPU one without touching them.
 *
 *   cpu   lib/train/backend/cpu.c: OpenBLAS SGEMM, plain C loops; convolutions
 *         by im2col, a batch-wide GEMM, Winograd or oneDNN (when the build
 *         found it), chosen per shape (cpu_plan.c).  Always built: im2col
 *         and the loops are the reference that other backends are tested
 *         against.
 *   cuda  lib/train/backend/cuda.cu (make BACKEND=cuda): cuBLAS GEMMs (im2col
 *         convolutions), CUDA kernels for the rest, one GPU per process;
 *         tested against the CPU one (tests/unit/cuda.c).
 *
 * Rules every backend keeps:
 *  - Pointers marked (dev) are backend memory: allocated by alloc(), never
 *    dereferenced by the caller; data moves with upload()/download().  On
 *    the CPU backend they are ordinary host memory.
 *  - Tensors are float32, row-major; images are NCHW.  Dense weights are
 *    (out, in), convolution weights (out, in, kh, kw): PyTorch's layouts.
 *  - Operations may run asynchronously in issue order; download() and
 *    sync() wait for the work queued before them.
 *  - Results are deterministic: the same inputs give the same bits on the
 *    same backend and thread count.
 *  - Backward functions overwrite (never accumulate into) dw, db and dx,
 *    so the gradient buffer needs no clearing between steps.  dy is
 *    scratch: a backward function may overwrite it.
 *  - Random masks follow dp_rng.h so every backend draws the same ones.
 */
#ifndef DP_BACKEND_H
#define DP_BACKEND_H

#include "dp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Activations a dense or conv layer can apply to its own output (fused). */
enum dp_act { DP_ACT_NONE = 0, DP_ACT_RELU = 1, DP_ACT_TANH = 2, DP_ACT_SIGMOID = 3 };

/* Geometry of a 2-D convolution, input (n, c, h, w) -> output (n, k, oh, ow).
 * Zero padding ph rows on top and pw columns on the left; the padding at
 * the bottom and right is whatever oh, ow imply. */
typedef struct dp_conv2d {
	int n, c, h, w;
	int k, oh, ow;
	int kh, kw, sh, sw, ph, pw;
} dp_conv2d;

/* Geometry of a pooling window: (n, c, h, w) -> (n, c, oh, ow).  Max
 * pooling may pad ph rows on top and pw columns on the left (PyTorch's
 * MaxPool2d(padding=p); the bottom and right follow from oh, ow): padded
 * positions count as -infinity, never chosen.  Average pooling: no padding. */
typedef struct dp_pool2d {
	int n, c, h, w;
	int oh, ow;
	int kh, kw, sh, sw;
	int ph, pw;
} dp_pool2d;

/* Dropout masks: element j of sample s of a batch is kept when
 *     (dp_rng_at(key, (sample0 + s) * per_sample + j) >> 32) >= threshold
 * and kept elements are multiplied by scale = 1 / (1 - p). */
typedef struct dp_dropout {
	uint64_t key;
	uint64_t sample0;  /* index of the batch's first sample in the global batch */
	size_t per_sample; /* elements per sample */
	uint32_t threshold; /* p * 2^32 */
	float scale;
} dp_dropout;

/* Batch normalisation over (n, c, hw): statistics per channel c. */
typedef struct dp_bnorm {
	int n, c, hw;
	float eps, momentum; /* PyTorch's meaning: running = (1-m) running + m batch */
	double count; /* values per channel over all ranks when sums are given; 0: n * hw */
	int eval;     /* backward of an evaluation-mode forward (a frozen layer) */
	int act;      /* DP_ACT_NONE, or DP_ACT_RELU applied to the output (fused) */
} dp_bnorm;

/* One optimizer update of a flat range of parameters (see lib/dp_optim.h
 * for the formulas, which are PyTorch's). */
typedef struct dp_sgd_args {
	float lr, momentum, dampening, weight_decay;
	int nesterov;
	int first; /* first step: the momentum buffer starts as the gradient */
} dp_sgd_args;

typedef struct dp_adam_args {
	float lr, beta1, beta2, eps, weight_decay;
	int decoupled;        /* AdamW: decay the weights, not the gradient */
	float step_size;      /* lr / (1 - beta1^t), computed in double by the caller */
	float bias2_sqrt;     /* sqrt(1 - beta2^t) */
} dp_adam_args;

/* What matrix products compute in.  Tensors in memory, master weights,
 * optimizer state and reductions stay float32 in every mode. */
enum dp_precision {
	DP_PREC_FP32 = 0, /* IEEE float32 throughout (the reference) */
	DP_PREC_TF32 = 1, /* GEMM inputs rounded to TF32 on tensor cores (GPU) */
	DP_PREC_BF16 = 2  /* GEMM inputs in bfloat16, float32 accumulation (GPU) */
};
/* "fp32", "tf32", "bf16" (also "float32", "bfloat16"); -1 for anything else. */
DP_EXPORT int dp_precision_parse(const char *s);
DP_EXPORT const char *dp_precision_name(int p);

typedef struct dp_backend_opts {
	int threads;   /* worker threads for the math (CPU: OpenBLAS); 0: 1 */
	int device;    /* device ordinal (GPU backends); -1: choose (local rank) */
	int conv_algo; /* 0: the backend chooses; 1: im2col + GEMM only; 2: also
			* faster algorithms where they apply (CPU: Winograd);
			* CPU: 3 one GEMM over the batch, 4 oneDNN, 5 oneDNN's
			* SGEMM for 1x1 kernels, where they apply (im2col
			* elsewhere) */
	int precision; /* enum dp_precision; a backend refuses what it lacks */
	/* Convolution algorithms (cuDNN's, the CPU's implementations):
	 * deterministic 1: by a rule, the same every run, rather than measured
	 * at each shape's first use; algos: the choices conv_algos() wrote
	 * (another rank's, a checkpoint's), taken for the shapes they name
	 * (NULL: none) */
	int deterministic;
	const char *algos;
} dp_backend_opts;

typedef struct dp_bectx dp_bectx; /* one backend instance's state */

/* What a backend is and can do (dp_backend.caps, curl's vtls "supports"):
 * callers ask these bits, never the backend's name.  A new bit goes at the
 * end; a backend sets those that hold for it. */
enum dp_backend_cap {
	/* (dev) pointers are host memory: the host reads and writes them in
	 * place (no download, no staging through host buffers) */
	DP_CAP_HOST_MEMORY = 1u << 0,
	/* a CUDA device whose memory and stream NCCL can sum gradients on
	 * (lib/train/comm/nccl.c: dp_cuda_stream, dp_cuda_device) */
	DP_CAP_NCCL = 1u << 1,
};

typedef struct dp_backend {
	const char *name; /* for people and dp_backend_find, not for decisions */
	unsigned caps;    /* enum dp_backend_cap */
	/* Start an instance: threads, device, library handles, streams.  A
	 * one-line description of what it runs on goes to desc (may be NULL). */
	int (*open)(dp_bectx **ctx, const dp_backend_opts *o, char *desc, size_t desc_len,
		    dp_err *e);
	void (*close)(dp_bectx *ctx);

	/* ---- memory ---- */
	void *(*alloc)(dp_bectx *ctx, size_t bytes); /* (dev), 64-byte aligned; NULL if out of memory */
	void (*free)(dp_bectx *ctx, void *p);
	/* Host memory for batches: page-locked on GPUs, so uploads overlap. */
	void *(*host_alloc)(dp_bectx *ctx, size_t bytes);
	void (*host_free)(dp_bectx *ctx, void *p);
	void (*upload)(dp_bectx *ctx, void *dev, const void *host, size_t bytes);
	void (*download)(dp_bectx *ctx, void *host, const void *dev, size_t bytes);
	void (*copy)(dp_bectx *ctx, void *dst, const void *src, size_t bytes); /* dev to dev */
	/* Make host data (from host_alloc) visible to the device: returns the
	 * (dev) pointer to use, which is `host` itself where the device reads
	 * host memory (CPU: no copy), or `dev` or a second buffer of the
	 * backend's after a copy (GPU: alternating, so that the copy overlaps
	 * the work still queued on the previous one).  The pointer serves the
	 * work queued until the next stage() of the same `dev`.  The host
	 * bytes must not change until the next sync(), download() or wait(). */
	const void *(*stage)(dp_bectx *ctx, void *dev, const void *host, size_t bytes);
	/* Wait for queued work; report a failure of it (GPU faults). */
	int (*sync)(dp_bectx *ctx, dp_err *e);
	/* download() without waiting: dev's bytes, as the work queued up to
	 * now leaves them, into host memory (from host_alloc), which holds
	 * them once wait() returns.  wait() waits for the last fetch alone,
	 * not for the work queued after it, and reports a failure as sync()
	 * does: the host goes on queueing (a backward pass) while the device
	 * catches up, and reads a step's loss without draining its queue.
	 * Host bytes given to stage() before the fetch are free after wait(). */
	void (*fetch)(dp_bectx *ctx, void *host, const void *dev, size_t bytes);
	int (*wait)(dp_bectx *ctx, dp_err *e);
	void (*fill)(dp_bectx *ctx, float *p, float v, size_t n);
	void (*scale)(dp_bectx *ctx, float *p, float s, size_t n);
	/* The sum of p[i]^2 over p[0, n), in double, in an order fixed by the
	 * backend (the CPU's: index order), so that ranks holding the same p
	 * get the same bits; waits for the work queued; -1: out of memory. */
	double (*sumsq)(dp_bectx *ctx, const float *p, size_t n);

	/* ---- layers ----
	 * dense: x (n, in), w (out, in), b (out), y (n, out) = act(x w^T + b).
	 * Backward: dy (n, out) is scratch; y the forward output (for act);
	 * dx (n, in) may be NULL (no input gradient needed). */
	void (*dense_fwd)(dp_bectx *ctx, int n, int in, int out, const float *x, const float *w,
			  const float *b, float *y, int act);
	void (*dense_bwd)(dp_bectx *ctx, int n, int in, int out, const float *x, const float *w,
			  const float *y, float *dy, float *dx, float *dw, float *db, int act);
	/* conv: x (n, c, h, w), w (k, c, kh, kw), b (k), y (n, k, oh, ow).
	 * ws: scratch of conv_ws() bytes (dev). */
	size_t (*conv_ws)(dp_bectx *ctx, const dp_conv2d *g);
	void (*conv_fwd)(dp_bectx *ctx, const dp_conv2d *g, const float *x, const float *w,
			 const float *b, float *y, int act, void *ws);
	void (*conv_bwd)(dp_bectx *ctx, const dp_conv2d *g, const float *x, const float *w,
			 const float *y, float *dy, float *dx, float *dw, float *db, int act,
			 void *ws);
	/* The convolution algorithms chosen so far, as text for
	 * dp_backend_opts.algos or conv_algos_take, into buf (its length,
	 * -1 when it does not fit len with the NUL; "" when none chosen),
	 * and another's choices (a rank's, a checkpoint's) taken for the shapes
	 * chosen already where they fit the workspace conv_ws reported, and
	 * kept for shapes to come; the text says which GPU, library and
	 * precision it holds for, and is ignored elsewhere.  conv_algos_take
	 * returns how many shapes' choices changed.  NULL in backends without
	 * a choice to record. */
	int (*conv_algos)(dp_bectx *ctx, char *buf, size_t len);
	int (*conv_algos_take)(dp_bectx *ctx, const char *algos);
	/* For people: what runs shape g (seen already: conv_ws) and why, one
	 * line into buf ("measured: forward onednn (im2col 3.1 ms, onednn 1.2
	 * ms); ..."): its length, -1 when g was not seen or it does not fit.
	 * NULL in backends without a choice to explain. */
	int (*conv_explain)(dp_bectx *ctx, const dp_conv2d *g, char *buf, size_t len);
	/* maxpool: arg (n, c, oh, ow) receives the index in the unpadded
	 * (h, w) plane of each window's maximum (as PyTorch: the first one on
	 * ties, a NaN over any number, the window's first position inside the
	 * image when all of it is -infinity). */
	void (*maxpool_fwd)(dp_bectx *ctx, const dp_pool2d *g, const float *x, float *y,
			    int32_t *arg);
	void (*maxpool_bwd)(dp_bectx *ctx, const dp_pool2d *g, const float *dy, const int32_t *arg,
			    float *dx);
	void (*avgpool_fwd)(dp_bectx *ctx, const dp_pool2d *g, const float *x, float *y);
	void (*avgpool_bwd)(dp_bectx *ctx, const dp_pool2d *g, const float *dy, float *dx);
	/* Elementwise activation y = act(x), and dx = dy * act'(y); x == y and
	 * dx == dy are allowed. */
	void (*act_fwd)(dp_bectx *ctx, int act, size_t n, const float *x, float *y);
	void (*act_bwd)(dp_bectx *ctx, int act, size_t n, const float *y, const float *dy,
			float *dx);
	/* y = act(a + b) over n floats (a residual connection); y may be a or b. */
	void (*add)(dp_bectx *ctx, size_t n, const float *a, const float *b, float *y, int act);
	/* Dropout over n samples of d->per_sample elements; the backward pass
	 * draws the same mask again from d. */
	void (*dropout_fwd)(dp_bectx *ctx, const dp_dropout *d, int n, const float *x, float *y);
	void (*dropout_bwd)(dp_bectx *ctx, const dp_dropout *d, int n, const float *dy, float *dx);
	/* Batch normalisation of x (n, c, hw) per channel; save (dev, 2c
	 * floats) holds the mean and 1/sqrt(var + eps) used, for the backward.
	 *
	 * bnorm_sums: sums (dev, 2c doubles) = per channel, the sum of x of
	 * this batch, then the sum of x^2: summed over ranks and passed to
	 * bnorm_fwd, they give synchronised (all-rank) statistics.
	 *
	 * bnorm_fwd, train && !sums: the batch statistics of this batch;
	 * train && sums: mean = sums[c] / count, var = max(0, sums[C+c] /
	 * count - mean^2), count = g->count.  Training saves (mean, 1/sqrt(var
	 * + eps)) and updates the running statistics (the unbiased variance,
	 * var * count / (count - 1)).  !train: the running statistics; save,
	 * when not NULL, receives them as a training forward would (the
	 * backward of a frozen layer reads it).
	 *
	 * g->act == DP_ACT_RELU: the forward writes y = max(0, normalised x)
	 * (a ReLU after the batchnorm, fused: the same bits as the two layers
	 * one after the other), and both backward functions read dy as the
	 * ReLU's gradient, dy where y > 0 and 0 elsewhere, y (dev, (n, c,
	 * hw)) being that forward's output; y is NULL when g->act is none.
	 *
	 * bnorm_bwd_sums: sums (dev, 2c doubles) = per channel, sum dy, then
	 * sum dy * xhat (xhat = (x - mean) * inv from save), to sum over ranks.
	 *
	 * bnorm_bwd: dgamma = sum dy * xhat, dbeta = sum dy over this batch.
	 * dx (NULL: not computed) = gamma * inv * dy when g->eval (PyTorch's
	 * gradient through an evaluation-mode layer); otherwise
	 * gamma * inv * (dy - s1 / count - xhat * s2 / count) with (s1, s2)
	 * the sums given (all ranks, count = g->count) or, sums NULL, this
	 * batch's (count = n * hw). */
	void (*bnorm_sums)(dp_bectx *ctx, const dp_bnorm *g, const float *x, double *sums);
	void (*bnorm_fwd)(dp_bectx *ctx, const dp_bnorm *g, int train, const float *x,
			  const float *gamma, const float *beta, float *run_mean, float *run_var,
			  const double *sums, float *save, float *y);
	void (*bnorm_bwd_sums)(dp_bectx *ctx, const dp_bnorm *g, const float *x, const float *save,
			       const float *y, const float *dy, double *sums);
	void (*bnorm_bwd)(dp_bectx *ctx, const dp_bnorm *g, const float *x, const float *gamma,
			  const float *save, const double *sums, const float *y, const float *dy,
			  float *dx, float *dgamma, float *dbeta);
	/* An evaluation-mode batchnorm folded into the convolution before it
	 * (k filters of per weights each, bias b or NULL): per filter, with
	 * a = gamma / sqrt(var + eps) as bnorm_fwd computes it, wout = w * a
	 * and bout = beta - mean * a (+ b * a), so that conv(x, wout) + bout
	 * is the batchnorm of conv(x, w) + b.  NULL: the backend has none
	 * (the model runs both layers). */
	void (*bnorm_fold)(dp_bectx *ctx, int k, size_t per, float eps, const float *w,
			   const float *b, const float *gamma, const float *beta, const float *mean,
			   const float *var, float *wout, float *bout);

	/* ---- losses ----
	 * Softmax cross-entropy of logits (n, k) against class labels (n,
	 * int32, checked by the caller to lie in [0, k)).  stats (dev, 2
	 * doubles) receives the summed loss and the number of correct argmax
	 * predictions.  When dlogits is not NULL it receives
	 * (softmax - target) * scale.  With label smoothing s the target is
	 * (1 - s) onehot + s / k and the loss its cross-entropy (PyTorch's
	 * CrossEntropyLoss(label_smoothing=s)); s = 0: the plain one-hot. */
	void (*xent)(dp_bectx *ctx, int n, int k, const float *logits, const int32_t *labels,
		     float smooth, float scale, float *dlogits, double *stats);
	/* Mean squared error of pred (n, k) against target (n, k): stats[0]
	 * receives the sum over samples of each sample's mean of squares,
	 * stats[1] zero; dpred = 2 (pred - target) / k * scale. */
	void (*mse)(dp_bectx *ctx, int n, int k, const float *pred, const float *target,
		    float scale, float *dpred, double *stats);
	/* Row-wise softmax of x (n, k) into y (probabilities for inference). */
	void (*softmax)(dp_bectx *ctx, int n, int k, const float *x, float *y);

	/* ---- optimizers, over flat ranges of n parameters ---- */
	void (*sgd)(dp_bectx *ctx, size_t n, float *p, const float *g, float *buf,
		    const dp_sgd_args *a);
	void (*adam)(dp_bectx *ctx, size_t n, float *p, const float *g, float *m, float *v,
		     const dp_adam_args *a);
} dp_backend;

/* The backends built in: the CPU one always, others by BACKEND=... */
DP_EXPORT extern const dp_backend dp_backend_cpu;

/* The backend of this build (BACKEND=cpu: dp_backend_cpu; BACKEND=cuda:
 * the CUDA one), or the one named by the environment variable DP_BACKEND
 * ("cpu" in a CUDA build runs the reference on the same binary).  A name
 * not built in gives a backend whose open() fails with a message saying so. */
DP_EXPORT const dp_backend *dp_backend_default(void);
/* A backend by name ("cpu", "cuda"), or NULL when not built in. */
DP_EXPORT const dp_backend *dp_backend_find(const char *name);
/* be's convolution algorithms (conv_algos) as text, in a buffer grown as
 * needed up to 16 MiB, malloc'd; NULL when be keeps none, or out of memory. */
DP_EXPORT char *dp_backend_conv_algos_text(const dp_backend *be, dp_bectx *ctx);
/* What this build is, one line, the same in two processes only when they
 * run the same build: "dptools 0.1.0; gcc 12.2.0; CFLAGS -O2 -g; backends
 * cpu (OpenBLAS 0.3.21, oneDNN 2.6.3)" (the BLAS, oneDNN and CUDA runtime
 * versions are those of the libraries loaded; no oneDNN in a build
 * without it). */
DP_EXPORT const char *dp_build(void);
/* OpenBLAS's kernels for this CPU when its own choice is a fallback older
 * than the CPU (an OPENBLAS_CORETYPE name: "SkylakeX" where AVX-512 runs,
 * "Haswell" where AVX2 and FMA do), else NULL.  OpenBLAS 0.3.21 (Debian
 * 12) takes an Intel model it does not know, Sapphire Rapids for one, for
 * a Prescott, whose SSE3 kernels run SGEMM at a fifth of the speed.  It
 * chooses when it is loaded, from OPENBLAS_CORETYPE: a program that wants
 * the better kernels sets it and starts again (tools/cli.h). */
DP_EXPORT const char *dp_blas_kernels_better(void);


#ifdef __cplusplus
}
#endif
#endif
