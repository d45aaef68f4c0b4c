"""GraphSageSampler.sample with CPU seeds, synchronized per batch (products-like graph,
[15, 10, 5], 1024 seeds): median and p10 ms of 280 batches after 20 warm-up, sampled edges a
batch (every hop's) and edges per second at the median, GPU and UVA modes; and the raw op
(quiver::sample_subgraph, seeds already on the GPU, synchronized) beside it. One JSON line
at the end for plots.

    python scripts/compare_sampler_capture.py LABEL [captured|launched]

Run the builds or variants to compare in turn, each in its own process, on one machine
(PYTHONPATH and TORCH_QUIVER_OPS_LIBRARY pointing at each build), as docs/benchmarks.md
describes; a build before capture_batches existed takes no second argument.
"""
import argparse, json, statistics, sys, time, torch
import torch_quiver_ops as qv
from torch_quiver_ops.synthetic import synthetic_graph

parser = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("label", help="the row's label (the build or variant measured)")
parser.add_argument("capture", nargs="?", choices=("captured", "launched"),
                    help="capture_batches on or off (builds before it existed take none)")
cli = parser.parse_args()
if not (torch.cuda.is_available() and qv.cuda_kernels_built()):
    parser.error("this script times the GPU and UVA samplers: it needs a CUDA GPU and the "
                 "CUDA kernels")
dev = torch.device("cuda", 0)
g = synthetic_graph("products", device=dev, csr=True)
topo = g.topology()
train = g.train_idx.cpu()
gen = torch.Generator().manual_seed(0)
seeds = [train[torch.randperm(train.numel(), generator=gen)[:1024]] for _ in range(300)]
res, row = [], {"label": sys.argv[1]}


def timed(call, batches):
    for b in batches[:20]:
        call(b)
    torch.cuda.synchronize()
    ts = []
    for b in batches[20:]:
        t0 = time.perf_counter(); call(b); torch.cuda.synchronize(); ts.append(time.perf_counter() - t0)
    return statistics.median(ts), statistics.quantiles(ts, n=10)[0]


for mode in ("GPU", "UVA"):
    kw = {} if len(sys.argv) < 3 else {"capture_batches": sys.argv[2] == "captured"}
    s = qv.GraphSageSampler(topo, [15, 10, 5], device=dev, mode=mode, **kw)
    edges = statistics.mean(int(s.sample_subgraph(b)[5].sum()) for b in seeds[:20])
    med, p10 = timed(s.sample, seeds)
    res.append(f"{mode} sample() {med*1e3:.3f} ms (p10 {p10*1e3:.3f}), {edges:.0f} edges, "
               f"{edges / med / 1e9:.2f} G edges/s")
    row[mode] = {"ms": med * 1e3, "p10_ms": p10 * 1e3, "edges": edges}
    indptr, indices = s.placed_topology()
    op_med, _ = timed(lambda b: qv.ops.sample_subgraph(indptr, indices, b, [15, 10, 5]),
                      [b.to(dev) for b in seeds])
    res.append(f"{mode} op {op_med*1e3:.3f} ms")
    row[mode]["op_ms"] = op_med * 1e3
print(sys.argv[1:], "; ".join(res), flush=True)
print("JSON", json.dumps(row), flush=True)
