"""Tiered feature store: the hottest rows in GPU memory, the rest in pinned host memory,
read by one gather kernel (``quiver::gather_tiered_rows``)."""
from __future__ import annotations

import contextlib
import numbers
import os
import sys
import threading
import warnings
import weakref
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor

from . import _sharing, ops, preflight
from ._device import (as_ids, as_int, checked_node_ids, gpus_usable, holds_integers, is_int,
                      p2p_cliques, parse_share, parse_size, readable_ids, resolve_device,
                      slice_ids)
from ._interrupts import ctrl_c_ends_waits
from .hotness import INT32_MAX, check_hot_order, check_positions, inverse_of_checked
from .topology import CSRTopo
from .uva import pinned

CACHE_POLICIES = ("device_replicate", "p2p_clique_replicate")
HOST_READS = ("auto", "zero_copy", "staged")
# "auto" stages host tables from this size on: on the H100 host, zero copy reads random rows
# of a 4 GiB table at 50 GB/s and of a 16 GiB one at 19, staging at 47 and 34-38
# (docs/benchmarks.md).
STAGED_FROM_BYTES = 8 << 30

# What host_read_blocks sets for the gathers of this thread.
_THREAD_GATHERS = threading.local()
# Held while a Feature builds its tiers for a device on first use, and while it takes a new
# table or lets go of one: a layout built from the old table had been stored after the
# swap, and gathers went on reading the old rows, or a closed store's (a probe).
_VIEWING = threading.RLock()
# The DistFeatures serving each Feature's table to other hosts (both weakly): their
# runtimes hold the table's layout, and over RDMA its registered memory, so a table replaced
# under them had been served stale to every host, their own included, unsaid (a probe).
_SERVED_BY: "weakref.WeakKeyDictionary[Feature, weakref.WeakSet]" = weakref.WeakKeyDictionary()


def serve_to_peers(feature: "Feature", server) -> None:
    """Marks ``feature``'s table as served by ``server`` (a DistFeature) until
    :func:`stop_serving`: ``from_cpu_tensor`` refuses to replace it meanwhile."""
    with _VIEWING:
        _SERVED_BY.setdefault(feature, weakref.WeakSet()).add(server)


def stop_serving(feature: "Feature", server) -> None:
    with _VIEWING:
        _SERVED_BY.get(feature, weakref.WeakSet()).discard(server)


def check_host_read_blocks(blocks, name: str) -> None:
    if not is_int(blocks) or not 0 <= blocks < 2**31:  # the op takes a C++ int
        raise ValueError(f"{name} must be an int in [0, 2**31) (0: no limit), got {blocks!r}")


@contextlib.contextmanager
def host_read_blocks(blocks: int):
    """Within this block, in this thread, a :class:`Feature`'s CUDA gathers that read pinned
    host memory run on at most ``blocks`` thread blocks of 1024 threads (0: as many blocks
    of 256 as their rows fill). Their reads wait on PCIe whatever their number; fewer
    blocks, each as large as a block can be, leave the other SMs to
    work beside them, such as a model training while a :class:`Prefetcher` builds the next
    batch, which sets this in its thread. The rows are the same."""
    check_host_read_blocks(blocks, "blocks")
    before = _thread_host_read_blocks()
    _THREAD_GATHERS.host_read_blocks = blocks
    try:
        yield
    finally:
        _THREAD_GATHERS.host_read_blocks = before


def _thread_host_read_blocks() -> int:
    """This thread's block cap (host_read_blocks), 0 when none is set: read by every gather
    of the package (Feature's, DistFeature's local rows)."""
    return getattr(_THREAD_GATHERS, "host_read_blocks", 0)


def _checked_rank(rank) -> int:
    """``rank`` as a GPU index (NumPy ints too, as device_list takes them), else a ValueError
    (it was named as device_list, [rank])."""
    index = as_int(rank)
    if index is None or index < 0:
        raise ValueError(f"rank must be an int >= 0 (a GPU index), got {rank!r}")
    return index


def _first_frame_outside_the_package() -> int:
    """The stacklevel of a warning raised here that names the caller's own line: the first
    frame outside torch_quiver_ops and PyG (a PyG store or loader calls in from inside)."""
    inside = tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in (
        sys.modules[__package__], sys.modules.get("torch_geometric")) if m is not None)

    def ours(filename: str) -> bool:  # ('<string>' and '<frozen ...>' are no file of ours)
        return not filename.startswith("<") and os.path.abspath(filename).startswith(inside)

    frame, level = sys._getframe(1), 1
    while frame is not None and ours(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    return level


class Feature:
    """A node feature table larger than GPU memory, gathered at GPU speed: ``feature[ids]``.

    Rows are ranked by hotness (``hot_order``, else degree from ``csr_topo``, else as
    given). The hottest ``device_cache_size`` bytes of rows per GPU live in GPU memory:

    * ``"device_replicate"``: every GPU of ``device_list`` keeps its own copy of them;
    * ``"p2p_clique_replicate"``: GPUs that can read each other's memory (an NVLink
      clique, found with :func:`p2p_cliques`) split ``clique size x device_cache_size``
      bytes of the hottest rows between them and read their peers' parts directly. The
      rows are dealt round-robin in hotness order (member ``j`` of ``k`` holds ranks
      ``j, j + k, ...``), so every member holds an equal share of the hottest rows and
      every GPU reads about ``1/k`` of its hits from its own memory.

    The host tier is the table itself, pinned in place (never copied): the GPU reads it
    with zero copy for rows outside its cache, and the hot order lives in a positions map
    (4 or 8 bytes a row). One kernel reads every tier.

    Args:
        rank: the GPU ``device_list`` names by default (``[rank]``); CPU ids gather on
            the current GPU, or on ``rank`` for the Feature :meth:`new_from_ipc_handle`
            gives a worker.
        device_list: GPUs that cache rows (default ``[rank]``).
        device_cache_size: bytes of rows per GPU: an int, a string such as ``"200M"``, or a
            share of the table such as ``"20%"``.
        cache_policy: ``"device_replicate"`` or ``"p2p_clique_replicate"``.
        csr_topo: orders rows by degree when no ``hot_order`` is given.
        host_reads: how a GPU reads a large batch's rows outside its clique's memory:
            ``"zero_copy"`` (its SMs read the pinned table over PCIe: fastest on tables of
            a few GB), ``"staged"`` (the GPU reads part of them so, while CPU threads
            gather the rest into pinned buffers and the copy engine moves them, the split
            rebalanced after every batch: 2-3x faster on tables of tens of GB, whose
            random pages the GPU reaches slowly), or ``"auto"`` (the default: staged for
            tables of 8 GiB or more).

    ``feature[ids]`` returns the rows on the ids' GPU, or for CPU ids on the current GPU
    (on the CPU where there is none, or when ``device_list`` is empty). Spawned workers
    (``torch.multiprocessing.spawn``) can receive a Feature: the table travels as shared
    memory (moved there at the first pickling if it is not yet), clique shards as CUDA IPC
    handles, and each worker builds its own replica at its first gather. Independent
    processes (``torchrun``) use :meth:`save` and :meth:`load_shared`. Processes that
    mapped each other's clique shards call :meth:`close` together before they exit.
    """

    def __init__(self, rank: int = 0, device_list: Optional[Sequence[int]] = None,
                 device_cache_size: Union[int, str] = 0,
                 cache_policy: str = "device_replicate", csr_topo: Optional[CSRTopo] = None,
                 host_reads: str = "auto"):
        if cache_policy not in CACHE_POLICIES:
            raise ValueError(f"cache_policy must be one of {CACHE_POLICIES}, got {cache_policy!r}")
        rank = _checked_rank(rank)
        if device_list is None:
            device_list = [rank]
        if (not isinstance(device_list, (list, tuple, range))
                or not all(isinstance(d, numbers.Integral) and not isinstance(d, bool)
                           and d >= 0 for d in device_list)):
            raise ValueError(f"device_list must be a list of GPU indices (ints >= 0), got "
                             f"{device_list!r}")
        device_list = [int(d) for d in device_list]
        if csr_topo is not None and not isinstance(csr_topo, CSRTopo):
            raise TypeError(f"csr_topo must be a CSRTopo (to rank rows by degree), got "
                            f"{type(csr_topo).__name__}: build one with CSRTopo(edge_index)")
        if len(set(device_list)) != len(device_list):
            raise ValueError(f"device_list names a GPU twice: {device_list}")
        self.rank = rank
        self._gather_on: Optional[int] = None  # where CPU ids gather (None: the current GPU)
        self.device_list: List[int] = device_list
        # A "20%" cache is sized once the table is known.
        self._cache_share = parse_share(device_cache_size, "device_cache_size")
        if self._cache_share is not None:
            device_cache_size = 0
        self.device_cache_size = parse_size(device_cache_size, "device_cache_size")
        self.cache_policy = cache_policy
        self._host_read_share: Optional[float] = None  # learned (see host_read_share)
        self._host_read_pace = True  # see host_read_pace
        self.host_reads = host_reads
        self.csr_topo = csr_topo
        self._host: Optional[Tensor] = None    # every row, in the table's own order
        self._order: Optional[Tensor] = None   # row ids hottest first (None: as given)
        self._rank: Optional[Tensor] = None    # its inverse: row id -> hotness rank
        self._cache_rows = 0                    # rows each GPU holds
        self._cliques: List[List[int]] = []
        # Clique shards: GPU -> (IpcBuffer or None, rows). The buffer is this process's own
        # (exported to peers); None marks a peer's shard mapped here.
        self._shards: Dict[int, tuple] = {}
        self._shard_payloads: Dict[int, tuple] = {}  # the same, as IPC handles (in workers)
        self._swapped_over = None  # the process group shards were swapped over, if any
        self._process_state()

    def _process_state(self) -> None:
        """What each process builds for itself: the pin, replicas, mapped shards, layouts."""
        self._pin = None
        self._pinned_host: Optional[Tensor] = None
        self._replicas: Dict[int, Tensor] = {}
        self._mapped: Dict[Tuple[int, int], Tensor] = {}  # (owner, reader) -> a peer's shard
        # device -> (FeatureTiers, its tiers, its positions): the op's arguments, kept so a
        # gather does not cross into the class each time.
        self._views: Dict[torch.device, tuple] = {}

    # ---- building ----

    def from_cpu_tensor(self, x: Tensor, hot_order: Optional[Tensor] = None) -> "Feature":
        """Takes the table ``x`` (rows first; any dtype and row shape) and places it. A
        contiguous CPU ``x`` is used in place (pinned where it lies when GPUs read it), so
        the store costs no second host copy; do not resize it while the store lives. The
        GPU caches copy their rows at the first gather on each GPU: write ``x`` before
        that, or call ``from_cpu_tensor`` again after writing it (a later in-place write
        reaches the rows read from host memory, not the cached ones).

        ``hot_order`` lists the row ids hottest first (e.g. from
        :func:`presample_hot_order`); without it the order is by degree when ``csr_topo``
        was given, else the rows' own order.
        """
        if isinstance(x, np.ndarray):  # torch-quiver's users pass numpy tables too
            # (a reversed view or a big-endian array, which from_numpy refuses, is copied)
            if x.dtype.byteorder not in "=|" or any(step < 0 for step in x.strides):
                x = x.astype(x.dtype.newbyteorder("="), order="C")
            x = torch.from_numpy(x)
        if not isinstance(x, Tensor):
            raise TypeError(f"a feature table is a tensor (or numpy array), got "
                            f"{type(x).__name__}")
        # Sparse, nested, quantized and meta tables failed in torch's words, or at the first
        # gather (a probe): the gathers read rows of a dense, strided tensor with data.
        if x.layout != torch.strided or x.is_nested or x.is_quantized or x.is_meta:
            kind = ("a meta tensor, which holds no data" if x.is_meta else
                    "a quantized tensor (pass x.dequantize(), or x.int_repr() and its scale)"
                    if x.is_quantized else "a nested tensor (pad it to rows of one shape)"
                    if x.is_nested else f"a {x.layout} tensor (pass x.to_dense())")
            raise TypeError(f"a feature table is a dense tensor with data, got {kind}")
        if x.dim() < 1:
            raise ValueError(f"a feature table needs at least one dimension, got shape "
                             f"{tuple(x.shape)}")
        num_rows = x.size(0)
        if self.csr_topo is not None and num_rows != self.csr_topo.node_count:
            raise ValueError(f"the table has {num_rows} rows but csr_topo has "
                             f"{self.csr_topo.node_count} nodes")
        if hot_order is not None:
            order = check_hot_order(hot_order, num_rows)
        elif self.csr_topo is not None:
            order = self.csr_topo.feature_order
        else:
            order = None
        if x.requires_grad:  # (batches had silently carried no gradient back: a probe)
            warnings.warn("the feature table requires grad, but a Feature reads its values "
                          "detached from autograd: its rows carry no gradient back to it; for "
                          "learnable node embeddings, keep a torch.nn.Embedding in the model "
                          "and index it with the batch's node ids",
                          stacklevel=_first_frame_outside_the_package())
        self._place(x.detach().cpu().contiguous(), order)
        return self

    def _place(self, host: Tensor, order: Optional[Tensor],
               make_shards: Optional[Callable] = None) -> None:
        with _VIEWING:
            servers = list(_SERVED_BY.get(self, ()))
            if servers:
                raise RuntimeError(
                    f"this Feature's table is served to other hosts by {servers[0]!r}, whose "
                    f"hosts would go on reading the old rows: close that DistFeature (on "
                    f"every host) first, then build a new one over the new table")
            self._place_table(host, order, make_shards)

    def _place_table(self, host: Tensor, order: Optional[Tensor],
                     make_shards: Optional[Callable]) -> None:
        self._host = host
        self._order = None if order is None else order.to(
            torch.int32 if host.size(0) <= INT32_MAX else torch.int64)
        self._rank = None if order is None else inverse_of_checked(order)
        self._process_state()
        row_bytes = host[0].nbytes if host.size(0) else 0
        if self._cache_share is not None:
            self.device_cache_size = int(self._cache_share * host.size(0)) * row_bytes
        gpus = gpus_usable() and bool(self.device_list)
        self._cache_rows = (min(host.size(0), self.device_cache_size // row_bytes)
                            if gpus and row_bytes else 0)
        if self.cache_policy == "p2p_clique_replicate" and gpus:
            self._cliques = p2p_cliques(self.device_list)
        else:
            self._cliques = [[d] for d in self.device_list]
        self._shards = {}
        for clique in self._cliques:
            if len(clique) > 1 and self._cache_rows:
                self._shards.update((make_shards or _sharing.local_shards)(
                    self._hot_rows, clique, self._shard_ranks(clique)))

    def _hot_rows(self, ranks: slice, device: Optional[int] = None) -> Tensor:
        """The rows of the hotness ranks ``ranks`` (a slice, maybe strided), gathered on
        ``device`` when given (straight from the pinned table, no host copy), else on the
        host."""
        if self._order is None:
            if device is None or ranks.step in (None, 1):
                rows = self._host[ranks]
                return rows.contiguous() if device is None else rows.to(device)
            # Every k-th row, read by the GPU from the pinned table (no strided host copy).
            ids = torch.arange(*ranks.indices(self._host.size(0)), device="cpu")
            return ops.gather_rows(self._pinned(device), ids.to(device))
        ids = self._order[ranks]
        if device is None:
            return self._host[ids.long()]
        return ops.gather_rows(self._pinned(device), ids.to(device))

    def _clique_rows(self, clique: Sequence[int]) -> int:
        """Rows a clique's memory holds (its members' caches together, at most the table)."""
        return min(self._host.size(0), len(clique) * self._cache_rows)

    def _shard_ranks(self, clique: Sequence[int]) -> List[slice]:
        """The hotness ranks of each member's shard, in clique order: dealt round-robin,
        so that the hottest rows, which most reads hit, are spread over every member's
        memory and links. (Contiguous runs put them all on the first GPU: its peers then
        read most of their hits over NVLink while it read its own, and the data path of a
        2-GPU clique trained slower than two plain replicas.)"""
        total, k = self._clique_rows(clique), len(clique)
        return [slice(j, total, k) for j in range(k)]

    # ---- per-GPU layout ----

    @property
    def table(self) -> Tensor:
        """Every row, in the table's own order, on the CPU (what RDMA peers read and
        partitioning splits)."""
        if self._host is None:
            if getattr(self, "_closed", False):
                raise RuntimeError("this Feature was closed (close() let go of its table): "
                                   "build or load another")
            raise RuntimeError("this Feature holds no data yet: call from_cpu_tensor(x) first")
        return self._host

    @property
    def host_reads(self) -> str:
        """How a GPU reads a large batch's rows outside its clique's memory (see the
        constructor). Set it at any time: every layout this Feature handed out
        (:meth:`tiers`, and through them DistFeature's and scripted models' gathers) reads
        that way from its next gather."""
        return self._host_reads

    @host_reads.setter
    def host_reads(self, value: str) -> None:
        if value not in HOST_READS:
            raise ValueError(f"host_reads must be one of {HOST_READS}, got {value!r}")
        self._host_reads = value
        for layout, _, _ in getattr(self, "_views", {}).values():
            layout.set_stage_host_rows(self._stages_host_rows())

    @property
    def host_read_share(self) -> Optional[float]:
        """The GPU's share of a staged gather's host rows (``host_reads`` staged, or auto on
        a large table), fixed by the user; None (the default): each GPU's layout learns it
        after every gather, so that the GPU's zero-copy reads and the CPU threads' staging
        end together (:meth:`current_host_read_share` reads it).

        Balanced is the quickest gather, but beside a model that fills the SMs every row the
        GPU reads takes SM time from the model: a lower share (0.0: the CPU threads and the
        copy engine move every host row, no SM reads one) can make the quicker epoch when
        the host has cores to spare. Set it at any time; every layout of this Feature
        follows from its next gather."""
        return self._host_read_share

    @host_read_share.setter
    def host_read_share(self, value: Optional[float]) -> None:
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or \
                    not 0.0 <= float(value) <= 1.0:
                raise ValueError("host_read_share is the GPU's share of a staged gather's host "
                                 f"rows, a number in [0, 1] or None (learned), got {value!r}")
            value = float(value)
        self._host_read_share = value
        for layout, _, _ in getattr(self, "_views", {}).values():
            layout.set_host_read_share(value)

    @property
    def host_read_pace(self) -> bool:
        """Whether a prefetching loader's pace moves the learned :attr:`host_read_share`
        (True, the default; see :meth:`note_loader_pace`). False: staged gathers take the
        balanced share whatever the pace, as the quickest gather does; for a host whose
        cores are wanted elsewhere, or to measure what the pace buys. Set it at any time."""
        return self._host_read_pace

    @host_read_pace.setter
    def host_read_pace(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise ValueError(f"host_read_pace is True or False, got {value!r}")
        self._host_read_pace = value
        for layout, _, _ in getattr(self, "_views", {}).values():
            layout.set_follow_loader_pace(value)

    def current_host_read_share(self, device: Union[None, int, str, torch.device] = None
                                ) -> float:
        """The GPU's share of host rows the next staged gather on ``device`` (default: the
        current GPU) reads with zero copy: :attr:`host_read_share` when fixed, else what its
        layout has learned so far (0.3 before any staged gather)."""
        return self._view(self.device_for(device))[0].host_read_share()

    def note_loader_pace(self, loader_ahead: bool,
                         device: Union[None, int, str, torch.device] = None) -> None:
        """Tells the layout on ``device`` a prefetching loader's pace at one batch: ahead of
        the model (the batch ready before the model needed it) or behind it (the model
        waited for it). While the loader is ahead, staged gathers leave the GPU a smaller
        part of their learned share of host rows, since rows the CPU threads copy take no
        SMs from the model; when the model waits, the GPU takes its part back. A fixed
        :attr:`host_read_share`, or :attr:`host_read_pace` False, ignores it.
        :class:`SampleLoader` calls it; other loaders may pass it to :class:`Prefetcher`
        as ``pace``."""
        if not isinstance(loader_ahead, bool):  # bool("no") is True
            raise ValueError(f"loader_ahead must be True or False, got {loader_ahead!r}")
        self._view(self.device_for(device))[0].note_loader_pace(loader_ahead)

    def _pinned(self, reader=None) -> Tensor:
        """The table pinned in place (a small one that cannot be may get a pinned copy);
        ``reader``: the GPU about to read it, whose context pins it."""
        if self._pinned_host is None:
            self._pinned_host, self._pin = pinned(self._host, reader)
        return self._pinned_host

    def _clique_of(self, index: int) -> Optional[List[int]]:
        return next((c for c in self._cliques if index in c), None)

    def _memory_tiers(self, device: torch.device) -> List[Tensor]:
        clique = self._clique_of(device.index)
        if not self._cache_rows:
            return []
        if clique is None:
            raise ValueError(f"this Feature caches rows on GPUs {self.device_list}, and "
                             f"{device} is not one of them: gather on one of those GPUs "
                             f"(torch.cuda.set_device) or add it to device_list")
        if len(clique) == 1:
            if device.index not in self._replicas:
                self._replicas[device.index] = (
                    self._pinned(device).to(device.index) if self._holds_every_row(clique)
                    else self._hot_rows(slice(0, self._cache_rows), device.index))
            return [self._replicas[device.index]]
        return [self._clique_shard(d, device.index) for d in clique]  # the op enables peers

    def _holds_every_row(self, clique: Sequence[int]) -> bool:
        """Whether the clique's GPU memory holds the whole table. A lone GPU then keeps it
        in the table's own order (no positions to look up), and no host tier is read."""
        return self._clique_rows(clique) >= self._host.size(0)

    def _clique_shard(self, owner: int, reader: int) -> Tensor:
        """A clique member's shard. In a worker its IPC handle is opened at first use, in
        the reading GPU's context, once per (owner, reader): a mapping opened for one GPU
        is not readable by kernels of another."""
        if owner in self._shards:
            return self._shards[owner][1]
        if (owner, reader) not in self._mapped:
            self._mapped[(owner, reader)] = _sharing.open_payload(self._shard_payloads[owner],
                                                                  reader)
        return self._mapped[(owner, reader)]

    def _positions_for(self, clique: Sequence[int], device: torch.device) -> Optional[Tensor]:
        """Where each row sits in [memory tiers..., the whole table]: its place in the
        shard that holds it (see :meth:`_shard_ranks`) when the memory tiers hold it, else
        memory_rows + its id (its row of the table)."""
        k, memory_rows = len(clique), self._clique_rows(clique)
        if self._rank is None and k == 1:
            return None  # memory tiers hold the first rows; the host tier starts after them
        ids_fit = memory_rows + self._host.size(0) <= INT32_MAX
        dtype = torch.int32 if ids_fit else torch.int64
        ids = torch.arange(self._host.size(0), device=device, dtype=dtype)
        rank = ids if self._rank is None else self._rank.to(device, dtype)
        if k > 1:
            # Member j holds ranks j, j + k, ...: rank r is row r // k of member r % k,
            # whose shard starts after the rows of members 0..j-1.
            shard_rows = torch.tensor([len(range(*s.indices(memory_rows)))
                                       for s in self._shard_ranks(clique)], dtype=dtype,
                                      device="cpu")
            starts = (torch.cumsum(shard_rows, 0, dtype=dtype) - shard_rows).to(device)
            place = starts[rank.remainder(k)] + rank.div(k, rounding_mode="floor")
        else:
            place = rank
        return torch.where(rank < memory_rows, place, ids + memory_rows)

    def tiers(self, device: Union[None, int, str, torch.device] = None) -> "torch.ScriptObject":
        """The layout ``device`` reads (a ``torch.classes.quiver.FeatureTiers``, usable from
        TorchScript and savable with a scripted module): its GPU-memory tiers, then the
        host tier. Default: the current GPU, or the CPU without one. The layout views this
        store's rows: ``copy.deepcopy`` of it (or of a module holding it) shares them, as
        torch hands a custom class's state to its copy as it is (pickling, ``torch.save``
        and ``torch.jit.save`` copy them); a copy that writes them writes this store's."""
        return self._view(self.device_for(device))[0]

    def _view(self, device: torch.device) -> tuple:
        view = self._views.get(device)
        if view is not None:
            return view
        return self._new_view(device)

    # Built eagerly under torch.compile too: traced, the new FeatureTiers was a fake whose
    # settings the build sets, and the first read of a store in a compiled function failed.
    @torch.compiler.disable
    def _new_view(self, device: torch.device) -> tuple:
        with _VIEWING:  # a loader's worker threads may gather at once on a new device
            return self._build_view(device)

    def _build_view(self, device: torch.device) -> tuple:
        view = self._views.get(device)
        if view is None:
            host = self.table
            if device.type == "cuda":
                memory = self._memory_tiers(device)
                memory_rows = sum(t.size(0) for t in memory)
                # A GPU that caches nothing (not in device_list, nothing to cache) reads the
                # host tier alone, as a clique of itself holding no rows.
                clique = self._clique_of(device.index) or [device.index]
                if memory and self._holds_every_row(clique):
                    # No host tier: with one, every large gather would sort its reads and
                    # obey the loader's cap on host-reading blocks, for rows all in HBM.
                    tiers = memory
                    positions = (None if len(memory) == 1
                                 else self._positions_for(clique, device))
                elif self._rank is None and len(memory) <= 1:
                    # The cache holds the first rows; the host tier is the table past them.
                    tiers = memory + [self._pinned(device)[memory_rows:]]
                    positions = None
                else:  # the whole table; positions send cached rows to the memory tiers
                    tiers = memory + [self._pinned(device)]
                    positions = self._positions_for(clique, device)
            else:
                tiers, positions = [host], None
            layout = torch.classes.quiver.FeatureTiers(tiers, positions)
            layout.set_stage_host_rows(self._stages_host_rows())
            layout.set_host_read_share(self._host_read_share)
            layout.set_follow_loader_pace(self._host_read_pace)
            view = (layout, tiers, positions)
            self._views[device] = view
        return view

    def device_for(self, device=None) -> torch.device:
        """Where gathers for ``device`` run: ``device`` itself, or for None the current GPU
        (the CPU when this Feature uses no GPU)."""
        if device is None and not self.device_list:
            return torch.device("cpu")
        if device is None and self._gather_on is not None and gpus_usable():
            return torch.device("cuda", self._gather_on)
        device = resolve_device(device)
        if device.type not in ("cpu", "cuda"):  # ('meta' had built a CPU layout under it)
            raise ValueError(f"device must be the CPU or a GPU, got {str(device)!r}")
        if device.type == "cuda" and not gpus_usable():  # (an index failed in a pinning call)
            raise RuntimeError(f"device {str(device)!r} is a GPU, and this process can run "
                               f"no CUDA kernels (no GPU, or a CPU-only build): give "
                               f"device='cpu'")
        return device

    # ---- reading ----

    def __getitem__(self, ids) -> Tensor:
        # Through the device's FeatureTiers, the one door every gather of the store takes
        # (its host-read options and its learned split of staged host reads go with it).
        # The hot path: the sampler's output (ids of another dtype, widened below).
        if (isinstance(ids, Tensor) and ids.is_cuda and ids.dim() == 1
                and ids.dtype in (torch.int32, torch.int64)):
            view = self._views.get(ids.device)
            if view is not None:  # (contiguous: a no-op for the sampler's ids)
                return view[0].gather(ids.contiguous(), _thread_host_read_blocks())
        if isinstance(ids, slice):  # rows start:stop:step, as a tensor would give them
            ids = slice_ids(ids, len(self))
        elif isinstance(ids, tuple):
            # A tensor reads x[3, 1] as one element; a store of rows takes one index, and
            # reading (3, 1) as two row ids would return whole rows where an element was
            # meant.
            raise TypeError(f"Feature takes one index, the row ids, got a tuple of "
                            f"{len(ids)}: pass several ids as a list or a tensor, and index "
                            f"the rows returned for columns")
        elif ids is None or ids is Ellipsis:
            raise TypeError(f"Feature's index must be row ids (a tensor, a list, an int or "
                            f"a slice), got {ids!r}")
        ids = readable_ids(ids)  # the op checks shape, dtype and range
        if ids.dim() == 0:  # one id (an int, a 0-d tensor): its row (ids are never negative)
            return self[ids.reshape(1)][0]
        device = ids.device if ids.is_cuda else self.device_for(None)
        layout = self._view(device)[0]
        return layout.gather(ids.to(device, non_blocking=True).contiguous(),
                             _thread_host_read_blocks())

    def _stages_host_rows(self) -> bool:
        if self._host_reads == "auto":
            return self._host is not None and self._host.nbytes >= STAGED_FROM_BYTES
        return self._host_reads == "staged"

    def hit_rate(self, ids, device: Union[None, int, str, torch.device] = None) -> float:
        """The fraction of ``ids`` that ``device`` (default: current GPU) reads from GPU
        memory: its own cache or its clique's."""
        view, tiers, _ = self._view(self.device_for(device))
        ids = as_ids(ids)
        if ids.dim() != 1 or not holds_integers(ids):
            raise TypeError(f"ids must be a 1-D tensor of integer ids, got {ids.dtype} of "
                            f"shape {tuple(ids.shape)}")
        ids = checked_node_ids(ids.cpu(), self.shape[0], "ids")
        if ids.numel() == 0 or not tiers[0].is_cuda:
            return 0.0
        ranks = self._rank[ids] if self._rank is not None else ids
        return float((ranks < view.leading_rows()).double().mean())

    @property
    def cached_rows(self) -> int:
        """Rows each GPU holds (with a clique, each member holds this many)."""
        return self._cache_rows

    def size(self, dim: Optional[int] = None):
        shape = self.table.shape
        if dim is None:
            return shape
        if not is_int(dim):
            raise TypeError(f"dim must be an int, got {dim!r}")
        if not -len(shape) <= dim < len(shape):
            raise IndexError(f"dim {dim} is out of range for a table of {len(shape)} "
                             f"dimensions {tuple(shape)}")
        return shape[dim]

    @property
    def shape(self) -> torch.Size:
        return self.table.shape

    @property
    def dtype(self) -> torch.dtype:
        return self.table.dtype

    def dim(self) -> int:
        return self.table.dim()

    def __len__(self) -> int:
        return self.table.size(0)

    def __repr__(self) -> str:
        shape = tuple(self._host.shape) if self._host is not None else None
        return (f"Feature(shape={shape}, cache_policy={self.cache_policy!r}, "
                f"cached_rows={self._cache_rows}, cliques={self._cliques})")

    # ---- processes ----

    # torch-quiver's explicit hand-over to spawned workers. A Feature pickles itself into
    # shared memory and IPC handles, so the "handle" is the Feature, and the worker's copy
    # is ready as it arrives (it builds its GPU replica at its first gather).
    def share_ipc(self) -> "Feature":
        """What to pass to ``mp.spawn`` workers (torch-quiver's API): this Feature."""
        return self

    @classmethod
    def new_from_ipc_handle(cls, rank: int, ipc_handle: "Feature") -> "Feature":
        """The worker side of :meth:`share_ipc`: the Feature, gathering on GPU ``rank`` by
        default."""
        if not isinstance(ipc_handle, cls):
            raise TypeError(f"ipc_handle must come from Feature.share_ipc(), got "
                            f"{type(ipc_handle).__name__}")
        ipc_handle.rank = ipc_handle._gather_on = _checked_rank(rank)  # (-1 and "a" had passed)
        return ipc_handle

    @classmethod
    def lazy_from_ipc_handle(cls, ipc_handle: "Feature") -> "Feature":
        """As :meth:`new_from_ipc_handle`, on the GPU current at each gather."""
        if not isinstance(ipc_handle, cls):
            raise TypeError(f"ipc_handle must come from Feature.share_ipc(), got "
                            f"{type(ipc_handle).__name__}")
        ipc_handle._gather_on = None
        return ipc_handle

    @ctrl_c_ends_waits
    def close(self, group=None, timeout: float = 60.0) -> None:
        """Lets go of the table and of clique shards across processes, safely: releases the
        layouts this Feature handed out (:meth:`tiers`, a DistFeature's; later gathers from
        them raise), drops this process's mappings of its peers' shards and, when shards
        were swapped with torch.distributed workers, waits until every worker of ``group``
        (default: the one the shards were swapped over) has dropped its mappings of this
        process's shards (at most ``timeout`` seconds, then a RuntimeError naming the late
        workers: the store is closed and its shards kept, and ``close()`` again waits anew),
        then frees them. Every worker that shares the shards calls it; the
        Feature is empty afterwards. Without it, exported shards stay allocated until the
        process ends (freeing memory a peer still reads is undefined in CUDA). A copy of a
        layout saved with a scripted module is not seen here: load it after close only
        where the shards' owners still run."""
        # Checked whether or not there is a wait to bound ("x" and -1 had passed unsaid).
        if (isinstance(timeout, bool) or not isinstance(timeout, numbers.Real)
                or not 0 < timeout <= 365 * 24 * 3600):
            raise ValueError(f"timeout must be a number of seconds in (0, 1 year], got "
                             f"{timeout!r}")
        if group is not None and not isinstance(group, torch.distributed.ProcessGroup):
            raise TypeError(f"group must be a torch.distributed ProcessGroup or None, got "
                            f"{type(group).__name__}")
        with _VIEWING:  # (no layout is built from the table as it goes)
            for layout, _, _ in self._views.values():
                layout.release()
            self._process_state()
            self._host = self._order = self._rank = None
            self._closed = True
        if self._swapped_over is not None:
            # A late worker raises here: the store is closed, its shards kept, and close()
            # again waits anew and frees them.
            group = group if group is not None else self._swapped_over
            torch.classes.quiver.Transport.agree(group.boxed(), "feature-close", "", timeout)
        own = [buffer for buffer, _ in self._shards.values() if buffer is not None]
        self._shards, self._shard_payloads, self._swapped_over = {}, {}, None
        for buffer in own:
            buffer.mark_unmapped()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _sharing.send_saves_as_files(cls, _reduce_for_workers)

    def __getstate__(self):
        """What pickling takes: the table as it is (``copy.deepcopy``, ``torch.save``).
        Sent to worker processes (multiprocessing's pickler), the table is moved into
        shared memory first (:func:`_reduce_for_workers`); it had been moved for every
        pickle, and a deepcopy put a private table in /dev/shm."""
        state = self.__dict__.copy()
        for key in ("_pin", "_pinned_host", "_replicas", "_mapped", "_views"):
            state.pop(key)
        state["_swapped_over"] = None  # a process group does not travel
        state["csr_topo"] = None  # used to rank rows when building; workers never need it
        # Shards travel as IPC handles, opened at first use in the reading GPU's context.
        state["_shard_payloads"] = {**{d: _sharing.ipc_payload(buffer, rows)
                                       for d, (buffer, rows) in self._shards.items()
                                       if buffer is not None},
                                    **self._shard_payloads}
        state["_shards"] = {}
        return state

    def __setstate__(self, state):
        # Pickled before the option existed, or as a plain attribute.
        state["_host_reads"] = state.pop("host_reads", state.get("_host_reads", "auto"))
        state.setdefault("_swapped_over", None)
        state.setdefault("_gather_on", None)
        state.setdefault("_host_read_share", None)
        state.setdefault("_host_read_pace", True)
        self.__dict__.update(state)
        self._process_state()

    def _move_to_shared_memory(self) -> None:
        """Moves the table into shared memory (torch copies it there and frees the private
        pages), so spawned workers map it; the pin and layouts follow the new pages."""
        preflight.check_shared_memory(
            self._host.nbytes, "moving this Feature's table into shared memory for worker "
            "processes (or save it with Feature.save to a disk directory and use "
            "Feature.load_shared)")
        warnings.warn("moving the feature table into shared memory for worker processes (a "
                      "transient second copy); pass a table already in shared memory "
                      "(x.share_memory_()) to avoid it", stacklevel=3)
        with _VIEWING:
            self._views = {}
            self._pin = self._pinned_host = None
            self._host.share_memory_()
        for t in (self._order, self._rank):
            if t is not None:
                t.share_memory_()

    # ---- one copy per machine for independent processes (torchrun) ----

    def save(self, directory: Union[str, Path]) -> Path:
        """Writes the table (in its own order) and the hot order as raw files (put them on
        /dev/shm to share RAM), for :meth:`load_shared`. Tables of these dtypes
        only (bool, uint8, int8 to int64, float16, bfloat16, float32, float64,
        complex64, complex128): a store of another dtype (uint16, float8, ...) gathers but
        does not save."""
        try:
            return _sharing.save_arrays(directory, "feature",
                                        {"rows": self.table, "order": self._order})
        except TypeError as error:
            raise TypeError(f"Feature.save: {error}") from None

    @classmethod
    def load_shared(cls, directory: Union[str, Path], rank: int = 0,
                    device_list: Optional[Sequence[int]] = None,
                    device_cache_size: Union[int, str] = 0,
                    cache_policy: str = "device_replicate",
                    group=None, host_reads: str = "auto", verify: bool = False) -> "Feature":
        """Maps a table written by :meth:`save` with MAP_SHARED, so every process on the
        machine reads the same pages, and places its GPU tiers. A truncated file or an
        order that is not a permutation raises.

        With ``p2p_clique_replicate`` under ``torch.distributed`` (e.g. one torchrun worker
        per GPU of ``device_list``), each worker copies only its own GPU's shard and the
        workers swap CUDA IPC handles through ``group`` (default: the world); every worker
        must call this (and :meth:`close` before it exits). Without a process group, this
        process builds every shard. ``verify`` checks the files' CRC-32 (a read of every
        byte), not only their sizes.
        """
        arrays, _ = _sharing.map_arrays(directory, "feature", verify=verify,
                                         names=("rows", "order"), required=("rows",))
        host = arrays["rows"]
        if host.dim() == 0:
            raise ValueError(f"{directory}/rows.bin holds one value (shape []): a saved table "
                             f"has a row per node")
        order = arrays.get("order")
        if order is not None:
            check_positions(order, host.size(0), f"{directory}/order.bin")
        feature = cls(rank, device_list, device_cache_size, cache_policy, host_reads=host_reads)
        make_shards = None
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            swap = _sharing.shards_swapped_over(group)

            def make_shards(*args):
                feature._swapped_over = group if group is not None else torch.distributed.group.WORLD
                return swap(*args)
        # (Unlocked: no other thread sees the new store yet, and the swap is a collective,
        # which must not hold up every other store's gathers, or wait on them.)
        feature._place_table(host, order, make_shards)
        return feature


def _reduce_for_workers(feature: Feature):
    """A Feature sent to worker processes: its table moved into shared memory first, so
    they map it rather than each receive a copy; then its state as pickling takes it (a
    subclass's own __getstate__ too), a table from load_shared as its files (mapped again
    in the worker; other pickling copies it: see _sharing.send_saves_as_files)."""
    if feature._host is not None and not feature._host.is_shared():
        feature._move_to_shared_memory()
    return _sharing.reduce_with_files(feature)


_sharing.send_saves_as_files(Feature, _reduce_for_workers)
