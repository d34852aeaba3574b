#!/bin/bash
# s3-pipe on local files (file:// URLs and plain paths): every command but
# the S3-only ones, the options, messages and exit statuses.  The S3 side
# is in s3-pipe-s3.t.
. "${DP_SRC:-.}/tests/lib.sh"
cd "$T" || exit 1

# ---- fixtures: a small tree whose key order is not the walk order ------------
mkdir -p d/a d/sub
for f in a.txt a/b b c sub/x sub/y z; do
	printf 'this is %s\n' "$f" >"d/$f"
done
head -c 300000 /dev/urandom >d/rand.bin
echo >>d/rand.bin # whole lines: shuffled files sort to the same lines
# key (byte) order of the relative paths, as S3 lists them
keys=$(cd d && find . -type f | sed 's|^\./||' | LC_ALL=C sort)
for k in $keys; do cat "d/$k"; done >all.expected
nkeys=$(echo "$keys" | wc -l)

# ---- help, version, usage ---------------------------------------------------------
run s3-pipe --help
is "$rc" 0 "--help exits 0"
# every option of the table in tools/s3-pipe.c (read from the source: an
# option added there is checked here without a line of this test)
opts=$(sed -n 's/^\t*{"\([a-z-]*\)", [a-z_]*_argument,.*/\1/p' "$DP_SRC/tools/s3-pipe.c")
ok [ "$(echo $opts | wc -w)" -ge 30 ] "the option table read from tools/s3-pipe.c ($(echo $opts | wc -w) options)"
for o in $opts help version; do
	like "$out" "--$o" "--help lists --$o"
done
for c in get put ls fifo presign rm; do
	like "$out" "^  $c |
  $c " "--help lists the $c command"
done
run s3-pipe --version
is "$rc" 0 "--version exits 0"
like "$out" "^s3-pipe \(dptools\) [0-9]" "--version names the program"
if [ -c /dev/full ] && [ -w /dev/full ]; then
	s3-pipe --help >/dev/full 2>help.err
	is "$?" 1 "--help to a full disk: 1"
	like "$(cat help.err)" "^s3-pipe: stdout: No space left on device" "--help to a full disk: says so"
else
	skip "no /dev/full"
	skip "no /dev/full"
fi
run s3-pipe
is "$rc" 2 "no command: usage error"
like "$err" "^s3-pipe: no command" "no command: says so"
is "$(echo "$err" | wc -l)" 2 "usage error: a message and a one-line usage"
run s3-pipe frob x
is "$rc" 2 "unknown command: 2"
like "$err" "unknown command 'frob'" "unknown command named"
run s3-pipe get --frob d/b
is "$rc" 2 "unknown option: 2"
is "$err" "s3-pipe: unknown option '--frob'
usage: s3-pipe get|put|ls|fifo|presign|rm|whoami|sync|mb|rb [OPTION]... URL...   (s3-pipe --help lists every option)" \
	"unknown option: the one wording, then the usage line"
run s3-pipe get -x d/b
like "$err" "^s3-pipe: unknown option '-x'" "unknown short option named"
run s3-pipe get d/b --seed
is "$rc" 2 "an option without its value: 2"
like "$err" "^s3-pipe: option '--seed' needs a value" "an option without its value: named"
run s3-pipe get --json d/b
is "$rc" 2 "an option of another command: 2"
like "$err" "--json does not apply to get" "says which option and command"
run s3-pipe get --shard 3/3 d/
is "$rc" 2 "--shard 3/3: 2"
like "$err" "^s3-pipe: --shard '3/3': want I/N, part I from 0 to N-1 of N from 1 to 1073741824" \
	"bad shard: the one I/N message (tfr-shard --take's)"
run s3-pipe get --shard 0/1073741825 d/
is "$rc" 2 "--shard N past 2^30: 2"
run s3-pipe get --shard 1073741823/1073741824 d/
is "$rc" 0 "--shard 2^30-1/2^30: the range of tfr-shard --take"
is "$out" "" "--shard: a worker past the keys gets nothing"
run s3-pipe get --range 9-2 d/b
is "$rc" 2 "--range 9-2: 2"
run s3-pipe get --range 0-2 d/b d/c
is "$rc" 2 "--range with two objects: 2"
run s3-pipe get -j 0 d/b
is "$rc" 2 "-j 0: 2"
run s3-pipe put --part-size 1M s3://b/k
is "$rc" 2 "put --part-size below S3's 5M: 2"
run s3-pipe get ftp://host/x
is "$rc" 2 "unsupported scheme: 2"
like "$err" "unsupported URL scheme" "unsupported scheme named"

# ---- get ----------------------------------------------------------------------------
run s3-pipe get d/b d/c
is "$out" "$(cat d/b d/c)" "get: files concatenated in the order given"
s3-pipe get d/ >got
same_file got all.expected "get DIR/: every file, in S3 key order (a.txt before a/b)"
s3-pipe get "file://$T/d/" >got
same_file got all.expected "get file:///DIR/: the same"
s3-pipe get "file:d" >got
same_file got all.expected "get file:REL (a directory without '/'): the same"
s3-pipe get -j 1 --part-size 1K d/ >got
same_file got all.expected "get -j 1 --part-size 1K: same bytes through many small parts"
run s3-pipe get d/nope
is "$rc" 3 "get of a missing file: 3"
is "$err" "s3-pipe: d/nope: No such file or directory" "missing file: message"
run s3-pipe get d/b -o out.txt
is "$rc" 0 "get -o: 0"
same_file out.txt d/b "get -o FILE: written"
run s3-pipe get d/b d/nope -o out2.txt
is "$rc" 3 "get -o with a missing input: 3"
ok test ! -e out2.txt "get -o: nothing written on failure"
is "$(ls -a | grep -c '\.tmp\.')" 0 "get -o: no temporary file left"
OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 s3-pipe get d/b -o 'out-{rank}-of-{size}'
same_file out-1-of-2 d/b "get -o: {rank}/{size} from the environment"

# ranges
printf '0123456789' >ten
run s3-pipe get --range 2-4 ten
is "$out" "234" "--range A-B"
run s3-pipe get --range bytes=7- ten
is "$out" "789" "--range bytes=A-"
run s3-pipe get --range -3 ten
is "$out" "789" "--range -N: the last N bytes"
run s3-pipe get --range 5-100 ten
is "$out" "56789" "--range past the end: up to the end"
run s3-pipe get --range 10- ten
is "$rc" 2 "--range starting past the end: 2"
like "$err" "range starts at byte 10 of a 10-byte object" "range past the end: message"
: >empty
run s3-pipe get --range 0-0 empty
is "$rc" 2 "--range 0-0 of an empty file: 2, as a range past the end of any other"
like "$err" "empty: range starts at byte 0 of a 0-byte object" "... with the same message"
run s3-pipe get --range -4 empty
is "$rc:$out" "0:" "--range -4 of an empty file: nothing, 0"

# shards: disjoint, covering, round-robin over the key order
for i in 0 1 2; do
	s3-pipe get --shard $i/3 d/ >shard$i
	exp=$(echo "$keys" | awk -v i=$i '(NR - 1) % 3 == i')
	for k in $exp; do cat "d/$k"; done >shard$i.expected
	same_file shard$i shard$i.expected "--shard $i/3: keys $i, $((i + 3)), ... of the key order"
done
is "$(cat shard0 shard1 shard2 | wc -c)" "$(wc -c <all.expected)" "three shards cover every byte once"
OMPI_COMM_WORLD_RANK=2 OMPI_COMM_WORLD_SIZE=3 s3-pipe get --shard '{rank}/{size}' d/ >r
same_file r shard2 "--shard {rank}/{size} from OMPI_COMM_WORLD_*"
PMI_RANK=1 PMI_SIZE=3 s3-pipe get --shard '{rank}/{size}' d/ >r
same_file r shard1 "--shard {rank}/{size} from PMI_*"
SLURM_PROCID=0 SLURM_NTASKS=3 s3-pipe get --shard '{rank}/{size}' d/ >r
same_file r shard0 "--shard {rank}/{size} from SLURM_*"

# shuffle: a permutation of whole files, fixed by seed and epoch
s3-pipe get --shuffle --seed 7 d/ >s7e0
s3-pipe get --shuffle --seed 7 d/ >again
same_file s7e0 again "--shuffle --seed 7: reproducible"
s3-pipe get --shuffle --seed 7 --epoch 1 d/ >s7e1
not_ok cmp -s s7e0 s7e1 "--epoch 1: another order"
not_ok cmp -s s7e0 all.expected "--shuffle: not the key order"
is "$(sort s7e0 | md5sum)" "$(sort all.expected | md5sum)" "--shuffle: the same lines"
s3-pipe get --shuffle --seed 7 --epoch 1 --shard 0/2 d/ >a0
s3-pipe get --shuffle --seed 7 --epoch 1 --shard 1/2 d/ >a1
is "$(cat a0 a1 | sort | md5sum)" "$(sort all.expected | md5sum)" \
	"--shuffle with --shard: the two shares cover everything"

# manifests (SageMaker's format)
printf '[{"prefix": "file://%s/d/"}, "sub/y", "b", "a/b"]\n' "$T" >m.json
run s3-pipe get --manifest m.json
is "$out" "$(cat d/sub/y d/b d/a/b)" "--manifest: entries in manifest order"
printf '[{"prefix": "d/"}, "z"]' >m2.json
run s3-pipe get --manifest "file://$T/m2.json"
is "$out" "$(cat d/z)" "--manifest with a plain-path prefix"
# bad manifests: the file, its text, the exit status, the message, what is wrong
while IFS='|' read -r f text want msg what; do
	printf '%s' "$text" >"$f"
	run s3-pipe get --manifest "$f"
	is "$rc" "$want" "$what: $want"
	like "$err" "$msg" "$what: message"
done <<'EOF'
bad1.json|{"prefix": "d/"}|1|^s3-pipe: bad1.json: manifest: not a JSON array|manifest not an array
bad2.json|[{"prefix": "d/"}, "b", 7]|1|bad2.json: manifest: entry 2 is not a string|manifest entry not a string
bad3.json|[{"prefix": "d/"}, "b", "gone"]|3|bad3.json: manifest entry 2: d/gone: No such file|manifest entry missing
bad4.json|[{"prefix": "d/"}, "b"|1|bad4.json: manifest: line 1|manifest JSON syntax error
EOF

# output errors
if [ -c /dev/full ] && [ -w /dev/full ]; then
	run s3-pipe get d/rand.bin -o /dev/full
	is "$rc" 1 "-o /dev/full (a device, written as it is): 1"
	like "$err" "^s3-pipe: /dev/full: write: No space left on device" "full disk: message"
	ok test -c /dev/full "-o DEVICE: the device is still a device"
	s3-pipe get d/rand.bin >/dev/full 2>full.err
	is "$?" 1 "stdout on a full disk: 1"
	like "$(cat full.err)" "No space left on device" "stdout on a full disk: message"
else
	for i in 1 2 3 4 5; do skip "no /dev/full"; done
fi
mkfifo out.fifo
cat out.fifo >from.fifo &
s3-pipe get d/b -o out.fifo
wait
same_file from.fifo d/b "-o FIFO: written through the FIFO"
ok test -p out.fifo "-o FIFO: still a FIFO"
head -c 3000000 /dev/urandom >big.bin
s3-pipe get big.bin 2>epipe.err | head -c 10 >/dev/null
st=${PIPESTATUS[0]}
is "$st" 141 "reader gone (EPIPE): 141, as SIGPIPE would end it (every program's rule)"
is "$(cat epipe.err)" "" "reader gone: quietly"

# ---- put ----------------------------------------------------------------------------
printf 'from stdin\n' | s3-pipe put new/dirs/p0
is "$(cat new/dirs/p0)" "from stdin" "put to a local path makes its directories, as S3 needs none"
printf 'from stdin\n' | s3-pipe put p1
is "$(cat p1)" "from stdin" "put FILE: stdin to a local file"
run s3-pipe put p1/sub/p2 <p1
is "$rc/$err" "1/s3-pipe: p1/sub: cannot create directory: Not a directory" \
	"put under a file where a directory should be made: 1, the directory named"
run s3-pipe sync "file://$T/d/" p1/sub/
is "$rc/$err" "1/s3-pipe: p1/sub: cannot create directory: Not a directory" \
	"sync to under a file: the same"
mkdir up
run s3-pipe put "file://$T/up/" d/b d/c
is "$rc" 0 "put PREFIX/ FILE FILE: 0"
same_file up/b d/b "put to a prefix: first file"
same_file up/c d/c "put to a prefix: second file"
run s3-pipe put up d/b d/c
is "$rc" 2 "put of several files to a name without '/': 2"
run s3-pipe put up/
is "$rc" 2 "put of stdin to a prefix: 2"
run s3-pipe put up/x nope
is "$rc" 3 "put of a missing file: 3"

# ---- ls -------------------------------------------------------------------------------
run s3-pipe ls d/
is "$rc" 0 "ls DIR/: 0"
is "$(echo "$out" | awk '{print $NF}' | tr '\n' ' ')" "d/a.txt d/a/ d/b d/c d/rand.bin d/sub/ d/z " \
	"ls: first level, directories as PRE, key order"
like "$(echo "$out" | grep rand.bin)" "^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8} +300001 d/rand.bin$" \
	"ls: time, size, name"
run s3-pipe ls -r d/
is "$(echo "$out" | wc -l)" "$nkeys" "ls -r: every file"
run s3-pipe ls d/s
is "$(echo "$out" | awk '{print $NF}')" "d/sub/" "ls d/s: S3-like prefix match"
# a local folder with a link back up: an error, not 64 levels of copies (two
# links to . would be 2^64 of them)
mkdir -p lp/in && printf 'x' > lp/in/f && ln -s .. lp/in/up && ln -s . lp/in/self
run timeout 20 s3-pipe ls -r lp/
is "$rc" 1 "ls -r of a folder with link loops: 1, at once"
like "$err" "lp/in/(up|self)/: a loop: it leads back to a folder above it" "... naming the loop"
rm -rf lp
run s3-pipe ls --json -r "file://$T/d/"
echo "$out" >ls.json
ok $PY -c '
import json, sys
for l in open(sys.argv[1]):
    o = json.loads(l)
    assert set(o) == {"key", "url", "size", "mtime", "etag"}, o
    assert o["url"].startswith("file:///"), o
' ls.json "ls --json: one JSON object per line with key, url, size, mtime, etag"
run s3-pipe ls d/nope/
is "$rc" 3 "ls of a missing directory: 3"

# ---- rm ---------------------------------------------------------------------------------
cp -r d dd
run s3-pipe rm dd/b
ok test ! -e dd/b "rm FILE"
run s3-pipe rm dd/b
is "$rc" 3 "rm of a missing file: 3"
run s3-pipe rm dd/
is "$rc" 2 "rm of a directory without -r: 2"
run s3-pipe rm -r dd/
is "$(find dd -type f | wc -l)" 0 "rm -r DIR/: every file"

# rm -r names a "directory": never its neighbours, nothing that is missing
mkdir -p rmt/ab
for f in rmt/ab/y rmt/abc; do printf '%s\n' "$f" >"$f"; done
run s3-pipe rm -r rmt/a
is "$rc" 3 "rm -r of a missing local name: 3"
is "$(find rmt -type f | sort | tr '\n' ' ')" "rmt/ab/y rmt/abc " "... and not the names that start with it"
run s3-pipe rm -r rmt/ab/nope
is "$rc" 3 "rm -r of a missing local path: 3"
mkdir rmt/a
printf 'x\n' >rmt/a/x
run s3-pipe rm -r rmt/a
is "$rc" 0 "rm -r DIR (no '/'): 0"
is "$(find rmt -type f | sort | tr '\n' ' ')" "rmt/ab/y rmt/abc " "rm -r rmt/a: rmt/a/x only; rmt/ab/y, rmt/abc kept"
run s3-pipe rm -r --dryrun rmt/
is "$out" "(dryrun) delete: rmt/ab/y
(dryrun) delete: rmt/abc" "rm -r --dryrun: what would go"
is "$(find rmt -type f | wc -l)" 2 "rm -r --dryrun: removes nothing"
run s3-pipe rm --dryrun rmt/abc
is "$rc:$out" "0:(dryrun) delete: rmt/abc" "rm --dryrun FILE"
ok test -e rmt/abc "rm --dryrun FILE: kept"

# braces: literal in URLs; rm acts on the name as spelled
mkdir brace
printf 'zero\n' >brace/0.txt
printf 'literal\n' >'brace/{rank}.txt'
run s3-pipe get 'brace/{rank}.txt'
is "$out" "literal" "get: braces in a path are literal"
OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 run s3-pipe get --expand 'brace/{rank}.txt'
is "$out" "zero" "get --expand: {rank} filled in"
OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 run s3-pipe rm 'brace/{rank}.txt'
is "$rc" 0 "rm of a name with braces: 0"
ok test -e brace/0.txt "rm 'brace/{rank}.txt' kept brace/0.txt"
ok test ! -e 'brace/{rank}.txt' "... and removed the file named so"
run s3-pipe rm --expand brace/0.txt
is "$rc" 2 "rm --expand: usage error"
OMPI_COMM_WORLD_RANK=3 OMPI_COMM_WORLD_SIZE=4 s3-pipe get d/b -o 'lit-{{rank}}-{rank}'
same_file 'lit-{rank}-3' d/b "-o: {{ }} literal braces beside {rank}"

# put: two files for one name, --dryrun
mkdir -p d1 d2 dup
printf 'one\n' >d1/same
printf 'two\n' >d2/same
run s3-pipe put dup/ d1/same d2/same
is "$rc" 2 "put of two files with one base name: 2"
like "$err" "put: d1/same and d2/same would both be dup/same" "... names both"
ok test ! -e dup/same "... and writes neither"
run s3-pipe put --dryrun dup/ d1/same
is "$out" "(dryrun) upload: d1/same to dup/same" "put --dryrun: what would be written"
ok test ! -e dup/same "put --dryrun: writes nothing"

# every name ls prints names the file
touch file:x
run s3-pipe ls fil
is "$(echo "$out" | awk '{print $NF}')" "./file:x" "ls: a name that reads as a URL is printed ./file:x"
run s3-pipe get "$(echo "$out" | awk '{print $NF}')"
is "$rc" 0 "... which get reads"

# ---- presign ----------------------------------------------------------------------------
run s3-pipe presign d/b
is "$out" "file://$T/d/b" "presign of a file: its file:// URL"

# ---- fifo: SageMaker Pipe mode ------------------------------------------------------------
s3-pipe fifo --dir pipes --epochs 2 d/ 2>fifo.err &
pid=$!
cat pipes/train_0 >e0 2>/dev/null || { sleep 1; cat pipes/train_0 >e0; }
for i in $(seq 1 50); do [ -p pipes/train_1 ] && break; sleep 0.1; done
cat pipes/train_1 >e1
wait $pid
is "$?" 0 "fifo --epochs 2: exits 0 after the last epoch"
same_file e0 all.expected "fifo: epoch 0 through pipes/train_0"
same_file e1 all.expected "fifo: epoch 1 through pipes/train_1"
ok test ! -e pipes "fifo: no FIFO left once the epochs are served, nor the --dir it made"

OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 \
	s3-pipe fifo --channel val --dir 'p-{rank}' --epochs 2 --shuffle --seed 3 --shard '{rank}/{size}' d/ &
pid=$!
for i in $(seq 1 50); do [ -p p-1/val_0 ] && break; sleep 0.1; done
head -c 5 p-1/val_0 >/dev/null   # a reader that stops early
for i in $(seq 1 50); do [ -p p-1/val_1 ] && break; sleep 0.1; done
cat p-1/val_1 >v1
wait $pid
is "$?" 0 "fifo: a reader closing early ends its epoch, not the run"
s3-pipe get --shuffle --seed 3 --epoch 1 --shard 1/2 d/ >v1.expected
same_file v1 v1.expected "fifo --shuffle --shard: epoch 1 is get --epoch 1 of the same shard"
ok test ! -e p-1 "fifo --dir: {rank} expanded (p-1 served), the directory made removed"

# the directories fifo made go at the end, those that were there stay;
# a signal too
mkdir -p keep/old
s3-pipe fifo --dir keep/new/deeper --epochs 1 d/ &
pid=$!
for i in $(seq 1 50); do [ -p keep/new/deeper/train_0 ] && break; sleep 0.1; done
cat keep/new/deeper/train_0 >/dev/null
wait $pid
is "$(cd keep && find . | sort | tr '\n' ' ')" ". ./old " "fifo: keep/new/deeper made and removed, keep and keep/old left"
s3-pipe fifo --dir keep/sig/x --epochs 1 d/ &
pid=$!
for i in $(seq 1 50); do [ -p keep/sig/x/train_0 ] && break; sleep 0.1; done
kill -TERM $pid
wait $pid
is "$?:$(cd keep && find . | sort | tr '\n' ' ')" "143:. ./old " "fifo killed (SIGTERM): its FIFO and directories gone"

run s3-pipe fifo d/
is "$rc" 2 "fifo without --dir: 2"

# two runs on one channel's FIFOs (a --dir without {rank}, a second start):
# the second refuses, naming the first; the first's epoch arrives whole and
# its FIFO stays when the second ends
s3-pipe fifo --dir two --epochs 1 d/ 2>two.err &
pid=$!
for i in $(seq 1 50); do [ -p two/train_0 ] && break; sleep 0.1; done
run timeout 20 s3-pipe fifo --dir ./two --epochs 1 d/
is "$rc" 1 "a second fifo on the same channel's FIFOs: refused"
like "$err" "two/train_\*: served by another s3-pipe fifo \(pid $pid\)" "... naming the first one's pid"
ok test -p two/train_0 "... the first one's FIFO still there"
timeout 20 cat two/train_0 >two.got
wait $pid
same_file two.got all.expected "... and its epoch whole, once"
run timeout 20 s3-pipe fifo --channel val --dir two --epochs 1 d/ &
vpid=$!
for i in $(seq 1 50); do [ -p two/val_0 ] && break; sleep 0.1; done
ok test -p two/val_0 "another channel in the same folder is served"
timeout 20 cat two/val_0 >/dev/null
wait $vpid

# FIFOs exist only while s3-pipe will serve them (s3-pipe(1), FIFO LIFETIME)
mkdir rec
for i in 0 1 2; do
	for r in $(seq 1 2000); do printf '{"x":{"int64":[%d]},"pad":{"bytes":["%0200d"]}}\n' $r $r; done |
		tfr-cat --encode json >rec/p$i.tfrecord
done
run s3-pipe fifo --dir pp nosuch/
is "$rc" 3 "fifo of a missing prefix: 3"
ok test ! -e pp/train_0 "... and no FIFO left for a reader to wait on"
# s3-pipe fifo --dir DIR --epochs N rec/ in the background ($pid), stderr to
# ERR, once its first FIFO is there (or it has ended)
fifo_start() { # DIR N ERR
	s3-pipe fifo --dir "$1" --epochs "$2" rec/ 2>"$3" &
	pid=$!
	until [ -p "$1/train_0" ] || ! kill -0 $pid 2>/dev/null; do sleep 0.1; done
}
fifo_start pp 3 pp.err
is "$(tfr-cat -c pp/train_0)" 6000 "fifo epoch 0: every record"
ok test ! -e pp/train_0 "an epoch's FIFO is gone once the epoch ended"
mv rec/p2.tfrecord rec.p2 # epoch 1 fails on it
run tfr-cat -c pp/train_1
isnt "$rc" 0 "a failed epoch: its reader fails, not a clean short epoch"
like "$err" "pp/train_1: record [0-9]+ at byte [0-9]+: truncated" "... it reads a truncated record"
wait $pid
is "$?" 3 "fifo: the failure's status (3: not found)"
ok test ! -e pp/train_1 "a failed epoch's FIFO is removed"
ok test ! -e pp/train_2 "... and the next one was never made"
mv rec.p2 rec/p2.tfrecord

fifo_start pq 2 /dev/null
kill -TERM $pid
wait $pid
is "$?" 143 "SIGTERM while waiting for a reader: dies of it"
ok test ! -e pq/train_0 "... and removes the FIFO"
fifo_start pq 2 /dev/null
is "$(tfr-cat -c pq/train_0)" 6000 "epoch 0 read whole"
kill -TERM $pid
wait $pid
is "$?" 143 "SIGTERM between epochs: dies of it"
ok test ! -e pq/train_1 "... and removes the next epoch's FIFO"
fifo_start pq 2 /dev/null
exec 9<pq/train_0 # a reader that has not read yet: 1.2 MB cannot all wait in the pipe
kill -TERM $pid
wait $pid
is "$?" 143 "SIGTERM inside an epoch: dies of it"
run tfr-cat -c <&9
exec 9<&-
isnt "$rc" 0 "... and the epoch's reader fails instead of taking it for whole"
ok test ! -e pq/train_0 "... and the FIFO is removed"
touch notfifo_0
run s3-pipe fifo --dir . --channel notfifo d/b
is "$rc" 1 "fifo over a regular file: 1"
like "$err" "notfifo_0: exists and is not a FIFO" "fifo over a regular file: message"

done_testing
