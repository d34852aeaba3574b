/* data.c - the input pipeline: batches in order, the last batch kept or
 * dropped, the shuffle buffer (every sample once per epoch, no sample out
 * before it is read, the same order for the same seed and epoch), skipping
 * for resume, the reader thread, shards, several files, commands, and
 * errors that name the file, record and byte offset. */
#define _GNU_SOURCE
#include "dp_data.h"
#include "dp_example.h"
#include "tap.h"

#include <stdlib.h>
#include <unistd.h>

enum { N = 30, IN = 3, K = 4 };
static char dir[] = "/tmp/dpdata.XXXXXX";
static char f1[300], f2[300];
static uint64_t offsets[N];

/* Sample i: image (i, i + 0.25, i + 0.5), label i % K; record `skip_label`
 * has no label. */
static void write_file(const char *path, int first, int n, int skip_label)
{
	dp_err e;
	FILE *f = fopen(path, "wb");
	dp_writer *w = dp_writer_open_mem(DP_COMP_NONE, 0, &e);
	dp_exbuild b = {0};
	for (int i = first; i < first + n; i++) {
		float x[IN] = {(float)i, i + 0.25f, i + 0.5f};
		int64_t y = i % K;
		dp_exbuild_reset(&b);
		dp_exbuild_floats(&b, "image", 5, x, IN);
		if (i != skip_label)
			dp_exbuild_int64s(&b, "label", 5, &y, 1);
		const uint8_t *p;
		size_t len;
		dp_exbuild_finish(&b, &p, &len);
		offsets[i - first] = dp_writer_bytes(w);
		dp_writer_write(w, p, len, &e);
	}
	dp_writer_finish(w, &e);
	size_t len;
	const uint8_t *m = dp_writer_mem(w, &len);
	fwrite(m, 1, len, f);
	fclose(f);
	dp_writer_free(w);
	dp_exbuild_free(&b);
}

static dp_data_opts opts(const char *const *paths, size_t n)
{
	dp_data_opts o = {0};
	o.inputs = paths;
	o.ninputs = n;
	o.feature = "image";
	o.label = "label";
	o.in_size = IN;
	o.label_kind = DP_LABEL_CLASS;
	o.nclass = K;
	o.batch = 8;
	o.seed = 11;
	return o;
}

/* Run epoch `epoch` skipping `skip`; the sample ids in order into ids,
 * batch sizes into sizes; returns the number of samples, -1 on error. */
static int epoch_ids(dp_data *d, uint64_t epoch, uint64_t skip, int *ids, int *sizes, int *nb,
		     dp_err *e)
{
	if (dp_data_epoch(d, epoch, skip, e) < 0)
		return -1;
	const dp_batch *b;
	int n = 0, rc, good = 1;
	*nb = 0;
	while ((rc = dp_data_next(d, &b, e)) == 1) {
		sizes[(*nb)++] = (int)b->n;
		for (size_t i = 0; i < b->n; i++) {
			int id = (int)b->x[i * IN];
			good &= b->x[i * IN + 2] == id + 0.5f && b->y[i] == id % K;
			ids[n++] = id;
		}
	}
	return rc < 0 || !good ? -1 : n;
}

static int is_perm(const int *ids, int n, int lo, int hi)
{
	int seen[200] = {0};
	if (n != hi - lo)
		return 0;
	for (int i = 0; i < n; i++) {
		if (ids[i] < lo || ids[i] >= hi || seen[ids[i]]++)
			return 0;
	}
	return 1;
}

/* In order: every sample, the batches, the stats, --last-batch drop. */
static void test_order(void)
{
	dp_err e;
	const char *one[] = {f1};
	int ids[200], sizes[40], nb;
	dp_data_opts o = opts(one, 1);
	dp_data *d = dp_data_open(&o, &e);
	int n = epoch_ids(d, 0, 0, ids, sizes, &nb, &e);
	int inorder = n == N;
	for (int i = 0; i < n; i++)
		inorder &= ids[i] == i;
	ok(inorder, "no shuffle: every sample, in order, decoded right");
	ok(nb == 4 && sizes[0] == 8 && sizes[3] == 6, "batches of 8, the last of 6 kept");
	dp_data_stats st;
	dp_data_stats_get(d, &st);
	ok(st.records == N && st.samples == N && st.batches == 4, "stats");
	dp_data_close(d);
	o.drop_last = 1;
	d = dp_data_open(&o, &e);
	n = epoch_ids(d, 0, 0, ids, sizes, &nb, &e);
	dp_data_stats_get(d, &st);
	ok(n == 24 && nb == 3 && st.dropped == 6, "--last-batch drop: 3 batches, 6 dropped");
	dp_data_close(d);
}

/* Shuffled through a buffer of 5 and of 1000 records. */
static void test_shuffle(void)
{
	dp_err e;
	const char *one[] = {f1};
	int ids[200], ids2[200], sizes[40], sizes2[40], nb, nb2, n;
	dp_data_opts o;
	dp_data *d;
	for (size_t buf = 5; buf <= 1000; buf += 995) {
		o = opts(one, 1);
		o.shuffle = buf;
		d = dp_data_open(&o, &e);
		n = epoch_ids(d, 0, 0, ids, sizes, &nb, &e);
		ok(is_perm(ids, n, 0, N), "shuffle %zu: every sample once", buf);
		int early = 0, moved = 0;
		for (int p = 0; p < n; p++) {
			early |= p < ids[p] - (int)buf;
			moved += ids[p] != p;
		}
		ok(!early && moved > N / 2, "shuffle %zu: nothing out before it is read; order changed",
		   buf);
		n = epoch_ids(d, 1, 0, ids2, sizes, &nb, &e);
		ok(is_perm(ids2, n, 0, N) && memcmp(ids, ids2, sizeof(int) * N),
		   "shuffle %zu: another order in the next epoch", buf);
		n = epoch_ids(d, 0, 0, ids2, sizes, &nb, &e);
		ok(!memcmp(ids, ids2, sizeof(int) * N), "shuffle %zu: epoch 0 again, the same order",
		   buf);
		/* resume: skipping 2 batches gives the rest of the same epoch */
		n = epoch_ids(d, 0, 2, ids2, sizes2, &nb2, &e);
		ok(n == N - 16 && !memcmp(ids + 16, ids2, sizeof(int) * (size_t)n) && nb2 == 2,
		   "shuffle %zu: skip 2 batches, the rest is the same", buf);
		dp_data_close(d);
		/* the reader thread */
		o.prefetch = 2;
		d = dp_data_open(&o, &e);
		n = epoch_ids(d, 0, 0, ids2, sizes2, &nb2, &e);
		ok(n == N && !memcmp(ids, ids2, sizeof(int) * N), "shuffle %zu: same with a reader thread",
		   buf);
		/* abandon an epoch midway, start another */
		const dp_batch *b;
		dp_data_epoch(d, 1, 0, &e);
		dp_data_next(d, &b, &e);
		n = epoch_ids(d, 0, 0, ids2, sizes2, &nb2, &e);
		ok(n == N && !memcmp(ids, ids2, sizeof(int) * N),
		   "shuffle %zu: an abandoned epoch leaves nothing behind", buf);
		dp_data_close(d);
	}
}

/* Shards partition the records. */
static void test_shards(void)
{
	const char *one[] = {f1};
	int count[N] = {0}, part = 1;
	for (unsigned s = 0; s < 3; s++) {
		dp_err e;
		int ids[200], sizes[40], nb;
		dp_data_opts o = opts(one, 1);
		o.shard_index = s;
		o.shard_count = 3;
		dp_data *d = dp_data_open(&o, &e);
		int n = epoch_ids(d, 0, 0, ids, sizes, &nb, &e);
		for (int i = 0; i < n; i++) {
			count[ids[i]]++;
			part &= ids[i] % 3 == (int)s;
		}
		dp_data_close(d);
	}
	for (int i = 0; i < N; i++)
		part &= count[i] == 1;
	ok(part, "3 shards: record i in shard i %% 3, each once");
}

/* Shards in blocks after the shuffle (data parallelism): the j-th
 * batches of 3 readers with batch 4 are, in rank order, exactly the
 * j-th batch of one reader with batch 12; with a resume skip too. */
static void test_block_shards(void)
{
	dp_err e;
	const char *one[] = {f1};
	dp_data_opts o;
	dp_data *d;
	for (uint64_t skip = 0; skip < 2; skip++) {
		int all[N], na, szs[N], nba;
		o = opts(one, 1);
		o.shuffle = 7;
		o.batch = 12;
		d = dp_data_open(&o, &e);
		na = epoch_ids(d, 1, skip, all, szs, &nba, &e);
		dp_data_close(d);
		int got[3][N], ng[3], nbs[3], sz3[3][N], same = na > 0;
		for (unsigned r = 0; r < 3; r++) {
			o = opts(one, 1);
			o.shuffle = 7;
			o.batch = 4;
			o.shard_index = r;
			o.shard_count = 3;
			o.shard_block = 4;
			d = dp_data_open(&o, &e);
			ng[r] = epoch_ids(d, 1, skip, got[r], sz3[r], &nbs[r], &e);
			dp_data_close(d);
		}
		/* rebuild one reader's order: batch j = rank 0's j-th, rank 1's, rank 2's */
		int merged[N], nm = 0, at[3] = {0};
		for (int j = 0; j < nba; j++)
			for (int r = 0; r < 3; r++)
				for (int k = 0; j < nbs[r] && k < sz3[r][j]; k++)
					merged[nm++] = got[r][at[r]++];
		same &= nm == na && !memcmp(merged, all, sizeof(int) * (size_t)na);
		ok(same, "block shards after a shuffle = one reader's global batches (skip %d: %d, %d+%d+%d)",
		   (int)skip, na, ng[0], ng[1], ng[2]);
	}
}

/* Several files: globbed, shuffled together, file order per epoch. */
static void test_files(void)
{
	dp_err e;
	int ids[200], sizes[40], nb, n;
	dp_data_opts o;
	dp_data *d;
	char pat[320];
	snprintf(pat, sizeof pat, "%s/*.tfrecord", dir);
	const char *glob1[] = {pat};
	o = opts(glob1, 1);
	d = dp_data_open(&o, &e);
	ok(d && dp_data_nsources(d) == 2, "a glob finds both files");
	n = epoch_ids(d, 0, 0, ids, sizes, &nb, &e);
	ok(n == 2 * N && ids[0] == 0 && ids[N] == N, "in name order without shuffling");
	dp_data_close(d);
	o.shuffle = 4;
	d = dp_data_open(&o, &e);
	int second_first = 0, perms = 1;
	for (int ep = 0; ep < 8; ep++) {
		n = epoch_ids(d, (uint64_t)ep, 0, ids, sizes, &nb, &e);
		second_first += ids[0] >= N;
		perms &= is_perm(ids, n, 0, 2 * N);
	}
	ok(perms, "two files, 8 epochs: every sample once in each");
	ok(second_first > 0 && second_first < 8, "the file order changes between epochs (%d of 8)",
	   second_first);
	dp_data_close(d);
}

/* A command's output; a failing command. */
static void test_command(void)
{
	dp_err e;
	int ids[200], sizes[40], nb, n;
	dp_data_opts o;
	dp_data *d;
	char cmd[400];
	snprintf(cmd, sizeof cmd, "cat %s", f1);
	o = opts(NULL, 0);
	o.cmd = cmd;
	d = dp_data_open(&o, &e);
	n = epoch_ids(d, 0, 0, ids, sizes, &nb, &e);
	ok(n == N && ids[N - 1] == N - 1, "a command's output");
	dp_data_close(d);
	snprintf(cmd, sizeof cmd, "cat %s; exit 5", f1);
	d = dp_data_open(&o, &e);
	n = epoch_ids(d, 0, 0, ids, sizes, &nb, &e);
	ok(n < 0, "a failing command fails the epoch");
	like(e.msg, "exited with status 5", "and says how it ended");
	dp_data_close(d);
}

/* Errors name file, record and offset; bad options, bad scales. */
static void test_errors(void)
{
	dp_err e;
	const char *one[] = {f1};
	int ids[200], sizes[40], nb;
	write_file(f1, 0, N, 13);
	dp_data_opts o = opts(one, 1);
	o.shuffle = 7;
	dp_data *d = dp_data_open(&o, &e);
	int n = epoch_ids(d, 0, 0, ids, sizes, &nb, &e);
	char want[400];
	snprintf(want, sizeof want, "%s: record 13 at byte %llu: no label 'label' (the record has: image)",
		 f1, (unsigned long long)offsets[13]);
	ok(n < 0, "a record without its label fails");
	is_str(e.msg, want, "the message names file, record and byte offset");
	dp_data_close(d);
	const char *none[] = {"/nonexistent/x.tfrecord"};
	o = opts(none, 1);
	ok(!dp_data_open(&o, &e), "a missing file");
	like(e.msg, "/nonexistent/x.tfrecord: No such file", "says so");
	o.in_size = 0;
	ok(!dp_data_open(&o, &e), "bad options refused");
	double sc;
	ok(dp_parse_scale("s", "1/255", &sc, &e) == 0 && sc == 1.0 / 255, "scale 1/255");
	ok(dp_parse_scale("s", "2e-3", &sc, &e) == 0 && sc == 2e-3, "scale 2e-3");
	ok(dp_parse_scale("s", "0", &sc, &e) < 0 && dp_parse_scale("s", "1/0", &sc, &e) < 0 &&
		   dp_parse_scale("s", "x", &sc, &e) < 0 && dp_parse_scale("s", "1/2/3", &sc, &e) < 0,
	   "bad scales refused");
	is_str(e.msg, "s '1/2/3': want a non-zero number such as 0.5 or 1/255", "... saying so");
	ok(dp_parse_scale("--scale", "1e39", &sc, &e) == DP_ELIMIT &&
		   dp_parse_scale("--scale", "1e-50", &sc, &e) == DP_ELIMIT,
	   "scales beyond float32's range refused");
	is_str(e.msg, "--scale '1e-50': beyond float32's range (inputs are float32: a magnitude "
		      "from 1.4e-45 to 3.4e+38)", "... saying so");
}

int main(void)
{
	if (!mkdtemp(dir))
		return 1;
	snprintf(f1, sizeof f1, "%s/a.tfrecord", dir);
	snprintf(f2, sizeof f2, "%s/b.tfrecord", dir);
	write_file(f2, N, N, -1);
	write_file(f1, 0, N, -1);
	test_order();
	test_shuffle();
	test_shards();
	test_block_shards();
	test_files();
	test_command();
	test_errors(); /* rewrites f1 */
	char cmd[400];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	if (system(cmd) != 0)
		return 1;
	return done_testing();
}
