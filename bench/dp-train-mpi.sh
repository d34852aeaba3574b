#!/bin/sh
# bench/dp-train-mpi.sh - dp-train's data parallelism on one machine:
# training samples/s (forward + backward + allreduce + Adam update, batch
# 128 a rank, random MNIST-shaped data) of `mpirun -np 2` (one math thread
# a rank) against `mpirun -np 1`, and against PyTorch
# DistributedDataParallel (gloo, 2 processes x 1 thread, the method of
# ../shared/peers/torch_ddp_peer.py), for the MLP 784-128-10 and the seed
# Keras CNN.  Then the share of a step that gradient communication takes,
# with the allreduce overlapped with the backward pass and without.
#
# dp-train reads TFRecord files (a shard a rank, as tfr-shard writes them)
# with --prefetch 0, so that reading and decoding share the rank's one
# thread; its rate is total samples / total time of the log intervals
# after the first (rank 0 logs the job's samples/s; each interval's
# samples from its steps, its time from its rate), as bench/dp-train.sh.  PyTorch trains on one tensor kept in memory.
# mpirun runs on shared memory (--mca btl self,vader) without binding
# (--bind-to none: on a 2-core machine shared with other work, pinning a
# rank to a busy core costs more than it saves).  Each side runs ROUNDS
# times, alternating; medians and ratios are printed.
#
# Targets (issue 4): np=2 / np=1 >= 1.8x for the CNN and >= 1.6x for the
# MLP; dp-train np=2 ahead of DDP on both, >= 1.5x on the MLP.
set -eu
ROUNDS=${ROUNDS:-3}
PY=/usr/bin/python3
DP_TRAIN=${DP_TRAIN:-dp-train}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN="mpirun --mca btl self,vader --bind-to none"
T=$(mktemp -d "${TMPDIR:-/tmp}/dpbench.XXXXXX")
trap 'rm -rf "$T"' EXIT INT TERM

if ! command -v mpirun >/dev/null 2>&1; then
	echo "bench/dp-train-mpi.sh: SKIP: mpirun is not installed (apt-get install openmpi-bin)"
	exit 0
fi
have_torch=1
$PY -c 'import torch, torch.distributed' 2>/dev/null || have_torch=0

for r in 0 1; do
	$PY tests/mkexamples.py "$T/mlp-$r.tfrecord" random --n 12800 --shape 784 --seed $((1 + r))
	$PY tests/mkexamples.py "$T/cnn-$r.tfrecord" random --n 960 --shape 1x28x28 --seed $((3 + r))
done
cat "$T/mlp-0.tfrecord" "$T/mlp-1.tfrecord" > "$T/mlp-all.tfrecord"
cat "$T/cnn-0.tfrecord" "$T/cnn-1.tfrecord" > "$T/cnn-all.tfrecord"

cat > "$T/ddp.py" <<'PYEOF'
import os, sys, time, torch, torch.nn as nn, torch.distributed as dist, torch.multiprocessing as mp
def build(kind):
    if kind == "mlp":
        return nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10)), (128, 784)
    return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Dropout(0.25), nn.Flatten(), nn.Linear(9216, 128),
                         nn.ReLU(), nn.Dropout(0.5), nn.Linear(128, 10)), (128, 1, 28, 28)
def run(rank, n, kind, nb, port, q):
    os.environ["MASTER_ADDR"] = "127.0.0.1"; os.environ["MASTER_PORT"] = port
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=n)
    torch.manual_seed(0)
    m, shape = build(kind)
    m = nn.parallel.DistributedDataParallel(m)
    x = torch.randn(*shape); y = torch.randint(0, 10, (shape[0],))
    opt = torch.optim.Adam(m.parameters(), 1e-3); lossf = nn.CrossEntropyLoss()
    def step():
        opt.zero_grad(); lossf(m(x), y).backward(); opt.step()
    for _ in range(5): step()
    dist.barrier(); t = time.perf_counter()
    for _ in range(nb): step()
    dist.barrier(); t = time.perf_counter() - t
    if rank == 0: q.put(n * nb * shape[0] / t)
    dist.destroy_process_group()
if __name__ == "__main__":
    kind, n, nb, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    q = mp.get_context("spawn").SimpleQueue()
    mp.spawn(run, args=(n, kind, nb, port, q), nprocs=n)
    print(f"{q.get():.0f}")
PYEOF

CNN='conv:32:3,relu,conv:64:3,relu,maxpool:2,dropout:0.25,flatten,dense:128,relu,dropout:0.5,dense:10'

# ours NP DATA MODEL SHAPE LOG_EVERY EPOCHS [options]: samples/s (total
# samples / total time after the first log interval); the end-of-run note
# goes to $T/note
ours() {
	o_np=$1 o_data=$2 o_model=$3 o_shape=$4 o_every=$5 o_epochs=$6
	shift 6
	$MPIRUN -np "$o_np" $DP_TRAIN --train "$o_data" --model "$o_model" --input-shape "$o_shape" \
		--batch-size 128 --optimizer adam --lr 0.001 --threads 1 --prefetch 0 \
		--shuffle-buffer 0 --log-every "$o_every" --epochs "$o_epochs" "$@" 2> "$T/note" |
		sed -n 's/.*step=\([0-9]*\) .*samples_per_sec=\([0-9.]*\).*/\1 \2/p' |
		awk -v b=$((128 * o_np)) 'NR > 1 { n = ($1 - last) * b; s += n; t += n / $2 }
			{ last = $1 } END { printf "%.0f\n", s / t }'
}

median() { tr ' ' '\n' | grep . | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

port=$((29500 + $$ % 400))
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "mpirun: $($MPIRUN --version 2>/dev/null | head -1); $MPIRUN -np N dp-train --threads 1 --prefetch 0, batch 128 a rank"

for model in mlp cnn; do
	a= b= c=
	for r in $(seq "$ROUNDS"); do
		if [ $model = mlp ]; then
			a="$a $(ours 1 "$T/mlp-all.tfrecord" dense:128,relu,dense:10 784 20 1)"
			b="$b $(ours 2 "$T/mlp-{rank}.tfrecord" dense:128,relu,dense:10 784 20 2)"
			[ $have_torch = 0 ] || c="$c $($PY "$T/ddp.py" mlp 2 400 $port 2>/dev/null)"
		else
			a="$a $(ours 1 "$T/cnn-all.tfrecord" "$CNN" 1x28x28 3 1)"
			b="$b $(ours 2 "$T/cnn-{rank}.tfrecord" "$CNN" 1x28x28 3 2)"
			[ $have_torch = 0 ] || c="$c $($PY "$T/ddp.py" cnn 2 12 $port 2>/dev/null)"
		fi
		port=$((port + 1))
	done
	ma=$(echo "$a" | median) mb=$(echo "$b" | median) mc=$(echo "$c" | median)
	awk -v m=$model -v a="$ma" -v b="$mb" -v ra="$a" -v rb="$b" 'BEGIN {
		printf "%s: dp-train np=1 %d samples/s (runs:%s), np=2 %d samples/s (runs:%s): scaling %.2fx (target %s)\n", m, a, ra, b, rb, b / a, m == "mlp" ? "1.6x" : "1.8x"
	}'
	if [ $have_torch = 1 ] && [ -n "$mc" ]; then
		awk -v m=$model -v b="$mb" -v c="$mc" -v rc="$c" 'BEGIN {
			printf "%s: PyTorch DDP gloo 2 x 1 thread %d samples/s (runs:%s): dp-train np=2 is %.2fx (target %s)\n", m, c, rc, b / c, m == "mlp" ? "1.5x" : "1.0x"
		}'
	else
		echo "$model: PyTorch DDP: SKIP (python3-torch is not installed)"
	fi
done

# communication as a share of a step: the note dp-train prints at the end
for model in mlp cnn; do
	for mode in overlap no-overlap; do
		opt=
		[ $mode = overlap ] || opt=--no-overlap
		if [ $model = mlp ]; then
			ours 2 "$T/mlp-{rank}.tfrecord" dense:128,relu,dense:10 784 20 2 $opt > /dev/null
		else
			ours 2 "$T/cnn-{rank}.tfrecord" "$CNN" 1x28x28 3 2 $opt > /dev/null
		fi
		echo "$model np=2 $mode: $(sed -n 's/^dp-train: communication: //p' "$T/note")"
	done
done
