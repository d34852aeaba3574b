/*
 * tar.c - one member out of a tar file, gzip or not (dp_tar.h).  zlib's
 * gz* calls read both: a plain file passes through them unchanged.
 */
#define _GNU_SOURCE
#include "dp_tar.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define BLOCK 512

/* Skip n bytes of z (gzseek reads forward on a compressed stream). */
static int skip(gzFile z, uint64_t n)
{
	char buf[BLOCK * 16];
	while (n > 0) {
		unsigned want = n < sizeof buf ? (unsigned)n : (unsigned)sizeof buf;
		int got = gzread(z, buf, want);
		if (got <= 0)
			return -1;
		n -= (uint64_t)got;
	}
	return 0;
}

/* The size field of header h: octal digits, spaces and NULs; -1 when it
 * is base-256 (a GNU extension for 8 GiB and more) or not a number. */
static int64_t member_size(const unsigned char *h)
{
	if (h[124] & 0x80)
		return -1;
	int64_t v = 0;
	int digits = 0;
	for (int i = 124; i < 136; i++) {
		if (h[i] >= '0' && h[i] <= '7') {
			v = v * 8 + (h[i] - '0');
			digits++;
		} else if (h[i] != ' ' && h[i] != 0) {
			return -1;
		} else if (digits) {
			break;
		}
	}
	return v;
}

/* Copy n bytes of z to out. */
static int copy(gzFile z, uint64_t n, int out, const char *file, const char *member, dp_err *e)
{
	char buf[65536];
	while (n > 0) {
		unsigned want = n < sizeof buf ? (unsigned)n : (unsigned)sizeof buf;
		if (gzread(z, buf, want) != (int)want)
			return dp_seterr(e, DP_EDATA, "%s: %s: cut short", file, member);
		int rc = dp_write_all(out, buf, want, "the member's copy", e);
		if (rc < 0)
			return rc;
		n -= want;
	}
	return DP_OK;
}

static int scan(gzFile z, const char *file, const char *suffix, int out, char *name, size_t len,
		dp_err *e)
{
	unsigned char h[BLOCK];
	char path[4096] = "", longname[4096] = "";
	size_t sl = strlen(suffix);
	for (;;) {
		int got = gzread(z, h, sizeof h);
		if (got == 0)
			return 0; /* the end, without the two zero blocks: as tar reads it */
		if (got != (int)sizeof h)
			return got < 0 ? DP_EIO : dp_seterr(e, DP_EDATA, "%s: cut short in a header", file);
		int zero = 1;
		for (int i = 0; i < BLOCK && zero; i++)
			zero = !h[i];
		if (zero)
			return 0;
		if (memcmp(h + 257, "ustar", 5) && memcmp(h + 257, "\0\0\0\0\0", 5))
			return dp_seterr(e, DP_EDATA, "%s: not a tar file (no ustar header)", file);
		int64_t size = member_size(h);
		if (size < 0)
			return dp_seterr(e, DP_ELIMIT, "%s: a member too large for this reader, or a "
						       "size that is not a number",
					 file);
		if (longname[0])
			snprintf(path, sizeof path, "%s", longname);
		else if (!memcmp(h + 257, "ustar", 5) && h[345])
			snprintf(path, sizeof path, "%.155s/%.100s", (char *)h + 345, (char *)h);
		else
			snprintf(path, sizeof path, "%.100s", (char *)h);
		longname[0] = 0;
		size_t nl = strlen(path);
		int type = h[156];
		if (type == 'L' && (uint64_t)size < sizeof longname) { /* GNU: the next member's name */
			if (gzread(z, longname, (unsigned)size) != (int)size)
				return dp_seterr(e, DP_EDATA, "%s: cut short in a long name", file);
			longname[size] = 0;
			if (skip(z, (BLOCK - (uint64_t)size % BLOCK) % BLOCK) < 0)
				return dp_seterr(e, DP_EDATA, "%s: cut short after a long name", file);
			continue;
		}
		if ((type == '0' || type == 0) && nl > sl && !strcmp(path + nl - sl, suffix)) {
			int rc = copy(z, (uint64_t)size, out, file, path, e);
			if (rc < 0)
				return rc;
			snprintf(name, len, "%s", path);
			return 1;
		}
		if (skip(z, ((uint64_t)size + BLOCK - 1) / BLOCK * BLOCK) < 0)
			return dp_seterr(e, DP_EDATA, "%s: %s: cut short", file, path);
	}
}

int dp_tar_extract(int in, const char *file, const char *suffix, int out, char *name, size_t len,
		   dp_err *e)
{
	int fd = dup(in);
	gzFile z = fd < 0 ? NULL : gzdopen(fd, "rb");
	if (!z) {
		if (fd >= 0)
			close(fd);
		return dp_seterr(e, DP_ENOMEM, "%s: out of memory", file);
	}
	int rc = scan(z, file, suffix, out, name, len, e);
	int err;
	const char *msg = gzerror(z, &err);
	if (rc == DP_EIO || (rc == 0 && err)) /* zlib's reason: a damaged or cut gzip stream */
		rc = dp_seterr(e, DP_EDATA, "%s: %s", file, err == Z_ERRNO ? strerror(errno) : msg);
	gzclose(z);
	return rc;
}
