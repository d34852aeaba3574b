#!/bin/sh
# examples/fashion-mnist.sh - the full learning runs of dp-train (`make learn`):
# the pipeline of examples/pipeline.mk with the settings of PyTorch's
# reference runs (../shared/peers/torch_fashion.py: 91.4% and 87.6%): one
# worker, all 60000 training images (no validation split), Adam 1e-3,
# batch 128, a shuffle buffer of the whole set; dp-eval measures the test
# accuracy and gates it:
#   the MLP 784-128-10 for 10 epochs   must reach >= 87%
#   the Keras MNIST CNN for 5 epochs   must reach >= 91%
# Prints the test accuracy after each epoch (dp-train's --val) and exits
# non-zero when a gate fails.  LEARN_DIR keeps the data and checkpoints
# (default: a temporary directory; a second run with the same LEARN_DIR
# redoes nothing), LEARN_THREADS sets --threads (default 2), LEARN_SEED
# --seed (default 0).
set -eu
THREADS=${LEARN_THREADS:-2}
SEED=${LEARN_SEED:-0}
SRC=$(cd "$(dirname "$0")/.." && pwd)
if [ -n "${LEARN_DIR:-}" ]; then
	W=$LEARN_DIR
	mkdir -p "$W"
else
	W=$(mktemp -d "${TMPDIR:-/tmp}/fashion.XXXXXX")
	trap 'rm -rf "$W"' EXIT INT TERM
fi
pipeline() {
	make --no-print-directory -s -f "$SRC/examples/pipeline.mk" DATA="$W/data" NP=1 SPLIT= \
		BATCH=128 OPTIMIZER=adam LR=1e-3 THREADS="$THREADS" SEED="$SEED" LOG_EVERY=100000 \
		TRAIN_FLAGS="--shuffle-buffer 60000 --val $W/data/test.tfrecord" "$@"
}
pipeline W="$W/mlp" "$W/data/test.tfrecord"

status=0
learn() { # name epochs threshold model
	echo "== $1: $4, $2 epochs"
	t0=$(date +%s)
	if pipeline W="$W/$1" MODEL="$4" EPOCHS="$2" MIN_ACCURACY="$3" gate > "$W/$1.out" 2>&1; then
		verdict=ok
	else
		verdict=FAILED
		status=1
	fi
	t1=$(date +%s)
	grep val_accuracy "$W/$1/train.log" | sed 's/^/   /'
	acc=$(sed -n 's/.*"accuracy": {"value": \(.*\)}.*/\1/p' "$W/$1/metrics.json" 2>/dev/null)
	rate=$(grep -v val_ "$W/$1/train.log" | sed -n 's/.*samples_per_sec=\([0-9]*\).*/\1/p' |
		sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
	[ "$verdict" = ok ] || sed 's/^/   /' "$W/$1.out" | tail -n 3
	echo "$1: test accuracy ${acc:-?} after $2 epochs (gate accuracy>=$3): $verdict;" \
		"$((t1 - t0)) s, median $rate samples/s, $THREADS threads"
}
learn mlp 10 0.87 flatten,dense:128,relu,dense:10
learn cnn 5 0.91 conv:32:3,relu,conv:64:3,relu,maxpool:2,dropout:0.25,flatten,dense:128,relu,dropout:0.5,dense:10
exit $status
