#!/bin/bash
# tfr-shard --folds: K-fold cross-validation.  Every record in exactly one
# fold's val and in every other fold's train; folds of n/K records rounded
# (by seed), the same bytes for the same seed, others for another; by key
# hash against the Python reference (tests/tfrshard.py); with --shuffle,
# contiguous shards, --fold and --only; the settings refused.
. "${DP_SRC:-.}/tests/lib.sh"
REF="$PY $DP_SRC/tests/tfrshard.py"
cd "$T" || exit 1

$REF gen all.tfr 203 --size 30 --users 11
$REF ids all.tfr | sort -n >all.ids

# partition FOLDS-DIR K: "ok" when every fold's val and train partition the
# records as K-fold says, else what is wrong; also prints the val sizes
partition() {
	local d=$1 k=$2 f bad=
	: >vals
	for f in $(seq 0 $((k - 1))); do
		$REF ids $d/$f/val* | sort -n >v.$f
		$REF ids $d/$f/train* | sort -n >t.$f
		cat v.$f >>vals
		sort -n v.$f t.$f | cmp -s - all.ids || bad="$bad fold $f: train + val is not every record once;"
		printf '%s ' "$(wc -l <v.$f)"
	done
	sort -n vals | cmp -s - all.ids || bad="$bad the vals are not every record once;"
	echo "${bad:-ok}"
}

run tfr-shard -q --folds 5 --seed 4 -n 2 -o 'f/{fold}/{split}-{shard}.tfr' all.tfr
is "$rc" 0 "--folds 5 -n 2: exit 0"
is "$(ls f | tr '\n' ' ')" "0 1 2 3 4 " "a directory a fold ({fold})"
is "$(ls f/3 | tr '\n' ' ')" "train-00000.tfr train-00001.tfr val-00000.tfr val-00001.tfr " \
	"... each with its train and val shards"
p=$(partition f 5)
is "$(echo "$p" | tr ' ' '\n' | sort | uniq -c | awk '{printf "%s×%s ", $1, $2}')" "2×40 3×41 1×ok " \
	"every record in one val and in the other folds' train; folds of 40 or 41 of 203 ($p)"
for f in f/*/*.tfr; do $REF check $f; done | grep -cv '^records=' >bad.n
is "$(cat bad.n)" 0 "every output's framing, CRCs and Examples checked by the reference"

run tfr-shard -q --folds 5 --seed 4 -n 2 -o 'g/{fold}/{split}-{shard}.tfr' all.tfr
ok diff -r f g "the same seed: the same bytes"
tfr-shard -q --folds 5 --seed 5 -n 2 -o 'h/{fold}/{split}-{shard}.tfr' all.tfr
$REF ids h/0/val* | sort -n >h0
cmp -s h0 v.0
is "$?" 1 "another seed: other folds"

# the shuffle, contiguous shards
run tfr-shard -q --folds 4 --shuffle --seed 1 -o 's/{fold}/{split}.tfr' all.tfr
is "$(partition s 4 | awk '{print $NF}')" "ok" "--shuffle: still a partition"
$REF ids s/0/train.tfr >s0.order
sort -n -C s0.order
is "$?" 1 "... the train records in a shuffled order"
run tfr-shard -q --folds 3 --by contiguous -n 2 -o 'c/{fold}/{split}-{shard}.tfr' all.tfr
is "$(partition c 3 | awk '{print $NF}')" "ok" "--by contiguous -n 2: a partition"
is "$($REF check c/0/train-00000.tfr) $($REF check c/0/train-00001.tfr)" "records=68 records=67" \
	"... each fold's train in two runs of consecutive records"

# by key hash: one user, one fold; the fold of each record as the reference says
run tfr-shard -q --folds 4 --split-by hash:user -o 'u/{fold}/{split}.tfr' all.tfr
is "$rc" 0 "--split-by hash:user: exit 0"
for f in 0 1 2 3; do $REF field user u/$f/val.tfr | sed "s/^/$f /"; done | sort -u >u.folds
is "$(cut -d' ' -f2- u.folds | sort | uniq -d | wc -l)" 0 "... every user in one fold only"
$REF hashsplit '0=1,1=1,2=1,3=1' user all.tfr >want.fold
$REF field user all.tfr | paste -d' ' want.fold - | sort -u >want.folds
same_file u.folds want.folds "... the fold of each user as the reference's key hash gives it"
is "$(partition u 4 | awk '{print $NF}')" "ok" "... and a partition"

# one fold, one split
run tfr-shard -q --folds 5 --seed 4 -n 2 --fold 2 -o 'one/{split}-{shard}.tfr' all.tfr
is "$rc:$(ls one | tr '\n' ' ')" "0:train-00000.tfr train-00001.tfr val-00000.tfr val-00001.tfr " \
	"--fold 2: that fold's outputs alone, {fold} not needed"
ok diff -r one f/2 "... the bytes of the full run's fold 2"
run tfr-shard -q --folds 5 --seed 4 --only val -o 'vo/{fold}.tfr' all.tfr
is "$rc:$(ls vo | wc -l)" "0:5" "--only val: the 5 vals alone"
cat vo/*.tfr | $REF ids /dev/stdin | sort -n | cmp -s - all.ids
is "$?" 0 "... every record once"

# refused
run tfr-shard --folds 1 -o 'x/{fold}/{split}' all.tfr
like "$rc:$err" "^2:tfr-shard: --folds '1'" "--folds 1: usage error"
run tfr-shard --folds 3 --split train=1,val=1 -o 'x/{fold}/{split}' all.tfr
like "$rc:$err" "^2:.*no --split with it" "--folds with --split: usage error"
run tfr-shard --folds 3 -o 'x/{split}' all.tfr
like "$rc:$err" "^2:.*needs \{fold\} and \{split\}" "a template without {fold}: usage error"
run tfr-shard --folds 3 --fold 3 -o 'x/{fold}/{split}' all.tfr
like "$rc:$err" "^2:.*--fold 3: want 0 to 2" "--fold past the folds: usage error"
run tfr-shard --fold 1 -o 'x/{split}' all.tfr
like "$rc:$err" "^2:.*--fold needs --folds" "--fold alone: usage error"
run tfr-shard --folds 3 --only test -o 'x/{fold}' all.tfr
like "$rc:$err" "^2:.*with --folds, train or val" "--only test: usage error"
run tfr-shard -o 'x/{fold}' all.tfr
like "$rc:$err" "^2:.*unknown placeholder \{fold\}" "{fold} without --folds: usage error"
ok test ! -e x "nothing made by the refusals"
done_testing
