/*
 * tfr-cat - the cat of TFRecords.
 *
 * Reads TFRecord streams (files or stdin, GZIP/ZLIB detected), checks every
 * CRC, and writes the records again (plain or compressed), or prints them as
 * JSON lines, a count, a schema or a verification summary.  With --encode it
 * builds tf.train.Example records from JSON lines, CSV or MNIST IDX files.
 * See tfr-cat(1); the formats are in tfrecord(5).
 *
 * Shape: every input becomes a stream of records (read_tfrecords() or
 * encode_file() over a dp_encoder), each handed to put_record(), which
 * applies --skip/--head and the output mode.  Fatal errors go through
 * cli_die(), whose on_fail hook (abort_output) removes a half-written -o
 * file.  The formats themselves live in libdp (dp_record.h, dp_example.h,
 * dp_encode.h).
 */
#define _GNU_SOURCE
#include "cli.h"
#include "dp.h"
#include "dp_encode.h"
#include "dp_events.h"
#include "dp_example.h"
#include "dp_image.h"
#include "dp_record.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef DP_PROG
#define DP_PROG "tfr-cat"
#endif

enum { OUT_RECORDS, OUT_JSON, OUT_COUNT, OUT_SCHEMA, OUT_VERIFY, OUT_IMAGES };
enum { ENC_IMAGES = 100 }; /* --encode=images: beside dp_enc_format's */
enum { JS_COMPACT = 1, JS_PROTO = 2 };

/* The command line. */
static struct {
	int json, count, schema, verify, skip_corrupt;
	int comp, level;
	uint64_t head, skip, max_record;
	const char *output, *classes_out, *images_dir;
	char *types;
	dp_enc_opts enc; /* --encode (format 0: none) and its options */
} O = {
	.comp = DP_COMP_NONE,
	.level = -1,
	.head = UINT64_MAX,
	.enc = {.delim = ',', .list_sep = ' ', .image_name = "image", .label_name = "label"},
};

/* Per-feature statistics for --schema, in order of first appearance. */
typedef struct scol {
	char *name;
	size_t nlen;
	int kind;
	uint64_t records, vmin, vmax, bmin, bmax;
} scol;

static struct {
	int mode, need_parse;
	int events; /* --verify: this file is TensorBoard events, not Examples */
	dp_event ev;
	dp_out out;
	int out_open; /* out holds a temporary to commit or remove */
	int fd;
	int brief; /* -j to a terminal: long bytes values abbreviated */
	const char *oname;
	dp_writer *w;
	dp_buf ob; /* text output, written in large blocks */
	dp_example ex;
	uint64_t skip_left, emitted, corrupt, bytes, files;
	uint64_t seen; /* records of the stream so far, --skip ones included */
	int stop; /* --head reached */
	/* records mode: a run of consecutive frames in the reader's buffer,
	 * written in one piece (see dp_reader_on_move) */
	const uint8_t *run;
	size_t run_len;
	uint64_t run_n;
	/* --schema */
	scol *cols;
	size_t ncols, ccap;
	size_t *htab, hcap; /* index + 1 into cols, 0 empty */
} S = {.fd = -1, .ob = DP_BUF_INIT};

/* ---- Output ------------------------------------------------------------ */

/* On a fatal error (cli.on_fail): a -o file is removed; on stdout (or a
 * device) what was good so far is flushed, so that a stream read up to its
 * damage gives the records before it, as a pipe would have seen them
 * anyway.  A compressed stream is flushed but not finished: it stays
 * visibly incomplete. */
static void abort_output(int code)
{
	static int once;
	(void)code;
	if (S.out_open) {
		dp_out_abort(&S.out);
		S.out_open = 0;
		return;
	}
	if (once++ || S.fd < 0)
		return; /* an error while flushing: give up quietly */
	dp_err e;
	if (S.w && S.run_len)
		dp_writer_write_run(S.w, S.run, S.run_len, S.run_n, &e);
	if (S.w)
		dp_writer_flush(S.w, &e);
	if (S.ob.len)
		dp_write_all(S.fd, S.ob.p, S.ob.len, S.oname, &e);
}

/* Text output is written once this much has gathered. */
#define OB_FLUSH (1u << 20)

static void ob_flush(void)
{
	dp_err e;
	if (S.ob.err)
		cli_die("out of memory");
	if (S.ob.len && dp_write_all(S.fd, S.ob.p, S.ob.len, S.oname, &e) < 0)
		cli_die_err(CLI_FAIL, &e);
	dp_buf_reset(&S.ob);
}

/* Open the output: -o FILE through a temporary (renamed at the end), or
 * stdout.  A device or a FIFO (/dev/stdout too) is written in place
 * (dp_out_open): there is nothing to rename over. */
static void open_output(void)
{
	dp_err e;
	const char *path = O.output ? O.output : "-";
	struct stat st;
	if (dp_out_open(&S.out, path, &e) < 0)
		cli_die_err(CLI_FAIL, &e);
	S.out_open = S.out.tmp != NULL;
	S.fd = S.out.fd;
	S.oname = S.out.path;
#ifdef F_SETPIPE_SZ
	/* a 1 MiB pipe (the default limit of /proc/sys/fs/pipe-max-size): the
	 * large runs of frames go into it in one write, with fewer switches
	 * between this process and the reader; no matter if refused */
	if (fstat(S.fd, &st) == 0 && S_ISFIFO(st.st_mode))
		fcntl(S.fd, F_SETPIPE_SZ, 1 << 20);
#endif
	S.brief = S.mode == OUT_JSON && isatty(S.fd) ? DP_JSON_BRIEF : 0;
	if (S.mode == OUT_RECORDS) {
		if (isatty(S.fd))
			cli_die("refusing to write binary records to a terminal (redirect the output, or use -j, -c)");
		S.w = dp_writer_open_fd(S.fd, S.oname, O.comp, O.level, &e);
		if (!S.w)
			cli_die_err(CLI_FAIL, &e);
	}
}

static void close_output(void)
{
	dp_err e;
	if (S.w) {
		if (dp_writer_finish(S.w, &e) < 0)
			cli_die_err(CLI_FAIL, &e);
		dp_writer_free(S.w);
		S.w = NULL;
	}
	ob_flush();
	S.out_open = 0;
	if (S.out.path && dp_out_commit(&S.out, &e) < 0) /* stdout: frees the name */
		cli_die_err(CLI_FAIL, &e);
}

/* ---- --schema ---------------------------------------------------------- */

static uint64_t hash_name(const char *s, size_t n, int kind)
{
	uint64_t h = 1469598103934665603ull ^ (uint64_t)kind;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
	return h;
}

static scol *schema_col(const dp_feature *f)
{
	if (S.ncols * 2 >= S.hcap) { /* rehash */
		size_t nh = S.hcap ? S.hcap * 2 : 64;
		size_t *t = cli_calloc(nh, sizeof *t);
		for (size_t i = 0; i < S.ncols; i++) {
			size_t j = hash_name(S.cols[i].name, S.cols[i].nlen, S.cols[i].kind) & (nh - 1);
			while (t[j])
				j = (j + 1) & (nh - 1);
			t[j] = i + 1;
		}
		free(S.htab);
		S.htab = t;
		S.hcap = nh;
	}
	size_t j = hash_name(f->name, f->name_len, f->kind) & (S.hcap - 1);
	for (; S.htab[j]; j = (j + 1) & (S.hcap - 1)) {
		scol *c = &S.cols[S.htab[j] - 1];
		if (c->kind == f->kind && c->nlen == f->name_len && !memcmp(c->name, f->name, c->nlen))
			return c;
	}
	cli_grow(&S.cols, &S.ccap, S.ncols + 1, sizeof *S.cols);
	scol *c = &S.cols[S.ncols++];
	memset(c, 0, sizeof *c);
	c->name = cli_malloc(f->name_len + 1);
	memcpy(c->name, f->name, f->name_len);
	c->name[f->name_len] = 0;
	c->nlen = f->name_len;
	c->kind = f->kind;
	c->vmin = c->bmin = UINT64_MAX;
	S.htab[j] = S.ncols;
	return c;
}

static int bytes_minmax(const uint8_t *p, size_t len, void *ctx)
{
	scol *c = ctx;
	(void)p;
	if (len < c->bmin)
		c->bmin = len;
	if (len > c->bmax)
		c->bmax = len;
	return 0;
}

static void schema_add(const dp_example *ex)
{
	for (size_t i = 0; i < ex->n; i++) {
		const dp_feature *f = &ex->f[i];
		scol *c = schema_col(f);
		c->records++;
		if (f->count < c->vmin)
			c->vmin = f->count;
		if (f->count > c->vmax)
			c->vmax = f->count;
		if (f->kind == DP_KIND_BYTES)
			dp_feature_bytes_each(f, bytes_minmax, c);
	}
}

/* A name in a TSV cell: backslash, tab, newline and CR escaped as \\ \t
 * \n \r (the text format of PostgreSQL's COPY); other bytes as they are. */
static void schema_print(void)
{
	dp_buf_addstr(&S.ob, "feature\tkind\trecords\tmin_values\tmax_values\tmin_bytes\tmax_bytes\n");
	for (size_t i = 0; i < S.ncols; i++) {
		scol *c = &S.cols[i];
		dp_buf_shown(&S.ob, c->name, c->nlen); /* a tab, a newline, ESC: escaped */
		if (c->kind == DP_KIND_BYTES && c->bmax >= c->bmin)
			dp_buf_printf(&S.ob, "\t%s\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\n",
				  dp_kind_name(c->kind), c->records, c->vmin, c->vmax, c->bmin, c->bmax);
		else
			dp_buf_printf(&S.ob, "\t%s\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\t-\t-\n",
				  dp_kind_name(c->kind), c->records, c->vmin, c->vmax);
	}
}

/* ---- --decode-images ------------------------------------------------------ */

/* The image of the record in S.ex as a file under --decode-images DIR:
 * its image/filename (or INDEX.jpg), written whole, never over a file. */
static void save_image(const char *src, uint64_t idx, uint64_t off)
{
	dp_err e;
	const uint8_t *p;
	size_t n;
	char name[1100], where[64] = "";
	if (off != UINT64_MAX)
		snprintf(where, sizeof where, " at byte %" PRIu64, off);
	/* a record without a usable image/filename is saved as its number in
	 * the stream (--skip counted: record 3 is 3.jpg) */
	if (dp_image_of_record(&S.ex, NULL, S.seen - 1, &p, &n, name, sizeof name, &e) < 0)
		cli_die("%s: record %" PRIu64 "%s: %s", src, idx, where, e.msg);
	char *path = cli_malloc(strlen(O.images_dir) + strlen(name) + 2);
	sprintf(path, "%s/%s", O.images_dir, name);
	for (char *s = path + strlen(O.images_dir) + 1; (s = strchr(s, '/')); s++) {
		*s = 0; /* the folders of image/filename */
		if (mkdir(path, 0777) < 0 && errno != EEXIST)
			cli_die("%s: %s", path, strerror(errno));
		*s = '/';
	}
	if (access(path, F_OK) == 0)
		cli_die("%s: exists (record %" PRIu64 " of %s%s would replace it)", path, idx, src, where);
	dp_out o;
	if (dp_out_open(&o, path, &e) < 0 || dp_write_all(o.fd, p, n, path, &e) < 0 ||
	    dp_out_commit(&o, &e) < 0)
		cli_die_err(CLI_FAIL, &e);
	free(path);
}

/* ---- The record sink ----------------------------------------------------- */

static void run_flush(void *unused)
{
	dp_err e;
	(void)unused;
	if (S.run_len && dp_writer_write_run(S.w, S.run, S.run_len, S.run_n, &e) < 0) {
		S.run_len = 0;
		cli_die_err(CLI_FAIL, &e);
	}
	S.run_len = 0;
	S.run_n = 0;
}

/* One record for the output.  frame: its checked frame when it was read,
 * NULL when it was built here.  src, idx, off place it in messages (off
 * UINT64_MAX: not from a stream).  Returns 1 once --head is reached. */
static int put_record(const uint8_t *data, size_t len, const uint8_t *frame, size_t flen,
		      const char *src, uint64_t idx, uint64_t off)
{
	dp_err e;
	S.seen++;
	if (S.skip_left) {
		S.skip_left--;
		return 0;
	}
	if (S.need_parse && (S.events ? dp_event_parse(&S.ev, data, len, &e)
			       : dp_example_parse(&S.ex, data, len, &e)) < 0) {
		char where[64] = "";
		if (e.code == DP_ENOMEM)
			cli_die("out of memory");
		if (off != UINT64_MAX)
			snprintf(where, sizeof where, " at byte %" PRIu64, off);
		if (!O.skip_corrupt)
			cli_die("%s: record %" PRIu64 "%s: %s", src, idx, where, e.msg);
		cli_warn("%s: record %" PRIu64 "%s: %s; skipped", src, idx, where, e.msg);
		S.corrupt++;
		return 0;
	}
	switch (S.mode) {
	case OUT_RECORDS:
		if (frame) { /* extend the run, or start another */
			if (S.run_len && frame != S.run + S.run_len)
				run_flush(NULL);
			if (!S.run_len)
				S.run = frame;
			S.run_len += flen;
			S.run_n++;
		} else if (dp_writer_write(S.w, data, len, &e) < 0)
			cli_die_err(CLI_FAIL, &e);
		break;
	case OUT_JSON:
		if (dp_example_json(&S.ob, &S.ex,
				    (O.json == JS_PROTO ? DP_JSON_PROTO : DP_JSON_COMPACT) | S.brief) < 0)
			cli_die("out of memory");
		if (S.ob.len >= OB_FLUSH)
			ob_flush();
		break;
	case OUT_SCHEMA:
		schema_add(&S.ex);
		break;
	case OUT_IMAGES:
		save_image(src, idx, off);
		break;
	}
	if (++S.emitted >= O.head)
		S.stop = 1;
	return S.stop;
}

/* ---- Reading TFRecords --------------------------------------------------- */

static void read_tfrecords(const char *path)
{
	dp_err e;
	dp_reader_opts ro = {.max_record = O.max_record, .skip_corrupt = O.skip_corrupt};
	if (strcmp(path, "-") == 0 && isatty(STDIN_FILENO))
		cli_die("stdin is a terminal: give a file, or pipe records in");
	dp_reader *r = dp_reader_open_path(path, &ro, &e);
	if (!r)
		cli_die_err(CLI_FAIL, &e);
	if (S.mode == OUT_RECORDS)
		dp_reader_on_move(r, run_flush, NULL);
	dp_record rec;
	int rc;
	S.files++;
	S.events = 0;
	while ((rc = dp_reader_next(r, &rec, &e)) != 0) {
		if (rc == DP_REC_SKIPPED) {
			cli_warn("%s", e.msg);
			continue;
		}
		if (rc < 0) {
			dp_reader_stats st;
			dp_reader_stats_get(r, &st);
			/* a broken compressed stream after good records; with none
			 * at all the input is refused, as the reader refuses one
			 * whose every byte was damage */
			if (rc == DP_EDATA && O.skip_corrupt && st.records > 0) {
				cli_warn("%s; skipped the rest of the stream", e.msg);
				S.corrupt++;
				break;
			}
			cli_die_err(CLI_FAIL, &e);
		}
		if (rec.index == 0) /* an event file is verified as Events */
			S.events = O.verify && dp_events_detect(rec.frame, rec.frame_len);
		if (put_record(rec.data, rec.len, rec.frame, rec.frame_len, dp_reader_name(r), rec.index,
			       rec.offset))
			break;
	}
	if (S.mode == OUT_RECORDS)
		run_flush(NULL); /* before the buffer goes */
	dp_reader_stats st;
	dp_reader_stats_get(r, &st);
	S.corrupt += st.corrupt;
	S.bytes += st.bytes;
	if (rc == 0 && st.bytes == 0 && !O.enc.allow_empty)
		cli_die("%s: empty input: no records (--allow-empty accepts it)", dp_reader_name(r));
	dp_reader_close(r);
}

/* ---- Encoding: Examples from JSON lines, CSV, IDX -------------------------- */

/* The Examples of one input (IDX: images and labels) through put_record. */
static void encode_file(const char *path, const char *labels)
{
	dp_err e;
	S.files += labels ? 2 : 1;
	dp_encoder *x = dp_encoder_open(path, labels, &O.enc, &e);
	if (!x)
		cli_die_err(CLI_FAIL, &e);
	const uint8_t *p;
	size_t n;
	uint64_t i = 0;
	int rc = 0;
	while (!S.stop && (rc = dp_encoder_next(x, &p, &n, &e)) > 0) {
		S.bytes += n + DP_TFR_HEADER + DP_TFR_FOOTER; /* as a TFRecord stream */
		put_record(p, n, NULL, 0, dp_encoder_name(x), i++, UINT64_MAX);
	}
	if (rc < 0)
		cli_die_err(CLI_FAIL, &e);
	dp_encoder_close(x);
}

/* The Examples of a folder of class folders, or of a PATH,LABEL list;
 * the class names to --classes-out, one a line. */
static void encode_images(const char *path)
{
	dp_err e;
	dp_image_set *set = dp_image_set_open(path, &e);
	if (!set)
		cli_die_err(CLI_FAIL, &e);
	if (O.classes_out) {
		dp_out o;
		dp_buf b = DP_BUF_INIT;
		for (size_t i = 0; i < dp_image_set_nclasses(set); i++) {
			const char *c = dp_image_set_class(set, i);
			if (strpbrk(c, "\n\r")) { /* it would read back as two classes */
				char *sc = dp_shown(c, strlen(c));
				cli_die("%s: class %zu, %s, holds a line break: --classes-out writes "
					"one name a line", path, i, sc ? sc : "?");
			}
			dp_buf_printf(&b, "%s\n", c);
		}
		if (b.err)
			cli_die("out of memory");
		if (dp_out_open(&o, O.classes_out, &e) < 0 ||
		    dp_write_all(o.fd, b.p, b.len, O.classes_out, &e) < 0 || dp_out_commit(&o, &e) < 0)
			cli_die_err(CLI_FAIL, &e);
		dp_buf_free(&b);
	}
	const uint8_t *p;
	size_t n;
	const char *file;
	int rc;
	uint64_t i = 0;
	while (!S.stop && (rc = dp_image_set_next(set, &p, &n, &file, &e)) != 0) {
		S.files++;
		if (rc == DP_EDATA && O.skip_corrupt) {
			cli_warn("%s; skipped", e.msg);
			S.corrupt++;
			continue;
		}
		if (rc < 0)
			cli_die_err(CLI_FAIL, &e);
		uint64_t max = O.max_record ? O.max_record : DP_MAX_RECORD_DEFAULT;
		if (n > max) { /* no reader would take it: tfr-shard, dp-train... */
			if (!O.skip_corrupt)
				cli_die("%s: a record of %zu bytes, more than --max-record %" PRIu64
					" (what tfr-shard, dp-train and dp-eval read; raise it there too)",
					file, n, max);
			cli_warn("%s: a record of %zu bytes, more than --max-record %" PRIu64
				 "; skipped", file, n, max);
			S.corrupt++;
			continue;
		}
		S.bytes += n + DP_TFR_HEADER + DP_TFR_FOOTER;
		put_record(p, n, NULL, 0, file, i++, UINT64_MAX);
	}
	const char *eg;
	size_t left = dp_image_set_left_out(set, &eg);
	char *egs = left ? dp_shown(eg, strlen(eg)) : NULL;
	if (left)
		cli_warn("%s: left out %zu file%s that %s not images ImageFolder reads (.jpg .jpeg .png "
			 ".ppm .bmp .pgm .tif .tiff .webp) (%s%s)", path,
			 left, left == 1 ? "" : "s", left == 1 ? "is" : "are", left == 1 ? "" : "e.g. ",
			 egs ? egs : "?");
	free(egs);
	dp_image_set_close(set);
}

/* ---- Command line ------------------------------------------------------------ */

static void help(void)
{
	printf("usage: tfr-cat [OPTION]... [FILE]...\n"
	       "Concatenate TFRecord files (or stdin) to stdout, checking every CRC; GZIP and\n"
	       "ZLIB inputs are detected.  Print records as JSON, count, verify, describe them,\n"
	       "or build tf.train.Example records from JSON lines, CSV or MNIST IDX files.\n"
	       "\n"
	       "Output (one of; default: the records themselves):\n"
	       "  -j, --json[=compact|proto]  one JSON object per Example per line: the compact\n"
	       "                         form of tfrecord(5), or protobuf's JSON mapping\n"
	       "  -c, --count            print the number of records\n"
	       "      --verify           also parse every record as an Example (as an Event in\n"
	       "                         TensorBoard event files); print a summary\n"
	       "                         (records= bytes= files= corrupt=) or, with -c, the count\n"
	       "      --schema           print each feature's kind, how many records have it,\n"
	       "                         and the fewest/most values (and bytes per value) seen\n"
	       "  -z, --compress=none|gzip|zlib  compress the output records (default none)\n"
	       "      --level=N          compression level 1-9 (default: zlib's 6)\n"
	       "  -o, --output=FILE      write to FILE, whole or not at all (default stdout)\n"
	       "\n"
	       "Selection and damage:\n"
	       "  -n, --head=N           stop after N records\n"
	       "      --skip=N           pass over the first N records\n"
	       "      --skip-corrupt     go on past damaged records (and invalid Examples),\n"
	       "                         warning once per damaged region\n"
	       "      --max-record=SIZE  longest record accepted (default 256M)\n"
	       "      --decode-images=DIR  write each record's image/encoded to a file under\n"
	       "                         DIR named by its image/filename (or INDEX.jpg)\n"
	       "      --allow-empty      an input with no records is not an error\n"
	       "\n"
	       "Encoding Examples (--encode=FORMAT reads FORMAT instead of TFRecords):\n"
	       "      --encode=json      JSON lines in the compact -j form\n"
	       "      --encode=json=proto  JSON lines in protobuf's JSON mapping (--json=proto)\n"
	       "      --encode=csv       CSV with a header row (RFC 4180)\n"
	       "      --encode=idx       IDX (MNIST) files: tfr-cat --encode=idx IMAGES LABELS\n"
	       "      --encode=images    image files (JPEG, PNG, WebP, TIFF, BMP, PPM, PGM): DIR\n"
	       "                         with one folder per class, or a\n"
	       "                         PATH,LABEL list; one image record each (tfrecord(5))\n"
	       "      --classes-out=FILE  with --encode=images: the class names, one a line, in\n"
	       "                         label order, for dp-eval's class names (tfr-cat(1))\n"
	       "      --types=SPEC       CSV column types: PATTERN=TYPE,... with TYPE bytes,\n"
	       "                         float, int64 or skip, TYPE[] for a list cell; PATTERN\n"
	       "                         a shell glob; first match wins; default bytes\n"
	       "  -d, --delimiter=C      CSV field delimiter (default ','; 'tab' for TAB)\n"
	       "      --list-sep=C       separator of values in a list cell (default space)\n"
	       "      --image-feature=NAME  IDX: feature for the raw pixels (default image)\n"
	       "      --label-feature=NAME  IDX: feature for the class (default label)\n"
	       "\n"
	       "  -h, --help             this help\n"
	       "  -V, --version          version\n"
	       "\n"
	       "Exit status: 0 success, 1 failure (damaged input, I/O error), 2 usage.\n"
	       "See tfr-cat(1) and tfrecord(5).\n");
}
static char parse_char(const char *opt, const char *s)
{
	if (!strcmp(s, "tab") || !strcmp(s, "\\t"))
		return '\t';
	if (strlen(s) != 1 || s[0] == '\n' || s[0] == '\r' || s[0] == '"')
		cli_bad_value(opt, s, "a single character");
	return s[0];
}

static int parse_encode(const char *s)
{
	static const int enc[] = {DP_ENC_JSON, DP_ENC_JSON_PROTO, DP_ENC_CSV, DP_ENC_IDX, ENC_IMAGES};
	if (!strcmp(s, "json=compact")) /* as --json=compact */
		return DP_ENC_JSON;
	return enc[cli_word("--encode", s, "json json=proto csv idx images")];
}

/* --types given again adds to the list. */
static void add_types(const char *s)
{
	size_t old = O.types ? strlen(O.types) : 0, add = strlen(s);
	O.types = cli_realloc(O.types, old + add + 2);
	if (old)
		O.types[old++] = ',';
	memcpy(O.types + old, s, add + 1);
}

enum {
	OPT_SKIP = 256, OPT_VERIFY, OPT_SCHEMA, OPT_SKIP_CORRUPT, OPT_MAX_RECORD, OPT_ALLOW_EMPTY,
	OPT_ENCODE, OPT_TYPES, OPT_LIST_SEP, OPT_IMAGE, OPT_LABEL, OPT_LEVEL, OPT_CLASSES_OUT,
	OPT_DECODE_IMAGES
};

/* The options into O; returns the index of the first file argument. */
static int parse_options(int argc, char **argv)
{
	static const struct option lopts[] = {
		{"json", optional_argument, NULL, 'j'},
		{"count", no_argument, NULL, 'c'},
		{"head", required_argument, NULL, 'n'},
		{"skip", required_argument, NULL, OPT_SKIP},
		{"verify", no_argument, NULL, OPT_VERIFY},
		{"schema", no_argument, NULL, OPT_SCHEMA},
		{"skip-corrupt", no_argument, NULL, OPT_SKIP_CORRUPT},
		{"max-record", required_argument, NULL, OPT_MAX_RECORD},
		{"allow-empty", no_argument, NULL, OPT_ALLOW_EMPTY},
		{"compress", required_argument, NULL, 'z'},
		{"level", required_argument, NULL, OPT_LEVEL},
		{"output", required_argument, NULL, 'o'},
		{"encode", required_argument, NULL, OPT_ENCODE},
		{"types", required_argument, NULL, OPT_TYPES},
		{"delimiter", required_argument, NULL, 'd'},
		{"list-sep", required_argument, NULL, OPT_LIST_SEP},
		{"image-feature", required_argument, NULL, OPT_IMAGE},
		{"label-feature", required_argument, NULL, OPT_LABEL},
		{"classes-out", required_argument, NULL, OPT_CLASSES_OUT},
		{"decode-images", required_argument, NULL, OPT_DECODE_IMAGES},
		CLI_OPTIONS_END,
	};
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":j::cn:z:o:d:hV", lopts, NULL)) != -1) {
		switch (c) {
		case 'j': {
			static const int js[] = {JS_COMPACT, JS_PROTO};
			O.json = optarg ? js[cli_word("--json", optarg, "compact proto")] : JS_COMPACT;
			break;
		}
		case 'c': O.count = 1; break;
		case 'n': O.head = cli_count("--head", optarg, 0, UINT64_MAX); break;
		case OPT_SKIP: O.skip = cli_count("--skip", optarg, 0, UINT64_MAX); break;
		case OPT_VERIFY: O.verify = 1; break;
		case OPT_SCHEMA: O.schema = 1; break;
		case OPT_SKIP_CORRUPT: O.skip_corrupt = 1; break;
		case OPT_ALLOW_EMPTY: O.enc.allow_empty = 1; break;
		case OPT_MAX_RECORD: O.max_record = cli_size("--max-record", optarg, 1, UINT64_MAX); break;
		case 'z': O.comp = cli_comp_out("--compress", optarg); break;
		case OPT_LEVEL: O.level = (int)cli_count("--level", optarg, 0, 9); break;
		case 'o': O.output = optarg; break;
		case OPT_ENCODE: O.enc.format = parse_encode(optarg); break;
		case OPT_TYPES: add_types(optarg); break;
		case 'd': O.enc.delim = parse_char("--delimiter", optarg); break;
		case OPT_LIST_SEP: O.enc.list_sep = parse_char("--list-sep", optarg); break;
		case OPT_IMAGE: O.enc.image_name = optarg; break;
		case OPT_LABEL: O.enc.label_name = optarg; break;
		case OPT_CLASSES_OUT: O.classes_out = optarg; break;
		case OPT_DECODE_IMAGES: O.images_dir = optarg; break;
		default: cli_default_option(c, argv, help);
		}
	}
	return optind;
}

/* Options that do not go together, and the output mode. */
static void check_options(int nfiles)
{
	dp_err e;
	const dp_enc_opts *x = &O.enc;
	int modes = (O.json != 0) + O.count + O.schema + (O.images_dir != NULL);
	if (modes > 1)
		cli_usage_error("choose one of -j, -c, --schema and --decode-images");
	if (O.json && O.verify)
		cli_usage_error("-j already checks every Example: drop --verify");
	S.mode = O.json ? OUT_JSON : O.count ? OUT_COUNT : O.schema ? OUT_SCHEMA
		 : O.images_dir ? OUT_IMAGES : O.verify ? OUT_VERIFY : OUT_RECORDS;
	S.need_parse = O.json || O.schema || O.verify || O.images_dir;
	if (O.classes_out && x->format != ENC_IMAGES)
		cli_usage_error("--classes-out goes with --encode=images");
	if (O.classes_out && dp_same_output(O.classes_out, O.output ? O.output : "-"))
		cli_usage_error("--classes-out %s and -o %s name one file: one would be lost",
				O.classes_out, O.output ? O.output : "-");
	if (x->format == ENC_IMAGES && nfiles != 1)
		cli_usage_error("--encode=images takes one folder or list (its classes are numbered together)");
	if (O.images_dir && !cli_is_dir(O.images_dir))
		cli_die("%s: not a folder (--decode-images writes into an existing one)", O.images_dir);
	if (S.mode != OUT_RECORDS && (O.comp != DP_COMP_NONE || O.level >= 0))
		cli_usage_error("-z and --level apply to record output only");
	if (x->format != DP_ENC_CSV && (O.types || x->delim != ',' || x->list_sep != ' '))
		cli_usage_error("--types, --delimiter and --list-sep go with --encode=csv");
	if (x->format == DP_ENC_CSV && O.types && dp_csv_types_check(O.types, &e) < 0)
		cli_usage_error("--types: %s", e.msg);
	O.enc.types = O.types;
	if (x->format == DP_ENC_IDX && nfiles != 2)
		cli_usage_error("--encode=idx takes two files: IMAGES LABELS");
	if (x->format != DP_ENC_IDX && (strcmp(x->image_name, "image") || strcmp(x->label_name, "label")))
		cli_usage_error("--image-feature and --label-feature go with --encode=idx");
	if (x->format == DP_ENC_IDX &&
	    (!*x->image_name || !*x->label_name || !strcmp(x->image_name, x->label_name)))
		cli_usage_error("--image-feature and --label-feature must be two different names");
}

/* What -c, --schema and --verify print at the end. */
static void print_result(void)
{
	switch (S.mode) {
	case OUT_COUNT:
		dp_buf_printf(&S.ob, "%" PRIu64 "\n", S.emitted);
		break;
	case OUT_SCHEMA:
		schema_print();
		break;
	case OUT_VERIFY:
		dp_buf_printf(&S.ob,
			      "records=%" PRIu64 " bytes=%" PRIu64 " files=%" PRIu64 " corrupt=%" PRIu64
			      " status=%s\n",
			      S.emitted, S.bytes, S.files, S.corrupt, S.corrupt ? "corrupt" : "ok");
		break;
	}
}

int main(int argc, char **argv)
{
	cli.prog = DP_PROG;
	cli.usage = "usage: tfr-cat [-cj] [-n N] [-z gzip|zlib] [-o FILE] [--encode json|csv|idx|images] [FILE]...\n";
	cli.on_fail = abort_output;
	int first = parse_options(argc, argv);
	check_options(argc - first);
	S.skip_left = O.skip;

	dp_out_install_signal_cleanup();
	open_output();

	char *stdin_only[] = {"-", NULL};
	char **files = first < argc ? argv + first : stdin_only;
	/* `tfr-cat f.tfr >> f.tfr` is refused; -o f.tfr goes through a
	 * temporary renamed at the end: f.tfr stays whole while it is read,
	 * and is replaced */
	for (char **f = files; *f; f++)
		cli_check_not_output(&S.out, *f);
	if (O.head == 0)
		S.stop = 1;
	if (O.enc.format == DP_ENC_IDX) {
		if (!S.stop)
			encode_file(files[0], files[1]);
	} else {
		for (; *files && !S.stop; files++) {
			if (O.enc.format == ENC_IMAGES)
				encode_images(*files);
			else if (O.enc.format)
				encode_file(*files, NULL);
			else
				read_tfrecords(*files);
		}
	}

	print_result();
	close_output();
	if (S.corrupt) {
		cli_warn("skipped %" PRIu64 " damaged record%s", S.corrupt, S.corrupt == 1 ? "" : "s");
		if (O.verify)
			return CLI_FAIL;
	}
	dp_example_free(&S.ex);
	dp_event_free(&S.ev);
	dp_buf_free(&S.ob);
	free(O.types);
	return CLI_OK;
}
