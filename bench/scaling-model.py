#!/usr/bin/python3
"""bench/scaling-model.py - where data-parallel scaling goes at 8 to 1024 ranks, by a
small model of a step fitted to measured points (issue 16).

    scaling-model.py ALLREDUCE_HOSTS_OUTPUT

reads bench/allreduce-hosts.sh's lines (the 64 KiB and 32 MiB allreduces on 2 and 4
emulated hosts at 1 Gbit/s), fits the alpha-beta cost of the ring

    t_ring(n bytes, p) = 2 (p-1) alpha + 2 (p-1)/p n / B_eff

(alpha: a step of the ring's latency; B_eff: the rate a link reaches), checks the fit
against the points it did not use (4 hosts), then predicts for 8..1024 ranks (8 a host)
on 10, 25 and 100 Gbit/s links the scaling efficiency (time of a step alone / time of
a step in the job) of three models, with the backward pass hiding up to `overlap` of
its time:

    flat ring:     2 (p-1) alpha + 2 (p-1)/p n / B
    hierarchical:  intra-host reduce + broadcast (shared memory, 10 GB/s) +
                   2 (h-1) alpha + 2 (h-1)/h n / B        (h = p / 8 hosts)
    tree (MPI's recursive doubling, for latency): 2 log2(p) alpha + 2 log2(p) n / B

and says from what scale the flat ring stops being the right default.  The
compute time of a step of each model comes from the same output (lines
"compute MODEL SECONDS", measured by bench/allreduce-hosts.sh on one rank of this
machine: dp-train for the CNN and the MLP, torchvision's resnet50 for ResNet-50);
alpha is kept at other link speeds (latency does not scale with rate), B_eff is the
measured fraction of the link rate times the new rate.
"""
import math
import re
import sys

MODELS = {  # name in the output: label, gradient bytes, backward share of a step
    "cnn": ("seed CNN (1.2M)", 1_199_882 * 4, 0.6),
    "mlp": ("MLP 784-1024-1024-10 (1.9M)", 1_863_690 * 4, 0.6),
    "resnet50": ("ResNet-50 (25.6M), this CPU", 25_557_032 * 4, 0.65),
    "resnet50-gpu": ("ResNet-50 (25.6M), a GPU (assumed)", 25_557_032 * 4, 0.65),
}
SHM = 10e9 * 8  # bits/s within a host


def parse(path):
    pts, compute = [], {}
    for line in open(path):
        if line.startswith("compute "):
            _, name, sec = line.split()[:3]
            compute[name] = float(sec)
            continue
        if not line.startswith("link=1gbit size="):
            continue
        kv = dict(x.split("=", 1) for x in line.split() if "=" in x)
        if kv.get("wire") != "fp32" or kv.get("algo") != "ring":
            continue
        mib = float(kv["size"].rstrip("MiB"))
        pts.append((int(kv["ranks"]), mib * 1048576, float(kv["sec"])))
    return pts, compute


def fit(pts):
    """alpha from the small messages, B_eff from the large ones: the best seen (a
    2-host ring of float32 reached only about half the link in some runs, see
    bench/REPORT; the model takes what the link is shown to carry)."""
    small = [t / (2 * (p - 1)) for p, n, t in pts if n < 1e6]
    large = [(2 * (p - 1) / p * n * 8) / t for p, n, t in pts if n > 1e6]
    return (min(small) if small else 50e-6), (max(large) if large else 0.9e9)


def ring(n, p, alpha, bw):
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n * 8 / bw


def hier(n, p, alpha, bw, per=8):
    h = max(1, p // per)
    return 2 * n * 8 / SHM + (ring(n, h, alpha, bw) if h > 1 else 0)


def tree(n, p, alpha, bw):
    k = math.log2(p)
    return 2 * k * alpha + 2 * k * n * 8 / bw


def eff(compute, back, t):
    hidden = min(t, back * compute)
    return compute / (compute + t - hidden)


def main():
    pts, compute = parse(sys.argv[1])
    # not measured here (no GPU): ResNet-50 on one V100 in float32, about 400
    # images/s by NVIDIA's published training figures: 80 ms a batch of 32
    compute["resnet50-gpu"] = 0.080
    alpha, b1 = fit(pts)
    frac = b1 / 1e9
    print(f"fit (1 Gbit/s): alpha = {alpha * 1e6:.0f} us a ring step, "
          f"B_eff = {b1 / 1e9:.3f} Gbit/s ({frac:.0%} of the link)")
    for p, n, t in pts:
        print(f"  check: {p} hosts, {n / 1048576:g} MiB: measured {t * 1e3:.2f} ms, "
                  f"model {ring(n, p, alpha, b1) * 1e3:.2f} ms")
    print()
    print("predicted scaling efficiency (8 ranks a host; flat ring / hierarchical / tree):")
    for link in (10, 25, 100):
        bw = frac * link * 1e9
        print(f"-- {link} Gbit/s")
        for key, (name, n, back) in MODELS.items():
            if key not in compute:
                continue
            row = []
            switch = None
            for p in (8, 16, 64, 256, 1024):
                e = [eff(compute[key], back, f(n, p, alpha, bw)) for f in (ring, hier, tree)]
                row.append(f"{p}: {e[0]:.2f}/{e[1]:.2f}/{e[2]:.2f}")
                if switch is None and max(e[1], e[2]) > e[0] + 0.01:
                    switch = p
            print(f"   {name}, {compute[key] * 1e3:.0f} ms a step: " + "  ".join(row) +
                  (f"   flat ring no longer best from {switch} ranks" if switch else ""))


if __name__ == "__main__":
    main()
