#!/bin/bash
# dist.t - make dist: the tarball holds the committed tree (HEAD) under
# dptools-VERSION/, less the CI's own files, with the commit's date filled
# in; unpacked elsewhere it builds from scratch and passes a few tests
# (scripts/distcheck quick; make distcheck runs the whole make check).
. "${DP_SRC:-.}/tests/lib.sh"

if ! git -C "$DP_SRC" rev-parse --verify -q HEAD >/dev/null 2>&1; then
	skip "not a git checkout (a make dist tarball?): make dist not checked"
	done_testing
fi
V=$(sed -n 's/^VERSION := //p' "$DP_SRC/Makefile")
run make -C "$DP_SRC" -s dist DISTDIR="$T"
is "$rc" 0 "make dist succeeds"
tb="$T/dptools-$V.tar.gz"
ok test -f "$tb" "dptools-$V.tar.gz written"

# exactly HEAD's files, but .ci/ and the git files
want=$(git -C "$DP_SRC" ls-tree -r --name-only HEAD | grep -v '^\.ci/\|^\.gitignore$\|^\.gitattributes$' | sort)
got=$(tar -tzf "$tb" | grep -v '/$' | sed "s|^dptools-$V/||" | sort)
is "$got" "$want" "the tarball holds HEAD's files under dptools-$V/, less .ci and .git*"
for d in tests/data/ man/man1/ examples/ bench/ debian/ completion/ scripts/; do
	like "$got" "(^|$'\n')$d" "... among them $d"
done
unlike "$got" "(^|/)(build[^/]*/|[^/]*\.o$)" "... and no build output"
run sh -c "tar -xzOf '$tb' dptools-$V/scripts/commit-date"
is "$out" "$(git -C "$DP_SRC" log -1 --format=%cs)" "scripts/commit-date: the commit's date (man pages' date without git)"

# built from scratch: programs, man pages, completion, and some tests
run timeout 1200 "$DP_SRC/scripts/distcheck" "$tb" quick
is "$rc" 0 "the tarball builds and passes tfr-cat, layout, install and completion tests"
[ "$rc" = 0 ] || printf "%s\n%s\n" "$out" "$err" | grep -v "^ok" | tail -n 30 | sed "s|^|# |"
like "$out" "All tests successful" "... under make check"
done_testing
