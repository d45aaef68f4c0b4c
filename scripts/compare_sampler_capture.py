"""GraphSageSampler.sample with its batches replayed as CUDA graphs or run as launched
(products-like graph, [15, 10, 5], 1024 CPU seeds, synchronized per batch): median and p10
of 280 batches after 20 warm-up, GPU and UVA modes.

    python scripts/compare_sampler_capture.py new captured|launched
    python scripts/compare_sampler_capture.py old     # a build before capture_batches existed

Run the variants in turn, each in its own process, on one machine (docs/benchmarks.md).
"""
import statistics, sys, time, torch
import torch_quiver_ops as qv
from torch_quiver_ops.synthetic import synthetic_graph
dev = torch.device("cuda", 0)
g = synthetic_graph("products", device=dev, csr=True)
topo = g.topology()
train = g.train_idx.cpu()
gen = torch.Generator().manual_seed(0)
seeds = [train[torch.randperm(train.numel(), generator=gen)[:1024]] for _ in range(300)]
res = []
for mode in ("GPU", "UVA"):
    kw = {} if sys.argv[1] == "old" else {"capture_batches": sys.argv[2] == "captured"}
    s = qv.GraphSageSampler(topo, [15, 10, 5], device=dev, mode=mode, **kw)
    for b in seeds[:20]:
        s.sample(b)
    torch.cuda.synchronize()
    ts = []
    for b in seeds[20:]:
        t0 = time.perf_counter(); s.sample(b); torch.cuda.synchronize(); ts.append(time.perf_counter() - t0)
    res.append(f"{mode} {statistics.median(ts)*1e3:.3f} ms (p10 {statistics.quantiles(ts, n=10)[0]*1e3:.3f})")
print(sys.argv[1:], "; ".join(res), flush=True)
