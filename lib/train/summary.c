/*
 * summary.c - a run in words (dp_train.h, "the run in words"): what
 * dp-train --summary prints (the layers, the memory at a batch, the
 * convolutions' algorithms, a pipeline's cut into stages) and the notes
 * of a run about the memory it takes, its pipeline and its allreduce
 * calls, with the check of --memory-limit.  Each is text for the caller to print (malloc'd, NULL
 * when out of memory): the library prints nothing.
 *
 * The figures are the model's own (dp_model_memory, dp_model_plan,
 * dp_model_layer_cost) and the trainer's (dp_trainer_pipe); the costs of
 * stages are estimates (multiply-adds a sample), not timings.
 */
#define _GNU_SOURCE
#include "train_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t dp_pipe_micro(const dp_step_conf *c)
{
	uint64_t four = 4 * (uint64_t)c->stages;
	return c->micro ? c->micro : c->batch < four ? c->batch : four;
}

/* The schedule's bubble: S - 1 idle slots of a stage in M + S - 1. */
static double bubble(int stages, uint64_t micro)
{
	return (double)(stages - 1) / (double)(micro + (uint64_t)stages - 1);
}

/* Stage k's layers [first[k], first[k + 1]): their parameters and their
 * estimated cost (dp_model_layer_cost: multiply-adds a sample). */
static size_t stage_params(dp_model *m, const int *first, int k, double *cost)
{
	size_t n = 0;
	*cost = 0;
	for (int i = first[k]; i < first[k + 1]; i++) {
		dp_layer_info li;
		dp_model_layer(m, i, &li);
		n += li.nparams;
		*cost += dp_model_layer_cost(m, i);
	}
	return n;
}

/* The recomputed segments, one line ("" when none). */
static void segments(dp_buf *b, dp_model *m)
{
	int ns = dp_model_nsegments(m);
	for (int s = 0; s < ns; s++) {
		int first, last;
		dp_layer_info la, lf;
		dp_model_segment(m, s, &first, &last);
		dp_model_layer(m, first, &la);
		dp_model_layer(m, last, &lf);
		dp_buf_printf(b, "%s%s..%s%s", s ? ", " : "recomputed: ", la.name, lf.name,
			      s + 1 == ns ? "\n" : "");
	}
}

char *dp_train_summary(dp_model *m, uint64_t batch)
{
	char a[64], c[64];
	dp_buf b = DP_BUF_INIT;
	dp_shape in = dp_model_input(m);
	/* columns as wide as their longest entry: an item is indented by the
	 * blocks it is in; a block's sum names what it adds to its items' output */
	int wn = 5, wi = 5, n = dp_model_nlayers(m);
	for (int i = 0; i < n; i++) {
		dp_layer_info li;
		dp_model_layer(m, i, &li);
		int l1 = (int)strlen(li.name), l2 = 2 * li.depth + (int)strlen(li.text);
		wn = l1 > wn ? l1 : wn;
		wi = l2 > wi ? l2 : wi;
	}
	dp_buf_printf(&b, "%-5s  %-*s  %-*s  %-12s  %10s\n", "layer", wn, "name", wi, "item", "output",
		      "params");
	dp_buf_printf(&b, "%-5s  %-*s  %-*s  %-12s  %10s\n", "", wn, "", wi, "input",
		      dp_shape_format(&in, a, sizeof a), "");
	for (int i = 0; i < n; i++) {
		dp_layer_info li;
		dp_model_layer(m, i, &li);
		dp_buf_printf(&b, "%-5d  %-*s  %*s%-*s  %-12s  %10zu%s\n", i, wn, li.name, 2 * li.depth,
			      "", wi - 2 * li.depth, li.text, dp_shape_format(&li.out, c, sizeof c),
			      li.nparams, li.frozen ? "  frozen" : "");
	}
	dp_buf_printf(&b, "total %zu parameters, loss %s\n", dp_model_nparams(m),
		      dp_loss_name(dp_model_loss_kind(m)));
	segments(&b, m);
	dp_model_mem mm;
	dp_err e;
	if (dp_model_plan(m, batch, &mm, &e) == 0) {
		char p[32], g[32], ac[32], k[32], sc[32], gb[32];
		dp_buf_printf(&b, "memory at batch %" PRIu64 ": parameters %s, their gradients %s, "
			      "activations %s (%s kept for the backward pass, %s scratch), gradient "
			      "buffers %s\n",
			      batch, dp_fmt_size(mm.params + mm.buffers, p, sizeof p),
			      dp_fmt_size(mm.grads, g, sizeof g), dp_fmt_size(mm.activations, ac, sizeof ac),
			      dp_fmt_size(mm.kept, k, sizeof k), dp_fmt_size(mm.scratch, sc, sizeof sc),
			      dp_fmt_size(mm.grad_scratch, gb, sizeof gb));
	}
	return dp_buf_take(&b);
}

int dp_train_summary_convs(dp_model *m, const dp_backend *be, dp_bectx *ctx, uint64_t batch,
			   const char *desc, char **text, dp_err *e)
{
	int n = dp_model_nlayers(m), wn = 5, any = 0;
	for (int i = 0; i < n; i++) {
		dp_layer_info li;
		dp_model_layer(m, i, &li);
		if (li.kind != DP_LAYER_CONV)
			continue;
		any = 1;
		wn = (int)strlen(li.name) > wn ? (int)strlen(li.name) : wn;
	}
	dp_buf b = DP_BUF_INIT;
	*text = NULL;
	if (any && be->conv_explain && dp_model_bind(m, be, ctx, batch, e) < 0)
		return -1;
	if (any && be->conv_explain)
		dp_buf_printf(&b, "convolutions at batch %" PRIu64 " (%s):\n", batch, desc);
	for (int i = 0; any && be->conv_explain && i < n; i++) {
		dp_layer_info li;
		dp_model_layer(m, i, &li);
		if (li.kind != DP_LAYER_CONV)
			continue;
		dp_conv2d g = {(int)batch, li.in.c,  li.in.h,  li.in.w,  li.units, li.out.h, li.out.w,
			       li.kh,      li.kw,    li.sh,    li.sw,    li.ph,    li.pw};
		char why[1024];
		if (be->conv_explain(ctx, &g, why, sizeof why) < 0)
			snprintf(why, sizeof why, "(not chosen)");
		dp_buf_printf(&b, "%-5d  %-*s  %s\n", i, wn, li.name, why);
	}
	if (!(*text = dp_buf_take(&b)))
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	return 0;
}

char *dp_train_summary_pipeline(dp_model *m, const dp_step_conf *c, dp_err *e)
{
	int first[DP_MAX_STAGES + 1], S = c->stages;
	if (dp_model_cuts(m, S, NULL, first, e) < 0)
		return NULL;
	size_t total = dp_model_nparams(m);
	dp_buf b = DP_BUF_INIT;
	dp_buf_printf(&b, "pipeline: %d stages of about equal cost (multiply-adds a sample, forward "
		      "and backward, estimated); mpirun -np %d x replicas\n", S, S);
	dp_buf_printf(&b, "%-5s  %-7s  %-30s  %10s  %10s  %s\n", "stage", "layers", "first..last",
		      "cost", "params", "memory");
	for (int k = 0; k < S; k++) {
		double cost;
		size_t np = stage_params(m, first, k, &cost);
		dp_layer_info la, lb;
		dp_model_layer(m, first[k], &la);
		dp_model_layer(m, first[k + 1] - 1, &lb);
		char range[16], names[96], mem[32];
		snprintf(range, sizeof range, "%d-%d", first[k], first[k + 1] - 1);
		snprintf(names, sizeof names, "%s..%s", la.name, lb.name);
		dp_buf_printf(&b, "%-5d  %-7s  %-30s  %10.4g  %10zu  %s (%.1f%%)\n", k, range, names,
			      cost, np, dp_fmt_size(np * sizeof(float), mem, sizeof mem),
			      total ? 100.0 * (double)np / (double)total : 0.0);
	}
	uint64_t mb = dp_pipe_micro(c);
	dp_buf_printf(&b, "bubble: (S-1)/(M+S-1) = %d/%" PRIu64 " = %.1f%% of a step with %" PRIu64
		      " micro-batches of %" PRIu64 "; activations kept on stage s: %" PRIu64
		      " micro-batches (gpipe), S - s (1f1b, %s)\n",
		      S - 1, mb + (uint64_t)S - 1, 100 * bubble(S, mb), mb, (c->batch + mb - 1) / mb,
		      mb, c->schedule == DP_PIPE_GPIPE ? "not chosen" : "chosen");
	char *t = dp_buf_take(&b);
	if (!t)
		dp_seterr(e, DP_ENOMEM, "out of memory");
	return t;
}

char *dp_train_memory_note(dp_model *m, const dp_optim *o)
{
	dp_model_mem mm;
	dp_model_memory(m, &mm);
	size_t opt = (size_t)dp_optim_nstates(o) * dp_model_nparams(m) * sizeof(float);
	char p[32], ob[32], a[32], k[32], sc[32], gb[32];
	dp_buf b = DP_BUF_INIT;
	dp_buf_printf(&b, "memory: parameters %s (+ gradients, %s of optimizer state), activations "
		      "%s (%s kept for the backward pass%s, %s scratch), gradient buffers %s",
		      dp_fmt_size(mm.params + mm.buffers, p, sizeof p), dp_fmt_size(opt, ob, sizeof ob),
		      dp_fmt_size(mm.activations, a, sizeof a), dp_fmt_size(mm.kept, k, sizeof k),
		      dp_model_nsegments(m) ? ", --recompute" : "",
		      dp_fmt_size(mm.scratch, sc, sizeof sc),
		      dp_fmt_size(mm.grad_scratch, gb, sizeof gb));
	return dp_buf_take(&b);
}

int dp_train_memory_check(dp_model *m, const dp_optim *o, uint64_t limit, dp_err *e)
{
	dp_model_mem mm;
	dp_model_memory(m, &mm);
	uint64_t opt = (uint64_t)dp_optim_nstates(o) * dp_model_nparams(m) * sizeof(float);
	uint64_t total = mm.total + opt;
	if (!limit || total <= limit)
		return 0;
	char t[32], l[32], w[32], a[32];
	return dp_seterr(e, DP_ELIMIT,
			 "memory: the model takes %s on this rank (weights, gradients and optimizer "
			 "state %s, activations and their gradient buffers %s at a micro-batch of "
			 "%zu), over --memory-limit %s: cut the activations with --recompute or a "
			 "smaller batch, the rest with --pipeline-stages",
			 dp_fmt_size(total, t, sizeof t),
			 dp_fmt_size(mm.params + mm.buffers + mm.grads + opt, w, sizeof w),
			 dp_fmt_size(mm.activations + mm.grad_scratch, a, sizeof a),
			 dp_model_max_batch(m), dp_fmt_size(limit, l, sizeof l));
}

char *dp_train_pipeline_note(const dp_trainer *t, dp_model *m, uint64_t batch, int schedule)
{
	dp_pipe_plan pl;
	if (!dp_trainer_pipe(t, &pl, NULL))
		return NULL;
	dp_buf s = DP_BUF_INIT, b = DP_BUF_INIT;
	size_t total = dp_model_total_params(m);
	for (int k = 0; k < pl.stages; k++) {
		double cost;
		size_t np = stage_params(m, pl.first, k, &cost);
		char mem[32];
		dp_buf_printf(&s, "%sstage %d layers %d-%d %s (%.1f%%)", k ? ", " : "", k, pl.first[k],
			      pl.first[k + 1] - 1, dp_fmt_size(np * sizeof(float), mem, sizeof mem),
			      total ? 100.0 * (double)np / (double)total : 0.0);
	}
	char *stages = dp_buf_take(&s);
	dp_buf_printf(&b, "pipeline: %d stages x %d replica%s, a step of %" PRIu64 " samples in %" PRIu64
		      " micro-batches of %zu, %s schedule (bubble %.1f%% in theory); parameters a "
		      "rank: %s",
		      pl.stages, pl.replicas, pl.replicas == 1 ? "" : "s", batch, pl.micro,
		      pl.micro_batch, dp_pipe_schedule_name(schedule), 100 * bubble(pl.stages, pl.micro),
		      stages ? stages : "");
	if (!stages)
		b.err = DP_ENOMEM;
	free(stages);
	return dp_buf_take(&b);
}

int dp_train_pipeline_report(const dp_trainer *t, dp_comm *c, char **text, dp_err *e)
{
	dp_pipe_plan pl;
	dp_pipe_stats st;
	*text = NULL;
	if (!dp_trainer_pipe(t, &pl, &st))
		return 0;
	int size = dp_comm_size(c);
	double mine = st.step_time > 0 ? 1 - st.busy_time / st.step_time : -1;
	double *all = train_allgather(c, &mine, sizeof mine, e);
	if (!all)
		return -1;
	dp_buf b = DP_BUF_INIT, s = DP_BUF_INIT;
	double sum = 0;
	int n = 0;
	for (int k = 0; k < pl.stages; k++) {
		double v = 0;
		int m = 0;
		for (int r = k; r < size; r += pl.stages)
			if (all[r] >= 0)
				v += all[r], m++;
		if (!m)
			continue;
		dp_buf_printf(&s, "%sstage %d %.1f%%", n ? ", " : "", k, 100 * v / m);
		sum += v / m;
		n++;
	}
	free(all);
	if (n)
		dp_buf_printf(&b, "pipeline: bubble %.1f%% of the steps' time measured (%s), %.1f%% in "
			      "theory ((S-1)/(M+S-1), stages of equal cost, messages free); %" PRIu64
			      " steps",
			      100 * sum / n, s.p ? s.p : "", 100 * st.theory, st.steps);
	dp_buf_free(&s);
	if (n && !(*text = dp_buf_take(&b)))
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	dp_buf_free(&b);
	return 0;
}

char *dp_train_comm_note(dp_comm *c, double step_s, int wire, int algo, int part)
{
	dp_comm_stats cs;
	dp_comm_stats_get(c, &cs);
	if (!cs.steps || step_s <= 0 || (part == 1 && dp_comm_size(c) == 1))
		return NULL;
	double steps = (double)cs.steps;
	dp_buf b = DP_BUF_INIT;
	if (part == 0)
		dp_buf_printf(&b, "communication: %.1f allreduce call%s a step (%.2f MiB), in flight "
			      "%.2f ms = %.1f%% of a %.2f ms step, %.2f ms (%.1f%%) of it not hidden by "
			      "the backward pass",
			      (double)cs.calls / steps, cs.calls == cs.steps ? "" : "s",
			      (double)cs.bytes / steps / 1048576.0, 1e3 * cs.busy_time / steps,
			      100 * cs.busy_time / steps / step_s, 1e3 * step_s,
			      1e3 * cs.wait_time / steps, 100 * cs.wait_time / steps / step_s);
	else
		dp_buf_printf(&b, "communication: %.2f MiB sent a step by rank %d (%s wire, %s "
			      "allreduce), %.2f MiB of it to another host; %d host%s",
			      (double)cs.wire_bytes / steps / 1048576.0, dp_comm_rank(c),
			      dp_comm_wire_name(wire), dp_comm_algo_name(algo),
			      (double)cs.cross_bytes / steps / 1048576.0, cs.hosts,
			      cs.hosts == 1 ? "" : "s");
	return dp_buf_take(&b);
}
