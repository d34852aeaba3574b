/*
 * image.c - libFuzzer target: image bytes (JPEG, PNG, WebP, TIFF, BMP, PNM)
 * through the image decode
 * path (dp_image.h): probe, decode to gray and RGB, and the training
 * transform (random resized crop, padding crop, flip, normalisation).
 *
 * Properties: nothing crashes or leaks; a decoded image has the size its
 * header says (or, DCT-scaled, the ceiling of it); every output value is
 * finite.  The pixel limit is kept small so that a header claiming a huge
 * image is refused before anything is allocated for it.
 */
#include "dp_image.h"
#include "fuzz.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static dp_image_dec *x;

int LLVMFuzzerTestOneInput(const uint8_t *p, size_t n)
{
	if (!x)
		x = dp_image_dec_new();
	dp_err e;
	dp_image_info in;
	int probed = dp_image_probe(p, n, &in, &e) == DP_OK;
	for (int c = 1; c <= 3; c += 2) {
		const uint8_t *px;
		uint32_t w, h;
		int den = c == 1 ? 2 : 1;
		if (dp_image_decode(x, p, n, c, den, 1 << 20, &px, &w, &h, &e) == DP_OK) {
			CHECK(probed, "decoded what the probe refused: %s", e.msg);
			uint32_t ew = in.format == DP_IMAGE_JPEG ? (in.width + den - 1) / den : in.width;
			uint32_t eh = in.format == DP_IMAGE_JPEG ? (in.height + den - 1) / den : in.height;
			CHECK(w == ew && h == eh, "decoded %ux%u, header %ux%u", w, h, in.width, in.height);
			volatile uint8_t sum = 0; /* every pixel readable */
			for (size_t i = 0; i < (size_t)w * h * c; i++)
				sum += px[i];
		}
	}
	dp_image_tf t;
	dp_image_tf_init(&t);
	t.channels = 3;
	t.height = 12;
	t.width = 10;
	t.crop = DP_CROP_RANDOM;
	t.pad = 2;
	t.flip = 1;
	t.max_pixels = 1 << 20;
	t.scale = 1.0f / 255;
	float out[3 * 12 * 10];
	if (dp_image_transform(x, p, n, &t, n, out, &e) == DP_OK)
		for (size_t i = 0; i < sizeof out / sizeof *out; i++)
			CHECK(isfinite(out[i]), "output %zu is %g", i, out[i]);
	return 0;
}
