# dptools - small Unix programs for data-parallel deep learning.
#
#   make                      build libdp (static, shared, pkg-config) and the programs
#   make check                build and run every test (TAP, under prove)
#   make help                 list the targets
#
# Variables: PREFIX DESTDIR BINDIR LIBDIR INCLUDEDIR MANDIR BASHCOMPDIR ZSHCOMPDIR (install),
# BACKEND=cpu|cuda (the dp-train/dp-eval math), O (build directory),
# CC CFLAGS CPPFLAGS LDFLAGS, T (tests to run, e.g. T=tests/tfr-cat.t).
# BACKEND=cuda also reads CUDA_HOME (default /usr/local/cuda, else the
# nvcc on PATH), CUDA_ARCH (GPU architectures, default "80 90": A100,
# H100/H200, plus PTX for newer ones), NVCC, NVCCFLAGS, NCCL=auto|0|1 and
# NCCL_HOME; it builds into build-cuda.

# `make` alone builds everything (an included file's rules come before all:)
.DEFAULT_GOAL := all

VERSION := 0.1.0
SOVERSION := 0

PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
MANDIR ?= $(PREFIX)/share/man
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
# Where bash-completion loads completions from: its completionsdir when
# PREFIX is its own prefix (/usr), else PREFIX/share/bash-completion/completions
# (it searches /usr/local/share by default, and XDG_DATA_DIRS).
BASHCOMPDIR ?= $(or $(if $(filter $(PREFIX),$(shell pkg-config --variable=prefix bash-completion 2>/dev/null)),$(shell pkg-config --variable=completionsdir bash-completion 2>/dev/null)),$(PREFIX)/share/bash-completion/completions)
# zsh's: on its default fpath, Debian's for packages under /usr.
ZSHCOMPDIR ?= $(if $(filter /usr,$(PREFIX)),/usr/share/zsh/vendor-completions,$(PREFIX)/share/zsh/site-functions)
BACKEND ?= cpu

ifeq ($(BACKEND),cpu)
O ?= build
else
O ?= build-$(BACKEND)
endif

ifeq ($(filter cpu cuda,$(BACKEND)),)
$(error BACKEND=$(BACKEND): want cpu or cuda)
endif

CC ?= cc
CFLAGS ?= -O2 -g
WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wpointer-arith \
	-Wno-unused-parameter -Wvla
DP_CFLAGS := -std=gnu11 -fPIC -pthread $(WARN)
PROVE ?= prove

# ---- dependencies (Debian packages; scripts/deps installs them) ----------
# ompi-c: Open MPI (dp-train's collectives); libturbojpeg and spng: JPEG and
# PNG decoding (lib/image).
# libprotobuf-c: ONNX files (dp_onnx.h, from ONNX's own onnx.proto, as
# libonnx-dev installs it: ONNX_PROTO), and the tests' reference Example
# parser (lib/records/example.proto).  libzip:
# PyTorch's .pth files, zip archives (lib/train/ckpt/pth.c).  libwebp,
# libtiff-4 and stb (stb_image): the images ImageFolder reads past JPEG and
# PNG (lib/image/formats.c).
LIB_PKGS := zlib jansson libpcre2-8 openblas libcurl expat libcrypto ompi-c libturbojpeg libjpeg spng libprotobuf-c libzip libwebp libtiff-4 stb
# libmicrohttpd: dp-serve's HTTP server (the program's, not libdp's).
PKGS := $(LIB_PKGS) libmicrohttpd
# Targets that need no compiler skip the check (make clean, make help).
NODEPS_GOALS := clean help uninstall dist
ifneq ($(filter-out $(NODEPS_GOALS),$(or $(MAKECMDGOALS),all)),)
PKG_MISSING := $(shell for p in $(PKGS); do pkg-config --exists $$p || echo $$p; done)
ifneq ($(PKG_MISSING),)
$(error missing development packages ($(PKG_MISSING)): run scripts/deps)
endif
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS))
LIB_LIBS := $(shell pkg-config --libs $(LIB_PKGS)) -lm
PB_LIBS := $(shell pkg-config --libs libprotobuf-c)
MHD_LIBS := $(shell pkg-config --libs libmicrohttpd)
endif
PROTOC_C ?= protoc-c
ONNX_PROTO ?= /usr/include/onnx/onnx.proto

# ---- oneDNN (Debian's libdnnl-dev, optional): the CPU backend's convolutions
# where it measures faster (lib/train/backend/cpu_dnnl.c); without it they
# are our own.  DNNL=auto|0|1, DNNL_HOME (default /usr): one line says
# which.  oneDNN runs on OpenMP (libgomp) threads.
DNNL ?= auto
DNNL_HOME ?= /usr
DNNL_MULTIARCH := $(shell $(CC) -print-multiarch 2>/dev/null)
ifneq ($(DNNL),0)
DNNL_INC := $(firstword $(foreach d,$(DNNL_HOME)/include /usr/include,$(if $(wildcard $(d)/oneapi/dnnl/dnnl.h),$(d))))
DNNL_LIBDIR := $(firstword $(foreach d,$(DNNL_HOME)/lib/$(DNNL_MULTIARCH) $(DNNL_HOME)/lib64 $(DNNL_HOME)/lib /usr/lib/$(DNNL_MULTIARCH),$(if $(wildcard $(d)/libdnnl.so),$(d))))
endif
DNNL_SAY := $(if $(filter-out $(NODEPS_GOALS),$(or $(MAKECMDGOALS),all)),yes)
ifneq ($(and $(DNNL_INC),$(DNNL_LIBDIR)),)
DNNL_VERSION := $(shell sed -n 's/^\#define DNNL_VERSION_\(MAJOR\|MINOR\|PATCH\) *\([0-9]*\).*/\2/p' $(DNNL_INC)/oneapi/dnnl/dnnl_version.h | paste -sd.)
DNNL_CPPFLAGS := -DDP_WITH_DNNL $(if $(filter $(DNNL_INC),/usr/include),,-isystem $(DNNL_INC))
DNNL_LIBS := $(if $(filter $(DNNL_LIBDIR),/usr/lib/$(DNNL_MULTIARCH)),,-L$(DNNL_LIBDIR) -Wl,-rpath,$(DNNL_LIBDIR)) -ldnnl
DNNL_STATE := on
ifneq ($(DNNL_SAY),)
$(info dptools: ✓ oneDNN $(DNNL_VERSION) ($(DNNL_INC)/oneapi/dnnl/dnnl.h, $(DNNL_LIBDIR)): CPU convolutions chosen per shape among oneDNN's and ours)
endif
else ifeq ($(DNNL),1)
$(error ✗ oneDNN not found (DNNL=1): no oneapi/dnnl/dnnl.h and libdnnl.so under $(DNNL_HOME) or /usr: install libdnnl-dev (scripts/deps) or set DNNL_HOME)
else
DNNL_STATE := off
ifneq ($(DNNL_SAY),)
$(info dptools: ✗ oneDNN $(if $(filter 0,$(DNNL)),off (DNNL=0),not found (libdnnl-dev; scripts/deps installs it)): CPU convolutions by our own kernels only)
endif
endif
# The CPU backend's threads: OpenMP's (GCC's libgomp), with or without oneDNN.
LIB_LIBS += $(DNNL_LIBS) -lgomp

# ---- sources -------------------------------------------------------------
# lib/ is one folder per component (records, image, s3, train, metrics,
# over common), the public headers at its top, private ones beside their code;
# lib/train/ draws its parts as folders in turn (backend/, comm/, model/...).
GEN := $(O)/gen
LIB_SRC := $(wildcard lib/*/*.c lib/*/*/*.c)
LIB_OBJ = $(patsubst lib/%.c,$(O)/lib/%.o,$(LIB_SRC)) \
	$(patsubst lib/%.cu,$(O)/lib/%.o,$(CU_SRC)) $(LIB_GEN_OBJ)
# protobuf-c's code for the formats libdp writes with it (ONNX), generated
# from the format's own .proto (ONNX_PROTO).
LIB_GEN_OBJ := $(O)/gen/onnx.pb-c.o
LIB_HDR := $(wildcard lib/dp*.h)
PB_OBJ := $(O)/tests/example.pb-c.o
# tools/: one file per program over one CLI layer (tools/cli.c).
TOOLS := $(filter-out cli cli_input sagemaker,$(patsubst tools/%.c,%,$(wildcard tools/*.c)))
CLI_OBJ := $(O)/tools/cli.o
# tools/sagemaker.c: the SageMaker container contract, dp-train's and
# dp-eval's; tools/cli_input.c: the input pipeline's options they share.
SM_OBJ := $(O)/tools/sagemaker.o $(O)/tools/cli_input.o
BINS := $(addprefix $(O)/bin/,$(TOOLS))
UNIT_SRC := $(wildcard tests/unit/*.c)
UNIT_BINS := $(patsubst tests/unit/%.c,$(O)/tests/%,$(UNIT_SRC))
TEST_PROGS :=
CLI_TESTS := $(sort $(wildcard tests/*.t))
MAN1 := $(wildcard man/man1/*.1)
MAN5 := $(wildcard man/man5/*.5)
MAN7 := $(wildcard man/man7/*.7)
MAN3 := $(wildcard man/man3/*.3)
# Man pages as installed: @VERSION@ and @DATE@ (SOURCE_DATE_EPOCH, else the
# last commit's: from git, or in a make dist tarball from scripts/commit-date,
# which git archive fills in) filled in.
MAN_SRC := $(MAN1) $(MAN3) $(MAN5) $(MAN7)
MAN_OUT := $(patsubst man/%,$(O)/man/%,$(MAN_SRC))
MAN_DATE := $(shell { [ -n "$$SOURCE_DATE_EPOCH" ] && date -u -d "@$$SOURCE_DATE_EPOCH" +%F; } || git log -1 --format=%cs 2>/dev/null || grep -x '[0-9-]*' scripts/commit-date || date -u +%F)

ALL_CPPFLAGS := -Ilib $(PKG_CFLAGS) $(DNNL_CPPFLAGS) -DDP_BACKEND_$(BACKEND) -DDP_VERSION='"$(VERSION)"' $(CPPFLAGS)
ALL_CFLAGS := $(DP_CFLAGS) $(CFLAGS)
# Only what the public headers mark DP_EXPORT leaves libdp.so (nm -D: dp_*).
LIB_CFLAGS := -fvisibility=hidden
LINK_LIBS := $(LIB_LIBS) $(LDLIBS)
PC_LIBS_PRIVATE := -lm -pthread

# ---- BACKEND=cuda: nvcc, cuBLAS, cuDNN and NCCL found (lib/train/backend/cuda.mk)
include lib/train/backend/cuda.mk

# Programs load only the libraries they use: tfr-cat neither loads Open MPI
# nor OpenBLAS at start (MPI itself is initialised only by dp-train under a
# launcher: lib/train/comm/comm.c).
PROG_LDFLAGS := -Wl,--as-needed

SO := libdp.so.$(VERSION)
# bash completion: one file for every program, which reads its options from
# the program's --help (completion/dptools.bash says why); zsh's _dptools is
# the same through bashcompinit.
COMPLETION := $(O)/completion/dptools
ZSH_COMPLETION := $(O)/completion/_dptools
DIST := dptools-$(VERSION)

.PHONY: all check check-build unit cli asan fuzz fuzz-build bench kit learn demo install uninstall clean help \
	dist distcheck deb
.DELETE_ON_ERROR:

## all: build libdp (libdp.a, libdp.so, libdp.pc), the programs, man pages, completion
all: $(BINS) $(O)/libdp.a $(O)/$(SO) $(O)/libdp.pc $(MAN_OUT) $(COMPLETION) $(ZSH_COMPLETION)

$(COMPLETION): completion/dptools.bash Makefile
	@mkdir -p $(@D)
	sed 's/@PROGRAMS@/$(TOOLS)/g' $< > $@

$(ZSH_COMPLETION): $(COMPLETION)
	{ echo '#compdef $(TOOLS)'; echo 'autoload -U +X bashcompinit && bashcompinit'; \
	  cat $<; echo '_bash_complete -F _dptools "$$@"'; } > $@

$(O)/man/%: man/% Makefile
	@mkdir -p $(@D)
	sed -e 's/@VERSION@/$(VERSION)/g' -e 's/@DATE@/$(MAN_DATE)/g' $< > $@

# protobuf-c's parser, generated from our .proto: the tests' reference.
$(GEN)/example.pb-c.c $(GEN)/example.pb-c.h &: lib/records/example.proto
	@mkdir -p $(GEN)
	$(PROTOC_C) --c_out=$(GEN) -Ilib/records lib/records/example.proto

$(GEN)/onnx.pb-c.c $(GEN)/onnx.pb-c.h &: $(ONNX_PROTO)
	@mkdir -p $(GEN)
	$(PROTOC_C) --c_out=$(GEN) -I$(dir $(ONNX_PROTO)) $(ONNX_PROTO)

$(ONNX_PROTO):
	$(error $(ONNX_PROTO) is missing: apt-get install libonnx-dev (scripts/deps))

$(O)/gen/onnx.pb-c.o: $(GEN)/onnx.pb-c.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CPPFLAGS) -I$(GEN) $(ALL_CFLAGS) $(LIB_CFLAGS) -w -c -o $@ $<

$(O)/lib/train/ckpt/onnx.o: $(GEN)/onnx.pb-c.h
$(O)/lib/train/ckpt/onnx.o: ALL_CPPFLAGS += -I$(GEN)

$(PB_OBJ): $(GEN)/example.pb-c.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CPPFLAGS) -I$(GEN) $(ALL_CFLAGS) -w -c -o $@ $<

# Header dependencies from the compiler: each object's .d beside it (-MMD,
# the headers it included; -MP, a rule for each so that a header removed is
# no error), read back below.
DEPFLAGS := -MMD -MP

$(O)/lib/%.o: lib/%.c
	@mkdir -p $(@D)
	$(CC) $(DEPFLAGS) $(ALL_CPPFLAGS) $(ALL_CFLAGS) $(LIB_CFLAGS) -c -o $@ $<

$(O)/lib/%.o: lib/%.cu
	@mkdir -p $(@D)
	$(NVCC) $(DEPFLAGS) $(ALL_CPPFLAGS) $(ALL_NVCCFLAGS) -Xcompiler -fvisibility=hidden -c -o $@ $<

# The build's identity (dp_build) names its compiler flags.
$(O)/lib/train/backend/backend.o $(O)/tests/cudaemu/backend.o: ALL_CPPFLAGS += -DDP_BUILD_CFLAGS='"$(strip $(subst ',,$(subst ",,$(CFLAGS))))"'

# The CPU backend's elementwise loops are written to vectorise (lib/train/backend/cpu*.c),
$(patsubst lib/%.c,$(O)/lib/%.o,$(wildcard lib/train/backend/cpu*.c)): ALL_CFLAGS += -O3 -fno-math-errno -ffp-contract=off
# its threads are OpenMP's (cpu_pool.c), and oneDNN's; it rebuilds when oneDNN comes or goes
$(patsubst lib/%.c,$(O)/lib/%.o,$(wildcard lib/train/backend/cpu*.c)): ALL_CFLAGS += -fopenmp
$(O)/lib/train/backend/cpu_dnnl.o $(O)/lib/train/backend/backend.o: $(O)/.dnnl-$(DNNL_STATE)
$(O)/.dnnl-$(DNNL_STATE):
	@mkdir -p $(@D)
	@rm -f $(O)/.dnnl-*
	@touch $@
# and so are the image resampler's (lib/image/transform.c) and a record's
# values into the model's input (lib/train/input/decode.c)
$(O)/lib/image/transform.o $(O)/lib/train/input/decode.o: ALL_CFLAGS += -O3 -fno-math-errno -ffp-contract=off

$(O)/libdp.a: $(LIB_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

$(O)/$(SO): $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,libdp.so.$(SOVERSION) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LINK_LIBS)
	ln -sf $(SO) $(O)/libdp.so.$(SOVERSION)
	ln -sf $(SO) $(O)/libdp.so

# The pkg-config file names the install locations, so install writes it
# anew with the PREFIX/LIBDIR/INCLUDEDIR given to install.  libdp's public
# headers need only the C library, so its dependencies are Libs.private
# (for --static) and not Requires.private, whose Cflags pkg-config would
# add to every program's (MPI's include paths in a program reading records).
define PCFILE
printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$(LIBDIR)' 'includedir=$(INCLUDEDIR)/dptools' '' \
  'Name: libdp' 'Description: dptools library: TFRecord, tf.train.Example, S3, training' \
  'Version: $(VERSION)' \
  'Libs: -L$${libdir} -ldp' 'Libs.private: $(LIB_LIBS) $(PC_LIBS_PRIVATE)' 'Cflags: -I$${includedir}'
endef

$(O)/libdp.pc: Makefile
	@mkdir -p $(@D)
	$(PCFILE) > $@

$(CLI_OBJ): tools/cli.c
	@mkdir -p $(@D)
	$(CC) $(DEPFLAGS) $(ALL_CPPFLAGS) $(ALL_CFLAGS) -c -o $@ $<

$(SM_OBJ): $(O)/tools/%.o: tools/%.c
	@mkdir -p $(@D)
	$(CC) $(DEPFLAGS) $(ALL_CPPFLAGS) $(ALL_CFLAGS) -c -o $@ $<

$(O)/bin/dp-train $(O)/bin/dp-eval $(O)/bin/dp-serve: TOOL_OBJ := $(SM_OBJ)
$(O)/bin/dp-train $(O)/bin/dp-eval $(O)/bin/dp-serve: $(SM_OBJ)
$(O)/bin/dp-serve: TOOL_LIBS := $(MHD_LIBS)

$(O)/bin/%: tools/%.c $(CLI_OBJ) $(O)/libdp.a
	@mkdir -p $(@D)
	$(CC) $(DEPFLAGS) $(ALL_CPPFLAGS) $(ALL_CFLAGS) -DDP_PROG='"$*"' $(LDFLAGS) $(PROG_LDFLAGS) -o $@ $< $(CLI_OBJ) $(TOOL_OBJ) $(O)/libdp.a $(LINK_LIBS) $(TOOL_LIBS)

# Unit tests link the static library, so they reach private functions too
# (through lib/COMPONENT/*.h), and protobuf-c's generated reference parser.
$(O)/tests/%: tests/unit/%.c $(O)/libdp.a $(PB_OBJ)
	@mkdir -p $(@D)
	$(CC) $(DEPFLAGS) $(ALL_CPPFLAGS) -I$(GEN) -Itests/unit $(ALL_CFLAGS) $(LDFLAGS) $(PROG_LDFLAGS) -o $@ $< $(PB_OBJ) $(O)/libdp.a $(LINK_LIBS) $(PB_LIBS)

# The CPU backend as a build without oneDNN has it (DNNL=0), beside a build
# with it: tests/unit/convimpl.c over lib/train/backend/cpu*.c and
# backend.c compiled without DP_WITH_DNNL (objects before libdp.a take the
# place of its own), checking that it says so and computes the same.
ifeq ($(DNNL_STATE),on)
NODNNL_OBJ := $(patsubst lib/train/backend/%.c,$(O)/tests/nodnnl/%.o,$(wildcard lib/train/backend/cpu*.c) lib/train/backend/backend.c)
$(NODNNL_OBJ): $(O)/tests/nodnnl/%.o: lib/train/backend/%.c $(wildcard lib/train/backend/*.h) $(LIB_HDR)
	@mkdir -p $(@D)
	$(CC) $(filter-out $(DNNL_CPPFLAGS),$(ALL_CPPFLAGS)) $(ALL_CFLAGS) -O3 -fno-math-errno -ffp-contract=off -fopenmp -c -o $@ $<
UNIT_BINS += $(O)/tests/convimpl-nodnnl
$(O)/tests/convimpl-nodnnl: tests/unit/convimpl.c tests/unit/tap.h $(NODNNL_OBJ) $(O)/libdp.a
	$(CC) $(ALL_CPPFLAGS) -DDP_EXPECT_NO_DNNL -Itests/unit $(ALL_CFLAGS) $(LDFLAGS) $(PROG_LDFLAGS) -o $@ $< $(NODNNL_OBJ) $(O)/libdp.a $(LINK_LIBS)
endif

# Test programs: libdp's functions driven from the shell tests.
TEST_PROGS += $(O)/tests/imgtool $(O)/tests/ctltool
$(O)/tests/%: tests/progs/%.c $(O)/libdp.a
	@mkdir -p $(@D)
	$(CC) $(DEPFLAGS) $(ALL_CPPFLAGS) $(ALL_CFLAGS) $(LDFLAGS) $(PROG_LDFLAGS) -o $@ $< $(O)/libdp.a $(LINK_LIBS)

# What each object and program included, as its compiler found (DEPFLAGS).
-include $(wildcard $(O)/lib/*/*.d $(O)/lib/*/*/*.d $(O)/tools/*.d $(O)/bin/*.d $(O)/tests/*.d)

# The environment every test runs in: the programs just built first on PATH.
TEST_ENV = PATH="$(abspath $(O))/bin:$$PATH" DP_BUILD="$(abspath $(O))" DP_SRC="$(CURDIR)" DP_CFLAGS="$(CFLAGS)" DP_LDFLAGS="$(LDFLAGS)"
T ?= $(UNIT_BINS) $(CLI_TESTS)

## check: build everything and run all tests under prove (T=... picks some)
check: all $(UNIT_BINS) $(TEST_PROGS)
	$(TEST_ENV) $(PROVE) -j2 -f $(T)

## check-build: build everything make check runs, run nothing (tests/cuda-build.t)
check-build: all $(UNIT_BINS) $(TEST_PROGS)

## unit: run only libdp's unit tests
unit: $(UNIT_BINS)
	$(TEST_ENV) $(PROVE) -f $(UNIT_BINS)

## asan: build in build-asan with AddressSanitizer + UBSan and run all tests
asan:
	$(MAKE) O=build-asan CFLAGS='-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined' \
	  LDFLAGS='-fsanitize=address,undefined' check

## fuzz: build the libFuzzer targets (tests/fuzz) and run each FUZZ_TIME seconds
FUZZ_TIME ?= 60
fuzz: all fuzz-build
	FUZZ_O=$(FUZZ_O) FUZZ_BIN=$(O)/bin tests/fuzz/run $(FUZZ_TIME)

## fuzz-build: the libFuzzer targets alone, in FUZZ_O (default build-fuzz)
# Built with clang (FUZZ_CC) -fsanitize=fuzzer,address,undefined against
# libdp's sources compiled for coverage (not libdp.a: the sanitizers and
# coverage must see them), and protobuf-c's reference parser.  Needs
# Debian's clang and libclang-rt-14-dev.
FUZZ_O ?= build-fuzz
FUZZ_CC ?= clang
FUZZ_CFLAGS := -g -O1 -fsanitize=address,undefined -fno-sanitize-recover=undefined -pthread \
	-DDP_VERSION='"$(VERSION)"' -Ilib -Itests/fuzz -I$(FUZZ_O)/gen $(PKG_CFLAGS)
FUZZ_TARGETS := $(patsubst tests/fuzz/%.c,%,$(wildcard tests/fuzz/*.c))
FUZZ_LIB_OBJ := $(patsubst lib/%.c,$(FUZZ_O)/obj/%.o,$(LIB_SRC)) $(FUZZ_O)/obj/example.pb-c.o \
	$(FUZZ_O)/obj/onnx.pb-c.o
fuzz-build: $(addprefix $(FUZZ_O)/fuzz-,$(FUZZ_TARGETS))
$(FUZZ_O)/gen/example.pb-c.c $(FUZZ_O)/gen/example.pb-c.h &: lib/records/example.proto
	@mkdir -p $(@D)
	$(PROTOC_C) --c_out=$(@D) -Ilib/records $<
$(FUZZ_O)/gen/onnx.pb-c.c $(FUZZ_O)/gen/onnx.pb-c.h &: $(ONNX_PROTO)
	@mkdir -p $(@D)
	$(PROTOC_C) --c_out=$(@D) -I$(dir $(ONNX_PROTO)) $<
$(FUZZ_O)/obj/%.pb-c.o: $(FUZZ_O)/gen/%.pb-c.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -w -c -o $@ $<
$(FUZZ_O)/obj/train/ckpt/onnx.o: $(FUZZ_O)/gen/onnx.pb-c.h
$(FUZZ_O)/obj/%.o: lib/%.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(DEPFLAGS) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c -o $@ $<
$(FUZZ_O)/fuzz-%: tests/fuzz/%.c $(FUZZ_LIB_OBJ) | $(FUZZ_O)/gen/example.pb-c.c
	$(FUZZ_CC) $(DEPFLAGS) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_LIB_OBJ) $(LIB_LIBS) $(PB_LIBS)
-include $(wildcard $(FUZZ_O)/obj/*/*.d $(FUZZ_O)/obj/*/*/*.d $(FUZZ_O)/*.d)

## bench: run the benchmarks under bench/ (minutes; prints ratios against peers)
bench: all
	$(TEST_ENV) bench/run

## kit: the folder to carry to a GPU machine (kit/, scripts/device-kit) for scripts/device-check
kit:
	scripts/device-kit kit

## learn: the full Fashion-MNIST learning runs of dp-train (minutes; prints the accuracies)
learn: all
	$(TEST_ENV) examples/fashion-mnist.sh

## demo: the README's main job (see examples/)
demo: all
	$(TEST_ENV) examples/demo

## install: install programs, library, headers, pkg-config file, man pages, bash and zsh completion
install: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PKGCONFIGDIR) \
	  $(DESTDIR)$(INCLUDEDIR)/dptools $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man3 \
	  $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man7 $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR)
	install -m 755 $(BINS) $(DESTDIR)$(BINDIR)
	install -m 644 $(O)/libdp.a $(DESTDIR)$(LIBDIR)
	install -m 755 $(O)/$(SO) $(DESTDIR)$(LIBDIR)
	ln -sf $(SO) $(DESTDIR)$(LIBDIR)/libdp.so.$(SOVERSION)
	ln -sf $(SO) $(DESTDIR)$(LIBDIR)/libdp.so
	$(PCFILE) > $(DESTDIR)$(PKGCONFIGDIR)/libdp.pc
	install -m 644 $(LIB_HDR) $(DESTDIR)$(INCLUDEDIR)/dptools
	$(foreach s,1 3 5 7,$(if $(MAN$(s)),install -m 644 $(patsubst man/%,$(O)/man/%,$(MAN$(s))) $(DESTDIR)$(MANDIR)/man$(s);))
	install -m 644 $(COMPLETION) $(DESTDIR)$(BASHCOMPDIR)/$(firstword $(TOOLS))
	$(foreach p,$(wordlist 2,$(words $(TOOLS)),$(TOOLS)),ln -sf $(firstword $(TOOLS)) $(DESTDIR)$(BASHCOMPDIR)/$(p);)
	install -m 644 $(ZSH_COMPLETION) $(DESTDIR)$(ZSHCOMPDIR)

## uninstall: remove what install put in place
uninstall:
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(TOOLS))
	rm -f $(DESTDIR)$(LIBDIR)/libdp.a $(DESTDIR)$(LIBDIR)/$(SO) \
	  $(DESTDIR)$(LIBDIR)/libdp.so.$(SOVERSION) $(DESTDIR)$(LIBDIR)/libdp.so \
	  $(DESTDIR)$(PKGCONFIGDIR)/libdp.pc
	rm -rf $(DESTDIR)$(INCLUDEDIR)/dptools
	rm -f $(addprefix $(DESTDIR)$(MANDIR)/man1/,$(notdir $(MAN1))) \
	  $(addprefix $(DESTDIR)$(MANDIR)/man3/,$(notdir $(MAN3))) \
	  $(addprefix $(DESTDIR)$(MANDIR)/man5/,$(notdir $(MAN5))) \
	  $(addprefix $(DESTDIR)$(MANDIR)/man7/,$(notdir $(MAN7)))
	rm -f $(addprefix $(DESTDIR)$(BASHCOMPDIR)/,$(TOOLS)) $(DESTDIR)$(ZSHCOMPDIR)/_dptools

## dist: dptools-VERSION.tar.gz of the committed tree (git archive of HEAD), in DISTDIR=.
DISTDIR ?= .
dist:
	git archive --prefix=$(DIST)/ -o $(DISTDIR)/$(DIST).tar.gz HEAD

## distcheck: make dist, then build the tarball and run its full make check
distcheck: dist
	scripts/distcheck $(DISTDIR)/$(DIST).tar.gz full

## deb: the Debian packages dptools, libdp0, libdp-dev (dpkg-buildpackage) in debs/
deb:
	scripts/deb debs

## clean: remove build directories, the dist tarball and debs/ (O=DIR: that build only)
clean:
	rm -rf $(if $(filter command line,$(origin O)),$(O),build build-asan build-cuda build-fuzz build-kit kit \
	  $(DIST).tar.gz debs)

## help: list the targets
help:
	@sed -n 's/^## //p' Makefile
