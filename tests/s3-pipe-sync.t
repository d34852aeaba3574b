#!/bin/bash
# s3-pipe mb, rb and sync against awscli on a real S3 server (radosgw,
# tests/rgw): the same objects after either tool's sync, both ways; the
# same files chosen (their --dryrun lines side by side) after changes, with
# --delete, --exact-timestamps and the filters; --delete never outside the
# prefix; a sync that fails part-way (uploads refused by tests/s3-faults.py)
# leaving no partial object nor upload, and the next one sending exactly
# what is missing.
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/s3lib.sh"
s3_setup

# ---- mb, rb -------------------------------------------------------------------------------
run s3-pipe mb s3://syn
is "$rc:$err" "0:" "mb: exit 0, silent"
ok awsr s3api head-bucket --bucket syn "... aws sees the bucket"
run s3-pipe -v mb s3://syn-two
like "$err" "made bucket s3://syn-two" "mb -v says so"
run s3-pipe mb s3://syn/key
like "$rc:$err" "^2:.*want s3://BUCKET" "mb of a key: usage error"
awsr s3 cp - s3://syn-two/x <<<"x" >/dev/null 2>&1
run s3-pipe rb s3://syn-two
like "$rc:$err" "^1:s3-pipe: s3://syn-two/: BucketNotEmpty" "rb of a bucket with an object: exit 1, S3's code"
awsr s3 rm s3://syn-two/x >/dev/null 2>&1
run s3-pipe rb s3://syn-two
is "$rc" 0 "rb of an empty bucket: exit 0"
awsr s3api head-bucket --bucket syn-two >/dev/null 2>&1
is "$?" 254 "... aws no longer finds it"
run s3-pipe rb s3://syn-none
is "$rc" 3 "rb of a bucket that does not exist: exit 3"

# ---- a tree, synced by both tools ----------------------------------------------------------
mkdir -p tree/a/b tree/c
for i in $(seq -w 1 40); do printf 'file %s\n' "$i" >"tree/f$i"; done
for i in $(seq -w 1 15); do head -c $((10#$i * 100)) /dev/urandom >"tree/a/g$i"; done
for i in $(seq -w 1 5); do printf 'deep %s\n' "$i" >"tree/a/b/h$i.txt"; done
head -c 12000000 /dev/urandom >tree/c/big.bin
printf 'with space\n' >'tree/c/a name'
find tree -type f -exec touch -d '2020-01-02 03:04:05' {} +
awsr s3 cp - s3://syn/spx <<<"a neighbour" >/dev/null 2>&1     # beside the prefix
awsr s3 cp - s3://syn/sp2/keep <<<"another prefix" >/dev/null 2>&1

listing() { # PREFIX: key size etag of everything under it, keys relative
	awsr s3api list-objects-v2 --bucket syn --prefix "$1/" \
		--query 'Contents[].[Key,Size,ETag]' --output text 2>/dev/null | grep -v '^None$' |
		sed "s|^$1/||" | sort
}
# dry PREFIX-TOOL... : both tools' --dryrun lines, prefixes made alike, sorted
dryruns() {
	s3-pipe sync --dryrun "$@" "${SP[@]}" 2>&1 | sed 's|s3://syn/sp/|s3://syn/P/|; s|dl-sp/|dl/|' | LC_ALL=C sort >dry.sp
	awsr s3 sync --dryrun "$@" "${AW[@]}" 2>&1 | sed 's|s3://syn/aw/|s3://syn/P/|; s|dl-aw/|dl/|' | LC_ALL=C sort >dry.aw
}

run s3-pipe sync --part-size 8M tree s3://syn/sp
is "$rc:$err" "0:" "sync of a directory to an S3 prefix: exit 0, silent"
awsr s3 sync tree s3://syn/aw >/dev/null 2>&1
listing sp >l.sp
listing aw >l.aw
is "$(wc -l <l.sp)" 62 "62 objects under the prefix"
same_file l.sp l.aw "the same keys, sizes and ETags as aws s3 sync's (8M parts as aws's)"
awsr s3 cp s3://syn/sp/c/big.bin big.got >/dev/null 2>&1
ok cmp -s big.got tree/c/big.bin "aws reads the multipart object back"
is "$(awsr s3 cp s3://syn/spx - 2>/dev/null)" "a neighbour" "the neighbour s3://syn/spx untouched"

run s3-pipe sync -v tree s3://syn/sp
like "$err" "0 copied, 0 deleted, 62 already the same" "a second sync sends nothing"

# ---- changes: the same files chosen as aws chooses ---------------------------------------------
SP=(tree s3://syn/sp) AW=(tree s3://syn/aw)
later=$(($(date +%s) + 120))
for i in 01 02 03 04 05; do printf 'FILE %s\n' "$i" >"tree/f$i"; touch -d "@$later" "tree/f$i"; done
for i in 06 07 08 09 10; do printf 'longer now %s\n' "$i" >"tree/f$i"; done
touch -d '2020-01-02 03:04:05' tree/f0[6-9] tree/f10   # another size, an older time
touch -d "@$later" tree/a/g01 && touch -d '2019-01-01' tree/a/g02    # the same size, newer / older
printf 'new\n' >tree/a/b/new1 && printf 'new\n' >tree/new2
dryruns
is "$(wc -l <dry.sp)" 13 "--dryrun: 13 uploads (5 newer, 5 resized, 1 touched, 2 new)"
same_file dry.sp dry.aw "... the very files aws s3 sync --dryrun names, in its words"
run s3-pipe sync -j 4 "${SP[@]}"
is "$rc" 0 "sync of the changes: exit 0"
awsr s3 sync "${AW[@]}" >/dev/null 2>&1
listing sp >l.sp && listing aw >l.aw
same_file l.sp l.aw "afterwards the same objects as aws's"

# --delete, with filters, and never outside the prefix
rm tree/f39 tree/f40 tree/a/b/h5.txt
dryruns --delete --exclude 'f40'
is "$(grep -c delete: dry.sp)" 2 "--delete --exclude f40: 2 deletes"
same_file dry.sp dry.aw "... those aws names"
dryruns
is "$(grep -c delete: dry.sp)" 0 "no --delete: no delete"
run s3-pipe sync --delete tree s3://syn/sp
awsr s3 sync --delete tree s3://syn/aw >/dev/null 2>&1
listing sp >l.sp && listing aw >l.aw
same_file l.sp l.aw "--delete: the same objects as aws's"
is "$(awsr s3 cp s3://syn/spx - 2>/dev/null):$(awsr s3 cp s3://syn/sp2/keep - 2>/dev/null)" \
	"a neighbour:another prefix" "--delete left s3://syn/spx and s3://syn/sp2/ alone"
mkdir empty
run s3-pipe sync --delete empty s3://syn/sp2/sub
is "$(awsr s3 cp s3://syn/sp2/keep - 2>/dev/null)" "another prefix" "--delete of sp2/sub leaves sp2/keep"

# ---- downloads ----------------------------------------------------------------------------
SP=(s3://syn/sp dl-sp) AW=(s3://syn/aw dl-aw)
run s3-pipe sync s3://syn/sp dl-sp
is "$rc:$err" "0:" "sync of an S3 prefix to a new directory: exit 0"
awsr s3 sync s3://syn/aw dl-aw >/dev/null 2>&1
ok diff -r dl-sp dl-aw "the same files as aws s3 sync's"
ok diff -r dl-sp tree "... the tree uploaded"
t_obj=$(awsr s3api head-object --bucket syn --key sp/f11 --query LastModified --output text)
is "$(stat -c %Y dl-sp/f11)" "$(date -d "$t_obj" +%s)" "a file downloaded has its object's time"
dryruns
is "$(wc -l <dry.sp)" 0 "synced again: nothing to download"
same_file dry.sp dry.aw "... as aws says"
sleep 1
for i in 11 12 13; do printf 'changed in S3 %s\n' "$i" >x && awsr s3 cp x "s3://syn/sp/f$i" >/dev/null 2>&1 &&
	awsr s3 cp x "s3://syn/aw/f$i" >/dev/null 2>&1; done
touch -d '2001-01-01' dl-sp/f14 dl-aw/f14    # older here, the same size
touch -d "@$later" dl-sp/f15 dl-aw/f15        # newer here, the same size
rm dl-sp/f16 dl-aw/f16
printf 'only here\n' | tee dl-sp/extra >dl-aw/extra
dryruns
is "$(wc -l <dry.sp)" 5 "--dryrun from S3: the 3 resized, the newer here, the missing"
same_file dry.sp dry.aw "... the files aws names"
# --exact-timestamps: not against aws here, which gives a file the time of
# GET's Last-Modified (whole seconds) and compares it with the listing's,
# which radosgw gives in milliseconds (AWS in whole seconds): on radosgw
# aws downloads everything again
dryruns --exact-timestamps --delete
is "$(tr '\n' ';' <dry.sp)" "(dryrun) delete: dl/extra;$(for i in 11 12 13 14 15 16; do
	printf '(dryrun) download: s3://syn/P/f%s to dl/f%s;' $i $i; done)" \
	"--exact-timestamps --delete: the older one too, and the delete"
run s3-pipe sync --delete s3://syn/sp dl-sp
awsr s3 sync --delete s3://syn/aw dl-aw >/dev/null 2>&1
ok diff -r dl-sp dl-aw "downloaded with --delete: the same files as aws's"

run s3-pipe sync s3://syn/sp s3://syn/aw
like "$rc:$err" "^2:.*two S3 prefixes" "two S3 prefixes: usage error"

# two directories (file:// and paths work wherever s3:// does): copied with
# the source's times, compared by size and exact time
mkdir -p loc/d && printf a >loc/x && printf bb >loc/d/y && printf c >loc/d/z
run s3-pipe sync -v loc "file://$PWD/loc2"
is "$rc" 0 "two directories: exit 0"
like "$err" "copied loc/d/y to $PWD/loc2/d/y" "... -v names each copy"
ok diff -r loc loc2 "... the same files"
is "$(stat -c %Y loc/d/y)" "$(stat -c %Y loc2/d/y)" "... with the source's times"
run s3-pipe sync -v loc loc2
like "$err" "0 copied, 0 deleted, 3 already the same" "the next sync copies nothing"
printf q >loc/x && touch -d '2001-02-03 04:05:06' loc/x && printf extra >loc2/extra && rm loc/d/z
run s3-pipe sync --dryrun loc loc2
is "$out" "(dryrun) copy: loc/x to loc2/x" "a file of the same size and an older time is copied; nothing deleted without --delete"
run s3-pipe sync --delete loc loc2
is "$rc:$(cat loc2/x)" "0:q" "... copied"
is "$(cd loc2 && find . -type f | sort | tr '\n' ' ')" "./d/y ./x " "--delete: what the source has not is gone"
run s3-pipe sync tree/f11 s3://syn/sp
like "$rc:$err" "^2:.*not a directory" "a file as the source: usage error"
run s3-pipe sync nothere s3://syn/sp
is "$rc" 3 "a source directory that does not exist: exit 3"

# ---- a sync that fails part-way ---------------------------------------------------------------
mkdir big
for i in 1 2 3; do head -c 6000000 /dev/urandom >"big/large$i"; done
for i in $(seq -w 1 30); do printf 'small %s\n' "$i" >"big/s$i"; done
s3_proxy --fail-parts
run s3-pipe sync --endpoint-url "$PROXY_URL" --retries 1 --part-size 5M -j 2 big s3://syn/fail
s3_proxy_stop
is "$rc" 5 "uploads refused part-way: exit 5 (transfer failed)"
like "$err" "large[123]" "... naming a large file"
run s3-pipe ls --uploads s3://syn/fail/
is "$out" "" "no multipart upload left behind (aborted)"
listing fail >l.fail
is "$(grep -c large l.fail)" 0 "no partial large object"
sent=$(wc -l <l.fail)
run s3-pipe sync -v --part-size 5M big s3://syn/fail
is "$rc" 0 "the next sync: exit 0"
is "$(grep -c '^s3-pipe: uploaded' <<<"$err")" $((33 - sent)) "... sends exactly the $((33 - sent)) files still missing"
listing fail >l.fail
is "$(wc -l <l.fail)" 33 "... and all 33 are there"

# ---- interrupted part-way (SIGTERM: a script's background job ignores SIGINT) -------------------
mkdir slow
head -c 12000000 /dev/urandom >slow/big
printf 'small\n' >slow/a
s3_proxy --delay 1.5     # every request held 1.5 s: the parts are in flight a while
s3-pipe sync --endpoint-url "$PROXY_URL" --part-size 5M slow s3://syn/slow 2>int.err &
pid=$!
for i in $(seq 1 300); do grep -q '^POST .*uploads' "$PROXY_LOG" 2>/dev/null && break; sleep 0.1; done
sleep 0.5
kill -TERM $pid
wait $pid
is "$?" 143 "a sync interrupted by SIGTERM while its parts are in flight dies of it (143)"
s3_proxy_stop
run s3-pipe ls --uploads s3://syn/slow/
is "$out" "" "... its multipart upload aborted, none left"
listing slow >l.slow
is "$(grep -c big l.slow)" 0 "... no partial object"
run s3-pipe sync -v --part-size 5M slow s3://syn/slow
like "$err" "uploaded slow/big to s3://syn/slow/big" "the next sync sends it"
awsr s3 cp s3://syn/slow/big big.back >/dev/null 2>&1
ok cmp -s big.back slow/big "... whole"

# ---- a training job's TensorBoard directory, synced after each epoch ----------------------------
$PY "$DP_SRC/tests/mkexamples.py" small.tfr random --n 64 --shape 16 --classes 4 --seed 1 || exit 1
run dp-train --train small.tfr --val small.tfr --model dense:4 --input-shape 16 --epochs 3 -q \
	--tensorboard tb --on-epoch 's3-pipe sync -v {tensorboard} s3://syn/runs/7/tb 2>>sync.log' --on-epoch-fail
is "$rc" 0 "dp-train --on-epoch 's3-pipe sync {tensorboard} s3://...': exit 0"
is "$(grep -c '^s3-pipe: uploaded tb/events.out.tfevents' sync.log)" 3 "... each epoch sent the event file, which grew"
is "$(grep -c '0 copied' sync.log)" 0 "... never nothing"
awsr s3 sync s3://syn/runs/7/tb tb.back >/dev/null 2>&1
ok diff -r tb tb.back "... and S3 holds the directory's bytes after the last epoch"
done_testing
