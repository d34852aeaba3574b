/*
 * image_int.h - the decoder's state, shared by image.c (decoding) and
 * transform.c (resampling, augmentation).  Private to lib/image.
 */
#ifndef DP_IMAGE_INT_H
#define DP_IMAGE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "dp_image.h"

/* The taps of one resampling axis: output i reads the inputs b[2i] ..
 * b[2i] + b[2i+1] - 1 with the weights k[i * ks ...].  One allocation of
 * cap bytes at k: the weights, then b. */
typedef struct img_taps {
	float *k;
	int *b;
	int ks;
	size_t cap;
} img_taps;

struct dp_image_dec {
	uint8_t *px;           /* the decoded image (h, w, c) */
	size_t pxcap;
	float *tmp;            /* resampling: the horizontal pass */
	size_t tmpcap;
	float *f1, *f2;        /* the resampled image (before a padding crop); one
				  row of (r, g, b, 0) pixels (resample3) */
	size_t f1cap, f2cap;
	img_taps tx, ty;       /* per output column / row */
};

/* Decode the rows [y0, y1) and at least the columns [x0, x1) (of the
 * image at 1/den scale) of a JPEG into x->px: (*h, *w, ch) pixels whose
 * top-left is (*ox, *oy) of the scaled image.  Errors as dp_image_decode;
 * damage below the region is not seen. */
int dp_image_jpeg_region(dp_image_dec *x, const void *p, size_t n, int ch, int den,
			 uint64_t max_pixels, uint32_t x0, uint32_t y0, uint32_t x1, uint32_t y1,
			 uint32_t *ox, uint32_t *oy, uint32_t *w, uint32_t *h, dp_err *e);

/* A JPEG's header: its size and channels as stored (1 gray, 3 color, 4
 * CMYK or YCCK).  DP_EDATA with libjpeg's reason ("JPEG: Premature end
 * of JPEG file"), for a stream of tables alone too. */
int img_jpeg_header(const void *p, size_t n, uint32_t *w, uint32_t *h, int *channels, dp_err *e);

/* WebP, TIFF, BMP and PNM (formats.c): the header (size, channels as
 * stored), and the decode to ch channels in x->px, as dp_image_probe and
 * dp_image_decode. */
int img_other_info(int format, const void *p, size_t n, dp_image_info *info, dp_err *e);
int img_other_decode(int format, dp_image_dec *x, const void *p, size_t n, int ch,
		     uint64_t max_pixels, uint32_t *w, uint32_t *h, dp_err *e);
int img_webp_info(const void *p, size_t n, dp_image_info *info, dp_err *e);
int img_tiff_info(const void *p, size_t n, dp_image_info *info, dp_err *e);
const char *img_stb_name(int format);

/* The file extension for an image of a format: "jpg", "png"; "bin" for
 * DP_IMAGE_UNKNOWN. */
const char *img_format_ext(int format);
/* A record's image/format for it, as TensorFlow writes it: "JPEG", "PNG". */
const char *img_format_record(int format);

/* DP_OK when a w x h image is within max_pixels (0: DP_IMAGE_MAX_PIXELS),
 * else DP_ELIMIT (DP_EDATA for no pixels), said for the user. */
int img_check_size(uint32_t w, uint32_t h, uint64_t max_pixels, dp_err *e);

/* Grow *p (cap bytes) to at least n bytes: DP_OK or DP_ENOMEM. */
int img_grow(void **p, size_t *cap, size_t n);

/* Pillow's RGB -> L of the pixel at s (ITU-R 601-2 luma, 16-bit fixed
 * point, rounded): every decoder's colour to gray. */
static inline uint8_t img_luma(const uint8_t *s)
{
	return (uint8_t)((s[0] * 19595u + s[1] * 38470u + s[2] * 7471u + 0x8000u) >> 16);
}

#endif
