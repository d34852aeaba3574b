/*
 * pth.c - libFuzzer target: PyTorch's files (torch.save's zip and legacy
 * formats) from outside, as dp-ckpt, dp-train --init and dp-eval read them
 * (dp_st_open_mem: the zip reader, the legacy framing, the restricted
 * unpickler, the copy of each tensor out of its storage).
 *
 * When a file is accepted, every tensor must have the byte count of its
 * dtype and shape and every byte must be readable; then the state_dict is
 * written back as a .pth (dp_ckpt_export_pth, into a memory file) and read
 * again: the same names, dtypes, shapes and bytes.  Beyond those checks: no
 * crash, leak, hang or unbounded allocation.
 */
#define _GNU_SOURCE
#include "dp_ckpt.h"
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int memfd = -1;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	dp_err e;
	dp_st *s = dp_st_open_mem(data, size, "fuzz.pth", &e);
	if (!s) {
		CHECK(e.msg[0], "a refusal without a message");
		return 0;
	}
	unsigned sum = 0;
	for (int i = 0; i < dp_st_count(s); i++) {
		const dp_st_tensor *t = dp_st_at(s, i);
		size_t n = dp_dtype_size(t->dtype);
		CHECK(n > 0 && t->ndim >= 0 && t->ndim <= DP_ST_MAXDIM, "tensor %s: dtype/ndim", t->name);
		for (int d = 0; d < t->ndim; d++)
			n *= (size_t)t->shape[d];
		CHECK(n == t->nbytes, "tensor %s: %zu bytes for its shape, %zu held", t->name, n, t->nbytes);
		for (size_t j = 0; j < t->nbytes; j++)
			sum += ((const uint8_t *)t->data)[j];
	}
	if (!strcmp(dp_st_format(s), "pth")) { /* back out as a .pth, and in again */
		char path[64];
		if (memfd < 0 && (memfd = memfd_create("fuzz-pth", 0)) < 0)
			abort();
		snprintf(path, sizeof path, "/proc/self/fd/%d", memfd);
		if (ftruncate(memfd, 0) < 0 || lseek(memfd, 0, SEEK_SET) < 0)
			abort();
		int wrote = dp_ckpt_export_pth(s, path, &e);
		int expect = 1;
		for (int i = 0; i < dp_st_count(s); i++) {
			int dt = dp_st_at(s, i)->dtype;
			expect &= dt != DP_DT_U16 && dt != DP_DT_U32 && dt != DP_DT_U64;
		}
		CHECK((wrote == 0) == expect, "export: %s", wrote ? e.msg : "accepted a dtype torch lacks");
		dp_st *b = wrote == 0 ? dp_st_open(path, &e) : NULL;
		CHECK(wrote || b, "the export does not read back: %s", e.msg);
		for (int i = 0; b && i < dp_st_count(s); i++) {
			const dp_st_tensor *x = dp_st_at(s, i), *y = dp_st_find(b, x->name);
			CHECK(y && y->dtype == x->dtype && y->ndim == x->ndim && y->nbytes == x->nbytes &&
				      !memcmp(y->shape, x->shape, sizeof x->shape[0] * (size_t)x->ndim) &&
				      !memcmp(y->data, x->data, x->nbytes),
			      "tensor %s differs after export", x->name);
		}
		CHECK(!b || dp_st_count(b) == dp_st_count(s), "export: another number of tensors");
		dp_st_close(b);
	}
	dp_st_close(s);
	return (int)(sum & 0);
}
