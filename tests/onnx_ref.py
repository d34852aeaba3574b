"""onnx_ref.py - an ONNX file checked by Debian's python3-onnx and run by an
independent evaluator: numpy, the few operators dptools writes, written from
the ONNX operator specifications (no onnxruntime, no libdp).

  onnx_ref.py check MODEL.onnx
      onnx.checker.check_model(full_check=True) and strict shape inference;
      prints the opset, the inputs and outputs with their shapes, and the
      metadata as key=value lines
  onnx_ref.py run MODEL.onnx INPUT.npy OUT.npy
      the graph on INPUT (float32, (batch, ...)), in float64; OUT receives
      the last graph output (probabilities, or output)
  onnx_ref.py compare MODEL.onnx INPUT.npy PREDICTIONS.jsonl [--tol 1e-5]
      [--ort]
      the graph's outputs against dp-eval --predictions' probabilities (or
      outputs), row by row: PASS/FAIL lines; --ort runs onnxruntime
      instead of this evaluator (a machine that has it)
"""
import json
import sys

import numpy as np


def load(path):
    import onnx
    from onnx import numpy_helper
    m = onnx.load(path)
    init = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in m.graph.initializer}
    return m, init


def attrs(node):
    import onnx
    out = {}
    for a in node.attribute:
        out[a.name] = onnx.helper.get_attribute_value(a)
    return out


def conv(x, w, b, ks, st, pads):
    n, c, h, wd = x.shape
    f = w.shape[0]
    kh, kw = ks
    sh, sw = st
    ph0, pw0, ph1, pw1 = pads
    xp = np.pad(x, ((0, 0), (0, 0), (ph0, ph1), (pw0, pw1)))
    oh = (h + ph0 + ph1 - kh) // sh + 1
    ow = (wd + pw0 + pw1 - kw) // sw + 1
    y = np.zeros((n, f, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i:i + sh * oh:sh, j:j + sw * ow:sw]  # (n, c, oh, ow)
            y += np.einsum("nchw,fc->nfhw", patch, w[:, :, i, j])
    if b is not None:
        y += b[None, :, None, None]
    return y


def pool(x, ks, st, pads, kind):
    n, c, h, wd = x.shape
    kh, kw = ks
    sh, sw = st
    ph0, pw0, ph1, pw1 = pads
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0), (ph0, ph1), (pw0, pw1)), constant_values=fill)
    oh = (h + ph0 + ph1 - kh) // sh + 1
    ow = (wd + pw0 + pw1 - kw) // sw + 1
    wins = [xp[:, :, i:i + sh * oh:sh, j:j + sw * ow:sw] for i in range(kh) for j in range(kw)]
    if kind == "max":
        return np.max(wins, axis=0)
    assert not any(pads), "AveragePool with padding: count_include_pad not handled"
    return np.mean(wins, axis=0)


def run(m, init, x):
    v = dict(init)
    v[m.graph.input[0].name] = x.astype(np.float64)
    for node in m.graph.node:
        a = attrs(node)
        i = [v[n] if n else None for n in node.input]
        op = node.op_type
        if op == "Gemm":
            assert a.get("transB") == 1 and not a.get("transA")
            y = i[0] @ i[1].T + (i[2] if len(i) > 2 else 0)
        elif op == "Conv":
            y = conv(i[0], i[1], i[2] if len(i) > 2 else None, a["kernel_shape"],
                     a.get("strides", [1, 1]), a.get("pads", [0, 0, 0, 0]))
        elif op in ("MaxPool", "AveragePool"):
            y = pool(i[0], a["kernel_shape"], a.get("strides", [1, 1]),
                     a.get("pads", [0, 0, 0, 0]), "max" if op == "MaxPool" else "avg")
        elif op == "GlobalAveragePool":
            y = i[0].mean(axis=(2, 3), keepdims=True)
        elif op == "Flatten":
            assert a.get("axis", 1) == 1
            y = i[0].reshape(i[0].shape[0], -1)
        elif op == "BatchNormalization":
            xx, s, b, mu, var = i
            sh = (1, -1) + (1,) * (xx.ndim - 2)
            y = (xx - mu.reshape(sh)) / np.sqrt(var.reshape(sh) + a.get("epsilon", 1e-5)) \
                * s.reshape(sh) + b.reshape(sh)
        elif op == "Relu":
            y = np.maximum(i[0], 0)
        elif op == "Tanh":
            y = np.tanh(i[0])
        elif op == "Sigmoid":
            y = 1 / (1 + np.exp(-i[0]))
        elif op == "Add":
            y = i[0] + i[1]
        elif op == "Mul":
            y = i[0] * i[1]
        elif op == "Transpose":
            y = np.transpose(i[0], a["perm"])
        elif op == "Identity":
            y = i[0]
        elif op == "Softmax":
            assert a.get("axis", -1) in (1, -1)
            z = i[0] - i[0].max(axis=1, keepdims=True)
            ez = np.exp(z)
            y = ez / ez.sum(axis=1, keepdims=True)
        else:
            raise SystemExit(f"onnx_ref.py: operator {op} not in the reference")
        v[node.output[0]] = y
    return [v[o.name] for o in m.graph.output]


def check(path):
    import onnx
    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    inf = onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=True)
    print(f"ir_version={m.ir_version}")
    print("opset=" + ",".join(f"{o.domain or 'ai.onnx'}:{o.version}" for o in m.opset_import))
    def dims(t):
        return "x".join(d.dim_param or str(d.dim_value) for d in t.type.tensor_type.shape.dim)
    for t in m.graph.input:
        print(f"input {t.name} {dims(t)}")
    for t in m.graph.output:
        print(f"output {t.name} {dims(t)}")
    # every value has an inferred shape
    known = {t.name for t in inf.graph.value_info} | {t.name for t in m.graph.output}
    missing = [o for n in m.graph.node for o in n.output if o not in known]
    print(f"uninferred={len(missing)}")
    print("ops=" + ",".join(sorted({n.op_type for n in m.graph.node})))
    for p in m.metadata_props:
        print(f"meta {p.key}={p.value}")


def compare(path, inp, preds, tol, ort):
    x = np.load(inp)
    if ort:
        import onnxruntime
        s = onnxruntime.InferenceSession(path, providers=onnxruntime.get_available_providers())
        got = s.run(None, {s.get_inputs()[0].name: x.astype(np.float32)})[-1]
    else:
        m, init = load(path)
        got = run(m, init, x)[-1]
    rows = [json.loads(l) for l in open(preds)]
    want = np.array([r.get("probabilities", r.get("outputs", r.get("output"))) for r in rows],
                    dtype=np.float64)
    ok = got.shape == want.shape
    print(("PASS" if ok else "FAIL") + f" shape {got.shape} against {want.shape}")
    if not ok:
        return 1
    d = float(np.max(np.abs(got - want)))
    ok = d <= tol
    print(("PASS" if ok else "FAIL") + f" {len(rows)} rows: largest difference {d:.3g} (at most {tol:g})")
    same = int(np.sum(np.argmax(got, 1) == np.argmax(want, 1)))
    print(("PASS" if same == len(rows) else "FAIL") + f" argmax equal on {same} of {len(rows)}")
    return 0


def main():
    a = sys.argv[1:]
    if a[:1] == ["check"] and len(a) == 2:
        check(a[1])
    elif a[:1] == ["run"] and len(a) == 4:
        m, init = load(a[1])
        np.save(a[3], run(m, init, np.load(a[2]))[-1].astype(np.float32))
    elif a[:1] == ["compare"] and len(a) >= 4:
        tol = float(a[a.index("--tol") + 1]) if "--tol" in a else 1e-5
        return compare(a[1], a[2], a[3], tol, "--ort" in a)
    else:
        sys.exit(__doc__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
