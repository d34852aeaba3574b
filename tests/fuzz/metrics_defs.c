/*
 * metrics_defs.c - libFuzzer target: SageMaker metric_definitions JSON and
 * -m regexes from outside.
 *
 * The first byte picks: definitions JSON (even) or "NAME=REGEX" as -m gives
 * it (odd).  When the definitions are accepted, a few log lines are
 * matched with them.  Checks: an accepted set has at least one metric, each
 * with a valid name; a rejected one has a message; no crash, leak or hang
 * (PCRE2's match limits bound a pathological regex on the test lines).
 */
#define _GNU_SOURCE
#include "dp_metrics.h"
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const lines[] = {
	"epoch=1 step=100 loss=0.4123 accuracy=0.8512 lr=0.001 samples_per_sec=123456",
	"[1,3]<stdout>:epoch=1 step=469 val_loss=0.35 val_accuracy=0.87",
	"Epoch 1 loss: 0.75 acc: 0.5 \xff\xfe \xc3\xa9",
	"{\"epoch\": 2, \"step\": 5, \"loss\": 0.25}",
	"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	dp_matcher *m = dp_matcher_new();
	dp_err e;
	e.msg[0] = 0;
	int rc;
	if (data[0] & 1) {
		char *arg = strndup((const char *)data + 1, size - 1);
		char *eq = strchr(arg, '=');
		if (eq) {
			*eq = 0;
			rc = dp_matcher_add(m, arg, eq + 1, "-m x", &e);
		} else {
			rc = DP_EARG;
			e.msg[0] = 'x';
		}
		free(arg);
	} else {
		rc = dp_matcher_add_definitions(m, (const char *)data + 1, size - 1, "defs", &e);
	}
	if (rc < 0) {
		CHECK(e.msg[0], "rejected without a message");
	} else {
		CHECK(dp_matcher_nmetrics(m) >= 1, "accepted without metrics");
		for (int i = 0; i < dp_matcher_nmetrics(m); i++)
			CHECK(dp_matcher_name(m, i)[0], "empty name");
		for (size_t i = 0; i < sizeof lines / sizeof *lines; i++) {
			dp_match mt;
			int n = dp_matcher_match(m, lines[i], strlen(lines[i]), &mt);
			for (int k = 0; k < n; k++)
				CHECK(dp_number_valid(mt.samples[k].text, mt.samples[k].len),
				      "a sample that is not a number");
		}
	}
	dp_matcher_free(m);
	return 0;
}
