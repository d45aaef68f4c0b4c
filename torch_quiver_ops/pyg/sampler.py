"""PyG's ``BaseSampler`` on :class:`~torch_quiver_ops.GraphSageSampler`: GPU, UVA or CPU
sampling returning PyG's ``SamplerOutput``."""
from __future__ import annotations

from typing import List, Optional, Tuple, Union

import math

import torch
from torch import Tensor
from torch_geometric.sampler import (BaseSampler, EdgeSamplerInput, HeteroSamplerOutput,
                                     NegativeSampling, NodeSamplerInput, SamplerOutput)
from torch_geometric.sampler.base import NumNeighbors
from torch_geometric.typing import EdgeTypeStr
from torch_geometric.sampler.neighbor_sampler import edge_sample

from .._device import as_tensor, check_flag, check_generator
from ..hetero import HeteroCSRTopo, HeteroSampler
from ..ops import integer_fanouts, integer_times
from ..sampler import GraphSageSampler
from ..topology import CSRTopo
from .stores import _HETERO, GraphStore, HeteroGraphStore

# ---- sampling ----

def _fanouts(num_neighbors) -> List[int]:
    if isinstance(num_neighbors, NumNeighbors):
        num_neighbors = num_neighbors.values
    if isinstance(num_neighbors, dict):
        raise ValueError(f"num_neighbors per edge type samples a heterogeneous graph: "
                         f"{_HETERO}")
    fanouts = integer_fanouts(num_neighbors, "num_neighbors")
    # Named here: the sampler's own checks call them sizes.
    if not fanouts:
        raise ValueError("num_neighbors must name at least one hop, got []")
    for hop, fanout in enumerate(fanouts):
        if fanout < -1:
            raise ValueError(f"num_neighbors[{hop}] must be -1 (all neighbors) or >= 0, got "
                             f"{fanout}")
    return fanouts


def _pair_of_tree(num_pos: int, num_trees: int, neg: Optional[NegativeSampling],
                  device) -> Tensor:
    """The ``batch`` entry of each disjoint tree of link sampling: the seed pair whose time
    it takes. No negatives or binary ones: the seeds are every pair's source, then every
    pair's destination, and pair n (negatives after the positives) takes positive
    n % num_pos's. Triplet: the sources, the positive destinations, then source i's
    negatives (at 2 * num_pos + i * amount + r) take pair i."""
    pairs = torch.arange(num_pos, device=device)
    if neg is not None and neg.is_triplet():
        return torch.cat([pairs, pairs, pairs.repeat_interleave(int(neg.amount))])
    one_end = torch.arange(num_trees // 2, device=device) % max(num_pos, 1)
    return torch.cat([one_end, one_end])


class NeighborSampler(BaseSampler):
    """PyG's neighbor sampling on torch-quiver-ops' kernels.

    Args:
        graph: a :class:`GraphStore` (or a :class:`CSRTopo` whose neighbor lists are
            in-neighbors).
        num_neighbors: neighbors per hop, e.g. ``[15, 10, 5]`` (``-1``: all).
        device, mode: where sampling runs and the topology lives, as for
            :class:`GraphSageSampler` (default: ``"UVA"`` on the current GPU, else ``"CPU"``).
        replace: sample with replacement.
        return_eid: return the sampled edges' ids (``e_id`` in batches); costs one more
            random read per sampled edge.
        subgraph_type: ``"directional"`` (the sampled edges) or ``"bidirectional"`` (both
            directions of each).
        generator: a ``torch.Generator`` on the sampling device for the random draws.
            Default: one of the sampler's own, which :meth:`reseed` seeds from PyTorch's
            default generator (the loader calls it at the start of every epoch).
        weights, edge_time, node_time, temporal_strategy, strict_time, disjoint: weighted,
            temporal and disjoint sampling, as for :class:`GraphSageSampler` (per-edge
            values in the order the graph store's edges were put). Temporal sampling grows
            disjoint trees, as PyG's.
        neg_exclude_edges: link sampling draws its negatives on the sampling device
            (:func:`torch_quiver_ops.ops.sample_negatives`), redrawing any that is a true
            edge (default); ``False`` keeps PyG's rule (uniform pairs, a negative a true edge
            about as often as the graph's density). With node times a negative must also
            exist by its pair's time, as in PyG. Negatives weighted by
            ``NegativeSampling``'s ``src_weight`` / ``dst_weight`` are drawn by PyG's code
            on the host.
    """

    def __init__(self, graph: Union[GraphStore, CSRTopo], num_neighbors,
                 device: Union[None, int, str, torch.device] = None, mode: Optional[str] = None,
                 replace: bool = False, return_eid: bool = False,
                 subgraph_type: str = "directional", generator: Optional[torch.Generator] = None,
                 *, weights: Optional[Tensor] = None, edge_time: Optional[Tensor] = None,
                 node_time: Optional[Tensor] = None, temporal_strategy: str = "uniform",
                 strict_time: bool = False, disjoint: bool = False,
                 neg_exclude_edges: bool = True):
        subgraph_type = getattr(subgraph_type, "value", subgraph_type)
        if subgraph_type not in ("directional", "bidirectional"):
            raise NotImplementedError(f"subgraph_type {subgraph_type!r} is not supported: use "
                                      f"'directional' or 'bidirectional'")
        if not isinstance(graph, (GraphStore, CSRTopo)):
            raise TypeError(
                f"NeighborSampler samples a torch_quiver_ops.pyg.GraphStore or a CSRTopo, got "
                f"{type(graph).__name__}" + (": pass the graph store alone, e.g. "
                                             "NeighborSampler(graph_store, num_neighbors)"
                                             if isinstance(graph, tuple) else ""))
        topo = graph._topology() if isinstance(graph, GraphStore) else graph
        if return_eid and topo.eid is None:
            topo = CSRTopo(indptr=topo.indptr, indices=topo.indices,
                           eid=torch.arange(topo.edge_count, device=topo.indices.device))
        self.subgraph_type = subgraph_type
        self.sampler = GraphSageSampler(topo, _fanouts(num_neighbors), device, mode, replace,
                                        return_eid, weights=weights, edge_time=edge_time,
                                        node_time=node_time, temporal_strategy=temporal_strategy,
                                        strict_time=strict_time, disjoint=disjoint)
        self.neg_exclude_edges = check_flag(neg_exclude_edges, "neg_exclude_edges")
        check_generator(generator)  # (else it failed at the first batch)
        self._own_generator = generator is None
        self.generator = generator if generator is not None else torch.Generator(self.device)
        # Seeded at the first epoch (the loader's __iter__) or the first batch, not here: a
        # drop-in loader's constructor drew from PyTorch's default generator, where PyG's
        # does not, so making a second loader changed the first one's batches (a probe).
        self._unseeded = self._own_generator

    def reseed(self, workers: int = 0) -> None:
        """At an epoch's start: seeds the sampler's own generator with one draw from
        PyTorch's default CPU generator. A generator given by the user is left alone,
        except that with DataLoader ``workers`` one draw from it seeds the epoch's workers
        (see :meth:`_call_generator`)."""
        if self._own_generator:
            self.generator.manual_seed(int(torch.empty((), dtype=torch.int64,
                                                       device="cpu").random_()))
            self._unseeded = False
        elif workers > 0:
            self._workers_seed = int(torch.empty((), dtype=torch.int64,
                                                 device=self.generator.device
                                                 ).random_(generator=self.generator))

    @property
    def device(self) -> torch.device:
        return self.sampler.device

    @property
    def num_neighbors(self) -> List[int]:
        return self.sampler.sizes

    @property
    def disjoint(self) -> bool:
        return self.sampler.disjoint

    def sample_from_nodes(self, inputs: NodeSamplerInput, **kwargs) -> SamplerOutput:
        if inputs.time is not None and not self.sampler.temporal:
            raise ValueError("input_time needs temporal sampling: give the loader time_attr "
                             "(or the sampler edge_time / node_time)")
        if inputs.input_type is not None:
            raise ValueError(f"{_HETERO}; got input nodes of type {inputs.input_type!r}")
        out = self._sample(inputs.node, inputs.time)
        out.metadata = (inputs.input_id, inputs.time)
        return out

    def sample_from_edges(self, inputs: EdgeSamplerInput,
                          neg_sampling: Optional[NegativeSampling] = None) -> SamplerOutput:
        """Samples around both endpoints of each seed edge (and of the negatives that
        ``neg_sampling`` adds: ``binary`` random node pairs, or ``triplet`` random
        destinations per source, drawn on the sampling device and, unless
        ``neg_exclude_edges`` is off, a true edge only after 8 true draws in a row: see
        ``ops.sample_negatives``), with PyG's label layout in the
        metadata (``edge_label_index`` / ``edge_label``, or ``src_index`` /
        ``dst_pos_index`` / ``dst_neg_index``) on the sampling device."""
        if inputs.time is not None and not self.sampler.temporal:
            raise ValueError("edge_label_time needs temporal sampling: give the loader "
                             "time_attr (or the sampler edge_time / node_time)")
        if self.sampler.temporal and inputs.time is None and self.sampler.node_time is None:
            raise ValueError("temporal link sampling by edge time needs edge_label_time")
        if inputs.input_type is not None:
            raise ValueError(f"{_HETERO}; got seed edges of type {inputs.input_type!r}")
        num_nodes = self.sampler.csr_topo.node_count
        for name, ids in (("edge_label_index[0]", inputs.row), ("edge_label_index[1]", inputs.col)):
            if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_nodes):
                bad = ids[(ids < 0) | (ids >= num_nodes)][0]
                raise IndexError(f"{name} holds node {int(bad)}, out of range [0, {num_nodes})")
        if neg_sampling is not None:
            neg_sampling = NegativeSampling.cast(neg_sampling)
        if neg_sampling is not None and not _weighted(neg_sampling):
            return self._link_sample(inputs, neg_sampling)

        def sample_trees_of_pairs(seed, seed_time):
            # Each tree named by the pair whose time it takes, as _link_sample names it
            # (PyG's edge_sample then takes the names modulo the positives, which leaves
            # them as they are). With binary negatives PyG's own tree % positives named a
            # destination's tree after another pair than its source's and its time, and
            # the batch vector changed with the path a loader took (a probe); its triplet
            # trees' names are their times' pairs.
            out = self._sample(seed, seed_time)
            if self.disjoint and (neg_sampling is None or neg_sampling.is_binary()):
                out.batch = _pair_of_tree(inputs.row.numel(), seed.numel(), neg_sampling,
                                          out.batch.device)[out.batch]
            return out

        out = edge_sample(inputs, sample_trees_of_pairs, num_nodes, disjoint=self.disjoint,
                          node_time=self.sampler.node_time, neg_sampling=neg_sampling)
        if self.device.type == "cuda":  # the labels live beside the batch (input_id: host)
            out.metadata = (out.metadata[0], *(
                m.to(self.device, non_blocking=True) if isinstance(m, Tensor) else m
                for m in out.metadata[1:]))
        return out

    def _link_sample(self, inputs: EdgeSamplerInput, neg: NegativeSampling) -> SamplerOutput:
        """PyG's ``edge_sample`` for uniform negatives, on the sampling device: the
        negatives from ``sample_negatives``, the endpoints deduplicated there (unless
        disjoint), the same metadata layout. With node times a negative must exist by its
        pair's time, as in PyG (``_existing_by``); it is still kept off true edges (node
        times had sent these batches to PyG's code, whose negatives are any pair: half of
        them true edges in a dense graph, a probe)."""
        device, sampler = self.device, self.sampler
        generator = self._call_generator()
        src = inputs.row.to(device, non_blocking=True)
        dst = inputs.col.to(device, non_blocking=True)
        num_pos, num_nodes = src.numel(), sampler.csr_topo.node_count
        edge_label, seed_time = inputs.label, inputs.time
        node_time = None
        if sampler.node_time is not None and seed_time is not None:
            node_time = as_tensor(sampler.node_time).to(device)
            pair_time = seed_time.to(device)

        def negatives(sources, per_src):
            # The graph store's rows list each node's sources.
            return sampler.sample_negatives(sources, per_src, self.neg_exclude_edges, generator,
                                            out_rows=False)

        def by_time(ids, times, redraw):
            return ids if node_time is None else _existing_by(ids, node_time, times, redraw)

        if neg.is_binary():
            num_neg = math.ceil(num_pos * neg.amount)
            neg_time = (None if node_time is None else
                        pair_time[torch.arange(num_neg, device=device) % num_pos])
            src_neg = by_time(
                torch.randint(num_nodes, (num_neg,), device=device, generator=generator),
                neg_time, lambda where: torch.randint(num_nodes, (where.numel(),),
                                                      device=device, generator=generator))
            src = torch.cat([src, src_neg])
            dst = torch.cat([dst, by_time(negatives(src_neg, 1), neg_time,
                                          lambda where: negatives(src_neg[where], 1))])
            if edge_label is None:
                edge_label = torch.ones(num_pos, device=device)
            edge_label = edge_label.to(device, non_blocking=True)
            edge_label = torch.cat([edge_label, edge_label.new_zeros(
                (num_neg, ) + edge_label.shape[1:])])
            if seed_time is not None:  # negative n takes positive n % num_pos's time
                seed_time = seed_time.repeat(1 + math.ceil(neg.amount))[:num_pos + num_neg]
        else:
            per_src = int(neg.amount)  # source i's negatives at i * per_src + r
            dst = torch.cat([dst, by_time(
                negatives(src, per_src),
                None if node_time is None else pair_time.repeat_interleave(per_src),
                lambda where: negatives(src[where // per_src], 1))])
        seed = torch.cat([src, dst])
        src_time = seed_time
        if seed_time is not None:  # always disjoint: a pair's endpoints share its time
            seed_time = seed_time.to(device, non_blocking=True)
            dst_time = (seed_time if neg.is_binary() else torch.cat(
                [seed_time, seed_time.repeat_interleave(int(neg.amount))]))
            seed_time = torch.cat([seed_time, dst_time])
        if self.disjoint:
            out = self._sample(seed, seed_time)
            out.batch = _pair_of_tree(num_pos, seed.numel(), neg, device)[out.batch]
            positions = torch.arange(seed.numel(), device=device)
        else:
            seed, positions = seed.unique(return_inverse=True)
            out = self._sample(seed, seed_time)
        if neg.is_binary():
            out.metadata = (inputs.input_id, positions.view(2, -1), edge_label, src_time)
        else:
            # Source i's negatives sit at i * amount + r (they depend on the source).
            dst_neg_index = positions[2 * num_pos:]
            out.metadata = (inputs.input_id, positions[:num_pos],
                            positions[num_pos:2 * num_pos],
                            dst_neg_index.view(num_pos, -1).squeeze(-1), src_time)
        return out

    def _call_generator(self) -> Optional[torch.Generator]:
        worker = torch.utils.data.get_worker_info()
        if worker is None:
            if getattr(self, "_unseeded", False):  # (used without a loader's epochs)
                self.reseed()
            return self.generator
        # A DataLoader worker (CPU mode) inherited the parent's generator state: used as
        # is, every worker would draw the same stream, and every epoch too, as the
        # parent's copy never advances.
        if self._own_generator:
            # Its default generator, which PyTorch seeds as the worker starts: each epoch,
            # or once for persistent workers (then an epoch is not reproduced by a seed).
            return None
        # A user's generator: one of the worker's own, seeded from the epoch's draw from it
        # (reseed) and the worker's id, so the run stays reproducible from that generator.
        # It lives in the worker's copy of this sampler: persistent workers keep drawing
        # from it epoch after epoch.
        if getattr(self, "_worker_generator", None) is None:
            seed = hash((getattr(self, "_workers_seed", 0), worker.id)) & (2 ** 63 - 1)
            self._worker_generator = torch.Generator().manual_seed(seed)
        return self._worker_generator

    def _sample(self, seeds: Tensor, seed_time: Optional[Tensor] = None) -> SamplerOutput:
        """The subgraph around ``seeds`` (they come first in ``node``, in their order)."""
        generator = self._call_generator()
        batch = None
        if self.sampler.has_rules:
            node, batch, row, col, edge, nodes_per_hop, edges_per_hop = \
                self.sampler.neighbor_sample(seeds, seed_time, generator)
            batch = batch if self.disjoint else None
        else:
            node, row, col, edge, nodes_per_hop, edges_per_hop = self.sampler.sample_subgraph(
                seeds, generator)
        out = SamplerOutput(node=node, row=row, col=col, batch=batch,
                            edge=edge if self.sampler.return_eid else None,
                            num_sampled_nodes=nodes_per_hop.tolist(),
                            num_sampled_edges=edges_per_hop.tolist())
        if self.subgraph_type == "bidirectional":
            out = out.to_bidirectional()
        return out

    @property
    def edge_permutation(self) -> None:
        return None  # e_id already holds the ids of the edges as they were put


def _existing_by(ids: Tensor, node_time: Tensor, times: Tensor, redraw) -> Tensor:
    """PyG's rule for negatives with node times (``neg_sample``): a negative must exist by
    its pair's time. Late ones are drawn again (``redraw(where)``), five rounds, then the
    earliest node takes them (which, as in PyG, may be a true edge or still late)."""
    late = node_time[ids] > times
    for _ in range(5):
        if not bool(late.any()):
            return ids
        where = late.nonzero().view(-1)
        ids = ids.clone()
        ids[where] = redraw(where)
        late[where] = node_time[ids[where]] > times[where]
    return torch.where(late, node_time.argmin(), ids)


def _weighted(neg: NegativeSampling) -> bool:
    """Whether negatives are drawn by weight: PyG names the weights ``src_weight`` and
    ``dst_weight`` (``weight`` before 2.4)."""
    return any(getattr(neg, k, None) is not None for k in ("weight", "src_weight", "dst_weight"))


def _every_type_timed(node_time_dict: dict, num_nodes_dict: dict):
    """``node_time_dict`` with every node type: a type without times gets int64's least
    value for each node (as pyg-lib samples such types, their edges pass any seed's time);
    and those types."""
    unknown = [t for t in node_time_dict if t not in num_nodes_dict]
    if unknown:
        raise ValueError(f"node_time_dict names node types {unknown} the graph lacks "
                         f"(it has {sorted(num_nodes_dict)})")
    untimed = tuple(t for t in num_nodes_dict if t not in node_time_dict)
    every = dict(node_time_dict)
    for t in untimed:
        every[t] = torch.full((num_nodes_dict[t],), torch.iinfo(torch.int64).min,
                              dtype=torch.long)
    return every, untimed


class HeteroNeighborSampler(BaseSampler):
    """PyG's heterogeneous neighbor sampling on ``quiver::hetero_neighbor_sample``: every
    relation of a hop in the same kernel launches, returning PyG's ``HeteroSamplerOutput``.

    Args:
        graph: a :class:`HeteroGraphStore` or a :class:`~torch_quiver_ops.HeteroCSRTopo`.
        num_neighbors: per hop, the same for every edge type (``[10, 10]``), or per edge
            type (``{("author", "writes", "paper"): [10, 5], ...}``, every edge type; 0
            samples none), or PyG's ``NumNeighbors``.
        device, mode, replace, generator: as :class:`NeighborSampler`.
        return_eid: put the sampled edges' ids (per edge type) in batches as ``e_id``.
        weights: ``{edge_type: weight per edge}``: weighted sampling.
        edge_time_dict, node_time_dict: temporal sampling (times per edge of every edge
            type, or per node of some node types: the others are sampled regardless of
            time, as pyg-lib does, and their seeds need times of their own);
            ``temporal_strategy``, ``strict_time`` and ``disjoint`` as
            :class:`NeighborSampler`.
        neg_exclude_edges: link sampling draws its negatives on the sampling device
            (:meth:`HeteroSampler.sample_negatives`): pairs of the edge type's end types,
            a destination redrawn while the pair is a true edge of a relation between those
            types (default); ``False`` keeps PyG's uniform pairs (a negative a true edge
            about as often as the relation's density).
        subgraph_type: ``"directional"`` (the sampled edges) or ``"bidirectional"``: PyG's
            ``HeteroSamplerOutput.to_bidirectional`` (each edge type joined with its
            ``rev_`` type, or its own reverse; those types then carry no ``e_id``, as in
            PyG).
    """

    def __init__(self, graph: Union[HeteroGraphStore, HeteroCSRTopo], num_neighbors,
                 device: Union[None, int, str, torch.device] = None, mode: Optional[str] = None,
                 replace: bool = False, return_eid: bool = False,
                 generator: Optional[torch.Generator] = None, *,
                 weights: Optional[dict] = None, edge_time_dict: Optional[dict] = None,
                 node_time_dict: Optional[dict] = None, temporal_strategy: str = "uniform",
                 strict_time: bool = False, disjoint: bool = False,
                 neg_exclude_edges: bool = True, subgraph_type: str = "directional"):
        subgraph_type = getattr(subgraph_type, "value", subgraph_type)
        if subgraph_type not in ("directional", "bidirectional"):
            raise NotImplementedError(f"subgraph_type {subgraph_type!r} is not supported: use "
                                      f"'directional' or 'bidirectional'")
        self.subgraph_type = subgraph_type
        self.untimed_node_types: Tuple[str, ...] = ()
        if isinstance(graph, HeteroGraphStore):
            if node_time_dict is not None:
                node_time_dict, self.untimed_node_types = _every_type_timed(
                    node_time_dict, graph.num_nodes_dict)
            topo = graph.topology(edge_time_dict, node_time_dict)
            if self.untimed_node_types and temporal_strategy == "last":
                # Edges from such a type would all tie at one time, and "last" would take
                # the same neighbors every time (pyg-lib samples them uniformly). A type
                # that is no edge's source is never a neighbor, so it needs no times.
                sources = sorted({et[0] for et, n in topo.num_edges_dict.items()
                                  if n and et[0] in self.untimed_node_types})
                if sources:
                    raise ValueError(f"temporal_strategy='last' needs times on every node "
                                     f"type that is a neighbor (an edge's source); "
                                     f"{sources} have none")
        elif isinstance(graph, HeteroCSRTopo):
            if edge_time_dict is not None or node_time_dict is not None:
                raise ValueError("times of a HeteroCSRTopo are given when it is built "
                                 "(edge_time_dict / node_time_dict)")
            topo = graph
        else:
            raise TypeError(f"HeteroNeighborSampler samples a HeteroGraphStore or a "
                            f"HeteroCSRTopo, got {type(graph).__name__}")
        if isinstance(num_neighbors, NumNeighbors):
            # PyG's own reading (string keys, `default` for the types it leaves out), from a
            # fresh copy: get_values keeps its first answer.
            num_neighbors = NumNeighbors(num_neighbors.values, num_neighbors.default
                                         ).get_values(topo.edge_types)
        elif isinstance(num_neighbors, dict):  # PyG also takes "src__rel__dst" keys
            num_neighbors = {EdgeTypeStr(k).to_tuple() if isinstance(k, str) else k: v
                             for k, v in num_neighbors.items()}
        self.sampler = HeteroSampler(topo, num_neighbors, device, mode, replace,
                                     weights=weights, temporal_strategy=temporal_strategy,
                                     strict_time=strict_time, disjoint=disjoint)
        self.node_time_dict = node_time_dict
        self.return_eid = check_flag(return_eid, "return_eid")
        self.neg_exclude_edges = check_flag(neg_exclude_edges, "neg_exclude_edges")
        check_generator(generator)  # (else it failed at the first batch)
        self._own_generator = generator is None
        self.generator = generator if generator is not None else torch.Generator(self.device)
        # Seeded at the first epoch (the loader's __iter__) or the first batch, not here: a
        # drop-in loader's constructor drew from PyTorch's default generator, where PyG's
        # does not, so making a second loader changed the first one's batches (a probe).
        self._unseeded = self._own_generator

    reseed = NeighborSampler.reseed
    _call_generator = NeighborSampler._call_generator

    def _check_timed(self, node_type: str, argument: str) -> None:
        if node_type in self.untimed_node_types:
            raise ValueError(f"node type {node_type!r} has no node times, so its seeds have "
                             f"none: give {argument} (one time per seed)")

    @property
    def device(self) -> torch.device:
        return self.sampler.device

    @property
    def disjoint(self) -> bool:
        return self.sampler.disjoint

    @property
    def edge_permutation(self) -> None:
        return None

    def _output(self, seeds, seed_time=None) -> HeteroSamplerOutput:
        out = self.sampler.sample(seeds, seed_time, self._call_generator())
        out = HeteroSamplerOutput(
            node=out.node, row=out.row, col=out.col,
            edge=out.edge if self.return_eid else None,
            batch=out.batch if self.disjoint else None,
            num_sampled_nodes=out.num_sampled_nodes, num_sampled_edges=out.num_sampled_edges)
        return out.to_bidirectional() if self.subgraph_type == "bidirectional" else out

    def sample_from_nodes(self, inputs: NodeSamplerInput, **kwargs) -> HeteroSamplerOutput:
        if inputs.input_type is None:
            raise ValueError("heterogeneous sampling needs the seeds' node type: "
                             "input_nodes=(node_type, ids)")
        if inputs.time is not None and not self.sampler.temporal:
            raise ValueError("input_time needs temporal sampling: give the loader time_attr")
        seed_time = inputs.time
        if seed_time is None and self.sampler.temporal:
            if self.node_time_dict is None:
                raise ValueError("temporal sampling by edge time needs input_time: one time "
                                 "per seed")
            self._check_timed(inputs.input_type, "input_time")
            seed_time = as_tensor(self.node_time_dict[inputs.input_type])[inputs.node]
        out = self._output((inputs.input_type, inputs.node), seed_time)
        out.metadata = (inputs.input_id, seed_time)
        return out

    def sample_from_edges(self, inputs: EdgeSamplerInput,
                          neg_sampling: Optional[NegativeSampling] = None
                          ) -> HeteroSamplerOutput:
        """Samples around both endpoints of each seed edge of ``inputs.input_type`` (and
        of ``neg_sampling``'s uniform negatives: ``binary`` random pairs of the edge type's
        end types, or ``triplet`` random destinations per source), with PyG's label layout
        in the metadata (positions in the end types' node lists)."""
        et = inputs.input_type
        topo = self.sampler.topo
        if et not in topo.edge_types:
            raise ValueError(f"link sampling needs the seed edges' type, one of "
                             f"{topo.edge_types}; got {et!r}")
        if inputs.time is not None and not self.sampler.temporal:
            raise ValueError("edge_label_time needs temporal sampling: give the loader "
                             "time_attr")
        neg = NegativeSampling.cast(neg_sampling) if neg_sampling is not None else None
        if neg is not None and _weighted(neg):
            raise NotImplementedError("weighted negatives on heterogeneous graphs are not "
                                      "supported yet")
        src_type, _, dst_type = et
        device, generator = self.device, self._call_generator()
        n_src, n_dst = topo.num_nodes_dict[src_type], topo.num_nodes_dict[dst_type]
        src = inputs.row.to(device, non_blocking=True)
        dst = inputs.col.to(device, non_blocking=True)
        for name, ids, n, t in (("edge_label_index[0]", src, n_src, src_type),
                                ("edge_label_index[1]", dst, n_dst, dst_type)):
            if ids.numel() and bool(((ids < 0) | (ids >= n)).any()):
                bad = ids[(ids < 0) | (ids >= n)][0]
                raise IndexError(f"{name} holds node {int(bad)}, outside {t!r}'s {n} nodes")
        num_pos = src.numel()
        edge_label = inputs.label
        pair_time = None
        if self.sampler.temporal:  # disjoint trees, each at its pair's time
            pair_time = inputs.time
            if pair_time is None:
                if self.node_time_dict is None:
                    raise ValueError("temporal link sampling by edge time needs "
                                     "edge_label_time: one time per seed edge")
                self._check_timed(src_type, "edge_label_time")
                pair_time = as_tensor(self.node_time_dict[src_type])[inputs.row]
            pair_time = integer_times(pair_time, "edge_label_time").to(device)

        def negatives(sources, per_src):
            return self.sampler.sample_negatives(et, sources, per_src, self.neg_exclude_edges,
                                                 generator, checked=True)

        def existing_by(ids, node_type, times, redraw):
            if (pair_time is None or self.node_time_dict is None
                    or node_type in self.untimed_node_types):
                return ids
            return _existing_by(ids, as_tensor(self.node_time_dict[node_type]).to(device),
                                times, redraw)

        if neg is not None and neg.is_binary():
            num_neg = math.ceil(num_pos * neg.amount)
            neg_time = (None if pair_time is None else
                        pair_time[torch.arange(num_neg, device=device) % num_pos])
            src_neg = torch.randint(n_src, (num_neg,), device=device, generator=generator)
            src_neg = existing_by(src_neg, src_type, neg_time, lambda where: torch.randint(
                n_src, (where.numel(),), device=device, generator=generator))
            dst_neg = existing_by(negatives(src_neg, 1), dst_type, neg_time,
                                  lambda where: negatives(src_neg[where], 1))
            src = torch.cat([src, src_neg])
            dst = torch.cat([dst, dst_neg])
            if edge_label is None:
                edge_label = torch.ones(num_pos, device=device)
            edge_label = edge_label.to(device, non_blocking=True)
            edge_label = torch.cat([edge_label, edge_label.new_zeros(
                (num_neg, ) + edge_label.shape[1:])])
        elif neg is not None:
            per_src = int(neg.amount)  # source i's negatives at i * per_src + r
            dst_neg = existing_by(
                negatives(src, per_src), dst_type,
                None if pair_time is None else pair_time.repeat_interleave(per_src),
                lambda where: negatives(src[where // per_src], 1))
            dst = torch.cat([dst, dst_neg])
        # The seed edge (or negative pair) each seed belongs to: a triplet's negatives
        # belong to their source's edge.
        src_pair = torch.arange(src.numel(), device=device)
        dst_pair = torch.arange(dst.numel(), device=device)
        if neg is not None and not neg.is_binary():
            dst_pair = torch.cat([src_pair, src_pair.repeat_interleave(int(neg.amount))])
        src_time = dst_time = None
        if pair_time is not None:
            # A negative pair n takes positive n % num_pos's time, as PyG's.
            src_time, dst_time = pair_time[src_pair % num_pos], pair_time[dst_pair % num_pos]
        seed_time = None
        if self.disjoint:
            # Every seed its own tree, trees in the order the sampler takes the seeds
            # (node types in the graph's order): positions are plain offsets.
            blocks = ([(src_type, src, src_pair, src_time), (dst_type, dst, dst_pair, dst_time)]
                      if src_type != dst_type else
                      [(src_type, torch.cat([src, dst]), torch.cat([src_pair, dst_pair]),
                        None if src_time is None else torch.cat([src_time, dst_time]))])
            blocks.sort(key=lambda block: topo.node_types.index(block[0]))
            seed_dict = {t: ids for t, ids, _, _ in blocks}
            pair_of_tree = torch.cat([pairs for _, _, pairs, _ in blocks])
            if self.sampler.temporal:
                seed_time = torch.cat([times for _, _, _, times in blocks])
            src_pos = torch.arange(src.numel(), device=device)
            dst_pos = torch.arange(dst.numel(), device=device) + (
                src.numel() if src_type == dst_type else 0)
        elif src_type == dst_type:
            seeds, positions = torch.cat([src, dst]).unique(return_inverse=True)
            src_pos, dst_pos = positions[:src.numel()], positions[src.numel():]
            seed_dict = {src_type: seeds}
        else:
            src_seeds, src_pos = src.unique(return_inverse=True)
            dst_seeds, dst_pos = dst.unique(return_inverse=True)
            seed_dict = {src_type: src_seeds, dst_type: dst_seeds}
        out = self._output(seed_dict, seed_time)
        if self.disjoint:
            out.batch = {t: pair_of_tree[b] % num_pos for t, b in out.batch.items()}
        if neg is None or neg.is_binary():
            if edge_label is None and neg is None and inputs.label is not None:
                edge_label = inputs.label.to(device, non_blocking=True)
            out.metadata = (inputs.input_id, torch.stack([src_pos, dst_pos]), edge_label,
                            src_time)
        else:
            out.metadata = (inputs.input_id, src_pos, dst_pos[:num_pos],
                            dst_pos[num_pos:].view(num_pos, -1).squeeze(-1), src_time)
        return out
