/*
 * metrics-grep - extract metrics from training logs with regexes or logfmt
 * keys; print every value (TSV, CSV, JSON lines) or summaries per metric;
 * follow growing logs; plot the curves as SVG.
 *
 * The stand-in for SageMaker's metric_definitions + CloudWatch, and for
 * `grep -oP ... | awk`.  The work is in libdp: dp_metrics.h (the matcher),
 * dp_lines.h (bounded line reading, tail -F), dp_plot.h (the chart); this
 * file holds options, output formats, messages and exit codes.
 *
 * Exit status: 0 values found, 1 failure, 2 usage, 3 no value found.
 */
#define _GNU_SOURCE
#include "dp.h"
#include "dp_lines.h"
#include "dp_metrics.h"
#include "dp_plot.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef DP_PROG
#define DP_PROG "metrics-grep"
#endif

#define EXIT_NOVALUES 3
#define MAX_SOURCES 256
#define PLOT_EVERY 2.0 /* seconds between chart rewrites when following */

static const char *prog = DP_PROG;

enum fmt { FMT_TSV, FMT_CSV, FMT_JSON };
enum summary { S_LAST, S_MIN, S_MAX, S_MEAN, S_COUNT, NSUMMARY };
static const char *const summary_names[NSUMMARY] = {"last", "min", "max", "mean", "count"};

/* Values of one metric from one rank (-1: lines without a rank). */
struct acc {
	int metric, rank;
	int next;   /* the next acc of the same metric, -1 at the end */
	int series; /* plot series id, -1 before the first point */
	unsigned long long count, nnum; /* values, values not NaN */
	double min, max, sum, comp, last;
	int nan_seen;
};

static struct {
	enum fmt fmt;
	int fmt_given, header;
	int summary[NSUMMARY], nsummary; /* in command-line order */
	int follow;
	const char *plot, *title;
	size_t max_line;
	dp_matcher *m;
	dp_plot *chart;
	/* accumulators, when summaries or a chart are wanted */
	struct acc *acc;
	int nacc, cap_acc;
	int *first_acc; /* per metric id: first acc index, -1 */
	int cap_first;
	int need_values, print_records;
	char **outname; /* per metric id: the name as the output format writes it */
	size_t *outlen;
	int cap_outname;
	unsigned long long values, lineno;
	int failed;      /* a file could not be read: exit 1 at the end */
	int out_broken;  /* stdout failed: stop now */
	int ranks_seen;
	double last_plot;
	unsigned long long plot_adds, plotted_adds; /* points given to the chart, at its last write */
} G = {.header = 1, .max_line = 1 << 20};

static volatile sig_atomic_t stop_sig;

static void on_stop(int sig) { stop_sig = sig; }

static void usage_line(FILE *f)
{
	fprintf(f,
		"usage: %s [-m NAME=REGEX]... [--definitions FILE] [--logfmt[=KEYS]] "
		"[--csv|--json] [--last|--min|--max|--mean|--count]... [-f] [--plot FILE.svg] "
		"[FILE]...\n",
		prog);
}

static void usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void usage_error(const char *fmt, ...)
{
	if (fmt) {
		va_list ap;
		va_start(ap, fmt);
		fprintf(stderr, "%s: ", prog);
		vfprintf(stderr, fmt, ap);
		fputc('\n', stderr);
		va_end(ap);
	}
	usage_line(stderr);
	exit(2);
}

static void help(void)
{
	usage_line(stdout);
	fputs("Extract metrics from training logs: regexes (SageMaker metric_definitions) or\n"
	      "logfmt keys; print every value, or summaries; follow growing logs; plot.\n"
	      "\n"
	      "Metrics (logfmt when none is given):\n"
	      "  -m, --metric NAME=REGEX  NAME's value is the first capture group of REGEX\n"
	      "                           (PCRE2, Perl/Python syntax); repeatable\n"
	      "      --definitions FILE   metrics from a SageMaker metric_definitions JSON list\n"
	      "                           [{\"Name\": \"train:loss\", \"Regex\": \"loss: ([0-9.]+)\"}]\n"
	      "      --logfmt[=KEYS]      every numeric key=value pair (or member of a JSON-object\n"
	      "                           line) is a metric; KEYS: only these (comma-separated)\n"
	      "Output (one row per value: name, value, step, epoch, rank):\n"
	      "      --tsv                tab-separated, with a header line (the default)\n"
	      "      --csv                comma-separated, with a header line\n"
	      "      --json               JSON lines: {\"name\":..., \"value\":..., \"step\":...}\n"
	      "      --no-header          no header line in TSV and CSV\n"
	      "Summaries (one row per metric and rank instead, columns in the order given):\n"
	      "      --last  --min  --max  --mean  --count\n"
	      "Input:\n"
	      "  -f, --follow             follow growing files like tail -F (truncation and\n"
	      "                           rotation included); ends on SIGINT/SIGTERM/SIGHUP\n"
	      "      --max-line-length N  longest line read (default 1M); longer lines are\n"
	      "                           skipped and counted\n"
	      "Chart:\n"
	      "      --plot FILE.svg      line chart of the values against step (or line\n"
	      "                           number); rows are then printed only with --tsv,\n"
	      "                           --csv or --json\n"
	      "      --title TEXT         the chart's title (default: the first file's name)\n"
	      "  -h, --help               this help\n"
	      "  -V, --version            the version\n"
	      "\n"
	      "FILE - or none: standard input.  Exit status: 0 values found, 1 failure,\n"
	      "2 usage error (bad option, regex or definitions), 3 no value found.\n",
	      stdout);
}

/* ---- Output ------------------------------------------------------------- */

static void out_fail(void)
{
	if (!G.out_broken)
		fprintf(stderr, "%s: stdout: %s\n", prog, strerror(errno ? errno : EIO));
	G.out_broken = 1;
}

/* Rows go through this buffer straight to write(2): stdio's copy was a
 * tenth of the time of a large extraction.  Summaries use stdio, after. */
static char obuf[1 << 16];
static size_t olen;

static void out_flush(void)
{
	if (G.out_broken)
		return;
	dp_err e;
	if (olen && dp_write_all(STDOUT_FILENO, obuf, olen, "stdout", &e) < 0)
		out_fail();
	olen = 0;
	if (fflush(stdout) == EOF)
		out_fail();
}

static void oom(void)
{
	fprintf(stderr, "%s: out of memory\n", prog);
	exit(1);
}

/* The metric's name as the output format writes it, cached per id;
 * *len its length. */
static const char *out_name(int id, size_t *len)
{
	if (id >= G.cap_outname) {
		int nc = G.cap_outname ? G.cap_outname : 64;
		while (nc <= id)
			nc *= 2;
		char **n = realloc(G.outname, (size_t)nc * sizeof *n);
		if (n)
			G.outname = n;
		size_t *l = realloc(G.outlen, (size_t)nc * sizeof *l);
		if (l)
			G.outlen = l;
		if (!n || !l)
			oom();
		memset(n + G.cap_outname, 0, (size_t)(nc - G.cap_outname) * sizeof *n);
		G.cap_outname = nc;
	}
	if (G.outname[id]) {
		*len = G.outlen[id];
		return G.outname[id];
	}
	const char *s = dp_matcher_name(G.m, id);
	size_t n = strlen(s);
	char *o = malloc(2 * n + 3), *q = o;
	if (!o)
		oom();
	/* Names hold no control characters (the matcher checks): TSV takes
	 * them as they are, CSV quotes when needed, JSON escapes " and \. */
	if (G.fmt == FMT_CSV && strpbrk(s, ",\"")) {
		*q++ = '"';
		for (const char *p = s; *p; p++) {
			if (*p == '"')
				*q++ = '"';
			*q++ = *p;
		}
		*q++ = '"';
	} else if (G.fmt == FMT_JSON) {
		*q++ = '"';
		for (const char *p = s; *p; p++) {
			if (*p == '"' || *p == '\\')
				*q++ = '\\';
			*q++ = *p;
		}
		*q++ = '"';
	} else {
		memcpy(q, s, n);
		q += n;
	}
	*q = 0;
	G.outname[id] = o;
	G.outlen[id] = *len = (size_t)(q - o);
	return o;
}

/* A number for output: the text as written when it is already in JSON's
 * form, else the shortest text of its value; NaN and infinities are "nan",
 * "inf", "-inf" in TSV/CSV and null in JSON. */
static size_t num_text(char *buf, const char *t, size_t n)
{
	if (n < DP_NUMBER_BUF && dp_number_is_json(t, n)) {
		memcpy(buf, t, n);
		return n;
	}
	double v = dp_number_value(t, n);
	if (G.fmt == FMT_JSON && !isfinite(v)) {
		memcpy(buf, "null", 4);
		return 4;
	}
	return dp_number_format(buf, v);
}

static size_t dbl_text(char *buf, double v)
{
	if (G.fmt == FMT_JSON && !isfinite(v)) {
		memcpy(buf, "null", 4);
		return 4;
	}
	return dp_number_format(buf, v);
}

static void put(char **q, const char *s, size_t n)
{
	memcpy(*q, s, n);
	*q += n;
}

static void print_header(void)
{
	if (G.fmt == FMT_JSON || !G.header)
		return;
	const char *h = G.fmt == FMT_CSV ? "name,value,step,epoch,rank\n"
					 : "name\tvalue\tstep\tepoch\trank\n";
	memcpy(obuf, h, strlen(h));
	olen = strlen(h);
}

static void print_record(const dp_sample *s, const dp_match *mt)
{
	/* A row is at most a 514-byte escaped name and four numbers. */
	if (sizeof obuf - olen < 1024)
		out_flush();
	char *q = obuf + olen;
	size_t namel;
	const char *name = out_name(s->metric, &namel);
	if (G.fmt == FMT_JSON) {
		char st[DP_NUMBER_BUF], ep[DP_NUMBER_BUF];
		size_t sl = mt->step ? num_text(st, mt->step, mt->step_len) : 0;
		size_t el = mt->epoch ? num_text(ep, mt->epoch, mt->epoch_len) : 0;
		put(&q, "{\"name\":", 8);
		put(&q, name, namel);
		put(&q, ",\"value\":", 9);
		q += num_text(q, s->text, s->len);
		if (sl && memcmp(st, "null", 4) != 0) {
			put(&q, ",\"step\":", 8);
			put(&q, st, sl);
		}
		if (el && memcmp(ep, "null", 4) != 0) {
			put(&q, ",\"epoch\":", 9);
			put(&q, ep, el);
		}
		if (mt->rank >= 0)
			q += sprintf(q, ",\"rank\":%d", mt->rank);
		put(&q, "}\n", 2);
	} else {
		/* numbers straight into the buffer: no copy through a temporary */
		char sep = G.fmt == FMT_CSV ? ',' : '\t';
		put(&q, name, namel);
		*q++ = sep;
		q += num_text(q, s->text, s->len);
		*q++ = sep;
		if (mt->step)
			q += num_text(q, mt->step, mt->step_len);
		*q++ = sep;
		if (mt->epoch)
			q += num_text(q, mt->epoch, mt->epoch_len);
		*q++ = sep;
		if (mt->rank >= 0)
			q += sprintf(q, "%d", mt->rank);
		*q++ = '\n';
	}
	olen = (size_t)(q - obuf);
}

/* ---- Accumulators and the chart ------------------------------------------ */

static struct acc *get_acc(int metric, int rank)
{
	if (metric >= G.cap_first) {
		int nc = G.cap_first ? G.cap_first : 64;
		while (nc <= metric)
			nc *= 2;
		int *n = realloc(G.first_acc, (size_t)nc * sizeof *n);
		if (!n)
			oom();
		for (int i = G.cap_first; i < nc; i++)
			n[i] = -1;
		G.first_acc = n;
		G.cap_first = nc;
	}
	int *link = &G.first_acc[metric];
	while (*link >= 0) {
		struct acc *a = &G.acc[*link];
		if (a->rank == rank)
			return a;
		if (a->rank > rank)
			break;
		link = &a->next;
	}
	/* Keep each metric's list sorted by rank. */
	if (G.nacc == G.cap_acc) {
		int nc = G.cap_acc ? G.cap_acc * 2 : 64;
		struct acc *n = realloc(G.acc, (size_t)nc * sizeof *n);
		if (!n)
			oom();
		G.acc = n;
		G.cap_acc = nc;
	}
	int id = G.nacc++;
	G.acc[id] = (struct acc){.metric = metric, .rank = rank, .next = *link, .series = -1,
				 .min = INFINITY, .max = -INFINITY};
	*link = id;
	return &G.acc[id];
}

static void add_value(struct acc *a, double v, double step)
{
	a->count++;
	a->last = v;
	if (isnan(v)) {
		a->nan_seen = 1;
	} else {
		a->nnum++;
		a->min = fmin(a->min, v);
		a->max = fmax(a->max, v);
		/* Neumaier's compensated sum: the mean of 10^8 values stays exact
		 * to the last digits. */
		double t = a->sum + v;
		if (fabs(a->sum) >= fabs(v))
			a->comp += (a->sum - t) + v;
		else
			a->comp += (v - t) + a->sum;
		a->sum = t;
	}
	if (G.chart) {
		if (a->series < 0) {
			const char *name = dp_matcher_name(G.m, a->metric);
			char label[400];
			if (a->rank >= 0)
				snprintf(label, sizeof label, "%s (rank %d)", name, a->rank);
			else
				snprintf(label, sizeof label, "%s", name);
			const char *fam;
			size_t fl = dp_metric_family(name, strlen(name), &fam);
			char panel[300];
			snprintf(panel, sizeof panel, "%.*s", (int)fl, fam);
			a->series = dp_plot_series(G.chart, label, panel);
			if (a->series < 0)
				oom();
		}
		dp_plot_add(G.chart, a->series, step, (double)G.lineno, v);
		G.plot_adds++;
	}
}

/* Write the chart atomically; returns 0, or -1 after a message. */
static int write_plot(void)
{
	dp_err e;
	size_t len;
	char *svg = dp_plot_svg(G.chart, G.title, &len, &e);
	if (!svg) {
		fprintf(stderr, "%s: %s: %s\n", prog, G.plot, e.msg);
		return -1;
	}
	dp_out o;
	int rc = dp_out_open(&o, G.plot, &e);
	if (rc == 0)
		rc = dp_write_all(o.fd, svg, len, G.plot, &e);
	if (rc == 0)
		rc = dp_out_commit(&o, &e);
	else
		dp_out_abort(&o);
	free(svg);
	if (rc < 0) {
		fprintf(stderr, "%s: %s\n", prog, e.msg);
		return -1;
	}
	G.plotted_adds = G.plot_adds;
	return 0;
}

/* ---- Lines ---------------------------------------------------------------- */

struct source {
	dp_lines *r;
	const char *name;
	int done;
	unsigned long long binary;
};

static void process_line(struct source *src, const char *line, size_t len)
{
	dp_match mt;
	G.lineno++;
	int n = dp_matcher_match(G.m, line, len, &mt);
	if (n <= 0) {
		if (n == DP_EDATA)
			src->binary++;
		return;
	}
	G.values += (unsigned)n;
	if (mt.rank >= 0)
		G.ranks_seen = 1;
	double step = NAN;
	if (G.need_values && mt.step) {
		step = dp_number_value(mt.step, mt.step_len);
		if (!isfinite(step))
			step = NAN;
	}
	for (int i = 0; i < n; i++) {
		const dp_sample *s = &mt.samples[i];
		if (G.print_records)
			print_record(s, &mt);
		if (G.need_values)
			add_value(get_acc(s->metric, mt.rank), dp_number_value(s->text, s->len), step);
	}
}

static void notice_events(struct source *src)
{
	unsigned ev = dp_lines_events(src->r);
	const char *name = src->name;
	if (ev & DP_LINES_TRUNCATED)
		fprintf(stderr, "%s: %s: file truncated; reading from the start\n", prog, name);
	if (ev & DP_LINES_REPLACED)
		fprintf(stderr, "%s: %s: replaced; following the new file\n", prog, name);
	if (ev & DP_LINES_APPEARED)
		fprintf(stderr, "%s: %s: appeared; following it\n", prog, name);
	if (ev & DP_LINES_MISSING)
		fprintf(stderr, "%s: %s: No such file or directory; waiting for it\n", prog, name);
}

/* Read the sources to their end (or until a stop signal when following),
 * interleaving them line batch by line batch.  Output is flushed whenever
 * no input is ready, so values appear as soon as their lines arrive. */
static void run(struct source *src, int n)
{
	int live = n;
	while (live > 0 && !G.out_broken && !stop_sig) {
		int progressed = 0;
		struct pollfd pfd[MAX_SOURCES];
		int npfd = 0;
		for (int i = 0; i < n; i++) {
			struct source *s = &src[i];
			if (s->done)
				continue;
			int rc = DP_LINES_WAIT;
			for (int k = 0; k < 100000 && !G.out_broken; k++) {
				const char *line;
				size_t len;
				dp_err e;
				rc = dp_lines_next(s->r, &line, &len, &e);
				if (rc == DP_LINES_LINE) {
					process_line(s, line, len);
					progressed = 1;
					continue;
				}
				if (rc < 0) {
					fprintf(stderr, "%s: %s\n", prog, e.msg);
					G.failed = 1;
				}
				break;
			}
			notice_events(s);
			if (rc == DP_LINES_END || rc < 0) {
				s->done = 1;
				live--;
			} else if (rc == DP_LINES_WAIT && dp_lines_fd(s->r) >= 0) {
				pfd[npfd++] = (struct pollfd){dp_lines_fd(s->r), POLLIN, 0};
			}
		}
		if (G.chart && G.follow && G.plot_adds != G.plotted_adds &&
		    dp_now() - G.last_plot >= PLOT_EVERY) {
			out_flush();
			if (write_plot() < 0)
				G.failed = 1;
			G.last_plot = dp_now();
		}
		if (progressed || live == 0)
			continue;
		out_flush();
		/* Nothing ready: wait for a pipe to have data, or poll the files
		 * again in a moment. */
		int timeout = G.follow || npfd < live ? 100 : -1;
		if (poll(npfd ? pfd : NULL, (nfds_t)npfd, timeout) < 0 && errno != EINTR) {
			fprintf(stderr, "%s: poll: %s\n", prog, strerror(errno));
			G.failed = 1;
			return;
		}
	}
}

/* ---- Summaries -------------------------------------------------------------- */

static void print_summaries(void)
{
	char sep = G.fmt == FMT_CSV ? ',' : '\t';
	if (G.fmt != FMT_JSON && G.header) {
		fputs("name", stdout);
		for (int k = 0; k < G.nsummary; k++)
			printf("%c%s", sep, summary_names[G.summary[k]]);
		if (G.ranks_seen)
			printf("%crank", sep);
		putchar('\n');
	}
	int nm = dp_matcher_nmetrics(G.m);
	for (int id = 0; id < nm; id++) {
		int first = id < G.cap_first ? G.first_acc[id] : -1;
		struct acc none = {.metric = id, .rank = -1, .next = -1};
		if (first < 0 && !dp_matcher_defined(G.m, id))
			continue; /* a key that never gave a value */
		for (struct acc *a = first >= 0 ? &G.acc[first] : &none; a;
		     a = a->next >= 0 ? &G.acc[a->next] : NULL) {
			size_t namel;
			const char *name = out_name(id, &namel);
			if (G.fmt == FMT_JSON)
				printf("{\"name\":%s", name);
			else
				fputs(name, stdout);
			for (int k = 0; k < G.nsummary; k++) {
				char buf[DP_NUMBER_BUF] = "";
				int have = a->count > 0;
				double mean = (a->sum + a->comp) / (double)a->count;
				switch (G.summary[k]) {
				case S_LAST: dbl_text(buf, a->last); break;
				case S_MIN: dbl_text(buf, a->min); break;
				case S_MAX: dbl_text(buf, a->max); break;
				case S_MEAN: /* 15 digits: a computed value, not a logged one */
					if (a->nan_seen || !isfinite(mean))
						dbl_text(buf, a->nan_seen ? NAN : mean);
					else
						snprintf(buf, sizeof buf, "%.15g", mean);
					break;
				case S_COUNT:
					snprintf(buf, sizeof buf, "%llu", a->count);
					have = 1;
					break;
				}
				/* min and max of only NaN values: none */
				if ((G.summary[k] == S_MIN || G.summary[k] == S_MAX) && !a->nnum)
					have = 0;
				if (G.fmt == FMT_JSON)
					printf(",\"%s\":%s", summary_names[G.summary[k]],
					       have ? buf : "null");
				else
					printf("%c%s", sep, have ? buf : "");
			}
			if (G.fmt == FMT_JSON) {
				if (a->rank >= 0)
					printf(",\"rank\":%d", a->rank);
				fputs("}\n", stdout);
			} else {
				if (G.ranks_seen) {
					putchar(sep);
					if (a->rank >= 0)
						printf("%d", a->rank);
				}
				putchar('\n');
			}
		}
	}
}

/* ---- Messages at the end ------------------------------------------------------ */

static const char *plural(unsigned long long n, const char *one, const char *many)
{
	return n == 1 ? one : many;
}

static void report_skips(struct source *src, int n)
{
	for (int i = 0; i < n; i++) {
		unsigned long long nl = dp_lines_long(src[i].r);
		if (nl)
			fprintf(stderr, "%s: %s: %llu %s longer than %zu bytes skipped\n", prog,
				src[i].name, nl, plural(nl, "line", "lines"), G.max_line);
		if (src[i].binary)
			fprintf(stderr, "%s: %s: %llu %s with NUL bytes (binary) skipped\n", prog,
				src[i].name, src[i].binary, plural(src[i].binary, "line", "lines"));
	}
	const dp_matcher_stats *st = dp_matcher_stats_get(G.m);
	if (st->not_numbers)
		fprintf(stderr, "%s: %llu %s not a number, skipped (first: %s)\n", prog,
			st->not_numbers, plural(st->not_numbers, "capture was", "captures were"),
			st->first_not_number);
	if (st->match_errors)
		fprintf(stderr, "%s: the regex gave up on %llu %s (first: %s)\n", prog,
			st->match_errors, plural(st->match_errors, "line", "lines"),
			st->first_match_error);
	if (st->keys_dropped)
		fprintf(stderr,
			"%s: more than 4096 distinct keys: %llu %s of further keys ignored\n", prog,
			st->keys_dropped, plural(st->keys_dropped, "value", "values"));
}

/* ---- Options -------------------------------------------------------------------- */

static char *read_file(const char *path, size_t *len)
{
	int fd = strcmp(path, "-") == 0 ? 0 : open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	size_t cap = 65536, n = 0;
	char *buf = malloc(cap);
	for (;;) {
		if (!buf)
			break;
		if (n == cap) {
			if (cap >= (64u << 20)) { /* a definitions file, not a dataset */
				errno = EFBIG;
				free(buf);
				buf = NULL;
				break;
			}
			char *nb = realloc(buf, cap *= 2);
			if (!nb) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = nb;
		}
		ssize_t r = read(fd, buf + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			free(buf);
			buf = NULL;
			break;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	int saved = errno;
	if (fd > 0)
		close(fd);
	errno = saved;
	*len = n;
	return buf;
}

enum {
	OPT_DEFS = 256, OPT_LOGFMT, OPT_TSV, OPT_CSV, OPT_JSON, OPT_NOHEADER, OPT_LAST,
	OPT_MIN, OPT_MAX, OPT_MEAN, OPT_COUNT, OPT_PLOT, OPT_TITLE, OPT_MAXLINE
};

static void add_summary(enum summary s)
{
	for (int k = 0; k < G.nsummary; k++)
		if (G.summary[k] == (int)s)
			return;
	G.summary[G.nsummary++] = s;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"metric", required_argument, 0, 'm'},
		{"definitions", required_argument, 0, OPT_DEFS},
		{"logfmt", optional_argument, 0, OPT_LOGFMT},
		{"tsv", no_argument, 0, OPT_TSV},
		{"csv", no_argument, 0, OPT_CSV},
		{"json", no_argument, 0, OPT_JSON},
		{"no-header", no_argument, 0, OPT_NOHEADER},
		{"last", no_argument, 0, OPT_LAST},
		{"min", no_argument, 0, OPT_MIN},
		{"max", no_argument, 0, OPT_MAX},
		{"mean", no_argument, 0, OPT_MEAN},
		{"count", no_argument, 0, OPT_COUNT},
		{"follow", no_argument, 0, 'f'},
		{"plot", required_argument, 0, OPT_PLOT},
		{"title", required_argument, 0, OPT_TITLE},
		{"max-line-length", required_argument, 0, OPT_MAXLINE},
		{"help", no_argument, 0, 'h'},
		{"version", no_argument, 0, 'V'},
		{0, 0, 0, 0},
	};
	dp_err e;
	G.m = dp_matcher_new();
	if (!G.m)
		oom();
	int have_defs = 0, logfmt = 0;
	const char *logfmt_keys = NULL;
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":m:fhV", longopts, NULL)) != -1) {
		switch (c) {
		case 'm': {
			const char *eq = strchr(optarg, '=');
			if (!eq || eq == optarg)
				usage_error("-m %s: want NAME=REGEX", optarg);
			char *name = strndup(optarg, (size_t)(eq - optarg));
			char origin[300];
			snprintf(origin, sizeof origin, "-m %.200s", name ? name : "?");
			if (!name)
				oom();
			int rc = dp_matcher_add(G.m, name, eq + 1, origin, &e);
			free(name);
			if (rc < 0) {
				fprintf(stderr, "%s: %s\n", prog, e.msg);
				exit(e.code == DP_ENOMEM ? 1 : 2);
			}
			have_defs = 1;
			break;
		}
		case OPT_DEFS: {
			size_t len;
			char *text = read_file(optarg, &len);
			if (!text) {
				fprintf(stderr, "%s: %s: %s\n", prog, optarg, strerror(errno));
				exit(2);
			}
			int rc = dp_matcher_add_definitions(G.m, text, len, optarg, &e);
			free(text);
			if (rc < 0) {
				fprintf(stderr, "%s: %s\n", prog, e.msg);
				exit(e.code == DP_ENOMEM ? 1 : 2);
			}
			have_defs = 1;
			break;
		}
		case OPT_LOGFMT:
			logfmt = 1;
			logfmt_keys = optarg;
			break;
		case OPT_TSV: G.fmt = FMT_TSV, G.fmt_given = 1; break;
		case OPT_CSV: G.fmt = FMT_CSV, G.fmt_given = 1; break;
		case OPT_JSON: G.fmt = FMT_JSON, G.fmt_given = 1; break;
		case OPT_NOHEADER: G.header = 0; break;
		case OPT_LAST: add_summary(S_LAST); break;
		case OPT_MIN: add_summary(S_MIN); break;
		case OPT_MAX: add_summary(S_MAX); break;
		case OPT_MEAN: add_summary(S_MEAN); break;
		case OPT_COUNT: add_summary(S_COUNT); break;
		case 'f': G.follow = 1; break;
		case OPT_PLOT: G.plot = optarg; break;
		case OPT_TITLE: G.title = optarg; break;
		case OPT_MAXLINE: {
			uint64_t v;
			if (dp_parse_size(optarg, &v) < 0 || v == 0 || v > ((uint64_t)1 << 36))
				usage_error("--max-line-length %s: want a size such as 1M (1 to 64G)",
					    optarg);
			G.max_line = (size_t)v;
			break;
		}
		case 'h': help(); return fclose(stdout) == 0 ? 0 : 1;
		case 'V': printf("%s (dptools) %s\n", prog, dp_version()); return fclose(stdout) == 0 ? 0 : 1;
		case ':': usage_error("%s: needs an argument", argv[optind - 1]);
		default:
			if (optopt)
				usage_error("-%c: unknown option", optopt);
			usage_error("%s: unknown option", argv[optind - 1]);
		}
	}
	if (logfmt || !have_defs) {
		if (dp_matcher_logfmt(G.m, logfmt_keys, &e) < 0) {
			fprintf(stderr, "%s: %s\n", prog, e.msg);
			exit(2);
		}
	}
	int nfiles = argc - optind;
	if (nfiles > MAX_SOURCES)
		usage_error("too many files (at most %d)", MAX_SOURCES);
	if (G.plot && strcmp(G.plot, "-") == 0 && (G.fmt_given || G.nsummary))
		usage_error("--plot -: the chart takes stdout; no rows or summaries then");
	G.print_records = !G.nsummary && (!G.plot || G.fmt_given);
	G.need_values = G.nsummary || G.plot;
	if (G.plot) {
		G.chart = dp_plot_new();
		if (!G.chart)
			oom();
		if (!G.title)
			G.title = nfiles == 0 || strcmp(argv[optind], "-") == 0 ? "stdin" : argv[optind];
	}

	signal(SIGPIPE, SIG_IGN);
	dp_out_install_signal_cleanup();
	if (G.follow) {
		/* Following ends on a signal: finish the outputs, then exit.
		 * A SIGHUP ignored by the parent stays ignored (nohup). */
		int sigs[] = {SIGINT, SIGTERM, SIGHUP};
		for (size_t i = 0; i < 3; i++) {
			struct sigaction sa, old;
			if (sigs[i] == SIGHUP && sigaction(SIGHUP, NULL, &old) == 0 &&
			    old.sa_handler == SIG_IGN)
				continue;
			memset(&sa, 0, sizeof sa);
			sa.sa_handler = on_stop;
			sigemptyset(&sa.sa_mask);
			sigaction(sigs[i], &sa, NULL);
		}
	}

	struct source *src = calloc((size_t)(nfiles ? nfiles : 1), sizeof *src);
	if (!src)
		oom();
	int nsrc = 0;
	unsigned flags = G.follow ? DP_LINES_FOLLOW : 0;
	if (G.print_records) {
		print_header();
		out_flush();
	}
	for (int i = 0; i < (nfiles ? nfiles : 1); i++) {
		const char *path = nfiles ? argv[optind + i] : "-";
		struct source *s = &src[nsrc];
		s->name = strcmp(path, "-") == 0 ? "stdin" : path;
		s->r = dp_lines_open(path, flags, G.max_line, &e);
		if (!s->r) {
			fprintf(stderr, "%s: %s\n", prog, e.msg);
			G.failed = 1;
			continue;
		}
		nsrc++;
		if (!G.follow) { /* one after the other */
			run(s, 1);
			if (stop_sig || G.out_broken)
				break;
		} else {
			notice_events(s);
		}
	}
	if (G.follow)
		run(src, nsrc);
	out_flush();

	int status = 0;
	if (!G.out_broken) {
		if (G.nsummary)
			print_summaries();
		if (fflush(stdout) == EOF || ferror(stdout))
			out_fail();
	}
	report_skips(src, nsrc);
	if (G.chart) {
		if (dp_plot_points(G.chart) == 0)
			fprintf(stderr, "%s: %s: no values to plot; not written\n", prog, G.plot);
		else if (write_plot() < 0)
			status = 1;
	}
	if (G.values == 0 && !G.failed && !G.out_broken) {
		fprintf(stderr, "%s: no metric values found\n", prog);
		status = status ? status : EXIT_NOVALUES;
	}
	if (G.failed || G.out_broken)
		status = 1;
	for (int i = 0; i < nsrc; i++)
		dp_lines_close(src[i].r);
	free(src);
	if (fclose(stdout) != 0 && !G.out_broken) {
		fprintf(stderr, "%s: stdout: %s\n", prog, strerror(errno));
		status = 1;
	}
	dp_plot_free(G.chart);
	dp_matcher_free(G.m);
	return status;
}
