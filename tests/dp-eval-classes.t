#!/usr/bin/env bash
# Class names that travel with the model (issue 25): dp-train keeps the names
# its image records give (image/class/text) or --classes NAMES|@FILE in the
# checkpoint; dp-eval uses them by default in the report, the JSON, the
# predictions and gates, names with spaces included ('recall[Ankle boot]'),
# and each prediction of an image record names its image (image/filename);
# the names and the label of each file are torchvision ImageFolder's (its
# classes and samples, the peer); records whose names disagree keep none; a
# bad gate lists the per-class forms and the names.
. "${DP_SRC:-.}/tests/lib.sh"
cd "$T" || exit 1

$PY "$DP_SRC/tests/mkphotos.py" photos 5 || exit 1
mkdir -p "photos/Ankle boot" && cp photos/dog/0.jpg "photos/Ankle boot/x.jpg" && cp photos/cat/1.jpg "photos/Ankle boot/y.jpg"
tfr-cat --encode images --classes-out classes.txt photos >photos.tfr || exit 1
IMG="--decode image --input-shape 3x16x16 --scale 1/255"
run dp-train --train photos.tfr $IMG --model flatten,dense:3 --epochs 2 -q -o m.st
is "$rc" 0 "dp-train on image records"
is "$(dp-ckpt show --json m.st | $PY -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["classes"])')" \
	'["Ankle boot","cat","dog"]' "the checkpoint keeps the records' class names, in label order"

# the peer: torchvision's ImageFolder on the same folder
if $PY -c 'import torchvision' 2>/dev/null; then
	run $PY -c '
import json, sys, torchvision
f = torchvision.datasets.ImageFolder("photos")
print(json.dumps(f.classes, separators=(",", ":")))
for path, i in f.samples:
    print(path[len("photos/"):], i)'
	is "$(head -n 1 <<<"$out")" '["Ankle boot","cat","dog"]' "ImageFolder's classes are the same, in the same order"
	tail -n +2 <<<"$out" | sort >peer.txt
else
	skip "python3-torchvision is not installed (scripts/deps --test)"
fi

# ---- dp-eval names them without --classes ---------------------------------------
run dp-eval --model m.st --data photos.tfr
is "$rc" 0 "dp-eval without --classes"
like "$out" "  Ankle boot$" "the report names the classes"
run dp-eval --model m.st --data photos.tfr -q --require 'recall[Ankle boot]>=0' --require "f1['cat']>=0" \
	--json metrics.json
is "$rc" 0 "gates by name, a space in it, quoted or not"
like "$(cat metrics.json)" '"class": 0, "name": "Ankle boot"' "the metrics JSON names the classes"
run dp-eval --check metrics.json --require 'recall[Ankle boot]>=0' --require "support['dog']>=5"
is "$rc" 0 "--check: gates by name on the metrics JSON"
run dp-eval --model m.st --data photos.tfr -q --require 'recall[Ankle boots]>=0'
is "$rc" 2 "a gate on a class the model does not have: usage error"
like "$err" "no class of that name \\(a number 0\\.\\.2, or one of Ankle boot, cat, dog\\)" "... listing the names"
run dp-eval --model m.st --data photos.tfr -q --require 'recal[cat]>=0'
like "$err" "per class C: 0\\.\\.2 or a name: Ankle boot, cat, dog" "a metric it does not have: the per-class forms and the names"
dp-eval --model m.st --data photos.tfr -q --predictions pred.jsonl || exit 1
is "$(head -n 1 pred.jsonl | $PY -c 'import json,sys; d=json.loads(sys.stdin.read()); print(d["filename"], d["label"], d["label_name"], "predicted_name" in d)')" \
	"Ankle boot/x.jpg 0 Ankle boot True" "a prediction names its image and its classes"
$PY -c '
import json
for l in open("pred.jsonl"):
    d = json.loads(l)
    print(d["filename"], d["label"])' | sort >ours.txt
if [ -s peer.txt ]; then
	same_file ours.txt peer.txt "every image's file name and label are ImageFolder's"
else
	skip "no ImageFolder to compare with"
fi
dp-eval --model m.st --data photos.tfr -q --predictions pred.tfrecord || exit 1
like "$(tfr-cat -j pred.tfrecord | head -n 1)" '"filename":\{"bytes":\["' "TFRecord predictions carry the file name too"
run dp-eval --model m.st --data photos.tfr --classes 'a,b,c' -q --require 'recall[b]>=0'
is "$rc" 0 "--classes overrides the checkpoint's names"

# ---- dp-train --classes NAMES|@FILE, kept through --resume -------------------------
$PY -c '
import numpy as np
r = np.random.default_rng(1)
np.savez("v.npz", x=r.standard_normal((30, 6)).astype(np.float32), y=r.integers(0, 3, 30))' || exit 1
$PY "$DP_SRC/tests/mkexamples.py" v.tfr npz v.npz || exit 1
printf 'T-shirt/top\nAnkle boot\nBag\n' >names.txt
run dp-train --train v.tfr --input-shape 6 --model dense:3 --classes @names.txt --epochs 1 -q -o n.st
is "$rc" 0 "dp-train --classes @FILE on a model that is not a named one"
run dp-eval --model n.st --data v.tfr -q --require 'support[Ankle boot]>=1' --require 'recall[T-shirt/top]>=0'
is "$rc" 0 "dp-eval's gates take the names the checkpoint kept"
dp-train --train v.tfr --resume n.st --epochs 2 -q -o n2.st >/dev/null || exit 1
is "$(dp-ckpt show --json n2.st | $PY -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["classes"])')" \
	'["T-shirt/top","Ankle boot","Bag"]' "--resume keeps them"
run dp-train --train v.tfr --input-shape 6 --model dense:3 --classes 'a,b' -q -o x.st
is "$rc" 2 "--classes: too few names for the model: usage error"
like "$err" "2 names for a model of 3 classes" "... says so"
run dp-train --train v.tfr --input-shape 6 --model dense:3 --classes 'a,b,a' -q -o x.st
like "$rc:$err" "^2:dp-train: --classes: .*'a' twice" "--classes: a name twice"
run dp-train --train photos.tfr $IMG --model resnet20 --classes @classes.txt --max-steps 1 -q -o r.st
is "$rc" 0 "--classes @FILE gives a named model its outputs"
like "$(dp-ckpt show r.st)" '  model: resnet20:3$' "... resnet20:3"

# ---- records that disagree keep no names -------------------------------------------
# image records (JSON with the JPEG's bytes), class 1 named "dog", then "wolf"
$PY - <<'PY' || exit 1
import base64, json
jpg = base64.b64encode(open("photos/cat/0.jpg", "rb").read()).decode()
def rec(label, text):
    return {"image/encoded": {"bytes": [jpg]}, "image/class/label": {"int64": [label]},
            "image/class/text": {"bytes": [base64.b64encode(text.encode()).decode()]}}
rows = [rec(0, "cat"), rec(1, "dog"), rec(0, "cat"), rec(1, "wolf")]
open("odd.jsonl", "w").write("".join(json.dumps(r) + "\n" for r in rows))
open("ok.jsonl", "w").write("".join(json.dumps(r) + "\n" for r in rows[:3]))
PY
tfr-cat --encode json odd.jsonl >odd.tfr && tfr-cat --encode json ok.jsonl >ok.tfr || exit 1
dp-train --train ok.tfr $IMG --model flatten,dense:2 -q -o ok.st >/dev/null || exit 1
is "$(dp-ckpt show --json ok.st | $PY -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["classes"])')" \
	'["cat","dog"]' "image records made by hand: their names kept"
dp-train --train odd.tfr $IMG --model flatten,dense:2 -q -o o.st >/dev/null || exit 1
is "$(dp-ckpt show --json o.st | $PY -c 'import json,sys; print(repr(json.load(sys.stdin)["metadata"]["classes"]))')" \
	"''" "a class under two names: no names kept rather than a wrong one"
dp-train --train ok.tfr $IMG --model flatten,dense:3 -q -o three.st >/dev/null || exit 1
is "$(dp-ckpt show --json three.st | $PY -c 'import json,sys; print(repr(json.load(sys.stdin)["metadata"]["classes"]))')" \
	"''" "a class never met: no names"
done_testing
