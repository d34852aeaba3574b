#!/usr/bin/env bash
# The math threads by default (issue 25): a process uses the CPUs it may run
# on, its share of the host's when the host runs several ranks (mpirun), in
# and out of the SageMaker entry, and its first note says how many and why;
# --threads and the setting DP_THREADS (which the other tests set to 1) win.
# The expected counts come from Python's os.sched_getaffinity and the
# cgroup's cpu.max, not from a figure of this machine.
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/mpi.sh"
cd "$T" || exit 1
unset DP_THREADS OMPI_COMM_WORLD_LOCAL_SIZE MPI_LOCALNRANKS SLURM_NTASKS_PER_NODE SM_HPS

cpus=$($PY -c '
import os
n = len(os.sched_getaffinity(0))
try:
    q, p = open("/sys/fs/cgroup/cpu.max").read().split()
    if q != "max":
        n = min(n, -(-int(q) // int(p)))
except (OSError, ValueError):
    pass
print(n)')
$PY "$DP_SRC/tests/mkexamples.py" v.tfr random --n 16 --shape 6 --classes 3 --seed 1 || exit 1
# the backend: OpenBLAS and its kernels, oneDNN where the build has it
CPU='cpu: OpenBLAS \([^)]*\)(, oneDNN [^,]*)?'
ARGS=(--train v.tfr --input-shape 6 --model dense:3 --epochs 1 -o m.st)

run dp-train "${ARGS[@]}"
is "$rc" 0 "dp-train without --threads"
want=$([ "$cpus" -gt 256 ] && echo 256 || echo "$cpus")
like "$err" "$CPU, $want threads? \\(the CPUs this rank may use, $cpus, or its share of the host's: 1 rank on it; --threads sets it\\)" \
	"one process: every CPU it may use ($cpus), said in the first note"
run dp-train "${ARGS[@]}" --threads 3
like "$err" "$CPU, 3 threads, single process" "--threads wins, and nothing to explain"
run env DP_THREADS=1 dp-train "${ARGS[@]}"
like "$err" "$CPU, 1 thread, single process" "DP_THREADS wins (the tests' one thread)"
run env OMPI_COMM_WORLD_LOCAL_SIZE=4 dp-train "${ARGS[@]}"
n=$((cpus / 4)); [ "$n" -lt 1 ] && n=1
like "$err" "$CPU, $n threads? \\(the CPUs this rank may use, $cpus, or its share of the host's: 4 ranks on it" \
	"a host running 4 ranks: a quarter of its CPUs each ($n)"

# under mpirun: each rank's share (Open MPI says how many ranks a host runs)
run mpi 2 dp-train "${ARGS[@]}"
is "$rc" 0 "mpirun -np 2 without --threads"
got=$(sed -n 's/.*cpu: .*, \([0-9]*\) threads\{0,1\} (the CPUs this rank may use.*2 ranks on it.*/\1/p' <<<"$err")
ok test -n "$got" -a "${got:-0}" -ge 1 -a "${got:-0}" -le "$(( cpus / 2 > 0 ? cpus / 2 : 1 ))" \
	"mpirun -np 2: each rank at most half the host's CPUs (${got:-none})"

# the SageMaker entry: the same default
R=$T/ml
mkdir -p "$R/input/config" "$R/input/data/train" "$R/model"
cp v.tfr "$R/input/data/train/"
echo '{"model": "dense:3", "input_shape": "6"}' >"$R/input/config/hyperparameters.json"
run dp-train --sagemaker="$R"
like "$rc:$err" "^0:.*$CPU, $want threads? \\(the CPUs this rank may use, $cpus" "--sagemaker: every CPU of the instance too"
# OpenBLAS's kernels: where it fell back to ones older than the CPU (0.3.21
# takes a Sapphire Rapids for a Prescott), dp-train starts again with
# OPENBLAS_CORETYPE naming those the CPU runs; a user's OPENBLAS_CORETYPE wins
OLD='Prescott|Core2|Penryn|Dunnington|Nehalem|Sandybridge|Atom|Nano|Katmai|Coppermine|Northwood|Banias|Athlon|Opteron|Opteron_SSE3|Barcelona|Bobcat|Bulldozer|Piledriver|Steamroller|Excavator'
run env -u OPENBLAS_CORETYPE dp-train "${ARGS[@]}" --threads 1
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
	unlike "$rc:$err" "cpu: OpenBLAS \\(($OLD) kernels\\)" "an AVX2 CPU runs OpenBLAS's AVX2 kernels or newer, whatever OpenBLAS took it for"
else
	skip "no AVX2 here: OpenBLAS's own choice stands"
fi
# started again, it keeps its name (ps, pgrep dp-train, a cluster's tools):
# a dp-train waiting to open a FIFO nobody writes
mkfifo never
env -u OPENBLAS_CORETYPE dp-train --train never --model dense:3 --input-shape 6 -q 2>/dev/null &
pid=$!
for _ in $(seq 50); do [ "$(readlink /proc/$pid/fd/0 2>/dev/null)" ] && [ "$(ps -o comm= -p $pid)" != env ] && break; sleep 0.1; done
sleep 0.5
is "$(ps -o comm= -p $pid)" dp-train "started again with OPENBLAS_CORETYPE: still named dp-train"
kill $pid 2>/dev/null; wait $pid 2>/dev/null
run env OPENBLAS_CORETYPE=Prescott dp-train "${ARGS[@]}" --threads 1
like "$rc:$err" "^0:.*cpu: OpenBLAS \\(Prescott kernels\\)" "OPENBLAS_CORETYPE set: it wins"
done_testing
