/* dp.c - dp.h's small helpers: option numbers (dp_parse_count), byte
 * sizes (dp_parse_size) and name templates (dp_expand). */
#include "dp.h"
#include "tap.h"

#include <stdlib.h>
#include <string.h>

static void test_count(void)
{
	uint64_t v = 7;
	dp_err e;
	is_int(dp_parse_count("-n", "0", 0, 10, &v, &e), 0, "'0' in 0..10");
	is_int(v, 0, "is 0");
	is_int(dp_parse_count("-n", "10", 0, 10, &v, &e), 0, "'10' in 0..10 (bounds inclusive)");
	is_int(v, 10, "is 10");
	is_int(dp_parse_count("--seed", "18446744073709551615", 0, UINT64_MAX, &v, &e), 0,
	       "UINT64_MAX");
	ok(v == UINT64_MAX, "is UINT64_MAX");
	is_int(dp_parse_count("--seed", "0xDEADbeef", 0, UINT64_MAX, &v, &e), 0, "hex");
	is_int(v, 0xdeadbeef, "is 0xdeadbeef");
	is_int(dp_parse_count("-n", "007", 0, 10, &v, &e), 0, "leading zeros are decimal");
	is_int(v, 7, "is 7");

	const char *bad[] = {"", "-1", "+1", " 1", "1 ", "1k", "1.0", "0x", "0xg", "abc",
			     "18446744073709551616", "11", "x1", NULL};
	for (int i = 0; bad[i]; i++) {
		v = 99;
		int rc = dp_parse_count("-n", bad[i], 0, 10, &v, &e);
		ok(rc == DP_EARG && v == 99, "refused: '%s' (%s)", bad[i], e.msg);
	}
	dp_parse_count("--head", "x", 1, 5, &v, &e);
	is_str(e.msg, "--head 'x': want a whole number from 1 to 5", "message names option and range");
	dp_parse_count("--skip", "-3", 0, UINT64_MAX, &v, &e);
	is_str(e.msg, "--skip '-3': want a whole number, 0 or more", "no upper bound when there is none");
	is_int(dp_parse_count("-n", "0", 1, 10, &v, &e), DP_EARG, "below min");
}

static void test_size(void)
{
	uint64_t v;
	is_int(dp_parse_size("4096", &v), 0, "4096");
	is_int(v, 4096, "is 4096");
	is_int(dp_parse_size("64k", &v), 0, "64k");
	is_int(v, 65536, "is 65536");
	is_int(dp_parse_size("1.5G", &v), 0, "1.5G");
	is_int(v, 3ull << 29, "is 1.5 GiB");
	is_int(dp_parse_size("256MiB", &v), 0, "256MiB");
	is_int(v, 256ull << 20, "is 256 MiB");
	is_int(dp_parse_size("12x", &v), DP_EARG, "refused: 12x");
	is_int(dp_parse_size("-1", &v), DP_EARG, "refused: -1");
	is_int(dp_parse_size("", &v), DP_EARG, "refused: empty");
	is_int(dp_parse_size("nan", &v), DP_EARG, "refused: nan");
	is_int(dp_parse_size("inf", &v), DP_EARG, "refused: inf");
}

static void test_expand(void)
{
	setenv("OMPI_COMM_WORLD_RANK", "3", 1);
	setenv("OMPI_COMM_WORLD_SIZE", "16", 1);
	char *s = dp_expand("d/train-{rank:5}-of-{size:5}.tfrecord {rank} {size:2} {size:1} {rank:0} "
			    "{rank:x} {rank:33} {nope:3}",
			    NULL);
	is_str(s, "d/train-00003-of-00016.tfrecord 3 16 16 {rank:0} {rank:x} {rank:33} {nope:3}",
	       "{rank:5}, {size:5} padded; bad widths and unknown names left as they are");
	free(s);
	const char *vars[] = {"rank", "7", "epoch", "12", "name", "ab", NULL};
	s = dp_expand("{rank:3} {epoch:4} {name:4} {rank}", vars);
	is_str(s, "007 0012 {name:4} 7", "padding a variable given; not a word");
	free(s);
}

int main(void)
{
	test_count();
	test_size();
	test_expand();
	return done_testing();
}
