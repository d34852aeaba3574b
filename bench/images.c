/*
 * images.c - bench/images.sh's own side: images/s of a loop over JPEG
 * files held in memory, on THREADS threads (file i to thread i % THREADS).
 *
 *   images transform THREADS ROUNDS FILE...   libdp's training transform:
 *       decode + RandomResizedCrop(224) + flip + normalise (dp_image_transform)
 *   images decode THREADS ROUNDS FILE...      the ceiling: tjDecompress2 to
 *       RGB at full size, nothing else
 * Prints images/s over all rounds.
 */
#include "dp_image.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

static struct {
	uint8_t **p;
	size_t *n;
	int nf, threads, rounds, decode;
} B;

static void *worker(void *arg)
{
	int id = (int)(intptr_t)arg;
	dp_image_dec *x = dp_image_dec_new();
	tjhandle tj = tjInitDecompress();
	dp_image_tf t;
	dp_image_tf_init(&t);
	t.channels = 3, t.height = 224, t.width = 224, t.crop = DP_CROP_RANDOM, t.flip = 1;
	t.scale = 1.0f / 255;
	float m[3] = {0.485f, 0.456f, 0.406f}, s[3] = {0.229f, 0.224f, 0.225f};
	memcpy(t.mean, m, sizeof m);
	memcpy(t.std, s, sizeof s);
	float *out = malloc(3 * 224 * 224 * sizeof *out);
	uint8_t *px = malloc((size_t)4096 * 4096 * 3);
	dp_err e;
	for (int r = 0; r < B.rounds; r++)
		for (int i = id; i < B.nf; i += B.threads) {
			if (B.decode) {
				int w, h, sub, cs;
				if (tjDecompressHeader3(tj, B.p[i], B.n[i], &w, &h, &sub, &cs) < 0 ||
				    tjDecompress2(tj, B.p[i], B.n[i], px, w, 0, h, TJPF_RGB, 0) < 0) {
					fprintf(stderr, "images: %s\n", tjGetErrorStr2(tj));
					exit(1);
				}
			} else if (dp_image_transform(x, B.p[i], B.n[i], &t, (uint64_t)r << 32 | i, out,
						      &e) < 0) {
				fprintf(stderr, "images: %s\n", e.msg);
				exit(1);
			}
		}
	free(out);
	free(px);
	tjDestroy(tj);
	dp_image_dec_free(x);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 5) {
		fprintf(stderr, "usage: images transform|decode THREADS ROUNDS FILE...\n");
		return 2;
	}
	B.decode = !strcmp(argv[1], "decode");
	B.threads = atoi(argv[2]);
	B.rounds = atoi(argv[3]);
	B.nf = argc - 4;
	B.p = calloc(B.nf, sizeof *B.p);
	B.n = calloc(B.nf, sizeof *B.n);
	for (int i = 0; i < B.nf; i++) {
		FILE *f = fopen(argv[4 + i], "rb");
		if (!f) {
			perror(argv[4 + i]);
			return 1;
		}
		fseek(f, 0, SEEK_END);
		B.n[i] = (size_t)ftell(f);
		rewind(f);
		B.p[i] = malloc(B.n[i]);
		if (fread(B.p[i], 1, B.n[i], f) != B.n[i])
			return 1;
		fclose(f);
	}
	pthread_t th[64];
	double t0 = dp_now();
	for (int i = 0; i < B.threads; i++)
		pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i);
	for (int i = 0; i < B.threads; i++)
		pthread_join(th[i], NULL);
	printf("%.0f\n", (double)B.nf * B.rounds / (dp_now() - t0));
	return 0;
}
