/*
 * s3batch.c - many objects at once: deletes batched into DeleteObjects
 * requests, and files uploaded or downloaded several at a time.
 *
 * Deletes.  S3 keys of one bucket go 1,000 to a DeleteObjects request (the
 * API's limit), in quiet mode, so the answer lists only the keys it could
 * not delete, each with S3's code and message.  A key that XML 1.0 cannot
 * carry (a control character other than tab, newline and carriage return)
 * gets a DELETE of its own, as do the keys of a store that answers
 * DeleteObjects with NotImplemented.  The request carries Content-MD5, which
 * S3 requires of it.
 *
 * Uploads.  dp_s3_put streams one descriptor (s3put.c); for many files,
 * workers (threads started with every signal blocked) each take the next
 * file and upload it with a client of their own, made from the caller's
 * settings, so that nothing of a client is shared between threads.  The
 * caller's concurrency is shared out between them.  Downloads
 * (dp_s3_get_files) go the same way, each to a temporary file renamed
 * over its destination when whole.  A worker's client is
 * cancelled with the caller's (dp_s3_cancel), aborting its multipart
 * upload on the way.
 */
#define _GNU_SOURCE
#include "md5.h"
#include "s3_int.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- Deletes ------------------------------------------------------------------------- */

#define DELETE_BATCH 1000

/* Can XML 1.0 carry key (as character data and references)? */
static int xml_carries(const char *key)
{
	for (const unsigned char *p = (const unsigned char *)key; *p; p++)
		if (*p < 0x20 && *p != '\t' && *p != '\n' && *p != '\r')
			return 0;
	return 1;
}

static void xml_escape(dp_buf *b, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '&': dp_buf_addstr(b, "&amp;"); break;
		case '<': dp_buf_addstr(b, "&lt;"); break;
		case '>': dp_buf_addstr(b, "&gt;"); break;
		case '"': dp_buf_addstr(b, "&quot;"); break;
		case '\'': dp_buf_addstr(b, "&apos;"); break;
		/* as references: a parser would fold a literal \r\n into \n */
		case '\t': dp_buf_addstr(b, "&#9;"); break;
		case '\n': dp_buf_addstr(b, "&#10;"); break;
		case '\r': dp_buf_addstr(b, "&#13;"); break;
		default: dp_buf_add(b, s, 1); break;
		}
	}
}

/* The refusals of one DeleteObjects answer. */
typedef struct refusal {
	char *key;
	char code[64];
	char msg[256];
} refusal;

typedef struct dresult {
	refusal *v;
	size_t n, cap;
	dp_buf key, code, msg;
	int oom;
} dresult;

static void dresult_cb(void *ctx, const char *path, const char *text, size_t len)
{
	dresult *r = ctx;
	(void)len;
	if (!text) {
		if (!strcmp(path, "DeleteResult/Error")) {
			dp_buf_reset(&r->key);
			dp_buf_reset(&r->code);
			dp_buf_reset(&r->msg);
		}
		return;
	}
	if (!strcmp(path, "DeleteResult/Error/Key")) {
		dp_buf_addstr(&r->key, text);
	} else if (!strcmp(path, "DeleteResult/Error/Code")) {
		dp_buf_addstr(&r->code, text);
	} else if (!strcmp(path, "DeleteResult/Error/Message")) {
		dp_buf_addstr(&r->msg, text);
	} else if (!strcmp(path, "DeleteResult/Error")) {
		if (dp_grow(&r->v, &r->cap, r->n + 1, sizeof *r->v) < 0) {
			r->oom = 1;
			return;
		}
		refusal *f = &r->v[r->n];
		f->key = strdup(r->key.p ? r->key.p : "");
		if (!f->key || r->key.err) {
			free(f->key);
			r->oom = 1;
			return;
		}
		snprintf(f->code, sizeof f->code, "%s", r->code.p ? r->code.p : "");
		snprintf(f->msg, sizeof f->msg, "%s", r->msg.p ? r->msg.p : "");
		r->n++;
	}
}

static void dresult_free(dresult *r)
{
	for (size_t i = 0; i < r->n; i++)
		free(r->v[i].key);
	free(r->v);
	dp_buf_free(&r->key);
	dp_buf_free(&r->code);
	dp_buf_free(&r->msg);
}

/* What dp_s3_rm_many has seen fail: the first failure, and how many. */
typedef struct rmstate {
	dp_err first;
	int rc;
	size_t failed;
	dp_obj_cb cb;
	void *ctx;
} rmstate;

static void rm_failed(rmstate *st, const dp_err *e)
{
	if (st->failed++ == 0) {
		st->first = *e;
		st->rc = e->code;
	}
}

static void rm_done(rmstate *st, const dp_obj *o)
{
	if (st->cb)
		st->cb(st->ctx, o);
}

/* One object by itself (a local file, or a key DeleteObjects cannot take). */
static int rm_single(dp_s3 *s, const dp_obj *o, rmstate *st)
{
	dp_err e = {0};
	dp_loc l = {.kind = o->kind, .bucket = o->bucket, .key = o->key};
	if (dp_s3_rm(s, &l, &e) < 0) {
		rm_failed(st, &e);
		return e.code == DP_ENOTFOUND ? DP_OK : e.code; /* go on past a missing file */
	}
	rm_done(st, o);
	return DP_OK;
}

/* v[0..n): S3 objects of one bucket, n <= DELETE_BATCH, every key one XML
 * can carry.  Returns DP_OK, a failure of the whole request (in e), or
 * DP_EARG when the store has no DeleteObjects. */
static int delete_objects(dp_s3 *s, const dp_obj *v, size_t n, rmstate *st, dp_err *e)
{
	dp_buf body = DP_BUF_INIT;
	dp_buf_addstr(&body, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
			     "<Delete xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
			     "<Quiet>true</Quiet>");
	for (size_t i = 0; i < n; i++) {
		dp_buf_addstr(&body, "<Object><Key>");
		xml_escape(&body, v[i].key);
		dp_buf_addstr(&body, "</Key></Object>");
	}
	if (dp_buf_addstr(&body, "</Delete>") < 0) {
		dp_buf_free(&body);
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	}
	unsigned char md[16];
	s3_md5 m;
	s3_md5_init(&m);
	s3_md5_update(&m, body.p, body.len);
	s3_md5_final(&m, md);
	char md5b64[32];
	EVP_EncodeBlock((unsigned char *)md5b64, md, 16);

	char *what = s3_obj_url(v[0].bucket, "");
	s3_call c = {.method = "POST", .bucket = v[0].bucket, .body = body.p,
		     .body_len = body.len, .resp_max = 64u << 20};
	c.q[c.nq++] = (s3_sigv4_kv){"delete", ""};
	c.h[c.nh++] = (s3_sigv4_kv){"Content-MD5", md5b64};
	int rc = what ? s3_perform(s, &c, what, e) : dp_seterr(e, DP_ENOMEM, "out of memory");
	if (rc < 0 && (c.status == 501 || !strcmp(c.code, "NotImplemented")))
		rc = DP_EARG; /* no DeleteObjects here: the caller goes key by key */
	dresult r = {.key = DP_BUF_INIT, .code = DP_BUF_INIT, .msg = DP_BUF_INIT};
	if (rc == DP_OK)
		rc = s3x_parse(c.resp.p ? c.resp.p : "", c.resp.len, dresult_cb, &r, e);
	if (rc == DP_OK && r.oom)
		rc = dp_seterr(e, DP_ENOMEM, "out of memory");
	if (rc == DP_OK) {
		for (size_t i = 0; i < n; i++) {
			const refusal *f = NULL;
			for (size_t k = 0; k < r.n && !f; k++)
				if (!strcmp(r.v[k].key, v[i].key))
					f = &r.v[k];
			if (!f) {
				rm_done(st, &v[i]);
				continue;
			}
			dp_err fe = {0};
			char *u = s3_obj_url(v[i].bucket, v[i].key);
			char fitted[sizeof fe.msg];
			const char *name = s3_fit_name(u ? u : v[i].key, sizeof fe.msg - 400, fitted,
						       sizeof fitted);
			dp_seterr(&fe, s3_code_status(f->code, 0), "%s: %s: %s", name,
				  f->code[0] ? f->code : "refused", f->msg[0] ? f->msg : "not deleted");
			free(u);
			rm_failed(st, &fe);
		}
	}
	dresult_free(&r);
	s3_call_clean(&c);
	dp_buf_free(&body);
	free(what);
	return rc;
}

int dp_s3_rm_many(dp_s3 *s, const dp_objs *objs, dp_obj_cb cb, void *ctx, dp_err *e)
{
	rmstate st = {.cb = cb, .ctx = ctx};
	dp_obj *batch = malloc(DELETE_BATCH * sizeof *batch);
	if (!batch)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	int rc = DP_OK;
	size_t i = 0;
	while (rc == DP_OK && i < objs->n) {
		const dp_obj *o = &objs->v[i];
		if (o->kind != DP_LOC_S3 || !xml_carries(o->key)) {
			rc = rm_single(s, o, &st);
			i++;
			continue;
		}
		/* the next run of keys of this bucket that XML carries */
		size_t n = 0;
		while (i < objs->n && n < DELETE_BATCH && objs->v[i].kind == DP_LOC_S3 &&
		       !strcmp(objs->v[i].bucket, o->bucket) && xml_carries(objs->v[i].key))
			batch[n++] = objs->v[i++];
		rc = delete_objects(s, batch, n, &st, e);
		if (rc == DP_EARG) { /* no DeleteObjects: one by one */
			rc = DP_OK;
			for (size_t k = 0; k < n && rc == DP_OK; k++)
				rc = rm_single(s, &batch[k], &st);
		}
	}
	free(batch);
	if (rc == DP_OK && st.failed) {
		if (e) {
			*e = st.first;
			if (st.failed > 1) {
				size_t l = strlen(e->msg);
				snprintf(e->msg + l, sizeof e->msg - l, " (and %zu more not deleted)",
					 st.failed - 1);
			}
		}
		rc = st.rc;
	}
	return rc;
}

/* ---- Uploads -------------------------------------------------------------------------- */

typedef struct putpool {
	dp_s3 *s;
	int (*one)(dp_s3 *c, const dp_s3_file *f, dp_s3_stats *st, dp_err *e); /* put_file, get_file */
	const dp_s3_file *files;
	size_t n, next;
	int per_worker; /* concurrency of each worker's client */
	pthread_mutex_t mu;
	int failed;
	dp_err err;
	dp_s3_stats st;
	void (*cb)(void *ctx, size_t i);
	void *ctx;
} putpool;

/* A file that fits in one part: read whole, one PUT, on c's connection
 * (dp_s3_put would start a reader thread and a transfer engine for it:
 * most of the time of a small file).  A file that grew since its size was
 * taken goes through dp_s3_put. */
static int put_small(dp_s3 *c, const dp_loc *dst, int fd, const char *src, size_t size,
		     dp_s3_stats *st, dp_err *e)
{
	char *buf = malloc(size + 1);
	if (!buf)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	long n = dp_read_full(fd, buf, size + 1, src, e);
	int rc = n < 0 ? (int)n : DP_OK;
	if (rc == DP_OK && (size_t)n > size) {
		free(buf);
		if (lseek(fd, 0, SEEK_SET) < 0)
			return dp_syserr(e, "%s: seek", src);
		return dp_s3_put(c, dst, fd, src, -1, st, e);
	}
	if (rc == DP_OK && !s3_cancelled(c)) {
		char *what = s3_obj_url(dst->bucket, dst->key);
		s3_call call = {.method = "PUT", .bucket = dst->bucket, .key = dst->key,
				.body = buf, .body_len = (size_t)n};
		rc = what ? s3_perform(c, &call, what, e) : dp_seterr(e, DP_ENOMEM, "out of memory");
		s3_call_clean(&call);
		free(what);
		if (rc == DP_OK && st)
			st->bytes += (uint64_t)n;
	} else if (rc == DP_OK) {
		rc = dp_seterr(e, DP_EIO, "%s: interrupted", src);
	}
	free(buf);
	return rc;
}

/* Upload one file with client c. */
static int put_file(dp_s3 *c, const dp_s3_file *f, dp_s3_stats *st, dp_err *e)
{
	dp_loc dst;
	int rc = dp_loc_parse(f->dst, &dst, e);
	if (rc < 0)
		return rc;
	int fd = open(f->src, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = s3_file_err(e, f->src);
		dp_loc_free(&dst);
		return rc;
	}
	struct stat sb;
	int64_t size = -1; /* not a regular file: streamed, its size unknown */
	if (fstat(fd, &sb) == 0) {
		if (S_ISDIR(sb.st_mode))
			rc = dp_seterr(e, DP_EARG, "%s: is a directory", f->src);
		else if (S_ISREG(sb.st_mode))
			size = (int64_t)sb.st_size;
	}
	if (rc == DP_OK && dst.kind == DP_LOC_S3 && size >= 0 && (uint64_t)size <= c->conf.part_size)
		rc = put_small(c, &dst, fd, f->src, (size_t)size, st, e);
	else if (rc == DP_OK)
		rc = dp_s3_put(c, &dst, fd, f->src, size, st, e);
	close(fd);
	dp_loc_free(&dst);
	return rc;
}

static void *put_worker(void *arg)
{
	putpool *p = arg;
	dp_s3_conf conf = p->s->conf;
	conf.concurrency = p->per_worker;
	conf.progress = NULL; /* the caller's: one thread's running total */
	dp_err e = {0};
	dp_s3 *c = dp_s3_new(&conf, &e);
	if (c) {
		c->parent = p->s;
		s3_creds_share(c, p->s); /* one provider, one refresh, for all */
	}
	dp_s3_stats st = {0};
	for (;;) {
		pthread_mutex_lock(&p->mu);
		size_t i = p->next;
		int stop = p->failed || i >= p->n || !c;
		if (!stop)
			p->next++;
		pthread_mutex_unlock(&p->mu);
		if (stop)
			break;
		dp_s3_stats one = {0};
		int rc = p->one(c, &p->files[i], &one, &e);
		st.bytes += one.bytes;
		pthread_mutex_lock(&p->mu);
		if (rc < 0 && !p->failed) {
			p->failed = 1;
			p->err = e;
		} else if (rc == DP_OK && p->cb) {
			p->cb(p->ctx, i);
		}
		pthread_mutex_unlock(&p->mu);
	}
	pthread_mutex_lock(&p->mu);
	if (!c && !p->failed) {
		p->failed = 1;
		p->err = e;
	}
	p->st.bytes += st.bytes;
	if (c) {
		p->st.requests += c->nreq;
		p->st.retries += c->nretry;
	}
	pthread_mutex_unlock(&p->mu);
	dp_s3_free(c);
	return NULL;
}

/* Download one object with client c: to a temporary file beside f->dst
 * (its directories made), renamed over it when whole, its time set to
 * f->mtime when known (as aws s3 sync and cp do, so that the next sync
 * finds it the same). */
static int get_file(dp_s3 *c, const dp_s3_file *f, dp_s3_stats *st, dp_err *e)
{
	dp_loc src;
	int rc = dp_loc_parse(f->src, &src, e);
	if (rc < 0)
		return rc;
	dp_out o;
	rc = dp_make_parents(f->dst, NULL, NULL, e);
	if (rc == DP_OK)
		rc = dp_out_open(&o, f->dst, e);
	if (rc == DP_OK) {
		/* a list of the one object for dp_s3_get, its strings src's */
		dp_obj ob = {.kind = src.kind, .bucket = src.bucket, .key = src.key,
			     .size = f->size, .known = f->known, .mtime = f->mtime};
		dp_objs one = {.v = &ob, .n = 1, .cap = 1};
		if ((rc = dp_s3_get(c, &one, NULL, o.fd, f->dst, st, e)) < 0)
			dp_out_abort(&o);
	}
	dp_loc_free(&src);
	if (rc < 0)
		return rc;
	if (f->mtime > 0) {
		struct timespec t[2] = {{.tv_sec = f->mtime}, {.tv_sec = f->mtime}};
		if (futimens(o.fd, t) < 0) {
			dp_out_abort(&o);
			return dp_syserr(e, "%s: set its time", f->dst);
		}
	}
	return dp_out_commit(&o, e);
}

static int run_pool(dp_s3 *s, int (*one)(dp_s3 *, const dp_s3_file *, dp_s3_stats *, dp_err *),
		    const dp_s3_file *files, size_t n, int jobs, void (*cb)(void *ctx, size_t i),
		    void *ctx, dp_s3_stats *st, dp_err *e);

int dp_s3_put_files(dp_s3 *s, const dp_s3_file *files, size_t n, int jobs,
		    void (*cb)(void *ctx, size_t i), void *ctx, dp_s3_stats *st, dp_err *e)
{
	return run_pool(s, put_file, files, n, jobs, cb, ctx, st, e);
}

int dp_s3_get_files(dp_s3 *s, const dp_s3_file *files, size_t n, int jobs,
		    void (*cb)(void *ctx, size_t i), void *ctx, dp_s3_stats *st, dp_err *e)
{
	return run_pool(s, get_file, files, n, jobs, cb, ctx, st, e);
}

static int run_pool(dp_s3 *s, int (*one)(dp_s3 *, const dp_s3_file *, dp_s3_stats *, dp_err *),
		    const dp_s3_file *files, size_t n, int jobs, void (*cb)(void *ctx, size_t i),
		    void *ctx, dp_s3_stats *st, dp_err *e)
{
	if (jobs < 1)
		jobs = 1;
	if ((size_t)jobs > n)
		jobs = (int)n;
	if (jobs <= 1) {
		/* in this thread, with this client */
		for (size_t i = 0; i < n; i++) {
			int rc = one(s, &files[i], st, e);
			if (rc < 0)
				return rc;
			if (cb)
				cb(ctx, i);
		}
		return DP_OK;
	}
	putpool p = {.s = s, .one = one, .files = files, .n = n, .cb = cb, .ctx = ctx};
	p.per_worker = s->conf.concurrency / jobs > 1 ? s->conf.concurrency / jobs : 1;
	pthread_mutex_init(&p.mu, NULL);
	pthread_t *t = calloc((size_t)jobs, sizeof *t);
	if (!t) {
		pthread_mutex_destroy(&p.mu);
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	}
	int started = 0;
	for (; started < jobs; started++)
		if (dp_thread_create(&t[started], put_worker, &p) != 0)
			break;
	if (started == 0) {
		free(t);
		pthread_mutex_destroy(&p.mu);
		return dp_seterr(e, DP_ENOMEM, "cannot start a thread");
	}
	for (int i = 0; i < started; i++)
		pthread_join(t[i], NULL);
	free(t);
	pthread_mutex_destroy(&p.mu);
	if (st) {
		st->bytes += p.st.bytes;
		st->requests += p.st.requests;
		st->retries += p.st.retries;
	}
	if (p.failed) {
		if (e)
			*e = p.err;
		return p.err.code ? p.err.code : DP_EIO;
	}
	if (s3_cancelled(s))
		return dp_seterr(e, DP_EIO, "interrupted");
	return DP_OK;
}
