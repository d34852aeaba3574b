#!/usr/bin/env bash
# dp-train and dp-eval in the SageMaker container contract (tools/sagemaker.c):
# a whole /opt/ml tree in $T, File-mode channels, hyperparameters as
# SageMaker writes them (strings, some JSON-quoted), the model in the model
# folder, checkpoints resumed, the failure file; a processing job's layout
# for dp-eval (a .safetensors and a training job's model.tar.gz); the
# example's entrypoint (1 rank, and 2 under mpirun), its CreateTrainingJob
# request (checked by botocore's schema, its metric regexes against a real
# log) and its Dockerfile's packages.  Pipe mode: tests/sagemaker-pipe.t.
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/mpi.sh"
cd "$T"
MK="$PY $DP_SRC/tests/mkexamples.py"
EX="$DP_SRC/examples/sagemaker"
unset SM_HPS SM_HOSTS SM_CURRENT_HOST SM_MODEL_DIR SM_CHANNEL_TRAIN SM_NUM_GPUS \
	SM_OUTPUT_DATA_DIR DP_SAGEMAKER_ROOT

# ---- a training job's tree ---------------------------------------------------------------
R=$T/ml
mkdir -p "$R"/input/config "$R"/input/data/train/part "$R"/input/data/validation \
	"$R"/model "$R"/output/data
$MK "$R/input/data/train/a.tfr" random --n 200 --shape 12 --classes 5 --seed 1
$MK "$R/input/data/train/part/b.tfr" random --n 100 --shape 12 --classes 5 --seed 3
$MK "$R/input/data/validation/v.tfr" random --n 50 --shape 12 --classes 5 --seed 2
cat >"$R/input/config/hyperparameters.json" <<'EOF'
{"model": "\"dense:16,relu,dense:5\"", "input_shape": "12", "epochs": "2", "batch_size": "32",
 "lr": "0.01", "log-every": "5", "seed": "\"4\"", "nesterov": "false", "shuffle-buffer": 100,
 "sagemaker_program": "train.py", "sagemaker_region": "\"us-east-1\"",
 "_tuning_objective_metric": "validation:accuracy"}
EOF
cat >"$R/input/config/inputdataconfig.json" <<'EOF'
{"train": {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated", "RecordWrapperType": "None"},
 "validation": {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated"},
 "test": {"TrainingInputMode": "File"}}
EOF
cat >"$R/input/config/resourceconfig.json" <<'EOF'
{"current_host": "algo-1", "hosts": ["algo-1"], "network_interface_name": "eth0"}
EOF
# the same run as plain options: what the job's files must amount to
DIRECT=(--train "$R/input/data/train/a.tfr" --train "$R/input/data/train/part/b.tfr"
	--val "$R/input/data/validation/v.tfr" --model dense:16,relu,dense:5 --input-shape 12
	--epochs 2 --batch-size 32 --lr 0.01 --log-every 5 --seed 4 --shuffle-buffer 100)

# ---- File mode ---------------------------------------------------------------------------------
run timeout 120 dp-train --sagemaker="$R"
is "$rc" 0 "--sagemaker=ROOT: exit 0"
ok_ckpt "$R/model/model.safetensors" "the model in ROOT/model"
ok test ! -e "$R/output/failure" "no failure file after a success"
like "$err" "2 training sources" "both files of the train channel, its subfolder's too"
run timeout 120 dp-train "${DIRECT[@]}" -o direct.st
is "$rc" 0 "the same run with plain options"
same_file "$R/model/model.safetensors" direct.st \
	"the hyperparameters and channels are those options: the same checkpoint, byte for byte"
sed 's/ samples_per_sec=[0-9.]*//' <<<"$out" >direct.log
dp-train --sagemaker="$R" 2>/dev/null | sed 's/ samples_per_sec=[0-9.]*//' >sm.log
same_file sm.log direct.log "... and the same log lines (samples_per_sec aside)"
like "$(grep -c val_loss sm.log)" "^2$" "the validation channel: a line an epoch"

# the lone argument train (docker run IMAGE train), root from DP_SAGEMAKER_ROOT
rm -f "$R/model/model.safetensors"
run env DP_SAGEMAKER_ROOT="$R" timeout 120 dp-train train
is "$rc" 0 "dp-train train: SageMaker mode"
ok_ckpt "$R/model/model.safetensors" "... the model written"
# no detection from the files alone: a plain dp-train is a plain dp-train
run env DP_SAGEMAKER_ROOT="$R" dp-train
is "$rc" 2 "dp-train alone, a SageMaker tree present: still a usage error"
like "$err" "no model" "... nothing taken from the tree"
ok test ! -e "$R/output/failure" "... and no failure file"

# SM_* variables of the training toolkit
mkdir -p alt-model
run env SM_MODEL_DIR="$T/alt-model" SM_HPS='{"model":"dense:5","input-shape":"12","epochs":1,"lr":0.5}' \
	timeout 120 dp-train --sagemaker="$R"
is "$rc" 0 "SM_MODEL_DIR and SM_HPS: exit 0"
ok_ckpt alt-model/model.safetensors "SM_MODEL_DIR: the model there"
is "$(grep -c '^epoch=1 .*lr=0.5 ' <<<"$out"):$(grep -c '^epoch=2' <<<"$out")" "1:0" \
	"SM_HPS instead of the file (numbers as JSON numbers too)"
run env SM_HPS='{"model":"dense:5","input-shape":"12","timeline":"trace.json","log":"/dev/null"}' \
	timeout 120 dp-train --sagemaker="$R"
is "$rc:$out" "0:" "an absolute log name stays as it is"
ok $PY -c 'import json, sys; json.load(open(sys.argv[1]))' "$R/output/data/trace.json" \
	"a relative timeline name goes under ROOT/output/data"
mkdir -p other/x
cp "$R/input/data/train/a.tfr" other/x/only.tfr
run env SM_CHANNEL_TRAIN="$T/other" timeout 120 dp-train --sagemaker="$R" --epochs 1 -q
is "$rc" 0 "SM_CHANNEL_TRAIN: exit 0"
is "$err" "" "the command line's options win (-q)"
run env SM_CHANNEL_TRAIN="$T/other" timeout 120 dp-train --sagemaker="$R" --epochs 1
like "$err" " 1 training source" "SM_CHANNEL_TRAIN: that folder's files"

# checkpoints: each epoch's in ROOT/checkpoints, resumed from at a restart
mkdir -p "$R/checkpoints"
run timeout 120 dp-train --sagemaker="$R"
is "$rc" 0 "with ROOT/checkpoints: exit 0"
ok_ckpt "$R/checkpoints/checkpoint.safetensors" "the epoch's checkpoint there"
run env SM_HPS='{"model":"dense:16,relu,dense:5","input-shape":"12","epochs":"3","batch-size":"32","lr":"0.01","log-every":"5","seed":"4","shuffle-buffer":"100","init":"nowhere.st"}' \
	timeout 120 dp-train --sagemaker="$R"
is "$rc" 0 "a restart: exit 0"
like "$err" "resuming $R/checkpoints/checkpoint.safetensors at epoch 3, step 20" \
	"a restart resumes from the checkpoint (and not --init)"
is "$(grep -c '^epoch=3 step=30 val_loss' <<<"$out")" 1 "... and trains on to the third epoch"
rm -rf "$R/checkpoints"
# a fine-tuning job (init and reset in its hyperparameters) restarted, as a
# managed-spot job is: it resumes (the restart left --init out but kept
# --reset, which needs it: exit 2)
dp-train --train "$R/input/data/train/part/b.tfr" --model dense:16,relu,dense:5 --input-shape 12 \
	--epochs 1 -q -o pre.st || exit 1
mkdir -p "$R/checkpoints"
FT='{"model":"dense:16,relu,dense:5","input-shape":"12","epochs":"2","batch-size":"32","seed":"4","init":"'$T/pre.st'","reset":"2"}'
run env SM_HPS="$FT" timeout 120 dp-train --sagemaker="$R" --max-steps 15
is "$rc" 0 "a fine-tuning job (init, reset): its first start"
run env SM_HPS="$FT" timeout 120 dp-train --sagemaker="$R"
is "$rc" 0 "... restarted: it resumes"
like "$err" "resuming $R/checkpoints/checkpoint.safetensors" "... from its checkpoint"
rm -rf "$R/checkpoints"

# a channel with a link loop: an error naming it, not the files read again
# and again (820 samples for 20)
ln -s .. "$R/input/data/train/part/up"
run timeout 60 dp-train --sagemaker="$R" --epochs 1
is "$rc" 1 "a train channel with a link back up (part/up -> ..): exit 1"
like "$err" "train/part/up: a loop: it leads back to $R/input/data/train" "... naming the loop"
rm "$R/input/data/train/part/up"

# ---- failures: stderr and ROOT/output/failure ------------------------------------------------------
failure() { # name: the failure file holds stderr's message
	local f
	f=$(cat "$R/output/failure" 2>/dev/null)
	is "$f" "$(grep '^dp-train: ' <<<"$err" | tail -n 1)" "$1: the reason in ROOT/output/failure too"
	rm -f "$R/output/failure"
}
run env SM_HPS='{"lr":"fast"}' dp-train --sagemaker="$R"
is "$rc" 2 "a bad hyperparameter value: exit 2"
like "$err" "^dp-train: --lr 'fast': want a number" "... named"
failure "a bad value"
run env SM_HPS='{"model":"dense:5","learning_rate":"0.1"}' dp-train --sagemaker="$R"
is "$rc" 2 "an unknown hyperparameter: exit 2"
like "$err" "hyperparameter 'learning_rate': not an option of dp-train" "... the key named"
failure "an unknown key"
run env SM_HPS='{"nesterov":"yes please"}' dp-train --sagemaker="$R"
like "$err" "hyperparameter 'nesterov' is 'yes please': --nesterov is a switch: want true or false" \
	"a switch: true or false"
failure "a bad switch"
# a tree without output/ (made by hand, or by another harness): the failure
# is recorded all the same
mv "$R/output" "$R/output.away"
run env SM_HPS='{"lr":"fast"}' dp-train --sagemaker="$R"
is "$rc" 2 "no ROOT/output: a bad value still exit 2"
failure "no ROOT/output"
rm -rf "$R/output" && mv "$R/output.away" "$R/output"
run env SM_HPS='{"help":"true"}' dp-train --sagemaker="$R"
like "$rc:$err" "^2:.*'help': not an option" "help is no hyperparameter"
rm -f "$R/output/failure"
printf 'not a tfrecord file, long enough to have a header' >"$R/input/data/train/part/c.tfr"
run timeout 120 dp-train --sagemaker="$R"
is "$rc" 1 "corrupt data: exit 1"
like "$err" "c.tfr: record 0 at byte 0" "... the file and the place named"
failure "corrupt data"
rm "$R/input/data/train/part/c.tfr"
echo '{"tarin": {"TrainingInputMode": "File"}}' >ic.json
cp "$R/input/config/inputdataconfig.json" ic.keep
cp ic.json "$R/input/config/inputdataconfig.json"
run dp-train --sagemaker="$R"
like "$rc:$err" "^2:dp-train: no training data: no channel train \(or training\) \(the job's channels: tarin\)" \
	"no train channel (a misspelt one): refused, naming the channels (others are taken as files: sagemaker-channels.t)"
failure "no train channel"
cp ic.keep "$R/input/config/inputdataconfig.json"
run env SM_HOSTS='["algo-1","algo-2"]' SM_CURRENT_HOST=algo-2 dp-train --sagemaker="$R"
like "$rc:$err" "^2:dp-train: a job of 2 hosts \(algo-1, algo-2\): dp-train --sagemaker must run under mpirun" \
	"two hosts and no mpirun: refused, said why"
failure "two hosts"
echo '{"hosts": ["algo-1"], "current_host": "algo-9"}' >"$R/input/config/resourceconfig.json"
run dp-train --sagemaker="$R"
like "$rc:$err" "^1:.*current host 'algo-9' is not one of the hosts \(algo-1\)" "a current host not in hosts"
failure "a bad resourceconfig.json"
echo '{"hosts": ["algo-1"], "current_host": "algo-1"}' >"$R/input/config/resourceconfig.json"
run env DP_SAGEMAKER_ROOT=/nonexistent dp-train --sagemaker="$R" --epochs 0
like "$rc:$err" "^2:dp-train: --epochs '0'" "--sagemaker=ROOT wins over DP_SAGEMAKER_ROOT; command-line errors too"
failure "a command-line error"

# ---- the entrypoint of the example image ------------------------------------------------------------
rm -f "$R/model/model.safetensors"
run env DP_SAGEMAKER_ROOT="$R" timeout 120 "$EX/entrypoint" train
is "$rc" 0 "entrypoint train: exit 0"
ok_ckpt "$R/model/model.safetensors" "... the model written"
if have_mpirun; then
	rm -f "$R/model/model.safetensors"
	run env DP_SAGEMAKER_ROOT="$R" SM_NUM_GPUS=2 timeout 120 "$EX/entrypoint" train
	is "$rc" 0 "entrypoint train, SM_NUM_GPUS=2: exit 0"
	like "$err" "global batch 64 \(2 x 32\)" "... two ranks under mpirun"
	ok_ckpt "$R/model/model.safetensors" "... the model written"
else
	skip "no mpirun"; skip "no mpirun"; skip "no mpirun"
fi
# two hosts as mpirun's ranks see them (both on this machine: a stand-in for
# algo-1 and algo-2, each rank reading the same tree)
if have_mpirun; then
	H=(env SM_HOSTS='["algo-1","algo-2"]' SM_CURRENT_HOST=algo-1)
	run "${H[@]}" timeout 120 mpirun "${MPI_OPTS[@]}" -np 2 dp-train --sagemaker="$R"
	is "$rc" 0 "two hosts under mpirun, FullyReplicated: exit 0"
	like "$err" "training data shared: rank r takes the r-th slice" "... the ranks split the records"
	cp "$R/input/config/inputdataconfig.json" ic.keep
	sed -i 's/"FullyReplicated", "RecordWrapperType"/"ShardedByS3Key", "RecordWrapperType"/' \
		"$R/input/config/inputdataconfig.json"
	run "${H[@]}" timeout 120 mpirun "${MPI_OPTS[@]}" -np 2 dp-train --sagemaker="$R"
	is "$rc" 0 "two hosts, ShardedByS3Key: exit 0"
	like "$err" "training data per rank" "... each host's share is its rank's (--no-shard-data)"
	run "${H[@]}" timeout 120 mpirun "${MPI_OPTS[@]}" -np 4 dp-train --sagemaker="$R"
	isnt "$rc" 0 "... with 4 ranks on 2 hosts: refused"
	like "$err" "^dp-train: channel 'train' is ShardedByS3Key: each host has its own share: run one rank a host, not 4 ranks on 2 hosts" \
		"... said why, once"
	is "$(grep -c ShardedByS3Key <<<"$err")" 1 "... by rank 0 alone"
	cp ic.keep "$R/input/config/inputdataconfig.json"
	rm -f "$R/output/failure"
else
	for i in 1 2 3 4 5 6 7; do skip "no mpirun"; done
fi
run "$EX/entrypoint" dp-train --version
like "$rc:$out" "^0:dp-train \(dptools\)" "entrypoint COMMAND: runs it"
# an endpoint: `docker run IMAGE serve` with the model the job wrote
if command -v curl >/dev/null; then
	rm -f port
	DP_SAGEMAKER_ROOT="$R" SAGEMAKER_BIND_TO_PORT=0 timeout 120 "$EX/entrypoint" serve --bind 127.0.0.1 \
		--port-file port --stats-every 0 2>serve.log &
	spid=$!
	for _ in $(seq 100); do [ -s port ] && break; sleep 0.1; done
	like "$(curl -s --max-time 10 "http://127.0.0.1:$(cat port)/ping")" '"input_shape": "' \
		"entrypoint serve: dp-serve answers /ping with the job's model"
	kill $spid; wait $spid
	is "$?" 0 "... and stops on SIGTERM, exit 0"
else
	skip "no curl"; skip "no curl"
fi

# ---- dp-eval in a processing job ---------------------------------------------------------------------
P=$T/proc
mkdir -p "$P/processing/input/model" "$P/processing/input/test" "$P/output"
cp direct.st "$P/processing/input/model/model.safetensors"
$MK "$P/processing/input/test/t1.tfr" random --n 60 --shape 12 --classes 5 --seed 7
$MK "$P/processing/input/test/t2.tfr" random --n 40 --shape 12 --classes 5 --seed 8
run dp-eval --sagemaker="$P" -q
is "$rc" 0 "dp-eval --sagemaker: exit 0"
EJ=$P/processing/evaluation/evaluation.json
dp-eval --model direct.st --data "$P/processing/input/test/t1.tfr" --data "$P/processing/input/test/t2.tfr" \
	--json direct.json -q
metrics() { $PY -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j["samples"], json.dumps(j["metrics"], sort_keys=True))' "$1"; }
is "$(metrics "$EJ")" "$(metrics direct.json)" \
	"processing/evaluation/evaluation.json: the metrics of the model on input/test"
# a training job's model.tar.gz
rm "$P/processing/input/model/model.safetensors" "$EJ"
mkdir tarred && cp direct.st tarred/model.safetensors
tar -czf "$P/processing/input/model/model.tar.gz" -C tarred model.safetensors
run dp-eval --sagemaker="$P" -q
is "$rc" 0 "a model.tar.gz: exit 0"
is "$(metrics "$EJ")" "$(metrics direct.json)" "... its member evaluated"
run dp-eval --sagemaker="$P" -q --require 'accuracy>=0.99'
is "$rc" 3 "a failed gate: exit 3"
is "$(cat "$P/output/message")" "$(tail -n 1 <<<"$err")" "... the reason in ROOT/output/message"
rm -f "$P/output/message"
rm "$P/processing/input/model/model.tar.gz"
tar -czf "$P/processing/input/model/model.tar.gz" -C tarred --transform 's/safetensors/bin/' model.safetensors
run dp-eval --sagemaker="$P" -q
like "$rc:$err" "^1:dp-eval: .*model.tar.gz: no member named \*.safetensors" "a tarball without a checkpoint"
is "$(cat "$P/output/message")" "$(tail -n 1 <<<"$err")" "... in ROOT/output/message"

# ---- the example's CreateTrainingJob request -----------------------------------------------------------
if $PY -c 'import botocore' 2>/dev/null; then
	run $PY - "$EX" <<'EOF'
import json, sys, botocore.session, botocore.validate
m = botocore.session.get_session().get_service_model("sagemaker")
for f, op in (("create-training-job.json", "CreateTrainingJob"),
              ("create-processing-job.json", "CreateProcessingJob")):
    botocore.validate.validate_parameters(json.load(open(sys.argv[1] + "/" + f)),
                                          m.operation_model(op).input_shape)
EOF
	is "$rc:$err" "0:" "the example requests are valid CreateTrainingJob/CreateProcessingJob input (botocore)"
else
	skip "python3-botocore not installed"
fi
# its hyperparameters are dp-train's options: a short run of them on small images
mkdir -p ex/input/config ex/input/data/train ex/input/data/validation ex/model ex/output
$MK ex/input/data/train/t.tfr random --n 64 --shape 784 --classes 10 --kind uint8 --seed 1
$MK ex/input/data/validation/v.tfr random --n 16 --shape 784 --classes 10 --kind uint8 --seed 2
$PY - "$EX/create-training-job.json" <<'EOF' >ex/input/config/hyperparameters.json
import json, sys
hp = json.load(open(sys.argv[1]))["HyperParameters"]
hp.update({"epochs": "2", "log-every": "1", "batch-size": "16"})
print(json.dumps(hp))
EOF
$PY -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["AlgorithmSpecification"]["MetricDefinitions"]))' \
	"$EX/create-training-job.json" >defs.json
timeout 300 dp-train --sagemaker=ex >ex.log 2>ex.err
is "$?" 0 "the example's hyperparameters: dp-train runs them"
# each definition against logfmt's own reading of the same key
for m in train:loss:loss train:accuracy:accuracy train:lr:lr train:samples_per_sec:samples_per_sec \
	validation:loss:val_loss validation:accuracy:val_accuracy; do
	name=${m%:*} key=${m##*:}
	got=$(metrics-grep --definitions defs.json ex.log --json | $PY -c '
import json, sys
print([json.loads(l)["value"] for l in sys.stdin if json.loads(l)["name"] == sys.argv[1]])' "$name")
	want=$(metrics-grep --logfmt="$key" ex.log --json | $PY -c '
import json, sys
print([json.loads(l)["value"] for l in sys.stdin])')
	if [ "$want" != "[]" ]; then
		is "$got" "$want" "MetricDefinitions $name: every $key of the log, nothing else"
	else
		is "$want" "not empty" "the log has $key values"
	fi
done

# ---- the Dockerfile installs what scripts/deps lists ------------------------------------------------
pk=$(sed -n '/apt-get install/,/&& rm/p' "$EX/Dockerfile" | tr ' \\' '\n\n' |
	grep -E '^[a-z0-9][a-z0-9.+-]+$' | grep -vx 'apt-get\|install\|rm' | sort | tr '\n' ' ')
want=$(echo $("$DP_SRC/scripts/deps" --list build) $("$DP_SRC/scripts/deps" --list run) | tr ' ' '\n' | sort | tr '\n' ' ')
is "$pk" "$want" "the Dockerfile's packages: scripts/deps --list build and run"
like "$(grep -c 'make -C /usr/src/dptools install' "$EX/Dockerfile")" "^1$" "... then make install (tests/install.t)"
like "$(grep '^ENTRYPOINT' "$EX/Dockerfile")" "dptools-sagemaker" "... the entrypoint installed is the one tested here"

done_testing
