"""Sampling over a partitioned graph against single-host sampling, in the same run.

    python scripts/bench_dist_sampling.py [--graph products] [--parts 2,4]
        [--methods metis,random] [--fanouts 15,10,5] [--batch-size 1024] [--batches 20]
        [--mode CPU|GPU|UVA] [--backend gloo|nccl] [--draws owner|requester] [--lanes 1,4]
        [--slots seen,bounded,launched,exact] [--json out.json] [--plot out.png]

For each part count and method: partitions the synthetic graph (the partitioner's time is
printed), starts one process per part on this machine (Gloo over loopback, each process
with torch's threads split evenly), and has every process sample --batches batches of its
own train ids at once (DistGraphSampler), then reports per batch: the median ms over the
processes' medians, the share of each hop's frontier owned by another host, and the bytes
the exchanges moved (requests: 8 per remote frontier node; answers of a hop of fanout f >= 0
with the owners drawing: a slot of f (neighbor, edge id) pairs, 16 f bytes, per remote node,
padding included; otherwise 8 per count and 16 per sampled pair; in slots sized by bounds,
every block to every peer, whatever it holds: 8 (rows + 1) + 16 f rows, with each batch's
block rows as the sampler reports them). The baseline is the same batches' seeds sampled by
quiver::sample_subgraph on the CPU with the whole graph in one process, with the threads
one process of the distributed run has and with all of them. Edges per second count the
sampled edges of every hop.

With ``--mode GPU`` or ``UVA`` each process samples its own nodes (and its peers' requests)
on a GPU (process r on GPU r modulo the GPUs there are), and the baseline is the whole graph
sampled on one GPU in the same mode, seeds from the CPU as from a DataLoader (copied over,
sampled, synchronized). ``--backend nccl`` exchanges through the GPUs (one per process);
gloo through the CPUs. ``--lanes`` (Gloo): each part count and method is run once per lane
count given (DistGraphSampler's lanes: the connections a hop's bulk travels over side by
side), on the same partition and seeds. ``--slots`` (NCCL, GPU parts): each run with slots
sized by bounds (every hop queued on the stream in fixed blocks: one wait a batch besides
the end), blocks sized by what was seen and replayed as CUDA graphs ("seen", the default),
the same launched as usual ("launched"), blocks of the bounds replayed ("bounded": the
largest batch times the fanouts before the hop), and with exact counts exchanged first
("exact": three waits a hop).

Then, on paper, for 2-16 hosts on 100 and 400 Gb/s links: the batches a second that a
host's link allows, from the bytes per batch measured here (random parts: the largest part
count's bytes scaled by the remote share (H - 1) / H; METIS: the growth from 2 to 4 parts
extrapolated by the same step per doubling, an assumption). ``--plot`` draws both.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import torch_quiver_ops as qv
from torch_quiver_ops import _cli
from torch_quiver_ops.partition import DistGraphSampler, load_partition, partition_graph
from torch_quiver_ops.synthetic import synthetic_graph


def seeds_for(part_train: torch.Tensor, batches: int, batch_size: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    order = part_train[torch.randperm(part_train.numel(), generator=gen)]
    return [order[(b * batch_size) % max(1, order.numel()):][:batch_size] for b in range(batches)]


def worker(rank, world, port, directory, args, out, threads, lanes, slots="seen"):
    torch.set_num_threads(threads)
    if args.mode != "CPU" or args.backend == "nccl":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group(args.backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=300))
    try:
        part = load_partition(directory, rank)
        sampler = DistGraphSampler(part, args.fanouts, timeout=120.0, mode=args.mode,
                                   draws=args.draws, lanes=lanes,
                                   bounded_slots=slots != "exact")
        sampler._sampler.set_capture_batches(slots != "launched")
        if slots == "bounded":
            sampler._sampler.set_slot_margin(0.0)  # blocks of the bounds
        batches = seeds_for(part.splits["train"], args.batches + 2, args.batch_size, rank)
        times, remote_nodes, remote_edges, frontier, edges, slot_rows = [], [], [], [], [], []
        for i, seeds in enumerate(batches):
            dist.barrier()
            start = time.perf_counter()
            out_i = sampler.sample_subgraph(seeds)
            if args.mode != "CPU":
                torch.cuda.synchronize()  # outputs on the GPU, as the baseline's
            elapsed = time.perf_counter() - start
            if i < 2:
                overflows = sampler._sampler.overflowed_batches()
                exchanges = sampler._sampler.size_exchanges()
                continue  # warm-up
            times.append(elapsed)
            slot_rows.append(sampler._sampler.last_slot_rows())
            nodes, edges_i = out_i[4].tolist(), out_i[5].tolist()
            r_nodes, r_edges = sampler.remote_share()
            remote_nodes.append(r_nodes)
            remote_edges.append(r_edges)
            frontier.append(nodes[:-1])
            edges.append(sum(edges_i))
        torch.save({"times": times, "remote_nodes": remote_nodes, "remote_edges": remote_edges,
                    "frontier": frontier, "edges": edges, "seeds": batches[2:],
                    "lanes": sampler.lanes, "slot_rows": slot_rows,
                    "overflows": sampler._sampler.overflowed_batches() - overflows,
                    "size_exchanges": sampler._sampler.size_exchanges() - exchanges},
                   Path(out) / f"rank_{rank}.pt")
    finally:
        dist.destroy_process_group()


def single_host(topo, seeds_list, fanouts, threads, mode="CPU"):
    """Median seconds a batch and mean sampled edges, the whole graph in this process: CPU
    sampling with `threads`, or the GraphSageSampler placement of `mode` on GPU 0."""
    torch.set_num_threads(threads)
    if mode == "CPU":
        def sample(seeds):
            return qv.ops.sample_subgraph(topo.indptr, topo.indices, seeds, fanouts, False,
                                          topo.eid)
    else:
        sampler = qv.GraphSageSampler(topo, fanouts, device=0, mode=mode, return_eid=True)

        def sample(seeds):
            out = sampler.sample_subgraph(seeds)
            torch.cuda.synchronize()
            return out
        for seeds in seeds_list[:3]:
            sample(seeds)  # warm-up (placement, captured graphs)
    times, edges = [], []
    for seeds in seeds_list:
        start = time.perf_counter()
        out = sample(seeds)
        times.append(time.perf_counter() - start)
        edges.append(int(out[5].sum()))
    return statistics.median(times), statistics.mean(edges)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--graph", default="products")
    parser.add_argument("--parts", default="2,4")
    parser.add_argument("--methods", default="metis,random")
    parser.add_argument("--fanouts", default="15,10,5")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--mode", default="CPU", choices=["CPU", "GPU", "UVA"])
    parser.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    parser.add_argument("--draws", default=None, choices=["owner", "requester"],
                        help="who draws remote nodes' samples (DistGraphSampler's draws)")
    parser.add_argument("--lanes", default="1",
                        help="comma-separated lane counts, each run (Gloo; NCCL takes none)")
    parser.add_argument("--slots", default="seen",
                        help="comma list of seen,bounded,launched,exact: each run (NCCL, GPU "
                             "parts)")
    parser.add_argument("--json")
    parser.add_argument("--plot", help="PNG: ms per batch against one host, and on paper")
    args = parser.parse_args()
    _cli.check_args(parser, args, {"batch_size": 1, "batches": 1}, ["graph"])
    try:
        part_counts = [int(p) for p in args.parts.split(",")]
    except ValueError:
        parser.error(f"--parts takes comma-separated counts such as 2,4, got {args.parts!r}")
    if any(p < 1 for p in part_counts):
        parser.error(f"--parts must be counts >= 1, got {args.parts}")
    unknown = [m for m in args.methods.split(",") if m not in ("metis", "random", "range")]
    if unknown:
        parser.error(f"--methods takes metis, random and range, got {unknown}")
    if args.mode != "CPU" or args.backend == "nccl":
        _cli.require_gpu(parser)
        if args.backend == "nccl" and torch.cuda.device_count() < max(part_counts):
            parser.error(f"--backend nccl runs a GPU per part: {max(part_counts)} parts, "
                         f"{torch.cuda.device_count()} GPU(s)")
    lane_counts = [int(n) for n in args.lanes.split(",")]
    slot_kinds = args.slots.split(",")
    if any(k not in ("seen", "bounded", "launched", "exact") for k in slot_kinds):
        parser.error(f"--slots takes seen, bounded, launched and exact, got {args.slots}")
    if args.backend != "nccl" or args.mode == "CPU":
        slot_kinds = slot_kinds[:1]  # only GPU parts over NCCL have slots sized by bounds
    args.fanouts = [int(f) for f in args.fanouts.split(",")]
    cores = os.cpu_count() or 1
    graph = synthetic_graph(args.graph, seed=0)
    topo = qv.CSRTopo(graph.edge_index, num_nodes=graph.num_nodes)
    print(f"{args.graph}: {topo.node_count:,} nodes, {topo.edge_count:,} edges; fanouts "
          f"{args.fanouts}, {args.batch_size} seeds a batch, {cores} cores; {args.mode} "
          f"sampling, exchanges over {args.backend}", flush=True)
    rows = []
    header = (f"{'parts':>5} {'method':>7} {'lanes':>5} {'slots':>8} {'cut':>5} {'partition s':>11} {'dist ms':>8} "
              f"{'1-host ms (same threads)':>24} {'1-host ms (all)':>15} {'ratio':>6} "
              f"{'remote share per hop':>24} {'KiB moved':>9} {'Medges/s':>8}" +
              ("" if args.mode == "CPU" else f" {'1-GPU ms':>12} {'x 1-GPU':>8}"))
    lines = []
    for parts in part_counts:
        threads = max(1, cores // parts)
        for method in args.methods.split(","):
            with tempfile.TemporaryDirectory() as tmp:
                start = time.perf_counter()
                manifest = partition_graph(Path(tmp) / "parts", topo, parts, method,
                                           splits={"train": graph.train_idx})
                partition_s = time.perf_counter() - start
                by_lanes = {}
                for lanes in lane_counts:
                    for slots in slot_kinds:
                        out = Path(tmp) / f"out_{lanes}_{slots}"
                        out.mkdir()
                        port = 29500 + int.from_bytes(os.urandom(2), "little") % 20000
                        mp.spawn(worker, args=(parts, port, str(Path(tmp) / "parts"), args,
                                               str(out), threads, lanes, slots),
                                 nprocs=parts, join=True)
                        by_lanes[lanes, slots] = [torch.load(out / f"rank_{r}.pt")
                                                  for r in range(parts)]
            # Every run sampled the same seeds (seeds_for depends on the rank alone).
            seeds = [s for r in next(iter(by_lanes.values())) for s in r["seeds"]]
            one_ms_same, mean_edges = single_host(topo, seeds, args.fanouts, threads)
            one_ms_all, _ = single_host(topo, seeds, args.fanouts, cores)
            one_ms_gpu = (None if args.mode == "CPU" else
                          single_host(topo, seeds, args.fanouts, cores, args.mode)[0])
            for (lanes, slots), ranks in by_lanes.items():
                row, line = summary(args, parts, method, lanes, manifest, partition_s, ranks,
                                    one_ms_same, one_ms_all, one_ms_gpu, mean_edges, threads,
                                    slots)
                rows.append(row)
                lines.append(line)
                print(line, flush=True)
    print(header)
    print("\n".join(lines))
    projected = on_paper(rows)
    print("\nOn paper: batches a second a host's link allows, bytes alone")
    print(f"{'hosts':>5} {'method':>7} {'MB/batch':>9} {'100 Gb/s':>9} {'400 Gb/s':>9}")
    for p in projected:
        print(f"{p['hosts']:>5} {p['method']:>7} {p['bytes_per_batch'] / 1e6:9.2f} "
              f"{p['batches_per_s'][0]:9.0f} {p['batches_per_s'][1]:9.0f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "cores": cores, "rows": rows,
                       "on_paper": projected}, f, indent=1)
    if args.plot:
        plot(rows, projected, args.plot, f"{args.graph}-like graph, {args.fanouts}, "
             f"{args.batch_size} seeds, {args.mode} sampling over {args.backend}")


LINKS_GBPS = (100, 400)


def on_paper(rows, hosts=(2, 4, 8, 16)):
    """Per method measured: bytes a host's batch moves at each host count (see the module's
    text for the extrapolation) and the batches a second each link allows."""
    import math
    projected = []
    for method in dict.fromkeys(r["method"] for r in rows):
        measured = {}
        for r in rows:  # lanes change no bytes: the first row of each part count
            if r["method"] == method:
                measured.setdefault(r["parts"], r["bytes_per_batch"])
        parts = sorted(measured)
        for h in hosts:
            if method == "metis" and len(parts) >= 2:
                low, high = parts[-2], parts[-1]
                step = (measured[high] - measured[low]) / math.log2(high / low)
                size = measured[high] + step * math.log2(h / high)
            else:
                top = parts[-1]
                size = measured[top] * ((h - 1) / h) / max((top - 1) / top, 1e-9)
            projected.append({"hosts": h, "method": method, "bytes_per_batch": size,
                              "links_gbps": list(LINKS_GBPS),
                              "batches_per_s": [g * 1e9 / 8 / size for g in LINKS_GBPS]})
    return projected


def plot(rows, projected, png, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.8))
    names = [f"{r['parts']} parts, {r['method']}, {r['lanes']} lane{'s' * (r['lanes'] > 1)}, "
             f"{r.get('slots', 'exact')} slots" for r in rows]
    y = range(len(rows))
    left.barh([i + 0.2 for i in y], [r["dist_ms"] for r in rows], 0.4, color="#3b75af",
              label="partitioned, a process per part")
    left.barh([i - 0.2 for i in y], [r["single_ms_same_threads"] for r in rows], 0.4,
              color="#999", label="one process, whole graph, same threads")
    left.set_yticks(list(y), names)
    left.invert_yaxis()
    left.set_xlabel("ms per batch (median)")
    left.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.15))
    left.set_title("measured, one host's loopback")
    for method, style in (("metis", "-"), ("random", "--")):
        points = [p for p in projected if p["method"] == method]
        if not points:
            continue
        for k, gbps in enumerate(LINKS_GBPS):
            right.plot([p["hosts"] for p in points], [p["batches_per_s"][k] for p in points],
                       style, marker="o", label=f"{method}, {gbps} Gb/s")
    right.set_xscale("log", base=2)
    right.set_yscale("log")
    right.set_xlabel("hosts")
    right.set_ylabel("batches / s a host's link allows")
    right.set_title("on paper, from the measured bytes")
    right.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=120)


def summary(args, parts, method, lanes, manifest, partition_s, ranks, one_ms_same, one_ms_all,
            one_ms_gpu, mean_edges, threads, slots="exact"):
    """One table row (and its JSON) of the processes' timings and shares at one lane count."""
    lanes = ranks[0]["lanes"]  # what the sampler took (NCCL takes none: 1)
    dist_ms = 1e3 * statistics.median(statistics.median(r["times"]) for r in ranks)
    hops = len(args.fanouts)
    share = []
    for h in range(hops):
        remote = sum(n[h] for r in ranks for n in r["remote_nodes"])
        total = sum(f[h] for r in ranks for f in r["frontier"])
        share.append(remote / max(total, 1))
    def hop_bytes(fanout, nodes, edges):
        if fanout >= 0 and (args.draws or "owner") == "owner":  # answers in fixed slots
            return 8 * nodes + 16 * fanout * nodes
        return 8 * nodes + 8 * nodes + 16 * edges
    in_slots = [rows for r in ranks for rows in r.get("slot_rows", []) if rows]
    overflows = sum(r.get("overflows", 0) for r in ranks)
    size_exchanges = sum(r.get("size_exchanges", 0) for r in ranks)
    if in_slots:
        # To each peer: the batch sizes and proposed rows (2 + H words; counted though a
        # batch on agreed blocks sends none), each hop of a fanout
        # > 0 in its blocks (others move nothing), and the most rows asked (H words); a batch
        # taken again (overflows, counted apart) moves its blocks twice.
        moved = statistics.mean(
            (parts - 1) * (8 * (2 + 2 * hops) + sum(8 * (n + 1) + 16 * f * n
                                                   for f, n in zip(args.fanouts, rows)
                                                   if f > 0 and n > 0))
            for rows in in_slots)
    else:
        slots = "exact"
        moved = statistics.mean(
            sum(hop_bytes(f, n, e) for f, n, e in zip(args.fanouts, rn, re))
            for r in ranks for rn, re in zip(r["remote_nodes"], r["remote_edges"]))
    row = {"parts": parts, "method": method, "lanes": lanes, "slots": slots,
           "slot_rows": in_slots[-1] if in_slots else None, "overflows": overflows,
           "size_exchanges": size_exchanges,
           "edge_cut": manifest["edge_cut"],
           "partition_s": partition_s, "dist_ms": dist_ms,
           "single_ms_same_threads": 1e3 * one_ms_same,
           "single_ms_all_threads": 1e3 * one_ms_all,
           "ratio": dist_ms / (1e3 * one_ms_same), "remote_share": share,
           "single_ms_gpu": None if one_ms_gpu is None else 1e3 * one_ms_gpu,
           "ratio_gpu": None if one_ms_gpu is None else dist_ms / (1e3 * one_ms_gpu),
           "mode": args.mode, "backend": args.backend,
           "bytes_per_batch": moved, "edges_per_batch": mean_edges,
           "medges_per_s": mean_edges / dist_ms / 1e3, "threads_per_process": threads}
    line = (f"{parts:>5} {method:>7} {lanes:>5} {slots:>8} {row['edge_cut']:5.2f} "
            f"{partition_s:11.1f} "
            f"{dist_ms:8.2f} {row['single_ms_same_threads']:24.2f} "
            f"{row['single_ms_all_threads']:15.2f} {row['ratio']:6.2f} "
            f"{' / '.join(f'{s:.2f}' for s in share):>24} {moved / 1024:9.0f} "
            f"{row['medges_per_s']:8.2f}" +
            ("" if one_ms_gpu is None else
             f" {1e3 * one_ms_gpu:12.2f} {row['ratio_gpu']:8.2f}") +
            (f"  block rows {in_slots[-1]}, {overflows} batches taken again, "
             f"{size_exchanges} exchanges of batch sizes (all hosts)" if in_slots else ""))
    return row, line


if __name__ == "__main__":
    sys.exit(main())
