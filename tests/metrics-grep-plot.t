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

# A chart that cannot be written is refused before any reading: following
# a log (which never ends by itself) shows it, as would hours of reading.
# (The timeout only keeps a broken build from hanging the suite.)
printf 'step=1 loss=0.5\n' > f.log
mkdir adir
run timeout 120 metrics-grep -f --plot adir f.log
is "$rc" 1 "--plot DIR: exit 1, before reading (not following)"
is "$err" "metrics-grep: adir: is a directory" "--plot DIR: the directory named"
run timeout 120 metrics-grep -f --plot /nonexistent/dir/x.svg f.log
is "$rc" 1 "an unwritable chart: exit 1, before reading"
like "$err" "^metrics-grep: /nonexistent/dir/x.svg: cannot create \(directory /nonexistent/dir\): No such file or directory" "said so"

# Values up to +-DBL_MAX are drawn: ranges wider than a double holds, axes
# whose nice ends would pass DBL_MAX, huge steps, and averaged points whose
# sums overflow.  Every chart: valid XML, no nan/inf text, every coordinate
# inside the picture, every point of every series.
huge_check() { # FILE WANT-POINTS...: the chart's series hold these many points
	local want
	want=$(IFS=,; echo "${*:2}")
	svg_check "$1" "
import re
W, H = float(root.get('width')), float(root.get('height'))
t = open(sys.argv[1]).read()
assert not re.search('nan|inf', t, re.I), 'nan or inf in the SVG'
for e in root.iter():
    for k in ('x', 'x1', 'x2', 'cx', 'y', 'y1', 'y2', 'cy'):
        v = e.get(k)
        if v is not None and not v.endswith('%'):
            assert 0 <= float(v) <= (W if 'x' in k else H), (k, v)
    if e.tag == NS + 'polyline':
        for q in e.get('points').split():
            x, y = map(float, q.split(','))
            assert 0 <= x <= W and 0 <= y <= H, q
got = [int(g.get('data-points')) for g in s]
assert got == [$want], got
assert all(npoly(g) == n for g, n in zip(s, got) if n > 1)
"
}
printf 'step=1 loss=1e308\nstep=2 loss=-1e308\n' > h1.log
run metrics-grep --plot h1.svg h1.log
is "$rc" 0 "+-1e308: exit 0"
is "$err" "" "+-1e308: nothing to say"
ok huge_check h1.svg 2 "+-1e308: drawn, valid, inside the picture"
ok svg_check h1.svg '
ys = [t.text for t in p[0].iter(NS + "text") if t.get("x") == "68"]
assert ys[0].startswith("-1") and "e308" in ys[0] and ys[-1].startswith("1") and "e308" in ys[-1], ys
' "+-1e308: y tick labels with exponents"
printf 'step=1 loss=1.7976931348623157e308\nstep=2 loss=-1.7976931348623157e308\nstep=3 loss=1.7976931348623157e308\n' > h2.log
run metrics-grep --plot h2.svg h2.log
is "$rc" 0 "+-DBL_MAX: exit 0"
ok huge_check h2.svg 3 "+-DBL_MAX: drawn (the axis ends at the data)"
printf 'step=1 loss=1.7976931348623157e308\nstep=2 loss=1.7976931348623157e308\n' > h3.log
run metrics-grep --plot h3.svg h3.log
ok huge_check h3.svg 2 "DBL_MAX twice (a flat line at the top of the range): drawn"
{ printf 'step=%d loss=0.%d val_loss=0.%d\n' 1 9 8 2 7 6 3 5 4; printf 'step=4 loss=1e308 val_loss=0.3\n'
  printf 'step=5 loss=0.2 acc=-1e300\nstep=6 loss=0.1 acc=0.5\n'; } > mix.log
run metrics-grep --plot mix.svg mix.log
is "$rc" 0 "huge and normal values mixed: exit 0"
ok huge_check mix.svg 6 4 2 "huge and normal values mixed: every point drawn"
printf 'step=-1e308 loss=1\nstep=1.7976931348623157e308 loss=2\nstep=0 loss=3\n' > hs.log
run metrics-grep --plot hs.svg hs.log
ok huge_check hs.svg 3 "steps of +-1e308: drawn"
$PY -c '
with open("avg.log", "w") as f:
    for i in range(20000):
        f.write("step=%d loss=%s\n" % (i, "1.7e308" if i % 2 else "-1.7e308"))
'
run metrics-grep --plot avg.svg avg.log
is "$rc" 0 "20000 values of +-1.7e308, averaged: exit 0"
ok svg_check avg.svg '
import re
assert not re.search("nan|inf", open(sys.argv[1]).read(), re.I)
assert 2048 <= int(s[0].get("data-points")) <= 4097 and npoly(s[0]) == int(s[0].get("data-points"))
' "20000 values of +-1.7e308, averaged: every point finite"

# NaN and infinities have no place on a chart: left out and counted; when no
# value can be drawn, the chart is not written and the exit status says so.
printf 'step=1 loss=0.5\nstep=2 loss=nan\nstep=3 loss=inf\nstep=4 loss=1e400\nstep=5 loss=0.25\n' > nf.log
run metrics-grep --plot nf.svg nf.log
is "$rc" 0 "NaN and infinities among values: exit 0"
is "$err" "metrics-grep: nf.svg: 3 NaN or infinite values left out" "NaN and infinities among values: counted"
ok huge_check nf.svg 2 "NaN and infinities among values: the others drawn"
printf 'step=1 loss=nan\nstep=2 loss=-inf\n' > nf2.log
run metrics-grep --plot nf2.svg nf2.log
is "$rc" 1 "only NaN and infinities: exit 1"
is "$err" "metrics-grep: nf2.svg: no value can be drawn (2 NaN or infinite); not written" "only NaN and infinities: said so"
ok test ! -e nf2.svg "only NaN and infinities: no file"

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
