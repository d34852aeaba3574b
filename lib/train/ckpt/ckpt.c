/*
 * ckpt.c - dp-train checkpoints (dp_ckpt.h, dp-checkpoint(5)): a model,
 * its optimizer state and the training state as safetensors tensors and
 * metadata (safetensors.c), saved and loaded back, checked tensor by
 * tensor.  The run's settings among the metadata are run.c's.
 */
#define _GNU_SOURCE
#include "dp_ckpt.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- training checkpoints ------------------------------------------------------ */

static int all_finite(const float *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!isfinite(p[i]))
			return 0;
	return 1;
}

/* The checkpoint's name for optimizer state j of parameter t, the same
 * when saving and loading: "optimizer.<tensor>.<state>" (dp-checkpoint(5)). */
static void optim_tensor_name(char *buf, size_t len, const dp_tensor_info *t, const dp_optim *o,
			      int j)
{
	snprintf(buf, len, "optimizer.%s.%s", t->name, dp_optim_state_name(o, j));
}

/* Tensor i of m in *t, and the name of its optimizer state j in name (len
 * bytes); 0 when it has none (not a parameter, or frozen). */
static int state_tensor(const dp_model *m, const dp_optim *o, int i, int j, dp_tensor_info *t,
			char *name, size_t len)
{
	dp_model_tensor(m, i, t);
	if (t->role != DP_TENSOR_PARAM || dp_optim_frozen(o, t->off))
		return 0;
	optim_tensor_name(name, len, t, o, j);
	return 1;
}

static void set_u64(dp_st_writer *w, const char *key, uint64_t v)
{
	char b[32];
	snprintf(b, sizeof b, "%" PRIu64, v);
	dp_st_set_meta(w, key, b);
}

static void set_dbl(dp_st_writer *w, const char *key, double v)
{
	char b[40];
	dp_st_set_meta(w, key, dp_fmt_double(v, b, sizeof b));
}

/* A checkpoint's metadata (dp-checkpoint(5)): the model's, the training
 * state's, the optimizer's, then the caller's pairs (meta). */
static void put_meta(dp_st_writer *w, dp_model *m, dp_optim *o, const dp_train_state *ts,
		     const char *const *meta)
{
	char sb[64];
	dp_shape in = dp_model_input(m);
	dp_st_set_meta(w, "format", "dp-train/1");
	dp_st_set_meta(w, "model", dp_model_spec(m));
	dp_st_set_meta(w, "input_shape", dp_shape_format(&in, sb, sizeof sb));
	dp_st_set_meta(w, "loss", dp_loss_name(dp_model_loss_kind(m)));
	set_u64(w, "params", dp_model_total_params(m));
	if (ts) {
		set_u64(w, "seed", ts->seed);
		set_u64(w, "step", ts->step);
		set_u64(w, "epoch", ts->epoch);
		set_u64(w, "epoch_step", ts->epoch_step);
	}
	if (o) {
		const dp_optim_conf *c = dp_optim_conf_get(o);
		dp_st_set_meta(w, "optimizer", dp_optim_name(c->kind));
		if (c->kind == DP_OPTIM_SGD) {
			set_dbl(w, "momentum", c->momentum);
			set_dbl(w, "dampening", c->dampening);
			dp_st_set_meta(w, "nesterov", c->nesterov ? "true" : "false");
		} else {
			set_dbl(w, "beta1", c->beta1);
			set_dbl(w, "beta2", c->beta2);
			set_dbl(w, "eps", c->eps);
		}
		set_dbl(w, "weight_decay", c->weight_decay);
		set_u64(w, "optimizer_steps", dp_optim_steps(o));
	}
	for (const char *const *kv = meta; kv && kv[0] && kv[1]; kv += 2)
		dp_st_set_meta(w, kv[0], kv[1]);
}

/* ---- a checkpoint in parts ----------------------------------------------------
 * A part is a stage's tensors as records, in the host's byte order (parts
 * travel between the ranks of one job):
 *     u16 name length, name, u8 dtype, u8 ndim, i64 shape[ndim],
 *     u64 bytes, the bytes
 * padded with zeros to a multiple of 4 bytes. */

typedef struct part_rec {
	const char *name;
	size_t nlen;
	int dtype, ndim;
	int64_t shape[4];
	const void *data;
	size_t nbytes;
} part_rec;

static void put_rec(dp_buf *b, const char *name, int dtype, int ndim, const int64_t *shape,
		    const void *data, size_t nbytes)
{
	uint16_t nl = (uint16_t)strlen(name);
	uint8_t hd[2] = {(uint8_t)dtype, (uint8_t)ndim};
	uint64_t nb = nbytes;
	dp_buf_add(b, &nl, sizeof nl);
	dp_buf_add(b, name, nl);
	dp_buf_add(b, hd, 2);
	dp_buf_add(b, shape, (size_t)ndim * sizeof *shape);
	dp_buf_add(b, &nb, sizeof nb);
	dp_buf_add(b, data, nbytes);
}

/* The next record of a part at *p (end: its end): 1, 0 at the end, -1 when
 * it is cut short (a part of another build). */
static int get_rec(const char **p, const char *end, part_rec *r)
{
	const char *q = *p;
	uint16_t nl;
	uint64_t nb;
	if (end - q < 2)
		return 0;
	memcpy(&nl, q, 2);
	if (!nl)
		return 0; /* padding */
	q += 2;
	if ((size_t)(end - q) < (size_t)nl + 2)
		return -1;
	r->name = q;
	r->nlen = nl;
	q += nl;
	r->dtype = (uint8_t)q[0];
	r->ndim = (uint8_t)q[1];
	q += 2;
	if (r->ndim > 4 || (size_t)(end - q) < (size_t)r->ndim * 8 + 8)
		return -1;
	memcpy(r->shape, q, (size_t)r->ndim * 8);
	q += r->ndim * 8;
	memcpy(&nb, q, 8);
	q += 8;
	if ((uint64_t)(end - q) < nb)
		return -1;
	r->data = q;
	r->nbytes = (size_t)nb;
	*p = q + nb;
	return 1;
}

void *dp_ckpt_part(dp_model *m, dp_optim *o, size_t *len, dp_err *e)
{
	size_t np = dp_model_nparams(m), nb = dp_model_nbuffers(m);
	int ns = o ? dp_optim_nstates(o) : 0;
	int nt = dp_model_ntensors(m);
	dp_bectx *ctx;
	const dp_backend *be = dp_model_backend(m, &ctx);
	if (!be) {
		dp_seterr(e, DP_EARG, "checkpoint: model not bound");
		return NULL;
	}
	float *host = malloc((np * (1 + (size_t)ns) + nb + 1) * sizeof(float));
	if (!host) {
		dp_seterr(e, DP_ENOMEM, "checkpoint: out of memory");
		return NULL;
	}
	float *hp = host, *hb = host + np, *hs = host + np + nb;
	be->download(ctx, hp, dp_model_params(m), np * sizeof(float));
	if (nb)
		be->download(ctx, hb, dp_model_buffers(m), nb * sizeof(float));
	for (int j = 0; j < ns; j++)
		be->download(ctx, hs + (size_t)j * np, dp_optim_state(o, j), np * sizeof(float));
	if (be->sync(ctx, e) < 0) { /* a device fault: the copies are not the weights */
		free(host);
		return NULL;
	}
	if (!all_finite(hp, np) || !all_finite(hb, nb) || !all_finite(hs, np * (size_t)ns)) {
		free(host);
		dp_seterr(e, DP_EDATA, "the model's parameters are not finite");
		return NULL;
	}
	dp_buf b = DP_BUF_INIT;
	for (int i = 0; i < nt; i++) {
		dp_tensor_info t;
		dp_model_tensor(m, i, &t);
		if (t.role == DP_TENSOR_COUNTER)
			put_rec(&b, t.name, DP_DT_I64, 0, t.shape, dp_model_counter(m, t.layer), 8);
		else
			put_rec(&b, t.name, DP_DT_F32, t.ndim, t.shape,
				(t.role == DP_TENSOR_PARAM ? hp : hb) + t.off, t.count * sizeof(float));
	}
	for (int j = 0; j < ns; j++)
		for (int i = 0; i < nt; i++) {
			dp_tensor_info t;
			char name[128];
			if (!state_tensor(m, o, i, j, &t, name, sizeof name))
				continue;
			put_rec(&b, name, DP_DT_F32, t.ndim, t.shape, hs + (size_t)j * np + t.off,
				t.count * sizeof(float));
		}
	while (b.len % 4)
		dp_buf_add(&b, "", 1);
	free(host);
	if (b.err) {
		dp_buf_free(&b);
		dp_seterr(e, DP_ENOMEM, "checkpoint: out of memory");
		return NULL;
	}
	*len = b.len;
	return b.p ? b.p : calloc(1, 4);
}

/* The record named name among the parts' (n of them), or NULL. */
static const part_rec *find_rec(const part_rec *r, size_t n, const char *name)
{
	size_t len = strlen(name);
	for (size_t i = 0; i < n; i++)
		if (r[i].nlen == len && !memcmp(r[i].name, name, len))
			return &r[i];
	return NULL;
}

int dp_ckpt_save_parts(const char *path, dp_model *m, dp_optim *o, const void *const *parts,
		       const size_t *lens, int nparts, const dp_train_state *ts,
		       const char *const *meta, dp_err *e)
{
	dp_shape in = dp_model_input(m);
	dp_err e2;
	/* the whole model, as one rank has it: its tensors' names in order */
	dp_model *whole = dp_model_new(dp_model_spec(m), &in, dp_model_loss_kind(m), &e2);
	dp_st_writer *w = dp_st_writer_new();
	part_rec *rec = NULL;
	size_t nrec = 0, cap = 0;
	int rc = DP_OK;
	if (!whole || !w) {
		rc = dp_seterr(e, DP_ENOMEM, "%s: out of memory", path);
		goto out;
	}
	for (int k = 0; k < nparts; k++) {
		const char *p = parts[k], *end = p + lens[k];
		part_rec r;
		int got;
		while ((got = get_rec(&p, end, &r)) == 1) {
			if (dp_grow(&rec, &cap, nrec + 1, sizeof *rec) < 0) {
				rc = dp_seterr(e, DP_ENOMEM, "%s: out of memory", path);
				goto out;
			}
			rec[nrec++] = r;
		}
		if (got < 0) {
			rc = dp_seterr(e, DP_EDATA, "%s: part %d of the checkpoint is cut short", path, k);
			goto out;
		}
	}
	put_meta(w, m, o, ts, meta);
	int nt = dp_model_ntensors(whole), ns = o ? dp_optim_nstates(o) : 0;
	for (int j = -1; j < ns; j++) /* the model's tensors, then each state's */
		for (int i = 0; i < nt; i++) {
			dp_tensor_info t;
			char name[128];
			dp_model_tensor(whole, i, &t);
			if (j >= 0 && t.role != DP_TENSOR_PARAM)
				continue;
			if (j >= 0)
				optim_tensor_name(name, sizeof name, &t, o, j);
			const part_rec *r = find_rec(rec, nrec, j < 0 ? t.name : name);
			if (!r && j >= 0)
				continue; /* a frozen tensor: no state */
			if (!r) {
				rc = dp_seterr(e, DP_EARG, "%s: no stage holds tensor '%s'", path, t.name);
				goto out;
			}
			dp_st_add(w, j < 0 ? t.name : name, r->dtype, r->ndim, r->shape, r->data);
		}
	uint64_t rng[4];
	if (ts) {
		rng[0] = ts->seed;
		rng[1] = ts->step;
		rng[2] = ts->epoch;
		rng[3] = ts->epoch_step;
		dp_st_add(w, "rng.state", DP_DT_U64, 1, (int64_t[]){4}, rng);
	}
	rc = dp_st_write(w, path, e);
out:
	dp_st_writer_free(w);
	dp_model_free(whole);
	free(rec);
	return rc;
}

int dp_ckpt_save(const char *path, dp_model *m, dp_optim *o, const dp_train_state *ts,
		 const char *const *meta, dp_err *e)
{
	size_t len = 0;
	void *part = dp_ckpt_part(m, o, &len, e);
	if (!part) {
		dp_preferr(e, "%s: not written", path);
		return e ? e->code : DP_EDATA;
	}
	int rc = dp_ckpt_save_parts(path, m, o, (const void *const *)&part, &len, 1, ts, meta, e);
	free(part);
	return rc;
}

static void shape_text(char *buf, size_t len, int ndim, const int64_t *shape)
{
	size_t n = (size_t)snprintf(buf, len, "[");
	for (int d = 0; d < ndim && n < len; d++)
		n += (size_t)snprintf(buf + n, len - n, "%s%" PRId64, d ? ", " : "", shape[d]);
	if (n < len)
		snprintf(buf + n, len - n, "]");
}

static int is_float(int dt)
{
	return dt == DP_DT_F32 || dt == DP_DT_F16 || dt == DP_DT_BF16 || dt == DP_DT_F64;
}

/* The tensor `name` with dtype and shape as given, or an error. */
static const dp_st_tensor *want(const dp_st *ck, const char *name, int dtype, int ndim,
				const int64_t *shape, dp_err *e)
{
	const dp_st_tensor *t = dp_st_find(ck, name);
	if (!t) {
		dp_seterr(e, DP_EDATA, "%s: no tensor '%s' (a checkpoint of another model?)",
			  dp_st_name(ck), name);
		return NULL;
	}
	/* a float tensor of another width loads into a float32 one, converted,
	 * as load_state_dict copies it */
	int same = (t->dtype == dtype || (dtype == DP_DT_F32 && is_float(t->dtype))) && t->ndim == ndim;
	for (int d = 0; same && d < ndim; d++)
		same = t->shape[d] == shape[d];
	if (!same) {
		char a[128], b[128];
		shape_text(a, sizeof a, t->ndim, t->shape);
		shape_text(b, sizeof b, ndim, shape);
		dp_seterr(e, DP_EDATA, "%s: tensor '%s' is %s %s, the model needs %s %s",
			  dp_st_name(ck), name, dp_dtype_name(t->dtype), a, dp_dtype_name(dtype), b);
		return NULL;
	}
	return t;
}

dp_model *dp_ckpt_model(const dp_st *ck, dp_err *e)
{
	const char *spec = dp_st_meta(ck, "model"), *shape = dp_st_meta(ck, "input_shape"),
		   *loss = dp_st_meta(ck, "loss");
	if (!spec || !shape)
		return dp_seterr(e, DP_EDATA,
				 "%s: not a dp-train checkpoint (no model and input_shape in its "
				 "metadata)",
				 dp_st_name(ck)),
		       NULL;
	dp_shape in;
	int lk = loss ? dp_loss_parse(loss) : DP_LOSS_XENT;
	if (dp_shape_parse(shape, &in, e) < 0 || !lk) {
		if (!lk)
			dp_seterr(e, DP_EDATA, "unknown loss '%s'", loss);
		dp_preferr(e, "%s", dp_st_name(ck));
		return NULL;
	}
	dp_model *m = dp_model_new(spec, &in, lk, e);
	if (!m) {
		dp_preferr(e, "%s", dp_st_name(ck));
		return NULL;
	}
	/* the file must hold the tensors its metadata's model has, before
	 * anything is allocated for them: a 120-byte file saying dense:4194304
	 * is refused here, not after gigabytes */
	for (int i = 0; i < dp_model_ntensors(m); i++) {
		dp_tensor_info t;
		dp_model_tensor(m, i, &t);
		if (!want(ck, t.name, t.role == DP_TENSOR_COUNTER ? DP_DT_I64 : DP_DT_F32, t.ndim,
			  t.shape, e)) {
			dp_model_free(m);
			return NULL;
		}
	}
	return m;
}

int dp_ckpt_load_weights(const dp_st *ck, dp_model *m, dp_err *e)
{
	return dp_ckpt_load_init(ck, m, NULL, e);
}

/* A tensor of the file that is not the model's: with dp-train's metadata,
 * the optimizer state and rng.state are not; in a plain state_dict every
 * tensor is the model's. */
static int model_tensor_name(const dp_st *ck, const char *n)
{
	return !dp_st_meta(ck, "format") ||
	       (strncmp(n, "optimizer.", 10) != 0 && strcmp(n, "rng.state") != 0);
}

int dp_ckpt_load_init(const dp_st *ck, dp_model *m, const char *reset, dp_err *e)
{
	dp_bectx *ctx;
	const dp_backend *be = dp_model_backend(m, &ctx);
	if (!be)
		return dp_seterr(e, DP_EARG, "model not bound");
	size_t np = dp_model_nparams(m), nb = dp_model_nbuffers(m);
	int nt = dp_model_ntensors(m), rc = DP_OK;
	int *skip = calloc((size_t)nt + 1, sizeof *skip);
	float *host = malloc((np + nb + 1) * sizeof(float));
	if (!skip || !host) {
		rc = dp_seterr(e, DP_ENOMEM, "out of memory");
		goto out;
	}
	if ((rc = dp_model_select(m, reset, skip, e)) < 0)
		goto out;
	/* a tensor the model does not have means another model (a pipeline
	 * stage's model knows the other stages' tensors) */
	for (int i = 0; i < dp_st_count(ck); i++) {
		const char *n = dp_st_at(ck, i)->name;
		if (model_tensor_name(ck, n) && !dp_model_knows_tensor(m, n)) {
			rc = dp_seterr(e, DP_EDATA,
				       "%s: tensor '%s' is not in the model (a checkpoint of another "
				       "model?)",
				       dp_st_name(ck), n);
			goto out;
		}
	}
	/* the model's tensors as they are (what --reset leaves), then the file's */
	be->download(ctx, host, dp_model_params(m), np * sizeof(float));
	if (nb)
		be->download(ctx, host + np, dp_model_buffers(m), nb * sizeof(float));
	if ((rc = be->sync(ctx, e)) < 0)
		goto out;
	for (int i = 0; i < nt; i++) {
		dp_tensor_info t;
		dp_model_tensor(m, i, &t);
		if (skip[i])
			continue;
		int dt = t.role == DP_TENSOR_COUNTER ? DP_DT_I64 : DP_DT_F32;
		if (t.role == DP_TENSOR_COUNTER && !dp_st_meta(ck, "format") && !dp_st_find(ck, t.name)) {
			/* a state_dict of torch before 0.4.1 (torchvision's first
			 * hub files): load_state_dict counts the batches from 0 */
			*dp_model_counter(m, t.layer) = 0;
			continue;
		}
		const dp_st_tensor *s = want(ck, t.name, dt, t.ndim, t.shape, e);
		if (!s) {
			rc = e ? e->code : DP_EDATA;
			goto out;
		}
		float *to = (t.role == DP_TENSOR_PARAM ? host : host + np) + t.off;
		if (t.role == DP_TENSOR_COUNTER)
			memcpy(dp_model_counter(m, t.layer), s->data, 8);
		else if (s->dtype == DP_DT_F32)
			memcpy(to, s->data, s->nbytes);
		else
			for (size_t j = 0; j < t.count; j++)
				to[j] = (float)dp_st_value(s, j);
	}
	if (!all_finite(host, np + nb)) {
		rc = dp_seterr(e, DP_EDATA, "%s: weights are not finite (NaN or infinity)",
			       dp_st_name(ck));
		goto out;
	}
	be->upload(ctx, dp_model_params(m), host, np * sizeof(float));
	if (nb)
		be->upload(ctx, dp_model_buffers(m), host + np, nb * sizeof(float));
out:
	free(skip);
	free(host);
	return rc;
}

static int meta_u64(const dp_st *ck, const char *key, uint64_t *v, dp_err *e)
{
	const char *s = dp_st_meta(ck, key);
	char *end;
	if (!s)
		return dp_seterr(e, DP_EDATA, "%s: no '%s' in the metadata", dp_st_name(ck), key);
	errno = 0;
	*v = strtoull(s, &end, 10);
	if (errno || end == s || *end || *s == '-')
		return dp_seterr(e, DP_EDATA, "%s: metadata '%s' is '%s', not a count",
				 dp_st_name(ck), key, s);
	return DP_OK;
}

int dp_ckpt_load_optim(const dp_st *ck, dp_optim *o, dp_model *m, dp_err *e)
{
	dp_bectx *ctx;
	const dp_backend *be = dp_model_backend(m, &ctx);
	const char *kind = dp_st_meta(ck, "optimizer");
	const dp_optim_conf *c = dp_optim_conf_get(o);
	if (!kind)
		return dp_seterr(e, DP_EDATA, "%s: no optimizer state (start from its weights with --init)",
				 dp_st_name(ck));
	if (strcmp(kind, dp_optim_name(c->kind)))
		return dp_seterr(e, DP_EDATA, "%s: holds %s state, not %s's", dp_st_name(ck), kind,
				 dp_optim_name(c->kind));
	uint64_t steps;
	int rc = meta_u64(ck, "optimizer_steps", &steps, e);
	if (rc < 0)
		return rc;
	size_t np = dp_model_nparams(m);
	float *host = malloc((np + 1) * sizeof(float));
	if (!host)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	int nt = dp_model_ntensors(m);
	/* tensors the checkpoint's run froze have no state: unfrozen now, they
	 * start from a fresh one (zeros), as a parameter that starts to
	 * require gradients in PyTorch */
	const char *fz = dp_st_meta(ck, "freeze");
	int *was = calloc((size_t)nt + 1, sizeof *was);
	if (!was) {
		free(host);
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	}
	if (fz && *fz && dp_model_select(m, fz, was, NULL) < 0)
		memset(was, 0, ((size_t)nt + 1) * sizeof *was);
	for (int j = 0; j < dp_optim_nstates(o) && rc == DP_OK; j++) {
		for (int i = 0; i < nt; i++) {
			dp_tensor_info t;
			char name[128];
			if (!state_tensor(m, o, i, j, &t, name, sizeof name))
				continue;
			if (was[i] && !dp_st_find(ck, name)) {
				memset(host + t.off, 0, t.count * sizeof(float));
				continue;
			}
			const dp_st_tensor *s = want(ck, name, DP_DT_F32, t.ndim, t.shape, e);
			if (!s) {
				rc = e ? e->code : DP_EDATA;
				break;
			}
			memcpy(host + t.off, s->data, s->nbytes);
		}
		if (rc == DP_OK)
			be->upload(ctx, dp_optim_state(o, j), host, np * sizeof(float));
	}
	free(host);
	free(was);
	if (rc == DP_OK)
		dp_optim_set_steps(o, steps);
	return rc;
}

int dp_ckpt_train_state(const dp_st *ck, dp_train_state *ts, dp_err *e)
{
	int rc;
	if ((rc = meta_u64(ck, "seed", &ts->seed, e)) < 0 ||
	    (rc = meta_u64(ck, "step", &ts->step, e)) < 0 ||
	    (rc = meta_u64(ck, "epoch", &ts->epoch, e)) < 0 ||
	    (rc = meta_u64(ck, "epoch_step", &ts->epoch_step, e)) < 0)
		return rc;
	const dp_st_tensor *t = want(ck, "rng.state", DP_DT_U64, 1, (int64_t[]){4}, e);
	if (!t)
		return e ? e->code : DP_EDATA;
	uint64_t r[4];
	memcpy(r, t->data, sizeof r);
	if (r[0] != ts->seed || r[1] != ts->step || r[2] != ts->epoch || r[3] != ts->epoch_step)
		return dp_seterr(e, DP_EDATA, "%s: rng.state disagrees with the metadata",
				 dp_st_name(ck));
	return DP_OK;
}

dp_model *dp_model_load(const char *path, const dp_backend *be, dp_bectx *ctx, size_t max_batch,
			dp_st **ckp, dp_err *e)
{
	dp_st *ck = dp_st_open(path, e);
	if (!ck)
		return NULL;
	dp_model *m = dp_ckpt_model(ck, e);
	if (!m || dp_model_bind(m, be, ctx, max_batch, e) < 0 || dp_ckpt_load_weights(ck, m, e) < 0) {
		dp_model_free(m);
		dp_st_close(ck);
		return NULL;
	}
	if (ckp)
		*ckp = ck;
	else
		dp_st_close(ck);
	return m;
}
