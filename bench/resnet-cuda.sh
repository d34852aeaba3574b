#!/bin/sh
# bench/resnet-cuda.sh - dp-train's CUDA build against PyTorch eager on the
# same GPU, on torchvision's ResNets at 3x224x224: training samples/s of
# forward + backward + SGD (momentum 0.9, lr 0.1), 1000 classes, random
# data.  Cases (CASES, default all): resnet50 at batch 256 in bf16 and in
# tf32, resnet18 at batch 256 in bf16.
#
# PyTorch runs as its users run it fastest in eager mode: channels_last
# model and input, cudnn.benchmark, bf16 under torch.autocast (fp32 master
# weights), tf32 through allow_tf32; one batch resident on the GPU, WARM (5)
# warm-up steps, STEPS (30) timed steps closed by torch.cuda.synchronize().
# dp-train runs end to end from uint8 records (decoded by DECODE_THREADS
# threads, by default half the machine's cores, 1 to 8: bench/cuda.sh.inc
# says why; staged through page-locked memory while the previous step
# runs), its rate as total samples / total time of its log intervals after
# the first (which holds the warm-up), as bench/dp-train.sh computes it.
# Both sides alternate ROUNDS (1) times; medians and the ratio are
# printed, with the GPU's busy fraction over dp-train's timed steps
# (nvidia-smi's utilization.gpu sampled every 100 ms) and the seconds
# dp-train's steps waited for input (its notes' "waited S s for input", all
# epochs); a line after each gives the wall seconds of either side
# (start-up included: what a time box must allow).
# PROFILE=FILE: then one more short dp-train run (12 steps) of each
# PROFILE_CASES case (default: the first of CASES) with DP_CUDA_PROFILE,
# the GPU and host time of each kind of operation, appended to FILE after
# a header line and printed.
#
# Needs a GPU, a CUDA build (DP_TRAIN, else build-cuda/bin/dp-train or the
# dp-train on PATH) and a PyTorch with CUDA (PY, default python3); says
# SKIP and exits 0 without them (make bench runs on any machine).
set -eu
ROUNDS=${ROUNDS:-1}
STEPS=${STEPS:-30}
WARM=${WARM:-5}
PY=${PY:-python3}
CASES=${CASES:-"resnet50:256:bf16 resnet50:256:tf32 resnet18:256:bf16"}
say() { echo "bench/resnet-cuda.sh: $*"; }

. "$(dirname "$0")/cuda.sh.inc"
if ! $PY -c 'import torch, torchvision, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
	say "SKIP: no PyTorch with CUDA and torchvision at PY=$PY"
	exit 0
fi
T=$(mktemp -d "${TMPDIR:-/tmp}/dpbench.XXXXXX")
trap 'kill $SMI 2>/dev/null; rm -rf "$T"' EXIT INT TERM
SMI=
echo "GPU: $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | head -1)"
echo "dp-train: $DP_TRAIN"
echo "PyTorch: $($PY -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version())')"
echo "decode threads: $DECODE_THREADS (dp-train --decode-threads; $CORES cores)"

cat > "$T/peer.py" <<'PYEOF'
import sys, time, torch, torchvision
model, B, prec, warm, steps = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
torch.backends.cudnn.benchmark = True
tf32 = prec == "tf32"
torch.backends.cuda.matmul.allow_tf32 = tf32
torch.backends.cudnn.allow_tf32 = tf32
torch.manual_seed(0)
dev = torch.device("cuda")
m = getattr(torchvision.models, model)(num_classes=1000).to(dev).to(memory_format=torch.channels_last)
x = torch.rand(B, 3, 224, 224, device=dev).to(memory_format=torch.channels_last)
y = torch.randint(0, 1000, (B,), device=dev)
opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
lossf = torch.nn.CrossEntropyLoss()
def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=prec == "bf16"):
        loss = lossf(m(x), y)
    loss.backward()
    opt.step()
for _ in range(warm):
    step()
torch.cuda.synchronize()
t = time.perf_counter()
for _ in range(steps):
    step()
torch.cuda.synchronize()
print(f"{steps * B / (time.perf_counter() - t):.1f}")
PYEOF

median() { tr ' ' '\n' | grep . | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

# the records: 64 random images written 16 times over (1024 records, 150
# MiB, read from the page cache; PyTorch reuses one batch)
$PY tests/mkexamples.py "$T/one.tfr" random --n 64 --shape 3x224x224 --kind uint8 --seed 1
for _ in $(seq 16); do cat "$T/one.tfr"; done > "$T/img.tfr"
rm "$T/one.tfr"
N=1024

EXTRA=${EXTRA:-}
ours() { # model batch precision: samples/s
	every=2
	ep=$(( (WARM + STEPS) * $2 / N + 1 ))
	nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 100 > "$T/util" 2>/dev/null &
	SMI=$!
	if ! $DP_TRAIN --train "$T/img.tfr" --decode-raw uint8 --scale 1/255 --input-shape 3x224x224 \
		--model "$1" --classes 1000 --batch-size "$2" --precision "$3" --optimizer sgd \
		--momentum 0.9 --lr 0.1 --shuffle-buffer 0 --prefetch 4 --decode-threads "$DECODE_THREADS" \
		--max-steps $((WARM + STEPS)) --epochs $ep --log-every $every $EXTRA -q > "$T/log" 2> "$T/err"; then
		kill $SMI 2>/dev/null; SMI=
		say "dp-train failed: $(tail -5 "$T/err")" >&2
		echo 0
		return
	fi
	kill $SMI 2>/dev/null; SMI=
	# GPU busy: the samples between the first and last tenth of the run
	awk '{v[NR] = $1} END {a = int(NR / 10); b = NR - a; for (i = a + 1; i <= b; i++) {s += v[i]; n++}
		if (n) printf "%.0f\n", s / n}' "$T/util" > "$T/busy"
	# its notes: "epoch E: waited S s for input (P% of T s)"
	wait_s=$(sed -n 's/.*waited \([0-9.]*\) s for input (\([0-9.]*\)% of.*/\1/p' "$T/err" | awk '{s += $1} END {if (NR) printf "%.2f", s}')
	echo "${wait_s:-n/a}" > "$T/wait"
	sed -n 's/.*step=\([0-9]*\) .*samples_per_sec=\([0-9.]*\).*/\1 \2/p' "$T/log" |
		awk -v B="$2" 'NR > 1 && $2 > 0 { n = ($1 - last) * B; s += n; t += n / $2 }
			{ last = $1 } END { if (t > 0) printf "%.1f\n", s / t; else print 0 }'
}

for c in $CASES; do
	model=${c%%:*}; rest=${c#*:}; B=${rest%%:*}; prec=${rest#*:}
	a="" b="" busy="" wt="" sa="" sb=""
	for _ in $(seq "$ROUNDS"); do
		t0=$(date +%s)
		a="$a $(ours "$model" "$B" "$prec")"
		t1=$(date +%s)
		busy="$busy $(cat "$T/busy" 2>/dev/null)"
		wt="$wt $(cat "$T/wait" 2>/dev/null)"
		b="$b $($PY "$T/peer.py" "$model" "$B" "$prec" "$WARM" "$STEPS" 2>"$T/perr" || { tail -3 "$T/perr" >&2; echo 0; })"
		sa="$sa $((t1 - t0))" sb="$sb $(($(date +%s) - t1))"
	done
	ma=$(echo "$a" | median)
	mb=$(echo "$b" | median)
	awk -v c="$model batch $B $prec" -v a="$ma" -v b="$mb" -v ra="$a" -v rb="$b" -v u="$busy" -v w="$wt" 'BEGIN {
		printf "%s: dp-train %.0f samples/s (runs:%s; GPU busy %%:%s; input wait s:%s); PyTorch %.0f samples/s (runs:%s)", c, a, ra, u, w, b, rb
		if (b > 0) printf "; ratio %.2fx", a / b
		printf "\n"
	}'
	echo "$model batch $B $prec: wall seconds, start-up included: dp-train$sa, PyTorch$sb"
done
# where the GPU time goes: 12 steps of each PROFILE_CASES case (the first 3
# left out by DP_CUDA_PROFILE: kernels loaded, algorithms chosen)
if [ -n "${PROFILE:-}" ]; then
	for c in ${PROFILE_CASES:-${CASES%% *}}; do
		model=${c%%:*}; rest=${c#*:}; B=${rest%%:*}; prec=${rest#*:}
		rm -f "$T/prof"
		(export DP_CUDA_PROFILE="$T/prof"; STEPS=10; WARM=2; ours "$model" "$B" "$prec" > /dev/null)
		{
			echo "== bench/resnet-cuda.sh: profile of $model batch $B $prec (12 steps, DP_CUDA_PROFILE leaving out its first 3 syncs or waits; --decode-threads $DECODE_THREADS)"
			cat "$T/prof" 2>/dev/null || echo "(none written: dp-train failed, or not a CUDA build)"
		} | tee -a "$PROFILE"
	done
fi
