"""A GraphSAGE whose forward samples and gathers with the quiver ops, exported with
torch.export and packaged by AOTInductor into a .pt2 that C++ runs
(examples/cpp/run_exported.cpp), with no Python.

    python examples/export_sage.py /tmp/sage [--size SIZE] [--device DEVICE]

writes ``/tmp/sage/model.pt2`` (seeds of any batch size) and the graph it reads
(``/tmp/sage/graph``: CSRTopo.save, the feature table and labels), trains the model for a
few batches first so that its outputs mean something, and checks that the package gives
what eager PyTorch gives for the same generator state. Then

    build/examples_cpp/run_exported /tmp/sage/model.pt2 /tmp/sage/graph --seeds 0:1024

The forward takes ``(indptr, indices, table, seeds)``: the topology's CSR, the feature rows
and the seed ids, all on one device (CPU here; a CUDA export takes CUDA tensors, with
``indices`` and ``table`` on the GPU). Sampled sizes are data-dependent: the ops' fake
kernels give them as unbacked sizes, which export and AOTInductor carry through.

To compile a training step around it (``torch.compile(step, fullgraph=True)``), turn on
dynamo's ``capture_scalar_outputs`` and ``capture_dynamic_output_shape_ops``, and tell it that
the scores are the seeds' (``torch._check(scores.size(0) == seeds.size(0))``) before a loss
compares them with labels: the op guarantees it (seeds first, each once as given), but the
compiler only sees a data-dependent size. (Inside the model that check would tie the sampled
size to export's batch symbol, which export assumes to be at least 2: the package would
then refuse a batch of one seed.)
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import List

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import option_checks  # noqa: E402  (the examples' shared option checks)

import torch_quiver_ops as qv  # noqa: E402
from torch_quiver_ops.synthetic import PRESETS, synthetic_graph  # noqa: E402


class SAGEConv(torch.nn.Module):
    """Mean aggregation by index_add, then two linear maps (PyG's SAGEConv, unrolled)."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.lin_neighbors = torch.nn.Linear(in_channels, out_channels)
        self.lin_self = torch.nn.Linear(in_channels, out_channels, bias=False)

    def forward(self, x, src, dst, num_dst: int):
        total = x.new_zeros((num_dst, x.size(1))).index_add_(0, dst, x.index_select(0, src))
        degree = x.new_zeros((num_dst,)).index_add_(0, dst, torch.ones_like(dst, dtype=x.dtype))
        mean = total / degree.clamp_min(1).unsqueeze(1)
        return self.lin_neighbors(mean) + self.lin_self(x.narrow(0, 0, num_dst))


class SampledSAGE(torch.nn.Module):
    """Seeds in, class scores of the seeds out: samples their computation graph
    (``quiver.sample_subgraph``), gathers its rows (``quiver.gather_tiered_rows``) and runs
    one SAGE layer per hop, each over the nodes and edges it still needs."""

    def __init__(self, in_channels: int, hidden: int, out_channels: int, fanouts: List[int]):
        super().__init__()
        self.fanouts = list(fanouts)
        dims = [in_channels] + [hidden] * (len(fanouts) - 1) + [out_channels]
        self.convs = torch.nn.ModuleList(SAGEConv(a, b) for a, b in zip(dims[:-1], dims[1:]))

    def forward(self, indptr, indices, table, seeds):
        node_ids, rows, cols, _, nodes_per_hop, edges_per_hop = torch.ops.quiver.sample_subgraph(
            indptr, indices, seeds, self.fanouts, False, None, None)
        x = torch.ops.quiver.gather_tiered_rows([table], None, node_ids)
        cum_nodes = nodes_per_hop.cumsum(0).tolist()
        cum_edges = edges_per_hop.cumsum(0).tolist()
        layers = len(self.convs)
        for i, conv in enumerate(self.convs):
            hop = layers - 1 - i  # the outermost hop first
            edges, targets = cum_edges[hop], cum_nodes[hop]
            # Sizes read from the op's output: tell export what the op guarantees.
            torch._check(edges >= 0)
            torch._check(edges <= rows.size(0))
            torch._check(targets >= 0)
            torch._check(targets <= x.size(0))
            # narrow rather than slicing: AOTInductor (torch 2.11) emits C++ that does not
            # compile for a slice with an unbacked bound.
            x = conv(x, rows.narrow(0, 0, edges), cols.narrow(0, 0, edges), targets)
            if i < layers - 1:
                x = F.dropout(F.relu(x), p=0.5, training=self.training)
        return x


def export(model: SampledSAGE, example_inputs: tuple, package_path: str | Path) -> str:
    """torch.export with a dynamic batch (and graph) size, packaged by AOTInductor."""
    auto = torch.export.Dim.AUTO
    batch = torch.export.Dim("batch", min=1, max=1 << 24)
    with warnings.catch_warnings():
        # torch's own deprecation, raised inside export and packaging when they pickle the
        # tree specs.
        warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
        program = torch.export.export(model.eval(), example_inputs,
                                      dynamic_shapes=({0: auto}, {0: auto}, {0: auto}, {0: batch}))
        # Checks first that the compiler builds packages this process can load (qv.aoti).
        # The feature table's width and dtype go with it: compiled kernels read the table as
        # they were built to, and examples/cpp/run_exported refuses a table of another
        # shape by them.
        rows = example_inputs[2]
        return qv.aoti.compile_and_package(program, package_path, metadata={
            "quiver.feature_input": "2",
            "quiver.feature_width": str(rows.size(1)),
            "quiver.feature_dtype": str(rows.dtype).removeprefix("torch.")})


def train_briefly(model, indptr, indices, table, labels, train_idx, batches=30, batch_size=64):
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model.train()
    for seeds in train_idx[torch.randperm(train_idx.numel())][:batches * batch_size].split(
            batch_size):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(indptr, indices, table, seeds), labels[seeds])
        loss.backward()
        optimizer.step()
    return model.eval()


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", help="where model.pt2 and graph/ are written (made if "
                                          "missing)")
    parser.add_argument("--size", default="tiny", choices=sorted(PRESETS),
                        help="the synthetic graph exported with the model (default: tiny)")
    parser.add_argument("--device", default="cpu",
                        help="where the package runs: cpu, a CUDA device such as cuda:0, or "
                             "auto (the GPU when there is one and the CUDA kernels were built, "
                             "else the CPU) (default: cpu)")
    parser.add_argument("--fanouts", default="10,5",
                        help="neighbors sampled per hop, comma separated, the seeds' hop "
                             "first; -1 takes every neighbor (default: 10,5)")
    parser.add_argument("--hidden", type=int, default=64,
                        help="the hidden layer's width (default: 64)")
    parser.add_argument("--seed", type=option_checks.seed, default=0,
                        help="seeds the graph and the training (default: 0)")
    args = parser.parse_args(argv)
    # Checked here, before any file is written.
    args.fanouts = option_checks.fanout_list(parser, args.fanouts)
    option_checks.at_least(parser, args, ["hidden"], 1)
    option_checks.at_most(parser, args, ["hidden"], option_checks.MAX_HIDDEN)
    option_checks.device_option(parser, args.device, auto=True)
    option_checks.graph_fits(parser, args.size)  # (drawn on the CPU)
    if args.device == "auto":
        args.device = "cuda" if option_checks.cuda_usable() else "cpu"
    if not args.directory:  # Path("") is the current directory: written into unasked
        parser.error("directory must not be empty")
    directory = Path(args.directory)
    if directory.exists() and not directory.is_dir():
        parser.error(f"directory {args.directory} exists and is not a directory")
    # The nearest part of it that exists must be a directory for the rest to be made in.
    existing = next((p for p in directory.resolve().parents if p.exists()), None)
    if not directory.exists() and existing is not None and not existing.is_dir():
        parser.error(f"directory {args.directory}: {existing} is not a directory")
    # Each output where it can be written: found after the training and the compile, these
    # ended in tracebacks a minute in.
    if (directory / "model.pt2").is_dir():
        parser.error(f"{directory / 'model.pt2'} is a folder: the package is written as "
                     f"that file")
    for part in ("graph", "graph/topology", "graph/features", "graph/labels"):
        if (directory / part).exists() and not (directory / part).is_dir():
            parser.error(f"{directory / part} exists and is not a directory")
    writable = directory if directory.exists() else existing
    try:  # a folder made and removed there answers for root too (access() lets it anywhere)
        os.rmdir(tempfile.mkdtemp(dir=writable))
    except OSError as error:
        parser.error(f"directory {args.directory}: nothing can be written in {writable} "
                     f"({error.strerror})")
    return args


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    directory = Path(args.directory)
    torch.manual_seed(args.seed)

    graph = synthetic_graph(args.size, seed=args.seed)
    topo = qv.CSRTopo(graph.edge_index, num_nodes=graph.num_nodes)
    topo.save(directory / "graph" / "topology")
    qv.save_arrays(directory / "graph" / "features", "feature", {"rows": graph.x})
    qv.save_arrays(directory / "graph" / "labels", "labels",
                   {"y": graph.y, "train_idx": graph.train_idx, "test_idx": graph.test_idx},
                   num_classes=graph.num_classes)
    indptr, indices, table = (t.to(device) for t in (topo.indptr, topo.indices, graph.x))
    labels = graph.y.to(device)
    model = SampledSAGE(graph.x.size(1), args.hidden, graph.num_classes, args.fanouts).to(device)
    train_briefly(model, indptr, indices, table, labels, graph.train_idx.to(device))

    seeds = graph.test_idx[:256].to(device)
    start = time.perf_counter()
    path = export(model, (indptr, indices, table, seeds), directory / "model.pt2")
    print(f"exported and packaged {path} in {time.perf_counter() - start:.0f}s")
    package = qv.aoti.load_package(path)
    with torch.no_grad():
        torch.manual_seed(7)
        eager = model(indptr, indices, table, seeds)
        torch.manual_seed(7)
        packaged = package(indptr, indices, table, seeds)
    torch.testing.assert_close(packaged, eager)
    accuracy = float((packaged.argmax(1) == labels[seeds]).float().mean())
    print(f"the package gives eager's outputs for the same seed; accuracy on {seeds.numel()} "
          f"test nodes {accuracy:.3f} (chance {1 / graph.num_classes:.3f})")
    return {"model": model, "package": path, "inputs": (indptr, indices, table),
            "labels": labels, "num_classes": graph.num_classes}


if __name__ == "__main__":
    option_checks.run_main(main)
