/*
 * dp_record.h - TFRecord streams: CRC32C, a streaming reader, a writer.
 *
 * A TFRecord stream is a sequence of frames
 *     u64 length | u32 masked_crc32c(length) | data[length] | u32 masked_crc32c(data)
 * little endian, mask(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8,
 * optionally wrapped whole in GZIP (RFC 1952, members may be concatenated)
 * or ZLIB (RFC 1950).  See tfrecord(5).
 *
 * The reader works on any file descriptor (stdin, pipes, FIFOs, sockets:
 * it never seeks and never asks for a size) or on memory.  It detects the
 * compression from the first bytes, checks both CRCs of every frame, never
 * allocates more than the configured maximum record length, and names the
 * stream, record index (from 0) and byte offset in every error.  Offsets
 * count bytes of the decompressed stream.
 */
#ifndef DP_RECORD_H
#define DP_RECORD_H

#include "dp.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "libdp reads and writes little-endian framing with plain loads: little-endian hosts only"
#endif

/* ---- CRC32C ------------------------------------------------------------ */

/* Extend crc (0 to start) with len bytes: CRC-32C with the usual pre and
 * post inversion, so dp_crc32c(0, "123456789", 9) == 0xe3069283. */
DP_EXPORT uint32_t dp_crc32c(uint32_t crc, const void *buf, size_t len);
/* The portable implementation, always available: the reference in tests. */
DP_EXPORT uint32_t dp_crc32c_portable(uint32_t crc, const void *buf, size_t len);
/* "sse4.2" or "portable": the implementation chosen for this CPU. */
DP_EXPORT const char *dp_crc32c_impl(void);

static inline uint32_t dp_crc_mask(uint32_t crc)
{
	return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static inline uint32_t dp_crc_unmask(uint32_t m)
{
	uint32_t r = m - 0xa282ead8u;
	return (r >> 17) | (r << 15);
}

#define DP_TFR_HEADER 12 /* length + its CRC */
#define DP_TFR_FOOTER 4  /* CRC of the data */

/* Write the 12-byte header of a record of `len` bytes into hdr. */
DP_EXPORT void dp_tfr_header(uint8_t hdr[DP_TFR_HEADER], uint64_t len);
/* Write the 4-byte footer (masked CRC of data) into ftr. */
DP_EXPORT void dp_tfr_footer(uint8_t ftr[DP_TFR_FOOTER], const void *data, size_t len);

/* ---- Compression ------------------------------------------------------- */

enum dp_comp {
	DP_COMP_AUTO = 0, /* reader: detect from the first bytes */
	DP_COMP_NONE = 1,
	DP_COMP_GZIP = 2,
	DP_COMP_ZLIB = 3
};
/* "none", "gzip", "zlib" (and "auto"); parse returns -1 for anything else.
 * Parsing also accepts "" as none and TensorFlow's "GZIP"/"ZLIB". */
DP_EXPORT const char *dp_comp_name(int comp);
DP_EXPORT int dp_comp_parse(const char *s);

/* ---- Reader ------------------------------------------------------------ */

#define DP_MAX_RECORD_DEFAULT (256u << 20) /* 256 MiB */

typedef struct dp_reader_opts {
	uint64_t max_record; /* longest record accepted; 0: DP_MAX_RECORD_DEFAULT */
	int compression;     /* enum dp_comp; DP_COMP_AUTO (0) detects */
	int no_verify;       /* skip the data CRC check (the length CRC is always checked) */
	int skip_corrupt;    /* resynchronise past damaged frames instead of failing */
} dp_reader_opts;

typedef struct dp_record {
	const uint8_t *data;  /* the record's bytes, valid until the next call */
	size_t len;
	const uint8_t *frame; /* the whole frame as read: header, data, footer */
	size_t frame_len;
	uint64_t index;       /* 0-based position of the record in the stream */
	uint64_t offset;      /* byte offset of the frame in the decompressed stream */
} dp_record;

typedef struct dp_reader_stats {
	uint64_t records;       /* good records returned */
	uint64_t corrupt;       /* damaged frames skipped (skip_corrupt) */
	uint64_t skipped_bytes; /* bytes passed over while resynchronising */
	uint64_t bytes;         /* decompressed bytes consumed */
	uint64_t raw_bytes;     /* bytes read from the descriptor */
} dp_reader_stats;

typedef struct dp_reader dp_reader;

/* Open a reader on fd (not closed by the reader unless own_fd).  name is
 * used in messages and copied.  opts may be NULL for the defaults. */
DP_EXPORT dp_reader *dp_reader_open_fd(int fd, int own_fd, const char *name, const dp_reader_opts *opts,
			     dp_err *e);
/* Open path, or stdin for "-" (named "stdin" in messages). */
DP_EXPORT dp_reader *dp_reader_open_path(const char *path, const dp_reader_opts *opts, dp_err *e);
/* Read from len bytes of memory (not copied: it must outlive the reader). */
DP_EXPORT dp_reader *dp_reader_open_mem(const void *buf, size_t len, const char *name,
			      const dp_reader_opts *opts, dp_err *e);

#define DP_REC_SKIPPED 2
/* Next record.  Returns 1 with *rec filled, 0 at a clean end of stream, a
 * negative status on failure (sticky: later calls return it again), or,
 * with skip_corrupt, DP_REC_SKIPPED after passing over a damaged frame (e
 * says what and where; call again to go on). */
DP_EXPORT int dp_reader_next(dp_reader *r, dp_record *rec, dp_err *e);

DP_EXPORT int dp_reader_compression(const dp_reader *r); /* known after the first next() */
DP_EXPORT const char *dp_reader_name(const dp_reader *r);
DP_EXPORT void dp_reader_stats_get(const dp_reader *r, dp_reader_stats *s);
DP_EXPORT void dp_reader_close(dp_reader *r);

/* Records stay valid longer than "until the next call": the bytes of every
 * record returned stay where they are until the reader must move or
 * reallocate its buffer, and fn(ctx) is called just before it does (from
 * inside dp_reader_next).  A caller that copies records through can so
 * gather runs of consecutive frames (rec.frame just after the previous one)
 * and write each run in one piece, flushing it from fn and at the end,
 * instead of copying record by record.  NULL fn removes the hook. */
DP_EXPORT void dp_reader_on_move(dp_reader *r, void (*fn)(void *ctx), void *ctx);

/* ---- Writer ------------------------------------------------------------ */

typedef struct dp_writer dp_writer;

/* Write records to fd (not closed by the writer), compressed with comp
 * (DP_COMP_NONE, _GZIP or _ZLIB) at zlib level (-1 for zlib's default). */
DP_EXPORT dp_writer *dp_writer_open_fd(int fd, const char *name, int comp, int level, dp_err *e);
/* Write to a growing memory buffer; see dp_writer_mem. */
DP_EXPORT dp_writer *dp_writer_open_mem(int comp, int level, dp_err *e);

/* Append one record: frames it and computes its CRCs. */
DP_EXPORT int dp_writer_write(dp_writer *w, const void *data, size_t len, dp_err *e);
/* Append a frame already built and checked (dp_record.frame). */
DP_EXPORT int dp_writer_write_frame(dp_writer *w, const void *frame, size_t len, dp_err *e);
/* Append n whole frames lying one after another (a run gathered with
 * dp_reader_on_move); a large run is written without being copied. */
DP_EXPORT int dp_writer_write_run(dp_writer *w, const void *frames, size_t len, uint64_t n, dp_err *e);
/* Push buffered bytes to the descriptor (a compressed stream stays open). */
DP_EXPORT int dp_writer_flush(dp_writer *w, dp_err *e);
/* Finish the stream (compressed trailer) and flush everything.  The writer
 * stays valid for dp_writer_mem/dp_writer_free only. */
DP_EXPORT int dp_writer_finish(dp_writer *w, dp_err *e);
/* Memory writers: the bytes written so far (after dp_writer_finish: all). */
DP_EXPORT const uint8_t *dp_writer_mem(const dp_writer *w, size_t *len);
DP_EXPORT uint64_t dp_writer_records(const dp_writer *w);
DP_EXPORT uint64_t dp_writer_bytes(const dp_writer *w);     /* uncompressed bytes framed */
DP_EXPORT uint64_t dp_writer_out_bytes(const dp_writer *w); /* bytes produced (compressed) */
DP_EXPORT void dp_writer_free(dp_writer *w);


#ifdef __cplusplus
}
#endif
#endif
