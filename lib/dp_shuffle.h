/*
 * dp_shuffle.h - seeded shuffles of streams of items (byte strings, such
 * as whole TFRecord frames): a full shuffle of streams larger than memory,
 * and a windowed shuffle like tf.data's shuffle(buffer_size).
 *
 * Full shuffle.  The i-th item added (from 0) gets as key the i-th draw of
 * dp_rng seeded (seed, DP_SHUFFLE_STREAM), and items come out in increasing
 * key order.  The draws are distinct (splitmix64 is a bijection of its
 * state), so the output order depends on the seed and the number of items
 * only: never on the memory limit, the temporary directory or the machine.
 * Items are held in memory up to `memory` bytes (their bytes plus 24 per
 * item); past that, everything is spilled to 256 bucket files chosen by the
 * top byte of the key.  Reading sorts one bucket at a time in memory; a
 * bucket still larger than `memory` is split again by its next key bits.
 * Each item is written to disk once per level (once for inputs up to about
 * 256 x memory).  Spill files are unlinked as soon as they are created, so
 * none is left behind however the process ends.
 *
 * Window shuffle.  The first `size` items fill a window; then each new item
 * takes the place of one drawn at random from the window, which leaves; at
 * the end the rest leave in random order.  Memory: `size` items.
 */
#ifndef DP_SHUFFLE_H
#define DP_SHUFFLE_H

#include "dp.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DP_SHUFFLE_STREAM 0x73687566666c6501ull /* "shuffle" */
#define DP_WINDOW_STREAM 0x77696e646f770001ull  /* "window" */

typedef struct dp_shuffle dp_shuffle;

typedef struct dp_shuffle_stats {
	uint64_t items;         /* items added */
	uint64_t bytes;         /* their bytes */
	uint64_t spilled_bytes; /* bytes written to spill files, all levels */
	int levels;             /* 0: all in memory; 1: one spill; more: buckets split again */
} dp_shuffle_stats;

/* memory: bytes to hold in memory (at least 16 KiB is used); tmpdir: where
 * spill files go (NULL: $TMPDIR, else /tmp). */
DP_EXPORT dp_shuffle *dp_shuffle_new(uint64_t seed, uint64_t memory, const char *tmpdir, dp_err *e);
/* Add an item (copied). */
DP_EXPORT int dp_shuffle_add(dp_shuffle *s, const void *p, size_t len, dp_err *e);
/* After the last add: the items in shuffled order.  Returns 1 with *p,
 * *len (valid until the next call), 0 at the end, or a negative status. */
DP_EXPORT int dp_shuffle_next(dp_shuffle *s, const uint8_t **p, size_t *len, dp_err *e);
DP_EXPORT void dp_shuffle_stats_get(const dp_shuffle *s, dp_shuffle_stats *st);
DP_EXPORT void dp_shuffle_free(dp_shuffle *s);


typedef struct dp_window dp_window;

/* size >= 1 items. */
DP_EXPORT dp_window *dp_window_new(uint64_t seed, size_t size, dp_err *e);
/* Add an item (copied).  Once the window is full an item leaves: returns 1
 * with *out, *outlen (valid until the next call); 0 while filling; a
 * negative status when out of memory. */
DP_EXPORT int dp_window_push(dp_window *w, const void *p, size_t len, const uint8_t **out, size_t *outlen,
		   dp_err *e);
/* After the last push: the items left, one per call (1), then 0. */
DP_EXPORT int dp_window_drain(dp_window *w, const uint8_t **out, size_t *outlen);
DP_EXPORT void dp_window_free(dp_window *w);

#ifdef __cplusplus
}
#endif
#endif
