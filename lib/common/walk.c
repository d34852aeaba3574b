/*
 * walk.c - folder trees (dp.h): one read, each folder once (dp_walk), and
 * the folders of a path made (dp_make_parents).
 *
 * Symbolic links are followed (a dataset is often a tree of links), so a
 * link to a folder above it (cat/loop -> ..) would make the tree endless
 * and a second link to one folder would read its files twice: the
 * folders on the way down are kept by device and inode, and one met again
 * is an error naming the link and the folder it leads back to, as is a
 * tree deeper than DP_WALK_MAX_DEPTH.  Nothing is passed over without a
 * message.
 */
#define _GNU_SOURCE
#include "dp.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct seen {
	dev_t dev;
	ino_t ino;
	char *path;
} seen;

typedef struct walker {
	dp_walk_fn fn;
	void *ctx;
	seen *dirs; /* every folder walked so far */
	size_t n, cap;
} walker;

static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

static int visible(const struct dirent *d)
{
	return d->d_name[0] != '.';
}

/* Record folder path (st) as walked: DP_EDATA when it was already. */
static int enter(walker *w, const char *path, const struct stat *st, dp_err *e)
{
	for (size_t i = 0; i < w->n; i++)
		if (w->dirs[i].dev == st->st_dev && w->dirs[i].ino == st->st_ino) {
			size_t l = strlen(w->dirs[i].path);
			int above = !strncmp(path, w->dirs[i].path, l) && path[l] == '/';
			return dp_seterr(e, DP_EDATA,
					 "%s: %s %s (a symbolic link?): each folder is read once",
					 path, above ? "a loop: it leads back to" : "the same folder as",
					 w->dirs[i].path);
		}
	if (dp_grow(&w->dirs, &w->cap, w->n + 1, sizeof *w->dirs) < 0 ||
	    !(w->dirs[w->n].path = strdup(path)))
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	w->dirs[w->n].dev = st->st_dev;
	w->dirs[w->n].ino = st->st_ino;
	w->n++;
	return DP_OK;
}

static int walk(walker *w, const char *dir, const char *rel, int depth, dp_err *e)
{
	struct dirent **ents;
	int n = scandir(dir, &ents, visible, by_name);
	if (n < 0)
		return dp_syserr(e, "%s", dir);
	int rc = DP_OK;
	for (int i = 0; i < n; i++) {
		char *p = NULL, *r = NULL;
		struct stat st;
		if (rc == DP_OK && (asprintf(&p, "%s/%s", dir, ents[i]->d_name) < 0 ||
				    asprintf(&r, "%s%s%s", rel, *rel ? "/" : "", ents[i]->d_name) < 0))
			p = r = NULL, rc = dp_seterr(e, DP_ENOMEM, "out of memory");
		if (rc == DP_OK && stat(p, &st) < 0)
			rc = dp_syserr(e, "%s", p);
		if (rc == DP_OK) {
			dp_walk_entry we = {p, r, ents[i]->d_name, depth, &st};
			rc = w->fn(w->ctx, &we, e);
			if (rc == DP_OK && S_ISDIR(st.st_mode)) {
				if (depth + 1 >= DP_WALK_MAX_DEPTH)
					rc = dp_seterr(e, DP_ELIMIT, "%s: more than %d folders deep (a loop?)",
						       p, DP_WALK_MAX_DEPTH);
				else if ((rc = enter(w, p, &st, e)) == DP_OK)
					rc = walk(w, p, r, depth + 1, e);
			} else if (rc > 0) {
				rc = DP_OK;
			}
		}
		free(p);
		free(r);
		free(ents[i]);
	}
	free(ents);
	return rc;
}

int dp_walk(const char *dir, dp_walk_fn fn, void *ctx, dp_err *e)
{
	walker w = {fn, ctx, NULL, 0, 0};
	struct stat st;
	int rc = stat(dir, &st) < 0 ? dp_syserr(e, "%s", dir) : enter(&w, dir, &st, e);
	if (rc == DP_OK)
		rc = walk(&w, dir, "", 0, e);
	for (size_t i = 0; i < w.n; i++)
		free(w.dirs[i].path);
	free(w.dirs);
	return rc;
}

/* One folder of dp_make_parents: made, or there already. */
static int make_dir(const char *d, dp_made_fn made, void *ctx, dp_err *e)
{
	if (mkdir(d, 0777) == 0)
		return made ? made(ctx, d, e) : DP_OK;
	return errno == EEXIST ? DP_OK : dp_syserr(e, "%s: cannot create directory", d);
}

int dp_make_parents(const char *path, dp_made_fn made, void *ctx, dp_err *e)
{
	char *d = strdup(path);
	if (!d)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	char *slash = strrchr(d, '/');
	int rc = DP_OK;
	if (slash && slash != d) {
		*slash = 0;
		for (char *p = d + 1; *p && rc == DP_OK; p++) {
			if (*p != '/')
				continue;
			*p = 0;
			rc = make_dir(d, made, ctx, e);
			*p = '/';
		}
		if (rc == DP_OK)
			rc = make_dir(d, made, ctx, e);
	}
	free(d);
	return rc;
}
