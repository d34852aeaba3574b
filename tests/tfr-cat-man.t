#!/bin/bash
# The man pages of tfr-cat(1) and tfrecord(5): they format without warnings,
# and every example between .EX and .EE runs (in a scratch directory with the
# files the examples name) and succeeds.  Example output shown in the pages
# is checked where it is exact.
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/man-examples.sh"
PAGES="$DP_SRC/man/man1/tfr-cat.1 $DP_SRC/man/man5/tfrecord.5"

cd "$T" || exit 1
for p in $PAGES; do
	man_lint "$p"
done

# fixtures the examples name
tfr-cat --encode json "$FIX/tfr-cat/small.jsonl" >train.tfrecord || exit 1
gzip -c train.tfrecord >train.tfrecord.gz
tfr-cat -n 2 train.tfrecord >part-0.tfrecord
tfr-cat --skip 2 train.tfrecord >part-1.tfrecord
cp "$FIX/tfr-cat/data.csv" data.csv
{ cat train.tfrecord; printf 'damage'; cat train.tfrecord; } >damaged.tfrecord
# a folder of photos in two class folders (the image examples)
$PY "$DP_SRC/tests/mkphotos.py" photos 2 || exit 1

# the examples: .EX to .EE, roff escapes undone, one block at a time
extract() { # page -> blocks separated by a line "#--"
	awk '/^\.EX/ { on = 1; next } /^\.EE/ { on = 0; print "#--"; next } on' "$1" |
		sed -e 's/\\-/-/g' -e 's/\\e/\\/g' -e 's/\\(dq/"/g' -e "s/\\\\(aq/'/g" -e 's/\\(mu/x/g'
}
for p in $PAGES; do
	name=$(basename "$p")
	extract "$p" >"$T/blocks"
	nb=$(grep -c '^#--$' "$T/blocks")
	ok test "$nb" -gt 0 "$name: has examples"
	b=0
	while [ $b -lt "$nb" ]; do
		awk -v want=$b '/^#--$/ { n++; next } n == want' "$T/blocks" >"$T/ex.sh"
		first=$(head -1 "$T/ex.sh")
		if grep -q /usr/share/datasets "$T/ex.sh" && [ ! -d /usr/share/datasets/fashion-mnist ]; then
			skip "$name example $b needs Debian's dataset-fashion-mnist"
		elif grep -q '^{' "$T/ex.sh"; then
			skip "$name example $b is data, not a command"
		else
			bash -e -o pipefail "$T/ex.sh" >"$T/ex.out" 2>"$T/ex.err"
			rc=$?
			is "$rc" 0 "$name example $b runs: $first"
			[ $rc = 0 ] || diag "$(cat "$T/ex.err")"
		fi
		b=$((b + 1))
	done
done

# outputs the pages show
is "$(tfr-cat -c train.tfrecord)" 5 "tfr-cat(1): -c counts"
ok_records relabelled.tfrecord "tfr-cat(1): the relabelling example wrote its file"
is "$(tfr-cat -j relabelled.tfrecord | grep -c '"label":{"int64":\[4\]}')" 1 "tfr-cat(1): and changed the label"
is "$(tfr-cat -c recovered.tfrecord)" 10 "tfr-cat(1): --skip-corrupt recovered both copies"
ok_records all.tfrecord.gz "tfr-cat(1): -z gzip -o wrote all.tfrecord.gz"
is "$(tfr-cat -c data.tfrecord)" 3 "tfr-cat(1): the CSV example"
dump=$(printf '{"label":{"int64":[3]}}\n' | tfr-cat --encode json | od -An -tx1)
shown=$(awk '/^ 12 00 00/ { on = 1 } on && /^\.fi/ { exit } on' "$DP_SRC/man/man5/tfrecord.5")
is "$dump" "$shown" "tfrecord(5): the dump shown is the dump made"
is "$(printf '{"label":{"int64":[3]}}\n' | tfr-cat --encode json | tfr-cat --json=proto)" \
	"$(grep '^{"features": {"feature": {"label"' "$DP_SRC/man/man5/tfrecord.5")" \
	"tfrecord(5): the protobuf JSON shown"

done_testing
