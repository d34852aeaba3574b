/*
 * dp_data.h - training input: TFRecord files of tf.train.Example to
 * batches of floats, streaming.
 *
 *   sources   files, glob patterns ({rank}, {size} expanded first; a
 *             name that exists is that file, only one that does not is
 *             a pattern), "-" for stdin, FIFOs; or a shell command run anew each epoch
 *             whose stdout is read ({epoch} from 1, {epoch0} from 0, {rank},
 *             {size} expanded).
 *             Compression is detected per source.  Regular files are
 *             re-read every epoch; a stream (stdin, FIFO) can be read only
 *             once, so its frames are kept as read - in memory or in an
 *             unlinked temporary file, up to a limit - and later epochs
 *             read that cache.
 *   records   parsed in place (dp_example_parse, zero-copy); the input
 *             feature is a float_list, an int64_list, or bytes of raw
 *             little-endian uint8/float32/float64 (decode; channels-last
 *             arrays transposed to C, H, W with hwc), or an
 *             image (DP_DECODE_IMAGE: decoded, resized, augmented and
 *             normalised by dp_image_transform, with a seed of its own
 *             per (seed, epoch, source, record), so its augmentation
 *             is the same whatever the threads); it is multiplied by
 *             scale and must hold exactly in_size finite values; the label is one int64 class in [0, nclass) or
 *             label_size floats.  Any other record is an error naming the
 *             source, the record index and its byte offset.
 *   shuffle   a buffer of `shuffle` records, as tf.data's shuffle(): each
 *             record read replaces a uniformly chosen one, which goes out;
 *             at the end the buffer drains in random order.  With several
 *             sources their order is also shuffled each epoch.  The
 *             generator is a function of (seed, epoch) only.
 *   batches   of `batch` samples; the last, partial one kept or dropped
 *             (drop_last).  A reader thread prepares up to `prefetch`
 *             batches ahead (0: everything in the caller's thread).  With
 *             decode_threads N, the records of a batch are copied aside
 *             and decoded by N threads and the reader together.
 *   damage    a record that cannot be decoded is an error naming the
 *             source, record and byte offset; with skip_corrupt an image
 *             that does not decode is passed to on_skip and replaced by
 *             the next record instead.
 * Memory is bounded by the shuffle buffer (of encoded records), the
 * batches in flight and the stream cache, never by the dataset.  An epoch restarted with the same
 * seed yields the same batches in the same order, so a resumed run skips
 * the records it already trained on (dp_data_epoch_at, at the last
 * batch's pos) and continues exactly.
 */
#ifndef DP_DATA_H
#define DP_DATA_H

#include "dp.h"
#include "dp_image.h"
#include "dp_record.h"

#ifdef __cplusplus
extern "C" {
#endif

enum dp_decode {
	DP_DECODE_NONE = 0, DP_DECODE_UINT8, DP_DECODE_FLOAT32, DP_DECODE_FLOAT64, DP_DECODE_IMAGE
};
/* "uint8", "float32", "float64", "image" ("none"); -1 for anything else. */
DP_EXPORT int dp_decode_parse(const char *s);
DP_EXPORT const char *dp_decode_name(int d);

/* DP_LABEL_NONE: the records need no label (inference: dp-serve); the
 * batches carry none. */
enum dp_label_kind { DP_LABEL_CLASS = 1, DP_LABEL_VECTOR = 2, DP_LABEL_NONE = 3 };
enum dp_cache { DP_CACHE_FILE = 0, DP_CACHE_MEMORY = 1, DP_CACHE_NONE = 2 };

typedef struct dp_data_opts {
	const char *const *inputs; /* paths and glob patterns, "-" for stdin */
	size_t ninputs;
	const char *cmd;           /* or: a command re-run each epoch */
	const char *feature, *label;
	int decode;                /* enum dp_decode, for bytes features */
	double scale;              /* 0 means 1 */
	size_t in_size;            /* floats per sample */
	int label_kind;            /* enum dp_label_kind */
	size_t nclass;             /* DP_LABEL_CLASS: labels lie in [0, nclass) */
	size_t label_size;         /* DP_LABEL_VECTOR: floats per label */
	size_t batch;
	int drop_last;
	size_t shuffle;            /* buffer in records; 0 or 1: in order */
	uint64_t seed;
	int cache;                 /* enum dp_cache, for streams */
	uint64_t cache_limit;      /* bytes over all streams; 0: 4 GiB */
	const char *cache_dir;     /* DP_CACHE_FILE; NULL: $TMPDIR or /tmp */
	int prefetch;              /* batches decoded ahead by a thread; 0: none */
	/* Shards: several readers of the same sources each keep a disjoint
	 * share.  shard_block 0: record i as read (before the shuffle) is
	 * kept when i % shard_count == shard_index.  shard_block B > 0: after
	 * the shuffle, the k-th record out of it is kept when
	 * (k / B) % shard_count == shard_index, so with B the batch size,
	 * reader r's j-th batch is the r-th slice of the j-th batch of
	 * B * shard_count a single reader would make (data-parallel training
	 * sees exactly one reader's global batches); records of other shards
	 * are not decoded. */
	unsigned shard_index, shard_count;
	size_t shard_block;
	/* {rank} and {size} in paths and the command; size 0: from the
	 * environment (dp_rank_size). */
	int rank, size;
	int origins;               /* batches carry each sample's source and record */
	/* The input shape (C, H, W), 0s when a plain length: needed for hwc
	 * and images. */
	size_t shape[3];
	int hwc;                   /* raw bytes are (H, W, C): transposed */
	dp_image_tf image;         /* DP_DECODE_IMAGE: channels, height and width
				      0 take shape's; scale from `scale` */
	unsigned decode_threads;   /* threads decoding beside the reader; 0: none */
	int skip_corrupt;          /* images that do not decode are skipped */
	/* Called (in the reader's thread) with each skipped image's error. */
	void (*on_skip)(void *ctx, const dp_err *e);
	void *skip_ctx;
	dp_reader_opts rec;
	/* Memory for batches (host), e.g. a backend's host_alloc; NULL: malloc. */
	void *(*alloc)(void *ctx, size_t bytes);
	void (*free)(void *ctx, void *p);
	void *alloc_ctx;
	/* DP_LABEL_CLASS: a bytes feature naming each record's class
	 * ("image/class/text", tfrecord(5)); the names met are gathered for
	 * dp_data_class_names.  NULL: none. */
	const char *class_text;
	/* With origins: a bytes feature naming each sample ("image/filename"),
	 * into dp_batch.name.  NULL: none. */
	const char *sample_name;
} dp_data_opts;

typedef struct dp_batch {
	size_t n;       /* samples: the batch size, or fewer for the last one */
	float *x;       /* (n, in_size) */
	int32_t *y;     /* (n) class labels (DP_LABEL_CLASS) */
	float *t;       /* (n, label_size) targets (DP_LABEL_VECTOR) */
	uint64_t index; /* batch number in the epoch, from 0 */
	/* With dp_data_opts.origins: where each sample came from. */
	uint32_t *src;  /* (n) source index (dp_data_source) */
	uint64_t *rec;  /* (n) record index in that source, from 0 */
	char **name;    /* (n) with sample_name: its value (NUL-terminated, NULL
			   when the record has none), valid until the next batch */
	/* Where the epoch is after this batch: the records out of the
	 * shuffle so far (those of other shards, and images skipped as
	 * corrupt, included), for dp_data_epoch_at. */
	uint64_t pos;
} dp_batch;

typedef struct dp_data_stats {
	uint64_t records;     /* records read this epoch */
	uint64_t samples;     /* samples delivered in batches */
	uint64_t batches;
	uint64_t dropped;     /* samples of a partial last batch dropped */
	uint64_t not_in_shard; /* records left to other shards */
	uint64_t cached_bytes; /* bytes of streams kept for later epochs */
	uint64_t corrupt;     /* images skipped (skip_corrupt) */
	double wait_s;        /* time dp_data_next waited for batches (or,
				 without a reader thread, spent making them) */
} dp_data_stats;

typedef struct dp_data dp_data;

/* Check the options and find the sources (globs must match something,
 * files must be readable).  Reads nothing yet. */
DP_EXPORT dp_data *dp_data_open(const dp_data_opts *o, dp_err *e);
/* Start epoch `epoch` (0-based), abandoning any epoch in progress, and
 * pass over its first `skip` batches without decoding them. */
DP_EXPORT int dp_data_epoch(dp_data *d, uint64_t epoch, uint64_t skip, dp_err *e);
/* Start epoch `epoch` at position pos (a batch's pos: the batches up to
 * it were trained on), numbering the next batch `batches`: the records
 * before it are passed over without decoding.  A resumed run continues
 * exactly where it was even when images were skipped as corrupt (a batch
 * then took more records than its size).  pos 0: dp_data_epoch. */
DP_EXPORT int dp_data_epoch_at(dp_data *d, uint64_t epoch, uint64_t batches, uint64_t pos,
			       dp_err *e);
/* The next batch of the epoch: 1 with *b set (valid until the next call),
 * 0 at the end of the epoch, or a negative status. */
DP_EXPORT int dp_data_next(dp_data *d, const dp_batch **b, dp_err *e);
/* Counts of the epoch in progress (with a reader thread: as of the last
 * batch it prepared; exact once dp_data_next has returned 0). */
DP_EXPORT void dp_data_stats_get(dp_data *d, dp_data_stats *s);
/* Number of sources found, and a description of the i-th ("a.tfrecord",
 * "stdin", "command"). */
DP_EXPORT size_t dp_data_nsources(const dp_data *d);
DP_EXPORT const char *dp_data_source(const dp_data *d, size_t i);
/* 1 when path (its links followed) is one of d's files (d may be NULL):
 * an output that would replace an input. */
DP_EXPORT int dp_data_reads(const dp_data *d, const char *path);
DP_EXPORT void dp_data_close(dp_data *d);
/* With dp_data_opts.class_text: the class names the records read so far
 * gave, *names[label] (valid until dp_data_close): nclass when every
 * class was met and each always under one name, else 0 (some unmet, or a
 * class under two names: no names are better than wrong ones). */
DP_EXPORT size_t dp_data_class_names(dp_data *d, const char *const **names);

/* dp-train's and dp-eval's options of the input beside the images'
 * (dp_image_opt): name "layout" (chw or hwc) into *hwc, "decode-threads"
 * (0 to 256) into *threads.  DP_EARG with e saying "--layout 'x': ...". */
DP_EXPORT int dp_data_opt(const char *name, const char *value, int *hwc, unsigned *threads,
			  dp_err *e);
/* --decode-threads when not given: 0 for a backend whose math runs on the
 * host's CPUs (host 1), which it takes; for a GPU, whose steps are short
 * enough for the reader decoding alone to be the limit (an H200's: about
 * 290,000 samples/s of 784 bytes), this rank's share of the host's CPUs
 * less 2 (the thread queueing the work, the reader), at most 8. */
DP_EXPORT unsigned dp_data_default_threads(int host);

/* A sample given as the values a record's feature would hold (raw, in the
 * layout of o->hwc), made what dp_data makes of them: (C, H, W) with
 * o->hwc (tmp: in_size floats of scratch), every value finite, times
 * o->scale.  DP_EDATA with e saying "value J is NaN" or why. */
DP_EXPORT int dp_data_sample(const dp_data_opts *o, float *x, float *tmp, dp_err *e);

/* Parse a scale: "0.5", "1/255", "1e-3".  DP_EARG if not a finite,
 * non-zero number; DP_ELIMIT if outside float32's range (inputs are
 * float32: larger than FLT_MAX, or so small it rounds to 0); e says
 * "OPT 'S': ..." either way. */
DP_EXPORT int dp_parse_scale(const char *opt, const char *s, double *out, dp_err *e);


#ifdef __cplusplus
}
#endif
#endif
