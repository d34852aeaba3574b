#!/bin/bash
# metrics-grep --plot: the SVG parses as XML (Python's expat-based
# ElementTree), has one series per metric and rank with every point, panels
# per metric family, axes and legend; escaping; written atomically; renders
# with rsvg-convert when it is installed.
. "${DP_SRC:-.}/tests/lib.sh"
D="$FIX/metrics"
cd "$T"

# svg_check FILE PYTHON-ASSERTIONS: parse FILE and run the assertions with
# s = series elements, p = panels, texts = all text contents.
svg_check() {
	$PY - "$1" "$2" <<'EOF'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
NS = "{http://www.w3.org/2000/svg}"
assert root.tag == NS + "svg", root.tag
s = [e for e in root.iter() if e.get("class") == "series"]
p = [e for e in root.iter() if e.get("class") == "panel"]
texts = [t.text for t in root.iter(NS + "text")]
def npoly(g):
    pl = g.find(NS + "polyline")
    return len(pl.get("points").split()) if pl is not None else 0
exec(sys.argv[2])
EOF
}

run metrics-grep --plot all.svg "$D/train.log"
is "$rc" 0 "--plot: exit 0"
is "$out" "" "--plot: no rows on stdout unless a format is asked"
ok svg_check all.svg '
labels = [g.get("data-label") for g in s]
assert labels == ["loss", "val_loss", "accuracy", "val_accuracy", "lr", "samples_per_sec"], labels
assert [g.get("data-points") for g in s] == ["5", "2", "5", "2", "5", "5"]
assert all(npoly(g) == int(g.get("data-points")) for g in s)
assert len(p) == 4
assert "step" in texts and "train.log" in " ".join(t or "" for t in texts)
' "valid XML; 6 series with all their points; 4 panels (val_ shares); step axis; title"
ok svg_check all.svg '
import re
for panel in p:
    legend = [e for e in panel.iter() if e.get("class") == "legend"]
    assert len(legend) == 1
    names = [t.text for t in legend[0].iter(NS + "text")]
    series = [g.get("data-label") for g in panel.iter() if g.get("class") == "series"]
    assert names == series, (names, series)
ys = [t.text for t in p[0].iter(NS + "text") if t.get("x") == "68"]
assert ys == ["0.3", "0.4", "0.5", "0.6", "0.7"], ys
' "legends name the series; loss y ticks are nice values"

run metrics-grep --logfmt=loss --csv --plot l.svg "$D/train.log"
is "$(printf '%s\n' "$out" | wc -l)" 6 "--plot with --csv: rows too"
run metrics-grep --logfmt=loss --plot - "$D/train.log"
is "$rc" 0 "--plot -: exit 0"
like "$out" "^<\?xml" "--plot -: the SVG on stdout"
run metrics-grep --logfmt=loss --plot - --csv "$D/train.log"
is "$rc" 2 "--plot - with --csv: usage error"

run metrics-grep --plot r.svg --title 'run <7> & "co"' "$D/tagged.log"
ok svg_check r.svg '
assert [g.get("data-label") for g in s] == ["loss (rank 0)", "loss (rank 1)", "samples_per_sec (rank 0)", "samples_per_sec (rank 1)"], [g.get("data-label") for g in s]
assert len(p) == 2
assert "run <7> & \"co\"" in texts
' "one series per rank; the title escaped"

run metrics-grep -m '<a&b>=\bloss=([0-9.]+)' -m "it's=accuracy=([0-9.]+)" --plot e.svg "$D/train.log"
ok svg_check e.svg '
assert [g.get("data-label") for g in s] == ["<a&b>", "it'"'"'s"]
' "names with < & > ' escaped"

printf 'loss: 0.9\nnoise\nloss: 0.7\nloss: 0.5\n' > nostep.log
run metrics-grep -m 'loss=loss: ([0-9.]+)' --plot n.svg nostep.log
ok svg_check n.svg '
assert "line" in texts and "step" not in texts
assert s[0].get("data-points") == "3"
' "no step: x is the line number"

$PY -c '
import math
with open("long.log", "w") as f:
    for i in range(100000):
        f.write("step=%d loss=%.5f\n" % (i, math.exp(-i / 20000)))
'
run metrics-grep --plot big.svg long.log
ok svg_check big.svg '
n = int(s[0].get("data-points"))
assert 2048 <= n <= 4097, n
' "100000 points are averaged down to at most 4096"
ok test "$(wc -c < big.svg)" -lt 200000 "and the file stays small"

printf 'x\n' > empty.log
run metrics-grep --plot none.svg empty.log
is "$rc" 3 "nothing to plot: exit 3"
like "$err" "none.svg: no values to plot; not written" "said so"
ok test ! -e none.svg "no file"

run metrics-grep --plot /nonexistent/dir/x.svg "$D/train.log"
is "$rc" 1 "an unwritable chart: exit 1"
like "$err" "^metrics-grep: /nonexistent/dir/x.svg: cannot create: No such file or directory" "said so"

echo old > keep.svg
run metrics-grep --plot keep.svg "$D/train.log"
ok grep -q '<svg' keep.svg "an existing chart is replaced"
ok test -z "$(ls -a | grep '\.tmp\.')" "no temporary files left"

if command -v rsvg-convert > /dev/null; then
	ok rsvg-convert -o all.png all.svg "rsvg-convert renders the chart"
	ok test "$(head -c 4 all.png | od -An -c | tr -d ' ')" = "211PNG" "a PNG"
else
	skip "rsvg-convert not installed (librsvg2-bin)"
	skip "rsvg-convert not installed (librsvg2-bin)"
fi

done_testing
