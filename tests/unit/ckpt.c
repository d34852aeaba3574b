/* ckpt.c - safetensors reading and writing, and training checkpoints:
 * the exact bytes of a small file (checked by hand against the format's
 * description), round trips, every kind of damage a reader must refuse,
 * every single-byte corruption of a real checkpoint (no crash, no
 * acceptance of a broken header), and model/optimizer/state round trips. */
#define _GNU_SOURCE
#include "dp_ckpt.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

static char tmpdir[] = "/tmp/dpckpt.XXXXXX";

static char *path_of(const char *name)
{
	static char buf[256];
	snprintf(buf, sizeof buf, "%s/%s", tmpdir, name);
	return buf;
}

static uint8_t *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *b = malloc((size_t)n + 1);
	*len = fread(b, 1, (size_t)n, f);
	fclose(f);
	return b;
}

/* A safetensors file from a header text and data bytes. */
static uint8_t *make(const char *header, const void *data, size_t dlen, size_t *len)
{
	size_t hl = strlen(header);
	uint8_t *b = malloc(8 + hl + dlen);
	uint64_t n = hl;
	memcpy(b, &n, 8);
	memcpy(b + 8, header, hl);
	memcpy(b + 8 + hl, data, dlen);
	*len = 8 + hl + dlen;
	return b;
}

static void refuse(const char *what, const char *header, size_t dlen, const char *want)
{
	uint8_t data[64] = {0};
	size_t len;
	uint8_t *b = make(header, data, dlen, &len);
	dp_err e = {0};
	dp_st *s = dp_st_open_mem(b, len, "bad.st", &e);
	ok(s == NULL, "refuses %s", what);
	like(e.msg, want, "message for %s", what);
	dp_st_close(s);
	free(b);
}

/* The CPU backend, for the models. */
static const dp_backend *be = &dp_backend_cpu;
static dp_bectx *ctx;

/* The exact bytes of a small file, and reading it back. */
static void test_bytes(void)
{
	dp_err e;
	dp_st_writer *w = dp_st_writer_new();
	float xv[2] = {1.5f, -2.0f};
	int64_t cnt = 7;
	dp_st_add(w, "x", DP_DT_F32, 1, (int64_t[]){2}, xv);
	dp_st_add(w, "n", DP_DT_I64, 0, NULL, &cnt);
	dp_st_set_meta(w, "a", "b");
	is_int(dp_st_write(w, path_of("small.st"), &e), 0, "write a small file");
	dp_st_writer_free(w);
	size_t len;
	uint8_t *b = slurp(path_of("small.st"), &len);
	const char *want_hdr = "{\"__metadata__\":{\"a\":\"b\"},\"x\":{\"dtype\":\"F32\",\"shape\":[2],"
			       "\"data_offsets\":[0,8]},\"n\":{\"dtype\":\"I64\",\"shape\":[],"
			       "\"data_offsets\":[8,16]}}";
	size_t hl = strlen(want_hdr), padded = (hl + 7) / 8 * 8;
	uint64_t got_hl;
	memcpy(&got_hl, b, 8);
	is_int(got_hl, padded, "header length: the JSON padded to 8 bytes");
	ok(len == 8 + padded + 16, "file length");
	ok(memcmp(b + 8, want_hdr, hl) == 0, "header JSON, metadata first, tensors in order");
	int spaces = 1;
	for (size_t i = hl; i < padded; i++)
		spaces &= b[8 + i] == ' ';
	ok(spaces, "padded with spaces");
	ok(memcmp(b + 8 + padded, xv, 8) == 0 && memcmp(b + 16 + padded, &cnt, 8) == 0,
	   "data little-endian, in order");
	dp_st *s = dp_st_open(path_of("small.st"), &e);
	ok(s != NULL, "reads back");
	if (s) {
		const dp_st_tensor *t = dp_st_find(s, "x");
		ok(t && t->dtype == DP_DT_F32 && t->ndim == 1 && t->shape[0] == 2 && t->nbytes == 8 &&
			   memcmp(t->data, xv, 8) == 0,
		   "tensor x");
		t = dp_st_find(s, "n");
		ok(t && t->dtype == DP_DT_I64 && t->ndim == 0 && t->nbytes == 8, "scalar n");
		is_str(dp_st_meta(s, "a"), "b", "metadata");
		ok(dp_st_meta(s, "zz") == NULL, "absent metadata is NULL");
		dp_st_close(s);
	}
	free(b);

}

/* Damage a reader must refuse, each with its message. */
static void test_damage(void)
{
	dp_err e;
	dp_st *s;
	{
		s = dp_st_open_mem("\x01\x02\x03", 3, "bad.st", &e);
		ok(!s, "refuses a short file");
		like(e.msg, "bad.st: not a safetensors file (3 bytes)", "message for a short file");
		uint8_t big[8] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0};
		s = dp_st_open_mem(big, 8, "bad.st", &e);
		ok(!s, "refuses a huge header length");
		like(e.msg, "not a safetensors file (header length", "message for a huge header length");
		uint8_t trunc[12] = {100, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' '};
		s = dp_st_open_mem(trunc, 12, "bad.st", &e);
		ok(!s, "refuses a header longer than the file");
		like(e.msg, "truncated: header of 100 bytes, file of 12", "message for it");
	}
	refuse("bad JSON", "{\"x\":", 0, "bad.st: header: ");
	refuse("a non-object", "[1,2]", 0, "not a JSON object");
	refuse("duplicate names",
	       "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
	       "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
	       8, "duplicate");
	refuse("an unknown dtype", "{\"x\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
	       "unknown dtype 'F33'");
	/* the file's words in messages escaped: a control can't reach the terminal */
	refuse("a dtype with a terminal control",
	       "{\"x\":{\"dtype\":\"\\u001b[2J\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
	       "unknown dtype '$'\\x1b[2J''");
	refuse("damage to a tensor named with a terminal control",
	       "{\"a\\u001b]0;t\\u0007\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
	       "tensor '$'a\\x1b]0;t\\a'': bad shape");
	refuse("a hole after a tensor named with a control",
	       "{\"\\n\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
	       "tensor '$'\\n'' leaves a hole");
	refuse("a metadata value that is not a string, under a name with a control",
	       "{\"__metadata__\":{\"k\\u001b\":1}}", 0, "__metadata__ '$'k\\x1b'' is not a string");
	refuse("a shape that disagrees with the bytes",
	       "{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]},"
	       "\"y\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
	       16, "8 bytes for a shape of 12 bytes");
	refuse("a negative dimension", "{\"x\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}",
	       4, "bad shape");
	refuse("a huge shape",
	       "{\"x\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 4,
	       "shape larger than the file");
	refuse("data past the end", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,16]}}", 8,
	       "data ends at byte 16 of 8: file truncated");
	refuse("a shape larger than the file",
	       "{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8,
	       "shape larger than the file");
	refuse("reversed offsets", "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 8,
	       "bad data_offsets");
	refuse("overlapping tensors",
	       "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
	       "\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
	       8, "overlaps");
	refuse("a hole", "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
	       "leaves a hole");
	refuse("trailing bytes", "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8,
	       "4 bytes after the last tensor");
	refuse("non-string metadata", "{\"__metadata__\":{\"a\":1}}", 0, "'a' is not a string");
	refuse("extra fields",
	       "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"z\":1}}", 4,
	       "unexpected fields");
}

/* A checkpoint of a model after one step of Adam (m.st): weights,
 * running statistics, optimizer state and training state round trip;
 * another optimizer's state and another model's weights are refused. */
static void test_models(void)
{
	dp_err e;
	dp_shape in;
	dp_shape_parse("2x6x6", &in, &e);
	const char *spec = "conv:3:3,batchnorm,relu,flatten,dense:4";
	dp_model *m = dp_model_new(spec, &in, DP_LOSS_XENT, &e);
	dp_model_bind(m, be, ctx, 4, &e);
	dp_model_init(m, 1);
	dp_optim_conf oc;
	dp_optim_defaults(&oc, DP_OPTIM_ADAM);
	dp_optim *o = dp_optim_new(&oc, be, ctx, dp_model_nparams(m), &e);
	/* one step so the optimizer state and running statistics are not trivial */
	float x[4 * 72];
	for (int i = 0; i < 4 * 72; i++)
		x[i] = sinf((float)i);
	int32_t y[4] = {0, 1, 2, 3};
	dp_pass p = {1, 3, 0, 0};
	double st[2];
	dp_model_forward(m, x, 4, &p, &e);
	dp_model_loss(m, y, 4, 0.25f, 1, st, &e);
	dp_model_backward(m, 4, NULL, NULL, &e);
	dp_optim_step(o, dp_model_params(m), dp_model_grads(m), 1e-2);
	dp_train_state ts = {3, 1, 0, 1};
	const char *extra[] = {"feature", "pixels", NULL};
	is_int(dp_ckpt_save(path_of("m.st"), m, o, &ts, extra, &e), 0, "save a checkpoint");
	dp_st *ck = dp_st_open(path_of("m.st"), &e);
	ok(ck != NULL, "open it");
	is_str(dp_st_meta(ck, "model"), spec, "model spec in metadata");
	is_str(dp_st_meta(ck, "feature"), "pixels", "caller's metadata");
	ok(dp_st_find(ck, "1.num_batches_tracked") && dp_st_find(ck, "optimizer.4.bias.exp_avg_sq"),
	   "counters and optimizer state saved");
	dp_model *m2 = dp_ckpt_model(ck, &e);
	ok(m2 && dp_model_same(m, m2), "the same model from the metadata");
	dp_model_bind(m2, be, ctx, 4, &e);
	dp_optim *o2 = dp_optim_new(&oc, be, ctx, dp_model_nparams(m2), &e);
	is_int(dp_ckpt_load_weights(ck, m2, &e), 0, "load weights");
	is_int(dp_ckpt_load_optim(ck, o2, m2, &e), 0, "load optimizer state");
	dp_train_state ts2;
	is_int(dp_ckpt_train_state(ck, &ts2, &e), 0, "load the training state");
	ok(!memcmp(&ts, &ts2, sizeof ts), "training state round trip");
	size_t np = dp_model_nparams(m);
	ok(!memcmp(dp_model_params(m), dp_model_params(m2), np * sizeof(float)) &&
		   !memcmp(dp_model_buffers(m), dp_model_buffers(m2),
			   dp_model_nbuffers(m) * sizeof(float)),
	   "weights and running statistics round trip");
	ok(!memcmp(dp_optim_state(o, 1), dp_optim_state(o2, 1), np * sizeof(float)) &&
		   dp_optim_steps(o2) == 1,
	   "optimizer state and step round trip");
	is_int(*dp_model_counter(m2, 1), 1, "num_batches_tracked round trip");
	dp_optim_conf sc;
	dp_optim_defaults(&sc, DP_OPTIM_SGD);
	sc.momentum = 0.9;
	dp_optim *o3 = dp_optim_new(&sc, be, ctx, np, &e);
	ok(dp_ckpt_load_optim(ck, o3, m2, &e) < 0, "another optimizer's state refused");
	like(e.msg, "holds adam state, not sgd's", "message");
	dp_optim_free(o3);
	dp_st_close(ck);
	/* another model */
	dp_model *m3 = dp_model_new("conv:3:3,batchnorm,relu,flatten,dense:5", &in, DP_LOSS_XENT, &e);
	dp_model_bind(m3, be, ctx, 4, &e);
	ck = dp_st_open(path_of("m.st"), &e);
	ok(dp_ckpt_load_weights(ck, m3, &e) < 0, "another model's weights refused");
	like(e.msg, "tensor '4.weight' is F32 [4, 48], the model needs F32 [5, 48]", "names the tensor");
	dp_st_close(ck);
	dp_model_free(m3);
	/* dp-eval's way in */
	dp_st *meta = NULL;
	dp_model *m4 = dp_model_load(path_of("m.st"), be, ctx, 8, &meta, &e);
	ok(m4 && meta && dp_model_max_batch(m4) == 8, "dp_model_load builds, binds and loads");
	if (m4) {
		float out1[16], out2[16];
		dp_model_predict(m2, x, 4, out1, &e);
		dp_model_predict(m4, x, 4, out2, &e);
		ok(!memcmp(out1, out2, sizeof out1), "and predicts as the saved model");
		float sum = out1[0] + out1[1] + out1[2] + out1[3];
		ok(fabsf(sum - 1) < 1e-5f, "predictions are probabilities");
	}
	dp_st_close(meta);
	dp_model_free(m4);

	/* a NaN weight is never saved */
	float nan = NAN;
	be->upload(ctx, dp_model_params(m2), &nan, sizeof nan);
	ok(dp_ckpt_save(path_of("nan.st"), m2, NULL, NULL, NULL, &e) == DP_EDATA,
	   "NaN weights refused");
	like(e.msg, "not written: the model's parameters are not finite", "message");
	ok(access(path_of("nan.st"), F_OK) != 0, "and nothing written");

	dp_optim_free(o);
	dp_optim_free(o2);
	dp_model_free(m);
	dp_model_free(m2);
}

/* Every byte of m.st's header corrupted in turn: refused or read, never a
 * crash (make asan checks the memory accesses); every truncation refused. */
static void test_corrupted(void)
{
	dp_err e;
	size_t len;
	uint64_t got_hl;
	uint8_t *b;
	b = slurp(path_of("m.st"), &len);
	memcpy(&got_hl, b, 8);
	int refused_some = 0, loaded = 0;
	for (size_t i = 0; i < 8 + got_hl; i++) {
		uint8_t keep = b[i];
		for (int v = 0; v < 3; v++) {
			b[i] = (uint8_t)(v == 0 ? keep ^ 0x01 : v == 1 ? 0xff : '"');
			dp_st *c = dp_st_open_mem(b, len, "fuzz.st", &e);
			refused_some += c == NULL;
			if (c) {
				dp_model *mm = dp_ckpt_model(c, &e);
				if (mm && dp_model_bind(mm, be, ctx, 2, &e) == 0 &&
				    dp_ckpt_load_weights(c, mm, &e) == 0)
					loaded++;
				dp_model_free(mm);
				dp_st_close(c);
			}
		}
		b[i] = keep;
	}
	ok(refused_some > 0 && loaded > 0, "corrupted headers: %d refused, %d still valid and loaded",
	   refused_some, loaded);
	/* truncated at every length: always refused */
	int refused = 1;
	for (size_t n = 0; n < len; n += 7) {
		dp_st *c = dp_st_open_mem(b, n, "cut.st", &e);
		refused &= c == NULL;
		dp_st_close(c);
	}
	ok(refused, "every truncation refused");
	free(b);
}

int main(void)
{
	dp_err e;
	if (!mkdtemp(tmpdir) || be->open(&ctx, NULL, NULL, 0, &e) < 0)
		return 1;
	test_bytes();
	test_damage();
	test_models();
	test_corrupted();
	be->close(ctx);
	char cmd[300];
	snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
	if (system(cmd) != 0)
		return 1;
	return done_testing();
}
