/*
 * dp-train - train a neural network from TFRecord files of tf.train.Example.
 *
 * This file is the command line around libdp: options, messages, the
 * training loop and its logs.  The model (dp_nn.h), the math (dp_backend.h),
 * the optimizers (dp_optim.h), the input pipeline (dp_data.h), the
 * checkpoints (dp_ckpt.h) and the talk between workers (dp_comm.h) are all
 * in the library.  A step is: forward, loss, backward (each layer's
 * gradients handed to dp_comm as they are ready), wait for the averaged
 * gradients, optimizer update.  See dp-train(1) and dp-checkpoint(5).
 */
#define _GNU_SOURCE
#include "dp.h"
#include "dp_backend.h"
#include "dp_ckpt.h"
#include "dp_comm.h"
#include "dp_data.h"
#include "dp_nn.h"
#include "dp_optim.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef DP_PROG
#define DP_PROG "dp-train"
#endif
static const char *prog = DP_PROG;

#define EXIT_DIVERGED 3

/* ---- the command line ----------------------------------------------------- */

enum {
	O_TRAIN = 256, O_TRAIN_CMD, O_VAL, O_VAL_CMD, O_FEATURE, O_LABEL, O_DECODE, O_SCALE,
	O_SHUFFLE, O_LAST_BATCH, O_CACHE, O_CACHE_LIMIT, O_CACHE_DIR, O_PREFETCH, O_MODEL,
	O_INPUT_SHAPE, O_LOSS, O_SUMMARY, O_EPOCHS, O_MAX_STEPS, O_BATCH, O_OPTIMIZER, O_LR,
	O_MOMENTUM, O_NESTEROV, O_DAMPENING, O_BETA1, O_BETA2, O_EPS, O_WD, O_SCHEDULE, O_WARMUP,
	O_SEED, O_THREADS, O_GPU, O_PRECISION, O_CKPT_EVERY, O_CKPT, O_RESUME, O_INIT, O_LOG_FORMAT, O_LOG,
	O_LOG_EVERY, O_PROGRESS, O_NO_PROGRESS, O_HELP, O_VERSION, O_LAST
};

static const struct option longopts[] = {
	{"train", required_argument, 0, O_TRAIN},
	{"train-cmd", required_argument, 0, O_TRAIN_CMD},
	{"val", required_argument, 0, O_VAL},
	{"val-cmd", required_argument, 0, O_VAL_CMD},
	{"feature", required_argument, 0, O_FEATURE},
	{"label", required_argument, 0, O_LABEL},
	{"decode-raw", required_argument, 0, O_DECODE},
	{"scale", required_argument, 0, O_SCALE},
	{"shuffle-buffer", required_argument, 0, O_SHUFFLE},
	{"last-batch", required_argument, 0, O_LAST_BATCH},
	{"cache", required_argument, 0, O_CACHE},
	{"cache-limit", required_argument, 0, O_CACHE_LIMIT},
	{"cache-dir", required_argument, 0, O_CACHE_DIR},
	{"prefetch", required_argument, 0, O_PREFETCH},
	{"model", required_argument, 0, O_MODEL},
	{"input-shape", required_argument, 0, O_INPUT_SHAPE},
	{"loss", required_argument, 0, O_LOSS},
	{"summary", no_argument, 0, O_SUMMARY},
	{"epochs", required_argument, 0, O_EPOCHS},
	{"max-steps", required_argument, 0, O_MAX_STEPS},
	{"batch-size", required_argument, 0, O_BATCH},
	{"optimizer", required_argument, 0, O_OPTIMIZER},
	{"lr", required_argument, 0, O_LR},
	{"momentum", required_argument, 0, O_MOMENTUM},
	{"nesterov", no_argument, 0, O_NESTEROV},
	{"dampening", required_argument, 0, O_DAMPENING},
	{"beta1", required_argument, 0, O_BETA1},
	{"beta2", required_argument, 0, O_BETA2},
	{"eps", required_argument, 0, O_EPS},
	{"weight-decay", required_argument, 0, O_WD},
	{"lr-schedule", required_argument, 0, O_SCHEDULE},
	{"warmup", required_argument, 0, O_WARMUP},
	{"seed", required_argument, 0, O_SEED},
	{"threads", required_argument, 0, O_THREADS},
	{"gpu", required_argument, 0, O_GPU},
	{"precision", required_argument, 0, O_PRECISION},
	{"checkpoint-every", required_argument, 0, O_CKPT_EVERY},
	{"checkpoint", required_argument, 0, O_CKPT},
	{"resume", required_argument, 0, O_RESUME},
	{"init", required_argument, 0, O_INIT},
	{"output", required_argument, 0, 'o'},
	{"log-format", required_argument, 0, O_LOG_FORMAT},
	{"log", required_argument, 0, O_LOG},
	{"log-every", required_argument, 0, O_LOG_EVERY},
	{"progress", no_argument, 0, O_PROGRESS},
	{"no-progress", no_argument, 0, O_NO_PROGRESS},
	{"quiet", no_argument, 0, 'q'},
	{"help", no_argument, 0, O_HELP},
	{"version", no_argument, 0, O_VERSION},
	{0, 0, 0, 0},
};

static struct {
	const char **train, **val;
	size_t ntrain, nval;
	const char *train_cmd, *val_cmd;
	const char *feature, *label;
	int decode;
	double scale;
	const char *scale_text;
	uint64_t shuffle;
	int drop_last;
	int cache;
	uint64_t cache_limit;
	const char *cache_dir;
	int prefetch;
	const char *model, *input_shape;
	int loss, summary;
	uint64_t epochs, max_steps, batch;
	dp_optim_conf opt;
	double lr;
	const char *schedule;
	uint64_t warmup, seed;
	int threads;
	int gpu, precision; /* -1: the local rank's GPU; enum dp_precision */
	uint64_t ckpt_every;
	int ckpt_epochs; /* ckpt_every counts epochs */
	const char *ckpt, *output, *resume, *init;
	int json;
	const char *log;
	uint64_t log_every;
	int progress; /* -1 auto */
	int quiet;
	char given[O_LAST]; /* options given on the command line */
} O = {
	.feature = "image",
	.label = "label",
	.scale = 1,
	.shuffle = 10000,
	.prefetch = 2,
	.loss = DP_LOSS_XENT,
	.epochs = 1,
	.batch = 32,
	.schedule = "constant",
	.threads = 1,
	.gpu = -1,
	.log_every = 100,
	.progress = -1,
};

static const char usage_line[] =
	"usage: dp-train --train FILE... | --train-cmd CMD  --model SPEC --input-shape CxHxW\n"
	"                [--epochs N] [--batch-size N] [--optimizer sgd|adam|adamw] [--lr X]\n"
	"                [-o CHECKPOINT] ...   (dp-train --help lists every option)\n";

static void help(void)
{
	printf("usage: dp-train [OPTION]...\n"
	       "Train a neural network on TFRecord files of tf.train.Example (see dp-train(1)).\n"
	       "\n"
	       "Data:\n"
	       "      --train PATH         training records: file, glob, FIFO or - (stdin); repeatable;\n"
	       "                           {rank} and {size} are filled in\n"
	       "      --train-cmd CMD      run CMD (sh -c) each epoch and read its stdout instead;\n"
	       "                           {epoch} (from 1), {rank}, {size} are filled in\n"
	       "      --val PATH           validation records, evaluated after each epoch; repeatable\n"
	       "      --val-cmd CMD        a command giving validation records each epoch\n"
	       "      --feature NAME       the input feature (default image)\n"
	       "      --label NAME         the label feature (default label): an int64 class\n"
	       "                           (xent) or floats of the output size (mse)\n"
	       "      --decode-raw TYPE    read a bytes feature as raw uint8, float32 or float64\n"
	       "      --scale X            multiply inputs by X (0.5, 1/255, 1e-3)\n"
	       "      --shuffle-buffer N   shuffle through a buffer of N records (default 10000;\n"
	       "                           0: keep the order)\n"
	       "      --last-batch keep|drop  a partial last batch is trained on or dropped\n"
	       "                           (default keep)\n"
	       "      --cache file|memory|none  where a stream read once (stdin, FIFO) is kept\n"
	       "                           for later epochs (default file: unlinked, in --cache-dir)\n"
	       "      --cache-limit SIZE   most bytes of streams to keep (default 4G)\n"
	       "      --cache-dir DIR      directory of the cache file (default $TMPDIR or /tmp)\n"
	       "      --prefetch N         batches decoded ahead by a reader thread (default 2;\n"
	       "                           0: read in the training thread)\n"
	       "\n"
	       "Model:\n"
	       "      --model SPEC         layers, e.g. conv:32:3,relu,maxpool:2,flatten,dense:10\n"
	       "                           (dense:N conv:F:K[:S][:same|valid|P] maxpool:K[:S]\n"
	       "                           avgpool:K[:S] flatten dropout:P relu tanh sigmoid\n"
	       "                           batchnorm softmax)\n"
	       "      --input-shape SHAPE  C x H x W (1x28x28), H x W, or a length (784)\n"
	       "      --loss xent|mse      softmax cross-entropy on classes (default) or mean\n"
	       "                           squared error on vectors\n"
	       "      --summary            print the layers, shapes and parameters, and exit\n"
	       "\n"
	       "Training:\n"
	       "      --epochs N           passes over the data (default 1)\n"
	       "      --max-steps N        stop after N updates in all (a checkpoint resumes)\n"
	       "      --batch-size N       samples per update (default 32)\n"
	       "      --optimizer NAME     sgd, adam (default) or adamw\n"
	       "      --lr X               learning rate (default 0.001; sgd 0.01)\n"
	       "      --momentum M         sgd momentum (default 0)\n"
	       "      --nesterov           sgd: Nesterov momentum\n"
	       "      --dampening D        sgd: momentum dampening (default 0)\n"
	       "      --beta1 B --beta2 B  adam, adamw (default 0.9, 0.999)\n"
	       "      --eps E              adam, adamw (default 1e-8)\n"
	       "      --weight-decay W     L2 penalty (sgd, adam) or decoupled decay (adamw;\n"
	       "                           default 0, adamw 0.01)\n"
	       "      --lr-schedule S      constant (default), step:EPOCHS[:GAMMA], cosine[:MIN_LR]\n"
	       "      --warmup N           ramp the rate up linearly over the first N updates\n"
	       "      --seed N             weights, dropout and shuffle (default 0)\n"
	       "      --threads N          math threads (default 1)\n"
	       "      --gpu N              the GPU to use, in a CUDA build (default: the local\n"
	       "                           rank modulo the GPUs visible; CUDA_VISIBLE_DEVICES)\n"
	       "      --precision fp32|tf32|bf16  matrix products in float32 (default), or on\n"
	       "                           tensor cores (CUDA build): float32 weights either way\n"
	       "\n"
	       "Checkpoints (safetensors, dp-checkpoint(5)):\n"
	       "  -o, --output PATH        the final checkpoint\n"
	       "      --checkpoint-every N  also save every N updates, or every N epochs with a\n"
	       "                           suffix e (2e)\n"
	       "      --checkpoint PATH    where those go (default the -o path); {step} and\n"
	       "                           {epoch} are filled in\n"
	       "      --resume PATH        continue a run from a checkpoint: weights, optimizer,\n"
	       "                           position in the data; settings not given are taken from it\n"
	       "      --init PATH          start from a checkpoint's weights (fine-tuning)\n"
	       "\n"
	       "Logs:\n"
	       "      --log-format logfmt|json  training log lines (default logfmt)\n"
	       "      --log FILE           write the log there (default stdout)\n"
	       "      --log-every N        a training line every N updates (default 100)\n"
	       "      --progress, --no-progress  a progress bar on stderr (default: when a terminal)\n"
	       "  -q, --quiet              no progress bar, no notes on stderr\n"
	       "      --help               this list\n"
	       "      --version            the version\n"
	       "\n"
	       "Exit status: 0 done, 1 failure, 2 usage error, 3 training diverged (loss not finite).\n");
}

/* ---- messages --------------------------------------------------------------- */

static void bar_clear(void);

static void __attribute__((noreturn, format(printf, 2, 3))) die_code(int code, const char *fmt, ...)
{
	va_list ap;
	bar_clear();
	fflush(stdout);
	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(code);
}

#define die(...) die_code(1, __VA_ARGS__)

static void __attribute__((format(printf, 1, 2))) note(const char *fmt, ...)
{
	if (O.quiet)
		return;
	va_list ap;
	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static void __attribute__((noreturn, format(printf, 1, 2))) usage_error(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fputs(usage_line, stderr);
	exit(2);
}

static uint64_t opt_count(const char *name, const char *s, uint64_t min, uint64_t max)
{
	char *end;
	errno = 0;
	if (!*s || *s == '-')
		usage_error("--%s '%s': not a number", name, s);
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end || v < min || v > max)
		usage_error("--%s '%s': want a whole number from %" PRIu64 " to %" PRIu64, name, s,
			    min, max);
	return v;
}

static double opt_real(const char *name, const char *s, double min, double max)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (end == s || *end || errno || !isfinite(v) || v < min || v > max)
		usage_error("--%s '%s': want a number from %g to %g", name, s, min, max);
	return v;
}

static void push(const char ***v, size_t *n, const char *s)
{
	const char **t = realloc(*v, (*n + 1) * sizeof *t);
	if (!t)
		die("out of memory");
	t[(*n)++] = s;
	*v = t;
}

static void parse_args(int argc, char **argv)
{
	int c;
	dp_optim_defaults(&O.opt, DP_OPTIM_ADAM);
	double momentum = 0, dampening = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, wd = -1;
	int nesterov = 0;
	const char *optname = "adam";
	while ((c = getopt_long(argc, argv, "o:q", longopts, NULL)) != -1) {
		if (c >= 0 && c < O_LAST)
			O.given[c] = 1;
		switch (c) {
		case O_TRAIN: push(&O.train, &O.ntrain, optarg); break;
		case O_TRAIN_CMD: O.train_cmd = optarg; break;
		case O_VAL: push(&O.val, &O.nval, optarg); break;
		case O_VAL_CMD: O.val_cmd = optarg; break;
		case O_FEATURE: O.feature = optarg; break;
		case O_LABEL: O.label = optarg; break;
		case O_DECODE:
			O.decode = dp_decode_parse(optarg);
			if (O.decode < 0)
				usage_error("--decode-raw '%s': want uint8, float32 or float64", optarg);
			break;
		case O_SCALE:
			if (dp_parse_scale(optarg, &O.scale) < 0)
				usage_error("--scale '%s': want a non-zero number such as 0.5 or 1/255",
					    optarg);
			O.scale_text = optarg;
			break;
		case O_SHUFFLE: O.shuffle = opt_count("shuffle-buffer", optarg, 0, 1u << 28); break;
		case O_LAST_BATCH:
			if (strcmp(optarg, "keep") && strcmp(optarg, "drop"))
				usage_error("--last-batch '%s': want keep or drop", optarg);
			O.drop_last = !strcmp(optarg, "drop");
			break;
		case O_CACHE:
			O.cache = !strcmp(optarg, "file")     ? DP_CACHE_FILE
				  : !strcmp(optarg, "memory") ? DP_CACHE_MEMORY
				  : !strcmp(optarg, "none")   ? DP_CACHE_NONE
							      : -1;
			if (O.cache < 0)
				usage_error("--cache '%s': want file, memory or none", optarg);
			break;
		case O_CACHE_LIMIT:
			if (dp_parse_size(optarg, &O.cache_limit) < 0 || !O.cache_limit)
				usage_error("--cache-limit '%s': want a size such as 512M or 8G", optarg);
			break;
		case O_CACHE_DIR: O.cache_dir = optarg; break;
		case O_PREFETCH: O.prefetch = (int)opt_count("prefetch", optarg, 0, 64); break;
		case O_MODEL: O.model = optarg; break;
		case O_INPUT_SHAPE: O.input_shape = optarg; break;
		case O_LOSS:
			if (!(O.loss = dp_loss_parse(optarg)))
				usage_error("--loss '%s': want xent or mse", optarg);
			break;
		case O_SUMMARY: O.summary = 1; break;
		case O_EPOCHS: O.epochs = opt_count("epochs", optarg, 1, 1u << 30); break;
		case O_MAX_STEPS: O.max_steps = opt_count("max-steps", optarg, 1, UINT64_MAX / 2); break;
		case O_BATCH: O.batch = opt_count("batch-size", optarg, 1, 1u << 20); break;
		case O_OPTIMIZER:
			if (!dp_optim_parse(optarg))
				usage_error("--optimizer '%s': want sgd, adam or adamw", optarg);
			optname = optarg;
			break;
		case O_LR: O.lr = opt_real("lr", optarg, 0, 1e6); break;
		case O_MOMENTUM: momentum = opt_real("momentum", optarg, 0, 0.999999); break;
		case O_NESTEROV: nesterov = 1; break;
		case O_DAMPENING: dampening = opt_real("dampening", optarg, 0, 1); break;
		case O_BETA1: beta1 = opt_real("beta1", optarg, 0, 0.999999); break;
		case O_BETA2: beta2 = opt_real("beta2", optarg, 0, 0.999999); break;
		case O_EPS: eps = opt_real("eps", optarg, 0, 1); break;
		case O_WD: wd = opt_real("weight-decay", optarg, 0, 1e6); break;
		case O_SCHEDULE: O.schedule = optarg; break;
		case O_WARMUP: O.warmup = opt_count("warmup", optarg, 0, UINT64_MAX / 2); break;
		case O_SEED: O.seed = opt_count("seed", optarg, 0, UINT64_MAX); break;
		case O_THREADS: O.threads = (int)opt_count("threads", optarg, 1, 256); break;
		case O_GPU: O.gpu = (int)opt_count("gpu", optarg, 0, 4096); break;
		case O_PRECISION:
			if ((O.precision = dp_precision_parse(optarg)) < 0)
				usage_error("--precision '%s': want fp32, tf32 or bf16", optarg);
			break;
		case O_CKPT_EVERY: {
			size_t l = strlen(optarg);
			char buf[32];
			O.ckpt_epochs = l > 1 && l < sizeof buf && optarg[l - 1] == 'e';
			snprintf(buf, sizeof buf, "%.*s", (int)(l - (size_t)O.ckpt_epochs), optarg);
			O.ckpt_every = opt_count("checkpoint-every", buf, 1, UINT64_MAX / 2);
			break;
		}
		case O_CKPT: O.ckpt = optarg; break;
		case O_RESUME: O.resume = optarg; break;
		case O_INIT: O.init = optarg; break;
		case 'o': O.output = optarg; break;
		case O_LOG_FORMAT:
			if (strcmp(optarg, "logfmt") && strcmp(optarg, "json"))
				usage_error("--log-format '%s': want logfmt or json", optarg);
			O.json = !strcmp(optarg, "json");
			break;
		case O_LOG: O.log = optarg; break;
		case O_LOG_EVERY: O.log_every = opt_count("log-every", optarg, 1, UINT64_MAX / 2); break;
		case O_PROGRESS: O.progress = 1; break;
		case O_NO_PROGRESS: O.progress = 0; break;
		case 'q': O.quiet = 1; break;
		case O_HELP: help(); exit(fclose(stdout) ? 1 : 0);
		case O_VERSION: printf("dp-train (dptools) %s\n", DP_VERSION); exit(fclose(stdout) ? 1 : 0);
		default: fputs(usage_line, stderr); exit(2);
		}
	}
	if (optind < argc)
		usage_error("unexpected argument '%s' (records are given with --train)", argv[optind]);
	dp_optim_defaults(&O.opt, dp_optim_parse(optname));
	O.opt.momentum = momentum;
	O.opt.dampening = dampening;
	O.opt.nesterov = nesterov;
	O.opt.beta1 = beta1;
	O.opt.beta2 = beta2;
	O.opt.eps = eps;
	if (wd >= 0)
		O.opt.weight_decay = wd;
	if (!O.given[O_LR])
		O.lr = O.opt.kind == DP_OPTIM_SGD ? 0.01 : 0.001;
}

/* ---- settings from a checkpoint when resuming ------------------------------ */

/* Take a setting from the checkpoint being resumed when the command line
 * did not give it, so that `--resume ck` alone continues the same run. */
static char *kept[64]; /* settings copied out of the checkpoint, freed at exit */
static int nkept;

static const char *from_ckpt(const dp_st *ck, int opt, const char *key)
{
	if (!ck || O.given[opt])
		return NULL;
	const char *v = dp_st_meta(ck, key);
	if (!v)
		return NULL;
	if (nkept == (int)(sizeof kept / sizeof kept[0]) || !(kept[nkept] = strdup(v)))
		die("out of memory");
	return kept[nkept++];
}

static double meta_real(const dp_st *ck, const char *key, const char *v)
{
	char *end;
	double d = strtod(v, &end);
	if (end == v || *end || !isfinite(d))
		die("%s: metadata '%s' is '%s', not a number", dp_st_name(ck), key, v);
	return d;
}

static uint64_t meta_count(const dp_st *ck, const char *key, const char *v)
{
	char *end;
	errno = 0;
	unsigned long long n = strtoull(v, &end, 10);
	if (end == v || *end || errno || *v == '-')
		die("%s: metadata '%s' is '%s', not a count", dp_st_name(ck), key, v);
	return n;
}

static void settings_from(const dp_st *ck)
{
	const char *v;
	if ((v = from_ckpt(ck, O_MODEL, "model")))
		O.model = v;
	if ((v = from_ckpt(ck, O_INPUT_SHAPE, "input_shape")))
		O.input_shape = v;
	if ((v = from_ckpt(ck, O_LOSS, "loss")) && !(O.loss = dp_loss_parse(v)))
		die("%s: unknown loss '%s'", dp_st_name(ck), v);
	if ((v = from_ckpt(ck, O_FEATURE, "feature")))
		O.feature = v;
	if ((v = from_ckpt(ck, O_LABEL, "label")))
		O.label = v;
	if ((v = from_ckpt(ck, O_DECODE, "decode_raw")) && (O.decode = dp_decode_parse(v)) < 0)
		die("%s: unknown decode_raw '%s'", dp_st_name(ck), v);
	if ((v = from_ckpt(ck, O_SCALE, "scale"))) {
		if (dp_parse_scale(v, &O.scale) < 0)
			die("%s: bad scale '%s'", dp_st_name(ck), v);
		O.scale_text = v;
	}
	if ((v = from_ckpt(ck, O_SHUFFLE, "shuffle_buffer")))
		O.shuffle = meta_count(ck, "shuffle_buffer", v);
	if ((v = from_ckpt(ck, O_LAST_BATCH, "last_batch")))
		O.drop_last = !strcmp(v, "drop");
	if ((v = from_ckpt(ck, O_BATCH, "batch_size")))
		O.batch = meta_count(ck, "batch_size", v);
	if ((v = from_ckpt(ck, O_EPOCHS, "epochs")))
		O.epochs = meta_count(ck, "epochs", v);
	if ((v = from_ckpt(ck, O_SEED, "seed")))
		O.seed = meta_count(ck, "seed", v);
	if ((v = from_ckpt(ck, O_SCHEDULE, "lr_schedule")))
		O.schedule = v;
	if ((v = from_ckpt(ck, O_WARMUP, "warmup")))
		O.warmup = meta_count(ck, "warmup", v);
	int kind = O.opt.kind;
	if ((v = from_ckpt(ck, O_OPTIMIZER, "optimizer"))) {
		if (!(kind = dp_optim_parse(v)))
			die("%s: unknown optimizer '%s'", dp_st_name(ck), v);
		dp_optim_conf c;
		dp_optim_defaults(&c, kind);
		if (!O.given[O_WD])
			O.opt.weight_decay = c.weight_decay;
		O.opt.kind = kind;
		if (!O.given[O_LR])
			O.lr = kind == DP_OPTIM_SGD ? 0.01 : 0.001;
	}
	if ((v = from_ckpt(ck, O_LR, "lr")))
		O.lr = meta_real(ck, "lr", v);
	static const struct {
		int opt;
		const char *key;
		size_t off;
	} reals[] = {
		{O_MOMENTUM, "momentum", offsetof(dp_optim_conf, momentum)},
		{O_DAMPENING, "dampening", offsetof(dp_optim_conf, dampening)},
		{O_BETA1, "beta1", offsetof(dp_optim_conf, beta1)},
		{O_BETA2, "beta2", offsetof(dp_optim_conf, beta2)},
		{O_EPS, "eps", offsetof(dp_optim_conf, eps)},
		{O_WD, "weight_decay", offsetof(dp_optim_conf, weight_decay)},
	};
	for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++)
		if ((v = from_ckpt(ck, reals[i].opt, reals[i].key)))
			*(double *)((char *)&O.opt + reals[i].off) = meta_real(ck, reals[i].key, v);
	if ((v = from_ckpt(ck, O_NESTEROV, "nesterov")))
		O.opt.nesterov = !strcmp(v, "true");
}

/* ---- logs ---------------------------------------------------------------------- */

static FILE *logfp;
static int bar_on; /* a progress bar is drawn on stderr */
static int bar_shown;

static void bar_clear(void)
{
	if (bar_shown) {
		fputs("\r\033[K", stderr);
		bar_shown = 0;
	}
}

static void log_flush(void)
{
	if (fflush(logfp) != 0 || ferror(logfp))
		die("%s: write error: %s", O.log ? O.log : "stdout", strerror(errno));
}

/* A log line: pairs of key and printf-formatted value; logfmt or JSON. */
static void log_line(const char *const *keys, const char *const *vals, int n)
{
	bar_clear();
	if (O.json)
		fputc('{', logfp);
	for (int i = 0; i < n; i++) {
		if (O.json)
			fprintf(logfp, "%s\"%s\":%s", i ? "," : "", keys[i], vals[i]);
		else
			fprintf(logfp, "%s%s=%s", i ? " " : "", keys[i], vals[i]);
	}
	fputs(O.json ? "}\n" : "\n", logfp);
	log_flush();
}

typedef struct meter {
	double loss, correct;
	uint64_t samples, steps;
	double t0;
} meter;

static void log_train(uint64_t epoch, uint64_t step, meter *mt, double lr, int has_acc)
{
	char v[6][40];
	const char *keys[6] = {"epoch", "step", "loss", "accuracy", "lr", "samples_per_sec"};
	const char *vals[6] = {v[0], v[1], v[2], v[3], v[4], v[5]};
	double dt = dp_now() - mt->t0;
	snprintf(v[0], 40, "%" PRIu64, epoch + 1);
	snprintf(v[1], 40, "%" PRIu64, step);
	snprintf(v[2], 40, "%.6g", mt->loss / (double)mt->samples);
	snprintf(v[3], 40, "%.4f", mt->correct / (double)mt->samples);
	char lb[40];
	snprintf(v[4], 40, "%s", dp_fmt_double(lr, lb, sizeof lb));
	snprintf(v[5], 40, "%.0f", dt > 0 ? (double)mt->samples / dt : 0.0);
	if (!has_acc) { /* mse: no accuracy */
		keys[3] = keys[4], keys[4] = keys[5];
		vals[3] = vals[4], vals[4] = vals[5];
	}
	log_line(keys, vals, has_acc ? 6 : 5);
	memset(mt, 0, sizeof *mt);
	mt->t0 = dp_now();
}

static void bar_draw(uint64_t epoch, uint64_t done, uint64_t total, const meter *mt, int force)
{
	static double last;
	double now = dp_now();
	if (!bar_on || (!force && now - last < 0.2))
		return;
	last = now;
	char line[160];
	int n = snprintf(line, sizeof line, "epoch %" PRIu64 "/%" PRIu64 " ", epoch + 1, O.epochs);
	if (total) {
		int w = 30, fill = (int)(w * (double)done / (double)total);
		if (fill > w)
			fill = w;
		n += snprintf(line + n, sizeof line - (size_t)n, "[%.*s%*s] ", fill,
			      "##############################", w - fill, "");
		n += snprintf(line + n, sizeof line - (size_t)n, "%" PRIu64 "/%" PRIu64, done, total);
	} else {
		n += snprintf(line + n, sizeof line - (size_t)n, "step %" PRIu64, done);
	}
	if (mt->samples)
		snprintf(line + n, sizeof line - (size_t)n, "  loss %.4f  %.0f samples/s",
			 mt->loss / (double)mt->samples,
			 (double)mt->samples / fmax(1e-9, now - mt->t0));
	fprintf(stderr, "\r\033[K%s", line);
	bar_shown = 1;
}

/* ---- checkpoints ---------------------------------------------------------------- */

/* The run's objects, global so that they stay reachable when a message
 * ends the program (exit does not free them; leak checkers should not
 * count them). */
static dp_model *M;
static dp_optim *OPT;
static dp_comm *COMM;
static dp_data *TD, *VD;
static const char *last_ckpt;
static uint64_t last_ckpt_step;
static int have_ckpt;

static void save(const char *tmpl, const dp_train_state *ts)
{
	char sb[24], eb[24], lrb[40], scb[64], shb[24], bb[24], epb[24], wb[24], schb[64];
	snprintf(sb, sizeof sb, "%" PRIu64, ts->step);
	snprintf(eb, sizeof eb, "%" PRIu64, ts->epoch);
	const char *vars[] = {"step", sb, "epoch", eb, NULL};
	char *path = dp_expand(tmpl, vars);
	if (!path)
		die("out of memory");
	dp_sched sc = {0};
	dp_err e;
	if (dp_sched_parse(O.schedule, &sc, &e) < 0)
		die("%s", e.msg);
	snprintf(shb, sizeof shb, "%" PRIu64, O.shuffle);
	snprintf(bb, sizeof bb, "%" PRIu64, O.batch);
	snprintf(epb, sizeof epb, "%" PRIu64, O.epochs);
	snprintf(wb, sizeof wb, "%" PRIu64, O.warmup);
	const char *meta[] = {
		"lr", dp_fmt_double(O.lr, lrb, sizeof lrb),
		"lr_schedule", dp_sched_format(&sc, schb, sizeof schb),
		"warmup", wb,
		"batch_size", bb,
		"epochs", epb,
		"feature", O.feature,
		"label", O.label,
		"decode_raw", dp_decode_name(O.decode),
		"scale", O.scale_text ? O.scale_text : dp_fmt_double(O.scale, scb, sizeof scb),
		"shuffle_buffer", shb,
		"last_batch", O.drop_last ? "drop" : "keep",
		"precision", dp_precision_name(O.precision),
		"producer", "dp-train " DP_VERSION,
		NULL,
	};
	if (dp_ckpt_save(path, M, OPT, ts, meta, &e) < 0) {
		if (e.code == DP_EDATA)
			die_code(EXIT_DIVERGED, "step %" PRIu64 ": %s%s%s", ts->step, e.msg,
				 have_ckpt ? "; the last good checkpoint is " : "",
				 have_ckpt ? last_ckpt : "");
		die("%s", e.msg);
	}
	free((char *)last_ckpt);
	last_ckpt = path;
	last_ckpt_step = ts->step;
	have_ckpt = 1;
}

/* ---- main ---------------------------------------------------------------------------- */

static void summary(dp_model *m)
{
	char a[64], b[64];
	dp_shape in = dp_model_input(m);
	printf("%-5s  %-28s  %-12s  %10s\n", "layer", "item", "output", "params");
	printf("%-5s  %-28s  %-12s  %10s\n", "", "input", dp_shape_format(&in, a, sizeof a), "");
	for (int i = 0; i < dp_model_nlayers(m); i++) {
		dp_layer_info li;
		dp_model_layer(m, i, &li);
		printf("%-5d  %-28s  %-12s  %10zu\n", i, li.text, dp_shape_format(&li.out, b, sizeof b),
		       li.nparams);
	}
	printf("total %zu parameters, loss %s\n", dp_model_nparams(m),
	       dp_loss_name(dp_model_loss_kind(m)));
}

static dp_data *open_data(const char *const *paths, size_t n, const char *cmd, int train,
			  const dp_backend *be, dp_bectx *ctx, dp_model *m)
{
	dp_data_opts o = {0};
	o.inputs = paths;
	o.ninputs = n;
	o.cmd = cmd;
	o.feature = O.feature;
	o.label = O.label;
	o.decode = O.decode;
	o.scale = O.scale;
	o.in_size = dp_model_in_size(m);
	o.label_kind = dp_model_loss_kind(m) == DP_LOSS_XENT ? DP_LABEL_CLASS : DP_LABEL_VECTOR;
	o.nclass = o.label_size = dp_model_out_size(m);
	o.batch = O.batch;
	o.drop_last = train ? O.drop_last : 0;
	o.shuffle = train ? O.shuffle : 0;
	o.seed = O.seed;
	/* a stream read in a single epoch needs no cache */
	o.cache = train && O.epochs <= 1 && !O.given[O_CACHE] ? DP_CACHE_NONE : O.cache;
	o.cache_limit = O.cache_limit;
	o.cache_dir = O.cache_dir;
	o.prefetch = O.prefetch;
	o.alloc = (void *(*)(void *, size_t))be->host_alloc;
	o.free = (void (*)(void *, void *))be->host_free;
	o.alloc_ctx = ctx;
	dp_err e;
	dp_data *d = dp_data_open(&o, &e);
	if (!d)
		die("%s: %s", train ? "train" : "val", e.msg);
	return d;
}

/* Validation after an epoch: every sample once, in order. */
static void validate(dp_data *vd, uint64_t epoch, uint64_t step)
{
	dp_err e;
	if (dp_data_epoch(vd, epoch, 0, &e) < 0)
		die("val: %s", e.msg);
	double loss = 0, correct = 0;
	uint64_t n = 0;
	const dp_batch *b;
	int rc;
	while ((rc = dp_data_next(vd, &b, &e)) == 1) {
		double st[2];
		dp_pass p = {0};
		const void *y = dp_model_loss_kind(M) == DP_LOSS_XENT ? (const void *)b->y : b->t;
		if (dp_model_forward(M, b->x, b->n, &p, &e) < 0 ||
		    dp_model_loss(M, y, b->n, 1.0f, 0, st, &e) < 0)
			die("val: %s", e.msg);
		loss += st[0];
		correct += st[1];
		n += b->n;
	}
	if (rc < 0)
		die("val: %s", e.msg);
	if (!n)
		die("val: no records");
	char v[5][40];
	snprintf(v[0], 40, "%" PRIu64, epoch + 1);
	snprintf(v[1], 40, "%" PRIu64, step);
	snprintf(v[2], 40, "%.6g", loss / (double)n);
	snprintf(v[3], 40, "%.4f", correct / (double)n);
	snprintf(v[4], 40, "%" PRIu64, n);
	int xent = dp_model_loss_kind(M) == DP_LOSS_XENT;
	const char *keys[] = {"epoch", "step", "val_loss", xent ? "val_accuracy" : "val_samples",
			      "val_samples"};
	const char *vals[] = {v[0], v[1], v[2], xent ? v[3] : v[4], v[4]};
	log_line(keys, vals, xent ? 5 : 4);
}

int main(int argc, char **argv)
{
	dp_err e;
	signal(SIGPIPE, SIG_IGN);
	dp_out_install_signal_cleanup();
	parse_args(argc, argv);

	/* the checkpoint to resume or start from */
	dp_st *ck = NULL;
	if (O.resume && O.init)
		usage_error("--resume and --init exclude each other");
	if (O.resume || O.init) {
		if (!(ck = dp_st_open(O.resume ? O.resume : O.init, &e)))
			die("%s", e.msg);
		if (O.resume) {
			settings_from(ck);
		} else if (!O.given[O_MODEL] && !O.given[O_INPUT_SHAPE]) {
			O.model = from_ckpt(ck, O_MODEL, "model");
			O.input_shape = from_ckpt(ck, O_INPUT_SHAPE, "input_shape");
			const char *l = dp_st_meta(ck, "loss");
			if (l && !O.given[O_LOSS])
				O.loss = dp_loss_parse(l);
		}
	}
	if (!O.model)
		usage_error("no model: give --model SPEC (e.g. --model dense:128,relu,dense:10)");
	if (!O.input_shape)
		usage_error("no input shape: give --input-shape (e.g. 1x28x28 or 784)");
	dp_shape in;
	if (dp_shape_parse(O.input_shape, &in, &e) < 0)
		usage_error("%s", e.msg);
	M = dp_model_new(O.model, &in, O.loss, &e);
	if (!M)
		usage_error("%s", e.msg);
	if (O.summary) {
		summary(M);
		dp_model_free(M);
		return fclose(stdout) ? (perror(prog), 1) : 0;
	}
	if (ck) {
		dp_model *cm = dp_ckpt_model(ck, &e);
		if (!cm)
			die("%s", e.msg);
		if (!dp_model_same(cm, M)) {
			char a[64], b[64];
			dp_shape ci = dp_model_input(cm);
			die("%s: a checkpoint of model '%s' over %s, not '%s' over %s", dp_st_name(ck),
			    dp_model_spec(cm), dp_shape_format(&ci, a, sizeof a), dp_model_spec(M),
			    dp_shape_format(&in, b, sizeof b));
		}
		dp_model_free(cm);
	}
	if (!dp_model_nparams(M))
		usage_error("model '%s' has no parameters to train", O.model);
	if (!O.ntrain && !O.train_cmd)
		usage_error("no training data: give --train FILE or --train-cmd CMD");
	if (O.ntrain && O.train_cmd)
		usage_error("--train and --train-cmd exclude each other");
	if (O.nval && O.val_cmd)
		usage_error("--val and --val-cmd exclude each other");
	for (size_t i = 0; i < O.nval; i++)
		for (size_t j = 0; j < O.ntrain; j++)
			if (!strcmp(O.val[i], "-") && !strcmp(O.train[j], "-"))
				usage_error("stdin can hold the training or the validation records, not both");
	if (O.ckpt_every && !O.ckpt && !O.output)
		usage_error("--checkpoint-every needs -o or --checkpoint");
	if (O.ckpt && !O.ckpt_every)
		O.ckpt_every = 1, O.ckpt_epochs = 1;
	if (O.output && !strcmp(O.output, "-") && !O.log)
		usage_error("-o - would mix the checkpoint with the log on stdout: give --log FILE");
	dp_sched sched = {0};
	sched.epochs = O.epochs;
	sched.warmup = O.warmup;
	if (dp_sched_parse(O.schedule, &sched, &e) < 0)
		usage_error("%s", e.msg);
	if (dp_optim_check(&O.opt, &e) < 0)
		usage_error("%s", e.msg);

	/* log */
	logfp = stdout;
	if (O.log && strcmp(O.log, "-") && !(logfp = fopen(O.log, O.resume ? "a" : "w")))
		die("%s: %s", O.log, strerror(errno));
	bar_on = O.progress == 1 || (O.progress < 0 && !O.quiet && isatty(STDERR_FILENO));

	/* backend, model, optimizer, workers */
	const dp_backend *be = dp_backend_default();
	dp_bectx *ctx;
	dp_backend_opts bo = {O.threads, O.gpu, 0, O.precision};
	char desc[256];
	if (be->open(&ctx, &bo, desc, sizeof desc, &e) < 0)
		die("%s", e.msg);
	if (dp_model_bind(M, be, ctx, O.batch, &e) < 0)
		die("%s", e.msg);
	dp_comm *comm = COMM = dp_comm_open(be, ctx, &e);
	if (!comm)
		die("%s", e.msg);
	OPT = dp_optim_new(&O.opt, be, ctx, dp_model_nparams(M), &e);
	if (!OPT)
		die("%s", e.msg);
	dp_train_state ts = {O.seed, 0, 0, 0};
	if (ck) {
		if (dp_ckpt_load_weights(ck, M, &e) < 0)
			die("%s", e.msg);
		if (O.resume) {
			if (dp_ckpt_load_optim(ck, OPT, M, &e) < 0 ||
			    dp_ckpt_train_state(ck, &ts, &e) < 0)
				die("%s", e.msg);
			if (O.given[O_SEED] && O.seed != ts.seed)
				die("%s: saved with --seed %" PRIu64 ", not %" PRIu64
				    ": resuming needs the same seed",
				    dp_st_name(ck), ts.seed, O.seed);
		}
	} else {
		dp_model_init(M, O.seed);
	}
	/* every worker starts from worker 0's weights and running statistics */
	if (dp_comm_bcast(comm, dp_model_params(M), dp_model_nparams(M) * sizeof(float), 0, &e) < 0 ||
	    dp_comm_bcast(comm, dp_model_buffers(M), dp_model_nbuffers(M) * sizeof(float), 0, &e) < 0)
		die("%s", e.msg);

	dp_data *td = TD = open_data(O.train, O.ntrain, O.train_cmd, 1, be, ctx, M);
	dp_data *vd = VD =
		O.nval || O.val_cmd ? open_data(O.val, O.nval, O.val_cmd, 0, be, ctx, M) : NULL;
	note("%zu parameters, %s, %s; %zu training source%s", dp_model_nparams(M), desc,
	     dp_comm_desc(comm), dp_data_nsources(td), dp_data_nsources(td) == 1 ? "" : "s");
	if (ck) {
		if (O.resume && ts.epoch >= O.epochs)
			note("%s: all %" PRIu64 " epochs done (step %" PRIu64 "): nothing to train "
			     "(more with --epochs)",
			     dp_st_name(ck), O.epochs, ts.step);
		else if (O.resume)
			note("resuming %s at epoch %" PRIu64 ", step %" PRIu64, dp_st_name(ck),
			     ts.epoch + 1, ts.step);
		dp_st_close(ck);
		ck = NULL;
	}

	const char *ckpt_path = O.ckpt ? O.ckpt : O.output;
	int xent = dp_model_loss_kind(M) == DP_LOSS_XENT;
	uint64_t steps_per_epoch = 0; /* known after an epoch */
	int stopped = 0;
	meter mt = {0};
	mt.t0 = dp_now();
	size_t np = dp_model_nparams(M);
	double lr = 0;
	for (uint64_t epoch = ts.epoch; epoch < O.epochs && !stopped; epoch++) {
		uint64_t skip = epoch == ts.epoch ? ts.epoch_step : 0;
		ts.epoch = epoch;
		ts.epoch_step = skip;
		if (dp_data_epoch(td, epoch, skip, &e) < 0)
			die("train: %s", e.msg);
		const dp_batch *b;
		int rc;
		while ((rc = dp_data_next(td, &b, &e)) == 1) {
			lr = dp_sched_lr(&sched, O.lr, epoch, ts.step);
			dp_pass pass = {1, O.seed, ts.step, (uint64_t)dp_comm_rank(comm) * O.batch};
			double st[2];
			const void *y = xent ? (const void *)b->y : b->t;
			if (dp_model_forward(M, b->x, b->n, &pass, &e) < 0 ||
			    dp_model_loss(M, y, b->n, 1.0f / (float)b->n, 1, st, &e) < 0)
				die("train: %s", e.msg);
			if (!isfinite(st[0])) {
				bar_clear();
				if (have_ckpt)
					die_code(EXIT_DIVERGED,
						 "epoch %" PRIu64 ", step %" PRIu64 ": loss is %s: training "
						 "diverged; the last good checkpoint is %s (step %" PRIu64 ")",
						 epoch + 1, ts.step + 1, isnan(st[0]) ? "NaN" : "infinite",
						 last_ckpt, last_ckpt_step);
				die_code(EXIT_DIVERGED,
					 "epoch %" PRIu64 ", step %" PRIu64 ": loss is %s: training "
					 "diverged (lower --lr?); no checkpoint written",
					 epoch + 1, ts.step + 1, isnan(st[0]) ? "NaN" : "infinite");
			}
			if (dp_comm_grads_begin(comm, dp_model_grads(M), np, &e) < 0 ||
			    dp_model_backward(M, b->n, dp_comm_hook, comm, &e) < 0 ||
			    dp_comm_grads_wait(comm, &e) < 0)
				die("train: %s", e.msg);
			dp_optim_step(OPT, dp_model_params(M), dp_model_grads(M), lr);
			ts.step++;
			ts.epoch_step++;
			mt.loss += st[0];
			mt.correct += st[1];
			mt.samples += b->n;
			mt.steps++;
			if (ts.step % O.log_every == 0)
				log_train(epoch, ts.step, &mt, lr, xent);
			if (O.ckpt_every && !O.ckpt_epochs && ts.step % O.ckpt_every == 0)
				save(ckpt_path, &ts);
			bar_draw(epoch, ts.epoch_step, steps_per_epoch, &mt, 0);
			if (O.max_steps && ts.step >= O.max_steps) {
				stopped = 1;
				break;
			}
		}
		if (rc < 0) {
			bar_clear();
			die("train: %s", e.msg);
		}
		if (mt.steps)
			log_train(epoch, ts.step, &mt, lr, xent);
		if (stopped)
			break;
		if (ts.epoch_step == 0)
			die("train: epoch %" PRIu64 " has no batches (no records%s)", epoch + 1,
			    O.drop_last ? ", or fewer than a batch with --last-batch drop" : "");
		steps_per_epoch = ts.epoch_step;
		if (vd) {
			validate(vd, epoch, ts.step);
			mt.t0 = dp_now(); /* rates count training time only */
		}
		ts.epoch = epoch + 1;
		ts.epoch_step = 0;
		if (O.ckpt_every && O.ckpt_epochs && (epoch + 1) % O.ckpt_every == 0 &&
		    epoch + 1 < O.epochs)
			save(ckpt_path, &ts);
	}
	bar_clear();
	if (ts.epoch >= O.epochs)
		ts.epoch_step = 0;
	if (O.output)
		save(O.output, &ts);
	else if (ckpt_path && O.ckpt_every && last_ckpt_step != ts.step)
		save(ckpt_path, &ts);
	dp_data_close(td);
	dp_data_close(vd);
	dp_optim_free(OPT);
	dp_model_free(M);
	dp_comm_close(comm);
	be->close(ctx);
	free((char *)last_ckpt);
	free(O.train);
	free(O.val);
	while (nkept)
		free(kept[--nkept]);
	if (logfp != stdout && fclose(logfp) != 0)
		die("%s: %s", O.log, strerror(errno));
	if (fclose(stdout) != 0)
		die("stdout: %s", strerror(errno));
	return 0;
}
