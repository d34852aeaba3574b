/*
 * fuzz.h - what every libFuzzer target here shares.
 *
 * CHECK(cond, fmt, ...) aborts with a message when a property does not
 * hold, so libFuzzer keeps the input as a finding (tests/fuzz/run).
 * Included after dp_nn.h, it also gives fuzz_model_bytes().
 */
#ifndef FUZZ_H
#define FUZZ_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(c, ...)                                                                              \
	do {                                                                                       \
		if (!(c)) {                                                                        \
			fprintf(stderr, "check failed: " __VA_ARGS__);                             \
			fprintf(stderr, "\n");                                                     \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

#ifdef DP_NN_H
/* Bytes model m would take bound for a batch of 2, roughly: parameters
 * (with gradients), activations and the gradient buffers, so that a target
 * binds only models of bounded memory. */
static inline size_t fuzz_model_bytes(const dp_model *m)
{
	size_t b = 4 * (2 * dp_model_nparams(m) + dp_model_nbuffers(m) + 2 * dp_model_in_size(m));
	for (int i = 0; i < dp_model_nlayers(m); i++) {
		dp_layer_info li;
		dp_model_layer(m, i, &li);
		b += 4 * 8 * dp_shape_size(&li.out);
	}
	return b;
}
#endif

#endif
