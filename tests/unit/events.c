/* events.c - TensorBoard events (dp_events.h): the encodings against bytes
 * written by hand from the .proto field numbers, every scalar form of the
 * reader (simple_value; tensors of float, double, half, bfloat16, int32 and
 * int64, in value lists or tensor_content, of shape [] or [1,1]) and what
 * is not one, the file writer's names; and dp_shell_quote/dp_shell_run(_vars). */
#define _GNU_SOURCE
#include "dp_events.h"
#include "dp_record.h"
#include "tap.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* A Summary holding one Value whose body is v[0..n). */
static int one(const uint8_t *v, size_t n, dp_event *ev)
{
	uint8_t buf[256];
	size_t k = 0;
	buf[k++] = 0x2a; /* Event.summary = 5, length-delimited */
	buf[k++] = (uint8_t)(n + 2);
	buf[k++] = 0x0a; /* Summary.value = 1 */
	buf[k++] = (uint8_t)n;
	memcpy(buf + k, v, n);
	dp_err e;
	return dp_event_parse(ev, buf, k + n, &e);
}

static void scalar_case(const char *name, const uint8_t *v, size_t n, double want)
{
	dp_event ev = DP_EVENT_INIT;
	int rc = one(v, n, &ev);
	ok(rc == 0 && ev.nscalars == 1 && ev.scalars[0].value == want && ev.scalars[0].tag_len == 1 &&
		   ev.scalars[0].tag[0] == 't',
	   "%s: one scalar %g (got %zu: %g)", name, want, ev.nscalars,
	   ev.nscalars ? ev.scalars[0].value : NAN);
	dp_event_free(&ev);
}

static void other_case(const char *name, const uint8_t *v, size_t n)
{
	dp_event ev = DP_EVENT_INIT;
	int rc = one(v, n, &ev);
	ok(rc == 0 && ev.nscalars == 0 && ev.nother == 1, "%s: not a scalar", name);
	dp_event_free(&ev);
}

int main(void)
{
	/* ---- encoding, byte for byte ---- */
	dp_buf s = DP_BUF_INIT, ev = DP_BUF_INIT;
	dp_summary_scalar(&s, "ab", 1.0f);
	static const uint8_t want_s[] = {0x0a, 0x09, 0x0a, 0x02, 'a', 'b', 0x15, 0, 0, 0x80, 0x3f};
	ok(s.len == sizeof want_s && !memcmp(s.p, want_s, s.len), "Summary{Value{tag, simple_value}}");
	dp_event_encode(&ev, 2.0, 300, NULL, &s);
	static const uint8_t want_e[] = {0x09, 0, 0, 0, 0, 0, 0, 0, 0x40, 0x10, 0xac, 0x02, 0x2a, 11};
	ok(ev.len == sizeof want_e + s.len && !memcmp(ev.p, want_e, sizeof want_e) &&
		   !memcmp(ev.p + sizeof want_e, s.p, s.len),
	   "Event{wall_time, step, summary}");
	dp_buf_reset(&ev);
	dp_event_encode(&ev, 0.5, 0, DP_EVENTS_VERSION, NULL);
	ok(ev.len == 9 + 2 + 13 && ev.p[9] == 0x1a && ev.p[10] == 13 && !memcmp(ev.p + 11, "brain.Event:2", 13),
	   "the file_version event (step 0 left out)");

	dp_event e = DP_EVENT_INIT;
	dp_err err;
	dp_buf_reset(&ev);
	dp_buf_reset(&s);
	float x[] = {-1, 0, 1, 2, NAN, 3};
	dp_summary_histogram(&s, "h", x, 6, 4);
	dp_summary_scalar(&s, "loss", 0.25f);
	dp_event_encode(&ev, 1.5, -7, NULL, &s);
	ok(dp_event_parse(&e, ev.p, ev.len, &err) == 0 && e.step == -7 && e.wall_time == 1.5 &&
		   e.nscalars == 1 && e.nother == 1 && e.scalars[0].value == 0.25 && e.scalars[0].single,
	   "a histogram and a scalar read back: the scalar, one other, a negative step");

	/* ---- scalar forms (Value bodies by hand) ---- */
	static const uint8_t simple[] = {0x0a, 1, 't', 0x15, 0, 0, 0x20, 0x41};
	scalar_case("simple_value", simple, sizeof simple, 10);
	/* tensor = 8: dtype DT_FLOAT, float_val packed [2.5] */
	static const uint8_t tf[] = {0x0a, 1, 't', 0x42, 8, 0x08, 1, 0x2a, 4, 0, 0, 0x20, 0x40};
	scalar_case("DT_FLOAT float_val", tf, sizeof tf, 2.5);
	/* DT_FLOAT in tensor_content, shape [] */
	static const uint8_t tc[] = {0x0a, 1, 't', 0x42, 10, 0x08, 1, 0x12, 0, 0x22, 4, 0, 0, 0xc0, 0x3f};
	scalar_case("DT_FLOAT tensor_content", tc, sizeof tc, 1.5);
	/* DT_DOUBLE double_val unpacked (fixed64) */
	static const uint8_t td[] = {0x0a, 1, 't', 0x42, 11, 0x08, 2, 0x31, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f};
	scalar_case("DT_DOUBLE double_val", td, sizeof td, 1.0);
	/* DT_HALF half_val packed [0x3c00] = 1.0 */
	static const uint8_t th[] = {0x0a, 1, 't', 0x42, 7, 0x08, 19, 0x6a, 3, 0x80, 0xf8, 0x00};
	scalar_case("DT_HALF half_val", th, sizeof th, 1.0);
	/* DT_BFLOAT16 content 0x3fc0 = 1.5 */
	static const uint8_t tb[] = {0x0a, 1, 't', 0x42, 6, 0x08, 14, 0x22, 2, 0xc0, 0x3f};
	scalar_case("DT_BFLOAT16 tensor_content", tb, sizeof tb, 1.5);
	/* DT_INT64 int64_val packed [-5], shape [1,1] */
	static const uint8_t ti[] = {0x0a, 1, 't', 0x42, 24, 0x08, 9, 0x12, 8, 0x12, 2, 0x08, 1, 0x12, 2,
				     0x08, 1, 0x52, 10, 0xfb, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
				     0xff, 0x01};
	scalar_case("DT_INT64 int64_val, shape [1,1]", ti, sizeof ti, -5);
	/* DT_INT32 int_val unpacked 7, metadata plugin "scalars" */
	static const uint8_t tm[] = {0x0a, 1, 't', 0x4a, 11, 0x0a, 9, 0x0a, 7, 's', 'c', 'a', 'l', 'a', 'r',
				     's', 0x42, 4, 0x08, 3, 0x38, 7};
	scalar_case("DT_INT32 int_val, scalars plugin", tm, sizeof tm, 7);
	/* not scalars */
	static const uint8_t t2[] = {0x0a, 1, 't', 0x42, 18, 0x08, 1, 0x12, 4, 0x12, 2, 0x08, 2, 0x2a, 8,
				     0, 0, 0x80, 0x3f, 0, 0, 0, 0x40};
	other_case("a tensor of shape [2]", t2, sizeof t2);
	static const uint8_t tp[] = {0x0a, 1, 't', 0x4a, 8, 0x0a, 6, 0x0a, 4, 't', 'e', 'x', 't', 0x42, 4,
				     0x08, 3, 0x38, 7};
	other_case("a one-number tensor of the text plugin", tp, sizeof tp);
	static const uint8_t tsv[] = {0x0a, 1, 't', 0x42, 5, 0x08, 7, 0x42, 1, 'x'};
	other_case("a DT_STRING tensor", tsv, sizeof tsv);
	static const uint8_t img[] = {0x0a, 1, 't', 0x22, 0};
	other_case("an image", img, sizeof img);
	static const uint8_t bad[] = {0x0a, 1, 't', 0x10, 1};
	dp_event b = DP_EVENT_INIT;
	ok(one(bad, sizeof bad, &b) == DP_EDATA, "simple_value as a varint: malformed");
	dp_event_free(&b);

	/* ---- detection and the file writer ---- */
	char dir[] = "/tmp/dp-events-XXXXXX";
	ok(mkdtemp(dir) != NULL, "a scratch directory");
	char sub[64];
	snprintf(sub, sizeof sub, "%s/a/b", dir);
	dp_events *w1 = dp_events_create(sub, &err), *w2 = dp_events_create(sub, &err);
	ok(w1 && w2, "two writers in a directory made on the way");
	if (w1 && w2) {
		const char *p1 = dp_events_path(w1), *p2 = dp_events_path(w2);
		ok(strstr(p1, "/a/b/events.out.tfevents.") && strlen(p2) == strlen(p1) + 2 &&
			   !strncmp(p1, p2, strlen(p1)) && !strcmp(p2 + strlen(p1), ".1"),
		   "names: events.out.tfevents.TIME.HOST, then .1 (%s, %s)", p1, p2);
		dp_summary_scalar(dp_events_summary(w1), "loss", 0.5f);
		ok(dp_events_write(w1, 10, 0, &err) == 0, "write an event");
		ok(dp_events_write(w1, 11, 0, &err) == 0, "an empty summary: nothing written, no error");
		uint8_t head[4096];
		FILE *f = fopen(p1, "rb");
		size_t n = f ? fread(head, 1, sizeof head, f) : 0;
		if (f)
			fclose(f);
		ok(n > 0 && dp_events_detect(head, n), "the file is detected as events (%zu bytes)", n);
		ok(n > 30 && !dp_events_detect(head, 30), "a head cut inside the first record is not");
		head[14] ^= 1;
		ok(!dp_events_detect(head, n), "nor one with a bad CRC");
		dp_reader *r = dp_reader_open_path(p1, NULL, &err);
		dp_record rec;
		int k = 0;
		while (r && dp_reader_next(r, &rec, &err) > 0)
			k++;
		dp_reader_close(r);
		is_int(k, 2, "two records: the version and the one event");
		unlink(p1);
		unlink(p2);
	}
	ok(dp_events_close(w1, &err) == 0 && dp_events_close(w2, &err) == 0, "closed");
	rmdir(sub);
	snprintf(sub, sizeof sub, "%s/a", dir);
	rmdir(sub);
	rmdir(dir);

	/* ---- plugin values and the run folder ---- */
	dp_buf t = DP_BUF_INIT;
	dp_summary_text(&t, "s", "hi");
	/* Value { tag "s"; metadata { plugin_data { plugin_name "text" } };
	 * tensor { dtype DT_STRING; tensor_shape {}; string_val "hi" } } */
	static const uint8_t want_t[] = {0x0a, 0x17, 0x0a, 0x01, 's', 0x4a, 0x08, 0x0a, 0x06, 0x0a, 0x04,
					 't', 'e', 'x', 't', 0x42, 0x08, 0x08, 0x07, 0x12, 0x00, 0x42,
					 0x02, 'h', 'i'};
	ok(t.len == sizeof want_t && !memcmp(t.p, want_t, t.len),
	   "Summary{Value{tag, metadata{plugin text}, tensor{DT_STRING, scalar, string_val}}}");
	dp_buf_free(&t);
	char run[64];
	snprintf(run, sizeof run, "%s/run", dir);
	mkdir(dir, 0700);
	dp_tb_run *tr = dp_tb_run_open(run, &err);
	ok(tr != NULL, "a run folder");
	if (tr) {
		const char *kv[] = {"lr", "0.1", "model", "dense:4", "flag", "true", "empty", "", NULL};
		ok(dp_tb_run_settings(tr, "dp-train --lr 0.1", kv, "nssn", &err) == 0, "its settings");
		const char *names[] = {"loss"};
		double v[] = {0.5};
		ok(dp_tb_run_epoch(tr, DP_TB_TRAIN, 0, names, v, 1, &err) == 0, "an epoch of train/");
		ok(dp_tb_run_epoch(tr, DP_TB_STEPS, 0, names, v, 1, &err) == DP_EARG,
		   "epochs go to train/ or validation/ only");
		ok(dp_tb_run_end(tr, 1, &err) == 0 && dp_tb_run_end(tr, 1, &err) == 0, "the end, once");
		char path[128];
		snprintf(path, sizeof path, "%s/train", run);
		struct stat st;
		ok(stat(path, &st) == 0 && S_ISDIR(st.st_mode), "train/ made at its first epoch");
		snprintf(path, sizeof path, "%s/validation", run);
		ok(stat(path, &st) < 0, "validation/ not made without an epoch of its own");
		ok(dp_tb_run_close(tr, &err) == 0, "closed");
		dp_buf cmd = DP_BUF_INIT;
		dp_buf_printf(&cmd, "rm -r '%s'", run);
		ok(dp_shell_run(cmd.p, NULL, -1, NULL, &err) == 0, "(cleaned up)");
		dp_buf_free(&cmd);
	}
	rmdir(dir);

	/* ---- shell commands ---- */
	dp_buf q = DP_BUF_INIT;
	dp_shell_quote(&q, "it's a $file");
	is_str(q.p, "'it'\\''s a $file'", "dp_shell_quote");
	dp_buf_reset(&q);
	dp_buf_addstr(&q, "test \"$(printf %s ");
	dp_shell_quote(&q, "it's a $file");
	dp_buf_addstr(&q, ")\" = \"$X\"");
	const char *env[] = {"X=it's a $file", NULL};
	int st = -1;
	ok(dp_shell_run(q.p, env, -1, &st, &err) == 0 && st == 0,
	   "a quoted word comes through the shell unchanged, as does the environment");
	ok(dp_shell_run("exit 3", NULL, -1, &st, &err) == DP_EIO && st == 3 &&
		   !strcmp(err.msg, "exited with status 3"),
	   "exit 3: %s", err.msg);
	ok(dp_shell_run("kill -TERM $$", NULL, -1, &st, &err) == DP_EIO && st == 128 + 15 &&
		   strstr(err.msg, "killed by signal 15"),
	   "killed: %s", err.msg);
	ok(dp_shell_run("read x", NULL, -1, &st, &err) == DP_EIO, "stdin is /dev/null: read ends");
	dp_shell_var vars[] = {{"epoch", "3", 0}, {"file", "it's a $file", 1}};
	ok(dp_shell_run_vars("test {epoch} = 3 && test {file} = \"$X_FILE\" && test \"$X_EPOCH\" = 3",
			     vars, 2, "X_", -1, &st, &err) == 0,
	   "a template's placeholders filled in, quoted or as they are, and in the environment");
	ok(dp_shell_run_vars("exit {epoch}", vars, 1, "X_", -1, &st, &err) == DP_EIO && st == 3,
	   "... its failure: %s", err.msg);
	dp_buf_free(&q);
	dp_buf_free(&s);
	dp_buf_free(&ev);
	dp_event_free(&e);
	return done_testing();
}
