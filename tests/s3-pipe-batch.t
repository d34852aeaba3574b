#!/bin/bash
# s3-pipe against radosgw (tests/rgw): what an aws CLI user reaches for
# (issue 13).  Folder markers on request; rm -r in DeleteObjects requests of 1,000 keys with the keys
# S3 refuses reported, put of a directory and of many files at once,
# --include/--exclude with aws's rule (checked against aws itself), get -r,
# and a bucket found in another region (tests/s3-faults.py plays S3's 301
# and 400 answers).
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/s3lib.sh"
s3_setup batch near

keys_of() { s3-pipe ls -r "$1" 2>/dev/null | sed "s|.* $1||" | tr '\n' ' '; }

# ---- put of a directory, and of many files at once ----------------------------------------
mkdir -p tree/a/b tree/c
for f in x.txt a/y.txt a/b/z.tfrecord c/w.tfrecord c/skip.tmp; do printf '%s\n' "$f" >"tree/$f"; done
run s3-pipe put s3://batch/tree/ tree
is "$rc" 0 "put of a directory under a prefix: 0"
is "$(keys_of s3://batch/tree/)" "a/b/z.tfrecord a/y.txt c/skip.tmp c/w.tfrecord x.txt " \
	"its files, every level, keys relative to it"
run s3-pipe put s3://batch/tree2 tree/
is "$(keys_of s3://batch/tree2/)" "a/b/z.tfrecord a/y.txt c/skip.tmp c/w.tfrecord x.txt " \
	"put URL DIR (URL without '/'): the same, under URL/"
is "$(s3-pipe get s3://batch/tree2/a/y.txt)" "a/y.txt" "... each object holds its file"
is "$(awsr s3 cp --recursive --dryrun tree s3://batch/tree/ 2>/dev/null | sed 's|.* to s3://batch/tree/||' | sort | tr '\n' ' ')" \
	"$(keys_of s3://batch/tree/)" "aws cp --recursive names them the same"
mkdir -p other/c
printf 'clash\n' >other/c/w.tfrecord
run s3-pipe put s3://batch/clash/ tree other
is "$rc" 2 "two directories with one relative path: 2"
like "$err" "tree/c/w.tfrecord and other/c/w.tfrecord would both be s3://batch/clash/c/w.tfrecord|other/c/w.tfrecord and tree/c/w.tfrecord would both" \
	"... naming both files"

# folder markers, when asked: an empty object KEY/ for the prefix and each directory
run s3-pipe put s3://batch/mk/
is "$rc" 2 "put of stdin to a prefix: 2"
like "$err" "--dir-markers" "... the message names --dir-markers"
run s3-pipe put --dir-markers s3://batch/mk/
is "$rc:$out" "0:" "put --dir-markers PREFIX/: 0"
is "$(awsr s3api head-object --bucket batch --key mk/ --query ContentLength 2>/dev/null)" 0 \
	"... aws sees the empty object mk/"
cp -r tree mtree && mkdir -p mtree/empty/deeper
run s3-pipe put --dir-markers --dryrun s3://batch/mt/ mtree
is "$(grep -c '^(dryrun) make folder: ' <<<"$out")" 6 "--dryrun: the 6 folders it would make"
is "$(s3-pipe ls -r s3://batch/mt/ 2>/dev/null | wc -l)" 0 "... and makes nothing"
run s3-pipe put --dir-markers s3://batch/mt/ mtree
is "$rc" 0 "put --dir-markers of a directory: 0"
is "$(s3-pipe ls -r --json s3://batch/mt/ | sed -n 's/.*"key":"mt\/\([^"]*\/\)","url".*"size":0.*/\1/p' | tr '\n' ' ')" \
	"a/ a/b/ c/ empty/ empty/deeper/ " "... a marker for every directory, empty ones too"
is "$(s3-pipe ls s3://batch/mt | sed 's/.* //')" "s3://batch/mt/" "... and for the prefix"
is "$(s3-pipe get s3://batch/mt/ | sort | tr '\n' ' ')" "a/b/z.tfrecord a/y.txt c/skip.tmp c/w.tfrecord x.txt " \
	"get of the prefix skips the markers"
run s3-pipe put --dir-markers --exclude '*' --include '*.txt' s3://batch/mf/ mtree
is "$(s3-pipe ls -r s3://batch/mf/ | sed 's|.* s3://batch/||' | tr '\n' ' ')" "mf/ mf/a/ mf/a/y.txt mf/x.txt " \
	"with filters: markers for the directories of the files kept"

# several files in flight: the proxy holds each request 0.3 s and counts
mkdir many
for i in $(seq -w 1 16); do printf '%s\n' "$i" >"many/f$i"; done
s3_proxy --delay 0.3
run s3-pipe --endpoint-url "$PROXY_URL" -j 8 put s3://batch/many/ many/f*
is "$rc" 0 "put of 16 files: 0"
most=$(sed -n 's/^inflight //p' "$PROXY_LOG" | sort -n | tail -n 1)
ok test "${most:-0}" -ge 2 "put of many files: several uploads at once (at most $most in flight)"
s3_proxy_stop
is "$(keys_of s3://batch/many/ | wc -w)" 16 "... all 16 stored"
is "$(s3-pipe get s3://batch/many/ | tr '\n' ' ')" "$(cat many/f* | tr '\n' ' ')" "... each whole"

# ---- --include / --exclude: aws's rule, the last filter that matches wins ---------------------
filters=(--exclude '*' --include '*.tfrecord' --exclude 'c/*')
run s3-pipe ls -r "${filters[@]}" s3://batch/tree/
is "$(echo "$out" | sed 's|.* s3://batch/tree/||' | tr '\n' ' ')" "a/b/z.tfrecord " "ls -r with filters"
is "$(awsr s3 rm --recursive --dryrun "${filters[@]}" s3://batch/tree/ 2>/dev/null | sed 's|.*s3://batch/tree/||' | sort | tr '\n' ' ')" \
	"a/b/z.tfrecord " "aws keeps the same keys with the same filters"
run s3-pipe get -r --include '*.tmp' --exclude '*' --include 'x*' s3://batch/tree/
is "$rc:$out" "0:x.txt" "get -r (accepted) with filters: the last match decides"
run s3-pipe put --dryrun --exclude '*.tmp' s3://batch/f/ tree
is "$(echo "$out" | sed 's/^(dryrun) upload: //' | sort | tr '\n' ' ')" \
	"tree/a/b/z.tfrecord to s3://batch/f/a/b/z.tfrecord tree/a/y.txt to s3://batch/f/a/y.txt tree/c/w.tfrecord to s3://batch/f/c/w.tfrecord tree/x.txt to s3://batch/f/x.txt " \
	"put --exclude: the directory's files but *.tmp"
is "$(awsr s3 cp --recursive --dryrun --exclude '*.tmp' tree s3://batch/f/ 2>/dev/null | sed 's|^(dryrun) upload: ||' | sort | tr '\n' ' ')" \
	"$(echo "$out" | sed 's/^(dryrun) upload: //' | sort | tr '\n' ' ')" "aws cp uploads the same files"
run s3-pipe rm -r --exclude '*.txt' s3://batch/tree2
is "$(keys_of s3://batch/tree2/)" "a/y.txt x.txt " "rm -r --exclude '*.txt': the rest removed"
run s3-pipe get --manifest --exclude x m.json
is "$rc" 2 "filters with --manifest: 2"

# ---- rm -r: DeleteObjects, 1,000 keys a request ---------------------------------------------
mkdir lots
( cd lots && for i in $(seq -w 1 2345); do : >"k$i"; done )
run s3-pipe put s3://batch/lots/ lots
is "$rc" 0 "2,345 files put"
is "$(s3-pipe ls -r s3://batch/lots/ | wc -l)" 2345 "... 2,345 objects"
run s3-pipe -vv rm -r s3://batch/lots
is "$rc" 0 "rm -r of 2,345 objects: 0"
is "$(echo "$err" | grep -c 'op=POST url=s3://batch/ status=200')" 3 "... in three DeleteObjects requests"
is "$(echo "$err" | grep -c 'op=DELETE')" 0 "... and no DELETE of one key"
is "$(echo "$err" | grep -c '^s3-pipe: removed ')" 2345 "-v says each key removed"
is "$(s3-pipe ls -r s3://batch/lots/ 2>/dev/null | wc -l)" 0 "... all gone"

# keys with XML's special characters, and one XML cannot carry
for k in 'sp/a&b<c>' "sp/q'uo\"te" $'sp/new\nline' $'sp/cr\rx' $'sp/ctl\x01x' 'sp/é'; do
	printf 'x\n' | s3-pipe put "s3://batch/$k"
done
run s3-pipe ls -r s3://batch/sp/
is "$rc:$(wc -l <<<"$out")" "0:6" "ls: one line per key, a newline or CR in a key included"
is "$(grep -c " \$'s3://batch/sp/new\\\\nline'\$" <<<"$out")" 1 \
	"... a name with a control character in the shell's \$'...' form"
is "$(grep -c " \$'s3://batch/sp/ctl\\\\x01x'\$" <<<"$out")" 1 "... \\xHH for one with no letter escape"
is "$(grep -c " s3://batch/sp/q'uo\"te\$" <<<"$out")" 1 "... other names as they are"
n=0
while read -r _ _ _ u; do
	case $u in "\$'"*) eval "u=$u" ;; esac
	[ "$(s3-pipe get "$u")" = x ] && n=$((n + 1))
done <<<"$out"
is "$n" 6 "... and each printed name (\$'...' read as the shell reads it) gets its object"
run s3-pipe rm --dryrun -r s3://batch/sp/
is "$(grep -c "^(dryrun) delete: \$'s3://batch/sp/cr\\\\rx'\$" <<<"$out")" 1 "rm --dryrun prints names the same way"
run s3-pipe -vv rm -r s3://batch/sp/
is "$rc" 0 "rm -r of keys with & < > quotes, newline, CR, a control character: 0"
is "$(echo "$err" | grep -c 'op=DELETE url=s3://batch/sp/ctl')" 1 "... the control character's key by a DELETE of its own"
is "$(s3-pipe ls -r --json s3://batch/sp/ 2>/dev/null | wc -l)" 0 "... all gone"

# keys S3 refuses, reported one by one (tests/s3-faults.py adds the refusals)
mkdir rf
for i in 1 2 3; do printf '%s\n' $i >"rf/ok$i"; printf '%s\n' $i >"rf/no$i"; done
s3-pipe put s3://batch/rf/ rf
s3_proxy --refuse-delete no
run s3-pipe --endpoint-url "$PROXY_URL" rm -r s3://batch/rf/
s3_proxy_stop
is "$rc" 4 "rm -r with keys refused (AccessDenied): 4"
is "$err" "s3-pipe: s3://batch/rf/no1: AccessDenied: Access Denied (and 2 more not deleted)" \
	"... the first refusal named, and how many more"

# ---- a bucket in another region ---------------------------------------------------------------
printf 'far\n' | s3-pipe put s3://batch/far/x
for how in 301 400; do
	if [ $how = 400 ]; then s3_proxy --bucket-region eu-test-9 --region-400; else s3_proxy --bucket-region eu-test-9; fi
	run s3-pipe -v --endpoint-url "$PROXY_URL" --region us-east-1 get s3://batch/far/x
	is "$rc:$out" "0:far" "get from a bucket of another region ($how): followed"
	like "$err" "status=$how region=eu-test-9: the bucket's region" "... and -v says so"
	run s3-pipe --endpoint-url "$PROXY_URL" --region us-east-1 ls -r s3://batch/far/
	like "$rc:$out" "^0:.* s3://batch/far/x$" "ls as well ($how)"
	printf 'put\n' >put.txt
	run s3-pipe --endpoint-url "$PROXY_URL" --region us-east-1 put s3://batch/far/y put.txt
	is "$rc" 0 "put as well ($how)"
	s3_proxy_stop
done
is "$(s3-pipe get s3://batch/far/y)" "put" "the object put through the redirect"

# Two buckets in two regions in one command: each request goes to its own
# bucket's region, learnt once; the other bucket keeps the configured one.
printf 'near\n' | s3-pipe put s3://near/n
s3_proxy --bucket-region batch=eu-test-9
run s3-pipe -v --endpoint-url "$PROXY_URL" --region us-east-1 get s3://batch/far/x s3://near/n \
	s3://batch/far/x s3://near/n s3://batch/far/y
is "$rc:$(tr '\n' ' ' <<<"$out")" "0:far near far near put " \
	"get across two buckets of two regions, alternating"
unlike "$err" "retry=" "... a redirect is no failure: nothing retried"
is "$(grep -c ' /near/.* region ' "$PROXY_LOG")" 0 "... the near bucket never sent elsewhere"
like "$(grep ' region ' "$PROXY_LOG")" '/batch/far/' "... the far one was"
run s3-pipe --endpoint-url "$PROXY_URL" --region us-east-1 ls s3://near/n s3://batch/far/x s3://near/n
is "$rc:$(grep -c ' /near/.* region ' "$PROXY_LOG")" 0:0 "ls across them as well"
s3_proxy_stop

done_testing
