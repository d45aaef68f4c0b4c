"""Why a prefetching epoch costs more than the model alone: the model step's host and GPU
time, and the prefetching loop beside a model of pure GPU time.

    python scripts/probe_epoch_overlap.py [--graph papers] [--caches HBM,20%] [--batches 300]

On the graph of scripts/bench_e2e.py (same builder, same model), in GPU sampling mode, for
each feature cache:

  1. the model step on batches built beforehand: unsynchronized (the "model alone" of
     bench_e2e), the host's own time to issue a step (measured with the GPU's queue kept
     busy), and synchronized after each step;
  2. the prefetching loop over the first ``--batches`` batches of an epoch, its batches
     built by the Python thread and by the C++ one (``prefetch_in_cpp=True``): the real
     model (and with the Python thread, at a switch interval of 0.1 ms instead of 5); a
     stand-in model that only keeps the GPU busy for the model's measured time
     (``torch.cuda._sleep`` on one SM: no host work, no SMs taken), and no model at all;
  3. with ``--trace DIR``, a torch.profiler trace of 20 batches prefetched by the Python
     thread, with the model.

With ``--graphed-rounds N``, only: the step eager and as one CUDA graph on padded batches
(``torch_quiver_ops.GraphedStep``, shapes from 8 batches), first checked against each other
(SGD, dropout off), then each alone and beside the prefetching loader, in turns, N rounds.

With ``--ab-rounds N``, after 1. only the model alone and the prefetching loop with the
model, the Python thread and the C++ one in turn (Python first in even rounds, C++ first in
odd ones), N rounds. Prints ms per batch for each;
one line of JSON at the end.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

import torch

import torch_quiver_ops as qv
from torch_quiver_ops import _cli

REPO = Path(__file__).resolve().parents[1]


def load_bench_e2e():
    spec = importlib.util.spec_from_file_location("bench_e2e", REPO / "scripts" / "bench_e2e.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_e2e"] = module
    spec.loader.exec_module(module)
    return module


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--graph", default="papers")
    parser.add_argument("--caches", default="HBM,20%")
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--trace", default=None)
    parser.add_argument("--ab-rounds", type=int, default=0,
                        help="only the model alone and the prefetching loop with the model, "
                             "the Python thread and the C++ one in turn, this many rounds")
    parser.add_argument("--graphed-rounds", type=int, default=0,
                        help="only the model step eager and as one CUDA graph on padded "
                             "batches (GraphedStep), alone and beside the prefetching loader, "
                             "this many rounds in turns")
    args = parser.parse_args()
    _cli.require_gpu(parser)
    e2e = load_bench_e2e()
    device = torch.device("cuda", torch.cuda.current_device())
    fanouts, batch_size = [15, 10, 5], 1024
    torch.manual_seed(0)
    x, topo, _, labels, train, _, num_classes = e2e.build_graph(args.graph, device)
    labels = labels.to(device)
    sage = e2e.load_example("train_sage").SAGE
    sampler = qv.GraphSageSampler(topo, fanouts, device=device, mode="GPU")
    hot = qv.presample_hot_order(sampler, train, batch_size,
                                 generator=torch.Generator().manual_seed(2))
    order = train[torch.randperm(train.numel(), generator=torch.Generator().manual_seed(5))]
    seeds = order[:args.batches * batch_size]
    results = {"graph": args.graph, "device": torch.cuda.get_device_name(device),
               "batches": args.batches, "rows": []}

    def fresh_model(capturable=False):
        torch.manual_seed(1)
        model = sage(x.size(1), 256, num_classes, len(fanouts)).to(device)
        if x.dtype != torch.float32:
            model = e2e.FloatInput(model)
        return model, torch.optim.Adam(model.parameters(), lr=0.003, capturable=capturable)

    def record(cache, name, ms, note=""):
        results["rows"].append({"cache": cache, "what": name, "ms_per_batch": ms})
        print(f"   {cache:<4} {name:<58} {ms:7.3f} ms/batch {note}", flush=True)

    for cache in args.caches.split(","):
        feature = qv.Feature(device_list=[device.index],
                             device_cache_size="100%" if cache == "HBM" else cache,
                             csr_topo=topo)
        feature.from_cpu_tensor(x, hot_order=hot)
        if args.graphed_rounds:
            graphed_rounds(args, cache, sampler, feature, order, seeds, labels, batch_size,
                           fresh_model, e2e, record)
            del feature
            torch.cuda.empty_cache()
            continue
        model, optimizer = fresh_model()
        built = list(qv.SampleLoader(sampler, feature, order[-60 * batch_size:], batch_size,
                                     labels=labels, prefetch=0))

        def step(batch):
            _, _, adjs, rows, y = batch
            e2e.train_step(model, optimizer, lambda m: m(rows, adjs), y)

        for batch in built[:5]:
            step(batch)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for batch in built:
            step(batch)
        torch.cuda.synchronize()
        alone = (time.perf_counter() - start) / len(built) * 1e3
        record(cache, "model alone, unsynchronized", alone)
        record(cache, "model step, host time to issue (GPU busy)", host_issue_ms(step, built))
        synced = []
        for batch in built:
            t = time.perf_counter()
            step(batch)
            torch.cuda.synchronize()
            synced.append(time.perf_counter() - t)
        record(cache, "model step, synchronized each (median)", 1e3 * sorted(synced)[30])
        gpu_ms = gpu_span_ms(step, built)
        record(cache, "model step, GPU span with the host ahead (median)", gpu_ms)
        del built

        native = qv.SampleLoader(sampler, feature, seeds, batch_size, labels=labels, prefetch=2,
                                 prefetch_in_cpp=True)
        in_python = qv.SampleLoader(sampler, feature, seeds, batch_size, labels=labels,
                                    prefetch=2, prefetch_in_cpp=False)
        loader = in_python

        def epoch(consume, interval=None):
            old = sys.getswitchinterval()
            if interval:
                sys.setswitchinterval(interval)
            try:
                return timed_pass(loader, consume)
            finally:
                sys.setswitchinterval(old)

        # cycles for the sleep: calibrated against the GPU span of a step
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0.record()
        torch.cuda._sleep(int(1e7))
        t1.record()
        torch.cuda.synchronize()
        cycles = int(1e7 * gpu_ms / t0.elapsed_time(t1))
        if args.ab_rounds:
            # The two threads in turn, with the model alone before each pair: the machine's
            # pace drifts by 10-20% within a run, so rows taken at different times do not
            # compare.
            for round_ in range(args.ab_rounds):
                record(cache, f"round {round_}: model alone", model_alone(step, order,
                                                                          sampler, feature,
                                                                          labels, batch_size))
                # Each round in the other order: whichever runs second may gain (a warmer
                # cache) or lose (the machine's drift), and alternating cancels either.
                pair = [(in_python, "Python"), (native, "C++")]
                for loader, thread in (pair if round_ % 2 == 0 else pair[::-1]):
                    record(cache, f"round {round_}: prefetching loop ({thread} thread), the "
                           f"model", epoch(step))
            del feature, model, optimizer, loader, native, in_python
            torch.cuda.empty_cache()
            continue
        for loader, thread in [(in_python, "Python"), (native, "C++")]:
            record(cache, f"prefetching loop ({thread} thread), no model",
                   epoch(lambda b: None))
            record(cache, f"prefetching loop ({thread} thread), GPU sleep of {gpu_ms:.2f} ms",
                   epoch(lambda b: torch.cuda._sleep(cycles)))
            record(cache, f"prefetching loop ({thread} thread), the model", epoch(step))
        loader = in_python
        record(cache, "prefetching loop (Python thread), the model, switch interval 0.1 ms",
               epoch(step, 1e-4))
        record(cache, "in line loop, the model",
               in_line(sampler, feature, seeds, batch_size, labels, step))
        if args.trace:
            from torch.profiler import ProfilerActivity, profile
            ahead = qv.SampleLoader(sampler, feature, seeds[:22 * batch_size], batch_size,
                                    labels=labels, prefetch=2)
            for batch in ahead:
                step(batch)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for batch in ahead:
                    step(batch)
                torch.cuda.synchronize()
            Path(args.trace).mkdir(parents=True, exist_ok=True)
            prof.export_chrome_trace(str(Path(args.trace) / f"trace-{cache.rstrip('%')}.json"))
        del feature, model, optimizer, loader, native, in_python
        torch.cuda.empty_cache()
    print(json.dumps(results))


def graphed_rounds(args, cache, sampler, feature, order, seeds, labels, batch_size,
                   fresh_model, e2e, record):
    """The model step eager and as one CUDA graph (GraphedStep), each alone and beside the
    prefetching loader, in turns (eager first in even rounds)."""
    built = list(qv.SampleLoader(sampler, feature, order[-40 * batch_size:], batch_size,
                                 labels=labels, prefetch=0))
    model, optimizer = fresh_model()
    graphed_model, graphed_optimizer = fresh_model(capturable=True)
    graphed = qv.GraphedStep(graphed_model, graphed_optimizer, built[:8])

    def eager(batch):
        _, _, adjs, rows, y = batch
        e2e.train_step(model, optimizer, lambda m: m(rows, adjs), y)

    for name, step in (("eager", eager), ("graphed", graphed)):
        record(cache, f"{name} step, host time to issue (GPU busy)", host_issue_ms(step, built))
        record(cache, f"{name} step, GPU span with the host ahead (median)",
               gpu_span_ms(step, built))
    check_graphed(fresh_model, built, e2e, record, cache)
    loader = qv.SampleLoader(sampler, feature, seeds, batch_size, labels=labels, prefetch=2)
    for round_ in range(args.graphed_rounds):
        pair = [("eager", eager), ("graphed", graphed)]
        for name, step in (pair if round_ % 2 == 0 else pair[::-1]):
            record(cache, f"round {round_}: {name} model alone",
                   timed_pass(built, step, warmup=built[:1]))
            record(cache, f"round {round_}: {name} prefetching loop", timed_pass(loader, step))
    record(cache, "graphed steps run eager (batch over the captured shapes)",
           float(graphed.eager_steps))


def check_graphed(fresh_model, built, e2e, record, cache):
    """The graphed step against the eager one from the same weights, dropout off: the
    losses of three steps and the weights after them."""
    # SGD, not Adam: Adam turns a gradient's last-bit difference (the order of atomic adds)
    # into a whole step of either sign, for weights whose gradient is near zero
    model, _ = fresh_model()
    graphed_model, _ = fresh_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    graphed_optimizer = torch.optim.SGD(graphed_model.parameters(), lr=0.01)
    model.eval()
    graphed_model.eval()
    graphed = qv.GraphedStep(graphed_model, graphed_optimizer, built[:8])

    def eager(batch):
        _, _, adjs, rows, y = batch
        return e2e.train_step(model, optimizer, lambda m: m(rows, adjs), y)

    # the capture's warm-up took three steps on the first batch: the eager copy takes them too
    for _ in range(3):
        eager(built[0])
    worst = 0.0
    for batch in built[1:4]:
        loss = eager(batch)
        loss_g = graphed(batch)
        worst = max(worst, abs(loss.item() - loss_g.item()))
    weights = max((a - b).abs().max().item()
                  for a, b in zip(graphed_model.parameters(), model.parameters()))
    record(cache, "check: graphed against eager, largest loss difference", worst)
    record(cache, "check: graphed against eager, largest weight difference", weights)


def host_issue_ms(step, batches) -> float:
    """The host's time to issue a step (median of 20), the GPU's queue first filled with a
    long sleep so that no call waits for the GPU (unless the step itself synchronizes)."""
    issue = []
    for batch in batches[:20]:
        torch.cuda._sleep(int(2e8))
        t = time.perf_counter()
        step(batch)
        issue.append(time.perf_counter() - t)
        torch.cuda.synchronize()
    return 1e3 * sorted(issue)[len(issue) // 2]


def gpu_span_ms(step, batches) -> float:
    """A step's GPU time (median of 30), from events around it with the host ahead."""
    gpu = []
    for batch in batches[:30]:
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(int(2e7))
        begin.record()
        step(batch)
        end.record()
        torch.cuda.synchronize()
        gpu.append(begin.elapsed_time(end))
    return sorted(gpu)[len(gpu) // 2]


def timed_pass(batches, consume, warmup=None):
    """Milliseconds a batch of one pass of ``consume`` over ``batches``, after a warm-up
    pass over ``warmup`` (default: ``batches`` themselves)."""
    for batch in batches if warmup is None else warmup:
        consume(batch)
    torch.cuda.synchronize()
    start = time.perf_counter()
    count = 0
    for batch in batches:
        consume(batch)
        count += 1
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / count * 1e3


def model_alone(step, order, sampler, feature, labels, batch_size, count=40):
    built = list(qv.SampleLoader(sampler, feature, order[-count * batch_size:], batch_size,
                                 labels=labels, prefetch=0))
    return timed_pass(built, step, warmup=built[:1])


def in_line(sampler, feature, seeds, batch_size, labels, step):
    return timed_pass(qv.SampleLoader(sampler, feature, seeds, batch_size, labels=labels,
                                      prefetch=0), step)


if __name__ == "__main__":
    main()
