"""Trains GraphSAGE on a synthetic graph with torch-quiver-ops' sampler and feature store.

    python examples/train_sage.py                      # small graph, a couple of minutes on 2 CPU cores
    python examples/train_sage.py --size products      # ogbn-products-sized, for a GPU

On a GPU (used automatically when present) the topology is sampled in UVA mode and the
features are gathered onto the GPU; on a CPU-only machine everything runs on the CPU.
Each epoch prints its time split into sampling, feature gathering and the model, and the
accuracy on held-out test nodes.
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from torch_geometric.nn import SAGEConv
from tqdm import tqdm

import torch_quiver_ops as qv
from torch_quiver_ops.synthetic import PRESETS, synthetic_graph


class SAGE(torch.nn.Module):
    def __init__(self, in_channels: int, hidden: int, out_channels: int, num_layers: int):
        super().__init__()
        dims = [in_channels] + [hidden] * (num_layers - 1) + [out_channels]
        self.convs = torch.nn.ModuleList(SAGEConv(a, b) for a, b in zip(dims[:-1], dims[1:]))

    def forward(self, x, adjs):
        for i, (edge_index, _, size) in enumerate(adjs):
            x = self.convs[i]((x, x[:size[1]]), edge_index)
            if i < len(self.convs) - 1:
                x = F.dropout(F.relu(x), p=0.5, training=self.training)
        return x


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="small", choices=sorted(PRESETS),
                        help="synthetic graph preset (default: small)")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--fanouts", default="15,10,5", help="neighbors per hop, comma separated")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--lr", type=float, default=0.003)
    parser.add_argument("--device", default="auto", help="auto, cpu, or a CUDA device such as cuda:0")
    parser.add_argument("--mode", default=None, choices=["GPU", "UVA", "CPU"],
                        help="where the topology lives (default: UVA on a GPU, else CPU)")
    parser.add_argument("--cache-size", default="20%",
                        help="GPU feature cache: bytes (e.g. 200M) or a share of the table "
                             "(default 20%%); 0 keeps every row in pinned host memory")
    parser.add_argument("--cache-order", default="presample", choices=["presample", "degree"],
                        help="which rows are hot: most sampled in one presampled epoch, or "
                             "highest degree")
    parser.add_argument("--eval-nodes", type=int, default=10_000,
                        help="test nodes scored after each epoch")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def pick_device(name: str) -> torch.device:
    if name != "auto":
        return torch.device(name)
    if torch.cuda.is_available() and qv.cuda_kernels_built():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class Clock:
    """Wall time of phases, synchronized with the GPU so each phase owns its kernels."""

    def __init__(self, device: torch.device):
        self.device = device
        self.totals = {}

    def lap(self, phase: str, since: float) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        now = time.perf_counter()
        self.totals[phase] = self.totals.get(phase, 0.0) + now - since
        return now


@torch.no_grad()
def evaluate(model, sampler, feature, labels, nodes, batch_size, device) -> float:
    model.eval()
    correct = 0
    for seeds in nodes.split(batch_size):
        n_id, size, adjs = sampler.sample(seeds)
        out = model(feature[n_id].to(device), [adj.to(device) for adj in adjs])
        correct += int((out.argmax(-1) == labels[seeds.to(labels.device)]).sum())
    return correct / max(1, nodes.numel())


def main(argv=None) -> dict:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    device = pick_device(args.device)
    fanouts = [int(f) for f in args.fanouts.split(",")]

    start = time.perf_counter()
    graph = synthetic_graph(args.size, seed=args.seed)
    topo = qv.CSRTopo(graph.edge_index, num_nodes=graph.num_nodes)
    print(f"graph '{args.size}': {graph.num_nodes:,} nodes, {graph.num_edges:,} edges, "
          f"{graph.x.size(1)} features, {graph.num_classes} classes "
          f"(built in {time.perf_counter() - start:.1f}s)")

    sampler = qv.GraphSageSampler(topo, fanouts, device=device, mode=args.mode)
    cache = 0
    if device.type == "cuda":
        cache = args.cache_size
        if cache.endswith("%"):
            cache = int(float(cache[:-1]) / 100 * graph.num_nodes) * graph.x[0].nbytes
    hot_order = None
    if cache and args.cache_order == "presample":
        hot_order = qv.presample_hot_order(sampler, graph.train_idx, args.batch_size)
    feature = qv.Feature(rank=device.index or 0,
                         device_list=[device.index or 0] if device.type == "cuda" else [],
                         device_cache_size=cache, csr_topo=topo)
    feature.from_cpu_tensor(graph.x, hot_order=hot_order)
    print(f"device {device}, sampler mode {sampler.mode}, fanouts {fanouts}, "
          f"batch {args.batch_size}; feature cache {feature.cached_rows:,} of "
          f"{len(feature):,} rows on the GPU ({args.cache_order} order)")

    model = SAGE(graph.x.size(1), args.hidden, graph.num_classes, len(fanouts)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    labels = graph.y.to(device)
    eval_gen = torch.Generator().manual_seed(args.seed + 1)
    test_nodes = graph.test_idx[torch.randperm(graph.test_idx.numel(), generator=eval_gen)
                                [:args.eval_nodes]]

    history = []
    for epoch in range(1, args.epochs + 1):
        model.train()
        clock = Clock(device)
        epoch_start = time.perf_counter()
        batches = graph.train_idx[torch.randperm(graph.train_idx.numel())].split(args.batch_size)
        total_loss = 0.0
        for seeds in tqdm(batches, desc=f"epoch {epoch}", leave=False):
            t = time.perf_counter()
            n_id, batch_size, adjs = sampler.sample(seeds)
            t = clock.lap("sample", t)
            x = feature[n_id].to(device)
            t = clock.lap("gather", t)
            adjs = [adj.to(device) for adj in adjs]
            optimizer.zero_grad()
            out = model(x, adjs)
            loss = F.cross_entropy(out, labels[seeds.to(device)])
            loss.backward()
            optimizer.step()
            total_loss += float(loss.detach())
            clock.lap("model", t)
        epoch_time = time.perf_counter() - epoch_start
        accuracy = evaluate(model, sampler, feature, labels, test_nodes, args.batch_size, device)
        tot = clock.totals
        print(f"epoch {epoch}: {epoch_time:6.2f}s  (sample {tot['sample']:.2f}s, gather "
              f"{tot['gather']:.2f}s, model {tot['model']:.2f}s)  loss "
              f"{total_loss / len(batches):.3f}  test accuracy {accuracy:.3f} "
              f"(chance {1 / graph.num_classes:.3f})")
        history.append({"epoch": epoch, "time": epoch_time, **tot, "accuracy": accuracy})
    return {"history": history, "num_classes": graph.num_classes}


if __name__ == "__main__":
    main()
