"""Online GNN inference with workload-aware dispatch (torch-quiver's serving): requests of a
few node ids are queued, batched dynamically (a size cap and a wait cap), and each batch is
sampled on the CPU or on the GPU by its predicted cost, the *probabilistic sampled graph
size* (PSGS): the expected number of nodes its sampling visits for the fanouts, a sum of
per-node values computed once from the graph. Small batches then do not queue behind the
GPU and large ones do not crawl on the CPU.

* :class:`PSGS`: the per-node expected sampled counts and a batch's cost.
* :class:`ServingRuntime`: the request queue, the batcher, the dispatcher (a pool of CPU
  samplers, GPU samplers on their own CUDA streams), the gather through the tiered
  :class:`~torch_quiver_ops.Feature` and the model; ``threshold`` calibrated at start-up on
  the machine (:meth:`ServingRuntime.calibrate`) or given.
* :func:`serve_http`: an HTTP endpoint over a runtime (JSON node ids in, predictions out,
  a health check, 4xx for bad requests, 503 under overload, graceful shutdown). Built on
  the standard library's ``ThreadingHTTPServer``: nothing to install on machines without a
  network (the GPU hosts), one thread per connection, and the runtime's own bounded queue
  does the back-pressure that a production server's front end would otherwise do.
"""
from __future__ import annotations

import json
import queue
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Dict, List, Optional, Sequence

import torch
from torch import Tensor

from .sampler import GraphSageSampler
from .topology import CSRTopo


class Overloaded(RuntimeError):
    """The runtime's queue is full: the request was refused (HTTP 503), not queued."""


class PSGS:
    """Expected sampled-graph size per node for ``fanouts`` (outermost first, as a
    sampler's ``sizes``): ``psgs[v] = 1 + min(deg v, f1) * mean over v's neighbors u of
    psgs'(u)``, with ``psgs'`` the same for the remaining fanouts (1 past the last hop):
    uniform sampling without replacement visits each neighbor with probability
    ``min(deg, f) / deg``. A batch's cost is the sum over its seeds; computed once, in
    O(edges) per hop, on the CSR's device."""

    def __init__(self, topo: CSRTopo, fanouts: Sequence[int]):
        indptr = topo.indptr.long()
        indices = topo.indices.long()
        degree = (indptr[1:] - indptr[:-1]).double()
        values = torch.ones(topo.node_count, dtype=torch.double)
        for fanout in reversed(list(fanouts)):
            sums = torch.zeros(indices.numel() + 1, dtype=torch.double)
            torch.cumsum(values[indices], 0, out=sums[1:])
            neighbor_sum = sums[indptr[1:]] - sums[indptr[:-1]]
            taken = degree if fanout < 0 else degree.clamp(max=fanout)
            values = 1 + torch.where(degree > 0, taken / degree.clamp(min=1) * neighbor_sum,
                                     torch.zeros_like(degree))
        self.values: Tensor = values.float()

    def __call__(self, ids: Tensor) -> float:
        return float(self.values[ids.cpu()].sum())


@dataclass
class _Request:
    ids: Tensor
    future: Future
    enqueued: float = field(default_factory=time.perf_counter)


@dataclass
class BatchRecord:
    """What the runtime did with one batch (kept for reports and tests)."""
    nodes: int
    requests: int
    cost: float
    target: str  # "cpu" or "gpu"
    wait_ms: float
    run_ms: float


class ServingRuntime:
    """Batches node-id requests and answers each with the model's output rows.

    Args:
        model: ``model(x, adjs)`` over a sampled computation graph (torch-quiver's
            layout, :meth:`GraphSageSampler.sample`); put in eval mode here.
        topo, fanouts: the graph and the fanouts to sample.
        feature: the node features: a :class:`~torch_quiver_ops.Feature` or a tensor.
        device: where the model runs (default: the current GPU, else the CPU).
        cpu_samplers: threads sampling on the CPU (0: never dispatch there).
        gpu_streams: threads sampling on the GPU, each on a CUDA stream of its own (0, or no
            GPU: never dispatch there).
        gpu_mode: ``"GPU"`` (topology in GPU memory) or ``"UVA"``.
        max_batch_nodes: a batch closes when it holds this many seeds (a request larger
            than this is refused: HTTP 413).
        max_wait_ms: ... or when its oldest request has waited this long.
        max_queue: requests waiting at most (more are refused: :class:`Overloaded`).
        threshold: PSGS at or below which a batch samples on the CPU; ``None`` calibrates
            it (:meth:`calibrate`) when both kinds of samplers exist.
        seed: seeds each sampler's generator, for reproducible answers.
    """

    def __init__(self, model: torch.nn.Module, topo: CSRTopo, fanouts: Sequence[int],
                 feature, device=None, cpu_samplers: int = 2, gpu_streams: int = 2,
                 gpu_mode: str = "GPU", max_batch_nodes: int = 1024, max_wait_ms: float = 2.0,
                 max_queue: int = 1024, threshold: Optional[float] = None, seed: int = 0):
        if max_batch_nodes < 1 or max_queue < 1 or max_wait_ms < 0:
            raise ValueError(f"max_batch_nodes and max_queue must be >= 1 and max_wait_ms >= 0, "
                             f"got {max_batch_nodes}, {max_queue}, {max_wait_ms}")
        has_gpu = torch.cuda.is_available() and gpu_streams > 0
        if device is None:
            device = torch.device("cuda", torch.cuda.current_device()) if has_gpu else "cpu"
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        self.topo, self.fanouts = topo, list(fanouts)
        self.num_nodes = topo.node_count
        self.feature = feature
        self.psgs = PSGS(topo, self.fanouts)
        self.max_batch_nodes, self.max_wait = max_batch_nodes, max_wait_ms / 1000
        self._queue: "queue.Queue[Optional[_Request]]" = queue.Queue(max_queue)
        self._closing = threading.Event()
        self.records: List[BatchRecord] = []
        self.accepted = 0  # requests queued so far
        self._records_lock = threading.Lock()
        # Samplers: one per worker thread (a sampler and its generator are not shared).
        self._cpu: List[tuple] = [
            (GraphSageSampler(topo, self.fanouts, device="cpu", mode="CPU"),
             torch.Generator().manual_seed(seed + i)) for i in range(cpu_samplers)]
        self._gpu: List[tuple] = []
        if has_gpu:
            for i in range(gpu_streams):
                sampler = GraphSageSampler(topo, self.fanouts, device=self.device, mode=gpu_mode)
                gen = torch.Generator(self.device).manual_seed(seed + 1000 + i)
                self._gpu.append((sampler, gen, torch.cuda.Stream(self.device)))
        if not self._cpu and not self._gpu:
            raise ValueError("the runtime needs a CPU sampler or a GPU stream")
        self._cpu_pool = queue.Queue()
        for item in self._cpu:
            self._cpu_pool.put(item)
        self._gpu_pool = queue.Queue()
        for item in self._gpu:
            self._gpu_pool.put(item)
        workers = len(self._cpu) + len(self._gpu)
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="quiver-serve")
        # Batches in flight, at most one a worker: the batcher waits for a free one, so
        # requests wait in the bounded queue (and overflow as Overloaded), never in an
        # unbounded work list behind the executor.
        self._slots = threading.Semaphore(workers)
        if threshold is None:
            threshold = (self.calibrate() if self._cpu and self._gpu
                         else (float("inf") if self._cpu else -1.0))
        self.threshold = float(threshold)
        self._batcher = threading.Thread(target=self._batch_loop, name="quiver-batcher",
                                         daemon=True)
        self._batcher.start()

    # ---- requests ----

    def check_ids(self, ids) -> Tensor:
        """``ids`` as a 1-D int64 CPU tensor, or a ValueError naming what is wrong."""
        if isinstance(ids, (list, tuple)) and len(ids) == 0:
            raise ValueError("a request needs at least one node id")
        try:
            ids = torch.as_tensor(ids)
        except (ValueError, RuntimeError, TypeError, OverflowError) as error:  # past int64
            raise ValueError(f"node ids must be 64-bit integers: {error}") from None
        if ids.dtype.is_floating_point or ids.dtype == torch.bool or ids.dim() != 1:
            raise ValueError(f"node ids must be a 1-D list of integers, got {ids.dtype} of "
                             f"shape {tuple(ids.shape)}")
        if ids.numel() == 0:
            raise ValueError("a request needs at least one node id")
        if ids.numel() > self.max_batch_nodes:
            raise ValueError(f"a request holds at most {self.max_batch_nodes} node ids, got "
                             f"{ids.numel()}")
        bad = (ids < 0) | (ids >= self.num_nodes)
        if bool(bad.any()):
            raise ValueError(f"node id {int(ids[bad][0])} is out of range [0, {self.num_nodes})")
        return ids.long().cpu()

    def submit(self, ids) -> Future:
        """Queues a request; its future's result is the model's rows for ``ids`` (CPU).
        Raises ValueError for bad ids and :class:`Overloaded` when the queue is full."""
        if self._closing.is_set():
            raise Overloaded("the runtime is shutting down")
        request = _Request(self.check_ids(ids), Future())
        try:
            self._queue.put_nowait(request)
        except queue.Full:
            raise Overloaded(f"{self._queue.maxsize} requests are waiting already") from None
        with self._records_lock:
            self.accepted += 1
        return request.future

    def predict(self, ids, timeout: Optional[float] = None) -> Tensor:
        return self.submit(ids).result(timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Stops taking requests, answers every queued one, then stops the workers."""
        if self._closing.is_set():
            return
        self._closing.set()
        self._queue.put(None)  # wakes the batcher; it drains what is queued, then stops
        self._batcher.join(timeout)
        self._executor.shutdown(wait=True)

    # ---- batching and dispatch ----

    def _batch_loop(self) -> None:
        pending: Optional[_Request] = None
        while True:
            first = pending or self._queue.get()
            pending = None
            if first is None:
                return  # closing, and everything before the marker was batched
            batch, nodes = [first], first.ids.numel()
            deadline = first.enqueued + self.max_wait
            stop = False
            while nodes < self.max_batch_nodes:
                left = deadline - time.perf_counter()
                try:
                    item = self._queue.get(timeout=left) if left > 0 else self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
                if nodes + item.ids.numel() > self.max_batch_nodes:
                    pending = item  # starts the next batch
                    break
                batch.append(item)
                nodes += item.ids.numel()
            self._dispatch(batch)
            if stop:
                return

    def target_of(self, cost: float) -> str:
        """Where a batch of PSGS ``cost`` samples: the CPU at or below the threshold. (A
        rule that also sent batches to idle CPU samplers whenever every GPU stream was busy
        made the tail worse on the H100, docs/benchmarks.md: the CPU samplers compete with
        the endpoint's threads for the interpreter.)"""
        if not self._gpu:
            return "cpu"
        if not self._cpu:
            return "gpu"
        return "cpu" if cost <= self.threshold else "gpu"

    def _dispatch(self, batch: List[_Request]) -> None:
        ids = torch.cat([r.ids for r in batch])
        cost = self.psgs(ids)
        target = self.target_of(cost)

        def run():
            try:
                out = self._run(ids, target)
                begin = 0
                for request in batch:
                    end = begin + request.ids.numel()
                    request.future.set_result(out[begin:end])
                    begin = end
            except Exception as error:  # noqa: BLE001 (answered to each request)
                for request in batch:
                    if not request.future.done():
                        request.future.set_exception(error)
            finally:
                with self._records_lock:
                    self.records.append(BatchRecord(
                        ids.numel(), len(batch), cost, target,
                        1000 * (started - batch[0].enqueued),
                        1000 * (time.perf_counter() - started)))
                self._slots.release()

        self._slots.acquire()
        started = time.perf_counter()
        self._executor.submit(run)

    def _run(self, ids: Tensor, target: str) -> Tensor:
        """Samples ``ids``' computation graph on ``target``, gathers and runs the model."""
        if target == "cpu":
            item = self._cpu_pool.get()
            try:
                sampler, gen = item
                return self._infer(sampler.sample(ids, gen), None)
            finally:
                self._cpu_pool.put(item)
        item = self._gpu_pool.get()
        try:
            sampler, gen, stream = item
            with torch.cuda.stream(stream):
                out = self._infer(sampler.sample(ids.to(self.device, non_blocking=True), gen),
                                  stream)
            return out
        finally:
            self._gpu_pool.put(item)

    def _infer(self, sample, stream) -> Tensor:
        n_id, batch_size, adjs = sample
        if isinstance(self.feature, Tensor):  # a plain table: indexed where it lies
            x = self.feature[n_id.to(self.feature.device)]
        else:  # a Feature gathers on the ids' device
            x = self.feature[n_id.to(self.device, non_blocking=True)]
        with torch.inference_mode():
            out = self.model(x.to(self.device), [adj.to(self.device) for adj in adjs])
        out = out[:batch_size].cpu()  # waits for this stream only
        return out

    # ---- calibration ----

    def calibrate(self, sizes: Sequence[int] = (1, 4, 16, 64, 256, 1024), repeats: int = 5,
                  seed: int = 0) -> float:
        """Measures CPU and GPU batch latency on this machine over batches of ``sizes``
        random seeds, fits ``latency = a + b * PSGS`` to each, and returns the PSGS where
        the lines cross (the CPU's below it): the dispatch threshold."""
        gen = torch.Generator().manual_seed(seed)
        points = {"cpu": [], "gpu": []}
        for size in sizes:
            size = min(size, self.max_batch_nodes)
            for _ in range(repeats + 1):
                ids = torch.randint(self.num_nodes, (size,), generator=gen)
                cost = self.psgs(ids)
                for target in points:
                    start = time.perf_counter()
                    self._run(ids, target)
                    points[target].append((cost, time.perf_counter() - start))
        fits = {}
        for target, pts in points.items():
            pts = pts[len(pts) // (repeats + 1):] if len(pts) > repeats + 1 else pts
            xs = torch.tensor([p[0] for p in pts], dtype=torch.double)
            ys = torch.tensor([p[1] for p in pts], dtype=torch.double)
            design = torch.stack([torch.ones_like(xs), xs], 1)
            coef = torch.linalg.lstsq(design, ys.unsqueeze(1)).solution.view(-1)
            fits[target] = (float(coef[0]), float(coef[1]))
        (a_cpu, b_cpu), (a_gpu, b_gpu) = fits["cpu"], fits["gpu"]
        self.calibration = {"cpu": fits["cpu"], "gpu": fits["gpu"]}
        if b_cpu <= b_gpu:  # the CPU never loses: everything there
            return float("inf") if a_cpu <= a_gpu else -1.0
        crossing = (a_gpu - a_cpu) / (b_cpu - b_gpu)
        return max(crossing, -1.0)

    def stats(self) -> Dict[str, float]:
        with self._records_lock:
            records = list(self.records)
        return {"batches": len(records), "queued": self._queue.qsize(),
                "cpu_batches": sum(r.target == "cpu" for r in records),
                "gpu_batches": sum(r.target == "gpu" for r in records),
                "threshold": self.threshold}


# ---- the HTTP endpoint ----

class _Handler(BaseHTTPRequestHandler):
    runtime: ServingRuntime
    to_json: Callable[[Tensor], list]
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass  # one line per request on stderr would swamp a load test

    def _reply(self, status: int, body: dict, headers: Optional[dict] = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.path == "/health":
            self._reply(HTTPStatus.OK, {"status": "ok", **self.runtime.stats()})
        else:
            self._reply(HTTPStatus.NOT_FOUND, {"error": f"no such path {self.path!r}"})

    def do_POST(self):  # noqa: N802
        if self.path != "/predict":
            self._reply(HTTPStatus.NOT_FOUND, {"error": f"no such path {self.path!r}"})
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0:
            self._reply(HTTPStatus.BAD_REQUEST, {"error": "Content-Length must be a byte count"})
            self.close_connection = True
            return
        if length > 1 << 20:
            self._reply(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                        {"error": f"a request body holds at most 1 MiB, got {length} bytes"})
            self.close_connection = True
            return
        try:
            body = json.loads(self.rfile.read(length) or b"null")
            nodes = body.get("nodes") if isinstance(body, dict) else None
            if not isinstance(nodes, list) or not all(
                    isinstance(v, int) and not isinstance(v, bool) for v in nodes):
                raise ValueError('the body must be {"nodes": [node ids as integers]}')
            if len(nodes) > self.runtime.max_batch_nodes:
                self._reply(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {
                    "error": f"a request holds at most {self.runtime.max_batch_nodes} node "
                             f"ids, got {len(nodes)}"})
                return
            future = self.runtime.submit(nodes)
        except (ValueError, json.JSONDecodeError) as error:
            self._reply(HTTPStatus.BAD_REQUEST, {"error": str(error)})
            return
        except Overloaded as error:
            self._reply(HTTPStatus.SERVICE_UNAVAILABLE, {"error": str(error)},
                        {"Retry-After": "1"})
            return
        try:
            out = future.result(timeout=60)
        except Exception as error:  # noqa: BLE001
            self._reply(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": str(error)})
            return
        self._reply(HTTPStatus.OK, {"nodes": nodes, "predictions": type(self).to_json(out)})


class HttpServer:
    """A running endpoint: ``url``, and :meth:`shutdown` that stops taking connections,
    answers every request already accepted, then closes the runtime."""

    def __init__(self, runtime: ServingRuntime, host: str = "127.0.0.1", port: int = 0,
                 to_json: Optional[Callable[[Tensor], list]] = None):
        handler = type("Handler", (_Handler,), {
            "runtime": runtime,
            "to_json": staticmethod(to_json or (lambda out: out.argmax(-1).tolist()))})
        self.runtime = runtime
        self.server = ThreadingHTTPServer((host, port), handler)
        self.server.daemon_threads = False  # server_close waits for requests in flight
        self.url = f"http://{host}:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="quiver-http",
                                        daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        self.server.shutdown()       # no new connections
        self.server.server_close()   # joins the handler threads: accepted requests finish
        self.runtime.close()


def serve_http(runtime: ServingRuntime, host: str = "127.0.0.1", port: int = 0,
               to_json: Optional[Callable[[Tensor], list]] = None) -> HttpServer:
    """Starts the HTTP endpoint over ``runtime`` (``port=0``: any free port; see
    :class:`HttpServer`): ``POST /predict`` with ``{"nodes": [ids]}`` answers
    ``{"nodes": ..., "predictions": ...}`` (by default each node's argmax class), ``GET
    /health`` the runtime's counters; a bad body or id is a 400 naming it, too many ids a
    413, a full queue a 503 with ``Retry-After``."""
    return HttpServer(runtime, host, port, to_json)
