#!/usr/bin/env bash
# dp-train's training control: --early-stopping, --reduce-lr-on-plateau,
# --save-best on a monitored validation metric.  The decisions of a real
# run against Keras' rules (tests/keras_ref.py) over the run's own
# validation losses; the best checkpoint the very bytes of that epoch's
# periodic one; --resume from before a reduction, and from a run that
# stopped, ending in the same bytes; TensorBoard and JSON logs saying when
# each fired; 2 ranks under mpirun deciding alike; the settings refused.
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/mpi.sh"
. "$DP_SRC/tests/tblib.sh"

# 4 noisy classes: the validation loss falls for some epochs, then rises
$PY "$DP_SRC/tests/mkexamples.py" tr.tfr blobs --n 120 --shape 64 --classes 4 --seed 1 || exit 1
$PY "$DP_SRC/tests/mkexamples.py" va.tfr blobs --n 200 --shape 64 --classes 4 --seed 2 || exit 1
BASE=(--train tr.tfr --val va.tfr --model dense:32,relu,dense:4 --input-shape 64 --prefetch 0
	--no-progress --epochs 30 --lr 0.02 --optimizer sgd --momentum 0.9)
CTL=(--early-stopping patience=3 --reduce-lr-on-plateau patience=1,factor=0.5)

# check.py LOG MONITOR MODE ES RLR LR: the log's events and rates against
# Keras' callbacks fed the log's values of MONITOR, epoch by epoch
cat >check.py <<'PY'
import json, sys
sys.path.insert(0, sys.argv[7])
import keras_ref
log, monitor, mode, es, rlr, lr = sys.argv[1:7]
def pairs(l):
    l = l.strip()
    if l.startswith("{"):
        return {k: str(v) for k, v in json.loads(l).items()}
    return dict(kv.split("=", 1) for kv in l.split())
lines = [pairs(l) for l in open(log)]
vals = [l[monitor] for l in lines if monitor in l and "event" not in l]
want = [w.split() for w in keras_ref.run(monitor, mode, es, rlr, float(lr), vals)]
ev = {(int(l["epoch"]) - 1, l["event"].strip('"')): l for l in lines if "event" in l}
rates = {int(l["epoch"]) - 1: float(l["lr"]) for l in lines if "loss" in l and "event" not in l}
assert len(want) == len(vals), (len(want), len(vals))
for e, _, stop, best in want:
    e = int(e)
    assert ((e, "early_stopping") in ev) == (stop == "1"), ("stop", e)
    assert ((e, "save_best") in ev) == (best == "1"), ("best", e)
    reduced = e > 0 and float(want[e][1]) != float(want[e - 1][1]) if e else float(want[0][1]) != float(lr)
    assert ((e, "reduce_lr_on_plateau") in ev) == reduced, ("reduce", e)
    if reduced:
        assert abs(float(ev[(e, "reduce_lr_on_plateau")]["lr"]) / float(want[e][1]) - 1) < 1e-9
    if e + 1 in rates:   # the next epoch trains at Keras' rate
        assert abs(rates[e + 1] / float(want[e][1]) - 1) < 1e-9, (e, rates[e + 1], want[e][1])
n = lambda k: sum(1 for x in ev if x[1] == k)
print("epochs %d stop %s best %d reduced %d" % (len(vals), want[-1][2] == "1", n("save_best"),
      n("reduce_lr_on_plateau")))
PY
check() { run $PY check.py "$@" "$DP_SRC/tests"; }

# ---- a run against Keras' rules ------------------------------------------------------------
run dp-train "${BASE[@]}" --batch-size 16 "${CTL[@]}" --save-best best.st -o a.st \
	--checkpoint 'ck-{epoch}.st' --checkpoint-every 1e --log a.log --tensorboard tb --no-progress
is "$rc" 0 "early stopping, plateau, best: exit 0"
check a.log val_loss auto patience=3 patience=1,factor=0.5 0.02
is "$rc" 0 "every event and every epoch's rate as Keras' callbacks decide on the run's val_loss"
[ "$rc" = 0 ] || diag "$err"
like "$out" "stop True best [0-9]+ reduced [1-9]" "... which stopped early, kept bests and lowered the rate ($out)"
stop=$(sed -n 's/^epoch=\([0-9]*\) .*event=early_stopping.*/\1/p' a.log)
ok test "$stop" -lt 30 "stopped after epoch $stop of 30"
best=$(grep 'event=save_best' a.log | tail -n 1 | sed 's/^epoch=\([0-9]*\) .*/\1/')
ok cmp -s best.st "ck-$best.st" "--save-best: the bytes of epoch $best's checkpoint (its last best)"
like "$(dp-eval --model best.st --data va.tfr --json - 2>/dev/null)" '"loss":' "... which dp-eval loads"
ok cmp -s a.st "ck-$stop.st" "-o: the state of the epoch it stopped after"
$PY - a.st <<'PY' >state
import json, struct, sys
d = open(sys.argv[1], "rb").read()
m = json.loads(d[8:8 + struct.unpack("<Q", d[:8])[0]])["__metadata__"]
print(m["early_stopping"], m["reduce_lr_on_plateau"], m["monitor"], m["control_state"])
PY
like "$(cat state)" "^patience=3,min_delta=0 patience=1,factor=0.5,cooldown=0,min_lr=0,min_delta=0.0001  .*stopped=1" \
	"the checkpoint keeps the settings and the state (stopped)"

# ---- --resume: bit for bit ---------------------------------------------------------------
first=$(grep -m 1 'event=reduce_lr' a.log | sed 's/^epoch=\([0-9]*\) .*/\1/')
run dp-train "${BASE[@]}" --resume "ck-$((first - 1)).st" --save-best best2.st -o b.st --log b.log
is "$rc" 0 "--resume from epoch $((first - 1)), before the first reduction: exit 0"
ok cmp -s a.st b.st "... ends in the same bytes as the run without a break"
is "$(grep event= b.log)" "$(grep event= a.log | awk -F'[= ]' -v f="$first" '$2 >= f' | sed 's/best\.st/best2.st/')" \
	"... its events those of the run from there on"
run dp-train "${BASE[@]}" --resume a.st -o c.st --log c.log
is "$rc" 0 "--resume of a run that stopped early: exit 0"
like "$err" "stopped early after epoch $stop .*nothing more to train" "... says it had stopped"
ok cmp -s a.st c.st "... and writes the same state"
is "$(grep -c 'loss=' c.log)" 0 "... without training"

# ---- TensorBoard ----------------------------------------------------------------------------
run tb_dump tb/events.out.tfevents.*
printf '%s\n' "$out" >events.jsonl
run $PY - events.jsonl a.log <<'PY'
import json, struct, sys
f32 = lambda x: struct.unpack("<f", struct.pack("<f", float(x)))[0]
evs = [json.loads(l) for l in open(sys.argv[1])]
got = [(e["step"], k, v) for e in evs for k, v in e.get("values", {}).items()
       if k in ("early_stopping", "reduce_lr_on_plateau", "save_best")]
want = []
for l in open(sys.argv[2]):
    kv = dict(p.split("=", 1) for p in l.split())
    if "event" in kv:
        first = [v for k, v in kv.items() if k not in ("epoch", "step", "event")][0]
        want.append((int(kv["step"]), kv["event"], f32(first)))
assert got == want, (got, want)
print(len(got))
PY
is "$rc" 0 "TensorBoard: a scalar per event, named after it, at its step (the rate, the metric)"
[ "$rc" = 0 ] || diag "$err"

# ---- JSON logs, a name that needs quoting, another metric --------------------------------------
run dp-train "${BASE[@]}" --batch-size 16 --epochs 6 --monitor val_accuracy --early-stopping 1 \
	--reduce-lr-on-plateau 'patience=1,factor=0.3,cooldown=1,min_delta=0' --save-best 'b "1".st' \
	--log-format json --log j.log
is "$rc" 0 "--monitor val_accuracy, --log-format json: exit 0"
check j.log val_accuracy max patience=1 patience=1,factor=0.3,cooldown=1,min_delta=0 0.02
is "$rc" 0 "... max mode (auto for accuracy) as Keras decides"
[ "$rc" = 0 ] || diag "$err"
run $PY -c 'import json,sys; [json.loads(l) for l in open("j.log")]; print([json.loads(l)["checkpoint"] for l in open("j.log") if "save_best" in l][0])'
is "$out" 'b "1".st' "the JSON lines parse; the checkpoint's name escaped"
ok_ckpt 'b "1".st' "... and that is the checkpoint written"

# ---- under mpirun: every rank decides alike ------------------------------------------------------
if have_mpirun; then
	run mpi 2 dp-train "${BASE[@]}" --batch-size 8 "${CTL[@]}" --save-best mbest.st -o m.st --log m.log
	is "$rc" 0 "2 ranks: exit 0"
	like "$err" "all 2 ranks hold the same weights" "2 ranks: the same state at the end"
	check m.log val_loss auto patience=3 patience=1,factor=0.5 0.02
	is "$rc" 0 "2 ranks: the events as Keras decides on the job's val_loss ($out)"
	like "$out" "stop True" "2 ranks: it stopped early, together"
else
	skip "mpirun is not installed" 4
fi

# ---- settings refused -----------------------------------------------------------------------------
run dp-train "${BASE[@]}" --early-stopping patience=x
like "$rc:$err" "^2:dp-train: --early-stopping: patience 'x': want a whole number from 0" "a bad patience: exit 2, named"
run dp-train "${BASE[@]}" --reduce-lr-on-plateau factor=2
like "$rc:$err" "^2:dp-train: --reduce-lr-on-plateau: factor '2': want a number above 0 and below 1" "factor 2: exit 2"
run dp-train "${BASE[@]}" --monitor val_accuracy
like "$rc:$err" "^2:.*--monitor goes with" "--monitor alone: exit 2"
run dp-train --train tr.tfr --model dense:4 --input-shape 64 --early-stopping 2 -q
like "$rc:$err" "^2:.*watches a validation metric: give --val" "no validation data: exit 2"
run dp-train "${BASE[@]}" --epochs 1 --early-stopping 2 --monitor val_bogus
is "$rc" 2 "an unknown metric: exit 2"
like "$err" "^dp-train: --monitor val_bogus: no metric 'bogus' \(there are .*accuracy" "... before training, the metrics listed"
run dp-train "${BASE[@]}" --save-best x.st -o x.st
like "$rc:$err" "^2:.*-o x.st and --save-best x.st name one file" "--save-best on -o: refused"
run dp-train "${BASE[@]}" --monitor loss --early-stopping 2
like "$rc:$err" "^2:.*want val_ and a validation metric" "a training metric: refused"
done_testing
