/*
 * record.c - TFRecord framing: the streaming reader and the writer.
 *
 * Reader: one buffer of stream bytes (decompressed when the input is
 * compressed); records are parsed in place and handed out as pointers into
 * it, so the plain path copies nothing beyond read(2), and a plain memory
 * stream nothing at all.  The buffer grows only to hold a record whose
 * length field passed its CRC and the limit, and only as that record's
 * bytes actually arrive.  Reads never wait for more
 * bytes than the record at hand needs, so a record is returned as soon as
 * its last byte comes down a pipe.
 *
 * Writer: frames are gathered in a 1 MiB buffer and written (or deflated)
 * in large blocks; a record bigger than the buffer goes straight through.
 */
#define _GNU_SOURCE
#include "dp_record.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>
#include <zlib.h>

#define BUF_SIZE (1u << 20)
#define IN_SIZE (256u << 10)
/* detect() moves up to IN_SIZE bytes of a plain stream into the buffer */
_Static_assert(BUF_SIZE >= IN_SIZE, "the stream buffer must hold a raw read");

static uint64_t le64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

static uint32_t le32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

void dp_tfr_header(uint8_t hdr[DP_TFR_HEADER], uint64_t len)
{
	memcpy(hdr, &len, 8);
	uint32_t c = dp_crc_mask(dp_crc32c(0, hdr, 8));
	memcpy(hdr + 8, &c, 4);
}

void dp_tfr_footer(uint8_t ftr[DP_TFR_FOOTER], const void *data, size_t len)
{
	uint32_t c = dp_crc_mask(dp_crc32c(0, data, len));
	memcpy(ftr, &c, 4);
}

/* The names of each compression: its own first, then the other spellings
 * accepted (TensorFlow's "" and "GZIP", gzip's "gz"). */
static const struct {
	const char *name;
	int comp;
} comp_names[] = {
	{"auto", DP_COMP_AUTO}, {"none", DP_COMP_NONE}, {"gzip", DP_COMP_GZIP}, {"zlib", DP_COMP_ZLIB},
	{"", DP_COMP_NONE}, {"NONE", DP_COMP_NONE}, {"GZIP", DP_COMP_GZIP}, {"gz", DP_COMP_GZIP},
	{"ZLIB", DP_COMP_ZLIB},
};

const char *dp_comp_name(int comp)
{
	for (size_t i = 0; i < sizeof comp_names / sizeof *comp_names; i++)
		if (comp_names[i].comp == comp)
			return comp_names[i].name;
	return "?";
}

int dp_comp_parse(const char *s)
{
	for (size_t i = 0; i < sizeof comp_names / sizeof *comp_names; i++)
		if (!strcmp(comp_names[i].name, s))
			return comp_names[i].comp;
	return -1;
}

/* ---- Reader ------------------------------------------------------------ */

struct dp_reader {
	char *name;
	int fd, own_fd;
	dp_reader_opts o;
	int comp;     /* DP_COMP_AUTO until detected */
	int failed;   /* sticky error in err */
	dp_err err;

	uint8_t *buf; /* stream bytes; [pos, end) not yet consumed */
	size_t cap, pos, end;
	int owns_buf;
	int eof;      /* no more stream bytes will arrive */
	uint64_t off; /* stream offset of buf[pos] */

	uint8_t *in;  /* raw (compressed) bytes, for detection and inflate */
	size_t in_cap;
	int in_eof;
	const uint8_t *mem; /* memory source, or NULL */
	size_t mem_len;
	z_stream z;
	int z_init;
	int z_done;   /* the current member ended (Z_STREAM_END) */
	/* compressed offset where the current member's deflate data ended and
	 * its trailer (gzip: CRC-32 and ISIZE, 8 bytes; zlib: Adler-32, 4)
	 * begins; UINT64_MAX while inflate has not returned all its data */
	uint64_t z_tail;
	int z_err;        /* inflate failed after data it returned: its code */
	uint64_t z_err_at; /* and where it stopped */

	uint64_t index;
	dp_reader_stats st;
	void (*on_move)(void *); /* called before returned bytes move */
	void *on_move_ctx;
};

static int rfail(dp_reader *r, dp_err *e, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int rfail(dp_reader *r, dp_err *e, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	dp_vseterr(&r->err, code, fmt, ap);
	va_end(ap);
	r->failed = 1;
	if (e)
		*e = r->err;
	return code;
}

/* Read raw bytes from the source into p (at most n).  Returns the count, 0
 * at end, or a negative status. */
static long raw_read(dp_reader *r, uint8_t *p, size_t n, dp_err *e)
{
	if (r->mem) {
		size_t k = r->mem_len < n ? r->mem_len : n;
		memcpy(p, r->mem, k);
		r->mem += k;
		r->mem_len -= k;
		r->st.raw_bytes += k;
		return (long)k;
	}
	for (;;) {
		ssize_t k = read(r->fd, p, n);
		if (k >= 0) {
			r->st.raw_bytes += (uint64_t)k;
			return (long)k;
		}
		if (errno != EINTR) {
			int c = dp_syserr(&r->err, "%s: read", r->name);
			r->failed = 1;
			if (e)
				*e = r->err;
			return c;
		}
	}
}

/* Make more compressed input available in z (reads once). */
static int refill_in(dp_reader *r, dp_err *e)
{
	if (r->z.avail_in > 0 || r->in_eof)
		return 0;
	if (r->mem) { /* inflate straight from memory */
		r->z.next_in = (Bytef *)r->mem;
		size_t k = r->mem_len > UINT32_MAX ? UINT32_MAX : r->mem_len;
		r->z.avail_in = (uInt)k;
		r->mem += k;
		r->mem_len -= k;
		r->st.raw_bytes += k;
		if (k == 0)
			r->in_eof = 1;
		return 0;
	}
	long k = raw_read(r, r->in, r->in_cap, e);
	if (k < 0)
		return (int)k;
	if (k == 0)
		r->in_eof = 1;
	r->z.next_in = r->in;
	r->z.avail_in = (uInt)k;
	return 0;
}

/* A failure of inflate() at compressed offset at (where it stopped): in
 * the trailer, once all the data came out whole, it is said as such. */
static int inflate_fail(dp_reader *r, dp_err *e, int rc, uint64_t at)
{
	int gz = r->comp == DP_COMP_GZIP;
	const char *what = gz ? "gzip" : "zlib";
	uint64_t tail = r->z_tail, tlen = gz ? 8 : 4;
	if (rc == Z_MEM_ERROR)
		return rfail(r, e, DP_ENOMEM, "%s: out of memory", r->name);
	if (rc == Z_BUF_ERROR && tail != UINT64_MAX)
		return rfail(r, e, DP_EDATA,
			     "%s: truncated %s stream (its data whole, %" PRIu64 " of %" PRIu64
			     " trailer bytes at compressed byte %" PRIu64 ", stream ends at byte %" PRIu64 ")",
			     r->name, what, r->st.raw_bytes - tail, tlen, tail, r->st.raw_bytes);
	if (rc == Z_BUF_ERROR)
		return rfail(r, e, DP_EDATA,
			     "%s: truncated %s stream (ends inside compressed data at byte %" PRIu64 ")",
			     r->name, what, r->st.raw_bytes);
	const char *msg = r->z.msg ? r->z.msg : "invalid stream";
	if (tail != UINT64_MAX && (!strcmp(msg, "incorrect data check") ||
				   !strcmp(msg, "incorrect length check")))
		return rfail(r, e, DP_EDATA,
			     "%s: %s trailer at compressed bytes %" PRIu64 "-%" PRIu64 ": %s",
			     r->name, what, tail, tail + tlen - 1,
			     msg[10] == 'd' ? (gz ? "CRC-32 of the data does not match"
						  : "Adler-32 of the data does not match")
					    : "length of the data (ISIZE) does not match");
	return rfail(r, e, DP_EDATA, "%s: corrupt %s data near compressed byte %" PRIu64 ": %s",
		     r->name, what, at, msg);
}

/* Inflate into p (up to n bytes).  Returns bytes produced, 0 at the end of
 * the compressed stream, or a negative status.  inflate() runs with
 * Z_BLOCK, so that it stops at the end of the last deflate block, before
 * the trailer: where the trailer starts is known, for the messages. */
static long inflate_some(dp_reader *r, uint8_t *p, size_t n, dp_err *e)
{
	r->z.next_out = p;
	r->z.avail_out = n > UINT32_MAX ? UINT32_MAX : (uInt)n;
	for (;;) {
		int rc = refill_in(r, e);
		if (rc < 0)
			return rc;
		if (r->z_done) {
			if (r->z.avail_in == 0 && r->in_eof)
				return 0;
			if (r->z.avail_in == 0)
				continue;
			if (r->comp == DP_COMP_ZLIB)
				return rfail(r, e, DP_EDATA,
					     "%s: trailing data after the zlib stream at compressed byte %" PRIu64,
					     r->name, r->st.raw_bytes - r->z.avail_in);
			inflateReset(&r->z); /* another gzip member */
			r->z_done = 0;
			r->z_tail = UINT64_MAX;
		}
		uInt before = r->z.avail_out;
		rc = inflate(&r->z, Z_BLOCK);
		size_t made = before - r->z.avail_out;
		/* at a block boundary after the last block: the data is all out */
		if (rc == Z_OK && (r->z.data_type & 192) == 192 && r->z_tail == UINT64_MAX)
			r->z_tail = r->st.raw_bytes - r->z.avail_in;
		if (rc == Z_STREAM_END) {
			r->z_done = 1;
			if (made)
				return (long)made;
			continue;
		}
		if (rc == Z_OK || (rc == Z_BUF_ERROR && r->z.avail_in == 0 && !r->in_eof)) {
			if (made)
				return (long)made;
			continue;
		}
		/* the data inflated before the damage first (its records have
		 * their CRCs); inflate() says the same again on the next call,
		 * and a record cut by the damage is blamed on it (damaged()) */
		if (made) {
			r->z_err = rc;
			r->z_err_at = r->st.raw_bytes - r->z.avail_in;
			return (long)made;
		}
		return inflate_fail(r, e, rc, r->st.raw_bytes - r->z.avail_in);
	}
}

/* Decide the compression from the first bytes of the source; leaves the
 * bytes either in buf (plain) or as inflate input (compressed). */
static int detect(dp_reader *r, dp_err *e)
{
	uint8_t *peek = r->in;
	size_t n = 0;
	int comp = r->o.compression;
	if (r->mem) { /* look without copying */
		peek = (uint8_t *)r->mem;
		n = r->mem_len;
	} else {
		while (n < DP_TFR_HEADER) {
			long k = raw_read(r, r->in + n, r->in_cap - n, e);
			if (k < 0)
				return (int)k;
			if (k == 0)
				break;
			n += (size_t)k;
		}
	}
	if (comp == DP_COMP_AUTO) {
		comp = DP_COMP_NONE;
		if (n >= DP_TFR_HEADER && dp_crc_mask(dp_crc32c(0, peek, 8)) == le32(peek + 8))
			comp = DP_COMP_NONE;
		else if (n >= 2 && peek[0] == 0x1f && peek[1] == 0x8b)
			comp = DP_COMP_GZIP;
		else if (n >= 2 && (peek[0] & 0x0f) == 8 && (peek[0] >> 4) <= 7 &&
			 ((peek[0] << 8) | peek[1]) % 31 == 0)
			comp = DP_COMP_ZLIB;
	}
	r->comp = comp;
	if (comp == DP_COMP_NONE) {
		if (r->mem) { /* parse the caller's memory in place */
			r->buf = (uint8_t *)r->mem;
			r->cap = r->end = r->mem_len;
			r->st.raw_bytes = r->mem_len;
			r->mem_len = 0;
			r->eof = 1;
			return 0;
		}
		memcpy(r->buf, r->in, n);
		r->end = n;
		if (n < DP_TFR_HEADER)
			r->eof = 1; /* raw_read returned 0 */
		return 0;
	}
	if (!r->buf) { /* a compressed memory stream inflates into its own buffer */
		if (!(r->buf = malloc(BUF_SIZE)))
			return rfail(r, e, DP_ENOMEM, "%s: out of memory", r->name);
		r->cap = BUF_SIZE;
		r->owns_buf = 1;
	}
	memset(&r->z, 0, sizeof r->z);
	if (inflateInit2(&r->z, comp == DP_COMP_GZIP ? 31 : 15) != Z_OK)
		return rfail(r, e, DP_ENOMEM, "%s: cannot start zlib", r->name);
	r->z_init = 1;
	r->z_tail = UINT64_MAX;
	if (!r->mem) {
		r->z.next_in = r->in;
		r->z.avail_in = (uInt)n;
		if (n < DP_TFR_HEADER)
			r->in_eof = 1;
	}
	return 0;
}

/* Make at least `need` bytes available at buf+pos, or as many as the stream
 * has left.  The buffer grows by doubling, and only while bytes keep
 * arriving, so a huge length field on a short stream costs no memory.
 * Returns 0 or a negative status. */
static int fill(dp_reader *r, size_t need, dp_err *e)
{
	while (r->end - r->pos < need && !r->eof) {
		if (r->on_move && (r->end == r->cap || (r->pos > 0 && (r->cap - r->pos < need ||
								       r->cap - r->end < r->cap / 8))))
			r->on_move(r->on_move_ctx);
		if (r->pos > 0 && (r->cap - r->pos < need || r->cap - r->end < r->cap / 8)) {
			memmove(r->buf, r->buf + r->pos, r->end - r->pos);
			r->end -= r->pos;
			r->pos = 0;
		}
		if (r->end == r->cap) { /* full and need > cap: grow towards need */
			size_t ncap = r->cap * 2 < need ? r->cap * 2 : need;
			uint8_t *nb = realloc(r->buf, ncap);
			if (!nb)
				return rfail(r, e, DP_ENOMEM,
					     "%s: record %" PRIu64 " at byte %" PRIu64
					     ": out of memory for %zu bytes",
					     r->name, r->index, r->off, need);
			r->buf = nb;
			r->cap = ncap;
		}
		long k;
		if (r->comp == DP_COMP_NONE)
			k = raw_read(r, r->buf + r->end, r->cap - r->end, e);
		else
			k = inflate_some(r, r->buf + r->end, r->cap - r->end, e);
		if (k < 0)
			return (int)k;
		if (k == 0)
			r->eof = 1;
		r->end += (size_t)k;
	}
	return 0;
}

static void consume(dp_reader *r, size_t n)
{
	r->pos += n;
	r->off += n;
	r->st.bytes += n;
}

/* A damaged frame at r->pos.  Without skip_corrupt this is the end; with
 * it, pass over the frame (when its extent is known) or scan for the next
 * header whose length CRC holds. */
static int damaged(dp_reader *r, dp_err *e, int code, uint64_t known_len, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

static int damaged(dp_reader *r, dp_err *e, int code, uint64_t known_len, const char *fmt, ...)
{
	char why[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	uint64_t at = r->off, idx = r->index;
	if (r->z_err) /* the compressed stream broke here: that is the cause */
		return inflate_fail(r, e, r->z_err, r->z_err_at);
	if (!r->o.skip_corrupt)
		return rfail(r, e, code, "%s: record %" PRIu64 " at byte %" PRIu64 ": %s", r->name,
			     idx, at, why);
	r->st.corrupt++;
	r->index++;
	if (known_len) {
		consume(r, known_len);
		r->st.skipped_bytes += known_len;
		dp_seterr(e, DP_EDATA, "%s: record %" PRIu64 " at byte %" PRIu64 ": %s; skipped", r->name,
			  idx, at, why);
		return DP_REC_SKIPPED;
	}
	uint64_t max = r->o.max_record;
	for (;;) {
		consume(r, 1);
		r->st.skipped_bytes++;
		int rc = fill(r, DP_TFR_HEADER, e);
		if (rc < 0)
			return rc;
		if (r->end - r->pos < DP_TFR_HEADER) { /* nothing valid to the end */
			r->st.skipped_bytes += r->end - r->pos;
			consume(r, r->end - r->pos);
			dp_seterr(e, DP_EDATA,
				  "%s: record %" PRIu64 " at byte %" PRIu64
				  ": %s; skipped %" PRIu64 " bytes to the end of the stream",
				  r->name, idx, at, why, r->off - at);
			return DP_REC_SKIPPED;
		}
		const uint8_t *p = r->buf + r->pos;
		if (dp_crc_mask(dp_crc32c(0, p, 8)) == le32(p + 8) && le64(p) <= max)
			break;
	}
	dp_seterr(e, DP_EDATA,
		  "%s: record %" PRIu64 " at byte %" PRIu64 ": %s; skipped %" PRIu64
		  " bytes to the next valid header at byte %" PRIu64,
		  r->name, idx, at, why, r->off - at, r->off);
	return DP_REC_SKIPPED;
}

int dp_reader_next(dp_reader *r, dp_record *rec, dp_err *e)
{
	if (r->failed) {
		if (e)
			*e = r->err;
		return r->err.code;
	}
	if (r->comp == DP_COMP_AUTO) {
		int rc = detect(r, e);
		if (rc < 0)
			return rc;
	}
	int rc = fill(r, DP_TFR_HEADER, e);
	if (rc < 0)
		return rc;
	size_t avail = r->end - r->pos;
	if (avail == 0 && r->o.skip_corrupt && r->st.records == 0 && r->st.bytes > 0)
		/* damage passed over is not an empty input: one rule for every
		 * reader of TFRecords (tfr-cat, tfr-shard) */
		return rfail(r, e, DP_EDATA,
			     "%s: no records found in %" PRIu64 " bytes (is it a TFRecord file?)",
			     r->name, r->st.bytes);
	if (avail == 0)
		return 0;
	if (avail < DP_TFR_HEADER)
		return damaged(r, e, DP_EDATA, avail, "truncated record header (%zu of 12 bytes)",
			       avail);
	const uint8_t *p = r->buf + r->pos;
	uint64_t len = le64(p);
	if (dp_crc_mask(dp_crc32c(0, p, 8)) != le32(p + 8))
		return damaged(r, e, DP_EDATA, 0, "length CRC mismatch%s",
			       r->off == 0 ? " (is this a TFRecord stream?)" : "");
	if (len > r->o.max_record || len > SIZE_MAX - DP_TFR_HEADER - DP_TFR_FOOTER)
		return damaged(r, e, DP_ELIMIT, 0,
			       "record length %" PRIu64 " exceeds the maximum of %" PRIu64 " bytes",
			       len, r->o.max_record < SIZE_MAX - 16 ? r->o.max_record : SIZE_MAX - 16);
	size_t need = DP_TFR_HEADER + (size_t)len + DP_TFR_FOOTER;
	rc = fill(r, need, e);
	if (rc < 0)
		return rc;
	avail = r->end - r->pos;
	if (avail < need && avail - DP_TFR_HEADER >= len) /* cut inside the data CRC */
		return damaged(r, e, DP_EDATA, 0,
			       "truncated record (its %" PRIu64 " data bytes whole, %zu of 4 data CRC "
			       "bytes, stream ends at byte %" PRIu64 ")",
			       len, avail - DP_TFR_HEADER - (size_t)len, r->off + avail);
	if (avail < need)
		return damaged(r, e, DP_EDATA, 0,
			       "truncated record (%zu of %" PRIu64 " data bytes, stream ends at byte %" PRIu64
			       ")",
			       avail - DP_TFR_HEADER, len, r->off + avail);
	p = r->buf + r->pos;
	/* A bad data CRC under a good length CRC is a damaged record or a
	 * length that lies (a frame cut short and spliced to the next): the
	 * search for the next header starts at the byte after this one, as
	 * for a bad length, so no good record after the damage is lost. */
	if (!r->o.no_verify &&
	    dp_crc_mask(dp_crc32c(0, p + DP_TFR_HEADER, (size_t)len)) != le32(p + DP_TFR_HEADER + len))
		return damaged(r, e, DP_EDATA, 0, "data CRC mismatch");
	rec->frame = p;
	rec->frame_len = need;
	rec->data = p + DP_TFR_HEADER;
	rec->len = (size_t)len;
	rec->index = r->index++;
	rec->offset = r->off;
	consume(r, need);
	r->st.records++;
	return 1;
}

static dp_reader *reader_new(const char *name, const dp_reader_opts *opts, dp_err *e)
{
	dp_reader *r = calloc(1, sizeof *r);
	if (!r || !(r->name = strdup(name))) {
		free(r);
		dp_seterr(e, DP_ENOMEM, "%s: out of memory", name);
		return NULL;
	}
	if (opts)
		r->o = *opts;
	if (!r->o.max_record)
		r->o.max_record = DP_MAX_RECORD_DEFAULT;
	r->comp = DP_COMP_AUTO;
	r->fd = -1;
	return r;
}

dp_reader *dp_reader_open_fd(int fd, int own_fd, const char *name, const dp_reader_opts *opts,
			     dp_err *e)
{
	dp_reader *r = reader_new(name, opts, e);
	if (!r)
		return NULL;
	r->fd = fd;
	r->own_fd = own_fd;
	r->cap = BUF_SIZE;
	r->in_cap = IN_SIZE;
	r->buf = malloc(r->cap);
	r->in = malloc(r->in_cap);
	r->owns_buf = 1;
	if (!r->buf || !r->in) {
		dp_seterr(e, DP_ENOMEM, "%s: out of memory", name);
		r->own_fd = 0;
		dp_reader_close(r);
		return NULL;
	}
#ifdef POSIX_FADV_SEQUENTIAL
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
	return r;
}

dp_reader *dp_reader_open_path(const char *path, const dp_reader_opts *opts, dp_err *e)
{
	if (strcmp(path, "-") == 0)
		return dp_reader_open_fd(STDIN_FILENO, 0, "stdin", opts, e);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		dp_syserr(e, "%s", path);
		if (e && errno == ENOENT)
			e->code = DP_ENOTFOUND;
		return NULL;
	}
	dp_reader *r = dp_reader_open_fd(fd, 1, path, opts, e);
	if (!r)
		close(fd);
	return r;
}

dp_reader *dp_reader_open_mem(const void *buf, size_t len, const char *name,
			      const dp_reader_opts *opts, dp_err *e)
{
	dp_reader *r = reader_new(name, opts, e);
	if (!r)
		return NULL;
	r->mem = buf;
	r->mem_len = len;
	if (detect(r, e) < 0) {
		dp_reader_close(r);
		return NULL;
	}
	return r;
}

int dp_reader_compression(const dp_reader *r)
{
	return r->comp;
}

const char *dp_reader_name(const dp_reader *r)
{
	return r->name;
}

void dp_reader_on_move(dp_reader *r, void (*fn)(void *ctx), void *ctx)
{
	r->on_move = fn;
	r->on_move_ctx = ctx;
}

void dp_reader_stats_get(const dp_reader *r, dp_reader_stats *s)
{
	*s = r->st;
}

void dp_reader_close(dp_reader *r)
{
	if (!r)
		return;
	if (r->z_init)
		inflateEnd(&r->z);
	if (r->own_fd && r->fd >= 0)
		close(r->fd);
	if (r->owns_buf)
		free(r->buf);
	free(r->in);
	free(r->name);
	free(r);
}

/* ---- Writer ------------------------------------------------------------ */

struct dp_writer {
	char *name;
	int fd;       /* -1: memory */
	int comp;
	z_stream z;
	int z_init;
	uint8_t *buf; /* staged frames, uncompressed */
	size_t cap, n;
	uint8_t *zout;
	size_t zcap;
	uint8_t *mem; /* memory sink */
	size_t mem_len, mem_cap;
	uint64_t records, bytes, out_bytes;
	int failed;
	dp_err err;
};

static int wfail(dp_writer *w, dp_err *e)
{
	w->failed = 1;
	if (e)
		*e = w->err;
	return w->err.code;
}

/* Send produced bytes to the sink. */
static int emit(dp_writer *w, const void *p, size_t n, dp_err *e)
{
	w->out_bytes += n;
	if (w->fd >= 0) {
		if (dp_write_all(w->fd, p, n, w->name, &w->err) < 0)
			return wfail(w, e);
		return 0;
	}
	if (dp_grow(&w->mem, &w->mem_cap, w->mem_len + n, 1) < 0) {
		dp_seterr(&w->err, DP_ENOMEM, "%s: out of memory", w->name);
		return wfail(w, e);
	}
	memcpy(w->mem + w->mem_len, p, n);
	w->mem_len += n;
	return 0;
}

/* Compress (or pass through) n uncompressed stream bytes. */
static int put(dp_writer *w, const void *p, size_t n, int flush, dp_err *e)
{
	if (w->comp == DP_COMP_NONE)
		return n ? emit(w, p, n, e) : 0;
	w->z.next_in = (Bytef *)p;
	w->z.avail_in = (uInt)n;
	for (;;) {
		w->z.next_out = w->zout;
		w->z.avail_out = (uInt)w->zcap;
		int rc = deflate(&w->z, flush);
		if (rc == Z_STREAM_ERROR) {
			dp_seterr(&w->err, DP_EIO, "%s: zlib deflate failed", w->name);
			return wfail(w, e);
		}
		size_t made = w->zcap - w->z.avail_out;
		if (made && emit(w, w->zout, made, e) < 0)
			return -1;
		if (flush == Z_FINISH ? rc == Z_STREAM_END : (w->z.avail_in == 0 && w->z.avail_out != 0))
			return 0;
	}
}

static int stage_flush(dp_writer *w, dp_err *e)
{
	size_t n = w->n;
	w->n = 0;
	return put(w, w->buf, n, Z_NO_FLUSH, e);
}

dp_writer *dp_writer_open_fd(int fd, const char *name, int comp, int level, dp_err *e)
{
	if (comp != DP_COMP_NONE && comp != DP_COMP_GZIP && comp != DP_COMP_ZLIB) {
		dp_seterr(e, DP_EARG, "%s: unknown compression", name);
		return NULL;
	}
	dp_writer *w = calloc(1, sizeof *w);
	if (!w)
		goto nomem;
	w->fd = fd;
	w->comp = comp;
	w->cap = BUF_SIZE;
	w->name = strdup(name);
	w->buf = malloc(w->cap);
	if (!w->name || !w->buf)
		goto nomem;
	if (comp != DP_COMP_NONE) {
		w->zcap = 256u << 10;
		if (!(w->zout = malloc(w->zcap)))
			goto nomem;
		if (deflateInit2(&w->z, level < 0 ? Z_DEFAULT_COMPRESSION : level, Z_DEFLATED,
				 comp == DP_COMP_GZIP ? 31 : 15, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
			dp_seterr(e, DP_EARG, "%s: invalid compression level %d", name, level);
			dp_writer_free(w);
			return NULL;
		}
		w->z_init = 1;
	}
	return w;
nomem:
	dp_seterr(e, DP_ENOMEM, "%s: out of memory", name);
	dp_writer_free(w);
	return NULL;
}

dp_writer *dp_writer_open_mem(int comp, int level, dp_err *e)
{
	return dp_writer_open_fd(-1, "memory", comp, level, e);
}

int dp_writer_write_frame(dp_writer *w, const void *frame, size_t len, dp_err *e)
{
	return dp_writer_write_run(w, frame, len, 1, e);
}

int dp_writer_write_run(dp_writer *w, const void *frame, size_t len, uint64_t n, dp_err *e)
{
	if (w->failed)
		return wfail(w, e);
	if (w->n + len > w->cap || len >= w->cap / 4) {
		if (stage_flush(w, e) < 0)
			return -1;
		if (len >= w->cap / 4) { /* a large run of frames: no copy */
			if (put(w, frame, len, Z_NO_FLUSH, e) < 0)
				return -1;
			goto done;
		}
	}
	memcpy(w->buf + w->n, frame, len);
	w->n += len;
done:
	w->records += n;
	w->bytes += len;
	return 0;
}

int dp_writer_write(dp_writer *w, const void *data, size_t len, dp_err *e)
{
	uint8_t hdr[DP_TFR_HEADER], ftr[DP_TFR_FOOTER];
	if (w->failed)
		return wfail(w, e);
	dp_tfr_header(hdr, len);
	dp_tfr_footer(ftr, data, len);
	size_t total = len + DP_TFR_HEADER + DP_TFR_FOOTER;
	if (w->n + total > w->cap) {
		if (stage_flush(w, e) < 0)
			return -1;
	}
	if (total > w->cap) { /* too big to stage: straight through */
		if (put(w, hdr, sizeof hdr, Z_NO_FLUSH, e) < 0 || put(w, data, len, Z_NO_FLUSH, e) < 0 ||
		    put(w, ftr, sizeof ftr, Z_NO_FLUSH, e) < 0)
			return -1;
	} else {
		memcpy(w->buf + w->n, hdr, sizeof hdr);
		memcpy(w->buf + w->n + sizeof hdr, data, len);
		memcpy(w->buf + w->n + sizeof hdr + len, ftr, sizeof ftr);
		w->n += total;
	}
	w->records++;
	w->bytes += total;
	return 0;
}

/* Write out what is staged, then flush zlib with flush (Z_SYNC_FLUSH,
 * Z_FINISH); uncompressed, the staged bytes alone. */
static int drain(dp_writer *w, int flush, dp_err *e)
{
	if (w->failed)
		return wfail(w, e);
	if (stage_flush(w, e) < 0)
		return -1;
	return put(w, NULL, 0, flush, e);
}

int dp_writer_flush(dp_writer *w, dp_err *e) { return drain(w, Z_SYNC_FLUSH, e); }

int dp_writer_finish(dp_writer *w, dp_err *e)
{
	if (drain(w, Z_FINISH, e) < 0)
		return -1;
	if (w->z_init) {
		deflateEnd(&w->z);
		w->z_init = 0;
	}
	return 0;
}

const uint8_t *dp_writer_mem(const dp_writer *w, size_t *len)
{
	*len = w->mem_len;
	return w->mem;
}

uint64_t dp_writer_records(const dp_writer *w) { return w->records; }
uint64_t dp_writer_bytes(const dp_writer *w) { return w->bytes; }
uint64_t dp_writer_out_bytes(const dp_writer *w) { return w->out_bytes; }

void dp_writer_free(dp_writer *w)
{
	if (!w)
		return;
	if (w->z_init)
		deflateEnd(&w->z);
	free(w->buf);
	free(w->zout);
	free(w->mem);
	free(w->name);
	free(w);
}
