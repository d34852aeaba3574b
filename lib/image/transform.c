/*
 * transform.c - resize, crops, flip and normalisation of decoded images
 * (dp_image.h).
 *
 * The resampler is Pillow's (libImaging/Resample.c): separable, for each
 * output pixel a triangle filter centred on (i + 0.5) * scale in the box,
 * support max(scale, 1) with antialias (1 without), weights normalised
 * over the taps that fall inside the image.  Here in float: horizontal
 * pass over the rows the box needs, then vertical.
 *
 * dp_image_transform finds the region first (from the header alone, so a
 * JPEG much larger than it can be decoded DCT-scaled), decodes, resamples
 * the region to the output size, and writes the output through the
 * padding crop, the flip and the normalisation in one pass.
 */
#include "dp_image.h"
#include "dp_rng.h"
#include "image_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The taps of one axis (see img_taps) for out_size outputs from
 * [in0, in1) of in_size inputs. */
static int coeffs(size_t in_size, double in0, double in1, uint32_t out_size, int antialias,
		  img_taps *tp)
{
	double scale = (in1 - in0) / out_size;
	double fs = antialias && scale > 1 ? scale : 1;
	double support = fs;
	int ks = (int)ceil(support) * 2 + 1;
	size_t nk = (size_t)out_size * ks, nb = (size_t)out_size * 2;
	if (img_grow((void **)&tp->k, &tp->cap, nk * sizeof(float) + nb * sizeof(int)) < 0)
		return DP_ENOMEM;
	tp->b = (int *)(void *)(tp->k + nk);
	tp->ks = ks;
	float *k = tp->k;
	int *b = tp->b;
	for (uint32_t i = 0; i < out_size; i++) {
		double center = in0 + (i + 0.5) * scale, ww = 0, ss = 1.0 / fs;
		int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
		if (xmin < 0)
			xmin = 0;
		if (xmax > (int)in_size)
			xmax = (int)in_size;
		xmax -= xmin;
		if (xmax > ks)
			xmax = ks;
		float *kk = k + (size_t)i * ks;
		for (int x = 0; x < xmax; x++) {
			double t = fabs((x + xmin - center + 0.5) * ss);
			double v = t < 1 ? 1 - t : 0;
			kk[x] = (float)v;
			ww += v;
		}
		for (int x = 0; x < xmax; x++)
			kk[x] = ww != 0 ? (float)(kk[x] / ww) : 0;
		for (int x = xmax; x < ks; x++)
			kk[x] = 0;
		b[2 * i] = xmin;
		b[2 * i + 1] = xmax;
	}
	return DP_OK;
}

/* The inputs [*lo, *hi) that the n outputs of tp read. */
static void taps_span(const img_taps *tp, uint32_t n, int *lo, int *hi)
{
	*lo = tp->b[0];
	*hi = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (tp->b[2 * i] < *lo)
			*lo = tp->b[2 * i];
		if (tp->b[2 * i] + tp->b[2 * i + 1] > *hi)
			*hi = tp->b[2 * i] + tp->b[2 * i + 1];
	}
}

/* RGB: each pixel as a vector of 4 floats (r, g, b, 0), so that a tap is
 * one vector multiply-add (GCC's and Clang's vector extension). */
typedef float v4f __attribute__((vector_size(16)));

/* Where resample3 writes: (oh, ow, 3) as they are, or, given a pack,
 * (3, oh, ow) normalised and maybe flipped (the transform's last step
 * folded in, when there is no padding crop). */
typedef struct pack {
	float mul[3], add[3];
	int flip;
} pack;

static int resample3(dp_image_dec *x, const uint8_t *src, uint32_t w, int r0, int r1,
		     uint32_t ow, uint32_t oh, float *out, const pack *pk, dp_err *e)
{
	const img_taps *tx = &x->tx, *ty = &x->ty;
	int c0, c1; /* the input columns the taps read */
	taps_span(tx, ow, &c0, &c1);
	size_t wide = (size_t)(w > ow ? w : ow);
	if (img_grow((void **)&x->tmp, &x->tmpcap, (size_t)(r1 - r0) * ow * sizeof(v4f)) < 0 ||
	    img_grow((void **)&x->f2, &x->f2cap, wide * sizeof(v4f)) < 0)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	v4f *rowf = (v4f *)(void *)x->f2, *tmp = (v4f *)(void *)x->tmp;
	for (int y = r0; y < r1; y++) {
		const uint8_t *s = src + (size_t)y * w * 3;
		for (int i = c0; i < c1; i++)
			rowf[i] = (v4f){s[3 * i], s[3 * i + 1], s[3 * i + 2], 0};
		v4f *t = tmp + (size_t)(y - r0) * ow;
		for (uint32_t i = 0; i < ow; i++) {
			const float *k = tx->k + (size_t)i * tx->ks;
			const v4f *p = rowf + tx->b[2 * i];
			int n = tx->b[2 * i + 1];
			v4f acc = {0, 0, 0, 0};
			for (int j = 0; j < n; j++)
				acc += k[j] * p[j];
			t[i] = acc;
		}
	}
	for (uint32_t i = 0; i < oh; i++) {
		const float *k = ty->k + (size_t)i * ty->ks;
		const v4f *t0 = tmp + (size_t)(ty->b[2 * i] - r0) * ow;
		int n = ty->b[2 * i + 1];
		for (uint32_t j = 0; j < ow; j++)
			rowf[j] = (v4f){0, 0, 0, 0};
		for (int r = 0; r < n; r++) {
			const v4f *t = t0 + (size_t)r * ow;
			float kr = k[r];
			for (uint32_t j = 0; j < ow; j++)
				rowf[j] += kr * t[j];
		}
		if (pk) {
			size_t plane = (size_t)oh * ow;
			for (int ch = 0; ch < 3; ch++) {
				float *o = out + ch * plane + (size_t)i * ow, m = pk->mul[ch], a = pk->add[ch];
				if (pk->flip)
					for (uint32_t j = 0; j < ow; j++)
						o[ow - 1 - j] = rowf[j][ch] * m + a;
				else
					for (uint32_t j = 0; j < ow; j++)
						o[j] = rowf[j][ch] * m + a;
			}
			continue;
		}
		float *o = out + (size_t)i * ow * 3;
		for (uint32_t j = 0; j < ow; j++) {
			o[3 * j] = rowf[j][0];
			o[3 * j + 1] = rowf[j][1];
			o[3 * j + 2] = rowf[j][2];
		}
	}
	return DP_OK;
}

static int resample(dp_image_dec *x, const uint8_t *src, uint32_t w, uint32_t h, int c, double x0,
		    double y0, double x1, double y1, uint32_t ow, uint32_t oh, int antialias, float *out,
		    const pack *pk, dp_err *e)
{
	/* the whole image at its own size: the pixels themselves */
	if (!pk && x0 == 0 && y0 == 0 && x1 == w && y1 == h && ow == w && oh == h) {
		size_t n = (size_t)w * h * c;
		for (size_t i = 0; i < n; i++)
			out[i] = src[i];
		return DP_OK;
	}
	const img_taps *tx = &x->tx, *ty = &x->ty;
	if (coeffs(w, x0, x1, ow, antialias, &x->tx) < 0 ||
	    coeffs(h, y0, y1, oh, antialias, &x->ty) < 0)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	int r0, r1; /* the input rows the vertical pass reads */
	taps_span(ty, oh, &r0, &r1);
	if (r1 <= r0)
		r1 = r0 + 1;
	if (c == 3)
		return resample3(x, src, w, r0, r1, ow, oh, out, pk, e);
	size_t rowlen = (size_t)ow * c;
	if (img_grow((void **)&x->tmp, &x->tmpcap, (size_t)(r1 - r0) * rowlen * sizeof(float)) < 0)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	/* horizontal: (r1 - r0, ow, c) */
	for (int y = r0; y < r1 && y < (int)h; y++) {
		const uint8_t *s = src + (size_t)y * w * c;
		float *t = x->tmp + (size_t)(y - r0) * rowlen;
		for (uint32_t i = 0; i < ow; i++) {
			const float *k = tx->k + (size_t)i * tx->ks;
			int xmin = tx->b[2 * i], n = tx->b[2 * i + 1];
			const uint8_t *p = s + (size_t)xmin * c;
			for (int ch = 0; ch < c; ch++) {
				float acc = 0;
				for (int j = 0; j < n; j++)
					acc += k[j] * p[c * j + ch];
				t[(size_t)i * c + ch] = acc;
			}
		}
	}
	/* vertical: (oh, ow, c) */
	for (uint32_t i = 0; i < oh; i++) {
		const float *k = ty->k + (size_t)i * ty->ks;
		int ymin = ty->b[2 * i], n = ty->b[2 * i + 1];
		float *o = out + (size_t)i * rowlen;
		const float *t0 = x->tmp + (size_t)(ymin - r0) * rowlen;
		for (size_t j = 0; j < rowlen; j++)
			o[j] = 0;
		for (int r = 0; r < n; r++) {
			const float *t = t0 + (size_t)r * rowlen;
			float kr = k[r];
			for (size_t j = 0; j < rowlen; j++)
				o[j] += kr * t[j];
		}
	}
	return DP_OK;
}

int dp_image_resample(dp_image_dec *x, const uint8_t *src, uint32_t w, uint32_t h, int c,
		      double x0, double y0, double x1, double y1, uint32_t ow, uint32_t oh,
		      int antialias, float *out, dp_err *e)
{
	return resample(x, src, w, h, c, x0, y0, x1, y1, ow, oh, antialias, out, NULL, e);
}

int dp_image_tf_check(const dp_image_tf *t, dp_err *e)
{
	if (t->channels != 1 && t->channels != 3)
		return dp_seterr(e, DP_EARG, "images have 1 or 3 channels, not %d", t->channels);
	if (!t->height || !t->width || t->height > 65536 || t->width > 65536)
		return dp_seterr(e, DP_EARG, "output size %ux%u: want 1 to 65536 a side", t->width,
				 t->height);
	if (t->crop < DP_CROP_NONE || t->crop > DP_CROP_RANDOM)
		return dp_seterr(e, DP_EARG, "unknown crop %d", t->crop);
	if (t->scale_min || t->scale_max)
		if (!(t->scale_min > 0 && t->scale_min <= t->scale_max && t->scale_max <= 1))
			return dp_seterr(e, DP_EARG, "crop scale %g..%g: want 0 < min <= max <= 1",
					 t->scale_min, t->scale_max);
	if (t->ratio_min || t->ratio_max)
		if (!(t->ratio_min > 0 && t->ratio_min <= t->ratio_max && isfinite(t->ratio_max)))
			return dp_seterr(e, DP_EARG, "crop ratio %g..%g: want 0 < min <= max",
					 t->ratio_min, t->ratio_max);
	if (t->pad > 4096)
		return dp_seterr(e, DP_EARG, "padding %u: at most 4096", t->pad);
	for (int i = 0; i < t->channels; i++)
		if (!isfinite(t->mean[i]) || !isfinite(t->std[i]) || t->std[i] < 0)
			return dp_seterr(e, DP_EARG, "mean/std of channel %d: want finite, std > 0", i);
	return DP_OK;
}

/* A uniform double in [a, b). */
static double uniform(dp_rng *r, double a, double b)
{
	return a + (b - a) * ((double)(dp_rng_next(r) >> 11) * (1.0 / 9007199254740992.0));
}

/* torchvision's RandomResizedCrop.get_params on a w x h image: the box
 * (left, top, width, height). */
static void rrc_box(const dp_image_tf *t, uint32_t W, uint32_t H, dp_rng *r, double box[4])
{
	double s0 = t->scale_max ? t->scale_min : 0.08, s1 = t->scale_max ? t->scale_max : 1;
	double q0 = t->ratio_max ? t->ratio_min : 3.0 / 4, q1 = t->ratio_max ? t->ratio_max : 4.0 / 3;
	double area = (double)W * H;
	for (int k = 0; k < 10; k++) {
		double ta = area * uniform(r, s0, s1);
		double ar = exp(uniform(r, log(q0), log(q1)));
		long w = lrint(sqrt(ta * ar)), h = lrint(sqrt(ta / ar));
		if (w > 0 && w <= (long)W && h > 0 && h <= (long)H) {
			long i = (long)dp_rng_below(r, (uint64_t)(H - h + 1));
			long j = (long)dp_rng_below(r, (uint64_t)(W - w + 1));
			box[0] = (double)j, box[1] = (double)i, box[2] = (double)w, box[3] = (double)h;
			return;
		}
	}
	double in = (double)W / H;
	long w = W, h = H;
	if (in < q0)
		h = lrint(w / q0);
	else if (in > q1)
		w = lrint(h * q1);
	box[0] = (double)((W - w) / 2), box[1] = (double)((H - h) / 2);
	box[2] = (double)w, box[3] = (double)h;
}

/* torchvision's Resize(r) (shorter side to r) then CenterCrop(H, W), as a
 * box of the original image. */
static void center_box(const dp_image_tf *t, uint32_t W, uint32_t H, double box[4])
{
	uint32_t big = t->height > t->width ? t->height : t->width;
	double r = t->resize ? t->resize : floor(big / 0.875);
	double rw, rh;
	if (W <= H) {
		rw = r;
		rh = floor(r * H / W);
	} else {
		rh = r;
		rw = floor(r * W / H);
	}
	double cw = t->width < rw ? t->width : rw, ch = t->height < rh ? t->height : rh;
	double left = rint((rw - cw) / 2), top = rint((rh - ch) / 2);
	double sx = W / rw, sy = H / rh;
	box[0] = left * sx, box[1] = top * sy, box[2] = cw * sx, box[3] = ch * sy;
}

/* The width and height of the image in p, from its header. */
static int dims(const void *p, size_t n, uint32_t *w, uint32_t *h, dp_err *e)
{
	if (dp_image_format_of(p, n) == DP_IMAGE_JPEG) {
		int ch;
		return img_jpeg_header(p, n, w, h, &ch, e);
	}
	dp_image_info in;
	int rc = dp_image_probe(p, n, &in, e);
	*w = in.width;
	*h = in.height;
	return rc;
}

int dp_image_transform(dp_image_dec *x, const void *p, size_t n, const dp_image_tf *t,
		       uint64_t seed, float *out, dp_err *e)
{
	dp_rng r = {seed, 0};
	uint32_t W0 = 0, H0 = 0;
	int rc = dims(p, n, &W0, &H0, e);
	if (rc < 0)
		return rc;
	if (!W0 || !H0)
		return dp_seterr(e, DP_EDATA, "image of %ux%u pixels", W0, H0);
	double box[4] = {0, 0, W0, H0};
	if (t->crop == DP_CROP_RANDOM)
		rrc_box(t, W0, H0, &r, box);
	else if (t->crop == DP_CROP_CENTER)
		center_box(t, W0, H0, box);
	int den = 1;
	if (t->dct && dp_image_format_of(p, n) == DP_IMAGE_JPEG)
		while (den < 8 && box[2] / (2 * den) >= t->width && box[3] / (2 * den) >= t->height)
			den *= 2;
	uint32_t ow = t->width, oh = t->height;
	int c = t->channels;
	/* the box in the decoded image's pixels; a JPEG crop decoded alone,
	 * with a margin of the filter's reach (so that the same taps fall in) */
	uint32_t sw = (W0 + den - 1) / den, sh = (H0 + den - 1) / den, w, h, rx = 0, ry = 0;
	double fx = (double)sw / W0, fy = (double)sh / H0;
	double b0 = box[0] * fx, b1 = box[1] * fy, b2 = (box[0] + box[2]) * fx, b3 = (box[1] + box[3]) * fy;
	const uint8_t *px;
	if (t->crop != DP_CROP_NONE && dp_image_format_of(p, n) == DP_IMAGE_JPEG) {
		double mx = ceil((b2 - b0) / ow) + 1, my = ceil((b3 - b1) / oh) + 1;
		uint32_t x0 = b0 - mx > 0 ? (uint32_t)(b0 - mx) : 0;
		uint32_t y0 = b1 - my > 0 ? (uint32_t)(b1 - my) : 0;
		uint32_t x1 = (uint32_t)fmin(sw, ceil(b2 + mx)), y1 = (uint32_t)fmin(sh, ceil(b3 + my));
		if ((rc = dp_image_jpeg_region(x, p, n, c, den, t->max_pixels, x0, y0, x1, y1, &rx, &ry,
					       &w, &h, e)) < 0)
			return rc;
		px = x->px;
	} else if ((rc = dp_image_decode(x, p, n, c, den, t->max_pixels, &px, &w, &h, e)) < 0) {
		return rc;
	}
	/* the draws after the crop's: the padding crop's offsets, the flip */
	long ox = 0, oy = 0;
	if (t->pad) {
		oy = (long)dp_rng_below(&r, 2 * (uint64_t)t->pad + 1) - t->pad;
		ox = (long)dp_rng_below(&r, 2 * (uint64_t)t->pad + 1) - t->pad;
	}
	pack pk = {.flip = t->flip && dp_rng_unit(dp_rng_next(&r)) < 0.5f};
	float sc = t->scale ? t->scale : 1, *mul = pk.mul, *add = pk.add;
	for (int ch = 0; ch < c; ch++) {
		float sd = t->std[ch] ? t->std[ch] : 1;
		mul[ch] = sc / sd;
		add[ch] = -t->mean[ch] / sd;
	}
	double bx0 = b0 - rx, by0 = b1 - ry, bx1 = b2 - rx, by1 = b3 - ry;
	if (c == 3 && !t->pad && !t->hwc) /* straight into the output */
		return resample(x, px, w, h, c, bx0, by0, bx1, by1, ow, oh, t->antialias, out, &pk, e);
	size_t need = (size_t)ow * oh * c * sizeof(float);
	if (img_grow((void **)&x->f1, &x->f1cap, need) < 0)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	if ((rc = resample(x, px, w, h, c, bx0, by0, bx1, by1, ow, oh, t->antialias, x->f1, NULL, e)) < 0)
		return rc;
	int flip = pk.flip;
	/* out(y, x) = resized(y + oy, (flip ? ow - 1 - x : x) + ox), 0 outside;
	 * a row at a time, the columns that fall inside first */
	for (uint32_t y = 0; y < oh; y++) {
		long sy = (long)y + oy;
		const float *row = sy >= 0 && sy < (long)oh ? x->f1 + (size_t)sy * ow * c : NULL;
		for (int ch = 0; ch < c; ch++) {
			float m = mul[ch], a = add[ch];
			size_t step = t->hwc ? (size_t)c : 1;
			float *o = t->hwc ? out + (size_t)y * ow * c + ch : out + ((size_t)ch * oh + y) * ow;
			for (uint32_t xo = 0; xo < ow; xo++) {
				long sx = (long)(flip ? ow - 1 - xo : xo) + ox;
				float v = row && sx >= 0 && sx < (long)ow ? row[(size_t)sx * c + ch] : 0;
				o[xo * step] = v * m + a;
			}
		}
	}
	return DP_OK;
}
