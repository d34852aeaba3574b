#!/usr/bin/python3
"""tests/torchops_ref.py - PyTorch's results for tests/unit/torchops.c.

Writes to stdout, little endian, a sequence of float32 arrays, each as u32
count then the values, in the order below (the C side knows the shapes):

  max pooling, MaxPool2d(3, 2, padding=1), for x (2, 3, 9, 8) with many
  ties (values on a grid of 0.5), then x (1, 2, 8, 8) with a NaN and a
  window of -infinity only; then MaxPool2d(2, 2) of x (1, 2, 8, 8) with a
  NaN at each corner of a window:  x, dy, y, indices (as floats), dx
  batch normalisation, BatchNorm2d(c, eps=1e-5, momentum=0.1), for x
  (6, 3, 5, 5) then (10, 4, 1, 1):
    training:    x, dy, gamma, beta, y, running mean, running variance
                 (from 0 and 1), dx, dgamma, dbeta of the loss sum(y * dy)
    evaluation:  running mean, running variance, y, dx, dgamma, dbeta
"""
import sys

import numpy as np
import torch

torch.set_num_threads(1)
out = sys.stdout.buffer
rng = np.random.default_rng(15)


def put(a):
    a = np.ascontiguousarray(np.asarray(a, dtype=np.float32))
    out.write(np.uint32(a.size).tobytes())
    out.write(a.tobytes())


def f32(a):
    return np.asarray(a, dtype=np.float32)


for shape, k, p, special in (((2, 3, 9, 8), 3, 1, False), ((1, 2, 8, 8), 3, 1, True),
                             ((1, 2, 8, 8), 2, 0, True)):
    x = f32(np.round(rng.uniform(-2, 2, shape) * 2) / 2)
    if special:
        x[0, 0, 3, 3] = np.nan
        x[0, 1, 0:2, :] = -np.inf
        x[0, 0, 0, 5] = x[0, 0, 5, 0] = x[0, 0, 5, 7] = np.nan
    oh, ow = (shape[2] + 2 * p - k) // 2 + 1, (shape[3] + 2 * p - k) // 2 + 1
    dy = f32(rng.standard_normal((shape[0], shape[1], oh, ow)))
    t = torch.tensor(x, requires_grad=True)
    y, idx = torch.nn.functional.max_pool2d(t, k, 2, p, return_indices=True)
    y.backward(torch.tensor(dy))
    for a in (x, dy, y.detach().numpy(), idx.numpy().astype(np.float32), t.grad.numpy()):
        put(a)

def through(bn, x, dy):
    """y = bn(x), then the gradients of sum(y * dy): y, dx, dgamma, dbeta."""
    bn.zero_grad()
    t = torch.tensor(x, requires_grad=True)
    y = bn(t)
    (y * torch.tensor(dy)).sum().backward()
    return [a.detach().numpy() for a in (y, t.grad, bn.weight.grad, bn.bias.grad)]


for shape in ((6, 3, 5, 5), (10, 4, 1, 1)):
    c = shape[1]
    x = f32(rng.standard_normal(shape) * 3 + 0.5)
    dy = f32(rng.standard_normal(shape))
    gamma = f32(rng.uniform(0.5, 1.5, c))
    beta = f32(rng.standard_normal(c))
    bn = torch.nn.BatchNorm2d(c, eps=1e-5, momentum=0.1)
    with torch.no_grad():
        bn.weight.copy_(torch.tensor(gamma))
        bn.bias.copy_(torch.tensor(beta))
    y, dx, dg, db = through(bn, x, dy)
    for a in (x, dy, gamma, beta, y, bn.running_mean.numpy(), bn.running_var.numpy(), dx, dg,
              db):
        put(a)
    rm = f32(rng.standard_normal(c))
    rv = f32(rng.uniform(0.5, 2, c))
    bn.eval()
    with torch.no_grad():
        bn.running_mean.copy_(torch.tensor(rm))
        bn.running_var.copy_(torch.tensor(rv))
    for a in [rm, rv] + through(bn, x, dy):
        put(a)
