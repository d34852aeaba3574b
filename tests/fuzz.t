#!/bin/bash
# fuzz.t - the libFuzzer targets (tests/fuzz) build and run clean: each one
# is built against libdp's sources with ASan and UBSan, started from its
# seed corpus and run for a few seconds.  A crash, leak, hang or failed
# property check fails this test; make fuzz runs them for longer.
. "${DP_SRC:-.}/tests/lib.sh"

secs=${FUZZ_CHECK_TIME:-3}
targets=$(ls "$DP_SRC"/tests/fuzz/*.c | sed 's|.*/||; s|\.c$||')
# the corpus starts from the seeds alone: what an earlier make fuzz found
# stays in build-fuzz/ and is not needed here
run env -u ASAN_OPTIONS FUZZ_O="$T/fuzz" FUZZ_BIN="$DP_BUILD/bin" "$DP_SRC/tests/fuzz/run" "$secs"
is "$rc" 0 "every target built and ran without a finding"
[ "$rc" = 0 ] || diag "$(tail -20 <<<"$out")"$'\n'"$err"
for t in $targets; do
	like "$out" "== fuzz $t: $secs s" "$t: built and started"
	ok grep -Eq "INFO: +[1-9][0-9]* files found" "$T/fuzz/fuzz-$t.log" "$t: started from its seeds"
	n=$(sed -n "s/^stat::number_of_executed_units: //p" "$T/fuzz/fuzz-$t.log" 2>/dev/null)
	ok test "${n:-0}" -gt 1 "$t: ran inputs (${n:-none})"
	ok test -z "$(ls "$T/fuzz/findings" | grep "^$t-")" "$t: no findings"
done
done_testing
