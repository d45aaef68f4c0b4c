"""Heterogeneous sampling and the tiered gather on a MAG240M-sized graph, one GPU.

    python scripts/bench_hetero_scale.py [--scale 1.0] [--batches 100] [--json out.json]

The graph (:func:`torch_quiver_ops.synthetic_hetero.mag240m_like`): MAG240M's papers
(121.8M), authors (122.4M) and institutions (25.7K); writes (386M) and affiliated_with
(44.6M) with their reverses, cites (1.30B) symmetric: 3.46B edges in one CSR built a slice
at a time on the GPU (4-byte indices, 8-byte edge ids), and 128-d bf16 features on papers
only (31 GB; MAG240M gives papers 768-d float16, which with this topology would not fit the
128 GiB host). Batches of 1024 paper seeds start on the host (pinned), fanouts [15, 10] for
every relation. Rows, in one run:

  sampling, per mode (UVA: indices and edge ids in pinned host memory, row offsets and
  relation slice starts in HBM; GPU: all in HBM when it fits), each batch through every
  variant in turn: the op's sampling through the sampler's object (replayed as a CUDA
  graph; also the op itself, whose calls run as launched), ``HeteroSampler.sample`` (the
  user-facing call), and homogeneous sampling (a ``SubgraphSampler``, replayed too) on the
  same CSR with types ignored, fanouts [30, 20] (the issue's baseline, compared per
  sampled edge);
  gather of each batch's sampled papers' rows: ``Feature`` with 20% of the paper bytes in
  HBM by in-degree (the rest read from pinned host memory), against the same ids read
  straight from the pinned table (``gather_rows``: the host's random-read rate at this
  table size, the bound of the rows that miss the cache) and from a table in HBM when it
  fits (the copy bound of the rows that hit).

The process's peak host memory (``VmHWM``) is printed after each step.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_hetero import FANOUT, sampling_variants, timed_round_robin  # noqa: E402

import torch_quiver_ops as qv  # noqa: E402
from torch_quiver_ops import _cli  # noqa: E402
from torch_quiver_ops import ops  # noqa: E402
from torch_quiver_ops.synthetic_hetero import mag240m_like, mag240m_like_features  # noqa: E402
from torch_quiver_ops.uva import pinned as pin_in_place_or_copy  # noqa: E402



def host_memory_gib():
    """(current, peak) resident host memory of this process, GiB."""
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0]) / 2**20
    return fields.get("VmRSS", 0.0), fields.get("VmHWM", 0.0)


def step(name, start, report):
    rss, peak = host_memory_gib()
    seconds = time.perf_counter() - start
    report["steps"].append({"step": name, "seconds": seconds, "rss_gib": rss,
                            "peak_gib": peak})
    print(f"  {name:<44s} {seconds:7.1f} s   host memory {rss:6.1f} GiB (peak {peak:6.1f})",
          flush=True)


def sampling_rows(topo, mode, device, batches, warmup, report):
    sampler = qv.HeteroSampler(topo, FANOUT, device=device, mode=mode)
    variants = sampling_variants(topo, sampler)
    times, counts = timed_round_robin(variants, batches, device, warmup)
    rows = []
    for name in variants:
        ms = 1e3 * statistics.median(times[name])
        rows.append({"mode": mode, "variant": name, "ms_per_batch": ms,
                     "edges_per_batch": counts[name] / len(times[name]),
                     "eps": counts[name] / sum(times[name])})
    for row in rows:
        row["per_edge_vs_homogeneous"] = rows[-1]["eps"] / row["eps"]
        print(f"  {mode:3s}  {row['variant']:24s} {row['ms_per_batch']:8.3f} ms/batch  "
              f"{row['edges_per_batch']:10,.0f} edges/batch  {row['eps'] / 1e6:8.1f} M edges/s"
              f"  {row['per_edge_vs_homogeneous']:5.2f}x homogeneous per edge", flush=True)
    report["sampling"].extend(rows)
    return sampler


def timed_gathers(name, gather, id_batches, row_bytes, device, report):
    for ids in id_batches[:3]:
        gather(ids)
    torch.cuda.synchronize(device)
    times, total = [], 0
    for ids in id_batches:
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        gather(ids)
        torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
        total += ids.numel() * row_bytes
    row = {"variant": name, "ms_per_batch": 1e3 * statistics.median(times),
           "rows_per_batch": sum(i.numel() for i in id_batches) / len(id_batches),
           "gb_per_s": total / sum(times) / 1e9}
    report["gather"].append(row)
    print(f"  {name:<44s} {row['ms_per_batch']:8.3f} ms/batch  {row['rows_per_batch']:9,.0f} "
          f"rows/batch  {row['gb_per_s']:7.1f} GB/s", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--cache", default="20%")
    parser.add_argument("--modes", default="UVA,GPU")
    parser.add_argument("--json")
    args = parser.parse_args()
    _cli.require_gpu(parser)
    device = torch.device("cuda", torch.cuda.current_device())
    report = {"args": vars(args), "device": torch.cuda.get_device_name(device), "steps": [],
              "sampling": [], "gather": []}
    print(f"MAG240M-sized graph (scale {args.scale}) on {report['device']}", flush=True)

    start = time.perf_counter()
    topo = mag240m_like(args.scale, device=device)
    torch.cuda.empty_cache()
    report["graph"] = {"nodes": topo.num_nodes_dict, "edges": topo.num_edges,
                       "relations": ["__".join(et) for et in topo.edge_types],
                       "topology_gib": sum(t.nbytes for t in (topo.indptr, topo.indices,
                                                              topo.eid)) / 2**30}
    step(f"topology: {topo.num_edges / 1e9:.2f}B edges, "
         f"{report['graph']['topology_gib']:.1f} GiB", start, report)
    start = time.perf_counter()
    papers = topo.num_nodes_dict["paper"]
    x = mag240m_like_features(papers, device=device)
    step(f"paper features: {x.nbytes / 2**30:.1f} GiB", start, report)

    gen = torch.Generator().manual_seed(1)
    total = args.warmup + args.batches
    batches = [torch.randint(papers, (args.batch_size,), generator=gen).pin_memory()
               for _ in range(total)]
    paper_ids = []
    for mode in args.modes.split(","):
        start = time.perf_counter()
        if mode == "GPU":
            need = sum(t.nbytes for t in (topo.indptr, topo.indices, topo.eid))
            free = torch.cuda.mem_get_info(device)[0]
            if need > 0.8 * free:
                print(f"  GPU mode skipped: the topology ({need / 2**30:.1f} GiB) does not fit "
                      f"beside the rest ({free / 2**30:.1f} GiB free)", flush=True)
                continue
        sampler = sampling_rows(topo, mode, device, batches, args.warmup, report)
        if not paper_ids:  # the gather's ids: each batch's sampled papers
            gen_gpu = torch.Generator(device).manual_seed(2)
            paper_ids = [sampler.sample(("paper", b), generator=gen_gpu).node["paper"]
                         for b in batches]
        step(f"sampling, {mode} mode", start, report)
        del sampler
        torch.cuda.empty_cache()

    start = time.perf_counter()
    degree = topo.indptr[1:papers + 1].diff(prepend=topo.indptr[:1]).to(device)
    hot = torch.sort(degree, descending=True, stable=True).indices.cpu()
    feature = qv.Feature(device_list=[device.index], device_cache_size=args.cache)
    feature.from_cpu_tensor(x, hot_order=hot)
    step(f"Feature, {args.cache} of the paper rows in HBM", start, report)
    row_bytes = x[0].nbytes
    timed_gathers(f"Feature, {args.cache} cached by degree", lambda ids: feature[ids],
                  paper_ids, row_bytes, device, report)
    # The store pinned x where it lies (no copy); the same table read with no cache.
    pinned, handle = (x, None) if x.is_pinned() else pin_in_place_or_copy(x)
    timed_gathers("pinned table only (host random reads)",
                  lambda ids: ops.gather_rows(pinned, ids), paper_ids, row_bytes, device,
                  report)
    del pinned, handle
    free = torch.cuda.mem_get_info(device)[0]
    if x.nbytes < 0.8 * free:
        del feature
        torch.cuda.empty_cache()
        on_gpu = x.to(device)
        timed_gathers("table in HBM (copy bound)", lambda ids: ops.gather_rows(on_gpu, ids),
                      paper_ids, row_bytes, device, report)
        del on_gpu
    rss, peak = host_memory_gib()
    report["peak_host_gib"] = peak
    print(f"peak host memory {peak:.1f} GiB (topology {report['graph']['topology_gib']:.1f} "
          f"GiB, paper features {x.nbytes / 2**30:.1f} GiB)", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
