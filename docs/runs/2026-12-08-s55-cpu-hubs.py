import time, statistics, torch, sys
import torch_quiver_ops as qv
from torch_quiver_ops import ops
HUBS, DEGREE, NODES = 32, 100_000, 1_000_000
gen = torch.Generator().manual_seed(0)
indptr = torch.zeros(NODES + 1, dtype=torch.long)
indptr[1:HUBS + 1] = torch.arange(1, HUBS + 1) * DEGREE
indptr[HUBS + 1:] = HUBS * DEGREE
indices = torch.randint(0, NODES, (HUBS * DEGREE,), generator=gen)
weights = torch.rand(HUBS * DEGREE, generator=gen) * 0.9 + 0.1
sums = ops.row_cumsum(indptr, weights)
seeds = torch.arange(HUBS)
print("threads", torch.get_num_threads())
for k in (64, 1000, 5000):
    for name, kw in (("uniform", {}), ("weighted sums", dict(edge_weight=weights, edge_weight_cumsum=sums))):
        call = lambda: ops.neighbor_sample(indptr, indices, seeds, [k], **kw)
        call(); ts = []
        for _ in range(7):
            t = time.perf_counter(); call(); ts.append(time.perf_counter() - t)
        ms = statistics.median(ts) * 1e3
        print(f"fanout {k:>5} {name:<14} {ms:8.2f} ms {HUBS*k/ms/1e3:6.2f} Medges/s")
# a normal batch: 1024 seeds of a 1M-node graph of degree 10
ip = torch.arange(0, (NODES + 1) * 10, 10); ind = torch.randint(0, NODES, (NODES * 10,), generator=gen)
s2 = torch.randint(0, NODES, (1024,), generator=gen)
call = lambda: ops.neighbor_sample(ip, ind, s2, [15, 10, 5])
call(); ts = []
for _ in range(15):
    t = time.perf_counter(); call(); ts.append(time.perf_counter() - t)
print(f"1024 seeds [15,10,5] uniform {statistics.median(ts)*1e3:8.2f} ms")
