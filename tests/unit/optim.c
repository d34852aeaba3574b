/* optim.c - learning-rate schedules (values worked out by hand from the
 * formulas in dp_optim.h) and optimizer updates against the same formulas
 * evaluated in double precision here (the PyTorch comparison is in
 * tests/dp-train-torch.t). */
#include "dp_optim.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>

static int close_to(double a, double b) { return fabs(a - b) <= 1e-12 * fmax(1, fabs(b)); }

int main(void)
{
	dp_err e;
	dp_sched s = {0};
	char buf[64];

	is_int(dp_sched_parse("constant", &s, &e), 0, "constant");
	ok(dp_sched_lr(&s, 0.1, 7, 1000) == 0.1, "constant stays");
	is_int(dp_sched_parse("step:2:0.5", &s, &e), 0, "step:2:0.5");
	ok(dp_sched_lr(&s, 0.1, 0, 0) == 0.1 && dp_sched_lr(&s, 0.1, 1, 0) == 0.1 &&
		   dp_sched_lr(&s, 0.1, 2, 0) == 0.05 && dp_sched_lr(&s, 0.1, 5, 0) == 0.025,
	   "step: halves every 2 epochs (0.1 0.1 0.05 .. 0.025 at epoch 5)");
	is_str(dp_sched_format(&s, buf, sizeof buf), "step:2:0.5", "step formats back");
	is_int(dp_sched_parse("step:3", &s, &e), 0, "step:3");
	ok(close_to(dp_sched_lr(&s, 1, 3, 0), 0.1), "step: gamma 0.1 by default");
	s.epochs = 4;
	is_int(dp_sched_parse("cosine", &s, &e), 0, "cosine");
	ok(dp_sched_lr(&s, 0.1, 0, 0) == 0.1, "cosine: full rate in the first epoch");
	ok(close_to(dp_sched_lr(&s, 0.1, 2, 0), 0.05), "cosine: half way at epoch 2 of 4");
	ok(close_to(dp_sched_lr(&s, 0.1, 1, 0), 0.1 * (1 + cos(M_PI / 4)) / 2), "cosine: epoch 1 of 4");
	ok(close_to(dp_sched_lr(&s, 0.1, 4, 0), 0), "cosine: 0 at the end");
	is_int(dp_sched_parse("cosine:0.01", &s, &e), 0, "cosine:0.01");
	ok(close_to(dp_sched_lr(&s, 0.1, 2, 0), 0.055), "cosine: towards its minimum");
	s.warmup = 4;
	is_int(dp_sched_parse("constant", &s, &e), 0, "constant with warmup");
	ok(close_to(dp_sched_lr(&s, 0.1, 0, 0), 0.025) && close_to(dp_sched_lr(&s, 0.1, 0, 2), 0.075) &&
		   dp_sched_lr(&s, 0.1, 0, 3) == 0.1 && dp_sched_lr(&s, 0.1, 0, 100) == 0.1,
	   "warmup: 1/4, 3/4, then the full rate");
	const char *bad[] = {"", "step", "step:0", "step:1.5", "step:2:-1", "cosine:x", "linear",
			     "constant:1", "cosine:1:2"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		ok(dp_sched_parse(bad[i], &s, &e) == DP_EARG, "schedule '%s' refused", bad[i]);

	/* optimizer settings */
	dp_optim_conf c;
	dp_optim_defaults(&c, DP_OPTIM_ADAMW);
	ok(c.beta1 == 0.9 && c.beta2 == 0.999 && c.eps == 1e-8 && c.weight_decay == 0.01,
	   "adamw defaults are PyTorch's");
	c.beta1 = 1;
	ok(dp_optim_check(&c, &e) < 0, "beta1 = 1 refused");
	dp_optim_defaults(&c, DP_OPTIM_SGD);
	c.nesterov = 1;
	ok(dp_optim_check(&c, &e) < 0, "nesterov without momentum refused");
	ok(dp_optim_parse("adam") == DP_OPTIM_ADAM && !dp_optim_parse("rmsprop"), "names");

	/* updates against the formulas in double */
	const dp_backend *be = &dp_backend_cpu;
	dp_bectx *ctx;
	be->open(&ctx, NULL, NULL, 0, &e);
	enum { N = 37 };
	float p[N], g[N];
	double rp[N], rm[N], rv[N], rb[N];
	for (int kind = DP_OPTIM_SGD; kind <= DP_OPTIM_ADAMW; kind++) {
		dp_optim_defaults(&c, kind);
		c.weight_decay = 0.05;
		if (kind == DP_OPTIM_SGD) {
			c.momentum = 0.9;
			c.nesterov = 1;
		}
		dp_optim *o = dp_optim_new(&c, be, ctx, N, &e);
		for (int i = 0; i < N; i++) {
			p[i] = (float)sin(i + 1.0);
			rp[i] = p[i];
			rm[i] = rv[i] = rb[i] = 0;
		}
		double worst = 0;
		for (int t = 1; t <= 5; t++) {
			double lr = 0.01 * t;
			for (int i = 0; i < N; i++)
				g[i] = (float)cos(3.0 * i + t);
			dp_optim_step(o, p, g, lr);
			for (int i = 0; i < N; i++) {
				double gi = g[i];
				if (kind == DP_OPTIM_SGD) {
					gi += c.weight_decay * rp[i];
					rb[i] = t == 1 ? gi : c.momentum * rb[i] + gi;
					rp[i] -= lr * (gi + c.momentum * rb[i]);
				} else {
					if (kind == DP_OPTIM_ADAMW)
						rp[i] *= 1 - lr * c.weight_decay;
					else
						gi += c.weight_decay * rp[i];
					rm[i] = c.beta1 * rm[i] + (1 - c.beta1) * gi;
					rv[i] = c.beta2 * rv[i] + (1 - c.beta2) * gi * gi;
					double mh = rm[i] / (1 - pow(c.beta1, t));
					double vh = sqrt(rv[i]) / sqrt(1 - pow(c.beta2, t));
					rp[i] -= lr * mh / (vh + c.eps);
				}
				worst = fmax(worst, fabs(p[i] - rp[i]));
			}
		}
		ok(worst < 2e-6, "%s: 5 updates follow the formulas (max error %.2g)", dp_optim_name(kind),
		   worst);
		is_int(dp_optim_steps(o), 5, "%s counts its updates", dp_optim_name(kind));
		is_int(dp_optim_nstates(o), kind == DP_OPTIM_SGD ? 1 : 2, "%s state buffers",
		       dp_optim_name(kind));
		dp_optim_free(o);
	}

	/* between the backward pass and the update: accumulation exact, the
	 * clip's norm read where the backend's memory is (its caps) */
	ok((be->caps & DP_CAP_HOST_MEMORY) && !(be->caps & DP_CAP_NCCL),
	   "the cpu backend: host memory, no NCCL");
	float acc[N], g2[N], want[N];
	for (int i = 0; i < N; i++) {
		acc[i] = 0.1f * (float)i - 1.7f;
		g2[i] = 1.0f / (float)(i + 3);
		want[i] = acc[i] + g2[i];
	}
	dp_grads_add(be, ctx, acc, g2, N);
	ok(!memcmp(acc, want, sizeof acc), "dp_grads_add: acc + g, bit for bit");
	double norm = dp_grads_clip(be, ctx, g2, N, 0.5), ss = 0;
	for (int i = 0; i < N; i++)
		ss += (double)g2[i] * g2[i];
	ok(norm > 0.5 && fabs(sqrt(ss) - 0.5) < 1e-5, "dp_grads_clip: norm %.4f scaled to 0.5 (now %.6f)",
	   norm, sqrt(ss));
	be->close(ctx);
	return done_testing();
}
