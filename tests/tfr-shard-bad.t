#!/bin/bash
# tfr-shard on bad input and bad conditions: truncation, bad CRCs, garbage,
# a 2^60 length, invalid Examples, empty input, missing files, a closed or
# full stdout, a full disk, an unwritable directory, signals.  Each gives a
# message naming the place and a non-zero exit, and leaves no partial or
# temporary file, and no changed output; --skip-corrupt is the only way past.
. "${DP_SRC:-.}/tests/lib.sh"
REF="$PY $DP_SRC/tests/tfrshard.py"
cd "$T" || exit 1

$REF gen in.tfr 1000 --size 150
$REF digest in.tfr >in.digest
size=$(stat -c %s in.tfr)

# Output names used by the failing runs; the sentinels must survive.
sentinels() { echo old >x-00000; echo old >x-00001; }
untouched() { # name
	if [ "$(cat x-00000 x-00001 2>/dev/null)" = "old
old" ] && [ "$(ls -A | grep -c '\.tmp\.')" = 0 ]; then
		_tap_result 0 "$1: outputs untouched, no temporary files"
	else
		_tap_result 1 "$1: outputs untouched, no temporary files"
		ls -A | sed 's/^/#   /'
	fi
}
# at OFFSET BYTE FILE: overwrite one byte
at() { printf "$2" | dd of="$3" bs=1 seek="$1" conv=notrunc status=none; }

# ---- truncated
head -c $((size - 100)) in.tfr >trunc.tfr
sentinels
run tfr-shard -n 2 -o 'x-{shard}' trunc.tfr
is "$rc" 1 "truncated: exit 1"
like "$err" "^tfr-shard: trunc.tfr: record 999 at byte [0-9]+: truncated record" \
	"truncated: file, record, byte offset"
untouched "truncated"
head -c 5 in.tfr >hdr.tfr
run tfr-shard -o x-00000 hdr.tfr
like "$err" "hdr.tfr: record 0 at byte 0: truncated record header \(5 of 12 bytes\)" "truncated header"
untouched "truncated header"

# ---- data CRC
cp in.tfr crc.tfr
at 1000 'Z' crc.tfr
run tfr-shard -n 2 -o 'x-{shard}' crc.tfr
is "$rc" 1 "bad data CRC: exit 1"
like "$err" "crc.tfr: record [0-9]+ at byte [0-9]+: data CRC mismatch" "bad data CRC: place and reason"
untouched "bad data CRC"
run tfr-shard -n 2 --skip-corrupt -o 'skip-{shard}' crc.tfr
is "$rc" 0 "--skip-corrupt: exit 0"
like "$err" "crc.tfr: record [0-9]+ at byte [0-9]+: data CRC mismatch; skipped" "--skip-corrupt warns"
like "$err" "read=999 corrupt=1 " "--skip-corrupt counts"
is "$(cat skip-* | $REF check /dev/stdin)" "records=999" "--skip-corrupt keeps the rest"
run tfr-shard -n 2 --skip-corrupt -q -o 'skipq-{shard}' crc.tfr
is "$err" "" "--skip-corrupt -q: silent"

# ---- length CRC, garbage, 2^60
cp in.tfr len.tfr
at 3 'Z' len.tfr
run tfr-shard -o x-00000 len.tfr
like "$err" "len.tfr: record 0 at byte 0: length CRC mismatch" "bad length CRC"
untouched "bad length CRC"
head -c 3000 /dev/urandom >garbage.tfr
run tfr-shard -n 2 -o 'x-{shard}' garbage.tfr
is "$rc" 1 "garbage: exit 1"
like "$err" "garbage.tfr: record 0 at byte 0: length CRC mismatch \(is this a TFRecord stream\?\)" \
	"garbage: not a TFRecord stream"
untouched "garbage"
run tfr-shard -n 2 -o 'x-{shard}' <garbage.tfr
like "$err" "^tfr-shard: stdin: record 0 at byte 0" "garbage on stdin names stdin"
$PY -c "
import sys; sys.path.insert(0, '$DP_SRC/tests'); import tfrshard as t, struct
n = struct.pack('<Q', 1 << 60)
sys.stdout.buffer.write(t.frame(b'ok') + n + struct.pack('<I', t.mask(t.crc32c(n))) + b'x' * 100)" >huge.tfr
run tfr-shard -n 2 -o 'x-{shard}' huge.tfr
is "$rc" 1 "2^60 length: exit 1"
like "$err" "huge.tfr: record 1 at byte 18: record length 1152921504606846976 exceeds the maximum" \
	"2^60 length: refused, not allocated"
untouched "2^60 length"
cat in.tfr garbage.tfr in.tfr >mid.tfr
run tfr-shard -n 2 --skip-corrupt -o 'mid-{shard}' mid.tfr
is "$rc" 0 "garbage in the middle with --skip-corrupt: exit 0"
is "$(cat mid-* | $REF check /dev/stdin)" "records=2000" "  every good record on both sides kept"
run tfr-shard -n 2 -o 'x-{shard}' in.tfr trunc.tfr
like "$err" "^tfr-shard: trunc.tfr: " "the second input is named"
untouched "bad second input"

# ---- compressed damage
gzip -c in.tfr >in.gz
head -c 5000 in.gz >trunc.gz
run tfr-shard -n 2 -o 'x-{shard}' trunc.gz
is "$rc" 1 "truncated gzip: exit 1"
like "$err" "trunc.gz: truncated gzip stream" "truncated gzip: says so"
untouched "truncated gzip"

# ---- invalid Examples (hash rules parse them)
$PY -c "
import sys; sys.path.insert(0, '$DP_SRC/tests'); import tfrshard as t
sys.stdout.buffer.write(b''.join(t.frame(d) for d in t.records('in.tfr')[:5]) + t.frame(b'\xff\xff\xff\xff') + b''.join(t.frame(d) for d in t.records('in.tfr')[5:10]))" >badpb.tfr
run tfr-shard --by hash:user -n 2 -o 'x-{shard}' badpb.tfr
is "$rc" 1 "invalid Example with --by hash: exit 1"
like "$err" "badpb.tfr: record 5 at byte [0-9]+: not a valid tf.train.Example" "names the record"
untouched "invalid Example"
run tfr-shard --by hash:user -n 2 --skip-corrupt -o 'pb-{shard}' badpb.tfr
is "$rc" 0 "invalid Example, --skip-corrupt: exit 0"
like "$err" "corrupt=1" "  counted"
is "$(cat pb-* | $REF check /dev/stdin)" "records=10" "  the others kept"
run tfr-shard -n 2 -o 'pbrr-{shard}' badpb.tfr
is "$rc" 0 "round-robin does not parse Examples: the record passes"

# ---- empty and missing input
: >empty.tfr
sentinels
run tfr-shard -n 2 -o 'x-{shard}' empty.tfr
is "$rc" 1 "empty file: exit 1"
like "$err" "empty.tfr: no records \(empty input\)" "empty file: says so"
untouched "empty file"
run tfr-shard -n 2 -o 'x-{shard}' </dev/null
like "$err" "stdin: no records" "empty stdin"
run tfr-shard --shuffle -n 2 -o 'x-{shard}' empty.tfr empty.tfr
like "$err" "no records in the 2 inputs" "empty inputs, shuffled"
run tfr-shard --by contiguous -n 2 -o 'x-{shard}' </dev/null
like "$err" "stdin: no records" "empty stdin, contiguous"
run tfr-shard -n 2 -o 'x-{shard}' nope.tfr
is "$rc" 1 "missing input: exit 1"
like "$err" "^tfr-shard: nope.tfr: No such file or directory" "missing input named"
untouched "missing input"
run tfr-shard -n 2 -o 'x-{shard}' .
is "$rc" 1 "a directory as input: exit 1"
like "$err" "Is a directory" "  says so"

# ---- closed and full stdout
for i in 1 2 3 4 5 6 7 8; do cat in.tfr; done >big.tfr
tfr-shard big.tfr 2>pipe.err | head -c 10 >/dev/null
is "${PIPESTATUS[0]}" 141 "closed stdout: 141, as SIGPIPE ends it in a shell"
is "$(cat pipe.err)" "" "closed stdout: quietly"
(trap '' PIPE; tfr-shard big.tfr 2>pipe.err | head -c 10 >/dev/null; echo "${PIPESTATUS[0]}" >pipe.rc)
is "$(cat pipe.rc)/$(cat pipe.err)" "141/" "closed stdout, SIGPIPE ignored by the caller: the same"
tfr-shard --take 0/2 in.tfr >/dev/full 2>full.err
is "$?" 1 "/dev/full: exit 1"
like "$(cat full.err)" "stdout: write: No space left on device" "/dev/full: says so"

# ---- full disk: a file size limit (SIGXFSZ ignored, so writes fail EFBIG)
sentinels
(trap '' XFSZ; ulimit -f 64; exec tfr-shard -n 2 -o 'x-{shard}' big.tfr) >/dev/null 2>fsz.err
is "$?" 1 "file size limit on the outputs: exit 1"
like "$(cat fsz.err)" "x-0000[01]: write: File too large" "names the output"
untouched "file size limit"
mkdir -p spill
(trap '' XFSZ; ulimit -f 4; exec tfr-shard --shuffle --memory 64k --tmpdir spill -o - big.tfr) \
	>/dev/null 2>fsz2.err
is "$?" 1 "file size limit on the spill: exit 1"
like "$(cat fsz2.err)" "spill: spill file: write: File too large" "names the spill directory"
untouched "spill limit"
is "$(ls -A spill | wc -l)" 0 "no spill files left"

# a real full file system, where this user may mount one
mkdir small
if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=128k tmpfs small 2>/dev/null; then
	trap 'umount "$T/small" 2>/dev/null; _tap_cleanup' EXIT
	run tfr-shard -n 2 -o 'small/x-{shard}' big.tfr
	is "$rc" 1 "full file system: exit 1"
	like "$err" "small/x-0000[01]: write: No space left on device" "full file system: says so"
	is "$(ls -A small | wc -l)" 0 "full file system: nothing left there"
	run tfr-shard --shuffle --memory 64k --tmpdir small -o x-00000 big.tfr big.tfr big.tfr
	like "$err" "small: spill file: write: No space left on device" "full spill directory: says so"
	untouched "full spill directory"
	umount small
else
	skip "cannot mount a small tmpfs here (not root)"
	skip "cannot mount a small tmpfs here"
	skip "cannot mount a small tmpfs here"
	skip "cannot mount a small tmpfs here"
	skip "cannot mount a small tmpfs here"
fi

# ---- unwritable output directory
echo file >notadir
run tfr-shard -n 2 -o 'notadir/x-{shard}' in.tfr
is "$rc" 1 "a file in the directory part: exit 1"
like "$err" "notadir" "names it"
mkdir ro
chmod 555 ro
chmod 755 "$T"
if [ "$(id -u)" = 0 ]; then as_user="setpriv --reuid=65534 --regid=65534 --clear-groups"; else as_user=; fi
if [ "$(id -u)" != 0 ] || command -v setpriv >/dev/null; then
	run $as_user "$DP_BUILD/bin/tfr-shard" -n 2 -o 'ro/x-{shard}' in.tfr
	is "$rc" 1 "unwritable directory: exit 1"
	like "$err" "ro/x-00000: cannot create \(directory ro\): Permission denied" "unwritable directory: says so"
	is "$(ls -A ro | wc -l)" 0 "unwritable directory: nothing written"
else
	skip "no setpriv to drop root"
	skip "no setpriv to drop root"
	skip "no setpriv to drop root"
fi

# ---- signals: no partial output, no temporary files, old outputs kept
mkfifo fifo
# start_slow ARGS...: tfr-shard reading the FIFO, with the signals the test
# sends at their defaults (bash starts background jobs with SIGINT ignored,
# nohup ignores SIGHUP, and tfr-shard keeps an ignored signal ignored)
start_slow() {
	$PY -c 'import os, signal, sys
for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
    signal.signal(s, signal.SIG_DFL)
os.execvp(sys.argv[1], sys.argv[1:])' tfr-shard "$@" <fifo 2>sig.err &
	pid=$!
	exec 3>fifo
	head -c 100000 in.tfr >&3
	for i in $(seq 100); do
		open_tmp $pid "$(pwd -P)" && break
		sleep 0.05
	done
}
# reap: wait for $pid, at most 60 s, then SIGKILL: a signal that did not
# end it fails the status check instead of hanging the test.  $st: status.
reap() {
	local i=0 state
	while [ $i -lt 600 ]; do
		state=$(awk '{ print $3 }' /proc/$pid/stat 2>/dev/null)
		[ -z "$state" ] || [ "$state" = Z ] && break
		sleep 0.1
		i=$((i + 1))
	done
	[ $i -lt 600 ] || kill -KILL $pid
	{ wait $pid; } 2>/dev/null
	st=$?
}
for sig in TERM INT HUP; do
	sentinels
	start_slow -n 2 -o 'x-{shard}'
	ok open_tmp $pid "$(pwd -P)" "SIG$sig: the run has begun (temporary files open)"
	kill -$sig $pid
	reap
	exec 3>&-
	is "$st" $((128 + $(kill -l $sig))) "SIG$sig: killed by the signal"
	untouched "SIG$sig"
done
mkdir -p sigtmp
sentinels
start_slow --shuffle --memory 16k --tmpdir sigtmp -n 2 -o 'x-{shard}'
kill -TERM $pid
reap
exec 3>&-
untouched "SIGTERM while spilling"
is "$(ls -A sigtmp | wc -l)" 0 "SIGTERM while spilling: no spill files"
sentinels
start_slow --by contiguous --tmpdir sigtmp -n 2 -o 'x-{shard}'
kill -TERM $pid
reap
exec 3>&-
untouched "SIGTERM while copying stdin"
is "$(ls -A sigtmp | wc -l)" 0 "SIGTERM while copying stdin: no temporary copy"
start_slow --shuffle --memory 16k --tmpdir sigtmp -n 2 -o 'k-{shard}'
kill -KILL $pid
{ wait $pid; } 2>/dev/null
exec 3>&-
is "$(ls -A sigtmp | wc -l)" 0 "even SIGKILL leaves no spill files"
rm -f .k-*

done_testing
