#!/usr/bin/env bash
# dp-train under Slurm: a one-node cluster of Debian's slurm-wlm made by
# this test (slurmctld, slurmd and munged started here with a slurm.conf
# and a munge key of its own, in a network namespace that has only the
# loopback and an address of its own, so that no port of the machine is
# taken; all stopped at the end).  `srun --mpi=pmix -n 2 dp-train` ends
# byte-identical to `mpirun -np 2`; plain `srun -n 2` (no MPI) is refused
# with the fix; scancel and a killed task end the job, leaving the last
# periodic checkpoint whole and nothing running.
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/mpi.sh"

why=
if [ "$(id -u)" != 0 ]; then
	why="slurmd runs tasks as root"
else
	for p in slurmctld slurmd srun salloc squeue scancel sinfo munged ip nsenter; do
		command -v $p >/dev/null 2>&1 || why="${why:+$why, }no $p"
	done
	[ -n "$why" ] && why="$why (apt-get install slurm-wlm munge iproute2 util-linux)"
	have_mpirun || why="${why:+$why, }no mpirun"
fi
NS="dpt-$$-slurm"
if [ -z "$why" ] && ! ip netns add "$NS" 2>/dev/null; then
	why="ip netns add fails here (no CAP_SYS_ADMIN in this container?)"
fi
if [ -n "$why" ]; then
	skip "no Slurm cluster: $why"
	done_testing
fi

# Slurm reads SLURM_CONF before anything else (without it, it looks for a
# configuration server in DNS SRV records)
S="$T/slurm"
export SLURM_CONF="$S/slurm.conf"
in_ns() { nsenter --net="/run/netns/$NS" "$@"; }
slurm_stop() {
	local f p i
	for f in slurmd slurmctld munged; do
		[ -s "$S/$f.pid" ] && kill "$(cat "$S/$f.pid")" 2>/dev/null
	done
	for i in $(seq 50); do
		[ -z "$(ip netns pids "$NS" 2>/dev/null)" ] && break
		sleep 0.1
	done
	for p in $(ip netns pids "$NS" 2>/dev/null); do
		kill -9 "$p" 2>/dev/null
	done
	ip netns del "$NS" 2>/dev/null
	return 0
}
trap 'slurm_stop; _tap_cleanup' EXIT
trap 'exit 130' INT TERM
# getaddrinfo (AI_ADDRCONFIG) finds no IPv4 where only the loopback has an
# address: a veth pair inside the namespace gives it one
ip -n "$NS" link set lo up
ip -n "$NS" link add a0 type veth peer name a1
ip -n "$NS" addr add 10.98.0.1/24 dev a0
ip -n "$NS" link set a0 up
ip -n "$NS" link set a1 up

mkdir -p "$S/state" "$S/spool" "$S/log" "$S/tmp" "$S/munge"
chmod 700 "$S/munge"
head -c 1024 /dev/urandom > "$S/munge/munge.key"
chmod 400 "$S/munge/munge.key"
H=$(hostname -s)
cat > "$SLURM_CONF" <<EOF
ClusterName=dpt
SlurmctldHost=$H(127.0.0.1)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$S/munge/munge.sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool/%n
TmpFS=$S/tmp
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=2
NodeName=dpt-node NodeAddr=127.0.0.1 NodeHostname=$H CPUs=4 State=UNKNOWN
PartitionName=dpt Nodes=dpt-node Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
in_ns munged --force --socket="$S/munge/munge.sock" --key-file="$S/munge/munge.key" \
	--log-file="$S/log/munged.log" --pid-file="$S/munged.pid" --seed-file="$S/munge/seed"
ok test $? = 0 "munged starts with a key of the test's own"
in_ns slurmctld -f "$SLURM_CONF"
in_ns slurmd -f "$SLURM_CONF" -N dpt-node
state=
for i in $(seq 150); do
	state=$(in_ns timeout 10 sinfo -h -o %T 2>/dev/null)
	[ "$state" = idle ] && break
	sleep 0.2
done
is "$state" idle "slurmctld and slurmd up: the node is idle"
if [ "$state" != idle ]; then
	diag "$(tail -5 "$S/log/slurmctld.log" "$S/log/slurmd.log" 2>&1)"
	done_testing
fi
run in_ns srun --mpi=list
like "$out$err" "pmix" "srun --mpi=list has pmix (slurm-wlm-basic-plugins)"

cd "$T"
$PY "$DP_SRC/tests/mkexamples.py" all.tfr random --n 96 --shape 1x8x8 --classes 4 --seed 1
A=(--train "$T/all.tfr" --model 'conv:4:3,relu,maxpool:2,dropout:0.25,flatten,dense:16,relu,dense:4'
	--input-shape 1x8x8 --epochs 2 --batch-size 12 --seed 3 --prefetch 0)
# the tasks' temporary files (Open MPI's session directory) in the test's own directory
export TMPDIR="$S/tmp"

run mpi 2 dp-train "${A[@]}" -q -o m.st
is "$rc" 0 "mpirun -np 2"
run in_ns timeout 120 srun --mpi=pmix -n 2 dp-train "${A[@]}" -o "$T/s.st"
is "$rc" 0 "srun --mpi=pmix -n 2 dp-train"
like "$err" "Open MPI v[0-9.]+, 2 ranks" "... one MPI job of 2 ranks"
same_file s.st m.st "srun --mpi=pmix = mpirun, byte for byte"

# mpirun inside an allocation: it starts its daemon through srun (a step
# of 1 task), whose variables the ranks inherit
run in_ns timeout 120 salloc -n 2 mpirun --mca btl self,vader --bind-to none dp-train "${A[@]}" -o "$T/a.st"
is "$rc" 0 "salloc -n 2 mpirun dp-train (the nodes from Slurm)"
same_file a.st m.st "... = mpirun, byte for byte"

run in_ns timeout 120 srun -n 2 dp-train "${A[@]}" -o "$T/p.st"
is "$rc" 1 "plain srun -n 2 (MpiDefault=none): refused"
like "$err" "dp-train: srun started 2 tasks but none of them joined an MPI job: use srun --mpi=pmix \(see DISTRIBUTED in dp-train\(1\)\)" \
	"... with the fix"
ok test ! -e p.st "... nothing written"
run in_ns timeout 120 srun --mpi=pmi2 -n 2 dp-train "${A[@]}" -o "$T/p.st"
isnt "$rc" 0 "srun --mpi=pmi2 (Debian's Open MPI speaks PMIx only): fails"
ok test ! -e p.st "... nothing written"

# a long job: scancel, then a task killed
long() {
	rm -f long.log ck.st
	in_ns timeout 120 srun --mpi=pmix -n 2 -J "dpt-$1" dp-train "${A[@]}" --epochs 100000 \
		--log-every 10 --log "$T/long.log" --checkpoint-every 20 --checkpoint "$T/ck.st" \
		-o "$T/never.st" >long.out 2>long.err </dev/null &
	job=$!
	for i in $(seq 600); do # 60 s: the job before may still be completing
		[ -s ck.st ] && return 0
		sleep 0.1
	done
	return 1
}
# the job's processes named COMM (in the namespace: the test's own)
tasks() {
	local p
	for p in $(ip netns pids "$NS"); do
		[ "$(cat "/proc/$p/comm" 2>/dev/null)" = "$1" ] && echo "$p"
	done
}
idle() {
	local i
	for i in $(seq 300); do
		[ -z "$(in_ns squeue -h 2>/dev/null)" ] && [ -z "$(tasks dp-train)" ] && return 0
		sleep 0.1
	done
	return 1
}
ok long cancel "a long job under srun trains and checkpoints"
jid=$(in_ns squeue -h -n dpt-cancel -o %i)
ok test -n "$jid" "... squeue shows it"
in_ns scancel "$jid"
wait "$job"
rc=$?
ok test "$rc" != 0 -a "$rc" != 124 "scancel: srun ends, failed, before its time limit (exit $rc)"
like "$(cat long.err)" "STEP $jid.0 ON dpt-node CANCELLED" "... Slurm says the step was cancelled"
ok idle "... no job left, no dp-train running"
ok $PY -c "import sys; sys.path.insert(0, '$DP_SRC/tests'); from torch_ref import load_checkpoint; load_checkpoint('ck.st')" \
	"... the last periodic checkpoint is whole"
ok test ! -e never.st "... no final checkpoint"
is "$(ls -A | grep -c '\.tmp\.')" 0 "... no temporary file left"

ok long kill "a long job again"
victim=
for p in $(tasks dp-train); do
	tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx SLURM_PROCID=1 && victim=$p
done
ok test -n "$victim" "... task 1 found"
[ -n "$victim" ] && kill -9 "$victim"
wait "$job"
rc=$?
ok test "$rc" != 0 -a "$rc" != 124 "task 1 killed: srun ends, failed, before its time limit (exit $rc)"
like "$(cat long.err)" "task 1: Killed" "... srun names the task"
ok idle "... no job left, no dp-train running"

slurm_stop
is "$(ip netns pids "$NS" 2>/dev/null | wc -l)" 0 "slurmctld, slurmd and munged stopped"
done_testing
