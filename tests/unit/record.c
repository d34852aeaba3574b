/* record.c - the TFRecord reader and writer: round trips through every
 * compression on memory and on pipes, the framing bytes, and every kind of
 * damage: truncation, bad CRCs, huge lengths, garbage, empty input, and
 * resynchronisation with skip_corrupt. */
#define _GNU_SOURCE
#include "dp_record.h"
#include "tap.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#define NREC 500

/* Record i: i*37 % 3000 bytes of a pattern (some empty, some > 1 KiB). */
static size_t rec_len(int i) { return (size_t)(i * 37 % 3000); }
static uint8_t rec_byte(int i, size_t j) { return (uint8_t)(i * 7 + j * 13); }

static uint8_t *make_stream(int comp, size_t *len)
{
	dp_err e;
	dp_writer *w = dp_writer_open_mem(comp, -1, &e);
	uint8_t *tmp = malloc(3000);
	for (int i = 0; i < NREC; i++) {
		for (size_t j = 0; j < rec_len(i); j++)
			tmp[j] = rec_byte(i, j);
		dp_writer_write(w, tmp, rec_len(i), &e);
	}
	dp_writer_finish(w, &e);
	size_t n;
	const uint8_t *m = dp_writer_mem(w, &n);
	uint8_t *out = malloc(n ? n : 1);
	memcpy(out, m, n);
	*len = n;
	dp_writer_free(w);
	free(tmp);
	return out;
}

/* Read all records; returns count of records matching the pattern, or -1
 * on an error (message in e). */
static int read_all(dp_reader *r, dp_err *e)
{
	dp_record rec;
	int n = 0, rc;
	while ((rc = dp_reader_next(r, &rec, e)) == 1) {
		if (rec.len != rec_len(n) || rec.index != (uint64_t)n)
			return -2;
		for (size_t j = 0; j < rec.len; j++)
			if (rec.data[j] != rec_byte(n, j))
				return -3;
		n++;
	}
	return rc < 0 ? -1 : n;
}

struct feeder {
	int fd;
	const uint8_t *p;
	size_t n, chunk;
};

static void *feed(void *arg)
{
	struct feeder *f = arg;
	for (size_t i = 0; i < f->n; i += f->chunk) {
		size_t k = f->n - i < f->chunk ? f->n - i : f->chunk;
		if (write(f->fd, f->p + i, k) != (ssize_t)k)
			break;
	}
	close(f->fd);
	return NULL;
}

/* Read a stream through a pipe, written in chunks of `chunk` bytes. */
static int read_pipe(const uint8_t *p, size_t n, size_t chunk, const dp_reader_opts *o, dp_err *e,
		     int *comp)
{
	int fds[2];
	pthread_t t;
	if (pipe(fds) < 0)
		return -9;
	struct feeder f = {fds[1], p, n, chunk};
	pthread_create(&t, NULL, feed, &f);
	dp_reader *r = dp_reader_open_fd(fds[0], 1, "pipe", o, e);
	int got = read_all(r, e);
	if (comp)
		*comp = dp_reader_compression(r);
	dp_reader_close(r);
	pthread_join(t, NULL);
	return got;
}

static int read_mem(const uint8_t *p, size_t n, const dp_reader_opts *o, dp_err *e)
{
	dp_reader *r = dp_reader_open_mem(p, n, "mem", o, e);
	if (!r)
		return -1;
	int got = read_all(r, e);
	dp_reader_close(r);
	return got;
}

/* Read p[0..n) with skip_corrupt: the records read into *good, the
 * damaged regions passed over into *skipped; with msg, each skip's message
 * must hold it. */
static void read_skipping(const uint8_t *p, size_t n, int *good, int *skipped, const char *msg)
{
	dp_reader_opts skip = {.skip_corrupt = 1};
	dp_err e;
	dp_reader *r = dp_reader_open_mem(p, n, "mem", &skip, &e);
	dp_record rec;
	int rc;
	*good = *skipped = 0;
	while ((rc = dp_reader_next(r, &rec, &e)) != 0) {
		if (rc == DP_REC_SKIPPED) {
			++*skipped;
			if (msg)
				like(e.msg, msg, "resync message: %s", e.msg);
		} else if (rc == 1) {
			++*good;
		} else {
			break;
		}
	}
	dp_reader_close(r);
}

/* dp_reader_on_move: runs of consecutive frames, flushed before a move */
struct runs {
	const uint8_t *run;
	size_t len;
	uint64_t n;
	int moves;
	dp_writer *w;
};

static void put_run(struct runs *r)
{
	dp_err e;
	if (r->len)
		dp_writer_write_run(r->w, r->run, r->len, r->n, &e);
	r->len = 0;
	r->n = 0;
}

static void flush_run(void *ctx)
{
	struct runs *r = ctx;
	r->moves++;
	put_run(r);
}

static void one_record(uint8_t *out, const char *data, size_t len)
{
	dp_tfr_header(out, len);
	memcpy(out + 12, data, len);
	dp_tfr_footer(out + 12 + len, data, len);
}

/* A stream cut at byte k (a damaged last frame) followed by 20 intact
 * records: with skip_corrupt every one of the 20 comes back, whatever k,
 * since the search for a header restarts after a bad one (issue 12: a bad
 * data CRC used to trust the length and skip into the good records). */
static void test_splice(const uint8_t *s, size_t n)
{
	dp_err e;
	dp_writer *w = dp_writer_open_mem(DP_COMP_NONE, -1, &e);
	for (int i = 0; i < 20; i++) {
		uint8_t rec[64];
		for (size_t j = 0; j < sizeof rec; j++)
			rec[j] = (uint8_t)(200 + i + j);
		dp_writer_write(w, rec, sizeof rec, &e);
	}
	dp_writer_finish(w, &e);
	size_t gn;
	const uint8_t *good = dp_writer_mem(w, &gn);
	size_t limit = n < 6000 ? n : 6000, bad_k = 0, worst = 20;
	uint8_t *buf = malloc(limit + gn);
	for (size_t k = 1; k < limit; k += 7) {
		memcpy(buf, s, k);
		memcpy(buf + k, good, gn);
		dp_reader_opts o = {.skip_corrupt = 1};
		dp_reader *r = dp_reader_open_mem(buf, k + gn, "spliced", &o, &e);
		dp_record rec;
		int rc, after = 0;
		while ((rc = dp_reader_next(r, &rec, &e)) != 0 && rc != DP_EIO)
			if (rc == 1 && rec.len == 64 && rec.data[0] >= 200 && rec.offset >= k)
				after++;
		dp_reader_close(r);
		if (after < 20 && after < (int)worst) {
			worst = (size_t)after;
			bad_k = k;
		}
	}
	is_int(worst, 20, "skip_corrupt: all 20 records after a cut at any byte come back (worst at %zu)",
	       bad_k);
	free(buf);
	dp_writer_free(w);
}

int main(void)
{
	dp_err e;
	int comps[] = {DP_COMP_NONE, DP_COMP_GZIP, DP_COMP_ZLIB};

	/* framing: 8-byte little-endian length, masked CRCs */
	uint8_t fr[32];
	one_record(fr, "hello", 5);
	ok(fr[0] == 5 && fr[1] == 0 && fr[7] == 0, "length field is little-endian u64");
	uint32_t c;
	memcpy(&c, fr + 8, 4);
	is_int(c, dp_crc_mask(dp_crc32c(0, fr, 8)), "header CRC is the masked CRC of the length bytes");
	memcpy(&c, fr + 17, 4);
	is_int(c, dp_crc_mask(dp_crc32c(0, "hello", 5)), "footer CRC is the masked CRC of the data");

	for (int k = 0; k < 3; k++) {
		size_t n;
		uint8_t *s = make_stream(comps[k], &n);
		const char *cn = dp_comp_name(comps[k]);
		is_int(read_mem(s, n, NULL, &e), NREC, "%s: memory round trip", cn);
		int comp = 0;
		is_int(read_pipe(s, n, 1 << 16, NULL, &e, &comp), NREC, "%s: pipe round trip", cn);
		is_int(comp, comps[k], "%s: compression detected", cn);
		is_int(read_pipe(s, n, 7, NULL, &e, NULL), NREC, "%s: pipe fed 7 bytes at a time", cn);
		dp_reader_opts o = {.compression = comps[k]};
		is_int(read_mem(s, n, &o, &e), NREC, "%s: explicit compression", cn);
		/* truncated in the middle */
		int got = read_mem(s, n / 2, NULL, &e);
		ok(got == -1 && e.code == DP_EDATA, "%s: truncated stream is an error", cn);
		like(e.msg, "mem: ", "%s: truncation message names the stream: %s", cn, e.msg);
		free(s);
	}

	/* concatenated gzip members read as one stream */
	{
		size_t n;
		uint8_t *s = make_stream(DP_COMP_GZIP, &n);
		uint8_t *two = malloc(2 * n);
		memcpy(two, s, n);
		memcpy(two + n, s, n);
		dp_reader *r = dp_reader_open_mem(two, 2 * n, "two", NULL, &e);
		dp_record rec;
		int cnt = 0;
		while (dp_reader_next(r, &rec, &e) == 1)
			cnt++;
		is_int(cnt, 2 * NREC, "two concatenated gzip members give all records");
		dp_reader_close(r);
		free(two);
		free(s);
	}

	/* damage to a plain stream */
	size_t n;
	uint8_t *s = make_stream(DP_COMP_NONE, &n);
	size_t off3 = 0; /* offset of record 3 */
	for (int i = 0; i < 3; i++)
		off3 += 16 + rec_len(i);

	uint8_t *d = malloc(n);
	memcpy(d, s, n);
	d[off3 + 12 + 5] ^= 1; /* data byte of record 3 */
	is_int(read_mem(d, n, NULL, &e), -1, "flipped data bit is an error");
	char want[128];
	snprintf(want, sizeof want, "mem: record 3 at byte %zu: data CRC mismatch", off3);
	is_str(e.msg, want, "data CRC message names record and offset");
	int good, skipped;
	read_skipping(d, n, &good, &skipped, NULL);
	is_int(good, NREC - 1, "skip_corrupt: all other records read");
	is_int(skipped, 1, "skip_corrupt: one record skipped");
	dp_reader_opts nov = {.no_verify = 1};
	is_int(read_mem(d, n, &nov, &e), -3, "no_verify passes the damaged data through");

	memcpy(d, s, n);
	d[off3 + 2] ^= 0x40; /* length byte of record 3 */
	is_int(read_mem(d, n, NULL, &e), -1, "flipped length bit is an error");
	snprintf(want, sizeof want, "mem: record 3 at byte %zu: length CRC mismatch", off3);
	is_str(e.msg, want, "length CRC message");
	read_skipping(d, n, &good, &skipped, "to the next valid header at byte");
	is_int(good, NREC - 1, "skip_corrupt: resynchronised after a bad length");
	is_int(skipped, 1, "skip_corrupt: one damaged region");

	/* a length of 2^60 with a valid CRC: an error, not an allocation */
	{
		uint8_t h[16 + 64];
		dp_tfr_header(h, 1ull << 60);
		memset(h + 12, 0, 64);
		is_int(read_mem(h, sizeof h, NULL, &e), -1, "length 2^60 is refused");
		is_int(e.code, DP_ELIMIT, "... as a limit error");
		like(e.msg, "exceeds the maximum", "... saying so: %s", e.msg);
		dp_reader_opts small = {.max_record = 100};
		one_record(fr, "hello", 5);
		{
			dp_reader *r = dp_reader_open_mem(fr, 21, "mem", &small, &e);
			dp_record rec;
			ok(dp_reader_next(r, &rec, &e) == 1 && rec.len == 5, "a record under max_record passes");
			dp_reader_close(r);
		}
		dp_tfr_header(h, 101);
		read_mem(h, sizeof h, &small, &e);
		like(e.msg, "record length 101 exceeds the maximum of 100", "configurable maximum");
		/* no limit at all (a caller's max_record of 2^64 - 1): a length
		 * whose frame size wraps past 2^64 is still refused, not read
		 * as a frame of a few bytes */
		dp_reader_opts none = {.max_record = UINT64_MAX};
		dp_tfr_header(h, UINT64_MAX - 15);
		is_int(read_mem(h, sizeof h, &none, &e), -1, "length 2^64 - 16, no limit: refused");
		like(e.msg, "record length 18446744073709551600 exceeds the maximum of 18446744073709551599 bytes",
		     "... as more than any frame can be: %s", e.msg);
		dp_tfr_header(h, UINT64_MAX);
		is_int(read_mem(h, sizeof h, &none, &e), -1, "length 2^64 - 1, no limit: refused");
		/* a big (allowed) length on a short pipe: truncation, quickly */
		dp_tfr_header(h, 200u << 20);
		is_int(read_pipe(h, sizeof h, 16, NULL, &e, NULL), -1, "200 MiB length, 64 bytes of data");
		like(e.msg, "truncated record (68 of 209715200 data bytes", "... is a truncation: %s", e.msg);
	}

	/* truncated header, garbage, empty */
	is_int(read_mem(s, 7, NULL, &e), -1, "7 bytes is a truncated header");
	is_str(e.msg, "mem: record 0 at byte 0: truncated record header (7 of 12 bytes)",
	       "truncated header message");
	const char *garbage = "this is not a tfrecord file at all, just text\n";
	is_int(read_mem((const uint8_t *)garbage, strlen(garbage), NULL, &e), -1, "text is refused");
	is_str(e.msg, "mem: record 0 at byte 0: length CRC mismatch (is this a TFRecord stream?)",
	       "garbage message");
	is_int(read_mem(s, 0, NULL, &e), 0, "empty input: no records, no error");
	{
		/* skip_corrupt over bytes of which not one is a record: an error
		 * (issue 12: tfr-cat --skip-corrupt /etc/passwd exited 0) */
		dp_reader_opts sk = {.skip_corrupt = 1};
		dp_reader *r = dp_reader_open_mem(garbage, strlen(garbage), "text", &sk, &e);
		dp_record rec;
		is_int(dp_reader_next(r, &rec, &e), DP_REC_SKIPPED, "skip_corrupt, text: passed over");
		is_int(dp_reader_next(r, &rec, &e), DP_EDATA, "... then no records is an error");
		is_str(e.msg, "text: no records found in 46 bytes (is it a TFRecord file?)", "... saying so");
		dp_reader_close(r);
		is_int(read_mem(s, 0, &sk, &e), 0, "skip_corrupt, empty input: no records, no error");
	}
	{
		int fds[2];
		pipe(fds);
		close(fds[1]);
		dp_reader *r = dp_reader_open_fd(fds[0], 1, "empty", NULL, &e);
		dp_record rec;
		is_int(dp_reader_next(r, &rec, &e), 0, "empty pipe: end of stream");
		dp_reader_close(r);
	}
	{
		/* a gzip stream cut short */
		size_t gn;
		uint8_t *g = make_stream(DP_COMP_GZIP, &gn);
		is_int(read_mem(g, gn - 3, NULL, &e), -1, "gzip without its trailer is an error");
		like(e.msg, "truncated gzip stream", "... called truncated: %s", e.msg);
		g[gn / 2] ^= 0xff;
		read_mem(g, gn, NULL, &e);
		ok(e.code == DP_EDATA, "corrupt deflate data is a data error: %s", e.msg);
		free(g);
	}
	/* the writer's frame passthrough gives identical bytes */
	{
		dp_reader *r = dp_reader_open_mem(s, n, "mem", NULL, &e);
		dp_writer *w = dp_writer_open_mem(DP_COMP_NONE, 0, &e);
		dp_record rec;
		while (dp_reader_next(r, &rec, &e) == 1)
			dp_writer_write_frame(w, rec.frame, rec.frame_len, &e);
		dp_writer_finish(w, &e);
		size_t wn;
		const uint8_t *wm = dp_writer_mem(w, &wn);
		ok(wn == n && memcmp(wm, s, n) == 0, "frames copied through are byte-identical");
		is_int(dp_writer_records(w), NREC, "writer counts records");
		dp_writer_free(w);
		dp_reader_close(r);
	}
	/* records bigger than the staging buffer */
	{
		size_t big = (3u << 20) + 5;
		uint8_t *b = malloc(big);
		for (size_t i = 0; i < big; i++)
			b[i] = (uint8_t)(i * 31);
		for (int k = 0; k < 3; k++) {
			dp_writer *w = dp_writer_open_mem(comps[k], 1, &e);
			dp_writer_write(w, "x", 1, &e);
			dp_writer_write(w, b, big, &e);
			dp_writer_write(w, "y", 1, &e);
			dp_writer_finish(w, &e);
			size_t wn;
			const uint8_t *wm = dp_writer_mem(w, &wn);
			int fine = 0;
			dp_record rec;
			dp_reader *r = dp_reader_open_mem(wm, wn, "big", NULL, &e);
			if (dp_reader_next(r, &rec, &e) == 1 && rec.len == 1 &&
			    dp_reader_next(r, &rec, &e) == 1 && rec.len == big &&
			    memcmp(rec.data, b, big) == 0 && dp_reader_next(r, &rec, &e) == 1 &&
			    rec.len == 1 && rec.data[0] == 'y' && dp_reader_next(r, &rec, &e) == 0)
				fine = 1;
			ok(fine, "%s: a 3 MiB record between small ones", dp_comp_name(comps[k]));
			dp_reader_close(r);
			dp_writer_free(w);
		}
		free(b);
	}
	{ /* 3 MB of 1000-byte records through a pipe, passed on in runs */
		dp_writer *w = dp_writer_open_mem(DP_COMP_NONE, -1, &e);
		uint8_t rec1[1000];
		for (int i = 0; i < 3000; i++) {
			memset(rec1, i, sizeof rec1);
			dp_writer_write(w, rec1, sizeof rec1, &e);
		}
		dp_writer_finish(w, &e);
		size_t sn;
		const uint8_t *sm = dp_writer_mem(w, &sn);
		int fds[2];
		pthread_t t;
		if (pipe(fds) == 0) {
			struct feeder f = {fds[1], sm, sn, 4096};
			pthread_create(&t, NULL, feed, &f);
			struct runs ru = {.w = dp_writer_open_mem(DP_COMP_NONE, -1, &e)};
			dp_reader *r = dp_reader_open_fd(fds[0], 1, "pipe", NULL, &e);
			dp_reader_on_move(r, flush_run, &ru);
			dp_record rec;
			int rc, contiguous = 0;
			while ((rc = dp_reader_next(r, &rec, &e)) == 1) {
				if (ru.len && rec.frame == ru.run + ru.len)
					contiguous++;
				else
					put_run(&ru);
				if (!ru.len)
					ru.run = rec.frame;
				ru.len += rec.frame_len;
				ru.n++;
			}
			put_run(&ru);
			dp_writer_finish(ru.w, &e);
			dp_reader_close(r);
			pthread_join(t, NULL);
			size_t on;
			const uint8_t *om = dp_writer_mem(ru.w, &on);
			ok(rc == 0 && on == sn && memcmp(om, sm, sn) == 0, "on_move: the runs give the stream back");
			ok(ru.moves > 1, "on_move: called before the buffer moved (%d times)", ru.moves);
			ok(contiguous > 2900, "on_move: records lie one after another (%d)", contiguous);
			is_int(dp_writer_records(ru.w), 3000, "write_run counts the frames of each run");
			dp_writer_free(ru.w);
		}
		dp_writer_free(w);
	}
	test_splice(s, n);
	free(d);
	free(s);
	return done_testing();
}
