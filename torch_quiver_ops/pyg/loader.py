"""PyG's ``NeighborLoader`` and ``LinkNeighborLoader`` on our sampler and stores."""
from __future__ import annotations

import copy
import functools
import gc
import math
import operator
import threading
import time
import warnings
import weakref
from typing import Optional, Tuple, Union

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler
from torch_geometric.data import Data, HeteroData
from torch_geometric.loader import LinkNeighborLoader as _PygLinkNeighborLoader
from torch_geometric.loader import NeighborLoader as _PygNeighborLoader

from .. import preflight
from .._device import as_tensor, check_flag, checked_node_ids
from ..ops import integer_times
from ..sampler import ops_temporal_strategy
from ..loader import checked_seed_edges
from .sampler import HeteroNeighborSampler, NeighborSampler
from .stores import (LINK_LOADER_KEYS, LOADER_KEYS, FeatureStore, GraphStore, HeteroGraphStore,
                     data_stamp, tensor_version, to_stores)

# After a failed reset, how long a persistent worker that had been told to stop (a Ctrl-C)
# may take to exit before the failure is taken as the loader's own.
DYING_WORKER_WAIT_S = 5.0
# Set while PyG's filter_fn builds a batch in this thread: the loaders' ``transform`` then
# reads as None, so that it runs last, on the whole batch (see _OnOurStores.filter_fn).
_BUILDING = threading.local()


def _refuse(loader: str, **given) -> None:
    named = [name for name, present in given.items() if present]
    if named:
        raise NotImplementedError(f"torch_quiver_ops.pyg.{loader} does not support "
                                  f"{', '.join(named)} yet")


def _filter_in_the_main_process(loader: str, filter_per_worker: Optional[bool]) -> None:
    """PyG's filter_per_worker=True gathers a batch's attributes in the DataLoader's
    workers; ours are read from a store on the sampling device, in the main process."""
    if filter_per_worker:
        warnings.warn(f"torch_quiver_ops.pyg.{loader} gathers every batch's attributes in the "
                      f"main process, from its feature store on the sampling device: "
                      f"filter_per_worker=True is ignored", UserWarning, stacklevel=3)


def _check_last_without_weights(rules: dict) -> None:
    """temporal_strategy='last' with weight_attr, refused when the loader is made, naming
    weight_attr (the sampler's own check names its argument, weights)."""
    if rules.get("weight_attr") is not None and rules.get("time_attr") is not None:
        ops_temporal_strategy(rules.get("temporal_strategy", "uniform"), temporal=True,
                              weighted=True, replace=False, weights_name="weight_attr")


def _checked_attr(value, attr: str, name: str, key=None):
    """A ``weight_attr`` / ``time_attr`` tensor, checked by the loader's own names (the
    samplers named their arguments, weights or node_time, which the caller never gave):
    weights one value per entry (1-D), times integers."""
    where = f"{attr}={name!r}" + ("" if key is None else f" of {key!r}")
    if isinstance(value, (list, tuple)) and len(value) == 0:
        return value  # (no edges: torch.as_tensor([]) would read as floats)
    tensor = as_tensor(value)
    if tensor.dim() != 1:
        raise ValueError(f"{where} must hold one value per "
                         f"{'edge' if attr == 'weight_attr' else 'node or edge'} (1-D), got "
                         f"shape {tuple(tensor.shape)}")
    if attr == "time_attr":
        try:
            integer_times(tensor, where)
        except TypeError as error:
            raise TypeError(str(error)) from None
    return value


def _hetero_rules(data: HeteroData, rules: dict) -> dict:
    """HeteroNeighborSampler's weights / times from PyG's ``weight_attr`` (an attribute of
    every edge type) and ``time_attr`` (of every node type, or of every edge type)."""
    _check_last_without_weights(rules)
    weight_attr, time_attr = rules.get("weight_attr"), rules.get("time_attr")
    out = {"disjoint": bool(rules.get("disjoint")),
           "temporal_strategy": rules.get("temporal_strategy", "uniform")}

    def every(keys, name, what):
        lacking = [k for k in keys if name not in data[k]]
        if lacking:
            raise ValueError(f"{what} {name!r} must be an attribute of every "
                             f"{'edge' if what == 'weight_attr' else 'node or edge'} type; "
                             f"{lacking} lack it")
        return {k: _checked_attr(data[k][name], what, name, k) for k in keys}

    if weight_attr is not None:
        out["weights"] = every(data.edge_types, weight_attr, "weight_attr")
    if time_attr is not None:
        timed = [t for t in data.node_types if time_attr in data[t]]
        if timed and any(time_attr in data[et] for et in data.edge_types):
            raise ValueError(f"time_attr {time_attr!r} names both node and edge attributes: "
                             f"it must be one or the other (as in PyG)")
        if timed:
            # As PyG: node times when any node type has them; the types without any (an
            # entity table beside timed facts, say) are sampled regardless of time.
            out["node_time_dict"] = {t: _checked_attr(data[t][time_attr], "time_attr", time_attr,
                                                      t) for t in timed}
        else:
            out["edge_time_dict"] = every(data.edge_types, time_attr, "time_attr")
    return out


def _sampling_rules(data, rules: dict) -> dict:
    """NeighborSampler's weights / times from PyG's ``weight_attr`` and ``time_attr`` (a node
    or an edge attribute of ``data``), and its temporal and disjoint options."""
    _check_last_without_weights(rules)
    weight_attr, time_attr = rules.get("weight_attr"), rules.get("time_attr")
    out = {"disjoint": bool(rules.get("disjoint")),
           "temporal_strategy": rules.get("temporal_strategy", "uniform"),
           "neg_exclude_edges": rules.get("neg_exclude_edges") is not False}
    if (weight_attr or time_attr) and not isinstance(data, Data):
        raise ValueError("weight_attr / time_attr name attributes of a Data: over a "
                         "(FeatureStore, GraphStore) pair pass a NeighborSampler built with "
                         "weights / edge_time / node_time")
    if weight_attr is not None:
        if weight_attr not in data or not data.is_edge_attr(weight_attr):
            raise ValueError(f"weight_attr {weight_attr!r} is not an edge attribute of data")
        out["weights"] = _checked_attr(data[weight_attr], "weight_attr", weight_attr)
    if time_attr is not None:
        if time_attr not in data:
            raise ValueError(f"time_attr {time_attr!r} is not an attribute of data")
        if data.is_node_attr(time_attr):
            out["node_time"] = _checked_attr(data[time_attr], "time_attr", time_attr)
        elif data.is_edge_attr(time_attr):
            out["edge_time"] = _checked_attr(data[time_attr], "time_attr", time_attr)
        else:
            raise ValueError(f"time_attr {time_attr!r} is neither a node nor an edge attribute")
    return out


def _rule_tensors(rules: dict) -> list:
    """The tensors among a sampler's options (weights, times, dicts of them), named."""
    found = []
    for key, value in rules.items():
        if isinstance(value, Tensor):
            found.append((key, value))
        elif isinstance(value, dict):
            found.extend(((key, k), v) for k, v in value.items() if isinstance(v, Tensor))
    return found


def _check_given_sampler(loader: str, sampler, *, replace, return_eid, subgraph_type, mode,
                         sampling_generator, rules: Optional[dict]) -> None:
    """The options a loader builds its sampler with, given beside a ``neighbor_sampler``
    built already: each must be its default or the sampler's own. Those the sampler lacked
    were dropped silently (probes: ``time_attr`` beside a ``HeteroNeighborSampler`` sampled
    without time, so batches held later nodes; ``neg_exclude_edges``, ``return_eid``,
    ``subgraph_type``, ``replace``, ``mode`` went unread)."""
    inner, rules = sampler.sampler, rules or {}
    own_eid = getattr(sampler, "return_eid", None)
    own_eid = inner.return_eid if own_eid is None else own_eid
    timed = inner.temporal or (getattr(inner, "node_time", None) is not None
                               or getattr(sampler, "node_time_dict", None) is not None)
    subgraph_type = getattr(subgraph_type, "value", subgraph_type)
    strategy = rules.get("temporal_strategy", "uniform")
    unbuilt = []  # (option as given, what the sampler does)
    if replace and not inner.replace:
        unbuilt.append(("replace=True", "draws without replacement"))
    if return_eid and not own_eid:
        unbuilt.append(("return_eid=True", "returns no edge ids"))
    if subgraph_type not in ("directional", sampler.subgraph_type):
        unbuilt.append((f"subgraph_type={subgraph_type!r}", f"is {sampler.subgraph_type!r}"))
    if mode is not None and str(mode).upper() != inner.mode:
        unbuilt.append((f"mode={mode!r}", f"samples in mode {inner.mode!r}"))
    if sampling_generator is not None and sampling_generator is not sampler.generator:
        unbuilt.append(("sampling_generator", "draws from its own generator"))
    if rules.get("disjoint") and not inner.disjoint:
        unbuilt.append(("disjoint=True", "samples one shared subgraph"))
    if strategy != "uniform" and strategy != inner.temporal_strategy:
        unbuilt.append((f"temporal_strategy={strategy!r}", f"is {inner.temporal_strategy!r}"))
    if rules.get("time_attr") is not None and not timed:
        unbuilt.append((f"time_attr={rules['time_attr']!r}", "samples without time"))
    # (A weighted sampler's weights are its own, whatever the name; None: a sampler
    # pickled before samplers said whether they weigh, taken at its word.)
    if rules.get("weight_attr") is not None and getattr(inner, "weighted", None) is False:
        unbuilt.append((f"weight_attr={rules['weight_attr']!r}", "samples without weights"))
    exclude = rules.get("neg_exclude_edges")
    if exclude is not None and bool(exclude) != bool(sampler.neg_exclude_edges):
        unbuilt.append((f"neg_exclude_edges={exclude!r}",
                        f"was built with neg_exclude_edges={sampler.neg_exclude_edges}"))
    if unbuilt:
        raise ValueError(f"{loader} got a neighbor_sampler and sampling options it was not "
                         f"built with: " + "; ".join(f"{given} (the sampler {own})"
                                                     for given, own in unbuilt)
                         + ": build the sampler with them, or leave them out")


class _OwnMethod:
    """``loader.<name>`` (a method of the loader's class) held without a reference to the
    loader. PyG hands the DataLoader its own bound ``collate_fn`` and ``filter_fn``, so a
    loader was in a reference cycle and went only at a collection. Its kept iterator
    (persistent workers) then went there too, after the collection had finalized its
    worker queues: each worker stopped only at torch's 5 s join timeout, about 10 s at
    the next epoch of any loader (a probe). Pickled (to spawned workers) as the bound
    method, which takes the loader along, as it did."""

    __slots__ = ("_loader", "_function")

    def __init__(self, loader, function):
        self._loader, self._function = weakref.ref(loader), function

    def __call__(self, *args, **kwargs):
        loader = self._loader()
        if loader is None:
            raise RuntimeError("this loader was deleted while one of its iterators ran")
        return self._function(loader, *args, **kwargs)

    def __reduce__(self):
        loader = self._loader()
        if loader is None:
            raise RuntimeError("this loader was deleted: its methods cannot be pickled")
        return functools.partial, (self._function, loader)

    def __deepcopy__(self, memo):  # (a copy's own, held weakly too)
        return _OwnMethod(copy.deepcopy(self._loader(), memo), self._function)


class _HoldingLoader:
    """An epoch's iterator as the caller gets it: it holds the loader, which the iterator
    itself no longer does (see :class:`_OwnMethod`), so ``for batch in Loader(...)``
    keeps its loader to the epoch's end. The loader's kept iterator (persistent workers)
    is the one inside, which does not hold it."""

    __slots__ = ("_loader", "_iterator", "_length")

    def __init__(self, loader, iterator, length: Optional[int] = None):
        # (length: of an epoch drawn without the DataLoader, whose bare generator had failed
        # len(iter(loader)), tqdm(iter(loader)) among its callers)
        self._loader, self._iterator, self._length = loader, iterator, length

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._iterator)

    def __len__(self):
        return len(self._iterator) if self._length is None else self._length

    def __getattr__(self, name):
        return getattr(self._iterator, name)


class _OnOurStores:
    """What both loaders add to PyG's: our stores and sampler in place of PyG's, every
    attribute carried into batches (node, edge and graph-level), the random draws made in
    the caller's thread, and batches drawn without the DataLoader's machinery where it adds
    nothing."""

    # The keys PyG's loader of this kind writes into its batches (see stores.LOADER_KEYS).
    _own_keys = LOADER_KEYS
    # A HeteroData's per-type attributes copied whole, and its type order (_set_up_hetero).
    _typed_graph_attrs: dict = {}
    _type_order: Optional[tuple] = None

    def _set_up(self, data, num_neighbors, neighbor_sampler, *, device, mode, cache_size,
                cache_policy, host_reads, replace, return_eid, subgraph_type,
                sampling_generator, kwargs, rules=None) -> tuple:
        """Returns ``(stores, graph_store, neighbor_sampler)`` and adjusts ``kwargs``."""
        batch_size = kwargs.get("batch_size", 1)
        if isinstance(batch_size, bool) or not (hasattr(type(batch_size), "__index__")
                                                and operator.index(batch_size) >= 1):
            # (None, which torch's DataLoader takes as "no batching", would hand the
            # sampler one id at a time as a 0-d tensor.)
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        # What _refresh needs to build it all again from the data as it is then.
        self._source = data if isinstance(data, (Data, HeteroData)) else None
        self._given_sampler = neighbor_sampler
        self._set_up_args = dict(num_neighbors=num_neighbors, device=device, mode=mode,
                                 cache_size=cache_size, cache_policy=cache_policy,
                                 host_reads=host_reads, replace=replace, return_eid=return_eid,
                                 subgraph_type=subgraph_type,
                                 sampling_generator=sampling_generator, rules=rules)
        stores, graph_store, neighbor_sampler = self._set_up_from(
            data, num_neighbors, neighbor_sampler, device=device, mode=mode,
            cache_size=cache_size, cache_policy=cache_policy, host_reads=host_reads,
            replace=replace, return_eid=return_eid, subgraph_type=subgraph_type,
            sampling_generator=sampling_generator, kwargs=kwargs, rules=rules)
        self._graph_store = graph_store
        self._source_print = None if self._source is None else data_stamp(self._source)
        return stores, graph_store, neighbor_sampler

    @property
    def data(self):
        """The ``Data`` (or ``HeteroData``, or pair of stores) the loader was given, as PyG's
        loaders keep it. While PyG's code builds a batch it reads our stores instead."""
        if getattr(_BUILDING, "batch", False) or self._source is None:
            return self._stores
        return self._source

    @data.setter
    def data(self, value) -> None:
        self._stores = value  # PyG's loader sets it to what it was given: our stores

    @property
    def stores(self):
        """The ``(FeatureStore, GraphStore)`` pair the batches are gathered from."""
        return self._stores

    def _refresh(self) -> None:
        """Builds the stores again, and the sampler if the graph changed, when the ``Data``
        changed since they were built: an attribute set, replaced or deleted, or a tensor
        changed in place (seen at the start of an epoch: PyG's loaders read the data at
        every batch, and ours hold it in stores, a GPU cache among them)."""
        if self._source is None or data_stamp(self._source) == self._source_print:
            return
        shuffle_generator = self._shuffle_generator  # the set-up would drop it (given)
        # A refused set-up leaves the loader as it was: it sets attributes (edge rows, graph
        # attributes, the type order) before the checks that may refuse the data, and data
        # put back as it was matches the stamp again, so the next epoch would have run on
        # the refused data's half (edge weights of the refused tensor, graph attributes
        # gone; a probe).
        before = dict(self.__dict__)
        try:
            stores, graph_store, neighbor_sampler = self._set_up_from(
                self._source, neighbor_sampler=self._given_sampler,
                kwargs={"num_workers": self.num_workers, "generator": self.generator},
                **self._set_up_args)
            if self._given_sampler is not None and graph_store is not self._graph_store:
                raise ValueError(f"the data's graph changed after this {type(self).__name__} "
                                 f"was built, and it samples with the neighbor_sampler it was "
                                 f"given, built on the graph before: build a new sampler and "
                                 f"loader")
        except BaseException:
            for name in self.__dict__.keys() - before.keys():  # (never none at all: a batch
                del self.__dict__[name]                          # may be built meanwhile)
            self.__dict__.update(before)
            raise
        finally:
            self._shuffle_generator = shuffle_generator
        self._stores, self._graph_store = stores, graph_store
        for name in ("node_sampler", "link_sampler"):  # PyG's name for it, by loader
            if hasattr(self, name):
                setattr(self, name, neighbor_sampler)
        self._source_print = data_stamp(self._source)
        # Persistent workers hold copies of the stores and sampler built before: new ones
        # are started for this epoch (torch starts them when it has no iterator).
        if getattr(self, "_iterator", None) is not None:
            workers = getattr(self._iterator, "iterator", self._iterator)  # PyG wraps torch's
            if hasattr(workers, "_shutdown_workers"):
                workers._shutdown_workers()
            self._iterator = None

    def _set_up_from(self, data, num_neighbors, neighbor_sampler, *, device, mode, cache_size,
                     cache_policy, host_reads, replace, return_eid, subgraph_type,
                     sampling_generator, kwargs, rules=None) -> tuple:
        if isinstance(data, HeteroData) or (isinstance(data, (tuple, list)) and len(data) == 2
                                            and isinstance(data[1], HeteroGraphStore)):
            return self._set_up_hetero(data, num_neighbors, neighbor_sampler, device=device,
                                       mode=mode, cache_size=cache_size,
                                       cache_policy=cache_policy, host_reads=host_reads,
                                       replace=replace, return_eid=return_eid,
                                       subgraph_type=subgraph_type,
                                       sampling_generator=sampling_generator, kwargs=kwargs,
                                       rules=rules)
        # Graph-level attributes (neither a row per node nor per edge) go into every batch
        # as they are, as PyG's loaders copy them.
        self._graph_attrs = {}
        if isinstance(data, Data):
            stores = to_stores(data, device, cache_size, cache_policy, host_reads)
            self._graph_attrs = {
                key: value for key, value in data.items()
                if key not in ("edge_index", "num_nodes") and key not in self._own_keys and not (
                    isinstance(value, (Tensor, np.ndarray)) and (data.is_node_attr(key)
                                                                 or data.is_edge_attr(key)))}
        elif isinstance(data, (tuple, list)) and len(data) == 2:
            stores = tuple(data)  # built by hand: its tables checked against its graph
            if isinstance(stores[0], FeatureStore) and isinstance(stores[1], GraphStore):
                stores[0].check_node_rows(stores[1].num_nodes)
        else:
            raise TypeError(f"data must be a torch_geometric Data or a (FeatureStore, "
                            f"GraphStore) pair, got {type(data).__name__}")
        feature_store, graph_store = stores
        # Edge attributes are gathered for the sampled edges by their ids; those this loader
        # writes itself (a link loader's edge_label_index) are not, nor do they ask for ids.
        names = [name for name in getattr(feature_store, "edge_feature_names", None) or ()
                 if name not in self._own_keys]
        self._edge_store = feature_store if names else None
        if self._edge_store is not None:
            # (With subgraph_type='bidirectional' a reversed edge carries its edge's id, so
            # its attributes too, as in PyG.)
            if neighbor_sampler is not None and not neighbor_sampler.sampler.return_eid:
                raise ValueError(f"the feature store holds edge attributes {names}, gathered "
                                 f"by edge id: build the NeighborSampler with return_eid=True")
            return_eid = True  # PyG's batches carry e_id too when edges have attributes
        if neighbor_sampler is None:
            if not isinstance(graph_store, GraphStore):
                raise TypeError(f"the graph store must be a torch_quiver_ops.pyg.GraphStore, "
                                f"got {type(graph_store).__name__}")
            sampling = _sampling_rules(data, rules or {})
            neighbor_sampler = self._sampler_for(
                graph_store, sampling, return_eid,
                lambda: NeighborSampler(graph_store, num_neighbors, device, mode, replace,
                                        return_eid, subgraph_type, sampling_generator,
                                        **sampling))
        else:
            _check_given_sampler(type(self).__name__, neighbor_sampler, replace=replace,
                                 return_eid=return_eid, subgraph_type=subgraph_type, mode=mode,
                                 sampling_generator=sampling_generator, rules=rules)
        self._take_sampler(neighbor_sampler, kwargs)
        return stores, graph_store, neighbor_sampler

    def _sampler_for(self, graph_store, rules: dict, return_eid: bool, build):
        """The sampler this loader holds when what it samples from is unchanged (the graph
        store, the weight and time tensors, return_eid), else ``build()``: an epoch whose
        Data changed only in its features keeps its sampler, rather than copying the
        topology to the GPU again."""
        tensors = _rule_tensors(rules)
        held = getattr(self, "_sampler_basis", None)
        if (held is not None and held[0] is graph_store and held[1] == return_eid
                and len(held[2]) == len(tensors)
                and all(name == new_name and t is new and version == tensor_version(new)
                        for (name, t, version), (new_name, new) in zip(held[2], tensors))):
            return self.quiver_sampler
        sampler = build()
        self._sampler_basis = (graph_store, return_eid,
                               [(name, t, tensor_version(t)) for name, t in tensors])
        return sampler

    def _take_sampler(self, neighbor_sampler, kwargs) -> None:
        """Both set-ups' end: a GPU sampler runs in the main process, and the shuffle
        draws from a generator seeded when an epoch starts, in the caller's thread
        (PyTorch's sampler would draw lazily, inside a prefetching thread)."""
        if neighbor_sampler.device.type == "cuda" and kwargs.get("num_workers", 0) > 0:
            warnings.warn(f"torch_quiver_ops.pyg.{type(self).__name__} samples on the GPU in "
                          f"the main process; num_workers={kwargs['num_workers']} is set to 0",
                          stacklevel=4)
            kwargs["num_workers"] = 0
            kwargs.pop("persistent_workers", None)
            kwargs.pop("prefetch_factor", None)
        self.quiver_sampler = neighbor_sampler
        self._shuffle_generator = None
        if kwargs.get("generator") is None:
            self._shuffle_generator = kwargs["generator"] = torch.Generator()

    def _set_up_hetero(self, data, num_neighbors, neighbor_sampler, *, device, mode,
                       cache_size, cache_policy, host_reads, replace, return_eid,
                       subgraph_type, sampling_generator, kwargs, rules=None) -> tuple:
        """_set_up for a ``HeteroData`` or a (FeatureStore, HeteroGraphStore) pair."""
        subgraph_type = getattr(subgraph_type, "value", subgraph_type)
        if neighbor_sampler is not None:
            _check_given_sampler(type(self).__name__, neighbor_sampler, replace=replace,
                                 return_eid=return_eid, subgraph_type=subgraph_type, mode=mode,
                                 sampling_generator=sampling_generator, rules=rules)
        self._graph_attrs, self._typed_graph_attrs, self._type_order = {}, {}, None
        if isinstance(data, HeteroData):
            stores = to_stores(data, device, cache_size, cache_policy, host_reads)
            self._graph_attrs = {k: v for k, v in data._global_store.items()
                                 if k not in self._own_keys}
            self._typed_graph_attrs = self._whole_typed_attrs(data)
            # PyG's batches keep the data's type order (they start from a copy of it), so
            # type ids from to_homogeneous() agree between a batch and the whole graph.
            self._type_order = (list(data.node_types), list(data.edge_types))
        else:
            stores = tuple(data)  # built by hand: its tables checked against its graph
            if isinstance(stores[0], FeatureStore):
                stores[0].check_node_rows(stores[1].num_nodes_dict)
        feature_store, graph_store = stores
        self._edge_store = feature_store if any(
            not isinstance(k, str) and k[1] not in self._own_keys
            for k in getattr(feature_store, "_edge_tables", {})) else None
        if self._edge_store is not None:
            if neighbor_sampler is not None and not neighbor_sampler.return_eid:
                raise ValueError("the feature store holds edge attributes, gathered by edge "
                                 "id: build the HeteroNeighborSampler with return_eid=True")
            return_eid = True
        if neighbor_sampler is None:
            if not isinstance(data, HeteroData) and any(
                    (rules or {}).get(k) is not None for k in ("weight_attr", "time_attr")):
                raise ValueError("weight_attr / time_attr name attributes of a HeteroData: over "
                                 "a (FeatureStore, HeteroGraphStore) pair pass a "
                                 "HeteroNeighborSampler built with weights / node_time_dict / "
                                 "edge_time_dict")
            hetero_rules = _hetero_rules(data, rules or {}) if isinstance(data, HeteroData) \
                else {"disjoint": bool((rules or {}).get("disjoint"))}
            hetero_rules["neg_exclude_edges"] = (
                (rules or {}).get("neg_exclude_edges") is not False)
            neighbor_sampler = self._sampler_for(
                graph_store, hetero_rules, return_eid,
                lambda: HeteroNeighborSampler(graph_store, num_neighbors, device, mode,
                                              replace, return_eid, sampling_generator,
                                              subgraph_type=subgraph_type, **hetero_rules))
        self._take_sampler(neighbor_sampler, kwargs)
        return stores, graph_store, neighbor_sampler

    def _whole_typed_attrs(self, data: HeteroData) -> dict:
        """A node or edge type's attributes that are not a row per node / edge of that type
        (a type's class count or class weights, a relation's embedding, a tensor whose rows
        do not match the type's count): ``{(type, key): value}``, copied whole into every
        batch, as PyG's batches (a copy of the data) hold them and as a Data's graph-level
        attributes are. What the loader writes into a type's store itself (a link loader's
        edge_label on its seed edges' type, say) is not replaced: filter_fn copies a key
        only where the batch lacks it, as PyG's loaders overwrite only where they write."""
        whole = {}
        for types, skipped, per_item in (
                (data.node_types, ("num_nodes",), lambda store, key: store.is_node_attr(key)),
                (data.edge_types, ("edge_index",), lambda store, key: store.is_edge_attr(key))):
            for t in types:
                store = data[t]
                for key, value in store.items():
                    if key in skipped:
                        continue
                    if not (isinstance(value, (Tensor, np.ndarray)) and per_item(store, key)):
                        whole[(t, key)] = value
        return whole

    def _hold_own_methods_weakly(self) -> None:
        """The DataLoader's ``collate_fn``, where PyG gave it the loader's own, as an
        :class:`_OwnMethod` (see there)."""
        if getattr(self.collate_fn, "__self__", None) is self:
            self.collate_fn = _OwnMethod(self, self.collate_fn.__func__)

    def __copy__(self):
        # The default shallow copy kept the original's collate_fn, which holds the original
        # weakly: the copy failed once the original was gone, saying an iterator ran (a
        # probe). Its workers' iterator (persistent_workers) stays the original's too.
        clone = type(self).__new__(type(self))
        clone.__dict__.update(self.__dict__)
        if isinstance(self.collate_fn, _OwnMethod):
            clone.__dict__["collate_fn"] = _OwnMethod(clone, self.collate_fn._function)
        clone.__dict__["_iterator"] = None
        return clone

    def _get_iterator(self):
        iterator = super()._get_iterator()
        transform = getattr(iterator, "transform_fn", None)  # PyG's DataLoaderIterator
        if getattr(transform, "__self__", None) is self:
            iterator.transform_fn = _OwnMethod(self, transform.__func__)
        return iterator

    def _decide_how_batches_are_drawn(self) -> None:
        # Batches are drawn here rather than through torch's DataLoader wherever that draws
        # them the plain way (see _batches): no workers, the samplers the DataLoader made
        # itself over every seed. A sampler or batch_sampler the caller gave (over some
        # positions, in its own order) goes through the DataLoader, which honours it.
        self._batches_directly = (
            self.num_workers == 0 and self.batch_size is not None
            and type(self.batch_sampler) is BatchSampler
            and self.batch_sampler.sampler is self.sampler
            and getattr(self.sampler, "data_source", None) is self.dataset
            and (type(self.sampler) is SequentialSampler
                 or (type(self.sampler) is RandomSampler and not self.sampler.replacement
                     and self.sampler.num_samples == len(self.sampler.data_source))))

    @property
    def transform(self):
        """PyG's ``transform``: applied to each batch once it is whole."""
        return None if getattr(_BUILDING, "batch", False) else self._transform

    @transform.setter
    def transform(self, transform) -> None:
        self._transform = transform

    def filter_fn(self, out):
        """PyG's batch of ``out``, with the sampled edges' attributes and the graph-level
        ones added, then ``transform`` applied (as PyG's, to the whole batch: PyG's
        filter_fn, which applies it, runs with it held back)."""
        outer = getattr(_BUILDING, "batch", False)  # a filter_fn inside another's
        _BUILDING.batch = True
        try:
            batch = super().filter_fn(out)
        finally:
            _BUILDING.batch = outer
        if self._edge_store is not None and isinstance(batch, HeteroData):
            for et in batch.edge_types:
                if "e_id" in batch[et]:
                    for name, rows in self._edge_store.edge_features(
                            batch[et].e_id, et, skip=self._own_keys).items():
                        batch[et][name] = rows
        elif self._edge_store is not None:
            for name, rows in self._edge_store.edge_features(batch.e_id,
                                                             skip=self._own_keys).items():
                batch[name] = rows
        for name, value in self._graph_attrs.items():
            batch[name] = value
        if isinstance(batch, HeteroData) and self._type_order is not None:
            # Nor, on the seed edges' type, what a link loader writes there where it wrote
            # none: a RandomLinkSplit split's whole edge_label_index (global ids past the
            # batch's nodes) had come into triplet batches, and its whole edge_label into
            # batches without negatives or labels (a probe); PyG deletes both.
            seed_type = getattr(getattr(self, "input_data", None), "input_type", None)
            for (t, name), value in self._typed_graph_attrs.items():
                if name not in batch[t] and not (t == seed_type and name in self._own_keys):
                    batch[t][name] = value
            _in_type_order(batch, *self._type_order)
        return batch if self._transform is None else self._transform(batch)

    def __iter__(self):
        self._refresh()
        # Both draws in the caller's thread, in a fixed order (see Prefetcher).
        if self._shuffle_generator is not None:
            self._shuffle_generator.manual_seed(int(torch.empty((), dtype=torch.int64,
                                                                 device="cpu").random_()))
        reseed = getattr(self.quiver_sampler, "reseed", None)
        if reseed is not None:
            reseed(0 if self._batches_directly else self.num_workers)
        if self._batches_directly:
            return _HoldingLoader(self, self._batches(), len(self))  # (with its length)
        self._replace_dead_workers()
        if self.num_workers > 0 and getattr(self, "_iterator", None) is None:
            if _made_kept_workers[0] and _forks_workers(self.multiprocessing_context):
                # Workers are about to be forked. A dropped loader's kept iterator
                # (persistent workers), held by its loader's reference cycle until a
                # collection, was otherwise inherited by them and collected there, where
                # torch's shutdown of it fails ("can only test a child process", a
                # traceback on stderr). Only then: a collection costs 0.1-0.5 s an epoch.
                gc.collect()
            if self.persistent_workers:
                _made_kept_workers[0] = True
        try:
            iterator = super().__iter__()
        except Exception:
            # Workers still exiting when the epoch began: their end shows up in the reset.
            if not self._replace_dead_workers(wait_s=DYING_WORKER_WAIT_S):
                raise
            iterator = super().__iter__()
        return _HoldingLoader(self, iterator)

    def _replace_dead_workers(self, wait_s: float = 0.0) -> bool:
        """Replaces persistent workers when one of them has died, or dies within ``wait_s``
        seconds; whether it did. A Ctrl-C in a terminal reaches the whole process group, so
        a program that catches it and goes on training meets its workers gone or going, and
        torch's reset of the kept iterator then failed on them ("worker exited
        unexpectedly", or a FileNotFoundError from a batch a dead worker had shared)."""
        kept = getattr(self, "_iterator", None)  # PyG's wrapper of torch's iterator
        iterator = getattr(kept, "iterator", kept)
        workers = getattr(iterator, "_workers", None)
        if not workers:
            return False
        deadline = time.monotonic() + wait_s
        while all(worker.is_alive() for worker in workers):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        iterator._shutdown_workers()
        self._iterator = None
        return True

    def _batches(self):
        """The DataLoader's batches without its machinery, which costs about 0.5 ms a batch
        on the H100 host (1024 Python ints drawn one by one, then made a tensor again): with
        ``shuffle``, one permutation of the seeds drawn from the loader's ``generator`` (none
        given: PyTorch's default generator, so ``torch.manual_seed`` fixes the epoch), else
        the seeds in order; each batch a slice of it, sampled and filtered by PyG's code.
        The shuffled order is not the one torch's DataLoader would draw from the same seed
        (that depends on how its iterator consumes the generator, which is not public): the
        same distribution, one permutation an epoch, every seed once."""
        n = len(self.dataset)
        if type(self.sampler) is RandomSampler:
            order = torch.randperm(n, generator=self.generator, device="cpu")
        else:
            order = torch.arange(n, device="cpu")
        return self._batches_in(order)

    def _batches_in(self, order: Tensor):
        size = self.batch_size
        # pin_memory, which the DataLoader applies to the batches it draws: a GPU's batches
        # are left as they are (torch cannot pin them, and they need no pinning).
        pins = self.pin_memory and torch.cuda.is_available()
        for begin in range(0, order.numel(), size):
            index = order[begin:begin + size]
            if self.drop_last and index.numel() < size:
                return
            batch = self.filter_fn(self.collate_fn(index))
            if pins:
                batch = batch.apply(lambda t: t.pin_memory() if t.device.type == "cpu" else t)
            yield batch


# Whether a loader of this process has kept its workers (persistent_workers): only then
# can a dropped one's iterator be inherited by new workers (see _OnOurStores.__iter__).
_made_kept_workers = [False]


def _forks_workers(context) -> bool:
    """Whether DataLoader workers of ``context`` (None: the default) start by fork."""
    import multiprocessing
    if context is None:  # (not get_context(), which would fix the default for good)
        method = multiprocessing.get_start_method(allow_none=True)
        return (method or multiprocessing.get_all_start_methods()[0]) == "fork"
    if isinstance(context, str):
        return context == "fork"
    return context.get_start_method() == "fork"


def _id_tensor(ids, name: str) -> Tensor:
    """A tensor of the ids in a list, tuple, range or array; a TypeError naming ``name``
    for anything else."""
    if isinstance(ids, (list, tuple, range)) and len(ids) == 0:
        # as PyG reads []: no seeds, not floats
        return torch.empty(0, dtype=torch.long, device="cpu")
    try:
        return as_tensor(list(ids) if isinstance(ids, range) else ids)
    except (TypeError, ValueError, RuntimeError) as error:
        raise TypeError(f"{name} must be node ids (a tensor, list or range) or a bool mask, "
                        f"got {type(ids).__name__}: {error}") from None


def _seed_id_form(ids: Tensor, num_nodes: int, name: str) -> Tensor:
    """``ids`` in a form PyG takes as seeds: 1-D integer ids (int8/int16 and unsigned ones
    widened to int64, which the samplers take), or a bool mask of one entry per node; named
    now, not at the first batch under an inner name (a float id would have been cut to an
    integer there)."""
    if ids.dtype == torch.bool:
        if ids.dim() != 1 or ids.numel() != num_nodes:
            raise IndexError(f"{name} as a bool mask needs one entry per node ({num_nodes}), "
                             f"got shape {tuple(ids.shape)}")
        return ids
    if ids.is_floating_point() or ids.is_complex() or ids.dim() != 1:
        raise TypeError(f"{name} must be 1-D integer node ids or a bool mask, got "
                        f"{ids.dtype} of shape {tuple(ids.shape)}")
    if ids.dtype == torch.uint8:
        # torch indexing reads uint8 as a mask: ids or a mask, the reader cannot tell.
        raise TypeError(f"{name} are uint8, which torch reads as a mask: give int64 ids or "
                        f"a bool mask")
    return ids if ids.dtype in (torch.int32, torch.int64) else ids.long()


def _typed_input_nodes(input_nodes, graph_store: HeteroGraphStore):
    """``(node_type, ids on the host)`` from PyG's forms: a type, or (type, ids / mask /
    None)."""
    if isinstance(input_nodes, str):
        input_nodes = (input_nodes, None)
    if not (isinstance(input_nodes, (tuple, list)) and len(input_nodes) == 2
            and isinstance(input_nodes[0], str)):
        raise ValueError(f"on a heterogeneous graph input_nodes is a node type or "
                         f"(node_type, ids), got {type(input_nodes).__name__}")
    node_type, ids = input_nodes
    counts = graph_store.num_nodes_dict
    if node_type not in counts:
        raise ValueError(f"input_nodes names node type {node_type!r}; the graph has "
                         f"{sorted(counts)}")
    if ids is None:
        ids = torch.arange(counts[node_type], device="cpu")
    ids = _seed_id_form(_id_tensor(ids, "input_nodes[1]"), counts[node_type], "input_nodes[1]")
    return node_type, ids.cpu() if ids.device.type != "cpu" else ids


def _short_form_matches(short, edge_type) -> bool:
    """Whether PyG's short form ``short`` (a relation name, or the pair of end types)
    could name ``edge_type``."""
    if isinstance(short, str):
        return edge_type[1] == short
    return len(short) == 2 and (edge_type[0], edge_type[2]) == tuple(short)


def _typed_seed_edges(edge_label_index, graph_store: HeteroGraphStore, edge_label):
    """``(edge_type, [2, E] ids on the host)`` from PyG's forms: an edge type (its edges),
    or (edge_type, ids or None), the edge type written in full or, as PyG allows, as
    ``(src_type, dst_type)`` or a relation name that only one edge type has; each end
    checked against its node type's count."""
    def names_a_type(k) -> bool:
        return isinstance(k, str) or (isinstance(k, tuple) and len(k) in (2, 3)
                                      and all(isinstance(n, str) for n in k))

    if names_a_type(edge_label_index):
        edge_label_index = (edge_label_index, None)
    if not (isinstance(edge_label_index, (tuple, list)) and len(edge_label_index) == 2
            and names_a_type(edge_label_index[0])):
        raise ValueError("on a heterogeneous graph edge_label_index is an edge type or "
                         "(edge_type, [2, E] ids)")
    edge_type, ids = edge_label_index
    edge_types = list(graph_store.edge_index_dict)
    if edge_type not in edge_types:
        # PyG's short forms (HeteroData._to_canonical): the pair of end types, or the
        # relation name, when one edge type alone matches.
        matches = [et for et in edge_types if _short_form_matches(edge_type, et)]
        if len(matches) != 1:
            raise ValueError(f"edge_label_index names edge type {edge_type!r}, which "
                             f"{'several' if matches else 'none'} of the graph's edge types "
                             f"match{': ' + str(matches) if matches else ''}; the graph has "
                             f"{edge_types}")
        edge_type = matches[0]
    if ids is None:
        ids = graph_store.edge_index_dict[edge_type]
    counts = graph_store.num_nodes_dict
    # Shape and labels there; ranges here, by type (a bound of 2**62 there had named a
    # negative id with that bound, not its end's node type: a probe).
    ids = checked_seed_edges(ids, None, edge_label)
    for row, t in ((0, edge_type[0]), (1, edge_type[2])):
        bad = (ids[row] < 0) | (ids[row] >= counts[t])
        if bool(bad.any()):
            raise IndexError(f"edge_label_index[{row}] holds node {int(ids[row][bad][0])}, "
                             f"outside {t!r}'s {counts[t]} nodes")
    return edge_type, ids.cpu()


class NeighborLoader(_OnOurStores, _PygNeighborLoader):
    """PyG's ``NeighborLoader``, sampling with torch-quiver-ops on the GPU (or CPU) and
    gathering node attributes through tiered feature stores.

    Takes PyG's arguments (``data``, ``num_neighbors``, ``input_nodes``, ``replace``,
    ``subgraph_type``, ``transform``, ``batch_size``, ``shuffle``, ``drop_last``, ...),
    except that batches are always filtered in the main process (``filter_per_worker=True``
    warns) and ``is_sorted`` changes nothing (the topology is sorted once, when the store
    is built), plus:

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
        return_eid: put the sampled edges' ids in ``batch.e_id`` (always there when the
            graph has edge attributes, as in PyG's batches).
        sampling_generator: a ``torch.Generator`` on the sampling device for the sampling
            draws. By default the sampler has its own, seeded at the start of every epoch
            from PyTorch's default generator (as the shuffle is), so ``torch.manual_seed``
            reproduces the batches whatever else draws random numbers meanwhile (dropout,
            or a loader that prefetches batches ahead of the model). With ``num_workers``,
            each epoch's workers draw from generators seeded by one draw from it and their
            ids (its copies in the workers would all repeat one stream). Persistent
            workers (``persistent_workers=True``) start once, so their generators are
            seeded once: a later ``torch.manual_seed`` (or a reseeded
            ``sampling_generator``) reproduces the shuffle but not the sampled neighbors,
            as with PyG's and torch's loaders; for epochs reproducible one by one, leave
            them off. Negatives that
            PyG's code draws on the host (weighted by ``dst_weight``) come from PyTorch's
            default generator in the main process, so other draws there (dropout) change
            them.

    Batches carry every node attribute for the sampled nodes, every edge attribute
    (``edge_attr``, ``edge_weight``, ...) for the sampled edges, gathered by ``e_id``
    through the same tiered stores, and the graph-level attributes as they are. Batches
    live on the sampling device: ``batch.to(device)`` costs nothing. With a GPU
    sampler the loader runs in the main process (``num_workers`` is set to 0: CUDA does
    not work in forked workers, and one GPU samples faster than many CPU workers).
    ``weight_attr`` (an edge attribute: weighted sampling, successive sampling without
    replacement), ``time_attr`` (a node or edge attribute: temporal sampling, each seed's
    tree taking only edges at or before ``input_time``, by default the seeds' own node
    times), ``temporal_strategy`` (``"uniform"`` or ``"last"``) and ``disjoint`` are PyG's;
    batches then carry ``batch`` (each node's seed index) as PyG's do.

    A ``HeteroData`` (or a ``(FeatureStore, HeteroGraphStore)`` pair) is sampled by
    :class:`HeteroNeighborSampler`, every relation of a hop in the same kernel launches:
    ``num_neighbors`` per hop or per edge type, ``input_nodes`` a node type or ``(node_type,
    ids)``, and batches are PyG ``HeteroData`` objects with every node type's attributes
    (the tables of all types sharing one GPU cache of ``cache_size`` by hotness), ``n_id``,
    edge attributes per edge type, ``batch_size``, ``input_id`` and the per-hop counts, as
    PyG's own, and ``e_id`` per edge type with ``return_eid=True`` or when some edge type
    has attributes (PyG's batches always carry it). ``weight_attr`` names an attribute of
    every edge type, ``time_attr`` one of some node types (the others sampled regardless of
    time; seeds of such a type need ``input_time``) or of every edge type.
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
        _refuse("NeighborLoader", **{"directed=False": not directed})
        _filter_in_the_main_process("NeighborLoader", filter_per_worker)
        stores, graph_store, neighbor_sampler = self._set_up(
            data, num_neighbors, neighbor_sampler, device=device, mode=mode,
            cache_size=cache_size, cache_policy=cache_policy, host_reads=host_reads,
            replace=replace, return_eid=return_eid, subgraph_type=subgraph_type,
            sampling_generator=sampling_generator, kwargs=kwargs,
            rules=dict(weight_attr=weight_attr, time_attr=time_attr,
                       disjoint=check_flag(disjoint, "disjoint"),
                       temporal_strategy=temporal_strategy))
        if input_time is not None and not neighbor_sampler.sampler.temporal:
            raise ValueError("input_time needs temporal sampling: give time_attr too")
        if isinstance(graph_store, HeteroGraphStore):
            input_nodes = _typed_input_nodes(input_nodes, graph_store)
            if input_time is None and neighbor_sampler.sampler.temporal:
                # Named now, not at the first batch: seeds with no times of their own.
                if getattr(neighbor_sampler, "node_time_dict", None) is None:
                    raise ValueError("temporal sampling by edge time needs input_time: one "
                                     "time per seed")
                neighbor_sampler._check_timed(input_nodes[0], "input_time")
        elif input_nodes is None:
            input_nodes = torch.arange(graph_store.num_nodes, device="cpu")
        elif isinstance(input_nodes, Tensor) and input_nodes.device.type != "cpu":
            input_nodes = input_nodes.cpu()  # indexed per batch on the host, as PyG does
        elif not isinstance(input_nodes, Tensor):
            # A list, tuple, range or array of ids, as PyG takes with a Data (the pair of
            # stores PyG's loader gets from us takes tensors only).
            input_nodes = _id_tensor(input_nodes, "input_nodes")
        if isinstance(input_nodes, Tensor):
            input_nodes = _seed_id_form(input_nodes, graph_store.num_nodes, "input_nodes")
            if (input_time is None and neighbor_sampler.sampler.temporal
                    and neighbor_sampler.sampler.node_time is None):
                # Named now, as on a HeteroData, not at the first batch as seed_time.
                raise ValueError("temporal sampling by edge time needs input_time: one "
                                 "time per seed")
        super().__init__(stores, num_neighbors=num_neighbors, input_nodes=input_nodes,
                         input_time=None if input_time is None else as_tensor(input_time),
                         time_attr=time_attr,
                         transform=transform, transform_sampler_output=transform_sampler_output,
                         filter_per_worker=False, neighbor_sampler=neighbor_sampler, **kwargs)
        _check_one_time_each(self.input_data.time, self.input_data.node, "input_time",
                             "input node")
        # Now rather than at the batch that holds a bad id, somewhere in a shuffled epoch.
        if isinstance(graph_store, HeteroGraphStore):
            seed_type = self.input_data.input_type
            try:  # the (node_type, ids) form: its ids are input_nodes[1]
                checked_node_ids(self.input_data.node, graph_store.num_nodes_dict[seed_type],
                                 "input_nodes[1]")
            except IndexError as error:
                raise IndexError(f"{error} (nodes of type {seed_type!r})") from None
        else:
            checked_node_ids(self.input_data.node, graph_store.num_nodes, "input_nodes")
        self._hold_own_methods_weakly()
        self._decide_how_batches_are_drawn()


def _in_type_order(batch: HeteroData, node_types: list, edge_types: list) -> None:
    """Puts ``batch``'s node and edge stores in the data's order (types the data lacks, if
    any, after). The stores are kept, only their order changes."""
    for attr, order in (("_node_store_dict", node_types), ("_edge_store_dict", edge_types)):
        stores = getattr(batch, attr)
        ranked = {t: stores[t] for t in order if t in stores}
        ranked.update((t, store) for t, store in stores.items() if t not in ranked)
        if list(ranked) != list(stores):
            stores.clear()
            stores.update(ranked)


def _check_one_time_each(times: Optional[Tensor], items: Tensor, name: str, what: str) -> None:
    """A ValueError naming ``name`` unless it holds one time per item (PyG would fail later,
    in a batch, with an IndexError that names neither), and a TypeError naming it for
    floating-point times (the sampler's would name its own seed_time)."""
    if times is not None:
        integer_times(times, name)
    if times is not None and (times.dim() != 1 or times.numel() != items.numel()):
        # (a [3, 4] for 12 seeds passed, then failed in a batch as seed_time)
        raise ValueError(f"{name} must be 1-D, one time per {what} ({items.numel()}), got "
                         f"shape {tuple(times.shape)}")


# Bytes a negative costs at least in a batch (its ids, labels and the sampled tree's rows,
# several int64 each): past what the host has, a huge neg_sampling amount ran for a minute
# and ended in an allocator's error that named no argument.
NEGATIVE_BYTES = 64


def _check_negative_amount(neg_sampling, batch_size: int) -> None:
    """A ValueError naming ``neg_sampling``'s amount unless it is finite and a batch's
    negatives fit in host memory."""
    if neg_sampling is None:
        return
    amount = float(neg_sampling.amount)
    if not math.isfinite(amount):
        raise ValueError(f"neg_sampling's amount must be a finite number > 0, got {amount}")
    negatives = math.ceil(batch_size * amount)
    available = preflight.available_memory()
    if 0 <= available < negatives * NEGATIVE_BYTES:
        raise ValueError(f"neg_sampling's amount {amount:g} draws {negatives:,} negatives a "
                         f"batch of {batch_size}: at least "
                         f"{negatives * NEGATIVE_BYTES / 2**30:,.1f} GiB, where "
                         f"{available / 2**30:,.1f} GiB are available")


class LinkNeighborLoader(_OnOurStores, _PygLinkNeighborLoader):
    """PyG's ``LinkNeighborLoader`` (link prediction), sampling with torch-quiver-ops around
    both endpoints of each seed edge and gathering through tiered feature stores.

    Takes PyG's arguments (``data``, ``num_neighbors``, ``edge_label_index`` (default: every
    edge), ``edge_label``, ``neg_sampling`` (``"binary"`` or ``"triplet"``, with its
    ``amount``) or ``neg_sampling_ratio``, ``replace``, ``subgraph_type``, ``transform``,
    ``batch_size`` (seed edges per batch), ``shuffle``, ...) and the placement arguments of
    :class:`NeighborLoader` (``device``, ``mode``, ``cache_size``, ``cache_policy``,
    ``host_reads``, ``return_eid``, ``sampling_generator``).

    Batches are PyG's: ``edge_label_index`` (positions in ``n_id``) and ``edge_label`` for
    binary negatives (1 for seed edges, 0 for negatives; with ``edge_label`` given, the
    seed edges' labels, plus 1 where the smallest is 0, as PyG's, and 0 for negatives),
    or ``src_index``, ``dst_pos_index`` and ``dst_neg_index`` for triplets, beside every
    node, edge and graph-level attribute. The negatives are drawn on the sampling device
    (``torch_quiver_ops.ops.sample_negatives``): uniform over the nodes that are not true
    edges of their source (a true edge drawn again up to 8 times in all, which a hub's
    negatives can outlast: see ``sample_negatives``), or, with
    ``neg_exclude_edges=False``, uniform over all nodes as PyG's (a negative then a true edge
    about as often as the graph's density); with node times a negative must also exist by
    its pair's time (PyG's rule: five redraws, then the earliest node); negatives weighted
    by ``dst_weight`` are drawn by PyG's code on the host. ``weight_attr``,
    ``time_attr`` with ``edge_label_time``, ``temporal_strategy`` and ``disjoint`` are as
    for :class:`NeighborLoader`.

    On a ``HeteroData`` ``edge_label_index`` is an edge type or ``(edge_type, ids)``; the
    negatives are then pairs of its end types, kept off the true edges of every relation
    between those two types (or, with ``neg_exclude_edges=False``, uniform as PyG's);
    ``time_attr`` with ``edge_label_time`` (default: the source's node time) and
    ``disjoint`` as above.
    """

    _own_keys = LOADER_KEYS | LINK_LOADER_KEYS

    def __init__(self, data: Union[Data, Tuple[FeatureStore, GraphStore]], num_neighbors,
                 edge_label_index=None, edge_label: Optional[Tensor] = None,
                 edge_label_time: Optional[Tensor] = None, replace: bool = False,
                 subgraph_type: str = "directional", disjoint: bool = False,
                 temporal_strategy: str = "uniform", neg_sampling=None,
                 neg_sampling_ratio: Optional[Union[int, float]] = None,
                 time_attr: Optional[str] = None, weight_attr: Optional[str] = None,
                 transform=None, transform_sampler_output=None, is_sorted: bool = False,
                 filter_per_worker: Optional[bool] = None,
                 neighbor_sampler: Optional[NeighborSampler] = None, directed: bool = True, *,
                 device: Union[None, int, str, torch.device] = None, mode: Optional[str] = None,
                 cache_size: Union[int, str] = 0, cache_policy: str = "device_replicate",
                 host_reads: str = "auto", return_eid: bool = False,
                 sampling_generator: Optional[torch.Generator] = None,
                 neg_exclude_edges: Optional[bool] = None, **kwargs):
        _refuse("LinkNeighborLoader", **{"directed=False": not directed})
        _filter_in_the_main_process("LinkNeighborLoader", filter_per_worker)
        stores, graph_store, neighbor_sampler = self._set_up(
            data, num_neighbors, neighbor_sampler, device=device, mode=mode,
            cache_size=cache_size, cache_policy=cache_policy, host_reads=host_reads,
            replace=replace, return_eid=return_eid, subgraph_type=subgraph_type,
            sampling_generator=sampling_generator, kwargs=kwargs,
            rules=dict(weight_attr=weight_attr, time_attr=time_attr,
                       disjoint=check_flag(disjoint, "disjoint"),
                       temporal_strategy=temporal_strategy,
                       neg_exclude_edges=(None if neg_exclude_edges is None else
                                          check_flag(neg_exclude_edges, "neg_exclude_edges"))))
        if edge_label_time is not None and not neighbor_sampler.sampler.temporal:
            raise ValueError("edge_label_time needs temporal sampling: give time_attr too")
        if isinstance(graph_store, HeteroGraphStore):
            edge_type, edge_label_index = _typed_seed_edges(edge_label_index, graph_store,
                                                            edge_label)
            node_time_dict = getattr(neighbor_sampler, "node_time_dict", None)
            if edge_label_time is None and time_attr is not None and node_time_dict is not None:
                # The documented default, filled in here: PyG's loader refuses time_attr
                # without edge_label_time.
                neighbor_sampler._check_timed(edge_type[0], "edge_label_time")
                edge_label_time = as_tensor(node_time_dict[edge_type[0]]).cpu()[
                    as_tensor(edge_label_index[0]).cpu().long()]
            super().__init__(stores, num_neighbors=num_neighbors,
                             edge_label_index=(edge_type, edge_label_index),
                             edge_label=(None if edge_label is None
                                         else as_tensor(edge_label).cpu()),
                             edge_label_time=(None if edge_label_time is None
                                              else as_tensor(edge_label_time).cpu()),
                             time_attr=time_attr,
                             neg_sampling=neg_sampling, neg_sampling_ratio=neg_sampling_ratio,
                             transform=transform,
                             transform_sampler_output=transform_sampler_output,
                             filter_per_worker=False, neighbor_sampler=neighbor_sampler,
                             **kwargs)
            _check_one_time_each(self.input_data.time, self.input_data.row, "edge_label_time",
                                 "seed edge")
            _check_negative_amount(self.neg_sampling, self.batch_size)
            self._hold_own_methods_weakly()
            self._decide_how_batches_are_drawn()
            return
        if (isinstance(edge_label_index, (tuple, list)) and len(edge_label_index) == 2
                and edge_label_index[0] is None):
            edge_label_index = edge_label_index[1]  # PyG's (edge type, ids), one edge type
        if edge_label_index is None:
            if not isinstance(data, Data):
                raise ValueError("LinkNeighborLoader over a (FeatureStore, GraphStore) pair "
                                 "needs edge_label_index: the seed edges")
            edge_label_index = data.edge_index
        edge_label_index = checked_seed_edges(edge_label_index, graph_store.num_nodes,
                                              edge_label)
        # Over a pair of stores (what PyG's loader gets here) PyG takes the seed edges
        # beside their edge type.
        super().__init__(stores, num_neighbors=num_neighbors,
                         edge_label_index=(None, edge_label_index.cpu()),
                         edge_label=None if edge_label is None else as_tensor(edge_label).cpu(),
                         edge_label_time=(None if edge_label_time is None
                                          else as_tensor(edge_label_time).cpu()),
                         time_attr=time_attr,
                         neg_sampling=neg_sampling, neg_sampling_ratio=neg_sampling_ratio,
                         transform=transform, transform_sampler_output=transform_sampler_output,
                         filter_per_worker=False, neighbor_sampler=neighbor_sampler, **kwargs)
        _check_one_time_each(self.input_data.time, self.input_data.row, "edge_label_time",
                             "seed edge")
        _check_negative_amount(self.neg_sampling, self.batch_size)
        self._hold_own_methods_weakly()
        self._decide_how_batches_are_drawn()
