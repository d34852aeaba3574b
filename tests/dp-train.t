#!/usr/bin/env bash
# dp-train: options, logs, checkpoints, determinism, resume, data input
# (files, globs, gzip, stdin, FIFOs, commands), and bad input.
. "${DP_SRC:-.}/tests/lib.sh"

MK="$PY $DP_SRC/tests/mkexamples.py"
MLP='dense:16,relu,dense:4'
CNN='conv:4:3,relu,maxpool:2,dropout:0.25,flatten,dense:16,relu,dropout:0.5,dense:4'
cd "$T"
$MK small.tfr random --n 100 --shape 1x8x8 --classes 4 --seed 1
$MK val.tfr random --n 30 --shape 1x8x8 --classes 4 --seed 2
$MK small.tfr.gz random --n 100 --shape 1x8x8 --classes 4 --seed 1 --gzip
# the same values as uint8 bytes, as int64 lists and as float lists
$MK u8.tfr random --n 64 --shape 1x8x8 --classes 4 --seed 3 --kind uint8
$MK i64.tfr random --n 64 --shape 1x8x8 --classes 4 --seed 3 --kind int64
$MK f64.tfr random --n 64 --shape 1x8x8 --classes 4 --seed 3 --kind f64bytes
$MK f32.tfr random --n 64 --shape 1x8x8 --classes 4 --seed 3 --kind f32bytes
BASE=(--model "$CNN" --input-shape 1x8x8 --batch-size 16 --prefetch 0 -q)

# ---- options -----------------------------------------------------------------
run dp-train --help
is "$rc" 0 "--help exits 0"
like "$out" "--train-cmd" "--help lists options"
manpage=$(groff -man -Tascii -rLL=300n "$DP_SRC/man/man1/dp-train.1" 2>/dev/null | col -b)
opts=$(sed -n 's/^\t{"\([a-z-]*\)", .*/\1/p' "$DP_SRC/tools/dp-train.c")
ok [ "$(echo $opts | wc -w)" -ge 60 ] "the option table read from tools/dp-train.c ($(echo $opts | wc -w) options)"
for o in $opts help version; do
	grep -Eq -- "--$o([^a-z-]|$)" <<<"$out" || { echo "# --help lacks --$o"; missing=1; }
	grep -Eq -- "--$o([^a-z-]|$)" <<<"$manpage" || { echo "# dp-train.1 lacks --$o"; missing=1; }
done
is "${missing:-0}" 0 "every option is in --help and in dp-train(1)"
run dp-train --version
like "$out" "^dp-train \(dptools\) [0-9]" "--version"
run dp-train --bogus
is "$rc" 2 "unknown option: exit 2"
like "$err" "usage: dp-train" "unknown option: usage line"
run dp-train --train small.tfr --input-shape 1x8x8
is "$rc" 2 "no model: exit 2"
like "$err" "no model" "no model: says so"
run dp-train --train small.tfr --model 'dense:8,,dense:2' --input-shape 64
is "$rc" 2 "empty spec item: exit 2"
like "$err" "dp-train: model: item 1 is empty" "empty spec item: message"
run dp-train --train small.tfr --model 'conv:4:3,dense:4' --input-shape 1x8x8
is "$rc" 2 "shape error: exit 2"
like "$err" "layer 1 \(dense:4\): input is 4x6x6: dense needs a vector: add flatten" "shape error names the layer"
run dp-train --train small.tfr --model "$MLP" --input-shape 1x8x8x8
is "$rc" 2 "bad input shape: exit 2"
# a value out of range: said so, as given, with the limits
run dp-train --train small.tfr --model "$MLP" --input-shape 64 --checkpoint-every 0e
like "$err" "^dp-train: --checkpoint-every '0e': want N updates or Ne epochs" "--checkpoint-every 0e: the value as given"
run dp-train --train small.tfr --model "$MLP" --input-shape 64 --bucket-size 2T
like "$err" "^dp-train: --bucket-size '2T': want a size from 1 to 1099511627776 bytes" "--bucket-size 2T: the limit"
run dp-train --train small.tfr --model "$MLP" --input-shape 64 --cache-limit 0
like "$err" "^dp-train: --cache-limit '0': want more than 0 bytes" "--cache-limit 0: what is wrong"
# a number too large: said so, with the limit
run dp-train --train small.tfr --model dense:1000000000 --input-shape 64
is "$rc" 2 "dense:1000000000: exit 2"
like "$err" "^dp-train: model: item 0 'dense:1000000000': 1000000000 is too large \(at most 16777216 units\)" "... too large, and the limit"
run dp-train --train small.tfr --model conv:4:3:1:5000,flatten,dense:2 --input-shape 1x8x8
like "$err" "'conv:4:3:1:5000': 5000 is too large \(at most 1024 for padding\)" "padding too large: said so"
run dp-train --train small.tfr --model dense:2 --input-shape 100000x100000
like "$err" "input shape '100000x100000': 10000000000 values is too large \(at most 268435456 a sample\)" "an input shape too large: its size and the limit"
run dp-train --train small.tfr --model "$MLP" --input-shape 64 --lr-schedule wobble
like "$err" "lr schedule 'wobble'" "bad schedule named"
run dp-train --train small.tfr --model "$MLP" --input-shape 64 --optimizer sgd --nesterov
like "$err" "nesterov needs a momentum" "nesterov without momentum refused"
run dp-train --model 'conv:32:3,relu,conv:64:3,relu,maxpool:2,dropout:0.25,flatten,dense:128,relu,dropout:0.5,dense:10' --input-shape 1x28x28 --summary
is "$rc" 0 "--summary exits 0"
like "$out" "total 1199882 parameters" "--summary counts PyTorch's parameters for the seed CNN"
like "$out" "4 +maxpool:2 +64x12x12 +0" "--summary shows shapes"
run dp-train --model "$MLP" --input-shape 64 --train small.tfr extra
is "$rc" 2 "stray argument: exit 2"

# ---- training, logs ------------------------------------------------------------
run dp-train --train small.tfr --val val.tfr "${BASE[@]}" --epochs 2 --log-every 3 -o a.st
is "$rc" 0 "trains"
is "$(echo "$out" | head -1)" "$(echo "$out" | head -1 | grep -E '^epoch=1 step=3 loss=[0-9.]+ accuracy=[0-9.]+ lr=0\.001 samples_per_sec=[0-9]+(\.[0-9]+)?$')" "logfmt training line: keys in order"
like "$out" "epoch=1 step=7 loss=" "a line closes each epoch (100 samples / 16 = 7 steps)"
like "$out" "epoch=1 step=7 val_loss=[0-9.]+ val_accuracy=[0-9.]+ val_samples=30" "validation line after each epoch"
like "$out" "epoch=2 step=14 val_loss=" "second epoch validated"
ok_ckpt a.st "checkpoint written"
vline=$(echo "$out" | grep val_loss | tail -1)
unlike "$err" $'\r' "no progress bar when stderr is not a terminal"
run dp-train --train small.tfr --val val.tfr "${BASE[@]}" --epochs 2 --log-every 3 --log-format json
is "$rc" 0 "json log"
ok $PY -c '
import json, sys
keys = [list(json.loads(l)) for l in sys.stdin]
assert keys[0] == ["epoch", "step", "loss", "accuracy", "lr", "samples_per_sec"], keys[0]
assert ["epoch", "step", "val_loss", "val_accuracy", "val_samples"] in keys
' <<<"$out" "json lines: the same keys, valid JSON"
run dp-train --train small.tfr --val-cmd 'cat val.tfr' "${BASE[@]}" --epochs 2 --log-every 3
is "$(echo "$out" | grep val_loss | tail -1)" "$vline" "--val-cmd: the same validation as --val"
dp-train --train small.tfr "${BASE[@]}" --log log2.txt -o - > stdout.st
is "$?" 0 "-o - with --log FILE: exit 0"
ok $PY "$DP_SRC/tests/torch_ref.py" finite stdout.st "-o -: a checkpoint on stdout"
run dp-train --train small.tfr "${BASE[@]}" -o -
is "$rc" 2 "-o - with the log on stdout: a usage error"
run dp-train --train small.tfr "${BASE[@]}" --log log.txt
is "$out" "" "--log: nothing on stdout"
like "$(cat log.txt)" "epoch=1 step=7 loss=" "--log: lines in the file"
run dp-train --train small.tfr "${BASE[@]}" --log /dev/full
is "$rc" 1 "log to a full disk: exit 1"
like "$err" "write error" "log to a full disk: message"
run dp-train --train small.tfr "${BASE[@]}" --epochs 3 -o no/such/dir/m.st
is "$rc" 1 "checkpoint into a missing directory: exit 1"
like "$err" "no/such/dir/m.st: cannot create \(directory no/such/dir\)" "names the checkpoint"
is "$out" "" "... before the first epoch"
# every output is checked before the work, a template's directory too
mkdir isdir
for o in "--checkpoint no/ck-{step}.st --checkpoint-every 2" "--checkpoint isdir --checkpoint-every 1e" \
	"--log no/log.txt" "--timeline no/t-{rank}.json" "--timeline isdir"; do
	run dp-train --train small.tfr "${BASE[@]}" --epochs 3 --log-every 1 -o good.st $o
	is "$rc" 1 "$o: exit 1"
	like "$err" "${o%% *} (no/.*: cannot create \(directory no\)|isdir: is a directory)" "$o: named"
	unlike "$out" "epoch=" "$o: ... before any work"
	ok test ! -e good.st "$o: ... nothing written"
done

# an output that is one of the inputs: refused before the work, the input intact
cp small.tfr own.tfr
for o in "--log own.tfr" "-o own.tfr" "--checkpoint own-link.tfr" "--timeline own.tfr"; do
	ln -sf own.tfr own-link.tfr
	run dp-train --train 'own.tf[r]' "${BASE[@]}" --log-every 1 $o
	is "$rc" 1 "$o, the training file: exit 1"
	like "$err" "^dp-train: ${o%% *} own(-link)?.tfr: is one of the training files: it would be (replaced|emptied before it is read)$" "... says so"
	unlike "$out" "epoch=" "... before any work"
	ok cmp -s own.tfr small.tfr "... the training file intact"
done
run dp-train --train small.tfr --val own.tfr "${BASE[@]}" -o own.tfr
like "$err" "-o own.tfr: is one of the validation files" "-o the validation file: refused"
dp-train --train own.tfr "${BASE[@]}" --log-every 1 >> own.tfr 2>own.err
is "$?" 1 "the log on stdout appended to the training file: exit 1"
like "$(cat own.err)" "stdout: is one of the training or validation files" "... says so"
ok cmp -s own.tfr small.tfr "... the training file intact"

# ---- determinism and resume -------------------------------------------------------
run dp-train --train small.tfr --val val.tfr "${BASE[@]}" --epochs 2 --log-every 3 -o b.st
same_file a.st b.st "same seed and flags: bit-identical checkpoint"
run dp-train --train small.tfr "${BASE[@]}" --epochs 2 --prefetch 3 -o c.st
same_file a.st c.st "the reader thread changes nothing"
run dp-train --train small.tfr "${BASE[@]}" --epochs 2 --seed 5 -o d.st
not_ok cmp -s a.st d.st "another seed: another checkpoint"
# 3 epochs straight vs stopped mid-epoch then resumed (shuffle, dropout, Adam)
run dp-train --train small.tfr "${BASE[@]}" --epochs 3 -o full.st
run dp-train --train small.tfr "${BASE[@]}" --epochs 3 --max-steps 10 -o half.st
is "$rc" 0 "stopped at --max-steps"
run dp-train --train small.tfr --resume half.st --prefetch 0 -q -o resumed.st
is "$rc" 0 "resumed with settings from the checkpoint"
same_file full.st resumed.st "resume: bit-identical to the uninterrupted run"
# re-submitting a job that stopped at --max-steps: no update, the same bytes
cp half.st again.st
for i in 1 2; do
	run dp-train --train small.tfr --resume again.st --max-steps 10 -o again.st
	is "$rc" 0 "--resume of a checkpoint at --max-steps (run $i): exit 0"
	same_file again.st half.st "... no update: the same checkpoint, byte for byte (run $i)"
done
like "$err" "again.st: at step 10 already \(--max-steps 10\): nothing to train" "... says so"
run dp-train --train small.tfr --resume half.st --max-steps 12 -q -o more.st
is "$($PY -c 'import json,struct,sys; f=open(sys.argv[1],"rb"); n=struct.unpack("<Q",f.read(8))[0]; print(json.loads(f.read(n))["__metadata__"]["step"])' more.st)" 12 \
	"--max-steps 12 from step 10: two updates"
run dp-train --train small.tfr "${BASE[@]}" --epochs 3 --max-steps 7 -o edge.st
run dp-train --train small.tfr --resume edge.st -q -o resumed2.st
same_file full.st resumed2.st "resume from an epoch boundary: bit-identical"
for opt in "sgd --momentum 0.9 --nesterov --weight-decay 1e-3" "adamw --lr-schedule cosine --warmup 4"; do
	dp-train --train small.tfr "${BASE[@]}" --epochs 2 --optimizer $opt -o o1.st >/dev/null
	dp-train --train small.tfr "${BASE[@]}" --epochs 2 --optimizer $opt --max-steps 5 -o o2.st >/dev/null
	dp-train --train small.tfr --resume o2.st -q -o o3.st >/dev/null
	same_file o1.st o3.st "resume with ${opt%% *}: bit-identical"
done
# periodic checkpoints with templates; --init
run dp-train --train small.tfr "${BASE[@]}" --epochs 2 --checkpoint-every 5 --checkpoint 'ck-{step}.st'
is "$(ls ck-*.st | sort -V | tr '\n' ' ')" "ck-5.st ck-10.st ck-14.st " "--checkpoint-every 5 with {step}"
rm -f ck-*.st
run dp-train --train small.tfr "${BASE[@]}" --epochs 2 --checkpoint-every 5 --checkpoint 'ck-{step}.st' -o end.st
is "$(ls ck-*.st | sort -V | tr '\n' ' ')" "ck-5.st ck-10.st ck-14.st " "... and with -o too: the series ends at the last step"
same_file ck-14.st end.st "... the state -o holds"
run dp-train --train small.tfr "${BASE[@]}" --epochs 3 --checkpoint-every 1e --checkpoint 'ep-{epoch}.st' -o final.st
is "$(ls ep-*.st | tr '\n' ' ')" "ep-1.st ep-2.st ep-3.st " "--checkpoint-every 1e with {epoch}: the last epoch's too"
same_file ep-3.st final.st "... the state -o holds"
# the cosine schedule's rates as set, not with a schedule's rounding noise
# (epoch 3 of 3 at lr 0.01: 0.0025, which the arithmetic makes 0.0025000000000000014)
run dp-train --train small.tfr "${BASE[@]}" --lr 0.01 --lr-schedule cosine --epochs 3 --log-every 1000 -o cos.st
is "$(grep -o 'lr=[^ ]*' <<<"$out" | tr '\n' ' ')" "lr=0.01 lr=0.0075 lr=0.0025 " "--lr-schedule cosine: lr=0.0075, lr=0.0025"
# a --on-epoch hook's time is not training: left out of samples_per_sec (a
# line of 2 epochs' worth of samples took well under the hook's 3 s)
run dp-train --train small.tfr "${BASE[@]}" --epochs 2 --log-every 1000 --on-epoch 'sleep 3' -o h.st
is "$rc" 0 "--on-epoch 'sleep 3'"
read -r n r < <(sed -n 's/^epoch=2 .*samples_per_sec=\([0-9.]*\).*/\1/p' <<<"$out" |
	awk -v n="$(tfr-cat -c small.tfr)" '{ print n, $1 }')
ok awk -v n="$n" -v r="$r" 'BEGIN { exit !(r > 0 && n / r < 3) }' \
	"... epoch 2's samples_per_sec leaves the hook out ($n samples at $r/s)"
# a slow run's samples_per_sec keeps 3 significant digits (resnet50 on a
# CPU trains 3.4/s, which whole samples print as 3): 16 records each 0.4 s
for i in 1 2 3 4; do $MK slow$i.tfr random --n 16 --shape 1x8x8 --classes 4 --seed $i; done
run dp-train --train-cmd 'for f in slow1.tfr slow2.tfr slow3.tfr slow4.tfr; do cat $f; sleep 0.4; done' \
	"${BASE[@]}" --shuffle-buffer 0 --log-every 1
rates=$(sed -n 's/.*samples_per_sec=\([^ ]*\).*/\1/p' <<<"$out" | tr '\n' ' ')
ok awk -v r="$rates" 'BEGIN { n = split(r, v, " "); for (i = 1; i <= n; i++) {
		if (v[i] !~ /^[0-9]+(\.[0-9]+)?$/) exit 1
		if (v[i] + 0 < 100) { slow++; t = v[i]; sub(/^[0.]*/, "", t); sub(/\./, "", t); if (length(t) < 3) exit 1 }
	} exit !(n == 4 && slow > 0) }' "... samples_per_sec under 100/s in decimals, 3 significant digits ($rates)"
run dp-train --train small.tfr --init ck-10.st --prefetch 0 --log-every 1 -o ft.st
is "$rc" 0 "--init takes the model from the checkpoint"
like "$out" "^epoch=1 step=1 " "--init starts a new run at step 1"
run dp-train --train small.tfr --resume a.st --model "$MLP" --input-shape 64
is "$rc" 1 "resume with another model: exit 1"
like "$err" "a.st: a checkpoint of model 'conv:4:3,.*' over 1x8x8, not 'dense:16,relu,dense:4' over 64" "resume with another model: message"
# --init of a checkpoint trained with another loss: the loss named (and,
# under make asan, stderr that is the message alone means LeakSanitizer
# reported nothing on this exit path: it keeps the exit status 1)
$MK vec.tfr random --n 20 --shape 1x8x8 --label-kind vector:4 --seed 7
dp-train --train vec.tfr --model "$MLP" --input-shape 64 --loss mse -q -o mse.st >/dev/null
run dp-train --train vec.tfr --init mse.st --model "$MLP" --input-shape 64 -q
is "$rc" 1 "--init of a checkpoint of another loss: exit 1"
is "$err" "dp-train: mse.st: a checkpoint of model '$MLP' over 64 trained with --loss mse, not xent (give --loss mse)" \
	"... names the loss that differs"
run dp-train --train small.tfr --resume half.st --batch-size 8 -o other.st
is "$rc" 1 "resume with another --batch-size: exit 1 (the data's position counts updates)"
like "$err" "half.st: saved by a run of global batch [0-9]+ \(1 x [0-9]+\); this run's is 8: .*resume it with --batch-size 16" \
	"... saying which batch size resumes it"
ok test ! -e other.st "... and writes nothing"
run dp-train --train small.tfr --resume a.st --optimizer sgd
like "$err" "holds adam state, not sgd's" "resume with another optimizer refused"
head -c 3000 a.st > trunc.st
run dp-train --train small.tfr --resume trunc.st
is "$rc" 1 "truncated checkpoint: exit 1"
like "$err" "trunc.st: tensor '[^']*': .*truncated" "truncated checkpoint: message"
# metadata that does not hold, under --resume: the checkpoint named, exit 1, no usage text
setmeta() { # SRC DST KEY=VALUE...
	$PY - "$@" <<'PY'
import json, struct, sys
src, dst = sys.argv[1], sys.argv[2]
b = open(src, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
for kv in sys.argv[3:]:
    k, v = kv.split("=", 1)
    h["__metadata__"][k] = v
hb = json.dumps(h).encode()
hb += b" " * (-len(hb) % 8)
open(dst, "wb").write(struct.pack("<Q", len(hb)) + hb + b[8 + n:])
PY
}
for kv in "model=garbage:model: item 0 'garbage': unknown layer" "input_shape=0x8:input shape '0x8': want" \
	"lr_schedule=wobble:lr schedule 'wobble'" "batch_size=0:'batch_size' is 0, outside 1..1048576" \
	"momentum=5:'momentum' is 5, outside 0..0.999999"; do
	setmeta half.st badmeta.st "${kv%%:*}"
	run dp-train --train small.tfr --resume badmeta.st -q
	is "$rc" 1 "--resume, metadata ${kv%%:*}: exit 1"
	like "$err" "^dp-train: badmeta.st: metadata:? ?${kv#*:}" "... names the checkpoint"
	unlike "$err" "usage:" "... without usage text"
done
run dp-train --train small.tfr --resume isdir -q
is "$err" "dp-train: isdir: is a directory, not a checkpoint" "--resume a directory: says so"
printf 'garbage!' > junk.st
run dp-train --train small.tfr --init junk.st
like "$err" "junk.st: " "not a checkpoint: names the file"

# ---- data input ----------------------------------------------------------------
# a name that exists is that file (d1.tfr holds other shapes: an error if read)
mkdir lit && cp small.tfr 'lit/d[1].tfr' && $MK lit/d1.tfr random --n 10 --shape 1x4x4 --classes 4
run dp-train --train 'lit/d[1].tfr' "${BASE[@]}"
is "$rc" 0 "--train 'd[1].tfr' that exists: that file, not d1.tfr"
run dp-train --train 'lit/?1.tfr' "${BASE[@]}"
like "$err" "lit/d1.tfr: record [0-9]+ at byte [0-9]+: feature 'image' has 16 values" "a name that does not exist: a pattern"
dp-train --train small.tfr "${BASE[@]}" --shuffle-buffer 0 --epochs 2 -o s0.st >/dev/null
run dp-train --train small.tfr.gz "${BASE[@]}" --shuffle-buffer 0 --epochs 2 -o gz.st
ok $PY "$DP_SRC/tests/torch_ref.py" same-weights s0.st gz.st "gzip input: the same training"
run dp-train --train - "${BASE[@]}" --shuffle-buffer 0 --epochs 2 -o stdin.st < small.tfr
ok $PY "$DP_SRC/tests/torch_ref.py" same-weights s0.st stdin.st "stdin over 2 epochs, cached in a file: the same training"
run dp-train --train - "${BASE[@]}" --shuffle-buffer 0 --epochs 2 --cache memory -o mem.st < small.tfr
ok $PY "$DP_SRC/tests/torch_ref.py" same-weights s0.st mem.st "stdin cached in memory: the same training"
run dp-train --train - "${BASE[@]}" --epochs 2 --cache none < small.tfr
is "$rc" 1 "a stream without a cache cannot be read twice"
like "$err" "stdin: a stream can be read only once" "says why"
run dp-train --train - "${BASE[@]}" --epochs 2 --cache-limit 1k < small.tfr
like "$err" "larger than the cache limit \(1 KiB\)" "cache limit enforced with a message"
run dp-train --train - "${BASE[@]}" --epochs 2 --cache-limit 2.5k < small.tfr
like "$err" "larger than the cache limit \(2.5 KiB\)" "... its size readable"
# a full --cache-dir: the cache file is named, not the stream (a small
# tmpfs in a private mount namespace)
if unshare -m true 2>/dev/null; then
	mkdir tiny
	run unshare -m sh -c 'mount -t tmpfs -o size=16k dptest-tiny tiny && exec "$@"' sh \
		dp-train --train - "${BASE[@]}" --epochs 2 --cache-dir tiny < small.tfr
	is "$rc" 1 "a full --cache-dir: exit 1"
	like "$err" "^dp-train: train: tiny/dp-train-cache\.[A-Za-z0-9]+ \(the cache of stdin\): write: No space left on device" \
		"... names the cache file"
else
	skip "no private mount namespace here (unshare -m)"
	skip "no private mount namespace here (unshare -m)"
fi
mkfifo fifo
(timeout 30 cat small.tfr > fifo &)
run dp-train --train fifo "${BASE[@]}" --shuffle-buffer 0 --epochs 2 -o fifo.st
ok $PY "$DP_SRC/tests/torch_ref.py" same-weights s0.st fifo.st "a FIFO: the same training"
run dp-train --train-cmd 'echo {epoch} >> epochs.txt; cat small.tfr' "${BASE[@]}" --shuffle-buffer 0 --epochs 2 -o cmd.st
ok $PY "$DP_SRC/tests/torch_ref.py" same-weights s0.st cmd.st "--train-cmd: the same training"
is "$(cat epochs.txt | tr '\n' ' ')" "1 2 " "--train-cmd re-run each epoch with {epoch}"
run dp-train --train-cmd 'cat small.tfr; exit 3' "${BASE[@]}"
is "$rc" 1 "a failing --train-cmd: exit 1"
like "$err" "command 'cat small.tfr; exit 3' exited with status 3" "a failing --train-cmd: message"
cp small.tfr part-0.tfr; cp val.tfr part-1.tfr
run dp-train --train 'part-*.tfr' "${BASE[@]}" --log-every 1000
like "$out" "epoch=1 step=9 " "a glob reads every file (130 records: 9 steps)"
run dp-train --train 'nothing-*.tfr' "${BASE[@]}"
like "$err" "nothing-\*.tfr: no file matches" "a glob matching nothing"
run dp-train --train small.tfr "${BASE[@]}" --last-batch drop --log-every 1000
like "$out" "epoch=1 step=6 " "--last-batch drop: 6 full batches"
run dp-train --train u8.tfr --model "$MLP" --input-shape 1x8x8 --decode-raw uint8 --scale 1/255 --shuffle-buffer 0 --log-every 1 -q
u8="$out"
run dp-train --train i64.tfr --model "$MLP" --input-shape 1x8x8 --scale 0.00392156862745098 --shuffle-buffer 0 --log-every 1 -q
is "$(echo "$out" | cut -d' ' -f1-4)" "$(echo "$u8" | cut -d' ' -f1-4)" "uint8 bytes and int64 lists of the same values, 1/255 and its decimal: same losses"
run dp-train --train f64.tfr --model "$MLP" --input-shape 1x8x8 --decode-raw float64 --scale 1/255 --shuffle-buffer 0 --log-every 1 -q
is "$(echo "$out" | cut -d' ' -f1-4)" "$(echo "$u8" | cut -d' ' -f1-4)" "float64 bytes: same losses"
run dp-train --train f32.tfr --model "$MLP" --input-shape 1x8x8 --decode-raw float32 --scale 1/255 --shuffle-buffer 0 --log-every 1 -q
is "$(echo "$out" | cut -d' ' -f1-4)" "$(echo "$u8" | cut -d' ' -f1-4)" "float32 bytes: same losses"
run dp-train --train u8.tfr --model "$MLP" --input-shape 64 --shuffle-buffer 0
like "$err" "u8.tfr: record 0 at byte 0: feature 'image' is a bytes list: give --decode-raw" "bytes without --decode-raw"
$MK reg.tfr random --n 40 --shape 6 --seed 4 --label-kind vector:3
run dp-train --train reg.tfr --model dense:8,tanh,dense:3 --input-shape 6 --loss mse --val reg.tfr --batch-size 8 -q
is "$rc" 0 "mse regression on vector labels"
like "$out" "epoch=1 step=5 loss=[0-9.e-]+ lr=" "mse lines have no accuracy"
like "$out" "val_loss=[0-9.e-]+ val_samples=40" "mse validation line"

# ---- bad input: message naming file, record and byte offset; no checkpoint -----
bad() { # mode record regex
	$MK bad.tfr random --n 40 --shape 1x8x8 --classes 4 --seed 9 --bad "$1:$2"
	rm -f bad.st
	run dp-train --train bad.tfr "${BASE[@]}" --shuffle-buffer 0 -o bad.st
	is "$rc" 1 "bad input ($1): exit 1"
	like "$err" "$3" "bad input ($1): message"
	ok test ! -e bad.st "bad input ($1): no checkpoint"
}
bad nolabel 17 "^dp-train: train: bad.tfr: record 17 at byte [0-9]+: no label 'label' \(the record has: image\)$"
bad nofeature 3 "bad.tfr: record 3 at byte [0-9]+: no feature 'image' \(the record has: label\)"
bad short 5 "bad.tfr: record 5 at byte [0-9]+: feature 'image' has 63 values, expected 64 \(the size of the input shape\)$"
run dp-train --train u8.tfr --decode-raw uint8 --model "$MLP" --input-shape 81 --shuffle-buffer 0 -q
like "$err" "u8.tfr: record 0 at byte 0: feature 'image' holds 64 bytes, expected 81 \(81 uint8 values: the size of the input shape\)$" \
	"raw bytes of the wrong length: found and expected"
run dp-train --train f32.tfr --decode-raw float32 --model "$MLP" --input-shape 81 --shuffle-buffer 0 -q
like "$err" "f32.tfr: record 0 at byte 0: feature 'image' holds 256 bytes, expected 324 \(81 float32 values: the size of the input shape\)$" \
	"... of float32 values"
bad nan 7 "bad.tfr: record 7 at byte [0-9]+: feature 'image': value 3 is NaN"
# a scale that makes values non-finite: the scale is named, not the data
run dp-train --train u8.tfr --decode-raw uint8 --model "$MLP" --input-shape 64 --scale 1e39 -q
is "$rc" 2 "--scale 1e39: a usage error"
like "$err" "^dp-train: --scale '1e39': beyond float32's range" "... naming --scale"
run dp-train --train u8.tfr --decode-raw uint8 --model "$MLP" --input-shape 64 --scale 3e38 --shuffle-buffer 0 -q
is "$rc" 1 "--scale 3e38 on bytes up to 255: exit 1"
like "$err" "u8.tfr: record 0 at byte 0: feature 'image': value [0-9]+ \([0-9]+\) times --scale 3e\+38 is beyond float32's range: lower --scale" \
	"... naming --scale, not the data"
bad label 2 "bad.tfr: record 2 at byte [0-9]+: label 'label' is 99, outside 0..3 \(the model has 4 classes\)"
bad crc 4 "bad.tfr: record 4 at byte [0-9]+: .*CRC"
head -c 1000 small.tfr > cut.tfr
run dp-train --train cut.tfr "${BASE[@]}" -o cut.st
is "$rc" 1 "truncated records: exit 1"
like "$err" "cut.tfr: record [0-9]+ at byte [0-9]+: " "truncated records: where"
# divergence: exit 3, the last good checkpoint kept
dp-train --train small.tfr "${BASE[@]}" -o good.st >/dev/null
cp good.st good.copy
run dp-train --train small.tfr --model "$MLP" --input-shape 64 --optimizer sgd --lr 1e6 --batch-size 16 -q --checkpoint-every 1 -o good.st
is "$rc" 3 "a NaN loss: exit 3"
like "$err" "loss is (NaN|infinite): training diverged|not finite" "a NaN loss: message"
ok $PY "$DP_SRC/tests/torch_ref.py" finite good.st "the checkpoint left behind is finite"

done_testing
