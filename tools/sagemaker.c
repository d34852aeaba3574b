/*
 * sagemaker.c - the SageMaker container contract for dp-train and dp-eval:
 * see sagemaker.h, and SAGEMAKER in dp-train(1) and dp-eval(1).
 *
 * A training job (under ROOT, /opt/ml):
 *   input/config/hyperparameters.json  every value a string (some
 *                           JSON-quoted): each key an option of dp-train
 *                           ('_' or '-'), sagemaker_* keys ignored; SM_HPS
 *                           (the training toolkit's) instead when set
 *   input/config/inputdataconfig.json  the channels and their
 *                           TrainingInputMode (File, FastFile, Pipe) and
 *                           S3DistributionType; without it, the folders of
 *                           input/data are File-mode channels
 *   input/config/resourceconfig.json   hosts, current_host (SM_HOSTS,
 *                           SM_CURRENT_HOST)
 *   input/data/CHANNEL/...  File mode: every file below, in name order
 *                           (SM_CHANNEL_<NAME> instead when set)
 *   input/data/CHANNEL_N    Pipe mode: the FIFO of epoch N, from 0
 *   model/                  the final checkpoint (SM_MODEL_DIR)
 *   checkpoints/            when it exists: the checkpoint of each epoch,
 *                           resumed from when it is there at the start
 *   output/failure          the failure's message
 *   output/data/            relative log and timeline names (SM_OUTPUT_DATA_DIR)
 * A processing job (dp-eval):
 *   processing/input/model/ a .safetensors file, or a model.tar.gz (a
 *                           training job's) holding one
 *   processing/input/test/  the records (or processing/input/data/)
 *   processing/evaluation/evaluation.json  the metrics JSON
 *   config/resourceconfig.json  one instance
 *   output/message          the failure's message
 * Limits: a tar member is found by its ustar or GNU long name (not a pax
 * "path" record); hyperparameters give each option one value.
 */
#define _GNU_SOURCE
#include "sagemaker.h"
#include "cli.h"
#include "dp.h"
#include "dp_ckpt.h"
#include "dp_comm.h"
#include "dp_tar.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- a growing argv, NULL-terminated -------------------------------------- */

typedef struct args {
	const char **v; /* NULL-terminated (cli_push); the strings malloc'd but argv's */
	size_t n;
} args;

static char *vfmt(const char *fmt, va_list ap)
{
	char *s;
	if (vasprintf(&s, fmt, ap) < 0)
		cli_die("out of memory");
	return s;
}

static char * __attribute__((format(printf, 1, 2))) fmt(const char *f, ...)
{
	va_list ap;
	va_start(ap, f);
	char *s = vfmt(f, ap);
	va_end(ap);
	return s;
}

static void __attribute__((format(printf, 2, 3))) add(args *a, const char *f, ...)
{
	va_list ap;
	va_start(ap, f);
	cli_push(&a->v, &a->n, vfmt(f, ap));
	va_end(ap);
}

/* Whether a gives option --name (as "--name", "--name=V"; -o for output). */
static int gave(const args *a, const char *name)
{
	size_t l = strlen(name);
	for (size_t i = 0; i < a->n; i++) {
		const char *s = a->v[i];
		if (!strncmp(s, "--", 2) && !strncmp(s + 2, name, l) && (!s[2 + l] || s[2 + l] == '='))
			return 1;
		if (!strcmp(name, "output") && !strncmp(s, "-o", 2))
			return 1;
	}
	return 0;
}

/* ---- files and the environment -------------------------------------------- */

static int exists(const char *p)
{
	return access(p, F_OK) == 0;
}

/* A JSON file of the job (NULL when it is not there and not required). */
static json_t *load(const char *file, int required)
{
	json_error_t je;
	if (!required && !exists(file) && errno == ENOENT)
		return NULL;
	json_t *j = json_load_file(file, 0, &je);
	if (!j)
		cli_die("%s: line %d: %s", file, je.line, je.text);
	return j;
}

/* A JSON environment variable (SM_HPS, SM_HOSTS), or NULL. */
static json_t *env_json(const char *var)
{
	json_error_t je;
	const char *s = dp_env(var);
	if (!s)
		return NULL;
	json_t *j = json_loads(s, JSON_DECODE_ANY, &je);
	if (!j)
		cli_die("$%s: not JSON: %s", var, je.text);
	return j;
}

/* s as one word of the shell (dp_shell_quote), malloc'd. */
static char *sh_quote(const char *s)
{
	dp_buf b = DP_BUF_INIT;
	dp_shell_quote(&b, s);
	char *r = dp_buf_take(&b);
	if (!r)
		cli_die("out of memory");
	return r;
}

/* Every file below dir (not those whose name begins with '.'), in name
 * order, folders in place, added as --opt=PATH (dp_walk: each folder once,
 * a link loop an error); their number. */
typedef struct files_ctx {
	args *a;
	const char *opt;
	size_t count;
} files_ctx;

static int add_file(void *ctx, const dp_walk_entry *w, dp_err *e)
{
	files_ctx *f = ctx;
	if (S_ISREG(w->st->st_mode)) {
		add(f->a, "--%s=%s", f->opt, w->path);
		f->count++;
	}
	return DP_OK;
}

static size_t add_files(args *a, const char *opt, const char *dir)
{
	files_ctx f = {a, opt, 0};
	dp_err e;
	if (dp_walk(dir, add_file, &f, &e) < 0)
		cli_die("%s", e.msg);
	return f.count;
}

/* ---- hyperparameters ------------------------------------------------------- */

/* A hyperparameter's value as text: SageMaker passes strings, which the
 * Python SDK JSON-quotes ("\"dense:10\""): a string that is a JSON string
 * is that string; numbers and true/false (from other clients) their text. */
static char *hp_text(const char *src, const char *key, json_t *v)
{
	if (json_is_string(v)) {
		const char *s = json_string_value(v);
		size_t l = strlen(s);
		if (l >= 2 && s[0] == '"' && s[l - 1] == '"') {
			json_t *in = json_loads(s, JSON_DECODE_ANY, NULL);
			if (json_is_string(in)) {
				char *r = cli_strdup(json_string_value(in));
				json_decref(in);
				return r;
			}
			json_decref(in);
		}
		return cli_strdup(s);
	}
	if (json_is_integer(v))
		return fmt("%" JSON_INTEGER_FORMAT, json_integer_value(v));
	if (json_is_real(v)) {
		char b[40];
		return cli_strdup(dp_fmt_double(json_real_value(v), b, sizeof b));
	}
	if (json_is_boolean(v))
		return cli_strdup(json_is_true(v) ? "true" : "false");
	cli_usage_error("%s: hyperparameter '%s': want a string, a number or true/false", src, key);
}

/* The hyperparameters (a JSON object, from src) as options of tool,
 * added to a.  A switch (an option without a value) is given by true
 * (True, 1) and left out by false (False, 0).  Relative names given to
 * the options of path_keys are put under outdir. */
static void add_hps(args *a, const struct option *opts, const char *tool, const char *src,
		    json_t *hps, const char *const *path_keys, const char *outdir)
{
	const char *key;
	json_t *v;
	if (!json_is_object(hps))
		cli_usage_error("%s: want a JSON object of hyperparameters", src);
	json_object_foreach(hps, key, v) {
		if (!strncmp(key, "sagemaker_", 10) || !strcmp(key, "_tuning_objective_metric"))
			continue; /* SageMaker's own, and its tuner's */
		char name[64];
		snprintf(name, sizeof name, "%s", key);
		for (char *p = name; *p; p++)
			if (*p == '_')
				*p = '-';
		const struct option *o = opts;
		while (o->name && strcmp(o->name, name))
			o++;
		if (!o->name || strlen(key) >= sizeof name || !strcmp(name, "help") ||
		    !strcmp(name, "version"))
			cli_usage_error("%s: hyperparameter '%s': not an option of %s (%s --help lists "
					"them; sagemaker_* keys are ignored)",
					src, key, tool, tool);
		char *val = hp_text(src, key, v);
		if (o->has_arg == no_argument) {
			if (!strcmp(val, "true") || !strcmp(val, "True") || !strcmp(val, "1"))
				add(a, "--%s", name);
			else if (strcmp(val, "false") && strcmp(val, "False") && strcmp(val, "0"))
				cli_usage_error("%s: hyperparameter '%s' is '%s': --%s is a switch: "
						"want true or false",
						src, key, val, name);
		} else {
			int rel = 0;
			for (int i = 0; path_keys && path_keys[i]; i++)
				rel |= !strcmp(name, path_keys[i]) && val[0] && val[0] != '/' &&
				       strcmp(val, "-");
			if (rel)
				add(a, "--%s=%s/%s", name, outdir, val);
			else
				add(a, "--%s=%s", name, val);
		}
		free(val);
	}
}

/* ---- the mode, the root, the hosts ----------------------------------------- */

/* Take --sagemaker[=ROOT] out of argv (and, for dp-train, SageMaker's
 * word "train"): whether SageMaker mode is asked for. */
static int take_mode(int *argc, char **argv, const char *word, const char **root)
{
	int on = 0, j = 1;
	*root = NULL;
	for (int i = 1; i < *argc; i++) {
		if (!strcmp(argv[i], "--")) {
			while (i < *argc)
				argv[j++] = argv[i++];
			break;
		}
		if (!strcmp(argv[i], "--sagemaker"))
			on = 1;
		else if (!strncmp(argv[i], "--sagemaker=", 12))
			on = 1, *root = argv[i] + 12;
		else
			argv[j++] = argv[i];
	}
	if (word && j >= 2 && !strcmp(argv[1], word) && (on || j == 2)) {
		/* `docker run IMAGE train` with ENTRYPOINT dp-train [--sagemaker],
		 * `docker run IMAGE serve` with dp-serve */
		on = 1;
		memmove(argv + 1, argv + 2, (size_t)(j - 2) * sizeof *argv);
		j--;
	}
	if (!on)
		return 0;
	*argc = j;
	argv[j] = NULL;
	if (!*root)
		*root = dp_setting("DP_SAGEMAKER_ROOT");
	if (!*root || !**root)
		*root = "/opt/ml";
	return 1;
}

/* The number of hosts of the job (resourceconfig.json, or SM_HOSTS and
 * SM_CURRENT_HOST); 1 when it says none.  hosts_text: "algo-1, algo-2". */
static int job_hosts(const char *conf, char *hosts_text, size_t len)
{
	json_t *rc = load(conf, 0), *hosts = env_json("SM_HOSTS");
	const char *cur = dp_env("SM_CURRENT_HOST");
	if (!hosts && rc)
		hosts = json_incref(json_object_get(rc, "hosts"));
	if (!cur && rc)
		cur = json_string_value(json_object_get(rc, "current_host"));
	int n = 0, found = 0;
	size_t i;
	json_t *h;
	hosts_text[0] = 0;
	if (hosts && !json_is_array(hosts))
		cli_die("%s: \"hosts\" is not a list", dp_env("SM_HOSTS") ? "$SM_HOSTS" : conf);
	json_array_foreach(hosts, i, h) {
		const char *s = json_string_value(h);
		if (!s)
			cli_die("%s: a host that is not a string", dp_env("SM_HOSTS") ? "$SM_HOSTS" : conf);
		size_t l = strlen(hosts_text);
		snprintf(hosts_text + l, len - l, "%s%s", n ? ", " : "", s);
		found |= cur && !strcmp(cur, s);
		n++;
	}
	if (n && cur && !found)
		cli_die("%s: current host '%s' is not one of the hosts (%s)", conf, cur, hosts_text);
	json_decref(hosts);
	json_decref(rc);
	return n ? n : 1;
}

/* The argv given back: argv[0], the job's options (derived), the
 * hyperparameters' (hps), the command line's (user). */
static void hand_back(int *argc, char ***argv, args *derived, args *hps, args *user)
{
	args out = {0};
	cli_push(&out.v, &out.n, (*argv)[0]);
	for (args *p = derived; p; p = p == derived ? hps : p == hps ? user : NULL)
		for (size_t i = 0; i < p->n; i++)
			cli_push(&out.v, &out.n, p->v[i]);
	free(derived->v);
	free(hps->v);
	free(user->v);
	static char **keep; /* the program's for as long as it runs (reachable) */
	keep = (char **)out.v; /* main's argv: its strings are not written to */
	*argc = (int)out.n;
	*argv = keep;
}

static void user_args(args *user, int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		cli_push(&user->v, &user->n, argv[i]);
}

/* ---- dp-train: a training job ---------------------------------------------- */

/* A File-mode channel's folder: SM_CHANNEL_<NAME>, else ROOT/input/data/NAME. */
static char *channel_dir(const char *root, const char *name)
{
	char var[128];
	int l = snprintf(var, sizeof var, "SM_CHANNEL_%s", name);
	for (int i = 11; i < l && i < (int)sizeof var; i++)
		var[i] = (char)(var[i] == '-' ? '_' : var[i] >= 'a' && var[i] <= 'z' ? var[i] - 32 : var[i]);
	return dp_env(var) ? cli_strdup(dp_env(var)) : fmt("%s/input/data/%s", root, name);
}

/* The job's File-mode channels, by name, and their folders: hyperparameters
 * name files in them ("init": "pretrained/resnet18.pth"). */
static args chan_names, chan_dirs;

/* A channel's records as dp-train's option opt ("train", "val"). */
static void add_channel(args *a, const char *root, const char *name, const char *mode,
			const char *wrap, const char *opt, uint64_t first)
{
	if (!strcmp(mode, "Pipe")) {
		if (wrap && strcmp(wrap, "None"))
			cli_usage_error("channel '%s': RecordWrapperType %s: dp-train reads TFRecord "
					"files as they are: want None",
					name, wrap);
		/* the FIFO of the container's Nth epoch (from 0: a resumed run's
		 * first is 0 too) appears when SageMaker is ready to serve it:
		 * waited for up to 5 minutes */
		char *fifo = fmt("%s/input/data/%s", root, name), *q = sh_quote(fifo);
		free(fifo);
		add(a,
		    "--%s-cmd=p=%s_$(({epoch} - %" PRIu64 ")); i=0; while [ ! -p \"$p\" ] && "
		    "[ $i -lt 3000 ]; do sleep 0.1; i=$((i + 1)); done; exec cat -- \"$p\"",
		    opt, q, first + 1);
		free(q);
		return;
	}
	if (strcmp(mode, "File") && strcmp(mode, "FastFile"))
		cli_usage_error("channel '%s': TrainingInputMode '%s': want File, FastFile or Pipe",
				name, mode);
	char *dir = channel_dir(root, name);
	if (!cli_is_dir(dir))
		cli_die("channel '%s': %s: not a folder", name, dir);
	if (!add_files(a, opt, dir))
		cli_die("channel '%s': no files in %s", name, dir);
	free(dir);
}

/* Which of dp-train's inputs a channel is: "train", "val", or "" (test,
 * dp-eval's; any other, such as a fine-tuning job's "pretrained": its
 * files are there for the hyperparameters to name). */
static const char *channel_opt(const char *name)
{
	if (!strcmp(name, "train") || !strcmp(name, "training"))
		return "train";
	if (!strcmp(name, "validation") || !strcmp(name, "val"))
		return "val";
	return "";
}

/* The channels of inputdataconfig.json (or the folders of input/data). */
static void train_channels(args *d, const args *given, const char *root, int hosts, int size,
			   uint64_t first)
{
	char *conf = fmt("%s/input/config/inputdataconfig.json", root);
	json_t *cfg = load(conf, 0);
	if (!cfg) { /* the folders of input/data, File mode */
		cfg = json_object();
		char *dd = fmt("%s/input/data", root);
		DIR *dir = opendir(dd);
		struct dirent *de;
		while (dir && (de = readdir(dir)))
			if (de->d_name[0] != '.') {
				char *p = fmt("%s/%s", dd, de->d_name);
				if (cli_is_dir(p))
					json_object_set_new(cfg, de->d_name, json_object());
				free(p);
			}
		if (dir)
			closedir(dir);
		free(dd);
	}
	if (!json_is_object(cfg))
		cli_die("%s: want a JSON object of channels", conf);
	const char *name, *seen[2] = {NULL, NULL};
	json_t *c;
	int has_train = 0;
	json_object_foreach(cfg, name, c) {
		const char *opt = channel_opt(name);
		const char *mode = json_string_value(json_object_get(c, "TrainingInputMode"));
		const char *dist = json_string_value(json_object_get(c, "S3DistributionType"));
		const char *wrap = json_string_value(json_object_get(c, "RecordWrapperType"));
		int v = !strcmp(opt, "val");
		if (!mode || strcmp(mode, "Pipe")) { /* its files, for the hyperparameters */
			cli_push(&chan_names.v, &chan_names.n, cli_strdup(name));
			cli_push(&chan_dirs.v, &chan_dirs.n, channel_dir(root, name));
		}
		if (!*opt) {
			if (mode && !strcmp(mode, "Pipe") && strcmp(name, "test"))
				cli_usage_error("channel '%s' in Pipe mode: dp-train reads the channels "
						"train and validation, and takes the others as files: want "
						"File or FastFile",
						name);
			continue;
		}
		has_train |= !v;
		if (seen[v])
			cli_usage_error("channels '%s' and '%s': give one", seen[v], name);
		seen[v] = name;
		if (gave(given, opt) || gave(given, v ? "val-cmd" : "train-cmd"))
			continue; /* the hyperparameters or the command line name the data */
		mode = mode ? mode : "File";
		if (!strcmp(mode, "Pipe") && size > hosts)
			cli_usage_error("channel '%s' in Pipe mode: its FIFOs are one a host: run one "
					"rank a host, not %d ranks on %d host%s",
					name, size, hosts, hosts == 1 ? "" : "s");
		if (!v && dist && !strcmp(dist, "ShardedByS3Key") && hosts > 1) {
			if (size != hosts)
				cli_usage_error("channel '%s' is ShardedByS3Key: each host has its own "
						"share: run one rank a host, not %d ranks on %d hosts",
						name, size, hosts);
			add(d, "--no-shard-data"); /* the shares are the hosts' */
		}
		add_channel(d, root, name, mode, wrap, opt, first);
	}
	if (!has_train && !gave(given, "train") && !gave(given, "train-cmd")) {
		dp_buf names = DP_BUF_INIT;
		json_object_foreach(cfg, name, c) {
			dp_buf_addstr(&names, names.len ? ", " : "");
			dp_buf_shown(&names, name, strlen(name));
		}
		cli_usage_error("no training data: no channel train (or training)%s%s%s",
				names.len ? " (the job's channels: " : "", names.len ? names.p : "",
				names.len ? ")" : "");
	}
	json_decref(cfg);
	free(conf);
}

/* Collect every regular file of a channel (at most 8 named). */
typedef struct chan_files {
	size_t n;
	char *first;
	dp_buf names;
} chan_files;

static int chan_file(void *ctx, const dp_walk_entry *w, dp_err *e)
{
	chan_files *f = ctx;
	if (!S_ISREG(w->st->st_mode))
		return DP_OK;
	if (!f->n++)
		f->first = cli_strdup(w->path);
	if (f->n <= 8) {
		dp_buf_addstr(&f->names, f->n > 1 ? ", " : "");
		dp_buf_shown(&f->names, w->rel, strlen(w->rel));
	}
	return DP_OK;
}

/* Hyperparameters that name files (init, resume, @FILE of model and
 * classes) in the job's channels: "CHANNEL/PATH" is PATH in that
 * channel's folder, a lone "CHANNEL" its one file.  Other values are left
 * as they are. */
static void channel_files(args *h, const char *src)
{
	static const char *const keys[] = {"--init=", "--resume=", "--model=@", "--classes=@", NULL};
	for (size_t i = 0; i < h->n; i++)
		for (const char *const *k = keys; *k; k++) {
			size_t kl = strlen(*k);
			const char *v = h->v[i];
			if (strncmp(v, *k, kl) || v[kl] == '/' || !v[kl])
				continue;
			v += kl;
			size_t cl = strcspn(v, "/");
			for (size_t c = 0; c < chan_names.n; c++) {
				if (strlen(chan_names.v[c]) != cl || strncmp(chan_names.v[c], v, cl))
					continue;
				char *to;
				if (v[cl] == '/') {
					to = fmt("%.*s%s%s", (int)kl, h->v[i], chan_dirs.v[c], v + cl);
				} else {
					chan_files f = {0, NULL, DP_BUF_INIT};
					dp_err e;
					if (dp_walk(chan_dirs.v[c], chan_file, &f, &e) < 0)
						cli_die("%s", e.msg);
					if (f.n != 1)
						cli_usage_error("%s: hyperparameter '%.*s' names channel '%s', "
								"which holds %zu files%s%s%s: name one, "
								"'%s/FILE'",
								src, (int)(kl - 3 - (k[0][kl - 1] == '@')),
								h->v[i] + 2, chan_names.v[c], f.n,
								f.n ? " (" : "", f.n ? f.names.p : "",
								f.n > 8 ? ", ...)" : f.n ? ")" : "",
								chan_names.v[c]);
					to = fmt("%.*s%s", (int)kl, h->v[i], f.first);
					free(f.first);
					dp_buf_free(&f.names);
				}
				free((char *)h->v[i]);
				h->v[i] = to;
				break;
			}
		}
}

/* ROOT/checkpoints, when it exists: --checkpoint there, and --resume from
 * it when a checkpoint is there (a restarted job), in place of the
 * hyperparameters' --init and --reset (a fine-tuning job restarted, as a
 * managed-spot job is, simply resumes).
 * Returns the epoch (from 0) the run resumes at: 0 when it does not. */
static uint64_t resume_from(args *d, args *h, const args *given, const char *root)
{
	char *ckd = fmt("%s/checkpoints", root), *ck = fmt("%s/checkpoint.safetensors", ckd);
	uint64_t first = 0;
	if (cli_is_dir(ckd) && !gave(given, "checkpoint")) {
		add(d, "--checkpoint=%s", ck);
		if (exists(ck) && !gave(given, "resume")) {
			dp_err e;
			dp_train_state ts;
			dp_st *st = dp_st_open(ck, &e);
			if (!st || dp_ckpt_train_state(st, &ts, &e) < 0)
				cli_die("%s", e.msg);
			dp_st_close(st);
			first = ts.epoch;
			add(d, "--resume=%s", ck);
			/* the weights come from the checkpoint: --init, and --reset
			 * (what --init leaves out), belong to the first start only */
			size_t j = 0;
			for (size_t i = 0; i < h->n; i++)
				if (strncmp(h->v[i], "--init=", 7) && strncmp(h->v[i], "--reset=", 8))
					h->v[j++] = h->v[i];
				else
					free((char *)h->v[i]);
			h->n = j;
			h->v[j] = NULL;
		}
	}
	free(ck);
	free(ckd);
	return first;
}

int sm_train_args(int *argc, char ***argv, const struct option *opts)
{
	const char *root;
	if (!take_mode(argc, *argv, "train", &root))
		return 0;
	cli.failure_file = fmt("%s/output/failure", root);
	cli_job_says(); /* what goes wrong here goes wrong on every rank */
	args d = {0}, h = {0}, u = {0};
	user_args(&u, *argc, *argv);

	/* the hyperparameters: SM_HPS, else the file */
	char *hpf = fmt("%s/input/config/hyperparameters.json", root);
	json_t *hps = env_json("SM_HPS");
	const char *src = hps ? "$SM_HPS" : hpf;
	if (!hps)
		hps = load(hpf, 0);
	static const char *const path_keys[] = {"log", "timeline", NULL};
	char *outdata = dp_env("SM_OUTPUT_DATA_DIR") ? cli_strdup(dp_env("SM_OUTPUT_DATA_DIR"))
						   : fmt("%s/output/data", root);
	if (hps)
		add_hps(&h, opts, "dp-train", src, hps, path_keys, outdata);
	json_decref(hps);

	/* the hosts and ranks */
	char hosts_text[1024];
	char *rcf = fmt("%s/input/config/resourceconfig.json", root);
	int hosts = job_hosts(rcf, hosts_text, sizeof hosts_text), rank = -1, size = -1;
	dp_rank_size(&rank, &size);
	if (hosts > 1 && !dp_comm_launched())
		cli_usage_error("a job of %d hosts (%s): dp-train --sagemaker must run under mpirun, "
				"started on the first host and reaching every host, one rank a host "
				"or more (SAGEMAKER in dp-train(1))",
				hosts, hosts_text);
	if (hosts > 1 && size < hosts)
		cli_usage_error("a job of %d hosts (%s) run by %d rank%s: want one rank a host or more",
				hosts, hosts_text, size, size == 1 ? "" : "s");
	const char *gpus = dp_env("SM_NUM_GPUS");
	if (gpus && atoi(gpus) > 1 && size == 1 && rank == 0)
		cli_warn("%s GPUs (SM_NUM_GPUS), one used: run under mpirun -np %s to use "
			 "them all (examples/sagemaker/entrypoint does)",
			 gpus, gpus);

	/* the data, the model, the checkpoints: where the rest says nothing */
	args given = {0};
	for (args *p = &h; p; p = p == &h ? &u : NULL)
		for (size_t i = 0; i < p->n; i++)
			cli_push(&given.v, &given.n, cli_strdup(p->v[i]));
	uint64_t first = resume_from(&d, &h, &given, root);
	train_channels(&d, &given, root, hosts, size, first);
	channel_files(&h, src);
	if (!gave(&given, "output")) {
		const char *md = dp_env("SM_MODEL_DIR");
		char *mdir = md ? cli_strdup(md) : fmt("%s/model", root);
		add(&d, "--output=%s/model.safetensors", mdir);
		free(mdir);
	}
	for (size_t i = 0; i < given.n; i++)
		free((char *)given.v[i]);
	free(given.v);
	free(rcf);
	free(hpf);
	free(outdata);
	hand_back(argc, argv, &d, &h, &u);
	return 1;
}

/* ---- dp-eval: a processing job --------------------------------------------- */

/* The first regular member of tar file path (gzip or not) whose name ends
 * in .safetensors (dp_tar.h), in an anonymous temporary file:
 * "/proc/self/fd/N". */
static char *tar_member(const char *path, int quiet)
{
	dp_err e;
	char name[4096];
	int in = open(path, O_RDONLY | O_CLOEXEC), out = in < 0 ? -1 : dp_tmpfile(NULL, &e);
	if (in < 0)
		cli_die("%s: %s", path, strerror(errno));
	if (out < 0)
		cli_die("%s: %s", path, e.msg);
	int rc = dp_tar_extract(in, path, ".safetensors", out, name, sizeof name, &e);
	close(in);
	if (rc < 0)
		cli_die("%s", e.msg);
	if (rc == 0)
		cli_die("%s: no member named *.safetensors (want a dp-train checkpoint)", path);
	if (!quiet)
		cli_warn("%s: the model is its member %s", path, name);
	return fmt("/proc/self/fd/%d", out);
}

/* The checkpoint in processing/input/model: a .safetensors file, else the
 * member of a .tar.gz. */
static char *eval_model(const char *dir, int quiet)
{
	args files = {0};
	char *st = NULL, *tgz = NULL;
	if (!cli_is_dir(dir))
		cli_die("%s: not a folder (the processing input of the model)", dir);
	add_files(&files, "", dir);
	for (size_t i = 0; i < files.n; i++) {
		const char *p = files.v[i] + 3, *dot = strrchr(p, '.');
		size_t l = strlen(p);
		if (dot && !strcmp(dot, ".safetensors")) {
			if (st)
				cli_die("%s: two checkpoints (%s, %s): give --model", dir, st, p);
			st = cli_strdup(p);
		} else if (!tgz && ((l > 7 && !strcmp(p + l - 7, ".tar.gz")) || (dot && !strcmp(dot, ".tgz")) ||
				    (dot && !strcmp(dot, ".tar")))) {
			tgz = cli_strdup(p);
		}
		free((char *)files.v[i]);
	}
	free(files.v);
	if (st) {
		free(tgz);
		return st;
	}
	if (!tgz)
		cli_die("%s: no .safetensors file and no model.tar.gz", dir);
	char *m = tar_member(tgz, quiet);
	free(tgz);
	return m;
}

int sm_eval_args(int *argc, char ***argv, const struct option *opts)
{
	const char *root;
	(void)opts;
	if (!take_mode(argc, *argv, NULL, &root))
		return 0;
	char *od = fmt("%s/output", root);
	mkdir(od, 0777); /* where the message goes: made when missing, if it can be */
	free(od);
	cli.failure_file = fmt("%s/output/message", root);
	cli_job_says();
	args d = {0}, h = {0}, u = {0};
	user_args(&u, *argc, *argv);
	char hosts_text[1024];
	char *rcf = fmt("%s/config/resourceconfig.json", root);
	int hosts = job_hosts(rcf, hosts_text, sizeof hosts_text);
	if (hosts > 1 && !dp_comm_launched())
		cli_usage_error("a processing job of %d instances (%s): dp-eval --sagemaker evaluates "
				"on one (InstanceCount 1), or under mpirun",
				hosts, hosts_text);
	char *in = fmt("%s/processing/input", root);
	if (!gave(&u, "model")) {
		char *md = fmt("%s/model", in);
		int quiet = gave(&u, "quiet");
		for (size_t i = 0; i < u.n; i++)
			quiet |= u.v[i][0] == '-' && u.v[i][1] != '-' && strchr(u.v[i], 'q');
		char *m = eval_model(md, quiet);
		add(&d, "--model=%s", m);
		free(m);
		free(md);
	}
	if (!gave(&u, "data") && !gave(&u, "data-cmd")) {
		char *td = fmt("%s/test", in);
		if (!cli_is_dir(td)) {
			free(td);
			td = fmt("%s/data", in);
		}
		if (!cli_is_dir(td))
			cli_die("%s/test: not a folder (the processing input of the records; or "
				"%s/data)",
				in, in);
		if (!add_files(&d, "data", td))
			cli_die("%s: no files", td);
		free(td);
	}
	if (!gave(&u, "json")) {
		char *ed = fmt("%s/processing/evaluation", root);
		if (mkdir(ed, 0777) < 0 && errno != EEXIST)
			cli_die("%s: %s", ed, strerror(errno));
		add(&d, "--json=%s/evaluation.json", ed);
		free(ed);
	}
	free(in);
	free(rcf);
	hand_back(argc, argv, &d, &h, &u);
	return 1;
}

/* ---- dp-serve: an inference endpoint --------------------------------------- */

int sm_serve_args(int *argc, char ***argv, const struct option *opts)
{
	const char *root;
	(void)opts;
	/* `serve` first, with or without options after it: dp-serve takes no
	 * other word there (its FILE operands come after --model) */
	static char sm[] = "--sagemaker";
	if (*argc >= 2 && !strcmp((*argv)[1], "serve"))
		(*argv)[1] = sm;
	if (!take_mode(argc, *argv, NULL, &root))
		return 0;
	args d = {0}, h = {0}, u = {0};
	user_args(&u, *argc, *argv);
	if (!gave(&u, "model")) {
		const char *md = dp_env("SM_MODEL_DIR");
		char *dir = md ? cli_strdup(md) : fmt("%s/model", root);
		int quiet = gave(&u, "quiet");
		char *m = eval_model(dir, quiet);
		add(&d, "--model=%s", m);
		free(m);
		free(dir);
	}
	/* the hosting contract's settings, when set */
	const char *port = dp_env("SAGEMAKER_BIND_TO_PORT"), *w = dp_env("SAGEMAKER_MODEL_SERVER_WORKERS"),
		   *t = dp_env("SAGEMAKER_MODEL_SERVER_TIMEOUT");
	if (port && *port && !gave(&u, "port"))
		add(&d, "--port=%s", port);
	if (w && *w && !gave(&u, "workers"))
		add(&d, "--workers=%s", w);
	if (t && *t && !gave(&u, "timeout"))
		add(&d, "--timeout=%s", t);
	if (!gave(&u, "bind"))
		add(&d, "--bind=0.0.0.0");
	hand_back(argc, argv, &d, &h, &u);
	return 1;
}
