"""Where a partitioned GPU batch goes: a process a GPU, NCCL, the products-like graph in
--parts random parts (2), [15, 10, 5] from 1024 seeds. For each way the hops travel given
in --slots (as bench_dist_sampling.py's: blocks sized by what was seen replayed as CUDA
graphs, the same launched as usual, blocks of the bounds replayed, exact counts first) it
prints host 0's median ms a batch over 15 batches, then the profile of 10 more (kernels by
GPU time), and writes each profile's Chrome trace into --out. With
QUIVER_TRACE_TRANSPORT=1 the sampler also prints each batch's host phases.

    python3 scripts/probe_dist_sampling.py [--parts 2] [--slots seen,launched,exact] [--out DIR]
"""
import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch_quiver_ops as qv  # noqa: E402
from torch_quiver_ops import _cli
from bench_dist_sampling import seeds_for  # noqa: E402
from torch_quiver_ops.partition import DistGraphSampler, load_partition, partition_graph  # noqa: E402
from torch_quiver_ops.synthetic import synthetic_graph  # noqa: E402


def worker(rank, world, port, directory, slots, out):
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=120),
                            device_id=torch.device("cuda", rank))
    sampler = DistGraphSampler(load_partition(directory, rank), [15, 10, 5], timeout=60.0,
                               mode="GPU", bounded_slots=slots != "exact")
    sampler._sampler.set_capture_batches(slots != "launched")
    if slots == "bounded":
        sampler._sampler.set_slot_margin(0.0)
    batches = seeds_for(sampler.partition.splits["train"], 30, 1024, rank)
    for seeds in batches[:5]:  # warm-up (and the captures)
        sampler.sample_subgraph(seeds)
        torch.cuda.synchronize()
    times = []
    for seeds in batches[5:20]:
        dist.barrier()
        start = time.perf_counter()
        sampler.sample_subgraph(seeds)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for seeds in batches[20:30]:
            dist.barrier()
            sampler.sample_subgraph(seeds)
            torch.cuda.synchronize()
    if rank == 0:
        print(f"{slots}: median ms {1e3 * statistics.median(times):.3f}", flush=True)
        print(prof.key_averages().table(sort_by="device_time_total", row_limit=18,
                                        max_name_column_width=60), flush=True)
        prof.export_chrome_trace(os.path.join(out, f"trace_{slots}.json"))
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--parts", type=int, default=2)
    parser.add_argument("--slots", default="seen,launched,exact")
    args = parser.parse_args()
    _cli.check_args(parser, args, {"parts": 1}, [])
    graph = synthetic_graph("products", seed=0)
    topo = qv.CSRTopo(graph.edge_index, num_nodes=graph.num_nodes)
    with tempfile.TemporaryDirectory() as tmp:
        partition_graph(Path(tmp) / "parts", topo, args.parts, "random",
                        splits={"train": graph.train_idx})
        for slots in args.slots.split(","):
            port = 29500 + int.from_bytes(os.urandom(2), "little") % 20000
            mp.spawn(worker, args=(args.parts, port, str(Path(tmp) / "parts"), slots, args.out),
                     nprocs=args.parts, join=True)


if __name__ == "__main__":
    main()
