#!/bin/bash
# tfr-shard's outputs as a set (issue 12): every destination checked before
# the work, all shards landed or none (old shards kept, never mixed with new
# ones), the directories a failed run made removed, an output that is its
# own input refused, names from a template whose every placeholder is known
# (widths honoured), and an input in which not one record was found.
. "${DP_SRC:-.}/tests/lib.sh"
REF="$PY $DP_SRC/tests/tfrshard.py"
cd "$T" || exit 1

$REF gen in.tfr 8 --size 20

# ---- a directory where a shard should land (fixed mode): named, before the
# work, and no shard is written or replaced
mkdir -p out/s-00002.tfr
for k in 0 1 3; do echo old >out/s-0000$k.tfr; done
run tfr-shard -n 4 -o 'out/s-{shard}.tfr' in.tfr
is "$rc" 1 "a directory at shard 2: exit 1"
is "$err" "tfr-shard: out/s-00002.tfr: is a directory" "  names it"
is "$(cat out/s-00000.tfr out/s-00001.tfr out/s-00003.tfr | tr '\n' ' ')" "old old old " \
	"  the old shards are all kept"
is "$(ls -A out | tr '\n' ' ')" "s-00000.tfr s-00001.tfr s-00002.tfr s-00003.tfr " "  nothing else there"

# ---- the same where the name is known only at the end ({nshards} without
# -n): all shards or none.  Before, shards 0 and 1 replaced the old ones and
# shard 2 failed: old and new shards mixed.
rm -rf out
mkdir -p out/s-00002-of-00004.tfr
echo old >out/s-00000-of-00004.tfr
echo old >out/s-00001-of-00004.tfr
run tfr-shard --max-records 2 -o 'out/s-{shard}-of-{nshards}.tfr' in.tfr
is "$rc" 1 "a directory at the last name of shard 2: exit 1"
is "$err" "tfr-shard: out/s-00002-of-00004.tfr: is a directory" "  names it"
is "$(cat out/s-00000-of-00004.tfr out/s-00001-of-00004.tfr | tr '\n' ' ')" "old old " \
	"  no shard landed: the old ones are kept"
is "$(ls -A out | grep -c '\.tmp\.')" 0 "  no temporary files"
rmdir out/s-00002-of-00004.tfr
run tfr-shard -q --max-records 2 -o 'out/s-{shard}-of-{nshards}.tfr' in.tfr
is "$rc/$(ls out | wc -l)" "0/4" "  once out of the way: four shards"
is "$(cat out/s-0000[0-3]-of-00004.tfr | $REF check /dev/stdin)" "records=8" "  all new"

# ---- two names, one file: a symbolic link from one shard's name to another's
# made the later rename replace the earlier shard (records lost, exit 0)
mkdir ln && echo old >ln/s-00000
ln -s s-00000 ln/s-00001
run tfr-shard -n 2 -o 'ln/s-{shard}' in.tfr
is "$rc" 1 "a link from shard 1's name to shard 0's: exit 1"
is "$err" "tfr-shard: ln/s-00000 and ln/s-00001 are one file: one shard would replace the other" "  names both"
is "$(cat ln/s-00000)" "old" "  nothing replaced"
rm ln/s-00000
run tfr-shard -n 2 -o 'ln/s-{shard}' in.tfr
like "$err" "ln/s-00000 and ln/s-00001 are one file" "  a dangling link to the other name too"
ok test ! -e ln/s-00000 "  nothing made"
ln -s m-00000-of-00002 ln/m-00001-of-00002
run tfr-shard --max-records 4 -o 'ln/{shard:1}/../m-{shard}-of-{nshards}' in.tfr
is "$rc" 1 "size mode, one file under two final names: exit 1"
like "$err" "ln/0/../m-00000-of-00002 and ln/1/../m-00001-of-00002 are one file|ln/1/../m-00001-of-00002 and ln/0/../m-00000-of-00002 are one file" \
	"  names both"
is "$(ls ln | tr '\n' ' ')" "m-00001-of-00002 s-00001 " "  nothing landed, its directories gone"

# ---- a spill directory that cannot be used: said before the input is read
# (it was said only when memory ran out, or never for a small input)
run tfr-shard --shuffle --tmpdir nope -o sh.tfr in.tfr
is "$rc/$err" "1/tfr-shard: nope: cannot create a temporary file: No such file or directory" \
	"--shuffle --tmpdir nope: refused at the start"
ok test ! -e sh.tfr "  no output"

# ---- directories made by a failed run are removed; ones that were there stay
mkdir keep
run tfr-shard -n 2 -o 'keep/new/{shard}/s.tfr' in.tfr nope.tfr
is "$rc" 1 "a missing input after the outputs were set up: exit 1"
is "$(find keep | sort | tr '\n' ' ')" "keep " "  the directories it made are gone, keep/ stays"
run tfr-shard -n 2 -o 'made/{shard}/s.tfr' in.tfr nope.tfr
ok test ! -e made "  a top directory it made is gone too"
mkdir -p part/s-00001.tfr
run tfr-shard -n 2 -o 'part/sub/../s-{shard}.tfr' in.tfr
is "$rc" 1 "a bad destination found after a directory was made: exit 1"
ok test ! -e part/sub "  the directory made for it is gone"
mkdir mk && echo x >mk/00001
run tfr-shard -n 2 -o 'mk/{shard}/sub/s.tfr' in.tfr
is "$rc/$err" "1/tfr-shard: mk/00001/sub: cannot create directory: Not a directory" \
	"a file where a directory should be made: exit 1, named"
is "$(find mk | sort | tr '\n' ' ')" "mk mk/00001 " "  the directories made for shard 0 are gone"
run tfr-shard -n 2 -o 'fine/{shard}/s.tfr' in.tfr
is "$rc/$(find fine -type f | wc -l)" "0/2" "a run that succeeds keeps its directories"

# ---- an output that is its own input (cat: "input file is output file"):
# tfr-shard f >> f read its own output
cp in.tfr f.tfr
size=$(stat -c %s f.tfr)
timeout 60 tfr-shard f.tfr >>f.tfr 2>own.err
is "$?" 1 "tfr-shard f >> f: exit 1"
is "$(cat own.err)" "tfr-shard: f.tfr: input file is output file" "  says so, as cat does"
is "$(stat -c %s f.tfr)" "$size" "  f is unchanged"
timeout 60 tfr-shard - <f.tfr >>f.tfr 2>own.err
is "$?/$(cat own.err)" "1/tfr-shard: stdin: input file is output file" "tfr-shard - < f >> f: refused"
timeout 60 tfr-shard in.tfr f.tfr -o /dev/stdout >>f.tfr 2>own.err
is "$?/$(cat own.err)" "1/tfr-shard: f.tfr: input file is output file" "-o /dev/stdout >> f: refused"
is "$(stat -c %s f.tfr)" "$size" "  f is unchanged"
run tfr-shard -q -o f.tfr f.tfr in.tfr
is "$rc" 0 "-o f.tfr reading f.tfr: a temporary renamed at the end, allowed"
is "$($REF check f.tfr)" "records=16" "  f holds both inputs once"
tfr-shard -q in.tfr f.tfr >other.tfr
is "$?/$($REF check other.tfr)" "0/records=24" "stdout to another file: fine"

# ---- templates: unknown placeholders refused, widths honoured
run tfr-shard -n 2 -o 'x/s-{shrad}.tfr' in.tfr
is "$rc" 2 "an unknown placeholder: usage error"
is "$(echo "$err" | head -1)" "tfr-shard: -o 'x/s-{shrad}.tfr': unknown placeholder {shrad} (known: {shard}, {nshards}, {split}, {rank}, {size})" \
	"  named, with the known ones"
ok test ! -e x "  nothing made"
run tfr-shard -o 's-{Shard}.tfr' in.tfr
is "$rc" 2 "  one output, an unknown name all the same"
run tfr-shard -n 2 -o 'w-{shard:40}' in.tfr
like "$err" "\{shard:40\}: the width after ':' must be a number of digits from 1 to 32" "a width past 32: refused"
run tfr-shard -n 2 --split a=1,b=1 -o 'w-{split:2}-{shard}' in.tfr
like "$err" "\{split:2\}: a width pads a number, and \{split\} is 'a'" "a width on a name: refused"
run tfr-shard -q -n 12 -o 'w3-{shard:3}-of-{nshards:2}' in.tfr
is "$(ls w3-* | head -2 | tr '\n' ' ')" "w3-000-of-12 w3-001-of-12 " "{shard:3}, {nshards:2}: widths honoured"
run tfr-shard -q -n 12 -o 'w1-{shard:1}' in.tfr
is "$(ls w1-* | sort -V | tr '\n' ' ')" "w1-0 w1-1 w1-2 w1-3 w1-4 w1-5 w1-6 w1-7 w1-8 w1-9 w1-10 w1-11 " \
	"{shard:1}: no padding, wider numbers whole"
run tfr-shard -q --max-records 3 -o 'ws-{shard:2}-of-{nshards:3}' in.tfr
is "$rc/$(ls ws-* | tr '\n' ' ')" "0/ws-00-of-003 ws-01-of-003 ws-02-of-003 " "size mode takes {shard:2}"
run tfr-shard --max-records 3 -o 'd{nshards:2}/s-{shard}' in.tfr
is "$rc" 2 "size mode: {nshards:2} in the directory part refused as {nshards} is"
run tfr-shard -q -n 2 -o 'lit-{}-{ x}-{shard}' in.tfr
is "$rc/$(ls lit-* | tr '\n' ' ')" "0/lit-{}-{ x}-00000 lit-{}-{ x}-00001 " "braces around no name are text"

# ---- not one record in a non-empty input: an error, even with
# --skip-corrupt, in the words tfr-cat uses
printf 'This is not a TFRecord file at all.\n%.0s' 1 2 3 4 5 6 7 8 9 10 >garbage
run tfr-shard --skip-corrupt -q -o g.tfr garbage
is "$rc" 1 "--skip-corrupt over a file of no records: exit 1"
is "$(echo "$err" | tail -1)" "tfr-shard: garbage: no records found in 360 bytes (is it a TFRecord file?)" \
	"  says so, naming it"
ok test ! -e g.tfr "  no output"
run tfr-cat --skip-corrupt -c garbage
is "$(echo "$err" | tail -1)" "tfr-cat: garbage: no records found in 360 bytes (is it a TFRecord file?)" \
	"  tfr-cat: the same rule, the same words"
run tfr-shard --skip-corrupt -q -o g.tfr in.tfr garbage
is "$rc" 1 "  also after a good input"

done_testing
