#!/bin/sh
# bench/tfr-shard.sh - tfr-shard against cat, and its memory.
#
#  1. `tfr-shard -n 8` on 1 GiB of ~1 KiB records in the page cache, writing
#     8 shard files, against `cat FILE > file` writing the same bytes to the
#     same file system (target: within 2x of cat's wall time).  Runs
#     alternate, REPS each; medians and their ratio are printed.
#  2. Peak RSS of `tfr-shard -n 8` at 1 GiB and 4 GiB (it should be flat).
#  3. `tfr-shard --shuffle --memory 256M -n 8` at 1 GiB and 4 GiB: wall
#     time and peak RSS (target: under 400 MB), with cat of 4 GiB as a yard
#     stick.
#
# Data are generated under a temporary directory ($BENCH_TMPDIR, else
# $TMPDIR, else /tmp; about 14 GiB at the peak) and removed at the end.
# Outputs (of cat and tfr-shard alike) go there too, or to $BENCH_OUTDIR
# (e.g. /dev/shm, to take the disk's write-back out of the comparison).
# Needs /usr/bin/time and Debian's python3 with python3-protobuf.
set -eu
REPS=${REPS:-3}
PY=/usr/bin/python3
SRC=$(cd "$(dirname "$0")/.." && pwd)
TIME=/usr/bin/time
[ -x "$TIME" ] || { echo "bench/tfr-shard.sh: needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
command -v tfr-shard >/dev/null || PATH="$SRC/build/bin:$PATH"

W=$(mktemp -d "${BENCH_TMPDIR:-${TMPDIR:-/tmp}}/tfr-shard-bench.XXXXXX")
trap 'rm -rf "$W"' EXIT INT TERM

# 1 MiB of 1024 Examples with ~1 KiB of payload each, repeated: 1 GiB, 4 GiB.
DP_SRC=$SRC $PY "$SRC/tests/tfrshard.py" gen "$W/seed.tfr" 1024 --size 1000
i=0
while [ $i -lt 1024 ]; do cat "$W/seed.tfr"; i=$((i + 1)); done >"$W/1g.tfr"
cat "$W/1g.tfr" "$W/1g.tfr" "$W/1g.tfr" "$W/1g.tfr" >"$W/4g.tfr"
rm "$W/seed.tfr"
if [ -n "${BENCH_OUTDIR:-}" ]; then
	O=$(mktemp -d "$BENCH_OUTDIR/tfr-shard-bench.XXXXXX")
	trap 'rm -rf "$W" "$O"' EXIT INT TERM
	ln -s "$O" "$W/out"
else
	mkdir "$W/out"
fi
echo "data: $(du -h "$W/1g.tfr" | cut -f1) and $(du -h "$W/4g.tfr" | cut -f1) of ~1 KiB records"

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# measure NAME CMD...: run once, append "seconds rss_kb" to $W/NAME
measure() {
	name=$1
	shift
	rm -f "$W"/out/*
	sync
	$TIME -f '%e %M' -o "$W/.t" "$@" >/dev/null
	cat "$W/.t" >>"$W/$name"
}

cat "$W/1g.tfr" >/dev/null # into the page cache
r=0
while [ $r -lt "$REPS" ]; do
	measure cat sh -c "cat '$W/1g.tfr' >'$W/out/cat.tfr'"
	measure shard tfr-shard -q -n 8 -o "$W/out/s-{shard}-of-{nshards}" "$W/1g.tfr"
	r=$((r + 1))
done
cat_s=$(cut -d' ' -f1 "$W/cat" | median)
shard_s=$(cut -d' ' -f1 "$W/shard" | median)
shard_rss=$(cut -d' ' -f2 "$W/shard" | median)
echo "1 GiB, page cache, $REPS runs each, medians:"
echo "  cat FILE > file                      ${cat_s} s"
echo "  tfr-shard -n 8 -o 'out/s-{shard}...' ${shard_s} s   peak RSS ${shard_rss} KB"
awk -v a="$shard_s" -v b="$cat_s" 'BEGIN { printf "  ratio tfr-shard / cat: %.2fx (target <= 2x)\n", a / b }'

measure cat4 sh -c "cat '$W/4g.tfr' >'$W/out/cat.tfr'"
measure shard4 tfr-shard -q -n 8 -o "$W/out/s-{shard}-of-{nshards}" "$W/4g.tfr"
echo "4 GiB: tfr-shard -n 8 $(cut -d' ' -f1 "$W/shard4") s (cat: $(cut -d' ' -f1 "$W/cat4") s)," \
	"peak RSS $(cut -d' ' -f2 "$W/shard4") KB (1 GiB: ${shard_rss} KB)"
for g in 1 4; do
	measure shuf$g tfr-shard -q --shuffle --seed 1 --memory 256M --tmpdir "$W" -n 8 \
		-o "$W/out/s-{shard}-of-{nshards}" "$W/${g}g.tfr"
	echo "$g GiB: tfr-shard --shuffle --memory 256M -n 8: $(cut -d' ' -f1 "$W/shuf$g") s," \
		"peak RSS $(cut -d' ' -f2 "$W/shuf$g") KB (target < 400000 KB)"
done
