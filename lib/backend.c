/*
 * backend.c - which math backends this build has (see dp_backend.h).
 */
#include "dp_backend.h"

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

const dp_backend *dp_backend_default(void)
{
	return backends[0];
}

const dp_backend *dp_backend_find(const char *name)
{
	for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
		if (strcmp(backends[i]->name, name) == 0)
			return backends[i];
	return NULL;
}
