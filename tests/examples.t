#!/usr/bin/env bash
# The examples, shortened through their variables so that none can rot:
# make demo's script and the pipeline Makefile (examples/demo,
# examples/pipeline.mk) on 3000 Fashion-MNIST images with 2 workers, its
# incremental re-runs (each stage redone only when what it depends on
# changed), a failing gate, -j with one worker; the sweep
# (examples/sweep.sh); make learn's script (examples/fashion-mnist.sh).
. "${DP_SRC:-.}/tests/lib.sh"

D=/usr/share/datasets/fashion-mnist
if [ ! -r "$D/train-images-idx3-ubyte.gz" ]; then
	skip "Fashion-MNIST is not installed: apt-get install dataset-fashion-mnist"
	done_testing
fi
. "$DP_SRC/tests/mpi.sh" # mpirun as every MPI test runs it: unbound, shared memory
require "mpirun is not installed (apt-get install openmpi-bin)" have_mpirun
cd "$T"
EX="$DP_SRC/examples"
# A bound for a hang, not a speed test: each run below takes seconds on an
# idle machine, and minutes under make asan on a busy one (the whole file
# took 5 minutes there with 4 busy loops beside it).
HANG=${DP_HANG_TIMEOUT:-1800}
MPIRUN="mpirun ${MPI_OPTS[*]}"
SHORT=(LIMIT=3000 TEST_LIMIT=500 EPOCHS=2 LR=3e-3 MODEL=flatten,dense:32,relu,dense:10
	MIN_ACCURACY=0.6)
W=$T/demo
pipeline() { timeout $HANG make --no-print-directory -f "$EX/pipeline.mk" W="$W" MPIRUN="$MPIRUN" "${SHORT[@]}" "$@"; }
json() { $PY -c "import json, sys; j = json.load(open(sys.argv[1])); print($2)" "$1"; }

# ---- make demo's script
run timeout $HANG env DEMO_DIR="$W" MPIRUN="$MPIRUN" "$EX/demo" "${SHORT[@]}"
is "$rc" 0 "examples/demo runs the pipeline"
[ "$rc" = 0 ] || printf '%s\n' "$err" | tail -n 5 | sed 's/^/#   /'
like_text "$out" $'\n'"Fashion-MNIST, 2 worker\(s\), 2 epoch\(s\): flatten,dense:32,relu,dense:10"$'\n' "it ends with a summary"
like_text "$out" "  model    $W/model.safetensors"$'\n' "... where the model is"
like "$out" "  metrics  $W/metrics.json  \(test accuracy 0\.[0-9]+; report $W/report.txt\)" "... the metrics"
like "$out" "  plot     $W/loss.svg" "... the plot"
like "$out" "  data     $W/data/  \(train 2850, val 150 in 2 shard\(s\); test 500\)" "... the data"
like_text "$out" $'\n'"done in [0-9]+ s$" "... and the time taken"
is "$(ls "$W/data" | grep tfrecord | tr '\n' ' ')" \
	"test.tfrecord train-00000-of-00002.tfrecord train-00001-of-00002.tfrecord train.tfrecord val-00000-of-00002.tfrecord val-00001-of-00002.tfrecord " \
	"tfr-shard: a train/val split, one shard of each per worker"
is "$(tfr-cat -c "$W/data/train-00000-of-00002.tfrecord")" 1425 "... half the training records each"
is "$(json "$W/metrics.json" 'j["samples"], j["classes"][1]["name"]')" "500 Trouser" "dp-eval: the test set, classes named"
same_file "$W/release/model.safetensors" "$W/model.safetensors" "the gate released the model"
like "$(cat "$W/train.log")" "^epoch=1 step=23 val_loss=.*val_samples=150$" \
	"dp-train: each worker all of its shard, global batches of 128 (23 steps), validated on both val shards"
ok $PY -c '
import sys, xml.etree.ElementTree as ET
r = ET.parse(sys.argv[1]).getroot()
s = [g.get("data-label") for g in r.iter("{http://www.w3.org/2000/svg}g") if g.get("class") == "series"]
sys.exit(0 if s == ["loss", "val_loss"] else 1)' "$W/loss.svg" "metrics-grep: an SVG of loss and val_loss"
like_text "$(head -n 2 "$W/loss.tsv")" $'^name\tvalue\tstep\tepoch\trank\nloss\t' "... and its values"

# ---- incremental: only what changed is redone
run pipeline -q "$W/release/model.safetensors" "$W/loss.svg" "$W/metrics.json"
is "$rc" 0 "make -q: everything up to date"
# stages SETTING...: run make (for real) and list the programs it ran, through
# logging wrappers first on PATH (not counting the summary's tfr-cat -c)
mkdir shims
for p in tfr-cat tfr-shard dp-train dp-eval metrics-grep; do
	printf '#!/bin/sh\ncase "$1" in -c) ;; --check) echo "%s --check" ;; *) echo %s ;; esac >> "%s/calls"\nexec "%s" "$@"\n' \
		"$p" "$p" "$T" "$(command -v $p)" > shims/$p
	chmod +x shims/$p
done
stages() {
	: > "$T/calls"
	PATH="$T/shims:$PATH" pipeline "$@" all > "$T/stages.out" 2>&1 || { echo "make failed: $(tail -n 3 "$T/stages.out")"; return; }
	sort -u "$T/calls" | tr '\n' ' '
}
is "$(stages)" "" "a re-run runs nothing"
is "$(stages MIN_ACCURACY=0.5)" "dp-eval --check " "a new gate: only the gate"
is "$(stages MIN_ACCURACY=0.5 EPOCHS=3)" "dp-eval dp-eval --check dp-train metrics-grep " \
	"a new EPOCHS: train, evaluate, gate, plot; no conversion or sharding"
is "$(stages MIN_ACCURACY=0.5 EPOCHS=3 SEED=1)" "dp-eval dp-eval --check dp-train metrics-grep tfr-shard " \
	"a new SEED: split again, and what follows"
is "$(stages MIN_ACCURACY=0.5 EPOCHS=3 SEED=1 LIMIT=2500)" "dp-eval dp-eval --check dp-train metrics-grep tfr-cat tfr-shard " \
	"a new LIMIT: everything"
touch "$W/data/test.tfrecord"
is "$(stages MIN_ACCURACY=0.5 EPOCHS=3 SEED=1 LIMIT=2500)" "dp-eval dp-eval --check " \
	"a newer test set: evaluate and gate again, no training"
SHORT+=(MIN_ACCURACY=0.5 EPOCHS=3 SEED=1 LIMIT=2500)
run pipeline -q "$W/release/model.safetensors" "$W/loss.svg"
is "$rc" 0 "... and then everything is up to date"
cp "$W/release/model.safetensors" released.st
run pipeline MIN_ACCURACY=0.999 all
isnt "$rc" 0 "a gate the model fails stops make"
like "$err" "gate accuracy>=0.999 failed: accuracy is 0\.[0-9]+" "... saying why"
same_file "$W/release/model.safetensors" released.st "... and releases nothing new"
ok_json "$W/metrics.json" "... the metrics stay, to look at"

# ---- -j, one worker without mpirun
W=$T/one
run pipeline -j2 NP=1 SPLIT= all
is "$rc" 0 "make -j2 with NP=1 (no mpirun, no validation split)"
is "$(ls "$W/data" | grep tfrecord | tr '\n' ' ')" "test.tfrecord train-00000-of-00001.tfrecord train.tfrecord " \
	"... one shard"
is "$(tfr-cat -c "$W/data/train-00000-of-00001.tfrecord")" 2500 "... of every training record (LIMIT=2500)"

# ---- training control, and TensorBoard sent after each epoch (to a
# directory, as to an S3 prefix); the data of the first run
W=$T/ctl
run pipeline DATA="$T/demo/data" EPOCHS=6 LR=3e-2 EARLY_STOP=patience=1 PLATEAU=factor=0.5,patience=0 \
	SYNC="$T/tb-sent" all
is "$rc" 0 "EARLY_STOP, PLATEAU and SYNC"
[ "$rc" = 0 ] || printf '%s\n' "$err" | tail -n 5 | sed 's/^/#   /'
like_text "$out" "  model    $W/best.safetensors \(the best epoch's\)"$'\n' "... the best epoch is the model"
same_file "$W/release/model.safetensors" "$W/best.safetensors" "... released once it passed the gate"
best=$(awk '/^epoch=.* val_loss=/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
	if (!n++ || v["val_loss"] + 0 < min) { min = v["val_loss"] + 0; e = v["epoch"] } } END { print e }' "$W/train.log")
is "$(json "$W/metrics.json" 'j["model"]["epoch"]')" "$best" "... the epoch of the lowest val_loss in the log (epoch $best)"
ok diff -r "$W/tb" "$T/tb-sent" "... its TensorBoard directory sent, whole, after the last epoch"

# ---- Fashion-MNIST as PNG and JPEG files
run timeout $HANG env FASHION_N=300 EPOCHS=1 FASHION_DIR="$T/fimg" "$EX/fashion-images.sh"
is "$rc" 0 "examples/fashion-images.sh"
like_text "$out" $'^raw: test accuracy 0\\.[0-9]+ after 1 epochs\npng: test accuracy 0\\.[0-9]+ .*\njpg: test accuracy 0\\.[0-9]+ ' \
	"... the raw, PNG and JPEG models' test accuracies"
is "$(tfr-cat -c "$T/fimg/jpg-train.tfrecord")" 300 "... one image record per JPEG file"

# ---- the sweep
run timeout $HANG env LRS="3e-3 1e-2" BATCHES="32" MPIRUN="$MPIRUN" "${SHORT[@]}" MIN_ACCURACY=0.5 \
	"$EX/sweep.sh" sw
is "$rc" 0 "examples/sweep.sh"
like_text "$out" $'lr3e-3-batch32: training\nlr1e-2-batch32: training' "... trains each setting"
is "$(sed 1d sw/results.tsv | wc -l)" 2 "... one row per run"
is "$(sed 1d sw/results.tsv | cut -f 1 | sort -gr | tr '\n' ' ')" "$(sed 1d sw/results.tsv | cut -f 1 | tr '\n' ' ')" \
	"... best first"
r1=$(sed -n 2p sw/results.tsv)
is "$(printf '%.4f' "$(json "$(echo "$r1" | cut -f 6)" 'j["metrics"]["accuracy"]["value"]')")" "$(echo "$r1" | cut -f 1)" \
	"... the accuracy of the run's metrics JSON"
like_text "$out" "best: sw/lr[0-9e-]+-batch32/model.safetensors"$'\n'"gate accuracy>=0.5: 0\.[0-9]+ passed" "... the best one, gated"
is "$(json sw/lr3e-3-batch32/metrics.json 'j["model"]["epoch"], j["model"]["spec"]')" "3 flatten,dense:32,relu,dense:10" \
	"... with the pipeline settings of the environment"
run timeout $HANG env LRS="3e-3 1e-2" BATCHES="32" MPIRUN="$MPIRUN" "${SHORT[@]}" MIN_ACCURACY=0.5 \
	"$EX/sweep.sh" sw
like_text "$out" $'^lr3e-3-batch32: up to date\nlr1e-2-batch32: up to date' "a second sweep trains nothing"
is "$(ls -d sw/data)" "sw/data" "the runs share one data directory"

# ---- K-fold cross-validation: 3 folds of 600 images
run timeout $HANG make --no-print-directory -f "$EX/kfold.mk" -j3 W=kf K=3 LIMIT=600 EPOCHS=1 \
	MODEL=flatten,dense:32,relu,dense:10 LR=3e-3
is "$rc" 0 "examples/kfold.mk"
[ "$rc" = 0 ] || printf '%s\n' "$err" | tail -n 5 | sed 's/^/#   /'
is "$(for f in 0 1 2; do tfr-cat -c kf/folds/$f/val.tfrecord; done | tr '\n' ' ')" "200 200 200 " \
	"... three folds of 200 records"
is "$(tfr-cat -c kf/folds/1/train.tfrecord)" 400 "... each fold's train the other 400"
run $PY - kf/cv.tsv kf/fold-0/metrics.json kf/fold-1/metrics.json kf/fold-2/metrics.json <<'PY'
import json, statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])][1:]
js = [json.load(open(p))["metrics"] for p in sys.argv[2:]]
for m, mean, std, lo, hi, n in rows:
    v = [j[m]["value"] for j in js]
    assert n == "3" and float(mean) == round(statistics.fmean(v), 4), (m, mean, v)
    assert float(std) == round(statistics.pstdev(v), 4), (m, std, v)
    assert float(lo) == round(min(v), 4) and float(hi) == round(max(v), 4), (m, lo, hi, v)
print(" ".join(r[0] for r in rows))
PY
is "$rc:$out" "0:accuracy f1_macro loss" "... cv.tsv: each metric's mean, std, min and max over the folds' metrics JSONs"
[ "$rc" = 0 ] || diag "$err"
run make -q --no-print-directory -f "$EX/kfold.mk" W=kf K=3 LIMIT=600 EPOCHS=1 MODEL=flatten,dense:32,relu,dense:10 LR=3e-3
is "$rc" 0 "... and a second make has nothing to do"

# ---- make learn's script, on 1000 images: both runs, each gated
run timeout $HANG env LIMIT=1000 TEST_LIMIT=200 LEARN_DIR="$T/learn" LEARN_THREADS=1 \
	LEARN_MODELS="mlp cnn" "$EX/fashion-mnist.sh"
like "$out" "mlp: test accuracy 0\.[0-9]+ after 10 epochs \(gate accuracy>=0.87\): (ok|FAILED);" "make learn: the MLP"
like "$out" "cnn: test accuracy 0\.[0-9]+ after 5 epochs \(gate accuracy>=0.91\): (ok|FAILED);" "make learn: the CNN"
like "$out" "   epoch=5 step=40 val_loss=[0-9.]+ val_accuracy=" "... per-epoch test accuracy"
want=0
case "$out" in *FAILED*) want=1 ;; esac
is "$rc" "$want" "... exit status 1 exactly when a gate failed"
# resnet20's run (PNG records, crop-pad and flip, mpirun -np 2), one epoch of
# 256 images: the 93% gate fails, and says so
run timeout $HANG env LIMIT=256 TEST_LIMIT=64 LEARN_DIR="$T/learn-rn" LEARN_MODELS=resnet20 \
	LEARN_EPOCHS=1 "$EX/fashion-mnist.sh"
like "$out" "resnet20: test accuracy 0\.[0-9]+ after 1 epochs \(gate accuracy>=0.93\): FAILED;" \
	"make learn: resnet20's run, gated"
like "$out" "   epoch=1 step=2 val_loss=[0-9.]+ val_accuracy=" "... its test accuracy after the epoch"
is "$rc" 1 "... exit status 1: the gate failed"
is "$(cat "$T/learn-rn/png/limits")" "256 64" "... on the first 256 and 64 images"

# ---- fine-tuning (examples/finetune.sh), on 6000 images: both accuracies printed
run timeout $HANG env PRE_LIMIT=6000 PRE_EPOCHS=1 FT_EPOCHS=3 FT_DIR="$T/ft" THREADS=1 "$EX/finetune.sh"
is "$rc" 0 "examples/finetune.sh runs"
[ "$rc" = 0 ] || printf '%s\n' "$err" | tail -n 5 | sed 's/^/#   /'
like "$out" "first task \(classes 0-4, [0-9]+ images, 1 epochs\): test accuracy 0\.[4-9]" \
	"the first task learnt (above 40%: chance is 20%)"
like "$out" "fine-tuned \(convolutions frozen, head reset\): 0\.[4-9]" "the fine-tuned model learnt the second"
like "$out" "from scratch: +0\.[0-9]+" "... and the one from scratch is reported beside it"
is "$(tfr-cat -c "$T/ft/few-b.tfrecord") $(tfr-cat -c "$T/ft/test-b.tfrecord")" "1000 5000" \
	"... from 1000 images of the other five classes, tested on their 5000"
is "$(tfr-cat -j "$T/ft/test-b.tfrecord" | grep -c '"label":{"int64":\[[0-4]\]}')" 5000 "... relabelled 0-4"

done_testing
