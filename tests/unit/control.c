/* control.c - training control (dp_train.h: dp_control_*) on scripted
 * metric sequences, each worked out by hand from Keras' documented rules
 * (EarlyStopping, ReduceLROnPlateau, ModelCheckpoint(save_best_only));
 * tests/control.t compares the same code with a transcription of Keras'
 * callbacks on random sequences.  Also: the settings' parsers, their text
 * read back, and the state's text read back bit for bit. */
#define _GNU_SOURCE
#include "dp_train.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>

/* The epoch (0-based) at which early stopping fires on vals, or -1. */
static int stop_at(const dp_control_conf *c, const double *vals, int n)
{
	dp_control_state s;
	dp_control_result r;
	dp_control_start(c, 1, &s);
	for (int i = 0; i < n; i++) {
		dp_control_epoch(c, &s, (uint64_t)i, vals[i], &r);
		if (r.stop)
			return i;
	}
	return -1;
}

static dp_control_conf es(const char *spec, const char *monitor, const char *mode)
{
	dp_control_conf c;
	dp_err e;
	dp_control_init(&c);
	if (dp_control_monitor(&c, monitor, mode, &e) < 0 || dp_control_early_stop(&c, spec, &e) < 0)
		printf("# %s\n", e.msg);
	return c;
}

static void test_early_stopping(void)
{
	/* patience 3: three epochs in a row without improvement */
	const double a[] = {1.0, 0.9, 0.95, 0.92, 0.91, 0.5};
	dp_control_conf c = es("patience=3", "val_loss", NULL);
	is_int(stop_at(&c, a, 6), 4, "patience 3: stops after the third epoch without improvement");
	c = es("3", "val_loss", NULL);
	is_int(stop_at(&c, a, 6), 4, "a bare number is the patience");
	/* min_delta: an improvement smaller than it does not count */
	const double b[] = {1.0, 0.95, 0.5};
	c = es("patience=1,min_delta=0.1", "val_loss", NULL);
	is_int(stop_at(&c, b, 3), 1, "min_delta 0.1: 0.05 better is no improvement");
	c = es("patience=1,min_delta=0.01", "val_loss", NULL);
	is_int(stop_at(&c, b, 3), -1, "min_delta 0.01: 0.05 better is one");
	/* patience 0: the first epoch without improvement, never epoch 0 */
	const double d[] = {1.0, 1.0, 0.5};
	c = es("patience=0", "val_loss", NULL);
	is_int(stop_at(&c, d, 3), 1, "patience 0: the first epoch that does not improve");
	/* start_from_epoch: the first epochs are not watched */
	const double f[] = {1.0, 2.0, 3.0, 4.0, 3.5};
	c = es("patience=0,start_from_epoch=2", "val_loss", NULL);
	is_int(stop_at(&c, f, 5), 3, "start_from_epoch 2: watching from epoch 2 (0-based)");
	/* baseline: improvements that do not beat it leave the wait running,
	 * but only an epoch without improvement stops */
	const double g[] = {0.9, 0.8, 0.7, 0.75, 0.4};
	c = es("patience=2,baseline=0.5", "val_loss", NULL);
	is_int(stop_at(&c, g, 5), 3, "baseline 0.5 never beaten: stops at the first non-improvement past the patience");
	const double h[] = {0.4, 0.45, 0.45, 0.3};
	is_int(stop_at(&c, h, 4), 2, "baseline beaten at epoch 0: the wait starts there");
	/* max mode, auto for accuracy */
	const double acc[] = {0.5, 0.6, 0.6, 0.59, 0.7};
	c = es("patience=2", "val_accuracy", NULL);
	is_int(c.mode, DP_MODE_MAX, "val_accuracy: auto is max");
	is_int(stop_at(&c, acc, 5), 3, "max mode: two epochs not above 0.6");
	c = es("patience=2", "val_accuracy", "min");
	is_int(stop_at(&c, acc, 5), 2, "mode min given: the rising accuracy never improves");
	c = es("patience=1", "val_f1_macro", "auto");
	is_int(c.mode, DP_MODE_MAX, "val_f1_macro: auto is max");
	c = es("patience=1", "val_mse", "auto");
	is_int(c.mode, DP_MODE_MIN, "val_mse: auto is min");
	/* NaN: never an improvement */
	const double n[] = {1.0, NAN, NAN};
	c = es("patience=2", "val_loss", NULL);
	is_int(stop_at(&c, n, 3), 2, "a NaN is no improvement");
	/* after it fired, nothing more */
	dp_control_state s;
	dp_control_result r;
	c = es("patience=0", "val_loss", NULL);
	dp_control_start(&c, 1, &s);
	dp_control_epoch(&c, &s, 0, 1.0, &r);
	dp_control_epoch(&c, &s, 1, 2.0, &r);
	ok(r.stop && s.stopped && s.stopped_epoch == 1, "stopped at epoch 1, in the state");
	dp_control_epoch(&c, &s, 2, 3.0, &r);
	ok(!r.stop && s.stopped_epoch == 1, "... and it does not fire again");
}

/* ReduceLROnPlateau: the rates after each epoch of vals. */
static void rates(const char *spec, const double *vals, int n, double lr0, double *out)
{
	dp_control_conf c;
	dp_control_state s;
	dp_control_result r;
	dp_err e;
	dp_control_init(&c);
	if (dp_control_plateau(&c, spec, &e) < 0)
		printf("# %s\n", e.msg);
	dp_control_start(&c, lr0, &s);
	for (int i = 0; i < n; i++) {
		dp_control_epoch(&c, &s, (uint64_t)i, vals[i], &r);
		out[i] = s.lr;
		if (r.reduced && (r.old_lr != (i ? out[i - 1] : lr0) || r.new_lr != s.lr))
			printf("# epoch %d: result says %g -> %g\n", i, r.old_lr, r.new_lr);
	}
}

static void test_plateau(void)
{
	double v[11], lr[11];
	for (int i = 0; i < 11; i++)
		v[i] = 1.0;
	/* factor 0.5, patience 2, cooldown 1, min_lr 0.1: a reduction every
	 * two epochs after the first (the cooldown's epoch resets the wait but
	 * counts towards the next), floored at min_lr, then no more */
	rates("factor=0.5,patience=2,cooldown=1,min_lr=0.1,min_delta=0", v, 11, 1.0, lr);
	const double want[11] = {1, 1, 0.5, 0.5, 0.25, 0.25, 0.125, 0.125, 0.1, 0.1, 0.1};
	int same = 1;
	for (int i = 0; i < 11; i++)
		same &= lr[i] == want[i];
	ok(same, "factor 0.5, patience 2, cooldown 1, min_lr 0.1 on a flat metric");
	if (!same)
		for (int i = 0; i < 11; i++)
			printf("#   epoch %d: %g, want %g\n", i, lr[i], want[i]);
	/* cooldown 0: every patience epochs */
	rates("factor=0.1,patience=3", v, 7, 1.0, lr);
	ok(lr[2] == 1.0 && lr[3] == 0.1 && lr[5] == 0.1 && fabs(lr[6] - 0.01) < 1e-15,
	   "patience 3, no cooldown: at epochs 3 and 6 (0-based)");
	/* min_delta 1e-4 (Keras' default): 5e-5 better is no improvement */
	const double w[] = {1.0, 1.0 - 5e-5, 1.0 - 1e-4 - 1e-5, 1.0 - 2e-4 - 2e-5};
	rates("patience=1,factor=0.5", w, 4, 1.0, lr);
	ok(lr[1] == 0.5 && lr[2] == 0.5 && lr[3] == 0.5, "min_delta 1e-4 by default");
	rates("patience=2,factor=0.5,min_delta=0", w, 4, 1.0, lr);
	ok(lr[3] == 1.0, "min_delta 0: every smaller value is an improvement");
	/* a bare number is the patience; settings refused */
	dp_control_conf c;
	dp_err e;
	dp_control_init(&c);
	ok(dp_control_plateau(&c, "4", &e) == 0 && c.rlr_patience == 4 && c.rlr_factor == 0.1,
	   "'4': patience 4, factor 0.1");
	ok(dp_control_plateau(&c, "factor=1", &e) < 0, "factor 1 refused: %s", e.msg);
	ok(dp_control_plateau(&c, "factor=0", &e) < 0, "factor 0 refused: %s", e.msg);
	ok(dp_control_plateau(&c, "patiense=3", &e) < 0 && strstr(e.msg, "patiense"), "a misspelt key named: %s", e.msg);
	ok(dp_control_early_stop(&c, "patience=-1", &e) < 0, "patience -1 refused: %s", e.msg);
	ok(dp_control_early_stop(&c, "min_delta=nan", &e) < 0, "min_delta nan refused: %s", e.msg);
	ok(dp_control_monitor(&c, "loss", NULL, &e) < 0, "monitor without val_ refused: %s", e.msg);
	ok(dp_control_monitor(&c, "val_loss", "up", &e) < 0, "mode 'up' refused: %s", e.msg);
	ok(c.plateau == 1 && c.rlr_patience == 4, "a refused spec leaves the settings as they were");
}

static void test_save_best(void)
{
	dp_control_conf c;
	dp_control_state s;
	dp_control_result r;
	dp_err e;
	dp_control_init(&c);
	dp_control_monitor(&c, "val_loss", NULL, &e);
	c.save_best = 1;
	dp_control_start(&c, 1, &s);
	const double v[] = {0.5, 0.5, 0.4, 0.6, 0.3};
	const int want[] = {1, 0, 1, 0, 1};
	int got[5];
	for (int i = 0; i < 5; i++) {
		dp_control_epoch(&c, &s, (uint64_t)i, v[i], &r);
		got[i] = r.improved;
	}
	ok(!memcmp(got, want, sizeof got), "save_best: strictly better only (an equal value is not)");
	ok(s.have_best && s.best == 0.3 && s.best_epoch == 4, "the best and its epoch kept");
}

static void test_texts(void)
{
	dp_control_conf c, d;
	dp_err e;
	char a[256], b[256];
	dp_control_init(&c);
	dp_control_init(&d);
	ok(dp_control_early_stop(&c, "patience=3,min_delta=0.1,baseline=-0.25,start_from_epoch=2", &e) == 0,
	   "early stopping, every setting");
	ok(dp_control_plateau(&c, "factor=0.3,patience=2,cooldown=1,min_lr=1e-6,min_delta=0", &e) == 0,
	   "plateau, every setting");
	dp_control_early_stop_text(&c, a, sizeof a);
	dp_control_plateau_text(&c, b, sizeof b);
	is_str(a, "patience=3,min_delta=0.1,baseline=-0.25,start_from_epoch=2", "early stopping as text");
	is_str(b, "patience=2,factor=0.3,cooldown=1,min_lr=1e-06,min_delta=0", "plateau as text");
	ok(dp_control_early_stop(&d, a, &e) == 0 && dp_control_plateau(&d, b, &e) == 0 &&
	   d.es_patience == 3 && d.es_min_delta == 0.1 && d.es_baseline == -0.25 && d.es_has_baseline &&
	   d.es_start_from_epoch == 2 && d.rlr_factor == 0.3 && d.rlr_min_lr == 1e-6 &&
	   d.rlr_cooldown == 1 && d.rlr_min_delta == 0,
	   "the texts read back to the same settings");
	dp_control_init(&d);
	is_str(dp_control_early_stop_text(&d, a, sizeof a), "", "off: empty");

	/* the state: every field, awkward doubles, back bit for bit */
	dp_control_state s, t;
	memset(&s, 0, sizeof s);
	s.lr = 0.1 + 0.2, s.es_best = -INFINITY, s.rlr_best = 1.0 / 3, s.best = 5e-324;
	s.es_wait = 7, s.es_best_epoch = 3, s.stopped = 1, s.stopped_epoch = 9, s.rlr_wait = 2;
	s.rlr_cooldown = 1, s.have_best = 1, s.best_epoch = 4;
	char *txt = dp_control_state_format(&s, &e);
	ok(txt != NULL, "state as text: %s", txt ? txt : e.msg);
	memset(&t, 0xff, sizeof t);
	ok(dp_control_state_parse(&t, txt, &e) == 0, "... parsed");
	ok(t.lr == s.lr && t.es_best == s.es_best && t.rlr_best == s.rlr_best && t.best == s.best &&
	   t.es_wait == 7 && t.es_best_epoch == 3 && t.stopped == 1 && t.stopped_epoch == 9 &&
	   t.rlr_wait == 2 && t.rlr_cooldown == 1 && t.have_best == 1 && t.best_epoch == 4,
	   "every field back, the doubles bit for bit");
	free(txt);
	ok(dp_control_state_parse(&t, "lr=1", &e) < 0 && strstr(e.msg, "no es_wait"), "a missing key: %s", e.msg);
	ok(dp_control_state_parse(&t, "lr=x,", &e) < 0 && strstr(e.msg, "lr is 'x'"), "a bad value: %s", e.msg);
	ok(dp_control_state_parse(&t, "bogus=1", &e) < 0 && strstr(e.msg, "bogus"), "an unknown key: %s", e.msg);
}

int main(void)
{
	test_early_stopping();
	test_plateau();
	test_save_best();
	test_texts();
	return done_testing();
}
