/*
 * cli_input.h - the options of the input pipeline that dp-train and
 * dp-eval share (INPUT in dp-train(1), dp-eval(1)): --feature, --label,
 * --decode-raw (--decode), --scale, the images' --mean, --std, --resize and
 * --max-pixels, --layout, --decode-threads, --skip-corrupt, --max-record
 * and --max-skipped.  Their rows of a getopt_long table, their values and
 * the usage error of a bad one, written once (tools/cli_input.c, linked
 * into the programs that train, evaluate and serve):
 *
 *     static const struct option longopts[] = {
 *             CLI_INPUT_OPTIONS,
 *             {"augment", required_argument, 0, CLI_IN_IMAGE},   dp-train's own
 *             ...
 *     cli_input_init(&in);
 *     while ((c = getopt_long(argc, argv, ":q", longopts, &li)) != -1)
 *             switch (c) {
 *             ...
 *             default:
 *                     if (!cli_input_option(&in, c, longopts[li].name, optarg))
 *                             cli_bad_option(c, argv);
 *             }
 */
#ifndef DP_CLI_INPUT_H
#define DP_CLI_INPUT_H

#include "dp.h"
#include "dp_eval.h"
#include "dp_image.h"

#include <getopt.h>
#include <stdint.h>

/* Option values of getopt_long, above any a tool numbers itself. */
enum {
	CLI_IN_FEATURE = 0x1000, CLI_IN_LABEL, CLI_IN_DECODE, CLI_IN_SCALE, CLI_IN_IMAGE,
	CLI_IN_DATA, CLI_IN_SKIP_CORRUPT, CLI_IN_MAX_RECORD, CLI_IN_MAX_SKIPPED
};

#define CLI_INPUT_OPTIONS                                                \
	{"feature", required_argument, 0, CLI_IN_FEATURE},               \
	{"label", required_argument, 0, CLI_IN_LABEL},                   \
	{"decode-raw", required_argument, 0, CLI_IN_DECODE},             \
	{"decode", required_argument, 0, CLI_IN_DECODE},                 \
	{"scale", required_argument, 0, CLI_IN_SCALE},                   \
	{"mean", required_argument, 0, CLI_IN_IMAGE},                    \
	{"std", required_argument, 0, CLI_IN_IMAGE},                     \
	{"resize", required_argument, 0, CLI_IN_IMAGE},                  \
	{"max-pixels", required_argument, 0, CLI_IN_IMAGE},              \
	{"layout", required_argument, 0, CLI_IN_DATA},                   \
	{"decode-threads", required_argument, 0, CLI_IN_DATA},           \
	{"skip-corrupt", no_argument, 0, CLI_IN_SKIP_CORRUPT},           \
	{"max-record", required_argument, 0, CLI_IN_MAX_RECORD},         \
	{"max-skipped", required_argument, 0, CLI_IN_MAX_SKIPPED}

/* The values given; what was not given says so (NULL, -1). */
struct cli_input {
	const char *feature, *label;
	int decode;              /* DP_DECODE_*; -1: not given */
	double scale;
	const char *scale_text;  /* --scale as given ("1/255"); NULL: not given */
	dp_image_tf img;         /* the image options given, over dp_image_tf_init's */
	char *img_text;          /* the same as "name=value;..." (dp_image_spec_parse
				    reads it, over another transform); NULL: none */
	int hwc;                 /* --layout hwc: 1, chw: 0; -1: not given */
	unsigned decode_threads; /* 0: the default */
	int decode_given;        /* --decode-threads given (0 included) */
	int skip_corrupt;
	uint64_t max_record;     /* 0: DP_MAX_RECORD_DEFAULT */
	const char *max_skipped; /* NULL: not given (DP_MAX_SKIPPED_DEFAULT) */
	dp_gate skip_gate;       /* max_skipped as a gate */
};

/* Nothing given. */
void cli_input_init(struct cli_input *in);
/* c, getopt_long's value for the long option name: 1 when it is one of
 * CLI_INPUT_OPTIONS, its value taken into in; 0 when it is not.  A bad
 * value is a usage error of the whole job (cli_job_usage_error). */
int cli_input_option(struct cli_input *in, int c, const char *name, const char *arg);
/* A record or image passed over with --skip-corrupt, said ("prog: MSG;
 * skipped"): the on_skip callback of the readers (any thread). */
void cli_input_skipped(void *ctx, const dp_err *e);

#endif
