"""Online GNN inference with workload-aware dispatch (torch-quiver's serving): requests of a
few node ids are queued, batched dynamically (a size cap and a wait cap), and each batch is
sampled on the CPU or on the GPU by its predicted cost, the *probabilistic sampled graph
size* (PSGS): for each seed, the expected size of the tree its sampling grows for the
fanouts (nodes counted once per time they are drawn), summed over the batch's seeds from
per-node values computed once from the graph. It bounds what a batch samples from above:
the sampler draws each distinct node's neighbors once, so seeds whose trees overlap visit
fewer nodes (a probe's 64 seeds over two hops of [5, 3]: PSGS 1,141, 834 seeds and
edges drawn, 476 distinct nodes); sampling time grows with it all the same, which is what
dispatch needs. Small batches then do not queue behind the GPU and large ones do not crawl
on the CPU.

* :class:`PSGS`: the per-node expected sampled counts and a batch's cost.
* :class:`ServingRuntime`: the request queue, the batcher, the dispatcher (a pool of CPU
  samplers, GPU samplers on their own CUDA streams) and the gather through the tiered
  :class:`~torch_quiver_ops.Feature` run in C++ (``torch.classes.quiver.ServingRuntime``,
  which a libtorch server uses alone); Python adds the model's threads, or, given a package
  from :func:`package_for_serving` (AOTInductor), the model runs on C++ threads too and no
  batch waits for Python's interpreter lock. ``threshold`` is calibrated at start-up on the
  machine (:meth:`ServingRuntime.calibrate`) or given.
* :func:`serve_http`: an HTTP endpoint over a runtime (JSON node ids in, predictions out,
  a health check, 4xx for bad requests, 503 under overload, graceful shutdown), served by
  uvicorn (:func:`asgi_app`: an event loop and a C HTTP parser) where it is installed, else
  by the standard library's ``ThreadingHTTPServer`` (one thread a connection; nothing to
  install on machines without a network, such as the GPU hosts). The runtime's own bounded
  queue does the back-pressure that a production server's front end would otherwise do.
"""
from __future__ import annotations

import atexit
import contextlib
import email.errors
import io
import itertools
import json
import logging
import math
import os
import socket
import struct
import threading
import sys
import time
import warnings
import weakref
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple, Union
from urllib.parse import unquote, urlsplit

import numpy as np
import torch
from torch import Tensor

from . import _fork
from ._device import (as_int, as_tensor, check_flag, holds_integers, is_int, no_meta,
                      present_device, readable_ids, resolve_device)
from ._interrupts import ctrl_c_ends_waits, runtime_timeout
from .ops import integer_fanouts
from .sampler import Adj, GraphSageSampler
from .topology import CSRTopo


def _number(value, name: str) -> float:
    """``value`` as a float, else a TypeError naming ``name``: float() took "2" and True,
    and named nothing when it refused None or "abc"."""
    if not isinstance(value, (bool, str, bytes)) and value is not None:
        try:
            return float(value)
        except (TypeError, ValueError, RuntimeError):
            pass
    raise TypeError(f"{name} must be a number, got {value!r}")


class Overloaded(RuntimeError):
    """The runtime's queue is full: the request was refused (HTTP 503), not queued."""


class PSGS:
    """Expected sampled-graph size per node for ``fanouts`` (the seeds' hop first, as a
    sampler's ``sizes``): ``psgs[v] = 1 + min(deg v, f1) * mean over v's neighbors u of
    psgs'(u)``, with ``psgs'`` the same for the remaining fanouts (1 past the last hop):
    uniform sampling without replacement visits each neighbor with probability
    ``min(deg, f) / deg``: a seed's sampling tree, counted with repeats (see the module's
    note). A batch's cost is the sum over its seeds; computed once, in O(edges) per hop
    (the runtime's ``expected_sampled_counts``). ``values`` are float64 (a runtime's own,
    copied), and a request's cost is summed in the runtime's order, so ``runtime.psgs(ids)``
    is the cost a request of ``ids`` is dispatched by, to the last bit (a float32 copy had
    sent a batch the other way at its threshold)."""

    def __init__(self, topo: CSRTopo, fanouts: Sequence[int]):
        self.values: Tensor = torch.classes.quiver.ServingRuntime.expected_sampled_counts(
            topo.indptr, topo.indices, integer_fanouts(fanouts))

    @classmethod
    def of_values(cls, values: Tensor) -> "PSGS":
        psgs = cls.__new__(cls)
        # A copy: the runtime's own tensor, edited in place, would change what it dispatches.
        psgs.values = values.to(torch.float64, copy=True)
        return psgs

    def __call__(self, ids: Tensor) -> float:
        ids = readable_ids(ids).cpu()
        if not holds_integers(ids):  # a bool mask had been read as one, summing every node
            raise TypeError(f"ids must be integer node ids, got {ids.dtype}")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.values.numel()):
            # Indexing would read a negative id from the end.
            raise IndexError(f"ids must be in [0, {self.values.numel()}), got ids from "
                             f"{int(ids.min())} to {int(ids.max())}")
        if not ids.numel():
            return 0.0
        return float(self.values[ids.reshape(-1)].cumsum(0)[-1])  # one by one, as the runtime


class _Answer:
    """A queued request: :meth:`result` waits for the model's rows for its ids, or (in an
    event loop) :meth:`collected` is a future of them."""

    def __init__(self, runtime: "torch.ScriptObject", ticket: int, owner: "ServingRuntime"):
        self._runtime, self._ticket, self._owner = runtime, ticket, owner
        self._claimed = False  # waited for or collected: the runtime lets go of it then

    def __del__(self):
        # Dropped unread: the runtime would hold the answer for good (a probe's client that
        # dropped its answers grew by 21 MB every 5,000 requests).
        # (not in a forked child: a parent's thread may have held the runtime's lock)
        if not getattr(self, "_claimed", True) and not _fork.inherited(self._runtime):
            try:
                self._runtime.forget(self._ticket)
            except Exception:  # noqa: BLE001 (a finalizer must not raise; at exit, say)
                pass

    @ctrl_c_ends_waits
    def result(self, timeout: Optional[float] = None) -> Tensor:
        """The rows, waiting up to ``timeout`` seconds (None: no limit; 0 or less: only an
        answer already in). Past it, ``TimeoutError``, and the answer is given up: a
        request is waited for once."""
        seconds = runtime_timeout(timeout)  # (a bad timeout leaves the answer to a retry)
        self._claimed = True
        try:
            return self._runtime.wait(self._ticket, seconds)
        except RuntimeError as error:
            if _NOT_ANSWERED_IN_TIME in str(error):
                raise TimeoutError(str(error).splitlines()[0]) from None
            raise

    def collected(self):
        """An asyncio future (of the running loop) of ``(rows, None)`` or ``(None, error)``,
        resolved by the runtime's one collecting thread: no thread waits for this request."""
        future = self._owner._collector().expect(self._ticket)
        self._claimed = True  # (once expected: a failed expect leaves it to be forgotten)
        return future


@dataclass
class BatchRecord:
    """What the runtime did with one batch (kept for reports and tests)."""
    nodes: int
    requests: int
    cost: float
    target: str  # "cpu" or "gpu"
    wait_ms: float  # from its first request's arrival to a sampler taking it
    run_ms: float  # from a sampler taking it to its answer
    prepare_ms: float  # of run_ms, sampling and gathering (the rest: the model side)


# The runtimes not closed yet: closed as the interpreter exits (_close_open_runtimes).
_open_runtimes: "weakref.WeakSet[ServingRuntime]" = weakref.WeakSet()
# Model threads still in a model call when their runtime's close() ran out of time.
_lingering_model_threads: Set[threading.Thread] = set()
LINGERING_JOIN_S = 60.0  # at exit, the longest a model call may go on being waited for


@atexit.register
def _close_open_runtimes() -> None:
    """Closes what a program left open, and waits for model calls still running, while its
    model threads can still run. A model thread that wakes during the interpreter's shutdown
    (a request in flight, or a call that outlived close's timeout) aborts the process
    (terminate called without an active exception: it is ended inside the runtime's C++)."""
    for runtime in list(_open_runtimes):
        with contextlib.suppress(Exception):
            runtime.close()
    deadline = time.monotonic() + LINGERING_JOIN_S
    for thread in list(_lingering_model_threads):
        thread.join(max(0.0, deadline - time.monotonic()))


def _refuse_closing_from_a_model_thread(runtimes, what: str) -> None:
    """A RuntimeError when the calling thread is a model thread of one of ``runtimes``:
    closing waits for the batch that thread is computing, and then joins it (a close from
    inside the model had waited out its timeout, then left what it closed half closed)."""
    current = threading.current_thread()
    if any(current in getattr(r, "_model_threads", ()) for r in runtimes):
        raise RuntimeError(f"{what} was called from a model thread (inside the model): "
                           f"call it from another thread")


def _model_loop(runtime, model_box: list, stream) -> None:
    """A model thread: the runtime's batches through ``model_box[0]`` (the runtime's
    ``model``, read each batch) until it closes."""
    while True:
        batch_id, _, x, seed_count, edge_index, sizes, _ = runtime.next_batch()
        if batch_id < 0:
            _lingering_model_threads.discard(threading.current_thread())
            return
        try:
            adjs = [Adj(e, None, (sizes[2 * i], sizes[2 * i + 1]))
                    for i, e in enumerate(edge_index)]
            with torch.inference_mode(), (torch.cuda.stream(stream) if stream is not None
                                          else contextlib.nullcontext()):
                out = model_box[0](x, adjs)[:seed_count].cpu()  # waits for this stream only
        except BaseException as error:  # noqa: BLE001 (answered to each request)
            # A SystemExit or KeyboardInterrupt from the model too: ended here, it would
            # end this thread, and every later batch would wait for it.
            out, failure = None, f"{type(error).__name__}: {error}"
        try:
            if out is None:
                runtime.fail(batch_id, failure)
            else:
                runtime.finish(batch_id, out)
        except ValueError:  # a close() that gave up on the model failed it already
            pass


def _close_dropped(runtime, gpu_sampler, model_threads: list, collectors: list) -> None:
    """Closes the C++ runtime of a ServingRuntime collected without close(): no answer can
    be waited for any more (each holds its runtime), so nothing is left to answer. Its
    collecting thread is stopped, and model threads still in a call are waited for at exit,
    as close() leaves them."""
    if _fork.inherited(runtime):  # closing waits for the parent's threads (_fork)
        return
    with contextlib.suppress(Exception):
        runtime.close(0.0)
    for collector in collectors:
        collector.stop()
    for thread in model_threads:
        if thread.is_alive():
            _lingering_model_threads.add(thread)
    del gpu_sampler  # held until here: the runtime's GPU streams read its pinned lists


class ServingRuntime:
    """Batches node-id requests and answers each with the model's output rows.

    The request queue, the batcher, the dispatcher, the samplers and the gather run in
    ``torch.classes.quiver.ServingRuntime`` (C++: a libtorch server uses the same runtime
    with no Python, examples/cpp/train_sage.cpp ``--serve``); this class adds the model
    side: threads that take each sampled batch, run ``model`` and hand the rows back.

    Args:
        model: ``model(x, adjs)`` over a sampled computation graph (torch-quiver's
            layout, :meth:`GraphSageSampler.sample`), put in eval mode here and run by
            Python threads; or the path of its AOTInductor package
            (:func:`package_for_serving`, compiled for ``device``), run by C++ threads.
        topo, fanouts: the graph and the fanouts to sample.
        feature: the node features: a :class:`~torch_quiver_ops.Feature` or a tensor.
        device: where the model runs (default: the current GPU when CUDA is available and
            ``gpu_streams > 0``, else the CPU).
        cpu_samplers: threads sampling on the CPU (0: never dispatch there).
        gpu_streams: threads sampling on the GPU, each on a CUDA stream of its own (0, or no
            GPU: never dispatch there).
        gpu_mode: ``"GPU"`` (topology in GPU memory) or ``"UVA"``.
        max_batch_nodes: a batch closes when it holds this many seeds (a request larger
            than this is refused: HTTP 413).
        max_wait_ms: ... or when its oldest request has waited this long.
        max_queue: requests waiting at most (more are refused: :class:`Overloaded`).
        max_queue_nodes: node ids waiting at most, over every queued request (None:
            8 x ``max_batch_nodes``): a request that would pass it is refused
            (:class:`Overloaded`, HTTP 503), so a burst of large requests past capacity is
            turned away at once instead of waiting seconds in the queue. An empty queue
            takes any request.
        threshold: PSGS at or below which a batch samples on the CPU, whatever the load.
            ``None`` (with both kinds of samplers) calibrates the runtime at start-up
            (:meth:`calibrate`) and sends each batch where it is predicted to finish first:
            the work its side already holds over its samplers, plus the batch's own latency
            by that side's fitted line (an idle runtime so follows the lines' crossing; a
            busy GPU overflows onto idle CPU samplers).
        seed: each batch draws from a generator seeded by (seed, the batch's number),
            whichever sampler thread takes it: the same requests sent one at a time get the
            same answers from the same side (CPU or GPU: the two draw differently, and
            under load which side takes a batch, and how requests group into batches,
            depend on timing).
        capture_batches: GPU samplers replay batch shapes seen before as CUDA graphs.
        latency_objective_ms: the latency requests should be answered within (dispatch by
            load): with the GPU side full and a CPU sampler free, a batch closes at the size
            the CPU is predicted to sample within half of it, and a batch whose side is full
            moves to the other side, where a sampler is free, when it is predicted to have
            waited and been sampled there within half of it.
    """

    def __init__(self, model: torch.nn.Module, topo: CSRTopo, fanouts: Sequence[int],
                 feature, device=None, cpu_samplers: int = 2, gpu_streams: int = 2,
                 gpu_mode: str = "GPU", max_batch_nodes: int = 1024, max_wait_ms: float = 2.0,
                 max_queue: int = 1024, threshold: Optional[float] = None, seed: int = 0,
                 capture_batches: bool = True, latency_objective_ms: float = 30.0,
                 max_queue_nodes: Optional[int] = None):
        if max_queue_nodes is not None and (not is_int(max_queue_nodes) or max_queue_nodes < 1):
            raise ValueError(f"max_queue_nodes must be an int >= 1 (None: 8 x max_batch_nodes), "
                             f"got {max_queue_nodes!r}")
        for name, value in (("cpu_samplers", cpu_samplers), ("gpu_streams", gpu_streams),
                            ("max_batch_nodes", max_batch_nodes), ("max_queue", max_queue)):
            if not is_int(value):  # else TorchScript's "Expected a value of type 'int'"
                raise ValueError(f"{name} must be an int, got {value!r}")
        if not is_int(seed) or not -2**63 <= seed < 2**63:
            raise ValueError(f"seed must be an int that fits in 64 bits, got {seed!r}")
        capture_batches = check_flag(capture_batches, "capture_batches")
        max_wait_ms = _number(max_wait_ms, "max_wait_ms")
        latency_objective_ms = _number(latency_objective_ms, "latency_objective_ms")
        if threshold is not None:
            threshold = _number(threshold, "threshold")
            if math.isnan(threshold):  # (the runtime reads NaN as "calibrate")
                raise ValueError("threshold must be a PSGS, or None to calibrate, got nan")
        if not (isinstance(gpu_mode, str) and gpu_mode.upper() in ("GPU", "UVA")):
            # Checked on a machine without a GPU too, where it would go unused.
            raise ValueError(f"gpu_mode must be 'GPU' or 'UVA', got {gpu_mode!r}")
        has_gpu = torch.cuda.is_available() and gpu_streams > 0
        if device is None:
            device = torch.device("cuda", torch.cuda.current_device()) if has_gpu else "cpu"
        self.device = present_device(device)
        self._closing = False
        if self.device.type not in ("cpu", "cuda"):  # ('meta' was taken, to fail in a batch)
            raise ValueError(f"device must be the CPU or a GPU, got {device!r}")
        self.package = None
        if isinstance(model, (str, os.PathLike)):
            from .aoti import check_package
            self.package, self._model_box = os.fspath(model), [None]
            if not os.path.isfile(self.package):
                raise ValueError(f"no model package at {self.package!r} (package_for_serving "
                                 f"builds one)")
            check_package(self.package)  # a package that would crash this process on load
        else:
            self._model_box = [model.to(self.device).eval()]
        self.topo, self.fanouts = topo, integer_fanouts(fanouts)
        self.num_nodes = topo.node_count
        self.max_batch_nodes = max_batch_nodes
        gpu_indptr = gpu_indices = None
        # The GPU sampler lives as long as the runtime: in UVA mode it holds the pin of the
        # host lists the runtime's streams read (a temporary one unpinned them at once).
        self._gpu_sampler = None
        if has_gpu:
            self._gpu_sampler = GraphSageSampler(topo, self.fanouts, device=self.device,
                                                 mode=gpu_mode)
            gpu_indptr, gpu_indices = self._gpu_sampler.placed_topology()
        if isinstance(feature, np.ndarray):
            feature = as_tensor(feature)
        if isinstance(feature, Tensor):
            # Rows read in place need a dense, row-major table: another layout is copied, as
            # Feature.from_cpu_tensor copies it (the runtime had refused a transposed table
            # as "tiers[0] must be contiguous", naming no argument of this call).
            no_meta(feature, "feature", "rows")
            if feature.dim() < 1:
                raise ValueError("feature must hold a row per node, got a 0-d tensor")
            tiers = torch.classes.quiver.FeatureTiers([feature.detach().contiguous()], None)
        elif not callable(getattr(feature, "tiers", None)):
            raise TypeError(f"feature must be a Feature or a tensor of rows, got "
                            f"{type(feature).__name__}")
        else:
            tiers = feature.tiers(self.device if self.device.type == "cuda" else None)
        self._runtime = torch.classes.quiver.ServingRuntime(
            topo.indptr.cpu(), topo.indices.cpu(), gpu_indptr, gpu_indices, tiers,
            self.fanouts, str(self.device), max_batch_nodes, max_wait_ms, max_queue,
            cpu_samplers, gpu_streams if has_gpu else 0,
            float("nan") if threshold is None else threshold, seed,
            bool(capture_batches), latency_objective_ms,
            0 if max_queue_nodes is None else max_queue_nodes)
        _fork.made_with_threads(self._runtime)
        self.psgs = PSGS.of_values(self._runtime.psgs())
        _open_runtimes.add(self)
        # A runtime dropped without close() is closed when collected (its threads hold only
        # what they use, not the runtime itself), before the GPU sampler's pins go with it.
        self._collecting = threading.Lock()  # guards the collecting thread, made at first use
        self._collectors: List[_Collector] = []  # it, once made (a list the finalizer holds)
        self._model_threads: List[threading.Thread] = []
        self._closer = weakref.finalize(self, _close_dropped, self._runtime, self._gpu_sampler,
                                        self._model_threads, self._collectors)
        self._closer.atexit = False  # at exit, _close_open_runtimes waits properly
        # One model thread per sampler: every batch in flight can be in the model at once.
        model_threads = cpu_samplers + (gpu_streams if has_gpu else 0)
        if self.package is not None:
            try:
                self._runtime.serve_package(self.package, model_threads)
            except BaseException:
                self._runtime.close(1.0)
                raise
            return
        self._model_threads.extend(
            threading.Thread(target=_model_loop, name=f"quiver-model-{i}", daemon=True,
                             args=(self._runtime, self._model_box, torch.cuda.Stream(self.device)
                                   if self.device.type == "cuda" else None))
            for i in range(model_threads))
        for thread in self._model_threads:
            thread.start()

    # ---- requests ----

    def submit(self, ids) -> _Answer:
        """Queues a request; ``.result(timeout)`` of what it returns is the model's rows
        for ``ids`` (CPU). Raises as the ops do for bad ids (TypeError for a tensor that
        holds no integers, IndexError for an id out of range, ValueError for a wrong shape,
        none or too many ids, or input that reads as no ids at all) and
        :class:`Overloaded` when the queue is full or the runtime is closing."""
        if isinstance(ids, (list, tuple)) and len(ids) == 0:
            raise ValueError("a request needs at least one node id")
        try:
            ids = as_tensor(ids)
        except (ValueError, RuntimeError, TypeError, OverflowError) as error:  # past int64
            raise ValueError(f"node ids must be 64-bit integers: {error}") from None
        if ids.is_meta or ids.layout != torch.strided:  # torch's own errors name no argument
            raise TypeError(f"node ids must be a dense tensor holding ids, got a "
                            f"{'meta' if ids.is_meta else ids.layout} tensor")
        self._check_not_inherited()
        ticket = self._runtime.submit(ids)  # checks shape, dtype, count and range
        if ticket == -1:
            raise Overloaded(f"the queue is full ({self.queued} requests waiting; at most "
                             f"{self.max_queue} requests and {self.max_queue_nodes} node ids)")
        if ticket == -2:
            raise Overloaded("the runtime is shutting down")
        return _Answer(self._runtime, ticket, self)

    def predict(self, ids, timeout: Optional[float] = None) -> Tensor:
        return self.submit(ids).result(timeout)

    def _check_not_inherited(self) -> None:
        if _fork.inherited(self._runtime):
            raise RuntimeError("this ServingRuntime was made before this process was forked: "
                               "its threads stayed in the parent, so it answers nothing here; "
                               "make a new one in this process")

    def stop_holding_batches(self) -> None:
        """From now on a batch closes as soon as the queue is empty, without waiting out
        ``max_wait_ms`` for more requests: for a shutdown that still takes the requests its
        connections accepted, and answers them at once."""
        if not _fork.inherited(self._runtime):
            self._runtime.stop_holding_batches()

    def __reduce__(self):
        # (copy.copy had shared the running C++ runtime: closing the copy stopped this one
        # while it still said "ok"; pickling named an internal class)
        raise TypeError("a ServingRuntime holds running threads and a model: it cannot be "
                        "copied or pickled; build one per process (or per GPU, in a "
                        "ServingPool)")

    @ctrl_c_ends_waits
    def close(self, timeout: float = 30.0) -> None:
        """Stops taking requests, answers every queued one (waiting up to ``timeout``
        seconds, ``math.inf`` for as long as it takes), then stops the threads. A runtime
        still open when the interpreter exits is closed then, and a model call still
        running is waited for then (up to ``LINGERING_JOIN_S``)."""
        if _fork.inherited(self._runtime):  # its threads are the parent's: nothing to stop
            self._closing = True
            _open_runtimes.discard(self)
            self._closer.detach()
            return
        timeout = _number(timeout, "timeout")
        _refuse_closing_from_a_model_thread([self], "ServingRuntime.close()")
        self._closing = True
        deadline = time.monotonic() + min(timeout, _NO_LIMIT_S)
        self._runtime.close(timeout)
        _open_runtimes.discard(self)
        self._closer.detach()
        for thread in self._model_threads:  # within what is left of the one timeout
            thread.join(max(0.0, deadline - time.monotonic()) if timeout < _NO_LIMIT_S
                        else None)
            if thread.is_alive():  # still in a model call: waited for at exit
                _lingering_model_threads.add(thread)
        with self._collecting:
            collector = self._collectors[0] if self._collectors else None
        if collector is not None:
            collector.stop()  # after close: it hands out every answer first

    @property
    def model(self):
        """The model the runtime's threads call (None for a package); assigning one takes
        effect from the next batch."""
        return self._model_box[0]

    @model.setter
    def model(self, model) -> None:
        self._model_box[0] = model

    def __enter__(self) -> "ServingRuntime":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _collector(self) -> "_Collector":
        """The runtime's one thread handing answers to event loops (made at first use)."""
        with self._collecting:
            if not self._collectors:
                self._collectors.append(_Collector(self._runtime))
            return self._collectors[0]

    # ---- dispatch ----

    @property
    def threshold(self) -> float:
        """PSGS at or below which a batch samples on the CPU."""
        return self._runtime.threshold()

    @threshold.setter
    def threshold(self, value: float) -> None:
        """Follow this threshold from now on, whatever the load."""
        self._runtime.set_threshold(_number(value, "threshold"))

    @property
    def dispatches_by_load(self) -> bool:
        """Whether batches go where they are predicted to finish first (a calibrated
        runtime) rather than by the threshold alone."""
        return self._runtime.dispatches_by_load()

    def target_of(self, cost: float) -> str:
        """Where an idle runtime sends a batch of PSGS ``cost``: the CPU at or below the
        threshold."""
        cost = _number(cost, "cost")
        if not cost >= 0 or math.isinf(cost):
            raise ValueError(f"cost must be a finite PSGS >= 0, got {cost!r}")
        return self._runtime.target_of(cost)

    def calibrate(self, sizes: Optional[Sequence[int]] = None, repeats: int = 5,
                  seed: int = 0) -> float:
        """Times sampling and gathering on the CPU and the GPU on this machine over batches
        of ``sizes`` random seeds (each in [1, max_batch_nodes]; default: 1, 4, 16, ...,
        1024 up to ``max_batch_nodes``, as at start-up), fits ``latency = a + b * PSGS`` to
        each, and returns the PSGS where the lines cross (the CPU's below it): the dispatch
        threshold. The fits are kept in ``calibration``; the threshold is not changed."""
        limit = self._runtime.max_batch_nodes()
        if sizes is None:
            sizes = torch.classes.quiver.ServingRuntime.calibration_sizes(limit)
        if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__iter__"):
            raise TypeError(f"sizes must be a sequence of batch sizes, got {sizes!r}")
        given = sizes.tolist() if hasattr(sizes, "tolist") else list(sizes)  # (NumPy, torch)
        checked = [as_int(size) for size in given]
        for size, value in zip(given, checked):
            if value is None or not 1 <= value <= limit:
                raise ValueError(f"sizes must hold ints in [1, max_batch_nodes={limit}], "
                                 f"got {size!r} in {given!r}")
        count, first = as_int(repeats), as_int(seed)  # (NumPy's ints too)
        if count is None or not 1 <= count <= 1_000_000:
            raise ValueError(f"repeats must be an int in [1, 1000000], got {repeats!r}")
        if first is None or not -2**63 <= first < 2**63:
            raise ValueError(f"seed must be an int that fits in 64 bits, got {seed!r}")
        crossing, cpu, gpu = self._runtime.calibrate(checked, count, first)
        self.calibration = {"cpu": tuple(cpu), "gpu": tuple(gpu)}
        return crossing

    # ---- reports ----

    @property
    def records(self) -> List[BatchRecord]:
        """The latest batches answered (at most 100000), oldest first."""
        return [BatchRecord(int(r[0]), int(r[1]), r[2], "gpu" if r[3] else "cpu", r[4], r[5], r[6])
                for r in self._runtime.records().tolist()]

    @property
    def accepted(self) -> int:
        """Requests queued so far."""
        return self._runtime.accepted()

    @property
    def max_queue(self) -> int:
        return self._runtime.max_queue()

    @property
    def max_queue_nodes(self) -> int:
        return self._runtime.max_queue_nodes()

    @property
    def closing(self) -> bool:
        """Whether :meth:`close` has begun (requests are refused from then on)."""
        return self._closing

    @property
    def queued(self) -> int:
        """Requests waiting now."""
        return self._runtime.queued()

    @property
    def outstanding(self) -> int:
        """Requests accepted and not yet answered (waiting, batched or in the model)."""
        return self._runtime.outstanding()

    def stats(self) -> Dict[str, float]:
        records = self._runtime.records()
        on_gpu = int(records[:, 3].sum()) if records.numel() else 0
        return {"batches": records.size(0), "queued": self._runtime.queued(),
                "cpu_batches": records.size(0) - on_gpu, "gpu_batches": on_gpu,
                "threshold": self.threshold, "by_load": self.dispatches_by_load}


class _LayersToAdjs(torch.nn.Module):
    """``model(x, adjs)`` called with the tensors a package takes: x, each layer's
    edge_index, then each layer's target count as the first dimension of an empty tensor."""

    def __init__(self, model: torch.nn.Module, num_layers: int):
        super().__init__()
        self.model, self.num_layers = model, num_layers

    def forward(self, x: Tensor, *layers: Tensor) -> Tensor:
        adjs, sources = [], x.size(0)
        for edge_index, targets in zip(layers[:self.num_layers], layers[self.num_layers:]):
            adjs.append(Adj(edge_index, None, (sources, targets.size(0))))
            sources = targets.size(0)
        return self.model(x, adjs)


def package_for_serving(model: torch.nn.Module, num_layers: int, in_channels: int,
                        package_path: Union[str, os.PathLike], device=None,
                        dtype: torch.dtype = torch.float32) -> str:
    """Compiles ``model(x, adjs)`` (as :class:`ServingRuntime` takes it) with torch.export
    and AOTInductor into a package a ServingRuntime runs on C++ threads: batches then never
    wait for Python (on the H100, Python model threads capped a runtime near 3,000 requests
    a second). Every size is dynamic: nodes, edges and targets per layer. ``device`` (default:
    the current GPU, else the CPU) and ``dtype`` (the features') must be the runtime's.
    Returns the package's path. Compiling takes a minute or so. The package reads its inputs
    with the strides it was traced with (contiguous): the runtime hands it contiguous ones."""
    from torch.export import Dim, export

    from .aoti import compile_and_package
    if num_layers < 1 or in_channels < 1:
        raise ValueError(f"num_layers and in_channels must be positive, got {num_layers} and "
                         f"{in_channels}")
    device = resolve_device(device)
    model = model.to(device).eval()
    # An example batch whose sizes are all different and above 1, so that none is
    # specialized: nodes shrink layer by layer, as sampled layers do.
    nodes = [5 + 7 * (num_layers - i) ** 2 for i in range(num_layers + 1)]
    x = torch.randn(nodes[0], in_channels, device=device, dtype=dtype)
    edges = [torch.stack([torch.randint(nodes[i], (3 * nodes[i] + 2,), device=device),
                          torch.randint(nodes[i + 1], (3 * nodes[i] + 2,), device=device)])
             for i in range(num_layers)]
    targets = [torch.empty(nodes[i + 1], 0, device=device, dtype=dtype)
               for i in range(num_layers)]
    dynamic = ({0: Dim.DYNAMIC},  # x, then *layers: the edges, then the targets
               ({1: Dim.DYNAMIC},) * num_layers + ({0: Dim.DYNAMIC},) * num_layers)
    with torch.no_grad():
        program = export(_LayersToAdjs(model, num_layers).eval(), (x, *edges, *targets),
                         dynamic_shapes=dynamic)
    return compile_and_package(program, package_path)


class ServingPool:
    """Several :class:`ServingRuntime` (one per GPU, say, each with its own samplers, feature
    tiers and model) behind one face, which :func:`serve_http` and a load generator use like
    one runtime: each request goes to the runtime with the fewest requests outstanding
    (waiting, batched or in the model), ties taken in turn. Every runtime must serve the
    same graph."""

    def __init__(self, runtimes: Sequence[ServingRuntime]):
        self.runtimes = list(runtimes)
        if not self.runtimes:
            raise ValueError("a serving pool needs at least one runtime")
        nodes = {r.num_nodes for r in self.runtimes}
        if len(nodes) != 1:
            raise ValueError(f"the runtimes of a pool must serve one graph; they have "
                             f"{sorted(nodes)} nodes")
        self.num_nodes = self.runtimes[0].num_nodes
        self.max_batch_nodes = min(r.max_batch_nodes for r in self.runtimes)
        self._turn = itertools.count()

    def submit(self, ids) -> _Answer:
        """As :meth:`ServingRuntime.submit`, on the runtime with the fewest requests
        outstanding (ties in turn); one that refuses (full, or closed) passes the request to
        the next, and :class:`Overloaded` comes only when every runtime refuses."""
        first = next(self._turn) % len(self.runtimes)
        indices = list(range(first, len(self.runtimes))) + list(range(first))
        refusals = {}
        # (a closed runtime has none outstanding: taken first, it had refused most requests)
        for k in sorted(indices, key=lambda k: self.runtimes[k].outstanding):  # ties in turn
            try:
                return self.runtimes[k].submit(ids)
            except Overloaded as error:
                refusals[k] = str(error)
        if len(set(refusals.values())) == 1:
            raise Overloaded(f"every runtime of the pool refused: {refusals[first]}")
        raise Overloaded("every runtime of the pool refused: " + "; ".join(
            f"runtime {k}: {refusals[k]}" for k in sorted(refusals)))

    def predict(self, ids, timeout: Optional[float] = None) -> Tensor:
        return self.submit(ids).result(timeout)

    def stop_holding_batches(self) -> None:
        for runtime in self.runtimes:
            runtime.stop_holding_batches()

    def __reduce__(self):
        raise TypeError("a ServingPool holds running ServingRuntimes: it cannot be copied or "
                        "pickled; build one per process")

    def close(self, timeout: float = 30.0) -> None:
        # (refused before any is closed: one refusal midway had left the pool half closed)
        _refuse_closing_from_a_model_thread(self.runtimes, "ServingPool.close()")
        for runtime in self.runtimes:
            runtime.close(timeout)

    @property
    def closing(self) -> bool:
        """Whether every runtime's :meth:`~ServingRuntime.close` has begun (until then the
        pool passes requests to those still open)."""
        return all(r.closing for r in self.runtimes)

    def __enter__(self) -> "ServingPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def threshold(self) -> List[float]:
        return [r.threshold for r in self.runtimes]

    @property
    def accepted(self) -> int:
        return sum(r.accepted for r in self.runtimes)

    @property
    def max_queue(self) -> int:
        return sum(r.max_queue for r in self.runtimes)

    def stats(self) -> Dict[str, float]:
        """The runtimes' stats summed (their thresholds as a list), and each one's batches."""
        each = [r.stats() for r in self.runtimes]
        total = {key: sum(s[key] for s in each)
                 for key in ("batches", "queued", "cpu_batches", "gpu_batches")}
        return {**total, "threshold": [s["threshold"] for s in each],
                "batches_per_runtime": [s["batches"] for s in each]}


# ---- the HTTP endpoint ----

MAX_BODY_BYTES = 1 << 20
# The longest a client may take to send one request's headers and body: a client that sends
# a byte now and then would otherwise hold a connection (and shutdown, which waits for the
# requests it reads) for as long as it keeps sending.
READ_TIMEOUT_S = 10.0
# A kept-alive connection awaits its next request in reads this long, so that a shutdown
# ends it within one once no request has come (at most this long after shutdown begins)
IDLE_SLICE_S = 0.5
# Connections served at once (the standard library's server: a thread each). Past it, the
# standard library's server leaves new ones waiting in the kernel's backlog, uvicorn 503s.
MAX_CONNECTIONS = 1024
SERVERS = ("auto", "uvicorn", "stdlib")


class _Reply(Exception):
    """An answer decided while reading a request: its status, body and headers, and whether
    the connection must close (a body whose length is unknown cannot be skipped)."""

    def __init__(self, status: int, body: dict, headers: Optional[dict] = None,
                 close: bool = False):
        super().__init__(body)
        self.status, self.body, self.headers, self.close = status, body, headers or {}, close

    def headers_to_send(self) -> dict:
        """Its headers, with ``Connection: close`` when the connection ends after it."""
        return {**self.headers, **({"Connection": "close"} if self.close else {})}


def _body_length(header: Optional[str]) -> int:
    """A request body's byte count from its Content-Length header, or the reply refusing it.
    Only decimal digits count: int() would also take "+15" or "1_5", which a proxy in front
    may read otherwise, and then the two disagree on where the next request starts."""
    header = "0" if header is None else header.strip()
    if not (header.isascii() and header.isdigit()):
        raise _Reply(HTTPStatus.BAD_REQUEST,
                     {"error": f"Content-Length must be a byte count, got {header!r}"},
                     close=True)
    length = int(header)
    if length > MAX_BODY_BYTES:
        raise _Reply(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                     {"error": f"a request body holds at most 1 MiB, got {length} bytes"},
                     close=True)
    return length


def _json_int(digits: str) -> int:
    """A JSON integer of a body: one past any id's width is refused by its length, before
    int() refuses 4,301 digits with advice for the server's programmer (to raise
    sys.set_int_max_str_digits) sent back as the client's error."""
    if len(digits) > 40:
        raise ValueError(f"the body holds an integer of {len(digits)} digits: node ids are "
                         f"int64")
    return int(digits)


def _submit_body(runtime, body: bytes):
    """Parses a /predict body and queues it: the node ids and the runtime's answer, or the
    reply refusing the request (400 bad body or ids, 413 too many ids, 503 overloaded)."""
    try:
        try:
            parsed = json.loads(body or b"null", parse_int=_json_int)
        except UnicodeDecodeError as error:
            raise ValueError(f'the body is not UTF-8 ({error}); it must be JSON: {{"nodes": '
                             f'[node ids as integers]}}') from None
        except json.JSONDecodeError as error:  # (said only where parsing stopped)
            raise ValueError(f'the body is not JSON ({error}); it must be {{"nodes": [node '
                             f'ids as integers]}}') from None
        nodes = parsed.get("nodes") if isinstance(parsed, dict) else None
        if not isinstance(nodes, list) or not all(map(is_int, nodes)):
            raise ValueError('the body must be {"nodes": [node ids as integers]}')
        if len(nodes) > runtime.max_batch_nodes:
            raise _Reply(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {
                "error": f"a request holds at most {runtime.max_batch_nodes} node ids, got "
                         f"{len(nodes)}"})
        return nodes, runtime.submit(nodes)
    except (ValueError, TypeError, IndexError) as error:  # JSON's and Unicode's are ValueErrors
        raise _Reply(HTTPStatus.BAD_REQUEST, {"error": str(error)}) from None
    except RecursionError:  # json's parser recurses once per nested list or object
        raise _Reply(HTTPStatus.BAD_REQUEST,
                     {"error": 'the body nests too deeply; it must be {"nodes": [node ids '
                               'as integers]}'}) from None
    except Overloaded as error:
        raise _Reply(HTTPStatus.SERVICE_UNAVAILABLE, {"error": str(error)},
                     {"Retry-After": "1"}) from None


ANSWER_TIMEOUT_S = 60.0  # an endpoint's longest wait for the model's answer to a request
_NO_LIMIT_S = 1e9  # a timeout this long is none (threading's waits refuse infinity)
# How the runtime words the failures that are not the model's (runtime/serving.cpp): an
# answer that took too long (504) and one a closing runtime gave up on (503).
_NOT_ANSWERED_IN_TIME = "was not answered within"
_CLOSED_BEFORE_ANSWER = "the runtime closed before the model answered"


def _answer(nodes, answer, to_json):
    """The status and body of a queued request once the model has answered it."""
    try:
        out = answer.result(timeout=ANSWER_TIMEOUT_S)
    except Exception as error:  # noqa: BLE001 (the model's or the runtime's failure)
        return _failed(error)
    return _answered(nodes, out, to_json)


def _answered(nodes, out: Tensor, to_json):
    try:
        predictions = to_json(out)
    except Exception as error:  # noqa: BLE001 (a 500 in JSON, as the model's own failure)
        return HTTPStatus.INTERNAL_SERVER_ERROR, {
            "error": f"to_json failed on the model's answer: {type(error).__name__}: {error}"}
    # What the answer will carry must be strict JSON, checked here so that a bad one is a
    # 500 that says so (the reply's own encoding would drop the connection).
    try:
        json.dumps(predictions, allow_nan=False)
    except ValueError as error:
        if "Out of range float" in str(error):  # json's words for NaN and infinity
            return HTTPStatus.INTERNAL_SERVER_ERROR, {
                "error": "the model's answer holds NaN or infinity, which JSON cannot carry"}
        return HTTPStatus.INTERNAL_SERVER_ERROR, {  # a list that holds itself, say
            "error": f"to_json's answer cannot be written as JSON ({error})"}
    except (TypeError, RecursionError) as error:
        return HTTPStatus.INTERNAL_SERVER_ERROR, {
            "error": f"to_json returned {type(predictions).__name__}, which JSON cannot carry "
                     f"({error}): return lists of Python numbers (tensor.tolist())"}
    return HTTPStatus.OK, {"nodes": nodes, "predictions": predictions}


def _failed(error: Exception):
    """The status of a request the model did not answer: 504 when the answer took too long,
    503 when the runtime closed first (neither is the server's fault), else 500."""
    message = str(error)
    if isinstance(error, TimeoutError) or _NOT_ANSWERED_IN_TIME in message:
        return HTTPStatus.GATEWAY_TIMEOUT, {"error": message}
    if _CLOSED_BEFORE_ANSWER in message:
        return HTTPStatus.SERVICE_UNAVAILABLE, {"error": message}
    return HTTPStatus.INTERNAL_SERVER_ERROR, {"error": message}


def _health(runtime, draining: bool = False) -> Tuple[HTTPStatus, dict]:
    """GET /health's status and body: 200 "ok", or 503 "closing" once the runtime's close
    has begun (it had said ok while /predict answered 503, so a load balancer kept sending
    to it: a probe) or the endpoint's shutdown has (``draining``: it answers what it had
    accepted, then closes the runtime, and had said ok meanwhile), with the runtime's stats
    as strict JSON (a threshold of infinity, every batch on the CPU, is null: JSON has no
    infinity, and strict parsers refuse Python's ``Infinity``)."""
    def finite(value):
        if isinstance(value, float) and not math.isfinite(value):
            return None
        return [finite(v) for v in value] if isinstance(value, list) else value
    closing = draining or runtime.closing
    return (HTTPStatus.SERVICE_UNAVAILABLE if closing else HTTPStatus.OK,
            {"status": "closing" if closing else "ok",
             **{key: finite(value) for key, value in runtime.stats().items()}})


class _Collector:
    """Hands one runtime's answers to asyncio event loops: a single thread takes every
    answer as it comes (``next_collected``) and resolves its request's future in the
    future's loop. A thread waiting on each request instead made the endpoint switch
    between hundreds of threads, each taking Python's lock in turn: on 2 cores it answered
    less than half as many requests a second (docs/benchmarks.md). One per runtime, for
    every loop and app over it (``next_collected`` hands each answer out once); stopped by
    the runtime's close."""

    def __init__(self, runtime: "torch.ScriptObject"):
        import asyncio
        self._asyncio = asyncio
        self._runtime = runtime
        self._futures: Dict[int, object] = {}  # ticket -> its future
        self._lock = threading.Lock()  # guards _futures and _thread
        self._stopping = threading.Event()
        self._thread: Optional[threading.Thread] = threading.Thread(
            target=self._hand_out, name="quiver-collect", daemon=True)
        self._thread.start()

    def expect(self, ticket: int):
        """The future of a submitted ticket's ``(rows, None)`` or ``(None, error)``, in the
        running loop."""
        future = self._asyncio.get_running_loop().create_future()
        with self._lock:
            stopped = self._thread is None
            if not stopped:
                self._futures[ticket] = future
        if stopped:
            # The runtime is closed, and its close answered or failed every request: the
            # outcome is taken here. A thread started now would outlive every join and be
            # cut off in a C++ wait at exit, which aborts the process.
            future.set_result(self._take(ticket, closed=True))
            return future
        try:
            self._runtime.collect(ticket)
        except Exception:
            with self._lock:
                self._futures.pop(ticket, None)
            raise
        return future

    def _hand_out(self) -> None:
        while True:
            tickets = self._runtime.next_collected(0.1)  # waits without Python's lock
            by_loop: Dict[object, list] = {}
            with self._lock:
                if not tickets and not self._futures and self._stopping.is_set():
                    self._thread = None  # the runtime is closed and every answer is out
                    return
                found = [(ticket, self._futures.pop(ticket, None)) for ticket in tickets]
            for ticket, future in found:
                if future is None:  # cannot happen: expect() adds it before collect()
                    self._take(ticket)
                else:
                    by_loop.setdefault(future.get_loop(), []).append((ticket, future))
            # One call into each loop for all its answers, which takes their rows there.
            for loop, waiting in by_loop.items():
                try:
                    loop.call_soon_threadsafe(self._settle, waiting)
                except RuntimeError:  # that loop is closed: nobody waits for these
                    for ticket, _ in waiting:
                        self._take(ticket)

    def _take(self, ticket: int, closed: bool = False) -> tuple:
        """A handed-out ticket's ``(rows, None)`` or ``(None, error)``; ``closed``: one never
        collected, of a closed runtime (which answered or failed it)."""
        try:
            return (self._runtime.wait(ticket, 0.0) if closed
                    else self._runtime.take(ticket)), None
        except Exception as error:  # noqa: BLE001 (the model's or the runtime's failure)
            return None, error

    def _settle(self, waiting) -> None:
        for ticket, future in waiting:
            outcome = self._take(ticket)
            if not future.done():  # else its request gave up (timed out, or went away)
                future.set_result(outcome)

    def stop(self) -> None:
        """Once the runtime is closed: ends the thread when every answer is out."""
        self._stopping.set()
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join()


def _argmax_classes(out: Tensor) -> list:
    """The default answer: each node's class, the argmax of its model output row."""
    if out.dim() != 2:
        # argmax over a 1-D output is one number for the whole request, not one per node.
        raise ValueError(
            f"the default answer is each node's argmax over a [nodes, classes] output, and "
            f"the model answered shape {list(out.shape)}: give to_json (e.g. "
            f"lambda out: out.tolist()) for other outputs")
    if out.is_floating_point() and bool(torch.isnan(out).any()):
        # argmax reads NaN as the largest value: a model gone NaN had answered class 0 for
        # every node (a probe). _answered makes this a 500 that says so. (Infinities are
        # argmax's as any value: -inf masks a class.)
        raise ValueError("the model's answer holds NaN, so no class can be read from it")
    return out.argmax(-1).tolist()


_METHODS = {"/health": "GET, HEAD", "/predict": "POST"}


def _host_refusal(hosts: int) -> str:
    """RFC 9112 (3.2): a server must answer 400 to an HTTP/1.1 request without a Host
    header, and to any with more than one (proxies may route by the one we do not read)."""
    return ("an HTTP/1.1 request needs a Host header" if not hosts else
            f"a request holds one Host header, got {hosts}")


def _refused_path(path: str, close: bool = False, method: str = "") -> _Reply:
    """404 for a path the endpoint does not have; 405 (with Allow) for one of its paths
    asked with another method, which is not a missing path."""
    if path in _METHODS:
        return _Reply(HTTPStatus.METHOD_NOT_ALLOWED,
                      {"error": f"{path} takes {_METHODS[path].replace(', ', ' or ')}, got "
                                f"{method or 'another'}"},
                      {"Allow": _METHODS[path]}, close=close)
    return _Reply(HTTPStatus.NOT_FOUND, {"error": f"no such path {path!r}"}, close=close)


class _ReadsByDeadline(io.RawIOBase):
    """A connection's reads, each of which waits at most until its request's deadline (and,
    before a request's first bytes, at most the handler's idle timeout): a socket timeout
    alone restarts with every byte. The deadline is `read_timeout` after the request's
    first bytes."""

    def __init__(self, handler: "_Handler"):
        super().__init__()
        self._handler = handler

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        handler = self._handler
        while True:
            left = handler.read_deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the request took longer to arrive than its deadline")
            # The idle timeout bounds the wait for a request; once its bytes come, only its
            # deadline does (capping each read at 5 s too gave a 408 after a 5 s pause that
            # said read_timeout had passed). A request is awaited in slices, so that a
            # shutdown begun meanwhile ends an idle connection within one, here in its own
            # thread (each had held shutdown for the whole idle timeout).
            idle = handler.awaiting_request
            handler.connection.settimeout(min(left, handler.timeout, IDLE_SLICE_S) if idle
                                          else left)
            try:
                count = handler.connection.recv_into(buffer)
            except TimeoutError:
                if not idle:
                    raise
                if handler.server.stopping:
                    return 0  # no request came: the connection ends as at its close
                continue  # the deadline decides
            if count and idle:
                handler.awaiting_request = False
                handler.read_deadline = time.monotonic() + handler.read_timeout
            return count


# The stdlib server a connection's thread handles requests for (HttpServer.shutdown, which
# joins those threads, refuses to run in one of them).
_handling = threading.local()


class _Handler(BaseHTTPRequestHandler):
    runtime: ServingRuntime
    to_json: Callable[[Tensor], list]
    read_timeout: float = READ_TIMEOUT_S
    read_deadline: float = 0.0  # set as each request is awaited, then as its bytes come
    awaiting_request = True
    protocol_version = "HTTP/1.1"
    # Headers and body leave in two writes: with Nagle's algorithm the second waits for the
    # client's delayed ACK of the first (about 40 ms on Linux).
    disable_nagle_algorithm = True
    # An idle kept-alive connection closes after this many seconds (uvicorn's default too),
    # so that shutdown, which joins every connection's thread, never waits on one forever.
    timeout = 5

    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass  # one line per request on stderr would swamp a load test

    def setup(self):
        super().setup()
        _handling.server = self.server
        self.rfile = io.BufferedReader(_ReadsByDeadline(self))

    def handle_one_request(self):
        # An idle kept-alive connection may wait `timeout` for its next request, which then
        # has `read_timeout` from its first bytes to arrive whole.
        self.awaiting_request = True
        self.read_deadline = time.monotonic() + self.timeout
        super().handle_one_request()

    def send_error(self, code, message=None, explain=None):
        """The base class's own refusals (a malformed request line, headers too large, a
        method no HTTP server knows) as JSON, like the endpoint's."""
        if self.request_version == "HTTP/0.9":
            # Refused before a valid version was read (the base class's default is 0.9,
            # whose answers carry no status line): answered as 1.0, status line first.
            self.request_version = "HTTP/1.0"
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = str(code)
        self._reply(code, {"error": message or phrase}, {"Connection": "close"})

    def _reply(self, status: int, body: dict, headers: Optional[dict] = None) -> None:
        self.connection.settimeout(self.timeout)  # not what is left of the read deadline
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        headers = dict(headers or {})
        if self.server.stopping:
            # Shutting down: this connection's last answer. Shutdown joins every
            # connection's thread, and a client that kept sending on a kept-alive one
            # would hold it (and be served) for as long as it kept sending.
            headers["Connection"] = "close"
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if getattr(self, "command", None) != "HEAD":  # a HEAD answer has headers only
            self.wfile.write(data)

    def _refuse(self, reply: _Reply) -> None:
        # send_header("Connection", "close") also ends the connection after this answer.
        self._reply(reply.status, reply.body, reply.headers_to_send())

    def parse_request(self):
        self.requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        if len(self.requestline.split()) == 2:
            # A request line with no version is HTTP/0.9, which http.server answers with a
            # bare body, no status line (a client could not tell a refusal from an answer),
            # after waiting for headers that HTTP/0.9 never sends. Refused at once, as 1.0.
            self.command, self.request_version = None, "HTTP/1.0"
            self.send_error(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED,
                            f"an HTTP/0.9 request line ({self.requestline!r}): this server "
                            f"speaks HTTP/1.0 and 1.1")
            return False
        if not super().parse_request():
            return False
        if self.request_version == "HTTP/0.9":  # named in the request line
            self.send_error(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED,
                            "an HTTP/0.9 request: this server speaks HTTP/1.0 and 1.1")
            return False
        if any(isinstance(d, (email.errors.MissingHeaderBodySeparatorDefect,
                              email.errors.FirstHeaderLineIsContinuationDefect))
               for d in self.headers.defects):
            # A header line without a colon ends http.client's parsing of the headers:
            # those after it (Content-Length among them) were dropped, and the body would
            # have been read as the next request.
            self.send_error(HTTPStatus.BAD_REQUEST, "a malformed header line")
            return False
        hosts = self.headers.get_all("Host") or []
        if len(hosts) > 1 or (not hosts and self.request_version == "HTTP/1.1"):
            self.send_error(HTTPStatus.BAD_REQUEST, _host_refusal(len(hosts)))
            return False
        return True

    @property
    def _path(self) -> str:
        # Percent-decoded, as ASGI gives it (uvicorn served /%70redict, this server 404'd it)
        return unquote(urlsplit(self.path).path)

    def do_GET(self):  # noqa: N802 (http.server's name)
        path = self._path
        # A body is never read here: left in the stream it would be read as the next
        # request, so a GET that announces one ends its connection.
        has_body = (bool(self.headers.get("Transfer-Encoding")) or
                    any(v.strip() not in ("", "0")
                        for v in self.headers.get_all("Content-Length") or []))
        if path == "/health":
            self._reply(*_health(self.runtime, self.server.stopping),
                        {"Connection": "close"} if has_body else None)
        else:
            self._refuse(_refused_path(path, close=has_body, method=self.command))

    do_HEAD = do_GET  # a load balancer's probe: the same headers, no body (see _reply)

    def _refuse_method(self):
        # Any body is left unread: the connection must close.
        self._refuse(_refused_path(self._path, close=True, method=self.command))

    # Methods the endpoint does not take on any path: 405 with Allow where the path is one
    # of its own (http.server would answer 501, which says no server knows the method).
    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = _refuse_method

    def _checked_body_length(self) -> int:
        """A POST's body length, or the _Reply that refuses the request with its body
        unread (the connection then closes)."""
        path = self._path
        if path != "/predict":
            raise _refused_path(path, close=True, method="POST")
        if self.headers.get("Transfer-Encoding"):
            raise _Reply(HTTPStatus.LENGTH_REQUIRED,
                         {"error": "send the body with a Content-Length (this server "
                                   "reads no chunked bodies)"}, close=True)
        lengths = {v.strip() for v in self.headers.get_all("Content-Length") or []}
        if len(lengths) > 1:  # which one frames the body is anyone's guess
            raise _Reply(HTTPStatus.BAD_REQUEST,
                         {"error": f"Content-Length given as {sorted(lengths)}"}, close=True)
        return _body_length(lengths.pop() if lengths else None)

    def handle_expect_100(self):
        # A body the request's head already refuses gets the refusal at once: "100
        # Continue" first had asked the client for 5 MB that were never read. Only POST
        # /predict reads a body.
        if self.command != "POST":
            return True
        try:
            self._checked_body_length()
        except _Reply:
            return True  # do_POST refuses it, reading no body
        return super().handle_expect_100()

    def do_POST(self):  # noqa: N802
        try:
            length = self._checked_body_length()
            try:
                body = self.rfile.read(length)
            except TimeoutError:
                raise _Reply(HTTPStatus.REQUEST_TIMEOUT,
                             {"error": f"the body did not arrive within {self.read_timeout:g} "
                                       f"s"}, close=True) from None
            if len(body) < length:  # the client stopped sending: nothing to answer from
                raise _Reply(HTTPStatus.BAD_REQUEST,
                             {"error": f"the body ended after {len(body)} of its "
                                       f"Content-Length of {length} bytes"}, close=True)
            nodes, answer = _submit_body(self.runtime, body)
        except _Reply as reply:
            self._refuse(reply)
            return
        self._reply(*_answer(nodes, answer, type(self).to_json))


def asgi_app(runtime: Union[ServingRuntime, ServingPool],
             to_json: Optional[Callable[[Tensor], list]] = None,
             waiters: Optional[int] = None, read_timeout: float = READ_TIMEOUT_S):
    """The endpoint of :func:`serve_http` as an ASGI application, for any ASGI server
    (uvicorn, hypercorn...). The event loop never blocks: one thread per runtime takes the
    answers as they come and hands each to its request (:class:`_Collector`); closing the
    runtime stops it. ``to_json`` runs in the event loop, so keep it cheap (the default
    takes each row's argmax). A body that takes longer than ``read_timeout`` seconds to
    arrive is a 408 (headers are the server's to time). ``waiters`` is ignored (there is no
    pool of waiting threads any more)."""
    import asyncio

    read_timeout = _checked_read_timeout(read_timeout)
    if waiters is not None:
        warnings.warn("asgi_app(waiters=...) is ignored: one thread per runtime hands out "
                      "the answers", DeprecationWarning, stacklevel=2)
    to_json = to_json or _argmax_classes

    async def send_json(send, status: int, body: dict, headers: Optional[dict] = None):
        data = json.dumps(body).encode()
        fields = [(b"content-type", b"application/json"),
                  (b"content-length", str(len(data)).encode())]
        fields += [(k.lower().encode(), str(v).encode()) for k, v in (headers or {}).items()]
        await send({"type": "http.response.start", "status": int(status), "headers": fields})
        await send({"type": "http.response.body", "body": data})

    async def read_body(receive, limit: int) -> bytes:
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ConnectionResetError("the client went away")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise _Reply(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                             {"error": f"a request body holds at most 1 MiB, got more than "
                                       f"{limit} bytes"}, close=True)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    awaiting = [0]  # requests waiting for the model's answer (what shutdown waits for)
    draining = [False]  # set by HttpServer.shutdown: /health says "closing"

    async def answer_of(nodes, answer: _Answer):
        awaiting[0] += 1
        try:
            rows, error = await asyncio.wait_for(answer.collected(), ANSWER_TIMEOUT_S)
        except asyncio.TimeoutError:
            return _failed(TimeoutError(f"request {answer._ticket} was not answered within "
                                        f"{ANSWER_TIMEOUT_S:g} s"))
        finally:
            awaiting[0] -= 1
        return _failed(error) if error is not None else _answered(nodes, rows, to_json)

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        try:
            hosts = sum(name == b"host" for name, _ in scope["headers"])
            if hosts > 1 or (not hosts and scope.get("http_version") == "1.1"):
                raise _Reply(HTTPStatus.BAD_REQUEST, {"error": _host_refusal(hosts)},
                             close=True)
            if method in ("GET", "HEAD") and path == "/health":  # uvicorn drops HEAD's body
                await send_json(send, *_health(runtime, draining[0]))
                return
            if method != "POST" or path != "/predict":
                raise _refused_path(path, method=method)
            # A stated length past the cap is refused before its body is read; a body
            # without one (chunked) is read up to the cap.
            _body_length(dict(scope["headers"]).get(b"content-length", b"0").decode("latin-1"))
            try:
                body = await asyncio.wait_for(read_body(receive, MAX_BODY_BYTES), read_timeout)
            except asyncio.TimeoutError:
                raise _Reply(HTTPStatus.REQUEST_TIMEOUT,
                             {"error": f"the body did not arrive within {read_timeout:g} s"},
                             close=True) from None
            nodes, answer = _submit_body(runtime, body)
        except _Reply as reply:
            await send_json(send, reply.status, reply.body, reply.headers_to_send())
            return
        except ConnectionResetError:
            return
        await send_json(send, *(await answer_of(nodes, answer)))

    app.requests_awaiting_answers = lambda: awaiting[0]
    app.begin_draining = lambda: draining.__setitem__(0, True)
    return app


def _checked_read_timeout(read_timeout: float) -> float:
    read_timeout = float(read_timeout)
    if not (0 < read_timeout < math.inf):
        raise ValueError(f"read_timeout must be a positive number of seconds, got "
                         f"{read_timeout}")
    return read_timeout


class _ThreadingServer(ThreadingHTTPServer):
    # socketserver's backlog of 5 drops the SYNs of a burst of new connections, which the
    # clients resend a second later (seen as a p99 of 0.4-0.8 s under 32 connections).
    request_queue_size = 1024
    stopping = False  # set by HttpServer.shutdown: each connection closes after its answer

    def __init__(self, address, handler, max_connections: int):
        self.max_connections, self._connections = max_connections, 0
        self._connection_ended_cv = threading.Condition()
        # The host's own family: socketserver's is IPv4 only (an IPv6 host such as ::1 was
        # "Address family for hostname not supported", where uvicorn served it).
        # ("" is every IPv4 address, as socketserver takes it; getaddrinfo knows no "")
        self.address_family = (socket.getaddrinfo(*address, type=socket.SOCK_STREAM)[0][0]
                               if address[0] else socket.AF_INET)
        super().__init__(address, handler)

    def process_request(self, request, client_address):
        # At the cap, the next connection waits in the kernel's backlog until a handler's
        # thread ends (an idle kept-alive one ends after the handler's timeout): clients
        # that held connections open had grown a thread each, without bound. Shutdown
        # serves what it accepted without waiting.
        with self._connection_ended_cv:
            while self._connections >= self.max_connections and not self.stopping:
                self._connection_ended_cv.wait(0.1)
            self._connections += 1
        try:
            super().process_request(request, client_address)  # starts the thread
        except BaseException:
            self._connection_ended()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._connection_ended()

    def _connection_ended(self) -> None:
        with self._connection_ended_cv:
            self._connections -= 1
            self._connection_ended_cv.notify()

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return  # a client that hung up mid-answer: nothing to report
        super().handle_error(request, client_address)

    def take_backlog(self) -> None:
        """Serves the connections the kernel accepted that serve_forever had not taken when
        it stopped (up to the backlog of 1024): closing the socket with them still queued
        reset clients whose requests were already sent (88 of a burst of 600, seen by a
        probe), where uvicorn answers them. Only those queued now: clients that reconnect
        as soon as they are answered kept the queue full, and shutdown had served them for
        as long as they kept coming (90 s and more under 128 clients, a probe)."""
        queued = _accept_queue_length(self.socket)
        for _ in range(self.request_queue_size + 1 if queued is None else queued):
            try:
                self.socket.setblocking(False)
                request, address = self.socket.accept()
            except OSError:  # none left (BlockingIOError), or the socket is closed
                return
            request.setblocking(True)
            self.process_request(request, address)  # a thread, joined by server_close


def _accept_queue_length(listening: socket.socket) -> Optional[int]:
    """How many connections wait in a listening socket's accept queue (Linux: TCP_INFO's
    tcpi_unacked, what ``ss -lt`` shows as Recv-Q), or None where that cannot be read."""
    if not sys.platform.startswith("linux"):  # (BSDs name the field but leave it 0)
        return None
    try:
        info = listening.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
        return struct.unpack_from("I", info, 24)[0]
    except (AttributeError, OSError, struct.error):  # (no TCP_INFO here, or not TCP)
        return None


# uvicorn's warnings that any client can cause, one line each time
_CLIENT_FAULTS = ("Invalid HTTP request", "Exceeded concurrency limit")


class _ClientFaultsOncePerMinute(logging.Filter):
    """uvicorn logs each malformed request a client sends at WARNING ("Invalid HTTP request
    received."), and each connection past its limit ("Exceeded concurrency limit."), so any
    client could grow the log without bound (found by probes): one line of each kind a
    minute, saying how many were held back since the last."""

    PERIOD_S = 60.0

    def __init__(self):
        super().__init__()
        self._lock = threading.Lock()
        # per kind, so that a flood of one hides none of the other
        self._last = {kind: -math.inf for kind in _CLIENT_FAULTS}
        self._held = {kind: 0 for kind in _CLIENT_FAULTS}

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        kind = next((k for k in _CLIENT_FAULTS if message.startswith(k)), None)
        if kind is None:
            return True
        with self._lock:
            now = time.monotonic()
            if now - self._last[kind] < self.PERIOD_S:
                self._held[kind] += 1
                return False
            if self._held[kind]:
                record.msg = (f"{message} ({self._held[kind]} more held back since the last "
                              f"such line)")
                record.args = None
            self._last[kind], self._held[kind] = now, 0
        return True


class HttpServer:
    """A running endpoint: ``url``, ``kind`` (``"uvicorn"`` or ``"stdlib"``), ``runtime``
    (the :class:`ServingRuntime` or :class:`ServingPool` it serves: its counters), and
    :meth:`shutdown` that stops taking connections, answers every request already
    accepted, then closes the runtime. An endpoint still running when the program's main
    thread ends (its last line, or a Ctrl-C) is shut down the same way then."""

    def __init__(self, runtime: Union[ServingRuntime, ServingPool], host: str = "127.0.0.1",
                 port: int = 0, to_json: Optional[Callable[[Tensor], list]] = None,
                 server: str = "auto", read_timeout: float = READ_TIMEOUT_S,
                 max_connections: int = MAX_CONNECTIONS):
        if server not in SERVERS:
            raise ValueError(f"server must be one of {SERVERS}, got {server!r}")
        if not is_int(port) or not 0 <= port <= 65535:
            raise ValueError(f"port must be an int in [0, 65535] (0: any free port), got "
                             f"{port!r}")
        if not is_int(max_connections) or max_connections < 1:
            raise ValueError(f"max_connections must be an int >= 1, got {max_connections!r}")
        self._read_timeout = _checked_read_timeout(read_timeout)
        self._max_connections = max_connections
        if server == "auto":
            server = "uvicorn" if _has_uvicorn() else "stdlib"
        self.runtime, self.kind = runtime, server
        start = self._start_stdlib if server == "stdlib" else self._start_uvicorn
        port = start(host, port, to_json or _argmax_classes)
        self.url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
        _open_servers[self] = os.getpid()

    def _start_stdlib(self, host: str, port: int, to_json) -> int:
        handler = type("Handler", (_Handler,), {"runtime": self.runtime,
                                                "to_json": staticmethod(to_json),
                                                "read_timeout": self._read_timeout})
        self._stdlib = _ThreadingServer((host, port), handler, self._max_connections)
        self._stdlib.daemon_threads = False  # server_close waits for requests in flight
        self._thread = threading.Thread(target=self._stdlib.serve_forever, name="quiver-http",
                                        daemon=True)
        self._thread.start()
        return self._stdlib.server_address[1]

    def _start_uvicorn(self, host: str, port: int, to_json) -> int:
        if not _has_uvicorn():
            raise ValueError("server='uvicorn' needs uvicorn (pip install uvicorn httptools); "
                             "server='stdlib' needs nothing")
        import uvicorn
        # One address: a name such as localhost would be bound once per address, each on its
        # own port when port is 0.
        address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][4][0]
        # uvicorn binds the socket itself: one handed to it bound makes its replies wait for
        # delayed ACKs (about 40 ms each on Linux, measured). log_config=None keeps the
        # program's own logging as it is (uvicorn's would replace its handlers).
        errors = logging.getLogger("uvicorn.error")
        errors.setLevel(logging.WARNING)
        if not any(isinstance(f, _ClientFaultsOncePerMinute) for f in errors.filters):
            errors.addFilter(_ClientFaultsOncePerMinute())
        self._app = asgi_app(self.runtime, to_json, read_timeout=self._read_timeout)
        config = uvicorn.Config(self._app, host=address, port=port,
                                log_config=None, access_log=False, lifespan="on",
                                # An outer bound only: shutdown() waits for the answers
                                # being computed, then gives their writes twice
                                # read_timeout before it cuts off clients that do not read.
                                timeout_graceful_shutdown=(ANSWER_TIMEOUT_S
                                                           + 4 * self._read_timeout),
                                # (uvicorn counts the connection asking: N + 1 serves N)
                                limit_concurrency=self._max_connections + 1)
        self._uvicorn = uvicorn.Server(config)
        self._uvicorn.install_signal_handlers = lambda: None  # not the main thread
        failure = []

        def run():
            try:
                self._uvicorn.run()
            except SystemExit as exit_:  # uvicorn's way to fail at start-up (it logged why)
                failure.append(exit_)
            except Exception as error:  # noqa: BLE001 (raised below, in the caller's thread)
                if self._uvicorn.started:  # (a failure once serving: the thread's own)
                    raise
                failure.append(error)  # (a parser it could not import had shown only as
                # a thread's traceback, after an OSError blaming the port: a probe)

        self._thread = threading.Thread(target=run, name="quiver-http", daemon=True)
        self._thread.start()
        while not self._uvicorn.started and self._thread.is_alive():
            threading.Event().wait(0.01)
        if not self._uvicorn.started:
            if failure and not isinstance(failure[0], SystemExit):
                raise OSError(f"uvicorn could not serve on {host}:{port}: "
                              f"{type(failure[0]).__name__}: {failure[0]}") from failure[0]
            raise OSError(f"uvicorn could not serve on {host}:{port} (exit {failure}; its log "
                          f"above says why, e.g. the port is taken)")
        return self._uvicorn.servers[0].sockets[0].getsockname()[1]

    def __reduce__(self):
        raise TypeError("an HttpServer holds a listening socket and its threads: it cannot be "
                        "copied or pickled; start one per process")

    def shutdown(self) -> None:
        _refuse_closing_from_a_model_thread(getattr(self.runtime, "runtimes", [self.runtime]),
                                            "HttpServer.shutdown()")
        if (threading.current_thread() is self._thread or
                (self.kind == "stdlib" and getattr(_handling, "server", None) is self._stdlib)):
            # It waits for these threads: from one of them it had joined itself, leaving the
            # endpoint half shut down and its runtime open (a probe).
            raise RuntimeError("HttpServer.shutdown() was called from one of the endpoint's "
                               "own threads (to_json, or a request's handler): call it from "
                               "another thread")
        _open_servers.pop(self, None)
        # Requests accepted but in a batch still open are answered now: with a long
        # max_wait_ms they had waited it out, or failed on the server's own timeout (504).
        self.runtime.stop_holding_batches()
        if self.kind == "stdlib":
            self._stdlib.stopping = True  # kept-alive connections close after their answer
            self._stdlib.shutdown()           # no new connections
            try:
                self._stdlib.take_backlog()   # but those already queued are served
            finally:
                self._stdlib.server_close()   # joins the handler threads: accepted ones finish
        else:
            self._app.begin_draining()
            self._uvicorn.should_exit = True  # stops accepting, then waits for requests
            self._join_uvicorn()              # in flight to be answered
        self.runtime.close()

    def _join_uvicorn(self) -> None:
        """Waits for uvicorn to answer the requests in flight: those waiting for the model
        as long as an answer may take, then their writes twice ``read_timeout``; a client
        that still has not read its answers is then cut off (its writes had held uvicorn's
        graceful shutdown for its whole timeout, 90 s: a probe)."""
        answers_by = time.monotonic() + ANSWER_TIMEOUT_S
        while (self._thread.is_alive() and self._app.requests_awaiting_answers()
               and time.monotonic() < answers_by):
            self._thread.join(0.05)
        self._thread.join(2 * self._read_timeout)
        if self._thread.is_alive():
            state, servers = self._uvicorn.server_state, self._uvicorn.servers

            def cut_off():
                for connection in list(state.connections):
                    transport = getattr(connection, "transport", None)
                    if transport is not None:
                        transport.abort()

            with contextlib.suppress(RuntimeError, IndexError):  # (the loop just ended)
                servers[0].get_loop().call_soon_threadsafe(cut_off)
        self._thread.join()


# Endpoints not shut down yet, with the process that started them: shut down as the main
# thread ends (_shut_down_open_servers). A forked child inherits the entries, not the threads.
_open_servers: Dict["HttpServer", int] = {}


def _shut_down_open_servers() -> None:
    """Shuts down the endpoints a program left running when its main thread ends (the end
    of the script, or a Ctrl-C): each answers the requests it accepted, closes its
    kept-alive connections and its runtime. It runs before the interpreter waits for its
    threads: the stdlib server's connection threads are not daemons (shutdown waits for
    them), and after a Ctrl-C they went on answering clients that kept their connections,
    so the program did not exit while they kept sending."""
    for server, pid in list(_open_servers.items()):
        if pid == os.getpid():
            with contextlib.suppress(Exception):
                server.shutdown()


# threading's exit hooks run before it joins the threads that are not daemons; atexit's run
# after (the fallback, for an interpreter without the hook, still closes at exit).
getattr(threading, "_register_atexit", atexit.register)(_shut_down_open_servers)


def _has_uvicorn() -> bool:
    import importlib.util
    return importlib.util.find_spec("uvicorn") is not None


def serve_http(runtime: Union[ServingRuntime, ServingPool], host: str = "127.0.0.1",
               port: int = 0, to_json: Optional[Callable[[Tensor], list]] = None,
               server: str = "auto", read_timeout: float = READ_TIMEOUT_S,
               max_connections: int = MAX_CONNECTIONS) -> HttpServer:
    """Starts the HTTP endpoint over ``runtime`` or a :class:`ServingPool` (``port=0``: any
    free port; see :class:`HttpServer`): ``POST /predict`` with ``{"nodes": [ids]}`` answers
    ``{"nodes": ..., "predictions": ...}`` (by default each node's argmax class), ``GET
    /health`` the runtime's counters; a bad body or id is a 400 naming it, too many ids a
    413, a full queue a 503 with ``Retry-After``. ``server``: ``"uvicorn"`` (an event loop
    and a C HTTP parser, the endpoint as :func:`asgi_app`), ``"stdlib"`` (the standard
    library's ``ThreadingHTTPServer``, a thread a connection: nothing to install), or
    ``"auto"`` (uvicorn where it is installed). A request whose body (on the standard
    library's server: headers and body) takes longer than ``read_timeout`` seconds to
    arrive is refused (408) or its connection closed, so that a client sending a byte now
    and then holds neither a connection nor shutdown for long. uvicorn has no limit on
    the time headers take: there, a client that never finishes its headers keeps its
    connection (not shutdown) until it leaves. Nor does its C parser (httptools) bound a
    header's size, or the requests a client pipelines without reading the answers: such a
    client grows the server's memory (a probe: 300 MB for a 300 MB header, 580 MB for 10 MB
    of pipelined requests). Facing untrusted clients, put a proxy in front (nginx's
    ``client_header_timeout``, ``large_client_header_buffers``) or use ``"stdlib"``, which
    refuses headers past 64 KiB (431) and closes a connection whose answers are not read
    within 5 s. Shutdown answers the requests accepted (each within the model's time),
    then gives their writes twice ``read_timeout`` before it cuts off clients that do not
    read them.
    At most ``max_connections`` connections are served at once: past it, the standard
    library's server leaves new ones in the kernel's backlog until one ends (a kept-alive
    connection ends after 5 s idle), and uvicorn answers them 503."""
    return HttpServer(runtime, host, port, to_json, server, read_timeout, max_connections)
