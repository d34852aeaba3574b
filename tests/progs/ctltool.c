/*
 * ctltool - libdp's training control (dp_control_*, dp_train.h) over a
 * scripted metric sequence, for tests/control.t to compare with a
 * transcription of Keras' callbacks (tests/keras_ref.py).
 *
 *   ctltool MONITOR MODE EARLY_STOP PLATEAU LR < values
 * EARLY_STOP and PLATEAU are the option texts ("-": off); one value a
 * line ("nan" allowed); for each epoch (0-based) one line:
 *   EPOCH LR STOP BEST_SAVED
 * LR in %.17g, STOP and BEST_SAVED 0 or 1.  Stops reading once stopped.
 */
#include "dp_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	dp_control_conf c;
	dp_control_state s;
	dp_control_result r;
	dp_err e;
	if (argc != 6) {
		fprintf(stderr, "usage: ctltool MONITOR MODE EARLY_STOP PLATEAU LR < values\n");
		return 2;
	}
	dp_control_init(&c);
	if (dp_control_monitor(&c, argv[1], argv[2], &e) < 0 ||
	    dp_control_early_stop(&c, strcmp(argv[3], "-") ? argv[3] : "", &e) < 0 ||
	    dp_control_plateau(&c, strcmp(argv[4], "-") ? argv[4] : "", &e) < 0) {
		fprintf(stderr, "ctltool: %s\n", e.msg);
		return 1;
	}
	c.save_best = 1;
	dp_control_start(&c, strtod(argv[5], NULL), &s);
	char line[128];
	for (uint64_t epoch = 0; fgets(line, sizeof line, stdin); epoch++) {
		dp_control_epoch(&c, &s, epoch, strtod(line, NULL), &r);
		printf("%llu %.17g %d %d\n", (unsigned long long)epoch, s.lr, r.stop, r.improved);
		if (r.stop)
			break;
	}
	return 0;
}
