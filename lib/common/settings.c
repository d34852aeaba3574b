/*
 * settings.c - what libdp takes from its environment (dp.h, "Settings",
 * "Ranks without linking MPI"): the DP_* overrides a program hands over,
 * the launchers' rank variables.
 */
#define _GNU_SOURCE
#include "dp.h"
#include "dp_rng.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- Settings ---------------------------------------------------------- */

#define MAX_SETTINGS 32
static struct {
	char *name, *value;
} settings[MAX_SETTINGS];
static int nsettings;

int dp_setting_set(const char *name, const char *value)
{
	for (int i = 0; i < nsettings; i++)
		if (!strcmp(settings[i].name, name)) {
			char *v = value ? strdup(value) : NULL;
			if (value && !v)
				return DP_ENOMEM;
			free(settings[i].value);
			settings[i].value = v;
			return DP_OK;
		}
	if (nsettings == MAX_SETTINGS)
		return DP_ELIMIT;
	char *n = strdup(name), *v = value ? strdup(value) : NULL;
	if (!n || (value && !v)) {
		free(n);
		free(v);
		return DP_ENOMEM;
	}
	settings[nsettings].name = n;
	settings[nsettings++].value = v;
	return DP_OK;
}

const char *dp_setting(const char *name)
{
	for (int i = 0; i < nsettings; i++)
		if (!strcmp(settings[i].name, name))
			return settings[i].value;
	return NULL;
}

void dp_settings_from_env(void)
{
	extern char **environ;
	for (char **e = environ; e && *e; e++) {
		const char *eq = strchr(*e, '=');
		if (strncmp(*e, "DP_", 3) != 0 || !eq || eq - *e > 63)
			continue;
		char name[64];
		memcpy(name, *e, (size_t)(eq - *e));
		name[eq - *e] = 0;
		dp_setting_set(name, eq + 1);
	}
}

const char *dp_env(const char *name)
{
	const char *v = getenv(name);
	return v && *v ? v : NULL;
}

const char *dp_tmpdir(const char *dir)
{
	if (dir && *dir)
		return dir;
	return dp_env("TMPDIR") ? dp_env("TMPDIR") : "/tmp";
}

/* ---- Ranks ------------------------------------------------------------- */

static int env_int(const char *name, int *out)
{
	const char *s = dp_env(name);
	if (!s)
		return 0;
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || *end || v < 0 || v > INT_MAX)
		return 0;
	*out = (int)v;
	return 1;
}

void dp_rank_size(int *rank, int *size)
{
	static const char *const pairs[][2] = {
		{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
		{"PMI_RANK", "PMI_SIZE"},
		{"PMIX_RANK", "PMI_SIZE"},
		{"SLURM_PROCID", "SLURM_NTASKS"},
	};
	int r = -1, s = -1;
	for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
		int a, b;
		if (env_int(pairs[i][0], &a) && env_int(pairs[i][1], &b) && b > 0 && a < b) {
			r = a;
			s = b;
			break;
		}
	}
	if (*rank < 0)
		*rank = r >= 0 ? r : 0;
	if (*size < 0)
		*size = s > 0 ? s : 1;
}

/* ---- Threads ------------------------------------------------------------ */

/* The container's CPU limit (cgroup v2 cpu.max "QUOTA PERIOD"), rounded
 * up; 0 when none. */
static int cgroup_cpus(void)
{
	FILE *f = fopen("/sys/fs/cgroup/cpu.max", "re");
	long long q = 0, p = 0;
	char word[32] = "";
	if (!f)
		return 0;
	int n = fscanf(f, "%31s %lld", word, &p);
	fclose(f);
	if (n != 2 || !strcmp(word, "max") || p <= 0 || (q = atoll(word)) <= 0)
		return 0;
	return (int)((q + p - 1) / p);
}

int dp_default_threads(int *cpus, int *local)
{
	const char *forced = dp_setting("DP_THREADS");
	int loc = 0, size = -1, rank = -1, n;
	if (forced && (n = atoi(forced)) > 0) { /* nothing to say where it came from */
		if (cpus)
			*cpus = 0;
		if (local)
			*local = 0;
		return n > 256 ? 256 : n;
	}
	long online = sysconf(_SC_NPROCESSORS_ONLN);
	cpu_set_t set;
	int mine = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int)online;
	int quota = cgroup_cpus();
	if (online < 1)
		online = 1;
	if (mine < 1)
		mine = 1;
	if (quota > 0 && quota < mine)
		mine = quota;
	if (!env_int("OMPI_COMM_WORLD_LOCAL_SIZE", &loc) && !env_int("MPI_LOCALNRANKS", &loc) &&
	    !env_int("SLURM_NTASKS_PER_NODE", &loc)) {
		dp_rank_size(&rank, &size);
		loc = size; /* a launcher that says nothing of hosts: all on this one */
	}
	if (loc < 1)
		loc = 1;
	/* the host's CPUs shared by its ranks, and no more than this rank may use
	 * (mpirun --bind-to core gives each its own) */
	n = (int)(online / loc);
	if (mine < n)
		n = mine;
	if (n < 1)
		n = 1;
	if (cpus)
		*cpus = mine;
	if (local)
		*local = loc;
	return n > 256 ? 256 : n;
}

/* The value of variable name[0..len) for dp_expand, or NULL. */
