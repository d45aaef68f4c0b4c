"""Node orders for locality, and a graph renumbered by one.

A batch's rows are read from wherever their ids put them: in the host tier, zero-copy reads
are bound by how many pages a batch touches (docs/benchmarks.md, "Why the host reads slow
with size"), not by PCIe. Numbering nodes so that neighbors get near ids puts a batch's
rows on fewer pages. :func:`bfs_order` gives such an order, :func:`permute_topology`
renumbers a :class:`~torch_quiver_ops.CSRTopo` by it; features, labels and split ids follow
with the permutations it returns::

    old_of_new = qv.reorder.bfs_order(topo)
    topo, new_of_old = qv.reorder.permute_topology(topo, old_of_new)
    x, y = x[old_of_new], y[old_of_new]
    train_idx = new_of_old[train_idx]

Edge ids are kept (each edge keeps its id, now at its new position), so edge features
indexed by edge id need no change. Both functions work in chunks of at most
``chunk_edges`` edges, so their temporaries stay bounded at papers100M's size.
"""
from __future__ import annotations

from typing import Tuple

import torch
from torch import Tensor

from . import ops
from ._device import as_int, no_meta
from .hotness import degree_order
from .topology import CSRTopo, edge_chunks, list_positions

__all__ = ["bfs_order", "degree_order_of", "order_by", "permute_topology"]

DEFAULT_CHUNK_EDGES = 1 << 26  # 64M edges: about 1.5 GB of temporaries a chunk


ORDER_NAMES = ("degree", "bfs")  # what order_by takes


def _check_topology(topo) -> None:
    if not isinstance(topo, CSRTopo):  # (None was an AttributeError on node_count)
        raise TypeError(f"topo must be a CSRTopo, got {type(topo).__name__}")


def _count(value, name: str) -> int:
    """``value`` (Python's or NumPy's int) as an int >= 1, else a ValueError naming it."""
    count = as_int(value)
    if count is None or count < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return count


def order_by(topo: CSRTopo, name: str) -> Tensor:
    """``old_of_new`` by the order named ``name``: ``"bfs"`` (:func:`bfs_order`) or
    ``"degree"`` (:func:`degree_order_of`)."""
    _check_topology(topo)
    if name == "bfs":
        return bfs_order(topo)
    if name == "degree":
        return degree_order_of(topo)
    raise ValueError(f"name must be 'bfs' or 'degree', got {name!r}")


def degree_order_of(topo: CSRTopo) -> Tensor:
    """``old_of_new``: node ids from highest to lowest degree (ties by id)."""
    _check_topology(topo)
    return degree_order(topo.degree)


def bfs_order(topo: CSRTopo, max_roots: int = 1024,
              chunk_edges: int = DEFAULT_CHUNK_EDGES) -> Tensor:
    """``old_of_new``: nodes in breadth-first order, so that a node's neighbors sit near it.

    The search starts at the node of highest degree and numbers each level's new nodes in
    order of first appearance (a frontier node's list in CSR order, frontier nodes in turn),
    as a queue would. When it runs out, it starts again from the unvisited node of highest
    degree, up to ``max_roots`` starts; the nodes still unvisited then (small components,
    isolated nodes) follow in degree order. Edges are followed as the CSR holds them (a
    directed graph's out-lists).
    """
    _check_topology(topo)
    max_roots = _count(max_roots, "max_roots")  # (numpy ints too, as hotness.py takes them)
    chunk_edges = _count(chunk_edges, "chunk_edges")
    n = topo.node_count
    indptr, indices, degree = topo.indptr.long(), topo.indices, topo.degree.long()
    by_degree = degree_order(degree)
    visited = torch.zeros(n, dtype=torch.bool)
    # claim[v]: the first position v takes among a chunk's new neighbors (reset after use).
    claim = torch.full((n,), -1, dtype=torch.long)
    parts, placed, roots, next_root = [], 0, 0, 0
    while placed < n:
        if roots == max_roots:
            parts.append(by_degree[~visited[by_degree]])
            break
        # The unvisited node of highest degree, searched from where the last one was found
        # in windows that double while they find none (the scans of all starts together
        # read the order about twice). A window of 2^20 for every start had cost each start
        # that much: 2.7 s for 400,000 nodes in 200,000 components (a probe).
        width = 1 << 8
        while True:
            window = by_degree[next_root:next_root + width]
            unvisited = (~visited[window]).nonzero()
            if unvisited.numel() > 0:
                next_root += int(unvisited[0])
                break
            next_root += window.numel()
            width = min(2 * width, 1 << 20)
        root = by_degree[next_root:next_root + 1]
        visited[root] = True
        roots += 1
        frontier = root
        while frontier.numel() > 0:
            parts.append(frontier)
            placed += frontier.numel()
            found = []
            for begin, end in edge_chunks(degree[frontier], chunk_edges):
                rows = frontier[begin:end]
                neighbors = indices[list_positions(indptr, rows, degree[rows])].long()
                neighbors = neighbors[~visited[neighbors]]
                if neighbors.numel() == 0:
                    continue
                at = torch.arange(neighbors.numel())
                claim.scatter_reduce_(0, neighbors, at, reduce="amin", include_self=False)
                new = neighbors[claim[neighbors] == at]  # first appearances, in order
                claim[neighbors] = -1
                visited[new] = True
                found.append(new)
            frontier = torch.cat(found) if found else by_degree[:0]
    return torch.cat(parts) if parts else torch.empty(0, dtype=torch.long)


def _inverse(old_of_new: Tensor, n: int) -> Tensor:
    """new_of_old, after checking that old_of_new lists each of the n nodes once."""
    if not isinstance(old_of_new, Tensor):
        raise TypeError(f"old_of_new must be a tensor, got {type(old_of_new).__name__}")
    old_of_new = no_meta(old_of_new, "old_of_new", "node ids").cpu()
    ops.check_permutation(old_of_new, n, "old_of_new")
    new_of_old = torch.empty(n, dtype=torch.long)
    new_of_old[old_of_new.long()] = torch.arange(n)
    return new_of_old


def permute_topology(topo: CSRTopo, old_of_new: Tensor,
                     chunk_edges: int = DEFAULT_CHUNK_EDGES) -> Tuple[CSRTopo, Tensor]:
    """``topo`` renumbered: new node ``r`` is old node ``old_of_new[r]``, with its list in the
    same order, each neighbor renumbered, and each edge keeping its id (``topo.eid``, or its
    CSR position when the graph has none). Returns the new :class:`CSRTopo` and
    ``new_of_old``, to renumber seeds and split ids."""
    _check_topology(topo)
    chunk_edges = _count(chunk_edges, "chunk_edges")
    n = topo.node_count
    new_of_old = _inverse(old_of_new, n)
    old_of_new = old_of_new.cpu().long()
    indptr, indices = topo.indptr.long(), topo.indices
    new_degree = topo.degree.long()[old_of_new]
    new_indptr = torch.zeros(n + 1, dtype=torch.long)
    torch.cumsum(new_degree, 0, out=new_indptr[1:])
    new_indices = torch.empty_like(indices)
    new_eid = torch.empty(indices.numel(), dtype=torch.long)
    for begin, end in edge_chunks(new_degree, chunk_edges):
        positions = list_positions(indptr, old_of_new[begin:end], new_degree[begin:end])
        first, last = int(new_indptr[begin]), int(new_indptr[end])
        new_indices[first:last] = new_of_old[indices[positions].long()].to(indices.dtype)
        new_eid[first:last] = topo.eid[positions] if topo.eid is not None else positions
    return CSRTopo(indptr=new_indptr, indices=new_indices, eid=new_eid), new_of_old
