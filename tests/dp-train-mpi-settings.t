#!/usr/bin/env bash
# Every option that dp-train(1) says must agree across ranks is compared:
# for each one, mpirun's MPMD form starts rank 0 and rank 1 with that
# option alone differing, and the job must stop at the start (exit 2)
# naming the setting.  The list of options is read from the man page, and
# must be the list tried here.  The build is compared too: a rank that
# loads another BLAS library (a fake openblas_get_config, LD_PRELOAD) is
# refused, and so is another backend (the emulated CUDA build).
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/mpi.sh"

require "mpirun is not installed (apt-get install openmpi-bin)" have_mpirun
cd "$T"
MK="$PY $DP_SRC/tests/mkexamples.py"
$MK all.tfr random --n 40 --shape 1x8x8 --classes 4 --seed 1
$MK p-0.tfr random --n 20 --shape 1x8x8 --classes 4 --seed 2
$MK p-1.tfr random --n 20 --shape 1x8x8 --classes 4 --seed 3
dp-train --train all.tfr --model dense:8,relu,dense:4 --input-shape 64 -q -o x.st
BASE=(--model dense:8,relu,dense:4 --input-shape 64 --epochs 1 --prefetch 0 -q)
EMU="$DP_BUILD/tests/dp-train-cudaemu"

# option | the setting's key in the message | rank 0's arguments | rank 1's
# (--train all.tfr is added to both unless a side names its data)
ROWS=$(cat <<'EOF'
--accumulate|accumulate||--accumulate 2
--allreduce|allreduce||--allreduce mpi
--augment|image|--decode image --input-shape 1x8x8|--decode image --augment flip --input-shape 1x8x8
--batch-size|batch_size|--batch-size 16|--batch-size 8
--beta1|betas|--optimizer adam|--optimizer adam --beta1 0.8
--beta2|betas|--optimizer adam|--optimizer adam --beta2 0.99
--bucket-size|bucket_size||--bucket-size 64K
--checkpoint|checkpoint||--checkpoint ck.st
--checkpoint-every|checkpoint_every|-o a.st --checkpoint-every 2|-o a.st --checkpoint-every 3
--clip-norm|clip_norm||--clip-norm 1
--dampening|dampening||--dampening 0.5
--decode-raw|decode_raw||--decode-raw uint8
--epochs|epochs||--epochs 2
--eps|eps|--optimizer adam|--optimizer adam --eps 1e-6
--feature|feature||--feature img
--freeze|freeze|--init x.st|--init x.st --freeze 0
--grad-dtype|grad_dtype||--grad-dtype bf16
--init|init||--init x.st
--input-shape|input_shape||--input-shape 1x8x8
--label|label||--label y
--label-smoothing|label_smoothing||--label-smoothing 0.1
--sync-bn|sync_bn||--sync-bn
--classes|classes|--model resnet20 --input-shape 1x8x8|--model resnet20 --classes 4 --input-shape 1x8x8
--layout|layout|--decode-raw uint8 --input-shape 1x8x8|--decode-raw uint8 --layout hwc --input-shape 1x8x8
--last-batch|last_batch||--last-batch drop
--log-every|log_every||--log-every 5
--loss|loss||--loss mse
--lr|lr||--lr 0.5
--lr-mult|lr_mult||--lr-mult '0*=0.5'
--lr-schedule|lr_schedule||--lr-schedule cosine
--max-steps|max_steps||--max-steps 3
--max-pixels|image|--decode image --input-shape 1x8x8|--decode image --max-pixels 1000 --input-shape 1x8x8
--mean|image|--decode image --input-shape 1x8x8|--decode image --mean 0.5 --input-shape 1x8x8
--model|model||--model dense:16,relu,dense:4
--momentum|momentum||--momentum 0.9
--nesterov|nesterov|--momentum 0.9|--momentum 0.9 --nesterov
--no-decay|no_decay||--no-decay bias
--no-overlap|overlap||--no-overlap
--no-shard-data|train||--no-shard-data
--optimizer|optimizer||--optimizer sgd
--output|output||--output out.st
--precision|precision||--precision tf32
--reset|reset|--init x.st|--init x.st --reset 2
--resize|image|--decode image --input-shape 1x8x8|--decode image --resize 10 --input-shape 1x8x8
--resume|resume||--resume x.st
--scale|scale|--scale 1/255|--scale 1
--scale-lr|scale_lr||--scale-lr
--seed|seed||--seed 9
--shard-data|train|--train p-{rank}.tfr|--train p-{rank}.tfr --shard-data
--shuffle-buffer|shuffle_buffer||--shuffle-buffer 7
--std|image|--decode image --input-shape 1x8x8|--decode image --std 0.5 --input-shape 1x8x8
--summary|summary||--summary
--timeline|timeline||--timeline t.json
--train|train|--train all.tfr|--train p-{rank}.tfr
--train-cmd|train|--train-cmd 'cat all.tfr'|--train-cmd 'cat p-{rank}.tfr'
--uneven|uneven||--uneven drop
--val|val||--val all.tfr
--val-cmd|val|--val-cmd 'cat all.tfr'|--val-cmd 'cat p-{rank}.tfr'
--warmup|warmup||--warmup 3
--warmup-epochs|warmup_epochs|--scale-lr|--scale-lr --warmup-epochs 1
--skip-corrupt|skip_corrupt||--skip-corrupt
--max-skipped|max_skipped|--skip-corrupt|--skip-corrupt --max-skipped 5
--steps-per-epoch|steps_per_epoch||--steps-per-epoch 3
--weight-decay|weight_decay||--weight-decay 0.1
--pipeline-stages|pipeline_stages||--pipeline-stages 2
--micro-batches|micro_batches|--pipeline-stages 2|--pipeline-stages 2 --micro-batches 2
--pipeline-schedule|pipeline_schedule|--pipeline-stages 2|--pipeline-stages 2 --pipeline-schedule gpipe
--monitor|monitor|--val all.tfr --early-stopping 2|--val all.tfr --early-stopping 2 --monitor val_accuracy
--monitor-mode|monitor_mode|--val all.tfr --early-stopping 2|--val all.tfr --early-stopping 2 --monitor-mode max
--early-stopping|early_stopping|--val all.tfr --early-stopping 2|--val all.tfr --early-stopping 3
--reduce-lr-on-plateau|reduce_lr_on_plateau|--val all.tfr|--val all.tfr --reduce-lr-on-plateau 2
--save-best|save_best|--val all.tfr|--val all.tfr --save-best b.st
EOF
)

# the man page's list, between its two comment lines
listed=$(sed -n '/^\.\\" the options compared/,/^\.\\" end of the options compared/p' \
	"$DP_SRC/man/man1/dp-train.1" | grep -v '^\.\\"' | grep -o '\\-\\-[a-z0-9\\-]*' |
	sed 's/\\//g' | sort)
ok test "$(printf '%s\n' "$listed" | wc -l)" -ge 40 "dp-train(1) lists the options compared"
is "$listed" "$(cut -d'|' -f1 <<<"$ROWS" | sort)" "... and each of them is tried here"

# mpmd PROG0 PROG1 A B: rank 0 runs PROG0 with BASE + A, rank 1 PROG1 with BASE + B
mpmd() {
	local p0=$1 p1=$2 a=() b=()
	eval "a=($3)"
	eval "b=($4)"
	case " $3 $4 " in *" --train"*) ;; *) a+=(--train all.tfr) b+=(--train all.tfr) ;; esac
	run timeout 120 mpirun "${MPI_OPTS[@]}" -np 1 $p0 "${BASE[@]}" "${a[@]}" : \
		-np 1 $p1 "${BASE[@]}" "${b[@]}" </dev/null
}

mpmd dp-train dp-train "" ""
is "$rc" 0 "the same options on both ranks: the job trains"
while IFS='|' read -r opt key a b; do
	p=dp-train
	if [ "$opt" = --precision ]; then # the cpu backend has fp32 only
		[ -x "$EMU" ] || { skip "$opt: no $EMU"; continue; }
		p=$EMU
	fi
	mpmd "$p" "$p" "$a" "$b"
	if [ "$rc" = 2 ] && printf '%s' "$err" | grep -q "settings differ between ranks: rank 1 has '$key="; then
		_tap_result 0 "$opt differing between ranks: refused, naming '$key'"
	else
		_tap_result 1 "$opt differing between ranks: refused, naming '$key'"
		printf '#   exit %s: %s\n' "$rc" "$(head -c 600 <<<"$err")"
	fi
done <<<"$ROWS"

# the build: another BLAS library on rank 1
cat > fakeblas.c <<'EOF'
char *openblas_get_config(void) { return "OpenBLAS 9.9.9 DYNAMIC_ARCH Haswell"; }
EOF
if cc -shared -fPIC -o fakeblas.so fakeblas.c 2>/dev/null; then
	# (under ASan the preloaded library comes before its runtime: allowed here)
	mpmd dp-train "env LD_PRELOAD=$T/fakeblas.so ASAN_OPTIONS=${ASAN_OPTIONS:-}:verify_asan_link_order=0 dp-train" "" ""
	is "$rc" 2 "a rank that loads another BLAS library: exit 2"
	like "$err" "rank 1 has 'build=dptools [^ ]+; [a-z]+ [^;]+; CFLAGS [^;]*; backends (cuda \([^)]*\), )?cpu \(OpenBLAS 9\.9\.9(, oneDNN [^)]*)?\)'" \
		"... names the build: version, compiler, flags, libraries"
else
	skip "no C compiler for a fake BLAS library"
fi
# the backend: the emulated CUDA build with DP_BACKEND=cpu on rank 1
if [ -x "$EMU" ]; then
	mpmd "$EMU" "env DP_BACKEND=cpu $EMU" "" ""
	is "$rc" 2 "a rank on another backend: exit 2"
	like "$err" "rank 1 has 'backend=cpu' where rank 0 has 'backend=cuda'" "... names the backend"
else
	skip "no $EMU"
fi
done_testing
