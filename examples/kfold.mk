# examples/kfold.mk - K-fold cross-validation on Fashion-MNIST as make rules:
# the records cut into K folds once, one training a fold (the fold's
# records its validation set, the others its training set), each model
# evaluated on its fold, and the K figures gathered into a mean and a
# spread.
#
#   make -f examples/kfold.mk -j5 [W=kfold] [K=5] [LIMIT=6000] [EPOCHS=3] [NP=1] ...
#
#   W/all.tfrecord                    LIMIT training images as records   tfr-cat --encode idx
#   W/folds/F/train.tfrecord          fold F's training and validation   tfr-shard --folds K
#   W/folds/F/val.tfrecord              records (every record in one val)
#   W/fold-F/model.safetensors        one training a fold, NP workers    dp-train
#   W/fold-F/metrics.json             the model on its fold's val        dp-eval --json
#   W/cv.tsv                          each metric's mean, standard deviation
#                                     (numpy's std, as scikit-learn's
#                                     cross_val_score users report it), min
#                                     and max over the K folds
#
# The K trainings are K make targets: `make -j5` runs them side by side
# (each with NP workers under mpirun when NP > 1).  Every fold trains with
# the same settings and --seed; the folds are drawn by --seed too, so a
# run is the same run again.  The programs come from PATH.

SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -ec
.DELETE_ON_ERROR:
.SUFFIXES:
.DEFAULT_GOAL := all
.SECONDARY:

FASHION ?= /usr/share/datasets/fashion-mnist
W ?= kfold
K ?= 5
LIMIT ?= 6000
SEED ?= 0
MODEL ?= flatten,dense:128,relu,dense:10
EPOCHS ?= 3
BATCH ?= 64
LR ?= 1e-3
THREADS ?= 1
NP ?= 1
MPIRUN ?= mpirun
TRAIN_FLAGS ?=
METRICS ?= accuracy f1_macro loss

LAUNCH := $(if $(filter 1,$(NP)),,$(MPIRUN) -np $(NP))
folds := $(shell seq 0 $$(($(K) - 1)))

.PHONY: all
all: $(W)/cv.tsv

$(W)/all.tfrecord:
	mkdir -p $(W)
	tfr-cat --encode idx $(if $(LIMIT),-n $(LIMIT)) $(FASHION)/train-images-idx3-ubyte.gz \
		$(FASHION)/train-labels-idx1-ubyte.gz > $@

# K folds of LIMIT/K records, shuffled by SEED; fold F's val is fold F
$(W)/folds/done: $(W)/all.tfrecord
	rm -rf $(W)/folds
	tfr-shard -q --folds $(K) --shuffle --seed $(SEED) -o '$(W)/folds/{fold}/{split}.tfrecord' $<
	touch $@

$(W)/fold-%/model.safetensors: $(W)/folds/done
	mkdir -p $(@D)
	$(LAUNCH) dp-train --train $(W)/folds/$*/train.tfrecord --val $(W)/folds/$*/val.tfrecord \
		--decode-raw uint8 --scale 1/255 --input-shape 1x28x28 --model $(MODEL) \
		--epochs $(EPOCHS) --batch-size $(BATCH) --lr $(LR) --seed $(SEED) --threads $(THREADS) \
		$(TRAIN_FLAGS) -q --log $(@D)/train.log -o $@

$(W)/fold-%/metrics.json: $(W)/fold-%/model.safetensors
	dp-eval -q --model $< --data $(W)/folds/$*/val.tfrecord --json $@

# one value of a dp-eval metrics JSON (each metric on a line of its own)
metric = sed -n "s/.*\"$1\": {\"value\": \([^}]*\)}.*/\1/p" $2

$(W)/cv.tsv: $(foreach f,$(folds),$(W)/fold-$f/metrics.json)
	{ printf 'metric\tmean\tstd\tmin\tmax\tfolds\n'; \
	  for m in $(METRICS); do \
		for f in $^; do $(call metric,$$m,$$f); done | \
		awk -v m=$$m '{ v[NR] = $$1; s += $$1 } \
			END { mean = s / NR; for (i = 1; i <= NR; i++) d += (v[i] - mean) ^ 2; \
			      lo = hi = v[1]; for (i = 2; i <= NR; i++) { if (v[i] < lo) lo = v[i]; if (v[i] > hi) hi = v[i] } \
			      printf "%s\t%.4f\t%.4f\t%.4f\t%.4f\t%d\n", m, mean, sqrt(d / NR), lo, hi, NR }'; \
	  done; } > $@
	column -t -s "$$(printf '\t')" $@ 2>/dev/null || cat $@

.PHONY: clean
clean:
	rm -rf $(W)
