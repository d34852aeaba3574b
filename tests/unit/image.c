/* image.c - lib/image (dp_image.h) without the tools: decode of PNG bytes
 * made here (zlib's deflate, not libspng's encoder) and of a JPEG made by
 * Pillow (tests/image_ref.py) pixel for pixel against Pillow's own decode;
 * the resampler's arithmetic against the triangle filter worked by hand
 * and against Pillow's float resize; the center crop's box; the option
 * line's round trip; damaged and oversized images refused with the
 * decoder's reason and the status that says which. */
#define _GNU_SOURCE
#include "dp.h"
#include "dp_image.h"
#include "tap.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* ---- a PNG encoder of our own: 8-bit gray (c 1) or RGB (c 3), filter 0 ---- */

static size_t put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
	return 4;
}

/* One chunk (length, type, data, CRC-32 of type and data) at p; its size. */
static size_t chunk(uint8_t *p, const char *type, const uint8_t *data, uint32_t n)
{
	size_t k = put32(p, n);
	memcpy(p + k, type, 4);
	if (n)
		memcpy(p + k + 4, data, n);
	uLong crc = crc32(crc32(0, NULL, 0), p + k, n + 4);
	return k + 4 + n + put32(p + k + 4 + n, (uint32_t)crc);
}

/* px (h, w, c) as a PNG, malloc'd, its size in *n. */
static uint8_t *png(const uint8_t *px, uint32_t w, uint32_t h, int c, size_t *n)
{
	size_t row = (size_t)w * c, raw_n = (row + 1) * h;
	uint8_t *raw = malloc(raw_n);
	for (uint32_t y = 0; y < h; y++) {
		raw[y * (row + 1)] = 0; /* filter type None */
		memcpy(raw + y * (row + 1) + 1, px + y * row, row);
	}
	uLongf zn = compressBound(raw_n);
	uint8_t *z = malloc(zn), *out = malloc(zn + 64);
	compress(z, &zn, raw, raw_n);
	uint8_t ihdr[13];
	put32(ihdr, w), put32(ihdr + 4, h);
	ihdr[8] = 8, ihdr[9] = c == 3 ? 2 : 0, ihdr[10] = ihdr[11] = ihdr[12] = 0;
	memcpy(out, "\x89PNG\r\n\x1a\n", 8);
	size_t k = 8;
	k += chunk(out + k, "IHDR", ihdr, 13);
	k += chunk(out + k, "IDAT", z, (uint32_t)zn);
	k += chunk(out + k, "IEND", NULL, 0);
	free(raw);
	free(z);
	*n = k;
	return out;
}

/* Pillow's RGB -> L (ITU-R 601-2 luma), worked out here as dp_image.h
 * states it, not as lib/image computes it. */
static uint8_t luma(const uint8_t *s)
{
	return (uint8_t)((s[0] * 19595u + s[1] * 38470u + s[2] * 7471u + 0x8000u) >> 16);
}

static void test_png(dp_image_dec *x)
{
	enum { W = 7, H = 5 };
	uint8_t px[H][W][3], gray[H][W];
	for (int y = 0; y < H; y++)
		for (int i = 0; i < W; i++) {
			px[y][i][0] = (uint8_t)(i * 37), px[y][i][1] = (uint8_t)(y * 61);
			px[y][i][2] = (uint8_t)(250 - 9 * (i + y));
			gray[y][i] = luma(px[y][i]);
		}
	size_t n;
	uint8_t *p = png(&px[0][0][0], W, H, 3, &n);
	dp_image_info in;
	dp_err e;
	is_int(dp_image_format_of(p, n), DP_IMAGE_PNG, "PNG: known by its signature");
	is_int(dp_image_probe(p, n, &in, &e), DP_OK, "PNG: probe");
	ok(in.width == W && in.height == H && in.channels == 3 && in.depth == 8 && !in.palette,
	   "PNG: probe says 7x5, 3 channels, 8 bits (got %ux%u, %d, %d)", in.width, in.height,
	   in.channels, in.depth);
	const uint8_t *out;
	uint32_t w = 0, h = 0;
	int rc = dp_image_decode(x, p, n, 3, 1, 0, &out, &w, &h, &e);
	ok(rc == DP_OK && w == W && h == H && !memcmp(out, px, sizeof px),
	   "PNG: decoded to RGB, every sample as encoded");
	rc = dp_image_decode(x, p, n, 1, 1, 0, &out, &w, &h, &e);
	ok(rc == DP_OK && !memcmp(out, gray, sizeof gray), "PNG: decoded to gray, Pillow's luma");

	/* one bit of the image data flipped: its CRC no longer matches */
	size_t idat = 8 + 25 + 8; /* signature, IHDR chunk, IDAT's length and type */
	p[idat + 3] ^= 0x10;
	rc = dp_image_decode(x, p, n, 3, 1, 0, &out, &w, &h, &e);
	is_int(rc, DP_EDATA, "PNG: a bit flipped in IDAT: refused as data (DP_EDATA)");
	like(e.msg, "PNG: ", "... with libspng's reason (%s)", e.msg);
	p[idat + 3] ^= 0x10;
	/* cut inside IDAT's compressed data (a PNG cut after it, in IDAT's
	 * CRC or before IEND, has its pixels whole: libspng reads them) */
	for (size_t cut = n - 17; cut > idat; cut -= 19) {
		rc = dp_image_decode(x, p, cut, 3, 1, 0, &out, &w, &h, &e);
		ok(rc == DP_EDATA && !strncmp(e.msg, "PNG: ", 5),
		   "PNG cut to %zu of %zu bytes: refused (%s)", cut, n, rc < 0 ? e.msg : "decoded");
	}
	rc = dp_image_decode(x, p, n, 3, 1, 0, &out, &w, &h, &e);
	ok(rc == DP_OK && !memcmp(out, px, sizeof px), "PNG: the whole decodes after the damaged ones");

	/* the pixel limit: 35 pixels over a limit of 34 */
	rc = dp_image_decode(x, p, n, 3, 1, W * H - 1, &out, &w, &h, &e);
	is_int(rc, DP_ELIMIT, "PNG: 35 pixels over a limit of 34: DP_ELIMIT");
	like(e.msg, "image of 7x5 pixels, more than the limit of 34", "... saying so (%s)", e.msg);
	/* a header of no pixels (width 0, its CRC made good) */
	put32(p + 16, 0);
	put32(p + 29, (uint32_t)crc32(crc32(0, NULL, 0), p + 12, 17));
	rc = dp_image_decode(x, p, n, 3, 1, 0, &out, &w, &h, &e);
	ok(rc == DP_EDATA, "PNG of width 0: refused (%s)", rc < 0 ? e.msg : "decoded");
	free(p);

	static const uint8_t junk[] = "GIF89a not one of ours";
	is_int(dp_image_format_of(junk, sizeof junk), DP_IMAGE_UNKNOWN, "GIF: not a format of ours");
	rc = dp_image_decode(x, junk, sizeof junk, 3, 1, 0, &out, &w, &h, &e);
	ok(rc == DP_EDATA && strstr(e.msg, "not an image file"), "GIF: refused, \"not an image file\" (%s)",
	   e.msg);
}

/* ---- the resampler -------------------------------------------------------------- */

static int near(float a, double b, double tol) { return fabs(a - b) <= tol; }

static void test_resample(dp_image_dec *x)
{
	/* one row [0 10 20 30] to 2 pixels.  Antialiased (Pillow): scale 2,
	 * support 2, output 0 centred at 1.0 takes inputs 0..2 with triangle
	 * weights 1 - |(k + 0.5 - 1) / 2| = .75 .75 .25, normalised:
	 * (0 * .75 + 10 * .75 + 20 * .25) / 1.75 = 12.5 / 1.75; output 1 at 3.0
	 * takes 1..3: .25 .75 .75 -> 40 / 1.75.  Without antialias (torch's
	 * bilinear): two taps at 0.5 and 2.5 -> 5 and 25. */
	const uint8_t row[4] = {0, 10, 20, 30};
	float o[2];
	dp_err e;
	int rc = dp_image_resample(x, row, 4, 1, 1, 0, 0, 4, 1, 2, 1, 1, o, &e);
	ok(rc == DP_OK && near(o[0], 12.5 / 1.75, 1e-4) && near(o[1], 40 / 1.75, 1e-4),
	   "4 -> 2 antialiased: 7.142857 22.857143 (got %.6f %.6f)", o[0], o[1]);
	rc = dp_image_resample(x, row, 4, 1, 1, 0, 0, 4, 1, 2, 1, 0, o, &e);
	ok(rc == DP_OK && near(o[0], 5, 1e-4) && near(o[1], 25, 1e-4),
	   "4 -> 2 with 2x2 taps: 5 25 (got %.6f %.6f)", o[0], o[1]);

	/* a box of whole pixels at scale 1 is a crop: pixels as they are */
	uint8_t img[4][6][3];
	for (int y = 0; y < 4; y++)
		for (int i = 0; i < 6; i++)
			for (int c = 0; c < 3; c++)
				img[y][i][c] = (uint8_t)(40 * y + 6 * i + c);
	float crop[2][3][3];
	rc = dp_image_resample(x, &img[0][0][0], 6, 4, 3, 2, 1, 5, 3, 3, 2, 1, &crop[0][0][0], &e);
	int same = rc == DP_OK;
	for (int y = 0; y < 2; y++)
		for (int i = 0; i < 3; i++)
			for (int c = 0; c < 3; c++)
				same &= crop[y][i][c] == img[y + 1][i + 2][c];
	ok(same, "the box (2,1)-(5,3) at scale 1: the pixels of that crop, exactly");

	/* a half-pixel shift at scale 1: the mean of the two neighbours */
	float s3[3];
	rc = dp_image_resample(x, row, 4, 1, 1, 0.5, 0, 3.5, 1, 3, 1, 1, s3, &e);
	ok(rc == DP_OK && near(s3[0], 5, 1e-4) && near(s3[1], 15, 1e-4) && near(s3[2], 25, 1e-4),
	   "the box shifted by half a pixel: 5 15 25 (got %.4f %.4f %.4f)", s3[0], s3[1], s3[2]);
}

/* ---- the center crop, through dp_image_transform -------------------------------- */

static void test_center(dp_image_dec *x)
{
	/* 8x4 gray, pixel (y, i) = 30 i + y.  Shorter side 4 to resize 4 (scale
	 * 1), then the 4x4 center: columns (8 - 4) / 2 = 2 .. 5, as they are. */
	enum { W = 8, H = 4 };
	uint8_t g[H][W];
	for (int y = 0; y < H; y++)
		for (int i = 0; i < W; i++)
			g[y][i] = (uint8_t)(30 * i + y);
	size_t n;
	uint8_t *p = png(&g[0][0], W, H, 1, &n);
	dp_image_tf t;
	dp_image_tf_init(&t);
	t.channels = 1, t.height = 4, t.width = 4, t.crop = DP_CROP_CENTER, t.resize = 4;
	dp_err e;
	is_int(dp_image_tf_check(&t, &e), DP_OK, "center crop 4x4 after resize 4: a valid transform");
	float out[4][4];
	int rc = dp_image_transform(x, p, n, &t, 1, &out[0][0], &e);
	int same = rc == DP_OK;
	for (int y = 0; y < 4; y++)
		for (int i = 0; i < 4; i++)
			same &= out[y][i] == g[y][i + 2];
	ok(same, "8x4 -> resize 4 -> center 4x4: columns 2 to 5, exactly");

	/* normalisation: (pixel * scale - mean) / std */
	t.scale = 1.0f / 255, t.mean[0] = 0.5f, t.std[0] = 0.25f;
	rc = dp_image_transform(x, p, n, &t, 1, &out[0][0], &e);
	ok(rc == DP_OK && near(out[1][3], (g[1][5] / 255.0 - 0.5) / 0.25, 1e-5),
	   "normalised: (p / 255 - 0.5) / 0.25 (got %.6f)", out[1][3]);

	/* resize 0: the larger output side / 0.875, floored: 4 / 0.875 = 4.57
	 * -> 4, the same crop */
	dp_image_tf_init(&t);
	t.channels = 1, t.height = 4, t.width = 4, t.crop = DP_CROP_CENTER;
	rc = dp_image_transform(x, p, n, &t, 1, &out[0][0], &e);
	ok(rc == DP_OK && out[0][0] == g[0][2] && out[3][3] == g[3][5],
	   "resize 0: floor(4 / 0.875) = 4, the same center crop");

	/* horizontal flip is drawn per seed: some seed flips, and then the row
	 * is reversed */
	t.flip = 1;
	int flipped = 0;
	for (uint64_t seed = 1; seed < 64 && !flipped; seed++) {
		rc = dp_image_transform(x, p, n, &t, seed, &out[0][0], &e);
		flipped = rc == DP_OK && out[0][0] == g[0][5];
	}
	ok(flipped && out[0][3] == g[0][2], "flip: some seed of 64 reverses the crop's columns");
	free(p);
}

/* ---- options ---------------------------------------------------------------------- */

static void test_options(void)
{
	dp_image_tf t, u;
	dp_err e;
	dp_image_tf_init(&t);
	t.channels = 3, t.height = t.width = 224;
	is_int(dp_image_opt(&t, "mean", "0.485,0.456,0.406", &e), DP_OK, "--mean of three values");
	is_int(dp_image_opt(&t, "std", "0.5", &e), DP_OK, "--std of one value");
	ok(t.std[0] == 0.5f && t.std[1] == 0.5f && t.std[2] == 0.5f, "... given to every channel");
	is_int(dp_image_opt(&t, "augment", "random-resized-crop,scale=0.2:1,flip", &e), DP_OK,
	       "--augment random-resized-crop,scale=0.2:1,flip");
	ok(t.crop == DP_CROP_RANDOM && t.scale_min == 0.2 && t.scale_max == 1 && t.flip,
	   "... a random crop of 0.2 to 1 of the area, flipped");
	char spec[512];
	is_int(dp_image_spec(&t, spec, sizeof spec), DP_OK, "the options as one line: %s", spec);
	dp_image_tf_init(&u);
	u.channels = 3, u.height = u.width = 224;
	is_int(dp_image_spec_parse(&u, spec, &e), DP_OK, "... read back");
	ok(u.crop == t.crop && u.scale_min == t.scale_min && u.flip == t.flip &&
	   u.mean[1] == t.mean[1] && u.std[2] == t.std[2],
	   "... the same transform");
	dp_image_tf ev;
	dp_image_tf_eval(&t, &ev);
	ok(ev.crop == DP_CROP_CENTER && !ev.flip && !ev.pad,
	   "its evaluation transform: center crop, no flip, no padding");
	int rc = dp_image_opt(&t, "mean", "0.5,x", &e);
	ok(rc == DP_EARG && strstr(e.msg, "--mean"), "--mean 0.5,x: refused naming the option (%s)", e.msg);
	rc = dp_image_opt(&t, "augment", "sideways", &e);
	ok(rc == DP_EARG && strstr(e.msg, "sideways"), "--augment sideways: refused naming it (%s)", e.msg);
	t.scale_min = 0.9, t.scale_max = 0.1;
	ok(dp_image_tf_check(&t, &e) == DP_EARG, "crop scale 0.9..0.1: refused (%s)", e.msg);
}

/* ---- a JPEG made by Pillow -------------------------------------------------------- */

static void test_jpeg(dp_image_dec *x)
{
	const char *src = getenv("DP_SRC");
	char cmd[4096];
	snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/image_ref.py 2>/dev/null", src ? src : ".");
	FILE *f = popen(cmd, "r");
	uint32_t n = 0;
	if (!f || fread(&n, 4, 1, f) != 1 || n == 0 || n > 1 << 20) {
		if (f)
			pclose(f);
		printf("# skip: the JPEG checks: no reference (python3 with numpy and PIL: "
		       "scripts/deps --test)\n");
		return;
	}
	uint8_t *j = malloc(n), rgb[8][16][3], gray[8][16];
	float small[3][5];
	int got = fread(j, 1, n, f) == n && fread(rgb, 1, sizeof rgb, f) == sizeof rgb &&
		  fread(gray, 1, sizeof gray, f) == sizeof gray &&
		  fread(small, 1, sizeof small, f) == sizeof small;
	ok(pclose(f) == 0 && got, "tests/image_ref.py: a JPEG of %u bytes and Pillow's pixels", n);

	dp_image_info in;
	dp_err e;
	int rc = dp_image_probe(j, n, &in, &e);
	ok(rc == DP_OK && in.format == DP_IMAGE_JPEG && in.width == 16 && in.height == 8 &&
	   in.channels == 3,
	   "JPEG: probe says 16x8, 3 channels");
	const uint8_t *px;
	uint32_t w, h;
	rc = dp_image_decode(x, j, n, 3, 1, 0, &px, &w, &h, &e);
	int diff = rc == DP_OK ? 0 : -1;
	for (size_t i = 0; rc == DP_OK && i < sizeof rgb; i++)
		diff += px[i] != (&rgb[0][0][0])[i];
	ok(rc == DP_OK && w == 16 && h == 8 && diff == 0,
	   "JPEG to RGB: Pillow's pixels, all 384 samples (%d differ)", diff);
	rc = dp_image_decode(x, j, n, 1, 1, 0, &px, &w, &h, &e);
	ok(rc == DP_OK && !memcmp(px, gray, sizeof gray), "JPEG to gray: Pillow's convert(\"L\")");
	rc = dp_image_decode(x, j, n, 3, 2, 0, &px, &w, &h, &e);
	ok(rc == DP_OK && w == 8 && h == 4, "JPEG at 1/2 scale: 8x4 (got %ux%u)", w, h);

	/* the red plane's box (1.5, 0.5)-(14, 7.5) to 5x3, against Pillow */
	uint8_t red[8][16];
	for (int y = 0; y < 8; y++)
		for (int i = 0; i < 16; i++)
			red[y][i] = rgb[y][i][0];
	float o[3][5];
	rc = dp_image_resample(x, &red[0][0], 16, 8, 1, 1.5, 0.5, 14, 7.5, 5, 3, 1, &o[0][0], &e);
	double worst = 0;
	for (int y = 0; y < 3; y++)
		for (int i = 0; i < 5; i++)
			worst = fmax(worst, fabs(o[y][i] - small[y][i]));
	ok(rc == DP_OK && worst < 1e-3,
	   "a fractional box resized to 5x3: Pillow's float BILINEAR (worst %.2g)", worst);

	/* every cut of the JPEG short of its end marker's last byte is refused,
	 * and the whole still decodes after them through the same decoder */
	int refused = 0, tried = 0;
	for (uint32_t cut = 0; cut + 1 < n; cut += 7, tried++) {
		rc = dp_image_decode(x, j, cut, 3, 1, 0, &px, &w, &h, &e);
		refused += rc == DP_EDATA;
	}
	ok(refused == tried, "JPEG cut at every 7th byte: all %d refused as data (%d were)", tried,
	   refused);
	rc = dp_image_decode(x, j, n - n / 3, 3, 1, 0, &px, &w, &h, &e);
	like(rc < 0 ? e.msg : "", "JPEG: ", "... with libjpeg's reason (%s)", rc < 0 ? e.msg : "decoded");
	rc = dp_image_decode(x, j, n, 3, 1, 0, &px, &w, &h, &e);
	ok(rc == DP_OK && !memcmp(px, rgb, sizeof rgb), "... and the whole decodes after them");
	free(j);
}

int main(void)
{
	dp_image_dec *x = dp_image_dec_new();
	ok(x != NULL, "a decoder");
	test_png(x);
	test_resample(x);
	test_center(x);
	test_options();
	test_jpeg(x);
	dp_image_dec_free(x);
	return done_testing();
}
