#!/bin/sh
# bench/s3-pipe.sh - s3-pipe against its peers on the same local S3 server.
#
# Starts radosgw (tests/rgw, memstore) on 127.0.0.1, stores a 1 GiB object
# and 1,000 objects of 1 MiB, then times, alternating the tools, REPEAT
# times each (default 3), reporting the median and the ratio:
#   get 1 GiB:      s3-pipe get          vs  aws s3 cp s3://... -   and  rclone cat
#   get 1000 x 1 MiB: s3-pipe get PREFIX/ vs  aws s3 cp --recursive (to tmpfs) and
#                                            rclone cat PREFIX/ (both in key order
#                                            to one stream, like s3-pipe)
#   put 1 GiB stream: ... | s3-pipe put   vs  ... | aws s3 cp - s3://...
# with peak RSS (/usr/bin/time %M).  s3-pipe runs with its defaults (8
# parallel 8 MiB parts, MD5 of single-part objects checked) and, for the
# small objects, also with --no-verify.  Peak RSS of s3-pipe get is also
# shown for a 64 MiB object, to show it does not grow with object size.
#
# Needs radosgw & co., awscli, rclone (scripts/deps --test) and about 4 GiB
# of free memory (memstore keeps objects in RAM).  Run by `make bench`.
set -u
cd "$(dirname "$0")/.."
BIN=${DP_BUILD:-$PWD/build}/bin
S3PIPE=$BIN/s3-pipe
AWS=/usr/bin/aws
REPEAT=${REPEAT:-3}
[ -x "$S3PIPE" ] || { echo "bench/s3-pipe.sh: $S3PIPE missing: run make" >&2; exit 1; }
for p in radosgw "$AWS" rclone /usr/bin/time; do
	command -v "$p" >/dev/null || { echo "bench/s3-pipe.sh: $p missing (scripts/deps --test)" >&2; exit 1; }
done

W=$(mktemp -d "${TMPDIR:-/tmp}/s3bench.XXXXXX") || exit 1
SHM=$(mktemp -d /dev/shm/s3bench.XXXXXX 2>/dev/null || mktemp -d "$W/shm.XXXXXX")
cleanup() {
	tests/rgw stop "$W/rgw" 2>/dev/null
	rm -rf "$W" "$SHM"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

echo "starting radosgw..."
env=$(RGW_MEMSTORE_BYTES=8G tests/rgw start "$W/rgw" $$) || exit 1
eval "$env"
export AWS_ACCESS_KEY_ID=$RGW_KEY AWS_SECRET_ACCESS_KEY=$RGW_SECRET AWS_REGION=us-east-1
export AWS_ENDPOINT_URL=$RGW_URL AWS_EC2_METADATA_DISABLED=true HOME=$W
unset AWS_PROFILE AWS_CONFIG_FILE AWS_SHARED_CREDENTIALS_FILE AWS_CA_BUNDLE AWS_SESSION_TOKEN
export RCLONE_CONFIG_BENCH_TYPE=s3 RCLONE_CONFIG_BENCH_PROVIDER=Ceph
export RCLONE_CONFIG_BENCH_ENDPOINT=$RGW_URL RCLONE_CONFIG_BENCH_ACCESS_KEY_ID=$RGW_KEY
export RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY=$RGW_SECRET RCLONE_CONFIG=/dev/null
"$AWS" --endpoint-url "$RGW_URL" s3 mb s3://bench >/dev/null || exit 1

echo "making the data..."
head -c 1073741824 /dev/urandom >"$W/big" || exit 1
"$S3PIPE" put s3://bench/big <"$W/big" || exit 1
head -c 67108864 "$W/big" | "$S3PIPE" put s3://bench/mid64 || exit 1
mkdir "$SHM/small" && (cd "$SHM/small" && head -c 1048576000 "$W/big" | split -b 1048576 -a 4 -d - k) || exit 1
"$S3PIPE" put s3://bench/small/ "$SHM"/small/k* || exit 1
rm -rf "$SHM/small"
big_md5=$(md5sum <"$W/big")
small_md5=$(head -c 1048576000 "$W/big" | md5sum)
[ "$("$S3PIPE" get s3://bench/big | md5sum)" = "$big_md5" ] || { echo "s3-pipe get: wrong bytes" >&2; exit 1; }
[ "$("$S3PIPE" get s3://bench/small/ | md5sum)" = "$small_md5" ] || { echo "s3-pipe get PREFIX/: wrong bytes" >&2; exit 1; }
[ "$(rclone cat bench:bench/small/ 2>/dev/null | md5sum)" = "$small_md5" ] || echo "note: rclone cat PREFIX/ is not in key order" >&2

# run NAME CMD: time CMD (sh -c), append "seconds rss_kb" to $W/NAME
run() {
	name=$1
	shift
	/usr/bin/time -f "%e %M" -o "$W/t" sh -c "$*" >/dev/null 2>"$W/err" || {
		echo "$name failed:" >&2
		cat "$W/err" >&2
		exit 1
	}
	cat "$W/t" >>"$W/$name"
}
median() { # file column
	sort -n -k"$2" "$1" | awk -v c="$2" '{v[NR] = $c} END {print v[int((NR + 1) / 2)]}'
}
report() { # label ours peer...
	label=$1 ours=$2
	shift 2
	mo=$(median "$W/$ours" 1)
	printf '%-33s %-28s %6.2f s %5.0f MiB/s  peak RSS %5.1f MiB\n' "$label" "$ours" "$mo" \
		"$(echo "$SIZE / $mo" | bc -l)" "$(echo "$(median "$W/$ours" 2) / 1024" | bc -l)"
	for p in "$@"; do
		mp=$(median "$W/$p" 1)
		printf '%-33s %-28s %6.2f s %5.0f MiB/s  peak RSS %5.1f MiB  s3-pipe: %.2fx\n' "" "$p" \
			"$mp" "$(echo "$SIZE / $mp" | bc -l)" "$(echo "$(median "$W/$p" 2) / 1024" | bc -l)" \
			"$(echo "$mp / $mo" | bc -l)"
	done
}

echo "timing, $REPEAT rounds (alternating tools; medians)..."
i=0
while [ $i -lt "$REPEAT" ]; do
	run get-big.s3-pipe "$S3PIPE get s3://bench/big"
	run get-big.aws "$AWS --endpoint-url $RGW_URL s3 cp --quiet s3://bench/big -"
	run get-big.rclone "rclone cat bench:bench/big"
	run get-small.s3-pipe "$S3PIPE get s3://bench/small/"
	run get-small.s3-pipe-no-verify "$S3PIPE get --no-verify s3://bench/small/"
	run get-small.aws "$AWS --endpoint-url $RGW_URL s3 cp --quiet --recursive s3://bench/small/ $SHM/dl/ && rm -rf $SHM/dl"
	run get-small.rclone "rclone cat bench:bench/small/"
	run put-big.s3-pipe "cat $W/big | $S3PIPE put s3://bench/up-s3pipe"
	run put-big.aws "cat $W/big | $AWS --endpoint-url $RGW_URL s3 cp --quiet - s3://bench/up-aws"
	run get-64m.s3-pipe "$S3PIPE get s3://bench/mid64"
	i=$((i + 1))
done
[ "$("$S3PIPE" get s3://bench/up-s3pipe | md5sum)" = "$big_md5" ] || { echo "s3-pipe put: wrong bytes" >&2; exit 1; }

echo
echo "s3-pipe $("$S3PIPE" --version | awk '{print $NF}'), $(nproc) CPUs, radosgw $(radosgw --version 2>/dev/null | awk '{print $3}') on 127.0.0.1"
SIZE=1024
report "get 1 GiB object (to /dev/null)" get-big.s3-pipe get-big.aws get-big.rclone
SIZE=1000
report "get 1000 x 1 MiB objects" get-small.s3-pipe get-small.aws get-small.rclone
report "" get-small.s3-pipe-no-verify get-small.aws get-small.rclone
SIZE=1024
report "put 1 GiB stream (from a pipe)" put-big.s3-pipe put-big.aws
SIZE=64
report "get 64 MiB object (RSS check)" get-64m.s3-pipe
