"""mkexamples.py - write TFRecord files of tf.train.Example for dp-train's tests.

An independent writer (protobuf wire format and CRC32C by hand, numpy for
the data) so that the tests do not check libdp against itself.

  mkexamples.py OUT random --n N --shape 784 --classes 10 [--kind float|int64|uint8|f32bytes|f64bytes]
                [--seed S] [--gzip] [--label-kind int|float|vector:K] [--bad MODE] [--npz FILE]
                --npz: the same x and y saved to FILE.npz too, for a reference to read
  mkexamples.py OUT idx DIR images labels [--limit N] [--offset K]   (Fashion-MNIST IDX files)
  mkexamples.py OUT npz FILE.npz [--kind ...]     x (n, ...) float32 and y (n,) int
  mkexamples.py OUT blobs --n N --shape 64 --classes 4 [--spread 0.35] [--centers S] [--seed S]
                noisy classes: class centers (drawn from --centers, so that a train and
                a validation set share them) times --spread, plus standard normal noise:
                a model learns them for some epochs, then overfits a small set
Features: 'image' (the input) and 'label'.  OUT '-' is stdout.
"""
import argparse, gzip, struct, sys
import numpy as np

from tfr_frame import frame  # noqa: E402



def varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def field(num, payload):  # length-delimited
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def feature(kind, values):
    if kind == "float":
        body = field(1, np.asarray(values, "<f4").tobytes())
        return field(2, body)
    if kind == "int64":
        body = field(1, b"".join(varint(int(v)) for v in values))
        return field(3, body)
    if kind == "bytes":
        return field(1, b"".join(field(1, v) for v in values))
    raise ValueError(kind)


def example(feats):
    entries = b"".join(field(1, field(1, k.encode()) + field(2, feature(*v))) for k, v in feats)
    return field(1, entries)


def image_feature(x, kind):
    if kind == "float":
        return ("float", x.astype("<f4").ravel())
    if kind == "int64":
        return ("int64", x.astype(np.int64).ravel())
    if kind == "uint8":
        return ("bytes", [x.astype(np.uint8).tobytes()])
    if kind == "f32bytes":
        return ("bytes", [x.astype("<f4").tobytes()])
    if kind == "f64bytes":
        return ("bytes", [x.astype("<f8").tobytes()])
    raise ValueError(kind)


def write(out, xs, ys, kind, label_kind, gz, bad=None):
    frames = []
    for i, (x, y) in enumerate(zip(xs, ys)):
        feats = [("image", image_feature(x, kind))]
        if label_kind == "int":
            feats.append(("label", ("int64", [int(y)])))
        elif label_kind == "float":
            feats.append(("label", ("float", [float(y)])))
        else:
            feats.append(("label", ("float", np.asarray(y, np.float32).ravel())))
        if bad and i == bad[1]:
            mode = bad[0]
            if mode == "nolabel":
                feats = feats[:1]
            elif mode == "nofeature":
                feats = feats[1:]
            elif mode == "short":
                feats[0] = ("image", ("float", np.zeros(x.size - 1, np.float32)))
            elif mode == "nan":
                v = x.astype(np.float32).ravel().copy()
                v[3] = np.nan
                feats[0] = ("image", ("float", v))
            elif mode == "label":
                feats[1] = ("label", ("int64", [99]))
        data = example(feats)
        if bad and i == bad[1] and bad[0] == "crc":
            f = bytearray(frame(data))
            f[20] ^= 1
            frames.append(bytes(f))
        else:
            frames.append(frame(data))
    blob = b"".join(frames)
    if gz:
        blob = gzip.compress(blob)
    if out == "-":
        sys.stdout.buffer.write(blob)
    else:
        with open(out, "wb") as f:
            f.write(blob)


def idx(path, off):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rb") as f:
        return np.frombuffer(f.read(), np.uint8, offset=off)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("mode", choices=["random", "idx", "npz", "blobs"])
    ap.add_argument("--spread", type=float, default=0.35)
    ap.add_argument("--centers", type=int, default=5)
    ap.add_argument("args", nargs="*")
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--shape", default="784")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--kind", default="float")
    ap.add_argument("--label-kind", default="int")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gzip", action="store_true")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--offset", type=int, default=0)
    ap.add_argument("--npz", default=None)
    ap.add_argument("--bad", default=None, help="MODE:RECORD (nolabel nofeature short nan label crc)")
    a = ap.parse_args()
    bad = None
    if a.bad:
        m, r = a.bad.split(":")
        bad = (m, int(r))
    label_kind = a.label_kind
    if a.mode == "random":
        rng = np.random.default_rng(a.seed)
        shape = [int(s) for s in a.shape.split("x")]
        if a.kind in ("uint8", "int64"):
            xs = rng.integers(0, 256, size=[a.n] + shape)
        else:
            xs = rng.standard_normal([a.n] + shape).astype(np.float32)
        if label_kind.startswith("vector:"):
            k = int(label_kind.split(":")[1])
            ys = rng.standard_normal([a.n, k]).astype(np.float32)
            label_kind = "vector"
        else:
            ys = rng.integers(0, a.classes, size=a.n)
    elif a.mode == "blobs":
        shape = [int(s) for s in a.shape.split("x")]
        c = np.random.default_rng(a.centers).normal(size=[a.classes] + shape) * a.spread
        rng = np.random.default_rng(a.seed)
        ys = rng.integers(0, a.classes, a.n)
        xs = (c[ys] + rng.normal(size=[a.n] + shape)).astype(np.float32)
    elif a.mode == "idx":
        d, im, lb = a.args
        xs = idx(f"{d}/{im}", 16).reshape(-1, 28, 28)
        ys = idx(f"{d}/{lb}", 8)
        end = a.offset + a.limit if a.limit else len(ys)
        xs, ys = xs[a.offset:end], ys[a.offset:end]
    else:
        z = np.load(a.args[0])
        xs, ys = z["x"], z["y"]
    if a.npz:
        np.savez(a.npz, x=xs, y=ys)
    write(a.out, xs, ys, a.kind, label_kind, a.gzip, bad)


if __name__ == "__main__":
    main()
