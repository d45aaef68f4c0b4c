"""How many pages of a feature table a sampled batch touches, with the nodes numbered as
generated, in breadth-first order and in degree order (torch_quiver_ops.reorder). The host
tier's zero-copy reads are bound by the pages a batch touches (docs/benchmarks.md), so
fewer pages is what a renumbering can buy there. CPU only: sample_subgraph on the CPU,
[15, 10, 5], 1024 seeds, 10 batches, 16 rows a 4 KiB page (256-byte rows: papers100M's
128 bf16 features).

    python scripts/probe_reorder_pages.py [--graph products]
"""
import argparse
import time

import torch

import torch_quiver_ops as qv
from torch_quiver_ops import _cli
from torch_quiver_ops.synthetic import synthetic_graph


def pages(topo, train, rows_per_page=16, batches=10):
    """Mean distinct pages and rows a batch."""
    gen = torch.Generator().manual_seed(0)
    counts = []
    for _ in range(batches):
        seeds = train[torch.randperm(train.numel(), generator=gen)[:1024]]
        n_id = qv.ops.sample_subgraph(topo.indptr, topo.indices, seeds, [15, 10, 5], False,
                                      None)[0]
        counts.append(((n_id // rows_per_page).unique().numel(), n_id.numel()))
    return (sum(p for p, _ in counts) / len(counts), sum(n for _, n in counts) / len(counts))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--graph", default="products")
    args = parser.parse_args()
    _cli.check_args(parser, args, {}, ["graph"])
    if "," in args.graph:  # (check_args takes lists; this probe measures one graph)
        parser.error(f"--graph takes one preset, got {args.graph!r}")
    start = time.perf_counter()
    graph = synthetic_graph(args.graph, csr=True, features=False)
    topo = graph.topology()
    print(f"{args.graph}: {topo.node_count:,} nodes, {topo.edge_count:,} edges, built in "
          f"{time.perf_counter() - start:.0f} s", flush=True)
    print(f"{'order':>8} {'order s':>8} {'permute s':>9} {'pages a batch':>13} "
          f"{'rows a batch':>12} {'vs as generated':>15}", flush=True)
    plain, rows = pages(topo, graph.train_idx)
    print(f"{'as made':>8} {'':>8} {'':>9} {plain:13,.0f} {rows:12,.0f} {1:15.2f}", flush=True)
    for name in ("bfs", "degree"):
        start = time.perf_counter()
        order = qv.reorder.order_by(topo, name)
        ordered_s = time.perf_counter() - start
        start = time.perf_counter()
        renumbered, new_of_old = qv.reorder.permute_topology(topo, order)
        permute_s = time.perf_counter() - start
        touched, rows = pages(renumbered, new_of_old[graph.train_idx])
        print(f"{name:>8} {ordered_s:8.1f} {permute_s:9.1f} {touched:13,.0f} {rows:12,.0f} "
              f"{touched / plain:15.2f}", flush=True)


if __name__ == "__main__":
    main()
