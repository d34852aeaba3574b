#!/usr/bin/env bash
# dp-ckpt(1): the page formats without warnings, documents every option
# and command of --help, and its examples run, in order, in one scratch
# directory holding what they name: a small classifier trained twice with
# one seed (model.safetensors, again.safetensors) and once for longer, and
# a .pth of torch.save (mlp.pth).
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/man-examples.sh"

PAGE="$DP_SRC/man/man1/dp-ckpt.1"
cd "$T" || exit 1
man_lint "$PAGE"
for s in SYNOPSIS DESCRIPTION OPTIONS "EXIT STATUS" EXAMPLES "SEE ALSO"; do
	like "$(cat page.txt)" "^$s" "has $s"
done
for o in $(dp-ckpt --help | grep -oE -- '--[a-z][a-z-]+|(^| )-[a-zA-Z]\b' | sort -u); do
	like "$(cat page.txt)" "(^|[ ,[])\\$o\b" "documents $o"
done
for c in $(dp-ckpt --help | sed -n '/^Commands:/,/^$/s/^  \([a-z]*\) .*/\1/p'); do
	like "$(cat page.txt)" "^ +$c " "documents the command $c"
done
like "$(cat page.txt)" "program of its own" "says why it is a program of its own"

mkdir ex && cd ex
$PY -c '
import numpy as np
r = np.random.default_rng(2)
np.savez("v.npz", x=r.standard_normal((64, 10)).astype(np.float32), y=r.integers(0, 3, 64))' || exit 1
$PY "$DP_SRC/tests/mkexamples.py" v.tfrecord npz v.npz || exit 1
tr() { dp-train --train v.tfrecord --input-shape 10 --model dense:8,relu,dense:3 --batch-size 16 -q "$@" >/dev/null; }
tr --epochs 1 -o model.safetensors && tr --epochs 1 -o again.safetensors &&
	tr --epochs 3 -o longer.safetensors || exit 1
# PyTorch's weights for the import example (without torch: dp-ckpt's own .pth)
$PY "$DP_SRC/tests/ckpt_ref.py" save dense:8,relu,dense:3 10 1 mlp.pth 2>/dev/null ||
	dp-ckpt export longer.safetensors -o mlp.pth || exit 1
man_examples "$PAGE" ../examples
run_examples ../examples
ok test "$n" -ge 4 "the page has examples ($n)"
like "$(cat out.1)" "^parameters: 115 in 4 tensors$" "example 1: the parameter count"
is "$(cat out.2)" "identical" "example 2: one seed, the same weights"
like "$(cat out.3)" "^4 tensors compared, 4 differ; the largest difference [0-9.e-]+, in [0-9]\\.(weight|bias)$" "example 3: the summary line"
is "$(cat out.4)" '"optimizer":0' "example 4: no optimizer state in the export"
is "$(cat out.5)" 1 "example 5: a .pth imported, evaluated"
is "$(cat out.6)" "4 tensors compared, 0 differ" "example 6: exported as .pth, the same weights"
done_testing
