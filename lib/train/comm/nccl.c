/*
 * nccl.c - gradients summed GPU to GPU with NCCL, under the same
 * dp_comm calls (comm_impl.h): the CUDA build with NCCL found (make
 * BACKEND=cuda prints whether it was; -DDP_WITH_NCCL), in a job of several
 * MPI ranks.  Anything else compiles to the stubs at the end, and dp_comm
 * stages gradients through host memory and MPI (comm.c).
 *
 * Bootstrap (llm.c's, Horovod's): rank 0 draws an ncclUniqueId, MPI
 * broadcasts it, every rank joins the communicator with its own GPU (the
 * backend's, chosen by local rank).  NCCL needs one GPU per rank, so the
 * ranks first compare (host, GPU bus id) over MPI: if any two share a GPU,
 * or any rank has DP_NCCL=0, no rank uses NCCL and all stage through host
 * memory (every rank decides the same from the same gathered table).
 *
 * A step: each bucket that dp_comm hands over as the backward pass
 * produces it is summed in place by ncclAllReduce on NCCL's own stream,
 * after an event on the compute stream says the bucket's gradients are
 * written; grads_wait makes the compute stream wait for NCCL's last
 * reduction.  Nothing waits on the host: the backward pass, the
 * reductions and the optimizer update that follows are queued in order
 * and overlap on the GPU.  NCCL's sums are the same bits on every rank
 * (each element is reduced once, then copied).
 */
#define _GNU_SOURCE
#include "comm_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef DP_WITH_NCCL

#include <cuda_runtime.h>
#include <nccl.h>

/* lib/train/backend/cuda.cu: the stream a context queues its work on, and its GPU */
void *dp_cuda_stream(dp_bectx *c);
int dp_cuda_device(dp_bectx *c);

struct comm_nccl {
	ncclComm_t comm;
	cudaStream_t s;  /* NCCL's */
	cudaStream_t cs; /* the backend's compute stream */
	cudaEvent_t ready, done;
	int dev;
};

static int nccl_err(ncclResult_t r, const char *what, dp_err *e)
{
	return dp_seterr(e, DP_EIO, "%s: NCCL: %s", what, ncclGetErrorString(r));
}

static int cuda_err(cudaError_t r, const char *what, dp_err *e)
{
	return dp_seterr(e, DP_EIO, "%s: CUDA: %s", what, cudaGetErrorString(r));
}

/* What every rank tells the others before NCCL is tried. */
typedef struct nccl_card {
	char host[64];
	char bus[32]; /* the GPU's PCI bus id */
	int32_t want; /* NCCL allowed here (DP_NCCL is not 0) */
	int32_t pad;
} nccl_card;

void comm_nccl_close(dp_comm *c)
{
	struct comm_nccl *n = c->nccl;
	if (!n)
		return;
	cudaSetDevice(n->dev);
	if (n->s)
		cudaStreamSynchronize(n->s);
	if (n->comm)
		ncclCommDestroy(n->comm);
	if (n->ready)
		cudaEventDestroy(n->ready);
	if (n->done)
		cudaEventDestroy(n->done);
	if (n->s)
		cudaStreamDestroy(n->s);
	free(n);
	c->nccl = NULL;
}

int comm_nccl_open(dp_comm *c, dp_err *e)
{
	if (c->size < 2 || !c->be || !(c->be->caps & DP_CAP_NCCL))
		return DP_OK;
	nccl_card me, *all = calloc((size_t)c->size, sizeof *all);
	if (!all)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	memset(&me, 0, sizeof me);
	gethostname(me.host, sizeof me.host - 1);
	int dev = dp_cuda_device(c->ctx);
	if (cudaDeviceGetPCIBusId(me.bus, sizeof me.bus, dev) != cudaSuccess) {
		cudaGetLastError();
		snprintf(me.bus, sizeof me.bus, "device %d", dev);
	}
	const char *v = dp_setting("DP_NCCL");
	me.want = !(v && !strcmp(v, "0"));
	int rc = comm_mpi_allgather(c, &me, all, sizeof me, "NCCL setup", e);
	if (rc < 0) {
		free(all);
		return rc;
	}
	const char *why = NULL;
	for (int i = 0; i < c->size && !why; i++) {
		if (!all[i].want)
			why = "DP_NCCL=0";
		for (int j = 0; j < i && !why; j++)
			if (!strcmp(all[i].host, all[j].host) && !strcmp(all[i].bus, all[j].bus))
				why = "ranks share a GPU";
	}
	free(all);
	size_t dl = strlen(c->desc);
	if (why) {
		snprintf(c->desc + dl, sizeof c->desc - dl, "; gradients through host memory (%s)", why);
		return DP_OK;
	}

	struct comm_nccl *n = calloc(1, sizeof *n);
	if (!n)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	n->dev = dev;
	n->cs = (cudaStream_t)dp_cuda_stream(c->ctx);
	c->nccl = n;
	ncclUniqueId id;
	ncclResult_t r;
	memset(&id, 0, sizeof id);
	if (c->rank == 0 && (r = ncclGetUniqueId(&id)) != ncclSuccess)
		memset(&id, 0xff, sizeof id); /* tell the others, after the broadcast */
	if ((rc = comm_mpi_bcast(c, &id, sizeof id, 0, "NCCL setup", e)) < 0)
		goto fail;
	ncclUniqueId bad; /* all 0xff: rank 0 could not draw one */
	memset(&bad, 0xff, sizeof bad);
	if (!memcmp(&id, &bad, sizeof id)) {
		rc = dp_seterr(e, DP_EIO, "NCCL setup: rank 0 could not create an NCCL id");
		goto fail;
	}
	cudaError_t ce;
	if ((ce = cudaSetDevice(dev)) != cudaSuccess ||
	    (ce = cudaStreamCreateWithFlags(&n->s, cudaStreamNonBlocking)) != cudaSuccess ||
	    (ce = cudaEventCreateWithFlags(&n->ready, cudaEventDisableTiming)) != cudaSuccess ||
	    (ce = cudaEventCreateWithFlags(&n->done, cudaEventDisableTiming)) != cudaSuccess) {
		rc = cuda_err(ce, "NCCL setup", e);
		goto fail;
	}
	if ((r = ncclCommInitRank(&n->comm, c->size, id, c->rank)) != ncclSuccess) {
		n->comm = NULL;
		rc = nccl_err(r, "NCCL setup", e);
		goto fail;
	}
	int ver = 0;
	ncclGetVersion(&ver);
	snprintf(c->desc + dl, sizeof c->desc - dl, "; gradients by NCCL %d.%d.%d", ver / 10000,
		 ver / 100 % 100, ver % 100);
	return DP_OK;
fail:
	comm_nccl_close(c);
	return rc;
}

/* Stream first's work so far comes before stream then's next, through
 * the event ev. */
static int stream_after(cudaEvent_t ev, cudaStream_t first, cudaStream_t then, dp_err *e)
{
	cudaError_t ce;
	if ((ce = cudaEventRecord(ev, first)) != cudaSuccess ||
	    (ce = cudaStreamWaitEvent(then, ev, 0)) != cudaSuccess)
		return cuda_err(ce, "gradients", e);
	return DP_OK;
}

/* The compute stream's work so far comes before NCCL's next call ... */
static int after_compute(struct comm_nccl *n, dp_err *e)
{
	return stream_after(n->ready, n->cs, n->s, e);
}

/* ... and NCCL's work so far before the compute stream's next. */
static int before_compute(struct comm_nccl *n, dp_err *e)
{
	return stream_after(n->done, n->s, n->cs, e);
}

/* After a collective that returned r, issued on NCCL's stream: its error,
 * or the compute stream's next work ordered after it. */
static int issued(struct comm_nccl *n, ncclResult_t r, const char *what, dp_err *e)
{
	return r == ncclSuccess ? before_compute(n, e) : nccl_err(r, what, e);
}

int comm_nccl_submit(dp_comm *c, float *buf, size_t lo, size_t hi, dp_err *e)
{
	struct comm_nccl *n = c->nccl;
	int rc = after_compute(n, e);
	if (rc < 0)
		return rc;
	ncclResult_t r = ncclAllReduce(buf + lo, buf + lo, hi - lo, ncclFloat, ncclSum, n->comm, n->s);
	return r == ncclSuccess ? DP_OK : nccl_err(r, "gradients", e);
}

int comm_nccl_drain(dp_comm *c, dp_err *e)
{
	struct comm_nccl *n = c->nccl;
	ncclResult_t r, async = ncclSuccess;
	if ((r = ncclCommGetAsyncError(n->comm, &async)) != ncclSuccess || async != ncclSuccess)
		return nccl_err(r != ncclSuccess ? r : async, "gradients", e);
	return before_compute(n, e);
}

int comm_nccl_allreduce_mean(dp_comm *c, float *buf, size_t count, dp_err *e)
{
	struct comm_nccl *n = c->nccl;
	int rc = after_compute(n, e);
	if (rc < 0)
		return rc;
	rc = issued(n, ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, n->comm, n->s), "average", e);
	if (rc < 0)
		return rc;
	c->be->scale(c->ctx, buf, 1.0f / (float)c->size, count);
	return DP_OK;
}

int comm_nccl_bcast(dp_comm *c, void *buf, size_t bytes, int root, dp_err *e)
{
	struct comm_nccl *n = c->nccl;
	int rc = after_compute(n, e);
	if (rc < 0)
		return rc;
	return issued(n, ncclBroadcast(buf, buf, bytes, ncclChar, root, n->comm, n->s), "broadcast", e);
}

#else /* no NCCL in this build: dp_comm stages through host memory */

int comm_nccl_open(dp_comm *c, dp_err *e)
{
	if (c->size > 1 && c->be && !(c->be->caps & DP_CAP_HOST_MEMORY)) {
		size_t dl = strlen(c->desc);
		snprintf(c->desc + dl, sizeof c->desc - dl,
			 "; gradients through host memory (built without NCCL)");
	}
	return DP_OK;
}
void comm_nccl_close(dp_comm *c) {}
int comm_nccl_submit(dp_comm *c, float *buf, size_t lo, size_t hi, dp_err *e)
{
	return dp_seterr(e, DP_EARG, "NCCL: not in this build");
}
int comm_nccl_drain(dp_comm *c, dp_err *e) { return dp_seterr(e, DP_EARG, "NCCL: not in this build"); }
int comm_nccl_allreduce_mean(dp_comm *c, float *buf, size_t count, dp_err *e)
{
	return dp_seterr(e, DP_EARG, "NCCL: not in this build");
}
int comm_nccl_bcast(dp_comm *c, void *buf, size_t bytes, int root, dp_err *e)
{
	return dp_seterr(e, DP_EARG, "NCCL: not in this build");
}

#endif
