# tests/lib.sh - TAP for the CLI tests (bash).  Source it first:
#
#   . "${DP_SRC:-.}/tests/lib.sh"
#   run tfr-cat -c data.tfrecord          # sets $out, $err (contents), $rc
#   is "$rc" 0 "exit status"; is "$out" "3" "count"; like "$err" "CRC" "message"
#   ok_ckpt m.st "trained" (and ok_records, ok_json, ok_svg: outputs loaded,
#   not merely there);  skip "why" ;  done_testing
#
# Every test runs in its own scratch directory $T (removed at exit unless
# DP_KEEP=1), with the programs under test first on PATH (make check sets
# PATH, DP_BUILD, DP_SRC).  Exit status is non-zero when any check failed.

set -u
: "${DP_SRC:=$(cd "$(dirname "$0")/.." && pwd)}"
: "${DP_BUILD:=$DP_SRC/build}"
export DP_SRC DP_BUILD
case ":$PATH:" in *":$DP_BUILD/bin:"*) ;; *) PATH="$DP_BUILD/bin:$PATH" ;; esac
export LC_ALL=C
# Open MPI refuses root unless told; tests set it themselves.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# one math thread unless a test says otherwise (dp_default_threads): the same
# figures on any machine, and between a process and ranks of a job
export DP_THREADS=1
# no test reaches the machine's own cloud credentials: no instance metadata
# service, container endpoint or web identity but those a test starts
export AWS_EC2_METADATA_DISABLED=true
unset AWS_CONTAINER_CREDENTIALS_RELATIVE_URI AWS_CONTAINER_CREDENTIALS_FULL_URI \
	AWS_CONTAINER_AUTHORIZATION_TOKEN AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE \
	AWS_WEB_IDENTITY_TOKEN_FILE AWS_ROLE_ARN AWS_ROLE_SESSION_NAME
# A build with AddressSanitizer (make asan): Open MPI does not free all it
# allocates at MPI_Finalize, and frees some from components it has already
# unloaded; full stacks let the suppressions find the library.  Harmless for
# programs built without sanitizers; every test may run mpirun, directly or
# through an example.
export LSAN_OPTIONS="suppressions=$DP_SRC/tests/lsan-mpi.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export ASAN_OPTIONS="fast_unwind_on_malloc=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
# Debian's interpreter: torch and protobuf live there, not in a pyenv;
# DP_PYTHON names another (scripts/device-check: the GPU machine's, whose
# torch has CUDA).
PY=${DP_PYTHON:-/usr/bin/python3}
FIX="$DP_SRC/tests/data"

T=$(mktemp -d "${TMPDIR:-/tmp}/dptest.XXXXXX")
_tap_n=0
_tap_fail=0
_tap_cleanup() { [ "${DP_KEEP:-0}" = 1 ] && echo "# kept $T" || rm -rf "$T"; }
trap _tap_cleanup EXIT

_tap_result() { # status name...
	_tap_n=$((_tap_n + 1))
	if [ "$1" = 0 ]; then
		echo "ok $_tap_n - $2"
	else
		echo "not ok $_tap_n - $2"
		_tap_fail=$((_tap_fail + 1))
	fi
}

# open_tmp PID DIR: PID holds a temporary output in DIR (absolute, as the
# kernel writes it): an O_TMPFILE ("DIR/#INODE (deleted)" in /proc/PID/fd)
# or a named ".NAME.tmp.XXXXXX" where the file system has no O_TMPFILE.
open_tmp() {
	local p
	for p in /proc/$1/fd/*; do
		case $(readlink "$p" 2>/dev/null) in "$2"/\#*" (deleted)" | "$2"/.*.tmp.*) return 0 ;; esac
	done
	return 1
}

# run CMD...: run with stdin from /dev/null unless redirected by the caller;
# stdout in $out, stderr in $err, status in $rc (files $T/.out, $T/.err).
run() {
	"$@" >"$T/.out" 2>"$T/.err"
	rc=$?
	out=$(cat "$T/.out")
	err=$(cat "$T/.err")
}

is() { # got want name
	if [ "$1" = "$2" ]; then
		_tap_result 0 "$3"
	else
		_tap_result 1 "$3"
		printf '#   got:  %s\n#   want: %s\n' "$1" "$2" | head -n 40 >&2
	fi
}

isnt() { # got unwanted name
	if [ "$1" != "$2" ]; then _tap_result 0 "$3"; else _tap_result 1 "$3"; echo "#   got: $1" >&2; fi
}

like() { # got extended-regex name
	# a newline in the pattern: match over the whole text (grep would split
	# the pattern into alternatives, one of them empty, always matching)
	case $2 in *$'\n'*) like_text "$1" "(?m)$2" "$3"; return ;; esac
	if printf '%s' "$1" | grep -Eq -- "$2"; then
		_tap_result 0 "$3"
	else
		_tap_result 1 "$3"
		printf '#   %s\n#   does not match: %s\n' "$1" "$2" | head -n 40 >&2
	fi
}

# like_text GOT PERL-REGEX NAME: the regex runs over the whole text, so it
# may span lines.  (like matches line by line, with grep: a newline in its
# pattern splits it into alternatives, one of them empty, which always match.)
like_text() {
	if R=$2 perl -0777 -e 'my $s = do { local $/; <STDIN> }; exit($s =~ /$ENV{R}/ ? 0 : 1)' <<<"$1"; then
		_tap_result 0 "$3"
	else
		_tap_result 1 "$3"
		printf '#   %s\n#   does not match: %s\n' "$1" "$2" | head -n 40 >&2
	fi
}

unlike() { # got extended-regex name
	case $2 in *$'\n'*)
		if R="(?m)$2" perl -0777 -e 'my $s = do { local $/; <STDIN> }; exit($s =~ /$ENV{R}/ ? 0 : 1)' <<<"$1"; then
			_tap_result 1 "$3"
		else
			_tap_result 0 "$3"
		fi
		return ;;
	esac
	if printf '%s' "$1" | grep -Eq -- "$2"; then
		_tap_result 1 "$3"
		printf '#   %s\n#   matches: %s\n' "$1" "$2" | head -n 40 >&2
	else
		_tap_result 0 "$3"
	fi
}

ok() { # CMD... name: passes when CMD exits 0
	local name="${!#}"
	local n=$(($# - 1))
	"${@:1:$n}" >/dev/null 2>&1
	_tap_result $? "$name"
}

not_ok() { # CMD... name: passes when CMD exits non-zero
	local name="${!#}"
	local n=$(($# - 1))
	"${@:1:$n}" >/dev/null 2>&1
	[ $? != 0 ]
	_tap_result $? "$name"
}

same_file() { # a b name
	if cmp -s "$1" "$2"; then
		_tap_result 0 "$3"
	else
		_tap_result 1 "$3"
		echo "#   $1 and $2 differ" >&2
	fi
}

# Outputs checked by loading them, not by their existing (a file of
# garbage passes `test -s`):
# ok_ckpt FILE NAME: a dp-train checkpoint that dp-ckpt reads whole, whose
# metadata names a model and whose parameters are all there.
ok_ckpt() {
	local j rc
	j=$(dp-ckpt show --json "$1" 2>&1) &&
		$PY -c 'import json, sys
d = json.loads(sys.argv[1]); m = d["metadata"]
sys.exit(not (m.get("format") == "dp-train/1" and m.get("model") and
              d["parameters"] > 0 and d["parameters"] == int(m["params"])))' "$j"
	rc=$?
	_tap_result $rc "$2"
	[ $rc = 0 ] || printf '#   %s: %s\n' "$1" "$(head -c 300 <<<"$j")" >&2
}
# ok_records FILE NAME: TFRecords that tfr-cat reads to the end, CRCs
# checked, holding at least one record.
ok_records() {
	local n
	n=$(tfr-cat -c "$1" 2>/dev/null)
	[ "${n:-0}" -gt 0 ] 2>/dev/null
	_tap_result $? "$2"
}
# ok_json FILE NAME: a file that parses as JSON (one document, or JSON lines).
ok_json() {
	$PY -c 'import json, sys
t = open(sys.argv[1]).read()
try:
    json.loads(t)
except ValueError:
    [json.loads(l) for l in t.splitlines() if l.strip()] or sys.exit(1)' "$1" >/dev/null 2>&1
	_tap_result $? "$2"
}
# ok_svg FILE NAME: an SVG document that parses as XML, with a path drawn.
ok_svg() {
	$PY -c 'import sys, xml.etree.ElementTree as E
r = E.parse(sys.argv[1]).getroot()
sys.exit(not (r.tag.endswith("svg") and any(e.tag.endswith(("path", "polyline")) for e in r.iter())))' "$1" >/dev/null 2>&1
	_tap_result $? "$2"
}

skip() { # why: a skipped check is reported as a skip, never as a pass
	_tap_n=$((_tap_n + 1))
	echo "ok $_tap_n # SKIP $1"
}

diag() { printf '# %s\n' "$*"; }

# require WHY CMD...: unless CMD succeeds (an optional package there, e.g.
# $PY -c 'import numpy', or have_mpirun), the whole test is one skip saying
# WHY.
require() {
	local why=$1
	shift
	"$@" 2>/dev/null && return 0
	skip "$why"
	done_testing
}

# require_ref SCRIPT WHY: REF, the reference script tests/SCRIPT under $PY;
# unless `$REF check` passes (its packages are there), the whole test is
# one skip saying WHY.
require_ref() {
	REF="$PY $DP_SRC/tests/$1"
	require "$2" $REF check
}

done_testing() {
	echo "1..$_tap_n"
	[ "$_tap_fail" = 0 ]
	exit $?
}

# ref_results NAME FILE SCRIPT: the PASS and FAIL lines a reference script
# wrote to FILE as results "NAME: ...", its other lines as diagnostics; one
# failed result, and status 1, when it wrote neither (SCRIPT did not run).
ref_results() {
	local name=$1 file=$2 line
	if ! grep -q '^PASS\|^FAIL' "$file"; then
		_tap_result 1 "$name: $3 ran"
		sed 's/^/# /' "$file"
		return 1
	fi
	while IFS= read -r line; do
		case "$line" in
		PASS*) _tap_result 0 "$name: ${line#PASS }" ;;
		FAIL*) _tap_result 1 "$name: ${line#FAIL }" ;;
		*) echo "# $line" ;;
		esac
	done <"$file"
}

# torch_step_results CASES LOG: the results of tests/torch_ref.py batch
# (LOG: a case's diagnostics, then "rc N" for it) as tests: dp-train ran
# (rc-I.txt, err-I.txt in the current directory) and its weights equal
# PyTorch's; then that every line of CASES was compared.
torch_step_results() {
	local i=0 diag= line what
	while IFS= read -r line; do
		case "$line" in
		"rc "*)
			i=$((i + 1))
			what="$(sed -n "${i}p" "$1" | cut -d' ' -f3-)"
			is "$(cat "rc-$i.txt")" 0 "dp-train runs: $what"
			[ "$(cat "rc-$i.txt")" = 0 ] || sed 's/^/#   /' "err-$i.txt"
			is "${line#rc }" 0 "weights equal PyTorch's after 3 updates: $what"
			[ "${line#rc }" = 0 ] || printf '%s\n' "$diag" | sed 's/^/#   /'
			diag=
			;;
		*) diag="$diag$line"$'\n' ;;
		esac
	done < "$2"
	is "$i" "$(wc -l < "$1")" "every case compared"
}
