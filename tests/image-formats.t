#!/usr/bin/env bash
# Every image torchvision's ImageFolder reads (issue 25): WebP (lossless,
# lossy, alpha, gray, gray+alpha), TIFF (raw, LZW, deflate, PackBits, JPEG,
# gray, RGBA, palette, 1-bit, CMYK, pages), BMP (24-bit, palette, gray,
# 1-bit, 32-bit), PPM and PGM (maxval 255 and others, samples past it),
# made by Pillow and decoded equal to its Image.open(f).convert("RGB"/"L"),
# bit for bit; refused like a bad JPEG: truncated files (the ones stb_image
# would fill with black), a BMP bomb before any pixel buffer, animated WebP,
# 16-bit and ASCII PNM; tfr-cat --encode images takes a folder of them all
# (ImageFolder's count, its classes and each file's label), and dp-train and
# dp-eval --decode image read the records.
. "${DP_SRC:-.}/tests/lib.sh"
cd "$T" || exit 1
IMG="$DP_BUILD/tests/imgtool"
require "python3-pil and python3-torchvision are not installed (scripts/deps --test)" $PY -c 'import PIL, torchvision'

$PY - <<'PY' || exit 1
import numpy as np
from PIL import Image
rng = np.random.default_rng(1)
y, x = np.mgrid[0:75, 0:100]
a = np.stack([x * 255 // 99, y * 255 // 74, (x + y) * 3 % 256], -1)
rgb = np.clip(a + rng.integers(0, 40, a.shape), 0, 255).astype(np.uint8)
im = Image.fromarray(rgb)
rgba = Image.fromarray(np.dstack([rgb, rgb[..., :1]]))
pal, gray, bw = im.convert("P", palette=Image.ADAPTIVE), im.convert("L"), im.convert("1")
im.save("lossless.webp", lossless=True); im.save("lossy.webp", quality=80)
rgba.save("alpha.webp", lossless=True); gray.save("gray.webp", lossless=True)
im.save("raw.tif"); im.save("lzw.tif", compression="tiff_lzw")
im.save("deflate.tif", compression="tiff_adobe_deflate"); im.save("packbits.tif", compression="packbits")
im.save("jpeg.tif", compression="jpeg"); gray.save("gray.tif"); rgba.save("rgba.tif")
pal.save("pal.tif"); bw.save("bw.tif")
im.save("rgb.bmp"); pal.save("pal.bmp"); gray.save("gray.bmp"); bw.save("bw.bmp"); rgba.save("rgba.bmp")
im.save("rgb.ppm"); gray.save("gray.pgm")
im.convert("CMYK").save("cmyk.tif"); im.save("pages.tif", save_all=True, append_images=[gray])
im.convert("LA").save("la.webp", lossless=True)
# maxvals other than 255, samples past them too: Pillow scales and clips
hi = lambda top, n: bytes(rng.integers(0, top, n).astype(np.uint8))
open("max15.pgm", "wb").write(b"P5\n# a comment\n100 75\n15\n" + hi(17, 7500))
open("max100.ppm", "wb").write(b"P6 100 75 100\n" + hi(256, 22500))
open("max1.pgm", "wb").write(b"P5\n100 75\n1\n" + hi(3, 7500))
PY
cat >decode.py <<'PY'
import subprocess, sys
import numpy as np
from PIL import Image
f, c = sys.argv[1], int(sys.argv[2])
ref = np.array(Image.open(f).convert("L" if c == 1 else "RGB"))
r = subprocess.run([sys.argv[3], "decode", f, str(c)], capture_output=True, check=True)
got = np.frombuffer(r.stdout, np.uint8).reshape(ref.shape)
print(int(np.abs(got.astype(int) - ref.astype(int)).max()))
PY
FILES="lossless.webp lossy.webp alpha.webp gray.webp raw.tif lzw.tif deflate.tif packbits.tif jpeg.tif
gray.tif rgba.tif pal.tif bw.tif rgb.bmp pal.bmp gray.bmp bw.bmp rgba.bmp rgb.ppm gray.pgm
cmyk.tif pages.tif la.webp max15.pgm max100.ppm max1.pgm"
for f in $FILES; do
	for c in 1 3; do
		is "$($PY decode.py $f $c "$IMG" 2>&1)" 0 "$f to $c channel(s): Pillow's pixels exactly"
	done
done
is "$($IMG probe lossy.webp)" "webp 100 75 3 8 0" "probe: a WebP"
is "$($IMG probe rgba.tif)" "tiff 100 75 4 8 0" "probe: an RGBA TIFF"
is "$($IMG probe pal.bmp)" "bmp 100 75 3 8 0" "probe: a palette BMP (as RGB)"
is "$($IMG probe gray.pgm)" "pnm 100 75 1 8 0" "probe: a PGM"

# ---- refused ---------------------------------------------------------------------------
for f in lossy.webp lzw.tif pal.tif rgb.bmp pal.bmp rgb.ppm gray.pgm; do
	head -c $(($(stat -c %s $f) - 1)) $f >cut-$f
	run $IMG decode cut-$f 3
	isnt "$rc" 0 "$f short of its last byte: refused ($(head -n 1 <<<"$err" | cut -c 1-70))"
done
like "$($IMG decode cut-rgb.bmp 3 2>&1 >/dev/null)" "BMP: truncated: 22500 bytes of pixels from byte 54, the file has 22553" \
	"... a BMP's message (stb_image alone fills the rows with black)"
$PY - <<'PY' || exit 1
import struct
from PIL import Image
open("g16.pgm", "wb").write(b"P5\n4 3\n65535\n" + bytes(24))
open("ascii.ppm", "wb").write(b"P3\n2 1\n255\n1 2 3 4 5 6\n")
hdr = b"BM" + struct.pack("<IHHI", 54, 0, 0, 54) + struct.pack("<IiiHHIIiiII", 40, 100000, 100000, 1, 24, 0, 0, 0, 0, 0, 0)
open("bomb.bmp", "wb").write(hdr)
a, b = Image.new("RGB", (8, 8), (255, 0, 0)), Image.new("RGB", (8, 8), (0, 255, 0))
a.save("anim.webp", save_all=True, append_images=[b], duration=100)
PY
run $IMG decode bomb.bmp 3
like "$rc:$err" "^3:.*image of 100000x100000 pixels, more than the limit" "a BMP bomb: refused on its header (DP_ELIMIT)"
run $IMG decode anim.webp 3
like "$err" "WebP: animated" "an animated WebP: refused"
run $IMG decode g16.pgm 3
like "$err" "PNM: 16 bits a sample" "a 16-bit PGM: refused (Pillow would clip it, not scale it)"
run $IMG decode ascii.ppm 3
like "$err" "PNM P3: only binary" "an ASCII PPM: refused"
printf 'P5\n2 1\n0\n\0\0' >max0.pgm
run $IMG decode max0.pgm 1
like "$err" "PNM: a maxval of 0 \\(1 to 255 are read\\)" "a maxval of 0: refused (as Pillow does)"
printf 'P5\n2 1\n%s\n\0\0' "$(printf '6%.0s' $(seq 100))" >longmax.pgm
run timeout 10 $IMG decode longmax.pgm 1
is "$rc" 1 "a maxval of 100 digits: refused at once (the fuzzer's find)"

# ---- damaged images in records: one bad file never costs the good ones ----------------------
# dmg.tfr: for each format, its file cut at 16 places from inside the
# header to one byte short (label 0, named cut-K-FILE), each followed by the
# whole file (label 1); whole.tfr: the whole ones alone
$PY - <<'PY' || exit 1
import base64, json
b64 = lambda b: base64.b64encode(b).decode()
def rec(b, y, name):
    return json.dumps({"image/encoded": {"bytes": [b64(b)]}, "image/filename": {"bytes": [b64(name.encode())]},
                       "image/class/label": {"int64": [y]}}) + "\n"
n = 0
with open("dmg.json", "w") as d, open("whole.json", "w") as w:
    for f in ["lossy.webp", "lossless.webp", "lzw.tif", "jpeg.tif", "raw.tif", "rgb.bmp", "pal.bmp",
              "rgb.ppm", "gray.pgm"]:
        j = open(f, "rb").read()
        for k in sorted({8 + (len(j) - 9) * i // 15 for i in range(16)}):
            d.write(rec(j[:k], 0, f"cut-{k}-{f}")); n += 1
            d.write(rec(j, 1, f)); w.write(rec(j, 1, f))
open("ncut", "w").write(str(n))
PY
tfr-cat --encode json dmg.json >dmg.tfr && tfr-cat --encode json whole.json >whole.tfr || exit 1
NCUT=$(cat ncut)
D=(--decode image --model flatten,dense:2 --input-shape 3x8x8 --scale 1/255 --batch-size 16
	--shuffle-buffer 0 --seed 1 --epochs 1 -q)
run timeout 120 dp-train --train dmg.tfr "${D[@]}" -o never.st
is "$rc" 1 "a cut WebP, TIFF, BMP or PNM in the records stops training without --skip-corrupt"
like "$err" "dmg.tfr: record 0 at byte 0: cut-8-lossy.webp: not an image file" "... naming the file, record, byte offset, image and reason"
ok test ! -e never.st "... and writes no checkpoint"
for th in 0 2; do
	run timeout 120 dp-train --train dmg.tfr --val dmg.tfr "${D[@]}" --skip-corrupt --max-skipped 100% \
		--decode-threads $th -o dmg$th.st
	is "$rc" 0 "--skip-corrupt, $th decode threads: trains past the $NCUT cut images"
	is "$(grep -c ': cut-[0-9]*-[a-z]*\.[a-z]*: .*; skipped$' <<<"$err")" $((2 * NCUT)) \
		"... exactly the cut ones skipped, in training and validation, each named"
	like "$out" "val_samples=$NCUT val_skipped=$NCUT\$" "... every whole image validated"
done
for f in lossy.webp lzw.tif rgb.bmp gray.pgm; do
	like "$err" "dmg.tfr: record [0-9]+ at byte [1-9][0-9]*: cut-[0-9]+-$f: (WebP|TIFF|BMP|PNM): [^;]+; skipped" \
		"a cut $f: its record, byte offset, name and the decoder's reason"
done
ok cmp -s dmg0.st dmg2.st "... the same model whatever the threads"
run timeout 120 dp-train --train whole.tfr "${D[@]}" -o whole.st
is "$($PY "$DP_SRC/tests/maxdiff.py" whole.st dmg0.st)" 0.0 \
	"the model trained past the cut images is the one of the whole images alone, to the bit"
run timeout 60 dp-eval --model whole.st --data dmg.tfr --skip-corrupt --max-skipped 100% --predictions dp.jsonl
is "$rc" 0 "dp-eval --skip-corrupt: the whole images evaluated"
like "$out" "^samples=$NCUT skipped=$NCUT " "... samples=$NCUT skipped=$NCUT"

# ---- a folder of them all, as ImageFolder reads it -----------------------------------------
mkdir -p set/a set/b
i=0
for f in $FILES; do
	i=$((i + 1))
	cp $f "set/$([ $((i % 2)) = 0 ] && echo a || echo b)/$f"
done
cp lossy.webp set/a/extra.webp && cp rgb.bmp set/b/extra.bmp
run tfr-cat --encode images --classes-out cls.txt set -o set.tfr
is "$rc" 0 "tfr-cat --encode images of every format"
run $PY -c '
import torchvision
f = torchvision.datasets.ImageFolder("set")
print(len(f), ",".join(f.classes))
for p, i in sorted(f.samples):
    print(p[4:], i)'
n=$(head -n 1 <<<"$out" | cut -d" " -f1)
is "$(tfr-cat -c set.tfr)" "$n" "as many records as ImageFolder's samples ($n)"
tail -n +2 <<<"$out" >peer.txt
tfr-cat -j set.tfr | $PY -c '
import base64, json, sys
rows = []
for l in sys.stdin:
    d = json.loads(l)
    name = base64.b64decode(d["image/filename"]["bytes"][0]).decode()
    rows.append((name, d["image/class/label"]["int64"][0]))
for n, l in sorted(rows):
    print(n, l)' >ours.txt
same_file ours.txt peer.txt "each file with ImageFolder's label"
fmts=$(tfr-cat -j set.tfr | $PY -c '
import base64, json, sys
print(" ".join(sorted({base64.b64decode(json.loads(l)["image/format"]["bytes"][0]).decode() for l in sys.stdin})))')
is "$fmts" "BMP PNM TIFF WEBP" "image/format names the formats"
run dp-train --train set.tfr --decode image --input-shape 3x16x16 --scale 1/255 --model flatten,dense:2 \
	--epochs 1 -q -o set.st
is "$rc" 0 "dp-train --decode image reads them"
run dp-eval --model set.st --data set.tfr -q --predictions pred.jsonl
is "$rc:$(wc -l <pred.jsonl)" "0:$n" "dp-eval too: a prediction each"
done_testing
