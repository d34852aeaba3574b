/*
 * dp_tar.h - one member out of a tar file, gzip-compressed or not: what a
 * SageMaker training job leaves as model.tar.gz, for dp-eval --sagemaker.
 *
 * The reader takes ustar and GNU tar: names from the header (the ustar
 * prefix joined with '/'), or from a GNU long-name record ('L') before the
 * member; not a pax "path" record, nor sizes in base-256 (members of 8 GiB
 * and more: refused).  Header checksums are not checked (tar's own readers
 * differ on them); a file cut short, or not a tar file, is an error naming
 * the file and the member.  Everything it reads comes from outside:
 * tests/fuzz/tar.c fuzzes it.
 */
#ifndef DP_TAR_H
#define DP_TAR_H

#include "dp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Copy the first regular member of the tar file read from in (a
 * descriptor, read from where it stands; gzip or plain) whose name ends in
 * suffix to descriptor out, and its name to name (len bytes).  name_of
 * names the file in messages.  Returns 1 when a member was copied, 0 when
 * none matches, or a negative status ("model.tar.gz: a/m.safetensors:
 * cut short"). */
DP_EXPORT int dp_tar_extract(int in, const char *name_of, const char *suffix, int out, char *name,
			     size_t len, dp_err *e);

#ifdef __cplusplus
}
#endif
#endif
