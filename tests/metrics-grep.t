#!/bin/bash
# metrics-grep: options, output formats, summaries, SageMaker definitions,
# Open MPI tags, and bad input (regexes, definitions, binary garbage, huge
# lines, invalid UTF-8, closed pipes, full disks).  Golden outputs were
# checked by hand against tests/data/metrics/*.log; means are checked
# against Python's math.fsum.
. "${DP_SRC:-.}/tests/lib.sh"
D="$FIX/metrics"
cd "$T"
TAB=$(printf '\t')

# ---- help, version, usage ----
run metrics-grep --help
is "$rc" 0 "--help exits 0"
for o in -m --metric --definitions --logfmt --tsv --csv --json --no-header --last --min --max \
	--mean --count -f --follow --plot --title --max-line-length --help --version; do
	like "$out" "(^|[ ,])$o([ =,[]|$)" "--help lists $o"
done
run metrics-grep --version
is "$rc" 0 "--version exits 0"
like "$out" "^metrics-grep \(dptools\) [0-9]+\.[0-9]+" "--version prints the version"
run metrics-grep --bogus
is "$rc" 2 "an unknown option exits 2"
like "$err" "^metrics-grep: unknown option '--bogus'" "names the option"
is "$(printf '%s\n' "$err" | grep -c '^usage: metrics-grep')" 1 "one usage line"
run metrics-grep -m
is "$rc" 2 "-m without an argument exits 2"
like "$err" "^metrics-grep: option '-m' needs a value" "says -m needs a value"
run metrics-grep -m noequals "$D/train.log"
is "$rc" 2 "-m without NAME= exits 2"
like "$err" "want NAME=REGEX" "says what -m wants"
run metrics-grep --max-line-length 0 "$D/train.log"
is "$rc" 2 "--max-line-length 0 exits 2"

# ---- logfmt (the default), golden ----
run metrics-grep "$D/train.log"
is "$rc" 0 "logfmt: exit 0"
is "$(printf '%s\n' "$out" | head -4)" "name${TAB}value${TAB}step${TAB}epoch${TAB}rank
loss${TAB}0.6931${TAB}100${TAB}1${TAB}
accuracy${TAB}0.7502${TAB}100${TAB}1${TAB}
lr${TAB}0.001${TAB}100${TAB}1${TAB}" "logfmt: header and rows"
is "$(printf '%s\n' "$out" | wc -l)" 25 "logfmt: 24 values (step and epoch are not metrics)"
unlike "$out" "model|level|ts" "non-numeric values are not metrics"
is "$(printf '%s\n' "$out" | grep '^val_loss')" "val_loss${TAB}0.4012${TAB}469${TAB}1${TAB}
val_loss${TAB}0.3604${TAB}938${TAB}2${TAB}" "validation lines"
run metrics-grep --logfmt "$D/train.log"
is "$(printf '%s\n' "$out" | wc -l)" 25 "--logfmt is the default"
run metrics-grep --logfmt=val_loss,lr --no-header "$D/train.log"
is "$out" "lr${TAB}0.001${TAB}100${TAB}1${TAB}
lr${TAB}0.001${TAB}200${TAB}1${TAB}
lr${TAB}0.001${TAB}300${TAB}1${TAB}
val_loss${TAB}0.4012${TAB}469${TAB}1${TAB}
lr${TAB}0.0005${TAB}569${TAB}2${TAB}
lr${TAB}0.0005${TAB}669${TAB}2${TAB}
val_loss${TAB}0.3604${TAB}938${TAB}2${TAB}" "--logfmt=KEYS: only those, --no-header"
run metrics-grep --logfmt='a b' "$D/train.log"
is "$rc" 2 "--logfmt with a bad key exits 2"

# ---- regexes ----
run metrics-grep -m 'loss=\bloss=([0-9.]+)' -m 'acc=(?<!_)accuracy=([0-9.]+)' --no-header "$D/train.log"
is "$rc" 0 "-m: exit 0"
is "$(printf '%s\n' "$out" | head -3)" "loss${TAB}0.6931${TAB}100${TAB}1${TAB}
acc${TAB}0.7502${TAB}100${TAB}1${TAB}
loss${TAB}0.5123${TAB}200${TAB}1${TAB}" "-m: two metrics per line, in definition order"
is "$(printf '%s\n' "$out" | wc -l)" 10 "-m: 5 loss + 5 accuracy (lookbehind skips val_accuracy)"
run metrics-grep -m 'x=epoch=(\d+) step=(\d+)' --no-header "$D/train.log"
is "$(printf '%s\n' "$out" | cut -f2 | sort -u | tr '\n' ' ')" "1 2 " "the FIRST group is the value"
run metrics-grep -m 'l=(?P<v>[0-9.]+) accuracy' --no-header "$D/train.log"
is "$rc" 0 "Python's (?P<name>...) groups work"
is "$(printf '%s\n' "$out" | head -1 | cut -f2)" "0.6931" "named group value"

# ---- SageMaker definitions ----
run metrics-grep --definitions "$D/defs.json" "$D/train.log"
is "$out" "name${TAB}value${TAB}step${TAB}epoch${TAB}rank
train:loss${TAB}0.6931${TAB}100${TAB}1${TAB}
train:loss${TAB}0.5123${TAB}200${TAB}1${TAB}
train:loss${TAB}0.4410${TAB}300${TAB}1${TAB}
validation:accuracy${TAB}0.8561${TAB}469${TAB}1${TAB}
train:loss${TAB}0.3907${TAB}569${TAB}2${TAB}
train:loss${TAB}0.3655${TAB}669${TAB}2${TAB}
validation:accuracy${TAB}0.8698${TAB}938${TAB}2${TAB}" "--definitions: SageMaker's list as is"
run metrics-grep --definitions - "$D/train.log" < "$D/defs.json"
is "$(printf '%s\n' "$out" | wc -l)" 8 "--definitions - reads stdin"
printf '%s' '[{"Name": "train:loss", "Regex": "loss: ([0-9\\.]+)"}]' > sm.json
printf 'Epoch 1 loss: 0.75 acc: 0.5\nEpoch 2 loss: 0.5 acc: 0.6\n' > sm.log
run metrics-grep --definitions sm.json --last sm.log
is "$out" "name${TAB}last
train:loss${TAB}0.5" "the issue's SageMaker example"
printf '{"MetricDefinitions": [{"Name": "l", "Regex": "loss: ([0-9.]+)"}]}' > dtj.json
run metrics-grep --definitions dtj.json --count sm.log
is "$out" "name${TAB}count
l${TAB}2" "describe-training-job's MetricDefinitions object"
run metrics-grep --definitions "$D/defs.json" --logfmt=lr --count "$D/train.log"
is "$out" "name${TAB}count
train:loss${TAB}5
validation:accuracy${TAB}2
lr${TAB}5" "definitions and --logfmt=KEYS together"

# ---- formats ----
run metrics-grep --csv "$D/tagged.log"
is "$out" "name,value,step,epoch,rank
loss,0.6931,100,1,0
samples_per_sec,61728,100,1,0
loss,0.6931,100,1,1
samples_per_sec,61700,100,1,1
loss,0.5123,200,1,0
samples_per_sec,62550,200,1,0
loss,0.5123,200,1,1
samples_per_sec,62001,200,1,1" "--csv with ranks from Open MPI's --tag-output prefix"
# --tag-output with dp-train --log-all-ranks: rank 0 writes its own lines
# (rank=0) and the job's (no rank key); the job's are not rank 0's
printf '%s\n' '[1,0]<stdout>:rank=0 epoch=1 step=10 loss=0.5' '[1,1]<stdout>:rank=1 epoch=1 step=10 loss=0.7' \
	'[1,0]<stdout>:epoch=1 step=10 loss=0.6' > allranks.log
run metrics-grep --csv allranks.log
is "$out" "name,value,step,epoch,rank
loss,0.5,10,1,0
loss,0.7,10,1,1
loss,0.6,10,1," "--tag-output --log-all-ranks: the job's line has no rank, rank 0's own keeps 0"
run metrics-grep --json "$D/tagged.log"
is "$(printf '%s\n' "$out" | head -1)" '{"name":"loss","value":0.6931,"step":100,"epoch":1,"rank":0}' "--json"
printf '%s\n' "$out" > j.jsonl
ok $PY -c '
import json, sys
rows = [json.loads(l) for l in open("j.jsonl")]
assert len(rows) == 8 and {r["rank"] for r in rows} == {0, 1}
assert all(isinstance(r["value"], (int, float)) for r in rows)
' "--json: every line parses as JSON (Python json)"
run metrics-grep -m 'a,"b"=loss=([0-9.]+)' --csv --no-header "$D/tagged.log"
is "$(printf '%s\n' "$out" | head -1)" '"a,""b""",0.6931,100,1,0' "--csv quotes names with , and \""
run metrics-grep -m 'a"\b=loss=([0-9.]+)' --json "$D/tagged.log"
is "$(printf '%s\n' "$out" | head -1 | $PY -c 'import json,sys; print(json.loads(sys.stdin.read())["name"])')" 'a"\b' "--json escapes names"
# Names with a quote, a backslash and non-ASCII text, in rows and summaries:
# every line is valid JSON and gives the name back; a control character is
# refused (a name goes into TSV, CSV, JSON and SVG as it is).
for args in "" "--count --mean"; do
	run metrics-grep -m 'q"b\s/é=loss=([0-9.]+)' -m 'plain=loss=([0-9.]+)' --json $args "$D/tagged.log"
	printf '%s\n' "$out" > names.jsonl
	ok $PY -c '
import json, sys
rows = [json.loads(l) for l in open("names.jsonl", encoding="utf-8")]
assert rows and {r["name"] for r in rows} == {"q\"b\\s/\u00e9", "plain"}, rows
' "--json ${args:-rows}: names with \" \\ and UTF-8 are valid JSON"
done
run metrics-grep -m "$(printf 'a\tb')=loss=([0-9.]+)" --json "$D/tagged.log"
is "$rc" 2 "a name with a control character: exit 2"
printf 'loss=nan step=1\nloss=-inf step=2\nloss=.5 step=3\nloss=+1E3 step=4\n' > odd.log
run metrics-grep --json odd.log
is "$out" '{"name":"loss","value":null,"step":1}
{"name":"loss","value":null,"step":2}
{"name":"loss","value":0.5,"step":3}
{"name":"loss","value":1000,"step":4}' "--json: NaN and infinities are null; other forms normalised"
run metrics-grep --no-header odd.log
is "$(printf '%s\n' "$out" | cut -f2 | tr '\n' ' ')" "nan -inf 0.5 1000 " "TSV: nan and -inf as words"
# Numbers beyond a double's range have JSON's syntax, but every reader takes
# them for infinities (Python's json writes them back as Infinity): null, as
# the infinities, in the value, step and epoch of rows and in every summary.
# Python's json, made strict: NaN, Infinity or an overflowing number refused.
strict_json() { # FILE: every line a JSON object without NaN or infinities
	$PY - "$1" <<'EOF'
import json, math, sys
def bad(c): raise ValueError("not JSON: " + c)
def num(s):
    v = float(s)
    if not math.isfinite(v): bad(s)
    return v
n = 0
for line in open(sys.argv[1]):
    row = json.loads(line, parse_constant=bad, parse_float=num, parse_int=num)
    assert isinstance(row, dict)
    n += 1
assert n > 0
EOF
}
printf '%s\n' 'step=1 epoch=1e400 loss=1e400' 'step=2 loss=-1E+999 acc=0.5' 'step=1e400 loss=2' \
	'step=3 loss=inf' 'step=4 loss=nan' 'step=5 loss=1.5e308' > over.log
run metrics-grep --json over.log
is "$out" '{"name":"loss","value":null,"step":1}
{"name":"loss","value":null,"step":2}
{"name":"acc","value":0.5,"step":2}
{"name":"loss","value":2}
{"name":"loss","value":null,"step":3}
{"name":"loss","value":null,"step":4}
{"name":"loss","value":1.5e308,"step":5}' "--json: numbers past a double's range are null (value), left out (step, epoch)"
printf '%s\n' "$out" > over.jsonl
ok strict_json over.jsonl "--json rows with overflowing numbers: strict JSON (Python, NaN and Infinity refused)"
for s in --last --min --max --mean; do
	run metrics-grep --json $s --count over.log
	printf '%s\n' "$out" > over-s.jsonl
	ok strict_json over-s.jsonl "--json $s: strict JSON"
done
printf 'loss=1e400\nloss=1\nacc=-1e400\nacc=1e400\nbig=1e308\nbig=1.5e308\n' > sum.log
run metrics-grep --json --mean --min --max --last sum.log
is "$out" '{"name":"loss","mean":null,"min":1,"max":null,"last":1}
{"name":"acc","mean":null,"min":null,"max":null,"last":null}
{"name":"big","mean":1.25e+308,"min":1e+308,"max":1.5e+308,"last":1.5e+308}' "--json summaries: every non-finite one null"
printf '%s\n' "$out" > sum.jsonl
ok strict_json sum.jsonl "--json summaries: strict JSON"
run metrics-grep --mean --no-header sum.log
is "$out" "loss${TAB}inf
acc${TAB}nan
big${TAB}1.25e+308" "--mean: an infinity's mean is infinite, both infinities NaN, a sum past DBL_MAX no harm"

# dp-train's --log-format json lines
printf '%s\n' '{"epoch": 1, "step": 100, "loss": 0.4123, "accuracy": 0.8512, "msg": "x"}' \
	'{"epoch": 1, "step": 469, "val_loss": 0.35}' > j.log
run metrics-grep --no-header j.log
is "$out" "loss${TAB}0.4123${TAB}100${TAB}1${TAB}
accuracy${TAB}0.8512${TAB}100${TAB}1${TAB}
val_loss${TAB}0.35${TAB}469${TAB}1${TAB}" "JSON-object lines (dp-train --log-format json)"
printf 'epoch=1 step=5 loss=0.5\r\nepoch=1 step=6 loss=0.4\r\n' > crlf.log
run metrics-grep -m 'l=loss=([0-9.]+)$' --no-header crlf.log
is "$out" "l${TAB}0.5${TAB}5${TAB}1${TAB}
l${TAB}0.4${TAB}6${TAB}1${TAB}" "CRLF line ends: \$ anchors before the CR"

# ---- summaries ----
run metrics-grep --last --min --max --mean --count "$D/train.log"
is "$out" "name${TAB}last${TAB}min${TAB}max${TAB}mean${TAB}count
loss${TAB}0.3655${TAB}0.3655${TAB}0.6931${TAB}0.48052${TAB}5
accuracy${TAB}0.8702${TAB}0.7502${TAB}0.8702${TAB}0.82734${TAB}5
lr${TAB}0.0005${TAB}0.0005${TAB}0.001${TAB}0.0008${TAB}5
samples_per_sec${TAB}124990${TAB}123456${TAB}125300${TAB}124743.2${TAB}5
val_loss${TAB}0.3604${TAB}0.3604${TAB}0.4012${TAB}0.3808${TAB}2
val_accuracy${TAB}0.8698${TAB}0.8561${TAB}0.8698${TAB}0.86295${TAB}2" "all five summaries"
run metrics-grep --count --last --csv "$D/tagged.log"
is "$out" "name,count,last,rank
loss,2,0.5123,0
loss,2,0.5123,1
samples_per_sec,2,62550,0
samples_per_sec,2,62001,1" "summaries per rank, columns in the order given, rank column"
# More ranks than the first allocation of accumulators holds, each rank's
# first value after the one before it: every rank keeps its row, in order.
for r in $(seq 0 99); do printf '[1,%d]<stdout>:step=1 loss=%d.5\n' $r $r; done > ranks.log
run metrics-grep --count --last --no-header ranks.log
is "$out" "$(for r in $(seq 0 99); do printf 'loss\t1\t%d.5\t%d\n' $r $r; done)" "100 ranks: a row each, in rank order"
run metrics-grep --max --json "$D/tagged.log"
is "$(printf '%s\n' "$out" | head -1)" '{"name":"loss","max":0.6931,"rank":0}' "summaries as JSON"
# The mean of many values against Python's exact sum.
$PY -c '
import random
random.seed(3)
with open("many.log", "w") as f:
    for i in range(20000):
        f.write("step=%d loss=%.6f\n" % (i, random.uniform(0, 1e6) if i % 2 else random.uniform(0, 1e-3)))
'
want=$($PY -c '
import math, re
v = [float(m.group(1)) for m in (re.search(r"loss=(\S+)", l) for l in open("many.log"))]
print("%.15g" % (math.fsum(v) / len(v)))')
run metrics-grep --mean --no-header many.log
is "$out" "loss${TAB}$want" "--mean of 20000 values of mixed magnitude equals math.fsum's to 15 digits"
printf 'loss=0.5\nloss=nan\nloss=0.25\nx=nan\n' > nan.log
run metrics-grep --min --max --mean --last --count nan.log
is "$out" "name${TAB}min${TAB}max${TAB}mean${TAB}last${TAB}count
loss${TAB}0.25${TAB}0.5${TAB}nan${TAB}0.25${TAB}3
x${TAB}${TAB}${TAB}nan${TAB}nan${TAB}1" "NaN: min/max skip it, the mean is NaN, only-NaN has no min/max"
run metrics-grep --min --mean --json nan.log
is "$out" '{"name":"loss","min":0.25,"mean":null}
{"name":"x","min":null,"mean":null}' "NaN summaries in JSON are null"
run metrics-grep -m 'nothing=zzz([0-9]+)' -m 'loss=\bloss=([0-9.]+)' --count --last "$D/train.log"
is "$out" "name${TAB}count${TAB}last
nothing${TAB}0${TAB}
loss${TAB}5${TAB}0.3655" "a defined metric without values: count 0, empty last"
run metrics-grep -m 'nothing=zzz([0-9]+)' --count "$D/train.log"
is "$rc" 3 "no value at all: exit 3"
like "$err" "no metric values found" "said so"
run metrics-grep -m 'nothing=zzz([0-9]+)' "$D/train.log"
is "$rc" 3 "no value, rows asked: exit 3"
is "$out" "name${TAB}value${TAB}step${TAB}epoch${TAB}rank" "just the header"

# ---- bad regexes and definitions ----
run metrics-grep -m 'loss=loss=([0-9.]+' "$D/train.log"
is "$rc" 2 "invalid regex: exit 2"
is "$err" 'metrics-grep: -m loss: regex "loss=([0-9.]+" at offset 13: missing closing parenthesis' "invalid regex: the offset"
run metrics-grep -m 'loss=loss=[0-9.]+' "$D/train.log"
is "$rc" 2 "no capture group: exit 2"
like "$err" "^metrics-grep: -m loss: regex \"loss=\[0-9.\]\+\" has no capture group" "no group: said so"
run metrics-grep --definitions nonexistent.json "$D/train.log"
is "$rc" 2 "missing definitions file: exit 2"
is "$err" "metrics-grep: nonexistent.json: No such file or directory" "named"
printf '[{"Name": "a", "Regex": "(x"}]' > bad1.json
run metrics-grep --definitions bad1.json "$D/train.log"
is "$rc" 2 "bad regex in definitions: exit 2"
is "$err" 'metrics-grep: bad1.json: entry 1 (a): regex "(x" at offset 2: missing closing parenthesis' "entry and offset"
printf '[\n{"Name": "a" "Regex": "(x)"}]' > bad2.json
run metrics-grep --definitions bad2.json "$D/train.log"
is "$rc" 2 "bad JSON: exit 2"
like "$err" "^metrics-grep: bad2.json: line 2 column" "bad JSON: line and column"
printf '[{"name": "a", "regex": "(x)"}]' > bad3.json
run metrics-grep --definitions bad3.json "$D/train.log"
like "$err" 'entry 1: want an object with string "Name" and "Regex"' "lower-case keys: said what is wanted"
head -c 100000 /dev/urandom > bad4.json
run metrics-grep --definitions bad4.json "$D/train.log"
is "$rc" 2 "random bytes as definitions: exit 2, no crash"

# ---- bad input lines ----
{ cat "$D/train.log"; head -c 3000000 /dev/urandom; printf '\nepoch=3 step=999 loss=0.1\n'; } > garbage.log
run metrics-grep -m 'loss=\bloss=([0-9.]+)' --count garbage.log
ok test "$rc" -le 0 "binary garbage: exit 0"
like "$out" "^name${TAB}count
loss${TAB}(6|7|8)" "binary garbage: the values around it are found"
printf 'loss=0.5 step=1\nloss=0.6\0\0\0 step=2\nloss=0.7 step=3\n' > nul.log
run metrics-grep -m 'loss=\bloss=([0-9.]+)' --no-header nul.log
is "$(printf '%s\n' "$out" | cut -f2 | tr '\n' ' ')" "0.5 0.7 " "a line with NUL bytes is skipped"
is "$err" "metrics-grep: nul.log: 1 line with NUL bytes (binary) skipped" "and counted"
printf 'loss=0.5 \xff\xfe step=1\n\xc3\x28 loss=0.6 step=2\nperte \xc3\xa9=0.7 \xe9\n' > utf.log
run metrics-grep -m 'loss=\bloss=([0-9.]+)' -m 'perte=perte é=([0-9.]+)' --no-header utf.log
is "$out" "loss${TAB}0.5${TAB}1${TAB}${TAB}
loss${TAB}0.6${TAB}2${TAB}${TAB}
perte${TAB}0.7${TAB}${TAB}${TAB}" "invalid UTF-8: values still found, UTF-8 patterns still match"
is "$rc" 0 "invalid UTF-8: exit 0"
printf 'a=1.2.3\na=4\n' > nn.log
run metrics-grep -m 'a=a=([0-9.]+)' --no-header nn.log
is "$out" "a${TAB}4${TAB}${TAB}${TAB}" "a capture that is not a number is skipped"
is "$err" 'metrics-grep: 1 capture was not a number, skipped (first: a: "1.2.3")' "and reported"

# A 300 MiB line: skipped with a count, in bounded memory.
{ echo 'epoch=1 step=1 loss=0.5'; head -c 314572800 /dev/zero | tr '\0' 'x'; echo; echo 'epoch=1 step=2 loss=0.4'; } > huge.log
/usr/bin/time -f %M -o rss metrics-grep -m 'loss=\bloss=([0-9.]+)' --no-header huge.log > huge.out 2> huge.err
is "$?" 0 "a 300 MiB line: exit 0"
is "$(cut -f2 huge.out | tr '\n' ' ')" "0.5 0.4 " "a 300 MiB line: the lines around it"
is "$(cat huge.err)" "metrics-grep: huge.log: 1 line longer than 1048576 bytes skipped" "a 300 MiB line: counted"
ok test "$(cat rss)" -lt 65536 "a 300 MiB line: peak RSS $(cat rss) KiB, under 64 MiB"
rm -f huge.log
run metrics-grep --max-line-length 10 -m 'l=loss=([0-9.]+)' --no-header "$D/train.log"
is "$rc" 3 "--max-line-length 10: every line is longer"
like "$err" "train.log: 9 lines longer than 10 bytes skipped" "--max-line-length: counted"
run metrics-grep --max-line-length 100 --count "$D/train.log"
is "$(printf '%s\n' "$out" | sed -n 2p)" "loss${TAB}5" "--max-line-length 100 keeps the 80-byte lines"

# ---- files ----
run metrics-grep --count "$D/train.log" nonexistent.log "$D/tagged.log"
is "$rc" 1 "a missing file among others: exit 1"
is "$err" "metrics-grep: nonexistent.log: No such file or directory" "named"
is "$(printf "%s\n" "$out" | sed -n 2p)" "loss${TAB}5${TAB}" "the others still read (rank column: tagged.log has ranks)"
is "$(printf '%s\n' "$out" | grep -c '^loss')" 3 "loss without rank, rank 0 and rank 1"
run metrics-grep --count - < "$D/train.log"
is "$(printf '%s\n' "$out" | sed -n 2p)" "loss${TAB}5" "- reads stdin"
run metrics-grep --count < "$D/train.log"
is "$(printf '%s\n' "$out" | sed -n 2p)" "loss${TAB}5" "no file reads stdin"
run metrics-grep "$T"
is "$rc" 1 "a directory: exit 1"
like "$err" "a folder without event files" "a directory without event files: said so"
# Any number of files (there was an unwritten limit of 256): read one after
# the other, each closed once read, so not even the limit on open files applies.
mkdir many
for i in $(seq 300); do printf 'step=%d loss=%d.5\n' "$i" "$i" > "many/$(printf %03d "$i").log"; done
run metrics-grep --count --last --max many/*.log
is "$rc" 0 "300 files: exit 0"
is "$out" "name${TAB}count${TAB}last${TAB}max
loss${TAB}300${TAB}300.5${TAB}300.5" "300 files: every file read, in order"
run bash -c 'ulimit -n 64 && exec metrics-grep --count --no-header many/*.log'
is "$out" "loss${TAB}300" "300 files under ulimit -n 64: each closed once read"

# ---- output errors ----
for i in $(seq 200); do cat "$D/train.log"; done > big.log
metrics-grep big.log 2> epipe.err | head -1 > /dev/null
is "${PIPESTATUS[0]}" 141 "a closed pipe: 141 (128 + SIGPIPE)"
is "$(cat epipe.err)" "" "a closed pipe: quietly"
if [ -w /dev/full ]; then
	run metrics-grep "$D/train.log" > /dev/full
	metrics-grep "$D/train.log" > /dev/full 2> full.err
	is "$?" 1 "a full disk: exit 1"
	is "$(cat full.err)" "metrics-grep: stdout: No space left on device" "a full disk: said so"
else
	skip "/dev/full not writable"
	skip "/dev/full not writable"
fi

done_testing
