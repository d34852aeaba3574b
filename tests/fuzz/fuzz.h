/*
 * fuzz.h - what every libFuzzer target here shares.
 *
 * CHECK(cond, fmt, ...) aborts with a message when a property does not
 * hold, so libFuzzer keeps the input as a finding (tests/fuzz/run).
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

#endif
