#!/bin/bash
# layout.t - the architecture, checked: the rule for which way includes may
# point between lib/'s component folders and tools/, the public headers
# (together, as C and as C++), and what libdp.so exports.
#
# The rule (README, "Layout"): each component includes its own headers and
# the public headers of the components below it, never those above or
# beside it; tools/ include only public headers and tools/cli.h.
#
#            tools/  (cli.h)
#               |
#    +----------+----------+
#  train      s3       metrics
#    |         |          |
#  image       |          |
#    |         |          |
#  records     |          |
#    +---------+----------+
#            common
. "${DP_SRC:-.}/tests/lib.sh"
cd "$DP_SRC" || exit 1

# The component of each public header (lib/dp*.h).
comp_of() {
	case $1 in
	dp.h | dp_rng.h | dp_hash.h) echo common ;;
	dp_record.h | dp_example.h | dp_encode.h | dp_shard.h | dp_shuffle.h | dp_events.h) echo records ;;
	dp_image.h) echo image ;;
	dp_s3.h) echo s3 ;;
	dp_backend.h | dp_nn.h | dp_optim.h | dp_comm.h | dp_data.h | dp_ckpt.h | dp_eval.h) echo train ;;
	dp_metrics.h | dp_lines.h | dp_plot.h) echo metrics ;;
	*) echo unknown ;;
	esac
}
# What each component may include, itself first.
allowed() {
	case $1 in
	common) echo "common" ;;
	records) echo "records common" ;;
	image) echo "image records common" ;;
	s3) echo "s3 common" ;;
	train) echo "train image records common" ;;
	metrics) echo "metrics common" ;;
	esac
}

# every public header belongs to a component
for h in lib/dp*.h; do
	isnt "$(comp_of "${h#lib/}")" unknown "$h has a component in the rule"
done
# folders are exactly the components
is "$(cd lib && ls -d */ | tr -d / | sort | tr '\n' ' ')" "common image metrics records s3 train " \
	"lib/ holds one folder per component"

bad=
for f in lib/*/*.[ch] lib/*/*.cu lib/dp*.h; do
	case $f in
	lib/dp*.h) c=$(comp_of "${f#lib/}") ;;
	*) c=$(echo "$f" | cut -d/ -f2) ;;
	esac
	for inc in $(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f"); do
		case $inc in
		dp*.h)
			ic=$(comp_of "$inc")
			case " $(allowed "$c") " in *" $ic "*) ;; *) bad="$bad $f->$inc($ic)" ;; esac
			;;
		*/*) bad="$bad $f->$inc(path)" ;;
		*) # a private header: beside the file that includes it
			[ -f "$(dirname "$f")/$inc" ] || bad="$bad $f->$inc(not beside it)" ;;
		esac
	done
done
is "$bad" "" "lib/ includes point only down the rule"

bad=
for f in tools/*.c tools/*.h; do
	for inc in $(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f"); do
		case $inc in dp*.h) [ -f "lib/$inc" ] || bad="$bad $f->$inc" ;; cli.h|sagemaker.h) ;; *) bad="$bad $f->$inc" ;; esac
	done
done
is "$bad" "" "tools/ include only libdp's public headers, cli.h and sagemaker.h"
is "$(ls lib/*/dp*.h 2>/dev/null)" "" "no public (dp*.h) header inside a component folder"

# The library reads no DP_* override from the environment by itself (only
# what the program hands over: dp_settings_from_env, dp.h "Settings").
is "$(grep -n 'getenv("DP_' lib/*/*.c lib/*/*.cu)" "" "lib/ reads no DP_* variable with getenv (dp_setting)"

# The public headers, all together, as C and as C++.
{
	for h in lib/dp*.h; do echo "#include \"${h#lib/}\""; done
	echo 'int main(void) { return dp_version() == 0; }'
} >"$T/all.c"
cp "$T/all.c" "$T/all.cc"
run cc -std=c11 -Wall -Wextra -Werror -pedantic -Wno-long-long -Ilib -c -o "$T/all.o" "$T/all.c"
is "$rc" 0 "the public headers compile together as C11"
[ "$rc" = 0 ] || diag "$err"
run c++ -std=c++17 -Wall -Wextra -Werror -Ilib -c -o "$T/allxx.o" "$T/all.cc"
is "$rc" 0 "... and as C++17"
[ "$rc" = 0 ] || diag "$err"
run c++ -std=c++17 -Ilib -o "$T/allxx" "$T/allxx.o" "$DP_BUILD/libdp.so" -Wl,-rpath,"$DP_BUILD"
is "$rc" 0 "... and a C++ program links against libdp.so (extern \"C\")"
[ "$rc" = 0 ] || diag "$err"
for h in lib/dp*.h; do
	printf '#include "%s"\n' "${h#lib/}" >"$T/one.c"
	run cc -std=c11 -Wall -Werror -Ilib -fsyntax-only "$T/one.c"
	is "$rc" 0 "$h compiles on its own"
	[ "$rc" = 0 ] || diag "$err"
done

# What libdp.so exports: dp_* only, and every function the headers declare.
exports=$(nm -D --defined-only "$DP_BUILD/libdp.so" | awk '{print $3}' | sort)
is "$(echo "$exports" | grep -v '^dp_' | grep -v '^__odr_asan\.dp_')" "" "libdp.so exports only dp_* names (and ASan's ODR markers of them)"
run cc -std=c11 -Ilib -aux-info "$T/decl.txt" -fsyntax-only "$T/all.c"
declared=$(grep -E "^/\\* lib/dp[a-z_]*\\.h:[0-9]+:NC \\*/ extern" "$T/decl.txt" |
	sed -E 's/.*[ *](dp_[a-z0-9_]+) \(.*/\1/' | sort -u)
ok test -n "$declared" "the public headers declare functions"
missing=$(comm -23 <(echo "$declared") <(echo "$exports") | tr '\n' ' ')
is "$missing" "" "every function the public headers declare is exported (DP_EXPORT)"
run objdump -p "$DP_BUILD/libdp.so"
unlike "$out" "NEEDED +libprotobuf-c" "libdp.so does not link protobuf-c"
done_testing
