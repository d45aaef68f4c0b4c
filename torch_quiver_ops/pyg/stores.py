"""PyG's storage interfaces on ours: :class:`GraphStore` (one edge type as a
:class:`~torch_quiver_ops.CSRTopo`), :class:`HeteroGraphStore` (typed edges, sampled as one
:class:`~torch_quiver_ops.HeteroCSRTopo`), :class:`FeatureStore` (attributes, per node type
when typed, as tiered :class:`~torch_quiver_ops.Feature` tables) and :func:`to_stores`,
which builds them from a ``Data`` or a ``HeteroData``."""
from __future__ import annotations

import math
import re
import weakref
import warnings

import numpy as np
from typing import Collection, Dict, List, Optional, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.data import Data, EdgeAttr, HeteroData, TensorAttr
from torch_geometric.data import FeatureStore as _PygFeatureStore
from torch_geometric.data import GraphStore as _PygGraphStore
from torch_geometric.data.graph_store import EdgeLayout

from .. import ops
from .._device import (as_tensor, holds_integers, parse_share, parse_size, resolve_device,
                       slice_ids)
from ..feature import CACHE_POLICIES, HOST_READS, Feature
from ..hetero import EdgeType, HeteroCSRTopo
from ..topology import CSRTopo

# What PyG's loaders write into every batch themselves (filter_fn, after the data's own
# attributes): a Data's attributes of these names would only be overwritten, so no table
# holds them and no batch copies them.
LOADER_KEYS = frozenset({
    "n_id", "e_id", "batch", "batch_size", "input_id", "seed_time", "num_sampled_nodes",
    "num_sampled_edges"})
# And what the link loaders write too (the labels of their seed edges and negatives):
# RandomLinkSplit's edge_label and edge_label_index, the whole split's, must not replace a
# link batch's. A node loader keeps them as the data holds them (a per-edge edge_label for
# edge classification is gathered with its edges; others are copied whole, as PyG does).
LINK_LOADER_KEYS = frozenset({
    "edge_label", "edge_label_index", "edge_label_time", "src_index", "dst_pos_index",
    "dst_neg_index"})


# Attributes PyG's conventions hold a row per node; the second set may also hold one row (a
# graph-level label or mask). One of another length is a mistake that PyG would copy whole
# into every batch, or gather by edge ids when its length happens to be the edge count, so
# that a model read other nodes' rows unsaid (a probe): refused by name.
NODE_ROW_KEYS = frozenset({"x", "pos"})
NODE_ROW_KEYS_OR_ONE = frozenset({"y", "train_mask", "val_mask", "test_mask"})


def _check_row_per_node(key, value, num_nodes: int, where: str = "") -> None:
    """A ValueError when ``value``, a conventional node attribute by its name ``key``, does
    not hold a row for each of ``num_nodes`` nodes."""
    if not isinstance(value, (Tensor, np.ndarray)) or value.ndim == 0:
        return
    rows = value.shape[0]
    if rows != num_nodes and (key in NODE_ROW_KEYS or (key in NODE_ROW_KEYS_OR_ONE
                                                        and rows != 1)):
        raise ValueError(f"node attribute {key!r}{where} has {rows} rows, but the graph has "
                         f"{num_nodes} nodes: give it a row per node")


def _indexed_along(store, key: str, value: Tensor, what: str) -> Optional[int]:
    """The dimension PyG indexes a node or edge attribute along (0: a row per item, as our
    tables gather them; the last for a key holding "index"), or None for no table. An edge
    attribute is gathered along any (``edge_label_index`` with a column per edge, as
    RandomLinkSplit's training split holds it, had been left out of node loaders' batches
    unsaid). A node attribute along another one is refused, unless a link loader writes
    that key itself (None)."""
    dim = store._parent().__cat_dim__(key, value, store)
    if isinstance(dim, int) and dim % value.dim() == 0:
        return 0
    if what == "edge" and isinstance(dim, int):
        return dim % value.dim()
    if key in LINK_LOADER_KEYS:
        return None
    raise NotImplementedError(
        f"{what} attribute {key!r} (shape {tuple(value.shape)}) is indexed by PyG along "
        f"dimension {dim}, not 0: torch_quiver_ops.pyg gathers node rows; store it with a "
        f"row per {what} (or under a name without 'index')")


class _EdgesAlong:
    """An edge attribute PyG indexes along dimension ``dim`` > 0, gathered along it from
    the tensor as given (no copy, no GPU cache: such attributes, edge_label_index say,
    are narrow, and a link loader, which writes its own, skips it) onto ``device``."""

    def __init__(self, value: Tensor, dim: int, device: torch.device):
        self.value, self.dim, self.device = value, dim, device

    @property
    def shape(self) -> torch.Size:
        return self.value.shape

    def __getitem__(self, e_id: Tensor) -> Tensor:
        rows = self.value.index_select(self.dim, e_id.to(self.value.device))
        return rows.to(self.device, non_blocking=True)


def _table(key: str, value, what: str) -> Optional[Tensor]:
    """A node or edge attribute (``what``) as the tensor our tables gather rows of: a
    tensor as it is, a numpy array as a tensor sharing its memory (PyG's batches hold its
    rows as a tensor too); None for anything else (graph-level, copied whole). A list or
    tuple with a row per item is refused, as PyG's batches refuse it, but here by name."""
    if isinstance(value, np.ndarray) and value.ndim > 0:
        if value.dtype == object:
            raise TypeError(f"{what} attribute {key!r} is a numpy array of Python objects: "
                            f"batches gather tensors; store it as a numeric array or tensor")
        return as_tensor(np.ascontiguousarray(value))  # (another byte order is copied too)
    if isinstance(value, (list, tuple)):
        raise TypeError(f"{what} attribute {key!r} is a {type(value).__name__} with a row per "
                        f"{what}: batches gather tensors (PyG's refuse it too); store it as a "
                        f"tensor or numpy array")
    if isinstance(value, Tensor) and value.layout != torch.strided:
        raise TypeError(f"{what} attribute {key!r} is a {value.layout} tensor: batches gather "
                        f"rows of dense tensors; store it dense (value.to_dense())")
    return value if isinstance(value, Tensor) else None


def _warn_not_carried(key: str, value, owner: str = "") -> None:
    """Says that an attribute named like a key the loader writes into its batches (``n_id``,
    ``batch``, ...) is not carried into them, rather than dropping it unsaid."""
    if isinstance(value, (Tensor, np.ndarray)):
        warnings.warn(f"attribute {key!r}{owner} is not carried into batches: the loader "
                      f"writes its own {key!r} there; rename the attribute to keep it",
                      stacklevel=2)


_HETERO = ("this store holds one edge type, named None: heterogeneous graphs (typed edges) "
           "go through torch_quiver_ops.pyg.HeteroGraphStore and HeteroNeighborSampler, which "
           "the loaders build for a HeteroData")


# ---- the graph ----

class GraphStore(_PygGraphStore):
    """One edge type as a :class:`CSRTopo` for sampling: node ``v``'s neighbor list holds
    the sources ``u`` of its edges ``(u, v)``, so messages flow from sampled neighbors to
    the nodes they were sampled for, as in PyG.

    Build it from ``edge_index`` (:meth:`from_edge_index`), or by PyG's
    ``put_edge_index`` in COO, CSR or CSC layout; or hand it a ready ``CSRTopo`` whose
    neighbor lists are already in-neighbors (for an undirected graph, any CSRTopo).
    Sampled edge ids (``e_id``) are positions in the edges as they were put.
    """

    def __init__(self, topo: Optional[CSRTopo] = None):
        super().__init__()
        self.topo: Optional[CSRTopo] = topo

    @classmethod
    def from_edge_index(cls, edge_index: Tensor, num_nodes: Optional[int] = None) -> "GraphStore":
        store = cls()
        size = None if num_nodes is None else (num_nodes, num_nodes)
        edge_index = _two_rows(edge_index, "edge_index")
        store.put_edge_index((edge_index[0], edge_index[1]), edge_type=None, layout="coo",
                             size=size)
        return store

    @property
    def num_nodes(self) -> int:
        return self._topology().node_count

    def _topology(self) -> CSRTopo:
        if self.topo is None:
            raise KeyError("the graph store holds no edges yet: call put_edge_index first")
        return self.topo

    def _put_edge_index(self, edge_index, edge_attr: EdgeAttr) -> bool:
        if edge_attr.edge_type is not None:
            raise ValueError(f"{_HETERO}; got edge type {edge_attr.edge_type!r}")
        if self.topo is not None:
            raise ValueError("the graph store already holds an edge index: remove it first")
        num_nodes = max(edge_attr.size) if edge_attr.size is not None else None
        layout = EdgeLayout(edge_attr.layout)
        first, second = _id_pair(edge_index, layout)
        if layout == EdgeLayout.CSC:  # (row, colptr): already grouped by destination
            try:
                self.topo = CSRTopo(indptr=second, indices=first, num_nodes=num_nodes)
            except (TypeError, ValueError, IndexError) as error:  # named as the caller gave them
                raise type(error)(re.sub(r"\bindices\b", "row",
                                         re.sub(r"\bindptr\b", "colptr", str(error)))) from None
            return True
        if layout == EdgeLayout.CSR:  # (rowptr, col): back to COO, edge ids in CSR order
            first = _rows_of_pointers(first, second.numel(), "rowptr")
        # COO (row, col): group by destination col; CSRTopo records each edge's position.
        try:
            self.topo = CSRTopo(torch.stack([second.long(), first.long()]),
                                num_nodes=num_nodes)
        except IndexError as error:  # it names the rows as stacked here, the caller's swapped
            raise IndexError(re.sub(r"^edge_index\[([01]), ",
                                    lambda m: f"edge_index[{1 - int(m[1])}, ",
                                    str(error))) from None
        return True

    def _get_edge_index(self, edge_attr: EdgeAttr) -> Optional[Tuple[Tensor, Tensor]]:
        if self.topo is None or edge_attr.edge_type is not None:
            return None
        topo = self.topo
        sources = topo.indices.long()
        layout = EdgeLayout(edge_attr.layout)
        if layout == EdgeLayout.CSC:
            return sources, topo.indptr
        destinations = torch.repeat_interleave(
            torch.arange(topo.node_count, device=topo.degree.device), topo.degree)
        if layout == EdgeLayout.COO:
            return sources, destinations
        rowptr, cols, _ = ops.csr_from_coo(sources, destinations, topo.node_count)
        return rowptr, cols

    def _remove_edge_index(self, edge_attr: EdgeAttr) -> bool:
        if self.topo is None or edge_attr.edge_type is not None:
            return False
        self.topo = None
        return True

    def get_all_edge_attrs(self) -> List[EdgeAttr]:
        if self.topo is None:
            return []
        n = self.topo.node_count
        return [EdgeAttr(None, EdgeLayout.CSC, is_sorted=True, size=(n, n))]


def _two_rows(edge_index, what: str) -> Tensor:
    """``edge_index`` as a tensor, else a ValueError unless it is ``[2, E]``."""
    edge_index = as_tensor(edge_index)
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"{what} must have shape [2, E], got {tuple(edge_index.shape)}")
    return edge_index


def _id_pair(edge_index, layout: EdgeLayout, whose: str = "") -> Tuple[Tensor, Tensor]:
    """The two tensors of a put edge index, each 1-D and of integers (float ids would be
    truncated), of equal length in COO."""
    names = {EdgeLayout.COO: ("row", "col"), EdgeLayout.CSR: ("rowptr", "col"),
             EdgeLayout.CSC: ("row", "colptr")}[layout]
    pair = tuple(as_tensor(t) for t in edge_index)
    if len(pair) != 2:
        raise ValueError(f"{whose}edge index must be a pair {names}, got {len(pair)} tensors")
    for name, t in zip(names, pair):
        if not holds_integers(t):
            raise TypeError(f"{whose}{name} must hold integer node ids, got {t.dtype}")
        if t.dim() != 1:
            raise ValueError(f"{whose}{name} must be 1-D, got shape {tuple(t.shape)}")
    if layout == EdgeLayout.COO and pair[0].numel() != pair[1].numel():
        raise ValueError(f"{whose}row and col must have equal length, got {pair[0].numel()} "
                         f"and {pair[1].numel()}")
    return pair


def _rows_of_pointers(pointers: Tensor, count: int, what: str) -> Tensor:
    """Each of ``count`` entries' row from CSR-style ``pointers``, which must start at 0,
    never decrease and end at ``count`` (else a ValueError: the CSR is corrupt)."""
    pointers = pointers.long()
    steps = pointers.diff()
    if (pointers.numel() == 0 or int(pointers[0]) != 0 or int(pointers[-1]) != count
            or bool((steps < 0).any())):
        raise ValueError(f"{what} must start at 0, never decrease and end at {count} (the "
                         f"other tensor's length), got {pointers.tolist()[:8]}"
                         f"{'...' if pointers.numel() > 8 else ''}: the CSR is corrupt")
    return torch.repeat_interleave(torch.arange(pointers.numel() - 1, device=steps.device), steps)


class HeteroGraphStore(_PygGraphStore):
    """Typed edges, ``(src_type, relation, dst_type)`` each, sampled together as one
    :class:`HeteroCSRTopo` (built at first use, on the host). Put them with PyG's
    ``put_edge_index`` (COO, CSR or CSC; sampled edge ids are positions in the edges as
    they were put, per edge type), or build the store from a ``HeteroData`` with
    :func:`to_stores`. ``num_nodes_dict`` gives every node type's count (types without
    edges included); by default each type's count comes from the sizes put, else the
    largest id."""

    def __init__(self, num_nodes_dict: Optional[Dict[str, int]] = None):
        super().__init__()
        self.edge_index_dict: Dict[EdgeType, Tensor] = {}
        self._num_nodes: Dict[str, int] = dict(num_nodes_dict or {})
        # Each edge type's size as put: its types' counts go with it when it is removed (a
        # size put by mistake, removed and put again, had kept its counts: a probe).
        self._sizes: Dict[EdgeType, Tuple[Optional[int], Optional[int]]] = {}
        self._topos: Dict[tuple, HeteroCSRTopo] = {}

    @property
    def num_nodes_dict(self) -> Dict[str, int]:
        counts = dict(self._num_nodes)
        for (src, _, dst), size in self._sizes.items():
            for t, n in ((src, size[0]), (dst, size[1])):
                if n is not None:
                    counts[t] = max(counts.get(t, 0), n)
        for (src, _, dst), ei in self.edge_index_dict.items():
            for t, ids in ((src, ei[0]), (dst, ei[1])):
                if t not in counts:
                    counts[t] = int(ids.max()) + 1 if ids.numel() else 0
        return counts

    def topology(self, edge_time_dict=None, node_time_dict=None) -> HeteroCSRTopo:
        """The edges as one CSR (rows sorted by time within each relation when times are
        given); the untimed one is kept while the store lives."""
        if not self.edge_index_dict:
            raise KeyError("the graph store holds no edges yet: call put_edge_index first")
        if edge_time_dict is not None or node_time_dict is not None:
            return HeteroCSRTopo(self.edge_index_dict, self.num_nodes_dict, edge_time_dict,
                                 node_time_dict)
        if "plain" not in self._topos:
            self._topos["plain"] = HeteroCSRTopo(self.edge_index_dict, self.num_nodes_dict)
        return self._topos["plain"]

    def _put_edge_index(self, edge_index, edge_attr: EdgeAttr) -> bool:
        et = edge_attr.edge_type
        if not (isinstance(et, tuple) and len(et) == 3):
            raise ValueError(f"HeteroGraphStore holds typed edges (src_type, relation, "
                             f"dst_type), got edge type {et!r}: use GraphStore for one type")
        if et in self.edge_index_dict:
            raise ValueError(f"the graph store already holds edge type {et}: remove it first")
        layout = EdgeLayout(edge_attr.layout)
        first, second = _id_pair(edge_index, layout, f"edge type {et}'s ")
        if layout == EdgeLayout.CSC:  # (row, colptr)
            second = _rows_of_pointers(second, first.numel(), f"edge type {et}'s colptr")
        elif layout == EdgeLayout.CSR:  # (rowptr, col)
            first = _rows_of_pointers(first, second.numel(), f"edge type {et}'s rowptr")
        if edge_attr.size is not None:
            self._sizes[et] = tuple(None if n is None else int(n) for n in edge_attr.size)
        self.edge_index_dict[et] = torch.stack([first.long().cpu(), second.long().cpu()])
        self._topos.clear()
        return True

    def _get_edge_index(self, edge_attr: EdgeAttr) -> Optional[Tuple[Tensor, Tensor]]:
        ei = self.edge_index_dict.get(edge_attr.edge_type)
        if ei is None:
            return None
        layout = EdgeLayout(edge_attr.layout)
        if layout == EdgeLayout.COO:
            return ei[0], ei[1]
        counts = self.num_nodes_dict
        src_type, _, dst_type = edge_attr.edge_type
        if layout == EdgeLayout.CSC:
            indptr, rows, _ = ops.csr_from_coo(ei[1], ei[0], max(counts[src_type],
                                                                counts[dst_type]))
            return rows, indptr[:counts[dst_type] + 1]
        indptr, cols, _ = ops.csr_from_coo(ei[0], ei[1], max(counts[src_type], counts[dst_type]))
        return indptr[:counts[src_type] + 1], cols

    def _remove_edge_index(self, edge_attr: EdgeAttr) -> bool:
        self._topos.clear()
        self._sizes.pop(edge_attr.edge_type, None)
        return self.edge_index_dict.pop(edge_attr.edge_type, None) is not None

    def get_all_edge_attrs(self) -> List[EdgeAttr]:
        counts = self.num_nodes_dict
        return [EdgeAttr(et, EdgeLayout.COO, size=(counts[et[0]], counts[et[2]]))
                for et in self.edge_index_dict]


# ---- node attributes ----

class FeatureStore(_PygFeatureStore):
    """Node attributes as tiered :class:`Feature` tables, gathered where the ids live, and
    edge attributes beside them (:meth:`put_edge_feature`), gathered by the loader for the
    sampled edges.

    Args:
        device: the GPU that batches are built on (default: the current one), or ``"cpu"``.
        cache_size: GPU memory for the hottest rows of each table (node features): bytes,
            ``"200M"`` or ``"20%"`` of the table. Tables of at most 16 bytes a row (labels,
            masks) are held whole in GPU memory.
        cache_policy: ``"device_replicate"`` or ``"p2p_clique_replicate"``.
        csr_topo: ranks rows by degree for the cache (default: the table's own order).
        host_reads: ``"auto"``, ``"zero_copy"`` or ``"staged"``: how rows outside the
            cache are read (see :class:`Feature`).

    ``put_tensor(x, group_name=None, attr_name="x", index=None)`` (PyG's ``TensorAttr``
    fields, each named) wraps a CPU tensor without copying it (see
    :meth:`Feature.from_cpu_tensor`); :meth:`put_feature` takes a ready :class:`Feature`
    (your own hot order, cache sizes, or a store shared with worker processes).
    """

    def __init__(self, device: Union[None, int, str, torch.device] = None,
                 cache_size: Union[int, str] = 0, cache_policy: str = "device_replicate",
                 csr_topo: Optional[CSRTopo] = None, host_reads: str = "auto"):
        super().__init__()
        self.device = resolve_device(device)
        if parse_share(cache_size, "cache_size") is None:
            parse_size(cache_size, "cache_size")  # refused here, on the CPU too, not first on a GPU
        # refused here, not first at put_tensor
        if cache_policy not in CACHE_POLICIES:
            raise ValueError(f"cache_policy must be one of {', '.join(CACHE_POLICIES)}, got "
                             f"{cache_policy!r}")
        if host_reads not in HOST_READS:
            raise ValueError(f"host_reads must be one of {', '.join(HOST_READS)}, got "
                             f"{host_reads!r}")
        self.cache_size = cache_size
        self.cache_policy = cache_policy
        self.csr_topo = csr_topo
        self.host_reads = host_reads
        self._tables: Dict[str, Feature] = {}
        self._edge_tables: Dict[str, Feature] = {}

    @staticmethod
    def _name(attr: TensorAttr):
        """A table's key: its attribute name, with its node type when typed."""
        return attr.attr_name if attr.group_name is None else (attr.group_name, attr.attr_name)

    def _feature(self, table: Tensor, cache_size, by_degree: bool = True) -> Feature:
        on_gpu = self.device.type == "cuda"
        topo = self.csr_topo if by_degree else None
        if topo is not None and topo.node_count != table.size(0):
            topo = None  # not a node table of this graph: keep the rows' own order
        feature = Feature(rank=self.device.index or 0,
                          device_list=[self.device.index] if on_gpu else [],
                          device_cache_size=cache_size if on_gpu else 0,
                          cache_policy=self.cache_policy, csr_topo=topo,
                          host_reads=self.host_reads)
        return feature.from_cpu_tensor(table)

    def check_node_rows(self, num_nodes: Union[int, Dict[str, int]]) -> None:
        """A ValueError naming any node table with fewer rows than the graph's
        ``num_nodes`` (a count per node type for a heterogeneous graph; untyped tables
        are not compared there): a loader over a (FeatureStore, GraphStore) pair checks
        this when it is made, where a short table had failed at the first batch to reach
        past it, naming neither (a probe). A longer one is fine: a graph store counted from
        its edges misses the last nodes without edges, whose rows are never read."""
        for key, table in self._tables.items():
            node_type, name = (None, key) if isinstance(key, str) else key
            if isinstance(num_nodes, dict):
                count = None if node_type is None else num_nodes.get(node_type)
            else:
                count = num_nodes if node_type is None else None
            if count is not None and len(table) < count:
                where = "" if node_type is None else f" of node type {node_type!r}"
                raise ValueError(f"node table {name!r}{where} has {len(table)} rows, but the "
                                 f"graph store has {count} nodes: give it a row per node")

    def put_feature(self, feature: Feature, attr_name: str = "x",
                    node_type: Optional[str] = None) -> None:
        """Stores a ready :class:`Feature` as node attribute ``attr_name`` (of
        ``node_type`` on a heterogeneous graph), or a
        :class:`~torch_quiver_ops.dist.DistFeature`: a table split over hosts, each batch's
        rows fetched from their owners (with a collective transport every host must build
        its batches alike, as a training loop does)."""
        self._tables[attr_name if node_type is None else (node_type, attr_name)] = feature

    def put_edge_feature(self, table: Union[Tensor, Feature],
                         attr_name: str = "edge_attr",
                         edge_type: Optional[EdgeType] = None) -> None:
        """Stores edge attribute ``attr_name``: a row per edge, in the order of the graph's
        ``edge_index`` (what ``e_id`` counts). Loaders put its rows for the sampled edges in
        every batch (as ``batch[attr_name]``, beside ``e_id``). A CPU tensor is wrapped
        without a copy: held whole in GPU memory when its rows are small (at most 16
        bytes), else tiered as node tables are (the store's ``cache_size``)."""
        if not isinstance(table, Feature):
            table = as_tensor(table).cpu()  # (Feature warns if it requires grad)
            if table.dim() == 0:
                raise ValueError(f"edge attribute {attr_name!r} must hold a row per edge, got "
                                 f"a scalar")
            cache = "100%" if _whole_on_gpu(table) else self.cache_size
            table = self._feature(table, cache, by_degree=False)
        self._edge_tables[attr_name if edge_type is None else (edge_type, attr_name)] = table

    @property
    def edge_feature_names(self) -> List[str]:
        return [k if isinstance(k, str) else f"{'__'.join(k[0])}.{k[1]}"
                for k in self._edge_tables]

    def edge_features(self, e_id: Tensor, edge_type: Optional[EdgeType] = None,
                      skip: Collection[str] = ()) -> Dict[str, Tensor]:
        """Every edge attribute's rows (of ``edge_type`` on a heterogeneous graph) for the
        edges ``e_id`` (positions in that edge type's ``edge_index``), on the store's
        device; none of the attributes named in ``skip``."""
        if e_id.device.type == "cpu" and self.device.type == "cuda":
            e_id = e_id.to(self.device, non_blocking=True)
        if edge_type is None:
            return {name: table[e_id] for name, table in self._edge_tables.items()
                    if isinstance(name, str) and name not in skip}
        return {key[1]: table[e_id] for key, table in self._edge_tables.items()
                if not isinstance(key, str) and key[0] == edge_type and key[1] not in skip}

    def _put_tensor(self, tensor, attr: TensorAttr) -> bool:
        name = self._name(attr)
        if isinstance(tensor, Feature):
            self.put_feature(tensor, name)
            return True
        if attr.index is not None and not (isinstance(attr.index, slice)
                                           and attr.index == slice(None)):
            raise NotImplementedError(f"put_tensor of some rows of {name!r}: put the whole "
                                      f"table (index=None)")
        tensor = as_tensor(tensor).cpu()  # (Feature warns if it requires grad)
        cache = "100%" if _whole_on_gpu(tensor) else self.cache_size
        self._tables[name] = self._feature(tensor, cache)
        return True

    def _get_tensor(self, attr: TensorAttr) -> Optional[Tensor]:
        name = self._name(attr)
        if name not in self._tables:
            raise KeyError(f"the feature store holds no node attribute {name!r}; it holds "
                           f"{sorted(map(str, self._tables))}")
        table = self._tables[name]
        index = attr.index
        if index is None or (isinstance(index, slice) and index == slice(None)):
            index = torch.arange(len(table), device="cpu")
        elif isinstance(index, slice):  # PyG's IndexType allows slices
            index = slice_ids(index, len(table))
        elif not isinstance(index, Tensor):
            index = as_tensor(index)
        if index.device.type == "cpu" and self.device.type == "cuda":
            index = index.to(self.device, non_blocking=True)
        return table[index]

    def _remove_tensor(self, attr: TensorAttr) -> bool:
        return self._tables.pop(self._name(attr), None) is not None

    def _get_tensor_size(self, attr: TensorAttr) -> Optional[Tuple[int, ...]]:
        table = self._tables.get(self._name(attr))
        return None if table is None else tuple(table.shape)

    def get_all_tensor_attrs(self) -> List[TensorAttr]:
        return [TensorAttr(None, key) if isinstance(key, str) else TensorAttr(*key)
                for key in self._tables]

    def __getstate__(self):
        return self.__dict__.copy()  # Features pickle themselves (shared memory, IPC)

    def __repr__(self) -> str:
        edges = {k: tuple(v.shape) for k, v in self._edge_tables.items()}
        return (f"FeatureStore(device={self.device}, tables="
                f"{ {k: tuple(v.shape) for k, v in self._tables.items()} }"
                + (f", edge tables={edges})" if edges else ")"))


# One store per edge_index / feature table and device while any loader holds it, so the
# loaders of one Data (train, validation, test) share a topology and a GPU cache instead of
# building one each. Both ends are weak: the cache keeps neither the tensors nor the stores.
_SHARED: Dict[tuple, tuple] = {}


def tensor_version(value) -> Optional[int]:
    """A tensor's version, which each in-place change bumps (None for anything else, and for
    an inference tensor, which keeps none: it cannot be changed in place outside inference
    mode)."""
    if not isinstance(value, Tensor) or value.is_inference():
        return None
    return value._version


def data_stamp(data) -> tuple:
    """What a ``Data`` or ``HeteroData`` holds: every attribute of every store by identity,
    and each tensor's version."""
    return tuple((getattr(store, "_key", None), key, id(value), tensor_version(value))
                 for store in data.stores for key, value in store.items())


def graph_stamp(data: HeteroData) -> tuple:
    """What a ``HeteroData``'s graph store is built from: each node type's count and each
    edge type's edge_index, by identity and version."""
    edges = {et: data[et].get("edge_index") for et in data.edge_types}
    return (tuple((t, data[t].num_nodes) for t in data.node_types),
            tuple((et, id(ei), tensor_version(ei)) for et, ei in edges.items()))


def _shared(key: tuple, owner, build, sources: Tuple[Tensor, ...] = ()):
    """The value built for ``key`` while ``owner`` and the value live, else ``build()``.
    ``sources`` are the tensors a key names by id: the entry holds only while they live
    (another tensor may take a dead one's id)."""
    entry = _SHARED.get(key)
    # One strong reference, taken once: a second call of the weak one could meet the value
    # collected in between (a cycle the garbage collector frees on any allocation).
    value = entry[1]() if entry is not None else None
    if (value is not None and entry[0]() is owner
            and all(ref() is s for ref, s in zip(entry[2], sources))):
        return value
    for stale in [k for k, (o, v, refs) in _SHARED.items()
                  if o() is None or v() is None or any(r() is None for r in refs)]:
        del _SHARED[stale]
    value = build()
    _SHARED[key] = (weakref.ref(owner), weakref.ref(value),
                    tuple(weakref.ref(s) for s in sources))
    return value


def _whole_on_gpu(table: Tensor) -> bool:
    """Labels, masks and other tables of a few bytes a row are held whole in GPU memory."""
    # A row's size from the shape, not table[0]: a type may have no nodes or edges.
    return table.dim() <= 1 or table.element_size() * math.prod(table.shape[1:]) <= 16


def to_stores(data: Data, device: Union[None, int, str, torch.device] = None,
              cache_size: Union[int, str] = 0, cache_policy: str = "device_replicate",
              host_reads: str = "auto") -> Tuple[FeatureStore, GraphStore]:
    """A ``Data``'s graph and node and edge attributes as a :class:`FeatureStore` and
    :class:`GraphStore` for batches on ``device``. ``x`` (and every other node attribute
    of more than 16 bytes a row) gets ``cache_size`` of GPU memory for its hottest rows (by
    in-degree), read outside it as ``host_reads`` says (see :class:`Feature`); labels and
    masks are held whole on the GPU. Edge attributes (``edge_attr``, ``edge_weight``, any
    tensor with a row per edge) go in as :meth:`FeatureStore.put_edge_feature`; one that PyG
    indexes along another dimension (``edge_label_index`` with a column per edge) is gathered
    along it. Tables stay where they are (pinned in place): no host copy. While stores built here live, calls for the same
    tensors reuse them (one topology, one GPU cache)."""
    if isinstance(data, HeteroData):
        # Keyed by what the data holds too: a HeteroData changed since is built again, the
        # graph store only when its edges or node counts changed (new features keep it, and
        # the sampler on it).
        graph = _shared(("hetero graph", id(data), graph_stamp(data)), data,
                        lambda: _hetero_graph(data),
                        tuple(data[et].edge_index for et in data.edge_types
                              if isinstance(data[et].get("edge_index"), Tensor)))
        features = _shared(("hetero", id(data), data_stamp(data), id(graph),
                            str(resolve_device(device)), str(cache_size), cache_policy,
                            host_reads), data,
                           lambda: _hetero_stores(data, graph, device, cache_size, cache_policy,
                                                  host_reads),
                           tuple(v for store in data.stores for v in store.values()
                                 if isinstance(v, Tensor)))
        return features, features.graph_store
    if getattr(data, "edge_index", None) is None:
        raise ValueError("the Data has no edge_index")
    num_nodes = data.num_nodes
    edge_index = data.edge_index
    # Keyed by each tensor's version too: one changed in place is built again.
    graph = _shared(("graph", id(edge_index), tensor_version(edge_index), num_nodes), edge_index,
                    lambda: GraphStore.from_edge_index(edge_index, num_nodes))
    device = resolve_device(device)
    features = FeatureStore(device, cache_size, cache_policy, graph.topo, host_reads)
    for key, value in data.items():
        if key in LOADER_KEYS:
            _warn_not_carried(key, value)
        if key == "edge_index" or key in LOADER_KEYS:
            continue
        _check_row_per_node(key, value, num_nodes)
        node = data.is_node_attr(key)
        if not node and not data.is_edge_attr(key):
            continue  # graph-level: the loader copies it into every batch, as PyG's does
        value = _table(key, value, "node" if node else "edge")
        dim = None if value is None else _indexed_along(data._store, key, value,
                                                        "node" if node else "edge")
        if dim is None:
            continue
        if dim:
            features._edge_tables[key] = _EdgesAlong(value, dim, device)
            continue
        cache = "100%" if _whole_on_gpu(value) else cache_size
        table = _shared(("feature" if node else "edge feature", id(value), tensor_version(value),
                         str(device),
                         str(cache), cache_policy, host_reads), value,
                        lambda value=value, cache=cache, node=node:
                        features._feature(value, cache, by_degree=node))
        if node:
            features.put_feature(table, key)
        else:
            features.put_edge_feature(table, key)
    return features, graph


def split_cache_budget(degree: Dict[object, Tensor], row_bytes: Dict[object, int],
                       budget: int) -> Dict[object, int]:
    """How many rows of each table one GPU cache of ``budget`` bytes holds when all tables
    compete for it: rows ranked by expected reads per byte (a row's node degree over its
    bytes), the best taken until the budget is spent. Each table then caches its own
    top rows by degree, which together are exactly that choice."""
    keys = [k for k in degree if degree[k].numel() > 0 and row_bytes[k] > 0]
    if budget <= 0 or not keys:
        return {k: 0 for k in degree}
    scores = torch.cat([degree[k].double() / row_bytes[k] for k in keys])
    sizes = torch.cat([torch.full((degree[k].numel(),), float(row_bytes[k]),
                                  dtype=torch.double) for k in keys])
    table = torch.cat([torch.full((degree[k].numel(),), i, dtype=torch.long)
                       for i, k in enumerate(keys)])
    order = torch.sort(scores, descending=True, stable=True).indices
    taken = order[sizes[order].cumsum(0) <= budget]
    counts = torch.bincount(table[taken], minlength=len(keys)).tolist()
    out = {k: 0 for k in degree}
    out.update(zip(keys, counts))
    return out


def _hetero_graph(data: HeteroData) -> HeteroGraphStore:
    """Every edge type of a ``HeteroData`` in one :class:`HeteroGraphStore`."""
    if not data.edge_types:
        raise ValueError("the HeteroData has no edge types: nothing to sample")
    # A type whose count PyG cannot tell (no attributes) is counted from its edges.
    graph = HeteroGraphStore({t: int(data[t].num_nodes) for t in data.node_types
                              if data[t].num_nodes is not None})
    for et in data.edge_types:
        ei = data[et].get("edge_index")
        if ei is None:
            raise ValueError(f"edge type {et} has no edge_index (adjacency given only as "
                             f"adj_t is not supported: give edge_index)")
        counts = graph.num_nodes_dict
        ei = _two_rows(ei, f"edge type {et}'s edge_index")
        graph.put_edge_index((ei[0], ei[1]), edge_type=et, layout="coo",
                             size=(counts.get(et[0]), counts.get(et[2])))
    return graph


def _hetero_stores(data: HeteroData, graph: HeteroGraphStore, device, cache_size,
                   cache_policy: str, host_reads: str) -> FeatureStore:
    """A ``HeteroData``'s attributes as a typed feature store beside its graph store
    ``graph`` (held as ``graph_store``):
    every node type's attributes as typed tables in one :class:`FeatureStore`, the tables
    of more than 16 bytes a row sharing one GPU cache of ``cache_size`` (bytes, or a share
    of their total bytes) by hotness (:func:`split_cache_budget`, by in-degree over every
    relation), the small ones (labels, masks) held whole on the GPU; edge attributes by
    edge type. Node types without attributes need none (PyG models give them embeddings)."""
    device = resolve_device(device)
    degree = graph.topology().degree_dict()
    features = FeatureStore(device, cache_size, cache_policy, None, host_reads)
    big, small = {}, {}
    for t in data.node_types:
        store = data[t]
        # (PyG counts none for a type holding only labels or masks: the graph's count then)
        count = store.num_nodes
        count = count if count is not None else graph.num_nodes_dict.get(t)
        for key, value in store.items():
            if count is not None:
                _check_row_per_node(key, value, count, f" of node type {t!r}")
            if key in LOADER_KEYS:
                _warn_not_carried(key, value, f" of node type {t!r}")
            if key in LOADER_KEYS or not store.is_node_attr(key):
                continue
            value = _table(key, value, "node")
            if value is None or _indexed_along(store, key, value, "node") is None:
                continue
            (small if _whole_on_gpu(value) else big)[(t, key)] = value
    share = parse_share(cache_size, "cache_size")
    total = sum(v.nbytes for v in big.values())
    budget = int(share * total) if share is not None else parse_size(cache_size, "cache_size")
    on_gpu = device.type == "cuda"
    rows = split_cache_budget({k: degree[k[0]] for k in big},
                              {k: v[0].nbytes if v.size(0) else 0 for k, v in big.items()},
                              budget if on_gpu else 0)
    for (t, key), value in big.items():
        feature = Feature(rank=device.index or 0, device_list=[device.index] if on_gpu else [],
                          device_cache_size=rows[(t, key)] * (value[0].nbytes if value.size(0)
                                                              else 0) if on_gpu else 0,
                          cache_policy=cache_policy, host_reads=host_reads)
        hot = torch.sort(degree[t], descending=True, stable=True).indices
        features.put_feature(feature.from_cpu_tensor(value.cpu(), hot_order=hot),
                             key, node_type=t)
    for (t, key), value in small.items():
        features.put_feature(features._feature(value.cpu(), "100%", by_degree=False),
                             key, node_type=t)
    for et in data.edge_types:
        store = data[et]
        for key, value in store.items():
            if key in LOADER_KEYS:
                _warn_not_carried(key, value, f" of edge type {et!r}")
            if key == "edge_index" or key in LOADER_KEYS or not store.is_edge_attr(key):
                continue
            value = _table(key, value, "edge")
            dim = None if value is None else _indexed_along(store, key, value, "edge")
            if dim is None:
                continue
            if dim:
                features._edge_tables[(et, key)] = _EdgesAlong(value, dim, device)
            else:
                features.put_edge_feature(value, key, edge_type=et)
    features.cache_rows = rows  # what the shared budget gave each table (for reports)
    features.graph_store = graph
    return features
