/*
 * onnxtool - libdp's ONNX writer on one checkpoint, for tests/onnx.t
 * (until dp-ckpt export --format onnx drives it):
 *
 *   onnxtool CHECKPOINT OUT.onnx [CLASS,CLASS,...]
 */
#include "dp_ckpt.h"
#include "dp_onnx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	if (argc < 3 || argc > 4) {
		fprintf(stderr, "usage: onnxtool CHECKPOINT OUT.onnx [CLASSES]\n");
		return 2;
	}
	dp_err e;
	dp_st *ck = dp_st_open(argv[1], &e);
	if (!ck) {
		fprintf(stderr, "onnxtool: %s\n", e.msg);
		return 1;
	}
	const char *names[1024];
	dp_onnx_opts o = {0};
	char *text = argc == 4 ? strdup(argv[3]) : NULL;
	if (text) {
		for (char *s = NULL, *t = strtok_r(text, ",", &s); t && o.nclasses < 1024;
		     t = strtok_r(NULL, ",", &s))
			names[o.nclasses++] = t;
		o.classes = names;
	}
	int rc = dp_onnx_write(ck, &o, argv[2], &e);
	if (rc < 0)
		fprintf(stderr, "onnxtool: %s\n", e.msg);
	free(text);
	dp_st_close(ck);
	return rc < 0;
}
