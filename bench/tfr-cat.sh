#!/bin/sh
# bench/tfr-cat.sh - tfr-cat against cat and zcat, on 1 GiB of ~1 KiB
# tf.train.Example records (MNIST-like: 840 image bytes, a label, 32 floats,
# an id) in the page cache.  Each pair is run alternately REPEAT times
# (default 5); the medians and their ratio are printed, with the issue's
# target.  Peak RSS (/usr/bin/time -f %M) at 1 GiB and 4 GiB of input (the
# 4 GiB streamed through a pipe, so no disk is needed).
#
#   sh bench/tfr-cat.sh            (make bench runs it with the build on PATH)
#   SIZE_MB=256 REPEAT=3 sh bench/tfr-cat.sh   a quicker look
set -eu
REPEAT=${REPEAT:-5}
SIZE_MB=${SIZE_MB:-1024}
PY=${PY:-/usr/bin/python3}
TFR=$(command -v tfr-cat) || { echo "bench: tfr-cat not on PATH (make bench)" >&2; exit 1; }
W=$(mktemp -d "${TMPDIR:-/tmp}/tfrbench.XXXXXX")
trap 'rm -rf "$W"' EXIT INT TERM

# ---- data -------------------------------------------------------------------
$PY - "$W/base.jsonl" <<'EOF'
import base64, json, random, sys
r = random.Random(1)
with open(sys.argv[1], "w") as f:
    for i in range(1024):
        img = bytes(0 if r.random() < 0.6 else r.getrandbits(8) for _ in range(840))
        f.write(json.dumps({
            "image": {"bytes": [base64.b64encode(img).decode()]},
            "label": {"int64": [r.randint(0, 9)]},
            "x": {"float": [round(r.uniform(-1, 1), 6) for _ in range(32)]},
            "id": {"bytes": [base64.b64encode(b"%012d" % i).decode()]},
        }, separators=(",", ":")) + "\n")
EOF
"$TFR" --encode json "$W/base.jsonl" >"$W/base.tfr"
base=$(stat -c %s "$W/base.tfr")
n=$((SIZE_MB * 1048576 / base))
i=0
while [ $i -lt "$n" ]; do cat "$W/base.tfr"; i=$((i + 1)); done >"$W/data.tfr"
"$TFR" -z gzip "$W/data.tfr" >"$W/data.tfr.gz"
size=$(stat -c %s "$W/data.tfr")
records=$("$TFR" -c "$W/data.tfr")
echo "data: $records records of $((base / 1024)) bytes, $((size / 1048576)) MiB" \
	"($(($(stat -c %s "$W/data.tfr.gz") / 1048576)) MiB gzipped); cores: $(nproc)"
cat "$W/data.tfr" "$W/data.tfr.gz" >/dev/null # into the page cache

# ---- timing -------------------------------------------------------------------
now() { date +%s%N; }
# run CMD in sh; prints the wall time in ms
wall() {
	s=$(now)
	sh -c "$1" >/dev/null
	e=$(now)
	echo $(((e - s) / 1000000))
}
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
# pair NAME OURS PEER TARGET KIND: KIND time (ratio ours/peer <= target) or
# thru (throughput ratio peer/ours >= target)
pair() {
	: >"$W/a"
	: >"$W/b"
	k=0
	while [ $k -lt "$REPEAT" ]; do
		wall "$2" >>"$W/a"
		wall "$3" >>"$W/b"
		k=$((k + 1))
	done
	a=$(median <"$W/a")
	b=$(median <"$W/b")
	if [ "$5" = info ]; then
		printf "%-44s %7d ms  peer %7d ms  (no target)\n" "$1" "$a" "$b"
	elif [ "$5" = time ]; then
		awk -v n="$1" -v a="$a" -v b="$b" -v t="$4" 'BEGIN {
			r = a / (b ? b : 1)
			printf "%-44s %7d ms  peer %7d ms  ratio %5.2fx  target <= %.1fx  %s\n",
				n, a, b, r, t, (r <= t ? "ok" : "MISSED") }'
	else
		awk -v n="$1" -v a="$a" -v b="$b" -v t="$4" -v s="$size" 'BEGIN {
			r = b / (a ? a : 1)
			printf "%-44s %7.0f MB/s  peer %7.0f MB/s  ratio %5.2fx  target >= %.1fx  %s\n",
				n, s / a / 1000, s / b / 1000, r, t, (r >= t ? "ok" : "MISSED") }'
	fi
}
D=$W/data.tfr
pair "tfr-cat --verify -c  vs  cat >/dev/null" "'$TFR' --verify -c '$D'" "cat '$D'" 2.5 time
pair "tfr-cat -c  vs  cat >/dev/null" "'$TFR' -c '$D'" "cat '$D'" 2.5 time
pair "tfr-cat FILE | cat  vs  cat FILE | cat" "'$TFR' '$D' | cat" "cat '$D' | cat" 0.8 thru
pair "tfr-cat FILE.gz >/dev/null  vs  zcat" "'$TFR' '$D.gz'" "zcat '$D.gz'" 1.2 time
pair "tfr-cat -j FILE  vs  cat (for scale)" "'$TFR' -j '$D'" "cat '$D'" - info

# ---- memory ---------------------------------------------------------------------
rss() { # CMD ARGS...: peak RSS in KiB
	/usr/bin/time -f %M -o "$W/rss" "$@" >/dev/null
	cat "$W/rss"
}
r1=$(rss "$TFR" --verify -c "$D")
r4=$(cat "$D" "$D" "$D" "$D" | rss "$TFR" --verify -c -)
g1=$(rss "$TFR" "$D.gz")
p4=$(cat "$D" "$D" "$D" "$D" | rss "$TFR" -)
echo "peak RSS: tfr-cat --verify -c on ${SIZE_MB} MiB: ${r1} KiB, on $((4 * SIZE_MB)) MiB (a pipe):" \
	"${r4} KiB; tfr-cat on $((4 * SIZE_MB)) MiB (a pipe): ${p4} KiB; on the gzip file: ${g1} KiB"
