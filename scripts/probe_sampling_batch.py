"""Where a GPU-mode batch's time goes through GraphSageSampler.sample with CPU seeds
(products-like graph, [15, 10, 5], 1024 seeds): the call's median, unsynchronized (as a
loader calls it) and synchronized each call, its parts (seeds to the
GPU, the op, building the adjacency lists), the op with seeds already on the GPU and with
seeds from the host carried in the batch's upload (sample()'s own path since 2026-11-28), and a
profile of 10 calls (kernels by GPU time, then host calls), its trace in $OUT.

    python scripts/probe_sampling_batch.py                  # batches replayed as graphs
    python scripts/probe_sampling_batch.py --launched       # every batch run as launched
"""
import statistics, time, sys, os
import torch
import torch_quiver_ops as qv
from torch_quiver_ops.sampler import layers_of
from torch_quiver_ops.synthetic import synthetic_graph

if "-h" in sys.argv or "--help" in sys.argv:
    print(__doc__)
    sys.exit(0)
if not (torch.cuda.is_available() and qv.cuda_kernels_built()):
    sys.exit("probe_sampling_batch.py measures GPU sampling: it needs a CUDA GPU and the "
             "library built with its CUDA kernels")
dev = torch.device("cuda", 0)
g = synthetic_graph("products", device=dev, csr=True)
topo = g.topology()
s = qv.GraphSageSampler(topo, [15, 10, 5], device=dev, mode="GPU",
                       capture_batches="--launched" not in sys.argv)
gen = torch.Generator().manual_seed(0)
train = g.train_idx.cpu()
seeds = [train[torch.randperm(train.numel(), generator=gen)[:1024]] for _ in range(200)]
for b in seeds[:10]:
    s.sample(b)
torch.cuda.synchronize()

def med(xs): return statistics.median(xs) * 1e3

t_sample, t_synced, t_copy, t_op, t_layers, t_gpu_seeds = [], [], [], [], [], []
gpu_seeds = [b.to(dev) for b in seeds]
# sample() as a loader calls it (no synchronize: the host returns once the batch's kernels
# are queued and its sizes known) and each call synchronized (the batch's kernels done), in
# alternating order so that drift within the run falls on both.
for i, b in enumerate(seeds[10:]):
    for synced in ((False, True) if i % 2 == 0 else (True, False)):
        torch.cuda.synchronize()
        t0 = time.perf_counter(); s.sample(b)
        if synced:
            torch.cuda.synchronize()
        (t_synced if synced else t_sample).append(time.perf_counter() - t0)
for b in seeds[10:]:
    t0 = time.perf_counter(); sd = s._seeds(b); t1 = time.perf_counter()
    out = s._sampler.sample_subgraph(sd, None)
    t2 = time.perf_counter(); layers_of(out, s.return_eid); t3 = time.perf_counter()
    t_copy.append(t1 - t0); t_op.append(t2 - t1); t_layers.append(t3 - t2)
for gb in gpu_seeds[10:]:
    t0 = time.perf_counter()
    s._sampler.sample_subgraph(gb, None)
    t_gpu_seeds.append(time.perf_counter() - t0)
t_host_seeds = []
for b in seeds[10:]:
    t0 = time.perf_counter()
    s._sampler.sample_subgraph_on(b, dev.index, None)
    t_host_seeds.append(time.perf_counter() - t0)
edges = sum(int(x) for x in s.sample_subgraph(seeds[0])[5])
print(f"sample() CPU seeds, unsynchronized: median {med(t_sample):.3f} ms "
      f"(p10 {statistics.quantiles(t_sample, n=10)[0]*1e3:.3f}); edges/batch {edges} "
      f"(every hop's sampled edges): {edges / med(t_sample) * 1e-6:.2f} G edges/s")
print(f"sample() CPU seeds, each call synchronized: median {med(t_synced):.3f} ms "
      f"(p10 {statistics.quantiles(t_synced, n=10)[0]*1e3:.3f}): "
      f"{edges / med(t_synced) * 1e-6:.2f} G edges/s")
print(f"  seeds .to(cuda) {med(t_copy):.3f} ms, sampling {med(t_op):.3f} ms, layers_of {med(t_layers):.3f} ms")
print(f"sampling, seeds on the GPU: {med(t_gpu_seeds):.3f} ms; seeds from the host riding "
      f"on the batch's upload (what sample() does): {med(t_host_seeds):.3f} ms")
# The GPU's span of one op call (first kernel queued to the last done, gaps included), and
# the floor: one seed, so that host work and launches are nearly all there is.
spans = []
for gb in gpu_seeds[10:110]:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(); s._sampler.sample_subgraph(gb, None); end.record(); end.synchronize()
    spans.append(start.elapsed_time(end) * 1e-3)
one = [b[:1] for b in seeds]
for b in one[:10]:
    s.sample(b)
t_one = []
for b in one[10:]:
    t0 = time.perf_counter(); s.sample(b); t_one.append(time.perf_counter() - t0)
print(f"GPU span of the op (events), seeds on the GPU: {med(spans):.3f} ms; "
      f"sample() of one seed: {med(t_one):.3f} ms")
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for b in seeds[20:30]:
        s.sample(b)
    torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=30))
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
prof.export_chrome_trace(os.path.join(os.environ.get("OUT", "."), "sampling_trace.json"))
