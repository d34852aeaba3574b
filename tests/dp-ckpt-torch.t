#!/usr/bin/env bash
# PyTorch's own files, both ways, against torch itself (Debian python3-torch and
# python3-torchvision, tests/ckpt_ref.py; every load there torch.load(weights_only=True)):
#  1. torch.save's zip format (pickle protocols 2 and 4), the legacy format (2 and 4),
#     a state_dict wrapped in a dict, tensors that are not plain (transposed, sliced,
#     float16, bfloat16, int32, bool, a scalar, shared), and the legacy format of
#     torch 0.3 (torchvision's first hub files): dp-ckpt import gives exactly
#     torch.load's tensors, names in order, dtypes, shapes, bits;
#  2. torchvision's resnet18 from a .pth: dp-ckpt import --model resnet18:10, and
#     dp-train --init of the .pth itself; dp-eval's predictions equal torchvision's
#     (strict load); an old file without num_batches_tracked too;
#  3. back: dp-ckpt export -o x.pth of a dp-train checkpoint (Adam's state and
#     rng.state left out) loads with torch.load(weights_only=True) and
#     load_state_dict(strict=True) into the Sequential and into torchvision's
#     resnet18, predictions equal dp-eval's; the same bytes twice;
#  4. refused, as torch.load(weights_only=True) refuses them, without running
#     anything: a pickle calling os.system, a whole nn.Module, TorchScript; and
#     damaged archives (truncated, a flipped byte), named.
. "${DP_SRC:-.}/tests/lib.sh"

require_ref ckpt_ref.py "python3-torch or python3-torchvision is not installed (scripts/deps --test)"
cd "$T" || exit 1
SPEC=conv:3:3,batchnorm,relu,flatten,dense:5,relu,dense:4
SHAPE=2x6x6

# ---- 1. every form of torch.save, read as torch reads it --------------------------
for f in "zip" "zip --protocol 4" "legacy --legacy" "legacy4 --legacy --protocol 4" \
	"wrap --wrap" "odd --odd" "oddlegacy --odd --legacy" "old --old"; do
	set -- $f
	name=$1
	shift
	$REF save "$SPEC" "$SHAPE" 3 "$name.pth" "$@" || exit 1
	run dp-ckpt import "$name.pth" -o "$name.st"
	is "$rc:$err" "0:" "import $name.pth ($*)"
	run $REF same "$name.st" "$name.pth" $(case "$*" in *protocol*) echo --trusted ;; esac)
	is "$rc" 0 "... exactly torch.load's tensors: $out"
done
run dp-ckpt show zip.pth
like "$out" "^zip.pth: pth, 11 tensors" "show reads a .pth"
like "$out" $'^  1.num_batches_tracked\tI64\t\\[\\]\tbuffer$' "... its tensors and their roles"
run dp-ckpt show - <legacy.pth
like "$out" "^stdin: pth, 11 tensors" "show reads a .pth from a pipe"
run dp-ckpt diff zip.pth legacy.pth
is "$rc:$out" "0:11 tensors compared, 0 differ" "diff: one state_dict in two formats is the same"

# ---- 2. torchvision's resnet18 in: its predictions, in dp-eval --------------------
$PY -c '
import numpy as np
r = np.random.default_rng(4)
np.savez("img.npz", x=r.standard_normal((6, 3, 32, 32)).astype(np.float32), y=r.integers(0, 10, 6))' || exit 1
$PY "$DP_SRC/tests/mkexamples.py" img.tfr npz img.npz || exit 1
$REF tv-save 18 10 1 r18.pth || exit 1
run dp-ckpt import r18.pth --model resnet18:10 --input-shape 3x32x32 -o r18.st
is "$rc:$err" "0:" "import resnet18.pth --model resnet18:10"
run dp-ckpt show r18.st
like "$out" "^parameters: 11181642 in 62 tensors$" "... torchvision's parameter count"
dp-eval --model r18.st --data img.tfr --predictions pred.jsonl -q || exit 1
run $REF tv-predict 18 10 r18.pth pred.jsonl img.npz
is "$rc" 0 "dp-eval's predictions of the import are torchvision's (max diff $out)"
dp-train --train img.tfr --init r18.pth --model resnet18 --classes 10 --input-shape 3x32x32 \
	--lr 0 --optimizer sgd --batch-size 6 --epochs 1 -q -o i18.st >/dev/null
run dp-ckpt diff --weights i18.st r18.st
is "$(grep -v -E '^[^ ]*(running_mean|running_var|num_batches_tracked): |^122 tensors compared' <<<"$out")" "" \
	"dp-train --init r18.pth: the parameters of the import (lr 0; running statistics moved)"
$REF tv-save 18 10 2 old18.pth --old || exit 1
run dp-ckpt import old18.pth --model resnet18:10 --input-shape 3x32x32 -o old18.st
is "$rc:$err" "0:" "import of torch 0.3's legacy format without num_batches_tracked"
dp-eval --model old18.st --data img.tfr --predictions pred-old.jsonl -q || exit 1
run $REF tv-predict 18 10 old18.pth pred-old.jsonl img.npz
is "$rc" 0 "... its predictions are torchvision's (max diff $out)"
run dp-ckpt import r18.pth --model resnet18:100 --input-shape 3x32x32 -o bad.st
like "$rc:$err" "^1:dp-ckpt: r18.pth: tensor 'fc.weight' is F32 \\[10, 512\\], the model needs F32 \\[100, 512\\]" \
	"import --model of another model: the first tensor that differs"
ok test ! -e bad.st "... nothing written"
run dp-ckpt import odd.pth --model "$SPEC" --input-shape $SHAPE -o bad.st
like "$rc:$err" "^1:dp-ckpt: odd.pth: tensor 't' is not in the model" "import --model: a tensor the model lacks"

# ---- 3. out: .pth for torch ----------------------------------------------------
$PY -c '
import numpy as np
r = np.random.default_rng(5)
np.savez("small.npz", x=r.standard_normal((40, 2, 6, 6)).astype(np.float32), y=r.integers(0, 4, 40))' || exit 1
$PY "$DP_SRC/tests/mkexamples.py" small.tfr npz small.npz || exit 1
dp-train --train small.tfr --input-shape $SHAPE --model $SPEC --batch-size 8 --epochs 2 -q -o ck.st >/dev/null || exit 1
run dp-ckpt export ck.st -o w.pth
is "$rc:$err" "0:" "export ck.st -o w.pth"
run dp-ckpt show w.pth
like "$out" "^w.pth: pth, 11 tensors" "... the 11 tensors of the model, no optimizer state or rng.state"
run dp-ckpt diff --weights w.pth ck.st
is "$rc" 0 "... the weights, bit for bit"
dp-eval --model ck.st --data small.tfr --predictions pred-ck.jsonl -q || exit 1
run $REF predict w.pth pred-ck.jsonl small.npz "$SPEC" $SHAPE
is "$rc" 0 "torch.load(weights_only=True) + load_state_dict(strict=True): dp-eval's predictions (max diff $out)"
dp-ckpt export ck.st -o w2.pth && same_file w.pth w2.pth "export: the same bytes every time"
run dp-ckpt export r18.st -o r18-back.pth
run $REF tv-predict 18 10 r18-back.pth pred.jsonl img.npz
is "$rc" 0 "resnet18 exported: torchvision loads it strictly, predictions dp-eval's (max diff $out)"
run $REF same r18.st r18-back.pth
is "$rc" 0 "... the same tensors as went in"
run $PY - <<'PY'
import struct, zipfile
z = zipfile.ZipFile("w.pth")
raw = open("w.pth", "rb").read()
def data_at(i):  # after the local header, whose extra field is not the central one's
    n, x = struct.unpack("<HH", raw[i.header_offset + 26:i.header_offset + 30])
    return i.header_offset + 30 + n + x
bad = [i.filename for i in z.infolist() if i.compress_type != 0 or data_at(i) % 64]
assert not bad, bad
assert z.testzip() is None
PY
is "$rc:$err" "0:" "export: zip entries stored at 64-byte boundaries, CRCs right (Python's zipfile)"

# ---- 4. refused ------------------------------------------------------------------
$REF evil evil.pth || exit 1
run dp-ckpt show evil.pth
like "$rc:$err" "^1:dp-ckpt: evil.pth: data.pkl: byte [0-9]+: posix.system is not allowed" \
	"a pickle calling os.system: refused, named"
ok test ! -e pwned "... and nothing ran"
run $REF refuses evil.pth
is "$rc" 0 "... as torch.load(weights_only=True) refuses it: $out"
run dp-train --train small.tfr --init evil.pth --model $SPEC --input-shape $SHAPE -q -o x.st
like "$rc:$err" "^1:dp-train: evil.pth: data.pkl: byte [0-9]+: posix.system is not allowed" "dp-train --init refuses it too"
$REF module module.pth || exit 1
run dp-ckpt show module.pth
like "$rc:$err" "^1:dp-ckpt: module.pth: data.pkl: byte [0-9]+: torch.nn.modules.container.Sequential is not allowed" \
	"a whole nn.Module: refused, named"
$REF script script.pt || exit 1
run dp-ckpt show script.pt
like "$rc:$err" "^1:dp-ckpt: script.pt: a TorchScript archive" "TorchScript: refused, with what to do"
head -c 2000 zip.pth >cut.pth
run dp-ckpt show cut.pth
like "$rc:$err" "^1:dp-ckpt: cut.pth: not a zip archive torch.save could write" "a truncated archive"
head -c 1500 legacy.pth >cut-legacy.pth
run dp-ckpt show cut-legacy.pth
like "$rc:$err" "^1:dp-ckpt: cut-legacy.pth: " "a truncated legacy file"
# a byte of a tensor flipped: the zip's CRC
off=$($PY -c '
import struct, zipfile
z = zipfile.ZipFile("zip.pth")
raw = open("zip.pth", "rb").read()
i = [x for x in z.infolist() if "/data/" in x.filename and x.file_size > 8][0]
n, x = struct.unpack("<HH", raw[i.header_offset + 26:i.header_offset + 30])
print(i.header_offset + 30 + n + x + 3)')
cp zip.pth flip.pth
printf '\377' | dd of=flip.pth bs=1 seek="$off" conv=notrunc status=none
run dp-ckpt show flip.pth
like "$rc:$err" "^1:dp-ckpt: flip.pth: zip/data/[0-9]+: CRC error" "a flipped byte of a tensor: the CRC, naming the record"
done_testing
