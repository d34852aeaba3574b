#!/bin/sh
# bench/bnorm.sh - the CPU backend's batch normalisation (bench/bnorm.c:
# bnorm_fwd in training and bnorm_bwd, one thread) against PyTorch's
# BatchNorm2d forward and backward (one thread: set_num_threads(1) and
# OPENBLAS/OMP/MKL_NUM_THREADS=1), at ResNet-20's shapes for batch 128.
# Each side: the median of 20 calls after 3 warm-up calls, ROUNDS (default
# 3) alternated runs; the medians of the runs and the ratio (PyTorch's time
# / ours: above 1, we are faster) are printed.
set -eu
ROUNDS=${ROUNDS:-3}
PY=/usr/bin/python3
. bench/libdp.sh.inc

if ! $PY -c 'import torch' 2>/dev/null; then
	echo "bench/bnorm.sh: SKIP: python3-torch is not installed (apt-get install python3-torch)"
	exit 0
fi
libdp_cc bnorm
cat > "$T/bnorm.py" <<'PYEOF'
import time, torch
torch.set_num_threads(1)
reps = 20
for n, c, h, w in ((128, 16, 32, 32), (128, 32, 16, 16), (128, 64, 8, 8)):
    bn = torch.nn.BatchNorm2d(c)
    x = torch.randn(n, c, h, w, requires_grad=True)
    dy = torch.randn(n, c, h, w)
    tf, tb = [], []
    for r in range(reps + 3):
        t0 = time.perf_counter()
        y = bn(x)
        t1 = time.perf_counter()
        y.backward(dy)
        t2 = time.perf_counter()
        x.grad = bn.weight.grad = bn.bias.grad = None
        if r >= 3:
            tf.append(t1 - t0)
            tb.append(t2 - t1)
    tf.sort()
    tb.sort()
    print(n, c, h, w, "%.3f %.3f" % (1e3 * tf[reps // 2], 1e3 * tb[reps // 2]))
PYEOF
for r in $(seq "$ROUNDS"); do
	"$T/bnorm" 20 >> "$T/ours"
	OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $PY "$T/bnorm.py" >> "$T/torch"
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
# the median over the runs of each shape's figure in column $1
med() { awk -v col="$1" -v shape="$2" '$1"x"$2"x"$3"x"$4 == shape { print $col }' "$3" | sort -n |
	awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
printf '%-16s %10s %10s %7s   %10s %10s %7s\n' "shape" "fwd ms" "torch" "ratio" "bwd ms" "torch" "ratio"
for s in 128x16x32x32 128x32x16x16 128x64x8x8; do
	of=$(med 5 $s "$T/ours") tf=$(med 5 $s "$T/torch") ob=$(med 6 $s "$T/ours") tb=$(med 6 $s "$T/torch")
	awk -v s="$s" -v of="$of" -v tf="$tf" -v ob="$ob" -v tb="$tb" 'BEGIN {
		printf "%-16s %10s %10s %6.2fx   %10s %10s %6.2fx\n", s, of, tf, tf / of, ob, tb, tb / ob }'
done
