#!/usr/bin/env bash
# ONNX export (dp-ckpt export --format onnx, dp_onnx.h) of every kind of model dp-train trains, checked
# by Debian's python3-onnx (onnx.checker with full checks, strict shape
# inference) and run by an independent numpy evaluator (tests/onnx_ref.py,
# written from the ONNX operator specifications): its probabilities must
# be dp-eval's on the same records within 1e-5.  Models, each trained
# briefly on synthetic data: an MLP with class names; a CNN with batchnorm,
# dropout and a final softmax over uint8 bytes scaled by 1/255;
# channels-last float arrays (a Transpose in the graph); residual blocks
# with a projection shortcut and a block activation, and average pooling;
# the named resnet20; an image model (PNG records, resized, with mean and
# std); a regression model.
. "${DP_SRC:-.}/tests/lib.sh"

cd "$T"
REF="$PY $DP_SRC/tests/onnx_ref.py"
MK="$PY $DP_SRC/tests/mkexamples.py"
require "python3-onnx is not installed (scripts/deps --test)" $PY -c 'import onnx, numpy'

$PY - <<'EOF'
import numpy as np
r = np.random.default_rng(11)
W = r.standard_normal((5, 12))
x = r.standard_normal((120, 12)).astype(np.float32)
np.savez("mlp.npz", x=x, y=np.argmax(x @ W.T, 1))
x = r.integers(0, 256, size=(100, 2, 8, 8))
np.savez("cnn.npz", x=x, y=r.integers(0, 4, 100))
x = r.standard_normal((80, 6, 5, 3)).astype(np.float32)  # (H, W, C) samples
np.savez("hwc.npz", x=x, y=r.integers(0, 3, 80))
x = r.standard_normal((80, 3, 8, 8)).astype(np.float32)
np.savez("res.npz", x=x, y=r.integers(0, 3, 80))
x = r.standard_normal((40, 3, 12, 12)).astype(np.float32)
np.savez("r20.npz", x=x, y=r.integers(0, 10, 40))
x = r.standard_normal((90, 7)).astype(np.float32)
np.savez("reg.npz", x=x, y=np.tanh(x[:, :3]).astype(np.float32))
for name in ("mlp", "cnn", "hwc", "res", "r20", "reg"):
    np.save(f"{name}_x.npy", np.load(f"{name}.npz")["x"].astype(np.float32))
# images: noise PNGs of two sizes, listed in order for --encode images
from PIL import Image
import os
os.makedirs("img", exist_ok=True)
with open("img/list.csv", "w") as f:
    for i in range(24):
        a = r.integers(0, 256, size=(10 + i % 3, 13, 3), dtype=np.uint8)
        Image.fromarray(a).save(f"img/{i}.png")
        f.write(f"{i}.png,{'cat' if i % 2 else 'dog'}\n")
EOF
$MK mlp.tfr npz mlp.npz
$MK cnn.tfr npz cnn.npz --kind uint8
$MK hwc.tfr npz hwc.npz --kind f32bytes
$MK res.tfr npz res.npz
$MK r20.tfr npz r20.npz
$MK reg.tfr npz reg.npz --label-kind vector
tfr-cat --encode images img/list.csv > img.tfr

C=(--epochs 1 --batch-size 16 -q)
dp-train --train mlp.tfr --input-shape 12 --model dense:16,relu,dense:5 "${C[@]}" -o mlp.st
dp-train --train cnn.tfr --decode-raw uint8 --scale 1/255 --input-shape 2x8x8 \
	--model conv:4:3,batchnorm,relu,maxpool:2,dropout:0.3,flatten,dense:4,softmax "${C[@]}" -o cnn.st
dp-train --train hwc.tfr --decode-raw float32 --layout hwc --input-shape 3x6x5 \
	--model conv:4:3:1:same,tanh,maxpool:2:2:1,flatten,dense:3 "${C[@]}" -o hwc.st
dp-train --train res.tfr --input-shape 3x8x8 \
	--model 'conv:8:3:1:1:bias=0,batchnorm,relu,res(conv:8:3:1:1:bias=0,batchnorm,relu,conv:8:3:1:1:bias=0,batchnorm):relu,res(conv:16:3:2:1:bias=0,batchnorm,relu,conv:16:3:1:1:bias=0,batchnorm|conv:16:1:2:bias=0,batchnorm),relu,avgpool:2,flatten,dense:3,sigmoid,dense:3' \
	"${C[@]}" -o res.st
dp-train --train r20.tfr --input-shape 3x12x12 --model resnet20 "${C[@]}" -o r20.st
dp-train --train reg.tfr --input-shape 7 --loss mse --model dense:8,tanh,batchnorm,dense:3 "${C[@]}" -o reg.st
dp-train --train img.tfr --decode image --input-shape 3x8x8 --scale 1/255 --mean 0.5,0.4,0.3 \
	--std 0.2,0.25,0.3 --model conv:4:3,relu,gap,flatten,dense:2 "${C[@]}" -o img.st
for m in mlp cnn hwc res r20 reg img; do
	ok_ckpt $m.st "$m: trained"
done

# check NAME: exported, checked, run against dp-eval's predictions
check() {
	local name=$1 line
	shift
	run dp-ckpt export "$name.st" -o "$name.onnx" ${1:+--classes "$1"}
	is "$rc" 0 "$name: exported${err:+ ($err)}"
	run $REF check "$name.onnx"
	is "$rc" 0 "$name: onnx.checker (full) and strict shape inference pass${err:+: $(tail -n 3 <<<"$err")}"
	echo "$out" > "$name.info"
	like "$out" "uninferred=0" "$name: every value's shape inferred"
	like "$out" "input input batchx" "$name: a dynamic batch axis"
	dp-eval --model "$name.st" "$name.tfr" --predictions "$name.jsonl" -q
	$REF compare "$name.onnx" "${name}_x.npy" "$name.jsonl" > "$name.cmp" 2>&1
	ref_results "$name" "$name.cmp" onnx_ref
}

check mlp a,b,c,d,e
like "$(cat mlp.info)" 'meta classes=\["a", "b", "c", "d", "e"\]' "mlp: class names in the metadata"
like "$(cat mlp.info)" "output probabilities batchx5" "mlp: probabilities (batch, 5)"
check cnn
like "$(cat cnn.info)" "meta scale=1/255" "cnn: the scale in the metadata"
like "$(cat cnn.info)" "ops=BatchNormalization,Conv,Flatten,Gemm,Identity,MaxPool,Mul,Relu,Softmax" \
	"cnn: dropout and the final softmax item left out, the scale a Mul"
check hwc
like "$(cat hwc.info)" "input input batchx6x5x3" "hwc: the input channels-last, as the records"
like "$(cat hwc.info)" "Transpose" "hwc: transposed in the graph"
check res
like "$(cat res.info)" "AveragePool.*Sigmoid" "res: average pooling and sigmoid"
check r20
like "$(cat r20.info)" "GlobalAveragePool" "resnet20: global average pooling"
check reg
like "$(cat reg.info)" "output output batchx3" "reg: one output, (batch, 3)"

# the image model: its input is the pixels after the resize (imgtool:
# dp_image_transform with no scaling), in the order of the list
for i in $(seq 0 23); do "$DP_BUILD/tests/imgtool" transform img/$i.png 3 8 8 none 0 0 0; done > img_x.f32
$PY -c 'import numpy as np; np.save("img_x.npy", np.fromfile("img_x.f32", "<f4").reshape(24, 3, 8, 8))'
check img
like "$(cat img.info)" "meta image=" "img: the resize in the metadata"
like "$(cat img.info)" "Add.*Mul" "img: mean and std in the graph"

# refusals
run dp-ckpt export mlp.st -o bad.onnx --classes a,b
is "$rc" 1 "class names of another count: refused"
like "$err" "2 class names for a model of 5 classes" "... saying why"
ok test ! -e bad.onnx "... and nothing written"
run dp-ckpt export mlp.st -o w.safetensors --classes a,b,c,d,e
is "$rc" 2 "--classes with the safetensors format: usage error"
printf 'not a checkpoint' > junk.st
run dp-ckpt export --format onnx junk.st -o bad.onnx
is "$rc" 1 "not a checkpoint: refused"
like "$err" "junk.st" "... naming the file"
ok test ! -e bad.onnx "... and nothing written"

done_testing
