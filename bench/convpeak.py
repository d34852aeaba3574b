#!/usr/bin/python3
"""bench/convpeak.py - each convolution shape's chosen implementation and its
share of the machine's peak (issue 29's table in bench/REPORT).

    dp-train --train R --model resnet50 --input-shape 3x224x224 \\
        --batch-size 16 --threads 1 --classes 10 --summary > s.txt
    python3 bench/convpeak.py resnet50 16 PEAK_GFLOPS s.txt

Reads the "convolutions at batch N" lines of dp-train --summary (forward,
input gradient, filter gradient: the implementation chosen and every
candidate's time), takes each layer's shape from torchvision's model of
the same name at 3x224x224, and prints per shape (layers of one shape
once, "(+N)" more) the chosen implementation, its time, and GFLOP/s
counted as the direct algorithm's multiply-adds, 2 x N x Cout x Hout x
Wout x Cin x kh x kw, as a share of PEAK (above 100%: fewer
multiplications than the direct algorithm, e.g. Winograd's).
"""
import re, sys, torch, torchvision
model, batch, peak, path = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
m = getattr(torchvision.models, model)()
shapes = {}
def hook(name):
    def f(mod, inp, out):
        shapes[name] = (mod.in_channels, mod.out_channels, out.shape[2], out.shape[3],
                        mod.kernel_size[0], mod.kernel_size[1], mod.stride[0])
    return f
for n, mod in m.named_modules():
    if isinstance(mod, torch.nn.Conv2d):
        mod.register_forward_hook(hook(n))
with torch.no_grad():
    m(torch.zeros(1, 3, 224, 224))
seen = {}
for line in open(path):
    mm = re.match(r'\d+\s+(\S+)\s+(?:\S+: )?forward (.*)', line)
    if not mm:
        continue
    name = mm.group(1)
    ci, co, ho, wo, kh, kw, s = shapes[name]
    key = (ci, co, ho, wo, kh, kw, s)
    flops = 2.0 * batch * co * ho * wo * ci * kh * kw
    out = []
    for part in re.split(r'; (?:input|filter) gradient ', mm.group(2)):
        pm = re.match(r'(\S+) \((.*)\)', part)
        algo = pm.group(1)
        t = dict((a, float(v)) for a, v in re.findall(r'(\S+) ([0-9.]+) ms', pm.group(2)))[algo]
        g = flops / t / 1e6
        out.append('%s %.3g ms %.0f GFLOP/s %.0f%%' % (algo, t, g, 100 * g / peak))
    if key in seen:
        seen[key][0].append(name)
        continue
    seen[key] = ([name], '%dx%d/%d %d->%d on %dx%d' % (kh, kw, s, ci, co, ho, wo), out)
for names, shape, out in seen.values():
    print('  %-28s %-24s %s' % (shape, names[0] + (' (+%d)' % (len(names) - 1) if len(names) > 1 else ''), ' | '.join(out)))
