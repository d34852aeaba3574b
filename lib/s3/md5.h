/*
 * md5.h - MD5, one message at a time or many side by side.
 *
 * S3 gives the MD5 of a single-part object as its ETag, so a reader that
 * checks what it received hashes every byte.  One MD5 stream is a chain of
 * dependent 32-bit operations (about 700 MB/s on one core, OpenSSL's
 * assembly included); s3_md5_update_many() hashes up to 16 independent
 * messages at once in the 32-bit lanes of the CPU's vector unit (AVX-512:
 * 16 lanes, AVX2: 8), which costs about as much per block step as one
 * scalar block: many objects in flight are hashed for a fraction of the CPU.
 * DP_MD5=scalar, avx2 or avx512 in the environment forces an implementation
 * (tests and benchmarks; one the CPU lacks falls back to the next below).
 */
#ifndef DP_MD5_H
#define DP_MD5_H

#include <stddef.h>
#include <stdint.h>

typedef struct s3_md5 {
	uint32_t h[4];
	uint64_t len;          /* bytes hashed so far */
	unsigned char buf[64]; /* the partial block: len % 64 bytes */
} s3_md5;

void s3_md5_init(s3_md5 *m);
void s3_md5_update(s3_md5 *m, const void *p, size_t n);
/* The 16-byte digest; m must be initialised again before reuse. */
void s3_md5_final(s3_md5 *m, unsigned char out[16]);

/* One message's next bytes. */
typedef struct s3_md5_job {
	s3_md5 *m;
	const void *p;
	size_t n;
} s3_md5_job;

/* The same as s3_md5_update(jobs[i].m, jobs[i].p, jobs[i].n) for every i
 * (the m must be distinct), with the whole blocks of several jobs going
 * through the vector lanes together.  Jobs of similar lengths share lanes
 * best; a job of its own runs the scalar code. */
void s3_md5_update_many(s3_md5_job *jobs, size_t n);

/* "avx512", "avx2" or "scalar": what s3_md5_update_many() uses, and how
 * many messages it hashes at once (16, 8, 1). */
const char *s3_md5_impl(void);
int s3_md5_lanes(void);
/* Use that implementation from now on (tests and benchmarks; not while
 * another thread hashes).  -1 when the CPU lacks it (the best one below it
 * is used then). */
int s3_md5_select(const char *name);

/* ---- S3 ETags: every MD5 of libdp's S3 code goes through this file ---- */

/* The digest an ETag holds when it is a plain MD5 (a single-part object's,
 * a part's): 32 hex digits, either case, quoted or not.  Returns 1, or 0
 * for any other ETag (a multipart object's "...-N", an encrypted
 * object's). */
int s3_md5_etag(const char *etag, unsigned char md[16]);
/* The ETag S3 gives the object that a multipart upload of n parts with
 * these ETags makes: the MD5 of the parts' binary MD5s, then "-n", quoted
 * ("\"<32 hex digits>-n\"").  "" when a part's ETag is not an MD5. */
void s3_md5_multipart_etag(const char (*parts)[80], int n, char out[80]);

#endif
