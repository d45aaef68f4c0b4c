"""PyG's ``DistNeighborLoader`` over a graph partitioned over hosts: each host holds one part
(:func:`~torch_quiver_ops.partition.partition_graph`), samples through
:class:`~torch_quiver_ops.partition.DistGraphSampler` (remote frontier nodes sampled by
their owners each hop) and gathers rows through a
:class:`~torch_quiver_ops.dist.DistFeature`."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Union

import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.data import Data

from .._device import as_int, check_flag, check_generator
from .._interrupts import ctrl_c_ends_waits
from ..dist import DistFeature, gloo_twin, not_a_group
from ..ops import check_fanouts
from ..partition import (DistGraphSampler, GraphPartition, _tell_sampler_setup_problem,
                         load_partition, read_manifest, split_ids)
from .sampler import _fanouts


class DistNeighborLoader:
    """Batches of a partitioned graph, as PyG's ``DistNeighborLoader`` gives them.

    Every host of ``group`` (one process per part, its rank the part) iterates at the same
    time: each batch's sampling and gathering are collectives. The hosts agree on the
    number of batches, the largest host's, so that every host's every seed comes up in
    each epoch; a host whose own batches run out goes on with its seeds from the start of
    its order (as ``DistributedSampler`` pads a rank's share), so no batch is empty. A host
    with no input nodes at all is an error on every host.

    Args:
        partition: a :func:`partition_graph` directory (this rank's part is loaded) or a
            loaded :class:`GraphPartition`.
        num_neighbors: fanouts per hop, the seeds' hop first.
        input_nodes: a split's name (its ids owned by this host), or global node ids or a
            boolean mask over the nodes (PyG's ``train_mask``), owned by this host when the
            partition holds labels; None: every node this host owns (PyG's None, all nodes,
            split over the hosts).
        batch_size, shuffle: as PyG's.
        feature: the rows of the graph's nodes, read by global id (a :class:`DistFeature`
            over the same hosts, or a tensor); None: batches carry no ``x``. One with fewer
            rows than the graph has nodes is refused on every host.
        group: the hosts (default: the world). The sampler exchanges over it when it is
            NCCL and ``mode`` samples on a GPU; otherwise (and for the loader's own
            agreement on the batch count) over a Gloo twin.
        replace, timeout, transport, mode, device, draws, lanes, bounded_slots: the
            sampler's (:class:`DistGraphSampler`; ``mode`` defaults to ``"CPU"``). With
            ``draws="requester"`` a host's batches depend on its own seeds and generator
            only; with the owners' draws, on every host's.
        seed: the shuffle's seed.
        generator: a ``torch.Generator`` for the sampler's draws (default: its own).
        verify: check each file of the partition against its CRC-32 when it is loaded (a
            partition's files are otherwise checked by size only: a flipped byte in range
            would give wrong neighbors silently).

    Batches are ``Data`` with ``x`` (the rows of ``n_id``), ``y`` (the seeds' labels, from
    the part: the first ``batch_size`` nodes), ``edge_index``, ``n_id``, ``e_id`` (global),
    ``input_id`` (each seed's place in this host's input nodes, as in PyG), ``batch_size``,
    ``num_sampled_nodes`` and ``num_sampled_edges``.
    """

    @ctrl_c_ends_waits
    def __init__(self, partition: Union[str, Path, GraphPartition], num_neighbors,
                 input_nodes: Union[None, str, Tensor] = "train", batch_size: int = 1,
                 shuffle: bool = False, feature=None, group=None, replace: bool = False,
                 timeout: float = 60.0, seed: int = 0, transport: str = "auto",
                 mode: str = "CPU", device=None, draws: Optional[str] = None, lanes: int = 1,
                 bounded_slots: Optional[bool] = None, verify: bool = False,
                 generator: Optional[torch.Generator] = None):
        problem = None
        try:
            count = as_int(batch_size)  # NumPy's ints too
            if count is None or count < 1:
                raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
            batch_size = count
            verify = check_flag(verify, "verify")
            check_generator(generator)
            fanouts = _fanouts(num_neighbors)
            check_fanouts(fanouts, replace, "num_neighbors")  # here, naming the argument
            bad_group = not_a_group(group)
            if bad_group is not None:
                group = None  # the problem told over the default group
                raise bad_group
        except (ValueError, TypeError) as error:
            problem = error
        if problem is not None and not dist.is_initialized():
            raise problem
        self.group = gloo_twin(group)  # collective: every host makes it, refusing or not
        given = group if group is not None else dist.group.WORLD
        on_gpu = (isinstance(mode, str) and mode.upper() in ("GPU", "UVA")
                  and dist.get_backend(given) == "nccl")
        self.sampler_group = given if on_gpu else self.group
        try:
            if problem is not None:
                raise problem
            if not isinstance(partition, GraphPartition):
                rank, size = dist.get_rank(self.group), dist.get_world_size(self.group)
                num_parts = read_manifest(partition)["num_parts"]
                if size != num_parts:  # (a rank past the parts had been told its part only)
                    raise ValueError(f"this process is rank {rank} of {size}, but {partition} "
                                     f"holds {num_parts} parts: run one process per part")
                partition = load_partition(partition, rank, verify=verify)
        except (ValueError, TypeError, IndexError, OSError) as error:
            # Told to the other hosts, which meet it in the sampler's setup agreement, so
            # that every host raises at once rather than after the timeout with nothing said.
            _tell_sampler_setup_problem(self.sampler_group, timeout, str(error))
            raise
        self.partition = partition
        self._closed = False
        self.sampler = DistGraphSampler(partition, fanouts, self.sampler_group,
                                        replace, timeout, transport, mode=mode, device=device,
                                        draws=draws, lanes=lanes, bounded_slots=bounded_slots)
        self.generator = generator
        # A problem with this host's input nodes is raised on every host, after the
        # agreement below: raised here alone, it left the others waiting on this one.
        try:
            self.input_nodes = self._own_input_nodes(input_nodes)
            self._check_feature(feature)
            problem = None
        except (ValueError, TypeError, IndexError) as error:
            self.input_nodes, problem = torch.empty(0, dtype=torch.long, device="cpu"), error
        self.batch_size, self.shuffle, self.feature = batch_size, shuffle, feature
        self.seed, self.epoch = seed, 0
        count = self.input_nodes.numel()
        self._own_batches = (count + batch_size - 1) // batch_size
        # One agreement (within `timeout`, naming a host that does not come; an all-reduce
        # waited the process group's timeout, 30 minutes by default): the most batches, the
        # fewest input nodes, and whether any host's input nodes were refused.
        texts = torch.classes.quiver.Transport.agree(
            self.group.boxed(), "dist-neighbor-loader-batches",
            json.dumps([self._own_batches, count, problem is not None]), float(timeout))
        everyone = [json.loads(text) for text in texts]
        refused_somewhere = any(refused for _, _, refused in everyone)
        if refused_somewhere:
            # Refused on every host together: the sampler's group kept for the next loader
            # (each refusal had kept one until exit, with its threads; a probe).
            self.sampler._spare_own_group()
        if problem is not None:
            raise problem
        if refused_somewhere:
            raise ValueError("another host's input_nodes or feature were refused (that host "
                             "names why): this DistNeighborLoader cannot run")
        empty = [h for h, (_, nodes, _) in enumerate(everyone) if nodes == 0]
        if empty:
            raise ValueError(f"host{'s' if len(empty) > 1 else ''} "
                             f"{', '.join(map(str, empty))} of this DistNeighborLoader "
                             f"{'have' if len(empty) > 1 else 'has'} no input nodes (this "
                             f"one, host {dist.get_rank(self.group)}, has {count}): each host "
                             f"samples its own nodes' batches, so every host needs some "
                             f"(partition so that each part owns input nodes)")
        self._batches = max(batches for batches, _, _ in everyone)

    def _check_feature(self, feature) -> None:
        """``feature`` holds a row for every node of this partition's graph: a table too
        short had failed one host mid-batch while the others waited out their timeout (a
        probe). (Rows are read by global id, so a DistFeature of another partitioning of
        the same table is as good as this one's.)"""
        if feature is None:
            return
        if not hasattr(feature, "__getitem__") or not hasattr(feature, "__len__"):
            raise TypeError(f"feature must be a DistFeature, a tensor of rows or None, got "
                            f"{type(feature).__name__}")
        if isinstance(feature, Tensor) and feature.dim() == 0:
            raise ValueError("feature must be a table of rows, got a 0-d tensor")
        if isinstance(feature, DistFeature) and feature.transport is None:
            # (its length still read: one host then failed mid-epoch, the others waiting
            # out the timeout; a probe)
            raise ValueError("feature is a DistFeature that was closed")
        try:
            rows = len(feature)
        except Exception as error:  # noqa: BLE001 (a closed or empty store, say)
            raise ValueError(f"feature cannot be read: {error}") from None
        nodes = self.partition.num_nodes
        if rows < nodes:
            raise ValueError(f"feature has {rows} rows for a graph of {nodes} nodes "
                             f"(partition {self.partition.part}'s graph)")

    def _own_input_nodes(self, input_nodes) -> Tensor:
        """This host's seeds: a split's ids, or given ids or a mask (such as PyG's
        ``train_mask``: the nodes it marks), each in the graph and, when batches carry
        ``y`` from this host's part, owned by this host."""
        partition = self.partition
        if input_nodes is None:  # (had been "ids must be integer ids ..., got None")
            return partition.nodes.long()
        if isinstance(input_nodes, str):
            if input_nodes not in partition.splits:
                raise ValueError(f"input_nodes={input_nodes!r} names no split of the partition "
                                 f"(it has {sorted(partition.splits)})")
            ids = partition.splits[input_nodes].long()
            # A split holds this host's own nodes; a corrupt file would have failed one
            # batch mid-epoch, on this host alone.
            bad = (ids < 0) | (ids >= partition.num_nodes)
            if not bool(bad.any()):
                bad = _not_owned(partition, ids)
            if bool(bad.any()):
                raise ValueError(f"split {input_nodes!r} of part {partition.part} holds node "
                                 f"{int(ids[bad][0])}, which is not this part's: the split's "
                                 f"file is corrupt (load_partition(verify=True) checks it)")
            return ids
        ids = split_ids("input_nodes", input_nodes, partition.num_nodes, "input_nodes")
        if partition.labels is not None and ids.numel():
            foreign = _not_owned(partition, ids)
            if bool(foreign.any()):
                raise ValueError(f"input_nodes holds node {int(ids[foreign][0])}, owned by "
                                 f"another host: y comes from each host's own part, so each "
                                 f"host's input nodes must be its own (a split's name gives "
                                 f"them)")
        return ids

    def __len__(self) -> int:
        return self._batches

    def close(self) -> None:
        """Closes the sampler (:meth:`DistGraphSampler.close`): call it on every host before
        ``destroy_process_group``. The feature, the caller's, stays open."""
        self._closed = True
        self.sampler.close()

    def __reduce__(self):
        # (pickle had said "cannot pickle ProcessGroup")
        raise TypeError("a DistNeighborLoader is bound to this process's process group and "
                        "its DistGraphSampler: build one in each process, not a copy")

    def __iter__(self):
        if self._closed:
            raise RuntimeError("this DistNeighborLoader was closed (DistNeighborLoader.close); "
                               "build a new one to iterate again")
        count = self.input_nodes.numel()
        # Each seed's place in input_nodes: PyG's input_id.
        order = torch.arange(count, device="cpu")
        if self.shuffle:
            gen = torch.Generator().manual_seed(
                self.seed + 7919 * self.epoch + dist.get_rank(self.group))
            order = torch.randperm(count, generator=gen, device="cpu")
        self.epoch += 1
        size = self.batch_size
        for b in range(self._batches):
            if b < self._own_batches:
                places = order[b * size:(b + 1) * size]
            else:  # past this host's own batches: its seeds again, from the start
                again = (b - self._own_batches) * size
                steps = torch.arange(size, device="cpu")
                places = order[(steps + again) % count][:min(size, count)]
            yield self._batch(self.input_nodes[places], places)

    def _batch(self, seeds: Tensor, places: Tensor) -> Data:
        node, row, col, edge, nodes_per_hop, edges_per_hop = self.sampler.sample_subgraph(
            seeds, self.generator)
        batch = Data(edge_index=torch.stack([row, col]), n_id=node, e_id=edge,
                     input_id=places.to(node.device), batch_size=seeds.numel(),
                     num_nodes=node.numel(),
                     num_sampled_nodes=nodes_per_hop.tolist(),
                     num_sampled_edges=edges_per_hop.tolist())
        if self.feature is not None:  # a table is indexed where it lies
            batch.x = self.feature[node.to(self.feature.device)
                                   if isinstance(self.feature, Tensor) else node]
        labels = self.partition.labels
        if labels is not None:
            foreign = _not_owned(self.partition, seeds)
            if bool(foreign.any()):
                raise ValueError("y comes from this host's part: seed "
                                 f"{int(seeds[foreign][0])} is owned by another host")
            batch.y = labels[self.partition.local_index[seeds]]
        return batch


def _not_owned(partition: GraphPartition, ids: Tensor) -> Tensor:
    """Which of ``ids`` (in the graph) another host owns."""
    return partition.owner[ids].long() != partition.part
