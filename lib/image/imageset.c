/*
 * imageset.c - image files to tf.train.Example records (dp_image.h,
 * dp_image_set): a folder with one subfolder per class, or a list file.
 *
 * The whole list is gathered and sorted first (so that class numbers are
 * known before the first record), then each file is read, its header
 * probed, and its bytes copied unchanged into an Example in the layout of
 * TensorFlow's image scripts (tfrecord(5)).  Only the header is read for
 * height, width and channels: damage further in shows when the image is
 * decoded (dp-train --skip-corrupt).
 */
#define _GNU_SOURCE
#include "dp_example.h"
#include "dp_image.h"
#include "image_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct item {
	char *path; /* to open */
	char *shown; /* path as messages quote it (dp_shown: escaped) */
	char *name; /* image/filename: relative to the folder, or as listed */
	size_t cls;
} item;

struct dp_image_set {
	item *it;
	size_t n, cap, next;
	char **cls;
	size_t ncls;
	int numeric; /* list labels were all numbers, used as they are */
	size_t left_out;   /* files of a folder that are not images */
	char *left_out_eg; /* the first of them */
	dp_buf file; /* the image file read last */
	dp_exbuild eb;
};

int dp_image_is_name(const char *s)
{
	static const char *const ext[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp",
					  ".pgm", ".tif", ".tiff", ".webp", NULL};
	const char *dot = strrchr(s, '.');
	for (const char *const *x = ext; dot && *x; x++)
		if (!strcasecmp(dot, *x))
			return 1;
	return 0;
}

static int add_item(dp_image_set *s, const char *path, const char *name, size_t cls, dp_err *e)
{
	if (dp_grow(&s->it, &s->cap, s->n + 1, sizeof *s->it) < 0)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	item *t = &s->it[s->n];
	t->path = strdup(path);
	t->shown = dp_shown(path, strlen(path));
	t->name = strdup(name);
	t->cls = cls;
	if (!t->path || !t->name || !t->shown) {
		free(t->path);
		free(t->shown);
		free(t->name);
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	}
	s->n++;
	return DP_OK;
}

static int add_class(dp_image_set *s, const char *name, dp_err *e)
{
	char **c = realloc(s->cls, (s->ncls + 1) * sizeof *c);
	if (!c)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	s->cls = c;
	if (!(c[s->ncls] = strdup(name)))
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	s->ncls++;
	return DP_OK;
}

/* The image files under dir, in byte order of their names, as
 * torchvision's ImageFolder finds them: at depth 0 each folder is a class
 * (files beside them are not images of any), below it every image file,
 * recursively, is one of the class above it, named by its path under the
 * top.  Other files are counted as left out (dp_image_set_left_out). */
static int walk_entry(void *ctx, const dp_walk_entry *w, dp_err *e)
{
	dp_image_set *s = ctx;
	if (S_ISDIR(w->st->st_mode))
		return w->depth == 0 ? add_class(s, w->name, e) : DP_OK;
	if (w->depth > 0 && S_ISREG(w->st->st_mode) && dp_image_is_name(w->name))
		return add_item(s, w->path, w->rel, s->ncls - 1, e);
	if (!s->left_out++ && !(s->left_out_eg = strdup(w->rel)))
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	return DP_OK;
}

static int open_dir(dp_image_set *s, const char *dir, dp_err *e)
{
	int rc = dp_walk(dir, walk_entry, s, e);
	if (rc == DP_OK && !s->ncls)
		rc = dp_seterr(e, DP_EDATA, "%s: no class folders in it (want DIR/CLASS/IMAGE)", dir);
	return rc;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A list: "path,label" or "path<TAB>label" lines; a first line whose
 * label is "label" is a header.  Relative paths are from the list's
 * folder. */
static int open_list(dp_image_set *s, const char *list, dp_err *e)
{
	FILE *f = fopen(list, "r");
	if (!f)
		return dp_syserr(e, "%s", list);
	const char *slash = strrchr(list, '/');
	int dirlen = slash ? (int)(slash - list) : 0;
	char *line = NULL;
	size_t cap = 0, lineno = 0;
	ssize_t len;
	int rc = DP_OK;
	char **labels = NULL;
	while (rc == DP_OK && (len = getline(&line, &cap, f)) >= 0) {
		lineno++;
		while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			line[--len] = 0;
		if (!len || line[0] == '#')
			continue;
		char *sep = strchr(line, '\t');
		if (!sep)
			sep = strrchr(line, ',');
		if (!sep || sep == line || !sep[1]) {
			rc = dp_seterr(e, DP_EDATA, "%s: line %zu: want PATH,LABEL (or PATH<TAB>LABEL)",
				       list, lineno);
			break;
		}
		*sep = 0;
		const char *lab = sep + 1;
		if (s->n == 0 && (!strcmp(lab, "label") || !strcmp(lab, "class")))
			continue;
		char *path = NULL;
		if (asprintf(&path, "%.*s%s%s", line[0] == '/' ? 0 : dirlen,
			     list, line[0] == '/' || !dirlen ? "" : "/", line) < 0) {
			rc = dp_seterr(e, DP_ENOMEM, "out of memory");
			break;
		}
		rc = add_item(s, path, line, 0, e);
		free(path);
		char **nl = rc == DP_OK ? realloc(labels, s->n * sizeof *nl) : NULL;
		if (rc == DP_OK && (!nl || !(nl[s->n - 1] = strdup(lab)))) {
			if (nl)
				labels = nl;
			rc = dp_seterr(e, DP_ENOMEM, "out of memory");
		} else if (nl) {
			labels = nl;
		}
	}
	if (rc == DP_OK && ferror(f))
		rc = dp_syserr(e, "%s", list);
	free(line);
	fclose(f);
	if (rc == DP_OK && !s->n)
		rc = dp_seterr(e, DP_EDATA, "%s: no images listed", list);
	/* labels: all numbers (used as they are) or names (sorted) */
	size_t max = 0;
	s->numeric = rc == DP_OK;
	for (size_t i = 0; rc == DP_OK && i < s->n && s->numeric; i++) {
		char *end;
		errno = 0;
		unsigned long v = strtoul(labels[i], &end, 10);
		if (*end || end == labels[i] || labels[i][0] == '-' || errno || v > 1000000)
			s->numeric = 0;
		else if (v > max)
			max = v;
	}
	if (rc == DP_OK && s->numeric) {
		char b[24];
		for (size_t i = 0; rc == DP_OK && i <= max; i++) {
			snprintf(b, sizeof b, "%zu", i);
			rc = add_class(s, b, e);
		}
		for (size_t i = 0; i < s->n; i++)
			s->it[i].cls = strtoul(labels[i], NULL, 10);
	} else if (rc == DP_OK) {
		char **sorted = malloc(s->n * sizeof *sorted);
		if (!sorted)
			rc = dp_seterr(e, DP_ENOMEM, "out of memory");
		for (size_t i = 0; rc == DP_OK && i < s->n; i++)
			sorted[i] = labels[i];
		if (rc == DP_OK)
			qsort(sorted, s->n, sizeof *sorted, cmp_str);
		for (size_t i = 0; rc == DP_OK && i < s->n; i++)
			if (!i || strcmp(sorted[i], sorted[i - 1]))
				rc = add_class(s, sorted[i], e);
		for (size_t i = 0; rc == DP_OK && i < s->n; i++) {
			char **hit = bsearch(&labels[i], s->cls, s->ncls, sizeof *s->cls, cmp_str);
			s->it[i].cls = (size_t)(hit - s->cls);
		}
		free(sorted);
	}
	for (size_t i = 0; labels && i < s->n; i++)
		free(labels[i]);
	free(labels);
	return rc;
}

dp_image_set *dp_image_set_open(const char *path, dp_err *e)
{
	dp_image_set *s = dp_zalloc(sizeof *s, e);
	if (!s)
		return NULL;
	dp_buf_init(&s->file, 0);
	struct stat st;
	int rc = stat(path, &st) < 0 ? dp_syserr(e, "%s", path)
		 : S_ISDIR(st.st_mode) ? open_dir(s, path, e)
				       : open_list(s, path, e);
	if (rc == DP_OK && !s->n)
		rc = dp_seterr(e, DP_EDATA, "%s: no image files (.jpg .jpeg .png .ppm .bmp .pgm .tif "
			       ".tiff .webp) in its class folders", path);
	if (rc < 0) {
		dp_image_set_close(s);
		return NULL;
	}
	return s;
}

size_t dp_image_set_size(const dp_image_set *s) { return s->n; }
size_t dp_image_set_left_out(const dp_image_set *s, const char **example)
{
	*example = s->left_out_eg;
	return s->left_out;
}
size_t dp_image_set_nclasses(const dp_image_set *s) { return s->ncls; }
const char *dp_image_set_class(const dp_image_set *s, size_t i)
{
	return i < s->ncls ? s->cls[i] : NULL;
}

static int read_file(dp_image_set *s, const char *path, const char *shown, size_t *len, dp_err *e)
{
	int rc = dp_read_file(path, shown, (size_t)1 << 31, &s->file, e);
	*len = s->file.len;
	return rc;
}

int dp_image_set_next(dp_image_set *s, const uint8_t **rec, size_t *len, const char **file,
		      dp_err *e)
{
	if (s->next == s->n)
		return 0;
	item *t = &s->it[s->next++];
	*file = t->shown;
	size_t n = 0;
	int rc = read_file(s, t->path, t->shown, &n, e);
	if (rc < 0)
		return rc;
	dp_image_info in;
	if ((rc = dp_image_probe((const uint8_t *)s->file.p, n, &in, e)) < 0)
		return dp_preferr(e, "%s", t->shown);
	if (!in.width || !in.height)
		return dp_seterr(e, DP_EDATA, "%s: image of %ux%u pixels", t->shown, in.width,
				 in.height);
	const char *fmt = img_format_record(in.format);
	const uint8_t *v[1];
	size_t vl[1];
	int64_t iv;
	dp_exbuild *b = &s->eb;
	dp_exbuild_reset(b);
#define BYTES(name, p, l) (v[0] = (const uint8_t *)(p), vl[0] = (l), \
			   dp_exbuild_bytes(b, name, sizeof name - 1, v, vl, 1))
#define INT(name, x) (iv = (int64_t)(x), dp_exbuild_int64s(b, name, sizeof name - 1, &iv, 1))
	BYTES("image/encoded", (const uint8_t *)s->file.p, n);
	BYTES("image/format", fmt, strlen(fmt));
	INT("image/height", in.height);
	INT("image/width", in.width);
	INT("image/channels", in.channels);
	INT("image/class/label", t->cls);
	BYTES("image/class/text", s->cls[t->cls], strlen(s->cls[t->cls]));
	BYTES("image/filename", t->name, strlen(t->name));
#undef BYTES
#undef INT
	if (dp_exbuild_finish(b, rec, len) < 0)
		return dp_seterr(e, DP_ENOMEM, "out of memory building an Example");
	return 1;
}

void dp_image_set_close(dp_image_set *s)
{
	if (!s)
		return;
	free(s->left_out_eg);
	for (size_t i = 0; i < s->n; i++) {
		free(s->it[i].path);
		free(s->it[i].shown);
		free(s->it[i].name);
	}
	for (size_t i = 0; i < s->ncls; i++)
		free(s->cls[i]);
	free(s->cls);
	free(s->it);
	dp_buf_free(&s->file);
	dp_exbuild_free(&s->eb);
	free(s);
}

/* A relative path with no "." or ".." component, no empty one, no
 * control characters. */
static int safe_path(const uint8_t *p, size_t n)
{
	if (!n || p[0] == '/' || n > 1024)
		return 0;
	size_t start = 0;
	for (size_t i = 0; i <= n; i++) {
		if (i < n && p[i] != '/') {
			if (p[i] < 32 || p[i] == 127)
				return 0;
			continue;
		}
		size_t l = i - start;
		if (!l || (l == 1 && p[start] == '.') || (l == 2 && p[start] == '.' && p[start + 1] == '.'))
			return 0;
		start = i + 1;
	}
	return 1;
}

int dp_image_of_record(const dp_example *ex, const char *feature, uint64_t index,
		       const uint8_t **data, size_t *n, char *buf, size_t len, dp_err *e)
{
	const char *fn = feature ? feature : "image/encoded";
	const dp_feature *f = dp_example_get(ex, fn);
	if (!f || f->kind != DP_KIND_BYTES || f->count != 1)
		return dp_seterr(e, DP_EDATA, "no '%s' of one bytes value: not an image record", fn);
	dp_feature_bytes0(f, data, n);
	const dp_feature *nf = dp_example_get(ex, "image/filename");
	const uint8_t *p;
	size_t pl;
	if (nf && nf->kind == DP_KIND_BYTES && nf->count == 1 &&
	    dp_feature_bytes0(nf, &p, &pl) == 1 && safe_path(p, pl) && pl < len) {
		memcpy(buf, p, pl);
		buf[pl] = 0;
	} else {
		int fmt = dp_image_format_of(*data, *n);
		snprintf(buf, len, "%llu.%s", (unsigned long long)index, img_format_ext(fmt));
	}
	return DP_OK;
}
