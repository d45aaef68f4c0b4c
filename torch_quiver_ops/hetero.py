"""Heterogeneous graphs: typed nodes and edges as one CSR over global node ids
(:class:`HeteroCSRTopo`, the layout of ``quiver::hetero_neighbor_sample``) and a multi-hop
sampler over it (:class:`HeteroSampler`) that returns pyg-lib's dicts.

Node type ``t``'s node ``i`` has the global id ``node_type_offsets[t] + i``; relation
``r``'s ``k``-th edge (in its ``edge_index`` order) the global edge id
``relation_edge_offsets[r] + k``. Each node's row lists the sources of its incoming edges of
every relation, grouped by relation, so that one pass of the kernels per hop samples every
relation, each with its own fanout."""
from __future__ import annotations

import itertools
import operator
from collections.abc import Mapping
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from . import ops, preflight
from ._device import (as_ids, as_int64, as_tensor, check_flag, check_generator, holds_integers,
                      no_meta, readable_ids)
from .ops import csr_from_coo, integer_fanouts, integer_times
from .sampler import (negative_options, ops_temporal_strategy, sampling_placement,
                      strict_time_flag)
from .topology import _as_tensor, kept_indptr
from .uva import pinned

EdgeType = Tuple[str, str, str]
INT32_MAX = 2**31 - 1


def _edge_type(key) -> EdgeType:
    if not (isinstance(key, tuple) and len(key) == 3 and all(isinstance(k, str) for k in key)):
        raise TypeError(f"edge types are (source type, relation, destination type) tuples of "
                        f"str, got {key!r}")
    return key


def _node_counts(num_nodes_dict) -> Dict[str, int]:
    """Each node type's count as an int >= 0: a float (10.5) is refused rather than
    truncated, a negative count named here rather than as offsets that decrease."""
    if not isinstance(num_nodes_dict, Mapping):  # (a list had failed on a missing items())
        raise TypeError(f"num_nodes_dict must be a dict of node types to counts, got "
                        f"{type(num_nodes_dict).__name__}")
    counts = {}
    for t, n in num_nodes_dict.items():
        try:
            if isinstance(n, bool):
                raise TypeError
            count = operator.index(n)  # ints, numpy ints, 0-d integer tensors
        except TypeError:
            raise TypeError(f"num_nodes_dict[{t!r}] must be an int node count, got {n!r}") \
                from None
        if count < 0:
            raise ValueError(f"num_nodes_dict[{t!r}] = {count} is negative")
        counts[t] = count
    return counts


class HeteroCSRTopo:
    """A heterogeneous graph as one CSR: node ``v``'s row holds the sources of its incoming
    edges of every relation, grouped by relation (messages flow from sampled neighbors to
    the nodes they were sampled for, as in PyG).

    Args:
        edge_index_dict: ``{(src_type, relation, dst_type): edge_index [2, E]}``, row 0 the
            source (local to ``src_type``), row 1 the destination, as ``HeteroData``.
        num_nodes_dict: ``{node_type: count}``; types without edges are allowed. Its order
            is the order of the node types (default: the types in order of first mention).
        edge_time_dict: ``{edge_type: time per edge}`` (int64), or ``node_time_dict``:
            ``{node_type: time per node}`` (a neighbor's time): rows are then sorted by time
            within each relation, for temporal sampling.

    Built where the edges are (on a GPU when they are there); the result is kept on the
    host. Indices are int32 whenever the total node count allows.
    """

    def __init__(self, edge_index_dict: Dict[EdgeType, Tensor],
                 num_nodes_dict: Optional[Dict[str, int]] = None,
                 edge_time_dict: Optional[Dict[EdgeType, Tensor]] = None,
                 node_time_dict: Optional[Dict[str, Tensor]] = None):
        if not isinstance(edge_index_dict, Mapping):
            raise TypeError(f"edge_index_dict must be a dict of edge types to edge indices, "
                            f"got {type(edge_index_dict).__name__}")
        if not edge_index_dict:
            raise ValueError("edge_index_dict holds no edge types")
        if edge_time_dict is not None and node_time_dict is not None:
            raise ValueError("give edge_time_dict or node_time_dict, not both")
        edge_types = [_edge_type(k) for k in edge_index_dict]
        if num_nodes_dict is None:
            num_nodes_dict = {}
            for (src, _, dst), ei in edge_index_dict.items():
                ei = no_meta(_as_tensor(ei), f"edge_index_dict[{(src, _, dst)}]")
                if holds_integers(ei):  # torch has no max of uint32 or uint64
                    ei = ei.long()
                for t, ids in ((src, ei[0]), (dst, ei[1])):
                    count = int(ids.max()) + 1 if ids.numel() else 0
                    num_nodes_dict[t] = max(num_nodes_dict.get(t, 0), count)
        self.node_types: List[str] = list(num_nodes_dict)
        self.edge_types: List[EdgeType] = edge_types
        self.num_nodes_dict: Dict[str, int] = _node_counts(num_nodes_dict)
        type_index = {t: i for i, t in enumerate(self.node_types)}
        offsets = [0]
        for t in self.node_types:
            offsets.append(offsets[-1] + self.num_nodes_dict[t])
        self.node_type_offsets: List[int] = offsets
        num_nodes = offsets[-1]
        # The offsets and the degrees, 8 bytes a node each: past the memory there is, the
        # process was killed filling them (or torch's size overflowed), naming no count.
        preflight.check_host_memory(2 * 8 * (num_nodes + 1),
                                    f"HeteroCSRTopo's offsets for {num_nodes:,} nodes "
                                    f"(num_nodes_dict {self.num_nodes_dict})",
                                    "check num_nodes_dict, or the edges for a stray id")

        sources, targets, relation_offsets = [], [], [0]
        self.relation_src_types: List[int] = []
        self.relation_dst_types: List[int] = []
        for et in edge_types:
            src, _, dst = et
            for t in (src, dst):
                if t not in type_index:
                    raise ValueError(f"edge type {et} names node type {t!r}, which "
                                     f"num_nodes_dict lacks (it has {self.node_types})")
            ei = no_meta(_as_tensor(edge_index_dict[et]), f"edge_index_dict[{et}]")
            # ([[], []] too, as int64, not floats)
            if ei.dim() != 2 or ei.size(0) != 2:
                raise ValueError(f"edge_index_dict[{et}] must have shape [2, E], got "
                                 f"{tuple(ei.shape)}")
            if not holds_integers(ei):
                raise TypeError(f"edge_index_dict[{et}] must hold integer node ids, got "
                                f"{ei.dtype}")
            ei = as_int64(ei, f"edge_index_dict[{et}]", "node ids are int64")
            for row, t in ((0, src), (1, dst)):
                if ei.size(1) and (int(ei[row].min()) < 0
                                   or int(ei[row].max()) >= self.num_nodes_dict[t]):
                    bad = int(ei[row].min()) if int(ei[row].min()) < 0 else int(ei[row].max())
                    raise IndexError(f"edge_index_dict[{et}][{row}] holds node {bad}, outside "
                                     f"{t!r}'s {self.num_nodes_dict[t]} nodes")  # as CSRTopo
            sources.append(ei[0] + offsets[type_index[src]])
            targets.append(ei[1] + offsets[type_index[dst]])
            relation_offsets.append(relation_offsets[-1] + ei.size(1))
            self.relation_src_types.append(type_index[src])
            self.relation_dst_types.append(type_index[dst])
        self.relation_edge_offsets: List[int] = relation_offsets
        device = sources[0].device
        source = torch.cat([s.to(device) for s in sources])
        target = torch.cat([t.to(device) for t in targets])
        del sources, targets  # (held through the build, they had doubled the edge lists)
        num_edges = source.numel()

        # Positions sorted by (target, relation[, time]). The global edge ids are the
        # concatenation order, so relations come grouped, and without times the last key's
        # stable counting sort (csr_from_coo) is the whole order: torch.sort of the targets
        # had held keys, indices and scratch at once, 6.3x the output at its peak (a probe).
        edge_time = self._edge_times(edge_time_dict, node_time_dict, source, device)
        if edge_time is None:
            indptr, indices, eid = csr_from_coo(target, source, num_nodes)
        else:  # by time within each relation (each a contiguous run of edge ids), stably
            offsets = self.relation_edge_offsets
            order = torch.empty(num_edges, dtype=torch.long, device=device)
            for low, high in zip(offsets, offsets[1:]):
                order[low:high] = torch.sort(edge_time[low:high], stable=True).indices + low
            indptr, indices, by_target = csr_from_coo(target[order], source[order], num_nodes)
            eid = order[by_target]
            del order, by_target
        del source, target
        dtype = torch.int32 if num_nodes <= INT32_MAX else torch.int64
        self.indptr: Tensor = indptr.cpu()
        self.indices: Tensor = indices.to(dtype).cpu().contiguous()
        self.eid: Tensor = eid.cpu().contiguous()  # global edge id of each CSR position
        self.edge_time: Optional[Tensor] = (None if edge_time is None
                                            else edge_time[eid].cpu().contiguous())

    @classmethod
    def from_csr(cls, num_nodes_dict: Dict[str, int], edge_types: Sequence[EdgeType],
                 indptr: Tensor, indices: Tensor, eid: Tensor,
                 relation_edge_offsets: Sequence[int],
                 slice_starts: Optional[Tensor] = None) -> "HeteroCSRTopo":
        """A graph already in this layout (e.g. built a slice at a time by
        :func:`torch_quiver_ops.synthetic_hetero.mag240m_like`, too large for an edge list):
        ``indptr`` over the global node ids (types in ``num_nodes_dict``'s order), each
        row's sources grouped by relation in ``edge_types``' order, ``eid`` the global edge
        id of each position, relation ``r`` owning ids ``[relation_edge_offsets[r],
        relation_edge_offsets[r + 1])``; ``slice_starts`` as the property (computed from
        ``eid`` when not given). Sizes are checked here; the sampler checks each row it
        reads, and trusts each row's relations to come in ``edge_types``' order
        (:func:`torch_quiver_ops.ops.check_row_tables` checks that once, in O(edges))."""
        self = cls.__new__(cls)
        self.node_types = list(num_nodes_dict)
        self.num_nodes_dict = _node_counts(num_nodes_dict)
        self.edge_types = [_edge_type(et) for et in edge_types]
        self.node_type_offsets = [0]
        for t in self.node_types:
            self.node_type_offsets.append(self.node_type_offsets[-1] + self.num_nodes_dict[t])
        for et in self.edge_types:
            missing = [t for t in (et[0], et[2]) if t not in self.num_nodes_dict]
            if missing:
                raise ValueError(f"edge type {et} names node types {missing} that "
                                 f"num_nodes_dict lacks (it has {self.node_types})")
        type_position = {t: i for i, t in enumerate(self.node_types)}  # (not list.index: T x R)
        self.relation_src_types = [type_position[et[0]] for et in self.edge_types]
        self.relation_dst_types = [type_position[et[2]] for et in self.edge_types]
        # ints only: int(2.7) would cut a relation's last edge off without a word
        if any(isinstance(o, bool) or not hasattr(o, "__index__") for o in relation_edge_offsets):
            raise TypeError(f"relation_edge_offsets must hold ints, got "
                            f"{list(relation_edge_offsets)!r}")
        self.relation_edge_offsets = [o.__index__() for o in relation_edge_offsets]
        if len(self.relation_edge_offsets) != len(self.edge_types) + 1:
            raise ValueError(f"relation_edge_offsets needs {len(self.edge_types) + 1} entries "
                             f"(one more than the edge types), got "
                             f"{len(self.relation_edge_offsets)}")
        offsets = self.relation_edge_offsets
        if offsets[0] != 0 or any(b < a for a, b in zip(offsets, offsets[1:])):
            # (a decreasing one failed in the sampler's bincount, naming nothing; a probe)
            raise ValueError(f"relation_edge_offsets must run from 0 and never decrease, got "
                             f"{offsets}")
        num_nodes, num_edges = self.node_type_offsets[-1], self.relation_edge_offsets[-1]
        if indptr.dtype != torch.long:  # the ops' type for a dtype
            raise TypeError(f"indptr must be int64, got {indptr.dtype}")
        if indptr.dim() != 1 or indptr.numel() != num_nodes + 1:
            raise ValueError(f"indptr must hold {num_nodes + 1} entries, got shape "
                             f"{tuple(indptr.shape)}")
        if int(indptr[0]) != 0 or int(indptr[-1]) != num_edges:
            raise ValueError(f"indptr must run from 0 to {num_edges} (the relations' edges), "
                             f"got {int(indptr[0])} to {int(indptr[-1])}")
        for name, t in (("indices", indices), ("eid", eid)):
            if t.dim() != 1 or t.numel() != num_edges:
                raise ValueError(f"{name} must hold {num_edges} entries, got shape "
                                 f"{tuple(t.shape)}")
        if eid.dtype != torch.long:  # as indptr (aminmax has no unsigned kernels)
            raise TypeError(f"eid must be int64, got {eid.dtype}")
        if num_edges:  # (one out of range failed in a sampler's index_select, naming none)
            low, high = (int(v) for v in torch.aminmax(eid))
            if low < 0 or high >= num_edges:
                raise IndexError(f"eid holds edge id {low if low < 0 else high}, out of range "
                                 f"[0, {num_edges}) (the relations' edges)")
        self.indptr, self.indices, self.eid = indptr, indices, eid
        self.edge_time = None
        self._slice_starts = slice_starts
        return self

    def keeping(self, keep: Tensor) -> Tuple["HeteroCSRTopo", Dict[EdgeType, Tensor]]:
        """The graph of the edges whose global id ``keep`` (a bool per edge) marks, with
        their global ids renumbered in order, and each edge type's kept ids (local to the
        type, ascending): the new graph's local id ``i`` of a type is ``kept[type][i]``
        here."""
        old_of_new = keep.nonzero().view(-1)
        new_of_old = torch.cumsum(keep, 0) - 1
        kept_positions = keep[self.eid]
        o = self.relation_edge_offsets
        counts = [int(keep[o[r]:o[r + 1]].sum()) for r in range(len(self.edge_types))]
        kept = {et: old_of_new[sum(counts[:r]):sum(counts[:r + 1])] - o[r]
                for r, et in enumerate(self.edge_types)}
        topo = HeteroCSRTopo.from_csr(
            self.num_nodes_dict, self.edge_types, kept_indptr(self.indptr, kept_positions),
            self.indices[kept_positions].contiguous(),
            new_of_old[self.eid[kept_positions]].contiguous(),
            list(itertools.accumulate([0, *counts])))
        if self.edge_time is not None:
            topo.edge_time = self.edge_time[kept_positions].contiguous()
        return topo, kept

    def _edge_times(self, edge_time_dict, node_time_dict, source: Tensor,
                    device) -> Optional[Tensor]:
        # Integer times only: truncating floats would let a later edge pass (see
        # ops.integer_times).
        if edge_time_dict is not None:
            return self.per_edge(edge_time_dict, "edge_time_dict", integer_times).to(device)
        if node_time_dict is not None:
            return self.per_node(node_time_dict, "node_time_dict", integer_times).to(device)[source]
        return None

    # ---- sizes and ids ----

    @property
    def num_nodes(self) -> int:
        return self.node_type_offsets[-1]

    @property
    def num_edges(self) -> int:
        return self.relation_edge_offsets[-1]

    @property
    def num_edges_dict(self) -> Dict[EdgeType, int]:
        o = self.relation_edge_offsets
        return {et: o[r + 1] - o[r] for r, et in enumerate(self.edge_types)}

    def type_offset(self, node_type: str) -> int:
        if node_type not in self.num_nodes_dict:
            raise KeyError(f"no node type {node_type!r}; the graph has {self.node_types}")
        return self.node_type_offsets[self.node_types.index(node_type)]

    def per_edge(self, values: Dict[EdgeType, Tensor], name: str,
                 convert: Callable = None) -> Tensor:
        """One value per global edge id from ``{edge_type: value per edge}`` (every edge
        type present, no other), each type's values passed through ``convert(values,
        label)`` first when given: checked one type at a time, as given (joined first,
        an int and a bool type had been promoted together and read as times)."""
        unknown = [et for et in values if et not in self.num_edges_dict]
        if unknown:
            raise ValueError(f"{name} names edge types {unknown} that the graph lacks (it has "
                             f"{list(self.num_edges_dict)})")
        parts = []
        for et, count in self.num_edges_dict.items():
            if et not in values:
                raise ValueError(f"{name} lacks edge type {et}")
            v = _part(values[et], f"{name}[{et}]", convert)
            if v.dim() != 1 or v.size(0) != count:
                raise ValueError(f"{name}[{et}] must hold one value per edge ({count}), got "
                                 f"shape {tuple(v.shape)}")
            parts.append(v.cpu())
        return torch.cat(parts)

    def per_node(self, values: Dict[str, Tensor], name: str,
                 convert: Callable = None) -> Tensor:
        """One value per global node id from ``{node_type: 1-D value per node}`` (every type
        present, no other), each type's through ``convert`` as :meth:`per_edge` does."""
        unknown = [t for t in values if t not in self.num_nodes_dict]
        if unknown:
            raise ValueError(f"{name} names node types {unknown} that the graph lacks (it has "
                             f"{self.node_types})")
        parts = []
        for t in self.node_types:
            if t not in values:
                raise ValueError(f"{name} lacks node type {t!r}")
            v = _part(values[t], f"{name}[{t!r}]", convert)
            if v.dim() != 1 or v.size(0) != self.num_nodes_dict[t]:
                raise ValueError(f"{name}[{t!r}] must hold one value per node "
                                 f"({self.num_nodes_dict[t]}), got shape {tuple(v.shape)}")
            parts.append(v.cpu())
        return torch.cat(parts)

    def _relation_of(self, edge_ids: Tensor) -> Tensor:
        """The relation of each global edge id."""
        offsets = torch.tensor(self.relation_edge_offsets, device=edge_ids.device)
        return torch.searchsorted(offsets, edge_ids, right=True) - 1

    def slice_indptr(self) -> Tensor:
        """Where each (row, relation) slice of the CSR starts: the offsets over which weight
        prefix sums restart (``edge_weight_cumsum`` of hetero_neighbor_sample)."""
        relation = self._relation_of(self.eid)
        row = torch.repeat_interleave(torch.arange(self.num_nodes, device=self.indptr.device),
                                      self.indptr.diff())
        key = row * len(self.edge_types) + relation
        starts = torch.ones(key.numel(), dtype=torch.bool, device=key.device)
        if key.numel():
            starts[1:] = key[1:] != key[:-1]
        end = torch.tensor([key.numel()], device=key.device)
        return torch.cat([starts.nonzero().view(-1), end])

    @property
    def slice_starts(self) -> Tensor:
        """int32: for each node of a type with ``R_t > 1`` incoming relations (types in
        order), where its relation slices ``1 .. R_t - 1`` start in its row, relative to the
        row: hetero_neighbor_sample's ``relation_slice_starts``. Built once (``R_t - 1``
        entries a node, 4 bytes each)."""
        if getattr(self, "_slice_starts", None) is None:
            num_relations = len(self.edge_types)
            relation = self._relation_of(self.eid)
            parts = []
            for t in range(len(self.node_types)):
                relations = [r for r in range(num_relations) if self.relation_dst_types[r] == t]
                if len(relations) <= 1:
                    continue
                lo, hi = self.node_type_offsets[t], self.node_type_offsets[t + 1]
                begin, end = int(self.indptr[lo]), int(self.indptr[hi])
                slot = torch.full((num_relations,), -1, dtype=torch.long, device=relation.device)
                slot[relations] = torch.arange(len(relations), device=relation.device)
                row = torch.repeat_interleave(torch.arange(hi - lo, device=self.indptr.device),
                                              self.indptr[lo:hi + 1].diff())
                counts = torch.bincount(row * len(relations) + slot[relation[begin:end]],
                                        minlength=(hi - lo) * len(relations))
                starts = counts.view(hi - lo, len(relations)).cumsum(1)[:, :-1]
                if starts.numel() and int(starts.max()) > torch.iinfo(torch.int32).max:
                    raise ValueError(f"a {self.node_types[t]!r} node's relation slices start "
                                     "2^31 or more edges into its row; they are int32 "
                                     "offsets")
                parts.append(starts.reshape(-1).to(torch.int32))
            self._slice_starts = (torch.cat(parts) if parts
                                  else torch.empty(0, dtype=torch.int32, device="cpu"))
        return self._slice_starts

    def degree_dict(self) -> Dict[str, Tensor]:
        """Each node's in-degree over every relation, per type (a hotness order)."""
        degree = self.indptr.diff()
        o = self.node_type_offsets
        return {t: degree[o[i]:o[i + 1]] for i, t in enumerate(self.node_types)}

    def __repr__(self) -> str:
        return (f"HeteroCSRTopo(nodes={self.num_nodes_dict}, "
                f"edges={ {'__'.join(k): v for k, v in self.num_edges_dict.items()} })")


class HeteroSample(NamedTuple):
    """pyg-lib's ``hetero_neighbor_sample`` output: per node type the sampled ids (seeds
    first, then by hop) and, when disjoint, each one's seed index; per edge type ``row``
    (positions in the source type's ``node``), ``col`` (in the target type's) and the edge
    ids (local to the edge type); counts per hop."""
    node: Dict[str, Tensor]
    row: Dict[EdgeType, Tensor]
    col: Dict[EdgeType, Tensor]
    edge: Dict[EdgeType, Tensor]
    batch: Optional[Dict[str, Tensor]]
    num_sampled_nodes: Dict[str, List[int]]
    num_sampled_edges: Dict[EdgeType, List[int]]


def _seed_dict(seeds):
    """``{node_type: ids}`` from that dict or one ``(node_type, ids)`` pair (a tuple of
    another length raised a bare IndexError, or its third item was ignored)."""
    if isinstance(seeds, tuple):
        if len(seeds) != 2:
            raise TypeError(f"seeds must be a dict {{node_type: ids}} or a pair (node_type, "
                            f"ids), got a tuple of {len(seeds)} items")
        return {seeds[0]: seeds[1]}
    if not isinstance(seeds, Mapping):  # (a tensor failed in Tensor.__contains__)
        raise TypeError(f"seeds must be a dict {{node_type: ids}} or a pair (node_type, ids), "
                        f"got {type(seeds).__name__}")
    return seeds


def _part(values, label: str, convert: Optional[Callable]) -> Tensor:
    """One type's values of a per-type dict, as a CPU tensor (``convert`` first)."""
    no_meta(values, label)
    return (convert(values, label) if convert is not None else as_tensor(values)).cpu()


class HeteroSampler:
    """Multi-hop neighbor sampling over a :class:`HeteroCSRTopo`, every relation in the
    same kernel launches of a hop (``quiver::hetero_neighbor_sample``).

    Args:
        topo: the graph.
        num_neighbors: fanouts per hop, the same for every edge type (``[15, 10]``), or
            ``{edge_type: [...]}`` for every edge type (0 samples none), every list as long.
        device, mode: as :class:`torch_quiver_ops.GraphSageSampler`: ``"GPU"`` (topology in
            GPU memory), ``"UVA"`` (pinned host memory read by the GPU) or ``"CPU"``.
        replace: sample with replacement.
        weights: ``{edge_type: weight per edge}``: weighted sampling (successive sampling
            without replacement, see :func:`torch_quiver_ops.ops.neighbor_sample`).
        temporal_strategy, strict_time: temporal sampling when ``topo`` has times.
        disjoint: each seed grows its own tree (implied by temporal sampling).
        capture_batches: as :class:`torch_quiver_ops.GraphSageSampler`'s: batches replayed
            as CUDA graphs, kept with this sampler (False: every batch runs as launched).
    """

    def __init__(self, topo: HeteroCSRTopo,
                 num_neighbors: Union[Sequence[int], Dict[EdgeType, Sequence[int]]],
                 device: Union[None, int, str, torch.device] = None, mode: Optional[str] = None,
                 replace: bool = False, *, weights: Optional[Dict[EdgeType, Tensor]] = None,
                 temporal_strategy: str = "uniform", strict_time: bool = False,
                 disjoint: bool = False, capture_batches: bool = True):
        if not isinstance(topo, HeteroCSRTopo):  # (5 had failed on a missing edge_types)
            raise TypeError(f"HeteroSampler samples a HeteroCSRTopo (topo), got "
                            f"{type(topo).__name__}")
        self.topo = topo
        self.replace = check_flag(replace, "replace")  # ("False" had read as True)
        self.fanouts, self.num_hops = self._fanouts(num_neighbors)
        self.temporal = topo.edge_time is not None
        self.temporal_strategy = temporal_strategy
        self.strict_time = strict_time_flag(strict_time, self.temporal,
                                            "a topo with edge_time_dict or node_time_dict")
        self.disjoint = check_flag(disjoint, "disjoint") or self.temporal
        self.device, self.mode = sampling_placement(device, mode)
        mode = self.mode
        self.weighted = weights is not None
        edge_weight = None
        every_edge = topo  # negatives exclude each true edge, weight 0 or not
        self._kept_edges: Optional[Dict[EdgeType, Tensor]] = None
        if weights is not None:
            by_id = topo.per_edge(weights, "weights", ops.float32_weights)
            if not bool((by_id > 0).all()):
                # PyG's weight_attr allows zero weights (a way to mask edges): such an edge
                # is never sampled, so the sampler's graph leaves it out, and sampled edge
                # ids are mapped back to the caller's.
                topo, kept = topo.keeping(by_id > 0)
                self.topo, by_id = topo, by_id[by_id > 0]
                self._kept_edges = {et: ids.to(self.device) for et, ids in kept.items()}
            edge_weight = by_id[topo.eid].contiguous()
        self._ops_temporal_strategy = ops_temporal_strategy(
            temporal_strategy, self.temporal, weights is not None, self.replace)
        self._pins = []
        arrays = {"indptr": topo.indptr, "indices": topo.indices, "eid": topo.eid,
                  "edge_time": topo.edge_time, "edge_weight": edge_weight,
                  # Prefix sums restart at each relation's slice of a row; not in UVA mode,
                  # where a binary search is a chain of PCIe round trips.
                  "weight_sums": (ops.row_cumsum(topo.slice_indptr(), edge_weight)
                                  if edge_weight is not None and mode != "UVA" else None),
                  # Small (4 bytes an extra relation a node): in GPU memory in UVA mode too.
                  "slice_starts": topo.slice_starts}
        self._arrays = {name: self._place(name, t) for name, t in arrays.items()}
        self._negatives_csr = ((self._arrays["indptr"], self._arrays["indices"])
                               if every_edge is topo else
                               (self._place("indptr", every_edge.indptr),
                                self._place("indices", every_edge.indices)))
        self.capture_batches = check_flag(capture_batches, "capture_batches")
        self._make_sampler()

    def _make_sampler(self) -> None:
        """The runtime's sampler over the placed arrays: what stays the same from batch to
        batch, and (on a GPU) its own batches captured as CUDA graphs and replayed."""
        a, topo = self._arrays, self.topo
        self._sampler = torch.classes.quiver.HeteroSubgraphSampler(
            a["indptr"], a["indices"], a["eid"], topo.node_type_offsets, topo.relation_src_types,
            topo.relation_dst_types, topo.relation_edge_offsets, self.fanouts, self.replace,
            a["edge_weight"], a["edge_time"], self.strict_time, self._ops_temporal_strategy,
            self.disjoint, a["weight_sums"], a["slice_starts"], self.capture_batches)

    # Pickling (DataLoader workers, spawned processes): the sampler object is made again from
    # the arrays on the other side; its captures are the process's own.
    def __getstate__(self):
        state = self.__dict__.copy()
        state.pop("_sampler", None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._make_sampler()

    def __repr__(self) -> str:
        relations = len(self.topo.edge_types)
        per_hop = [self.fanouts[h * relations:(h + 1) * relations] for h in range(self.num_hops)]
        rules = "".join(f", {name}" for name, on in (
            ("replace", self.replace), ("disjoint", self.disjoint)) if on)
        if self.temporal:
            rules += f", temporal={self.temporal_strategy!r}"
        return (f"HeteroSampler(fanouts per hop and relation={per_hop}, mode={self.mode!r}, "
                f"device={self.device}{rules}, topo={self.topo})")

    def _fanouts(self, num_neighbors) -> Tuple[List[int], int]:
        edge_types = self.topo.edge_types
        if isinstance(num_neighbors, dict):
            # By set: a list's membership made these checks quadratic in the relations.
            known = set(edge_types)
            unknown = [k for k in num_neighbors if k not in known]
            if unknown:
                raise ValueError(f"num_neighbors names edge types {unknown} that the graph "
                                 f"lacks (it has {edge_types})")
            missing = [et for et in edge_types if et not in num_neighbors]
            if missing:
                raise ValueError(f"num_neighbors lacks edge types {missing}: give every edge "
                                 f"type its fanouts (0 samples none)")
            per_type = [integer_fanouts(num_neighbors[et], f"num_neighbors[{et!r}]")
                        for et in edge_types]
            lengths = {len(v) for v in per_type}
            if len(lengths) != 1:
                raise ValueError(f"num_neighbors must give every edge type as many hops, got "
                                 f"{ {k: list(v) for k, v in num_neighbors.items()} }")
            hops = lengths.pop()
        else:
            shared = integer_fanouts(num_neighbors, "num_neighbors")
            hops, per_type = len(shared), [shared] * len(edge_types)
        if hops == 0:
            raise ValueError("num_neighbors must name at least one hop")
        # Each checked by its edge type and hop (a flattened position named neither)
        for r, et in enumerate(edge_types):
            name = f"num_neighbors[{et!r}]" if isinstance(num_neighbors, dict) else "num_neighbors"
            ops.check_fanouts(per_type[r], self.replace, name)
        fanouts = [per_type[r][h] for h in range(hops) for r in range(len(edge_types))]
        return fanouts, hops

    def _place(self, name: str, t: Optional[Tensor]) -> Optional[Tensor]:
        if t is None:
            return None
        if self.mode == "GPU" or (self.mode == "UVA" and name in ("indptr", "slice_starts")):
            return t.to(self.device)
        if self.mode == "UVA":
            t, handle = pinned(t, self.device)
            self._pins.append(handle)
        return t

    def _global_ids(self, ids, node_type: str, name: str, checked: bool = False) -> Tensor:
        """``ids`` of ``node_type`` as global ids on the sampling device. Checked where they
        are (on the host, as a DataLoader gives them: no GPU round trip) unless ``checked``,
        then moved: the ops check only the global range."""
        ids = readable_ids(ids, name)
        if not holds_integers(ids) or ids.dim() != 1:
            raise TypeError(f"{name} must be a 1-D integer tensor, got {ids.dtype} of shape "
                            f"{tuple(ids.shape)}")
        n = self.topo.num_nodes_dict[node_type]
        if not checked and ids.numel() and bool(((ids < 0) | (ids >= n)).any()):
            bad = ids[(ids < 0) | (ids >= n)][0]
            raise IndexError(f"{name} holds node {int(bad)}, outside the {n} nodes of type "
                             f"{node_type!r}")
        ids = ids.to(self.device, torch.long, non_blocking=True).contiguous()
        offset = self.topo.type_offset(node_type)
        return ids + offset if offset else ids  # no kernel for the first type

    def global_seeds(self, seeds: Union[Dict[str, Tensor], Tuple[str, Tensor]]) -> Tensor:
        """Global ids of ``{node_type: ids}`` (or one ``(node_type, ids)``), in node type
        order, each id checked against its type's count."""
        seeds = _seed_dict(seeds)
        parts = [self._global_ids(seeds[t], t, f"seeds[{t!r}]")
                 for t in self.topo.node_types if t in seeds]
        unknown = [t for t in seeds if t not in self.topo.num_nodes_dict]
        if unknown:
            raise KeyError(f"seeds name node types {unknown} that the graph lacks "
                           f"(it has {self.topo.node_types})")
        if not parts:
            return torch.empty(0, dtype=torch.long, device=self.device)
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def sample_negatives(self, edge_type: EdgeType, src: Tensor, per_src: int,
                         exclude_edges: bool = True,
                         generator: Optional[torch.Generator] = None, *,
                         max_trials: int = 8, checked: bool = False) -> Tensor:
        """``per_src`` negative destinations for each source of ``edge_type``, on the
        sampling device (:func:`torch_quiver_ops.ops.sample_negatives` over this graph's
        rows): ``src`` and the result are ids local to the edge type's source and
        destination types. With ``exclude_edges`` a draw ``v`` is drawn again while
        ``(src, v)`` is a true edge of any relation from the source type to the destination
        type (rows group every relation into a node, so one scan finds it), up to
        ``max_trials`` draws (see :func:`~torch_quiver_ops.ops.sample_negatives`). ``checked``:
        the caller has checked ``src`` against the source type's count."""
        if edge_type not in self.topo.edge_types:
            raise ValueError(f"edge_type {edge_type!r} is not one of the graph's "
                             f"{self.topo.edge_types}")
        per_src, exclude_edges, max_trials = negative_options(per_src, exclude_edges,
                                                              max_trials, generator)
        src_type, _, dst_type = edge_type
        dst_begin = self.topo.type_offset(dst_type)
        indptr, indices = self._negatives_csr
        drawn = ops.sample_negatives(
            indptr, indices, self._global_ids(src, src_type, "src", checked), per_src,
            exclude_edges, max_trials, generator=generator, dst_begin=dst_begin,
            dst_count=self.topo.num_nodes_dict[dst_type])
        return drawn - dst_begin

    def sample(self, seeds: Union[Dict[str, Tensor], Tuple[str, Tensor]],
               seed_time: Optional[Tensor] = None,
               generator: Optional[torch.Generator] = None) -> HeteroSample:
        """Samples around ``seeds`` (``{node_type: ids}`` or ``(node_type, ids)``); with
        temporal sampling ``seed_time`` holds one time per seed, in the same order (the
        dict's, then each type's ids). With disjoint trees, ``batch`` numbers a seed's tree
        by its place in that order too."""
        check_generator(generator)
        seeds = _seed_dict(seeds)
        global_ids = self.global_seeds(seeds)
        # The op takes the seeds in node type order; the caller's place of each of them.
        taken = [t for t in self.topo.node_types if t in seeds]
        caller_of_taken = None
        if list(seeds) != taken:
            sizes = {t: as_ids(ids).numel() for t, ids in seeds.items()}
            starts = dict(zip(seeds, itertools.accumulate([0, *sizes.values()])))
            caller_of_taken = torch.cat([torch.arange(starts[t], starts[t] + sizes[t], device="cpu")
                                         for t in taken]).to(self.device)
        if self.temporal:
            if seed_time is None:
                raise ValueError("temporal sampling needs seed_time: one time per seed")
            seed_time = integer_times(seed_time, "seed_time").to(self.device)
            if caller_of_taken is not None and seed_time.numel() == global_ids.numel():
                seed_time = seed_time[caller_of_taken]
        elif seed_time is not None:
            raise ValueError("seed_time needs temporal sampling: build the HeteroCSRTopo with "
                             "edge_time_dict or node_time_dict")
        topo = self.topo
        node_ids, batch, rows, cols, eids, nodes_per_hop, edges_per_hop = (
            self._sampler.sample(global_ids, seed_time, generator))
        # The counts are on the host (the op reads them back once): plain lists from here.
        per_type, per_relation = nodes_per_hop.tolist(), edges_per_hop.tolist()
        node_sizes = [sum(hops) for hops in per_type]
        edge_sizes = [sum(hops) for hops in per_relation]
        node = dict(zip(topo.node_types, node_ids.split(node_sizes)))
        if self.disjoint and caller_of_taken is not None:
            batch = caller_of_taken[batch]
        batch_dict = dict(zip(topo.node_types, batch.split(node_sizes))) if self.disjoint else None
        row = dict(zip(topo.edge_types, rows.split(edge_sizes)))
        col = dict(zip(topo.edge_types, cols.split(edge_sizes)))
        edge = dict(zip(topo.edge_types, eids.split(edge_sizes)))
        if self._kept_edges is not None:
            edge = {et: self._kept_edges[et][ids] for et, ids in edge.items()}
        return HeteroSample(node, row, col, edge, batch_dict,
                            dict(zip(topo.node_types, per_type)),
                            dict(zip(topo.edge_types, per_relation)))
