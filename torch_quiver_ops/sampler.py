"""Multi-hop neighbor samplers built on ``quiver::sample_subgraph`` (uniform) and
``quiver::neighbor_sample`` (weighted, temporal, disjoint)."""
from __future__ import annotations

import itertools
import threading
import warnings
from typing import List, NamedTuple, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from . import ops
from .ops import integer_fanouts, integer_times
from ._load import cuda_kernels_built
from ._device import (as_ids, as_int, as_tensor, check_flag, check_generator, checked_node_ids,
                      no_meta, parse_share, parse_size, readable_ids, resolve_device)
from .hotness import check_hot_order, degree_order
from .topology import CSRTopo, build_topology_cache, kept_indptr
from .uva import pinned

MODES = ("GPU", "UVA", "CPU")


# Held while a sampler handed to another process places its topology on first use.
_PLACING = threading.Lock()


class Adj(NamedTuple):
    """One layer's bipartite graph, as PyG's NeighborSampler and torch-quiver give it:
    ``edge_index[0]`` indexes the ``size[0]`` source nodes (the first ``size[0]`` entries of
    ``n_id``), ``edge_index[1]`` the ``size[1]`` target nodes."""
    edge_index: Tensor
    e_id: Optional[Tensor]
    size: Tuple[int, int]

    def to(self, *args, **kwargs) -> "Adj":
        e_id = self.e_id.to(*args, **kwargs) if self.e_id is not None else None
        return Adj(self.edge_index.to(*args, **kwargs), e_id, self.size)


def ops_temporal_strategy(strategy: str, temporal: bool, weighted: bool, replace: bool,
                          weights_name: str = "weights") -> str:
    """The temporal strategy the ops get from a sampler's ``temporal_strategy``, checked when
    the sampler is made rather than at its first batch: without times it means nothing
    (ignored, as PyG ignores it without ``time_attr``); "last" takes each node's most
    recent edges, so it takes no weights (named ``weights_name``) and no replacement."""
    if strategy not in ("uniform", "last"):
        raise ValueError(f"temporal_strategy must be 'uniform' or 'last', got {strategy!r}")
    if not temporal:
        return "uniform"
    if strategy == "last" and weighted:
        raise ValueError(f"temporal_strategy='last' takes the most recent edges and ignores "
                         f"weights: leave {weights_name} out, or sample by weight with "
                         f"temporal_strategy='uniform'")
    if strategy == "last" and replace:
        raise ValueError("temporal_strategy='last' takes the most recent edges: it cannot "
                         "sample with replacement (replace=True)")
    return strategy


def sampling_placement(device, mode: Optional[str]) -> Tuple[torch.device, str]:
    """``(device, mode)`` a sampler runs with: ``mode`` ``"GPU"``, ``"UVA"`` or ``"CPU"``
    (default: ``"UVA"`` on a GPU, else ``"CPU"``), checked against the device and the
    build."""
    if mode is not None and not (isinstance(mode, str) and mode.upper() in MODES):
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if mode is not None and mode.upper() == "CPU":
        # The device is not read, as in torch-quiver (whose scripts pass device='CPU').
        return torch.device("cpu"), "CPU"
    given = device
    device = resolve_device(device)
    defaulted = mode is None
    if mode is None:
        if device.type not in ("cuda", "cpu"):
            # was sampled on the CPU, outputs there, where the caller asked for another device
            raise ValueError(f"device must be a GPU or the CPU, got {given!r}")
        mode = "UVA" if device.type == "cuda" else "CPU"
    mode = mode.upper()
    if mode == "CPU":
        return torch.device("cpu"), mode
    if device.type != "cuda":
        raise ValueError(f"mode {mode!r} samples on a GPU, but device is {device}")
    if not torch.cuda.is_available():
        asked = (f"device={given!r} (sampled in mode {mode!r}, the default on a GPU)"
                 if defaulted else f"mode {mode!r}")
        raise RuntimeError(f"{asked} needs a CUDA GPU, and torch sees none")
    if not cuda_kernels_built():
        raise RuntimeError(f"mode {mode!r} needs the CUDA kernels, but torch-quiver-ops was "
                           f"built without them (rebuild with nvcc on PATH)")
    return device, mode


def _share_or_warn(topo: CSRTopo) -> None:
    try:
        topo.share_memory_()
    except RuntimeError as error:  # e.g. a small /dev/shm in a container
        warnings.warn(f"could not move the topology to shared memory ({error}); worker "
                      f"processes will each get their own copy")


def _with_rules(topo: CSRTopo, weights, edge_time, node_time):
    """``(topo, edge_weight, edge_time)`` by CSR position for neighbor_sample: weights and
    times given per input edge (or node) follow each edge through ``topo.eid``; with times
    the rows are sorted by time (``eid`` then names every edge's input position)."""
    if weights is None and edge_time is None and node_time is None:
        return topo, None, None, None
    if edge_time is not None and node_time is not None:
        raise ValueError("give edge_time or node_time, not both")
    eid = topo.eid if topo.eid is not None else torch.arange(topo.edge_count, device="cpu")
    if topo.edge_count and (weights is not None or edge_time is not None):
        low, high = int(eid.min()), int(eid.max())
        if low < 0 or high >= topo.edge_count:
            # Per-edge values are read as values[eid]: ids of the caller's own (a
            # subgraph's e_id) name no position in them.
            raise ValueError(f"weights and edge_time are indexed by csr_topo.eid, which holds "
                             f"{low if low < 0 else high}, outside [0, {topo.edge_count}) "
                             f"(the edge count): build the CSRTopo without eid, or with ids "
                             f"that are positions in these values")
    per_csr_edge = {}
    for name, values in (("weights", weights), ("edge_time", edge_time)):
        if values is None:
            continue
        given, values = values, as_tensor(no_meta(values, name, "values")).cpu()
        if values.dtype.is_complex or values.dtype == torch.bool:
            raise TypeError(f"{name} must hold real numbers, got {values.dtype}")
        if values.dim() != 1 or values.numel() != topo.edge_count:
            raise ValueError(f"{name} must hold one value per edge ({topo.edge_count}), got "
                             f"shape {tuple(values.shape)}")
        if name == "weights":
            # Checked as given, in the caller's order: a list read as a tensor is float32
            # already, its 1e-50 a 0 that masked the edge unnamed.
            values = ops.float32_weights(given, name).cpu()
        per_csr_edge[name] = values[eid]
    edge_weight = per_csr_edge.get("weights")
    if edge_weight is not None:
        edge_weight = edge_weight.contiguous()
        kept = edge_weight > 0
        if not bool(kept.all()):
            # PyG's weight_attr allows zero weights (a way to mask edges): such an edge is
            # never sampled, so the sampler's graph leaves it out (eid keeps the input ids).
            topo = CSRTopo(indptr=kept_indptr(topo.indptr, kept), indices=topo.indices[kept].contiguous(),
                           eid=eid[kept].contiguous())
            eid, edge_weight = topo.eid, edge_weight[kept].contiguous()
            per_csr_edge = {name: values[kept] for name, values in per_csr_edge.items()}
    if node_time is not None:
        node_time = integer_times(node_time, "node_time").cpu()
        if node_time.dim() != 1 or node_time.numel() != topo.node_count:
            raise ValueError(f"node_time must hold one time per node ({topo.node_count}), got "
                             f"shape {tuple(node_time.shape)}")
    if edge_time is None and node_time is None:
        return topo, edge_weight, None, None
    times = per_csr_edge.get("edge_time")
    order_ids = torch.arange(topo.edge_count, device="cpu")
    indices, order, csr_time = ops.sort_rows_by_time(
        topo.indptr, topo.indices, order_ids,
        edge_time=None if times is None else integer_times(times, "edge_time"),
        node_time=node_time)
    topo = CSRTopo(indptr=topo.indptr, indices=indices.contiguous(), eid=eid[order].contiguous())
    if edge_weight is not None:
        edge_weight = edge_weight[order].contiguous()
    return topo, edge_weight, csr_time.contiguous(), node_time


def _edge_index_of(rows: Tensor, cols: Tensor) -> Tensor:
    """``torch.stack([rows, cols])``, without the copy when they already are the two rows of
    one [2, E] tensor (as a GPU sampler object returns them)."""
    base = rows._base
    if (base is not None and base is cols._base and base.dim() == 2 and base.size(0) == 2
            and rows.dim() == cols.dim() == 1 and rows.stride(0) == cols.stride(0) == 1
            and rows.dtype == cols.dtype == base.dtype
            and base.size(1) == rows.numel() and base.is_contiguous()
            and rows.data_ptr() == base.data_ptr()
            and cols.data_ptr() == base.data_ptr() + rows.numel() * base.element_size()):
        return base
    return torch.stack([rows, cols])


def layers_of(subgraph: Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor],
              return_eid: bool = True) -> Tuple[Tensor, int, List[Adj]]:
    """``(n_id, batch_size, adjs)`` from sample_subgraph's output (torch-quiver's layout,
    :meth:`GraphSageSampler.sample`): one :class:`Adj` per layer, outermost first."""
    node_ids, rows, cols, eids, nodes_per_hop, edges_per_hop = subgraph
    if nodes_per_hop.is_cpu and edges_per_hop.is_cpu:
        node_counts, edge_counts = nodes_per_hop.tolist(), edges_per_hop.tolist()
    else:
        counts = torch.cat([nodes_per_hop, edges_per_hop]).tolist()  # one wait for both
        node_counts, edge_counts = counts[:nodes_per_hop.numel()], counts[nodes_per_hop.numel():]
    cum_nodes = list(itertools.accumulate(node_counts))
    cum_edges = list(itertools.accumulate(edge_counts))
    edge_index = _edge_index_of(rows, cols)
    adjs = []
    for hop in reversed(range(edges_per_hop.numel())):
        num_edges = cum_edges[hop]
        e_id = eids[:num_edges] if return_eid else None
        adjs.append(Adj(edge_index[:, :num_edges], e_id, (cum_nodes[hop + 1], cum_nodes[hop])))
    return node_ids, cum_nodes[0], adjs


def strict_time_flag(strict_time, temporal: bool, times: str) -> bool:
    """``strict_time`` checked as a flag, and refused without times (``times``: what gives
    them), where it had been taken and ignored (a probe)."""
    strict = check_flag(strict_time, "strict_time")
    if strict and not temporal:
        raise ValueError(f"strict_time=True rules out neighbors at a seed's time: it needs "
                         f"{times}")
    return strict


def negative_options(per_src, exclude_edges, max_trials, generator) -> Tuple[int, bool, int]:
    """``(per_src, exclude_edges, max_trials)`` of a sampler's ``sample_negatives`` checked
    by name: None had turned the exclusion off unsaid, ``per_src=True`` drew one, and a
    count past int64 failed in the op's schema (probes)."""
    exclude_edges = check_flag(exclude_edges, "exclude_edges")
    count, trials = as_int(per_src), as_int(max_trials)
    if count is None or not 0 <= count < 2**63:
        raise (TypeError if count is None else ValueError)(
            f"per_src must be an int >= 0, got {per_src!r}")
    if trials is None or not -2**63 <= trials < 2**63:
        raise (TypeError if trials is None else ValueError)(
            f"max_trials must be an int in [1, 1000], got {max_trials!r}")
    check_generator(generator)
    return count, exclude_edges, trials


class GraphSageSampler:
    """GraphSAGE-style multi-hop sampler, a drop-in for torch-quiver's.

    Args:
        csr_topo: the graph.
        sizes: fanout per hop, outermost last, e.g. ``[15, 10, 5]``; ``-1`` takes all neighbors.
        device: where sampling runs and outputs live: a GPU index, a ``torch.device``, or
            ``"cpu"``. Default: the current GPU if there is one, else the CPU.
        mode: where the topology lives. ``"GPU"``: in device memory (fastest);
            ``"UVA"``: in pinned host memory read by the GPU directly (graphs larger than
            GPU memory); ``"CPU"``: sampled by CPU threads. Default: ``"UVA"`` on a GPU,
            ``"CPU"`` otherwise.
        replace: sample with replacement.
        return_eid: fill ``Adj.e_id`` with the sampled edges' ids in ``edge_index`` input
            order (for edge features; a CSRTopo built from ``indptr``/``indices`` without
            ``eid``: their CSR positions). Off by default, as in torch-quiver: reading the ids
            costs a second random read per sampled edge, over PCIe in UVA mode.
        topology_cache: UVA mode only: GPU memory for a topology cache, in bytes, ``"1G"``,
            or a share of the neighbor lists' bytes such as ``"20%"`` (4 bytes a node of
            per-node starts included). The hottest nodes' neighbor lists are copied to the
            GPU and read there; the rest stay in pinned host memory. Same samples either way.
        hot_order: node ids hottest first for the topology cache (e.g.
            :func:`torch_quiver_ops.hotness.presample_topology_order`); default: by degree.
        weights: one weight per edge, indexed by ``csr_topo.eid`` (by default the edge's
            ``edge_index`` column or CSR position; ids of your own must then lie in
            ``[0, E)``: ``weights[eid]`` is the edge's weight): weighted sampling, successive sampling without replacement (see
            :func:`torch_quiver_ops.ops.neighbor_sample` for the exact distribution).
            Every weight must be finite and >= 0 (checked here, once); an edge of weight 0
            is never sampled (PyG's masking by ``weight_attr``): the sampler's
            ``csr_topo`` leaves it out.
        edge_time, node_time: one time per edge (indexed by ``eid``, as ``weights``), or
            per node (a neighbor's time):
            temporal sampling. Each sample call then takes ``seed_time`` (default with
            ``node_time``: the seeds' own times), and a tree takes only edges at or before
            its seed's time (strictly before with ``strict_time``). The rows are sorted by
            time once, here. ``temporal_strategy``: ``"uniform"`` or ``"last"``.
        disjoint: each seed grows its own tree (implied by temporal sampling);
            :meth:`neighbor_sample` returns each node's seed index.
        capture_batches: on a GPU, capture a batch shape as a CUDA graph at its second call
            and replay it from the third (one launch instead of about 15 kernels a hop),
            keeping up to 3 shapes' buffers with this sampler. Shapes that keep changing
            (8 captures let go before 4 replays each) stop being captured: new shapes then
            run as launched. False: every batch runs as launched, as the ops do. Same
            samples either way.
        uva_row_order: in UVA mode, whether a hop of 16384 rows or more visits its rows in
            the order of their neighbor lists' addresses (the GPU reaches host pages in
            order faster): None (the default) when the lists take 2 GiB or more, True
            always, False never. Same samples either way; it is there to measure what the
            order buys.

    Each node is expanded once per batch (a seed given twice is two targets, each
    expanded, as in PyG), and a layer's edges are those of its hop and of
    every hop inside it (PyG's ``NeighborLoader`` layout, which ``trim_to_layer`` reads):
    a node within reach of both a seed's first and second hop keeps the neighbors sampled
    for it the first time. torch-quiver's sampler (as PyG's old ``NeighborSampler``)
    samples each layer anew, so a node's neighbors may differ between layers there, and
    the same seed's first layer may hold fewer edges into it here. Either is a GraphSAGE
    sample of the same distribution per node.

    A sampler can be handed to ``torch.multiprocessing.spawn`` workers: the topology
    travels as shared memory, and each worker samples on the GPU that is current at its
    first ``sample`` (call ``torch.cuda.set_device(rank)`` before it). UVA mode pins the
    one shared host copy; GPU mode maps the parent's copy through CUDA IPC when the worker
    uses that GPU, and otherwise copies the topology onto its own GPU once.
    """

    def __init__(self, csr_topo: CSRTopo, sizes: Sequence[int],
                 device: Union[None, int, str, torch.device] = None, mode: Optional[str] = None,
                 replace: bool = False, return_eid: bool = False,
                 topology_cache: Union[None, int, str] = None,
                 hot_order: Optional[Tensor] = None, *, weights: Optional[Tensor] = None,
                 edge_time: Optional[Tensor] = None, node_time: Optional[Tensor] = None,
                 temporal_strategy: str = "uniform", strict_time: bool = False,
                 disjoint: bool = False, capture_batches: bool = True,
                 uva_row_order: Optional[bool] = None):
        if not isinstance(csr_topo, CSRTopo):
            raise TypeError(f"csr_topo must be a CSRTopo, got {type(csr_topo).__name__} (build "
                            f"one: torch_quiver_ops.CSRTopo(edge_index))")
        replace = check_flag(replace, "replace")
        sizes = integer_fanouts(sizes, "sizes")
        ops.check_fanouts(sizes, replace, "sizes")
        self.sizes: List[int] = sizes
        self.replace = replace
        given = csr_topo
        csr_topo, self._edge_weight, self._edge_time, self.node_time = _with_rules(
            csr_topo, weights, edge_time, node_time)
        self.weighted = self._edge_weight is not None
        # Zero-weight edges leave the sampler's graph but stay true edges, which negatives
        # must not be: sample_negatives reads the given graph then.
        self._every_edge = given if csr_topo.edge_count != given.edge_count else None
        self.temporal = self._edge_time is not None
        self.temporal_strategy = temporal_strategy
        self._ops_temporal_strategy = ops_temporal_strategy(
            temporal_strategy, self.temporal, self._edge_weight is not None, replace)
        self.strict_time = strict_time_flag(strict_time, self.temporal,
                                            "edge_time or node_time")
        self.disjoint = check_flag(disjoint, "disjoint") or self.temporal
        self.capture_batches = check_flag(capture_batches, "capture_batches")
        self.uva_row_order = (None if uva_row_order is None
                              else check_flag(uva_row_order, "uva_row_order"))
        # Without eid, a CSRTopo's edges are named by their CSR positions (the op's ids).
        self.return_eid = check_flag(return_eid, "return_eid")
        self.csr_topo = csr_topo
        self.device, self.mode = sampling_placement(device, mode)
        self.topology_cache_bytes = self._cache_budget(topology_cache, csr_topo)
        if self.topology_cache_bytes and self.mode != "UVA":
            raise ValueError(f"topology_cache is for UVA mode, where the neighbor lists are in "
                             f"host memory; mode {self.mode!r} reads them from "
                             f"{'GPU' if self.mode == 'GPU' else 'host'} memory already")
        if self.uva_row_order is not None and self.mode != "UVA":
            raise ValueError(f"uva_row_order orders the reads of neighbor lists in pinned "
                             f"host memory (UVA mode); mode {self.mode!r} has none")
        self.hot_order = (None if hot_order is None
                          else check_hot_order(hot_order, csr_topo.node_count))
        if hot_order is not None and not self.topology_cache_bytes:
            raise ValueError("hot_order orders the topology cache, and this sampler has none: "
                             "give topology_cache too (UVA mode), or leave hot_order out (a "
                             "Feature takes its own hot_order)")
        self._place()
        self._placed = True

    @staticmethod
    def _cache_budget(size, topo: CSRTopo) -> int:
        if size is None:
            return 0
        share = parse_share(size, "topology_cache")
        if share is not None:
            return int(share * topo.indices.numel() * topo.indices.element_size())
        return parse_size(size, "topology_cache")

    def _place(self) -> None:
        topo = self.csr_topo
        eid = topo.eid if self.return_eid else None
        self._pins = []
        self._cached_indices = self._cached_starts = None
        if self.mode == "GPU":
            self._indptr = topo.indptr.to(self.device)
            self._indices = topo.indices.to(self.device)
            self._eid = eid.to(self.device) if eid is not None else None
            self._weight, self._time, self._weight_sums = (
                None if t is None else t.to(self.device)
                for t in (self._edge_weight, self._edge_time, self._row_sums()))
        elif self.mode == "UVA":
            # The offsets (8 bytes a node) go to the GPU; the neighbor lists (and edge ids)
            # stay in pinned host memory, shared first so that workers map these very pages.
            self._indptr = topo.indptr.to(self.device)
            if not all(t.is_pinned() for t in (topo.indices, eid) if t is not None):
                _share_or_warn(topo)
            self._indices = self._pin(topo.indices)
            self._eid = self._pin(eid)
            self._weight = self._pin(self._edge_weight)
            self._time = self._pin(self._edge_time)
            # Rows of pinned host memory are read by keys (coalesced), not by binary searches
            # of prefix sums, a chain of PCIe round trips a pick.
            self._weight_sums = None
            if self.topology_cache_bytes:
                order = self.hot_order
                if order is None:  # sorted on the GPU: seconds at papers100M scale
                    order = degree_order(self._indptr[1:] - self._indptr[:-1])
                self._cached_indices, self._cached_starts = build_topology_cache(
                    self._indptr, self._indices, order, self.topology_cache_bytes, self.device)
        else:
            self._indptr, self._indices, self._eid = topo.indptr, topo.indices, eid
            self._weight, self._time = self._edge_weight, self._edge_time
            self._weight_sums = self._row_sums()
        self._make_sampler()

    def _make_sampler(self) -> None:
        """The runtime's sampler over the placed arrays: what stays the same from batch to
        batch, and (on a GPU) its own batches captured as CUDA graphs and replayed."""
        self._sampler = torch.classes.quiver.SubgraphSampler(
            self._indptr, self._indices, self._eid, self.sizes, self.replace,
            self._cached_indices, self._cached_starts, self._weight, self._time,
            self.strict_time, self._ops_temporal_strategy, self.disjoint, self._weight_sums,
            self.capture_batches)
        if self.uva_row_order is not None:
            self._sampler.set_uva_row_order(int(self.uva_row_order))

    def _row_sums(self) -> Optional[Tensor]:
        """Each row's prefix sums of the weights (8 bytes an edge), so that weighted rows
        draw by binary search instead of a key per neighbor (ops.neighbor_sample)."""
        if self._edge_weight is None:
            return None
        return ops.row_cumsum(self.csr_topo.indptr, self._edge_weight)

    def _pin(self, t: Optional[Tensor]) -> Optional[Tensor]:
        """``t`` pinned in place (or a pinned copy of a small one); the pin lives with us."""
        if t is None:
            return None
        t, handle = pinned(t, self.device)
        self._pins.append(handle)
        return t

    # Pickling (mp.spawn workers): the topology travels as shared memory, GPU copies as CUDA
    # IPC handles. A worker on the GPU that holds the copy maps it (no second copy on that
    # GPU); a worker on another GPU copies it there once; UVA pins the shared host pages.
    def __getstate__(self):
        state = self.__dict__.copy()
        state.pop("_pins", None)
        state.pop("_sampler", None)  # made again where the arrays are placed
        state.pop("_every_edge_placed", None)
        if self.mode != "GPU":
            for key in ("_indptr", "_indices", "_eid", "_cached_indices", "_cached_starts",
                        "_weight", "_time", "_weight_sums"):
                state.pop(key, None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._pins = []
        # Placed at first use: spawn unpickles arguments before the worker can call
        # torch.cuda.set_device, so only then is its GPU known.
        self._placed = False

    # torch-quiver's explicit hand-over to spawned workers: the sampler pickles itself (see
    # above), so the handle is the sampler.
    def share_ipc(self) -> "GraphSageSampler":
        """What to pass to ``mp.spawn`` workers (torch-quiver's API): this sampler."""
        return self

    @classmethod
    def lazy_from_ipc_handle(cls, ipc_handle: "GraphSageSampler") -> "GraphSageSampler":
        """The worker side of :meth:`share_ipc`: the sampler, placed on the GPU current at
        its first ``sample``."""
        if not isinstance(ipc_handle, cls):
            raise TypeError(f"ipc_handle must come from GraphSageSampler.share_ipc(), got "
                            f"{type(ipc_handle).__name__}")
        return ipc_handle

    def _ensure_placed(self) -> None:
        if self._placed:
            return
        with _PLACING:  # a loader's worker threads may sample an unplaced copy at once
            if self._placed:
                return
            if self.mode != "CPU":
                self.device = torch.device("cuda", torch.cuda.current_device())
            shared_copy = getattr(self, "_indices", None)
            if not (self.mode == "GPU" and shared_copy is not None and
                    shared_copy.device == self.device):
                self._place()
            else:
                self._make_sampler()
            self._placed = True

    def placed_topology(self) -> Tuple[Tensor, Tensor]:
        """``(indptr, indices)`` as the sampling op reads them on this sampler's device (in
        GPU memory, in pinned host memory for UVA, or on the CPU), placed on first use."""
        self._ensure_placed()
        return self._indptr, self._indices

    def _seeds(self, input_nodes) -> Tensor:
        """The seeds on the sampling device; the op checks their shape, dtype and range."""
        return readable_ids(input_nodes, "seeds").to(self.device, non_blocking=True).contiguous()

    @property
    def has_rules(self) -> bool:
        """Whether sampling is weighted, temporal or disjoint (:meth:`neighbor_sample`)."""
        return self._edge_weight is not None or self.temporal or self.disjoint

    def sample_subgraph(self, input_nodes, generator: Optional[torch.Generator] = None,
                        seed_time: Optional[Tensor] = None
                        ) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
        """The raw PyG-layout output of :func:`torch_quiver_ops.ops.sample_subgraph` (of
        :meth:`neighbor_sample`, less its ``batch``, when sampling has rules)."""
        check_generator(generator)
        # A seed_time given to a sampler without times is refused there, not ignored here.
        if self.has_rules or seed_time is not None:
            out = self.neighbor_sample(input_nodes, seed_time, generator)
            return (out[0], *out[2:])
        self._ensure_placed()
        seeds = readable_ids(input_nodes, "seeds")
        if self.device.type == "cuda" and seeds.device.type == "cpu":
            # Seeds from the host (a DataLoader's) reach the GPU inside the batch's one upload.
            return self._sampler.sample_subgraph_on(seeds.contiguous(), self.device.index,
                                                    generator)
        return self._sampler.sample_subgraph(self._seeds(seeds), generator)

    def neighbor_sample(self, input_nodes, seed_time: Optional[Tensor] = None,
                        generator: Optional[torch.Generator] = None
                        ) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
        """The raw output of :func:`torch_quiver_ops.ops.neighbor_sample` with this
        sampler's weights, times and trees: ``(node_ids, batch, rows, cols, edge_ids,
        nodes_per_hop, edges_per_hop)``. ``seed_time``: one per seed (temporal sampling;
        default with node times: the seeds' own)."""
        check_generator(generator)
        self._ensure_placed()
        seeds = self._seeds(input_nodes)
        if self.temporal:
            if seed_time is None:
                if self.node_time is None:
                    raise ValueError("temporal sampling by edge time needs seed_time: one time "
                                     "per seed")
                seed_time = self.node_time[checked_node_ids(
                    as_ids(input_nodes, "seeds").cpu(), self.node_time.numel(), "seeds")]
            seed_time = integer_times(seed_time, "seed_time").to(self.device,
                                                                non_blocking=True)
        elif seed_time is not None:
            raise ValueError("seed_time is for temporal sampling: build the sampler with "
                             "edge_time or node_time")
        return self._sampler.neighbor_sample(seeds, seed_time if self.temporal else None,
                                             generator)

    def sample_negatives(self, src: Tensor, per_src: int, exclude_edges: bool = True,
                         generator: Optional[torch.Generator] = None,
                         out_rows: bool = True, *, max_trials: int = 8) -> Tensor:
        """``per_src`` negative destinations for each source, on the sampling device:
        :func:`torch_quiver_ops.ops.sample_negatives` over this sampler's topology (true
        edges redrawn unless ``exclude_edges`` is off, up to ``max_trials`` draws: a source
        linked to a share ``p`` of the nodes keeps a true edge with probability
        ``p ** max_trials``). ``out_rows``: a pair ``(s, v)`` is an edge when ``v`` is among
        ``s``'s neighbors (the orientation of ``CSRTopo``'s ``edge_index``); False: when
        ``s`` is among ``v``'s (the PyG graph store's)."""
        count, exclude_edges, trials = negative_options(per_src, exclude_edges, max_trials,
                                                        generator)
        out_rows = check_flag(out_rows, "out_rows")
        self._ensure_placed()
        indptr, indices = self._indptr, self._indices
        if self._every_edge is not None:
            placed = getattr(self, "_every_edge_placed", None)
            if placed is None or placed[0].device != self.device:
                placed = (self._every_edge.indptr.to(self.device),
                          self._every_edge.indices.to(self.device))
                self._every_edge_placed = placed
            indptr, indices = placed
        return ops.sample_negatives(indptr, indices, self._seeds(src), count, exclude_edges,
                                    trials, out_rows=out_rows, generator=generator)

    def sample(self, input_nodes, generator: Optional[torch.Generator] = None,
               seed_time: Optional[Tensor] = None) -> Tuple[Tensor, int, List[Adj]]:
        """Samples the computation graph of ``input_nodes`` (random numbers from
        ``generator``, a ``torch.Generator`` on the sampling device, else its default one).

        Returns:
            ``(n_id, batch_size, adjs)``: global ids of every sampled node with the seeds first,
            the number of seeds, and one :class:`Adj` per layer, outermost first. Layer ``l``'s
            targets are the first ``size[1]`` nodes of ``n_id``: feed ``x[n_id]`` through the
            layers, keeping ``x[:size[1]]`` after each.
        """
        return layers_of(self.sample_subgraph(input_nodes, generator, seed_time),
                         self.return_eid)

    def __repr__(self) -> str:
        return (f"GraphSageSampler(sizes={self.sizes}, mode={self.mode!r}, device={self.device}, "
                f"topo={self.csr_topo})")
