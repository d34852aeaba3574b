/*
 * memory.c - where a bound model keeps what its passes make (dp_nn.h):
 * the parameters, their gradients and the running statistics (one
 * buffer each), and the activations, planned so that a model keeps from
 * its forward pass only what its backward pass reads.
 *
 * The plan (nn_plan_memory), made again whenever what it depends on
 * changes (the frozen layers, the recompute segments, the slots):
 *  - a layer's output is in a buffer of its own or in the buffer of the
 *    layer it is a view of or works in place on (its owner);
 *  - a buffer the backward pass reads (a dense, conv or batchnorm layer's
 *    input, an activation's output, a recomputed segment's input, the
 *    model's output) is kept: it lives in the slot of the micro-batch,
 *    one slot per micro-batch in flight (dp_model_set_slots: a pipeline
 *    stage has several);
 *  - every other buffer is scratch, shared by all slots: the outputs that
 *    no backward pass reads (what a frozen start of the model makes: it
 *    keeps no activation) and the insides of recomputed segments, each
 *    live over its span of the forward pass (a segment's insides until
 *    its end) and packed by first fit, largest first, so that two
 *    buffers share memory only when their spans do not meet.
 * A recomputed segment (dp_model_set_recompute: torch.utils.checkpoint)
 * is a run of layers [a, f] whose insides no layer after it reads: its
 * forward pass keeps only its input and output, and the backward pass
 * runs it again (nn.c's replay) just before going back through it.
 *
 * Everything lives in two allocations (the slots', the shared one), so
 * the bytes dp_model_memory reports are the bytes allocated.
 */
#define _GNU_SOURCE
#include "nn_impl.h"

#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#define ALIGN 256 /* every buffer's start: the backends' vector loads */

static size_t align_up(size_t v) { return (v + ALIGN - 1) & ~(size_t)(ALIGN - 1); }

/* ---- binding ------------------------------------------------------------ */

static void free_acts(dp_model *m)
{
	if (!m->be)
		return;
	m->be->free(m->ctx, m->slot_mem);
	m->be->free(m->ctx, m->shared_mem);
	m->be->free(m->ctx, m->runs);
	m->slot_mem = m->shared_mem = NULL;
	m->runs = NULL;
	for (int k = 0; k < m->nslots && m->slots; k++) {
		free(m->slots[k].x);
		free(m->slots[k].y);
	}
	free(m->slots);
	m->slots = NULL;
	m->slot_bytes = m->shared_bytes = 0;
	for (int i = 0; i < m->n; i++) {
		m->l[i].ybuf = NULL;
		m->l[i].aux = NULL;
		m->l[i].ssum = NULL;
	}
	m->xbuf = NULL;
	m->out = NULL;
}

/* Everything dp_model_bind allocated, freed. */
void nn_unbind(dp_model *m)
{
	if (!m->be)
		return;
	const dp_backend *be = m->be;
	free_acts(m);
	for (int i = 0; i < m->ngbuf; i++)
		be->free(m->ctx, m->gbuf[i]);
	free(m->gbuf);
	free(m->gslot);
	free(m->hsums);
	be->host_free(m->ctx, m->hstats);
	m->hstats = NULL;
	m->gbuf = NULL;
	m->gslot = NULL;
	m->hsums = NULL;
	m->ngbuf = 0;
	void *bufs[] = {m->params, m->grads, m->bufs, m->ybuf, m->ws,
			m->stats, m->prob, m->sums, m->fold};
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		be->free(m->ctx, bufs[i]);
	m->params = m->grads = m->bufs = m->prob = m->fold = NULL;
	m->fold_n = 0;
	m->ybuf = m->ws = NULL;
	m->stats = m->sums = NULL;
	m->be = NULL;
}

int nn_has_ybuf(const dp_model *m, int i)
{
	const layer *L = &m->l[i];
	switch (L->kind) {
	case DP_LAYER_FLATTEN:
	case DP_LAYER_SOFTMAX:
		return 0;
	case DP_LAYER_RELU:
	case DP_LAYER_TANH:
	case DP_LAYER_SIGMOID:
	case DP_LAYER_ADD:
		return !L->fused && !L->inplace;
	case DP_LAYER_DROPOUT:
		return L->p > 0;
	case DP_LAYER_BATCHNORM:
		return !nn_folded(m, i); /* folded: a view of its convolution's output */
	default:
		return 1;
	}
}

/* The gradient buffers a backward pass needs at most (nothing frozen),
 * m->gslot allocated; -1: out of memory. */
static int most_gbufs(dp_model *m)
{
	int *frozen = malloc((size_t)m->n * sizeof *frozen);
	if (!frozen)
		return -1;
	for (int i = 0; i < m->n; i++) {
		frozen[i] = m->l[i].frozen;
		m->l[i].frozen = 0;
	}
	nn_plan_grads(m);
	int most = nn_walk_count(m);
	for (int i = 0; i < m->n; i++)
		m->l[i].frozen = frozen[i];
	free(frozen);
	nn_plan_grads(m);
	return most;
}

/* The largest activation of the stage, its input included (floats a sample). */
static size_t max_act(const dp_model *m)
{
	size_t most = nn_node_size(m, m->n);
	for (int i = m->lo; i < m->hi; i++)
		if (dp_shape_size(&m->l[i].out) > most)
			most = dp_shape_size(&m->l[i].out);
	return most;
}

int dp_model_bind(dp_model *m, const dp_backend *be, dp_bectx *ctx, size_t max_batch, dp_err *e)
{
	nn_unbind(m);
	if (max_batch == 0 || max_batch > (1u << 24))
		return dp_seterr(e, DP_EARG, "batch size %zu out of range", max_batch);
	m->be = be;
	m->ctx = ctx;
	m->max_batch = max_batch;
	size_t nb = max_batch, maxact = max_act(m), ws = 0;
	size_t outsz = nn_node_size(m, m->hi - 1);
#define ALLOC(dst, bytes)                                                                          \
	do {                                                                                       \
		if (!((dst) = be->alloc(ctx, (bytes))))                                            \
			goto nomem;                                                                \
	} while (0)
	for (int i = m->lo; i < m->hi; i++) {
		layer *L = &m->l[i];
		if (L->kind == DP_LAYER_CONV) {
			dp_conv2d g = {(int)nb,  L->in.c, L->in.h, L->in.w, L->units, L->out.h, L->out.w,
				       L->kh,   L->kw,   L->sh,   L->sw,   L->ph,    L->pw};
			size_t w = be->conv_ws(ctx, &g);
			if (w > ws)
				ws = w;
		}
	}
	if (!(m->gslot = malloc(((size_t)m->n + 1) * sizeof *m->gslot)))
		goto nomem;
	int most = most_gbufs(m);
	if (most < 0)
		goto nomem;
	if (!(m->gbuf = calloc((size_t)most, sizeof *m->gbuf)))
		goto nomem;
	m->ngbuf = most;
	for (int i = 0; i < most; i++)
		ALLOC(m->gbuf[i], nb * maxact * sizeof(float));
	if (m->maxc) {
		ALLOC(m->sums, 2 * (size_t)m->maxc * sizeof(double));
		if (!(m->hsums = malloc((2 * (size_t)m->maxc + 1) * sizeof(double))))
			goto nomem;
	}
	ALLOC(m->params, (m->sp ? m->sp : 1) * sizeof(float));
	ALLOC(m->grads, (m->sp ? m->sp : 1) * sizeof(float));
	ALLOC(m->bufs, (m->sb ? m->sb : 1) * sizeof(float));
	ALLOC(m->ybuf, nb * (outsz > 1 ? outsz : 1) * sizeof(float));
	ALLOC(m->ws, ws ? ws : 64);
	ALLOC(m->stats, 2 * sizeof(double));
	if (!(m->hstats = be->host_alloc(ctx, 2 * sizeof(double))))
		goto nomem;
	ALLOC(m->prob, nb * outsz * sizeof(float));
#undef ALLOC
	be->fill(ctx, m->params, 0, m->sp);
	be->fill(ctx, m->grads, 0, m->sp);
	if (m->sb)
		be->fill(ctx, m->bufs, 0, m->sb);
	if (!m->nslots)
		m->nslots = 1;
	int rc = nn_plan_memory(m, e);
	if (rc < 0) {
		nn_unbind(m);
		return rc;
	}
	return DP_OK;
nomem:
	nn_unbind(m);
	return dp_seterr(e, DP_ENOMEM, "out of memory for a model of %zu parameters with batch %zu",
			 m->nparams, max_batch);
}

/* ---- the plan ------------------------------------------------------------ */

/* The owner of each layer's output (-1: the stage's input), training
 * (dropout with its own buffer) or not (dropout a view). */
static void owners(const dp_model *m, int *own, int train)
{
	for (int i = m->lo; i < m->hi; i++) {
		const layer *L = &m->l[i];
		int self = nn_has_ybuf(m, i) && (train || L->kind != DP_LAYER_DROPOUT);
		own[i] = self ? i : L->src >= m->lo ? own[L->src] : -1;
	}
}

/* Segment s clipped to the stage: [*a, *f]; 0 when nothing of it is in
 * it, or none of its layers has a backward pass (nothing to replay). */
static int seg_span(const dp_model *m, int s, int *a, int *f)
{
	*a = m->seg[s][0] > m->lo ? m->seg[s][0] : m->lo;
	*f = m->seg[s][1] < m->hi - 1 ? m->seg[s][1] : m->hi - 1;
	int any = 0;
	for (int i = *a; i <= *f; i++)
		any |= m->l[i].needg;
	return *a <= *f && any;
}

typedef struct span {
	size_t bytes, off;
	int first, last;
	int layer, what; /* 0: ybuf, 1: aux */
} span;

static int by_size(const void *a, const void *b)
{
	const span *x = a, *y = b;
	return x->bytes < y->bytes ? 1 : x->bytes > y->bytes ? -1 : x->first - y->first;
}

/* First fit, largest first: offsets for spans that never share memory
 * while both are live; returns the bytes of the whole. */
static size_t pack(span *sp, int n)
{
	qsort(sp, (size_t)n, sizeof *sp, by_size);
	size_t total = 0;
	size_t *lo = malloc(((size_t)n + 1) * sizeof *lo), *hi = malloc(((size_t)n + 1) * sizeof *hi);
	if (!lo || !hi) { /* no packing: one after another */
		for (int i = 0; i < n; i++) {
			sp[i].off = total;
			total += align_up(sp[i].bytes);
		}
		free(lo);
		free(hi);
		return total;
	}
	for (int i = 0; i < n; i++) {
		int k = 0;
		for (int j = 0; j < i; j++) /* the placed ones live at the same time */
			if (sp[j].first <= sp[i].last && sp[i].first <= sp[j].last) {
				lo[k] = sp[j].off;
				hi[k++] = sp[j].off + align_up(sp[j].bytes);
			}
		size_t off = 0, need = align_up(sp[i].bytes);
		for (int moved = 1; moved;) { /* the lowest offset clear of all of them */
			moved = 0;
			for (int j = 0; j < k; j++)
				if (off < hi[j] && lo[j] < off + need) {
					off = hi[j];
					moved = 1;
				}
		}
		sp[i].off = off;
		if (off + need > total)
			total = off + need;
	}
	free(lo);
	free(hi);
	return total;
}

/* Which buffers the backward pass reads (keep[owner] = 1). */
static void kept(const dp_model *m, const int *own, char *keep)
{
	for (int i = m->lo; i < m->hi; i++) {
		const layer *L = &m->l[i];
		if (!L->needg)
			continue;
		int x = L->src >= m->lo ? own[L->src] : -1;
		if (x >= 0 && (L->kind == DP_LAYER_DENSE || L->kind == DP_LAYER_CONV ||
			       L->kind == DP_LAYER_BATCHNORM))
			keep[x] = 1;
		if (own[i] >= 0 && (((L->kind == DP_LAYER_DENSE || L->kind == DP_LAYER_CONV ||
				      L->kind == DP_LAYER_ADD || L->kind == DP_LAYER_BATCHNORM) &&
				     L->act) ||
				    (is_act(L->kind) && !L->fused)))
			keep[own[i]] = 1;
	}
	for (int s = 0; s < m->nseg; s++) { /* a replayed segment's inputs */
		int a, f;
		if (!seg_span(m, s, &a, &f))
			continue;
		for (int i = a; i <= f; i++) {
			const layer *L = &m->l[i];
			int src[2] = {L->src, L->src2};
			for (int k = 0; k < 2; k++)
				if (src[k] >= m->lo && src[k] < a && own[src[k]] >= 0)
					keep[own[src[k]]] = 1;
		}
	}
	if (own[m->hi - 1] >= 0) /* the output: the loss's, or the next stage's */
		keep[own[m->hi - 1]] = 1;
}

/* Each buffer's last use in a forward pass, training (owners own) or
 * not (eown): last[owner], a layer's index. */
static void last_uses(const dp_model *m, const int *own, const int *eown, int *last)
{
	for (int i = m->lo; i < m->hi; i++)
		last[i] = i;
	for (int i = m->lo; i < m->hi; i++) {
		const layer *L = &m->l[i];
		int src[2] = {L->src, L->src2};
		for (int k = 0; k < 2; k++) {
			if (src[k] < m->lo)
				continue;
			if (own[src[k]] >= 0)
				last[own[src[k]]] = i;
			if (eown[src[k]] >= 0)
				last[eown[src[k]]] = i;
		}
		if (own[i] >= 0 && last[own[i]] < i)
			last[own[i]] = i; /* works in its owner's memory */
	}
}

/* The plan for batches of nb: each layer's buffers placed, the bytes of a
 * slot and of the shared scratch. */
static int plan(dp_model *m, size_t nb, dp_err *e)
{
	for (int i = 0; i < m->n; i++) {
		layer *L = &m->l[i];
		L->seg = -1;
		L->yreg = L->areg = NN_NOWHERE;
		L->yoff = L->aoff = L->soff = 0;
	}
	for (int s = 0; s < m->nseg; s++) {
		int a, f;
		if (seg_span(m, s, &a, &f))
			for (int i = a; i <= f; i++)
				m->l[i].seg = s;
	}
	size_t n = (size_t)m->n;
	int *own = malloc(2 * n * sizeof *own), *last = malloc(n * sizeof *last);
	char *keep = calloc(n, 1);
	span *sp = malloc(2 * n * sizeof *sp);
	int nsp = 0, rc = DP_OK;
	if (!own || !last || !keep || !sp) {
		rc = dp_seterr(e, DP_ENOMEM, "out of memory");
		goto out;
	}
	int *eown = own + n;
	owners(m, own, 1);
	owners(m, eown, 0);
	kept(m, own, keep);
	last_uses(m, own, eown, last);
	size_t slot = 0;
	m->xoff = 0;
	slot += align_up(nb * nn_node_size(m, m->n) * sizeof(float));
	for (int i = m->lo; i < m->hi; i++) {
		layer *L = &m->l[i];
		int a = 0, f = -1, inside = L->seg >= 0 && seg_span(m, L->seg, &a, &f);
		size_t ybytes = nb * dp_shape_size(&L->out) * sizeof(float);
		if (nn_has_ybuf(m, i)) {
			if (inside && own[f] != i)
				sp[nsp++] = (span){ybytes, 0, i, last[i] > f ? last[i] : f, i, 0};
			else if (keep[i]) {
				L->yreg = NN_SLOT;
				L->yoff = slot;
				slot += align_up(ybytes);
			} else {
				sp[nsp++] = (span){ybytes, 0, i, last[i], i, 0};
			}
		}
		if (L->kind == DP_LAYER_MAXPOOL) { /* the argmax of each output */
			if (inside)
				sp[nsp++] = (span){ybytes, 0, i, f, i, 1};
			else if (L->needg) {
				L->areg = NN_SLOT;
				L->aoff = slot;
				slot += align_up(ybytes);
			} else {
				sp[nsp++] = (span){ybytes, 0, i, i, i, 1};
			}
		}
		if (L->kind == DP_LAYER_BATCHNORM) { /* its statistics; a replay's --sync-bn sums */
			L->areg = NN_SLOT;
			L->aoff = slot;
			slot += align_up(2 * (size_t)L->in.c * sizeof(float));
			if (inside) {
				L->soff = slot;
				slot += align_up(2 * (size_t)L->in.c * sizeof(double));
			}
		}
	}
	m->shared_bytes = pack(sp, nsp);
	for (int k = 0; k < nsp; k++) {
		layer *L = &m->l[sp[k].layer];
		if (sp[k].what == 0) {
			L->yreg = NN_SHARED;
			L->yoff = sp[k].off;
		} else {
			L->areg = NN_SHARED;
			L->aoff = sp[k].off;
		}
	}
	m->slot_bytes = slot;
out:
	free(own);
	free(last);
	free(keep);
	free(sp);
	return rc;
}

int nn_plan_memory(dp_model *m, dp_err *e)
{
	if (!m->be)
		return plan(m, 1, e);
	free_acts(m);
	int rc = plan(m, m->max_batch, e);
	if (rc < 0)
		return rc;
	size_t n = (size_t)m->n, slot = m->slot_bytes, nb = m->max_batch;

	const dp_backend *be = m->be;
	if (!(m->slot_mem = be->alloc(m->ctx, slot * (size_t)m->nslots)) ||
	    !(m->shared_mem = be->alloc(m->ctx, m->shared_bytes ? m->shared_bytes : ALIGN)) ||
	    (m->nseg && m->maxc && !(m->runs = be->alloc(m->ctx, 2 * (size_t)m->maxc * sizeof(float)))) ||
	    !(m->slots = calloc((size_t)m->nslots, sizeof *m->slots))) {
		free_acts(m);
		return dp_seterr(e, DP_ENOMEM,
				 "out of memory for the activations of %d micro-batch%s of %zu samples",
				 m->nslots, m->nslots == 1 ? "" : "es", nb);
	}
	for (int k = 0; k < m->nslots; k++)
		if (!(m->slots[k].x = calloc(n, sizeof *m->slots[k].x)) ||
		    !(m->slots[k].y = calloc(n, sizeof *m->slots[k].y))) {
			free_acts(m);
			return dp_seterr(e, DP_ENOMEM, "out of memory");
		}
	if (m->runs)
		be->fill(m->ctx, m->runs, 0, 2 * (size_t)m->maxc);
	m->slot = 0;
	nn_point_slot(m, 0);
	return DP_OK;
}

void nn_point_slot(dp_model *m, int k)
{
	char *base = m->slot_mem + (size_t)k * m->slot_bytes;
	for (int i = m->lo; i < m->hi; i++) {
		layer *L = &m->l[i];
		L->ybuf = L->yreg == NN_SLOT     ? (float *)(base + L->yoff)
			  : L->yreg == NN_SHARED ? (float *)(m->shared_mem + L->yoff)
						 : NULL;
		L->aux = L->areg == NN_SLOT     ? (void *)(base + L->aoff)
			 : L->areg == NN_SHARED ? (void *)(m->shared_mem + L->aoff)
						: NULL;
		L->ssum = L->soff ? (double *)(base + L->soff) : NULL;
	}
	m->xbuf = (float *)(base + m->xoff);
}

/* ---- slots ------------------------------------------------------------ */

int dp_model_set_slots(dp_model *m, int slots, dp_err *e)
{
	if (slots < 1 || slots > 4096)
		return dp_seterr(e, DP_EARG, "%d micro-batches in flight: want 1 to 4096", slots);
	free_acts(m); /* of the slots there were */
	m->nslots = slots;
	return m->be ? nn_plan_memory(m, e) : DP_OK;
}

int dp_model_slots(const dp_model *m) { return m->nslots ? m->nslots : 1; }

int dp_model_use_slot(dp_model *m, int k, dp_err *e)
{
	if (!m->be || k < 0 || k >= m->nslots)
		return dp_seterr(e, DP_EARG, "micro-batch slot %d of %d", k, m->be ? m->nslots : 0);
	m->slot = k;
	nn_point_slot(m, k);
	const nn_slot *s = &m->slots[k];
	m->dout = NULL;
	if (!s->valid) {
		m->out = NULL;
		return DP_OK;
	}
	m->xin = s->in;
	m->out = s->out;
	m->last_n = s->n;
	m->last_train = s->train;
	m->last_pass = s->pass;
	for (int i = m->lo; i < m->hi; i++) {
		m->l[i].x = s->x[i];
		m->l[i].y = s->y[i];
	}
	return DP_OK;
}

/* What the forward pass just made, kept in its slot. */
void nn_keep_slot(dp_model *m)
{
	nn_slot *s = &m->slots[m->slot];
	s->in = m->xin;
	s->out = m->out;
	s->n = m->last_n;
	s->train = m->last_train;
	s->pass = m->last_pass;
	s->valid = 1;
	for (int i = m->lo; i < m->hi; i++) {
		s->x[i] = m->l[i].x;
		s->y[i] = m->l[i].y;
	}
}

/* ---- recomputation ------------------------------------------------------------ */

/* Does name match one of the comma-separated patterns?  *hit marks the
 * patterns that matched. */
static int match_any(const char *patterns, const char *name, unsigned char *hit)
{
	int k = 0, any = 0;
	for (const char *p = patterns;; k++) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		char item[128];
		if (len && len < sizeof item) {
			memcpy(item, p, len);
			item[len] = 0;
			if (fnmatch(item, name, 0) == 0) {
				hit[k] = 1;
				any = 1;
			}
		}
		if (!end)
			return any;
		p = end + 1;
	}
}

static int by_start(const void *a, const void *b)
{
	return ((const int *)a)[0] - ((const int *)b)[0];
}

static int add_seg(dp_model *m, int a, int f, dp_err *e)
{
	int (*s)[2] = realloc(m->seg, ((size_t)m->nseg + 1) * sizeof *s);
	if (!s)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	m->seg = s;
	s[m->nseg][0] = a;
	s[m->nseg][1] = f;
	m->nseg++;
	return DP_OK;
}

/* Segment [a, f] as the passes can replay it: without the layers at its
 * start that work in place on memory before it (run twice, they would
 * act twice), and with no layer after it reading inside it. */
static int check_seg(dp_model *m, int *a, int f, dp_err *e)
{
	while (*a <= f && m->l[*a].inplace)
		(*a)++;
	for (int j = f + 1; j < m->n; j++) {
		const layer *L = &m->l[j];
		int src[2] = {L->src, L->src2};
		for (int k = 0; k < 2; k++)
			if (src[k] >= *a && src[k] < f)
				return dp_seterr(e, DP_EARG,
						 "--recompute: layers %s to %s are not one segment: %s "
						 "reads %s, inside them",
						 m->l[*a].name, m->l[f].name, L->name, m->l[src[k]].name);
	}
	return DP_OK;
}

/* The blocks taken as segments, the largest first (a block inside one
 * taken is part of it): the innermost ones (patterns NULL), or those
 * patterns name (hit marks the patterns that matched).  taken[i] marks
 * their layers. */
static int take_blocks(dp_model *m, const char *patterns, char *taken, unsigned char *hit,
		       dp_err *e)
{
	int *order = malloc(((size_t)m->nblk + 1) * sizeof *order), rc = DP_OK;
	if (!order)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	for (int b = 0; b < m->nblk; b++)
		order[b] = b;
	for (int b = 1; b < m->nblk; b++) /* by span, largest first (insertion: few blocks) */
		for (int c = b; c > 0; c--) {
			nn_block *x = &m->blk[order[c - 1]], *y = &m->blk[order[c]];
			if (x->hi - x->lo >= y->hi - y->lo)
				break;
			int t = order[c];
			order[c] = order[c - 1];
			order[c - 1] = t;
		}
	for (int k = 0; k < m->nblk && rc == DP_OK; k++) {
		nn_block *B = &m->blk[order[k]];
		if (taken[B->lo] || !(patterns ? match_any(patterns, B->name, hit) : B->inner))
			continue;
		int a = B->lo;
		for (int i = B->lo; i <= B->hi; i++)
			taken[i] = 1;
		if ((rc = check_seg(m, &a, B->hi, e)) == DP_OK && a < B->hi)
			rc = add_seg(m, a, B->hi, e);
	}
	free(order);
	return rc;
}

/* A pattern that matched nothing (hit[k] 0 for the k-th): a typo. */
static int unmatched(const char *patterns, const unsigned char *hit, dp_err *e)
{
	for (int k = 0, i = 0;; k++) {
		const char *end = strchr(patterns + i, ',');
		size_t len = end ? (size_t)(end - patterns - i) : strlen(patterns + i);
		if (!hit[k])
			return dp_seterr(e, DP_EARG, "--recompute: '%.*s' names no layer or block of "
					 "the model (see --summary)", (int)len, patterns + i);
		if (!end)
			return DP_OK;
		i += (int)len + 1;
	}
}

int dp_model_set_recompute(dp_model *m, const char *patterns, dp_err *e)
{
	free(m->seg);
	free(m->recompute);
	m->seg = NULL;
	m->recompute = NULL;
	m->nseg = 0;
	int rc = DP_OK;
	if (!patterns)
		return nn_plan_memory(m, e);
	char *taken = calloc((size_t)m->n + 1, 1);
	unsigned char *hit = calloc(strlen(patterns) + 2, 1);
	if (!taken || !hit || !(m->recompute = strdup(patterns))) {
		rc = dp_seterr(e, DP_ENOMEM, "out of memory");
		goto out;
	}
	int blocks = !*patterns || !strcmp(patterns, "blocks");
	if ((rc = take_blocks(m, blocks ? NULL : patterns, taken, hit, e)) < 0)
		goto out;
	/* every innermost block: and the runs of layers between them */
	for (int i = 0; i < m->n && blocks && m->nseg && rc == DP_OK; i++) {
		if (taken[i])
			continue;
		int a = i, f = i;
		while (f + 1 < m->n && !taken[f + 1])
			f++;
		dp_err skip;
		if (f > a && check_seg(m, &a, f, &skip) == DP_OK && a < f)
			rc = add_seg(m, a, f, e);
		i = f;
	}
	/* layers named, outside the blocks taken: each run of them in order */
	for (int i = 0; i < m->n && !blocks && rc == DP_OK; i++) {
		if (taken[i] || !match_any(patterns, m->l[i].name, hit))
			continue;
		int f = i;
		while (f + 1 < m->n && !taken[f + 1] && match_any(patterns, m->l[f + 1].name, hit))
			f++;
		int a = i;
		if ((rc = check_seg(m, &a, f, e)) == DP_OK && a < f)
			rc = add_seg(m, a, f, e);
		i = f;
	}
	if (rc < 0)
		goto out;
	if (blocks && !m->nseg) {
		rc = dp_seterr(e, DP_EARG, "--recompute: the model has no blocks (res(...), seq(...)) "
				 "to recompute: name its layers (--recompute '[1-6]')");
		goto out;
	}
	if (!blocks && (rc = unmatched(patterns, hit, e)) < 0)
		goto out;
	qsort(m->seg, (size_t)m->nseg, sizeof *m->seg, by_start);
	rc = nn_plan_memory(m, e);
out:
	free(taken);
	free(hit);
	if (rc < 0) {
		free(m->seg);
		free(m->recompute);
		m->seg = NULL;
		m->recompute = NULL;
		m->nseg = 0;
	}
	return rc;
}

int dp_model_nsegments(const dp_model *m) { return m->nseg; }

void dp_model_segment(const dp_model *m, int s, int *first, int *last)
{
	*first = m->seg[s][0];
	*last = m->seg[s][1];
}

/* ---- what it takes ------------------------------------------------------------ */

/* What the plan for batches of nb takes, with ngbuf gradient buffers. */
static void fill_mem(const dp_model *m, size_t nb, int ngbuf, dp_model_mem *mm)
{
	memset(mm, 0, sizeof *mm);
	size_t maxact = max_act(m);
	int nslots = m->nslots ? m->nslots : 1;
	mm->params = m->sp * sizeof(float);
	mm->grads = m->sp * sizeof(float);
	mm->buffers = m->sb * sizeof(float);
	mm->activations = m->slot_bytes * (size_t)nslots + m->shared_bytes;
	mm->kept = m->slot_bytes * (size_t)nslots;
	mm->scratch = m->shared_bytes;
	mm->grad_scratch = (size_t)ngbuf * nb * maxact * sizeof(float);
	mm->total = mm->params + mm->grads + mm->buffers + mm->activations + mm->grad_scratch;
}

void dp_model_memory(const dp_model *m, dp_model_mem *mm)
{
	if (!m->be) {
		memset(mm, 0, sizeof *mm);
		return;
	}
	fill_mem(m, m->max_batch, m->ngbuf, mm);
}

int dp_model_plan(dp_model *m, size_t max_batch, dp_model_mem *mm, dp_err *e)
{
	if (m->be) {
		dp_model_memory(m, mm);
		return DP_OK;
	}
	if (max_batch == 0 || max_batch > (1u << 24))
		return dp_seterr(e, DP_EARG, "batch size %zu out of range", max_batch);
	int rc = plan(m, max_batch, e), most;
	if (rc < 0)
		return rc;
	if (!(m->gslot = malloc(((size_t)m->n + 1) * sizeof *m->gslot)) || (most = most_gbufs(m)) < 0) {
		free(m->gslot);
		m->gslot = NULL;
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	}
	free(m->gslot);
	m->gslot = NULL;
	fill_mem(m, max_batch, most, mm);
	return DP_OK;
}
