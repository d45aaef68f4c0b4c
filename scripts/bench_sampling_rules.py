"""Weighted, temporal and disjoint sampling beside uniform sampling, in one run.

    python scripts/bench_sampling_rules.py [--graph products] [--batches 100] [--json out.json]
    python scripts/bench_sampling_rules.py --plot out.json --png out.png   # the figure

The products-like graph with a random weight (uniform in [0.1, 1)) and a random timestamp
(uniform in [0, 10^6), rows sorted by time) on every edge; fanouts [15, 10, 5], batches of
1024 seeds drawn from 8% of the nodes. Seeds (and seed times, uniform in [0.5, 1) x 10^6 so
that most edges are admitted) start on the host, as a DataLoader hands them out; each timed
call includes their copy to the GPU. For GPU mode (topology in HBM), UVA mode (indptr in
HBM, indices and the per-edge arrays in pinned host memory) and the CPU:

  uniform (sample_subgraph)  the baseline, replayed as CUDA graphs
  uniform (neighbor_sample)  the same rows through neighbor_sample's loop (no graphs)
  weighted                   successive sampling by edge weight (a key per neighbor)
  weighted (prefix sums)     the same draws by binary search in each row's prefix sums
  temporal uniform / last    edges at or before each seed's time, disjoint trees
  disjoint                   disjoint trees, no time

Prints ms per batch (median), sampled edges per batch and per second (every edge of every
hop of the batch), and each variant's ratio to the uniform baseline of the same mode (the
issue's target: weighted and temporal GPU <= 1.5x).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

try:  # --plot needs only matplotlib
    import torch

    from torch_quiver_ops import ops
    from torch_quiver_ops.synthetic import synthetic_graph
except ImportError:
    torch = None

FANOUTS = [15, 10, 5]
TIME_SPAN = 1_000_000


def place(t, mode, device):
    if mode == "GPU":
        return t.to(device)
    if mode == "UVA":
        return t.pin_memory()
    return t


def variants(arrays):
    indptr, indices, eid, weight, times, sums = arrays
    uniform = lambda s, st: ops.sample_subgraph(indptr, indices, s, FANOUTS, False, eid)
    general = lambda s, st, **kw: ops.neighbor_sample(indptr, indices, s, FANOUTS, edge_ids=eid,
                                                      **kw)
    return {
        "uniform (sample_subgraph)": uniform,
        "uniform (neighbor_sample)": lambda s, st: general(s, st),
        "weighted": lambda s, st: general(s, st, edge_weight=weight),
        "weighted (prefix sums)": lambda s, st: general(s, st, edge_weight=weight,
                                                        edge_weight_cumsum=sums),
        "temporal uniform": lambda s, st: general(s, st, edge_time=times, seed_time=st,
                                                  disjoint=True),
        "temporal last": lambda s, st: general(s, st, edge_time=times, seed_time=st,
                                               temporal_strategy="last", disjoint=True),
        "disjoint": lambda s, st: general(s, st, disjoint=True),
    }


def time_variant(fn, batches, seed_times, device, warmup):
    on_gpu = device.type == "cuda"
    times, edges = [], 0
    for i, (seeds, st) in enumerate(zip(batches, seed_times)):
        if on_gpu:
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        out = fn(seeds.to(device, non_blocking=True), st.to(device, non_blocking=True))
        if on_gpu:
            torch.cuda.synchronize(device)
        if i >= warmup:
            times.append(time.perf_counter() - start)
            edges += int(out[-1].sum())
    return times, edges


def run(args):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    graph = synthetic_graph(args.graph, features=False, csr=True,
                            device=device if device.type == "cuda" else None)
    indptr, indices = graph.indptr, graph.indices
    gen = torch.Generator(device=indices.device).manual_seed(0)
    weight = torch.rand(indices.numel(), generator=gen, device=indices.device) * 0.9 + 0.1
    edge_time = torch.randint(0, TIME_SPAN, (indices.numel(),), generator=gen,
                              device=indices.device)
    indices, eid, times = ops.sort_rows_by_time(indptr.to(indices.device), indices,
                                                edge_time=edge_time)
    weight = weight[eid]  # the weights follow their edges
    sums = ops.row_cumsum(indptr.to(weight.device), weight)
    host = [t.cpu() for t in (indptr, indices, eid, weight, times, sums)]
    del graph, indices, eid, weight, times, edge_time, sums
    num_nodes = host[0].numel() - 1
    print(f"graph {args.graph!r}: {num_nodes:,} nodes, {host[1].numel():,} edges, fanouts "
          f"{FANOUTS}, batch {args.batch_size}, device "
          f"{torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}\n", flush=True)
    cpu_gen = torch.Generator().manual_seed(1)
    train = torch.randperm(num_nodes, generator=cpu_gen)[:int(0.08 * num_nodes)]
    total = args.warmup + args.batches
    pin = (lambda t: t.pin_memory()) if device.type == "cuda" else (lambda t: t)
    batches = [pin(train[torch.randint(train.numel(), (args.batch_size,), generator=cpu_gen)])
               for _ in range(total)]
    seed_times = [pin(torch.randint(TIME_SPAN // 2, TIME_SPAN, (args.batch_size,),
                                    generator=cpu_gen)) for _ in range(total)]
    rows = []
    modes = ([m for m in args.modes.split(",") if m] if device.type == "cuda" else ["CPU"])
    for mode in modes:
        run_device = device if mode != "CPU" else torch.device("cpu")
        arrays = [place(host[0], "GPU" if mode != "CPU" else "CPU", device)] + \
                 [place(t, mode, device) for t in host[1:]]
        n = total if mode != "CPU" else args.warmup + args.cpu_batches
        base = base_eps = None
        for name, fn in variants(arrays).items():
            times, edges = time_variant(fn, batches[:n], seed_times[:n], run_device, args.warmup)
            ms = 1e3 * statistics.median(times)
            base = base or ms
            row = {"mode": mode, "variant": name, "ms_per_batch": ms,
                   "edges_per_batch": edges / len(times), "eps": edges / sum(times),
                   "vs_uniform": ms / base}
            base_eps = base_eps or row["eps"]
            row["per_edge_vs_uniform"] = base_eps / row["eps"]
            rows.append(row)
            print(f"  {mode:3s}  {name:26s} {ms:8.3f} ms/batch  {row['edges_per_batch']:10,.0f} "
                  f"edges/batch  {row['eps'] / 1e6:8.1f} M edges/s  {row['vs_uniform']:5.2f}x uniform "
                  f"({row['per_edge_vs_uniform']:4.2f}x per edge)", flush=True)
        del arrays
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def plot(path, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = json.load(open(path))["rows"]
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    names = list(dict.fromkeys(r["variant"] for r in rows))
    fig, axes = plt.subplots(1, len(modes), figsize=(4.2 * len(modes), 4))
    axes = axes if len(modes) > 1 else [axes]
    for ax, mode in zip(axes, modes):
        ms = [next(r["ms_per_batch"] for r in rows if r["mode"] == mode and r["variant"] == n)
              for n in names]
        ax.barh(range(len(names)), ms, color=["#777"] + ["#3b75af"] * (len(names) - 1))
        ax.set_yticks(range(len(names)), names if ax is axes[0] else [""] * len(names))
        ax.invert_yaxis()
        ax.set_title(f"{mode}: ms per batch")
        if mode != "CPU":
            ax.axvline(1.5 * ms[0], color="#c44", ls="--", lw=1, label="1.5x uniform")
            ax.legend(loc="lower right", fontsize=8)
    fig.suptitle("[15, 10, 5] from 1024 host seeds, products-like graph")
    fig.tight_layout()
    fig.savefig(png, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--graph", default="products")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--cpu-batches", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--modes", default="GPU,UVA,CPU", help="on a GPU machine: which of "
                        "GPU, UVA, CPU to run")
    parser.add_argument("--json")
    parser.add_argument("--plot", help="draw the figure from this JSON and exit")
    parser.add_argument("--png", default="bench_sampling_rules.png")
    args = parser.parse_args()
    if args.plot:
        plot(args.plot, args.png)
        return
    rows = run(args)
    if args.json:
        json.dump({"args": vars(args), "rows": rows}, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
