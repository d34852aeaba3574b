/*
 * s3plan.c - which names a command covers: aws s3's --include/--exclude
 * filters, and the uploads a put of files and directories under a prefix
 * makes (names as aws s3 cp --recursive gives them, two files on one key
 * refused before anything is sent, the folder markers of --dir-markers).
 * Local work only: directories are read through dp_s3_list.
 */
#define _GNU_SOURCE
#include "s3_int.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- --include, --exclude ----------------------------------------------------------- */

int dp_s3_filters_add(dp_s3_filters *f, int include, const char *pattern, dp_err *e)
{
	if (dp_grow(&f->v, &f->cap, f->n + 1, sizeof *f->v) < 0)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	f->v[f->n++] = (struct dp_s3_filter){include, pattern};
	return DP_OK;
}

void dp_s3_filters_free(dp_s3_filters *f)
{
	free(f->v);
	memset(f, 0, sizeof *f);
}

int dp_s3_filters_keep(const dp_s3_filters *f, const char *name)
{
	int in = 1;
	for (size_t i = 0; f && i < f->n; i++)
		if (fnmatch(f->v[i].pattern, name, 0) == 0)
			in = f->v[i].include;
	return in;
}

char *dp_s3_filter_base(const dp_loc *l)
{
	size_t n = strlen(l->key);
	if (dp_loc_is_dir(l)) {
		char *b = malloc(n + 2);
		if (!b)
			return NULL;
		memcpy(b, l->key, n + 1);
		if (n && b[n - 1] != '/')
			memcpy(b + n, "/", 2);
		return b;
	}
	const char *slash = strrchr(l->key, '/');
	size_t k = slash ? (size_t)(slash - l->key) + 1 : 0;
	return strndup(l->key, k);
}

const char *dp_s3_rel_name(const char *name, const char *base)
{
	size_t n = strlen(base);
	return strncmp(name, base, n) == 0 ? name + n : name;
}

void dp_s3_filters_apply(const dp_s3_filters *f, dp_objs *objs, size_t from, const char *base)
{
	if (!f || !f->n)
		return;
	size_t k = from;
	for (size_t i = from; i < objs->n; i++) {
		if (dp_s3_filters_keep(f, dp_s3_rel_name(objs->v[i].key, base)))
			objs->v[k++] = objs->v[i];
		else
			s3_obj_clear(&objs->v[i]);
	}
	objs->n = k;
}

/* ---- put's plan ---------------------------------------------------------------------- */

typedef struct planner {
	dp_s3 *s;
	dp_s3_plan *p;
	const dp_s3_filters *f;
	const char *prefix, *base;
	int depth;
	dp_err *e;
} planner;

/* A folder marker to make: the first len bytes of a, then b. */
static int add_dir(planner *w, const char *a, size_t len, const char *b)
{
	dp_s3_plan *p = w->p;
	if (dp_grow(&p->dirs, &p->dcap, p->ndirs + 1, sizeof *p->dirs) < 0 ||
	    asprintf(&p->dirs[p->ndirs], "%.*s%s", (int)len, a, b) < 0)
		return dp_seterr(w->e, DP_ENOMEM, "out of memory");
	p->ndirs++;
	return DP_OK;
}

static int add_file(planner *w, const char *file, const char *name)
{
	dp_s3_plan *p = w->p;
	char *src = strdup(file), *dst = NULL;
	if (!src || dp_grow(&p->v, &p->cap, p->n + 1, sizeof *p->v) < 0 ||
	    asprintf(&dst, "%s%s", w->prefix, name) < 0) {
		free(src);
		return dp_seterr(w->e, DP_ENOMEM, "out of memory");
	}
	p->v[p->n++] = (dp_s3_file){.src = src, .dst = dst};
	return DP_OK;
}

/* --dir-markers: a marker for each directory under the one listed (empty
 * ones too), one level a listing, as deep as the file walk goes. */
static int dirs_cb(void *ctx, const dp_obj *o)
{
	planner *w = ctx;
	if (!o->prefix)
		return 0;
	const char *rel = dp_s3_rel_name(o->key, w->base);
	if (!dp_s3_filters_keep(w->f, rel))
		return 0;
	if (add_dir(w, w->prefix, strlen(w->prefix), rel) < 0)
		return w->e->code;
	if (w->depth >= 64)
		return dp_seterr(w->e, DP_ELIMIT, "%s: directories nested too deep", o->key);
	dp_loc d2 = {.kind = DP_LOC_FILE, .key = o->key};
	w->depth++;
	int rc = dp_s3_list(w->s, &d2, 0, 0, dirs_cb, w, w->e);
	w->depth--;
	return rc;
}

static int walk_cb(void *ctx, const dp_obj *o)
{
	planner *w = ctx;
	const char *rel = dp_s3_rel_name(o->key, w->base);
	if (!o->prefix && dp_s3_filters_keep(w->f, rel))
		return add_file(w, o->key, rel);
	return 0;
}

/* The uploads argument arg makes: a file under its base name, a
 * directory's files (all levels) under their paths relative to it. */
static int add_arg(planner *w, const char *arg, int markers)
{
	if (!strcmp(arg, "-")) {
		w->p->bad_arg = 1;
		return dp_seterr(w->e, DP_EARG, "put: stdin ('-') has no name to put under %s",
				 w->prefix);
	}
	struct stat sb;
	if (stat(arg, &sb) == 0 && S_ISDIR(sb.st_mode)) {
		dp_loc d = {.kind = DP_LOC_FILE, .key = (char *)arg};
		char *base = dp_s3_filter_base(&d);
		if (!base)
			return dp_seterr(w->e, DP_ENOMEM, "out of memory");
		w->base = base;
		int rc = dp_s3_list(w->s, &d, 1, 0, walk_cb, w, w->e);
		if (rc == DP_OK && markers) {
			dp_loc top = {.kind = DP_LOC_FILE, .key = base};
			w->depth = 0;
			rc = dp_s3_list(w->s, &top, 0, 0, dirs_cb, w, w->e);
		}
		free(base);
		return rc;
	}
	const char *name = strrchr(arg, '/');
	name = name ? name + 1 : arg;
	if (!*name) {
		w->p->bad_arg = 1;
		return dp_seterr(w->e, DP_EARG, "put: %s: not a file name", arg);
	}
	return dp_s3_filters_keep(w->f, name) ? add_file(w, arg, name) : DP_OK;
}

static int str_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int dst_cmp(const void *a, const void *b)
{
	return strcmp(((const dp_s3_file *)a)->dst, ((const dp_s3_file *)b)->dst);
}

int dp_s3_plan_put(dp_s3 *s, const char *prefix, char *const *args, int n,
		   const dp_s3_filters *f, int markers, dp_s3_plan *p, dp_err *e)
{
	memset(p, 0, sizeof *p);
	planner w = {s, p, f, prefix, NULL, 0, e};
	for (int i = 0; i < n; i++)
		if (add_arg(&w, args[i], markers) < 0)
			return e->code;
	dp_s3_file *sorted = malloc((p->n ? p->n : 1) * sizeof *sorted);
	if (!sorted)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	memcpy(sorted, p->v, p->n * sizeof *sorted);
	qsort(sorted, p->n, sizeof *sorted, dst_cmp);
	for (size_t i = 1; i < p->n; i++)
		if (!strcmp(sorted[i - 1].dst, sorted[i].dst)) {
			p->bad_arg = 1;
			dp_seterr(e, DP_EARG, "put: %s and %s would both be %s", sorted[i - 1].src,
				  sorted[i].src, sorted[i].dst);
			free(sorted);
			return DP_EARG;
		}
	free(sorted);
	if (!markers)
		return DP_OK;
	/* the directories of the files put, whatever the filters said of the
	 * directories themselves */
	size_t ul = strlen(prefix);
	for (size_t i = 0; i < p->n; i++)
		for (const char *q = p->v[i].dst + ul; (q = strchr(q, '/')); q++)
			if (add_dir(&w, p->v[i].dst, (size_t)(q + 1 - p->v[i].dst), "") < 0)
				return e->code;
	qsort(p->dirs, p->ndirs, sizeof *p->dirs, str_cmp);
	size_t k = 0;
	for (size_t i = 0; i < p->ndirs; i++) {
		if (k && !strcmp(p->dirs[k - 1], p->dirs[i]))
			free(p->dirs[i]);
		else
			p->dirs[k++] = p->dirs[i];
	}
	p->ndirs = k;
	return DP_OK;
}

void dp_s3_plan_free(dp_s3_plan *p)
{
	for (size_t i = 0; i < p->ndirs; i++)
		free(p->dirs[i]);
	free(p->dirs);
	for (size_t i = 0; i < p->n; i++) {
		free((char *)p->v[i].src);
		free((char *)p->v[i].dst);
	}
	free(p->v);
	memset(p, 0, sizeof *p);
}
