"""serve_client.py - a real HTTP client of dp-serve (Python's http.client),
checking every answer against dp-eval's predictions for the same records.

  serve_client.py check PORT INPUT.npy PRED.jsonl [PRED2.jsonl]
      every sample alone and in groups, as JSON and as npy: each answer's
      probabilities those of its rows (within 1e-6: the softmax of dp-eval
      and of the model's predict may differ in the last bit), its label the
      argmax: PASS/FAIL lines
  serve_client.py load PORT INPUT.npy PRED.jsonl --seconds S --threads T
      [--alt PRED2.jsonl]
      T threads, each its own connection, send requests of 1 to 5 random
      rows for S seconds (bounded: it stops by itself); every answer must be
      the rows it asked for (none lost, none mixed up), from one model
      (PRED, or with --alt PRED2 while a reload happens); prints counts and
      "PASS"/"FAIL" lines
"""
import http.client
import io
import json
import sys
import threading
import time

import numpy as np

TOL = 1e-6


def preds(path):
    return np.array([json.loads(l).get("probabilities") or json.loads(l).get("outputs")
                     for l in open(path)], dtype=np.float64)


def post(conn, body, ctype):
    conn.request("POST", "/invocations", body=body, headers={"Content-Type": ctype})
    r = conn.getresponse()
    data = r.read()
    return r.status, data


def probs(answer):
    out = []
    for p in answer["predictions"]:
        out.append(p.get("probabilities", p.get("outputs")))
    return np.array(out, dtype=np.float64)


def matches(ans, want):
    got = probs(ans)
    if got.shape != want.shape or np.max(np.abs(got - want)) > TOL:
        return False
    for p, w in zip(ans["predictions"], want):
        if "label" in p and p["label"] != int(np.argmax(w)):
            return False
    return True


def check(port, x, want):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    bad = 0
    n = len(x)
    groups = [[i] for i in range(n)] + [list(range(i, min(i + 7, n))) for i in range(0, n, 7)]
    for g in groups:
        body = json.dumps({"instances": x[g].reshape(len(g), -1).tolist()})
        st, data = post(conn, body, "application/json")
        if st != 200 or not matches(json.loads(data), want[g]):
            bad += 1
    print(("PASS" if not bad else "FAIL") + f" JSON: {len(groups)} requests answered with their rows ({bad} wrong)")
    bad = 0
    for g in groups[n:]:
        b = io.BytesIO()
        np.save(b, x[g])
        st, data = post(conn, b.getvalue(), "application/x-npy")
        if st != 200 or not matches(json.loads(data), want[g]):
            bad += 1
    print(("PASS" if not bad else "FAIL") + f" npy: {len(groups) - n} requests answered with their rows ({bad} wrong)")


def load(port, x, want, alt, seconds, threads):
    stop = time.monotonic() + seconds
    counts = {"ok": 0, "alt": 0, "wrong": 0, "error": 0, "latency": []}
    lock = threading.Lock()
    rng = np.random.default_rng(5)
    seeds = rng.integers(0, 1 << 30, threads)

    def run(seed):
        r = np.random.default_rng(seed)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while time.monotonic() < stop:
            g = r.integers(0, len(x), r.integers(1, 6))
            body = json.dumps({"instances": x[g].reshape(len(g), -1).tolist()})
            t = time.monotonic()
            try:
                st, data = post(conn, body, "application/json")
            except Exception as e:  # noqa: BLE001 - counted as an error
                with lock:
                    counts["error"] += 1
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                continue
            dt = time.monotonic() - t
            key = "error"
            if st == 200:
                a = json.loads(data)
                key = "ok" if matches(a, want[g]) else "alt" if alt is not None and matches(a, alt[g]) else "wrong"
            with lock:
                counts[key] += 1
                counts["latency"].append(dt)

    ts = [threading.Thread(target=run, args=(int(s),)) for s in seeds]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    lat = np.array(counts["latency"]) * 1e3
    n = counts["ok"] + counts["alt"] + counts["wrong"]
    print(f"# requests {n} ok {counts['ok']} alt {counts['alt']} wrong {counts['wrong']} "
          f"errors {counts['error']} p50 {np.percentile(lat, 50):.2f} ms p99 {np.percentile(lat, 99):.2f} ms")
    print(("PASS" if n > 0 and not counts["wrong"] else "FAIL") + f" {n} answers, every one its own rows ({counts['wrong']} mixed up)")
    print(("PASS" if not counts["error"] else "FAIL") + f" no request failed ({counts['error']})")
    if alt is not None:
        print(("PASS" if counts["alt"] > 0 else "FAIL") + f" answers from the reloaded model too ({counts['alt']})")


def main():
    a = sys.argv[1:]
    if a[:1] == ["check"]:
        check(int(a[1]), np.load(a[2]), preds(a[3]))
    elif a[:1] == ["load"]:
        alt = preds(a[a.index("--alt") + 1]) if "--alt" in a else None
        load(int(a[1]), np.load(a[2]), preds(a[3]), alt, float(a[a.index("--seconds") + 1]),
             int(a[a.index("--threads") + 1]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
