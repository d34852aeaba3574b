/*
 * data.c - the training input pipeline (dp_data.h).
 *
 * One producer (the caller's thread, or a reader thread when prefetch > 0)
 * runs: sources in the epoch's order -> records (dp_reader) -> shard
 * filter -> shuffle buffer -> decode into a batch slot.  Records are
 * decoded straight from the reader's buffer (no shuffle) or from the
 * buffer slot that holds them (shuffle), into the batch: one copy.
 *
 * With decode threads, the producer copies the records of a batch aside
 * (the stage) instead, and the pool and the producer decode them together
 * into the batch, each sample into its own place; images skipped as
 * corrupt leave holes that are closed up and filled by the next records.
 * Every decoder (the producer's and each thread's) owns its parse and
 * image state (struct worker).
 *
 * The reader thread hands batches over through a ring of prefetch + 1
 * slots; the consumer's current batch is the slot it took last, released
 * by its next call.  Stopping an epoch early wakes a thread waiting for a
 * slot, and cancels one blocked reading a stream (cancellation is enabled
 * only around the read).
 */
#define _GNU_SOURCE
#include "data_impl.h"
#include "dp_rng.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <glob.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>


/* ---- the producer ------------------------------------------------------------------ */

static int slot_store(slot *s, const uint8_t *data, size_t len, size_t src, uint64_t index,
		      uint64_t offset)
{
	if (len > s->cap) {
		size_t nc = len + len / 4 + 64;
		uint8_t *p = realloc(s->p, nc);
		if (!p)
			return DP_ENOMEM;
		s->p = p;
		s->cap = nc;
	}
	memcpy(s->p, data, len);
	s->len = len;
	s->src = src;
	s->index = index;
	s->offset = offset;
	return DP_OK;
}

/* An image that did not decode (e): 0 when skipped, else its error. */
static int skipped(dp_data *d, const dp_err *e)
{
	if (!d->o.skip_corrupt)
		return e->code;
	d->st.corrupt++;
	if (d->o.on_skip)
		d->o.on_skip(d->o.skip_ctx, e);
	return 0;
}

/* Send one record to the batch (or past it, while skipping).  Returns 1
 * when the batch is full. */
static int emit(dp_data *d, const uint8_t *data, size_t len, size_t src, uint64_t index,
		uint64_t offset, dp_batch *b, dp_err *e)
{
	d->pos++;
	if (d->o.shard_count > 1 && d->o.shard_block) {
		uint64_t k = d->out_no++;
		if ((k / d->o.shard_block) % d->o.shard_count != d->o.shard_index) {
			d->st.not_in_shard++;
			return 0;
		}
	}
	if (d->pos <= d->skip_to)
		return 0;
	if (d->skip) {
		if (++d->skip_fill == d->o.batch) {
			d->skip_fill = 0;
			d->skip--;
			d->batch_no++;
		}
		return 0;
	}
	if (d->stage) { /* for the pool */
		if (slot_store(&d->stage[d->nstage], data, len, src, index, offset) < 0)
			return dp_seterr(e, DP_ENOMEM, "out of memory for the decode stage");
		d->nstage++;
		return b->n + d->nstage == d->o.batch;
	}
	int rc = data_decode(&d->w[0], data, len, src, index, offset, b, b->n, e);
	if (rc == BAD_IMAGE)
		return skipped(d, e);
	if (rc < 0)
		return rc;
	b->n++;
	return b->n == d->o.batch;
}

/* ---- the decode pool ------------------------------------------------------------ */

/* Decode the staged records the pool has not taken yet.  Called with pmu
 * held; returns with it held. */
static void work(worker *w)
{
	dp_data *d = w->d;
	while (d->job_next < d->job_n) {
		size_t k = d->job_next++;
		pthread_mutex_unlock(&d->pmu);
		const slot *s = &d->stage[k];
		int rc = data_decode(w, s->p, s->len, s->src, s->index, s->offset, d->job_b,
				d->job_base + k, &d->job_err[k]);
		pthread_mutex_lock(&d->pmu);
		d->job_rc[k] = rc;
		if (++d->job_done == d->job_n)
			pthread_cond_broadcast(&d->pdone);
	}
}

static void *pool_thread(void *arg)
{
	worker *w = arg;
	dp_data *d = w->d;
	pthread_mutex_lock(&d->pmu);
	while (!d->pool_stop) {
		work(w);
		pthread_cond_wait(&d->pcv, &d->pmu);
	}
	pthread_mutex_unlock(&d->pmu);
	return NULL;
}

/* Decode the stage into b after its b->n samples, with the pool; close
 * up the holes of skipped images.  The first error in stage order wins,
 * so that it does not depend on the threads. */
static int run_stage(dp_data *d, dp_batch *b, dp_err *e)
{
	size_t n = d->nstage, base = b->n;
	if (!n)
		return DP_OK;
	pthread_mutex_lock(&d->pmu);
	d->job_b = b;
	d->job_base = base;
	d->job_n = n;
	d->job_next = d->job_done = 0;
	pthread_cond_broadcast(&d->pcv);
	work(&d->w[0]);
	while (d->job_done < d->job_n)
		pthread_cond_wait(&d->pdone, &d->pmu);
	d->job_n = 0;
	pthread_mutex_unlock(&d->pmu);
	d->nstage = 0;
	size_t in = d->o.in_size, k = d->o.label_size;
	for (size_t j = 0; j < n; j++) {
		int rc = d->job_rc[j];
		if (rc == BAD_IMAGE && (rc = skipped(d, &d->job_err[j])) == 0)
			continue;
		if (rc < 0) {
			if (e)
				*e = d->job_err[j];
			return rc;
		}
		size_t from = base + j, to = b->n++;
		if (from == to)
			continue;
		memcpy(b->x + to * in, b->x + from * in, in * sizeof *b->x);
		if (b->y)
			b->y[to] = b->y[from];
		if (b->t)
			memcpy(b->t + to * k, b->t + from * k, k * sizeof *b->t);
		if (b->src) {
			b->src[to] = b->src[from];
			b->rec[to] = b->rec[from];
		}
	}
	return DP_OK;
}

static void pool_stop(dp_data *d)
{
	if (!d->pool_up)
		return;
	pthread_mutex_lock(&d->pmu);
	d->pool_stop = 1;
	pthread_cond_broadcast(&d->pcv);
	pthread_mutex_unlock(&d->pmu);
	for (unsigned i = 1; i <= d->o.decode_threads; i++)
		if (d->w[i].th)
			pthread_join(d->w[i].th, NULL);
	pthread_mutex_destroy(&d->pmu);
	pthread_cond_destroy(&d->pcv);
	pthread_cond_destroy(&d->pdone);
	d->pool_up = 0;
}

static int pool_start(dp_data *d, dp_err *e)
{
	pthread_mutex_init(&d->pmu, NULL);
	pthread_cond_init(&d->pcv, NULL);
	pthread_cond_init(&d->pdone, NULL);
	d->pool_up = 1;
	for (unsigned i = 1; i <= d->o.decode_threads; i++) {
		int rc = dp_thread_create(&d->w[i].th, pool_thread, &d->w[i]);
		if (rc) {
			d->w[i].th = 0;
			errno = rc;
			return dp_syserr(e, "data: decode thread");
		}
	}
	return DP_OK;
}

/* Fill b: 1 with a batch (possibly partial at the end), 0 at the end of
 * the epoch, or an error. */
static int fill(dp_data *d, dp_batch *b, dp_err *e)
{
	b->n = 0;
	int rc;
	size_t cap = d->o.shuffle > 1 ? d->o.shuffle : 0;
	for (;;) {
		dp_record r;
		int got = 0;
		if (!d->input_done) {
			rc = data_next_record(d, &r, e);
			if (rc < 0)
				return rc;
			if (rc == 0)
				d->input_done = 1;
			else
				got = 1;
		}
		if (!cap) {
			if (!got)
				break;
			rc = emit(d, r.data, r.len, d->rd_src, r.index, r.offset, b, e);
		} else if (got && d->nbuf < cap) {
			if (slot_store(&d->buf[d->nbuf], r.data, r.len, d->rd_src, r.index, r.offset) < 0)
				return dp_seterr(e, DP_ENOMEM, "out of memory for the shuffle buffer");
			d->nbuf++;
			continue;
		} else if (got) {
			slot *s = &d->buf[dp_rng_below(&d->rng, d->nbuf)];
			rc = emit(d, s->p, s->len, s->src, s->index, s->offset, b, e);
			if (rc >= 0 && slot_store(s, r.data, r.len, d->rd_src, r.index, r.offset) < 0)
				return dp_seterr(e, DP_ENOMEM, "out of memory for the shuffle buffer");
		} else if (d->nbuf) {
			size_t j = (size_t)dp_rng_below(&d->rng, d->nbuf);
			slot *s = &d->buf[j];
			rc = emit(d, s->p, s->len, s->src, s->index, s->offset, b, e);
			slot t = *s; /* move the last one into the hole, keep buffers */
			*s = d->buf[d->nbuf - 1];
			d->buf[d->nbuf - 1] = t;
			d->nbuf--;
		} else {
			break;
		}
		if (rc < 0)
			return rc;
		if (rc == 1 && d->stage) {
			if ((rc = run_stage(d, b, e)) < 0)
				return rc;
			rc = b->n == d->o.batch;
		}
		if (rc == 1)
			goto full;
	}
	if (d->stage && (rc = run_stage(d, b, e)) < 0)
		return rc;
	if (b->n == 0)
		return 0;
	if (d->o.drop_last && b->n < d->o.batch) {
		d->st.dropped += b->n;
		b->n = 0;
		return 0;
	}
full:
	b->index = d->batch_no++;
	b->pos = d->pos;
	d->st.samples += b->n;
	d->st.batches++;
	return 1;
}

/* ---- the reader thread --------------------------------------------------------------- */

static void *producer(void *arg)
{
	dp_data *d = arg;
	int old;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
	pthread_mutex_lock(&d->mu);
	for (;;) {
		/* a free slot: not filled, not held */
		while (!d->stop && d->count >= d->nslots)
			pthread_cond_wait(&d->cv, &d->mu);
		if (d->stop)
			break;
		int w = (d->head + d->count) % d->nslots;
		pthread_mutex_unlock(&d->mu);
		dp_err e;
		int rc = fill(d, &d->slots[w], &e);
		pthread_mutex_lock(&d->mu);
		d->pub = d->st;
		if (rc == 1) {
			d->count++;
		} else {
			d->done = 1;
			d->status = rc;
			if (rc < 0)
				d->terr = e;
		}
		pthread_cond_broadcast(&d->cv);
		if (rc != 1)
			break;
	}
	pthread_mutex_unlock(&d->mu);
	return NULL;
}

static void stop_thread(dp_data *d)
{
	if (!d->running)
		return;
	pthread_mutex_lock(&d->mu);
	d->stop = 1;
	pthread_cond_broadcast(&d->cv);
	int done = d->done;
	pthread_mutex_unlock(&d->mu);
	if (!done)
		pthread_cancel(d->th); /* acts only while it is blocked reading */
	pthread_join(d->th, NULL);
	d->running = 0;
}

/* ---- public ------------------------------------------------------------------------------ */

void dp_data_close(dp_data *d)
{
	if (!d)
		return;
	stop_thread(d);
	pool_stop(d);
	data_abandon_source(d, 0);
	for (size_t i = 0; d->w && i <= d->o.decode_threads; i++) {
		worker *w = &d->w[i];
		dp_example_free(&w->ex);
		free(w->iscratch);
		free(w->tmp);
		dp_image_dec_free(w->img);
	}
	free(d->w);
	for (size_t i = 0; d->stage && i < d->o.batch; i++)
		free(d->stage[i].p);
	free(d->stage);
	free(d->job_rc);
	free(d->job_err);
	for (size_t i = 0; i < d->nsrc; i++) {
		source *s = &d->src[i];
		if (s->cw)
			dp_writer_free(s->cw);
		if (s->cache_fd >= 0)
			close(s->cache_fd);
		free(s->mem);
		free(s->path);
		free(s->name);
	}
	free(d->src);
	if (d->buf)
		for (size_t i = 0; i < (d->o.shuffle > 1 ? d->o.shuffle : 0); i++)
			free(d->buf[i].p);
	free(d->buf);
	for (int i = 0; i < d->nslots; i++) {
		dp_batch *b = &d->slots[i];
		if (d->o.free) {
			d->o.free(d->o.alloc_ctx, b->x);
			d->o.free(d->o.alloc_ctx, b->y);
			d->o.free(d->o.alloc_ctx, b->t);
		} else {
			free(b->x);
			free(b->y);
			free(b->t);
		}
		free(b->src);
		free(b->rec);
		for (size_t j = 0; b->name && j < d->o.batch; j++)
			free(b->name[j]);
		free(b->name);
	}
	free(d->slots);
	free(d->sample_name);
	free(d->order);
	if (d->threaded) {
		pthread_mutex_destroy(&d->mu);
		pthread_cond_destroy(&d->cv);
	}
	if (d->class_text) {
		for (size_t i = 0; d->names && i < d->o.nclass; i++)
			free(d->names[i]);
		free(d->names);
		free(d->class_text);
		pthread_mutex_destroy(&d->names_mu);
	}
	free(d->feature);
	free(d->label);
	free(d->cmd);
	free(d->cmd_run);
	free(d->cache_dir);
	free(d);
}

static void *balloc(dp_data *d, size_t bytes)
{
	if (!bytes)
		return NULL;
	return d->o.alloc ? d->o.alloc(d->o.alloc_ctx, bytes) : malloc(bytes);
}

/* Options dp_data_open refuses (DP_EARG "data: bad options"). */
static int bad_opts(const dp_data_opts *o)
{
	return !o->feature || (!o->label && o->label_kind != DP_LABEL_NONE) || !o->in_size || !o->batch ||
	       (o->label_kind == DP_LABEL_CLASS && o->nclass < 1) ||
	       (o->label_kind == DP_LABEL_VECTOR && o->label_size < 1) ||
	       (o->label_kind != DP_LABEL_CLASS && o->label_kind != DP_LABEL_VECTOR &&
	        o->label_kind != DP_LABEL_NONE) ||
	       (!o->cmd && !o->ninputs) || (o->shard_count > 1 && o->shard_index >= o->shard_count) ||
	       o->prefetch < 0 || o->prefetch > 64 || o->shuffle > (1u << 28) ||
	       o->decode_threads > 256 ||
	       ((o->hwc || o->decode == DP_DECODE_IMAGE) &&
	        o->shape[0] * o->shape[1] * o->shape[2] != o->in_size);
}

/* The decoding workers' scratch (one more than the decode threads: the
 * calling thread's), and the pool's staging.  -1 when out of memory. */
static int workers_alloc(dp_data *d)
{
	const dp_data_opts *o = &d->o;
	size_t isz = o->in_size > o->label_size ? o->in_size : o->label_size;
	if (!(d->w = calloc(o->decode_threads + 1, sizeof *d->w)))
		return -1;
	for (size_t i = 0; i <= o->decode_threads; i++) {
		worker *w = &d->w[i];
		w->d = d;
		if (!(w->iscratch = malloc(isz * sizeof(double) + 8)) ||
		    (o->hwc && !(w->tmp = malloc(o->in_size * sizeof(float)))) ||
		    (o->decode == DP_DECODE_IMAGE && !(w->img = dp_image_dec_new())))
			return -1;
	}
	if (o->decode_threads &&
	    (!(d->stage = calloc(o->batch, sizeof *d->stage)) ||
	     !(d->job_rc = calloc(o->batch, sizeof *d->job_rc)) ||
	     !(d->job_err = calloc(o->batch, sizeof *d->job_err))))
		return -1;
	return 0;
}

/* The batches handed out (prefetch + 1 of them when threaded).  -1 when
 * out of memory. */
static int slots_alloc(dp_data *d)
{
	const dp_data_opts *o = &d->o;
	for (int i = 0; i < d->nslots; i++) {
		dp_batch *b = &d->slots[i];
		b->x = balloc(d, o->batch * o->in_size * sizeof(float));
		if (o->label_kind == DP_LABEL_CLASS)
			b->y = balloc(d, o->batch * sizeof(int32_t));
		else if (o->label_kind == DP_LABEL_VECTOR)
			b->t = balloc(d, o->batch * o->label_size * sizeof(float));
		if (!b->x || (!b->y && !b->t && o->label_kind != DP_LABEL_NONE))
			return -1;
		if (o->origins && (!(b->src = malloc(o->batch * sizeof *b->src)) ||
				   !(b->rec = malloc(o->batch * sizeof *b->rec))))
			return -1;
		if (o->origins && o->sample_name && !(b->name = calloc(o->batch, sizeof *b->name)))
			return -1;
	}
	return 0;
}

dp_data *dp_data_open(const dp_data_opts *o, dp_err *e)
{
	if (bad_opts(o)) {
		dp_seterr(e, DP_EARG, "data: bad options");
		return NULL;
	}
	dp_data *d = dp_zalloc(sizeof *d, e);
	if (!d)
		return NULL;
	d->o = *o;
	d->held = -1;
	if (!(d->o.scale != 0))
		d->o.scale = 1;
	d->feature = strdup(o->feature);
	d->label = strdup(o->label ? o->label : "");
	d->cmd = o->cmd ? strdup(o->cmd) : NULL;
	d->cache_dir = strdup(dp_tmpdir(o->cache_dir));
	if (!d->feature || !d->label || (o->cmd && !d->cmd) || !d->cache_dir)
		goto nomem;
	if (o->origins && o->sample_name && !(d->sample_name = strdup(o->sample_name)))
		goto nomem;
	if (o->class_text && o->label_kind == DP_LABEL_CLASS) {
		if (!(d->class_text = strdup(o->class_text)) ||
		    !(d->names = calloc(o->nclass, sizeof *d->names))) {
			free(d->class_text);
			d->class_text = NULL;
			goto nomem;
		}
		pthread_mutex_init(&d->names_mu, NULL);
	}
	if (o->decode == DP_DECODE_IMAGE) {
		dp_image_tf *t = &d->o.image;
		t->channels = (int)o->shape[0];
		t->height = (uint32_t)o->shape[1];
		t->width = (uint32_t)o->shape[2];
		t->scale = (float)d->o.scale;
		t->hwc = 0;
		if (dp_image_tf_check(t, e) < 0)
			goto fail;
	}
	if (workers_alloc(d) < 0)
		goto nomem;
	if (o->decode_threads && pool_start(d, e) < 0)
		goto fail;
	int rc = o->cmd ? data_add_source(d, SRC_CMD, "command", "command", e) : data_find_sources(d, e);
	if (rc < 0)
		goto fail;
	d->order = malloc(d->nsrc * sizeof *d->order);
	if (!d->order)
		goto nomem;
	if (o->shuffle > 1 && !(d->buf = calloc(o->shuffle, sizeof *d->buf)))
		goto nomem;
	d->threaded = o->prefetch > 0;
	d->nslots = d->threaded ? o->prefetch + 1 : 1;
	if (!(d->slots = calloc((size_t)d->nslots, sizeof *d->slots)))
		goto nomem;
	if (slots_alloc(d) < 0)
		goto nomem;
	if (d->threaded) {
		pthread_mutex_init(&d->mu, NULL);
		pthread_cond_init(&d->cv, NULL);
	}
	return d;
nomem:
	dp_seterr(e, DP_ENOMEM, "out of memory");
fail:
	dp_data_close(d);
	return NULL;
}

int dp_data_epoch(dp_data *d, uint64_t epoch, uint64_t skip, dp_err *e)
{
	return dp_data_epoch_at(d, epoch, skip, 0, e);
}

int dp_data_epoch_at(dp_data *d, uint64_t epoch, uint64_t batches, uint64_t pos, dp_err *e)
{
	stop_thread(d);
	data_abandon_source(d, 1);
	d->epoch = epoch;
	d->skip = pos ? 0 : batches;
	d->skip_fill = 0;
	d->pos = 0;
	d->skip_to = pos;
	d->batch_no = pos ? batches : 0;
	d->cur = 0;
	d->input_done = 0;
	d->rec_no = 0;
	d->out_no = 0;
	d->nbuf = 0;
	d->nstage = 0;
	d->wait_s = 0;
	uint64_t cached = d->st.cached_bytes;
	memset(&d->st, 0, sizeof d->st);
	d->st.cached_bytes = cached;
	d->pub = d->st;
	for (size_t i = 0; i < d->nsrc; i++)
		d->order[i] = i;
	if (d->o.shuffle > 1 && d->nsrc > 1) {
		dp_rng r = {dp_rng_key(d->o.seed, 2, (uint64_t[]){DP_RNG_FILES, epoch}), 0};
		for (size_t i = d->nsrc - 1; i > 0; i--) {
			size_t j = (size_t)dp_rng_below(&r, i + 1), t = d->order[i];
			d->order[i] = d->order[j];
			d->order[j] = t;
		}
	}
	d->rng.key = dp_rng_key(d->o.seed, 2, (uint64_t[]){DP_RNG_SHUFFLE, epoch});
	d->rng.counter = 0;
	if (d->threaded) {
		d->stop = d->done = 0;
		d->status = 0;
		d->head = d->count = 0;
		d->held = -1;
		int rc = dp_thread_create(&d->th, producer, d);
		if (rc) {
			errno = rc;
			return dp_syserr(e, "data: reader thread");
		}
		d->running = 1;
	}
	return DP_OK;
}

int dp_data_next(dp_data *d, const dp_batch **b, dp_err *e)
{
	double t0 = dp_now();
	if (!d->threaded) {
		int rc = fill(d, &d->slots[0], e);
		if (rc == 1)
			*b = &d->slots[0];
		d->wait_s += dp_now() - t0;
		return rc;
	}
	if (!d->running)
		return dp_seterr(e, DP_EARG, "data: no epoch started");
	pthread_mutex_lock(&d->mu);
	if (d->held >= 0) { /* release the previous batch */
		d->head = (d->head + 1) % d->nslots;
		d->count--;
		d->held = -1;
		pthread_cond_broadcast(&d->cv);
	}
	while (!d->count && !d->done)
		pthread_cond_wait(&d->cv, &d->mu);
	d->wait_s += dp_now() - t0;
	int rc;
	if (d->count) {
		d->held = d->head;
		*b = &d->slots[d->head];
		rc = 1;
	} else {
		rc = d->status;
		if (rc < 0 && e)
			*e = d->terr;
	}
	pthread_mutex_unlock(&d->mu);
	return rc;
}

void dp_data_stats_get(dp_data *d, dp_data_stats *s)
{
	if (!d->threaded) {
		*s = d->st;
		s->wait_s = d->wait_s;
		return;
	}
	pthread_mutex_lock(&d->mu);
	*s = d->pub;
	s->wait_s = d->wait_s;
	pthread_mutex_unlock(&d->mu);
}

size_t dp_data_nsources(const dp_data *d) { return d->nsrc; }

const char *dp_data_source(const dp_data *d, size_t i)
{
	return i < d->nsrc ? d->src[i].name : NULL;
}

size_t dp_data_class_names(dp_data *d, const char *const **names)
{
	size_t n = 0;
	if (!d->class_text)
		return 0;
	pthread_mutex_lock(&d->names_mu);
	while (n < d->o.nclass && d->names[n])
		n++;
	if (n < d->o.nclass || d->names_bad)
		n = 0;
	pthread_mutex_unlock(&d->names_mu);
	*names = (const char *const *)d->names;
	return n;
}
