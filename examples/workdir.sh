# examples/workdir.sh - an example's working folder, sourced by the example
# once it has set W to the folder its user named (its *_DIR variable): that
# folder, made if need be and kept afterwards; when W is empty, a new
# temporary folder, removed when the example ends.
if [ -n "$W" ]; then
	mkdir -p "$W"
else
	W=$(mktemp -d "${TMPDIR:-/tmp}/$(basename "$0" .sh).XXXXXX")
	trap 'rm -rf "$W"' EXIT INT TERM
fi
