/*
 * outputs.c - a run's outputs checked before the work (dp_train.h,
 * dp_run): each can be made, as this rank names it; no two name one file;
 * none is one of the training or validation files.  A run that could only
 * fail at its end fails at its start.
 */
#define _GNU_SOURCE
#include "dp_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *dp_run_path(const dp_run *r, const char *tmpl)
{
	char rb[16], zb[16];
	snprintf(rb, sizeof rb, "%d", r->rank);
	snprintf(zb, sizeof zb, "%d", r->size);
	const char *vars[] = {"rank", rb, "size", zb, NULL};
	return dp_expand(tmpl, vars);
}

/* The outputs: -o, --checkpoint, --log, --timeline, --save-best. */
enum { OUT_O, OUT_CKPT, OUT_LOG, OUT_TIMELINE, OUT_BEST, NOUT };
static const char *const out_opt[NOUT] = {"-o", "--checkpoint", "--log", "--timeline", "--save-best"};

/* The order they are checked in: as dp-train(1) lists them. */
static const int order[NOUT] = {OUT_O, OUT_CKPT, OUT_BEST, OUT_LOG, OUT_TIMELINE};

static void outputs(const dp_run *r, const char *val[NOUT])
{
	val[OUT_O] = r->output, val[OUT_CKPT] = r->ckpt, val[OUT_LOG] = r->log;
	val[OUT_TIMELINE] = r->timeline, val[OUT_BEST] = r->save_best;
}

/* Whether this rank writes output i: -o, --checkpoint and --save-best
 * rank 0; --log rank 0, and with --log-all-ranks every rank's {rank}
 * file; --timeline rank 0, or every rank with {rank}. */
static int writes(const dp_run *r, int i, const char *tmpl)
{
	if (!tmpl)
		return 0;
	if (i == OUT_LOG)
		return r->rank == 0 || (r->log_all && dp_names_rank(tmpl));
	if (i == OUT_TIMELINE)
		return r->rank == 0 || dp_names_rank(tmpl);
	return r->rank == 0;
}

/* Output tmpl of option opt can be created (dp_out_check), as this rank
 * will name it.  A name still holding {step} or {epoch} is known only
 * when saved: its directory is checked (a name of that directory with
 * placeholders, not at all). */
static int check_output(const dp_run *r, const char *opt, const char *tmpl, dp_err *e)
{
	char *path = dp_run_path(r, tmpl);
	if (!path)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	const char *slash = strrchr(path, '/');
	int later = strstr(path, "{step") || strstr(path, "{epoch");
	int rc = 0;
	if (!(later && slash && memchr(path, '{', (size_t)(slash - path))) &&
	    (rc = dp_out_check(path, e)) < 0) {
		char msg[sizeof e->msg];
		snprintf(msg, sizeof msg, "%s", e->msg);
		dp_seterr(e, rc, "%s %s", opt, msg);
	}
	free(path);
	return rc;
}

/* Two outputs naming one file would lose one (--log X -o X, --log X
 * --timeline X): refused, naming both.  -o and --checkpoint may share
 * one: the same kind of file, the latest state. */
static int check_distinct(dp_run *r, const char *val[NOUT], dp_err *e)
{
	for (int i = 0; i < NOUT; i++)
		for (int j = i + 1; j < NOUT; j++) {
			if (!val[i] || !val[j] || (i == OUT_O && j == OUT_CKPT))
				continue;
			char *a = dp_run_path(r, val[i]), *b = dp_run_path(r, val[j]);
			int same = a && b && dp_same_output(a, b);
			free(a);
			free(b);
			if (!a || !b)
				return dp_seterr(e, DP_ENOMEM, "out of memory");
			if (same) {
				r->fail = DP_RUN_FAIL_USAGE;
				return dp_seterr(e, DP_EARG, "%s %s and %s %s name one file: one would be lost",
						 out_opt[i], val[i], out_opt[j], val[j]);
			}
		}
	return 0;
}

int dp_run_check_outputs(dp_run *r, dp_err *e)
{
	const char *val[NOUT];
	outputs(r, val);
	r->fail = DP_RUN_FAIL_RANK;
	for (int k = 0; k < NOUT; k++)
		if (writes(r, order[k], val[order[k]]) && check_output(r, out_opt[order[k]], val[order[k]], e) < 0)
			return e->code;
	return check_distinct(r, val, e);
}

/* An output that is one of the training or validation files would
 * replace it (or, for --log, empty it before it is read): refused, before
 * the work.  Names with {step} or {epoch} are known only when saved. */
static int check_not_input(const dp_run *r, const char *opt, const char *tmpl, dp_err *e)
{
	char *path = dp_run_path(r, tmpl);
	if (!path)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	int t = r->td && dp_data_reads(r->td, path), v = !t && r->vd && dp_data_reads(r->vd, path);
	int rc = t || v ? dp_seterr(e, DP_EARG, "%s %s: is one of the %s files: it would be %s", opt,
				    path, t ? "training" : "validation",
				    strcmp(opt, "--log") ? "replaced" : "emptied before it is read")
			: 0;
	free(path);
	return rc;
}

int dp_run_check_inputs(dp_run *r, dp_err *e)
{
	const char *val[NOUT];
	outputs(r, val);
	r->fail = DP_RUN_FAIL_RANK;
	for (int k = 0; k < NOUT; k++)
		if (writes(r, order[k], val[order[k]]) &&
		    check_not_input(r, out_opt[order[k]], val[order[k]], e) < 0)
			return e->code;
	/* standard output (the log, or -o -) redirected to an input:
	 * `dp-train --train d.tfr >> d.tfr` */
	int to_stdout = (r->rank == 0 || r->log_all) &&
			(!r->log || !strcmp(r->log, "-") || (r->rank != 0 && !dp_names_rank(r->log)));
	if (r->rank == 0 && r->output && !strcmp(r->output, "-"))
		to_stdout = 1;
	if (to_stdout && ((r->td && dp_data_reads(r->td, "/proc/self/fd/1")) ||
			  (r->vd && dp_data_reads(r->vd, "/proc/self/fd/1"))))
		return dp_seterr(e, DP_EARG, "stdout: is one of the training or validation files: "
				 "writing there would damage them");
	return 0;
}
