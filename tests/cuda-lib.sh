# tests/cuda-lib.sh - for the GPU tests (tests/cuda-*.t), after tests/lib.sh:
#
#   need_cuda      skip the whole test, with the reason, unless the programs
#                  on PATH are a CUDA build (make BACKEND=cuda check) and a
#                  CUDA device answers
#   close CK1 CK2 TOL  the weights of two checkpoints agree within TOL of
#                  the largest magnitude of each tensor (prints the worst)
#   losses LOG     the loss of each training line of a logfmt log, one a line
#                  (the job's lines: not those of --log-all-ranks)
#   curve_close LOG1 LOG2 [TOL]  every update's loss of LOG1 within TOL
#                  (relative, default 1e-3) of LOG2's; prints the worst
#   hashes LOG...  "rank state-hash" of each --log-all-ranks line, sorted

need_cuda() {
	if ! [ -e /dev/nvidia0 ] && ! { command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q GPU; }; then
		skip "no CUDA device (no /dev/nvidia0, no GPU in nvidia-smi -L): GPU checks not run"
		done_testing
	fi
	$PY "$DP_SRC/tests/mkexamples.py" "$T/.probe.tfr" random --n 4 --shape 4 --classes 2 --seed 1
	run env DP_BACKEND=cuda dp-train --train "$T/.probe.tfr" --input-shape 4 --model dense:2 \
		--batch-size 4 --max-steps 1 --prefetch 0
	case "$err" in
	*"not in this build"*)
		skip "not a CUDA build on PATH: run make BACKEND=cuda check"
		done_testing ;;
	*"no CUDA device"*)
		skip "${err#dp-train: }"
		done_testing ;;
	esac
	is "$rc" 0 "dp-train runs on the GPU ($(sed -n 's/.*parameters, \(cuda: [^;]*\);.*/\1/p' <<<"$err" | cut -d, -f1-3))"
}

close() { # a b tol
	$PY - "$1" "$2" "$3" <<'PYEOF'
import sys
sys.path.insert(0, __import__("os").environ["DP_SRC"] + "/tests")
from torch_ref import load_checkpoint
import numpy as np
a, _ = load_checkpoint(sys.argv[1]); b, _ = load_checkpoint(sys.argv[2]); tol = float(sys.argv[3])
worst = 0.0
for k in a:
    if not k[0].isdigit() or a[k].dtype.kind != "f":
        continue
    d = np.max(np.abs(a[k].astype(np.float64) - b[k])) / max(np.max(np.abs(b[k])), 1e-30)
    worst = max(worst, d if np.isfinite(d) else np.inf)
print(f"# worst relative difference {worst:.2e}")
sys.exit(0 if worst <= tol else 1)
PYEOF
}

losses() { grep -v '^rank=' "$1" | sed -n 's/.* loss=\([^ ]*\) .*/\1/p'; }

curve_close() { # log log [tol]
	paste <(losses "$1") <(losses "$2") | awk -v t="${3:-1e-3}" 'NF != 2 {bad = 1}
		{d = $1 - $2; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (r > w) w = r}
		END {print "# worst relative difference " w; exit bad || NR == 0 || w > t}'
}

hashes() { cat "$@" | sed -n 's/^rank=\([0-9]*\) .*state_fnv1a64=\([0-9a-f]*\)$/\1 \2/p' | sort; }
