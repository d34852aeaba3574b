#!/bin/bash
# outputs.t - every output option of every program, written to each kind
# of destination: a plain path, a link to a file (0600), a dangling link,
# /dev/stdout redirected to a file, /dev/null, a FIFO, an existing
# directory.  Links are followed (the link stays, the file it names gets
# the data and keeps its mode); descriptors, devices and FIFOs are written
# in place; a directory is refused, naming it, before any work.
#
# /dev/stdout and /dev/null are only ever used inside a private mount
# namespace whose /dev is a tmpfs made here (unshare -m), never the
# machine's own /dev: a regression replaces a link of that tmpfs.
. "${DP_SRC:-.}/tests/lib.sh"
cd "$T" || exit 1

# ---- inputs: 200 Fashion-MNIST-shaped records, a model, a log -----------------
$PY - <<'PY' >data.json
import json, random, base64
r = random.Random(5)
for i in range(200):
    img = bytes(r.randrange(256) for _ in range(16))
    print(json.dumps({"image": {"bytes": [base64.b64encode(img).decode()]}, "label": {"int64": [i % 4]}}))
PY
tfr-cat --encode json data.json -o in.tfr || exit 1
TRAIN="--train in.tfr --decode-raw uint8 --scale 1/255 --input-shape 16 --model dense:4 --epochs 1 --batch-size 50 --seed 3"
dp-train $TRAIN -o model.st >train.log 2>/dev/null || exit 1
AB=$(pwd -P)

# cmd_ID OUT: one output option of one program; the reference is OUT=ref.
# Their reports and logs go to stdout and stderr as usual ($out, $err under
# run); "work" in $out or $err means the work was done (a dp-train epoch,
# dp-eval's report).
cmd_tfrcat() { tfr-cat in.tfr -o "$1"; }
cmd_tfrshard() { tfr-shard -n 1 -o "$1" in.tfr; }
cmd_s3get() { s3-pipe get -o "$1" "file://$AB/in.tfr"; }
cmd_evaljson() { dp-eval --model model.st --data in.tfr --json "$1"; }
cmd_evalpred() { dp-eval --model model.st --data in.tfr --predictions "$1"; }
cmd_plot() { metrics-grep --logfmt=loss --plot "$1" train.log; }
cmd_train() { dp-train $TRAIN -o "$1"; }
cmd_ckpt() { dp-train $TRAIN --checkpoint "$1" --checkpoint-every 1e; }
cmd_timeline() { dp-train $TRAIN --timeline "$1"; }
IDS="tfrcat tfrshard s3get evaljson evalpred plot train ckpt timeline"
WORK='epoch=1|accuracy[= ]'
# the programs whose stdout is free for -o /dev/stdout
stdout_free() { case $1 in tfrcat | tfrshard | s3get) true ;; *) false ;; esac; }
# outputs that are the same bytes every run (a timeline has timings)
same() { [ "$1" != timeline ]; }
# loads ID FILE: the output reads back as what it is (200 records, a
# checkpoint, JSON, 200 prediction lines, an SVG drawing)
loads() {
	case $1 in
	tfrcat | tfrshard | s3get) [ "$(tfr-cat --count "$2" 2>/dev/null)" = 200 ] ;;
	train | ckpt) dp-ckpt show "$2" >/dev/null 2>&1 ;;
	evaljson | timeline) $PY -c 'import json,sys; json.load(open(sys.argv[1]))' "$2" 2>/dev/null ;;
	evalpred) $PY -c 'import json,sys; sys.exit(sum(1 for l in open(sys.argv[1]) if json.loads(l)) != 200)' "$2" 2>/dev/null ;;
	plot) $PY -c 'import sys, xml.etree.ElementTree as E
sys.exit(not E.parse(sys.argv[1]).getroot().tag.endswith("svg"))' "$2" 2>/dev/null ;;
	esac
}
# what a good output looks like when it cannot be compared
valid() { # ID FILE
	case $1 in
	timeline) $PY -c 'import json,sys; json.load(open(sys.argv[1]))' "$2" 2>/dev/null ;;
	*) cmp -s "$2" "$T/ref.$1" ;;
	esac
}

# in_ns CMD...: CMD in a private mount namespace with a /dev of our own
NS_OK=0
in_ns() {
	unshare -m sh -c 'mount -t tmpfs -o size=1m,mode=755 dptest-dev /dev &&
		mknod -m 666 /dev/null c 1 3 && mknod -m 666 /dev/zero c 1 5 &&
		mknod -m 666 /dev/urandom c 1 9 && mkdir /dev/shm && mount -t tmpfs -o size=64m none /dev/shm &&
		ln -s /proc/self/fd /dev/fd && ln -s /proc/self/fd/0 /dev/stdin &&
		ln -s /proc/self/fd/1 /dev/stdout && ln -s /proc/self/fd/2 /dev/stderr && "$@"' sh "$@"
}
in_ns true 2>/dev/null && NS_OK=1

for id in $IDS; do
	mkdir -p "m/$id" && cd "m/$id" || exit 1
	ln -s ../../in.tfr in.tfr; ln -s ../../model.st model.st; ln -s ../../train.log train.log
	AB=$(pwd -P)
	cmd_$id ref >/dev/null 2>&1; st=$?
	is "$st" 0 "$id: a plain path"
	ok loads $id ref "$id: ... written, and reads back"
	cp ref "$T/ref.$id"

	# a link to a 0600 file: the file replaced, mode kept, the link a link
	echo old >real; chmod 600 real; ln -s real link
	cmd_$id link >/dev/null 2>&1; st=$?
	is "$st" 0 "$id: a link to a file"
	ok test -L link "$id: ... the link stays a link"
	same $id && ok cmp -s real ref "$id: ... the file it names has the output"
	same $id || ok valid $id real "$id: ... the file it names has the output"
	is "$(stat -c %a real)" 600 "$id: ... and keeps its mode 0600"

	# a dangling link: its target created
	mkdir sub; ln -s sub/new dangling
	cmd_$id dangling >/dev/null 2>&1; st=$?
	is "$st" 0 "$id: a dangling link"
	ok test -L dangling "$id: ... stays a link"
	ok valid $id sub/new "$id: ... its target written"

	# a FIFO: written in place to its reader
	mkfifo fifo
	cat fifo >from-fifo &
	rd=$!
	cmd_$id fifo >/dev/null 2>&1; st=$?
	wait $rd
	is "$st" 0 "$id: a FIFO"
	ok test -p fifo "$id: ... stays a FIFO"
	ok valid $id from-fifo "$id: ... its reader gets the output"

	# an existing directory: refused, named, nothing done
	mkdir dir
	run cmd_$id dir
	isnt "$rc" 0 "$id: an existing directory: an error"
	like "$err" "dir: .*directory" "$id: ... naming it"
	is "$(ls -A dir)" "" "$id: ... which stays empty"
	unlike "$out$err" "$WORK" "$id: ... before any work"

	# /dev/fd/3 redirected to a file: written in place
	cmd_$id /dev/fd/3 3>fd3 >/dev/null 2>&1; st=$?
	is "$st" 0 "$id: /dev/fd/3 redirected to a file"
	ok valid $id fd3 "$id: ... the redirection gets the output"

	# /dev/stdout redirected to a file, and /dev/null, in a /dev of our own
	if [ $NS_OK = 1 ]; then
		if stdout_free $id; then
			run in_ns sh -c "$(declare -f cmd_$id); TRAIN='$TRAIN'; AB='$AB';
				cmd_$id /dev/stdout >redirected && test -L /dev/stdout && echo link-kept >&2"
			is "$rc" 0 "$id: /dev/stdout redirected to a file"
			like "$err" "link-kept" "$id: ... /dev/stdout stays a link"
			ok valid $id redirected "$id: ... the redirection gets the output"
		fi
		run in_ns sh -c "$(declare -f cmd_$id); TRAIN='$TRAIN'; AB='$AB';
			cmd_$id /dev/null >/dev/null && test -c /dev/null && echo device-kept"
		is "$rc" 0 "$id: /dev/null"
		like "$out" "device-kept" "$id: ... stays a device"
	else
		n=2; stdout_free $id && n=5
		for k in $(seq $n); do skip "$id: no private mount namespace here (unshare -m)"; done
	fi
	is "$(ls -A | grep -c '\.tmp\.')" 0 "$id: no temporary left beside the outputs"
	cd "$T" || exit 1
done

# ---- two outputs naming one file: refused, naming both, before any work ----------
mkdir -p two && cd two || exit 1
ln -s j.json link.json
two() { # name cmd...: exit 2, the message names both options, nothing written
	local name=$1
	shift
	run "$@"
	is "$rc" 2 "$name: refused (exit 2)"
	like "$err" "name one file: one would be lost" "$name: ... saying so"
	is "$(ls | grep -v '^link.json$\|^ph$')" "" "$name: ... nothing written"
}
two "dp-eval --json X --predictions ./X" dp-eval --model ../model.st --data ../in.tfr --json j.json --predictions ./j.json
two "dp-eval --json X --predictions LINK-TO-X" dp-eval --model ../model.st --data ../in.tfr --json j.json --predictions link.json
two "dp-train --log X -o X" dp-train ${TRAIN//in.tfr/../in.tfr} --log m.st -o m.st
two "dp-train --log X --timeline X" dp-train ${TRAIN//in.tfr/../in.tfr} --log t.txt --timeline "$PWD/t.txt"
two "dp-train --timeline X --checkpoint X" dp-train ${TRAIN//in.tfr/../in.tfr} --timeline c.st --checkpoint c.st -o m.st
mkdir -p ph/a && cp "$AB/model.st" ph/a/x.png 2>/dev/null
two "tfr-cat --classes-out X -o X" tfr-cat --encode images --classes-out c.txt -o ./c.txt ph
rm -rf ph
cd "$T" || exit 1
done_testing
