/*
 * dp_lines.h - read text lines from files and pipes in bounded memory, and
 * follow a growing log like `tail -F`.
 *
 * The reader reads big chunks into one buffer and hands out lines as
 * pointers into it (no copy, no allocation per line).  Memory is bounded by
 * max_line + the chunk size: a line longer than max_line is skipped to its
 * newline without being held, and counted.  A last line without a newline
 * is returned as a line.
 *
 * Following (DP_LINES_FOLLOW) a regular file: at its end the reader waits
 * for more data instead of ending; when the file shrinks (truncated, as
 * logrotate's copytruncate does) it starts again from byte 0; when the name
 * comes to point to another file (renamed away and created anew) it
 * finishes the old file and opens the new one from byte 0; a file that does
 * not exist yet is waited for.  Pipes and FIFOs end when their writer
 * closes them, followed or not.
 *
 * The reader never blocks on a pipe: with nothing to read it returns
 * DP_LINES_WAIT, so that the caller can flush its output and then wait on
 * dp_lines_fd() with poll(2) (or sleep, for a followed regular file, whose
 * dp_lines_fd() is -1).
 */
#ifndef DP_LINES_H
#define DP_LINES_H

#include "dp.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dp_lines dp_lines;

#define DP_LINES_FOLLOW 1u

/* Results of dp_lines_next() besides errors (< 0). */
enum {
	DP_LINES_END = 0,  /* no more lines, ever */
	DP_LINES_LINE = 1, /* *line, *len hold a line (no newline) */
	DP_LINES_WAIT = 2  /* nothing to read now: poll dp_lines_fd() or sleep */
};

/* Events since the last dp_lines_events() call (follow mode). */
enum {
	DP_LINES_TRUNCATED = 1, /* the file shrank: reading again from byte 0 */
	DP_LINES_REPLACED = 2,  /* the name points to a new file: following it */
	DP_LINES_MISSING = 4,   /* the name is gone: waiting for it */
	DP_LINES_APPEARED = 8   /* the awaited file appeared */
};

/* Open path ("-" is stdin) for reading lines of at most max_line bytes.
 * With DP_LINES_FOLLOW, a path that does not exist yet is waited for.
 * Returns NULL with e set on failure. */
DP_EXPORT dp_lines *dp_lines_open(const char *path, unsigned flags, size_t max_line, dp_err *e);
/* The same on an open descriptor (not closed by dp_lines_close); name is
 * for messages.  A followed descriptor is followed as it grows, without
 * rotation (there is no name to look at). */
DP_EXPORT dp_lines *dp_lines_fdopen(int fd, const char *name, unsigned flags, size_t max_line, dp_err *e);

/* Give back n bytes its caller read from the descriptor before opening
 * the reader on it (to look at them): they are read first.  Only before
 * the first dp_lines_next, and n at most 64 KiB.  Returns 0 or DP_EARG. */
DP_EXPORT int dp_lines_unread(dp_lines *r, const void *p, size_t n, dp_err *e);

/* The next line: DP_LINES_LINE, DP_LINES_WAIT, DP_LINES_END, or a negative
 * status on a read error.  The line stays valid until the next call. */
DP_EXPORT int dp_lines_next(dp_lines *r, const char **line, size_t *len, dp_err *e);

/* The descriptor to poll for input after DP_LINES_WAIT, or -1 when there
 * is none to poll (a followed regular file or a file not there yet). */
DP_EXPORT int dp_lines_fd(const dp_lines *r);
/* Events since the last call, and clears them. */
DP_EXPORT unsigned dp_lines_events(dp_lines *r);
/* Lines skipped for being longer than max_line. */
DP_EXPORT uint64_t dp_lines_long(const dp_lines *r);
/* Lines returned so far, and bytes consumed from the current file. */
DP_EXPORT uint64_t dp_lines_count(const dp_lines *r);
DP_EXPORT const char *dp_lines_name(const dp_lines *r);

DP_EXPORT void dp_lines_close(dp_lines *r);


#ifdef __cplusplus
}
#endif
#endif
