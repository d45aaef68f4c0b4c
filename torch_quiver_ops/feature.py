"""Tiered feature store: the hottest rows in GPU memory, the rest in pinned host memory,
read by one gather kernel (``quiver::gather_tiered_rows``)."""
from __future__ import annotations

import json
import math
import os
import re
import warnings
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

import torch
from torch import Tensor

from . import ops
from ._device import resolve_device
from ._load import cuda_kernels_built
from .topology import INT32_MAX, CSRTopo
from .uva import pinned

CACHE_POLICIES = ("device_replicate", "p2p_clique_replicate")
_UNITS = {"": 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_size(size: Union[int, float, str]) -> int:
    """Bytes from 1024, "200M", "0.9G" or "1.5GB"."""
    if isinstance(size, (int, float)):
        if size < 0:
            raise ValueError(f"a cache size must be >= 0, got {size}")
        return int(size)
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMGT]?)B?\s*", str(size).upper())
    if not match:
        raise ValueError(f"cannot read {size!r} as a size; use bytes or e.g. '200M', '1.5G'")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def p2p_cliques(device_list: Sequence[int]) -> List[List[int]]:
    """Splits GPUs into cliques whose members can all read each other's memory (NVLink or
    PCIe peer access, as CUDA reports it), in device_list order."""
    cliques: List[List[int]] = []
    for device in device_list:
        for clique in cliques:
            if all(torch.cuda.can_device_access_peer(device, other) and
                   torch.cuda.can_device_access_peer(other, device) for other in clique):
                clique.append(device)
                break
        else:
            cliques.append([device])
    return cliques


def presample_hot_order(sampler, seeds: Tensor, batch_size: int = 1024,
                        num_batches: Optional[int] = None,
                        generator: Optional[torch.Generator] = None) -> Tensor:
    """Node ids hottest first, by how many sampled batches read each node's row.

    Runs ``sampler`` over shuffled batches of ``seeds`` (``num_batches`` of them, default
    one epoch) and counts the batches each node appears in. Ties, such as nodes never
    sampled, go by degree. Pass the result as ``hot_order`` to
    :meth:`Feature.from_cpu_tensor`.
    """
    topo: CSRTopo = sampler.csr_topo
    seeds = torch.as_tensor(seeds).cpu()
    if seeds.dim() != 1 or seeds.numel() == 0:
        raise ValueError(f"seeds must be a non-empty 1-D tensor, got shape {tuple(seeds.shape)}")
    counts = torch.zeros(topo.node_count, dtype=torch.int32, device=sampler.device)
    shuffled = seeds[torch.randperm(seeds.numel(), generator=generator)]
    batches = shuffled.split(batch_size)
    for batch in batches[:num_batches] if num_batches is not None else batches:
        node_ids = sampler.sample_subgraph(batch)[0]
        counts[node_ids] += 1  # a batch lists each node once
    by_degree = torch.argsort(topo.degree.to(counts.device), descending=True, stable=True)
    return by_degree[torch.argsort(counts[by_degree], descending=True, stable=True)].cpu()


def _check_hot_order(order, num_rows: int) -> Tensor:
    order = torch.as_tensor(order).cpu()
    if order.dim() != 1 or order.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"hot_order must be a 1-D tensor of int32/int64 ids, got {order.dtype} "
                        f"of shape {tuple(order.shape)}")
    if order.numel() != num_rows:
        raise ValueError(f"hot_order must list each of the {num_rows} rows once, got "
                         f"{order.numel()} ids")
    order = order.long()
    if num_rows:
        low, high = int(order.min()), int(order.max())
        if low < 0 or high >= num_rows:
            raise IndexError(f"hot_order holds id {low if low < 0 else high}, out of range "
                             f"[0, {num_rows})")
        seen = torch.zeros(num_rows, dtype=torch.bool)
        seen[order] = True
        if not bool(seen.all()):
            missing = int(torch.nonzero(~seen)[0])
            raise ValueError(f"hot_order is not a permutation: row {missing} is missing "
                             f"(and another appears twice)")
    return order


def _positions_of(order: Tensor) -> Tensor:
    """The inverse permutation, int32 where it fits: positions[order[p]] = p."""
    dtype = torch.int32 if order.numel() <= INT32_MAX else torch.int64
    positions = torch.empty(order.numel(), dtype=dtype)
    positions[order] = torch.arange(order.numel(), dtype=dtype)
    return positions


def _local_shards(host: Tensor, clique: List[int], bounds, skip=()) -> Dict[int, Tensor]:
    """This process's copies of a clique's shards (all but those in `skip`)."""
    return {device: _shareable_copy(host[begin:end], device)
            for device, (begin, end) in zip(clique, bounds) if device not in skip}


def _shareable_copy(rows: Tensor, device: int) -> Tensor:
    """``rows`` copied onto ``device`` into memory other processes can map (CudaIpc)."""
    memory = torch.classes.quiver.CudaIpc.allocate(rows.nbytes, device)
    shard = memory[:rows.nbytes].view(rows.dtype).view(rows.shape)
    shard.copy_(rows)
    return shard


def _ipc_payload(shard: Tensor) -> tuple:
    """What a peer process needs to map ``shard`` (from _shareable_copy): plain data."""
    handle = torch.classes.quiver.CudaIpc.export_handle(shard)
    return (bytes(handle.numpy()), shard.device.index, shard.dtype, tuple(shard.shape))


def _open_payload(payload: tuple, reader: int) -> Tensor:
    """Maps a peer's shard for kernels on GPU ``reader``."""
    handle, owner, dtype, shape = payload
    nbytes = math.prod(shape) * torch.empty(0, dtype=dtype).element_size()
    memory = torch.classes.quiver.CudaIpc.open_handle(
        torch.frombuffer(bytearray(handle), dtype=torch.uint8), nbytes, owner, reader)
    return memory.view(dtype).view(shape)


def _shared_empty(shape, dtype: torch.dtype) -> Tensor:
    """A tensor in shared memory (so spawned workers map it), or private memory with a
    warning when /dev/shm cannot hold it."""
    tensor = torch.empty(shape, dtype=dtype)
    try:
        free = os.statvfs("/dev/shm").f_bavail * os.statvfs("/dev/shm").f_frsize
    except OSError:
        free = None
    if free is not None and free < tensor.nbytes + (64 << 20):
        warnings.warn(f"/dev/shm has {free >> 20} MiB free, too little for the {tensor.nbytes >> 20} "
                      f"MiB feature table: it stays in private memory, and worker processes "
                      f"cannot share it (use Feature.save / Feature.load_shared instead)")
        return tensor
    return tensor.share_memory_()


class Feature:
    """A node feature table larger than GPU memory, gathered at GPU speed: ``feature[ids]``.

    Rows are ordered by hotness (``hot_order``, else degree from ``csr_topo``, else as
    given). The hottest ``device_cache_size`` bytes of rows per GPU live in GPU memory:

    * ``"device_replicate"``: every GPU of ``device_list`` keeps its own copy of them;
    * ``"p2p_clique_replicate"``: GPUs that can read each other's memory (an NVLink
      clique, found with :func:`p2p_cliques`) split ``clique size x device_cache_size``
      bytes of the hottest rows between them and read their peers' parts directly.

    The whole table also lives in pinned host memory, in hot order, which the GPU reads
    with zero copy for rows outside its cache. One kernel reads every tier.

    Args:
        rank: the default GPU of ``device_list``.
        device_list: GPUs that cache rows (default ``[rank]``).
        device_cache_size: bytes of rows per GPU, an int or a string such as ``"200M"``.
        cache_policy: ``"device_replicate"`` or ``"p2p_clique_replicate"``.
        csr_topo: orders rows by degree when no ``hot_order`` is given.

    ``feature[ids]`` returns the rows on the ids' GPU, or for CPU ids on the current GPU
    (on the CPU where there is none, or when ``device_list`` is empty). Spawned workers (``torch.multiprocessing.spawn``) can
    receive a Feature: the host table travels as shared memory, clique shards as CUDA IPC
    handles, and each worker builds its own replica at its first gather. Independent
    processes (``torchrun``) use :meth:`save` and :meth:`load_shared`.
    """

    def __init__(self, rank: int = 0, device_list: Optional[Sequence[int]] = None,
                 device_cache_size: Union[int, str] = 0,
                 cache_policy: str = "device_replicate", csr_topo: Optional[CSRTopo] = None):
        if cache_policy not in CACHE_POLICIES:
            raise ValueError(f"cache_policy must be one of {CACHE_POLICIES}, got {cache_policy!r}")
        device_list = [int(d) for d in (device_list if device_list is not None else [rank])]
        if len(set(device_list)) != len(device_list):
            raise ValueError(f"device_list names a GPU twice: {device_list}")
        self.rank = rank
        self.device_list: List[int] = device_list
        self.device_cache_size = parse_size(device_cache_size)
        self.cache_policy = cache_policy
        self.csr_topo = csr_topo
        self._host: Optional[Tensor] = None        # every row, hottest first
        self._positions: Optional[Tensor] = None   # row id -> hot position (None: identity)
        self._cache_rows = 0                        # rows each GPU holds
        self._cliques: List[List[int]] = []
        self._shards: Dict[int, Tensor] = {}        # clique policy: GPU -> its part
        self._shard_payloads: Dict[int, bytes] = {}  # the same, as IPC handles (in workers)
        self._process_state()

    def _process_state(self) -> None:
        """What each process builds for itself: pins, replicas, per-GPU layouts."""
        self._pins = []
        self._pinned_host: Optional[Tensor] = None
        self._replicas: Dict[int, Tensor] = {}
        # device -> (FeatureTiers, its tiers, its positions): the op's arguments, kept so a
        # gather does not cross into the class each time.
        self._views: Dict[torch.device, tuple] = {}

    # ---- building ----

    def from_cpu_tensor(self, x: Tensor, hot_order: Optional[Tensor] = None) -> "Feature":
        """Takes the table ``x`` (rows first; any dtype and row shape) and places it.

        ``hot_order`` lists the row ids hottest first (e.g. from
        :func:`presample_hot_order`); without it the order is by degree when ``csr_topo``
        was given, else the rows' own order.
        """
        if not isinstance(x, Tensor) or x.dim() < 1:
            raise ValueError(f"a feature table needs at least one dimension, got "
                             f"{getattr(x, 'shape', type(x))}")
        num_rows = x.size(0)
        if self.csr_topo is not None and num_rows != self.csr_topo.node_count:
            raise ValueError(f"the table has {num_rows} rows but csr_topo has "
                             f"{self.csr_topo.node_count} nodes")
        if hot_order is not None:
            order = _check_hot_order(hot_order, num_rows)
        elif self.csr_topo is not None:
            order = self.csr_topo.feature_order
        else:
            order = None
        x = x.detach().cpu().contiguous()
        host = _shared_empty(x.shape, x.dtype)
        if order is None:
            host.copy_(x)
        else:
            torch.index_select(x, 0, order, out=host)
        positions = None
        if order is not None:
            positions = _positions_of(order)
            if host.is_shared():
                positions.share_memory_()
        self._place(host, positions)
        return self

    def _place(self, host: Tensor, positions: Optional[Tensor], make_shards=None) -> None:
        self._host, self._positions = host, positions
        self._process_state()
        row_bytes = host[0].nbytes if host.size(0) else 0
        gpus = torch.cuda.is_available() and cuda_kernels_built() and bool(self.device_list)
        self._cache_rows = (min(host.size(0), self.device_cache_size // row_bytes)
                            if gpus and row_bytes else 0)
        if self.cache_policy == "p2p_clique_replicate" and gpus:
            self._cliques = p2p_cliques(self.device_list)
        else:
            self._cliques = [[d] for d in self.device_list]
        self._shards = {}
        for clique in self._cliques:
            if len(clique) > 1 and self._cache_rows:
                self._shards.update((make_shards or _local_shards)(
                    host, clique, self._shard_bounds(clique)))

    def _shard_bounds(self, clique: Sequence[int]):
        """Contiguous runs of the clique's hot rows, one per member, in clique order."""
        total = min(self._host.size(0), len(clique) * self._cache_rows)
        per = math.ceil(total / len(clique))
        return [(min(j * per, total), min((j + 1) * per, total)) for j in range(len(clique))]

    # ---- per-GPU layout ----

    def _table(self) -> Tensor:
        if self._host is None:
            raise RuntimeError("this Feature holds no data yet: call from_cpu_tensor(x) first")
        return self._host

    def _clique_of(self, index: int) -> Optional[List[int]]:
        return next((c for c in self._cliques if index in c), None)

    def _gpu_tiers(self, device: torch.device) -> List[Tensor]:
        clique = self._clique_of(device.index)
        if not self._cache_rows:
            hot: List[Tensor] = []
        elif clique is None:
            raise ValueError(f"this Feature caches rows on GPUs {self.device_list}, and "
                             f"{device} is not one of them: gather on one of those GPUs "
                             f"(torch.cuda.set_device) or add it to device_list")
        elif len(clique) == 1:
            if device.index not in self._replicas:
                self._replicas[device.index] = self._host[:self._cache_rows].to(device)
            hot = [self._replicas[device.index]]
        else:  # the op turns on peer access to the members' memory
            hot = [self._clique_shard(d, device.index) for d in clique]
        if self._pinned_host is None:
            # In place (the shared pages themselves); a small table may get a pinned copy.
            self._pinned_host, pin = pinned(self._host)
            self._pins.append(pin)
        hot_rows = sum(t.size(0) for t in hot)
        return hot + [self._pinned_host[hot_rows:]]

    def _clique_shard(self, owner: int, reader: int) -> Tensor:
        """A clique member's shard; in a worker, its IPC handle is opened at first use, in
        the reading GPU's context."""
        if owner not in self._shards:
            self._shards[owner] = _open_payload(self._shard_payloads[owner], reader)
        return self._shards[owner]

    def tiers(self, device: Union[None, int, str, torch.device] = None) -> "torch.ScriptObject":
        """The layout ``device`` reads (a ``torch.classes.quiver.FeatureTiers``, usable from
        TorchScript): its GPU-memory tiers, then the host tier. Default: the current GPU, or
        the CPU without one."""
        return self._view(self._device_for(device))[0]

    def _view(self, device: torch.device) -> tuple:
        view = self._views.get(device)
        if view is None:
            self._table()
            if device.type == "cuda":
                tiers = self._gpu_tiers(device)
                positions = (self._positions.to(device) if self._positions is not None
                             else None)
            else:
                tiers, positions = [self._host], self._positions
            view = (torch.classes.quiver.FeatureTiers(tiers, positions), tiers, positions)
            self._views[device] = view
        return view

    def _device_for(self, device) -> torch.device:
        if device is None and not self.device_list:
            return torch.device("cpu")
        return resolve_device(device)

    # ---- reading ----

    def __getitem__(self, ids) -> Tensor:
        if isinstance(ids, Tensor) and ids.is_cuda:  # the hot path: sampler output
            view = self._views.get(ids.device)
            if view is not None:
                return torch.ops.quiver.gather_tiered_rows.default(view[1], view[2], ids)
        ids = torch.as_tensor(ids)
        if ids.dim() != 1:
            raise ValueError(f"feature[ids] needs 1-D ids, got shape {tuple(ids.shape)}")
        device = ids.device if ids.is_cuda else self._device_for(None)
        _, tiers, positions = self._view(device)
        return ops.gather_tiered_rows(tiers, positions, ids.to(device, non_blocking=True))

    def hit_rate(self, ids, device: Union[None, int, str, torch.device] = None) -> float:
        """The fraction of ``ids`` that ``device`` (default: current GPU) reads from GPU
        memory: its own cache or its clique's."""
        view, tiers, _ = self._view(self._device_for(device))
        ids = torch.as_tensor(ids).cpu().long()
        if ids.numel() == 0 or not tiers[0].is_cuda:
            return 0.0
        positions = self._positions[ids] if self._positions is not None else ids
        return float((positions < view.leading_rows()).double().mean())

    @property
    def cached_rows(self) -> int:
        """Rows each GPU holds (with a clique, each member holds this many)."""
        return self._cache_rows

    def size(self, dim: Optional[int] = None):
        shape = self._table().shape
        return shape if dim is None else shape[dim]

    @property
    def shape(self) -> torch.Size:
        return self._table().shape

    @property
    def dtype(self) -> torch.dtype:
        return self._table().dtype

    def dim(self) -> int:
        return self._table().dim()

    def __len__(self) -> int:
        return self._table().size(0)

    def __repr__(self) -> str:
        shape = tuple(self._host.shape) if self._host is not None else None
        return (f"Feature(shape={shape}, cache_policy={self.cache_policy!r}, "
                f"cached_rows={self._cache_rows}, cliques={self._cliques})")

    # ---- sharing with spawned workers ----

    def __getstate__(self):
        state = self.__dict__.copy()
        for key in ("_pins", "_pinned_host", "_replicas", "_views"):
            state.pop(key)
        # Shards travel as IPC handles, opened at first use in the reading GPU's context.
        state["_shard_payloads"] = {**{d: _ipc_payload(t) for d, t in self._shards.items()
                                       if d not in self._shard_payloads},
                                    **self._shard_payloads}
        state["_shards"] = {}
        if self._host is not None and not self._host.is_shared():
            raise RuntimeError("this Feature's host table is not in shared memory (see the "
                               "warning when it was built), so it cannot be handed to worker "
                               "processes; use Feature.save and Feature.load_shared")
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._process_state()

    # ---- one copy per machine for independent processes (torchrun) ----

    def save(self, directory: Union[str, Path]) -> Path:
        """Writes the table in hot order and the positions as raw files (put them on
        /dev/shm to share RAM), for :meth:`load_shared`."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        host = self._table()
        host.view(-1).view(torch.uint8).numpy().tofile(directory / "rows.bin")
        meta = {"shape": list(host.shape), "dtype": str(host.dtype).replace("torch.", "")}
        if self._positions is not None:
            self._positions.numpy().tofile(directory / "positions.bin")
            meta["positions"] = str(self._positions.dtype).replace("torch.", "")
        (directory / "feature.json").write_text(json.dumps(meta))
        return directory

    @classmethod
    def load_shared(cls, directory: Union[str, Path], rank: int = 0,
                    device_list: Optional[Sequence[int]] = None,
                    device_cache_size: Union[int, str] = 0,
                    cache_policy: str = "device_replicate",
                    group=None) -> "Feature":
        """Maps a table written by :meth:`save` with MAP_SHARED, so every process on the
        machine reads the same pages, and places its GPU tiers.

        With ``p2p_clique_replicate`` under ``torch.distributed`` (e.g. one torchrun worker
        per GPU of ``device_list``), each worker copies only its own GPU's shard and the
        workers swap CUDA IPC handles through ``group`` (default: the world); every worker
        must call this. Without a process group, this process builds every shard.
        """
        directory = Path(directory)
        meta = json.loads((directory / "feature.json").read_text())
        dtype = getattr(torch, meta["dtype"])
        shape = meta["shape"]
        count = math.prod(shape)
        host = torch.from_file(str(directory / "rows.bin"), shared=True, size=count,
                               dtype=dtype).view(shape)
        positions = None
        if "positions" in meta:
            positions = torch.from_file(str(directory / "positions.bin"), shared=True,
                                        size=shape[0], dtype=getattr(torch, meta["positions"]))
        feature = cls(rank, device_list, device_cache_size, cache_policy)
        make_shards = None
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            make_shards = _shards_swapped_over(group)
        feature._place(host, positions, make_shards)
        return feature


def _shards_swapped_over(group):
    """Builds each clique's shards across torch.distributed workers: a worker copies only
    the shard of its current GPU, then all workers swap CUDA IPC handles (every worker
    takes part in every swap, so all must place the same cliques in the same order)."""
    import torch.distributed as dist

    def make_shards(host: Tensor, clique: List[int], bounds) -> Dict[int, Tensor]:
        mine = torch.cuda.current_device()
        shards: Dict[int, Tensor] = {}
        payload = None
        if mine in clique:
            begin, end = bounds[clique.index(mine)]
            shards[mine] = _shareable_copy(host[begin:end], mine)
            payload = (mine, _ipc_payload(shards[mine]))
        gathered = [None] * dist.get_world_size(group)
        dist.all_gather_object(gathered, payload, group=group)
        if mine not in clique:
            return {}  # this worker reads another clique's shards
        for item in gathered:
            if item is not None and item[0] in clique and item[0] not in shards:
                shards[item[0]] = _open_payload(item[1], mine)
        shards.update(_local_shards(host, clique, bounds, skip=shards))  # GPUs no worker runs on
        return shards

    return make_shards
