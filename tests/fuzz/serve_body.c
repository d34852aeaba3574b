/*
 * serve_body.c - libFuzzer target: request bodies as dp-serve takes them
 * from the network (dp_req_new, lib/train/serve/body.c): JSON, NumPy .npy
 * (its header parsed by hand there), TFRecord of Examples and images.
 *
 * The first byte picks the media type (0 guessed from the bytes, 1 JSON,
 * 2 npy, 3 TFRecord, 4 JPEG, 5 PNG), the rest is the body, for a model of
 * 16 raw uint8 values (a checkpoint written once by this target).  A body
 * taken must hold 1 to max samples; a refused one says why; when taken it
 * is computed, and its answer is JSON that names every sample.  Beyond
 * those checks: no crash, leak or hang.
 */
#define _GNU_SOURCE
#include "dp_ckpt.h"
#include "dp_nn.h"
#include "dp_serve.h"
#include "fuzz.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { MAX = 16 };

static dp_serve *S;

/* flatten,dense:4 over 1x4x4 raw uint8 records, saved once */
static void open_server(void)
{
	dp_err e;
	dp_shape in;
	dp_bectx *ctx;
	if (dp_shape_parse("1x4x4", &in, &e) < 0 || dp_backend_cpu.open(&ctx, NULL, NULL, 0, &e) < 0)
		abort();
	dp_model *m = dp_model_new("flatten,dense:4", &in, DP_LOSS_XENT, &e);
	if (!m || dp_model_bind(m, &dp_backend_cpu, ctx, 1, &e) < 0)
		abort();
	dp_model_init(m, 1);
	dp_run_conf c;
	dp_run_conf_init(&c);
	c.decode = DP_DECODE_UINT8;
	char **meta = dp_run_conf_meta(&c, NULL, &e);
	char path[] = "/tmp/fuzz-serve-XXXXXX";
	int fd = mkstemp(path);
	if (!meta || fd < 0)
		abort();
	close(fd);
	if (dp_ckpt_save(path, m, NULL, NULL, (const char *const *)meta, &e) < 0)
		abort();
	free(meta);
	dp_model_free(m);
	dp_backend_cpu.close(ctx);
	dp_serve_conf sc = {.model = path, .workers = 1, .max_batch = 8, .max_delay = 0,
			    .max_queue = MAX};
	S = dp_serve_open(&sc, &e);
	unlink(path);
	CHECK(S, "dp_serve_open: %s", e.msg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const types[] = {NULL, "application/json", "application/x-npy",
					    "application/x-tfrecord", "image/jpeg", "image/png"};
	if (!S)
		open_server();
	if (size < 1)
		return 0;
	dp_err e;
	const char *type = types[data[0] % 6];
	dp_req *r = dp_req_new(S, type, data + 1, size - 1, MAX, &e);
	if (!r) {
		CHECK(e.msg[0], "a body refused without a message");
		return 0;
	}
	size_t n = dp_req_samples(r);
	CHECK(n >= 1 && n <= MAX, "a body taken as %zu samples (at most %d)", n, MAX);
	dp_buf b = DP_BUF_INIT;
	if (dp_req_run(S, r, &b, &e) == DP_OK) {
		CHECK(b.p && b.p[0] == '{', "an answer that is not a JSON object");
		size_t k = 0;
		for (const char *p = b.p; (p = strstr(p, "\"top_k\"")); p++)
			k++;
		CHECK(k == n, "%zu samples, %zu predictions", n, k);
	}
	dp_buf_free(&b);
	dp_req_free(r);
	return 0;
}
