#!/usr/bin/env bash
# dptools(7): the overview formats without warnings, names every program
# and man page there is, and its example - the pipeline by hand on 6000
# Fashion-MNIST images with two workers under mpirun - runs and gives what
# it says.
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/man-examples.sh"

PAGE="$DP_SRC/man/man7/dptools.7"
cd "$T" || exit 1
man_lint "$PAGE"
for f in $(ls "$DP_SRC"/tools/*.c | grep -v "/cli.c\|/cli_input.c\|/sagemaker.c"); do
	p=$(basename "$f" .c)
	like "$(cat page.txt)" "$p\(1\)" "names $p(1)"
done
for f in "$DP_SRC"/man/man5/*.5; do
	p=$(basename "$f" .5)
	like "$(cat page.txt)" "$p\(5\)" "names $p(5)"
done

if [ ! -r /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
	skip "Fashion-MNIST is not installed (dataset-fashion-mnist): example not run"
	done_testing
fi
command -v mpirun >/dev/null || { skip "mpirun is not installed: example not run"; done_testing; }
man_examples "$PAGE" ex
mkdir run && cd run
run_examples ../ex
is "$(ls data | tr '\n' ' ')" \
	"train-00000-of-00002.tfrecord train-00001-of-00002.tfrecord val-00000-of-00002.tfrecord val-00001-of-00002.tfrecord " \
	"tfr-shard: a split in shards for two workers"
ok_ckpt model.safetensors "dp-train: the model"
like "$(cat train.log)" "epoch=3 step=[0-9]+ val_loss=" "... its log, with validation"
ok $PY -c 'import json, sys; j = json.load(open("metrics.json")); sys.exit(not (j["samples"] == 1000 and j["passed"]))' \
	"dp-eval: 1000 test records, the gate passed"
ok grep -q '<polyline' loss.svg "metrics-grep: the loss curve"
like "$(cat out.1)" $'^val_accuracy\t0\\.[0-9]+$' "metrics-grep --last: the last validation accuracy"
done_testing
