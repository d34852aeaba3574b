/*
 * shuffle.c - the full (external) and windowed shuffles of dp_shuffle.h.
 *
 * Full shuffle, memory phase: items are appended to an arena of mmap'd
 * chunks as [u64 len][bytes], with an index of (key, pointer).  When the
 * arena would pass its limit, every item so far goes to 256 bucket files
 * by the top byte of its key, and later items go straight there.  Spill
 * records are [u64 key][u64 len][bytes], buffered per bucket.
 *
 * Reading: without a spill, the index is sorted by key.  With one, buckets
 * are taken from a stack in key order; a bucket that fits in memory is read
 * whole into one mmap'd buffer, indexed and sorted; one that does not is
 * split by its next key bits (2 to 256 ways, enough for the parts to fit
 * twice over) and the parts are pushed in its place.  Keys are distinct, so
 * splitting ends at one item at worst.  Spill files are created on their
 * first write, so empty buckets cost nothing.  Large buffers come from mmap so that freeing them gives the
 * memory back at once (peak RSS stays near the limit).
 */
#define _GNU_SOURCE
#include "dp_shuffle.h"
#include "dp_hash.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define NB 256
#define CHUNK (8u << 20)
#define MIN_MEMORY (16u << 10)

/* ---- big buffers: mmap, so that they go back to the system when freed -- */

static void *big_alloc(size_t n)
{
	void *p = mmap(NULL, n ? n : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

static void big_free(void *p, size_t n)
{
	if (p)
		munmap(p, n ? n : 1);
}

struct chunk {
	struct chunk *next;
	size_t cap, used; /* cap: bytes of the mapping */
	uint8_t data[];
};

struct ent {
	uint64_t key;
	const uint8_t *p; /* [u64 len][bytes] */
};

struct bucket {
	int fd;           /* -1 until the first flush */
	uint64_t bytes, items;
	int used;         /* leading key bits shared by the bucket's items */
	int level;        /* 1 for the first spill */
};

/* Up to 256 bucket files being written, with their buffers: the bucket of
 * an item is the `bits` key bits after the first `shift`. */
struct part {
	struct bucket b[NB];
	uint8_t *buf[NB];
	size_t n[NB];
	int shift, bits;
};

struct dp_shuffle {
	dp_rng rng;
	uint64_t memory, arena_limit;
	size_t bufsz;
	char *tmpdir;
	dp_shuffle_stats st;

	struct chunk *chunks;
	uint64_t arena_used; /* bytes stored in the chunks */
	struct ent *idx;
	size_t nidx, capidx;

	struct part *part; /* the first-level buckets while adding */
	int reading;
	struct bucket *stack;
	size_t nstack, capstack;
	uint8_t *load; /* the bucket being read out */
	size_t load_len;
	size_t icur;
};

static int cmp_ent(const void *a, const void *b)
{
	uint64_t x = ((const struct ent *)a)->key, y = ((const struct ent *)b)->key;
	return x < y ? -1 : x > y;
}

static uint64_t rd64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

dp_shuffle *dp_shuffle_new(uint64_t seed, uint64_t memory, const char *tmpdir, dp_err *e)
{
	dp_shuffle *s = calloc(1, sizeof *s);
	tmpdir = dp_tmpdir(tmpdir);
	if (!s || !(s->tmpdir = strdup(tmpdir))) {
		free(s);
		dp_seterr(e, DP_ENOMEM, "out of memory");
		return NULL;
	}
	dp_rng_seed(&s->rng, seed, DP_SHUFFLE_STREAM);
	s->memory = memory < MIN_MEMORY ? MIN_MEMORY : memory;
	/* Bucket buffers take a quarter of the memory at most, 64 KiB each at most. */
	uint64_t b = s->memory / 4 / NB;
	s->bufsz = b > (64u << 10) ? (64u << 10) : b < 64 ? 64 : (size_t)b;
	s->arena_limit = s->memory - (uint64_t)s->bufsz * NB;
	return s;
}

/* ---- spill files ------------------------------------------------------- */

static int spill_file(dp_shuffle *s, dp_err *e)
{
	return dp_tmpfile(s->tmpdir, e);
}

static void part_free(struct part *p)
{
	if (!p)
		return;
	for (int i = 0; i < NB; i++) {
		free(p->buf[i]);
		if (p->b[i].fd >= 0)
			close(p->b[i].fd);
	}
	free(p);
}

static struct part *part_new(dp_shuffle *s, int shift, int bits, int level, dp_err *e)
{
	struct part *p = dp_zalloc(sizeof *p, e);
	if (!p)
		return NULL;
	if (bits > 64 - shift)
		bits = 64 - shift;
	p->shift = shift;
	p->bits = bits;
	for (int i = 0; i < NB; i++) {
		p->b[i].fd = -1;
		p->b[i].used = shift + bits;
		p->b[i].level = level;
	}
	for (int i = 0; i < (1 << bits); i++)
		if (!(p->buf[i] = malloc(s->bufsz))) {
			dp_seterr(e, DP_ENOMEM, "out of memory");
			part_free(p);
			return NULL;
		}
	if (s->st.levels < level)
		s->st.levels = level;
	return p;
}

static int spill_write(dp_shuffle *s, int fd, const void *buf, size_t n, dp_err *e)
{
	s->st.spilled_bytes += n;
	if (dp_write_all(fd, buf, n, "spill file", e) < 0)
		return dp_preferr(e, "%s", s->tmpdir);
	return 0;
}

static int part_flush(dp_shuffle *s, struct part *p, int i, dp_err *e)
{
	if (p->b[i].fd < 0 && (p->b[i].fd = spill_file(s, e)) < 0)
		return -1;
	int rc = spill_write(s, p->b[i].fd, p->buf[i], p->n[i], e);
	p->n[i] = 0;
	return rc;
}

/* Append an item with its key to the bucket its key bits choose. */
static int part_put(dp_shuffle *s, struct part *p, uint64_t key, const uint8_t *data, size_t len,
		    dp_err *e)
{
	int i = (int)((key << p->shift) >> (64 - p->bits));
	uint8_t hdr[16];
	uint64_t l = len;
	memcpy(hdr, &key, 8);
	memcpy(hdr + 8, &l, 8);
	size_t total = 16 + len;
	p->b[i].bytes += total;
	p->b[i].items++;
	if (p->n[i] + total > s->bufsz) {
		if (p->n[i] && part_flush(s, p, i, e) < 0)
			return -1;
		if (total > s->bufsz) {
			if (p->b[i].fd < 0 && (p->b[i].fd = spill_file(s, e)) < 0)
				return -1;
			s->st.spilled_bytes += total;
			if (dp_write_all(p->b[i].fd, hdr, 16, "spill file", e) < 0 ||
			    dp_write_all(p->b[i].fd, data, len, "spill file", e) < 0)
				return dp_preferr(e, "%s", s->tmpdir);
			return 0;
		}
	}
	memcpy(p->buf[i] + p->n[i], hdr, 16);
	memcpy(p->buf[i] + p->n[i] + 16, data, len);
	p->n[i] += total;
	return 0;
}

static void arena_free(dp_shuffle *s)
{
	while (s->chunks) {
		struct chunk *c = s->chunks;
		s->chunks = c->next;
		big_free(c, c->cap);
	}
	s->arena_used = 0;
	free(s->idx);
	s->idx = NULL;
	s->nidx = s->capidx = 0;
}

/* Move everything held in memory to first-level buckets. */
static int start_spill(dp_shuffle *s, dp_err *e)
{
	if (!(s->part = part_new(s, 0, 8, 1, e)))
		return -1;
	for (size_t i = 0; i < s->nidx; i++) {
		const uint8_t *p = s->idx[i].p;
		if (part_put(s, s->part, s->idx[i].key, p + 8, (size_t)rd64(p), e) < 0)
			return -1;
	}
	arena_free(s);
	return 0;
}

int dp_shuffle_add(dp_shuffle *s, const void *data, size_t len, dp_err *e)
{
	if (s->reading)
		return dp_seterr(e, DP_EARG, "dp_shuffle_add after dp_shuffle_next");
	uint64_t key = dp_rng_next(&s->rng);
	s->st.items++;
	s->st.bytes += len;
	if (s->part)
		return part_put(s, s->part, key, data, len, e);
	uint64_t need = 8 + (uint64_t)len + sizeof(struct ent);
	if (s->arena_used + (uint64_t)s->capidx * sizeof(struct ent) + need > s->arena_limit) {
		if (start_spill(s, e) < 0)
			return -1;
		return part_put(s, s->part, key, data, len, e);
	}
	if (s->nidx == s->capidx) {
		size_t nc = s->capidx ? s->capidx * 2 : 1024;
		struct ent *n = realloc(s->idx, nc * sizeof *n);
		if (!n)
			return dp_seterr(e, DP_ENOMEM, "out of memory");
		s->idx = n;
		s->capidx = nc;
	}
	struct chunk *c = s->chunks;
	if (!c || c->cap - sizeof *c - c->used < 8 + len) {
		size_t cap = sizeof *c + 8 + len > CHUNK ? sizeof *c + 8 + len : CHUNK;
		if (!(c = big_alloc(cap)))
			return dp_seterr(e, DP_ENOMEM, "out of memory");
		c->cap = cap;
		c->used = 0;
		c->next = s->chunks;
		s->chunks = c;
	}
	uint8_t *p = c->data + c->used;
	uint64_t l = len;
	memcpy(p, &l, 8);
	memcpy(p + 8, data, len);
	c->used += 8 + len;
	s->arena_used += 8 + len;
	s->idx[s->nidx].key = key;
	s->idx[s->nidx].p = p;
	s->nidx++;
	return 0;
}

/* ---- reading ------------------------------------------------------------ */

static int push(dp_shuffle *s, struct bucket b, dp_err *e)
{
	if (s->nstack == s->capstack) {
		size_t nc = s->capstack ? s->capstack * 2 : NB * 2;
		struct bucket *n = realloc(s->stack, nc * sizeof *n);
		if (!n)
			return dp_seterr(e, DP_ENOMEM, "out of memory");
		s->stack = n;
		s->capstack = nc;
	}
	s->stack[s->nstack++] = b;
	return 0;
}

/* Flush a finished part and push its buckets, so that the lowest key bits
 * come off the stack first. */
static int part_finish(dp_shuffle *s, struct part *p, dp_err *e)
{
	for (int i = 0; i < NB; i++)
		if (p->n[i] && part_flush(s, p, i, e) < 0)
			return -1;
	for (int i = NB - 1; i >= 0; i--) {
		if (p->b[i].items == 0)
			continue;
		if (push(s, p->b[i], e) < 0)
			return -1;
		p->b[i].fd = -1; /* the stack owns it now */
	}
	return 0;
}

static int read_at(dp_shuffle *s, int fd, uint8_t *buf, size_t n, uint64_t off, dp_err *e)
{
	size_t got = 0;
	while (got < n) {
		ssize_t k = pread(fd, buf + got, n - got, (off_t)(off + got));
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return dp_syserr(e, "%s: spill file: read", s->tmpdir);
		if (k == 0)
			return dp_seterr(e, DP_EIO, "%s: spill file: unexpected end", s->tmpdir);
		got += (size_t)k;
	}
	return 0;
}

/* Sequential buffered reading of a spill file. */
struct sread {
	int fd;
	uint64_t off, size; /* file offset of buf[end], file size */
	uint8_t *buf;
	size_t cap, pos, end;
};

/* Make n bytes available at buf+pos. */
static int sread_need(dp_shuffle *s, struct sread *r, size_t n, dp_err *e)
{
	if (r->end - r->pos >= n)
		return 0;
	memmove(r->buf, r->buf + r->pos, r->end - r->pos);
	r->end -= r->pos;
	r->pos = 0;
	if (n > r->cap) {
		uint8_t *nb = realloc(r->buf, n);
		if (!nb)
			return dp_seterr(e, DP_ENOMEM, "out of memory");
		r->buf = nb;
		r->cap = n;
	}
	uint64_t left = r->size - r->off;
	size_t want = r->cap - r->end;
	if (want > left)
		want = (size_t)left;
	if (r->end + want < n)
		return dp_seterr(e, DP_EIO, "%s: spill file: damaged", s->tmpdir);
	if (read_at(s, r->fd, r->buf + r->end, want, r->off, e) < 0)
		return -1;
	r->off += want;
	r->end += want;
	return 0;
}

/* Split bucket b by its next key bits: as many as make the parts fit in
 * memory with room to spare (at most 8). */
static int split_bucket(dp_shuffle *s, struct bucket *b, dp_err *e)
{
	uint64_t parts = (b->bytes + b->items * sizeof(struct ent)) / s->memory + 1;
	int bits = 1;
	while (bits < 8 && (1ull << bits) < 2 * parts)
		bits++;
	struct part *p = part_new(s, b->used, bits, b->level + 1, e);
	if (!p)
		return -1;
	struct sread r = {b->fd, 0, b->bytes, malloc(1u << 20), 1u << 20, 0, 0};
	int rc = r.buf ? 0 : dp_seterr(e, DP_ENOMEM, "out of memory");
	for (uint64_t n = 0; rc == 0 && n < b->items; n++) {
		if ((rc = sread_need(s, &r, 16, e)) < 0)
			break;
		uint64_t key = rd64(r.buf + r.pos), len = rd64(r.buf + r.pos + 8);
		if (len > b->bytes) {
			rc = dp_seterr(e, DP_EIO, "%s: spill file: damaged", s->tmpdir);
			break;
		}
		if ((rc = sread_need(s, &r, 16 + (size_t)len, e)) < 0)
			break;
		rc = part_put(s, p, key, r.buf + r.pos + 16, (size_t)len, e);
		r.pos += 16 + (size_t)len;
	}
	free(r.buf);
	if (rc == 0)
		rc = part_finish(s, p, e);
	part_free(p);
	return rc < 0 ? -1 : 0;
}

/* Read bucket b whole, index and sort it. */
static int load_bucket(dp_shuffle *s, struct bucket *b, dp_err *e)
{
	if (!(s->load = big_alloc((size_t)b->bytes)))
		return dp_seterr(e, DP_ENOMEM, "out of memory for a %llu-byte bucket",
				 (unsigned long long)b->bytes);
	s->load_len = (size_t)b->bytes;
	if (read_at(s, b->fd, s->load, s->load_len, 0, e) < 0)
		return -1;
	if (!(s->idx = malloc((size_t)b->items * sizeof *s->idx)))
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	size_t off = 0;
	s->nidx = 0;
	while (off < s->load_len && s->nidx < b->items) {
		if (s->load_len - off < 16 || rd64(s->load + off + 8) > s->load_len - off - 16)
			return dp_seterr(e, DP_EIO, "%s: spill file: damaged", s->tmpdir);
		s->idx[s->nidx].key = rd64(s->load + off);
		s->idx[s->nidx].p = s->load + off + 8;
		off += 16 + (size_t)rd64(s->load + off + 8);
		s->nidx++;
	}
	if (off != s->load_len || s->nidx != b->items)
		return dp_seterr(e, DP_EIO, "%s: spill file: damaged", s->tmpdir);
	qsort(s->idx, s->nidx, sizeof *s->idx, cmp_ent);
	s->icur = 0;
	return 0;
}

static void unload(dp_shuffle *s)
{
	big_free(s->load, s->load_len);
	s->load = NULL;
	s->load_len = 0;
	free(s->idx);
	s->idx = NULL;
	s->nidx = s->icur = 0;
}

int dp_shuffle_next(dp_shuffle *s, const uint8_t **p, size_t *len, dp_err *e)
{
	if (!s->reading) {
		s->reading = 1;
		if (s->part) {
			int rc = part_finish(s, s->part, e);
			part_free(s->part);
			s->part = NULL;
			if (rc < 0)
				return rc;
		} else if (s->nidx) {
			qsort(s->idx, s->nidx, sizeof *s->idx, cmp_ent);
			s->icur = 0;
		}
	}
	for (;;) {
		if (s->icur < s->nidx) {
			const uint8_t *q = s->idx[s->icur++].p;
			*len = (size_t)rd64(q);
			*p = q + 8;
			return 1;
		}
		if (s->chunks)
			arena_free(s);
		else
			unload(s);
		if (s->nstack == 0)
			return 0;
		struct bucket b = s->stack[--s->nstack];
		int rc;
		if (b.items == 1 || b.bytes + b.items * sizeof(struct ent) <= s->memory)
			rc = load_bucket(s, &b, e);
		else
			rc = split_bucket(s, &b, e);
		close(b.fd);
		if (rc < 0)
			return e ? e->code : DP_EIO;
	}
}

void dp_shuffle_stats_get(const dp_shuffle *s, dp_shuffle_stats *st)
{
	*st = s->st;
}

void dp_shuffle_free(dp_shuffle *s)
{
	if (!s)
		return;
	if (s->chunks)
		arena_free(s);
	else
		unload(s);
	part_free(s->part);
	for (size_t i = 0; i < s->nstack; i++)
		close(s->stack[i].fd);
	free(s->stack);
	free(s->tmpdir);
	free(s);
}

/* ---- window ------------------------------------------------------------- */

struct slot {
	uint8_t *p;
	size_t len, cap;
};

struct dp_window {
	dp_rng rng;
	struct slot *slot; /* size + 1: the last is the one handed out */
	size_t size, n;
};

dp_window *dp_window_new(uint64_t seed, size_t size, dp_err *e)
{
	dp_window *w = calloc(1, sizeof *w);
	if (size == 0)
		size = 1;
	if (!w || !(w->slot = calloc(size + 1, sizeof *w->slot))) {
		free(w);
		dp_seterr(e, DP_ENOMEM, "out of memory for a window of %zu items", size);
		return NULL;
	}
	dp_rng_seed(&w->rng, seed, DP_WINDOW_STREAM);
	w->size = size;
	return w;
}

static int slot_set(struct slot *sl, const void *p, size_t len)
{
	if (len > sl->cap) {
		size_t nc = len < 64 ? 64 : len;
		uint8_t *n = realloc(sl->p, nc);
		if (!n)
			return DP_ENOMEM;
		sl->p = n;
		sl->cap = nc;
	}
	memcpy(sl->p, p, len);
	sl->len = len;
	return 0;
}

static void slot_swap(struct slot *a, struct slot *b)
{
	struct slot t = *a;
	*a = *b;
	*b = t;
}

int dp_window_push(dp_window *w, const void *p, size_t len, const uint8_t **out, size_t *outlen,
		   dp_err *e)
{
	if (w->n < w->size) {
		if (slot_set(&w->slot[w->n], p, len) < 0)
			return dp_seterr(e, DP_ENOMEM, "out of memory in the shuffle window");
		w->n++;
		return 0;
	}
	struct slot *spare = &w->slot[w->size];
	size_t r = (size_t)dp_rng_below(&w->rng, w->size);
	slot_swap(&w->slot[r], spare);
	if (slot_set(&w->slot[r], p, len) < 0)
		return dp_seterr(e, DP_ENOMEM, "out of memory in the shuffle window");
	*out = spare->p;
	*outlen = spare->len;
	return 1;
}

int dp_window_drain(dp_window *w, const uint8_t **out, size_t *outlen)
{
	if (w->n == 0)
		return 0;
	struct slot *spare = &w->slot[w->size];
	size_t r = (size_t)dp_rng_below(&w->rng, w->n);
	slot_swap(&w->slot[r], spare);
	w->n--;
	slot_swap(&w->slot[r], &w->slot[w->n]); /* the last one fills the hole */
	*out = spare->p;
	*outlen = spare->len;
	return 1;
}

void dp_window_free(dp_window *w)
{
	if (!w)
		return;
	for (size_t i = 0; i <= w->size; i++)
		free(w->slot[i].p);
	free(w->slot);
	free(w);
}
