#!/bin/bash
# tfr-cat: the command line, concatenation, compression, selection, count,
# verify, schema, atomic -o, the terminal guard.  Records come from Google's
# protobuf serializer and a pure-Python framer (tests/tfr_ref.py), so the
# expected bytes do not depend on libdp.
. "${DP_SRC:-.}/tests/lib.sh"
D=$FIX/tfr-cat
protoc --python_out="$T" -I"$DP_SRC/lib/records" "$DP_SRC/lib/records/example.proto" || exit 1
ref() { $PY "$DP_SRC/tests/tfr_ref.py" "$T" "$@"; }
ref gen "$T/a.tfr" || exit 1
tfr-cat --encode json "$D/small.jsonl" >"$T/b.tfr" || exit 1
na=$(ref frames "$T/a.tfr")
nb=$(ref frames "$T/b.tfr")

# ---- help, version, usage --------------------------------------------------
run tfr-cat --help
is "$rc" 0 "--help exits 0"
like "$out" "^usage: tfr-cat" "--help starts with the usage"
man=$(sed 's/\\-/-/g' "$DP_SRC/man/man1/tfr-cat.1")
# every long option of the program (from its getopt table) in --help and the man page
opts=$(sed -n 's/^\t\t{"\([a-z-]*\)", .*_argument.*/\1/p' "$DP_SRC/tools/tfr-cat.c")
opts="$opts help version" # CLI_OPTIONS_END's rows (tools/cli.h)
is "$(echo $opts | wc -w)" 22 "the option table has 22 long options"
for o in $opts; do
	like "$out" "--$o([^a-z-]|$)" "--help lists --$o"
	like "$man" "^\.(B|BI|BR) .*--$o([^a-z-]|$)" "the man page documents --$o"
done
run tfr-cat --version
is "$rc" 0 "--version exits 0"
like "$out" "^tfr-cat \(dptools\) [0-9]" "--version names the program"
is "$(tfr-cat -V)" "$out" "-V is --version"
is "$(tfr-cat -h | head -1)" "usage: tfr-cat [OPTION]... [FILE]..." "-h is --help"
run tfr-cat --bogus
is "$rc" 2 "unknown option: exit 2"
is "$(echo "$err" | head -1)" "tfr-cat: unknown option '--bogus'" "unknown option: named, in the one wording"
like "$err" "usage: tfr-cat" "unknown option: usage on stderr"
is "$out" "" "unknown option: nothing on stdout"
run tfr-cat -n
is "$rc" 2 "missing value: exit 2"
is "$(echo "$err" | head -1)" "tfr-cat: option '-n' needs a value" "missing value: said"
run tfr-cat -n -3 "$T/a.tfr"
is "$rc" 2 "negative count: exit 2"
run tfr-cat -j -c "$T/a.tfr"
is "$rc" 2 "-j with -c: exit 2"
run tfr-cat -j -z gzip "$T/a.tfr"
is "$rc" 2 "-z with -j: exit 2"
like "$err" "record output only" "-z with -j: said"
run tfr-cat -z lz4 "$T/a.tfr"
is "$rc" 2 "unknown compression: exit 2"
run tfr-cat --encode yaml
is "$rc" 2 "unknown encoding: exit 2"
run tfr-cat --encode idx one
is "$rc" 2 "--encode idx wants two files"
run tfr-cat --types a=int64 "$T/a.tfr"
is "$rc" 2 "--types without --encode csv: exit 2"
run tfr-cat --max-record 12Q "$T/a.tfr"
is "$rc" 2 "bad size: exit 2"

# ---- concatenation ----------------------------------------------------------
tfr-cat "$T/a.tfr" >"$T/o1" 2>"$T/e1"
same_file "$T/o1" "$T/a.tfr" "one file: the same bytes"
is "$(cat "$T/e1")" "" "one file: nothing on stderr"
cat "$T/a.tfr" "$T/b.tfr" >"$T/ab"
tfr-cat "$T/a.tfr" "$T/b.tfr" >"$T/o2"
same_file "$T/o2" "$T/ab" "two files: concatenated"
tfr-cat <"$T/b.tfr" >"$T/o3"
same_file "$T/o3" "$T/b.tfr" "stdin by default"
tfr-cat "$T/a.tfr" - <"$T/b.tfr" >"$T/o4"
same_file "$T/o4" "$T/ab" "- is stdin among files"
cat "$T/a.tfr" | tfr-cat >"$T/o5"
same_file "$T/o5" "$T/a.tfr" "from a pipe"
is "$(ref frames "$T/o2")" "$((na + nb))" "output frames check in Python"

# ---- compression in ----------------------------------------------------------
gzip -c "$T/a.tfr" >"$T/a.gz"
tfr-cat "$T/a.gz" >"$T/o6"
same_file "$T/o6" "$T/a.tfr" "gzip input detected"
cat "$T/a.gz" | tfr-cat >"$T/o6p"
same_file "$T/o6p" "$T/a.tfr" "gzip input on a pipe"
{ gzip -c "$T/a.tfr"; gzip -c "$T/b.tfr"; } >"$T/ab.gz"
tfr-cat "$T/ab.gz" >"$T/o7"
same_file "$T/o7" "$T/ab" "concatenated gzip members"
$PY -c "import sys,zlib; sys.stdout.buffer.write(zlib.compress(open(sys.argv[1],'rb').read()))" \
	"$T/a.tfr" >"$T/a.zz"
tfr-cat "$T/a.zz" >"$T/o8"
same_file "$T/o8" "$T/a.tfr" "zlib input detected"
tfr-cat "$T/a.gz" "$T/b.tfr" "$T/a.zz" >"$T/o9"
cat "$T/a.tfr" "$T/b.tfr" "$T/a.tfr" >"$T/aba"
same_file "$T/o9" "$T/aba" "mixed compression across files"

# ---- compression out -----------------------------------------------------------
tfr-cat -z gzip "$T/a.tfr" >"$T/z1"
is "$(head -c 2 "$T/z1" | od -An -tx1 | tr -d ' ')" "1f8b" "-z gzip writes gzip"
gzip -dc "$T/z1" >"$T/z1d"
same_file "$T/z1d" "$T/a.tfr" "-z gzip: gzip -d gives the records"
tfr-cat -z zlib --level 1 "$T/a.tfr" >"$T/z2"
$PY -c "import sys,zlib; sys.stdout.buffer.write(zlib.decompress(open(sys.argv[1],'rb').read()))" \
	"$T/z2" >"$T/z2d"
same_file "$T/z2d" "$T/a.tfr" "-z zlib --level 1: zlib.decompress gives the records"
tfr-cat --compress=gzip --level=9 "$T/a.tfr" >"$T/z3"
ok test "$(stat -c %s "$T/z3")" -le "$(stat -c %s "$T/z1")" "--level 9 is no larger than the default"
tfr-cat -z none "$T/z1" >"$T/z4"
same_file "$T/z4" "$T/a.tfr" "-z none decompresses"

# ---- count, head, skip -----------------------------------------------------------
run tfr-cat -c "$T/a.tfr"
is "$out" "$na" "-c: the count Python's framer sees"
is "$rc" 0 "-c: exit 0"
run tfr-cat --count "$T/a.gz" "$T/b.tfr"
is "$out" "$((na + nb))" "--count over files and compression"
tfr-cat -j "$T/a.tfr" >"$T/all.j"
tfr-cat -j --skip 2 -n 3 "$T/a.tfr" >"$T/sel.j"
sed -n 3,5p "$T/all.j" >"$T/want.j"
same_file "$T/sel.j" "$T/want.j" "--skip 2 -n 3: records 2 to 4"
run tfr-cat -c --skip 2 -n 3 "$T/a.tfr"
is "$out" 3 "-c counts the selection"
run tfr-cat -c --skip $((na - 1)) "$T/a.tfr" "$T/b.tfr"
is "$out" $((nb + 1)) "--skip runs across files"
run tfr-cat -c --head=$((na + 2)) "$T/a.tfr" "$T/b.tfr"
is "$out" $((na + 2)) "--head runs across files"
printf 'garbage that is not a record' >"$T/junk"
run tfr-cat -c -n 2 "$T/a.tfr" "$T/junk"
is "$rc" 0 "-n stops before a later file (like head)"
is "$out" 2 "-n 2: two"
run tfr-cat -c -n 0 "$T/junk"
is "$out" 0 "-n 0 reads nothing"
run tfr-cat -c --skip 1000 "$T/a.tfr"
is "$out" 0 "--skip past the end: zero, no error"
is "$rc" 0 "--skip past the end: exit 0"
tfr-cat -n 1 "$T/a.tfr" >"$T/one"
is "$(ref frames "$T/one")" 1 "-n 1 writes one whole frame"

# ---- verify ----------------------------------------------------------------
run tfr-cat --verify "$T/a.tfr" "$T/b.tfr"
is "$rc" 0 "--verify good files: exit 0"
bytes=$(($(stat -c %s "$T/a.tfr") + $(stat -c %s "$T/b.tfr")))
is "$out" "records=$((na + nb)) bytes=$bytes files=2 corrupt=0 status=ok" "--verify summary"
run tfr-cat --verify -c "$T/a.gz"
is "$out" "$na" "--verify -c prints the count"
# a record that frames fine but is no Example
$PY -c "
import sys; sys.path.insert(0, '$DP_SRC/tests'); sys.argv=['', '$T']
exec(open('$DP_SRC/tests/tfr_ref.py').read().split('def main')[0])
open('$T/notex.tfr','wb').write(frame(b'\x0a\x02\x0a\x05') + frame(b'\x0a\x00'))
" || exit 1
run tfr-cat --verify "$T/b.tfr" "$T/notex.tfr"
is "$rc" 1 "--verify: an invalid Example fails"
like "$err" "notex.tfr: record 0 at byte 0: invalid Example: length runs past the end" \
	"--verify: file, record, byte and reason"
run tfr-cat -c "$T/notex.tfr"
is "$out" 2 "plain reading takes records as opaque bytes"

# ---- schema -------------------------------------------------------------------
run tfr-cat --schema "$T/b.tfr"
is "$rc" 0 "--schema: exit 0"
is "$out" "$(printf 'feature\tkind\trecords\tmin_values\tmax_values\tmin_bytes\tmax_bytes
image\tbytes\t5\t1\t2\t0\t10
label\tint64\t5\t1\t2\t-\t-
x\tfloat\t5\t0\t3\t-\t-
id\tbytes\t1\t1\t1\t2\t2
none\tnone\t1\t0\t0\t-\t-')" "--schema table (golden, checked by hand against small.jsonl)"
printf '{"k":{"int64":[1]}}\n{"k":{"float":[1.5,2]}}\n' | tfr-cat --encode json >"$T/mixed.tfr"
run tfr-cat --schema "$T/mixed.tfr"
like "$out" "$(printf 'k\tint64\t1\t1\t1')" "--schema: a name with two kinds, row one"
like "$out" "$(printf 'k\tfloat\t1\t2\t2')" "--schema: a name with two kinds, row two"

# ---- -o, atomic -------------------------------------------------------------------
run tfr-cat -o "$T/out.tfr" "$T/a.tfr"
is "$rc" 0 "-o: exit 0"
is "$out" "" "-o: nothing on stdout"
same_file "$T/out.tfr" "$T/a.tfr" "-o: the file"
echo keep >"$T/old"
head -c 300 "$T/a.tfr" >"$T/trunc"
run tfr-cat -o "$T/old" "$T/a.tfr" "$T/trunc"
is "$rc" 1 "-o with a failing input: exit 1"
is "$(cat "$T/old")" "keep" "-o: the old file is untouched"
is "$(ls -A "$T" | grep -c '\.tmp\.')" 0 "-o: no temporary left behind"
run tfr-cat -o "$T/new" "$T/trunc"
ok test ! -e "$T/new" "-o: no file at all after a failure"
run tfr-cat -c -o "$T/cnt" "$T/a.tfr"
is "$(cat "$T/cnt")" "$na" "-o takes text outputs too"
# killed while writing: no file, no temporary (SIGTERM: a background job
# of a non-interactive shell ignores SIGINT).  Input through a FIFO that
# stays open, so tfr-cat is still reading when the signal comes.
mkfifo "$T/fifo"
tfr-cat -o "$T/killed.tfr" <"$T/fifo" &
pid=$!
exec 3>"$T/fifo"
cat "$T/a.tfr" >&3
TP=$(cd "$T" && pwd -P)
for i in $(seq 50); do
	open_tmp $pid "$TP" && break
	sleep 0.2
done
ok open_tmp $pid "$TP" "-o: a temporary open while writing"
is "$(ls -A "$T" | grep -c '\.tmp\.')" 0 "-o: ... with no name where O_TMPFILE works (SIGKILL leaves nothing)"
kill -TERM $pid
wait $pid
is "$?" 143 "-o: SIGTERM ends it"
exec 3>&-
ok test ! -e "$T/killed.tfr" "-o: killed, no output file"
is "$(ls -A "$T" | grep -c '\.tmp\.')" 0 "-o: killed, the temporary removed"
run tfr-cat -o /dev/null "$T/a.tfr"
is "$rc" 0 "-o /dev/null: written in place"
ok test -c /dev/null "-o /dev/null: still a device"

# ---- the terminal guard ----------------------------------------------------------
if script -qec true /dev/null >/dev/null 2>&1; then
	script -qec "tfr-cat '$T/a.tfr'; echo rc=\$?" /dev/null >"$T/tty" 2>&1
	like "$(cat "$T/tty")" "refusing to write binary records to a terminal" "terminal: refused"
	like "$(cat "$T/tty")" "rc=1" "terminal: exit 1"
	script -qec "tfr-cat -j -n 1 '$T/b.tfr'; echo rc=\$?" /dev/null >"$T/tty2" 2>&1
	like "$(cat "$T/tty2")" '"label":\{"int64":\[3\]\}' "terminal: -j is fine"
	script -qec "tfr-cat -c </dev/tty; echo rc=\$?" /dev/null >"$T/tty3" 2>&1 </dev/null
	like "$(cat "$T/tty3")" "stdin is a terminal" "terminal: records are not read from one"
else
	skip "script(1) cannot make a terminal here"
	skip "script(1) cannot make a terminal here"
	skip "script(1) cannot make a terminal here"
	skip "script(1) cannot make a terminal here"
fi

# ---- --max-record ---------------------------------------------------------------
run tfr-cat -c --max-record 100 "$T/a.tfr"
is "$rc" 1 "--max-record: a longer record fails"
like "$err" "a.tfr: record 0 at byte 0: record length [0-9]+ exceeds the maximum of 100 bytes" \
	"--max-record: message"
run tfr-cat -c --max-record 1M "$T/a.tfr"
is "$out" "$na" "--max-record 1M: fine"

done_testing
