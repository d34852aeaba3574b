/*
 * record.c - libFuzzer target: the TFRecord reader, plain and compressed.
 *
 * The first input byte picks how the rest is read:
 *   bit 0    skip_corrupt (resynchronise past damage) or stop at the first
 *   bit 1    from memory, or from a descriptor (a pipe fed in small,
 *            odd-sized writes by a thread, exercising the buffer refills)
 *   bits 2-3 the rest as is (compression detected), or forced gzip, or
 *            forced zlib, or: gzip-compressed here first (the gzip path on
 *            any framing)
 * and a small maximum record length (bits 4-7) keeps the limit in play.
 *
 * Checks beyond "no crash, no leak, no hang": a reader that fails keeps
 * failing (sticky); every record returned has a frame whose CRCs hold and
 * whose length matches; records and the stream offsets are increasing; the
 * records read from the gzip-compressed copy are exactly those read from
 * the plain bytes; and writing the records back out and reading them again
 * gives the same records (writer round trip).
 */
#define _GNU_SOURCE
#include "dp_record.h"
#include "fuzz.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

/* The records a read produced, concatenated with their lengths. */
typedef struct recs {
	uint8_t *p;
	size_t n, cap;
	size_t count;
	int status; /* 0 clean end, else the failure */
} recs;

static void recs_add(recs *r, const uint8_t *d, size_t len)
{
	if (r->n + len + 8 > r->cap) {
		r->cap = (r->n + len + 8) * 2;
		r->p = realloc(r->p, r->cap);
	}
	uint64_t l = len;
	memcpy(r->p + r->n, &l, 8);
	memcpy(r->p + r->n + 8, d, len);
	r->n += len + 8;
	r->count++;
}

struct feeder {
	int fd;
	const uint8_t *p;
	size_t n;
	unsigned seed;
};

static void *feed(void *arg)
{
	struct feeder *f = arg;
	size_t off = 0;
	while (off < f->n) {
		f->seed = f->seed * 1103515245u + 12345u;
		size_t k = 1 + (f->seed >> 16) % 700;
		if (k > f->n - off)
			k = f->n - off;
		if (write(f->fd, f->p + off, k) != (ssize_t)k)
			break; /* the reader stopped early */
		off += k;
	}
	close(f->fd);
	return NULL;
}

static void read_all(dp_reader *r, recs *out)
{
	dp_record rec;
	dp_err e;
	int rc;
	uint64_t last_off = 0, last_idx = 0;
	int first = 1;
	while ((rc = dp_reader_next(r, &rec, &e)) != 0) {
		if (rc == DP_REC_SKIPPED)
			continue;
		if (rc < 0) {
			dp_err e2;
			CHECK(dp_reader_next(r, &rec, &e2) == rc, "failure is not sticky");
			CHECK(strlen(e.msg) > 0, "failure without a message");
			out->status = rc;
			return;
		}
		CHECK(rec.frame_len == rec.len + 16, "frame length");
		uint64_t l;
		uint32_t c;
		memcpy(&l, rec.frame, 8);
		CHECK(l == rec.len, "length field");
		memcpy(&c, rec.frame + 8, 4);
		CHECK(dp_crc_mask(dp_crc32c(0, rec.frame, 8)) == c, "length CRC");
		memcpy(&c, rec.frame + 12 + rec.len, 4);
		CHECK(dp_crc_mask(dp_crc32c(0, rec.data, rec.len)) == c, "data CRC");
		CHECK(rec.data == rec.frame + 12, "data in frame");
		CHECK(first || (rec.offset > last_off && rec.index > last_idx), "order");
		first = 0;
		last_off = rec.offset;
		last_idx = rec.index;
		recs_add(out, rec.data, rec.len);
	}
	out->status = 0;
}

static void read_mem(const uint8_t *d, size_t n, const dp_reader_opts *o, recs *out)
{
	dp_err e;
	dp_reader *r = dp_reader_open_mem(d, n, "fuzz", o, &e);
	if (!r) {
		out->status = e.code;
		return;
	}
	read_all(r, out);
	dp_reader_close(r);
}

static void read_pipe(const uint8_t *d, size_t n, const dp_reader_opts *o, recs *out, unsigned seed)
{
	int fds[2];
	dp_err e;
	CHECK(pipe(fds) == 0, "pipe");
	struct feeder f = {fds[1], d, n, seed};
	pthread_t t;
	pthread_create(&t, NULL, feed, &f);
	dp_reader *r = dp_reader_open_fd(fds[0], 1, "fuzz", o, &e);
	CHECK(r, "open_fd");
	read_all(r, out);
	dp_reader_close(r); /* closes the read end: the feeder sees EPIPE and stops */
	pthread_join(t, NULL);
}

static uint8_t *gzip_copy(const uint8_t *d, size_t n, size_t *outn)
{
	z_stream z = {0};
	CHECK(deflateInit2(&z, 1, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY) == Z_OK, "deflateInit");
	size_t cap = deflateBound(&z, n) + 64;
	uint8_t *out = malloc(cap);
	z.next_in = (Bytef *)d;
	z.avail_in = (uInt)n;
	z.next_out = out;
	z.avail_out = (uInt)cap;
	CHECK(deflate(&z, Z_FINISH) == Z_STREAM_END, "deflate");
	*outn = cap - z.avail_out;
	deflateEnd(&z);
	return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	signal(SIGPIPE, SIG_IGN);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	uint8_t mode = data[0];
	const uint8_t *d = data + 1;
	size_t n = size - 1;
	dp_reader_opts o = {0};
	o.skip_corrupt = mode & 1;
	o.max_record = 16u << (mode >> 4); /* 16 B .. 512 KiB */
	int how = (mode >> 2) & 3;
	recs a = {0}, b = {0};

	if (how == 1 || how == 2) {
		o.compression = how == 1 ? DP_COMP_GZIP : DP_COMP_ZLIB;
		if (mode & 2)
			read_pipe(d, n, &o, &a, mode);
		else
			read_mem(d, n, &o, &a);
		goto out;
	}
	if (how == 3) /* plain framing, compared below with its gzip copy */
		o.compression = DP_COMP_NONE;
	if (mode & 2)
		read_pipe(d, n, &o, &a, mode);
	else
		read_mem(d, n, &o, &a);

	/* the same bytes through gzip: the same records, the same outcome */
	if (how == 3) {
		size_t gn;
		uint8_t *g = gzip_copy(d, n, &gn);
		dp_reader_opts og = o;
		og.compression = DP_COMP_GZIP;
		read_mem(g, gn, &og, &b);
		CHECK(a.count == b.count && a.n == b.n && (a.n == 0 || !memcmp(a.p, b.p, a.n)),
		      "gzip copy gives other records (%zu vs %zu)", a.count, b.count);
		CHECK((a.status == 0) == (b.status == 0), "gzip copy: outcome differs");
		free(g);
		free(b.p);
		b = (recs){0};
	}

	/* writer round trip */
	if (a.count) {
		dp_err e;
		dp_writer *w = dp_writer_open_mem(mode & 2 ? DP_COMP_ZLIB : DP_COMP_NONE, 1, &e);
		for (size_t off = 0; off < a.n;) {
			uint64_t l;
			memcpy(&l, a.p + off, 8);
			CHECK(dp_writer_write(w, a.p + off + 8, l, &e) == 0, "write");
			off += 8 + l;
		}
		CHECK(dp_writer_finish(w, &e) == 0, "finish");
		size_t wn;
		const uint8_t *wm = dp_writer_mem(w, &wn);
		dp_reader_opts o2 = {.max_record = o.max_record};
		read_mem(wm, wn, &o2, &b);
		CHECK(b.status == 0 && b.n == a.n && !memcmp(a.p, b.p, a.n), "writer round trip");
		dp_writer_free(w);
	}
out:
	free(a.p);
	free(b.p);
	return 0;
}
