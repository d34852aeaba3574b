#!/bin/bash
# bench/dp-serve.sh - dp-serve against TorchServe-style serving of the same
# checkpoint in Python (bench/serve_peer.py: torch's eager model behind
# http.server's ThreadingHTTPServer, the same dynamic batching), on
# 127.0.0.1 only, loaded by wrk (CONNS connections, 2 threads, DURATION
# seconds a run): requests/s and the p50/p99 latency wrk reports, ROUNDS
# (default 3) runs of each side alternated, medians, and the throughput
# ratio.  The model: a Fashion-MNIST-sized MLP (1x28x28 uint8 values
# scaled 1/255, flatten,dense:256,relu,dense:10, trained a few steps on
# random records: the speed does not depend on the weights), one sample a
# request as JSON {"instances": [[784 numbers]]}.  Both sides: one model
# thread of 1 math thread, batches of up to 32 waiting up to 2 ms; torch
# and OpenBLAS on one thread (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS).
# Before the timings, one answer of each is checked against the other.
set -eu
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
CONNS=${CONNS:-16}
PY=/usr/bin/python3
T=$(mktemp -d "${TMPDIR:-/tmp}/dpbench.XXXXXX")
PIDS=
trap 'for p in $PIDS; do kill $p 2>/dev/null; done; rm -rf "$T"' EXIT INT TERM
if ! command -v wrk >/dev/null || ! $PY -c 'import torch' 2>/dev/null; then
	echo "bench/dp-serve.sh: SKIP: wrk or python3-torch is not installed (scripts/deps --test)"
	exit 0
fi
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
S="$(cd "$(dirname "$0")/.." && pwd)"
cd "$T"
$PY - <<'PYEOF'
import numpy as np, json
r = np.random.default_rng(1)
x = r.integers(0, 256, size=(512, 784))
np.savez("d.npz", x=x, y=r.integers(0, 10, 512))
open("body.json", "w").write(json.dumps({"instances": x[:1].tolist()}))
PYEOF
$PY "$S/tests/mkexamples.py" d.tfr npz d.npz --kind uint8
dp-train --train d.tfr --decode-raw uint8 --scale 1/255 --input-shape 1x28x28 \
	--model flatten,dense:256,relu,dense:10 --epochs 1 --batch-size 64 -q -o m.safetensors > /dev/null
printf 'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\nwrk.body = io.open("body.json", "rb"):read("*a")\n' > post.lua

start_dp() {
	rm -f port
	dp-serve --model m.safetensors --bind 127.0.0.1 --port 0 --port-file port --workers 1 \
		--threads 1 --http-threads 1 --max-batch 32 --max-delay 2 --max-queue 4096 --stats-every 0 -q &
	PID=$!
}
start_py() {
	rm -f port
	$PY "$S/bench/serve_peer.py" m.safetensors port 32 2 2>/dev/null &
	PID=$!
}
wait_port() {
	for _ in $(seq 200); do [ -s port ] && break; sleep 0.05; done
	PORT=$(cat port)
}
# one answer of each, compared
start_dp; PIDS="$PID"; wait_port
curl -s -H 'Content-Type: application/json' --data-binary @body.json "http://127.0.0.1:$PORT/invocations" > a.json
kill $PID; wait $PID 2>/dev/null || true
start_py; PIDS="$PID"; wait_port
curl -s -H 'Content-Type: application/json' --data-binary @body.json "http://127.0.0.1:$PORT/invocations" > b.json
kill $PID; wait $PID 2>/dev/null || true
$PY -c '
import json
a, b = (json.load(open(f))["predictions"][0] for f in ("a.json", "b.json"))
d = max(abs(x - y) for x, y in zip(a["probabilities"], b["probabilities"]))
assert a["label"] == b["label"] and d < 1e-5, (a, b)
print("same answer: label %d, largest probability difference %.2g" % (a["label"], d))'

# run SIDE: one wrk run against a fresh server; "rps p50_ms p99_ms" appended to SIDE.txt
ms() { awk '{v=$1; if (v ~ /us$/) {sub(/us$/,"",v); v/=1000} else if (v ~ /ms$/) {sub(/ms$/,"",v)} else if (v ~ /s$/) {sub(/s$/,"",v); v*=1000}; print v}'; }
run() {
	"start_$1"; PIDS="$PID"; wait_port
	timeout $((DURATION + 30)) wrk -t 2 -c "$CONNS" -d "${DURATION}s" --latency -s post.lua "http://127.0.0.1:$PORT/invocations" > w.txt
	kill $PID; wait $PID 2>/dev/null || true
	if grep -q 'Non-2xx\|Socket errors' w.txt; then
		echo "bench/dp-serve.sh: $1: errors under load:"; cat w.txt; exit 1
	fi
	rps=$(awk '/Requests\/sec/ {print $2}' w.txt)
	p50=$(awk '$1 == "50%" {print $2}' w.txt | ms)
	p99=$(awk '$1 == "99%" {print $2}' w.txt | ms)
	echo "$rps $p50 $p99" >> "$1.txt"
	printf '%-8s requests/s %8.0f   p50 %7.2f ms   p99 %7.2f ms\n' "$1" "$rps" "$p50" "$p99"
}
for _ in $(seq "$ROUNDS"); do
	run dp
	run py
done
med() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
for s in dp py; do
	eval "${s}_rps=$(cut -d' ' -f1 $s.txt | med) ${s}_p50=$(cut -d' ' -f2 $s.txt | med) ${s}_p99=$(cut -d' ' -f3 $s.txt | med)"
done
echo "medians of $ROUNDS runs, $CONNS connections, ${DURATION} s each, one sample a request:"
printf 'dp-serve          requests/s %8.0f   p50 %7.2f ms   p99 %7.2f ms\n' "$dp_rps" "$dp_p50" "$dp_p99"
printf 'python+torch      requests/s %8.0f   p50 %7.2f ms   p99 %7.2f ms\n' "$py_rps" "$py_p50" "$py_p99"
awk -v a="$dp_rps" -v b="$py_rps" 'BEGIN {printf "throughput ratio dp-serve/python: %.2f\n", a / b}'
