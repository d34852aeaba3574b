/*
 * half.c - 16-bit floats: IEEE binary16 and bfloat16 to and from float32
 * (dp.h), by bit manipulation, so that every compiler and machine rounds
 * alike (no _Float16, no F16C): rounding to nearest even, as PyTorch's
 * and numpy's casts do (checked value for value in tests/unit/half.c).
 *
 * The binary16 conversions follow Fabian Giesen's public-domain
 * float_to_half_fast3_rtne and half_to_float: subnormal halves go through
 * one float addition (exact, or rounded to nearest by the FPU, which is
 * what is wanted), the rest through integer arithmetic.
 */
#include "dp.h"

#include <string.h>

static uint32_t bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

static float from_bits(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

static uint16_t to_f16(float v)
{
	const uint32_t inf32 = 255u << 23, max16 = (127u + 16) << 23;
	const uint32_t magic = ((127u - 15) + (23 - 10) + 1) << 23;
	uint32_t f = bits(v), sign = f & 0x80000000u;
	uint16_t o;
	f ^= sign;
	if (f >= max16) {
		o = f > inf32 ? 0x7e00 : 0x7c00; /* NaN stays NaN; too large: infinity */
	} else if (f < (113u << 23)) {
		/* a subnormal half (or zero): the addition rounds the mantissa */
		f = bits(from_bits(f) + from_bits(magic));
		o = (uint16_t)(f - magic);
	} else {
		uint32_t odd = (f >> 13) & 1;
		f += ((uint32_t)(15 - 127) << 23) + 0xfff; /* rebias, round half up... */
		f += odd;                                  /* ...to even */
		o = (uint16_t)(f >> 13);
	}
	return (uint16_t)(o | (sign >> 16));
}

static float from_f16(uint16_t h)
{
	const uint32_t exp_mask = 0x7c00u << 13;
	uint32_t o = (uint32_t)(h & 0x7fff) << 13, exp = o & exp_mask;
	o += (127u - 15) << 23;
	if (exp == exp_mask) {
		o += (128u - 16) << 23; /* infinity, NaN */
	} else if (exp == 0) {
		o += 1u << 23; /* a subnormal: renormalised by one subtraction */
		o = bits(from_bits(o) - from_bits(113u << 23));
	}
	return from_bits(o | (uint32_t)(h & 0x8000) << 16);
}

void dp_f32_to_f16(uint16_t *dst, const float *src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = to_f16(src[i]);
}

void dp_f16_to_f32(float *dst, const uint16_t *src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = from_f16(src[i]);
}

void dp_f32_to_bf16(uint16_t *dst, const float *src, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t f = bits(src[i]);
		if ((f & 0x7fffffffu) > 0x7f800000u)
			dst[i] = (uint16_t)((f >> 16) | 0x40); /* a quiet NaN */
		else
			dst[i] = (uint16_t)((f + 0x7fffu + ((f >> 16) & 1)) >> 16);
	}
}

void dp_bf16_to_f32(float *dst, const uint16_t *src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = from_bits((uint32_t)src[i] << 16);
}
