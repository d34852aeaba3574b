/*
 * formats.c - the image formats past JPEG and PNG that torchvision's
 * ImageFolder reads (dp_image.h): WebP through libwebp, TIFF through
 * libtiff (from memory, by client procedures), BMP and binary PPM/PGM
 * through stb_image (Debian's libstb).  Each is decoded to 8-bit RGB (or
 * gray, which is kept as gray), then reduced to the channels asked for as
 * image.c reduces PNG: alpha dropped, RGB to gray by Pillow's luma, so
 * the pixels are Pillow's Image.open(f).convert(mode).
 *
 * Limits, as for JPEG and PNG: the size is read from the header and
 * checked against max_pixels before any pixel buffer; truncated or
 * damaged data is an error with the decoder's reason.  Refused, rather
 * than decoded unlike Pillow: animated WebP (its first frame is not what
 * Pillow's convert gives), TIFFs of other than 1 or 8 bits a sample or of
 * tiles/planes libtiff's RGBA reader cannot take, 16-bit and plain (ASCII)
 * PNM, BMPs stb_image does not read (RLE, 16-bit, OS/2 forms).  A PNM of a
 * maxval other than 255 is scaled as Pillow scales it (stb_image would
 * give the samples as stored).
 */
#define _GNU_SOURCE
#include "dp_image.h"
#include "image_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stb_image.h>
#include <tiffio.h>
#include <webp/decode.h>

/* np pixels of pc samples each (1, 3 or 4) at src, into x->px as ch
 * channels (1 or 3).  src may be x->px itself (the output never runs
 * ahead of the input). */
static int to_channels(dp_image_dec *x, const uint8_t *src, size_t np, int pc, int ch, dp_err *e)
{
	if (src != x->px && img_grow((void **)&x->px, &x->pxcap, np * (size_t)(ch > pc ? ch : pc)) < 0)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	uint8_t *d = x->px;
	for (size_t i = 0; i < np; i++) {
		const uint8_t *s = src + (size_t)pc * i;
		if (ch == 1)
			d[i] = pc == 1 ? s[0] : img_luma(s);
		else if (pc == 1)
			d[3 * i] = d[3 * i + 1] = d[3 * i + 2] = s[0];
		else
			memmove(d + 3 * i, s, 3);
	}
	if (pc == 1 && ch == 3 && src == x->px) /* gray widened in place: from the end */
		for (size_t i = np; i-- > 0;)
			d[3 * i] = d[3 * i + 1] = d[3 * i + 2] = src[i];
	return DP_OK;
}

/* ---- WebP ------------------------------------------------------------------------ */

int img_webp_info(const void *p, size_t n, dp_image_info *info, dp_err *e)
{
	WebPBitstreamFeatures f;
	VP8StatusCode st = WebPGetFeatures(p, n, &f);
	if (st != VP8_STATUS_OK)
		return dp_seterr(e, DP_EDATA, "WebP: %s",
				 st == VP8_STATUS_NOT_ENOUGH_DATA ? "truncated" : "bad header");
	if (f.has_animation)
		return dp_seterr(e, DP_EDATA, "WebP: animated (a sequence of frames, not an image)");
	info->width = (uint32_t)f.width;
	info->height = (uint32_t)f.height;
	info->channels = f.has_alpha ? 4 : 3;
	info->depth = 8;
	return DP_OK;
}

static int decode_webp(dp_image_dec *x, const void *p, size_t n, int ch, uint64_t max_pixels,
		       uint32_t *w, uint32_t *h, dp_err *e)
{
	dp_image_info in;
	int rc = img_webp_info(p, n, &in, e);
	if (rc < 0 || (rc = img_check_size(in.width, in.height, max_pixels, e)) < 0)
		return rc;
	size_t np = (size_t)in.width * in.height;
	if (img_grow((void **)&x->px, &x->pxcap, np * 3) < 0)
		return dp_seterr(e, DP_ENOMEM, "out of memory for a %ux%u image", in.width, in.height);
	/* RGB straight: libwebp drops alpha as Pillow's convert("RGB") does */
	if (!WebPDecodeRGBInto(p, n, x->px, np * 3, (int)in.width * 3))
		return dp_seterr(e, DP_EDATA, "WebP: damaged or truncated data");
	*w = in.width;
	*h = in.height;
	return ch == 1 ? to_channels(x, x->px, np, 3, 1, e) : DP_OK;
}

/* ---- TIFF ------------------------------------------------------------------------ */

/* A TIFF in memory, for libtiff's client procedures. */
typedef struct mem {
	const uint8_t *p;
	toff_t n, at;
	char err[256];
} mem;

static tmsize_t m_read(thandle_t h, void *buf, tmsize_t len)
{
	mem *m = (mem *)h;
	if (len < 0 || m->at >= m->n)
		return 0;
	toff_t k = m->n - m->at < (toff_t)len ? m->n - m->at : (toff_t)len;
	memcpy(buf, m->p + m->at, (size_t)k);
	m->at += k;
	return (tmsize_t)k;
}

static tmsize_t m_write(thandle_t h, void *buf, tmsize_t len)
{
	(void)h;
	(void)buf;
	(void)len;
	return -1;
}

static toff_t m_seek(thandle_t h, toff_t off, int whence)
{
	mem *m = (mem *)h;
	toff_t base = whence == SEEK_CUR ? m->at : whence == SEEK_END ? m->n : 0;
	if (whence != SEEK_SET && whence != SEEK_CUR && whence != SEEK_END)
		return (toff_t)-1;
	m->at = base + off; /* past the end: reads give nothing */
	return m->at;
}

static int m_close(thandle_t h)
{
	(void)h;
	return 0;
}

static toff_t m_size(thandle_t h) { return ((mem *)h)->n; }

static int m_map(thandle_t h, void **base, toff_t *size)
{
	(void)h;
	(void)base;
	(void)size;
	return 0;
}

static void m_unmap(thandle_t h, void *base, toff_t size)
{
	(void)h;
	(void)base;
	(void)size;
}

/* libtiff's messages, per handle: the first error is kept for ours;
 * warnings are not errors (unknown tags are common) */
static int t_error(TIFF *t, void *user, const char *module, const char *fmt, va_list ap)
{
	(void)t;
	(void)module;
	mem *m = user;
	if (m && !m->err[0])
		vsnprintf(m->err, sizeof m->err, fmt, ap);
	return 1;
}

static int t_warning(TIFF *t, void *user, const char *module, const char *fmt, va_list ap)
{
	(void)t;
	(void)user;
	(void)module;
	(void)fmt;
	(void)ap;
	return 1;
}

static TIFF *tiff_open(mem *m, const void *p, size_t n, dp_err *e)
{
	m->p = p;
	m->n = n;
	m->at = 0;
	m->err[0] = 0;
	TIFFOpenOptions *o = TIFFOpenOptionsAlloc();
	if (!o) {
		dp_seterr(e, DP_ENOMEM, "out of memory");
		return NULL;
	}
	TIFFOpenOptionsSetErrorHandlerExtR(o, t_error, m);
	TIFFOpenOptionsSetWarningHandlerExtR(o, t_warning, m);
	/* "m": no memory mapping (the procedures say none anyway) */
	TIFF *t = TIFFClientOpenExt("image", "rm", (thandle_t)m, m_read, m_write, m_seek, m_close,
				    m_size, m_map, m_unmap, o);
	TIFFOpenOptionsFree(o);
	if (!t)
		dp_seterr(e, DP_EDATA, "TIFF: %s", m->err[0] ? m->err : "not readable");
	return t;
}

/* The first image's size and form; refused unless libtiff's RGBA reader
 * gives Pillow's pixels (1 or 8 bits a sample). */
static int tiff_header(TIFF *t, mem *m, dp_image_info *info, dp_err *e)
{
	uint32_t w = 0, h = 0;
	uint16_t bps = 1, spp = 1;
	char why[1024];
	if (!TIFFGetField(t, TIFFTAG_IMAGEWIDTH, &w) || !TIFFGetField(t, TIFFTAG_IMAGELENGTH, &h))
		return dp_seterr(e, DP_EDATA, "TIFF: no image size");
	TIFFGetFieldDefaulted(t, TIFFTAG_BITSPERSAMPLE, &bps);
	TIFFGetFieldDefaulted(t, TIFFTAG_SAMPLESPERPIXEL, &spp);
	if (bps != 8 && bps != 1)
		return dp_seterr(e, DP_EDATA, "TIFF: %u bits a sample (only 1 and 8 are read)", bps);
	/* unassociated alpha: libtiff's RGBA reader would multiply the colors
	 * by it; Pillow's convert drops it, colors as stored: so said to be
	 * associated (in this copy of the directory only), which is read as is */
	uint16_t nx = 0, *xs = NULL;
	if (TIFFGetField(t, TIFFTAG_EXTRASAMPLES, &nx, &xs) && nx >= 1 && xs[0] == EXTRASAMPLE_UNASSALPHA) {
		uint16_t v[8] = {0};
		for (int i = 0; i < nx && i < 8; i++)
			v[i] = xs[i];
		v[0] = EXTRASAMPLE_ASSOCALPHA;
		TIFFSetField(t, TIFFTAG_EXTRASAMPLES, nx < 8 ? nx : 8, v);
	}
	if (!TIFFRGBAImageOK(t, why))
		return dp_seterr(e, DP_EDATA, "TIFF: %s", m->err[0] ? m->err : why);
	info->width = w;
	info->height = h;
	info->channels = spp > 4 ? 4 : spp;
	info->depth = bps;
	return DP_OK;
}

int img_tiff_info(const void *p, size_t n, dp_image_info *info, dp_err *e)
{
	mem m;
	TIFF *t = tiff_open(&m, p, n, e);
	if (!t)
		return e ? e->code : DP_EDATA;
	int rc = tiff_header(t, &m, info, e);
	TIFFClose(t);
	return rc;
}

static int decode_tiff(dp_image_dec *x, const void *p, size_t n, int ch, uint64_t max_pixels,
		       uint32_t *w, uint32_t *h, dp_err *e)
{
	mem m;
	dp_image_info in;
	TIFF *t = tiff_open(&m, p, n, e);
	if (!t)
		return e ? e->code : DP_EDATA;
	int rc = tiff_header(t, &m, &in, e);
	if (rc == 0)
		rc = img_check_size(in.width, in.height, max_pixels, e);
	size_t np = (size_t)in.width * in.height;
	if (rc == 0 && img_grow((void **)&x->px, &x->pxcap, np * 4) < 0)
		rc = dp_seterr(e, DP_ENOMEM, "out of memory for a %ux%u image", in.width, in.height);
	/* ABGR words from the top-left, as stored (ORIENTATION_TOPLEFT), with
	 * the data's errors stopping it (stop_on_error 1) */
	if (rc == 0 && !TIFFReadRGBAImageOriented(t, in.width, in.height, (uint32_t *)x->px,
						   ORIENTATION_TOPLEFT, 1))
		rc = dp_seterr(e, DP_EDATA, "TIFF: %s", m.err[0] ? m.err : "damaged or truncated data");
	if (rc == 0 && m.err[0])
		rc = dp_seterr(e, DP_EDATA, "TIFF: %s", m.err);
	TIFFClose(t);
	if (rc < 0)
		return rc;
	/* the words are little-endian R, G, B, A bytes in memory */
	*w = in.width;
	*h = in.height;
	return to_channels(x, x->px, np, 4, ch, e);
}

/* ---- BMP and binary PPM/PGM: stb_image ------------------------------------------------ */

/* What stb_image would read: BMP ("BM"), PGM ("P5"), PPM ("P6"). */
static int stb_header(const void *p, size_t n, const char *what, dp_image_info *info, dp_err *e)
{
	int w, h, comp;
	const uint8_t *b = p;
	if (b[0] == 'P' && b[1] != '5' && b[1] != '6')
		return dp_seterr(e, DP_EDATA, "PNM P%c: only binary PGM (P5) and PPM (P6) are read", b[1]);
	if (n > INT32_MAX)
		return dp_seterr(e, DP_ELIMIT, "%s: a file of %zu bytes", what, n);
	if (!stbi_info_from_memory(p, (int)n, &w, &h, &comp))
		return dp_seterr(e, DP_EDATA, "%s: %s", what, stbi_failure_reason());
	if (stbi_is_16_bit_from_memory(p, (int)n))
		return dp_seterr(e, DP_EDATA, "%s: 16 bits a sample (only 8 are read)", what);
	info->width = (uint32_t)w;
	info->height = (uint32_t)h;
	info->channels = comp;
	info->depth = 8;
	return DP_OK;
}

/* stb_image reads a truncated BMP or PNM without a word, the missing rows
 * black: the pixel data's extent, from the header, must be in the file
 * (Pillow: "image file is truncated").  A PNM's maxval in *maxval (BMP:
 * 255). */
static int stb_whole(const uint8_t *b, size_t n, const char *what, uint32_t w, uint32_t h,
		     unsigned *maxval, dp_err *e)
{
	uint64_t off, need;
	*maxval = 255;
	if (b[0] == 'B') { /* BITMAPFILEHEADER, then the info header's bpp */
		if (n < 30)
			return dp_seterr(e, DP_EDATA, "%s: truncated header", what);
		off = (uint64_t)b[10] | (uint64_t)b[11] << 8 | (uint64_t)b[12] << 16 | (uint64_t)b[13] << 24;
		unsigned bpp = (unsigned)(b[28] | b[29] << 8);
		need = ((uint64_t)bpp * w + 31) / 32 * 4 * h;
	} else { /* P5/P6: magic, width, height, maxval (comments between), one space */
		size_t i = 2;
		for (int tok = 0; tok < 3; tok++) {
			for (;;) {
				while (i < n && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r'))
					i++;
				if (i < n && b[i] == '#') {
					while (i < n && b[i] != '\n')
						i++;
					continue;
				}
				break;
			}
			unsigned v = 0;
			for (; i < n && b[i] >= '0' && b[i] <= '9'; i++)
				v = v > 99999 ? v : v * 10 + (unsigned)(b[i] - '0');
			if (tok == 2)
				*maxval = v;
		}
		if (*maxval == 0 || *maxval > 255) /* stb_image's own reading of it may overflow */
			return dp_seterr(e, DP_EDATA, "%s: a maxval of %s (1 to 255 are read)", what,
					 *maxval ? "more than 255" : "0");
		off = i + 1;
		need = (uint64_t)w * h * (b[1] == '6' ? 3 : 1);
	}
	if (off > n || need > n - off)
		return dp_seterr(e, DP_EDATA, "%s: truncated: %llu bytes of pixels from byte %llu, "
				 "the file has %zu", what, (unsigned long long)need,
				 (unsigned long long)off, n);
	return DP_OK;
}

static int decode_stb(dp_image_dec *x, const void *p, size_t n, const char *what, int ch,
		      uint64_t max_pixels, uint32_t *w, uint32_t *h, dp_err *e)
{
	dp_image_info in;
	unsigned maxval;
	int rc = stb_header(p, n, what, &in, e), iw, ih, comp;
	if (rc < 0 || (rc = img_check_size(in.width, in.height, max_pixels, e)) < 0 ||
	    (rc = stb_whole(p, n, what, in.width, in.height, &maxval, e)) < 0)
		return rc;
	/* gray stays gray (1 sample), color comes as RGB (alpha dropped) */
	int want = in.channels <= 2 ? 1 : 3;
	uint8_t *px = stbi_load_from_memory(p, (int)n, &iw, &ih, &comp, want);
	if (!px)
		return dp_seterr(e, DP_EDATA, "%s: %s", what, stbi_failure_reason());
	if ((uint32_t)iw != in.width || (uint32_t)ih != in.height) {
		stbi_image_free(px);
		return dp_seterr(e, DP_EDATA, "%s: its size changed while read", what);
	}
	/* a PNM of another maxval: stb_image gives the samples as stored,
	 * Pillow min(255, round(v / maxval * 255)), halves to even */
	for (size_t i = 0; maxval != 255 && i < (size_t)iw * (size_t)ih * (size_t)want; i++) {
		double v = rint((double)px[i] / maxval * 255.0);
		px[i] = (uint8_t)(v > 255 ? 255 : v);
	}
	rc = to_channels(x, px, (size_t)iw * (size_t)ih, want, ch, e);
	stbi_image_free(px);
	*w = in.width;
	*h = in.height;
	return rc;
}

/* ---- dispatch (image.c) ---------------------------------------------------------- */

const char *img_stb_name(int format) { return format == DP_IMAGE_BMP ? "BMP" : "PNM"; }

int img_other_info(int format, const void *p, size_t n, dp_image_info *info, dp_err *e)
{
	switch (format) {
	case DP_IMAGE_WEBP: return img_webp_info(p, n, info, e);
	case DP_IMAGE_TIFF: return img_tiff_info(p, n, info, e);
	case DP_IMAGE_BMP:
	case DP_IMAGE_PNM: return stb_header(p, n, img_stb_name(format), info, e);
	}
	return dp_seterr(e, DP_EDATA, "unknown image format");
}

int img_other_decode(int format, dp_image_dec *x, const void *p, size_t n, int ch,
		     uint64_t max_pixels, uint32_t *w, uint32_t *h, dp_err *e)
{
	switch (format) {
	case DP_IMAGE_WEBP: return decode_webp(x, p, n, ch, max_pixels, w, h, e);
	case DP_IMAGE_TIFF: return decode_tiff(x, p, n, ch, max_pixels, w, h, e);
	case DP_IMAGE_BMP:
	case DP_IMAGE_PNM: return decode_stb(x, p, n, img_stb_name(format), ch, max_pixels, w, h, e);
	}
	return dp_seterr(e, DP_EDATA, "unknown image format");
}
