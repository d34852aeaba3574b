#!/bin/sh
# bench/metrics-grep.sh - metrics-grep against `grep -oP REGEX | awk` on a
# generated 1 GiB dp-train log (METRICS_GREP_BENCH_MB to change the size).
#
# Both run in the same session, alternated, BENCH_REPS times (default 3);
# the medians and the ratio (peer time / ours, above 1 means we are faster)
# are printed, with peak RSS (/usr/bin/time -f %M).  Two jobs:
#   extract: every value of one metric as "name<TAB>value" lines
#   mean:    the mean of that metric
# The regex is the same for both programs; awk splits the match grep prints.
# Timed runs write to /dev/null: both sides still format every row, but
# the disk's writeback (ours writes twice the bytes: step and epoch
# columns) is not what is measured.  One more run of each writes files,
# untimed, to check that they agree.
set -eu
MB=${METRICS_GREP_BENCH_MB:-1024}
REPS=${BENCH_REPS:-3}
command -v metrics-grep >/dev/null || { echo "metrics-grep not on PATH (make bench)" >&2; exit 1; }
AWK=awk
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mgbench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

# A 64 MiB chunk of dp-train training lines, one checkpoint notice every 50
# lines, repeated up to the size wanted.
$AWK 'BEGIN { srand(1); s = 0
	for (i = 0; i < 800000; i++) { s++
		if (i % 50 == 49)
			printf "ts=2024-01-01T00:00:00Z level=info msg=\"checkpoint saved\" path=ckpt-%d.safetensors\n", s
		else
			printf "epoch=%d step=%d loss=%.4f accuracy=%.4f lr=0.001 samples_per_sec=%d\n", int(s / 469) + 1, s, 2.3 * exp(-s / 50000) + 0.2 + rand() * 0.05, 0.9 - 0.8 * exp(-s / 40000) + rand() * 0.01, 120000 + int(rand() * 5000)
	} }' > "$tmp/chunk.log"
chunk=$(wc -c < "$tmp/chunk.log")
n=$(( (MB * 1048576 + chunk - 1) / chunk ))
i=0
while [ $i -lt $n ]; do cat "$tmp/chunk.log"; i=$((i + 1)); done > "$tmp/train.log"
rm "$tmp/chunk.log"
size=$(wc -c < "$tmp/train.log")
lines=$(wc -l < "$tmp/train.log")
RE='\bloss=([0-9.]+)'
cat "$tmp/train.log" > /dev/null # warm the page cache for both

# run NAME CMD: time CMD (sh -c), append "secs rss_kb" to $tmp/NAME
run() {
	/usr/bin/time -f '%e %M' -o "$tmp/t" sh -c "$2" > /dev/null
	cat "$tmp/t" >> "$tmp/$1"
}
median() { sort -n | $AWK '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

L="$tmp/train.log"
ours_x="metrics-grep -m 'loss=$RE' --no-header '$L'"
peer_x="grep -oP '$RE' '$L' | $AWK -F= '{ print \"loss\\t\" \$2 }'"
ours_m="metrics-grep -m 'loss=$RE' --mean --no-header '$L'"
peer_m="grep -oP '$RE' '$L' | $AWK -F= '{ s += \$2; n++ } END { printf \"loss\\t%.6f\\n\", s / n }'"
r=0
while [ $r -lt "$REPS" ]; do
	run ours_x "$ours_x"
	run peer_x "$peer_x"
	run ours_m "$ours_m"
	run peer_m "$peer_m"
	r=$((r + 1))
done

# The two agree: same values extracted, same mean to 6 decimals.
for job in ours_x peer_x ours_m peer_m; do
	eval "sh -c \"\$$job\"" > "$tmp/out.$job"
done
ok=yes
cut -f1,2 "$tmp/out.ours_x" > "$tmp/ours_x2" # ours adds step, epoch, rank
cmp -s "$tmp/ours_x2" "$tmp/out.peer_x" || ok="NO: extracted values differ"
[ -s "$tmp/ours_x2" ] || ok="NO: nothing extracted"
om=$($AWK -F'\t' '{ printf "%.6f", $2 }' "$tmp/out.ours_m")
pm=$($AWK -F'\t' '{ print $2 }' "$tmp/out.peer_m")
[ "$om" = "$pm" ] || ok="NO: means differ ($om, $pm)"

awkname=$(readlink -f "$(command -v $AWK)")
printf '%s\n' "metrics-grep: $((size / 1048576)) MiB log, $lines lines, regex '$RE', median of $REPS; peer: grep -oP | $awkname"
echo "results agree: $ok"
printf '%-8s %12s %12s %8s %12s %12s\n' job ours_s peer_s ratio ours_rss_kb peer_rss_kb
for job in x m; do
	o=$(cut -d' ' -f1 "$tmp/ours_$job" | median)
	p=$(cut -d' ' -f1 "$tmp/peer_$job" | median)
	orss=$(cut -d' ' -f2 "$tmp/ours_$job" | median)
	prss=$(cut -d' ' -f2 "$tmp/peer_$job" | median)
	name=extract; [ $job = m ] && name=mean
	printf '%-8s %12s %12s %8s %12s %12s\n' "$name" "$o" "$p" \
		"$($AWK -v o="$o" -v p="$p" 'BEGIN { printf "%.2fx", (o > 0 ? p / o : 0) }')" "$orss" "$prss"
done
