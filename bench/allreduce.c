/*
 * bench/allreduce.c - bus bandwidth of dp_comm's gradient allreduce, as
 * nccl-tests define it: busbw = bytes * 2 (p-1)/p / time, the rate each
 * rank's link must carry (algbw = bytes / time).  Run under mpirun:
 *
 *   allreduce MIB ITERS WIRE ALGO    e.g. allreduce 8 20 fp32 ring
 *
 * Rank 0 prints one line: size, ranks, hosts, wire, algorithm, seconds a
 * call (median of ITERS after 3 warm-up calls), algbw and busbw in Gbit/s
 * (the float32 bytes of the buffer, whatever the wire carries), and the
 * bytes rank 0 sent a call.
 */
#define _GNU_SOURCE
#include "dp_comm.h"

#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: allreduce MIB ITERS fp32|bf16|fp16 ring|hierarchical|mpi\n");
		return 2;
	}
	size_t n = (size_t)(atof(argv[1]) * 1048576 / 4);
	int iters = atoi(argv[2]);
	dp_settings_from_env();
	dp_err e;
	dp_comm *c = dp_comm_open(NULL, NULL, &e);
	if (!c) {
		fprintf(stderr, "allreduce: %s\n", e.msg);
		return 1;
	}
	dp_comm_conf cc;
	dp_comm_conf_defaults(&cc);
	cc.overlap = 0;
	cc.wire = dp_comm_wire_parse(argv[3]);
	cc.algo = dp_comm_algo_parse(argv[4]);
	if (cc.wire < 0 || cc.algo < 0 || iters < 1 || n < 1 || dp_comm_configure(c, &cc, &e) < 0) {
		fprintf(stderr, "allreduce: bad arguments%s%s\n", cc.wire < 0 || cc.algo < 0 ? "" : ": ",
			cc.wire < 0 || cc.algo < 0 ? "" : e.msg);
		return 2;
	}
	float *g = malloc(n * sizeof *g);
	double *t = malloc((size_t)iters * sizeof *t);
	dp_comm_stats s0, s1;
	for (int k = -3; k < iters; k++) {
		for (size_t i = 0; i < n; i++)
			g[i] = (float)(i % 97) * 1e-3f;
		if (k == 0)
			dp_comm_stats_get(c, &s0);
		double t0 = dp_now();
		if (dp_comm_grads_begin(c, g, n, &e) < 0 || dp_comm_grads_ready(c, 0, n, &e) < 0 ||
		    dp_comm_grads_wait(c, &e) < 0) {
			fprintf(stderr, "allreduce: %s\n", e.msg);
			return 1;
		}
		if (k >= 0)
			t[k] = dp_now() - t0;
	}
	dp_comm_stats_get(c, &s1);
	qsort(t, (size_t)iters, sizeof *t, cmp);
	double med = t[iters / 2], bytes = (double)n * 4;
	int p = dp_comm_size(c);
	if (dp_comm_rank(c) == 0)
		printf("size=%.1fMiB ranks=%d hosts=%d wire=%s algo=%s sec=%.4f algbw_gbit=%.3f "
		       "busbw_gbit=%.3f sent_mib=%.2f cross_mib=%.2f\n",
		       bytes / 1048576, p, s1.hosts, argv[3], argv[4], med, bytes * 8 / med / 1e9,
		       bytes * 8 * 2 * (p - 1) / p / med / 1e9,
		       (double)(s1.wire_bytes - s0.wire_bytes) / iters / 1048576,
		       (double)(s1.cross_bytes - s0.cross_bytes) / iters / 1048576);
	free(g);
	free(t);
	dp_comm_close(c);
	return 0;
}
