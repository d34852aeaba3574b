#!/bin/bash
# bench/allreduce-hosts.sh - dp-train's gradient exchange between hosts
# (issue 16), on hosts emulated by tests/cluster.sh: network namespaces on
# a bridge, Open MPI over TCP, each link shaped by tc tbf (no latency is
# added: the kernel has no netem).
#   - bus bandwidth of the allreduce of 32 MiB (bench/allreduce.c, as
#     nccl-tests define it) against the shaped rate, 2 and 4 hosts, at
#     1 and 10 Gbit/s: ring, mpi (Open MPI's own), ring with a bf16 wire;
#   - 2 hosts x 2 ranks: flat ring against hierarchical, bytes across;
#   - MLP 784-1024-1024-10 training, 2 hosts x 1 rank at 1 Gbit/s:
#     dp-train (fp32, bf16) against PyTorch DDP (gloo), the same batch,
#     alternated AH_REPS times (3); AH_ONLY=train: this part alone.
# AH_ONLY=allreduce: the allreduce figures alone (no training, no model);
# AH_RATES ("1gbit 10gbit"), AH_HOSTS ("2 4"), AH_MIB (32) and AH_ITERS (8)
# shorten them (scripts/device-check's --cpu plumbing: 1gbit, 2, 1, 2).
# Needs root (network namespaces); says why and exits 0 where it cannot.
# Everything is measured in this one run; the machine's other load shows
# in the figures (run it on a quiet machine).
cd "$(dirname "$0")/.."
AH_HOSTS=${AH_HOSTS:-2 4}
BH_NAME=allreduce-hosts BH_N=$(printf '%s\n' $AH_HOSTS 2 | sort -n | tail -1)
. bench/hosts.bash
hosts() { local h=h1 i; for i in $(seq 2 "$1"); do h="$h,h$i"; done; echo "$h"; }
# AH_ONLY=train: the training comparison alone (no allreduce figures, no model)
[ "${AH_ONLY:-}" = train ] && rates= || rates=${AH_RATES:-1gbit 10gbit}
for rate in $rates; do
	cluster_shape $rate || exit 1
	gbit=${rate%gbit}
	for n in $AH_HOSTS; do
		for cfg in "fp32 ring" "fp32 mpi" "bf16 ring" "fp32 ring small"; do
			set -- $cfg
			mib=${AH_MIB:-32}
			[ $# = 3 ] && mib=0.0625 # latency: the alpha of the model
			line=$(cluster_mpirun -np $n -H "$(hosts $n)" "$T/allreduce" $mib ${AH_ITERS:-8} $1 $2 2>&1 |
				grep '^size=')
			bus=$(sed -n 's/.*busbw_gbit=\([0-9.]*\).*/\1/p' <<<"$line")
			echo "link=$rate $line link_fraction=$(awk -v b="${bus:-0}" -v g="$gbit" 'BEGIN { printf "%.2f", b / g }')" |
				tee -a "$T/fig"
		done
	done
done
cluster_shape 1gbit
for algo in ${rates:+ring hierarchical}; do
	line=$(cluster_mpirun -np 4 -H h1:2,h2:2 "$T/allreduce" ${AH_MIB:-32} ${AH_ITERS:-8} fp32 $algo 2>&1 |
		grep '^size=')
	echo "link=1gbit 2x2 $line"
done
[ "${AH_ONLY:-}" = allreduce ] && exit 0

# training: dp-train against DDP, 2 hosts x 1 rank, 1 Gbit/s
$PY tests/mkexamples.py "$T/mlp.tfr" random --n 4096 --shape 1x28x28 --classes 10 --seed 1
train() { # wire epochs [MPIRUN-ARGS [DP-TRAIN-ARGS]]: seconds of the whole run
	local t0 t1
	t0=$(date +%s.%N)
	cluster_mpirun ${3:--np 2 -H h1,h2} dp-train --train "$T/mlp.tfr" --input-shape 1x28x28 \
		--model flatten,dense:1024,relu,dense:1024,relu,dense:10 --optimizer adam --lr 1e-3 \
		--batch-size 128 --epochs "$2" --threads 1 --log-every 1000 --grad-dtype "$1" \
		--shuffle-buffer 1 ${4:-} >/dev/null 2>"$T/train.err"
	t1=$(date +%s.%N)
	awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }'
}
ddp() {
	local i
	for i in 1 2; do
		ip netns exec "$CL_ID-h$i" env RANK=$((i - 1)) WORLD_SIZE=2 MASTER_ADDR=$CL_NET.1 \
			MASTER_PORT=29533 GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
			timeout 300 $PY bench/ddp_hosts.py 128 60 > "$T/ddp-$i.out" 2>&1 &
	done
	wait
	grep samples_per_sec "$T/ddp-1.out"
}
# dp-train: total samples / total time of epochs 2 and 3 (a 3-epoch run
# less a 1-epoch run); both sides alternated, AH_REPS times (3), as the
# machine's other load comes and goes
for rep in $(seq "${AH_REPS:-3}"); do
	for dt in fp32 bf16; do
		s1=$(train $dt 1) s3=$(train $dt 3)
		echo "rep=$rep dp-train mlp1024 hosts=2 batch=128/rank wire=$dt samples_per_sec=$(awk -v a="$s1" -v b="$s3" 'BEGIN { printf "%.0f", 2 * 4096 / (b - a) }')" \
			"$(grep -o 'in flight.*hidden by the backward pass' "$T/train.err")"
	done
	echo "rep=$rep $(ddp)"
done
# 2 hosts x 2 ranks (batch 64 a rank, the same global batch): flat ring
# against hierarchical
for rep in $(seq "${AH_REPS:-3}"); do
	for algo in ring hierarchical; do
		s1=$(train fp32 1 "-np 4 -H h1:2,h2:2" "--allreduce $algo --batch-size 64")
		s3=$(train fp32 3 "-np 4 -H h1:2,h2:2" "--allreduce $algo --batch-size 64")
		echo "rep=$rep dp-train mlp1024 hosts=2x2 batch=64/rank allreduce=$algo samples_per_sec=$(awk -v a="$s1" -v b="$s3" 'BEGIN { printf "%.0f", 2 * 4096 / (b - a) }')" \
			"$(grep -o 'in flight.*hidden by the backward pass' "$T/train.err")"
	done
done
[ -n "$rates" ] || exit 0
# compute of a step on one rank (the scaling model's input): dp-train's
# log interval for the MLP and the seed CNN, torchvision's resnet50 at 224
for m in "mlp flatten,dense:1024,relu,dense:1024,relu,dense:10" \
	"cnn conv:32:3,relu,conv:64:3,relu,maxpool:2,dropout:0.25,flatten,dense:128,relu,dropout:0.5,dense:10"; do
	set -- $m
	dp-train --train "$T/mlp.tfr" --input-shape 1x28x28 --model "$2" --batch-size 128 --epochs 1 \
		--threads 1 --log-every 8 --shuffle-buffer 1 --log "$T/c.log" 2>/dev/null
	sps=$(sed -n 's/.*samples_per_sec=\([0-9.]*\).*/\1/p' "$T/c.log" | tail -n +2 | sort -n |
		awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
	echo "compute $1 $(awk -v s="$sps" 'BEGIN { printf "%.4f", 128 / s }') (1 thread, batch 128)" |
		tee -a "$T/fig"
done
(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 $PY - <<'PYEOF'
import time, torch, torchvision
torch.set_num_threads(1)
m = torchvision.models.resnet50(weights=None)
x = torch.randn(8, 3, 224, 224); y = torch.randint(0, 1000, (8,))
f = torch.nn.CrossEntropyLoss()
for i in range(3):
    t = time.perf_counter(); f(m(x), y).backward(); t = time.perf_counter() - t
# a step of batch 32 on one thread, from batch 8
print(f"compute resnet50 {4 * t:.3f} (1 thread, batch 32, torchvision)")
PYEOF
) | tee -a "$T/fig"
echo "== the scaling model (bench/scaling-model.py) fitted to these figures:"
$PY bench/scaling-model.py "$T/fig"

