"""resnet_ref.py - PyTorch's residual networks as the reference for dp-train's (Debian
python3-torch, python3-torchvision; weights=None: nothing is downloaded).

A MODEL is one of
  tvN:CLASSES    torchvision.models.resnetN(weights=None, num_classes=CLASSES), N 18, 34, 50
  r20            the CIFAR ResNet-20 of ../shared/peers/torch_resnet.py (the same class)
  SPEC           a dp-train model spec, built as the torch module tree whose names are
                 dp-train's: a list is a module whose children are its items, named by
                 NAME= or else by their index in the list (torch.nn.Sequential); res(...)
                 is such a module too, its shortcut's items a Sequential "downsample"
                 child; seq(...) a Sequential; layers without parameters are modules too
                 (they take an index, as in torch.nn.Sequential)

  resnet_ref.py check                       exit 0 if torch and torchvision import (else 77)
  resnet_ref.py init MODEL SHAPE SEED OUT   torch's initial weights as a plain state_dict
                                            (safetensors without __metadata__), batchnorm's
                                            affine parameters and running statistics drawn
                                            at random, num_batches_tracked 3
  resnet_ref.py predict MODEL SHAPE CKPT DATA.npz PRED.jsonl
                                            the probabilities of torch in evaluation mode
                                            with CKPT's weights (loaded strictly) against
                                            dp-eval's --predictions: within 1e-5
  resnet_ref.py step MODEL SHAPE INIT OUT DATA.npz --batch B --lr X --momentum M
                   --weight-decay W [--no-decay-bn-bias] [--steps K] [--tol T]
                   [--device cuda]
                                            torch's SGD (Nesterov) steps from INIT against
                                            dp-train's OUT (see below); T: the tolerance
                                            (1e-4); torch's float32 run on --device
  resnet_ref.py same A B                    exit 0 if A and B hold bit-identical model tensors
  resnet_ref.py close A B TOL                exit 0 if A's and B's model tensors differ by at
                                            most TOL, their counters not at all
  resnet_ref.py frozen INIT OUT PATTERNS    PATTERNS' tensors (running statistics and
                                            counters included) bit-identical, the others not
  resnet_ref.py batch FILE                  run the commands of FILE (torch imports once);
                                            print "rc N" after each
"""
import fnmatch, json, os, sys
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ref import load_checkpoint, save_checkpoint  # noqa: E402


def model_tensors(path):
    """The model's tensors of a checkpoint: not the optimizer's state nor the RNG's."""
    t, meta = load_checkpoint(path)
    return {k: v for k, v in t.items() if not k.startswith(("optimizer.", "rng."))}, meta


# ---- the model tree of a dp-train spec -------------------------------------------------
def split_top(s, seps=","):
    """Split s at the separators outside parentheses."""
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if depth == 0 and ch in seps:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return out


def strip_comments(spec):
    return "".join(l.split("#")[0] for l in spec.splitlines()).replace(" ", "").replace("\t", "")


def build(spec, shape):
    """The torch module of spec over shape ([C, H, W] or [N])."""
    import torch, torch.nn as nn, torch.nn.functional as F

    class List(nn.Module):
        """A list of items, run in order; children named by NAME= or by index."""
        def forward(self, x):
            for m in self.children():
                x = m(x)
            return x

    class Res(nn.Module):
        def __init__(self, act):
            super().__init__()
            self.act = act

        def forward(self, x):
            y = x
            for name, m in self.named_children():
                if name != "downsample":
                    y = m(y)
            y = y + (self.downsample(x) if hasattr(self, "downsample") else x)
            return {"relu": F.relu, "tanh": torch.tanh, "sigmoid": torch.sigmoid}.get(
                self.act, lambda v: v)(y)

    class Gap(nn.Module):
        def forward(self, x):
            return F.adaptive_avg_pool2d(x, 1)

    def layer(item, x):
        f = item.split(":")
        k = f[0]
        if k in ("dense", "linear"):
            return nn.Linear(x.shape[1], int(f[1]), bias="bias=0" not in f)
        if k in ("conv", "conv2d"):
            pos = [v for v in f[3:] if "=" not in v]
            s = int(pos[0]) if pos else 1
            p = int(pos[1]) if len(pos) > 1 else 0
            kk = int(f[2])
            return nn.Conv2d(x.shape[1], int(f[1]), kk, s, p, bias="bias=0" not in f)
        if k in ("bn", "batchnorm"):
            return (nn.BatchNorm2d if x.dim() == 4 else nn.BatchNorm1d)(x.shape[1])
        if k == "maxpool":
            kk = int(f[1])
            return nn.MaxPool2d(kk, int(f[2]) if len(f) > 2 else kk, int(f[3]) if len(f) > 3 else 0)
        if k == "gap":
            return Gap()
        if k == "flatten":
            return nn.Flatten()
        return {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}[k]()

    def items(text, parent, x):
        for i, it in enumerate(split_top(text)):
            name, body = str(i), it
            head = it.split("(")[0]
            if "=" in head and head.split("=")[0].isidentifier():
                name, body = it.split("=", 1)
            if body.startswith(("res(", "seq(")):
                close = body.rindex(")")
                inner, act = body[4:close], body[close + 2:] or None
                parts = split_top(inner, "|")
                m = Res(act) if body[0] == "r" else List()
                y = items(parts[0], m, x)
                if len(parts) > 1:
                    m.add_module("downsample", List())
                    items(parts[1], m.downsample, x)
            else:
                m = layer(body, x)
            parent.add_module(name, m)
            x = m.eval()(x)
        return x

    top = List()
    items(strip_comments(spec), top, torch.zeros([2] + list(shape)))
    return top


def make(model, shape):
    import torch.nn as nn
    if model.startswith("tv"):  # tv18:10, tv34:10, tv50:10
        import torchvision
        depth, classes = model[2:].split(":")
        return getattr(torchvision.models, "resnet" + depth)(weights=None, num_classes=int(classes))
    if model == "r20":
        return resnet20(shape[0])
    m = build(model, shape)
    return m


def resnet20(cin):
    """ResNet20 of ../shared/peers/torch_resnet.py, verbatim but for the names of self."""
    import torch, torch.nn as nn, torch.nn.functional as F

    class Block(nn.Module):
        def __init__(s, cin, cout, stride):
            super().__init__()
            s.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False); s.bn1 = nn.BatchNorm2d(cout)
            s.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False); s.bn2 = nn.BatchNorm2d(cout)
            s.downsample = None
            if stride != 1 or cin != cout:
                s.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(s, x):
            y = F.relu(s.bn1(s.conv1(x))); y = s.bn2(s.conv2(y))
            return F.relu(y + (x if s.downsample is None else s.downsample(x)))

    class ResNet20(nn.Module):
        def __init__(s, cin=1, classes=10):
            super().__init__()
            s.conv1 = nn.Conv2d(cin, 16, 3, 1, 1, bias=False); s.bn1 = nn.BatchNorm2d(16)
            s.layer1 = nn.Sequential(*[Block(16, 16, 1) for _ in range(3)])
            s.layer2 = nn.Sequential(Block(16, 32, 2), Block(32, 32, 1), Block(32, 32, 1))
            s.layer3 = nn.Sequential(Block(32, 64, 2), Block(64, 64, 1), Block(64, 64, 1))
            s.fc = nn.Linear(64, classes)
            for m in s.modules():
                if isinstance(m, nn.Conv2d): nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

        def forward(s, x):
            x = F.relu(s.bn1(s.conv1(x)))
            x = s.layer3(s.layer2(s.layer1(x)))
            return s.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    return ResNet20(cin)


def shape_of(s):
    return [int(v) for v in s.split("x")]


def load_into(m, path):
    """CKPT's model tensors into m, strictly."""
    import torch
    t, _ = model_tensors(path)
    m.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in t.items()}, strict=True)


def is_bn(m):
    import torch.nn as nn
    return isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d))


def cmd_init(model, shape, seed, out):
    import torch
    torch.manual_seed(int(seed))
    m = make(model, shape_of(shape))
    g = torch.Generator().manual_seed(int(seed) + 1)
    # resnet50's 16 blocks add up in evaluation mode: smaller gammas keep its logits near 1
    low, width = (0.2, 0.3) if model.startswith("tv50") else (0.5, 1.0)
    with torch.no_grad():
        for mod in m.modules():
            if is_bn(mod):
                n = mod.num_features
                mod.weight.copy_(low + width * torch.rand(n, generator=g))
                mod.bias.copy_(0.1 * torch.randn(n, generator=g))
                mod.running_mean.copy_(0.1 * torch.randn(n, generator=g))
                mod.running_var.copy_(0.5 + torch.rand(n, generator=g))
                mod.num_batches_tracked.fill_(3)
    save_checkpoint(out, {k: v.detach().numpy() for k, v in m.state_dict().items()}, None)


def cmd_predict(model, shape, ckpt, data, pred):
    import torch
    m = make(model, shape_of(shape))
    load_into(m, ckpt)
    m.eval()
    x = torch.from_numpy(np.load(data)["x"].astype(np.float32))
    with torch.no_grad():
        p = torch.softmax(m(x).double(), 1).numpy()
    got = [json.loads(l) for l in open(pred)]
    # the probabilities' field: the list of floats of each line
    q = np.array([[v for v in r.values() if isinstance(v, list)][0] for r in got], dtype=np.float64)
    d = float(np.max(np.abs(q - p))) if q.shape == p.shape else float("inf")
    print(f"# {len(got)} predictions of {q.shape[1] if q.ndim == 2 else '?'} classes: "
          f"max |dp-eval - torch| = {d:.3g}")
    sys.exit(0 if d <= 1e-5 else 1)


def cmd_step(argv):
    """torch's SGD steps against dp-train's.  The reference is torch in float64 (torch in
    float32 is reported beside it: float32's rounding can put a pre-activation on the
    other side of a ReLU's 0, or the other element of a max pool first, which moves the
    gradients of the layers below by a percent with batchnorm over a few values; the data
    are chosen where neither torch nor dp-train does so; several steps are compared with
    torch's in float32, whose trajectory float32's rounding steers; --ref float32 where
    torch float32 itself is far from float64).  One step: each gradient, from
    the weight change (w0 - w1 = lr (1 + momentum) (g + wd w0) for the first Nesterov
    step), within 1e-4 of the tensor's largest gradient element (per-element relative
    errors of elements near 0 mean nothing; a gradient of 0, a bias's before a
    batchnorm, within 1e-6 of the model's largest) plus the rounding of w1 (4 ulp of w0 over
    lr (1 + momentum)); several steps: weights within rtol 1e-4, atol 1e-3 lr.  Running
    statistics within 1e-5 (absolute and relative), counters equal."""
    import argparse, torch
    ap = argparse.ArgumentParser()
    for a in ("model", "shape", "init", "out", "data"):
        ap.add_argument(a)
    ap.add_argument("--batch", type=int); ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--lr", type=float); ap.add_argument("--momentum", type=float)
    ap.add_argument("--weight-decay", type=float); ap.add_argument("--no-decay-bn-bias", action="store_true")
    ap.add_argument("--freeze", default="")
    ap.add_argument("--ref", choices=("float32", "float64"))
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--device", default="cpu")  # of torch's float32 run (cuda: a GPU's)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    z = np.load(a.data)

    def train(dtype):
        dev = torch.device(a.device if dtype == torch.float32 else "cpu")
        if dev.type == "cuda":  # IEEE float32, as dp-train's --precision fp32
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        m = make(a.model, shape_of(a.shape))
        load_into(m, a.init)
        m = m.to(dtype).to(dev)
        m.train()
        decay, nodecay = [], []
        for mn, mod in m.named_modules():
            own = list(mod.named_parameters(recurse=False))
            if own and a.freeze and is_bn(mod) and all(selected(f"{mn}.{pn}", a.freeze, mod, p.dim())
                                                       for pn, p in own):
                mod.eval()  # a frozen batchnorm: its running statistics, not updated
            for pn, p in own:
                if a.freeze and selected(f"{mn}.{pn}", a.freeze, mod, p.dim()):
                    p.requires_grad_(False)
                    continue
                (nodecay if a.no_decay_bn_bias and (is_bn(mod) or pn == "bias") else decay).append(p)
        opt = torch.optim.SGD([{"params": decay}, {"params": nodecay, "weight_decay": 0.0}], lr=a.lr,
                              momentum=a.momentum, nesterov=True, weight_decay=a.weight_decay)
        wd = {id(p): a.weight_decay for p in decay}
        wd.update({id(p): 0.0 for p in nodecay})
        x, y = torch.from_numpy(z["x"]).to(dtype).to(dev), torch.from_numpy(z["y"]).long().to(dev)
        for s in range(a.steps):
            opt.zero_grad()
            out = m(x[s * a.batch:(s + 1) * a.batch])
            torch.nn.functional.cross_entropy(out, y[s * a.batch:(s + 1) * a.batch]).backward()
            if s == 0:
                grads = {n: p.grad.detach().double().cpu().numpy().copy() if p.grad is not None
                         else np.zeros(p.shape) for n, p in m.named_parameters()}
            opt.step()
        state = {k: v.detach().double().cpu().numpy() for k, v in m.state_dict().items()}
        return state, grads, {n: wd.get(id(p), 0.0) for n, p in m.named_parameters()}

    want64, grads64, wd = train(torch.float64)
    want32, grads32, _ = train(torch.float32)
    # several steps follow float32's own trajectory: the reference is then torch float32's
    ref = a.ref or ("float64" if a.steps == 1 else "float32")
    want, grads = (want64, grads64) if ref == "float64" else (want32, grads32)
    init, _ = model_tensors(a.init)
    got, _ = model_tensors(a.out)
    if got.keys() != want.keys():
        print(f"# names: dp-train's only {sorted(got.keys() - want.keys())[:5]}, "
              f"torch's only {sorted(want.keys() - got.keys())[:5]}")
        sys.exit(1)
    scale = a.lr * (1 + a.momentum)
    gtop = max(float(np.max(np.abs(v))) for v in grads.values())

    def error(k, g, w, gt):
        """(error, ok) of a float32 tensor g of dp-train's or torch's"""
        if k.endswith(("running_mean", "running_var")):
            d = np.abs(g.astype(np.float64) - w)
            return float(np.max(d / (1 + np.abs(w)))), bool(np.all(d <= 1e-5 * (1 + np.abs(w))))
        if a.steps == 1:
            w0 = init[k].astype(np.float64)
            gd = (w0 - g.astype(np.float64)) / scale - wd[k] * w0
            top = float(np.max(np.abs(gt)))
            if top < 1e-6 * gtop:  # a gradient of 0 (a bias before a batchnorm): float32's noise
                top = 1e-2 * gtop
            tol = a.tol * top + 4 * np.spacing(np.abs(init[k])).astype(np.float64) / scale
            return float(np.max(np.abs(gd - gt))) / top, bool(np.all(np.abs(gd - gt) <= tol))
        d = np.abs(g.astype(np.float64) - w)
        return float(np.max(d)), bool(np.all(d <= a.tol * np.abs(w) + 1e-3 * a.lr))

    bad = 0
    worst, worst32 = (0.0, ""), (0.0, "")
    for k, w in want.items():
        g = got[k]
        if g.shape != w.shape:
            print(f"# {k}: shape {g.shape}, torch's {w.shape}"); bad += 1; continue
        if k.endswith("num_batches_tracked"):
            if int(g) != int(w):
                print(f"# {k}: {int(g)}, torch's {int(w)}"); bad += 1
            continue
        d, ok = error(k, g, w, grads.get(k))
        d32, _ = error(k, want32[k].astype(np.float32), want64[k], grads64.get(k))
        worst, worst32 = max(worst, (d, k)), max(worst32, (d32, k))
        if not ok:
            print(f"# {k}: {'gradient ' if a.steps == 1 and k in grads else ''}error {d:.3g} "
                  f"(torch float32's {d32:.3g})")
            bad += 1
    print(f"# {len(want)} tensors against torch {ref} (tolerance {a.tol:g}), {bad} "
          f"differ; worst {worst[1]}: {worst[0]:.3g}; torch float32 ({a.device}) against float64: worst "
          f"{worst32[1]}: {worst32[0]:.3g}")
    sys.exit(1 if bad else 0)


def selected(name, patterns, mod=None, ndim=None):
    """dp_model_select's items (dp_nn.h): bias, bn, 1d (given the module and the
    tensor's dimensions), or an fnmatch pattern over the name or a prefix of it."""
    parts = name.split(".")
    for p in patterns.split(","):
        if p == "bias" and name.endswith(".bias") or p == "bn" and mod is not None and is_bn(mod) \
                or p == "1d" and ndim == 1:
            return True
        if any(fnmatch.fnmatchcase(".".join(parts[:i]), p) for i in range(1, len(parts) + 1)):
            return True
    return False


def cmd_frozen(init, out, patterns):
    a, _ = model_tensors(init)
    b, _ = model_tensors(out)
    bad = 0
    for k in a:
        same = a[k].tobytes() == b[k].tobytes()
        if selected(k, patterns) != same:
            print(f"# {k}: {'unchanged' if same else 'changed'}"); bad += 1
    n = sum(selected(k, patterns) for k in a)
    print(f"# {n} frozen tensors of {len(a)}, {bad} wrong")
    sys.exit(1 if bad or not n else 0)


def main(argv):
    cmd = argv[1]
    if cmd == "batch":
        import shlex
        for line in open(argv[2]):
            if line.strip():
                try:
                    main(["resnet_ref.py"] + shlex.split(line)); rc = 0
                except SystemExit as e:
                    rc = e.code or 0
                except Exception as e:  # a missing file: this command fails, not the batch
                    print(f"# {type(e).__name__}: {e}"); rc = 1
                print(f"rc {rc}", flush=True)
        return
    if cmd == "check":
        try:
            import torch, torchvision  # noqa: F401
        except Exception:
            sys.exit(77)
        return
    if cmd == "init":
        return cmd_init(*argv[2:6])
    if cmd == "predict":
        return cmd_predict(*argv[2:7])
    if cmd == "step":
        return cmd_step(argv[2:])
    if cmd == "same":
        a, _ = model_tensors(argv[2])
        b, _ = model_tensors(argv[3])
        sys.exit(0 if a.keys() == b.keys() and all(a[k].tobytes() == b[k].tobytes() for k in a) else 1)
    if cmd == "close":
        a, _ = model_tensors(argv[2])
        b, _ = model_tensors(argv[3])
        tol = float(argv[4])
        if a.keys() != b.keys():
            sys.exit("# not the same tensors")
        d = max(float(np.max(np.abs(a[k].astype(np.float64) - b[k]))) for k in a if a[k].dtype.kind == "f")
        ints = all(a[k].tobytes() == b[k].tobytes() for k in a if a[k].dtype.kind != "f")
        print(f"# max difference {d:.3g} over {len(a)} tensors; counters {'equal' if ints else 'differ'}")
        sys.exit(0 if d <= tol and ints else 1)
    if cmd == "frozen":
        return cmd_frozen(*argv[2:5])
    raise SystemExit(f"resnet_ref: unknown command {cmd}")


if __name__ == "__main__":
    main(sys.argv)
