#!/bin/sh
# examples/fashion-mnist.sh - the full learning runs of dp-train (`make learn`).
#
# Fashion-MNIST from Debian's dataset-fashion-mnist (IDX files) becomes
# TFRecord files of tf.train.Example (image: 784 raw bytes, label: the
# class), then, with Adam 1e-3 and batch 128 as PyTorch's reference runs
# (../shared/peers/torch_fashion.py: 91.4% and 87.6%):
#   the Keras MNIST CNN for 5 epochs   must reach >= 91% test accuracy
#   the MLP 784-128-10 for 10 epochs   must reach >= 87%
# Prints the test accuracy after each epoch and exits non-zero when a
# threshold is missed.  LEARN_DIR keeps the data and checkpoints (default: a
# temporary directory), LEARN_THREADS sets --threads (default 2), LEARN_SEED
# --seed (default 0).
set -eu
D=/usr/share/datasets/fashion-mnist
THREADS=${LEARN_THREADS:-2}
SEED=${LEARN_SEED:-0}
if [ ! -r "$D/train-images-idx3-ubyte.gz" ]; then
	echo "fashion-mnist.sh: $D is missing: apt-get install dataset-fashion-mnist" >&2
	exit 1
fi
if [ -n "${LEARN_DIR:-}" ]; then
	W=$LEARN_DIR
	mkdir -p "$W"
else
	W=$(mktemp -d "${TMPDIR:-/tmp}/fashion.XXXXXX")
	trap 'rm -rf "$W"' EXIT INT TERM
fi
SRC=$(cd "$(dirname "$0")/.." && pwd)

# IDX -> TFRecord: tfr-cat when it has the IDX encoder, else the test writer
convert() { # images labels out
	if tfr-cat --help 2>/dev/null | grep -q 'idx'; then
		tfr-cat --encode idx "$D/$1" "$D/$2" > "$3"
	else
		/usr/bin/python3 "$SRC/tests/mkexamples.py" "$3" idx "$D" "$1" "$2" --kind uint8
	fi
}
[ -s "$W/train.tfrecord" ] || convert train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz "$W/train.tfrecord"
[ -s "$W/test.tfrecord" ] || convert t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz "$W/test.tfrecord"

status=0
learn() { # name epochs threshold model
	echo "== $1: $4, $2 epochs"
	t0=$(date +%s)
	dp-train --train "$W/train.tfrecord" --val "$W/test.tfrecord" --decode-raw uint8 \
		--scale 1/255 --input-shape 1x28x28 --model "$4" --optimizer adam --lr 1e-3 \
		--batch-size 128 --epochs "$2" --shuffle-buffer 60000 --threads "$THREADS" \
		--seed "$SEED" --log-every 100000 -q -o "$W/$1.safetensors" > "$W/$1.log"
	t1=$(date +%s)
	grep val_accuracy "$W/$1.log" | sed 's/^/   /'
	acc=$(sed -n 's/.*val_accuracy=\([0-9.]*\).*/\1/p' "$W/$1.log" | tail -1)
	rate=$(grep -v val_ "$W/$1.log" | sed -n 's/.*samples_per_sec=\([0-9]*\).*/\1/p' |
		sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
	if awk "BEGIN { exit !($acc >= $3) }"; then verdict=ok; else verdict=FAILED; status=1; fi
	echo "$1: test accuracy $acc after $2 epochs (threshold $3): $verdict;" \
		"$((t1 - t0)) s, median $rate samples/s, $THREADS threads"
}
learn mlp 10 0.87 flatten,dense:128,relu,dense:10
learn cnn 5 0.91 conv:32:3,relu,conv:64:3,relu,maxpool:2,dropout:0.25,flatten,dense:128,relu,dropout:0.5,dense:10
exit $status
