"""Distributed features on two (or --hosts) GPUs of one machine, one process each as a host.

    python scripts/bench_dist.py [--graph products] [--batches 8] [--epoch] [--hosts 2]
                                 [--json out.json]

The products-like table (2.45M x 100 float32) is split over two hosts, 20% of its rows
(hottest by degree) replicated on both; the ids are the n_id of real sampled batches
([15, 10, 5], 1024 seeds). In one run it measures the GB/s of remote rows (only the ids
another host owns, so that local gathers do not flatter the figure) through:

  * DistFeature over NCCL (GPU to GPU), each host's table 20% cached in its GPU (the rest
    served from pinned host memory) and wholly in its GPU,
  * DistFeature over Gloo (CPU, TCP on loopback), its rows over 1 and 8 lanes (connections),
  * torch.distributed.rpc (rpc_sync of the owner's rows), the baseline,

beside the raw NCCL send/recv rate of the same bytes, and the whole batch through
DistFeature. With --epoch it also times a GraphSAGE epoch trained on both GPUs (DDP, each
host holding half the rows) against one GPU holding the whole table in host memory with
half as many rows cached. Prints a table; --json writes every number.

With --hosts N > 2 the table is split N ways and only the NCCL paths run (remote rows are
those of the N - 1 other hosts; the bound is an all-to-all of as many bytes, split evenly
over the peers); the epoch compares N hosts with one GPU holding as many cached rows as one
of them.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp
import torch.nn.functional as F

import torch_quiver_ops as qv
from torch_quiver_ops import _cli
from torch_quiver_ops.synthetic import synthetic_graph

# Batches of the CPU paths (Gloo, rpc), the first two a warm-up: 3 timed fetches left their
# figures within +-15% of each other between runs, so 8 now.
CPU_BATCHES = 10
_SHARD = None  # the rpc baseline's table in each worker


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_rows(local_ids: torch.Tensor) -> torch.Tensor:
    """The rpc baseline's remote function: rows of this worker's shard."""
    return _SHARD[local_ids]


def timed(fn, batches, sync):
    for ids in batches[:2]:
        fn(ids)
    sync()
    seconds = []
    for ids in batches[2:]:
        start = time.perf_counter()
        fn(ids)
        sync()
        seconds.append(time.perf_counter() - start)
    return seconds


def profile_fetches(feature, batches, sync, rank):
    """torch.profiler over a few fetches: where a fetch's time goes, host ops and kernels."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for ids in batches:
            feature[ids]
        sync()
    if rank == 0:
        averages = prof.key_averages()
        for key in ("self_cpu_time_total", "self_device_time_total"):
            try:
                print(f"\n-- profile of {len(batches)} fetches on host 0, by {key}:\n"
                      + averages.table(sort_by=key, row_limit=25), flush=True)
            except Exception as error:  # a sort key this torch does not know
                print(f"(profile by {key} unavailable: {error})", flush=True)


def worker(rank, args, directory, ports, results):
    global _SHARD
    hosts = args.hosts
    # The processes share the machine's cores, as torchrun's ranks would: each gets its
    # share, so that their thread pools do not spin against each other.
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // hosts))
    two_gpus = torch.cuda.device_count() >= hosts  # else only the CPU paths (Gloo, rpc)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(ports[0]))
    if two_gpus:
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        dist.init_process_group("nccl", rank=rank, world_size=hosts, device_id=device,
                                timeout=timedelta(seconds=300))
        gloo = dist.new_group(backend="gloo", timeout=timedelta(seconds=300))
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", rank=rank, world_size=hosts,
                                timeout=timedelta(seconds=300))
        gloo = dist.group.WORLD
    directory = Path(directory)
    batches = torch.load(directory / f"batches_{rank}.pt")
    shard_map = qv.dist.load_shard_map(directory / "features")
    remote = []  # each batch's ids owned by another host: what travels
    for ids in batches:
        owner, _ = shard_map.locate(ids)
        remote.append(ids[owner != rank])
    row_bytes = None
    out = {}

    def sync():
        if two_gpus:
            torch.cuda.synchronize(device)

    def rate(seconds, id_batches):
        rows = sum(b.numel() for b in id_batches[2:])
        return rows * row_bytes / sum(seconds) / 1e9

    row_bytes = qv.Feature.load_shared(directory / "features" / "host_0", device_list=[]).table[0].nbytes
    out["local_fraction"] = statistics.mean(
        1 - r.numel() / b.numel() for r, b in zip(remote, batches))
    if two_gpus:
        # NCCL, rows to this GPU.
        feature = qv.dist.DistFeature.load(directory / "features", rank=rank, device_list=[rank],
                                           device_cache_size="20%", transport="nccl", timeout=120)
        row_bytes = feature.local.table[0].nbytes
        on_gpu = [b.to(device) for b in remote]
        seconds = timed(lambda ids: feature[ids], on_gpu, sync)
        out["nccl_remote_gbps"] = rate(seconds, remote)
        out["nccl_remote_ms"] = statistics.median(seconds) * 1e3
        whole = [b.to(device) for b in batches]
        seconds = timed(lambda ids: feature[ids], whole, sync)
        out["nccl_batch_gbps"] = rate(seconds, batches)
        out["nccl_batch_ms"] = statistics.median(seconds) * 1e3
        out["local_fraction"] = statistics.mean(
            1 - r.numel() / b.numel() for r, b in zip(remote, batches))
        rows = feature[batches[-1].to(device)].cpu()  # every host takes part in every fetch
        if rank == 0:
            assert torch.equal(rows, torch.load(directory / "check_rows.pt")), "NCCL rows differ"
        feature.close()

        # NCCL again with each host's whole table in its GPU: what the transport itself moves,
        # without the owners' reads of their pinned host tier. Both ways of driving NCCL:
        # the transport's own communicator (the default), and c10d's all-to-all.
        # Two rounds, the two ways in turn, so that neither is always measured first.
        for how, setting in 2 * (("", "1"), ("_c10d", "0")):
            os.environ["QUIVER_NCCL_DIRECT"] = setting
            feature = qv.dist.DistFeature.load(directory / "features", rank=rank,
                                               device_list=[rank], device_cache_size="100%",
                                               transport="nccl", timeout=120)
            seconds = timed(lambda ids: feature[ids], on_gpu, sync)
            out.setdefault(f"nccl{how}_remote_hbm_rounds", []).append(rate(seconds, remote))
            out[f"nccl{how}_remote_hbm_ms"] = statistics.median(seconds) * 1e3
            if args.profile and not how:
                profile_fetches(feature, on_gpu[2:5], sync, rank)
            feature.close()
            del feature
        del os.environ["QUIVER_NCCL_DIRECT"]
        for how in ("", "_c10d"):
            out[f"nccl{how}_remote_hbm_gbps"] = statistics.mean(out[f"nccl{how}_remote_hbm_rounds"])

        # Raw NCCL send/recv of as many bytes (the bound): every host moves, at each step, the
        # largest of the hosts' remote batches, split evenly over its peers (two hosts: one
        # send and one receive).
        sizes = torch.tensor([r.numel() for r in remote], device=device)
        dist.all_reduce(sizes, op=dist.ReduceOp.MAX)
        peers = hosts - 1
        steps = [torch.empty(-(-int(n) * row_bytes // peers) * peers, dtype=torch.uint8,
                             device=device) for n in sizes]

        def sendrecv(buffer):
            theirs = torch.empty_like(buffer)
            part = buffer.numel() // peers
            ops = [op for p in range(hosts) if p != rank
                   for op in (dist.P2POp(dist.isend, buffer.narrow(0, 0, part), p),
                              dist.P2POp(dist.irecv, theirs.narrow(0, 0, part), p))]
            for work in dist.batch_isend_irecv(ops):
                work.wait()
        seconds = timed(sendrecv, steps, sync)
        out["nccl_sendrecv_gbps"] = sum(b.numel() for b in steps[2:]) / sum(seconds) / 1e9

    if hosts > 2:  # the CPU paths are measured between two hosts
        if args.epoch and two_gpus:
            out.update(epoch(rank, args, directory, device))
        (Path(results) / f"{rank}.json").write_text(json.dumps(out))
        dist.destroy_process_group()
        return
    # torch.distributed.rpc, the baseline: each host asks the other for its rows by local
    # index. Timed in each round beside Gloo, since runs differ by 10-15% between machines.
    _SHARD = qv.Feature.load_shared(directory / "features" / f"host_{rank}", device_list=[]).table
    options = rpc.TensorPipeRpcBackendOptions(init_method=f"tcp://127.0.0.1:{ports[1]}",
                                              num_worker_threads=16, rpc_timeout=300)
    rpc.init_rpc(f"host{rank}", rank=rank, world_size=hosts, rpc_backend_options=options)
    local_of = [shard_map.locate(r)[1] for r in remote[:CPU_BATCHES]]
    for _ in range(args.gloo_rounds):
        seconds = timed(lambda lids: rpc.rpc_sync(f"host{1 - rank}", serve_rows, args=(lids,)),
                        local_of, lambda: None)
        out.setdefault("rpc_remote_rounds", []).append(rate(seconds, remote[:CPU_BATCHES]))
        # Gloo, rows to the CPU, over each number of lanes (parallel connections) asked for.
        for lanes in args.gloo_lanes:
            feature = qv.dist.DistFeature.load(directory / "features", group=gloo,
                                               device_list=[], transport="gloo", timeout=120,
                                               lanes=lanes)
            seconds = timed(lambda ids: feature[ids], remote[:CPU_BATCHES], lambda: None)
            out.setdefault(f"gloo_{lanes}_lanes_rounds", []).append(
                rate(seconds, remote[:CPU_BATCHES]))
            feature.close()
    out["rpc_remote_gbps"] = statistics.mean(out["rpc_remote_rounds"])
    for lanes in args.gloo_lanes:
        out[f"gloo_{lanes}_lanes_remote_gbps"] = statistics.mean(out[f"gloo_{lanes}_lanes_rounds"])
    rpc.shutdown()

    if args.epoch and two_gpus:
        out.update(epoch(rank, args, directory, device))
    (Path(results) / f"{rank}.json").write_text(json.dumps(out))
    dist.destroy_process_group()


def epoch(rank, args, directory, device):
    """One GraphSAGE epoch over every host (DDP), after a warm-up epoch."""
    from torch.nn.parallel import DistributedDataParallel
    from train_sage import SAGE  # examples/ is on sys.path (main adds it)

    meta = torch.load(directory / "labels.pt")
    topo = qv.CSRTopo.load_shared(directory / "graph")
    sampler = qv.GraphSageSampler(topo, [15, 10, 5], device=device, mode="GPU")
    feature = qv.dist.DistFeature.load(directory / "features", rank=rank, device_list=[rank],
                                       device_cache_size="20%", transport="nccl", timeout=120)
    model = DistributedDataParallel(
        SAGE(feature.shape[1], 256, meta["num_classes"], 3).to(device), device_ids=[rank])
    optimizer = torch.optim.Adam(model.parameters(), lr=0.003)
    labels = meta["y"].to(device)
    per = meta["train_idx"].numel() // args.hosts
    times = []
    for _ in range(2):
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        order = meta["train_idx"][torch.randperm(meta["train_idx"].numel(),
                                                 generator=torch.Generator().manual_seed(len(times)))]
        for seeds in order[rank * per:(rank + 1) * per].split(1024):
            n_id, _, adjs = sampler.sample(seeds)
            x = feature[n_id]
            optimizer.zero_grad()
            F.cross_entropy(model(x, adjs), labels[seeds.to(device)]).backward()
            optimizer.step()
        torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    feature.close()
    return {"epoch_two_hosts_s": times[-1]}


def one_host_epoch(directory, x, device, cached_rows):
    """The same epoch on one GPU: the whole table in pinned host memory, as many rows
    cached as one GPU of the two-host run holds (so half of what the two hold together)."""
    from train_sage import SAGE

    meta = torch.load(directory / "labels.pt")
    topo = qv.CSRTopo.load_shared(directory / "graph")
    sampler = qv.GraphSageSampler(topo, [15, 10, 5], device=device, mode="GPU")
    feature = qv.Feature(device_list=[device.index], device_cache_size=cached_rows * x[0].nbytes,
                         csr_topo=topo).from_cpu_tensor(x)
    model = SAGE(x.size(1), 256, meta["num_classes"], 3).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.003)
    labels = meta["y"].to(device)
    times = []
    for _ in range(2):
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        order = meta["train_idx"][torch.randperm(meta["train_idx"].numel())]
        for seeds in order.split(1024):
            n_id, _, adjs = sampler.sample(seeds)
            optimizer.zero_grad()
            F.cross_entropy(model(feature[n_id], adjs), labels[seeds.to(device)]).backward()
            optimizer.step()
        torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return times[-1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--graph", default="products")
    parser.add_argument("--batches", type=int, default=8, help="timed batches per host")
    parser.add_argument("--epoch", action="store_true", help="also time a training epoch")
    parser.add_argument("--hosts", type=int, default=2,
                        help="processes as hosts, a GPU each (> 2: the NCCL paths only)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--gloo-lanes", default="1,8",
                        type=lambda text: [int(n) for n in text.split(",") if n],
                        help="lane counts the Gloo path is measured with (default 1,8; "
                             "empty: Gloo not measured)")
    parser.add_argument("--gloo-rounds", type=int, default=1,
                        help="rounds of rpc and Gloo, in turn (default 1)")
    parser.add_argument("--profile", action="store_true",
                        help="print torch.profiler tables of a few NCCL fetches (tables in HBM)")
    args = parser.parse_args()
    _cli.check_args(parser, args, {"batches": 1}, ["graph"])
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    hosts = args.hosts
    if hosts < 2:
        parser.error(f"--hosts must be >= 2, got {hosts}")
    two_gpus = torch.cuda.device_count() >= hosts
    if hosts > 2 and not two_gpus:
        parser.error(f"--hosts {hosts} needs {hosts} GPUs, this machine has "
                     f"{torch.cuda.device_count()}")
    if hosts > 2:
        args.gloo_lanes = []
    if not two_gpus:
        print("fewer than two GPUs: measuring the CPU paths (Gloo, rpc) only", flush=True)
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    start = time.perf_counter()
    graph = synthetic_graph(args.graph, device=device)
    topo = qv.CSRTopo(graph.edge_index, num_nodes=graph.num_nodes)
    x = graph.x
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and shutil.disk_usage(shm).free > 3 * x.nbytes else None
    directory = Path(tempfile.mkdtemp(prefix="quiver-dist-", dir=base))
    try:
        qv.dist.partition_features(x, directory / "features", hosts, topo.feature_order, 0.2)
        topo.save(directory / "graph")
        torch.save({"y": graph.y, "train_idx": graph.train_idx, "num_classes": graph.num_classes},
                   directory / "labels.pt")
        sampler = qv.GraphSageSampler(topo, [15, 10, 5], device=device,
                                      mode="GPU" if device.type == "cuda" else "CPU")
        seeds = graph.train_idx[torch.randperm(graph.train_idx.numel(),
                                               generator=torch.Generator().manual_seed(5))]
        batches = [sampler.sample_subgraph(b)[0].cpu()
                   for b in seeds.split(1024)[:hosts * (args.batches + 2)]]
        if len(batches) < hosts * 3:  # each host times at least one after two warm-ups
            raise SystemExit(f"--graph {args.graph} has {graph.train_idx.numel()} training "
                             f"seeds, {len(batches)} batches of 1024: too few for {hosts} "
                             f"hosts (3 each); take a larger graph")
        for rank in range(hosts):
            torch.save(batches[rank::hosts], directory / f"batches_{rank}.pt")
        torch.save(x[batches[0::hosts][-1]], directory / "check_rows.pt")
        rows = statistics.mean(b.numel() for b in batches)
        print(f"== {args.graph}: {tuple(x.shape)} {x.dtype} ({x.nbytes / 1e9:.2f} GB) over "
              f"{hosts} hosts, 20% replicated; {rows:,.0f} rows per batch; prepared in "
              f"{time.perf_counter() - start:.0f}s", flush=True)
        results = directory / "results"
        results.mkdir()
        mp.spawn(worker, args=(args, str(directory), (free_port(), free_port()), str(results)),
                 nprocs=hosts, join=True)
        per_host = [json.loads((results / f"{r}.json").read_text()) for r in range(hosts)]
        summary = {key: ([statistics.mean(v) for v in zip(*(h[key] for h in per_host))]
                         if isinstance(value, list) else statistics.mean(h[key] for h in per_host))
                   for key, value in per_host[0].items()}
        summary["per_host"] = per_host
        summary["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
        if args.epoch and two_gpus:
            shard_map = qv.dist.load_shard_map(directory / "features")
            cached = int(0.2 * shard_map.local_rows(0))  # "20%" of host 0's local table
            summary["one_host_cached_rows"] = cached
            summary["epoch_one_host_s"] = one_host_epoch(directory, x, device, cached)
    finally:
        shutil.rmtree(directory, ignore_errors=True)

    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))
    rpc_rate = summary.get("rpc_remote_gbps")
    keys = [("NCCL send/recv (bound)", "nccl_sendrecv_gbps"),
            ("DistFeature, NCCL, tables in HBM", "nccl_remote_hbm_gbps"),
            ("the same through c10d's all-to-all", "nccl_c10d_remote_hbm_gbps"),
            ("DistFeature, NCCL, 20% of tables cached", "nccl_remote_gbps"),
            *((f"DistFeature, Gloo, {n} lane{'s' if n > 1 else ''}", f"gloo_{n}_lanes_remote_gbps")
              for n in args.gloo_lanes),
            ("torch.distributed.rpc (baseline)", "rpc_remote_gbps")]
    print(f"\nremote rows only ({summary['local_fraction']:.0%} of a batch's ids are local), "
          f"GB/s per host, mean of {hosts} hosts:")
    print("| path | GB/s | x rpc |")
    print("|---|---:|---:|")
    for name, key in keys:
        if key in summary:
            versus = f"{summary[key] / rpc_rate:.1f}" if rpc_rate else ""
            print(f"| {name} | {summary[key]:.2f} | {versus} |")
    for how, name in (("", "own communicator"), ("_c10d", "c10d's all-to-all")):
        if f"nccl{how}_remote_hbm_rounds" in summary:
            rounds = " / ".join(f"{r:.1f}" for r in summary[f"nccl{how}_remote_hbm_rounds"])
            print(f"NCCL, tables in HBM, {name}: rounds {rounds} GB/s")
    for key in sorted(k for k in summary if k.endswith("_rounds") and not k.startswith("nccl")):
        rounds = summary[key]
        ratios = " / ".join(f"{r / p:.2f}x" for r, p in zip(rounds, summary["rpc_remote_rounds"]))
        print(f"{key[:-len('_rounds')]}: rounds {' / '.join(f'{r:.2f}' for r in rounds)} GB/s"
              f" ({ratios} rpc of the same round)")
    if "nccl_batch_gbps" not in summary:
        return
    print(f"\nwhole batches through DistFeature (NCCL): {summary['nccl_batch_gbps']:.1f} GB/s, "
          f"{summary['nccl_batch_ms']:.2f} ms per batch; remote part alone "
          f"{summary['nccl_remote_ms']:.2f} ms")
    if args.epoch and "epoch_two_hosts_s" in summary:
        print(f"GraphSAGE epoch: {hosts} hosts {summary['epoch_two_hosts_s']:.2f} s, one host "
              f"(all rows, {summary['one_host_cached_rows']:,} cached, as one GPU of the "
              f"{hosts}) {summary['epoch_one_host_s']:.2f} s")


if __name__ == "__main__":
    main()
