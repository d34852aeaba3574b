"""bench/ddp_hosts.py - the PyTorch DDP (gloo) peer of bench/allreduce-hosts.sh, one
process per emulated host: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the
environment (as torchrun sets them), one thread, the MLP 784-1024-1024-10 on random
data, batch BATCH per rank, Adam 1e-3.  Rank 0 prints total samples/s over STEPS
steps after 5 warm-up steps (total samples / total time).
Usage: ddp_hosts.py BATCH STEPS"""
import os, sys, time
import torch, torch.nn as nn, torch.distributed as dist

batch, steps = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, n = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
m = nn.parallel.DistributedDataParallel(nn.Sequential(
    nn.Flatten(), nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
    nn.Linear(1024, 10)))
x = torch.randn(batch, 1, 28, 28); y = torch.randint(0, 10, (batch,))
opt = torch.optim.Adam(m.parameters(), 1e-3); lossf = nn.CrossEntropyLoss()
def step():
    opt.zero_grad(); lossf(m(x), y).backward(); opt.step()
for _ in range(5):
    step()
dist.barrier(); t = time.perf_counter()
for _ in range(steps):
    step()
dist.barrier(); t = time.perf_counter() - t
if rank == 0:
    print(f"ddp-gloo mlp1024 hosts={n} batch={batch} samples_per_sec={n * steps * batch / t:.0f}")
dist.destroy_process_group()
