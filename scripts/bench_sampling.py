"""Sampling throughput on the GPU machine: GPU, UVA and CPU modes in one run.

    python scripts/bench_sampling.py [--graphs products,reddit] [--batches 30] [--json out.json]
    python scripts/bench_sampling.py --graphs papers     # papers100M-sized (111M nodes, 1.6B edges)

UVA mode runs three times: all neighbor lists in pinned host memory, then with a topology
cache (--topology-cache, default 20% of the lists' bytes, per-node starts included) holding
in GPU memory the lists of the highest-degree nodes ("deg"), or of the nodes with the most
sampled edges per byte over 20 presampled batches of training seeds ("pre",
qv.presample_topology_order). Samples are the same either way.

Sampled edges per second (SEPS) = edges sampled over all hops of a batch, summed over
the timed batches, divided by their synchronized wall time (after warm-up). Seeds are
batches of 1024 drawn from a fixed 8% training set. Beside each mode it prints the
random-read bound (the rate at which this device gathers random entries of `indices`,
the one read every sampled edge needs) and the CPU mode as the in-run baseline.

GPU mode and the presampled cache are also timed through ``SampleLoader`` (no feature),
with one worker and with several building batches at once on streams of their own
(--loader-workers, default 1,3): wall time per batch of a prefetched epoch of --batches
shuffled batches of training seeds, after a warm-up epoch.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

import torch_quiver_ops as qv
from torch_quiver_ops import _cli
from torch_quiver_ops.synthetic import synthetic_graph

WORKLOADS = {"products": [15, 10, 5], "reddit": [25, 10], "papers": [15, 10, 5]}
TARGETS_SEPS = {("products", "GPU"): 1.5e9, ("products", "UVA"): 400e6, ("products", "CPU"): 30e6}
TORCH_QUIVER_SEPS = {("products", "GPU"): 166e6, ("products", "UVA"): 128e6}  # issue #3, H100


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def time_batches(sampler, batches, warmup):
    for seeds in batches[:warmup]:
        sampler.sample_subgraph(seeds)
    sync()
    times, edges = [], 0
    for seeds in batches[warmup:]:
        start = time.perf_counter()
        out = sampler.sample_subgraph(seeds)
        sync()
        times.append(time.perf_counter() - start)
        edges += int(out[5].sum())
    return times, edges


def time_loader(sampler, seeds, batch_size, workers):
    """Batches through ``SampleLoader`` (sampling only: no feature), ``workers`` built at
    once on streams of their own: wall time per batch of a whole epoch after a warm-up
    epoch (as in training, where the loader's streams and memory carry over), and the
    edges sampled (all hops) in it."""
    loader = qv.SampleLoader(sampler, None, seeds, batch_size, prefetch=max(2, workers),
                             workers=workers, prefetch_in_cpp=False)  # Python's, any count
    for _ in loader:
        pass
    sync()
    edges, start = 0, time.perf_counter()
    for batch in loader:
        edges += batch.adjs[0].edge_index.size(1)  # outermost: every hop's edges
    sync()
    return (time.perf_counter() - start) / len(loader), edges / len(loader)


def profile_batches(sampler, batches, label):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for seeds in batches:
            sampler.sample_subgraph(seeds)
        sync()
    print(f"   -- profile of {len(batches)} batches, {label} (top kernels by GPU time)")
    table = prof.key_averages().table(sort_by="self_device_time_total", row_limit=12,
                                      max_name_column_width=60)
    print("\n".join("   " + line for line in table.splitlines()))


def random_read_bound(topo, num_reads, device, on_host):
    """Random single-entry reads of `indices` per second (GPU gather of random positions)."""
    indices = topo.indices
    if on_host:
        source = indices if indices.is_pinned() else indices.pin_memory()
    else:
        source = indices.to(device)
    positions = torch.randint(indices.numel(), (num_reads,), device=device)
    if on_host:
        # a gather kernel reading pinned host memory through its mapped pointer
        gather = lambda: qv.ops.gather_rows(source.view(-1, 1), positions)
    else:
        gather = lambda: torch.index_select(source, 0, positions)
    for _ in range(3):
        gather()
    sync()
    start = time.perf_counter()
    reps = 10
    for _ in range(reps):
        gather()
    sync()
    return reps * num_reads / (time.perf_counter() - start)


def run_graph(name, args, device, results):
    fanouts = WORKLOADS.get(name, [15, 10, 5])
    start = time.perf_counter()
    # The CSR is built where the graph is drawn: on the GPU, seconds even at papers scale.
    graph = synthetic_graph(name, features=False, csr=True,
                            device=device if device.type == "cuda" else None)
    topo = graph.topology()
    del graph
    print(f"\n== {name}: {topo.node_count:,} nodes, {topo.edge_count:,} edges, fanouts {fanouts}, "
          f"batch {args.batch_size} (graph built in {time.perf_counter() - start:.0f}s)", flush=True)
    gen = torch.Generator().manual_seed(0)
    train = torch.randperm(topo.node_count, generator=gen)[:int(0.08 * topo.node_count)]
    batches = [train[torch.randint(train.numel(), (args.batch_size,), generator=gen)]
               for _ in range(args.warmup + args.batches)]
    topo_bytes = sum(t.nbytes for t in (topo.indptr, topo.indices, topo.eid) if t is not None)

    cache_labels = {f"UVA+{args.topology_cache} deg": "degree",
                    f"UVA+{args.topology_cache} pre": "presampled"}
    # "UVA unsorted": rows visited in frontier order, not in the order of their lists'
    # addresses (GraphSageSampler(uva_row_order=False)), to measure what the ordering buys.
    modes = (["GPU", "UVA unsorted", "UVA", *cache_labels, "CPU"] if device.type == "cuda"
             else ["CPU"])
    if device.type == "cuda" and topo.indices.nbytes + topo.indptr.nbytes > 0.8 * \
            torch.cuda.get_device_properties(device).total_memory:
        modes.remove("GPU")
    rows = []
    for mode in modes:
        if mode == "CPU":
            n_batches = min(args.batches, args.cpu_batches)
            bench_batches = [b for b in batches[:args.warmup + n_batches]]
        else:
            bench_batches = batches
        torch.cuda.empty_cache() if device.type == "cuda" else None
        base_mem = torch.cuda.memory_allocated() if device.type == "cuda" else 0
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        cache = args.topology_cache if mode in cache_labels else None
        hot_order = None
        if cache_labels.get(mode) == "presampled":
            plain = qv.GraphSageSampler(topo, fanouts, device=device, mode="GPU"
                                        if "GPU" in modes else "UVA")
            other_seeds = train[torch.randperm(train.numel(), generator=gen)[:20 * args.batch_size]]
            hot_order = qv.presample_topology_order(plain, other_seeds, args.batch_size, 20)
            del plain
            torch.cuda.empty_cache()
        build_start = time.perf_counter()
        sampler = qv.GraphSageSampler(topo, fanouts, device=device if mode != "CPU" else "cpu",
                                      mode="UVA" if cache or mode.startswith("UVA") else mode,
                                      topology_cache=cache, hot_order=hot_order,
                                      uva_row_order=False if mode == "UVA unsorted" else None)
        build_s = time.perf_counter() - build_start
        if cache:
            cached_edges = sampler._cached_indices.numel()
            cached_nodes = int((sampler._cached_starts >= 0).sum())
            print(f"   topology cache: {sampler.topology_cache_bytes / 1e9:.2f} GB budget, "
                  f"{cached_nodes:,} nodes' lists ({cached_edges / topo.edge_count:.1%} of the "
                  f"edges) + {sampler._cached_starts.nbytes / 1e9:.2f} GB of starts, built in "
                  f"{build_s:.1f}s", flush=True)
        times, edges = time_batches(sampler, bench_batches, args.warmup)
        if args.profile and mode != "CPU":
            profile_batches(sampler, bench_batches[:5], f"{name} {mode}")
        peak = (torch.cuda.max_memory_allocated() - base_mem) if device.type == "cuda" else 0
        seps = edges / sum(times)
        row = {"graph": name, "mode": mode, "seps": seps, "setup_s": build_s,
               "ms_per_batch": 1e3 * statistics.median(times),
               "edges_per_batch": edges / len(times),
               "gpu_mem_gb": peak / 1e9,
               "host_mem_gb": topo_bytes / 1e9 if mode != "GPU" else 0.0,
               "target": TARGETS_SEPS.get((name, mode)),
               "torch_quiver": TORCH_QUIVER_SEPS.get((name, mode))}
        rows.append(row)
        print(f"   {mode}: {seps / 1e6:9.1f} M SEPS, {row['ms_per_batch']:7.2f} ms/batch, "
              f"{row['edges_per_batch']:,.0f} edges/batch", flush=True)
        if cache_labels.get(mode) == "presampled" or (mode == "GPU" and args.loader_workers):
            # The same sampler through the loader, one batch at a time and several at once.
            # Sampled edges are counted the same way; batches are the shuffled training
            # seeds, in turn.
            some = train[torch.randperm(train.numel(), generator=gen)[
                :args.batch_size * args.batches]]
            for workers in args.loader_workers:
                per_batch, loader_edges = time_loader(sampler, some, args.batch_size, workers)
                label = f"{mode}, loader x{workers}"
                rows.append({**row, "mode": label, "seps": loader_edges / per_batch,
                             "ms_per_batch": 1e3 * per_batch, "edges_per_batch": loader_edges,
                             "workers": workers})
                print(f"   {label}: {loader_edges / per_batch / 1e6:9.1f} M SEPS, "
                      f"{1e3 * per_batch:7.2f} ms/batch", flush=True)
        del sampler
    if device.type == "cuda":
        n = int(sum(r["edges_per_batch"] for r in rows) / len(rows))
        hbm = random_read_bound(topo, n, device, on_host=False)
        host = random_read_bound(topo, n, device, on_host=True)
        for r in rows:
            base = r["mode"].split(",")[0]
            r["random_read_bound"] = {"GPU": hbm, "CPU": None}.get(base, host)
    cpu = next(r for r in rows if r["mode"] == "CPU")
    for r in rows:
        r["vs_cpu"] = r["seps"] / cpu["seps"]
    results.extend(rows)


def print_table(results, device_name):
    print(f"\nSampling throughput on {device_name}")
    header = (f"{'graph':9} {'mode':24} {'M SEPS':>9} {'ms/batch':>9} {'edges/batch':>12} "
              f"{'GPU mem GB':>10} {'host GB':>8} {'x CPU':>7} {'bound M/s':>10} "
              f"{'target':>8} {'quiver':>7}")
    print(header)
    print("-" * len(header))
    for r in results:
        bound = r.get("random_read_bound")
        fmt = lambda v: f"{v / 1e6:.0f}" if v else "-"
        print(f"{r['graph']:9} {r['mode']:24} {r['seps'] / 1e6:9.1f} {r['ms_per_batch']:9.2f} "
              f"{r['edges_per_batch']:12,.0f} {r['gpu_mem_gb']:10.2f} {r['host_mem_gb']:8.2f} "
              f"{r['vs_cpu']:7.1f} {fmt(bound):>10} {fmt(r['target']):>8} "
              f"{fmt(r['torch_quiver']):>7}")
    print("bound: random reads of `indices` per second on this device (HBM for GPU, pinned "
          "host memory for UVA); target: issue #3; quiver: torch-quiver as reported in issue #3")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--graphs", default="products,reddit")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--cpu-batches", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--json", default=None)
    parser.add_argument("--profile", action="store_true", help="print a kernel profile per mode")
    parser.add_argument("--topology-cache", default="20%",
                        help="GPU memory of UVA's topology cache: bytes, '1G' or a share of "
                             "the neighbor lists' bytes (default 20%%)")
    parser.add_argument("--loader-workers", default="1,3",
                        help="also time GPU mode and the presampled cache through "
                             "SampleLoader with these many workers (comma list; '' for none)")
    args = parser.parse_args()
    _cli.check_args(parser, args, {"batch_size": 1, "batches": 1, "cpu_batches": 1, "warmup": 0},
                    ["graphs"], at_most={"batch_size": 1 << 24, "batches": 100_000,
                                         "cpu_batches": 100_000, "warmup": 100_000})
    args.loader_workers = _cli.int_list(parser, "loader-workers", args.loader_workers, least=1)
    _cli.check_size(parser, "topology-cache", args.topology_cache)
    _cli.check_outputs(parser, args, ["json"])
    device = torch.device("cuda" if torch.cuda.is_available() and qv.cuda_kernels_built() else "cpu")
    if args.profile and device.type != "cuda":
        parser.error("--profile profiles the GPU modes' kernels, and this machine samples on "
                     "the CPU only")
    device_name = torch.cuda.get_device_name() if device.type == "cuda" else "CPU"
    print(f"device: {device_name}; CPU threads: {torch.get_num_threads()}; torch {torch.__version__}")
    results = []
    for name in args.graphs.split(","):
        run_graph(name, args, device, results)
    print_table(results, device_name)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device_name, "threads": torch.get_num_threads(),
                       "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
