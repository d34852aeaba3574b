#!/bin/bash
# examples/pipe-mode.sh - SageMaker's Pipe mode with dptools: the training
# shards live in an S3 bucket and stream, epoch after epoch, through the
# FIFOs of `s3-pipe fifo` into the dp-train workers; the test set streams
# from S3 into dp-eval.  Nothing is copied to local disk first.
#
#   examples/pipe-mode.sh [DIR]            (default: pipe-mode)
#
# S3: the server and credentials of the environment (AWS_ENDPOINT_URL,
# AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY...; see s3-pipe(1)) and BUCKET
# (default dptools-demo, created when missing, with awscli); without
# AWS_ENDPOINT_URL, a throw-away S3 server on 127.0.0.1 (Ceph's radosgw
# from tests/rgw: scripts/deps --test installs it), killed at the end.
#
# Settings from the environment: NP (workers, default 2), EPOCHS (2),
# OBJECTS (training objects in S3, default 8: each worker streams its
# share), MODEL, BATCH, LR, LIMIT and TEST_LIMIT (records kept), and
# MIN_ACCURACY (the gate, default 0.8).
#
# The steps (Pipe mode's FIFOs are D/CHANNEL_EPOCH, here pipes-R/train_1,
# train_2, ... for worker R; dp-train runs `cat` on the epoch's FIFO):
#   tfr-cat --encode idx | tfr-shard -n OBJECTS      Fashion-MNIST as OBJECTS shards
#   s3-pipe put s3://BUCKET/fashion/train/ ...        upload them (and the test set)
#   s3-pipe fifo --shard R/NP --dir pipes-R ... &     one Pipe-mode channel per worker
#   mpirun -np NP dp-train --train-cmd 'cat pipes-{rank}/train_{epoch}' ...
#   s3-pipe get s3://BUCKET/fashion/test.tfrecord | dp-eval --data - --require ...
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
DIR=${1:-pipe-mode}
NP=${NP:-2}
EPOCHS=${EPOCHS:-2}
OBJECTS=${OBJECTS:-8}
MODEL=${MODEL:-conv:16:3,relu,maxpool:2,flatten,dense:64,relu,dense:10}
BATCH=${BATCH:-64}
LR=${LR:-1e-3}
MIN=${MIN_ACCURACY:-0.8}
BUCKET=${BUCKET:-dptools-demo}
FASHION=${FASHION:-/usr/share/datasets/fashion-mnist}
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
LAUNCH=()
[ "$NP" != 1 ] && LAUNCH=(mpirun -np "$NP")
[ "$NP" != 1 ] && [ "$(nproc)" -lt "$NP" ] && LAUNCH+=(--oversubscribe)

mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
pids=()
rgw=
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	[ -n "$rgw" ] && "$SRC/tests/rgw" stop "$rgw"
	return 0
}
trap cleanup EXIT

# ---- an S3 server
if [ -z "${AWS_ENDPOINT_URL:-}" ]; then
	echo "== a throw-away S3 server on 127.0.0.1 (radosgw)"
	rm -rf "$DIR/rgw"
	env=$("$SRC/tests/rgw" start "$DIR/rgw" $$)
	rgw=$DIR/rgw
	eval "$env"
	export AWS_ENDPOINT_URL=$RGW_URL AWS_ACCESS_KEY_ID=$RGW_KEY AWS_SECRET_ACCESS_KEY=$RGW_SECRET
	export AWS_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true
fi
if ! s3-pipe ls "s3://$BUCKET/" >/dev/null 2>&1; then
	command -v aws >/dev/null || { echo "pipe-mode: bucket $BUCKET missing and no aws CLI to make it" >&2; exit 1; }
	aws --endpoint-url "$AWS_ENDPOINT_URL" s3 mb "s3://$BUCKET" >/dev/null
fi

# ---- the dataset, as objects
echo "== Fashion-MNIST into s3://$BUCKET/fashion/ ($OBJECTS training objects)"
tfr-cat --encode idx ${LIMIT:+-n $LIMIT} "$FASHION/train-images-idx3-ubyte.gz" \
	"$FASHION/train-labels-idx1-ubyte.gz" |
	tfr-shard -q -n "$OBJECTS" -o "$DIR/upload/train-{shard}-of-{nshards}.tfrecord"
tfr-cat --encode idx ${TEST_LIMIT:+-n $TEST_LIMIT} "$FASHION/t10k-images-idx3-ubyte.gz" \
	"$FASHION/t10k-labels-idx1-ubyte.gz" -o "$DIR/upload/test.tfrecord"
s3-pipe put -q "s3://$BUCKET/fashion/train/" "$DIR"/upload/train-*.tfrecord
s3-pipe put -q "s3://$BUCKET/fashion/test.tfrecord" < "$DIR/upload/test.tfrecord"
rm -rf "$DIR/upload"
s3-pipe ls -r "s3://$BUCKET/fashion/"

# ---- Pipe mode: one channel of FIFOs per worker, its share of the objects,
# shuffled anew each epoch
echo "== training: $NP worker(s), $EPOCHS epochs streamed from S3"
for r in $(seq 0 $((NP - 1))); do
	rm -rf "$DIR/pipes-$r"
	s3-pipe fifo -q --shard "$r/$NP" --shuffle --seed 1 --channel train --epoch 1 \
		--epochs "$EPOCHS" --dir "$DIR/pipes-$r" "s3://$BUCKET/fashion/train/" &
	pids+=($!)
done
for r in $(seq 0 $((NP - 1))); do
	# while its s3-pipe runs: one that failed makes no FIFO (s3-pipe(1))
	until [ -p "$DIR/pipes-$r/train_1" ]; do
		kill -0 "${pids[$r]}" 2>/dev/null || { wait "${pids[$r]}" || exit; exit 1; }
		sleep 0.1
	done
done
"${LAUNCH[@]}" dp-train --train-cmd "cat $DIR/pipes-{rank}/train_{epoch}" \
	--decode-raw uint8 --scale 1/255 --input-shape 1x28x28 --model "$MODEL" \
	--batch-size "$BATCH" --lr "$LR" --epochs "$EPOCHS" --log-every 100 -q \
	-o "$DIR/model.safetensors" | tee "$DIR/train.log"
for p in "${pids[@]}"; do wait "$p"; done # every channel delivered every epoch
rm -rf "$DIR"/pipes-*
pids=()

# ---- evaluation, streamed from S3 too
echo "== evaluation of s3://$BUCKET/fashion/test.tfrecord"
s3-pipe get "s3://$BUCKET/fashion/test.tfrecord" |
	dp-eval --model "$DIR/model.safetensors" --data - --json "$DIR/metrics.json" \
		--require "accuracy>=$MIN" | sed -n '2p;/^gate /p'
echo
echo "model    $DIR/model.safetensors"
echo "metrics  $DIR/metrics.json"
echo "log      $DIR/train.log"
