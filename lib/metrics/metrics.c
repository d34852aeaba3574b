/*
 * metrics.c - numbers, logfmt, the Open MPI tag prefix and the metric
 * matcher (see dp_metrics.h).
 *
 * The hot path is dp_matcher_match() with regex definitions: one
 * pcre2_jit_match() per definition per line on a shared match-data block,
 * no allocation, and the line's step/epoch looked up only when a definition
 * matched.  JSON-object lines (logfmt mode, or coordinates of a matched
 * JSON line) go through jansson, which allocates: they are not the fast
 * path.
 */
#define _GNU_SOURCE
#include "dp_metrics.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <locale.h>
#include <math.h>
#include <pcre2.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Numbers ---------------------------------------------------------- */

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int lower_eq(const char *s, size_t n, const char *word)
{
	size_t k = strlen(word);
	if (n != k)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (c >= 'A' && c <= 'Z')
			c = (char)(c - 'A' + 'a');
		if (c != word[i])
			return 0;
	}
	return 1;
}

int dp_number_valid(const char *s, size_t n)
{
	size_t i = 0;
	if (i < n && (s[i] == '+' || s[i] == '-'))
		i++;
	if (i < n && !is_digit(s[i]) && s[i] != '.')
		return lower_eq(s + i, n - i, "nan") || lower_eq(s + i, n - i, "inf") ||
		       lower_eq(s + i, n - i, "infinity");
	size_t digits = 0;
	while (i < n && is_digit(s[i]))
		i++, digits++;
	if (i < n && s[i] == '.') {
		i++;
		while (i < n && is_digit(s[i]))
			i++, digits++;
	}
	if (!digits)
		return 0;
	if (i < n && (s[i] == 'e' || s[i] == 'E')) {
		i++;
		if (i < n && (s[i] == '+' || s[i] == '-'))
			i++;
		size_t ed = 0;
		while (i < n && is_digit(s[i]))
			i++, ed++;
		if (!ed)
			return 0;
	}
	return i == n;
}

int dp_number_is_json(const char *s, size_t n)
{
	size_t i = 0;
	if (i < n && s[i] == '-')
		i++;
	if (i >= n || !is_digit(s[i]))
		return 0;
	if (s[i] == '0')
		i++;
	else
		while (i < n && is_digit(s[i]))
			i++;
	if (i < n && s[i] == '.') {
		i++;
		if (i >= n || !is_digit(s[i]))
			return 0;
		while (i < n && is_digit(s[i]))
			i++;
	}
	if (i < n && (s[i] == 'e' || s[i] == 'E')) {
		i++;
		if (i < n && (s[i] == '+' || s[i] == '-'))
			i++;
		if (i >= n || !is_digit(s[i]))
			return 0;
		while (i < n && is_digit(s[i]))
			i++;
	}
	return i == n;
}

static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;
static void make_c_locale(void) { c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0); }

/* strtod in the C locale (strtod_l), whatever the program's locale is. */
static double strtod_c(const char *s, char **end)
{
	pthread_once(&c_locale_once, make_c_locale);
	if (c_locale)
		return strtod_l(s, end, c_locale);
	return strtod(s, end);
}

double dp_number_value(const char *s, size_t n)
{
	char tmp[128];
	if (n == 0 || n >= sizeof tmp || !dp_number_valid(s, n))
		return NAN;
	/* A fast path for the common "0.4123" and "100": exact when the digits
	 * fit in 15 significant digits and the scale is a power of ten that
	 * doubles hold exactly, so the division is correctly rounded. */
	size_t i = 0;
	int neg = 0;
	if (s[0] == '-' || s[0] == '+')
		neg = s[0] == '-', i++;
	uint64_t mant = 0;
	int nd = 0, frac = 0, dot = 0, simple = 1;
	for (; i < n; i++) {
		if (is_digit(s[i])) {
			if (nd < 15)
				mant = mant * 10 + (uint64_t)(s[i] - '0');
			else
				simple = 0;
			if (mant || s[i] != '0')
				nd++;
			if (dot)
				frac++;
		} else if (s[i] == '.' && !dot) {
			dot = 1;
		} else {
			simple = 0;
			break;
		}
	}
	if (simple && frac <= 22) {
		static const double p10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
					     1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
					     1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
		double v = (double)mant / p10[frac];
		return neg ? -v : v;
	}
	memcpy(tmp, s, n);
	tmp[n] = 0;
	return strtod_c(tmp, NULL);
}

/* ---- logfmt ----------------------------------------------------------- */

static int is_space(unsigned char c) { return c <= ' '; }

/* Bytes that end a key: space and controls, '=', '"'. */
static const unsigned char key_end[256] = {
	[0 ... 32] = 1, ['='] = 1, ['"'] = 1,
};

int dp_logfmt_next(const char *s, size_t n, size_t *pos, dp_logfmt_kv *kv)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = *pos;
	for (;;) {
		while (i < n && key_end[u[i]]) {
			if (s[i] == '"') { /* a stray quoted string: skip it whole */
				i++;
				while (i < n && s[i] != '"')
					i += (s[i] == '\\' && i + 1 < n) ? 2 : 1;
			}
			if (i < n)
				i++;
		}
		if (i >= n) {
			*pos = n;
			return 0;
		}
		size_t k0 = i;
		while (i < n && !key_end[u[i]])
			i++;
		memset(kv, 0, sizeof *kv);
		kv->key = s + k0;
		kv->key_len = i - k0;
		kv->val = s + i; /* empty, never NULL */
		if (i < n && s[i] == '=') {
			i++;
			kv->has_value = 1;
			if (i < n && s[i] == '"') {
				size_t v0 = ++i;
				while (i < n && s[i] != '"')
					i += (s[i] == '\\' && i + 1 < n) ? 2 : 1;
				if (i > n)
					i = n;
				kv->val = s + v0;
				kv->val_len = i - v0;
				kv->quoted = 1;
				if (i < n)
					i++;
			} else {
				size_t v0 = i;
				while (i < n && u[i] > ' ')
					i++;
				kv->val = s + v0;
				kv->val_len = i - v0;
			}
		}
		*pos = i;
		return 1;
	}
}

/* ---- Open MPI --tag-output ---------------------------------------------- */

size_t dp_mpi_tag(const char *s, size_t n, int *rank)
{
	size_t i = 0;
	if (n < 13 || s[0] != '[')
		return 0;
	i = 1;
	size_t d = i;
	while (i < n && is_digit(s[i]) && i - d < 10)
		i++;
	if (i == d || i >= n || s[i] != ',')
		return 0;
	i++;
	d = i;
	long r = 0;
	while (i < n && is_digit(s[i]) && i - d < 9)
		r = r * 10 + (s[i++] - '0');
	if (i == d || i >= n || s[i] != ']')
		return 0;
	i++;
	static const char *const streams[] = {"<stdout>:", "<stderr>:", "<stddiag>:"};
	for (size_t k = 0; k < 3; k++) {
		size_t sl = strlen(streams[k]);
		if (n - i >= sl && memcmp(s + i, streams[k], sl) == 0) {
			i += sl;
			if (i < n && s[i] == ' ')
				i++;
			*rank = (int)r;
			return i;
		}
	}
	return 0;
}

/* ---- Metric names ------------------------------------------------------- */

#define NAME_MAX_LEN 256
#define KEY_MAX_LEN 128
#define MAX_FOUND_KEYS 4096 /* distinct names taken from logs */

struct name {
	char *s;
	size_t len;
	uint32_t hash;
	int defined; /* from -m, definitions or a key list */
	int allowed; /* a logfmt key that is a metric */
};

struct def {
	int metric;
	pcre2_code *code;
	int jit;
};

struct dp_matcher {
	struct name *names;
	int nnames, nfound;
	size_t cap_names;
	int *table; /* open addressing: name id + 1, 0 empty */
	size_t table_size;
	struct def *defs;
	int ndefs;
	size_t cap_defs;
	int logfmt, logfmt_all;
	int tag_keyed; /* a tagged line has carried a rank= key */
	pcre2_match_data *md;
	pcre2_match_context *mctx;
	pcre2_jit_stack *jstack;
	dp_sample *samples;
	int cap_samples;
	dp_buf arena; /* numbers formatted from JSON values, of one line */
	char step_buf[32], epoch_buf[32];
	dp_matcher_stats st;
};

static uint32_t hash_bytes(const char *s, size_t n)
{
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 16777619u;
	return h;
}

static int lookup(const dp_matcher *m, const char *s, size_t n, uint32_t h)
{
	if (!m->table_size)
		return -1;
	size_t mask = m->table_size - 1;
	for (size_t i = h & mask;; i = (i + 1) & mask) {
		int id = m->table[i] - 1;
		if (id < 0)
			return -1;
		const struct name *nm = &m->names[id];
		if (nm->hash == h && nm->len == n && memcmp(nm->s, s, n) == 0)
			return id;
	}
}

static int table_put(dp_matcher *m, int id)
{
	size_t mask = m->table_size - 1;
	for (size_t i = m->names[id].hash & mask;; i = (i + 1) & mask)
		if (!m->table[i]) {
			m->table[i] = id + 1;
			return 0;
		}
}

/* The id of name s[0..n), added when missing.  Returns -1 on ENOMEM. */
static int intern(dp_matcher *m, const char *s, size_t n)
{
	uint32_t h = hash_bytes(s, n);
	int id = lookup(m, s, n, h);
	if (id >= 0)
		return id;
	if ((size_t)(m->nnames + 1) * 2 > m->table_size) {
		size_t ns = m->table_size ? m->table_size * 2 : 64;
		int *t = calloc(ns, sizeof *t);
		if (!t)
			return -1;
		free(m->table);
		m->table = t;
		m->table_size = ns;
		for (int i = 0; i < m->nnames; i++)
			table_put(m, i);
	}
	if (dp_grow(&m->names, &m->cap_names, (size_t)m->nnames + 1, sizeof *m->names) < 0)
		return -1;
	char *copy = malloc(n + 1);
	if (!copy)
		return -1;
	memcpy(copy, s, n);
	copy[n] = 0;
	id = m->nnames++;
	m->names[id] = (struct name){copy, n, h, 0, 0};
	table_put(m, id);
	return id;
}

/* 1 when s is UTF-8 without control characters: safe in TSV, CSV, JSON
 * and SVG. */
static int name_ok(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	if (n == 0 || n > NAME_MAX_LEN)
		return 0;
	for (size_t i = 0; i < n;) {
		unsigned c = p[i];
		if (c < 0x20 || c == 0x7f)
			return 0;
		if (c < 0x80) {
			i++;
			continue;
		}
		size_t k = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : c >= 0xc2 ? 1 : 0;
		if (!k || c > 0xf4 || i + k >= n)
			return 0;
		for (size_t j = 1; j <= k; j++)
			if ((p[i + j] & 0xc0) != 0x80)
				return 0;
		unsigned cp = c & (0x3f >> k);
		for (size_t j = 1; j <= k; j++)
			cp = (cp << 6) | (p[i + j] & 0x3f);
		if ((k == 2 && cp < 0x800) || (k == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
		    (cp >= 0xd800 && cp <= 0xdfff))
			return 0;
		i += k + 1;
	}
	return 1;
}

static int key_char(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit((char)c) || c == '_' ||
	       c == '.' || c == ':' || c == '/' || c == '@' || c == '-';
}

static int key_ok(const char *s, size_t n)
{
	if (n == 0 || n > KEY_MAX_LEN)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!key_char((unsigned char)s[i]))
			return 0;
	return 1;
}

/* ---- Construction ------------------------------------------------------- */

dp_matcher *dp_matcher_new(void)
{
	dp_matcher *m = calloc(1, sizeof *m);
	if (!m)
		return NULL;
	/* Two pairs: the whole match and the value group.  A regex with more
	 * groups returns 0 ("ovector too small") with both pairs filled. */
	m->md = pcre2_match_data_create(2, NULL);
	m->mctx = pcre2_match_context_create(NULL);
	m->jstack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, NULL);
	dp_buf_init(&m->arena, 0);
	m->cap_samples = 16;
	m->samples = malloc((size_t)m->cap_samples * sizeof *m->samples);
	if (!m->md || !m->mctx || !m->samples) {
		dp_matcher_free(m);
		return NULL;
	}
	if (m->jstack)
		pcre2_jit_stack_assign(m->mctx, NULL, m->jstack);
	/* Bound the work on one line: a regex that backtracks exponentially
	 * gives up on that line (counted) instead of hanging. */
	pcre2_set_match_limit(m->mctx, 5000000);
	pcre2_set_depth_limit(m->mctx, 100000);
	return m;
}

void dp_matcher_free(dp_matcher *m)
{
	if (!m)
		return;
	for (int i = 0; i < m->ndefs; i++)
		pcre2_code_free(m->defs[i].code);
	for (int i = 0; i < m->nnames; i++)
		free(m->names[i].s);
	free(m->names);
	free(m->table);
	free(m->defs);
	free(m->samples);
	dp_buf_free(&m->arena);
	pcre2_match_data_free(m->md);
	pcre2_match_context_free(m->mctx);
	pcre2_jit_stack_free(m->jstack);
	free(m);
}

/* The regex quoted for a message, cut when long. */
static void quote_regex(char *buf, size_t size, const char *re)
{
	size_t n = strlen(re);
	if (n > 120)
		snprintf(buf, size, "\"%.100s...\"", re);
	else
		snprintf(buf, size, "\"%s\"", re);
}

int dp_matcher_add(dp_matcher *m, const char *name, const char *regex, const char *origin,
		   dp_err *e)
{
	size_t nlen = strlen(name);
	if (!name_ok(name, nlen))
		return dp_seterr(e, DP_EARG,
				 "%s: bad metric name (want 1 to %d bytes of UTF-8, no control "
				 "characters)",
				 origin, NAME_MAX_LEN);
	char q[160];
	quote_regex(q, sizeof q, regex);
	int errcode;
	PCRE2_SIZE erroff;
	uint32_t opts = 0;
	for (const unsigned char *p = (const unsigned char *)regex; *p; p++)
		if (*p >= 0x80) {
			opts |= PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;
			break;
		}
	pcre2_code *code =
		pcre2_compile((PCRE2_SPTR)regex, PCRE2_ZERO_TERMINATED, opts, &errcode, &erroff, NULL);
	if (!code) {
		PCRE2_UCHAR msg[256];
		pcre2_get_error_message(errcode, msg, sizeof msg);
		return dp_seterr(e, DP_EARG, "%s: regex %s at offset %zu: %s", origin, q,
				 (size_t)erroff, (const char *)msg);
	}
	uint32_t all = 0, ncap = 0;
	pcre2_pattern_info(code, PCRE2_INFO_ALLOPTIONS, &all);
	if ((all & PCRE2_UTF) && !(opts & PCRE2_MATCH_INVALID_UTF)) {
		/* (*UTF) in the pattern: match invalid UTF-8 lines safely too. */
		pcre2_code_free(code);
		opts |= PCRE2_MATCH_INVALID_UTF;
		code = pcre2_compile((PCRE2_SPTR)regex, PCRE2_ZERO_TERMINATED, opts, &errcode,
				     &erroff, NULL);
		if (!code) {
			PCRE2_UCHAR msg[256];
			pcre2_get_error_message(errcode, msg, sizeof msg);
			return dp_seterr(e, DP_EARG, "%s: regex %s at offset %zu: %s", origin, q,
					 (size_t)erroff, (const char *)msg);
		}
	}
	pcre2_pattern_info(code, PCRE2_INFO_CAPTURECOUNT, &ncap);
	if (ncap < 1) {
		pcre2_code_free(code);
		return dp_seterr(e, DP_EARG,
				 "%s: regex %s has no capture group: the first group, "
				 "as in \"loss=([0-9.]+)\", is the value",
				 origin, q);
	}
	int jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
	if (dp_grow(&m->defs, &m->cap_defs, (size_t)m->ndefs + 1, sizeof *m->defs) < 0) {
		pcre2_code_free(code);
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	}
	int id = intern(m, name, nlen);
	if (id < 0) {
		pcre2_code_free(code);
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	}
	m->names[id].defined = 1;
	m->defs[m->ndefs++] = (struct def){id, code, jit};
	return DP_OK;
}

int dp_matcher_add_definitions(dp_matcher *m, const char *json, size_t len, const char *origin,
			       dp_err *e)
{
	json_error_t jerr;
	json_t *root = json_loadb(json, len, 0, &jerr);
	if (!root)
		return dp_seterr(e, DP_EARG, "%s: line %d column %d: %s", origin, jerr.line,
				 jerr.column, jerr.text);
	json_t *list = root;
	if (json_is_object(root)) {
		list = json_object_get(root, "MetricDefinitions");
		if (!list)
			list = json_object_get(root, "metric_definitions");
	}
	int rc = DP_OK;
	if (!json_is_array(list)) {
		rc = dp_seterr(e, DP_EARG,
			       "%s: not a list of {\"Name\": ..., \"Regex\": ...} objects "
			       "(SageMaker metric_definitions)",
			       origin);
		goto out;
	}
	size_t i;
	json_t *item;
	json_array_foreach(list, i, item)
	{
		char where[512];
		json_t *jn = json_object_get(item, "Name"), *jr = json_object_get(item, "Regex");
		if (!json_is_object(item) || !json_is_string(jn) || !json_is_string(jr)) {
			rc = dp_seterr(e, DP_EARG,
				       "%s: entry %zu: want an object with string \"Name\" and "
				       "\"Regex\"",
				       origin, i + 1);
			goto out;
		}
		const char *name = json_string_value(jn);
		if (strlen(name) != json_string_length(jn) ||
		    strlen(json_string_value(jr)) != json_string_length(jr)) {
			rc = dp_seterr(e, DP_EARG, "%s: entry %zu: NUL character in a string",
				       origin, i + 1);
			goto out;
		}
		snprintf(where, sizeof where, "%s: entry %zu (%.200s)", origin, i + 1,
			 name_ok(name, strlen(name)) ? name : "?");
		rc = dp_matcher_add(m, name, json_string_value(jr), where, e);
		if (rc < 0)
			goto out;
	}
	if (json_array_size(list) == 0)
		rc = dp_seterr(e, DP_EARG, "%s: no metric definitions", origin);
out:
	json_decref(root);
	return rc;
}

int dp_matcher_logfmt(dp_matcher *m, const char *keys, dp_err *e)
{
	m->logfmt = 1;
	m->logfmt_all = keys == NULL;
	if (!keys)
		return DP_OK;
	const char *p = keys;
	for (;;) {
		const char *c = strchr(p, ',');
		size_t n = c ? (size_t)(c - p) : strlen(p);
		if (n) {
			if (!key_ok(p, n))
				return dp_seterr(e, DP_EARG,
						 "--logfmt: bad key \"%.*s\" (want [A-Za-z0-9_.:/@-], "
						 "at most %d bytes)",
						 (int)(n > 200 ? 200 : n), p, KEY_MAX_LEN);
			int id = intern(m, p, n);
			if (id < 0)
				return dp_seterr(e, DP_ENOMEM, "out of memory");
			m->names[id].defined = 1;
			m->names[id].allowed = 1;
		}
		if (!c)
			break;
		p = c + 1;
	}
	return DP_OK;
}

int dp_matcher_nmetrics(const dp_matcher *m) { return m->nnames; }
const char *dp_matcher_name(const dp_matcher *m, int metric) { return m->names[metric].s; }
int dp_matcher_defined(const dp_matcher *m, int metric) { return m->names[metric].defined; }
const dp_matcher_stats *dp_matcher_stats_get(const dp_matcher *m) { return &m->st; }

/* ---- Matching ----------------------------------------------------------- */

static int push_sample(dp_matcher *m, int n, int metric, const char *text, size_t len)
{
	if (n == m->cap_samples) {
		int nc = m->cap_samples * 2;
		dp_sample *ns = realloc(m->samples, (size_t)nc * sizeof *ns);
		if (!ns)
			return n; /* drop the sample rather than fail the line */
		m->samples = ns;
		m->cap_samples = nc;
	}
	m->samples[n] = (dp_sample){metric, text, len};
	return n + 1;
}

static int coord_key(const char *k, size_t n)
{
	if (n == 4 && memcmp(k, "step", 4) == 0)
		return 1;
	if (n == 5 && memcmp(k, "epoch", 5) == 0)
		return 2;
	if (n == 4 && memcmp(k, "rank", 4) == 0)
		return 3;
	return 0;
}

static void set_coord(dp_matcher *m, dp_match *out, int which, const char *v, size_t n)
{
	if (which == 1 && !out->step) {
		out->step = v;
		out->step_len = n;
	} else if (which == 2 && !out->epoch) {
		out->epoch = v;
		out->epoch_len = n;
	} else if (which == 3 && out->rank < 0 && n < 10) {
		int r = 0, okr = n > 0;
		for (size_t i = 0; i < n; i++) {
			if (!is_digit(v[i]))
				okr = 0;
			else
				r = r * 10 + (v[i] - '0');
		}
		if (okr)
			out->rank = r;
	}
}

/* The metric id for a key found in a line, or -1 when it is not one. */
static int key_metric(dp_matcher *m, const char *k, size_t n)
{
	if (!key_ok(k, n))
		return -1;
	uint32_t h = hash_bytes(k, n);
	int id = lookup(m, k, n, h);
	if (id >= 0)
		return m->names[id].allowed ? id : -1;
	if (!m->logfmt_all)
		return -1;
	if (m->nfound >= MAX_FOUND_KEYS) {
		m->st.keys_dropped++;
		return -1;
	}
	id = intern(m, k, n);
	if (id < 0)
		return -1;
	m->nfound++;
	m->names[id].allowed = 1;
	return id;
}

/* logfmt pass: coordinates always, samples when take_samples. */
static int scan_logfmt(dp_matcher *m, const char *s, size_t n, dp_match *out, int nsamp,
		       int take_samples)
{
	size_t pos = 0;
	dp_logfmt_kv kv;
	while (dp_logfmt_next(s, n, &pos, &kv)) {
		if (!kv.has_value || kv.quoted)
			continue;
		int c = coord_key(kv.key, kv.key_len);
		if (c) {
			if (dp_number_valid(kv.val, kv.val_len))
				set_coord(m, out, c, kv.val, kv.val_len);
			if (!take_samples || m->logfmt_all)
				continue;
		}
		if (!take_samples || !dp_number_valid(kv.val, kv.val_len))
			continue;
		int id = key_metric(m, kv.key, kv.key_len);
		if (id >= 0)
			nsamp = push_sample(m, nsamp, id, kv.val, kv.val_len);
	}
	return nsamp;
}

/* The coordinate key ending just before s[i] == '=' at the start of a word:
 * 1 step, 2 epoch, 3 rank, 0 none; *k its length. */
static int coord_before(const char *s, size_t i, size_t *k)
{
	int c = 0;
	if (i >= 5 && memcmp(s + i - 5, "epoch", 5) == 0)
		*k = 5, c = 2;
	else if (i >= 4 && memcmp(s + i - 4, "step", 4) == 0)
		*k = 4, c = 1;
	else if (i >= 4 && memcmp(s + i - 4, "rank", 4) == 0)
		*k = 4, c = 3;
	if (!c)
		return 0;
	/* A key starts a word: after a space, or after stray '=' signs that
	 * follow a space (the tokenizer skips those). */
	size_t j = i - *k;
	while (j > 0 && s[j - 1] == '=')
		j--;
	if (j > 0 && !is_space((unsigned char)s[j - 1]))
		return 0;
	return c;
}

/* The bytes of w equal to b, as the high bit of each byte; the lowest set
 * byte is exact, higher ones may be false (checked by the caller). */
static inline uint64_t bytes_eq(uint64_t w, unsigned char b)
{
	uint64_t x = w ^ (0x0101010101010101ull * b);
	return (x - 0x0101010101010101ull) & ~x & 0x8080808080808080ull;
}

/* One '=' at s[i] of an unquoted line: a coordinate when a step, epoch or
 * rank key starts a word before it. */
static void coord_at(dp_matcher *m, const char *s, size_t n, size_t i, dp_match *out)
{
	size_t k;
	int c = coord_before(s, i, &k);
	if (!c)
		return;
	size_t v = i + 1, e = v;
	while (e < n && (unsigned char)s[e] > ' ')
		e++;
	if (dp_number_valid(s + v, e - v))
		set_coord(m, out, c, s + v, e - v);
}

/* Coordinates of a line, as scan_logfmt() finds them, without tokenizing
 * (the regex path calls this for every line that matched): in a line
 * without quotes, a key is a word start and a value runs to the next
 * space, so each '=' (found 8 bytes at a time) preceded by step, epoch or
 * rank at a word start is one.  Returns -1 for a line with a quote: those
 * go to scan_logfmt(). */
static int scan_coords(dp_matcher *m, const char *s, size_t n, dp_match *out)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t w;
		memcpy(&w, s + i, 8);
		uint64_t hit = bytes_eq(w, '=') | bytes_eq(w, '"');
		while (hit) {
			size_t j = i + (size_t)(__builtin_ctzll(hit) >> 3);
			hit &= hit - 1;
			if (s[j] == '"')
				return -1;
			if (s[j] == '=')
				coord_at(m, s, n, j, out);
		}
	}
	for (; i < n; i++) {
		if (s[i] == '"')
			return -1;
		if (s[i] == '=')
			coord_at(m, s, n, i, out);
	}
	return 0;
}

/* Copy a number's text into the arena; returns its offset or -1. */
static long arena_put(dp_matcher *m, const char *s, size_t n)
{
	size_t off = m->arena.len;
	return dp_buf_add(&m->arena, s, n) < 0 ? -1 : (long)off;
}

static size_t json_number_text(json_t *v, char *buf)
{
	if (json_is_integer(v))
		return (size_t)snprintf(buf, DP_NUMBER_BUF, "%" JSON_INTEGER_FORMAT,
					json_integer_value(v));
	return strlen(dp_fmt_double(json_real_value(v), buf, DP_NUMBER_BUF));
}

/* A line holding one JSON object: coordinates, and samples from numeric
 * members when take_samples.  Returns the new sample count, or -1 when the
 * line is not a JSON object. */
static int scan_json(dp_matcher *m, const char *s, size_t n, dp_match *out, int nsamp,
		     int take_samples)
{
	json_t *root = json_loadb(s, n, 0, NULL);
	if (!root)
		return -1;
	if (!json_is_object(root)) {
		json_decref(root);
		return -1;
	}
	const char *key;
	json_t *v;
	int first = nsamp;
	dp_buf_reset(&m->arena);
	json_object_foreach(root, key, v)
	{
		if (!json_is_number(v))
			continue;
		char buf[DP_NUMBER_BUF];
		size_t klen = strlen(key);
		int c = coord_key(key, klen);
		if (c) {
			size_t bl = json_number_text(v, buf);
			if (c == 1 && !out->step) {
				memcpy(m->step_buf, buf, bl);
				set_coord(m, out, c, m->step_buf, bl);
			} else if (c == 2 && !out->epoch) {
				memcpy(m->epoch_buf, buf, bl);
				set_coord(m, out, c, m->epoch_buf, bl);
			} else if (c == 3) {
				set_coord(m, out, c, buf, bl);
			}
			if (!take_samples || m->logfmt_all)
				continue;
		}
		if (!take_samples)
			continue;
		int id = key_metric(m, key, klen);
		if (id < 0)
			continue;
		size_t bl = json_number_text(v, buf);
		long off = arena_put(m, buf, bl);
		if (off >= 0)
			nsamp = push_sample(m, nsamp, id, (const char *)(intptr_t)off, bl);
	}
	/* Offsets into the arena become pointers now that it stopped moving. */
	for (int i = first; i < nsamp; i++)
		m->samples[i].text = m->arena.p + (intptr_t)m->samples[i].text;
	json_decref(root);
	return nsamp;
}

static void note_error(char *buf, size_t size, unsigned long long *count, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void note_error(char *buf, size_t size, unsigned long long *count, const char *fmt, ...)
{
	if ((*count)++ == 0) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(buf, size, fmt, ap);
		va_end(ap);
	}
}

static int first_nonblank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!is_space((unsigned char)s[i]))
			return (unsigned char)s[i];
	return -1;
}

int dp_matcher_match(dp_matcher *m, const char *line, size_t len, dp_match *out)
{
	memset(out, 0, sizeof *out);
	out->rank = -1;
	if (len && line[len - 1] == '\r')
		len--;
	int tag = -1;
	if (len && line[0] == '[') {
		size_t t = dp_mpi_tag(line, len, &tag);
		line += t;
		len -= t;
	}
	int n = 0;
	for (int i = 0; i < m->ndefs; i++) {
		const struct def *d = &m->defs[i];
		int rc = d->jit ? pcre2_jit_match(d->code, (PCRE2_SPTR)line, len, 0, 0, m->md,
						  m->mctx)
				: pcre2_match(d->code, (PCRE2_SPTR)line, len, 0, 0, m->md, m->mctx);
		if (rc == PCRE2_ERROR_NOMATCH)
			continue;
		if (rc < 0) {
			PCRE2_UCHAR msg[120];
			pcre2_get_error_message(rc, msg, sizeof msg);
			note_error(m->st.first_match_error, sizeof m->st.first_match_error,
				   &m->st.match_errors, "%s: %s", m->names[d->metric].s,
				   (const char *)msg);
			continue;
		}
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m->md);
		if (rc == 1 || ov[2] == PCRE2_UNSET)
			continue; /* the value group did not take part */
		const char *t = line + ov[2];
		size_t tl = ov[3] - ov[2];
		if (!dp_number_valid(t, tl)) {
			char *sv = dp_shown(t, tl > 40 ? 40 : tl); /* the log's text, escaped */
			note_error(m->st.first_not_number, sizeof m->st.first_not_number,
				   &m->st.not_numbers, "%s: \"%s\"", m->names[d->metric].s,
				   sv ? sv : "?");
			free(sv);
			continue;
		}
		n = push_sample(m, n, d->metric, t, tl);
	}
	int json = -1;
	if (m->logfmt) {
		if (first_nonblank(line, len) == '{')
			json = scan_json(m, line, len, out, n, 1);
		if (json >= 0)
			n = json;
		else
			n = scan_logfmt(m, line, len, out, n, 1);
	} else if (n > 0) {
		if (first_nonblank(line, len) == '{')
			json = scan_json(m, line, len, out, n, 0);
		if (json < 0 && scan_coords(m, line, len, out) < 0) {
			out->step = out->epoch = NULL;
			out->rank = -1;
			scan_logfmt(m, line, len, out, n, 0);
		}
	}
	/* the rank: a rank= key's, else --tag-output's; but once tagged lines
	 * have carried rank= keys (dp-train --log-all-ranks), a tagged line
	 * without one is the job's (rank 0 writes the job's lines), not rank
	 * 0's own */
	if (out->rank >= 0)
		m->tag_keyed |= tag >= 0;
	else if (!m->tag_keyed)
		out->rank = tag;
	if (n > 0 && memchr(line, 0, len)) {
		m->st.binary_lines++;
		return DP_EDATA;
	}
	out->samples = m->samples;
	out->n = n;
	return n;
}

/* ---- Plot grouping ------------------------------------------------------ */

size_t dp_metric_family(const char *name, size_t len, const char **start)
{
	static const char *const prefixes[] = {
		"validation_", "validation:", "validation/", "valid_", "valid:", "val_",   "val:",
		"val/",        "training_",   "training:",   "train_", "train:", "train/", "test_",
		"test:",       "test/",       "eval_",       "eval:",  "eval/",
	};
	for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
		size_t pl = strlen(prefixes[i]);
		if (len > pl && memcmp(name, prefixes[i], pl) == 0) {
			*start = name + pl;
			return len - pl;
		}
	}
	*start = name;
	return len;
}
