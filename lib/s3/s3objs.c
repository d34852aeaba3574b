/*
 * s3objs.c - locations and object lists: URLs, listings (S3 and local
 * directories, in the same key order), manifests, shuffle and shard, and
 * the small operations (rm, presign, multipart upload housekeeping).
 *
 * Local trees are listed in S3's order: the relative paths sorted bytewise
 * as whole strings ("a.txt" before "a/b"), so a directory and its copy in
 * a bucket shuffle and shard identically.
 */
#define _GNU_SOURCE
#include "s3_int.h"
#include "dp_hash.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- Locations ------------------------------------------------------------ */

void dp_loc_free(dp_loc *l)
{
	free(l->bucket);
	free(l->key);
	l->bucket = l->key = NULL;
}

static int bucket_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '.' || c == '_';
}

int dp_loc_parse(const char *s, dp_loc *l, dp_err *e)
{
	memset(l, 0, sizeof *l);
	if (strncmp(s, "s3://", 5) == 0) {
		const char *b = s + 5, *slash = strchr(b, '/');
		size_t bl = slash ? (size_t)(slash - b) : strlen(b);
		if (bl == 0 && slash)
			return dp_seterr(e, DP_EARG, "%s: no bucket name", s);
		for (size_t i = 0; i < bl; i++)
			if (!bucket_char(b[i]))
				return dp_seterr(e, DP_EARG, "%s: '%.*s' is not a bucket name", s,
						 (int)bl, b);
		l->kind = DP_LOC_S3;
		l->bucket = strndup(b, bl);
		l->key = strdup(slash ? slash + 1 : "");
	} else if (strncmp(s, "file:", 5) == 0) {
		const char *p = s + 5;
		if (strncmp(p, "//", 2) == 0) {
			p += 2;
			if (strncmp(p, "localhost/", 10) == 0)
				p += 9;
			else if (*p != '/')
				return dp_seterr(e, DP_EARG, "%s: file URLs name local files only "
						 "(file:///path)", s);
		}
		if (!*p)
			return dp_seterr(e, DP_EARG, "%s: no path", s);
		l->kind = DP_LOC_FILE;
		l->key = strdup(p);
	} else {
		const char *c = strstr(s, "://");
		if (c && c > s && strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789+-.") == (size_t)(c - s))
			return dp_seterr(e, DP_EARG, "%s: unsupported URL scheme (s3:// or file://)", s);
		if (!*s)
			return dp_seterr(e, DP_EARG, "empty path");
		l->kind = DP_LOC_FILE;
		l->key = strdup(s);
	}
	if (!l->key || (l->kind == DP_LOC_S3 && !l->bucket)) {
		dp_loc_free(l);
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	}
	return DP_OK;
}

int dp_loc_is_dir(const dp_loc *l)
{
	size_t n = strlen(l->key);
	if (l->kind == DP_LOC_S3)
		return n == 0 || l->key[n - 1] == '/';
	struct stat st;
	return (n > 0 && l->key[n - 1] == '/') || (stat(l->key, &st) == 0 && S_ISDIR(st.st_mode));
}

/* ---- Object lists ---------------------------------------------------------- */

int dp_objs_add(dp_objs *l, const dp_obj *o, dp_err *e)
{
	if (dp_grow(&l->v, &l->cap, l->n + 1, sizeof *l->v) < 0)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	dp_obj *d = &l->v[l->n];
	*d = *o;
	d->bucket = o->bucket ? strdup(o->bucket) : NULL;
	d->key = strdup(o->key ? o->key : "");
	if ((o->bucket && !d->bucket) || !d->key) {
		free(d->bucket);
		free(d->key);
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	}
	l->n++;
	return DP_OK;
}

void s3_obj_clear(dp_obj *o)
{
	free(o->bucket);
	free(o->key);
	o->bucket = o->key = NULL;
}

void dp_objs_free(dp_objs *l)
{
	for (size_t i = 0; i < l->n; i++)
		s3_obj_clear(&l->v[i]);
	free(l->v);
	memset(l, 0, sizeof *l);
}

void dp_objs_shuffle(dp_objs *l, uint64_t seed, uint64_t epoch)
{
	dp_rng r;
	dp_rng_seed(&r, seed, DP_S3_SHUFFLE_STREAM + epoch);
	for (size_t i = l->n; i > 1; i--) {
		size_t j = (size_t)dp_rng_below(&r, i);
		dp_obj t = l->v[i - 1];
		l->v[i - 1] = l->v[j];
		l->v[j] = t;
	}
}

void dp_objs_shard(dp_objs *l, int index, int count)
{
	if (count <= 1)
		return;
	size_t k = 0;
	for (size_t i = 0; i < l->n; i++) {
		if ((int)(i % (size_t)count) == index)
			l->v[k++] = l->v[i];
		else
			s3_obj_clear(&l->v[i]);
	}
	l->n = k;
}

int dp_range_parse(const char *s, dp_range *r)
{
	memset(r, 0, sizeof *r);
	if (strncmp(s, "bytes=", 6) == 0)
		s += 6;
	const char *dash = strchr(s, '-');
	if (!dash || strchr(dash + 1, '-'))
		return DP_EARG;
	char *end;
	errno = 0;
	if (dash == s) { /* -N: the last N bytes */
		if (!dash[1] || dash[1] == '+')
			return DP_EARG;
		unsigned long long n = strtoull(dash + 1, &end, 10);
		if (*end || errno || n == 0 || n > INT64_MAX)
			return DP_EARG;
		r->suffix = 1;
		r->first = (int64_t)n;
		r->last = -1;
	} else {
		if (*s == '+' || *s == ' ')
			return DP_EARG;
		unsigned long long a = strtoull(s, &end, 10);
		if (end != dash || errno || a > INT64_MAX)
			return DP_EARG;
		r->first = (int64_t)a;
		r->last = -1;
		if (dash[1]) {
			if (dash[1] == '+' || dash[1] == ' ')
				return DP_EARG;
			unsigned long long b = strtoull(dash + 1, &end, 10);
			if (*end || errno || b > INT64_MAX || b < a)
				return DP_EARG;
			r->last = (int64_t)b;
		}
	}
	r->set = 1;
	return DP_OK;
}

/* ---- Local files --------------------------------------------------------------- */

int s3_file_err(dp_err *e, const char *path)
{
	int saved = errno;
	int rc = dp_syserr(e, "%s", path);
	if (saved == ENOENT || saved == ENOTDIR)
		rc = DP_ENOTFOUND;
	else if (saved == EACCES)
		rc = DP_EDENIED;
	if (e)
		e->code = rc;
	return rc;
}

int s3_file_stat(const char *path, dp_obj *o, dp_err *e)
{
	struct stat st;
	memset(o, 0, sizeof *o);
	o->kind = DP_LOC_FILE;
	o->mtime = -1;
	if (stat(path, &st) < 0)
		return s3_file_err(e, path);
	if (S_ISDIR(st.st_mode))
		return dp_seterr(e, DP_EARG, "%s: is a directory", path);
	o->size = S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0;
	o->mtime = (int64_t)st.st_mtime;
	o->known = S_ISREG(st.st_mode);
	return DP_OK;
}

typedef struct fent {
	char *rel;
	int dir;
	uint64_t size;
	int64_t mtime;
} fent;

typedef struct fwalk {
	fent *v;
	size_t n, cap;
	int depth;
	struct { dev_t dev; ino_t ino; } up[66]; /* the folders on the way down */
} fwalk;

static int fw_add(fwalk *w, const char *rel, int dir, const struct stat *st, dp_err *e)
{
	if (dp_grow(&w->v, &w->cap, w->n + 1, sizeof *w->v) < 0)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	fent *f = &w->v[w->n];
	f->rel = strdup(rel);
	if (!f->rel)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	f->dir = dir;
	f->size = (uint64_t)st->st_size;
	f->mtime = (int64_t)st->st_mtime;
	w->n++;
	return DP_OK;
}

static void fw_free(fwalk *w)
{
	for (size_t i = 0; i < w->n; i++)
		free(w->v[i].rel);
	free(w->v);
	memset(w, 0, sizeof *w);
}

static int fent_cmp(const void *a, const void *b)
{
	return strcmp(((const fent *)a)->rel, ((const fent *)b)->rel);
}

/* Collect the entries under root/rel ("" at the top).  Directories are
 * entered when recursive, else recorded with a trailing '/'.  Names that
 * start with "." are listed like any other. */
static int walk(const char *root, const char *rel, int recursive, const char *name_prefix,
		fwalk *w, dp_err *e)
{
	char *dir = NULL;
	if (asprintf(&dir, "%s%s%s", root, *rel && root[strlen(root) - 1] != '/' ? "/" : "",
		     rel) < 0)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	DIR *d = opendir(dir);
	if (!d) {
		int rc = s3_file_err(e, dir);
		free(dir);
		return rc;
	}
	if (++w->depth > 64) {
		closedir(d);
		free(dir);
		return dp_seterr(e, DP_ELIMIT, "%s: directories nested too deep", root);
	}
	/* a link back up the tree (loop -> ..) is a loop, not 64 levels of
	 * copies (two links to . would be 2^64 of them) */
	struct stat ds;
	if (fstat(dirfd(d), &ds) == 0) {
		for (int i = 0; i < w->depth - 1; i++)
			if (w->up[i].dev == ds.st_dev && w->up[i].ino == ds.st_ino) {
				int rc = dp_seterr(e, DP_EDATA, "%s: a loop: it leads back to a folder above "
						   "it (a symbolic link?)", dir);
				w->depth--;
				closedir(d);
				free(dir);
				return rc;
			}
		w->up[w->depth - 1].dev = ds.st_dev;
		w->up[w->depth - 1].ino = ds.st_ino;
	}
	int rc = DP_OK;
	struct dirent *de;
	while (rc == DP_OK && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (name_prefix && strncmp(de->d_name, name_prefix, strlen(name_prefix)) != 0)
			continue;
		char *full = NULL, *r = NULL;
		if (asprintf(&full, "%s/%s", dir, de->d_name) < 0 ||
		    asprintf(&r, "%s%s", rel, de->d_name) < 0) {
			free(full);
			rc = dp_seterr(e, DP_ENOMEM, "out of memory");
			break;
		}
		struct stat st;
		if (stat(full, &st) < 0) {
			/* a dangling link: skip it, as S3 has nothing like it */
		} else if (S_ISDIR(st.st_mode)) {
			if (recursive) {
				char *sub = NULL;
				if (asprintf(&sub, "%s/", r) < 0)
					rc = dp_seterr(e, DP_ENOMEM, "out of memory");
				else
					rc = walk(root, sub, 1, NULL, w, e);
				free(sub);
			} else {
				char *sub = NULL;
				if (asprintf(&sub, "%s/", r) < 0)
					rc = dp_seterr(e, DP_ENOMEM, "out of memory");
				else
					rc = fw_add(w, sub, 1, &st, e);
				free(sub);
			}
		} else if (S_ISREG(st.st_mode)) {
			rc = fw_add(w, r, 0, &st, e);
		}
		free(full);
		free(r);
	}
	w->depth--;
	closedir(d);
	free(dir);
	return rc;
}

/* List a local location: a directory's entries, a file, or (S3-like) the
 * entries of the parent directory whose names start with the last part. */
static int list_local(const dp_loc *l, int recursive, dp_obj_cb cb, void *ctx, dp_err *e)
{
	const char *path = l->key;
	struct stat st;
	fwalk w = {0};
	int rc;
	char *root = NULL;
	const char *prefix = NULL;
	if (stat(path, &st) == 0 && !S_ISDIR(st.st_mode)) {
		dp_obj o;
		if ((rc = s3_file_stat(path, &o, e)) < 0)
			return rc;
		o.key = (char *)path;
		return cb(ctx, &o);
	}
	if (stat(path, &st) == 0) {
		root = strdup(path);
	} else {
		/* no such file: S3-like, the names in the parent that start with
		 * the last part of the path */
		const char *slash = strrchr(path, '/');
		if (slash && !slash[1]) {
			errno = ENOENT;
			dp_syserr(e, "%s", path);
			if (e)
				e->code = DP_ENOTFOUND;
			return DP_ENOTFOUND;
		}
		root = slash ? strndup(path, (size_t)(slash - path + 1)) : strdup(".");
		prefix = slash ? slash + 1 : path;
	}
	if (!root)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	rc = walk(root, "", recursive, prefix, &w, e);
	if ((rc == DP_ENOTFOUND && prefix) || (rc == DP_OK && prefix && w.n == 0)) {
		errno = ENOENT;
		dp_syserr(e, "%s", path);
		if (e)
			e->code = DP_ENOTFOUND;
		rc = DP_ENOTFOUND;
	}
	if (rc == DP_OK) {
		if (w.n)
			qsort(w.v, w.n, sizeof *w.v, fent_cmp);
		/* names as the user wrote the location: root + relative */
		int plain = !strcmp(root, ".") && prefix;
		size_t rl = strlen(root);
		for (size_t i = 0; i < w.n && rc == DP_OK; i++) {
			char *name = NULL;
			if (plain)
				name = strdup(w.v[i].rel);
			else if (asprintf(&name, "%s%s%s", root, root[rl - 1] == '/' ? "" : "/",
					  w.v[i].rel) < 0)
				name = NULL;
			if (!name) {
				rc = dp_seterr(e, DP_ENOMEM, "out of memory");
				break;
			}
			dp_obj o = {.kind = DP_LOC_FILE, .key = name, .size = w.v[i].size,
				    .mtime = w.v[i].mtime, .known = !w.v[i].dir,
				    .prefix = w.v[i].dir};
			if (o.prefix)
				o.size = 0;
			rc = cb(ctx, &o);
			free(name);
		}
	}
	fw_free(&w);
	free(root);
	return rc;
}

/* ---- S3 listings ----------------------------------------------------------------- */

typedef struct lpage {
	dp_objs objs;   /* Contents and CommonPrefixes of one page */
	dp_obj cur;
	dp_buf key;
	char bad_size[32]; /* the current entry's <Size>, when not a byte count */
	int truncated, url_encoded, in_prefixes;
	char *token;
	const char *bucket;
	dp_err *e;
	int failed;
} lpage;

/* A byte count as S3 writes it: decimal digits, at most INT64_MAX (a
 * negative or wrapped number is no size). */
static int parse_size(const char *t, uint64_t *out)
{
	size_t n = strlen(t);
	if (n == 0 || n > 19 || strspn(t, "0123456789") != n)
		return -1;
	unsigned long long v = strtoull(t, NULL, 10);
	if (v > INT64_MAX)
		return -1;
	*out = v;
	return 0;
}

static void list_cb(void *ctx, const char *path, const char *text, size_t len)
{
	lpage *p = ctx;
	(void)len;
	if (p->failed)
		return;
	if (!text) {
		if (!strcmp(path, "ListBucketResult/Contents")) {
			memset(&p->cur, 0, sizeof p->cur);
			p->cur.kind = DP_LOC_S3;
			p->cur.mtime = -1;
			p->bad_size[0] = 0;
			dp_buf_reset(&p->key);
		}
		return;
	}
	if (!strcmp(path, "ListBucketResult/Contents/Key")) {
		dp_buf_reset(&p->key);
		dp_buf_addstr(&p->key, text);
	} else if (!strcmp(path, "ListBucketResult/Contents/Size")) {
		if (parse_size(text, &p->cur.size) < 0)
			snprintf(p->bad_size, sizeof p->bad_size, "%s", text);
		p->cur.known = 1;
	} else if (!strcmp(path, "ListBucketResult/Contents/ETag")) {
		snprintf(p->cur.etag, sizeof p->cur.etag, "%s", text);
	} else if (!strcmp(path, "ListBucketResult/Contents/LastModified")) {
		p->cur.mtime = s3_parse_time(text);
	} else if (!strcmp(path, "ListBucketResult/Contents")) {
		p->cur.key = p->key.p ? p->key.p : "";
		if (p->bad_size[0] && !p->key.err) {
			char *k = strdup(p->cur.key);
			if (k && p->url_encoded)
				s3_url_decode(k);
			p->failed = dp_seterr(p->e, DP_EDATA, "s3://%s/%s: the listing gives its "
					      "<Size> as '%s', not a byte count", p->bucket,
					      k ? k : p->cur.key, p->bad_size);
			free(k);
		} else if (p->key.err)
			p->failed = dp_seterr(p->e, p->key.err, "out of memory");
		else if (dp_objs_add(&p->objs, &p->cur, p->e) < 0)
			p->failed = 1;
	} else if (!strcmp(path, "ListBucketResult/CommonPrefixes/Prefix")) {
		dp_obj o = {.kind = DP_LOC_S3, .key = (char *)text, .prefix = 1, .mtime = -1};
		if (dp_objs_add(&p->objs, &o, p->e) < 0)
			p->failed = 1;
	} else if (!strcmp(path, "ListBucketResult/IsTruncated")) {
		p->truncated = !strcmp(text, "true");
	} else if (!strcmp(path, "ListBucketResult/NextContinuationToken")) {
		free(p->token);
		p->token = strdup(text);
	} else if (!strcmp(path, "ListBucketResult/EncodingType")) {
		p->url_encoded = !strcmp(text, "url");
	}
}

static int obj_cmp(const void *a, const void *b)
{
	return strcmp(((const dp_obj *)a)->key, ((const dp_obj *)b)->key);
}

/* One page of the listing of l: the request (after token, or the first),
 * its answer parsed into p, keys URL-decoded.  A server that lists its keys
 * again would make the listing endless: a page that begins at or before
 * last, the last key listed, is refused. */
static int list_page(dp_s3 *s, const dp_loc *l, int recursive, const char *psz,
		     const char *token, const char *last, const char *what, lpage *p,
		     dp_err *e)
{
	s3_call c = {.method = "GET", .bucket = l->bucket, .resp_max = 64u << 20};
	c.q[c.nq++] = (s3_sigv4_kv){"list-type", "2"};
	c.q[c.nq++] = (s3_sigv4_kv){"prefix", l->key};
	c.q[c.nq++] = (s3_sigv4_kv){"max-keys", psz};
	c.q[c.nq++] = (s3_sigv4_kv){"encoding-type", "url"};
	if (!recursive)
		c.q[c.nq++] = (s3_sigv4_kv){"delimiter", "/"};
	if (token)
		c.q[c.nq++] = (s3_sigv4_kv){"continuation-token", token};
	int rc = s3_perform(s, &c, what, e);
	if (rc < 0) {
		s3_call_clean(&c);
		return rc;
	}
	rc = s3x_parse(c.resp.p ? c.resp.p : "", c.resp.len, list_cb, p, e);
	s3_call_clean(&c);
	if (rc == DP_OK && p->failed)
		rc = e ? e->code : DP_ENOMEM; /* the message names the key */
	else if (rc < 0)
		dp_preferr(e, "%s", what);
	for (size_t i = 0; rc == DP_OK && p->url_encoded && i < p->objs.n; i++) {
		char *raw = strdup(p->objs.v[i].key);
		if (s3_url_decode(p->objs.v[i].key) < 0) { /* named as listed, escaped */
			char *k = raw ? dp_shown(raw, strlen(raw)) : NULL;
			rc = dp_seterr(e, DP_EDATA, "%s: the listing has a key '%s' holding %%00, "
				       "a NUL byte, which would cut it short: refused", what,
				       k ? k : "?");
			free(k);
		}
		free(raw);
	}
	if (rc == DP_OK && p->objs.n) {
		const char *first = p->objs.v[0].key;
		for (size_t i = 1; i < p->objs.n; i++)
			if (strcmp(p->objs.v[i].key, first) < 0)
				first = p->objs.v[i].key;
		if (last && strcmp(first, last) <= 0)
			rc = dp_seterr(e, DP_EDATA, "%s: the listing went back (a page began at a "
				       "key already listed): the server repeats itself", what);
	}
	return rc;
}

/* A truncated page p needs a continuation token not given before (one of
 * seen[0..*nseen)), else the listing would be endless; noted in seen. */
static int list_token(const lpage *p, char ***seen, size_t *nseen, const char *what, dp_err *e)
{
	if (!p->truncated)
		return DP_OK;
	if (!p->token)
		return dp_seterr(e, DP_EDATA, "%s: truncated listing without a continuation "
				 "token (does the server speak ListObjectsV2?)", what);
	for (size_t i = 0; i < *nseen; i++)
		if (!strcmp((*seen)[i], p->token))
			return dp_seterr(e, DP_EDATA, "%s: the listing gave the continuation token "
					 "of page %zu again at page %zu: the server repeats itself",
					 what, i + 2, *nseen + 2);
	char **ns = realloc(*seen, (*nseen + 1) * sizeof *ns);
	if (ns)
		*seen = ns;
	if (!ns || !(ns[*nseen] = strdup(p->token)))
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	(*nseen)++;
	return DP_OK;
}

static int list_s3(dp_s3 *s, const dp_loc *l, int recursive, int page_size, dp_obj_cb cb,
		   void *ctx, dp_err *e)
{
	char *token = NULL, psz[16];
	char **seen = NULL, *last = NULL; /* the tokens so far, the last key listed */
	size_t nseen = 0;
	snprintf(psz, sizeof psz, "%d", page_size > 0 && page_size <= 1000 ? page_size : 1000);
	int rc = DP_OK, stop = 0, more;
	char *what = s3_obj_url(l->bucket, l->key);
	if (!what)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	do {
		lpage p = {.e = e, .key = DP_BUF_INIT, .bucket = l->bucket};
		rc = list_page(s, l, recursive, psz, token, last, what, &p, e);
		/* Contents and CommonPrefixes come as two sorted lists */
		if (rc == DP_OK && p.objs.n)
			qsort(p.objs.v, p.objs.n, sizeof *p.objs.v, obj_cmp);
		for (size_t i = 0; rc == DP_OK && i < p.objs.n && !stop; i++) {
			p.objs.v[i].bucket = l->bucket;
			int r = cb(ctx, &p.objs.v[i]);
			p.objs.v[i].bucket = NULL;
			if (r)
				stop = 1, rc = r;
		}
		if (rc == DP_OK && p.objs.n) {
			free(last);
			last = strdup(p.objs.v[p.objs.n - 1].key); /* sorted above */
		}
		if (rc == DP_OK)
			rc = list_token(&p, &seen, &nseen, what, e);
		free(token);
		token = p.token;
		more = p.truncated;
		dp_objs_free(&p.objs);
		dp_buf_free(&p.key);
	} while (rc == DP_OK && !stop && more);
	free(token);
	free(what);
	while (nseen)
		free(seen[--nseen]);
	free(seen);
	free(last);
	return rc;
}

typedef struct bpage {
	dp_objs objs;
	dp_obj cur;
	dp_buf name;
	dp_err *e;
	int failed;
} bpage;

static void bucket_cb(void *ctx, const char *path, const char *text, size_t len)
{
	bpage *p = ctx;
	(void)len;
	if (p->failed)
		return;
	if (!text) {
		if (!strcmp(path, "ListAllMyBucketsResult/Buckets/Bucket")) {
			memset(&p->cur, 0, sizeof p->cur);
			p->cur.kind = DP_LOC_S3;
			p->cur.mtime = -1;
			dp_buf_reset(&p->name);
		}
		return;
	}
	if (!strcmp(path, "ListAllMyBucketsResult/Buckets/Bucket/Name")) {
		dp_buf_reset(&p->name);
		dp_buf_addstr(&p->name, text);
	} else if (!strcmp(path, "ListAllMyBucketsResult/Buckets/Bucket/CreationDate")) {
		p->cur.mtime = s3_parse_time(text);
	} else if (!strcmp(path, "ListAllMyBucketsResult/Buckets/Bucket")) {
		p->cur.bucket = p->name.p ? p->name.p : "";
		p->cur.key = "";
		p->cur.prefix = 1;
		if (p->name.err)
			p->failed = dp_seterr(p->e, p->name.err, "out of memory");
		else if (dp_objs_add(&p->objs, &p->cur, p->e) < 0)
			p->failed = 1;
	}
}

static int list_buckets(dp_s3 *s, dp_obj_cb cb, void *ctx, dp_err *e)
{
	s3_call c = {.method = "GET", .resp_max = 64u << 20};
	int rc = s3_perform(s, &c, "s3://", e);
	if (rc < 0) {
		s3_call_clean(&c);
		return rc;
	}
	bpage p = {.e = e, .name = DP_BUF_INIT};
	rc = s3x_parse(c.resp.p ? c.resp.p : "", c.resp.len, bucket_cb, &p, e);
	s3_call_clean(&c);
	if (rc == DP_OK && p.failed)
		rc = DP_ENOMEM;
	for (size_t i = 0; rc == DP_OK && i < p.objs.n; i++)
		rc = cb(ctx, &p.objs.v[i]);
	dp_objs_free(&p.objs);
	dp_buf_free(&p.name);
	return rc;
}

int dp_s3_list(dp_s3 *s, const dp_loc *l, int recursive, int page_size, dp_obj_cb cb,
	       void *ctx, dp_err *e)
{
	if (l->kind == DP_LOC_FILE)
		return list_local(l, recursive, cb, ctx, e);
	if (!*l->bucket)
		return list_buckets(s, cb, ctx, e);
	return list_s3(s, l, recursive, page_size, cb, ctx, e);
}

/* ---- What a read covers ------------------------------------------------------------- */

typedef struct addctx {
	dp_objs *out;
	dp_err *e;
	size_t added;
} addctx;

static int add_cb(void *ctx, const dp_obj *o)
{
	addctx *a = ctx;
	size_t n = strlen(o->key);
	if (o->prefix || (n && o->key[n - 1] == '/' && o->size == 0))
		return 0; /* "directory" markers */
	a->added++;
	return dp_objs_add(a->out, o, a->e);
}

int dp_s3_read_all(dp_s3 *s, const dp_loc *l, size_t max, char **data, size_t *len,
		   dp_err *e)
{
	*data = NULL;
	*len = 0;
	if (l->kind == DP_LOC_FILE) { /* dp_read_file, a missing file DP_ENOTFOUND */
		dp_buf b = DP_BUF_INIT;
		int rc = dp_read_file(strcmp(l->key, "-") ? l->key : "./-", l->key, max, &b, e);
		if (rc < 0 && e && (e->sys == ENOENT || e->sys == ENOTDIR))
			rc = e->code = DP_ENOTFOUND;
		*len = rc == DP_OK ? b.len : 0;
		*data = rc == DP_OK ? dp_buf_take(&b) : NULL;
		dp_buf_free(&b);
		if (rc == DP_OK && !*data)
			rc = dp_seterr(e, DP_ENOMEM, "out of memory");
		return rc;
	}
	s3_call c = {.method = "GET", .bucket = l->bucket, .key = l->key, .resp_max = max};
	int rc = s3_perform(s, &c, NULL, e);
	if (rc == DP_OK) {
		*len = c.resp.len;
		dp_buf_add(&c.resp, "", 0); /* as above */
		if (!(*data = dp_buf_take(&c.resp)))
			rc = dp_seterr(e, DP_ENOMEM, "out of memory");
	}
	s3_call_clean(&c);
	return rc;
}

/* SageMaker's manifest: [{"prefix": "s3://bucket/some/prefix/"}, "rel/key1", ...] */
static int expand_manifest(dp_s3 *s, const char *url, dp_objs *out, dp_err *e)
{
	dp_loc l;
	int rc = dp_loc_parse(url, &l, e);
	if (rc < 0)
		return rc;
	char *data = NULL;
	size_t len = 0;
	rc = dp_s3_read_all(s, &l, 1u << 30, &data, &len, e);
	dp_loc_free(&l);
	if (rc < 0)
		return rc;
	json_error_t je;
	json_t *j = json_loadb(data, len, 0, &je);
	free(data);
	if (!j)
		return dp_seterr(e, DP_EDATA, "%s: manifest: line %d: %s", url, je.line, je.text);
	json_t *first, *pfx = NULL;
	if (!json_is_array(j) || json_array_size(j) < 1)
		rc = dp_seterr(e, DP_EDATA, "%s: manifest: not a JSON array [{\"prefix\": URL}, "
			       "\"key\", ...]", url);
	else if (!json_is_object(first = json_array_get(j, 0)) ||
		 !json_is_string(pfx = json_object_get(first, "prefix")))
		rc = dp_seterr(e, DP_EDATA, "%s: manifest: entry 0 is not {\"prefix\": URL}", url);
	if (rc < 0) {
		json_decref(j);
		return rc;
	}
	const char *prefix = json_string_value(pfx);
	dp_loc pl;
	if ((rc = dp_loc_parse(prefix, &pl, e)) < 0) {
		dp_preferr(e, "%s: manifest prefix", url);
		json_decref(j);
		return rc;
	}
	if (pl.kind == DP_LOC_S3 && !*pl.bucket)
		rc = dp_seterr(e, DP_EDATA, "%s: manifest prefix '%s' names no bucket", url, prefix);
	for (size_t i = 1; rc == DP_OK && i < json_array_size(j); i++) {
		json_t *v = json_array_get(j, i);
		if (!json_is_string(v)) {
			rc = dp_seterr(e, DP_EDATA, "%s: manifest: entry %zu is not a string", url, i);
			break;
		}
		char *key = NULL;
		if (asprintf(&key, "%s%s", pl.key, json_string_value(v)) < 0) {
			rc = dp_seterr(e, DP_ENOMEM, "out of memory");
			break;
		}
		dp_obj o = {.kind = pl.kind, .bucket = pl.bucket, .key = key, .mtime = -1};
		if (pl.kind == DP_LOC_FILE) {
			dp_obj st;
			if ((rc = s3_file_stat(key, &st, e)) == DP_OK) {
				o.size = st.size;
				o.mtime = st.mtime;
				o.known = st.known;
			} else {
				dp_preferr(e, "%s: manifest entry %zu", url, i);
			}
		}
		if (rc == DP_OK)
			rc = dp_objs_add(out, &o, e);
		free(key);
	}
	dp_loc_free(&pl);
	json_decref(j);
	return rc;
}

int dp_s3_expand(dp_s3 *s, const char *url, int manifest, dp_objs *out, dp_err *e)
{
	if (manifest)
		return expand_manifest(s, url, out, e);
	dp_loc l;
	int rc = dp_loc_parse(url, &l, e);
	if (rc < 0)
		return rc;
	if (l.kind == DP_LOC_S3 && !*l.bucket) {
		dp_loc_free(&l);
		return dp_seterr(e, DP_EARG, "%s: names no bucket", url);
	}
	if (dp_loc_is_dir(&l)) {
		addctx a = {out, e, 0};
		rc = l.kind == DP_LOC_FILE ? list_local(&l, 1, add_cb, &a, e)
					   : list_s3(s, &l, 1, 0, add_cb, &a, e);
		if (rc == DP_OK && a.added == 0 && l.kind == DP_LOC_S3) {
			/* an empty prefix: the bucket may be missing (the listing was
			 * fine) or there is just nothing there */
			rc = dp_seterr(e, DP_ENOTFOUND, "%s: no objects under this prefix", url);
		}
	} else if (l.kind == DP_LOC_FILE) {
		dp_obj o;
		if ((rc = s3_file_stat(l.key, &o, e)) == DP_OK) {
			o.key = l.key;
			rc = dp_objs_add(out, &o, e);
		}
	} else {
		dp_obj o = {.kind = DP_LOC_S3, .bucket = l.bucket, .key = l.key, .mtime = -1};
		rc = dp_objs_add(out, &o, e);
	}
	dp_loc_free(&l);
	return rc;
}

/* ---- Small operations ----------------------------------------------------------------- */

int dp_s3_rm(dp_s3 *s, const dp_loc *l, dp_err *e)
{
	if (l->kind == DP_LOC_FILE) {
		if (unlink(l->key) < 0) {
			int saved = errno;
			dp_syserr(e, "%s", l->key);
			if (e && saved == ENOENT)
				e->code = DP_ENOTFOUND;
			if (e && (saved == EACCES || saved == EPERM))
				e->code = DP_EDENIED;
			return e ? e->code : DP_EIO;
		}
		return DP_OK;
	}
	if (!*l->bucket || !*l->key)
		return dp_seterr(e, DP_EARG, "s3://%s: names no object", l->bucket);
	s3_call c = {.method = "DELETE", .bucket = l->bucket, .key = l->key};
	int rc = s3_perform(s, &c, NULL, e);
	s3_call_clean(&c);
	return rc;
}

int dp_s3_mkdir(dp_s3 *s, const dp_loc *l, dp_err *e)
{
	size_t n = strlen(l->key);
	if (l->kind == DP_LOC_FILE) {
		if (mkdir(l->key, 0777) < 0 && errno != EEXIST)
			return dp_syserr(e, "%s", l->key);
		struct stat st;
		if (stat(l->key, &st) < 0 || !S_ISDIR(st.st_mode))
			return dp_seterr(e, DP_EARG, "%s: exists and is no directory", l->key);
		return DP_OK;
	}
	if (!*l->bucket || !n || l->key[n - 1] != '/')
		return dp_seterr(e, DP_EARG, "s3://%s/%s: a folder marker's key ends in '/'", l->bucket,
				 l->key);
	s3_call c = {.method = "PUT", .bucket = l->bucket, .key = l->key, .body = "", .body_len = 0};
	int rc = s3_perform(s, &c, NULL, e);
	s3_call_clean(&c);
	return rc;
}

char *dp_s3_presign(dp_s3 *s, const dp_loc *l, const char *method, long expires, dp_err *e)
{
	if (l->kind == DP_LOC_FILE) {
		char *abs = realpath(l->key, NULL), *out = NULL;
		if (!abs) {
			int saved = errno;
			dp_syserr(e, "%s", l->key);
			if (e && saved == ENOENT)
				e->code = DP_ENOTFOUND;
			return NULL;
		}
		char *enc = s3_uri_encode(abs, strlen(abs), 1);
		if (!enc || asprintf(&out, "file://%s", enc) < 0)
			out = NULL;
		free(enc);
		free(abs);
		if (!out)
			dp_seterr(e, DP_ENOMEM, "out of memory");
		return out;
	}
	if (s3_ready(s, e) < 0)
		return NULL;
	if (s->anonymous) {
		dp_seterr(e, DP_EARG, "presign needs credentials (not --no-sign-request)");
		return NULL;
	}
	if (!*l->bucket || !*l->key) {
		dp_seterr(e, DP_EARG, "s3://%s/%s: names no object", l->bucket, l->key);
		return NULL;
	}
	if (expires < 1 || expires > 604800) {
		dp_seterr(e, DP_EARG, "expiry %ld s is not between 1 s and 7 days", expires);
		return NULL;
	}
	int vhost = s3_virtual_host(s, l->bucket);
	char *ekey = s3_uri_encode(l->key, strlen(l->key), 1);
	char *path = NULL, *host = NULL, *q = NULL, *out = NULL;
	if (!ekey)
		goto oom;
	if ((vhost ? asprintf(&path, "%s/%s", s->base_path, ekey)
		   : asprintf(&path, "%s/%s/%s", s->base_path, l->bucket, ekey)) < 0) {
		path = NULL;
		goto oom;
	}
	const char *region, *bhost;
	s3_where(s, l->bucket, &region, &bhost);
	if ((vhost ? asprintf(&host, "%s.%s", l->bucket, bhost) : asprintf(&host, "%s", bhost)) < 0) {
		host = NULL;
		goto oom;
	}
	char date[17];
	s3_amz_date(time(NULL), date);
	s3_sigv4_req r = {
		.method = method, .path = path, .amz_date = date, .region = region,
		.service = "s3", .key_id = s->key_id, .secret = s->secret,
	};
	q = s3_sigv4_presign(&r, host, s->token, expires, NULL, 0);
	if (!q || asprintf(&out, "%s://%s%s?%s", s->scheme, host, path, q) < 0) {
		out = NULL;
		goto oom;
	}
	goto done;
oom:
	dp_seterr(e, DP_ENOMEM, "out of memory");
done:
	free(ekey);
	free(path);
	free(host);
	free(q);
	return out;
}

typedef struct upage {
	dp_buf key, id;
	int64_t initiated;
	int truncated;
	char *next_key, *next_id;
	const char *bucket;
	dp_upload_cb cb;
	void *ctx;
	int stop;
} upage;

static void upload_cb(void *ctx, const char *path, const char *text, size_t len)
{
	upage *p = ctx;
	(void)len;
	if (!text) {
		if (!strcmp(path, "ListMultipartUploadsResult/Upload")) {
			dp_buf_reset(&p->key);
			dp_buf_reset(&p->id);
			p->initiated = -1;
		}
		return;
	}
	if (!strcmp(path, "ListMultipartUploadsResult/Upload/Key")) {
		dp_buf_reset(&p->key);
		dp_buf_addstr(&p->key, text);
	} else if (!strcmp(path, "ListMultipartUploadsResult/Upload/UploadId")) {
		dp_buf_reset(&p->id);
		dp_buf_addstr(&p->id, text);
	} else if (!strcmp(path, "ListMultipartUploadsResult/Upload/Initiated")) {
		p->initiated = s3_parse_time(text);
	} else if (!strcmp(path, "ListMultipartUploadsResult/Upload")) {
		if (!p->stop && p->key.len && p->id.len)
			p->stop = p->cb(p->ctx, p->bucket, p->key.p, p->id.p, p->initiated);
	} else if (!strcmp(path, "ListMultipartUploadsResult/IsTruncated")) {
		p->truncated = !strcmp(text, "true");
	} else if (!strcmp(path, "ListMultipartUploadsResult/NextKeyMarker")) {
		free(p->next_key);
		p->next_key = strdup(text);
	} else if (!strcmp(path, "ListMultipartUploadsResult/NextUploadIdMarker")) {
		free(p->next_id);
		p->next_id = strdup(text);
	}
}

int dp_s3_list_uploads(dp_s3 *s, const dp_loc *l, dp_upload_cb cb, void *ctx, dp_err *e)
{
	if (l->kind != DP_LOC_S3 || !*l->bucket)
		return dp_seterr(e, DP_EARG, "uploads are listed in a bucket: s3://bucket/[prefix]");
	char *km = NULL, *im = NULL;
	int rc = DP_OK;
	for (;;) {
		s3_call c = {.method = "GET", .bucket = l->bucket, .resp_max = 64u << 20};
		c.q[c.nq++] = (s3_sigv4_kv){"uploads", ""};
		if (*l->key)
			c.q[c.nq++] = (s3_sigv4_kv){"prefix", l->key};
		if (km)
			c.q[c.nq++] = (s3_sigv4_kv){"key-marker", km};
		if (im)
			c.q[c.nq++] = (s3_sigv4_kv){"upload-id-marker", im};
		rc = s3_perform(s, &c, NULL, e);
		upage p = {.bucket = l->bucket, .cb = cb, .ctx = ctx, .key = DP_BUF_INIT,
			   .id = DP_BUF_INIT};
		if (rc == DP_OK)
			rc = s3x_parse(c.resp.p ? c.resp.p : "", c.resp.len, upload_cb, &p, e);
		s3_call_clean(&c);
		dp_buf_free(&p.key);
		dp_buf_free(&p.id);
		/* the markers go forward (key, then upload id), or the listing
		 * would repeat itself for ever */
		if (rc == DP_OK && p.truncated && p.next_key && km) {
			int k = strcmp(p.next_key, km);
			if (k < 0 || (k == 0 && strcmp(p.next_id ? p.next_id : "", im ? im : "") <= 0))
				rc = dp_seterr(e, DP_EDATA, "s3://%s/%s: the upload listing went back (its "
					       "next marker is not past the last): the server repeats "
					       "itself", l->bucket, l->key);
		}
		free(km);
		free(im);
		km = p.next_key;
		im = p.next_id;
		if (rc == DP_OK && p.stop)
			rc = p.stop;
		if (rc != DP_OK || !p.truncated || !km)
			break;
	}
	free(km);
	free(im);
	return rc;
}

int dp_s3_abort_upload(dp_s3 *s, const char *bucket, const char *key, const char *upload_id,
		       dp_err *e)
{
	s3_call c = {.method = "DELETE", .bucket = bucket, .key = key};
	c.q[c.nq++] = (s3_sigv4_kv){"uploadId", upload_id};
	int rc = s3_perform(s, &c, NULL, e);
	s3_call_clean(&c);
	return rc;
}
