/* runconf.c - a run's settings in a checkpoint's metadata (dp_run_conf,
 * dp_ckpt.h): written by dp_run_conf_meta, read back by dp_run_conf_from
 * from a real safetensors file; keys the caller gave left alone; a list
 * of keys; an optimizer of another kind bringing its defaults; and each
 * kind of bad value refused, naming the file and the key. */
#define _GNU_SOURCE
#include "dp_ckpt.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

static char tmpdir[] = "/tmp/dprunconf.XXXXXX";
static char path[256];

/* A checkpoint holding metadata pairs kv (NULL-terminated) and no tensor. */
static dp_st *ckpt_of(const char *const *kv)
{
	dp_err e;
	dp_st_writer *w = dp_st_writer_new();
	for (; kv && kv[0]; kv += 2)
		dp_st_set_meta(w, kv[0], kv[1]);
	int rc = dp_st_write(w, path, &e);
	dp_st_writer_free(w);
	dp_st *s = rc == 0 ? dp_st_open(path, &e) : NULL;
	if (!s)
		printf("# %s\n", e.msg);
	return s;
}

static const char *meta_of(char **m, const char *key)
{
	for (; m && m[0]; m += 2)
		if (!strcmp(m[0], key))
			return m[1];
	return NULL;
}

/* Every key written, and read back the same. */
static void test_round_trip(void)
{
	dp_err e;
	dp_run_conf a, b;
	dp_run_conf_init(&a);
	a.feature = "x";
	a.label = "y";
	a.decode = DP_DECODE_IMAGE;
	dp_image_opt(&a.img, "mean", "0.5,0.25,0.125", &e);
	a.hwc = 1;
	a.scale = 1.0 / 255, a.scale_text = "1/255";
	a.shuffle = 77, a.drop_last = 1, a.batch = 12, a.accumulate = 3, a.epochs = 9, a.warmup = 5;
	a.clip_norm = 2.5, a.lr = 0.125, a.schedule = "step:3", a.scale_lr = 1, a.warmup_epochs = 1.5;
	a.freeze = "0,1", a.lr_mult = "2=0.5", a.smooth = 0.1, a.sync_bn = 1, a.ranks = 4;
	a.precision = DP_PREC_BF16;
	a.steps_per_epoch = 6;
	const char *extra[] = {"producer", "test", NULL};
	char **m = dp_run_conf_meta(&a, extra, &e);
	ok(m != NULL, "the metadata of a run");
	is_str(meta_of(m, "producer"), "test", "... the caller's pairs first");
	is_str(meta_of(m, "scale"), "1/255", "... scale as written");
	is_str(meta_of(m, "lr_schedule"), "step:3:0.1", "... the schedule in full");
	is_str(meta_of(m, "layout"), "hwc", "... layout");
	is_str(meta_of(m, "no_decay"), "", "... no pattern: empty");
	is_str(meta_of(m, "precision"), "bf16", "... precision");
	ok(!meta_of(m, "model") && !meta_of(m, "optimizer") && !meta_of(m, "momentum"),
	   "... not the keys dp_ckpt_save writes itself");
	dp_st *ck = ckpt_of((const char *const *)m);
	free(m);
	dp_run_conf_init(&b);
	ok(ck && dp_run_conf_from(&b, ck, NULL, &e) == 0, "read back");
	is_str(b.feature, "x", "... feature");
	is_str(b.label, "y", "... label");
	ok(b.decode == DP_DECODE_IMAGE && b.hwc == 1 && b.img.mean[1] == 0.25f, "... decoding");
	ok(b.scale == a.scale && !strcmp(b.scale_text, "1/255"), "... scale");
	ok(b.shuffle == 77 && b.drop_last && b.batch == 12 && b.accumulate == 3 && b.epochs == 9 &&
		   b.warmup == 5,
	   "... counts");
	ok(b.clip_norm == 2.5 && b.lr == 0.125 && b.scale_lr && b.warmup_epochs == 1.5 && b.smooth == 0.1,
	   "... reals and flags");
	is_str(b.schedule, "step:3:0.1", "... schedule");
	is_str(b.freeze, "0,1", "... patterns");
	ok(b.sync_bn && b.ranks == 4 && b.steps_per_epoch == 6, "... sync_bn, ranks, steps_per_epoch");
	ok(b.precision == DP_PREC_FP32 && !b.from[DP_RUN_PRECISION], "... precision never taken back");
	ok(b.from[DP_RUN_BATCH] && !b.from[DP_RUN_MODEL], "... from[] says which came");
	is_str(b.src, path, "... and from where");
	dp_run_conf_free(&b);
	dp_st_close(ck);
}

/* Given keys stay; a list takes only its keys; another optimizer brings
 * its defaults unless given. */
static void test_given(void)
{
	dp_err e;
	const char *kv[] = {"batch_size", "64", "epochs", "7", "optimizer", "sgd", "momentum", "0.9",
			    "model", "dense:3", "loss", "mse", "steps_per_epoch", "", NULL};
	dp_st *ck = ckpt_of(kv);
	dp_run_conf c;
	dp_run_conf_init(&c);
	c.batch = 5;
	c.given[DP_RUN_BATCH] = 1;
	ok(dp_run_conf_from(&c, ck, NULL, &e) == 0, "keys given");
	ok(c.batch == 5 && !c.from[DP_RUN_BATCH] && c.epochs == 7, "... a given key stays, the others come");
	ok(c.opt.kind == DP_OPTIM_SGD && c.lr == 0.01 && c.opt.weight_decay == 0 && c.opt.momentum == 0.9,
	   "... sgd: its default lr and weight decay, the momentum saved");
	ok(c.loss == DP_LOSS_MSE && !strcmp(c.model, "dense:3"), "... the model's keys");
	ok(c.steps_per_epoch == 0, "... steps_per_epoch '': not known");
	dp_run_conf_free(&c);
	dp_run_conf_init(&c);
	c.given[DP_RUN_LR] = 1;
	c.lr = 0.5;
	static const int keys[] = {DP_RUN_EPOCHS, DP_RUN_OPTIMIZER, -1};
	ok(dp_run_conf_from(&c, ck, keys, &e) == 0 && c.epochs == 7 && c.batch == 32 && c.lr == 0.5 &&
		   c.opt.kind == DP_OPTIM_SGD && c.opt.momentum == 0,
	   "a list of keys: only those, a given lr kept");
	dp_run_conf_free(&c);
	dp_st_close(ck);
}

/* Bad values: DP_EDATA naming the file and the key. */
static void test_bad(void)
{
	static const struct {
		const char *key, *value, *msg;
	} cases[] = {
		{"lr", "fast", "metadata 'lr' is 'fast', not a number"},
		{"lr", "2e6", "metadata 'lr' is 2e6, outside 0..1e+06"},
		{"batch_size", "-3", "metadata 'batch_size' is '-3', not a count"},
		{"batch_size", "0", "metadata 'batch_size' is 0, outside 1..1048576"},
		{"ranks", "3000000000", "metadata 'ranks' is 3000000000, outside 1..2147483647"},
		{"loss", "hinge", "metadata: unknown loss 'hinge'"},
		{"decode_raw", "int4", "metadata: unknown decode_raw 'int4'"},
		{"optimizer", "lion", "metadata: unknown optimizer 'lion'"},
		{"scale", "0", "metadata: scale '0'"},
		{"image", "mean=x", "metadata: "},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const char *kv[] = {cases[i].key, cases[i].value, NULL};
		dp_st *ck = ckpt_of(kv);
		dp_run_conf c;
		dp_err e = {0};
		dp_run_conf_init(&c);
		ok(ck && dp_run_conf_from(&c, ck, NULL, &e) == DP_EDATA, "%s '%s' refused", cases[i].key,
		   cases[i].value);
		like(e.msg, cases[i].msg, "... said so");
		ok(!strncmp(e.msg, path, strlen(path)), "... naming the file");
		dp_run_conf_free(&c);
		dp_st_close(ck);
	}
}

int main(void)
{
	if (!mkdtemp(tmpdir))
		return 1;
	snprintf(path, sizeof path, "%s/ck.safetensors", tmpdir);
	test_round_trip();
	test_given();
	test_bad();
	unlink(path);
	rmdir(tmpdir);
	return done_testing();
}
