#!/usr/bin/env bash
# dp-eval against independent computations (tests/eval_ref.py): metrics
# recomputed in plain Python from the per-record predictions (the loss
# with math.fsum, bit for bit), and the checkpoint loaded into PyTorch
# (Debian python3-torch) with load_state_dict, whose outputs give the same
# probabilities, accuracy, top-k, confusion matrix and loss.  Three models
# trained briefly by dp-train on learnable synthetic data: an MLP over two
# files (one gzip, partial batches), a CNN with batchnorm, dropout and a
# final softmax over uint8 bytes scaled by 1/255 (the checkpoint's
# metadata says how to read them), and a 3-output regression model.
. "${DP_SRC:-.}/tests/lib.sh"

cd "$T"
REF="$PY $DP_SRC/tests/eval_ref.py"
MK="$PY $DP_SRC/tests/mkexamples.py"
require "python3-numpy is not installed (scripts/deps --test)" $PY -c 'import numpy'
TORCH=1
$PY "$DP_SRC/tests/torch_ref.py" check || TORCH=0

$PY - <<'EOF'
import numpy as np
r = np.random.default_rng(7)
W = r.standard_normal((5, 12))
def cls(n):
    x = r.standard_normal((n, 12)).astype(np.float32)
    return x, np.argmax(x @ W.T + 0.8 * r.standard_normal((n, 5)), 1)
for name, n in (("a", 70), ("b", 53), ("tr", 600)):
    x, y = cls(n); np.savez(f"{name}.npz", x=x, y=y)
def img(n):  # the brightest quadrant
    x = r.integers(0, 256, size=(n, 2, 8, 8))
    q = np.stack([x[:, :, :4, :4].mean((1, 2, 3)), x[:, :, :4, 4:].mean((1, 2, 3)),
                  x[:, :, 4:, :4].mean((1, 2, 3)), x[:, :, 4:, 4:].mean((1, 2, 3))], 1)
    return x, np.argmax(q, 1)
for name, n in (("ia", 90), ("itr", 400)):
    x, y = img(n); np.savez(f"{name}.npz", x=x, y=y)
V = r.standard_normal((3, 12))
def reg(n):
    x = r.standard_normal((n, 12)).astype(np.float32)
    return x, (np.tanh(x @ V.T) + 0.1 * r.standard_normal((n, 3))).astype(np.float32)
for name, n in (("ra", 77), ("rtr", 500)):
    x, y = reg(n); np.savez(f"{name}.npz", x=x, y=y)
EOF
$MK a.tfr npz a.npz
$MK b.tfr.gz npz b.npz --gzip
$MK tr.tfr npz tr.npz
$MK ia.tfr npz ia.npz --kind uint8
$MK itr.tfr npz itr.npz --kind uint8
$MK ra.tfr npz ra.npz --label-kind vector
$MK rtr.tfr npz rtr.npz --label-kind vector

COMMON=(--epochs 3 --batch-size 16 -q)
dp-train --train tr.tfr --input-shape 12 --model dense:16,relu,dense:5 "${COMMON[@]}" -o mlp.st >/dev/null
dp-train --train itr.tfr --decode-raw uint8 --scale 1/255 --input-shape 2x8x8 \
	--model conv:4:3,batchnorm,relu,maxpool:2,dropout:0.3,flatten,dense:4,softmax \
	"${COMMON[@]}" -o cnn.st >/dev/null
dp-train --train rtr.tfr --input-shape 12 --loss mse --model dense:16,tanh,dense:3 \
	"${COMMON[@]}" -o reg.st >/dev/null

# compare NAME REF-ARGS...: eval_ref's PASS/FAIL lines as TAP results
compare() {
	local name=$1 line
	shift
	if [ "$TORCH" = 1 ]; then
		$REF check "$name.json" "$name.jsonl" "$@" --torch "$name.st" > "$name.ref" 2>&1
	else
		$REF check "$name.json" "$name.jsonl" "$@" > "$name.ref" 2>&1
	fi
	ref_results "$name" "$name.ref" eval_ref || return
	[ "$TORCH" = 1 ] || skip "$name: python3-torch is not installed: no comparison with PyTorch"
}

run dp-eval --model mlp.st a.tfr b.tfr.gz --batch-size 32 --top-k 2 --json mlp.json --predictions mlp.jsonl -q
is "$rc" 0 "MLP: dp-eval runs over two files, one gzip (123 records, batches of 32)"
compare mlp --data a.tfr=a.npz --data b.tfr.gz=b.npz --topk 2

run dp-eval --model cnn.st --data ia.tfr --batch-size 32 --json cnn.json --predictions cnn.jsonl -q
is "$rc" 0 "CNN: uint8 bytes scaled by 1/255, as the checkpoint says"
compare cnn --data ia.tfr=ia.npz

run dp-eval --model reg.st --data ra.tfr --batch-size 32 --json reg.json --predictions reg.jsonl -q
is "$rc" 0 "regression: 3 outputs"
compare reg --data ra.tfr=ra.npz

# the loss dp-train reports for validation is the same quantity
dp-train --init mlp.st --train a.tfr --val a.tfr --epochs 1 --lr 0 -q > val.log 2>&1
vl=$(sed -n 's/.*val_loss=\([0-9.e+-]*\).*/\1/p' val.log)
run dp-eval --model mlp.st --data a.tfr --json - -q
ok $PY -c "
import json, sys
m = json.load(open('/dev/stdin'))['metrics']['loss']['value']
sys.exit(abs(m - $vl) > 1e-4 * abs(m))" <<< "$out" "loss agrees with dp-train's val_loss ($vl)"

done_testing
