/*
 * imgtool - libdp's image functions on one file, for tests/image.t to
 * compare with Pillow and torchvision.  Binary results go to stdout.
 *
 *   imgtool probe FILE                  format width height channels depth palette
 *   imgtool decode FILE C [DEN [MAXPX]] the pixels, (h, w, C) uint8
 *   imgtool resize FILE C OW OH AA [X0 Y0 X1 Y1]
 *                                       (OH, OW, C) float32 in 0..255
 *   imgtool transform FILE C H W CROP PAD FLIP SEED [DCT]
 *                                       (C, H, W) float32, CROP none|center|random
 *   imgtool cuts FILE C CROP            every prefix of FILE, each followed by the
 *                                       whole file, through one decoder (transform
 *                                       to 8x8): "cuts N refused R whole-failed F"
 */
#include "dp_image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint8_t *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		exit(1);
	}
	size_t cap = 1 << 16, len = 0;
	uint8_t *p = malloc(cap);
	size_t r;
	while ((r = fread(p + len, 1, cap - len, f)) > 0) {
		len += r;
		if (len == cap)
			p = realloc(p, cap *= 2);
	}
	fclose(f);
	*n = len;
	return p;
}

static uint8_t *p;     /* the file */
static dp_image_dec *x;

static int fail(const char *path, dp_err *e)
{
	fprintf(stderr, "imgtool: %s: %s\n", path, e->msg);
	dp_image_dec_free(x);
	free(p);
	return e->code == DP_ELIMIT ? 3 : 1;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: imgtool probe|decode|resize|transform FILE ...\n");
		return 2;
	}
	size_t n;
	p = slurp(argv[2], &n);
	dp_err e;
	x = dp_image_dec_new();
	const char *cmd = argv[1];
	if (!strcmp(cmd, "probe")) {
		dp_image_info in;
		if (dp_image_probe(p, n, &in, &e) < 0)
			return fail(argv[2], &e);
		printf("%s %u %u %d %d %d\n", dp_image_format_name(in.format), in.width, in.height,
		       in.channels, in.depth, in.palette);
	} else if (!strcmp(cmd, "decode") && argc >= 4) {
		const uint8_t *px;
		uint32_t w, h;
		int c = atoi(argv[3]);
		if (dp_image_decode(x, p, n, c, argc > 4 ? atoi(argv[4]) : 1,
				    argc > 5 ? strtoull(argv[5], NULL, 10) : 0, &px, &w, &h, &e) < 0)
			return fail(argv[2], &e);
		fprintf(stderr, "%u %u\n", w, h);
		fwrite(px, 1, (size_t)w * h * c, stdout);
	} else if (!strcmp(cmd, "resize") && argc >= 7) {
		const uint8_t *px;
		uint32_t w, h, ow = (uint32_t)atoi(argv[4]), oh = (uint32_t)atoi(argv[5]);
		int c = atoi(argv[3]);
		if (dp_image_decode(x, p, n, c, 1, 0, &px, &w, &h, &e) < 0)
			return fail(argv[2], &e);
		double b[4] = {0, 0, w, h};
		for (int i = 0; i < 4 && 7 + i < argc; i++)
			b[i] = atof(argv[7 + i]);
		float *out = malloc((size_t)ow * oh * c * sizeof *out);
		if (dp_image_resample(x, px, w, h, c, b[0], b[1], b[2], b[3], ow, oh, atoi(argv[6]), out,
				      &e) < 0) {
			free(out);
			return fail(argv[2], &e);
		}
		fwrite(out, sizeof *out, (size_t)ow * oh * c, stdout);
		free(out);
	} else if (!strcmp(cmd, "transform") && argc >= 10) {
		dp_image_tf t = {.channels = atoi(argv[3]),
				 .height = (uint32_t)atoi(argv[4]),
				 .width = (uint32_t)atoi(argv[5]),
				 .crop = !strcmp(argv[6], "center")   ? DP_CROP_CENTER
					 : !strcmp(argv[6], "random") ? DP_CROP_RANDOM
								      : DP_CROP_NONE,
				 .pad = (uint32_t)atoi(argv[7]),
				 .flip = atoi(argv[8]),
				 .antialias = 1,
				 .dct = argc > 10 ? atoi(argv[10]) : 0};
		if (dp_image_tf_check(&t, &e) < 0)
			return fail(argv[2], &e);
		size_t m = (size_t)t.channels * t.height * t.width;
		float *out = malloc(m * sizeof *out);
		if (dp_image_transform(x, p, n, &t, strtoull(argv[9], NULL, 10), out, &e) < 0) {
			free(out);
			return fail(argv[2], &e);
		}
		fwrite(out, sizeof *out, m, stdout);
		free(out);
	} else if (!strcmp(cmd, "cuts") && argc >= 5) {
		dp_image_tf t = {.channels = atoi(argv[3]), .height = 8, .width = 8, .antialias = 1,
				 .crop = !strcmp(argv[4], "center") ? DP_CROP_CENTER : DP_CROP_NONE};
		float out[3 * 8 * 8];
		size_t refused = 0, failed = 0;
		for (size_t k = 0; k < n; k++) {
			refused += dp_image_transform(x, p, k, &t, 1, out, &e) < 0;
			if (dp_image_transform(x, p, n, &t, 1, out, &e) < 0 && failed++ < 3)
				fprintf(stderr, "imgtool: after the first %zu bytes: %s\n", k, e.msg);
		}
		printf("cuts %zu refused %zu whole-failed %zu\n", n, refused, failed);
	} else {
		fprintf(stderr, "imgtool: bad arguments\n");
		return 2;
	}
	dp_image_dec_free(x);
	free(p);
	return 0;
}
