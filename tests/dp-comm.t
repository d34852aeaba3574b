#!/usr/bin/env bash
# libdp's dp_comm under a real mpirun: the unit test tests/unit/comm.c
# (gradient buckets with and without overlap, sizes that do not divide
# among the ranks, sums, broadcasts, gathers, the settings check, the
# timeline, every allreduce algorithm and wire format) run by 2 and 3
# ranks, and by 3 and 4 ranks as emulated hosts of 2 ranks each.  Rank 0 prints the TAP; a failure on any
# rank fails the job.
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/mpi.sh"

require "mpirun is not installed (apt-get install openmpi-bin)" have_mpirun
for np in 2 3; do
	run mpi $np "$DP_BUILD/tests/comm"
	is "$rc" 0 "$np ranks: every rank passes"
	like "$out" "# Open MPI v[0-9.]+, $np ranks" "$np ranks: one MPI job"
	like "$out" $'\n1\\.\\.[0-9]+$' "$np ranks: rank 0's plan"
	unlike "$out" "not ok" "$np ranks: no failure"
	[ "$rc" = 0 ] || printf '%s\n' "$out" "$err" | sed 's/^/#   /' | head -20
done
like "$out" "# hosts: 1" "one host found (MPI's shared-memory split)"
# hosts emulated: every 2 ranks one "host", so the hierarchical allreduce
# runs its reduce-scatter within hosts, rings across, allgather (2 x 2, and
# 2 + 1: hosts of unequal sizes, where it falls back to the ring)
for np in 4 3; do
	DP_COMM_HOST_RANKS=2 run mpi $np -x DP_COMM_HOST_RANKS "$DP_BUILD/tests/comm"
	is "$rc" 0 "$np ranks, 2 a host: every rank passes"
	like "$out" "# hosts: 2" "... two hosts"
	like "$out" "ok [0-9]+ - hierarchical bf16, 300001 floats" "... the hierarchical sums checked"
	unlike "$out" "not ok" "... no failure"
	[ "$rc" = 0 ] || printf '%s\n' "$out" "$err" | sed 's/^/#   /' | head -20
done
done_testing
