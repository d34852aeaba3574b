#!/usr/bin/env bash
# dp-train's CUDA build under a real mpirun: 2 ranks sharing one GPU go
# through host memory (NCCL refuses a shared GPU) and end with identical
# weights and optimizer state on both ranks, on the loss curve of one
# process with the same global batch; with 2 GPUs or more, the same with
# NCCL, and with DP_NCCL=0 the host path again.  Runs under make
# BACKEND=cuda check on a machine with a GPU and Open MPI; skips elsewhere.
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/cuda-lib.sh"
. "$DP_SRC/tests/mpi.sh"
cd "$T"
need_cuda
require "mpirun is not installed (apt-get install openmpi-bin)" have_mpirun

MK="$PY $DP_SRC/tests/mkexamples.py"
$MK all.tfr random --n 512 --shape 1x12x12 --classes 10 --seed 1
CNN=conv:8:3,relu,maxpool:2,dropout:0.25,flatten,dense:32,relu,dropout:0.5,dense:10
# (no batchnorm: its statistics are per rank, so ranks would not match one process)
COMMON=(--train all.tfr --model "$CNN" --input-shape 1x12x12 --shuffle-buffer 64 --seed 3
	--epochs 2 --log-every 1 --prefetch 1 --optimizer adam)

run dp-train "${COMMON[@]}" --batch-size 64 --log one.log -o one.st
is "$rc" 0 "one process on the GPU"

# two ranks, one GPU: host memory and MPI
run mpi 2 dp-train "${COMMON[@]}" --batch-size 32 \
	--gpu 0 --log shared.log --log-all-ranks -o shared.st
is "$rc" 0 "mpirun -np 2 on one GPU trains"
printf '%s\n' "$out" > shared.ranks
like "$err" "gradients through host memory \(ranks share a GPU\)" "ranks sharing a GPU: through host memory"
is "$(hashes shared.log shared.ranks | cut -d' ' -f1 | tr '\n' ' ')" "0 1 " "both ranks log their state hash"
is "$(hashes shared.log shared.ranks | cut -d' ' -f2 | sort -u | wc -l)" 1 \
	"both ranks end with identical weights and optimizer state"
ok curve_close shared.log one.log "the loss curve of one process with the same global batch"
ok close shared.st one.st 1e-3 "and its weights"

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c GPU)
if [ "$ngpu" -ge 2 ]; then
	for how in nccl host; do
		envs=()
		[ $how = host ] && envs=(-x DP_NCCL=0)
		run mpi 2 "${envs[@]}" dp-train "${COMMON[@]}" --batch-size 32 --log $how.log \
			--log-all-ranks -o $how.st
		is "$rc" 0 "$how: mpirun -np 2 on 2 GPUs trains"
		printf '%s\n' "$out" > $how.ranks
		if [ $how = nccl ]; then
			if grep -q "gradients through host memory (built without NCCL)" <<<"$err"; then
				skip "this build has no NCCL"
				continue
			fi
			like "$err" "gradients by NCCL [0-9]" "2 GPUs: gradients by NCCL"
		else
			like "$err" "gradients through host memory \(DP_NCCL=0\)" "DP_NCCL=0: through host memory"
		fi
		is "$(hashes $how.log $how.ranks | cut -d' ' -f2 | sort -u | wc -l)" 1 \
			"$how: both ranks end identical"
		ok curve_close $how.log one.log "$how: the loss curve of one process"
	done
else
	skip "one GPU: NCCL across GPUs not checked"
fi
done_testing
