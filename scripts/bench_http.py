"""The serving endpoint's HTTP layer alone: requests a second and latency through each HTTP
server of ``serve_http``, closed loop, against the same runtime driven with no HTTP (the
bound), on a graph small enough that sampling and the model cost little.

    python scripts/bench_http.py [--graph tiny] [--connections 32] [--seconds 5]
                                 [--servers stdlib-nagle,stdlib,uvicorn] [--json out.json]
                                 [--plot out.png]

Each server runs in a process of its own over a CPU runtime (``--cpu-samplers``, GraphSAGE
3 x 64 with random weights, fanouts [15, 10, 5], 3 node ids a request); the load is ``wrk``
(``apt install wrk``; a C client, so the client is not what is measured) with
``--connections`` keep-alive connections on one thread. ``stdlib-nagle`` is the standard
library's server as it was before TCP_NODELAY was set on its connections (headers and body
leave in two writes, and the second waited for the client's delayed ACK). The bound
(``direct``) is the runtime in the server's process, called by as many Python threads as
there are connections, with no HTTP in between.
"""
from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

FANOUTS = [15, 10, 5]
BODY = '{"nodes": [1, 2, 3]}'


def _serve(graph_name, kind, cpu_samplers, connections, seconds, out, stop):
    import torch

    import torch_quiver_ops as qv
    import torch_quiver_ops.serving as serving
    from torch_quiver_ops.synthetic import synthetic_graph
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                    "examples"))
    from train_sage import SAGE

    graph = synthetic_graph(graph_name, seed=0)
    topo = qv.CSRTopo(graph.edge_index, num_nodes=graph.num_nodes)
    torch.manual_seed(0)
    model = SAGE(graph.x.size(1), 64, graph.num_classes, len(FANOUTS))
    runtime = serving.ServingRuntime(model, topo, FANOUTS, graph.x, device="cpu",
                                     cpu_samplers=cpu_samplers, gpu_streams=0,
                                     max_queue=4096)
    if kind == "direct":
        answered, until = [0], time.perf_counter() + 1.0 + seconds
        latencies, lock = [], threading.Lock()

        def caller():
            while time.perf_counter() < until:
                start = time.perf_counter()
                runtime.predict([1, 2, 3], 60)
                with lock:
                    latencies.append(time.perf_counter() - start)

        threads = [threading.Thread(target=caller) for _ in range(connections)]
        for t in threads:
            t.start()
        time.sleep(1.0)  # warm-up, not counted
        with lock:
            latencies.clear()
        for t in threads:
            t.join()
        latencies.sort()
        # Nearest rank, as serve_load.py and wrk's rows beside it (int(q * n) is one past
        # it: the p99 of 100 latencies was their maximum).
        pick = lambda q: 1e3 * latencies[max(0, math.ceil(q * len(latencies)) - 1)]  # noqa: E731
        out.put({"rps": len(latencies) / seconds, "p50_ms": pick(0.5), "p99_ms": pick(0.99)})
        runtime.close()
        return
    if kind == "stdlib-nagle":
        serving._Handler.disable_nagle_algorithm = False
    server = serving.serve_http(runtime, server=kind.split("-")[0])
    out.put(server.url)
    stop.wait()
    server.shutdown()


def wrk(url, connections, seconds):
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(f'wrk.method = "POST"\nwrk.body = \'{BODY}\'\n'
                     'wrk.headers["Content-Type"] = "application/json"\n')
    try:
        subprocess.run(["wrk", "-t1", f"-c{connections}", "-d1s", "-s", script.name,
                        url + "/predict"], capture_output=True, check=True)  # warm-up
        text = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--latency",
                               "-s", script.name, url + "/predict"],
                              capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(script.name)

    def ms(label):
        value, unit = re.search(rf"{label}\s+([\d.]+)(us|ms|s)\b", text).groups()
        return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]

    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    return {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1)),
            "p50_ms": ms("50%"), "p99_ms": ms("99%"),
            "non_2xx": int(errors.group(1)) if errors else 0}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--graph", default="tiny", help="a synthetic preset (default: tiny)")
    parser.add_argument("--servers", default="stdlib-nagle,stdlib,uvicorn",
                        help="comma list of the HTTP servers measured (default: %(default)s)")
    parser.add_argument("--connections", type=int, default=32,
                        help="wrk's keep-alive connections (default: 32)")
    parser.add_argument("--seconds", type=int, default=5,
                        help="each measurement's length (default: 5)")
    parser.add_argument("--cpu-samplers", type=int, default=2,
                        help="the runtime's CPU sampling threads (default: 2)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="each server measured this many times, in turns (default: 2)")
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--plot", help="also draw the rows to this PNG (needs matplotlib)")
    args = parser.parse_args()
    kinds = ["direct"] + args.servers.split(",")
    bad = set(kinds) - {"direct", "stdlib-nagle", "stdlib", "uvicorn"}
    if bad:
        parser.error(f"--servers takes stdlib-nagle, stdlib and uvicorn, got {sorted(bad)}")
    from torch_quiver_ops import _cli
    # Checked here: in the server's process a bad one ended it, and this one waited 300 s.
    _cli.check_args(parser, args, {"connections": 1, "seconds": 1, "cpu_samplers": 1,
                                   "rounds": 1}, ["graph"])
    _cli.check_outputs(parser, args, ["json", "plot"])
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            parser.error("--plot needs matplotlib (pip install matplotlib)")
    if shutil.which("wrk") is None:
        raise SystemExit("bench_http.py needs wrk (apt install wrk)")
    context = mp.get_context("spawn")
    rows = []
    print(f"HTTP layer on {os.cpu_count()} cores: '{args.graph}' graph, {args.cpu_samplers} "
          f"CPU samplers, {args.connections} connections, {args.seconds} s a run",
          flush=True)
    for round_ in range(1, args.rounds + 1):
        for kind in kinds:
            out, stop = context.Queue(), context.Event()
            child = context.Process(target=_serve, args=(
                args.graph, kind, args.cpu_samplers, args.connections, args.seconds, out, stop),
                daemon=True)
            child.start()
            first = _cli.from_child(out, child, 300, f"the {kind} server's process")
            if kind == "direct":
                result = first
            else:
                try:
                    result = wrk(first, args.connections, args.seconds)
                finally:
                    stop.set()
            child.join(120)
            row = {"server": kind, "round": round_, **result}
            rows.append(row)
            print(f"  round {round_} {kind:<13} {row['rps']:8.0f} req/s  p50 "
                  f"{row['p50_ms']:7.2f} ms  p99 {row['p99_ms']:8.2f} ms"
                  + (f"  non-2xx {row['non_2xx']}" if row.get("non_2xx") else ""), flush=True)
    print(f"\n{'server':<13} {'req/s':>8} {'x direct':>9} {'p50 ms':>8} {'p99 ms':>9}  "
          f"(the median round of {args.rounds} by req/s"
          + ("; of two middle ones, the slower)" if args.rounds % 2 == 0 else ")"))
    summary = []
    for kind in kinds:
        mine = sorted((r for r in rows if r["server"] == kind), key=lambda r: r["rps"])
        mid = mine[(len(mine) - 1) // 2]  # (len // 2 had shown the faster of two rounds)
        summary.append(mid)
    bound = summary[0]["rps"]
    for row in summary:
        print(f"{row['server']:<13} {row['rps']:8.0f} {row['rps'] / bound:8.2f}x "
              f"{row['p50_ms']:8.2f} {row['p99_ms']:9.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "cores": os.cpu_count(), "rows": rows}, f, indent=1)
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
        names = [r["server"] for r in summary]
        left.bar(names, [r["rps"] for r in summary], color="#3b75af")
        left.set_ylabel("requests a second (closed loop)")
        right.bar(names, [r["p99_ms"] for r in summary], color="#d9822b")
        right.set_ylabel("p99 latency, ms")
        right.set_yscale("log")
        for ax in (left, right):
            ax.grid(axis="y", alpha=0.3)
        fig.suptitle(f"serve_http's HTTP layer: {args.connections} connections, "
                     f"{os.cpu_count()} cores, '{args.graph}' graph (direct: no HTTP)",
                     fontsize=10)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
