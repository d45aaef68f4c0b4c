"""Latency of small DistFeature fetches over Gloo on loopback: two processes as two hosts,
a 100,000 x 32 float table split between them, FETCHES fetches of IDS random ids each
(about half owned by the other host). Prints us per fetch (median, min and max of 5
rounds) for each library given, the libraries in turns, ROUNDS times:

    python scripts/bench_gloo_fetch_latency.py [--fetches 2000] [--ids 64] [--turns 2]
        [--libraries OLD.so,NEW.so]

With no --libraries, the installed library. A library other than the installed one is
loaded through $TORCH_QUIVER_OPS_LIBRARY with the installed Python package (to compare a
change in the C++ waits alone). $BENCH_LANES sets DistFeature's lanes (default 8)."""
import argparse
import datetime
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time


def worker(rank, port, out, fetches, ids):
    import torch
    import torch.distributed as dist
    import torch_quiver_ops as qv
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2, timeout=datetime.timedelta(seconds=60))
    rows = 100_000
    x = torch.randn(rows, 32, generator=torch.Generator().manual_seed(0))
    shard_map = qv.dist.build_shard_map(rows, 2, None, 0.0)
    local = qv.Feature(device_list=[])
    local.from_cpu_tensor(x[shard_map.local_ids(rank)].clone())
    feature = qv.dist.DistFeature(shard_map, local, transport="gloo", timeout=60.0,
                                  lanes=int(os.environ.get("BENCH_LANES", "8")))
    draw = torch.Generator().manual_seed(rank)
    batches = [torch.randint(0, rows, (ids,), generator=draw) for _ in range(fetches)]
    for batch in batches[:50]:
        feature[batch]
    rounds = []
    for _ in range(5):
        dist.barrier()
        began = time.perf_counter()
        for batch in batches:
            feature[batch]
        rounds.append((time.perf_counter() - began) / fetches * 1e6)
    if rank == 0:
        with open(out, "w") as file:
            file.write(f"{statistics.median(rounds)} {min(rounds)} {max(rounds)}")
    feature.close()
    dist.destroy_process_group()


def one_run(library, fetches, ids):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "result")
        env = dict(os.environ)
        if library:
            env["TORCH_QUIVER_OPS_LIBRARY"] = library
        subprocess.run([sys.executable, __file__, "--worker", out, str(port), str(fetches),
                        str(ids)], env=env, check=True)
        return [float(v) for v in open(out).read().split()]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fetches", type=int, default=2000)
    parser.add_argument("--ids", type=int, default=64)
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--libraries", default="")
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        import torch.multiprocessing as mp
        out, port, fetches, ids = args.worker
        mp.spawn(worker, args=(int(port), out, int(fetches), int(ids)), nprocs=2)
        return
    libraries = [lib for lib in args.libraries.split(",") if lib] or [""]
    print(f"{args.fetches} fetches of {args.ids} ids a round, 5 rounds; us per fetch")
    print("| turn | library | median | min | max |\n|---|---|---:|---:|---:|")
    for turn in range(args.turns):
        for library in libraries:
            median, low, high = one_run(library, args.fetches, args.ids)
            print(f"| {turn + 1} | {library or 'installed'} | {median:,.0f} | {low:,.0f} | "
                  f"{high:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
