#!/usr/bin/python3
"""tests/half_ref.py - the reference 16-bit conversions for tests/unit/half.c.

Writes to stdout, little endian: u32 n, then n float32 inputs, n uint16
(numpy's float16 cast of each), n uint16 (PyTorch's bfloat16 cast of
each); then the 65536 float16 bit patterns as float32 by numpy.  Inputs:
every float16 value, the midpoints between neighbouring float16 values
(ties), fp16's range edges, bfloat16 ties, and 2^20 random bit patterns
(NaNs, infinities and subnormals among them)."""
import sys

import numpy as np
import torch

h = np.arange(65536, dtype=np.uint16).view(np.float16)
f = h.astype(np.float32)
fin = f[np.isfinite(f)]
fin = np.sort(fin)
mid = ((fin[:-1].astype(np.float64) + fin[1:]) / 2).astype(np.float32)
rng = np.random.default_rng(7)
rand = rng.integers(0, 2**32, size=1 << 20, dtype=np.uint64).astype(np.uint32).view(np.float32)
b = rng.integers(0, 2**16, size=1 << 16, dtype=np.uint32)
bf_ties = ((b << 16) | 0x8000).astype(np.uint32).view(np.float32)
edges = np.array([65504, 65519, 65520, 65536, 1e9, 6.1035156e-05, 5.9604645e-08, 2.9802322e-08,
                  2.98023259e-08, 0, -0.0, np.inf, -np.inf, np.nan], dtype=np.float32)
x = np.concatenate([f, mid, bf_ties, edges, rand]).astype(np.float32)
with np.errstate(over="ignore", invalid="ignore"):
    f16 = x.astype(np.float16).view(np.uint16)
bf16 = torch.from_numpy(x.copy()).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
out = sys.stdout.buffer
out.write(np.uint32(len(x)).tobytes())
out.write(x.tobytes())
out.write(f16.tobytes())
out.write(bf16.tobytes())
out.write(f.tobytes())
