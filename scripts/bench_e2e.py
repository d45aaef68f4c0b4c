"""GraphSAGE epochs end to end: the data path hidden behind the model, or not.

    python scripts/bench_e2e.py [--graph products] [--json out.json]
    python scripts/bench_e2e.py --scaling 1,2,4 [--json out.json]     # torchrun, N GPUs

3 x SAGEConv (in-256-256-classes), fanouts [15, 10, 5], batch 1024, the products-like
graph's train nodes (one epoch = every train seed once). Each configuration runs a warm-up
epoch, then a plain timed epoch, then (configurations with an in-line data path) a
synchronized epoch split into sampling, gathering and model. In one run:

  1. our prefetching loader (SampleLoader, 2 batches ahead on a side stream, its gathers
     of host rows on 12 blocks of 1024 threads, and on every block: "all blocks"; with
     ``--green-sms``, also on a green context of that many SMs, the model on the rest or
     on all; with ``--loader-workers N``, N batches built at once), GPU and UVA
     sampling, 20% of the feature rows cached in HBM (presampled order), the other rows
     read with zero copy by the SMs or staged by CPU threads and the copy engine
     (``Feature(host_reads=...)``; rows named "staged");
  2. the same loop in line (prefetch 0);
  3. PyG's NeighborLoader on our sampler and stores (torch_quiver_ops.pyg, a Data with a
     20% cache, degree order), alone, and with and without the Prefetcher (with
     ``--green-sms`` also on green contexts) under three
     models: PyG's usual one over the whole sampled subgraph, the same with
     ``trim_to_layer``, and one that also computes only each layer's targets (the work of
     the torch-quiver loop's model, so the loaders compare on equal terms);
  4. every feature row in HBM;
  5. our CPU sampler + CPU gather (index_select) + ``.to('cuda')``: what a PyG CPU
     pipeline does (PyG's own NeighborLoader cannot sample here: no pyg-lib, no
     torch-sparse on this machine).

The model alone (synchronized, over 24 batches sampled beforehand, the median of three
passes) is the bound a hidden data path approaches. It drifts within a run, so each
prefetching epoch also runs between two runs of it as long as an epoch (its steps going
round the same 24 batches), and its ratio to their mean is the "vs beside" column.
``--both-loader-threads`` runs each prefetching epoch with its batches built by the
loader's Python thread and by its C++ one (by default the loader picks: the C++ thread on
a GPU). ``--compile-model`` runs the loop's model in every row, that one included, under
torch.compile (PyG's models stay eager). ``--graphed-model`` instead replays the loop's
training step as one CUDA graph on padded batches (``torch_quiver_ops.GraphedStep``, shapes
from the model alone's 24 batches; the CPU pipeline's model stays eager).
``--scaling 1,2,4`` launches ``examples/train_sage.py`` under torchrun on 1, 2 and 4 GPUs
with both cache policies and reports throughput (train seeds per second of epochs after
the first) against one GPU. ``--cpp build/.../train_sage`` also times the
libtorch training program (examples/cpp) on the same graph, saved as Python saves it;
``--compile`` times examples/export_sage.py's model (sampling, gathering and GraphSAGE in
one forward) eager, under torch.compile and as an AOTInductor package. Prints tables; ``--json`` writes every number.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.nn import SAGEConv
from torch_geometric.utils import trim_to_layer

import torch_quiver_ops as qv
from torch_quiver_ops import _cli
from torch_quiver_ops.synthetic import PRESETS, synthetic_graph

REPO = Path(__file__).resolve().parents[1]
# s per epoch, H100; either way of reading host rows may meet them
TARGETS = {"prefetch GPU 20%": 1.0, "prefetch GPU 20% staged": 1.0,
           "pyg loader + prefetch, targets GPU": 1.3,
           "pyg loader + prefetch, targets GPU staged": 1.3}


# Graphs too large for an edge_index, with what an epoch of them means: papers100M's own
# training split (1,207,179 seeds, 1,179 batches of 1024), not the preset's 8%.
LARGE_GRAPHS = {"papers": {"train_seeds": 1_207_179, "feature_dtype": "bfloat16"}}


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # torch.compile looks a module's classes up by its name
    spec.loader.exec_module(module)
    return module


class PygSAGE(torch.nn.Module):
    """GraphSAGE over a NeighborLoader batch, three ways: ``"full"``, PyG's usual model,
    every layer over the whole sampled subgraph; ``"trim"``, with ``trim_to_layer`` (each
    layer drops the hops the next ones no longer need); ``"targets"``, trimmed and each layer
    computing only its targets (the nodes within the remaining hops), the same work as the
    torch-quiver loop's layers over ``adjs``."""

    def __init__(self, in_channels, hidden, out_channels, num_layers, variant):
        super().__init__()
        dims = [in_channels] + [hidden] * (num_layers - 1) + [out_channels]
        self.convs = torch.nn.ModuleList(SAGEConv(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.variant = variant

    def forward(self, x, edge_index, num_sampled_nodes=None, num_sampled_edges=None):
        if x.dtype in (torch.float16, torch.bfloat16):  # stored rows train in f32 (FloatInput)
            x = x.float()
        layers = len(self.convs)
        for i, conv in enumerate(self.convs):
            if self.variant == "trim":
                x, edge_index, _ = trim_to_layer(i, num_sampled_nodes, num_sampled_edges, x,
                                                 edge_index)
            if self.variant == "targets":  # x holds hops 0..layers-i; edges come hop by hop
                edge_index = edge_index[:, :sum(num_sampled_edges[:layers - i])]
                x = conv((x, x[:sum(num_sampled_nodes[:layers - i])]), edge_index)
            else:
                x = conv(x, edge_index)
            if i < layers - 1:
                x = F.dropout(x.relu(), p=0.5, training=self.training)
        return x


class FloatInput(torch.nn.Module):
    """A model fed 16-bit feature rows (a table stored in bf16 to halve its bytes) that
    trains in float32: the rows are widened on the GPU, after the gather."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x, adjs):
        return self.model(x.float(), adjs)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_step(model, optimizer, forward, y):
    optimizer.zero_grad()
    out = forward(model)
    loss = F.cross_entropy(out, y)
    loss.backward()
    optimizer.step()
    return loss


def loop_step(model, optimizer, batch):
    """The loop's training step on a loader batch: eager (or compiled), or a GraphedStep's
    replay (``model`` is then the GraphedStep, ``optimizer`` None)."""
    if isinstance(model, qv.GraphedStep):
        return model(batch)
    _, _, adjs, x, y = batch
    return train_step(model, optimizer, lambda m: m(x, adjs), y)


def quiver_epoch(loader, model, optimizer, device, clock=None, after_step=None):
    """One epoch of the torch-quiver-style loop; with ``clock``, in line and split;
    ``after_step()`` is called after each step is queued."""
    loader.timer = clock
    sync(device)
    start = time.perf_counter()
    for batch in loader:
        t = time.perf_counter()
        loop_step(model, optimizer, batch)
        if clock:
            clock.lap("model", t)
        if after_step:
            after_step()
    sync(device)
    loader.timer = None
    return time.perf_counter() - start


def pyg_epoch(batches, model, optimizer, device):
    sync(device)
    start = time.perf_counter()
    for batch in batches:
        batch = batch.to(device)
        size = batch.batch_size
        train_step(model, optimizer,
                   lambda m: m(batch.x, batch.edge_index, batch.num_sampled_nodes,
                               batch.num_sampled_edges)[:size], batch.y[:size])
    sync(device)
    return time.perf_counter() - start


def cpu_pipeline_epoch(sampler, x, labels, seeds, batch_size, model, optimizer, device,
                       clock=None):
    """CPU sampling, CPU row gather, one copy of the batch to the GPU: PyG's CPU path."""
    sync(device)
    start = time.perf_counter()
    order = seeds[torch.randperm(seeds.numel())]
    for batch in order.split(batch_size):
        t = time.perf_counter()
        n_id, size, adjs = sampler.sample(batch)
        if clock:
            t = clock.lap("sample", t)
        rows = x.index_select(0, n_id).pin_memory().to(device, non_blocking=True)
        adjs = [adj.to(device, non_blocking=True) for adj in adjs]
        y = labels[batch].to(device, non_blocking=True)
        if clock:
            t = clock.lap("gather", t)
        train_step(model, optimizer, lambda m: m(rows, adjs), y)
        if clock:
            clock.lap("model", t)
    sync(device)
    return time.perf_counter() - start


def loader_epoch(loader, device):
    """Seconds of one epoch of the loader alone: its batches built, no model."""
    sync(device)
    start = time.perf_counter()
    for _ in loader:
        pass
    sync(device)
    return time.perf_counter() - start


def model_alone(model, optimizer, batches, device, steps=None):
    """Seconds per batch of the training step alone, on batches built beforehand: one pass
    over them, or ``steps`` steps going round them."""
    steps = steps or len(batches)
    sync(device)
    start = time.perf_counter()
    for step in range(steps):
        loop_step(model, optimizer, batches[step % len(batches)])
    sync(device)
    return (time.perf_counter() - start) / steps


# --model-streams: where the loop's steps queue their kernels, and the rows' name suffixes.
MODEL_STREAM_NAMES = {"default": "", "default-kept": " on the default stream",
                      "normal": " on a new stream", "high": " on a high-priority stream"}


@contextlib.contextmanager
def model_stream(device, where):
    """The loop run from the default stream ("default": a prefetching SampleLoader then
    runs the steps on a stream of its own; "default-kept": with its ``own_stream`` off, on
    the default stream itself), or from a new stream of the lowest priority, as the
    loader's side stream ("normal"), or of the device's greatest ("high": the block
    scheduler then starts the model's blocks before the loader's pending ones)."""
    if where in ("default", "default-kept") or device.type != "cuda":
        yield
        return
    sync(device)
    with torch.cuda.stream(torch.cuda.Stream(device, priority=-100 if where == "high"
                                             else 0)):
        yield
    sync(device)


def green_rows(args, device, sampler, feature, train, labels, record_beside, name):
    """The prefetching loader's kernels on SMs of their own (green contexts), so that they
    never queue behind the model's: the loader alone on N SMs, or the model on the rest
    too (its model-alone runs beside the epoch then on the rest as well)."""
    total = torch.cuda.get_device_properties(device).multi_processor_count
    for sms in (int(s) for s in args.green_sms.split(",")):
        for split_model in (False, True):
            label = f"prefetch GPU {name} green {sms}{' + model rest' if split_model else ''}"
            try:
                model_stream = contextlib.nullcontext()
                if split_model:
                    stream, model_context = qv.loader.green_context_stream(total - sms, device)
                    model_stream = torch.cuda.stream(stream)
                with model_stream:
                    record_beside(label, qv.SampleLoader(sampler, feature, train,
                                                         args.batch_size, labels=labels,
                                                         prefetch=2, prefetch_sms=sms))
            except Exception as error:  # an experiment: report and go on
                print(f"   {label}: failed: {type(error).__name__}: {error}", flush=True)


def build_graph(name, device, train_seeds=None, feature_dtype=None):
    """The preset graph ``name`` on the CPU: features, CSRTopo, edge_index (None for a
    large graph), labels, train and test ids, and the class count.

    A papers-sized graph is drawn as a CSR on the GPU with bf16 features (an int64
    edge_index alone would be 26 GB, f32 features 57 GB), and its epoch is papers100M's
    own training split; the configurations that need an edge_index (PyG's loader, the C++
    program) are skipped for it."""
    large = name in LARGE_GRAPHS
    overrides = {}
    train_seeds = train_seeds or LARGE_GRAPHS.get(name, {}).get("train_seeds")
    if train_seeds:
        overrides["train_fraction"] = train_seeds / PRESETS[name].num_nodes
    dtype = getattr(torch, feature_dtype or LARGE_GRAPHS.get(name, {}).get(
        "feature_dtype", "float32"))
    graph = synthetic_graph(name, device=device if device.type == "cuda" else None, csr=large,
                            feature_dtype=dtype, **overrides)
    edge_index = None if large else graph.edge_index.cpu()
    return (graph.x.cpu(), graph.topology(), edge_index, graph.y, graph.train_idx.cpu(),
            graph.test_idx.cpu(), graph.num_classes)


def single_gpu(args, results):
    device = torch.device(args.device) if args.device else torch.device(
        "cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    cuda = device.type == "cuda"
    fanouts = [int(f) for f in args.fanouts.split(",")]
    torch.manual_seed(0)
    start = time.perf_counter()
    large = args.graph in LARGE_GRAPHS
    x, topo, edge_index, labels, train, graph_test, num_classes = build_graph(
        args.graph, device, args.train_seeds, args.feature_dtype)
    labels = labels.to(device)
    num_features = x.size(1)
    num_batches = (train.numel() + args.batch_size - 1) // args.batch_size
    print(f"== {args.graph}: {x.size(0):,} nodes, {topo.edge_count:,} edges, "
          f"{tuple(x.shape)} {x.dtype} features ({x.nbytes / 1e9:.1f} GB), {train.numel():,} "
          f"train seeds = {num_batches} batches of {args.batch_size}; built in "
          f"{time.perf_counter() - start:.0f}s on {device}", flush=True)
    results.update(device=torch.cuda.get_device_name(device) if cuda else "cpu",
                   model=("torch.compile(dynamic=True) (PyG's models eager)"
                          if args.compile_model else
                          "GraphedStep (CUDA graph, padded batches)" if args.graphed_model and cuda
                          else "eager"),
                   graph=args.graph, batches=num_batches, fanouts=fanouts,
                   batch_size=args.batch_size, rows=[])
    train_sage = load_example("train_sage")
    sage, Clock = train_sage.SAGE, train_sage.Clock  # the main job's model and phase clock

    def fresh_model(shapes_from=None):
        """The loop's model and optimizer; with ``--graphed-model`` and ``shapes_from`` (some
        batches), a GraphedStep of them and None."""
        torch.manual_seed(1)
        model = sage(num_features, args.hidden, num_classes, len(fanouts)).to(device)
        if x.dtype != torch.float32:  # 16-bit features are stored, the model trains in f32
            model = FloatInput(model)
        if args.graphed_model and cuda and shapes_from is not None:
            optimizer = torch.optim.Adam(model.parameters(), lr=0.003, capturable=True)
            return qv.GraphedStep(model, optimizer, shapes_from), None
        optimizer = torch.optim.Adam(model.parameters(), lr=0.003,
                                     fused=args.fused_adam and cuda)
        if args.compile_model:  # fewer, fused kernels and no Python per layer in the step
            model = torch.compile(model, dynamic=True)
        return model, optimizer

    def record(name, epoch, split=None, note="", beside=None):
        target = TARGETS.get(name.removesuffix(" Python thread").removesuffix(" C++ thread"))
        row = {"config": name, "epoch_s": epoch, "split": split or {},
               "ms_per_batch": 1e3 * epoch / num_batches, "target_s": target,
               "note": note, "model_alone_beside_s": beside}
        results["rows"].append(row)
        parts = ", ".join(f"{k} {v:.2f}" for k, v in (split or {}).items())
        print(f"   {name:<30} epoch {epoch:6.2f} s  {row['ms_per_batch']:6.2f} ms/batch"
              + (f"  ({parts})" if parts else "") + (f"  {note}" if note else ""), flush=True)

    modes = args.modes.split(",") if cuda else ["CPU"]
    host_reads = args.host_reads.split(",") if cuda else ["zero_copy"]
    model_bound = None
    built = None  # 24 batches for the model alone
    # What builds the prefetching loader's batches: its default choice, or both threads.
    loader_threads = ([(" Python thread", False), (" C++ thread", True)]
                      if args.both_loader_threads else [("", None)])
    hot_gpu = None
    for mode in modes:
        # "UVA+20%": UVA sampling with that share of the topology cached in HBM, the lists
        # chosen by presampling (as the README shows).
        mode, _, topology_cache = mode.partition("+")
        sampler = qv.GraphSageSampler(topo, fanouts, device=device, mode=mode)
        if topology_cache:
            order = qv.presample_topology_order(sampler, train, args.batch_size,
                                                generator=torch.Generator().manual_seed(4))
            sampler = qv.GraphSageSampler(topo, fanouts, device=device, mode=mode,
                                          topology_cache=topology_cache, hot_order=order)
            mode = f"{mode}+{topology_cache}"
        hot = qv.presample_hot_order(sampler, train, args.batch_size,
                                     generator=torch.Generator().manual_seed(2))
        hot_gpu = hot if hot_gpu is None else hot_gpu
        # Rows named by the cache they ran with ("20%", the default, in earlier logs).
        cached = args.cache if cuda else "no cache"
        caches = [(f"{cached}{'' if reads == 'zero_copy' else ' ' + reads}", args.cache, reads,
                   None, True) for reads in host_reads]
        # Staged host reads with the GPU's share fixed (learned, balanced, otherwise).
        caches += [(f"{cached} staged share {share:g}", args.cache, "staged", share, True)
                   for share in args.host_read_shares if cuda]
        # Staged host reads learned but deaf to the loader's pace (Feature.host_read_pace).
        caches += [(f"{cached} staged unpaced", args.cache, "staged", None, False)] \
            if args.unpaced and cuda else []
        caches += [("HBM", "100%", "zero_copy", None, True)] if cuda and mode == "GPU" else []
        for cache_name, cache, reads, share, paced in caches:
            feature = qv.Feature(device_list=[device.index] if cuda else [],
                                 device_cache_size=cache if cuda else 0, csr_topo=topo,
                                 host_reads=reads)
            feature.from_cpu_tensor(x, hot_order=hot)
            feature.host_read_share = share
            feature.host_read_pace = paced
            if built is None:  # the model alone's batches, built once, before any epoch
                some = train[torch.randperm(train.numel(),
                                            generator=torch.Generator().manual_seed(3))]
                built = list(qv.SampleLoader(sampler, feature, some[:args.batch_size * 24],
                                             args.batch_size, labels=labels, prefetch=0))
            model, optimizer = fresh_model(built)

            def record_beside(name, loader):
                """``record_epoch_beside`` once per ``--model-streams`` entry, in turns
                (the default: once, the loop on the default stream, as users run it)."""
                for where in args.model_streams if cuda else ["default"]:
                    loader.own_stream = where != "default-kept"
                    with model_stream(device, where):
                        record_epoch_beside(name + MODEL_STREAM_NAMES[where], loader)
                loader.own_stream = True

            def record_epoch_beside(name, loader):
                """A prefetching epoch between two runs of the model alone as long as an
                epoch (as many steps), so that the step's drift within the run, tens of
                percent over seconds, hits the epoch and its bound alike."""
                quiver_epoch(loader, model, optimizer, device)  # warm-up
                before = model_alone(model, optimizer, built, device, num_batches) * num_batches
                shares = []  # the GPU's share of staged host rows, read after each step
                read_share = None
                if reads == "staged" and cuda:
                    read_share = lambda: shares.append(feature.current_host_read_share())  # noqa: E731
                epoch = quiver_epoch(loader, model, optimizer, device, after_step=read_share)
                after = model_alone(model, optimizer, built, device, num_batches) * num_batches
                thread = "C++" if loader.prefetch_in_cpp else "Python"
                over_epoch = (f"; GPU's share of host rows over the epoch {min(shares):.2f}-"
                              f"{max(shares):.2f}, mean {sum(shares) / len(shares):.2f}"
                              if shares else "")
                record(name, epoch, beside=(before + after) / 2,
                       note=f"({thread} thread; model alone beside it {before:.2f}, "
                            f"{after:.2f} s{over_epoch})")

            for prefetch in (2, 0):
                loader = qv.SampleLoader(sampler, feature, train, args.batch_size,
                                         labels=labels, prefetch=prefetch)
                name = f"{'prefetch' if prefetch else 'in line'} {mode} {cache_name}"
                if prefetch:
                    for thread, in_cpp in loader_threads:
                        record_beside(f"{name}{thread}", qv.SampleLoader(
                            sampler, feature, train, args.batch_size, labels=labels,
                            prefetch=prefetch, prefetch_in_cpp=in_cpp))
                    if reads == "staged" and cuda:
                        how = ("fixed" if share is not None else
                               "learned" if paced else "learned, unpaced")
                        print(f"   {name}: the GPU's share of staged host rows after the "
                              f"epochs beside the model: {feature.current_host_read_share():.3f}"
                              f" ({how})", flush=True)
                    loader_epoch(loader, device)  # warm-up
                    record(f"{name} loader alone", loader_epoch(loader, device),
                           note="(batches built, no model)")
                    if cuda and cache != "100%" and not args.no_all_blocks:
                        # the same, host rows read on every block
                        record_beside(f"{name} all blocks", qv.SampleLoader(
                            sampler, feature, train, args.batch_size, labels=labels,
                            prefetch=prefetch, prefetch_host_read_blocks=0))
                    for workers in args.loader_workers:  # several batches built at once
                        record_beside(f"{name} {workers} workers", qv.SampleLoader(
                            sampler, feature, train, args.batch_size, labels=labels,
                            prefetch=max(2, workers), workers=workers))
                else:
                    quiver_epoch(loader, model, optimizer, device)  # warm-up
                    plain = quiver_epoch(loader, model, optimizer, device)
                    clock = Clock(device)
                    quiver_epoch(loader, model, optimizer, device, clock)
                    record(name, plain, clock.totals)
            if args.green_sms and cuda and mode == "GPU" and cache_name.startswith(cached):
                green_rows(args, device, sampler, feature, train, labels, record_beside,
                           cache_name)
            if model_bound is None:
                model_alone(model, optimizer, built[:4], device)
                # The step's time drifts by up to 30% within a run: the median of three
                # passes, each pass shown (and each prefetching epoch has its own, beside it).
                passes = [model_alone(model, optimizer, built, device) * num_batches
                          for _ in range(3)]
                model_bound = sorted(passes)[1]
                record("model alone", model_bound,
                       note="(bound: batches built beforehand; median of passes "
                            + ", ".join(f"{p:.2f}" for p in passes) + " s)")
            del feature, model, optimizer, loader
            if cuda:
                torch.cuda.empty_cache()
    del built

    if large:
        print(f"   (PyG's loader, the C++ program and the CPU pipeline are not run on "
              f"'{args.graph}': they need its edge_index)", flush=True)
        print_table(results)
        return
    # PyG's NeighborLoader on our sampler and stores, as examples/pyg_neighbor_loader.py.
    data = Data(x=x, edge_index=edge_index, y=labels.cpu(), num_nodes=x.size(0))
    pyg_modes = [mode for mode in modes if "+" not in mode]
    for mode, reads in [(mode, reads) for mode in pyg_modes for reads in host_reads]:
        loader = qv.pyg.NeighborLoader(data, input_nodes=train, num_neighbors=fanouts,
                                       batch_size=args.batch_size, shuffle=True, device=device,
                                       mode=mode, cache_size=args.cache if cuda else 0,
                                       host_reads=reads)
        mode = mode if reads == "zero_copy" else f"{mode} {reads}"  # names of the rows
        sync(device)
        start = time.perf_counter()
        for batch in loader:
            pass
        sync(device)
        record(f"pyg loader alone {mode}", time.perf_counter() - start,
               note="(batches built, no model)")
        built = []
        for batch in loader:
            built.append(batch)
            if len(built) == 24:
                break
        for variant in [m for m in args.pyg_models.split(",") if m]:
            torch.manual_seed(1)
            model = PygSAGE(num_features, args.hidden, num_classes, len(fanouts),
                            variant).to(device)
            optimizer = torch.optim.Adam(model.parameters(), lr=0.003,
                                         fused=args.fused_adam and cuda)
            pyg_epoch(built[:4], model, optimizer, device)
            alone = pyg_epoch(built, model, optimizer, device) / len(built) * num_batches
            pyg_epoch(qv.Prefetcher(loader, device), model, optimizer, device)  # warm-up
            ahead = pyg_epoch(qv.Prefetcher(loader, device), model, optimizer, device)
            in_line = pyg_epoch(loader, model, optimizer, device)
            record(f"pyg loader + prefetch, {variant} {mode}", ahead,
                   note=f"(model alone {alone:.2f} s)")
            record(f"pyg loader, {variant} {mode}", in_line)
            for sms in [int(s) for s in args.green_sms.split(",") if s] if cuda else []:
                label = f"pyg loader + prefetch green {sms}, {variant} {mode}"
                try:  # an experiment, as green_rows: report and go on
                    pyg_epoch(qv.Prefetcher(loader, device, sms=sms), model, optimizer,
                              device)  # warm-up
                    record(label, pyg_epoch(qv.Prefetcher(loader, device, sms=sms), model,
                                            optimizer, device))
                except Exception as error:
                    print(f"   {label}: failed: {type(error).__name__}: {error}", flush=True)
        del loader, built
        qv.pyg._SHARED.clear()
        if cuda:
            torch.cuda.empty_cache()

    if args.cpp:  # examples/cpp/train_sage on the same graph, beside the Python loop
        cpp_rows(args, x, topo, train, graph_test, labels, num_classes, hot_gpu,
                 record)

    if cuda and not args.no_cpu_pipeline:  # what a PyG CPU pipeline does, on our CPU sampler
        sampler = qv.GraphSageSampler(topo, fanouts, device="cpu", mode="CPU")
        model, optimizer = fresh_model()
        cpu_pipeline_epoch(sampler, x, labels, train[:args.batch_size * 8], args.batch_size,
                           model, optimizer, device)
        plain = cpu_pipeline_epoch(sampler, x, labels, train, args.batch_size, model,
                                   optimizer, device)
        clock = Clock(device)
        cpu_pipeline_epoch(sampler, x, labels, train, args.batch_size, model, optimizer,
                           device, clock)
        record("CPU sample + gather + .to(cuda)", plain, clock.totals,
               note=f"({torch.get_num_threads()} threads)")
    print_table(results)


def cpp_rows(args, x, topo, train, test, labels, num_classes, hot, record):
    """The libtorch program (examples/cpp/train_sage, built beforehand) on this graph, saved
    as Python saves it, in GPU mode with the same cache share and hot order: the mean of its
    epochs after the first, in line and without synchronization inside the epoch, beside the
    Python loop's "in line" row."""
    directory = Path(tempfile.mkdtemp(prefix="quiver-e2e-cpp-", dir="/dev/shm"))
    try:
        topo.save(directory / "topology")
        qv.Feature(device_list=[]).from_cpu_tensor(x, hot_order=hot).save(directory / "features")
        qv.save_arrays(directory / "labels", "labels",
                       {"y": labels.cpu(), "train_idx": train, "test_idx": test},
                       num_classes=num_classes)
        cache = float(args.cache.rstrip("%")) / 100 if args.cache.endswith("%") else 0.2
        for split in (0, 1):
            mode = "GPU" if torch.cuda.is_available() else "CPU"
            done = subprocess.run([args.cpp, "--data", str(directory), "--mode", mode,
                                   "--epochs", "3", "--cache", str(cache), "--hidden",
                                   str(args.hidden), "--split", str(split)],
                                  capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                print(done.stdout[-2000:], done.stderr[-2000:])
                raise SystemExit("examples/cpp/train_sage failed")
            epochs = [line for line in done.stdout.splitlines() if line.startswith("epoch ")]
            times = [float(line.split(":")[1].split("s")[0]) for line in epochs]
            epoch = sum(times[1:]) / len(times[1:])
            name = f"C++ in line {mode} 20%" + (", synchronized" if split else "")
            accuracy = epochs[-1].split("test accuracy")[1].split()[0]
            record(name, epoch, note=f"(libtorch program; test accuracy {accuracy})")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def compile_speed(args, results):
    """examples/export_sage.py's model (it samples, gathers and runs GraphSAGE in its forward)
    on this graph, everything in the GPU's memory: a training step eager against
    torch.compile(fullgraph=True), and inference eager against the AOTInductor package."""
    device = torch.device(args.device) if args.device else torch.device(
        "cuda" if torch.cuda.is_available() else "cpu")
    example = load_example("export_sage")
    fanouts = [int(f) for f in args.fanouts.split(",")]
    graph = synthetic_graph(args.graph, device=device if device.type == "cuda" else None)
    topo = qv.CSRTopo(graph.edge_index.cpu(), num_nodes=graph.num_nodes)
    inputs = (topo.indptr.to(device), topo.indices.to(device), graph.x.to(device))
    labels = graph.y.to(device)
    order = graph.train_idx[torch.randperm(graph.train_idx.numel())].to(device)
    batches = list(order.split(args.batch_size))[:60]
    batches = [b for b in batches if b.numel() == args.batch_size]
    torch.manual_seed(1)
    model = example.SampledSAGE(graph.x.size(1), args.hidden, graph.num_classes,
                                fanouts).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.003,
                                 fused=args.fused_adam and device.type == "cuda")

    def loss_of(indptr, indices, table, seeds):
        scores = model(indptr, indices, table, seeds)
        torch._check(scores.size(0) == seeds.size(0))
        return F.cross_entropy(scores, labels[seeds])

    def timed(run, warmup=5):
        for seeds in batches[:warmup]:
            run(seeds)
        sync(device)
        start = time.perf_counter()
        for seeds in batches[warmup:]:
            run(seeds)
        sync(device)
        return 1e3 * (time.perf_counter() - start) / len(batches[warmup:])

    def train_with(loss_fn):
        def run(seeds):
            optimizer.zero_grad()
            loss_fn(*inputs, seeds).backward()
            optimizer.step()
        return run

    rows = []
    model.train()
    rows.append(("training step, eager", timed(train_with(loss_of))))
    with torch._dynamo.config.patch(capture_scalar_outputs=True,
                                    capture_dynamic_output_shape_ops=True):
        compiled = torch.compile(loss_of, fullgraph=True, dynamic=True)
        start = time.perf_counter()
        train_with(compiled)(batches[0])
        compile_s = time.perf_counter() - start
        rows.append(("training step, torch.compile", timed(train_with(compiled))))
    model.eval()
    with torch.no_grad():
        rows.append(("inference, eager", timed(lambda seeds: model(*inputs, seeds))))
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        path = example.export(model, (*inputs, batches[0]), Path(tmp) / "model.pt2")
        export_s = time.perf_counter() - start
        package = torch._inductor.aoti_load_package(path)
        with torch.no_grad():
            rows.append(("inference, AOTInductor package", timed(lambda seeds: package(*inputs,
                                                                                        seeds))))
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"\nSampling + gathering + GraphSAGE in one module on {name}, '{args.graph}' graph, "
          f"batch {args.batch_size}, fanouts {fanouts}, every table in {device.type} memory "
          f"(compile {compile_s:.0f}s, export + package {export_s:.0f}s)")
    print(f"{'path':<34} {'ms/batch':>9}")
    for label, ms in rows:
        print(f"{label:<34} {ms:9.2f}")
    results["compile"] = {"device": name, "graph": args.graph, "compile_s": compile_s,
                          "export_s": export_s, "rows": [{"path": p, "ms_per_batch": ms}
                                                         for p, ms in rows]}


def print_table(results):
    print(f"\nGraphSAGE epoch on {results['device']}, '{results['graph']}' graph, "
          f"{results['batches']} batches of {results['batch_size']}, fanouts {results['fanouts']}, "
          f"model {results.get('model', 'eager')}")
    print(f"{'configuration':<32} {'epoch s':>8} {'ms/batch':>9} {'sample':>7} {'gather':>7} "
          f"{'model':>7} {'vs model':>9} {'vs beside':>10} {'target':>7}")
    print(f"{'':<75}{'(median)':>9} {'(own)':>10}")
    bound = next((r["epoch_s"] for r in results["rows"] if r["config"] == "model alone"), None)
    for row in results["rows"]:
        split = row["split"]
        cell = lambda k: f"{split[k]:7.2f}" if k in split else f"{'':>7}"  # noqa: E731
        ratio = f"{row['epoch_s'] / bound:8.2f}x" if bound else f"{'':>9}"
        beside = row.get("model_alone_beside_s")
        own = f"{row['epoch_s'] / beside:9.2f}x" if beside else f"{'':>10}"
        target = f"{row['target_s']:7.2f}" if row["target_s"] else f"{'':>7}"
        print(f"{row['config']:<32} {row['epoch_s']:8.2f} {row['ms_per_batch']:9.2f} "
              f"{cell('sample')} {cell('gather')} {cell('model')} {ratio} {own} {target}")


def plot_epochs(results, path):
    """Each configuration's epoch as a bar, split into sampling, gathering and model where
    it ran in line, beside a line at the model alone."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = results["rows"]
    bound = next((r["epoch_s"] for r in rows if r["config"] == "model alone"), None)
    fig, ax = plt.subplots(figsize=(9, 0.34 * len(rows) + 2.0))
    colors = {"sample": "tab:orange", "gather": "tab:green", "model": "tab:blue"}
    labelled = set()
    for y, row in enumerate(rows):
        split = row["split"]
        if split:
            left = 0.0
            for phase in ("sample", "gather", "model"):
                width = split.get(phase, 0.0)
                ax.barh(y, width, left=left, color=colors[phase],
                        label=None if phase in labelled else f"in line: {phase}")
                labelled.add(phase)
                left += width
        else:
            alone = "alone" in row["config"]
            ax.barh(y, row["epoch_s"], color="lightgray" if alone else "tab:purple",
                    label=None if alone in labelled else
                    ("alone (no model, or no loader)" if alone else "prefetching epoch"))
            labelled.add(alone)
        beside = row.get("model_alone_beside_s")
        ratio = (f"  {row['epoch_s'] / beside:.2f}x its own model alone" if beside else
                 f"  {row['epoch_s'] / bound:.2f}x" if bound else "")
        split_s = f" (split {sum(split.values()):.2f} s, synchronized)" if split else ""
        ax.text(max(row["epoch_s"], sum(split.values())), y,
                f" {row['epoch_s']:.2f} s{ratio}{split_s}", va="center", fontsize=7)
    if bound:
        ax.axvline(bound, color="black", linestyle="--", linewidth=1, label="model alone")
    ax.set_yticks(range(len(rows)), [r["config"] for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("seconds per epoch")
    ax.set_xlim(0, max(max(r["epoch_s"], sum(r["split"].values())) for r in rows) * 1.55)
    ax.set_title(f"GraphSAGE epoch, '{results['graph']}', {results['batches']} batches of "
                 f"{results['batch_size']}, {results['device']}", fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


def plot_runs(runs, path):
    """Several runs' prefetching epochs and model alone side by side, one panel a graph, one
    bar a run (its label: the JSON's name and its model), to compare runs of one session."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    graphs = sorted({results["graph"] for _, results in runs}, reverse=True)
    devices = {results["device"] for _, results in runs}
    fig, axes = plt.subplots(1, len(graphs), figsize=(6.5 * len(graphs), 6.0), squeeze=False)
    for ax, graph in zip(axes[0], graphs):
        chosen = [(label, results) for label, results in runs if results["graph"] == graph]
        configs = list(dict.fromkeys(
            row["config"] for _, results in chosen for row in results["rows"]
            if row["config"] == "model alone" or (row["config"].startswith("prefetch")
                                                  and "alone" not in row["config"])))
        width = 0.8 / len(chosen)
        for k, (label, results) in enumerate(chosen):
            rows = {row["config"]: row for row in results["rows"]}
            drawn = [(i + (k - (len(chosen) - 1) / 2) * width, rows[c])
                     for i, c in enumerate(configs) if c in rows]  # a run's own rows only
            xs, heights = [x for x, _ in drawn], [row["epoch_s"] for _, row in drawn]
            where = "" if len(devices) == 1 else f", {results['device']}"
            ax.bar(xs, heights, width, label=f"{label} ({results.get('model', 'eager')}{where})")
            for x, h in zip(xs, heights):
                ax.text(x, h, f"{h:.2f}", ha="center", va="bottom", fontsize=6)
            besides = [(x, row["model_alone_beside_s"]) for x, row in drawn
                       if row.get("model_alone_beside_s")]
            if besides:  # each epoch's own model alone, run beside it
                ax.scatter([x for x, _ in besides], [b for _, b in besides], marker="_",
                           s=120 * width, color="black", zorder=3,
                           label=None if k else "model alone beside that epoch")
        ax.set_xticks(range(len(configs)), configs, rotation=20, ha="right", fontsize=7)
        ax.set_ylabel("seconds per epoch")
        ax.set_title(f"'{graph}'", fontsize=9)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=1)
    if len(devices) == 1:
        fig.suptitle(f"GraphSAGE epochs, {devices.pop()}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


def scaling(args, results):
    """examples/train_sage.py under torchrun on 1..N GPUs, both cache policies, each training
    variant (--scaling-variants: the training step, and 'cpp' for the C++ loader thread) with
    its own one-GPU baseline."""
    counts = [int(n) for n in args.scaling.split(",")]
    policies = args.scaling_policies.split(",")
    runs = []
    for step in args.scaling_variants.split(","):
        step_name, *extras = step.split("+")
        if step_name not in ("plain", "lean") or set(extras) - {"cpp"}:
            raise SystemExit(f"--scaling-variants: plain or lean, optionally +cpp; got {step}")
        for policy in policies:
            for n in counts:
                if n == 1 and policy != policies[0]:
                    continue  # one GPU: the policies are the same
                with tempfile.TemporaryDirectory() as tmp:
                    report = Path(tmp) / "report.json"
                    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                               f"--nproc-per-node={n}", str(REPO / "examples" / "train_sage.py"),
                               "--size", args.graph, "--epochs", str(args.scaling_epochs),
                               "--cache-size", args.cache, "--cache-policy", policy,
                               "--mode", args.scaling_mode, "--step", step_name,
                               "--report", str(report)] + (
                                   ["--loader-thread", "cpp" if "cpp" in extras else "python"])
                    start = time.perf_counter()
                    done = subprocess.run(command, capture_output=True, text=True,
                                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
                    if done.returncode != 0:
                        print(done.stdout[-4000:], done.stderr[-4000:])
                        raise SystemExit(f"torchrun on {n} GPUs failed ({policy}, {step} step)")
                    history = json.loads(report.read_text())["history"]
                timed = history[1:]  # the first epoch warms up
                mean = lambda of: sum(map(of, timed)) / len(timed)  # noqa: E731
                epoch = mean(lambda h: h["time"])
                wait = mean(lambda h: h.get("wait", 0.0))
                wait_max = mean(lambda h: h.get("wait_max", h.get("wait", 0.0)))
                run = {"gpus": n, "policy": policy, "step": step, "epoch_s": epoch,
                       "wait_s": wait, "wait_max_s": wait_max,
                       "accuracy": history[-1]["accuracy"],
                       "wall_s": time.perf_counter() - start,
                       "epochs": [h["time"] for h in history]}
                runs.append(run)
                print(f"   {n} GPU(s) {policy:<22} {step:<8} epoch {epoch:6.2f} s  waiting "
                      f"{wait:5.2f} s (longest {wait_max:5.2f} s)  accuracy "
                      f"{run['accuracy']:.3f}  (run took "
                      f"{run['wall_s']:.0f}s)", flush=True)
    print(f"\ntorchrun scaling on {torch.cuda.get_device_name()}, '{args.graph}' graph, "
          f"{args.scaling_mode} sampling, {args.cache} cache; throughput against one GPU with "
          f"the same step; 'waiting': rank 0's time in next(loader), 'longest': the longest "
          f"of any rank")
    print(f"{'GPUs':>4} {'policy':<22} {'step':<8} {'epoch s':>8} {'waiting s':>9} "
          f"{'longest s':>9} {'speed-up':>9} {'accuracy':>9}")
    for run in runs:
        one = next(r["epoch_s"] for r in runs if r["gpus"] == 1 and r["step"] == run["step"])
        run["speedup"] = one / run["epoch_s"]
        print(f"{run['gpus']:>4} {run['policy']:<22} {run['step']:<8} {run['epoch_s']:8.2f} "
              f"{run['wait_s']:9.2f} {run['wait_max_s']:9.2f} {run['speedup']:8.2f}x "
              f"{run['accuracy']:9.3f}")
    results["scaling"] = {"graph": args.graph, "mode": args.scaling_mode, "cache": args.cache,
                          "device": torch.cuda.get_device_name(), "runs": runs}


PYG_MODELS = ("full", "trim", "targets")


def check_options(parser, args) -> None:
    """parser.error for options that would fail (or be dropped) only after the graph was
    built: each names the option and its value."""
    if "," in args.graph:
        parser.error(f"--graph takes one preset, got {args.graph!r}")
    try:
        fanouts = [int(f) for f in args.fanouts.split(",")]
    except ValueError:
        fanouts = []
    if not fanouts or any(f == 0 or f < -1 for f in fanouts):
        parser.error(f"--fanouts takes a comma list of fanouts >= 1 (or -1: every neighbor), "
                     f"got {args.fanouts!r}")
    unknown = [m for m in args.pyg_models.split(",") if m and m not in PYG_MODELS]
    if unknown:
        parser.error(f"--pyg-models takes {', '.join(PYG_MODELS)} (a comma list, or \"\" for "
                     f"none), got {unknown}")
    bad_reads = [r for r in args.host_reads.split(",") if r not in ("zero_copy", "staged")]
    if bad_reads:
        parser.error(f"--host-reads takes zero_copy, staged or both, got {bad_reads}")
    bad_modes = [m for m in args.modes.split(",")
                 if m.partition("+")[0] not in ("GPU", "UVA", "CPU")]
    if bad_modes:
        parser.error(f"--modes takes GPU, UVA (UVA+20%: with a topology cache) or CPU, got "
                     f"{bad_modes}")
    nodes = PRESETS[args.graph].num_nodes
    if args.train_seeds is not None and args.train_seeds >= nodes:
        parser.error(f"--train-seeds must be below the '{args.graph}' graph's {nodes:,} nodes, "
                     f"got {args.train_seeds}")
    gpu = torch.cuda.is_available() and qv.cuda_kernels_built()
    device = None
    if args.device is not None:
        try:
            device = torch.device(args.device)
        except RuntimeError:
            pass
        if device is None or device.type not in ("cpu", "cuda"):
            parser.error(f"--device takes cpu or a CUDA device such as cuda:0, got "
                         f"{args.device!r}")
        if device.type == "cuda" and not gpu:
            parser.error(f"--device {args.device}: this machine has no CUDA GPU that the "
                         f"library can use")
    if not gpu or (device is not None and device.type == "cpu"):
        gpu_only = [flag for flag, given in [
            ("--green-sms", args.green_sms), ("--host-read-shares", args.host_read_shares),
            ("--unpaced", args.unpaced), ("--graphed-model", args.graphed_model),
            ("--model-streams", args.model_streams != "default")] if given]
        if gpu_only:
            print(f"note: {', '.join(gpu_only)} apply on a GPU only; on the CPU they change "
                  f"nothing", flush=True)
    if args.scaling and not gpu:  # torchrun's workers failed, each with a traceback
        parser.error(f"--scaling {args.scaling} trains on that many GPUs, and this machine has "
                     f"no CUDA GPU that the library can use")
    _cli.check_size(parser, "cache", args.cache)  # (a bad one ran on the CPU, unread)
    _cli.check_outputs(parser, args, ["json", "plot"])
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:  # (found after the run)
            parser.error("--plot needs matplotlib (pip install matplotlib)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--graph", default="products")
    parser.add_argument("--fanouts", default="15,10,5")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--cache", default="20%", help="GPU feature cache (default 20%%)")
    parser.add_argument("--device", default=None, help="default: cuda when present")
    parser.add_argument("--modes", default="GPU,UVA",
                        help="sampling modes on a GPU; UVA+20%% also caches that share of "
                             "the topology in HBM")
    parser.add_argument("--host-reads", default="zero_copy,staged",
                        help="ways of reading uncached rows (Feature's host_reads)")
    parser.add_argument("--pyg-models", default="full,trim,targets",
                        help="models timed on PyG's batches")
    parser.add_argument("--green-sms", default="",
                        help="also time the prefetching loader on green contexts of these SM "
                             "counts, e.g. 8,16")
    parser.add_argument("--host-read-shares", default="",
                        help="also staged host reads with the GPU's share of the host rows fixed "
                             "at each of these (Feature.host_read_share: 0 = CPU threads and "
                             "the copy engine move every host row), e.g. 0,0.1")
    parser.add_argument("--unpaced", action="store_true",
                        help="also staged host reads whose learned share ignores the "
                             "prefetching loader's pace (Feature.host_read_pace = False)")
    parser.add_argument("--no-all-blocks", action="store_true",
                        help="skip the rows whose host reads run on every block")
    parser.add_argument("--train-seeds", type=int, default=None,
                        help="train seeds an epoch (default: the preset's split; papers: "
                             "papers100M's own 1,207,179)")
    parser.add_argument("--feature-dtype", default=None,
                        choices=["float32", "bfloat16", "float16"],
                        help="default float32 (papers: bfloat16, a 28 GB table)")
    parser.add_argument("--plot", default=None,
                        help="write a PNG of each epoch beside the model alone, split where "
                             "it runs in line")
    parser.add_argument("--replot", default=None,
                        help="only draw --plot from the --json of an earlier run, or of "
                             "several (comma separated: their epochs compared, a panel a graph)")
    parser.add_argument("--fused-adam", action="store_true",
                        help="one fused Adam kernel a step (examples/train_sage.py --step lean) "
                             "for every model timed")
    parser.add_argument("--graphed-model", action="store_true",
                        help="the loop's training step as one CUDA graph on padded batches "
                             "(torch_quiver_ops.GraphedStep), the model alone included")
    parser.add_argument("--compile-model", action="store_true",
                        help="the torch-quiver loop's GraphSAGE under "
                             "torch.compile(dynamic=True) in every row, the model alone "
                             "included (PyG's models stay eager)")
    parser.add_argument("--both-loader-threads", action="store_true",
                        help="each prefetching epoch twice, its batches built by the "
                             "loader's Python thread and by its C++ one (prefetch_in_cpp "
                             "False and True; by default the loader picks)")
    parser.add_argument("--no-cpu-pipeline", action="store_true",
                        help="skip configuration 5 (CPU sampling and gather; slow)")
    parser.add_argument("--scaling", default=None,
                        help="GPU counts for torchrun runs, e.g. 1,2,4 (skips the one-GPU table)")
    parser.add_argument("--scaling-mode", default="GPU", choices=["GPU", "UVA"])
    parser.add_argument("--scaling-epochs", type=int, default=3,
                        help="epochs per torchrun run (at least 2: the first warms up and is "
                             "not timed)")
    parser.add_argument("--scaling-variants", default="lean",
                        help="examples/train_sage.py variants: --step plain or lean, with "
                             "--loader-thread python, or cpp with +cpp (e.g. plain,lean,lean+cpp)")
    parser.add_argument("--scaling-policies", default="device_replicate,p2p_clique_replicate",
                        help="cache policies to run (one GPU runs once, under the first)")
    parser.add_argument("--compile", action="store_true",
                        help="only time torch.compile and the AOTInductor package against eager")
    parser.add_argument("--cpp", default=None,
                        help="examples/cpp/train_sage binary to time beside the Python loop")
    parser.add_argument("--loader-workers", default="",
                        help="also time the prefetching loader with these many workers "
                             "building batches at once (comma list, e.g. 2,3)")
    parser.add_argument("--model-streams", default="default",
                        help="run each prefetching epoch and the model alone beside it from "
                             "the default stream (default: the loader then runs the steps on "
                             "a stream of its own; default-kept: its own_stream off), or from "
                             "a new stream of the lowest priority (normal) or of the greatest "
                             "(high); a comma list runs each in turns, e.g. "
                             "default,default-kept,default-kept,default")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    _cli.check_args(parser, args, {"batch_size": 1, "hidden": 1, "train_seeds": 1,
                                   "scaling_epochs": 2}, ["graph"])
    check_options(parser, args)
    if args.graphed_model and args.compile_model:
        parser.error("--graphed-model and --compile-model are two ways to run the step: "
                     "give one")
    args.loader_workers = _cli.int_list(parser, "loader-workers", args.loader_workers, least=1)
    # Read as a list where a green context is made, after the graph: checked here.
    _cli.int_list(parser, "green-sms", args.green_sms, least=1)
    args.model_streams = args.model_streams.split(",")
    if not set(args.model_streams) <= set(MODEL_STREAM_NAMES):
        parser.error(f"--model-streams takes {', '.join(MODEL_STREAM_NAMES)} (a comma list), "
                     f"got {','.join(args.model_streams)!r}")
    try:
        args.host_read_shares = [float(s) for s in args.host_read_shares.split(",") if s]
    except ValueError:
        parser.error(f"--host-read-shares takes numbers in [0, 1], got {args.host_read_shares!r}")
    if not all(0.0 <= share <= 1.0 for share in args.host_read_shares):
        parser.error(f"--host-read-shares takes numbers in [0, 1], got {args.host_read_shares}")
    results = {}
    if args.scaling:
        scaling(args, results)
    elif args.compile:
        compile_speed(args, results)
    elif args.replot:
        if not args.plot:
            parser.error("--replot draws into --plot: give it a PNG path")
        files = args.replot.split(",")
        runs = [json.loads(Path(f).read_text()) for f in files]
        if any("rows" not in run or "graph" not in run for run in runs):
            parser.error("--replot takes the --json of single-GPU epoch runs (not --scaling "
                         "or --compile runs)")
        if len(runs) == 1:
            plot_epochs(runs[0], args.plot)
            return
        common = os.path.commonprefix([Path(f).stem for f in files])
        common = common[:common.rfind("-") + 1]  # whole words only
        plot_runs([(Path(f).stem[len(common):] or Path(f).stem, run)
                   for f, run in zip(files, runs)], args.plot)
        return
    else:
        single_gpu(args, results)
        if args.plot:
            plot_epochs(results, args.plot)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
