"""torch_ref.py - PyTorch as the reference for dp-train (Debian python3-torch).

  torch_ref.py check                         exit 0 if torch imports (else 77)
  torch_ref.py init SPEC SHAPE LOSS SEED OUT  a dp-train checkpoint of torch's own
                                            initial weights for the equivalent
                                            torch.nn.Sequential
  torch_ref.py step INIT OUT DATA.npz --optimizer O --lr X --batch B --steps K [...]
                                            train K steps in torch from INIT on DATA's
                                            batches in order; compare with dp-train's OUT
                                            [--model SPEC --shape S] (INIT a plain state_dict)
                                            [--freeze P] [--no-decay P] [--lr-mult P=X,...]
                                            [--label-smoothing X] (as dp-train's, as param groups)
  torch_ref.py plain SPEC SHAPE SEED OUT      torch's initial weights as a plain state_dict
                                            (safetensors without __metadata__)
  torch_ref.py loss CKPT DATA.npz N [--model SPEC --shape S] [--label-smoothing X]
                                            print the mean loss of the first N samples
  torch_ref.py same-weights A B             exit 0 if A and B hold bit-identical weights
  torch_ref.py finite CKPT                   exit 0 if every float tensor is finite
  torch_ref.py batch FILE                    run the commands of FILE, one per line (torch
                                            imports once); print "rc N" after each
  torch_ref.py load CKPT                     load CKPT's weights into the Sequential
                                            with load_state_dict(strict=True); print the
                                            output of a forward pass on zeros
The safetensors reading is the snippet of dp-checkpoint(5), verbatim.
"""
import json, struct, sys
import numpy as np


# ---- dp-checkpoint(5): load a checkpoint with numpy ----------------------------
def load_checkpoint(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    dtypes = {"F32": "<f4", "F64": "<f8", "I64": "<i8", "U64": "<u8"}
    tensors = {}
    for name, t in header.items():
        begin, end = t["data_offsets"]
        a = np.frombuffer(data[begin:end], dtypes[t["dtype"]])
        tensors[name] = a.reshape(t["shape"])
    return tensors, meta
# ---------------------------------------------------------------------------------


def save_checkpoint(path, tensors, meta):
    header, blobs, off = ({"__metadata__": meta} if meta is not None else {}), [], 0
    for name, a in tensors.items():
        a = np.array(a, order="C")
        dt = {"float32": "F32", "int64": "I64"}[str(a.dtype)]
        b = a.astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def parse_shape(s):
    d = [int(x) for x in s.split("x")]
    return d if len(d) != 2 else [1] + d


def pair(s):
    a = s.split("x")
    return (int(a[0]), int(a[-1]))


def sequential(spec, shape):
    """The torch.nn.Sequential of a dp-train spec (one module per item)."""
    import torch, torch.nn as nn
    mods, cur = [], list(shape)
    x = torch.zeros([1] + cur)
    for item in spec.split(","):
        f = item.strip().split(":")
        k = f[0]
        if k in ("dense", "linear"):
            m = nn.Linear(cur[0], int(f[1]))
        elif k in ("conv", "conv2d"):
            kh, kw = pair(f[2])
            stride, pad = (1, 1), (0, 0)
            rest = f[3:]
            got_stride = False
            for v in rest:
                if v.startswith("stride="):
                    stride = pair(v[7:]); got_stride = True
                elif v.startswith("padding=") or v.startswith("pad="):
                    v = v.split("=")[1]
                    pad = ((kh - 1) // 2, (kw - 1) // 2) if v == "same" else (0, 0) if v == "valid" else pair(v)
                elif v == "same":
                    pad = ((kh - 1) // 2, (kw - 1) // 2)
                elif v == "valid":
                    pad = (0, 0)
                elif not got_stride:
                    stride = pair(v); got_stride = True
                else:
                    pad = pair(v)
            m = nn.Conv2d(cur[0], int(f[1]), (kh, kw), stride=stride, padding=pad)
        elif k in ("maxpool", "maxpool2d", "avgpool", "avgpool2d"):
            kk = pair(f[1])
            s = pair(f[2]) if len(f) > 2 else kk
            m = (nn.MaxPool2d if k.startswith("max") else nn.AvgPool2d)(kk, s)
        elif k == "flatten":
            m = nn.Flatten()
        elif k == "dropout":
            m = nn.Dropout(float(f[1]))
        elif k == "relu":
            m = nn.ReLU()
        elif k == "tanh":
            m = nn.Tanh()
        elif k == "sigmoid":
            m = nn.Sigmoid()
        elif k == "softmax":
            m = nn.Softmax(dim=1)
        elif k in ("batchnorm", "bn"):
            m = (nn.BatchNorm2d if len(cur) == 3 else nn.BatchNorm1d)(cur[0])
        else:
            raise SystemExit(f"torch_ref: unknown item {item}")
        mods.append(m)
        x = m.eval()(x)
        cur = list(x.shape[1:])
    return nn.Sequential(*mods)


def selects(item, name, mod, ndim):
    """dp_model_select's items (dp_nn.h): bias, bn, 1d, or fnmatch over the name or a prefix."""
    import fnmatch, torch.nn as nn
    if item == "bias":
        return name.endswith(".bias")
    if item == "bn":
        return isinstance(mod, (nn.BatchNorm1d, nn.BatchNorm2d))
    if item == "1d":
        return ndim == 1
    parts = name.split(".")
    return any(fnmatch.fnmatchcase(".".join(parts[:i]), item) for i in range(1, len(parts) + 1))


def first_item(patterns, name, mod, ndim):
    """Index of the first item of patterns selecting the parameter, or -1."""
    for i, item in enumerate((patterns or "").split(",") if patterns else []):
        if selects(item.split("=")[0], name, mod, ndim):
            return i
    return -1


def param_groups(m, a):
    """PyTorch parameter groups for dp-train's --freeze, --no-decay, --lr-mult."""
    groups = []
    mults = [float(x.split("=")[1]) for x in a.lr_mult.split(",")] if a.lr_mult else []
    for name, p in m.named_parameters():
        mod = m[int(name.split(".")[0])]
        if first_item(a.freeze, name, mod, p.dim()) >= 0:
            p.requires_grad_(False)
            continue
        k = first_item(a.lr_mult, name, mod, p.dim())
        g = {"params": [p], "lr": a.lr * (mults[k] if k >= 0 else 1.0)}
        if first_item(a.no_decay, name, mod, p.dim()) >= 0:
            g["weight_decay"] = 0.0
        groups.append(g)
    return groups


def state_of(tensors):
    import torch
    return {k: torch.from_numpy(v.copy()) for k, v in tensors.items() if k[0].isdigit()}


def main(argv=None):
    argv = sys.argv if argv is None else argv
    cmd = argv[1]
    if cmd == "batch":
        import shlex
        for line in open(argv[2]):
            if not line.strip():
                continue
            try:
                main(["torch_ref.py"] + shlex.split(line))
                rc = 0
            except SystemExit as e:
                rc = e.code or 0
            print(f"rc {rc}", flush=True)
        return
    if cmd == "same-weights":
        a, _ = load_checkpoint(argv[2])
        b, _ = load_checkpoint(argv[3])
        wa = {k: v for k, v in a.items() if k[0].isdigit()}
        wb = {k: v for k, v in b.items() if k[0].isdigit()}
        same = wa.keys() == wb.keys() and all(wa[k].tobytes() == wb[k].tobytes() for k in wa)
        if not same:
            for k in sorted(wa.keys() & wb.keys()):
                if wa[k].tobytes() != wb[k].tobytes():
                    print(f"# {k} differs by up to {np.max(np.abs(wa[k] - wb[k]))}")
        sys.exit(0 if same else 1)
    if cmd == "finite":
        a, _ = load_checkpoint(argv[2])
        sys.exit(0 if all(np.isfinite(v).all() for v in a.values() if v.dtype.kind == "f") else 1)
    if cmd == "check":
        try:
            import torch  # noqa: F401
        except Exception:
            sys.exit(77)
        sys.exit(0)
    import torch, torch.nn as nn
    torch.set_num_threads(1)
    if cmd == "init":
        spec, shape, loss, seed, out = argv[2:7]
        torch.manual_seed(int(seed))
        m = sequential(spec, parse_shape(shape))
        t = {k: v.detach().numpy() for k, v in m.state_dict().items()}
        save_checkpoint(out, t, {"format": "dp-train/1", "model": spec, "input_shape": shape,
                                 "loss": loss})
        return
    if cmd == "plain":
        spec, shape, seed, out = argv[2:6]
        torch.manual_seed(int(seed))
        m = sequential(spec, parse_shape(shape))
        save_checkpoint(out, {k: v.detach().numpy() for k, v in m.state_dict().items()}, None)
        return
    if cmd == "loss":
        import argparse
        ap = argparse.ArgumentParser()
        ap.add_argument("ckpt"); ap.add_argument("data"); ap.add_argument("n", type=int)
        ap.add_argument("--model"); ap.add_argument("--shape")
        ap.add_argument("--label-smoothing", type=float, default=0.0)
        a = ap.parse_args(argv[2:])
        tensors, meta = load_checkpoint(a.ckpt)
        m = sequential(a.model or meta["model"], parse_shape(a.shape or meta["input_shape"]))
        m.load_state_dict(state_of(tensors), strict=True)
        m.train()
        z = np.load(a.data)
        out = m(torch.from_numpy(z["x"][:a.n].astype(np.float32)))
        l = nn.CrossEntropyLoss(label_smoothing=a.label_smoothing)(out, torch.from_numpy(z["y"][:a.n]).long())
        print(f"{l.item():.9g}")
        return
    if cmd == "load":
        tensors, meta = load_checkpoint(argv[2])
        m = sequential(meta["model"], parse_shape(meta["input_shape"]))
        m.load_state_dict(state_of(tensors), strict=True)
        m.eval()
        x = torch.zeros([1] + parse_shape(meta["input_shape"]))
        print(" ".join(f"{v:.6f}" for v in m(x).detach().numpy().ravel()))
        return
    if cmd == "step":
        import argparse
        ap = argparse.ArgumentParser()
        ap.add_argument("init"); ap.add_argument("out"); ap.add_argument("data")
        ap.add_argument("--optimizer", default="adam"); ap.add_argument("--lr", type=float, default=1e-3)
        ap.add_argument("--batch", type=int, default=8); ap.add_argument("--steps", type=int, default=1)
        ap.add_argument("--momentum", type=float, default=0); ap.add_argument("--nesterov", action="store_true")
        ap.add_argument("--weight-decay", type=float, default=None)
        ap.add_argument("--loss", default="xent")
        ap.add_argument("--clip-norm", type=float, default=None)
        ap.add_argument("--rtol", type=float, default=1e-4); ap.add_argument("--atol", type=float, default=None)
        ap.add_argument("--model"); ap.add_argument("--shape")
        ap.add_argument("--freeze"); ap.add_argument("--no-decay"); ap.add_argument("--lr-mult")
        ap.add_argument("--label-smoothing", type=float, default=0.0)
        a = ap.parse_args(argv[2:])
        if a.atol is None:  # float32 rounding of the update itself: a fraction of lr
            a.atol = max(1e-6, 1e-3 * a.lr)
        tensors, meta = load_checkpoint(a.init)
        m = sequential(a.model or meta["model"], parse_shape(a.shape or meta["input_shape"]))
        m.load_state_dict(state_of(tensors), strict=True)
        m.train()
        wd = a.weight_decay
        params = param_groups(m, a)
        if a.optimizer == "sgd":
            opt = torch.optim.SGD(params, a.lr, momentum=a.momentum, nesterov=a.nesterov,
                                  weight_decay=wd or 0)
        elif a.optimizer == "adam":
            opt = torch.optim.Adam(params, a.lr, weight_decay=wd or 0)
        else:
            opt = torch.optim.AdamW(params, a.lr, weight_decay=0.01 if wd is None else wd)
        z = np.load(a.data)
        x = torch.from_numpy(z["x"].astype(np.float32))
        y = torch.from_numpy(z["y"])
        body = m[:-1] if isinstance(m[-1], nn.Softmax) else m
        lossf = nn.CrossEntropyLoss(label_smoothing=a.label_smoothing) if a.loss == "xent" else nn.MSELoss()
        for s in range(a.steps):
            xb, yb = x[s * a.batch:(s + 1) * a.batch], y[s * a.batch:(s + 1) * a.batch]
            opt.zero_grad()
            out = body(xb)
            l = lossf(out, yb.long() if a.loss == "xent" else yb.float().reshape(out.shape))
            l.backward()
            if a.clip_norm:
                nn.utils.clip_grad_norm_(m.parameters(), a.clip_norm)
            opt.step()
        got, _ = load_checkpoint(a.out)
        want = {k: v.detach().numpy() for k, v in m.state_dict().items()}
        bad = 0
        for k, w in want.items():
            g = got[k]
            if g.shape != w.shape:
                print(f"# {k}: shape {g.shape} vs torch {w.shape}"); bad += 1; continue
            if k.endswith("num_batches_tracked"):
                ok = int(g) == int(w)
                d = abs(int(g) - int(w)); start = 0
            else:
                ok = np.allclose(g, w, rtol=a.rtol, atol=a.atol)
                d = float(np.max(np.abs(g.astype(np.float64) - w)))
                start = float(np.max(np.abs(tensors[k].astype(np.float64) - w))) if k in tensors else 0.0
            print(f"# {k}: max |dp-train - torch| = {d:.3g} (moved {start:.3g} from the start)")
            bad += not ok
        sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
