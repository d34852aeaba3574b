/*
 * weights.c - a checkpoint's tensors as a user looks at them (dp_ckpt.h,
 * dp-ckpt(1)): what each tensor is (a parameter, a buffer, optimizer or
 * generator state), its values whatever the dtype, the difference between
 * two tensors, and the weights alone written as safetensors.
 *
 * Limits: roles come from names (dp-checkpoint(5)'s, and PyTorch's
 * batchnorm buffers), not from a model; values are read as doubles, so a
 * 64-bit integer past 2^53 compares by its bits, not its value.
 */
#define _GNU_SOURCE
#include "dp_ckpt.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);
	return n >= m && !strcmp(s + n - m, suffix) && (n == m || s[n - m - 1] == '.');
}

int dp_ckpt_role(const dp_st *ck, const char *name)
{
	/* optimizer.* and rng.state are training state in dp-train's files
	 * (format in the metadata); in a plain state_dict every tensor is the
	 * model's, whatever its name */
	if (dp_st_meta(ck, "format")) {
		if (!strncmp(name, "optimizer.", 10))
			return DP_CK_OPTIM;
		if (!strcmp(name, "rng.state"))
			return DP_CK_RNG;
	}
	if (ends_with(name, "running_mean") || ends_with(name, "running_var") ||
	    ends_with(name, "num_batches_tracked"))
		return DP_CK_BUFFER;
	return DP_CK_PARAM;
}

size_t dp_st_numel(const dp_st_tensor *t)
{
	size_t n = 1;
	for (int d = 0; d < t->ndim; d++)
		n *= (size_t)t->shape[d];
	return n;
}

double dp_st_value(const dp_st_tensor *t, size_t i)
{
	const uint8_t *p = (const uint8_t *)t->data + i * dp_dtype_size(t->dtype);
	union {
		float f;
		double d;
		uint64_t u64;
		int64_t i64;
		uint32_t u32;
		int32_t i32;
		uint16_t u16;
		int16_t i16;
	} v;
	float f;
	memcpy(&v, p, dp_dtype_size(t->dtype)); /* little endian, unaligned */
	switch (t->dtype) {
	case DP_DT_F32: return v.f;
	case DP_DT_F64: return v.d;
	case DP_DT_F16: dp_f16_to_f32(&f, &v.u16, 1); return f;
	case DP_DT_BF16: dp_bf16_to_f32(&f, &v.u16, 1); return f;
	case DP_DT_I64: return (double)v.i64;
	case DP_DT_I32: return v.i32;
	case DP_DT_I16: return v.i16;
	case DP_DT_I8: return (int8_t)*p;
	case DP_DT_U64: return (double)v.u64;
	case DP_DT_U32: return v.u32;
	case DP_DT_U16: return v.u16;
	case DP_DT_U8: return *p;
	case DP_DT_BOOL: return *p != 0;
	}
	return NAN;
}

int dp_st_diff_tensors(const dp_st_tensor *a, const dp_st_tensor *b, dp_st_diff *d)
{
	memset(d, 0, sizeof *d);
	if (a->dtype != b->dtype || a->ndim != b->ndim ||
	    memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof a->shape[0]))
		return -1;
	size_t es = dp_dtype_size(a->dtype), n = dp_st_numel(a);
	const uint8_t *pa = a->data, *pb = b->data;
	d->max_abs = -1;
	for (size_t i = 0; i < n; i++) {
		if (!memcmp(pa + i * es, pb + i * es, es))
			continue;
		d->ndiff++;
		double x = dp_st_value(a, i), y = dp_st_value(b, i);
		double df = isnan(x) && isnan(y) ? 0 : isnan(x) || isnan(y) ? INFINITY : fabs(x - y);
		if (df > d->max_abs) {
			d->max_abs = df;
			d->at = i;
			d->a = x;
			d->b = y;
		}
	}
	if (!d->ndiff)
		d->max_abs = 0;
	return 0;
}

/* The metadata keys of a training run's state (dp-checkpoint(5)): left out
 * of a weights-only file, so that --resume refuses it rather than going on
 * from a state it does not hold. */
static int state_key(const char *k)
{
	static const char *const keys[] = {"seed", "step", "epoch", "epoch_step", "epoch_records",
					   "optimizer_steps"};
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
		if (!strcmp(k, keys[i]))
			return 1;
	return 0;
}

int dp_ckpt_export_safetensors(const dp_st *ck, const char *path, dp_err *e)
{
	dp_st_writer *w = dp_st_writer_new();
	if (!w)
		return dp_seterr(e, DP_ENOMEM, "%s: out of memory", path);
	for (int i = 0; i < dp_st_meta_count(ck); i++) {
		const char *k, *v;
		dp_st_meta_at(ck, i, &k, &v);
		if (!state_key(k))
			dp_st_set_meta(w, k, v);
	}
	for (int i = 0; i < dp_st_count(ck); i++) {
		const dp_st_tensor *t = dp_st_at(ck, i);
		int role = dp_ckpt_role(ck, t->name);
		if (role == DP_CK_PARAM || role == DP_CK_BUFFER)
			dp_st_add(w, t->name, t->dtype, t->ndim, t->shape, t->data);
	}
	int rc = dp_st_write(w, path, e);
	dp_st_writer_free(w);
	return rc;
}

int dp_ckpt_import(const dp_st *sd, const char *spec, const char *input_shape, int loss,
		   const char *path, const char *const *meta, dp_err *e)
{
	dp_shape in;
	dp_bectx *ctx = NULL;
	int rc = dp_shape_parse(input_shape, &in, e);
	if (rc < 0)
		return rc;
	dp_model *m = dp_model_new(spec, &in, loss, e);
	if (!m)
		return e ? e->code : DP_EARG;
	if ((rc = dp_backend_cpu.open(&ctx, NULL, NULL, 0, e)) == 0 &&
	    (rc = dp_model_bind(m, &dp_backend_cpu, ctx, 1, e)) == 0 &&
	    (rc = dp_ckpt_load_init(sd, m, NULL, e)) == 0)
		rc = dp_ckpt_save(path, m, NULL, NULL, meta, e);
	dp_model_free(m);
	if (ctx)
		dp_backend_cpu.close(ctx);
	return rc;
}
