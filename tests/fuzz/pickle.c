/*
 * pickle.c - libFuzzer target: the restricted unpickler alone
 * (lib/train/ckpt/pickle.c), on any bytes: the pickles of torch.save's
 * files, and whatever a hostile file puts there (cycles through the memo,
 * marks never closed, callables it may not call, tensors past their
 * storage).
 *
 * Properties: a refusal says why; an accepted pickle ends inside the input;
 * every tensor made lies inside its storage.  Beyond those: no crash, leak,
 * hang or unbounded allocation.
 */
#define _GNU_SOURCE
#include "train/ckpt/pth_impl.h"
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	dp_err e;
	pk_result r;
	if (pk_load(data, size, "fuzz.pkl", &r, &e) < 0) {
		CHECK(e.msg[0], "a refusal without a message");
		return 0;
	}
	CHECK(r.top && r.used >= 1 && r.used <= size, "accepted, ending at %zu of %zu", r.used, size);
	for (const pk_val *v = r.all; v; v = v->next) {
		if (v->kind != PK_TENSOR)
			continue;
		unsigned __int128 last = v->offset, n = 1;
		for (int d = 0; d < v->ndim; d++) {
			n *= (uint64_t)v->shape[d];
			if (v->shape[d])
				last += (unsigned __int128)(uint64_t)(v->shape[d] - 1) * (uint64_t)v->stride[d];
		}
		CHECK(v->storage && v->storage->kind == PK_STORAGE, "a tensor without a storage");
		CHECK(!n || last < v->storage->numel, "a tensor past its storage");
	}
	pk_free(&r);
	return 0;
}
