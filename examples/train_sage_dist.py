"""GraphSAGE with its feature table split over hosts: torchrun across machines.

    torchrun --nnodes N --nproc-per-node M [--node-rank K --master-addr A --master-port P] \\
        examples/train_sage_dist.py --data /shared/dir [--size small] [--epochs 3] \\
        [--partitioned [--partition-method metis|range|random]]

With --partitioned the topology is split too (GLT's distributed mode): --data then holds a
torch_quiver_ops.partition directory (each host's nodes with their neighbor lists, rows,
labels and split ids, and the node -> owner map) under parts/, or is one that
scripts/partition_graph.py wrote for your own graph (its --out, with --features, --labels
and --splits holding 'train' and 'test'; one part a host), each host maps only its part,
samples its own nodes and asks the owners of remote frontier nodes for theirs each hop
(DistGraphSampler, over Gloo), and trains on the train ids it owns: as many batches an
epoch on every process (DDP steps together), so a host that owns more than the smallest
share trains each epoch on a random subset of that size (a few % of the train ids sit out
an epoch with METIS parts, more with small graphs or 'range' parts).

Each node is a host: it maps only its shard of the features (its partition plus the
replicated hottest rows), samples with its own copy of the topology, and reads every other
row through a DistFeature (RDMA where a device exists, else NCCL between GPUs or Gloo on
CPUs). The M processes of a node train with DDP together with every other node's; the
processes with one local rank, one per node, form a host group that exchanges rows.

The first run builds the synthetic graph and partitions it into --data (global rank 0
writes it; every host must see that directory, e.g. on a shared file system); later runs
reuse it. Prints, on rank 0, each epoch's time split (sample, gather, model) and the test
accuracy over all processes.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import torch_quiver_ops as qv
from torch_quiver_ops import _cli
from torch_quiver_ops.partition import DistGraphSampler, load_partition, partition_graph
from torch_quiver_ops.synthetic import PRESETS, synthetic_graph

import option_checks  # noqa: E402  (the examples' shared option checks)
from train_sage import SAGE, Clock  # noqa: E402  (the same model as the one-host example)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="directory of the partitioned graph")
    parser.add_argument("--size", default="small", choices=sorted(PRESETS),
                        help="the synthetic graph built into --data (default: small)")
    parser.add_argument("--epochs", type=int, default=3, help="default: 3")
    parser.add_argument("--batch-size", type=int, default=1024,
                        help="seed nodes per batch and process (default: 1024)")
    parser.add_argument("--fanouts", default="15,10,5",
                        help="neighbors sampled per hop, comma separated, the seeds' hop "
                             "first; -1 takes every neighbor (default: 15,10,5)")
    parser.add_argument("--hidden", type=int, default=128,
                        help="GraphSAGE's hidden width (default: 128)")
    parser.add_argument("--lr", type=float, default=0.003, help="Adam's (default: 0.003)")
    parser.add_argument("--replicate", type=float, default=0.2,
                        help="share of the rows (hottest by degree) on every host")
    parser.add_argument("--cache-size", default="20%",
                        help="each GPU's cache of its host's table: bytes or a share of it")
    parser.add_argument("--transport", default="auto", choices=qv.dist.TRANSPORTS,
                        help="how hosts fetch each other's rows (default: auto, RDMA where "
                             "every host has a device, else the process group's backend)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds a host waits for a peer's samples or rows before naming "
                             "it, at least 1 and at most a year; DDP's all-reduces and the "
                             "setup's collectives wait twice as long, at least 60 s, and "
                             "say only that they timed out (default: 120)")
    parser.add_argument("--eval-nodes", type=int, default=10_000,
                        help="test nodes scored after each epoch, over all processes "
                             "(default: 10000)")
    parser.add_argument("--seed", type=option_checks.seed, default=0,
                        help="seeds the graph, the model and the batches (default: 0)")
    parser.add_argument("--partitioned", action="store_true",
                        help="split the topology over the hosts too (see above)")
    parser.add_argument("--partition-method", default=None, choices=("metis", "range", "random"),
                        help="with --partitioned (default: metis when pymetis is installed, "
                             "else random)")
    args = parser.parse_args(argv)
    args.fanouts = option_checks.fanout_list(parser, args.fanouts)
    option_checks.cache_size(parser, args.cache_size)
    option_checks.at_least(parser, args, ["epochs"], 0)
    option_checks.at_least(parser, args, ["batch_size", "hidden", "eval_nodes"], 1)
    option_checks.at_most(parser, args, ["hidden"], option_checks.MAX_HIDDEN)
    option_checks.at_most(parser, args, ["batch_size"], option_checks.MAX_BATCH_SIZE)
    option_checks.positive(parser, args, ["lr", "timeout"])
    if not 1 <= args.timeout <= 365 * 24 * 3600:  # the library's waits take up to a year
        parser.error(f"--timeout is seconds in [1, 31536000] (a year), got {args.timeout:g}")
    if not 0 <= args.replicate <= 1:
        parser.error(f"--replicate is a share of the rows, in [0, 1], got {args.replicate}")
    if args.partition_method is not None and not args.partitioned:
        parser.error("--partition-method chooses how --partitioned splits the topology: give "
                     "--partitioned too")
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        parser.error("run it under torchrun (e.g. torchrun --standalone --nproc-per-node 2 "
                     "examples/train_sage_dist.py --data DIR): it reads RANK and WORLD_SIZE "
                     "from torchrun's environment")
    world = int(os.environ["WORLD_SIZE"])
    if args.eval_nodes < world:
        parser.error(f"--eval-nodes {args.eval_nodes} leaves some of the {world} processes no "
                     f"test node: give at least {world}")
    data = Path(args.data)
    if data.exists() and not data.is_dir():
        parser.error(f"--data {args.data} is not a directory")
    if not data.exists():  # rank 0 makes it: found here, not after the graph was built
        ancestor = next(p for p in data.resolve().parents if p.exists())
        _cli.check_folder_writable(parser, f"--data {args.data} cannot be made", ancestor)
    # Found where the run starts, not in a traceback after the graph is built.
    if args.transport == "rdma" and not torch.classes.quiver.Transport.rdma_available():
        parser.error("--transport rdma: this host lists no RDMA device")
    if args.transport == "nccl" and not option_checks.cuda_usable():
        parser.error("--transport nccl moves rows between GPUs: this machine has no usable "
                     "GPU")
    return args


def _has_pymetis() -> bool:
    try:
        import pymetis  # noqa: F401
        return True
    except ImportError:
        return False


def _own_partition(data: Path) -> Optional[dict]:
    """The manifest of a partition that scripts/partition_graph.py wrote straight into
    --data (the user's own graph), else None."""
    try:
        manifest = json.loads((data / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    return manifest if str(manifest.get("format", "")).startswith("quiver-partition") else None


def _parts_dir(data: Path) -> Path:
    return data if _own_partition(data) is not None else data / "parts"


def _let_go(feature, sampler) -> None:
    """Closes the DistFeature, and a DistGraphSampler's heartbeat before the store's host
    may leave: every way out of a run, before the process group is destroyed."""
    feature.close()
    if isinstance(sampler, DistGraphSampler):
        sampler.close()


def _hosts(count: int) -> str:
    return f"{count} host" + ("s" if count != 1 else "")


def prepare(args, num_hosts: int) -> Optional[str]:
    """Builds the graph once and writes the topology, labels, splits and feature shards;
    returns why it cannot, in a sentence, when --data holds another job's files. A
    partition of the user's own graph (scripts/partition_graph.py's --out) is used as it
    is, and nothing is written into it."""
    data = Path(args.data)
    own = _own_partition(data)
    if own is not None:
        if not args.partitioned:
            return (f"{data} holds a partitioned graph (scripts/partition_graph.py's): give "
                    f"--partitioned")
        missing = [what for what, there in (
            ("features (--features)", own.get("features")),
            ("labels (--labels)", own.get("labels")),
            ("a 'train' split (--splits)", "train" in own.get("splits", [])),
            ("a 'test' split (--splits)", "test" in own.get("splits", []))) if not there]
        if missing:
            return (f"{data} holds a partition without {', '.join(missing)}: partition the "
                    f"graph again with them")
        if own["num_parts"] != num_hosts:
            return (f"{data} holds {own['num_parts']} parts, but this job has "
                    f"{_hosts(num_hosts)}: one part a host")
        return None
    if (data / "ready.json").exists():
        meta = json.loads((data / "ready.json").read_text())
        partitioned = meta.get("partitioned", False)
        # The graph is drawn from --seed and split by --replicate: another value would be
        # ignored without a word (files of before this check record neither).
        given = {"seed": args.seed, "replicate": args.replicate}
        if args.partition_method is not None and partitioned:  # (None: the one it holds)
            given["partition-method"] = args.partition_method
            with contextlib.suppress(OSError, ValueError):  # (named below if unreadable)
                meta.setdefault("partition-method", json.loads(
                    (data / "parts" / "manifest.json").read_text()).get("method"))
        for option, value in given.items():
            if option in meta and meta[option] != value:
                return (f"{data} holds a graph built with --{option} {meta[option]}, but this "
                        f"job gives --{option} {value}: give it another --data directory (or "
                        f"delete this one)")
        if meta["hosts"] != num_hosts or meta["size"] != args.size or \
                partitioned != args.partitioned:
            how = ["features split", "graph partitioned"]
            return (f"{data} holds the {meta['size']!r} graph ({how[partitioned]}) for "
                    f"{_hosts(meta['hosts'])}, but this job is {args.size!r} "
                    f"({how[args.partitioned]}) on {_hosts(num_hosts)}: give it another "
                    f"--data directory (or delete this one)")
        return None
    graph = synthetic_graph(args.size, seed=args.seed)
    topo = qv.CSRTopo(graph.edge_index, num_nodes=graph.num_nodes)
    if args.partitioned:
        method = args.partition_method or ("metis" if _has_pymetis() else "random")
        manifest = partition_graph(data / "parts", topo, num_hosts, method, x=graph.x,
                                   y=graph.y, splits={"train": graph.train_idx,
                                                      "test": graph.test_idx},
                                   replicate=args.replicate, seed=args.seed)
        print(f"partitioned into {num_hosts} by {method}: edge cut "
              f"{manifest['edge_cut']:.3f}, balance {manifest['node_balance']:.3f}", flush=True)
        (data / "labels.pt").parent.mkdir(parents=True, exist_ok=True)
        torch.save({"num_classes": graph.num_classes}, data / "labels.pt")
        (data / "ready.json").write_text(json.dumps({"hosts": num_hosts, "size": args.size,
                                                     "partitioned": True, "seed": args.seed,
                                                     "replicate": args.replicate,
                                                     "partition-method": method}))
        return None
    topo.save(data / "graph")
    qv.dist.partition_features(graph.x, data / "features", num_hosts, topo.feature_order,
                               args.replicate)
    torch.save({"y": graph.y, "train_idx": graph.train_idx, "test_idx": graph.test_idx,
                "num_classes": graph.num_classes}, data / "labels.pt")
    (data / "ready.json").write_text(json.dumps({"hosts": num_hosts, "size": args.size,
                                                 "seed": args.seed,
                                                 "replicate": args.replicate}))
    return None


# Options every process must be given alike (--data, --cache-size and --timeout may differ
# from host to host: a path, a GPU's memory, a network's patience).
SAME_EVERYWHERE = ("size", "epochs", "batch_size", "fanouts", "hidden", "lr", "replicate",
                   "transport", "eval_nodes", "seed", "partitioned", "partition_method")


def options_that_differ(store, args, backend: str, rank: int, world: int) -> Optional[str]:
    """What differs between the processes' options, or None. A --batch-size of 64 on one
    host and 16 on another gave each a different number of steps: one host aborted in a
    Gloo collective ("Received data size doesn't match expected size") and the other
    failed in DDP's backward, neither naming the option. Compared through the rendezvous
    ``store``, before any process group: processes on different backends (--transport, or
    a GPU on some hosts only) would wait in its setup until the timeout."""
    mine = {name: getattr(args, name) for name in SAME_EVERYWHERE}
    store.set(f"train_sage_dist/options/{rank}", json.dumps({**mine, "backend": backend}))
    every = [json.loads(store.get(f"train_sage_dist/options/{other}")) for other in range(world)]
    for name in (*SAME_EVERYWHERE, "backend"):
        values = [options[name] for options in every]
        if any(value != values[0] for value in values):
            given = ", ".join(f"process {p}: {value}" for p, value in enumerate(values))
            if name == "backend":
                return (f"the processes chose different backends ({given}): NCCL needs a "
                        f"GPU on every host and --transport other than gloo everywhere")
            return f"--{name.replace('_', '-')} must be the same on every process, got {given}"
    return None


def main(argv=None) -> dict:
    args = parse_args(argv)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_gpu = option_checks.cuda_usable()
    if use_gpu:
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
    backend = "nccl" if use_gpu and args.transport != "gloo" else "gloo"
    timeout = timedelta(seconds=max(60, args.timeout * 2))
    # The rendezvous first, then the options compared through its store, then the process
    # group (as init_process_group("env://") would make it): processes on different
    # backends would wait in the group's own setup until the timeout.
    store, rank, world = next(dist.rendezvous("env://", timeout=timeout))
    store.set_timeout(timeout)
    differ = options_that_differ(store, args, backend, rank, world)
    if differ is not None:  # said by every process: each host's log may be all its user sees
        print(f"train_sage_dist.py: {differ}", file=sys.stderr, flush=True)
        raise SystemExit(2)
    dist.init_process_group(backend, store=dist.PrefixStore("default_pg", store), rank=rank,
                            world_size=world, timeout=timeout)
    num_hosts = world // int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    device = torch.device("cuda", torch.cuda.current_device()) if use_gpu else torch.device("cpu")
    # Every process learns whether the data can be used, so that all stop together with
    # one line from the first, rather than the others failing in a collective.
    refusal = [prepare(args, num_hosts) if rank == 0 else None]
    dist.broadcast_object_list(refusal, src=0)
    if refusal[0] is not None:  # said by every process, as above
        print(f"train_sage_dist.py: {refusal[0]}", file=sys.stderr, flush=True)
        dist.destroy_process_group()
        raise SystemExit(2)

    data = Path(args.data)
    torch.manual_seed(args.seed)
    parts = _parts_dir(data)
    fanouts = args.fanouts
    host_group = qv.dist.host_groups()
    local_size = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    local_rank_in_node = rank % local_size if local_size > 1 else 0
    if args.partitioned:
        # The sampler's exchanges are of CPU tensors: a Gloo twin of the host group.
        # (Made on every process when needed: groups are created collectively.)
        sampler_group = host_group if dist.get_backend(host_group) == "gloo" else \
            qv.dist.host_groups(backend="gloo")
    # This host's files (--data may differ from host to host), read before anything waits for
    # the other hosts: a file missing or cut short on one host is said by every process at
    # once, where the others had waited out --timeout and then blamed a late host (a probe).
    try:
        meta = torch.load(data / "labels.pt") if parts == data / "parts" else None
        if args.partitioned:
            part = load_partition(parts, dist.get_rank(host_group))
        else:
            topo = qv.CSRTopo.load_shared(data / "graph")  # one copy per machine, mapped
    except Exception as error:  # noqa: BLE001 (said on every process, then ended)
        problem = f"process {rank}: {type(error).__name__}: {error}"
    else:
        problem = None
    problems = [None] * world
    dist.all_gather_object(problems, problem)
    if any(problems):
        print("train_sage_dist.py: " + "; ".join(p for p in problems if p), file=sys.stderr,
              flush=True)
        dist.destroy_process_group()
        raise SystemExit(2)
    if args.partitioned:
        try:
            sampler = DistGraphSampler(part, fanouts, sampler_group, timeout=args.timeout)
        except ValueError as error:  # another host's problem, named
            raise SystemExit(f"train_sage_dist.py: {error}") from None
        feature_dir = parts / "features"
        if meta is None:  # the user's own partition: its classes are its labels' range
            most = part.labels.max() if part.labels.numel() else torch.tensor(-1)
            most = most.to(torch.int64).reshape(1)
            dist.all_reduce(most, op=dist.ReduceOp.MAX, group=sampler_group)
            meta = {"num_classes": int(most) + 1}
        labels = torch.zeros(part.num_nodes, dtype=part.labels.dtype)
        labels[part.nodes] = part.labels  # only this host's seeds are ever looked up
        # Every process takes as many of its host's train ids as the smallest share allows.
        shares = torch.tensor([part.splits["train"].numel() // local_size,
                               part.splits["test"].numel() // local_size])
        dist.all_reduce(shares, op=dist.ReduceOp.MIN)
        per_process, test_per_process = shares.tolist()
        if per_process == 0:  # the same on every process: all stop here together
            # (one empty batch an epoch had made the loss NaN, blamed on --lr: a probe)
            owned = [None] * world
            dist.all_gather_object(owned, (dist.get_rank(host_group),
                                           part.splits["train"].numel()))
            short = sorted({host for host, count in owned if count < local_size})
            print(f"train_sage_dist.py: host(s) {short} own fewer train ids than their "
                  f"{local_size} process(es) (train ids a host: {dict(sorted(set(owned)))}): "
                  f"nothing to train on there; partition with another --partition-method, "
                  f"or train on fewer hosts", file=sys.stderr, flush=True)
            sampler.close()  # (its heartbeat first, as the end of a run does)
            dist.destroy_process_group()
            raise SystemExit(2)
        own_train = part.splits["train"][local_rank_in_node::local_size]
        test = part.splits["test"][local_rank_in_node::local_size]
        test = test[:min(test_per_process, args.eval_nodes // world)]
    else:
        sampler = qv.GraphSageSampler(topo, fanouts, device=device,
                                      mode="UVA" if use_gpu else "CPU")
        feature_dir = data / "features"
        labels = meta["y"]
        # Every process gets the same number of batches: DDP and the collective transports
        # need every process in every step.
        per_process = meta["train_idx"].numel() // world
        if per_process == 0:
            raise SystemExit(f"train_sage_dist.py: {meta['train_idx'].numel()} train ids "
                             f"cannot give each of the {world} processes one")
        test = meta["test_idx"][torch.randperm(meta["test_idx"].numel(),
                                               generator=torch.Generator().manual_seed(1))]
        # An equal share each: at most --eval-nodes, never more than the test set holds.
        count = min(args.eval_nodes, test.numel())
        test = test[:count - count % world].view(world, -1)[rank]
    feature = qv.dist.DistFeature.load(
        feature_dir, group=host_group, rank=device.index or 0,
        device_list=[device.index] if use_gpu else [],
        device_cache_size=args.cache_size if use_gpu else 0,
        transport=args.transport, timeout=args.timeout)
    # (after the load, which names a folder cut for another host count on every host)
    shard_rows = qv.dist.load_shard_map(feature_dir).local_rows(dist.get_rank(host_group))
    if rank == 0:
        print(f"{num_hosts} hosts x {world // num_hosts} processes, transport "
              f"{feature.transport.kind()}; host 0 holds {shard_rows:,} of "
              f"{feature.shape[0]:,} rows; device {device}", flush=True)

    labels = labels.to(device)
    model = SAGE(feature.shape[1], args.hidden, meta["num_classes"], len(fanouts)).to(device)
    model = DistributedDataParallel(model, device_ids=[device.index] if use_gpu else None)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    # The test sets of all processes have one size (the accuracy's denominator).
    test_size = torch.tensor([test.numel()])
    dist.all_reduce(test_size, op=dist.ReduceOp.MIN)
    test = test[:int(test_size)]
    if int(test_size) == 0:  # every process sees the same minimum: all stop here together
        print(f"train_sage_dist.py: some of the {world} processes have no test node to score: "
              f"--eval-nodes {args.eval_nodes} must be at least {world}, and the test split "
              f"must hold that many" + (" (with --partitioned, each host as many as its "
                                        "processes)" if args.partitioned else ""),
              file=sys.stderr, flush=True)
        _let_go(feature, sampler)
        model = optimizer = None  # (DDP's reducer holds the process group)
        dist.destroy_process_group()
        raise SystemExit(2)

    history = []
    # Tensors handed to collectives live until the process group is gone (see Run in
    # train_sage.py: Gloo frees finished work late, and teardown holds the GIL).
    collective_tensors = []
    for epoch in range(1, args.epochs + 1):
        model.train()
        clock = Clock(device)
        start = time.perf_counter()
        # The epoch's order from a generator of its own: the global one drifts apart between
        # ranks (dropout draws as many numbers as each rank's batches have nodes).
        order_gen = torch.Generator().manual_seed(args.seed * 1000 + epoch)
        if args.partitioned:  # this process's share of its host's train ids
            mine = own_train[torch.randperm(own_train.numel(), generator=order_gen)][:per_process]
        else:
            train_ids = meta["train_idx"]
            order = train_ids[torch.randperm(train_ids.numel(), generator=order_gen)]  # same on all
            mine = order[rank * per_process:(rank + 1) * per_process]
        # Summed on the device: reading each step's loss on the host would wait for the step.
        total_loss = torch.zeros((), device=device)
        for seeds in mine.split(args.batch_size):
            t = time.perf_counter()
            n_id, _, adjs = sampler.sample(seeds)
            t = clock.lap("sample", t)
            # rows stored narrower (partition_graph.py writes bf16 on a GPU) feed the model
            # in its float32
            x = feature[n_id].to(device, torch.float32)
            t = clock.lap("gather", t)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x, [adj.to(device) for adj in adjs]),
                                   labels[seeds.to(device)])
            loss.backward()
            optimizer.step()
            total_loss += loss.detach() * seeds.numel()  # a short last batch weighs less
            clock.lap("model", t)
        epoch_time = time.perf_counter() - start
        model.eval()
        correct = torch.zeros((), device=device)
        with torch.no_grad():
            for seeds in test.split(args.batch_size):
                n_id, _, adjs = sampler.sample(seeds)
                out = model.module(feature[n_id].to(device, torch.float32),
                                   [adj.to(device) for adj in adjs])
                correct += (out.argmax(-1) == labels[seeds.to(device)]).sum()
        # One collective for both sums; every process trains on per_process seeds an epoch.
        sums = torch.stack([correct.float(), total_loss.float()])
        dist.all_reduce(sums)
        collective_tensors.append(sums)
        accuracy = float(sums[0]) / (test.numel() * world)
        loss = float(sums[1]) / max(1, mine.numel() * world)
        totals = clock.totals
        if rank == 0:
            print(f"epoch {epoch}: {epoch_time:6.2f}s  (sample {totals['sample']:.2f}s, gather "
                  f"{totals['gather']:.2f}s, model {totals['model']:.2f}s)  loss {loss:.3f}  "
                  f"test accuracy {accuracy:.3f} (chance {1 / meta['num_classes']:.3f})",
                  flush=True)
        history.append({"epoch": epoch, "time": epoch_time, **totals, "loss": loss,
                        "accuracy": accuracy})
        if not math.isfinite(loss):  # the same sum on every process: all stop together
            _let_go(feature, sampler)
            optimizer = model = None
            dist.destroy_process_group()
            collective_tensors.clear()
            option_checks.stop_if_diverged(loss, epoch, args.lr)
    _let_go(feature, sampler)
    optimizer = model = None  # DDP's reducer holds the process group: let go of it first
    dist.destroy_process_group()
    collective_tensors.clear()
    return {"history": history, "num_classes": meta["num_classes"]}


if __name__ == "__main__":
    option_checks.run_main(main)
