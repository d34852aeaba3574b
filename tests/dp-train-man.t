#!/usr/bin/env bash
# dp-train(1) and dp-checkpoint(5): they format without warnings, every
# example in them runs (on small fixtures of the same form as the data they
# name), and the Python snippet of dp-checkpoint(5) reads a real checkpoint
# and loads it into PyTorch.
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/man-examples.sh"

MAN1="$DP_SRC/man/man1/dp-train.1"
MAN5="$DP_SRC/man/man5/dp-checkpoint.5"
cd "$T" || exit 1
for m in "$MAN1" "$MAN5"; do
	man_lint "$m"
done

# the examples: each .EX block, roff escapes undone, runs with bash
examples() { # page -> blocks separated by a line "@@"
	awk '/^\.EX/ {on = 1; next} /^\.EE/ {on = 0; print "@@"; next} on' "$1" |
		sed -e 's/\\-/-/g' -e 's/\\e/\\/g'
}

MK="$PY $DP_SRC/tests/mkexamples.py"
$MK train.tfrecord random --n 300 --shape 1x28x28 --kind uint8 --seed 1
$MK test.tfrecord random --n 100 --shape 1x28x28 --kind uint8 --seed 2
gzip -k train.tfrecord
mkdir data
$MK data/train-0.tfrecord random --n 64 --shape 1x28x28 --kind uint8 --seed 3
$MK data/train-1.tfrecord random --n 64 --shape 1x28x28 --kind uint8 --seed 4
# the shards of the mpirun example (tfr-shard -n 4)
for r in 0 1 2 3; do
	$MK data/train-$r-of-4.tfrecord random --n 48 --shape 1x28x28 --kind uint8 --seed $((10 + r))
done
$PY "$DP_SRC/tests/mkphotos.py" photos 8 || exit 1 # the image example's
# the fine-tuning example's torchvision weights (or, without torchvision, a
# checkpoint of dp-train's own resnet18 exported as a .pth: --init takes either)
cat > tv.py <<'EOF'
import os, sys
sys.path.insert(0, os.environ["DP_SRC"] + "/tests")
import torch, torchvision
torch.manual_seed(0)
m = torchvision.models.resnet18()
torch.save(m.state_dict(), "resnet18.pth")
EOF
$PY tv.py 2>/dev/null || { $MK rgb.tfrecord random --n 4 --shape 3x32x32 --kind uint8 --seed 5 &&
	dp-train --train rgb.tfrecord --decode-raw uint8 --model resnet18 --input-shape 3x32x32 \
		-q --max-steps 1 -o r18.safetensors && dp-ckpt export r18.safetensors -o resnet18.pth; }
. "$DP_SRC/tests/mpi.sh" # mpirun as the MPI tests run it: -np 4 on two cores, unbound
examples "$MAN1" > ex1.txt
n=0
while IFS= read -r -d '@' block; do
	block=${block#@}
	block=${block#$'\n'}
	[ -n "${block//[$'\n ']/}" ] || continue
	n=$((n + 1))
	printf '%s\n' "$block" > "ex-$n.sh"
	bash "ex-$n.sh" < /dev/null > "ex-$n.out" 2> "ex-$n.err" # mpirun would read stdin
	rc=$?
	is "$rc" 0 "dp-train(1) example $n runs: $(head -1 "ex-$n.sh" | cut -c1-60)"
	[ "$rc" = 0 ] || sed 's/^/#   /' "ex-$n.err" | head -5
done < <(examples "$MAN1" | sed 's/^@@$/@/')
ok test "$n" -ge 8 "found the examples ($n)"
ok_ckpt mlp.safetensors "the first example wrote mlp.safetensors"
like "$(cat ex-2.out)" "total 1199882 parameters" "the --summary example prints the parameter count"
ok_ckpt tuned.safetensors "the fine-tuning example wrote its checkpoint"
ok_ckpt resnet18-photos.safetensors "the ResNet-18 example wrote its checkpoint"
ok_ckpt resnet20.safetensors "the ResNet-20 example wrote its checkpoint"
ok_ckpt ml/model/model.safetensors "the SageMaker example wrote ml/model/model.safetensors"
ok_ckpt dist.safetensors "the mpirun example wrote its checkpoint"
ok_ckpt staged.safetensors "the pipeline example wrote one checkpoint from its 2 stages"
like "$(cat ex-*.err)" "pipeline: 2 stages x 2 replicas" "... trained as 2 stages x 2 replicas"
like "$(dp-eval --model best.safetensors --data test.tfrecord --json - 2>&1)" '"loss":' \
	"the training-control example wrote its best checkpoint, which dp-eval loads"
like "$(cat ex-*.err)" "stopping early \(--early-stopping\)" "... and stopped early (random data)"
ok $PY -c 'import json; t = json.load(open("trace.json")); assert {e["pid"] for e in t} == {0, 1, 2, 3}' \
	"the mpirun example wrote a trace of 4 ranks"
like "$(cat ex-*.err)" "resumed by 4 with the same global batch \(128\)" "the shared-file example resumes with 4 ranks"

# the Python snippet of dp-checkpoint(5), on the checkpoint just written
examples "$MAN5" | sed '/^@@$/d' > snippet.py
if $PY "$DP_SRC/tests/torch_ref.py" check; then
	run $PY snippet.py
	is "$rc" 0 "dp-checkpoint(5) snippet loads mlp.safetensors into torch.nn.Sequential"
	like "$out" "^flatten,dense:128,relu,dense:10 1x28x28 step 30" "the snippet prints the metadata"
	like "$out" "1.weight float32 \(128, 784\)" "the snippet prints the tensors"
else
	skip "python3-torch is not installed: apt-get install python3-torch"
	skip "python3-torch is not installed"
	skip "python3-torch is not installed"
fi
# the test helpers read checkpoints with exactly the documented function
sed -n '/^def load_checkpoint/,/^    return tensors, meta/p' snippet.py > doc.txt
sed -n '/^def load_checkpoint/,/^    return tensors, meta/p' "$DP_SRC/tests/torch_ref.py" > ref.txt
ok cmp -s doc.txt ref.txt "tests/torch_ref.py uses the snippet of dp-checkpoint(5) verbatim"

done_testing
