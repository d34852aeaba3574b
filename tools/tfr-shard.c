/*
 * tfr-shard - split a TFRecord dataset into shards for N workers, into
 * train/val/test splits, shuffled or not.
 *
 * The pipeline, for every record of the inputs (files or stdin, any
 * compression):
 *
 *   read -> [order: as is | window shuffle | full shuffle] -> position p
 *        -> split (by seed from p, or by key hash) -> shard within the split
 *           (round-robin, contiguous, key hash, or by size) -> output
 *
 * With --folds K the "splits" are fold f's train and val, 2K of them: a
 * record's fold f is drawn by seed (dp_fold_at: folds of n/K records) or
 * by key hash (K equal parts); it goes to fold f's val and to every other
 * fold's train.
 *
 * Records are passed through as the frames they were read as (never
 * re-framed).  Every output is a temporary file beside its final name until
 * the whole run has succeeded; then all are renamed into place.  Contiguous
 * sharding needs the record count first: regular files are read twice
 * (a counting pass), anything else (stdin, pipes) is copied to an anonymous
 * temporary file.  The assignment rules live in libdp (dp_shard.h,
 * dp_hash.h, dp_shuffle.h); this file is options, plumbing and messages.
 */
#define _GNU_SOURCE
#include "cli.h"
#include "dp.h"
#include "dp_example.h"
#include "dp_hash.h"
#include "dp_record.h"
#include "dp_shard.h"
#include "dp_shuffle.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef DP_PROG
#define DP_PROG "tfr-shard"
#endif

#define MAX_OUTPUTS 100000
#define MAX_WARNINGS 20
#define DEFAULT_MEMORY (512ull << 20)

enum by { BY_ROUND_ROBIN, BY_CONTIGUOUS, BY_HASH, BY_SIZE };

/* ---- options ----------------------------------------------------------- */

static struct {
	uint64_t nshards;     /* 0: not given */
	const char *tmpl;     /* -o */
	int by;
	const char *by_feature;
	const char *split_spec;
	const char *split_feature; /* --split-by hash:F */
	const char *only;
	uint64_t folds;       /* --folds K (0: none) */
	int fold;             /* --fold F: only that fold's outputs (-1: all) */
	int shuffle;
	uint64_t window;
	uint64_t seed;
	uint64_t memory;
	const char *tmpdir;
	const char *take;
	int rank, size;
	uint64_t max_records, max_bytes;
	int comp, level;
	int skip_corrupt;
	uint64_t max_record; /* --max-record; 0: DP_MAX_RECORD_DEFAULT */
	int quiet;
	char **inputs;
	int ninputs;
} opt = {.by = -1, .memory = DEFAULT_MEMORY, .rank = -1, .size = -1, .comp = DP_COMP_NONE,
	 .level = -1, .fold = -1};

/* ---- state ------------------------------------------------------------- */

struct output {
	dp_out o;
	dp_writer *w;
	char *name; /* final name, kept for the summary */
	int opened, committed;
	uint64_t records, bytes; /* framed bytes */
	uint64_t out_bytes;      /* bytes in the file (compressed) */
	uint64_t flushed;        /* dp_writer_bytes at the last flush */
	int done;                /* takes no more records */
};

struct split {
	const char *name; /* NULL without --split */
	int fold;         /* --folds: the fold (train and val of each) */
	int selected;
	struct output *sh;
	size_t nsh, capsh; /* fixed mode: nshards (or 1 with --take) */
	uint64_t seen;     /* records of this split so far (their index j) */
	uint64_t count;    /* all records of this split (contiguous) */
	uint64_t written, bytes, dropped;
};

static struct {
	dp_splits splits; /* --split's; with --folds the K folds' */
	int nsplits; /* at least 1 (one unnamed split without --split); 2K with --folds */
	struct split sp[2 * DP_SPLIT_MAX];
	int take;            /* shard written with --take, or -1 */
	int fixed;           /* the number of shards is known up front */
	int width;           /* digits of {shard} */
	size_t remaining;    /* selected outputs not yet done */
	int stop;            /* nothing more can be written */
	uint64_t pos;        /* records that reached the assignment */
	uint64_t nread;      /* good records read (first pass) */
	uint64_t corrupt;
	int warnings;
	int quiet_warnings;  /* second pass: warned already */
	uint64_t counts[DP_SPLIT_MAX]; /* records of each split (of each fold) */
	uint64_t flush_every; /* 0: leave buffering to the writer */
	dp_example ex;
	dp_window *win;
	dp_shuffle *shuf;
	double t0;
	uint64_t read_bytes;
	char **dirs; /* directories this run made, in order: removed on failure */
	size_t ndirs, capdirs;
} g = {.take = -1};

/* ---- messages ---------------------------------------------------------- */

static void abort_outputs(int code);

static void warn_corrupt(const char *msg)
{
	if (g.quiet_warnings || opt.quiet)
		return;
	if (g.warnings < MAX_WARNINGS)
		cli_warn("%s", msg);
	else if (g.warnings == MAX_WARNINGS)
		cli_warn("further corrupt records are counted, not shown");
	g.warnings++;
}

static void show_progress(void)
{
	if (cli_progress_due())
		cli_progress("%s: %" PRIu64 " records, %.1f MiB read, %.0f s", cli.prog,
			     g.pos > g.nread ? g.pos : g.nread, g.read_bytes / 1048576.0,
			     dp_now() - g.t0);
}

static void help(void)
{
	printf("usage: " DP_PROG " [OPTION...] [FILE...]\n"
	       "Split TFRecord files (or stdin; gzip/zlib detected) into shards for N workers,\n"
	       "into train/val/test splits, shuffled or not.  Outputs appear whole or not at all.\n"
	       "\n"
	       "Shards:\n"
	       "  -n, --shards N           N shards (per split); default 1\n"
	       "  -o, --output TEMPLATE    output names: {shard} {nshards} (5 digits, as in\n"
	       "                           name-00003-of-00016; {shard:3}: 3 digits),\n"
	       "                           {split}, {rank}, {size}; no other {NAME};\n"
	       "                           '-' or none: stdout (one output only)\n"
	       "      --by MODE            round-robin (default): record j to shard j %% N;\n"
	       "                           contiguous: N runs of consecutive records;\n"
	       "                           hash:FEATURE: shard = hash of the feature's value %% N\n"
	       "      --max-records N      at most N records per shard; without -n: a new shard\n"
	       "                           every N records\n"
	       "      --max-bytes SIZE     at most SIZE bytes of records per shard (k, M, G);\n"
	       "                           without -n: a new shard when the next would pass SIZE\n"
	       "Splits:\n"
	       "      --split SPEC         NAME=RATIO,... e.g. train=0.8,val=0.1,test=0.1\n"
	       "      --split-by RULE      seed (default: exact proportions, random by --seed)\n"
	       "                           or hash:FEATURE (same value, same split)\n"
	       "      --only NAME          write only split NAME\n"
	       "      --folds K            K-fold cross-validation: K equal folds (by --seed, or\n"
	       "                           --split-by hash:FEATURE); fold F's val is fold F, its\n"
	       "                           train the other folds: splits train and val, {fold}\n"
	       "                           (0 to K-1) in -o\n"
	       "      --fold F             with --folds: write only fold F's train and val\n"
	       "Order:\n"
	       "      --shuffle            full seeded shuffle, spilling past --memory\n"
	       "      --shuffle-window N   cheaper: shuffle through a window of N records\n"
	       "      --seed S             seed of shuffles and splits (default 0)\n"
	       "      --memory SIZE        memory for --shuffle (default 512M)\n"
	       "      --tmpdir DIR         spill files (default $TMPDIR, else /tmp)\n"
	       "Workers:\n"
	       "      --take I/N           write only shard I of N (to stdout unless -o);\n"
	       "                           I and N may be {rank} and {size}\n"
	       "      --rank R, --size S   fill {rank}, {size} (default: from the environment)\n"
	       "Output:\n"
	       "  -z, --compress TYPE      none (default), gzip or zlib\n"
	       "      --level N            compression level 0-9\n"
	       "      --skip-corrupt       skip damaged records (counted) instead of failing\n"
	       "      --max-record SIZE    longest record accepted (default 256M; k, M, G)\n"
	       "  -q, --quiet              no summary on stderr\n"
	       "  -h, --help               this help\n"
	       "  -V, --version            version\n"
	       "\n"
	       "Exit status: 0 success, 1 failure (bad input, I/O), 2 usage.  See tfr-shard(1).\n");
}

/* ---- outputs ----------------------------------------------------------- */

/* On a fatal error (cli.on_fail): no output is left behind, nor any
 * directory this run made (rmdir: only while empty, newest first). */
static void abort_outputs(int code)
{
	(void)code;
	for (int s = 0; s < g.nsplits; s++)
		for (size_t k = 0; k < g.sp[s].nsh; k++) {
			struct output *o = &g.sp[s].sh[k];
			if (o->opened && !o->committed) {
				dp_writer_free(o->w);
				o->w = NULL;
				dp_out_abort(&o->o);
				o->opened = 0;
			}
		}
	while (g.ndirs > 0)
		rmdir(g.dirs[--g.ndirs]);
}

static int to_stdout(void)
{
	return !opt.tmpl || !strcmp(opt.tmpl, "-");
}

/* v in decimal, zero-padded to width digits (width < 32). */
static void pad(char *buf, size_t n, uint64_t v, int width)
{
	char d[24];
	int len = snprintf(d, sizeof d, "%" PRIu64, v);
	int z = width > len ? width - len : 0;
	snprintf(buf, n, "%.*s%s", z, "0000000000000000000000000000000", d);
}

/* -o with these values, every placeholder checked: an unknown name or a
 * bad width is a usage error. */
static char *tmpl_with(const char *shard, const char *nshards, const char *split, const char *fold_of)
{
	char rank[16], size[16];
	snprintf(rank, sizeof rank, "%d", opt.rank);
	snprintf(size, sizeof size, "%d", opt.size);
	const char *vars[] = {"shard", shard, "nshards", nshards, "split", split,
			      "rank",  rank,  "size",    size,    opt.folds ? "fold" : NULL, fold_of, NULL};
	dp_err e;
	char *name = dp_expand_strict(opt.tmpl, vars, &e);
	if (!name && e.code == DP_ENOMEM)
		cli_die("out of memory");
	if (!name)
		cli_usage_error("-o '%s': %s", opt.tmpl, e.msg);
	return name;
}

/* Which of {shard}, {nshards}, {split} the template uses (in any form,
 * {shard:3} too): the name changes with the value.  dir: in its directory
 * part. */
static int tmpl_uses(const char *var, int dir)
{
	const char *a[4] = {"00000", "00001", "a", "0"}, *b[4] = {"00000", "00001", "a", "0"};
	int i = !strcmp(var, "shard") ? 0 : !strcmp(var, "nshards") ? 1 : !strcmp(var, "split") ? 2 : 3;
	b[i] = i == 2 ? "b" : i == 3 ? "1" : "00002";
	char *x = tmpl_with(a[0], a[1], a[2], a[3]), *y = tmpl_with(b[0], b[1], b[2], b[3]);
	if (dir) { /* compare the directory parts only */
		char *sx = strrchr(x, '/'), *sy = strrchr(y, '/');
		*(sx ? sx : x) = 0;
		*(sy ? sy : y) = 0;
	}
	int uses = strcmp(x, y) != 0;
	free(x);
	free(y);
	return uses;
}

/* The output name for shard k of split s; nshards 0: leave {nshards}.
 * The placeholders were checked by tmpl_with at the start. */
static char *out_name(int s, uint64_t k, uint64_t nshards)
{
	char shard[64], ns[64], rank[16], size[16], fold[24];
	int width = g.width;
	snprintf(fold, sizeof fold, "%d", g.sp[s].fold);
	if (nshards) {
		int d = snprintf(ns, sizeof ns, "%" PRIu64, nshards);
		if (d > width)
			width = d;
	}
	pad(shard, sizeof shard, k, width);
	pad(ns, sizeof ns, nshards, width);
	snprintf(rank, sizeof rank, "%d", opt.rank);
	snprintf(size, sizeof size, "%d", opt.size);
	const char *vars[] = {"shard",   shard, "nshards", nshards ? ns : "{nshards}",
			      "split",   g.sp[s].name ? g.sp[s].name : "",
			      "rank",    rank,  "size",    size,
			      opt.folds ? "fold" : NULL, fold, NULL};
	return cli_expand(opt.tmpl, vars);
}

/* A directory make_parents made: remembered (abort_outputs removes it). */
static int remember_dir(void *ctx, const char *d, dp_err *e)
{
	cli_grow(&g.dirs, &g.capdirs, g.ndirs + 1, sizeof *g.dirs);
	g.dirs[g.ndirs++] = cli_strdup(d);
	return DP_OK;
}

/* mkdir -p of the directory part of path. */
static void make_parents(const char *path)
{
	dp_err e;
	if (dp_make_parents(path, remember_dir, NULL, &e) < 0)
		cli_die_err(CLI_FAIL, &e);
}

/* `tfr-shard f.tfr >> f.tfr` would read its own output for ever: an output
 * written in place (stdout, a /dev/fd/N) may not be one of the inputs.
 * One written through a temporary and a rename leaves its input whole until
 * the end, and may replace it. */
static void check_not_input(const dp_out *o)
{
	if (o->tmp)
		return;
	for (int i = 0; i < opt.ninputs; i++)
		cli_check_not_output(o, opt.inputs[i]);
}

static void open_output(struct output *o, const char *path)
{
	dp_err e;
	if (strcmp(path, "-") != 0)
		make_parents(path);
	if (dp_out_open(&o->o, path, &e) < 0)
		cli_die_err(CLI_FAIL, &e);
	o->opened = 1;
	if (o->o.tmp == NULL && isatty(o->o.fd))
		cli_die("stdout is a terminal: refusing to write TFRecords there (redirect it, or use -o)");
	check_not_input(&o->o);
	if (!(o->w = dp_writer_open_fd(o->o.fd, o->o.path, opt.comp, opt.level, &e)))
		cli_die_err(CLI_FAIL, &e);
}

static void finish_output(struct output *o)
{
	dp_err e;
	if (dp_writer_finish(o->w, &e) < 0)
		cli_die_err(CLI_FAIL, &e);
	o->out_bytes = dp_writer_out_bytes(o->w);
	dp_writer_free(o->w);
	o->w = NULL;
}

static struct output *add_shard(struct split *sp)
{
	size_t old = sp->capsh;
	cli_grow(&sp->sh, &sp->capsh, sp->nsh + 1, sizeof *sp->sh);
	memset(sp->sh + old, 0, (sp->capsh - old) * sizeof *sp->sh);
	return &sp->sh[sp->nsh++];
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Where an output lands, as one file: its device and inode when it
 * exists, else its directory's real path and its name. */
struct dest {
	dev_t dev;
	ino_t ino;
	char *where; /* NULL when it exists */
	const char *name;
};

static int cmp_dest(const void *a, const void *b)
{
	const struct dest *x = a, *y = b;
	if (x->dev != y->dev)
		return x->dev < y->dev ? -1 : 1;
	if (x->ino != y->ino)
		return x->ino < y->ino ? -1 : 1;
	return x->where && y->where ? strcmp(x->where, y->where) : (x->where != NULL) - (y->where != NULL);
}

/* Two output names that lead to one file (a symbolic link to another
 * shard, 'd/../x' and 'x') would have the later rename replace the earlier
 * shard: refused, naming both. */
static void check_distinct(void)
{
	size_t n = 0, cap = 0;
	struct dest *d = NULL;
	for (int s = 0; s < g.nsplits; s++)
		for (size_t k = 0; k < g.sp[s].nsh; k++) {
			const dp_out *o = &g.sp[s].sh[k].o;
			struct stat st;
			if (!g.sp[s].sh[k].opened || !o->tmp)
				continue; /* written in place: a device, stdout */
			cli_grow(&d, &cap, n + 1, sizeof *d);
			struct dest *x = &d[n++];
			memset(x, 0, sizeof *x);
			x->name = o->path;
			if (stat(o->dst, &st) == 0) {
				x->dev = st.st_dev;
				x->ino = st.st_ino;
				continue;
			}
			char *dir = cli_strdup(o->dst), *slash = strrchr(dir, '/');
			const char *base = slash ? slash + 1 : o->dst + 0;
			if (slash)
				*slash = 0;
			char *real = realpath(slash ? (*dir ? dir : "/") : ".", NULL);
			size_t len = (real ? strlen(real) : strlen(dir)) + strlen(base) + 2;
			x->where = cli_malloc(len);
			snprintf(x->where, len, "%s/%s", real ? real : dir, slash ? base : o->dst);
			free(real);
			free(dir);
		}
	if (n > 1)
		qsort(d, n, sizeof *d, cmp_dest);
	for (size_t i = 1; i < n; i++)
		if (!cmp_dest(&d[i - 1], &d[i]))
			cli_die("%s and %s are one file: one shard would replace the other", d[i - 1].name,
				d[i].name);
	for (size_t i = 0; i < n; i++)
		free(d[i].where);
	free(d);
}

/* Fixed mode: open every selected output now, so that a bad template or an
 * unwritable directory fails before any input is read. */
static void open_fixed_outputs(void)
{
	size_t n = 0, cap = 0, scap = 0;
	char **names = NULL; /* in the order opened */
	int *split_of = NULL;
	for (int s = 0; s < g.nsplits; s++) {
		if (!g.sp[s].selected)
			continue;
		uint64_t first = g.take >= 0 ? (uint64_t)g.take : 0;
		uint64_t last = g.take >= 0 ? (uint64_t)g.take + 1 : opt.nshards;
		for (uint64_t k = first; k < last; k++) {
			cli_grow(&names, &cap, n + 1, sizeof *names);
			cli_grow(&split_of, &scap, n + 1, sizeof *split_of);
			split_of[n] = s;
			names[n++] = to_stdout() ? cli_strdup("-") : out_name(s, k, opt.nshards);
		}
	}
	char **sorted = cli_malloc((n ? n : 1) * sizeof *sorted);
	memcpy(sorted, names, n * sizeof *sorted);
	qsort(sorted, n, sizeof *sorted, cmp_str);
	for (size_t i = 1; i < n; i++)
		if (!strcmp(sorted[i - 1], sorted[i]))
			cli_usage_error("-o '%s': two outputs would both be named '%s' (use {shard}%s)",
				    opt.tmpl ? opt.tmpl : "-", sorted[i], g.nsplits > 1 ? " and {split}" : "");
	/* every destination checked before the first is opened: a directory
	 * in the way, or one that cannot be written, is named now */
	for (size_t i = 0; i < n; i++) {
		dp_err e;
		if (strcmp(sorted[i], "-") != 0)
			make_parents(sorted[i]);
		if (dp_out_check(sorted[i], &e) < 0)
			cli_die_err(CLI_FAIL, &e);
	}
	free(sorted);
	for (size_t i = 0; i < n; i++) {
		open_output(add_shard(&g.sp[split_of[i]]), names[i]);
		free(names[i]);
		g.remaining++;
	}
	free(names);
	free(split_of);
	check_distinct();
}

/* Size mode: shard k of split s, named for now with {nshards} unfilled. */
static struct output *open_size_shard(int s)
{
	struct split *sp = &g.sp[s];
	struct output *o = add_shard(sp);
	char *path = out_name(s, sp->nsh - 1, 0);
	open_output(o, path);
	free(path);
	return o;
}

/* Every output lands, or none does (dp_out_commit_all: each destination
 * checked first, files replaced put back if a rename fails). */
static void commit_outputs(void)
{
	dp_err e;
	size_t n = 0, cap = 0;
	dp_out **outs = NULL;
	for (int s = 0; s < g.nsplits; s++)
		for (size_t k = 0; k < g.sp[s].nsh; k++)
			if (g.sp[s].sh[k].w)
				finish_output(&g.sp[s].sh[k]);
	for (int s = 0; s < g.nsplits; s++) {
		struct split *sp = &g.sp[s];
		for (size_t k = 0; k < sp->nsh; k++) {
			struct output *o = &sp->sh[k];
			if (!g.fixed && !to_stdout()) { /* now {nshards} is known */
				char *name = out_name(s, k, sp->nsh);
				if (dp_out_retarget(&o->o, name, &e) < 0)
					cli_die_err(CLI_FAIL, &e);
				free(name);
			}
			o->name = cli_strdup(to_stdout() ? "-" : o->o.path);
			cli_grow(&outs, &cap, n + 1, sizeof *outs);
			outs[n++] = &o->o;
		}
	}
	check_distinct(); /* the last names of size mode: only now */
	int rc = dp_out_commit_all(outs, n, &e);
	free(outs);
	for (int s = 0; s < g.nsplits; s++) /* closed or removed, either way */
		for (size_t k = 0; k < g.sp[s].nsh; k++) {
			g.sp[s].sh[k].committed = rc == 0;
			g.sp[s].sh[k].opened = 0;
		}
	if (rc < 0)
		cli_die_err(CLI_FAIL, &e);
	for (size_t i = 0; i < g.ndirs; i++) /* they hold outputs now */
		free(g.dirs[i]);
	g.ndirs = 0;
}

/* ---- assignment -------------------------------------------------------- */

struct keys {
	uint64_t split_h, shard_h;
};

/* Key hashes of a record (hash rules only).  Returns 0; DP_EDATA for an
 * invalid Example; DP_ENOTFOUND for a missing feature; reason in e. */
static int key_hashes(const uint8_t *data, size_t len, struct keys *k, dp_err *e)
{
	if (dp_example_parse(&g.ex, data, len, e) < 0) {
		char why[sizeof e->msg];
		snprintf(why, sizeof why, "%s", e->msg);
		return dp_seterr(e, DP_EDATA, "not a valid tf.train.Example: %s", why);
	}
	const char *names[2] = {opt.split_feature, opt.by == BY_HASH ? opt.by_feature : NULL};
	uint64_t *out[2] = {&k->split_h, &k->shard_h};
	for (int i = 0; i < 2; i++) {
		if (!names[i])
			continue;
		const dp_feature *f = dp_example_get(&g.ex, names[i]);
		if (!f)
			return dp_seterr(e, DP_ENOTFOUND, "no feature \"%s\" (needed by %s hash:%s)",
					 names[i], i == 0 ? "--split-by" : "--by", names[i]);
		if (dp_feature_hash(f, out[i]) < 0)
			return dp_seterr(e, DP_ENOMEM, "out of memory");
	}
	return 0;
}

static int need_keys(void)
{
	return opt.split_feature || opt.by == BY_HASH;
}

static void mark_done(struct output *o)
{
	if (!o->done) {
		o->done = 1;
		if (g.fixed && --g.remaining == 0)
			g.stop = 1;
	}
}

static void write_to(struct output *o, const uint8_t *frame, size_t flen)
{
	dp_err e;
	if (dp_writer_write_frame(o->w, frame, flen, &e) < 0)
		cli_die_err(CLI_FAIL, &e);
	o->records++;
	o->bytes += flen;
	if (g.flush_every && o->bytes - o->flushed >= g.flush_every) {
		if (dp_writer_flush(o->w, &e) < 0)
			cli_die_err(CLI_FAIL, &e);
		o->flushed = o->bytes;
	}
}

static int fits(const struct output *o, size_t flen)
{
	if (opt.max_records && o->records >= opt.max_records)
		return 0;
	if (opt.max_bytes && o->bytes + flen > opt.max_bytes)
		return 0;
	return 1;
}

static void place(int s, const uint8_t *frame, size_t flen, const struct keys *k, uint64_t pos);

/* The record at the next position goes to its split and shard (with
 * --folds: to its fold's val and the other folds' train).  k: its key
 * hashes when already computed, else NULL. */
static void assign(const uint8_t *frame, size_t flen, const struct keys *k)
{
	struct keys kk;
	if (need_keys() && !k) {
		dp_err e;
		if (key_hashes(frame + DP_TFR_HEADER, flen - DP_TFR_HEADER - DP_TFR_FOOTER, &kk, &e) < 0)
			cli_die("record at position %" PRIu64 ": %s", g.pos, e.msg); /* checked when read */
		k = &kk;
	}
	uint64_t pos = g.pos++;
	int s = 0;
	if (g.splits.n)
		s = opt.split_feature ? dp_split_of_hash(&g.splits, k->split_h)
				      : dp_split_at(&g.splits, pos);
	if (!opt.folds) {
		place(s, frame, flen, k, pos);
		return;
	}
	if (!opt.split_feature) /* folds of n/K records, rounded (dp_fold_at) */
		s = dp_fold_at(opt.seed, pos, (int)opt.folds);
	for (int f = 0; f < (int)opt.folds; f++) /* its fold's val, the others' train */
		place(2 * f + (f == s), frame, flen, k, pos);
}

/* The record at position pos into split s: its shard there. */
static void place(int s, const uint8_t *frame, size_t flen, const struct keys *k, uint64_t pos)
{
	struct split *sp = &g.sp[s];
	uint64_t j = sp->seen++;
	if (!sp->selected)
		return;
	if (opt.by == BY_SIZE) {
		struct output *o = &sp->sh[sp->nsh - 1];
		if (!fits(o, flen)) {
			if (o->records == 0) /* read_inputs named its file and offset */
				cli_die("record at position %" PRIu64 ": %zu bytes framed, more than "
					"--max-bytes %" PRIu64 ": no shard can hold it",
					pos, flen, opt.max_bytes);
			finish_output(o);
			o = open_size_shard(s);
		}
		write_to(o, frame, flen);
		sp->written++;
		sp->bytes += flen;
		return;
	}
	uint64_t shard;
	switch (opt.by) {
	case BY_CONTIGUOUS:
		if (j >= sp->count)
			cli_die("the input changed while it was read: more records than counted (%" PRIu64 ")",
			    sp->count);
		shard = dp_shard_contiguous(j, sp->count, opt.nshards);
		break;
	case BY_HASH:
		shard = k->shard_h % opt.nshards;
		break;
	default:
		shard = j % opt.nshards;
	}
	if (g.take >= 0 && shard != (uint64_t)g.take) {
		if (opt.by == BY_CONTIGUOUS && shard > (uint64_t)g.take)
			mark_done(&sp->sh[0]);
		return;
	}
	struct output *o = &sp->sh[g.take >= 0 ? 0 : shard];
	if (o->done || !fits(o, flen)) {
		sp->dropped++;
		mark_done(o);
		return;
	}
	write_to(o, frame, flen);
	sp->written++;
	sp->bytes += flen;
	if (opt.by == BY_CONTIGUOUS && j + 1 == dp_shard_begin(shard + 1, sp->count, opt.nshards))
		mark_done(o);
}

/* Contiguous outputs that get no records at all are done from the start. */
static void mark_empty_done(void)
{
	for (int s = 0; s < g.nsplits; s++) {
		struct split *sp = &g.sp[s];
		if (!sp->selected)
			continue;
		for (size_t i = 0; i < sp->nsh; i++) {
			uint64_t k = g.take >= 0 ? (uint64_t)g.take : i;
			if (dp_shard_begin(k, sp->count, opt.nshards) ==
			    dp_shard_begin(k + 1, sp->count, opt.nshards))
				mark_done(&sp->sh[i]);
		}
	}
}

/* ---- reading ----------------------------------------------------------- */

typedef void (*record_fn)(const dp_record *rec, const struct keys *k, void *ctx);

static void progress_tick(void)
{
	if (((g.nread + g.pos) & 1023) == 0)
		show_progress();
}

/* Read every input in order, calling fn on each good record, until g.stop. */
static void read_inputs(char **inputs, int n, const dp_reader_opts *ro, int *fds, record_fn fn,
			void *ctx)
{
	for (int i = 0; i < n && !g.stop; i++) {
		dp_err e;
		dp_reader *r = fds ? dp_reader_open_fd(fds[i], 0, inputs[i], ro, &e)
				   : dp_reader_open_path(inputs[i], ro, &e);
		if (!r)
			cli_die_err(CLI_FAIL, &e);
		dp_record rec;
		int rc;
		uint64_t before = 0;
		while (!g.stop && (rc = dp_reader_next(r, &rec, &e)) != 0) {
			if (rc == DP_REC_SKIPPED) {
				if (!g.quiet_warnings)
					g.corrupt++;
				warn_corrupt(e.msg);
				continue;
			}
			if (rc < 0)
				cli_die_err(CLI_FAIL, &e);
			if (opt.by == BY_SIZE && opt.max_bytes && rec.frame_len > opt.max_bytes)
				cli_die("%s: record %" PRIu64 " at byte %" PRIu64 ": %zu bytes framed, more "
					"than --max-bytes %" PRIu64 ": no shard can hold it",
					dp_reader_name(r), rec.index, rec.offset, rec.frame_len,
					opt.max_bytes);
			struct keys k, *kp = NULL;
			if (need_keys()) {
				int kr = key_hashes(rec.data, rec.len, &k, &e);
				if (kr == DP_EDATA && opt.skip_corrupt) {
					char msg[sizeof e.msg + 128];
					snprintf(msg, sizeof msg, "%s: record %" PRIu64 " at byte %" PRIu64 ": %s; skipped",
						 dp_reader_name(r), rec.index, rec.offset, e.msg);
					if (!g.quiet_warnings)
						g.corrupt++;
					warn_corrupt(msg);
					continue;
				}
				if (kr < 0)
					cli_die("%s: record %" PRIu64 " at byte %" PRIu64 ": %s", dp_reader_name(r),
					    rec.index, rec.offset, e.msg);
				kp = &k;
			}
			dp_reader_stats st;
			dp_reader_stats_get(r, &st);
			g.read_bytes += st.raw_bytes - before;
			before = st.raw_bytes;
			fn(&rec, kp, ctx);
			progress_tick();
		}
		dp_reader_close(r);
	}
}

static const char *tmpdir(void) { return dp_tmpdir(opt.tmpdir); }

static void count_fn(const dp_record *rec, const struct keys *k, void *ctx)
{
	g.nread++;
	if (opt.split_feature)
		g.counts[dp_split_of_hash(&g.splits, k->split_h)]++;
}

static void copy_fn(const dp_record *rec, const struct keys *k, void *ctx)
{
	dp_err e;
	count_fn(rec, k, ctx);
	if (dp_writer_write_frame(ctx, rec->frame, rec->frame_len, &e) < 0)
		cli_die("%s: %s", tmpdir(), e.msg);
}

static void shuffle_fn(const dp_record *rec, const struct keys *k, void *ctx)
{
	dp_err e;
	count_fn(rec, k, ctx);
	if (dp_shuffle_add(g.shuf, rec->frame, rec->frame_len, &e) < 0)
		cli_die_err(CLI_FAIL, &e);
}

/* The main pass: through the window (if any) to the assignment. */
static void main_fn(const dp_record *rec, const struct keys *k, void *ctx)
{
	int *counting = ctx;
	if (counting && *counting)
		g.nread++;
	if (g.win) {
		const uint8_t *out;
		size_t len;
		dp_err e;
		int rc = dp_window_push(g.win, rec->frame, rec->frame_len, &out, &len, &e);
		if (rc < 0)
			cli_die_err(CLI_FAIL, &e);
		if (rc == 1)
			assign(out, len, NULL);
		return;
	}
	assign(rec->frame, rec->frame_len, k);
}

/* An anonymous temporary file for the contiguous copy of a stream. */
static int temp_file(void)
{
	dp_err e;
	int fd = dp_tmpfile(tmpdir(), &e);
	if (fd < 0)
		cli_die_err(CLI_FAIL, &e);
	return fd;
}

static int all_regular(void)
{
	for (int i = 0; i < opt.ninputs; i++) {
		struct stat st;
		if (!strcmp(opt.inputs[i], "-"))
			return 0;
		if (stat(opt.inputs[i], &st) == 0 && !S_ISREG(st.st_mode))
			return 0;
	}
	return 1;
}

/* Per-split record counts from the total (contiguous needs them). */
static void set_counts(uint64_t n)
{
	if (!g.splits.n)
		g.counts[0] = n;
	else if (opt.folds && !opt.split_feature)
		for (uint64_t f = 0; f < opt.folds; f++) /* whole blocks of K, then the last's */
			g.counts[f] = n / opt.folds;
	else if (!opt.split_feature)
		dp_split_counts(&g.splits, n, g.counts);
	for (uint64_t p = n - n % (opt.folds ? opt.folds : 1); opt.folds && !opt.split_feature && p < n; p++)
		g.counts[dp_fold_at(opt.seed, p, (int)opt.folds)]++;
	for (int s = 0; s < g.nsplits; s++) /* with --folds: a fold's val, or all but it */
		g.sp[s].count = !opt.folds ? g.counts[s]
			      : s % 2	 ? g.counts[s / 2]
					 : n - g.counts[s / 2];
}

static void empty_input(void)
{
	if (opt.ninputs == 1)
		cli_die("%s: no records (empty input)", strcmp(opt.inputs[0], "-") ? opt.inputs[0] : "stdin");
	cli_die("no records in the %d inputs (empty input)", opt.ninputs);
}

static void run(void)
{
	dp_reader_opts ro = {.skip_corrupt = opt.skip_corrupt, .max_record = opt.max_record};
	dp_err e;
	int counting = 1;

	if (opt.shuffle) {
		if (!(g.shuf = dp_shuffle_new(opt.seed, opt.memory, opt.tmpdir, &e)))
			cli_die_err(CLI_FAIL, &e);
		close(temp_file()); /* a spill directory that cannot be used: now */
		read_inputs(opt.inputs, opt.ninputs, &ro, NULL, shuffle_fn, NULL);
		if (g.nread == 0)
			empty_input();
		set_counts(g.nread);
		if (opt.by == BY_CONTIGUOUS)
			mark_empty_done();
		const uint8_t *p;
		size_t len;
		int rc;
		while (!g.stop && (rc = dp_shuffle_next(g.shuf, &p, &len, &e)) == 1) {
			assign(p, len, NULL);
			progress_tick();
		}
		if (!g.stop && rc < 0)
			cli_die_err(CLI_FAIL, &e);
		return;
	}
	if (opt.window && !(g.win = dp_window_new(opt.seed, opt.window, &e)))
		cli_die_err(CLI_FAIL, &e);
	if (opt.by == BY_CONTIGUOUS) {
		counting = 0;
		if (all_regular()) {
			read_inputs(opt.inputs, opt.ninputs, &ro, NULL, count_fn, NULL);
			if (g.nread == 0)
				empty_input();
			set_counts(g.nread);
			mark_empty_done();
			g.quiet_warnings = 1;
			read_inputs(opt.inputs, opt.ninputs, &ro, NULL, main_fn, &counting);
		} else {
			int fd = temp_file();
			dp_writer *w = dp_writer_open_fd(fd, "temporary file", DP_COMP_NONE, -1, &e);
			if (!w)
				cli_die_err(CLI_FAIL, &e);
			read_inputs(opt.inputs, opt.ninputs, &ro, NULL, copy_fn, w);
			if (dp_writer_finish(w, &e) < 0)
				cli_die("%s: %s", tmpdir(), e.msg);
			dp_writer_free(w);
			if (g.nread == 0)
				empty_input();
			set_counts(g.nread);
			mark_empty_done();
			if (lseek(fd, 0, SEEK_SET) < 0)
				cli_die("%s: temporary file: %s", tmpdir(), strerror(errno));
			char *name = "temporary copy of the input";
			dp_reader_opts ro2 = {.max_record = opt.max_record};
			g.quiet_warnings = 1;
			read_inputs(&name, 1, &ro2, &fd, main_fn, &counting);
			close(fd);
		}
	} else {
		read_inputs(opt.inputs, opt.ninputs, &ro, NULL, main_fn, &counting);
		if (g.nread == 0)
			empty_input();
	}
	if (g.win) {
		const uint8_t *out;
		size_t len;
		while (!g.stop && dp_window_drain(g.win, &out, &len) == 1)
			assign(out, len, NULL);
	}
	if (opt.by == BY_CONTIGUOUS && !g.stop)
		for (int s = 0; s < g.nsplits; s++)
			if (g.sp[s].seen != g.sp[s].count)
				cli_die("the input changed while it was read: %" PRIu64 " records, %" PRIu64
				    " counted before",
				    g.sp[s].seen, g.sp[s].count);
}

/* ---- summary ----------------------------------------------------------- */

/* logfmt value: bare when safe, else quoted as a JSON string is (a control
 * character in a file or split name escaped: it cannot rewrite the
 * terminal nor split the line). */
static void put_value(const char *v)
{
	int bare = *v != 0;
	for (const char *p = v; *p; p++)
		if (*p <= ' ' || *p == '"' || *p == '=' || *p == '\\' || (unsigned char)*p >= 0x7f)
			bare = 0;
	if (bare) {
		fputs(v, stderr);
		return;
	}
	dp_buf b = DP_BUF_INIT;
	if (dp_buf_json_str(&b, v, strlen(v), 0) < 0)
		cli_die("out of memory");
	fwrite(b.p, 1, b.len, stderr);
	dp_buf_free(&b);
}

static void summary(double secs)
{
	uint64_t rec = 0, bytes = 0, dropped = 0, nout = 0;
	for (int s = 0; s < g.nsplits; s++) {
		struct split *sp = &g.sp[s];
		if (!sp->selected)
			continue;
		for (size_t k = 0; k < sp->nsh; k++) {
			struct output *o = &sp->sh[k];
			fputs("file=", stderr);
			put_value(o->name);
			if (sp->name) {
				fputs(" split=", stderr);
				put_value(sp->name);
			}
			fprintf(stderr,
				" shard=%" PRIu64 " records=%" PRIu64 " bytes=%" PRIu64 " file_bytes=%" PRIu64
				"\n",
				g.take >= 0 ? (uint64_t)g.take : (uint64_t)k, o->records, o->bytes,
				o->out_bytes);
			nout++;
		}
		if (sp->name) {
			fputs("split=", stderr);
			put_value(sp->name);
			fprintf(stderr,
				" shards=%zu records=%" PRIu64 " bytes=%" PRIu64 " dropped=%" PRIu64 "\n",
				sp->nsh, sp->written, sp->bytes, sp->dropped);
		}
		rec += sp->written;
		bytes += sp->bytes;
		dropped += sp->dropped;
	}
	fprintf(stderr,
		"total outputs=%" PRIu64 " records=%" PRIu64 " bytes=%" PRIu64 " read=%" PRIu64
		" corrupt=%" PRIu64 " dropped=%" PRIu64,
		nout, rec, bytes, g.nread, g.corrupt, dropped);
	if (g.shuf) {
		dp_shuffle_stats st;
		dp_shuffle_stats_get(g.shuf, &st);
		fprintf(stderr, " spilled=%" PRIu64 " spill_levels=%d", st.spilled_bytes, st.levels);
	}
	fprintf(stderr, " seconds=%.3f\n", secs);
}

/* ---- options ----------------------------------------------------------- */

static const char *hash_feature(const char *arg, const char *what)
{
	if (strncmp(arg, "hash:", 5) != 0 || !arg[5])
		cli_bad_value(what, arg, "hash:FEATURE");
	return arg + 5;
}

/* --take I/N, {rank} and {size} filled from --rank/--size or the
 * environment. */
static void parse_take(void)
{
	char r[16], s[16];
	snprintf(r, sizeof r, "%d", opt.rank);
	snprintf(s, sizeof s, "%d", opt.size);
	const char *vars[] = {"rank", r, "size", s, NULL};
	uint64_t i, n;
	cli_part("--take", opt.take, vars, &i, &n);
	if (opt.nshards && opt.nshards != n)
		cli_usage_error("--take %" PRIu64 "/%" PRIu64 " and -n %" PRIu64 " disagree", i, n,
				opt.nshards);
	g.take = (int)i;
	opt.nshards = n;
}

enum {
	O_BY = 256, O_SPLIT, O_SPLIT_BY, O_ONLY, O_SHUFFLE, O_WINDOW, O_SEED, O_MEMORY, O_TMPDIR,
	O_TAKE, O_RANK, O_SIZE, O_MAXREC, O_MAXBYTES, O_LEVEL, O_SKIP, O_MAXRECORD, O_FOLDS, O_FOLD
};

static void parse_options(int argc, char **argv)
{
	static const struct option lo[] = {
		{"shards", required_argument, 0, 'n'},   {"output", required_argument, 0, 'o'},
		{"by", required_argument, 0, O_BY},      {"split", required_argument, 0, O_SPLIT},
		{"split-by", required_argument, 0, O_SPLIT_BY},
		{"only", required_argument, 0, O_ONLY},  {"shuffle", no_argument, 0, O_SHUFFLE},
		{"folds", required_argument, 0, O_FOLDS}, {"fold", required_argument, 0, O_FOLD},
		{"shuffle-window", required_argument, 0, O_WINDOW},
		{"seed", required_argument, 0, O_SEED},  {"memory", required_argument, 0, O_MEMORY},
		{"tmpdir", required_argument, 0, O_TMPDIR},
		{"take", required_argument, 0, O_TAKE},  {"rank", required_argument, 0, O_RANK},
		{"size", required_argument, 0, O_SIZE},
		{"max-records", required_argument, 0, O_MAXREC},
		{"max-bytes", required_argument, 0, O_MAXBYTES},
		{"compress", required_argument, 0, 'z'}, {"level", required_argument, 0, O_LEVEL},
		{"skip-corrupt", no_argument, 0, O_SKIP}, {"quiet", no_argument, 0, 'q'},
		{"max-record", required_argument, 0, O_MAXRECORD},
		CLI_OPTIONS_END};
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":n:o:z:qhV", lo, NULL)) != -1) {
		switch (c) {
		case 'n': opt.nshards = cli_count("-n", optarg, 1, 1u << 30); break;
		case 'o': opt.tmpl = optarg; break;
		case O_BY:
			if (!strcmp(optarg, "round-robin"))
				opt.by = BY_ROUND_ROBIN;
			else if (!strcmp(optarg, "contiguous"))
				opt.by = BY_CONTIGUOUS;
			else {
				opt.by_feature = hash_feature(optarg, "--by");
				opt.by = BY_HASH;
			}
			break;
		case O_SPLIT: opt.split_spec = optarg; break;
		case O_SPLIT_BY:
			opt.split_feature = strcmp(optarg, "seed") ? hash_feature(optarg, "--split-by")
								   : NULL;
			break;
		case O_ONLY: opt.only = optarg; break;
		case O_FOLDS: opt.folds = cli_count("--folds", optarg, 2, DP_SPLIT_MAX); break;
		case O_FOLD: opt.fold = (int)cli_count("--fold", optarg, 0, DP_SPLIT_MAX - 1); break;
		case O_SHUFFLE: opt.shuffle = 1; break;
		case O_WINDOW: opt.window = cli_count("--shuffle-window", optarg, 1, 1ull << 40); break;
		case O_SEED: opt.seed = cli_count("--seed", optarg, 0, UINT64_MAX); break;
		case O_MEMORY: opt.memory = cli_size("--memory", optarg, 1, UINT64_MAX); break;
		case O_TMPDIR: opt.tmpdir = optarg; break;
		case O_TAKE: opt.take = optarg; break;
		case O_RANK: opt.rank = (int)cli_count("--rank", optarg, 0, INT_MAX); break;
		case O_SIZE: opt.size = (int)cli_count("--size", optarg, 1, INT_MAX); break;
		case O_MAXREC: opt.max_records = cli_count("--max-records", optarg, 1, UINT64_MAX); break;
		case O_MAXBYTES: opt.max_bytes = cli_size("--max-bytes", optarg, 1, UINT64_MAX); break;
		case 'z': opt.comp = cli_comp_out("-z", optarg); break;
		case O_LEVEL: opt.level = (int)cli_count("--level", optarg, 0, 9); break;
		case O_SKIP: opt.skip_corrupt = 1; break;
		case O_MAXRECORD: opt.max_record = cli_size("--max-record", optarg, 1, UINT64_MAX); break;
		case 'q': opt.quiet = 1; break;
		default: cli_default_option(c, argv, help);
		}
	}
	opt.inputs = argv + optind;
	opt.ninputs = argc - optind;
	static char *stdin_only[] = {"-"};
	if (opt.ninputs == 0) {
		opt.inputs = stdin_only;
		opt.ninputs = 1;
	}
	int nstdin = 0;
	for (int i = 0; i < opt.ninputs; i++)
		nstdin += !strcmp(opt.inputs[i], "-");
	if (nstdin > 1)
		cli_usage_error("stdin ('-') given %d times", nstdin);
	if (nstdin && isatty(STDIN_FILENO))
		cli_usage_error("stdin is a terminal: give FILE arguments or redirect the input");
}

/* --folds K: K equal parts, by seed (or --split-by hash:F), named 0..K-1;
 * no --split; --only takes train or val; --fold F below K. */
static void check_folds(void)
{
	char spec[256] = "";
	dp_err e;
	if (opt.split_spec)
		cli_usage_error("--folds makes each fold's train and val: no --split with it");
	for (uint64_t f = 0; f < opt.folds; f++)
		snprintf(spec + strlen(spec), sizeof spec - strlen(spec), "%s%" PRIu64 "=1", f ? "," : "", f);
	if (dp_splits_parse(&g.splits, spec, opt.seed, &e) < 0)
		cli_die("--folds: %s", e.msg);
	if (opt.fold >= (int)opt.folds)
		cli_usage_error("--fold %d: want 0 to %" PRIu64, opt.fold, opt.folds - 1);
	if (opt.only && strcmp(opt.only, "train") && strcmp(opt.only, "val"))
		cli_usage_error("--only '%s': with --folds, train or val", opt.only);
}

/* Options that depend on each other: the shard mode, splits, the outputs. */
static void check_options(void)
{
	/* Ranks: explicit values win over the environment. */
	dp_rank_size(&opt.rank, &opt.size);

	if (opt.shuffle && opt.window)
		cli_usage_error("--shuffle and --shuffle-window: choose one");
	if (opt.take)
		parse_take();
	int size_mode = !opt.nshards && (opt.max_records || opt.max_bytes);
	if (size_mode) {
		if (opt.by != -1 && opt.by != BY_CONTIGUOUS)
			cli_usage_error("--max-records/--max-bytes without -n make shards of consecutive "
				    "records: --by %s does not apply (give -n to cap shards instead)",
				    opt.by == BY_HASH ? "hash" : "round-robin");
		opt.by = BY_SIZE;
		if (to_stdout())
			cli_usage_error("--max-records/--max-bytes without -n need -o TEMPLATE with {shard}");
		if (!tmpl_uses("shard", 0))
			cli_usage_error("-o '%s': needs {shard}: the number of shards depends on the data",
				    opt.tmpl);
		if (tmpl_uses("nshards", 1))
			cli_usage_error("-o '%s': {nshards} may not be in the directory part here", opt.tmpl);
	} else {
		if (!opt.nshards)
			opt.nshards = 1;
		if (opt.by == -1)
			opt.by = BY_ROUND_ROBIN;
	}
	g.fixed = !size_mode;
	g.width = 5;

	if (opt.folds)
		check_folds();
	else if (opt.split_spec) {
		dp_err e;
		if (dp_splits_parse(&g.splits, opt.split_spec, opt.seed, &e) < 0)
			cli_usage_error("%s", e.msg);
	} else if (opt.split_feature) {
		cli_usage_error("--split-by needs --split");
	} else if (opt.fold >= 0) {
		cli_usage_error("--fold needs --folds");
	}
	g.nsplits = opt.folds ? 2 * (int)opt.folds : g.splits.n ? g.splits.n : 1;
	int only = -1;
	if (opt.only && !opt.folds) {
		if (!g.splits.n)
			cli_usage_error("--only needs --split");
		if ((only = dp_splits_find(&g.splits, opt.only)) < 0)
			cli_usage_error("--only '%s': no such split in --split %s", opt.only, opt.split_spec);
	}
	for (int s = 0; s < g.nsplits && !opt.folds; s++) {
		g.sp[s].name = g.splits.n ? g.splits.name[s] : NULL;
		g.sp[s].selected = only < 0 || only == s;
	}
	for (int s = 0; s < g.nsplits && opt.folds; s++) {
		g.sp[s].name = s % 2 ? "val" : "train";
		g.sp[s].fold = s / 2;
		g.sp[s].selected = (opt.fold < 0 || opt.fold == s / 2) &&
				   (!opt.only || !strcmp(opt.only, g.sp[s].name));
	}
	int nsel = 0;
	for (int s = 0; s < g.nsplits; s++)
		nsel += g.sp[s].selected;
	uint64_t nout = g.take >= 0 ? (uint64_t)nsel : (uint64_t)nsel * opt.nshards;
	if (g.fixed && nout > MAX_OUTPUTS)
		cli_usage_error("%" PRIu64 " outputs: more than %d", nout, MAX_OUTPUTS);
	if (to_stdout()) {
		if (opt.tmpl && nout > 1 && !size_mode)
			cli_usage_error("-o -: %" PRIu64 " outputs cannot all go to stdout", nout);
		if (!opt.tmpl && nout > 1)
			cli_usage_error("-o TEMPLATE is needed for %" PRIu64 " outputs (or --take I/N, or --only)",
				    nout);
	} else {
		int split = tmpl_uses("split", 0); /* and every placeholder checked */
		if (split && !g.splits.n)
			cli_usage_error("-o '%s': {split} without --split", opt.tmpl);
		if (g.splits.n && !opt.folds && only < 0 && !split)
			cli_usage_error("-o '%s': needs {split} for the %d splits (or --only NAME)", opt.tmpl,
				    g.splits.n);
		if (opt.folds && ((!opt.only && !split) || (opt.fold < 0 && !tmpl_uses("fold", 0))))
			cli_usage_error("-o '%s': needs {fold} and {split} for the %" PRIu64 " folds' train "
					"and val (or --fold F, --only train|val)", opt.tmpl, opt.folds);
	}
	/* Many outputs: flush each sooner, so the writers' buffers stay small. */
	if (nout > 64)
		g.flush_every = (64u << 20) / nout < (64u << 10) ? (64u << 10) : (64u << 20) / nout;
}

int main(int argc, char **argv)
{
	cli.prog = DP_PROG;
	cli.usage = "usage: " DP_PROG " [-n N] [-o TEMPLATE] [--by MODE] [--split SPEC] [--shuffle] "
		    "[--take I/N] [OPTION...] [FILE...] (--help for more)\n";
	cli.on_fail = abort_outputs;
	parse_options(argc, argv);
	check_options();
	dp_out_install_signal_cleanup();
	struct rlimit rl; /* one descriptor per output */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	g.t0 = dp_now();
	cli_progress_on(!opt.quiet && isatty(STDERR_FILENO));

	if (g.fixed)
		open_fixed_outputs();
	else
		for (int s = 0; s < g.nsplits; s++)
			if (g.sp[s].selected)
				open_size_shard(s);
	run();
	cli_progress_clear();
	commit_outputs();
	if (to_stdout() && close(STDOUT_FILENO) < 0)
		cli_die("stdout: %s", strerror(errno));
	if (!opt.quiet)
		summary(dp_now() - g.t0);
	dp_shuffle_free(g.shuf);
	dp_window_free(g.win);
	dp_example_free(&g.ex);
	return 0;
}
