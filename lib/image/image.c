/*
 * image.c - JPEG and PNG headers and decoding (dp_image.h); the other
 * formats are formats.c's.
 *
 * JPEG goes through libjpeg-turbo's libjpeg API, strict: a libjpeg warning
 * (a truncated file, a corrupt segment, which libjpeg would fill with
 * gray) is an error.  Each JPEG gets a decompressor of its own, so that
 * one that failed mid-header leaves nothing behind for the next (a
 * TurboJPEG handle reused after a failed tjDecompressHeader3 reads every
 * later JPEG wrong).  A progress monitor bounds the work of the scans: a
 * progressive JPEG whose scans pass over its blocks more than
 * DP_IMAGE_MAX_SCAN_PASSES times (a scan bomb: hundreds of scans, seconds
 * of CPU a decode) is refused.  CMYK JPEGs are decoded as CMYK and
 * converted here (libjpeg-turbo converts no CMYK to RGB).  PNG goes through libspng,
 * decoded to 8-bit RGBA (or 8-bit gray for gray sources without
 * transparency, asked for gray), then reduced to the channels wanted.
 * The pixel limit is checked on the header, before any pixel buffer is
 * allocated.
 *
 * A region of a JPEG (dp_image_jpeg_region, for crops) is the same
 * decode told where to look: only the columns of the region are
 * transformed and color converted (jpeg_crop_scanline), the rows above
 * it are only entropy-decoded (jpeg_skip_scanlines), and those below it
 * not read.
 */
#include "dp_image.h"
#include "image_int.h"

#include <setjmp.h>
#include <spng.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jpeglib.h>

int dp_image_format_of(const void *p, size_t n)
{
	const uint8_t *b = p;
	if (n >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff)
		return DP_IMAGE_JPEG;
	if (n >= 8 && !memcmp(b, "\x89PNG\r\n\x1a\n", 8))
		return DP_IMAGE_PNG;
	if (n >= 12 && !memcmp(b, "RIFF", 4) && !memcmp(b + 8, "WEBP", 4))
		return DP_IMAGE_WEBP;
	if (n >= 4 && (!memcmp(b, "II*\0", 4) || !memcmp(b, "MM\0*", 4) || !memcmp(b, "II+\0", 4) ||
		       !memcmp(b, "MM\0+", 4)))
		return DP_IMAGE_TIFF;
	if (n >= 2 && b[0] == 'B' && b[1] == 'M')
		return DP_IMAGE_BMP;
	if (n >= 3 && b[0] == 'P' && b[1] >= '1' && b[1] <= '7' &&
	    (b[2] == ' ' || b[2] == '\n' || b[2] == '\r' || b[2] == '\t' || b[2] == '#'))
		return DP_IMAGE_PNM;
	return DP_IMAGE_UNKNOWN;
}

/* Each format's name, the file extension given to an image of it, and
 * its image/format in a record. */
static const struct {
	const char *name, *ext, *record;
} formats[] = {
	[DP_IMAGE_UNKNOWN] = {"unknown", "bin", ""},
	[DP_IMAGE_JPEG] = {"jpeg", "jpg", "JPEG"},
	[DP_IMAGE_PNG] = {"png", "png", "PNG"},
	[DP_IMAGE_WEBP] = {"webp", "webp", "WEBP"},
	[DP_IMAGE_TIFF] = {"tiff", "tif", "TIFF"},
	[DP_IMAGE_BMP] = {"bmp", "bmp", "BMP"},
	[DP_IMAGE_PNM] = {"pnm", "ppm", "PNM"},
};

static int format_index(int format)
{
	return format > 0 && format < (int)(sizeof formats / sizeof *formats) ? format : 0;
}

const char *dp_image_format_name(int format) { return formats[format_index(format)].name; }

const char *img_format_ext(int format) { return formats[format_index(format)].ext; }

const char *img_format_record(int format) { return formats[format_index(format)].record; }

dp_image_dec *dp_image_dec_new(void)
{
	return calloc(1, sizeof(dp_image_dec));
}

void dp_image_dec_free(dp_image_dec *x)
{
	if (!x)
		return;
	free(x->px);
	free(x->tmp);
	free(x->f1);
	free(x->f2);
	free(x->tx.k);
	free(x->ty.k);
	free(x);
}

/* Grow *p to n bytes. */
int img_grow(void **p, size_t *cap, size_t n)
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

int img_check_size(uint32_t w, uint32_t h, uint64_t max_pixels, dp_err *e)
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
		int rc = img_jpeg_header(p, n, &info->width, &info->height, &info->channels, e);
		info->depth = 8;
		return rc;
	}
	if (info->format != DP_IMAGE_UNKNOWN)
		return img_other_info(info->format, p, n, info, e);
	return dp_seterr(e, DP_EDATA, "not an image file (%s)",
			 n < 8 ? "too short"
			       : "no JPEG, PNG, WebP, TIFF, BMP or PNM signature at its start");
}

/* ---- decode ------------------------------------------------------------------ */

/* Decoded pixels (np of them, pc samples each: 1 gray, 3 RGB, 4 CMYK as
 * libjpeg gives it) to ch channels, in place. */
static void convert(uint8_t *px, size_t np, int pc, int ch)
{
	if (pc == 3 && ch == 1) {
		for (size_t i = 0; i < np; i++)
			px[i] = img_luma(px + 3 * i);
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
				d[i] = img_luma(v);
			} else {
				d[3 * i] = (uint8_t)rgb[0];
				d[3 * i + 1] = (uint8_t)rgb[1];
				d[3 * i + 2] = (uint8_t)rgb[2];
			}
		}
	}
}

static int decode_png(dp_image_dec *x, const void *p, size_t n, int ch, uint64_t max_pixels,
		      uint32_t *ow, uint32_t *oh, dp_err *e)
{
	spng_ctx *ctx;
	struct spng_ihdr ih;
	int rc = png_open(&ctx, p, n, &ih, e);
	if (rc < 0)
		return rc;
	if ((rc = img_check_size(ih.width, ih.height, max_pixels, e)) < 0)
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
	if (img_grow((void **)&x->px, &x->pxcap, len) < 0) {
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
				d[i] = img_luma(x->px + 4 * i);
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

/* ---- JPEG ------------------------------------------------------------------ */

/* One JPEG being read, in a decompressor of its own.  libjpeg's errors,
 * and its warnings (corrupt data it would fill with gray), end the read
 * with its message; so does the progress monitor when the scans have
 * decoded more blocks than `budget`. */
typedef struct jpeg {
	struct jpeg_decompress_struct ci; /* first: libjpeg's callbacks get &ci */
	struct jpeg_error_mgr em;
	struct jpeg_progress_mgr pm;
	jmp_buf jb;
	int rc;              /* the status a longjmp returns with; 0: DP_EDATA */
	char msg[JMSG_LENGTH_MAX];
	int scan;            /* the last scan counted */
	uint64_t work;       /* blocks of the scans so far */
	uint64_t budget;     /* 0: no bound (headers) */
} jpeg;

static void j_error_exit(j_common_ptr c)
{
	jpeg *j = (jpeg *)(void *)c;
	(*c->err->format_message)(c, j->msg);
	longjmp(j->jb, 1);
}

static void j_emit(j_common_ptr c, int level)
{
	if (level < 0)
		j_error_exit(c);
}

/* Called before each row of MCUs read: a new scan adds the blocks of its
 * components (a scan decodes every block of the components it holds). */
static void j_progress(j_common_ptr c)
{
	jpeg *j = (jpeg *)(void *)c;
	struct jpeg_decompress_struct *ci = &j->ci;
	if (ci->input_scan_number == j->scan || !j->budget)
		return;
	j->scan = ci->input_scan_number;
	for (int i = 0; i < ci->comps_in_scan && i < MAX_COMPS_IN_SCAN; i++)
		j->work += (uint64_t)ci->cur_comp_info[i]->width_in_blocks *
			   ci->cur_comp_info[i]->height_in_blocks;
	if (j->work > j->budget) {
		snprintf(j->msg, sizeof j->msg,
			 "%d scans decode its blocks more than %d times over (a progressive-JPEG "
			 "scan bomb?)",
			 j->scan, DP_IMAGE_MAX_SCAN_PASSES);
		j->rc = DP_ELIMIT;
		longjmp(j->jb, 1);
	}
}

/* Set j up to read p[0..n); the caller has called setjmp(j->jb). */
static void jpeg_begin(jpeg *j, const void *p, size_t n)
{
	memset(&j->ci, 0, sizeof j->ci);
	j->ci.err = jpeg_std_error(&j->em);
	j->em.error_exit = j_error_exit;
	j->em.emit_message = j_emit;
	j->rc = 0;
	j->msg[0] = 0;
	j->scan = 0;
	j->work = j->budget = 0;
	jpeg_create_decompress(&j->ci);
	jpeg_mem_src(&j->ci, p, (unsigned long)n);
}

/* After a longjmp: j freed, e set. */
static int jpeg_fail(jpeg *j, dp_err *e)
{
	jpeg_destroy_decompress(&j->ci);
	if (j->rc && !j->msg[0]) /* e set before the jump */
		return j->rc;
	return dp_seterr(e, j->rc ? j->rc : DP_EDATA, "JPEG: %s", j->msg);
}

int img_jpeg_header(const void *p, size_t n, uint32_t *w, uint32_t *h, int *channels, dp_err *e)
{
	jpeg j;
	*w = *h = 0;
	if (setjmp(j.jb))
		return jpeg_fail(&j, e);
	jpeg_begin(&j, p, n);
	/* TRUE: a stream of tables alone (SOI DQT DHT EOI) is an error, "no
	 * image", not an image of whatever sizes the struct held */
	jpeg_read_header(&j.ci, TRUE);
	*w = j.ci.image_width;
	*h = j.ci.image_height;
	switch (j.ci.jpeg_color_space) {
	case JCS_GRAYSCALE: *channels = 1; break;
	case JCS_CMYK:
	case JCS_YCCK: *channels = 4; break;
	default: *channels = 3;
	}
	jpeg_destroy_decompress(&j.ci);
	return DP_OK;
}

int dp_image_jpeg_region(dp_image_dec *x, const void *p, size_t n, int ch, int den,
			 uint64_t max_pixels, uint32_t x0, uint32_t y0, uint32_t x1, uint32_t y1,
			 uint32_t *ox, uint32_t *oy, uint32_t *w, uint32_t *h, dp_err *e)
{
	jpeg j;
	if (setjmp(j.jb))
		return jpeg_fail(&j, e);
	jpeg_begin(&j, p, n);
	struct jpeg_decompress_struct *ci = &j.ci;
	jpeg_read_header(ci, TRUE);
	if ((j.rc = img_check_size(ci->image_width, ci->image_height, max_pixels, e)) < 0)
		longjmp(j.jb, 1);
	/* the bound on the scans' work: DP_IMAGE_MAX_SCAN_PASSES times the
	 * blocks of all components (known once the first scan's header is
	 * read) */
	uint64_t blocks = 0;
	for (int i = 0; i < ci->num_components; i++)
		blocks += (uint64_t)ci->comp_info[i].width_in_blocks * ci->comp_info[i].height_in_blocks;
	j.budget = blocks * DP_IMAGE_MAX_SCAN_PASSES;
	j.pm.progress_monitor = j_progress;
	ci->progress = &j.pm;
	/* a color JPEG to gray goes through RGB and Pillow's luma, not the
	 * JPEG's Y: the same pixels as Image.open(f).convert("L") */
	int cmyk = ci->jpeg_color_space == JCS_CMYK || ci->jpeg_color_space == JCS_YCCK;
	ci->out_color_space = cmyk ? JCS_CMYK
			      : ch == 1 && ci->jpeg_color_space == JCS_GRAYSCALE ? JCS_GRAYSCALE
										: JCS_RGB;
	ci->scale_num = 1;
	ci->scale_denom = (unsigned)(den == 2 || den == 4 || den == 8 ? den : 1);
	jpeg_start_decompress(ci);
	uint32_t xe = x1 < ci->output_width ? x1 : ci->output_width;
	uint32_t ye = y1 < ci->output_height ? y1 : ci->output_height;
	if (x0 >= xe || y0 >= ye) {
		j.rc = dp_seterr(e, DP_EARG, "JPEG: empty region");
		longjmp(j.jb, 1);
	}
	JDIMENSION xoff = x0, cw = xe - x0;
	if (cw < ci->output_width)
		jpeg_crop_scanline(ci, &xoff, &cw);
	int pc = ci->output_components;
	if (img_grow((void **)&x->px, &x->pxcap, (size_t)cw * (ye - y0) * pc) < 0) {
		j.rc = dp_seterr(e, DP_ENOMEM, "out of memory for a %ux%u image", cw, ye - y0);
		longjmp(j.jb, 1);
	}
	if (y0)
		jpeg_skip_scanlines(ci, y0);
	while (ci->output_scanline < ye) { /* up to 16 rows a call, as libjpeg makes them */
		JSAMPROW rows[16];
		JDIMENSION k = 0;
		while (k < 16 && ci->output_scanline + k < ye) {
			rows[k] = x->px + (size_t)(ci->output_scanline + k - y0) * cw * pc;
			k++;
		}
		jpeg_read_scanlines(ci, rows, k);
	}
	jpeg_destroy_decompress(ci);
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
	case DP_IMAGE_JPEG: {
		uint32_t ox, oy;
		rc = dp_image_jpeg_region(x, p, n, channels, scale_den, max_pixels, 0, 0, UINT32_MAX,
					  UINT32_MAX, &ox, &oy, w, h, e);
		break;
	}
	case DP_IMAGE_PNG:
		rc = decode_png(x, p, n, channels, max_pixels, w, h, e);
		break;
	case DP_IMAGE_UNKNOWN:
		return dp_seterr(e, DP_EDATA, "not an image file (no JPEG, PNG, WebP, TIFF, BMP or "
				 "PNM signature at its start)");
	default:
		rc = img_other_decode(dp_image_format_of(p, n), x, p, n, channels, max_pixels, w, h, e);
		break;
	}
	if (rc == DP_OK)
		*px = x->px;
	return rc;
}
