/*
 * log.c - a run's log (dp_train.h, dp_run): the lines that machines read,
 * key=value pairs (logfmt) or JSON objects a line (r->json), in the file
 * the caller opened (r->logfp), and the same as TensorBoard events
 * (r->tb).  Rank 0 writes the job's lines; with --log-all-ranks every rank
 * also writes its own, which begin with rank=R.  The lines: training
 * (the job's sums over the ranks), validation, training control's events,
 * the state's hash at the end; dp-train(1) names their keys.
 */
#define _GNU_SOURCE
#include "dp_train.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

int dp_run_log_line(dp_run *r, const char *const *keys, const char *const *vals, int n, int own,
		    dp_err *e)
{
	r->fail = DP_RUN_FAIL_RANK;
	if (!r->logfp || (own && !(r->log_all && r->size > 1)) || (!own && r->rank != 0))
		return 0;
	if (r->before_line)
		r->before_line();
	FILE *f = r->logfp;
	if (r->json)
		fputc('{', f);
	if (own)
		fprintf(f, r->json ? "\"rank\":%d%s" : "rank=%d%s", r->rank, n ? (r->json ? "," : " ") : "");
	for (int i = 0; i < n; i++)
		fprintf(f, r->json ? "%s\"%s\":%s" : "%s%s=%s", i ? (r->json ? "," : " ") : "", keys[i],
			vals[i]);
	fputs(r->json ? "}\n" : "\n", f);
	if (fflush(f) != 0 || ferror(f))
		return dp_seterr(e, DP_EIO, "%s: write error: %s", r->log ? r->log : "stdout",
				 strerror(errno));
	if (!own && r->tb && dp_train_tb_line(r->tb, keys, vals, n, e) < 0)
		return dp_preferr(e, "--tensorboard");
	return 0;
}

/* A training line of sums v (loss, correct, samples, skipped) over dt
 * seconds: the job's, or this rank's own. */
static int train_line(dp_run *r, uint64_t epoch, const double v[4], double dt, int own, dp_err *e)
{
	char b[7][40];
	const char *keys[7] = {"epoch", "step", "loss", "accuracy", "lr", "samples_per_sec", "skipped"};
	const char *vals[7] = {b[0], b[1], b[2], b[3], b[4], b[5], b[6]};
	snprintf(b[0], 40, "%" PRIu64, epoch + 1);
	snprintf(b[1], 40, "%" PRIu64, r->ts.step);
	snprintf(b[2], 40, "%.6g", v[2] > 0 ? v[0] / v[2] : 0.0);
	snprintf(b[3], 40, "%.4f", v[2] > 0 ? v[1] / v[2] : 0.0);
	/* 12 significant digits: a schedule's arithmetic leaves noise in the
	 * last bits (cosine: 0.005000000000000003), not a rate anyone set */
	snprintf(b[4], 40, "%.12g", r->lr);
	/* 3 significant digits at least: resnet50 trains 3.4 samples/s on a
	 * CPU, which whole samples would print as 3 */
	dp_fmt_rate(dt > 0 ? v[2] / dt : 0.0, b[5], 40);
	snprintf(b[6], 40, "%.0f", v[3]);
	if (!r->xent) { /* mse: no accuracy */
		keys[3] = keys[4], keys[4] = keys[5], keys[5] = keys[6];
		vals[3] = vals[4], vals[4] = vals[5], vals[5] = vals[6];
	}
	/* skipped: the images skipped as corrupt this epoch so far (the
	 * input's count, which may run a few batches ahead of the steps) */
	return dp_run_log_line(r, keys, vals, (r->xent ? 6 : 5) + r->skip_corrupt, own, e);
}

int dp_run_log_train(dp_run *r, uint64_t epoch, dp_err *e)
{
	dp_run_meter *mt = &r->mt;
	double t = dp_now(), dt = t - mt->t0;
	dp_data_stats ds = {0};
	if (r->td)
		dp_data_stats_get(r->td, &ds);
	double v[4] = {mt->loss, mt->correct, (double)mt->samples, (double)ds.corrupt};
	if (train_line(r, epoch, v, dt, 1, e) < 0)
		return e->code;
	if (dp_comm_allreduce_sum(r->comm, v, 4, e) < 0)
		return dp_preferr(e, "log");
	dp_comm_event(r->comm, "metrics", 1, t, dp_now());
	if (train_line(r, epoch, v, dt, 0, e) < 0)
		return e->code;
	r->ep.loss += v[0];
	r->ep.correct += v[1];
	r->ep.samples += (uint64_t)v[2];
	memset(mt, 0, sizeof *mt);
	mt->t0 = dp_now();
	return 0;
}

int dp_run_log_val(dp_run *r, uint64_t epoch, int own, dp_err *e)
{
	dp_eval_report rep;
	if (dp_eval_report_get(r->eval, &rep, e) < 0) { /* no samples */
		if (!own) {
			r->fail = DP_RUN_FAIL_JOB;
			return dp_seterr(e, DP_EDATA, "val: no records");
		}
		memset(&rep, 0, sizeof rep); /* a rank without a share: zeros */
	}
	char v[6][40];
	snprintf(v[0], 40, "%" PRIu64, epoch + 1);
	snprintf(v[1], 40, "%" PRIu64, r->ts.step);
	snprintf(v[2], 40, "%.6g", rep.loss);
	snprintf(v[3], 40, "%.4f", rep.accuracy);
	snprintf(v[4], 40, "%" PRIu64, rep.samples);
	snprintf(v[5], 40, "%" PRIu64, rep.skipped);
	const char *keys[] = {"epoch", "step", "val_loss", r->xent ? "val_accuracy" : "val_samples",
			      r->xent ? "val_samples" : "val_skipped", "val_skipped"};
	const char *vals[] = {v[0], v[1], v[2], r->xent ? v[3] : v[4], r->xent ? v[4] : v[5], v[5]};
	return dp_run_log_line(r, keys, vals, (r->xent ? 5 : 4) + r->skip_corrupt, own, e);
}

int dp_run_log_event(dp_run *r, uint64_t epoch, const char *event, const char *const *k,
		     const char *const *v, int n, dp_err *e)
{
	char eb[24], sb[24], evq[64];
	const char *keys[8] = {"epoch", "step", "event"}, *vals[8] = {eb, sb, evq};
	snprintf(eb, sizeof eb, "%" PRIu64, epoch + 1);
	snprintf(sb, sizeof sb, "%" PRIu64, r->ts.step);
	snprintf(evq, sizeof evq, r->json ? "\"%s\"" : "%s", event);
	for (int i = 0; i < n && i < 5; i++)
		keys[3 + i] = k[i], vals[3 + i] = v[i];
	return dp_run_log_line(r, keys, vals, 3 + (n < 5 ? n : 5), 0, e);
}

int dp_run_log_state(dp_run *r, char hash[17], char **diff, dp_err *e)
{
	uint64_t h;
	r->fail = DP_RUN_FAIL_RANK;
	if (dp_trainer_check_same(r->tr, r->comm, &h, diff, e) < 0)
		return e->code;
	char qb[24], sb[24];
	snprintf(hash, 17, "%016" PRIx64, h);
	snprintf(qb, sizeof qb, r->json ? "\"%s\"" : "%s", hash);
	snprintf(sb, sizeof sb, "%" PRIu64, r->ts.step);
	const char *keys[] = {"step", "state_fnv1a64"}, *vals[] = {sb, qb};
	return dp_run_log_line(r, keys, vals, 2, 1, e);
}

int dp_run_log_epoch(dp_run *r, uint64_t epoch, dp_err *e)
{
	dp_eval_report rep;
	if (!r->tb)
		return 0;
	double n = r->ep.samples ? (double)r->ep.samples : 1;
	double tv[] = {r->ep.loss / n, r->ep.correct / n, r->lr};
	int val = r->vd && dp_eval_report_get(r->eval, &rep, NULL) == 0;
	r->fail = DP_RUN_FAIL_RANK;
	if (dp_train_tb_epoch(r->tb, (int64_t)epoch, tv, r->ep.samples, r->xent, val ? &rep : NULL, e) < 0)
		return dp_preferr(e, "--tensorboard");
	memset(&r->ep, 0, sizeof r->ep);
	return 0;
}
