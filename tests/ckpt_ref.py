"""ckpt_ref.py - PyTorch (Debian python3-torch) as the peer of dp-ckpt.

  ckpt_ref.py predict WEIGHTS PRED.jsonl DATA.npz SPEC SHAPE
        load WEIGHTS (safetensors, read with the snippet of dp-checkpoint(5))
        into the torch.nn.Sequential of SPEC with load_state_dict(strict=True),
        every tensor of the file as it is (no key left out); run it (eval mode)
        on DATA's x and compare the softmax with the "probabilities" of
        dp-eval's PRED.jsonl, record by record; exit 0 when they agree within
        1e-5, printing the largest difference
"""
import json, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np
from torch_ref import load_checkpoint, parse_shape, sequential


def state_dict(tensors):
    import torch
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


def main(argv):
    cmd = argv[1]
    if cmd == "predict":
        path, pred, data, spec, shape = argv[2:7]
        tensors, _ = load_checkpoint(path)
        m = sequential(spec, parse_shape(shape))
        m.load_state_dict(state_dict(tensors), strict=True)
        return compare(m, pred, data)
    sys.exit(f"ckpt_ref: unknown command {cmd}")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
