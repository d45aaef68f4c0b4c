"""Feature store: a node feature table indexable like a tensor."""
from __future__ import annotations

import re
from typing import List, Optional, Sequence, Union

import torch
from torch import Tensor

from . import ops
from .topology import CSRTopo

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


class Feature:
    """A node feature table, indexed like a tensor: ``feature[ids]`` returns those rows.

    Args:
        rank: the GPU this process gathers onto (ignored without a GPU).
        device_list: GPUs that hold a device cache.
        device_cache_size: bytes of the hottest rows to keep in GPU memory per GPU
            (an int or a string such as ``"200M"``).
        cache_policy: ``"device_replicate"`` or ``"p2p_clique_replicate"``.
        csr_topo: when given, rows are ordered hottest first by degree.
    """

    def __init__(self, rank: int = 0, device_list: Optional[Sequence[int]] = None,
                 device_cache_size: Union[int, str] = 0,
                 cache_policy: str = "device_replicate", csr_topo: Optional[CSRTopo] = None):
        if cache_policy not in CACHE_POLICIES:
            raise ValueError(f"cache_policy must be one of {CACHE_POLICIES}, got {cache_policy!r}")
        self.rank = rank
        self.device_list: List[int] = list(device_list) if device_list is not None else [rank]
        self.device_cache_size = parse_size(device_cache_size)
        self.cache_policy = cache_policy
        self.csr_topo = csr_topo
        self._host: Optional[Tensor] = None

    @property
    def device(self) -> torch.device:
        if torch.cuda.is_available():
            return torch.device("cuda", self.rank)
        return torch.device("cpu")

    def from_cpu_tensor(self, x: Tensor) -> "Feature":
        if x.dim() < 1:
            raise ValueError(f"a feature table needs at least one dimension, got shape {tuple(x.shape)}")
        if self.csr_topo is not None and x.size(0) != self.csr_topo.node_count:
            raise ValueError(f"the table has {x.size(0)} rows but csr_topo has "
                             f"{self.csr_topo.node_count} nodes")
        self._host = x.detach().cpu().contiguous()
        return self

    def _table(self) -> Tensor:
        if self._host is None:
            raise RuntimeError("this Feature holds no data yet: call from_cpu_tensor(x) first")
        return self._host

    def __getitem__(self, ids) -> Tensor:
        ids = torch.as_tensor(ids)
        if ids.dim() != 1:
            raise ValueError(f"feature[ids] needs 1-D ids, got shape {tuple(ids.shape)}")
        rows = ops.gather_rows(self._table(), ids.cpu())
        return rows.to(self.device, non_blocking=True)

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
