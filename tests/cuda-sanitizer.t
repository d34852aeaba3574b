#!/usr/bin/env bash
# compute-sanitizer finds nothing in the CUDA backend: memcheck (with leak
# checking), racecheck (shared memory of the block reductions), initcheck
# (reads of device memory never written) and synccheck, on a short dp-train
# run through every kind of layer, loss and optimizer; memcheck also on the
# GPU unit test (DP_SANITIZER_TOOLS: fewer tools).  Runs under make BACKEND=cuda check on a machine with a GPU
# and compute-sanitizer (CUDA toolkit); skips elsewhere.
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/cuda-lib.sh"
cd "$T"
need_cuda
CS=$(command -v compute-sanitizer || true)
for d in "${CUDA_HOME:-}" /usr/local/cuda; do
	[ -z "$CS" ] && [ -n "$d" ] && [ -x "$d/bin/compute-sanitizer" ] && CS="$d/bin/compute-sanitizer"
done
if [ -z "$CS" ]; then
	skip "compute-sanitizer not found (CUDA toolkit's bin, or set CUDA_HOME)"
	done_testing
fi

MK="$PY $DP_SRC/tests/mkexamples.py"
$MK img.tfr random --n 96 --shape 2x10x10 --classes 5 --seed 1
$MK reg.tfr random --n 96 --shape 2x10x10 --label-kind vector:3 --seed 2
M1=conv:6:3:same,batchnorm,relu,maxpool:2,conv:4:3:2:1,tanh,avgpool:2,dropout:0.3,flatten,dense:16,sigmoid,dense:5
M2=conv:4:3,relu,flatten,batchnorm,dense:8,tanh,dense:3
RUNS=("--train img.tfr --model $M1 --optimizer adam --val img.tfr"
	"--train reg.tfr --model $M2 --loss mse --optimizer sgd --momentum 0.9 --nesterov --precision bf16")
for tool in ${DP_SANITIZER_TOOLS:-memcheck racecheck initcheck synccheck}; do
	extra=
	[ $tool = memcheck ] && extra="--leak-check full"
	for i in 0 1; do
		# shellcheck disable=SC2086
		run "$CS" --tool $tool $extra --error-exitcode 9 dp-train ${RUNS[$i]} --input-shape 2x10x10 \
			--batch-size 32 --epochs 1 --prefetch 1 -q -o out$i.safetensors
		is "$rc" 0 "$tool: dp-train run $((i + 1)) exits 0"
		like "$out$err" "ERROR SUMMARY: 0 errors" "$tool: dp-train run $((i + 1)): no errors"
		[ "$rc" = 0 ] || printf '%s\n' "$out$err" | grep -m4 -A8 '^========= [A-Z]' | head -40 | sed 's/^/#   /'
	done
done
if [ -x "$DP_BUILD/tests/cuda" ]; then
	run "$CS" --tool memcheck --error-exitcode 9 "$DP_BUILD/tests/cuda"
	is "$rc" 0 "memcheck: the GPU unit test exits 0"
	like "$out$err" "ERROR SUMMARY: 0 errors" "memcheck: the GPU unit test: no errors"
	[ "$rc" = 0 ] || printf '%s\n' "$out$err" | grep -v '^ok ' | grep -m4 -A8 '^========= [A-Z]' | head -40 | sed 's/^/#   /'
else
	skip "$DP_BUILD/tests/cuda not built"
fi
done_testing
