# maxdiff.py A B: the largest difference between the float tensors of two
# dp-train checkpoints (0.0: the same weights to the bit).
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np
from torch_ref import load_checkpoint

a, _ = load_checkpoint(sys.argv[1])
b, _ = load_checkpoint(sys.argv[2])
assert a.keys() == b.keys()
print(max(float(np.max(np.abs(a[k].astype(np.float64) - b[k].astype(np.float64))))
          for k in a if a[k].dtype.kind == "f"))
