#!/bin/bash
# escape.t - data quoted in messages and line output never reaches the
# terminal raw: an image/filename, feature names and a log's text holding
# ESC sequences and newlines, through dp-train's and dp-eval's errors and
# skip warnings, tfr-cat --schema, tfr-cat --encode csv and metrics-grep;
# each shown in the shell's $'...' form (one escaper, dp_buf_shown).
. "${DP_SRC:-.}/tests/lib.sh"
cd "$T" || exit 1
ESC=$'\x1b'
raw_free() { # text name: no ESC, no BEL, no CSI byte in text
	if printf '%s' "$1" | LC_ALL=C grep -q $'[\x1b\x07\x9b]'; then
		_tap_result 1 "$2"
		printf '#   %q\n' "$1" | head -n 5
	else
		_tap_result 0 "$2"
	fi
}
# records: a bad image named "\e[2K\rall good.jpg" (erasing its own warning),
# and a record whose feature names carry a title-setting sequence
$PY - <<'PYEOF' || exit 1
import base64, json
b = lambda s: base64.b64encode(s if isinstance(s, bytes) else s.encode()).decode()
with open("r.json", "w") as f:
    f.write(json.dumps({"image/encoded": {"bytes": [b(b"\xff\xd8\xff\xe0 cut")]},
                        "image/filename": {"bytes": [b("\x1b[2K\rall good.jpg")]},
                        "image/class/label": {"int64": [0]}}) + "\n")
with open("n.json", "w") as f:
    f.write(json.dumps({"x\x1b]0;pwned\x07": {"float": [1.0]}, "tab\there\nnl": {"int64": [1]}}) + "\n")
PYEOF
tfr-cat --encode json r.json > r.tfr && tfr-cat --encode json n.json > n.tfr || exit 1
M=(--decode image --model flatten,dense:2 --input-shape 3x8x8 -q)
run dp-train --train r.tfr "${M[@]}" -o x.st
is "$rc" 1 "dp-train: a bad image fails"
raw_free "$err" "... its image/filename escaped in the error"
like "$err" "r.tfr: record 0 at byte 0: \\$'\\\\x1b\\[2K\\\\rall good.jpg': JPEG: " "... in the \$'...' form"
run dp-train --train r.tfr "${M[@]}" --skip-corrupt --max-skipped 100% -o x.st
raw_free "$err" "... and in the skip warning"
run dp-train --train n.tfr --model dense:2 --input-shape 1 -o x.st
is "$rc" 1 "a record without the feature"
raw_free "$err" "... the names it has, escaped"
like "$err" "the record has: \\$'x\\\\x1b\\]0;pwned\\\\a', \\$'tab\\\\there\\\\nnl'" "... each in the \$'...' form"
run tfr-cat --schema n.tfr
raw_free "$out" "tfr-cat --schema: feature names escaped"
is "$(wc -l <<<"$out")" 3 "... one line a feature (a newline in a name does not split its row)"
printf 'a,b\n1,x%s[31m\n' "$ESC" > c.csv
run tfr-cat --encode csv --types 'b=int64' c.csv
is "$rc" 1 "tfr-cat --encode csv: a cell that is not a number"
raw_free "$err" "tfr-cat --encode csv: a bad cell quoted escaped"
printf 'loss=1\nloss=%s]0;x\n' "$ESC" > l.log
run metrics-grep -m 'loss=loss=(\S+)' l.log
like "$err" 'not a number, skipped \(first: loss: "\$'"'"'\\x1b\]0;x'"'"'"\)' "metrics-grep: a value that is not a number, quoted escaped"
raw_free "$out$err" "... nothing raw"
# an image file whose name holds ESC, damaged: tfr-cat --encode images names it escaped
mkdir -p imgs/c && printf '\xff\xd8\xff\xe0 cut' > "imgs/c/x${ESC}[2Ky.jpg"
run tfr-cat --encode images imgs -o i.tfr
is "$rc" 1 "tfr-cat --encode images: a damaged image"
raw_free "$err" "... its file name escaped in the error"
like "$err" 'imgs/c/x\\x1b\[2Ky\.jpg' "... in the \$'...' form"
done_testing
