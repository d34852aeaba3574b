#!/bin/sh
# bench/s3-pipe-many.sh - many small objects: s3-pipe against the aws CLI on
# the same local S3 server, in the same run.
#
# Starts radosgw (tests/rgw, memstore) on 127.0.0.1 and times, alternating
# the tools, REPEAT times each (default 3), medians and the ratio aws/s3-pipe:
#   put 1,000 files of 4 KiB:  s3-pipe put s3://.../ DIR   vs  aws s3 cp --recursive DIR s3://.../
#   rm -r 1,000 objects:       s3-pipe rm -r s3://.../      vs  aws s3 rm --recursive s3://.../
# Each rm round removes a prefix the round before filled (with s3-pipe put,
# not timed).  s3-pipe puts --concurrency files at a time (default 8),
# aws 10 (its max_concurrent_requests); s3-pipe deletes 1,000 keys per
# DeleteObjects request, aws one DeleteObject per key, 10 at a time.
#
# Needs radosgw & co. and awscli (scripts/deps --test).  Run by `make bench`.
set -u
cd "$(dirname "$0")/.."
REPEAT=${REPEAT:-3}
N=${N:-1000}
NAME=bench/s3-pipe-many.sh TAG=s3many PEERS=""
. bench/rgw.sh.inc
"$AWS" --endpoint-url "$RGW_URL" s3 mb s3://many >/dev/null || exit 1

echo "making $N files of 4 KiB..."
mkdir "$W/files" && (cd "$W/files" && head -c $((N * 4096)) /dev/urandom | split -b 4096 -a 5 -d - f) || exit 1

count() { "$S3PIPE" ls -r "s3://many/$1/" 2>/dev/null | wc -l; }

echo "timing, $REPEAT rounds (alternating tools; medians)..."
i=0
while [ $i -lt "$REPEAT" ]; do
	run put.s3-pipe "$S3PIPE put s3://many/s$i/ $W/files"
	run put.aws "$AWS --endpoint-url $RGW_URL s3 cp --quiet --recursive $W/files s3://many/a$i/"
	[ "$(count s$i)" = "$N" ] && [ "$(count a$i)" = "$N" ] || { echo "put: not $N objects" >&2; exit 1; }
	run rm.s3-pipe "$S3PIPE rm -r s3://many/a$i/"
	run rm.aws "$AWS --endpoint-url $RGW_URL s3 rm --quiet --recursive s3://many/s$i/"
	[ "$(count s$i)" = 0 ] && [ "$(count a$i)" = 0 ] || { echo "rm -r: objects left" >&2; exit 1; }
	i=$((i + 1))
done

ratio() { echo "$(median "$W/$1.aws") / $(median "$W/$1.s3-pipe")" | bc -l; }
echo
echo "s3-pipe $("$S3PIPE" --version | awk '{print $NF}'), $(nproc) CPUs, radosgw on 127.0.0.1, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf 'put %d files of 4 KiB   s3-pipe %6.2f s   aws s3 cp --recursive %6.2f s   s3-pipe %.1fx faster (target 3x)\n' \
	"$N" "$(median "$W/put.s3-pipe")" "$(median "$W/put.aws")" "$(ratio put)"
printf 'rm -r %d objects        s3-pipe %6.2f s   aws s3 rm --recursive %6.2f s   s3-pipe %.1fx faster (target 3x)\n' \
	"$N" "$(median "$W/rm.s3-pipe")" "$(median "$W/rm.aws")" "$(ratio rm)"
