#!/usr/bin/env bash
# dp-serve with real clients on 127.0.0.1: curl and Python's http.client
# (tests/serve_client.py), every answer checked against dp-eval's
# predictions on the same records; the bodies (JSON, npy, TFRecord, PNG);
# the bounds (413, 415, 400, 429, 503); a bounded load test (a few seconds,
# threads each with their own connection: no answer lost or mixed up); a
# checkpoint swapped under load with SIGHUP (no request dropped, answers
# from the new model after); SageMaker's `serve`; predictions on files.
. "${DP_SRC:-.}/tests/lib.sh"

cd "$T"
MK="$PY $DP_SRC/tests/mkexamples.py"
CLIENT="$PY $DP_SRC/tests/serve_client.py"
if ! command -v curl >/dev/null || ! $PY -c 'import numpy, PIL' 2>/dev/null; then
	skip "curl, python3-numpy or python3-pil is not installed (scripts/deps --test)"
	done_testing
fi

$PY - <<'EOF'
import numpy as np, os
from PIL import Image
r = np.random.default_rng(3)
x = r.integers(0, 256, size=(60, 2, 8, 8))
np.savez("cnn.npz", x=x, y=r.integers(0, 4, 60))
np.save("cnn_x.npy", x.astype(np.float32))
os.makedirs("img/a", exist_ok=True); os.makedirs("img/b", exist_ok=True)
for i in range(6):
    Image.fromarray(r.integers(0, 256, size=(12, 10 + i, 3), dtype=np.uint8)).save(f"img/{'ab'[i % 2]}/{i}.png")
EOF
$MK cnn.tfr npz cnn.npz --kind uint8
C=(--epochs 1 --batch-size 16 -q)
dp-train --train cnn.tfr --decode-raw uint8 --scale 1/255 --input-shape 2x8x8 \
	--model conv:4:3,batchnorm,relu,maxpool:2,flatten,dense:4 "${C[@]}" -o cnn.st
dp-train --train cnn.tfr --decode-raw uint8 --scale 1/255 --input-shape 2x8x8 \
	--model conv:4:3,batchnorm,relu,maxpool:2,flatten,dense:4 --epochs 2 --batch-size 8 --seed 9 -q -o cnn2.st
dp-eval --model cnn.st cnn.tfr --predictions cnn.jsonl -q
dp-eval --model cnn2.st cnn.tfr --predictions cnn2.jsonl -q
tfr-cat --encode images img > img.tfr
dp-train --train img.tfr --decode image --input-shape 3x8x8 --scale 1/255 --model flatten,dense:2 "${C[@]}" -o img.st

# start ARGS...: a server on a free port of 127.0.0.1 ($PORT, $SPID)
start() {
	rm -f port
	dp-serve --bind 127.0.0.1 --port 0 --port-file port --stats-every 0 "$@" 2>>serve.log &
	SPID=$!
	for _ in $(seq 100); do [ -s port ] && break; sleep 0.1; done
	PORT=$(cat port 2>/dev/null)
}
stop() {
	kill -TERM "$SPID" 2>/dev/null
	wait "$SPID"
	src=$?
}

# ---- usage -----------------------------------------------------------------
run dp-serve --help
is "$rc" 0 "--help exits 0"
like "$out" "/invocations" "... and names the endpoint"
run dp-serve
is "$rc" 2 "no --model: usage error"
run dp-serve --model cnn.st --bogus
is "$rc" 2 "unknown option: usage error"
run dp-serve --model missing.st --port 0
is "$rc" 1 "a missing checkpoint: exit 1"
like "$err" "missing.st" "... naming it"
run dp-serve --model cnn.st --classes a,b,c --port 0
is "$rc" 1 "class names of another count: refused"
like "$err" "3 class names for a model of 4 classes" "... saying why"

# ---- the contract, with curl ----------------------------------------------
start --model cnn.st --classes w,x,y,z --log-requests --max-queue 4096
ok test -n "$PORT" "listening (--port-file)"
run curl -s -o ping.json -w '%{http_code}' "http://127.0.0.1:$PORT/ping"
is "$out" 200 "GET /ping: 200"
like "$(cat ping.json)" '"input_shape": "2x8x8"' "... saying what it serves"
run curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/nothing"
is "$out" 404 "an unknown path: 404"
run curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/invocations"
is "$out" 405 "GET /invocations: 405"
run curl -s -w '\n%{http_code}' -H 'Content-Type: application/x-tfrecord' --data-binary @cnn.tfr \
	"http://127.0.0.1:$PORT/invocations"
is "$(tail -n 1 <<<"$out")" 200 "a TFRecord of 60 records: 200"
head -n -1 <<<"$out" > tfr.json
run $PY - <<'EOF'
import json, numpy as np
a = json.load(open("tfr.json"))["predictions"]
w = [json.loads(l) for l in open("cnn.jsonl")]
d = max(abs(p - q) for x, y in zip(a, w) for p, q in zip(x["probabilities"], y["probabilities"]))
same = sum(x["label"] == y["predicted"] for x, y in zip(a, w))
names = {x["class"] for x in a} <= set("wxyz")
print(len(a), same, d <= 1e-6, names)
EOF
is "$out" "60 60 True True" "... every record's answer dp-eval's (probabilities, label, class name)"
run curl -s -w '\n%{http_code}' -H 'Content-Type: text/csv' -d '1,2' "http://127.0.0.1:$PORT/invocations"
is "$(tail -n 1 <<<"$out")" 415 "an unserved media type: 415"
run curl -s -w '\n%{http_code}' -H 'Content-Type: application/json' -d '[[1,2,3]]' "http://127.0.0.1:$PORT/invocations"
is "$(tail -n 1 <<<"$out")" 400 "a sample of the wrong size: 400"
like "$out" "sample 0 has 3 values, the model takes 128" "... saying why"
run curl -s -w '\n%{http_code}' -H 'Content-Type: application/json' -d '{"instances": [[1, "x"]]}' "http://127.0.0.1:$PORT/invocations"
is "$(tail -n 1 <<<"$out")" 400 "a string among the numbers: 400"
run curl -s -w '\n%{http_code}' -H 'Content-Type: application/x-tfrecord' --data-binary @cnn.npz "http://127.0.0.1:$PORT/invocations"
is "$(tail -n 1 <<<"$out")" 400 "not TFRecord bytes: 400"
like "$out" "body: " "... the body named, not a file descriptor"

# ---- Python's http.client: JSON and npy ------------------------------------
$CLIENT check "$PORT" cnn_x.npy cnn.jsonl > check.out 2>&1
while IFS= read -r line; do
	case "$line" in PASS*) _tap_result 0 "http.client: ${line#PASS }" ;; FAIL*) _tap_result 1 "http.client: ${line#FAIL }" ;; *) diag "$line" ;; esac
done < check.out
grep -q '^PASS\|^FAIL' check.out || { _tap_result 1 "serve_client.py check ran"; sed 's/^/# /' check.out; }

# ---- load: a few seconds of 8 connections ------------------------------------
$CLIENT load "$PORT" cnn_x.npy cnn.jsonl --seconds 3 --threads 8 > load.out 2>&1
while IFS= read -r line; do
	case "$line" in PASS*) _tap_result 0 "load: ${line#PASS }" ;; FAIL*) _tap_result 1 "load: ${line#FAIL }" ;; *) diag "$line" ;; esac
done < load.out
grep -q '^PASS' load.out || { _tap_result 1 "serve_client.py load ran"; sed 's/^/# /' load.out; }
if command -v wrk >/dev/null; then
	printf 'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/x-tfrecord"\nwrk.body = io.open("cnn.tfr", "rb"):read("*a")\n' > post.lua
	run timeout 20 wrk -t 2 -c 16 -d 2s -s post.lua "http://127.0.0.1:$PORT/invocations"
	diag "$(grep -E 'Requests/sec|Latency' <<<"$out")"
	unlike "$out" "Non-2xx|Socket errors" "wrk, 16 connections for 2 s: every answer 200, no socket error"
else
	skip "wrk is not installed (scripts/deps --test)"
fi
stop
is "$src" 0 "SIGTERM: exit 0"
like "$(cat serve.log)" "event=stopped requests=[1-9]" "... logging the counts (logfmt)"
like "$(cat serve.log)" "level=info status=200 samples=" "--log-requests: a line a request"

# ---- reload under load: SIGHUP with the checkpoint replaced -------------------
cp cnn.st live.st
start --model live.st
$CLIENT load "$PORT" cnn_x.npy cnn.jsonl --seconds 4 --threads 4 --alt cnn2.jsonl > reload.out 2>&1 &
LPID=$!
sleep 1.5
cp cnn2.st live.new && mv live.new live.st
kill -HUP "$SPID"
wait "$LPID"
while IFS= read -r line; do
	case "$line" in PASS*) _tap_result 0 "reload: ${line#PASS }" ;; FAIL*) _tap_result 1 "reload: ${line#FAIL }" ;; *) diag "$line" ;; esac
done < reload.out
grep -q '^PASS' reload.out || { _tap_result 1 "serve_client.py load ran"; sed 's/^/# /' reload.out; }
like "$(curl -s "http://127.0.0.1:$PORT/ping")" '"generation": 2' "/ping says generation 2"
printf 'broken' > live.st
kill -HUP "$SPID"
sleep 1
like "$(cat serve.log)" "event=reload_failed" "a bad checkpoint on SIGHUP: logged"
run curl -s -w '\n%{http_code}' -H 'Content-Type: application/x-tfrecord' --data-binary @cnn.tfr "http://127.0.0.1:$PORT/invocations"
is "$(tail -n 1 <<<"$out")" 200 "... and the old one keeps serving"
stop

# ---- bounds: body size, queue, deadline ------------------------------------------
start --model cnn.st --max-body 8k --max-queue 4 --max-delay 400 --timeout 0.2 --max-batch 64
run curl -s -w '\n%{http_code}' -H 'Content-Type: application/x-tfrecord' --data-binary @cnn.tfr "http://127.0.0.1:$PORT/invocations"
is "$(tail -n 1 <<<"$out")" 413 "a body over --max-body: 413"
$PY -c 'import json, numpy as np; print(json.dumps(np.load("cnn_x.npy")[:3].reshape(3, -1).tolist()))' > three.json
pids=
for i in 1 2; do
	curl -s -o "q$i.out" -w '%{http_code}\n' -H 'Content-Type: application/json' --data-binary @three.json "http://127.0.0.1:$PORT/invocations" > "q$i.code" &
	pids="$pids $!"
	sleep 0.1
done
wait $pids
codes=$(cat q1.code q2.code | sort | tr '\n' ' ')
is "$codes" "429 503 " "a queue of 4 samples: the second request 429; the first, held past --timeout, 503"
stop

# ---- images, and SageMaker's serve ---------------------------------------------
mkdir -p ml/model
cp img.st model.safetensors && tar -czf ml/model/model.tar.gz model.safetensors
rm -f port
SAGEMAKER_BIND_TO_PORT=0 DP_SAGEMAKER_ROOT="$T/ml" dp-serve serve --bind 127.0.0.1 --port-file port --stats-every 0 2>>serve.log &
SPID=$!
for _ in $(seq 100); do [ -s port ] && break; sleep 0.1; done
PORT=$(cat port)
like "$(curl -s "http://127.0.0.1:$PORT/ping")" '"input_shape": "3x8x8"' "serve (SageMaker): the model of ml/model/model.tar.gz"
run curl -s -H 'Content-Type: image/png' --data-binary @img/a/0.png "http://127.0.0.1:$PORT/invocations"
got=$($PY -c 'import json,sys; print(json.load(sys.stdin)["predictions"][0]["probabilities"])' <<<"$out")
dp-eval --model img.st img.tfr --predictions img.jsonl -q
want=$(head -n 1 img.jsonl | $PY -c 'import json,sys; print(json.load(sys.stdin)["probabilities"])')
run $PY -c "import sys; a, b = $got, $want; sys.exit(max(abs(x - y) for x, y in zip(a, b)) > 1e-6)"
is "$rc" 0 "a PNG body: dp-eval's probabilities for its record"
stop

# ---- predictions on files ---------------------------------------------------------
run dp-serve --model img.st --classes cat,dog --top-k 1 img/a/0.png img
is "$rc" 0 "files: exit 0"
is "$(wc -l <<<"$out" | tr -d ' ')" 7 "... a line a file (one, then a folder of 6)"
like "$(head -n 1 <<<"$out")" "^img/a/0.png: (cat|dog) 0\.[0-9]{4}$" "... FILE: CLASS PROBABILITY"
run dp-serve --model img.st --json img/a/0.png
like "$out" '^\{"file":"img/a/0.png","label":[01],' "--json: a JSON line a file"
mkdir -p more && $PY -c '
from PIL import Image
im = Image.open("img/a/0.png").convert("RGB")
im.save("more/x.webp", lossless=True); im.save("more/y.tif"); im.save("more/z.bmp"); im.save("more/w.ppm")
open("more/notes.txt", "w").write("not an image")' || exit 1
run dp-serve --model img.st --json more
is "$rc:$(grep -c '"file":"more/[wxyz]\.' <<<"$out")" "0:4" "a folder of WebP, TIFF, BMP and PPM: a line each (what ImageFolder takes), the text file passed over"
is "$($PY -c '
import json, sys
p = [json.loads(l)["probabilities"] for l in sys.stdin]
print(int(all(max(abs(a - b) for a, b in zip(x, p[0])) < 1e-6 for x in p)))' <<<"$out")" 1 \
	"... each the same image's probabilities"
run dp-serve --model img.st missing.png cnn.npz
is "$rc" 1 "files that are not images: exit 1"
like "$err" "missing.png" "... naming them"

done_testing
