# bash completion for dptools: @PROGRAMS@
#
# Installed (make install) into bash-completion's completions directory as
# one file per program (the others symbolic links to it), which
# bash-completion loads the first time each program is completed; or
# source it from ~/.bashrc.  zsh runs it through bashcompinit: make
# install puts it there as _dptools (Makefile: ZSH_COMPLETION).
#
# The options are not listed here: they are read from the program's own
# --help (once per shell and program path), so the completion always
# offers what the program that will run accepts, whatever its version, and
# cannot fall behind the options a new release adds.  From --help it takes
# each option, and the kind of its argument from the name written after it:
#   a|b|c                    those values (--log-format logfmt|json)
#   FILE PATH CHECKPOINT TEMPLATE NAME.ext, *FILE, *PATH    file names
#   DIR, *DIR, or an option named *dir                      directories
#   CMD                      a command name
#   any other NAME           nothing (a number, a size, a spec: typed)
#   --opt=word, repeated     those words (tfr-cat --encode=json ...)
# and s3-pipe's commands from its "Commands:" section.  Values that --help
# writes in prose ("sgd, adam (default) or adamw") are in _dptools_prose;
# tests/completion.t checks that each is still in its option's --help.
# Operands complete as file names, except URLs: s3:// words are left as
# typed, file:// ones complete as paths.  Needs only bash (4.2) and awk.

# The values --help gives in words, by "program option".
declare -gA _dptools_prose=(
	["tfr-shard --compress"]="none gzip zlib"
	["tfr-shard --by"]="round-robin contiguous hash:"
	["tfr-shard --split-by"]="seed hash:"
	["dp-train --optimizer"]="sgd adam adamw"
	["dp-train --decode-raw"]="uint8 float32 float64"
	["dp-train --lr-schedule"]="constant step: cosine"
	["dp-eval --decode-raw"]="uint8 float32 float64 none"
	["s3-pipe --method"]="GET PUT"
)
# What --help told, by program path: the options ("PATH" -> " -a --bb ..."),
# each option's kind ("PATH --bb" -> flag, optional, arg, file, dir, cmd or
# values) and values, the commands ("PATH" -> "get put ...").
declare -gA _dptools_opts _dptools_kind _dptools_vals _dptools_cmds

# _dptools_help PATH NAME: read PATH --help into the tables (once).
_dptools_help() {
	local exe=$1 name=$2 t o k v
	[[ -n ${_dptools_opts[$exe]+set} ]] && return
	_dptools_opts[$exe]=
	_dptools_cmds[$exe]=
	while read -r t o k v; do
		case $t in
		c) _dptools_cmds[$exe]+=" $o" ;;
		o)
			_dptools_opts[$exe]+=" $o"
			[[ -n ${_dptools_prose["$name $o"]+set} ]] && k=values v=${_dptools_prose["$name $o"]-}
			_dptools_kind["$exe $o"]=$k
			_dptools_vals["$exe $o"]=$v
			;;
		a) # -z, the short name of --compress (k)
			_dptools_kind["$exe $o"]=${_dptools_kind["$exe $k"]-}
			_dptools_vals["$exe $o"]=${_dptools_vals["$exe $k"]-}
			;;
		esac
	done < <(LC_ALL=C "$exe" --help 2>/dev/null | awk '
	# An option line: at most 8 blanks, then "-".  Its words up to the
	# description: options ("-o,", "--output=FILE", "--json[=a|b]") and
	# the argument names after them, one blank away.
	function kind(opt, arg) {
		if (arg ~ /^[a-z0-9]+(\|[a-z0-9]+)+$/) return "values"
		if (opt ~ /dir$/ || arg ~ /^[A-Z_]*DIR$/) return "dir"
		if (arg ~ /^[A-Z_]*(FILE|PATH)$/ || arg ~ /^(CHECKPOINT|TEMPLATE)$/ || arg ~ /^[A-Z]+\.[a-z]+$/) return "file"
		if (arg == "CMD") return "cmd"
		return "arg"
	}
	function give(opt, k, vals,   i) {	# to every option waiting for its argument
		if (np == 2 && pend[1] ~ /^-[^-]$/) alias[pend[1]] = pend[2]
		for (i = 1; i <= np; i++) {
			if (!(pend[i] in K)) order[++n] = pend[i]
			K[pend[i]] = k
			V[pend[i]] = vals
		}
		np = 0
	}
	/^Commands:/ { cmds = 1; next }
	cmds && /^$/ { cmds = 0 }
	cmds && /^  [a-z][a-z0-9-]* / { split($0, cw, " "); print "c", cw[1]; next }
	/^ +-/ && match($0, /^ +/) && RLENGTH <= 8 {
		line = $0; gap = 0; np = 0
		while (line != "") {
			match(line, /^ */); gap = RLENGTH; line = substr(line, RLENGTH + 1)
			if (line == "") break
			match(line, /^[^ ]+/); w = substr(line, 1, RLENGTH); line = substr(line, RLENGTH + 1)
			sub(/,$/, "", w)
			if (w ~ /^--?[A-Za-z0-9]/) {
				# "-o, --output=FILE": one option, two names
				if (np && !(np == 1 && pend[1] ~ /^-[^-]$/ && w ~ /^--/)) give("", "flag", "")
				opt = w; arg = ""; optional = 0
				if (opt ~ /\[=/) { optional = 1; arg = opt; sub(/^[^[]*\[=/, "", arg); sub(/\]$/, "", arg); sub(/\[=.*/, "", opt) }
				else if (opt ~ /=/) { arg = opt; sub(/^[^=]*=/, "", arg); sub(/=.*/, "", opt) }
				pend[++np] = opt
				if (arg == "") continue
				if (optional) give(opt, "optional", kind(opt, arg) == "values" ? arg : "")
				else if (arg ~ /^[a-z][a-z0-9=]*$/) {	# --encode=csv: one of the values
					if (!(opt in K)) order[++n] = opt
					K[opt] = "values"; V[opt] = (V[opt] == "" ? "" : V[opt] "|") arg; np = 0
				} else { k = kind(opt, arg); give(opt, k, k == "values" ? arg : "") }
			} else if (np && gap == 1 && (w ~ /^[A-Z][A-Za-z0-9_.=\/-]*$/ || w ~ /^[a-z0-9]+(\|[a-z0-9]+)+$/)) {
				k = kind(pend[np], w); give(pend[np], k, k == "values" ? w : "")
			} else break
		}
		if (np) give("", "flag", "")
	}
	END {
		for (i = 1; i <= n; i++) { v = V[order[i]]; gsub(/\|/, " ", v); print "o", order[i], K[order[i]], v }
		for (o in alias) print "a", o, alias[o]
	}')
	# no --help (not installed yet?): ask again next time
	[[ -n ${_dptools_opts[$exe]} ]] || unset "_dptools_opts[$exe]"
}

# _dptools_reply WORD...: the candidates (whole shell words) as readline
# wants them: without the part of the word before its last COMP_WORDBREAKS
# character ("s3:", "--level=": readline replaces only what follows).
_dptools_reply() {
	local i pre w
	for ((i = ${#_dptools_cur}; i > 0; i--)); do
		[[ ${COMP_WORDBREAKS-} == *"${_dptools_cur:$((i - 1)):1}"* ]] && break
	done
	pre=${_dptools_cur:0:$i}
	COMPREPLY=()
	for w in "$@"; do
		[[ $w == "$_dptools_cur"* ]] && COMPREPLY+=("${w:${#pre}}")
	done
}

# _dptools_files PREFIX WORD [-d]: file (or with -d directory) names completing
# WORD, each with PREFIX before it.
_dptools_files() {
	local f out=()
	while IFS= read -r f; do out+=("$1$f"); done < <(compgen "${3:--f}" -- "$2")
	_dptools_reply "${out[@]}"
	# readline then quotes them, and ends a directory with / and no space
	type compopt &>/dev/null && compopt -o filenames 2>/dev/null
	return 0
}

# _dptools_value PATH OPTION PREFIX WORD: complete WORD, OPTION's argument.
_dptools_value() {
	local k=${_dptools_kind["$1 $2"]-} v=${_dptools_vals["$1 $2"]-} w= c=()
	case $k in
	file | dir)
		[[ $4 == s3:* ]] && { COMPREPLY=(); return; }
		[[ $k == dir ]] && w=-d
		_dptools_files "$3" "$4" $w ;;
	cmd)
		while IFS= read -r w; do c+=("$3$w"); done < <(compgen -c -- "$4")
		_dptools_reply "${c[@]}" ;;
	values | optional)
		for w in $v; do c+=("$3$w"); done
		_dptools_reply "${c[@]}"
		[[ ${#COMPREPLY[@]} == 1 && ${COMPREPLY[0]} == *: ]] && type compopt &>/dev/null &&
			compopt -o nospace 2>/dev/null
		;;
	*) COMPREPLY=() ;;
	esac
}

# The completion function: complete -F _dptools PROGRAM.
_dptools() {
	local prog=${1##*/} exe line _dptools_cur prev words=() w i k cmd=
	exe=$(type -P -- "$1" 2>/dev/null) || exe=$1
	_dptools_help "$exe" "$prog"
	# The shell words before the cursor, split at blanks only (COMP_WORDS
	# splits s3://b at ':' and --opt=v at '=').
	line=${COMP_LINE:0:$COMP_POINT}
	local IFS=$' \t\n'
	if [[ $- == *f* ]]; then words=($line); else set -f; words=($line); set +f; fi
	[[ -z $line || $line == *[[:space:]] ]] && words+=("")
	_dptools_cur=${words[${#words[@]} - 1]-}
	prev=
	((${#words[@]} > 2)) && prev=${words[${#words[@]} - 2]}
	COMPREPLY=()

	# --opt=value
	if [[ $_dptools_cur == -?*=* ]]; then
		_dptools_value "$exe" "${_dptools_cur%%=*}" "${_dptools_cur%%=*}=" "${_dptools_cur#*=}"
		return 0
	fi
	# the argument of the option before
	k=${_dptools_kind["$exe $prev"]-}
	if [[ $prev == -* && -n $k && $k != flag && $k != optional ]]; then
		_dptools_value "$exe" "$prev" "" "$_dptools_cur"
		return 0
	fi
	if [[ $_dptools_cur == -* ]]; then
		_dptools_reply ${_dptools_opts[$exe]-}
		return 0
	fi
	# s3-pipe's command: the first operand (options may come before it)
	if [[ -n ${_dptools_cmds[$exe]-} ]]; then
		for ((i = 1; i < ${#words[@]} - 1; i++)); do
			w=${words[i]}
			if [[ $w == -* ]]; then
				k=${_dptools_kind["$exe $w"]-}
				[[ $w != *=* && -n $k && $k != flag && $k != optional ]] && ((i++))
			else
				cmd=$w
				break
			fi
		done
		if [[ -z $cmd ]]; then
			_dptools_reply ${_dptools_cmds[$exe]-}
			return 0
		fi
	fi
	# operands: file names; URLs as typed, but file:// ones as paths
	case $_dptools_cur in
	file://*) _dptools_files file:// "${_dptools_cur#file://}" ;;
	*://* | s3:* | file:*) COMPREPLY=() ;;
	*) _dptools_files "" "$_dptools_cur" ;;
	esac
	return 0
}

complete -F _dptools @PROGRAMS@
