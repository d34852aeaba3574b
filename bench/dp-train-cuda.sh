#!/bin/sh
# bench/dp-train-cuda.sh - dp-train's CUDA build against PyTorch eager on
# the same GPU: training samples/s of forward + backward + Adam (lr 1e-3),
# random MNIST-shaped data, for the seed CNN (Keras MNIST: conv 32, conv 64,
# maxpool, dropouts, dense 128, dense 10) and the MLP 784-1024-1024-10, at
# batch 128 and 1024, in fp32 and bf16 (tensor cores, fp32 master weights:
# PyTorch under torch.autocast(bfloat16)); the achieved TFLOP/s against the
# GPU's peak.
#
# Needs a GPU, a CUDA build (make BACKEND=cuda: build-cuda/bin/dp-train, or
# DP_TRAIN=...) and, for the peer, a PyTorch with CUDA (PY=..., default
# /usr/bin/python3; Debian's python3-torch is CPU-only).  Without a GPU or
# a CUDA build it says so and exits 0 (make bench runs it on any machine);
# without a CUDA PyTorch it reports dp-train's figures alone.
#
# dp-train runs end to end: uint8 records from a file (the page cache),
# decoded by DECODE_THREADS threads (--decode-threads; by default half the
# machine's cores, 1 to 8: bench/cuda.sh.inc says why that is fair; with
# none, one reader thread caps an H200's run near 290,000 samples/s, 4 near
# 830,000) into page-locked memory and copied to the GPU while the previous
# step runs; its rate is total samples / total time of its log intervals
# after the first (which holds the warm-up), as bench/dp-train.sh computes
# it.  Its first lines of output say how many decode threads ran and the
# input pipeline's own ceiling with them (the same data into a one-layer
# model): a rate near it is bound by decoding on the CPU, not by the GPU;
# CEILING_THREADS (e.g. "4 12") adds the ceiling at other thread counts.
# PyTorch keeps one batch resident on the GPU, runs 20 warm-up steps, then
# a timed loop closed by torch.cuda.synchronize(); TF32 is off in fp32
# (torch.backends.*.allow_tf32 = False, as dp-train's fp32), cuDNN picks
# its fastest algorithms (benchmark = True); one Python process a round
# runs every case (a CUDA PyTorch takes seconds to start).  Both sides
# alternate ROUNDS times (default 3): each round dp-train's cases, then
# PyTorch's; medians and the ratio are printed.  BATCHES (default "128
# 1024") picks the batch sizes.
# PROFILE=FILE: then a short dp-train run (20 steps) of each PROFILE_CASES
# case (model:batch:precision, default cnn:1024:fp32) with DP_CUDA_PROFILE,
# the GPU and host time of each kind of operation, appended to FILE after
# a header line and printed.
#
# Model FLOPs per sample (forward + backward, multiply-add = 2; no input
# gradient for the first layer):
#   CNN  conv1 2*32*9*676 (fwd, dW); conv2 2*64*288*576 (fwd, dW, dX);
#        dense 2*9216*128 and 2*128*10 (fwd, dW, dX):           71,565,312
#   MLP  3*2*(1024*1024 + 1024*10) + 2*2*784*1024:               9,564,160
# Peaks (dense, no sparsity) from the GPU's name, or PEAK_FP32 and
# PEAK_BF16 in TFLOP/s: H100/H200 SXM 67 and 989, H100 PCIe 51 and 756,
# A100 19.5 and 312, L40S 91.6 and 362.
set -eu
ROUNDS=${ROUNDS:-3}
PY=${PY:-/usr/bin/python3}
say() { echo "bench/dp-train-cuda.sh: $*"; }

. "$(dirname "$0")/cuda.sh.inc"

T=$(mktemp -d "${TMPDIR:-/tmp}/dpbench.XXXXXX")
trap 'rm -rf "$T"' EXIT INT TERM

GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$GPU" in
*H100*PCIe*) pf=51 pb=756 ;;
*H100* | *H200*) pf=67 pb=989 ;;
*A100*) pf=19.5 pb=312 ;;
*L40S*) pf=91.6 pb=362 ;;
*) pf=0 pb=0 ;;
esac
PEAK_FP32=${PEAK_FP32:-$pf}
PEAK_BF16=${PEAK_BF16:-$pb}
echo "GPU: $GPU (peak fp32 ${PEAK_FP32} TFLOP/s, bf16 ${PEAK_BF16} TFLOP/s dense; 0: unknown, set PEAK_FP32/PEAK_BF16)"
echo "dp-train: $DP_TRAIN"

cat > "$T/peer.py" <<'PYEOF'
import contextlib, sys, time, torch, torch.nn as nn
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.backends.cudnn.benchmark = True
dev = torch.device("cuda")

def rate(kind, B, prec, nb):
    """samples/s of nb timed steps after 20 of warm-up"""
    torch.manual_seed(0)
    if kind == "mlp":
        m = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, 10))
        x = torch.rand(B, 784)
    else:
        m = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Dropout(0.25), nn.Flatten(), nn.Linear(9216, 128),
                          nn.ReLU(), nn.Dropout(0.5), nn.Linear(128, 10))
        x = torch.rand(B, 1, 28, 28)
    m, x = m.to(dev), x.to(dev)
    y = torch.randint(0, 10, (B,), device=dev)
    opt = torch.optim.Adam(m.parameters(), 1e-3)
    lossf = nn.CrossEntropyLoss()
    ctx = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if prec == "bf16" else contextlib.nullcontext
    def step():
        opt.zero_grad(set_to_none=True)
        with ctx():
            loss = lossf(m(x), y)
        loss.backward()
        opt.step()
    for _ in range(20):
        step()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(nb):
        step()
    torch.cuda.synchronize()
    return nb * B / (time.perf_counter() - t)

# each argument a case, model:batch:precision; a line each: the case, samples/s (0: failed)
for c in sys.argv[1:]:
    kind, B, prec = c.split(":")
    try:
        r = rate(kind, int(B), prec, 200 * 128 // int(B) + 20)
    except Exception as e:
        print(f"peer.py: {c}: {e}", file=sys.stderr)
        r = 0
    print(c, f"{r:.0f}", flush=True)
PYEOF
if v=$($PY -c 'import torch, sys; print(torch.__version__, "CUDA", torch.version.cuda); sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null); then
	PEER=1
	echo "PyTorch: $v"
else
	PEER=0
	say "no PyTorch with CUDA at PY=$PY: dp-train's figures alone (PY=/path/to/python with a CUDA torch)"
fi
echo "decode threads: $DECODE_THREADS (dp-train --decode-threads; $CORES cores)"

# N (default 65536) samples: 8192 random ones written over and over (the
# tests' writer is pure Python: 65536 distinct records take it a minute)
$PY tests/mkexamples.py "$T/one.tfr" random --n 8192 --shape 1x28x28 --kind uint8 --seed 1
for _ in $(seq $(( (${N:-65536} + 8191) / 8192 ))); do cat "$T/one.tfr"; done > "$T/img.tfr"
CNN='conv:32:3,relu,conv:64:3,relu,maxpool:2,dropout:0.25,flatten,dense:128,relu,dropout:0.5,dense:10'
MLP='flatten,dense:1024,relu,dense:1024,relu,dense:10'

median() { tr ' ' '\n' | grep . | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

train() { # model batch precision threads epochs [option...]: dp-train's log in $T/log
	m=$1 B=$2 p=$3 dt=$4 ep=$5
	shift 5
	if ! $DP_TRAIN --train "$T/img.tfr" --decode-raw uint8 --scale 1/255 --input-shape 1x28x28 \
		--model "$m" --batch-size "$B" --precision "$p" --optimizer adam --lr 0.001 \
		--shuffle-buffer 0 --prefetch 4 --decode-threads "$dt" --epochs "$ep" \
		--log-every $(( 8192 / B )) -q "$@" > "$T/log" 2> "$T/err"; then
		say "dp-train failed: $(tail -5 "$T/err")" >&2
		return 1
	fi
}

ours() { # model batch precision [threads [epochs]]: samples/s after the first log interval (0: failed)
	train "$1" "$2" "$3" "${4:-$DECODE_THREADS}" "${5:-$(( $2 >= 1024 ? 3 : 1 ))}" || { echo 0; return; }
	r=$(sed -n 's/.*step=\([0-9]*\) .*samples_per_sec=\([0-9.]*\).*/\1 \2/p' "$T/log" |
		awk -v B="$2" 'NR > 1 && $2 > 0 { n = ($1 - last) * B; s += n; t += n / $2 }
			{ last = $1 } END { if (t > 0) printf "%.0f\n", s / t }')
	[ -n "$r" ] || say "too few log lines (N=${N:-65536} too small?)" >&2
	echo "${r:-0}"
}

model_of() { [ "$1" = cnn ] && echo "$CNN" || echo "$MLP"; }

# the ceiling: 10 epochs (a few tenths of a second at its rate)
for dt in $DECODE_THREADS ${CEILING_THREADS:-}; do
	[ "$dt" = "$DECODE_THREADS" ] && [ -n "${seen:-}" ] && continue
	seen=1
	echo "input pipeline ceiling (dense:10 on the GPU, --decode-threads $dt): $(ours flatten,dense:10 1024 fp32 "$dt" 10) samples/s"
done
CASES=
for prec in fp32 bf16; do
	for model in cnn mlp; do
		for B in ${BATCHES:-128 1024}; do
			CASES="$CASES $model:$B:$prec"
		done
	done
done
# each round: dp-train's cases, then one PyTorch process for them all
for _ in $(seq "$ROUNDS"); do
	for c in $CASES; do
		model=${c%%:*} rest=${c#*:}
		ours "$(model_of "$model")" "${rest%%:*}" "${rest#*:}" >> "$T/ours.$c"
	done
	if [ $PEER = 1 ]; then
		# shellcheck disable=SC2086 # the cases, a word each
		$PY "$T/peer.py" $CASES > "$T/peer" 2> "$T/perr" || tail -3 "$T/perr" >&2
		grep '^peer.py: ' "$T/perr" >&2 || true # a case that failed (its figure 0)
		for c in $CASES; do
			awk -v c="$c" '$1 == c {r = $2} END {print r + 0}' "$T/peer" >> "$T/peer.$c"
		done
	fi
done
for c in $CASES; do
	model=${c%%:*} rest=${c#*:}
	B=${rest%%:*} prec=${rest#*:}
	peak=$([ "$prec" = fp32 ] && echo "$PEAK_FP32" || echo "$PEAK_BF16")
	flops=$([ "$model" = mlp ] && echo 9564160 || echo 71565312)
	a=$(tr '\n' ' ' < "$T/ours.$c") b=
	[ $PEER = 0 ] || b=$(tr '\n' ' ' < "$T/peer.$c")
	ma=$(echo "$a" | median) mb=$(echo "$b" | median)
	awk -v m="$model" -v B="$B" -v p="$prec" -v a="$ma" -v b="${mb:-0}" -v f="$flops" -v pk="$peak" \
		-v ra=" ${a% }" -v rb=" ${b% }" 'BEGIN {
		t = a * f / 1e12
		printf "%s batch %d %s: dp-train %d samples/s (runs:%s) = %.1f TFLOP/s", m, B, p, a, ra, t
		if (pk > 0) printf " (%.1f%% of peak)", 100 * t / pk
		if (b > 0) printf "; PyTorch %d samples/s (runs:%s) = %.1f TFLOP/s; ratio %.2fx", b, rb, b * f / 1e12, a / b
		printf "\n"
	}'
done

# where the GPU time goes: 20 steps of each PROFILE_CASES case (the first 3
# left out by DP_CUDA_PROFILE: kernels loaded, algorithms chosen)
if [ -n "${PROFILE:-}" ]; then
	for c in ${PROFILE_CASES:-cnn:1024:fp32}; do
		model=${c%%:*} rest=${c#*:}
		B=${rest%%:*} prec=${rest#*:}
		rm -f "$T/prof"
		(export DP_CUDA_PROFILE="$T/prof"
			train "$(model_of "$model")" "$B" "$prec" "$DECODE_THREADS" 3 --max-steps 20) ||
			echo "(dp-train failed)" > "$T/prof"
		{
			echo "== bench/dp-train-cuda.sh: profile of the $model batch $B $prec (20 steps, DP_CUDA_PROFILE leaving out its first 3 syncs or waits; --decode-threads $DECODE_THREADS)"
			cat "$T/prof" 2>/dev/null || echo "(none written: dp-train failed, or not a CUDA build)"
		} | tee -a "$PROFILE"
	done
fi
