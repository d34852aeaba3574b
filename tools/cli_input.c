/*
 * cli_input.c - the input pipeline's options of dp-train and dp-eval: see
 * cli_input.h.
 */
#define _GNU_SOURCE
#include "cli_input.h"
#include "cli.h"
#include "dp_data.h"

#include <stdio.h>
#include <string.h>

void cli_input_init(struct cli_input *in)
{
	memset(in, 0, sizeof *in);
	in->decode = -1;
	in->hwc = -1;
	dp_image_tf_init(&in->img);
}

int cli_input_option(struct cli_input *in, int c, const char *name, const char *arg)
{
	dp_err e;
	switch (c) {
	case CLI_IN_FEATURE: in->feature = arg; break;
	case CLI_IN_LABEL: in->label = arg; break;
	case CLI_IN_DECODE:
		in->decode = dp_decode_parse(arg);
		if (in->decode < 0) {
			cli_job_says();
			cli_bad_value("--decode-raw", arg, "uint8, float32, float64, none (or image)");
		}
		break;
	case CLI_IN_SCALE:
		if (dp_parse_scale("--scale", arg, &in->scale, &e) < 0)
			cli_job_usage_error("%s", e.msg);
		in->scale_text = arg;
		break;
	case CLI_IN_IMAGE: {
		if (dp_image_opt(&in->img, name, arg, &e) < 0)
			cli_job_usage_error("%s", e.msg);
		size_t old = in->img_text ? strlen(in->img_text) : 0;
		in->img_text = cli_realloc(in->img_text, old + strlen(name) + strlen(arg) + 3);
		sprintf(in->img_text + old, "%s%s=%s", old ? ";" : "", name, arg);
		break;
	}
	case CLI_IN_DATA:
		if (dp_data_opt(name, arg, &in->hwc, &in->decode_threads, &e) < 0)
			cli_job_usage_error("%s", e.msg);
		in->decode_given |= !strcmp(name, "decode-threads");
		break;
	case CLI_IN_SKIP_CORRUPT: in->skip_corrupt = 1; break;
	case CLI_IN_MAX_RECORD: in->max_record = cli_size("--max-record", arg, 1, UINT64_MAX); break;
	case CLI_IN_MAX_SKIPPED:
		if (dp_gate_max_skipped(arg, &in->skip_gate, &e) < 0)
			cli_job_usage_error("--max-skipped %s", e.msg);
		in->max_skipped = arg;
		break;
	default: return 0;
	}
	return 1;
}

void cli_input_skipped(void *ctx, const dp_err *e)
{
	(void)ctx;
	cli_warn("%s; skipped", e->msg);
}
