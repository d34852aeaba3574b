#!/bin/bash
# tfr-shard: options and help, round-robin sharding, names, inputs (files,
# stdin, compressed), output compression, the summary, stdout.  Records are
# checked with the independent Python reader in tests/tfrshard.py.
. "${DP_SRC:-.}/tests/lib.sh"
REF="$PY $DP_SRC/tests/tfrshard.py"
cd "$T" || exit 1

$REF gen in.tfr 1001 --size 80
$REF digest in.tfr >in.digest

# ---- help, version, usage
run tfr-shard --help
is "$rc" 0 "--help exits 0"
like "$out" "usage: tfr-shard" "--help prints usage on stdout"
for o in --shards --output --by --max-records --max-bytes --split --split-by --only --shuffle \
	--shuffle-window --seed --memory --tmpdir --take --rank --size --compress --level \
	--skip-corrupt --quiet --help --version; do
	man_has=$(grep -c -- "$(printf '%s' "$o" | sed 's/-/\\\\-/g')" "$DP_SRC/man/man1/tfr-shard.1")
	if printf '%s' "$out" | grep -q -- "$o" && [ "$man_has" -gt 0 ]; then
		_tap_result 0 "$o in --help and in the man page"
	else
		_tap_result 1 "$o in --help and in the man page"
	fi
done
run tfr-shard --version
is "$rc" 0 "--version exits 0"
like "$out" "^tfr-shard \(dptools\) [0-9]" "--version prints the version"
run tfr-shard --version
is "$(tfr-shard -V)" "$out" "-V is --version"
tfr-shard --help >/dev/full 2>full.err
is "$?/$(cat full.err)" "1/tfr-shard: stdout: No space left on device" "--help on a full disk: exit 1, says so"
tfr-shard --version >/dev/full 2>full.err
is "$?/$(cat full.err)" "1/tfr-shard: stdout: No space left on device" "--version on a full disk: exit 1, says so"
run tfr-shard --bogus in.tfr
is "$rc" 2 "unknown option: exit 2"
is "$(echo "$err" | head -1)" "tfr-shard: unknown option '--bogus'" "names the option"
like "$err" "usage: tfr-shard" "one-line usage"
is "$out" "" "nothing on stdout"
run tfr-shard -n
is "$rc" 2 "missing value: exit 2"
is "$(echo "$err" | head -1)" "tfr-shard: option '-n' needs a value" "says which option"
for bad in "-n 0" "-n x" "-n -1" "--by nope" "--by hash:" "-z bzip2" "--level 10" "--memory 12Q" \
	"--seed x" "--shuffle-window 0" "--max-records 0" "--max-bytes 0" "--rank -1" "--size 0"; do
	run tfr-shard $bad -o 'x-{shard}' in.tfr
	is "$rc" 2 "'$bad': exit 2"
done
ls x-* >/dev/null 2>&1
is "$?" 2 "usage errors create no output"

# ---- round-robin: names, balance, order, records
run tfr-shard -n 4 -o 'out-{shard}-of-{nshards}.tfrecord' in.tfr
is "$rc" 0 "-n 4: exit 0"
is "$(ls out-*)" "out-00000-of-00004.tfrecord
out-00001-of-00004.tfrecord
out-00002-of-00004.tfrecord
out-00003-of-00004.tfrecord" "TensorFlow-style names, 5 digits"
counts=$(for f in out-*; do $REF check "$f"; done | tr '\n' ' ')
is "$counts" "records=251 records=250 records=250 records=250 " "sizes differ by at most one"
$REF digest out-* >out.digest
same_file out.digest in.digest "the shards hold exactly the input records"
is "$($REF ids out-00001-of-00004.tfrecord | head -4 | tr '\n' ' ')" "1 5 9 13 " \
	"record j goes to shard j % 4, in order"
is "$(ls -a | grep -c '\.tmp\.')" 0 "no temporary files left"
like "$err" "file=out-00000-of-00004.tfrecord shard=0 records=251 bytes=[0-9]+ file_bytes=[0-9]+" \
	"summary line per output"
like "$err" "total outputs=4 records=1001 bytes=[0-9]+ read=1001 corrupt=0 dropped=0" "summary total"
bytes=$(stat -c %s in.tfr)
like "$err" "total outputs=4 records=1001 bytes=$bytes " "summary bytes are the framed bytes"

run tfr-shard -q -n 3 -o 'q-{shard}' in.tfr
is "$rc:$err" "0:" "-q: no summary"
run tfr-shard --shards 3 --output 'l-{shard}' --quiet in.tfr
same_file l-00000 q-00000 "long options are the short ones"

run tfr-shard --take 3/123456 -o 'w-{shard}-of-{nshards}' in.tfr
is "$(ls w-*)" "w-000003-of-123456" "more than 5 digits when N needs them"

run tfr-shard -n 2 -o 'deep/er/dir/s-{shard}' in.tfr
ok_records deep/er/dir/s-00000 "missing directories are created"

# ---- inputs: several files, stdin, '-', compression detected
$REF gen a.tfr 10 --seed 2
$REF gen b.tfr 7 --seed 3
run tfr-shard -o ab.tfr a.tfr b.tfr
cat a.tfr b.tfr >ab.cat
same_file ab.tfr ab.cat "one shard of two inputs: their concatenation, in order"
run tfr-shard -n 4 -o 'stdin-{shard}-of-{nshards}.tfrecord' <in.tfr
is "$rc" 0 "stdin: exit 0"
for k in 0 1 2 3; do
	same_file stdin-0000$k-of-00004.tfrecord out-0000$k-of-00004.tfrecord "stdin shard $k = file shard $k"
done
run tfr-shard -o ab2.tfr a.tfr - <b.tfr
same_file ab2.tfr ab.cat "'-' is stdin among files"
run tfr-shard -o x.tfr - - <a.tfr
is "$rc" 2 "stdin twice: usage error"
for c in gzip zlib; do
	$REF gen in.$c 1001 --size 80 --comp $c
	run tfr-shard -n 4 -o "$c-{shard}" in.$c
	is "$rc" 0 "$c input: exit 0"
	same_file $c-00002 out-00002-of-00004.tfrecord "$c input detected: same shards"
done
gzip -c in.tfr | gzip -c >in.gz2
run tfr-shard -n 4 -o 'gz2-{shard}' in.gz2
is "$rc" 1 "gzip of gzip: not a TFRecord stream inside (exit 1)"

# ---- output compression
for c in gzip zlib; do
	run tfr-shard -n 2 -z $c -o "z$c-{shard}" in.tfr
	is "$rc" 0 "-z $c: exit 0"
	$REF digest z$c-* >z.digest
	same_file z.digest in.digest "-z $c: the records, readable by Python's $c"
	like "$err" "file=z$c-00000 shard=0 records=501 bytes=[0-9]+ file_bytes=[0-9]+" "-z $c summary"
done
is "$(head -c 2 zgzip-00000 | od -An -tx1 | tr -d ' ')" "1f8b" "gzip magic"
run tfr-shard -n 2 --compress gzip --level 1 -o 'l1-{shard}' in.tfr
run tfr-shard -n 2 --compress gzip --level 9 -o 'l9-{shard}' in.tfr
$REF digest l9-* >l9.digest
same_file l9.digest in.digest "--level 9 output holds the records"
isnt "$(cmp -s l1-00000 l9-00000; echo $?)" 0 "--level changes the bytes"
run tfr-shard -n 2 -z none -o 'zn-{shard}' in.tfr
run tfr-shard -n 2 -o 'zp-{shard}' in.tfr
same_file zn-00000 zp-00000 "-z none is plain"
run tfr-shard -n 2 -z gzip -o 'zround-{shard}' in.tfr
run tfr-shard -n 2 -o 'back-{shard}' zround-00000 zround-00001
$REF digest back-* >back.digest
same_file back.digest in.digest "gzip shards read back by tfr-shard"

# ---- stdout
tfr-shard -o - a.tfr >o1.tfr 2>o1.err
is "$?" 0 "-o -: exit 0"
same_file o1.tfr a.tfr "-o -: one output to stdout"
tfr-shard a.tfr >o2.tfr 2>o2.err
same_file o2.tfr a.tfr "no -o: one output to stdout"
like "$(cat o2.err)" "file=- shard=0 records=10" "summary names stdout '-'"
esc=$(printf 'e\033[31mx y')
run tfr-shard -o "$esc" a.tfr
same_file "$esc" a.tfr "an output named with a terminal control and a space"
like "$err" 'file="e\\u001b\[31mx y" shard=0 records=10' \
	"...is named in the summary quoted, its control escaped (it cannot rewrite the terminal)"
unlike "$err" "$(printf '\033')" "...no control character reaches stderr"
run tfr-shard -n 2 -o - a.tfr
is "$rc" 2 "-o - with two outputs: usage error"
run tfr-shard -n 2 a.tfr
is "$rc" 2 "no -o with two outputs: usage error"
like "$err" "-o TEMPLATE is needed" "says -o is needed"
run tfr-shard -n 2 -o fixed.tfr a.tfr
is "$rc" 2 "two outputs, one name: usage error"
like "$err" "both be named 'fixed.tfr'" "names the clash"
run $PY -c '
import os, pty, subprocess, sys
m, s = pty.openpty()
p = subprocess.run(["tfr-shard", "a.tfr"], stdout=s, stderr=subprocess.PIPE)
sys.stderr.write(p.stderr.decode()); sys.exit(p.returncode)'
is "$rc" 1 "stdout a terminal: exit 1"
like "$err" "stdout is a terminal" "refuses to write records to a terminal"

run $PY -c '
import os, pty, subprocess, sys
m, s = pty.openpty()
p = subprocess.run(["tfr-shard", "-o", "tty.tfr"], stdin=s, stderr=subprocess.PIPE)
sys.stderr.write(p.stderr.decode()); sys.exit(p.returncode)'
is "$rc" 2 "stdin a terminal and no FILE: usage error, no wait"
like "$err" "stdin is a terminal" "says so"

# ---- existing outputs are replaced on success
echo old >rep-00000
echo old >rep-00001
run tfr-shard -n 2 -o 'rep-{shard}' a.tfr
is "$($REF check rep-00000 rep-00001)" "records=10" "existing outputs replaced"

done_testing
