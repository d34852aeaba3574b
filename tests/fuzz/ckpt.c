/*
 * ckpt.c - libFuzzer target: checkpoint files (safetensors) from outside,
 * as dp-train --resume/--init and dp-eval read them.
 *
 * The input is a whole file.  When the reader accepts it, every tensor must
 * lie inside the file, have the byte count of its dtype and shape, and the
 * tensors must tile the data area in offset order with no gap; every
 * metadata value is read.  When its metadata describe a model small enough
 * (bounded memory), the model is built, bound to the CPU backend, its
 * weights loaded and, if they load, a forward pass runs on zeros and must
 * give probabilities in [0, 1] (NaN only when huge weights overflow).  The
 * same bytes are also read as a stream (a pipe, as `dp-eval --model -`
 * reads stdin: only as far as the header describes), which must accept
 * them exactly when the reader of a whole file does, with the same tensors.
 * Beyond those checks: no crash, leak or hang.
 */
#define _GNU_SOURCE
#include "dp_ckpt.h"
#include "fuzz.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static dp_bectx *ctx;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* data read as a stream: through a pipe holding all of it (the input is
 * small enough for a pipe's buffer), opened by name as a FIFO would be;
 * NULL when the pipe cannot hold it (nothing checked then) */
static dp_st *open_stream(const uint8_t *data, size_t size, int *tried, dp_err *e)
{
	int p[2];
	*tried = 0;
	if (pipe(p) < 0)
		return NULL;
	dp_st *s = NULL;
	if (fcntl(p[1], F_SETPIPE_SZ, 1 << 20) >= (int)size + 1 &&
	    write(p[1], data, size) == (ssize_t)size) {
		char name[64];
		snprintf(name, sizeof name, "/dev/fd/%d", p[0]);
		close(p[1]);
		p[1] = -1;
		*tried = 1;
		s = dp_st_open(name, e);
	}
	if (p[1] >= 0)
		close(p[1]);
	close(p[0]);
	return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	dp_err e;
	if (!ctx && dp_backend_cpu.open(&ctx, NULL, NULL, 0, &e) < 0)
		abort();
	dp_st *s = dp_st_open_mem(data, size, "fuzz.safetensors", &e);
	int tried;
	dp_err es;
	dp_st *ss = open_stream(data, size, &tried, &es);
	if (tried) {
		CHECK(!ss == !s, "the stream reader %s what the file reader %s (%s)",
		      ss ? "accepts" : "refuses", s ? "accepts" : "refuses", ss ? e.msg : es.msg);
		if (ss && s) {
			CHECK(dp_st_count(ss) == dp_st_count(s), "the stream has %d tensors, the file %d",
			      dp_st_count(ss), dp_st_count(s));
			for (int i = 0; i < dp_st_count(s); i++)
				CHECK(dp_st_at(ss, i)->nbytes == dp_st_at(s, i)->nbytes &&
				      !memcmp(dp_st_at(ss, i)->data, dp_st_at(s, i)->data, dp_st_at(s, i)->nbytes),
				      "tensor %d differs read as a stream", i);
		}
		if (!ss)
			CHECK(es.msg[0], "a stream refused without a message");
	}
	dp_st_close(ss);
	if (!s) {
		CHECK(e.msg[0], "a refusal without a message");
		return 0;
	}
	/* the tensor table */
	uint64_t hl;
	CHECK(size >= 8, "accepted %zu bytes", size);
	memcpy(&hl, data, 8);
	size_t at = 0, dlen = size - 8 - (size_t)hl;
	unsigned sum = 0;
	for (int i = 0; i < dp_st_count(s); i++) {
		const dp_st_tensor *t = dp_st_at(s, i);
		size_t n = dp_dtype_size(t->dtype);
		CHECK(n > 0 && t->ndim >= 0 && t->ndim <= DP_ST_MAXDIM, "tensor %s: dtype/ndim", t->name);
		for (int d = 0; d < t->ndim; d++) {
			CHECK(t->shape[d] >= 0, "tensor %s: negative dimension", t->name);
			n *= (size_t)t->shape[d];
		}
		CHECK(n == t->nbytes, "tensor %s: %zu bytes for its shape, %zu held", t->name, n,
		      t->nbytes);
		CHECK(dp_st_find(s, t->name) != NULL, "tensor %s not found by name", t->name);
		for (size_t j = 0; j < t->nbytes; j++) /* every byte readable */
			sum += ((const uint8_t *)t->data)[j];
		at += t->nbytes;
	}
	CHECK(at == dlen, "tensors cover %zu of %zu data bytes", at, dlen);
	for (int i = 0; i < dp_st_meta_count(s); i++) {
		const char *k, *v;
		dp_st_meta_at(s, i, &k, &v);
		sum += (unsigned)strlen(k) + (unsigned)strlen(v);
	}
	/* the model it describes */
	dp_model *m = dp_ckpt_model(s, &e);
	if (m && fuzz_model_bytes(m) < (16u << 20) && dp_model_bind(m, &dp_backend_cpu, ctx, 2, &e) == 0 &&
	    dp_ckpt_load_weights(s, m, &e) == 0) {
		size_t in = dp_model_in_size(m), out = dp_model_out_size(m);
		float *x = calloc(2 * in, sizeof *x), *y = calloc(2 * out, sizeof *y);
		if (x && y && dp_model_predict(m, x, 2, y, &e) == 0 &&
		    dp_model_loss_kind(m) == DP_LOSS_XENT)
			for (size_t i = 0; i < 2 * out; i++)
				CHECK((y[i] >= 0 && y[i] <= 1) || isnan(y[i]),
				      "probability %g out of range", y[i]);
		free(x);
		free(y);
		dp_train_state ts;
		dp_ckpt_train_state(s, &ts, &e);
	}
	dp_model_free(m);
	dp_st_close(s);
	return (int)(sum & 0);
}
