"""What a request costs the thread that submits it: ``ServingRuntime.submit`` called from
Python in a loop, against the floor of any call into the runtime from Python (``queued()``,
which only reads a count), on this machine's CPU.

    python scripts/bench_serving_submit.py [--requests 6000] [--library OLD.so]

Under load the threads that submit requests (an HTTP server's, or the C++ load tool's
senders) share the host's cores with the runtime's own, so a submit's cost bounds the rate
they keep up with. The queue is made large enough to take every request, and one CPU sampler
works beside the loop, as under load. ``--library`` times another build of the library (set
before the package is imported, as ``TORCH_QUIVER_OPS_LIBRARY`` does).
"""
import argparse
import os
import sys
import time


def per_call_us(call, items, rounds=3):
    """The best of `rounds` loops over `items`, in microseconds a call."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for item in items:
            call(item)
        best = min(best, (time.perf_counter() - start) / len(items))
    return best * 1e6


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=6000, help="submits a loop")
    parser.add_argument("--library", help="another build of libtorch_quiver_ops.so to time")
    args = parser.parse_args(argv)
    if args.requests < 1:  # the library is loaded later (--library), so no _cli here
        parser.error(f"--requests must be >= 1, got {args.requests}")
    if args.library:
        os.environ["TORCH_QUIVER_OPS_LIBRARY"] = os.path.abspath(args.library)
    import torch
    import torch_quiver_ops as qv
    from torch_quiver_ops.serving import ServingRuntime
    from torch_quiver_ops.synthetic import synthetic_graph

    class Seeds(torch.nn.Module):  # the model's cost is not what is measured
        def forward(self, x, adjs):
            return x[: adjs[-1][2][1]]

    graph = synthetic_graph("tiny", seed=0)
    topo = qv.CSRTopo(graph.edge_index, num_nodes=graph.num_nodes)
    runtime = ServingRuntime(Seeds(), topo, [15, 10, 5], graph.x, device="cpu", cpu_samplers=1,
                             gpu_streams=0, max_queue=10 * args.requests, max_wait_ms=1000.0)
    raw = runtime._runtime  # the C++ methods, without the Python wrapper's futures
    print(f"library {qv.library_path()}, {torch.get_num_threads()} threads, "
          f"{os.cpu_count()} cores")
    print(f"{'ids a request':>13} {'submit, us':>11} {'queued(), us':>13} {'difference':>11} "
          f"{'refused':>8}")
    refused = 0

    def submit(ids):
        nonlocal refused
        refused += raw.submit(ids) < 0  # a full queue answers with a negative ticket

    for size in (1, 8, 64):
        requests = [torch.randint(graph.num_nodes, (size,)) for _ in range(args.requests)]
        refused = 0
        cost = per_call_us(submit, requests)
        # The floor beside each size, as the sampler's work in the background changes.
        floor = per_call_us(lambda _: raw.queued(), range(args.requests))
        print(f"{size:>13} {cost:>11.2f} {floor:>13.2f} {cost - floor:>11.2f} {refused:>8}")
    runtime.close(120)


if __name__ == "__main__":
    sys.exit(main())
