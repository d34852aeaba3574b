#!/bin/bash
# libdp-man.t - libdp(3)'s EXAMPLES compile against the public headers and
# libdp.a and run: the record counter counts a file's records.
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/man-examples.sh"
PAGE=$DP_SRC/man/man3/libdp.3
cd "$T" || exit 1
man_lint "$PAGE"
# the C program between .nf and .fi of EXAMPLES, roff escapes undone
sed -n '/^\.SH EXAMPLES/,/^\.SH/p' "$PAGE" | awk '/^\.fi/ { on = 0 } on; /^\.nf/ { on = 1 }' |
	sed 's/\\e/\\/g; s/\\-/-/g' > count.c
ok grep -q "int main" count.c "the example is a program"
libs=$(sed -n 's/^Libs.private: //p' "$DP_BUILD/libdp.pc")
# (with the build's own flags: under make asan, libdp.a needs the sanitizers)
run cc -std=gnu11 -Wall -Werror ${DP_CFLAGS:-} -I"$DP_SRC/lib" -o count count.c "$DP_BUILD/libdp.a" $libs \
	${DP_LDFLAGS:-}
is "$rc:$err" "0:" "it compiles against libdp's headers and libdp.a, without a warning"
printf '{"x":{"int64":[1]}}\n{"x":{"int64":[2]}}\n{"x":{"int64":[3]}}\n' | tfr-cat --encode json > three.tfr
run ./count three.tfr
is "$rc:$out" "0:3" "... and counts a file's 3 records"
run ./count nosuch.tfr
is "$rc" 1 "... and says why it cannot"
done_testing
