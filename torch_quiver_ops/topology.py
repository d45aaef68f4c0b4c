"""Graph topology in CSR form."""
from __future__ import annotations

import operator
import re
from pathlib import Path
from typing import Iterator, Optional, Tuple, Union

import torch
from torch import Tensor

from . import _sharing, ops, preflight
from ._device import as_int64, as_tensor, holds_integers, no_meta
from .hotness import INT32_MAX, degree_order

# Host bytes a node takes while its CSR is built from edges: its int64 offset and the
# kernel's cursor beside it (ops/cpu/csr_from_coo.cpp).
OFFSET_BYTES = 16


def edge_chunks(degree: Tensor, max_edges: int) -> Iterator[Tuple[int, int]]:
    """(begin, end) ranges of consecutive lists whose lengths (``degree``) sum to at most
    ``max_edges``; a longer list makes a chunk of its own."""
    ends = torch.cumsum(degree, 0)
    begin, count = 0, degree.numel()
    while begin < count:
        base = int(ends[begin - 1]) if begin > 0 else 0
        end = int(torch.searchsorted(ends, base + max_edges, right=True))
        end = min(max(end, begin + 1), count)
        yield begin, end
        begin = end


def list_positions(indptr: Tensor, rows: Tensor, degree: Tensor) -> Tensor:
    """The CSR positions of every entry of the lists of ``rows`` (``degree`` long), one list
    after another, on ``indptr``'s device."""
    device = indptr.device
    size = int(degree.sum())
    owner = torch.repeat_interleave(torch.arange(rows.numel(), device=device), degree,
                                    output_size=size)
    first = torch.cumsum(degree, 0) - degree
    return indptr[rows][owner] + torch.arange(size, device=device) - first[owner]


def kept_indptr(indptr: Tensor, kept: Tensor) -> Tensor:
    """The row offsets of the CSR that keeps only the entries ``kept`` (a bool per CSR
    position) marks, each row keeping its kept entries in order."""
    num_rows = indptr.numel() - 1
    rows = torch.repeat_interleave(torch.arange(num_rows, device=indptr.device), indptr.diff(),
                                   output_size=kept.numel())
    out = torch.zeros_like(indptr)
    torch.cumsum(torch.bincount(rows[kept], minlength=num_rows), 0, out=out[1:])
    return out


def build_topology_cache(indptr: Tensor, indices: Tensor, hot_order: Tensor, budget_bytes: int,
                         device: torch.device, max_chunk_edges: int = 1 << 26
                         ) -> Tuple[Tensor, Tensor]:
    """A topology cache for :func:`~torch_quiver_ops.ops.sample_subgraph`: the neighbor
    lists of the hottest nodes (``hot_order``, hottest first) that fit in ``budget_bytes`` of
    ``device`` memory, the per-node starts included (4 bytes a node, 8 when the cache holds
    2^31 entries or more). ``indices`` may be on ``device`` or in pinned host memory; lists
    are copied in chunks of at most ``max_chunk_edges`` entries.

    Returns ``(cached_indices, cached_starts)``, both on ``device``. Raises ValueError when
    the budget cannot hold even the starts.
    """
    device = torch.device(device)
    num_nodes = indptr.numel() - 1
    entry_bytes = indices.element_size()
    starts_dtype = torch.int32
    if (int(budget_bytes) - 4 * num_nodes) // entry_bytes > torch.iinfo(torch.int32).max:
        starts_dtype = torch.int64
    starts_bytes = num_nodes * (4 if starts_dtype == torch.int32 else 8)
    if int(budget_bytes) < starts_bytes:
        raise ValueError(f"a topology cache of {int(budget_bytes)} bytes cannot hold even the "
                         f"per-node starts of {num_nodes} nodes ({starts_bytes} bytes)")
    indptr_here = indptr.to(device)
    order = hot_order.to(device=device, dtype=torch.long)
    degree = (indptr_here[1:] - indptr_here[:-1])[order]
    ends = torch.cumsum(degree, 0)
    room = max(0, int(budget_bytes) - starts_bytes) // entry_bytes
    count = int(torch.searchsorted(ends, torch.tensor([room], device=device), right=True))
    chosen, degree, ends = order[:count], degree[:count], ends[:count]
    total = int(ends[count - 1]) if count else 0
    cached_starts = torch.full((num_nodes,), -1, dtype=starts_dtype, device=device)
    first = ends - degree
    cached_starts[chosen] = first.to(starts_dtype)
    cached_indices = torch.empty(total, dtype=indices.dtype, device=device)
    table = indices.view(-1, 1)
    for begin_node, end_node in edge_chunks(degree, max_chunk_edges):
        base, end = int(first[begin_node]), int(ends[end_node - 1])
        positions = list_positions(indptr_here, chosen[begin_node:end_node],
                                   degree[begin_node:end_node])
        cached_indices[base:end] = ops.gather_rows(table, positions).view(-1)
    return cached_indices, cached_starts


def _as_tensor(array: Optional[object]) -> Optional[Tensor]:
    """A list or numpy array as a tensor (sharing numpy's memory). An empty one is int64:
    ``[]`` and ``[[], []]`` convert to floats, which the ids' checks refuse, though no value
    in them is a float."""
    if array is None or isinstance(array, Tensor):
        return array
    converted = as_tensor(array)
    return converted.long() if converted.numel() == 0 and converted.is_floating_point() \
        else converted


class CSRTopo:
    """A graph in CSR form on the host, built from ``edge_index`` or given as CSR.

    ``edge_index[0]`` is the row: the neighbors sampled for node ``v`` are the ``u`` with an
    edge ``(v, u)``; pass ``edge_index.flip(0)`` to sample in-neighbors of a directed graph.
    Indices are stored as int32 whenever the node count allows (half the memory and bytes
    read when sampling).

    Args:
        edge_index: ``[2, E]`` int tensor of edges.
        indptr, indices: an existing CSR (checked once here), instead of ``edge_index``.
        eid: the id of each edge: with ``indptr``/``indices``, of each CSR edge; with
            ``edge_index``, of each of its columns (PyG's ``e_id``; default: the column).
        num_nodes: node count (default: inferred from the ids).
    """

    def __init__(self, edge_index: Optional[Tensor] = None, indptr: Optional[Tensor] = None,
                 indices: Optional[Tensor] = None, eid: Optional[Tensor] = None,
                 num_nodes: Optional[int] = None):
        # Numpy arrays too (torch-quiver takes them): as tensors, sharing their memory.
        edge_index, indptr, indices, eid = (_as_tensor(t)
                                            for t in (edge_index, indptr, indices, eid))
        for name, t in (("edge_index", edge_index), ("indptr", indptr), ("indices", indices),
                        ("eid", eid)):
            no_meta(t, name)
        if num_nodes is not None:
            # An int, numpy's too (not a bool, nor a float that would be cut).
            if isinstance(num_nodes, bool) or not hasattr(type(num_nodes), "__index__"):
                raise TypeError(f"num_nodes must be an int, got {num_nodes!r}")
            num_nodes = operator.index(num_nodes)
            if not 0 <= num_nodes < 2**63:
                raise ValueError(f"num_nodes must be in [0, 2**63), got {num_nodes}")
        if edge_index is not None:
            if indptr is not None or indices is not None:
                raise ValueError("give either edge_index or indptr/indices, not both")
            if edge_index.dim() != 2 or edge_index.size(0) != 2:
                raise ValueError(f"edge_index must have shape [2, E], got {tuple(edge_index.shape)}")
            if not holds_integers(edge_index):
                raise TypeError(f"edge_index must hold integer node ids, got {edge_index.dtype}")
            # Built where the edges are: on a GPU (csr_from_coo's CUDA kernel, a fraction of a
            # second for a billion edges) when they are there; the CSR is kept on the host.
            if not edge_index.is_cuda:
                edge_index = edge_index.cpu()
            if edge_index.dtype not in (torch.int32, torch.int64):
                # Unsigned and narrow ids as int64 (torch has no max of uint32 or uint64,
                # and converting to int32 below would wrap them onto valid nodes).
                edge_index = as_int64(edge_index, "edge_index", "node ids are int64")
            # The node count sizes the offsets (8 bytes a node): past the memory there is,
            # the process was killed filling them, with no error (a stray large id, or a
            # num_nodes given too large).
            if num_nodes is None:
                # (ids all negative: 0 nodes, so that the op names the first id, not a
                # num_nodes of -4 the caller never gave)
                num_nodes = max(int(edge_index.max()) + 1, 0) if edge_index.numel() else 0
                preflight.check_host_memory(
                    OFFSET_BYTES * (num_nodes + 1),
                    f"CSRTopo's offsets for {num_nodes:,} nodes (the "
                    f"largest id in edge_index is {num_nodes - 1:,})",
                    "check edge_index for a stray id, or give num_nodes")
            else:
                preflight.check_host_memory(
                    OFFSET_BYTES * (num_nodes + 1),
                    f"CSRTopo's offsets for num_nodes={num_nodes:,}",
                    "check num_nodes")
            dtype = torch.int32 if num_nodes <= INT32_MAX else torch.int64
            # Ids outside [0, num_nodes), negative ones too, are the op's IndexError; ids
            # that int32 cannot hold are refused here, before the conversion wraps them
            # onto valid ones.
            if dtype == torch.int32 and edge_index.dtype == torch.int64 and edge_index.numel():
                low, high = int(edge_index.min()), int(edge_index.max())
                if low < -INT32_MAX - 1 or high > INT32_MAX:
                    bad = low if low < -INT32_MAX - 1 else high
                    raise IndexError(f"edge_index holds node {bad}, out of range "
                                     f"[0, {num_nodes})")
            if eid is not None:
                eid = as_tensor(eid)
                if (eid.dim() != 1 or eid.numel() != edge_index.size(1)
                        or not holds_integers(eid)):
                    raise ValueError(f"eid must hold one integer id per column of edge_index "
                                     f"({edge_index.size(1)}), got {eid.dtype} of shape "
                                     f"{tuple(eid.shape)}")
                wide = as_int64(eid, "eid", "edge ids are int64")  # as int64 below
                if wide.numel() and int(wide.min()) < 0:  # as check_csr says it for a CSR's
                    raise IndexError(f"eid holds {int(wide.min())}: edge ids index edge arrays "
                                     f"and are never negative")
            row = edge_index[0].to(dtype).contiguous()
            col = edge_index[1].to(dtype).contiguous()
            try:
                indptr, indices, positions = (t.cpu()
                                              for t in ops.csr_from_coo(row, col, num_nodes))
            except IndexError as error:  # the op names row/col: the caller gave edge_index
                raise IndexError(re.sub(r"^(row|col)\[(\d+)\]",
                                        lambda m: f"edge_index[{ {'row': 0, 'col': 1}[m[1]]}, {m[2]}]",
                                        str(error))) from None
            # csr_from_coo numbers a CSR edge by its column; the caller's ids name them.
            eid = positions if eid is None else eid.cpu().long()[positions.long()]
        else:
            if indptr is None or indices is None:
                raise ValueError("CSRTopo needs edge_index, or both indptr and indices")
            indptr, indices = indptr.cpu().contiguous(), indices.cpu().contiguous()
            eid = None if eid is None else eid.cpu().contiguous()
            # Narrower integer offsets and edge ids (scipy's CSR has int32 ones) as int64, as
            # edge_index's path takes them; the op names any other dtype.
            if holds_integers(indptr) and indptr.dtype != torch.int64:
                indptr = as_int64(indptr, "indptr", "offsets are int64", ValueError)
            if eid is not None and holds_integers(eid) and eid.dtype != torch.int64:
                eid = as_int64(eid, "eid", "edge ids are int64")
            try:
                ops.check_csr(indptr, indices, eid)  # once: each op checks only rows it reads
            except (TypeError, ValueError, IndexError) as error:  # the op's name for this argument
                raise type(error)(re.sub(r"\bedge_ids\b", "eid", str(error))) from None
            if num_nodes is not None and num_nodes != indptr.numel() - 1:
                raise ValueError(f"num_nodes = {num_nodes} but indptr describes "
                                 f"{indptr.numel() - 1} nodes")
            if indices.dtype == torch.int64 and indptr.numel() - 1 <= INT32_MAX:
                indices = indices.to(torch.int32)
        self.indptr: Tensor = indptr
        self.indices: Tensor = indices
        self.eid: Optional[Tensor] = eid
        self._feature_order: Optional[Tensor] = None

    @property
    def node_count(self) -> int:
        return self.indptr.numel() - 1

    @property
    def edge_count(self) -> int:
        return self.indices.numel()

    @property
    def degree(self) -> Tensor:
        return self.indptr[1:] - self.indptr[:-1]

    @property
    def feature_order(self) -> Tensor:
        """Node ids from highest to lowest degree: the order a degree-based cache uses."""
        if self._feature_order is None:
            if torch.cuda.is_available():
                # Sorted on the GPU: milliseconds, and the host holds only the result (on
                # the CPU, the sort's buffers took 3.5 GB above the order at 111M nodes).
                indptr = self.indptr.cuda()
                self._feature_order = degree_order(indptr[1:] - indptr[:-1]).cpu()
            else:
                self._feature_order = degree_order(self.degree)
        return self._feature_order

    def share_memory_(self) -> "CSRTopo":
        """Moves the arrays to shared memory, so worker processes map them instead of copying."""
        for name in ("indptr", "indices", "eid"):
            t = getattr(self, name)
            if t is not None:
                t.share_memory_()
        return self

    # ---- one copy per machine for independent processes (torchrun) ----

    def save(self, directory: Union[str, Path]) -> Path:
        """Writes the CSR arrays as raw files (put them on /dev/shm to share RAM), for
        :meth:`load_shared`."""
        return _sharing.save_arrays(directory, "csr", {"indptr": self.indptr,
                                                       "indices": self.indices, "eid": self.eid})

    @classmethod
    def load_shared(cls, directory: Union[str, Path], verify: bool = False) -> "CSRTopo":
        """Maps arrays written by :meth:`save` with MAP_SHARED: every process that loads the
        same directory (e.g. each torchrun worker) reads the same pages, so a machine holds
        one copy, which UVA mode then pins in place in each process. A truncated file
        raises; the CSR is validated as :class:`CSRTopo` validates any given CSR; ``verify``
        also checks each file's CRC-32."""
        arrays, _ = _sharing.map_arrays(directory, "csr", verify=verify,
                                         names=("indptr", "indices", "eid"),
                                         required=("indptr", "indices"))
        try:
            return cls(indptr=arrays["indptr"], indices=arrays["indices"], eid=arrays.get("eid"))
        except (ValueError, TypeError, IndexError) as error:
            # The check names the op's arguments; the reader needs the save that holds them.
            raise type(error)(f"{Path(directory) / 'csr.json'} and its .bin files hold no "
                              f"valid CSR: {error}") from None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _sharing.send_saves_as_files(cls)

    def __repr__(self) -> str:
        return (f"CSRTopo(nodes={self.node_count}, edges={self.edge_count}, "
                f"indices={self.indices.dtype})")


_sharing.send_saves_as_files(CSRTopo)
