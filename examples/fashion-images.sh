#!/bin/sh
# examples/fashion-images.sh - Fashion-MNIST as image files: the whole
# training and test sets written by Pillow as PNG and as JPEG (quality 90)
# into class folders, encoded with tfr-cat --encode images, and the MLP
# 784-128-10 trained on each (Adam 1e-3, batch 128, EPOCHS epochs, seed 0)
# beside the same model on the raw pixels (tfr-cat --encode idx).  Prints
# the three test accuracies.  PNG holds the raw pixels exactly (in the same
# record order the weights are the same to the bit: tests/image.t); here
# the folders give the records class by class, so the shuffle and the
# model differ a little; JPEG's artefacts cost what they cost.
# FASHION_DIR keeps the files (default: a temporary directory); EPOCHS
# (default 3); FASHION_N takes the first N images of each set (default all).
set -eu
EPOCHS=${EPOCHS:-3}
N=${FASHION_N:-0}
D=/usr/share/datasets/fashion-mnist
W=${FASHION_DIR:-} # the working folder: FASHION_DIR (kept), else a temporary one
. "$(dirname "$0")/workdir.sh"
cd "$W"
[ -d png ] || /usr/bin/python3 - "$D" "$N" <<'EOF'
import gzip, os, sys
import numpy as np
from PIL import Image
d, n = sys.argv[1], int(sys.argv[2]) or None
for part, name in (("train", "train"), ("test", "t10k")):
    with gzip.open(f"{d}/{name}-images-idx3-ubyte.gz") as f:
        f.read(16); x = np.frombuffer(f.read(), np.uint8).reshape(-1, 28, 28)
    with gzip.open(f"{d}/{name}-labels-idx1-ubyte.gz") as f:
        f.read(8); y = np.frombuffer(f.read(), np.uint8)
    x, y = x[:n], y[:n]
    for i in range(len(y)):
        for fmt, ext, kw in (("png", "png", {}), ("jpg", "jpg", {"quality": 90})):
            p = f"{fmt}/{part}/{y[i]}"
            os.makedirs(p, exist_ok=True)
            Image.fromarray(x[i]).save(f"{p}/{i:05d}.{ext}", **kw)
EOF
for f in png jpg; do
	for part in train test; do
		[ -s $f-$part.tfrecord ] || tfr-cat --encode images $f/$part -o $f-$part.tfrecord
	done
done
H=$([ "$N" -gt 0 ] && echo "-n $N" || true)
[ -s raw-train.tfrecord ] || tfr-cat --encode idx $H $D/train-images-idx3-ubyte.gz \
	$D/train-labels-idx1-ubyte.gz -o raw-train.tfrecord
[ -s raw-test.tfrecord ] || tfr-cat --encode idx $H $D/t10k-images-idx3-ubyte.gz \
	$D/t10k-labels-idx1-ubyte.gz -o raw-test.tfrecord
M="--model flatten,dense:128,relu,dense:10 --input-shape 1x28x28 --scale 1/255 --epochs $EPOCHS
	--batch-size 128 --optimizer adam --lr 1e-3 --shuffle-buffer 60000 --seed 0 -q"
dp-train --train raw-train.tfrecord --decode-raw uint8 $M -o raw.st > /dev/null
dp-train --train png-train.tfrecord --decode image --decode-threads 1 $M -o png.st > /dev/null
dp-train --train jpg-train.tfrecord --decode image --decode-threads 1 $M -o jpg.st > /dev/null
for f in raw png jpg; do
	acc=$(dp-eval --model $f.st --data $f-test.tfrecord | sed -n 's/.* accuracy=\([0-9.]*\) .*/\1/p')
	echo "$f: test accuracy $acc after $EPOCHS epochs"
done
