#!/usr/bin/env bash
# libdp's pipeline (dp_train.h) under a real mpirun: the unit test
# tests/unit/pipeline.c run by 2 ranks (2 stages) and 4 ranks, oversubscribed
# on 2 cores (4 stages; 2 stages x 2 replicas): GPipe and 1F1B, accumulation,
# clipping, a frozen start, recomputation, the whole model's checkpoint,
# against one process over the same global batch.  Rank 0 prints the TAP;
# a failure on any rank fails the job.
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/mpi.sh"

require "mpirun is not installed (apt-get install openmpi-bin)" have_mpirun
for np in 2 4; do
	run mpi $np --oversubscribe "$DP_BUILD/tests/pipeline"
	is "$rc" 0 "$np ranks: every rank passes"
	like "$out" "# Open MPI v[0-9.]+, $np ranks" "$np ranks: one MPI job"
	like "$out" $'\n1\\.\\.[0-9]+$' "$np ranks: rank 0's plan"
	unlike "$out" "not ok" "$np ranks: no failure"
	[ "$rc" = 0 ] || printf '%s\n' "$out" "$err" | sed 's/^/#   /' | head -30
done
like "$out" "ok [0-9]+ - 4 stages, 1F1B: rank 0's stage 0 .*bit for bit" "4 stages checked"
like "$out" "ok [0-9]+ - 2 stages x 2 replicas, GPipe, clipped: rank 0's .*within 1e-5" "2 x 2 checked"
done_testing
