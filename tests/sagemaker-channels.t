#!/usr/bin/env bash
# A SageMaker fine-tuning job's extra channels (issue 25): every File-mode
# channel besides train and validation is passed through as files, and the
# hyperparameters name files in them ("init": "pretrained/w.pth", or the
# channel alone when it holds one file), also at SM_CHANNEL_<NAME>; the job
# starts from those weights (torch.save's .pth, as PyTorch users have them).
# A channel named alone that holds several files, an extra channel in Pipe
# mode, and no train channel are refused, said why, in the failure file.
. "${DP_SRC:-.}/tests/lib.sh"
cd "$T" || exit 1
unset SM_HPS SM_HOSTS SM_CURRENT_HOST SM_MODEL_DIR SM_CHANNEL_TRAIN SM_CHANNEL_PRETRAINED SM_NUM_GPUS \
	SM_OUTPUT_DATA_DIR DP_SAGEMAKER_ROOT
MK="$PY $DP_SRC/tests/mkexamples.py"

R=$T/ml
mkdir -p "$R"/input/config "$R"/input/data/train "$R"/input/data/pretrained "$R"/model
$MK "$R/input/data/train/a.tfr" random --n 40 --shape 12 --classes 5 --seed 1 || exit 1
# the pretrained weights, as a PyTorch user has them: a .pth
dp-train --train "$R/input/data/train/a.tfr" --input-shape 12 --model dense:8,relu,dense:5 --epochs 2 \
	-q -o pre.st >/dev/null || exit 1
dp-ckpt export pre.st -o "$R/input/data/pretrained/weights.pth" || exit 1
cat >"$R/input/config/inputdataconfig.json" <<'J'
{"train": {"TrainingInputMode": "File"}, "pretrained": {"TrainingInputMode": "File"}}
J
hps() { echo "{\"model\": \"dense:8,relu,dense:5\", \"input_shape\": \"12\", \"optimizer\": \"sgd\", \"lr\": \"0\", $1}" \
	>"$R/input/config/hyperparameters.json"; }

hps '"init": "\"pretrained/weights.pth\""'
run dp-train --sagemaker="$R"
is "$rc" 0 "a job with a pretrained channel and init naming a file in it"
run dp-ckpt diff --weights "$R/model/model.safetensors" pre.st
is "$rc" 0 "... it started from those weights (lr 0: unchanged)"
hps '"init": "pretrained"'
rm "$R/model/model.safetensors"
run dp-train --sagemaker="$R"
run dp-ckpt diff --weights "$R/model/model.safetensors" pre.st
is "$rc" 0 "init naming the channel alone: its one file"
mkdir -p elsewhere && cp "$R/input/data/pretrained/weights.pth" elsewhere/w2.pth
rm "$R/model/model.safetensors"
run env SM_CHANNEL_PRETRAINED="$T/elsewhere" dp-train --sagemaker="$R"
is "$rc" 0 "the channel at SM_CHANNEL_PRETRAINED"
run dp-ckpt diff --weights "$R/model/model.safetensors" pre.st
is "$rc" 0 "... its file taken"
touch "$R/input/data/pretrained/notes.txt"
run dp-train --sagemaker="$R"
like "$rc:$err" "^2:dp-train: .*hyperparameter 'init' names channel 'pretrained', which holds 2 files \\(notes.txt, weights.pth\\): name one, 'pretrained/FILE'" \
	"a channel of several files named alone: refused, listing them"
like "$(cat "$R/output/failure")" "holds 2 files" "... in the failure file"
rm "$R/input/data/pretrained/notes.txt"
echo '{"train": {"TrainingInputMode": "File"}, "pretrained": {"TrainingInputMode": "Pipe"}}' \
	>"$R/input/config/inputdataconfig.json"
run dp-train --sagemaker="$R"
like "$rc:$err" "^2:dp-train: channel 'pretrained' in Pipe mode: dp-train reads the channels train and validation, and takes the others as files" \
	"an extra channel in Pipe mode: refused"
done_testing
