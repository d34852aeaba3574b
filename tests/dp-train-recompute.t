#!/usr/bin/env bash
# dp-train --recompute: the same checkpoint, byte for byte, as without it
# (a residual CNN with batchnorm and dropout: the masks and the statistics
# replayed), with --accumulate and --freeze, under mpirun with --sync-bn,
# and on the CUDA backend's code (tests/cudaemu); --summary says what is
# recomputed and the memory it saves; the notes say the memory a run
# takes; a pattern that names nothing is a usage error.
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/mpi.sh"
cd "$T"
$PY "$DP_SRC/tests/mkexamples.py" d.tfr random --n 48 --shape 3x8x8 --classes 4 --seed 2
RES='conv:8:3:1:1,batchnorm,relu,res(conv:8:3:1:1,batchnorm,relu,dropout:0.3,conv:8:3:1:1,batchnorm):relu,res(conv:16:3:2:1,batchnorm,relu,conv:16:3:1:1,batchnorm|conv:16:1:2,batchnorm):relu,gap,flatten,dropout:0.2,dense:4'
COMMON=(--train d.tfr --model "$RES" --input-shape 3x8x8 --batch-size 8 --epochs 2 --seed 4
	--optimizer sgd --momentum 0.9 --lr 0.05 --shuffle-buffer 16 --prefetch 0 --log /dev/null)

run dp-train "${COMMON[@]}" -o plain.st
is "$rc" 0 "plain run"
like "$err" "memory: parameters [0-9.]+ [KM]iB .*activations [0-9.]+ [KM]iB \([0-9.]+ [KM]iB kept for the backward pass, [0-9.]+ [KM]iB scratch\)" \
	"a note says the memory the model takes"
like "$err" "peak memory: [0-9.]+ [MG]iB resident \(rank 0\)" "and the peak at the end"
run dp-train "${COMMON[@]}" --recompute -o rc.st
is "$rc" 0 "--recompute"
like "$err" "kept for the backward pass, --recompute" "the note says so"
same_file plain.st rc.st "the same checkpoint, byte for byte"
run dp-train "${COMMON[@]}" --recompute='3,4' -o rc2.st
is "$rc" 0 "--recompute=PATTERNS"
same_file plain.st rc2.st "the same checkpoint again"

run dp-train "${COMMON[@]}" --accumulate 2 --freeze 0,1 -o acc.st
run dp-train "${COMMON[@]}" --accumulate 2 --freeze 0,1 --recompute -o accr.st
is "$rc" 0 "--recompute with --accumulate and --freeze"
same_file acc.st accr.st "the same checkpoint"

run dp-train --model "$RES" --input-shape 3x8x8 --batch-size 8 --summary
plain_act=$(printf '%s\n' "$out" | sed -n 's/.*activations \([0-9.]*\) KiB (\([0-9.]*\) KiB kept.*/\2/p')
run dp-train --model "$RES" --input-shape 3x8x8 --batch-size 8 --summary --recompute
like "$out" "recomputed: 0\.\.2, 3\.0\.\.3, 4\.0\.\.4, 5\.\.8" "--summary names the segments"
rc_act=$(printf '%s\n' "$out" | sed -n 's/.*activations \([0-9.]*\) KiB (\([0-9.]*\) KiB kept.*/\2/p')
ok awk -v a="$rc_act" -v b="$plain_act" 'BEGIN { exit !(a > 0 && a < b / 2) }' \
	"and keeps less than half the bytes ($rc_act KiB, $plain_act KiB without)"

run dp-train "${COMMON[@]}" --recompute='nothing*' -o x.st
is "$rc" 2 "a pattern that names nothing: usage error"
like "$err" "dp-train: --recompute: 'nothing\*' names no layer or block of the model" "...named"
run dp-train --model dense:8,relu,dense:4 --input-shape 12 --summary --recompute
is "$rc" 2 "a model without blocks"
like "$err" "has no blocks .* to recompute: name its layers" "...said so"

if have_mpirun; then
	run mpi 2 dp-train "${COMMON[@]}" --sync-bn -o mpi.st
	is "$rc" 0 "2 ranks, --sync-bn"
	run mpi 2 dp-train "${COMMON[@]}" --sync-bn --recompute -o mpir.st
	is "$rc" 0 "2 ranks, --sync-bn, --recompute"
	same_file mpi.st mpir.st "the same checkpoint: --sync-bn's statistics replayed"
else
	skip "mpirun is not installed"
fi

EMU="$DP_BUILD/tests/dp-train-cudaemu"
if [ -x "$EMU" ]; then
	run "$EMU" "${COMMON[@]}" --max-steps 4 -o emu.st
	is "$rc" 0 "the CUDA backend's code (emulated)"
	run "$EMU" "${COMMON[@]}" --max-steps 4 --recompute -o emur.st
	is "$rc" 0 "...with --recompute"
	same_file emu.st emur.st "the same checkpoint there too"
else
	skip "no $EMU (built by make check in a CPU build)"
fi
done_testing
