/*
 * conv_impl.h - the convolution part each backend provides (cpu_plan.c,
 * cuda_conv.cu) behind dp_backend's conv_ws, conv_fwd, conv_bwd,
 * conv_algos and conv_algos_take, with its set-up at the backend's open
 * and close: the signatures once, as function types, with which
 * cpu_impl.h and cuda_impl.h declare their own.  What each call does is
 * dp_backend.h's contract.  Private to lib/train/backend/.
 */
#ifndef DP_CONV_IMPL_H
#define DP_CONV_IMPL_H

#include "dp_backend.h"

typedef int be_conv_open_fn(dp_bectx *c, const dp_backend_opts *o, dp_err *e);
typedef void be_conv_close_fn(dp_bectx *c);
typedef size_t be_conv_ws_fn(dp_bectx *c, const dp_conv2d *g);
typedef void be_conv_fwd_fn(dp_bectx *c, const dp_conv2d *g, const float *x, const float *w,
			    const float *b, float *y, int act, void *ws);
typedef void be_conv_bwd_fn(dp_bectx *c, const dp_conv2d *g, const float *x, const float *w,
			    const float *y, float *dy, float *dx, float *dw, float *db, int act,
			    void *ws);
typedef int be_conv_algos_fn(dp_bectx *c, char *buf, size_t len);
typedef int be_conv_algos_take_fn(dp_bectx *c, const char *algos);

/* backend.c, for conv_algos_take: *kept = a copy of algos (NULL: none),
 * the one before freed; -1 out of memory, *kept as it was. */
#ifdef __cplusplus
extern "C"
#endif
int be_conv_algos_keep(char **kept, const char *algos);

#endif
