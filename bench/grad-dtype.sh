#!/bin/sh
# bench/grad-dtype.sh - what a 16-bit gradient wire costs in accuracy
# (issue 16): Fashion-MNIST's MLP 784-128-10 and the Keras CNN under
# mpirun -np 2, Adam 1e-3, global batch 128, trained with --grad-dtype
# fp32, bf16 and fp16 from the same seed; prints each run's test accuracy
# after every epoch (dp-train --val on the test set) and the bytes a step
# each rank sent.  GD_EPOCHS (default 5), GD_SEEDS (default "0 1").
set -eu
SRC=$(cd "$(dirname "$0")/.." && pwd)
EPOCHS=${GD_EPOCHS:-5}
SEEDS=${GD_SEEDS:-0 1}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
PATH="$SRC/build/bin:$PATH"
W=$(mktemp -d "${TMPDIR:-/tmp}/graddtype.XXXXXX")
trap 'rm -rf "$W"' EXIT INT TERM
make --no-print-directory -s -f "$SRC/examples/pipeline.mk" DATA="$W/data" NP=1 SPLIT= W="$W/x" \
	"$W/data/train.tfrecord" "$W/data/test.tfrecord" >/dev/null
for model in flatten,dense:128,relu,dense:10 \
	conv:32:3,relu,conv:64:3,relu,maxpool:2,dropout:0.25,flatten,dense:128,relu,dropout:0.5,dense:10; do
	for dt in fp32 bf16 fp16; do
		for seed in $SEEDS; do
			mpirun -np 2 dp-train --train "$W/data/train.tfrecord" --val "$W/data/test.tfrecord" \
				--model "$model" --decode-raw uint8 --input-shape 1x28x28 --scale 1/255 --optimizer adam --lr 1e-3 \
				--batch-size 64 --epochs "$EPOCHS" --shuffle-buffer 60000 --seed "$seed" \
				--threads 1 --log-every 100000 --grad-dtype "$dt" --log "$W/log" \
				-o "$W/m.st" 2>"$W/err"
			accs=$(sed -n 's/.*val_accuracy=\([0-9.]*\).*/\1/p' "$W/log" | tr '\n' ' ')
			mib=$(sed -n 's/.*communication: \([0-9.]*\) MiB sent a step.*/\1/p' "$W/err")
			echo "${model%%,*}... $dt seed $seed: test accuracy by epoch: $accs($mib MiB sent a step)"
		done
	done
done
