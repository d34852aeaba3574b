#!/bin/bash
# tfr-cat on bad input and bad output: truncated records, bad length and data
# CRCs, a length field of 2^60, garbage, invalid protobuf, empty input, broken
# compressed streams, a closed stdout, a full disk.  Each: the message (file,
# record, byte offset), the exit status, what reached stdout; then the same
# with --skip-corrupt, the only way past.
. "${DP_SRC:-.}/tests/lib.sh"
protoc --python_out="$T" -I"$DP_SRC/lib/records" "$DP_SRC/lib/records/example.proto" || exit 1
ref() { $PY "$DP_SRC/tests/tfr_ref.py" "$T" "$@"; }
# py CODE: Python with the framer (frame, load, crc32c, mask) in scope
py() {
	$PY -c "
import sys, struct, zlib, gzip; sys.path.insert(0, '$T'); sys.argv = ['', '$T']
exec(open('$DP_SRC/tests/tfr_ref.py').read().split('def main')[0])
T = '$T'
$1"
}
# four good records of 40 bytes each (frames of 56)
py "
recs = [example_pb2.Example() for _ in range(4)]
for i, m in enumerate(recs):
    m.features.feature['b'].bytes_list.value.append(bytes([i]) * 27)
data = [m.SerializeToString() for m in recs]
assert all(len(d) == 40 for d in data), [len(d) for d in data]
good = b''.join(frame(d) for d in data)
open(T + '/good', 'wb').write(good)
open(T + '/good1', 'wb').write(frame(data[1]))
f = bytearray(good); f[56 + 20] ^= 1                      # data byte of record 1
open(T + '/datacrc', 'wb').write(f)
f = bytearray(good); f[112 + 3] ^= 0x40                   # length field of record 2
open(T + '/lencrc', 'wb').write(f)
f = bytearray(good); f[112 + 8] ^= 1                      # length CRC of record 2
open(T + '/lencrc2', 'wb').write(f)
open(T + '/trunc-data', 'wb').write(good[:56 * 2 + 30])  # inside record 2's data
open(T + '/trunc-head', 'wb').write(good[:56 * 3 + 5])   # inside record 3's header
open(T + '/trunc-crc', 'wb').write(good[:56 * 4 - 1])    # record 3's data CRC cut
h = struct.pack('<Q', 1 << 60)
huge = h + struct.pack('<I', mask(crc32c(h))) + b'x' * 100
open(T + '/huge', 'wb').write(good[:56] + huge)
open(T + '/garbage', 'wb').write(b'This is not a TFRecord file at all.\n' * 10)
open(T + '/gap', 'wb').write(good[:112] + b'JUNKJUNKJUNK' + good[112:])
open(T + '/notpb', 'wb').write(good[:56] + frame(b'\x0a\x05\x0a\x03\x0a\x01') + good[56:])
open(T + '/badutf8', 'wb').write(frame(b'\x0a\x07\x0a\x05\x0a\x01\xff\x12\x00'))
open(T + '/empty', 'wb').write(b'')
open(T + '/empty.gz', 'wb').write(gzip.compress(b''))
z = gzip.compress(good)
open(T + '/trunc.gz', 'wb').write(z[:len(z) // 2])
zb = bytearray(z); zb[len(z) // 2] ^= 0xff
open(T + '/corrupt.gz', 'wb').write(zb)
open(T + '/trail.gz', 'wb').write(z + b'trailing junk')
n = len(z)
open(T + '/gz.len', 'w').write(str(n))
zb = bytearray(z); zb[10] |= 0x06                         # block type 3: invalid
open(T + '/badblock.gz', 'wb').write(zb)
zb = bytearray(z); zb[n - 8] ^= 1                         # the trailer's CRC-32
open(T + '/crc.gz', 'wb').write(zb)
zb = bytearray(z); zb[n - 1] ^= 1                         # the trailer's ISIZE
open(T + '/isize.gz', 'wb').write(zb)
open(T + '/cut-trailer.gz', 'wb').write(z[:n - 3])        # inside the trailer
open(T + '/no-trailer.gz', 'wb').write(z[:n - 8])         # before it
zz = zlib.compress(good)
open(T + '/trail.zz', 'wb').write(zz + b'more')
open(T + '/zz.len', 'w').write(str(len(zz)))
zb = bytearray(zz); zb[-1] ^= 1                           # the Adler-32
open(T + '/adler.zz', 'wb').write(zb)
open(T + '/cut-trailer.zz', 'wb').write(zz[:-1])
" || exit 1

# bad NAME FILE EXIT MESSAGE-REGEX GOOD-RECORDS-ON-STDOUT [OPTIONS...]
# (with -j among the options: JSON lines on stdout)
bad() {
	local name=$1 f=$2 want=$3 msg=$4 nout=$5
	shift 5
	tfr-cat "$@" "$T/$f" >"$T/out" 2>"$T/err"
	rc=$?
	is "$rc" "$want" "$name: exit $want"
	if [ "$msg" = "^$" ]; then
		is "$(cat "$T/err")" "" "$name: nothing on stderr"
	else
		like "$(cat "$T/err")" "$msg" "$name: message"
	fi
	case " $* " in
	*" -j "*) is "$(wc -l <"$T/out" | tr -d ' ')" "$nout" "$name: $nout JSON lines on stdout" ;;
	*) is "$(ref frames "$T/out" 2>&1)" "$nout" "$name: $nout whole records on stdout" ;;
	esac
}
G=$T/good
bad "data CRC" datacrc 1 "^tfr-cat: $T/datacrc: record 1 at byte 56: data CRC mismatch$" 1
bad "length CRC (length changed)" lencrc 1 "^tfr-cat: $T/lencrc: record 2 at byte 112: length CRC mismatch$" 2
bad "length CRC (CRC changed)" lencrc2 1 "record 2 at byte 112: length CRC mismatch" 2
bad "truncated data" trunc-data 1 "^tfr-cat: $T/trunc-data: record 2 at byte 112: truncated record \(18 of 40 data bytes, stream ends at byte 142\)$" 2
bad "truncated header" trunc-head 1 "record 3 at byte 168: truncated record header \(5 of 12 bytes\)" 3
bad "truncated data CRC" trunc-crc 1 "record 3 at byte 168: truncated record \(its [0-9]+ data bytes whole, [0-3] of 4 data CRC bytes, stream ends at byte [0-9]+\)$" 3
bad "length 2^60" huge 1 "^tfr-cat: $T/huge: record 1 at byte 56: record length 1152921504606846976 exceeds the maximum of 268435456 bytes$" 1
bad "garbage" garbage 1 "^tfr-cat: $T/garbage: record 0 at byte 0: length CRC mismatch \(is this a TFRecord stream\?\)$" 0
bad "junk between records" gap 1 "record 2 at byte 112: length CRC mismatch$" 2
bad "truncated gzip" trunc.gz 1 "^tfr-cat: $T/trunc.gz: truncated gzip stream" 1
# a flipped byte deflate decodes (only the trailer's CRC-32 would tell): the
# records before it come out, and the first record it damaged is named
bad "corrupt gzip" corrupt.gz 1 "^tfr-cat: $T/corrupt.gz: record 1 at byte 56: length CRC mismatch$" 1
bad "corrupt gzip block" badblock.gz 1 "^tfr-cat: $T/badblock.gz: corrupt gzip data near compressed byte 11: invalid block type$" 0
# the trailer: its place, and what in it does not match (issue 12: the data
# CRC was reported "near compressed byte 786432" for a trailer at 905k, a
# cut trailer as "ends inside compressed data")
n=$(cat "$T/gz.len")
bad "gzip trailer CRC" crc.gz 1 "^tfr-cat: $T/crc.gz: gzip trailer at compressed bytes $((n - 8))-$((n - 1)): CRC-32 of the data does not match$" 4
bad "gzip trailer ISIZE" isize.gz 1 "^tfr-cat: $T/isize.gz: gzip trailer at compressed bytes $((n - 8))-$((n - 1)): length of the data \(ISIZE\) does not match$" 4
bad "gzip cut in the trailer" cut-trailer.gz 1 "^tfr-cat: $T/cut-trailer.gz: truncated gzip stream \(its data whole, 5 of 8 trailer bytes at compressed byte $((n - 8)), stream ends at byte $((n - 3))\)$" 4
bad "gzip cut before the trailer" no-trailer.gz 1 "^tfr-cat: $T/no-trailer.gz: truncated gzip stream \(its data whole, 0 of 8 trailer bytes at compressed byte $((n - 8)), stream ends at byte $((n - 8))\)$" 4
n=$(cat "$T/zz.len")
bad "zlib trailer Adler-32" adler.zz 1 "^tfr-cat: $T/adler.zz: zlib trailer at compressed bytes $((n - 4))-$((n - 1)): Adler-32 of the data does not match$" 4
bad "zlib cut in the trailer" cut-trailer.zz 1 "^tfr-cat: $T/cut-trailer.zz: truncated zlib stream \(its data whole, 3 of 4 trailer bytes at compressed byte $((n - 4)), stream ends at byte $((n - 1))\)$" 4
bad "trailing junk after zlib" trail.zz 1 "trailing data after the zlib stream" 4
bad "empty file" empty 1 "^tfr-cat: $T/empty: empty input: no records \(--allow-empty accepts it\)$" 0
bad "empty gzip" empty.gz 1 "empty.gz: empty input" 0
bad "empty stdin" empty 1 "^tfr-cat: stdin: empty input" 0 -
tfr-cat - <"$T/empty" >"$T/out" 2>"$T/err"
is "$?/$(cat "$T/err")" "1/tfr-cat: stdin: empty input: no records (--allow-empty accepts it)" "empty stdin: message and exit"
bad "empty, allowed" empty 0 "^$" 0 --allow-empty
bad "invalid protobuf, -j" notpb 1 "^tfr-cat: $T/notpb: record 1 at byte 56: invalid Example: length runs past the end of the message$" 1 -j
bad "invalid protobuf, --verify" notpb 1 "record 1 at byte 56: invalid Example" 0 --verify
bad "invalid protobuf, plain" notpb 0 "^$" 5
bad "name not UTF-8" badutf8 1 "record 0 at byte 0: invalid Example: feature name is not valid UTF-8" 0 --schema
# the 2^60 length must not be allocated: under a 200 MB address-space limit
# (not under AddressSanitizer, which reserves terabytes of address space)
if nm -D "$(command -v tfr-cat)" 2>/dev/null | grep -q __asan_init; then
	skip "ulimit -v under AddressSanitizer"
	skip "ulimit -v under AddressSanitizer"
else
	(ulimit -v 200000; tfr-cat -c "$T/huge" >/dev/null 2>"$T/err"; echo $? >"$T/rc")
	is "$(cat "$T/rc")" 1 "length 2^60 under ulimit -v 200000: a clean failure"
	like "$(cat "$T/err")" "exceeds the maximum" "length 2^60 under ulimit: the message, no allocation failure"
fi
bad "length 2^60, raised limit" huge 1 "record 1 at byte 56: truncated record \(100 of 1152921504606846976 data bytes" 1 --max-record 1048576T
# ---- from a pipe: no hang on truncation ------------------------------------------
timeout 20 sh -c "cat '$T/trunc-data' | tfr-cat -c" >"$T/out" 2>"$T/err"
is "$?" 1 "truncated on a pipe: exit 1, no hang"
like "$(cat "$T/err")" "stdin: record 2 at byte 112: truncated record" "truncated on a pipe: message"
# ---- --skip-corrupt ------------------------------------------------------------------
bad "skip: data CRC" datacrc 0 "^tfr-cat: $T/datacrc: record 1 at byte 56: data CRC mismatch; skipped 56 bytes to the next valid header at byte 112
tfr-cat: skipped 1 damaged record$" 3 --skip-corrupt
bad "skip: length CRC" lencrc 0 "record 2 at byte 112: length CRC mismatch; skipped 56 bytes to the next valid header at byte 168" 3 --skip-corrupt
bad "skip: junk between records" gap 0 "record 2 at byte 112: length CRC mismatch; skipped 12 bytes to the next valid header at byte 124" 4 --skip-corrupt
bad "skip: truncated" trunc-data 0 "record 2 at byte 112: truncated record .*; skipped" 2 --skip-corrupt
bad "skip: length 2^60" huge 0 "record 1 at byte 56: record length 1152921504606846976 exceeds the maximum of 268435456 bytes; skipped 112 bytes to the end of the stream" 1 --skip-corrupt
# not one record in it: an error even with --skip-corrupt (as in tfr-shard)
bad "skip: garbage" garbage 1 "skipped 360 bytes to the end of the stream
tfr-cat: $T/garbage: no records found in 360 bytes \(is it a TFRecord file\?\)$" 0 --skip-corrupt
bad "skip: garbage, -c" garbage 1 "^tfr-cat: $T/garbage: no records found in 360 bytes" 0 --skip-corrupt -c
bad "skip: garbage after a good file" garbage 1 "garbage: no records found in 360 bytes" 4 --skip-corrupt "$G"
bad "skip: damaged gzip, no record before" badblock.gz 1 "^tfr-cat: $T/badblock.gz: corrupt gzip data near compressed byte 11: invalid block type$" 0 --skip-corrupt
bad "skip: truncated gzip" trunc.gz 0 "truncated gzip stream.*; skipped the rest of the stream" 1 --skip-corrupt
bad "skip: invalid protobuf" notpb 0 "record 1 at byte 56: invalid Example: .*; skipped" 4 -j --skip-corrupt
run tfr-cat --verify --skip-corrupt "$T/gap" "$T/datacrc"
is "$rc" 1 "--verify --skip-corrupt: reads on, exit 1"
is "$out" "records=7 bytes=460 files=2 corrupt=2 status=corrupt" "--verify --skip-corrupt: summary"
like "$err" "gap: record 2 at byte 112.*
.*datacrc: record 1 at byte 56.*
tfr-cat: skipped 2 damaged records" "--verify --skip-corrupt: one warning per damaged region"
run tfr-cat -c --skip-corrupt "$T/good" "$T/datacrc" "$T/good"
is "$out/$rc" "11/0" "--skip-corrupt: goes on to later files"

# ---- the output side -------------------------------------------------------------------
# a closed pipe: quietly, 141 (128 + SIGPIPE), whatever the caller did with SIGPIPE
py "
d = example_pb2.Example(); d.features.feature['x'].bytes_list.value.append(b'y' * 4000)
s = frame(d.SerializeToString())
open(T + '/big', 'wb').write(s * 2000)
"
(tfr-cat "$T/big"; echo $? >"$T/rc") 2>"$T/err" | head -c 10 >/dev/null
is "$(cat "$T/rc")/$(cat "$T/err")" "141/" "closed stdout: 141, quietly"
(tfr-cat -j "$T/big"; echo $? >"$T/rc") 2>"$T/err" | head -c 10 >/dev/null
is "$(cat "$T/rc")/$(cat "$T/err")" "141/" "closed stdout, -j: 141, quietly"
(trap '' PIPE; tfr-cat "$T/big"; echo $? >"$T/rc") 2>"$T/err" | head -c 10 >/dev/null
is "$(cat "$T/rc")/$(cat "$T/err")" "141/" "closed stdout with SIGPIPE ignored by the caller: the same"
# a full disk
if [ -w /dev/full ]; then
	tfr-cat "$T/good" >/dev/full 2>"$T/err"
	is "$?/$(cat "$T/err")" "1/tfr-cat: stdout: write: No space left on device" "full disk on stdout"
	tfr-cat -j "$T/good" >/dev/full 2>"$T/err"
	is "$?/$(cat "$T/err")" "1/tfr-cat: stdout: write: No space left on device" "full disk, -j"
	tfr-cat -c "$T/good" >/dev/full 2>"$T/err"
	is "$?/$(cat "$T/err")" "1/tfr-cat: stdout: write: No space left on device" "full disk, -c"
	tfr-cat -z gzip -o /dev/full "$T/good" 2>"$T/err"
	is "$?/$(cat "$T/err")" "1/tfr-cat: /dev/full: write: No space left on device" "full disk, -o /dev/full"
	tfr-cat --help >/dev/full 2>"$T/err"
	is "$?/$(cat "$T/err")" "1/tfr-cat: stdout: No space left on device" "full disk, --help"
else
	for i in 1 2 3 4 5; do skip "/dev/full is not writable"; done
fi
run tfr-cat -o "$T/no/such/dir/x" "$T/good"
is "$rc" 1 "-o into a missing directory: exit 1"
like "$err" "^tfr-cat: $T/no/such/dir/x: cannot create: No such file or directory$" "-o into a missing directory: message"
run tfr-cat "$T/missing"
is "$rc/$err" "1/tfr-cat: $T/missing: No such file or directory" "missing input: message"

# ---- an output that is its own input (issue 12: tfr-cat f >> f grew without
# bound): refused as cat refuses it, before anything is written
cp "$T/good" "$T/f.tfr"
size=$(stat -c %s "$T/f.tfr")
timeout 60 tfr-cat "$T/f.tfr" >>"$T/f.tfr" 2>"$T/err"
is "$?/$(cat "$T/err")" "1/tfr-cat: $T/f.tfr: input file is output file" "tfr-cat f >> f: refused"
timeout 60 tfr-cat "$T/good" "$T/f.tfr" >>"$T/f.tfr" 2>"$T/err"
is "$?/$(cat "$T/err")" "1/tfr-cat: $T/f.tfr: input file is output file" "tfr-cat g f >> f: refused"
is "$(stat -c %s "$T/f.tfr")" "$size" "  f unchanged (not even g written to it)"
timeout 60 tfr-cat - <"$T/f.tfr" >>"$T/f.tfr" 2>"$T/err"
is "$?/$(cat "$T/err")" "1/tfr-cat: stdin: input file is output file" "tfr-cat - < f >> f: refused"
timeout 60 tfr-cat -j "$T/f.tfr" >>"$T/f.tfr" 2>"$T/err"
is "$?/$(cat "$T/err")" "1/tfr-cat: $T/f.tfr: input file is output file" "  -j too"
timeout 60 tfr-cat -o /dev/stdout "$T/f.tfr" >>"$T/f.tfr" 2>"$T/err"
is "$?/$(cat "$T/err")" "1/tfr-cat: $T/f.tfr: input file is output file" "  -o /dev/stdout too"
printf '{"a":{"int64":[1]}}\n' >"$T/f.jsonl"
timeout 60 tfr-cat --encode json "$T/f.jsonl" >>"$T/f.jsonl" 2>"$T/err"
is "$?/$(cat "$T/err")" "1/tfr-cat: $T/f.jsonl: input file is output file" "  --encode too"
is "$(stat -c %s "$T/f.tfr")" "$size" "  f unchanged"
run tfr-cat -o "$T/f.tfr" "$T/f.tfr" "$T/good"
is "$rc" 0 "-o f reading f: through a temporary renamed at the end, allowed"
is "$(tfr-cat -c "$T/f.tfr")" 8 "  f holds both inputs once"

done_testing
