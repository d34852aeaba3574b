#!/usr/bin/env bash
# dp-train on a GPU against the CPU backend of the same binary
# (DP_BACKEND=cpu): the same model from the same initial weights gives the
# same loss curve within 1e-3 (relative, every update of 24, Adam and
# Nesterov SGD, dropout, batch norm, MSE) and weights within 1e-3 of their
# scale; checkpoints cross over (trained on the GPU, resumed on the CPU and
# the reverse); with --deterministic a GPU run repeats bit for bit; bf16 and tf32 train on the
# fp32 curve within their rounding;
# --gpu out of range is an error.  Runs under make BACKEND=cuda check on a
# machine with a GPU; skips elsewhere.
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/cuda-lib.sh"
cd "$T"
need_cuda

MK="$PY $DP_SRC/tests/mkexamples.py"
$MK img.tfr random --n 768 --shape 1x12x12 --classes 10 --seed 1
$MK vec.tfr random --n 768 --shape 40 --classes 10 --seed 2
$MK reg.tfr random --n 768 --shape 40 --label-kind vector:3 --seed 3
CNN=conv:8:3,relu,conv:16:3,relu,maxpool:2,dropout:0.25,flatten,dense:32,relu,dropout:0.5,dense:10
COMMON=(--batch-size 64 --epochs 2 --prefetch 0 --log-every 1 --seed 7 -q)

curve() { # name tolerance args...: GPU and CPU runs, loss by loss
	local name=$1 tol=$2
	shift 2
	run dp-train "$@" "${COMMON[@]}" --log "$name-gpu.log" -o "$name-gpu.safetensors"
	is "$rc" 0 "$name: trains on the GPU"
	run env DP_BACKEND=cpu dp-train "$@" "${COMMON[@]}" --log "$name-cpu.log" -o "$name-cpu.safetensors"
	is "$rc" 0 "$name: trains on the CPU"
	paste <(losses "$name-gpu.log") <(losses "$name-cpu.log") > "$name.pairs"
	is "$(wc -l < "$name.pairs")" 24 "$name: 24 updates logged on both"
	worst=$(awk '{d = $1 - $2; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (r > w) w = r} END {printf "%.2e", w}' "$name.pairs")
	ok awk -v w="$worst" -v t="$tol" 'BEGIN {exit !(w <= t)}' \
		"$name: the loss curve within $tol of the CPU's at every update (worst $worst)"
	ok close "$name-gpu.safetensors" "$name-cpu.safetensors" "$tol" "$name: final weights within $tol"
}

curve cnn 1e-3 --train img.tfr --input-shape 1x12x12 --model "$CNN" --optimizer adam
curve mlp 1e-3 --train vec.tfr --input-shape 40 --model dense:64,relu,batchnorm,dense:10 \
	--optimizer sgd --lr 0.05 --momentum 0.9 --nesterov --weight-decay 1e-4
curve mse 1e-3 --train reg.tfr --input-shape 40 --model dense:32,tanh,dense:16,sigmoid,dense:3 \
	--loss mse --optimizer adamw

# the same run twice with cuDNN's algorithms pinned: the same bytes (timed,
# the choice may differ from run to run)
for i in 1 2; do
	run dp-train --train img.tfr --input-shape 1x12x12 --model "$CNN" "${COMMON[@]}" --optimizer adam \
		--deterministic --log /dev/null -o det$i.safetensors
done
same_file det1.safetensors det2.safetensors "with --deterministic a GPU run repeats bit for bit"

# checkpoints cross over: one more epoch on the other backend
run env DP_BACKEND=cpu dp-train --resume cnn-gpu.safetensors --train img.tfr --epochs 3 -q --log /dev/null -o g2c.safetensors
is "$rc" 0 "a GPU checkpoint resumes on the CPU"
run dp-train --resume cnn-cpu.safetensors --train img.tfr --epochs 3 -q --log /dev/null -o c2g.safetensors
is "$rc" 0 "a CPU checkpoint resumes on the GPU"
ok close g2c.safetensors c2g.safetensors 1e-3 "and they end within 1e-3 of each other"

# tensor cores: the fp32 run's loss curve within their rounding (the data
# are random: whether the loss falls says nothing; the curve does)
for p in tf32:1e-2 bf16:5e-2; do
	tol=${p#*:} p=${p%:*}
	run dp-train --train img.tfr --input-shape 1x12x12 --model "$CNN" "${COMMON[@]}" --optimizer adam \
		--precision $p --log $p.log -o $p.safetensors
	is "$rc" 0 "--precision $p trains"
	ok curve_close $p.log cnn-gpu.log $tol "--precision $p: fp32's loss curve within $tol at every update"
	curve_close $p.log cnn-gpu.log $tol # the figure, as a TAP comment
	like "$(head -c 4096 $p.safetensors | tr -d '\0')" "\"precision\":\"$p\"" "--precision $p: recorded in the checkpoint"
	ok $PY "$DP_SRC/tests/torch_ref.py" finite $p.safetensors "--precision $p: float32 weights, finite"
done

run dp-train --train img.tfr --input-shape 1x12x12 --model "$CNN" "${COMMON[@]}" --gpu 4095
is "$rc" 1 "--gpu beyond the devices: exit 1"
like "$err" "^dp-train: GPU 4095: only [0-9]+ CUDA devices? visible" "--gpu beyond the devices: says how many there are"
done_testing
