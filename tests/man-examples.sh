# tests/man-examples.sh - the EXAMPLES of a man page, as shell scripts (bash;
# source it).
#
#   man_examples PAGE DIR    writes DIR/N.sh for each .EX/.EE block of the
#                            EXAMPLES section (roff escapes undone), or
#                            DIR/N.skip (holding the reason) for a block
#                            preceded by the comment .\" example not run: WHY
#
# The blocks are meant to run in order, in one scratch directory.
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
