#!/bin/bash
# tfr-shard(1): the page formats without warnings, and every example in it
# (.EX/.EE blocks) runs and succeeds on a fixture dataset.
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/man-examples.sh"
REF="$PY $DP_SRC/tests/tfrshard.py"
PAGE="$DP_SRC/man/man1/tfr-shard.1"
cd "$T" || exit 1

man_lint "$PAGE"
like "$(cat page.txt)" "EXIT STATUS" "has EXIT STATUS"
like "$(cat page.txt)" "ENVIRONMENT" "has ENVIRONMENT"

# Examples: roff escapes undone (\e is a backslash, \- a minus).
awk '/^\.EX/ { n++; f = sprintf("ex%02d.sh", n); next }
     /^\.EE/ { f = ""; next }
     f { gsub(/\\e/, "\\"); gsub(/\\-/, "-"); print > f }' "$PAGE"
count=$(ls ex*.sh 2>/dev/null | wc -l)
ok test "$count" -ge 5 "the page has examples ($count)"
$REF gen all.tfrecord 2000 --size 60 --users 50
for ex in ex*.sh; do
	mkdir "run-$ex"
	cp all.tfrecord "run-$ex/"
	(cd "run-$ex" && bash -e "../$ex") >"$ex.out" 2>"$ex.err"
	st=$?
	is "$st" 0 "example $ex: $(head -1 "$ex" | cut -c1-60)"
	[ "$st" = 0 ] || sed 's/^/#   /' "$ex.err" | head -5
	produced=$(find "run-$ex" -type f ! -name all.tfrecord | wc -l)
	ok test "$produced" -gt 0 "example $ex: wrote something"
done
# What the examples promise.
d=run-ex01.sh
is "$(ls $d/data | tr '\n' ' ')" "train-00000-of-00004.tfrecord train-00001-of-00004.tfrecord train-00002-of-00004.tfrecord train-00003-of-00004.tfrecord " \
	"example 1: four TensorFlow-style shards in data/"
d=run-ex06.sh
is "$(for f in $d/small/*; do $REF check $f; done | sort -u)" "records=100" \
	"last example: eight shards of 100 records"

done_testing
