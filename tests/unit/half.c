/* half.c - dp_f32_to_f16, dp_f16_to_f32, dp_f32_to_bf16, dp_bf16_to_f32
 * (lib/common/half.c) value for value against numpy's float16 and
 * PyTorch's bfloat16 casts (tests/half_ref.py): every float16, the ties
 * between them, fp16's range edges, bfloat16 ties and 2^20 random bit
 * patterns.  NaN against NaN compares as "a NaN". */
#define _GNU_SOURCE
#include "dp.h"
#include "tap.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int read_all(FILE *f, void *p, size_t bytes) { return fread(p, 1, bytes, f) == bytes; }

/* the same 16-bit value, or both NaN (the NaN's payload is free) */
static int same16(uint16_t a, uint16_t b, int bf)
{
	uint16_t exp = bf ? 0x7f80 : 0x7c00, man = bf ? 0x7f : 0x3ff;
	int na = (a & exp) == exp && (a & man), nb = (b & exp) == exp && (b & man);
	return na || nb ? na && nb : a == b;
}

/* How many of got[0..n) differ from want (same16), the first at *first. */
static uint32_t differ16(const uint16_t *got, const uint16_t *want, uint32_t n, int bf, uint32_t *first)
{
	uint32_t bad = 0;
	for (uint32_t i = 0; i < n; i++)
		if (!same16(got[i], want[i], bf) && !bad++)
			*first = i;
	return bad;
}

int main(void)
{
	const char *src = getenv("DP_SRC");
	char cmd[4096];
	snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/half_ref.py", src ? src : ".");
	FILE *p = popen(cmd, "r");
	uint32_t n = 0;
	if (!p || !read_all(p, &n, 4) || n == 0) {
		printf("1..0 # SKIP no reference (python3 with numpy and torch: scripts/deps --test)\n");
		return 0;
	}
	float *x = malloc(n * sizeof *x), *back = malloc(65536 * sizeof *back), *ref = malloc(65536 * sizeof *ref);
	uint16_t *f16 = malloc(n * 2), *bf16 = malloc(n * 2), *got = malloc(n * 2);
	int okread = read_all(p, x, n * 4ul) && read_all(p, f16, n * 2ul) && read_all(p, bf16, n * 2ul) &&
		     read_all(p, ref, 65536 * 4ul);
	ok(pclose(p) == 0 && okread, "tests/half_ref.py: %u values", n);

	dp_f32_to_f16(got, x, n);
	uint32_t first = 0, bad = differ16(got, f16, n, 0, &first);
	if (!ok(bad == 0, "float32 -> float16: all %u as numpy rounds them", n))
		printf("#   %u differ; first %.9g: 0x%04x, numpy 0x%04x\n", bad, x[first], got[first], f16[first]);

	dp_f32_to_bf16(got, x, n);
	bad = differ16(got, bf16, n, 1, &first);
	if (!ok(bad == 0, "float32 -> bfloat16: all %u as PyTorch rounds them", n))
		printf("#   %u differ; first %.9g: 0x%04x, torch 0x%04x\n", bad, x[first], got[first], bf16[first]);

	uint16_t all[65536];
	for (uint32_t i = 0; i < 65536; i++)
		all[i] = (uint16_t)i;
	dp_f16_to_f32(back, all, 65536);
	bad = 0;
	for (uint32_t i = 0; i < 65536; i++)
		if (!(back[i] == ref[i] || (isnan(back[i]) && isnan(ref[i]))) ||
		    signbit(back[i]) != signbit(ref[i]))
			if (!bad++)
				first = i;
	if (!ok(bad == 0, "float16 -> float32: all 65536 exactly"))
		printf("#   %u differ; first 0x%04x: %.9g, numpy %.9g\n", bad, first, back[first], ref[first]);
	dp_f32_to_f16(got, back, 65536);
	ok(differ16(got, all, 65536, 0, &first) == 0, "float16 -> float32 -> float16: every value back as it was");

	dp_bf16_to_f32(back, all, 65536);
	dp_f32_to_bf16(got, back, 65536);
	ok(differ16(got, all, 65536, 1, &first) == 0, "bfloat16 -> float32 -> bfloat16: every value back as it was");
	free(x), free(back), free(ref), free(f16), free(bf16), free(got);
	return done_testing();
}
