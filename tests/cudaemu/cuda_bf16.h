/* tests/cudaemu/cuda_bf16.h - bfloat16 for the CPU emulation (see
 * cuda_runtime.h): round to nearest even, as __float2bfloat16. */
#ifndef CUDAEMU_BF16_H
#define CUDAEMU_BF16_H

#include <math.h>
#include <stdint.h>
#include <string.h>

struct __nv_bfloat16 {
	uint16_t x;
};

static inline __nv_bfloat16 __float2bfloat16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	__nv_bfloat16 b;
	if (isnan(f)) {
		b.x = 0x7fc0;
		return b;
	}
	u += 0x7fff + ((u >> 16) & 1);
	b.x = (uint16_t)(u >> 16);
	return b;
}

static inline float __bfloat162float(__nv_bfloat16 b)
{
	uint32_t u = (uint32_t)b.x << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

#endif
