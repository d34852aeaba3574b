#!/usr/bin/env bash
# s3-pipe fifo and a reader that numbers epochs otherwise (issue 25): SageMaker
# numbers Pipe-mode FIFOs from 0 (train_0), dp-train's {epoch} counts from 1.
# Without --epoch, a reader of train_{epoch} (dp-train --train-cmd 'cat
# pipes/train_{epoch}') is served from train_1 on, a reader of train_0
# (SageMaker's code, dp-train's {epoch0}) from train_0, each epoch whole; the
# name not taken is gone and nothing is left when s3-pipe ends.  Local
# objects (file://): the FIFO logic is the same for S3.
. "${DP_SRC:-.}/tests/lib.sh"
cd "$T" || exit 1

$PY -c '
import numpy as np
r = np.random.default_rng(1)
np.savez("v.npz", x=r.standard_normal((24, 6)).astype(np.float32), y=r.integers(0, 3, 24))' || exit 1
mkdir src
$PY "$DP_SRC/tests/mkexamples.py" src/v.tfr npz v.npz || exit 1
SRC="file://$T/src/"

# fifo_run EPOCHS CMD...: s3-pipe fifo in the background (bounded: 60 s),
# then CMD; $fst: s3-pipe's exit status, $ferr its messages
fifo_run() {
	local n=$1
	shift
	timeout 60 s3-pipe fifo --channel train --epochs "$n" --dir pp -v "$SRC" 2>fifo.err &
	local pid=$!
	while [ ! -p pp/train_0 ] && kill -0 $pid 2>/dev/null; do sleep 0.05; done
	run timeout 60 "$@"
	wait $pid
	fst=$?
	ferr=$(cat fifo.err)
}

fifo_run 2 dp-train --train-cmd 'cat pp/train_{epoch}' --input-shape 6 --model dense:3 --epochs 2 \
	--batch-size 8 -q -o a.st
is "$rc:$fst" "0:0" "dp-train reading train_{epoch} (from 1): both run to the end"
like "$out" "epoch=2 step=6 " "... two whole epochs of 24 records"
like "$ferr" "fifo=pp/train_1: the reader numbers epochs from 1" "... s3-pipe says whose numbering it serves"
ok test ! -e pp "... no FIFO left"

fifo_run 2 dp-train --train-cmd 'cat pp/train_{epoch0}' --input-shape 6 --model dense:3 --epochs 2 \
	--batch-size 8 -q -o b.st
is "$rc:$fst" "0:0" "dp-train reading train_{epoch0} (from 0, as SageMaker): both run to the end"
unlike "$ferr" "numbers epochs from 1" "... served from train_0"
run dp-ckpt diff --weights a.st b.st
is "$rc" 0 "... the same records, the same weights, whichever numbering"

fifo_run 2 sh -c 'tfr-cat -c pp/train_0 && tfr-cat -c pp/train_1'
is "$rc:$fst:$out" "0:0:24"$'\n'"24" "Pipe-mode code reading train_0 then train_1: every record twice"
fifo_run 1 tfr-cat -c pp/train_1
is "$rc:$fst:$out" "0:0:24" "--epochs 1, a reader of train_1: served"
ok test ! -e pp "... nothing left"
done_testing
