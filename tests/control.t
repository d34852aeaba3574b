#!/usr/bin/env bash
# Training control (dp_train.h: dp_control_*) against a transcription of
# Keras' callbacks (tests/keras_ref.py): EarlyStopping, ReduceLROnPlateau
# and ModelCheckpoint(save_best_only) over the same scripted metric
# sequences, random walks with plateaus and ties, in min and max mode,
# with every setting varied: the same rate, the same stop and the same
# best epochs, epoch by epoch (build/tests/ctltool prints the library's).
. "${DP_SRC:-.}/tests/lib.sh"
cd "$T" || exit 1

$PY - "$DP_SRC/tests" "$DP_BUILD/tests/ctltool" >report <<'PYEOF'
import random, subprocess, sys
sys.path.insert(0, sys.argv[1])
import keras_ref
rng = random.Random(26)
cases = same = stops = cuts = 0
first_bad = None
for i in range(300):
    mode = rng.choice(["min", "max", "auto"])
    monitor = rng.choice(["val_loss", "val_accuracy"])
    es = rng.choice(["-", "patience=%d" % rng.randint(0, 4),
                     "patience=%d,min_delta=%g" % (rng.randint(0, 3), rng.choice([0, 0.01, 0.05])),
                     "patience=%d,baseline=%g" % (rng.randint(0, 3), rng.uniform(0.2, 0.8)),
                     "patience=%d,start_from_epoch=%d" % (rng.randint(0, 2), rng.randint(0, 5))])
    rlr = rng.choice(["-", "patience=%d" % rng.randint(0, 3),
                      "patience=%d,factor=%g,cooldown=%d,min_lr=%g,min_delta=%g" % (
                          rng.randint(0, 3), rng.choice([0.1, 0.5, 0.3]), rng.randint(0, 2),
                          rng.choice([0, 1e-4, 0.01]), rng.choice([0, 1e-4, 0.02]))])
    lr = rng.choice([0.1, 1e-3, 0.3])
    v, vals = rng.uniform(0.3, 0.7), []
    for _ in range(rng.randint(1, 30)):
        v += rng.choice([0, 0, 0.01, -0.01, 0.03, -0.02, 0.05])
        vals.append(round(v, 2))      # ties and plateaus
    want = keras_ref.run(monitor, mode, es, rlr, lr, vals)
    got = subprocess.run([sys.argv[2], monitor, mode, es, rlr, repr(lr)],
                         input="\n".join(map(repr, vals)) + "\n", capture_output=True,
                         text=True).stdout.split("\n")[:-1]
    cases += 1
    stops += any(l.split()[2] == "1" for l in want)
    cuts += len(set(l.split()[1] for l in want)) > 1
    if got == want:
        same += 1
    elif first_bad is None:
        first_bad = (monitor, mode, es, rlr, lr, vals, got, want)
print("cases %d same %d" % (cases, same))
print("stopped %d reduced %d" % (stops, cuts))
if first_bad:
    print("first difference: %r" % (first_bad,))
PYEOF
is "$(head -n 1 report)" "cases 300 same 300" "300 scripted sequences: every epoch's rate, stop and best as Keras'"
grep -q "first difference" report && diag "$(tail -n 1 report)"
read -r _ stopped _ reduced < <(sed -n 2p report)
ok test "$stopped" -ge 50 -a "$reduced" -ge 50 "the sequences exercise them: $stopped stopped early, $reduced lowered the rate"

# the sequences did exercise the callbacks: stops, reductions, new bests
printf '0.5\n0.4\n0.45\n0.45\n0.44\n0.3\n' | "$DP_BUILD/tests/ctltool" val_loss auto patience=2 patience=1,factor=0.5 1 >seq
is "$(cat seq | tr '\n' ';')" "0 1 0 1;1 1 0 1;2 0.5 0 0;3 0.25 1 0;" \
	"one sequence by hand: reduced at epochs 2 and 3, stopped at 3 (patience 2), best at 0 and 1"
printf '0.5\n0.4\n0.45\n0.45\n0.44\n0.3\n' | $PY "$DP_SRC/tests/keras_ref.py" val_loss auto patience=2 patience=1,factor=0.5 1 >seq.k
same_file seq.k seq "... and the transcription of Keras says the same"
done_testing
