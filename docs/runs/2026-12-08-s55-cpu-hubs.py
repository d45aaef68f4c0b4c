"""The GPU hub benchmark's graph (scripts/bench_weighted_hubs.py) sampled on the CPU, and an
ordinary batch; run from the repository root (docs/benchmarks.md, fifty-fifth session)."""
import statistics
import sys
import time

import torch

from torch_quiver_ops import ops

sys.path.insert(0, "scripts")
from bench_weighted_hubs import HUBS, NODES, hub_graph  # noqa: E402

indptr, indices, weights, sums = hub_graph()
seeds = torch.arange(HUBS)
print("threads", torch.get_num_threads())


def median_ms(call, times):
    call()
    spent = []
    for _ in range(times):
        start = time.perf_counter()
        call()
        spent.append(time.perf_counter() - start)
    return statistics.median(spent) * 1e3


for k in (64, 1000, 5000):
    for name, rules in (("uniform", {}),
                        ("weighted sums", dict(edge_weight=weights, edge_weight_cumsum=sums))):
        ms = median_ms(lambda: ops.neighbor_sample(indptr, indices, seeds, [k], **rules), 7)
        print(f"fanout {k:>5} {name:<14} {ms:8.2f} ms {HUBS * k / ms / 1e3:6.2f} Medges/s")
# An ordinary batch: 1,024 seeds of a 1M-node graph of degree 10.
gen = torch.Generator().manual_seed(1)
ordinary_indptr = torch.arange(0, (NODES + 1) * 10, 10)
ordinary_indices = torch.randint(0, NODES, (NODES * 10,), generator=gen)
batch = torch.randint(0, NODES, (1024,), generator=gen)
ms = median_ms(lambda: ops.neighbor_sample(ordinary_indptr, ordinary_indices, batch,
                                           [15, 10, 5]), 15)
print(f"1024 seeds [15,10,5] uniform {ms:8.2f} ms")
