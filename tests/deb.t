#!/bin/bash
# deb.t - the Debian packages (debian/, scripts/deb): dpkg-buildpackage
# builds dptools, libdp0 and libdp-dev; each holds what it should; lintian
# finds no error; unpacked into a temporary root (dpkg -x), the programs
# run, their completion is there, and a program builds against libdp-dev
# through pkg-config and runs on libdp0's libdp.so.0.
. "${DP_SRC:-.}/tests/lib.sh"

# Build-Depends: every library package scripts/deps installs for the build
# (the compiler, make and libc are build-essential's)
bd=$(sed -n '/^Build-Depends:/,/^[A-Z]/p' "$DP_SRC/debian/control" | tr ',' '\n' |
	sed -n 's/^[A-Za-z-]*: *//; s/^ *\([a-z0-9][a-z0-9.+-]*\).*/\1/p' | sort -u)
missing=$(for p in $("$DP_SRC/scripts/deps" --list build); do
	case $p in gcc | make | libc6-dev) ;; *) grep -qx "$p" <<<"$bd" || echo "$p" ;; esac
done)
is "$missing" "" "debian/control's Build-Depends name every package of scripts/deps --list build"

for c in dpkg-buildpackage dh; do
	if ! command -v $c >/dev/null; then
		skip "$c not installed (dpkg-dev, debhelper: scripts/deps --test): packages not built"
		done_testing
	fi
done
V=$(sed -n 's/^VERSION := //p' "$DP_SRC/Makefile")
A=$(dpkg-architecture -qDEB_HOST_ARCH)
M=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
run timeout 900 "$DP_SRC/scripts/deb" "$T/debs"
is "$rc" 0 "scripts/deb (dpkg-buildpackage -us -uc -b) succeeds"
[ "$rc" = 0 ] || { diag "$err"; done_testing; }
for p in dptools libdp0 libdp-dev; do
	ok test -f "$T/debs/${p}_${V}_$A.deb" "${p}_${V}_$A.deb built"
done

# what each package holds (files and links, no directories)
files() { dpkg-deb -c "$T/debs/${1}_${V}_$A.deb" | awk '$1 !~ /^d/ {print $6}' | sed 's|^\./||' | sort; }
f=$(files dptools)
for p in tfr-cat tfr-shard s3-pipe dp-train dp-eval dp-ckpt dp-serve metrics-grep; do
	like "$f" "(^|$'\n')usr/bin/$p($'\n'|\$)" "dptools: usr/bin/$p"
	like "$f" "usr/share/man/man1/$p\.1\.gz" "dptools: man1/$p.1"
	like "$f" "usr/share/bash-completion/completions/$p($'\n'|\$)" "dptools: bash completion for $p"
done
like "$f" "usr/share/zsh/vendor-completions/_dptools" "dptools: zsh completion"
like "$f" "usr/share/man/man5/tfrecord\.5\.gz" "dptools: man5 pages"
like "$f" "usr/share/man/man7/dptools\.7\.gz" "dptools: man7/dptools.7"
like "$f" "usr/share/doc/dptools/examples/pipeline\.mk" "dptools: examples"
unlike "$f" "libdp|include/|man3" "dptools: nothing of libdp0 or libdp-dev"
is "$(files libdp0 | grep -v '^usr/share/doc/')" \
	"usr/lib/$M/libdp.so.0
usr/lib/$M/libdp.so.$V" "libdp0: libdp.so.$V and its soname link, only"
f=$(files libdp-dev)
like "$f" "usr/include/dptools/dp_record\.h" "libdp-dev: headers"
like "$f" "usr/lib/$M/libdp\.so($'\n'|\$)" "libdp-dev: the libdp.so link"
like "$f" "usr/lib/$M/libdp\.a" "libdp-dev: the static library"
like "$f" "usr/lib/$M/pkgconfig/libdp\.pc" "libdp-dev: libdp.pc"
like "$f" "usr/share/man/man3/libdp\.3\.gz" "libdp-dev: man3/libdp.3"
unlike "$f" "libdp\.so\.0" "libdp-dev: not the shared library itself"
like "$(dpkg-deb -f "$T/debs/libdp-dev_${V}_$A.deb" Depends)" "libdp0 \(= $V\)" "libdp-dev depends on libdp0 of its version"
like "$(dpkg-deb -I "$T/debs/libdp0_${V}_$A.deb" shlibs)" "^libdp 0 libdp0" "libdp0: shlibs for soname libdp.so.0"

if command -v lintian >/dev/null; then
	# (lintian leaves its MLDBM caches in TMPDIR: ours, removed with $T)
	run env TMPDIR="$T" timeout 300 lintian --allow-root "$T/debs/dptools_${V}_$A.changes"
	unlike "$out" "^E: " "lintian: no errors"
	[ -z "$out" ] || diag "$out"
else
	skip "lintian not installed (scripts/deps --test)"
fi

# unpacked into a root of our own
R="$T/root"
for p in dptools libdp0 libdp-dev; do dpkg -x "$T/debs/${p}_${V}_$A.deb" "$R"; done
for p in tfr-cat tfr-shard s3-pipe dp-train dp-eval dp-ckpt dp-serve metrics-grep; do
	is "$("$R/usr/bin/$p" --version)" "$p (dptools) $V" "the packaged $p runs (--version)"
done
run sh -c "'$R/usr/bin/tfr-cat' --encode=json '$FIX/tfr-cat/small.jsonl' | '$R/usr/bin/tfr-cat' -c"
is "$out" "$(grep -c . "$FIX/tfr-cat/small.jsonl")" "the packaged tfr-cat encodes and counts records"
is "$(readlink "$R/usr/lib/$M/libdp.so.0")" "libdp.so.$V" "libdp.so.0 -> libdp.so.$V"
cat >"$T/use.c" <<'C'
#include <dp_record.h>
#include <stdio.h>
int main(void)
{
	printf("%08x\n", dp_crc32c(0, "123456789", 9));
	return 0;
}
C
run sh -c "PKG_CONFIG_PATH='$R/usr/lib/$M/pkgconfig' PKG_CONFIG_SYSROOT_DIR='$R' &&
	export PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR &&
	cc ${DP_CFLAGS:-} -o '$T/use' '$T/use.c' \$(pkg-config --cflags --libs libdp) ${DP_LDFLAGS:-}"
is "$rc" 0 "a program builds against libdp-dev through pkg-config"
[ "$rc" = 0 ] || diag "$err"
run env LD_LIBRARY_PATH="$R/usr/lib/$M" "$T/use"
is "$out" "e3069283" "... and runs on libdp0's libdp.so.0"
done_testing
