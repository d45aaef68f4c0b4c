"""Loaders that hide the data path: batch i + 1 is sampled and gathered on a side CUDA
stream, by a background thread, while the model trains on batch i.

* :class:`Prefetcher` wraps any loader whose batches are built by torch ops (ours, PyG's
  ``NeighborLoader`` on :mod:`torch_quiver_ops.pyg`, a plain generator of batches);
* :class:`SampleLoader` is the torch-quiver-style loop as a loader: seeds in, batches of
  ``(n_id, batch_size, adjs, x, y)`` out.

Ordering: the producer records a CUDA event on its stream after building a batch; the
consumer's stream waits on that event before the batch is handed out, and every tensor of
the batch is marked as used on the consumer's stream (``record_stream``), so the caching
allocator does not hand its memory to the producer again until the model is done with it.
At most ``depth`` built batches wait in the queue. Random draws: the epoch's shuffle and
the sampling generator's seed are drawn in the caller's thread when the epoch starts, so
the same ``torch.manual_seed`` gives the same batches with or without prefetching. On a
CPU-only machine the thread still overlaps sampling with the model (the ops release the
GIL), without streams.
"""
from __future__ import annotations

import _thread
import atexit
import collections
import copy
import dataclasses
import fractions
import functools
import itertools
import math
import queue
import threading
import time
from typing import (Any, Callable, Iterable, Iterator, List, NamedTuple, Optional, Tuple,
                    Union)

import torch
from torch import Tensor

from . import _fork
from ._device import (as_int, as_tensor, check_flag, check_generator, checked_node_ids,
                      holds_integers, is_int, no_meta, readable_ids)
from ._interrupts import ctrl_c_ends_waits
from .feature import Feature, check_host_read_blocks
from .feature import host_read_blocks as host_read_blocks_of
from .sampler import Adj, GraphSageSampler, layers_of

__all__ = ["Batch", "Prefetcher", "SampleLoader"]

_END = object()


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error


def _tensors(obj: Any) -> Iterator[Tensor]:
    """Every tensor inside a batch: tensors, tuples, lists, dicts, dataclasses and PyG Data."""
    if isinstance(obj, Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _tensors(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _tensors(item)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for field in dataclasses.fields(obj):
            yield from _tensors(getattr(obj, field.name))
    elif hasattr(obj, "stores"):  # torch_geometric Data / HeteroData
        for store in obj.stores:
            yield from _tensors(dict(store.items()))


def _as_cuda_stream(stream) -> torch.cuda.Stream:
    """``stream`` as a ``torch.cuda.Stream`` (``GreenContext.Stream()`` returns a plain
    ``torch.Stream``): the same stream."""
    if isinstance(stream, torch.cuda.Stream):
        return stream
    return torch.cuda.Stream(stream_id=stream.stream_id, device_index=stream.device_index,
                             device_type=stream.device_type)


# Epochs whose batches are being built, each with what stops its builders: stopped at exit,
# so that no builder is still inside torch while the interpreter finalizes, which aborts the
# process ("terminate called without an active exception") when a prefetching epoch was
# left unfinished.
_RUNNING_BUILDS: dict = {}
_RUNNING_BUILDS_LOCK = threading.Lock()


def _builds_running(stop: Callable[[], None]) -> object:
    """Registers ``stop`` until :func:`_builds_stopped` with the token returned."""
    token = object()
    with _RUNNING_BUILDS_LOCK:
        _RUNNING_BUILDS[token] = stop
    return token


def _builds_stopped(token: object) -> None:
    with _RUNNING_BUILDS_LOCK:
        _RUNNING_BUILDS.pop(token, None)


@atexit.register
def _stop_running_builds() -> None:
    with _RUNNING_BUILDS_LOCK:
        stops = list(_RUNNING_BUILDS.values())
        _RUNNING_BUILDS.clear()
    for stop in stops:
        try:
            stop()
        except Exception:  # noqa: BLE001  (at exit: stop the others all the same)
            pass


# The loops' step stream of each device (see _steps_on_own_stream): one for every loader,
# so that the caching allocator's blocks for the steps' tensors stay in one pool.
_STEP_STREAMS: dict = {}


def _step_stream(device: torch.device) -> torch.cuda.Stream:
    """``device``'s step stream: of the greatest priority, so that it is never one of the
    pool's ordinary streams that prefetching threads build batches on (PyTorch hands
    those out round robin: the steps would queue behind the builds), and so that the
    block scheduler starts the steps' blocks first."""
    stream = _STEP_STREAMS.get(device.index)
    if stream is None:
        stream = _STEP_STREAMS[device.index] = torch.cuda.Stream(device, priority=-100)
    return stream


def _steps_on_own_stream(batches: Iterator, device: torch.device) -> Iterator:
    """``batches``, with ``device``'s step stream current in the caller's thread from the
    first batch to the end of the epoch, when the caller iterates on ``device``'s default
    stream. It waits for the caller's stream first, and the caller's stream waits for it at
    the end (also after a ``break`` or an error).

    Why: beside a prefetching loader whose gathers stage host rows, an eager model's kernels
    queued on the default stream ran slower than the same kernels on a stream of their own
    (a products epoch 1.16-1.21 s against 0.92-0.98 s on an H200, papers-sized 6.48-7.96 s
    against 5.16-6.12 s; with zero-copy reads, every row in HBM, or a step replayed as a
    CUDA graph, no difference), and the loader's pace read on the default stream always
    said "ahead" (docs/benchmarks.md, 2026-12-04). The cause inside the driver was not
    found; the default stream is avoided."""
    caller = torch.cuda.default_stream(device)
    if torch.cuda.current_stream(device) != caller:
        yield from batches
        return
    own = _step_stream(device)
    thread = threading.get_ident()
    own.wait_stream(caller)
    _make_current(own)
    try:
        yield from batches
    finally:
        # Left alone when the caller made another stream current meanwhile, or when this
        # generator is finished in another thread (the current stream is per thread).
        if threading.get_ident() == thread and torch.cuda.current_stream(device) == own:
            _make_current(caller)
        caller.wait_stream(own)


def _make_current(stream: torch.cuda.Stream) -> None:
    """``stream`` current on its device, the current device unchanged (``set_stream`` also
    makes the stream's device current)."""
    device = torch.cuda.current_device()
    torch.cuda.set_stream(stream)
    if torch.cuda.current_device() != device:
        torch.cuda.set_device(device)


# Thread blocks (of 1024 threads) for a prefetching loader's gathers of host rows
# (Prefetcher): on the H100, with a GraphSAGE model training beside it, 12 beat 6, 8, 10,
# 14 and 16, and 48 blocks of 256 threads, the same warps spread over four times the SMs
# (docs/benchmarks.md).
HOST_READ_BLOCKS = 12

# A Prefetcher's most workers: each is a thread with a stream and a batch in flight, and
# the few that the cores can run beside the model are all that help.
MAX_LOADER_WORKERS = 256


def green_context_stream(sms: int, device: torch.device):
    """``(stream, context)``: a stream whose kernels run on ``sms`` SMs of ``device`` of
    their own, from a CUDA green context (``torch.cuda.green_contexts``, beta in PyTorch).
    Keep ``context`` as long as the stream is used."""
    count = torch.cuda.get_device_properties(device).multi_processor_count
    if not 1 <= sms < count:
        raise ValueError(f"sms must be in [1, {count}) on {device} (it has {count} SMs and "
                         f"the model needs some), got {sms}")
    from torch.cuda import green_contexts
    if not green_contexts.SUPPORTED:
        raise RuntimeError(f"sms={sms} needs CUDA green contexts, and this PyTorch was built "
                           f"without them; leave sms unset")
    context = green_contexts.GreenContext.create(sms, device.index)
    return _as_cuda_stream(context.Stream()), context


class Prefetcher:
    """Builds the next ``depth`` batches of ``loader`` ahead, in a background thread on a
    side CUDA stream of ``device`` (no stream on the CPU).

    Args:
        loader: an iterable of batches; iterating it must only launch torch work (as our
            samplers, stores and PyG's ``NeighborLoader`` with ``num_workers=0`` do).
        device: the GPU the batches are built on (default: the current one when CUDA is
            available); ``"cpu"`` for no streams.
        depth: batches built ahead (memory: ``depth + workers`` batches in flight at most);
            0 builds each batch when it is asked for, in the caller's thread.
        stream: the CUDA stream batches are built on (default: a new side stream).
        sms: build batches on this many SMs of their own: a stream of a green context
            (``torch.cuda.green_contexts``, beta in PyTorch), so that the loader's short
            kernels never wait behind the model's, which fill every other SM. On the H100,
            16 SMs took a products epoch from 1.19-1.20 s to 1.04-1.16 s
            (docs/benchmarks.md). Not with ``stream``.
        host_read_blocks: the thread blocks a :class:`Feature` gather that reads pinned
            host memory may use while it builds batches ahead (see
            :func:`torch_quiver_ops.feature.host_read_blocks`; 0: no limit). Those reads
            wait on PCIe; fewer blocks leave the other SMs to the model. On the H100, 12
            blocks of 1024 threads took a products epoch with a 20% cache from 1.15-1.17 s
            to 0.95-1.02 s (docs/benchmarks.md).

        workers: threads that build batches at once, each on a stream of its own, handed
            out in order. A batch whose work waits on host memory (UVA sampling, gathers of
            host rows) then overlaps another's GPU work: on the H100, a SampleLoader's UVA
            sampling with a 20% topology cache took 1.20-1.49 ms a batch with one worker
            and 0.94-1.06 with three on the products-like graph, 2.27-2.33 and 1.99 on the
            papers-like one; beside a GraphSAGE model in UVA mode, though, three cost the
            model more than they saved (docs/benchmarks.md). More than one
            needs a loader that can hand out an epoch's batches as independent builders:
            a :class:`SampleLoader`, or any object whose ``batch_builders()`` returns a
            list of zero-argument callables, each building one batch. Not with ``stream``
            (one stream would serialize them); with ``sms``, every worker gets a stream of
            the same SMs.
        own_stream: when the caller iterates on the device's default stream, make a
            stream of the loaders' own (one a device, of the greatest priority) current in
            the caller's thread from an epoch's first batch to its end, so that the loop's
            steps queue their kernels there (ordered after the caller's earlier work, and
            the caller's stream after theirs at the end; the caller's stream is current
            again after the loop, a ``break`` or an error). On an H200, an eager GraphSAGE
            step beside staged host reads took a products epoch from 1.16-1.21 s to
            0.92-0.98 s this way; elsewhere it changed nothing measurable
            (docs/benchmarks.md, 2026-12-04). Inside the loop, work put on the default
            stream by name (``torch.cuda.default_stream()``, or an extension that launches
            on CUDA's legacy stream) is not ordered with the steps or the batches: use the
            current stream, or False, which leaves the caller's stream alone. Nothing
            changes for a caller already on another stream, with ``depth=0`` or on the
            CPU.
        pace: called with True when a batch is ready before the model needs it (the
            loader ahead) and False when the model waits for it (behind), for each batch
            after an epoch's first. On a GPU it is the GPU's pace, read from events (the
            batch's against the caller's stream at the batch's ``next()``; the host's loop
            may run many steps ahead of its stream); on the CPU, the threads'. A
            :class:`SampleLoader` passes its :class:`Feature`'s
            :meth:`~Feature.note_loader_pace`, so that staged gathers take fewer SMs from
            the model while the loader is ahead.

    Leaving an epoch early (``break``) stops the threads before the next epoch starts.
    An exception raised while building a batch is raised by ``next()`` in the caller, in
    that batch's turn.
    """

    def __init__(self, loader: Iterable, device: Union[None, int, str, torch.device] = None,
                 depth: int = 2, stream: Optional[torch.cuda.Stream] = None,
                 sms: Optional[int] = None, host_read_blocks: int = HOST_READ_BLOCKS,
                 workers: int = 1, pace: Optional[Callable[[bool], None]] = None,
                 own_stream: bool = True):
        if not (hasattr(type(loader), "__iter__") or hasattr(type(loader), "__getitem__")):
            # (else found only by iter(), naming nothing)
            raise TypeError(f"loader must be an iterable of batches, got "
                            f"{type(loader).__name__}")
        # (past int64, the C++ thread's binding raised its own words, naming no argument)
        if not is_int(depth) or not 0 <= depth < 2 ** 63:
            raise ValueError(f"depth (a loader's prefetch) must be an int >= 0 and < 2**63, "
                             f"got {depth!r}")
        check_host_read_blocks(host_read_blocks, "host_read_blocks")
        self.host_read_blocks = host_read_blocks
        if sms is not None and stream is not None:
            raise ValueError("give a stream or a number of SMs for the loader, not both")
        if not is_int(workers) or not 1 <= workers <= MAX_LOADER_WORKERS:
            # a million made a thread and a builder each before the first batch: a hang
            raise ValueError(f"workers must be an int in [1, {MAX_LOADER_WORKERS}], got "
                             f"{workers!r}")
        if workers > 1:
            if depth < workers:
                raise ValueError(f"workers={workers} build that many batches ahead at once, "
                                 f"so depth must be at least {workers}, got {depth}")
            if stream is not None:
                raise ValueError(f"workers={workers} need a stream each; one given stream "
                                 f"would serialize them (give sms or no stream)")
            if not callable(getattr(loader, "batch_builders", None)):
                raise ValueError(f"workers={workers} need a loader whose batches can be "
                                 f"built apart (a SampleLoader, or one with batch_builders()); "
                                 f"{type(loader).__name__} has no batch_builders()")
        self.workers = workers
        self.own_stream = own_stream
        if pace is not None and not callable(pace):
            raise ValueError(f"pace must be a callable taking a bool, got {pace!r}")
        self.pace = pace
        if device is None:
            device = (torch.device("cuda", torch.cuda.current_device())
                      if torch.cuda.is_available() else torch.device("cpu"))
        try:
            self.device = torch.device(device) if not isinstance(device, int) else torch.device(
                "cuda", device)
        except (RuntimeError, TypeError) as error:  # torch's words named no argument
            raise ValueError(f"device must be a torch.device, a device string or a GPU index, "
                             f"got {device!r} ({error})") from None
        if self.device.type not in ("cpu", "cuda"):  # ("meta" had been taken)
            raise ValueError(f"device must be the CPU or a GPU, got {device!r}")
        if stream is not None and not isinstance(stream, torch.Stream):  # (cuda.Stream's base)
            raise TypeError(f"stream must be a torch.cuda.Stream (or torch.Stream) or None, got "
                            f"{type(stream).__name__}")
        if self.device.type == "cuda" and not torch.cuda.is_available():
            # torch's "Found no NVIDIA driver" came at the first epoch, or here for 'cuda'
            raise RuntimeError(f"device={device!r} is a GPU, and torch sees none")
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        if stream is not None and (stream.device.type != "cuda" or stream.device != self.device):
            # (a CPU stream failed in CUDA's words; another GPU's would build there)
            raise ValueError(f"stream must be a CUDA stream of the Prefetcher's device "
                             f"{self.device}, got one of {stream.device}")
        self.loader = loader
        self.depth = depth
        self._green_context = None  # kept: its stream lives as long as it does
        if sms is not None:
            if self.device.type != "cuda":
                raise ValueError(f"sms={sms}: SMs are a GPU's, and this Prefetcher builds "
                                 f"batches on {self.device}")
            stream, self._green_context = green_context_stream(sms, self.device)
        self.stream = None if stream is None else _as_cuda_stream(stream)
        # One stream per worker: the given one (or the green context's), then the context's
        # further streams; None: a side stream, made at the first epoch.
        self._streams = [self.stream] + [
            _as_cuda_stream(self._green_context.Stream()) if self._green_context else None
            for _ in range(workers - 1)]

    def __getstate__(self) -> dict:
        # The side streams made at the first epoch are made again by a copy. A stream the
        # caller gave (or a green context's) cannot be copied: torch refuses to pickle one.
        if self.stream is not None or self._green_context is not None:
            raise TypeError("a Prefetcher given a stream or sms (a loader's prefetch_sms) "
                            "holds CUDA streams, which cannot be copied or pickled: make "
                            "another with the same arguments instead")
        state = dict(self.__dict__)
        state["_streams"] = [None] * len(self._streams)
        return state

    @property
    def own_stream(self) -> bool:
        """See the class's ``own_stream``; settable between epochs."""
        return self._own_stream

    @own_stream.setter
    def own_stream(self, value: bool) -> None:
        self._own_stream = check_flag(value, "own_stream")

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator:
        # The epoch's random draws happen here, in this thread.
        if self.workers > 1:
            builders = list(self.loader.batch_builders())
            # Worker k builds batches k, k + workers, ...: lazily, in its own thread.
            shares = [(build() for build in builders[k::self.workers])
                      for k in range(self.workers)]
            return self._on_own_stream(self._prefetch(shares))
        batches = iter(self.loader)
        if self.depth == 0:
            return batches
        return self._on_own_stream(self._prefetch([batches]))

    def _on_own_stream(self, batches: Iterator) -> Iterator:
        """``batches`` handed out with the loop's steps on the device's step stream
        (``own_stream``; see :func:`_steps_on_own_stream`)."""
        if not self.own_stream or self.device.type != "cuda":
            return batches
        return _steps_on_own_stream(batches, self.device)

    def _produce(self, batches: Iterator, ready: "queue.Queue", stop: threading.Event,
                 stream: Optional[torch.cuda.Stream]) -> None:
        cuda = self.device.type == "cuda"
        try:
            if cuda:
                torch.cuda.set_device(self.device)  # the current device is per thread
            with torch.cuda.stream(stream) if cuda else _nothing(), \
                    host_read_blocks_of(self.host_read_blocks):
                for batch in batches:
                    event = None
                    if cuda:  # timed when the pace is read from it
                        event = torch.cuda.Event(enable_timing=self.pace is not None)
                        event.record(stream)
                    elif self.pace is not None and ready.full():
                        self.pace(True)
                    if not _put(ready, (batch, event), stop):
                        return
            _put(ready, _END, stop)
        except BaseException as error:  # handed to the consumer, raised there
            _put(ready, _Failure(error), stop)

    def _prefetch(self, shares: List[Iterator]) -> Iterator:
        """Batches of ``shares`` (one iterator per worker, dealt round robin) in order."""
        workers = len(shares)
        # depth batches ahead in all (at least one per worker)
        queues: List["queue.Queue"] = [
            queue.Queue(maxsize=max(1, (self.depth + k) // workers)) for k in range(workers)]
        stop = threading.Event()
        if self.device.type == "cuda":
            # Made once and kept from epoch to epoch: the caching allocator keeps freed
            # blocks per stream, so a new stream each epoch would allocate anew.
            self._streams = [stream if stream is not None else torch.cuda.Stream(self.device)
                             for stream in self._streams]
            # The builds start after the consumer's work queued so far, as the C++
            # prefetcher's do: a batch of an earlier epoch, freed after being read on
            # another stream than this epoch's consumer, is then never overwritten under
            # that read.
            consumer = torch.cuda.current_stream(self.device)
            for stream in self._streams:
                stream.wait_stream(consumer)
        producers = [threading.Thread(target=self._produce,
                                      args=(share, ready, stop, stream),
                                      name=f"quiver-prefetch-{k}", daemon=True)
                     for k, (share, ready, stream) in enumerate(zip(shares, queues,
                                                                    self._streams))]

        def halt(wait_s: Optional[float] = None) -> None:
            """Stops the producers and waits for them (at exit, for at most ``wait_s``)."""
            stop.set()
            deadline = None if wait_s is None else time.monotonic() + wait_s
            for producer, ready in zip(producers, queues):
                # Empties the queue (a producer waiting for room then sees `stop`) and
                # waits for the thread. Not get(timeout=...): a producer that has already
                # put its last item and is exiting would leave that wait to time out, a
                # stall at the end of every epoch.
                while producer.is_alive() and (deadline is None or time.monotonic() < deadline):
                    try:
                        while True:
                            ready.get_nowait()
                    except queue.Empty:
                        pass
                    producer.join(timeout=0.001)

        for producer in producers:
            producer.start()
        running = _builds_running(functools.partial(halt, 10.0))
        paced = self.pace is not None
        probes = collections.deque()  # (asked, ready) events of batches whose pace is unknown
        try:
            for turn in itertools.count():
                # Batch i is worker i % workers's: the first end met in turn ends the epoch.
                ready = queues[turn % workers]
                asked = None  # recorded before any wait for the batch, which it must time
                if paced and turn > 0:
                    if self.device.type == "cuda":
                        asked = torch.cuda.Event(enable_timing=True)
                        asked.record(torch.cuda.current_stream(self.device))
                    elif ready.empty():
                        self.pace(False)
                item = ready.get()
                if item is _END:
                    return
                if isinstance(item, _Failure):
                    raise item.error
                batch, event = item
                if event is not None:
                    # The stream current at each next(), not at iter(): the caller may
                    # change it between batches.
                    consumer = torch.cuda.current_stream(self.device)
                    consumer.wait_event(event)
                    if asked is not None:
                        probes.append((asked, event))
                        _note_decided_paces(probes, self.pace)
                    for tensor in _tensors(batch):
                        if tensor.is_cuda:
                            tensor.record_stream(consumer)
                yield batch
        finally:
            try:
                _builds_stopped(running)
                halt()
            except KeyboardInterrupt:
                # A Ctrl-C that lands here while the generator is collected (an epoch left
                # unfinished, then dropped) is "ignored" by Python: the program trained on
                # as if it never came (found by a test). The builds are stopped all the
                # same, and the Ctrl-C goes back to the main thread a moment later, once
                # this cleanup has returned (raised in it, it would be ignored again).
                halt()
                _builds_stopped(running)
                threading.Timer(0.01, _thread.interrupt_main).start()


def _note_decided_paces(probes: "collections.deque", pace: Callable[[bool], None],
                        most: int = 64) -> None:
    """Tells ``pace`` the order of each (asked, ready) pair of events known so far, oldest
    first: the batch ready before the caller's stream had done what it held when the batch
    was asked for (ahead), or after (behind). Past ``most`` pairs, the oldest are dropped."""
    while probes:
        asked, ready = probes[0]
        asked_done, ready_done = asked.query(), ready.query()
        if asked_done or ready_done:
            # Both done: the order of their times; one done: that one came first.
            pace(ready.elapsed_time(asked) >= 0 if asked_done and ready_done else ready_done)
        elif len(probes) <= most:
            return
        probes.popleft()


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _put(ready: "queue.Queue", item, stop: threading.Event) -> bool:
    """Puts ``item`` unless the consumer has stopped; False when it has."""
    while not stop.is_set():
        try:
            ready.put(item, timeout=0.05)
            return True
        except queue.Full:
            continue
    return False


class Batch(NamedTuple):
    """One training batch: the sampled nodes ``n_id`` (seeds first), the seed count, the
    layers' :class:`Adj` (outermost first, on the sampling device), the rows ``x`` of
    ``n_id`` (None without a feature) and the seeds' labels ``y`` (None without labels)."""
    n_id: Tensor
    batch_size: int
    adjs: List[Adj]
    x: Optional[Tensor]
    y: Optional[Tensor]


class SampleLoader:
    """Seeds in, ready batches out: shuffles ``seeds`` every epoch, samples each batch with
    ``sampler``, gathers its rows from ``feature`` and its seeds' labels, ``prefetch``
    batches ahead of the model (see :class:`Prefetcher`).

    Args:
        sampler: a :class:`GraphSageSampler` (GPU, UVA or CPU mode).
        feature: a :class:`Feature` (or anything indexable by node ids, e.g. a tensor);
            None for batches without rows (``x`` is None), say for a loop that gathers
            them itself.
        seeds: the training nodes.
        batch_size, shuffle, drop_last: as for ``torch.utils.data.DataLoader``.
        labels: one label (row) per node; ``Batch.y`` holds the seeds' ones.
        prefetch: batches built ahead; 0 builds each in the caller's thread (the same
            batches: each batch samples with its own seed, drawn when the epoch starts).
        generator: a CPU ``torch.Generator`` for the shuffle and the sampling seeds
            (default: PyTorch's default generator, one draw per epoch).
        prefetch_sms: build batches ahead on this many SMs of their own (see
            :class:`Prefetcher`'s ``sms``).
        prefetch_host_read_blocks: see :class:`Prefetcher`'s ``host_read_blocks``.
        workers: batches built at once, each by a thread on a stream of its own (see
            :class:`Prefetcher`'s ``workers``; ``prefetch`` must be at least as many). The
            batches are the same for any number. Worth raising when the loader, not the
            model, bounds an epoch, in UVA mode above all.
        prefetch_in_cpp: build batches ahead in a C++ thread
            (``torch.classes.quiver.BatchPrefetcher``) that never takes Python's lock,
            instead of the :class:`Prefetcher`'s Python thread. Same batches. For a sampler
            without rules (no weights, times or trees), a :class:`Feature` or None, one
            worker and no ``prefetch_sms``. None (the default) takes it wherever it can
            build the batches of a GPU-mode sampler, and otherwise the Python thread
            without a word; True requires it, False keeps the Python thread. On three
            H200s beside a GraphSAGE model, GPU mode, its epochs were shorter in 19 of 20
            pairs (median 6.5%, 6-19% on the papers-sized graph); in UVA mode in 2 of 4, so
            UVA keeps the Python thread (docs/benchmarks.md, 2026-12-02).
        own_stream: run the loop's steps on a stream of the loaders' own while the caller
            iterates on the default stream (see :class:`Prefetcher`'s ``own_stream``).

    ``for n_id, batch_size, adjs, x, y in loader:`` replaces the torch-quiver loop
    ``for seeds in loader: n_id, batch_size, adjs = sampler.sample(seeds); x = feature[n_id]``.
    """

    _seeds_are_nodes = True  # node ids (a subclass may seed with others)

    def __init__(self, sampler: GraphSageSampler, feature: Union[None, Feature, Tensor],
                 seeds: Tensor, batch_size: int, labels: Optional[Tensor] = None,
                 shuffle: bool = True, drop_last: bool = False, prefetch: int = 2,
                 generator: Optional[torch.Generator] = None,
                 prefetch_sms: Optional[int] = None,
                 prefetch_host_read_blocks: int = HOST_READ_BLOCKS, workers: int = 1,
                 prefetch_in_cpp: Optional[bool] = None, own_stream: bool = True):
        _check_sampler(sampler)
        size = as_int(batch_size)  # numpy ints too, as torch's DataLoader takes
        if size is None or size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        batch_size = size
        shuffle, drop_last = check_flag(shuffle, "shuffle"), check_flag(drop_last, "drop_last")
        check_generator(generator)
        if prefetch_in_cpp is not None:
            check_flag(prefetch_in_cpp, "prefetch_in_cpp")
        # Prefetcher checks these too, by its own names
        check_host_read_blocks(prefetch_host_read_blocks, "prefetch_host_read_blocks")
        seeds = readable_ids(seeds, "seeds")  # an empty list too (as_tensor([]) holds floats)
        if seeds.dtype == torch.bool:
            topo = getattr(sampler, "csr_topo", None)
            if (self._seeds_are_nodes and topo is not None
                    and (seeds.dim() != 1 or seeds.numel() != topo.node_count)):
                raise ValueError(f"seeds as a mask must hold one bool per node "
                                 f"({topo.node_count}), got shape {tuple(seeds.shape)}")
            seeds = torch.nonzero(seeds).view(-1)
        if seeds.dim() != 1:
            raise ValueError(f"seeds must be one-dimensional, got shape {tuple(seeds.shape)}")
        if not holds_integers(seeds):
            raise TypeError(f"seeds must hold integer node ids, got {seeds.dtype}")
        topo = getattr(sampler, "csr_topo", None)
        if self._seeds_are_nodes and topo is not None:
            # Once here, by position in seeds: in a batch's turn, an epoch in, the sampler
            # named the position within the batch.
            checked_node_ids(seeds.cpu(), topo.node_count, "seeds")
            if seeds.dtype not in (torch.int32, torch.int64):
                seeds = seeds.long()  # uint8 or int16 ids: the sampling ops take these two
            if getattr(sampler, "temporal", False) and getattr(sampler, "node_time", 1) is None:
                raise ValueError("the sampler samples by edge time, which needs a time per "
                                 "seed, and SampleLoader passes none: build the sampler with "
                                 "node_time (seeds then take their own), or call "
                                 "sampler.sample(seeds, seed_time=...) yourself")
        self.sampler = sampler
        self.feature = feature
        self.seeds = seeds.cpu()
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.generator = generator
        # A sampler handed to a worker process is placed on that worker's GPU at first use:
        # now, so that the loader's device, its labels and the C++ thread all agree.
        if hasattr(sampler, "_ensure_placed"):
            sampler._ensure_placed()
        self.device = sampler.device
        if feature is not None and (
                isinstance(feature, (str, bytes, list, tuple))
                or not hasattr(type(feature), "__getitem__")
                or (isinstance(feature, Tensor) and feature.dim() == 0)):
            # (a 0-d tensor, an int, a string or a list of rows was taken, then failed at the
            # first batch: a list is not indexed by a tensor of ids)
            raise TypeError(f"feature must be a Feature, a tensor of rows or anything "
                            f"indexable by node ids, got {type(feature).__name__}"
                            + (" of 0 dimensions" if isinstance(feature, Tensor) else "")
                            + (" (pass torch.as_tensor(rows))"
                               if isinstance(feature, (list, tuple)) else ""))
        if isinstance(feature, Tensor):  # (a sparse or meta one failed at the first batch)
            no_meta(feature, "feature", "rows")
        if isinstance(feature, (Feature, Tensor)) and feature.dim() >= 1 and \
                len(feature) < sampler.csr_topo.node_count:
            raise ValueError(f"feature has {len(feature)} rows but the graph has "
                             f"{sampler.csr_topo.node_count} nodes")
        if labels is not None:
            labels = no_meta(_tensor_of(labels, "labels",
                                        "a tensor (or array) of one label per node"),
                             "labels", "labels")
        self.labels = None if labels is None else labels.to(self.device)
        if self.labels is not None and self.labels.dim() == 0:
            raise ValueError("labels must hold one label per node, got a 0-d tensor")
        if self.labels is not None and self.labels.size(0) != sampler.csr_topo.node_count:
            raise ValueError(f"labels has {self.labels.size(0)} rows but the graph has "
                             f"{sampler.csr_topo.node_count} nodes")
        self._generators = threading.local()  # each building thread samples with its own
        self.timer = None  # see _build_one
        self.prefetch = prefetch
        chosen = prefetch_in_cpp is None  # the loader picks
        prefetch_in_cpp = bool(prefetch_in_cpp)
        if prefetch_in_cpp or chosen:
            why = _why_not_in_cpp(sampler, feature, prefetch, workers, prefetch_sms)
            if why and prefetch_in_cpp:
                raise ValueError(f"prefetch_in_cpp=True builds batches ahead, one at a time, "
                                 f"with a GraphSageSampler without rules and a Feature (or "
                                 f"None): here {why}")
            # Picked only where it measured faster (GPU mode: not UVA, not the CPU), and only
            # for this class's own batches: a subclass that builds others keeps them.
            builds_its_own = (type(self)._build_one is not SampleLoader._build_one or
                              type(self).batch_builders is not SampleLoader.batch_builders)
            prefetch_in_cpp = prefetch_in_cpp or (why is None and not builds_its_own and
                                                  getattr(sampler, "mode", None) == "GPU")
        pace = None
        if isinstance(feature, Feature):  # its layout that the building thread gathers through
            pace = functools.partial(feature.note_loader_pace,
                                     device=self.device if self.device.type == "cuda" else None)
        if is_int(workers) and is_int(prefetch) and 1 < workers and 0 <= prefetch < workers:
            # Here, by this loader's own name (Prefetcher's says "depth")
            raise ValueError(f"workers={workers} build that many batches ahead at once, so "
                             f"prefetch must be at least {workers}, got {prefetch}")
        if prefetch_sms is not None and self.device.type != "cuda":
            raise ValueError(f"prefetch_sms={prefetch_sms!r}: SMs are a GPU's, and this loader "
                             f"builds batches on {self.device}")
        self._prefetcher = Prefetcher(_Epochs(self), self.device, prefetch, sms=prefetch_sms,
                                      host_read_blocks=prefetch_host_read_blocks,
                                      workers=workers, pace=pace, own_stream=own_stream)
        self._in_cpp = prefetch_in_cpp
        # The C++ prefetcher of a finished epoch, kept for the next: it holds its side
        # stream, and the caching allocator reuses freed blocks only on the stream they
        # were allocated on (a new prefetcher would take another of the pool's streams).
        self._spare_native = None
        self._shapes_captured: set = set()  # (sampler, batch size) captured by this loader

    def __getstate__(self) -> dict:
        # What the building threads and the last epoch hold stays behind: a copy (or a
        # loader unpickled elsewhere) makes its own. threading.local refused to pickle, so
        # no loader could be copied at all (a probe).
        state = dict(self.__dict__)
        state["_generators"], state["_spare_native"] = None, None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._generators = threading.local()

    def __copy__(self) -> "SampleLoader":
        # The default shallow copy kept the original's Prefetcher, whose epochs are the
        # original's: the copy iterated the original, whatever was set on it (a probe).
        # Its Prefetcher is copied shallowly too (a deep copy took the Feature its pace
        # reports to along: the whole table copied, and the pace sent to a detached store:
        # a review), then pointed at the copy.
        clone = type(self).__new__(type(self))
        clone.__setstate__(self.__getstate__())
        clone._prefetcher = copy.copy(self._prefetcher)
        clone._prefetcher.loader = _Epochs(clone)
        return clone

    @property
    def own_stream(self) -> bool:
        """Whether the loop's steps run on a stream of the loaders' own while the caller
        iterates on the default stream (see :class:`Prefetcher`); settable between epochs."""
        return self._prefetcher.own_stream

    @own_stream.setter
    def own_stream(self, value: bool) -> None:
        self._prefetcher.own_stream = value

    @property
    def prefetch_in_cpp(self) -> bool:
        """Whether a C++ thread builds the batches ahead (the argument, or the loader's
        choice when it was None)."""
        return self._in_cpp

    def __len__(self) -> int:
        full, rest = divmod(self.seeds.numel(), self.batch_size)
        return full + (1 if rest and not self.drop_last else 0)

    def __iter__(self) -> Iterator[Batch]:
        if self._in_cpp and self.timer is None:
            # Drawn now, as the Python thread's epoch draws them at iter().
            native, made_of = self._native_prefetcher()
            return self._prefetcher._on_own_stream(
                self._native_epoch(native, made_of, *self._epoch_plan()))
        return iter(self._prefetcher)

    def batch_builders(self) -> List[Callable[[], Batch]]:
        """One epoch as zero-argument callables, one per batch, which may run in any
        thread and order: the epoch's order and sampling seeds are drawn now."""
        batches, sampling_seeds = self._epoch_plan()
        return [functools.partial(self._build_one, batch_seeds, sampling_seed)
                for batch_seeds, sampling_seed in zip(batches, sampling_seeds)]

    def _epoch_plan(self) -> Tuple[List[Tensor], List[int]]:
        """The epoch's seed batches and each batch's sampling seed, drawn now."""
        draw = torch.empty((), dtype=torch.int64, device="cpu")
        seed = int(draw.random_(generator=self.generator))
        order = (torch.randperm(self.seeds.numel(), device="cpu",
                                generator=torch.Generator().manual_seed(seed))
                 if self.shuffle else None)
        seeds = self.seeds if order is None else self.seeds[order]
        if self.device.type == "cuda":
            seeds = seeds.pin_memory()  # so that each batch's seeds move without a wait
        # No seeds, no batch (split would give one empty chunk, where len() says 0).
        # (a batch_size past all the seeds is one batch: split took no size past int64)
        batches = list(seeds.split(min(self.batch_size, seeds.numel()))) if seeds.numel() else []
        if self.drop_last and batches and batches[-1].numel() < self.batch_size:
            batches.pop()
        self._capture_shapes_here(batches)
        # Batch i samples from seed + 1 + i, so that a batch's samples do not depend on
        # which thread builds it or when.
        return batches, [(seed + 1 + i) % 2**64 for i in range(len(batches))]

    def _capture_shapes_here(self, batches: List[Tensor]) -> None:
        """Captures in this thread the batch shapes the GPU sampler has not captured (it
        does at a shape's second call) before a prefetching thread builds the batches. CUDA
        forbids synchronizing the device while any stream captures: a capture in the
        loader's thread would make the training loop's ``torch.cuda.synchronize()`` fail.
        Two calls a shape, drawing from a generator of their own: the epoch's batches do
        not change. A batch that cannot be sampled (a bad seed) is left to raise in its
        turn, as the loader's thread meets it."""
        sampler = self.sampler
        if (self.prefetch == 0 or not getattr(sampler, "capture_batches", False)
                or getattr(sampler, "device", torch.device("cpu")).type != "cuda"
                or type(self)._build_one is not SampleLoader._build_one):  # others' batches
            return
        for size in {b.numel() for b in batches}:
            shape = (id(getattr(sampler, "_sampler", sampler)), size)
            if shape in self._shapes_captured:
                continue
            generator = torch.Generator(sampler.device).manual_seed(0)
            for seeds in (b for b in batches if b.numel() == size):
                try:
                    for _ in range(2):  # seen, then captured
                        sampler.sample(seeds, generator)
                except (IndexError, ValueError, TypeError):
                    continue  # this batch raises in its turn; another of its size may do
                self._shapes_captured.add(shape)
                break

    def _native_prefetcher(self):
        """A C++ prefetcher for one epoch (``prefetch_in_cpp``) and what it was made of:
        each iterator has its own, so that two epochs alive at once, or one left
        unfinished, never share a thread; a finished epoch's is taken again when it was
        made of the same sampler, rows, labels and settings."""
        sampler = self.sampler
        sampler._ensure_placed()
        device = sampler.device
        # The layout the device reads the store through, as Feature's own gathers do.
        tiers = None if self.feature is None else self.feature._view(device)[0]
        made_of = (sampler._sampler, tiers, self.labels, self.prefetch,
                   self._prefetcher.host_read_blocks)
        spare, self._spare_native = self._spare_native, None
        if spare is not None and all(a is b for a, b in zip(spare[1], made_of)) \
                and not _fork.inherited(spare[0]):  # (a parent's: its thread is not here)
            return spare
        native = _fork.made_with_threads(torch.classes.quiver.BatchPrefetcher(
            sampler._sampler, tiers, self.labels, device.index if device.type == "cuda" else -1,
            self.prefetch, self._prefetcher.host_read_blocks, 0))
        return native, made_of

    def _native_epoch(self, native, made_of: tuple, batches: List[Tensor],
                      sampling_seeds: List[int]) -> Iterator[Batch]:
        # Seeds up to 2**64 - 1 travel as the int64 of the same bits.
        native.start(batches, [s - 2**64 if s >= 2**63 else s for s in sampling_seeds])
        # One stop at a time: the exit hook's may meet this epoch's own (its thread woken by
        # the first), and the C++ stop joins the thread and clears what it built.
        stopping, stopped = threading.Lock(), []

        def stop() -> None:
            with stopping:
                # Once: after the exit hook's stop, the epoch's own (its generator closed as
                # the interpreter shuts down) called into torch when imports no longer
                # work, and printed an ImportError ("sys.meta_path is None").
                if not stopped and not _fork.inherited(native):  # (a parent's thread)
                    native.stop()
                stopped.append(True)
        running = _builds_running(stop)
        try:
            while True:
                with ctrl_c_ends_waits:
                    built = native.next()
                if not built:
                    return
                n_id, batch_size, adjs = layers_of(tuple(built[:6]), self.sampler.return_eid)
                yield Batch(n_id, batch_size, adjs,
                            None if self.feature is None else built[6],
                            None if self.labels is None else built[7])
        finally:
            _builds_stopped(running)
            stop()  # here, where Python's lock is let go while the thread stops
            self._spare_native = (native, made_of)  # its side stream, for the next epoch

    def _sampling_generator(self, seed: int) -> torch.Generator:
        generator = getattr(self._generators, "generator", None)
        if generator is None:
            generator = self._generators.generator = torch.Generator(self.device)
        return generator.manual_seed(seed)

    def _build_one(self, seeds: Tensor, sampling_seed: int) -> Batch:
        # ``timer``, when set, has ``lap(phase, since) -> now`` and is called after sampling
        # and after gathering; one that synchronizes the GPU measures each phase alone
        # (meant for prefetch=0: in a prefetching thread it would stall the pipeline).
        timer = self.timer
        t = time.perf_counter() if timer else 0.0
        n_id, batch_size, adjs = self.sampler.sample(seeds,
                                                     self._sampling_generator(sampling_seed))
        if timer:
            t = timer.lap("sample", t)
        x = None if self.feature is None else self.feature[n_id]
        y = None if self.labels is None else self.labels[n_id[:batch_size].to(self.device)]
        if timer:
            timer.lap("gather", t)
        return Batch(n_id, batch_size, adjs, x, y)


def _why_not_in_cpp(sampler, feature, prefetch: int, workers: int,
                    prefetch_sms: Optional[int]) -> Optional[str]:
    """Why the C++ prefetcher cannot build this SampleLoader's batches; None when it can."""
    if prefetch == 0:
        return "prefetch is 0"
    if workers != 1:
        return f"workers={workers}"
    if prefetch_sms is not None:
        return "prefetch_sms is given"
    if not isinstance(sampler, GraphSageSampler):
        return "the sampler is not a GraphSageSampler"
    if sampler.has_rules:
        return "the sampler has rules (weights, times or trees)"
    if feature is None:
        return None
    if not isinstance(feature, Feature):
        return f"the feature is a {type(feature).__name__}, not a Feature"
    if sampler.device.type == "cpu" and feature.device_for(None).type != "cpu":
        return "the sampler is on the CPU and the feature's rows are read on a GPU"
    return None


class _Epochs:
    """What the Prefetcher iterates: one SampleLoader epoch per ``iter()``."""

    def __init__(self, loader: SampleLoader):
        self.loader = loader

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Batch]:
        return (build() for build in self.loader.batch_builders())

    def batch_builders(self) -> List[Callable[[], Batch]]:
        return self.loader.batch_builders()


def _check_sampler(sampler) -> None:
    if not isinstance(sampler, GraphSageSampler) and not all(
            hasattr(sampler, name) for name in ("sample", "device", "csr_topo")):
        raise TypeError(f"sampler must be a GraphSageSampler, got {type(sampler).__name__}")


def _tensor_of(value, name: str, what: str) -> Tensor:
    """``value`` as a tensor, else a TypeError naming ``name`` (torch's "Could not infer
    dtype of NoneType" or "new(): invalid data type 'str'" named no argument)."""
    if value is None or isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be {what}, got {type(value).__name__}")
    try:
        return as_tensor(value)
    except (TypeError, ValueError, RuntimeError) as error:
        raise TypeError(f"{name} must be {what}, got {type(value).__name__}: {error}") from None


def checked_seed_edges(edge_label_index, num_nodes: Optional[int],
                       edge_label: Optional[Tensor] = None) -> Tensor:
    """``edge_label_index`` as a ``[2, num_edges]`` tensor of node ids in ``[0, num_nodes)``
    (None: the caller checks the ranges, each end by its node type's count), with
    ``edge_label`` (if given) one label per seed edge; both link loaders' check."""
    edge_label_index = _tensor_of(edge_label_index, "edge_label_index",
                                  "a [2, num_edges] tensor of node ids")
    if edge_label is not None:
        edge_label = _tensor_of(edge_label, "edge_label", "one label per seed edge")
    if (edge_label_index.dim() != 2 or edge_label_index.size(0) != 2
            or not holds_integers(edge_label_index)):
        raise ValueError(f"edge_label_index must be a [2, num_edges] tensor of node ids, "
                         f"got {tuple(edge_label_index.shape)} {edge_label_index.dtype}")
    if num_nodes is not None and edge_label_index.numel() and (
            int(edge_label_index.min()) < 0 or int(edge_label_index.max()) >= num_nodes):
        bad = edge_label_index[(edge_label_index < 0) | (edge_label_index >= num_nodes)][0]
        raise IndexError(f"edge_label_index holds node {int(bad)}, out of range "
                         f"[0, {num_nodes})")
    if edge_label is not None and as_tensor(edge_label).dim() == 0:
        # A label may be a vector (multi-label edges, regression targets), as in PyG.
        raise ValueError("edge_label must hold one label per seed edge, got a scalar")
    if edge_label is not None and as_tensor(edge_label).size(0) != \
            edge_label_index.size(1):
        raise ValueError(f"edge_label has {as_tensor(edge_label).size(0)} labels for "
                         f"{edge_label_index.size(1)} seed edges")
    if edge_label_index.dtype not in (torch.int32, torch.int64):
        # int8/int16/unsigned ids, which the samplers refuse at the first batch.
        edge_label_index = edge_label_index.long()
    return edge_label_index


class LinkBatch(NamedTuple):
    """One link-prediction batch: the sampled nodes ``n_id`` (the batch's distinct seed-edge
    and negative endpoints first, ``batch_size`` of them), the layers' :class:`Adj`, the
    rows ``x`` of ``n_id``, and per scored pair its endpoints as positions in ``n_id``
    (``edge_label_index``, seed edges first, then the negatives) with its label
    (``edge_label``: the seed edges' labels, 1 by default, then 0 for each negative)."""
    n_id: Tensor
    batch_size: int
    adjs: List[Adj]
    x: Optional[Tensor]
    edge_label_index: Tensor
    edge_label: Tensor


# The most negatives one draw takes (the ops' bound on a hop's edges, kMaxHopEdges).
MAX_NEGATIVES = (1 << 32) - 2


def negatives_of(edges: int, ratio: float) -> int:
    """``ceil(edges * ratio)`` with ``ratio`` read as the decimal it prints as: in floats
    100 * 0.07 is 7.000000000000001, whose ceiling drew an 8th negative (a probe)."""
    return math.ceil(edges * fractions.Fraction(repr(float(ratio))))


class LinkSampleLoader(SampleLoader):
    """:class:`SampleLoader` for link prediction: seed edges in, batches of their endpoints'
    computation graphs out, with binary negatives drawn on the sampling device and the same
    prefetching.

    Args:
        sampler, feature: as for :class:`SampleLoader`; ``sampler`` uniform or weighted
            (temporal link sampling grows a tree per seed: use
            :class:`torch_quiver_ops.pyg.LinkNeighborLoader` for it).
        edge_label_index: ``[2, num_edges]`` seed edges (source, destination).
        batch_size: seed edges per batch.
        edge_label: one label per seed edge (default: 1).
        neg_ratio: random negative pairs per seed edge (``ceil(batch * neg_ratio)`` a
            batch, with ``neg_ratio`` read as the decimal it prints as: 0.07 of 100 edges
            is 7; 0: none), labelled 0.
        neg_exclude_edges: redraw a negative that is a true edge, up to
            ``neg_max_trials`` draws in all: a negative of a source linked to a share ``p``
            of the nodes is still a true edge with probability ``p ** neg_max_trials``
            (on a complete graph every one; see :meth:`GraphSageSampler.sample_negatives`).
        neg_max_trials: draws per negative at most, 1 to 1000 (default 8).
        shuffle, drop_last, prefetch, generator, prefetch_sms, prefetch_host_read_blocks,
        workers: as for :class:`SampleLoader` (batches are the same for any ``workers``).
    """

    _seeds_are_nodes = False  # edge positions

    def __init__(self, sampler: GraphSageSampler, feature: Union[None, Feature, Tensor],
                 edge_label_index: Tensor, batch_size: int,
                 edge_label: Optional[Tensor] = None, neg_ratio: float = 1.0,
                 neg_exclude_edges: bool = True, shuffle: bool = True, drop_last: bool = False,
                 prefetch: int = 2, generator: Optional[torch.Generator] = None,
                 prefetch_sms: Optional[int] = None,
                 prefetch_host_read_blocks: int = HOST_READ_BLOCKS, workers: int = 1,
                 own_stream: bool = True, neg_max_trials: int = 8):
        _check_sampler(sampler)  # (None was an AttributeError on disjoint)
        if sampler.disjoint:
            raise ValueError("LinkSampleLoader samples one graph around a batch's endpoints; "
                             "for temporal or disjoint link sampling use "
                             "torch_quiver_ops.pyg.LinkNeighborLoader")
        edge_label_index = checked_seed_edges(edge_label_index, sampler.csr_topo.node_count,
                                              edge_label)
        if isinstance(neg_ratio, bool) or not isinstance(neg_ratio, (int, float)) and not (
                hasattr(neg_ratio, "__float__") and not isinstance(neg_ratio, (str, bytes))):
            raise TypeError(f"neg_ratio must be a number >= 0, got {neg_ratio!r}")
        neg_ratio = float(neg_ratio)
        neg_exclude_edges = check_flag(neg_exclude_edges, "neg_exclude_edges")
        if not 0 <= neg_ratio < math.inf:  # NaN would ask for no negatives, unsaid
            raise ValueError(f"neg_ratio must be a finite number >= 0, got {neg_ratio}")
        trials = as_int(neg_max_trials)
        if trials is None or not 1 <= trials <= 1000:
            raise ValueError(f"neg_max_trials must be an int in [1, 1000], got "
                             f"{neg_max_trials!r}")
        num_edges = edge_label_index.size(1)
        batch = as_int(batch_size)
        if batch is not None and batch > 0:  # (its own checks come with SampleLoader's)
            batch = min(batch, num_edges)  # a batch holds no more edges than there are
            wanted = negatives_of(batch, neg_ratio)
            if wanted > MAX_NEGATIVES:
                # (it failed at the first batch, in torch.randint or an allocation of
                # petabytes)
                raise ValueError(f"neg_ratio={neg_ratio} asks for {wanted} negatives a batch "
                                 f"of {batch} edges, over the limit of {MAX_NEGATIVES}: lower "
                                 f"neg_ratio or batch_size")
        # Its own _build_one builds its batches: SampleLoader never gives them to C++.
        super().__init__(sampler, feature, torch.arange(num_edges, device="cpu"), batch_size, None,
                         shuffle, drop_last, prefetch, generator, prefetch_sms,
                         prefetch_host_read_blocks, workers, own_stream=own_stream)
        self.edge_label_index = edge_label_index.long().to(self.device)
        self.edge_label = (None if edge_label is None
                           else as_tensor(edge_label).to(self.device))
        self.neg_ratio = neg_ratio
        self.neg_exclude_edges = neg_exclude_edges
        self.neg_max_trials = trials

    def _build_one(self, ids: Tensor, sampling_seed: int) -> LinkBatch:
        generator = self._sampling_generator(sampling_seed)
        ids = ids.to(self.device, non_blocking=True)
        src, dst = self.edge_label_index[:, ids]
        label = (torch.ones(ids.numel(), device=self.device) if self.edge_label is None
                 else self.edge_label[ids])
        if self.neg_ratio > 0:
            num_neg = negatives_of(ids.numel(), self.neg_ratio)
            src_neg = torch.randint(self.sampler.csr_topo.node_count, (num_neg,),
                                    device=self.device, generator=generator)
            dst_neg = self.sampler.sample_negatives(
                src_neg, 1, self.neg_exclude_edges, generator,
                max_trials=getattr(self, "neg_max_trials", 8))  # (loaders pickled before it)
            src, dst = torch.cat([src, src_neg]), torch.cat([dst, dst_neg])
            label = torch.cat([label, label.new_zeros((num_neg, ) + label.shape[1:])])
        endpoints, positions = torch.cat([src, dst]).unique(return_inverse=True)
        n_id, batch_size, adjs = self.sampler.sample(endpoints, generator)
        x = None if self.feature is None else self.feature[n_id]
        return LinkBatch(n_id, batch_size, adjs, x, positions.view(2, -1), label)
