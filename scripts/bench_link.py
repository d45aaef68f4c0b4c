"""Link-prediction epochs: our LinkNeighborLoader beside the model alone.

    python scripts/bench_link.py [--graph products] [--train-edges 1000000] [--json out.json]

A GraphSAGE link predictor (2 x SAGEConv, in-256-256, dot-product scores) over
``--train-edges`` seed edges of the products-like graph, 1:1 binary negatives, batches of
1024 seed edges, fanouts [10, 5] around every endpoint, 20% of the feature rows cached in
HBM. Seeds come from the host as a DataLoader gives them. In one run:

  1. ``torch_quiver_ops.pyg.LinkNeighborLoader`` behind the ``Prefetcher`` (batches built
     2 ahead on a side stream), GPU and UVA sampling;
  2. the same in line (no prefetch), split into building batches and the model;
  3. the model alone over 200 such batches built beforehand and kept in GPU memory,
     scaled to the epoch's batch count: the bound a hidden data path approaches (PyG's own LinkNeighborLoader cannot sample here:
     no pyg-lib, no torch-sparse on the GPU machine).

Prints a table (epoch seconds, ms per batch, seed edges per second, sampled edges per
second counting every edge of every batch's subgraph) and the ratio to the model alone.
"""
from __future__ import annotations

import argparse
import json
import time

import torch

from torch_quiver_ops import _cli
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.nn import SAGEConv

from torch_quiver_ops.pyg import LinkNeighborLoader, Prefetcher
from torch_quiver_ops.synthetic import synthetic_graph


class Encoder(torch.nn.Module):
    def __init__(self, in_channels: int, hidden: int = 256):
        super().__init__()
        self.conv1 = SAGEConv(in_channels, hidden)
        self.conv2 = SAGEConv(hidden, hidden)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def step(model, optimizer, batch):
    optimizer.zero_grad()
    z = model(batch.x, batch.edge_index)
    src, dst = batch.edge_label_index
    loss = F.binary_cross_entropy_with_logits((z[src] * z[dst]).sum(-1), batch.edge_label)
    loss.backward()
    optimizer.step()


def timed(fn, device):
    torch.cuda.synchronize(device)
    start = time.perf_counter()
    out = fn()
    torch.cuda.synchronize(device)
    return time.perf_counter() - start, out


def epochs(loader, device, run_step, sampled_edges):
    """One warm-up epoch, then the timed ones: ``(prefetching epoch s, (sampled edges,
    batches), in-line epoch s, (s building batches, s in the model))``. ``run_step(batch)``
    trains on a batch; ``sampled_edges(batch)`` counts its edges."""
    def prefetching():
        edges = batches = 0
        for batch in Prefetcher(loader, device):
            run_step(batch)
            edges += sampled_edges(batch)
            batches += 1
        return edges, batches

    def in_line():
        build = run = 0.0
        iterator = iter(loader)
        while True:
            seconds, batch = timed(lambda: next(iterator, None), device)
            if batch is None:
                return build, run
            build += seconds
            run += timed(lambda: run_step(batch), device)[0]

    timed(prefetching, device)  # warm-up: CUDA graphs, caches, allocator, first launches
    epoch, counts = timed(prefetching, device)
    line_epoch, split = timed(in_line, device)
    return epoch, counts, line_epoch, split


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--graph", default="products")
    parser.add_argument("--train-edges", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    _cli.require_gpu(parser)
    device = torch.device("cuda", torch.cuda.current_device())
    graph = synthetic_graph(args.graph, seed=0)
    data = Data(x=graph.x, edge_index=graph.edge_index, num_nodes=graph.num_nodes)
    gen = torch.Generator().manual_seed(0)
    seeds = graph.edge_index[:, torch.randperm(graph.edge_index.size(1), generator=gen)
                             [:args.train_edges]]
    print(f"graph {args.graph!r}: {graph.num_nodes:,} nodes, {graph.edge_index.size(1):,} "
          f"edges; {seeds.size(1):,} seed edges, batch {args.batch_size} + as many random "
          f"pairs, fanouts [10, 5], 20% of the feature rows in HBM; "
          f"{torch.cuda.get_device_name(device)}", flush=True)
    rows = []
    for mode in ("GPU", "UVA"):
        loader = LinkNeighborLoader(data, [10, 5], edge_label_index=seeds,
                                    neg_sampling="binary", batch_size=args.batch_size,
                                    shuffle=True, device=device, mode=mode, cache_size="20%")
        torch.manual_seed(0)
        model = Encoder(graph.x.size(1)).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.003)

        epoch, (edges, batches), line_epoch, (build, run) = epochs(
            loader, device, lambda batch: step(model, optimizer, batch),
            lambda batch: batch.edge_index.size(1))
        # The same kind of batches built beforehand (the first 200: all of them would not
        # fit in GPU memory), the model timed over them and scaled to the epoch's batches.
        kept = []
        for batch in loader:
            kept.append(batch)
            if len(kept) == 200:
                break
        def model_only(kept=kept):
            for batch in kept:
                step(model, optimizer, batch)

        sample, _ = timed(model_only, device)
        alone = sample / len(kept) * batches
        kept = model_only = None
        for config, seconds, note in (
                (f"{mode}: LinkNeighborLoader + Prefetcher", epoch, ""),
                (f"{mode}: in line", line_epoch,
                 f"building {build:.2f} s, model {run:.2f} s"),
                (f"{mode}: model alone", alone, "(bound: batches built beforehand)")):
            rows.append({"config": config, "epoch_s": seconds, "ms_per_batch":
                         1000 * seconds / batches, "seed_edges_per_s": seeds.size(1) / seconds,
                         "sampled_edges_per_s": edges / seconds, "batches": batches,
                         "ratio_to_model_alone": seconds / alone, "note": note})
    print("\n| configuration | epoch, s | ms/batch | seed edges/s | sampled edges/s "
          "| x model alone | note |\n|---|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['config']} | {r['epoch_s']:.2f} | {r['ms_per_batch']:.2f} | "
              f"{r['seed_edges_per_s'] / 1e3:.0f} K | {r['sampled_edges_per_s'] / 1e6:.1f} M | "
              f"{r['ratio_to_model_alone']:.2f} | {r['note']} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
