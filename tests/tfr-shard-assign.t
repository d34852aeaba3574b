#!/bin/bash
# tfr-shard: where records go.  Contiguous shards (files: counting pass;
# stdin: temporary copy), hash shards and hash splits against the Python
# reference implementation of the key hash (tests/tfrshard.py, written from
# the definition in dp_hash.h), seeded splits (exact proportions,
# determinism), --only, --take and {rank}/{size}.
. "${DP_SRC:-.}/tests/lib.sh"
REF="$PY $DP_SRC/tests/tfrshard.py"
cd "$T" || exit 1

$REF gen in.tfr 1001 --size 40 --users 37
$REF digest in.tfr >in.digest
gzip -c in.tfr >in.gz

# ---- contiguous
run tfr-shard --by contiguous -n 4 -o 'c-{shard}' in.tfr
is "$rc" 0 "contiguous: exit 0"
is "$(for f in c-*; do $REF check $f; done | tr '\n' ' ')" \
	"records=251 records=250 records=250 records=250 " "contiguous: the first n % N shards one longer"
is "$($REF ids c-00000 | head -1) $($REF ids c-00000 | tail -1) $($REF ids c-00001 | head -1) $($REF ids c-00003 | tail -1)" \
	"0 250 251 1000" "contiguous: consecutive runs"
$REF ids c-* >c.ids
$REF ids in.tfr >in.ids
same_file c.ids in.ids "contiguous: shards concatenated = the input, in order"
run tfr-shard --by contiguous -n 4 -o 's-{shard}' <in.tfr
is "$rc" 0 "contiguous from stdin: exit 0"
for k in 0 3; do same_file s-0000$k c-0000$k "contiguous from stdin: shard $k as from the file"; done
run tfr-shard --by contiguous -n 4 -o 'g-{shard}' in.gz
same_file g-00002 c-00002 "contiguous from a gzip file (counted twice)"
cat in.gz | tfr-shard --by contiguous -n 4 -q -o 'gs-{shard}'
same_file gs-00002 c-00002 "contiguous from a gzip stream"
run tfr-shard --by contiguous -n 4 --tmpdir /nonexistent -o 'bad-{shard}' <in.tfr
is "$rc" 1 "contiguous from stdin, no temporary directory: exit 1"
like "$err" "/nonexistent: cannot create a temporary file" "says so"
$REF gen small.tfr 3
run tfr-shard --by contiguous -n 5 -o 'small-{shard}' small.tfr
is "$(for f in small-*; do $REF check $f; done | tr '\n' ' ')" \
	"records=1 records=1 records=1 records=0 records=0 " "more shards than records: empty shards exist"
run tfr-shard --by contiguous -n 5 -o 'ssmall-{shard}' <small.tfr
same_file ssmall-00004 small-00004 "and from stdin"

# ---- hash shards: the Python reference decides where each record belongs
for feat in user id x; do
	run tfr-shard --by hash:$feat -n 5 -o "h$feat-{shard}" in.tfr
	is "$rc" 0 "--by hash:$feat: exit 0"
	bad=0
	for k in 0 1 2 3 4; do
		n=$($REF hashshard 5 $feat h$feat-0000$k | grep -vc "^$k\$")
		[ "$n" = 0 ] || bad=$((bad + n))
	done
	is "$bad" 0 "--by hash:$feat: every record in the shard the Python hash gives"
	$REF digest h$feat-* >h.digest
	same_file h.digest in.digest "--by hash:$feat: records preserved"
done
is "$(for k in 0 1 2 3 4; do $REF field user huser-0000$k | sort -u; done | sort | uniq -d)" "" \
	"each user in exactly one shard"
is "$($REF h64 alice)" "c5d1556d66774a5c" "the Python hash of 'alice' (also checked against libdp in tests/unit/shard.c)"
run tfr-shard --by hash:user -n 5 -o 'h2-{shard}' <in.tfr
same_file h2-00003 huser-00003 "hash shards are the same on another run, from stdin"
run tfr-shard --by hash:nosuch -n 2 -o 'hn-{shard}' in.tfr
is "$rc" 1 "missing key feature: exit 1"
like "$err" "in.tfr: record 0 at byte 0: no feature \"nosuch\"" "names file, record, offset, feature"
ok test ! -e hn-00000 "no output"

# ---- splits by seed: exact proportions, deterministic, partitioning
$REF gen k.tfr 2000 --size 8
run tfr-shard --split train=0.8,val=0.1,test=0.1 -o '{split}.tfr' k.tfr
is "$rc" 0 "--split: exit 0"
is "$($REF check train.tfr) $($REF check val.tfr) $($REF check test.tfr)" \
	"records=1600 records=200 records=200" "2000 records: exactly 1600/200/200"
like "$err" "split=train shards=1 records=1600 bytes=[0-9]+ dropped=0" "per-split summary"
cat train.tfr val.tfr test.tfr >all3
$REF digest all3 >all3.digest
$REF digest k.tfr >k.digest
same_file all3.digest k.digest "the splits partition the input"
is "$($REF ids train.tfr | head -20 | tr '\n' ' ')" "$($REF ids train.tfr | head -20 | sort -n | tr '\n' ' ')" \
	"each split keeps the input order"
run tfr-shard --split train=8,val=1,test=1 -o 'w-{split}.tfr' k.tfr
same_file w-val.tfr val.tfr "weights 8,1,1 = ratios 0.8,0.1,0.1"
run tfr-shard --split train=0.8,val=0.1,test=0.1 -o 'again-{split}.tfr' k.tfr
same_file again-test.tfr test.tfr "the same seed gives the same split"
run tfr-shard --seed 99 --split train=0.8,val=0.1,test=0.1 -o 'seed99-{split}.tfr' k.tfr
isnt "$(cmp -s seed99-test.tfr test.tfr; echo $?)" 0 "another seed, another split"
is "$($REF check seed99-test.tfr)" "records=200" "  with the same proportions"
run tfr-shard --split train=0.8,val=0.1,test=0.1 -n 3 -o 'd/{split}-{shard}-of-{nshards}' k.tfr
is "$(ls d | tr '\n' ' ')" "test-00000-of-00003 test-00001-of-00003 test-00002-of-00003 train-00000-of-00003 train-00001-of-00003 train-00002-of-00003 val-00000-of-00003 val-00001-of-00003 val-00002-of-00003 " \
	"each split sharded"
is "$(for f in d/val-*; do $REF check $f; done | tr '\n' ' ')" "records=67 records=67 records=66 " \
	"split shards balanced"
cat d/val-* >valcat
$REF digest valcat >v1
$REF digest val.tfr >v2
same_file v1 v2 "sharding does not change a split's records"

# --split-by hash: every user in one split, as the Python hash says
run tfr-shard --split train=0.7,test=0.3 --split-by hash:user -o 'hs-{split}' in.tfr
is "$rc" 0 "--split-by hash:user: exit 0"
is "$($REF hashsplit train=0.7,test=0.3 user hs-train | sort -u)" "train" "train records: Python says train"
is "$($REF hashsplit train=0.7,test=0.3 user hs-test | sort -u)" "test" "test records: Python says test"
is "$( ($REF field user hs-train | sort -u; $REF field user hs-test | sort -u) | sort | uniq -d)" "" \
	"no user in both splits"
run tfr-shard --seed 5 --split train=0.7,test=0.3 --split-by hash:user -o 'hs5-{split}' in.tfr
same_file hs5-test hs-test "hash splits do not depend on the seed"

# --only
run tfr-shard --split train=0.8,val=0.1,test=0.1 --only val -o 'only-{split}.tfr' k.tfr
is "$(ls only-*)" "only-val.tfr" "--only writes one split"
same_file only-val.tfr val.tfr "--only does not change the split's records"
like "$err" "total outputs=1 records=200 " "summary counts the written split"
run tfr-shard --split train=0.8,val=0.2 --only val -o only2.tfr k.tfr
is "$rc" 0 "--only: no {split} needed"

# split usage errors
for bad in "--split train" "--split a=1,a=2" "--split a=0,b=1" "--split a=1 --split-by hash:" \
	"--split-by seed" "--only x" "--split a=1,b=1 --only c"; do
	run tfr-shard $bad -o '{split}-x' k.tfr
	is "$rc" 2 "'$bad': usage error"
done
run tfr-shard --split a=1,b=1 -o 'nosplit' k.tfr
is "$rc" 2 "two splits without {split}: usage error"
run tfr-shard -o '{split}' k.tfr
is "$rc" 2 "{split} without --split: usage error"

# ---- --take: the same shard -n N makes
for by in round-robin contiguous hash:user; do
	run tfr-shard --by $by -n 4 -o "t-{shard}" in.tfr
	for i in 0 3; do
		tfr-shard --by $by --take $i/4 in.tfr >take$i 2>take.err
		same_file take$i t-0000$i "--by $by --take $i/4 = shard $i of -n 4"
	done
done
tfr-shard --by contiguous --take 1/4 <in.tfr >take-stdin 2>/dev/null
same_file take-stdin c-00001 "--take from stdin, contiguous"
tfr-shard --split train=0.8,val=0.1,test=0.1 -n 3 -q -o 'tk-{split}-{shard}' k.tfr
tfr-shard --split train=0.8,val=0.1,test=0.1 --only val --take 2/3 k.tfr >tv 2>/dev/null
same_file tv tk-val-00002 "--take with --split and --only"
run tfr-shard --split train=0.8,val=0.1,test=0.1 --take 2/3 -o 'tko-{split}' k.tfr
same_file tko-test tk-test-00002 "--take with -o and {split}"
run tfr-shard --take 1/4 -o 'tn-{shard}-of-{nshards}' in.tfr
is "$(ls tn-*)" "tn-00001-of-00004" "--take with -o: one file, named as shard I of N"
tfr-shard -q -n 4 -o 't-{shard}' in.tfr
tfr-shard --take '{rank}/{size}' --rank 2 --size 4 in.tfr >r2 2>/dev/null
same_file r2 t-00002 "--take {rank}/{size} with --rank/--size"
for env in "OMPI_COMM_WORLD_RANK=3 OMPI_COMM_WORLD_SIZE=4" "PMI_RANK=3 PMI_SIZE=4" \
	"SLURM_PROCID=3 SLURM_NTASKS=4"; do
	env $env tfr-shard --take '{rank}/{size}' in.tfr >renv 2>/dev/null
	same_file renv t-00003 "--take {rank}/{size} from $env"
done
env OMPI_COMM_WORLD_RANK=3 OMPI_COMM_WORLD_SIZE=4 tfr-shard --rank 0 --take '{rank}/{size}' in.tfr >rover 2>/dev/null
same_file rover t-00000 "--rank wins over the environment"
env OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 tfr-shard -q -n 2 -o 'rank{rank}of{size}-{shard}' in.tfr
ok test -e rank1of2-00000 "{rank} and {size} in -o"
tfr-shard --take 0/1 in.tfr >all1 2>/dev/null
same_file all1 in.tfr "--take 0/1 is everything"
for bad in "4/4" "x/4" "1" "1/0" "-1/4"; do
	run tfr-shard --take "$bad" in.tfr
	is "$rc" 2 "--take $bad: usage error"
done
run tfr-shard -n 3 --take 1/4 in.tfr
is "$rc" 2 "--take N and -n disagree: usage error"
# the one I/N parser (dp_parse_part, as s3-pipe --shard): its wording and range
run tfr-shard --take 4/4 in.tfr
is "$(echo "$err" | head -1)" \
	"tfr-shard: --take '4/4': want I/N, part I from 0 to N-1 of N from 1 to 1073741824 (e.g. 3/8 or {rank}/{size})" \
	"--take 4/4: the I/N parser's message"
run tfr-shard --take '{rank}/{size}' --rank 5 --size 4 in.tfr
like "$err" "^tfr-shard: --take '\{rank\}/\{size\}' \(5/4\): want I/N" "--take: the filled-in value is shown"
run tfr-shard --take 0/1073741825 in.tfr
is "$rc" 2 "--take: N past 2^30 is a usage error"
tfr-shard --take 0x1/0x4 in.tfr >hex 2>/dev/null
same_file hex t-00001 "--take: hex I/N, as every count"

done_testing
