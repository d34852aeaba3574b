#!/bin/bash
# s3-pipe against radosgw (tests/rgw): nothing removed, overwritten or waited
# on that the user did not name (issue 13).  rm -r of a "directory" and its
# neighbours, --dryrun, {rank} braces in keys, put of two files with one
# base name, FIFOs that vanish when their writer fails, closed standard
# streams, the bounded abort after SIGTERM, and the answers that must not be
# lost (long keys, empty listings, partial credentials, odd listings).
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/s3lib.sh"
s3_setup safe

keys_of() { s3-pipe ls -r "$1" | sed 's|.* s3://|s3://|' | tr '\n' ' '; }

# ---- rm -r: the "directory", never its neighbours -------------------------------------
for k in rmt/a/x rmt/a/sub/y rmt/ab/y rmt/a rmt/abc; do
	printf '%s\n' "$k" | s3-pipe put "s3://safe/$k"
done
run s3-pipe rm -r --dryrun s3://safe/rmt/a
is "$rc" 0 "rm -r --dryrun: 0"
is "$out" "(dryrun) delete: s3://safe/rmt/a/sub/y
(dryrun) delete: s3://safe/rmt/a/x" "rm -r --dryrun: prints what would go, as aws does"
is "$(keys_of s3://safe/rmt/)" "s3://safe/rmt/a s3://safe/rmt/a/sub/y s3://safe/rmt/a/x s3://safe/rmt/ab/y s3://safe/rmt/abc " \
	"rm -r --dryrun: removes nothing"
is "$(awsr s3 rm --recursive --dryrun s3://safe/rmt/a 2>/dev/null | sed 's/^(dryrun) delete: //' | sort | tr '\n' ' ')" \
	"s3://safe/rmt/a/sub/y s3://safe/rmt/a/x " "aws rm --recursive of the same URL: the same keys"
run s3-pipe rm -r s3://safe/rmt/a
is "$rc" 0 "rm -r of a prefix without '/': 0"
is "$(keys_of s3://safe/rmt/)" "s3://safe/rmt/a s3://safe/rmt/ab/y s3://safe/rmt/abc " \
	"rm -r s3://b/rmt/a: rmt/a/... only; rmt/a, rmt/ab/y, rmt/abc kept"
run s3-pipe rm -r s3://safe/rmt/a
is "$rc" 3 "rm -r of a \"directory\" with nothing under it: 3"
like "$err" "s3://safe/rmt/a/: no objects under this prefix" "... says so"
is "$(keys_of s3://safe/rmt/)" "s3://safe/rmt/a s3://safe/rmt/ab/y s3://safe/rmt/abc " \
	"... and the object rmt/a is still there"

# a folder marker (a zero-byte key ending in '/', as the console makes)
awsr s3api put-object --bucket safe --key fold/ >/dev/null 2>&1
printf 'z\n' | s3-pipe put s3://safe/fold/z
run s3-pipe rm s3://safe/fold/
is "$rc" 0 "rm of a folder marker's name (as ls -r prints it): 0"
is "$(keys_of s3://safe/fold/)" "s3://safe/fold/z " "... that one key went, not what is under it"
run s3-pipe rm s3://safe/fold/
is "$rc" 2 "rm of a prefix without a marker and without -r: 2"

# --uploads: the uploads of the key named, or under it; not of its neighbours
for k in up/a up/a/part up/ab; do
	awsr s3api create-multipart-upload --bucket safe --key "$k" >/dev/null 2>&1
done
run s3-pipe rm --uploads s3://safe/up/a
is "$rc" 0 "rm --uploads of a key: 0"
is "$(s3-pipe ls --uploads s3://safe/up/ | awk '{print $NF}')" "s3://safe/up/ab" \
	"rm --uploads s3://b/up/a: up/a's and up/a/part's aborted, up/ab's kept"
s3-pipe rm --uploads s3://safe/up/

# ---- put --dryrun, and two files for one key ------------------------------------------
mkdir d1 d2
printf 'one\n' >d1/same
printf 'two\n' >d2/same
printf 'other\n' >d2/other
run s3-pipe put s3://safe/dup/ d2/other d1/same d2/same
is "$rc" 2 "put of two files with one base name under a prefix: 2"
like "$err" "put: d1/same and d2/same would both be s3://safe/dup/same" "... names both"
is "$(s3-pipe ls -r s3://safe/dup/ 2>/dev/null)" "" "... and uploads none of them"
run s3-pipe put --dryrun s3://safe/dry/ d1/same d2/other
is "$out" "(dryrun) upload: d1/same to s3://safe/dry/same
(dryrun) upload: d2/other to s3://safe/dry/other" "put --dryrun: what would be uploaded"
run s3-pipe put --dryrun s3://safe/dry/stdin </dev/zero
is "$rc:$out" "0:(dryrun) upload: - to s3://safe/dry/stdin" "put --dryrun of stdin: reads nothing"
is "$(s3-pipe ls -r s3://safe/dry/ 2>/dev/null)" "" "put --dryrun: uploads nothing"

# ---- braces: literal in URLs, filled only with --expand, never by rm ----------------------
printf 'literal\n' | s3-pipe put 's3://safe/brace/{rank}.txt'
printf 'zero\n' | s3-pipe put 's3://safe/brace/0.txt'
printf 'one\n' | s3-pipe put 's3://safe/brace/1.txt'
is "$(keys_of s3://safe/brace/)" "s3://safe/brace/0.txt s3://safe/brace/1.txt s3://safe/brace/{rank}.txt " \
	"put: a key with braces is stored under its name"
run s3-pipe get 's3://safe/brace/{rank}.txt'
is "$out" "literal" "get: braces in a URL are literal"
OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 run s3-pipe get --expand 's3://safe/brace/{rank}.txt'
is "$out" "one" "get --expand: {rank} filled in"
OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 run s3-pipe get --expand 's3://safe/brace/{{rank}}.txt'
is "$out" "literal" "get --expand: {{ and }} are literal braces"
run s3-pipe get 's3://safe/brace/{size}.txt'
is "$rc" 3 "a missing key with braces: 3"
like "$err" "NoSuchKey.*braces in URLs are literal: --expand" "... with a hint about --expand"
run s3-pipe rm --expand 's3://safe/brace/{rank}.txt'
is "$rc" 2 "rm --expand: a usage error (rm acts only on names as spelled)"
OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 run s3-pipe rm 's3://safe/brace/{rank}.txt'
is "$rc" 0 "rm of a key with braces: 0"
is "$(keys_of s3://safe/brace/)" "s3://safe/brace/0.txt s3://safe/brace/1.txt " \
	"rm 's3://b/brace/{rank}.txt': that key, not brace/0.txt"

# every name ls -r prints is usable as an argument
printf 'x\n' | s3-pipe put 's3://safe/names/{a}{{b}}'
printf 'y\n' | s3-pipe put 's3://safe/names/c d%20e'
awsr s3api put-object --bucket safe --key names/m/ >/dev/null 2>&1
n=0
while read -r url; do
	s3-pipe get "$url" >/dev/null 2>&1 || s3-pipe ls "$url" >/dev/null 2>&1 || { echo "# not usable: $url"; n=$((n + 1)); }
done < <(s3-pipe ls -r s3://safe/names/ | sed 's|^.* s3://|s3://|')
is "$n" 0 "every URL ls -r prints names its object for get or ls"
s3-pipe ls -r s3://safe/names/ | sed 's|^.* s3://|s3://|' | while read -r url; do s3-pipe rm "$url"; done
is "$(s3-pipe ls -r s3://safe/names/ 2>/dev/null)" "" "... and for rm: each printed name removed its object"

# ---- nothing left waiting: FIFOs, closed standard streams, SIGTERM ---------------------------
run s3-pipe fifo --dir pipes s3://nobucket/train/
is "$rc" 3 "fifo of a missing bucket: 3"
ok test ! -e pipes/train_0 "... and no FIFO for a reader to wait on forever"
printf 'rec\n' | s3-pipe put s3://safe/f/one
s3-pipe fifo --dir pipes --epochs 2 s3://safe/f/ &
pid=$!
until [ -p pipes/train_0 ] || ! kill -0 $pid 2>/dev/null; do sleep 0.1; done
is "$(cat pipes/train_0)" "rec" "fifo over S3: epoch 0"
kill -TERM $pid
wait $pid
is "$?" 143 "fifo: SIGTERM between epochs kills it"
ok test ! -e pipes/train_1 "... and no FIFO is left behind"

run timeout 20 s3-pipe put s3://safe/closed <&-
is "$rc" 1 "put with stdin closed: fails at once (it waited forever on its own socket)"
is "$err" "s3-pipe: stdin: Bad file descriptor" "... as cat says it"
is "$(s3-pipe ls s3://safe/closed 2>/dev/null)" "" "... and writes no object"
timeout 20 s3-pipe ls s3://safe/ >&- 2>closed.err
is "$?:$(cat closed.err)" "1:s3-pipe: stdout: Bad file descriptor" "ls with stdout closed: an error, not a listing lost"
timeout 20 s3-pipe get s3://safe/f/one >&- 2>closed.err
is "$?:$(cat closed.err)" "1:s3-pipe: stdout: Bad file descriptor" "get with stdout closed: an error"

# SIGTERM in a multipart upload whose server has gone: the abort gets a few
# seconds, then the message names the upload left behind
head -c 12000000 /dev/urandom >big.bin
s3_proxy
upload_started orphan.err 11000000 s3://safe/orphan.bin \
	--endpoint-url "$PROXY_URL" put --part-size 5M s3://safe/orphan.bin
s3_proxy_stop # the server is gone (connections refused)
kill -TERM $pid
( sleep 30; kill -KILL $pid 2>/dev/null ) &
guard=$!
wait $pid
st=$?
kill $guard 2>/dev/null
exec 7>&-
is "$st" 143 "SIGTERM, server unreachable: dies of SIGTERM within its grace (not after a minute of retries)"
# (why the abort failed depends on where the signal found it: refused
# connections, or the grace spent on them)
like "$(cat orphan.err)" "orphan.bin: interrupted; and aborting upload [^ ]+ failed \(.+\): run s3-pipe rm --uploads s3://safe/orphan.bin" \
	"... naming the upload left behind and how to remove it"
s3-pipe rm --uploads s3://safe/orphan.bin
is "$(s3-pipe ls --uploads s3://safe/)" "" "the orphan removed by the command the message gives"

# SIGTERM while the server holds the parts: said as at any other moment
# (a part that the signal stopped in flight said "part 2: interrupted")
rm -f slow
s3_proxy --delay 2
upload_started held.err 11000000 s3://safe/held.bin \
	--endpoint-url "$PROXY_URL" put --part-size 5M s3://safe/held.bin
sleep 0.5 # parts 1 and 2 are sent once the upload exists, and held
kill -TERM $pid
wait $pid
st=$?
exec 7>&-
s3_proxy_stop
is "$st:$(cat held.err)" "143:s3-pipe: s3://safe/held.bin: interrupted" \
	"SIGTERM with parts in flight: dies of it, saying interrupted"
is "$(s3-pipe ls --uploads s3://safe/)" "" "... and the upload aborted within its grace"

# --timeout S: a transfer that moves nothing for S seconds is abandoned then
echo mid | s3-pipe put s3://safe/stall
s3_proxy --stall-get 1
run timeout 15 s3-pipe --endpoint-url "$PROXY_URL" --timeout 2 --retries 0 get --range 0-1 s3://safe/stall
is "$rc" 5 "a stalled transfer, --timeout 2 --retries 0: 5"
like "$err" "s3://safe/stall: Operation too slow: nothing moved for 2 s \(gave up after 1 attempts\)" \
	"... saying for how long"
s3_proxy_stop

# ---- answers kept whole -------------------------------------------------------------------
run s3-pipe ls s3://safe/no-such-key
is "$rc" 3 "ls of a missing key: 3"
is "$err" "s3-pipe: s3://safe/no-such-key: no such key or prefix" "... says so"
run s3-pipe ls -r s3://safe/empty-prefix/
is "$rc" 3 "ls of an empty prefix: 3"
awsr s3api create-bucket --bucket safe-empty >/dev/null 2>&1
run s3-pipe ls s3://safe-empty/
is "$rc:$out" "0:" "ls of an empty bucket's root: 0, nothing"

long=$(printf 'k%.0s' $(seq 1 1017))
run s3-pipe get "s3://safe/long/$long"
is "$rc" 3 "get of a missing 1,024-byte key: 3"
like "$err" "s3://safe/long/kkk.*\.\.\.kkk+: NoSuchKey: The specified key does not exist\.$" \
	"... the message keeps S3's code (the name gives way in its middle)"
toolong=$(printf 'k%.0s' $(seq 1 1100))
printf 'x\n' >x.txt
run s3-pipe put "s3://safe/long/$toolong" <x.txt
is "$rc" 2 "put to a key past S3's 1,024 bytes: 2 (a bad name)"
like "$err" ": (InvalidObjectName|KeyTooLongError): " "... with the server's code"

# a listing whose <Size> is not a byte count (tests/s3-faults.py rewrites it)
s3_proxy --list-size -5
run s3-pipe --endpoint-url "$PROXY_URL" ls -r s3://safe/f/
is "$rc" 1 "a listing with <Size>-5</Size>: 1"
is "$err" "s3-pipe: s3://safe/f/one: the listing gives its <Size> as '-5', not a byte count" \
	"... an error naming the key, not a wrapped huge size"
run s3-pipe --endpoint-url "$PROXY_URL" get s3://safe/f/
is "$rc" 1 "get of that prefix: 1 as well"
s3_proxy --list-size 18446744073709551611
run s3-pipe --endpoint-url "$PROXY_URL" ls -r s3://safe/f/
like "$err" "s3://safe/f/one: the listing gives its <Size> as '18446744073709551611'" "a size past 2^63: refused too"
s3_proxy_stop

# a server that repeats its continuation token (botocore: "the same next
# token was received twice"), or lists its keys again: an error, not an
# endless listing (ls, get, rm -r, fifo all list)
s3_proxy --list-loop token
for c in "ls -r" "get -o loopget" "rm -r --dryrun"; do
	run timeout 30 s3-pipe --endpoint-url "$PROXY_URL" $c s3://safe/f/
	is "$rc" 1 "a repeated continuation token, $c: 1 (not endless)"
	like "$err" "s3://safe/f/: the listing gave the continuation token of page 2 again at page 3: the server repeats itself" \
		"... saying so"
done
rm -rf loopget
s3_proxy_stop
s3_proxy --list-loop keys
run timeout 30 s3-pipe --endpoint-url "$PROXY_URL" ls -r s3://safe/f/
is "$rc" 1 "a listing that starts over: 1"
like "$err" "the listing went back \(a page began at a key already listed\)" "... saying so"
s3_proxy_stop
# the same for the upload listing (ls --uploads, rm --uploads): its key and
# upload-id markers must go forward
s3_proxy --uploads-loop
for c in "ls --uploads" "rm --uploads"; do
	run timeout 30 s3-pipe --endpoint-url "$PROXY_URL" $c s3://safe/f/
	is "$rc" 1 "upload markers that do not go forward, $c: 1 (not endless)"
	like "$err" "s3://safe/f/: the upload listing went back \(its next marker is not past the last\)" \
		"... saying so"
done
s3_proxy_stop
# a url-encoded %00 in a listed key would cut it short: refused
s3_proxy --list-nul
run timeout 30 s3-pipe --endpoint-url "$PROXY_URL" ls -r s3://safe/f/
is "$rc" 1 "a listed key holding %00: 1"
like "$err" "the listing has a key '%00" "... naming it as listed"
s3_proxy_stop

# --range at or past the end is an error, for an empty object too
s3-pipe put s3://safe/range/empty </dev/null
printf '0123456789' | s3-pipe put s3://safe/range/ten
run s3-pipe get --range 10- s3://safe/range/ten
is "$rc" 2 "--range 10- of a 10-byte object: 2"
run s3-pipe get --range 0-0 s3://safe/range/empty
is "$rc" 2 "--range 0-0 of an empty object: 2 as well"
like "$err" "s3://safe/range/empty: range starts at byte 0 of a 0-byte object" "... said the same way"
run s3-pipe get --range -3 s3://safe/range/empty
is "$rc:$out" "0:" "--range -3 of an empty object: its last 0 bytes"

# zero-byte keys ending in '/' are folder markers, skipped by get; a key
# ending in '/' that holds bytes is data
awsr s3api put-object --bucket safe --key zb/ >/dev/null 2>&1
printf 'in a slash key\n' >slash.txt
awsr s3api put-object --bucket safe --key zb/nz/ --body slash.txt >/dev/null 2>&1
printf 'file\n' | s3-pipe put s3://safe/zb/x
run s3-pipe get s3://safe/zb/
is "$out" "in a slash key
file" "get of a prefix: the marker skipped, a non-empty key ending in '/' kept"

# ---- credentials and endpoints as aws reads them ----------------------------------------------
mkdir -p "$HOME/.aws"
printf '[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n[upper]\nAWS_ACCESS_KEY_ID : %s\nAws_Secret_Access_Key:%s\n' \
	"$RGW_KEY2" "$RGW_SECRET2" "$RGW_KEY" "$RGW_SECRET" >"$HOME/.aws/credentials"
printf 'in safe\n' | s3-pipe put s3://safe/cred.txt
ok env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY "$AWS" --endpoint-url "$RGW_URL" --profile upper s3 cp s3://safe/cred.txt cred.aws \
	"aws reads a profile with upper-case names and 'key : value' lines"
env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY s3-pipe --profile upper get s3://safe/cred.txt >cred.got 2>cred.err
is "$?:$(cat cred.got)" "0:in safe" "s3-pipe reads it too"
env -u AWS_SECRET_ACCESS_KEY "$AWS" --endpoint-url "$RGW_URL" s3 ls s3://safe/ >/dev/null 2>aws.err
isnt "$?" 0 "aws refuses AWS_ACCESS_KEY_ID without its secret (partial credentials)"
env -u AWS_SECRET_ACCESS_KEY s3-pipe get s3://safe/cred.txt >/dev/null 2>partial.err
is "$?" 4 "s3-pipe refuses it too: 4 (it signed with [default]'s other user)"
is "$(cat partial.err)" "s3-pipe: partial credentials in the environment: AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not" \
	"... saying which half is missing"
env -u AWS_ACCESS_KEY_ID s3-pipe get s3://safe/cred.txt >/dev/null 2>partial.err
like "$?:$(cat partial.err)" "^4:.*AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not" "the other half alone: refused"
rm -f "$HOME/.aws/credentials"

# China's regions are another partition: amazonaws.com.cn
host_of() { sed 's|^https://\([^/]*\)/.*|\1|'; }
aws_host=$(env -u AWS_ENDPOINT_URL "$AWS" s3 presign s3://safe/k --region cn-north-1 2>/dev/null | host_of)
is "$aws_host" "safe.s3.cn-north-1.amazonaws.com.cn" "aws presigns cn-north-1 on amazonaws.com.cn"
is "$(env -u AWS_ENDPOINT_URL s3-pipe presign --region cn-north-1 s3://safe/k | host_of)" "$aws_host" \
	"s3-pipe presigns the same host"

done_testing
