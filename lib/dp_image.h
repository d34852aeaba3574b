/*
 * dp_image.h - images: header probe, decode, and the transforms of an
 * image input pipeline (resize, crops, flip, normalise).
 *
 *   decode    JPEG through libjpeg-turbo's TurboJPEG API, PNG through
 *             libspng; what else torchvision's ImageFolder reads through
 *             the libraries made for it: WebP (libwebp), TIFF (libtiff),
 *             BMP and binary PPM/PGM (stb_image; lib/image/formats.c says
 *             which of their forms are refused).  Any stored form (grayscale, RGB, palette, 16-bit,
 *             alpha, CMYK JPEG) is converted to the 1 or 3 channels asked
 *             for: alpha is dropped (as Pillow's convert("RGB")), 16-bit
 *             samples keep their high byte, gray is repeated into RGB, RGB
 *             to gray is Pillow's ITU-R 601-2 luma (L = R*299/1000 +
 *             G*587/1000 + B*114/1000), for JPEG too: the pixels are
 *             Pillow's Image.open(f).convert(mode).  Pixels are as
 *             stored: EXIF orientation is not applied (as Pillow's
 *             Image.open and tf.io.decode_jpeg).  Truncated
 *             or corrupt data is an error (libjpeg's warnings included),
 *             with the decoder's own reason; so is a header of 0 pixels or
 *             of more than max_pixels (decompression bombs), and a
 *             JPEG whose scans do more than DP_IMAGE_MAX_SCAN_PASSES
 *             passes over its blocks (scan bombs).  Every JPEG is read
 *             by a decompressor of its own: one damaged file never
 *             affects the next.
 *   resize    bilinear, Pillow's resampler: a triangle filter whose support
 *             grows with the reduction when antialias is on (Pillow's
 *             Image.resize(BILINEAR), what torchvision does to PIL images),
 *             2x2 taps when it is off (torch's interpolate(bilinear,
 *             antialias=False)).  Computed in float, not rounded to 8 bits
 *             between the two passes.  A JPEG at least twice as large as
 *             the region needed is decoded at 1/2, 1/4 or 1/8 scale by the
 *             DCT first (Pillow's draft mode, DALI), when dct is set; of a
 *             JPEG crop only the region is decoded (its columns, and its
 *             rows: damage below the region goes unseen), as DALI's and
 *             tf.image.decode_and_crop_jpeg's.
 *   augment   RandomResizedCrop as torchvision's (area from scale, log-
 *             uniform aspect ratio from ratio, 10 tries, then a center
 *             crop at the nearest allowed ratio), random crop after zero
 *             padding (CIFAR), horizontal flip with probability 1/2; or,
 *             for evaluation, resize of the shorter side and center crop.
 *             Every random choice is drawn from the seed given per image
 *             (dp_rng.h), so an image's augmentation depends on nothing
 *             else (not on threads).
 *
 * Images in memory are 8-bit, row-major, channels last: (h, w, c).
 */
#ifndef DP_IMAGE_H
#define DP_IMAGE_H

#include "dp.h"
#include "dp_example.h"

#ifdef __cplusplus
extern "C" {
#endif

enum dp_image_format {
	DP_IMAGE_UNKNOWN = 0, DP_IMAGE_JPEG = 1, DP_IMAGE_PNG = 2, DP_IMAGE_WEBP = 3,
	DP_IMAGE_TIFF = 4, DP_IMAGE_BMP = 5, DP_IMAGE_PNM = 6
};

/* Pillow's Image.MAX_IMAGE_PIXELS: the default pixel limit. */
#define DP_IMAGE_MAX_PIXELS 89478485u
/* The bound on a JPEG's scans: together they may decode its blocks at
 * most this many times over (a progressive JPEG from libjpeg's default
 * script: about 5; a scan bomb: hundreds of scans over a large image,
 * seconds of CPU each decode).  More is DP_ELIMIT. */
#define DP_IMAGE_MAX_SCAN_PASSES 32

typedef struct dp_image_info {
	int format;             /* enum dp_image_format */
	uint32_t width, height;
	int channels;           /* as stored: 1 gray, 2 gray+alpha, 3 color,
				   4 color+alpha (PNG) or CMYK (JPEG) */
	int depth;              /* bits per sample (PNG: 1, 2, 4, 8, 16; JPEG 8) */
	int palette;            /* PNG: indexed color */
} dp_image_info;

/* The format from the first bytes; DP_IMAGE_UNKNOWN if none of them. */
DP_EXPORT int dp_image_format_of(const void *p, size_t n);
/* "jpeg", "png", "webp", "tiff", "bmp", "pnm", "unknown". */
DP_EXPORT const char *dp_image_format_name(int format);
/* Read the header only.  DP_EDATA with the decoder's reason ("not an image
 * file", "PNG: invalid signature"). */
DP_EXPORT int dp_image_probe(const void *p, size_t n, dp_image_info *info, dp_err *e);

/* A decoder with its buffers, for one thread at a time. */
typedef struct dp_image_dec dp_image_dec;
DP_EXPORT dp_image_dec *dp_image_dec_new(void);
DP_EXPORT void dp_image_dec_free(dp_image_dec *x);

/* Decode p[0..n) to channels (1 or 3) 8-bit samples.  scale_den 1, 2, 4
 * or 8 decodes a JPEG at 1/scale_den of its size (ceil), PNG always at
 * 1.  max_pixels 0: DP_IMAGE_MAX_PIXELS.  *px (h, w, channels), valid
 * until x's next use.  DP_EDATA (corrupt), DP_ELIMIT (too many pixels),
 * DP_ENOMEM. */
DP_EXPORT int dp_image_decode(dp_image_dec *x, const void *p, size_t n, int channels,
			      int scale_den, uint64_t max_pixels, const uint8_t **px, uint32_t *w,
			      uint32_t *h, dp_err *e);

/* What is done to an image before it is a sample. */
enum dp_image_crop {
	DP_CROP_NONE = 0,   /* the whole image resized to height x width */
	DP_CROP_CENTER = 1, /* shorter side resized to `resize`, then the center */
	DP_CROP_RANDOM = 2  /* RandomResizedCrop(scale, ratio) */
};

typedef struct dp_image_tf {
	int channels;            /* 1 or 3 */
	uint32_t height, width;  /* of the output */
	int crop;                /* enum dp_image_crop */
	uint32_t resize;         /* DP_CROP_CENTER; 0: the larger output side / 0.875
				    (256 for 224, torchvision's evaluation recipe) */
	double scale_min, scale_max; /* DP_CROP_RANDOM: area fraction; 0, 0: 0.08, 1 */
	double ratio_min, ratio_max; /* aspect ratio w/h; 0, 0: 3/4, 4/3 */
	uint32_t pad;            /* then a random crop of the output size after
				    padding each side with pad zeros */
	int flip;                /* then a horizontal flip, with probability 1/2 */
	int antialias;           /* see resize above */
	int dct;                 /* see resize above */
	uint64_t max_pixels;     /* 0: DP_IMAGE_MAX_PIXELS */
	float scale;             /* value = (pixel * scale - mean[c]) / std[c]; 0: 1 */
	float mean[3], std[3];   /* std 0: 1 */
	int hwc;                 /* output (h, w, c); else (c, h, w) */
} dp_image_tf;

/* Defaults: no crop, antialias and DCT scaling on, mean 0, std 1. */
DP_EXPORT void dp_image_tf_init(dp_image_tf *t);
/* One option of dp-train's and dp-eval's command line (the long name
 * without dashes), into t:
 *   mean M[,M,M], std S[,S,S]  per channel (one value: all channels)
 *   augment LIST   random-resized-crop, scale=MIN:MAX, ratio=MIN:MAX,
 *                  crop-pad=N, flip, none (replaces earlier ones)
 *   resize N       evaluation: shorter side to N, then the center crop
 *   max-pixels N   the pixel limit
 * DP_EARG with e saying "--mean 'x': ...". */
DP_EXPORT int dp_image_opt(dp_image_tf *t, const char *name, const char *value, dp_err *e);
/* t's options as one line "mean=...;std=...;augment=...;resize=N" (for a
 * checkpoint's metadata), and that line back.  DP_ELIMIT: buf too small. */
DP_EXPORT int dp_image_spec(const dp_image_tf *t, char *buf, size_t len);
DP_EXPORT int dp_image_spec_parse(dp_image_tf *t, const char *spec, dp_err *e);
/* The evaluation transform of a training one: no flip, no padding crop;
 * resize + center crop when training used random-resized-crop or a
 * resize was given, else the whole image resized. */
DP_EXPORT void dp_image_tf_eval(const dp_image_tf *train, dp_image_tf *ev);

/* Check t: DP_EARG with e saying what is wrong. */
DP_EXPORT int dp_image_tf_check(const dp_image_tf *t, dp_err *e);

/* Decode p[0..n) and transform it into out: channels * height * width
 * floats, in the layout of t.  seed draws the augmentation (dp_rng.h); the
 * same seed, the same output.  Errors as dp_image_decode. */
DP_EXPORT int dp_image_transform(dp_image_dec *x, const void *p, size_t n, const dp_image_tf *t,
				 uint64_t seed, float *out, dp_err *e);

/* Resample the box (x0, y0)-(x1, y1) (pixels, may be fractional) of src
 * (h, w, c) to out (oh, ow, c) floats in 0..255, as Pillow's
 * Image.resize(size, BILINEAR, box) (antialias 1) or with 2x2 taps
 * (antialias 0).  DP_ENOMEM. */
DP_EXPORT int dp_image_resample(dp_image_dec *x, const uint8_t *src, uint32_t w, uint32_t h, int c,
				double x0, double y0, double x1, double y1, uint32_t ow, uint32_t oh,
				int antialias, float *out, dp_err *e);

/* ---- Image records ------------------------------------------------------
 *
 * The layout of TensorFlow's image scripts (build_image_data.py) and TFDS,
 * tfrecord(5): image/encoded (the file's bytes), image/format ("JPEG",
 * "PNG"), image/height, image/width, image/channels (as stored),
 * image/class/label (classes numbered from 0 in sorted name order),
 * image/class/text, image/filename. */

/* A set of image files to encode: a folder with one subfolder per class
 * (torchvision's ImageFolder, Keras' image_dataset_from_directory: the
 * image files under each (dp_image_is_name), recursively, in byte order of
 * names; image/filename is the path under the folder; symbolic links
 * followed, each folder once: a link loop is an error, dp_walk), or a list file of
 * PATH,LABEL or PATH<TAB>LABEL lines (a header line with the label
 * "label" skipped, # comments; relative paths from the list's folder;
 * labels that are all numbers are the class numbers, names are numbered
 * in sorted order).  NULL on failure. */
typedef struct dp_image_set dp_image_set;
DP_EXPORT dp_image_set *dp_image_set_open(const char *path, dp_err *e);
DP_EXPORT size_t dp_image_set_size(const dp_image_set *s);
/* 1 when a file's name ends as torchvision's IMG_EXTENSIONS (the files its
 * ImageFolder takes: .jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp, any
 * case), else 0. */
DP_EXPORT int dp_image_is_name(const char *name);
/* Files of a folder that are not images by their names (dp_image_is_name;
 * nor class folders), and so not in the set: their number, and the first's
 * path under the folder (for a message). */
DP_EXPORT size_t dp_image_set_left_out(const dp_image_set *s, const char **example);
/* The classes, by number. */
DP_EXPORT size_t dp_image_set_nclasses(const dp_image_set *s);
DP_EXPORT const char *dp_image_set_class(const dp_image_set *s, size_t i);
/* The next image's Example: 1 with *rec, *len (valid until the next call)
 * and *file (its path, for messages), 0 at the end, or an error naming
 * the file (DP_EDATA for an unreadable header: the set has moved past it,
 * the caller may go on). */
DP_EXPORT int dp_image_set_next(dp_image_set *s, const uint8_t **rec, size_t *len,
				const char **file, dp_err *e);
DP_EXPORT void dp_image_set_close(dp_image_set *s);

/* The image of a parsed record: its feature `feature` (NULL:
 * "image/encoded"), one bytes value.  *name: a relative path to save it
 * under, from image/filename when that is one (no "..", not absolute),
 * else "INDEX.jpg" or "INDEX.png" from the record's index; it is
 * written into buf (len bytes).  DP_EDATA when there is no such bytes
 * feature. */
DP_EXPORT int dp_image_of_record(const dp_example *ex, const char *feature, uint64_t index,
				 const uint8_t **data, size_t *n, char *buf, size_t len,
				 dp_err *e);

#ifdef __cplusplus
}
#endif
#endif
