/*
 * data_impl.h - private to lib/train/input/: the input pipeline's state
 * (struct dp_data) and what its files share: sources.c (the files,
 * streams and commands records come from), decode.c (a record into a
 * sample) and data.c (batches: the producer, the decode pool, the reader
 * thread, the public calls).  Not installed.
 */
#ifndef DP_DATA_IMPL_H
#define DP_DATA_IMPL_H

#include "dp_data.h"
#include "dp_example.h"
#include "dp_rng.h"
#include <pthread.h>

enum { SRC_FILE = 1, SRC_STREAM, SRC_CMD };

typedef struct source {
	int kind;
	char *path; /* for opening; "-" for stdin */
	char *name; /* for messages */
	int consumed;  /* a stream read once already */
	int cached;    /* its cache is complete */
	int cache_fd;  /* DP_CACHE_FILE */
	dp_writer *cw; /* the cache being written (file or memory) */
	uint8_t *mem;  /* DP_CACHE_MEMORY, complete */
	size_t memlen;
} source;

typedef struct slot {
	uint8_t *p;
	size_t len, cap;
	size_t src;
	uint64_t index, offset;
} slot;

/* One decoder's state. */
typedef struct worker {
	dp_data *d;
	dp_example ex;
	int64_t *iscratch; /* in_size doubles */
	float *tmp;        /* in_size floats: hwc transposition */
	dp_image_dec *img;
	pthread_t th;
} worker;

/* data_decode(): an image that did not decode (skippable), e set */
#define BAD_IMAGE 2

struct dp_data {
	dp_data_opts o;
	char *feature, *label, *cmd, *cache_dir;
	/* class_text: the names met (nclass of them, NULL unmet), under names_mu
	 * (decode threads); names_bad: a class met under two names */
	char *class_text, **names;
	char *sample_name; /* dp_data_opts.sample_name, with origins */
	int names_bad;
	pthread_mutex_t names_mu;
	char *cmd_run; /* the command of the epoch, expanded: for messages */
	source *src;
	size_t nsrc;
	uint64_t cache_total;
	/* the epoch in progress (producer state) */
	uint64_t epoch, skip, skip_fill;
	uint64_t pos;     /* records out of the shuffle this epoch (emit) */
	uint64_t skip_to; /* resuming: those up to this position are passed over */
	size_t *order, cur;
	dp_reader *rd;
	size_t rd_src;
	pid_t child;
	int input_done;
	uint64_t rec_no; /* records seen this epoch, for the shard filter */
	uint64_t out_no; /* records out of the shuffle, for the block shard filter */
	slot *buf;
	size_t nbuf;
	dp_rng rng;
	worker *w;         /* decode_threads + 1; w[0] the producer's */
	dp_data_stats st;  /* the producer's */
	dp_data_stats pub; /* a copy for the consumer, under mu when threaded */
	uint64_t batch_no;
	/* batches */
	dp_batch *slots;
	int nslots;
	/* reader thread */
	int threaded, running, stop;
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int head, count; /* ring: head = next to hand out, count filled */
	int held;        /* slot the consumer holds, -1 none */
	int done, status;
	dp_err terr;
	double wait_s;   /* the consumer's, under mu */
	/* the decode pool: the stage of records, decoded into job_b at
	 * job_base + k; workers take k from job_next */
	slot *stage;
	size_t nstage;
	int pool_up, pool_stop;
	pthread_mutex_t pmu;
	pthread_cond_t pcv, pdone;
	dp_batch *job_b;
	size_t job_base, job_n, job_next, job_done;
	int *job_rc;
	dp_err *job_err;
};

/* ---- sources.c ---- */
/* One more source of kind SRC_* (path: a file's, a stream's or a
 * command's text; name: as messages say it). */
int data_add_source(dp_data *d, int kind, const char *path, const char *name, dp_err *e);
/* The sources of d->o.inputs: placeholders filled in, globs expanded. */
int data_find_sources(dp_data *d, dp_err *e);
/* Stop reading mid-source (epoch abandoned or closing).  A partly cached
 * stream cannot be read again, so its reader is drained into the cache
 * first when the caller wants it (drain). */
void data_abandon_source(dp_data *d, int drain);
/* The next record of the epoch (after the shard filter): 1, 0 at the end,
 * or an error. */
int data_next_record(dp_data *d, dp_record *r, dp_err *e);

/* ---- decode.c ---- */
/* Decode record (data, len) into sample i of batch b with worker w.
 * DP_OK, BAD_IMAGE (e set), or an error. */
int data_decode(worker *w, const uint8_t *data, size_t len, size_t src, uint64_t index,
		  uint64_t offset, dp_batch *b, size_t i, dp_err *e);

#endif
