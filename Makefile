# dptools - small Unix programs for data-parallel deep learning.
#
#   make                      build libdp (static, shared, pkg-config) and the programs
#   make check                build and run every test (TAP, under prove)
#   make help                 list the targets
#
# Variables: PREFIX DESTDIR BINDIR LIBDIR INCLUDEDIR MANDIR (install),
# BACKEND=cpu|cuda (the dp-train/dp-eval math), O (build directory),
# CC CFLAGS CPPFLAGS LDFLAGS, T (tests to run, e.g. T=tests/tfr-cat.t).

VERSION := 0.1.0
SOVERSION := 0

PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
MANDIR ?= $(PREFIX)/share/man
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
BACKEND ?= cpu

ifeq ($(BACKEND),cpu)
O ?= build
else
O ?= build-$(BACKEND)
endif

CC ?= cc
CFLAGS ?= -O2 -g
WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wpointer-arith \
	-Wno-unused-parameter -Wvla
DP_CFLAGS := -std=gnu11 -fPIC -pthread $(WARN)
PROVE ?= prove

# ---- dependencies (Debian packages; scripts/deps installs them) ----------
# ompi-c: Open MPI (dp-train's collectives).
PKGS := libprotobuf-c zlib jansson libpcre2-8 openblas libcurl expat libcrypto ompi-c
PKG_MISSING := $(shell for p in $(PKGS); do pkg-config --exists $$p || echo $$p; done)
ifneq ($(PKG_MISSING),)
$(error missing development packages ($(PKG_MISSING)): run scripts/deps)
endif
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS))
PKG_LIBS := $(shell pkg-config --libs $(PKGS)) -lm
PROTOC_C ?= protoc-c

# ---- sources -------------------------------------------------------------
GEN := $(O)/gen
LIB_SRC := $(wildcard lib/*.c)
LIB_OBJ := $(patsubst lib/%.c,$(O)/lib/%.o,$(LIB_SRC)) $(O)/lib/example.pb-c.o
LIB_HDR := $(wildcard lib/dp*.h) $(GEN)/example.pb-c.h
LIB_PRIV_HDR := $(filter-out lib/dp%.h,$(wildcard lib/*.h))
TOOLS := $(patsubst tools/%.c,%,$(wildcard tools/*.c))
BINS := $(addprefix $(O)/bin/,$(TOOLS))
UNIT_SRC := $(wildcard tests/unit/*.c)
UNIT_BINS := $(patsubst tests/unit/%.c,$(O)/tests/%,$(UNIT_SRC))
CLI_TESTS := $(sort $(wildcard tests/*.t))
MAN1 := $(wildcard man/man1/*.1)
MAN5 := $(wildcard man/man5/*.5)
MAN7 := $(wildcard man/man7/*.7)

ALL_CPPFLAGS := -Ilib -I$(GEN) $(PKG_CFLAGS) -DDP_BACKEND_$(BACKEND) $(CPPFLAGS)
ALL_CFLAGS := $(DP_CFLAGS) $(CFLAGS)
LINK_LIBS := $(PKG_LIBS) $(LDLIBS)
# Programs load only the libraries they use: tfr-cat neither loads Open MPI
# nor OpenBLAS at start (MPI itself is initialised only by dp-train under a
# launcher: lib/comm.c).
PROG_LDFLAGS := -Wl,--as-needed

SO := libdp.so.$(VERSION)

.PHONY: all check unit cli asan fuzz bench learn demo install uninstall clean help
.DELETE_ON_ERROR:

## all: build libdp (libdp.a, libdp.so, libdp.pc) and the programs
all: $(BINS) $(O)/libdp.a $(O)/$(SO) $(O)/libdp.pc

$(GEN)/example.pb-c.c $(GEN)/example.pb-c.h: lib/example.proto
	@mkdir -p $(GEN)
	$(PROTOC_C) --c_out=$(GEN) -Ilib lib/example.proto

$(O)/lib/example.pb-c.o: $(GEN)/example.pb-c.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CPPFLAGS) $(ALL_CFLAGS) -w -c -o $@ $<

$(O)/lib/%.o: lib/%.c $(LIB_HDR) $(LIB_PRIV_HDR)
	@mkdir -p $(@D)
	$(CC) $(ALL_CPPFLAGS) $(ALL_CFLAGS) -c -o $@ $<

# The CPU backend's elementwise loops are written to vectorise (lib/backend_cpu.c).
$(O)/lib/backend_cpu.o: ALL_CFLAGS += -O3 -fno-math-errno -ffp-contract=off

$(O)/libdp.a: $(LIB_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

$(O)/$(SO): $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,libdp.so.$(SOVERSION) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LINK_LIBS)
	ln -sf $(SO) $(O)/libdp.so.$(SOVERSION)
	ln -sf $(SO) $(O)/libdp.so

# The pkg-config file names the install locations, so install writes it
# anew with the PREFIX/LIBDIR/INCLUDEDIR given to install.
define PCFILE
printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$(LIBDIR)' 'includedir=$(INCLUDEDIR)/dptools' '' \
  'Name: libdp' 'Description: dptools library: TFRecord, tf.train.Example, S3, training' \
  'Version: $(VERSION)' 'Requires: $(PKGS)' \
  'Libs: -L$${libdir} -ldp' 'Libs.private: -lm -pthread' 'Cflags: -I$${includedir}'
endef

$(O)/libdp.pc: Makefile
	@mkdir -p $(@D)
	$(PCFILE) > $@

$(O)/bin/%: tools/%.c $(O)/libdp.a $(LIB_HDR)
	@mkdir -p $(@D)
	$(CC) $(ALL_CPPFLAGS) $(ALL_CFLAGS) -DDP_PROG='"$*"' $(LDFLAGS) $(PROG_LDFLAGS) -o $@ $< $(O)/libdp.a $(LINK_LIBS)

$(O)/tests/%: tests/unit/%.c tests/unit/tap.h $(O)/libdp.a $(LIB_HDR)
	@mkdir -p $(@D)
	$(CC) $(ALL_CPPFLAGS) -Itests/unit $(ALL_CFLAGS) $(LDFLAGS) $(PROG_LDFLAGS) -o $@ $< $(O)/libdp.a $(LINK_LIBS)

# The environment every test runs in: the programs just built first on PATH.
TEST_ENV = PATH="$(abspath $(O))/bin:$$PATH" DP_BUILD="$(abspath $(O))" DP_SRC="$(CURDIR)"
T ?= $(UNIT_BINS) $(CLI_TESTS)

## check: build everything and run all tests under prove (T=... picks some)
check: all $(UNIT_BINS)
	$(TEST_ENV) $(PROVE) -j2 -f $(T)

## unit: run only libdp's unit tests
unit: $(UNIT_BINS)
	$(TEST_ENV) $(PROVE) -f $(UNIT_BINS)

## asan: build in build-asan with AddressSanitizer + UBSan and run all tests
asan:
	$(MAKE) O=build-asan CFLAGS='-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined' \
	  LDFLAGS='-fsanitize=address,undefined' check

## fuzz: build the libFuzzer targets (tests/fuzz) and run each FUZZ_TIME seconds
FUZZ_TIME ?= 60
fuzz: all
	tests/fuzz/run $(FUZZ_TIME)

## bench: run the benchmarks under bench/ (minutes; prints ratios against peers)
bench: all
	$(TEST_ENV) bench/run

## learn: the full Fashion-MNIST learning runs of dp-train (minutes; prints the accuracies)
learn: all
	$(TEST_ENV) examples/fashion-mnist.sh

## demo: the README's main job (see examples/)
demo: all
	$(TEST_ENV) examples/demo

## install: install programs, library, headers, pkg-config file and man pages
install: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PKGCONFIGDIR) \
	  $(DESTDIR)$(INCLUDEDIR)/dptools $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 \
	  $(DESTDIR)$(MANDIR)/man7
	install -m 755 $(BINS) $(DESTDIR)$(BINDIR)
	install -m 644 $(O)/libdp.a $(DESTDIR)$(LIBDIR)
	install -m 755 $(O)/$(SO) $(DESTDIR)$(LIBDIR)
	ln -sf $(SO) $(DESTDIR)$(LIBDIR)/libdp.so.$(SOVERSION)
	ln -sf $(SO) $(DESTDIR)$(LIBDIR)/libdp.so
	$(PCFILE) > $(DESTDIR)$(PKGCONFIGDIR)/libdp.pc
	install -m 644 $(LIB_HDR) $(DESTDIR)$(INCLUDEDIR)/dptools
	$(if $(MAN1),install -m 644 $(MAN1) $(DESTDIR)$(MANDIR)/man1)
	$(if $(MAN5),install -m 644 $(MAN5) $(DESTDIR)$(MANDIR)/man5)
	$(if $(MAN7),install -m 644 $(MAN7) $(DESTDIR)$(MANDIR)/man7)

## uninstall: remove what install put in place
uninstall:
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(TOOLS))
	rm -f $(DESTDIR)$(LIBDIR)/libdp.a $(DESTDIR)$(LIBDIR)/$(SO) \
	  $(DESTDIR)$(LIBDIR)/libdp.so.$(SOVERSION) $(DESTDIR)$(LIBDIR)/libdp.so \
	  $(DESTDIR)$(PKGCONFIGDIR)/libdp.pc
	rm -rf $(DESTDIR)$(INCLUDEDIR)/dptools
	rm -f $(addprefix $(DESTDIR)$(MANDIR)/man1/,$(notdir $(MAN1))) \
	  $(addprefix $(DESTDIR)$(MANDIR)/man5/,$(notdir $(MAN5))) \
	  $(addprefix $(DESTDIR)$(MANDIR)/man7/,$(notdir $(MAN7)))

## clean: remove build directories
clean:
	rm -rf build build-asan build-cuda build-fuzz

## help: list the targets
help:
	@sed -n 's/^## //p' Makefile
