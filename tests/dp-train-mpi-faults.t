#!/usr/bin/env bash
# dp-train under mpirun when things go wrong: a rank killed mid-epoch ends
# the job within seconds, names the rank and leaves the last checkpoint
# valid for --resume; a corrupt record on one rank names file, record and
# rank; a stopped rank is reported by the stall inspector (and the job goes
# on when it continues, or ends with --stall-abort); a diverging loss ends
# the job with exit status 3.
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/mpi.sh"

MK="$PY $DP_SRC/tests/mkexamples.py"
cd "$T"
$MK d.tfr random --n 256 --shape 64 --classes 4 --seed 1
cp d.tfr c-0.tfr
cp d.tfr c-1.tfr
# rank 1's file: one byte flipped, inside a record
printf '\377' | dd of=c-1.tfr bs=1 seek=2800 conv=notrunc 2>/dev/null
MLP=(--model dense:8,relu,dense:4 --input-shape 64 --batch-size 16)

require "mpirun is not installed (apt-get install openmpi-bin)" have_mpirun

# wait_job PID SECONDS: wait for a background job, killing it when it takes
# longer; sets rc (no process left behind to hold the TAP pipe open)
wait_job() {
	local i
	for i in $(seq $(($2 * 10))); do
		kill -0 "$1" 2>/dev/null || break
		sleep 0.1
	done
	kill -9 "$1" 2>/dev/null
	wait "$1"
	rc=$?
}

# wait_for FILE PATTERN: until FILE has a line matching PATTERN (20 s at most)
wait_for() {
	local i
	for i in $(seq 200); do
		grep -Eq -- "$2" "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}

# ---- a corrupt record on one rank -----------------------------------------------------
run mpi 2 dp-train --train 'c-{rank}.tfr' "${MLP[@]}"
is "$rc" 1 "a corrupt record on rank 1: exit 1"
like "$err" "dp-train: rank 1: train: c-1.tfr: record [0-9]+ at byte [0-9]+: (data|length) CRC mismatch" \
	"names the rank, the file, the record and its offset"
unlike "$err" "rank 0: train" "rank 0's data is fine"

# ---- a rank killed mid-epoch -----------------------------------------------------------------
mpirun "${MPI_OPTS[@]}" -np 2 dp-train --train d.tfr "${MLP[@]}" --epochs 1000000 \
	--log-every 1000000 --checkpoint-every 100 -o k.st > k.log 2> k.err &
mp=$!
ok wait_for k.err "training source" "the job started"
for i in $(seq 100); do [ -s k.st ] && break; sleep 0.1; done
sleep 0.5 # mid-epoch, past a checkpoint
r1=$(rank_pid $mp 1)
ok test -n "$r1" "found rank 1's process"
t0=$(date +%s.%N)
kill -9 "$r1"
wait_job $mp 30
dt=$(echo "$(date +%s.%N) - $t0" | bc)
isnt "$rc" 0 "the job fails"
ok awk -v d="$dt" 'BEGIN { exit !(d < 15) }' "and ends within seconds of the kill (${dt}s), no hang"
like "$(cat k.err)" "process rank 1 .*(signal 9|Killed)" "mpirun names the killed rank"
is "$(ls -a | grep -c '\.tmp\.')" 0 "no temporary file left behind"
ok $PY "$DP_SRC/tests/torch_ref.py" finite k.st "the last checkpoint is whole"
epoch=$($PY -c "import sys; sys.path.insert(0, '$DP_SRC/tests'); from torch_ref import load_checkpoint; print(load_checkpoint('k.st')[1]['epoch'])")
run mpi 2 dp-train --resume k.st --train d.tfr --epochs $((epoch + 2)) -o k2.st
is "$rc" 0 "--resume continues from it"
like "$err" "resuming k.st at epoch $((epoch + 1)), step [0-9]+" "where it was"

# ---- a stopped rank: the stall inspector ------------------------------------------------------------
stall_run() { # extra options...
	mpirun "${MPI_OPTS[@]}" -np 3 dp-train --train d.tfr "${MLP[@]}" --epochs 1000000 \
		--log-every 200 "$@" > s.log 2> s.err &
	mp=$!
	wait_for s.err "training source"
	sleep 0.5
	r1=$(rank_pid $mp 1)
}
stall_run --stall-timeout 1
kill -STOP "$r1"
ok wait_for s.err "waited [0-9]+ s for rank 1 " "a stopped rank is reported after --stall-timeout"
like "$(cat s.err)" "dp-train: rank 0: step [0-9]+: (gradients|allgather): waited [0-9]+ s for rank 1 \(stopped, stuck or far behind\); ranks 0, 2 waiting" \
	"by the lowest waiting rank, naming the missing rank and the waiting ones"
n0=$(grep -c . s.log)
kill -CONT "$r1"
ok wait_for s.err "going on after [0-9]+ s" "when the rank continues, the job says it goes on"
for i in $(seq 300); do n1=$(grep -c . s.log); [ "$n1" -gt "$n0" ] && break; sleep 0.1; done
ok test "$n1" -gt "$n0" "and trains on ($n0 -> $n1 log lines)"
kill $mp
wait_job $mp 30
unlike "$(cat s.err)" "rank 1: step" "the stopped rank does not blame the others"

stall_run --stall-timeout 1 --stall-abort 2
kill -STOP "$r1"
wait_job $mp 30
kill -9 "$r1" 2>/dev/null
is "$rc" 1 "--stall-abort: the job ends"
like "$(cat s.err)" "waited 2 s for rank 1: giving up \(--stall-abort\)" "says why"

# ---- outputs that cannot be created: found before the work -----------------------------------------
# -o and --checkpoint on rank 0; --timeline and --log with {rank} on every rank
mkdir isdir
for o in "-o nodir/m.st" "--checkpoint isdir" "--timeline nodir/t-{rank}.json" \
	"--log nodir/l-{rank}.log --log-all-ranks"; do
	run mpi 2 dp-train --train d.tfr "${MLP[@]}" --epochs 3 --log-every 1 $o
	isnt "$rc" 0 "$o: the job fails"
	like "$err" "rank [01]: ${o%% *} (nodir/[a-z]+(-[01])?\.[a-z]+: cannot create \(directory nodir\)|isdir: is a directory)" \
		"$o: the rank names the option and the path"
	unlike "$out" "epoch=" "$o: ... before any work"
done
run mpi 2 dp-train --train d.tfr --resume isdir
isnt "$rc" 0 "--resume a directory: the job fails"
like "$err" "isdir: is a directory, not a checkpoint" "... says it is a directory"

# ---- divergence ------------------------------------------------------------------------------------
run mpi 2 dp-train --train d.tfr "${MLP[@]}" --epochs 50 --optimizer sgd --lr 1e6 -o n.st \
	--checkpoint-every 1
is "$rc" 3 "a loss that is not finite: exit 3 from the whole job"
like "$err" "rank [01]: epoch [0-9]+, step [0-9]+: loss is (NaN|infinite): training diverged" "names the rank and step"

done_testing
