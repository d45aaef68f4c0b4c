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
* :class:`LinkNeighborLoader`: PyG's link-prediction loader on the same pieces (seed edges,
  binary or triplet negatives drawn on the sampling device, PyG's label layout);
* :class:`NeighborLoader`: PyG's ``NeighborLoader`` with the three above, taking a ``Data``
  or a ``(FeatureStore, GraphStore)`` pair. Batches are PyG ``Data`` objects on the sampling
  device carrying ``x``, ``y`` (every node attribute), ``edge_index``, ``edge_attr`` (every
  edge attribute, for the sampled edges), ``n_id``, ``e_id`` (with ``return_eid=True`` or
  edge attributes), ``batch_size``, ``input_id``, ``num_sampled_nodes`` and
  ``num_sampled_edges``, and the graph-level attributes. Both loaders take PyG's
  ``weight_attr``, ``time_attr`` (with ``input_time`` / ``edge_label_time``),
  ``temporal_strategy`` and ``disjoint`` (batches then carry ``batch``).

The modules: ``stores`` (the graph and feature stores), ``sampler`` (the sampler),
``loader`` (the loader), ``dist_loader`` (:class:`DistNeighborLoader`: batches of a graph
partitioned over hosts, each host sampling its own part and asking the owners of remote
nodes each hop).

Heterogeneous graphs: a ``HeteroData`` (or a ``(FeatureStore, HeteroGraphStore)`` pair)
goes through :class:`HeteroGraphStore` (every edge type in one CSR) and
:class:`HeteroNeighborSampler` (every relation of a hop in the same kernel launches,
``num_neighbors`` per hop or per edge type), with typed tables in the :class:`FeatureStore`
sharing one GPU cache by hotness; batches are PyG ``HeteroData`` objects, so
``to_hetero`` models train unchanged. :class:`GraphSageSampler` is re-exported here so
torch-quiver scripts that use ``quiver.pyg.GraphSageSampler`` run unchanged, and
:class:`~torch_quiver_ops.loader.Prefetcher` so a PyG script imports all it needs from here.
"""
from __future__ import annotations

try:
    import torch_geometric  # noqa: F401
except ImportError as error:  # (it had failed as a bare ModuleNotFoundError deep inside)
    raise ImportError("torch_quiver_ops.pyg needs PyG: pip install torch-geometric (or "
                      "torch-quiver-ops[pyg])", name="torch_geometric") from error

from ..loader import Prefetcher
from ..sampler import GraphSageSampler
from .dist_loader import DistNeighborLoader
from .loader import LinkNeighborLoader, NeighborLoader
from .sampler import HeteroNeighborSampler, NeighborSampler
from .stores import (_SHARED, FeatureStore, GraphStore, HeteroGraphStore,  # noqa: F401
                     split_cache_budget, to_stores)

__all__ = ["DistNeighborLoader", "FeatureStore", "GraphStore", "GraphSageSampler", "HeteroGraphStore",
           "HeteroNeighborSampler", "LinkNeighborLoader", "NeighborLoader", "NeighborSampler",
           "Prefetcher", "split_cache_budget", "to_stores"]
