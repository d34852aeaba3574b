# lib/train/backend/cuda.mk - the CUDA backend's part of the Makefile
# (included by it): with BACKEND=cuda, what was found, one line each
# (llm.c style): nvcc and cuBLAS are required; cuDNN (CUDNN=auto|0|1,
# CUDNN_HOME) gives the convolutions and the channels-last tf32/bf16
# modes, im2col + cuBLAS without it; NCCL (NCCL=auto|0|1, NCCL_HOME) sums
# gradients GPU to GPU, host memory and MPI without it.  With BACKEND=cpu,
# the same sources built by g++ over tests/cudaemu (the CUDA runtime,
# cuBLAS and cuDNN emulated on the CPU) for the unit and CLI tests.
CU_ALL := $(wildcard lib/train/backend/*.cu)

ifeq ($(BACKEND),cuda)
CUDA_HOME ?= $(or $(CUDA_PATH),$(if $(wildcard /usr/local/cuda/bin/nvcc),/usr/local/cuda),$(patsubst %/bin/nvcc,%,$(shell command -v nvcc 2>/dev/null)),/usr/local/cuda)
NVCC ?= $(CUDA_HOME)/bin/nvcc
CUDA_ARCH ?= 80 90
NVCCFLAGS ?= -O3 -lineinfo
NCCL ?= auto
NCCL_HOME ?= $(CUDA_HOME)
CUDNN ?= auto
CUDNN_HOME ?= $(CUDA_HOME)
MULTIARCH := $(shell $(CC) -print-multiarch 2>/dev/null)
CUDA_LIBDIR := $(firstword $(foreach d,$(CUDA_HOME)/lib64 $(CUDA_HOME)/lib $(CUDA_HOME)/targets/x86_64-linux/lib,$(if $(wildcard $(d)/libcublas.so),$(d))))
NVCC_VERSION := $(shell $(NVCC) --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\),.*/\1/p')
ifneq ($(CUDNN),0)
CUDNN_INC := $(firstword $(foreach d,$(CUDNN_HOME)/include $(CUDA_HOME)/include /usr/include/$(MULTIARCH) /usr/include,$(if $(wildcard $(d)/cudnn.h),$(d))))
CUDNN_LIBDIR := $(firstword $(foreach d,$(CUDNN_HOME)/lib64 $(CUDNN_HOME)/lib $(CUDA_LIBDIR) /usr/lib/$(MULTIARCH),$(if $(wildcard $(d)/libcudnn.so),$(d))))
endif
ifneq ($(NCCL),0)
NCCL_INC := $(firstword $(foreach d,$(NCCL_HOME)/include $(CUDA_HOME)/include /usr/include,$(if $(wildcard $(d)/nccl.h),$(d))))
NCCL_LIBDIR := $(firstword $(foreach d,$(NCCL_HOME)/lib64 $(NCCL_HOME)/lib $(CUDA_LIBDIR) /usr/lib/$(MULTIARCH),$(if $(wildcard $(d)/libnccl.so),$(d))))
endif
CUDA_SAY := $(if $(filter-out clean help,$(MAKECMDGOALS))$(if $(MAKECMDGOALS),,all),yes)
ifeq ($(NVCC_VERSION),)
$(error ✗ nvcc not found at $(NVCC): install the CUDA toolkit or set CUDA_HOME (make BACKEND=cuda needs nvcc and cuBLAS))
endif
ifeq ($(CUDA_LIBDIR),)
$(error ✗ cuBLAS not found (no libcublas.so under $(CUDA_HOME)/lib64 or lib): set CUDA_HOME)
endif
GENCODE := $(foreach a,$(CUDA_ARCH),-gencode arch=compute_$(a),code=sm_$(a)) \
	-gencode arch=compute_$(lastword $(CUDA_ARCH)),code=compute_$(lastword $(CUDA_ARCH))
ifneq ($(CUDA_SAY),)
$(info dptools: BACKEND=cuda, CUDA_HOME=$(CUDA_HOME), building into $(O))
$(info dptools: ✓ nvcc $(NVCC_VERSION) ($(NVCC)): $(addprefix sm_,$(CUDA_ARCH)) + PTX compute_$(lastword $(CUDA_ARCH)) (CUDA_ARCH="$(CUDA_ARCH)"))
$(info dptools: ✓ cuBLAS ($(CUDA_LIBDIR)))
endif
ifneq ($(and $(NCCL_INC),$(NCCL_LIBDIR)),)
NCCL_VERSION := $(shell sed -n 's/^\#define NCCL_\(MAJOR\|MINOR\|PATCH\) *\([0-9]*\).*/\2/p' $(NCCL_INC)/nccl.h | paste -sd.)
ALL_CPPFLAGS += -DDP_WITH_NCCL $(if $(filter $(NCCL_INC),$(CUDA_HOME)/include /usr/include),,-isystem $(NCCL_INC))
CUDA_LIBS_NCCL := $(if $(filter $(NCCL_LIBDIR),$(CUDA_LIBDIR)),,-L$(NCCL_LIBDIR) -Wl,-rpath,$(NCCL_LIBDIR)) -lnccl
ifneq ($(CUDA_SAY),)
$(info dptools: ✓ NCCL $(NCCL_VERSION) ($(NCCL_INC)/nccl.h, $(NCCL_LIBDIR)): gradients summed GPU to GPU)
endif
else ifeq ($(NCCL),1)
$(error ✗ NCCL not found (NCCL=1): no nccl.h and libnccl.so under $(NCCL_HOME), $(CUDA_HOME) or /usr: set NCCL_HOME)
else ifneq ($(CUDA_SAY),)
$(info dptools: ✗ NCCL $(if $(filter 0,$(NCCL)),off (NCCL=0),not found (set NCCL_HOME)): the gradients of several ranks go through host memory and MPI)
endif
ifneq ($(and $(CUDNN_INC),$(CUDNN_LIBDIR)),)
CUDNN_VERSION := $(shell sed -n 's/^\#define CUDNN_\(MAJOR\|MINOR\|PATCHLEVEL\) *\([0-9]*\).*/\2/p' $(CUDNN_INC)/cudnn_version.h | paste -sd.)
ALL_CPPFLAGS += -DDP_WITH_CUDNN $(if $(filter $(CUDNN_INC),$(CUDA_HOME)/include /usr/include),,-isystem $(CUDNN_INC))
CUDA_LIBS_CUDNN := $(if $(filter $(CUDNN_LIBDIR),$(CUDA_LIBDIR) $(NCCL_LIBDIR)),,-L$(CUDNN_LIBDIR) -Wl,-rpath,$(CUDNN_LIBDIR)) -lcudnn
ifneq ($(CUDA_SAY),)
$(info dptools: ✓ cuDNN $(CUDNN_VERSION) ($(CUDNN_INC)/cudnn.h, $(CUDNN_LIBDIR)): convolutions, channels-last under tf32 and bf16)
endif
else ifeq ($(CUDNN),1)
$(error ✗ cuDNN not found (CUDNN=1): no cudnn.h and libcudnn.so under $(CUDNN_HOME), $(CUDA_HOME) or /usr: set CUDNN_HOME)
else ifneq ($(CUDA_SAY),)
$(info dptools: ✗ cuDNN $(if $(filter 0,$(CUDNN)),off (CUDNN=0),not found (set CUDNN_HOME)): convolutions by im2col + cuBLAS)
endif
ALL_CPPFLAGS += -isystem $(CUDA_HOME)/include
CU_LIBS := -L$(CUDA_LIBDIR) -Wl,-rpath,$(CUDA_LIBDIR) $(CUDA_LIBS_NCCL) $(CUDA_LIBS_CUDNN) -lcublas -lcudart -lstdc++
LINK_LIBS += $(CU_LIBS)
PC_LIBS_PRIVATE += $(CU_LIBS)
ALL_NVCCFLAGS := -std=c++17 --fmad=false $(GENCODE) -Xcompiler -fPIC,-pthread,-Wall,-Wno-unused-parameter $(NVCCFLAGS)
CU_SRC := $(CU_ALL)
endif


# The CUDA backend's own code run on the CPU through an emulation of the
# CUDA runtime, cuBLAS and cuDNN (tests/cudaemu), against the CPU backend, so that
# a build without a GPU still checks its kernels' arithmetic and indexing.
ifeq ($(BACKEND),cpu)
CXX ?= c++
UNIT_BINS += $(O)/tests/cuda-emu
EMU_CXXFLAGS := -std=gnu++17 -DDP_CUDA_EMU -DDP_WITH_CUDNN -Itests/cudaemu -fPIC -pthread \
	-ffp-contract=off -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers -Wno-unknown-pragmas $(CFLAGS)
EMU_OBJ := $(patsubst lib/train/backend/%.cu,$(O)/tests/cudaemu/%.o,$(CU_ALL))
$(EMU_OBJ): $(O)/tests/cudaemu/%.o: lib/train/backend/%.cu lib/train/backend/cuda_impl.h \
		$(wildcard tests/cudaemu/*.h) $(LIB_HDR)
	@mkdir -p $(@D)
	$(CXX) -x c++ $(ALL_CPPFLAGS) $(EMU_CXXFLAGS) -c -o $@ $<
$(O)/tests/cudaemu/backend.o: lib/train/backend/backend.c $(LIB_HDR)
	@mkdir -p $(@D)
	$(CC) $(ALL_CPPFLAGS) -DDP_BACKEND_cuda $(ALL_CFLAGS) -c -o $@ $<
$(O)/tests/cuda-emu: tests/unit/cuda.c tests/unit/tap.h $(EMU_OBJ) \
		$(O)/tests/cudaemu/backend.o $(O)/libdp.a
	$(CC) $(ALL_CPPFLAGS) -Itests/unit $(ALL_CFLAGS) $(LDFLAGS) -o $@ $< \
	  $(EMU_OBJ) $(O)/tests/cudaemu/backend.o $(O)/libdp.a $(LINK_LIBS) -lstdc++
# dp-train on the emulated backend: tests/cuda-emu.t runs it, under mpirun too
TEST_PROGS += $(O)/tests/dp-train-cudaemu
$(O)/tests/dp-train-cudaemu: tools/dp-train.c $(CLI_OBJ) $(SM_OBJ) $(EMU_OBJ) \
		$(O)/tests/cudaemu/backend.o $(O)/libdp.a $(LIB_HDR)
	$(CC) $(ALL_CPPFLAGS) $(ALL_CFLAGS) -DDP_PROG='"dp-train"' $(LDFLAGS) -o $@ $< $(CLI_OBJ) $(SM_OBJ) \
	  $(EMU_OBJ) $(O)/tests/cudaemu/backend.o $(O)/libdp.a $(LINK_LIBS) -lstdc++
endif

