/*
 * s3sync.c - buckets made and removed, and a local directory and an S3
 * prefix made the same (aws s3 mb, rb, sync).
 *
 * Sync lists both sides (dp_s3_list, recursive), pairs the files by their
 * names relative to the two prefixes, and copies what aws s3 sync's rule
 * (dp_s3_sync_needed) says has changed: a file the destination lacks, of
 * another size, or, uploading, newer than its object; downloading, older
 * than its file (with exact timestamps: of another time).  Times are whole seconds: S3 lists them so, and a
 * download gives the file the object's time, so the next sync finds the
 * pair the same.  Copies go through the batch pool of s3batch.c (uploads
 * whole or aborted, downloads renamed into place when whole); deletes
 * (delete_extra) through dp_s3_rm_many, under the destination's prefix
 * alone, and only after every copy succeeded.  Two local directories
 * (file:// or paths, so a pipeline runs offline first) sync as a download
 * does, compared by size and exact time.
 */
#define _GNU_SOURCE
#include "s3_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- Buckets ---------------------------------------------------------------------- */

int dp_s3_mb(dp_s3 *s, const char *bucket, dp_err *e)
{
	dp_s3_info in;
	dp_s3_get_info(s, &in);
	char body[256] = "";
	if (strcmp(in.region, "us-east-1") && in.region[0])
		snprintf(body, sizeof body,
			 "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
			 "<LocationConstraint>%s</LocationConstraint></CreateBucketConfiguration>",
			 in.region);
	char *what = s3_obj_url(bucket, "");
	s3_call c = {.method = "PUT", .bucket = bucket, .body = body, .body_len = strlen(body)};
	int rc = what ? s3_perform(s, &c, what, e) : dp_seterr(e, DP_ENOMEM, "out of memory");
	s3_call_clean(&c);
	free(what);
	return rc;
}

int dp_s3_rb(dp_s3 *s, const char *bucket, dp_err *e)
{
	char *what = s3_obj_url(bucket, "");
	s3_call c = {.method = "DELETE", .bucket = bucket};
	int rc = what ? s3_perform(s, &c, what, e) : dp_seterr(e, DP_ENOMEM, "out of memory");
	s3_call_clean(&c);
	free(what);
	return rc;
}

/* ---- The rule --------------------------------------------------------------------- */

int dp_s3_sync_needed(const dp_obj *src, const dp_obj *dst, int download, int exact)
{
	if (!dst || src->size != dst->size)
		return 1;
	if (download && exact)
		return src->mtime != dst->mtime;
	/* aws: an upload when the object is older than the file; a download
	 * when the file is newer than the object (changed here since it was
	 * downloaded with the object's time): an object rewritten in S3 at
	 * the same size is not, unless exact */
	return download ? dst->mtime > src->mtime : src->mtime > dst->mtime;
}

/* ---- One side listed ------------------------------------------------------------------ */

typedef struct side {
	dp_loc loc;    /* its prefix, ending in '/' */
	char *url;     /* as a URL: "s3://b/p/" or "dir/" */
	dp_objs objs;  /* the files under it, key order */
	const char **rel; /* (objs.n) each one's name relative to the prefix */
	size_t *order; /* (objs.n) indices sorted by rel */
} side;

typedef struct listctx {
	side *sd;
	const dp_s3_sync_conf *c;
	size_t plen;
	dp_err *e;
} listctx;

static int list_cb(void *ctx, const dp_obj *o)
{
	listctx *l = ctx;
	size_t kl = strlen(o->key);
	if (o->prefix || kl <= l->plen || o->key[kl - 1] == '/') /* folders, their markers */
		return 0;
	if (l->c->keep && !l->c->keep(l->c->ctx, o->key + l->plen))
		return 0;
	return dp_objs_add(&l->sd->objs, o, l->e);
}

static int rel_cmp(const void *a, const void *b, void *ctx)
{
	const side *sd = ctx;
	return strcmp(sd->rel[*(const size_t *)a], sd->rel[*(const size_t *)b]);
}

/* Parse url as a prefix ("directory") and list it.  A prefix or
 * directory that does not exist is empty, unless must_exist. */
static int side_open(dp_s3 *s, side *sd, const char *url, int must_exist, const dp_s3_sync_conf *c,
		     dp_err *e)
{
	int rc = dp_loc_parse(url, &sd->loc, e);
	if (rc < 0)
		return rc;
	size_t n = strlen(sd->loc.key);
	if (sd->loc.kind == DP_LOC_S3 && !*sd->loc.bucket)
		return dp_seterr(e, DP_EARG, "%s: names no bucket", url);
	if (sd->loc.kind == DP_LOC_FILE) {
		struct stat st;
		if (stat(sd->loc.key, &st) == 0 && !S_ISDIR(st.st_mode))
			return dp_seterr(e, DP_EARG, "%s: not a directory", url);
		if (must_exist && stat(sd->loc.key, &st) < 0) {
			int saved = errno;
			rc = dp_syserr(e, "%s", url);
			return saved == ENOENT ? (e->code = DP_ENOTFOUND) : rc;
		}
	}
	if (n && sd->loc.key[n - 1] != '/') {
		char *k = realloc(sd->loc.key, n + 2);
		if (!k)
			return dp_seterr(e, DP_ENOMEM, "out of memory");
		memcpy(k + n, "/", 2);
		sd->loc.key = k;
		n++;
	}
	if (sd->loc.kind == DP_LOC_S3 ? asprintf(&sd->url, "s3://%s/%s", sd->loc.bucket, sd->loc.key) < 0
				      : !(sd->url = strdup(n ? sd->loc.key : "./")))
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	listctx l = {sd, c, n, e};
	dp_loc where = sd->loc;
	if (where.kind == DP_LOC_FILE && !n)
		where.key = ".";
	rc = dp_s3_list(s, &where, 1, 0, list_cb, &l, e);
	if (rc == DP_ENOTFOUND && !must_exist)
		rc = DP_OK;
	if (rc < 0)
		return rc;
	sd->rel = calloc(sd->objs.n + 1, sizeof *sd->rel);
	sd->order = calloc(sd->objs.n + 1, sizeof *sd->order);
	if (!sd->rel || !sd->order)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	for (size_t i = 0; i < sd->objs.n; i++) {
		sd->rel[i] = sd->objs.v[i].key + (where.kind == DP_LOC_FILE && !n ? 2 : n);
		sd->order[i] = i;
	}
	qsort_r(sd->order, sd->objs.n, sizeof *sd->order, rel_cmp, sd);
	return DP_OK;
}

static void side_close(side *sd)
{
	dp_loc_free(&sd->loc);
	dp_objs_free(&sd->objs);
	free(sd->url);
	free(sd->rel);
	free(sd->order);
}

/* ---- The sync ------------------------------------------------------------------------ */

typedef struct plan {
	dp_s3_file *copy;
	char **names; /* the strings of copy[] (src, dst pairs) */
	size_t ncopy;
	dp_objs del;
	const dp_s3_sync_conf *c;
	const char *verb;
} plan;

static void copied_cb(void *ctx, size_t i)
{
	plan *p = ctx;
	if (p->c->report)
		p->c->report(p->c->ctx, p->verb, p->copy[i].src, p->copy[i].dst);
}

static int deleted_cb(void *ctx, const dp_obj *o)
{
	plan *p = ctx;
	if (p->c->report) {
		char *name = o->kind == DP_LOC_S3 ? s3_obj_url(o->bucket, o->key) : strdup(o->key);
		p->c->report(p->c->ctx, "delete", name ? name : o->key, NULL);
		free(name);
	}
	return 0;
}

/* What to do: src's files to copy to dst, dst's to delete. */
static int make_plan(const side *src, const side *dst, int download, int exact, plan *p,
		     dp_err *e)
{
	size_t i = 0, j = 0, ns = src->objs.n, nd = dst->objs.n;
	p->copy = calloc(ns + 1, sizeof *p->copy);
	p->names = calloc(2 * ns + 1, sizeof *p->names);
	if (!p->copy || !p->names)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	while (i < ns || j < nd) {
		const dp_obj *so = i < ns ? &src->objs.v[src->order[i]] : NULL;
		const dp_obj *dob = j < nd ? &dst->objs.v[dst->order[j]] : NULL;
		int c = !so ? 1 : !dob ? -1 : strcmp(src->rel[src->order[i]], dst->rel[dst->order[j]]);
		if (c > 0) { /* only at the destination */
			if (p->c->delete_extra && dp_objs_add(&p->del, dob, e) < 0)
				return DP_ENOMEM;
			j++;
			continue;
		}
		const char *rel = src->rel[src->order[i]];
		if (dp_s3_sync_needed(so, c == 0 ? dob : NULL, download, exact)) {
			char **nm = &p->names[2 * p->ncopy];
			if (asprintf(&nm[0], "%s%s", src->url, rel) < 0 ||
			    asprintf(&nm[1], "%s%s", dst->url, rel) < 0)
				return dp_seterr(e, DP_ENOMEM, "out of memory");
			p->copy[p->ncopy++] = (dp_s3_file){nm[0], nm[1], so->size, so->known, so->mtime};
		}
		i++;
		j += c == 0;
	}
	p->verb = download ? "download" : "upload";
	return DP_OK;
}

static void plan_free(plan *p)
{
	for (size_t i = 0; p->names && i < 2 * p->ncopy; i++)
		free(p->names[i]);
	free(p->names);
	free(p->copy);
	dp_objs_free(&p->del);
}

int dp_s3_sync(dp_s3 *s, const char *src, const char *dst, const dp_s3_sync_conf *c,
	       dp_s3_sync_stats *st, dp_err *e)
{
	side a = {0}, b = {0};
	plan p = {.c = c};
	dp_s3_sync_stats local = {0};
	if (!st)
		st = &local;
	int rc = side_open(s, &a, src, 1, c, e);
	if (rc == DP_OK && (rc = side_open(s, &b, dst, 0, c, e)) == DP_OK &&
	    a.loc.kind == DP_LOC_S3 && b.loc.kind == DP_LOC_S3)
		rc = dp_seterr(e, DP_EARG, "sync %s to %s: two S3 prefixes (sync each with a local "
			       "directory)", src, dst);
	/* local to local (a pipeline run offline first): copied as downloads
	 * are, with the source's time, and compared by size and time exactly */
	int both_local = a.loc.kind == DP_LOC_FILE && b.loc.kind == DP_LOC_FILE;
	int download = a.loc.kind == DP_LOC_S3 || both_local;
	if (rc == DP_OK)
		rc = make_plan(&a, &b, download, c->exact_timestamps || both_local, &p, e);
	if (rc == DP_OK && both_local)
		p.verb = "copy";
	if (rc == DP_OK && c->dryrun) {
		for (size_t i = 0; c->report && i < p.ncopy; i++)
			c->report(c->ctx, p.verb, p.copy[i].src, p.copy[i].dst);
		for (size_t i = 0; i < p.del.n; i++)
			deleted_cb(&p, &p.del.v[i]);
	} else if (rc == DP_OK) {
		rc = (download ? dp_s3_get_files : dp_s3_put_files)(s, p.copy, p.ncopy, c->jobs, copied_cb,
								    &p, &st->io, e);
		if (rc == DP_OK && p.del.n)
			rc = dp_s3_rm_many(s, &p.del, deleted_cb, &p, e);
	}
	if (rc == DP_OK) {
		st->copied += p.ncopy;
		st->deleted += p.del.n;
		st->same += a.objs.n - p.ncopy;
	}
	plan_free(&p);
	side_close(&a);
	side_close(&b);
	return rc;
}
