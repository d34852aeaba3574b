#!/usr/bin/env bash
# dp-ckpt: show (text and JSON, names quoted escaped), diff (bit identity,
# the largest difference and where, tensors missing or of another shape,
# --weights, --tolerance, --meta, exit 3), export of the weights alone,
# which PyTorch loads into the equivalent torch.nn.Sequential with
# load_state_dict(strict=True), every tensor as it is, and whose
# predictions equal dp-eval's on the same records; usage errors, damaged
# files.
. "${DP_SRC:-.}/tests/lib.sh"
cd "$T" || exit 1

$PY -c '
import numpy as np
r = np.random.default_rng(3)
np.savez("img.npz", x=r.standard_normal((40, 2, 6, 6)).astype(np.float32), y=r.integers(0, 4, 40))
' || exit 1
$PY "$DP_SRC/tests/mkexamples.py" img.tfr npz img.npz || exit 1
SPEC=conv:3:3,batchnorm,relu,flatten,dense:4
train() { # out epochs [args]
	local o=$1 n=$2
	shift 2
	dp-train --train img.tfr --input-shape 2x6x6 --model $SPEC --batch-size 8 --epochs "$n" \
		--seed 5 -q -o "$o" "$@" >/dev/null
}
train a.st 1 || exit 1
train again.st 1 || exit 1
train b.st 2 || exit 1

# ---- show ---------------------------------------------------------------
run dp-ckpt show a.st
is "$rc" 0 "show: exit 0"
like "$out" "^a.st: safetensors, 22 tensors" "show: the file, its format and tensor count"
# conv 3*2*3*3+3, batchnorm 3+3, dense 4*(3*4*4)+4
like "$out" "^parameters: 259 in 6 tensors$" "show: the parameter count (PyTorch's parameters())"
like "$out" "^buffers: 7 in 3 tensors$" "show: batchnorm's buffers apart"
like "$out" "^  model: $SPEC$" "show: the metadata"
like "$out" $'^  1.running_var\tF32\t\\[3\\]\tbuffer$' "show: a tensor, its dtype, shape and role"
like "$out" $'^  rng.state\tU64\t\\[4\\]\trng$' "show: rng.state"
run dp-ckpt show --json a.st
is "$rc" 0 "show --json: exit 0"
is "$($PY -c 'import json,sys; d=json.load(sys.stdin); print(d["parameters"], d["metadata"]["model"], len(d["tensor_list"]), d["tensor_list"][0])' <<<"$out")" \
	"259 $SPEC 22 {'name': '0.weight', 'dtype': 'F32', 'shape': [3, 2, 3, 3], 'role': 'param'}" \
	"show --json: one JSON object with the counts, metadata and tensors"
run dp-ckpt show - <a.st
like "$out" "^stdin: safetensors" "show -: stdin"

# a tensor name and a metadata value with control characters: escaped
$PY - <<'PY' || exit 1
import json, struct
h = {"__metadata__": {"note": "a\x1b]0;x\x07b"}, "w\nx": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}
b = json.dumps(h).encode()
open("odd.st", "wb").write(struct.pack("<Q", len(b)) + b + b"\0\0\x80\x3f")
PY
run dp-ckpt show odd.st
like "$out" "note: \\$'a\\\\x1b\\]0;x\\\\ab'" "show: a metadata value quoted escaped"
like "$out" "^  \\$'w\\\\nx'"$'\t'"F32" "show: a tensor name quoted escaped"
unlike "$out" $'\x1b' "... no escape character reaches the terminal"

# ---- diff ---------------------------------------------------------------
run dp-ckpt diff a.st again.st
is "$rc:$out" "0:22 tensors compared, 0 differ" "diff: two runs with one seed are bit-identical (exit 0)"
run dp-ckpt diff a.st b.st
is "$rc" 3 "diff: checkpoints that differ: exit 3"
like "$out" "^0\\.weight: 54 of 54 values differ, the largest by [0-9.e-]+ at \\[[0-9], [0-9], [0-9], [0-9]\\] \\(" \
	"diff: a line per tensor: values differing, the largest difference and where"
like "$out" "^1.num_batches_tracked: 1 of 1 values differ, the largest by 5 at \\[\\] \\(5 against 10\\)" \
	"diff: an integer tensor's values"
like "$out" "^22 tensors compared, 22 differ; the largest difference 5, in 1.num_batches_tracked$" "diff: the summary line"
# the largest difference is the one numpy finds
want=$($PY -c '
import sys; sys.path.insert(0, sys.argv[1])
from torch_ref import load_checkpoint
import numpy as np
a, _ = load_checkpoint("a.st"); b, _ = load_checkpoint("b.st")
d = np.abs(a["4.weight"].astype(np.float64) - b["4.weight"])
i = np.unravel_index(np.argmax(d), d.shape)
print("%.6g at [%s]" % (d.max(), ", ".join(map(str, i))))' "$DP_SRC/tests")
like "$out" "^4\\.weight: 192 of 192 values differ, the largest by ${want//[/\\[} " "diff: the largest difference and its index, as numpy finds them"
run dp-ckpt diff --weights --json a.st b.st
is "$($PY -c 'import json,sys; d=json.load(sys.stdin); print(d["tensors"], d["tensors_differ"], d["same"], d["differences"][0]["kind"], d["differences"][0]["of"])' <<<"$out")" \
	"9 9 False values 54" "diff --weights --json: the model's 9 tensors only"
run dp-ckpt diff --tolerance 100 a.st b.st
is "$rc:$out" "0:22 tensors compared, 0 differ" "diff --tolerance: differences within it are the same"
run dp-ckpt diff --tolerance 100 --meta a.st b.st
is "$rc" 3 "diff --meta: metadata counts"
like "$out" "^metadata step: 5 against 10$" "diff --meta: a key that differs"
$PY -c 'import json, struct, sys
for path, meta in (("ma.st", {"x": "1", "a": "q\"z"}), ("mb.st", {"x": "1", "b": "w"})):
    h = json.dumps({"__metadata__": meta, "w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + struct.pack("<f", 1))'
run dp-ckpt diff --meta ma.st mb.st
is "$rc:$out" "3:metadata a: q\"z against (none)
metadata b: (none) against w
1 tensors compared, 0 differ; 2 metadata keys differ" "diff --meta: keys in one of them, against (none)"
run dp-ckpt diff --meta --json ma.st mb.st
like "$out" '"name":"a","a":"q\\"z","b":null},\{"kind":"metadata","name":"b","a":null,"b":"w"\}' "diff --meta --json: keys in one of them, against null"
run dp-ckpt diff -q a.st b.st
is "$rc:$out" "3:" "diff -q: nothing printed, exit 3"
train other.st 1 --model conv:3:3,relu,flatten,dense:4 || exit 1
run dp-ckpt diff --weights a.st other.st
is "$rc" 3 "diff: other models differ"
like "$out" "^1\\.weight: only in a\\.st$" "diff: a tensor only in A"
like "$out" "^1\\.running_mean: only in a\\.st$" "... each one"
train wide.st 1 --model conv:5:3,batchnorm,relu,flatten,dense:4 || exit 1
run dp-ckpt diff --weights a.st wide.st
like "$out" "^0\\.weight: F32 \\[3, 2, 3, 3\\] against F32 \\[5, 2, 3, 3\\]$" "diff: a tensor of another shape"

# ---- export: the weights alone, loaded by PyTorch ---------------------------
run dp-ckpt export a.st -o w.safetensors
is "$rc:$err" "0:" "export: exit 0, nothing said"
run dp-ckpt show w.safetensors
like "$out" "^w.safetensors: safetensors, 9 tensors" "export: the model's 9 tensors"
unlike "$out" "optimizer\\.|rng\\.state|^  (step|epoch|seed|optimizer_steps):" "... no optimizer state, rng.state or training state"
like "$out" "^  model: $SPEC$" "... the model's settings kept"
run dp-ckpt diff w.safetensors a.st --weights
is "$rc" 0 "export: the weights unchanged, bit for bit"
ok test "$(stat -c %s w.safetensors)" -lt "$(($(stat -c %s a.st) / 2))" "export: under half the size of an Adam checkpoint"
dp-eval --model w.safetensors --data img.tfr --predictions pred.jsonl -q || exit 1
if $PY -c 'import torch' 2>/dev/null; then
	run $PY "$DP_SRC/tests/ckpt_ref.py" predict w.safetensors pred.jsonl img.npz "$SPEC" 2x6x6
	is "$rc" 0 "torch: load_state_dict(strict=True) of every tensor; its predictions equal dp-eval's (max diff $out)"
	[ "$rc" = 0 ] || diag "$err"
else
	skip "python3-torch is not installed (scripts/deps --test)"
fi
run dp-train --train img.tfr --resume w.safetensors -q -o r.st
is "$rc" 1 "export: dp-train --resume refuses the weights alone"
run dp-train --train img.tfr --init w.safetensors --input-shape 2x6x6 --model $SPEC --epochs 1 -q -o i.st
is "$rc" 0 "export: dp-train --init takes them"
dp-ckpt export a.st -o - --format safetensors >s.out
run dp-ckpt diff s.out w.safetensors
is "$rc" 0 "export -o - --format: to stdout, the same file"

# ---- usage and failures ---------------------------------------------------
run dp-ckpt
is "$rc" 2 "no command: exit 2"
like "$err" "^dp-ckpt: no command" "... says so"
run dp-ckpt frob a.st
like "$rc:$err" "^2:dp-ckpt: unknown command 'frob'" "an unknown command"
run dp-ckpt show a.st b.st
like "$rc:$err" "^2:dp-ckpt: show takes CKPT" "an extra operand"
run dp-ckpt show --weights a.st
like "$rc:$err" "^2:dp-ckpt: --weights does not apply to show" "an option of another command"
run dp-ckpt export a.st -o w.bin
like "$rc:$err" "^2:dp-ckpt: export: say --format" "export: a name that says no format"
run dp-ckpt export a.st -o w.x --format onnx9
like "$rc:$err" "^2:dp-ckpt: --format: unknown format 'onnx9' \\(safetensors" "export: an unknown format"
run dp-ckpt export a.st
like "$rc:$err" "^2:dp-ckpt: export: -o FILE is needed" "export: no -o"
run dp-ckpt export a.st -o nodir/w.st
like "$rc:$err" "^1:dp-ckpt: nodir/w.st: " "export: an output that cannot be written: exit 1"
head -c 300 a.st >cut.st
run dp-ckpt show cut.st
like "$rc:$err" "^1:dp-ckpt: cut.st: truncated" "a truncated checkpoint: exit 1, named"
run dp-ckpt diff a.st missing.st
like "$rc:$err" "^1:dp-ckpt: missing.st: No such file" "diff: a missing file: exit 1"
printf 'not a checkpoint at all' >junk
run dp-ckpt export junk -o j.st
is "$rc" 1 "export: not a checkpoint: exit 1"
ok test ! -e j.st "... nothing written"
done_testing
