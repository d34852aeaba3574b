/*
 * math_impl.h - the formulas the CPU reference (cpu.c) and the CUDA
 * kernels (cuda_ops.cu, cuda_nhwc_layers.cu) share, one sample, element
 * or channel at a time: the losses, softmax, the optimizer steps and
 * batchnorm's running statistics.  Each is written once, as an
 * inline function that nvcc compiles for the GPU too (__host__
 * __device__), so the two backends cannot drift apart; the loops around
 * them (the CPU's thread ranges, a kernel's grid) stay in each backend.
 * Private to lib/train/backend/.
 */
#ifndef DP_MATH_IMPL_H
#define DP_MATH_IMPL_H

#include "dp_backend.h"

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define BE_MATH static inline __host__ __device__
#else
#define BE_MATH static inline
#endif

/* Softmax cross-entropy of one sample: z (k logits), label y, label
 * smoothing: its loss added to *loss; returns 1 when the largest logit
 * is y's.
 * d (k floats, or NULL): the gradient of loss * scale by z. */
BE_MATH int xent_row(int k, const float *z, int y, float smooth, float scale, float *d,
		     double *loss)
{
	int arg = 0;
	float m = z[0];
	for (int j = 1; j < k; j++)
		if (z[j] > m) {
			m = z[j];
			arg = j;
		}
	double s = 0;
	for (int j = 0; j < k; j++)
		s += exp((double)z[j] - m);
	double lse = m + log(s);
	*loss += lse - z[y];
	if (smooth != 0) { /* (1 - s)(lse - z_y) + s/k sum_j (lse - z_j) */
		double zs = 0;
		for (int j = 0; j < k; j++)
			zs += z[j];
		*loss += smooth * ((double)z[y] - zs / k);
	}
	if (d) {
		for (int j = 0; j < k; j++)
			d[j] = (float)(exp((double)z[j] - lse)) * scale;
		if (smooth != 0) {
			float u = smooth / (float)k * scale;
			for (int j = 0; j < k; j++)
				d[j] -= u;
			d[y] -= (1 - smooth) * scale;
		} else {
			d[y] -= scale;
		}
	}
	return arg == y;
}

/* Mean squared error of one sample (k values p against t), returned;
 * d (or NULL): (p - t) * f, f = 2 / k times the loss's scale. */
BE_MATH double mse_row(int k, const float *p, const float *t, float f, float *d)
{
	double s = 0;
	for (int j = 0; j < k; j++) {
		float e = p[j] - t[j];
		s += (double)e * e;
		if (d)
			d[j] = e * f;
	}
	return s / k;
}

/* Softmax of one sample: k values z to o. */
BE_MATH void softmax_row(int k, const float *z, float *o)
{
	float m = z[0];
	for (int j = 1; j < k; j++)
		m = z[j] > m ? z[j] : m;
	double s = 0;
	for (int j = 0; j < k; j++)
		s += exp((double)z[j] - m);
	for (int j = 0; j < k; j++)
		o[j] = (float)(exp((double)z[j] - m) / s);
}

/* torch.optim.SGD's step for one parameter p with gradient g and
 * momentum buffer buf (a by value: nothing it holds aliases p). */
BE_MATH void sgd_one(float *p, float g, float *buf, dp_sgd_args a)
{
	float d = g;
	if (a.weight_decay != 0)
		d += a.weight_decay * *p;
	if (a.momentum != 0) {
		float b = a.first ? d : a.momentum * *buf + (1.0f - a.dampening) * d;
		*buf = b;
		d = a.nesterov ? d + a.momentum * b : b;
	}
	*p -= a.lr * d;
}

/* torch.optim.Adam's (AdamW's when a.decoupled) step for one parameter p
 * with gradient g and moments m, v. */
BE_MATH void adam_one(float *p, float g, float *m, float *v, dp_adam_args a)
{
	float decay = a.decoupled ? 1.0f - a.lr * a.weight_decay : 1.0f;
	float l2 = a.decoupled ? 0.0f : a.weight_decay;
	float gi = g + l2 * *p;
	float mi = a.beta1 * *m + (1.0f - a.beta1) * gi;
	float vi = a.beta2 * *v + (1.0f - a.beta2) * gi * gi;
	*m = mi;
	*v = vi;
	float denom = sqrtf(vi) / a.bias2_sqrt + a.eps;
	*p = *p * decay - a.step_size * mi / denom;
}

/* Batchnorm's running statistics of one channel after a training batch
 * of cnt values per channel, mean and (biased) variance var: PyTorch's
 * update, which keeps the unbiased variance. */
BE_MATH void bn_running(float momentum, float mean, double var, double cnt, float *run_mean,
			float *run_var)
{
	double unb = cnt > 1 ? var * cnt / (cnt - 1) : var;
	*run_mean = (1 - momentum) * *run_mean + momentum * mean;
	*run_var = (1 - momentum) * *run_var + momentum * (float)unb;
}

#endif
