/*
 * template.c - {name} templates, and the parsers and formatters of the
 * numbers the tools take (dp.h): counts, I/N parts, sizes.
 */
#define _GNU_SOURCE
#include "dp.h"
#include "dp_rng.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- Templates ----------------------------------------------------------- */

static const char *expand_var(const char *name, size_t len, const char *const *vars,
			      const char *rank, const char *size)
{
	for (const char *const *v = vars; v && v[0]; v += 2)
		if (strlen(v[0]) == len && memcmp(v[0], name, len) == 0)
			return v[1];
	if (len == 4 && memcmp(name, "rank", 4) == 0)
		return rank;
	if (len == 4 && memcmp(name, "size", 4) == 0)
		return size;
	return NULL;
}

static int name_char(char c)
{
	return isalnum((unsigned char)c) || c == '_';
}

/* "{a}, {b}, ..., {rank}, {size}": the names a template may use, for a
 * message. */
static void known_names(char *buf, size_t cap, const char *const *vars)
{
	size_t n = 0;
	buf[0] = 0;
	for (const char *const *v = vars; v && v[0] && n < cap; v += 2)
		if (strcmp(v[0], "rank") && strcmp(v[0], "size"))
			n += (size_t)snprintf(buf + n, cap - n, "{%s}, ", v[0]);
	if (n < cap)
		snprintf(buf + n, cap - n, "{rank}, {size}");
}

/* The one template expander: dp_expand (e NULL: what it cannot fill is
 * left as is) and dp_expand_strict (e set: refused).  A placeholder is
 * {NAME} or {NAME:W}, NAME of letters, digits and '_'; any other '{' is
 * text.  {NAME:W} pads a value of digits to W of them (1-32), as a
 * number: leading zeros it already has do not count ("00003" at width 3
 * is 003). */
static char *expand(const char *tmpl, const char *const *vars, dp_err *e)
{
	int rank = -1, size = -1;
	char rbuf[16], sbuf[16], pbuf[64];
	dp_rank_size(&rank, &size);
	snprintf(rbuf, sizeof rbuf, "%d", rank);
	snprintf(sbuf, sizeof sbuf, "%d", size);
	size_t cap = strlen(tmpl) + 64, n = 0;
	char *out = malloc(cap);
	if (!out) {
		dp_seterr(e, DP_ENOMEM, "out of memory");
		return NULL;
	}
	for (const char *p = tmpl; *p;) {
		const char *val = NULL;
		size_t skip = 1;
		const char *close = *p == '{' ? strchr(p, '}') : NULL;
		if (close) {
			size_t klen = (size_t)(close - p - 1);
			const char *colon = memchr(p + 1, ':', klen);
			size_t nlen = colon ? (size_t)(colon - p - 1) : klen;
			int placeholder = nlen > 0;
			for (size_t i = 0; i < nlen; i++)
				placeholder &= name_char(p[1 + i]);
			for (const char *q = colon; q && q < close; q++)
				placeholder &= *q != '{';
			val = expand_var(p + 1, klen, vars, rbuf, sbuf);
			const char *v = colon ? expand_var(p + 1, nlen, vars, rbuf, sbuf) : NULL;
			int wd = -1;
			if (!val && colon && close - colon >= 2 && close - colon <= 3) {
				wd = 0;
				for (const char *q = colon + 1; q < close; q++)
					wd = *q >= '0' && *q <= '9' ? wd * 10 + (*q - '0') : -1000;
			}
			size_t vl = v ? strlen(v) : 0;
			int number = v && vl && strspn(v, "0123456789") == vl;
			if (!val && number && wd >= 1 && wd <= 32) {
				while (vl > 1 && *v == '0') { /* the number's own digits */
					v++;
					vl--;
				}
				if (vl < 32) {
					size_t z = vl < (size_t)wd ? (size_t)wd - vl : 0;
					memset(pbuf, '0', z);
					memcpy(pbuf + z, v, vl + 1);
					val = pbuf;
				}
			}
			if (!val && e && placeholder) {
				char known[512];
				known_names(known, sizeof known, vars);
				if (!colon || !v)
					dp_seterr(e, DP_EARG, "unknown placeholder {%.*s} (known: %s)",
						  (int)nlen, p + 1, known);
				else if (!number)
					dp_seterr(e, DP_EARG,
						  "{%.*s}: a width pads a number, and {%.*s} is '%s'",
						  (int)klen, p + 1, (int)nlen, p + 1, v);
				else
					dp_seterr(e, DP_EARG,
						  "{%.*s}: the width after ':' must be a number of digits "
						  "from 1 to 32",
						  (int)klen, p + 1);
				free(out);
				return NULL;
			}
			if (val)
				skip = klen + 2;
		}
		size_t add = val ? strlen(val) : 1;
		if (n + add + 1 > cap) {
			cap = (n + add + 1) * 2;
			char *t = realloc(out, cap);
			if (!t) {
				free(out);
				dp_seterr(e, DP_ENOMEM, "out of memory");
				return NULL;
			}
			out = t;
		}
		if (val)
			memcpy(out + n, val, add);
		else
			out[n] = *p;
		n += add;
		p += skip;
	}
	out[n] = 0;
	return out;
}

char *dp_expand(const char *tmpl, const char *const *vars)
{
	return expand(tmpl, vars, NULL);
}

int dp_names_rank(const char *tmpl)
{
	return strstr(tmpl, "{rank}") || strstr(tmpl, "{rank:");
}

char *dp_expand_strict(const char *tmpl, const char *const *vars, dp_err *e)
{
	dp_err own;
	return expand(tmpl, vars, e ? e : &own);
}

int dp_parse_count(const char *opt, const char *s, uint64_t min, uint64_t max, uint64_t *out,
		   dp_err *e)
{
	int hex = s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
	const char *d = hex ? s + 2 : s;
	char *end;
	errno = 0;
	unsigned long long v = 0;
	if (isxdigit((unsigned char)*d)) /* strtoull would take a sign or space */
		v = strtoull(d, &end, hex ? 16 : 10);
	if (!isxdigit((unsigned char)*d) || errno || *end || v < min || v > max) {
		if (max == UINT64_MAX)
			return dp_seterr(e, DP_EARG, "%s '%s': want a whole number, %" PRIu64 " or more",
					 opt, s, min);
		return dp_seterr(e, DP_EARG,
				 "%s '%s': want a whole number from %" PRIu64 " to %" PRIu64, opt, s,
				 min, max);
	}
	*out = v;
	return 0;
}

int dp_parse_part(const char *opt, const char *s, const char *const *vars, uint64_t *index,
		  uint64_t *count, dp_err *e)
{
	char *x = dp_expand(s, vars);
	if (!x)
		return dp_seterr(e, DP_ENOMEM, "%s: out of memory", opt);
	char *slash = strchr(x, '/');
	uint64_t i = 0, n = 0;
	int ok = slash != NULL;
	if (ok) {
		*slash = 0;
		ok = dp_parse_count(opt, slash + 1, 1, DP_PART_MAX, &n, NULL) == 0 &&
		     dp_parse_count(opt, x, 0, n - 1, &i, NULL) == 0;
		*slash = '/';
	}
	if (!ok) {
		if (strcmp(x, s))
			dp_seterr(e, DP_EARG,
				  "%s '%s' (%s): want I/N, part I from 0 to N-1 of N from 1 to %u", opt,
				  s, x, DP_PART_MAX);
		else
			dp_seterr(e, DP_EARG,
				  "%s '%s': want I/N, part I from 0 to N-1 of N from 1 to %u (e.g. 3/8 "
				  "or {rank}/{size})",
				  opt, s, DP_PART_MAX);
		free(x);
		return DP_EARG;
	}
	free(x);
	*index = i;
	*count = n;
	return 0;
}

int dp_parse_size(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (end == s || errno || !(v >= 0)) /* NaN too */
		return DP_EARG;
	double mul = 1;
	switch (*end) {
	case 'k': case 'K': mul = 1024.0; end++; break;
	case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
	case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
	case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
	}
	if (*end == 'i' || *end == 'I')
		end++;
	if (*end == 'b' || *end == 'B')
		end++;
	if (*end)
		return DP_EARG;
	v *= mul;
	if (v > 1.8e19)
		return DP_EARG;
	*out = (uint64_t)v;
	return DP_OK;
}

const char *dp_fmt_double(double v, char *buf, size_t len)
{
	if (isnan(v) || isinf(v)) {
		snprintf(buf, len, "%s", isnan(v) ? "nan" : v < 0 ? "-inf" : "inf");
		return buf;
	}
	/* A normal double whose shortest text has at most 15 digits prints
	 * as that text at 15 (the 15-digit grid is coarser than its rounding
	 * error; %g drops the trailing zeros), so the search starts there;
	 * subnormals carry fewer bits and may read back from fewer digits. */
	for (int prec = v != 0 && fabs(v) < DBL_MIN ? 1 : 15; prec <= 17; prec++) {
		snprintf(buf, len, "%.*g", prec, v);
		if (strtod(buf, NULL) == v)
			break;
	}
	return buf;
}

const char *dp_fmt_float(float f, char *buf, size_t len)
{
	if (!isfinite(f)) {
		snprintf(buf, len, "%s", isnan(f) ? "NaN" : f > 0 ? "Infinity" : "-Infinity");
		return buf;
	}
	for (int prec = 1; prec <= 9; prec++) {
		snprintf(buf, len, "%.*g", prec, (double)f);
		if (strtof(buf, NULL) == f)
			break;
	}
	return buf;
}

const char *dp_fmt_rate(double v, char *buf, size_t len)
{
	if (!isfinite(v))
		return dp_fmt_double(v, buf, len);
	int dec = 0; /* decimals for 3 significant digits once rounded */
	for (double a = fabs(v); a != 0 && a < 99.95 && dec < 9; a *= 10)
		dec++;
	snprintf(buf, len, "%.*f", dec, v);
	return buf;
}

const char *dp_fmt_size(uint64_t n, char *buf, size_t len)
{
	static const char *const unit[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
	if (n < 1024) {
		snprintf(buf, len, "%" PRIu64 " byte%s", n, n == 1 ? "" : "s");
		return buf;
	}
	int i = 0;
	uint64_t d = 1024;
	while (i < 5 && n / d >= 1024)
		d *= 1024, i++;
	if (n % d == 0)
		snprintf(buf, len, "%" PRIu64 " %s", n / d, unit[i]);
	else
		snprintf(buf, len, "%.1f %s", (double)n / (double)d, unit[i]);
	return buf;
}
