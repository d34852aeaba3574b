"""serve_peer.py - the peer of bench/dp-serve.sh: TorchServe-style serving of
the same checkpoint in Python: torch's own eager model (the equivalent
torch.nn.Sequential, weights loaded with load_state_dict) behind
http.server's ThreadingHTTPServer, with the same dynamic batching as
dp-serve (a queue; one model thread takes up to MAX_BATCH samples, waiting
at most MAX_DELAY after the oldest for more), the same contract (GET /ping,
POST /invocations, {"instances": [...]} in, {"predictions": [...]} out
with label, probability and probabilities).

  serve_peer.py CHECKPOINT PORT_FILE MAX_BATCH MAX_DELAY_MS
Only the dense/relu models the benchmark uses (flatten, dense, relu).
"""
import json
import queue
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import torch


def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    meta = h.pop("__metadata__", {})
    sd = {}
    for k, v in h.items():
        if v["dtype"] != "F32":
            continue
        a, b = v["data_offsets"]
        sd[k] = torch.from_numpy(np.frombuffer(raw[8 + n + a:8 + n + b], "<f4").reshape(v["shape"]).copy())
    mods = []
    items = meta["model"].split(",")
    width = int(np.prod([int(x) for x in meta["input_shape"].split("x")]))
    for it in items:
        if it == "flatten":
            mods.append(torch.nn.Flatten())
        elif it == "relu":
            mods.append(torch.nn.ReLU())
        elif it.startswith("dense:"):
            k = int(it.split(":")[1])
            mods.append(torch.nn.Linear(width, k))
            width = k
        else:
            raise SystemExit(f"serve_peer.py: {it}: not in this peer")
    m = torch.nn.Sequential(*mods)
    m.load_state_dict({k: v for k, v in sd.items() if k.split(".")[0].isdigit()}, strict=True)
    m.eval()
    scale = meta.get("scale", "1")
    a, _, b = scale.partition("/")
    return m, float(a) / (float(b) if b else 1.0)


class Batcher:
    def __init__(self, model, scale, max_batch, max_delay):
        self.m, self.scale, self.max_batch, self.max_delay = model, scale, max_batch, max_delay
        self.q = queue.Queue()
        threading.Thread(target=self.run, daemon=True).start()

    def submit(self, x):
        done = threading.Event()
        item = {"x": x, "done": done}
        self.q.put((time.monotonic(), item))
        done.wait()
        return item["out"]

    def run(self):
        while True:
            t0, item = self.q.get()
            batch = [item]
            n = len(item["x"])
            while n < self.max_batch:
                left = t0 + self.max_delay - time.monotonic()
                if left <= 0:
                    break
                try:
                    _, it = self.q.get(timeout=left)
                except queue.Empty:
                    break
                batch.append(it)
                n += len(it["x"])
            x = torch.from_numpy(np.concatenate([b["x"] for b in batch]) * np.float32(self.scale))
            with torch.inference_mode():
                p = torch.softmax(self.m(x), 1).numpy()
            i = 0
            for b in batch:
                k = len(b["x"])
                b["out"] = p[i:i + k]
                i += k
                b["done"].set()


def main():
    path, port_file, max_batch, max_delay = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]) / 1e3
    model, scale = load(path)
    b = Batcher(model, scale, max_batch, max_delay)

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def reply(self, code, body):
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            self.reply(200 if self.path == "/ping" else 404, b"{}")

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.path != "/invocations":
                return self.reply(404, b"{}")
            inst = json.loads(body)["instances"]
            x = np.asarray(inst, dtype=np.float32).reshape(len(inst), -1)
            p = b.submit(x)
            preds = [{"label": int(r.argmax()), "probability": float(r.max()),
                      "probabilities": [float(v) for v in r]} for r in p]
            self.reply(200, json.dumps({"predictions": preds}).encode())

    s = ThreadingHTTPServer(("127.0.0.1", 0), H)
    s.daemon_threads = True
    with open(port_file + ".tmp", "w") as f:
        f.write(f"{s.server_address[1]}\n")
    import os
    os.rename(port_file + ".tmp", port_file)
    s.serve_forever()


if __name__ == "__main__":
    main()
