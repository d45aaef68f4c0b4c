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

import dataclasses
import queue
import threading
import time
from typing import Any, Iterable, Iterator, List, NamedTuple, Optional, Union

import torch
from torch import Tensor

from .feature import Feature, check_host_read_blocks
from .feature import host_read_blocks as host_read_blocks_of
from .sampler import Adj, GraphSageSampler

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


# Thread blocks (of 1024 threads) for a prefetching loader's gathers of host rows
# (Prefetcher): on the H100, with a GraphSAGE model training beside it, 12 beat 6, 8, 10,
# 14 and 16, and 48 blocks of 256 threads, the same warps spread over four times the SMs
# (docs/benchmarks.md).
HOST_READ_BLOCKS = 12


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
        depth: batches built ahead (memory: ``depth + 1`` batches in flight at most);
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

    Leaving an epoch early (``break``) stops the thread before the next epoch starts.
    An exception raised while building a batch is raised by ``next()`` in the caller.
    """

    def __init__(self, loader: Iterable, device: Union[None, int, str, torch.device] = None,
                 depth: int = 2, stream: Optional[torch.cuda.Stream] = None,
                 sms: Optional[int] = None, host_read_blocks: int = HOST_READ_BLOCKS):
        if depth < 0:
            raise ValueError(f"depth must be >= 0, got {depth}")
        check_host_read_blocks(host_read_blocks, "host_read_blocks")
        self.host_read_blocks = host_read_blocks
        if sms is not None and stream is not None:
            raise ValueError("give a stream or a number of SMs for the loader, not both")
        if device is None:
            device = (torch.device("cuda", torch.cuda.current_device())
                      if torch.cuda.is_available() else torch.device("cpu"))
        self.device = torch.device(device) if not isinstance(device, int) else torch.device(
            "cuda", device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.loader = loader
        self.depth = depth
        self._green_context = None  # kept: its stream lives as long as it does
        if sms is not None:
            if self.device.type != "cuda":
                raise ValueError(f"sms={sms}: SMs are a GPU's, and this Prefetcher builds "
                                 f"batches on {self.device}")
            stream, self._green_context = green_context_stream(sms, self.device)
        self.stream = None if stream is None else _as_cuda_stream(stream)

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator:
        batches = iter(self.loader)  # the epoch's random draws happen here, in this thread
        if self.depth == 0:
            return batches
        return self._prefetch(batches)

    def _produce(self, batches: Iterator, ready: "queue.Queue", stop: threading.Event) -> None:
        cuda = self.device.type == "cuda"
        try:
            if cuda:
                torch.cuda.set_device(self.device)  # the current device is per thread
                stream = self.stream if self.stream is not None else torch.cuda.Stream(
                    self.device)
            with torch.cuda.stream(stream) if cuda else _nothing(), \
                    host_read_blocks_of(self.host_read_blocks):
                for batch in batches:
                    event = None
                    if cuda:
                        event = torch.cuda.Event()
                        event.record(stream)
                    if not _put(ready, (batch, event), stop):
                        return
            _put(ready, _END, stop)
        except BaseException as error:  # handed to the consumer, raised there
            _put(ready, _Failure(error), stop)

    def _prefetch(self, batches: Iterator) -> Iterator:
        ready: "queue.Queue" = queue.Queue(maxsize=self.depth)
        stop = threading.Event()
        producer = threading.Thread(target=self._produce, args=(batches, ready, stop),
                                    name="quiver-prefetch", daemon=True)
        producer.start()
        consumer = torch.cuda.current_stream(self.device) if self.device.type == "cuda" else None
        try:
            while True:
                item = ready.get()
                if item is _END:
                    return
                if isinstance(item, _Failure):
                    raise item.error
                batch, event = item
                if event is not None:
                    consumer.wait_event(event)
                    for tensor in _tensors(batch):
                        if tensor.is_cuda:
                            tensor.record_stream(consumer)
                yield batch
        finally:
            stop.set()
            while producer.is_alive():  # unblock a producer waiting for room
                try:
                    ready.get(timeout=0.05)
                except queue.Empty:
                    pass
            producer.join()


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
    ``n_id`` and the seeds' labels ``y`` (None without labels)."""
    n_id: Tensor
    batch_size: int
    adjs: List[Adj]
    x: Tensor
    y: Optional[Tensor]


class SampleLoader:
    """Seeds in, ready batches out: shuffles ``seeds`` every epoch, samples each batch with
    ``sampler``, gathers its rows from ``feature`` and its seeds' labels, ``prefetch``
    batches ahead of the model (see :class:`Prefetcher`).

    Args:
        sampler: a :class:`GraphSageSampler` (GPU, UVA or CPU mode).
        feature: a :class:`Feature` (or anything indexable by node ids, e.g. a tensor).
        seeds: the training nodes.
        batch_size, shuffle, drop_last: as for ``torch.utils.data.DataLoader``.
        labels: one label (row) per node; ``Batch.y`` holds the seeds' ones.
        prefetch: batches built ahead; 0 builds each in the caller's thread (the same
            batches: both draw from the loader's generators).
        generator: a CPU ``torch.Generator`` for the shuffle and the sampling seeds
            (default: PyTorch's default generator, one draw per epoch).
        prefetch_sms: build batches ahead on this many SMs of their own (see
            :class:`Prefetcher`'s ``sms``).
        prefetch_host_read_blocks: see :class:`Prefetcher`'s ``host_read_blocks``.

    ``for n_id, batch_size, adjs, x, y in loader:`` replaces the torch-quiver loop
    ``for seeds in loader: n_id, batch_size, adjs = sampler.sample(seeds); x = feature[n_id]``.
    """

    def __init__(self, sampler: GraphSageSampler, feature: Union[Feature, Tensor], seeds: Tensor,
                 batch_size: int, labels: Optional[Tensor] = None, shuffle: bool = True,
                 drop_last: bool = False, prefetch: int = 2,
                 generator: Optional[torch.Generator] = None,
                 prefetch_sms: Optional[int] = None,
                 prefetch_host_read_blocks: int = HOST_READ_BLOCKS):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        seeds = torch.as_tensor(seeds)
        if seeds.dtype == torch.bool:
            seeds = torch.nonzero(seeds).view(-1)
        if seeds.dim() != 1:
            raise ValueError(f"seeds must be one-dimensional, got shape {tuple(seeds.shape)}")
        self.sampler = sampler
        self.feature = feature
        self.seeds = seeds.cpu()
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.generator = generator
        self.device = sampler.device
        self.labels = None if labels is None else torch.as_tensor(labels).to(self.device)
        if self.labels is not None and self.labels.size(0) != sampler.csr_topo.node_count:
            raise ValueError(f"labels has {self.labels.size(0)} rows but the graph has "
                             f"{sampler.csr_topo.node_count} nodes")
        self._sampling_generator = torch.Generator(self.device)
        self.timer = None  # see _build
        self.prefetch = prefetch
        self._prefetcher = Prefetcher(_Epochs(self), self.device, prefetch, sms=prefetch_sms,
                                      host_read_blocks=prefetch_host_read_blocks)

    def __len__(self) -> int:
        full, rest = divmod(self.seeds.numel(), self.batch_size)
        return full + (1 if rest and not self.drop_last else 0)

    def __iter__(self) -> Iterator[Batch]:
        return iter(self._prefetcher)

    def _epoch(self) -> Iterator[Batch]:
        """Draws the epoch's order and sampling seed now; builds batches when iterated."""
        draw = torch.empty((), dtype=torch.int64)
        seed = int(draw.random_(generator=self.generator))
        self._sampling_generator.manual_seed(seed)
        order = (torch.randperm(self.seeds.numel(), generator=torch.Generator().manual_seed(seed))
                 if self.shuffle else None)
        seeds = self.seeds if order is None else self.seeds[order]
        batches = list(seeds.split(self.batch_size))
        if self.drop_last and batches and batches[-1].numel() < self.batch_size:
            batches.pop()
        return self._build(batches)

    def _build(self, batches: List[Tensor]) -> Iterator[Batch]:
        # ``timer``, when set, has ``lap(phase, since) -> now`` and is called after sampling
        # and after gathering; one that synchronizes the GPU measures each phase alone
        # (meant for prefetch=0: in a prefetching thread it would stall the pipeline).
        timer = self.timer
        for seeds in batches:
            t = time.perf_counter() if timer else 0.0
            n_id, batch_size, adjs = self.sampler.sample(seeds, self._sampling_generator)
            if timer:
                t = timer.lap("sample", t)
            x = self.feature[n_id]
            y = None if self.labels is None else self.labels[n_id[:batch_size].to(self.device)]
            if timer:
                timer.lap("gather", t)
            yield Batch(n_id, batch_size, adjs, x, y)


class _Epochs:
    """What the Prefetcher iterates: one SampleLoader epoch per ``iter()``."""

    def __init__(self, loader: SampleLoader):
        self.loader = loader

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        return self.loader._epoch()
