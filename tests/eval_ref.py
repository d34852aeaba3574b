"""eval_ref.py - the reference side of dp-eval's tests (Debian's /usr/bin/python3).

  eval_ref.py check REPORT.json PRED.jsonl --data FILE=NPZ... [--torch CKPT] [--topk K]

Recomputes dp-eval's metrics independently and compares them with its
metrics JSON (REPORT) and per-record predictions (PRED, JSON lines):

  data     every record of every FILE appears once in PRED, with the label
           of the matching row of NPZ (x, y arrays: the data the TFRecord
           FILE was written from, by mkexamples.py)
  metrics  recomputed from PRED (labels, predictions, losses, outputs) in
           plain Python, no scikit-learn: counts and the confusion matrix
           exactly, the loss as math.fsum's correctly rounded sum (so the
           exact accumulator must give the same bits), averages within
           1e-12
  --torch  the checkpoint loaded into the equivalent torch.nn.Sequential
           with load_state_dict (tests/torch_ref.py), run on NPZ's x in
           eval mode: its probabilities (or outputs) match PRED's within
           float rounding, and the metrics computed from torch's logits -
           accuracy, top-k, confusion, loss - match REPORT (the loss within
           1e-5: float32 logits computed another way)

Prints "PASS what" or "FAIL what: detail" per check; exit 1 if any failed.
"""
import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

fails = 0


def check(ok, what, detail=""):
    global fails
    if ok:
        print(f"PASS {what}")
    else:
        fails += 1
        print(f"FAIL {what}: {detail}")


def close(a, b, rel=1e-12, abs_=1e-15):
    if a is None or b is None:
        return a is b
    return abs(a - b) <= max(abs_, rel * max(abs(a), abs(b)))


def class_metrics(labels, preds, losses, k, scores=None, topk=0):
    """sklearn's classification_report, by hand."""
    n = len(labels)
    support = [0] * k
    predicted = [0] * k
    tp = [0] * k
    conf = [[0] * k for _ in range(k)]
    for y, p in zip(labels, preds):
        support[y] += 1
        predicted[p] += 1
        tp[y] += y == p
        conf[y][p] += 1
    prec = [tp[j] / predicted[j] if predicted[j] else 0.0 for j in range(k)]
    rec = [tp[j] / support[j] if support[j] else 0.0 for j in range(k)]
    f1 = [2 * prec[j] * rec[j] / (prec[j] + rec[j]) if prec[j] + rec[j] > 0 else 0.0
          for j in range(k)]
    seen = [j for j in range(k) if support[j] or predicted[j]]
    m = {
        "samples": n,
        "loss": math.fsum(losses) / n,
        "accuracy": sum(tp) / n,
        "precision_macro": sum(prec[j] for j in seen) / len(seen),
        "recall_macro": sum(rec[j] for j in seen) / len(seen),
        "f1_macro": sum(f1[j] for j in seen) / len(seen),
        "precision_weighted": sum(support[j] * prec[j] for j in range(k)) / n,
        "recall_weighted": sum(support[j] * rec[j] for j in range(k)) / n,
        "f1_weighted": sum(support[j] * f1[j] for j in range(k)) / n,
    }
    if topk and scores is not None:
        hits = sum(1 for s, y in zip(scores, labels) if sum(1 for v in s if v > s[y]) < topk)
        m[f"top_{topk}_accuracy"] = hits / n
    classes = [{"class": j, "precision": prec[j], "recall": rec[j], "f1": f1[j],
                "support": support[j], "predicted": predicted[j]} for j in range(k)]
    return m, classes, conf


def reg_metrics(outs, targets):
    # the values are float32 (JSON gives their shortest decimal text)
    outs = [[float(np.float32(v)) for v in o] for o in outs]
    targets = [[float(np.float32(v)) for v in t] for t in targets]
    n, k = len(outs), len(outs[0])
    sse, sae, r2s = 0.0, 0.0, []
    outputs = []
    for j in range(k):
        d = [float(o[j]) - float(t[j]) for o, t in zip(outs, targets)]
        a = math.fsum(x * x for x in d)
        b = math.fsum(abs(x) for x in d)
        ys = [float(t[j]) for t in targets]
        mean = math.fsum(ys) / n
        tot = math.fsum((y - mean) ** 2 for y in ys)
        r2 = 1 - a / tot if tot > 0 else (1.0 if a == 0 else 0.0)
        outputs.append({"output": j, "mse": a / n, "mae": b / n, "r2": r2})
        sse += a
        sae += b
        r2s.append(r2)
    losses = [math.fsum((float(o[j]) - float(t[j])) ** 2 for j in range(k)) / k
              for o, t in zip(outs, targets)]
    m = {"samples": n, "loss": math.fsum(losses) / n, "mse": sse / (n * k),
         "mae": sae / (n * k), "r2": sum(r2s) / k}
    m["rmse"] = math.sqrt(m["mse"])
    return m, outputs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["check"])
    ap.add_argument("report")
    ap.add_argument("pred")
    ap.add_argument("--data", action="append", default=[])
    ap.add_argument("--torch", default=None)
    ap.add_argument("--topk", type=int, default=0)
    a = ap.parse_args()

    rep = json.load(open(a.report))
    rows = [json.loads(l) for l in open(a.pred)]
    data = {}
    for d in a.data:
        f, z = d.split("=", 1)
        data[f] = np.load(z)
    cls = rep["model"]["loss"] == "xent"

    # every record once, joined back to its input
    keys = [(r["file"], r["record"]) for r in rows]
    want = [(f, i) for f, z in data.items() for i in range(len(z["y"]))]
    check(sorted(keys) == sorted(want), "every record appears once in the predictions",
          f"{len(keys)} rows, {len(set(keys))} distinct, {len(want)} records")
    if cls:
        bad = [r for r in rows if r["label"] != int(data[r["file"]]["y"][r["record"]])]
        check(not bad, "each prediction carries its record's label", str(bad[:1]))
    else:
        bad = [r for r in rows
               if not np.array_equal(np.float32(r["target"]),
                                     np.float32(data[r["file"]]["y"][r["record"]]).ravel())]
        check(not bad, "each prediction carries its record's target", str(bad[:1]))

    # metrics recomputed from the predictions
    m = rep["metrics"]
    if cls:
        k = len(rep["classes"])
        labels = [r["label"] for r in rows]
        preds = [r["predicted"] for r in rows]
        am = [int(np.argmax(np.float32(r["probabilities"]))) for r in rows]
        check(preds == am or all(p == q or r["probabilities"][p] == r["probabilities"][q]
                                 for p, q, r in zip(preds, am, rows)),
              "predicted = argmax of the probabilities")
        mm, classes, conf = class_metrics(labels, preds, [r["loss"] for r in rows], k)
        for name, v in mm.items():
            exact = name in ("samples", "loss", "accuracy")
            check(m[name]["value"] == v if exact else close(m[name]["value"], v),
                  f"{name} from the predictions{' (exactly)' if exact else ''}",
                  f"dp-eval {m[name]['value']!r}, reference {v!r}")
        got = [{kk: c[kk] for kk in ("class", "precision", "recall", "f1", "support", "predicted")}
               for c in rep["classes"]]
        check(all(g["support"] == w["support"] and g["predicted"] == w["predicted"] and
                  all(close(g[x], w[x]) for x in ("precision", "recall", "f1"))
                  for g, w in zip(got, classes)) and len(got) == len(classes),
              "per-class precision, recall, f1, support", f"{got} vs {classes}")
        check(rep.get("confusion_matrix") == conf, "confusion matrix",
              f"{rep.get('confusion_matrix')} vs {conf}")
    else:
        outs = [r["output"] for r in rows]
        targets = [r["target"] for r in rows]
        mm, outputs = reg_metrics(outs, targets)
        for name, v in mm.items():
            exact = name in ("samples", "loss")
            check(m[name]["value"] == v if exact else close(m[name]["value"], v),
                  f"{name} from the predictions{' (exactly)' if exact else ''}",
                  f"dp-eval {m[name]['value']!r}, reference {v!r}")
        check(all(close(g[x], w[x]) for g, w in zip(rep["outputs"], outputs)
                  for x in ("mse", "mae", "r2")), "per-output mse, mae, r2",
              f"{rep['outputs']} vs {outputs}")

    if not a.torch:
        sys.exit(1 if fails else 0)

    # the model in PyTorch
    import torch
    import torch.nn as nn
    import torch_ref
    torch.set_num_threads(1)
    tensors, meta = torch_ref.load_checkpoint(a.torch)
    net = torch_ref.sequential(meta["model"], torch_ref.parse_shape(meta["input_shape"]))
    net.load_state_dict(torch_ref.state_of(tensors), strict=True)
    net.eval()
    body = net[:-1] if isinstance(net[-1], nn.Softmax) else net
    scale = meta.get("scale", "1")
    num, _, den = scale.partition("/")
    s = float(num) / (float(den) if den else 1.0)
    shape = torch_ref.parse_shape(meta["input_shape"])
    tout = {}
    with torch.no_grad():
        for f, z in data.items():
            x = torch.from_numpy(np.asarray(z["x"], np.float32).reshape([-1] + shape) *
                                 np.float32(s))
            tout[f] = body(x).numpy().astype(np.float64)
    if cls:
        probs = {f: torch.softmax(torch.from_numpy(o), 1).numpy() for f, o in tout.items()}
        worst = max(float(np.max(np.abs(np.float64(r["probabilities"]) -
                                        probs[r["file"]][r["record"]]))) for r in rows)
        check(worst < 2e-5, "probabilities equal torch's within float rounding",
              f"max difference {worst:.3g}")
        logits = [tout[r["file"]][r["record"]] for r in rows]
        tl = [math.log(math.fsum(math.exp(v - max(z)) for v in z)) - (z[y] - max(z))
              for z, y in zip(logits, labels)]
        tp = [int(np.argmax(z)) for z in logits]
        tm, _, tconf = class_metrics(labels, tp, tl, k, [list(z) for z in logits], a.topk)
        check(tconf == rep.get("confusion_matrix"), "confusion matrix from torch's logits",
              f"{tconf} vs {rep.get('confusion_matrix')}")
        for name in ("accuracy", f"top_{a.topk}_accuracy" if a.topk else None):
            if name:
                check(m[name]["value"] == tm[name], f"{name} from torch's logits",
                      f"dp-eval {m[name]['value']}, torch {tm[name]}")
        check(close(m["loss"]["value"], tm["loss"], rel=1e-5), "loss from torch's logits",
              f"dp-eval {m['loss']['value']}, torch {tm['loss']}")
    else:
        worst = max(float(np.max(np.abs(np.float64(r["output"]) - tout[r["file"]][r["record"]])))
                    for r in rows)
        check(worst < 1e-4, "outputs equal torch's within float rounding",
              f"max difference {worst:.3g}")
        tm, _ = reg_metrics([list(tout[r["file"]][r["record"]]) for r in rows], targets)
        for name in ("mse", "mae", "r2"):
            check(close(m[name]["value"], tm[name], rel=1e-4), f"{name} from torch's outputs",
                  f"dp-eval {m[name]['value']}, torch {tm[name]}")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
