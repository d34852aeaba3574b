# tests/man-examples.sh - checking man pages (bash; source it after lib.sh).
#
#   man_lint PAGE            two checks: groff -ww and man -l format PAGE
#                            without a warning; leaves the page as man shows
#                            it (80 columns) in ./page.txt
#   man_examples PAGE DIR    writes DIR/N.sh for each .EX/.EE block of the
#                            EXAMPLES section (roff escapes undone), or
#                            DIR/N.skip (holding the reason) for a block
#                            preceded by the comment .\" example not run: WHY
#   run_examples [-p] DIR [SED]
#                            runs DIR's examples in order in the current
#                            directory (bash -e; -p: and -o pipefail), each
#                            through sed SED first when given (a bucket's
#                            URL made a local one), one check each, a skip
#                            for each .skip; out.N and err.N hold what
#                            example N printed; sets n to the number of
#                            examples
#
# The blocks are meant to run in order, in one scratch directory.

man_lint() {
	local name
	name=$(basename "$1")
	run groff -man -Tutf8 -ww -z "$1"
	is "$rc:$err" "0:" "$name: groff -man -ww: no warnings"
	MANWIDTH=80 man -l "$1" >page.txt 2>page.err
	is "$?:$(cat page.err)" "0:" "$name: man -l: no warnings"
}

man_examples() {
	mkdir -p "$2" || return 1
	awk -v dir="$2" '
	/^\.SH / { inex = ($0 ~ /^\.SH "?EXAMPLES"?$/); next }
	!inex { next }
	/^\.\\" example not run/ { why = $0; sub(/^\.\\" example not run:? */, "", why); norun = 1; next }
	/^\.EX/ { n++; f = dir "/" n (norun ? ".skip" : ".sh"); if (norun) print why > f; inblk = 1; next }
	/^\.EE/ { if (inblk) close(f); inblk = 0; norun = 0; next }
	inblk && norun { next }
	inblk {
		l = $0
		gsub(/\\-/, "-", l); gsub(/\\\(aq/, "\047", l); gsub(/\\\(dq/, "\"", l)
		gsub(/\\&/, "", l); gsub(/\\e/, "\\", l)
		print l > f
		next
	}
	/^\.(PP|P|LP)$/ || /^[^.]/ { norun = 0 }
	' "$1"
}

run_examples() {
	local f st sh=(bash -e)
	[ "$1" = -p ] && sh+=(-o pipefail) && shift
	n=0
	for f in $(ls "$1" | sort -n); do
		n=$((n + 1))
		case "$f" in
		*.skip) skip "example $n: $(cat "$1/$f")"; continue ;;
		esac
		sed "${2:-}" "$1/$f" >"$1/$f.run"
		"${sh[@]}" "$1/$f.run" >"out.$n" 2>"err.$n"
		st=$?
		is "$st" 0 "example $n runs: $(head -n 1 "$1/$f" | cut -c 1-60)"
		[ "$st" = 0 ] || sed 's/^/#   /' "$1/$f.run" "err.$n" | tail -n 12
	done
}
