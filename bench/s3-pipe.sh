#!/bin/sh
# bench/s3-pipe.sh - s3-pipe against its peers on the same local S3 server.
#
# Starts radosgw (tests/rgw, memstore) on 127.0.0.1, stores a 1 GiB object
# (multipart, 8 MiB parts: its ETag is no MD5) and 1,000 objects of 1 MiB
# (single PUTs: ETag = MD5), then times, alternating the tools, REPEAT times
# each (default 5), reporting medians and the ratio:
#   get 1 GiB:        s3-pipe get        vs  aws s3 cp s3://... -   and  rclone cat,
#                     to /dev/null, and into a pipe (| cat >/dev/null) as a
#                     consumer reads it
#   get 1000 x 1 MiB: s3-pipe get PREFIX/ vs aws s3 cp --recursive (to tmpfs) and
#                                           rclone cat PREFIX/
#   put 1 GiB stream: ... | s3-pipe put   vs  ... | aws s3 cp - s3://...
# For each: wall time, throughput, CPU seconds per GiB of the tool (user +
# sys) and of the server (radosgw + ceph-osd, from /proc), and peak RSS
# (/usr/bin/time %M).  On a 2-core machine the server's CPU is most of the
# work, so the CPU columns say where the time goes.
#
# Like with like: neither peer checks the bytes it reads against a checksum
# (rclone cat copies the body; awscli 2.9's s3 cp sets no ChecksumMode; both
# only fail a body shorter than its Content-Length), while s3-pipe by
# default checks each single-part object's MD5 against its ETag.  The
# "--no-verify" rows are the like-for-like comparison; the default rows
# show what the check costs.  The 1 GiB object is multipart, so no tool
# can check it.  Peak RSS of s3-pipe get is also shown for a 64 MiB object:
# it does not grow with object size.
#
# Needs radosgw & co., awscli, rclone (scripts/deps --test) and about 4 GiB
# of free memory (memstore keeps objects in RAM).  Run by `make bench`.
set -u
cd "$(dirname "$0")/.."
REPEAT=${REPEAT:-5}
export RGW_MEMSTORE_BYTES=8G
NAME=bench/s3-pipe.sh TAG=s3bench PEERS=rclone
. bench/rgw.sh.inc
SHM=$(mktemp -d /dev/shm/s3bench.XXXXXX 2>/dev/null || mktemp -d "$W/shm.XXXXXX")
unset DP_S3_GET_MODE DP_MD5
export RCLONE_CONFIG_BENCH_TYPE=s3 RCLONE_CONFIG_BENCH_PROVIDER=Ceph
export RCLONE_CONFIG_BENCH_ENDPOINT=$RGW_URL RCLONE_CONFIG_BENCH_ACCESS_KEY_ID=$RGW_KEY
export RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY=$RGW_SECRET RCLONE_CONFIG=/dev/null
"$AWS" --endpoint-url "$RGW_URL" s3 mb s3://bench >/dev/null || exit 1
SERVER_PIDS="$(cat "$RGW_DIR/run/rgw.daemon") $(cat "$RGW_DIR/run/osd.daemon")"
TCK=$(getconf CLK_TCK)

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
rclone_order="in key order"
[ "$(rclone cat bench:bench/small/ 2>/dev/null | md5sum)" = "$small_md5" ] || rclone_order="NOT in key order"
mode=$("$S3PIPE" -vv get s3://bench/big 2>&1 >/dev/null | sed -n 's/.* mode=\([a-z]*\) connection_mbps=\([0-9]*\).*/\1 (one connection: \2 MB\/s)/p')

# server_cpu: CPU ticks of radosgw and ceph-osd so far
server_cpu() {
	for p in $SERVER_PIDS; do awk '{print $14 + $15}' "/proc/$p/stat"; done | awk '{s += $1} END {print s}'
}
# run NAME CMD: time CMD (sh -c); append "seconds rss_kb client_cpu server_cpu" to $W/NAME
run() {
	name=$1
	shift
	s0=$(server_cpu)
	/usr/bin/time -f "%e %M %U %S" -o "$W/t" sh -c "$*" >/dev/null 2>"$W/err" || {
		echo "$name failed:" >&2
		cat "$W/err" >&2
		exit 1
	}
	s1=$(server_cpu)
	awk -v s="$s0" -v e="$s1" -v t="$TCK" '{printf "%s %s %.3f %.3f\n", $1, $2, $3 + $4, (e - s) / t}' \
		"$W/t" >>"$W/$name"
}
median() { # file column
	sort -n -k"$2" "$1" | awk -v c="$2" '{v[NR] = $c} END {print v[int((NR + 1) / 2)]}'
}
line() { # label name [ours note]...: one row, with the ratio of each ours' throughput to this one's
	m=$(median "$W/$2" 1)
	printf '%-27s %-19s %6.2f s %5.0f MiB/s  cpu/GiB %5.2f + server %5.2f  RSS %6.1f MiB' \
		"$1" "${2#*.}" "$m" "$(echo "$SIZE / $m" | bc -l)" \
		"$(echo "$(median "$W/$2" 3) * 1024 / $SIZE" | bc -l)" \
		"$(echo "$(median "$W/$2" 4) * 1024 / $SIZE" | bc -l)" \
		"$(echo "$(median "$W/$2" 2) / 1024" | bc -l)"
	shift 2
	sep="  s3-pipe"
	while [ $# -ge 2 ]; do
		printf '%s%s: %.2fx' "$sep" "$2" "$(echo "$m / $(median "$W/$1" 1)" | bc -l)"
		sep=","
		shift 2
	done
	printf '\n'
}

echo "timing, $REPEAT rounds (alternating tools; medians)..."
i=0
while [ $i -lt "$REPEAT" ]; do
	run get-big.s3-pipe "$S3PIPE get s3://bench/big"
	run get-big.aws "$AWS --endpoint-url $RGW_URL s3 cp --quiet s3://bench/big -"
	run get-big.rclone "rclone cat bench:bench/big"
	run get-big-pipe.s3-pipe "$S3PIPE get s3://bench/big | cat >/dev/null"
	run get-big-pipe.rclone "rclone cat bench:bench/big | cat >/dev/null"
	run get-small.s3-pipe "$S3PIPE get s3://bench/small/"
	run get-small.s3-pipe--no-verify "$S3PIPE get --no-verify s3://bench/small/"
	run get-small.aws "$AWS --endpoint-url $RGW_URL s3 cp --quiet --recursive s3://bench/small/ $SHM/dl/ && rm -rf $SHM/dl"
	run get-small.rclone "rclone cat bench:bench/small/"
	run put-big.s3-pipe "cat $W/big | $S3PIPE put s3://bench/up-s3pipe"
	run put-big.aws "cat $W/big | $AWS --endpoint-url $RGW_URL s3 cp --quiet - s3://bench/up-aws"
	run get-64m.s3-pipe "$S3PIPE get s3://bench/mid64"
	i=$((i + 1))
done
[ "$("$S3PIPE" get s3://bench/up-s3pipe | md5sum)" = "$big_md5" ] || { echo "s3-pipe put: wrong bytes" >&2; exit 1; }

echo
echo "s3-pipe $("$S3PIPE" --version | awk '{print $NF}'), $(nproc) CPUs, radosgw $(radosgw --version 2>/dev/null | awk '{print $3}') on 127.0.0.1, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "s3-pipe get chose the ${mode:-?} mode for the 1 GiB object"
echo "cpu/GiB: CPU seconds (user + sys) of the tool (and cat) per GiB, + those of radosgw and ceph-osd"
echo "peers check no checksum; s3-pipe checks single-part objects' MD5 unless --no-verify"
echo
SIZE=1024
line "get 1 GiB (to /dev/null)" get-big.s3-pipe
line "" get-big.aws get-big.s3-pipe ""
line "" get-big.rclone get-big.s3-pipe ""
line "get 1 GiB | cat" get-big-pipe.s3-pipe
line "" get-big-pipe.rclone get-big-pipe.s3-pipe ""
SIZE=1000
line "get 1000 x 1 MiB" get-small.s3-pipe
line "" get-small.s3-pipe--no-verify
line "" get-small.aws get-small.s3-pipe "" get-small.s3-pipe--no-verify " --no-verify"
line "" get-small.rclone get-small.s3-pipe "" get-small.s3-pipe--no-verify " --no-verify"
echo "  (aws writes 1000 files to tmpfs; rclone cat writes one stream, $rclone_order)"
SIZE=1024
line "put 1 GiB stream (a pipe)" put-big.s3-pipe
line "" put-big.aws put-big.s3-pipe ""
SIZE=64
line "get 64 MiB (RSS check)" get-64m.s3-pipe
