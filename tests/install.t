#!/bin/bash
# install.t - make install / uninstall with DESTDIR, PREFIX and MANDIR: the
# programs, libdp (static, shared, pkg-config), headers and man pages land
# where asked, a program builds against the installed library through
# pkg-config, and uninstall removes everything it put there.
. "${DP_SRC:-.}/tests/lib.sh"

root="$T/root"
V=$(sed -n 's/^VERSION := //p' "$DP_SRC/Makefile")
run make -C "$DP_SRC" -s O="$DP_BUILD" install DESTDIR="$root" PREFIX=/opt/dp MANDIR=/opt/dp/man
is "$rc" 0 "make install succeeds"
for p in tfr-cat tfr-shard s3-pipe dp-train dp-eval dp-ckpt dp-serve metrics-grep; do
	ok test -x "$root/opt/dp/bin/$p" "bin/$p installed"
	ok test -f "$root/opt/dp/man/man1/$p.1" "man1/$p.1 installed under MANDIR"
done
ok test -f "$root/opt/dp/man/man5/tfrecord.5" "man5 pages installed"
ok test -f "$root/opt/dp/lib/libdp.a" "static library installed"
ok test -x "$root/opt/dp/lib/libdp.so.$V" "shared library installed"
is "$(readlink "$root/opt/dp/lib/libdp.so")" "libdp.so.$V" "libdp.so links to the versioned file"
ok test -f "$root/opt/dp/include/dptools/dp_record.h" "public headers installed"
is "$(cd "$root/opt/dp/include/dptools" && ls | grep -v '^dp.*\.h$')" "" "... and only the public dp*.h"
ok test -f "$root/opt/dp/lib/pkgconfig/libdp.pc" "pkg-config file installed"
ok test -f "$root/opt/dp/man/man3/libdp.3" "man3/libdp.3 installed"
for p in tfr-cat tfr-shard s3-pipe dp-train dp-eval dp-ckpt dp-serve metrics-grep; do
	ok test -f "$root/opt/dp/share/bash-completion/completions/$p" "bash completion for $p installed under PREFIX/share"
done
ok test -f "$root/opt/dp/share/zsh/site-functions/_dptools" "zsh completion installed under PREFIX/share/zsh"
run objdump -p "$root/opt/dp/lib/libdp.so.$V"
like "$out" "SONAME +libdp\.so\.0" "shared library has the soname libdp.so.0"
like "$out" "NEEDED +libprotobuf-c" "libdp.so needs protobuf-c (its ONNX writer: scripts/deps --list run)"
run sh -c "nm -D --defined-only '$root/opt/dp/lib/libdp.so.$V' | awk '{print \$3}'"
is "$(echo "$out" | grep -v '^dp_' | grep -v '^__odr_asan\.dp_')" "" "libdp.so exports only dp_* names (and ASan's ODR markers of them)"
like "$out" "dp_crc32c" "... among them the public API"
for p in tfr-cat tfr-shard s3-pipe dp-train dp-eval dp-ckpt dp-serve metrics-grep; do
	is "$("$root/opt/dp/bin/$p" --version)" "$p (dptools) $V" "$p --version names the Makefile's version"
done
like "$(sed -n 1p "$root/opt/dp/man/man1/tfr-cat.1")" "\"dptools $V\"" "installed man pages carry the version"

# A program built against the installed copy through pkg-config.
cat >"$T/use.c" <<'C'
#include <dp_record.h>
#include <stdio.h>
int main(void)
{
	printf("%08x\n", dp_crc32c(0, "123456789", 9));
	return 0;
}
C
export PKG_CONFIG_PATH="$root/opt/dp/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$root"
run pkg-config --cflags libdp
unlike "$out" "mpi" "pkg-config --cflags libdp names no MPI include path (Libs.private)"
# static: libdp.a itself, its dependencies as pkg-config names them (with
# the build's own flags: a sanitizer build needs its runtime)
F="${DP_LDFLAGS:-}"
run sh -c "cc $F -o '$T/use' '$T/use.c' \$(pkg-config --cflags libdp) '$root/opt/dp/lib/libdp.a' \$(pkg-config --static --libs libdp | sed 's/-ldp / /')"
is "$rc" 0 "a program compiles and links against libdp.a with pkg-config's flags"
[ "$rc" = 0 ] || diag "$err"
run "$T/use"
is "$out" "e3069283" "... and runs (CRC-32C check value)"
run ldd "$T/use"
unlike "$out" "libdp" "... with no libdp.so in it"
run sh -c "cc $F -o '$T/use2' '$T/use.c' \$(pkg-config --cflags libdp) \$(pkg-config --libs libdp)"
is "$rc" 0 "... and links against the shared library"
run env LD_LIBRARY_PATH="$root/opt/dp/lib" "$T/use2"
is "$out" "e3069283" "... which runs"
run env LD_LIBRARY_PATH="$root/opt/dp/lib" ldd "$T/use2"
like "$out" "libdp\.so\.0 => $root/opt/dp/lib/libdp\.so\.0" "... loading the installed libdp.so.0"

run make -C "$DP_SRC" -s O="$DP_BUILD" uninstall DESTDIR="$root" PREFIX=/opt/dp MANDIR=/opt/dp/man
is "$rc" 0 "make uninstall succeeds"
is "$(find "$root" -type f -o -type l | sort)" "" "uninstall leaves no file behind"
done_testing
