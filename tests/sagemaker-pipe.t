#!/usr/bin/env bash
# dp-train --sagemaker in Pipe mode: the channels' FIFOs <channel>_<epoch>
# fed from a real S3 server (radosgw, tests/s3lib.sh) by `s3-pipe fifo`, as
# SageMaker feeds them; the model must be the one trained on the same
# records read from files.  File mode and the rest: tests/sagemaker.t.
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/s3lib.sh"
cd "$T"
s3_setup smp
MK="$PY $DP_SRC/tests/mkexamples.py"
unset SM_HPS SM_HOSTS SM_CURRENT_HOST SM_MODEL_DIR SM_CHANNEL_TRAIN SM_NUM_GPUS \
	SM_OUTPUT_DATA_DIR DP_SAGEMAKER_ROOT

mkdir -p d/train d/val
$MK d/train/a.tfr random --n 120 --shape 12 --classes 5 --seed 1
$MK d/train/b.tfr random --n 80 --shape 12 --classes 5 --seed 3
$MK d/val/v.tfr random --n 40 --shape 12 --classes 5 --seed 2
s3-pipe put s3://smp/train/ d/train/a.tfr d/train/b.tfr 2>put.err
s3-pipe put s3://smp/val/ d/val/v.tfr 2>>put.err
is "$(s3-pipe ls s3://smp/ -r 2>&1 | grep -c tfr)" 3 "the channels' records in the bucket"

R=$T/ml
mkdir -p "$R/input/config" "$R/input/data" "$R/model" "$R/output"
cat >"$R/input/config/hyperparameters.json" <<'EOF'
{"model": "\"dense:16,relu,dense:5\"", "input-shape": "12", "epochs": "2", "batch-size": "16",
 "lr": "0.01", "log-every": "4", "shuffle-buffer": "0", "sagemaker_program": "x"}
EOF
cat >"$R/input/config/inputdataconfig.json" <<'EOF'
{"train": {"TrainingInputMode": "Pipe", "S3DistributionType": "FullyReplicated", "RecordWrapperType": "None"},
 "validation": {"TrainingInputMode": "Pipe", "S3DistributionType": "FullyReplicated"}}
EOF

# SageMaker's side: a FIFO an epoch and channel, train_0, train_1, validation_0...
timeout 120 s3-pipe fifo --dir "$R/input/data" --channel train --epochs 2 s3://smp/train/ 2>fifo-t.err &
ft=$!
timeout 120 s3-pipe fifo --dir "$R/input/data" --channel validation --epochs 2 s3://smp/val/ 2>fifo-v.err &
fv=$!
run timeout 120 dp-train --sagemaker="$R"
is "$rc" 0 "Pipe mode: exit 0"
wait $ft
is "$?" 0 "s3-pipe fifo served both epochs of train"
wait $fv
is "$?" 0 "... and of validation"
is "$(ls -A "$R/input/data")" "" "no FIFO left unread"
ok_ckpt "$R/model/model.safetensors" "the model in ROOT/model"
is "$(grep -c val_loss <<<"$out")" 2 "a validation line an epoch, from validation_0 and validation_1"

# the same records from files
run timeout 120 dp-train --train-cmd 'cat d/train/a.tfr d/train/b.tfr' --val-cmd 'cat d/val/v.tfr' \
	--model dense:16,relu,dense:5 --input-shape 12 --epochs 2 --batch-size 16 --lr 0.01 \
	--log-every 4 --shuffle-buffer 0 -o direct.st
is "$rc" 0 "the same run from files"
same_file "$R/model/model.safetensors" direct.st "Pipe mode trains on the streamed records: the same checkpoint"

# a restart: the checkpoint of epoch 1 in ROOT/checkpoints (a first
# container that ended after it); the new container's FIFOs start again
# from train_0, which is epoch 2's
serve() { # epochs: s3-pipe fifo for both channels, in the background
	timeout 120 s3-pipe fifo --dir "$R/input/data" --channel train --epochs "$1" s3://smp/train/ 2>>fifo-t.err &
	ft=$!
	timeout 120 s3-pipe fifo --dir "$R/input/data" --channel validation --epochs "$1" s3://smp/val/ 2>>fifo-v.err &
	fv=$!
}
mkdir -p "$R/checkpoints"
serve 1
run timeout 120 dp-train --sagemaker="$R" --epochs 1
wait $ft $fv
is "$rc" 0 "Pipe mode with ROOT/checkpoints: exit 0"
cp "$R/checkpoints/checkpoint.safetensors" epoch1.st
serve 2
run timeout 120 dp-train --sagemaker="$R" --epochs 3
wait $ft
is "$?:$rc" "0:0" "the restart (3 epochs) resumes and reads the new FIFOs train_0 and train_1"
wait $fv
like "$err" "resuming $R/checkpoints/checkpoint.safetensors at epoch 2, step 13" "... at epoch 2"
run timeout 120 dp-train --resume epoch1.st --train-cmd 'cat d/train/a.tfr d/train/b.tfr' \
	--val-cmd 'cat d/val/v.tfr' --epochs 3 -o direct3.st
is "$rc" 0 "the same resume from files"
same_file "$R/model/model.safetensors" direct3.st "... the same checkpoint"
rm -rf "$R/checkpoints"

# a FIFO is one a host: two ranks of one host cannot share it
run env OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 dp-train --sagemaker="$R"
like "$rc:$err" "^2:dp-train: channel '(train|validation)' in Pipe mode: its FIFOs are one a host: run one rank a host, not 2 ranks on 1 host" \
	"Pipe mode with 2 ranks on a host: refused"
is "$(cat "$R/output/failure")" "$(grep '^dp-train: ' <<<"$err" | tail -n 1)" "... in ROOT/output/failure"
echo '{"train": {"TrainingInputMode": "Pipe", "RecordWrapperType": "RecordIO"}}' \
	>"$R/input/config/inputdataconfig.json"
run dp-train --sagemaker="$R"
like "$rc:$err" "^2:.*RecordWrapperType RecordIO: dp-train reads TFRecord files as they are" "RecordIO wrapping: refused"

done_testing
