#!/bin/bash
# The EXAMPLES of man/man1/s3-pipe.1, run offline: each s3://my-bucket/ URL
# becomes a file:// URL under the scratch directory (s3-pipe treats both
# alike); s3-pipe-s3.t runs the same examples against radosgw.  The MPI
# example runs under a real mpirun (tests/mpi.sh's settings), dp-train on
# Fashion-MNIST-shaped records under mnist/.  Also checks
# that the page documents every option and renders without warnings.
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/man-examples.sh"
. "$DP_SRC/tests/mpi.sh"
PAGE=$DP_SRC/man/man1/s3-pipe.1
cd "$T" || exit 1

groff -man -Tascii -rLL=300n -rHY=0 -P-cbou "$PAGE" >page.txt
# every option of the table in tools/s3-pipe.c (read from the source: an
# option added there is checked here without a line of this test)
opts=$(sed -n 's/^\t*{"\([a-z-]*\)", [a-z_]*_argument,.*/\1/p' "$DP_SRC/tools/s3-pipe.c")
ok [ "$(echo $opts | wc -w)" -ge 30 ] "the option table read from tools/s3-pipe.c ($(echo $opts | wc -w) options)"
for o in $opts help version; do
	ok grep -q -- "^ *\(-[a-zA-Z], \)*--$o\b" page.txt "the man page documents --$o"
done
for s in "EXIT STATUS" ENVIRONMENT EXAMPLES CREDENTIALS "SEE ALSO"; do
	ok grep -q "^\.SH \"*$s" "$PAGE" "the man page has $s"
done
man_lint "$PAGE"
ok grep -q "zero.-byte keys$" "$PAGE" "the page says which keys ending in / get skips (zero-byte ones, as the code does)"

# fixtures: three TFRecord files of 3, 4 and 5 records
mkdir -p data
for i in 0 1 2; do
	for r in $(seq 1 $((i + 3))); do printf '{"x":{"int64":[%d]},"part":{"int64":[%d]}}\n' $r $i; done |
		tfr-cat --encode json >data/part-$i.tfrecord
done
ok_records data/part-2.tfrecord "fixtures made with tfr-cat"
mkdir -p bucket/mnist
$PY "$DP_SRC/tests/mkexamples.py" bucket/mnist/part-0.tfrecord random --n 64 --shape 784 --classes 10 --seed 1

man_examples "$PAGE" ex
run_examples -p ex "s|s3://my-bucket/|file://$T/bucket/|g"
# the Pipe-mode example on a bucket that does not exist: it fails, and
# does not wait forever on a FIFO that no writer will serve
f=$(grep -l 's3-pipe fifo' ex/*.sh | head -n 1)
sed "s|s3://my-bucket/|file://$T/nobucket/|g" "$f" >nob.sh
rm -rf pipes
timeout 60 bash -e -o pipefail nob.sh >nob.out 2>nob.err
st=$?
isnt "$st" 124 "the Pipe-mode example with a missing bucket ends (no reader left waiting)"
isnt "$st" 0 "... and fails"
like "$(cat nob.err)" "nobucket/train/: No such file" "... saying why"
is "$(head -n 1 out.1)" 12 "example 1: twelve records in data/"
is "$(sed -n 2p out.1)" 4 "example 1: worker 1 of 2 gets part-1 (4 records)"
is "$(cat out.5 | tr '\n' ' ')" "12 12 " "example 5: two epochs of twelve records through FIFOs"
is "$(cat out.6)" 8 "example 6: the manifest's two files, 5 + 3 records"
is "$(cat out.7)" "$(head -c 12 data/part-0.tfrecord | od -A d -t x1)" "example 7: the first 12 bytes of part-0"
ok test ! -e bucket/train/part-0.tfrecord "example 7: rm -r removed the prefix"

done_testing
