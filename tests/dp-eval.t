#!/usr/bin/env bash
# dp-eval's command line: options, the report, the metrics JSON, gates and
# their exit status, --check, predictions joined back to the inputs, input
# forms (files, globs, gzip, stdin, a command), bad input named and never
# leaving a metrics file, write errors.
. "${DP_SRC:-.}/tests/lib.sh"

cd "$T"
MK="$PY $DP_SRC/tests/mkexamples.py"
$MK train.tfr random --n 400 --shape 12 --classes 5 --seed 1
$MK test.tfr random --n 150 --shape 12 --classes 5 --seed 2
$MK more.tfr.gz random --n 20 --shape 12 --classes 5 --seed 3 --gzip
$MK reg.tfr random --n 60 --shape 12 --label-kind vector:3 --seed 4
dp-train --train train.tfr --input-shape 12 --model dense:16,relu,dense:5 --epochs 2 -q \
	-o m.st > /dev/null
dp-train --train reg.tfr --input-shape 12 --loss mse --model dense:8,tanh,dense:3 -q \
	-o r.st > /dev/null
# json FILE EXPR: a Python expression over the JSON document j
json() { $PY -c "import json, sys; j = json.load(open(sys.argv[1])); print($2)" "$1"; }

# ---- options ----
run dp-eval --help
is "$rc" 0 "--help exits 0"
for o in --model --data --data-cmd --feature --label --decode-raw --scale --batch-size \
	--threads --top-k --classes --json --predictions --predictions-format --require --check \
	--quiet --version; do
	like "$out" -- "$o" "--help lists $o"
done
run dp-eval --version
like "$out" '^dp-eval \(dptools\) [0-9]+\.[0-9]+' "--version"
run dp-eval --bogus
is "$rc" 2 "an unknown option: exit 2"
like "$err" '^usage: dp-eval' "an unknown option: one-line usage"
run dp-eval --data test.tfr
is "$rc" 2 "no --model: exit 2"
like "$err" 'no checkpoint' "no --model: says so"
run dp-eval --model m.st
is "$rc" 2 "no data: exit 2"
run dp-eval --model m.st test.tfr --require 'accuracy=0.5'
is "$rc" 2 "a malformed gate: exit 2"
like "$err" "accuracy=0.5.*< <= > >=" "a malformed gate: names the operators"
run dp-eval --model m.st test.tfr --require 'r2>0.5' --json never.json
is "$rc" 2 "a gate on a metric the model does not have: exit 2"
like "$err" "no metric 'r2'.*accuracy" "... listing the metrics there are"
ok test ! -e never.json "... before anything is written"
run dp-eval --model m.st test.tfr --scale 1e39
is "$rc" 2 "--scale 1e39: exit 2"
like "$err" "^dp-eval: --scale '1e39': beyond float32's range" "... naming --scale"
run dp-eval --model m.st test.tfr --top-k 5
is "$rc" 2 "--top-k as large as the classes: exit 2"
like "$err" "^dp-eval: --top-k 5: want fewer than the model's 5 classes" "... says what is wanted"
run dp-eval --model m.st test.tfr --require 'recall[7]>0.5'
like "$err" "no metric 'recall\[7\]': class 7 is outside 0..4 \(the model has 5 classes\)" "a gate on a class past the model's: said so"

# ---- the report ----
run dp-eval --model m.st test.tfr
is "$rc" 0 "evaluates"
like "$out" "^m.st: 150 samples from test.tfr" "report: what was evaluated"
like_text "$out" $'\n''samples=150 skipped=0 skipped_fraction=0 loss=[0-9.]+ accuracy=[0-9.]+ precision_macro=' "report: a logfmt line of the metrics"
like_text "$out" "macro avg .* 150"$'\n'"weighted avg" "report: averages, as classification_report"
like "$out" "confusion matrix \(rows: label, columns: prediction\)" "report: confusion matrix"
run metrics-grep --logfmt=accuracy,f1_macro --last <<< "$(dp-eval --model m.st test.tfr)"
like "$out" "accuracy	0\.[0-9]+" "metrics-grep --logfmt reads the report"
run dp-eval -q --model m.st test.tfr
is "$out" "" "-q: no report"

# ---- the metrics JSON ----
run dp-eval --model m.st --data test.tfr --json m.json
is "$rc" 0 "--json"
ok $PY -c 'import json; json.load(open("m.json"))' "valid JSON"
is "$(json m.json 'j["format"], j["samples"], j["workers"], sorted(j["metrics"])')" \
	"dp-eval/1 150 1 ['accuracy', 'f1_macro', 'f1_weighted', 'loss', 'precision_macro', 'precision_weighted', 'recall_macro', 'recall_weighted', 'samples', 'skipped', 'skipped_fraction']" \
	"format, samples, workers, metric names"
is "$(json m.json 'j["model"]["spec"], j["model"]["input_shape"], j["model"]["loss"], j["model"]["step"], j["data"]["sources"]')" \
	"dense:16,relu,dense:5 12 xent 26 ['test.tfr']" "model and data"
is "$(json m.json 'len(j["classes"]), sum(c["support"] for c in j["classes"]), sum(map(sum, j["confusion_matrix"]))')" \
	"5 150 150" "per-class entries and confusion matrix add up"
is "$(json m.json 'j["metrics"]["accuracy"]["value"] == sum(j["confusion_matrix"][i][i] for i in range(5)) / 150')" \
	"True" "accuracy is the confusion matrix's diagonal"
is "$(ls -a | grep -c tmp)" 0 "no temporary file left"
run dp-eval --model m.st --data test.tfr --json -
ok $PY -c 'import json, sys; json.loads(sys.argv[1])' "$out" "--json -: the JSON alone on stdout"

# ---- gates ----
acc=$(json m.json 'j["metrics"]["accuracy"]["value"]')
run dp-eval --model m.st test.tfr --require "accuracy>=$acc" --require 'loss<100' -q
is "$rc" 0 "gates that hold: exit 0"
run dp-eval --model m.st test.tfr --require "accuracy>$acc" --require 'loss<100' --json g.json
is "$rc" 3 "a gate that fails: exit 3"
like "$err" "gate accuracy>$acc failed: accuracy is $acc" "... with a message"
like_text "$out" "gate loss<100: [0-9.]+ passed"$'\n' "... the report shows each gate"
is "$(json g.json 'j["passed"], [(g["metric"], g["op"], g["passed"]) for g in j["gates"]]')" \
	"False [('accuracy', '>', False), ('loss', '<', True)]" "... and the JSON is written, gates recorded"
run dp-eval --model m.st test.tfr --require 'recall[2]>=0' --require 'support[4]>0' -q
is "$rc" 0 "per-class gates"

# --check: gates on a JSON written before
run dp-eval --check m.json --require "accuracy>=$acc"
is "$rc" 0 "--check: a gate that holds"
is "$out" "gate accuracy>=$acc: $acc passed" "--check: the gate, the value, the verdict"
run dp-eval --check m.json --require 'f1_macro>1' --require "accuracy>=$acc"
is "$rc" 3 "--check: a gate that fails: exit 3"
like "$err" "m.json: gate f1_macro>1 failed" "--check: names the file and gate"
run dp-eval --check m.json --require 'recall[1]>=0' --require 'precision[0]>=0'
is "$rc" 0 "--check: per-class metrics"
run dp-eval --check m.json --require 'r2>0'
is "$rc" 2 "--check: an unknown metric: exit 2"
like "$err" "has no metric 'r2' \(it has samples, skipped, skipped_fraction, loss, accuracy" "... listing those there are"
echo '{"metrics": 3' > broken.json
run dp-eval --check broken.json --require 'loss<1'
is "$rc" 1 "--check: broken JSON: exit 1"
like "$err" "broken.json: line 2" "... with the position"
run dp-eval --check m.json
is "$rc" 2 "--check without --require: exit 2"
echo '{"metrics":{"accuracy":5}}' > a5.json
run dp-eval --check a5.json --require 'accuracy>0.5'
is "$rc" 1 "--check: a metric not of dp-eval's form: exit 1"
is "$err" 'dp-eval: a5.json: metric '"'accuracy'"' is 5, not of the expected form {"value": NUMBER}' "... says so, with what it is"
echo '{"metrics":{"loss":{"value":1}},"classes":[{"class":0,"recall":"high"}]}' > rc.json
run dp-eval --check rc.json --require 'recall[0]>0.5'
like "$err" "rc.json: metric 'recall\[0\]' is \"high\", not of the expected form \(a number or null\)" "... a per-class value too"
mkdir cdir
run dp-eval --check cdir --require 'accuracy>0.5'
is "$rc" 1 "--check a directory: exit 1"
is "$err" "dp-eval: cdir: is a directory, not a metrics JSON" "... says it is a directory"
run dp-eval --check nothere.json --require 'accuracy>0.5'
is "$err" "dp-eval: nothere.json: No such file or directory" "--check a missing file: named once"

# ---- predictions ----
run dp-eval --model m.st test.tfr more.tfr.gz --predictions p.jsonl -q
is "$rc" 0 "--predictions"
is "$(wc -l < p.jsonl)" 170 "one line per record"
# join back: each (file, record) names its input record, whose label is the prediction's label
tfr-cat -j test.tfr more.tfr.gz | $PY -c '
import json, sys
labels = [json.loads(l)["label"]["int64"][0] for l in sys.stdin]
rows = [json.loads(l) for l in open("p.jsonl")]
idx = [r["record"] + (150 if r["file"] == "more.tfr.gz" else 0) for r in rows]
ok = sorted(idx) == list(range(170)) and all(labels[i] == r["label"] for i, r in zip(idx, rows))
ok = ok and all(abs(sum(r["probabilities"]) - 1) < 1e-5 and len(r["probabilities"]) == 5 for r in rows)
sys.exit(0 if ok else 1)' > /dev/null
is "$?" 0 "each (file, record) joins back to its input: labels match, probabilities sum to 1"
run dp-eval --model m.st test.tfr --predictions p.tfrecord -q
is "$(tfr-cat -c p.tfrecord)" 150 "predictions as TFRecord (by the name)"
like "$(tfr-cat -j -n 1 p.tfrecord)" '"file":\{"bytes":\["dGVzdC50ZnI="\]\}.*"predicted":\{"int64":\[[0-4]\]\}.*"probabilities":\{"float":\[' \
	"... Examples with file (base64 of test.tfr), record, label, predicted, probabilities"
run dp-eval --model m.st test.tfr --predictions p.out --predictions-format tfrecord -q
is "$(tfr-cat -c p.out)" 150 "--predictions-format tfrecord"
run dp-eval --model m.st test.tfr --predictions p.tfr.gz -q
is "$(tfr-cat -c p.tfr.gz)" 150 "... gzip with .gz"
run dp-eval --model m.st test.tfr --predictions - --json m2.json
is "$(printf '%s\n' "$out" | wc -l)" 150 "--predictions -: the predictions alone on stdout"
run dp-eval --model m.st test.tfr --predictions - --json -
is "$rc" 2 "--predictions - and --json - together: exit 2"

# ---- inputs ----
ref=$(json m.json 'j["metrics"]')
run dp-eval --model m.st --data - --json s.json -q < test.tfr
is "$(json s.json 'j["metrics"]')" "$ref" "stdin: the same metrics"
run dp-eval --model m.st --data-cmd 'cat test.tfr' --json c.json -q
is "$(json c.json 'j["metrics"]')" "$ref" "--data-cmd: the same metrics"
mkdir d && cp test.tfr d/a.tfr && gzip -c test.tfr > d/b.tfr.gz
run dp-eval --model m.st --data 'd/*' --json gl.json -q
is "$(json gl.json 'j["samples"], j["data"]["sources"]')" "300 ['d/a.tfr', 'd/b.tfr.gz']" "a glob, gzip detected"
# a name that exists is that file; only one that does not is a pattern
mkdir lit && cp test.tfr 'lit/d[1].tfr' && $MK lit/d1.tfr random --n 7 --shape 12 --classes 5 --seed 6
run dp-eval --model m.st 'lit/d[1].tfr' --json lit.json -q
is "$(json lit.json 'j["samples"], j["data"]["sources"]')" "150 ['lit/d[1].tfr']" "a name with [ ] that exists: that file"
run dp-eval --model m.st lit/* --json lit2.json -q
is "$(json lit2.json 'j["samples"]')" 157 "names the shell expanded: each read once"
cp test.tfr 'lit/a*.tfr' && cp test.tfr lit/ab.tfr
run dp-eval --model m.st 'lit/a*.tfr' lit/ab.tfr --json lit3.json -q
is "$(json lit3.json 'j["samples"]')" 300 "a name with * that exists: read once, not as a pattern"
run dp-eval --model m.st 'lit/d[2-9].tfr' --json lit4.json -q
like "$err" "lit/d\[2-9\].tfr: no file matches" "a pattern that matches nothing: said so"
run dp-eval --model m.st 'lit/?1.tfr' --json lit5.json -q
is "$(json lit5.json 'j["data"]["sources"]')" "['lit/d1.tfr']" "a name that does not exist: a pattern"
for bs in 1 7 150 1000; do
	run dp-eval --model m.st test.tfr --batch-size $bs --json b$bs.json -q
	is "$(json b$bs.json 'j["metrics"]["accuracy"], j["confusion_matrix"]')" \
		"$(json m.json 'j["metrics"]["accuracy"], j["confusion_matrix"]')" "--batch-size $bs: the same counts"
done
run dp-eval --model m.st test.tfr --classes 'a,b,c,d,e' --require 'recall[c]>=0' --json n.json
is "$rc" 0 "--classes: names usable in gates"
like_text "$out" $'\n'"           c  " "... in the report"
is "$(json n.json '[c["name"] for c in j["classes"]]')" "['a', 'b', 'c', 'd', 'e']" "... in the JSON"
printf 'a\nb\nc\nd\ne\n' > names.txt
run dp-eval --model m.st test.tfr --classes @names.txt -q --require 'f1[e]>=0'
is "$rc" 0 "--classes @FILE"
run dp-eval --model m.st test.tfr --classes 'a,b'
is "$rc" 2 "--classes: the wrong number of names: exit 2"
like "$err" "2 names for a model of 5 classes" "... says so"

# regression
run dp-eval --model r.st reg.tfr --json r.json --require 'r2>-100' --require 'mse[2]>=0'
is "$rc" 0 "a regression model"
like "$out" "samples=60 skipped=0 skipped_fraction=0 loss=[0-9.]+ mse=[0-9.]+ rmse=[0-9.]+ mae=[0-9.]+ r2=" "... mse, rmse, mae, r2"
is "$(json r.json 'j["metrics"]["loss"] == j["metrics"]["mse"], len(j["outputs"])')" "True 3" "... loss is the mse; per-output entries"
run dp-eval --model r.st reg.tfr --top-k 2
is "$rc" 2 "--top-k on a regression model: exit 2"

# ---- bad input: named, non-zero, no metrics file ----
bad() { # what expected-message-regex dp-eval-args...
	local what=$1 re=$2
	shift 2
	rm -f bad.json
	run dp-eval "$@" --json bad.json --predictions bad.jsonl
	is "$rc" 1 "$what: exit 1"
	like "$err" "$re" "$what: message"
	ok test ! -e bad.json -a ! -e bad.jsonl "$what: no metrics or predictions file"
	is "$(ls -a | grep -c 'tmp\.')" 0 "$what: no temporary file left"
}
$MK wide.tfr random --n 10 --shape 20 --classes 5
bad "a feature of the wrong shape" "^dp-eval: wide.tfr: record 0 at byte 0: feature 'image' has 20 values, expected 12 \(the size of the input shape\)" \
	--model m.st wide.tfr
$MK many.tfr random --n 300 --shape 12 --classes 9 --seed 5
bad "a label out of range" "^dp-eval: many.tfr: record [0-9]+ at byte [0-9]+: label 'label' is [5-8], outside 0..4" \
	--model m.st many.tfr
$MK nolabel.tfr random --n 40 --shape 12 --classes 5 --bad nolabel:33
bad "a record without its label" "nolabel.tfr: record 33 at byte [0-9]+: no label 'label'" --model m.st nolabel.tfr
$MK nofeat.tfr random --n 40 --shape 12 --classes 5 --bad nofeature:7
bad "a record without the feature" "nofeat.tfr: record 7 at byte [0-9]+: no feature 'image'" --model m.st nofeat.tfr
$MK crc.tfr random --n 40 --shape 12 --classes 5 --bad crc:12
bad "a damaged record" "crc.tfr: record 12 at byte [0-9]+: .*CRC" --model m.st crc.tfr
head -c 1000 m.st > trunc.st
bad "a truncated checkpoint" "^dp-eval: trunc.st: " --model trunc.st test.tfr
bad "not a checkpoint" "^dp-eval: test.tfr: " --model test.tfr test.tfr
bad "a missing checkpoint" "^dp-eval: nothere.st: No such file" --model nothere.st test.tfr
mkdir -p stdir
bad "a directory as the checkpoint" "^dp-eval: stdir: is a directory, not a checkpoint$" --model stdir test.tfr
bad "missing data" "^dp-eval: nothere.tfr: No such file" --model m.st nothere.tfr
: > empty.tfr
bad "no records" "^dp-eval: empty.tfr: no records to evaluate" --model m.st empty.tfr
bad "a feature named wrongly" "no feature 'pixels' \(the record has: image, label\)" --model m.st test.tfr --feature pixels
bad "a failing --data-cmd" "command 'exit 3' exited with status 3" --model m.st --data-cmd 'exit 3'

# ---- write errors ----
if [ -w /dev/full ]; then
	run dp-eval --model m.st test.tfr --json /dev/full
	is "$rc" 1 "--json to a full disk: exit 1"
	like "$err" "/dev/full: .*No space left on device" "... says so"
	run sh -c 'dp-eval --model m.st test.tfr > /dev/full'
	is "$rc" 1 "the report to a full disk: exit 1"
	like "$err" "stdout: No space left on device" "... says so"
else
	skip "/dev/full is not writable"
fi
run dp-eval --model m.st test.tfr --json nodir/x.json --predictions p1.jsonl
is "$rc" 1 "--json into a missing directory: exit 1"
like "$err" "nodir/x.json: cannot create \(directory nodir\)" "... names it"
is "$out" "" "... before the evaluation"
ok test ! -e p1.jsonl "... and no predictions written"
mkdir isdir
run dp-eval --model m.st test.tfr --json j1.json --predictions isdir
is "$rc" 1 "--predictions an existing directory: exit 1"
like "$err" "--predictions isdir: is a directory" "... names it"
ok test ! -e j1.json "... no metrics JSON written"
# an output that is an input: refused before the work, the input intact
cp test.tfr own.tfr && cp m.st own.st
run dp-eval --model own.st own.tfr --predictions own.tfr
is "$err" "dp-eval: --predictions own.tfr: is one of the files evaluated: it would be replaced" "--predictions the data: refused"
ok cmp -s own.tfr test.tfr "... the data intact"
run dp-eval --model own.st test.tfr --json own.st
is "$err" "dp-eval: --json own.st: is the checkpoint: it would be replaced" "--json the checkpoint: refused"
ok cmp -s own.st m.st "... the checkpoint intact"
dp-eval --model own.st own.tfr >> own.tfr 2>own.err
is "$?" 1 "the report appended to the data: exit 1"
like "$(cat own.err)" "stdout: is one of the inputs" "... says so"
ok cmp -s own.tfr test.tfr "... the data intact"
# --json and --predictions land together or not at all: a --json that
# cannot be written at the end (a directory made during the run) leaves no
# predictions, and names the destination
run dp-eval --model m.st --data-cmd 'mkdir late.json; cat test.tfr' --json late.json --predictions p2.jsonl
is "$rc" 1 "--json fails at the end: exit 1"
like "$err" "late.json: is a directory" "... names --json's destination"
ok test ! -e p2.jsonl "... and no predictions are written"
echo old > p3.jsonl
run dp-eval --model m.st --data-cmd 'mkdir late2.json; cat test.tfr' --json late2.json --predictions p3.jsonl
is "$(cat p3.jsonl)" "old" "... an older predictions file is left as it was"

# ---- tiny files, huge claims: checked against the file before anything is allocated --------
# (under a 2 GiB address-space limit: a model of 4194304 x 1024 floats is 16 GiB)
$PY - <<'PYEOF'
import json, struct
h = json.dumps({"__metadata__": {"format": "pt", "model": "dense:4194304", "input_shape": "1024",
                                 "loss": "xent"}}).encode()
open("tiny.st", "wb").write(struct.pack("<Q", len(h)) + h)
PYEOF
# (not under AddressSanitizer, which reserves terabytes of address space,
# as tfr-cat-bad.t does)
if nm "$(command -v dp-eval)" 2>/dev/null | grep -q __asan_init; then
	for i in 1 2 3 4; do skip "ulimit -v under AddressSanitizer"; done
else
	run bash -c 'ulimit -v 2097152; exec dp-eval --model tiny.st --data test.tfr'
	is "$rc" 1 "a $(stat -c %s tiny.st)-byte checkpoint whose metadata says dense:4194304: refused"
	like "$err" "tiny.st: no tensor '0.weight'" "... for the tensor it lacks, before gigabytes are allocated"
	run bash -c 'ulimit -v 2097152; exec timeout 20 dp-eval --model /dev/zero --data test.tfr'
	is "$rc" 1 "--model /dev/zero: refused, not read until memory runs out"
	like "$err" "/dev/zero: .*not a safetensors file" "... saying it is not a checkpoint"
fi
mkfifo ck.fifo
timeout 60 cat m.st > ck.fifo &
run timeout 60 dp-eval --model ck.fifo --data test.tfr -q --json fifo.json
is "$rc" 0 "a checkpoint through a FIFO: read as its header describes"
wait
{ cat m.st; printf 'trailing'; } | timeout 60 dd of=ck.fifo status=none &
run timeout 60 dp-eval --model ck.fifo --data test.tfr -q
is "$rc" 1 "... one with bytes past what its header describes: refused"
like "$err" "more bytes than its header describes" "... saying so"
wait

done_testing
