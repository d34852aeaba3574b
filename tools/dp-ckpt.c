/*
 * dp-ckpt - look at checkpoints and move weights in and out of dptools.
 *
 *   dp-ckpt show CKPT          settings, tensors, parameter count
 *   dp-ckpt diff A B           tensor by tensor, with the largest difference
 *   dp-ckpt export CKPT -o F   the weights alone, in a format of formats[]
 *
 * A program of its own rather than options of dp-train or dp-eval: each
 * job here reads checkpoints and writes nothing a training run needs, and
 * it is the one place a new way in or out (a format) is added: a line of
 * cmds[] for a subcommand, a line of formats[] for an export format.  The
 * formats themselves are libdp's (dp_ckpt.h); see dp-ckpt(1).
 */
#define _GNU_SOURCE
#include "cli.h"
#include "dp.h"
#include "dp_ckpt.h"
#include "dp_onnx.h"
#include "dp_serve.h"

#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef DP_PROG
#define DP_PROG "dp-ckpt"
#endif

/* Exit status of diff when the checkpoints differ (dp-ckpt(1)). */
enum { EXIT_DIFFER = 3 };

static int write_onnx(const dp_st *ck, const char *path, dp_err *e);

/* ---- export formats: one line each -------------------------------------
 * name: --format's value; exts: the output names that choose it (a list
 * ending in NULL); write: ck's weights to path, whole or not at all. */
static const struct format {
	const char *name;
	const char *const *exts;
	const char *what;
	int (*write)(const dp_st *ck, const char *path, dp_err *e);
} formats[] = {
	{"safetensors", (const char *const[]){".safetensors", ".st", NULL},
	 "weights and settings, no training state", dp_ckpt_export_safetensors},
	{"pth", (const char *const[]){".pth", ".pt", NULL},
	 "a state_dict as torch.save writes it", dp_ckpt_export_pth},
	{"onnx", (const char *const[]){".onnx", NULL},
	 "the model for ONNX runtimes (dp_onnx.h): opset 13, dynamic batch", write_onnx},
};
#define NFORMATS (sizeof formats / sizeof formats[0])

/* ---- the command line ----------------------------------------------- */

enum { C_SHOW = 1, C_DIFF, C_IMPORT, C_EXPORT };

enum {
	OPT_JSON = 256, OPT_FORMAT, OPT_CLASSES, OPT_WEIGHTS, OPT_TOLERANCE, OPT_META, OPT_MODEL,
	OPT_SHAPE, OPT_LOSS
};

static struct {
	int cmd;
	int json, weights, meta, quiet;
	double tolerance; /* < 0: none (bits) */
	const char *output, *format, *classes;
	const char *model, *shape; /* import */
	int loss;
} O = {.tolerance = -1, .loss = DP_LOSS_XENT};

/* The options and the subcommands that take each. */
static const struct cli_cmd_option opts[] = {
	{"json", no_argument, OPT_JSON, CLI_CMD(C_SHOW) | CLI_CMD(C_DIFF)},
	{"weights", no_argument, OPT_WEIGHTS, CLI_CMD(C_DIFF)},
	{"tolerance", required_argument, OPT_TOLERANCE, CLI_CMD(C_DIFF)},
	{"meta", no_argument, OPT_META, CLI_CMD(C_DIFF)},
	{"quiet", no_argument, 'q', CLI_CMD(C_DIFF)},
	{"output", required_argument, 'o', CLI_CMD(C_EXPORT) | CLI_CMD(C_IMPORT)},
	{"format", required_argument, OPT_FORMAT, CLI_CMD(C_EXPORT)},
	{"model", required_argument, OPT_MODEL, CLI_CMD(C_IMPORT)},
	{"input-shape", required_argument, OPT_SHAPE, CLI_CMD(C_IMPORT)},
	{"loss", required_argument, OPT_LOSS, CLI_CMD(C_IMPORT)},
	{"classes", required_argument, OPT_CLASSES, CLI_CMD(C_EXPORT)},
};
#define NOPTS (sizeof opts / sizeof opts[0])

static void cmd_show(char **args, int n);
static void cmd_diff(char **args, int n);
static void cmd_import(char **args, int n);
static void cmd_export(char **args, int n);

/* The subcommands: one line each (and a paragraph of help()). */
static const struct cmd {
	const char *name;
	int nargs; /* operands it takes */
	const char *operands;
	void (*run)(char **args, int n);
} cmds[] = {
	[C_SHOW] = {"show", 1, "CKPT", cmd_show},
	[C_DIFF] = {"diff", 2, "A B", cmd_diff},
	[C_IMPORT] = {"import", 1, "FILE", cmd_import},
	[C_EXPORT] = {"export", 1, "CKPT", cmd_export},
};
#define NCMDS ((int)(sizeof cmds / sizeof cmds[0]))

static const char usage_line[] =
	"usage: dp-ckpt show|diff|import|export [OPTION]... CKPT...   (dp-ckpt --help lists "
	"every option)\n";

static void help(void)
{
	static char buf[8192]; /* whole, so a failed write is reported (cli_exit_stdout) */
	setvbuf(stdout, buf, _IOFBF, sizeof buf);
	printf("usage: dp-ckpt COMMAND [OPTION]... CKPT...\n"
	       "Look at checkpoints and move weights in and out of dptools.  A checkpoint is\n"
	       "a safetensors file (dp-train's, or any state_dict) or a file of torch.save (a\n"
	       "state_dict: .pth, .pt; read as torch.load(weights_only=True)); - is stdin.\n"
	       "\n"
	       "Commands:\n"
	       "  show CKPT          the settings (metadata), the tensors (name, dtype, shape,\n"
	       "                     role) and the parameter count\n"
	       "  diff A B           compare tensor by tensor: for each that differs, how many\n"
	       "                     values and the largest difference; exit 3 when they differ\n"
	       "  import FILE -o F   a state_dict (a .pth) as safetensors; with --model, as a\n"
	       "                     dp-train checkpoint of that model, checked tensor by tensor\n"
	       "  export CKPT -o F   write the weights alone (no optimizer state, no rng.state,\n"
	       "                     no training state) for other programs\n"
	       "\n"
	       "show and diff:\n"
	       "      --json             one JSON object instead of text\n"
	       "diff:\n"
	       "      --weights          compare the model's tensors only (not the optimizer's\n"
	       "                         state, not rng.state)\n"
	       "      --tolerance X      tensors whose largest difference is at most X count as\n"
	       "                         the same (default: only identical bits do)\n"
	       "      --meta             compare the metadata too\n"
	       "  -q, --quiet            print nothing; the exit status says\n"
	       "import:\n"
	       "      --model SPEC       the model the tensors are (dp-train's --model)\n"
	       "      --input-shape CxHxW  its input (or a length)\n"
	       "      --loss xent|mse    its loss (default xent)\n"
	       "import and export:\n"
	       "  -o, --output FILE      where to write (- is stdout)\n"
	       "export:\n"
	       "      --format ");
	for (size_t i = 0; i < NFORMATS; i++)
		printf("%s%s", i ? "|" : "", formats[i].name);
	printf("\n                         the output's format (default: by FILE's name:\n"
	       "                        ");
	for (size_t i = 0; i < NFORMATS; i++)
		for (const char *const *x = formats[i].exts; *x; x++)
			printf(" %s", *x);
	printf(")\n"
	       "      --classes NAMES    onnx: class names (comma-separated, or @FILE one a\n"
	       "                         line) into the file's metadata\n"
	       "\n"
	       "  -h, --help             this help\n"
	       "  -V, --version          the version\n"
	       "\n"
	       "Exit status: 0 success (diff: the same), 1 failure, 2 usage error, 3 diff:\n"
	       "the checkpoints differ.  See dp-ckpt(1).\n");
}

static void set_option(int c, const char *v, char **argv)
{
	switch (c) {
	case OPT_JSON: O.json = 1; break;
	case OPT_WEIGHTS: O.weights = 1; break;
	case OPT_TOLERANCE: O.tolerance = cli_real("--tolerance", v, 0, INFINITY); break;
	case OPT_META: O.meta = 1; break;
	case 'q': O.quiet = 1; break;
	case 'o': O.output = v; break;
	case OPT_FORMAT: O.format = v; break;
	case OPT_MODEL: O.model = v; break;
	case OPT_SHAPE: O.shape = v; break;
	case OPT_LOSS:
		if (!(O.loss = dp_loss_parse(v)))
			cli_bad_value("--loss", v, "xent or mse");
		break;
	case OPT_CLASSES: O.classes = v; break;
	default: cli_default_option(c, argv, help);
	}
}

/* The options into O (anywhere on the line) and the subcommand; returns
 * its operands, *nargs of them, checked against what it takes. */
static char **parse_args(int argc, char **argv, int *nargs)
{
	unsigned char used[NOPTS] = {0};
	cli_cmd_getopt(argc, argv, ":qo:hV", opts, NOPTS, used, set_option);
	if (optind >= argc)
		cli_usage_error("no command (show, diff, import, export)");
	for (int k = 1; k < NCMDS; k++)
		if (cmds[k].name && !strcmp(argv[optind], cmds[k].name))
			O.cmd = k;
	if (!O.cmd) {
		char *shown = dp_shown(argv[optind], strlen(argv[optind]));
		cli_usage_error("unknown command '%s' (show, diff, import, export)", shown ? shown : "?");
	}
	cli_cmd_check(opts, NOPTS, used, O.cmd, cmds[O.cmd].name);
	*nargs = argc - optind - 1;
	if (*nargs != cmds[O.cmd].nargs)
		cli_usage_error("%s takes %s", cmds[O.cmd].name, cmds[O.cmd].operands);
	return argv + optind + 1;
}

/* ---- helpers ------------------------------------------------------------ */

static dp_st *open_ckpt(const char *path)
{
	dp_err e;
	if (!strcmp(path, "-") && isatty(STDIN_FILENO))
		cli_die("stdin is a terminal: give a checkpoint file, or pipe one in");
	dp_st *ck = dp_st_open(path, &e);
	if (!ck)
		cli_die_err(CLI_FAIL, &e);
	return ck;
}

/* What a tensor is (dp_ckpt_role), as show says it. */
static const char *const role_names[] = {
	[DP_CK_PARAM] = "param",
	[DP_CK_BUFFER] = "buffer",
	[DP_CK_OPTIM] = "optimizer",
	[DP_CK_RNG] = "rng",
};

/* "[16, 12]" */
static void add_shape(dp_buf *b, const dp_st_tensor *t)
{
	dp_buf_addstr(b, "[");
	for (int d = 0; d < t->ndim; d++)
		dp_buf_printf(b, "%s%" PRId64, d ? ", " : "", t->shape[d]);
	dp_buf_addstr(b, "]");
}

/* Element i of t (row-major) as an index: "[3, 7]". */
static void add_index(dp_buf *b, const dp_st_tensor *t, size_t i)
{
	size_t idx[DP_ST_MAXDIM];
	for (int d = t->ndim - 1; d >= 0; d--) {
		idx[d] = t->shape[d] ? i % (size_t)t->shape[d] : 0;
		i = t->shape[d] ? i / (size_t)t->shape[d] : 0;
	}
	dp_buf_addstr(b, "[");
	for (int d = 0; d < t->ndim; d++)
		dp_buf_printf(b, "%s%zu", d ? ", " : "", idx[d]);
	dp_buf_addstr(b, "]");
}

/* A number as JSON has it (no NaN or infinity there: null). */
static void add_num(dp_buf *b, double v)
{
	char s[40];
	if (isfinite(v))
		dp_buf_addstr(b, dp_fmt_double(v, s, sizeof s));
	else
		dp_buf_addstr(b, O.json ? "null" : isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
}

/* A value of a tensor of dtype dt: the shortest text that reads back as
 * it, as a float32 for 32 bits and less. */
static void add_val(dp_buf *b, double v, int dt)
{
	char s[40];
	if (v == floor(v) && fabs(v) < 1e15) { /* integers (and whole floats) as such, not 1e+01 */
		dp_buf_printf(b, "%.0f", v);
		return;
	}
	if (!isfinite(v) || dp_dtype_size(dt) > 4) {
		add_num(b, v);
		return;
	}
	dp_buf_addstr(b, dp_fmt_float((float)v, s, sizeof s));
}

/* Text quoted from a file: escaped (dp_buf_shown) in text, a JSON string
 * in JSON. */
static void add_text(dp_buf *b, const char *s)
{
	if (O.json)
		dp_buf_json_str(b, s, strlen(s), 0);
	else
		dp_buf_shown(b, s, strlen(s));
}

static void put_out(dp_buf *b)
{
	dp_err e;
	if (b->err)
		cli_die("out of memory");
	if (dp_write_all(STDOUT_FILENO, b->p, b->len, "stdout", &e) < 0)
		cli_die_err(CLI_FAIL, &e);
	dp_buf_reset(b);
}

/* ---- show ------------------------------------------------------------- */

static void cmd_show(char **args, int n)
{
	(void)n;
	dp_st *ck = open_ckpt(args[0]);
	dp_buf b = DP_BUF_INIT;
	uint64_t count[DP_CK_RNG + 1] = {0}, ntens[DP_CK_RNG + 1] = {0}, bytes = 0;
	for (int i = 0; i < dp_st_count(ck); i++) {
		const dp_st_tensor *t = dp_st_at(ck, i);
		int r = dp_ckpt_role(ck, t->name);
		count[r] += dp_st_numel(t);
		ntens[r]++;
		bytes += t->nbytes;
	}
	if (O.json) {
		dp_buf_addstr(&b, "{\"file\":");
		add_text(&b, dp_st_name(ck));
		dp_buf_printf(&b, ",\"format\":\"%s\",\"tensors\":%d,\"bytes\":%" PRIu64
			      ",\"parameters\":%" PRIu64 ",\"buffers\":%" PRIu64
			      ",\"optimizer\":%" PRIu64 ",\"metadata\":{",
			      dp_st_format(ck), dp_st_count(ck), bytes, count[DP_CK_PARAM], count[DP_CK_BUFFER],
			      count[DP_CK_OPTIM]);
		for (int i = 0; i < dp_st_meta_count(ck); i++) {
			const char *k, *v;
			dp_st_meta_at(ck, i, &k, &v);
			dp_buf_addstr(&b, i ? "," : "");
			add_text(&b, k);
			dp_buf_addstr(&b, ":");
			add_text(&b, v);
		}
		dp_buf_addstr(&b, "},\"tensor_list\":[");
		for (int i = 0; i < dp_st_count(ck); i++) {
			const dp_st_tensor *t = dp_st_at(ck, i);
			dp_buf_addstr(&b, i ? ",{\"name\":" : "{\"name\":");
			add_text(&b, t->name);
			dp_buf_printf(&b, ",\"dtype\":\"%s\",\"shape\":", dp_dtype_name(t->dtype));
			add_shape(&b, t);
			dp_buf_printf(&b, ",\"role\":\"%s\"}", role_names[dp_ckpt_role(ck, t->name)]);
		}
		dp_buf_addstr(&b, "]}\n");
	} else {
		char sz[32];
		add_text(&b, dp_st_name(ck));
		dp_buf_printf(&b, ": %s, %d tensors, %s of values\n", dp_st_format(ck), dp_st_count(ck),
			      dp_fmt_size(bytes, sz, sizeof sz));
		dp_buf_printf(&b, "parameters: %" PRIu64 " in %" PRIu64 " tensors\n",
			      count[DP_CK_PARAM], ntens[DP_CK_PARAM]);
		dp_buf_printf(&b, "buffers: %" PRIu64 " in %" PRIu64 " tensors\n",
			      count[DP_CK_BUFFER], ntens[DP_CK_BUFFER]);
		if (ntens[DP_CK_OPTIM])
			dp_buf_printf(&b, "optimizer state: %" PRIu64 " in %" PRIu64 " tensors\n",
				      count[DP_CK_OPTIM], ntens[DP_CK_OPTIM]);
		if (dp_st_meta_count(ck))
			dp_buf_addstr(&b, "metadata:\n");
		for (int i = 0; i < dp_st_meta_count(ck); i++) {
			const char *k, *v;
			dp_st_meta_at(ck, i, &k, &v);
			dp_buf_addstr(&b, "  ");
			add_text(&b, k);
			dp_buf_addstr(&b, ": ");
			add_text(&b, v);
			dp_buf_addstr(&b, "\n");
		}
		dp_buf_addstr(&b, "tensors:\n");
		for (int i = 0; i < dp_st_count(ck); i++) {
			const dp_st_tensor *t = dp_st_at(ck, i);
			dp_buf_addstr(&b, "  ");
			add_text(&b, t->name);
			dp_buf_printf(&b, "\t%s\t", dp_dtype_name(t->dtype));
			add_shape(&b, t);
			dp_buf_printf(&b, "\t%s\n", role_names[dp_ckpt_role(ck, t->name)]);
		}
	}
	put_out(&b);
	dp_buf_free(&b);
	dp_st_close(ck);
}

/* ---- diff ------------------------------------------------------------- */

static int compared(const dp_st *ck, const char *name)
{
	int r = dp_ckpt_role(ck, name);
	return !O.weights || r == DP_CK_PARAM || r == DP_CK_BUFFER;
}

/* One difference found: a line of text, or an object of the "differences"
 * list. */
static void diff_open(dp_buf *b, int *ndiff, const char *kind, const char *name)
{
	if (O.json) {
		dp_buf_addstr(b, (*ndiff)++ ? ",{\"kind\":\"" : "{\"kind\":\"");
		dp_buf_printf(b, "%s\",\"name\":", kind);
		add_text(b, name);
	} else {
		(*ndiff)++;
		if (!strcmp(kind, "metadata"))
			dp_buf_addstr(b, "metadata ");
		add_text(b, name);
		dp_buf_addstr(b, ": ");
	}
}

static void diff_tensor(dp_buf *b, int *ndiff, const dp_st *x, const dp_st *y,
			const dp_st_tensor *a, double *worst, char **worst_name)
{
	const dp_st_tensor *t = dp_st_find(y, a->name);
	dp_st_diff d;
	if (!t) {
		diff_open(b, ndiff, "missing", a->name);
		if (O.json) {
			dp_buf_addstr(b, ",\"only_in\":");
			add_text(b, dp_st_name(x));
			dp_buf_addstr(b, "}");
		} else {
			dp_buf_addstr(b, "only in ");
			add_text(b, dp_st_name(x));
			dp_buf_addstr(b, "\n");
		}
		*worst = INFINITY;
		return;
	}
	if (dp_st_diff_tensors(a, t, &d) < 0) {
		diff_open(b, ndiff, "shape", a->name);
		dp_buf_printf(b, O.json ? ",\"a\":\"%s " : "%s ", dp_dtype_name(a->dtype));
		add_shape(b, a);
		dp_buf_printf(b, O.json ? "\",\"b\":\"%s " : " against %s ", dp_dtype_name(t->dtype));
		add_shape(b, t);
		dp_buf_addstr(b, O.json ? "\"}" : "\n");
		*worst = INFINITY;
		return;
	}
	if (!d.ndiff || d.max_abs <= O.tolerance)
		return;
	diff_open(b, ndiff, "values", a->name);
	if (O.json) {
		dp_buf_printf(b, ",\"differ\":%zu,\"of\":%zu,\"max_abs\":", d.ndiff, dp_st_numel(a));
		add_num(b, d.max_abs);
	} else {
		dp_buf_printf(b, "%zu of %zu values differ, the largest by %.6g", d.ndiff,
			      dp_st_numel(a), d.max_abs);
	}
	dp_buf_addstr(b, O.json ? ",\"at\":" : " at ");
	add_index(b, a, d.at);
	dp_buf_addstr(b, O.json ? ",\"a\":" : " (");
	add_val(b, d.a, a->dtype);
	dp_buf_addstr(b, O.json ? ",\"b\":" : " against ");
	add_val(b, d.b, a->dtype);
	dp_buf_addstr(b, O.json ? "}" : ")\n");
	if (d.max_abs > *worst || !*worst_name) {
		*worst = d.max_abs;
		free(*worst_name);
		*worst_name = cli_strdup(a->name);
	}
}

/* A metadata value, or its absence (NULL): null in JSON, "(none)" in text. */
static void add_meta_value(dp_buf *b, const char *v)
{
	if (v)
		add_text(b, v);
	else
		dp_buf_addstr(b, O.json ? "null" : "(none)");
}

/* The values of a metadata key in A and in B (NULL: not there), ending
 * what diff_open began: ,"a":V,"b":W} in JSON, "V against W" in text. */
static void diff_meta_values(dp_buf *b, const char *v, const char *w)
{
	dp_buf_addstr(b, O.json ? ",\"a\":" : "");
	add_meta_value(b, v);
	dp_buf_addstr(b, O.json ? ",\"b\":" : " against ");
	add_meta_value(b, w);
	dp_buf_addstr(b, O.json ? "}" : "\n");
}

static void diff_meta(dp_buf *b, int *ndiff, const dp_st *x, const dp_st *y)
{
	for (int i = 0; i < dp_st_meta_count(x); i++) {
		const char *k, *v, *w;
		dp_st_meta_at(x, i, &k, &v);
		if ((w = dp_st_meta(y, k)) && !strcmp(v, w))
			continue;
		diff_open(b, ndiff, "metadata", k);
		diff_meta_values(b, v, w);
	}
	for (int i = 0; i < dp_st_meta_count(y); i++) { /* keys only in B */
		const char *k, *v;
		dp_st_meta_at(y, i, &k, &v);
		if (dp_st_meta(x, k))
			continue;
		diff_open(b, ndiff, "metadata", k);
		diff_meta_values(b, NULL, v);
	}
}

static void cmd_diff(char **args, int n)
{
	(void)n;
	if (!strcmp(args[0], "-") && !strcmp(args[1], "-"))
		cli_usage_error("diff: stdin can be only one of A and B");
	dp_st *x = open_ckpt(args[0]), *y = open_ckpt(args[1]);
	dp_buf b = DP_BUF_INIT;
	int ndiff = 0, ncmp = 0;
	double worst = 0;
	char *worst_name = NULL;
	if (O.json)
		dp_buf_addstr(&b, "{\"differences\":[");
	for (int i = 0; i < dp_st_count(x); i++) {
		const dp_st_tensor *a = dp_st_at(x, i);
		if (!compared(x, a->name))
			continue;
		ncmp++;
		diff_tensor(&b, &ndiff, x, y, a, &worst, &worst_name);
	}
	for (int i = 0; i < dp_st_count(y); i++) { /* tensors only in B */
		const dp_st_tensor *t = dp_st_at(y, i);
		if (!compared(y, t->name) || dp_st_find(x, t->name))
			continue;
		ncmp++;
		diff_tensor(&b, &ndiff, y, x, t, &worst, &worst_name);
	}
	int tdiff = ndiff;
	if (O.meta)
		diff_meta(&b, &ndiff, x, y);
	if (O.json) {
		dp_buf_printf(&b, "],\"tensors\":%d,\"tensors_differ\":%d,\"same\":%s", ncmp, tdiff,
			      ndiff ? "false" : "true");
		if (worst_name) {
			dp_buf_addstr(&b, ",\"max_abs\":");
			add_num(&b, worst);
			dp_buf_addstr(&b, ",\"max_abs_tensor\":");
			add_text(&b, worst_name);
		}
		dp_buf_addstr(&b, "}\n");
	} else {
		dp_buf_printf(&b, "%d tensors compared, %d differ", ncmp, tdiff);
		if (worst_name) {
			dp_buf_printf(&b, "; the largest difference %.6g, in ", worst);
			add_text(&b, worst_name);
		}
		if (O.meta)
			dp_buf_printf(&b, "; %d metadata keys differ", ndiff - tdiff);
		dp_buf_addstr(&b, "\n");
	}
	if (!O.quiet)
		put_out(&b);
	dp_buf_free(&b);
	free(worst_name);
	dp_st_close(x);
	dp_st_close(y);
	if (cli_close_stdout() < 0)
		cli_exit(CLI_FAIL);
	cli_exit(ndiff ? EXIT_DIFFER : CLI_OK);
}

/* ---- export ----------------------------------------------------------- */

static const struct format *export_format(const char *out)
{
	if (O.format) {
		for (size_t i = 0; i < NFORMATS; i++)
			if (!strcmp(O.format, formats[i].name))
				return &formats[i];
		dp_buf names = DP_BUF_INIT;
		for (size_t i = 0; i < NFORMATS; i++)
			dp_buf_printf(&names, "%s%s", i ? ", " : "", formats[i].name);
		char *shown = dp_shown(O.format, strlen(O.format));
		cli_usage_error("--format: unknown format '%s' (%s)", shown ? shown : "?",
				names.p ? names.p : "");
	}
	size_t n = strlen(out);
	for (size_t i = 0; i < NFORMATS; i++)
		for (const char *const *x = formats[i].exts; *x; x++)
			if (n > strlen(*x) && !strcasecmp(out + n - strlen(*x), *x))
				return &formats[i];
	cli_usage_error("export: say --format (no format goes by the name of '%s')", out);
}

/* ONNX (dp_onnx.h), with --classes in its metadata. */
static int write_onnx(const dp_st *ck, const char *path, dp_err *e)
{
	dp_onnx_opts o = {0};
	char **names = NULL;
	size_t k = 0;
	if (O.classes) {
		if (dp_classes_parse(O.classes, &k, &names, e) < 0) {
			dp_preferr(e, "--classes");
			return DP_EARG;
		}
		o.classes = (const char *const *)names;
		o.nclasses = k;
	}
	int rc = dp_onnx_write(ck, &o, path, e);
	free(names);
	return rc;
}

static void cmd_export(char **args, int n)
{
	(void)n;
	dp_err e;
	if (!O.output)
		cli_usage_error("export: -o FILE is needed");
	const struct format *f = export_format(O.output);
	if (O.classes && f->write != write_onnx)
		cli_usage_error("--classes: for --format onnx (the %s format keeps no class names)",
				f->name);
	if (!strcmp(O.output, "-") && isatty(STDOUT_FILENO))
		cli_die("refusing to write a checkpoint to a terminal (redirect it, or -o FILE)");
	if (dp_out_check(O.output, &e) < 0) /* before reading a large checkpoint */
		cli_die_err(CLI_FAIL, &e);
	dp_st *ck = open_ckpt(args[0]);
	if (f->write(ck, O.output, &e) < 0)
		cli_die_err(CLI_FAIL, &e);
	dp_st_close(ck);
}

/* ---- import ------------------------------------------------------------ */

static void cmd_import(char **args, int n)
{
	(void)n;
	dp_err e;
	if (!O.output)
		cli_usage_error("import: -o FILE is needed");
	if (!O.model != !O.shape)
		cli_usage_error("import: --model and --input-shape go together");
	if (!strcmp(O.output, "-") && isatty(STDOUT_FILENO))
		cli_die("refusing to write a checkpoint to a terminal (redirect it, or -o FILE)");
	if (dp_out_check(O.output, &e) < 0)
		cli_die_err(CLI_FAIL, &e);
	dp_st *ck = open_ckpt(args[0]);
	if (dp_st_meta(ck, "format"))
		cli_die("%s: a dp-train checkpoint already (dp-ckpt export writes its weights alone)",
			dp_st_name(ck));
	char producer[64];
	snprintf(producer, sizeof producer, "dp-ckpt %s", dp_version());
	const char *meta[] = {"producer", producer, NULL};
	int rc = O.model ? dp_ckpt_import(ck, O.model, O.shape, O.loss, O.output, meta, &e)
			 : dp_ckpt_export_safetensors(ck, O.output, &e);
	if (rc < 0)
		cli_die_err(CLI_FAIL, &e);
	dp_st_close(ck);
}

int main(int argc, char **argv)
{
	cli.prog = DP_PROG;
	cli.usage = usage_line;
	dp_out_install_signal_cleanup();
	int nargs;
	char **args = parse_args(argc, argv, &nargs);
	cmds[O.cmd].run(args, nargs);
	cli_exit_stdout();
}
