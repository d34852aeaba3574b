#!/usr/bin/env bash
# dp-train on the CUDA backend's own code, run on the CPU by the emulation
# of tests/cudaemu (no GPU needed): the same loss curve as the CPU backend
# from the same weights, a checkpoint that resumes on the CPU, and under a
# real mpirun -np 2 the host-staged path of a GPU build (gradients
# downloaded, summed with MPI, uploaded): both ranks end with identical
# weights and optimizer state, on the curve of one process with the same
# global batch.  The GPU itself is tests/cuda-*.t's business.
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/cuda-lib.sh"
. "$DP_SRC/tests/mpi.sh"
EMU="$DP_BUILD/tests/dp-train-cudaemu"
if [ ! -x "$EMU" ]; then
	skip "no $EMU (built by make check in a CPU build)"
	done_testing
fi
cd "$T"
MK="$PY $DP_SRC/tests/mkexamples.py"
$MK all.tfr random --n 192 --shape 1x8x8 --classes 4 --seed 1
CNN=conv:4:3,relu,maxpool:2,dropout:0.25,flatten,dense:16,relu,dropout:0.5,dense:4
COMMON=(--train all.tfr --model "$CNN" --input-shape 1x8x8 --shuffle-buffer 64 --seed 3
	--epochs 2 --log-every 1 --prefetch 1 --optimizer adam)

run "$EMU" "${COMMON[@]}" --batch-size 32 --log emu.log -o emu.st
is "$rc" 0 "one process on the emulated GPU"
like "$err" "cuda: GPU 0 of 1, CPU emulation" "the note names the (emulated) CUDA backend"
like "$err" "epoch 2: waited [0-9.]+ s for input \([0-9.]+% of [0-9.]+ s\)" \
	"on a GPU, each epoch's note says how long the steps waited for input"
run env DP_BACKEND=cpu "$EMU" "${COMMON[@]}" --batch-size 32 --log cpu.log -o cpu.st
is "$rc" 0 "the same binary on the CPU backend"
is "$(losses emu.log | wc -l)" 12 "12 updates logged"
ok curve_close emu.log cpu.log 1e-5 "the CUDA code's loss curve is the CPU's (within 1e-5)"
ok close emu.st cpu.st 1e-5 "and so are its weights"
run env DP_BACKEND=cpu "$EMU" --resume emu.st --train all.tfr --epochs 3 -q --log /dev/null -o res.st
is "$rc" 0 "its checkpoint resumes on the CPU backend"
# cuDNN's choices (emulated: tests/cudaemu/cudnn.h) recorded for --resume
meta() { $PY -c 'import json, struct, sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]
print(json.loads(f.read(n))["__metadata__"].get(sys.argv[2], ""))' "$@"; }
algos=$(meta emu.st conv_algos)
like "$algos" '^CPU emulation \(tests/cudaemu\)/cudnn [0-9]+/fp32\|32x1x8x8-4x3x3-s1x1-p0x0=[0-9],[0-9],[0-9]' \
	"the checkpoint records cuDNN's choice for each convolution shape, and for which GPU"
run "$EMU" --resume emu.st --train all.tfr --epochs 3 -q --log /dev/null -o res2.st
is "$rc:$(meta res2.st conv_algos)" "0:$algos" "resumed on the GPU, with the same choices"
# on a GPU, decoding threads by default: this rank's share of the CPUs less
# 2 (DP_THREADS says the share), the same bytes as none
run env DP_THREADS=6 "$EMU" "${COMMON[@]}" --batch-size 32 --log /dev/null -o dec.st
like "$err" "\(input decoded by 4 threads beside the reader, of this rank's share of the CPUs; --decode-threads sets it\)" \
	"a GPU run decodes on 4 threads of a share of 6 CPUs, and says so"
ok cmp -s dec.st emu.st "the same checkpoint as the reader alone"
run env DP_THREADS=6 "$EMU" "${COMMON[@]}" --batch-size 32 --log /dev/null --decode-threads 0
is "$rc" 0 "--decode-threads 0 on the emulated GPU"
unlike "$err" "input decoded by" "... the reader alone, as given"

# DP_CUDA_PROFILE: each step's calls counted once its loss is read (a
# step waits for its forward and loss alone, the backward still queued on
# a GPU), the first 3 steps left out
run env DP_CUDA_PROFILE=prof.txt "$EMU" "${COMMON[@]}" --batch-size 32 -q --log /dev/null
is "$rc" 0 "a profiled run"
is "$(head -1 prof.txt)" "kind calls gpu_ms share host_ms" "the profile's header"
is "$(awk '$1 == "convolution" && $2 ~ /^[0-9]/ { print $2 }' prof.txt)" 9 \
	"12 steps' forward convolutions, less the first 3"
is "$(awk '$1 == "convolution" && $2 == "backward" { print $3 }' prof.txt)" 9 "... and their backward"
like "$(tail -1 prof.txt)" '^total gpu_ms=[0-9.]+ host_ms=[0-9.]+ wall_ms=[0-9.]+ busy=[0-9.]+%$' \
	"the totals"

require "mpirun is not installed (apt-get install openmpi-bin)" have_mpirun
run mpi 2 "$EMU" "${COMMON[@]}" --batch-size 16 --log two.log --log-all-ranks -o two.st
is "$rc" 0 "mpirun -np 2 on the emulated GPU backend"
printf '%s\n' "$out" > two.ranks
like "$err" "gradients through host memory \(built without NCCL\)" "the host-staged path, and the note says so"
is "$(hashes two.log two.ranks | cut -d' ' -f1 | tr '\n' ' ')" "0 1 " "both ranks log their state hash"
is "$(hashes two.log two.ranks | cut -d' ' -f2 | sort -u | wc -l)" 1 \
	"both ranks end with identical weights and optimizer state"
ok curve_close two.log emu.log 1e-4 "the loss curve of one process with the same global batch (1e-4)"
ok close two.st emu.st 1e-4 "and its weights"
# --accumulate (the micro-batches' sum in device memory) and --clip-norm
# (the norm read back to the host): the CPU backend's result
run env DP_BACKEND=cpu "$EMU" "${COMMON[@]}" --batch-size 32 --clip-norm 0.05 -q -o cpuclip.st
run mpi 2 "$EMU" "${COMMON[@]}" --batch-size 8 --accumulate 2 --clip-norm 0.05 -q -o accclip.st
is "$rc" 0 "2 ranks x --accumulate 2 x 8 with --clip-norm on the emulated GPU backend"
ok close accclip.st cpuclip.st 1e-5 "= one CPU process of batch 32 with --clip-norm"
done_testing
