#!/usr/bin/env bash
# metrics-grep on TensorBoard event files, recognised by their content: the
# files dp-train --tensorboard writes give the values of its log lines; a
# file in the forms PyTorch's SummaryWriter and TensorFlow 2 write (built
# here with python3-protobuf from tests/data/tensorboard/events.proto) gives
# its scalars, every other summary left out; damage is reported.
. "${DP_SRC:-.}/tests/lib.sh"

. "$DP_SRC/tests/tblib.sh"

run dp-train --train small.tfr --val val.tfr --model dense:16,relu,dense:4 --input-shape 64 \
	--batch-size 16 --prefetch 0 -q --log-every 2 --epochs 3 --tensorboard tb --log train.log
is "$rc" 0 "dp-train --tensorboard: exit 0"
ev=$(ls tb/events.out.tfevents.*)

# the values of the log and of the events, row for row, as numbers (the
# log writes 0.3500, the event holds the float 0.35); the epoch is a log
# coordinate: events have steps only
KEYS=--logfmt=loss,accuracy,lr,val_loss,val_accuracy
num() { awk -F, '{ print $1 "," ($2 + 0) "," $3 }'; }
run metrics-grep $KEYS --csv train.log
want=$(num <<<"$out")
run metrics-grep $KEYS --csv "$ev"
is "$rc" 0 "an event file: exit 0"
is "$(num <<<"$out")" "$want" "an event file gives the log's values at the log's steps"
is "$(cut -d, -f4 <<<"$out" | sort -u | tr -d '\n')" "epoch" "... and no epochs"
run metrics-grep $KEYS --last --min --max --mean --count train.log
want=$out
run metrics-grep $KEYS --last --min --max --mean --count "$ev"
is "$out" "$want" "--last --min --max --mean --count: the same summaries as the log's"
run metrics-grep --json "$ev"
like "$out" '"name":"samples_per_sec"' "no key list: every scalar is a metric"
run metrics-grep < "$ev"
is "$rc" 0 "stdin redirected from an event file: recognised"
like "$out" "val_loss	" "... its values"
run metrics-grep $KEYS --last --min --max --mean --count - < <(cat "$ev")
is "$out" "$want" "an event file on a pipe: recognised, the same summaries"
mkfifo fifo
cat "$ev" > fifo &
run metrics-grep $KEYS --last --min --max --mean --count fifo
is "$out" "$want" "... and on a named FIFO"
wait
cat train.log > fifo &
run metrics-grep $KEYS --last --min --max --mean --count fifo
is "$out" "$want" "a log on a FIFO is still read as a log"
wait
run metrics-grep --logfmt=loss < <(printf 'lo'; sleep 0.3; printf 'ss=3\n')
is "$out" "name	value	step	epoch	rank
loss	3			" "a log whose first bytes come slowly: read whole"
run metrics-grep --logfmt=loss,val_loss --plot loss.svg "$ev"
is "$rc" 0 "--plot from an event file: exit 0"
like "$(cat loss.svg)" "val_loss" "... a chart with val_loss"
run metrics-grep --logfmt=val_loss --count train.log "$ev"
like "$out" "val_loss	6" "a log and an event file in one run"

# -f: an event file followed as it grows, a record cut in two waiting for
# its second half; the same rows as reading it whole
run metrics-grep --logfmt=loss,val_loss --no-header "$ev"
want=$out
size=$(stat -c %s "$ev")
cut=$((size - 300)) # in the scalars' events (the settings come first, ~2 KB)
head -c $cut "$ev" > live.ev
metrics-grep -f --logfmt=loss,val_loss --no-header live.ev > follow.out 2> follow.err &
mg=$!
for i in $(seq 100); do [ -s follow.out ] && break; sleep 0.1; done
ok grep -Eq $'^loss\t[0-9]' follow.out "-f: the values of the first part come out"
tail -c +$((cut + 1)) "$ev" >> live.ev
n=$(wc -l <<<"$want")
for i in $(seq 100); do [ "$(wc -l < follow.out)" -ge "$n" ] && break; sleep 0.1; done
kill -TERM $mg
wait $mg
is "$?" 0 "-f on an event file: ends on SIGTERM with status 0"
is "$(cat follow.out)" "$want" "... with every value, the record cut in two read once whole"
is "$(cat follow.err)" "" "... and nothing to say"

# ---- PyTorch's and TensorFlow 2's forms -------------------------------------------
$PY "$DP_SRC/tests/tb_events.py" torch torch.ev || exit 1
run metrics-grep torch.ev
is "$rc" 0 "PyTorch-form events: exit 0"
is "$out" "name	value	step	epoch	rank
Loss/train	1	1		
Loss/test	2	1		
lr	0.1	1		
epoch_accuracy	0.25	1		
Loss/train	0.5	2		
Loss/test	1	2		
lr	0.05	2		
epoch_accuracy	0.5	2		
Loss/train	0.33333334	3		
Loss/test	0.6666667	3		
lr	0.03333333333333333	3		
epoch_accuracy	0.75	3		" "simple_value, float_val and double_val tensors, tensor_content; histograms, images, text left out"
run metrics-grep -m 'test=Loss/test=([0-9.]+)' --last torch.ev
is "$out" "name	last
test	0.6666667" "-m regexes see each event as the line step=S TAG=VALUE..."
run tfr-cat --verify torch.ev
is "$rc" 0 "tfr-cat --verify accepts it"

# ---- what is not an event file, damage ----------------------------------------------
run metrics-grep small.tfr
is "$rc" 3 "a TFRecord file of Examples is not taken for events (nothing found)"
$PY - "$ev" bad.ev <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[len(b) - 300] ^= 0xff
open(sys.argv[2], "wb").write(b)
PY
run metrics-grep --logfmt=loss --count bad.ev
is "$rc" 1 "a damaged event file: exit 1"
like "$err" "^metrics-grep: bad\.ev: record [0-9]+ at byte [0-9]+: .*CRC" "... the file, record and byte named"
like "$out" "loss	[1-9]" "... the values before the damage are still counted"
head -c -3 "$ev" > cut.ev
run metrics-grep --logfmt=val_loss --count cut.ev
is "$rc" 1 "an event file cut short: exit 1"
like "$err" "cut\.ev: .*truncated" "... said so"
# ---- a log folder, as TensorBoard reads it: runs name the values --------------------
run metrics-grep --count tb
is "$rc" 0 "a folder: exit 0"
is "$(cut -f1 <<<"$out" | tr '\n' ' ')" "name loss accuracy lr samples_per_sec val_loss val_accuracy val_samples train/epoch_loss train/epoch_accuracy train/epoch_learning_rate validation/epoch_loss validation/epoch_accuracy " \
	"the folder's own scalars, then train/'s and validation/'s as RUN/TAG"
like "$out" $'validation/epoch_loss\t3' "... one a epoch (3)"
metrics-grep --logfmt=validation/epoch_loss --csv tb >vel.csv
metrics-grep --logfmt=val_loss --csv train.log >vl.csv
run $PY - vel.csv vl.csv <<'PY'
import csv, sys
got = [(float(r["value"]), int(r["step"])) for r in csv.DictReader(open(sys.argv[1]))]
want = [float(r["value"]) for r in csv.DictReader(open(sys.argv[2]))]
assert [s for _, s in got] == list(range(len(want))) and len(want) == 3, (got, want)
assert all(abs(g - w) <= 1e-5 * abs(w) for (g, _), w in zip(got, want)), (got, want)
PY
is "$rc" 0 "validation/epoch_loss: the log's val_loss at steps 0, 1, 2 (Keras's count of epochs)"
mkdir -p empty/sub && touch empty/sub/notes.txt
run metrics-grep empty
is "$rc" 1 "a folder without event files: exit 1"
like "$err" "^metrics-grep: empty: a folder without event files" "... said"
done_testing
