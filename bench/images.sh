#!/bin/sh
# bench/images.sh - the image input pipeline (lib/image, dp-train --decode
# image) against torchvision's DataLoader with PIL and against the decoder's
# own speed, on JPEGs of 500x375 (quality 90, made here by Pillow: color
# gradients, noise and ellipses).
#
#  1. decode + RandomResizedCrop(224) + horizontal flip + normalise to
#     float CHW: libdp on 2 threads (bench/images.c, dp_image_transform)
#     vs torchvision (RandomResizedCrop(224), RandomHorizontalFlip,
#     ToTensor, Normalize) through a DataLoader of 2 workers, batch 64, one
#     warm-up pass, then timed passes; and vs the ceiling: a loop over
#     tjDecompress2 to RGB at full size on 2 threads (bench/images.c).
#  2. dp-train samples/s (median of its log lines after the first) on
#     image records (random-resized-crop,flip) with 0, 1, 2 decode threads,
#     against raw uint8 records of the same images already resized to
#     64x64, for two models at 3x64x64: one cheap enough that the input
#     decides (flatten,dense:10), and a CNN that costs more than decoding
#     (conv:32:3,relu,conv:32:3,relu,maxpool:2,flatten,dense:10).
#  3. peak RSS (/usr/bin/time) of dp-train reading an image shard of
#     IMAGES_SHARD_MB MiB (default 1024) and one a quarter that size, one
#     epoch, shuffle buffer 1000, 2 decode threads: the buffer holds
#     encoded records, so the memory does not follow the shard.
# ROUNDS (default 3) alternated runs of each side; medians and ratios.
set -eu
ROUNDS=${ROUNDS:-3}
N=${IMAGES_N:-400}
SHARD_MB=${IMAGES_SHARD_MB:-1024}
PY=/usr/bin/python3
DP_TRAIN=${DP_TRAIN:-dp-train}
. bench/libdp.sh.inc

if ! $PY -c 'import PIL, torchvision' 2>/dev/null; then
	echo "bench/images.sh: SKIP: python3-pil and python3-torchvision are not installed"
	exit 0
fi
libdp_cc images

$PY - "$N" "$T/jpg" "$T/raw.json" <<'PYEOF'
import sys, os, json, base64
import numpy as np
from PIL import Image, ImageDraw
n, out, raw = int(sys.argv[1]), sys.argv[2], sys.argv[3]
rng = np.random.default_rng(0)
y, x = np.mgrid[0:375, 0:500]
with open(raw, "w") as r:
    for i in range(n):
        c = f"{out}/class{i % 2}"
        os.makedirs(c, exist_ok=True)
        a = np.stack([(x * (1 + i % 3) + i * 7) % 256, (y * 2 + i * 13) % 256, (x + y + i) % 256], -1)
        a = np.clip(a + rng.normal(0, 12, a.shape), 0, 255).astype(np.uint8)
        im = Image.fromarray(a)
        d = ImageDraw.Draw(im)
        for k in range(6):
            x0, y0 = rng.integers(0, 450), rng.integers(0, 330)
            d.ellipse([x0, y0, x0 + rng.integers(20, 120), y0 + rng.integers(20, 120)],
                      fill=tuple(int(v) for v in rng.integers(0, 256, 3)))
        im.save(f"{c}/{i:05d}.jpg", quality=90)
        px = np.array(im.resize((64, 64), Image.BILINEAR)).transpose(2, 0, 1).tobytes()
        r.write(json.dumps({"image": {"bytes": [base64.b64encode(px).decode()]},
                            "label": {"int64": [i % 2]}}) + "\n")
PYEOF

cat > "$T/peer.py" <<'PYEOF'
import sys, time, torch
import torchvision.transforms as T
from torchvision.datasets import ImageFolder
torch.set_num_threads(1)
tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
ds = ImageFolder(sys.argv[1], transform=tf)
dl = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True, num_workers=2,
                                 persistent_workers=True)
for _ in dl: pass  # workers started, files cached
passes = int(sys.argv[2])
t = time.perf_counter()
for _ in range(passes):
    for _ in dl: pass
print(f"{passes * len(ds) / (time.perf_counter() - t):.0f}")
PYEOF

median() { tr ' ' '\n' | grep . | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1 /proc/loadavg)"
echo "images: $N JPEGs of 500x375, $(du -sk "$T/jpg" | cut -f1) KiB"

# ---- 1. decode + augment -------------------------------------------------------
# wall-clock images/s of each side, and, for the two C loops, their CPU
# seconds (user + sys, /usr/bin/time): on a shared machine the CPU time
# ratio is the steadier one
cpu() { /usr/bin/time -f '%U %S' -o "$T/cpu" "$@" > "$T/rate" && awk '{print $1 + $2}' "$T/cpu"; }
a= b= c= ca= cc=
for r in $(seq "$ROUNDS"); do
	ca="$ca $(cpu "$T/images" transform 2 3 "$T"/jpg/*/*.jpg)" a="$a $(cat "$T/rate")"
	b="$b $($PY "$T/peer.py" "$T/jpg" 3)"
	cc="$cc $(cpu "$T/images" decode 2 3 "$T"/jpg/*/*.jpg)" c="$c $(cat "$T/rate")"
done
ma=$(echo "$a" | median) mb=$(echo "$b" | median) mc=$(echo "$c" | median)
mca=$(echo "$ca" | median) mcc=$(echo "$cc" | median)
awk -v a="$ma" -v b="$mb" -v c="$mc" -v ra="$a" -v rb="$b" -v rc="$c" -v ca="$mca" -v cc="$mcc" \
	-v n=$((3 * N)) 'BEGIN {
	printf "decode+RandomResizedCrop(224)+flip+normalise, 2 threads: %d images/s (runs:%s), %.2f ms CPU an image\n", a, ra, 1000 * ca / n
	printf "torchvision DataLoader, PIL, 2 workers:                   %d images/s (runs:%s)\n", b, rb
	printf "tjDecompress2 alone, full size, 2 threads (the ceiling):  %d images/s (runs:%s), %.2f ms CPU an image\n", c, rc, 1000 * cc / n
	printf "ratio vs torchvision %.2fx the rate; vs the decode alone %.2fx the time (wall), %.2fx the CPU time\n", a / b, c / a, ca / cc
}'

# ---- 2. dp-train on image vs raw records ------------------------------------------
tfr-cat --encode images "$T/jpg" > "$T/img.tfrecord"
tfr-cat --encode json "$T/raw.json" > "$T/raw.tfrecord"
rate() { # records model extra-options...
	f=$1 m=$2
	shift 2
	$DP_TRAIN --train "$f" --model "$m" --input-shape 3x64x64 --scale 1/255 \
		--batch-size 32 --epochs 3 --shuffle-buffer 256 --log-every 4 -q "$@" |
		sed -n 's/.*samples_per_sec=\([0-9.]*\).*/\1/p' | sed 1d | sort -n |
		awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'
}
AUG="--decode image --augment random-resized-crop,flip"
for model in flatten,dense:10 conv:32:3,relu,conv:32:3,relu,maxpool:2,flatten,dense:10; do
	raw= i0= i1= i2=
	for r in $(seq "$ROUNDS"); do
		raw="$raw $(rate "$T/raw.tfrecord" $model --decode-raw uint8)"
		i0="$i0 $(rate "$T/img.tfrecord" $model $AUG)"
		i1="$i1 $(rate "$T/img.tfrecord" $model $AUG --decode-threads 1)"
		i2="$i2 $(rate "$T/img.tfrecord" $model $AUG --decode-threads 2)"
	done
	mr=$(echo "$raw" | median)
	echo "dp-train $model, raw uint8 records (3x64x64): $mr samples/s (runs:$raw)"
	for k in 0 1 2; do
		eval "v=\$i$k"
		m=$(echo "$v" | median)
		awk -v k=$k -v m="$m" -v r="$mr" -v runs="$v" 'BEGIN {
			printf "    image records, %d decode threads: %d samples/s (runs:%s) = %.2fx raw\n", k, m, runs, m / r }'
	done
done

# ---- 3. memory on a large image shard -------------------------------------------------
if [ -x /usr/bin/time ]; then
	one=$(wc -c < "$T/img.tfrecord")
	for mb in $((SHARD_MB / 4)) "$SHARD_MB"; do
		k=$(( (mb * 1048576 + one - 1) / one ))
		: > "$T/big.tfrecord"
		for i in $(seq "$k"); do cat "$T/img.tfrecord"; done >> "$T/big.tfrecord"
		t0=$(date +%s)
		/usr/bin/time -f %M -o "$T/rss" $DP_TRAIN --train "$T/big.tfrecord" --decode image \
			--augment random-resized-crop,flip --model flatten,dense:10 --input-shape 3x64x64 \
			--scale 1/255 --batch-size 32 --shuffle-buffer 1000 --decode-threads 2 -q \
			--log-every 1000000 > /dev/null
		echo "$(wc -c < "$T/big.tfrecord") $((k * N)) $(cat "$T/rss") $(( $(date +%s) - t0 ))"
		rm -f "$T/big.tfrecord"
	done | awk '{ printf "image shard of %.0f MiB (%d images), 1 epoch, shuffle buffer 1000: peak RSS %.1f MiB, %d s\n", $1 / 1048576, $2, $3 / 1024, $4 }'
fi
