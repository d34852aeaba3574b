/*
 * events.c - libFuzzer target: TensorBoard events (dp_events.h).
 *
 * The input is taken as an Event message (dp_event_parse) and as the head
 * of an event file (dp_events_detect); its bytes are also the values of a
 * histogram.  Checks beyond "no crash, no leak, no hang": every tag lies
 * inside the input; an event read back re-encodes (dp_event_encode of its
 * scalars as simple_value) to one that reads back the same (step, wall
 * time, tags, values); detection implies a first record holding a
 * file_version; a histogram of any floats is one non-scalar value.
 */
#include "dp_events.h"
#include "dp_record.h"
#include "fuzz.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int same_double(double a, double b)
{
	return memcmp(&a, &b, sizeof a) == 0 || (isnan(a) && isnan(b));
}

static void roundtrip(const dp_event *ev)
{
	dp_buf sum = DP_BUF_INIT, out = DP_BUF_INIT;
	for (size_t i = 0; i < ev->nscalars; i++) {
		const dp_event_scalar *s = &ev->scalars[i];
		if (memchr(s->tag, 0, s->tag_len) || !s->single)
			goto done; /* strlen tags, simple_value floats only */
	}
	for (size_t i = 0; i < ev->nscalars; i++) {
		char *tag = strndup(ev->scalars[i].tag, ev->scalars[i].tag_len);
		CHECK(tag, "out of memory");
		dp_summary_scalar(&sum, tag, (float)ev->scalars[i].value);
		free(tag);
	}
	CHECK(dp_event_encode(&out, ev->wall_time, ev->step, NULL, &sum) == 0, "encode failed");
	dp_event back = DP_EVENT_INIT;
	dp_err e;
	CHECK(dp_event_parse(&back, out.p, out.len, &e) == 0, "re-encoded event refused: %s", e.msg);
	CHECK(back.step == ev->step, "step %lld, not %lld", (long long)back.step, (long long)ev->step);
	CHECK(same_double(back.wall_time, ev->wall_time), "wall time changed");
	CHECK(back.nscalars == ev->nscalars, "%zu scalars, not %zu", back.nscalars, ev->nscalars);
	for (size_t i = 0; i < ev->nscalars; i++) {
		const dp_event_scalar *a = &ev->scalars[i], *b = &back.scalars[i];
		CHECK(a->tag_len == b->tag_len && memcmp(a->tag, b->tag, a->tag_len) == 0, "tag %zu", i);
		CHECK(same_double(a->value, b->value), "value %zu", i);
	}
	dp_event_free(&back);
done:
	dp_buf_free(&sum);
	dp_buf_free(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	dp_event ev = DP_EVENT_INIT;
	dp_err e;
	if (dp_event_parse(&ev, data, size, &e) == 0) {
		for (size_t i = 0; i < ev.nscalars; i++) {
			const uint8_t *t = (const uint8_t *)ev.scalars[i].tag;
			CHECK(t >= data && t + ev.scalars[i].tag_len <= data + size, "tag outside the input");
		}
		if (ev.file_version)
			CHECK((const uint8_t *)ev.file_version >= data, "file_version outside the input");
		roundtrip(&ev);
	}
	if (dp_events_detect(data, size)) {
		uint64_t n;
		memcpy(&n, data, 8);
		CHECK(dp_event_parse(&ev, data + DP_TFR_HEADER, (size_t)n, &e) == 0 && ev.file_version &&
			      ev.file_version_len >= 12,
		      "detected, but the first record has no file_version");
	}
	dp_event_free(&ev);

	/* the bytes as floats: a histogram, one value that is not a scalar */
	dp_buf sum = DP_BUF_INIT, out = DP_BUF_INIT;
	size_t nf = size / 4;
	float *x = malloc(nf * sizeof *x + 1);
	CHECK(x, "out of memory");
	memcpy(x, data, nf * sizeof *x);
	CHECK(dp_summary_histogram(&sum, "h", x, nf, 1 + (size ? data[0] % 40 : 0)) == 0, "histogram");
	CHECK(dp_event_encode(&out, 1.5, 7, NULL, &sum) == 0, "encode");
	dp_event h = DP_EVENT_INIT;
	CHECK(dp_event_parse(&h, out.p, out.len, &e) == 0, "histogram event refused: %s", e.msg);
	CHECK(h.nscalars == 0 && h.nother == 1 && h.step == 7, "histogram read as %zu scalars, %zu other",
	      h.nscalars, h.nother);
	dp_event_free(&h);
	free(x);
	dp_buf_free(&sum);
	dp_buf_free(&out);
	return 0;
}
