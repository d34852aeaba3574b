#!/usr/bin/env bash
# dp-train's gradient exchange choices under a real mpirun (issue 16):
# --allreduce ring|hierarchical|mpi and --grad-dtype fp32|bf16|fp16.
# Every choice ends with every rank holding the same bits (dp-train checks
# the ranks' state hashes at the end, and fails when they differ); mpi and
# ring give the same weights at 2 ranks (a sum of two is one addition);
# hierarchical on emulated hosts (DP_COMM_HOST_RANKS=2: every 2 ranks one
# "host") matches the flat ring within float rounding and sends less to
# other hosts; 16-bit wires halve the bytes and train as float32 does
# within a stated tolerance; bad choices are refused.
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/mpi.sh"

require "mpirun is not installed (apt-get install openmpi-bin)" have_mpirun
MK="$PY $DP_SRC/tests/mkexamples.py"
cd "$T"
$MK all.tfr random --n 256 --shape 1x8x8 --classes 4 --seed 1
COMMON=(--train all.tfr --model 'conv:4:3,relu,flatten,dense:32,relu,dense:4' --input-shape 1x8x8
	--shuffle-buffer 64 --seed 3 --epochs 3 --log-every 4 --prefetch 1 --bucket-size 4k)
cat > maxdiff.py <<'PYEOF'
import sys
sys.path.insert(0, sys.argv[3])
import numpy as np
from torch_ref import load_checkpoint
a, _ = load_checkpoint(sys.argv[1]); b, _ = load_checkpoint(sys.argv[2])
assert a.keys() == b.keys()
print(max(float(np.max(np.abs(a[k].astype(np.float64) - b[k].astype(np.float64))))
          for k in a if a[k].dtype.kind == "f"))
PYEOF
maxdiff() { $PY maxdiff.py "$1" "$2" "$DP_SRC/tests"; }
below() { awk -v d="$1" -v t="$2" 'BEGIN { exit !(d ~ /^[0-9.e+-]+$/ && d + 0 <= t) }'; }
sent() { sed -n 's/.*communication: \([0-9.]*\) MiB sent a step.*/\1/p' <<<"$1"; }
cross() { sed -n 's/.*allreduce), \([0-9.]*\) MiB of it to another host.*/\1/p' <<<"$1"; }
lastloss() { sed -n 's/.* loss=\([0-9.e+-]*\) .*/\1/p' "$1" | tail -n 1; }

# ---- ring and mpi at 2 ranks: the same weights -------------------------------------------
run mpi 2 dp-train "${COMMON[@]}" --batch-size 16 -o ring.st --log ring.log
is "$rc" 0 "2 ranks, ring (the default)"
like "$err" "communication: [0-9.]+ MiB sent a step by rank 0 \(fp32 wire, ring allreduce\), [0-9.]+ MiB of it to another host; 1 host" \
	"... the bytes sent a step, and the host found"
f32=$(sent "$err")
run mpi 2 dp-train "${COMMON[@]}" --batch-size 16 -o mpi.st --allreduce mpi
is "$rc" 0 "2 ranks, --allreduce mpi"
like "$err" "all 2 ranks hold the same weights" "... every rank the same bits"
is "$(maxdiff ring.st mpi.st)" 0.0 "... the same weights as the ring (a sum of two is one addition)"

# ---- hierarchical, 2 emulated hosts of 2 ranks -------------------------------------------
run mpi 4 dp-train "${COMMON[@]}" --batch-size 8 -o flat4.st
is "$rc" 0 "4 ranks, flat ring"
DP_COMM_HOST_RANKS=2 run mpi 4 -x DP_COMM_HOST_RANKS dp-train "${COMMON[@]}" --batch-size 8 -o flat22.st
is "$rc" 0 "4 ranks as 2 hosts x 2, flat ring"
like "$err" "; 2 hosts" "... 2 hosts seen"
flatx=$(cross "$err")
DP_COMM_HOST_RANKS=2 run mpi 4 -x DP_COMM_HOST_RANKS dp-train "${COMMON[@]}" --batch-size 8 -o hier.st \
	--allreduce hierarchical
is "$rc" 0 "4 ranks as 2 hosts x 2, --allreduce hierarchical"
like "$err" "all 4 ranks hold the same weights" "... every rank the same bits"
hierx=$(cross "$err")
d=$(maxdiff flat4.st hier.st)
ok below "$d" 1e-5 "... the flat ring's weights within float rounding ($d)"
# each host sends 2 (h-1)/h = 1.0x the gradient across, spread over its 2
# ranks: rank 0 sends 0.5x; in the flat ring rank 0's right neighbour is on
# its own host (0 -> 1), so rank 1 carries the crossing
grad=$(sed -n 's/.*allreduce calls\? a step (\([0-9.]*\) MiB).*/\1/p' <<<"$err")
ok below "$(awk -v h="$hierx" -v g="$grad" 'BEGIN { d = (h - g / 2) / g; print d < 0 ? -d : d }')" 0.01 \
	"... rank 0 sends half the gradient to the other host, its host's ranks 1.0x ($hierx MiB; gradient $grad MiB)"
is "$flatx" 0.00 "flat ring: rank 0's right neighbour (rank 1) is on its host: nothing sent across"

# ---- 16-bit wires -------------------------------------------------------------------------
for dt in bf16 fp16; do
	run mpi 2 dp-train "${COMMON[@]}" --batch-size 16 -o $dt.st --log $dt.log --grad-dtype $dt
	is "$rc" 0 "--grad-dtype $dt"
	like "$err" "all 2 ranks hold the same weights" "... every rank the same bits"
	like "$err" "MiB sent a step by rank 0 \($dt wire" "... the log says which wire"
	r=$(awk -v a="$(sent "$err")" -v b="$f32" 'BEGIN { print a / b }')
	ok below "$(awk -v r="$r" 'BEGIN { print (r > 0.5 ? r - 0.5 : 0.5 - r) }')" 0.01 "... half the bytes of fp32 (ratio $r)"
	l=$(lastloss $dt.log) l32=$(lastloss ring.log)
	ok below "$(awk -v a="$l" -v b="$l32" 'BEGIN { d = (a - b) / b; print d < 0 ? -d : d }')" 0.05 \
		"... the last loss within 5% of fp32's ($l vs $l32)"
	d=$(maxdiff ring.st $dt.st)
	ok below "$d" 0.05 "... weights near fp32's ($d)"
	not_ok test "$d" = 0.0 "... but not equal: the wire did round"
done
DP_COMM_HOST_RANKS=2 run mpi 4 -x DP_COMM_HOST_RANKS dp-train "${COMMON[@]}" --batch-size 8 -o hb.st \
	--allreduce hierarchical --grad-dtype bf16
is "$rc" 0 "hierarchical with a bf16 wire"
like "$err" "all 4 ranks hold the same weights" "... every rank the same bits"

# ---- refused -------------------------------------------------------------------------------
run dp-train "${COMMON[@]}" --grad-dtype fp8
like "$rc:$err" "^2:dp-train: --grad-dtype 'fp8': want fp32, bf16 or fp16" "an unknown wire: usage error"
run dp-train "${COMMON[@]}" --allreduce tree
like "$rc:$err" "^2:dp-train: --allreduce 'tree': want ring, hierarchical or mpi" "an unknown algorithm: usage error"
run mpi 2 dp-train "${COMMON[@]}" --batch-size 16 --allreduce mpi --grad-dtype bf16
is "$rc" 1 "--allreduce mpi with a bf16 wire: refused"
like "$err" "the MPI allreduce carries float32 only \(bf16 needs the ring or the hierarchical allreduce\)" \
	"... saying why"
run mpirun "${MPI_OPTS[@]}" -np 1 dp-train "${COMMON[@]}" --batch-size 16 --grad-dtype bf16 : \
	-np 1 dp-train "${COMMON[@]}" --batch-size 16
is "$rc" 2 "ranks with different --grad-dtype: refused (2, as every settings mismatch)"
like "$err" "rank 1 has 'grad_dtype=fp32' where rank 0 has 'grad_dtype=bf16'" "... naming the setting"
run mpirun "${MPI_OPTS[@]}" -np 1 dp-train "${COMMON[@]}" --batch-size 16 --allreduce mpi : \
	-np 1 dp-train "${COMMON[@]}" --batch-size 16
like "$rc:$err" "^2:.*rank 1 has 'allreduce=ring' where rank 0 has 'allreduce=mpi'" "... and different --allreduce"
run env DP_COMM_HOST_RANKS=x mpirun "${MPI_OPTS[@]}" -np 2 -x DP_COMM_HOST_RANKS dp-train "${COMMON[@]}"
like "$rc:$err" "^1:.*DP_COMM_HOST_RANKS 'x': want a number of ranks" "a bad DP_COMM_HOST_RANKS: refused"
done_testing
