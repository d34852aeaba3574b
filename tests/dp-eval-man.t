#!/usr/bin/env bash
# dp-eval(1): the page formats without warnings, documents every option
# of --help, and its examples run, in order, in one scratch directory
# holding what they name: a small Fashion-MNIST classifier (dp-train, 6000
# images, 2 epochs: about 80% accurate) and its test records, whole and in
# tfr-shard's shards.
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/man-examples.sh"

PAGE="$DP_SRC/man/man1/dp-eval.1"
cd "$T" || exit 1
man_lint "$PAGE"
for s in "EXIT STATUS" ENVIRONMENT EXAMPLES "SEE ALSO" "THE METRICS JSON"; do
	like "$(cat page.txt)" "$s" "has $s"
done
for o in $(dp-eval --help | grep -o -- '--[a-z][a-z-]*' | sort -u); do
	like "$(cat page.txt)" -- "$o" "documents $o"
done

D=/usr/share/datasets/fashion-mnist
if [ ! -r "$D/train-images-idx3-ubyte.gz" ]; then
	skip "Fashion-MNIST is not installed (dataset-fashion-mnist): examples not run"
	done_testing
fi
mkdir ex && cd ex
tfr-cat --encode idx -n 6000 "$D/train-images-idx3-ubyte.gz" "$D/train-labels-idx1-ubyte.gz" > train.tfrecord
tfr-cat --encode idx -n 1000 "$D/t10k-images-idx3-ubyte.gz" "$D/t10k-labels-idx1-ubyte.gz" > test.tfrecord
tfr-shard -q -n 2 -o 'data/test-{shard}-of-{nshards}.tfrecord' test.tfrecord
dp-train --train train.tfrecord --decode-raw uint8 --scale 1/255 --input-shape 1x28x28 \
	--model flatten,dense:128,relu,dense:10 --batch-size 64 --epochs 2 -q -o model.safetensors > /dev/null
# the image example's model and records (python3-pil makes the photos)
$PY "$DP_SRC/tests/mkphotos.py" photos 6 || exit 1
tfr-cat --encode images --classes-out classes.txt photos > photos.tfrecord
dp-train --train photos.tfrecord --decode image --input-shape 3x16x16 --scale 1/255 \
	--augment random-resized-crop,flip --model flatten,dense:2 --epochs 2 -q \
	-o photos.safetensors > /dev/null
# the runs of the several-models example: two models of the same data
mkdir -p runs/1 runs/2
cp model.safetensors runs/1/
dp-train --train train.tfrecord --decode-raw uint8 --scale 1/255 --input-shape 1x28x28 \
	--model flatten,dense:32,relu,dense:10 --batch-size 64 --epochs 1 -q -o runs/2/model.safetensors > /dev/null
man_examples "$PAGE" ../examples
run_examples ../examples
ok test "$n" -ge 6 "the page has examples ($n)"
# what the examples promise
like "$(cat out.1)" "^model.safetensors: 1000 samples from test.tfrecord" "example 1: the report"
like "$(cat out.2)" "gate recall\[Trouser\]>=0.8: 0\.[0-9]+ passed" "example 2: gates by class name"
like_text "$(cat out.3)" $'passed\n0\\.[0-9]+$' "example 3: --check, then the accuracy read by sed"
like_text "$(cat out.4)" $'^\\{"file":"test.tfrecord","record":0,"label":9,.*\n[0-9]+\n\\{"image":' \
	"example 4: a prediction, the count right, a wrong record's input"
like "$(cat out.5)" "photos.safetensors: 12 samples from photos.tfrecord" "example 5: an image model"
like "$(cat out.5)" "        cat  " "... its classes named by --classes @classes.txt"
like "$(cat out.6)" "gate samples>=1000: 1000 passed" "example 6: four workers"
like "$(cat out.7)" "^0\.[0-9]+$" "example 7: a SageMaker processing job's evaluation.json"
ok test ! -e pj/output/message "... and no failure message"
like "$(cat out.10)" "best by accuracy: runs/[12]/model.safetensors " "example 10: the best of two runs"
like "$(cat out.10)" "gate accuracy>=0.7: 0\.[0-9]+ passed" "... gated"
ok cmp -s release/model.safetensors "$(sed -n 's/^best by accuracy: \([^ ]*\) .*/\1/p' out.10)" "... copied to release/"
done_testing
