#!/bin/bash
# metrics-grep -f: a log that grows, is rotated (renamed and created anew),
# truncated (copytruncate), or does not exist yet; ending on a signal with
# summaries and a chart; and pipes from a running job (a shell, and a real
# mpirun --tag-output), where each value must come out while the job still
# runs: the job waits for the test to see its first values before it goes on.
. "${DP_SRC:-.}/tests/lib.sh"
cd "$T"
TAB=$(printf '\t')

# wait_for FILE ERE: until FILE matches (up to 60 s; a deadline, not a timing test)
wait_for() {
	local i=0
	until grep -Eq -- "$2" "$1" 2>/dev/null; do
		i=$((i + 1))
		[ $i -gt 600 ] && return 1
		sleep 0.1
	done
}
# stop PID: SIGTERM, then its exit status in $rc
stop() {
	kill -TERM "$1" 2>/dev/null
	wait "$1"
	rc=$?
}

# ---- a growing file, rotation, truncation ----
printf 'epoch=1 step=1 loss=0.9\n' > train.log
metrics-grep -f --logfmt=loss --no-header train.log > out 2> err &
pid=$!
ok wait_for out "^loss${TAB}0.9${TAB}1${TAB}" "follow: the lines already there"
printf 'epoch=1 step=2 loss=0.8\n' >> train.log
ok wait_for out "0.8${TAB}2" "follow: an appended line"
printf 'epoch=1 step=3 loss=0.7' >> train.log
sleep 0.5
unlike "$(cat out)" "${TAB}3${TAB}" "follow: half a line is held back"
printf '5\n' >> train.log
ok wait_for out "0.75${TAB}3${TAB}" "follow: the line once complete"

mv train.log train.log.1
printf 'epoch=1 step=4 loss=0.6\n' >> train.log.1
ok wait_for err "train.log: No such file or directory; waiting for it" "rotation: the name is gone, said once"
printf 'epoch=1 step=5 loss=0.55\n' >> train.log.1
printf 'epoch=2 step=6 loss=0.5\n' > train.log
ok wait_for out "0.5${TAB}6" "rotation: the new file is followed"
ok grep -q "0.55${TAB}5" out "rotation: the old file's last lines are read first"
ok wait_for err "train.log: replaced; following the new file" "rotation: said so"
is "$(grep -n . out | grep -E '0.55|0.5\b' | cut -d: -f1 | tr '\n' ' ')" "5 6 " "rotation: old lines before new ones"

: > train.log
ok wait_for err "train.log: file truncated; reading from the start" "truncation: noticed"
printf 'epoch=2 step=7 loss=0.4\n' >> train.log
ok wait_for out "0.4${TAB}7" "truncation: the new content is read"
stop $pid
is "$rc" 0 "SIGTERM ends following with status 0"
is "$(cut -f2 out | tr '\n' ' ')" "0.9 0.8 0.75 0.6 0.55 0.5 0.4 " "every value once, in order"

# ---- many files followed together (there was an unwritten limit of 256) ----
mkdir many
for i in $(seq 300); do printf 'step=%d loss=%d.5\n' "$i" "$i" > "many/$(printf %03d "$i").log"; done
metrics-grep -f --logfmt=loss --no-header many/*.log > many.out 2> many.err &
pid=$!
ok wait_for many.out "^loss${TAB}300.5${TAB}300" "300 files followed: the last one's value"
printf 'step=301 loss=0.25\n' >> many/001.log
printf 'step=302 loss=0.125\n' >> many/300.log
ok wait_for many.out "0.125${TAB}302" "300 files followed: a line appended to the last"
ok wait_for many.out "0.25${TAB}301" "300 files followed: a line appended to the first"
stop $pid
is "$rc" 0 "300 files followed: SIGTERM, status 0"
is "$(wc -l < many.out)" 302 "300 files followed: every value once"
is "$(cat many.err)" "" "300 files followed: nothing on stderr"

# ---- under nohup, SIGHUP does not end following; SIGTERM does ----
printf 'epoch=1 step=1 loss=0.9\n' > hup.log
nohup metrics-grep -f --logfmt=loss --no-header hup.log > hup.out 2> hup.err &
pid=$!
ok wait_for hup.out "^loss${TAB}0.9" "nohup: following"
kill -HUP $pid
printf 'epoch=1 step=2 loss=0.8\n' >> hup.log
ok wait_for hup.out "0.8${TAB}2" "nohup: still following after SIGHUP"
stop $pid
is "$rc" 0 "nohup: SIGTERM ends it with status 0"

# ---- summaries and a live chart, ended by SIGINT ----
printf 'epoch=1 step=1 loss=0.9\n' > t2.log
metrics-grep -f --logfmt=loss --last --count --plot live.svg t2.log > out2 2> err2 &
pid=$!
for s in 2 3 4; do printf 'epoch=1 step=%d loss=0.%d\n' $s $((9 - s)) >> t2.log; done
# wait until the live chart holds all four points: on a loaded machine the
# first rewrite may come before the last lines are read
i=0; until grep -q 'data-points="4"' live.svg 2>/dev/null || [ $i -gt 600 ]; do sleep 0.1; i=$((i + 1)); done
ok_svg live.svg "the chart is written while following"
kill -INT $pid
wait $pid
is "$?" 0 "SIGINT ends following with status 0"
is "$(cat out2)" "name${TAB}last${TAB}count
loss${TAB}0.5${TAB}4" "summaries printed at the end"
ok $PY -c '
import xml.etree.ElementTree as ET
r = ET.parse("live.svg").getroot()
g = [e for e in r.iter() if e.get("class") == "series"]
assert len(g) == 1 and g[0].get("data-points") == "4", [e.attrib for e in g]
' "the final chart has all 4 points"
ok test -z "$(ls -a | grep '\.tmp\.')" "no temporary files left"

# ---- a live chart whose first values cannot be drawn (NaN) ----
# The rewrite after the first line has no point to draw: not a failure,
# the chart comes with the first finite value.
printf 'epoch=1 step=1 loss=nan\n' > n.log
metrics-grep -f --logfmt=loss --tsv --no-header --plot n.svg n.log > n.out 2> n.err &
pid=$!
ok wait_for n.out "^loss${TAB}nan${TAB}1" "NaN first: the row (and the chart's first rewrite)"
printf 'epoch=1 step=2 loss=0.5\n' >> n.log
i=0; until grep -q 'data-points="1"' n.svg 2>/dev/null || [ $i -gt 600 ]; do sleep 0.1; i=$((i + 1)); done
ok_svg n.svg "NaN first: the chart is written with the first finite value"
stop $pid
is "$rc" 0 "NaN first: status 0"
is "$(cat n.err)" "metrics-grep: n.svg: 1 NaN or infinite value left out" "NaN first: only the count of what was left out"

# ---- a file that does not exist yet ----
metrics-grep -f --no-header later.log > out3 2> err3 &
pid=$!
ok wait_for err3 "later.log: No such file or directory; waiting for it" "a missing file is waited for"
printf 'epoch=1 step=1 loss=0.3\n' > later.log
ok wait_for out3 "^loss${TAB}0.3" "and read when it appears"
ok wait_for err3 "later.log: appeared; following it" "said so"
stop $pid
is "$rc" 0 "exit 0"

# ---- a pipe from a running job: values come out as lines arrive ----
cat > job.sh <<'EOF'
#!/bin/sh
r=${OMPI_COMM_WORLD_RANK:-0}
echo "epoch=1 step=1 loss=0.5$r"
i=0
while [ ! -e "$GO" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
echo "epoch=1 step=2 loss=0.4$r"
EOF
export GO="$T/go"
rm -f "$GO"
sh job.sh | metrics-grep --no-header > out4 &
pid=$!
ok wait_for out4 "0.50${TAB}1" "a pipe without -f: the first value while the job runs"
touch "$GO"
wait $pid
is "$?" 0 "exit 0 when the pipe closes"
is "$(cut -f2 out4 | tr '\n' ' ')" "0.50 0.40 " "both values"

rm -f "$GO"
if command -v mpirun > /dev/null; then
	mpirun -np 2 --oversubscribe --tag-output -x GO sh job.sh 2> mpi.err |
		metrics-grep -f --logfmt=loss --no-header > out5 2> err5 &
	pid=$!
	ok wait_for out5 "0.50${TAB}1${TAB}1${TAB}0" "mpirun --tag-output: rank 0's first value while the job runs"
	ok wait_for out5 "0.51${TAB}1${TAB}1${TAB}1" "mpirun --tag-output: rank 1's first value while the job runs"
	touch "$GO"
	wait $pid
	is "$?" 0 "exit 0 when mpirun ends"
	is "$(sort out5 | tr '\t' ' ' | tr '\n' '|')" "loss 0.40 2 1 0|loss 0.41 2 1 1|loss 0.50 1 1 0|loss 0.51 1 1 1|" \
		"all four values with their ranks"
	[ -s mpi.err ] && diag "mpirun stderr: $(head -c 500 mpi.err)"
else
	skip "mpirun not installed"
fi

done_testing
