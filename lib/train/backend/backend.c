/*
 * backend.c - which math backends this build has, and what the build is
 * (see dp_backend.h).
 */
#include "conv_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DP_BACKEND_cuda
extern const dp_backend dp_backend_cuda;
/* cuda_runtime_api.h, which is C++ here; weak: absent in the emulated runtime of the tests */
int cudaRuntimeGetVersion(int *version) __attribute__((weak));
#endif
char *openblas_get_config(void); /* "OpenBLAS 0.3.21 DYNAMIC_ARCH ... Haswell ..." */
char *openblas_get_corename(void); /* "Haswell": the kernels it chose for this CPU */
const char *cpu_dnnl_version(int isa_too); /* cpu_dnnl.c: "oneDNN 2.6.3", NULL without */

#ifndef DP_BUILD_CFLAGS
#define DP_BUILD_CFLAGS "?"
#endif

static const dp_backend *const backends[] = {
#ifdef DP_BACKEND_cuda
	&dp_backend_cuda,
#endif
	&dp_backend_cpu,
};

const dp_backend *dp_backend_find(const char *name)
{
	for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
		if (strcmp(backends[i]->name, name) == 0)
			return backends[i];
	return NULL;
}

char *dp_backend_conv_algos_text(const dp_backend *be, dp_bectx *ctx)
{
	char *t = NULL;
	for (size_t len = 4096; be->conv_algos && len <= (1u << 24); len *= 2) {
		free(t);
		if (!(t = calloc(len, 1)))
			return NULL;
		if (be->conv_algos(ctx, t, len) >= 0)
			return t;
	}
	free(t);
	return NULL;
}

int be_conv_algos_keep(char **kept, const char *algos)
{
	char *t = algos ? strdup(algos) : NULL;
	if (algos && !t)
		return -1;
	free(*kept);
	*kept = t;
	return 0;
}

const char *dp_build(void)
{
	static char id[256];
	if (id[0])
		return id;
	/* the BLAS library's name and version, without the kernels it chose
	 * for this CPU (ranks on different CPUs run the same build) */
	const char *cfg = openblas_get_config();
	int n = 0, sp = 0;
	while (cfg && cfg[n] && n < 64 && !(cfg[n] == ' ' && ++sp == 2))
		n++;
	char cuda[48] = "";
#ifdef DP_BACKEND_cuda
	int rt = 0;
	if (cudaRuntimeGetVersion)
		cudaRuntimeGetVersion(&rt);
	snprintf(cuda, sizeof cuda, "cuda (CUDA runtime %d.%d), ", rt / 1000, rt % 1000 / 10);
#endif
	const char *dn = cpu_dnnl_version(0);
	snprintf(id, sizeof id, "dptools %s; %s %s; CFLAGS %s; backends %scpu (%.*s%s%s)", dp_version(),
#ifdef __clang__
		 "clang",
#else
		 "gcc",
#endif
		 __VERSION__, DP_BUILD_CFLAGS, cuda, n, cfg ? cfg : "", dn ? ", " : "", dn ? dn : "");
	return id;
}

const char *dp_blas_kernels_better(void)
{
	/* the kernels of OpenBLAS's DYNAMIC_ARCH list older than AVX2 */
	static const char *const old[] = {"Prescott", "Core2",     "Penryn",   "Dunnington",
					  "Nehalem",  "Sandybridge", "Atom",   "Nano",
					  "Katmai",   "Coppermine", "Northwood", "Banias",
					  "Athlon",   "Opteron",   "Opteron_SSE3", "Barcelona",
					  "Bobcat",   "Bulldozer", "Piledriver", "Steamroller",
					  "Excavator"};
	const char *core = openblas_get_corename();
	int older = 0;
	for (size_t i = 0; core && i < sizeof old / sizeof old[0]; i++)
		older |= !strcmp(core, old[i]);
	if (!older)
		return NULL;
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
		return "SkylakeX";
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		return "Haswell";
	return NULL;
}

/* DP_BACKEND names a backend this build lacks: open() says so. */
static int missing_open(dp_bectx **ctx, const dp_backend_opts *o, char *desc, size_t desc_len,
			dp_err *e)
{
	char have[64] = "";
	for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++) {
		if (i)
			strcat(have, ", ");
		strncat(have, backends[i]->name, sizeof have - strlen(have) - 8);
	}
	const char *v = dp_setting("DP_BACKEND");
	return dp_seterr(e, DP_EARG, "DP_BACKEND=%.64s: not in this build (it has %s%s)", v ? v : "",
			 have, strcmp(v ? v : "", "cuda") ? "" : "; build with make BACKEND=cuda");
}

static const dp_backend missing = {.name = "missing", .open = missing_open};

const dp_backend *dp_backend_default(void)
{
	const char *v = dp_setting("DP_BACKEND");
	if (v && *v) {
		const dp_backend *b = dp_backend_find(v);
		return b ? b : &missing;
	}
	return backends[0];
}

int dp_precision_parse(const char *s)
{
	if (!strcmp(s, "fp32") || !strcmp(s, "float32"))
		return DP_PREC_FP32;
	if (!strcmp(s, "tf32"))
		return DP_PREC_TF32;
	if (!strcmp(s, "bf16") || !strcmp(s, "bfloat16"))
		return DP_PREC_BF16;
	return -1;
}

const char *dp_precision_name(int p)
{
	return p == DP_PREC_TF32 ? "tf32" : p == DP_PREC_BF16 ? "bf16" : "fp32";
}
