/*
 * dp-eval - evaluate a dp-train checkpoint on TFRecord data: metrics, a
 * metrics JSON, per-record predictions, quality gates.
 *
 * The checkpoint gives the model and how its data is read (feature,
 * label, decode_raw, scale in its metadata: dp_ckpt.h); the records go
 * through dp_data.h in order, the model's forward pass gives logits or
 * outputs, and dp_eval.h accumulates the metrics.  Under mpirun each
 * worker takes every size-th block of --batch-size records, so every
 * batch is a batch the single process would have seen, and one allreduce
 * of the exact accumulators (dp_eval.h) gives every worker the same bits
 * a single process computes.  See dp-eval(1).
 */
#define _GNU_SOURCE
#include "cli.h"
#include "cli_input.h"
#include "sagemaker.h"
#include "dp.h"
#include "dp_backend.h"
#include "dp_ckpt.h"
#include "dp_comm.h"
#include "dp_data.h"
#include "dp_eval.h"
#include "dp_example.h"
#include "dp_nn.h"
#include "dp_serve.h"
#include "dp_record.h"

#include <errno.h>
#include <getopt.h>
#include <fcntl.h>
#include <glob.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef DP_PROG
#define DP_PROG "dp-eval"
#endif

/* Exit statuses past cli.h's (dp-eval(1), EXIT STATUS); never renumbered. */
enum { EVAL_GATE_FAILED = 3 }; /* a --require gate failed */

/* ---- the command line ------------------------------------------------------ */

enum {
	O_MODEL = 256, O_DATA, O_DATA_CMD, O_BATCH, O_TOPK, O_CLASSES, O_JSON, O_REQUIRE, O_CHECK,
	O_PRED, O_PRED_FORMAT, O_THREADS, O_GPU, O_PRECISION, O_BEST, O_COPY_BEST
};

static const struct option longopts[] = {
	{"model", required_argument, 0, O_MODEL},
	{"best", required_argument, 0, O_BEST},
	{"copy-best", required_argument, 0, O_COPY_BEST},
	{"data", required_argument, 0, O_DATA},
	{"data-cmd", required_argument, 0, O_DATA_CMD},
	CLI_INPUT_OPTIONS,
	{"batch-size", required_argument, 0, O_BATCH},
	{"top-k", required_argument, 0, O_TOPK},
	{"classes", required_argument, 0, O_CLASSES},
	{"json", required_argument, 0, O_JSON},
	{"require", required_argument, 0, O_REQUIRE},
	{"check", required_argument, 0, O_CHECK},
	{"predictions", required_argument, 0, O_PRED},
	{"predictions-format", required_argument, 0, O_PRED_FORMAT},
	{"threads", required_argument, 0, O_THREADS},
	{"gpu", required_argument, 0, O_GPU},
	{"precision", required_argument, 0, O_PRECISION},
	{"quiet", no_argument, 0, 'q'},
	CLI_OPTIONS_END,
};

enum { PF_AUTO = 0, PF_JSONL, PF_TFRECORD };

static struct {
	const char *model;   /* the checkpoint evaluated (of models) */
	const char **models; /* --model, globs expanded */
	size_t nmodels;
	const char *best, *copy_best; /* --best METRIC[:min|max], --copy-best PATH */
	const char **data;
	size_t ndata;
	const char *data_cmd;
	struct cli_input in; /* what is not given: the checkpoint's */
	uint64_t batch;
	long topk; /* -1: default */
	const char *classes;
	const char *json, *check, *pred;
	int pred_format;
	dp_gate *gates;
	const char **gate_text;
	size_t ngates;
	int threads, gpu, precision;
	int quiet;
} O = {
	.batch = 256,
	.topk = -1,
	.threads = 0, /* the host's CPUs shared by its ranks (dp_default_threads) */
	.gpu = -1,
};

static const char usage_line[] =
	"usage: dp-eval --model CHECKPOINT --data FILE... [--json FILE] [--require 'METRIC>=X']...\n"
	"               [--predictions FILE]   (dp-eval --help lists every option)\n";

static const char help_text[] =
	"usage: dp-eval --model CHECKPOINT [--data] FILE... [OPTION]...\n"
	"       dp-eval --check METRICS.json --require EXPR...\n"
	"Evaluate a dp-train checkpoint on TFRecord files of tf.train.Example: loss,\n"
	"accuracy, top-k, per-class precision/recall/F1, confusion matrix (classifiers);\n"
	"MSE, RMSE, MAE, R2 (regression).  See dp-eval(1).\n"
	"\n"
	"Input:\n"
	"      --model PATH         the checkpoint (safetensors, from dp-train); repeated or\n"
	"                           a glob ('runs/*/model.safetensors'): several, each\n"
	"                           on the same records in one pass of reading, a row each\n"
	"      --best METRIC[:min|max]  of several, the best by METRIC (default: lower for\n"
	"                           loss, mse, rmse, mae; higher for the rest)\n"
	"      --copy-best PATH     copy the best checkpoint there, whole or not at all\n"
	"      --data PATH          records: file, glob, FIFO or - (stdin); repeatable;\n"
	"                           {rank} and {size} are filled in; FILE operands too\n"
	"      --data-cmd CMD       read the stdout of CMD (sh -c) instead\n"
	"      --feature NAME       the input feature (default: the checkpoint's)\n"
	"      --label NAME         the label feature (default: the checkpoint's)\n"
	"      --decode-raw TYPE    bytes as raw uint8, float32, float64, or none\n"
	"                           (default: the checkpoint's)\n"
	"      --scale X            multiply inputs by X (default: the checkpoint's)\n"
	"      --layout chw|hwc     raw arrays' layout (default: the checkpoint's)\n"
	"      --decode image       image records (JPEG, PNG, WebP, TIFF, BMP, PNM; default:\n"
	"                           the checkpoint's), resized\n"
	"                           (or --resize N then center-cropped) to the input shape\n"
	"      --mean M[,M,M]       image settings (default: the checkpoint's): per\n"
	"                           channel, subtracted after --scale\n"
	"      --std S[,S,S]        per channel, divided by after --mean\n"
	"      --resize N           shorter side to N, then center-cropped\n"
	"      --max-pixels N       larger images are refused\n"
	"      --decode-threads N   threads decoding beside the reader (default 0; on a GPU\n"
	"                           its share of the CPUs less 2, at most 8)\n"
	"      --skip-corrupt       skip (and count) images that do not decode\n"
	"      --max-record SIZE    longest record accepted (default 256M; k, M, G)\n"
	"      --max-skipped N|P%  with --skip-corrupt: fail the run as a gate (exit 3)\n"
	"                           when more than N records, or P% of those read, are\n"
	"                           skipped (default 1%)\n"
	"      --batch-size N       samples per forward pass (default 256)\n"
	"      --threads N          math threads (default: the CPUs of the host shared by\n"
	"                           its ranks)\n"
	"      --gpu N              the GPU to use, in a CUDA build (default: the local\n"
	"                           rank modulo the GPUs visible)\n"
	"      --precision fp32|tf32|bf16  matrix products in float32 (default), or on\n"
	"                           tensor cores (CUDA build)\n"
	"\n"
	"Metrics:\n"
	"      --top-k K            also top-K accuracy (default 5 with more than 5\n"
	"                           classes; 0: none)\n"
	"      --classes NAMES      class names, comma-separated, or @FILE (one a line):\n"
	"                           shown in the report and JSON, usable in --require\n"
	"      --json FILE          write the metrics JSON to FILE (- for stdout), whole\n"
	"                           or not at all\n"
	"      --predictions FILE   write each record's prediction: JSON lines, or\n"
	"                           TFRecord when FILE ends in .tfrecord or .tfr\n"
	"                           (gzip with .gz); {rank} for one file per worker\n"
	"      --predictions-format jsonl|tfrecord  the format, whatever the name\n"
	"\n"
	"Gates:\n"
	"      --require EXPR       METRIC OP NUMBER with OP one of < <= > >=, e.g.\n"
	"                           'accuracy>=0.9', 'loss<0.4', 'recall[3]>0.8';\n"
	"                           repeatable; exit 3 when one fails (of several\n"
	"                           models: the best's, with --best)\n"
	"      --check FILE         apply the --require gates to a metrics JSON written\n"
	"                           before, instead of evaluating a model\n"
	"\n"
	"  -q, --quiet              no report on stdout, no progress\n"
	"      --sagemaker[=ROOT]   run as a SageMaker processing job: the model from\n"
	"                           ROOT/processing/input/model, records from .../test, the\n"
	"                           JSON to ROOT/processing/evaluation/evaluation.json\n"
	"                           (ROOT: /opt/ml; see SAGEMAKER in dp-eval(1))\n"
	"      --help               this list\n"
	"      --version            the version\n"
	"\n"
	"Exit status: 0 done (every gate passed), 1 failure, 2 usage error, 3 a --require\n"
	"gate failed (the metrics JSON and predictions are written).\n";

static void help(void) { fputs(help_text, stdout); }

/* ---- messages ----------------------------------------------------------------
 *
 * Under mpirun a worker's failure is printed by that worker, "dp-eval:
 * rank 2: ..." (cli.rank); a usage error, which every worker meets alike,
 * is printed once, by worker 0 (before the job is joined, the launcher's
 * environment says which worker that is). */

static int RANK, SIZE = 1;

static void before_msg(void)
{
	fflush(stdout);
}

/* --model PATH, or a glob of several (sorted; none matching: an error). */
static void add_models(const char *arg)
{
	struct stat st;
	glob_t g;
	if (stat(arg, &st) == 0 || !strpbrk(arg, "*?[")) {
		cli_push(&O.models, &O.nmodels, arg);
		return;
	}
	if (glob(arg, 0, NULL, &g) != 0)
		cli_job_usage_error("--model %s: no checkpoint matches", arg);
	for (size_t i = 0; i < g.gl_pathc; i++)
		cli_push(&O.models, &O.nmodels, cli_strdup(g.gl_pathv[i])); /* kept to the end */
	globfree(&g);
}

static void parse_args(int argc, char **argv)
{
	int c;
	dp_err e;
	cli_job_says(); /* what goes wrong here goes wrong on every worker */
	cli_input_init(&O.in);
	opterr = 0;
	int li = 0;
	while ((c = getopt_long(argc, argv, ":q", longopts, &li)) != -1) {
		switch (c) {
		case O_MODEL: add_models(optarg); break;
		case O_BEST: O.best = optarg; break;
		case O_COPY_BEST: O.copy_best = optarg; break;
		case O_DATA: cli_push(&O.data, &O.ndata, optarg); break;
		case O_DATA_CMD: O.data_cmd = optarg; break;
		case O_BATCH: O.batch = cli_count("--batch-size", optarg, 1, 1u << 20); break;
		case O_TOPK: O.topk = (long)cli_count("--top-k", optarg, 0, 1u << 24); break;
		case O_CLASSES: O.classes = optarg; break;
		case O_JSON: O.json = optarg; break;
		case O_CHECK: O.check = optarg; break;
		case O_PRED: O.pred = optarg; break;
		case O_PRED_FORMAT: {
			static const int pf[] = {PF_JSONL, PF_JSONL, PF_TFRECORD};
			O.pred_format = pf[cli_word("--predictions-format", optarg, "jsonl json tfrecord")];
			break;
		}
		case O_REQUIRE:
			O.gates = cli_realloc(O.gates, (O.ngates + 1) * sizeof *O.gates);
			if (dp_gate_parse(optarg, &O.gates[O.ngates], &e) < 0)
				cli_job_usage_error("--require %s", e.msg);
			cli_push(&O.gate_text, &O.ngates, optarg);
			break;
		case O_THREADS: O.threads = (int)cli_count("--threads", optarg, 1, 256); break;
		case O_GPU: O.gpu = (int)cli_count("--gpu", optarg, 0, 4096); break;
		case O_PRECISION:
			if ((O.precision = dp_precision_parse(optarg)) < 0)
				cli_bad_value("--precision", optarg, "fp32, tf32 or bf16");
			break;
		case 'q': O.quiet = 1; break;
		default:
			if (!cli_input_option(&O.in, c, longopts[li].name, optarg))
				cli_default_option(c, argv, help);
		}
	}
	for (int i = optind; i < argc; i++)
		cli_push(&O.data, &O.ndata, argv[i]);
	cli_set_rank(RANK, SIZE);
}

/* ---- text and JSON output ------------------------------------------------------- */

/* A JSON string (dp_buf_json_str: RFC 8259 escapes, U+FFFD for bytes that
 * are not UTF-8). */
static void jstr(dp_buf *b, const char *s)
{
	dp_buf_json_str(b, s, strlen(s), 0);
}

/* ---- class names ----------------------------------------------------------------- */

static char **NAMES; /* k names (one block: free(NAMES)) or NULL */

/* The class names: --classes, else the checkpoint's (dp-train keeps the
 * names it was given or read in the records' image/class/text). */
static void load_classes(size_t k, const char *from_ckpt)
{
	dp_err e;
	size_t n = k;
	if (O.classes) {
		if (dp_classes_parse(O.classes, &n, &NAMES, &e) < 0)
			cli_job_usage_error("--classes: %s", e.msg);
	} else if (from_ckpt) {
		if (dp_classes_from_json(from_ckpt, &n, &NAMES, &e) < 0)
			cli_die("%s: metadata 'classes': %s", O.model, e.msg);
		if (n != k)
			cli_die("%s: metadata 'classes': %zu names for a model of %zu classes", O.model,
				n, k);
	}
}

/* ---- --check: gates on a metrics JSON ---------------------------------------------- */

/* What a JSON value is, for a message: its compact text, cut short. */
static void json_what(const json_t *j, char *buf, size_t len)
{
	char *t = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
	snprintf(buf, len, "%.60s%s", t ? t : "?", t && strlen(t) > 60 ? "..." : "");
	free(t);
}

/* x as a metric's value in dp-eval's form: a number, or null (NaN, as
 * dp-eval writes a metric it has no value for); 0, or -1 when x is
 * neither (or NULL). */
static int metric_value(const json_t *x, double *v)
{
	if (json_is_number(x))
		*v = json_number_value(x);
	else if (x && json_is_null(x))
		*v = NAN;
	else
		return -1;
	return 0;
}

/* The value of metric `name` in a dp-eval metrics JSON: 0; -1 when there
 * is none of that name; -2 when there is one not of dp-eval's form (a
 * number or null), with what it is in bad. */
static int json_metric(json_t *root, const char *name, double *v, char *bad, size_t bl)
{
	json_t *m = json_object_get(json_object_get(root, "metrics"), name);
	if (m) {
		if (metric_value(json_object_get(m, "value"), v) == 0)
			return 0;
		json_what(m, bad, bl);
		return -2;
	}
	const char *lb = strchr(name, '[');
	size_t nl = strlen(name);
	if (!lb || name[nl - 1] != ']' || lb == name)
		return -1;
	char base[64], idx[256];
	size_t bl2 = (size_t)(lb - name), il = nl - bl2 - 2;
	if (bl2 >= sizeof base || il >= sizeof idx || !il)
		return -1;
	memcpy(base, name, bl2);
	base[bl2] = 0;
	memcpy(idx, lb + 1, il);
	idx[il] = 0;
	const char *arr = json_object_get(root, "classes") ? "classes" : "outputs";
	const char *key = !strcmp(arr, "classes") ? "class" : "output";
	json_t *a = json_object_get(root, arr);
	size_t i;
	json_t *it;
	json_array_foreach(a, i, it) {
		json_t *nm = json_object_get(it, "name"), *no = json_object_get(it, key);
		char nb[32];
		snprintf(nb, sizeof nb, "%" JSON_INTEGER_FORMAT,
			 json_is_integer(no) ? json_integer_value(no) : -1);
		if (!strcmp(nb, idx) || (json_is_string(nm) && !strcmp(json_string_value(nm), idx))) {
			json_t *x = json_object_get(it, base);
			if (!strcmp(base, "class") || !strcmp(base, "output") || !strcmp(base, "name"))
				return -1;
			if (metric_value(x, v) == 0)
				return 0;
			if (!x)
				return -1;
			json_what(x, bad, bl);
			return -2;
		}
	}
	return -1;
}

/* The metrics JSON of --check ("-": stdin), parsed. */
static json_t *load_check(void)
{
	json_error_t je;
	int std = !strcmp(O.check, "-");
	FILE *f = std ? stdin : fopen(O.check, "r");
	struct stat st;
	if (!f)
		cli_die("%s: %s", O.check, strerror(errno));
	if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode))
		cli_die("%s: is a directory, not a metrics JSON", O.check);
	json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &je);
	if (!std)
		fclose(f);
	if (!root) {
		if (je.line > 0)
			cli_die("%s: line %d, column %d: %s", O.check, je.line, je.column, je.text);
		cli_die("%s: %s", O.check, je.text);
	}
	return root;
}

static int check_mode(void)
{
	json_t *root = load_check();
	if (!json_is_object(json_object_get(root, "metrics")))
		cli_die("%s: not a dp-eval metrics JSON (no \"metrics\" object)", O.check);
	int failed = 0;
	double *vals = cli_calloc(O.ngates, sizeof *vals);
	for (size_t i = 0; i < O.ngates; i++) {
		char bad[80];
		int rc = json_metric(root, O.gates[i].metric, &vals[i], bad, sizeof bad);
		if (rc == -2)
			cli_die("%s: metric '%s' is %s, not of the expected form %s", O.check,
				O.gates[i].metric, bad,
				strchr(O.gates[i].metric, '[') ? "(a number or null)"
							       : "{\"value\": NUMBER}");
		if (rc < 0) {
			const char *k;
			json_t *v;
			char list[512];
			size_t l = 0;
			list[0] = 0;
			json_object_foreach(json_object_get(root, "metrics"), k, v) {
				int w = snprintf(list + l, sizeof list - l, "%s%s", l ? ", " : "", k);
				if (w > 0 && (size_t)w < sizeof list - l)
					l += (size_t)w;
			}
			cli_job_usage_error("--require %s: %s has no metric '%s' (it has %s)", O.gate_text[i],
				    O.check, O.gates[i].metric, list[0] ? list : "none");
		}
	}
	for (size_t i = 0; i < O.ngates; i++) {
		char t[40];
		int ok = dp_gate_pass(&O.gates[i], vals[i]);
		if (!O.quiet)
			printf("gate %s: %s %s\n", O.gate_text[i],
			       dp_eval_fmt_value(vals[i], t, sizeof t),
			       ok ? "passed" : "FAILED");
		if (!ok) {
			failed = 1;
			cli_warn("%s: gate %s failed: %s is %s", O.check, O.gate_text[i], O.gates[i].metric,
			      dp_eval_fmt_value(vals[i], t, sizeof t));
		}
	}
	free(vals);
	json_decref(root);
	if (cli_close_stdout() < 0)
		return CLI_FAIL;
	return failed ? EVAL_GATE_FAILED : CLI_OK;
}

/* ---- predictions ---------------------------------------------------------------------- */

typedef struct pred_out {
	dp_out out;
	int format;
	char *path;
	dp_buf sb;        /* jsonl */
	dp_writer *w;     /* tfrecord */
	dp_exbuild ex;
} pred_out;

static int ends_with(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);
	return a >= b && !strcmp(s + a - b, suf);
}

static void pred_open(pred_out *p)
{
	dp_err e;
	memset(p, 0, sizeof *p);
	dp_buf_init(&p->sb, 0);
	if (!(p->path = dp_expand(O.pred, NULL)))
		cli_die("out of memory");
	int gz = ends_with(p->path, ".gz");
	p->format = O.pred_format;
	if (p->format == PF_AUTO) {
		size_t l = strlen(p->path) - (gz ? 3 : 0);
		int tf = (l >= 9 && !strncmp(p->path + l - 9, ".tfrecord", 9)) ||
			 (l >= 4 && !strncmp(p->path + l - 4, ".tfr", 4));
		p->format = tf ? PF_TFRECORD : PF_JSONL;
	}
	if (p->format == PF_TFRECORD && !strcmp(p->path, "-") && isatty(STDOUT_FILENO))
		cli_job_usage_error("--predictions -: will not write records to a terminal");
	if (dp_out_open(&p->out, p->path, &e) < 0)
		cli_die_err(CLI_FAIL, &e);
	if (p->format == PF_TFRECORD &&
	    !(p->w = dp_writer_open_fd(p->out.fd, p->path, gz ? DP_COMP_GZIP : DP_COMP_NONE, -1, &e)))
		cli_die_err(CLI_FAIL, &e);
}

static void pred_flush(pred_out *p, int force)
{
	dp_err e;
	if (p->format != PF_JSONL || (!force && p->sb.len < (1u << 20)))
		return;
	if (p->sb.err)
		cli_die("out of memory");
	if (dp_write_all(p->out.fd, p->sb.p, p->sb.len, p->path, &e) < 0)
		cli_die_err(CLI_FAIL, &e);
	dp_buf_reset(&p->sb);
}

/* One record's prediction.  k values of prob/out; t: targets (regression). */
static void pred_row(pred_out *p, const char *src, uint64_t rec, const char *name, int cls,
		     int32_t label, int32_t pred, double loss, const float *v, const float *t, size_t k)
{
	dp_err e;
	char tb[40];
	if (p->format == PF_JSONL) {
		dp_buf *b = &p->sb;
		dp_buf_printf(b, "{\"file\":");
		jstr(b, src);
		dp_buf_printf(b, ",\"record\":%" PRIu64, rec);
		if (name) {
			dp_buf_printf(b, ",\"filename\":");
			jstr(b, name);
		}
		if (cls) {
			dp_buf_printf(b, ",\"label\":%" PRId32 ",\"predicted\":%" PRId32, label, pred);
			if (NAMES) {
				dp_buf_printf(b, ",\"label_name\":");
				jstr(b, NAMES[label]);
				dp_buf_printf(b, ",\"predicted_name\":");
				jstr(b, NAMES[pred]);
			}
			dp_buf_printf(b, ",\"loss\":");
			dp_eval_json_num(b, loss);
			dp_buf_printf(b, ",\"probabilities\":[");
		} else {
			dp_buf_printf(b, ",\"loss\":");
			dp_eval_json_num(b, loss);
			dp_buf_printf(b, ",\"target\":[");
			for (size_t j = 0; j < k; j++)
				dp_buf_printf(b, "%s%s", j ? "," : "",
					  isfinite(t[j]) ? dp_fmt_float(t[j], tb, sizeof tb) : "null");
			dp_buf_printf(b, "],\"output\":[");
		}
		for (size_t j = 0; j < k; j++)
			dp_buf_printf(b, "%s%s", j ? "," : "",
				  isfinite(v[j]) ? dp_fmt_float(v[j], tb, sizeof tb) : "null");
		dp_buf_printf(b, "]}\n");
		pred_flush(p, 0);
		return;
	}
	dp_exbuild *x = &p->ex;
	dp_exbuild_reset(x);
	const uint8_t *sv = (const uint8_t *)src;
	size_t sl = strlen(src);
	int64_t r = (int64_t)rec;
	float lf = (float)loss;
	dp_exbuild_bytes(x, "file", 4, &sv, &sl, 1);
	dp_exbuild_int64s(x, "record", 6, &r, 1);
	if (name) {
		const uint8_t *nv = (const uint8_t *)name;
		size_t nl = strlen(name);
		dp_exbuild_bytes(x, "filename", 8, &nv, &nl, 1);
	}
	if (cls) {
		int64_t l = label, pr = pred;
		dp_exbuild_int64s(x, "label", 5, &l, 1);
		dp_exbuild_int64s(x, "predicted", 9, &pr, 1);
		dp_exbuild_floats(x, "loss", 4, &lf, 1);
		dp_exbuild_floats(x, "probabilities", 13, v, k);
	} else {
		dp_exbuild_floats(x, "loss", 4, &lf, 1);
		dp_exbuild_floats(x, "target", 6, t, k);
		dp_exbuild_floats(x, "output", 6, v, k);
	}
	const uint8_t *data;
	size_t len;
	if (dp_exbuild_finish(x, &data, &len) < 0)
		cli_die("out of memory");
	if (dp_writer_write(p->w, data, len, &e) < 0)
		cli_die_err(CLI_FAIL, &e);
}

/* Every prediction written to p->out, which is left to commit. */
static void pred_finish(pred_out *p)
{
	dp_err e;
	pred_flush(p, 1);
	if (p->w) {
		if (dp_writer_finish(p->w, &e) < 0)
			cli_die_err(CLI_FAIL, &e);
		dp_writer_free(p->w);
		p->w = NULL;
	}
	dp_buf_free(&p->sb);
	dp_exbuild_free(&p->ex);
}

/* ---- the report ------------------------------------------------------------------------- */

typedef struct gate_result {
	double value;
	int passed;
} gate_result;

static void text_report(dp_buf *b, const dp_eval_report *r, const char *model, dp_data *d,
			const gate_result *gr)
{
	char t[40];
	size_t ns = dp_data_nsources(d);
	dp_buf_printf(b, "%s: %" PRIu64 " samples from %s%s\n", model, r->samples,
		  dp_data_source(d, 0), ns > 1 ? " ..." : "");
	dp_eval_text(b, r, (const char *const *)NAMES);
	if (O.ngates)
		dp_buf_printf(b, "\n");
	for (size_t i = 0; i < O.ngates; i++)
		dp_buf_printf(b, "gate %s: %s %s\n", O.gate_text[i],
			  dp_eval_fmt_value(gr[i].value, t, sizeof t),
			  gr[i].passed ? "passed" : "FAILED");
}

static void json_gates(dp_buf *b, const gate_result *gr);

static void json_report(dp_buf *b, const dp_eval_report *r, dp_st *ck, dp_model *m, dp_data *d,
			const char *feature, const char *label, int decode, const char *scale,
			const gate_result *gr)
{
	char sb[64];
	dp_buf_printf(b, "{\n  \"format\": \"dp-eval/1\",\n  \"model\": {\"path\": ");
	jstr(b, O.model);
	dp_buf_printf(b, ", \"spec\": ");
	jstr(b, dp_model_spec(m));
	dp_shape in = dp_model_input(m);
	dp_buf_printf(b, ", \"input_shape\": ");
	jstr(b, dp_shape_format(&in, sb, sizeof sb));
	dp_buf_printf(b, ", \"loss\": ");
	jstr(b, dp_loss_name(dp_model_loss_kind(m)));
	dp_buf_printf(b, ", \"parameters\": %zu", dp_model_nparams(m));
	const char *keys[] = {"step", "epoch"};
	for (int i = 0; i < 2; i++) {
		const char *v = dp_st_meta(ck, keys[i]);
		char *end;
		if (v && *v && (strtoull(v, &end, 10), !*end))
			dp_buf_printf(b, ", \"%s\": %s", keys[i], v);
	}
	dp_buf_printf(b, "},\n  \"data\": {\"sources\": [");
	for (size_t i = 0; i < dp_data_nsources(d); i++) {
		dp_buf_printf(b, "%s", i ? ", " : "");
		jstr(b, dp_data_source(d, i));
	}
	dp_buf_printf(b, "], \"feature\": ");
	jstr(b, feature);
	dp_buf_printf(b, ", \"label\": ");
	jstr(b, label);
	dp_buf_printf(b, ", \"decode_raw\": ");
	jstr(b, dp_decode_name(decode));
	dp_buf_printf(b, ", \"scale\": ");
	jstr(b, scale);
	dp_buf_printf(b, "},\n  \"samples\": %" PRIu64 ",\n  \"workers\": %d,\n", r->samples, SIZE);
	dp_eval_json(b, r, (const char *const *)NAMES);
	if (O.ngates)
		json_gates(b, gr);
	dp_buf_printf(b, "\n}\n");
}

/* The gates, each with its value and verdict, and the verdict of all. */
static void json_gates(dp_buf *b, const gate_result *gr)
{
	int all = 1;
	dp_buf_printf(b, ",\n  \"gates\": [\n");
	for (size_t i = 0; i < O.ngates; i++) {
		dp_buf_printf(b, "    {\"require\": ");
		jstr(b, O.gate_text[i]);
		dp_buf_printf(b, ", \"metric\": ");
		jstr(b, O.gates[i].metric);
		dp_buf_printf(b, ", \"op\": \"%s\", \"threshold\": ", dp_gate_op_name(O.gates[i].op));
		dp_eval_json_num(b, O.gates[i].threshold);
		dp_buf_printf(b, ", \"value\": ");
		dp_eval_json_num(b, gr[i].value);
		dp_buf_printf(b, ", \"passed\": %s}%s\n", gr[i].passed ? "true" : "false",
			  i + 1 < O.ngates ? "," : "");
		all &= gr[i].passed;
	}
	dp_buf_printf(b, "  ],\n  \"passed\": %s", all ? "true" : "false");
}

/* b written to output o (opened on path), left to commit. */
static void write_whole(dp_out *o, const char *path, const dp_buf *b)
{
	dp_err e;
	if (b->err)
		cli_die("out of memory");
	if (dp_out_open(o, path, &e) < 0)
		cli_die_err(CLI_FAIL, &e);
	if (dp_write_all(o->fd, b->p, b->len, strcmp(path, "-") ? path : "stdout", &e) < 0)
		cli_die_err(CLI_FAIL, &e);
}

/* ---- the run ------------------------------------------------------------------------------ */

/* What set-up makes and the pass and the reports use. */
static struct {
	const dp_backend *be;
	dp_bectx *ctx;
	dp_comm *comm;
	dp_st *ck;    /* the checkpoint, */
	dp_model *m;  /* its model, */
	int cls;      /* a classifier (else regression) */
	size_t k;     /* of k classes or outputs */
	/* how the data is read: the options, else the checkpoint, else dp-train's defaults */
	const char *feature, *label, *scale_text;
	int decode;
	dp_image_tf img; /* --decode image: the evaluation transform */
	dp_run_conf run; /* the settings the checkpoint holds (its strings) */
	int hwc;
	double scale;
	dp_data *d;
	dp_eval *ev;
	pred_out po;
	dp_eval_report rep;
	gate_result *gr; /* (O.ngates) */
	int gate_failed;
} R;

static void check_args(void)
{
	if (!O.nmodels)
		cli_job_usage_error("no checkpoint: give --model PATH");
	O.model = O.models[0];
	if (O.nmodels > 1 && O.pred)
		cli_job_usage_error("--predictions: one model at a time (%zu given)", O.nmodels);
	if (O.nmodels > 1 && O.ngates && !O.best)
		cli_job_usage_error("--require with several models gates the best: give --best METRIC");
	if (O.copy_best && !O.best)
		cli_job_usage_error("--copy-best goes with --best METRIC");
	if (!O.ndata && !O.data_cmd)
		cli_job_usage_error("no data: give --data FILE (or - for stdin)");
	if (O.ndata && O.data_cmd)
		cli_job_usage_error("--data and --data-cmd exclude each other");
	if (O.json && O.pred && !strcmp(O.json, "-") && !strcmp(O.pred, "-"))
		cli_job_usage_error("--json - and --predictions - would both write to stdout");
	for (size_t i = 0; i + 1 < O.ndata; i++)
		for (size_t j = i + 1; j < O.ndata; j++)
			if (!strcmp(O.data[i], "-") && !strcmp(O.data[j], "-"))
				cli_job_usage_error("stdin given twice");
	if (O.in.max_skipped && !O.in.skip_corrupt)
		cli_job_usage_error("--max-skipped needs --skip-corrupt (without it nothing is skipped)");
	if (O.in.skip_corrupt) { /* the limit on skipped records: one more gate */
		static char text[64];
		const char *lim = O.in.max_skipped ? O.in.max_skipped : DP_MAX_SKIPPED_DEFAULT;
		dp_err e;
		snprintf(text, sizeof text, "--max-skipped %s", lim);
		O.gates = cli_realloc(O.gates, (O.ngates + 1) * sizeof *O.gates);
		if (dp_gate_max_skipped(lim, &O.gates[O.ngates], &e) < 0)
			cli_job_usage_error("--max-skipped %s", e.msg);
		cli_push(&O.gate_text, &O.ngates, text);
	}
}

static int is_stream(const char *path)
{
	struct stat st;
	return !strcmp(path, "-") || (stat(path, &st) == 0 && !S_ISREG(st.st_mode) &&
				      !S_ISDIR(st.st_mode));
}

/* Data named by {rank} is each worker's own: no splitting. */
static int data_per_worker(void)
{
	int own = O.data_cmd && strstr(O.data_cmd, "{rank");
	for (size_t i = 0; i < O.ndata; i++)
		own |= strstr(O.data[i], "{rank") != NULL;
	return own;
}

/* The backend and the job (MPI under a launcher), and what the number of
 * workers allows. */
static void join_job(void)
{
	dp_err e;
	R.be = dp_backend_default();
	if (!O.threads)
		O.threads = dp_default_threads(NULL, NULL);
	dp_backend_opts bo = {.threads = O.threads, .device = O.gpu, .precision = O.precision};
	char desc[256];
	if (R.be->open(&R.ctx, &bo, desc, sizeof desc, &e) < 0)
		cli_die_err(CLI_FAIL, &e);
	if (!(R.comm = dp_comm_open(R.be, R.ctx, &e)))
		cli_die_err(CLI_FAIL, &e);
	RANK = dp_comm_rank(R.comm);
	SIZE = dp_comm_size(R.comm);
	cli_set_rank(RANK, SIZE);
	if (SIZE > 1 && !data_per_worker())
		for (size_t i = 0; i < O.ndata; i++)
			if (is_stream(O.data[i]))
				cli_job_usage_error("%s: a stream cannot be split between %d workers: give "
					    "files, or --data-cmd (run by every worker)",
					    strcmp(O.data[i], "-") ? O.data[i] : "stdin", SIZE);
	if (SIZE > 1 && O.pred && (!strstr(O.pred, "{rank") || !strcmp(O.pred, "-")))
		cli_job_usage_error("--predictions %s: with %d workers, put {rank} in the name (one "
			    "file per worker)",
			    O.pred, SIZE);
}

/* Can this worker's outputs be created?  Checked before the work
 * (dp_out_check): its --predictions, and worker 0's --json. */
static void check_outputs(void)
{
	dp_err e;
	if (O.pred) { /* (p freed before an exit: LeakSanitizer's exit status is 1) */
		char *p = cli_expand(O.pred, NULL);
		int bad = dp_out_check(p, &e) < 0;
		free(p);
		if (bad)
			cli_die("--predictions %s", e.msg);
	}
	if (O.json && RANK == 0 && dp_out_check(O.json, &e) < 0)
		cli_die("--json %s", e.msg);
	if (O.json && O.pred) { /* one file: one of them would be lost */
		char *p = cli_expand(O.pred, NULL);
		int same = dp_same_output(O.json, p);
		free(p);
		if (same)
			cli_job_usage_error("--json %s and --predictions %s name one file: one would be lost",
					O.json, O.pred);
	}
}

/* Whether path (its links followed) is the same file as the checkpoint. */
static int same_file(const char *path, const char *other)
{
	struct stat a, b;
	return stat(path, &a) == 0 && S_ISREG(a.st_mode) && stat(other, &b) == 0 &&
	       a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* An output that is one of the inputs would replace it: refused, before
 * the evaluation. */
static void check_not_inputs(void)
{
	const char *opt[2] = {"--predictions", "--json"};
	char *path[2] = {O.pred ? cli_expand(O.pred, NULL) : NULL,
			 O.json && RANK == 0 ? cli_strdup(O.json) : NULL};
	for (int i = 0; i < 2; i++) {
		if (!path[i])
			continue;
		if (dp_data_reads(R.d, path[i]))
			cli_die("%s %s: is one of the files evaluated: it would be replaced", opt[i],
				path[i]);
		if (same_file(path[i], O.model))
			cli_die("%s %s: is the checkpoint: it would be replaced", opt[i], path[i]);
		free(path[i]);
	}
	/* the report (or - outputs) on standard output, redirected to an
	 * input: `dp-eval --model m d.tfr >> d.tfr` */
	if (RANK == 0 && (!O.quiet || (O.json && !strcmp(O.json, "-")) ||
			  (O.pred && !strcmp(O.pred, "-"))) &&
	    (dp_data_reads(R.d, "/proc/self/fd/1") || same_file("/proc/self/fd/1", O.model)))
		cli_die("stdout: is one of the inputs: writing there would damage it");
}

/* The model, and how its data is read: the options, else the
 * checkpoint's metadata, else dp-train's defaults. */
static void load_model(void)
{
	dp_err e;
	if (!(R.m = dp_model_load(O.model, R.be, R.ctx, O.batch, &R.ck, &e)))
		cli_die_err(CLI_FAIL, &e);
	R.cls = dp_model_loss_kind(R.m) == DP_LOSS_XENT;
	R.k = dp_model_out_size(R.m);
	/* how the records are read: the options, else the checkpoint's
	 * settings (dp_run_conf), else dp-train's defaults */
	static const int keys[] = {DP_RUN_FEATURE, DP_RUN_LABEL, DP_RUN_DECODE, DP_RUN_IMAGE,
				   DP_RUN_LAYOUT, DP_RUN_SCALE, DP_RUN_CLASSES, -1};
	dp_run_conf *c = &R.run;
	dp_run_conf_init(c);
	if ((c->given[DP_RUN_FEATURE] = !!O.in.feature))
		c->feature = O.in.feature;
	if ((c->given[DP_RUN_LABEL] = !!O.in.label))
		c->label = O.in.label;
	if ((c->given[DP_RUN_DECODE] = O.in.decode >= 0))
		c->decode = O.in.decode;
	if ((c->given[DP_RUN_LAYOUT] = O.in.hwc >= 0))
		c->hwc = O.in.hwc;
	if ((c->given[DP_RUN_SCALE] = !!O.in.scale_text))
		c->scale = O.in.scale, c->scale_text = O.in.scale_text;
	if (dp_run_conf_from(c, R.ck, keys, &e) < 0)
		cli_die("%s", e.msg);
	/* images: the checkpoint's settings, then the command line's */
	if (O.in.img_text && dp_image_spec_parse(&c->img, O.in.img_text, &e) < 0)
		cli_die("%s", e.msg);
	dp_image_tf_eval(&c->img, &R.img);
	if (c->decode == DP_DECODE_IMAGE && !O.in.feature && !c->from[DP_RUN_FEATURE])
		c->feature = "image/encoded"; /* tfrecord(5)'s names */
	if (c->decode == DP_DECODE_IMAGE && !O.in.label && !c->from[DP_RUN_LABEL])
		c->label = "image/class/label";
	R.feature = c->feature;
	R.label = c->label;
	R.decode = c->decode;
	R.hwc = c->hwc;
	R.scale = c->scale;
	R.scale_text = c->scale_text ? c->scale_text : "1";
}

/* The metrics, and the gates on them: every gate must name a metric of
 * this model (checked on a report of nothing, before anything is read). */
static void make_metrics(void)
{
	dp_err e;
	size_t k = R.k, topk = O.topk >= 0 ? (size_t)O.topk : (k > 5 ? 5 : 0);
	if (R.cls && topk >= k)
		cli_job_usage_error("--top-k %zu: want fewer than the model's %zu classes", topk, k);
	if (!R.cls && O.topk > 0)
		cli_job_usage_error("--top-k: '%s' is a regression model", O.model);
	if (O.classes && !R.cls)
		cli_job_usage_error("--classes: '%s' is a regression model", O.model);
	if (R.cls)
		load_classes(k, R.run.classes);
	if (!(R.ev = dp_eval_new_for(R.m, topk, &e)))
		cli_die_err(CLI_FAIL, &e);
	dp_eval_report stub = {0};
	stub.kind = dp_eval_kind(R.ev);
	stub.k = k;
	stub.topk = dp_eval_topk(R.ev);
	dp_eval_class *c = cli_calloc(k, sizeof *c);
	dp_eval_output *oo = cli_calloc(k, sizeof *oo);
	stub.classes = c;
	stub.outputs = oo;
	for (size_t i = 0; i < O.ngates; i++) {
		double v;
		if (dp_eval_metric(&stub, O.gates[i].metric, (const char *const *)NAMES, &v, &e) < 0)
			cli_job_usage_error("--require %s: %s", O.gate_text[i], e.msg);
	}
	free(c);
	free(oo);
}

/* The records, in order; worker r takes blocks r, r + size, ... of
 * --batch-size records (unless the data is its own), so that every batch
 * is one the single process would have seen. */
static void open_data(void)
{
	dp_err e;
	int own = data_per_worker();
	dp_data_opts o = {0};
	o.inputs = O.data;
	o.ninputs = O.ndata;
	o.cmd = O.data_cmd;
	o.feature = R.feature;
	o.label = R.label;
	o.decode = R.decode;
	o.scale = R.scale;
	o.in_size = dp_model_in_size(R.m);
	o.label_kind = R.cls ? DP_LABEL_CLASS : DP_LABEL_VECTOR;
	o.nclass = o.label_size = R.k;
	o.batch = O.batch;
	o.cache = DP_CACHE_NONE;
	o.prefetch = 1;
	if (SIZE > 1) { /* {rank}, {size} in paths: the job's */
		o.rank = RANK;
		o.size = SIZE;
	}
	o.shard_index = own ? 0 : (unsigned)RANK;
	o.shard_count = own ? 1 : (unsigned)SIZE;
	o.shard_block = O.batch;
	o.origins = O.pred != NULL;
	if (R.decode == DP_DECODE_IMAGE) /* each prediction names its image */
		o.sample_name = "image/filename";
	o.alloc = (void *(*)(void *, size_t))R.be->host_alloc;
	o.free = (void (*)(void *, void *))R.be->host_free;
	o.alloc_ctx = R.ctx;
	dp_shape in = dp_model_input(R.m);
	o.shape[0] = (size_t)in.c, o.shape[1] = (size_t)in.h, o.shape[2] = (size_t)in.w;
	if ((R.decode == DP_DECODE_IMAGE || R.hwc) && in.rank == 1)
		cli_die("%s: its input is a length (%zu), not C x H x W: no images or --layout hwc",
			O.model, dp_model_in_size(R.m));
	o.hwc = R.hwc;
	o.image = R.img;
	o.decode_threads = O.in.decode_given ? O.in.decode_threads
					     : dp_data_default_threads(R.be->caps & DP_CAP_HOST_MEMORY);
	o.skip_corrupt = O.in.skip_corrupt;
	o.rec.max_record = O.in.max_record;
	o.on_skip = cli_input_skipped;
	if (!(R.d = dp_data_open(&o, &e)))
		cli_die_err(CLI_FAIL, &e);
}

/* After each batch of the pass: its predictions, the progress bar. */
typedef struct progress {
	double t0;
	uint64_t done;
} progress;

static int each_batch(void *arg, const dp_eval_rows *r, dp_err *e)
{
	progress *pg = arg;
	const dp_batch *b = r->b;
	size_t k = R.k;
	if (O.pred)
		for (size_t i = 0; i < b->n; i++)
			pred_row(&R.po, dp_data_source(R.d, b->src[i]), b->rec[i],
				 b->name ? b->name[i] : NULL, R.cls,
				 R.cls ? b->y[i] : 0, R.cls ? r->pred[i] : 0, r->loss[i],
				 R.cls ? r->prob + i * k : r->out + i * k, R.cls ? NULL : b->t + i * k,
				 k);
	pg->done += b->n;
	char rate[DP_DOUBLE_BUF];
	if (cli_progress_due())
		cli_progress("%s: %" PRIu64 " samples, %s/s", cli.prog, pg->done,
			     dp_fmt_rate(pg->done / fmax(1e-9, dp_now() - pg->t0), rate, sizeof rate));
	return DP_OK;
}

/* The pass over the data, then the workers' metrics summed.  A failure is
 * kept until every worker has reported (a failure flag each, in the same
 * allreduce), so that all stop together, each with its own message. */
static void evaluate(void)
{
	dp_err e, fe = {0};
	progress pg = {dp_now(), 0};
	cli_progress_on(!O.quiet && RANK == 0 && isatty(STDERR_FILENO));
	int rc = dp_data_epoch(R.d, 0, 0, &fe);
	if (rc == 0)
		rc = dp_eval_data(R.ev, R.m, R.d, O.pred != NULL, each_batch, &pg, &fe);
	cli_progress_clear();
	int failed = rc < 0;
	double *flags = cli_calloc((size_t)SIZE, sizeof *flags);
	flags[RANK] = failed;
	/* the failing worker speaks before the allreduce: once it is done, a
	 * worker that ends the job first could have this one killed unheard */
	if (failed)
		cli_warn("%s", fe.msg);
	rc = dp_eval_allreduce(R.ev, R.comm, flags, (size_t)SIZE, &e);
	if (failed)
		cli_exit(CLI_FAIL);
	if (rc < 0)
		cli_die_err(CLI_FAIL, &e);
	for (int r = 0; r < SIZE; r++)
		if (flags[r] != 0)
			cli_die("stopped: worker %d failed", r);
	free(flags);
	if (dp_eval_report_get(R.ev, &R.rep, &e) < 0) {
		size_t nsrc = dp_data_nsources(R.d);
		cli_die("%s%s: no records to evaluate", nsrc ? dp_data_source(R.d, 0) : "input",
			nsrc > 1 ? " ..." : "");
	}
}

static void apply_gates(void)
{
	dp_err e;
	R.gr = cli_calloc(O.ngates + 1, sizeof *R.gr);
	for (size_t i = 0; i < O.ngates; i++) {
		gate_result *g = &R.gr[i];
		if (dp_eval_metric(&R.rep, O.gates[i].metric, (const char *const *)NAMES, &g->value,
				   &e) < 0)
			cli_die_err(CLI_FAIL, &e);
		g->passed = dp_gate_pass(&O.gates[i], g->value);
		R.gate_failed |= !g->passed;
	}
}

/* The files: this worker's predictions and worker 0's metrics JSON, all
 * or none (dp_out_commit_all: a destination that cannot be written is
 * named, and nothing lands). */
static void land_outputs(void)
{
	dp_out *outs[2], jo;
	size_t n = 0;
	dp_err e;
	if (O.pred) {
		pred_finish(&R.po);
		outs[n++] = &R.po.out;
	}
	if (O.json && RANK == 0) {
		dp_buf j = DP_BUF_INIT;
		json_report(&j, &R.rep, R.ck, R.m, R.d, R.feature, R.label, R.decode, R.scale_text,
			    R.gr);
		write_whole(&jo, O.json, &j);
		dp_buf_free(&j);
		outs[n++] = &jo;
	}
	if (dp_out_commit_all(outs, n, &e) < 0)
		cli_die_err(CLI_FAIL, &e);
	free(R.po.path);
}

/* Worker 0's report and failed gates. */
static void write_reports(void)
{
	if (RANK != 0)
		return;
	int to_stdout = (O.json && !strcmp(O.json, "-")) || (O.pred && !strcmp(O.pred, "-"));
	if (!O.quiet && !to_stdout) {
		dp_buf t = DP_BUF_INIT;
		text_report(&t, &R.rep, O.model, R.d, R.gr);
		if (t.err)
			cli_die("out of memory");
		fwrite(t.p, 1, t.len, stdout);
		dp_buf_free(&t);
	}
	char vb[40];
	for (size_t i = 0; i < O.ngates; i++)
		if (!R.gr[i].passed)
			cli_warn("gate %s failed: %s is %s", O.gate_text[i], O.gates[i].metric,
				 dp_eval_fmt_value(R.gr[i].value, vb, sizeof vb));
}

static int finish(void)
{
	free(R.gr);
	dp_data_close(R.d);
	dp_eval_free(R.ev);
	dp_model_free(R.m);
	dp_st_close(R.ck);
	dp_run_conf_free(&R.run);
	dp_comm_close(R.comm);
	R.be->close(R.ctx);
	free(O.data);
	free(O.gates);
	free(O.gate_text);
	free(NAMES);
	if (cli_close_stdout() < 0)
		return CLI_FAIL;
	return R.gate_failed ? EVAL_GATE_FAILED : CLI_OK;
}

/* ---- several models ----------------------------------------------------------------------
 *
 * Each checkpoint loaded (load_model, make_metrics for the first), all
 * reading their records alike (else one pass could not serve them), then
 * one pass of reading with every batch through every model
 * (dp_eval_data_many), the workers' sums added per model; a row each, the
 * JSON of each as dp-eval writes one, the best by --best, its gates and
 * its copy. */
static struct {
	size_t n, best;
	dp_model **m;
	dp_st **ck;
	dp_eval **ev;
	dp_eval_report *rep;
	double *value; /* --best's metric */
} MM;

/* What decides how a model's records are read, as text. */
static char *reading(void)
{
	char img[512] = "", in[64];
	dp_shape sh = dp_model_input(R.m);
	if (R.decode == DP_DECODE_IMAGE)
		dp_image_spec(&R.img, img, sizeof img);
	char *t = NULL;
	if (asprintf(&t, "feature %s, label %s, decode_raw %s, scale %s, layout %s, image %s, input %s, "
		     "%s %zu", R.feature, R.label, dp_decode_name(R.decode), R.scale_text,
		     R.hwc ? "hwc" : "chw", img, dp_shape_format(&sh, in, sizeof in),
		     R.cls ? "classes" : "outputs", R.k) < 0)
		cli_die("out of memory");
	return t;
}

static void many_load(void)
{
	dp_err e;
	MM.n = O.nmodels;
	MM.m = cli_calloc(MM.n, sizeof *MM.m);
	MM.ck = cli_calloc(MM.n, sizeof *MM.ck);
	MM.ev = cli_calloc(MM.n, sizeof *MM.ev);
	MM.rep = cli_calloc(MM.n, sizeof *MM.rep);
	MM.value = cli_calloc(MM.n, sizeof *MM.value);
	char *first = NULL;
	for (size_t i = 0; i < MM.n; i++) {
		O.model = O.models[i];
		if (i)
			dp_run_conf_free(&R.run);
		load_model();
		if (i == 0)
			make_metrics();
		else if (!(R.ev = dp_eval_new_for(R.m, dp_eval_topk(MM.ev[0]), &e)))
			cli_die_err(CLI_FAIL, &e);
		char *t = reading();
		if (i && strcmp(t, first))
			cli_job_usage_error("%s reads its records otherwise than %s (%s; not %s): one pass "
				    "cannot serve both; evaluate them apart", O.model, O.models[0], t, first);
		if (i)
			free(t);
		else
			first = t;
		MM.m[i] = R.m, MM.ck[i] = R.ck, MM.ev[i] = R.ev;
	}
	free(first);
	O.model = O.models[0];
	R.m = MM.m[0], R.ck = MM.ck[0], R.ev = MM.ev[0];
}

/* The pass, the sums over the workers, each model's report. */
static void many_evaluate(void)
{
	dp_err e, fe = {0};
	int rc = dp_data_epoch(R.d, 0, 0, &fe);
	if (rc == 0)
		rc = dp_eval_data_many(MM.ev, MM.m, MM.n, R.d, &fe);
	double *flags = cli_calloc((size_t)SIZE, sizeof *flags);
	flags[RANK] = rc < 0;
	if (rc < 0)
		cli_warn("%s", fe.msg);
	for (size_t i = 0; i < MM.n; i++)
		if (dp_eval_allreduce(MM.ev[i], R.comm, i ? NULL : flags, i ? 0 : (size_t)SIZE, &e) < 0)
			cli_die_err(CLI_FAIL, &e);
	if (rc < 0)
		cli_exit(CLI_FAIL);
	for (int r = 0; r < SIZE; r++)
		if (flags[r] != 0)
			cli_die("stopped: worker %d failed", r);
	free(flags);
	for (size_t i = 0; i < MM.n; i++)
		if (dp_eval_report_get(MM.ev[i], &MM.rep[i], &e) < 0)
			cli_die("%s: no records to evaluate", dp_data_nsources(R.d) ? dp_data_source(R.d, 0) : "input");
}

/* --best METRIC[:min|max]: MM.best, and every model's value. */
static void many_best(void)
{
	if (!O.best)
		return;
	char metric[128];
	const char *colon = strrchr(O.best, ':');
	int dir = 0; /* 1 higher, -1 lower, 0 by the name */
	if (colon && (!strcmp(colon, ":min") || !strcmp(colon, ":max")))
		dir = strcmp(colon, ":max") ? -1 : 1;
	snprintf(metric, sizeof metric, "%.*s", (int)(dir ? (size_t)(colon - O.best) : strlen(O.best)),
		 O.best);
	if (!dir) {
		static const char *const low[] = {"loss", "mse", "rmse", "mae", "skipped"};
		dir = 1;
		for (size_t i = 0; i < sizeof low / sizeof low[0]; i++)
			if (!strncmp(metric, low[i], strlen(low[i])))
				dir = -1;
	}
	dp_err e;
	for (size_t i = 0; i < MM.n; i++) {
		if (dp_eval_metric(&MM.rep[i], metric, (const char *const *)NAMES, &MM.value[i], &e) < 0)
			cli_job_usage_error("--best %s: %s", O.best, e.msg);
		double v = MM.value[i], b = MM.value[MM.best];
		if (i && !isnan(v) && (isnan(b) || (dir > 0 ? v > b : v < b)))
			MM.best = i; /* the first of equals */
	}
}

/* The metrics table: a row a model, the best marked. */
static void many_table(dp_buf *b)
{
	char nb[64];
	size_t nm = dp_eval_metric_count(&MM.rep[0]), w = 5;
	for (size_t i = 0; i < MM.n; i++)
		w = strlen(O.models[i]) > w ? strlen(O.models[i]) : w;
	dp_buf_printf(b, "  %-*s", (int)w, "model");
	int *cw = cli_calloc(nm + 1, sizeof *cw); /* each column as wide as its name */
	for (size_t j = 0; j < nm; j++) {
		double v;
		const char *name = dp_eval_metric_at(&MM.rep[0], j, nb, sizeof nb, &v);
		cw[j] = strlen(name) > 9 ? (int)strlen(name) : 9;
		dp_buf_printf(b, "  %*s", cw[j], name);
	}
	dp_buf_printf(b, "\n");
	for (size_t i = 0; i < MM.n; i++) {
		dp_buf_printf(b, "%c %-*s", O.best && i == MM.best ? '*' : ' ', (int)w, O.models[i]);
		for (size_t j = 0; j < nm; j++) {
			double v;
			dp_eval_metric_at(&MM.rep[i], j, nb, sizeof nb, &v);
			dp_buf_printf(b, v == floor(v) && fabs(v) < 1e12 ? "  %*.0f" : "  %*.6g", cw[j], v);
		}
		dp_buf_printf(b, "\n");
	}
	if (O.best)
		dp_buf_printf(b, "best by %s: %s (%.6g)\n", O.best, O.models[MM.best], MM.value[MM.best]);
	free(cw);
}

/* --copy-best: the checkpoint's bytes, whole or not at all. */
static void copy_best(void)
{
	dp_err e;
	dp_out o;
	const char *src = O.models[MM.best];
	int fd = open(src, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		cli_die("%s: %s", src, strerror(errno));
	if (dp_out_open(&o, O.copy_best, &e) < 0)
		cli_die_err(CLI_FAIL, &e);
	char buf[1 << 16];
	long n;
	while ((n = dp_read_full(fd, buf, sizeof buf, src, &e)) > 0)
		if (dp_write_all(o.fd, buf, (size_t)n, O.copy_best, &e) < 0)
			break;
	close(fd);
	if (n < 0 || e.code) {
		dp_out_abort(&o);
		cli_die_err(CLI_FAIL, &e);
	}
	if (dp_out_commit(&o, &e) < 0)
		cli_die_err(CLI_FAIL, &e);
}

static int many_models(void)
{
	many_load();
	open_data();
	check_not_inputs();
	many_evaluate();
	many_best();
	R.rep = MM.rep[MM.best];
	apply_gates();
	if (RANK == 0 && O.json) {
		dp_buf j = DP_BUF_INIT;
		dp_out jo;
		size_t ng = O.ngates;
		dp_buf_printf(&j, "{\"format\": \"dp-eval-models/1\", \"models\": [\n");
		for (size_t i = 0; i < MM.n; i++) {
			O.model = O.models[i];
			O.ngates = O.best && i == MM.best ? ng : 0; /* the gates are the best's */
			json_report(&j, &MM.rep[i], MM.ck[i], MM.m[i], R.d, R.feature, R.label, R.decode,
				    R.scale_text, R.gr);
			dp_buf_printf(&j, "%s", i + 1 < MM.n ? ",\n" : "");
		}
		O.ngates = ng;
		dp_buf_printf(&j, "]");
		if (O.best) {
			dp_buf_printf(&j, ",\n\"best\": {\"model\": ");
			jstr(&j, O.models[MM.best]);
			dp_buf_printf(&j, ", \"by\": ");
			jstr(&j, O.best);
			dp_buf_printf(&j, ", \"value\": ");
			dp_eval_json_num(&j, MM.value[MM.best]);
			dp_buf_printf(&j, "}");
		}
		dp_buf_printf(&j, "}\n");
		write_whole(&jo, O.json, &j);
		dp_buf_free(&j);
		if (dp_out_commit(&jo, NULL) < 0)
			cli_die("--json %s: cannot write it", O.json);
	}
	if (RANK == 0 && O.copy_best)
		copy_best();
	if (RANK == 0 && !O.quiet && !(O.json && !strcmp(O.json, "-"))) {
		dp_buf t = DP_BUF_INIT;
		many_table(&t);
		char vb[40];
		for (size_t i = 0; i < O.ngates; i++)
			dp_buf_printf(&t, "gate %s: %s %s\n", O.gate_text[i],
				      dp_eval_fmt_value(R.gr[i].value, vb, sizeof vb), R.gr[i].passed ? "passed" : "FAILED");
		if (t.err)
			cli_die("out of memory");
		fwrite(t.p, 1, t.len, stdout);
		dp_buf_free(&t);
	}
	for (size_t i = 0; i < MM.n; i++) {
		dp_eval_free(MM.ev[i]);
		dp_model_free(MM.m[i]);
		dp_st_close(MM.ck[i]);
	}
	R.ev = NULL, R.m = NULL, R.ck = NULL;
	free(MM.m), free(MM.ck), free(MM.ev), free(MM.rep), free(MM.value);
	return finish();
}

int main(int argc, char **argv)
{
	cli_blas_kernels(argv); /* OpenBLAS's kernels for this CPU */
	cli.prog = DP_PROG;
	cli.usage = usage_line;
	cli.before_msg = before_msg;
	dp_out_install_signal_cleanup();
	if (dp_comm_launched()) { /* who speaks for the job, before it is joined */
		int r = -1, z = -1;
		dp_rank_size(&r, &z);
		RANK = r;
		cli_set_rank(r, 1); /* rank 0 speaks for the job; no "rank N: " yet */
	}
	sm_eval_args(&argc, &argv, longopts); /* --sagemaker: the job's files as options */
	parse_args(argc, argv);
	if (O.check) {
		if (O.nmodels || O.ndata || O.data_cmd || O.json || O.pred)
			cli_job_usage_error("--check reads a metrics JSON: no --model, --data, --json or "
				    "--predictions with it");
		if (!O.ngates)
			cli_job_usage_error("--check needs at least one --require gate");
		return check_mode();
	}
	check_args();
	join_job();
	check_outputs();
	if (O.nmodels > 1 || O.best)
		cli_exit(many_models());
	load_model();
	make_metrics();
	open_data();
	check_not_inputs();
	if (O.pred)
		pred_open(&R.po);
	evaluate();
	apply_gates();
	land_outputs();
	write_reports();
	cli_exit(finish()); /* a failure by way of cli_exit: cli.failure_file */
}
