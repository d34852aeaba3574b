#!/usr/bin/env bash
# dp-train against PyTorch (Debian python3-torch, the reference): from the
# same initial weights (written by torch into a dp-train checkpoint and
# given with --init), three updates on the same batches give the same
# weights within float32 rounding, for dense, conv, maxpool, avgpool,
# strided and padded conv, batchnorm and MSE models with SGD (momentum,
# Nesterov, weight decay), Adam and AdamW, and --clip-norm (torch's
# clip_grad_norm_).  Checkpoints load into the equivalent
# torch.nn.Sequential with load_state_dict(strict=True).
. "${DP_SRC:-.}/tests/lib.sh"

require_ref torch_ref.py "python3-torch is not installed: apt-get install python3-torch (scripts/deps --test)"
cd "$T"
$PY "$DP_SRC/tests/mkexamples.py" img.tfr random --n 24 --shape 2x8x8 --classes 5 --seed 1 --npz img.npz
$PY "$DP_SRC/tests/mkexamples.py" vec.tfr random --n 24 --shape 12 --classes 5 --seed 2 --npz vec.npz
$PY "$DP_SRC/tests/mkexamples.py" reg.tfr random --n 24 --shape 12 --label-kind vector:3 --seed 3 --npz reg.npz

# Cases: DATA SHAPE SPEC LOSS OPTIMIZER-ARGS...; each is 3 updates of batch 8.
# torch starts once for all initial weights and once for all comparisons.
SGD="--optimizer sgd --lr 0.05 --momentum 0.9 --nesterov --weight-decay 0.01"
ADAM="--optimizer adam --lr 0.01"
ADAMW="--optimizer adamw --lr 0.01 --weight-decay 0.05"
cat > cases.txt <<EOF
vec 12 dense:16,relu,dense:5 xent $SGD
vec 12 dense:16,relu,dense:5 xent --optimizer sgd --lr 0.1
vec 12 dense:16,tanh,dense:8,sigmoid,dense:5 xent $ADAM
vec 12 dense:16,relu,dense:5,softmax xent $ADAMW
img 2x8x8 conv:4:3,relu,flatten,dense:5 xent $SGD
img 2x8x8 conv:4:3,relu,flatten,dense:5 xent $ADAM
img 2x8x8 conv:4:3,relu,flatten,dense:5 xent --optimizer sgd --lr 0.5 --clip-norm 0.05
vec 12 dense:16,relu,dense:5 xent $ADAMW --clip-norm 0.02
img 2x8x8 conv:6:3:same,relu,maxpool:2,flatten,dense:5 xent $SGD
img 2x8x8 conv:6:3:same,relu,maxpool:2,flatten,dense:5 xent $ADAM
img 2x8x8 conv:4:3:2:1,sigmoid,avgpool:2,flatten,dense:5 xent $ADAMW
img 2x8x8 conv:4:3,batchnorm,relu,maxpool:3:2,flatten,dense:5 xent $SGD
img 2x8x8 conv:4:3,relu,batchnorm,maxpool:3:2,flatten,dense:5 xent $ADAM
img 2x8x8 conv:4:1,tanh,conv:3:3x2:stride=1x2,flatten,dense:5 xent $ADAM
reg 12 dense:16,tanh,dense:3 mse $SGD
reg 12 dense:16,tanh,dense:3 mse $ADAM
EOF
i=0
while read -r data shape spec loss args; do
	i=$((i + 1))
	echo "init $spec $shape $loss 7 init-$i.st"
done < cases.txt > init.txt
$REF batch init.txt > init.log 2>&1 || { cat init.log; exit 1; }
i=0
while read -r data shape spec loss args; do
	i=$((i + 1))
	# shellcheck disable=SC2086
	dp-train --init "init-$i.st" --train "$data.tfr" --loss "$loss" --shuffle-buffer 0 \
		--batch-size 8 --max-steps 3 --prefetch 0 -q -o "out-$i.st" $args > /dev/null 2> "err-$i.txt"
	echo $? > "rc-$i.txt"
	echo "step init-$i.st out-$i.st $data.npz --loss $loss --batch 8 --steps 3 $args"
done < cases.txt > step.txt
$REF batch step.txt > step.log 2>&1
torch_step_results cases.txt step.log
# the clipping clipped: without it the weights differ
n=$(grep -n -- '--clip-norm 0.05' cases.txt | cut -d: -f1)
dp-train --init "init-$n.st" --train img.tfr --shuffle-buffer 0 --batch-size 8 --max-steps 3 \
	--prefetch 0 -q --optimizer sgd --lr 0.5 -o noclip.st >/dev/null 2>&1
not_ok cmp -s noclip.st "out-$n.st" "--clip-norm 0.05 changed the updates (the norm was above it)"

# checkpoints written by dp-train load into torch.nn.Sequential, strictly
$PY "$DP_SRC/tests/mkexamples.py" mnist.tfr random --n 64 --shape 1x28x28 --kind uint8
run dp-train --train mnist.tfr --decode-raw uint8 --scale 1/255 --input-shape 1x28x28 \
	--model conv:32:3,relu,conv:64:3,relu,maxpool:2,dropout:0.25,flatten,dense:128,relu,dropout:0.5,dense:10 \
	--batch-size 32 -q -o cnn.st
run dp-train --train img.tfr --input-shape 2x8x8 --model conv:4:3,batchnorm,relu,flatten,dense:6,batchnorm,dense:5,softmax -q -o bn.st
printf 'load cnn.st\nload bn.st\n' > load.txt
run $REF batch load.txt
like "$out" "^-?[0-9.]+( -?[0-9.]+){9}"$'\n'"rc 0" "the seed CNN's checkpoint loads into torch.nn.Sequential (strict), 10 outputs"
like "$out" "rc 0"$'\n'"[0-9. -]+"$'\n'"rc 0$" "batchnorm running statistics and counters load too (strict)"

done_testing
