#!/bin/bash
# completion.t - the bash completion (completion/dptools.bash), as
# bash-completion loads it from where make install puts it, run the way
# readline runs it (COMP_LINE, COMP_POINT, COMP_WORDS split at
# COMP_WORDBREAKS): option names, s3-pipe's commands, fixed sets of values,
# file and directory names after the options that take them, s3:// words
# left alone; every option each program's --help names is offered, and
# the values the completion knows from --help's prose are still there.
# Then TAB in an interactive bash and zsh (tests/readline.py).
. "${DP_SRC:-.}/tests/lib.sh"

PROGS="tfr-cat tfr-shard s3-pipe dp-train dp-eval dp-ckpt dp-serve metrics-grep"
BC=/usr/share/bash-completion/bash_completion
if [ ! -f "$BC" ]; then
	skip "bash-completion not installed (scripts/deps --test): completion not checked"
	done_testing
fi

# Installed as bash-completion expects: one file a program (links to one).
run make -C "$DP_SRC" -s O="$DP_BUILD" install DESTDIR="$T/root" PREFIX=/usr
is "$rc" 0 "make install (PREFIX=/usr) succeeds"
[ "$rc" = 0 ] || diag "$err"
C="$T/root/usr/share/bash-completion/completions"
for p in $PROGS; do
	ok test -f "$C/$p" "completion for $p in bash-completion's completionsdir"
done
run make -C "$DP_SRC" -s O="$DP_BUILD" install DESTDIR="$T/root2" PREFIX=/opt/dp
ok test -f "$T/root2/opt/dp/share/bash-completion/completions/s3-pipe" \
	"... under PREFIX/share when PREFIX is not bash-completion's"
rm -rf "$T/root2"

# bash-completion loads it on first use, by the program's name.
. "$BC"
export XDG_DATA_DIRS="$T/root/usr/share" BASH_COMPLETION_USER_DIR="$T/none"
for p in $PROGS; do
	__load_completion "$p"
	like "$(complete -p "$p" 2>&1)" "-F _dptools $p\$" "bash-completion loads $p's completion"
done

# comp LINE: complete at the end of LINE as readline would; prints the
# candidates, sorted, one a line (readline shows a name on PATH twice once).
comp() {
	local line=$1 w words=() cur= i c
	COMP_LINE=$line
	COMP_POINT=${#line}
	# COMP_WORDS: the blank-separated words, each split again before and
	# after runs of COMP_WORDBREAKS characters
	for w in $line; do
		cur=
		for ((i = 0; i < ${#w}; i++)); do
			c=${w:i:1}
			if [[ $COMP_WORDBREAKS == *"$c"* ]]; then
				[[ -n $cur && $COMP_WORDBREAKS != *"${cur: -1}"* ]] && { words+=("$cur"); cur=; }
			else
				[[ -n $cur && $COMP_WORDBREAKS == *"${cur: -1}"* ]] && { words+=("$cur"); cur=; }
			fi
			cur+=$c
		done
		words+=("$cur")
	done
	[[ $line == *" " ]] && words+=("")
	COMP_WORDS=("${words[@]}")
	COMP_CWORD=$((${#words[@]} - 1))
	COMPREPLY=()
	_dptools "${words[0]}" "${words[COMP_CWORD]}" "${words[COMP_CWORD - 1]}"
	[ ${#COMPREPLY[@]} = 0 ] || printf '%s\n' "${COMPREPLY[@]}" | sort -u
}
nl=$'\n'

cd "$T" || exit 1
mkdir -p runs/a mnist && : >model.safetensors >mnist.tfrecord >mfile
# option names
is "$(comp "tfr-cat --co")" "--compress$nl--count" "option prefix: tfr-cat --co"
like "$(comp "tfr-shard -")" "(^|$nl)-n$nl" "short options offered: tfr-shard -n"
is "$(comp "metrics-grep --m")" "--max$nl--max-line-length$nl--mean$nl--metric$nl--min" \
	"several options on one --help line: metrics-grep --m"
# s3-pipe's commands, options before them skipped with their arguments
is "$(comp "s3-pipe " | tr '\n' ' ')" "fifo get ls mb presign put rb rm sync whoami " "s3-pipe's commands"
is "$(comp "s3-pipe --region eu-west-1 -v p")" "presign${nl}put" "... after options and their arguments"
is "$(comp "s3-pipe get s3://b/k --sh")" "--shard$nl--shuffle" "options after the command"
# values
is "$(comp "dp-train --log-format ")" "json${nl}logfmt" "values: dp-train --log-format logfmt|json"
is "$(comp "tfr-cat --compress=g")" "gzip" "values after =: only the part readline replaces"
is "$(comp "tfr-cat --encode=")" "csv${nl}idx${nl}images${nl}json${nl}json=proto" "values from --encode=FORMAT lines"
is "$(comp "tfr-shard -z z")" "zlib" "values of a short option, from --help's prose (--compress)"
is "$(comp "dp-train --optimizer a")" "adam${nl}adamw" "values from --help's prose: --optimizer"
is "$(comp "s3-pipe --region ")" "" "an argument without fixed values: nothing, not file names"
# file and directory names
is "$(comp "dp-eval --model mo")" "model.safetensors" "file name after a path option"
is "$(comp "tfr-cat -o mo")" "model.safetensors" "... after its short name"
is "$(comp "metrics-grep --plot=ru")" "runs" "... after --opt="
is "$(comp "dp-train --cache-dir m")" "mnist" "directories only after a directory option"
is "$(comp "tfr-cat mn")" "mnist${nl}mnist.tfrecord" "operands: file names"
is "$(comp "dp-train --train-cmd tfr-c")" "tfr-cat" "command names after a CMD option"
# URLs
is "$(comp "s3-pipe get s3:")" "" "s3: left alone"
mkdir -p "$T/usrx"
is "$(comp "s3-pipe get s3://b")" "" "s3://b left alone (no file names of //b)"
is "$(comp "s3-pipe get s3://$T/us")" "" "... even where //path names a directory"
is "$(comp "s3-pipe put s3://b/ file://$T/mod")" "//$T/model.safetensors" "file:// URLs complete as paths"
is "$(comp "s3-pipe get --output=s3:")" "" "s3: after a path option left alone too"

# Every option --help names is offered: long ones wherever --help names
# them, short ones where an option line starts with them.
for p in $PROGS; do
	offered=$(comp "$p -")
	help=$("$p" --help)
	missing=
	for o in $(echo "$help" | grep -oE '(^|[ ,])--[A-Za-z0-9][A-Za-z0-9-]*' | sed 's/^[ ,]//' | sort -u) \
		$(echo "$help" | sed -n 's/^ \{1,8\}\(-[A-Za-z0-9]\),.*/\1/p'); do
		case "$nl$offered$nl" in *"$nl$o$nl"*) ;; *) missing="$missing $o" ;; esac
	done
	is "$missing" "" "every option in $p --help is offered ($(echo "$offered" | wc -l) options)"
done

# The values the completion takes from --help's words are still in the
# option's --help paragraph.
for k in "${!_dptools_prose[@]}"; do
	p=${k%% *} o=${k#* }
	para=$("$p" --help | awk -v o="$o" '
		/^ +-/ { if (on) exit; if (index($0, " " o " ") || index($0, " " o "=") || index($0, " " o ",")) on = 1 }
		on')
	missing=
	for v in ${_dptools_prose[$k]}; do
		v=${v%:}
		case "$para" in *"$v"*) ;; *) missing="$missing $v" ;; esac
	done
	is "${para:+found}$missing" "found" "$p $o --help still names ${_dptools_prose[$k]}"
done

# Through readline itself: TAB in an interactive bash, the completion
# loaded by bash-completion from the install above.  Without it, s3://us
# would become s3://usr/ (bash-completion's fallback: file names of //us).
run timeout 120 "$PY" "$DP_SRC/tests/readline.py" bash \
	". $BC; export XDG_DATA_DIRS='$XDG_DATA_DIRS' BASH_COMPLETION_USER_DIR='$T/none'; cd '$T'" \
	"tfr-cat --compr" "tfr-cat --compress=g" "s3-pipe pres" "dp-train --log-format j" \
	"s3-pipe get s3://us" "s3-pipe get s3://b/x --no-v" "dp-eval --model mo" "tfr-shard --tmpdir mn" \
	"s3-pipe put s3://b/ file://$T/mod"
is "$out" "tfr-cat --compress
tfr-cat --compress=gzip
s3-pipe presign
dp-train --log-format json
s3-pipe get s3://us
s3-pipe get s3://b/x --no-verify
dp-eval --model model.safetensors
tfr-shard --tmpdir mnist/
s3-pipe put s3://b/ file://$T/model.safetensors" "TAB in bash: option, value after =, command, value, s3:// alone, files, file://"
[ -z "$err" ] || diag "$err"

# zsh: _dptools where make install puts it (ZSHCOMPDIR) found by compinit
# on fpath, TAB pressed in an interactive zsh.
if command -v zsh >/dev/null; then
	Z="$T/root/usr/share/zsh/vendor-completions"
	ok test -f "$Z/_dptools" "zsh's _dptools installed (PREFIX=/usr: vendor-completions)"
	# (under make asan: LeakSanitizer's check at exit, which stops the
	# process's threads, hangs in a program that zsh's completion runs
	# from its job-controlled terminal; cli.t checks the same --help runs
	# for leaks)
	ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 \
		run timeout 120 "$PY" "$DP_SRC/tests/readline.py" zsh \
		"fpath=('$Z' \$fpath); autoload -U compinit; compinit -u -d '$T/zcompdump'; cd '$T'" \
		"tfr-cat --compr" "tfr-cat --compress=g" "s3-pipe pres" "s3-pipe get s3://us" \
		"dp-eval --model mo" "dp-train --log-format j"
	is "$out" "tfr-cat --compress
tfr-cat --compress=gzip
s3-pipe presign
s3-pipe get s3://us
dp-eval --model model.safetensors
dp-train --log-format json" "TAB in zsh: option, value after =, command, s3:// alone, files, value"
	[ -z "$err" ] || diag "$err"
else
	skip "zsh not installed (scripts/deps --test): zsh not checked"
fi
done_testing
