#!/usr/bin/env bash
# The GPU device kit (scripts/device-kit) works where our Debian packages
# are not: built here, unpacked in a root without them - an overlay of this
# machine's root in which every library the kit carries and Python does not
# load, and Open MPI's runtime (mpirun, orted, plugins, help texts, PMIx),
# are removed (whiteouts) - where the kit's dp-train finds its libraries in
# the kit, its mpirun runs two ranks that end with the same weights, and
# scripts/device-check --cpu runs its stages end to end (the GPU's checks
# skip; the CPU plumbing of each runs).  What is left untested is the GPU.
# Needs root (mount namespaces, overlayfs), nvcc and patchelf; skips
# without them.
. "${DP_SRC:-.}/tests/lib.sh"
cd "$T"

[ "$(id -u)" = 0 ] || { skip "not root: no mount namespace for the clean root"; done_testing; }
command -v patchelf >/dev/null || { skip "no patchelf (scripts/deps --test)"; done_testing; }
NVCC=${CUDA_HOME:-/usr/local/cuda}/bin/nvcc
[ -x "$NVCC" ] || command -v nvcc >/dev/null || { skip "no nvcc: the kit is a CUDA build"; done_testing; }
unshare -m true 2>/dev/null || { skip "unshare -m refused: no mount namespace"; done_testing; }
grep -qw overlay /proc/filesystems || { skip "no overlayfs in this kernel"; done_testing; }

# the kit, from this checkout, into the build folder (quick xz: the test
# unpacks it once)
run env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL DP_KIT_BUILD="$DP_BUILD/kit-build" DP_KIT_XZ=-0 \
	"$DP_SRC/scripts/device-kit" "$T/kit"
is "$rc" 0 "scripts/device-kit builds the kit"
[ "$rc" = 0 ] || { printf '%s\n' "$err" | tail -15 | sed 's/^/#   /'; done_testing; }
like "$err" "dptools-kit.tar.xz: [0-9]+ KiB" "it says what it made"
size=$(stat -c %s kit/dptools-kit.tar.xz)
ok [ "$size" -lt $((62 << 20)) ] "the kit fits what a device call carries ($((size >> 20)) MiB, at most ~60)"
mkdir x && tar -C x -xJf kit/dptools-kit.tar.xz
for f in bin/dp-train bin/mpirun bin/ip bin/tc bench/allreduce tests/cuda lib/libjansson.so.4 lib/libmpi.so.40 \
	lib/libmnl.so.0 ompi/bin/orterun env.sh MANIFEST data/train-images-idx3-ubyte.gz; do
	[ -e "x/$f" ] || missing_f="${missing_f:-} $f"
done
is "${missing_f:-}" "" "it holds the programs, ip and tc, the GPU unit test, bench/allreduce, the libraries, Open MPI, the data"
like "$(sed -n 2p x/MANIFEST)" "^commit: [0-9a-f]{40}" "its MANIFEST names the commit"
unlike "$(ls x/lib)" "libcudart|libcublas|libcudnn|libnccl|libc\.so|libstdc" \
	"not the CUDA libraries nor the C and C++ runtimes (the machine's own)"
unlike "$(ls x/lib)" "libdp\.so" "not libdp.so: the programs and bench/allreduce are linked with libdp.a"

# the clean root: this one less what the kit brings (what Python's torch
# loads stays: the plumbing runs torch on the CPU, as the GPU machine's
# Python does on its GPU)
$PY -c 'import numpy, torch, os, re
seen = set()
for l in open("/proc/self/maps"):
    m = re.search(r"(/\S+\.so[^/ ]*)$", l.strip())
    if m:
        seen.add(os.path.realpath(m.group(1)))
print("\n".join(sorted(seen)))' > py.libs
# a name in the system's library folder, through its links (Debian's /lib
# is a link to /usr/lib: the whiteouts go where the files really are)
real_name() { echo "$(readlink -f "$(dirname "$1")")/$(basename "$1")"; }
: > hide
for l in x/lib/*; do
	base=$(basename "$l")
	for f in /usr/lib/x86_64-linux-gnu/"$base"; do
		[ -e "$f" ] || continue
		grep -qxF "$(readlink -f "$f")" py.libs && continue
		real_name "$f"
		readlink -f "$f"
	done >> hide
done
multi=$(cc -print-multiarch)
for f in /usr/bin/mpirun /usr/bin/mpiexec /usr/bin/orterun /usr/bin/orted /etc/alternatives/mpirun \
	/etc/alternatives/mpiexec /usr/lib/$multi/openmpi /usr/share/openmpi /etc/openmpi \
	/usr/lib/$multi/pmix2 /usr/share/pmix; do
	[ -e "$f" ] || [ -L "$f" ] && real_name "$f"
done >> hide
sort -u hide -o hide
ok grep -q "libjansson" hide "the clean root lacks the kit's libraries ($(wc -l < hide) files hidden)"
mkdir -p up work root
while read -r f; do
	d=$(dirname "$f")
	while [ "$d" != / ] && [ ! -c "up$d" ]; do d=$(dirname "$d"); done
	[ "$d" = / ] || continue # inside a folder already hidden
	mkdir -p "up$(dirname "$f")"
	mknod "up$f" c 0 0
done < hide

cat > inside.sh <<EOF
set -u
# in the clean root: no jansson, no mpirun of the system's
ls /usr/lib/$multi/libjansson.so.4 2>/dev/null && echo "jansson still visible"
command -v orted && echo "orted still visible"
export DP_KIT=$T/x
. \$DP_KIT/env.sh
export DP_BACKEND=cpu DP_PYTHON=$PY
echo "ldd: \$(ldd \$DP_KIT/bin/dp-train | grep -c 'not found') not found; jansson from \$(ldd \$DP_KIT/bin/dp-train | sed -n 's/.*libjansson.so.4 => \([^ ]*\).*/\1/p')"
cd $T
$PY $DP_SRC/tests/mkexamples.py m.tfr random --n 256 --shape 1x8x8 --classes 4 --seed 1
timeout 120 mpirun -np 2 dp-train --train m.tfr --input-shape 1x8x8 --model conv:4:3,relu,flatten,dense:4 \
	--batch-size 32 --epochs 1 --log-every 2 --log-all-ranks -q -o m.st > mpi.out 2> mpi.err
echo "mpirun: \$?"
DP_CHECK_STAGES="env tests correct hosts" DP_CHECK_CORRECT="curve step precision" \
	$DP_SRC/scripts/device-check --cpu kit/dptools-kit.tar.xz out > check.out 2>&1
echo "device-check: \$?"
EOF
run timeout 600 unshare -m bash -c "
	mount -t overlay overlay -o lowerdir=/,upperdir=$T/up,workdir=$T/work $T/root || exit 90
	for d in proc sys dev; do mount --rbind /\$d $T/root/\$d; done
	mkdir -p $T/root$T $T/root$DP_SRC
	mount --bind $T $T/root$T
	mount --bind $DP_SRC $T/root$DP_SRC
	exec chroot $T/root bash $T/inside.sh"
if [ "$rc" = 90 ]; then
	skip "overlayfs over / refused here: $(printf '%s' "$err" | tail -1)"
	done_testing
fi
is "$rc" 0 "the kit runs in a root without our packages"
[ "$rc" = 0 ] || printf '%s\n' "$out" "$err" | tail -15 | sed 's/^/#   /'
unlike "$out" "still visible" "...where neither jansson nor Open MPI's runtime is"
like "$out" "ldd: 0 not found; jansson from $T/x/bin/../lib/libjansson.so.4" \
	"dp-train finds every library, ours in the kit"
like "$out" "mpirun: 0" "the kit's mpirun runs 2 ranks"
[ -s mpi.err ] && grep -v '^dp-train:' mpi.err | head -5 | sed 's/^/#   /'
is "$(sed -n 's/^rank=\([0-9]\) .*state_fnv1a64=\([0-9a-f]*\)$/\2/p' mpi.out | sort -u | wc -l)" 1 \
	"...whose ranks end with the same weights"
like "$out" "device-check: 0" "scripts/device-check --cpu ends with status 0"
s=$(cat out/summary.txt 2>/dev/null)
printf '%s\n' "$s" | sed 's/^/#   /'
like "$s" "^env +PASS" "its env stage passes (the libraries found)"
like "$s" "tests +SKIP unit-cuda: no CUDA device" "the GPU tests skip, saying why"
like "$s" "correct +PASS 10 updates" "the loss-curve plumbing runs (CPU against CPU)"
like "$s" "correct +PASS resnet18 step" "the resnet18 step runs against torch"
if printf '%s\n' "$s" | grep -q '^hosts *SKIP'; then
	skip "hosts stage: $(printf '%s\n' "$s" | sed -n 's/^hosts *SKIP //p')"
else
	like "$s" "hosts +PASS [0-9]+ allreduce figures on hosts emulated with the kit's ip, tc and mpirun" \
		"the hosts stage emulates 2 hosts with the kit's own ip, tc and mpirun (the system's lack their libraries)"
	like "$s" "hosts +INFO allreduce of 1.0MiB, 2 hosts at 1gbit, fp32 ring: bus bandwidth [0-9.]+ Gbit/s, [0-9]+% of the link \\(target 85%\\)" \
		"...and says each bus bandwidth against its target"
fi
unlike "$s" "FAIL" "no stage fails"
ok tar -tzf out/logs.tar.gz "its logs come back in one file (a gzip tar that lists)"
done_testing
