"""Serves the GraphSAGE model trained by the main job over HTTP, each batch of requests
sampled on the CPU or the GPU by its predicted cost (torch_quiver_ops.serving).

    bash scripts/train.sh --save build/sage.pt         # the main job, keeping its model
    python examples/serve_sage.py build/sage.pt        # http://127.0.0.1:8000
    curl -s -X POST localhost:8000/predict -d '{"nodes": [1, 2, 3]}'
    curl -s localhost:8000/health

The graph is rebuilt from the preset and seed the model was trained on. Answers are each
node's predicted class; a bad body or id gets a 400 naming it, too many ids a 413, a full
queue a 503. Ctrl-C (or SIGTERM, or ``--duration``) stops taking connections and answers
every request already accepted before it exits. ``--package build/sage.pt2`` first compiles
the model with AOTInductor (a minute or so) and serves it from the runtime's C++ threads,
so that no batch waits for Python's interpreter lock.
"""
from __future__ import annotations

import argparse
import math
import os
import signal
import socket
import sys
import threading
from pathlib import Path

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import option_checks  # noqa: E402  (the examples' shared option checks)
from train_sage import SAGE  # noqa: E402

import torch_quiver_ops as qv  # noqa: E402
from torch_quiver_ops import _cli  # noqa: E402
from torch_quiver_ops.serving import (MAX_CONNECTIONS, ServingRuntime,  # noqa: E402
                                      package_for_serving, serve_http)
from torch_quiver_ops.synthetic import PRESETS, synthetic_graph  # noqa: E402


def checkpoint_field_errors(checkpoint: dict) -> list:
    """What is wrong with the fields train_sage.py --save writes, one sentence each."""
    def is_int(value):  # True is an int to Python, and no count or seed
        return isinstance(value, int) and not isinstance(value, bool)

    def count(value):
        return is_int(value) and value >= 1

    errors = []
    size = checkpoint["size"]
    if not isinstance(size, str) or size not in PRESETS:
        errors.append(f"size must be a preset name ({', '.join(PRESETS)}), got {size!r}")
    if not is_int(checkpoint["seed"]):
        errors.append(f"seed must be an int, got {checkpoint['seed']!r}")
    if checkpoint["graph_device"] not in ("cpu", "cuda"):
        errors.append(f"graph_device must be 'cpu' or 'cuda', got {checkpoint['graph_device']!r}")
    try:  # the sampling ops' own check
        qv.ops.check_fanouts(qv.ops.integer_fanouts(checkpoint["fanouts"]))
    except (TypeError, ValueError) as error:
        errors.append(str(error))
    for key in ("hidden", "in_channels", "num_classes"):
        if not count(checkpoint[key]):
            errors.append(f"{key} must be an int >= 1, got {checkpoint[key]!r}")
    if not isinstance(checkpoint["state_dict"], dict):
        errors.append(f"state_dict must be a dict of tensors, got "
                      f"{type(checkpoint['state_dict']).__name__}")
    if errors:
        return errors
    # What the fields say against the graph and the weights: either had started a server
    # that answered every request with a 500, or failed in a traceback once the graph was
    # built (a probe).
    columns = PRESETS[size].num_features
    if checkpoint["in_channels"] != columns:
        return [f"in_channels {checkpoint['in_channels']} does not match the {columns} "
                f"feature columns of graph {size!r}"]
    try:
        model_of(checkpoint).load_state_dict(checkpoint["state_dict"])
    except (RuntimeError, TypeError, ValueError) as error:
        details = (str(error).splitlines()[1:2] or [""])[0].strip()  # the first misfit
        return [f"state_dict does not fit SAGE(in_channels={checkpoint['in_channels']}, "
                f"hidden={checkpoint['hidden']}, num_classes={checkpoint['num_classes']}, "
                f"{len(checkpoint['fanouts'])} layers): {details or error}"]
    return []


def model_of(checkpoint: dict) -> SAGE:
    """The model the checkpoint's fields describe, with fresh weights."""
    return SAGE(checkpoint["in_channels"], checkpoint["hidden"], checkpoint["num_classes"],
                len(checkpoint["fanouts"]))


def build_runtime(checkpoint: dict, args) -> ServingRuntime:
    has_gpu = option_checks.cuda_usable()
    gpu = has_gpu and args.gpu_streams > 0
    device = torch.device("cuda", torch.cuda.current_device()) if gpu else torch.device("cpu")
    # The graph the model was trained on: a graph drawn on a GPU differs from the one the
    # CPU draws from the same seed, so it is drawn where it was (on a GPU whatever
    # --gpu-streams says), and a server without a GPU refuses rather than serve another.
    graph_device = None
    if checkpoint["graph_device"] == "cuda":
        if not has_gpu:
            raise SystemExit(f"serve_sage: {checkpoint['size']!r} was trained on a graph drawn "
                             f"on a GPU, which this machine lacks: the CPU would draw another "
                             f"graph from seed {checkpoint['seed']}")
        graph_device = torch.device("cuda", torch.cuda.current_device())
    graph = synthetic_graph(checkpoint["size"], seed=checkpoint["seed"], device=graph_device)
    topo = qv.CSRTopo(graph.edge_index, num_nodes=graph.num_nodes)
    model = model_of(checkpoint)
    model.load_state_dict(checkpoint["state_dict"])
    feature = qv.Feature(rank=device.index or 0, device_list=[device.index] if gpu else [],
                         device_cache_size=args.cache_size if gpu else 0, csr_topo=topo)
    feature.from_cpu_tensor(graph.x)
    served = model
    if args.package:
        served = package_for_serving(model, len(checkpoint["fanouts"]), graph.x.size(1),
                                     args.package, device=device, dtype=graph.x.dtype)
    return ServingRuntime(served, topo, checkpoint["fanouts"], feature, device=device,
                          cpu_samplers=args.cpu_samplers,
                          gpu_streams=args.gpu_streams if gpu else 0,
                          max_batch_nodes=args.max_batch_nodes, max_wait_ms=args.max_wait_ms,
                          max_queue=args.max_queue, max_queue_nodes=args.max_queue_nodes,
                          threshold=args.threshold)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="the file train_sage.py --save wrote")
    parser.add_argument("--host", default="127.0.0.1",
                        help="the address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000,
                        help="the port to listen on, 0 for any free one (default: 8000)")
    parser.add_argument("--cpu-samplers", type=int, default=4,
                        help="threads sampling batches on the CPU (default: 4)")
    parser.add_argument("--gpu-streams", type=int, default=2,
                        help="CUDA streams sampling batches on the GPU, 0 for none "
                             "(default: 2; none without a GPU)")
    parser.add_argument("--cache-size", default="20%",
                        help="feature rows kept in GPU memory: a share such as 20%% or bytes "
                             "such as 2G (default: 20%%)")
    parser.add_argument("--max-batch-nodes", type=int, default=1024,
                        help="node ids in one batch at most, and in one request (default: 1024)")
    parser.add_argument("--max-wait-ms", type=float, default=2.0,
                        help="a batch closes when its oldest request has waited this long "
                             "(default: 2.0)")
    parser.add_argument("--max-queue", type=int, default=1024,
                        help="requests waiting at most; past it a request gets a 503 "
                             "(default: 1024)")
    parser.add_argument("--max-queue-nodes", type=int, default=None,
                        help="node ids waiting at most, over every queued request; a request "
                             "past it gets a 503 at once (default: 8 x --max-batch-nodes)")
    parser.add_argument("--threshold", type=float, default=None,
                        help="PSGS at or below which a batch samples on the CPU (default: "
                             "calibrated at start-up on this machine)")
    parser.add_argument("--package", default=None,
                        help="compile the model into this AOTInductor package and serve it "
                             "from C++ threads (default: the model in Python threads)")
    parser.add_argument("--server", default="auto", choices=["auto", "uvicorn", "stdlib"],
                        help="the HTTP server: uvicorn (where installed; auto picks it) or the "
                             "standard library's threads")
    parser.add_argument("--max-connections", type=int, default=MAX_CONNECTIONS,
                        help="connections served at once; past it the stdlib server leaves new "
                             "ones in the backlog until one ends, uvicorn answers 503 "
                             f"(default: {MAX_CONNECTIONS})")
    parser.add_argument("--duration", type=float, default=None,
                        help="serve this many seconds, then shut down (default: until "
                             "Ctrl-C or SIGTERM)")
    args = parser.parse_args(argv)
    # Checked before the graph is rebuilt (and a package compiled): seconds to minutes.
    for name in ("cpu_samplers", "max_batch_nodes", "max_queue", "max_connections"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.max_queue_nodes is not None and args.max_queue_nodes < 1:
        parser.error(f"--max-queue-nodes must be >= 1, got {args.max_queue_nodes}")
    if args.gpu_streams < 0:
        parser.error(f"--gpu-streams must be >= 0, got {args.gpu_streams}")
    # The runtime's bounds (a thread each; ids counted in int64), else its error, after the
    # graph was built.
    option_checks.at_most(parser, args, ["cpu_samplers", "gpu_streams"], 1024)
    option_checks.at_most(parser, args, ["max_batch_nodes", "max_queue", "max_queue_nodes"],
                          2**63 - 1)
    option_checks.cache_size(parser, args.cache_size)
    if not (math.isfinite(args.max_wait_ms) and args.max_wait_ms >= 0):
        parser.error(f"--max-wait-ms must be a finite number >= 0, got {args.max_wait_ms}")
    if args.threshold is not None and not (math.isfinite(args.threshold) and args.threshold >= 0):
        parser.error(f"--threshold must be a finite PSGS >= 0, got {args.threshold}")
    if not 0 <= args.port <= 65535:
        parser.error(f"--port must be in [0, 65535], got {args.port}")
    if args.duration is not None and not 0 < args.duration <= threading.TIMEOUT_MAX:
        # past TIMEOUT_MAX (inf too) the wait raised OverflowError with the server up
        parser.error(f"--duration must be > 0 seconds and at most {threading.TIMEOUT_MAX:g} "
                     f"(leave it out to serve until Ctrl-C), got {args.duration}")
    if args.package is not None and not Path(args.package).resolve().parent.is_dir():
        parser.error(f"--package {args.package}: the folder {Path(args.package).resolve().parent} "
                     f"does not exist")
    if args.package is not None and (Path(args.package).is_dir()
                                     or not args.package.endswith(".pt2")):
        parser.error(f"--package {args.package} must name a file ending in .pt2")
    # A folder that takes no files (/proc) failed only after the package's compile.
    option_checks.output_file(parser, "package", args.package)
    try:
        family, kind, _, _, address = socket.getaddrinfo(args.host, args.port,
                                                         type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as error:
        parser.error(f"--host {args.host} cannot be listened on: {error}")
    # A port in use (or, with --port 0, an address this machine lacks) was found only once
    # the graph and model were built: a traceback. (Free now, it may still be taken by then:
    # serve_http then raises.)
    with socket.socket(family, kind) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers
        try:
            probe.bind(address)
        except OSError as error:
            parser.error(f"--host {args.host} --port {args.port}: cannot listen there "
                         f"({error.strerror})")
    if not Path(args.checkpoint).is_file():
        parser.error(f"checkpoint {args.checkpoint} is not a file (train_sage.py --save writes "
                     f"one)")
    try:
        # Tensors, strings, ints and lists: nothing in it needs unpickling code (a checkpoint
        # from elsewhere then cannot run any).
        checkpoint = torch.load(args.checkpoint, weights_only=True)
    except Exception as error:  # a package, a state_dict's zip of another kind, any file
        parser.error(f"checkpoint {args.checkpoint} could not be read as train_sage.py --save "
                     f"writes it: {type(error).__name__}: "
                     f"{_cli.load_failure(error, args.checkpoint)}")
    wanted = {"state_dict", "size", "seed", "graph_device", "fanouts", "hidden", "in_channels",
              "num_classes"}
    if not isinstance(checkpoint, dict) or not wanted <= checkpoint.keys():
        missing = sorted(wanted - checkpoint.keys()) if isinstance(checkpoint, dict) else wanted
        parser.error(f"checkpoint {args.checkpoint} is not what train_sage.py --save writes "
                     f"(missing {', '.join(sorted(missing))})")
    bad = checkpoint_field_errors(checkpoint)
    if bad:
        parser.error(f"checkpoint {args.checkpoint} is not what train_sage.py --save writes: "
                     f"{'; '.join(bad)}")
    runtime = build_runtime(checkpoint, args)
    server = serve_http(runtime, args.host, args.port, server=args.server,
                        max_connections=args.max_connections)
    print(f"serving {checkpoint['size']!r} GraphSAGE at {server.url} ({server.kind}; POST "
          f"/predict, GET /health); " + (
              # (a --threshold given without GPU samplers had been printed as in use)
              f"dispatch threshold PSGS {runtime.threshold:.0f}"
              if runtime.device.type == "cuda" and math.isfinite(runtime.threshold) else
              "every batch on the CPU (" + ("--gpu-streams 0)" if option_checks.cuda_usable()
                                            else "no GPU)")),
          flush=True)
    stop = threading.Event()

    def on_signal(signum, _frame):
        if stop.is_set():  # a second one: exit now, without answering what is in flight
            os._exit(128 + signum)
        print("shutting down: answering the requests in flight (again to exit at once)",
              flush=True)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    stop.wait(args.duration)
    server.shutdown()
    print(f"shut down after {runtime.stats()['batches']} batches", flush=True)


if __name__ == "__main__":
    option_checks.run_main(main)
