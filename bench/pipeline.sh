#!/bin/sh
# bench/pipeline.sh - dp-train --pipeline-stages (issue 28) against plain
# data parallelism on the same ranks, for a model over one rank's memory
# budget (--memory-limit emulates a smaller device): an MLP of 784 x
# 1024 x 1024 x 1024 x 1024 x 10 with Adam (about 13 MiB of weights, 52
# MiB with gradients and optimizer state) under LIMIT (default 40M), so
# one rank is refused and 2 stages fit.  Runs, alternated ROUNDS times
# (default 1), each of global batch BATCH (default 128) over STEPS + 1
# updates: plain data parallelism over 2 ranks (what the ranks would do
# with memory enough: the peer), 2 stages x 1 replica with 1F1B and with
# GPipe, M micro-batches (default 8).  Training samples/s from the times
# the log lines (one an update, flushed) arrive, after the first; each
# rank one math thread.  The pipeline's own notes say each rank's
# parameters and the bubble measured against the schedule's theory.
set -eu
ROUNDS=${ROUNDS:-1}
BATCH=${BATCH:-128}
STEPS=${STEPS:-20}
M=${M:-8}
LIMIT=${LIMIT:-40M}
DP_TRAIN=${DP_TRAIN:-dp-train}
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
T=$(mktemp -d "${TMPDIR:-/tmp}/dpbench.XXXXXX")
trap 'rm -rf "$T"' EXIT INT TERM
say() { echo "bench/pipeline.sh: $*"; }
command -v mpirun >/dev/null || { say "no mpirun: nothing to compare"; exit 0; }

/usr/bin/python3 tests/mkexamples.py "$T/d.tfrecord" random --n $((BATCH * (STEPS + 1))) \
	--shape 784 --classes 10 --seed 1
MODEL="dense:1024,relu,dense:1024,relu,dense:1024,relu,dense:1024,relu,dense:10"
COMMON="--train $T/d.tfrecord --model $MODEL --input-shape 784 --optimizer adam --lr 0.001
	--threads 1 --log-every 1 --epochs 1 --prefetch 2 --shuffle-buffer 0"

# rate NP ARGS...: "samples/s" of mpirun -np NP dp-train COMMON ARGS; its
# notes in $T/err
rate() {
	np=$1
	shift
	# shellcheck disable=SC2086
	mpirun --bind-to none -np "$np" $DP_TRAIN $COMMON "$@" 2> "$T/err" |
		while IFS= read -r l; do printf '%s %s\n' "$(date +%s.%N)" "$l"; done |
		sed -n 's/^\([0-9.]*\) epoch=.* step=\([0-9]*\) loss=.*/\2 \1/p' |
		awk -v b="$BATCH" 'NR > 1 { s += ($1 - last) * b; t += $2 - lt }
			{ last = $1; lt = $2 } END { printf "%.1f", (t > 0 ? s / t : 0) }'
}
median() { tr ' ' '\n' | grep . | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "load average before: $(cut -d" " -f1-3 /proc/loadavg) on $(nproc) cores (above 1: other work ran beside these figures)"
say "MLP $MODEL over 784, Adam, global batch $BATCH, $STEPS timed updates, --memory-limit $LIMIT"
# shellcheck disable=SC2086
if $DP_TRAIN $COMMON --batch-size "$BATCH" --memory-limit "$LIMIT" --max-steps 1 -q 2> "$T/one"; then
	say "one rank fits --memory-limit $LIMIT: raise the model or lower LIMIT"
else
	say "one rank: $(sed -n 's/^dp-train: memory: //p' "$T/one" | cut -d: -f1)"
fi
dp= g1= gp= n1= ng=
for r in $(seq "$ROUNDS"); do
	dp="$dp $(rate 2 --batch-size $((BATCH / 2)))"
	g1="$g1 $(rate 2 --batch-size "$BATCH" --memory-limit "$LIMIT" --pipeline-stages 2 \
		--micro-batches "$M")"
	n1=$(sed -n 's/^dp-train: pipeline: //p' "$T/err")
	gp="$gp $(rate 2 --batch-size "$BATCH" --memory-limit "$LIMIT" --pipeline-stages 2 \
		--micro-batches "$M" --pipeline-schedule gpipe)"
	ng=$(sed -n 's/^dp-train: pipeline: bubble/bubble/p' "$T/err")
done
a=$(echo "$dp" | median) b=$(echo "$g1" | median) c=$(echo "$gp" | median)
echo "plain data parallelism, 2 ranks x $((BATCH / 2)) (over the limit, memory granted): $a samples/s (runs:$dp)"
echo "2 stages x 1 replica, 1f1b, $M micro-batches: $b samples/s (runs:$g1), $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2fx", b / a }') of plain"
echo "2 stages x 1 replica, gpipe, $M micro-batches: $c samples/s (runs:$gp), $(awk -v a="$a" -v c="$c" 'BEGIN { printf "%.2fx", c / a }') of plain"
printf '%s\n' "$n1" | sed 's/; parameters a rank/\nparameters a rank/' | sed 's/^/1f1b: /'
echo "gpipe: $ng"
