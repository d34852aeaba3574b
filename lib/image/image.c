/*
 * image.c - JPEG and PNG headers and decoding (dp_image.h).
 *
 * JPEG goes through TurboJPEG (tjDecompress2), strict: a libjpeg warning
 * (a truncated file, a corrupt segment, which libjpeg would fill with
 * gray) is an error.  CMYK JPEGs are decoded as CMYK and converted here
 * (libjpeg-turbo converts no CMYK to RGB).  PNG goes through libspng,
 * decoded to 8-bit RGBA (or 8-bit gray for gray sources without
 * transparency, asked for gray), then reduced to the channels wanted.
 * The pixel limit is checked on the header, before any pixel buffer is
 * allocated.
 *
 * A region of a JPEG (dp_image_jpeg_region, for crops) goes through
 * libjpeg-turbo's libjpeg API instead, which TurboJPEG 2.1 does not
 * expose: only the columns of the region are transformed and color
 * converted (jpeg_crop_scanline), the rows above it are only
 * entropy-decoded (jpeg_skip_scanlines), and those below it not read.
 */
#include "dp_image.h"
#include "image_int.h"

#include <setjmp.h>
#include <spng.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>
#include <jpeglib.h>

int dp_image_format_of(const void *p, size_t n)
{
	const uint8_t *b = p;
	if (n >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff)
		return DP_IMAGE_JPEG;
	if (n >= 8 && !memcmp(b, "\x89PNG\r\n\x1a\n", 8))
		return DP_IMAGE_PNG;
	return DP_IMAGE_UNKNOWN;
}

const char *dp_image_format_name(int format)
{
	switch (format) {
	case DP_IMAGE_JPEG: return "jpeg";
	case DP_IMAGE_PNG: return "png";
	default: return "unknown";
	}
}

dp_image_dec *dp_image_dec_new(void)
{
	return calloc(1, sizeof(dp_image_dec));
}

void dp_image_dec_free(dp_image_dec *x)
{
	if (!x)
		return;
	if (x->tj)
		tjDestroy(x->tj);
	free(x->px);
	free(x->tmp);
	free(x->f1);
	free(x->f2);
	free(x->kx);
	free(x->ky);
	free(x->bx);
	free(x->by);
	free(x);
}

/* Grow *p to n bytes. */
int dp_image_grow(void **p, size_t *cap, size_t n)
{
	if (n <= *cap)
		return DP_OK;
	void *q = realloc(*p, n);
	if (!q)
		return DP_ENOMEM;
	*p = q;
	*cap = n;
	return DP_OK;
}

static int tj_handle(dp_image_dec *x, dp_err *e)
{
	if (!x->tj && !(x->tj = tjInitDecompress()))
		return dp_seterr(e, DP_ENOMEM, "JPEG: %s", tjGetErrorStr2(NULL));
	return DP_OK;
}

static int check_size(uint32_t w, uint32_t h, uint64_t max_pixels, dp_err *e)
{
	uint64_t lim = max_pixels ? max_pixels : DP_IMAGE_MAX_PIXELS;
	if (!w || !h)
		return dp_seterr(e, DP_EDATA, "image of %ux%u pixels", w, h);
	if ((uint64_t)w * h > lim)
		return dp_seterr(e, DP_ELIMIT,
				 "image of %ux%u pixels, more than the limit of %llu (a "
				 "decompression bomb?): raise --max-pixels if it is real",
				 w, h, (unsigned long long)lim);
	return DP_OK;
}

/* ---- probe ------------------------------------------------------------------ */

static int png_open(spng_ctx **ctx, const void *p, size_t n, struct spng_ihdr *ih, dp_err *e)
{
	*ctx = spng_ctx_new(0);
	if (!*ctx)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	/* libspng's own default limit is 2^31-1 per side; ours is on the
	 * product, checked by the caller */
	spng_set_chunk_limits(*ctx, 64u << 20, 64u << 20);
	int rc = spng_set_png_buffer(*ctx, p, n);
	if (!rc)
		rc = spng_get_ihdr(*ctx, ih);
	if (rc) {
		spng_ctx_free(*ctx);
		*ctx = NULL;
		return dp_seterr(e, DP_EDATA, "PNG: %s", spng_strerror(rc));
	}
	return DP_OK;
}

int dp_image_probe(const void *p, size_t n, dp_image_info *info, dp_err *e)
{
	memset(info, 0, sizeof *info);
	info->format = dp_image_format_of(p, n);
	if (info->format == DP_IMAGE_PNG) {
		spng_ctx *ctx;
		struct spng_ihdr ih;
		int rc = png_open(&ctx, p, n, &ih, e);
		if (rc < 0)
			return rc;
		info->width = ih.width;
		info->height = ih.height;
		info->depth = ih.bit_depth;
		switch (ih.color_type) {
		case SPNG_COLOR_TYPE_GRAYSCALE: info->channels = 1; break;
		case SPNG_COLOR_TYPE_GRAYSCALE_ALPHA: info->channels = 2; break;
		case SPNG_COLOR_TYPE_INDEXED: info->channels = 3; info->palette = 1; break;
		case SPNG_COLOR_TYPE_TRUECOLOR_ALPHA: info->channels = 4; break;
		default: info->channels = 3;
		}
		spng_ctx_free(ctx);
		return DP_OK;
	}
	if (info->format == DP_IMAGE_JPEG) {
		tjhandle tj = tjInitDecompress();
		if (!tj)
			return dp_seterr(e, DP_ENOMEM, "out of memory");
		int w, h, sub, cs;
		int rc = tjDecompressHeader3(tj, p, (unsigned long)n, &w, &h, &sub, &cs);
		if (rc < 0) {
			rc = dp_seterr(e, DP_EDATA, "JPEG: %s", tjGetErrorStr2(tj));
			tjDestroy(tj);
			return rc;
		}
		tjDestroy(tj);
		info->width = (uint32_t)w;
		info->height = (uint32_t)h;
		info->depth = 8;
		info->channels = cs == TJCS_GRAY ? 1 : cs == TJCS_CMYK || cs == TJCS_YCCK ? 4 : 3;
		return DP_OK;
	}
	return dp_seterr(e, DP_EDATA, "not a JPEG or PNG file (%s)",
			 n < 8 ? "too short" : "no JPEG or PNG signature at its start");
}

/* ---- decode ------------------------------------------------------------------ */

/* Pillow's RGB -> L (ITU-R 601-2 luma, 16-bit fixed point, rounded). */
static inline uint8_t luma(const uint8_t *s)
{
	return (uint8_t)((s[0] * 19595u + s[1] * 38470u + s[2] * 7471u + 0x8000u) >> 16);
}

/* Decoded pixels (np of them, pc samples each: 1 gray, 3 RGB, 4 CMYK as
 * libjpeg gives it) to ch channels, in place. */
static void convert(uint8_t *px, size_t np, int pc, int ch)
{
	if (pc == 3 && ch == 1) {
		for (size_t i = 0; i < np; i++)
			px[i] = luma(px + 3 * i);
	} else if (pc == 4) {
		/* Pillow's CMYK -> RGB, r = (255 - K) - (255 - K) * C / 255 in
		 * its rounding; libjpeg gives Adobe's inverted samples (255 - C) */
		uint8_t *d = px;
		for (size_t i = 0; i < np; i++) {
			const uint8_t *s = px + 4 * i;
			unsigned nk = s[3], rgb[3];
			for (int j = 0; j < 3; j++) {
				unsigned t = (255u - s[j]) * nk + 128;
				rgb[j] = nk - (((t >> 8) + t) >> 8);
			}
			if (ch == 1) {
				uint8_t v[3] = {(uint8_t)rgb[0], (uint8_t)rgb[1], (uint8_t)rgb[2]};
				d[i] = luma(v);
			} else {
				d[3 * i] = (uint8_t)rgb[0];
				d[3 * i + 1] = (uint8_t)rgb[1];
				d[3 * i + 2] = (uint8_t)rgb[2];
			}
		}
	}
}

static int decode_jpeg(dp_image_dec *x, const void *p, size_t n, int ch, int den,
		       uint64_t max_pixels, uint32_t *ow, uint32_t *oh, dp_err *e)
{
	int rc = tj_handle(x, e);
	if (rc < 0)
		return rc;
	int w, h, sub, cs;
	if (tjDecompressHeader3(x->tj, p, (unsigned long)n, &w, &h, &sub, &cs) < 0)
		return dp_seterr(e, DP_EDATA, "JPEG: %s", tjGetErrorStr2(x->tj));
	if ((rc = check_size((uint32_t)w, (uint32_t)h, max_pixels, e)) < 0)
		return rc;
	tjscalingfactor sf = {1, den == 2 || den == 4 || den == 8 ? den : 1};
	int sw = TJSCALED(w, sf), sh = TJSCALED(h, sf);
	int cmyk = cs == TJCS_CMYK || cs == TJCS_YCCK;
	/* a color JPEG to gray goes through RGB and Pillow's luma, not the
	 * JPEG's Y: the same pixels as Image.open(f).convert("L") */
	int pf = cmyk ? TJPF_CMYK : ch == 1 && cs == TJCS_GRAY ? TJPF_GRAY : TJPF_RGB;
	int ps = tjPixelSize[pf];
	if (dp_image_grow((void **)&x->px, &x->pxcap, (size_t)sw * sh * ps) < 0)
		return dp_seterr(e, DP_ENOMEM, "out of memory for a %dx%d image", sw, sh);
	if (tjDecompress2(x->tj, p, (unsigned long)n, x->px, sw, 0, sh, pf,
			  TJFLAG_STOPONWARNING) < 0)
		return dp_seterr(e, DP_EDATA, "JPEG: %s", tjGetErrorStr2(x->tj));
	convert(x->px, (size_t)sw * sh, pf == TJPF_CMYK ? 4 : pf == TJPF_RGB ? 3 : 1, ch);
	*ow = (uint32_t)sw;
	*oh = (uint32_t)sh;
	return DP_OK;
}

static int decode_png(dp_image_dec *x, const void *p, size_t n, int ch, uint64_t max_pixels,
		      uint32_t *ow, uint32_t *oh, dp_err *e)
{
	spng_ctx *ctx;
	struct spng_ihdr ih;
	int rc = png_open(&ctx, p, n, &ih, e);
	if (rc < 0)
		return rc;
	if ((rc = check_size(ih.width, ih.height, max_pixels, e)) < 0)
		goto out;
	/* gray straight to gray; anything else through RGBA8 (palette,
	 * tRNS, 16-bit, alpha all resolved by libspng) */
	struct spng_trns trns;
	int gray = ih.color_type == SPNG_COLOR_TYPE_GRAYSCALE && ih.bit_depth <= 8 && ch == 1 &&
		   spng_get_trns(ctx, &trns) != 0;
	int fmt = gray ? SPNG_FMT_G8 : SPNG_FMT_RGBA8;
	size_t len;
	if ((rc = spng_decoded_image_size(ctx, fmt, &len))) {
		rc = dp_seterr(e, DP_EDATA, "PNG: %s", spng_strerror(rc));
		goto out;
	}
	if (dp_image_grow((void **)&x->px, &x->pxcap, len) < 0) {
		rc = dp_seterr(e, DP_ENOMEM, "out of memory for a %ux%u image", ih.width, ih.height);
		goto out;
	}
	if ((rc = spng_decode_image(ctx, x->px, len, fmt, SPNG_DECODE_TRNS))) {
		rc = dp_seterr(e, DP_EDATA, "PNG: %s", spng_strerror(rc));
		goto out;
	}
	if (!gray) { /* RGBA -> RGB or L, in place (the output is never ahead) */
		size_t np = (size_t)ih.width * ih.height;
		uint8_t *d = x->px;
		if (ch == 1)
			for (size_t i = 0; i < np; i++)
				d[i] = luma(x->px + 4 * i);
		else
			for (size_t i = 0; i < np; i++)
				memmove(d + 3 * i, x->px + 4 * i, 3);
	}
	*ow = ih.width;
	*oh = ih.height;
	rc = DP_OK;
out:
	spng_ctx_free(ctx);
	return rc;
}

/* libjpeg's errors, and its warnings (corrupt data it would fill with
 * gray), end the decode with its message. */
struct jerr {
	struct jpeg_error_mgr pub;
	jmp_buf jb;
	char msg[JMSG_LENGTH_MAX];
};

static void j_error_exit(j_common_ptr c)
{
	struct jerr *je = (struct jerr *)(void *)c->err;
	(*c->err->format_message)(c, je->msg);
	longjmp(je->jb, 1);
}

static void j_emit(j_common_ptr c, int level)
{
	if (level < 0)
		j_error_exit(c);
}

int dp_image_jpeg_region(dp_image_dec *x, const void *p, size_t n, int ch, int den,
			 uint64_t max_pixels, uint32_t x0, uint32_t y0, uint32_t x1, uint32_t y1,
			 uint32_t *ox, uint32_t *oy, uint32_t *w, uint32_t *h, dp_err *e)
{
	struct jpeg_decompress_struct ci;
	struct jerr je;
	ci.err = jpeg_std_error(&je.pub);
	je.pub.error_exit = j_error_exit;
	je.pub.emit_message = j_emit;
	volatile int rc = DP_OK;
	if (setjmp(je.jb)) {
		jpeg_destroy_decompress(&ci);
		return rc < 0 ? rc : dp_seterr(e, DP_EDATA, "JPEG: %s", je.msg);
	}
	jpeg_create_decompress(&ci);
	jpeg_mem_src(&ci, p, (unsigned long)n);
	jpeg_read_header(&ci, TRUE);
	if ((rc = check_size(ci.image_width, ci.image_height, max_pixels, e)) < 0)
		longjmp(je.jb, 1);
	int cmyk = ci.jpeg_color_space == JCS_CMYK || ci.jpeg_color_space == JCS_YCCK;
	ci.out_color_space = cmyk ? JCS_CMYK
			     : ch == 1 && ci.jpeg_color_space == JCS_GRAYSCALE ? JCS_GRAYSCALE
									      : JCS_RGB;
	ci.scale_num = 1;
	ci.scale_denom = (unsigned)(den == 2 || den == 4 || den == 8 ? den : 1);
	jpeg_start_decompress(&ci);
	uint32_t xe = x1 < ci.output_width ? x1 : ci.output_width;
	uint32_t ye = y1 < ci.output_height ? y1 : ci.output_height;
	if (x0 >= xe || y0 >= ye) {
		rc = dp_seterr(e, DP_EARG, "JPEG: empty region");
		longjmp(je.jb, 1);
	}
	JDIMENSION xoff = x0, cw = xe - x0;
	if (cw < ci.output_width)
		jpeg_crop_scanline(&ci, &xoff, &cw);
	int pc = ci.output_components;
	if (dp_image_grow((void **)&x->px, &x->pxcap, (size_t)cw * (ye - y0) * pc) < 0) {
		rc = dp_seterr(e, DP_ENOMEM, "out of memory for a %ux%u image", cw, ye - y0);
		longjmp(je.jb, 1);
	}
	if (y0)
		jpeg_skip_scanlines(&ci, y0);
	while (ci.output_scanline < ye) {
		JSAMPROW row = x->px + (size_t)(ci.output_scanline - y0) * cw * pc;
		jpeg_read_scanlines(&ci, &row, 1);
	}
	jpeg_destroy_decompress(&ci);
	convert(x->px, (size_t)cw * (ye - y0), pc, ch);
	*ox = xoff;
	*oy = y0;
	*w = cw;
	*h = ye - y0;
	return DP_OK;
}

int dp_image_decode(dp_image_dec *x, const void *p, size_t n, int channels, int scale_den,
		    uint64_t max_pixels, const uint8_t **px, uint32_t *w, uint32_t *h, dp_err *e)
{
	if (channels != 1 && channels != 3)
		return dp_seterr(e, DP_EARG, "image: %d channels: want 1 or 3", channels);
	int rc;
	switch (dp_image_format_of(p, n)) {
	case DP_IMAGE_JPEG:
		rc = decode_jpeg(x, p, n, channels, scale_den, max_pixels, w, h, e);
		break;
	case DP_IMAGE_PNG:
		rc = decode_png(x, p, n, channels, max_pixels, w, h, e);
		break;
	default:
		return dp_seterr(e, DP_EDATA, "not a JPEG or PNG file");
	}
	if (rc == DP_OK)
		*px = x->px;
	return rc;
}
