#!/usr/bin/env bash
# dp-train across hosts, emulated by tests/cluster.sh (network namespaces
# joined by a bridge, Open MPI's daemons started by an agent in place of
# ssh, TCP between them, links shaped to 1 Gbit/s): 2 hosts x 1 rank and
# 2 x 2 end byte-identical to a local run of 2 and 4 ranks; shards and an
# output directory that exist on one host only; a host that dies (its
# dp-train, its Open MPI daemon) ends the job, naming it.
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/mpi.sh"
. "$DP_SRC/tests/cluster.sh"

why=$(cluster_skip_reason)
if [ -n "$why" ]; then
	skip "no emulated hosts: $why"
	done_testing
fi
cd "$T"
MK="$PY $DP_SRC/tests/mkexamples.py"
$MK all.tfr random --n 96 --shape 1x8x8 --classes 4 --seed 1
mkdir shards
$MK shards/train-0-of-2.tfr random --n 40 --shape 1x8x8 --classes 4 --seed 2
$MK shards/train-1-of-2.tfr random --n 40 --shape 1x8x8 --classes 4 --seed 3
CNN='conv:4:3,relu,maxpool:2,dropout:0.25,flatten,dense:16,relu,dense:4'
COMMON=(--model "$CNN" --input-shape 1x8x8 --epochs 2 --seed 3 --prefetch 0 -q)

# the local runs to compare with
run mpi 2 dp-train --train all.tfr "${COMMON[@]}" --batch-size 12 -o l2.st
is "$rc" 0 "local: mpirun -np 2"
run mpi 4 dp-train --train all.tfr "${COMMON[@]}" --batch-size 6 -o l4.st
is "$rc" 0 "local: mpirun -np 4"
run mpi 2 dp-train --train 'shards/train-{rank}-of-{size}.tfr' "${COMMON[@]}" --batch-size 8 -o lsh.st
is "$rc" 0 "local: per-rank shards"

if ! cluster_start 2; then
	_tap_result 1 "the emulated hosts are made"
	done_testing
fi
ok cluster_shape 1gbit "links shaped: tbf 1 Gbit/s on every host"
like "$(tc -n "$CL_ID-br" qdisc show dev v-h2)" "tbf .*rate 1Gbit" \
	"... and on the switch's port toward each host (the other direction's queue)"
run cluster_mpirun -H h1,h2 -np 2 hostname
is "$(sort <<<"$out" | tr '\n' ' ')" "h1 h2 " "mpirun -H h1,h2 starts a process on each host"

# ---- 2 x 1 and 2 x 2 = local ---------------------------------------------------------------
sent() { tc -n "$CL_ID-h2" -s qdisc show dev eth0 | sed -n 's/^ *Sent \([0-9]*\) bytes.*/\1/p' | head -1; }
s0=$(sent)
run cluster_mpirun -H h1,h2 -np 2 dp-train --train "$T/all.tfr" "${COMMON[@]}" --batch-size 12 -o "$T/c2.st"
is "$rc" 0 "2 hosts x 1 rank: trains"
[ "$rc" = 0 ] || printf '%s\n' "$err" | tail -n 8 | sed 's/^/# /'
same_file c2.st l2.st "2 hosts x 1 rank = mpirun -np 2 on one host, byte for byte"
s1=$(sent)
ok test $((s1 - s0)) -gt 10000 "... the gradients went through h2's shaped link ($((s1 - s0)) bytes)"
run cluster_mpirun -H h1:2,h2:2 -np 4 --map-by slot sh -c 'echo $OMPI_COMM_WORLD_RANK $(hostname)'
is "$(sort <<<"$out" | tr '\n' ' ')" "0 h1 1 h1 2 h2 3 h2 " "-H h1:2,h2:2: ranks 0, 1 on h1, 2, 3 on h2"
run cluster_mpirun -H h1:2,h2:2 -np 4 --map-by slot dp-train --train "$T/all.tfr" "${COMMON[@]}" \
	--batch-size 6 -o "$T/c4.st"
is "$rc" 0 "2 hosts x 2 ranks: trains"
[ "$rc" = 0 ] || printf '%s\n' "$err" | tail -n 8 | sed 's/^/# /'
same_file c4.st l4.st "2 hosts x 2 ranks = mpirun -np 4 on one host, byte for byte"

# ---- a host's own disk ------------------------------------------------------------------------
# each host has its shard on its local disk, h1 the output directory
mkdir -p "$CL_HOSTS/h1/data" "$CL_HOSTS/h2/data" "$CL_HOSTS/h1/out"
cp shards/train-0-of-2.tfr "$CL_HOSTS/h1/data/"
cp shards/train-1-of-2.tfr "$CL_HOSTS/h2/data/"
run cluster_mpirun -H h1,h2 -np 2 dp-train --train "$CL_LOCAL/data/train-{rank}-of-{size}.tfr" \
	"${COMMON[@]}" --batch-size 8 -o "$CL_LOCAL/out/model.st" --log "$CL_LOCAL/out/train.log"
is "$rc" 0 "shards and the output directory on the hosts' own disks: trains"
ok cluster_wait_idle "... the hosts' daemons end (their disks copied back)"
same_file "$CL_HOSTS/h1/out/model.st" lsh.st "... the checkpoint, on h1, = the local run's"
ok grep -q "loss=" "$CL_HOSTS/h1/out/train.log" "... the log on h1, its training lines"
ok test ! -e "$CL_HOSTS/h2/out" -a ! -e "$CL_LOCAL/out" "... nothing of it on h2 or on the shared disk"
# the emulation is honest: h2 cannot see h1's disk
rm "$CL_HOSTS/h2/data/train-1-of-2.tfr"
cp shards/train-1-of-2.tfr "$CL_HOSTS/h1/data/"
run cluster_mpirun -H h1,h2 -np 2 dp-train --train "$CL_LOCAL/data/train-{rank}-of-{size}.tfr" \
	"${COMMON[@]}" --batch-size 8 -o "$CL_LOCAL/out/model2.st"
isnt "$rc" 0 "a shard on h1's disk only, for a rank on h2: fails"
like "$err" "dp-train: rank 1: " "... rank 1 says so"
like "$err" "train: $CL_LOCAL/data/train-1-of-2.tfr: No such file" "... naming the file it lacks"
cluster_wait_idle

# ---- a host that dies -------------------------------------------------------------------------
# wait_log FILE: until the job has logged a step (30 s at most)
wait_log() {
	local i
	for i in $(seq 300); do
		[ -s "$1" ] && return 0
		sleep 0.1
	done
	return 1
}
for victim in dp-train orted; do
	rm -f long.log
	DP_MPI_TIMEOUT=60 cluster_mpirun -H h1,h2 -np 2 dp-train --train "$T/all.tfr" "${COMMON[@]}" \
		--epochs 100000 --batch-size 12 --log-every 1 --log "$T/long.log" \
		>long.out 2>long.err </dev/null &
	job=$!
	if wait_log long.log; then
		pid=$(cluster_pids h2 "$victim")
		ok test -n "$pid" "$victim on h2 found while the job trains"
		[ -n "$pid" ] && kill -9 $pid
	else
		_tap_result 1 "the job trains (a line in its log)"
	fi
	wait "$job"
	rc=$?
	err=$(cat long.err)
	ok test "$rc" != 0 -a "$rc" != 124 "$victim on h2 killed: the job ends, failed, before its time limit (exit $rc)"
	if [ "$victim" = orted ]; then
		like "$err" "ORTE has lost communication with a remote daemon" "... mpirun says a host was lost"
		like "$err" "Remote daemon: .* on node h2" "... naming h2"
	else
		like "$err" "rank 1 with PID [0-9]+ on node h2 exited on signal 9" "... mpirun names the rank and its host"
	fi
	ok cluster_wait_idle "... and nothing is left running on the hosts"
done

cluster_stop
is "$(ip netns list | grep -c "^$CL_ID-")" 0 "the namespaces are removed"
done_testing
