"""ckpt_ref.py - PyTorch (Debian python3-torch, python3-torchvision) as the peer of
dp-ckpt and of dptools' reading and writing of torch.save's files.  Every load here is
torch.load(weights_only=True), torch's own restricted loader.

  ckpt_ref.py check                         exit 0 if torch and torchvision import
  ckpt_ref.py predict WEIGHTS PRED.jsonl DATA.npz SPEC SHAPE
        load WEIGHTS (a .pth through torch.load; else safetensors, read with the snippet
        of dp-checkpoint(5)) into the torch.nn.Sequential of SPEC with
        load_state_dict(strict=True), every tensor of the file as it is (no key left
        out); run it (eval mode) on DATA's x and compare the softmax with the
        "probabilities" of dp-eval's PRED.jsonl, record by record; exit 0 when they
        agree within 1e-5, printing the largest difference
  ckpt_ref.py tv-predict N CLASSES WEIGHTS PRED.jsonl DATA.npz
        the same with torchvision.models.resnetN(num_classes=CLASSES)
  ckpt_ref.py save SPEC SHAPE SEED OUT [--legacy] [--protocol P] [--wrap] [--odd] [--old]
        torch's initial weights of SPEC's Sequential (batchnorm's running statistics
        drawn at random) saved with torch.save: the zip format, or --legacy; pickle
        protocol P (2); --wrap: inside {"epoch": 3, "state_dict": ..., "best": [1, 2]};
        --odd: with tensors that are not plain (a transpose, a slice, float16,
        bfloat16, int32, bool, a scalar, two sharing a storage); --old: the legacy
        format as torch 0.3 wrote it for torchvision's first hub files
        (_rebuild_tensor, storages on 'cuda:0', no num_batches_tracked)
  ckpt_ref.py tv-save N CLASSES SEED OUT [--old]
        torchvision.models.resnetN(num_classes=CLASSES)'s initial weights (running
        statistics drawn at random), likewise
  ckpt_ref.py same ST PTH [--trusted]
        exit 0 when safetensors file ST holds exactly torch.load(PTH)'s state_dict
        (the one dict of tensors inside it, if wrapped): the same names in the same
        order, dtypes, shapes and bits; --trusted: weights_only=False (torch 1.13's
        weights_only knows no pickle protocol 4)
  ckpt_ref.py evil OUT      a torch.save file whose pickle runs os.system when
                            unpickled without restrictions
  ckpt_ref.py module OUT    torch.save of a whole torch.nn.Module (not a state_dict)
  ckpt_ref.py script OUT    torch.jit.save of a scripted module (TorchScript)
  ckpt_ref.py refuses PTH   exit 0 when torch.load(PTH, weights_only=True) refuses it
"""
import json, os, pickle, struct, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np
from torch_ref import load_checkpoint, parse_shape, sequential


def load_weights(path):
    import torch
    with open(path, "rb") as f:
        head = f.read(4)
    if head == b"PK\x03\x04" or head[:1] == b"\x80":
        sd = torch.load(path, map_location="cpu", weights_only=True)
        return {k: v for k, v in sd.items()}
    tensors, _ = load_checkpoint(path)
    return {k: torch.from_numpy(np.array(v)) for k, v in tensors.items()}


def compare(m, pred, data):
    import torch
    x = np.load(data)["x"].astype(np.float32)
    m.eval()
    with torch.no_grad():
        p = torch.softmax(m(torch.from_numpy(x)), dim=1).numpy()
    rows = [json.loads(l) for l in open(pred)]
    if len(rows) != len(x):
        sys.exit(f"ckpt_ref: {len(rows)} predictions for {len(x)} samples")
    worst = max(float(np.max(np.abs(np.array(r["probabilities"]) - p[r["record"]]))) for r in rows)
    print(worst)
    return 0 if worst <= 1e-5 else 1


def randomize_bn(m, seed):
    """Running statistics and counters as after some training."""
    import torch
    g = torch.Generator().manual_seed(seed + 1)
    for mod in m.modules():
        if isinstance(mod, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)):
            n = mod.num_features
            mod.running_mean.copy_(torch.randn(n, generator=g) * 0.1)
            mod.running_var.copy_(torch.rand(n, generator=g) + 0.5)
            mod.weight.data.copy_(torch.rand(n, generator=g) + 0.5)
            mod.bias.data.copy_(torch.randn(n, generator=g) * 0.1)
            mod.num_batches_tracked.fill_(7)


class _Storage:
    """A storage for save_old's pickler: pickled as its persistent id."""
    def __init__(self, key, t):
        self.key, self.t = key, t


class _OldTensor:
    """A tensor as torch 0.3 pickled it: _rebuild_tensor(storage, offset, size, stride)."""
    def __init__(self, st, t):
        self.st, self.t = st, t

    def __reduce__(self):
        import torch
        return (torch._utils._rebuild_tensor, (self.st, 0, tuple(self.t.size()), tuple(self.t.stride())))


def save_old(sd, path):
    """torch's legacy format as torch 0.3 wrote torchvision's first hub files."""
    import torch
    stypes = {torch.float32: torch.FloatStorage, torch.int64: torch.LongStorage}

    class P(pickle.Pickler):
        def persistent_id(self, obj):
            if isinstance(obj, _Storage):
                return ("storage", stypes[obj.t.dtype], obj.key, "cuda:0", obj.t.numel(), None)
            return None
    from collections import OrderedDict
    od, storages = OrderedDict(), {}
    for i, (k, v) in enumerate(sd.items()):
        if k.endswith("num_batches_tracked"):
            continue
        st = _Storage(str(94000000000000 + 64 * i), v.contiguous())
        storages[st.key] = st
        od[k] = _OldTensor(st, v)
    with open(path, "wb") as f:
        pickle.dump(0x1950a86a20f9469cfc6c, f, protocol=2)
        pickle.dump(1001, f, protocol=2)
        pickle.dump({"protocol_version": 1001, "little_endian": True,
                     "type_sizes": {"short": 2, "int": 4, "long": 4}}, f, protocol=2)
        P(f, protocol=2).dump(od)
        keys = sorted(storages)
        pickle.dump(keys, f, protocol=2)
        for k in keys:
            t = storages[k].t
            f.write(struct.pack("<q", t.numel()))
            f.write(t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes())


def save(sd, out, opts):
    import torch
    if "--odd" in opts:
        w = next(v for k, v in sd.items() if k.endswith("weight") and v.dim() == 2)
        sd["t"] = w.t()
        sd["slice"] = w[1:3, 2:5]
        sd["h"] = w.half()
        sd["b"] = w.bfloat16()
        sd["i"] = torch.arange(-3, 4, dtype=torch.int32)
        sd["flag"] = torch.tensor([True, False, True])
        sd["scalar"] = torch.tensor(2.5, dtype=torch.float64)
        sd["again"] = sd["t"]
    if "--wrap" in opts:
        sd = {"epoch": 3, "state_dict": sd, "note": "wrapped", "best": [1, 2]}
    if "--old" in opts:
        return save_old(sd, out)
    p = int(opts[opts.index("--protocol") + 1]) if "--protocol" in opts else 2
    torch.save(sd, out, pickle_protocol=p, _use_new_zipfile_serialization="--legacy" not in opts)


def main(argv):
    cmd = argv[1]
    if cmd == "check":
        try:
            import torch, torchvision  # noqa: F401
        except ImportError:
            return 77
        return 0
    import torch
    if cmd == "predict":
        path, pred, data, spec, shape = argv[2:7]
        m = sequential(spec, parse_shape(shape))
        m.load_state_dict(load_weights(path), strict=True)
        return compare(m, pred, data)
    if cmd == "tv-predict":
        import torchvision
        n, classes, path, pred, data = argv[2:7]
        m = getattr(torchvision.models, "resnet" + n)(num_classes=int(classes))
        m.load_state_dict(load_weights(path), strict=True)
        return compare(m, pred, data)
    if cmd == "save":
        spec, shape, seed, out = argv[2:6]
        torch.manual_seed(int(seed))
        m = sequential(spec, parse_shape(shape))
        randomize_bn(m, int(seed))
        save(m.state_dict(), out, argv[6:])
        return 0
    if cmd == "tv-save":
        import torchvision
        n, classes, seed, out = argv[2:6]
        torch.manual_seed(int(seed))
        m = getattr(torchvision.models, "resnet" + n)(num_classes=int(classes))
        randomize_bn(m, int(seed))
        save(m.state_dict(), out, argv[6:])
        return 0
    if cmd == "same":
        st, pth = argv[2:4]
        # torch 1.13's weights_only loader knows no protocol 4 (FRAME, MEMOIZE...):
        # --trusted for the files this script made
        ref = torch.load(pth, map_location="cpu", weights_only="--trusted" not in argv)
        if "state_dict" in ref and isinstance(ref["state_dict"], dict):
            ref = ref["state_dict"]
        with open(st, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
            data = f.read()
        header.pop("__metadata__", None)
        names = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16,
                 "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32, "BOOL": torch.bool}
        if list(header) != list(ref):
            print(f"names {list(header)} != {list(ref)}")
            return 1
        for k, t in header.items():
            r = ref[k].contiguous()
            b, e = t["data_offsets"]
            want = r.reshape(-1).view(torch.uint8).numpy().tobytes() if r.numel() else b""
            if names[t["dtype"]] != r.dtype or t["shape"] != list(r.shape) or data[b:e] != want:
                print(f"{k}: {t['dtype']} {t['shape']} != {r.dtype} {list(r.shape)} or other bytes")
                return 1
        print(f"{len(ref)} tensors the same")
        return 0
    if cmd == "evil":
        class Evil:
            def __reduce__(self):
                return (os.system, ("touch pwned",))
        torch.save({"w": torch.zeros(2), "x": Evil()}, argv[2])
        return 0
    if cmd == "module":
        torch.save(torch.nn.Sequential(torch.nn.Linear(2, 2)), argv[2])
        return 0
    if cmd == "script":
        torch.jit.save(torch.jit.script(torch.nn.Sequential(torch.nn.Linear(2, 2))), argv[2])
        return 0
    if cmd == "refuses":
        try:
            torch.load(argv[2], map_location="cpu", weights_only=True)
        except Exception as e:  # torch's UnpicklingError, RuntimeError...
            print(str(e).splitlines()[0][:200])
            return 0
        return 1
    sys.exit(f"ckpt_ref: unknown command {cmd}")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
