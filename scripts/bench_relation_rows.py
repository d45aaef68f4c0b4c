"""Heterogeneous sampling when one type ends far more relations than the others: a knowledge
graph's shape, on the GPU.

    python scripts/bench_relation_rows.py [--relations 400] [--json out.json]
    python scripts/bench_relation_rows.py --compare old.json new.json

100,000 papers citing one another (1M edges), one hub node that `--relations` relations end
at (2 edges each, from papers) and one relation from the hub to 2,000 papers. Batches of 1,024
paper seeds from host memory (as a DataLoader hands them out), fanouts [10, 10] for every
relation, through ``HeteroSampler.sample`` (GPU and UVA modes). Per mode:

  with the hub's relations     the graph above
  without them (the bound)     the same papers and citations, the hub's relation to papers,
                               none ending at the hub: what the papers' rows cost alone

Each variant: ms per batch (median of 30 after 5 warm-ups), sampled edges per second (every
edge of both hops) and the GPU memory a batch adds at its peak. Run it once per library
(``TORCH_QUIVER_OPS_LIBRARY`` picks one); ``--compare`` prints both runs side by side.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

PAPERS, CITES, BATCH = 100_000, 1_000_000, 1024


def graph(relations, gen):
    import torch

    edges = {("paper", "cites", "paper"): torch.randint(PAPERS, (2, CITES), generator=gen),
             ("hub", "rev", "paper"): torch.stack([torch.zeros(2000, dtype=torch.long),
                                                   torch.randint(PAPERS, (2000,), generator=gen)])}
    for r in range(relations):
        edges[("paper", f"r{r}", "hub")] = torch.stack([
            torch.randint(PAPERS, (2,), generator=gen), torch.zeros(2, dtype=torch.long)])
    return edges


def measure(relations):
    import torch

    import torch_quiver_ops as qv

    rows = []
    for mode in ("GPU", "UVA"):
        for variant, count in ((f"with the hub's {relations} relations", relations),
                               ("without them (the bound)", 0)):
            gen = torch.Generator().manual_seed(0)
            topo = qv.HeteroCSRTopo(graph(count, gen), {"paper": PAPERS, "hub": 1})
            sampler = qv.HeteroSampler(topo, [10, 10], device=0, mode=mode)
            batches = [{"paper": torch.randint(PAPERS, (BATCH,), generator=gen).pin_memory()}
                       for _ in range(8)]
            for i in range(5):
                sampler.sample(batches[i % 8])
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
            times, edges = [], []
            for i in range(30):
                start = time.perf_counter()
                out = sampler.sample(batches[i % 8])
                torch.cuda.synchronize()
                times.append(time.perf_counter() - start)
                edges.append(sum(sum(v) for v in out.num_sampled_edges.values()))
            peak = (torch.cuda.max_memory_allocated() - before) / 2**20
            ms = statistics.median(times) * 1e3
            row = {"mode": mode, "variant": variant, "ms": ms,
                   "edges": statistics.mean(edges), "peak_mib": peak}
            rows.append(row)
            print(f"{mode:<4} {variant:<32} {ms:8.3f} ms  {row['edges'] / ms / 1e3:8.2f} "
                  f"Medges/s  {peak:9.1f} MiB", flush=True)
            del sampler, topo
            torch.cuda.empty_cache()
    return {"device": torch.cuda.get_device_name(), "relations": relations,
            "library": os.environ.get("TORCH_QUIVER_OPS_LIBRARY", "installed"), "rows": rows}


def compare(old_path, new_path):
    old, new = (json.load(open(p)) for p in (old_path, new_path))
    before = {(r["mode"], r["variant"]): r for r in old["rows"]}
    print(f"{new['device']}: batches of {BATCH} papers, fanouts [10, 10], "
          f"HeteroSampler.sample with seeds from host memory")
    print("| mode | graph | before ms | after ms | after Medges/s | before peak MiB | "
          "after peak MiB |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in new["rows"]:
        was = before.get((r["mode"], r["variant"]))
        ms = "-" if was is None else f"{was['ms']:.3f}"
        mib = "-" if was is None else f"{was['peak_mib']:,.1f}"
        print(f"| {r['mode']} | {r['variant']} | {ms} | {r['ms']:.3f} | "
              f"{r['edges'] / r['ms'] / 1e3:.2f} | {mib} | {r['peak_mib']:,.1f} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--relations", type=int, default=400)
    parser.add_argument("--json")
    parser.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"))
    args = parser.parse_args()
    if args.compare:
        for path in args.compare:
            if not os.path.isfile(path):
                parser.error(f"--compare {path}: not a --json of this script")
        compare(*args.compare)
        return
    if not 1 <= args.relations <= 10_000:
        parser.error(f"--relations must lie in [1, 10000], got {args.relations}")
    if args.json and not os.path.isdir(os.path.dirname(os.path.abspath(args.json))):
        parser.error(f"--json {args.json}: its folder does not exist")
    import torch
    if not torch.cuda.is_available():
        parser.error("this benchmark needs a GPU (torch sees none here)")
    result = measure(args.relations)
    if args.json:
        json.dump(result, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
