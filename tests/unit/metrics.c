/* metrics.c - dp_metrics.h: numbers (against strtod and printf as the
 * references), the logfmt tokenizer, the Open MPI tag prefix, the matcher
 * (regexes, SageMaker definitions, logfmt and JSON lines, coordinates,
 * binary lines, UTF-8) and the fast coordinate scan against the tokenizer
 * on random lines. */
#define _GNU_SOURCE
#include "dp_metrics.h"
#include "tap.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static void numbers(void)
{
	static const char *const good[] = {"0",   "-1",  "+1.5",     ".5",   "5.",  "1e5",
					   "1E-5", "nan", "-inf",     "Infinity", "NaN", "007",
					   "0.4123", "1.2e+308", "-0"};
	static const char *const bad[] = {"",   "-",  ".",   "e5",    "1e",   "1.2.3", "0x10", " 1",
					  "1 ", "--1", "1e+", "nanx",  "in",   "1,5",   "+",    "1e5.5"};
	for (size_t i = 0; i < sizeof good / sizeof *good; i++)
		ok(dp_number_valid(good[i], strlen(good[i])), "number: '%s' is one", good[i]);
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
		ok(!dp_number_valid(bad[i], strlen(bad[i])), "number: '%s' is not", bad[i]);

	static const char *const json[] = {"0", "0.5", "-0", "1e5", "-1.25E-3", "123456"};
	static const char *const notjson[] = {".5", "01", "1.", "+1", "nan", "inf", "1e", "-"};
	for (size_t i = 0; i < sizeof json / sizeof *json; i++)
		ok(dp_number_is_json(json[i], strlen(json[i])), "json number: '%s'", json[i]);
	for (size_t i = 0; i < sizeof notjson / sizeof *notjson; i++)
		ok(!dp_number_is_json(notjson[i], strlen(notjson[i])), "not a json number: '%s'",
		   notjson[i]);

	/* dp_number_value against strtod on random decimals, including the
	 * fast path's edges (15 digits, 22 decimals) and beyond. */
	srand(7);
	int bad_values = 0;
	char buf[64];
	for (int i = 0; i < 200000; i++) {
		int len = 0, intd = rand() % 8, fracd = rand() % 25;
		if (rand() % 4 == 0)
			buf[len++] = '-';
		for (int k = 0; k < intd; k++)
			buf[len++] = (char)('0' + rand() % 10);
		if (fracd || !intd) {
			buf[len++] = '.';
			for (int k = 0; k < fracd || (!intd && k < 1); k++)
				buf[len++] = (char)('0' + rand() % 10);
		}
		if (rand() % 10 == 0)
			len += snprintf(buf + len, sizeof buf - (size_t)len, "e%d", rand() % 40 - 20);
		buf[len] = 0;
		double want = strtod(buf, NULL), got = dp_number_value(buf, (size_t)len);
		if (memcmp(&want, &got, sizeof want) != 0 && bad_values++ < 5)
			printf("#   '%s': got %.17g want %.17g\n", buf, got, want);
	}
	is_int(bad_values, 0, "dp_number_value equals strtod on 200000 random decimals");
	ok(isnan(dp_number_value("1.2.3", 5)), "dp_number_value of a non-number is NaN");
	ok(isinf(dp_number_value("-inf", 4)) && dp_number_value("-inf", 4) < 0, "-inf");
}

static void logfmt(void)
{
	const char *line = "  epoch=1 step=100 msg=\"a \\\"b\\\" c\" bare x= =y z=\"open";
	struct {
		const char *k, *v;
		int has, q;
	} want[] = {{"epoch", "1", 1, 0},           {"step", "100", 1, 0},
		    {"msg", "a \\\"b\\\" c", 1, 1}, {"bare", "", 0, 0},
		    {"x", "", 1, 0},               {"y", "", 0, 0},
		    {"z", "open", 1, 1}};
	size_t pos = 0, n = strlen(line), i = 0;
	dp_logfmt_kv kv;
	int okall = 1;
	while (dp_logfmt_next(line, n, &pos, &kv)) {
		if (i >= sizeof want / sizeof *want) {
			okall = 0;
			break;
		}
		if (kv.key_len != strlen(want[i].k) || memcmp(kv.key, want[i].k, kv.key_len) ||
		    kv.val_len != strlen(want[i].v) || memcmp(kv.val, want[i].v, kv.val_len) ||
		    kv.has_value != want[i].has || kv.quoted != want[i].q) {
			printf("#   pair %zu: '%.*s'='%.*s' has %d quoted %d\n", i, (int)kv.key_len,
			       kv.key, (int)kv.val_len, kv.val, kv.has_value, kv.quoted);
			okall = 0;
		}
		i++;
	}
	ok(okall && i == sizeof want / sizeof *want, "logfmt: keys, quoted values, bare keys, "
						     "empty values, stray '=', unterminated quote");
	pos = 0;
	ok(!dp_logfmt_next("   ", 3, &pos, &kv), "logfmt: a blank line has no pairs");
	pos = 0;
	ok(!dp_logfmt_next("\"only a quoted string\"", 22, &pos, &kv), "logfmt: a stray string");
}

static void tags(void)
{
	int rank = -1;
	const char *a = "[1,3]<stdout>:loss=1";
	is_int(dp_mpi_tag(a, strlen(a), &rank), 14, "tag: [1,3]<stdout>: is 14 bytes");
	is_int(rank, 3, "tag: rank 3");
	const char *b = "[12,0]<stderr>: x";
	is_int(dp_mpi_tag(b, strlen(b), &rank), 16, "tag: <stderr> and the space Open MPI 5 adds");
	is_int(rank, 0, "tag: rank 0");
	const char *bad[] = {"[1,3]<stdout>", "[a,3]<stdout>:x", "[1,]<stdout>:x", "1,3]<stdout>:x",
			     "[1,3]<other>:xx", "[1;3]<stdout>:x", "[1,99999999999]<stdout>:x"};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
		is_int(dp_mpi_tag(bad[i], strlen(bad[i]), &rank), 0, "not a tag: %s", bad[i]);
}

/* Match line with m; returns the samples as "name=value;..." and the
 * coordinates as "step,epoch,rank". */
static int match(dp_matcher *m, const char *line, char *samples, char *coords)
{
	dp_match mt;
	int n = dp_matcher_match(m, line, strlen(line), &mt);
	samples[0] = coords[0] = 0;
	for (int i = 0; i < n; i++)
		sprintf(samples + strlen(samples), "%s%s=%.*s", i ? ";" : "",
			dp_matcher_name(m, mt.samples[i].metric), (int)mt.samples[i].len,
			mt.samples[i].text);
	if (n > 0)
		sprintf(coords, "%.*s,%.*s,%d", (int)mt.step_len, mt.step ? mt.step : "",
			(int)mt.epoch_len, mt.epoch ? mt.epoch : "", mt.rank);
	return n;
}

static void matcher(void)
{
	dp_err e;
	dp_matcher *m = dp_matcher_new();
	char s[512], c[128];

	is_int(dp_matcher_add(m, "loss", "loss=([0-9.", "-m loss", &e), DP_EARG, "bad regex");
	like(e.msg, "-m loss: regex \"loss=([0-9.\" at offset 11: missing terminating ]",
	     "bad regex: the message gives the offset");
	is_int(dp_matcher_add(m, "loss", "loss=[0-9.]+", "-m loss", &e), DP_EARG, "no group");
	like(e.msg, "has no capture group", "no group: said so");
	is_int(dp_matcher_add(m, "a\tb", "(1)", "-m x", &e), DP_EARG, "a tab in a name");
	is_int(dp_matcher_add(m, "a\xff", "(1)", "-m x", &e), DP_EARG, "invalid UTF-8 in a name");

	is_int(dp_matcher_add(m, "loss", "\\bloss=([0-9.]+)", "-m loss", &e), 0, "add loss");
	is_int(dp_matcher_add(m, "acc", "\\baccuracy=([0-9.]+)", "-m acc", &e), 0, "add acc");
	is_int(dp_matcher_add(m, "opt", "lr=(x)?([0-9.]+)", "-m opt", &e), 0, "add optional group");
	is_int(match(m, "epoch=2 step=300 loss=0.25 accuracy=0.9 lr=0.1", s, c), 2,
	       "two metrics on one line, the unset group gives none");
	is_str(s, "loss=0.25;acc=0.9", "the samples");
	is_str(c, "300,2,-1", "step and epoch");
	is_int(match(m, "[1,3]<stdout>:loss=0.5 step=7", s, c), 1, "a tagged line");
	is_str(c, "7,,3", "rank from the tag, no epoch");
	is_int(match(m, "loss=0.5 step=7 rank=2\r", s, c), 1, "a rank key, CRLF");
	is_str(c, "7,,2", "rank from the key");
	is_int(match(m, "loss=1.2.3", s, c), 0, "a capture that is not a number");
	is_int((int)dp_matcher_stats_get(m)->not_numbers, 1, "counted");
	is_str(dp_matcher_stats_get(m)->first_not_number, "loss: \"1.2.3\"", "and shown");
	dp_match mt;
	is_int(dp_matcher_match(m, "loss=0.5\0garbage", 16, &mt), DP_EDATA, "NUL bytes: binary");
	is_int((int)dp_matcher_stats_get(m)->binary_lines, 1, "binary lines counted");
	is_int(dp_matcher_match(m, "\0\0\0\0", 4, &mt), 0, "NUL bytes without a match: nothing");
	is_int(match(m, "{\"step\": 10, \"epoch\": 1, \"loss\": 0.5}", s, c), 0,
	       "a JSON line: the regex does not match \"loss\": 0.5");
	is_int(dp_matcher_add(m, "jloss", "\"loss\": ([0-9.]+)", "-m jloss", &e), 0, "add");
	is_int(match(m, "{\"step\": 10, \"epoch\": 1, \"loss\": 0.5}", s, c), 1, "now it does");
	is_str(c, "10,1,-1", "coordinates of a JSON line");
	is_int(match(m, "msg=\"step=5\" loss=0.5 step=6", s, c), 1, "quoted step=");
	is_str(c, "6,,-1", "a step inside quotes is not the step");
	dp_matcher_free(m);

	/* UTF-8 patterns on invalid UTF-8 lines. */
	m = dp_matcher_new();
	is_int(dp_matcher_add(m, "perte", "perte \xc3\xa9: ([0-9.]+)", "-m perte", &e), 0,
	       "a UTF-8 pattern");
	is_int(dp_matcher_add(m, "u", "(*UTF)u=(\\d+)", "-m u", &e), 0, "a (*UTF) pattern");
	is_int(match(m, "perte \xc3\xa9: 0.5", s, c), 1, "matches UTF-8");
	is_int(match(m, "\xff\xfe perte \xc3\xa9: 0.5 \xc3", s, c), 1,
	       "matches around invalid UTF-8");
	is_int(match(m, "\xff u=3 \xc0\xaf", s, c), 1, "(*UTF) on invalid UTF-8: matches");
	is_int((int)dp_matcher_stats_get(m)->match_errors, 0, "no UTF errors");
	dp_matcher_free(m);

	/* Catastrophic backtracking gives up on the line instead of hanging. */
	m = dp_matcher_new();
	is_int(dp_matcher_add(m, "x", "^(a+)+b", "-m x", &e), 0, "add a backtracking regex");
	char line[64];
	memset(line, 'a', 40);
	line[40] = 0;
	dp_match mt2;
	is_int(dp_matcher_match(m, line, 40, &mt2), 0, "no match on aaaa...");
	dp_matcher_free(m);

	/* Definitions. */
	m = dp_matcher_new();
	const char *defs = "[{\"Name\": \"train:loss\", \"Regex\": \"loss: ([0-9\\\\.]+)\"},"
			   " {\"Name\": \"validation:accuracy\", \"Regex\": \"val_acc=(\\\\S+)\"}]";
	is_int(dp_matcher_add_definitions(m, defs, strlen(defs), "defs.json", &e), 0,
	       "SageMaker definitions");
	is_int(dp_matcher_nmetrics(m), 2, "two metrics");
	is_str(dp_matcher_name(m, 0), "train:loss", "first name");
	is_int(match(m, "loss: 0.5 val_acc=0.75", s, c), 2, "both match");
	is_str(s, "train:loss=0.5;validation:accuracy=0.75", "values");
	const char *obj = "{\"MetricDefinitions\": [{\"Name\": \"x\", \"Regex\": \"x=(\\\\d+)\"}]}";
	is_int(dp_matcher_add_definitions(m, obj, strlen(obj), "d.json", &e), 0,
	       "describe-training-job's MetricDefinitions");
	struct {
		const char *json, *msg;
	} badd[] = {
		{"[{\"Name\": \"x\"}]", "d.json: entry 1: want an object with string \"Name\""},
		{"[1]", "d.json: entry 1:"},
		{"{\"a\": 1}", "d.json: not a list"},
		{"[]", "d.json: no metric definitions"},
		{"[{\"Name\": \"x\",\n \"Regex\": \"(\"}]", "d.json: entry 1 (x): regex \"(\" at offset 1"},
		{"[{\"Name\": \"x\", \"Regex\": \"a\"}]", "no capture group"},
		{"[{\"Name\": \"x\"\n, \"Regex\" \"a\"}]", "d.json: line 2 column"},
		{"[{\"Name\": \"x\\u0000y\", \"Regex\": \"(a)\"}]", "d.json: line 1 column"},
	};
	for (size_t i = 0; i < sizeof badd / sizeof *badd; i++) {
		dp_matcher *m2 = dp_matcher_new();
		int rc = dp_matcher_add_definitions(m2, badd[i].json, strlen(badd[i].json), "d.json",
						    &e);
		is_int(rc, DP_EARG, "bad definitions %zu rejected", i);
		like(rc < 0 ? e.msg : "", badd[i].msg, "bad definitions %zu: message", i);
		dp_matcher_free(m2);
	}
	dp_matcher_free(m);

	/* logfmt and JSON lines. */
	m = dp_matcher_new();
	is_int(dp_matcher_logfmt(m, NULL, &e), 0, "logfmt: every key");
	is_int(match(m, "epoch=1 step=100 loss=0.41 lr=1e-3 name=x t=12s q=\"3\" bad!key=1", s, c), 2,
	       "logfmt line");
	is_str(s, "loss=0.41;lr=1e-3", "numeric unquoted values of good keys; not step/epoch");
	is_str(c, "100,1,-1", "coordinates");
	is_int(match(m, "{\"epoch\": 2, \"step\": 5, \"loss\": 0.25, \"n\": 3, \"s\": \"x\", "
			"\"ok\": true, \"o\": {\"a\": 1}}",
		     s, c),
	       2, "JSON line");
	is_str(s, "loss=0.25;n=3", "numeric members");
	is_str(c, "5,2,-1", "JSON coordinates");
	is_int(match(m, "{not json loss=1", s, c), 1, "a line that only looks like JSON");
	dp_matcher_free(m);

	m = dp_matcher_new();
	is_int(dp_matcher_logfmt(m, "loss,val_loss", &e), 0, "logfmt: a key list");
	is_int(match(m, "step=1 loss=0.5 acc=0.9 val_loss=0.6", s, c), 2, "only listed keys");
	is_str(s, "loss=0.5;val_loss=0.6", "listed keys");
	is_int(dp_matcher_logfmt(m, "a b", &e), DP_EARG, "bad key in the list");
	dp_matcher_free(m);

	/* The name limit on keys found in logs. */
	m = dp_matcher_new();
	dp_matcher_logfmt(m, NULL, &e);
	for (int i = 0; i < 5000; i++) {
		char l[64];
		snprintf(l, sizeof l, "k%d=1", i);
		match(m, l, s, c);
	}
	is_int(dp_matcher_nmetrics(m), 4096, "at most 4096 keys from logs");
	is_int((int)dp_matcher_stats_get(m)->keys_dropped, 5000 - 4096, "the rest counted");
	dp_matcher_free(m);
}

/* The fast coordinate scan of the regex path (scan_coords) must find what
 * the tokenizer of the logfmt path finds, on random quote-free lines made
 * of the bytes that matter. */
static void coords_agree(void)
{
	dp_err e;
	dp_matcher *rx = dp_matcher_new(), *lf = dp_matcher_new();
	dp_matcher_add(rx, "z", "\\bz=(1)$", "-m z", &e);
	dp_matcher_logfmt(lf, "z", &e);
	static const char *const pieces[] = {"step", "epoch", "rank", "=", "=", " ", "\t", "1",
					     "2",    ".5",    "x",    "a=", "s", "k", "\x80", "e"};
	int diffs = 0, lines = 0;
	srand(11);
	for (int i = 0; i < 100000; i++) {
		char line[256] = "";
		int np = rand() % 14;
		for (int k = 0; k < np; k++)
			strcat(line, pieces[rand() % (sizeof pieces / sizeof *pieces)]);
		strcat(line, " z=1");
		char s1[512], c1[128], s2[512], c2[128];
		int n1 = match(rx, line, s1, c1), n2 = match(lf, line, s2, c2);
		if (n1 != 1 || n2 != 1)
			continue;
		lines++;
		if (strcmp(c1, c2) != 0 && diffs++ < 5)
			printf("#   '%s': scan %s, tokenizer %s\n", line, c1, c2);
	}
	ok(lines > 50000, "coordinates: %d random lines compared", lines);
	is_int(diffs, 0, "coordinates: the fast scan agrees with the tokenizer");
	dp_matcher_free(rx);
	dp_matcher_free(lf);
}

static void family(void)
{
	const char *f;
	size_t n = dp_metric_family("val_loss", 8, &f);
	ok(n == 4 && memcmp(f, "loss", 4) == 0, "family of val_loss is loss");
	n = dp_metric_family("validation:accuracy", 19, &f);
	ok(n == 8 && memcmp(f, "accuracy", 8) == 0, "family of validation:accuracy");
	n = dp_metric_family("val_", 4, &f);
	ok(n == 4, "val_ alone stays");
	n = dp_metric_family("lr", 2, &f);
	ok(n == 2 && f[0] == 'l', "lr is its own");
}

int main(void)
{
	numbers();
	logfmt();
	tags();
	matcher();
	coords_agree();
	family();
	return done_testing();
}
