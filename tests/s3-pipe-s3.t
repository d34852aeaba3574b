#!/bin/bash
# s3-pipe against a real S3 server that checks signatures: Ceph's radosgw
# on 127.0.0.1 (tests/rgw, started once for this file), with Debian's aws
# CLI as the independent reference (what one writes, the other reads back
# byte for byte) and tests/s3-faults.py in front of it to drop connections
# mid-body and answer 503 SlowDown.
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/s3lib.sh"
s3_setup dpt dpt-pub

# ---- fixtures -------------------------------------------------------------------------
head -c 1000 /dev/urandom >small.bin
head -c 3000000 /dev/urandom >mid.bin
head -c 22000000 /dev/urandom >big.bin
mkdir -p set/sub
for i in $(seq -w 1 23); do
	printf 'record %s\n' "$i" >"set/k$i"
done
printf 'under sub\n' >set/sub/x
printf 'a dot\n' >set/k.txt
keys=$(cd set && find . -type f | sed 's|^\./||' | LC_ALL=C sort)
for k in $keys; do cat "set/$k"; done >set.expected

# ---- put and get, both ways with aws -------------------------------------------------------
s3-pipe put s3://dpt/small.bin <small.bin
is "$?" 0 "put stdin (one part): 0"
awsr s3 cp s3://dpt/small.bin aws-small >/dev/null 2>&1
same_file aws-small small.bin "aws reads back what s3-pipe put (single PUT)"
s3-pipe get s3://dpt/small.bin >got
same_file got small.bin "get reads it back"

run s3-pipe -vv put --part-size 5M -j 3 s3://dpt/big.bin <big.bin
is "$rc" 0 "put stdin of 22 MB with 5M parts: 0"
is "$(echo "$err" | grep -c 'op=PUT .* part=')" 5 "put: five parts uploaded"
like "$err" "op=POST url=s3://dpt/big.bin status=200" "put: multipart upload created and completed"
awsr s3 cp s3://dpt/big.bin aws-big >/dev/null 2>&1
same_file aws-big big.bin "aws reads back what s3-pipe put (multipart)"
run s3-pipe ls --json s3://dpt/big.bin
like "$out" '"size":22000000' "ls --json: the size"
like "$out" '"etag":"\\"[0-9a-f]{32}-5\\""' "ls --json: a 5-part ETag"

# stdin of exactly one and two part sizes: the end comes as an empty read
head -c 5242880 big.bin >p1.bin
head -c 10485760 big.bin >p2.bin
run s3-pipe -vv put --part-size 5M s3://dpt/p1.bin <p1.bin
unlike "$err" "part=" "exactly one part of stdin: a single PUT"
run s3-pipe -vv put --part-size 5M s3://dpt/p2.bin <p2.bin
is "$(echo "$err" | grep -c 'part=')" 2 "exactly two parts of stdin: two parts"
s3-pipe get s3://dpt/p1.bin >got1
s3-pipe get s3://dpt/p2.bin >got2
ok cmp -s got1 p1.bin "exactly one part: read back"
ok cmp -s got2 p2.bin "exactly two parts: read back"

awsr s3 cp big.bin s3://dpt/aws/big.bin >/dev/null 2>&1
awsr s3 cp mid.bin s3://dpt/aws/mid.bin >/dev/null 2>&1
s3-pipe get s3://dpt/aws/big.bin >got
same_file got big.bin "get reads what aws put (aws multipart, default parts)"
s3-pipe get --part-size 1M -j 8 s3://dpt/aws/big.bin >got
same_file got big.bin "get with 1M parts, 8 at a time"
s3-pipe get -j 1 --part-size 4M s3://dpt/aws/mid.bin >got
same_file got mid.bin "get of a single-part object in several ranged parts (MD5 checked)"
awsr s3 cp - s3://dpt/aws/empty </dev/null >/dev/null 2>&1
run s3-pipe get s3://dpt/aws/empty
is "$rc:$out" "0:" "get of an empty object: nothing, 0"
s3-pipe put s3://dpt/empty2 </dev/null
awsr s3 cp s3://dpt/empty2 aws-empty >/dev/null 2>&1
ok test -f aws-empty -a ! -s aws-empty "put of empty stdin: an empty object"

# ranges
s3-pipe get --range 1000-1999 s3://dpt/aws/mid.bin >got
cmp -s <(dd if=mid.bin bs=1000 skip=1 count=1 2>/dev/null) got
is "$?" 0 "--range A-B of an S3 object"
s3-pipe get --range -10 --part-size 4K s3://dpt/big.bin >got
cmp -s got <(tail -c 10 big.bin)
is "$?" 0 "--range -N"
s3-pipe get --range 21000000- --part-size 300K s3://dpt/big.bin >got
cmp -s got <(tail -c 1000000 big.bin)
is "$?" 0 "--range A- through several parts"

# ---- prefixes, listings, shards, shuffles, manifests ----------------------------------------------
run s3-pipe put s3://dpt/set/ $(for k in $keys; do case $k in */*) ;; *) echo "set/$k" ;; esac; done)
is "$rc" 0 "put of many files under a prefix: 0"
s3-pipe put s3://dpt/set/sub/x <set/sub/x
s3-pipe get s3://dpt/set/ >got
same_file got set.expected "get PREFIX/: every object in key order"
run s3-pipe ls --page-size 7 -r s3://dpt/set/
is "$(echo "$out" | wc -l)" 25 "ls -r with 7-key pages: all 25 keys"
is "$(echo "$out" | awk '{print $NF}' | sed 's|s3://dpt/set/||' | tr '\n' ' ')" \
	"$(echo $keys) " "ls -r: key order"
run s3-pipe ls --page-size 5 s3://dpt/set/
like "$out" "PRE s3://dpt/set/sub/" "ls: the sub-prefix as PRE"
is "$(echo "$out" | wc -l)" 25 "ls: 24 objects and a prefix, over 5-key pages"
run s3-pipe ls s3://dpt/set/k1
is "$(echo "$out" | wc -l)" 10 "ls of a prefix without '/': keys starting with it"
run s3-pipe ls
like "$out" "s3://dpt-pub/" "ls without URL: the buckets"

for i in 0 1 2; do
	s3-pipe get --shard $i/3 s3://dpt/set/ >s3shard$i
	s3-pipe get --shard $i/3 set/ >fileshard$i
	same_file s3shard$i fileshard$i "--shard $i/3: the same keys as on the local copy"
done
is "$(cat s3shard0 s3shard1 s3shard2 | sort | md5sum)" "$(sort set.expected | md5sum)" \
	"the three shards cover the prefix"
OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=3 s3-pipe get --shard '{rank}/{size}' s3://dpt/set/ >r
same_file r s3shard1 "--shard {rank}/{size} from mpirun's environment"
s3-pipe get --shuffle --seed 11 --epoch 4 s3://dpt/set/ >s3shuf
s3-pipe get --shuffle --seed 11 --epoch 4 "file://$T/set/" >fileshuf
same_file s3shuf fileshuf "--shuffle: the same order as on the local copy"
not_ok cmp -s s3shuf set.expected "--shuffle: not the key order"

printf '[{"prefix": "s3://dpt/set/"}, "k05", "sub/x", "k01"]' | s3-pipe put s3://dpt/train.manifest
run s3-pipe get --manifest s3://dpt/train.manifest
is "$out" "$(cat set/k05 set/sub/x set/k01)" "--manifest in S3 naming S3 keys"

# keys that need encoding in paths, queries and listings
oddkeys=($'odd key+plus%25\xc3\xa9' "a/./b" "a/../c" "q?x=1&y#z" "~tilde*star(1)" "semi;colon,comma'quote")
for k in "${oddkeys[@]}"; do
	printf '%s\n' "$k" | s3-pipe put "s3://dpt/odd/$k" || echo "# put failed: $k"
done
expect=$(printf '%s\n' "${oddkeys[@]}" | LC_ALL=C sort)
is "$(s3-pipe ls -r s3://dpt/odd/ | sed 's|.* s3://dpt/odd/||')" "$expect" "odd keys: listed back as written"
is "$(awsr s3 ls --recursive s3://dpt/odd/ 2>/dev/null | sed 's|.* odd/||')" "$expect" "odd keys: aws lists the same keys"
is "$(s3-pipe get s3://dpt/odd/)" "$expect" "odd keys: each object holds its own name"
k=${oddkeys[0]}
is "$(awsr s3 cp "s3://dpt/odd/$k" - 2>/dev/null)" "$k" "odd keys: aws reads what s3-pipe put"

# ---- errors -----------------------------------------------------------------------------------
run s3-pipe get s3://dpt/nokey
is "$rc" 3 "missing key: 3"
is "$err" "s3-pipe: s3://dpt/nokey: NoSuchKey: The specified key does not exist." \
	"missing key: S3's code and message"
run s3-pipe get s3://nobucket/k
is "$rc" 3 "missing bucket: 3"
like "$err" "^s3-pipe: s3://nobucket/k: NoSuchBucket" "missing bucket: code"
run s3-pipe get s3://dpt/set
is "$rc" 3 "a prefix without '/': 3"
like "$err" "s3://dpt/set/ is a prefix: add the trailing '/'" "a prefix without '/': hint"
run s3-pipe get s3://dpt/nothing/
is "$rc" 3 "an empty prefix: 3"
run s3-pipe get s3://dpt/small.bin s3://dpt/nokey -o out
is "$rc" 3 "get -o with a missing key: 3"
ok test ! -e out "get -o: no output on failure"

BAD=wrong/secret/zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz
AWS_SECRET_ACCESS_KEY=$BAD run s3-pipe -vv get s3://dpt/small.bin
is "$rc" 4 "wrong secret: 4"
like "$err" "SignatureDoesNotMatch" "wrong secret: SignatureDoesNotMatch"
unlike "$err" "$BAD|dptest/secret" "wrong secret: no secret in the messages and logs"
AWS_SECRET_ACCESS_KEY=$BAD run s3-pipe -vv put s3://dpt/x <small.bin
unlike "$err" "$BAD|dptest/secret" "put: no secret in the messages and logs"
run s3-pipe -vv --part-size 1M get s3://dpt/big.bin -o /dev/null
unlike "$err" "dptest/secret|Signature=|Credential=" "-vv logs: no secret, signature or credential"
AWS_ACCESS_KEY_ID=$RGW_KEY2 AWS_SECRET_ACCESS_KEY=$RGW_SECRET2 run s3-pipe get s3://dpt/small.bin
is "$rc" 4 "another user's bucket: 4"
like "$err" "^s3-pipe: s3://dpt/small.bin: AccessDenied" "another user's bucket: AccessDenied"
env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY s3-pipe get s3://dpt/small.bin >/dev/null 2>nocred
is "$?" 4 "no credentials: 4"
like "$(cat nocred)" "no credentials: set AWS_ACCESS_KEY_ID" "no credentials: says where to put them"

# ---- the credential chain and the endpoint ---------------------------------------------------------
mkdir -p "$HOME/.aws"
printf '[default]\nregion = us-east-1\n[ci]\naws_access_key_id = %s\naws_secret_access_key = %s\n' \
	"$RGW_KEY" "$RGW_SECRET" >"$HOME/.aws/credentials"
printf '[profile ep]\naws_access_key_id = %s\naws_secret_access_key = %s\ns3 =\n  endpoint_url = %s\n  addressing_style = path\n' \
	"$RGW_KEY" "$RGW_SECRET" "$RGW_URL" >"$HOME/.aws/config"
unset_keys="env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY"
nokeys_run() { # run without the keys in the environment
	local k=$AWS_ACCESS_KEY_ID s=$AWS_SECRET_ACCESS_KEY
	unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
	run "$@"
	export AWS_ACCESS_KEY_ID=$k AWS_SECRET_ACCESS_KEY=$s
}
$unset_keys AWS_PROFILE=ci s3-pipe get s3://dpt/small.bin >got
same_file got small.bin "AWS_PROFILE: keys from ~/.aws/credentials"
$unset_keys s3-pipe --profile ci get s3://dpt/small.bin >got
same_file got small.bin "--profile: keys from ~/.aws/credentials"
AWS_SECRET_ACCESS_KEY=$BAD s3-pipe --profile ci get s3://dpt/small.bin >got
same_file got small.bin "--profile wins over the environment"
$unset_keys env -u AWS_ENDPOINT_URL AWS_PROFILE=ep s3-pipe get s3://dpt/small.bin >got
same_file got small.bin "config file: keys and the s3 endpoint_url of a profile"
AWS_SHARED_CREDENTIALS_FILE=/nonexistent AWS_CONFIG_FILE=/nonexistent AWS_PROFILE=ci \
	nokeys_run s3-pipe get s3://dpt/small.bin
is "$rc" 4 "missing profile: 4"
like "$err" "profile 'ci' not found" "missing profile: named"
env -u AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3=$RGW_URL s3-pipe get s3://dpt/small.bin >got
same_file got small.bin "AWS_ENDPOINT_URL_S3"
env -u AWS_ENDPOINT_URL s3-pipe --endpoint-url "$RGW_URL" get s3://dpt/small.bin >got
same_file got small.bin "--endpoint-url"
s3-pipe --endpoint-url "http://localhost:$RGW_PORT" --addressing-style virtual get s3://dpt/small.bin >got
same_file got small.bin "virtual-hosted addressing (dpt.localhost)"
run s3-pipe --endpoint-url "http://localhost:$RGW_PORT" --addressing-style virtual -vv ls s3://dpt/set/k0
is "$(echo "$out" | wc -l)" 9 "virtual-hosted listing"

awsr s3api put-bucket-acl --bucket dpt-pub --acl public-read >/dev/null 2>&1
awsr s3 cp small.bin s3://dpt-pub/open.bin --acl public-read >/dev/null 2>&1
$unset_keys s3-pipe --no-sign-request get s3://dpt-pub/open.bin >got
same_file got small.bin "--no-sign-request on a public object"
nokeys_run s3-pipe --no-sign-request get s3://dpt/small.bin
is "$rc" 4 "--no-sign-request on a private object: 4"

# ---- presign ------------------------------------------------------------------------------------
url=$(s3-pipe presign --expires 300 s3://dpt/small.bin)
like "$url" "X-Amz-Expires=300&X-Amz-SignedHeaders=host&X-Amz-Signature=[0-9a-f]{64}$" "presign: a SigV4 query"
curl -sf -o got "$url"
same_file got small.bin "presigned GET: radosgw accepts the signature"
curl -sf -o /dev/null "${url%?????}00000"
is "$?" 22 "presigned GET with a damaged signature: refused"
url=$(s3-pipe presign --method PUT s3://dpt/presigned-put)
curl -sf -T mid.bin "$url" >/dev/null
s3-pipe get s3://dpt/presigned-put >got
same_file got mid.bin "presigned PUT: upload with curl, read back"

# ---- fifo: Pipe mode over S3 ---------------------------------------------------------------------
s3-pipe fifo --dir pipes --epochs 2 --shuffle --seed 5 s3://dpt/set/ 2>fifo.err &
pid=$!
for i in $(seq 1 100); do [ -p pipes/train_0 ] && break; sleep 0.1; done
cat pipes/train_0 >e0
for i in $(seq 1 100); do [ -p pipes/train_1 ] && break; sleep 0.1; done
cat pipes/train_1 >e1
wait $pid
is "$?" 0 "fifo over S3: 0"
s3-pipe get --shuffle --seed 5 --epoch 1 s3://dpt/set/ >e1.expected
same_file e1 e1.expected "fifo: epoch 1 in its shuffled order"
not_ok cmp -s e0 e1 "fifo: a new order each epoch"

# ---- reliability: the fault-injecting proxy ---------------------------------------------------------
s3_proxy --drop-get 2 --slowdown 5
run s3-pipe -v --endpoint-url "$PROXY_URL" --part-size 1M -j 4 get s3://dpt/aws/big.bin -o viaproxy
is "$rc" 0 "get through drops and SlowDowns: 0"
same_file viaproxy big.bin "get through drops and SlowDowns: byte-identical"
ok grep -q ' drop$' "$PROXY_LOG" "the proxy dropped connections mid-body"
ok grep -q ' slowdown$' "$PROXY_LOG" "the proxy answered SlowDown"
like "$err" 'retry=1 op=GET .*error="transfer closed with [0-9]+ bytes remaining' "a broken body is retried"
like "$err" 'resume_at=[0-9]*[1-9][0-9]* ' "... from the byte it stopped at"
like "$err" 'error="SlowDown"' "SlowDown is retried"
ok grep -q 'GET /dpt/aws/big.bin .*' "$PROXY_LOG" "(requests went through the proxy)"
s3-pipe --endpoint-url "$PROXY_URL" --part-size 1M get s3://dpt/set/ >got
same_file got set.expected "a prefix through the faults"

s3_proxy --stall-get 2
run s3-pipe -v --timeout 1 --endpoint-url "$PROXY_URL" --part-size 1M -j 2 get s3://dpt/aws/mid.bin -o viastall
is "$rc" 0 "get through stalled transfers (--timeout 1): 0"
same_file viastall mid.bin "stalled transfers: abandoned, resumed, byte-identical"
ok grep -q ' stall$' "$PROXY_LOG" "the proxy stalled a transfer"
like "$err" 'retry=1 op=GET .*error="Operation too slow' "a stalled transfer is retried"

s3_proxy --reset 3 --slowdown 4
run s3-pipe -v --endpoint-url "$PROXY_URL" put --part-size 5M -j 3 s3://dpt/viaproxy.bin <big.bin
is "$rc" 0 "put through dropped connections and SlowDowns: 0"
like "$err" "retry=" "put: retried"
awsr s3 cp s3://dpt/viaproxy.bin aws-via >/dev/null 2>&1
same_file aws-via big.bin "put through faults: aws reads it back identical"

s3_proxy --fail-parts
run s3-pipe --retries 2 --endpoint-url "$PROXY_URL" put --part-size 5M s3://dpt/never.bin <big.bin
is "$rc" 5 "put whose parts always fail: 5 (transfer failed)"
like "$err" "s3://dpt/never.bin: part [0-9]+: InternalError: injected failure \(gave up after 3 attempts\)" \
	"put failure: part, code and attempts named"
s3_proxy_stop
run s3-pipe ls --uploads s3://dpt/
is "$out" "" "the failed upload was aborted: no parts left behind"
is "$(awsr s3api list-multipart-uploads --bucket dpt --output text 2>&1 | grep -c UPLOADS)" 0 \
	"aws sees no multipart upload either"
run s3-pipe get s3://dpt/never.bin
is "$rc" 3 "the failed put left no object"

# interrupted in the middle of a multipart upload
upload_started int.err 12000000 s3://dpt/ put --part-size 5M s3://dpt/interrupted.bin
kill -TERM $pid
wait $pid
st=$?
exec 7>&-
is "$st" 143 "SIGTERM during put: dies of SIGTERM"
is "$(s3-pipe ls --uploads s3://dpt/)" "" "SIGTERM during put: the upload was aborted"

# changed while being read: If-Match makes the next part fail
awsr s3 cp mid.bin s3://dpt/changing >/dev/null 2>&1
mkfifo reader
s3-pipe get -j 1 --part-size 1M s3://dpt/changing -o reader 2>chg.err &
pid=$!
exec 8<reader
head -c 1000 <&8 >/dev/null
awsr s3 cp small.bin s3://dpt/changing >/dev/null 2>&1
cat <&8 >/dev/null
exec 8<&-
wait $pid
is "$?" 1 "object replaced during get: 1"
like "$(cat chg.err)" "s3://dpt/changing: the object changed while being read" "object replaced: said so"

# ---- the man page's examples, against radosgw ---------------------------------------------------------
. "$DP_SRC/tests/man-examples.sh"
mkdir mx && cd mx || exit 1
awsr s3api create-bucket --bucket my-bucket >/dev/null 2>&1
mkdir -p data
for i in 0 1 2; do
	for r in $(seq 1 $((i + 3))); do printf '{"x":{"int64":[%d]}}\n' $r; done |
		tfr-cat --encode json >data/part-$i.tfrecord
done
# the MPI example's Fashion-MNIST-shaped records, in the bucket
. "$DP_SRC/tests/mpi.sh"
$PY "$DP_SRC/tests/mkexamples.py" mnist.tfrecord random --n 64 --shape 784 --classes 10 --seed 1
s3-pipe put s3://my-bucket/mnist/part-0.tfrecord <mnist.tfrecord || exit 1
man_examples "$DP_SRC/man/man1/s3-pipe.1" ex
run_examples -p ex
is "$(cat out.3)" 12 "man example 3: twelve records from the bucket"
is "$(cat out.5 | tr '\n' ' ')" "12 12 " "man example 5: two epochs through FIFOs from the bucket"
is "$(cat out.6)" 8 "man example 6: the manifest's two objects"
cd "$T" || exit 1

# ---- rm -----------------------------------------------------------------------------------------
s3-pipe rm s3://dpt/small.bin
run s3-pipe get s3://dpt/small.bin
is "$rc" 3 "rm: the object is gone"
run s3-pipe rm s3://dpt/set/
is "$rc" 2 "rm of a prefix without -r: 2"
s3-pipe rm -r s3://dpt/set/
is "$(s3-pipe ls -r s3://dpt/set/ 2>/dev/null)" "" "rm -r: the prefix is empty"
awsr s3api create-multipart-upload --bucket dpt --key orphan >/dev/null 2>&1
isnt "$(s3-pipe ls --uploads s3://dpt/)" "" "an orphaned upload (made by aws)"
s3-pipe rm --uploads s3://dpt/
is "$(s3-pipe ls --uploads s3://dpt/)" "" "rm --uploads aborts it"

done_testing
