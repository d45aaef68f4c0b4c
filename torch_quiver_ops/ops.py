"""Typed Python entry points of the quiver ops (``torch.ops.quiver.*``).

Each function is a thin call into the op, which validates its arguments itself, so the
same checks hold from Python, TorchScript and C++.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import torch
from torch import Tensor


def csr_from_coo(row: Tensor, col: Tensor, num_nodes: Optional[int] = None
                 ) -> Tuple[Tensor, Tensor, Tensor]:
    """Builds a CSR topology from COO edges ``row[k] -> col[k]``.

    Args:
        row, col: 1-D int32 or int64 tensors of equal length, ids in ``[0, num_nodes)``.
        num_nodes: node count; ``max(row, col) + 1`` when omitted.

    Returns:
        ``(indptr, indices, edge_ids)``: int64 ``indptr`` of ``num_nodes + 1`` offsets,
        ``indices`` (``col``'s dtype) with the neighbors of node ``v`` at
        ``indices[indptr[v]:indptr[v+1]]`` in input order, and int64 ``edge_ids`` giving
        each CSR edge's position in the input.
    """
    if num_nodes is None:
        num_nodes = int(torch.maximum(row.max(), col.max()).item()) + 1 if row.numel() else 0
    return torch.ops.quiver.csr_from_coo(row, col, num_nodes)


def sample_neighbors(indptr: Tensor, indices: Tensor, seeds: Tensor, fanout: int,
                     replace: bool = False, edge_ids: Optional[Tensor] = None,
                     generator: Optional[torch.Generator] = None
                     ) -> Tuple[Tensor, Tensor, Tensor]:
    """Samples up to ``fanout`` neighbors of every seed (``-1``: all neighbors).

    Without replacement (the default) each seed gets ``min(fanout, degree)`` distinct
    neighbors, every subset equally likely; with replacement, ``fanout`` independent
    uniform picks (none for a node without neighbors).

    Returns:
        ``(counts, neighbors, sampled_edge_ids)``: int64 per-seed counts, the neighbors of
        all seeds back to back, and their edge ids (``edge_ids[pos]`` if ``edge_ids`` is
        given, else the CSR position ``pos``). Outputs live on ``seeds``' device.

    Random numbers come from ``generator`` (a ``torch.Generator`` on ``seeds``' device),
    else from that device's default generator.
    """
    return torch.ops.quiver.sample_neighbors(indptr, indices, seeds, fanout, replace, edge_ids,
                                             generator)


def sample_subgraph(indptr: Tensor, indices: Tensor, seeds: Tensor, fanouts: List[int],
                    replace: bool = False, edge_ids: Optional[Tensor] = None,
                    generator: Optional[torch.Generator] = None,
                    cached_indices: Optional[Tensor] = None,
                    cached_starts: Optional[Tensor] = None
                    ) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Multi-hop neighbor sampling fused with reindexing, in PyG's layout.

    Hop ``h`` samples ``fanouts[h]`` neighbors of the nodes that hop ``h - 1`` added (the
    seeds for the first hop).

    Returns:
        ``(node_ids, rows, cols, sampled_edge_ids, nodes_per_hop, edges_per_hop)``:
        global ids of all sampled nodes with ``node_ids[:len(seeds)] == seeds``, then each
        hop's new nodes in order of first appearance; per edge the local index of the
        sampled neighbor (``rows``, message source) and of the node it was sampled for
        (``cols``, target), grouped by hop; edge ids as in :func:`sample_neighbors`; and
        int64 CPU tensors of new nodes per hop (seeds first) and edges per hop. Random
        numbers come from ``generator`` as in :func:`sample_neighbors`.

    ``cached_indices`` and ``cached_starts`` (int32 or int64; both on the seeds' GPU) are a
    topology cache:
    node ``v``'s neighbor list copied to ``cached_indices[cached_starts[v]:][:degree(v)]``, or
    ``cached_starts[v] == -1``. The kernels read cached lists from GPU memory instead of
    ``indices`` (pinned host memory in UVA mode); the output is the same.
    :func:`torch_quiver_ops.topology.build_topology_cache` makes one.
    """
    return torch.ops.quiver.sample_subgraph(indptr, indices, seeds, fanouts, replace, edge_ids,
                                            generator, cached_indices, cached_starts)


def gather_rows(table: Tensor, ids: Tensor) -> Tensor:
    """``table[ids]`` for a contiguous table of any dtype; out-of-range ids raise."""
    return torch.ops.quiver.gather_rows(table, ids)


def gather_tiered_rows(tiers: List[Tensor], positions: Optional[Tensor], ids: Tensor,
                       group_host_reads: bool = True, stage_host_rows: bool = False,
                       host_read_blocks: int = 0) -> Tensor:
    """Rows ``ids`` of a table split over tiers.

    Tier ``k`` holds the rows at positions ``[begin_k, begin_k + len(tiers[k]))`` with
    ``begin_0 = 0``; row ``id`` sits at position ``positions[id]`` (at ``id`` when
    ``positions`` is None). On CUDA the tiers may be on the ids' GPU, on a peer GPU it can
    read (NVLink), or in pinned host memory, and one kernel reads them all. With
    ``group_host_reads`` (the default) a large batch that reads pinned host memory is read
    in position order, page after page of the host table, which the GPU reaches faster;
    the result is the same. With ``stage_host_rows`` such a batch's rows in the trailing
    host tiers are split: the GPU reads a share with zero copy while CPU threads gather
    the rest into pinned staging and the copy engine moves it, the share rebalanced after
    every call. That is 2-3x faster on host tables of tens of GB, whose random pages the GPU
    reaches slowly; the result is the same. ``host_read_blocks > 0`` runs a CUDA gather
    that reads pinned host memory on at most that many thread blocks: while its reads wait
    on PCIe, the other SMs stay free for other work on the GPU (a model training beside a
    prefetching loader; see :class:`Prefetcher`); the result is the same. Out-of-range ids
    raise IndexError. Returns ``[len(ids), *row_shape]`` rows on the ids' device.
    """
    return torch.ops.quiver.gather_tiered_rows(tiers, positions, ids, group_host_reads,
                                               stage_host_rows, host_read_blocks)
