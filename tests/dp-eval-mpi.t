#!/usr/bin/env bash
# dp-eval under a real Open MPI mpirun: the data split between workers
# (blocks of --batch-size records) and the metrics combined exactly: the
# metrics JSON of 2 and 3 workers equals the single process's, bit for
# bit; each worker's predictions are its share of the single process's;
# gates, bad records and streams behave as documented.
. "${DP_SRC:-.}/tests/lib.sh"

. "$DP_SRC/tests/mpi.sh" # mpi N CMD: mpirun on shared memory, oversubscribed, with a timeout
require "mpirun is not installed (apt-get install openmpi-bin)" have_mpirun
cd "$T"
MK="$PY $DP_SRC/tests/mkexamples.py"
$MK train.tfr random --n 300 --shape 12 --classes 5 --seed 1
$MK a.tfr random --n 170 --shape 12 --classes 5 --seed 2
$MK b.tfr.gz random --n 33 --shape 12 --classes 5 --seed 3 --gzip
dp-train --train train.tfr --input-shape 12 --model dense:16,relu,dense:5 --epochs 2 -q \
	-o m.st > /dev/null
# the parts of the JSON that must not depend on the number of workers
part() { $PY -c '
import json, sys
j = json.load(open(sys.argv[1]))
print(json.dumps([j["samples"], j["metrics"], j["classes"], j["confusion_matrix"]]))' "$1"; }

dp-eval --model m.st a.tfr b.tfr.gz --batch-size 16 --json one.json --predictions one.jsonl -q
run mpi 2 dp-eval --model m.st a.tfr b.tfr.gz --batch-size 16 --json two.json \
	--predictions 'two-{rank}.jsonl' -q
is "$rc" 0 "mpirun -np 2 dp-eval"
is "$($PY -c 'import json; print(json.load(open("two.json"))["workers"])')" 2 "... 2 workers, in the JSON"
is "$(part two.json)" "$(part one.json)" "2 workers: the metrics of one process, bit for bit"
is "$(sort two-0.jsonl two-1.jsonl | md5sum)" "$(sort one.jsonl | md5sum)" \
	"2 workers: their predictions together are the single process's, line for line"
ok test "$(wc -l < two-0.jsonl)" -gt 0 -a "$(wc -l < two-1.jsonl)" -gt 0 "both workers predicted"

run mpi 3 dp-eval --model m.st a.tfr b.tfr.gz --batch-size 7 --json three.json -q
dp-eval --model m.st a.tfr b.tfr.gz --batch-size 7 --json one7.json -q
is "$rc" 0 "mpirun -np 3, batches of 7"
is "$(part three.json)" "$(part one7.json)" "3 workers: the metrics of one process, bit for bit"

run mpi 4 dp-eval --model m.st b.tfr.gz --batch-size 32 --json four.json -q
is "$rc" 0 "4 workers, one batch: three have nothing"
is "$($PY -c 'import json; print(json.load(open("four.json"))["samples"])')" 33 "... every sample counted once"

acc=$($PY -c 'import json; print(json.load(open("one.json"))["metrics"]["accuracy"]["value"])')
run mpi 2 dp-eval --model m.st a.tfr b.tfr.gz --batch-size 16 --require "accuracy>$acc" -q
is "$rc" 3 "a failed gate: mpirun exits 3"
run mpi 2 dp-eval --model m.st a.tfr b.tfr.gz --batch-size 16 --require "accuracy>=$acc" -q
is "$rc" 0 "the same gate with >=: 0"

$MK bad.tfr random --n 40 --shape 12 --classes 5 --bad nofeature:25
rm -f bad.json
run mpi 2 dp-eval --model m.st bad.tfr --batch-size 8 --json bad.json
is "$rc" 1 "a bad record in worker 1's share: exit 1"
like "$err" "dp-eval: rank 1: bad.tfr: record 25 at byte [0-9]+: no feature 'image'" \
	"... the rank, file and record named"
ok test ! -e bad.json "... no metrics file"

run mpi 2 dp-eval --model m.st --data - -q < a.tfr
is "$rc" 2 "stdin cannot be split: exit 2"
like "$err" "stdin: a stream cannot be split between 2 workers" "... says so"
run mpi 2 dp-eval --model m.st a.tfr --predictions p.jsonl -q
is "$rc" 2 "--predictions without {rank} for 2 workers: exit 2"
run mpi 2 dp-eval --model m.st --data-cmd 'cat a.tfr' --json cmd.json -q
dp-eval --model m.st a.tfr --json a1.json -q
is "$(part cmd.json)" "$(part a1.json)" "--data-cmd run by each worker: the same metrics"

# data named by {rank}: each worker's own, evaluated whole
tfr-shard -q -n 2 -o 'own-{shard}-of-{nshards}.tfrecord' a.tfr
run mpi 2 dp-eval --model m.st --data 'own-{rank:5}-of-{size:5}.tfrecord' --json own.json -q
is "$rc" 0 "--data with {rank}: each worker's own files"
is "$($PY -c '
import json
a, b = json.load(open("own.json")), json.load(open("a1.json"))
print(a["samples"], a["data"]["sources"], a["confusion_matrix"] == b["confusion_matrix"])')" \
	"170 ['own-00000-of-00002.tfrecord'] True" "... every record of theirs counted, as one process counts them all"

done_testing
