/*
 * tbrun.c - a TensorBoard run folder the way Keras's TensorBoard callback
 * writes it (dp_events.h, dp_tb_run): DIR's own event file for the
 * per-step scalars and the run's settings (the hparams plugin's session,
 * a text summary), DIR/train/ and DIR/validation/ for the epoch metrics
 * under shared tags, so that TensorBoard draws training and validation
 * curves on one chart.  Built on dp_events alone.  And the other way: the
 * event files of a log folder, with their runs, as TensorBoard finds them.
 */
#define _GNU_SOURCE
#include "dp_events.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct dp_tb_run {
	char *dir;
	dp_events *f[3]; /* enum dp_tb_part; train and validation made when first due */
	int session;     /* a session start was written: end it at the close */
};

dp_tb_run *dp_tb_run_open(const char *dir, dp_err *e)
{
	dp_tb_run *r = calloc(1, sizeof *r);
	if (!r || !(r->dir = strdup(dir))) {
		free(r);
		dp_seterr(e, DP_ENOMEM, "%s: out of memory", dir);
		return NULL;
	}
	if (!(r->f[DP_TB_STEPS] = dp_events_create(dir, e))) {
		free(r->dir);
		free(r);
		return NULL;
	}
	return r;
}

dp_events *dp_tb_run_steps(dp_tb_run *r) { return r->f[DP_TB_STEPS]; }

/* s as a Markdown table cell: | escaped, line breaks as spaces. */
static void md_cell(dp_buf *b, const char *s)
{
	for (; *s; s++) {
		if (*s == '|')
			dp_buf_addstr(b, "\\|");
		else
			dp_buf_add(b, *s == '\n' || *s == '\r' ? " " : s, 1);
	}
}

int dp_tb_run_settings(dp_tb_run *r, const char *cmdline, const char *const *kv, const char *types,
		       dp_err *e)
{
	dp_events *w = r->f[DP_TB_STEPS];
	dp_buf t = DP_BUF_INIT;
	if (cmdline) { /* an indented block: Markdown shows it as typed */
		dp_buf_addstr(&t, "    ");
		for (const char *s = cmdline; *s; s++) {
			dp_buf_add(&t, s, 1);
			if (*s == '\n')
				dp_buf_addstr(&t, "    ");
		}
		dp_buf_addstr(&t, "\n\n");
	}
	dp_buf_addstr(&t, "| setting | value |\n|---|---|\n");
	for (const char *const *x = kv; x && x[0] && x[1]; x += 2) {
		if (!x[1][0])
			continue;
		dp_buf_addstr(&t, "| ");
		md_cell(&t, x[0]);
		dp_buf_addstr(&t, " | ");
		md_cell(&t, x[1]);
		dp_buf_addstr(&t, " |\n");
	}
	if (t.err) {
		dp_buf_free(&t);
		return dp_seterr(e, DP_ENOMEM, "%s: out of memory", r->dir);
	}
	dp_summary_hparams_start(dp_events_summary(w), kv, types, 0);
	dp_summary_text(dp_events_summary(w), "settings", t.p);
	dp_buf_free(&t);
	int rc = dp_events_write(w, 0, 0, e);
	if (rc == DP_OK)
		r->session = 1;
	return rc;
}

int dp_tb_run_epoch(dp_tb_run *r, int part, int64_t epoch, const char *const *names,
		    const double *v, int n, dp_err *e)
{
	if (part != DP_TB_TRAIN && part != DP_TB_VALIDATION)
		return dp_seterr(e, DP_EARG, "%s: no such part of a run", r->dir);
	if (!r->f[part]) {
		dp_buf d = DP_BUF_INIT;
		dp_buf_printf(&d, "%s%s%s", r->dir, r->dir[strlen(r->dir) - 1] == '/' ? "" : "/",
			      part == DP_TB_TRAIN ? "train" : "validation");
		if (d.err) {
			dp_buf_free(&d);
			return dp_seterr(e, DP_ENOMEM, "%s: out of memory", r->dir);
		}
		r->f[part] = dp_events_create(d.p, e);
		dp_buf_free(&d);
		if (!r->f[part])
			return e ? e->code : DP_EIO;
	}
	dp_buf *s = dp_events_summary(r->f[part]);
	for (int i = 0; i < n; i++) {
		char tag[128];
		snprintf(tag, sizeof tag, "epoch_%s", names[i]);
		dp_summary_scalar(s, tag, (float)v[i]);
	}
	return dp_events_write(r->f[part], epoch, 0, e);
}

int dp_tb_run_end(dp_tb_run *r, int ok, dp_err *e)
{
	if (!r->session)
		return DP_OK;
	r->session = 0;
	dp_summary_hparams_end(dp_events_summary(r->f[DP_TB_STEPS]), ok, 0);
	return dp_events_write(r->f[DP_TB_STEPS], 0, 0, e);
}

int dp_tb_run_close(dp_tb_run *r, dp_err *e)
{
	if (!r)
		return DP_OK;
	int rc = DP_OK;
	for (int i = 0; i < 3; i++) {
		dp_err e2;
		if (dp_events_close(r->f[i], rc == DP_OK ? e : &e2) < 0 && rc == DP_OK)
			rc = e ? e->code : DP_EIO;
	}
	free(r->dir);
	free(r);
	return rc;
}

/* ---- finding a log folder's event files ---------------------------------------- */

struct found {
	dp_buf b;     /* path\0run\0... */
	size_t n;
	int depth;
};

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* dir's entries, sorted; the event files into f, the folders walked. */
static int walk(struct found *f, const char *dir, const char *run, dp_err *e)
{
	DIR *d = opendir(dir);
	if (!d)
		return dp_syserr(e, "%s", dir);
	char **names = NULL;
	size_t nn = 0, cap = 0;
	struct dirent *de;
	int rc = DP_OK;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (dp_grow(&names, &cap, nn + 1, sizeof *names) < 0 ||
		    !(names[nn] = strdup(de->d_name))) {
			rc = dp_seterr(e, DP_ENOMEM, "%s: out of memory", dir);
			break;
		}
		nn++;
	}
	closedir(d);
	if (rc == DP_OK)
		qsort(names, nn, sizeof *names, cmp_str);
	for (size_t i = 0; rc == DP_OK && i < nn; i++) {
		dp_buf p = DP_BUF_INIT, r = DP_BUF_INIT;
		dp_buf_printf(&p, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", names[i]);
		dp_buf_printf(&r, "%s%s%s", run, *run ? "/" : "", names[i]);
		struct stat st;
		if (p.err || r.err)
			rc = dp_seterr(e, DP_ENOMEM, "%s: out of memory", dir);
		else if (lstat(p.p, &st) == 0 && S_ISDIR(st.st_mode)) { /* links to folders: not followed */
			if (f->depth >= 64)
				rc = dp_seterr(e, DP_ELIMIT, "%s: folders more than 64 deep", p.p);
			else {
				f->depth++;
				rc = walk(f, p.p, r.p, e);
				f->depth--;
			}
		} else if (strstr(names[i], "tfevents") && stat(p.p, &st) == 0 && S_ISREG(st.st_mode)) {
			dp_buf_add(&f->b, p.p, p.len + 1);
			dp_buf_add(&f->b, run, strlen(run) + 1);
			f->n++;
		}
		dp_buf_free(&p);
		dp_buf_free(&r);
	}
	for (size_t i = 0; i < nn; i++)
		free(names[i]);
	free(names);
	return rc;
}

char **dp_tb_find(const char *dir, dp_err *e)
{
	struct found f = {DP_BUF_INIT, 0, 0};
	if (walk(&f, dir, "", e) < 0) {
		dp_buf_free(&f.b);
		return NULL;
	}
	char **m = f.b.err ? NULL : malloc((2 * f.n + 1) * sizeof *m + f.b.len);
	if (!m) {
		dp_buf_free(&f.b);
		dp_seterr(e, DP_ENOMEM, "%s: out of memory", dir);
		return NULL;
	}
	char *p = f.b.len ? memcpy((char *)(m + 2 * f.n + 1), f.b.p, f.b.len) : NULL;
	for (size_t i = 0; i < 2 * f.n; i++, p += strlen(p) + 1)
		m[i] = p;
	m[2 * f.n] = NULL;
	dp_buf_free(&f.b);
	return m;
}
