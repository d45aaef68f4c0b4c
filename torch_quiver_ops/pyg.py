"""PyG on torch-quiver-ops: ``NeighborLoader`` sampling on the GPU and gathering through the
tiered feature store.

Three pieces plug into PyG's own loaders, and one loader ties them together:

* :class:`GraphStore`: a PyG ``GraphStore`` holding one edge type as a :class:`CSRTopo`
  whose neighbor lists are each node's in-neighbors (the sources of its incoming edges,
  what PyG's ``NeighborLoader`` samples);
* :class:`FeatureStore`: a PyG ``FeatureStore`` whose node attributes are tiered
  :class:`Feature` tables (hot rows in GPU memory, the rest read from pinned host memory);
* :class:`NeighborSampler`: a PyG ``BaseSampler`` on :class:`GraphSageSampler` (GPU, UVA or
  CPU mode), returning PyG's ``SamplerOutput`` with per-hop counts, so ``trim_to_layer``
  works;
* :class:`NeighborLoader`: PyG's ``NeighborLoader`` with the three above, taking a ``Data``
  or a ``(FeatureStore, GraphStore)`` pair. Batches are PyG ``Data`` objects on the sampling
  device carrying ``x``, ``y`` (every node attribute), ``edge_index``, ``n_id``, ``e_id``
  (with ``return_eid=True``), ``batch_size``, ``input_id``, ``num_sampled_nodes`` and
  ``num_sampled_edges``.

Homogeneous graphs only for now: a ``HeteroData``, an edge type or a node type other than
``None`` raises ``NotImplementedError``. :class:`GraphSageSampler` is re-exported here so
torch-quiver scripts that use ``quiver.pyg.GraphSageSampler`` run unchanged, and
:class:`~torch_quiver_ops.loader.Prefetcher` so a PyG script imports all it needs from here.
"""
from __future__ import annotations

import warnings
import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor
from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler
from torch_geometric.data import Data, EdgeAttr, HeteroData, TensorAttr
from torch_geometric.data import FeatureStore as _PygFeatureStore
from torch_geometric.data import GraphStore as _PygGraphStore
from torch_geometric.data.graph_store import EdgeLayout
from torch_geometric.loader import NeighborLoader as _PygNeighborLoader
from torch_geometric.sampler import BaseSampler, NodeSamplerInput, SamplerOutput
from torch_geometric.sampler.base import NumNeighbors

from . import ops
from ._device import resolve_device
from .feature import Feature
from .loader import Prefetcher
from .sampler import GraphSageSampler
from .topology import CSRTopo

__all__ = ["FeatureStore", "GraphStore", "GraphSageSampler", "NeighborLoader",
           "NeighborSampler", "Prefetcher", "to_stores"]

_HETERO = ("heterogeneous graphs are not supported yet by torch_quiver_ops.pyg (one node "
           "type and one edge type, named None)")


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
            raise NotImplementedError(f"{_HETERO}; got edge type {edge_attr.edge_type!r}")
        if self.topo is not None:
            raise ValueError("the graph store already holds an edge index: remove it first")
        num_nodes = max(edge_attr.size) if edge_attr.size is not None else None
        first, second = (torch.as_tensor(t) for t in edge_index)
        layout = EdgeLayout(edge_attr.layout)
        if layout == EdgeLayout.CSC:  # (row, colptr): already grouped by destination
            self.topo = CSRTopo(indptr=second, indices=first, num_nodes=num_nodes)
            return True
        if layout == EdgeLayout.CSR:  # (rowptr, col): back to COO, edge ids in CSR order
            rowptr = first.long()
            first = torch.repeat_interleave(torch.arange(rowptr.numel() - 1),
                                            rowptr[1:] - rowptr[:-1])
        # COO (row, col): group by destination col; CSRTopo records each edge's position.
        self.topo = CSRTopo(torch.stack([second.long(), first.long()]), num_nodes=num_nodes)
        return True

    def _get_edge_index(self, edge_attr: EdgeAttr) -> Optional[Tuple[Tensor, Tensor]]:
        if self.topo is None or edge_attr.edge_type is not None:
            return None
        topo = self.topo
        sources = topo.indices.long()
        layout = EdgeLayout(edge_attr.layout)
        if layout == EdgeLayout.CSC:
            return sources, topo.indptr
        destinations = torch.repeat_interleave(torch.arange(topo.node_count), topo.degree)
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


# ---- node attributes ----

class FeatureStore(_PygFeatureStore):
    """Node attributes as tiered :class:`Feature` tables, gathered where the ids live.

    Args:
        device: the GPU that batches are built on (default: the current one), or ``"cpu"``.
        cache_size: GPU memory for the hottest rows of each table (node features): bytes,
            ``"200M"`` or ``"20%"`` of the table. Tables of at most 16 bytes a row (labels,
            masks) are held whole in GPU memory.
        cache_policy: ``"device_replicate"`` or ``"p2p_clique_replicate"``.
        csr_topo: ranks rows by degree for the cache (default: the table's own order).
        host_reads: ``"auto"``, ``"zero_copy"`` or ``"staged"``: how rows outside the
            cache are read (see :class:`Feature`).

    ``put_tensor(x, attr_name="x")`` wraps a CPU tensor without copying it (see
    :meth:`Feature.from_cpu_tensor`); :meth:`put_feature` takes a ready :class:`Feature`
    (your own hot order, cache sizes, or a store shared with worker processes).
    """

    def __init__(self, device: Union[None, int, str, torch.device] = None,
                 cache_size: Union[int, str] = 0, cache_policy: str = "device_replicate",
                 csr_topo: Optional[CSRTopo] = None, host_reads: str = "auto"):
        super().__init__()
        self.device = resolve_device(device)
        self.cache_size = cache_size
        self.cache_policy = cache_policy
        self.csr_topo = csr_topo
        self.host_reads = host_reads
        self._tables: Dict[str, Feature] = {}

    @staticmethod
    def _name(attr: TensorAttr) -> str:
        if attr.group_name is not None:
            raise NotImplementedError(f"{_HETERO}; got node type {attr.group_name!r}")
        return attr.attr_name

    def _feature(self, table: Tensor, cache_size) -> Feature:
        on_gpu = self.device.type == "cuda"
        topo = self.csr_topo
        if topo is not None and topo.node_count != table.size(0):
            topo = None  # not a node table of this graph: keep the rows' own order
        feature = Feature(rank=self.device.index or 0,
                          device_list=[self.device.index] if on_gpu else [],
                          device_cache_size=cache_size if on_gpu else 0,
                          cache_policy=self.cache_policy, csr_topo=topo,
                          host_reads=self.host_reads)
        return feature.from_cpu_tensor(table)

    def put_feature(self, feature: Feature, attr_name: str = "x") -> None:
        """Stores a ready :class:`Feature` as node attribute ``attr_name``."""
        self._tables[attr_name] = feature

    def _put_tensor(self, tensor, attr: TensorAttr) -> bool:
        name = self._name(attr)
        if isinstance(tensor, Feature):
            self.put_feature(tensor, name)
            return True
        if attr.index is not None and not (isinstance(attr.index, slice)
                                           and attr.index == slice(None)):
            raise NotImplementedError(f"put_tensor of some rows of {name!r}: put the whole "
                                      f"table (index=None)")
        tensor = torch.as_tensor(tensor).detach().cpu()
        cache = "100%" if _whole_on_gpu(tensor) else self.cache_size
        self._tables[name] = self._feature(tensor, cache)
        return True

    def _get_tensor(self, attr: TensorAttr) -> Optional[Tensor]:
        name = self._name(attr)
        if name not in self._tables:
            raise KeyError(f"the feature store holds no node attribute {name!r}; it holds "
                           f"{sorted(self._tables)}")
        table = self._tables[name]
        index = attr.index
        if index is None or (isinstance(index, slice) and index == slice(None)):
            index = torch.arange(len(table))
        elif not isinstance(index, Tensor):
            index = torch.as_tensor(index)
        if index.device.type == "cpu" and self.device.type == "cuda":
            index = index.to(self.device, non_blocking=True)
        return table[index]

    def _remove_tensor(self, attr: TensorAttr) -> bool:
        return self._tables.pop(self._name(attr), None) is not None

    def _get_tensor_size(self, attr: TensorAttr) -> Optional[Tuple[int, ...]]:
        table = self._tables.get(self._name(attr))
        return None if table is None else tuple(table.shape)

    def get_all_tensor_attrs(self) -> List[TensorAttr]:
        return [TensorAttr(None, name) for name in self._tables]

    def __getstate__(self):
        return self.__dict__.copy()  # Features pickle themselves (shared memory, IPC)

    def __repr__(self) -> str:
        return f"FeatureStore(device={self.device}, tables={ {k: tuple(v.shape) for k, v in self._tables.items()} })"


# One store per edge_index / feature table and device while any loader holds it, so the
# loaders of one Data (train, validation, test) share a topology and a GPU cache instead of
# building one each. Both ends are weak: the cache keeps neither the tensors nor the stores.
_SHARED: Dict[tuple, tuple] = {}


def _shared(key: tuple, owner: Tensor, build):
    entry = _SHARED.get(key)
    if entry is not None and entry[0]() is owner and entry[1]() is not None:
        return entry[1]()
    value = build()
    _SHARED[key] = (weakref.ref(owner), weakref.ref(value))
    return value


def _whole_on_gpu(table: Tensor) -> bool:
    """Labels, masks and other tables of a few bytes a row are held whole in GPU memory."""
    return table.dim() <= 1 or table[0].nbytes <= 16


def to_stores(data: Data, device: Union[None, int, str, torch.device] = None,
              cache_size: Union[int, str] = 0, cache_policy: str = "device_replicate",
              host_reads: str = "auto") -> Tuple[FeatureStore, GraphStore]:
    """A ``Data``'s graph and node attributes as a :class:`FeatureStore` and
    :class:`GraphStore` for batches on ``device``. ``x`` (and every other node attribute
    of more than 16 bytes a row) gets ``cache_size`` of GPU memory for its hottest rows (by
    in-degree), read outside it as ``host_reads`` says (see :class:`Feature`); labels and
    masks are held whole on the GPU. Tables stay where they are
    (pinned in place): no host copy. While stores built here live, calls for the same
    tensors reuse them (one topology, one GPU cache)."""
    if isinstance(data, HeteroData):
        raise NotImplementedError(_HETERO)
    if getattr(data, "edge_index", None) is None:
        raise ValueError("the Data has no edge_index")
    num_nodes = data.num_nodes
    edge_index = data.edge_index
    graph = _shared(("graph", id(edge_index), num_nodes), edge_index,
                    lambda: GraphStore.from_edge_index(edge_index, num_nodes))
    device = resolve_device(device)
    features = FeatureStore(device, cache_size, cache_policy, graph.topo, host_reads)
    for key, value in data.items():
        if key == "edge_index" or not isinstance(value, Tensor) or not data.is_node_attr(key):
            continue
        cache = "100%" if _whole_on_gpu(value) else cache_size
        table = _shared(("feature", id(value), str(device), str(cache), cache_policy,
                         host_reads), value,
                        lambda value=value, cache=cache: features._feature(value, cache))
        features.put_feature(table, key)
    return features, graph


# ---- sampling ----

def _fanouts(num_neighbors) -> List[int]:
    if isinstance(num_neighbors, NumNeighbors):
        num_neighbors = num_neighbors.values
    if isinstance(num_neighbors, dict):
        raise NotImplementedError(f"{_HETERO}; got num_neighbors per edge type")
    return [int(n) for n in num_neighbors]


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
    """

    def __init__(self, graph: Union[GraphStore, CSRTopo], num_neighbors,
                 device: Union[None, int, str, torch.device] = None, mode: Optional[str] = None,
                 replace: bool = False, return_eid: bool = False,
                 subgraph_type: str = "directional", generator: Optional[torch.Generator] = None):
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
                           eid=torch.arange(topo.edge_count))
        self.subgraph_type = subgraph_type
        self.sampler = GraphSageSampler(topo, _fanouts(num_neighbors), device, mode, replace,
                                        return_eid)
        self._own_generator = generator is None
        self.generator = generator if generator is not None else torch.Generator(self.device)
        self.reseed()

    def reseed(self) -> None:
        """Seeds the sampler's own generator with one draw from PyTorch's default CPU
        generator (a generator given by the user is left alone)."""
        if self._own_generator:
            self.generator.manual_seed(int(torch.empty((), dtype=torch.int64).random_()))

    @property
    def device(self) -> torch.device:
        return self.sampler.device

    @property
    def num_neighbors(self) -> List[int]:
        return self.sampler.sizes

    def sample_from_nodes(self, inputs: NodeSamplerInput, **kwargs) -> SamplerOutput:
        if inputs.time is not None:
            raise NotImplementedError("temporal sampling (input_time / time_attr) is not "
                                      "supported by torch_quiver_ops.pyg")
        if inputs.input_type is not None:
            raise NotImplementedError(f"{_HETERO}; got input nodes of type {inputs.input_type!r}")
        generator = self.generator
        if self._own_generator and torch.utils.data.get_worker_info() is not None:
            # A DataLoader worker (CPU mode) inherited the parent's generator state; its
            # default generator is the one PyTorch seeds per worker.
            generator = None
        node, row, col, edge, nodes_per_hop, edges_per_hop = self.sampler.sample_subgraph(
            inputs.node, generator)
        out = SamplerOutput(node=node, row=row, col=col,
                            edge=edge if self.sampler.return_eid else None,
                            num_sampled_nodes=nodes_per_hop.tolist(),
                            num_sampled_edges=edges_per_hop.tolist(),
                            metadata=(inputs.input_id, inputs.time))
        if self.subgraph_type == "bidirectional":
            out = out.to_bidirectional()
        return out

    def sample_from_edges(self, inputs, neg_sampling=None):
        raise NotImplementedError("link-level loaders (LinkNeighborLoader) are not supported "
                                  "by torch_quiver_ops.pyg yet")

    @property
    def edge_permutation(self) -> None:
        return None  # e_id already holds the ids of the edges as they were put


# ---- the loader ----

class NeighborLoader(_PygNeighborLoader):
    """PyG's ``NeighborLoader``, sampling with torch-quiver-ops on the GPU (or CPU) and
    gathering node attributes through tiered feature stores.

    Takes PyG's arguments (``data``, ``num_neighbors``, ``input_nodes``, ``replace``,
    ``subgraph_type``, ``transform``, ``batch_size``, ``shuffle``, ``drop_last``, ...) plus:

    Args:
        device: the GPU to sample on and build batches on (default: the current GPU, else
            the CPU), or ``"cpu"``.
        mode: ``"GPU"`` (topology in GPU memory), ``"UVA"`` (in pinned host memory, read by
            the GPU) or ``"CPU"``; default ``"UVA"`` on a GPU.
        cache_size: GPU memory for the hottest rows of ``x`` when ``data`` is a ``Data``:
            bytes, ``"2G"`` or ``"20%"`` (default 0: every row read from pinned host memory).
        cache_policy: ``"device_replicate"`` or ``"p2p_clique_replicate"``.
        host_reads: ``"auto"``, ``"zero_copy"`` or ``"staged"``: how rows outside the
            cache are read (see :class:`Feature`).
        return_eid: put the sampled edges' ids in ``batch.e_id``.
        sampling_generator: a ``torch.Generator`` on the sampling device for the sampling
            draws. By default the sampler has its own, seeded at the start of every epoch
            from PyTorch's default generator (as the shuffle is), so ``torch.manual_seed``
            reproduces the batches whatever else draws random numbers meanwhile (dropout,
            or a loader that prefetches batches ahead of the model).

    Batches live on the sampling device: ``batch.to(device)`` costs nothing. With a GPU
    sampler the loader runs in the main process (``num_workers`` is set to 0: CUDA does
    not work in forked workers, and one GPU samples faster than many CPU workers).
    Temporal, weighted, disjoint and heterogeneous sampling are not supported yet and raise
    ``NotImplementedError``.
    """

    def __init__(self, data: Union[Data, Tuple[FeatureStore, GraphStore]], num_neighbors,
                 input_nodes=None, input_time: Optional[Tensor] = None, replace: bool = False,
                 subgraph_type: str = "directional", disjoint: bool = False,
                 temporal_strategy: str = "uniform", time_attr: Optional[str] = None,
                 weight_attr: Optional[str] = None, transform=None,
                 transform_sampler_output=None, is_sorted: bool = False,
                 filter_per_worker: Optional[bool] = None,
                 neighbor_sampler: Optional[NeighborSampler] = None, directed: bool = True, *,
                 device: Union[None, int, str, torch.device] = None, mode: Optional[str] = None,
                 cache_size: Union[int, str] = 0, cache_policy: str = "device_replicate",
                 host_reads: str = "auto", return_eid: bool = False,
                 sampling_generator: Optional[torch.Generator] = None,
                 **kwargs):
        unsupported = {"input_time": input_time is not None, "time_attr": time_attr is not None,
                       "weight_attr": weight_attr is not None, "disjoint": disjoint,
                       "directed=False": not directed}
        named = [name for name, given in unsupported.items() if given]
        if named:
            raise NotImplementedError(f"torch_quiver_ops.pyg.NeighborLoader does not support "
                                      f"{', '.join(named)} yet")
        if isinstance(data, HeteroData):
            raise NotImplementedError(_HETERO)
        if isinstance(data, Data):
            stores = to_stores(data, device, cache_size, cache_policy, host_reads)
        elif isinstance(data, (tuple, list)) and len(data) == 2:
            stores = tuple(data)
        else:
            raise TypeError(f"data must be a torch_geometric Data or a (FeatureStore, "
                            f"GraphStore) pair, got {type(data).__name__}")
        feature_store, graph_store = stores
        if neighbor_sampler is None:
            if not isinstance(graph_store, GraphStore):
                raise TypeError(f"the graph store must be a torch_quiver_ops.pyg.GraphStore, "
                                f"got {type(graph_store).__name__}")
            neighbor_sampler = NeighborSampler(graph_store, num_neighbors, device, mode, replace,
                                               return_eid, subgraph_type, sampling_generator)
        if input_nodes is None:
            input_nodes = torch.arange(graph_store.num_nodes)
        elif isinstance(input_nodes, Tensor) and input_nodes.device.type != "cpu":
            input_nodes = input_nodes.cpu()  # indexed per batch on the host, as PyG does
        if neighbor_sampler.device.type == "cuda" and kwargs.get("num_workers", 0) > 0:
            warnings.warn("torch_quiver_ops.pyg.NeighborLoader samples on the GPU in the main "
                          f"process; num_workers={kwargs['num_workers']} is set to 0",
                          stacklevel=2)
            kwargs["num_workers"] = 0
            kwargs.pop("persistent_workers", None)
            kwargs.pop("prefetch_factor", None)
        self.quiver_sampler = neighbor_sampler
        # The shuffle draws from a generator seeded when an epoch starts, in the caller's
        # thread: PyTorch's sampler would draw lazily, inside a prefetching thread.
        self._shuffle_generator = None
        if kwargs.get("generator") is None:
            self._shuffle_generator = kwargs["generator"] = torch.Generator()
        super().__init__(stores, num_neighbors=num_neighbors, input_nodes=input_nodes,
                         transform=transform, transform_sampler_output=transform_sampler_output,
                         filter_per_worker=False, neighbor_sampler=neighbor_sampler, **kwargs)
        # Batches are drawn here rather than through torch's DataLoader wherever that draws
        # them the plain way (see _batches): no workers, PyTorch's own samplers.
        self._batches_directly = (
            self.num_workers == 0 and type(self.batch_sampler) is BatchSampler
            and (type(self.sampler) is SequentialSampler
                 or (type(self.sampler) is RandomSampler and not self.sampler.replacement
                     and self.sampler._num_samples is None)))

    def __iter__(self):
        # Both draws in the caller's thread, in a fixed order (see Prefetcher).
        if self._shuffle_generator is not None:
            self._shuffle_generator.manual_seed(int(torch.empty((), dtype=torch.int64).random_()))
        reseed = getattr(self.quiver_sampler, "reseed", None)
        if reseed is not None:
            reseed()
        return self._batches() if self._batches_directly else super().__iter__()

    def _batches(self):
        """The DataLoader's batches without its machinery, which cost about 0.5 ms a batch
        on the H100 host (1024 Python ints drawn one by one, then made a tensor again): the
        same draws from the same generator (the iterator's base seed, then one permutation),
        made here in the caller's thread, then the seeds' positions as slices of the
        permutation, each sampled and filtered by PyG's code."""
        n = len(self.dataset)
        generator = self.generator
        torch.empty((), dtype=torch.int64).random_(generator=generator)  # the base seed
        if type(self.sampler) is RandomSampler:
            if generator is None:  # as RandomSampler: one seeded from the default generator
                generator = torch.Generator()
                generator.manual_seed(int(torch.empty((), dtype=torch.int64).random_()))
            order = torch.randperm(n, generator=generator)
        else:
            order = torch.arange(n)
        return self._batches_in(order)

    def _batches_in(self, order: Tensor):
        size = self.batch_size
        for begin in range(0, order.numel(), size):
            index = order[begin:begin + size]
            if self.drop_last and index.numel() < size:
                return
            yield self.filter_fn(self.collate_fn(index))
