#!/usr/bin/env bash
# dp-train learns: a shortened Fashion-MNIST run (Debian's
# dataset-fashion-mnist; `make learn` runs the full ones).  6000 training
# images, 1000 test images; the MLP 784-128-10 for 3 epochs and a small CNN
# for 2, Adam 1e-3.  dp-train reaches about 0.81 and 0.80 on this machine;
# the thresholds leave room for other rounding on other processors.
. "${DP_SRC:-.}/tests/lib.sh"

D=/usr/share/datasets/fashion-mnist
if [ ! -r "$D/train-images-idx3-ubyte.gz" ]; then
	skip "Fashion-MNIST is not installed: apt-get install dataset-fashion-mnist"
	done_testing
fi
cd "$T"
MK="$PY $DP_SRC/tests/mkexamples.py"
$MK train.tfr idx $D train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz --kind uint8 --limit 6000
$MK test.tfr idx $D t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz --kind uint8 --limit 1000
COMMON=(--train train.tfr --val test.tfr --decode-raw uint8 --scale 1/255 --input-shape 1x28x28
	--optimizer adam --lr 1e-3 -q --log-every 100000)

val() { echo "$out" | sed -n "s/.*epoch=$1 .*val_accuracy=\([0-9.]*\).*/\1/p"; }
vloss() { echo "$out" | sed -n "s/.*epoch=$1 .*val_loss=\([0-9.]*\).*/\1/p"; }

run dp-train "${COMMON[@]}" --model flatten,dense:128,relu,dense:10 --batch-size 128 --epochs 3
is "$rc" 0 "MLP trains"
diag "MLP test accuracy by epoch: $(val 1) $(val 2) $(val 3)"
ok awk "BEGIN { exit !($(val 3) >= 0.75) }" "MLP: test accuracy $(val 3) >= 0.75 after 3 epochs"
ok awk "BEGIN { exit !($(vloss 3) < $(vloss 1)) }" "MLP: test loss falls ($(vloss 1) -> $(vloss 3))"

run dp-train "${COMMON[@]}" --model conv:16:3,relu,maxpool:2,dropout:0.25,flatten,dense:64,relu,dense:10 \
	--batch-size 64 --epochs 2
is "$rc" 0 "CNN trains"
diag "CNN test accuracy by epoch: $(val 1) $(val 2)"
ok awk "BEGIN { exit !($(val 2) >= 0.70) }" "CNN: test accuracy $(val 2) >= 0.70 after 2 epochs"
ok awk "BEGIN { exit !($(vloss 2) < $(vloss 1)) }" "CNN: test loss falls ($(vloss 1) -> $(vloss 2))"

done_testing
