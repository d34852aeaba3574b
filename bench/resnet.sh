#!/bin/sh
# bench/resnet.sh - residual networks on the CPU against PyTorch (Debian
# python3-torch, python3-torchvision), issue 15:
#   1. resnet20 (CIFAR form) at 1x28x28, batch 128, 1 thread: training
#      samples/s (forward + backward + SGD Nesterov update); target >= 1.3x
#   2. resnet18 (torchvision's) at 3x224x224, batch 32, 2 threads; target
#      >= 1.0x; with dp-train's peak RSS and PyTorch's
#   3. resnet20 under `mpirun -np 2` (1 thread, batch 128 a rank) against
#      `mpirun -np 1`: target >= 1.8x
#   4. where the time goes: each convolution shape of both networks through
#      the CPU backend against plain cblas_sgemm of the same M, N, K
#      (bench/convshapes.c) and PyTorch's convolution of the same shape
#      (oneDNN), and dp-train's resnet18 profile by layer kind (perf, when
#      installed) next to PyTorch's (torch.profiler)
#
# The method is bench/dp-train.sh's: dp-train trains end to end on a
# TFRecord file of random float records with --prefetch 0 (reading shares
# its threads); PyTorch trains on one random tensor after 2 warm-up steps,
# under OPENBLAS_NUM_THREADS, OMP_NUM_THREADS and MKL_NUM_THREADS set to the
# thread count as well as torch.set_num_threads.  Both rates are total
# samples / total time with the warm-up excluded (dp-train: its log
# intervals after the first).  CPU use is printed for each side (CPU time
# / wall time: 100% is one core busy); on a machine shared with other work
# the wall-clock rates move with the load, so the rate per CPU-second is
# printed too.  Each side runs ROUNDS times (default 3), alternating;
# medians and ratios are printed.
set -eu
ROUNDS=${ROUNDS:-3}
PY=/usr/bin/python3
DP_TRAIN=${DP_TRAIN:-dp-train}
BUILD=${DP_BUILD:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN="mpirun --mca btl self,vader --bind-to none"
T=$(mktemp -d "${TMPDIR:-/tmp}/dpbench.XXXXXX")
trap 'rm -rf "$T"' EXIT INT TERM

if ! $PY -c 'import torch, torchvision' 2>/dev/null; then
	echo "bench/resnet.sh: SKIP: python3-torch or python3-torchvision is not installed"
	exit 0
fi
cc -O2 -I lib -o "$T/convshapes" bench/convshapes.c -L"$BUILD" -ldp -Wl,-rpath,"$(cd "$BUILD" && pwd)" \
	$(pkg-config --cflags --libs openblas) -lm
$PY tests/mkexamples.py "$T/r20.tfrecord" random --n 1280 --shape 1x28x28 --seed 1
$PY tests/mkexamples.py "$T/r20-1.tfrecord" random --n 1280 --shape 1x28x28 --seed 2
$PY tests/mkexamples.py "$T/r18.tfrecord" random --n 64 --shape 3x224x224 --seed 1

cat > "$T/peer.py" <<'PYEOF'
import sys, time, resource, torch, torch.nn as nn, torch.nn.functional as F
kind, threads, B, nb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
prof = len(sys.argv) > 5
torch.set_num_threads(threads); torch.manual_seed(0)
if kind == "resnet20": # ../shared/peers/torch_resnet.py's model, as the tests have it
    sys.path.insert(0, "tests")
    from resnet_ref import resnet20
    m = resnet20(1); x = torch.randn(B, 1, 28, 28)
else:
    import torchvision
    m = torchvision.models.resnet18(weights=None, num_classes=10); x = torch.randn(B, 3, 224, 224)
m.train(); y = torch.randint(0, 10, (B,)); lossf = nn.CrossEntropyLoss()
opt = torch.optim.SGD(m.parameters(), 0.1, momentum=0.9, nesterov=True)
def step():
    opt.zero_grad(); lossf(m(x), y).backward(); opt.step()
for _ in range(2): step()
if prof: # seconds a step by operator kind
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CPU]) as p:
        for _ in range(nb): step()
    kinds = {}
    for e in p.key_averages():
        n = e.key
        k = ("conv" if "conv" in n else "batchnorm" if "batch_norm" in n else
             "relu" if "relu" in n or "threshold" in n or "clamp" in n else
             "add" if n in ("aten::add", "aten::add_") else
             "pool" if "pool" in n else "other")
        kinds[k] = kinds.get(k, 0) + e.self_cpu_time_total / 1e6 / nb
    tot = sum(kinds.values())
    print(" ".join(f"{k}={v:.3f}s/{100 * v / tot:.0f}%" for k, v in sorted(kinds.items(), key=lambda a: -a[1])))
    sys.exit(0)
t, c = time.perf_counter(), time.process_time()
for _ in range(nb): step()
t, c = time.perf_counter() - t, time.process_time() - c
print(f"{nb * B / t:.1f} {100 * c / t:.0f} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}")
PYEOF

# PyTorch's convolutions (oneDNN) for bench/convshapes.c's shapes, in its
# order: forward and backward ms a shape (best of ROUNDS; CPU time on one
# thread, wall clock on more), then the total weighted by uses
cat > "$T/shapes.py" <<'PYEOF'
import sys, time, torch, torch.nn.functional as F
net, threads, n, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(threads)
# uses, c, h, k, kernel, stride, pad
r20 = [(1, 1, 28, 16, 3, 1, 1), (6, 16, 28, 16, 3, 1, 1), (1, 16, 28, 32, 3, 2, 1), (5, 32, 14, 32, 3, 1, 1),
       (1, 16, 28, 32, 1, 2, 0), (1, 32, 14, 64, 3, 2, 1), (5, 64, 7, 64, 3, 1, 1), (1, 32, 14, 64, 1, 2, 0)]
r18 = [(1, 3, 224, 64, 7, 2, 3), (4, 64, 56, 64, 3, 1, 1), (1, 64, 56, 128, 3, 2, 1), (3, 128, 28, 128, 3, 1, 1),
       (1, 64, 56, 128, 1, 2, 0), (1, 128, 28, 256, 3, 2, 1), (3, 256, 14, 256, 3, 1, 1), (1, 128, 28, 256, 1, 2, 0),
       (1, 256, 14, 512, 3, 2, 1), (3, 512, 7, 512, 3, 1, 1), (1, 256, 14, 512, 1, 2, 0)]
clock = time.process_time if threads == 1 else time.perf_counter
tot = 0
for i, (uses, c, h, k, kk, s, p) in enumerate(r18 if net == "resnet18" else r20):
    x = torch.randn(n, c, h, h, requires_grad=i > 0); w = torch.randn(k, c, kk, kk, requires_grad=True)
    bf = bb = 1e9
    for r in range(rounds + 1):
        t0 = clock(); y = F.conv2d(x, w, None, s, p); t1 = clock()
        y.backward(torch.ones_like(y)); t2 = clock()
        if r: bf, bb = min(bf, t1 - t0), min(bb, t2 - t1)
    print(f"{1e3 * bf:.2f} {1e3 * bb:.2f}")
    tot += uses * (bf + bb)
print(f"{1e3 * tot:.1f}")
PYEOF

# ours NP DATA MODEL SHAPE BATCH THREADS LOG_EVERY EPOCHS: "samples/s CPU%
# peakRSS_KiB" (rank 0's log: the job's samples; CPU and RSS of mpirun's
# tree for NP > 1, of dp-train for NP 1)
ours() {
	o_np=$1
	shift
	launch=
	[ "$o_np" = 1 ] || launch="$MPIRUN -np $o_np"
	/usr/bin/time -f '%P %M' -o "$T/cpu" $launch $DP_TRAIN --train "$1" --model "$2" \
		--input-shape "$3" --batch-size "$4" --threads "$5" --log-every "$6" --epochs "$7" \
		--optimizer sgd --lr 0.1 --momentum 0.9 --nesterov --prefetch 0 --shuffle-buffer 0 \
		--classes 10 -q |
		sed -n 's/.*step=\([0-9]*\) .*samples_per_sec=\([0-9.]*\).*/\1 \2/p' |
		awk -v b="$4" -v np="$o_np" 'NR > 1 { n = ($1 - last) * b * np; s += n; t += n / $2 }
			{ last = $1 } END { printf "%.1f ", s / t }'
	tr -d % < "$T/cpu"
}
peer() { # model threads batch steps
	OPENBLAS_NUM_THREADS=$2 OMP_NUM_THREADS=$2 MKL_NUM_THREADS=$2 $PY "$T/peer.py" "$@"
}
# shapes NET THREADS BATCH ROUNDS: convshapes' table with PyTorch's times
# and the ratio (PyTorch's time / dp-train's: above 1, dp-train is faster)
shapes() {
	"$T/convshapes" "$@" > "$T/cs.txt"
	OPENBLAS_NUM_THREADS=$2 OMP_NUM_THREADS=$2 MKL_NUM_THREADS=$2 $PY "$T/shapes.py" "$@" > "$T/ps.txt"
	awk 'NR == FNR { pf[FNR] = $1; pb[FNR] = $2; last = FNR; next }
		FNR == 1 { print; next }
		FNR == 2 { printf "%s %8s %8s %6s\n", $0, "torch_f", "torch_b", "ratio"; next }
		/^all/ { printf "%s %17.1f %6.2fx\n", $0, pf[last], pf[last] / $(NF - 3); next }
		{ i = FNR - 2; printf "%s %8.2f %8.2f %5.2fx\n", $0, pf[i], pb[i],
			(pf[i] + pb[i]) / ($(NF - 5) + $(NF - 4)) }' "$T/ps.txt" "$T/cs.txt"
}
median() { tr ' ' '\n' | grep . | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "load average before: $(cut -d" " -f1-3 /proc/loadavg) on $(nproc) cores (above 1: other work ran beside these figures)"

# compare: runs $ours_cmd and $peer_cmd ROUNDS times, alternating, and prints
# $cmp_name's medians; the median peak RSS of each side goes to $T/rss-*
compare() {
	a= b= ca= cb= ra= rb= ma= mb=
	for r in $(seq "$ROUNDS"); do
		set -- $(eval "$ours_cmd") $(eval "$peer_cmd")
		a="$a $1" ca="$ca $2%" ma="$ma $3" b="$b $4" cb="$cb $5%" mb="$mb $6"
		ra="$ra $(echo "$1 $2" | awk '{ printf "%.1f", $1 * 100 / $2 }')"
		rb="$rb $(echo "$4 $5" | awk '{ printf "%.1f", $1 * 100 / $2 }')"
	done
	awk -v n="$cmp_name" -v a="$(echo "$a" | median)" -v b="$(echo "$b" | median)" \
		-v pa="$(echo "$ra" | median)" -v pb="$(echo "$rb" | median)" -v ra="$a" -v rb="$b" \
		-v ca="$ca" -v cb="$cb" 'BEGIN {
		printf "%s: dp-train %.1f samples/s (runs:%s; CPU%s), PyTorch %.1f samples/s (runs:%s; CPU%s), ratio %.2fx\n", n, a, ra, ca, b, rb, cb, a / b
		printf "%s: per CPU-second: dp-train %.1f, PyTorch %.1f samples, ratio %.2fx\n", n, pa, pb, pa / pb
	}'
	echo "$ma" | median > "$T/rss-ours"
	echo "$mb" | median > "$T/rss-peer"
}

cmp_name="resnet20 1x28x28 batch 128, 1 thread"
ours_cmd='ours 1 "$T/r20.tfrecord" resnet20 1x28x28 128 1 2 2'
peer_cmd='peer resnet20 1 128 8'
compare

cmp_name="resnet18 3x224x224 batch 32, 2 threads"
ours_cmd='ours 1 "$T/r18.tfrecord" resnet18 3x224x224 32 2 1 3'
peer_cmd='peer resnet18 2 32 4'
compare
echo "resnet18 batch 32 training, peak RSS: dp-train $(awk '{ printf "%.0f", $1 / 1024 }' "$T/rss-ours") MiB, PyTorch $(awk '{ printf "%.0f", $1 / 1024 }' "$T/rss-peer") MiB (the whole python3 process)"

if command -v mpirun >/dev/null 2>&1; then
	cat "$T/r20.tfrecord" "$T/r20-1.tfrecord" > "$T/r20-2.tfrecord"
	a= b=
	for r in $(seq "$ROUNDS"); do
		set -- $(ours 1 "$T/r20.tfrecord" resnet20 1x28x28 128 1 2 2) \
			$(ours 2 "$T/r20-2.tfrecord" resnet20 1x28x28 128 1 2 2)
		a="$a $1" b="$b $4"
	done
	awk -v a="$(echo "$a" | median)" -v b="$(echo "$b" | median)" -v ra="$a" -v rb="$b" 'BEGIN {
		printf "resnet20 mpirun -np 2 vs -np 1 (1 thread, batch 128 a rank): np=1 %.1f samples/s (runs:%s), np=2 %.1f (runs:%s), ratio %.2fx\n", a, ra, b, rb, b / a }'
else
	echo "resnet20 np=2 vs np=1: SKIP: mpirun is not installed"
fi

shapes resnet20 1 128 3
shapes resnet18 2 32 2

echo "PyTorch resnet18 step by kind (torch.profiler, self CPU time): $(peer resnet18 2 32 2 profile)"
if command -v perf >/dev/null 2>&1 &&
	perf record -q -o "$T/perf.data" $DP_TRAIN --train "$T/r18.tfrecord" --model resnet18 \
		--input-shape 3x224x224 --batch-size 32 --threads 2 --epochs 2 --prefetch 0 \
		--shuffle-buffer 0 --classes 10 --optimizer sgd --lr 0.1 --momentum 0.9 --nesterov \
		-q > /dev/null 2>&1; then
	# symbols to layer kinds (the CPU backend's function names)
	perf report -i "$T/perf.data" --no-children --sort symbol -g none -q 2>/dev/null |
		awk '$2 ~ /^\[/ { p = $1; sub(/%/, "", p); s = $3; k = "other"
		if (s ~ /sgemm|gemm/) k = "conv-sgemm"
		else if (s ~ /im2col|col2im|wino|conv|_planes/) k = "conv-im2col/col2im/winograd"
		else if (s ~ /bnorm|plane_|bn_|chan_/) k = "batchnorm"
		else if (s ~ /cpu_add/) k = "add"
		else if (s ~ /act_|relu/) k = "relu"
		else if (s ~ /pool/) k = "pool"
		else if (s ~ /mem(set|move|cpy)/) k = "memset/memcpy"
		v[k] += p } END { for (k in v) printf "%s=%.0f%% ", k, v[k]; print "" }' |
		sed 's/^/dp-train resnet18 step by kind (perf, 2 epochs of 2 steps with start-up): /'
fi
