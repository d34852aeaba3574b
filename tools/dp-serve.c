/*
 * dp-serve - serve a dp-train checkpoint over HTTP with SageMaker's
 * inference container contract (GET /ping, POST /invocations, port 8080),
 * or predict on files from the command line.
 *
 * HTTP is libmicrohttpd's (a pool of --http-threads event loops): a body
 * is read into memory up to --max-body, decoded into samples by the
 * thread that read it (dp_serve.h: JSON, npy, TFRecord, images), queued,
 * and its connection suspended until a model thread has computed it in a
 * batch; then resumed and answered.  A full queue is answered 429 at
 * once, a request that waited past --timeout 503.  SIGHUP loads the
 * checkpoint again (or the file it now names) while the old one serves;
 * SIGTERM and SIGINT stop taking connections, answer what is queued, and
 * exit 0.  Logs are logfmt (or JSON) lines on stderr.  See dp-serve(1).
 */
#define _GNU_SOURCE
#include "cli.h"
#include "sagemaker.h"
#include "dp.h"
#include "dp_image.h"
#include "dp_serve.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef DP_PROG
#define DP_PROG "dp-serve"
#endif

enum {
	O_MODEL = 256, O_CLASSES, O_PORT, O_BIND, O_WORKERS, O_THREADS, O_HTTP_THREADS, O_MAX_BATCH,
	O_MAX_DELAY, O_MAX_QUEUE, O_MAX_BODY, O_TIMEOUT, O_CONNECTIONS, O_TOPK, O_LOG_FORMAT,
	O_LOG_REQUESTS, O_STATS_EVERY, O_PORT_FILE, O_JSON
};

static const struct option longopts[] = {
	{"model", required_argument, 0, O_MODEL},
	{"classes", required_argument, 0, O_CLASSES},
	{"port", required_argument, 0, O_PORT},
	{"bind", required_argument, 0, O_BIND},
	{"workers", required_argument, 0, O_WORKERS},
	{"threads", required_argument, 0, O_THREADS},
	{"http-threads", required_argument, 0, O_HTTP_THREADS},
	{"max-batch", required_argument, 0, O_MAX_BATCH},
	{"max-delay", required_argument, 0, O_MAX_DELAY},
	{"max-queue", required_argument, 0, O_MAX_QUEUE},
	{"max-body", required_argument, 0, O_MAX_BODY},
	{"timeout", required_argument, 0, O_TIMEOUT},
	{"connections", required_argument, 0, O_CONNECTIONS},
	{"top-k", required_argument, 0, O_TOPK},
	{"log-format", required_argument, 0, O_LOG_FORMAT},
	{"log-requests", no_argument, 0, O_LOG_REQUESTS},
	{"stats-every", required_argument, 0, O_STATS_EVERY},
	{"port-file", required_argument, 0, O_PORT_FILE},
	{"json", no_argument, 0, O_JSON},
	{"quiet", no_argument, 0, 'q'},
	CLI_OPTIONS_END,
};

static struct {
	const char *model, *classes, *bind, *port_file;
	unsigned port, workers, threads, http_threads, connections;
	uint64_t max_batch, max_queue, max_body, topk;
	double max_delay, timeout, stats_every;
	int json_log, log_requests, json_out, quiet;
	char **files;
	int nfiles;
} O = {
	.bind = "0.0.0.0",
	.port = 8080,
	.workers = 1,
	.threads = 1,
	.http_threads = 2,
	.connections = 1000,
	.max_batch = 32,
	.max_delay = 0.002,
	.max_body = 6u << 20,
	.timeout = 60,
	.stats_every = 60,
};

static const char usage_line[] =
	"usage: dp-serve --model CHECKPOINT [--port N] [--workers N] [--max-batch N] ...\n"
	"       dp-serve --model CHECKPOINT FILE...     (dp-serve --help lists every option)\n";

static void help(void)
{
	printf("usage: dp-serve --model CHECKPOINT [OPTION]...\n"
	       "       dp-serve --model CHECKPOINT [--top-k K] [--json] FILE|FOLDER...\n"
	       "       dp-serve serve        (SageMaker: the model from /opt/ml/model)\n"
	       "Serve a dp-train checkpoint over HTTP with SageMaker's inference contract:\n"
	       "GET /ping, POST /invocations (JSON, application/x-npy, application/x-tfrecord,\n"
	       "image/jpeg, image/png), answers as JSON with probabilities and class names.\n"
	       "With FILE operands, print the top classes of each image (or each record of a\n"
	       "TFRecord file) and exit.  See dp-serve(1).\n"
	       "\n"
	       "Model:\n"
	       "      --model PATH         the checkpoint (safetensors, from dp-train)\n"
	       "      --classes NAMES      class names, comma-separated, or @FILE (one a line)\n"
	       "      --top-k K            classes in each answer's top_k (default 5)\n"
	       "Serving:\n"
	       "      --port N             TCP port (default 8080; 0: any free one)\n"
	       "      --bind ADDR          the address listened on (default 0.0.0.0)\n"
	       "      --port-file FILE     write the port listened on to FILE once ready\n"
	       "      --workers N          model threads, each its own copy of the model\n"
	       "                           (default 1)\n"
	       "      --threads N          math threads of each model thread (default 1)\n"
	       "      --http-threads N     threads reading and decoding requests (default 2)\n"
	       "      --max-batch N        samples a forward pass (default 32)\n"
	       "      --max-delay MS       wait up to MS milliseconds to fill a batch (default 2)\n"
	       "      --max-queue N        samples waiting, at most: more is answered 429\n"
	       "                           (default 8 x max-batch x workers)\n"
	       "      --max-body SIZE      longest request body (default 6M; k, M, G): 413\n"
	       "      --timeout SEC        a request waiting longer is answered 503; idle\n"
	       "                           connections closed after it too (default 60)\n"
	       "      --connections N      open connections, at most (default 1000)\n"
	       "Logs:\n"
	       "      --log-format logfmt|json  log lines on stderr (default logfmt)\n"
	       "      --log-requests       a line for every request\n"
	       "      --stats-every SEC    a line of counts every SEC seconds (default 60; 0:\n"
	       "                           none)\n"
	       "  -q, --quiet              only errors\n"
	       "Files:\n"
	       "      --json               a JSON line a file (the answer, with \"file\")\n"
	       "\n"
	       "      --sagemaker[=ROOT]   SageMaker hosting (also the lone argument 'serve')\n"
	       "      --help               this list\n"
	       "      --version            the version\n"
	       "\n"
	       "SIGHUP reloads the checkpoint without dropping a request; SIGTERM stops.\n"
	       "Exit status: 0 stopped by a signal, or every file predicted; 1 failure; 2 usage\n"
	       "error.\n");
}

static void parse_args(int argc, char **argv)
{
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":q", longopts, NULL)) != -1) {
		switch (c) {
		case O_MODEL: O.model = optarg; break;
		case O_CLASSES: O.classes = optarg; break;
		case O_PORT: O.port = (unsigned)cli_count("--port", optarg, 0, 65535); break;
		case O_BIND: O.bind = optarg; break;
		case O_PORT_FILE: O.port_file = optarg; break;
		case O_WORKERS: O.workers = (unsigned)cli_count("--workers", optarg, 1, 256); break;
		case O_THREADS: O.threads = (unsigned)cli_count("--threads", optarg, 1, 256); break;
		case O_HTTP_THREADS:
			O.http_threads = (unsigned)cli_count("--http-threads", optarg, 1, 256);
			break;
		case O_MAX_BATCH: O.max_batch = cli_count("--max-batch", optarg, 1, 1u << 16); break;
		case O_MAX_DELAY: O.max_delay = cli_real("--max-delay", optarg, 0, 60000) / 1000; break;
		case O_MAX_QUEUE: O.max_queue = cli_count("--max-queue", optarg, 1, 1u << 24); break;
		case O_MAX_BODY: O.max_body = cli_size("--max-body", optarg, 1, 1ull << 32); break;
		case O_TIMEOUT: O.timeout = cli_real("--timeout", optarg, 0.001, 86400); break;
		case O_CONNECTIONS:
			O.connections = (unsigned)cli_count("--connections", optarg, 1, 100000);
			break;
		case O_TOPK: O.topk = cli_count("--top-k", optarg, 1, 1u << 24); break;
		case O_LOG_FORMAT:
			O.json_log = cli_word("--log-format", optarg, "logfmt json");
			break;
		case O_LOG_REQUESTS: O.log_requests = 1; break;
		case O_STATS_EVERY: O.stats_every = cli_real("--stats-every", optarg, 0, 86400); break;
		case O_JSON: O.json_out = 1; break;
		case 'q': O.quiet = 1; break;
		default: cli_default_option(c, argv, help);
		}
	}
	O.files = argv + optind;
	O.nfiles = argc - optind;
	if (!O.model)
		cli_usage_error("no checkpoint: give --model PATH");
}

/* ---- logs --------------------------------------------------------------------- */

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;

/* A log line of key, value pairs (NULL-terminated); a value starting with
 * '\x01' is a number (written bare), others strings (quoted when needed).
 * level "error" lines are written even with --quiet. */
static void log_kv(const char *level, ...)
{
	if (O.quiet && strcmp(level, "error"))
		return;
	dp_buf b = DP_BUF_INIT;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	struct tm tm;
	gmtime_r(&ts.tv_sec, &tm);
	char t[64];
	snprintf(t, sizeof t, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
		 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
	dp_buf_printf(&b, O.json_log ? "{\"time\":\"%s\",\"level\":\"%s\"" : "time=%s level=%s", t,
		      level);
	va_list ap;
	va_start(ap, level);
	for (const char *k; (k = va_arg(ap, const char *));) {
		const char *v = va_arg(ap, const char *);
		int num = v[0] == '\x01';
		if (num)
			v++;
		dp_buf_printf(&b, O.json_log ? ",\"%s\":" : " %s=", k);
		size_t vl = strlen(v);
		int plain = num || (!O.json_log && vl && strcspn(v, " \"=\\\t\n\r") == vl);
		if (plain && !(O.json_log && !num))
			dp_buf_add(&b, v, vl);
		else
			dp_buf_json_str(&b, v, vl, 0);
	}
	va_end(ap);
	dp_buf_addstr(&b, O.json_log ? "}\n" : "\n");
	if (!b.err) {
		pthread_mutex_lock(&log_mu);
		fwrite(b.p, 1, b.len, stderr);
		pthread_mutex_unlock(&log_mu);
	}
	dp_buf_free(&b);
}

#define NUM(buf, fmt, ...) (snprintf(buf, sizeof buf, "\x01" fmt, __VA_ARGS__), buf)

/* ---- the server --------------------------------------------------------------------- */

static dp_serve *S;
static char **NAMES;
static size_t NNAMES;

/* One connection's request. */
typedef struct conn {
	char *body;
	size_t len, cap;
	int too_large;
	dp_req *req;
	int submitted, ready, suspended;
	pthread_mutex_t mu;
	struct MHD_Connection *c;
	double t0;
} conn;

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *body,
			     size_t len, const char *type)
{
	struct MHD_Response *r =
		MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, "Content-Type", type);
	if (status == MHD_HTTP_TOO_MANY_REQUESTS || status == MHD_HTTP_SERVICE_UNAVAILABLE)
		MHD_add_response_header(r, "Retry-After", "1");
	enum MHD_Result ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

/* An error answer: {"error": MSG} with status, logged. */
static enum MHD_Result reply_error(struct MHD_Connection *c, unsigned status, const char *msg)
{
	dp_buf b = DP_BUF_INIT;
	dp_buf_addstr(&b, "{\"error\": ");
	dp_buf_json_str(&b, msg, strlen(msg), 0);
	dp_buf_printf(&b, ", \"status\": %u}\n", status);
	char sb[16];
	if (status >= 500 || O.log_requests || (status != 429 && status != 404))
		log_kv(status >= 500 ? "error" : "warn", "status", NUM(sb, "%u", status), "error", msg,
		       (char *)NULL);
	enum MHD_Result r = b.err ? MHD_NO : reply(c, status, b.p, b.len, "application/json");
	dp_buf_free(&b);
	return r;
}

/* A model thread answered: resume the connection (under the conn's
 * lock, so that it is suspended first). */
static void on_done(void *ctx)
{
	conn *k = ctx;
	pthread_mutex_lock(&k->mu);
	k->ready = 1;
	if (k->suspended) {
		k->suspended = 0;
		MHD_resume_connection(k->c);
	}
	pthread_mutex_unlock(&k->mu);
}

static unsigned status_of(int code)
{
	switch (code) {
	case DP_EARG: return MHD_HTTP_UNSUPPORTED_MEDIA_TYPE;
	case DP_ELIMIT: return MHD_HTTP_CONTENT_TOO_LARGE;
	case DP_ENOMEM: return MHD_HTTP_SERVICE_UNAVAILABLE;
	default: return MHD_HTTP_BAD_REQUEST;
	}
}

static enum MHD_Result ping(struct MHD_Connection *c)
{
	dp_serve_info in;
	dp_serve_get_info(S, &in);
	dp_buf b = DP_BUF_INIT;
	dp_buf_addstr(&b, "{\"status\": \"ok\", \"model\": ");
	dp_buf_json_str(&b, in.model, strlen(in.model), 0);
	dp_buf_printf(&b, ", \"generation\": %" PRIu64 ", \"input_shape\": \"%s\", \"outputs\": %zu}\n",
		      in.generation, in.input, in.k);
	enum MHD_Result r = b.err ? MHD_NO : reply(c, MHD_HTTP_OK, b.p, b.len, "application/json");
	dp_buf_free(&b);
	return r;
}

/* SageMaker batch transform asks the container how to call it. */
static enum MHD_Result execution_parameters(struct MHD_Connection *c)
{
	char t[160];
	int n = snprintf(t, sizeof t,
			 "{\"MaxConcurrentTransforms\": %u, \"BatchStrategy\": \"MULTI_RECORD\", "
			 "\"MaxPayloadInMB\": %" PRIu64 "}\n",
			 O.workers, O.max_body >> 20 ? O.max_body >> 20 : 1);
	return reply(c, MHD_HTTP_OK, t, (size_t)n, "application/json");
}

static enum MHD_Result answer(conn *k)
{
	dp_buf b = DP_BUF_INIT;
	dp_err e;
	int rc = dp_req_answer(k->req, &b, &e);
	enum MHD_Result r;
	if (rc < 0) {
		r = reply_error(k->c, rc == DP_ELIMIT ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_INTERNAL_SERVER_ERROR,
				e.msg);
	} else {
		r = reply(k->c, MHD_HTTP_OK, b.p, b.len, "application/json");
		if (O.log_requests) {
			double q, comp;
			char sb[32], nb[32], qb[32], cb[32], tb[32];
			dp_req_times(k->req, &q, &comp);
			log_kv("info", "status", NUM(sb, "%d", 200), "samples",
			       NUM(nb, "%zu", dp_req_samples(k->req)), "queued_ms", NUM(qb, "%.3f", q * 1e3),
			       "compute_ms", NUM(cb, "%.3f", comp * 1e3), "total_ms",
			       NUM(tb, "%.3f", (dp_now() - k->t0) * 1e3), (char *)NULL);
		}
	}
	dp_buf_free(&b);
	return r;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *data,
				  size_t *data_size, void **con_cls)
{
	int post = !strcmp(method, "POST"), get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
	if (!strcmp(url, "/ping"))
		return get ? ping(c) : reply_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "/ping: use GET");
	if (!strcmp(url, "/execution-parameters"))
		return get ? execution_parameters(c)
			   : reply_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "use GET");
	if (strcmp(url, "/invocations")) {
		char m[128];
		char *shown = dp_shown(url, strlen(url) > 60 ? 60 : strlen(url));
		snprintf(m, sizeof m, "%s: not found (GET /ping, POST /invocations)", shown ? shown : "?");
		free(shown);
		return reply_error(c, MHD_HTTP_NOT_FOUND, m);
	}
	if (!post)
		return reply_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "/invocations: use POST");
	conn *k = *con_cls;
	if (!k) { /* the headers: refuse a body announced too large before reading it */
		if (!(k = calloc(1, sizeof *k)))
			return MHD_NO;
		pthread_mutex_init(&k->mu, NULL);
		k->c = c;
		k->t0 = dp_now();
		*con_cls = k;
		const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
		if (cl && strtoull(cl, NULL, 10) > O.max_body) {
			k->too_large = 1;
			char m[96];
			snprintf(m, sizeof m, "a body of %s bytes, at most %" PRIu64, cl, O.max_body);
			return reply_error(c, MHD_HTTP_CONTENT_TOO_LARGE, m);
		}
		return MHD_YES;
	}
	if (*data_size) { /* a piece of the body */
		if (!k->too_large && *data_size > O.max_body - k->len)
			k->too_large = 1;
		if (!k->too_large) {
			if (k->len + *data_size > k->cap) {
				size_t nc = k->cap ? k->cap : 65536;
				while (nc < k->len + *data_size)
					nc *= 2;
				char *nb = realloc(k->body, nc);
				if (!nb)
					return MHD_NO;
				k->body = nb;
				k->cap = nc;
			}
			memcpy(k->body + k->len, data, *data_size);
			k->len += *data_size;
		}
		*data_size = 0;
		return MHD_YES;
	}
	if (k->submitted) /* resumed: the answer is ready */
		return answer(k);
	if (k->too_large) {
		char m[96];
		snprintf(m, sizeof m, "the body is longer than --max-body %" PRIu64 " bytes", O.max_body);
		return reply_error(c, MHD_HTTP_CONTENT_TOO_LARGE, m);
	}
	dp_err e;
	const char *type = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
	if (!(k->req = dp_req_new(S, type, k->body, k->len, 0, &e)))
		return reply_error(c, status_of(e.code), e.msg);
	free(k->body);
	k->body = NULL;
	double deadline = dp_now() + O.timeout;
	pthread_mutex_lock(&k->mu);
	if (dp_req_submit(S, k->req, deadline, on_done, k, &e) < 0) {
		pthread_mutex_unlock(&k->mu);
		return reply_error(c, MHD_HTTP_TOO_MANY_REQUESTS, e.msg);
	}
	k->submitted = 1;
	if (!k->ready) {
		MHD_suspend_connection(c);
		k->suspended = 1;
	}
	int ready = k->ready;
	pthread_mutex_unlock(&k->mu);
	return ready ? answer(k) : MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	conn *k = *con_cls;
	if (!k)
		return;
	/* a request queued whose connection went away: its answer must come
	 * first (the model thread still writes into it) */
	if (k->submitted)
		for (;;) {
			pthread_mutex_lock(&k->mu);
			int ready = k->ready;
			pthread_mutex_unlock(&k->mu);
			if (ready)
				break;
			usleep(1000);
		}
	dp_req_free(k->req);
	free(k->body);
	pthread_mutex_destroy(&k->mu);
	free(k);
	*con_cls = NULL;
}

static void log_mhd(void *cls, const char *fmt, va_list ap)
{
	char m[512];
	vsnprintf(m, sizeof m, fmt, ap);
	size_t l = strlen(m);
	while (l && m[l - 1] == '\n')
		m[--l] = 0;
	log_kv("warn", "http", m, (char *)NULL);
}

static volatile sig_atomic_t got_hup, got_stop;

static void on_signal(int sig)
{
	if (sig == SIGHUP)
		got_hup = 1;
	else
		got_stop = 1;
}

static void log_model(const char *what)
{
	dp_serve_info in;
	dp_serve_get_info(S, &in);
	char gb[32], kb[32];
	log_kv("info", "event", what, "model", in.model, "spec", in.spec, "input_shape", in.input,
	       "decode", in.decode, "outputs", NUM(kb, "%zu", in.k), "generation",
	       NUM(gb, "%" PRIu64, in.generation), (char *)NULL);
}

static void log_stats(const char *what)
{
	dp_serve_stats st;
	dp_serve_get_stats(S, &st);
	char a[32], b[32], c[32], d[32], e[32], f[32], g[32];
	log_kv("info", "event", what, "requests", NUM(a, "%" PRIu64, st.requests), "samples",
	       NUM(b, "%" PRIu64, st.samples), "batches", NUM(c, "%" PRIu64, st.batches),
	       "mean_batch", NUM(d, "%.2f", st.batches ? (double)st.samples / st.batches : 0.0),
	       "refused", NUM(e, "%" PRIu64, st.refused), "expired", NUM(f, "%" PRIu64, st.expired),
	       "queued", NUM(g, "%zu", st.queued), (char *)NULL);
}

static int serve(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)O.port)};
	if (inet_pton(AF_INET, O.bind, &sa.sin_addr) != 1)
		cli_usage_error("--bind '%s': want an IPv4 address such as 127.0.0.1 or 0.0.0.0", O.bind);
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
			 MHD_USE_ERROR_LOG;
	struct MHD_Daemon *d = MHD_start_daemon(
		flags, (uint16_t)O.port, NULL, NULL, on_request, NULL, MHD_OPTION_EXTERNAL_LOGGER,
		log_mhd, NULL, MHD_OPTION_SOCK_ADDR, &sa,
		MHD_OPTION_THREAD_POOL_SIZE, O.http_threads, MHD_OPTION_CONNECTION_LIMIT,
		O.connections, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(O.timeout + 0.999),
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_END);
	if (!d)
		cli_die("%s:%u: cannot listen (%s)", O.bind, O.port,
			errno ? strerror(errno) : "libmicrohttpd refused");
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
	unsigned port = di ? di->port : O.port;
	char pb[32], wb[32], bb[32], db[32], qb[32];
	dp_serve_info in;
	dp_serve_get_info(S, &in);
	log_model("loaded");
	log_kv("info", "event", "listening", "address", O.bind, "port", NUM(pb, "%u", port),
	       "workers", NUM(wb, "%u", O.workers), "max_batch", NUM(bb, "%" PRIu64, O.max_batch),
	       "max_delay_ms", NUM(db, "%g", O.max_delay * 1e3), "max_queue",
	       NUM(qb, "%" PRIu64, O.max_queue ? O.max_queue : 8 * O.max_batch * O.workers),
	       (char *)NULL);
	if (O.port_file) {
		dp_out o;
		dp_err e;
		char t[16];
		int n = snprintf(t, sizeof t, "%u\n", port);
		if (dp_out_open(&o, O.port_file, &e) < 0 ||
		    dp_write_all(o.fd, t, (size_t)n, O.port_file, &e) < 0 || dp_out_commit(&o, &e) < 0)
			cli_die_err(CLI_FAIL, &e);
	}
	double next_stats = dp_now() + O.stats_every;
	while (!got_stop) {
		usleep(20000);
		if (got_hup) {
			got_hup = 0;
			dp_err e;
			double t = dp_now();
			if (dp_serve_reload(S, NULL, &e) < 0) {
				log_kv("error", "event", "reload_failed", "error", e.msg, (char *)NULL);
			} else {
				char tb[32];
				log_model("reloaded");
				log_kv("info", "event", "reload_time", "seconds", NUM(tb, "%.3f", dp_now() - t),
				       (char *)NULL);
			}
		}
		if (O.stats_every > 0 && dp_now() >= next_stats) {
			log_stats("stats");
			next_stats = dp_now() + O.stats_every;
		}
	}
	/* stop: no new connections; what is queued is answered as the workers
	 * drain, then the daemon goes */
	MHD_quiesce_daemon(d);
	for (int i = 0; i < 500; i++) {
		dp_serve_stats st;
		dp_serve_get_stats(S, &st);
		if (!st.queued)
			break;
		usleep(10000);
	}
	usleep(50000);
	MHD_stop_daemon(d);
	log_stats("stopped");
	return CLI_OK;
}

/* ---- files: predictions on the command line --------------------------------------- */

static int any_failed;

/* One line a prediction: "PATH: CLASS PROB, CLASS PROB, ..." (PATH[i] for
 * the records of a TFRecord file), or with --json the answer's object
 * with "file" (and "record"). */
static void print_answer(const char *path, const char *text, size_t n)
{
	json_error_t je;
	json_t *root = json_loadb(text, strlen(text), 0, &je), *preds = json_object_get(root, "predictions");
	size_t i;
	json_t *p;
	json_array_foreach(preds, i, p) {
		if (O.json_out) {
			json_t *o = json_object();
			json_object_set_new(o, "file", json_string(path));
			if (n > 1)
				json_object_set_new(o, "record", json_integer((json_int_t)i));
			json_object_update(o, p);
			char *t = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
			if (t)
				printf("%s\n", t);
			free(t);
			json_decref(o);
			continue;
		}
		dp_buf b = DP_BUF_INIT;
		dp_buf_shown(&b, path, strlen(path));
		if (n > 1)
			dp_buf_printf(&b, "[%zu]", i);
		dp_buf_addstr(&b, ":");
		json_t *top = json_object_get(p, "top_k"), *t;
		size_t j;
		if (top) {
			json_array_foreach(top, j, t) {
				const char *cl = json_string_value(json_object_get(t, "class"));
				dp_buf_addstr(&b, j ? ", " : " ");
				if (cl)
					dp_buf_shown(&b, cl, strlen(cl));
				else
					dp_buf_printf(&b, "%" JSON_INTEGER_FORMAT,
						      json_integer_value(json_object_get(t, "label")));
				dp_buf_printf(&b, " %.4f", json_number_value(json_object_get(t, "probability")));
			}
		} else {
			json_array_foreach(json_object_get(p, "outputs"), j, t)
				dp_buf_printf(&b, "%s%.6g", j ? ", " : " ", json_number_value(t));
		}
		dp_buf_addstr(&b, "\n");
		if (!b.err)
			fwrite(b.p, 1, b.len, stdout);
		dp_buf_free(&b);
	}
	json_decref(root);
}

static void predict_file(const char *path)
{
	dp_err e;
	dp_buf f = DP_BUF_INIT;
	int rc = dp_read_file(path, NULL, O.max_body, &f, &e);
	if (rc < 0) {
		cli_warn("%s%s", e.msg, rc == DP_ELIMIT ? " (--max-body)" : "");
		dp_buf_free(&f);
		any_failed = 1;
		return;
	}
	dp_req *r = dp_req_new(S, NULL, f.p, f.len, 0, &e);
	dp_buf_free(&f);
	if (!r) {
		cli_warn("%s: %s", path, e.msg);
		any_failed = 1;
		return;
	}
	dp_buf b = DP_BUF_INIT;
	if (dp_req_run(S, r, &b, &e) < 0 || b.err)
		cli_die("%s: %s", path, b.err ? "out of memory" : e.msg);
	print_answer(path, b.p, dp_req_samples(r));
	dp_buf_free(&b);
	dp_req_free(r);
}

/* A folder: its image files (those ImageFolder takes), in byte order of names. */
static int walk_one(void *ctx, const dp_walk_entry *w, dp_err *e)
{
	(void)ctx;
	(void)e;
	if (S_ISDIR(w->st->st_mode))
		return DP_OK;
	if (dp_image_is_name(w->name))
		predict_file(w->path);
	return DP_OK;
}

static int predict_files(void)
{
	for (int i = 0; i < O.nfiles; i++) {
		dp_err e;
		if (cli_is_dir(O.files[i])) {
			if (dp_walk(O.files[i], walk_one, NULL, &e) < 0) {
				cli_warn("%s", e.msg);
				any_failed = 1;
			}
		} else {
			predict_file(O.files[i]);
		}
	}
	if (cli_close_stdout() < 0)
		return CLI_FAIL;
	return any_failed ? CLI_FAIL : CLI_OK;
}

int main(int argc, char **argv)
{
	cli_blas_kernels(argv); /* OpenBLAS's kernels for this CPU */
	cli.prog = DP_PROG;
	cli.usage = usage_line;
	sm_serve_args(&argc, &argv, longopts); /* `serve`: SageMaker's hosting contract */
	parse_args(argc, argv);
	dp_err e;
	dp_serve_conf c = {.model = O.model,
			   .workers = O.workers,
			   .threads = (int)O.threads,
			   .device = -1,
			   .max_batch = O.max_batch,
			   .max_delay = O.max_delay,
			   .max_queue = O.max_queue,
			   .topk = O.topk};
	if (O.classes) {
		if (dp_classes_parse(O.classes, &NNAMES, &NAMES, &e) < 0)
			cli_usage_error("--classes: %s", e.msg);
		c.classes = (const char *const *)NAMES;
		c.nclasses = NNAMES;
	}
	if (O.nfiles) { /* predictions on files: one model thread, no delay */
		c.workers = 1;
		c.max_delay = 0;
	}
	if (!(S = dp_serve_open(&c, &e)))
		cli_die_err(CLI_FAIL, &e);
	int rc;
	if (O.nfiles) {
		rc = predict_files();
	} else {
		static const int sigs[] = {SIGHUP, SIGTERM, SIGINT};
		cli_catch_signals(sigs, 3, on_signal, 0);
		signal(SIGPIPE, SIG_IGN);
		rc = serve();
	}
	dp_serve_close(S);
	free(NAMES);
	return rc;
}
