/*
 * tap.h - the smallest TAP producer, for libdp's C unit tests.
 *
 *   ok(cond, "name %d", i);   is_int(got, want, "name");   is_str(...);
 *   done_testing();           (prints the plan, returns the exit status)
 *   tap_xorshift(&state);     (the tests' one pseudo-random generator)
 * Each check prints "ok N - name" or "not ok N - name" with a diagnostic;
 * prove(1) runs the binaries.
 */
#ifndef TAP_H
#define TAP_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int tap_n, tap_fail;

static int __attribute__((format(printf, 2, 3), unused)) ok(int cond, const char *fmt, ...)
{
	va_list ap;
	tap_n++;
	printf("%sok %d - ", cond ? "" : "not ", tap_n);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	if (!cond)
		tap_fail++;
	fflush(stdout);
	return cond;
}

#define is_int(got, want, ...)                                                                     \
	do {                                                                                       \
		long long g_ = (long long)(got), w_ = (long long)(want);                           \
		if (!ok(g_ == w_, __VA_ARGS__))                                                    \
			printf("#   got %lld, want %lld\n", g_, w_);                               \
	} while (0)

#define is_str(got, want, ...)                                                                     \
	do {                                                                                       \
		const char *g_ = (got), *w_ = (want);                                              \
		if (!ok(g_ && w_ && strcmp(g_, w_) == 0, __VA_ARGS__))                             \
			printf("#   got  '%s'\n#   want '%s'\n", g_ ? g_ : "(null)",               \
			       w_ ? w_ : "(null)");                                                \
	} while (0)

#define like(got, sub, ...)                                                                        \
	do {                                                                                       \
		const char *g_ = (got), *s_ = (sub);                                               \
		if (!ok(g_ && strstr(g_, s_) != NULL, __VA_ARGS__))                                \
			printf("#   '%s'\n#   does not contain '%s'\n", g_ ? g_ : "(null)", s_);   \
	} while (0)

/* Marsaglia's xorshift64: the next of *state (not 0), a test's data
 * made again the same from its seed. */
static uint64_t __attribute__((unused)) tap_xorshift(uint64_t *state)
{
	uint64_t x = *state;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *state = x;
}

static int __attribute__((unused)) done_testing(void)
{
	printf("1..%d\n", tap_n);
	return tap_fail ? 1 : 0;
}

#ifdef DP_COMM_H
/* A test under mpirun: *rank and *size of c; only rank 0's output goes on
 * (the others' stdout to /dev/null), led by "# " and c's description.
 * 0, or -1 when stdout could not be redirected. */
static int __attribute__((unused)) tap_comm_start(dp_comm *c, int *rank, int *size)
{
	*rank = dp_comm_rank(c), *size = dp_comm_size(c);
	if (*rank != 0 && !freopen("/dev/null", "w", stdout))
		return -1;
	printf("# %s\n", dp_comm_desc(c));
	return 0;
}
#endif

#endif
