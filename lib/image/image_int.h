/*
 * image_int.h - the decoder's state, shared by image.c (decoding) and
 * transform.c (resampling, augmentation).  Private to lib/image.
 */
#ifndef DP_IMAGE_INT_H
#define DP_IMAGE_INT_H

#include <stddef.h>
#include <stdint.h>

struct dp_image_dec {
	void *tj;              /* TurboJPEG handle, made on first use */
	uint8_t *px;           /* the decoded image (h, w, c) */
	size_t pxcap;
	float *tmp;            /* resampling: the horizontal pass */
	size_t tmpcap;
	float *f1, *f2;        /* the resampled image; spare */
	size_t f1cap, f2cap;
	float *kx, *ky;        /* filter weights per output column / row */
	size_t kxcap, kycap;
	int *bx, *by;          /* (first input index, taps) per output column / row */
	size_t bxcap, bycap;
};

/* Grow *p (cap bytes) to at least n bytes: DP_OK or DP_ENOMEM. */
int dp_image_grow(void **p, size_t *cap, size_t n);

#endif
