/* shuffle.c - the full shuffle gives one order for a seed whatever the
 * memory limit (all in memory, one spill level, buckets split again), keeps
 * every item, and differs between seeds; the window shuffle keeps items,
 * moves none more than size-1 places earlier, and size 1 keeps the order. */
#define _GNU_SOURCE
#include "dp_shuffle.h"
#include "tap.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define N 20000

/* Item i: its 4-byte index then (i * 7) % 600 filler bytes. */
static size_t item(uint32_t i, uint8_t *buf)
{
	size_t len = 4 + (i * 7u) % 600;
	memcpy(buf, &i, 4);
	for (size_t j = 4; j < len; j++)
		buf[j] = (uint8_t)(i + j);
	return len;
}

/* Shuffle N items; order[k] = index of the k-th item out.  Returns the
 * spill levels, or -1 on failure. */
static int run(uint64_t seed, uint64_t memory, const char *dir, uint32_t *order)
{
	dp_err e;
	uint8_t buf[700];
	dp_shuffle *s = dp_shuffle_new(seed, memory, dir, &e);
	if (!s)
		return -1;
	for (uint32_t i = 0; i < N; i++)
		if (dp_shuffle_add(s, buf, item(i, buf), &e) < 0)
			return -1;
	const uint8_t *p;
	size_t len;
	int rc, k = 0, bad = 0;
	while ((rc = dp_shuffle_next(s, &p, &len, &e)) == 1) {
		uint32_t i;
		memcpy(&i, p, 4);
		if (k < N)
			order[k] = i;
		k++;
		bad |= i >= N || len != item(i, buf) || memcmp(p, buf, len) != 0;
	}
	dp_shuffle_stats st;
	dp_shuffle_stats_get(s, &st);
	dp_shuffle_free(s);
	if (rc < 0 || k != N || bad)
		return -1;
	return st.levels;
}

static int count_files(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;
	while (d && (de = readdir(d)))
		n += de->d_name[0] != '.';
	if (d)
		closedir(d);
	return n;
}

int main(void)
{
	static uint32_t a[N], b[N], c[N], d[N], f[N];
	char dir[] = "/tmp/dp-shuffle-test.XXXXXX";
	if (!mkdtemp(dir))
		return 1;
	is_int(run(5, 1ull << 30, dir, a), 0, "1 GiB: all in memory");
	is_int(run(5, 1u << 20, dir, b), 1, "1 MiB: one spill level");
	is_int(run(5, 16u << 10, dir, c), 2, "16 KiB: buckets split again");
	ok(!memcmp(a, b, sizeof a), "spilled order = in-memory order");
	ok(!memcmp(a, c, sizeof a), "split-again order = in-memory order");
	is_int(count_files(dir), 0, "no spill file left in the directory");
	static uint8_t seen[N];
	int all = 1, moved = 0;
	for (int k = 0; k < N; k++) {
		all &= !seen[a[k]];
		seen[a[k]] = 1;
		moved += a[k] != (uint32_t)k;
	}
	ok(all, "every item exactly once");
	ok(moved > N * 9 / 10, "the order is shuffled (%d of %d moved)", moved, N);
	run(6, 1ull << 30, dir, d);
	ok(memcmp(a, d, sizeof a) != 0, "another seed, another order");
	/* An unusable directory fails cleanly when a spill is needed. */
	dp_err e;
	dp_shuffle *s = dp_shuffle_new(1, 16u << 10, "/nonexistent/dir", &e);
	uint8_t buf[700];
	int rc = 0;
	for (uint32_t i = 0; i < 100 && rc == 0; i++)
		rc = dp_shuffle_add(s, buf, item(i, buf), &e);
	ok(rc < 0, "spill into a missing directory fails");
	like(e.msg, "/nonexistent/dir: cannot create a temporary file", "and says where");
	dp_shuffle_free(s);
	/* Empty shuffle. */
	s = dp_shuffle_new(1, 1u << 20, dir, &e);
	const uint8_t *p;
	size_t len;
	is_int(dp_shuffle_next(s, &p, &len, &e), 0, "an empty shuffle ends at once");
	dp_shuffle_free(s);
	rmdir(dir);

	/* Window. */
	for (size_t size = 1; size <= 1000; size *= 10) {
		dp_window *w = dp_window_new(9, size, &e);
		int k = 0, bound = 1;
		memset(seen, 0, sizeof seen);
		for (uint32_t i = 0; i < N; i++) {
			int r = dp_window_push(w, buf, item(i, buf), &p, &len, &e);
			if (r == 1)
				memcpy(&f[k++], p, 4);
		}
		while (dp_window_drain(w, &p, &len) == 1)
			memcpy(&f[k++], p, 4);
		dp_window_free(w);
		int once = k == N, inorder = 1;
		for (int j = 0; j < k && j < N; j++) {
			once &= !seen[f[j]];
			seen[f[j]] = 1;
			bound &= f[j] <= (uint32_t)j + size - 1;
			inorder &= f[j] == (uint32_t)j;
		}
		ok(once, "window %zu: every item once", size);
		ok(bound, "window %zu: no item more than %zu places early", size, size - 1);
		if (size == 1)
			ok(inorder, "window 1 keeps the order");
		else
			ok(!inorder, "window %zu changes the order", size);
	}
	return done_testing();
}
