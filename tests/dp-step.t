#!/usr/bin/env bash
# libdp's trainer step (dp_train.h) under a real mpirun: the unit test
# tests/unit/step.c run by 2 and 4 ranks, each rank its slice of every
# global batch, against the plain step of one process over the whole
# batch: accumulation, ranks without samples (alone, within an
# accumulated update, with sync-bn), a frozen start of the model,
# synchronised batchnorm, a short update flushed, one dropped, a NaN loss.
# Rank 0 prints the TAP; a failure on any rank fails the job.
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/mpi.sh"

require "mpirun is not installed (apt-get install openmpi-bin)" have_mpirun
for np in 2 4; do
	run mpi $np "$DP_BUILD/tests/step"
	is "$rc" 0 "$np ranks: every rank passes"
	like "$out" "# Open MPI v[0-9.]+, $np ranks" "$np ranks: one MPI job"
	like "$out" "ok [0-9]+ - rank [0-9]+ idle in the last of 2 micro-batches: one update" "$np ranks: idle ranks checked"
	like "$out" $'\n1\\.\\.[0-9]+$' "$np ranks: rank 0's plan"
	unlike "$out" "not ok" "$np ranks: no failure"
	[ "$rc" = 0 ] || printf '%s\n' "$out" "$err" | sed 's/^/#   /' | head -30
done
done_testing
