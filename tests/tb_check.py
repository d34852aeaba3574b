"""tb_check.py LOG DIR - dp-train's TensorBoard event files in DIR, read by
TensorBoard's own reader (EventAccumulator, from the tensorboard package),
hold the loss and val_loss of every line of dp-train's logfmt LOG at its step
(within 1e-6 relative: float32 scalars); DIR/validation/ each epoch's
val_loss as epoch_loss at step epoch-1 and DIR/train/ an epoch_loss (Keras's
layout); DIR the hparams session and the settings text.  Exit 0 when they all do.  The GPU
machine's Python has tensorboard (scripts/device-check, stage tb); Debian 12
has no package of it, so tests/dp-train-tensorboard.t checks the files with
tests/tb_events.py instead."""
import os
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

log, d = sys.argv[1], sys.argv[2]
ea = EventAccumulator(d, size_guidance={"scalars": 0})
ea.Reload()
tags = ea.Tags()["scalars"]
want = {}
for line in open(log):
    if line.startswith("rank="):
        continue
    kv = dict(p.split("=", 1) for p in line.split() if "=" in p)
    if "step" not in kv:
        continue
    for k in ("loss", "val_loss"):
        if k in kv:
            want[(k, int(kv["step"]))] = float(kv[k])
bad = n = 0
for (k, s), v in want.items():
    got = [e.value for e in ea.Scalars(k) if e.step == s] if k in tags else []
    n += 1
    if not got or abs(got[0] - v) > 1e-6 * max(1, abs(v)):
        bad += 1
        print(f"{k} at step {s}: log {v}, event file {got[:1]}")
# Keras's layout: validation/ holds each epoch's val_loss as epoch_loss at
# step epoch-1, under the tag train/ has too; hparams and text in DIR
val = {}
for line in open(log):
    kv = dict(p.split("=", 1) for p in line.split() if "=" in p)
    if "val_loss" in kv and not line.startswith("rank="):
        val[int(kv["epoch"]) - 1] = float(kv["val_loss"])
runs = {}
for sub in ("train", "validation"):
    runs[sub] = EventAccumulator(os.path.join(d, sub), size_guidance={"scalars": 0})
    runs[sub].Reload()
for s, v in val.items():
    got = [e.value for e in runs["validation"].Scalars("epoch_loss") if e.step == s]
    n += 1
    if not got or abs(got[0] - v) > 1e-5 * max(1, abs(v)):
        bad += 1
        print(f"validation/ epoch_loss at step {s}: log {v}, event file {got[:1]}")
if "epoch_loss" not in runs["train"].Tags()["scalars"]:
    bad += 1
    print("train/ has no epoch_loss")
other = ea.Tags().get("tensors", [])
for t in ("_hparams_/session_start_info", "settings"):
    if t not in other:
        bad += 1
        print(f"no {t} in {d}'s tensors: {other}")
print(f"{n} scalars of the log, {bad} differ; tags {sorted(tags)}; hparams and text there")
sys.exit(1 if bad or n == 0 else 0)
