/*
 * pickle.c - the restricted unpickler of PyTorch's files (pth_impl.h).
 *
 * A pickle is a program for a small stack machine; a hostile one asks it
 * to import os.system and call it.  This machine knows only the opcodes a
 * state_dict needs (those of torch's own weights_only unpickler, plus the
 * framing and short forms of protocols 4 and 5) and, as "callables", a
 * table of names whose effect is written here: an OrderedDict, a tensor
 * over a storage, a Parameter that is its tensor.  Everything else is
 * refused with the opcode or the name and the byte where it stands, before
 * anything is made of the file; nothing from it is ever run.
 *
 * Limits: 2^20 values (about 10 a tensor), a memo of 2^20 entries,
 * integers of 64 bits, tensors of 8 dimensions whose extent lies inside
 * their storage.  Values may form cycles (a dict holding itself through
 * the memo): nothing here walks them recursively.
 */
#define _GNU_SOURCE
#include "pth_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_VALUES (1u << 20)
#define MAX_MEMO (1u << 20)

/* The callables and types a state_dict's pickle names. */
enum {
	PKG_ODICT = 1,
	PKG_REBUILD,       /* torch._utils._rebuild_tensor (torch before 1.0) */
	PKG_REBUILD_V2,    /* torch._utils._rebuild_tensor_v2 */
	PKG_PARAM_FN,      /* torch._utils._rebuild_parameter */
	PKG_PARAM_STATE,   /* torch._utils._rebuild_parameter_with_state */
	PKG_FROM_TYPE,     /* torch._tensor._rebuild_from_type_v2 */
	PKG_PARAMETER,     /* torch.nn.parameter.Parameter */
	PKG_TENSOR,        /* torch.Tensor */
	PKG_SIZE,          /* torch.Size */
	PKG_STORAGE = 100  /* + DP_DT_*: torch.FloatStorage... */
};

static const struct {
	const char *mod, *name;
	int g;
} globals[] = {
	{"collections", "OrderedDict", PKG_ODICT},
	{"torch._utils", "_rebuild_tensor", PKG_REBUILD},
	{"torch._utils", "_rebuild_tensor_v2", PKG_REBUILD_V2},
	{"torch._utils", "_rebuild_parameter", PKG_PARAM_FN},
	{"torch._utils", "_rebuild_parameter_with_state", PKG_PARAM_STATE},
	{"torch._tensor", "_rebuild_from_type_v2", PKG_FROM_TYPE},
	{"torch.nn.parameter", "Parameter", PKG_PARAMETER},
	{"torch", "Tensor", PKG_TENSOR},
	{"torch", "Size", PKG_SIZE},
	{"torch", "FloatStorage", PKG_STORAGE + DP_DT_F32},
	{"torch", "DoubleStorage", PKG_STORAGE + DP_DT_F64},
	{"torch", "HalfStorage", PKG_STORAGE + DP_DT_F16},
	{"torch", "BFloat16Storage", PKG_STORAGE + DP_DT_BF16},
	{"torch", "LongStorage", PKG_STORAGE + DP_DT_I64},
	{"torch", "IntStorage", PKG_STORAGE + DP_DT_I32},
	{"torch", "ShortStorage", PKG_STORAGE + DP_DT_I16},
	{"torch", "CharStorage", PKG_STORAGE + DP_DT_I8},
	{"torch", "ByteStorage", PKG_STORAGE + DP_DT_U8},
	{"torch", "BoolStorage", PKG_STORAGE + DP_DT_BOOL},
};

/* The opcodes refused, named in messages (pickletools' names). */
static const struct {
	uint8_t op;
	const char *name;
} refused[] = {
	{'i', "INST"}, {'o', "OBJ"}, {0x92, "NEWOBJ_EX"}, {'P', "PERSID"}, {'I', "INT"},
	{'L', "LONG"}, {'F', "FLOAT"}, {'S', "STRING"}, {'V', "UNICODE"}, {'p', "PUT"},
	{'g', "GET"}, {0x8f, "EMPTY_SET"}, {0x90, "ADDITEMS"}, {0x91, "FROZENSET"},
	{0x82, "EXT1"}, {0x83, "EXT2"}, {0x84, "EXT4"}, {0x96, "BYTEARRAY8"},
	{0x97, "NEXT_BUFFER"}, {0x98, "READONLY_BUFFER"}, {'0', "POP"}, {'1', "POP_MARK"},
	{'2', "DUP"}, {'l', "LIST"}, {'d', "DICT"},
};

typedef struct ctx {
	const uint8_t *p;
	size_t len, pos, op_at; /* op_at: where the opcode being run starts */
	const char *name;
	dp_err *e;
	pk_val *all;
	size_t nvals;
	pk_val **stack;
	size_t sp, scap;
	size_t *marks;
	size_t nmarks, mcap;
	pk_val **memo;
	size_t memocap, nmemo; /* nmemo: entries set (MEMOIZE's next index) */
	pk_val **stores;       /* storages by key: open addressing, stcap a power of 2 */
	size_t nstores, stcap;
} ctx;

static int fail(ctx *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(ctx *c, int code, const char *fmt, ...)
{
	char why[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	return dp_seterr(c->e, code, "%s: byte %zu: %s", c->name, c->op_at, why);
}

static pk_val *mk(ctx *c, int kind)
{
	if (c->nvals >= MAX_VALUES) {
		fail(c, DP_ELIMIT, "more than %u values", MAX_VALUES);
		return NULL;
	}
	pk_val *v = calloc(1, sizeof *v);
	if (!v) {
		fail(c, DP_ENOMEM, "out of memory");
		return NULL;
	}
	v->kind = kind;
	v->next = c->all;
	c->all = v;
	c->nvals++;
	return v;
}

void pk_free(pk_result *r)
{
	for (pk_val *v = r->all, *n; v; v = n) {
		n = v->next;
		free(v->s);
		free(v->v);
		free(v);
	}
	r->all = r->top = NULL;
}

const char *pk_str(const pk_val *v) { return v && v->kind == PK_STR ? v->s : NULL; }

static const char *kind_name(const pk_val *v)
{
	static const char *const names[] = {"?", "None", "bool", "int", "float", "str", "bytes",
					    "tuple", "list", "dict", "a callable", "a storage",
					    "a tensor"};
	return v && v->kind >= PK_NONE && v->kind <= PK_TENSOR ? names[v->kind] : "?";
}

/* ---- the stack, marks and memo ---------------------------------------------- */

/* Room for need items of size bytes in the array *(void **)v of *cap
 * items (dp_grow), the new ones zeroed; DP_ENOMEM (said) when there is no
 * memory for it. */
static int room(ctx *c, void *v, size_t *cap, size_t need, size_t size)
{
	size_t old = *cap;
	if (dp_grow(v, cap, need, size) < 0)
		return fail(c, DP_ENOMEM, "out of memory");
	memset(*(char **)v + old * size, 0, (*cap - old) * size);
	return 0;
}

static int push(ctx *c, pk_val *v)
{
	if (!v)
		return c->e ? c->e->code : DP_ENOMEM;
	if (room(c, &c->stack, &c->scap, c->sp + 1, sizeof *c->stack) < 0)
		return DP_ENOMEM;
	c->stack[c->sp++] = v;
	return 0;
}

/* The top of the stack (above the last mark), or NULL after saying why. */
static pk_val *top(ctx *c)
{
	size_t floor = c->nmarks ? c->marks[c->nmarks - 1] : 0;
	if (c->sp <= floor) {
		fail(c, DP_EDATA, "stack empty");
		return NULL;
	}
	return c->stack[c->sp - 1];
}

static pk_val *pop(ctx *c)
{
	pk_val *v = top(c);
	if (v)
		c->sp--;
	return v;
}

/* The values since the last mark: *n of them at *items (in the stack's
 * memory, valid until the next push); the mark is removed. */
static int pop_mark(ctx *c, pk_val ***items, size_t *n)
{
	if (!c->nmarks)
		return fail(c, DP_EDATA, "no mark to pop to");
	size_t m = c->marks[--c->nmarks];
	*items = c->stack ? c->stack + m : NULL; /* (none pushed yet: m is 0) */
	*n = c->sp - m;
	c->sp = m;
	return 0;
}

static int memo_put(ctx *c, uint64_t i)
{
	pk_val *v = top(c);
	if (!v)
		return c->e->code;
	if (i >= MAX_MEMO)
		return fail(c, DP_ELIMIT, "memo index %" PRIu64 " (at most %u)", i, MAX_MEMO - 1);
	if (room(c, &c->memo, &c->memocap, (size_t)i + 1, sizeof *c->memo) < 0)
		return DP_ENOMEM;
	c->nmemo += !c->memo[i];
	c->memo[i] = v;
	return 0;
}

static int memo_get(ctx *c, uint64_t i)
{
	if (i >= c->memocap || !c->memo[i])
		return fail(c, DP_EDATA, "memo entry %" PRIu64 " was never set", i);
	return push(c, c->memo[i]);
}

/* ---- reading the opcodes' arguments ----------------------------------------- */

static int need(ctx *c, size_t n)
{
	if (n > c->len - c->pos)
		return fail(c, DP_EDATA, "truncated (%zu bytes wanted, %zu left)", n, c->len - c->pos);
	return 0;
}

static uint64_t le(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static int read_le(ctx *c, int n, uint64_t *v)
{
	if (need(c, (size_t)n) < 0)
		return c->e->code;
	*v = le(c->p + c->pos, n);
	c->pos += (size_t)n;
	return 0;
}

static pk_val *mk_int(ctx *c, int64_t i)
{
	pk_val *v = mk(c, PK_INT);
	if (v)
		v->i = i;
	return v;
}

/* A string or bytes value of the next n bytes. */
static int push_bytes(ctx *c, int kind, uint64_t n)
{
	if (n > c->len - c->pos)
		return fail(c, DP_EDATA, "a string of %" PRIu64 " bytes past the end", n);
	pk_val *v = mk(c, kind);
	if (!v)
		return c->e->code;
	if (!(v->s = malloc((size_t)n + 1)))
		return fail(c, DP_ENOMEM, "out of memory");
	memcpy(v->s, c->p + c->pos, (size_t)n);
	v->s[n] = 0;
	v->len = (size_t)n;
	c->pos += (size_t)n;
	return push(c, v);
}

/* LONG1 / LONG4: n bytes, little-endian two's complement, at most 8. */
static int push_long(ctx *c, uint64_t n)
{
	if (n > 8)
		return fail(c, DP_EDATA, "an integer of %" PRIu64 " bytes (at most 8)", n);
	if (need(c, (size_t)n) < 0)
		return c->e->code;
	uint64_t u = le(c->p + c->pos, (int)n);
	if (n && n < 8 && (c->p[c->pos + n - 1] & 0x80))
		u |= ~0ull << (8 * n); /* sign-extend */
	c->pos += (size_t)n;
	return push(c, mk_int(c, (int64_t)u));
}

/* ---- containers ------------------------------------------------------------ */

static int add_item(ctx *c, pk_val *to, pk_val *x)
{
	if (room(c, &to->v, &to->cap, to->n + 1, sizeof *to->v) < 0)
		return DP_ENOMEM;
	to->v[to->n++] = x;
	return 0;
}

static pk_val *mk_tuple(ctx *c, pk_val **items, size_t n)
{
	pk_val *t = mk(c, PK_TUPLE);
	for (size_t i = 0; t && i < n; i++)
		if (add_item(c, t, items[i]) < 0)
			return NULL;
	return t;
}

static int same_key(const pk_val *a, const pk_val *b)
{
	if (a->kind != b->kind)
		return 0;
	if (a->kind == PK_STR || a->kind == PK_BYTES)
		return a->len == b->len && !memcmp(a->s, b->s, a->len);
	if (a->kind == PK_INT || a->kind == PK_BOOL)
		return a->i == b->i;
	return a == b;
}

/* d[k] = v, as Python's dict: a key already there keeps its place.  d's
 * v holds key, value pairs (d->n pairs, 2 d->n slots). */
static int dict_set(ctx *c, pk_val *d, pk_val *k, pk_val *v)
{
	if (d->kind != PK_DICT)
		return fail(c, DP_EDATA, "setting an item of %s, not a dict", kind_name(d));
	if (k->kind != PK_STR && k->kind != PK_INT && k->kind != PK_BYTES && k->kind != PK_BOOL &&
	    k->kind != PK_NONE)
		return fail(c, DP_EDATA, "a dict key that is %s", kind_name(k));
	for (size_t i = 0; i < d->n; i++)
		if (same_key(d->v[2 * i], k)) {
			d->v[2 * i + 1] = v;
			return 0;
		}
	if (room(c, &d->v, &d->cap, 2 * d->n + 2, sizeof *d->v) < 0)
		return DP_ENOMEM;
	d->v[2 * d->n] = k;
	d->v[2 * d->n + 1] = v;
	d->n++;
	return 0;
}

/* ---- the callables ---------------------------------------------------------- */

static uint64_t hash_key(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ull;
	return h;
}

/* The storage of key (NULL: none yet), and where it goes in the table. */
static pk_val **store_slot(ctx *c, const char *key)
{
	size_t i = hash_key(key) & (c->stcap - 1);
	while (c->stores[i] && strcmp(c->stores[i]->s, key))
		i = (i + 1) & (c->stcap - 1);
	return &c->stores[i];
}

static int store_room(ctx *c)
{
	if (2 * (c->nstores + 1) <= c->stcap)
		return 0;
	size_t nc = c->stcap ? 2 * c->stcap : 64;
	pk_val **old = c->stores;
	size_t oc = c->stcap;
	if (!(c->stores = calloc(nc, sizeof *c->stores))) {
		c->stores = old;
		return fail(c, DP_ENOMEM, "out of memory");
	}
	c->stcap = nc;
	for (size_t i = 0; i < oc; i++)
		if (old[i])
			*store_slot(c, old[i]->s) = old[i];
	free(old);
	return 0;
}

static int as_count(const pk_val *v, uint64_t *out)
{
	if (!v || v->kind != PK_INT || v->i < 0)
		return -1;
	*out = (uint64_t)v->i;
	return 0;
}

/* The storage a key names, made at its first mention: later mentions must
 * agree on its type and size. */
static pk_val *storage_of(ctx *c, const char *key, int dtype, uint64_t numel)
{
	if (store_room(c) < 0)
		return NULL;
	pk_val **slot = store_slot(c, key);
	if (*slot) {
		if ((*slot)->dtype != dtype || (*slot)->numel != numel) {
			fail(c, DP_EDATA, "storage '%s' given twice, as %s of %" PRIu64 " and %s of %" PRIu64,
			     key, dp_dtype_name((*slot)->dtype), (*slot)->numel, dp_dtype_name(dtype),
			     numel);
			return NULL;
		}
		return *slot;
	}
	pk_val *s = mk(c, PK_STORAGE);
	if (!s || !(s->s = strdup(key))) {
		if (s)
			fail(c, DP_ENOMEM, "out of memory");
		return NULL;
	}
	s->len = strlen(key);
	s->dtype = dtype;
	s->numel = numel;
	*slot = s;
	c->nstores++;
	return s;
}

/* BINPERSID: ('storage', type, key, location, numel) of the zip format,
 * or the legacy format's ('storage', type, root_key, location, numel,
 * view_metadata), view_metadata None or (view_key, offset, size). */
static int persistent(ctx *c)
{
	pk_val *pid = pop(c);
	if (!pid)
		return c->e->code;
	const char *tag = pid->kind == PK_TUPLE && pid->n ? pk_str(pid->v[0]) : NULL;
	if (!tag && pid->kind == PK_TUPLE && pid->n && pid->v[0]->kind == PK_BYTES)
		tag = pid->v[0]->s; /* Python 2's str */
	if (!tag || strcmp(tag, "storage"))
		return fail(c, DP_EDATA, "a persistent id that is not a storage's");
	uint64_t numel;
	if (pid->n != 5 && pid->n != 6)
		return fail(c, DP_EDATA, "a storage's id of %zu items (want 5 or 6)", pid->n);
	pk_val *type = pid->v[1];
	const char *key = pk_str(pid->v[2]);
	if (type->kind != PK_GLOBAL || type->i < PKG_STORAGE || !key || !pk_str(pid->v[3]) ||
	    as_count(pid->v[4], &numel) < 0)
		return fail(c, DP_EDATA, "a storage's id of the wrong form");
	if (numel > (1ull << 62) / 8)
		return fail(c, DP_EDATA, "a storage of %" PRIu64 " elements", numel);
	pk_val *s = storage_of(c, key, (int)(type->i - PKG_STORAGE), numel);
	if (!s)
		return c->e->code;
	if (pid->n == 6 && pid->v[5]->kind != PK_NONE) { /* a view of storage s */
		pk_val *vm = pid->v[5];
		uint64_t off, size;
		const char *vkey = vm->kind == PK_TUPLE && vm->n == 3 ? pk_str(vm->v[0]) : NULL;
		if (!vkey || as_count(vm->v[1], &off) < 0 || as_count(vm->v[2], &size) < 0)
			return fail(c, DP_EDATA, "a storage view of the wrong form");
		if (off > numel || size > numel - off)
			return fail(c, DP_EDATA, "a view of %" PRIu64 " elements at %" PRIu64
				    " of a storage of %" PRIu64, size, off, numel);
		pk_val *v = storage_of(c, vkey, s->dtype, size);
		if (!v)
			return c->e->code;
		if (v == s)
			return fail(c, DP_EDATA, "storage '%s' is a view of itself", vkey);
		if (!v->root) {
			v->root = s;
			v->view_off = off;
		}
		s = v;
	}
	return push(c, s);
}

static int as_dims(const pk_val *v, int64_t *d, int *n)
{
	if (!v || (v->kind != PK_TUPLE && v->kind != PK_LIST) || v->n > DP_ST_MAXDIM)
		return -1;
	for (size_t i = 0; i < v->n; i++) {
		if (v->v[i]->kind != PK_INT || v->v[i]->i < 0)
			return -1;
		d[i] = v->v[i]->i;
	}
	*n = (int)v->n;
	return 0;
}

/* A tensor over storage st: offset, shape and strides in elements, the
 * extent inside the storage. */
static pk_val *tensor(ctx *c, pk_val **a)
{
	pk_val *t = mk(c, PK_TENSOR);
	int ns = 0, nd = 0;
	uint64_t off;
	if (!t)
		return NULL;
	if (a[0]->kind != PK_STORAGE || as_count(a[1], &off) < 0 || as_dims(a[2], t->shape, &nd) < 0 ||
	    as_dims(a[3], t->stride, &ns) < 0 || nd != ns) {
		fail(c, DP_EDATA, "a tensor of the wrong form (want storage, offset, size, stride)");
		return NULL;
	}
	t->storage = a[0];
	t->offset = off;
	t->ndim = nd;
	unsigned __int128 count = 1, last = off;
	for (int i = 0; i < nd; i++) {
		count *= (uint64_t)t->shape[i];
		if (t->shape[i])
			last += (unsigned __int128)(uint64_t)(t->shape[i] - 1) * (uint64_t)t->stride[i];
		if (count > (1ull << 62) || last > (1ull << 62)) {
			fail(c, DP_EDATA, "a tensor too large");
			return NULL;
		}
	}
	if (count && last >= a[0]->numel) {
		fail(c, DP_EDATA, "a tensor past the end of its storage '%s' (element %" PRIu64
		     " of %" PRIu64 ")", a[0]->s, (uint64_t)last, a[0]->numel);
		return NULL;
	}
	return t;
}

/* An object's state (BUILD, _rebuild_parameter_with_state, a subclass's
 * __dict__): only none at all, as a plain tensor has. */
static int no_state(const pk_val *s)
{
	return s->kind == PK_NONE || ((s->kind == PK_DICT || s->kind == PK_TUPLE) && s->n == 0) ||
	       (s->kind == PK_TUPLE && s->n == 2 && s->v[0]->kind == PK_NONE &&
		s->v[1]->kind == PK_DICT && s->v[1]->n == 0);
}

/* REDUCE: func(*args), for the callables of globals[]. */
static pk_val *call(ctx *c, pk_val *f, pk_val *args)
{
	pk_val **a = args->v;
	size_t n = args->n;
	switch (f->kind == PK_GLOBAL ? f->i : 0) {
	case PKG_ODICT: {
		pk_val *d = mk(c, PK_DICT);
		if (!d || n == 0)
			return d;
		if (n == 1 && a[0]->kind == PK_LIST) {
			for (size_t i = 0; i < a[0]->n; i++) {
				pk_val *kv = a[0]->v[i];
				if (kv->kind != PK_TUPLE || kv->n != 2) {
					fail(c, DP_EDATA, "OrderedDict of items that are not pairs");
					return NULL;
				}
				if (dict_set(c, d, kv->v[0], kv->v[1]) < 0)
					return NULL;
			}
			return d;
		}
		break;
	}
	case PKG_SIZE:
		if (n == 1 && (a[0]->kind == PK_TUPLE || a[0]->kind == PK_LIST))
			return mk_tuple(c, a[0]->v, a[0]->n);
		break;
	case PKG_REBUILD:
		if (n == 4)
			return tensor(c, a);
		break;
	case PKG_REBUILD_V2: /* (storage, offset, size, stride, requires_grad, hooks[, metadata]) */
		if ((n == 6 || n == 7) && a[4]->kind == PK_BOOL && a[5]->kind == PK_DICT)
			return tensor(c, a);
		break;
	case PKG_PARAM_FN: /* (tensor, requires_grad, hooks) */
		if (n == 3 && a[0]->kind == PK_TENSOR)
			return a[0];
		break;
	case PKG_PARAM_STATE:
		if (n == 4 && a[0]->kind == PK_TENSOR && no_state(a[3]))
			return a[0];
		break;
	case PKG_FROM_TYPE: /* (func, type, args, state) */
		if (n == 4 && a[0]->kind == PK_GLOBAL &&
		    (a[0]->i == PKG_REBUILD_V2 || a[0]->i == PKG_REBUILD) && a[1]->kind == PK_GLOBAL &&
		    (a[1]->i == PKG_TENSOR || a[1]->i == PKG_PARAMETER) && a[2]->kind == PK_TUPLE &&
		    no_state(a[3]))
			return call(c, a[0], a[2]);
		break;
	}
	const char *what = "?";
	for (size_t i = 0; i < sizeof globals / sizeof globals[0]; i++)
		if (f->kind == PK_GLOBAL && globals[i].g == f->i)
			what = globals[i].name;
	fail(c, DP_EDATA, "%s%s called with arguments it does not take", f->kind == PK_GLOBAL ? "" : "not a callable: ",
	     f->kind == PK_GLOBAL ? what : kind_name(f));
	return NULL;
}

static int global(ctx *c, const char *mod, size_t mlen, const char *name, size_t nlen)
{
	for (size_t i = 0; i < sizeof globals / sizeof globals[0]; i++)
		if (strlen(globals[i].mod) == mlen && !memcmp(globals[i].mod, mod, mlen) &&
		    strlen(globals[i].name) == nlen && !memcmp(globals[i].name, name, nlen)) {
			pk_val *g = mk(c, PK_GLOBAL);
			if (g)
				g->i = globals[i].g;
			return push(c, g);
		}
	char *m = dp_shown(mod, mlen), *n = dp_shown(name, nlen);
	int rc = fail(c, DP_EDATA,
		      "%s.%s is not allowed (only what a state_dict holds, as "
		      "torch.load(weights_only=True))",
		      m ? m : "?", n ? n : "?");
	free(m);
	free(n);
	return rc;
}

/* GLOBAL's argument: "module\nname\n". */
static int global_text(ctx *c)
{
	const uint8_t *p = c->p + c->pos, *end = c->p + c->len;
	const uint8_t *nl1 = memchr(p, '\n', (size_t)(end - p));
	const uint8_t *nl2 = nl1 ? memchr(nl1 + 1, '\n', (size_t)(end - nl1 - 1)) : NULL;
	if (!nl2 || nl2 - p > 512)
		return fail(c, DP_EDATA, "GLOBAL without two lines of a module and a name");
	c->pos = (size_t)(nl2 + 1 - c->p);
	return global(c, (const char *)p, (size_t)(nl1 - p), (const char *)nl1 + 1,
		      (size_t)(nl2 - nl1 - 1));
}

/* ---- the machine ------------------------------------------------------------ */

/* The opcodes that push a value: numbers, strings, bytes, None, booleans,
 * empty containers.  1 when op is not one of them. */
static int op_value(ctx *c, int op)
{
	uint64_t u = 0;
	pk_val *v;
	switch (op) {
	case ')': return push(c, mk(c, PK_TUPLE));
	case ']': return push(c, mk(c, PK_LIST));
	case '}': return push(c, mk(c, PK_DICT));
	case 'N': return push(c, mk(c, PK_NONE));
	case 0x88: /* NEWTRUE */
	case 0x89: /* NEWFALSE */
		if ((v = mk(c, PK_BOOL)))
			v->i = op == 0x88;
		return push(c, v);
	case 'J': /* BININT */
		if (read_le(c, 4, &u) < 0)
			return c->e->code;
		return push(c, mk_int(c, (int32_t)(uint32_t)u));
	case 'K': /* BININT1 */
	case 'M': /* BININT2 */
		if (read_le(c, op == 'K' ? 1 : 2, &u) < 0)
			return c->e->code;
		return push(c, mk_int(c, (int64_t)u));
	case 0x8a: /* LONG1 */
	case 0x8b: /* LONG4 */
		if (read_le(c, op == 0x8a ? 1 : 4, &u) < 0)
			return c->e->code;
		return push_long(c, u);
	case 'G': /* BINFLOAT: big-endian */
		if (need(c, 8) < 0)
			return c->e->code;
		u = 0;
		for (int i = 0; i < 8; i++)
			u = u << 8 | c->p[c->pos + (size_t)i];
		c->pos += 8;
		if ((v = mk(c, PK_FLOAT)))
			memcpy(&v->f, &u, 8);
		return push(c, v);
	case 'X': /* BINUNICODE */
	case 0x8c: /* SHORT_BINUNICODE */
	case 0x8d: /* BINUNICODE8 */
		if (read_le(c, op == 'X' ? 4 : op == 0x8c ? 1 : 8, &u) < 0)
			return c->e->code;
		return push_bytes(c, PK_STR, u);
	case 'U': /* SHORT_BINSTRING (Python 2's str) */
	case 'T': /* BINSTRING */
		if (read_le(c, op == 'U' ? 1 : 4, &u) < 0)
			return c->e->code;
		return push_bytes(c, PK_STR, u);
	case 'C': /* SHORT_BINBYTES */
	case 'B': /* BINBYTES */
	case 0x8e: /* BINBYTES8 */
		if (read_le(c, op == 'C' ? 1 : op == 'B' ? 4 : 8, &u) < 0)
			return c->e->code;
		return push_bytes(c, PK_BYTES, u);
	}
	return 1;
}

/* The opcodes that fill containers: marks, tuples, lists, dicts.  1 when op is not one of them. */
static int op_container(ctx *c, int op)
{
	pk_val *a, *b, *v, **items = NULL;
	size_t n = 0;
	switch (op) {
	case '(': /* MARK */
		if (room(c, &c->marks, &c->mcap, c->nmarks + 1, sizeof *c->marks) < 0)
			return DP_ENOMEM;
		c->marks[c->nmarks++] = c->sp;
		return 0;
	case 't': /* TUPLE */
		if (pop_mark(c, &items, &n) < 0)
			return c->e->code;
		return push(c, mk_tuple(c, items, n));
	case 0x85: /* TUPLE1 */
	case 0x86: /* TUPLE2 */
	case 0x87: /* TUPLE3 */
		n = (size_t)(op - 0x84);
		{
			size_t floor = c->nmarks ? c->marks[c->nmarks - 1] : 0;
			if (c->sp - floor < n)
				return fail(c, DP_EDATA, "TUPLE%zu on a stack of %zu", n, c->sp - floor);
			c->sp -= n;
			return push(c, mk_tuple(c, c->stack + c->sp, n));
		}
	case 'a': /* APPEND */
		if (!(v = pop(c)) || !(a = top(c)))
			return c->e->code;
		if (a->kind != PK_LIST)
			return fail(c, DP_EDATA, "APPEND to %s, not a list", kind_name(a));
		return add_item(c, a, v);
	case 'e': /* APPENDS */
		if (pop_mark(c, &items, &n) < 0 || !(a = top(c)))
			return c->e->code;
		if (a->kind != PK_LIST)
			return fail(c, DP_EDATA, "APPENDS to %s, not a list", kind_name(a));
		for (size_t i = 0; i < n; i++)
			if (add_item(c, a, items[i]) < 0)
				return c->e->code;
		return 0;
	case 's': /* SETITEM */
		if (!(v = pop(c)) || !(b = pop(c)) || !(a = top(c)))
			return c->e->code;
		return dict_set(c, a, b, v);
	case 'u': /* SETITEMS */
		if (pop_mark(c, &items, &n) < 0 || !(a = top(c)))
			return c->e->code;
		if (n % 2)
			return fail(c, DP_EDATA, "SETITEMS of an odd number of values");
		for (size_t i = 0; i < n; i += 2)
			if (dict_set(c, a, items[i], items[i + 1]) < 0)
				return c->e->code;
		return 0;
	}
	return 1;
}

/* The opcodes of objects: globals, calls (REDUCE, NEWOBJ), BUILD,
 * persistent ids (the tensors' storages).  1 when op is not one of them. */
static int op_object(ctx *c, int op)
{
	pk_val *a, *b, *v;
	switch (op) {
	case 'c': /* GLOBAL */
		return global_text(c);
	case 0x93: /* STACK_GLOBAL */
		if (!(b = pop(c)) || !(a = pop(c)))
			return c->e->code;
		if (a->kind != PK_STR || b->kind != PK_STR)
			return fail(c, DP_EDATA, "STACK_GLOBAL of %s and %s", kind_name(a), kind_name(b));
		return global(c, a->s, a->len, b->s, b->len);
	case 'R': /* REDUCE */
		if (!(b = pop(c)) || !(a = pop(c)))
			return c->e->code;
		if (b->kind != PK_TUPLE)
			return fail(c, DP_EDATA, "REDUCE with arguments that are %s", kind_name(b));
		if (!(v = call(c, a, b)))
			return c->e->code;
		return push(c, v);
	case 0x81: /* NEWOBJ: cls.__new__(cls, *args); only Parameter(tensor[, requires_grad]) */
		if (!(b = pop(c)) || !(a = pop(c)))
			return c->e->code;
		if (a->kind != PK_GLOBAL || a->i != PKG_PARAMETER || b->kind != PK_TUPLE || !b->n ||
		    b->n > 2 || b->v[0]->kind != PK_TENSOR)
			return fail(c, DP_EDATA, "NEWOBJ of anything but a Parameter of a tensor");
		return push(c, b->v[0]);
	case 'b': /* BUILD: an OrderedDict's __dict__ (state_dict's _metadata) is
		   * of no use here; a tensor may have no state */
		if (!(b = pop(c)) || !(a = top(c)))
			return c->e->code;
		if (a->kind == PK_DICT || (a->kind == PK_TENSOR && no_state(b)))
			return 0;
		return fail(c, DP_EDATA, "BUILD of %s", kind_name(a));
	case 'Q': /* BINPERSID */
		return persistent(c);
	}
	return 1;
}

/* One opcode: the stream's framing (PROTO, FRAME, STOP) and the memo
 * here, the rest by family; refused and unknown ones fail. */
static int step(ctx *c, int op, int *stop)
{
	uint64_t u = 0;
	pk_val *v;
	switch (op) {
	case 0x80: /* PROTO */
		if (read_le(c, 1, &u) < 0)
			return c->e->code;
		if (u > 5)
			return fail(c, DP_EDATA, "pickle protocol %" PRIu64 " (at most 5)", u);
		return 0;
	case 0x95: /* FRAME: a length, for readers that buffer */
		return read_le(c, 8, &u);
	case '.': /* STOP */
		if (!(v = pop(c)))
			return c->e->code;
		*stop = 1;
		return push(c, v);
	case 'q': /* BINPUT */
	case 'r': /* LONG_BINPUT */
		if (read_le(c, op == 'q' ? 1 : 4, &u) < 0)
			return c->e->code;
		return memo_put(c, u);
	case 0x94: /* MEMOIZE */
		return memo_put(c, c->nmemo);
	case 'h': /* BINGET */
	case 'j': /* LONG_BINGET */
		if (read_le(c, op == 'h' ? 1 : 4, &u) < 0)
			return c->e->code;
		return memo_get(c, u);
	}
	int rc = op_value(c, op);
	if (rc == 1)
		rc = op_container(c, op);
	if (rc == 1)
		rc = op_object(c, op);
	if (rc != 1)
		return rc;
	for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
		if (refused[i].op == op)
			return fail(c, DP_EDATA, "opcode %s is not allowed in a state_dict", refused[i].name);
	return fail(c, DP_EDATA, "unknown opcode 0x%02x", op);
}

int pk_load(const uint8_t *p, size_t len, const char *name, pk_result *r, dp_err *e)
{
	ctx c = {.p = p, .len = len, .name = name, .e = e};
	dp_err local;
	if (!e)
		c.e = &local;
	memset(r, 0, sizeof *r);
	int rc = 0, stop = 0;
	while (!stop) {
		c.op_at = c.pos;
		if (c.pos >= c.len) {
			rc = fail(&c, DP_EDATA, "the pickle ends before its STOP");
			break;
		}
		if ((rc = step(&c, c.p[c.pos++], &stop)) < 0)
			break;
	}
	if (rc == 0) {
		r->top = c.stack[c.sp - 1];
		r->used = c.pos;
	}
	r->all = c.all;
	free(c.stack);
	free(c.marks);
	free(c.memo);
	free(c.stores);
	if (rc < 0)
		pk_free(r);
	return rc;
}
