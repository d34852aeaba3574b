#!/usr/bin/env bash
# dp-train --tensorboard, --tensorboard-histograms and --on-epoch: the event
# files decoded by python3-protobuf from the tests' own schemas
# (tests/data/tensorboard/events.proto, hparams.proto) against the log
# lines; Keras's layout (train/ and validation/ with epoch_loss...) against
# the log's sums, the settings (hparams, text); the command after each
# epoch, its placeholders, its failures, under mpirun.
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/mpi.sh"

. "$DP_SRC/tests/tblib.sh"
BASE=(--train small.tfr --val val.tfr --model dense:16,relu,dense:4 --input-shape 64 --batch-size 16
	--prefetch 0 -q --log-every 3)

# ---- scalars ------------------------------------------------------------------
run dp-train "${BASE[@]}" --epochs 2 --tensorboard tb -o m.st --log train.log
is "$rc" 0 "--tensorboard: exit 0"
files=(tb/events.out.tfevents.*)
is "${#files[@]}" 1 "one event file of the steps"
is "$(cd tb && find . -type f | sed 's/tfevents\..*/tfevents/' | sort | tr '\n' ' ')" \
	"./events.out.tfevents ./train/events.out.tfevents ./validation/events.out.tfevents " \
	"... and one in train/ and validation/ (Keras's layout), nothing else"
like "${files[0]}" "^tb/events\.out\.tfevents\.[0-9]{10}\.$(hostname)$" "named events.out.tfevents.TIME.HOST"
ev=${files[0]}
run tb_dump "$ev"
is "$rc" 0 "python3-protobuf decodes every record (CRCs checked)"
printf '%s\n' "$out" >events.jsonl
run tfr-cat --verify "$ev"
is "$rc" 0 "tfr-cat --verify accepts the event file"
like "$out" "records=$(wc -l <events.jsonl) .*status=ok" "... every record an Event"
run $PY - events.jsonl train.log <<'PY'
import json, struct, sys
evs = [json.loads(l) for l in open(sys.argv[1])]
f32 = lambda x: struct.unpack("<f", struct.pack("<f", float(x)))[0]
assert evs[0].get("file_version") == "brain.Event:2", evs[0]
assert "values" not in evs[0]
lines = [dict(kv.split("=", 1) for kv in l.split()) for l in open(sys.argv[2])]
body = [e for e in evs[1:] if e["values"]]
assert all(e["values"] or e.get("plugins") for e in evs[1:])
assert len(body) == len(lines), (len(body), len(lines))
for e, l in zip(body, lines):
    assert e["step"] == int(l["step"]), (e, l)
    want = {k: f32(v) for k, v in l.items() if k not in ("epoch", "step")}
    assert e["values"] == want, (e["values"], want)
walls = [e["wall_time"] for e in evs]
assert walls == sorted(walls) and walls[0] > 1.5e9, walls
tags = set().union(*(e["values"] for e in body))
print(" ".join(sorted(tags)))
PY
is "$rc" 0 "every log line is one event: its step, its values as float32, wall times in order"
[ "$rc" = 0 ] || diag "$err"
is "$out" "accuracy loss lr samples_per_sec val_accuracy val_loss val_samples" "the tags: every value of the training and validation lines"

# ---- Keras's layout: train/ and validation/, epoch_ tags shared --------------------------
# with a line a step, the log's figures give the epoch's sums: every step
# of 16 samples but an epoch's last (100 = 6 x 16 + 4)
run dp-train "${BASE[@]}" --epochs 3 --log-every 1 --tensorboard tbk -o k.st --log k.log
is "$rc" 0 "--tensorboard, 3 epochs, a line a step: exit 0"
tb_dump tbk/train/events.* >ktrain.jsonl && tb_dump tbk/validation/events.* >kval.jsonl &&
	tb_dump tbk/events.* >ksteps.jsonl
is "$?" 0 "train/ and validation/: python3-protobuf decodes every record"
run $PY - k.log ktrain.jsonl kval.jsonl <<'PY'
import json, struct, sys
f32 = lambda x: struct.unpack("<f", struct.pack("<f", float(x)))[0]
lines = [dict(kv.split("=", 1) for kv in l.split()) for l in open(sys.argv[1])]
tr = [json.loads(l) for l in open(sys.argv[2])]
va = [json.loads(l) for l in open(sys.argv[3])]
for evs in (tr, va):
    assert evs[0].get("file_version") == "brain.Event:2", evs[0]
    assert [e["step"] for e in evs[1:]] == [0, 1, 2], [e["step"] for e in evs[1:]]
for ep in (1, 2, 3):
    steps = [l for l in lines if l["epoch"] == str(ep) and "loss" in l]
    n = [16] * (len(steps) - 1) + [4]
    assert len(steps) == 7, steps
    loss = sum(float(l["loss"]) * k for l, k in zip(steps, n)) / 100
    correct = sum(round(float(l["accuracy"]) * k) for l, k in zip(steps, n))
    t = tr[ep]["values"]
    assert sorted(t) == ["epoch_accuracy", "epoch_learning_rate", "epoch_loss"], t
    assert abs(t["epoch_loss"] - loss) <= 2e-5 * abs(loss), (ep, t, loss)
    assert t["epoch_accuracy"] == f32(correct / 100), (ep, t, correct)
    assert t["epoch_learning_rate"] == f32(steps[-1]["lr"]), t
    val = [l for l in lines if l["epoch"] == str(ep) and "val_loss" in l][0]
    v = va[ep]["values"]
    assert sorted(v) == ["epoch_accuracy", "epoch_loss"], v
    assert abs(v["epoch_loss"] - float(val["val_loss"])) <= 1e-5 * abs(v["epoch_loss"]), (v, val)
    assert abs(v["epoch_accuracy"] - float(val["val_accuracy"])) <= 5e-5, (v, val)
    assert round(v["epoch_accuracy"] * 30) == round(float(val["val_accuracy"]) * 30)
print(" ".join(sorted(set(tr[1]["values"]) & set(va[1]["values"]))))
PY
is "$rc" 0 "each epoch: train/ holds the mean loss and accuracy of its steps and the rate, validation/ the validation line's figures, at step epoch-1 (Keras's count)"
[ "$rc" = 0 ] || diag "$err"
is "$out" "epoch_accuracy epoch_loss" "... under the same tags in both folders (one chart, two curves)"
run $PY - ksteps.jsonl <<'PY'
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1])]
start = evs[1]["plugins"]["_hparams_/session_start_info"]
hp = start["hparams"]
print(hp["model"], hp["batch_size"], hp["lr"], hp["optimizer"], hp["epochs"], hp["input_shape"], hp["scale_lr"])
assert "momentum" not in hp and "classes" not in hp and "control_state" not in hp, hp
assert evs[1]["step"] == 0 and start["start"] > 1.5e9
text = evs[1]["plugins"]["settings"]["text"]
print(text.splitlines()[0].strip())
assert "| batch_size | 16 |" in text.splitlines(), text
end = evs[-1]["plugins"]["_hparams_/session_end_info"]
print(end["status"])
assert end["end"] >= start["start"]
PY
is "$rc" 0 "the settings: the hparams plugin's session and a text summary, decoded"
[ "$rc" = 0 ] || diag "$err"
is "$out" "dense:16,relu,dense:4 16.0 0.001 adam 3.0 64 False
dp-train --train small.tfr --val val.tfr --model dense:16,relu,dense:4 --input-shape 64 --batch-size 16 --prefetch 0 -q --log-every 3 --epochs 3 --log-every 1 --tensorboard tbk -o k.st --log k.log
STATUS_SUCCESS" "... numbers as numbers, a shape as text; the command line; a successful end"
run dp-train --train small.tfr --model dense:4 --input-shape 64 --epochs 1 -q --tensorboard 'tb n' --lr 0.01 -o n.st
is "$(ls 'tb n' | sed 's/\..*//' | tr '\n' ' ')" "events train " "without --val: no validation/ folder"
like "$(tb_dump 'tb n'/events.* | sed -n 2p)" "--tensorboard 'tb n' --lr 0.01" "... the command line quoted where the shell needs it"
run metrics-grep --last tbk/validation/events.* tbk/train/events.*
like "$out" "epoch_loss" "metrics-grep reads the epoch files too"

# the file is written as training goes: the first epoch's events are there
# while the second runs (the command after epoch 1 reads them)
run dp-train "${BASE[@]}" --epochs 2 --tensorboard tb2 -o m2.st \
	--on-epoch "[ {epoch} = 1 ] && metrics-grep --logfmt=val_loss --count {tensorboard}/events.* > seen"
is "$rc" 0 "--on-epoch reading the events: exit 0"
is "$(tail -1 seen)" "val_loss	1" "after epoch 1, its validation event is in the file"

# --resume: a new file beside the first, which stays as it was
sum=$(md5sum <"$ev")
run dp-train "${BASE[@]}" --epochs 3 --resume m.st --tensorboard tb -o m3.st --log train3.log
is "$rc" 0 "--resume --tensorboard: exit 0"
n=$(ls tb/events.* | wc -l)
is "$n" 2 "--resume: a second event file"
is "$(ls tb/train | wc -l):$(ls tb/validation | wc -l)" "2:2" "... in train/ and validation/ too"
is "$(md5sum <"$ev")" "$sum" "... the first one untouched"
new=$(ls tb/events.* | grep -vxF "$ev")
run $PY -c '
import json, sys
evs = [json.loads(l) for l in sys.stdin]
print(evs[0].get("file_version"), min(e["step"] for e in evs[1:] if e["values"]))' < <(tb_dump "$new")
first=$(sed -n 's/.*step=\([0-9]*\).*/\1/p' train3.log | head -1)
is "$out" "brain.Event:2 $first" "... starting with its own file_version, at the resumed steps"

run dp-train "${BASE[@]}" --tensorboard-histograms
is "$rc:$(head -1 <<<"$err")" "2:dp-train: --tensorboard-histograms goes with --tensorboard DIR" "--tensorboard-histograms alone: usage error"
run dp-train "${BASE[@]}" --on-epoch-fail
is "$rc:$(head -1 <<<"$err")" "2:dp-train: --on-epoch-fail goes with --on-epoch CMD" "--on-epoch-fail alone: usage error"
# a directory that cannot be: said before training, exit 1
touch plain
run dp-train "${BASE[@]}" --tensorboard plain/tb -o never.st
is "$rc" 1 "--tensorboard under a file: exit 1"
like "$err" "^dp-train: --tensorboard: plain/tb: Not a directory" "... named"
ok test ! -e never.st "... before training (no checkpoint)"

# ---- histograms ---------------------------------------------------------------
run dp-train "${BASE[@]}" --epochs 2 --tensorboard tbh --tensorboard-histograms -o h.st
is "$rc" 0 "--tensorboard-histograms: exit 0"
run $PY - <<'PY' <(tb_dump tbh/events.*)
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1])]
hs = [e for e in evs if any(isinstance(v, dict) for v in e.get("values", {}).values())]
assert len(hs) == 2, len(hs)
sizes = {"0.weight": 16 * 64, "0.bias": 16, "2.weight": 4 * 16, "2.bias": 4}
for e in hs:
    tags = sorted(e["values"])
    assert tags == sorted(k + "/" + t for k in ("weights", "gradients") for t in sizes), tags
    for tag, h in e["values"].items():
        n = sizes[tag.split("/")[1]]
        assert h["num"] == n and sum(h["bucket"]) == n, (tag, h)
        assert h["min"] <= h["max"] and h["bucket_limit"][-1] == h["max"], (tag, h)
        assert len(h["bucket"]) == len(h["bucket_limit"]) == 30
    assert any(h["min"] != 0 or h["max"] != 0 for t, h in e["values"].items() if t.startswith("gradients/"))
print(hs[0]["step"], hs[1]["step"])
PY
is "$rc" 0 "a histogram of every weight and gradient tensor each epoch (count, buckets)"
[ "$rc" = 0 ] || diag "$err"
run tfr-cat --verify tbh/events.*
is "$rc" 0 "tfr-cat --verify accepts it"

# ---- --on-epoch -------------------------------------------------------------------
# the checkpoint of the epoch exists when the command runs; placeholders
# come quoted (a name with a space and a quote), and in the environment
run dp-train "${BASE[@]}" --epochs 3 --checkpoint-every 1e --checkpoint "o'k {epoch}.st" -o final.st \
	--tensorboard 'tb dir' \
	--on-epoch 'test -s {checkpoint} && printf "%s|%s|%s|%s|%s\n" {epoch} {checkpoint} {tensorboard} "$DP_EPOCH" "$DP_CHECKPOINT" >> got'
is "$rc" 0 "--on-epoch: exit 0"
is "$(cat got)" "1|o'k 1.st|tb dir|1|o'k 1.st
2|o'k 2.st|tb dir|2|o'k 2.st
3|final.st|tb dir|3|final.st" "after each epoch, once, with that epoch's checkpoint (the last: -o), values quoted"
# the command's output goes to stderr, not into the log on stdout
run dp-train "${BASE[@]}" --epochs 1 --on-epoch 'echo from-the-command'
unlike "$out" "from-the-command" "the command's stdout stays out of the log"
like "$err" "from-the-command" "... it goes to stderr"
# a failing command: reported, training goes on
run dp-train "${BASE[@]}" --epochs 2 --on-epoch 'echo {epoch} >> ran; exit 3'
is "$rc" 0 "a failing --on-epoch: the run goes on"
like "$err" "^dp-train: --on-epoch: epoch 1: command exited with status 3$" "... said, with its status"
is "$(cat ran | tr '\n' ' ')" "1 2 " "... and the command ran after every epoch"
rm -f ran
run dp-train "${BASE[@]}" --epochs 3 --on-epoch 'echo {epoch} >> ran; exit 3' --on-epoch-fail -o f.st
is "$rc" 1 "--on-epoch-fail: exit 1"
like "$err" "dp-train: --on-epoch: epoch 1: command exited with status 3; stopping \(--on-epoch-fail\)" "... says why"
is "$(cat ran)" "1" "... the run stopped after the first epoch's command"
run dp-train "${BASE[@]}" --on-epoch 'kill -9 $$'
like "$err" "command killed by signal 9" "a command killed by a signal: said so"
run dp-train "${BASE[@]}" --on-epoch 'echo {epoc}'
is "$rc" 2 "an unknown placeholder: exit 2"
like "$err" "--on-epoch: unknown placeholder \{epoc\}" "... named"
# dp-train killed while its command runs: the command does not outlive it
dp-train "${BASE[@]}" --epochs 1 --on-epoch 'echo $$ > cmd.pid; exec sleep 60' >/dev/null 2>&1 &
dp=$!
for i in $(seq 100); do [ -s cmd.pid ] && break; sleep 0.1; done
kill -TERM $dp
wait $dp
cpid=$(cat cmd.pid)
for i in $(seq 50); do kill -0 "$cpid" 2>/dev/null || break; sleep 0.1; done
not_ok kill -0 "$cpid" "dp-train killed while waiting: its command is ended too (SIGTERM)"
kill -9 "$cpid" 2>/dev/null

# ---- under mpirun -----------------------------------------------------------------
if have_mpirun; then
	run mpi 2 dp-train "${BASE[@]}" --epochs 2 --tensorboard tbm -o mpi.st \
		--on-epoch 'echo {epoch} $OMPI_COMM_WORLD_RANK >> mpi-ran'
	is "$rc" 0 "mpirun -np 2: exit 0"
	is "$(cat mpi-ran | tr '\n' ' ')" "1 0 2 0 " "mpirun -np 2: --on-epoch runs on rank 0 alone, once an epoch"
	is "$(find tbm -type f | wc -l)" 3 "mpirun -np 2: one event file in each folder (rank 0's)"
	run tb_dump tbm/events.*
	is "$rc" 0 "... which decodes"
	run mpi 2 dp-train "${BASE[@]}" --epochs 3 --on-epoch 'exit 4' --on-epoch-fail
	isnt "$rc" 0 "mpirun -np 2, --on-epoch-fail: the job fails"
	like "$err" "dp-train: rank 0: --on-epoch: epoch 1: command exited with status 4; stopping" "... rank 0 says why"
else
	skip "no mpirun"
fi
done_testing
