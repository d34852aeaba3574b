#!/bin/sh
# examples/finetune.sh - transfer learning with dp-train on Fashion-MNIST:
# a small CNN learns five classes (T-shirt, trouser, pullover, dress, coat:
# labels 0-4), then learns the other five (sandal, shirt, sneaker, bag,
# ankle boot: 5-9, relabelled 0-4) from only FT_SAMPLES (1000) images,
#   fine-tuned   --init of the first model, its head drawn afresh
#                (--reset), the convolutions frozen (--freeze)
#   from scratch the same model, the same images, the same updates
# and prints both test accuracies on the second five classes (dp-eval).
# The data is split by class with tfr-cat's JSON form and grep.  Variables:
# PRE_LIMIT (training images read for the first task, default all 60000),
# PRE_EPOCHS (2), FT_SAMPLES (1000), FT_EPOCHS (10), THREADS (2), FT_DIR
# (keep the files there; default a temporary directory).
set -eu
PRE_LIMIT=${PRE_LIMIT:-60000}
PRE_EPOCHS=${PRE_EPOCHS:-2}
FT_SAMPLES=${FT_SAMPLES:-1000}
FT_EPOCHS=${FT_EPOCHS:-10}
THREADS=${THREADS:-2}
FASHION=${FASHION:-/usr/share/datasets/fashion-mnist}
W=${FT_DIR:-} # the working folder: FT_DIR (kept), else a temporary one
. "$(dirname "$0")/workdir.sh"
test -r "$FASHION/train-images-idx3-ubyte.gz" ||
	{ echo "finetune.sh: no Fashion-MNIST in $FASHION (apt-get install dataset-fashion-mnist)" >&2; exit 1; }

# classes 0-4 as they are; 5-9 as 0-4
split() { # IDX-images IDX-labels limit out-prefix
	tfr-cat --encode idx -n "$3" "$1" "$2" | tfr-cat -j > "$W/all.json"
	grep '"label":{"int64":\[[0-4]\]}' "$W/all.json" | tfr-cat --encode json -o "$4-a.tfrecord"
	grep '"label":{"int64":\[[5-9]\]}' "$W/all.json" |
		sed 's/"label":{"int64":\[\([5-9]\)\]}/"label":{"int64":[\1-]}/;
		     s/\[5-\]/[0]/; s/\[6-\]/[1]/; s/\[7-\]/[2]/; s/\[8-\]/[3]/; s/\[9-\]/[4]/' |
		tfr-cat --encode json -o "$4-b.tfrecord"
	rm "$W/all.json"
}
split "$FASHION/train-images-idx3-ubyte.gz" "$FASHION/train-labels-idx1-ubyte.gz" "$PRE_LIMIT" "$W/train"
split "$FASHION/t10k-images-idx3-ubyte.gz" "$FASHION/t10k-labels-idx1-ubyte.gz" 10000 "$W/test"
tfr-cat -n "$FT_SAMPLES" -o "$W/few-b.tfrecord" "$W/train-b.tfrecord"

CNN=conv:16:3,relu,maxpool:2,conv:32:3,relu,maxpool:2,flatten,dense:64,relu,dense:5
DATA="--decode-raw uint8 --scale 1/255 --threads $THREADS --log-every 100000 -q"
# shellcheck disable=SC2086
dp-train --train "$W/train-a.tfrecord" --input-shape 1x28x28 --model "$CNN" $DATA \
	--optimizer adam --lr 1e-3 --batch-size 64 --epochs "$PRE_EPOCHS" -o "$W/a.safetensors"
TUNE="--train $W/few-b.tfrecord --batch-size 32 --epochs $FT_EPOCHS --optimizer adam --lr 1e-3"
# shellcheck disable=SC2086
dp-train --init "$W/a.safetensors" --reset 9 --freeze 0,3 $TUNE $DATA -o "$W/tuned.safetensors" > "$W/tuned.log"
# shellcheck disable=SC2086
dp-train --input-shape 1x28x28 --model "$CNN" $TUNE $DATA -o "$W/scratch.safetensors" > "$W/scratch.log"

acc() { # checkpoint data
	dp-eval --model "$1" --data "$2" --threads "$THREADS" --json - |
		sed -n 's/.*"accuracy": {"value": \([0-9.]*\)}.*/\1/p'
}
a=$(acc "$W/a.safetensors" "$W/test-a.tfrecord")
t=$(acc "$W/tuned.safetensors" "$W/test-b.tfrecord")
s=$(acc "$W/scratch.safetensors" "$W/test-b.tfrecord")
echo "first task (classes 0-4, $(tfr-cat -c "$W/train-a.tfrecord") images, $PRE_EPOCHS epochs): test accuracy $a"
echo "second task (classes 5-9, $FT_SAMPLES images, $FT_EPOCHS epochs), test accuracy on its $(tfr-cat -c "$W/test-b.tfrecord") test images:"
echo "  fine-tuned (convolutions frozen, head reset): $t"
echo "  from scratch:                                 $s"
