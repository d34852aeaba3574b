/*
 * tar.c - libFuzzer target: tar files, gzip or plain, from outside, as
 * dp-eval --sagemaker reads a training job's model.tar.gz (dp_tar.h).
 *
 * The input is a whole file.  Whatever it holds: a member copied is one
 * whose name ends in the suffix asked for, the copy is no larger than the
 * member's data could be (a gzip stream expands at most 1032 times), a
 * refusal says why; beyond those checks, no crash, leak or hang.
 */
#define _GNU_SOURCE
#include "dp_tar.h"
#include "fuzz.h"

#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int in = memfd_create("tar-in", MFD_CLOEXEC), out = memfd_create("tar-out", MFD_CLOEXEC);
	dp_err e = {0};
	CHECK(in >= 0 && out >= 0, "memfd_create");
	CHECK(dp_write_all(in, data, size, "memfd", &e) == 0 && lseek(in, 0, SEEK_SET) == 0, "memfd");
	char name[4096] = "";
	int rc = dp_tar_extract(in, "fuzz.tar.gz", ".safetensors", out, name, sizeof name, &e);
	struct stat st;
	CHECK(fstat(out, &st) == 0, "fstat");
	if (rc == 1) {
		size_t nl = strlen(name);
		CHECK(nl > 12 && !strcmp(name + nl - 12, ".safetensors"), "member '%s' copied", name);
		CHECK((uint64_t)st.st_size <= 1032 * (uint64_t)size + 512, "%lld bytes copied from %zu",
		      (long long)st.st_size, size);
	} else if (rc < 0) {
		CHECK(e.msg[0], "a refusal without a message");
		CHECK(!strncmp(e.msg, "fuzz.tar.gz: ", 13), "a message not naming the file: %s", e.msg);
	} else {
		CHECK(rc == 0, "rc %d", rc);
	}
	close(in);
	close(out);
	return 0;
}
