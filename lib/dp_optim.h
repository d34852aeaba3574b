/*
 * dp_optim.h - optimizers and learning-rate schedules.
 *
 * The update rules are PyTorch's (torch.optim, 1.13), so that a step from
 * the same weights and gradients gives the same weights within float
 * rounding.  With g the gradient, p the parameter, t the update count:
 *   sgd    d = g + wd p;  with momentum mu: b = d on the first step, else
 *          b = mu b + (1 - dampening) d;  d = nesterov ? d + mu b : b;
 *          p -= lr d
 *   adam   g += wd p;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
 *          p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 *   adamw  p *= 1 - lr wd, then adam without the wd term
 * Weight decay applies to every parameter, biases included (as PyTorch's
 * default parameter groups do), unless dp_optim_set_tensors says otherwise.
 *
 * State lives on the backend in buffers with the parameters' layout, one
 * per kind of state: "momentum_buffer" (sgd with momentum), "exp_avg" and
 * "exp_avg_sq" (adam, adamw): PyTorch's names.
 */
#ifndef DP_OPTIM_H
#define DP_OPTIM_H

#include "dp.h"
#include "dp_backend.h"
#include "dp_nn.h"

#ifdef __cplusplus
extern "C" {
#endif

enum dp_optim_kind { DP_OPTIM_SGD = 1, DP_OPTIM_ADAM = 2, DP_OPTIM_ADAMW = 3 };

typedef struct dp_optim_conf {
	int kind;
	double momentum, dampening; /* sgd */
	int nesterov;               /* sgd */
	double beta1, beta2, eps;   /* adam, adamw */
	double weight_decay;
} dp_optim_conf;

/* "sgd", "adam", "adamw"; 0 for anything else. */
DP_EXPORT int dp_optim_parse(const char *s);
DP_EXPORT const char *dp_optim_name(int kind);
/* PyTorch's defaults for kind: betas 0.9, 0.999, eps 1e-8, weight decay 0
 * (adamw 0.01), momentum 0. */
DP_EXPORT void dp_optim_defaults(dp_optim_conf *c, int kind);
/* DP_EARG with a message when a value is out of its range. */
DP_EXPORT int dp_optim_check(const dp_optim_conf *c, dp_err *e);

typedef struct dp_optim dp_optim;

/* State for n parameters on backend be (zeroed: a fresh start). */
DP_EXPORT dp_optim *dp_optim_new(const dp_optim_conf *c, const dp_backend *be, dp_bectx *ctx, size_t n,
		       dp_err *e);
DP_EXPORT void dp_optim_free(dp_optim *o);
DP_EXPORT const dp_optim_conf *dp_optim_conf_get(const dp_optim *o);

/* One update of params (dev) from grads (dev) at learning rate lr. */
DP_EXPORT void dp_optim_step(dp_optim *o, float *params, const float *grads, double lr);

/* Updates done so far (t above); settable when state is loaded. */
DP_EXPORT uint64_t dp_optim_steps(const dp_optim *o);
DP_EXPORT void dp_optim_set_steps(dp_optim *o, uint64_t t);

/* Fine-tuning: settings per tensor of model m (the parameters o updates),
 * as PyTorch's parameter groups.  freeze: the tensors selected
 * (dp_model_select) are not updated and keep no optimizer state (zeros,
 * left out of checkpoints), as parameters with requires_grad=False;
 * no_decay: those selected get weight decay 0; lr_mult "PATTERN=X,...":
 * the first item that selects a tensor multiplies its learning rate by
 * X (>= 0; 1 when none does).  NULL: none.  DP_EARG with a message. */
DP_EXPORT int dp_optim_set_tensors(dp_optim *o, const dp_model *m, const char *freeze,
				   const char *no_decay, const char *lr_mult, dp_err *e);
/* 1 when the parameter at offset off is frozen. */
DP_EXPORT int dp_optim_frozen(const dp_optim *o, size_t off);

/* The state buffers: count, name ("exp_avg", ...), (dev) floats. */
DP_EXPORT int dp_optim_nstates(const dp_optim *o);
DP_EXPORT const char *dp_optim_state_name(const dp_optim *o, int j);
DP_EXPORT float *dp_optim_state(dp_optim *o, int j);

/* ---- gradients between the backward pass and the update -----------------
 * acc += g, n floats (dev) of backend be: gradient accumulation (the
 * backend's add, exact). */
DP_EXPORT void dp_grads_add(const dp_backend *be, dp_bectx *ctx, float *acc, const float *g,
			    size_t n);
/* PyTorch's clip_grad_norm_: the L2 norm of g (dev, n floats), summed in
 * double in the backend's fixed order (the same on every rank of a job
 * holding the same g; the CPU's: index order), on the device where g is;
 * when it exceeds max_norm, g is multiplied by max_norm / (norm + 1e-6).
 * Returns the norm before clipping, -1 when out of memory (g unchanged). */
DP_EXPORT double dp_grads_clip(const dp_backend *be, dp_bectx *ctx, float *g, size_t n,
			       double max_norm);
/* Its two halves, for gradients in pieces (a pipeline's stages): the sum
 * of squares of g (double, the backend's order; -1: out of memory), and g scaled
 * as clip_grad_norm_ scales it for the norm of all the pieces. */
DP_EXPORT double dp_grads_sumsq(const dp_backend *be, dp_bectx *ctx, const float *g, size_t n);
DP_EXPORT void dp_grads_clip_to(const dp_backend *be, dp_bectx *ctx, float *g, size_t n,
				double norm, double max_norm);

/* ---- learning-rate schedules ---------------------------------------------
 *   constant           lr
 *   step:N[:G]         lr * G^floor(epoch / N)        (G 0.1 by default)
 *   cosine[:MIN]       MIN + (lr - MIN) (1 + cos(pi epoch / epochs)) / 2
 * evaluated per epoch (0-based), as PyTorch's StepLR and CosineAnnealingLR
 * stepped once an epoch; then, over the first `warmup` updates, a linear
 * ramp: the update with index s (0-based) uses (s + 1) / warmup of it. */
enum dp_sched_kind { DP_SCHED_CONSTANT = 1, DP_SCHED_STEP = 2, DP_SCHED_COSINE = 3 };

typedef struct dp_sched {
	int kind;
	double every, gamma; /* step */
	double min_lr;       /* cosine */
	uint64_t epochs;     /* cosine: the length of the run */
	uint64_t warmup;     /* updates */
} dp_sched;

/* Parse a schedule ("constant", "step:30:0.1", "cosine", "cosine:1e-5"). */
DP_EXPORT int dp_sched_parse(const char *s, dp_sched *out, dp_err *e);
/* The same text back (for checkpoints and logs). */
DP_EXPORT const char *dp_sched_format(const dp_sched *s, char *buf, size_t len);
/* The learning rate of update `step` (0-based, over the whole run) in
 * epoch `epoch` (0-based). */
DP_EXPORT double dp_sched_lr(const dp_sched *s, double base, uint64_t epoch, uint64_t step);


#ifdef __cplusplus
}
#endif
#endif
