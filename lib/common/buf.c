/*
 * buf.c - dp_buf, libdp's one growable byte buffer (after curl's dynbuf):
 * a cap on its size, a sticky error so that a run of appends is checked
 * once, and the one JSON string escaper.
 */
#include "dp.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dp_buf_init(dp_buf *b, size_t max)
{
	memset(b, 0, sizeof *b);
	b->max = max ? max : SIZE_MAX / 2;
}

void dp_buf_free(dp_buf *b)
{
	free(b->p);
	size_t max = b->max;
	memset(b, 0, sizeof *b);
	b->max = max;
}

void dp_buf_reset(dp_buf *b)
{
	b->len = 0;
	b->err = 0;
	if (b->p)
		b->p[0] = 0;
}

char *dp_buf_take(dp_buf *b)
{
	if (b->err || (!b->p && dp_buf_reserve(b, 0) < 0))
		return NULL;
	b->p[b->len] = 0; /* a buffer never written has no NUL yet */
	char *p = b->p;
	b->p = NULL;
	b->len = b->cap = 0;
	return p;
}

int dp_buf_reserve(dp_buf *b, size_t n)
{
	if (b->err)
		return b->err;
	if (n > b->max - b->len)
		return b->err = DP_ELIMIT;
	size_t need = b->len + n + 1; /* room for the NUL */
	if (need <= b->cap)
		return 0;
	size_t cap = b->cap ? b->cap : 64;
	while (cap < need)
		cap = cap > SIZE_MAX / 2 ? need : cap * 2;
	char *p = realloc(b->p, cap);
	if (!p)
		return b->err = DP_ENOMEM;
	b->p = p;
	b->cap = cap;
	return 0;
}

void *dp_zalloc(size_t size, dp_err *e)
{
	void *p = calloc(1, size);
	if (!p)
		dp_seterr(e, DP_ENOMEM, "out of memory");
	return p;
}

int dp_grow(void *pp, size_t *cap, size_t n, size_t size)
{
	if (n <= *cap)
		return DP_OK;
	size_t nc = *cap ? *cap : 16;
	while (nc < n) {
		if (nc > SIZE_MAX / 2 / size)
			return DP_ENOMEM;
		nc *= 2;
	}
	void *p = realloc(*(void **)pp, nc * size);
	if (!p)
		return DP_ENOMEM;
	*(void **)pp = p;
	*cap = nc;
	return DP_OK;
}

int dp_buf_add(dp_buf *b, const void *p, size_t n)
{
	if (dp_buf_reserve(b, n) < 0)
		return b->err;
	if (n)
		memcpy(b->p + b->len, p, n);
	b->len += n;
	b->p[b->len] = 0;
	return 0;
}

int dp_buf_addstr(dp_buf *b, const char *s)
{
	return dp_buf_add(b, s, strlen(s));
}

int dp_buf_vprintf(dp_buf *b, const char *fmt, va_list ap)
{
	if (b->err)
		return b->err;
	/* one pass into the spare room; a second only when it did not fit */
	size_t room = b->cap > b->len ? b->cap - b->len : 0;
	va_list aq;
	va_copy(aq, ap);
	int w = vsnprintf(room ? b->p + b->len : NULL, room, fmt, aq);
	va_end(aq);
	if (w < 0)
		return b->err = DP_EARG;
	if ((size_t)w >= room) {
		if (dp_buf_reserve(b, (size_t)w) < 0)
			return b->err;
		vsnprintf(b->p + b->len, (size_t)w + 1, fmt, ap);
	}
	if ((size_t)w > b->max - b->len) { /* past the cap, though it fit the memory */
		b->p[b->len] = 0;
		return b->err = DP_ELIMIT;
	}
	b->len += (size_t)w;
	return 0;
}

int dp_buf_printf(dp_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = dp_buf_vprintf(b, fmt, ap);
	va_end(ap);
	return rc;
}

/* The length of the UTF-8 sequence at s[0..n) (1 to 4), or 0 when it is
 * not valid UTF-8 (overlongs, surrogates and code points past U+10FFFF
 * included); *cp receives the code point. */
static size_t utf8_seq(const unsigned char *s, size_t n, uint32_t *cp)
{
	unsigned char c = s[0];
	size_t k;
	uint32_t v, min;
	if (c < 0x80) {
		*cp = c;
		return 1;
	} else if (c >= 0xc2 && c <= 0xdf) {
		k = 2, v = c & 0x1f, min = 0x80;
	} else if (c >= 0xe0 && c <= 0xef) {
		k = 3, v = c & 0x0f, min = 0x800;
	} else if (c >= 0xf0 && c <= 0xf4) {
		k = 4, v = c & 0x07, min = 0x10000;
	} else {
		return 0;
	}
	if (n < k)
		return 0;
	for (size_t i = 1; i < k; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		v = v << 6 | (s[i] & 0x3f);
	}
	if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
		return 0;
	*cp = v;
	return k;
}

int dp_buf_json_str(dp_buf *b, const void *s, size_t n, int flags)
{
	static const char hexd[] = "0123456789abcdef";
	const unsigned char *p = s;
	/* the worst case is 12 bytes a byte ("\ud83d\ude00" for 4 bytes) */
	if (dp_buf_reserve(b, n < (SIZE_MAX - 2) / 6 ? n * 6 + 2 : SIZE_MAX) < 0)
		return b->err;
	dp_buf_add(b, "\"", 1);
	size_t run = 0; /* bytes copied as they are, pending */
	for (size_t i = 0; i < n;) {
		unsigned char c = p[i];
		if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
			run++, i++;
			continue;
		}
		uint32_t cp = c;
		size_t k = 1;
		if (c >= 0x80) {
			k = utf8_seq(p + i, n - i, &cp);
			if (!k) {
				k = 1;
				cp = 0xfffd; /* not UTF-8: the replacement character */
			} else if (!(flags & DP_JSON_ASCII)) {
				run += k, i += k;
				continue;
			}
		}
		if (run)
			dp_buf_add(b, p + i - run, run);
		run = 0;
		i += k;
		char esc[16];
		size_t m = 0;
		esc[m++] = '\\';
		switch (cp) {
		case '"': esc[m++] = '"'; break;
		case '\\': esc[m++] = '\\'; break;
		case '\n': esc[m++] = 'n'; break;
		case '\r': esc[m++] = 'r'; break;
		case '\t': esc[m++] = 't'; break;
		case '\b': esc[m++] = 'b'; break;
		case '\f': esc[m++] = 'f'; break;
		default:
			if (cp == 0xfffd && !(flags & DP_JSON_ASCII)) {
				m = 0;
				esc[m++] = (char)0xef, esc[m++] = (char)0xbf, esc[m++] = (char)0xbd;
				break;
			}
			uint32_t u[2] = {cp, 0};
			int nu = 1;
			if (cp > 0xffff) {
				cp -= 0x10000;
				u[0] = 0xd800 | (cp >> 10);
				u[1] = 0xdc00 | (cp & 0x3ff);
				nu = 2;
			}
			m = 0;
			for (int j = 0; j < nu; j++) {
				esc[m++] = '\\';
				esc[m++] = 'u';
				for (int sh = 12; sh >= 0; sh -= 4)
					esc[m++] = hexd[(u[j] >> sh) & 15];
			}
		}
		dp_buf_add(b, esc, m);
	}
	if (run)
		dp_buf_add(b, p + n - run, run);
	return dp_buf_add(b, "\"", 1);
}

/* The one escaper of data quoted in messages and line-oriented output
 * (dp.h).  A C1 control (U+0080..U+009F) counts as a control: 0x9b is a
 * terminal's CSI, as ESC [ is. */
int dp_buf_shown(dp_buf *b, const void *s, size_t n)
{
	const unsigned char *p = s;
	int plain = !(n >= 2 && p[0] == '$' && p[1] == '\'');
	for (size_t i = 0; plain && i < n;) {
		uint32_t cp = p[i];
		size_t k = cp < 0x80 ? 1 : utf8_seq(p + i, n - i, &cp);
		if (!k || cp < 0x20 || (cp >= 0x7f && cp < 0xa0))
			plain = 0;
		i += k ? k : 1;
	}
	if (plain)
		return dp_buf_add(b, s, n);
	static const char esc[] = "abtnvfr"; /* \a (7) to \r (13) */
	dp_buf_addstr(b, "$'");
	for (size_t i = 0; i < n;) {
		uint32_t cp = p[i];
		size_t k = cp < 0x80 ? 1 : utf8_seq(p + i, n - i, &cp);
		if (k > 1 && cp >= 0xa0) {
			dp_buf_add(b, p + i, k);
			i += k;
			continue;
		}
		unsigned char c = p[i++];
		if (c >= 7 && c <= 13)
			dp_buf_printf(b, "\\%c", esc[c - 7]);
		else if (c < 0x20 || c >= 0x7f)
			dp_buf_printf(b, "\\x%02x", c);
		else if (c == '\\' || c == '\'')
			dp_buf_printf(b, "\\%c", c);
		else
			dp_buf_add(b, &c, 1);
	}
	return dp_buf_addstr(b, "'");
}

char *dp_shown(const void *s, size_t n)
{
	dp_buf b = DP_BUF_INIT;
	dp_buf_shown(&b, s, n);
	return dp_buf_take(&b);
}
