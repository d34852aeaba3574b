/*
 * dp_serve.h - inference on a checkpoint for a server (dp-serve): request
 * bodies into samples, dynamic batching over a fixed pool of model
 * threads, answers as JSON; a new checkpoint swapped in without dropping
 * a request.  No HTTP here: the caller reads bodies and writes answers.
 *
 *   bodies    (dp_req_new, by media type)
 *     application/json     {"instances": [S, ...]}, {"inputs": [S, ...]},
 *                          [S, ...], or one sample S; a sample is an array
 *                          (nested to any depth, read in order) of the
 *                          in_size numbers a record's feature holds: raw
 *                          values before the checkpoint's scale, in its
 *                          layout (hwc or chw); for an image model, pixels
 *                          0..255 of the input shape (C, H, W)
 *     application/x-npy    a NumPy .npy array (format 1.0 to 3.0,
 *                          little-endian float32, float64, uint8, int8,
 *                          int16, int32, int64, C order) of shape (n, ...)
 *                          with in_size values a row, or (in_size...) for one
 *     application/x-tfrecord  TFRecord framing of tf.train.Example
 *                          records, read as dp-eval reads them (the
 *                          checkpoint's feature, decode, layout, scale,
 *                          images); no label needed
 *     image/jpeg, image/png  one image, resized and cropped as dp-eval does
 *                          (dp_image_tf_eval of the checkpoint's settings)
 *     application/x-image  either
 *   batching  requests queue in arrival order; a model thread takes the
 *             requests at the head (of one checkpoint generation) up to
 *             max_batch samples, waiting at most max_delay after the
 *             oldest arrived for more; a request larger than max_batch runs
 *             in several forward passes of one thread.  The queue holds at
 *             most max_queue samples: more is refused at once (DP_ELIMIT),
 *             never queued.  A request whose deadline passes while it
 *             waits is answered with DP_ELIMIT and not computed.
 *   reload    dp_serve_reload loads the new checkpoint (its own models
 *             for every thread) while the old one serves; then new
 *             requests are decoded and run by the new one, those already
 *             queued finish on the old, which is freed after its last.
 *   answers   {"predictions": [P, ...]} in the order of the samples, P
 *             {"label": L, "class": NAME, "probability": p, "probabilities":
 *             [...], "top_k": [{"label", "class", "probability"}...]} for a
 *             classifier (class only with names), {"outputs": [...]} for a
 *             regression model; floats in the shortest text that reads
 *             back as the same float32.
 * Every error names what was wrong: "sample 3 has 780 values, the model
 * takes 784", "record 2 at byte 1632: ...".
 */
#ifndef DP_SERVE_H
#define DP_SERVE_H

#include "dp.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dp_serve_conf {
	const char *model;           /* the checkpoint (dp-train's safetensors) */
	const char *const *classes;  /* nclasses names for the answers; NULL: none */
	size_t nclasses;
	unsigned workers;            /* model threads (0: 1), each with its own model */
	int threads;                 /* math threads of each (0: 1) */
	int device;                  /* the GPU in a CUDA build (-1: default) */
	size_t max_batch;            /* samples a forward pass (0: 32) */
	double max_delay;            /* seconds waited to fill a batch (< 0: 0.002) */
	size_t max_queue;            /* samples waiting, at most (0: 8 max_batch a worker) */
	size_t topk;                 /* classes in each answer's top_k (0: up to 5) */
	uint64_t max_pixels;         /* images: larger ones are refused (0: the checkpoint's) */
} dp_serve_conf;

typedef struct dp_serve dp_serve;

/* Load the checkpoint for every worker and start the workers.  Errors as
 * dp_model_load's, naming the file. */
DP_EXPORT dp_serve *dp_serve_open(const dp_serve_conf *c, dp_err *e);
/* Swap in checkpoint path (NULL: c->model again) with the same settings:
 * on failure the old model keeps serving. */
DP_EXPORT int dp_serve_reload(dp_serve *s, const char *path, dp_err *e);
/* Stop the workers (requests still queued are answered DP_ELIMIT first:
 * their done is called) and free everything. */
DP_EXPORT void dp_serve_close(dp_serve *s);

/* What the model being served takes and gives, for logs and /ping. */
typedef struct dp_serve_info {
	const char *model;   /* the checkpoint's path */
	const char *spec;    /* its model spec */
	const char *input;   /* the input shape, "1x28x28" */
	size_t in_size, k;   /* floats in, classes or outputs out */
	int classifier;
	const char *decode;  /* "uint8", "image", ... */
	uint64_t generation; /* 1, then one more for each reload */
} dp_serve_info;
/* The model serving now (strings valid until the next reload). */
DP_EXPORT void dp_serve_get_info(dp_serve *s, dp_serve_info *out);

typedef struct dp_serve_stats {
	uint64_t requests, samples, batches; /* computed */
	uint64_t refused;                    /* queue full */
	uint64_t expired;                    /* deadline passed in the queue */
	size_t queued;                       /* samples waiting now */
} dp_serve_stats;
DP_EXPORT void dp_serve_get_stats(dp_serve *s, dp_serve_stats *out);

/* ---- requests ----------------------------------------------------------- */

typedef struct dp_req dp_req;

/* Decode a body of media type `type` (parameters after ';' ignored; NULL
 * or "": guessed from the bytes: JPEG, PNG, npy, JSON, TFRecord) into a
 * request of its samples, at most max_samples (0: max_queue).  NULL with
 * e: DP_EARG (a media type not served: HTTP 415), DP_EDATA (a body that
 * does not decode: 400), DP_ELIMIT (too many samples: 413), DP_ENOMEM. */
DP_EXPORT dp_req *dp_req_new(dp_serve *s, const char *type, const void *body, size_t len,
			     size_t max_samples, dp_err *e);
DP_EXPORT size_t dp_req_samples(const dp_req *r);
/* Queue r: done(ctx) is called once, from a worker thread (or from here
 * on a refusal it returns), when the answer is ready.  deadline: dp_now()
 * time after which it is not computed (0: none).  DP_ELIMIT when the
 * queue cannot take r's samples now (HTTP 429): done is not called. */
DP_EXPORT int dp_req_submit(dp_serve *s, dp_req *r, double deadline, void (*done)(void *ctx),
			    void *ctx, dp_err *e);
/* After done: the answer into out (JSON), or DP_ELIMIT (it expired or the
 * server closed: HTTP 503) or another failure with e. */
DP_EXPORT int dp_req_answer(dp_req *r, dp_buf *out, dp_err *e);
/* For a caller with nothing else to do meanwhile: dp_req_submit (no
 * deadline), wait for done, then dp_req_answer; a failure of either is
 * returned with e. */
DP_EXPORT int dp_req_run(dp_serve *s, dp_req *r, dp_buf *out, dp_err *e);
/* Seconds the request waited in the queue, and computed. */
DP_EXPORT void dp_req_times(const dp_req *r, double *queued, double *computed);
DP_EXPORT void dp_req_free(dp_req *r);

/* ---- pieces shared with the command line ----------------------------------- */

/* Class names from text: NAMES comma-separated, or "@FILE" one a line
 * (line breaks at the end ignored).  *k names are wanted (0: as many as
 * there are; *k is set to their count); *names (*k pointers into one
 * block, then NULL: free(*names) frees all) must be distinct: DP_EARG
 * otherwise, e saying "3 names for a model of 10 classes" or "'cat'
 * twice". */
DP_EXPORT int dp_classes_parse(const char *text, size_t *k, char ***names, dp_err *e);

#ifdef __cplusplus
}
#endif
#endif
