#!/bin/sh
# bench/dp-train.sh - dp-train against PyTorch (Debian python3-torch): training
# samples/s of forward + backward + Adam update, one thread each, batch 128,
# random MNIST-shaped data, for the MLP 784-128-10 and the seed Keras CNN.
#
# dp-train runs end to end on a TFRecord file of float records, with
# --prefetch 0 so that reading and decoding share its single thread (PyTorch
# reuses one tensor in memory).  PyTorch runs 5 warm-up steps, then a timed
# loop, under OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 as
# well as torch.set_num_threads(1) (Debian's torch ignores the latter for
# its OpenBLAS calls: 140% CPU without them).  Both rates are computed the
# same way: total samples / total time, warm-up excluded (dp-train: the
# samples and time of its log intervals after the first, which holds the
# warm-up; not a median of intervals).  Each side's CPU use is printed
# (process CPU time / wall time: 100% is one core).  Each side runs ROUNDS
# times, alternating; medians and the ratio are printed, with the fraction
# of the OpenBLAS SGEMM ceiling (measured here, one thread) that dp-train
# reaches.
#
# Memory: peak RSS of dp-train (/usr/bin/time -f %M) streaming the MLP's
# data from stdin for 2 epochs (the second from the file cache), for a
# dataset and one 4 times larger: it should not grow with the data.
#
# Model FLOPs per sample (forward + backward, multiply-add = 2), as the
# direct algorithms count them (Winograd convolutions do fewer; the rate is
# then an effective one):
#   MLP: 2*(784*128 + 128*10) forward, twice that backward less the input
#        gradient of the first layer:  6*1280 + 4*784*128 = 409,088
#   CNN: conv1 2*32*9*676 fwd + dW; conv2 2*64*288*576 fwd + dW + dX;
#        dense 2*9216*128 and 2*128*10 fwd + dW + dX:  71,906,816
set -eu
ROUNDS=${ROUNDS:-3}
PY=/usr/bin/python3
DP_TRAIN=${DP_TRAIN:-dp-train}
T=$(mktemp -d "${TMPDIR:-/tmp}/dpbench.XXXXXX")
trap 'rm -rf "$T"' EXIT INT TERM

if ! $PY -c 'import torch' 2>/dev/null; then
	echo "bench/dp-train.sh: SKIP: python3-torch is not installed (apt-get install python3-torch)"
	exit 0
fi
cc -O2 -o "$T/sgemm" bench/sgemm.c $(pkg-config --cflags --libs openblas)
$PY tests/mkexamples.py "$T/mlp.tfrecord" random --n 25600 --shape 784 --seed 1
$PY tests/mkexamples.py "$T/cnn.tfrecord" random --n 1920 --shape 1x28x28 --seed 1

cat > "$T/peer.py" <<'PYEOF'
import sys, time, torch, torch.nn as nn
kind, nb = sys.argv[1], int(sys.argv[2])
torch.set_num_threads(1); torch.manual_seed(0); B = 128
if kind == "mlp":
    m = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10)); x = torch.randn(B, 784)
else:
    m = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(),
                      nn.MaxPool2d(2), nn.Dropout(0.25), nn.Flatten(), nn.Linear(9216, 128),
                      nn.ReLU(), nn.Dropout(0.5), nn.Linear(128, 10)); x = torch.randn(B, 1, 28, 28)
y = torch.randint(0, 10, (B,)); opt = torch.optim.Adam(m.parameters(), 1e-3); lossf = nn.CrossEntropyLoss()
def step():
    opt.zero_grad(); lossf(m(x), y).backward(); opt.step()
for _ in range(5): step()
t, c = time.perf_counter(), time.process_time()
for _ in range(nb): step()
t, c = time.perf_counter() - t, time.process_time() - c
print(f"{nb * B / t:.0f} {100 * c / t:.0f}")
PYEOF

CNN='conv:32:3,relu,conv:64:3,relu,maxpool:2,dropout:0.25,flatten,dense:128,relu,dropout:0.5,dense:10'

# dp-train's samples/s: total samples / total time of its log intervals
# after the first (each interval's samples from its steps, its time from
# its rate), and its CPU use over the whole run (/usr/bin/time)
ours() { # data model shape log-every
	/usr/bin/time -f %P -o "$T/cpu" $DP_TRAIN --train "$1" --model "$2" --input-shape "$3" \
		--batch-size 128 --optimizer adam --lr 0.001 --threads 1 --prefetch 0 \
		--shuffle-buffer 0 --log-every "$4" -q |
		sed -n 's/.*step=\([0-9]*\) .*samples_per_sec=\([0-9.]*\).*/\1 \2/p' |
		awk 'NR > 1 { n = ($1 - last) * 128; s += n; t += n / $2 }
			{ last = $1 } END { printf "%.0f\n", s / t }'
	cat "$T/cpu"
}

median() { tr ' ' '\n' | grep . | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "load average before: $(cut -d" " -f1-3 /proc/loadavg) on $(nproc) cores (above 1: other work ran beside these figures)"
"$T/sgemm" > "$T/sgemm.txt"
cat "$T/sgemm.txt"
ceil=$(sed 's/.*=//' "$T/sgemm.txt" | sort -n | tail -1) # the best of the shapes

peer() { OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $PY "$T/peer.py" "$@"; }
for model in mlp cnn; do
	a= b= ca= cb=
	for r in $(seq "$ROUNDS"); do
		if [ $model = mlp ]; then
			set -- $(ours "$T/mlp.tfrecord" dense:128,relu,dense:10 784 20) $(peer mlp 200)
		else
			set -- $(ours "$T/cnn.tfrecord" "$CNN" 1x28x28 3) $(peer cnn 12)
		fi
		a="$a $1" ca="$ca $2" b="$b $3" cb="$cb $4%"
	done
	ma=$(echo "$a" | median) mb=$(echo "$b" | median)
	flops=$([ $model = mlp ] && echo 409088 || echo 71906816)
	awk -v m=$model -v a="$ma" -v b="$mb" -v f=$flops -v c="$ceil" -v ra="$a" -v rb="$b" \
		-v ca="$ca" -v cb="$cb" 'BEGIN {
		g = a * f / 1e9
		printf "%s: dp-train %d samples/s (runs:%s; CPU%s), PyTorch %d samples/s (runs:%s; CPU%s), ratio %.2fx\n", m, a, ra, ca, b, rb, cb, a / b
		printf "%s: dp-train %.1f GFLOP/s effective (direct-algorithm FLOPs) = %.0f%% of the SGEMM ceiling (%.1f GFLOP/s)\n", m, g, 100 * g / c, c
	}'
done

if [ -x /usr/bin/time ]; then
	for i in 1 2 3 4; do cat "$T/mlp.tfrecord"; done > "$T/big.tfrecord"
	for f in mlp big; do
		/usr/bin/time -f %M -o "$T/rss" $DP_TRAIN --train - --model dense:128,relu,dense:10 \
			--input-shape 784 --batch-size 128 --epochs 2 -q --log-every 1000000 \
			< "$T/$f.tfrecord" > /dev/null
		echo "$f $(wc -c < "$T/$f.tfrecord") $(cat "$T/rss")"
	done | awk '{ printf "streaming from stdin, 2 epochs: %.0f MiB of records -> peak RSS %.1f MiB\n", $2 / 1048576, $3 / 1024 }'
fi
