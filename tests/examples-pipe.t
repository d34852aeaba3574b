#!/usr/bin/env bash
# examples/pipe-mode.sh, shortened (4000 training images in 8 objects, 2
# epochs, 2 workers), against a real S3 server on 127.0.0.1 (radosgw,
# tests/rgw): the objects are uploaded, each worker's FIFOs deliver every
# epoch of its share, dp-train learns from them, dp-eval reads the test set
# from S3 and gates it; nothing is left running.
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/s3lib.sh"

D=/usr/share/datasets/fashion-mnist
if [ ! -r "$D/train-images-idx3-ubyte.gz" ]; then
	skip "Fashion-MNIST is not installed: apt-get install dataset-fashion-mnist"
	done_testing
fi
command -v mpirun >/dev/null || { skip "mpirun is not installed (openmpi-bin)"; done_testing; }
s3_start || { skip "no S3 server: $S3_WHY"; done_testing; }
cd "$T"

run timeout 300 env BUCKET=pipe-demo LIMIT=4000 TEST_LIMIT=500 EPOCHS=2 MIN_ACCURACY=0.6 \
	MODEL=flatten,dense:64,relu,dense:10 "$DP_SRC/examples/pipe-mode.sh" pm
is "$rc" 0 "examples/pipe-mode.sh runs against the server"
[ "$rc" = 0 ] || printf '%s\n' "$err" | tail -n 5 | sed 's/^/#   /'
is "$(awsr s3 ls --recursive s3://pipe-demo/fashion/ | grep -c 'train/train-0000[0-7]-of-00008.tfrecord')" 8 \
	"8 training objects in the bucket (read back with awscli)"
is "$(awsr s3 cp s3://pipe-demo/fashion/test.tfrecord - | tfr-cat -c)" 500 "... and the test set"
like "$out" "epoch=2 step=[0-9]+ loss=" "dp-train trained 2 epochs from the FIFOs"
is "$(grep -c '^epoch=1 ' pm/train.log)" "$(grep -c '^epoch=2 ' pm/train.log)" "... the same number of log lines in each epoch"
like "$out" "gate accuracy>=0.6: 0\.[0-9]+ passed" "dp-eval, from S3: the gate passed"
is "$($PY -c 'import json; j = json.load(open("pm/metrics.json")); print(j["samples"], j["data"]["sources"])')" \
	"500 ['stdin']" "... on the 500 test records streamed from S3"
ok test ! -e pm/pipes-0 "the FIFO directories are removed"
is "$(pgrep -f "s3-pipe fifo.*$T" | wc -l)" 0 "no s3-pipe left running"

done_testing
