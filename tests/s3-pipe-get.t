#!/bin/bash
# s3-pipe get's transfers against radosgw (tests/rgw): long requests that
# stream through the window and pause for a slow reader, ranged parts when
# connections are slow (tests/s3-faults.py --rate), many small objects in
# flight written in key order through dropped connections and SlowDowns,
# and the MD5 check catching a flipped bit however the digests are batched.
# DP_S3_GET_MODE forces the stream or the parts mode where a check needs one.
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/s3lib.sh"
s3_setup get

# ---- fixtures ----------------------------------------------------------------------------
head -c 22000000 /dev/urandom >big.bin
# one PUT: a single-part object, its ETag the MD5 of its 22 MB
s3-pipe put --part-size 32M s3://get/single.bin <big.bin
like "$(s3-pipe ls --json s3://get/single.bin)" '"etag":"\\"[0-9a-f]{32}\\""' "single.bin: an MD5 ETag"
s3-pipe put --part-size 5M s3://get/multi.bin <big.bin
# many objects: sizes from 0 to 40 KB, every tenth 1.5 MB (two parts of 1M)
mkdir many
$PY - <<'EOF'
import os, random
r = random.Random(7)
for i in range(300):
    n = 1500000 if i % 10 == 3 else 0 if i % 37 == 0 else r.randrange(1, 40000)
    with open("many/k%03d" % i, "wb") as f:
        f.write(os.urandom(n))
EOF
for f in many/k*; do cat "$f"; done >many.expected
s3-pipe put s3://get/many/ many/k*
is "$?" 0 "300 objects stored"

# ---- the two modes, forced -------------------------------------------------------------------
# 22 MB in parts of 1M: 21 parts; with -j 4 a stream request covers 4 of them
DP_S3_GET_MODE=stream run s3-pipe -vv get --part-size 1M -j 4 s3://get/single.bin -o got
is "$rc" 0 "stream mode: 0"
same_file got big.bin "stream mode: the bytes"
is "$(echo "$err" | grep -c 'op=GET .*range=')" 6 "stream mode: one request per 4 parts (6)"
like "$err" "range=20971520-21999999 status=206" "stream mode: the last request from its run's start"
DP_S3_GET_MODE=parts run s3-pipe -vv get --part-size 1M -j 4 s3://get/single.bin -o got
same_file got big.bin "parts mode: the bytes"
is "$(echo "$err" | grep -c 'op=GET .*range=')" 21 "parts mode: one ranged GET per part (21)"
# part ends inside curl's chunks: the bytes past the window wait, then go on
DP_S3_GET_MODE=stream s3-pipe get --part-size 1000000 -j 3 s3://get/multi.bin >got
same_file got big.bin "stream mode, parts that end inside received chunks"
DP_S3_GET_MODE=stream s3-pipe get --part-size 1M -j 1 s3://get/multi.bin >got
same_file got big.bin "stream mode with -j 1 (one part at a time)"
DP_S3_GET_MODE=stream s3-pipe get --range 1000-5000000 --part-size 300K -j 3 s3://get/single.bin >got
cmp -s got <(tail -c +1001 big.bin | head -c 4999001)
is "$?" 0 "stream mode: --range A-B across runs"

# ---- chosen by the first request's rate ---------------------------------------------------------
run s3-pipe -vv get --part-size 1M -j 4 s3://get/single.bin -o got
same_file got big.bin "automatic mode: the bytes"
like "$err" "mode=(stream|parts) connection_mbps=[0-9]+" "automatic mode: chosen and logged"
# a store whose connections carry 4 MB/s each: ranged parts, several at once
s3_proxy --rate 4000000
run s3-pipe -vv --endpoint-url "$PROXY_URL" get --part-size 1M -j 6 s3://get/single.bin -o got
is "$rc" 0 "slow connections: 0"
same_file got big.bin "slow connections: the bytes"
like "$err" "mode=parts connection_mbps=[0-9]+" "slow connections: parts mode"
# The first request (6 parts) is cut at the end of the part it is receiving
# when the rate is known, a part's worth in: how many parts it holds by then
# depends on how often s3-pipe ran (on a loaded machine, all 6).  Whatever it
# got ends on a part boundary, and every part after it is a GET of its own.
printf '%s\n' "$err" > slow-conn.err
ok $PY - slow-conn.err <<'EOF' "slow connections: the first request ends on a part; a ranged GET per part after it"
import re, sys
err = open(sys.argv[1]).read()
P = 1048576
first = re.findall(r"op=GET \S+ range=0-6291455 status=206 bytes=(\d+) ms=\d+(?: cut=(\d+))?$", err, re.M)
assert len(first) == 1, first
got, cut = int(first[0][0]), first[0][1]
assert got % P == 0 and 1 <= got // P <= 6 and (not cut or int(cut) == got), first
rest = set()
for a, b in re.findall(r"op=GET \S+ range=(\d+)-(\d+) status=206", err):
    a, b = int(a), int(b)
    if a == 0:
        continue
    assert a % P == 0 and b < a + P, (a, b)  # one part each
    rest.add(a // P)
assert rest == set(range(got // P, 21)), (got // P, sorted(rest))
EOF
s3_proxy_stop

# long requests broken half-way: each goes on from its first missing byte
s3_proxy --drop-get 2
DP_S3_GET_MODE=stream run s3-pipe -v --endpoint-url "$PROXY_URL" get --part-size 1000000 -j 3 \
	s3://get/single.bin -o got
is "$rc" 0 "stream mode through dropped connections: 0"
same_file got big.bin "stream mode through dropped connections: byte-identical"
like "$err" 'retry=1 op=GET .*resume_at=[0-9]*[1-9][0-9]* ' "stream mode: resumed where the body broke"
s3_proxy_stop

# ---- a slow reader: transfers pause, nothing times out --------------------------------------------
# Paused for 2.5 times --timeout: were paused time counted, every transfer
# would time out.  A retry can also come from a real stall of --timeout
# seconds (no byte at all from a server that is not paused): the timeout
# is long enough for a loaded machine not to see one.
DP_S3_GET_MODE=stream s3-pipe -v get --timeout 8 --part-size 1000000 -j 2 s3://get/single.bin \
	2>slow.err | { sleep 20; cat; } >got
same_file got big.bin "a reader that waits 20 s: the bytes"
is "$(grep -c 'retry=' slow.err)" 0 "a reader that waits 20 s: no paused transfer timed out (--timeout 8)"

# ---- many small objects in flight ----------------------------------------------------------------
s3-pipe get --part-size 1M s3://get/many/ >got
same_file got many.expected "300 objects, 8 in flight: key order"
s3-pipe get --part-size 1M -j 32 s3://get/many/ >got
same_file got many.expected "300 objects, 32 in flight: key order"
for impl in scalar avx2; do
	DP_MD5=$impl s3-pipe get --part-size 1M s3://get/many/ >got
	same_file got many.expected "300 objects with DP_MD5=$impl: key order, checks pass"
done
# Objects each larger than the last: every part needs a new buffer, and
# more buffers than the window has slots (8 with -j 2) come back to the
# pool; it keeps 8 (it overflowed once: a crash at exit, 1 run in 7).
mkdir grow
$PY -c '
import os
for i in range(1, 21):
    open("grow/g%02d" % i, "wb").write(os.urandom(i * 65536))'
cat grow/g* >grow.expected
s3-pipe put s3://get/grow/ grow/g*
run s3-pipe -j 2 --part-size 8M get s3://get/grow/ -o got
is "$rc" 0 "20 objects of growing sizes, -j 2: 0"
same_file got grow.expected "20 objects of growing sizes, -j 2: the bytes"
s3_proxy --drop-get 7 --slowdown 11
run s3-pipe -v --endpoint-url "$PROXY_URL" get --part-size 1M s3://get/many/ -o got
is "$rc" 0 "300 objects through drops and SlowDowns: 0"
same_file got many.expected "300 objects through drops and SlowDowns: byte-identical, key order"
ok grep -q ' drop$' "$PROXY_LOG" "(connections were dropped)"
like "$err" 'resume_at=[0-9]*[1-9][0-9]* ' "a broken body resumed from where it stopped"
s3_proxy_stop

# ---- the MD5 check -------------------------------------------------------------------------------
s3_proxy --corrupt-get 40
rm -f got
run s3-pipe --endpoint-url "$PROXY_URL" get --part-size 1M s3://get/many/ -o got
is "$rc" 1 "a flipped bit in one of 300 objects: 1"
like "$err" "^s3-pipe: s3://get/many/k[0-9]{3}: MD5 of the bytes read does not match the ETag \"[0-9a-f]{32}\"$" \
	"... named, with its ETag"
ok test ! -e got "... and -o left no file"
ok grep -q ' corrupt$' "$PROXY_LOG" "(the proxy flipped a bit)"
s3_proxy --corrupt-get 40
run s3-pipe --endpoint-url "$PROXY_URL" get --no-verify --part-size 1M s3://get/many/ -o got
is "$rc" 0 "--no-verify: the flipped bit goes through"
not_ok cmp -s got many.expected "--no-verify: (the bytes differ)"
s3_proxy --corrupt-get 5
DP_S3_GET_MODE=parts run s3-pipe --endpoint-url "$PROXY_URL" get --part-size 1M s3://get/single.bin -o got
is "$rc" 1 "a flipped bit in a part of a 22 MB single-part object: 1"
like "$err" "s3://get/single.bin: MD5 of the bytes read does not match" "... named"
s3_proxy_stop

done_testing
