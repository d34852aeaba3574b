#!/usr/bin/env bash
# The CUDA build compiles and links, so that it cannot rot where CI has nvcc
# but no GPU: make BACKEND=cuda (every program, libdp, the unit tests) into
# a directory of its own under the build (CUDA_ARCH=90 unless set: one
# architecture keeps it quick), what it says it found, the binaries linked
# against cuBLAS, and what they do here: on a machine without a GPU,
# dp-train stops with "no CUDA device", and the GPU unit test skips; with
# one, both run.  Skips only when there is no nvcc at all.
. "${DP_SRC:-.}/tests/lib.sh"

home=${CUDA_HOME:-${CUDA_PATH:-}}
if [ -z "$home" ]; then
	if [ -x /usr/local/cuda/bin/nvcc ]; then
		home=/usr/local/cuda
	elif command -v nvcc >/dev/null; then
		home=$(dirname "$(dirname "$(command -v nvcc)")")
	fi
fi
if [ -z "$home" ] || [ ! -x "$home/bin/nvcc" ]; then
	skip "no nvcc (CUDA toolkit not installed; set CUDA_HOME): the CUDA build is not checked"
	done_testing
fi

B="$DP_BUILD/cuda-check"
mk() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -C "$DP_SRC" --no-print-directory "$@"; }

run mk BACKEND=cuda CUDA_HOME="$home" O="$B" CUDA_ARCH="${CUDA_ARCH:-90}" -j2 check-build
is "$rc" 0 "make BACKEND=cuda builds (into $(basename "$B"))"
[ "$rc" = 0 ] || printf '%s\n' "$err" | tail -20 | sed 's/^/#   /'
like "$out" "dptools: ✓ nvcc [0-9.]+ \($home/bin/nvcc\): sm_" "it says which nvcc and architectures"
like "$out" "dptools: ✓ cuBLAS \(" "it says where cuBLAS is"
like "$out" "dptools: (✓ NCCL [0-9]|✗ NCCL not found)" "it says whether NCCL is there"
like "$out" "dptools: (✓ cuDNN [0-9]+\.[0-9]+|✗ cuDNN not found)" "it says whether cuDNN is there"

missing=
for t in $(ls "$DP_SRC"/tools/*.c | grep -v "/cli.c\|/cli_input.c\|/sagemaker.c"); do
	p=$(basename "$t" .c)
	[ -x "$B/bin/$p" ] || missing="$missing $p"
done
is "$missing" "" "every program is built"
run ldd "$B/bin/dp-train"
like "$out" "libcublas\.so" "dp-train links cuBLAS"
like "$out" "libcudart\.so" "dp-train links the CUDA runtime"
unlike "$out" "not found" "every library it needs is found"
ok test -x "$B/tests/cuda" "the GPU unit test is built"
run "$B/bin/dp-train" --help
is "$rc" 0 "the CUDA dp-train starts (--help)"
like "$out" "--precision" "--help lists --precision"

# the same flags on a tiny dataset
cd "$T"
$PY "$DP_SRC/tests/mkexamples.py" small.tfr random --n 64 --shape 1x6x6 --classes 3 --seed 1
ARGS=(--train small.tfr --input-shape 1x6x6 --model conv:4:3,relu,flatten,dense:3
	--batch-size 16 --prefetch 0 --epochs 1)
if [ -e /dev/nvidia0 ] || { command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q GPU; }; then
	gpu=1
else
	gpu=0
fi
run "$B/bin/dp-train" "${ARGS[@]}" -o gpu.safetensors
if [ $gpu = 0 ]; then
	is "$rc" 1 "no GPU here: dp-train exits 1"
	like "$err" "^dp-train: no CUDA device: ." "no GPU here: dp-train: no CUDA device: ..."
	is "$(wc -l <"$T/.err")" 1 "no GPU here: that one line"
	ok test ! -e gpu.safetensors "no GPU here: no checkpoint"
else
	is "$rc" 0 "a GPU here: dp-train trains on it"
	like "$err" "cuda: GPU [0-9]+ of" "a GPU here: the note names it"
fi
run env DP_BACKEND=cpu "$B/bin/dp-train" "${ARGS[@]}" -o cpu.safetensors
is "$rc" 0 "DP_BACKEND=cpu: the CUDA build trains on the CPU"
like "$err" "cpu: OpenBLAS" "DP_BACKEND=cpu: the note says so"
run env DP_BACKEND=cpu "$B/bin/dp-train" "${ARGS[@]}" --precision bf16
is "$rc" 1 "--precision bf16 on the CPU backend: exit 1"
like "$err" "^dp-train: precision bf16: the cpu backend computes in fp32 only" \
	"--precision bf16 on the CPU backend: a clear message"
run env DP_BACKEND=tpu "$B/bin/dp-train" "${ARGS[@]}"
like "$err" "^dp-train: DP_BACKEND=tpu: not in this build \(it has cuda, cpu\)" \
	"DP_BACKEND names a backend the build lacks: says which it has"

# the GPU unit test: runs where there is a GPU, skips here
run "$B/tests/cuda"
if [ $gpu = 0 ]; then
	like "$out" "^1\.\.0 # SKIP no CUDA device: " "the GPU unit test skips without a device"
	skip "no CUDA device: GPU checks of tests/unit/cuda.c not run (make BACKEND=cuda check on a GPU)"
else
	is "$rc" 0 "the GPU unit test passes ($(grep -c '^ok' <<<"$out") checks)"
	grep '^not ok' <<<"$out" | head -5 | sed 's/^/#   /'
fi

# what the Makefile says when things are missing
run mk BACKEND=cuda CUDA_HOME=/nonexistent O="$T/none" -n all
isnt "$rc" 0 "CUDA_HOME without nvcc: make fails"
like "$err" "✗ nvcc not found at /nonexistent/bin/nvcc: install the CUDA toolkit or set CUDA_HOME" \
	"CUDA_HOME without nvcc: says so"
run mk BACKEND=cuda CUDA_HOME="$home" NCCL=0 O="$B" -n all
like "$out" "✗ NCCL off \(NCCL=0\)" "NCCL=0: says gradients go through host memory"
run mk BACKEND=metal -n all
isnt "$rc" 0 "BACKEND=metal: make fails"
like "$err" "BACKEND=metal: want cpu or cuda" "BACKEND=metal: says what it takes"
done_testing
