#!/bin/bash
# image-damage.t - a damaged image costs itself and nothing else: every
# truncation point of a JPEG, each followed by the whole file, through one
# decoder (the whole always decodes); the same through tfr-cat --encode
# images, dp-train (training and validation) and dp-eval with --skip-corrupt,
# at 0 and 2 decode threads: exactly the damaged images skipped, counted in
# the last lines and the metrics JSON, and gated by --max-skipped; a stream of
# JPEG tables alone; a progressive JPEG whose scans pass over its blocks too
# often (a scan bomb) refused by the bound.
. "${DP_SRC:-.}/tests/lib.sh"
cd "$T" || exit 1
IMG="$DP_BUILD/tests/imgtool"
require "python3-pil is not installed (scripts/deps --test)" $PY -c 'import PIL, numpy'
$PY - <<'PYEOF' || exit 1
import numpy as np
from PIL import Image
rng = np.random.default_rng(7)
a = rng.integers(0, 255, (12, 16, 3)).astype(np.uint8)
Image.fromarray(a).save("base.jpg", quality=90)
Image.fromarray(a).save("prog.jpg", quality=90, progressive=True)
Image.fromarray(a[..., 0]).save("gray.jpg", quality=90)
import os
for c in ("cat", "dog"):
    os.makedirs("set/" + c)
    for i in range(4):
        b = rng.integers(0, 255, (12, 16, 3)).astype(np.uint8)
        Image.fromarray(b).save(f"set/{c}/good{i}.jpg", quality=90)
# the tables alone: SOI, then every segment before SOF0 (DQT, DHT...), EOI
j = open("base.jpg", "rb").read()
open("tables.jpg", "wb").write(j[:j.index(b"\xff\xc0")] + b"\xff\xd9")
PYEOF

# ---- the library: every prefix, then the whole, through one decoder ----------------------
for f in base.jpg prog.jpg gray.jpg; do
	n=$(stat -c %s $f)
	for crop in none center; do
		run "$IMG" cuts $f 3 $crop
		is "$out" "cuts $n refused $n whole-failed 0" \
			"$f ($crop crop): each of its $n prefixes refused, and the whole decodes after every one $err"
	done
done
run "$IMG" probe tables.jpg
is "$rc" 1 "a JPEG of tables alone (SOI DQT DHT EOI): refused"
like "$err" "tables.jpg: JPEG: .*(no image|Premature|Empty)" "... with libjpeg's reason, not a size"
unlike "$err" "pixels" "... no image size made up"

# ---- a scan bomb: 66 scans, each over all of a gray image's blocks ------------------------
if command -v jpegtran >/dev/null; then
	{ echo "0: 0-0, 0, 1;"; for k in $(seq 1 63); do echo "0: $k-$k, 0, 1;"; done
	  echo "0: 0-0, 1, 0;"; echo "0: 1-63, 1, 0;"; } > scans.txt
	jpegtran -scans scans.txt gray.jpg > bomb.jpg
	ok test "$(jpegtran -scans scans.txt gray.jpg | wc -c)" -gt 200 "jpegtran writes the scan bomb"
	run "$IMG" decode bomb.jpg 1
	is "$rc" 3 "a JPEG whose 66 scans pass over its blocks 65 times: refused by the bound (DP_ELIMIT)"
	like "$err" "bomb.jpg: JPEG: 33 scans decode its blocks more than 32 times over" "... saying so"
	run "$IMG" transform bomb.jpg 1 8 8 center 0 0 1
	is "$rc" 3 "... on the crop path too"
	jpegtran -progressive gray.jpg > prog-gray.jpg
	run "$IMG" decode prog-gray.jpg 1
	is "$rc" 0 "jpegtran's own progressive script (6 scans) decodes"
else
	skip "jpegtran (libjpeg-turbo-progs) is not installed (scripts/deps --test)"
fi

# ---- records: every prefix of a JPEG, each followed by a good image ------------------------
# cut.tfr: for each k, base.jpg's first k bytes (label 0), then the whole
# image (label 1); good.tfr: the whole images alone
$PY - <<'PYEOF' || exit 1
import base64, json
j = open("base.jpg", "rb").read()
def rec(b, y, name):
    return json.dumps({"image/encoded": {"bytes": [base64.b64encode(b).decode()]},
                       "image/filename": {"bytes": [base64.b64encode(name.encode()).decode()]},
                       "image/class/label": {"int64": [y]}}) + "\n"
with open("cut.json", "w") as c, open("good.json", "w") as g:
    for k in range(len(j)):
        c.write(rec(j[:k], 0, f"cut{k}.jpg"))
        c.write(rec(j, 1, f"good{k}.jpg")); g.write(rec(j, 1, f"good{k}.jpg"))
PYEOF
tfr-cat --encode json cut.json > cut.tfr && tfr-cat --encode json good.json > good.tfr || exit 1
NCUT=$(stat -c %s base.jpg)
M=(--decode image --model flatten,dense:2 --input-shape 3x8x8 --scale 1/255 --batch-size 16
	--shuffle-buffer 0 --seed 1 --epochs 1 --skip-corrupt -q)
for th in 0 2; do
	run timeout 120 dp-train --train cut.tfr --val cut.tfr "${M[@]}" --decode-threads $th \
		--max-skipped 100% -o cut$th.st
	is "$rc" 0 "dp-train, $th decode threads: trains past the $NCUT damaged images"
	is "$(grep -c '; skipped$' <<<"$err")" $((2 * NCUT)) \
		"... exactly the $NCUT damaged ones skipped, in training and in validation"
	like "$out" "epoch=1 step=[0-9]+ loss=[^ ]+ accuracy=[^ ]+ lr=[^ ]+ samples_per_sec=[0-9.]+ skipped=$NCUT\$" \
		"... the training line counts them: skipped=$NCUT"
	like "$out" "val_samples=$NCUT val_skipped=$NCUT\$" "... the validation line: every good image, val_skipped=$NCUT"
	run timeout 60 dp-eval --model cut$th.st --data cut.tfr --skip-corrupt --decode-threads $th \
		--max-skipped $NCUT --json cut$th.json --require 'accuracy>=0.5'
	is "$rc" 0 "dp-eval, $th decode threads: the good images evaluated"
	like "$out" "^samples=$NCUT skipped=$NCUT skipped_fraction=0.5 loss=" "... samples=$NCUT skipped=$NCUT"
	is "$($PY -c 'import json,sys; m=json.load(open(sys.argv[1]))["metrics"]; print(m["samples"]["value"], m["skipped"]["value"], m["skipped_fraction"]["value"])' cut$th.json)" \
		"$NCUT $NCUT 0.5" "... and so does the metrics JSON"
	ok cmp -s cut0.st cut$th.st "... the same model whatever the threads"
done
run timeout 60 dp-train --train good.tfr "${M[@]}" -o good.st
is "$rc" 0 "the good images alone train"
is "$($PY "$DP_SRC/tests/maxdiff.py" good.st cut0.st)" 0.0 "... to the model trained past the damaged ones, to the bit"

# ---- the limit on skipped records (default 1%) ---------------------------------------------
run timeout 60 dp-eval --model cut0.st --data cut.tfr --skip-corrupt --json gate.json
is "$rc" 3 "dp-eval: half the records skipped fails the default --max-skipped 1% as a gate"
like "$err" "gate --max-skipped 1% failed: skipped_fraction is 0.5" "... saying so"
is "$($PY -c 'import json,sys; g=json.load(open(sys.argv[1]))["gates"][-1]; print(g["metric"], g["op"], g["threshold"], g["passed"])' gate.json)" \
	"skipped_fraction <= 0.01 False" "... the JSON holds the gate"
run timeout 60 dp-eval --model cut0.st --data cut.tfr --skip-corrupt --max-skipped $((NCUT - 1))
is "$rc" 3 "--max-skipped N: one more than N skipped fails"
run timeout 60 dp-eval --model cut0.st --data cut.tfr --skip-corrupt --json g2.json --require 'skipped<1'
like "$err" "gate skipped<1 failed: skipped is $NCUT" "--require can gate on skipped"
run timeout 60 dp-train --train cut.tfr "${M[@]}" -o x.st
is "$rc" 1 "dp-train: half the records skipped stops the run (default --max-skipped 1%)"
like "$err" "epoch 1: training: $NCUT of $((2 * NCUT)) records \(50%\) skipped as corrupt, more than --max-skipped 1% allows" \
	"... saying how many"
ok test ! -e x.st "... and writes no checkpoint"
run timeout 60 dp-train --train good.tfr --val cut.tfr "${M[@]}" -o x.st
is "$rc" 1 "... in validation too"
like "$err" "epoch 1: validation: $NCUT of $((2 * NCUT)) records" "... saying so"
run dp-eval --model cut0.st --data cut.tfr --max-skipped 5
is "$rc" 2 "--max-skipped without --skip-corrupt: a usage error"
run dp-train --train cut.tfr "${M[@]}" --max-skipped 5x -o x.st
is "$rc" 2 "--max-skipped 5x: a usage error"
like "$err" "want a count of records \(10\) or a percentage of those read \(1%, 0.5%\)" "... saying what it takes"

# ---- --resume after a skipped image: the true position, not batches x steps ---------------
# 40 images, the 3rd cut short; 4 a batch; stopped after 5 updates (the
# first batch took 5 records), resumed: the run a straight one makes
$PY - <<'PYEOF' || exit 1
import base64, json
j = open("base.jpg", "rb").read()
g = [open(f"set/{c}/good{i}.jpg", "rb").read() for c in ("cat", "dog") for i in range(4)]
with open("r.json", "w") as f:
    for k in range(40):
        b = j[:300] if k == 2 else g[k % 8]
        f.write(json.dumps({"image/encoded": {"bytes": [base64.b64encode(b).decode()]},
                            "image/class/label": {"int64": [k % 2]}}) + "\n")
PYEOF
tfr-cat --encode json r.json > r.tfr || exit 1
R=(--train r.tfr --decode image --model flatten,dense:2 --input-shape 3x8x8 --scale 1/255
	--batch-size 4 --shuffle-buffer 8 --seed 3 --skip-corrupt --max-skipped 1 -q)
for th in 0 2; do
	run timeout 60 dp-train "${R[@]}" --decode-threads $th --epochs 2 -o straight$th.st
	is "$rc" 0 "$th decode threads: a straight run of 2 epochs"
	run timeout 60 dp-train "${R[@]}" --decode-threads $th --epochs 2 --max-steps 5 -o half$th.st
	is "$rc" 0 "... stopped after 5 updates, the damaged image among them"
	run timeout 60 dp-train "${R[@]}" --decode-threads $th --epochs 2 --resume half$th.st -o resumed$th.st
	is "$rc" 0 "... resumed"
	is "$($PY "$DP_SRC/tests/maxdiff.py" straight$th.st resumed$th.st)" 0.0 \
		"... ends where the straight run does, to the bit"
done

# ---- folders: symbolic link loops, depth, files left out ------------------------------------
mkdir -p loop/cat loop/dog
cp set/cat/good0.jpg loop/cat/a.jpg && cp set/dog/good0.jpg loop/dog/b.jpg
ln -s .. loop/cat/up
run tfr-cat --encode images loop -o loop.tfr
is "$rc" 1 "a link back up the tree (cat/up -> ..): an error, not 32 records"
like "$err" "loop/cat/up: a loop: it leads back to loop " "... naming the link and where it leads"
ok test ! -e loop.tfr "... and nothing written"
rm loop/cat/up
ln -s . loop/dog/self1 && ln -s . loop/dog/self2
run timeout 20 tfr-cat --encode images loop -o loop.tfr
is "$rc" 1 "two links to . (2^31 folders to walk): an error at once"
rm loop/dog/self1 loop/dog/self2
ln -s ../dog loop/cat/alsodog
run tfr-cat --encode images loop -o loop.tfr
is "$rc" 1 "a second way into one folder: an error (each folder read once)"
like "$err" "loop/dog: the same folder as loop/cat/alsodog" "... naming both"
rm loop/cat/alsodog
d=loop/cat; for i in $(seq 1 40); do d=$d/d; done; mkdir -p "$d" && cp set/cat/good1.jpg "$d/deep.jpg"
printf 'gif' > loop/dog/c.gif; printf 'txt' > loop/dog/d.txt
run tfr-cat --encode images loop -o loop.tfr
is "$rc" 0 "a folder 41 deep is walked (it was dropped silently below 32)"
is "$(tfr-cat -c loop.tfr)" 3 "... its image encoded"
like "$err" "loop: left out 2 files that are not images ImageFolder reads \(\.jpg .*\.webp\) \(e.g. dog/c.gif\)" \
	"files that are not images: counted and said"

# ---- names and limits of image records ---------------------------------------------------
# --decode-images names a record without image/filename by its number in the
# stream, --skip counted
$PY - <<'PYEOF' || exit 1
import base64, json
j = base64.b64encode(open("base.jpg", "rb").read()).decode()
with open("noname.json", "w") as f:
    for k in range(5):
        f.write(json.dumps({"image/encoded": {"bytes": [j]}, "image/class/label": {"int64": [k]}}) + "\n")
PYEOF
tfr-cat --encode json noname.json > noname.tfr && mkdir out3 || exit 1
run tfr-cat --decode-images out3 --skip 3 noname.tfr
is "$rc" 0 "--decode-images --skip 3"
is "$(ls out3 | tr '\n' ' ')" "3.jpg 4.jpg " "... records 3 and 4 saved as 3.jpg and 4.jpg, not 0.jpg and 1.jpg"
# a class name with a line break would read back as two classes
mkdir -p nl/$'two\nlines' nl/one && cp base.jpg nl/one/a.jpg && cp base.jpg nl/$'two\nlines'/b.jpg
run tfr-cat --encode images --classes-out nl.txt nl -o nl.tfr
is "$rc" 1 "--classes-out with a class folder named 'two<newline>lines': refused"
like "$err" "class 1, \\$'two\\\\nlines', holds a line break" "... naming it escaped"
ok test ! -e nl.txt "... and no classes file"
# one record limit, one option: --max-record in tfr-cat (also for the image
# files it encodes), tfr-shard, dp-train, dp-eval
run tfr-cat --encode images --max-record 500 set -o big.tfr
is "$rc" 1 "--encode images --max-record 500: an image file over it refused"
like "$err" "a record of [0-9]+ bytes, more than --max-record 500" "... naming the limit"
run tfr-shard -n 1 --max-record 500 -o 'sh-{shard}.tfr' noname.tfr
is "$rc" 1 "tfr-shard --max-record 500: a longer record refused"
like "$err" "exceeds the maximum of 500 bytes" "... by the limit given"
run tfr-shard -n 1 --max-record 1M -o 'sh-{shard}.tfr' noname.tfr
is "$rc" 0 "... and --max-record 1M lets it through"
run dp-train --train noname.tfr --decode image --model flatten,dense:5 --input-shape 3x8x8 \
	--max-record 500 -q -o x.st
is "$rc" 1 "dp-train --max-record 500: refused as well"
like "$err" "exceeds the maximum of 500 bytes" "... by the same limit"
run dp-eval --model cut0.st --data noname.tfr --max-record 500
like "$err" "exceeds the maximum of 500 bytes" "dp-eval --max-record: the same"
done_testing
