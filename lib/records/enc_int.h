/*
 * enc_int.h - private to the encoders (encode.c, exjson.c): the value
 * arrays an Example is built from, reused record after record.
 */
#ifndef DP_ENC_INT_H
#define DP_ENC_INT_H

#include "dp.h"
#include "dp_example.h"

#include <math.h>
#include <stdint.h>

/* Scratch arrays, each a dp_buf used as an array of elements. */
typedef struct enc_vals {
	dp_buf fv, iv;  /* float, int64 values */
	dp_buf bp, bl;  /* bytes values: pointers and lengths */
	dp_buf pool;    /* decoded bytes values (base64) */
} enc_vals;

/* Room for n elements of size bytes in b (what it held is kept): the
 * array, or NULL when out of memory.  The buffer's length stays 0. */
static inline void *enc_room(dp_buf *b, size_t n, size_t size)
{
	b->len = 0;
	b->err = 0;
	if (n < b->cap / size) /* the common case: room already */
		return b->p;
	if ((n && size > SIZE_MAX / 2 / n) || dp_buf_reserve(b, n * size) < 0)
		return NULL;
	return b->p;
}

/* Room for n bytes values, or -1. */
static inline int enc_bytes_room(enc_vals *v, size_t n)
{
	return enc_room(&v->bp, n, sizeof(const uint8_t *)) && enc_room(&v->bl, n, sizeof(size_t))
		       ? 0
		       : -1;
}

static inline void enc_vals_init(enc_vals *v)
{
	dp_buf_init(&v->fv, 0);
	dp_buf_init(&v->iv, 0);
	dp_buf_init(&v->bp, 0);
	dp_buf_init(&v->bl, 0);
	dp_buf_init(&v->pool, 0);
}

static inline void enc_vals_free(enc_vals *v)
{
	dp_buf_free(&v->fv);
	dp_buf_free(&v->iv);
	dp_buf_free(&v->bp);
	dp_buf_free(&v->bl);
	dp_buf_free(&v->pool);
}

/* A double as a float value: NULL, or the reason it is not one. */
static inline const char *enc_to_float(double d, float *out)
{
	float f = (float)d;
	if (isinf(f) && !isinf(d))
		return "is out of the float range";
	*out = f;
	return NULL;
}

#endif
