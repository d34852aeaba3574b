# tests/tblib.sh - what the TensorBoard tests share (source after lib.sh):
# in $T, small.tfr and val.tfr (8x8 inputs, 4 classes), the tests' event
# schemas compiled for python3-protobuf (tests/data/tensorboard/events.proto
# -> events_pb2, hparams.proto -> hparams_pb2), PYTHONPATH for tests/tb_events.py, and
#   tb_dump FILE    one JSON line per event of FILE (tb_events.py dump)
cd "$T" || exit 1
$PY "$DP_SRC/tests/mkexamples.py" small.tfr random --n 100 --shape 1x8x8 --classes 4 --seed 1 || exit 1
$PY "$DP_SRC/tests/mkexamples.py" val.tfr random --n 30 --shape 1x8x8 --classes 4 --seed 2 || exit 1
protoc --python_out="$T" -I"$DP_SRC/tests/data/tensorboard" "$DP_SRC/tests/data/tensorboard/events.proto" \
	"$DP_SRC/tests/data/tensorboard/hparams.proto" || exit 1
export PYTHONPATH="$T:$DP_SRC/tests"
tb_dump() { $PY "$DP_SRC/tests/tb_events.py" dump "$1"; }
