/*
 * options.c - the image options of dp-train and dp-eval (--mean, --std,
 * --augment, --resize, --max-pixels) into a dp_image_tf, and back to one
 * line for a checkpoint's metadata (dp_image.h).
 */
#include "dp_image.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dp_image_tf_init(dp_image_tf *t)
{
	memset(t, 0, sizeof *t);
	t->antialias = 1;
	t->dct = 1;
	for (int i = 0; i < 3; i++)
		t->std[i] = 1;
}

/* "a" or "a,b,c" into v[3] (one value: all three). */
static int floats3(const char *opt, const char *s, float v[3], int positive, dp_err *e)
{
	double x[3];
	int n = 0;
	const char *p = s;
	for (;;) {
		char *end;
		errno = 0;
		if (n == 3)
			return dp_seterr(e, DP_EARG, "--%s '%s': at most 3 values (one per channel)",
					 opt, s);
		x[n] = strtod(p, &end);
		if (end == p || errno || !isfinite(x[n]) || (positive && !(x[n] > 0)))
			return dp_seterr(e, DP_EARG, "--%s '%s': want %snumbers, one or one per "
					 "channel (0.485,0.456,0.406)", opt, s,
					 positive ? "positive " : "");
		n++;
		if (!*end)
			break;
		if (*end != ',')
			return dp_seterr(e, DP_EARG, "--%s '%s': numbers apart by commas", opt, s);
		p = end + 1;
	}
	if (n == 2)
		return dp_seterr(e, DP_EARG, "--%s '%s': give 1 or 3 values", opt, s);
	for (int i = 0; i < 3; i++)
		v[i] = (float)x[n == 1 ? 0 : i];
	return DP_OK;
}

/* "A:B" with 0 < A <= B (and B <= max when max > 0). */
static int range(const char *what, const char *s, double max, double *a, double *b, dp_err *e)
{
	char *end;
	errno = 0;
	*a = strtod(s, &end);
	if (*end == ':')
		*b = strtod(end + 1, &end);
	if (*end || errno || !(*a > 0) || !(*a <= *b) || !isfinite(*b) || (max > 0 && *b > max))
		return dp_seterr(e, DP_EARG, "--augment %s='%s': want MIN:MAX, 0 < MIN <= MAX%s", what,
				 s, max > 0 ? " <= 1" : "");
	return DP_OK;
}

static int count(const char *opt, const char *s, uint64_t max, uint64_t *v, dp_err *e)
{
	return dp_parse_count(opt, s, 1, max, v, e);
}

/* Call fn with each NAME[=VALUE] item of list (items apart by sep): NAME,
 * and VALUE or NULL without '='; until one fails, its status returned. */
static int each_item(const char *list, const char *sep,
		     int (*fn)(void *ctx, const char *name, const char *val, dp_err *e), void *ctx,
		     dp_err *e)
{
	char *copy = strdup(list), *save = NULL;
	if (!copy)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	int rc = DP_OK;
	for (char *it = strtok_r(copy, sep, &save); it && rc == DP_OK;
	     it = strtok_r(NULL, sep, &save)) {
		char *val = strchr(it, '=');
		if (val)
			*val++ = 0;
		rc = fn(ctx, it, val, e);
	}
	free(copy);
	return rc;
}

static int augment_item(void *ctx, const char *it, const char *val, dp_err *e)
{
	dp_image_tf *t = ctx;
	uint64_t n;
	int rc = DP_OK;
	if (!strcmp(it, "random-resized-crop") && !val)
		t->crop = DP_CROP_RANDOM;
	else if (!strcmp(it, "flip") && !val)
		t->flip = 1;
	else if (!strcmp(it, "none") && !val)
		;
	else if (!strcmp(it, "crop-pad") && val &&
		 (rc = count("--augment crop-pad", val, 4096, &n, e)) == DP_OK)
		t->pad = (uint32_t)n;
	else if (!strcmp(it, "scale") && val)
		rc = range("scale", val, 1, &t->scale_min, &t->scale_max, e);
	else if (!strcmp(it, "ratio") && val)
		rc = range("ratio", val, 0, &t->ratio_min, &t->ratio_max, e);
	else if (rc == DP_OK)
		rc = dp_seterr(e, DP_EARG,
			       "--augment '%s%s%s': want a list of random-resized-crop, "
			       "scale=MIN:MAX, ratio=MIN:MAX, crop-pad=N, flip, none",
			       it, val ? "=" : "", val ? val : "");
	return rc;
}

static int augment(dp_image_tf *t, const char *spec, dp_err *e)
{
	t->crop = DP_CROP_NONE;
	t->pad = 0;
	t->flip = 0;
	t->scale_min = t->scale_max = t->ratio_min = t->ratio_max = 0;
	int rc = each_item(spec, ",", augment_item, t, e);
	if (rc == DP_OK && (t->scale_max || t->ratio_max) && t->crop != DP_CROP_RANDOM)
		rc = dp_seterr(e, DP_EARG, "--augment: scale= and ratio= go with random-resized-crop");
	return rc;
}

int dp_image_opt(dp_image_tf *t, const char *name, const char *value, dp_err *e)
{
	uint64_t n;
	int rc;
	if (!strcmp(name, "mean"))
		return floats3(name, value, t->mean, 0, e);
	if (!strcmp(name, "std"))
		return floats3(name, value, t->std, 1, e);
	if (!strcmp(name, "augment"))
		return augment(t, value, e);
	if (!strcmp(name, "resize")) {
		if ((rc = count("--resize", value, 65536, &n, e)) < 0)
			return rc;
		t->resize = (uint32_t)n;
		return DP_OK;
	}
	if (!strcmp(name, "max-pixels")) {
		if ((rc = count("--max-pixels", value, UINT64_MAX, &n, e)) < 0)
			return rc;
		t->max_pixels = n;
		return DP_OK;
	}
	return dp_seterr(e, DP_EARG, "unknown image option '%s'", name);
}

int dp_image_spec(const dp_image_tf *t, char *buf, size_t len)
{
	dp_buf b = DP_BUF_INIT;
	dp_buf_printf(&b, "mean=%.9g,%.9g,%.9g;std=%.9g,%.9g,%.9g", t->mean[0], t->mean[1],
		      t->mean[2], t->std[0], t->std[1], t->std[2]);
	if (t->crop == DP_CROP_RANDOM || t->flip || t->pad) {
		const char *sep = "";
		dp_buf_addstr(&b, ";augment=");
		if (t->crop == DP_CROP_RANDOM) {
			dp_buf_addstr(&b, "random-resized-crop");
			if (t->scale_max)
				dp_buf_printf(&b, ",scale=%.9g:%.9g", t->scale_min, t->scale_max);
			if (t->ratio_max)
				dp_buf_printf(&b, ",ratio=%.9g:%.9g", t->ratio_min, t->ratio_max);
			sep = ",";
		}
		if (t->pad) {
			dp_buf_printf(&b, "%scrop-pad=%u", sep, t->pad);
			sep = ",";
		}
		if (t->flip)
			dp_buf_printf(&b, "%sflip", sep);
	}
	if (t->resize)
		dp_buf_printf(&b, ";resize=%u", t->resize);
	if (t->max_pixels)
		dp_buf_printf(&b, ";max-pixels=%llu", (unsigned long long)t->max_pixels);
	int rc = b.err ? b.err : b.len < len ? DP_OK : DP_ELIMIT;
	if (rc == DP_OK)
		memcpy(buf, b.p, b.len + 1);
	dp_buf_free(&b);
	return rc;
}

struct spec_ctx {
	dp_image_tf *t;
	const char *spec;
};

static int spec_item(void *ctx, const char *name, const char *val, dp_err *e)
{
	const struct spec_ctx *c = ctx;
	if (!val)
		return dp_seterr(e, DP_EDATA, "image options '%s': want NAME=VALUE;...", c->spec);
	return dp_image_opt(c->t, name, val, e);
}

int dp_image_spec_parse(dp_image_tf *t, const char *spec, dp_err *e)
{
	struct spec_ctx c = {t, spec};
	return each_item(spec, ";", spec_item, &c, e);
}

void dp_image_tf_eval(const dp_image_tf *train, dp_image_tf *ev)
{
	*ev = *train;
	ev->crop = train->resize || train->crop == DP_CROP_RANDOM ? DP_CROP_CENTER : DP_CROP_NONE;
	ev->pad = 0;
	ev->flip = 0;
}
