/*
 * tests/cudaemu/cuda_runtime.h - just enough of the CUDA runtime, on the
 * CPU, to run lib/backend_cuda.cu without a GPU (g++ -DDP_CUDA_EMU
 * -Itests/cudaemu).  Test-only: it checks the arithmetic and the indexing
 * of the kernels and the host code's GEMM shapes against the CPU backend
 * (tests/unit/cuda.c), not anything about real GPUs: streams and events
 * are no-ops, copies are memcpy, "device" memory is host memory.
 *
 * A launch runs its blocks one after another, and the threads of a block as
 * 256 fibers (ucontext) taking turns in the calling thread: each runs until
 * it ends or reaches __syncthreads(), and a barrier is passed when every
 * fiber has reached it, so block reductions over __shared__ (static) arrays
 * work as on a GPU, deterministically.  Every launch in the backend uses
 * 256 threads a block.
 */
#ifndef CUDAEMU_RUNTIME_H
#define CUDAEMU_RUNTIME_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>

#include <functional>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static

struct uint4 {
	unsigned x, y, z, w;
};
static inline float __uint_as_float(unsigned u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}
static inline unsigned __float_as_uint(float f)
{
	unsigned u;
	memcpy(&u, &f, 4);
	return u;
}

struct dim3 {
	unsigned x, y, z;
	dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};

static dim3 threadIdx, blockIdx, blockDim, gridDim;

enum { EMU_THREADS = 256, EMU_STACK = 64 << 10 };
static char *emu_stacks;
static int emu_done[EMU_THREADS], emu_cur;
static const std::function<void()> *emu_job;

/* Switching fibers: on x86-64 a few instructions (callee-saved registers
 * and the stack pointer); elsewhere, and under AddressSanitizer (which
 * knows ucontext), swapcontext, whose signal-mask system calls cost more. */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
extern "C" void emu_switch(void **save_sp, void *load_sp);
asm(".text\n.weak emu_switch\n.type emu_switch, @function\nemu_switch:\n"
    "\tpush %rbp\n\tpush %rbx\n\tpush %r12\n\tpush %r13\n\tpush %r14\n\tpush %r15\n"
    "\tmov %rsp, (%rdi)\n\tmov %rsi, %rsp\n"
    "\tpop %r15\n\tpop %r14\n\tpop %r13\n\tpop %r12\n\tpop %rbx\n\tpop %rbp\n\tret\n"
    ".size emu_switch, .-emu_switch\n");
static void *emu_sched_sp, *emu_fib_sp[EMU_THREADS];

static inline void __syncthreads(void) { emu_switch(&emu_fib_sp[emu_cur], emu_sched_sp); }

static void emu_entry(void)
{
	(*emu_job)();
	emu_done[emu_cur] = 1;
	emu_switch(&emu_fib_sp[emu_cur], emu_sched_sp); /* never resumed */
}

static void emu_fiber_new(int t)
{
	/* as if emu_switch had saved 6 registers with emu_entry as its return
	 * address, which then starts with the stack aligned as after a call */
	uintptr_t top = ((uintptr_t)(emu_stacks + (size_t)(t + 1) * EMU_STACK)) & ~(uintptr_t)15;
	void **sp = (void **)(top - 8);
	*sp = 0;                         /* emu_entry's return address: none */
	*--sp = (void *)emu_entry;
	for (int i = 0; i < 6; i++)
		*--sp = 0;
	emu_fib_sp[t] = sp;
}

static void emu_fiber_run(int t) { emu_switch(&emu_sched_sp, emu_fib_sp[t]); }
#else
static ucontext_t emu_sched, emu_fib[EMU_THREADS];

static inline void __syncthreads(void) { swapcontext(&emu_fib[emu_cur], &emu_sched); }

static void emu_entry(void)
{
	(*emu_job)();
	emu_done[emu_cur] = 1; /* returns to uc_link: the scheduler */
}

static void emu_fiber_new(int t)
{
	getcontext(&emu_fib[t]);
	emu_fib[t].uc_stack.ss_sp = emu_stacks + (size_t)t * EMU_STACK;
	emu_fib[t].uc_stack.ss_size = EMU_STACK;
	emu_fib[t].uc_link = &emu_sched;
	makecontext(&emu_fib[t], emu_entry, 0);
}

static void emu_fiber_run(int t) { swapcontext(&emu_sched, &emu_fib[t]); }
#endif

/* Kernels launched so far, by every file of the backend: tests/unit/cuda.c
 * counts a call's (its passes over memory; on a GPU, its launches). */
extern "C" {
__attribute__((weak)) unsigned long cudaemu_launches;
}

__attribute__((unused)) static void emu_launch(dim3 g, dim3 b, const std::function<void()> &job)
{
	cudaemu_launches++;
	if (b.x * b.y * b.z != EMU_THREADS || g.y != 1 || g.z != 1) {
		fprintf(stderr, "cudaemu: launch of %ux%u blocks of %ux%u threads: only 1-D grids of "
				"%d threads are emulated\n", g.x, g.y, b.x, b.y, EMU_THREADS);
		abort();
	}
	if (!emu_stacks && !(emu_stacks = (char *)malloc((size_t)EMU_THREADS * EMU_STACK)))
		abort();
	gridDim = g;
	blockDim = b;
	emu_job = &job;
	for (unsigned blk = 0; blk < g.x; blk++) {
		blockIdx = dim3(blk, 0, 0);
		for (int t = 0; t < EMU_THREADS; t++) {
			emu_fiber_new(t);
			emu_done[t] = 0;
		}
		/* rounds: each fiber runs to its next barrier or its end */
		for (int left = EMU_THREADS; left;) {
			int ended = 0;
			for (int t = 0; t < EMU_THREADS; t++) {
				if (emu_done[t])
					continue;
				emu_cur = t;
				threadIdx = dim3(t % b.x, t / b.x, 0);
				emu_fiber_run(t);
				ended += emu_done[t];
			}
			if (ended && ended != left) {
				fprintf(stderr, "cudaemu: __syncthreads() not reached by every thread\n");
				abort();
			}
			left -= ended;
		}
	}
}

/* ---- the runtime API the backend calls ---- */
typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorMemoryAllocation = 2 };
typedef struct emu_stream *cudaStream_t;
typedef struct emu_event *cudaEvent_t;
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
enum { cudaStreamNonBlocking = 1, cudaEventDisableTiming = 2 };

struct cudaDeviceProp {
	char name[256];
	int major, minor;
	size_t totalGlobalMem;
};
struct cudaFuncAttributes {
	int maxThreadsPerBlock;
};

static inline const char *cudaGetErrorString(cudaError_t e)
{
	return e == cudaErrorMemoryAllocation ? "out of memory" : e ? "emulated error" : "no error";
}
static inline cudaError_t cudaGetLastError(void) { return cudaSuccess; }
static inline cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return cudaSuccess; }
static inline cudaError_t cudaDriverGetVersion(int *v) { *v = 13000; return cudaSuccess; }
static inline cudaError_t cudaRuntimeGetVersion(int *v) { *v = 13000; return cudaSuccess; }
static inline cudaError_t cudaSetDevice(int d) { return cudaSuccess; }
static inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d)
{
	memset(p, 0, sizeof *p);
	strcpy(p->name, "CPU emulation (tests/cudaemu)");
	p->major = 9;
	p->totalGlobalMem = (size_t)1 << 30;
	return cudaSuccess;
}
template <typename F> static inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *a, F f)
{
	a->maxThreadsPerBlock = 1024;
	return cudaSuccess;
}
static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned f)
{
	*s = (cudaStream_t)malloc(1);
	return cudaSuccess;
}
static inline cudaError_t cudaStreamDestroy(cudaStream_t s) { free(s); return cudaSuccess; }
static inline cudaError_t cudaStreamSynchronize(cudaStream_t s) { return cudaSuccess; }
/* Events hold the time they were recorded at: the work before them is
 * done by then (launches run when made). */
struct emu_event {
	double t;
};
static inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned f)
{
	*e = (cudaEvent_t)calloc(1, sizeof **e);
	return cudaSuccess;
}
static inline cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
static inline cudaError_t cudaEventDestroy(cudaEvent_t e) { free(e); return cudaSuccess; }
static inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	e->t = (double)t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
	return cudaSuccess;
}
static inline cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
	*ms = (float)(b->t - a->t);
	return cudaSuccess;
}
static inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned f)
{
	return cudaSuccess;
}
static inline cudaError_t cudaEventSynchronize(cudaEvent_t e) { return cudaSuccess; }
static inline cudaError_t cudaEventQuery(cudaEvent_t e) { return cudaSuccess; }
/* Memory poisoned with NaN, as a GPU's is garbage: kernels must write
 * everything they are trusted to. */
static inline cudaError_t cudaMalloc(void **p, size_t n)
{
	*p = malloc(n ? n : 1);
	if (!*p)
		return cudaErrorMemoryAllocation;
	memset(*p, 0xff, n);
	return cudaSuccess;
}
static inline cudaError_t cudaFree(void *p) { free(p); return cudaSuccess; }
static inline cudaError_t cudaMallocHost(void **p, size_t n) { return cudaMalloc(p, n); }
static inline cudaError_t cudaFreeHost(void *p) { free(p); return cudaSuccess; }
static inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k,
					  cudaStream_t st)
{
	memmove(d, s, n);
	return cudaSuccess;
}

#endif
