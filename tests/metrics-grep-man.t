#!/bin/bash
# The man page of metrics-grep: renders without warnings, documents every
# option of --help, and its EXAMPLES run: in each .EX/.EE block of EXAMPLES,
# lines starting with "$ " are commands (run in one bash per block, in a
# scratch directory holding tests/data/metrics), and the lines after a
# command are its expected standard output; every command must exit 0, and
# a chart named with --plot must be written.
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/man-examples.sh"
MAN="$DP_SRC/man/man1/metrics-grep.1"
cd "$T"

man_lint "$MAN"
page=$(MANWIDTH=200 man -l "$MAN" 2>/dev/null)
for o in $(metrics-grep --help | grep -oE -- '--[a-z][a-z-]+|(^| )-[a-zA-Z]\b' | sort -u); do
	like "$page" "(^|[ ,[])\\$o\b" "the man page documents $o"
done
for s in NAME SYNOPSIS DESCRIPTION OPTIONS "EXIT STATUS" ENVIRONMENT EXAMPLES "SEE ALSO"; do
	like "$page" "^$s" "section $s"
done

mkdir work
cp "$FIX"/metrics/* work/
$PY - "$MAN" "$T" <<'EOF'
import re, sys
man, out = sys.argv[1], sys.argv[2]
text = open(man).read()
ex = text[text.index("\n.SH EXAMPLES"):]
ex = ex[:ex.index("\n.SH ", 1)]
def unroff(l):
    for a, b in ((r"\(aq", "'"), (r"\(dq", '"'), (r"\-", "-"), (r"\&", ""), (r"\%", ""), (r"\e", "\\")):
        l = l.replace(a, b)
    return l
blocks = re.findall(r"\n\.EX\n(.*?)\n\.EE", ex, re.S)
n = 0
for b, block in enumerate(blocks):
    cmds = []
    for line in block.split("\n"):
        if line.startswith("."):
            continue
        line = unroff(line)
        if line.startswith("$ "):
            cmds.append([line[2:], []])
        elif cmds:
            cmds[-1][1].append(line)
    with open("%s/block%d.sh" % (out, b), "w") as f:
        f.write("cd %s/work\n" % out)
        for c, (cmd, want) in enumerate(cmds):
            base = "%s/b%d.c%d" % (out, b, c)
            f.write("{ %s\n} > %s.out 2> %s.err; echo $? > %s.rc\n" % (cmd, base, base, base))
            open(base + ".cmd", "w").write(cmd)
            open(base + ".want", "w").write("".join(w + "\n" for w in want))
            n += 1
print("# %d example blocks, %d commands" % (len(blocks), n))
EOF
ok test -e block0.sh "examples extracted"
for sh in block*.sh; do
	bash "$sh"
done
for cmd in b*.c*.cmd; do
	base=${cmd%.cmd}
	c=$(cat "$cmd")
	is "$(cat "$base.rc")" 0 "example exits 0: $c"
	if [ -s "$base.err" ]; then diag "stderr: $(head -c 300 "$base.err")"; fi
	same_file "$base.out" "$base.want" "example output: $c"
	for svg in $(printf '%s\n' "$c" | grep -oE -- '--plot [^ ]+' | cut -d' ' -f2); do
		ok $PY -c "import xml.etree.ElementTree as E; E.parse('work/$svg')" "example chart written: $svg"
	done
done

done_testing
