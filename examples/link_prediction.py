"""Link prediction with GraphSAGE, as PyG users write it with ``LinkNeighborLoader``, on
torch-quiver-ops' sampler and tiered feature store (the loaders come from
``torch_quiver_ops.pyg``; a prefetcher builds the next batches on a side CUDA stream).

    python examples/link_prediction.py                    # small graph (1.9M edges), GPU
    python examples/link_prediction.py --size tiny --device cpu   # minutes on 2 CPU cores
    python examples/link_prediction.py --size products    # ogbn-products-sized, GPU

A share of the graph's edges (--held-out) is removed from the graph the model sees and
split into validation and test edges; each is scored against as many random node pairs.
Training samples around both endpoints of batches of the remaining edges and as many
random pairs (binary negatives, 1:1), a GraphSAGE encoder embeds the sampled nodes and the
dot product of two embeddings scores a pair. Each epoch prints the loss and the test AUC
(the chance that a true edge outscores a random pair; 0.5 is chance).
"""
import argparse
import os
import sys
import time
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.nn import SAGEConv

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import option_checks  # noqa: E402  (the examples' shared option checks)

import torch_quiver_ops as qv  # noqa: E402
from torch_quiver_ops.pyg import LinkNeighborLoader, Prefetcher  # noqa: E402
from torch_quiver_ops.synthetic import PRESETS, synthetic_graph  # noqa: E402


def parse_args(argv: Optional[Sequence[str]] = None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="small", choices=sorted(PRESETS),
                        help="synthetic graph preset (default: small)")
    parser.add_argument("--epochs", type=int, default=3, help="training epochs (default: 3)")
    parser.add_argument("--batch-size", type=int, default=1024,
                        help="seed edges per batch, each with one random pair (default: 1024)")
    parser.add_argument("--num-neighbors", default="10,5",
                        help="neighbors sampled per hop around every endpoint, the "
                             "endpoints' hop first (default: 10,5)")
    parser.add_argument("--train-edges", type=int, default=None,
                        help="seed edges per epoch, drawn from the training edges (default: "
                             "all of them)")
    parser.add_argument("--held-out", type=float, default=0.05,
                        help="share of the edges held out of the graph for validation and "
                             "test, half each (default: 0.05)")
    parser.add_argument("--hidden", type=int, default=128,
                        help="width of the encoder's layers (default: 128)")
    parser.add_argument("--lr", type=float, default=0.003, help="Adam's learning rate")
    parser.add_argument("--device", default="auto",
                        help="auto (the GPU when there is one and the CUDA kernels were built, "
                             "else the CPU), cpu, or a CUDA device such as cuda:0")
    parser.add_argument("--cache-size", default="20%",
                        help="GPU memory for the hottest feature rows (default: 20%%)")
    parser.add_argument("--seed", type=option_checks.seed, default=0,
                        help="seeds the graph, split and model")
    parser.add_argument("--report", default=None,
                        help="write the per-epoch history (loss, times, AUC) as JSON here")
    args = parser.parse_args(argv)
    # Checked here, before the graph is built, not after an epoch (or a run) has gone by.
    args.num_neighbors = option_checks.fanout_list(parser, args.num_neighbors, "--num-neighbors")
    option_checks.cache_size(parser, args.cache_size)
    option_checks.at_least(parser, args, ["epochs"], 0)
    # --train-edges left out (None) takes every one
    option_checks.at_least(parser, args, ["batch_size", "hidden", "train_edges"], 1)
    # a binary negative per seed edge
    option_checks.negatives_fit(parser, "--batch-size", args.batch_size, args.batch_size)
    option_checks.at_most(parser, args, ["hidden"], option_checks.MAX_HIDDEN)
    if not 0 < args.held_out < 1:
        parser.error(f"--held-out is a share of the edges, between 0 and 1 (both excluded), "
                     f"got {args.held_out}")
    option_checks.positive(parser, args, ["lr"])
    option_checks.output_file(parser, "report", args.report)
    option_checks.device_option(parser, args.device, auto=True)
    option_checks.graph_fits(parser, args.size)  # (drawn on the CPU)
    return args


class Encoder(torch.nn.Module):
    def __init__(self, in_channels: int, hidden: int):
        super().__init__()
        self.conv1 = SAGEConv(in_channels, hidden)
        self.conv2 = SAGEConv(hidden, hidden)

    def forward(self, x, edge_index):
        x = F.dropout(self.conv1(x, edge_index).relu(), p=0.2, training=self.training)
        return self.conv2(x, edge_index)


def scores(model, batch):
    z = model(batch.x, batch.edge_index)
    src, dst = batch.edge_label_index
    return (z[src] * z[dst]).sum(-1)


def auc(positive: torch.Tensor, negative: torch.Tensor) -> float:
    """The chance that a positive outscores a negative (ties count half): Mann-Whitney."""
    both = torch.cat([positive, negative]).double()
    if bool(both.isnan().any()):  # a NaN outscores nothing: it ranked as a win
        return float("nan")  # (an infinite score ranks as any other: it had given NaN too)
    order = both.argsort()
    ranks = torch.empty_like(both)
    ranks[order] = torch.arange(1, both.numel() + 1, dtype=torch.double, device=both.device)
    # Tied scores share their mean rank.
    values, inverse, counts = both.unique(return_inverse=True, return_counts=True)
    if values.numel() < both.numel():
        sums = torch.zeros_like(values).scatter_add_(0, inverse, ranks)
        ranks = (sums / counts)[inverse]
    p, n = positive.numel(), negative.numel()
    return float((ranks[:p].sum() - p * (p + 1) / 2) / (p * n))


def main(argv: Optional[Sequence[str]] = None) -> dict:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    use_gpu = option_checks.cuda_usable()
    device = torch.device("cuda" if use_gpu else "cpu") if args.device == "auto" \
        else torch.device(args.device)
    fanouts = args.num_neighbors

    graph = synthetic_graph(args.size, seed=args.seed)
    # The graph holds both directions of each undirected edge: hold out whole pairs, so that
    # a held-out edge's reverse cannot carry it into the training graph's messages.
    pairs = graph.edge_index[:, graph.edge_index[0] < graph.edge_index[1]]
    gen = torch.Generator().manual_seed(args.seed)
    order = torch.randperm(pairs.size(1), generator=gen)
    held = int(pairs.size(1) * args.held_out)
    val_edges, test_edges = pairs[:, order[:held // 2]], pairs[:, order[held // 2:held]]
    kept = pairs[:, order[held:]]
    for split, part in (("validation", val_edges), ("test", test_edges), ("training", kept)):
        if part.size(1) == 0:  # before the first epoch, not after it
            raise SystemExit(f"link_prediction.py: --held-out {args.held_out} of the "
                             f"{pairs.size(1):,} undirected edges leaves no {split} edge")
    train_edges = torch.cat([kept, kept.flip(0)], 1)
    # The model sees only the training edges: held-out edges must not leak into messages.
    data = Data(x=graph.x, edge_index=train_edges, num_nodes=graph.num_nodes)

    placement = dict(device=device, mode="UVA" if device.type == "cuda" else "CPU",
                     cache_size=args.cache_size if device.type == "cuda" else 0)
    seeds = train_edges
    if args.train_edges is not None and args.train_edges < seeds.size(1):
        seeds = seeds[:, torch.randperm(seeds.size(1), generator=gen)[:args.train_edges]]
    train_loader = LinkNeighborLoader(data, fanouts, edge_label_index=seeds,
                                      neg_sampling="binary", batch_size=args.batch_size,
                                      shuffle=True, **placement)

    def scoring_loader(pairs):
        return LinkNeighborLoader(data, fanouts, edge_label_index=pairs,
                                  neg_sampling="binary", batch_size=4096, **placement)

    model = Encoder(graph.x.size(1), args.hidden).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    @torch.no_grad()
    def evaluate(pairs) -> float:
        model.eval()
        positive, negative = [], []
        for batch in scoring_loader(pairs):
            batch = batch.to(device)
            out = scores(model, batch)
            positive.append(out[batch.edge_label == 1])
            negative.append(out[batch.edge_label == 0])
        return auc(torch.cat(positive), torch.cat(negative))

    # In undirected pairs, which add up (the graph's directed edges are twice as many; the
    # line had mixed the two: 21,854 + 287 + 288 of 23,004).
    print(f"graph {args.size!r}: {graph.num_nodes:,} nodes, {pairs.size(1):,} undirected edges "
          f"({kept.size(1):,} seen in training, {val_edges.size(1):,} validation, "
          f"{test_edges.size(1):,} test); device {device}; seed edges per epoch "
          f"{seeds.size(1):,}, batch {args.batch_size} + as many random pairs", flush=True)
    history = []
    for epoch in range(1, args.epochs + 1):
        model.train()
        start = time.perf_counter()
        total_loss = total = 0.0
        for batch in Prefetcher(train_loader, device):
            batch = batch.to(device)
            optimizer.zero_grad()
            loss = F.binary_cross_entropy_with_logits(scores(model, batch), batch.edge_label)
            loss.backward()
            optimizer.step()
            total_loss += loss.item() * batch.edge_label.numel()
            total += batch.edge_label.numel()
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        val_auc, test_auc = evaluate(val_edges), evaluate(test_edges)
        history.append({"epoch": epoch, "loss": total_loss / total, "seconds": seconds,
                        "val_auc": val_auc, "test_auc": test_auc})
        print(f"epoch {epoch}: {seconds:6.2f}s  loss {total_loss / total:.4f}  validation AUC "
              f"{val_auc:.4f}  test AUC {test_auc:.4f} (chance 0.5)", flush=True)
        option_checks.stop_if_diverged(total_loss / total, epoch, args.lr)
    result = {"history": history, "device": str(device), "size": args.size}
    if args.report:
        option_checks.write_report(args.report, result)
    return result


if __name__ == "__main__":
    option_checks.run_main(main)
