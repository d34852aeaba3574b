/* comm.c - dp_comm: the gradient protocol (ranges reported from the end,
 * buckets, overlap on and off, sizes that do not divide among the ranks),
 * the sums, broadcasts, gathers, the settings check and the timeline.
 *
 * Run plainly it checks the job of one; tests/dp-comm.t runs it under
 * mpirun with 3 ranks, where rank 0 prints the TAP and every rank's
 * failures make the job fail.  Values are small integers and halves, so
 * every sum is exact and can be compared with ==. */
#define _GNU_SOURCE
#include "dp_comm.h"
#include "tap.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <unistd.h>

/* Element i of rank r's gradients. */
static float val(int r, size_t i) { return (float)(r + 1) + 0.5f * (float)(i % 1000); }

static int rank, size;
static float sumr; /* sum over ranks of (r + 1) */

/* Gradients in "layers" of 13 floats, buckets of 16, overlap off and on. */
static void test_grads(dp_comm *c)
{
	dp_err e;
	static const size_t ns[] = {1, 2, 3, 5, 7, 1000, 100003};
	for (int overlap = 0; overlap < 2; overlap++) {
		dp_comm_conf cc;
		dp_comm_conf_defaults(&cc);
		cc.overlap = overlap;
		cc.bucket_bytes = 64; /* a bucket every 16 floats */
		ok(dp_comm_configure(c, &cc, &e) == 0, "configure, overlap %d", overlap);
		for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
			size_t n = ns[k];
			float *g = malloc(n * sizeof *g);
			for (size_t i = 0; i < n; i++)
				g[i] = val(rank, i);
			int rc = dp_comm_grads_begin(c, g, n, &e);
			/* "layers" of 13 floats, reported last first */
			for (size_t hi = n; rc == 0 && hi > 0;) {
				size_t lo = hi > 13 ? hi - 13 : 0;
				rc = dp_comm_hook(c, 0, lo, hi - lo, &e);
				hi = lo;
			}
			if (rc == 0)
				rc = dp_comm_grads_wait(c, &e);
			int good = rc == 0;
			for (size_t i = 0; good && i < n; i++)
				good = g[i] == sumr + (float)size * 0.5f * (float)(i % 1000);
			ok(good, "overlap %d, %zu floats in layers of 13: summed over %d ranks%s%s", overlap,
			   n, size, rc ? ": " : "", rc ? e.msg : "");
			free(g);
		}
	}
	dp_comm_stats st;
	dp_comm_stats_get(c, &st);
	is_int(st.steps, 2 * 7, "stats: steps");
	if (size > 1)
		ok(st.calls > st.steps, "stats: buckets make several calls a step (%llu)",
		   (unsigned long long)st.calls);
}

static uint64_t fnv(const void *p, size_t len)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < len; i++)
		h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
	return h;
}

/* Every algorithm and wire format: the same bits on every rank, float32
 * exact, 16-bit within its rounding (a relative 2^-8 a hop for bfloat16,
 * 2^-11 for fp16), fp16 neither overflowing on large values nor flushing
 * small ones, and the bytes sent counted. */
static void test_wire(dp_comm *c)
{
	dp_err e;
	static const size_t ns[] = {1, 7, 100003, 300001};
	static const double scales[] = {1, 1e9, 1e-9};
	for (int algo = 0; algo < 3; algo++)
		for (int wire = 0; wire < 3; wire++) {
			dp_comm_conf cc;
			dp_comm_conf_defaults(&cc);
			cc.algo = algo;
			cc.wire = wire;
			cc.overlap = 0;
			int rc = dp_comm_configure(c, &cc, &e);
			if (algo == DP_ALLREDUCE_MPI && wire != DP_WIRE_F32) {
				ok(rc == DP_EARG && strstr(e.msg, "float32 only"),
				   "mpi allreduce with %s: refused", dp_comm_wire_name(wire));
				continue;
			}
			dp_comm_stats st0, st1;
			dp_comm_stats_get(c, &st0);
			for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
				for (size_t sc = 0; sc < (wire == DP_WIRE_F16 ? 3u : 1u); sc++) {
					size_t n = ns[k];
					double scale = scales[sc];
					float *g = malloc(n * sizeof *g);
					for (size_t i = 0; i < n; i++)
						g[i] = (float)(scale * val(rank, i));
					rc = dp_comm_grads_begin(c, g, n, &e);
					if (rc == 0)
						rc = dp_comm_grads_ready(c, 0, n, &e);
					if (rc == 0)
						rc = dp_comm_grads_wait(c, &e);
					double worst = 0, tol = wire == DP_WIRE_F32 ? 0
							      : wire == DP_WIRE_BF16 ? size * 0.0079
										     : size * 0.001;
					for (size_t i = 0; i < n; i++) {
						double want = scale * (sumr + size * 0.5 * (double)(i % 1000));
						double err = fabs(g[i] - want) / want;
						if (!(err <= worst))
							worst = err; /* (NaN included) */
					}
					uint64_t h = fnv(g, n * sizeof *g), *all = calloc((size_t)size, sizeof *all);
					int same = dp_comm_allgather(c, &h, all, sizeof h, &e) == 0;
					for (int r = 0; same && r < size; r++)
						same = all[r] == h;
					ok(rc == 0 && same && worst <= tol,
					   "%s %s, %zu floats x %g: the same bits on every rank, relative error "
					   "%.2g (at most %.2g)%s%s", dp_comm_algo_name(algo),
					   dp_comm_wire_name(wire), n, scale, worst, tol, rc ? ": " : "",
					   rc ? e.msg : "");
					free(all);
					free(g);
				}
			dp_comm_stats_get(c, &st1);
			if (size > 1)
				ok(st1.wire_bytes > st0.wire_bytes, "%s %s: bytes sent counted (%llu)",
				   dp_comm_algo_name(algo), dp_comm_wire_name(wire),
				   (unsigned long long)(st1.wire_bytes - st0.wire_bytes));
		}
	dp_comm_conf cc;
	dp_comm_conf_defaults(&cc);
	ok(dp_comm_configure(c, &cc, &e) == 0, "back to the default ring");
}

/* Protocol errors: ranges out of order, a wait too early. */
static void test_protocol(dp_comm *c)
{
	dp_err e;
	float g3[3] = {0};
	ok(dp_comm_grads_begin(c, g3, 3, &e) == 0, "begin");
	ok(dp_comm_grads_ready(c, 0, 1, &e) == DP_EARG, "a range not at the end of the ready ones: refused");
	like(e.msg, "does not end where", "says why");
	ok(dp_comm_grads_ready(c, 1, 2, &e) == 0, "the last range");
	ok(dp_comm_grads_wait(c, &e) == DP_EARG, "wait before every range is ready: refused");
	like(e.msg, "never reported ready", "says which");
}

/* Sums, averages, broadcasts, gathers. */
static void test_collectives(dp_comm *c)
{
	dp_err e;
	double d[2] = {rank + 0.5, 1};
	ok(dp_comm_allreduce_sum(c, d, 2, &e) == 0 && d[0] == sumr - 0.5 * size &&
		   d[1] == size, "allreduce_sum of doubles");
	float f[3] = {(float)rank, 2, (float)(2 * rank)};
	ok(dp_comm_allreduce_mean(c, f, 3, &e) == 0 && f[0] == (sumr - size) / size && f[1] == 2 &&
		   f[2] == 2 * (sumr - size) / size, "allreduce_mean of floats");
	char buf[5000];
	for (size_t i = 0; i < sizeof buf; i++)
		buf[i] = rank == size - 1 ? (char)(i * 7) : 0;
	int bad = dp_comm_bcast_host(c, buf, sizeof buf, size - 1, &e);
	for (size_t i = 0; !bad && i < sizeof buf; i++)
		bad = buf[i] != (char)(i * 7);
	ok(!bad, "bcast_host from the last rank");
	ok(dp_comm_bcast_host(c, buf, 1, size, &e) == DP_EARG, "bcast from a rank that is not there: refused");
	int64_t mine = 100 + rank, *all = calloc((size_t)size, sizeof *all);
	bad = dp_comm_allgather(c, &mine, all, sizeof mine, &e);
	for (int r = 0; !bad && r < size; r++)
		bad = all[r] != 100 + r;
	ok(!bad, "allgather in rank order");
	free(all);
}

/* The settings check. */
static void test_settings(dp_comm *c)
{
	dp_err e;
	ok(dp_comm_check_same(c, "model=a\nbatch=8\n", &e) == 0, "the same settings everywhere");
	char text[64];
	snprintf(text, sizeof text, "model=a\nbatch=%d\n", rank == 1 ? 16 : 8);
	int rc = dp_comm_check_same(c, text, &e);
	if (size > 1) {
		ok(rc == DP_EARG, "a rank with other settings: every rank fails");
		if (rank == 0)
			like(e.msg, "rank 1 has 'batch=16' where rank 0 has 'batch=8'",
			     "rank 0 names the rank and the line");
	} else {
		ok(rc == 0, "one rank: nothing to differ");
	}
}

/* The timeline: a Chrome trace with every rank (-1: no directory). */
static int test_timeline(dp_comm *c)
{
	dp_err e;
	char path[] = "/tmp/dpcomm.XXXXXX", file[64];
	if (rank == 0 && !mkdtemp(path))
		return -1;
	ok(dp_comm_bcast_host(c, path, sizeof path, 0, &e) == 0, "share a directory");
	ok(dp_comm_timeline_start(c, &e) == 0, "timeline start");
	double t = dp_now();
	dp_comm_event(c, "forward", 1, t, t + 0.001);
	snprintf(file, sizeof file, "%s/t.json", path);
	ok(dp_comm_timeline_write(c, file, &e) == 0, "timeline written");
	if (rank == 0) {
		FILE *fp = fopen(file, "r");
		char body[65536] = "";
		size_t got = fp ? fread(body, 1, sizeof body - 1, fp) : 0;
		body[got] = 0;
		if (fp)
			fclose(fp);
		ok(body[0] == '[', "a JSON array");
		for (int r = 0; r < size; r++) {
			char want[64];
			snprintf(want, sizeof want, "\"args\":{\"name\":\"rank %d\"}", r);
			like(body, want, "rank %d's process", r);
		}
		like(body, "\"name\":\"forward\",\"cat\":\"compute\",\"ph\":\"X\"", "the event");
		unlink(file);
		rmdir(path);
	}
	return 0;
}

/* Groups (dp_comm_split) and messages: even and odd ranks sum apart; big
 * messages both ways round the ring at once (no rank waits for a
 * receiver); a message of another length is an error. */
static void test_groups(dp_comm *c)
{
	dp_err e;
	dp_comm *g = dp_comm_split(c, rank % 2, -rank, &e);
	ok(g != NULL, "split: %s", g ? dp_comm_desc(g) : e.msg);
	if (!g)
		return;
	int gs = (size + 1 - rank % 2) / 2;
	ok(dp_comm_size(g) == gs && dp_comm_rank(g) == gs - 1 - rank / 2,
	   "a group of the %s ranks, ranked by key (%d of %d)", rank % 2 ? "odd" : "even",
	   dp_comm_rank(g), dp_comm_size(g));
	double d = rank + 1, want = 0;
	for (int r = rank % 2; r < size; r += 2)
		want += r + 1;
	ok(dp_comm_allreduce_sum(g, &d, 1, &e) == 0 && d == want, "a sum within the group (%g)", d);
	float gr[3000];
	for (int i = 0; i < 3000; i++)
		gr[i] = (float)(rank + 1);
	int rc = dp_comm_grads_begin(g, gr, 3000, &e);
	if (rc == 0)
		rc = dp_comm_grads_ready(g, 0, 3000, &e);
	if (rc == 0)
		rc = dp_comm_grads_wait(g, &e);
	ok(rc == 0 && gr[0] == (float)want && gr[2999] == (float)want, "gradients summed within it");
	if (size == 1) {
		ok(dp_comm_send(c, gr, 4, 0, 1, &e) == DP_EARG, "a message to oneself: refused");
	} else {
		size_t n = 1u << 20; /* 4 MiB: past any eager limit */
		float *out = malloc(n * sizeof *out), *in1 = malloc(n * sizeof *in1),
		      *in2 = malloc(n * sizeof *in2);
		int next = (rank + 1) % size, prev = (rank + size - 1) % size;
		for (size_t i = 0; i < n; i++)
			out[i] = (float)rank * 1000 + (float)(i % 977);
		rc = dp_comm_send(c, out, n * 4, next, 1, &e);
		if (rc == 0)
			rc = dp_comm_send(c, out, n * 4, prev, 2, &e);
		memset(out, 0, n * 4); /* the bytes were copied out */
		if (rc == 0)
			rc = dp_comm_recv(c, in1, n * 4, prev, 1, "from the left", &e);
		if (rc == 0)
			rc = dp_comm_recv(c, in2, n * 4, next, 2, "from the right", &e);
		if (rc == 0)
			rc = dp_comm_send_wait(c, &e);
		int good = rc == 0;
		for (size_t i = 0; good && i < n; i++)
			good = in1[i] == (float)prev * 1000 + (float)(i % 977) &&
			       in2[i] == (float)next * 1000 + (float)(i % 977);
		ok(good, "4 MiB both ways round the ring at once%s%s", rc ? ": " : "", rc ? e.msg : "");
		if (rank == 0)
			rc = dp_comm_send(c, out, 8, 1, 3, &e);
		else if (rank == 1)
			rc = dp_comm_recv(c, in1, 16, 0, 3, "the short one", &e);
		ok(rank != 1 || (rc == DP_EDATA && strstr(e.msg, "the short one: 8 bytes, not the 16 expected")),
		   "a message of another length: named (%s)", rank == 1 ? e.msg : "rank 1's");
		dp_comm_send_wait(c, &e);
		free(out);
		free(in1);
		free(in2);
	}
	dp_comm_close(g);
}

int main(void)
{
	dp_err e;
	dp_settings_from_env(); /* DP_COMM_HOST_RANKS: hosts emulated */
	dp_comm *c = dp_comm_open(NULL, NULL, &e);
	if (!c) {
		printf("# %s\n", e.msg);
		return 1;
	}
	if (tap_comm_start(c, &rank, &size) < 0)
		return 1;
	ok(size >= 1 && rank < size, "rank %d of %d", rank, size);
	for (int r = 0; r < size; r++)
		sumr += (float)(r + 1);
	test_grads(c);
	test_wire(c);
	dp_comm_stats st;
	dp_comm_stats_get(c, &st);
	printf("# hosts: %d\n", st.hosts);
	test_protocol(c);
	test_collectives(c);
	test_settings(c);
	test_groups(c);
	if (test_timeline(c) < 0)
		return 1;
	dp_comm_close(c);
	return done_testing();
}
