#!/bin/sh
# bench/s3-sync.sh - the per-epoch sync of a job's directory: s3-pipe sync
# against aws s3 sync on the same local S3 server, in the same run.
#
# Starts radosgw (tests/rgw, memstore) on 127.0.0.1; a directory of N files
# of 4 KiB (default 1,000) is synced once by each tool to a prefix of its
# own (not timed); then, REPEAT rounds (default 5), CHANGED files (default
# 10) are rewritten and each tool syncs the directory to its prefix,
# alternating which goes first; medians and the ratio aws/s3-pipe.  Each
# round checks that both prefixes hold the directory's bytes (the changed
# files' ETags).  Both tools list the two sides and send only the changed
# files: what is timed is the listing, the comparison and 10 uploads,
# plus each tool's start (aws: Python's).  s3-pipe sends --concurrency
# files at a time (default 8), aws 10.
#
# Needs radosgw & co. and awscli (scripts/deps --test).  Run by `make bench`.
set -u
cd "$(dirname "$0")/.."
REPEAT=${REPEAT:-5}
N=${N:-1000}
CHANGED=${CHANGED:-10}
NAME=bench/s3-sync.sh TAG=s3sync PEERS=""
. bench/rgw.sh.inc
"$S3PIPE" mb s3://sync || exit 1

echo "making $N files of 4 KiB, synced once by each tool..."
mkdir "$W/d" && (cd "$W/d" && head -c $((N * 4096)) /dev/urandom | split -b 4096 -a 5 -d - f) || exit 1
find "$W/d" -type f -exec touch -d '2020-01-01' {} +
"$S3PIPE" sync "$W/d" s3://sync/sp || exit 1
"$AWS" --endpoint-url "$RGW_URL" s3 sync --quiet "$W/d" s3://sync/aw || exit 1

etags() { "$S3PIPE" ls --json "s3://sync/$1/" | grep -o '"etag":"[^,]*' | sort | md5sum; }

echo "timing, $REPEAT rounds of $CHANGED changed files (alternating tools; medians)..."
i=0
while [ $i -lt "$REPEAT" ]; do
	for f in $(ls "$W/d" | shuf -n "$CHANGED" --random-source=/dev/zero); do
		head -c 4096 /dev/urandom >"$W/d/$f"
		touch -d "@$(($(date +%s) + 60 + i))" "$W/d/$f"
	done
	sp="run sync.s3-pipe $S3PIPE sync $W/d s3://sync/sp"
	aw="run sync.aws $AWS --endpoint-url $RGW_URL s3 sync --quiet $W/d s3://sync/aw"
	if [ $((i % 2)) = 0 ]; then $sp; $aw; else $aw; $sp; fi
	[ "$(etags sp)" = "$(etags aw)" ] || { echo "round $i: the prefixes differ" >&2; exit 1; }
	i=$((i + 1))
done

ratio=$(echo "$(median "$W/sync.aws") / $(median "$W/sync.s3-pipe")" | bc -l)
echo
echo "s3-pipe $("$S3PIPE" --version | awk '{print $NF}'), $(nproc) CPUs, radosgw on 127.0.0.1, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf 'sync %d files, %d changed   s3-pipe %6.2f s   aws s3 sync %6.2f s   s3-pipe %.1fx faster (target 3x)\n' \
	"$N" "$CHANGED" "$(median "$W/sync.s3-pipe")" "$(median "$W/sync.aws")" "$ratio"
