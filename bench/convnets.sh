#!/bin/sh
# bench/convnets.sh - the seeds' convolutional jobs on the CPU against
# PyTorch with the same threads (issue 29): torchvision's resnet18 at
# 3x64x64 (batch 32), its fine-tune (--freeze 'conv1,bn1,layer1*,layer2*',
# the frozen part in evaluation mode; batch 64), and resnet18 3x224x224 b32
# and resnet50 3x224x224 b16 (CASES=all: minutes a run; CASES=224: those
# alone; CASES=resnet50: it alone), each at 1 and 2 threads (THREADS="1 2").
# SGD momentum 0.9, lr 0.01, 10 classes, random data.
#
# The peer is bench/torch_convnets.py (../shared/peers' script, the one
# behind the issue's figures): one random tensor in memory, warm-up steps
# left out.  dp-train trains end to end from a TFRecord file (--prefetch 0),
# its rate from the times its log lines (one every 2 steps, flushed)
# arrive, after the first (the lines' samples_per_sec is whole samples:
# at 3 samples/s, a third off).  Both sides run with
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (OpenBLAS's own kernel
# choice, and dp-train's correction of it: dp-train(1) ENVIRONMENT) and
# OPENBLAS_NUM_THREADS, OMP_NUM_THREADS, MKL_NUM_THREADS = the threads.
# ROUNDS (default 3) runs of each side, alternating; medians, CPU use
# (100% = one core) and the ratio, with the load average before each case:
# on a shared machine the rates move with the load, the ratios much less.
# dp-train's CPU use is over the steps its rate covers (user + system time
# from /proc at its first and last log line), as the peer's is: per
# CPU-second, the figure a loaded machine moves least at one thread.
# Peak RSS of each side (medians; dp-train's from /usr/bin/time, the
# peer's from getrusage: the whole python3 process, libraries included).
# Then the implementation dp-train chose for each convolution
# (--summary).
set -eu
ROUNDS=${ROUNDS:-3}
CASES=${CASES:-small}
THREADS=${THREADS:-1 2}
PY=/usr/bin/python3
DP_TRAIN=${DP_TRAIN:-dp-train}
T=$(mktemp -d "${TMPDIR:-/tmp}/dpbench.XXXXXX")
trap 'rm -rf "$T"' EXIT INT TERM
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE

if ! $PY -c 'import torch, torchvision' 2>/dev/null; then
	echo "bench/convnets.sh: SKIP: python3-torch or python3-torchvision is not installed"
	exit 0
fi
$PY tests/mkexamples.py "$T/r64.tfrecord" random --n 640 --shape 3x64x64 --seed 1
[ "$CASES" = small ] || $PY tests/mkexamples.py "$T/r224.tfrecord" random --n 96 --shape 3x224x224 --seed 1

# ours DATA MODEL SHAPE BATCH THREADS [dp-train options]: "samples/s CPU% peakRSS_KiB",
# the rate and CPU use over the same steps as the peer's: between the first
# and the last log line, CPU = dp-train's user + system time then (from
# /proc, at each line's arrival; the bind-time timings before the first
# line left out)
ours() {
	d=$1 m=$2 s=$3 b=$4 t=$5
	shift 5
	rm -f "$T/log"
	mkfifo "$T/log"
	/usr/bin/time -f '%M' -o "$T/rss" $DP_TRAIN --train "$d" --model "$m" --input-shape "$s" \
		--batch-size "$b" --threads "$t" --log-every 2 --epochs 1 --optimizer sgd --lr 0.01 \
		--momentum 0.9 --prefetch 0 --shuffle-buffer 0 --classes 10 -q "$@" > "$T/log" &
	tp=$! pid=
	while IFS= read -r l; do
		pid=${pid:-$(pgrep -P "$tp")}
		c=$(awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$pid/stat" \
			2>/dev/null) || continue
		printf '%s %s %s\n' "$(date +%s.%N)" "$c" "$l"
	done < "$T/log" | sed -n 's/^\([0-9.]*\) \([0-9.]*\) .* step=\([0-9]*\) .*/\1 \2 \3/p' |
		awk -v b="$b" 'NR == 1 { t0 = $1; c0 = $2; s0 = $3 } { t = $1; c = $2; s = $3 }
			END { printf "%.2f %.0f ", (s - s0) * b / (t - t0), 100 * (c - c0) / (t - t0) }'
	wait "$tp"
	cat "$T/rss"
}
# peer MODEL SHAPE BATCH THREADS STEPS [--freeze]: "samples/s CPU% peakRSS_KiB"
peer() {
	OPENBLAS_NUM_THREADS=$4 OMP_NUM_THREADS=$4 MKL_NUM_THREADS=$4 $PY bench/torch_convnets.py "$@" |
		sed -n 's/^rate=\([0-9.]*\) cpu=\([0-9]*\).*maxrss_kib=\([0-9]*\).*/\1 \2 \3/p'
}
median() { tr ' ' '\n' | grep . | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
# compare NAME "OURS ARGS" "PEER ARGS"
compare() {
	load=$(cut -d" " -f1 /proc/loadavg)
	a= b= ca= cb= pa= pb= ma= mb=
	for r in $(seq "$ROUNDS"); do
		set -- $(eval "ours $2") $(eval "peer $3") "$1" "$2" "$3"
		a="$a $1" ca="$ca $2%" ma="$ma $3" b="$b $4" cb="$cb $5%" mb="$mb $6"
		pa="$pa $(echo "$1 $2" | awk '{ printf "%.1f", $1 * 100 / $2 }')"
		pb="$pb $(echo "$4 $5" | awk '{ printf "%.1f", $1 * 100 / $2 }')"
		shift 6
	done
	awk -v n="$1" -v a="$(echo "$a" | median)" -v b="$(echo "$b" | median)" -v ra="$a" \
		-v rb="$b" -v ca="$ca" -v cb="$cb" -v l="$load" -v pa="$(echo "$pa" | median)" \
		-v pb="$(echo "$pb" | median)" -v ma="$(echo "$ma" | median)" \
		-v mb="$(echo "$mb" | median)" 'BEGIN {
		printf "%s (load %s): dp-train %.1f samples/s (runs:%s; CPU%s), PyTorch %.1f (runs:%s; CPU%s), %.2fx\n",
			n, l, a, ra, ca, b, rb, cb, a / b
		printf "    per CPU-second: dp-train %.1f, PyTorch %.1f samples, %.2fx\n", pa, pb, pa / pb
		printf "    peak RSS: dp-train %.0f MiB, PyTorch %.0f MiB, %.2fx\n", ma / 1024, mb / 1024, ma / mb }'
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
FT="--freeze 'conv1,bn1,layer1*,layer2*'"
for t in $THREADS; do
	case $CASES in 224 | resnet50) ;; *)
		compare "resnet18 3x64x64 b32, $t thread(s)" "$T/r64.tfrecord resnet18 3x64x64 32 $t" \
			"resnet18 3x64x64 32 $t 10"
		compare "resnet18 fine-tune 3x64x64 b64, $t thread(s)" \
			"$T/r64.tfrecord resnet18 3x64x64 64 $t $FT" "resnet18 3x64x64 64 $t 6 --freeze" ;;
	esac
	[ "$CASES" = small ] && continue
	[ "$CASES" = resnet50 ] ||
		compare "resnet18 3x224x224 b32, $t thread(s)" "$T/r224.tfrecord resnet18 3x224x224 32 $t" \
			"resnet18 3x224x224 32 $t 2 --warmup 1"
	compare "resnet50 3x224x224 b16, $t thread(s)" "$T/r224.tfrecord resnet50 3x224x224 16 $t" \
		"resnet50 3x224x224 16 $t 4 --warmup 1"
done
echo "the convolutions' implementations, dp-train --summary at 2 threads:"
$DP_TRAIN --train "$T/r64.tfrecord" --model resnet18 --input-shape 3x64x64 --batch-size 32 \
	--threads 2 --classes 10 --summary 2>&1 | sed -n '/^convolutions at/,$p' |
	sed 's/^\([0-9]* *[^ ]*\) *measured: /\1 /'
