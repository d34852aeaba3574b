/*
 * backend.c - which math backends this build has (see dp_backend.h).
 */
#include "dp_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DP_BACKEND_cuda
extern const dp_backend dp_backend_cuda;
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
