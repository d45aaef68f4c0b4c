"""Trains GraphSAGE on a synthetic graph with torch-quiver-ops' sampler and feature store.

    python examples/train_sage.py                      # small graph, a couple of minutes on 2 CPU cores
    python examples/train_sage.py --size products      # ogbn-products-sized, for a GPU
    torchrun --nproc-per-node 4 examples/train_sage.py --size products   # DDP on 4 GPUs

On a GPU (used automatically when present) the topology is sampled in UVA mode and the
features are gathered onto the GPU; on a CPU-only machine everything runs on the CPU.
Batches are sampled and gathered ahead of the model (``--prefetch``, on a side CUDA
stream); each epoch prints its time, the time the model waited for data, and the accuracy
on held-out test nodes. ``--prefetch 0`` runs the data path in line and splits the epoch
into sampling, feature gathering and the model.

Under torchrun each process trains on its own GPU (DDP, its share of the seeds). The
first process of each machine builds the graph and writes it to shared memory; every
process maps that one copy of the topology and of the feature table, and keeps its own
GPU cache (``--cache-policy device_replicate``) or a share of one spread over the GPUs that
reach each other over NVLink (``p2p_clique_replicate``).
"""
from __future__ import annotations

import argparse
import itertools
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn import SAGEConv
from tqdm import tqdm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import option_checks  # noqa: E402  (the examples' shared option checks)

import torch_quiver_ops as qv  # noqa: E402
from torch_quiver_ops.synthetic import PRESETS, synthetic_graph  # noqa: E402


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
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="small", choices=sorted(PRESETS),
                        help="synthetic graph preset: " + "; ".join(
                            f"{name} ({p.num_nodes:,} nodes, about {round(p.num_nodes * p.avg_degree):,} "
                            f"edges)" for name, p in sorted(PRESETS.items())) +
                        " (default: small)")
    parser.add_argument("--epochs", type=int, default=4, help="training epochs (default: 4)")
    parser.add_argument("--batch-size", type=int, default=1024,
                        help="seed nodes per batch (default: 1024)")
    parser.add_argument("--fanouts", default="15,10,5",
                        help="neighbors sampled per hop, comma separated, the seeds' hop first; "
                             "-1 takes every neighbor (default: 15,10,5)")
    parser.add_argument("--hidden", type=int, default=128,
                        help="width of GraphSAGE's hidden layers (default: 128)")
    parser.add_argument("--lr", type=float, default=0.003,
                        help="Adam's learning rate (default: 0.003)")
    parser.add_argument("--device", default="auto",
                        help="auto (the GPU when there is one and the CUDA kernels were built, "
                             "else the CPU), cpu, or a CUDA device such as cuda:0")
    parser.add_argument("--mode", default=None, choices=["GPU", "UVA", "CPU"],
                        help="where the topology lives (default: UVA on a GPU, else CPU)")
    parser.add_argument("--cache-size", default="20%",
                        help="GPU feature cache: bytes (e.g. 200M) or a share of the table "
                             "(default 20%%); 0 keeps every row in pinned host memory")
    parser.add_argument("--cache-policy", default="device_replicate",
                        choices=["device_replicate", "p2p_clique_replicate"],
                        help="with several GPUs: a cache on each, or one spread over NVLink peers "
                             "(default: device_replicate)")
    parser.add_argument("--cache-order", default="presample", choices=["presample", "degree"],
                        help="which rows are hot: most sampled in one presampled epoch, or "
                             "highest degree (default: presample)")
    parser.add_argument("--prefetch", type=int, default=2,
                        help="batches built ahead of the model (0: in line, with a time split; "
                             "default: 2)")
    parser.add_argument("--loader-workers", type=int, default=1,
                        help="batches the loader builds at once, each on a stream of its own "
                             "(worth it when sampling, not the model, bounds an epoch; default: 1)")
    parser.add_argument("--eval-nodes", type=int, default=10_000,
                        help="test nodes scored after each epoch (default: 10000)")
    parser.add_argument("--seed", type=option_checks.seed, default=0,
                        help="seeds the graph, the model and the batches' order (default: 0)")
    parser.add_argument("--report", default=None,
                        help="write the per-epoch history (times, loss, accuracy) as "
                             "JSON to this file")
    parser.add_argument("--save", default=None,
                        help="write the trained model and what rebuilds its graph to this "
                             "file (examples/serve_sage.py serves it)")
    parser.add_argument("--loader-thread", default="auto", choices=["auto", "cpp", "python"],
                        help="what builds the batches ahead: auto (default) a C++ thread "
                             "wherever it can in GPU mode (SampleLoader's prefetch_in_cpp), "
                             "cpp requires it, python the Python thread")
    parser.add_argument("--step", default="lean", choices=["plain", "lean"],
                        help="lean (default): fused Adam on a GPU and, under torchrun, DDP "
                             "with a static graph and gradients viewing its buckets: less "
                             "host work a step, which bounds this model's step; plain: "
                             "PyTorch's defaults")
    parser.add_argument("--compile", action="store_true",
                        help="train the model under torch.compile(dynamic=True): the loader's "
                             "batches change size every batch and are traced once; fewer "
                             "kernels and less host work a step, which bounds this model's "
                             "step (the first epoch includes the compile)")
    parser.add_argument("--cuda-graph", action="store_true",
                        help="replay the training step as one CUDA graph on batches padded "
                             "to fixed shapes (torch_quiver_ops.GraphedStep): a step's host "
                             "work becomes a few copies and one launch. One GPU; not with "
                             "--compile; three warm-up steps on one batch come first")
    parser.add_argument("--progress", default="auto", choices=["auto", "bar", "lines"],
                        help="a progress bar per epoch (bar), one line per epoch only "
                             "(lines), or a bar when stdout is a terminal (auto)")
    args = parser.parse_args(argv)
    # Checked here, not after an epoch (or a whole run, for --save) has gone by.
    args.fanouts = option_checks.fanout_list(parser, args.fanouts)
    option_checks.cache_size(parser, args.cache_size)
    option_checks.at_least(parser, args, ["epochs", "prefetch"], 0)
    option_checks.at_least(parser, args, ["batch_size", "hidden", "loader_workers",
                                          "eval_nodes"], 1)
    option_checks.at_most(parser, args, ["hidden"], option_checks.MAX_HIDDEN)
    option_checks.at_most(parser, args, ["batch_size"], option_checks.MAX_BATCH_SIZE)
    if args.cuda_graph and args.compile:
        parser.error("--cuda-graph and --compile are two ways to run the step: give one")
    if args.cuda_graph and ("WORLD_SIZE" in os.environ or args.device == "cpu"
                            or not option_checks.cuda_usable()):
        # (refused in main before, after the graph was built and shared)
        parser.error("--cuda-graph replays the step on one GPU: not under torchrun, and not "
                     "on the CPU")
    from torch_quiver_ops.loader import MAX_LOADER_WORKERS
    if args.loader_workers > MAX_LOADER_WORKERS:  # a million hung before the first batch
        parser.error(f"--loader-workers must be at most {MAX_LOADER_WORKERS}, got "
                     f"{args.loader_workers}")
    if args.prefetch == 0 and (args.loader_workers > 1 or args.loader_thread == "cpp"):
        given = (f"--loader-workers {args.loader_workers}" if args.loader_workers > 1
                 else "--loader-thread cpp")  # (the one given: both had been named)
        parser.error(f"{given} builds batches ahead: it needs --prefetch 1 or more")
    for name in ("save", "report"):
        option_checks.output_file(parser, name, getattr(args, name))
    option_checks.positive(parser, args, ["lr"])
    option_checks.device_option(parser, args.device, auto=True)
    if args.mode in ("GPU", "UVA") and (args.device == "cpu" or not option_checks.cuda_usable()):
        parser.error(f"--mode {args.mode} samples on a GPU, and this run has none (--device "
                     f"{args.device}): give --mode CPU")
    # (drawn on the run's GPU when it has one: build's generator_device)
    on_gpu = args.device != "cpu" and option_checks.cuda_usable()
    option_checks.graph_fits(parser, args.size, "cuda" if on_gpu else None)
    return args


def pick_device(name: str, local_rank: int = 0) -> torch.device:
    if name != "auto":
        device = torch.device(name)
        if device.type == "cuda" and device.index is None:  # "cuda": this process's GPU
            device = torch.device("cuda", local_rank % max(1, torch.cuda.device_count()))
        return device
    if option_checks.cuda_usable():
        return torch.device("cuda", local_rank % torch.cuda.device_count())
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


def longest_over_ranks(value: float, device: torch.device) -> float:
    longest = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(longest, op=dist.ReduceOp.MAX)
    return float(longest)


class Run:
    """Who this process is: alone, or one of a torchrun job (one GPU each)."""

    def __init__(self, device_name: str):
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.distributed = self.world > 1
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        self.device = pick_device(device_name, self.local_rank)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self.rank = 0
        # Tensors handed to collectives live until the process group is gone: Gloo's worker
        # thread frees its finished work items late, and freeing a tensor whose Python
        # object died first needs the GIL, which teardown holds while it joins that thread.
        self._collective_tensors = []
        if self.distributed:
            dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo")
            self.rank = dist.get_rank()

    @property
    def lead(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def sum(self, value: float) -> float:
        if not self.distributed:
            return value
        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        self._collective_tensors.append(t)
        return float(t)

    def close(self) -> None:
        """Tears the process group down (drop DDP models first: their reducer holds the
        group, which would then be freed inside the reducer's destructor)."""
        if not self.distributed:
            return
        dist.destroy_process_group()
        self._collective_tensors.clear()

    def gpus(self) -> list:
        if self.device.type != "cuda":
            return []
        if not self.distributed:
            return [self.device.index]
        count = torch.cuda.device_count()
        return sorted({r % count for r in range(self.local_world)})


def shared_dir(args) -> Path:
    """Where a torchrun job's machine keeps its one copy of the graph while it loads."""
    return Path("/dev/shm") / (f"quiver-train-{os.environ.get('TORCHELASTIC_RUN_ID', 'run')}-"
                               f"{os.environ.get('MASTER_PORT', '0')}-{args.size}-{args.seed}")


def build(args, run: Run, fanouts):
    """The graph, its topology and the feature store; under torchrun, one copy of each per
    machine (written to shared memory by the machine's first process, mapped by all)."""
    start = time.perf_counter()
    # Built on the GPU when there is one (seconds instead of a minute for products; the
    # graph differs from the CPU-built one of the same seed), handed over on the CPU.
    generator_device = run.device if run.device.type == "cuda" else None
    if not run.distributed:
        graph = synthetic_graph(args.size, seed=args.seed, device=generator_device)
        topo = qv.CSRTopo(graph.edge_index, num_nodes=graph.num_nodes)
        meta = {"y": graph.y, "train_idx": graph.train_idx, "test_idx": graph.test_idx,
                "num_classes": graph.num_classes, "num_edges": graph.num_edges}
        table, shared = graph.x, None
    else:
        shared = shared_dir(args)
        table = None
        if run.local_rank == 0:
            graph = synthetic_graph(args.size, seed=args.seed, device=generator_device)
            qv.CSRTopo(graph.edge_index, num_nodes=graph.num_nodes).save(shared / "topology")
            torch.save({"y": graph.y, "train_idx": graph.train_idx, "test_idx": graph.test_idx,
                        "num_classes": graph.num_classes, "num_edges": graph.num_edges},
                       shared / "meta.pt")
            table = graph.x
            del graph
        run.barrier()
        topo = qv.CSRTopo.load_shared(shared / "topology")
        meta = torch.load(shared / "meta.pt")
    device = run.device
    sampler = qv.GraphSageSampler(topo, fanouts, device=device, mode=args.mode)
    gpus = run.gpus()
    cache = args.cache_size if gpus else 0
    hot_order = None
    builds_table = not run.distributed or run.local_rank == 0
    if cache and cache != "0" and args.cache_order == "presample" and builds_table:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(args.seed)
            hot_order = qv.presample_hot_order(sampler, meta["train_idx"], args.batch_size)
    if run.distributed:
        if run.local_rank == 0:
            qv.Feature(device_list=[], csr_topo=topo).from_cpu_tensor(
                table, hot_order).save(shared / "features")
            del table
        run.barrier()
        feature = qv.Feature.load_shared(shared / "features", device.index or 0, gpus, cache,
                                         args.cache_policy)
        run.barrier()
        if run.local_rank == 0:  # every process has mapped the files: their pages stay
            shutil.rmtree(shared, ignore_errors=True)  # until the last one unmaps them
    else:
        feature = qv.Feature(rank=device.index or 0, device_list=gpus, device_cache_size=cache,
                             cache_policy=args.cache_policy, csr_topo=topo)
        feature.from_cpu_tensor(table, hot_order=hot_order)
    if run.lead:
        print(f"graph '{args.size}': {topo.node_count:,} nodes, {meta['num_edges']:,} edges, "
              f"{feature.shape[1]} features, {meta['num_classes']} classes (ready in "
              f"{time.perf_counter() - start:.1f}s)")
        if gpus:
            placement = (f"feature cache {feature.cached_rows:,} of {len(feature):,} rows per "
                         f"GPU ({args.cache_order} order, {args.cache_policy})")
        else:
            placement = f"features: all {len(feature):,} rows in host memory (no GPU)"
        print(f"{run.world} process(es); device {device}, sampler mode {sampler.mode}, fanouts "
              f"{fanouts}, batch {args.batch_size}, prefetch {args.prefetch}; {placement}")
    return sampler, feature, meta


@torch.no_grad()
def evaluate(model, sampler, feature, labels, nodes, batch_size, run: Run) -> float:
    model.eval()
    correct = 0
    for seeds in nodes.split(batch_size):
        n_id, size, adjs = sampler.sample(seeds)
        out = model(feature[n_id].to(run.device), [adj.to(run.device) for adj in adjs])
        correct += int((out.argmax(-1) == labels[seeds.to(labels.device)]).sum())
    return run.sum(correct) / max(1.0, run.sum(nodes.numel()))


def _exit_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)


def train_epochs(args, run, device, model, optimizer, loader, graphed, core, sampler, feature,
                 labels, test, meta, bars, history) -> None:
    """The training epochs, each appended to ``history`` as it ends."""
    for epoch in range(1, args.epochs + 1):
        model.train()
        clock = Clock(device)
        if args.prefetch == 0:
            loader.timer = clock  # splits the in-line data path into sampling and gathering
        epoch_start = time.perf_counter()
        # Summed on the GPU: reading each step's loss on the host would make the host wait
        # for every step before it launches the next one.
        total_loss = torch.zeros((), device=device)
        seen = 0
        batches = iter(loader)
        waited = 0.0
        for _ in tqdm(range(len(loader)), desc=f"epoch {epoch}", leave=False, disable=not bars):
            t = time.perf_counter()
            batch = next(batches)
            n_id, batch_size, adjs, x, y = batch
            t_model = time.perf_counter()
            waited += t_model - t
            if graphed is not None:
                loss = graphed(batch)  # overwritten by the next replay, read before it
            else:
                optimizer.zero_grad()
                out = model(x.to(device), [adj.to(device) for adj in adjs])
                loss = F.cross_entropy(out, y)
                loss.backward()
                optimizer.step()
            total_loss += loss.detach() * batch_size  # a short last batch weighs less
            seen += batch_size
            if args.prefetch == 0:
                clock.lap("model", t_model)
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # the epoch's last steps, still queued
        epoch_time = time.perf_counter() - epoch_start
        accuracy = evaluate(core, sampler, feature, labels, test, args.batch_size, run)
        tot = dict(clock.totals)
        if args.prefetch == 0:
            split = (f"sample {tot['sample']:.2f}s, gather {tot['gather']:.2f}s, model "
                     f"{tot['model']:.2f}s")
        else:
            tot = {"wait": waited, "model": epoch_time - waited}
            split = f"waiting for data {waited:.2f}s, model {epoch_time - waited:.2f}s"
            if run.distributed:
                # DDP steps together, so a rank that waits for its batches holds up all:
                # the longest wait of any rank, beside this one's.
                tot["wait_max"] = longest_over_ranks(waited, device)
                split += f", longest wait of any rank {tot['wait_max']:.2f}s"
        # Over every process, as the accuracy is (it was the first process's alone).
        loss = run.sum(float(total_loss)) / max(1.0, run.sum(float(seen)))
        if run.lead:
            print(f"epoch {epoch}: {epoch_time:6.2f}s  ({split})  loss "
                  f"{loss:.3f}  test accuracy {accuracy:.3f} "
                  f"(chance {1 / meta['num_classes']:.3f})", flush=True)
        history.append({"epoch": epoch, "time": epoch_time, **tot, "loss": loss,
                        "accuracy": accuracy})
        option_checks.stop_if_diverged(loss, epoch, args.lr)  # (the loss of every rank)


def main(argv=None) -> dict:
    args = parse_args(argv)
    run = Run(args.device)
    torch.manual_seed(args.seed)
    fanouts = args.fanouts
    # torchrun ends the other workers with SIGTERM when one fails: raised here as SystemExit,
    # so that the finally below still removes the machine's copy of the graph. Every process
    # of the machine removes it: the first one alone left it behind when it was the one
    # killed (SIGKILL, the OOM killer) while building.
    cleaning = run.distributed
    before = signal.signal(signal.SIGTERM, _exit_on_sigterm) if cleaning else None
    try:
        sampler, feature, meta = build(args, run, fanouts)
    finally:
        if cleaning:  # nothing left behind in /dev/shm
            shutil.rmtree(shared_dir(args), ignore_errors=True)
            signal.signal(signal.SIGTERM, before)
    device = run.device

    model = SAGE(feature.shape[1], args.hidden, meta["num_classes"], len(fanouts)).to(device)
    core = model
    if run.distributed:
        lean = {"static_graph": True, "gradient_as_bucket_view": True} if args.step == "lean" else {}
        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda"
                                        else None, **lean)
    if args.compile:  # under DDP too: torch.compile splits its graph at DDP's buckets
        model = torch.compile(model, dynamic=True)
    # A captured step needs an optimizer whose step can be captured (no fused Adam).
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, capturable=args.cuda_graph,
                                 fused=(args.step == "lean" and device.type == "cuda"
                                        and not args.cuda_graph))
    labels = meta["y"].to(device)
    # Every process gets as many batches as every other (DDP steps together): its share of
    # the seeds, shuffled every epoch by the loader.
    train = meta["train_idx"]
    train = train[:train.numel() - train.numel() % run.world][run.rank::run.world]
    loader = qv.SampleLoader(sampler, feature, train, args.batch_size, labels=labels,
                             prefetch=(max(args.prefetch, args.loader_workers) if args.prefetch
                                       else 0),  # workers > 1 with 0: the loader says why
                             workers=args.loader_workers,
                             prefetch_in_cpp={"auto": None, "cpp": True,
                                              "python": False}[args.loader_thread])
    if run.lead and loader.prefetch:
        print(f"batches built {loader.prefetch} ahead by the loader's "
              f"{'C++' if loader.prefetch_in_cpp else 'Python'} thread")
    graphed = None
    if args.cuda_graph:  # shapes from 8 batches; larger ones run eager
        model.train()
        shapes = list(itertools.islice(qv.SampleLoader(sampler, feature, train, args.batch_size,
                                                       labels=labels, prefetch=0), 8))
        graphed = qv.GraphedStep(model, optimizer, shapes)
        print(f"training step captured as a CUDA graph: {graphed}")
    eval_gen = torch.Generator().manual_seed(args.seed + 1)
    test = meta["test_idx"][torch.randperm(meta["test_idx"].numel(), generator=eval_gen)
                            [:args.eval_nodes]][run.rank::run.world]

    # A bar redrawn with carriage returns piles up in a log file: one line per epoch there.
    bars = run.lead and (args.progress == "bar" or
                         (args.progress == "auto" and sys.stdout.isatty()))
    history = []
    try:
        train_epochs(args, run, device, model, optimizer, loader, graphed, core, sampler,
                     feature, labels, test, meta, bars, history)
    except (KeyboardInterrupt, SystemExit):  # (Ctrl-C, SIGTERM, a diverged loss)
        # The epochs that ran are still a result: an interrupted run's report had been
        # lost whole.
        if args.report and run.lead:
            option_checks.write_report(args.report, {
                "history": history, "num_classes": meta["num_classes"],
                "world_size": run.world, "interrupted": True})
            print(f"interrupted: the report of the {len(history)} epoch(s) that ran is in "
                  f"{args.report}", file=sys.stderr)
        raise
    if args.epochs == 0 and args.save and run.lead:
        print("--epochs 0: the model saved is untrained", file=sys.stderr)
    result = {"history": history, "num_classes": meta["num_classes"], "world_size": run.world}
    if args.report and run.lead:
        option_checks.write_report(args.report, result)
    if args.save and run.lead:
        # The graph is rebuilt from its preset and seed where it was built (on a GPU the
        # generator draws another graph than on the CPU).
        torch.save({"state_dict": core.state_dict(), "size": args.size, "seed": args.seed,
                    "graph_device": device.type, "fanouts": fanouts, "hidden": args.hidden,
                    "in_channels": feature.shape[1], "num_classes": meta["num_classes"]},
                   args.save)
        print(f"model saved to {args.save}")
    if graphed is not None:
        print(f"steps run eager (batches over the captured shapes): {graphed.eager_steps}")
    if run.distributed:
        feature.close()  # collective: peers drop their mappings of each other's shards
        optimizer = None
        model = None  # DDP's reducer holds the process group: let go of it first
        run.close()
    return result


if __name__ == "__main__":
    option_checks.run_main(main)
