#!/bin/bash
# tfr-shard --max-records / --max-bytes: with -n they cap each shard (a
# prefix of what the shard would get; the rest dropped and counted; reading
# stops early); without -n they choose the number of shards (consecutive
# records, each shard as full as the limits allow).
. "${DP_SRC:-.}/tests/lib.sh"
REF="$PY $DP_SRC/tests/tfrshard.py"
cd "$T" || exit 1

$REF gen in.tfr 1000 --size 100
$REF ids in.tfr >in.ids
tfr-shard -q -n 4 -o 'full-{shard}' in.tfr

# ---- caps (-n)
run tfr-shard -n 4 --max-records 100 -o 'cap-{shard}' in.tfr
is "$rc" 0 "-n 4 --max-records 100: exit 0"
is "$(for f in cap-*; do $REF check $f; done | tr '\n' ' ')" \
	"records=100 records=100 records=100 records=100 " "every shard capped at 100"
$REF ids cap-00002 >c2.ids
$REF ids full-00002 | head -100 >f2.ids
same_file c2.ids f2.ids "a capped shard is a prefix of the uncapped one"
like "$err" "total outputs=4 records=400 bytes=[0-9]+ read=40[0-9] corrupt=0 dropped=[0-9]" \
	"reading stops once every shard is full"
for i in $(seq 200); do cat in.tfr; done >big.tfr
run tfr-shard -n 2 --max-records 10 -o 'early-{shard}' big.tfr
like "$err" "read=2[0-9] " "a 200000-record input: only about 20 records read"
run tfr-shard -n 4 --max-records 300 -o 'cap3-{shard}' in.tfr
like "$err" "total outputs=4 records=1000 bytes=[0-9]+ read=1000 corrupt=0 dropped=0" \
	"a cap above the shard sizes drops nothing"

limit=5000
run tfr-shard -n 3 --max-bytes $limit -o 'capb-{shard}' in.tfr
is "$rc" 0 "--max-bytes with -n: exit 0"
okb=1
for f in capb-*; do [ "$(stat -c %s "$f")" -le $limit ] || okb=0; done
is "$okb" 1 "every shard at most $limit bytes"
tfr-shard -q -n 3 -o 'fullb-{shard}' in.tfr
n=$($REF check capb-00001 | sed 's/records=//')
$REF ids fullb-00001 | head -$n >fb.ids
$REF ids capb-00001 >cb.ids
same_file cb.ids fb.ids "a byte-capped shard is a prefix"
next=$($PY -c "
import sys; sys.path.insert(0, '$DP_SRC/tests'); import tfrshard as t
print(len(t.frame(t.records('fullb-00001')[$n])))")
is "$(( $(stat -c %s capb-00001) + next > limit ))" 1 "  and the next record would not have fitted"
like "$err" "dropped=[1-9]" "dropped records counted"
run tfr-shard --split a=0.5,b=0.5 -n 2 --max-records 50 -o 'capsp-{split}-{shard}' in.tfr
is "$(for f in capsp-*; do $REF check $f; done | sort -u)" "records=50" "caps apply per split shard"
tfr-shard --take 1/4 --max-records 100 in.tfr >tk 2>/dev/null
same_file tk cap-00001 "caps with --take"
tfr-shard --by contiguous --take 0/4 --max-records 7 in.tfr >tc 2>/dev/null
is "$($REF ids tc | tr '\n' ' ')" "0 1 2 3 4 5 6 " "caps with contiguous"
run tfr-shard --by hash:user -n 3 --max-records 20 -o 'caph-{shard}' in.tfr
is "$(for f in caph-*; do $REF check $f; done | sort -u)" "records=20" "caps with hash shards"
run tfr-shard -n 2 --max-bytes 3000 -o 'capu-{shard}' in.tfr
run tfr-shard -z gzip -n 2 --max-bytes 3000 -o 'capz-{shard}' in.tfr
is "$($REF check capz-00000)" "$($REF check capu-00000)" "--max-bytes counts bytes before compression"

# ---- size mode (no -n): as many shards as the limits need
run tfr-shard --max-records 300 -o 'r-{shard}-of-{nshards}' in.tfr
is "$rc" 0 "--max-records without -n: exit 0"
is "$(ls r-* | tr '\n' ' ')" "r-00000-of-00004 r-00001-of-00004 r-00002-of-00004 r-00003-of-00004 " \
	"four shards, {nshards} filled in at the end"
is "$(for f in r-*; do $REF check $f; done | tr '\n' ' ')" \
	"records=300 records=300 records=300 records=100 " "300, 300, 300 and the rest"
$REF ids r-* >r.ids
same_file r.ids in.ids "consecutive records, in order"
run tfr-shard --max-records 1000 -o 'one-{shard}-of-{nshards}' in.tfr
is "$(ls one-*)" "one-00000-of-00001" "exactly the limit: one shard"

run tfr-shard --max-bytes 20k -o 'b-{shard}-of-{nshards}' in.tfr
is "$rc" 0 "--max-bytes without -n: exit 0"
$REF ids b-* >b.ids
same_file b.ids in.ids "byte shards hold the input in order"
good=1
files=(b-*)
for ((i = 0; i < ${#files[@]}; i++)); do
	size=$(stat -c %s "${files[$i]}")
	[ "$size" -le 20480 ] || good=0
	if [ $((i + 1)) -lt ${#files[@]} ]; then
		nextlen=$($PY -c "
import sys; sys.path.insert(0, '$DP_SRC/tests'); import tfrshard as t
print(len(t.frame(t.records('${files[$((i + 1))]}')[0])))")
		[ $((size + nextlen)) -gt 20480 ] || good=0
	fi
done
is "$good" 1 "each shard at most 20k, and as full as it can be"
run tfr-shard --max-bytes 20k --max-records 50 -o 'both-{shard}-of-{nshards}' in.tfr
is "$(ls both-* | wc -l)" 20 "both limits: the tighter one wins (50 records of ~190 bytes)"
run tfr-shard --split a=0.5,b=0.5 --max-records 200 -o 'rs-{split}-{shard}-of-{nshards}' in.tfr
is "$(ls rs-a-* | tr '\n' ' ')" "rs-a-00000-of-00003 rs-a-00001-of-00003 rs-a-00002-of-00003 " \
	"size mode per split"
run tfr-shard --shuffle --seed 1 --max-records 400 -o 'rsh-{shard}-of-{nshards}' in.tfr
$REF ids rsh-* >rsh.ids
tfr-shard --shuffle --seed 1 -q -o rsh-all in.tfr
$REF ids rsh-all >rsh-all.ids
same_file rsh.ids rsh-all.ids "size mode after a shuffle"
run tfr-shard --max-bytes 100 -o 'huge-{shard}' in.tfr
is "$rc" 1 "a record larger than --max-bytes: exit 1"
like "$err" "^tfr-shard: in.tfr: record 0 at byte 0: [0-9]+ bytes framed, more than --max-bytes 100: no shard can hold it$" \
	"says so, naming the file, the record and its offset"
$REF gen small.tfr 3 --size 10
$REF gen big.tfr 1 --size 1000 --seed 2
cat small.tfr big.tfr small.tfr >mixed.tfr
at=$(stat -c %s small.tfr)
run tfr-shard --max-bytes 500 -o 'huge2-{shard}' small.tfr mixed.tfr
is "$err" "tfr-shard: mixed.tfr: record 3 at byte $at: $(( $(stat -c %s big.tfr) )) bytes framed, more than --max-bytes 500: no shard can hold it" \
	"a later record, in a later file: that file, its record number and offset"
ok test ! -e huge2-00000 "  no output"
ok test ! -e huge-00000 "  no output"
is "$(ls -A | grep -c '\.tmp\.')" 0 "  no temporary files"
run tfr-shard --max-records 10 --by round-robin -o 'x-{shard}' in.tfr
is "$rc" 2 "size mode with --by round-robin: usage error"
run tfr-shard --max-records 10 -o 'x' in.tfr
is "$rc" 2 "size mode without {shard}: usage error"
run tfr-shard --max-records 10 in.tfr
is "$rc" 2 "size mode to stdout: usage error"
run tfr-shard --max-records 10 -o '{nshards}/x-{shard}' in.tfr
is "$rc" 2 "size mode with {nshards} in the directory: usage error"

done_testing
