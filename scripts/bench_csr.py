"""CSR-building benchmark: quiver's csr_from_coo on the GPU against the same build written
with PyTorch (stable argsort, gather, bincount + cumsum) and against the CPU op, in one run.

    python scripts/bench_csr.py                       # papers100M-sized: 111M nodes, 1.6B edges
    python scripts/bench_csr.py --nodes 2449029 --edges 123718280   # products-sized
    python scripts/bench_csr.py --generate papers     # also: the whole synthetic papers graph

Edges are uniform random int32 pairs (the sort's cost hardly depends on the degree shape).
The bound row is the least traffic the build must do (read row and col, write indices,
edge ids and indptr) at the measured device copy bandwidth; the sort is what costs more.
The CPU op runs on --cpu-edges edges (default 100M) and its rate is scaled to the full size.
"""
from __future__ import annotations

import argparse
import json
import time

import torch

import torch_quiver_ops as qv
from torch_quiver_ops import _cli


def seconds(fn, repeats=3):
    """Best wall time of fn() over `repeats` calls after one warm-up, with the GPU drained."""
    out = fn()
    del out
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = fn()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
        del out
    return best


def torch_build(row, col, num_nodes):
    """What a user writes with PyTorch alone."""
    order = torch.argsort(row, stable=True)
    indices = col[order]
    indptr = torch.zeros(num_nodes + 1, dtype=torch.long, device=row.device)
    torch.cumsum(torch.bincount(row, minlength=num_nodes), 0, out=indptr[1:])
    return indptr, indices, order


def copy_bandwidth(nbytes=1 << 30):
    a = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    t = seconds(lambda: b.copy_(a), repeats=5)
    return 2 * nbytes / t  # read + write


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=111_059_956)
    parser.add_argument("--edges", type=int, default=1_615_685_872)
    parser.add_argument("--cpu-edges", type=int, default=100_000_000)
    parser.add_argument("--generate", default=None,
                        help="also time synthetic_graph(NAME, csr=True) on the GPU")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    _cli.require_gpu(parser)
    n, m = args.nodes, args.edges
    name = torch.cuda.get_device_name()
    print(f"device: {name}; {n:,} nodes, {m:,} edges, int32 ids")
    results = {"device": name, "nodes": n, "edges": m}

    bandwidth = copy_bandwidth()
    least_bytes = m * (4 + 4 + 4 + 8) + (n + 1) * 8
    gen = torch.Generator(device="cuda").manual_seed(0)
    row = torch.randint(n, (m,), generator=gen, device="cuda", dtype=torch.int32)
    col = torch.randint(n, (m,), generator=gen, device="cuda", dtype=torch.int32)

    ours = seconds(lambda: qv.ops.csr_from_coo(row, col, n))
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    indptr, indices, eid = qv.ops.csr_from_coo(row, col, n)
    peak = (torch.cuda.max_memory_allocated() - base) / 2**30
    del indptr, indices, eid
    torch.cuda.empty_cache()
    try:
        baseline = seconds(lambda: torch_build(row, col, n), repeats=1)
        ref = torch_build(row, col, n)
        got = qv.ops.csr_from_coo(row, col, n)
        same = (torch.equal(ref[0], got[0]) and torch.equal(ref[1], got[1])
                and torch.equal(ref[2], got[2]))
        del ref, got
    except torch.OutOfMemoryError:
        baseline, same = float("nan"), None
    torch.cuda.empty_cache()
    cpu_m = min(m, args.cpu_edges)
    cpu_row, cpu_col = row[:cpu_m].cpu(), col[:cpu_m].cpu()
    start = time.perf_counter()
    qv.ops.csr_from_coo(cpu_row, cpu_col, n)
    cpu_s = (time.perf_counter() - start) * m / cpu_m
    threads = torch.get_num_threads()

    rows = [("quiver csr_from_coo, GPU", ours),
            ("PyTorch: stable argsort + gather + bincount, GPU", baseline),
            (f"quiver csr_from_coo, CPU ({threads} threads; {cpu_m / 1e6:.0f}M edges, scaled)",
             cpu_s),
            (f"bound: {least_bytes / 1e9:.1f} GB at {bandwidth / 1e9:.0f} GB/s copy",
             least_bytes / bandwidth)]
    print(f"\n| build | s | G edges/s | x ours |\n|---|---|---|---|")
    for label, s in rows:
        print(f"| {label} | {s:.3f} | {m / s / 1e9:.2f} | {s / ours:.2f} |")
    print(f"\nours: peak GPU memory beyond the inputs {peak:.1f} GiB; "
          f"outputs equal PyTorch's: {same}; target <= 3 s: {'met' if ours <= 3 else 'missed'}")
    results.update(quiver_s=ours, torch_s=baseline, cpu_scaled_s=cpu_s, cpu_threads=threads,
                   bound_s=least_bytes / bandwidth, copy_gbps=bandwidth / 1e9, peak_gib=peak,
                   equal_to_torch=same)
    del row, col, cpu_row, cpu_col
    torch.cuda.empty_cache()

    if args.generate:
        from torch_quiver_ops.synthetic import synthetic_graph
        start = time.perf_counter()
        graph = synthetic_graph(args.generate, device="cuda", csr=True, features=False)
        gen_s = time.perf_counter() - start
        degree = (graph.indptr[1:] - graph.indptr[:-1]).double()
        print(f"\nsynthetic_graph({args.generate!r}, csr=True) on the GPU: {gen_s:.1f} s "
              f"({graph.num_nodes:,} nodes, {graph.num_edges:,} edges, mean degree "
              f"{degree.mean():.1f}, max {int(degree.max()):,})")
        results["generate"] = {"graph": args.generate, "seconds": gen_s,
                               "nodes": graph.num_nodes, "edges": graph.num_edges}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
