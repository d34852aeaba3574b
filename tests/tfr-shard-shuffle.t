#!/bin/bash
# tfr-shard --shuffle and --shuffle-window: records preserved, same seed
# same bytes (whatever --memory: in memory, spilled, buckets split again),
# other seeds other orders, spill files never visible in the temporary
# directory, the window's displacement bound.
. "${DP_SRC:-.}/tests/lib.sh"
REF="$PY $DP_SRC/tests/tfrshard.py"
cd "$T" || exit 1

$REF gen in.tfr 3000 --size 1500
$REF digest in.tfr >in.digest
$REF ids in.tfr >in.ids
mkdir tmp

# ---- full shuffle
run tfr-shard --shuffle --seed 7 -o m.tfr in.tfr
is "$rc" 0 "--shuffle: exit 0"
like "$err" "spilled=0 spill_levels=0" "default memory: no spill"
$REF digest m.tfr >m.digest
same_file m.digest in.digest "--shuffle keeps every record"
$REF ids m.tfr >m.ids
isnt "$(cmp -s m.ids in.ids; echo $?)" 0 "--shuffle changes the order"
is "$(head -100 m.ids | sort -n | awk 'NR > 1 && $1 == p + 1 { c++ } { p = $1 } END { print c + 0 }' | \
	awk '{ print ($1 < 20) }')" 1 "the first 100 are not a run of neighbours"
run tfr-shard --shuffle --seed 7 --memory 1M --tmpdir tmp -o s1.tfr in.tfr
like "$err" "spilled=[1-9][0-9]* spill_levels=1 " "--memory 1M: one spill level"
same_file s1.tfr m.tfr "spilled: the same bytes as in memory"
run tfr-shard --shuffle --seed 7 --memory 16k --tmpdir tmp -o s2.tfr in.tfr
like "$err" "spill_levels=[2-9]" "--memory 16k: buckets split again"
same_file s2.tfr m.tfr "split again: the same bytes"
TMPDIR=$T/tmp tfr-shard --shuffle --seed 7 --memory 100k -q -o s3.tfr <in.tfr
same_file s3.tfr m.tfr "from stdin, TMPDIR, other memory: the same bytes"
is "$(ls -A tmp | wc -l)" 0 "no spill files left"
run tfr-shard --shuffle --seed 7 -o m2.tfr in.tfr
same_file m2.tfr m.tfr "run again: the same bytes"
run tfr-shard --shuffle --seed 8 -o m8.tfr in.tfr
isnt "$(cmp -s m8.tfr m.tfr; echo $?)" 0 "another seed, another order"
run tfr-shard --shuffle --seed 0x10 -o h16.tfr in.tfr
run tfr-shard --shuffle --seed 16 -o d16.tfr in.tfr
same_file h16.tfr d16.tfr "--seed 0x10 = --seed 16"
run tfr-shard --shuffle -o d0.tfr in.tfr
run tfr-shard --shuffle --seed 0 -o s0.tfr in.tfr
same_file d0.tfr s0.tfr "the default seed is 0"
run tfr-shard --shuffle --seed 7 --memory 16k --tmpdir /nonexistent -o bad.tfr in.tfr
is "$rc" 1 "spill into a missing directory: exit 1"
like "$err" "/nonexistent: cannot create a temporary file" "says where"
ok test ! -e bad.tfr "no output"

# Spill files are unlinked at once: none visible while a shuffle runs.
mkfifo fifo
tfr-shard --shuffle --memory 16k --tmpdir tmp -q -o slow.tfr <fifo &
pid=$!
exec 3>fifo
cat in.tfr >&3
sleep 0.5
is "$(ls -A tmp | wc -l)" 0 "no spill file visible while spilling"
exec 3>&-
wait $pid
is "$?" 0 "  and the run completes"

# Shuffle, then shard: shards are the shuffled stream dealt round-robin.
run tfr-shard --shuffle --seed 7 -n 4 -o 'sh-{shard}' in.tfr
is "$($REF ids sh-00000 | head -3 | tr '\n' ' ')" "$(sed -n '1p;5p;9p' m.ids | tr '\n' ' ')" \
	"-n 4 deals the shuffled order"
run tfr-shard --shuffle --seed 7 --by contiguous -n 4 -o 'shc-{shard}' in.tfr
$REF ids shc-* >shc.ids
same_file shc.ids m.ids "contiguous shards of the shuffled order"
run tfr-shard --shuffle --seed 7 --split train=0.9,test=0.1 -n 2 -o 'sp-{split}-{shard}' in.tfr
is "$( (for f in sp-train-*; do $REF check $f; done) | tr '\n' ' ')" "records=1350 records=1350 " \
	"shuffle + split + shards"
cat sp-* >spall
$REF digest spall >spall.digest
same_file spall.digest in.digest "  records preserved"
tfr-shard --shuffle --seed 7 --split train=0.9,test=0.1 --only test --take 1/2 in.tfr >spt 2>/dev/null
same_file spt sp-test-00001 "--take of a shuffled split = the shard"
run tfr-shard --shuffle --seed 7 --by hash:user -n 3 -o 'shh-{shard}' in.tfr
bad=0
for k in 0 1 2; do
	n=$($REF hashshard 3 user shh-0000$k | grep -vc "^$k\$")
	bad=$((bad + n))
done
is "$bad" 0 "shuffle + hash shards: the Python hash decides the shard"
$REF gen gz.tfr 500 --size 50 --comp gzip
run tfr-shard --shuffle --memory 16k --tmpdir tmp -z gzip -o sgz.tfr.gz gz.tfr
$REF digest sgz.tfr.gz >a.digest
$REF digest gz.tfr >b.digest
same_file a.digest b.digest "gzip in, spilled shuffle, gzip out"

# ---- window shuffle
run tfr-shard --shuffle-window 1 -o w1.tfr in.tfr
same_file w1.tfr in.tfr "--shuffle-window 1 keeps the order"
run tfr-shard --shuffle-window 50 --seed 3 -o w50.tfr in.tfr
is "$rc" 0 "--shuffle-window 50: exit 0"
$REF digest w50.tfr >w.digest
same_file w.digest in.digest "--shuffle-window keeps every record"
$REF ids w50.tfr >w50.ids
isnt "$(cmp -s w50.ids in.ids; echo $?)" 0 "--shuffle-window changes the order"
is "$(awk '$1 > NR - 1 + 49 { bad++ } END { print bad + 0 }' w50.ids)" 0 \
	"no record more than 49 places early"
run tfr-shard --shuffle-window 50 --seed 3 -o w50b.tfr in.tfr
same_file w50b.tfr w50.tfr "same seed, same window order"
run tfr-shard --shuffle-window 50 --seed 4 -o w50c.tfr in.tfr
isnt "$(cmp -s w50c.tfr w50.tfr; echo $?)" 0 "another seed, another window order"
run tfr-shard --shuffle-window 5000 --seed 3 -o wbig.tfr in.tfr
$REF digest wbig.tfr >wb.digest
same_file wb.digest in.digest "a window larger than the input"
tfr-shard --shuffle-window 50 --seed 3 -q -o w50s.tfr <in.tfr
same_file w50s.tfr w50.tfr "window from stdin"
run tfr-shard --shuffle-window 50 --seed 3 --by contiguous -n 2 -o 'wc-{shard}' <in.tfr
$REF ids wc-* >wc.ids
same_file wc.ids w50.ids "window + contiguous from stdin (temporary copy)"
run tfr-shard --shuffle --shuffle-window 5 -o x.tfr in.tfr
is "$rc" 2 "--shuffle and --shuffle-window: usage error"

done_testing
