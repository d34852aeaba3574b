#!/usr/bin/env bash
# Fine-tuning against PyTorch (Debian python3-torch): --init of a plain
# state_dict (safetensors without __metadata__) gives PyTorch's loss and,
# after SGD steps, PyTorch's weights; --freeze, --lr-mult, --no-decay and
# --label-smoothing as parameter groups and CrossEntropyLoss(label_smoothing)
# do; frozen tensors bit-for-bit unchanged and without optimizer state;
# --reset gives the fresh weights; the settings survive --resume.
. "${DP_SRC:-.}/tests/lib.sh"

require_ref torch_ref.py "python3-torch is not installed: apt-get install python3-torch (scripts/deps --test)"
cd "$T"
$PY "$DP_SRC/tests/mkexamples.py" vec.tfr random --n 24 --shape 12 --classes 5 --seed 1 --npz vec.npz
$PY "$DP_SRC/tests/mkexamples.py" img.tfr random --n 24 --shape 2x8x8 --classes 5 --seed 2 --npz img.npz
MLP=dense:16,relu,dense:8,relu,dense:5
CNN=conv:4:3,batchnorm,relu,flatten,dense:5
printf 'plain %s 12 7 mlp.st\nplain %s 2x8x8 7 cnn.st\n' "$MLP" "$CNN" > plain.txt
$REF batch plain.txt > plain.log 2>&1 || { cat plain.log; exit 1; }
like "$(head -c 40 mlp.st | tail -c +9)" '^\{"0\.weight"' "the reference file is a plain state_dict (no __metadata__)"
T1=(--shuffle-buffer 0 --batch-size 8 --prefetch 0 -q)

# a plain state_dict: refused without --model, loaded with it
run dp-train --init mlp.st --train vec.tfr
is "$rc" 2 "--init of a state_dict without --model: usage error"
like "$err" "mlp.st: no dp-train metadata .*give the model with --model and --input-shape" "...said so"
run dp-train --init mlp.st --model "$MLP" --input-shape 12 --train vec.tfr --lr 0 --max-steps 1 \
	"${T1[@]}" -o lr0.st
is "$rc" 0 "--init of a PyTorch state_dict with --model and --input-shape"
dp-eval --model lr0.st --data vec.tfr --json ev.json > /dev/null 2>&1
got=$($PY -c 'import json; print(json.load(open("ev.json"))["metrics"]["loss"]["value"])')
want=$($REF loss mlp.st vec.npz 24 --model "$MLP" --shape 12)
ok $PY -c "import sys; g,w=$got,$want; sys.exit(abs(g-w) > 1e-6*abs(w))" "the same loss as PyTorch's forward ($got, $want)"
ok $REF same-weights mlp.st lr0.st "--lr 0: the weights are the state_dict's, bit for bit"

# tensor by tensor: the first that differs named
run dp-train --init mlp.st --model dense:16,relu,dense:8,relu,dense:5,relu,dense:5 --input-shape 12 \
	--train vec.tfr "${T1[@]}"
is "$rc" 1 "a tensor missing from the state_dict: exit 1"
like "$err" "mlp.st: no tensor '6.weight'" "...named"
run dp-train --init mlp.st --model dense:16,relu,dense:5 --input-shape 12 --train vec.tfr "${T1[@]}"
like "$err" "mlp.st: tensor '4.weight' is not in the model" "a tensor the model lacks: named"
run dp-train --init mlp.st --model dense:16,relu,dense:9,relu,dense:5 --input-shape 12 --train vec.tfr "${T1[@]}"
like "$err" "mlp.st: tensor '2.weight' is F32 \[8, 16\], the model needs F32 \[9, 16\]" "a shape that differs: named"

# steps against PyTorch's, from the state_dict, with the fine-tuning settings
SGD="--optimizer sgd --lr 0.05 --momentum 0.9 --nesterov --weight-decay 0.01"
cat > cases.txt <<EOF
vec 12 $MLP $SGD
vec 12 $MLP $SGD --freeze 0,2 --label-smoothing 0.1
vec 12 $MLP $SGD --lr-mult 4=10,*=0.1 --no-decay bias
vec 12 $MLP --optimizer adamw --lr 0.01 --weight-decay 0.1 --no-decay 1d --freeze 0.bias --lr-mult 2*=3
vec 12 $MLP --optimizer adam --lr 0.01 --weight-decay 0.1 --label-smoothing 0.3 --freeze 4
img 2x8x8 $CNN $SGD --no-decay bn,bias --lr-mult bn=2 --label-smoothing 0.2
img 2x8x8 $CNN $SGD --freeze 0
EOF
i=0
while read -r data shape spec args; do
	i=$((i + 1))
	init=mlp.st
	[ "$data" = img ] && init=cnn.st
	# shellcheck disable=SC2086
	dp-train --init $init --model "$spec" --input-shape "$shape" --train "$data.tfr" "${T1[@]}" \
		--max-steps 3 -o "out-$i.st" $args > /dev/null 2> "err-$i.txt"
	echo $? > "rc-$i.txt"
	echo "step $init out-$i.st $data.npz --model $spec --shape $shape --batch 8 --steps 3 $args"
done < cases.txt > step.txt
$REF batch step.txt > step.log 2>&1
torch_step_results cases.txt step.log

# frozen: bit for bit, no optimizer state; the others moved and have theirs
cat > tensors.py <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
from torch_ref import load_checkpoint
a, _ = load_checkpoint(sys.argv[2])
b, meta = load_checkpoint(sys.argv[3])
for k in sys.argv[4:]:
    op, k = k[0], k[1:]
    if op == "=" and a[k].tobytes() != b[k].tobytes():
        sys.exit(f"{k} differs")
    if op == "~" and a[k].tobytes() == b[k].tobytes():
        sys.exit(f"{k} did not move")
    if op == "-" and k in b:
        sys.exit(f"{k} is there")
    if op == "+" and k not in b:
        sys.exit(f"{k} is missing")
EOF
CHK="$PY tensors.py $DP_SRC/tests"
ok $CHK mlp.st out-2.st =0.weight =0.bias =2.weight =2.bias ~4.weight ~4.bias \
	-optimizer.0.weight.momentum_buffer -optimizer.2.bias.momentum_buffer \
	+optimizer.4.weight.momentum_buffer "--freeze 0,2: frozen bit for bit, without optimizer state"
ok $CHK cnn.st out-7.st =0.weight =0.bias ~1.weight ~4.weight "--freeze 0 (a conv): bit for bit"

# --reset: the fresh weights of the seed, the rest the state_dict's
dp-train --model "$MLP" --input-shape 12 --train vec.tfr --lr 0 --max-steps 1 --seed 5 "${T1[@]}" -o fresh.st
run dp-train --init mlp.st --reset 4 --model "$MLP" --input-shape 12 --train vec.tfr --lr 0 \
	--max-steps 1 --seed 5 "${T1[@]}" -o reset.st
is "$rc" 0 "--reset 4 runs"
ok $CHK fresh.st reset.st =4.weight =4.bias ~2.weight "--reset 4: layer 4 as a fresh start with the seed"
ok $CHK mlp.st reset.st =0.weight =2.bias ~4.weight "--reset 4: the others from the state_dict"
run dp-train --init mlp.st --reset '4*' --model dense:16,relu,dense:8,relu,dense:6 --input-shape 12 \
	--train vec.tfr "${T1[@]}" --max-steps 1 -o head.st
is "$rc" 0 "--reset of a head of another shape: loads"
run dp-train --init mlp.st --reset 9 --model "$MLP" --input-shape 12 --train vec.tfr "${T1[@]}"
is "$rc" 2 "--reset of a pattern that selects nothing: usage error"
like "$err" "'9' selects no tensor" "...named"
run dp-train --freeze 'x*' --model "$MLP" --input-shape 12 --train vec.tfr "${T1[@]}"
is "$rc" 2 "--freeze of a pattern that selects nothing: usage error"
run dp-train --lr-mult 0=x --model "$MLP" --input-shape 12 --train vec.tfr "${T1[@]}"
like "$err" "'0=x': want PATTERN=MULTIPLIER" "--lr-mult without a number: said so"
run dp-train --reset 0 --model "$MLP" --input-shape 12 --train vec.tfr "${T1[@]}"
is "$rc" 2 "--reset without --init: usage error"
run dp-train --label-smoothing 0.1 --loss mse --model dense:3 --input-shape 12 --train vec.tfr "${T1[@]}"
is "$rc" 2 "--label-smoothing with --loss mse: usage error"

# --resume keeps the settings (metadata), frozen stays frozen
dp-train --init mlp.st --model "$MLP" --input-shape 12 --train vec.tfr "${T1[@]}" --max-steps 1 \
	--freeze 0 --lr-mult 2=0.5 --no-decay bias --label-smoothing 0.1 --optimizer sgd --momentum 0.9 \
	--epochs 2 -o r1.st
run $PY -c "import sys; sys.path.insert(0, '$DP_SRC/tests'); from torch_ref import load_checkpoint
_, m = load_checkpoint('r1.st'); print(m['freeze'], m['lr_mult'], m['no_decay'], m['label_smoothing'])"
is "$out" "0 2=0.5 bias 0.1" "the settings are in the checkpoint's metadata"
run dp-train --resume r1.st --train vec.tfr --prefetch 0 -q -o r2.st
is "$rc" 0 "--resume of a fine-tuning run"
ok $CHK mlp.st r2.st =0.weight =0.bias ~2.weight "--resume: still frozen"
run dp-train --resume r1.st --train vec.tfr --prefetch 0 -q --freeze 2 -o r3.st
is "$rc:$err" "0:" "--resume with other layers frozen: the unfrozen start from a fresh optimizer state"
ok $CHK r1.st r3.st ~0.weight =2.weight "... the unfrozen move, the newly frozen stay"

# under mpirun: the settings compared across ranks; np=2 = np=1 at the same global batch
. "$DP_SRC/tests/mpi.sh"
if have_mpirun; then
	run timeout 120 mpirun "${MPI_OPTS[@]}" -np 1 dp-train --train vec.tfr --model "$MLP" --input-shape 12 \
		--freeze 0 : -np 1 dp-train --train vec.tfr --model "$MLP" --input-shape 12 --freeze 2
	is "$rc" 2 "ranks started with different --freeze: exit 2"
	like "$err" "settings differ between ranks: rank 1 has 'freeze=2' where rank 0 has 'freeze=0'" "...named"
	FT=(--init mlp.st --model "$MLP" --input-shape 12 --train vec.tfr --shuffle-buffer 0 --prefetch 0 -q
		--max-steps 3 --freeze 0 --reset 4 --lr-mult 2=3 --label-smoothing 0.1 --optimizer sgd --momentum 0.9)
	run mpi 2 dp-train "${FT[@]}" --batch-size 4 -o np2.st
	is "$rc" 0 "a fine-tuning run under mpirun -np 2"
	dp-train "${FT[@]}" --batch-size 8 -o np1.st
	ok $CHK mlp.st np2.st =0.weight =0.bias ~2.weight "... frozen bit for bit"
	ok $PY -c "import sys; sys.path.insert(0, '$DP_SRC/tests'); from torch_ref import load_checkpoint
import numpy as np
a, _ = load_checkpoint('np1.st'); b, _ = load_checkpoint('np2.st')
sys.exit(not all(np.allclose(a[k], b[k], rtol=1e-5, atol=1e-6) for k in a if k[0].isdigit()))" \
		"... the weights of np=1 at the same global batch"
	# the frozen start of a model is left out of the allreduce (zeros everywhere)
	BIG=(--model dense:4096,relu,dense:5 --input-shape 12 --train vec.tfr --prefetch 0 --max-steps 2)
	sent() { sed -n 's/.*communication: \([0-9.]*\) MiB sent a step.*/\1/p' <<<"$err"; }
	run mpi 2 dp-train "${BIG[@]}"
	all=$(sent)
	run mpi 2 dp-train "${BIG[@]}" --freeze 0
	frz=$(sent)
	ok awk "BEGIN { exit !($frz > 0 && $frz < $all / 3) }" \
		"--freeze of the first layer: its gradients are not sent ($frz against ${all:-?} MiB a step)"
else
	skip "mpirun is not installed (openmpi-bin)"
fi

done_testing
