"""Weighted sampling without replacement at large fanouts: hub rows, one hop.

    python scripts/bench_weighted_hubs.py [--fanouts 64,1000,5000,20000] [--json out.json]
    python scripts/bench_weighted_hubs.py --compare old.json new.json [--png out.png]

32 hub nodes of degree 100,000 each (neighbors uniform among 1M nodes, weights uniform in
[0.1, 1)), the 32 hubs as seeds, one hop of each fanout. Run it once per library
(``TORCH_QUIVER_OPS_LIBRARY`` picks one) to compare builds in one call. Variants, each timed
as the median of calls (at most 10, or 1 s; a call past 3 s is timed once):

  uniform                 neighbor_sample without weights: the bound (the same picks, no keys)
  weighted keys           edge_weight only: a key per edge of the row
  weighted sums           edge_weight and edge_weight_cumsum (binary searches in the sums)
  GraphSageSampler        the user-facing sampler with weights (it builds the sums), CPU seeds
  CPU weighted sums       the CPU twin of "weighted sums" (2 host cores there are 16)

Sampled edges counted: seeds x fanout (every pick of the hop). ``--compare`` prints each
variant's ms in both runs and the old / new ratio, and draws them (log scale) with --png.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

HUBS, DEGREE, NODES = 32, 100_000, 1_000_000


def timed(call, sync) -> float:
    """Median ms of `call` (a warm-up first)."""
    call()
    sync()
    times, spent = [], 0.0
    while len(times) < 10 and spent < 1.0:
        start = time.perf_counter()
        call()
        sync()
        took = time.perf_counter() - start
        times.append(took)
        spent += took
        if took > 3.0:
            break
    return statistics.median(times) * 1e3


def hub_graph():
    """The CSR (host memory): nodes 0..HUBS-1 of degree DEGREE, the rest of none; each
    edge's weight and each row's prefix sums."""
    import torch

    from torch_quiver_ops import ops

    gen = torch.Generator().manual_seed(0)
    indptr = torch.zeros(NODES + 1, dtype=torch.long)
    indptr[1:HUBS + 1] = torch.arange(1, HUBS + 1) * DEGREE
    indptr[HUBS + 1:] = HUBS * DEGREE
    indices = torch.randint(0, NODES, (HUBS * DEGREE,), generator=gen)
    weights = torch.rand(HUBS * DEGREE, generator=gen) * 0.9 + 0.1
    return indptr, indices, weights, ops.row_cumsum(indptr, weights)


def measure(fanouts, json_path=None):
    """Times every variant at each fanout; with `json_path`, the record is rewritten after
    each fanout, so that a run cut short by a time limit keeps what it measured."""
    import torch

    import torch_quiver_ops as qv
    from torch_quiver_ops import ops

    indptr, indices, weights, sums = hub_graph()
    seeds = torch.arange(HUBS)
    cuda = torch.device("cuda")
    g = [t.to(cuda) for t in (indptr, indices, weights, sums)]
    sync = torch.cuda.synchronize
    rows = []
    for k in fanouts:
        cases = {
            "uniform": lambda: ops.neighbor_sample(g[0], g[1], seeds.to(cuda), [k]),
            "weighted keys": lambda: ops.neighbor_sample(g[0], g[1], seeds.to(cuda), [k],
                                                         edge_weight=g[2]),
            "weighted sums": lambda: ops.neighbor_sample(g[0], g[1], seeds.to(cuda), [k],
                                                         edge_weight=g[2],
                                                         edge_weight_cumsum=g[3]),
        }
        sampler = qv.GraphSageSampler(qv.CSRTopo(indptr=indptr, indices=indices), [k],
                                      device=0, mode="GPU", weights=weights)
        cases["GraphSageSampler"] = lambda: sampler.sample(seeds)
        for name, call in cases.items():
            rows.append({"fanout": k, "variant": name, "ms": timed(call, sync)})
        cpu = lambda: ops.neighbor_sample(indptr, indices, seeds, [k], edge_weight=weights,
                                          edge_weight_cumsum=sums)
        rows.append({"fanout": k, "variant": "CPU weighted sums", "ms": timed(cpu, lambda: None)})
        for row in rows[-5:]:
            print(f"fanout {k:>6} {row['variant']:<18} {row['ms']:>10.3f} ms  "
                  f"{HUBS * k / row['ms'] / 1e3:>9.2f} Medges/s", flush=True)
        if json_path:
            record = {"device": torch.cuda.get_device_name(),
                      "library": os.environ.get("TORCH_QUIVER_OPS_LIBRARY", "installed"),
                      "hubs": HUBS, "degree": DEGREE, "rows": rows}
            json.dump(record, open(json_path, "w"), indent=1)


def compare(old_path, new_path, png):
    old, new = (json.load(open(p)) for p in (old_path, new_path))
    key = lambda r: (r["fanout"], r["variant"])
    before = {key(r): r["ms"] for r in old["rows"]}
    print(f"{new['device']}: {HUBS} hubs of degree {DEGREE}, one hop, ms per call (median)")
    print("| fanout | variant | before ms | after ms | before / after | after Medges/s |")
    print("|---:|---|---:|---:|---:|---:|")
    for r in new["rows"]:
        was = before.get(key(r))
        ratio = f"{was / r['ms']:.2f}x" if was else "-"
        print(f"| {r['fanout']:,} | {r['variant']} | {'-' if was is None else f'{was:,.3f}'} | "
              f"{r['ms']:,.3f} | {ratio} | {HUBS * r['fanout'] / r['ms'] / 1e3:,.1f} |")
    if png:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for variant, style in (("uniform", "k:"), ("weighted keys", "C0"),
                               ("weighted sums", "C1"), ("GraphSageSampler", "C2"),
                               ("CPU weighted sums", "C3")):
            pts = sorted((r["fanout"], r["ms"]) for r in new["rows"] if r["variant"] == variant)
            was = sorted((r["fanout"], r["ms"]) for r in old["rows"] if r["variant"] == variant)
            ax.plot(*zip(*pts), style, marker="o", label=f"{variant} (after)")
            if variant not in ("uniform", "CPU weighted sums") and was:
                ax.plot(*zip(*was), style, marker="x", linestyle="--", alpha=0.6,
                        label=f"{variant} (before)")
        ax.set(xscale="log", yscale="log", xlabel="fanout (picks per hub row)",
               ylabel="ms per call (median)",
               title=f"{HUBS} hub rows of degree {DEGREE:,}, weighted, without replacement\n"
                     f"{new['device']}")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(png, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fanouts", default="64,1000,5000,20000")
    parser.add_argument("--json")
    parser.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"))
    parser.add_argument("--png")
    args = parser.parse_args()
    if args.compare:
        for path in args.compare:
            if not os.path.isfile(path):
                parser.error(f"--compare {path}: not a --json of this script")
        compare(*args.compare, args.png)
        return
    if args.png:
        parser.error("--png draws what --compare reads")
    try:
        fanouts = [int(f) for f in args.fanouts.split(",")]
    except ValueError:
        parser.error(f"--fanouts takes a comma list of whole numbers, got {args.fanouts!r}")
    if not all(1 <= f < DEGREE for f in fanouts):
        parser.error(f"--fanouts must lie in [1, {DEGREE - 1}] (picks of a hub's "
                     f"{DEGREE:,} edges), got {fanouts}")
    if args.json and not os.path.isdir(os.path.dirname(os.path.abspath(args.json))):
        parser.error(f"--json {args.json}: its folder does not exist")
    import torch
    if not torch.cuda.is_available():
        parser.error("this benchmark needs a GPU (torch sees none here)")
    measure(fanouts, args.json)


if __name__ == "__main__":
    main()
