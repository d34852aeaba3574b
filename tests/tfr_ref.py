"""tfr_ref.py - the reference side of the tfr-cat tests, in Python.

Independent of libdp: TFRecord framing with a pure-Python CRC32C, and
tf.train.Example through Google's protobuf (Debian's python3-protobuf) on a
module compiled at test time with `protoc --python_out` from lib/records/example.proto.
Run by /usr/bin/python3 from tests/tfr-cat*.t:

  tfr_ref.py PBDIR gen FILE            write the tricky Examples (protobuf's serializer)
  tfr_ref.py PBDIR frames FILE         print the record count, checking both CRCs
  tfr_ref.py PBDIR compact FILE JSONL  check tfr-cat -j output against FILE
  tfr_ref.py PBDIR proto FILE JSONL    check --json=proto output against json_format
  tfr_ref.py PBDIR idx IMAGES LABELS FILE   check --encode idx output
  tfr_ref.py PBDIR bench FILE N        write N ~1 KiB MNIST-like Examples

Exit status 0 when everything matched; 1 with the first difference on stderr.
"""
import base64
import gzip
import json
import math
import os
import random
import struct
import sys
import zlib

sys.path.insert(0, sys.argv[1])
import example_pb2  # noqa: E402  (compiled by the test)
from google.protobuf import json_format  # noqa: E402

# tfr_frame.py lies beside this file (tests exec this file's text: DP_SRC)
sys.path.insert(1, os.path.dirname(os.path.abspath(__file__)) if "__file__" in globals()
                else os.path.join(os.environ.get("DP_SRC", "."), "tests"))
from tfr_frame import crc32c, frame, mask  # noqa: E402,F401


def load(path):
    raw = open(path, "rb").read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    elif len(raw) >= 2 and raw[0] & 0x0F == 8 and ((raw[0] << 8) | raw[1]) % 31 == 0 and not (
        len(raw) >= 12 and mask(crc32c(raw[:8])) == struct.unpack("<I", raw[8:12])[0]
    ):
        raw = zlib.decompress(raw)
    recs, i = [], 0
    while i < len(raw):
        (n,) = struct.unpack_from("<Q", raw, i)
        if mask(crc32c(raw[i : i + 8])) != struct.unpack_from("<I", raw, i + 8)[0]:
            sys.exit("length CRC mismatch at byte %d" % i)
        d = raw[i + 12 : i + 12 + n]
        if mask(crc32c(d)) != struct.unpack_from("<I", raw, i + 12 + n)[0]:
            sys.exit("data CRC mismatch at byte %d" % i)
        recs.append(d)
        i += 16 + n
    return recs


def with_lines(path, jsonl, encoding):
    """The records of path, each with its line of jsonl (tfr-cat's JSON
    output, one line a record); fails unless there are as many of each."""
    recs = load(path)
    lines = open(jsonl, encoding=encoding).read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) != len(recs):
        fail("%d lines for %d records" % (len(lines), len(recs)))
    return list(zip(recs, lines))


def varint(b, i):
    v = s = 0
    while True:
        x = b[i]
        i += 1
        v |= (x & 0x7F) << s
        s += 7
        if x < 0x80:
            return v, i


def fields(b):
    i = 0
    while i < len(b):
        tag, i = varint(b, i)
        wt = tag & 7
        if wt == 0:
            _, i = varint(b, i)
            yield tag >> 3, wt, None
        elif wt == 1:
            i += 8
            yield tag >> 3, wt, None
        elif wt == 5:
            i += 4
            yield tag >> 3, wt, None
        else:
            n, i = varint(b, i)
            yield tag >> 3, wt, b[i : i + n]
            i += n


def wire_names(rec):
    """Feature names in wire order of first appearance."""
    names = []
    for num, wt, fs in fields(rec):
        if num == 1 and wt == 2:
            for n2, w2, ent in fields(fs):
                if n2 == 1 and w2 == 2:
                    key = b""
                    for n3, w3, v in fields(ent):
                        if n3 == 1 and w3 == 2:
                            key = v
                    k = key.decode()
                    if k not in names:
                        names.append(k)
    return names


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def fail(msg):
    sys.stderr.write("tfr_ref: %s\n" % msg)
    sys.exit(1)


def sig_digits(token):
    """Significant digits of a JSON number token."""
    m = token.lower().lstrip("-").split("e")[0].replace(".", "").lstrip("0")
    return len(m.rstrip("0")) or 1


def shortest_digits(x):
    """The fewest significant digits that read back to float32 x: numpy's
    Dragon4 in unique mode, an independent shortest-digits algorithm."""
    import numpy
    m = numpy.format_float_scientific(numpy.float32(x), unique=True, trim="-")
    return sig_digits(m)


# ---- gen ------------------------------------------------------------------

def tricky():
    E = example_pb2.Example
    out = []

    def ex(feats, order=None):
        e = E()
        for name, kind, vals in feats:
            f = e.features.feature[name]
            if kind == "bytes":
                f.bytes_list.value.extend(vals)
            elif kind == "float":
                f.float_list.value.extend(vals)
                if not vals:
                    f.float_list.SetInParent()
            elif kind == "int64":
                f.int64_list.value.extend(vals)
                if not vals:
                    f.int64_list.SetInParent()
            elif kind == "bytes0":
                f.bytes_list.SetInParent()
            else:
                f.SetInParent()
        return e

    rnd = random.Random(5)
    floats = [0.0, -0.0, 0.5, 1.0, -1.25, 0.1, 1 / 3, 3.4028234663852886e38, 1.401298464324817e-45,
              1.1754943508222875e-38, 1e-5, 1e-4, 123456.0, 1234567.0, 1e16, 1e15, 16777216.0,
              float("inf"), float("-inf"), float("nan"), 2.5e-40, 7e-45, 0.30000001192092896]
    floats += [f32(rnd.uniform(-3, 3)) for _ in range(300)]
    floats += [f32(rnd.gauss(0, 1) * 10 ** rnd.randint(-30, 30)) for _ in range(300)]
    floats += [2.0 ** k for k in range(-149, 128)]  # powers of two, subnormals too
    floats += [-(2.0 ** k) for k in (-96, 87, 90)]
    floats = [f32(x) for x in floats]
    out.append(ex([("image", "bytes", [bytes(range(256)) * 3 + b"\x00\xff"]),
                   ("label", "int64", [3]),
                   ("x", "float", floats)]))
    out.append(ex([("ints", "int64", [0, 1, -1, 127, 128, 300, 2**31, -(2**31), 2**63 - 1, -(2**63)])]))
    out.append(ex([("empty_f", "float", []), ("empty_i", "int64", []), ("empty_b", "bytes0", []),
                   ("none", "none", None), ("e", "bytes", [b""])]))
    out.append(ex([("ünïcödé ☃ 𝄞", "bytes", [b"\xff\xfe", b"x"]),
                   ('quote " back \\ tab \t nl \n ctl \x01 del \x7f', "int64", [7]),
                   ("", "float", [1.5])]))
    out.append(E())  # no features field: zero bytes
    e = E()
    e.features.SetInParent()  # features present, empty
    out.append(e)
    out.append(ex([("b%03d" % i, "int64", [i]) for i in range(40)]))  # past the hash threshold
    # one feature each: compared verbatim with protobuf's own printer
    out.append(ex([("x", "float", floats)]))
    out.append(ex([("ünïcödé ☃ 𝄞 \x01\x7f\"", "bytes", [b"\xff\xfe", b"", b"abc"])]))
    out.append(ex([("i", "int64", [0, -1, 2**63 - 1, -(2**63)])]))
    out.append(ex([("n", "none", None)]))
    out.append(ex([("f", "float", [])]))
    for i in range(20):
        out.append(ex([("id", "bytes", [os.urandom(rnd.randint(0, 40))]),
                       ("v", "float", [f32(rnd.uniform(-1, 1)) for _ in range(rnd.randint(0, 5))]),
                       ("k", "int64", [rnd.randint(-(2**63), 2**63 - 1) for _ in range(rnd.randint(0, 3))])]))
    return [m.SerializeToString() for m in out]


def cmd_gen(path):
    with open(path, "wb") as f:
        for r in tricky():
            f.write(frame(r))


def cmd_bench(path, n):
    """MNIST-like: 840 image bytes, a label, 32 floats, a 12-byte id: ~1 KiB."""
    rnd = random.Random(1)
    base = []
    for i in range(256):
        e = example_pb2.Example()
        ft = e.features.feature
        ft["image"].bytes_list.value.append(bytes(rnd.getrandbits(8) for _ in range(840)))
        ft["label"].int64_list.value.append(rnd.randint(0, 9))
        ft["x"].float_list.value.extend(rnd.uniform(-1, 1) for _ in range(32))
        ft["id"].bytes_list.value.append(b"%012d" % i)
        base.append(frame(e.SerializeToString()))
    block = b"".join(base)
    with open(path, "wb") as f:
        for _ in range(n // 256):
            f.write(block)


# ---- compact -j -------------------------------------------------------------

def cmd_compact(path, jsonl):
    rows = with_lines(path, jsonl, "utf-8")
    nfloat = 0
    for idx, (rec, line) in enumerate(rows):
        m = example_pb2.Example.FromString(rec)
        pairs = json.loads(line, object_pairs_hook=lambda kv: kv)
        names = [k for k, _ in pairs]
        if names != wire_names(rec):
            fail("record %d: names %r, want %r" % (idx, names, wire_names(rec)))
        for name, val in pairs:
            f = m.features.feature[name]
            kind = f.WhichOneof("kind")
            if kind is None:
                if val != []:
                    fail("record %d %r: want {}, got %r" % (idx, name, val))
                continue
            short = kind.split("_")[0]
            if len(val) != 1 or val[0][0] != short:
                fail("record %d %r: want kind %s, got %r" % (idx, name, short, val))
            got = val[0][1]
            want = list(getattr(f, kind).value)
            if short == "bytes":
                got = [base64.b64decode(x, validate=True) for x in got]
                if got != want:
                    fail("record %d %r: bytes differ" % (idx, name))
            elif short == "int64":
                if got != want or not all(type(x) is int for x in got):
                    fail("record %d %r: int64 %r, want %r" % (idx, name, got, want))
            else:
                if len(got) != len(want):
                    fail("record %d %r: %d floats, want %d" % (idx, name, len(got), len(want)))
                for g, w in zip(got, want):
                    nfloat += 1
                    if math.isnan(w):
                        ok = g == "NaN"
                    elif math.isinf(w):
                        ok = g == ("Infinity" if w > 0 else "-Infinity")
                    else:
                        ok = isinstance(g, float) and f32(g) == w and math.copysign(1, g) == math.copysign(1, w)
                    if not ok:
                        fail("record %d %r: float %r, want %r" % (idx, name, g, w))
        # the float tokens as printed: shortest, and Python's repr of them
        for tok in _float_tokens(line):
            x = f32(float(tok))
            if sig_digits(tok) != shortest_digits(x) and x != 0:
                fail("record %d: %s is not the shortest text for %r (%d digits)"
                     % (idx, tok, x, shortest_digits(x)))
            if tok != repr(float(tok)):
                fail("record %d: %s is not printed as Python's repr %s" % (idx, tok, repr(float(tok))))
    print("ok %d records, %d floats" % (len(rows), nfloat))


def _float_tokens(line):
    """The numbers inside "float":[...] arrays of a compact line."""
    toks = []
    key = '"float":['
    i = line.find(key)
    while i >= 0:
        j = line.index("]", i)
        for t in line[i + len(key) : j].split(","):
            if t and not t.startswith('"'):
                toks.append(t)
        i = line.find(key, j)
    return toks


# ---- --json=proto -----------------------------------------------------------

def cmd_proto(path, jsonl):
    rows = with_lines(path, jsonl, "ascii")
    exact = 0
    for idx, (rec, line) in enumerate(rows):
        m = example_pb2.Example.FromString(rec)
        d = json_format.MessageToDict(m)
        # protobuf's map order is its own; put the features in wire order
        if d.get("features", {}).get("feature"):
            fm = d["features"]["feature"]
            d["features"]["feature"] = {k: fm[k] for k in wire_names(rec)}
        want = json.dumps(d)  # exactly what MessageToJson(indent=None) does
        if line != want:
            fail("record %d:\n  got  %s\n  want %s" % (idx, line[:300], want[:300]))
        if len(m.features.feature) <= 1:  # no order question: the printer itself
            if line != json_format.MessageToJson(m, indent=None):
                fail("record %d: differs from MessageToJson" % idx)
            exact += 1
        # and the parser reads it back to the same message (but for its
        # own bug: it refuses 3.4028235e+38, which its printer prints for
        # FLT_MAX, as "Float value too large")
        try:
            back = json_format.Parse(line, example_pb2.Example())
        except json_format.ParseError as e:
            if "Float value too large" not in str(e) or "3.4028235e+38" not in line:
                fail("record %d: json_format.Parse: %s" % (idx, e))
            back = m
        if back.SerializeToString(deterministic=True) != m.SerializeToString(deterministic=True):
            fail("record %d: json_format.Parse gives another message" % idx)
    print("ok %d records (%d compared with MessageToJson verbatim)" % (len(rows), exact))


# ---- --encode idx -----------------------------------------------------------

def cmd_idx(images, labels, path, image_name="image", label_name="label"):
    def rd(p):
        b = open(p, "rb").read()
        return gzip.decompress(b) if b[:2] == b"\x1f\x8b" else b
    im, lb = rd(images), rd(labels)
    nd = im[3]
    dims = struct.unpack(">" + "I" * nd, im[4 : 4 + 4 * nd])
    item = 1
    for d in dims[1:]:
        item *= d
    off = 4 + 4 * nd
    recs = load(path)
    if len(recs) != dims[0]:
        fail("%d records for %d images" % (len(recs), dims[0]))
    for i, rec in enumerate(recs):
        m = example_pb2.Example.FromString(rec)
        f = m.features.feature
        if list(f[image_name].bytes_list.value) != [im[off + i * item : off + (i + 1) * item]]:
            fail("record %d: image differs" % i)
        if list(f[label_name].int64_list.value) != [lb[8 + i]]:
            fail("record %d: label differs" % i)
        if len(f) != 2:
            fail("record %d: %d features" % (i, len(f)))
    print("ok %d records" % len(recs))


def main():
    cmd, args = sys.argv[2], sys.argv[3:]
    if cmd == "gen":
        cmd_gen(*args)
    elif cmd == "bench":
        cmd_bench(args[0], int(args[1]))
    elif cmd == "frames":
        print(len(load(args[0])))
    elif cmd == "compact":
        cmd_compact(*args)
    elif cmd == "proto":
        cmd_proto(*args)
    elif cmd == "idx":
        cmd_idx(*args)
    else:
        fail("unknown command " + cmd)


if __name__ == "__main__":
    main()
