#!/bin/bash
# layout.t - the architecture, checked: the rule for which way includes may
# point between lib/'s component folders and tools/, the parts of
# lib/train/, the public headers (together, as C and as C++), what
# libdp.so exports, and that the files comments name exist.
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
#
# lib/train/ draws its parts as folders (as curl's lib/vtls/), each over
# the public headers of the parts below it; the trainer (lib/train/*.c,
# dp_train.h) sits on top of them all:
#
#                 trainer (lib/train/*.c)      serve (inference: dp-serve)
#          +-----------+-----------+          |
#        eval         ckpt         |    (over ckpt, input, model)
#   +------+----+------+           |
# input  comm   |    model  -------+
#         |     +------+
#         +------> backend
# (ckpt over input too: a run's settings say how its data was decoded)
. "${DP_SRC:-.}/tests/lib.sh"
cd "$DP_SRC" || exit 1

# The component of each public header (lib/dp*.h).
comp_of() {
	case $1 in
	dp.h | dp_rng.h | dp_hash.h | dp_tar.h) echo common ;;
	dp_record.h | dp_example.h | dp_encode.h | dp_shard.h | dp_shuffle.h | dp_events.h) echo records ;;
	dp_image.h) echo image ;;
	dp_s3.h) echo s3 ;;
	dp_backend.h | dp_nn.h | dp_optim.h | dp_comm.h | dp_data.h | dp_ckpt.h | dp_onnx.h | dp_eval.h | dp_train.h | dp_serve.h) echo train ;;
	dp_metrics.h | dp_lines.h | dp_plot.h) echo metrics ;;
	*) echo unknown ;;
	esac
}
# The part of lib/train/ of each of its public headers.
part_of() {
	case $1 in
	dp_backend.h) echo backend ;;
	dp_comm.h) echo comm ;;
	dp_nn.h | dp_optim.h) echo model ;;
	dp_data.h) echo input ;;
	dp_ckpt.h | dp_onnx.h) echo ckpt ;;
	dp_eval.h) echo eval ;;
	dp_serve.h) echo serve ;;
	dp_train.h) echo trainer ;;
	*) echo none ;;
	esac
}
# What each part of lib/train/ may include of the others, itself first.
part_allowed() {
	case $1 in
	backend) echo "backend" ;;
	comm) echo "comm backend" ;;
	model) echo "model backend" ;;
	input) echo "input" ;;
	ckpt) echo "ckpt input model backend" ;;
	eval) echo "eval input comm model backend" ;;
	serve) echo "serve ckpt input model backend" ;;
	trainer) echo "trainer eval ckpt input comm model backend" ;;
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

# every source below lib/, however deep
libsrc=$(find lib -mindepth 2 \( -name '*.[ch]' -o -name '*.cu' \) | sort)
ok test -n "$libsrc" "lib/ has sources"

bad=
for f in $libsrc lib/dp*.h; do
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
		onnx.pb-c.h) # protobuf-c's code from ONNX's own onnx.proto (libonnx-dev)
			[ "$f" = lib/train/ckpt/onnx.c ] || bad="$bad $f->$inc(not the ONNX writer)" ;;
		*.pb-c.h) # protobuf-c's code, generated from the .proto beside the file
			[ -f "$(dirname "$f")/${inc%.pb-c.h}.proto" ] || bad="$bad $f->$inc(no .proto beside it)" ;;
		*) # a private header: beside the file that includes it
			[ -f "$(dirname "$f")/$inc" ] || bad="$bad $f->$inc(not beside it)" ;;
		esac
	done
done
is "$bad" "" "lib/ includes point only down the rule"

# lib/train/: the parts are folders, and their includes point down.
is "$(cd lib/train && ls -d */ | tr -d / | sort | tr '\n' ' ')" "backend ckpt comm eval input model serve " \
	"lib/train/ holds one folder per part"
bad=
for f in $(find lib/train -name '*.[ch]' -o -name '*.cu' | sort) $(ls lib/dp*.h); do
	case $f in
	lib/dp*.h) p=$(part_of "${f#lib/}"); [ "$p" = none ] && continue ;;
	lib/train/*/*) p=$(echo "$f" | cut -d/ -f3) ;;
	*) p=trainer ;;
	esac
	for inc in $(sed -n 's/^#include "\(dp[^"]*\)".*/\1/p' "$f"); do
		ip=$(part_of "$inc")
		[ "$ip" = none ] && continue
		case " $(part_allowed "$p") " in *" $ip "*) ;; *) bad="$bad $f->$inc($ip)" ;; esac
	done
done
is "$bad" "" "lib/train/'s parts include only the parts below them"

bad=
for f in tools/*.c tools/*.h; do
	for inc in $(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f"); do
		case $inc in dp*.h) [ -f "lib/$inc" ] || bad="$bad $f->$inc" ;; cli.h|cli_input.h|sagemaker.h) ;; *) bad="$bad $f->$inc" ;; esac
	done
done
is "$bad" "" "tools/ include only libdp's public headers, cli.h, cli_input.h and sagemaker.h"
is "$(ls lib/*/dp*.h 2>/dev/null)" "" "no public (dp*.h) header inside a component folder"

# The library reads no DP_* override from the environment by itself (only
# what the program hands over: dp_settings_from_env, dp.h "Settings").
is "$(grep -n 'getenv("DP_' $libsrc)" "" "lib/ reads no DP_* variable with getenv (dp_setting)"
# ... and the environment in one place (dp_env; libdp(3), ENVIRONMENT),
# but the CUDA backend's files, which the GPU work is changing now
is "$(grep -ln 'getenv(' $libsrc | grep -v -e '^lib/common/settings\.c$' -e '^lib/train/backend/cuda')" "" \
	"lib/ reads the environment only in lib/common/settings.c (dp_env)"

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
# protobuf-c writes ONNX files (lib/train/ckpt/onnx.c); the Example parser
# is libdp's own, since protobuf-c's generated parser is the tests' reference.
run nm "$DP_BUILD/lib/records/example.o"
unlike "$out" "protobuf_c" "the Example parser does not use protobuf-c (the tests' reference)"

# Every lib/ file a comment names exists (files move; comments stay).
# Left out: bench/REPORT, a record of past work, and the files the CUDA
# work is changing now (lib/train/backend/cuda.cu, tests/cudaemu/), whose
# comments still name the backends' paths before the move.
bad=
for f in $(git ls-files 2>/dev/null || find . -type f | sed 's|^\./||'); do
	case $f in
	bench/REPORT | lib/train/backend/cuda.cu | tests/cudaemu/*) continue ;;
	*.c | *.h | *.cu | *.t | *.sh | *.py | Makefile | tests/fuzz/run | bench/* | scripts/*) ;;
	*) continue ;;
	esac
	[ -f "$f" ] || continue
	for p in $(grep -oE '(^|[^A-Za-z0-9_./-])lib/[a-z0-9_/]+\.(c|h|cu|proto)\b' "$f" | sed 's/^[^l]*//' | sort -u); do
		[ -e "$p" ] || bad="$bad $f:$p"
	done
done
is "$bad" "" "every lib/ path a comment names exists"
done_testing
