# examples/pipeline.mk - the dptools pipeline on Fashion-MNIST, as make rules.
#
#   make -f examples/pipeline.mk [-j2] [W=DIR] [NP=2] [EPOCHS=3] [MIN_ACCURACY=0.85] ...
#
# `make demo` runs it (examples/demo); examples/sweep.sh runs it once per
# setting; `make learn` with the settings of dp-train's reference runs.
# Every stage is a file, made from the files before it, so `make -j` runs
# what can run at once and a re-run does only what changed:
#
#   DATA/train.tfrecord, test.tfrecord   IDX to tf.train.Example     tfr-cat --encode idx
#   DATA/train-0000R-of-0000N.tfrecord   train/val split, N shards   tfr-shard --split
#   DATA/val-0000R-of-0000N.tfrecord
#   W/model.safetensors, W/train.log     training on N workers       mpirun -np N dp-train
#   W/best.safetensors                   its best epoch (EARLY_STOP or PLATEAU set)
#   W/tb/                                TensorBoard, sent each epoch (SYNC set)
#   W/metrics.json, W/report.txt         evaluation on the test set  dp-eval --json
#   W/release/model.safetensors          the model, if it passes     dp-eval --check --require
#   W/loss.svg, W/loss.tsv               the loss curve              metrics-grep --plot
#
# Settings are kept in W/settings/*.txt (DATA/settings for the data), each
# rewritten only when its value changes: a new EPOCHS retrains (and
# evaluates, gates, plots again), a new MIN_ACCURACY only re-checks the
# gate, a new LIMIT converts again.  The programs come from PATH.
# (make -n shows only the first stage due: GNU make 4.3 does not carry a
# dry run past rules with several outputs, `&:`.)

SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
.DELETE_ON_ERROR:
.SUFFIXES:
.DEFAULT_GOAL := all

# ---- settings --------------------------------------------------------------
FASHION ?= /usr/share/datasets/fashion-mnist
W ?= fashion-mnist
DATA ?= $(W)/data
# workers, and how to start them (NP=1: no launcher)
NP ?= 2
MPIRUN ?= mpirun
# training records kept from the 60000 (empty: all) and test records of 10000
LIMIT ?=
TEST_LIMIT ?=
# the split of the training records (empty: no validation set)
SPLIT ?= train=0.95,val=0.05
SEED ?= 0
MODEL ?= conv:32:3,relu,maxpool:2,conv:64:3,relu,maxpool:2,flatten,dense:128,relu,dense:10
EPOCHS ?= 3
# per worker: the global batch is BATCH x NP
BATCH ?= 64
OPTIMIZER ?= adam
LR ?= 1e-3
THREADS ?= 1
LOG_EVERY ?= 50
TRAIN_FLAGS ?=
# training control on the validation loss, as Keras' callbacks (empty: off):
# EARLY_STOP=patience=2 stops when it stalls, PLATEAU=factor=0.5,patience=1
# lowers the rate; with either, the best epoch is kept (W/best.safetensors),
# and it is what is evaluated and released
EARLY_STOP ?=
PLATEAU ?=
# where W/tb (TensorBoard) goes after each epoch, only what changed: an
# s3:// prefix, or a directory (empty: no TensorBoard)
SYNC ?=
MIN_ACCURACY ?= 0.85
# more gates, space-separated: GATES='recall[Shirt]>=0.5 loss<0.5'
GATES ?=
CLASSES ?= T-shirt/top,Trouser,Pullover,Dress,Coat,Sandal,Shirt,Sneaker,Bag,Ankle boot

# ---- derived ---------------------------------------------------------------
LAUNCH := $(if $(filter 1,$(NP)),,$(MPIRUN) -np $(NP))
ids := $(shell seq 0 $$(($(NP) - 1)))
shard = $(foreach i,$(ids),$(DATA)/$1-$(shell printf '%05d-of-%05d' $i $(NP)).tfrecord)
TRAIN_SHARDS := $(call shard,train)
VAL_SHARDS := $(if $(SPLIT),$(call shard,val))
ALL_GATES := $(strip accuracy>=$(MIN_ACCURACY) $(GATES))
BEST := $(if $(EARLY_STOP)$(PLATEAU),$(W)/best.safetensors)
MODEL_FILE := $(or $(BEST),$(W)/model.safetensors)

# $(call setting,FILE,TEXT): FILE holding TEXT, rewritten only when TEXT
# changes; rules that depend on FILE run again only then.  A dry run
# (make -n, make -q) writes nothing: a changed setting is FORCEd instead.
quote = '$(subst ','\'',$1)'
dry := $(findstring n,$(firstword -$(MAKEFLAGS)))$(findstring q,$(firstword -$(MAKEFLAGS)))
setting = $(shell mkdir -p $(dir $1) && t=$(call quote,$2) && \
	if [ -f $1 ] && [ "$$(cat $1)" = "$$t" ]; then echo $1; \
	elif [ -n '$(dry)' ]; then echo $1 FORCE; \
	else printf '%s\n' "$$t" > $1 && echo $1; fi)
CONVERT_SET := $(call setting,$(DATA)/settings/convert.txt,$(LIMIT) $(TEST_LIMIT))
SHARD_SET := $(call setting,$(DATA)/settings/shard-$(NP).txt,$(SPLIT) $(SEED))
TRAIN_SET := $(call setting,$(W)/settings/train.txt,$(NP) $(MODEL) $(EPOCHS) $(BATCH) \
	$(OPTIMIZER) $(LR) $(SEED) $(THREADS) $(LOG_EVERY) $(SPLIT) $(TRAIN_FLAGS) $(DATA) \
	$(EARLY_STOP) $(PLATEAU) $(SYNC))
EVAL_SET := $(call setting,$(W)/settings/eval.txt,$(CLASSES))
GATE_SET := $(call setting,$(W)/settings/gate.txt,$(ALL_GATES))

.PHONY: all data train eval gate plot summary clean FORCE
FORCE:
## all: every stage, then where the results are
all: plot gate
	$(summary)

data: $(TRAIN_SHARDS) $(VAL_SHARDS) $(DATA)/test.tfrecord
train: $(W)/model.safetensors
eval: $(W)/metrics.json
gate: $(W)/release/model.safetensors
plot: $(W)/loss.svg

# ---- 1. IDX files to TFRecord files of tf.train.Example (image: 784 bytes, label)
$(DATA)/train.tfrecord: $(CONVERT_SET)
	@test -r $(FASHION)/train-images-idx3-ubyte.gz || \
	  { echo "$(FASHION): no Fashion-MNIST: apt-get install dataset-fashion-mnist" >&2; exit 1; }
	tfr-cat --encode idx $(if $(LIMIT),-n $(LIMIT)) -o $@ \
	  $(FASHION)/train-images-idx3-ubyte.gz $(FASHION)/train-labels-idx1-ubyte.gz
$(DATA)/test.tfrecord: $(CONVERT_SET)
	tfr-cat --encode idx $(if $(TEST_LIMIT),-n $(TEST_LIMIT)) -o $@ \
	  $(FASHION)/t10k-images-idx3-ubyte.gz $(FASHION)/t10k-labels-idx1-ubyte.gz

# ---- 2. a train/val split, one shard of each per worker
$(TRAIN_SHARDS) $(VAL_SHARDS) &: $(DATA)/train.tfrecord $(SHARD_SET)
	tfr-shard -q $(if $(SPLIT),--split $(SPLIT)) --seed $(SEED) -n $(NP) \
	  -o '$(DATA)/$(if $(SPLIT),{split},train)-{shard}-of-{nshards}.tfrecord' $<

# ---- 3. training: worker R reads shard R ({rank:5}: tfr-shard's 00001)
$(W)/model.safetensors $(W)/train.log $(BEST) &: $(TRAIN_SHARDS) $(VAL_SHARDS) $(TRAIN_SET)
	$(LAUNCH) dp-train --train '$(DATA)/train-{rank:5}-of-{size:5}.tfrecord' \
	  $(if $(SPLIT),--val '$(DATA)/val-{rank:5}-of-{size:5}.tfrecord') \
	  --decode-raw uint8 --scale 1/255 --input-shape 1x28x28 --model '$(MODEL)' \
	  --optimizer $(OPTIMIZER) --lr $(LR) --batch-size $(BATCH) --epochs $(EPOCHS) \
	  --seed $(SEED) --threads $(THREADS) --log-every $(LOG_EVERY) -q $(TRAIN_FLAGS) \
	  $(if $(EARLY_STOP),--early-stopping $(EARLY_STOP)) \
	  $(if $(PLATEAU),--reduce-lr-on-plateau $(PLATEAU)) $(if $(BEST),--save-best $(BEST)) \
	  $(if $(SYNC),--tensorboard $(W)/tb --on-epoch-fail \
	    --on-epoch 's3-pipe sync {tensorboard} $(SYNC)') \
	  -o $(W)/model.safetensors | tee $(W)/train.log

# ---- 4. evaluation on the test set (the workers share it) and the report
$(W)/metrics.json $(W)/report.txt &: $(MODEL_FILE) $(DATA)/test.tfrecord $(EVAL_SET)
	$(LAUNCH) dp-eval --model $(MODEL_FILE) --data $(DATA)/test.tfrecord \
	  --classes '$(CLASSES)' --json $(W)/metrics.json > $(W)/report.txt
	@cat $(W)/report.txt

# ---- 5. the gate: the model is released only when its metrics pass
$(W)/release/model.safetensors: $(W)/metrics.json $(MODEL_FILE) $(GATE_SET)
	dp-eval --check $(W)/metrics.json $(foreach g,$(ALL_GATES),--require '$g')
	@mkdir -p $(@D) && cp $(MODEL_FILE) $@.tmp && mv $@.tmp $@

# ---- 6. the loss curve out of the training log
$(W)/loss.svg $(W)/loss.tsv &: $(W)/train.log
	metrics-grep --logfmt=loss,val_loss --title 'Fashion-MNIST, $(NP) worker(s): loss' \
	  --plot $(W)/loss.svg --tsv $(W)/train.log > $(W)/loss.tsv

# ---- where everything is (expanded after the stages ran)
acc = $(shell sed -n 's/.*"accuracy": {"value": \(.*\)}.*/\1/p' $(W)/metrics.json 2>/dev/null)
count = $(shell tfr-cat -c $1 2>/dev/null | tail -n 1)
define summary
@echo
@echo "Fashion-MNIST, $(NP) worker(s), $(EPOCHS) epoch(s): $(MODEL)"
@echo "  data     $(DATA)/  (train $(call count,$(TRAIN_SHARDS))$(if $(SPLIT),$(comma) val $(call count,$(VAL_SHARDS))) in $(NP) shard(s); test $(call count,$(DATA)/test.tfrecord))"
@echo "  model    $(if $(BEST),$(MODEL_FILE) (the best epoch's),$(MODEL_FILE))"
@echo "  metrics  $(W)/metrics.json  (test accuracy $(acc); report $(W)/report.txt)"
@echo "  gate     $(ALL_GATES): passed; released as $(W)/release/model.safetensors"
@echo "  log      $(W)/train.log"
@echo "  plot     $(W)/loss.svg  (values $(W)/loss.tsv)"
$(if $(SYNC),@echo "  tb       $(W)/tb/  (sent to $(SYNC) after each epoch)")
endef
comma := ,
summary:
	$(summary)

## clean: remove W (and DATA)
clean:
	rm -rf $(W) $(DATA)
