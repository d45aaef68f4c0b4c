"""Feature-gather benchmark: GB/s of gathered rows for every tier of the feature store,
beside the bound and baseline measured in the same run.

    python scripts/bench_feature.py                  # products-like, on the current GPU
    python scripts/bench_feature.py --graph small    # quick
    python scripts/bench_feature.py --graph papers --dtype bfloat16   # 111M x 128, 28 GB
    python scripts/bench_feature.py --graph papers --dtype bfloat16 --reorder bfs

With --reorder bfs (or degree) the nodes are renumbered first (torch_quiver_ops.reorder),
so that a batch's rows share pages of the host tier; run it beside the plain run, on the
same machine, to compare.

Ids are the node lists of real sampled batches (GraphSAGE [15,10,5], batch 1024, about
545k rows each on the products-like graph). Rows:
  * HBM: every row in GPU memory, beside torch.index_select on the same tensor and the
    device-to-device copy bandwidth;
  * host: every row in pinned host memory, beside the pinned host-to-device copy and the
    CPU gather + .to('cuda') baseline;
  * a cache of --cache-fraction of the rows, hottest by degree and by presampling;
  * with two or more GPUs (--gpus, default all): p2p_clique_replicate against
    device_replicate, every GPU gathering at once, against one GPU alone (worker
    processes, the table mapped once, torchrun-style).
"""
from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import torch_quiver_ops as qv
from torch_quiver_ops import _cli
from torch_quiver_ops.hotness import positions_of
from torch_quiver_ops.synthetic import synthetic_graph

# One H100 (issue 4) and torch-quiver's published figures for the same workload, GB/s.
TARGETS = {"HBM": 1200, "host": 40, "cache by degree": 80, "cache by presampling": 80}
TORCH_QUIVER = {"HBM": 587, "host": 15, "cache by degree": 28}


def sync():
    torch.cuda.synchronize()


def rss(field="VmRSS"):
    """Bytes of this process's resident memory (VmHWM: the peak since reset_peak_rss)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def reset_peak_rss():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # Linux: VmHWM starts again from the current RSS


def timed(fn, repeats=1):
    """Seconds per call of fn(), best of `repeats` after one warm-up call."""
    fn()
    sync()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - start)
    return best


def gather_rate(gather, batches, row_bytes, warmup):
    """GB/s of output over `batches` (ids already on the GPU), after `warmup` batches."""
    for ids in batches[:warmup]:
        gather(ids)
    sync()
    measured = batches[warmup:]
    start = time.perf_counter()
    for ids in measured:
        gather(ids)
    sync()
    seconds = time.perf_counter() - start
    return sum(ids.numel() for ids in measured) * row_bytes / seconds / 1e9


def kernel_rate(gather, batches, row_bytes):
    """GB/s of output counting only the gather kernels' GPU time (no launch, no sync)."""
    activities = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as profile:
        for ids in batches:
            gather(ids)
        sync()
    micros = sum(e.self_device_time_total for e in profile.key_averages())
    return sum(ids.numel() for ids in batches) * row_bytes / (micros * 1e-6) / 1e9


def copy_bounds(device, nbytes=1 << 30):
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    d2d = timed(lambda: dst.copy_(src), 5)
    host = torch.empty(nbytes // 4, dtype=torch.float32).pin_memory()
    h2d = timed(lambda: dst.copy_(host, non_blocking=True), 5)
    return {"d2d_read_plus_write": 2 * nbytes / d2d / 1e9, "d2d_output": nbytes / d2d / 1e9,
            "pinned_h2d": nbytes / h2d / 1e9}


def sampled_batches(sampler, seeds, batch_size, count, seed):
    gen = torch.Generator().manual_seed(seed)
    shuffled = seeds[torch.randperm(seeds.numel(), generator=gen)]
    return [sampler.sample_subgraph(b)[0].cpu() for b in shuffled.split(batch_size)[:count]]


# ---- two GPUs: worker processes, as under torchrun ----

def multi_gpu_worker(rank, world, directory, cache_bytes, port, warmup):
    torch.cuda.set_device(rank)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    batches = [b.cuda() for b in torch.load(Path(directory) / f"batches_{rank}.pt")]
    every = list(range(world))
    phases = [("one GPU", "device_replicate", [0], {0}),
              (f"device_replicate x{world}", "device_replicate", every, set(every)),
              (f"p2p_clique_replicate x{world}", "p2p_clique_replicate", every, set(every))]
    results = {}
    for name, policy, devices, gathering in phases:
        feature = qv.Feature.load_shared(directory, rank, devices, cache_bytes, policy)
        row_bytes = feature[batches[0][:1]].nbytes if rank in gathering else 0
        if rank in gathering:
            for ids in batches[:warmup]:
                feature[ids]
            sync()
        dist.barrier()
        start = time.perf_counter()
        rows = 0
        if rank in gathering:
            for ids in batches[warmup:]:
                feature[ids]
                rows += ids.numel()
            sync()
        seconds = time.perf_counter() - start
        stats = torch.tensor([rows * row_bytes, seconds], dtype=torch.float64)
        everyone = [torch.zeros_like(stats) for _ in range(world)]
        dist.all_gather(everyone, stats)
        hits = (statistics.mean(feature.hit_rate(b) for b in batches[warmup:])
                if rank in gathering else None)
        feature.close()  # together: peers drop their mappings, then owners free shards
        torch.cuda.empty_cache()
        total_bytes = sum(float(s[0]) for s in everyone)
        wall = max(float(s[1]) for s in everyone)
        results[name] = {"total_gbps": total_bytes / wall / 1e9,
                         "per_gpu_gbps": [float(s[0]) / float(s[1]) / 1e9 if s[0] else None
                                          for s in everyone],
                         "hit_rate": hits}
    (Path(directory) / f"result_{rank}.json").write_text(json.dumps(results))
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_gpus(feature, batches, cache_bytes, warmup, world):
    """Every GPU gathers its own batches at once; the table is saved once and mapped."""
    shm = Path("/dev/shm")
    room = shutil.disk_usage(shm).free if shm.is_dir() else 0
    base = shm if room > 2 * feature._host.nbytes else Path(tempfile.gettempdir())
    directory = Path(tempfile.mkdtemp(prefix="quiver-bench-", dir=base))
    try:
        feature.save(directory)
        for rank in range(world):
            torch.save(batches[rank::world], directory / f"batches_{rank}.pt")
        mp.spawn(multi_gpu_worker, args=(world, str(directory), cache_bytes, free_port(), warmup),
                 nprocs=world, join=True)
        return json.loads((directory / "result_0.json").read_text())
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graph", default="products")
    parser.add_argument("--fanouts", default="15,10,5")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=10, help="measured batches per GPU")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--cache-fraction", type=float, default=0.2)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--two-gpus", choices=["auto", "on", "off"], default="auto",
                        help="the multi-GPU rows: auto (when there are 2 or more GPUs), on, off")
    parser.add_argument("--gpus", type=int, default=0,
                        help="GPUs of the multi-GPU rows (default: every GPU there is)")
    parser.add_argument("--reorder", choices=["none", "bfs", "degree"], default="none",
                        help="renumber the graph's nodes first (torch_quiver_ops.reorder): "
                             "features, topology and seeds follow")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    _cli.check_args(parser, args, {"batch_size": 1, "batches": 1, "warmup": 0, "gpus": 0},
                    ["graph"])
    if not 0.0 < args.cache_fraction <= 1.0:
        parser.error(f"--cache-fraction must be in (0, 1], got {args.cache_fraction}")
    try:
        fanouts = [int(f) for f in args.fanouts.split(",")]
    except ValueError:
        parser.error(f"--fanouts takes a comma list of ints, got {args.fanouts!r}")
    _cli.require_gpu(parser)
    device = torch.device("cuda", torch.cuda.current_device())
    results = {"device": torch.cuda.get_device_name(device), "graph": args.graph,
               "fanouts": fanouts, "batch_size": args.batch_size}

    start = time.perf_counter()
    graph = synthetic_graph(args.graph, device=device, csr=True,
                            feature_dtype=getattr(torch, args.dtype))
    topo = graph.topology()
    x = graph.x
    train_idx = graph.train_idx
    row_bytes = x[0].nbytes
    table_bytes = x.nbytes
    print(f"== {args.graph}: {tuple(x.shape)} {x.dtype} ({table_bytes / 1e9:.2f} GB), "
          f"{topo.edge_count:,} edges; built in {time.perf_counter() - start:.0f}s", flush=True)
    results["reorder"] = args.reorder
    if args.reorder != "none":
        start = time.perf_counter()
        old_of_new = qv.reorder.order_by(topo, args.reorder)
        topo, new_of_old = qv.reorder.permute_topology(topo, old_of_new)
        x, train_idx = x[old_of_new], new_of_old[train_idx].sort().values
        del graph, new_of_old
        results["reorder_s"] = time.perf_counter() - start
        print(f"   nodes renumbered in {args.reorder} order in {results['reorder_s']:.0f}s",
              flush=True)

    sampler = qv.GraphSageSampler(topo, fanouts, device=device, mode="GPU")
    per_gpu = args.warmup + args.batches
    gpus = args.gpus or max(2, torch.cuda.device_count())
    batches = sampled_batches(sampler, train_idx, args.batch_size, gpus * per_gpu, seed=100)
    presampled = qv.presample_hot_order(sampler, train_idx, args.batch_size,
                                        generator=torch.Generator().manual_seed(1))
    del sampler
    torch.cuda.empty_cache()
    rows_per_batch = statistics.mean(b.numel() for b in batches)
    results["rows_per_batch"] = rows_per_batch
    print(f"   {rows_per_batch:,.0f} rows ({rows_per_batch * row_bytes / 1e6:.0f} MB) per "
          f"sampled batch; presampled one epoch of {train_idx.numel():,} seeds", flush=True)
    on_gpu = [b.to(device) for b in batches[:per_gpu]]

    bounds = copy_bounds(device)
    results["bounds"] = bounds
    print(f"   copy bounds: device-to-device {bounds['d2d_read_plus_write']:.0f} GB/s "
          f"(read+write), pinned host-to-device {bounds['pinned_h2d']:.1f} GB/s", flush=True)

    rows = []

    def record(name, gbps, kernel, bound=None, bound_name=None, baseline=None,
               baseline_name=None, hit_rate=None):
        row = {"config": name, "gbps": gbps, "kernel_gbps": kernel, "bound": bound,
               "bound_name": bound_name,
               "baseline": baseline, "baseline_name": baseline_name, "hit_rate": hit_rate,
               "target": TARGETS.get(name), "torch_quiver": TORCH_QUIVER.get(name)}
        rows.append(row)
        print(f"   {name:<22} {gbps:8.1f} GB/s per call, {kernel:8.1f} GB/s in the kernel"
              + (f", hit rate {hit_rate:.1%}" if hit_rate is not None else ""), flush=True)

    def miss_bound(hits):
        """A cached gather's bound: the host link over the miss rate (none when every row
        is cached: --cache-fraction 1 had divided by zero after the other rows ran)."""
        return bounds["pinned_h2d"] / (1 - hits) if hits < 1 else None

    def record_in_id_order(name, feature, hits=None):
        """The same store read in id order (group_host_reads=False): what grouping the
        host tier's reads by position buys."""
        layout = feature.tiers(device)
        in_id_order = torch.classes.quiver.FeatureTiers(layout.tiers(), layout.positions())
        in_id_order.set_group_host_reads(False)
        plain = in_id_order.gather
        record(f"{name}, id order", gather_rate(plain, on_gpu, row_bytes, args.warmup),
               kernel_rate(plain, on_gpu[:4], row_bytes), hit_rate=hits)

    def record_staged(name, feature, bound, hits=None):
        """The same store with its host rows staged (Feature(host_reads="staged")): CPU
        threads gather them into pinned memory and the copy engine moves them. "In the
        kernel" counts the GPU's kernels and copies."""
        feature.host_reads = "staged"
        staged = lambda ids: feature[ids]  # noqa: E731
        assert torch.equal(staged(on_gpu[-1]).cpu(), x[on_gpu[-1].cpu()])
        for _ in range(3):  # the op's split between GPU and CPU reads settles (on batches
            for ids in on_gpu[:args.warmup]:  # not measured: the host's 300 MB cache)
                staged(ids)
        record(f"{name}, staged", gather_rate(staged, on_gpu, row_bytes, args.warmup),
               kernel_rate(staged, on_gpu[:4], row_bytes), bound[0], bound[1], hit_rate=hits)
        feature.host_reads = "zero_copy"

    # Every row in HBM, beside index_select on that very tensor.
    feature = qv.Feature(device_list=[device.index], device_cache_size=table_bytes,
                         host_reads="zero_copy")
    feature.from_cpu_tensor(x)
    hbm = feature.tiers(device).tiers()[0]
    assert hbm.size(0) == x.size(0)
    ours = gather_rate(lambda ids: feature[ids], on_gpu, row_bytes, args.warmup)
    ours_kernel = kernel_rate(lambda ids: feature[ids], on_gpu[:4], row_bytes)
    index_select = gather_rate(lambda ids: torch.index_select(hbm, 0, ids), on_gpu, row_bytes,
                               args.warmup)
    index_select_kernel = kernel_rate(lambda ids: torch.index_select(hbm, 0, ids), on_gpu[:4],
                                      row_bytes)
    results["index_select_kernel_gbps"] = index_select_kernel
    print(f"   torch.index_select     {index_select:8.1f} GB/s per call, "
          f"{index_select_kernel:8.1f} GB/s in the kernel", flush=True)
    record("HBM", ours, ours_kernel, bounds["d2d_output"], "d2d copy (output)", index_select,
           "torch.index_select")
    check = on_gpu[-1]
    assert torch.equal(feature[check], torch.index_select(hbm, 0, check))
    del feature, hbm
    torch.cuda.empty_cache()

    # Every row in HBM of a store with a hot order (csr_topo given, as torch-quiver's API
    # asks): the layout a user gets, beside the one it had before 2026-11-26 (hot-ordered
    # rows, then the whole pinned table as a host tier no id reaches), whose gathers sorted
    # their reads as for host rows and, in a loader, took its cap on host-reading blocks.
    feature = qv.Feature(device_list=[device.index], device_cache_size=table_bytes,
                         host_reads="zero_copy", csr_topo=topo).from_cpu_tensor(x)
    layout = feature.tiers(device)
    assert len(layout.tiers()) == 1 and layout.positions() is None
    record("HBM, degree order", gather_rate(lambda ids: feature[ids], on_gpu, row_bytes,
                                            args.warmup),
           kernel_rate(lambda ids: feature[ids], on_gpu[:4], row_bytes),
           bounds["d2d_output"], "d2d copy (output)", index_select, "torch.index_select")
    order = topo.feature_order.to(device)
    old_tiers = [x.to(device)[order.long()], x if x.is_pinned() else x.pin_memory()]
    old_positions = positions_of(topo.feature_order).to(device).int()
    assert torch.equal(feature[check], x.to(device)[check])
    for name, blocks in (("HBM, degree order, before", 0),
                         ("HBM, degree order, before, loader's cap", 12)):
        old_layout = torch.classes.quiver.FeatureTiers(old_tiers, old_positions)
        before = lambda ids: old_layout.gather(ids, blocks)  # noqa: E731
        record(name, gather_rate(before, on_gpu, row_bytes, args.warmup),
               kernel_rate(before, on_gpu[:4], row_bytes))
    del old_layout, old_tiers, old_positions, order, feature  # x's pin in place lives as long as the store
    torch.cuda.empty_cache()

    # Every row in pinned host memory.
    feature = qv.Feature(device_list=[device.index], device_cache_size=0,
                         host_reads="zero_copy").from_cpu_tensor(x)
    ours = gather_rate(lambda ids: feature[ids], on_gpu, row_bytes, args.warmup)
    ours_kernel = kernel_rate(lambda ids: feature[ids], on_gpu[:4], row_bytes)
    cpu_batches = [b.cpu() for b in on_gpu[:args.warmup + 3]]
    cpu_path = gather_rate(lambda ids: x[ids].to(device), cpu_batches, row_bytes, args.warmup)
    record("host", ours, ours_kernel, bounds["pinned_h2d"], "pinned H2D copy", cpu_path,
           "CPU gather + .to(cuda), 3 batches")  # (slow: fewer batches than the rows beside)
    record_in_id_order("host", feature)
    record_staged("host", feature, (bounds["pinned_h2d"], "pinned H2D copy"))
    del feature

    # A cache of the hottest rows, by degree and by presampling.
    cache_bytes = int(args.cache_fraction * x.size(0)) * row_bytes
    for name, kwargs in [("cache by degree", {"csr_topo": topo}),
                         ("cache by presampling", {})]:
        torch.cuda.synchronize()
        before = rss()
        reset_peak_rss()
        feature = qv.Feature(device_list=[device.index], device_cache_size=cache_bytes,
                             host_reads="zero_copy", **kwargs)
        feature.from_cpu_tensor(x, hot_order=presampled if not kwargs else None)
        feature[on_gpu[0]]  # the store is placed on the GPU at its first gather
        extra = rss("VmHWM") - before
        results.setdefault("build_peak_extra_host_bytes", {})[name] = extra
        print(f"   building the store ({name}): peak host memory {extra / 1e9:.2f} GB above "
              f"what the process held, {extra / table_bytes:.1%} of the table", flush=True)
        hits = statistics.mean(feature.hit_rate(b) for b in on_gpu[args.warmup:])
        ours = gather_rate(lambda ids: feature[ids], on_gpu, row_bytes, args.warmup)
        ours_kernel = kernel_rate(lambda ids: feature[ids], on_gpu[:4], row_bytes)
        assert torch.equal(feature[on_gpu[-1]].cpu(), x[on_gpu[-1].cpu()])
        record(name, ours, ours_kernel, miss_bound(hits),
               "pinned H2D / miss rate", hit_rate=hits)
        record_in_id_order(name, feature, hits)
        record_staged(name, feature, (miss_bound(hits),
                                      "pinned H2D / miss rate"), hits)
        if name == "cache by presampling":
            last = feature
        else:
            del feature
    # The same cache over a second, hot-ordered host copy of the table (what the store
    # kept before it used the table in place): what that copy buys in locality. Not for
    # tables of tens of GB, where that copy is the problem.
    copy_rows = table_bytes <= 8e9
    if not copy_rows:
        print("   (no hot-ordered copy row: the table is too large for a second host copy)")
    else:
        hot_first = x[presampled]
        cached = int(args.cache_fraction * x.size(0))
        copy_tiers = [hot_first[:cached].to(device), hot_first[cached:].pin_memory()]
        copy_positions = positions_of(presampled).to(device)
        copy_layout = torch.classes.quiver.FeatureTiers(copy_tiers, copy_positions)
        copy_layout.set_group_host_reads(False)
        gather_copy = copy_layout.gather
        assert torch.equal(gather_copy(on_gpu[-1]).cpu(), x[on_gpu[-1].cpu()])
        record("cache, hot-ordered copy, id order", gather_rate(gather_copy, on_gpu, row_bytes, args.warmup),
               kernel_rate(gather_copy, on_gpu[:4], row_bytes), miss_bound(hits),
               "pinned H2D / miss rate", hit_rate=hits)
        del copy_tiers, copy_positions, hot_first
        torch.cuda.empty_cache()

    want_two = args.two_gpus == "on" or (args.two_gpus == "auto" and torch.cuda.device_count() >= 2)
    if want_two:
        two = run_gpus(last, batches, cache_bytes, args.warmup, gpus)
        results["two_gpus" if gpus == 2 else f"gpus_{gpus}"] = two
        one = two["one GPU"]["total_gbps"]
        print(f"\n   {gpus} GPUs, {args.cache_fraction:.0%} cache per GPU, presampled order:")
        for name, r in two.items():
            per = ", ".join(f"{g:.1f}" for g in r["per_gpu_gbps"] if g is not None)
            print(f"   {name:<26} total {r['total_gbps']:7.1f} GB/s ({r['total_gbps'] / one:.2f}x "
                  f"one GPU; per GPU {per}; hit rate {r['hit_rate']:.1%})", flush=True)
    del last

    results["rows"] = rows
    print("\n| tier | GB/s per call | GB/s in kernel | bound | % of bound | baseline | vs baseline "
          f"| hit rate | target | torch-quiver |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        bound = f"{r['bound']:.0f} ({r['bound_name']})" if r["bound"] else ""
        share = f"{r['gbps'] / r['bound']:.0%}" if r["bound"] else ""
        base = f"{r['baseline']:.1f} ({r['baseline_name']})" if r["baseline"] else ""
        versus = f"{r['gbps'] / r['baseline']:.1f}x" if r["baseline"] else ""
        hits = f"{r['hit_rate']:.1%}" if r["hit_rate"] is not None else ""
        print(f"| {r['config']} | {r['gbps']:.1f} | {r['kernel_gbps']:.1f} | {bound} | {share} | "
              f"{base} | {versus} | {hits} | "
              f"{r['target'] or ''} | {r['torch_quiver'] or ''} |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
