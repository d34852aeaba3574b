/*
 * example.c - tf.train.Example wire format: a validating zero-copy view and
 * a canonical builder.  Field numbers (lib/records/example.proto):
 *   Example  { Features features = 1 }
 *   Features { map<string, Feature> feature = 1 }   entry { key = 1; value = 2 }
 *   Feature  { oneof { BytesList = 1; FloatList = 2; Int64List = 3 } }
 *   *List    { repeated value = 1 }  (float, int64 packed or not)
 *
 * Wire rules of the view.  It accepts exactly what protobuf-c's generated
 * parser accepts, except where protobuf-c is looser than Google's parsers
 * (which TensorFlow uses); there the view rejects.  tests/fuzz/example.c
 * checks this differentially, and the exceptions are these:
 *  - a tag is a varint of at most 5 bytes with a field number from 1 to
 *    2^29-1 (protobuf-c takes field number 0 as an unknown field and lets a
 *    5-byte tag wrap past 32 bits): "invalid field number";
 *  - a length prefix is a varint of at most 5 bytes below 2^32 (protobuf-c
 *    wraps larger ones): "length prefix out of range";
 *  - feature names are UTF-8, as proto3 strings must be, every occurrence
 *    of a repeated key included (protobuf-c does not check).
 * Both reject a field of a known number with the wrong wire type (Google's
 * parsers would keep it as an unknown field), groups, and wire types 6 and 7;
 * both skip unknown fields of the other wire types.  Varint values take at
 * most 10 bytes, bits past the 64th dropped.
 *
 * Merging follows protobuf: a repeated `features` field merges, a repeated
 * map key keeps the last entry, a Feature's value fields merge, a oneof set
 * to another list kind replaces the earlier one, and the same list kind
 * appearing again concatenates.  (protobuf-c keeps only the last list of a
 * kind there; the fuzz target allows for that.)
 *
 * Speed: one pass, no allocation once the feature array has grown, no copy
 * of values; varints decoded with a one-byte fast path; packed int64 lists
 * counted by their terminating bytes; duplicate names found by a linear scan
 * for small Examples and a hash index past DEDUP_LINEAR features.
 */
#include "dp_example.h"
#include "wire.h"

#include <stdlib.h>
#include <string.h>

#define DEDUP_LINEAR 16

const char *dp_kind_name(int kind)
{
	switch (kind) {
	case DP_KIND_BYTES: return "bytes";
	case DP_KIND_FLOAT: return "float";
	case DP_KIND_INT64: return "int64";
	}
	return "none";
}


/* Count the varints of a packed int64 list: one per byte without the
 * continuation bit; none may run past 10 bytes or the end. */
static inline int count_packed_varints(const uint8_t *q, size_t len, size_t *n)
{
	size_t cnt = 0;
	int run = 0;
	for (size_t i = 0; i < len; i++) {
		if (q[i] & 0x80) {
			if (++run >= 10)
				return -1;
		} else {
			cnt++;
			run = 0;
		}
	}
	if (run)
		return -1;
	*n += cnt;
	return 0;
}

/* Validate one list message of kind k; count its values. */
static int check_list(int k, const uint8_t *p, size_t len, size_t *count, const char **why)
{
	const uint8_t *end = p + len;
	field f;
	size_t n = 0;
	while (p < end) {
		if (rd_field_at(&p, end, &f, why) < 0)
			return -1;
		if (f.num != 1)
			continue;
		if (k == DP_KIND_BYTES) {
			if (f.wt != 2)
				goto badwt;
			n++;
		} else if (k == DP_KIND_FLOAT) {
			if (f.wt == 2) {
				if (f.len % 4) {
					*why = "packed float list length is not a multiple of 4";
					return -1;
				}
				n += f.len / 4;
			} else if (f.wt == 5)
				n++;
			else
				goto badwt;
		} else {
			if (f.wt == 2) {
				if (count_packed_varints(f.data, f.len, &n) < 0) {
					*why = "bad varint in packed int64 list";
					return -1;
				}
			} else if (f.wt == 0)
				n++;
			else
				goto badwt;
		}
	}
	*count = n;
	return 0;
badwt:
	*why = "list value has the wrong wire type";
	return -1;
}

/* Validate a Feature message body, merging into *ft (kind, count, seg). */
static int check_feature(const uint8_t *p, size_t len, dp_feature *ft, const char **why)
{
	const uint8_t *end = p + len;
	field f;
	while (p < end) {
		if (rd_field_at(&p, end, &f, why) < 0)
			return -1;
		if (f.num < 1 || f.num > 3)
			continue;
		if (f.wt != 2) {
			*why = "Feature list has the wrong wire type";
			return -1;
		}
		size_t n;
		if (check_list((int)f.num, f.data, f.len, &n, why) < 0)
			return -1;
		if ((int)f.num != ft->kind) { /* oneof: a new member replaces */
			ft->kind = (int)f.num;
			ft->count = n;
			ft->seg = (size_t)(f.start - ft->body);
		} else {
			ft->count += n; /* the same member again merges */
		}
	}
	return 0;
}

int dp_utf8_valid(const void *sv, size_t n)
{
	const uint8_t *s = sv;
	size_t i = 0;
	while (i < n) {
		uint8_t c = s[i];
		if (c < 0x80) {
			i++;
			if (n - i >= 8) { /* ASCII runs 8 bytes at a time */
				uint64_t w;
				memcpy(&w, s + i, 8);
				while (!(w & 0x8080808080808080ull)) {
					i += 8;
					if (n - i < 8)
						break;
					memcpy(&w, s + i, 8);
				}
			}
			continue;
		}
		size_t k;
		uint32_t cp;
		if ((c & 0xe0) == 0xc0) {
			k = 1;
			cp = c & 0x1f;
		} else if ((c & 0xf0) == 0xe0) {
			k = 2;
			cp = c & 0x0f;
		} else if ((c & 0xf8) == 0xf0) {
			k = 3;
			cp = c & 0x07;
		} else
			return 0;
		if (n - i <= k)
			return 0;
		for (size_t j = 1; j <= k; j++) {
			if ((s[i + j] & 0xc0) != 0x80)
				return 0;
			cp = cp << 6 | (s[i + j] & 0x3f);
		}
		if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) ||
		    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return 0;
		i += k + 1;
	}
	return 1;
}

static inline int ascii_only(const uint8_t *s, size_t n)
{
	uint8_t acc = 0;
	for (size_t i = 0; i < n; i++)
		acc |= s[i];
	return acc < 0x80;
}

static uint32_t name_hash(const char *s, size_t n)
{
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)s[i]) * 16777619u;
	return h;
}

/* (Re)build the hash index of ex->f[0..n) with room for twice n. */
static int index_build(dp_example *ex)
{
	size_t cap = 64;
	while (cap < ex->n * 4)
		cap *= 2;
	if (cap > ex->htcap) {
		uint32_t *t = realloc(ex->ht, cap * sizeof *t);
		if (!t)
			return -1;
		ex->ht = t;
		ex->htcap = cap;
	}
	memset(ex->ht, 0, ex->htcap * sizeof *ex->ht);
	for (size_t i = 0; i < ex->n; i++) {
		size_t j = name_hash(ex->f[i].name, ex->f[i].name_len) & (ex->htcap - 1);
		while (ex->ht[j])
			j = (j + 1) & (ex->htcap - 1);
		ex->ht[j] = (uint32_t)i + 1;
	}
	return 0;
}

/* Room for one more feature at ex->f[ex->n]. */
static int reserve_feature(dp_example *ex)
{
	return dp_grow(&ex->f, &ex->cap, ex->n + 1, sizeof *ex->f) < 0 ? -1 : 0;
}

/* Keep the feature just parsed into ex->f[ex->n]: append it, or let it
 * replace the earlier feature of the same name (which keeps its position).
 * It is built in place, so the common case copies nothing: a struct built
 * on the stack and copied stalls on store forwarding, a large share of
 * the parse time. */
/* Names are short: compare them inline rather than through memcmp. */
static inline int same_name(const dp_feature *a, const dp_feature *b)
{
	if (a->name_len != b->name_len)
		return 0;
	if (a->name_len > 16)
		return memcmp(a->name, b->name, a->name_len) == 0;
	for (size_t i = 0; i < a->name_len; i++)
		if (a->name[i] != b->name[i])
			return 0;
	return 1;
}

static int keep_feature(dp_example *ex)
{
	dp_feature *ft = &ex->f[ex->n];
	if (ex->n < DEDUP_LINEAR) {
		for (size_t i = 0; i < ex->n; i++)
			if (same_name(&ex->f[i], ft)) {
				ex->f[i] = *ft;
				return 0;
			}
		ex->n++;
		return 0;
	}
	if (ex->n == DEDUP_LINEAR || ex->n * 2 >= ex->htcap) {
		if (index_build(ex) < 0)
			return -1;
	}
	size_t j = name_hash(ft->name, ft->name_len) & (ex->htcap - 1);
	for (; ex->ht[j]; j = (j + 1) & (ex->htcap - 1)) {
		dp_feature *o = &ex->f[ex->ht[j] - 1];
		if (o->name_len == ft->name_len && memcmp(o->name, ft->name, ft->name_len) == 0) {
			*o = *ft;
			return 0;
		}
	}
	ex->ht[j] = (uint32_t)ex->n + 1;
	ex->n++;
	return 0;
}

/* The next field numbered 1 in [*p, end), the others passed over, which
 * must be length-delimited (else *why is wrong): 1 with it in *f, 0 at the
 * end, -1 with *why. */
static int next_one(const uint8_t **p, const uint8_t *end, field *f, const char *wrong,
		    const char **why)
{
	while (*p < end) {
		if (rd_field_at(p, end, f, why) < 0)
			return -1;
		if (f->num != 1)
			continue;
		if (f->wt != 2) {
			*why = wrong;
			return -1;
		}
		return 1;
	}
	return 0;
}

/* One map entry: key (1) and value (2), each possibly repeated. */
static int parse_entry(dp_example *ex, const uint8_t *p, size_t len, dp_err *e)
{
	const uint8_t *end = p + len;
	const char *why = NULL;
	field f;
	if (reserve_feature(ex) < 0)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	dp_feature *ft = &ex->f[ex->n];
	ft->name = "";
	ft->name_len = 0;
	ft->kind = DP_KIND_NONE;
	ft->count = 0;
	ft->body = p;
	ft->body_len = len;
	ft->seg = 0;
	while (p < end) {
		if (rd_field_at(&p, end, &f, &why) < 0)
			goto bad;
		if (f.num == 1) {
			if (f.wt != 2) {
				why = "feature name has the wrong wire type";
				goto bad;
			}
			/* every occurrence must be UTF-8, as in protobuf,
			 * though only the last one counts */
			if (!ascii_only(f.data, f.len) && !dp_utf8_valid(f.data, f.len)) {
				why = "feature name is not valid UTF-8";
				goto bad;
			}
			ft->name = (const char *)f.data;
			ft->name_len = f.len;
		} else if (f.num == 2) {
			if (f.wt != 2) {
				why = "Feature has the wrong wire type";
				goto bad;
			}
			/* every value field of the entry merges into one
			 * Feature, as protobuf merges them; seg counts from
			 * the entry body */
			if (check_feature(f.data, f.len, ft, &why) < 0)
				goto bad;
		}
	}
	if (keep_feature(ex) < 0)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	return 0;
bad:
	return dp_seterr(e, DP_EDATA, "invalid Example: %s", why);
}

int dp_example_parse(dp_example *ex, const void *buf, size_t len, dp_err *e)
{
	const uint8_t *p = buf, *end = p + len;
	const char *why = NULL;
	field f, g;
	int rf, rg;
	ex->n = 0;
	ex->has_features = 0;
	while ((rf = next_one(&p, end, &f, "features has the wrong wire type", &why)) > 0) {
		ex->has_features = 1;
		const uint8_t *q = f.data, *qe = f.data + f.len;
		while ((rg = next_one(&q, qe, &g, "feature map entry has the wrong wire type", &why)) > 0) {
			int r2 = parse_entry(ex, g.data, g.len, e);
			if (r2 < 0)
				return r2;
		}
		if (rg < 0)
			goto bad;
	}
	if (rf < 0)
		goto bad;
	return 0;
bad:
	return dp_seterr(e, DP_EDATA, "invalid Example: %s", why);
}

const dp_feature *dp_example_get(const dp_example *ex, const char *name)
{
	size_t n = strlen(name);
	if (ex->n > DEDUP_LINEAR && ex->ht) { /* the index is current after a parse */
		size_t j = name_hash(name, n) & (ex->htcap - 1);
		for (; ex->ht[j]; j = (j + 1) & (ex->htcap - 1)) {
			const dp_feature *o = &ex->f[ex->ht[j] - 1];
			if (o->name_len == n && memcmp(o->name, name, n) == 0)
				return o;
		}
		return NULL;
	}
	for (size_t i = 0; i < ex->n; i++)
		if (ex->f[i].name_len == n && memcmp(ex->f[i].name, name, n) == 0)
			return &ex->f[i];
	return NULL;
}

void dp_example_free(dp_example *ex)
{
	free(ex->f);
	free(ex->ht);
	ex->f = NULL;
	ex->ht = NULL;
	ex->n = ex->cap = ex->htcap = 0;
}

/* ---- Values ------------------------------------------------------------ */

/* Call fn on each field numbered 1 of each list of the kept kind: walks the
 * entry body's Feature values, then their list fields from seg on. */
typedef void (*value_fn)(const field *f, void *ctx);

static void each_value(const dp_feature *ft, value_fn fn, void *ctx)
{
	const uint8_t *p = ft->body, *end = ft->body + ft->body_len;
	const uint8_t *from = ft->body + ft->seg;
	const char *why;
	field v, l, x;
	if (ft->kind == DP_KIND_NONE)
		return;
	while (rd_field(&p, end, &v, &why) > 0) {
		if (v.num != 2 || v.wt != 2)
			continue;
		const uint8_t *q = v.data, *qe = v.data + v.len;
		while (rd_field(&q, qe, &l, &why) > 0) {
			if (l.start < from || (int)l.num != ft->kind)
				continue;
			const uint8_t *r = l.data, *re = l.data + l.len;
			while (rd_field(&r, re, &x, &why) > 0)
				if (x.num == 1)
					fn(&x, ctx);
		}
	}
}

struct fcopy {
	void *out;
	size_t n, max;
};

static void float_fn(const field *f, void *ctx)
{
	struct fcopy *c = ctx;
	float *out = c->out;
	if (f->wt == 5) {
		if (c->n < c->max) {
			uint32_t bits = (uint32_t)f->v;
			memcpy(&out[c->n], &bits, 4);
		}
		c->n++;
		return;
	}
	size_t k = f->len / 4;
	if (c->n < c->max)
		memcpy(out + c->n, f->data, 4 * (k < c->max - c->n ? k : c->max - c->n));
	c->n += k;
}

static void int64_fn(const field *f, void *ctx)
{
	struct fcopy *c = ctx;
	int64_t *out = c->out;
	if (f->wt == 0) {
		if (c->n < c->max)
			out[c->n] = (int64_t)f->v;
		c->n++;
		return;
	}
	const uint8_t *q = f->data, *qe = f->data + f->len;
	uint64_t v;
	while (q < qe && rd_varint(&q, qe, &v) == 0) {
		if (c->n < c->max)
			out[c->n] = (int64_t)v;
		c->n++;
	}
}

/* The values of f, a list of kind, copied by fn into out (at most max of
 * them); how many f holds (0 when of another kind). */
static size_t copy_values(const dp_feature *f, int kind, value_fn fn, void *out, size_t max)
{
	struct fcopy c = {out, 0, max};
	if (f->kind != kind)
		return 0;
	each_value(f, fn, &c);
	return c.n;
}

size_t dp_feature_floats(const dp_feature *f, float *out, size_t max)
{
	return copy_values(f, DP_KIND_FLOAT, float_fn, out, max);
}

size_t dp_feature_int64s(const dp_feature *f, int64_t *out, size_t max)
{
	return copy_values(f, DP_KIND_INT64, int64_fn, out, max);
}

struct beach {
	int (*fn)(const uint8_t *p, size_t len, void *ctx);
	void *ctx;
	int stop;
};

static void bytes_fn(const field *f, void *ctx)
{
	struct beach *b = ctx;
	if (!b->stop)
		b->stop = b->fn(f->data, f->len, b->ctx);
}

int dp_feature_bytes_each(const dp_feature *f, int (*fn)(const uint8_t *p, size_t len, void *ctx),
			  void *ctx)
{
	struct beach b = {fn, ctx, 0};
	if (f->kind != DP_KIND_BYTES)
		return 0;
	each_value(f, bytes_fn, &b);
	return b.stop;
}

struct bfirst {
	const uint8_t *p;
	size_t len;
};

static int first_fn(const uint8_t *p, size_t len, void *ctx)
{
	struct bfirst *b = ctx;
	b->p = p;
	b->len = len;
	return 1;
}

int dp_feature_bytes0(const dp_feature *f, const uint8_t **p, size_t *len)
{
	struct bfirst b = {NULL, 0};
	if (f->kind != DP_KIND_BYTES || f->count == 0)
		return 0;
	dp_feature_bytes_each(f, first_fn, &b);
	*p = b.p;
	*len = b.len;
	return 1;
}

/* ---- Builder ----------------------------------------------------------- */

#define HEAD 11 /* room for the Example's tag and the Features length */

static size_t vsize(uint64_t v)
{
	size_t n = 1;
	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

void dp_exbuild_reset(dp_exbuild *b)
{
	b->n = HEAD;
	b->nfeat = 0;
	b->failed = 0;
}

static uint8_t *reserve(dp_exbuild *b, size_t more)
{
	if (b->failed)
		return NULL;
	if (b->n < HEAD)
		b->n = HEAD;
	if (dp_grow(&b->p, &b->cap, b->n + more, 1) < 0) {
		b->failed = 1;
		return NULL;
	}
	return b->p + b->n;
}

/* Entry header for a Feature of kind k whose list body is llen bytes;
 * returns where the list body goes. */
static uint8_t *entry(dp_exbuild *b, const char *name, size_t nlen, int k, size_t llen)
{
	size_t flen = k ? 1 + vsize(llen) + llen : 0; /* Feature body */
	size_t elen = 1 + vsize(nlen) + nlen + 1 + vsize(flen) + flen;
	uint8_t *p = reserve(b, 1 + vsize(elen) + elen);
	if (!p)
		return NULL;
	*p++ = 0x0a; /* Features.feature = 1 */
	p = put_varint(p, elen);
	*p++ = 0x0a; /* key = 1 */
	p = put_varint(p, nlen);
	memcpy(p, name, nlen);
	p += nlen;
	*p++ = 0x12; /* value = 2 */
	p = put_varint(p, flen);
	if (k) {
		*p++ = (uint8_t)(k << 3 | 2);
		p = put_varint(p, llen);
	}
	b->nfeat++;
	return p;
}

int dp_exbuild_floats(dp_exbuild *b, const char *name, size_t name_len, const float *v, size_t n)
{
	size_t llen = n ? 1 + vsize(4 * n) + 4 * n : 0;
	uint8_t *p = entry(b, name, name_len, DP_KIND_FLOAT, llen);
	if (!p)
		return DP_ENOMEM;
	if (n) {
		*p++ = 0x0a;
		p = put_varint(p, 4 * n);
		memcpy(p, v, 4 * n);
		p += 4 * n;
	}
	b->n = (size_t)(p - b->p);
	return 0;
}

int dp_exbuild_int64s(dp_exbuild *b, const char *name, size_t name_len, const int64_t *v,
		      size_t n)
{
	size_t plen = 0;
	for (size_t i = 0; i < n; i++)
		plen += vsize((uint64_t)v[i]);
	size_t llen = n ? 1 + vsize(plen) + plen : 0;
	uint8_t *p = entry(b, name, name_len, DP_KIND_INT64, llen);
	if (!p)
		return DP_ENOMEM;
	if (n) {
		*p++ = 0x0a;
		p = put_varint(p, plen);
		for (size_t i = 0; i < n; i++)
			p = put_varint(p, (uint64_t)v[i]);
	}
	b->n = (size_t)(p - b->p);
	return 0;
}

int dp_exbuild_bytes(dp_exbuild *b, const char *name, size_t name_len, const uint8_t *const *vals,
		     const size_t *lens, size_t n)
{
	size_t llen = 0;
	for (size_t i = 0; i < n; i++)
		llen += 1 + vsize(lens[i]) + lens[i];
	uint8_t *p = entry(b, name, name_len, DP_KIND_BYTES, llen);
	if (!p)
		return DP_ENOMEM;
	for (size_t i = 0; i < n; i++) {
		*p++ = 0x0a;
		p = put_varint(p, lens[i]);
		memcpy(p, vals[i], lens[i]);
		p += lens[i];
	}
	b->n = (size_t)(p - b->p);
	return 0;
}

int dp_exbuild_none(dp_exbuild *b, const char *name, size_t name_len)
{
	uint8_t *p = entry(b, name, name_len, DP_KIND_NONE, 0);
	if (!p)
		return DP_ENOMEM;
	b->n = (size_t)(p - b->p);
	return 0;
}

int dp_exbuild_finish(dp_exbuild *b, const uint8_t **out, size_t *len)
{
	if (!reserve(b, 0))
		return DP_ENOMEM;
	size_t body = b->n - HEAD;
	size_t h = 1 + vsize(body);
	uint8_t *p = b->p + HEAD - h;
	p[0] = 0x0a; /* Example.features = 1 */
	put_varint(p + 1, body);
	*out = p;
	*len = body + h;
	return 0;
}

void dp_exbuild_free(dp_exbuild *b)
{
	free(b->p);
	b->p = NULL;
	b->n = b->cap = 0;
}
