/*
 * dp_encode.h - tf.train.Example to and from other formats: JSON lines in
 * two forms, CSV and IDX (MNIST) files.  The formats of tfr-cat -j and
 * --encode; tfrecord(5) describes them.
 *
 *  - dp_example_json(): one Example as one line of JSON, in the compact
 *    form {"name":{"bytes":[base64...]},"n":{"int64":[3]},"x":{"float":[0.5]}}
 *    or in protobuf's JSON mapping, byte for byte what
 *    json_format.MessageToJson(m, indent=None) prints (ASCII only, int64
 *    values as strings, lowerCamelCase names, empty lists left out).
 *    Floats are the shortest decimal that reads back to the same float,
 *    printed as Python's repr() prints it; NaN and infinities as the
 *    strings "NaN", "Infinity", "-Infinity".
 *  - dp_exjson_parse(): one line of JSON in either form back into a
 *    serialized Example, in the order of the line's keys (what json_format
 *    parses is read too: snake_case list names, int64 and float values as
 *    strings or numbers, null for an unset field).
 *  - dp_encoder: a stream of serialized Examples from a file of JSON lines,
 *    a CSV file with a header row, or an IDX image file and its label file.
 *    Files compressed with gzip are read as they are.
 *
 * Errors are dp_err messages naming the input, the line (or item) and,
 * where a file is cut short, the byte offset: "data.csv: line 3: 3 fields,
 * the header has 2".
 */
#ifndef DP_ENCODE_H
#define DP_ENCODE_H

#include "dp.h"
#include "dp_example.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The two JSON forms; DP_JSON_BRIEF, or'ed in, writes a bytes value of
 * more than DP_JSON_BRIEF_MAX bytes as the string "<12345 bytes, JPEG>"
 * (JPEG and PNG named from their signatures) instead of its base64: for
 * people at a terminal (an encoded image is thousands of characters), not
 * for JSON to be read back. */
enum dp_json_form { DP_JSON_COMPACT = 0, DP_JSON_PROTO = 1, DP_JSON_BRIEF = 0x100 };
#define DP_JSON_BRIEF_MAX 64

/* ---- Example -> JSON ----------------------------------------------------- */

/* Append ex to b as one line of JSON in form, "\n" included.  Returns 0, or
 * b's error (DP_ENOMEM, DP_ELIMIT) with b holding part of the line. */
DP_EXPORT int dp_example_json(dp_buf *b, const dp_example *ex, int form);

/* ---- JSON -> Example ----------------------------------------------------- */

typedef struct dp_exjson dp_exjson;

/* A parser with its buffers, reused line after line.  NULL: out of memory. */
DP_EXPORT dp_exjson *dp_exjson_new(void);
/* Parse s[0..n) (one JSON object, no "\n" needed) in form into a
 * serialized Example at *rec, *len, valid until the next call.  Returns 0;
 * DP_EDATA with the reason in e ("invalid JSON at column 3: ...",
 * "feature \"x\": invalid float value"; the caller names file and line);
 * DP_ENOMEM.  The proto form's {} is the empty record (an Example without
 * its features field); the compact form's {} has an empty features field. */
DP_EXPORT int dp_exjson_parse(dp_exjson *j, const char *s, size_t n, int form, const uint8_t **rec,
			      size_t *len, dp_err *e);
DP_EXPORT void dp_exjson_free(dp_exjson *j);

/* ---- Encoders: files of another format as Examples ----------------------- */

enum dp_enc_format {
	DP_ENC_JSON = 1,       /* JSON lines, the compact form (blank lines skipped) */
	DP_ENC_JSON_PROTO = 2, /* JSON lines, protobuf's JSON mapping */
	DP_ENC_CSV = 3,        /* RFC 4180 with a header row naming the features */
	DP_ENC_IDX = 4         /* an IDX file of unsigned bytes and its labels */
};

typedef struct dp_enc_opts {
	int format;      /* enum dp_enc_format */
	int allow_empty; /* an input with no records is not an error */
	/* CSV: the field delimiter (0: ','); the separator of values in a
	 * list cell (0: ' '); the column types (NULL: all bytes):
	 * PATTERN=TYPE,... with TYPE bytes, float, int64 or skip, TYPE[] for a
	 * list cell, PATTERN a shell glob (fnmatch), the first match winning.
	 * Numbers in a cell may be split by blanks too. */
	char delim, list_sep;
	const char *types;
	/* IDX: the features of the pixels and the label (NULL: "image", "label"). */
	const char *image_name, *label_name;
} dp_enc_opts;

/* Check a CSV types spec: 0, or DP_EARG with e saying what is wrong
 * ("unknown type 'int65' for 'a' (...)"). */
DP_EXPORT int dp_csv_types_check(const char *spec, dp_err *e);

typedef struct dp_encoder dp_encoder;

/* Open path ("-": stdin, named "stdin"), and for IDX labels, the label
 * file.  Reads the CSV header or the IDX headers at once: their errors
 * come from here.  NULL on failure (DP_EIO, DP_EDATA, DP_EARG, DP_ENOMEM). */
DP_EXPORT dp_encoder *dp_encoder_open(const char *path, const char *labels, const dp_enc_opts *o,
				      dp_err *e);
/* The same on memory (not copied, not decompressed): buf is named name in
 * messages; labels (IDX) "NAME labels". */
DP_EXPORT dp_encoder *dp_encoder_open_mem(const void *buf, size_t len, const void *labels,
					  size_t labels_len, const char *name,
					  const dp_enc_opts *o, dp_err *e);
/* The next Example: 1 with *rec, *len (valid until the next call), 0 at the
 * end, or a negative status (sticky).  At the end an input without records
 * is an error unless allow_empty, and IDX files are checked for bytes past
 * their last item. */
DP_EXPORT int dp_encoder_next(dp_encoder *x, const uint8_t **rec, size_t *len, dp_err *e);
/* The name of the (image) input in messages: the path, or "stdin". */
DP_EXPORT const char *dp_encoder_name(const dp_encoder *x);
DP_EXPORT void dp_encoder_close(dp_encoder *x);

#ifdef __cplusplus
}
#endif
#endif
