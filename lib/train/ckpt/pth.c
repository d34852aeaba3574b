/*
 * pth.c - PyTorch's own files (torch.save), read and written (dp_ckpt.h,
 * pth_impl.h).
 *
 * Read: the zip format of torch 1.6 and later (ARCHIVE/data.pkl, the
 * storages as ARCHIVE/data/KEY, ARCHIVE/byteorder since torch 2.1) through
 * libzip, and the legacy format of older torch and torchvision's first hub
 * files (pickles of the magic number, the protocol version and sys_info,
 * the object, the storage keys, then each storage as an int64 count and
 * its bytes); the object is unpickled by pickle.c, which refuses anything
 * a state_dict does not hold.  The state_dict is the top object, or the
 * one dict of tensors inside it ({"state_dict": ..., "epoch": 3}); each
 * tensor is copied out of its storage, contiguous and little-endian.
 *
 * Written: the zip format that torch 1.6 and later load (torch.load, with
 * weights_only=True too): an OrderedDict of _rebuild_tensor_v2 over one
 * storage a tensor, stored uncompressed at 64-byte boundaries as torch
 * writes them.  Limits: no zip64 (4 GiB), 65535 entries.
 *
 * Bounds against hostile files: the pickle is at most 256 MiB, the bytes
 * read out of the archive at most 1100 times the file (deflate's ratio is
 * under 1032), the tensors made at most 8 times the file (tensors sharing
 * or broadcasting a storage), plus 64 MiB.
 */
#define _GNU_SOURCE
#include "pth_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zip.h>
#include <zlib.h>

#define MAX_PICKLE (256u << 20)

static const uint8_t legacy_magic[] = {0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9,
				       0x20, 0x6a, 0xa8, 0x50, 0x19, '.'};

/* Where the legacy magic number's pickle ends (PROTO 2..5, a FRAME from
 * protocol 4, LONG1 of the number, STOP), or 0. */
static size_t legacy_magic_end(const uint8_t *b, size_t len)
{
	size_t at = 2;
	if (len < 2 || b[0] != 0x80 || b[1] < 2 || b[1] > 5)
		return 0;
	if (len > 2 && b[2] == 0x95)
		at += 9;
	if (len < at + sizeof legacy_magic || memcmp(b + at, legacy_magic, sizeof legacy_magic))
		return 0;
	return at + sizeof legacy_magic;
}

enum { PTH_ZIP = 1, PTH_LEGACY, PTH_TAR };

int pth_detect(const uint8_t *b, size_t len)
{
	if (len >= 4 && (!memcmp(b, "PK\3\4", 4) || !memcmp(b, "PK\5\6", 4)))
		return PTH_ZIP;
	if (legacy_magic_end(b, len))
		return PTH_LEGACY;
	if (len >= 262 && !memcmp(b + 257, "ustar", 5))
		return PTH_TAR;
	return 0;
}

/* ---- the state_dict in what was unpickled ------------------------------------ */

static int tensor_dict(const pk_val *d)
{
	if (!d || d->kind != PK_DICT || !d->n)
		return 0;
	for (size_t i = 0; i < d->n; i++)
		if (d->v[2 * i]->kind != PK_STR || d->v[2 * i + 1]->kind != PK_TENSOR)
			return 0;
	return 1;
}

/* "'epoch', 'model', 'optimizer'": the first keys of d, escaped. */
static void key_list(char *buf, size_t len, const pk_val *d)
{
	size_t at = 0;
	buf[0] = 0;
	for (size_t i = 0; i < d->n && i < 6 && at < len; i++) {
		const pk_val *k = d->v[2 * i];
		char *s = k->kind == PK_STR ? dp_shown(k->s, k->len) : NULL;
		at += (size_t)snprintf(buf + at, len - at, "%s'%s'", i ? ", " : "", s ? s : "?");
		free(s);
	}
	if (d->n > 6 && at < len)
		snprintf(buf + at, len - at, ", ... (%zu keys)", d->n);
}

static const pk_val *state_dict(const pk_val *top, const char *name, dp_err *e)
{
	if (tensor_dict(top))
		return top;
	if (!top || top->kind != PK_DICT) {
		static const char *const kinds[] = {"?", "None", "a bool", "an int", "a float",
						    "a str", "bytes", "a tuple", "a list", "a dict",
						    "a callable", "a storage", "a tensor"};
		dp_seterr(e, DP_EDATA, "%s: holds %s, not a state_dict (a dict of tensors by name)",
			  name, kinds[top && top->kind <= PK_TENSOR ? top->kind : 0]);
		return NULL;
	}
	const pk_val *found = NULL;
	int nfound = 0;
	for (size_t i = 0; i < top->n; i++)
		if (top->v[2 * i]->kind == PK_STR && tensor_dict(top->v[2 * i + 1])) {
			found = top->v[2 * i + 1];
			nfound++;
		}
	if (nfound == 1)
		return found;
	char keys[256];
	key_list(keys, sizeof keys, top);
	dp_seterr(e, DP_EDATA,
		  "%s: not a state_dict: a dict of %s%s", name, top->n ? keys : "nothing",
		  nfound ? ", with more than one dict of tensors in it" : " holding no dict of tensors");
	return NULL;
}

/* ---- tensors out of their storages -------------------------------------------- */

/* A storage's bytes, as read from the file. */
typedef struct sbytes {
	const pk_val *st;
	const uint8_t *p;
	uint64_t n; /* bytes */
} sbytes;

/* Copy tensor t (over storage bytes base, of element size es) into dst,
 * contiguous, row-major. */
static void copy_strided(uint8_t *dst, const uint8_t *base, size_t es, const pk_val *t)
{
	int nd = t->ndim;
	uint64_t numel = 1;
	for (int d = 0; d < nd; d++)
		numel *= (uint64_t)t->shape[d];
	if (!numel)
		return;
	if (nd == 0) {
		memcpy(dst, base + t->offset * es, es);
		return;
	}
	uint64_t idx[DP_ST_MAXDIM] = {0};
	uint64_t inner = (uint64_t)t->shape[nd - 1];
	int rows = t->stride[nd - 1] == 1;
	for (uint64_t done = 0; done < numel; done += inner) {
		uint64_t at = t->offset;
		for (int d = 0; d < nd - 1; d++)
			at += idx[d] * (uint64_t)t->stride[d];
		if (rows) {
			memcpy(dst, base + at * es, inner * es);
			dst += inner * es;
		} else {
			for (uint64_t j = 0; j < inner; j++, dst += es)
				memcpy(dst, base + (at + j * (uint64_t)t->stride[nd - 1]) * es, es);
		}
		for (int d = nd - 2; d >= 0; d--) { /* the next row */
			if (++idx[d] < (uint64_t)t->shape[d])
				break;
			idx[d] = 0;
		}
	}
}

static void swap_bytes(uint8_t *p, size_t n, size_t es)
{
	for (size_t i = 0; i + es <= n; i += es)
		for (size_t a = 0, b = es - 1; a < b; a++, b--) {
			uint8_t x = p[i + a];
			p[i + a] = p[i + b];
			p[i + b] = x;
		}
}

static int utf8_ok(const char *s, size_t n)
{
	char *shown = dp_shown(s, n);
	int ok = shown && !strcmp(shown, s) && strlen(s) == n && n > 0;
	free(shown);
	return ok;
}

/* The dp_st of state_dict sd, each tensor's storage bytes found by
 * find(ctx, storage) (NULL after setting e). */
static dp_st *make_st(const pk_val *sd, const char *name, uint64_t file_len, int big_endian,
		      const sbytes *(*find)(void *ctx, const pk_val *st, dp_err *e), void *fctx,
		      dp_err *e)
{
	size_t n = sd->n;
	uint64_t total = 0, cap = 8 * file_len + (64u << 20);
	for (size_t i = 0; i < n; i++) {
		const pk_val *k = sd->v[2 * i], *t = sd->v[2 * i + 1];
		if (!utf8_ok(k->s, k->len)) {
			char *s = dp_shown(k->s, k->len);
			dp_seterr(e, DP_EDATA, "%s: tensor name '%s' is not printable UTF-8", name,
				  s ? s : "?");
			free(s);
			return NULL;
		}
		uint64_t bytes = dp_dtype_size(t->storage->dtype);
		for (int d = 0; d < t->ndim; d++)
			bytes *= (uint64_t)t->shape[d]; /* pickle.c bounds these */
		total += bytes;
		if (total > cap) {
			dp_seterr(e, DP_ELIMIT, "%s: its tensors would take more than %" PRIu64
				  " bytes (8 times the file)", name, cap);
			return NULL;
		}
	}
	uint8_t *buf = malloc(total ? (size_t)total : 1);
	dp_st_tensor *ts = calloc(n, sizeof *ts);
	if (!buf || !ts) {
		free(buf);
		free(ts);
		dp_seterr(e, DP_ENOMEM, "%s: out of memory", name);
		return NULL;
	}
	uint64_t at = 0;
	size_t i;
	for (i = 0; i < n; i++) {
		const pk_val *k = sd->v[2 * i], *t = sd->v[2 * i + 1];
		const pk_val *st = t->storage;
		uint64_t base = 0;
		if (st->root) { /* a view (legacy): of a storage that is none */
			if (st->root->root) {
				dp_seterr(e, DP_EDATA, "%s: storage '%s' is a view of a view", name, st->s);
				break;
			}
			base = st->view_off;
			st = st->root;
		}
		const sbytes *sb = find(fctx, st, e);
		if (!sb)
			break;
		size_t es = dp_dtype_size(st->dtype);
		dp_st_tensor *x = &ts[i];
		x->dtype = st->dtype;
		x->ndim = t->ndim;
		memcpy(x->shape, t->shape, sizeof x->shape);
		x->nbytes = es;
		for (int d = 0; d < t->ndim; d++)
			x->nbytes *= (size_t)t->shape[d];
		if ((base + (uint64_t)t->storage->numel) * es > sb->n) {
			dp_seterr(e, DP_EDATA, "%s: storage '%s' holds %" PRIu64 " bytes, its tensors need %" PRIu64,
				  name, st->s, sb->n, (base + t->storage->numel) * es);
			break;
		}
		copy_strided(buf + at, sb->p + base * es, es, t);
		if (big_endian)
			swap_bytes(buf + at, x->nbytes, es);
		x->data = buf + at;
		at += x->nbytes;
		if (!(x->name = strdup(k->s))) {
			dp_seterr(e, DP_ENOMEM, "%s: out of memory", name);
			break;
		}
	}
	if (i < n) {
		for (size_t j = 0; j < n; j++)
			free((char *)ts[j].name);
		free(ts);
		free(buf);
		return NULL;
	}
	return ckpt_st_adopt(name, "pth", buf, (size_t)total, ts, (int)n, e);
}

/* ---- the zip format ------------------------------------------------------------ */

typedef struct zread {
	zip_t *za;
	const char *name;
	const char *prefix; /* "archive/" */
	uint64_t budget;    /* bytes left to read out of the archive */
	sbytes *s;
	size_t ns, cap;
} zread;

/* The whole of entry ent (at most max bytes): a malloc'd buffer. */
static uint8_t *zip_entry(zread *z, const char *ent, uint64_t max, uint64_t *len, dp_err *e)
{
	zip_stat_t st;
	zip_int64_t idx = zip_name_locate(z->za, ent, ZIP_FL_ENC_RAW);
	if (idx < 0) {
		dp_seterr(e, DP_EDATA, "%s: no %s in the archive", z->name, ent);
		return NULL;
	}
	if (zip_stat_index(z->za, (zip_uint64_t)idx, 0, &st) < 0 || !(st.valid & ZIP_STAT_SIZE)) {
		dp_seterr(e, DP_EDATA, "%s: %s: %s", z->name, ent, zip_strerror(z->za));
		return NULL;
	}
	if (st.size > max || st.size > z->budget) {
		dp_seterr(e, DP_ELIMIT, "%s: %s: %" PRIu64 " bytes, more than it can hold", z->name, ent,
			  (uint64_t)st.size);
		return NULL;
	}
	z->budget -= st.size;
	uint8_t *b = malloc((size_t)st.size + 1); /* + the byte that finds an entry too long */
	zip_file_t *f = b ? zip_fopen_index(z->za, (zip_uint64_t)idx, 0) : NULL;
	if (!f) {
		if (b)
			dp_seterr(e, DP_EDATA, "%s: %s: %s", z->name, ent, zip_strerror(z->za));
		else
			dp_seterr(e, DP_ENOMEM, "%s: out of memory", z->name);
		free(b);
		return NULL;
	}
	uint64_t got = 0;
	for (;;) {
		zip_int64_t r = zip_fread(f, b + got, st.size - got + (got == st.size));
		if (r < 0 || (r == 0 && got < st.size) || got + (uint64_t)r > st.size) {
			dp_seterr(e, DP_EDATA, "%s: %s: %s", z->name, ent,
				  r < 0 ? zip_file_strerror(f) : "its size is not what the archive says");
			zip_fclose(f);
			free(b);
			return NULL;
		}
		got += (uint64_t)r;
		if (r == 0)
			break;
	}
	if (zip_fclose(f) != 0) {
		dp_seterr(e, DP_EDATA, "%s: %s: damaged (CRC)", z->name, ent);
		free(b);
		return NULL;
	}
	*len = got;
	return b;
}

static const sbytes *zip_storage(void *ctx, const pk_val *st, dp_err *e)
{
	zread *z = ctx;
	for (size_t i = 0; i < z->ns; i++)
		if (z->s[i].st == st)
			return &z->s[i];
	if (dp_grow(&z->s, &z->cap, z->ns + 1, sizeof *z->s) < 0) {
		dp_seterr(e, DP_ENOMEM, "%s: out of memory", z->name);
		return NULL;
	}
	char *ent;
	if (asprintf(&ent, "%sdata/%s", z->prefix, st->s) < 0) {
		dp_seterr(e, DP_ENOMEM, "%s: out of memory", z->name);
		return NULL;
	}
	sbytes *s = &z->s[z->ns];
	s->st = st;
	s->p = zip_entry(z, ent, UINT64_MAX, &s->n, e);
	free(ent);
	if (!s->p)
		return NULL;
	z->ns++;
	return s;
}

static dp_st *open_zip(const uint8_t *buf, size_t len, const char *name, dp_err *e)
{
	zip_error_t ze;
	zip_error_init(&ze);
	zread z = {.name = name, .budget = 1100 * (uint64_t)len + (1u << 20)};
	zip_source_t *src = zip_source_buffer_create(buf, len, 0, &ze);
	dp_st *st = NULL;
	pk_result r = {0};
	uint8_t *pkl = NULL, *bo = NULL;
	char *prefix = NULL, *ent = NULL, *where = NULL;
	/* (no ZIP_CHECKCONS: it reads every entry to check its CRC, and
	 * says only "inconsistent"; each entry used is checked as read) */
	if (!src || !(z.za = zip_open_from_source(src, ZIP_RDONLY, &ze))) {
		dp_seterr(e, DP_EDATA, "%s: not a zip archive torch.save could write: %s", name,
			  zip_error_strerror(&ze));
		zip_source_free(src);
		goto out;
	}
	/* the archive's folder: the first entry's, as torch finds it */
	const char *first = zip_get_num_entries(z.za, 0) > 0 ? zip_get_name(z.za, 0, ZIP_FL_ENC_RAW) : NULL;
	const char *slash = first ? strchr(first, '/') : NULL;
	if (!slash) {
		dp_seterr(e, DP_EDATA, "%s: a zip archive, but not of torch.save (no folder of records)",
			  name);
		goto out;
	}
	if (!(prefix = strndup(first, (size_t)(slash - first + 1))) ||
	    asprintf(&ent, "%sdata.pkl", prefix) < 0 || asprintf(&where, "%s: data.pkl", name) < 0) {
		dp_seterr(e, DP_ENOMEM, "%s: out of memory", name);
		goto out;
	}
	z.prefix = prefix;
	uint64_t plen, blen;
	char *code = NULL;
	int script = asprintf(&code, "%sconstants.pkl", prefix) >= 0 &&
		     zip_name_locate(z.za, code, ZIP_FL_ENC_RAW) >= 0;
	free(code);
	if (script) {
		dp_seterr(e, DP_EDATA, "%s: a TorchScript archive (torch.jit.save), not a state_dict: "
			  "load it in torch and torch.save its state_dict()", name);
		goto out;
	}
	if (!(pkl = zip_entry(&z, ent, MAX_PICKLE, &plen, e)))
		goto out;
	int big = 0;
	free(ent);
	if (asprintf(&ent, "%sbyteorder", prefix) < 0) {
		ent = NULL;
		dp_seterr(e, DP_ENOMEM, "%s: out of memory", name);
		goto out;
	}
	if (zip_name_locate(z.za, ent, ZIP_FL_ENC_RAW) >= 0) {
		if (!(bo = zip_entry(&z, ent, 16, &blen, e)))
			goto out;
		big = blen == 3 && !memcmp(bo, "big", 3);
		if (!big && !(blen == 6 && !memcmp(bo, "little", 6))) {
			dp_seterr(e, DP_EDATA, "%s: byteorder is neither little nor big", name);
			goto out;
		}
	}
	if (pk_load(pkl, (size_t)plen, where, &r, e) < 0)
		goto out;
	const pk_val *sd = state_dict(r.top, name, e);
	if (sd)
		st = make_st(sd, name, len, big, zip_storage, &z, e);
out:
	for (size_t i = 0; i < z.ns; i++)
		free((void *)z.s[i].p);
	free(z.s);
	pk_free(&r);
	free(pkl);
	free(bo);
	free(prefix);
	free(ent);
	free(where);
	if (z.za)
		zip_discard(z.za);
	zip_error_fini(&ze);
	return st;
}

/* ---- the legacy format ---------------------------------------------------------- */

typedef struct lread {
	const char *name;
	sbytes *s; /* by key, sorted */
	size_t ns;
	char **keys;
} lread;

static int by_key(const void *a, const void *b)
{
	return strcmp(((const sbytes *)a)->st->s, ((const sbytes *)b)->st->s);
}

static const sbytes *legacy_storage(void *ctx, const pk_val *st, dp_err *e)
{
	lread *l = ctx;
	sbytes want = {.st = st};
	const sbytes *s = bsearch(&want, l->s, l->ns, sizeof *l->s, by_key);
	if (!s) {
		char *k = dp_shown(st->s, st->len);
		dp_seterr(e, DP_EDATA, "%s: storage '%s' is not in the file", l->name, k ? k : "?");
		free(k);
	}
	return s;
}

static dp_st *open_legacy(const uint8_t *buf, size_t len, const char *name, dp_err *e)
{
	pk_result parts[4] = {{0}}; /* protocol version, sys_info, the object, the keys */
	const char *what[] = {"protocol version", "sys_info", "the object", "the storage keys"};
	lread l = {.name = name};
	dp_st *st = NULL;
	size_t at = legacy_magic_end(buf, len);
	char where[1100];
	for (int i = 0; i < 4; i++) {
		snprintf(where, sizeof where, "%s: %s at byte %zu", name, what[i], at);
		if (pk_load(buf + at, len - at, where, &parts[i], e) < 0)
			goto out;
		at += parts[i].used;
	}
	const pk_val *ver = parts[0].top, *info = parts[1].top, *keys = parts[3].top;
	if (ver->kind != PK_INT || ver->i != 1001 || info->kind != PK_DICT) {
		dp_seterr(e, DP_EDATA, "%s: not torch's legacy format (protocol version, sys_info)", name);
		goto out;
	}
	if (keys->kind != PK_LIST) {
		dp_seterr(e, DP_EDATA, "%s: the storage keys are not a list", name);
		goto out;
	}
	const pk_val *sd = state_dict(parts[2].top, name, e);
	if (!sd)
		goto out;
	/* the storages, in the order of the key list: an int64 count of
	 * elements, then the bytes; their types from the object's pickle */
	if (!(l.s = calloc(keys->n + 1, sizeof *l.s))) {
		dp_seterr(e, DP_ENOMEM, "%s: out of memory", name);
		goto out;
	}
	for (size_t i = 0; i < keys->n; i++) {
		const char *k = pk_str(keys->v[i]);
		const pk_val *s = NULL;
		for (const pk_val *v = parts[2].all; k && v && !s; v = v->next)
			if (v->kind == PK_STORAGE && !v->root && !strcmp(v->s, k))
				s = v;
		if (!s) {
			dp_seterr(e, DP_EDATA, "%s: storage key %zu is not one of the object's storages", name, i);
			goto out;
		}
		uint64_t count, es = dp_dtype_size(s->dtype);
		if (len - at < 8) {
			dp_seterr(e, DP_EDATA, "%s: truncated at byte %zu (storage %zu of %zu)", name, at, i,
				  keys->n);
			goto out;
		}
		memcpy(&count, buf + at, 8);
		at += 8;
		if (count != s->numel || count > (len - at) / es) {
			dp_seterr(e, DP_EDATA, "%s: storage '%s' at byte %zu: %" PRIu64 " elements, %s", name, k,
				  at - 8, count,
				  count != s->numel ? "not what the object says" : "past the end of the file");
			goto out;
		}
		l.s[l.ns].st = s;
		l.s[l.ns].p = buf + at;
		l.s[l.ns].n = count * es;
		l.ns++;
		at += (size_t)(count * es);
	}
	qsort(l.s, l.ns, sizeof *l.s, by_key);
	for (size_t i = 1; i < l.ns; i++)
		if (l.s[i].st == l.s[i - 1].st) {
			dp_seterr(e, DP_EDATA, "%s: a storage key given twice", name);
			goto out;
		}
	st = make_st(sd, name, len, 0, legacy_storage, &l, e);
out:
	for (int i = 0; i < 4; i++)
		pk_free(&parts[i]);
	free(l.s);
	return st;
}

dp_st *pth_open_mem(const uint8_t *buf, size_t len, const char *name, dp_err *e)
{
	switch (pth_detect(buf, len)) {
	case PTH_ZIP: return open_zip(buf, len, name, e);
	case PTH_LEGACY: return open_legacy(buf, len, name, e);
	case PTH_TAR:
		dp_seterr(e, DP_EDATA, "%s: the tar format of torch before 0.4: load it in torch and "
			  "torch.save it again", name);
		return NULL;
	}
	dp_seterr(e, DP_EDATA, "%s: not a file of torch.save", name);
	return NULL;
}

/* ---- writing: torch.save's zip format ------------------------------------------- */

static const char *storage_name(int dt)
{
	switch (dt) {
	case DP_DT_F32: return "FloatStorage";
	case DP_DT_F64: return "DoubleStorage";
	case DP_DT_F16: return "HalfStorage";
	case DP_DT_BF16: return "BFloat16Storage";
	case DP_DT_I64: return "LongStorage";
	case DP_DT_I32: return "IntStorage";
	case DP_DT_I16: return "ShortStorage";
	case DP_DT_I8: return "CharStorage";
	case DP_DT_U8: return "ByteStorage";
	case DP_DT_BOOL: return "BoolStorage";
	}
	return NULL; /* U16, U32, U64: no torch dtype */
}

static void pk_put_int(dp_buf *b, int64_t v)
{
	uint8_t x[9];
	if (v >= 0 && v < 256) {
		x[0] = 'K';
		x[1] = (uint8_t)v;
		dp_buf_add(b, x, 2);
	} else if (v >= 0 && v < 65536) {
		x[0] = 'M';
		x[1] = (uint8_t)v;
		x[2] = (uint8_t)(v >> 8);
		dp_buf_add(b, x, 3);
	} else if (v >= INT32_MIN && v <= INT32_MAX) {
		uint32_t u = (uint32_t)(int32_t)v;
		x[0] = 'J';
		for (int i = 0; i < 4; i++)
			x[1 + i] = (uint8_t)(u >> (8 * i));
		dp_buf_add(b, x, 5);
	} else {
		uint64_t u = (uint64_t)v;
		x[0] = 0x8a;
		dp_buf_add(b, x, 1);
		x[0] = 8;
		for (int i = 0; i < 8; i++)
			x[1 + i] = (uint8_t)(u >> (8 * i));
		dp_buf_add(b, x, 9);
	}
}

static void pk_put_str(dp_buf *b, const char *s)
{
	uint32_t n = (uint32_t)strlen(s);
	uint8_t x[5] = {'X', (uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};
	dp_buf_add(b, x, 5);
	dp_buf_add(b, s, n);
}

static void pk_put_dims(dp_buf *b, const int64_t *d, int n)
{
	dp_buf_addstr(b, n ? "(" : ")");
	for (int i = 0; i < n; i++)
		pk_put_int(b, d[i]);
	if (n)
		dp_buf_addstr(b, "t");
}

/* The pickle of an OrderedDict of the tensors t[0..n), storage i for
 * tensor i, as torch.save writes a state_dict. */
static void state_pickle(dp_buf *b, const dp_st_tensor *const *t, int n)
{
	dp_buf_add(b, "\x80\x02", 2);
	dp_buf_addstr(b, "ccollections\nOrderedDict\n)R(");
	for (int i = 0; i < n; i++) {
		int64_t stride[DP_ST_MAXDIM];
		char key[24];
		int64_t s = 1;
		for (int d = t[i]->ndim - 1; d >= 0; d--) {
			stride[d] = s;
			s *= t[i]->shape[d];
		}
		pk_put_str(b, t[i]->name);
		dp_buf_addstr(b, "ctorch._utils\n_rebuild_tensor_v2\n((");
		pk_put_str(b, "storage");
		dp_buf_printf(b, "ctorch\n%s\n", storage_name(t[i]->dtype));
		snprintf(key, sizeof key, "%d", i);
		pk_put_str(b, key);
		pk_put_str(b, "cpu");
		pk_put_int(b, (int64_t)dp_st_numel(t[i]));
		dp_buf_addstr(b, "tQ");
		pk_put_int(b, 0);
		pk_put_dims(b, t[i]->shape, t[i]->ndim);
		pk_put_dims(b, stride, t[i]->ndim);
		dp_buf_addstr(b, "\x89" "ccollections\nOrderedDict\n)Rt");
		dp_buf_addstr(b, "R");
	}
	dp_buf_addstr(b, "u.");
}

/* The zip's entries, as they are written: name, bytes, and where the
 * local header went. */
typedef struct zent {
	char name[64];
	const void *data;
	uint64_t len;
	uint32_t crc;
	uint64_t off;
} zent;

static void le16(uint8_t *p, unsigned v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

#define DOS_DATE ((0 << 9) | (1 << 5) | 1) /* 1980-01-01: the same bytes every time */

/* The fields a local header (at its byte 6) and a central directory
 * entry (at its byte 8) share, in the same order: flags, method (stored),
 * time, date, crc, both sizes and the name's length nl. */
static void zip_fields(uint8_t *p, const zent *z, size_t nl)
{
	le16(p, 0);
	le16(p + 2, 0);
	le16(p + 4, 0);
	le16(p + 6, DOS_DATE);
	le32(p + 8, z->crc);
	le32(p + 12, (uint32_t)z->len);
	le32(p + 16, (uint32_t)z->len);
	le16(p + 20, (unsigned)nl);
}

static int write_zip(int fd, zent *z, size_t n, const char *path, dp_err *e)
{
	uint8_t h[30 + 64 + 4 + 64];
	uint64_t at = 0;
	for (size_t i = 0; i < n; i++) {
		size_t nl = strlen(z[i].name);
		/* data at a multiple of 64, as torch aligns it: an extra field
		 * ("FB", torch's id) pads the header */
		size_t hl = 30 + nl, pad = (64 - (at + hl + 4) % 64) % 64;
		z[i].crc = (uint32_t)crc32(0, z[i].data, 0);
		for (uint64_t done = 0; done < z[i].len;) { /* crc32 takes an uInt */
			uInt step = z[i].len - done > (1u << 30) ? (1u << 30) : (uInt)(z[i].len - done);
			z[i].crc = (uint32_t)crc32(z[i].crc, (const Bytef *)z[i].data + done, step);
			done += step;
		}
		z[i].off = at;
		if (at + hl + 4 + pad + z[i].len >= 0xffffffffu)
			return dp_seterr(e, DP_ELIMIT, "%s: more than 4 GiB (zip64 is not written)", path);
		le32(h, 0x04034b50);
		le16(h + 4, 20);
		zip_fields(h + 6, &z[i], nl);
		le16(h + 28, (unsigned)(4 + pad));
		memcpy(h + 30, z[i].name, nl);
		le16(h + 30 + nl, 0x4246); /* "FB" */
		le16(h + 32 + nl, (unsigned)pad);
		memset(h + 34 + nl, 'Z', pad);
		int rc = dp_write_all(fd, h, hl + 4 + pad, path, e);
		if (rc == 0 && z[i].len)
			rc = dp_write_all(fd, z[i].data, (size_t)z[i].len, path, e);
		if (rc < 0)
			return rc;
		at += hl + 4 + pad + z[i].len;
	}
	uint64_t cd = at;
	for (size_t i = 0; i < n; i++) {
		size_t nl = strlen(z[i].name);
		uint8_t c[46 + 64];
		memset(c, 0, 46);
		le32(c, 0x02014b50);
		le16(c + 4, 20);
		le16(c + 6, 20);
		zip_fields(c + 8, &z[i], nl);
		le32(c + 42, (uint32_t)z[i].off);
		memcpy(c + 46, z[i].name, nl);
		int rc = dp_write_all(fd, c, 46 + nl, path, e);
		if (rc < 0)
			return rc;
		at += 46 + nl;
	}
	if (at >= 0xffffffffu)
		return dp_seterr(e, DP_ELIMIT, "%s: more than 4 GiB (zip64 is not written)", path);
	uint8_t end[22] = {0};
	le32(end, 0x06054b50);
	le16(end + 8, (unsigned)n);
	le16(end + 10, (unsigned)n);
	le32(end + 12, (uint32_t)(at - cd));
	le32(end + 16, (uint32_t)cd);
	return dp_write_all(fd, end, sizeof end, path, e);
}

int dp_ckpt_export_pth(const dp_st *ck, const char *path, dp_err *e)
{
	int nt = dp_st_count(ck), n = 0, rc;
	const dp_st_tensor **t = calloc((size_t)nt + 1, sizeof *t);
	zent *z = calloc((size_t)nt + 3, sizeof *z);
	dp_buf pkl = DP_BUF_INIT;
	if (!t || !z) {
		rc = dp_seterr(e, DP_ENOMEM, "%s: out of memory", path);
		goto out;
	}
	for (int i = 0; i < nt; i++) { /* the weights, as dp_ckpt_export_safetensors */
		const dp_st_tensor *x = dp_st_at(ck, i);
		int role = dp_ckpt_role(ck, x->name);
		if (role != DP_CK_PARAM && role != DP_CK_BUFFER)
			continue;
		if (!storage_name(x->dtype)) {
			rc = dp_seterr(e, DP_EDATA, "%s: tensor '%s' is %s, a dtype torch does not have",
				       dp_st_name(ck), x->name, dp_dtype_name(x->dtype));
			goto out;
		}
		t[n++] = x;
	}
	if (n + 3 > 65535) {
		rc = dp_seterr(e, DP_ELIMIT, "%s: more than 65532 tensors", path);
		goto out;
	}
	state_pickle(&pkl, t, n);
	if (pkl.err) {
		rc = dp_seterr(e, DP_ENOMEM, "%s: out of memory", path);
		goto out;
	}
	size_t nz = 0;
	snprintf(z[nz].name, sizeof z[nz].name, "archive/data.pkl");
	z[nz].data = pkl.p;
	z[nz++].len = pkl.len;
	snprintf(z[nz].name, sizeof z[nz].name, "archive/byteorder");
	z[nz].data = "little";
	z[nz++].len = 6;
	for (int i = 0; i < n; i++) {
		snprintf(z[nz].name, sizeof z[nz].name, "archive/data/%d", i);
		z[nz].data = t[i]->data;
		z[nz++].len = t[i]->nbytes;
	}
	snprintf(z[nz].name, sizeof z[nz].name, "archive/version");
	z[nz].data = "3\n";
	z[nz++].len = 2;
	dp_out o;
	if ((rc = dp_out_open(&o, path, e)) < 0)
		goto out;
	rc = write_zip(o.fd, z, nz, path, e);
	if (rc < 0)
		dp_out_abort(&o);
	else
		rc = dp_out_commit(&o, e);
out:
	dp_buf_free(&pkl);
	free(t);
	free(z);
	return rc;
}
