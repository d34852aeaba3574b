#!/bin/sh
# bench/recompute.sh - activation recomputation (dp-train --recompute,
# issue 28) on torchvision's resnet50 at 3x224x224: memory and step time
# with and without it, on the CPU, beside PyTorch doing the same with
# torch.utils.checkpoint (each residual block, and the stem and the head,
# checkpointed; Debian python3-torch, python3-torchvision).
#
# Targets: at most 0.5x the activation memory for at most 1.35x the step
# time.  dp-train's activation memory is what its model allocates for them
# (its note "activations A (K kept ..., S scratch)": exact bytes, on any
# backend); the peak RSS of each process is printed too (/usr/bin/time
# %M: parameters, optimizer, data and libraries included, so the ratio of
# RSS understates the ratio of activations).  Step time: training
# samples/s of forward + backward + SGD (momentum 0.9) on random records,
# dp-train's from the times its log lines (one a step, flushed) arrive,
# after the first (its samples_per_sec field was once rounded to whole
# samples, 0 for resnet50 on a CPU), PyTorch's over STEPS steps after one warm-up, the same thread
# count for both (THREADS, default 2: OPENBLAS_NUM_THREADS,
# OMP_NUM_THREADS, torch.set_num_threads).  Each of the four runs
# alternates ROUNDS (default 1) times; medians are printed.  BATCH
# (default 16), STEPS (default 3).
set -eu
ROUNDS=${ROUNDS:-1}
BATCH=${BATCH:-16}
STEPS=${STEPS:-3}
THREADS=${THREADS:-2}
PY=/usr/bin/python3
DP_TRAIN=${DP_TRAIN:-dp-train}
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
T=$(mktemp -d "${TMPDIR:-/tmp}/dpbench.XXXXXX")
trap 'rm -rf "$T"' EXIT INT TERM
say() { echo "bench/recompute.sh: $*"; }

PEER=1
if ! $PY -c 'import torch, torchvision' 2>/dev/null; then
	say "no python3-torch and python3-torchvision: dp-train's figures alone"
	PEER=0
fi
$PY tests/mkexamples.py "$T/d.tfrecord" random --n $((BATCH * (STEPS + 1))) --shape 3x224x224 \
	--classes 10 --seed 1

cat > "$T/peer.py" <<'PYEOF'
import sys, time, resource, torch, torch.nn as nn, torchvision
from torch.utils.checkpoint import checkpoint
threads, B, nb, ckpt = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
torch.set_num_threads(threads); torch.manual_seed(0)
m = torchvision.models.resnet50(weights=None, num_classes=10); m.train()
stem = nn.Sequential(m.conv1, m.bn1, m.relu, m.maxpool)
blocks = [b for l in (m.layer1, m.layer2, m.layer3, m.layer4) for b in l]
head = lambda h: m.fc(torch.flatten(m.avgpool(h), 1))
def fwd(x):
    if not ckpt:
        return m(x)
    h = checkpoint(stem, x, use_reentrant=False)
    for b in blocks:
        h = checkpoint(b, h, use_reentrant=False)
    return checkpoint(head, h, use_reentrant=False)
x = torch.randn(B, 3, 224, 224); y = torch.randint(0, 10, (B,)); lossf = nn.CrossEntropyLoss()
opt = torch.optim.SGD(m.parameters(), 0.1, momentum=0.9)
def step():
    opt.zero_grad(); lossf(fwd(x), y).backward(); opt.step()
step()
t = time.perf_counter()
for _ in range(nb): step()
t = time.perf_counter() - t
print(f"{nb * B / t:.2f} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}")
PYEOF

# ours [--recompute]: "samples/s peakRSS_KiB activations"
ours() {
	/usr/bin/time -f '%M' -o "$T/rss" $DP_TRAIN --train "$T/d.tfrecord" --model resnet50 \
		--classes 10 --input-shape 3x224x224 --batch-size "$BATCH" --threads "$THREADS" \
		--log-every 1 --epochs 1 --optimizer sgd --lr 0.1 --momentum 0.9 --prefetch 0 \
		--shuffle-buffer 0 "$@" 2> "$T/err" |
		while IFS= read -r l; do printf '%s %s\n' "$(date +%s.%N)" "$l"; done |
		sed -n 's/^\([0-9.]*\) .*step=\([0-9]*\) .*/\2 \1/p' |
		awk -v b="$BATCH" 'NR > 1 { s += ($1 - last) * b; t += $2 - lt }
			{ last = $1; lt = $2 } END { printf "%.2f ", (t > 0 ? s / t : 0) }'
	printf '%s ' "$(cat "$T/rss")"
	sed -n 's/.*activations \([0-9.]* [KMG]iB\) .*/\1/p' "$T/err" | tr -d ' '
}
peer() { # 0|1 (checkpoint)
	OPENBLAS_NUM_THREADS=$THREADS OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS \
		$PY "$T/peer.py" "$THREADS" "$BATCH" "$STEPS" "$1"
}
median() { tr ' ' '\n' | grep . | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "load average before: $(cut -d" " -f1-3 /proc/loadavg) on $(nproc) cores (above 1: other work ran beside these figures)"
say "resnet50 3x224x224, batch $BATCH, $THREADS threads, $STEPS timed steps"
$DP_TRAIN --model resnet50 --classes 10 --input-shape 3x224x224 --batch-size "$BATCH" --summary |
	sed -n 's/^memory/dp-train --summary: memory/p'
$DP_TRAIN --model resnet50 --classes 10 --input-shape 3x224x224 --batch-size "$BATCH" --summary \
	--recompute | sed -n 's/^memory/dp-train --summary --recompute: memory/p'
r0= r1= m0= m1= p0= p1= q0= q1=
for r in $(seq "$ROUNDS"); do
	set -- $(ours)
	r0="$r0 $1" m0="$m0 $2" a0=$3
	set -- $(ours --recompute)
	r1="$r1 $1" m1="$m1 $2" a1=$3
	if [ $PEER = 1 ]; then
		set -- $(peer 0)
		p0="$p0 $1" q0="$q0 $2"
		set -- $(peer 1)
		p1="$p1 $1" q1="$q1 $2"
	fi
done
awk -v a="$(echo "$r0" | median)" -v b="$(echo "$r1" | median)" -v ra="$r0" -v rb="$r1" \
	-v ma="$(echo "$m0" | median)" -v mb="$(echo "$m1" | median)" -v aa="$a0" -v ab="$a1" 'BEGIN {
	printf "dp-train: %.2f samples/s (runs:%s), --recompute %.2f (runs:%s): step time %.2fx\n", a, ra, b, rb, a / b
	printf "dp-train: activations %s, --recompute %s; peak RSS %.0f MiB, --recompute %.0f MiB (%.2fx)\n", aa, ab, ma / 1024, mb / 1024, mb / ma
}'
if [ $PEER = 1 ]; then
	awk -v a="$(echo "$p0" | median)" -v b="$(echo "$p1" | median)" -v ra="$p0" -v rb="$p1" \
		-v ma="$(echo "$q0" | median)" -v mb="$(echo "$q1" | median)" 'BEGIN {
		printf "PyTorch: %.2f samples/s (runs:%s), checkpointed %.2f (runs:%s): step time %.2fx\n", a, ra, b, rb, a / b
		printf "PyTorch: peak RSS %.0f MiB, checkpointed %.0f MiB (%.2fx; the whole python3 process)\n", ma / 1024, mb / 1024, mb / ma
	}'
fi
