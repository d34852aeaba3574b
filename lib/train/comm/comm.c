/*
 * comm.c - dp_comm (dp_comm.h): the job of one process, the gradient
 * buckets, staging through host memory, the settings check and the
 * timeline.  Every call into MPI is in the mpi*.c files.
 *
 * In a job of one every collective leaves its buffer as it is: that path
 * is the reference for what each call must leave behind.
 */
#define _GNU_SOURCE
#include "comm_impl.h"
#include "dp_hash.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int dp_comm_launched(void)
{
	const char *v = dp_setting("DP_COMM");
	if (v && !strcmp(v, "mpi"))
		return 1;
	if (v && (!strcmp(v, "single") || !strcmp(v, "none")))
		return 0;
	return dp_env("OMPI_COMM_WORLD_SIZE") || dp_env("PMIX_RANK") || dp_env("PMI_SIZE");
}

/* How many processes the launcher of this one started, by its own
 * variables (0: none known), and its name.  mpirun's count is trusted
 * first: under mpirun inside a Slurm job the SLURM_ variables count
 * mpirun's daemons, not the ranks. */
static long launched_tasks(const char **who)
{
	static const char *const vars[][2] = {
		{"OMPI_COMM_WORLD_SIZE", "mpirun"},
		{"PMI_SIZE", "the launcher (PMI_SIZE)"},
		{"SLURM_STEP_NUM_TASKS", "srun"}, /* a step's tasks; not set in a batch script */
		{"WORLD_SIZE", "torchrun"},       /* PyTorch's launchers: RANK, LOCAL_RANK too */
	};
	for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
		const char *v = dp_env(vars[i][0]);
		if (!v)
			continue;
		*who = dp_env("SLURM_STEP_ID") && i > 0 && i < 3 ? "srun" : vars[i][1];
		return strtol(v, NULL, 10);
	}
	return 0;
}

/* A job of one whose launcher started several: the tasks would each train
 * alone, racing for the same outputs.  DP_COMM=single says that is meant. */
static int check_alone(dp_comm *c, dp_err *e)
{
	const char *who = "", *v = dp_setting("DP_COMM");
	long n = launched_tasks(&who);
	if (c->size > 1 || n <= 1 || (v && (!strcmp(v, "single") || !strcmp(v, "none"))))
		return DP_OK;
	const char *fix = !strcmp(who, "srun")
				  ? "use srun --mpi=pmix"
			  : !strcmp(who, "mpirun")
				  ? "this program was built with another MPI library than this mpirun's"
			  : !strcmp(who, "torchrun")
				  ? "dp-train's ranks are MPI's, not torchrun's (RANK, WORLD_SIZE): start it "
				    "with mpirun -np N, or srun --mpi=pmix"
				  : "start it with the mpirun of its MPI library, or srun --mpi=pmix";
	return dp_seterr(e, DP_EARG,
			 "%s started %ld %s but %s: %s (see DISTRIBUTED in dp-train(1))",
			 who, n, strcmp(who, "srun") ? "processes" : "tasks",
			 c->mpi ? "MPI sees 1" : "none of them joined an MPI job", fix);
}

void dp_comm_conf_defaults(dp_comm_conf *conf)
{
	memset(conf, 0, sizeof *conf);
	conf->overlap = 1;
	conf->bucket_bytes = 1u << 20;
	conf->stall_warn = 60;
}

dp_comm *dp_comm_open(const dp_backend *be, dp_bectx *ctx, dp_err *e)
{
	dp_comm *c = dp_zalloc(sizeof *c, e);
	if (!c)
		return NULL;
	c->be = be;
	c->ctx = ctx;
	c->host = !be || (be->caps & DP_CAP_HOST_MEMORY);
	c->size = 1;
	snprintf(c->desc, sizeof c->desc, "single process");
	snprintf(c->lib, sizeof c->lib, "none");
	dp_comm_conf_defaults(&c->conf);
	pthread_mutex_init(&c->smu, NULL);
	pthread_mutex_init(&c->tmu, NULL);
	if ((dp_comm_launched() && (comm_mpi_open(c, e) < 0 || comm_nccl_open(c, e) < 0)) ||
	    check_alone(c, e) < 0) {
		dp_comm_close(c);
		return NULL;
	}
	return c;
}

dp_comm *dp_comm_split(dp_comm *c, int color, int key, dp_err *e)
{
	dp_comm *g = dp_zalloc(sizeof *g, e);
	if (!g)
		return NULL;
	g->be = c->be;
	g->ctx = c->ctx;
	g->host = c->host;
	g->size = 1;
	g->conf = c->conf;
	g->conf.overlap = 0; /* one thread in MPI: the caller's */
	snprintf(g->desc, sizeof g->desc, "single process");
	snprintf(g->lib, sizeof g->lib, "%s", c->lib);
	pthread_mutex_init(&g->smu, NULL);
	pthread_mutex_init(&g->tmu, NULL);
	if (c->mpi && comm_mpi_split(c, g, color, key, e) < 0) {
		dp_comm_close(g);
		return NULL;
	}
	return g;
}

static int peer_ok(dp_comm *c, int r, dp_err *e)
{
	if (r < 0 || r >= c->size || r == c->rank || !c->mpi)
		return dp_seterr(e, DP_EARG, "comm: a message between rank %d and rank %d of %d",
				 c->rank, r, c->size);
	return DP_OK;
}

int dp_comm_send(dp_comm *c, const void *buf, size_t bytes, int to, int tag, dp_err *e)
{
	if (peer_ok(c, to, e) < 0)
		return DP_EARG;
	void *h = malloc(bytes ? bytes : 1);
	if (!h)
		return dp_seterr(e, DP_ENOMEM, "out of memory for a message of %zu bytes", bytes);
	memcpy(h, buf, bytes);
	return comm_mpi_send(c, h, bytes, to, tag, e);
}

int dp_comm_recv(dp_comm *c, void *buf, size_t bytes, int from, int tag, const char *what,
		 dp_err *e)
{
	if (peer_ok(c, from, e) < 0)
		return DP_EARG;
	return comm_mpi_recv(c, buf, bytes, from, tag, what, e);
}

int dp_comm_send_wait(dp_comm *c, dp_err *e) { return c->mpi ? comm_mpi_send_wait(c, e) : DP_OK; }

void dp_comm_close(dp_comm *c)
{
	if (!c)
		return;
	comm_nccl_close(c);
	if (c->mpi)
		comm_mpi_close(c);
	pthread_mutex_destroy(&c->smu);
	pthread_mutex_destroy(&c->tmu);
	free(c->hgrads);
	free(c->ev);
	free(c);
}

int dp_comm_rank(const dp_comm *c) { return c->rank; }
int dp_comm_size(const dp_comm *c) { return c->size; }
const char *dp_comm_desc(const dp_comm *c) { return c->desc; }
const char *dp_comm_library(const dp_comm *c) { return c->lib; }

void dp_comm_abort(dp_comm *c, int code)
{
	if (c && c->mpi)
		comm_mpi_abort(c, code);
	exit(code);
}

/* The names of the wire formats (DP_WIRE_*) and of the algorithms
 * (DP_ALLREDUCE_*), each its own first, then the others parse takes. */
static const char *const wire_names[3][4] = {
	[DP_WIRE_F32] = {"fp32", "f32", "float32", "float"},
	[DP_WIRE_BF16] = {"bf16", "bfloat16"},
	[DP_WIRE_F16] = {"fp16", "f16", "float16", "half"},
};
static const char *const algo_names[3][4] = {
	[DP_ALLREDUCE_RING] = {"ring"},
	[DP_ALLREDUCE_HIER] = {"hierarchical", "hier"},
	[DP_ALLREDUCE_MPI] = {"mpi"},
};

/* The row of names that holds s; -1: none. */
static int names_find(const char *const names[3][4], const char *s)
{
	for (int i = 0; i < 3; i++)
		for (int k = 0; k < 4 && names[i][k]; k++)
			if (!strcmp(s, names[i][k]))
				return i;
	return -1;
}

int dp_comm_wire_parse(const char *s) { return names_find(wire_names, s); }
int dp_comm_algo_parse(const char *s) { return names_find(algo_names, s); }

/* Their first names (out of range: the first row's, fp32 and ring). */
const char *dp_comm_wire_name(int wire) { return wire_names[wire >= 0 && wire < 3 ? wire : 0][0]; }
const char *dp_comm_algo_name(int algo) { return algo_names[algo >= 0 && algo < 3 ? algo : 0][0]; }

int dp_comm_configure(dp_comm *c, const dp_comm_conf *conf, dp_err *e)
{
	if (conf->stall_warn < 0 || conf->stall_abort < 0)
		return dp_seterr(e, DP_EARG, "comm: negative stall time");
	if (conf->wire < DP_WIRE_F32 || conf->wire > DP_WIRE_F16 || conf->algo < DP_ALLREDUCE_RING ||
	    conf->algo > DP_ALLREDUCE_MPI)
		return dp_seterr(e, DP_EARG, "comm: no such wire format or algorithm");
	if (conf->algo == DP_ALLREDUCE_MPI && conf->wire != DP_WIRE_F32)
		return dp_seterr(e, DP_EARG, "the MPI allreduce carries float32 only (%s needs the "
				 "ring or the hierarchical allreduce)", dp_comm_wire_name(conf->wire));
	if (c->nccl && (conf->wire != DP_WIRE_F32 || conf->algo != DP_ALLREDUCE_RING))
		return dp_seterr(e, DP_EARG, "gradients go GPU to GPU through NCCL, which picks its "
				 "own algorithm and sends float32: no %s %s allreduce there",
				 dp_comm_wire_name(conf->wire), dp_comm_algo_name(conf->algo));
	if (c->in_step)
		return dp_seterr(e, DP_EARG, "comm: configure inside a step");
	c->conf = *conf;
	if (!c->conf.bucket_bytes)
		c->conf.bucket_bytes = 1u << 20;
	return c->mpi ? comm_mpi_configure(c, e) : DP_OK;
}

/* ---- collectives ----------------------------------------------------------- */

/* A host buffer for n floats of (dev) memory: the memory itself on the
 * CPU, else the staging buffer. */
static float *staging(dp_comm *c, size_t n, dp_err *e)
{
	if (n > c->hcap) {
		float *p = realloc(c->hgrads, n * sizeof *p);
		if (!p) {
			dp_seterr(e, DP_ENOMEM, "out of memory for %zu floats of staging", n);
			return NULL;
		}
		c->hgrads = p;
		c->hcap = n;
	}
	return c->hgrads;
}

int dp_comm_allreduce_mean(dp_comm *c, float *buf, size_t n, dp_err *e)
{
	if (c->size == 1 || !n)
		return DP_OK;
	if (c->nccl)
		return comm_nccl_allreduce_mean(c, buf, n, e);
	float *h = buf;
	if (!c->host) {
		if (!(h = staging(c, n, e)))
			return DP_ENOMEM;
		c->be->download(c->ctx, h, buf, n * sizeof(float));
	}
	int rc = comm_mpi_allreduce_sum(c, h, n, COMM_F32, "average", e);
	if (rc < 0)
		return rc;
	float s = 1.0f / (float)c->size;
	for (size_t i = 0; i < n; i++)
		h[i] *= s;
	if (!c->host)
		c->be->upload(c->ctx, buf, h, n * sizeof(float));
	return DP_OK;
}

int dp_comm_allreduce_sum(dp_comm *c, double *v, size_t n, dp_err *e)
{
	if (c->size == 1 || !n)
		return DP_OK;
	/* within a step (--sync-bn's sums in the backward pass) the buckets
	 * handed to the communication thread go first: one thread in MPI at a
	 * time, and the same order of collectives on every rank */
	if (c->in_step && !c->nccl) {
		int rc = comm_mpi_grads_drain(c, e);
		if (rc < 0)
			return rc;
	}
	return comm_mpi_allreduce_sum(c, v, n, COMM_F64, "sum", e);
}

int dp_comm_bcast_host(dp_comm *c, void *buf, size_t bytes, int root, dp_err *e)
{
	if (root < 0 || root >= c->size)
		return dp_seterr(e, DP_EARG, "comm: broadcast from rank %d of %d", root, c->size);
	if (c->size == 1 || !bytes)
		return DP_OK;
	return comm_mpi_bcast(c, buf, bytes, root, "broadcast", e);
}

int dp_comm_bcast(dp_comm *c, void *buf, size_t bytes, int root, dp_err *e)
{
	if (c->host || c->size == 1 || !bytes)
		return dp_comm_bcast_host(c, buf, bytes, root, e);
	if (c->nccl)
		return root >= 0 && root < c->size
			       ? comm_nccl_bcast(c, buf, bytes, root, e)
			       : dp_seterr(e, DP_EARG, "comm: broadcast from rank %d of %d", root, c->size);
	float *h = staging(c, (bytes + sizeof(float) - 1) / sizeof(float), e);
	if (!h)
		return DP_ENOMEM;
	if (c->rank == root)
		c->be->download(c->ctx, h, buf, bytes);
	int rc = dp_comm_bcast_host(c, h, bytes, root, e);
	if (rc >= 0 && c->rank != root)
		c->be->upload(c->ctx, buf, h, bytes);
	return rc;
}

int dp_comm_allgather(dp_comm *c, const void *mine, void *all, size_t bytes, dp_err *e)
{
	if (c->size == 1) {
		memmove(all, mine, bytes);
		return DP_OK;
	}
	return comm_mpi_allgather(c, mine, all, bytes, "allgather", e);
}

/* The first line where a and b differ, as "line" (into buf). */
static const char *first_diff(const char *a, const char *b, char *wa, char *wb, size_t len)
{
	for (;;) {
		size_t la = strcspn(a, "\n"), lb = strcspn(b, "\n");
		if (la != lb || memcmp(a, b, la)) {
			snprintf(wa, len, "%.*s", (int)la, a);
			snprintf(wb, len, "%.*s", (int)lb, b);
			return wa;
		}
		if (!a[la] || !b[lb]) {
			snprintf(wa, len, "%s", a[la] ? a + la + 1 : "(nothing more)");
			snprintf(wb, len, "%s", b[lb] ? b + lb + 1 : "(nothing more)");
			wa[strcspn(wa, "\n")] = wb[strcspn(wb, "\n")] = 0;
			return wa;
		}
		a += la + 1;
		b += lb + 1;
	}
}

int dp_comm_check_same(dp_comm *c, const char *text, dp_err *e)
{
	if (c->size == 1)
		return DP_OK;
	uint64_t h = dp_hash64(text, strlen(text));
	uint64_t *all = malloc((size_t)c->size * sizeof *all);
	size_t *lens = malloc((size_t)c->size * sizeof *lens);
	if (!all || !lens) {
		free(all);
		free(lens);
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	}
	int rc = comm_mpi_allgather(c, &h, all, sizeof h, "settings check", e);
	int same = 1;
	for (int r = 1; rc >= 0 && r < c->size; r++)
		same &= all[r] == all[0];
	if (rc < 0 || same) {
		free(all);
		free(lens);
		return rc;
	}
	char *texts = NULL;
	rc = comm_mpi_gather(c, text, strlen(text) + 1, &texts, lens, "settings check", e);
	if (rc >= 0 && c->rank == 0) {
		char msg[900], wa[200], wb[200];
		size_t m = (size_t)snprintf(msg, sizeof msg, "settings differ between ranks");
		const char *t0 = texts, *t = texts;
		int shown = 0, more = 0;
		for (int r = 0; r < c->size; t += lens[r], r++) {
			if (all[r] == all[0])
				continue;
			if (shown == 3) {
				more++;
				continue;
			}
			first_diff(t, t0, wa, wb, sizeof wa);
			m += (size_t)snprintf(msg + m, m < sizeof msg ? sizeof msg - m : 0,
					      "%s rank %d has '%s' where rank 0 has '%s'",
					      shown ? ";" : ":", r, wa, wb);
			shown++;
		}
		if (more)
			snprintf(msg + (m < sizeof msg ? m : sizeof msg - 1),
				 m < sizeof msg ? sizeof msg - m : 1, "; and %d more rank%s", more,
				 more == 1 ? "" : "s");
		rc = dp_seterr(e, DP_EARG, "%s (start every rank with the same options and the "
				 "same dp-train)", msg);
	} else if (rc >= 0) {
		rc = dp_seterr(e, DP_EARG, "settings differ between ranks (rank 0 says how)");
	}
	free(texts);
	free(all);
	free(lens);
	return rc;
}

/* ---- gradients ------------------------------------------------------------- */

int dp_comm_grads_begin(dp_comm *c, float *grads, size_t n, dp_err *e)
{
	if (c->in_step)
		return dp_seterr(e, DP_EARG, "comm: a step begun twice");
	if (c->size > 1 && !c->host && !c->nccl && !staging(c, n, e))
		return DP_ENOMEM;
	c->grads = grads;
	c->n = c->ready = c->flushed = n;
	c->in_step = 1;
	c->t_begin = dp_now();
	return DP_OK;
}

/* Hand [lo, hi) of the gradients to the reduction. */
static int submit(dp_comm *c, size_t lo, size_t hi, dp_err *e)
{
	float *buf = c->grads;
	if (c->nccl) {
		c->st.calls++;
		c->st.bytes += (hi - lo) * sizeof(float);
		return comm_nccl_submit(c, buf, lo, hi, e);
	}
	if (!c->host) {
		buf = c->hgrads;
		c->be->download(c->ctx, buf + lo, c->grads + lo, (hi - lo) * sizeof(float));
	}
	c->st.calls++;
	c->st.bytes += (hi - lo) * sizeof(float);
	return comm_mpi_grads_submit(c, buf, lo, hi, e);
}

int dp_comm_grads_ready(dp_comm *c, size_t off, size_t count, dp_err *e)
{
	if (!c->in_step)
		return dp_seterr(e, DP_EARG, "comm: gradients ready outside a step");
	if (off + count != c->ready || off > c->ready)
		return dp_seterr(e, DP_EARG,
				 "comm: gradient range %zu+%zu does not end where the ready ones "
				 "begin (%zu of %zu)",
				 off, count, c->ready, c->n);
	c->ready = off;
	if (c->size > 1 && c->conf.overlap && off > 0 &&
	    (c->flushed - off) * sizeof(float) >= c->conf.bucket_bytes) {
		int rc = submit(c, off, c->flushed, e);
		c->flushed = off;
		if (rc < 0)
			return rc;
	}
	return DP_OK;
}

int dp_comm_grads_wait(dp_comm *c, dp_err *e)
{
	if (!c->in_step)
		return dp_seterr(e, DP_EARG, "comm: wait outside a step");
	c->in_step = 0;
	if (c->ready != 0)
		return dp_seterr(e, DP_EARG, "comm: gradients [0, %zu) of %zu never reported ready",
				 c->ready, c->n);
	double t = dp_now();
	int rc = DP_OK;
	if (c->size > 1) {
		if (c->flushed > 0)
			rc = submit(c, 0, c->flushed, e);
		int r2 = c->nccl ? comm_nccl_drain(c, e) : comm_mpi_grads_drain(c, e);
		if (rc >= 0)
			rc = r2;
		if (rc >= 0 && !c->host && !c->nccl)
			c->be->upload(c->ctx, c->grads, c->hgrads, c->n * sizeof(float));
	}
	double t1 = dp_now();
	c->st.steps++;
	c->st.wait_time += t1 - t;
	c->st.step_time += t1 - c->t_begin;
	if (c->size > 1)
		dp_comm_event(c, "wait", 1, t, t1);
	return rc;
}

int dp_comm_hook(void *c, int layer, size_t off, size_t count, dp_err *e)
{
	return dp_comm_grads_ready(c, off, count, e);
}

void dp_comm_stats_get(const dp_comm *c, dp_comm_stats *st)
{
	pthread_mutex_lock((pthread_mutex_t *)&c->smu);
	*st = c->st;
	pthread_mutex_unlock((pthread_mutex_t *)&c->smu);
}

/* ---- timeline -------------------------------------------------------------------- */

int dp_comm_timeline_start(dp_comm *c, dp_err *e)
{
	double z = 0;
	int rc = dp_comm_allreduce_sum(c, &z, 1, e); /* everyone here: a common origin */
	if (rc < 0)
		return rc;
	c->t0 = dp_now();
	c->trace = 1;
	return DP_OK;
}

void dp_comm_event(dp_comm *c, const char *name, int tid, double t0, double t1)
{
	if (!c->trace)
		return;
	pthread_mutex_lock(&c->tmu);
	if (c->nev == c->cap && c->cap < (1u << 24))
		dp_grow(&c->ev, &c->cap, c->nev + 1, sizeof *c->ev); /* else the event is dropped */
	if (c->nev < c->cap)
		c->ev[c->nev++] = (comm_event){name, tid, t0, t1};
	pthread_mutex_unlock(&c->tmu);
}

static const char *category(const char *name)
{
	static const char *const comm[] = {"allreduce", "wait", "agree", "metrics", "average",
					   "broadcast", "recv", NULL};
	static const char *const io[] = {"data", "checkpoint", NULL};
	for (int i = 0; comm[i]; i++)
		if (!strcmp(name, comm[i]))
			return "comm";
	for (int i = 0; io[i]; i++)
		if (!strcmp(name, io[i]))
			return "io";
	return "compute";
}

/* This worker's events as JSON array elements, each followed by ",\n"
 * (malloc'd). */
static char *events_json(dp_comm *c, size_t *len)
{
	static const char *const tname[] = {"", "main", "communication", "thread 3", "thread 4"};
	char *buf = NULL;
	size_t cap = 0;
	FILE *f = open_memstream(&buf, &cap);
	if (!f)
		return NULL;
	fprintf(f,
		"{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}},\n"
		"{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"sort_index\":%d}},\n",
		c->rank, c->rank, c->rank, c->rank);
	int seen[5] = {0};
	pthread_mutex_lock(&c->tmu);
	for (size_t i = 0; i < c->nev; i++) {
		comm_event *v = &c->ev[i];
		int t = v->tid >= 1 && v->tid <= 4 ? v->tid : 4;
		if (!seen[t]++)
			fprintf(f,
				"{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
				"\"args\":{\"name\":\"%s\"}},\n",
				c->rank, v->tid, tname[t]);
		fprintf(f,
			"{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
			"\"ts\":%.3f,\"dur\":%.3f},\n",
			v->name, category(v->name), c->rank, v->tid, (v->t0 - c->t0) * 1e6,
			(v->t1 - v->t0) * 1e6);
	}
	pthread_mutex_unlock(&c->tmu);
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	*len = cap;
	return buf;
}

/* Write a JSON array of the elements in body (each ending ",\n"). */
static int write_trace(const char *path, const char *body, size_t len, dp_err *e)
{
	dp_out o;
	int rc = dp_out_open(&o, path, e);
	if (rc < 0)
		return rc;
	while (len >= 2 && (body[len - 1] == '\n' || body[len - 1] == ','))
		len--;
	if ((rc = dp_write_all(o.fd, "[\n", 2, path, e)) < 0 ||
	    (rc = dp_write_all(o.fd, body, len, path, e)) < 0 ||
	    (rc = dp_write_all(o.fd, "\n]\n", 3, path, e)) < 0) {
		dp_out_abort(&o);
		return rc;
	}
	return dp_out_commit(&o, e);
}

int dp_comm_timeline_write(dp_comm *c, const char *path, dp_err *e)
{
	size_t len = 0;
	char *mine = events_json(c, &len);
	if (!mine)
		return dp_seterr(e, DP_ENOMEM, "out of memory for the timeline");
	int rc;
	if (dp_names_rank(path) || c->size == 1) {
		char rb[16], sb[16];
		snprintf(rb, sizeof rb, "%d", c->rank);
		snprintf(sb, sizeof sb, "%d", c->size);
		const char *vars[] = {"rank", rb, "size", sb, NULL};
		char *p = dp_expand(path, vars);
		rc = p ? write_trace(p, mine, len, e) : dp_seterr(e, DP_ENOMEM, "out of memory");
		free(p);
		free(mine);
		return rc;
	}
	char *all = NULL;
	size_t *lens = malloc((size_t)c->size * sizeof *lens);
	if (!lens) {
		free(mine);
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	}
	rc = comm_mpi_gather(c, mine, len, &all, lens, "timeline", e);
	if (rc >= 0 && c->rank == 0) {
		size_t total = 0;
		for (int r = 0; r < c->size; r++)
			total += lens[r];
		rc = write_trace(path, all, total, e);
	}
	free(all);
	free(lens);
	free(mine);
	return rc;
}
