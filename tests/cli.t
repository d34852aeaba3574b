#!/bin/bash
# cli.t - what every program does alike (tools/cli.c): --version, --help to
# a full disk, the unknown-option wording, the usage line and exit 2, and a
# reader that goes away (quietly, 141, whether the caller ignores SIGPIPE
# or not).
. "${DP_SRC:-.}/tests/lib.sh"
cd "$T" || exit 1
V=$(sed -n 's/^VERSION := //p' "$DP_SRC/Makefile")
PROGS="tfr-cat tfr-shard s3-pipe dp-train dp-eval dp-ckpt dp-serve metrics-grep"

for p in $PROGS; do
	run $p --version
	is "$rc:$out" "0:$p (dptools) $V" "$p --version"
	if [ -w /dev/full ]; then
		run sh -c "$p --help >/dev/full"
		is "$rc" 1 "$p --help to a full disk: exit 1"
		like "$err" "^$p: stdout: " "$p --help to a full disk: says so"
	else
		skip "no /dev/full"
		skip "no /dev/full"
	fi
	run $p --no-such-option
	is "$rc" 2 "$p: an unknown option is a usage error"
	like "$err" "^$p: unknown option '--no-such-option'" "$p: ... in the one wording"
	like "$err" "usage: " "$p: ... then the usage line"
done

# ---- a reader that goes away ------------------------------------------------
$PY - <<'PY' >rows.json
import json, base64
for i in range(20000):
    print(json.dumps({"image": {"bytes": [base64.b64encode(bytes([i % 256] * 16)).decode()]},
                      "label": {"int64": [i % 4]}}))
PY
tfr-cat --encode json rows.json -o big.tfr || exit 1
for i in $(seq 200000); do echo "step=$i loss=0.$i"; done >big.log
dp-train --train big.tfr --decode-raw uint8 --input-shape 16 --model dense:4 --epochs 1 \
	--batch-size 100 -q -o m.st >/dev/null || exit 1
$PY -c '
import json, struct
h = json.dumps({"w": {"dtype": "F32", "shape": [100000], "data_offsets": [0, 400000]}}).encode()
open("w.st", "wb").write(struct.pack("<Q", len(h)) + h + bytes(400000))' || exit 1
AB=$(pwd -P)
# each writes far more than a pipe holds to stdout
cmd() {
	case $1 in
	tfr-cat) tfr-cat -j big.tfr ;;
	tfr-shard) tfr-shard big.tfr ;;
	s3-pipe) s3-pipe get "file://$AB/big.tfr" ;;
	dp-train) dp-train --train big.tfr --decode-raw uint8 --input-shape 16 --model dense:4 \
		--epochs 3 --batch-size 2 --log-every 1 -q ;;
	dp-eval) dp-eval --model m.st --data big.tfr --predictions - -q ;;
	dp-ckpt) dp-ckpt export w.st -o - --format safetensors ;;
	dp-serve) dp-serve --model m.st --max-queue 20000 big.tfr ;;
	metrics-grep) metrics-grep big.log ;;
	esac
}
for p in $PROGS; do
	(cmd $p 2>err; echo $? >st) | head -c 10 >/dev/null
	is "$(cat st)/$(cat err)" "141/" "$p: a reader that goes away ends it quietly, 141"
	( trap '' PIPE; (cmd $p 2>err; echo $? >st) | head -c 10 >/dev/null )
	is "$(cat st)/$(cat err)" "141/" "$p: ... the same when the caller ignores SIGPIPE"
done
done_testing
