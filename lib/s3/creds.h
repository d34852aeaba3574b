/*
 * creds.h - what the credential chain's files share (not installed).
 *
 *   creds.c        the chain (which provider answers) and the refresh of
 *                  temporary credentials, shared by a client's workers
 *   creds_fetch.c  the providers that fetch: STS web identity,
 *                  credential_process, the container endpoint, IMDS
 *   creds_parse.c  their answers (JSON, STS XML) and shlex's split
 */
#ifndef S3_CREDS_H
#define S3_CREDS_H

#include "s3_int.h"

#include <pthread.h>

enum { K_WEB = 1, K_PROCESS, K_CONTAINER, K_IMDS };

#define RESP_MAX (64u << 10)  /* a provider's answer */
#define TOKEN_MAX (64u << 10) /* a web identity or authorization token file */
#define IMDS_URL "http://169.254.169.254/"
#define IMDS_URL6 "http://[fd00:ec2::254]/"
#define ECS_HOST "169.254.170.2"

struct s3_creds {
	pthread_mutex_t mu;
	int refs;
	int kind;
	char what[600]; /* the provider in messages: "container endpoint http://..." */
	/* what the provider needs */
	char *url;                                /* STS, container URL, IMDS base ("/" ended) */
	char *role_arn, *token_file, *session;    /* web identity */
	char *auth, *auth_file;                   /* container */
	char *process;                            /* credential_process */
	double timeout;                           /* seconds per HTTP request */
	int attempts;                             /* HTTP attempts */
	int v1_disabled;                          /* IMDS: no fallback without a token */
	int want_region;                          /* IMDS: the instance's region too */
	/* the credentials */
	s3_cval v;
	unsigned gen;  /* bumped at each fetch */
	double last_try;
	int fetched;
	int failed; /* the first fetch failed: for good */
	dp_err err;
	char region[64]; /* IMDS's placement/region, "" when unknown */
	char hint[700];  /* IMDS: what to say when it is not there either */
	double advisory, mandatory;
};

/* Fetch c's credentials into v (creds_fetch.c); DP_OK or a status with e
 * set, naming the provider and never a secret. */
int s3_creds_fetch(dp_s3 *s, s3_creds *c, s3_cval *v, dp_err *e);

#endif
