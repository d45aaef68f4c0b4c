"""Paper classification on an ogbn-mag-like heterogeneous graph with ``to_hetero(GraphSAGE)``,
as PyG users write it, on torch-quiver-ops' typed sampler and tiered feature store (the
loader comes from ``torch_quiver_ops.pyg``; a prefetcher builds the next batches on a side
CUDA stream).

    python examples/train_hetero.py                  # ogbn-mag-sized (1.9M nodes), GPU
    python examples/train_hetero.py --scale 0.05     # a 5% graph: minutes on 2 CPU cores

The graph (:func:`torch_quiver_ops.synthetic_hetero.mag_like`) has papers, authors,
institutions and fields of study, seven relations (``cites`` symmetric, every other one
with its reverse), 128-d paper features and 349 paper labels. Only papers have features:
the other types get learnable embeddings, looked up by the ids of the sampled nodes, as
PyG's ogbn-mag examples do. Each epoch prints the loss, the time and the validation and
test accuracy of the papers (chance: 1/349).
"""
import argparse
import math
import os
import sys
import time
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch_geometric.nn import SAGEConv, to_hetero

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import option_checks  # noqa: E402  (the examples' shared option checks)

import torch_quiver_ops as qv  # noqa: E402
from torch_quiver_ops.pyg import NeighborLoader, Prefetcher  # noqa: E402
from torch_quiver_ops.synthetic_hetero import mag_like, mag_like_bytes, mag_like_sizes  # noqa: E402


def parse_args(argv: Optional[Sequence[str]] = None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0,
                        help="share of ogbn-mag's node and edge counts (default: 1)")
    parser.add_argument("--epochs", type=int, default=3, help="training epochs (default: 3)")
    parser.add_argument("--batch-size", type=int, default=1024,
                        help="paper seeds per batch (default: 1024)")
    parser.add_argument("--num-neighbors", default="15,10",
                        help="neighbors sampled per hop and relation, the seeds' hop "
                             "first (default: 15,10)")
    parser.add_argument("--train-papers", type=int, default=None,
                        help="seed papers per epoch, drawn from the training papers "
                             "(default: all of them)")
    parser.add_argument("--eval-papers", type=int, default=20_000,
                        help="validation and test papers scored after each epoch, at most "
                             "(default: 20000)")
    parser.add_argument("--hidden", type=int, default=128, help="width of the layers")
    parser.add_argument("--lr", type=float, default=0.003, help="Adam's learning rate")
    parser.add_argument("--device", default="auto",
                        help="auto (the GPU when there is one and the CUDA kernels were built, "
                             "else the CPU), cpu, or a CUDA device such as cuda:0")
    parser.add_argument("--cache-size", default="20%",
                        help="GPU memory for the hottest feature rows of every type, one "
                             "budget shared by hotness (default: 20%%)")
    parser.add_argument("--seed", type=option_checks.seed, default=0,
                        help="seeds the graph, split and model")
    parser.add_argument("--report", default=None,
                        help="write the per-epoch history (loss, times, accuracy) as JSON here")
    args = parser.parse_args(argv)
    # Checked here, before the graph is built, not after an epoch (or a run) has gone by.
    if not (math.isfinite(args.scale) and args.scale > 0):
        parser.error(f"--scale must be a number > 0, got {args.scale}")
    nodes, split = mag_like_sizes(args.scale)
    if split["val"] == 0 or split["test"] == 0:
        parser.error(f"--scale {args.scale} leaves {nodes['paper']} papers and no validation "
                     f"or test paper: give a larger --scale")
    # The graph, then its HeteroData and the loaders' CSR: about three times mag_like's peak.
    need, available = 3 * mag_like_bytes(args.scale), qv.preflight.available_memory()
    if 0 <= available < need:
        parser.error(f"--scale {args.scale} needs about {need / 2**30:.3g} GiB of host memory; "
                     f"{available / 2**30:,.1f} GiB are available")
    args.num_neighbors = option_checks.fanout_list(parser, args.num_neighbors, "--num-neighbors")
    option_checks.cache_size(parser, args.cache_size)
    option_checks.at_least(parser, args, ["epochs"], 0)
    # --train-papers left out (None) takes every one
    option_checks.at_least(parser, args, ["batch_size", "hidden", "train_papers", "eval_papers"], 1)
    option_checks.at_most(parser, args, ["hidden"], option_checks.MAX_HIDDEN)
    option_checks.positive(parser, args, ["lr"])
    option_checks.output_file(parser, "report", args.report)
    option_checks.device_option(parser, args.device, auto=True)
    return args


class SAGE(torch.nn.Module):
    def __init__(self, hidden: int, num_classes: int):
        super().__init__()
        self.conv1 = SAGEConv((-1, -1), hidden)
        self.conv2 = SAGEConv((-1, -1), num_classes)
        self.dropout = torch.nn.Dropout(0.2)  # a module: to_hetero's tracing keeps its mode

    def forward(self, x, edge_index):
        return self.conv2(self.dropout(self.conv1(x, edge_index).relu()), edge_index)


class Classifier(torch.nn.Module):
    """``to_hetero(SAGE)`` over paper features and, for the types without features,
    embeddings of the sampled nodes' ids."""

    def __init__(self, data, hidden: int, num_classes: int):
        super().__init__()
        self.embeddings = torch.nn.ModuleDict({
            t: torch.nn.Embedding(data[t].num_nodes, data["paper"].x.size(1))
            for t in data.node_types if "x" not in data[t]})
        self.gnn = to_hetero(SAGE(hidden, num_classes), data.metadata(), aggr="sum")

    def forward(self, batch):
        x = dict(batch.x_dict)
        for t, embedding in self.embeddings.items():
            x[t] = embedding(batch[t].n_id)
        return self.gnn(x, batch.edge_index_dict)["paper"][:batch["paper"].batch_size]


def main(argv: Optional[Sequence[str]] = None) -> dict:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    use_gpu = option_checks.cuda_usable()
    device = torch.device("cuda" if use_gpu else "cpu") if args.device == "auto" \
        else torch.device(args.device)
    fanouts = args.num_neighbors
    graph = mag_like(args.scale, seed=args.seed)
    data = graph.to_hetero_data()
    gen = torch.Generator().manual_seed(args.seed)
    train = graph.train_idx
    if args.train_papers is not None and args.train_papers < train.numel():
        train = train[torch.randperm(train.numel(), generator=gen)[:args.train_papers]]

    placement = dict(device=device, mode="UVA" if device.type == "cuda" else "CPU",
                     cache_size=args.cache_size if device.type == "cuda" else 0)
    train_loader = NeighborLoader(data, fanouts, input_nodes=("paper", train),
                                  batch_size=args.batch_size, shuffle=True, **placement)

    def scoring_loader(ids):
        return NeighborLoader(data, fanouts, input_nodes=("paper", ids), batch_size=4096,
                              **placement)

    # The papers scored after each epoch: drawn once, by a generator of their own, so that
    # every epoch scores the same ones (the curve shows the model change, not the subset's)
    # and the training draws above do not move them.
    eval_gen = torch.Generator().manual_seed(args.seed + 1)
    val_papers, test_papers = (
        ids[torch.randperm(ids.numel(), generator=eval_gen)[:args.eval_papers]]
        for ids in (graph.val_idx, graph.test_idx))

    model = Classifier(data, args.hidden, graph.num_classes).to(device)
    with torch.no_grad():  # lazy (-1) input sizes are fixed by a first batch
        model(next(iter(scoring_loader(graph.val_idx[:8]))).to(device))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    @torch.no_grad()
    def accuracy(ids) -> float:
        model.eval()
        right = total = 0
        for batch in scoring_loader(ids):
            batch = batch.to(device)
            size = batch["paper"].batch_size
            right += int((model(batch).argmax(-1) == batch["paper"].y[:size]).sum())
            total += size
        return right / total

    sizes = sum(ei.size(1) for ei in graph.edge_index_dict.values())
    print(f"mag-like graph (scale {args.scale}): {sum(graph.num_nodes_dict.values()):,} nodes "
          f"of {len(graph.num_nodes_dict)} types, {sizes:,} edges of "
          f"{len(graph.edge_index_dict)} relations; {train.numel():,} training papers an "
          f"epoch, batch {args.batch_size}, fanouts {fanouts} a relation; device {device}",
          flush=True)
    history = []
    for epoch in range(1, args.epochs + 1):
        model.train()
        start = time.perf_counter()
        total_loss = total = 0.0
        for batch in Prefetcher(train_loader, device):
            batch = batch.to(device)
            optimizer.zero_grad()
            size = batch["paper"].batch_size
            loss = F.cross_entropy(model(batch), batch["paper"].y[:size])
            loss.backward()
            optimizer.step()
            total_loss += loss.item() * size
            total += size
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        val, test = accuracy(val_papers), accuracy(test_papers)
        history.append({"epoch": epoch, "loss": total_loss / total, "seconds": seconds,
                        "val_accuracy": val, "test_accuracy": test})
        print(f"epoch {epoch}: {seconds:6.2f}s  loss {total_loss / total:.4f}  validation "
              f"accuracy {val:.4f}  test accuracy {test:.4f} (chance "
              f"{1 / graph.num_classes:.4f})", flush=True)
        option_checks.stop_if_diverged(total_loss / total, epoch, args.lr)
    result = {"history": history, "device": str(device), "scale": args.scale,
              "num_classes": graph.num_classes}
    if args.report:
        option_checks.write_report(args.report, result)
    return result


if __name__ == "__main__":
    option_checks.run_main(main)
