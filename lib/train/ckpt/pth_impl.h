/*
 * pth_impl.h - PyTorch's files inside lib/train/ckpt: the restricted
 * unpickler (pickle.c) and the dp_st a torch.save file becomes (pth.c,
 * safetensors.c).  Private to the component (tests and fuzz targets reach
 * it through lib/).
 */
#ifndef PTH_IMPL_H
#define PTH_IMPL_H

#include "dp_ckpt.h"

/* ---- the restricted unpickler (pickle.c) ------------------------------------
 * Python's pickle protocols 0 to 5, the opcodes a state_dict needs and no
 * other, and of Python's callables only those torch.load(weights_only=True)
 * allows for one: collections.OrderedDict, torch.Size, the storage types,
 * torch._utils._rebuild_tensor(_v2) and _rebuild_parameter, torch.nn
 * Parameter.  Nothing in the file is ever run: a callable is a name looked
 * up in a table, and what it makes is built here.  The result is a tree of
 * values; tensors hold their storage's key, offset, shape and strides
 * (checked to lie inside the storage), the storages' bytes are read by
 * the caller (pth.c).  Limits: 2^20 values, a memo of 2^20 entries,
 * integers of 64 bits, 8 dimensions. */
enum {
	PK_NONE = 1, PK_BOOL, PK_INT, PK_FLOAT, PK_STR, PK_BYTES, PK_TUPLE, PK_LIST, PK_DICT,
	PK_GLOBAL,  /* an allowed callable or type (g: PKG_*) */
	PK_STORAGE, /* a persistent id ('storage', type, key, location, numel[, view]) */
	PK_TENSOR
};

typedef struct pk_val pk_val;
struct pk_val {
	int kind;
	int64_t i;     /* PK_BOOL, PK_INT; PK_GLOBAL: which (PKG_*) */
	double f;      /* PK_FLOAT */
	char *s;       /* PK_STR, PK_BYTES (NUL-terminated too); PK_STORAGE: its key */
	size_t len;
	pk_val **v;    /* PK_TUPLE, PK_LIST: the items; PK_DICT: key, value, key, value... */
	size_t n, cap; /* items (PK_DICT: pairs) */
	/* PK_STORAGE: dtype (DP_DT_*), its elements, and for a view of another
	 * (the legacy format) the root storage and the view's first element */
	int dtype;
	uint64_t numel, view_off;
	pk_val *root;
	/* PK_TENSOR */
	pk_val *storage;
	uint64_t offset; /* elements into the storage */
	int ndim;
	int64_t shape[DP_ST_MAXDIM], stride[DP_ST_MAXDIM];
	pk_val *next; /* every value made, for freeing */
};

typedef struct pk_result {
	pk_val *top;    /* what STOP returned */
	pk_val *all;    /* every value (pk_free) */
	size_t used;    /* bytes of the input the pickle took (up to STOP) */
} pk_result;

/* Unpickle p[0..len); name and base (the offset of p in the file) for
 * messages ("m.pth: data.pkl: byte 312: ...").  0, or DP_EDATA (or
 * DP_ENOMEM, DP_ELIMIT) naming the opcode or global refused. */
int pk_load(const uint8_t *p, size_t len, const char *name, pk_result *r, dp_err *e);
void pk_free(pk_result *r);
/* A string value's text, or NULL when v is not a string. */
const char *pk_str(const pk_val *v);

/* ---- a dp_st made elsewhere (safetensors.c) ---------------------------------
 * buf (malloc'd, len bytes) holds the tensors' bytes; t[0..n) (malloc'd,
 * names malloc'd) point into it; all of it is the new dp_st's, also on
 * failure.  format: what dp_st_format says. */
dp_st *ckpt_st_adopt(const char *name, const char *format, uint8_t *buf, size_t len,
		     dp_st_tensor *t, int n, dp_err *e);

/* ---- torch.save's files (pth.c) --------------------------------------------- */
/* 1 when buf[0..len) (at least its first 16 bytes) starts as a file of
 * torch.save: a zip archive, or the legacy format's magic number. */
int pth_detect(const uint8_t *buf, size_t len);
/* The dp_st of a torch.save file (buf[0..len), not kept). */
dp_st *pth_open_mem(const uint8_t *buf, size_t len, const char *name, dp_err *e);

#endif
