"""Open-loop load against the serving endpoint: Poisson arrivals at given rates, request
sizes mostly small with a heavy tail; p50 / p99 / p99.9 latency and achieved throughput
for CPU-only, GPU-only and dispatched sampling, and a plot of latency against offered load.

    python scripts/serve_load.py [--graph products] [--rates 200,500,1000,2000]
                                 [--duration 5] [--json out.json]
    python scripts/serve_load.py --url http://127.0.0.1:8000 --rates 100   # a running server
    python scripts/serve_load.py --plot out.json --png out.png

Self-hosted (no ``--url``): for each configuration a server process is started on
localhost over a synthetic graph (``--graph``) and a GraphSAGE model with random weights
(3 layers, hidden 256; serving latency does not depend on the weights), fanouts [15, 10,
5]: ``cpu`` (CPU samplers only), ``gpu`` (GPU streams only) and ``dispatch`` (both, the
threshold calibrated at start-up); ``gpu2`` (``--configs gpu2``, two GPUs: a runtime per GPU
as ``gpu``, behind a ServingPool that sends each request to the runtime with fewer requests outstanding). The load runs in this process, the server in its own,
so the two do not share an interpreter lock. Arrivals are Poisson at the offered rate;
each request's size is ``floor(U ** (-1 / 1.5))`` ids (Pareto, mean about 3, one in a
thousand over 100), capped at 256, drawn uniformly from the nodes. Latency runs from a
request's scheduled arrival to its answer, so a client that falls behind is charged, as
open-loop load must be; 503s are counted apart. Each configuration is warmed up for a
second at the lowest rate first. ``--model package`` compiles the model once with
AOTInductor (``package_for_serving``) and every runtime runs it on C++ threads, so no batch
waits for the server's interpreter lock.
"""
from __future__ import annotations

import argparse
import collections
import copy
import http.client
import json
import math
import multiprocessing as mp
import os
import sys
import tempfile
import threading
import time
from urllib.parse import urlparse

try:
    import torch
except ImportError:  # --plot needs only matplotlib
    torch = None

ALPHA, MAX_SIZE, FANOUTS = 1.5, 256, [15, 10, 5]
CONFIGS = {"cpu": dict(cpu_samplers=8, gpu_streams=0),
           "gpu": dict(cpu_samplers=0, gpu_streams=4),
           "dispatch": dict(cpu_samplers=8, gpu_streams=4),
           # a runtime per GPU (as "gpu" each), a ServingPool in front
           "gpu2": dict(cpu_samplers=0, gpu_streams=4, gpus=2)}


def _serve_child(graph_name, config, port_out, stop, direct_rates=(), duration=0.0,
                 package=None, server_kind="auto", senders=64):
    import torch_quiver_ops as qv
    from torch_quiver_ops.serving import (ServingPool, ServingRuntime, package_for_serving,
                                          serve_http)
    from torch_quiver_ops.synthetic import synthetic_graph
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                    "examples"))
    from train_sage import SAGE

    gpu = torch.cuda.is_available() and qv.cuda_kernels_built()
    device = torch.device("cuda", 0) if gpu else torch.device("cpu")
    graph = synthetic_graph(graph_name, seed=0, device=device if gpu else None)
    topo = qv.CSRTopo(graph.edge_index, num_nodes=graph.num_nodes)
    torch.manual_seed(0)
    model = SAGE(graph.x.size(1), 256, graph.num_classes, len(FANOUTS))
    options = dict(CONFIGS[config])
    gpus = options.pop("gpus", 1)
    if gpus > 1 and gpus > (torch.cuda.device_count() if gpu else 0):
        raise SystemExit(f"{config} needs {gpus} GPUs")
    feature = qv.Feature(rank=0, device_list=list(range(gpus)) if gpu else [],
                         device_cache_size="20%" if gpu else 0, csr_topo=topo)
    feature.from_cpu_tensor(graph.x)
    if not gpu:
        options.update(gpu_streams=0, cpu_samplers=max(options["cpu_samplers"], 1))
    if package is not None and not os.path.exists(package):  # the first configuration's
        package_for_serving(model, len(FANOUTS), graph.x.size(1), package, device=device)
    runtimes = [ServingRuntime(package or copy.deepcopy(model), topo, FANOUTS, feature,
                               device=torch.device("cuda", d) if gpu else device,
                               max_batch_nodes=1024, max_wait_ms=2.0, max_queue=4096,
                               **options)
                for d in range(gpus)]
    runtime = runtimes[0] if gpus == 1 else ServingPool(runtimes)
    # The runtime driven in this process with no HTTP in between, at the rates asked: the
    # HTTP layer's cost is the difference to the same rate over HTTP.
    direct = []
    if direct_rates:
        run_load(runtime, graph.num_nodes, direct_rates[0], 1.0, senders, seed=99)  # warm-up
    for rate in direct_rates:
        errors = collections.Counter()
        # As many senders as the HTTP rows have (64 had been fixed here, so with another
        # --senders the difference held the senders' change too).
        result = run_load(runtime, graph.num_nodes, rate, duration, senders, errors=errors)
        direct.append((rate, result, errors))
    server = serve_http(runtime, server=server_kind)
    port_out.put((server.url, server.kind, graph.num_nodes, runtime.threshold, direct))
    stop.wait()
    server.shutdown()
    port_out.put(runtime.stats())


def run_load(target, num_nodes, rate, duration, senders, seed=0, errors=None):
    """Open-loop Poisson load on ``target``, an endpoint's URL or a ServingRuntime called
    in this process: returns latencies (s) of answered requests, 503s, errors, the span
    (the wall time, at least ``duration``), and how late (s) each request left its sender:
    ``senders`` threads send, so past what they can keep in flight requests leave late and
    the offered rate is not met (the rows say so, rather than count the senders' backlog as
    the server's latency alone). Arrivals are a Poisson process of ``rate`` over
    ``duration`` seconds: a fixed count spread over a random span had capped answered/s
    below the offered rate even for a server that answered every request at once."""
    gen = torch.Generator().manual_seed(seed)
    expected = rate * duration
    draws = int(expected + 8 * math.sqrt(expected) + 16)  # enough, but for ~1e-15 of runs
    times = torch.empty(0, dtype=torch.float64)
    while times.numel() == 0 or times[-1] < duration:
        gaps = -torch.log(torch.rand(draws, generator=gen, dtype=torch.float64)
                          .clamp(min=1e-12)) / rate
        times = torch.cat([times, (times[-1] if times.numel() else 0.0) + torch.cumsum(gaps, 0)])
    arrivals = times[times < duration].tolist() or [0.0]
    count = len(arrivals)
    sizes = torch.floor(torch.rand(count, generator=gen).clamp(min=1e-12) ** (-1 / ALPHA))
    sizes = sizes.clamp(max=MAX_SIZE).long().tolist()
    ids = [torch.randint(num_nodes, (s,), generator=gen).tolist() for s in sizes]
    parsed = urlparse(target) if isinstance(target, str) else None
    next_index = [0]
    lock = threading.Lock()
    latencies, refused, late = [], [0], []
    failed = errors if errors is not None else collections.Counter()  # error -> count
    start = time.perf_counter() + 0.2

    def call(nodes):
        from torch_quiver_ops.serving import Overloaded
        try:
            target.predict(nodes, 60)
            return 200
        except Overloaded:
            return 503
        except Exception as error:  # noqa: BLE001 (counted, and kept by kind)
            with lock:
                failed[f"{type(error).__name__}: {error}"[:200]] += 1
            return -1

    def post(connection, nodes):
        try:
            connection.request("POST", "/predict", json.dumps({"nodes": nodes}),
                               {"Content-Type": "application/json"})
            answer = connection.getresponse()
            body = answer.read()
            if answer.status not in (200, 503):
                with lock:
                    failed[f"HTTP {answer.status}: {body[:200]!r}"] += 1
            return answer.status
        except (OSError, http.client.HTTPException) as error:
            with lock:
                failed[f"{type(error).__name__}: {error}"[:200]] += 1
            return -1

    def sender():
        def connect():
            # Lazy: the connection opens at its first request, inside post's error counting.
            return http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=60)

        connection = connect() if parsed else None
        last_used, broken = time.perf_counter(), False
        while True:
            with lock:
                i = next_index[0]
                next_index[0] += 1
            if i >= count:
                if connection:
                    connection.close()
                return
            due = start + arrivals[i]
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            sent_late = max(0.0, time.perf_counter() - due)
            if connection is None:
                status = call(ids[i])
            else:
                # A new connection after a broken one, or after 4 s idle: the endpoints
                # close idle connections after 5 s (uvicorn, stdlib).
                if broken or time.perf_counter() - last_used > 4.0:
                    connection.close()
                    connection = connect()
                status = post(connection, ids[i])
                last_used, broken = time.perf_counter(), status == -1
            done = time.perf_counter()
            with lock:
                late.append(sent_late)
                if status == 200:
                    latencies.append(done - due)
                elif status == 503:
                    refused[0] += 1

    threads = [threading.Thread(target=sender) for _ in range(senders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    return latencies, refused[0], sum(failed.values()), max(wall, duration), late


def percentile(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(math.ceil(q * len(values))) - 1)]


def row_of(config, rate, latencies, refused, failed, wall, late, threshold=None, errors=None):
    return {"config": config, "offered_rps": rate, "achieved_rps": len(latencies) / wall,
            "sent_late_p99_ms": 1e3 * percentile(late, 0.99),
            "p50_ms": 1e3 * percentile(latencies, 0.50),
            "p99_ms": 1e3 * percentile(latencies, 0.99),
            "p999_ms": 1e3 * percentile(latencies, 0.999),
            "answered": len(latencies), "refused_503": refused,
            "failed": failed, "errors": dict((errors or collections.Counter()).most_common(3)),
            "threshold": threshold}


def print_row(row):
    def rate(value):  # (a rate below 1 had been printed as 0)
        return f"{value:7.0f}" if value >= 10 else f"{value:7.2f}"
    print(f"  {row['config']:15s} {rate(row['offered_rps'])} req/s offered  "
          f"{rate(row['achieved_rps'])} answered/s  p50 {row['p50_ms']:7.2f} ms  p99 "
          f"{row['p99_ms']:7.2f} ms  p99.9 {row['p999_ms']:7.2f} ms  503s "
          f"{row['refused_503']}  errors {row['failed']}  sent late p99 "
          f"{row['sent_late_p99_ms']:.1f} ms"
          + "".join(f"\n      {n} x {e}" for e, n in row["errors"].items()), flush=True)


def measure(url, num_nodes, config, args, threshold=None):
    # Warm-up, not measured: the first requests pay for allocations, kernels' first
    # launches, CUDA graph captures and the connections.
    run_load(url, num_nodes, args.rates[0], 1.0, args.senders, seed=99)
    rows = []
    for rate in args.rates:
        errors = collections.Counter()
        row = row_of(config, rate, *run_load(url, num_nodes, rate, args.duration, args.senders,
                                             errors=errors), threshold, errors)
        rows.append(row)
        print_row(row)
    return rows


def plot(path, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = json.load(open(path))["rows"]
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, config in enumerate(dict.fromkeys(r["config"] for r in rows
                                             if not r["config"].endswith(" direct"))):
        mine = [r for r in rows if r["config"] == config]
        ax.plot([r["offered_rps"] for r in mine], [r["p99_ms"] for r in mine], "o-",
                color=f"C{i}", label=f"{config} p99")
        ax.plot([r["offered_rps"] for r in mine], [r["p50_ms"] for r in mine], "x--",
                color=f"C{i}", alpha=0.5, label=f"{config} p50")
    ax.axhline(30, color="#c44", lw=1, ls=":", label="30 ms objective")
    ax.set_xlabel("offered load, requests/s")
    ax.set_ylabel("latency, ms")
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    ax.set_title("GraphSAGE serving, [15, 10, 5], Poisson arrivals")
    fig.tight_layout()
    fig.savefig(png, dpi=120)


MAX_REQUESTS_A_RUN = 10**8  # a rate's arrivals are drawn at once, 8 bytes each
MAX_SENDERS = 4096  # a thread each


def rates_of(parser, text: str, name: str, empty_ok: bool = False):
    """Comma-separated request rates, each finite and > 0, or parser.error naming ``name``."""
    try:
        rates = [float(r) for r in text.split(",") if r or not empty_ok]
    except ValueError:
        parser.error(f"{name} takes comma-separated rates such as 200,500, got {text!r}")
    if not all(math.isfinite(r) and r > 0 for r in rates) or not (rates or empty_ok):
        parser.error(f"{name} must be rates > 0 (requests/s), got {text!r}")
    return rates


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--graph", default="products",
                        help="the self-hosted server's synthetic preset (default: products)")
    parser.add_argument("--url", default=None, help="a running server (else self-hosted)")
    parser.add_argument("--num-nodes", type=int, default=None, help="with --url: its nodes")
    parser.add_argument("--rates", default="200,500,1000,2000",
                        help="comma list of offered loads, requests a second (default: "
                             "%(default)s)")
    parser.add_argument("--duration", type=float, default=5.0,
                        help="seconds of load at each rate (default: 5)")
    parser.add_argument("--senders", type=int, default=64,
                        help="client threads sending the requests (default: 64)")
    parser.add_argument("--configs", default=None,
                        help=f"comma-separated, of {', '.join(CONFIGS)} (default: "
                             f"cpu,gpu,dispatch on a GPU host, cpu elsewhere)")
    parser.add_argument("--direct-rates", default="",
                        help="also drive each self-hosted runtime in its own process, with no "
                             "HTTP, at these rates (rows 'CONFIG direct'): the HTTP layer's "
                             "cost is the difference")
    parser.add_argument("--model", default="python", choices=["python", "package"],
                        help="python: the model in Python threads; package: compiled by "
                             "AOTInductor (package_for_serving) and run by the runtime's C++ "
                             "threads")
    parser.add_argument("--server", default="auto", choices=["auto", "uvicorn", "stdlib"],
                        help="the self-hosted endpoint's HTTP server (serve_http's server)")
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--plot", metavar="JSON",
                        help="draw a --json file's rows instead of measuring (needs matplotlib)")
    parser.add_argument("--png", help="the figure --plot draws (default: serve_load.png)")
    args = parser.parse_args()
    if args.png is not None and not args.plot:  # (it was ignored without a word)
        parser.error("--png names the figure that --plot draws from a --json file: give "
                     "--plot too")
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            parser.error("--plot draws with matplotlib, which is not installed here "
                         "(pip install matplotlib)")
        plot(args.plot, args.png or "serve_load.png")
        return
    # Checked before any server starts: bad values used to end in a thread's traceback, or
    # in rows of negative or NaN rates with exit status 0.
    args.rates = rates_of(parser, args.rates, "--rates")
    rates_of(parser, args.direct_rates, "--direct-rates", empty_ok=True)
    if not args.duration > 0 or not math.isfinite(args.duration):
        parser.error(f"--duration must be > 0 seconds, got {args.duration}")
    if not 1 <= args.senders <= MAX_SENDERS:  # a thread each (10**8 grew without a word)
        parser.error(f"--senders must be in [1, {MAX_SENDERS}], got {args.senders}")
    # The arrival times are drawn up front: 10**12 a second ended in an allocation failure.
    every_rate = args.rates + [float(r) for r in args.direct_rates.split(",") if r]
    most = max(every_rate)
    if min(every_rate) * args.duration < 1:  # its one request arrived long past --duration
        parser.error(f"--rates / --direct-rates {min(every_rate):g} x --duration "
                     f"{args.duration:g} s is less than one request")
    if most * args.duration > MAX_REQUESTS_A_RUN:
        parser.error(f"--rates x --duration asks for {most * args.duration:.3g} requests in "
                     f"one run, more than {MAX_REQUESTS_A_RUN:,}")
    from torch_quiver_ops import _cli
    if args.json is not None:  # found only once every rate was measured: the rows lost
        _cli.check_output_file(parser, "json", args.json)
    if args.url:
        try:  # (a port of 99999 or "abc" failed in every sender thread, then read as a run)
            url = urlparse(args.url)
            url.port
        except ValueError as error:
            url = None
            why = f" ({error})"
        if url is None or url.scheme != "http" or not url.hostname:
            parser.error(f"--url must be an http:// URL such as http://127.0.0.1:8000, got "
                         f"{args.url!r}{why if url is None else ''}")
        if url.path not in ("", "/"):  # (it posted to /predict whatever the path said)
            parser.error(f"--url names the server, whose /predict takes the requests: give "
                         f"it without a path, got {args.url!r}")
        if args.num_nodes is not None and not 1 <= args.num_nodes < 2**63:
            parser.error(f"--num-nodes must be in [1, 2**63), got {args.num_nodes}")
        # Options of the servers this script starts itself: with --url they had been
        # ignored without a word.
        own = [f"--{name.replace('_', '-')}" for name in ("graph", "configs", "direct_rates",
                                                           "model", "server")
               if getattr(args, name) != parser.get_default(name)]
        if own:
            parser.error(f"{', '.join(own)}: options of the servers this script starts; "
                         f"with --url it measures the server there (leave them out)")
    elif args.num_nodes is not None:  # the runtime it starts counts its graph's own nodes
        parser.error("--num-nodes counts the nodes of the endpoint at --url: give --url too, "
                     "or leave it out")
    else:
        from torch_quiver_ops.synthetic import PRESETS
        if args.graph not in PRESETS:
            parser.error(f"--graph must be one of {sorted(PRESETS)}, got {args.graph!r}")
        import torch_quiver_ops as qv
        gpus = torch.cuda.device_count() if qv.cuda_kernels_built() else 0
        if args.configs is None:
            args.configs = "cpu,gpu,dispatch" if gpus else "cpu"
        configs = args.configs.split(",")
        unknown = [c for c in configs if c not in CONFIGS]
        if unknown:
            parser.error(f"--configs takes {', '.join(CONFIGS)}, got {unknown}")
        # Run as asked or not at all: without GPUs the rows would be CPU-only ones, labelled
        # as the GPU configurations.
        for config in configs:
            needs = 0 if CONFIGS[config]["gpu_streams"] == 0 else CONFIGS[config].get("gpus", 1)
            if needs > gpus:
                parser.error(f"--configs {config} samples on {needs} GPU(s), and this machine "
                             f"has {gpus} usable")
    rows = []
    if args.url:
        if args.num_nodes is None:
            parser.error("--url needs --num-nodes")
        rows = measure(args.url, args.num_nodes, "server", args)
    else:
        context = mp.get_context("spawn")
        scratch = None
        if args.model == "package":
            scratch = tempfile.mkdtemp(prefix="serve-load-")
        package = os.path.join(scratch, "sage.pt2") if scratch else None
        for config in args.configs.split(","):
            port_out, stop = context.Queue(), context.Event()
            direct_rates = [float(r) for r in args.direct_rates.split(",") if r]
            child = context.Process(target=_serve_child,
                                    args=(args.graph, config, port_out, stop, direct_rates,
                                          args.duration, package, args.server, args.senders))
            child.start()
            url, kind, num_nodes, threshold, direct = _cli.from_child(port_out, child, 900)
            print(f"{config}: serving at {url} ({kind}), dispatch threshold PSGS {threshold}", flush=True)
            for rate, result, errors in direct:
                rows.append(row_of(f"{config} direct", rate, *result, threshold, errors))
                print_row(rows[-1])
            rows += measure(url, num_nodes, config, args, threshold)
            stop.set()
            stats = _cli.from_child(port_out, child, 120)
            child.join(60)
            print(f"  {config}: {stats}", flush=True)
            rows[-1]["server_stats"] = stats
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=1)
    refused = sorted({error for row in rows for error in row["errors"]
                      if error.startswith("HTTP 4")})
    if refused:  # requests the server found malformed: the rows measure refusals
        hint = ""
        if any(error.startswith("HTTP 400") for error in refused) and args.url:
            hint = ": is --num-nodes at most the nodes of its graph?"
        elif any(error.startswith("HTTP 413") for error in refused):
            hint = (f": requests carry up to {MAX_SIZE} ids, which the server's "
                    f"max_batch_nodes must allow")
        sys.exit(f"serve_load.py: the server refused requests as bad ({'; '.join(refused)})"
                 f"{hint}")
    if rows and not any(row["answered"] for row in rows):  # a run that measured nothing
        sys.exit(f"serve_load.py: no request was answered ({sum(r['failed'] for r in rows)} "
                 f"failed; the errors are above): is the server at {args.url or 'each config'} "
                 f"up?")


if __name__ == "__main__":
    main()
