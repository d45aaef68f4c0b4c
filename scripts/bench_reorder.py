"""What renumbering the nodes buys the host tier: pages a batch touches and GB/s of its
gathers, as generated and after each order, in one process on one GPU.

    python scripts/bench_reorder.py [--graph papers] [--orders degree,bfs] [--plot out.png]

The host tier's zero-copy reads are bound by the pages a batch touches (docs/benchmarks.md,
"Why the host reads slow with size"); torch_quiver_ops.reorder renumbers nodes so that a
batch's rows may share pages. For the graph as generated and for each order: the batches
of the same training seeds sampled in GPU mode ([15, 10, 5], 1024 seeds), their distinct
4 KiB pages of the table, and the gather of their rows from a store holding every row in
pinned host memory and from one holding 20% of them in HBM (cache by presampling), each
read with zero copy and staged; beside the pinned host-to-device copy bound of the same
run. papers: 128-d bf16 rows (28 GB), papers100M's own training split.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

import torch

import torch_quiver_ops as qv
from torch_quiver_ops import _cli

REPO = Path(__file__).resolve().parents[1]


def load_script(name):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def plot(results, path):
    """Pages a batch touches, and the gathers' GB/s beside the copy bound, per order."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = results["rows"]
    cols = ["host zero copy", "host staged", "20% cache zero copy", "20% cache staged"]
    colors = ["gray", "tab:blue", "tab:orange"]
    fig, (pages, rates) = plt.subplots(1, 2, figsize=(10, 3.6),
                                       gridspec_kw={"width_ratios": [1, 2.4]})
    pages.bar([r["order"] for r in rows], [r["pages_per_batch"] / 1e3 for r in rows],
              color=colors[:len(rows)])
    pages.set_ylabel("thousand 4 KiB pages a batch")
    pages.set_title("pages a batch touches", fontsize=9)
    width = 0.8 / len(rows)
    for i, r in enumerate(rows):
        rates.bar([j + (i - (len(rows) - 1) / 2) * width for j in range(len(cols))],
                  [r[c] for c in cols], width, label=r["order"], color=colors[i])
    rates.axhline(results["pinned_h2d"], color="black", linestyle="--", linewidth=1,
                  label=f"pinned H2D copy {results['pinned_h2d']:.0f} GB/s")
    rates.set_xticks(range(len(cols)), cols, fontsize=8)
    rates.set_ylabel("GB/s of gathered rows")
    rates.set_title("gathers of a batch's rows", fontsize=9)
    rates.legend(fontsize=7)
    fig.suptitle(f"'{results['graph']}' table renumbered, {results['device']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--graph", default="papers")
    parser.add_argument("--orders", default="degree", help="comma list of degree, bfs")
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--json", default=None)
    parser.add_argument("--plot", default=None, help="write a PNG of the table")
    parser.add_argument("--replot", default=None,
                        help="only draw --plot from the --json of an earlier run")
    args = parser.parse_args()
    # Checked before the graph is built (a bad order or count failed after it, as a
    # traceback); --replot only draws, so it needs no GPU.
    _cli.check_args(parser, args, {"batches": 1, "warmup": 0}, ["graph"])
    if "," in args.graph:
        parser.error(f"--graph takes one preset, got {args.graph!r}")
    unknown = [name for name in args.orders.split(",") if name not in qv.reorder.ORDER_NAMES]
    if unknown:
        parser.error(f"--orders takes a comma list of {', '.join(qv.reorder.ORDER_NAMES)}, got "
                     f"{unknown}")
    if args.replot:
        if not args.plot:
            parser.error("--replot draws --plot: give the PNG's path")
        try:
            results = json.loads(Path(args.replot).read_text())
        except (OSError, ValueError) as error:
            parser.error(f"--replot {args.replot}: not a --json of this script ({error})")
        plot(results, args.plot)
        return
    _cli.require_gpu(parser)
    bench_feature, bench_e2e = load_script("bench_feature"), load_script("bench_e2e")
    device = torch.device("cuda", torch.cuda.current_device())
    start = time.perf_counter()
    x, topo, _, _, train, _, _ = bench_e2e.build_graph(args.graph, device)
    row_bytes = x[0].nbytes
    rows_per_page = max(1, 4096 // row_bytes)
    bounds = bench_feature.copy_bounds(device)
    print(f"== {args.graph}: {tuple(x.shape)} {x.dtype} ({x.nbytes / 1e9:.1f} GB), "
          f"{topo.edge_count:,} edges, {train.numel():,} train seeds; built in "
          f"{time.perf_counter() - start:.0f} s; pinned host-to-device copy "
          f"{bounds['pinned_h2d']:.1f} GB/s", flush=True)
    results = {"graph": args.graph, "device": torch.cuda.get_device_name(device),
               "pinned_h2d": bounds["pinned_h2d"], "rows": []}

    def measure(order_name, topo, x, train, order_s, permute_s):
        sampler = qv.GraphSageSampler(topo, [15, 10, 5], device=device, mode="GPU")
        batches = bench_feature.sampled_batches(sampler, train, 1024,
                                                args.warmup + args.batches, seed=100)
        hot = qv.presample_hot_order(sampler, train, 1024,
                                     generator=torch.Generator().manual_seed(1))
        del sampler
        torch.cuda.empty_cache()
        pages = statistics.mean((b // rows_per_page).unique().numel() for b in batches)
        rows = statistics.mean(b.numel() for b in batches)
        on_gpu = [b.to(device) for b in batches]
        row = {"order": order_name, "order_s": order_s, "permute_s": permute_s,
               "pages_per_batch": pages, "rows_per_batch": rows}
        for cache in (0.0, 0.2):
            feature = qv.Feature(device_list=[device.index],
                                 device_cache_size=int(cache * x.size(0)) * row_bytes,
                                 host_reads="zero_copy")
            feature.from_cpu_tensor(x, hot_order=hot if cache else None)
            gather = lambda ids: feature[ids]  # noqa: E731
            assert torch.equal(gather(on_gpu[-1]).cpu(), x[batches[-1]])
            label = "host" if cache == 0 else "20% cache"
            row[f"{label} zero copy"] = bench_feature.gather_rate(gather, on_gpu, row_bytes,
                                                                  args.warmup)
            feature.host_reads = "staged"
            for _ in range(3):  # the staged split settles on batches not measured
                for ids in on_gpu[:args.warmup]:
                    gather(ids)
            row[f"{label} staged"] = bench_feature.gather_rate(gather, on_gpu, row_bytes,
                                                               args.warmup)
            if cache:
                row["hit_rate"] = statistics.mean(feature.hit_rate(b) for b in on_gpu)
            del feature
            torch.cuda.empty_cache()
        results["rows"].append(row)
        print(f"   {order_name:<13} pages a batch {pages:11,.0f} (rows {rows:9,.0f}); host "
              f"{row['host zero copy']:5.1f} / staged {row['host staged']:5.1f} GB/s; 20% "
              f"cache {row['20% cache zero copy']:5.1f} / staged "
              f"{row['20% cache staged']:5.1f} GB/s (hit rate {row['hit_rate']:.1%})"
              + (f"; ordered in {order_s:.0f} s, renumbered in {permute_s:.0f} s"
                 if order_name != "as generated" else ""), flush=True)

    measure("as generated", topo, x, train, 0.0, 0.0)
    for name in [o for o in args.orders.split(",") if o]:
        start = time.perf_counter()
        old_of_new = qv.reorder.order_by(topo, name)
        order_s = time.perf_counter() - start
        start = time.perf_counter()
        renumbered, new_of_old = qv.reorder.permute_topology(topo, old_of_new)
        renumbered_x = x.index_select(0, old_of_new)
        permute_s = time.perf_counter() - start
        measure(name, renumbered, renumbered_x, new_of_old[train], order_s, permute_s)
        del renumbered, renumbered_x, new_of_old, old_of_new
    base = results["rows"][0]
    print(f"\n| order | pages a batch | vs as generated | host, zero copy | host, staged | "
          f"20% cache, zero copy | 20% cache, staged | hit rate |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in results["rows"]:
        print(f"| {r['order']} | {r['pages_per_batch']:,.0f} | "
              f"{r['pages_per_batch'] / base['pages_per_batch']:.2f} | "
              f"{r['host zero copy']:.1f} | {r['host staged']:.1f} | "
              f"{r['20% cache zero copy']:.1f} | {r['20% cache staged']:.1f} | "
              f"{r['hit_rate']:.1%} |")
    print(f"(GB/s of gathered rows; pinned host-to-device copy {bounds['pinned_h2d']:.1f} GB/s)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
