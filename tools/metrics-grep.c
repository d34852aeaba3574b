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
#include "cli.h"
#include "dp_events.h"
#include "dp_lines.h"
#include "dp_metrics.h"
#include "dp_plot.h"
#include "dp_record.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef DP_PROG
#define DP_PROG "metrics-grep"
#endif

enum { MG_NO_VALUES = 3 }; /* exit status: nothing matched */
#define PLOT_EVERY 2.0 /* seconds between chart rewrites when following */
#define DEFS_MAX (64u << 20) /* a definitions file, not a dataset */

#define USAGE                                                                             \
	"usage: " DP_PROG " [-m NAME=REGEX]... [--definitions FILE] [--logfmt[=KEYS]] "   \
	"[--csv|--json] [--last|--min|--max|--mean|--count]... [-f] [--plot FILE.svg] "  \
	"[FILE]...\n"

enum fmt { FMT_TSV, FMT_CSV, FMT_JSON };
enum summary { S_LAST, S_MIN, S_MAX, S_MEAN, S_COUNT, NSUMMARY };
static const char *const summary_names[NSUMMARY] = {"last", "min", "max", "mean", "count"};

/* Values of one metric from one rank (-1: lines without a rank). */
struct acc {
	int metric, rank;
	int next;   /* the next acc of the same metric, -1 at the end */
	int series; /* plot series id, -1 before the first point */
	unsigned long long count, nnum; /* values, values not NaN */
	double min, max, last;
	/* The finite values' sum: Neumaier's sum + comp, in units of 2^-SUM_SCALE
	 * once it passed a double's range (scaled = 1). */
	double sum, comp;
	int scaled;
	int nan_seen, inf_seen; /* inf_seen: 1 +inf, 2 -inf, 3 both */
};

/* Past DBL_MAX, sums go on in units of 2^128: 2^64 values of at most
 * DBL_MAX (2^1024) stay below 2^960. */
#define SUM_SCALE 128

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
	size_t nacc, cap_acc;
	int *first_acc; /* per metric id: first acc index, -1 */
	size_t nfirst, cap_first;
	int need_values, print_records;
	/* per metric id: the name as the output format writes it */
	struct outname {
		char *s;
		size_t len;
	} *outname;
	size_t noutname, cap_outname;
	unsigned long long values, lineno;
	int failed;      /* a file could not be read: exit 1 at the end */
	int out_broken;  /* stdout failed: stop now */
	int ranks_seen;
	double last_plot;
	unsigned long long plot_adds, plotted_adds; /* points given to the chart, at its last write */
	unsigned long long unplotted; /* values NaN or infinite: no place on the chart */
} G = {.header = 1, .max_line = 1 << 20};

static volatile sig_atomic_t stop_sig;

static void on_stop(int sig) { stop_sig = sig; }

static void help(void)
{
	fputs(USAGE, stdout);
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
	      "FILE - or none: standard input; a folder: a TensorBoard log folder, its\n"
	      "event files' values named RUN/TAG (validation/epoch_loss) for those below it.\n"
	      "Exit status: 0 values found, 1 failure,\n"
	      "2 usage error (bad option, regex or definitions), 3 no value found.\n",
	      stdout);
}

/* ---- Output ------------------------------------------------------------- */

static void out_fail(void)
{
	if (!G.out_broken)
		cli_warn("stdout: %s", strerror(errno ? errno : EIO));
	G.out_broken = 1;
}

/* Rows go through this buffer straight to write(2): stdio's copy was a
 * tenth of the time of a large extraction.  Summaries use stdio, after.
 * A row is at most a 514-byte escaped name and four numbers. */
#define OUT_FLUSH_AT (1 << 16)
#define ROW_MAX 1024
static dp_buf obuf = DP_BUF_INIT;

static void out_flush(void)
{
	if (G.out_broken)
		return;
	dp_err e;
	if (obuf.len && dp_write_all(STDOUT_FILENO, obuf.p, obuf.len, "stdout", &e) < 0)
		out_fail();
	dp_buf_reset(&obuf);
	if (fflush(stdout) == EOF || ferror(stdout))
		out_fail();
}

/* Room for a row at the end of obuf: write it at the pointer returned,
 * then out_end() with the pointer past it. */
static char *out_room(void)
{
	if (obuf.len > OUT_FLUSH_AT - ROW_MAX)
		out_flush();
	if (dp_buf_reserve(&obuf, ROW_MAX) < 0)
		cli_die("out of memory");
	return obuf.p + obuf.len;
}

static void out_end(char *q)
{
	*q = 0;
	obuf.len = (size_t)(q - obuf.p);
}

static void put(char **q, const char *s, size_t n)
{
	memcpy(*q, s, n);
	*q += n;
}

/* s as one CSV field: quoted, with doubled quotes, when it holds , or ". */
static void csv_field(dp_buf *b, const char *s)
{
	if (!strpbrk(s, ",\"")) {
		dp_buf_addstr(b, s);
		return;
	}
	dp_buf_add(b, "\"", 1);
	for (const char *p = s; *p; p++) {
		if (*p == '"')
			dp_buf_add(b, "\"", 1);
		dp_buf_add(b, p, 1);
	}
	dp_buf_add(b, "\"", 1);
}

/* The metric's name as the output format writes it, cached per id;
 * *len its length. */
static const char *out_name(int id, size_t *len)
{
	size_t i = (size_t)id;
	if (i >= G.noutname) {
		cli_grow(&G.outname, &G.cap_outname, i + 1, sizeof *G.outname);
		memset(G.outname + G.noutname, 0, (i + 1 - G.noutname) * sizeof *G.outname);
		G.noutname = i + 1;
	}
	struct outname *o = &G.outname[i];
	if (!o->s) {
		/* Names are UTF-8 without control characters (the matcher
		 * checks): TSV takes them as they are, CSV quotes when needed,
		 * JSON escapes. */
		const char *s = dp_matcher_name(G.m, id);
		dp_buf b = DP_BUF_INIT;
		if (G.fmt == FMT_JSON)
			dp_buf_json_str(&b, s, strlen(s), 0);
		else if (G.fmt == FMT_CSV)
			csv_field(&b, s);
		else
			dp_buf_addstr(&b, s);
		o->len = b.len;
		o->s = dp_buf_take(&b);
		if (!o->s)
			cli_die("out of memory");
	}
	*len = o->len;
	return o->s;
}

/* A number for output, NUL-terminated in buf (DP_NUMBER_BUF bytes): the
 * text of v, or null in JSON for NaN and the infinities ("nan", "inf",
 * "-inf" in TSV/CSV).  Returns the length. */
static size_t dbl_text(char *buf, double v)
{
	if (G.fmt == FMT_JSON && !isfinite(v)) {
		memcpy(buf, "null", 5);
		return 4;
	}
	return strlen(dp_fmt_double(v, buf, DP_NUMBER_BUF));
}

/* 1 when the number t[0..n) (fewer than DP_NUMBER_BUF bytes) is beyond a
 * double's range ("1e400"): without an exponent it is too short to be. */
static int overflows(const char *t, size_t n)
{
	return (memchr(t, 'e', n) || memchr(t, 'E', n)) && !isfinite(dp_number_value(t, n));
}

/* A number for output from its text: the text as written when it is
 * already in JSON's form, else dbl_text of its value.  "1e400" has JSON's
 * syntax, but readers make it an infinity (and Python writes it back as
 * Infinity, which is not JSON): in JSON it is null, as infinities are. */
static size_t num_text(char *buf, const char *t, size_t n)
{
	if (n < DP_NUMBER_BUF && dp_number_is_json(t, n) &&
	    !(G.fmt == FMT_JSON && overflows(t, n))) {
		memcpy(buf, t, n);
		return n;
	}
	return dbl_text(buf, dp_number_value(t, n));
}

static void print_header(void)
{
	if (G.fmt == FMT_JSON || !G.header)
		return;
	dp_buf_addstr(&obuf, G.fmt == FMT_CSV ? "name,value,step,epoch,rank\n"
					      : "name\tvalue\tstep\tepoch\trank\n");
}

/* {"name":...,"value":...,"step":...,"epoch":...,"rank":...}, without the
 * step and epoch when absent or not numbers, the rank when none. */
static char *json_row(char *q, const char *name, size_t namel, const dp_sample *s,
		      const dp_match *mt)
{
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
	return q;
}

/* name, value, step, epoch, rank separated by sep; empty when absent. */
static char *delimited_row(char *q, char sep, const char *name, size_t namel,
			   const dp_sample *s, const dp_match *mt)
{
	/* numbers straight into the buffer: no copy through a temporary */
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
	return q;
}

static void print_record(const dp_sample *s, const dp_match *mt)
{
	char *q = out_room();
	size_t namel;
	const char *name = out_name(s->metric, &namel);
	if (G.fmt == FMT_JSON)
		q = json_row(q, name, namel, s, mt);
	else
		q = delimited_row(q, G.fmt == FMT_CSV ? ',' : '\t', name, namel, s, mt);
	out_end(q);
}

/* ---- Accumulators and the chart ------------------------------------------ */

/* The accumulator of metric from rank, created when new.  Each metric's
 * list is kept sorted by rank. */
static struct acc *get_acc(int metric, int rank)
{
	size_t m = (size_t)metric;
	if (m >= G.nfirst) {
		cli_grow(&G.first_acc, &G.cap_first, m + 1, sizeof *G.first_acc);
		while (G.nfirst <= m)
			G.first_acc[G.nfirst++] = -1;
	}
	int prev = -1, next = G.first_acc[m];
	while (next >= 0) {
		struct acc *a = &G.acc[next];
		if (a->rank == rank)
			return a;
		if (a->rank > rank)
			break;
		prev = next;
		next = a->next;
	}
	/* Growing moves G.acc: link by index, after. */
	cli_grow(&G.acc, &G.cap_acc, G.nacc + 1, sizeof *G.acc);
	int id = (int)G.nacc++;
	G.acc[id] = (struct acc){.metric = metric, .rank = rank, .next = next, .series = -1,
				 .min = INFINITY, .max = -INFINITY};
	*(prev >= 0 ? &G.acc[prev].next : &G.first_acc[m]) = id;
	return &G.acc[id];
}

/* The chart's series of a's values: "NAME" or "NAME (rank N)", in the
 * panel of the metric's family. */
static int chart_series(const struct acc *a)
{
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
	int id = dp_plot_series(G.chart, label, panel);
	if (id < 0)
		cli_die("out of memory");
	return id;
}

/* Neumaier's compensated sum: the mean of 10^8 values stays exact to the
 * last digits.  A sum that would overflow goes on scaled down (exactly, by
 * a power of two): the mean of 1e308 and 1e308 is 1e308, not infinity. */
static void add_to_sum(struct acc *a, double v)
{
	double x = a->scaled ? ldexp(v, -SUM_SCALE) : v;
	double t = a->sum + x;
	if (!isfinite(t) && !a->scaled) {
		a->scaled = 1;
		a->sum = ldexp(a->sum, -SUM_SCALE);
		a->comp = ldexp(a->comp, -SUM_SCALE);
		x = ldexp(v, -SUM_SCALE);
		t = a->sum + x;
	}
	if (fabs(a->sum) >= fabs(x))
		a->comp += (a->sum - t) + x;
	else
		a->comp += (x - t) + a->sum;
	a->sum = t;
}

/* The mean of a's values: NaN when one was NaN or both infinities were
 * met, an infinity when one was, else the finite values' mean. */
static double acc_mean(const struct acc *a)
{
	if (a->nan_seen || a->inf_seen == 3 || a->count == 0)
		return NAN;
	if (a->inf_seen)
		return a->inf_seen == 1 ? INFINITY : -INFINITY;
	double m = (a->sum + a->comp) / (double)a->nnum;
	return a->scaled ? ldexp(m, SUM_SCALE) : m;
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
		if (isinf(v))
			a->inf_seen |= v > 0 ? 1 : 2;
		else
			add_to_sum(a, v);
	}
	if (G.chart && !isfinite(v)) {
		G.unplotted++;
	} else if (G.chart) {
		if (a->series < 0)
			a->series = chart_series(a);
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
		cli_warn("%s: %s", G.plot, e.msg);
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
		cli_warn("%s", e.msg);
		return -1;
	}
	G.plotted_adds = G.plot_adds;
	return 0;
}

/* ---- Lines ---------------------------------------------------------------- */

struct source {
	dp_lines *r; /* NULL once closed */
	int fd;      /* a FIFO opened here (to look at its first bytes), or -1 */
	int evfd;    /* an event file followed (-f), or -1 */
	off_t evpos; /* ... read up to there */
	const char *name;
	const char *run; /* an event file of a log folder: its run ("train"), or NULL */
	int done;
	unsigned long long binary, nlong; /* lines skipped: NUL bytes, too long */
};

/* Close s's file (its count of long lines kept for the report). */
static void close_source(struct source *s)
{
	if (s->evfd >= 0)
		close(s->evfd);
	s->evfd = -1;
	if (!s->r)
		return;
	s->nlong = dp_lines_long(s->r);
	dp_lines_close(s->r);
	s->r = NULL;
	if (s->fd >= 0)
		close(s->fd);
	s->fd = -1;
}

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

/* ---- TensorBoard event files ------------------------------------------------ */

/* 1 when path ("-": stdin) is a regular file that starts as an event file
 * does (dp_events_detect); read without moving its offset. */
static int is_event_file(const char *path)
{
	int own = strcmp(path, "-") != 0;
	struct stat st;
	if (own && (stat(path, &st) < 0 || !S_ISREG(st.st_mode)))
		return 0; /* opening a FIFO here would take its writer's first bytes */
	int fd = own ? open(path, O_RDONLY | O_CLOEXEC) : STDIN_FILENO;
	uint8_t head[4096];
	ssize_t n = -1;
	if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
		off_t at = own ? 0 : lseek(fd, 0, SEEK_CUR);
		n = at < 0 ? -1 : pread(fd, head, sizeof head, at);
	}
	if (own && fd >= 0)
		close(fd);
	return n > 0 && dp_events_detect(head, (size_t)n);
}

/* A tag as a logfmt key: bytes other than [A-Za-z0-9_.:/@-] become '_'. */
static void put_key(dp_buf *b, const char *tag, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char c = tag[i];
		int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
			 strchr("_.:/@-", c);
		dp_buf_add(b, ok && c ? &c : "_", 1);
	}
}

/* A value as text: a float32 with the fewest digits that read back to it
 * (0.41, not 0.4099999964237213), a double as dp_fmt_double does. */
static void put_value(dp_buf *b, const dp_event_scalar *v)
{
	char t[DP_NUMBER_BUF];
	size_t n = strlen(dp_fmt_double(v->value, t, sizeof t));
	/* Any decimal of 6 digits or fewer reads back to its float (FLT_DIG):
	 * when the 6-digit form reads back, no shorter one differs from it
	 * but for the trailing zeros %g drops. */
	for (int p = 6; v->single && isfinite(v->value) && p <= 9; p++) {
		snprintf(t, sizeof t, "%.*g", p, v->value);
		if (strtof(t, NULL) == (float)v->value) {
			n = strlen(t);
			break;
		}
	}
	dp_buf_add(b, t, n);
}

/* The records of r, each event with scalars matched as the logfmt line
 * `step=S TAG=VALUE...` (so -m, --definitions and --logfmt all apply).
 * Returns the reader's last status (0 at the end, < 0 with e set) and sets
 * *good to the byte just past the last whole record. */
static int read_records(struct source *s, dp_reader *r, uint64_t *good, dp_err *e)
{
	dp_event ev = DP_EVENT_INIT;
	dp_buf line = DP_BUF_INIT;
	dp_record rec;
	int rc = 0;
	*good = 0;
	while (!G.out_broken && !stop_sig && (rc = dp_reader_next(r, &rec, e)) > 0) {
		*good = rec.offset + rec.frame_len;
		if (dp_event_parse(&ev, rec.data, rec.len, e) < 0) {
			if (e->code == DP_ENOMEM)
				cli_die("out of memory");
			dp_preferr(e, "%s: record %" PRIu64 " at byte %" PRIu64, dp_reader_name(r),
				   rec.index, rec.offset);
			rc = DP_EDATA;
			break;
		}
		if (!ev.nscalars)
			continue;
		dp_buf_reset(&line);
		dp_buf_printf(&line, "step=%" PRId64, ev.step);
		for (size_t i = 0; i < ev.nscalars; i++) {
			dp_buf_add(&line, " ", 1);
			if (s->run && *s->run) { /* TensorBoard's run/tag */
				put_key(&line, s->run, strlen(s->run));
				dp_buf_add(&line, "/", 1);
			}
			put_key(&line, ev.scalars[i].tag, ev.scalars[i].tag_len);
			dp_buf_add(&line, "=", 1);
			put_value(&line, &ev.scalars[i]);
		}
		if (line.err)
			cli_die("out of memory");
		process_line(s, line.p, line.len);
		if (G.follow || line.len > OUT_FLUSH_AT)
			out_flush();
	}
	dp_buf_free(&line);
	dp_event_free(&ev);
	return rc;
}

/* Read a whole event file (r NULL: e says why it could not be opened). */
static void read_events(struct source *s, dp_reader *r, dp_err *e)
{
	uint64_t good;
	if (!r || read_records(s, r, &good, e) < 0) {
		cli_warn("%s", e->msg);
		G.failed = 1;
	}
	dp_reader_close(r);
}

/* Following an event file: the records added since the last look.  A
 * record still being written (the file ends inside it) waits for the next
 * look; a damaged one ends the file's following.  Returns DP_LINES_WAIT,
 * or DP_LINES_END after a message. */
static int events_more(struct source *s, int *progressed)
{
	struct stat st;
	if (fstat(s->evfd, &st) < 0 || st.st_size <= s->evpos)
		return DP_LINES_WAIT;
	size_t n = (size_t)(st.st_size - s->evpos);
	uint8_t *buf = cli_malloc(n);
	ssize_t got = pread(s->evfd, buf, n, s->evpos);
	char name[512];
	snprintf(name, sizeof name, "%s (from byte %lld)", s->name, (long long)s->evpos);
	dp_err e;
	int rc = DP_LINES_WAIT;
	uint64_t good = 0;
	dp_reader *r = got > 0 ? dp_reader_open_mem(buf, (size_t)got, name, NULL, &e) : NULL;
	if (r && read_records(s, r, &good, &e) < 0) {
		uint64_t len = 0, left = (uint64_t)got - good;
		if (left >= DP_TFR_HEADER)
			memcpy(&len, buf + good, 8);
		if (left >= DP_TFR_HEADER && len <= left - DP_TFR_HEADER - DP_TFR_FOOTER) {
			cli_warn("%s", e.msg); /* a whole record, damaged */
			G.failed = 1;
			rc = DP_LINES_END;
		}
	}
	dp_reader_close(r);
	free(buf);
	*progressed |= good > 0;
	s->evpos += (off_t)good;
	return rc;
}

/* The first bytes of a pipe, read no further than an event file's first
 * record: the head of an event file, or the start of a text to give back
 * to the line reader. */
struct head {
	uint8_t b[4096];
	size_t n;
};

/* Read until h holds want bytes, or the input ends: 0, or -1 (errno). */
static int head_fill(int fd, struct head *h, size_t want)
{
	while (h->n < want) {
		ssize_t r = read(fd, h->b + h->n, want - h->n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -1 : 0;
		h->n += (size_t)r;
	}
	return 0;
}

/* 1 when the pipe fd starts as an event file, 0 when not, -1 on a read
 * error.  A text is known by its third byte (an event file's first record
 * is shorter than 64 KiB: that byte of its length is 0), so a log is never
 * held up waiting for bytes that may not come yet. */
static int sniff_pipe(int fd, struct head *h)
{
	h->n = 0;
	if (isatty(fd))
		return 0;
	if (head_fill(fd, h, 3) < 0)
		return -1;
	if (h->n < 3 || h->b[2])
		return 0;
	if (head_fill(fd, h, DP_TFR_HEADER) < 0)
		return -1;
	uint64_t len;
	uint32_t crc;
	memcpy(&len, h->b, 8);
	memcpy(&crc, h->b + 8, 4);
	if (h->n < DP_TFR_HEADER || dp_crc_mask(dp_crc32c(0, h->b, 8)) != crc ||
	    len > sizeof h->b - DP_TFR_HEADER - DP_TFR_FOOTER)
		return 0;
	if (head_fill(fd, h, DP_TFR_HEADER + (size_t)len + DP_TFR_FOOTER) < 0)
		return -1;
	return dp_events_detect(h->b, h->n);
}

/* An event file on a pipe: its head and the rest, read into memory. */
static void read_events_pipe(struct source *s, int fd, const struct head *h)
{
	dp_buf all;
	dp_buf_init(&all, 0);
	dp_buf_add(&all, h->b, h->n);
	for (;;) {
		if (dp_buf_reserve(&all, 1 << 16) < 0)
			cli_die("out of memory");
		ssize_t r = read(fd, all.p + all.len, 1 << 16);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			cli_warn("%s: %s", s->name, strerror(errno));
			G.failed = 1;
			break;
		}
		if (r == 0)
			break;
		all.len += (size_t)r;
	}
	dp_err e;
	read_events(s, dp_reader_open_mem(all.p, all.len, s->name, NULL, &e), &e);
	dp_buf_free(&all);
}

/* Open path as s: an event file is read now (1); a log gets its line
 * reader (0); -1 after a message. */
static int open_source(struct source *s, const char *path, unsigned flags)
{
	dp_err e;
	int std = strcmp(path, "-") == 0;
	struct stat st;
	s->fd = s->evfd = -1;
	s->name = std ? "stdin" : path;
	if (is_event_file(path) && G.follow) { /* read as it grows */
		s->evpos = std ? lseek(STDIN_FILENO, 0, SEEK_CUR) : 0;
		s->evfd = std ? dup(STDIN_FILENO) : open(path, O_RDONLY | O_CLOEXEC);
		if (s->evfd >= 0 && s->evpos >= 0)
			return 0;
		cli_warn("%s: %s", s->name, strerror(errno));
		G.failed = 1;
		return -1;
	}
	if (is_event_file(path)) { /* read whole, now */
		read_events(s, dp_reader_open_path(path, NULL, &e), &e);
		return 1;
	}
	int fd = std ? STDIN_FILENO : -1;
	if (!std && stat(path, &st) == 0 && S_ISFIFO(st.st_mode)) /* a named pipe: look at it */
		fd = s->fd = open(path, O_RDONLY | O_CLOEXEC);
	struct head h = {.n = 0};
	if (fd >= 0 && fstat(fd, &st) == 0 && !S_ISREG(st.st_mode)) {
		int ev = sniff_pipe(fd, &h);
		if (ev < 0) {
			cli_warn("%s: %s", s->name, strerror(errno));
			G.failed = 1;
			return 1;
		}
		if (ev) {
			read_events_pipe(s, fd, &h);
			return 1;
		}
	}
	s->r = fd >= 0 ? dp_lines_fdopen(fd, s->name, flags, G.max_line, &e)
		       : dp_lines_open(path, flags, G.max_line, &e);
	if (s->r && h.n && dp_lines_unread(s->r, h.b, h.n, &e) < 0) {
		dp_lines_close(s->r);
		s->r = NULL;
	}
	if (!s->r) {
		cli_warn("%s", e.msg);
		G.failed = 1;
		return -1;
	}
	return 0;
}

static void notice_events(struct source *src)
{
	if (!src->r)
		return; /* an event file */
	unsigned ev = dp_lines_events(src->r);
	const char *name = src->name;
	if (ev & DP_LINES_TRUNCATED)
		cli_warn("%s: file truncated; reading from the start", name);
	if (ev & DP_LINES_REPLACED)
		cli_warn("%s: replaced; following the new file", name);
	if (ev & DP_LINES_APPEARED)
		cli_warn("%s: appeared; following it", name);
	if (ev & DP_LINES_MISSING)
		cli_warn("%s: No such file or directory; waiting for it", name);
}

/* Up to 100000 lines of s, until it has none ready.  Returns the last
 * dp_lines_next status (DP_LINES_WAIT, DP_LINES_END, < 0 after a message);
 * *progressed set when a line was read. */
static int read_batch(struct source *s, int *progressed)
{
	if (s->evfd >= 0)
		return events_more(s, progressed);
	int rc = DP_LINES_WAIT;
	for (int k = 0; k < 100000 && !G.out_broken; k++) {
		const char *line;
		size_t len;
		dp_err e;
		rc = dp_lines_next(s->r, &line, &len, &e);
		if (rc == DP_LINES_LINE) {
			process_line(s, line, len);
			*progressed = 1;
			continue;
		}
		if (rc < 0) {
			cli_warn("%s", e.msg);
			G.failed = 1;
		}
		break;
	}
	notice_events(s);
	return rc;
}

/* Read the sources to their end (or until a stop signal when following),
 * interleaving them line batch by line batch.  Output is flushed whenever
 * no input is ready, so values appear as soon as their lines arrive. */
static void run(struct source *src, int n)
{
	int live = n;
	struct pollfd *pfd = cli_calloc((size_t)n, sizeof *pfd);
	while (live > 0 && !G.out_broken && !stop_sig) {
		int progressed = 0;
		int npfd = 0;
		for (int i = 0; i < n; i++) {
			struct source *s = &src[i];
			if (s->done)
				continue;
			int rc = read_batch(s, &progressed);
			if (rc == DP_LINES_END || rc < 0) {
				s->done = 1;
				live--;
			} else if (rc == DP_LINES_WAIT && s->r && dp_lines_fd(s->r) >= 0) {
				pfd[npfd++] = (struct pollfd){dp_lines_fd(s->r), POLLIN, 0};
			}
		}
		if (G.chart && G.follow && G.plot_adds != G.plotted_adds && dp_plot_points(G.chart) &&
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
			cli_warn("poll: %s", strerror(errno));
			G.failed = 1;
			break;
		}
	}
	free(pfd);
}

/* ---- Summaries -------------------------------------------------------------- */

/* Summary `what` of a as text in buf; returns 0 when there is none (no
 * value; min and max of only NaN values). */
static int summary_text(char buf[DP_NUMBER_BUF], const struct acc *a, enum summary what)
{
	double mean = acc_mean(a);
	switch (what) {
	case S_LAST: dbl_text(buf, a->last); break;
	case S_MIN: dbl_text(buf, a->min); break;
	case S_MAX: dbl_text(buf, a->max); break;
	case S_MEAN: /* 15 digits: a computed value, not a logged one */
		if (!isfinite(mean))
			dbl_text(buf, mean);
		else
			snprintf(buf, DP_NUMBER_BUF, "%.15g", mean);
		break;
	case S_COUNT:
		snprintf(buf, DP_NUMBER_BUF, "%llu", a->count);
		return 1;
	default: break;
	}
	if ((what == S_MIN || what == S_MAX) && !a->nnum)
		return 0;
	return a->count > 0;
}

/* One row of summaries: a's, of metric id. */
static void print_summary_row(int id, const struct acc *a)
{
	char sep = G.fmt == FMT_CSV ? ',' : '\t';
	size_t namel;
	const char *name = out_name(id, &namel);
	if (G.fmt == FMT_JSON)
		printf("{\"name\":%s", name);
	else
		fputs(name, stdout);
	for (int k = 0; k < G.nsummary; k++) {
		char buf[DP_NUMBER_BUF] = "";
		int have = summary_text(buf, a, (enum summary)G.summary[k]);
		if (G.fmt == FMT_JSON)
			printf(",\"%s\":%s", summary_names[G.summary[k]], have ? buf : "null");
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

/* A header (TSV, CSV), then a row per metric and rank, in the order the
 * metrics were defined or met; a defined metric without values gets a
 * row of its own. */
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
		int first = (size_t)id < G.nfirst ? G.first_acc[id] : -1;
		struct acc none = {.metric = id, .rank = -1, .next = -1};
		if (first < 0 && !dp_matcher_defined(G.m, id))
			continue; /* a key that never gave a value */
		for (const struct acc *a = first >= 0 ? &G.acc[first] : &none; a;
		     a = a->next >= 0 ? &G.acc[a->next] : NULL)
			print_summary_row(id, a);
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
		unsigned long long nl = src[i].nlong;
		if (nl)
			cli_warn("%s: %llu %s longer than %zu bytes skipped", src[i].name, nl,
				 plural(nl, "line", "lines"), G.max_line);
		if (src[i].binary)
			cli_warn("%s: %llu %s with NUL bytes (binary) skipped", src[i].name,
				 src[i].binary, plural(src[i].binary, "line", "lines"));
	}
	const dp_matcher_stats *st = dp_matcher_stats_get(G.m);
	if (st->not_numbers)
		cli_warn("%llu %s not a number, skipped (first: %s)", st->not_numbers,
			 plural(st->not_numbers, "capture was", "captures were"),
			 st->first_not_number);
	if (st->match_errors)
		cli_warn("the regex gave up on %llu %s (first: %s)", st->match_errors,
			 plural(st->match_errors, "line", "lines"), st->first_match_error);
	if (st->keys_dropped)
		cli_warn("more than 4096 distinct keys: %llu %s of further keys ignored",
			 st->keys_dropped, plural(st->keys_dropped, "value", "values"));
}

/* ---- Options -------------------------------------------------------------------- */

enum {
	OPT_DEFS = 256, OPT_LOGFMT, OPT_TSV, OPT_CSV, OPT_JSON, OPT_NOHEADER, OPT_LAST,
	OPT_MIN, OPT_MAX, OPT_MEAN, OPT_COUNT, OPT_PLOT, OPT_TITLE, OPT_MAXLINE
};

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
	CLI_OPTIONS_END,
};

/* A metric definition the matcher refused: exit 2 (1 when out of memory). */
static void definition_error(const dp_err *e)
{
	cli_die_code(e->code == DP_ENOMEM ? CLI_FAIL : CLI_USAGE, "%s", e->msg);
}

/* -m NAME=REGEX */
static void add_metric_option(const char *arg)
{
	const char *eq = strchr(arg, '=');
	if (!eq || eq == arg)
		cli_usage_error("-m %s: want NAME=REGEX", arg);
	char *name = strndup(arg, (size_t)(eq - arg));
	if (!name)
		cli_die("out of memory");
	char origin[300];
	snprintf(origin, sizeof origin, "-m %.200s", name);
	dp_err e;
	int rc = dp_matcher_add(G.m, name, eq + 1, origin, &e);
	free(name);
	if (rc < 0)
		definition_error(&e);
}

/* --definitions FILE: SageMaker's metric_definitions list. */
static void add_definitions_file(const char *path)
{
	dp_buf text = DP_BUF_INIT;
	dp_err e;
	if (dp_read_file(path, path, DEFS_MAX, &text, &e) < 0) {
		dp_buf_free(&text);
		cli_die_code(CLI_USAGE, "%s", e.msg);
	}
	int rc = dp_matcher_add_definitions(G.m, text.p ? text.p : "", text.len, path, &e);
	dp_buf_free(&text);
	if (rc < 0)
		definition_error(&e);
}

static void add_summary(enum summary s)
{
	for (int k = 0; k < G.nsummary; k++)
		if (G.summary[k] == (int)s)
			return;
	G.summary[G.nsummary++] = s;
}

static void set_format(enum fmt f)
{
	G.fmt = f;
	G.fmt_given = 1;
}

/* Parse the options into G (metrics into G.m); returns the index of the
 * first file argument. */
static int parse_args(int argc, char **argv)
{
	int have_defs = 0, logfmt = 0;
	const char *logfmt_keys = NULL;
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":m:fhV", longopts, NULL)) != -1) {
		switch (c) {
		case 'm': add_metric_option(optarg), have_defs = 1; break;
		case OPT_DEFS: add_definitions_file(optarg), have_defs = 1; break;
		case OPT_LOGFMT: logfmt = 1, logfmt_keys = optarg; break;
		case OPT_TSV: set_format(FMT_TSV); break;
		case OPT_CSV: set_format(FMT_CSV); break;
		case OPT_JSON: set_format(FMT_JSON); break;
		case OPT_NOHEADER: G.header = 0; break;
		case OPT_LAST: add_summary(S_LAST); break;
		case OPT_MIN: add_summary(S_MIN); break;
		case OPT_MAX: add_summary(S_MAX); break;
		case OPT_MEAN: add_summary(S_MEAN); break;
		case OPT_COUNT: add_summary(S_COUNT); break;
		case 'f': G.follow = 1; break;
		case OPT_PLOT: G.plot = optarg; break;
		case OPT_TITLE: G.title = optarg; break;
		case OPT_MAXLINE:
			G.max_line = (size_t)cli_size("--max-line-length", optarg, 1, (uint64_t)1 << 36);
			break;
		default: cli_default_option(c, argv, help);
		}
	}
	dp_err e;
	if ((logfmt || !have_defs) && dp_matcher_logfmt(G.m, logfmt_keys, &e) < 0)
		cli_die_code(CLI_USAGE, "%s", e.msg);
	if (G.plot && strcmp(G.plot, "-") == 0 && (G.fmt_given || G.nsummary))
		cli_usage_error("--plot -: the chart takes stdout; no rows or summaries then");
	return optind;
}

/* ---- The run ---------------------------------------------------------------------- */

/* Following ends on a signal: the outputs are finished, then the program
 * exits.  A SIGHUP ignored by the parent stays ignored (nohup). */
static void catch_stop_signals(void)
{
	cli_catch_signals((const int[]){SIGINT, SIGTERM}, 2, on_stop, 0);
	cli_catch_signals((const int[]){SIGHUP}, 1, on_stop, 1);
}

/* What to do with the values, the chart, the signals. */
static void set_up(char **files, int nfiles)
{
	G.print_records = !G.nsummary && (!G.plot || G.fmt_given);
	G.need_values = G.nsummary || G.plot;
	if (G.plot) {
		/* A chart that cannot be written is known before the reading
		 * (which may be hours of following). */
		dp_err e;
		if (dp_out_check(G.plot, &e) < 0)
			cli_die_err(CLI_FAIL, &e);
		G.chart = dp_plot_new();
		if (!G.chart)
			cli_die("out of memory");
		if (!G.title)
			G.title = nfiles == 0 || strcmp(files[0], "-") == 0 ? "stdin" : files[0];
	}
	dp_out_install_signal_cleanup();
	if (G.follow)
		catch_stop_signals();
	if (G.print_records) {
		print_header();
		out_flush();
	}
}

/* A folder among the files is a TensorBoard log folder: its event files
 * take its place, each with its run (dp_tb_find), which names its values
 * as TensorBoard does (validation/epoch_loss).  The lists become new
 * blocks (free them); found[] keeps the blocks of the names (64 folders at
 * most). */
static void expand_folders(char ***files, char ***runs, int *nfiles, char ***found, int *nfound)
{
	size_t n = 0, cap = (size_t)*nfiles + 1;
	char **f = cli_calloc(cap, sizeof *f), **r = cli_calloc(cap, sizeof *r);
	for (int i = 0; i < *nfiles; i++) {
		const char *path = (*files)[i];
		char **m = NULL;
		dp_err e;
		if (strcmp(path, "-") && cli_is_dir(path)) {
			if (*nfound == 64)
				cli_usage_error("more than 64 folders");
			if (!(m = dp_tb_find(path, &e))) {
				cli_warn("%s", e.msg);
				G.failed = 1;
				continue;
			}
			found[(*nfound)++] = m;
			if (!m[0]) {
				cli_warn("%s: a folder without event files (tfevents in their names)", path);
				G.failed = 1;
			}
		}
		size_t k = 0;
		while (m && m[2 * k])
			k++;
		if (n + (m ? k : 1) >= cap) {
			cap = 2 * (n + k + 1);
			char **nf = realloc(f, cap * sizeof *f), **nr = nf ? realloc(r, cap * sizeof *r) : NULL;
			if (!nf || !nr)
				cli_die("out of memory");
			f = nf, r = nr;
		}
		for (size_t j = 0; m && j < k; j++, n++)
			f[n] = m[2 * j], r[n] = m[2 * j + 1];
		if (!m)
			f[n] = (char *)path, r[n++] = NULL;
	}
	*files = f;
	*runs = r;
	*nfiles = (int)n;
}

/* Open the files (none: stdin) into src and read them: one after the
 * other, each closed once read, or all together when following (each then
 * holds a descriptor to the end).  Returns the number opened. */
static int read_sources(struct source *src, char **files, char **runs, int nfiles)
{
	int nsrc = 0;
	unsigned flags = G.follow ? DP_LINES_FOLLOW : 0;
	for (int i = 0; i < (nfiles ? nfiles : 1); i++) {
		const char *path = nfiles ? files[i] : "-";
		struct source *s = &src[nsrc];
		s->run = nfiles ? runs[i] : NULL;
		if (open_source(s, path, flags) != 0) {
			if (s->fd >= 0)
				close(s->fd);
			continue;
		}
		nsrc++;
		if (!G.follow) { /* one after the other */
			run(s, 1);
			close_source(s);
			if (stop_sig || G.out_broken)
				break;
		} else {
			notice_events(s);
		}
	}
	if (G.follow)
		run(src, nsrc);
	for (int i = 0; i < nsrc; i++)
		close_source(&src[i]);
	out_flush();
	return nsrc;
}

/* Summaries, counts of what was skipped, the chart; the exit status. */
static int finish(struct source *src, int nsrc)
{
	int status = CLI_OK;
	if (!G.out_broken && G.nsummary)
		print_summaries();
	out_flush();
	report_skips(src, nsrc);
	if (G.chart && dp_plot_points(G.chart) > 0) {
		if (write_plot() < 0)
			status = CLI_FAIL;
		else if (G.unplotted)
			cli_warn("%s: %llu NaN or infinite %s left out", G.plot, G.unplotted,
				 plural(G.unplotted, "value", "values"));
	} else if (G.chart && G.unplotted) {
		cli_warn("%s: no value can be drawn (%llu NaN or infinite); not written", G.plot,
			 G.unplotted);
		status = CLI_FAIL;
	} else if (G.chart) {
		cli_warn("%s: no values to plot; not written", G.plot);
	}
	if (G.values == 0 && !G.failed && !G.out_broken) {
		cli_warn("no metric values found");
		if (!status)
			status = MG_NO_VALUES;
	}
	if (!G.out_broken && cli_close_stdout() < 0)
		G.out_broken = 1;
	if (G.failed || G.out_broken)
		status = CLI_FAIL;
	return status;
}

int main(int argc, char **argv)
{
	cli.prog = DP_PROG;
	cli.usage = USAGE;
	G.m = dp_matcher_new();
	if (!G.m)
		cli_die("out of memory");
	int first = parse_args(argc, argv);
	char **files = argv + first, **runs = NULL, **found[64];
	int nfiles = argc - first, nfound = 0, given = nfiles;
	set_up(files, nfiles);
	expand_folders(&files, &runs, &nfiles, found, &nfound);
	struct source *src = cli_calloc((size_t)(nfiles ? nfiles : 1), sizeof *src);
	int nsrc = given && !nfiles ? 0 : read_sources(src, files, runs, nfiles); /* not stdin */
	int status = finish(src, nsrc);
	free(src);
	free(files);
	free(runs);
	for (int i = 0; i < nfound; i++)
		free(found[i]);
	dp_buf_free(&obuf);
	dp_plot_free(G.chart);
	dp_matcher_free(G.m);
	return status;
}
