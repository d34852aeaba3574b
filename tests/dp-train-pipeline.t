#!/usr/bin/env bash
# dp-train --pipeline-stages under a real mpirun: the model cut into 2 and 4
# stages (4 ranks oversubscribed on 2 cores), 1 and 2 data-parallel replicas,
# GPipe and 1F1B, against one process over the same global batch in
# micro-batches of the same size (--batch-size B/M --accumulate M x D), 20
# updates of a model with batchnorm, dropout and a residual block: the same
# loss and validation lines and weights (bit for bit with one replica; within 1e-5 with two,
# whose sums run in another order; their running statistics are the
# replicas' mean, as in plain data parallelism).  The checkpoint is one
# file of the single-rank names (dp-eval reads it, --resume goes on from it
# with or without stages); --summary prints the cut; a killed stage ends the
# job; settings that cannot work are usage errors.
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/mpi.sh"

cd "$T"
$PY "$DP_SRC/tests/mkexamples.py" all.tfr random --n 320 --shape 1x8x8 --classes 4 --seed 1
$PY "$DP_SRC/tests/mkexamples.py" val.tfr random --n 50 --shape 1x8x8 --classes 4 --seed 2
CNN='conv:4:3:1:1,batchnorm,relu,res(conv:4:3:1:1,batchnorm,relu,dropout:0.2,conv:4:3:1:1,batchnorm):relu,maxpool:2,flatten,dropout:0.25,dense:16,relu,dense:4'
COMMON=(--train all.tfr --model "$CNN" --input-shape 1x8x8 --seed 3 --epochs 1 --log-every 1
	--optimizer sgd --momentum 0.9 --lr 0.05 --shuffle-buffer 64 --prefetch 1)
maxdiff() { $PY "$DP_SRC/tests/maxdiff.py" "$1" "$2"; }
# the largest difference of the weights and optimizer state (not the
# running statistics) of two checkpoints
wdiff() {
	$PY - "$1" "$2" <<-EOF
	import sys
	sys.path.insert(0, "$DP_SRC/tests")
	import numpy as np
	from torch_ref import load_checkpoint
	a, _ = load_checkpoint(sys.argv[1])
	b, _ = load_checkpoint(sys.argv[2])
	assert a.keys() == b.keys()
	print(max(float(np.max(np.abs(a[k].astype(np.float64) - b[k].astype(np.float64))))
	          for k in a if a[k].dtype.kind == "f" and "running_" not in k))
	EOF
}
small() { awk -v d="$1" 'BEGIN { exit !(d ~ /^[0-9.e+-]+$/ && d + 0 < 1e-5) }'; }
losses() { sed -n 's/.* step=\([0-9]*\) loss=\([0-9.e+-]*\) .*/\1 \2/p' "$1"; }
vals() { grep '^epoch=.* val_loss=' "$1"; }

require "mpirun is not installed (apt-get install openmpi-bin)" have_mpirun

# ---- the reference: one process, global batch 16 in micro-batches of 4 ------------------
run dp-train "${COMMON[@]}" --batch-size 4 --accumulate 4 -o one.st --log one.log --val val.tfr
is "$rc" 0 "one process trains"
is "$(losses one.log | wc -l)" 20 "20 updates"
like "$(vals one.log)" "val_samples=50$" "and validates"

# ---- 2 stages, 1 replica, 1F1B: the same bits --------------------------------------------
run mpi 2 dp-train "${COMMON[@]}" --batch-size 16 --pipeline-stages 2 --micro-batches 4 \
	-o s2.st --log s2.log
is "$rc" 0 "2 stages x 1 replica train"
[ "$rc" = 0 ] || printf '%s\n' "$err" | sed 's/^/#   /' | head -20
like "$err" "pipeline: 2 stages x 1 replica, a step of 16 samples in 4 micro-batches of 4, 1f1b schedule \(bubble 20\.0% in theory\); parameters a rank: stage 0 layers 0-2 192 bytes \(3\.3%\), stage 1 layers 3-15 5\.5 KiB \(96\.7%\)" \
	"a note of the stages, the schedule and each rank's parameters"
like "$err" "pipeline: bubble [0-9.]+% of the steps' time measured \(stage 0 [0-9.]+%, stage 1 [0-9.]+%\), 20\.0% in theory" \
	"the bubble measured against the theory"
is "$(losses s2.log)" "$(losses one.log)" "the loss of every update is one process's"
is "$(maxdiff one.st s2.st)" "0.0" "the checkpoint: one process's tensors, names and bits (running statistics included)"

# ---- 4 stages (oversubscribed), GPipe ----------------------------------------------------
run mpi 4 dp-train "${COMMON[@]}" --batch-size 16 --pipeline-stages 4 --micro-batches 4 \
	--pipeline-schedule gpipe -o s4.st --log s4.log --val val.tfr
is "$rc" 0 "4 stages x 1 replica train (GPipe)"
like "$err" "4 stages x 1 replica, .* gpipe schedule \(bubble 42\.9% in theory\)" "GPipe's bubble: 3/7"
is "$(losses s4.log)" "$(losses one.log)" "4 stages: the same losses"
is "$(maxdiff one.st s4.st)" "0.0" "4 stages: the same bits"
is "$(vals s4.log)" "$(vals one.log)" "4 stages: validation through the stages gives one process's line"

# ---- 2 stages x 2 replicas, 1F1B, and GPipe with clipping --------------------------------
run mpi 4 dp-train "${COMMON[@]}" --batch-size 8 --pipeline-stages 2 --micro-batches 2 \
	-o s22.st --log s22.log --val val.tfr
is "$rc" 0 "2 stages x 2 replicas train"
like "$err" "global batch 16 \(2 x 8\); training data shared" "the replicas share the global batch"
like "$err" "each stage's 2 replicas hold the same weights and optimizer state" "the replicas agree"
like "$(vals s22.log)" "^epoch=1 step=20 val_loss=[0-9.]+ val_accuracy=[0-9.]+ val_samples=50$" \
	"2 x 2: the replicas' validation shares add up to every record once"
d=$(wdiff one.st s22.st)
ok small "$d" "2 x 2: weights and momentum within 1e-5 of one process ($d)"
ok $PY "$DP_SRC/tests/torch_ref.py" finite s22.st "2 x 2: the running statistics (the replicas' mean) are finite"
run dp-train "${COMMON[@]}" --batch-size 4 --accumulate 4 --clip-norm 0.5 -o onec.st
run mpi 4 dp-train "${COMMON[@]}" --batch-size 8 --pipeline-stages 2 --micro-batches 2 \
	--pipeline-schedule gpipe --clip-norm 0.5 -o s22c.st
is "$rc" 0 "2 x 2, GPipe, --clip-norm: trains"
d=$(wdiff onec.st s22c.st)
ok small "$d" "2 x 2, GPipe, clipped by the norm over both stages: within 1e-5 ($d)"

# ---- the checkpoint: dp-eval, --resume with and without stages ---------------------------
run dp-eval --model one.st --data all.tfr --json one.json
run dp-eval --model s2.st --data all.tfr --json s2.json
is "$rc" 0 "dp-eval reads the pipeline's checkpoint"
is "$(grep -v '"model"' s2.json)" "$(grep -v '"model"' one.json)" "... with one process's metrics"
run mpi 2 dp-train "${COMMON[@]}" --batch-size 16 --pipeline-stages 2 --micro-batches 4 \
	--max-steps 8 -o half.st
run mpi 2 dp-train "${COMMON[@]}" --batch-size 16 --pipeline-stages 2 --micro-batches 4 \
	--resume half.st -o resumed.st
is "$rc" 0 "--resume a pipeline's checkpoint in stages"
is "$(maxdiff s2.st resumed.st)" "0.0" "... ends where the run without a break ends"
run dp-train "${COMMON[@]}" --batch-size 4 --accumulate 4 --resume half.st -o resumed1.st
is "$rc" 0 "--resume it in one process (--batch-size 4 --accumulate 4)"
is "$(maxdiff one.st resumed1.st)" "0.0" "... the same end"
run mpi 4 dp-train "${COMMON[@]}" --batch-size 8 --pipeline-stages 2 --micro-batches 2 \
	--max-steps 7 -o half22.st
run mpi 2 dp-train "${COMMON[@]}" --batch-size 4 --accumulate 2 --resume half22.st -o resumed2.st
is "$rc" 0 "--resume 2 stages x 2 replicas as 2 ranks of plain data parallelism"
like "$err" "saved by 2 ranks, resumed by 2 with the same global batch \(16\)" "... the replicas counted as ranks"
d=$(wdiff s22.st resumed2.st)
ok small "$d" "... the weights of the run without a break, within 1e-5 ($d): the data goes on where it was"

# ---- --summary -------------------------------------------------------------------------
run dp-train --model "$CNN" --input-shape 1x8x8 --summary --pipeline-stages 4 --batch-size 16
is "$rc" 0 "--summary --pipeline-stages 4"
like "$out" "pipeline: 4 stages of about equal cost" "prints the cut"
like "$out" $'\n3 +10-15 +4\\.\\.9 +[0-9.e+]+ +1108 +4\\.3 KiB \\(75\\.5%\\)' "... each stage's layers, cost and parameters"
like "$out" "bubble: \(S-1\)/\(M\+S-1\) = 3/19 = 15\.8% of a step with 16 micro-batches of 1" \
	"... and the bubble of the default micro-batches (4 x S)"

# ---- --memory-limit: a model too large for one rank, in 2 stages -------------------------
$PY "$DP_SRC/tests/mkexamples.py" m.tfr random --n 64 --shape 256 --classes 10 --seed 1
MLP=(--train m.tfr --model dense:512,relu,dense:512,relu,dense:512,relu,dense:10 --input-shape 256
	--batch-size 32 --epochs 1 --memory-limit 7M)
run dp-train "${MLP[@]}"
is "$rc" 1 "a model over --memory-limit on one rank: exit 1"
like "$err" "dp-train: memory: the model takes 10\.4 MiB on this rank \(weights, gradients and optimizer state 10\.1 MiB, .*\), over --memory-limit 7 MiB: .*--pipeline-stages" \
	"... saying how much, and what would cut it"
run mpi 2 dp-train "${MLP[@]}" --pipeline-stages 2
is "$rc" 0 "in 2 stages it fits"
like "$err" "parameters a rank: stage 0 layers 0-2 1\.5 MiB \(59\.6%\), stage 1 layers 3-6 1\.0 MiB \(40\.4%\)" \
	"... each rank holding its stage's parameters"

# ---- usage errors ----------------------------------------------------------------------
run mpi 3 dp-train "${COMMON[@]}" --batch-size 16 --pipeline-stages 2
is "$rc" 2 "3 ranks for 2 stages: exit 2"
like "$err" "dp-train: --pipeline-stages 2 under 3 ranks: start stages x replicas ranks \(mpirun -np 2, 4, \.\.\.\)" \
	"... saying which -np would do"
is "$(grep -c 'pipeline-stages 2 under' <<<"$err")" 1 "... once"
run dp-train "${COMMON[@]}" --micro-batches 4
is "$rc" 2 "--micro-batches without --pipeline-stages: exit 2"
like "$err" "--micro-batches needs --pipeline-stages" "... says so"
run mpi 2 dp-train "${COMMON[@]}" --batch-size 2 --pipeline-stages 2 --micro-batches 4
is "$rc" 2 "more micro-batches than samples: exit 2"
run mpi 2 dp-train "${COMMON[@]}" --pipeline-stages 2 --sync-bn
is "$rc" 2 "--sync-bn with stages: exit 2"
like "$err" "--sync-bn with --pipeline-stages: not supported" "... says so"
run mpi 2 dp-train --train all.tfr --model dense:4 --input-shape 64 --pipeline-stages 2
is "$rc" 2 "a model of one layer in 2 stages: exit 2"
like "$err" "--pipeline-stages: " "... says why"

# ---- a killed stage ends the job -------------------------------------------------------
mpirun "${MPI_OPTS[@]}" -np 2 dp-train "${COMMON[@]}" --epochs 1000000 --log-every 1000000 \
	--batch-size 16 --pipeline-stages 2 > k.log 2> k.err &
mp=$!
for i in $(seq 200); do grep -q "pipeline: 2 stages" k.err 2>/dev/null && break; sleep 0.1; done
sleep 0.5
r1=$(rank_pid $mp 1)
ok test -n "$r1" "found stage 1's process"
kill -9 "$r1"
for i in $(seq 600); do kill -0 "$mp" 2>/dev/null || break; sleep 0.1; done
kill -0 "$mp" 2>/dev/null && hung=1 || hung=0
kill -9 "$mp" 2>/dev/null
wait "$mp"
rc=$?
is "$hung" 0 "the job ends after its stage 1 is killed, no hang"
isnt "$rc" 0 "... and fails"
like "$(cat k.err)" "process rank 1 .*(signal 9|Killed)" "mpirun names the killed rank"
done_testing
