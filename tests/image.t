#!/bin/bash
# image.t - JPEG and PNG records: libdp's decoding against Pillow (PNG
# exactly, JPEG within 1 level: the same libjpeg-turbo decodes both, and 0
# is what was measured), its bilinear resize against Pillow's (antialias
# on: within 1.5 levels of 255, Pillow rounding to 8 bits between its two
# passes) and torch's interpolate (antialias off: within 0.01), the eval
# resize + center crop against torchvision's; odd images (progressive,
# CMYK, grayscale, EXIF-rotated JPEGs; palette, 16-bit, alpha PNGs) and bad
# ones (truncated, CRC error, 0x0, bombs); tfr-cat --encode images and
# --decode-images; dp-train and dp-eval --decode image: Fashion-MNIST as
# PNG class folders trains to the same weights as its raw pixels, the same
# seed gives the same batches with 0, 1 or 3 decode threads; --layout hwc.
. "${DP_SRC:-.}/tests/lib.sh"
cd "$T" || exit 1
IMG="$DP_BUILD/tests/imgtool"
require "python3-pil and python3-torchvision are not installed (scripts/deps --test)" $PY -c 'import PIL, torchvision'

# ---- the images ---------------------------------------------------------------------
cat > mk.py <<'EOF'
import numpy as np
from PIL import Image
rng = np.random.default_rng(1)
y, x = np.mgrid[0:75, 0:100]
a = np.stack([x * 255 // 99, y * 255 // 74, (x + y) * 3 % 256], -1)
rgb = np.clip(a + rng.integers(0, 40, a.shape), 0, 255).astype(np.uint8)
im = Image.fromarray(rgb)
im.save("rgb.png"); im.save("rgb.jpg", quality=90)
im.save("prog.jpg", quality=90, progressive=True)
im.convert("L").save("gray.jpg", quality=90)
im.convert("CMYK").save("cmyk.jpg", quality=90)
im.convert("L").save("gray.png")
Image.fromarray(np.dstack([rgb, rgb[..., :1]])).save("rgba.png")
im.convert("P", palette=Image.ADAPTIVE).save("pal.png")
Image.fromarray(rgb[..., 0].astype(np.uint16) * 257 + 3).save("g16.png")
ex = Image.Exif(); ex[0x0112] = 6  # orientation: rotate 90 CW to display
im.save("exif.jpg", quality=90, exif=ex)
EOF
$PY mk.py || exit 1

# decode.py FILE C: imgtool's pixels against Image.open(FILE).convert(mode)
# (16-bit gray: its high byte); prints the largest difference
cat > decode.py <<'EOF'
import subprocess, sys
import numpy as np
from PIL import Image
f, c = sys.argv[1], int(sys.argv[2])
im = Image.open(f)
if im.mode in ("I;16", "I"):
    a = (np.array(im).astype(np.uint32) >> 8).astype(np.uint8)
    ref = a if c == 1 else np.dstack([a] * 3)
else:
    ref = np.array(im.convert("L" if c == 1 else "RGB"))
r = subprocess.run([sys.argv[3], "decode", f, str(c)], capture_output=True, check=True)
got = np.frombuffer(r.stdout, np.uint8).reshape(ref.shape)
print(int(np.abs(got.astype(int) - ref.astype(int)).max()))
EOF
for f in rgb.png gray.png rgba.png pal.png g16.png; do
	for c in 1 3; do
		is "$($PY decode.py $f $c "$IMG")" 0 "$f to $c channel(s): Pillow's pixels exactly"
	done
done
for f in rgb.jpg prog.jpg gray.jpg cmyk.jpg exif.jpg; do
	for c in 1 3; do
		d=$($PY decode.py $f $c "$IMG")
		ok test "${d:-9}" -le 1 "$f to $c channel(s): within 1 of Pillow (measured $d)"
	done
done
like "$($IMG probe cmyk.jpg)" "^jpeg 100 75 4 8" "a CMYK JPEG: 4 channels stored"
like "$($IMG probe pal.png)" "^png 100 75 3 8 1" "a palette PNG"
like "$($IMG probe g16.png)" "^png 100 75 1 16 0" "a 16-bit gray PNG"
is "$($IMG probe exif.jpg)" "jpeg 100 75 3 8 0" "EXIF orientation 6: the size as stored (not rotated)"

# ---- resize -----------------------------------------------------------------------------
cat > resize.py <<'EOF'
import subprocess, sys
import numpy as np, torch, torch.nn.functional as F
from PIL import Image
B = sys.argv[1]
im = Image.open("rgb.png"); a = np.array(im)
def ours(ow, oh, aa, box=None):
    args = [B, "resize", "rgb.png", "3", str(ow), str(oh), str(aa)] + [str(v) for v in box or ()]
    r = subprocess.run(args, capture_output=True, check=True)
    return np.frombuffer(r.stdout, np.float32).reshape(oh, ow, 3)
worst, worst_t = 0.0, 0.0
for ow, oh, box in [(48, 48, None), (45, 30, (5, 10, 70, 60)), (200, 150, None), (7, 7, None),
                    (33, 21, (3.5, 2.25, 90.75, 70.5))]:
    ref = np.array(im.resize((ow, oh), Image.BILINEAR, box=box)).astype(float)
    worst = max(worst, float(np.abs(ours(ow, oh, 1, box) - ref).max()))
    if box is None:
        t = torch.tensor(a).permute(2, 0, 1)[None].float()
        r = F.interpolate(t, size=(oh, ow), mode="bilinear", align_corners=False,
                          antialias=False)[0].permute(1, 2, 0).numpy()
        worst_t = max(worst_t, float(np.abs(ours(ow, oh, 0) - r).max()))
print(worst, worst_t)
EOF
read -r dpil dtorch < <($PY resize.py "$IMG")
ok awk -v d="$dpil" 'BEGIN { exit !(d != "" && d <= 1.5) }' \
	"antialiased resize within 1.5 of Pillow's BILINEAR (measured $dpil)"
ok awk -v d="$dtorch" 'BEGIN { exit !(d != "" && d <= 0.01) }' \
	"resize without antialias within 0.01 of torch's bilinear interpolate (measured $dtorch)"

# transform.py: the evaluation transform (Resize(N), CenterCrop) against
# torchvision on the PIL image; the training one: same seed same output,
# flip a mirror image, crop-pad's border zeros
cat > transform.py <<'EOF'
import subprocess, sys
import numpy as np, torchvision.transforms as T
from PIL import Image
B = sys.argv[1]
def ours(f, *args):
    r = subprocess.run([B, "transform", f, "3", *map(str, args)], capture_output=True, check=True)
    return np.frombuffer(r.stdout, np.float32)
ref = np.array(T.Compose([T.Resize(64), T.CenterCrop(56)])(Image.open("rgb.png"))).astype(float)
got = ours("rgb.png", 56, 56, "center", 0, 0, 1).reshape(3, 56, 56).transpose(1, 2, 0)
print("center", float(np.abs(got - ref).max()))
# a JPEG's crop is decoded alone (rows and columns of the region only)
ref = np.array(T.Compose([T.Resize(45), T.CenterCrop((40, 30))])(Image.open("rgb.jpg"))).astype(float)
got = ours("rgb.jpg", 40, 30, "center", 0, 0, 1).reshape(3, 40, 30).transpose(1, 2, 0)
print("jpeg-center", float(np.abs(got - ref).max()))
a = ours("rgb.jpg", 32, 32, "random", 0, 1, 7); b = ours("rgb.jpg", 32, 32, "random", 0, 1, 7)
c = ours("rgb.jpg", 32, 32, "random", 0, 1, 8)
print("same-seed", int((a == b).all()), "other-seed", int((a != c).any()))
plain = ours("rgb.png", 20, 30, "none", 0, 0, 1).reshape(3, 20, 30)
flips = 0
for s in range(16):
    o = ours("rgb.png", 20, 30, "none", 0, 1, s).reshape(3, 20, 30)
    assert (o == plain).all() or (o == plain[:, :, ::-1]).all()
    flips += (o != plain).any()
print("flips", flips)
zeros = 0
for s in range(16):
    o = ours("rgb.png", 20, 30, "none", 4, 0, s).reshape(3, 20, 30)
    zeros += (o == 0).all(axis=0).any()
print("padded", zeros)
EOF
run $PY transform.py "$IMG"
is "$rc" 0 "transforms run (flips are mirror images) $err"
d=$(sed -n 's/^center //p' <<<"$out")
ok awk -v d="$d" 'BEGIN { exit !(d != "" && d <= 1.5) }' \
	"eval resize + center crop within 1.5 of torchvision's Resize(64), CenterCrop(56) (measured $d)"
d=$(sed -n 's/^jpeg-center //p' <<<"$out")
ok awk -v d="$d" 'BEGIN { exit !(d != "" && d <= 1.5) }' \
	"a JPEG's center crop, decoded as a region, within 1.5 of torchvision on Pillow's full decode (measured $d)"
like "$out" "same-seed 1 other-seed 1" "random-resized-crop: the seed decides it all"
like "$out" "flips ([4-9]|1[0-2])"$'\n' "flip: about half of 16 seeds flip"
like "$out" "padded ([5-9]|1[0-6])" "crop-pad: shifted crops bring in zero borders"

# ---- bad images --------------------------------------------------------------------------
head -c 2000 rgb.jpg > trunc.jpg
$PY - <<'EOF'
import struct, zlib
d = bytearray(open("rgb.png", "rb").read())
i = d.index(b"IHDR") + 4 + 13; d[i] ^= 0xff  # IHDR's CRC
open("crc.png", "wb").write(d)
def png(w, h):
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    c = lambda t, b: struct.pack(">I", len(b)) + t + b + struct.pack(">I", zlib.crc32(t + b))
    return b"\x89PNG\r\n\x1a\n" + c(b"IHDR", ihdr) + c(b"IDAT", zlib.compress(b"\0" * 4)) + c(b"IEND", b"")
open("zero.png", "wb").write(png(0, 0))
open("huge.png", "wb").write(png(100000, 100000))
j = bytearray(open("rgb.jpg", "rb").read())
k = j.index(b"\xff\xc0") + 5                 # SOF0: height, width
j[k:k + 4] = struct.pack(">HH", 60000, 60000)
open("huge.jpg", "wb").write(j)
EOF
run "$IMG" decode trunc.jpg 3
isnt "$rc" 0 "a truncated JPEG is refused"
like "$err" "trunc.jpg: JPEG: Premature end of JPEG file" "... with libjpeg's reason"
run "$IMG" decode crc.png 3
isnt "$rc" 0 "a PNG with a CRC error is refused"
like "$err" "crc.png: PNG: invalid chunk checksum" "... with libspng's reason"
run "$IMG" decode zero.png 3
isnt "$rc" 0 "a 0x0 PNG is refused"
like "$err" "zero.png: PNG: .*width" "... said"
run "$IMG" decode huge.png 3
is "$rc" 3 "a 100000x100000 PNG header: refused by the pixel limit (nothing allocated)"
like "$err" "100000x100000 pixels, more than the limit of 89478485 .*--max-pixels" "... says the limit and the option"
run "$IMG" decode huge.jpg 1
is "$rc" 3 "a 60000x60000 JPEG header: refused too"
run "$IMG" decode rgb.jpg 3 1 7000
is "$rc" 3 "the limit is the caller's: 7000 pixels refuses 100x75"
run "$IMG" decode rgb.jpg 3 1 7500
is "$rc" 0 "... and 7500 lets it through"

# ---- tfr-cat --encode images ------------------------------------------------------------
mkdir -p photos/cat photos/dog/more
cp rgb.jpg photos/cat/a.jpg; cp gray.png photos/cat/b.png; cp pal.png photos/dog/more/c.PNG
echo notes > photos/dog/readme.txt
run tfr-cat --encode images --classes-out classes.txt photos -o photos.tfr
is "$rc" 0 "a folder of class folders encodes"
is "$(cat classes.txt)" "cat"$'\n'"dog" "--classes-out: the names in label order"
is "$(tfr-cat -c photos.tfr)" 3 "one record per image (readme.txt is not one)"
run tfr-cat --schema photos.tfr
like "$out" "image/encoded	bytes	3	1	1	" "--schema: image/encoded"
for f in image/format image/class/text image/filename; do
	like "$out" "$f	bytes	3	1	1" "--schema: $f"
done
for f in image/height image/width image/channels image/class/label; do
	like "$out" "$f	int64	3	1	1	-	-" "--schema: $f"
done
$PY - photos.tfr > fields.txt <<'EOF'
import json, subprocess, sys, base64
out = subprocess.run(["tfr-cat", "-j", sys.argv[1]], capture_output=True, check=True).stdout
for l in out.decode().splitlines():
    d = json.loads(l)
    b = lambda k: base64.b64decode(d[k]["bytes"][0]).decode()
    i = lambda k: d[k]["int64"][0]
    print(b("image/filename"), b("image/format"), i("image/height"), i("image/width"),
          i("image/channels"), i("image/class/label"), b("image/class/text"))
EOF
is "$(cat fields.txt)" "cat/a.jpg JPEG 75 100 3 0 cat
cat/b.png PNG 75 100 1 0 cat
dog/more/c.PNG PNG 75 100 3 1 dog" "the fields of tfrecord(5)'s image layout, from the headers"
# -j at a terminal (script(1) gives it one): an image as its size and kind,
# not thousands of base64 characters; short bytes values as they are
tty_j=$(script -qec "tfr-cat -j photos.tfr" /dev/null </dev/null | tr -d '\r' | head -n 1)
like "$tty_j" '"image/encoded":\{"bytes":\["<[0-9]+ bytes, JPEG>"\]\}' "-j at a terminal: an image as \"<N bytes, JPEG>\""
like "$tty_j" '"image/format":\{"bytes":\["SlBFRw=="\]\}' "... short values in base64 as always"
like "$(script -qec "tfr-cat -j --skip 2 photos.tfr" /dev/null </dev/null)" '"<[0-9]+ bytes, PNG>"' "... and a PNG as PNG"
unlike "$(tfr-cat -j photos.tfr | head -n 1)" "bytes, JPEG>" "-j to a pipe: every byte, in base64"
mkdir back
run tfr-cat --decode-images back photos.tfr
is "$rc" 0 "--decode-images writes the images out"
ok cmp -s back/cat/a.jpg rgb.jpg "... byte for byte (the bytes were copied unchanged)"
ok cmp -s back/dog/more/c.PNG pal.png "... under their image/filename"
run tfr-cat --decode-images back photos.tfr
is "$rc" 1 "--decode-images never replaces a file"
printf 'path,label\ncat/a.jpg,zebra\ndog/more/c.PNG,ant\n' > photos/list.csv
run tfr-cat --encode images photos/list.csv -o list.tfr
is "$rc" 0 "a PATH,LABEL list encodes"
is "$(tfr-cat -j list.tfr | sed -n 's/.*"image\/class\/label":{"int64":\[\([0-9]*\)\]}.*/\1/p')" "1
0" "names are numbered in sorted order (ant 0, zebra 1)"
printf 'cat/a.jpg\t7\n' > photos/list.tsv
is "$(tfr-cat --encode images photos/list.tsv | tfr-cat -j | grep -c '"int64":\[7\]')" 1 \
	"a TSV list with numbers: the numbers are the labels"
printf 'not an image' > photos/dog/bad.jpg
run tfr-cat --encode images photos -o bad.tfr
is "$rc" 1 "an image file that is not one fails the encode"
like "$err" "photos/dog/bad.jpg: not an image file" "... naming the file"
ok test ! -e bad.tfr "... and writes nothing"
run tfr-cat --encode images --skip-corrupt photos -o bad.tfr
is "$rc" 0 "--skip-corrupt passes over it"
is "$(tfr-cat -c bad.tfr)" 3 "... keeping the others"
rm photos/dog/bad.jpg

# ---- dp-train --decode image: PNG records = raw pixels ------------------------------------
cat > fm.py <<'EOF'
# the first N Fashion-MNIST training images as png/CLASS/INDEX.png, and IDX
# files of the same pixels in the order of the folder walk (class, name)
import gzip, os, struct, sys
import numpy as np
from PIL import Image
n = int(sys.argv[1]); D = "/usr/share/datasets/fashion-mnist"
with gzip.open(f"{D}/train-images-idx3-ubyte.gz") as f:
    f.read(16); x = np.frombuffer(f.read(n * 784), np.uint8).reshape(n, 28, 28)
with gzip.open(f"{D}/train-labels-idx1-ubyte.gz") as f:
    f.read(8); y = np.frombuffer(f.read(n), np.uint8)
order = sorted(range(n), key=lambda i: (y[i], i))
for i in range(n):
    os.makedirs(f"png/{y[i]}", exist_ok=True)
    Image.fromarray(x[i]).save(f"png/{y[i]}/{i:05d}.png")
with open("sub-images", "wb") as f:
    f.write(struct.pack(">IIII", 0x803, n, 28, 28)); f.write(x[order].tobytes())
with open("sub-labels", "wb") as f:
    f.write(struct.pack(">II", 0x801, n)); f.write(y[order].tobytes())
EOF
if [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
	$PY fm.py 300 || exit 1
	tfr-cat --encode images --classes-out fm-classes png > fm-png.tfr &&
		tfr-cat --encode idx sub-images sub-labels > fm-raw.tfr || exit 1
	FM=(--model conv:4:3,relu,maxpool:2,flatten,dense:10 --input-shape 1x28x28 --scale 1/255
		--shuffle-buffer 64 --seed 3 --epochs 2 --batch-size 16 -q)
	run timeout 120 dp-train --train fm-png.tfr --decode image "${FM[@]}" -o png.st
	is "$rc" 0 "dp-train --decode image trains on PNG records $err"
	run timeout 120 dp-train --train fm-raw.tfr --decode-raw uint8 "${FM[@]}" -o raw.st
	is "$rc" 0 "... and --decode-raw on the same pixels"
	is "$($PY "$DP_SRC/tests/maxdiff.py" png.st raw.st)" 0.0 "the same weights, to the bit"
	run timeout 60 dp-eval --model png.st --data fm-png.tfr --classes @fm-classes
	is "$rc" 0 "dp-eval reads the image settings from the checkpoint"
	like "$out" "samples=300 " "... every image"
	like "$out" "      [0-9]  " "... --classes @FILE from tfr-cat --classes-out"
	acc_png=$(sed -n 's/.* accuracy=\([0-9.]*\) .*/\1/p' <<<"$out")
	acc_raw=$(dp-eval --model raw.st --data fm-raw.tfr | sed -n 's/.* accuracy=\([0-9.]*\) .*/\1/p')
	is "$acc_png" "$acc_raw" "... the same accuracy as the raw model on raw records"
else
	skip "dataset-fashion-mnist is not installed"
fi

# ---- threads, augmentation, skipping -------------------------------------------------------
cp trunc.jpg photos/dog/trunc.jpg
tfr-cat --encode images photos > aug.tfr
AUG0=(--model conv:2:3,relu,flatten,dense:2 --input-shape 3x24x24 --scale 1/255
	--mean 0.485,0.456,0.406 --std 0.229,0.224,0.225 --augment random-resized-crop,flip
	--shuffle-buffer 4 --seed 5 --epochs 3 --batch-size 2 -q)
AUG=("${AUG0[@]}" --skip-corrupt --max-skipped 1)
run timeout 60 dp-train --train aug.tfr --decode image "${AUG[@]}" -o t0.st
is "$rc" 0 "random-resized-crop and flip train"
like "$err" "aug.tfr: record 3 at byte [0-9]+: dog/trunc.jpg: JPEG: Premature end of JPEG file; skipped" \
	"--skip-corrupt: the bad image named by file, record, byte offset, its name and reason"
run timeout 60 dp-train --train aug.tfr --decode image "${AUG[@]}" --decode-threads 1 -o t1.st
same_file t0.st t1.st "1 decode thread: the same batches, the same checkpoint"
run timeout 60 dp-train --train aug.tfr --decode image "${AUG[@]}" --decode-threads 3 --prefetch 0 \
	-o t3.st
same_file t0.st t3.st "3 decode threads and no reader thread: the same"
run timeout 60 dp-train --train aug.tfr --decode image "${AUG[@]}" --epochs 1 -o half.st
run timeout 60 dp-train --train aug.tfr --resume half.st --epochs 3 -q --skip-corrupt --max-skipped 1 -o resumed.st
is "$rc" 0 "a run with images resumes (its image settings from the checkpoint) $err"
is "$($PY "$DP_SRC/tests/maxdiff.py" t0.st resumed.st)" 0.0 "... and ends where the straight run does"
run timeout 60 dp-train --train aug.tfr --decode image "${AUG[@]}" --seed 6 -o t6.st
not_ok cmp -s t0.st t6.st "another seed: other crops"
run timeout 60 dp-train --train aug.tfr --decode image "${AUG0[@]}" -o bad.st
isnt "$rc" 0 "without --skip-corrupt a bad image stops training"
like "$err" "record 3 at byte [0-9]+: dog/trunc.jpg: JPEG: Premature end" "... naming it"
run timeout 60 dp-eval --model t0.st --data aug.tfr --skip-corrupt --max-skipped 1 --decode-threads 2
is "$rc" 0 "dp-eval: center crop, threads, --skip-corrupt"
like "$out" "samples=3 " "... the 3 good images"

# ---- --layout hwc --------------------------------------------------------------------------
$PY - <<'EOF'
import json, random
random.seed(1)
with open("chw.json", "w") as c, open("hwc.json", "w") as h:
    for i in range(8):
        v = [[[random.random() for _ in range(3)] for _ in range(2)] for _ in range(3)]  # C H W
        chw = [v[k][y][x] for k in range(3) for y in range(2) for x in range(3)]
        hwc = [v[k][y][x] for y in range(2) for x in range(3) for k in range(3)]
        lab = {"int64": [i % 2]}
        c.write(json.dumps({"x": {"float": chw}, "label": lab}) + "\n")
        dims = {"height": {"int64": [2]}, "width": {"int64": [3]}, "depth": {"int64": [3]}}
        h.write(json.dumps({"x": {"float": hwc}, "label": lab, **dims}) + "\n")
EOF
tfr-cat --encode json chw.json > chw.tfr && tfr-cat --encode json hwc.json > hwc.tfr
L=(--model flatten,dense:2 --feature x --seed 1 --batch-size 4 --epochs 2 -q)
dp-train --train chw.tfr --input-shape 3x2x3 "${L[@]}" -o chw.st &&
	dp-train --train hwc.tfr --input-shape 3x2x3 --layout hwc "${L[@]}" -o hwc.st
is "$($PY "$DP_SRC/tests/maxdiff.py" chw.st hwc.st)" 0.0 "--layout hwc: channels-last arrays train as their C x H x W copies"
run dp-train --train hwc.tfr --input-shape 2x3x3 "${L[@]}" -o x.st
is "$rc" 1 "an input shape given channels-last, against the record's own dims, fails"
like "$err" "the record says 2x3 pixels of 3 channels, but the input shape 2x3x3 is C x H x W: give --input-shape 3x2x3 --layout hwc" \
	"... and says the shape and layout to give"
run dp-train --train chw.tfr --input-shape 3x2x3 --decode image --label label "${L[@]}" -o x.st
is "$rc" 1 "--decode image on float features: refused"
like "$err" "--decode image wants one bytes value" "... saying why"
done_testing
