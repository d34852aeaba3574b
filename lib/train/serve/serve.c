/*
 * serve.c - inference for a server (dp_serve.h): the checkpoint loaded
 * once per model thread (a generation), the queue of requests, the model
 * threads that batch them, the answers.  Request bodies are body.c's.
 *
 * Locking: one mutex over the queue, the current generation, the
 * reference counts and the statistics; a request's own fields are its
 * submitter's until it is queued, then the model thread's until done()
 * is called, then its submitter's again.  A generation is freed by
 * whoever drops its last reference (the last request of it, or the reload
 * that replaced it), outside the lock.
 */
#define _GNU_SOURCE
#include "serve_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- generations ------------------------------------------------------------- */

static void gen_free(serve_gen *g)
{
	if (!g)
		return;
	for (unsigned i = 0; g->copy && i < g->nw; i++) {
		serve_copy *c = &g->copy[i];
		if (c->m)
			dp_model_free(c->m);
		if (c->ctx) {
			if (c->xbuf)
				g->be->host_free(c->ctx, c->xbuf);
			g->be->close(c->ctx);
		}
		free(c->obuf);
	}
	free(g->copy);
	dp_st_close(g->ck);
	dp_run_conf_free(&g->rc);
	free(g->path);
	free(g);
}

/* The checkpoint at path, for every worker, with the settings of s->c. */
static serve_gen *gen_load(dp_serve *s, const char *path, dp_err *e)
{
	const dp_serve_conf *c = &s->c;
	serve_gen *g = calloc(1, sizeof *g);
	if (!g || !(g->path = strdup(path))) {
		free(g);
		dp_seterr(e, DP_ENOMEM, "out of memory");
		return NULL;
	}
	dp_run_conf_init(&g->rc);
	g->nw = s->nw;
	g->be = dp_backend_default();
	if (!(g->copy = calloc(g->nw, sizeof *g->copy))) {
		dp_seterr(e, DP_ENOMEM, "out of memory");
		goto fail;
	}
	dp_backend_opts bo = {.threads = c->threads > 0 ? c->threads : 1, .device = c->device};
	for (unsigned i = 0; i < g->nw; i++) {
		serve_copy *cp = &g->copy[i];
		char desc[256];
		if (g->be->open(&cp->ctx, &bo, desc, sizeof desc, e) < 0)
			goto fail;
		if (!(cp->m = dp_model_load(path, g->be, cp->ctx, s->max_batch, i ? NULL : &g->ck, e)))
			goto fail;
	}
	dp_model *m = g->copy[0].m;
	g->in_size = dp_model_in_size(m);
	g->k = dp_model_out_size(m);
	g->cls = dp_model_loss_kind(m) == DP_LOSS_XENT;
	for (unsigned i = 0; i < g->nw; i++) {
		serve_copy *cp = &g->copy[i];
		if (!(cp->xbuf = g->be->host_alloc(cp->ctx, s->max_batch * g->in_size * sizeof(float))) ||
		    !(cp->obuf = malloc(s->max_batch * g->k * sizeof(float)))) {
			dp_seterr(e, DP_ENOMEM, "out of memory");
			goto fail;
		}
	}
	/* how its samples are read: the checkpoint's settings, as dp-eval's */
	static const int keys[] = {DP_RUN_FEATURE, DP_RUN_DECODE, DP_RUN_IMAGE, DP_RUN_LAYOUT,
				   DP_RUN_SCALE, -1};
	if (dp_run_conf_from(&g->rc, g->ck, keys, e) < 0)
		goto fail;
	dp_shape in = dp_model_input(m);
	dp_data_opts *o = &g->dopts;
	o->feature = g->rc.feature;
	if (g->rc.decode == DP_DECODE_IMAGE && !g->rc.from[DP_RUN_FEATURE])
		o->feature = "image/encoded";
	o->decode = g->rc.decode;
	o->scale = g->rc.scale;
	o->hwc = g->rc.decode != DP_DECODE_IMAGE && in.rank == 3 && g->rc.hwc;
	o->in_size = g->in_size;
	o->label_kind = DP_LABEL_NONE;
	if (in.rank == 3)
		o->shape[0] = (size_t)in.c, o->shape[1] = (size_t)in.h, o->shape[2] = (size_t)in.w;
	if (g->rc.decode == DP_DECODE_IMAGE) {
		if (in.rank != 3) {
			dp_seterr(e, DP_EDATA, "%s: an image model whose input is not C x H x W", path);
			goto fail;
		}
		dp_image_tf_eval(&g->rc.img, &o->image);
		if (c->max_pixels)
			o->image.max_pixels = c->max_pixels;
		/* what dp_data_open does to it: the model's shape, the scale */
		g->img = o->image;
		g->img.channels = in.c;
		g->img.height = (uint32_t)in.h;
		g->img.width = (uint32_t)in.w;
		g->img.scale = (float)(g->rc.scale != 0 ? g->rc.scale : 1);
		g->img.hwc = 0;
		if (dp_image_tf_check(&g->img, e) < 0) {
			dp_preferr(e, "%s", path);
			goto fail;
		}
	}
	dp_shape_format(&in, g->input, sizeof g->input);
	if (c->classes) {
		if (!g->cls || c->nclasses != g->k) {
			dp_seterr(e, DP_EARG, "%s: %zu class names for a model of %zu %s", path,
				  c->nclasses, g->k, g->cls ? "classes" : "outputs (regression)");
			goto fail;
		}
	}
	g->topk = g->cls ? (c->topk ? c->topk : 5) : 0;
	if (g->topk > g->k)
		g->topk = g->k;
	g->refs = 1;
	return g;
fail:
	gen_free(g);
	return NULL;
}

/* One reference less (under s->mu): 1 when it was the last (the caller
 * frees g, outside the lock). */
static int gen_unref(serve_gen *g)
{
	return --g->refs == 0;
}

/* ---- the queue ------------------------------------------------------------------- */

static void lock(dp_serve *s)
{
	pthread_mutex_lock(&s->mu);
}

static void unlock(dp_serve *s)
{
	pthread_mutex_unlock(&s->mu);
}

/* Samples at the head of the queue that one batch could take. */
static size_t head_samples(const dp_serve *s)
{
	size_t n = 0;
	for (const dp_req *r = s->head; r && r->g == s->head->g && n < s->max_batch; r = r->next)
		n += r->n;
	return n;
}

static void timed_wait(dp_serve *s, double until)
{
	struct timespec ts;
	double sec = floor(until);
	ts.tv_sec = (time_t)sec;
	ts.tv_nsec = (long)((until - sec) * 1e9);
	if (ts.tv_nsec >= 1000000000L)
		ts.tv_nsec = 999999999L;
	pthread_cond_timedwait(&s->cv, &s->mu, &ts);
}

/* Run the requests of list (one generation) on worker w's model: their
 * samples copied into batches of at most max_batch, the outputs back. */
static void compute(dp_serve *s, unsigned w, dp_req *list)
{
	serve_gen *g = list->g;
	dp_model *m = g->copy[w].m;
	float *xb = g->copy[w].xbuf, *ob = g->copy[w].obuf;
	size_t in = g->in_size, k = g->k, cap = s->max_batch;
	/* walk the requests' samples in order, a batch at a time */
	dp_req *r = list, *r0 = list;
	size_t off = 0, off0 = 0;
	while (r) {
		size_t n = 0;
		while (r && n < cap) { /* fill */
			size_t take = r->n - off < cap - n ? r->n - off : cap - n;
			memcpy(xb + n * in, r->x + off * in, take * in * sizeof(float));
			n += take;
			off += take;
			if (off == r->n) {
				r = r->next;
				off = 0;
			}
		}
		dp_err e;
		int rc = dp_model_predict(m, xb, n, ob, &e);
		/* scatter: from (r0, off0) on, n samples */
		size_t done = 0;
		while (done < n) {
			size_t take = r0->n - off0 < n - done ? r0->n - off0 : n - done;
			if (rc < 0 && r0->status == DP_OK) {
				r0->status = rc;
				r0->err = e;
			}
			memcpy(r0->out + off0 * k, ob + done * k, take * k * sizeof(float));
			done += take;
			off0 += take;
			if (off0 == r0->n) {
				r0 = r0->next;
				off0 = 0;
			}
		}
	}
}

static void *worker_main(void *arg)
{
	serve_worker *wk = arg;
	dp_serve *s = wk->s;
	lock(s);
	for (;;) {
		while (!s->stop && !s->head)
			pthread_cond_wait(&s->cv, &s->mu);
		if (!s->head)
			break; /* stopping, nothing left */
		/* wait for a full batch, or the oldest's delay */
		while (!s->stop && s->head && head_samples(s) < s->max_batch) {
			double until = s->head->t_enq + s->max_delay;
			if (dp_now() >= until)
				break;
			timed_wait(s, until);
		}
		if (!s->head)
			continue;
		serve_gen *g = s->head->g;
		dp_req *list = NULL, **tail = &list;
		size_t n = 0;
		while (s->head && s->head->g == g && (n == 0 || n + s->head->n <= s->max_batch)) {
			dp_req *r = s->head;
			s->head = r->next;
			if (!s->head)
				s->tail = &s->head;
			r->next = NULL;
			n += r->n;
			*tail = r;
			tail = &r->next;
		}
		s->queued -= n;
		g->refs++; /* while computing */
		unlock(s);
		/* those whose deadline passed are answered at once, not computed */
		double now = dp_now();
		dp_req *run = NULL, **rt = &run, *expired = NULL, **et = &expired;
		for (dp_req *r = list, *next; r; r = next) {
			next = r->next;
			r->next = NULL;
			r->t_start = now;
			if ((r->deadline > 0 && now > r->deadline) || s->stop) {
				r->status = DP_ELIMIT;
				dp_seterr(&r->err, DP_ELIMIT, "%s",
					  s->stop ? "the server is stopping"
						  : "waited past its deadline in the queue");
				*et = r;
				et = &r->next;
			} else {
				*rt = r;
				rt = &r->next;
			}
		}
		if (run)
			compute(s, wk->idx, run);
		now = dp_now();
		uint64_t nreq = 0, nsamp = 0, nexp = 0;
		for (int pass = 0; pass < 2; pass++)
			for (dp_req *r = pass ? expired : run, *next; r; r = next) {
				next = r->next;
				r->t_done = now;
				if (pass)
					nexp++;
				else
					nreq++, nsamp += r->n;
				r->done(r->ctx); /* r may be gone after this */
			}
		lock(s);
		s->st.requests += nreq;
		s->st.samples += nsamp;
		s->st.expired += nexp;
		s->st.batches += run != NULL;
		int last = gen_unref(g);
		if (last) {
			unlock(s);
			gen_free(g);
			lock(s);
		}
	}
	unlock(s);
	return NULL;
}

/* ---- the server --------------------------------------------------------------------- */

dp_serve *dp_serve_open(const dp_serve_conf *c, dp_err *e)
{
	dp_serve *s = dp_zalloc(sizeof *s, e);
	if (!s)
		return NULL;
	s->c = *c;
	s->nw = c->workers ? c->workers : 1;
	s->max_batch = c->max_batch ? c->max_batch : 32;
	s->max_delay = c->max_delay >= 0 ? c->max_delay : 0.002;
	s->max_queue = c->max_queue ? c->max_queue : 8 * s->max_batch * s->nw;
	s->tail = &s->head;
	if (!c->model || s->nw > 1024 || s->max_batch > (1u << 20)) {
		free(s);
		dp_seterr(e, DP_EARG, "serve: bad settings");
		return NULL;
	}
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->cv, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&s->mu, NULL);
	if (!(s->cur = gen_load(s, c->model, e))) {
		pthread_cond_destroy(&s->cv);
		pthread_mutex_destroy(&s->mu);
		free(s);
		return NULL;
	}
	s->cur->id = s->gens = 1;
	s->w = calloc(s->nw, sizeof *s->w);
	if (!s->w) {
		dp_seterr(e, DP_ENOMEM, "out of memory");
		dp_serve_close(s);
		return NULL;
	}
	for (unsigned i = 0; i < s->nw; i++) {
		s->w[i].s = s;
		s->w[i].idx = i;
		if (dp_thread_create(&s->w[i].th, worker_main, &s->w[i]) != 0) {
			dp_seterr(e, DP_EIO, "serve: cannot start a thread");
			dp_serve_close(s);
			return NULL;
		}
		s->w[i].started = 1;
	}
	return s;
}

int dp_serve_reload(dp_serve *s, const char *path, dp_err *e)
{
	serve_gen *g = gen_load(s, path ? path : s->c.model, e);
	if (!g)
		return e ? e->code : DP_EDATA;
	lock(s);
	g->id = ++s->gens;
	serve_gen *old = s->cur;
	s->cur = g;
	int last = gen_unref(old);
	unlock(s);
	if (last)
		gen_free(old);
	return DP_OK;
}

void dp_serve_close(dp_serve *s)
{
	if (!s)
		return;
	lock(s);
	s->stop = 1;
	pthread_cond_broadcast(&s->cv);
	unlock(s);
	for (unsigned i = 0; s->w && i < s->nw; i++)
		if (s->w[i].started)
			pthread_join(s->w[i].th, NULL);
	/* nothing is left queued: the workers drain the queue before they end */
	if (s->cur && gen_unref(s->cur))
		gen_free(s->cur);
	free(s->w);
	pthread_cond_destroy(&s->cv);
	pthread_mutex_destroy(&s->mu);
	free(s);
}

void dp_serve_get_info(dp_serve *s, dp_serve_info *out)
{
	lock(s);
	serve_gen *g = s->cur;
	out->model = g->path;
	out->spec = dp_model_spec(g->copy[0].m);
	out->input = g->input;
	out->in_size = g->in_size;
	out->k = g->k;
	out->classifier = g->cls;
	out->decode = dp_decode_name(g->rc.decode);
	out->generation = g->id;
	unlock(s);
}

void dp_serve_get_stats(dp_serve *s, dp_serve_stats *out)
{
	lock(s);
	*out = s->st;
	out->queued = s->queued;
	unlock(s);
}

/* ---- requests ------------------------------------------------------------------------ */

serve_gen *serve_current(dp_serve *s)
{
	lock(s);
	serve_gen *g = s->cur;
	g->refs++;
	unlock(s);
	return g;
}

size_t dp_req_samples(const dp_req *r)
{
	return r->n;
}

int dp_req_submit(dp_serve *s, dp_req *r, double deadline, void (*done)(void *ctx), void *ctx,
		  dp_err *e)
{
	r->done = done;
	r->ctx = ctx;
	r->deadline = deadline;
	r->status = DP_OK;
	lock(s);
	if (s->stop || s->queued + r->n > s->max_queue) {
		s->st.refused++;
		size_t q = s->queued;
		unlock(s);
		return dp_seterr(e, DP_ELIMIT, "%s: %zu samples queued, at most %zu",
				 s->stop ? "stopping" : "queue full", q, s->max_queue);
	}
	r->t_enq = dp_now();
	r->next = NULL;
	*s->tail = r;
	s->tail = &r->next;
	s->queued += r->n;
	/* a batch now full wakes every worker; else one, to start its wait */
	if (head_samples(s) >= s->max_batch)
		pthread_cond_broadcast(&s->cv);
	else
		pthread_cond_signal(&s->cv);
	unlock(s);
	return DP_OK;
}

void dp_req_times(const dp_req *r, double *queued, double *computed)
{
	*queued = r->t_start > r->t_enq ? r->t_start - r->t_enq : 0;
	*computed = r->t_done > r->t_start ? r->t_done - r->t_start : 0;
}

void serve_release(dp_serve *s, serve_gen *g)
{
	lock(s);
	int last = gen_unref(g);
	unlock(s);
	if (last)
		gen_free(g);
}

void dp_req_free(dp_req *r)
{
	if (!r)
		return;
	dp_serve *s = r->s;
	serve_gen *g = r->g;
	free(r->x);
	free(r->out);
	free(r);
	if (g)
		serve_release(s, g);
}

/* ---- answers ---------------------------------------------------------------------------- */

static void jfloat(dp_buf *b, float f)
{
	char t[32];
	dp_buf_addstr(b, isfinite(f) ? dp_fmt_float(f, t, sizeof t) : "null");
}

/* p[0..k) as the items of a JSON array. */
static void jfloats(dp_buf *b, const float *p, size_t k)
{
	for (size_t c = 0; c < k; c++) {
		if (c)
			dp_buf_addstr(b, ", ");
		jfloat(b, p[c]);
	}
}

static void jclass(dp_buf *b, const serve_gen *g, const dp_serve *s, size_t c)
{
	dp_buf_printf(b, "\"label\": %zu", c);
	if (s->c.classes) {
		dp_buf_addstr(b, ", \"class\": ");
		dp_buf_json_str(b, s->c.classes[c], strlen(s->c.classes[c]), 0);
	}
}

int dp_req_answer(dp_req *r, dp_buf *b, dp_err *e)
{
	if (r->status < 0) {
		if (e)
			*e = r->err;
		return r->status;
	}
	const serve_gen *g = r->g;
	const dp_serve *s = r->s;
	size_t k = g->k, topk = g->topk;
	size_t *idx = topk ? malloc(topk * sizeof *idx) : NULL;
	if (topk && !idx)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	dp_buf_addstr(b, "{\"predictions\": [");
	for (size_t i = 0; i < r->n; i++) {
		const float *p = r->out + i * k;
		dp_buf_addstr(b, i ? ",\n  {" : "\n  {");
		if (g->cls) {
			/* the top classes: highest first, the lower label on ties
			 * (the first maximum is the argmax, as dp-eval's) */
			for (size_t t = 0; t < topk; t++) {
				size_t best = k;
				for (size_t c = 0; c < k; c++) {
					int used = 0;
					for (size_t u = 0; u < t && !used; u++)
						used = idx[u] == c;
					if (!used && (best == k || p[c] > p[best]))
						best = c;
				}
				idx[t] = best;
			}
			jclass(b, g, s, idx[0]);
			dp_buf_addstr(b, ", \"probability\": ");
			jfloat(b, p[idx[0]]);
			dp_buf_addstr(b, ", \"probabilities\": [");
			jfloats(b, p, k);
			dp_buf_addstr(b, "], \"top_k\": [");
			for (size_t t = 0; t < topk; t++) {
				dp_buf_addstr(b, t ? ", {" : "{");
				jclass(b, g, s, idx[t]);
				dp_buf_addstr(b, ", \"probability\": ");
				jfloat(b, p[idx[t]]);
				dp_buf_addstr(b, "}");
			}
			dp_buf_addstr(b, "]}");
		} else {
			dp_buf_addstr(b, "\"outputs\": [");
			jfloats(b, p, k);
			dp_buf_addstr(b, "]}");
		}
	}
	dp_buf_addstr(b, "\n]}\n");
	free(idx);
	if (b->err)
		return dp_seterr(e, DP_ENOMEM, "out of memory (an answer of %zu samples)", r->n);
	return DP_OK;
}

/* dp_req_run's wait for done */
typedef struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int done;
} req_waiter;

static void req_done(void *ctx)
{
	req_waiter *w = ctx;
	pthread_mutex_lock(&w->mu);
	w->done = 1;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

int dp_req_run(dp_serve *s, dp_req *r, dp_buf *b, dp_err *e)
{
	req_waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
	int rc = dp_req_submit(s, r, 0, req_done, &w, e);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&w.mu);
	while (!w.done)
		pthread_cond_wait(&w.cv, &w.mu);
	pthread_mutex_unlock(&w.mu);
	return dp_req_answer(r, b, e);
}

/* ---- class names ------------------------------------------------------------------------ */

int dp_classes_parse(const char *text, size_t *kp, char ***namesp, dp_err *e)
{
	size_t k;
	char *t = NULL;
	if (text[0] == '@') {
		FILE *f = fopen(text + 1, "r");
		if (!f)
			return dp_syserr(e, "%s", text + 1);
		size_t cap = 0;
		ssize_t got = getdelim(&t, &cap, 0, f);
		int bad = ferror(f);
		fclose(f);
		if (bad) {
			free(t);
			return dp_seterr(e, DP_EIO, "%s: cannot read", text + 1);
		}
		if (got < 0 || !t) {
			free(t);
			t = strdup("");
		}
		if (!t)
			return dp_seterr(e, DP_ENOMEM, "out of memory");
		size_t l = strlen(t);
		while (l && (t[l - 1] == '\n' || t[l - 1] == '\r'))
			t[--l] = 0;
		for (char *p = t; *p; p++)
			if (*p == '\n')
				*p = ',';
			else if (*p == '\r')
				*p = ' ';
	} else if (!(t = strdup(text))) {
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	}
	/* one block: k pointers, then the text */
	size_t tl = strlen(t);
	k = *kp;
	if (!k) { /* as many as there are */
		for (const char *p = t; *p;) {
			while (*p == ',')
				p++;
			if (*p)
				k++;
			while (*p && *p != ',')
				p++;
		}
	}
	char **names = malloc((k + 1) * sizeof *names + tl + 1);
	if (!names) {
		free(t);
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	}
	char *txt = (char *)(names + k + 1);
	memcpy(txt, t, tl + 1);
	free(t);
	size_t n = 0;
	char *save = NULL;
	for (char *p = txt, *tok; (tok = strtok_r(p, ",", &save)); p = NULL) {
		if (n < k)
			names[n] = tok;
		n++;
	}
	if (n != k) {
		free(names);
		return dp_seterr(e, DP_EARG, "%zu names for a model of %zu classes", n, k);
	}
	for (size_t i = 0; i < k; i++)
		for (size_t j = 0; j < i; j++)
			if (!strcmp(names[i], names[j])) {
				char *shown = dp_shown(names[i], strlen(names[i]));
				dp_seterr(e, DP_EARG, "'%s' twice", shown ? shown : "?");
				free(shown);
				free(names);
				return DP_EARG;
			}
	names[k] = NULL;
	*namesp = names;
	*kp = k;
	return DP_OK;
}
