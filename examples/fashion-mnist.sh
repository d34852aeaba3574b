#!/bin/sh
# examples/fashion-mnist.sh - the full learning runs of dp-train (`make learn`):
# the pipeline of examples/pipeline.mk with the settings of PyTorch's
# reference runs (../shared/peers/torch_fashion.py: 91.4% and 87.6%): one
# worker, all 60000 training images (no validation split), Adam 1e-3,
# batch 128, a shuffle buffer of the whole set; dp-eval measures the test
# accuracy and gates it:
#   the MLP 784-128-10 for 10 epochs   must reach >= 87%
#   the Keras MNIST CNN for 5 epochs   must reach >= 91%
# and resnet20 (the CIFAR form) with the ResNet recipe of PyTorch's
# ../shared/peers/torch_resnet.py (issue 15): the images as PNG records
# (Pillow writes them, tfr-cat --encode images reads them) so that
# dp-train's --augment crop-pad=4,flip applies, SGD 0.1 with Nesterov
# momentum 0.9, weight decay 5e-4 not on batchnorm and bias, cosine
# schedule, batch 128 (64 a rank), 10 epochs under mpirun -np 2 (one
# thread a rank)                      must reach >= 93%
# (dp-train's cosine moves once an epoch, PyTorch's scheduler there once a
# step).  Prints the test accuracy after each epoch (dp-train's --val) and
# exits non-zero when a gate fails.  LEARN_DIR keeps the data and
# checkpoints (default: a temporary directory; a second run with the same
# LEARN_DIR redoes nothing), LEARN_THREADS sets --threads (default 2; 1 a
# rank for resnet20), LEARN_SEED --seed (default 0), LEARN_MODELS picks
# the runs (default "mlp cnn resnet20"), LEARN_EPOCHS overrides every
# run's epochs (the gates then still apply: a short run is a smoke test);
# LIMIT and TEST_LIMIT take the first images of each set (tests).
set -eu
THREADS=${LEARN_THREADS:-2}
SEED=${LEARN_SEED:-0}
MODELS=${LEARN_MODELS:-mlp cnn resnet20}
MPIRUN=${MPIRUN:-mpirun --bind-to none}
[ "$(id -u)" != 0 ] || export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
FASHION=/usr/share/datasets/fashion-mnist
SRC=$(cd "$(dirname "$0")/.." && pwd)
W=${LEARN_DIR:-} # the working folder: LEARN_DIR (kept), else a temporary one
. "$(dirname "$0")/workdir.sh"
pipeline() {
	make --no-print-directory -s -f "$SRC/examples/pipeline.mk" DATA="$W/data" NP=1 SPLIT= \
		BATCH=128 OPTIMIZER=adam LR=1e-3 THREADS="$THREADS" SEED="$SEED" LOG_EVERY=100000 \
		TRAIN_FLAGS="--shuffle-buffer 60000 --val $W/data/test.tfrecord" "$@"
}
case " $MODELS " in *" mlp "* | *" cnn "*) pipeline W="$W/mlp" "$W/data/test.tfrecord" ;; esac

status=0
# report NAME EPOCHS THRESHOLD T0 SETTINGS: the lines after a run
report() {
	t1=$(date +%s)
	grep val_accuracy "$W/$1/train.log" | sed 's/^/   /'
	acc=$(sed -n 's/.*"accuracy": {"value": \(.*\)}.*/\1/p' "$W/$1/metrics.json" 2>/dev/null)
	rate=$(grep -v val_ "$W/$1/train.log" | sed -n 's/.*samples_per_sec=\([0-9.]*\).*/\1/p' |
		sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
	[ "$verdict" = ok ] || sed 's/^/   /' "$W/$1.out" | tail -n 3
	echo "$1: test accuracy ${acc:-?} after $2 epochs (gate accuracy>=$3): $verdict;" \
		"$((t1 - $4)) s, median ${rate:-?} samples/s, $5"
}
learn() { # name epochs threshold model
	echo "== $1: $4, $2 epochs"
	t0=$(date +%s)
	if pipeline W="$W/$1" MODEL="$4" EPOCHS="$2" MIN_ACCURACY="$3" gate > "$W/$1.out" 2>&1; then
		verdict=ok
	else
		verdict=FAILED
		status=1
	fi
	report "$1" "$2" "$3" "$t0" "$THREADS threads"
}
# Fashion-MNIST as PNG records, class folder by class folder (the shuffle
# buffer holds the whole training set); LIMIT and TEST_LIMIT (as for
# pipeline.mk) keep the first images of each set
png_records() {
	[ -s "$W/png/test.tfrecord" ] && [ "$(cat "$W/png/limits" 2>/dev/null)" = "${LIMIT:-} ${TEST_LIMIT:-}" ] &&
		return
	rm -rf "$W/png"
	/usr/bin/python3 - "$FASHION" "$W/png" "${LIMIT:-0}" "${TEST_LIMIT:-0}" <<'PYEOF'
import gzip, os, sys
import numpy as np
from PIL import Image
d, out = sys.argv[1], sys.argv[2]
for part, name, n in (("train", "train", int(sys.argv[3])), ("test", "t10k", int(sys.argv[4]))):
    with gzip.open(f"{d}/{name}-images-idx3-ubyte.gz") as f:
        f.read(16); x = np.frombuffer(f.read(), np.uint8).reshape(-1, 28, 28)
    with gzip.open(f"{d}/{name}-labels-idx1-ubyte.gz") as f:
        f.read(8); y = np.frombuffer(f.read(), np.uint8)
    for i in range(n or len(y)):
        p = f"{out}/{part}/{y[i]}"
        os.makedirs(p, exist_ok=True)
        Image.fromarray(x[i]).save(f"{p}/{i:05d}.png")
PYEOF
	tfr-cat --encode images "$W/png/train" -o "$W/png/train.tfrecord"
	tfr-cat --encode images "$W/png/test" -o "$W/png/test.tfrecord"
	rm -rf "$W/png/train" "$W/png/test"
	echo "${LIMIT:-} ${TEST_LIMIT:-}" > "$W/png/limits"
}
learn_resnet() { # name epochs threshold model
	echo "== $1: $4, $2 epochs, $MPIRUN -np 2, 1 thread a rank"
	t0=$(date +%s)
	mkdir -p "$W/$1"
	verdict=FAILED
	if png_records > "$W/$1.out" 2>&1 &&
		$MPIRUN -np 2 dp-train --train "$W/png/train.tfrecord" --decode image \
			--decode-threads 1 --input-shape 1x28x28 --scale 1/255 \
			--augment crop-pad=4,flip --model "$4" --classes 10 --optimizer sgd --lr 0.1 \
			--momentum 0.9 --nesterov --weight-decay 5e-4 --no-decay bn,bias \
			--lr-schedule cosine --batch-size 64 --epochs "$2" --threads 1 \
			--shuffle-buffer 60000 --seed "$SEED" --val "$W/png/test.tfrecord" \
			--log-every 100 -o "$W/$1/model.safetensors" > "$W/$1/train.log" 2>> "$W/$1.out" &&
		dp-eval --model "$W/$1/model.safetensors" --data "$W/png/test.tfrecord" \
			--json "$W/$1/metrics.json" >> "$W/$1.out" 2>&1 &&
		dp-eval --check "$W/$1/metrics.json" --require "accuracy>=$3" >> "$W/$1.out" 2>&1; then
		verdict=ok
	else
		status=1
	fi
	report "$1" "$2" "$3" "$t0" "2 ranks"
}
for m in $MODELS; do
	case $m in
	mlp) learn mlp "${LEARN_EPOCHS:-10}" 0.87 flatten,dense:128,relu,dense:10 ;;
	cnn) learn cnn "${LEARN_EPOCHS:-5}" 0.91 conv:32:3,relu,conv:64:3,relu,maxpool:2,dropout:0.25,flatten,dense:128,relu,dropout:0.5,dense:10 ;;
	resnet20) learn_resnet resnet20 "${LEARN_EPOCHS:-10}" 0.93 resnet20 ;;
	*) echo "examples/fashion-mnist.sh: LEARN_MODELS: $m: not one of mlp, cnn, resnet20" >&2; exit 2 ;;
	esac
done
exit $status
