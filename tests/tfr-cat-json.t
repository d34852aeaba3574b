#!/bin/bash
# tfr-cat -j, --json=proto and --encode json: checked against Google's protobuf
# (Debian's python3-protobuf, on a module compiled here with protoc) and its
# json_format printer and parser; round trips byte for byte.
. "${DP_SRC:-.}/tests/lib.sh"
D=$FIX/tfr-cat
protoc --python_out="$T" -I"$DP_SRC/lib/records" "$DP_SRC/lib/records/example.proto" || exit 1
ref() { $PY "$DP_SRC/tests/tfr_ref.py" "$T" "$@"; }
ref gen "$T/a.tfr" || exit 1
n=$(ref frames "$T/a.tfr")

# ---- compact -----------------------------------------------------------------
run tfr-cat -j "$T/a.tfr"
is "$rc" 0 "-j: exit 0"
is "$err" "" "-j: nothing on stderr"
printf '%s\n' "$out" >"$T/c.jsonl"
is "$(wc -l <"$T/c.jsonl")" "$n" "-j: one line per record"
# names in wire order, kinds, every value; floats shortest and as Python's repr
run ref compact "$T/a.tfr" "$T/c.jsonl"
is "$rc" 0 "-j: every value agrees with protobuf's parse ($out$err)"
$PY -c "
import json, sys
for l in open(sys.argv[1], encoding='utf-8'):
    json.loads(l)
" "$T/c.jsonl"
is "$?" 0 "-j: every line is JSON to Python's parser"
line=$(tfr-cat --encode json "$D/small.jsonl" | tfr-cat -j -n 1)
is "$line" '{"image":{"bytes":["AAECAwQFBgcICQ=="]},"label":{"int64":[3]},"x":{"float":[0.5,1.0]}}' \
	"-j: the documented example, verbatim"
is "$(printf '{"x":{"float":[1e-05,3.4028235e+38,-0.0,0.1,"NaN"]},"n":{}}\n' | tfr-cat --encode json | tfr-cat -j)" \
	'{"x":{"float":[1e-05,3.4028235e+38,-0.0,0.1,"NaN"]},"n":{}}' "-j: float forms and an unset Feature"

is "$(tfr-cat --json=compact "$T/a.tfr")" "$(cat "$T/c.jsonl")" "--json=compact is -j"
run tfr-cat --json=yaml "$T/a.tfr"
is "$rc" 2 "--json=yaml: usage error"

# ---- proto -------------------------------------------------------------------------
run tfr-cat --json=proto "$T/a.tfr"
is "$rc" 0 "--json=proto: exit 0"
printf '%s\n' "$out" >"$T/p.jsonl"
run ref proto "$T/a.tfr" "$T/p.jsonl"
is "$rc" 0 "--json=proto: what json_format prints, and parses back ($out$err)"
like "$(cat "$T/p.jsonl")" '"int64List": \{"value": \["0", "-1", "9223372036854775807", "-9223372036854775808"\]\}' \
	"--json=proto: int64 as strings"
$PY -c "import sys; open(sys.argv[1], encoding='ascii').read()" "$T/p.jsonl"
is "$?" 0 "--json=proto: ASCII only, like the printer"

# ---- round trips -----------------------------------------------------------------------
# every record but the zero-length one (no features field: it prints as {}
# and {} encodes as an empty features field; tfrecord(5) says so)
tfr-cat -j "$T/a.tfr" | tfr-cat --encode json >"$T/rt.tfr"
run tfr-cat -c "$T/rt.tfr"
is "$out" "$n" "round trip: as many records"
k=0
bad=0
zero=0
while [ $k -lt "$n" ]; do
	a=$(tfr-cat --skip $k -n 1 "$T/a.tfr" | od -An -tx1 | tr -d ' \n')
	b=$(tfr-cat --skip $k -n 1 "$T/rt.tfr" | od -An -tx1 | tr -d ' \n')
	if [ "$a" != "$b" ]; then
		# the zero-length record may come back as an empty features field
		case "$a/$b" in
		0000000000000000*/0200000000000000*0a00????????) zero=$((zero + 1)) ;;
		*) bad=$((bad + 1)); diag "record $k: ${a:0:60} vs ${b:0:60}" ;;
		esac
	fi
	k=$((k + 1))
done
is "$bad" 0 "-j | --encode json: every record byte-identical"
is "$zero" 1 "-j | --encode json: but the zero-length record, which comes back as 0a 00"
tfr-cat --json=proto "$T/a.tfr" | tfr-cat --encode json=proto >"$T/rtp.tfr"
same_file "$T/rtp.tfr" "$T/a.tfr" "--json=proto | --encode json=proto: byte-identical (all)"
printf '{}\n' | tfr-cat --encode json >"$T/empty.tfr"
is "$(tail -c +13 "$T/empty.tfr" | head -c 2 | od -An -tx1)" " 0a 00" "compact {}: an empty features field"
printf '{}\n{"features": {}}\n' | tfr-cat --encode json=proto >"$T/e2.tfr"
is "$(tfr-cat --json=proto "$T/e2.tfr")" "$(printf '{}\n{"features": {}}')" "proto: {} and empty features kept apart"
# protobuf's own printer output (MessageToJson) is read too, with snake_case names
$PY -c "
import sys; sys.path.insert(0, '$T')
import example_pb2
from google.protobuf import json_format
m = example_pb2.Example()
m.features.feature['a'].int64_list.value.extend([1, -2])
m.features.feature['b'].float_list.value.extend([0.25, float('inf')])
print(json_format.MessageToJson(m, indent=None, sort_keys=True))  # map order is the printer's own
print(json_format.MessageToJson(m, indent=None, preserving_proto_field_name=True, sort_keys=True))
print('{\"features\": {\"feature\": {\"c\": {\"int64List\": {\"value\": [5, \"6\"]}}, \"d\": {\"bytesList\": {\"value\": [\"-_8\"]}}}}}')
" >"$T/pp.jsonl"
run tfr-cat --encode json=proto -j "$T/pp.jsonl"
is "$out" "$(printf '%s\n' '{"a":{"int64":[1,-2]},"b":{"float":[0.25,"Infinity"]}}' \
	'{"a":{"int64":[1,-2]},"b":{"float":[0.25,"Infinity"]}}' '{"c":{"int64":[5,6]},"d":{"bytes":["+/8="]}}')" \
	"--encode json=proto reads MessageToJson output, snake_case, numbers and URL-safe base64"

# ---- the Fashion-MNIST shape ----------------------------------------------------------
printf '{"image":{"bytes":["%s"]},"label":{"int64":[7]}}\n' "$(head -c 784 /dev/zero | base64 -w0)" |
	tfr-cat --encode json >"$T/m.tfr"
$PY -c "
import sys; sys.path.insert(0, '$T'); sys.path.insert(0, '$DP_SRC/tests'); sys.argv = ['', '$T']
import example_pb2
exec(open('$DP_SRC/tests/tfr_ref.py').read().split('def main')[0])
m = example_pb2.Example.FromString(load('$T/m.tfr')[0])
assert m.features.feature['image'].bytes_list.value[0] == bytes(784)
assert list(m.features.feature['label'].int64_list.value) == [7]
"
is "$?" 0 "--encode json: protobuf reads what was built"

# ---- bad JSON input -----------------------------------------------------------------------
bad() { # name json expected-message-regex
	printf '{"ok":{"int64":[1]}}\n%s\n' "$2" >"$T/bad.jsonl"
	run tfr-cat --encode json -o "$T/bad.tfr" "$T/bad.jsonl"
	is "$rc" 1 "bad JSON, $1: exit 1"
	like "$err" "^tfr-cat: $T/bad.jsonl: line 2: $3" "bad JSON, $1: message"
	ok test ! -e "$T/bad.tfr" "bad JSON, $1: no output file"
}
bad "syntax" '{"a":' "invalid JSON at column"
bad "not an object" '[1,2]' "not a JSON object"
bad "unknown kind" '{"a":{"string":["x"]}}' 'feature "a": unknown feature kind "string"'
bad "two kinds" '{"a":{"int64":[1],"float":[2]}}' 'feature "a": a feature has more than one kind'
bad "bad base64" '{"a":{"bytes":["!!"]}}' 'feature "a": invalid base64'
bad "float range" '{"a":{"float":[1e39]}}' 'feature "a": float value out of range'
bad "int64 range" '{"a":{"int64":[9223372036854775808]}}' "invalid JSON"
bad "int64 as float" '{"a":{"int64":[1.5]}}' 'feature "a": invalid int64 value'
bad "values not a list" '{"a":{"int64":3}}' 'feature "a": values are not an array'
bad "duplicate name" '{"a":{"int64":[1]},"a":{"int64":[2]}}' "invalid JSON at column .*duplicate"
printf '\n  \n' >"$T/blank.jsonl"
run tfr-cat --encode json -c "$T/blank.jsonl"
is "$rc" 1 "blank lines only: empty input, exit 1"
like "$err" "blank.jsonl: empty input: no records \(--allow-empty accepts it\)" "blank lines only: message"
run tfr-cat --encode json -c --allow-empty "$T/blank.jsonl"
is "$out$rc" "00" "blank lines only, --allow-empty: zero records, exit 0"
run tfr-cat -j -o "$T/x.json" --encode json=proto "$T/c.jsonl"
is "$rc" 1 "compact lines read as proto: exit 1"
like "$err" 'line 1: unknown field \(only "features"\)' "compact lines read as proto: message"

done_testing
