#!/bin/sh
# examples/sweep.sh - a hyper-parameter sweep in plain shell: the pipeline
# (examples/pipeline.mk) once per learning rate and batch size, on data
# converted and sharded once, and the dp-eval metrics JSONs collected into
# one table, best first.
#
#   examples/sweep.sh [DIR]          (default: sweep)
#
#   LRS="3e-3 1e-3 3e-4"  BATCHES="32 64"   the grid
#   any pipeline setting from the environment: EPOCHS=2 NP=2 MODEL=... LIMIT=...
#
# Runs are make targets: a second sweep trains only the settings not tried
# yet (or whose settings changed).  Each run's output is DIR/RUN.log; the
# table is printed and kept in DIR/results.tsv; the best model is checked
# against MIN_ACCURACY (default 0.8) with dp-eval --check.
set -eu
SRC=$(cd "$(dirname "$0")/.." && pwd)
DIR=${1:-sweep}
LRS=${LRS:-3e-3 1e-3 3e-4}
BATCHES=${BATCHES:-32 64}
MIN=${MIN_ACCURACY:-0.8}
if [ "${NP:-2}" != 1 ] && [ "$(id -u)" = 0 ]; then
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
mkdir -p "$DIR"
pipeline() { make --no-print-directory -f "$SRC/examples/pipeline.mk" DATA="$DIR/data" "$@"; }

for lr in $LRS; do
	for b in $BATCHES; do
		run=lr$lr-batch$b
		if pipeline -q W="$DIR/$run" LR="$lr" BATCH="$b" "$DIR/$run/metrics.json" 2>/dev/null; then
			echo "$run: up to date"
			continue
		fi
		echo "$run: training"
		pipeline W="$DIR/$run" LR="$lr" BATCH="$b" "$DIR/$run/metrics.json" > "$DIR/$run.log" 2>&1 || {
			echo "$run: failed: see $DIR/$run.log" >&2
			exit 1
		}
	done
done

# one value of a dp-eval metrics JSON: each metric is on a line of its own
metric() { sed -n "s/.*\"$1\": {\"value\": \([^}]*\)}.*/\1/p" "$2"; }
{
	printf 'accuracy\tf1_macro\tloss\tlr\tbatch\tmetrics\n'
	for lr in $LRS; do
		for b in $BATCHES; do
			m=$DIR/lr$lr-batch$b/metrics.json
			printf '%.4f\t%.4f\t%.4f\t%s\t%s\t%s\n' "$(metric accuracy "$m")" \
				"$(metric f1_macro "$m")" "$(metric loss "$m")" "$lr" "$b" "$m"
		done
	done | sort -t "$(printf '\t')" -k1,1gr
} > "$DIR/results.tsv"
echo
column -t -s "$(printf '\t')" "$DIR/results.tsv" 2>/dev/null || cat "$DIR/results.tsv"
best=$(sed -n 2p "$DIR/results.tsv" | cut -f 6)
echo
echo "best: $(dirname "$best")/model.safetensors"
dp-eval --check "$best" --require "accuracy>=$MIN"
