/* pth.c - the restricted unpickler and PyTorch's file formats
 * (lib/train/ckpt/pickle.c, pth.c), on pickles written by hand: what a
 * state_dict needs is taken (a tensor over a storage, strided; memo; nested
 * dicts; an OrderedDict's state), and each way a hostile pickle tries to
 * run code, exhaust memory or read past a storage is refused with the
 * opcode, the name or the byte; then the legacy format's framing, and
 * dp_ckpt_export_pth read back. */
#define _GNU_SOURCE
#include "train/ckpt/pth_impl.h"
#include "tap.h"

#include <stdlib.h>
#include <unistd.h>

/* Unpickle a pickle given as bytes; returns 0/the status, message in e. */
static int load(const char *p, size_t n, pk_result *r, dp_err *e)
{
	return pk_load((const uint8_t *)p, n, "t.pkl", r, e);
}

#define LOAD(lit, r, e) load(lit, sizeof lit - 1, r, e)

static void refused(const char *what, const char *p, size_t n, const char *want)
{
	pk_result r;
	dp_err e = {0};
	int rc = load(p, n, &r, &e);
	ok(rc < 0, "refused: %s", what);
	like(e.msg, want, "... says so: %s", what);
	if (rc == 0)
		pk_free(&r);
}

#define REFUSED(what, lit, want) refused(what, lit, sizeof lit - 1, want)

/* A storage pid: ('storage', torch.FloatStorage, KEY, 'cpu', NUMEL) then BINPERSID. */
#define PID(key, numel) "(X\x07\0\0\0storage" "ctorch\nFloatStorage\nX\1\0\0\0" key "X\3\0\0\0cpuK" numel "tQ"
/* _rebuild_tensor_v2(PID, offset, size, stride, False, OrderedDict()) */
#define V2(pid, off, size, stride) \
	"ctorch._utils\n_rebuild_tensor_v2\n(" pid "K" off size stride \
	"\x89" "ccollections\nOrderedDict\n)Rt" "R"

static void test_taken(void)
{
	pk_result r;
	dp_err e = {0};
	/* an OrderedDict {'w': 2x3 tensor, strides (1, 2): a transpose} over a
	 * storage of 6 floats, the dict's __dict__ set by BUILD, memo used */
	static const char sd[] = "\x80\x02" "ccollections\nOrderedDict\nq\x00)Rq\x01"
		"X\x01\0\0\0w" V2(PID("0", "\x06"), "\x00", "K\x02K\x03\x86", "K\x01K\x02\x86")
		"q\x02" "s" "X\x01\0\0\0v" "h\x02" "s"
		"}X\x09\0\0\0_metadata}sb.";
	int rc = LOAD(sd, &r, &e);
	is_int(rc, 0, "a state_dict: taken (%s)", e.msg);
	if (rc)
		return;
	ok(r.top->kind == PK_DICT && r.top->n == 2, "... a dict of two items");
	const pk_val *t = r.top->v[1];
	ok(t->kind == PK_TENSOR && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3 &&
		   t->stride[0] == 1 && t->stride[1] == 2 && t->storage->numel == 6 &&
		   t->storage->dtype == DP_DT_F32,
	   "... a tensor: shape, strides, its storage's type and size");
	ok(r.top->v[3] == t, "... the memo gives the same tensor again (BINGET)");
	is_int(r.used, sizeof sd - 1, "... the pickle ends at its STOP");
	pk_free(&r);
	/* a dict holding itself (a cycle through the memo) is a value like another */
	rc = LOAD("}q\x00K\x01h\x00s.", &r, &e);
	ok(rc == 0 && r.top->v[1] == r.top, "a dict holding itself: taken, nothing walks it");
	if (rc == 0)
		pk_free(&r);
	/* protocol 4: FRAME, SHORT_BINUNICODE, MEMOIZE, STACK_GLOBAL */
	rc = LOAD("\x80\x04\x95\x10\0\0\0\0\0\0\0\x8c\x0b" "collections\x94\x8c\x0bOrderedDict\x94\x93)R.", &r, &e);
	ok(rc == 0 && r.top->kind == PK_DICT, "protocol 4's opcodes: taken (%s)", e.msg);
	if (rc == 0)
		pk_free(&r);
	/* LONG1 of 8 bytes, negative; BINFLOAT */
	rc = LOAD("\x8a\x08\xff\xff\xff\xff\xff\xff\xff\xff" "G\x3f\xf8\0\0\0\0\0\0\x86.", &r, &e);
	ok(rc == 0 && r.top->v[0]->i == -1 && r.top->v[1]->f == 1.5, "LONG1 -1 and BINFLOAT 1.5");
	if (rc == 0)
		pk_free(&r);
}

static void test_refused(void)
{
	REFUSED("os.system", "\x80\x02" "cos\nsystem\nX\x02\0\0\0lsR.", "os.system is not allowed");
	REFUSED("builtins.eval by STACK_GLOBAL", "\x8c\x08" "builtins\x8c\x04" "eval\x93.",
		"builtins.eval is not allowed");
	REFUSED("a name with an escape in it", "cos\x1b]0;x\nsystem\n.", "$'os\\x1b]0;x'.system");
	REFUSED("INST", "(X\x01\0\0\0aios\nsystem\n.", "opcode INST is not allowed");
	REFUSED("OBJ", "(cos\nsystem\no.", "os.system is not allowed");
	REFUSED("a protocol-0 PUT", "}p0\n.", "opcode PUT");
	REFUSED("calling a storage type", "ctorch\nFloatStorage\n)R.", "FloatStorage called with arguments");
	REFUSED("REDUCE of a dict", "})R.", "not a callable: dict");
	REFUSED("NEWOBJ of an OrderedDict", "ccollections\nOrderedDict\n)\x81.", "NEWOBJ of anything but a Parameter");
	REFUSED("BUILD of a list", "]}b.", "BUILD of list");
	REFUSED("APPEND to a dict", "}K\x01" "a.", "APPEND to dict");
	REFUSED("SETITEM with a list key", "}]K\x01s.", "a dict key that is list");
	REFUSED("an integer of 9 bytes", "\x8a\x09\1\2\3\4\5\6\7\x08\x09.", "an integer of 9 bytes");
	REFUSED("a memo index past the limit", "}r\0\0\x10\0.", "memo index 1048576");
	REFUSED("a memo entry never set", "h\x05.", "memo entry 5 was never set");
	REFUSED("a string past the end", "X\xff\xff\xff\x7f" "abc.", "past the end");
	REFUSED("no STOP", "}}}", "ends before its STOP");
	REFUSED("STOP on an empty stack", ".", "stack empty");
	REFUSED("a mark, then STOP", "K\x01(.", "stack empty");
	REFUSED("TUPLE without a mark", "K\x01t.", "no mark");
	REFUSED("protocol 9", "\x80\x09.", "protocol 9");
	REFUSED("a persistent id of another kind", "(X\x06\0\0\0moduletQ.", "not a storage's");
	REFUSED("a tensor past its storage", V2(PID("0", "\x06"), "\x01", "K\x02K\x03\x86", "K\x03K\x01\x86") ".",
		"past the end of its storage '0' (element 6 of 6)");
	REFUSED("a tensor of a huge stride",
		V2(PID("0", "\x06"), "\x00", "K\x02\x85", "\x8a\x08\0\0\0\0\0\0\0\x7f\x85") ".", "too large");
	REFUSED("one storage key of two sizes", "(" PID("0", "\x06") PID("0", "\x07") "t.",
		"storage '0' given twice");
	REFUSED("a tensor of 9 dimensions",
		V2(PID("0", "\x06"), "\x00", "(K\1K\1K\1K\1K\1K\1K\1K\1K\1t", "(K\1K\1K\1K\1K\1K\1K\1K\1K\1t") ".",
		"a tensor of the wrong form");
	/* a pickle of many values: bounded */
	size_t n = 3u << 20;
	char *many = malloc(n + 1);
	memset(many, ')', n);
	many[n] = '.';
	refused("3 million values", many, n + 1, "more than 1048576 values");
	free(many);
}

/* The legacy format's framing, by hand: magic, protocol version, sys_info,
 * the object, the keys, the storages. */
static void test_legacy(void)
{
	static const char head[] = "\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19."
				   "\x80\x02M\xe9\x03.\x80\x02}.";
	static const char obj[] = "\x80\x02}X\1\0\0\0w"
		V2("(X\x07\0\0\0storagectorch\nFloatStorage\nX\1\0\0\0" "0X\6\0\0\0cuda:0K\x04NtQ", "\x00",
		   "K\x04\x85", "K\x01\x85") "s.";
	static const char keys[] = "\x80\x02]X\1\0\0\0" "0a.";
	float vals[4] = {1.5f, -2, 0.25f, 8};
	uint64_t count = 4;
	size_t len = 0;
	uint8_t buf[1024];
#define ADD(p, n) (memcpy(buf + len, p, n), len += (n))
	ADD(head, sizeof head - 1);
	ADD(obj, sizeof obj - 1);
	ADD(keys, sizeof keys - 1);
	ADD(&count, 8);
	ADD(vals, sizeof vals);
	dp_err e = {0};
	dp_st *s = dp_st_open_mem(buf, len, "l.pth", &e);
	ok(s != NULL, "legacy format: read (%s)", e.msg);
	if (s) {
		const dp_st_tensor *t = dp_st_find(s, "w");
		ok(t && t->dtype == DP_DT_F32 && t->ndim == 1 && t->shape[0] == 4 &&
			   !memcmp(t->data, vals, sizeof vals),
		   "... its tensor, from the storage after the keys");
		is_str(dp_st_format(s), "pth", "... format pth");
		size_t n;
		ok(dp_st_bytes(s, &n) && n == len, "... dp_st_bytes gives the file's own bytes");
		dp_st_close(s);
	}
	s = dp_st_open_mem(buf, len - 1, "cut.pth", &e);
	ok(!s, "legacy format cut short: refused");
	like(e.msg, "storage '0' at byte", "... naming the storage");
	count = 5;
	memcpy(buf + len - 4 * 4 - 8, &count, 8);
	s = dp_st_open_mem(buf, len, "n.pth", &e);
	ok(!s, "a storage's count that is not the object's: refused");
	like(e.msg, "5 elements, not what the object says", "... says so");
	dp_st_close(s);
}

/* dp_ckpt_export_pth, read back by dp_st_open. */
static void test_export(void)
{
	char dir[] = "/tmp/dppth.XXXXXX", path[64];
	if (!mkdtemp(dir))
		return;
	snprintf(path, sizeof path, "%s/w.pth", dir);
	float w[6] = {1, 2, 3, 4, 5, 6};
	int64_t nbt = 42;
	uint16_t h[2] = {0x3c00, 0xc000}; /* 1, -2 in float16 */
	dp_st_writer *wr = dp_st_writer_new();
	dp_st_add(wr, "0.weight", DP_DT_F32, 2, (int64_t[]){2, 3}, w);
	dp_st_add(wr, "1.num_batches_tracked", DP_DT_I64, 0, NULL, &nbt);
	dp_st_add(wr, "h", DP_DT_F16, 1, (int64_t[]){2}, h);
	char st[64];
	snprintf(st, sizeof st, "%s/w.st", dir);
	dp_err e = {0};
	ok(dp_st_write(wr, st, &e) == 0, "a safetensors file");
	dp_st_writer_free(wr);
	dp_st *a = dp_st_open(st, &e);
	ok(a && dp_ckpt_export_pth(a, path, &e) == 0, "exported as .pth (%s)", e.msg);
	dp_st *b = dp_st_open(path, &e);
	ok(b != NULL, "... read back (%s)", e.msg);
	for (int i = 0; a && b && i < dp_st_count(a); i++) {
		const dp_st_tensor *x = dp_st_at(a, i), *y = dp_st_find(b, x->name);
		dp_st_diff d;
		ok(y && dp_st_diff_tensors(x, y, &d) == 0 && d.ndiff == 0, "... %s the same", x->name);
	}
	dp_st_close(a);
	dp_st_close(b);
	unlink(st);
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	test_taken();
	test_refused();
	test_legacy();
	test_export();
	return done_testing();
}
