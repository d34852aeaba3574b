#!/usr/bin/env bash
# dp-eval over several checkpoints: each model's figures those of dp-eval
# on it alone (the JSON's metrics, to the bit), the records read once for
# all (a --data-cmd that counts its runs), a row each, the best by a
# metric in either direction, copied out whole, gated; models that read
# their records otherwise refused; 2 workers under mpirun the same.
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/mpi.sh"
cd "$T" || exit 1

$PY "$DP_SRC/tests/mkexamples.py" tr.tfr blobs --n 120 --shape 64 --classes 4 --seed 1 || exit 1
$PY "$DP_SRC/tests/mkexamples.py" va.tfr blobs --n 200 --shape 64 --classes 4 --seed 2 || exit 1
mkdir -p runs/a runs/b runs/c
e=1
for r in a b c; do
	dp-train --train tr.tfr --model dense:32,relu,dense:4 --input-shape 64 -q --epochs $e --lr 0.02 \
		--optimizer sgd --momentum 0.9 --batch-size 16 -o runs/$r/model.safetensors || exit 1
	e=$((e + 1))
done

# ---- each model as dp-eval alone, the records read once ------------------------------------
run dp-eval --model 'runs/*/model.safetensors' --data-cmd 'echo run >>reads; cat va.tfr' --json all.json
is "$rc" 0 "three models by a glob: exit 0"
is "$(wc -l <reads)" 1 "the records read once for the three"
is "$(grep -c 'runs/./model.safetensors' <<<"$out")" 3 "a row each"
for r in a b c; do
	dp-eval --model runs/$r/model.safetensors --data va.tfr --json $r.json -q || exit 1
done
run $PY - all.json a.json b.json c.json <<'PY'
import json, sys
many = json.load(open(sys.argv[1]))
assert many["format"] == "dp-eval-models/1"
for m, one in zip(many["models"], sys.argv[2:]):
    o = json.load(open(one))
    assert m["metrics"] == o["metrics"], (m["model"]["path"], m["metrics"], o["metrics"])
    assert m["classes"] == o["classes"] and m["confusion_matrix"] == o["confusion_matrix"]
    assert m["model"]["path"] == o["model"]["path"], (m["model"], o["model"])
print(len(many["models"]))
PY
is "$rc:$out" "0:3" "each model's metrics, classes and confusion matrix those of dp-eval on it alone"
[ "$rc" = 0 ] || diag "$err"

# ---- the best --------------------------------------------------------------------------------
best_of() { # METRIC [lowest]: the model with the best value, from a.json b.json c.json
	$PY - "$@" <<'PY'
import json, sys
vals = [(json.load(open(r + ".json"))["metrics"][sys.argv[1]]["value"], r) for r in "abc"]
lo = len(sys.argv) > 2
v = min(vals)[0] if lo else max(vals)[0]
print("runs/%s/model.safetensors" % next(r for x, r in vals if x == v))
PY
}
run dp-eval --model runs/a/model.safetensors --model runs/b/model.safetensors --model runs/c/model.safetensors \
	--data va.tfr --best accuracy --copy-best release.safetensors --json best.json
is "$rc" 0 "--best accuracy --copy-best: exit 0"
want=$(best_of accuracy)
like "$out" "best by accuracy: $want " "the best by accuracy: the highest ($want)"
ok cmp -s release.safetensors "$want" "--copy-best: its bytes"
is "$($PY -c 'import json; print(json.load(open("best.json"))["best"]["model"])')" "$want" "the JSON names it"
run dp-eval --model 'runs/*/model.safetensors' --data va.tfr --best loss -q --json - 
is "$($PY -c 'import json,sys; print(json.load(sys.stdin)["best"]["model"])' <<<"$out")" "$(best_of loss low)" \
	"--best loss: the lowest"
run dp-eval --model 'runs/*/model.safetensors' --data va.tfr --best loss:max -q --json -
is "$($PY -c 'import json,sys; print(json.load(sys.stdin)["best"]["model"])' <<<"$out")" "$(best_of loss)" \
	"--best loss:max: the direction given wins"
run dp-eval --model 'runs/*/model.safetensors' --data va.tfr --best accuracy --require 'accuracy>=0.99' -q
is "$rc" 3 "--require on the best, failing: exit 3"
run dp-eval --model 'runs/*/model.safetensors' --data va.tfr --best accuracy --require 'accuracy>=0.1'
is "$rc" 0 "... passing: exit 0"
like "$out" "gate accuracy>=0.1: [0-9.]+ passed" "... the gate reported"

# ---- refused -------------------------------------------------------------------------------------
dp-train --train tr.tfr --model dense:8,relu,dense:4 --input-shape 64 -q --feature other --max-steps 1 \
	-o other.safetensors --label label --feature image 2>/dev/null
$PY - other.safetensors <<'PY'
import json, struct, sys
p = sys.argv[1]; d = open(p, "rb").read(); n = struct.unpack("<Q", d[:8])[0]
h = json.loads(d[8:8 + n]); h["__metadata__"]["feature"] = "pixels"
b = json.dumps(h).encode(); b += b" " * ((8 - len(b) % 8) % 8)
open(p, "wb").write(struct.pack("<Q", len(b)) + b + d[8 + n:])
PY
run dp-eval --model runs/a/model.safetensors --model other.safetensors --data va.tfr
is "$rc" 2 "a model that reads another feature: exit 2"
like "$err" "other.safetensors reads its records otherwise than runs/a/model.safetensors \(feature pixels" "... saying how"
run dp-eval --model 'runs/*/model.safetensors' --data va.tfr --predictions p.jsonl
like "$rc:$err" "^2:.*--predictions: one model at a time" "--predictions with several: exit 2"
run dp-eval --model 'runs/*/model.safetensors' --data va.tfr --require 'accuracy>0.1'
like "$rc:$err" "^2:.*gates the best: give --best" "--require with several and no --best: exit 2"
run dp-eval --model 'runs/*/nothing.st' --data va.tfr
like "$rc:$err" "^2:.*no checkpoint matches" "a glob that matches nothing: exit 2"
run dp-eval --model 'runs/*/model.safetensors' --data va.tfr --best bogus
like "$rc:$err" "^2:.*--best bogus: no metric 'bogus'" "an unknown metric: exit 2"

# ---- 2 workers --------------------------------------------------------------------------------
if have_mpirun; then
	run mpi 2 dp-eval --model 'runs/*/model.safetensors' --data va.tfr --best accuracy -q --json mpi.json
	is "$rc" 0 "2 workers: exit 0"
	run $PY -c 'import json,sys; a=json.load(open("mpi.json")); b=json.load(open("best.json")); assert [m["metrics"] for m in a["models"]] == [m["metrics"] for m in b["models"]] and a["best"] == b["best"]'
	is "$rc" 0 "2 workers: every model's metrics and the best, to the bit, as one process"
else
	skip "mpirun is not installed" 2
fi
done_testing
