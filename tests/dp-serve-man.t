#!/usr/bin/env bash
# dp-serve(1): the page formats without warnings, documents every option
# of --help, and its examples run, in order, in one scratch directory:
# photos made with Pillow, a small model trained on them, predictions on
# files, a server on 127.0.0.1 asked with curl and stopped.
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/man-examples.sh"

PAGE="$DP_SRC/man/man1/dp-serve.1"
cd "$T" || exit 1
man_lint "$PAGE"
for s in "EXIT STATUS" ENVIRONMENT EXAMPLES "SEE ALSO"; do
	like "$(cat page.txt)" "$s" "has $s"
done
for o in $(dp-serve --help | grep -o -- '--[a-z][a-z-]*' | sort -u); do
	like "$(cat page.txt)" -- "$o" "documents $o"
done
if ! command -v curl >/dev/null || ! $PY -c 'import PIL, numpy' 2>/dev/null; then
	skip "curl or python3-pil is not installed: examples not run"
	done_testing
fi
mkdir ex && cd ex
man_examples "$PAGE" ../examples
PATH="$(dirname "$PY"):$PATH" run_examples ../examples
like "$(cat out.2)" "^photos/cat/0.png: (cat|dog) 0\.[0-9]+, (cat|dog) 0\.[0-9]+$" "example 2: FILE: the classes"
is "$(wc -l < out.2 | tr -d ' ')" 9 "example 2: a line a file"
like "$(cat out.3)" '"status": "ok"' "example 3: /ping answered"
like "$(cat out.3)" '"class": "(cat|dog)"' "example 3: the PNG's class"
is "$($PY -c 'import json; print(len(json.load(open("all.json"))["predictions"]))')" 16 "example 3: a prediction a record"
done_testing
