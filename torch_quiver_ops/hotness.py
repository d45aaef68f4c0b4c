"""Which rows are hot: orders of node ids, hottest first, that decide what a feature store
keeps in GPU memory (and, distributed, what every host replicates).

* :func:`degree_order`: by degree, highest first;
* :func:`presample_hot_order`: by how many sampled batches read each row;
* :func:`presample_topology_order`: for a UVA sampler's topology cache, nodes by sampled
  edges read from their neighbor lists per byte those lists take;
* a user's own order, checked by :func:`check_hot_order`.

A store keeps its rows in hot order and finds row ``id`` at ``positions[id]``
(:func:`positions_of`, the inverse permutation).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from . import ops
from ._device import (as_int, check_generator, checked_node_ids, holds_integers,
                      readable_ids)

INT32_MAX = 2**31 - 1


def degree_order(degree: Tensor) -> Tensor:
    """Node ids from highest to lowest degree (ties by id); ``degree`` is a 1-D tensor of
    one count per node (a 2-D one had given a 2-D "order", and a NaN sorted first)."""
    if not isinstance(degree, Tensor):
        raise TypeError(f"degree must be a 1-D tensor of one count per node, got "
                        f"{type(degree).__name__}")
    if degree.dim() != 1:  # (a shape is a value, as for the ops)
        raise ValueError(f"degree must be a 1-D tensor of one count per node, got shape "
                         f"{tuple(degree.shape)}")
    if degree.is_floating_point() and not bool(torch.isfinite(degree).all()):
        at = int((~torch.isfinite(degree)).nonzero()[0])
        raise ValueError(f"degree[{at}] = {float(degree[at])}: every degree must be finite")
    return torch.argsort(degree, descending=True, stable=True)


def _topology_of(sampler):
    """The sampler's graph, else a TypeError naming ``sampler`` (None was an
    AttributeError on csr_topo)."""
    from .topology import CSRTopo  # (topology imports this module)
    topo = getattr(sampler, "csr_topo", None)
    if not isinstance(topo, CSRTopo):
        raise TypeError(f"sampler must be a GraphSageSampler, got {type(sampler).__name__}")
    return topo


def _presampled_batches(sampler, seeds, batch_size: int, num_batches: Optional[int],
                        generator: Optional[torch.Generator]):
    """sample_subgraph's output for shuffled batches of ``seeds`` (``num_batches`` of
    them; None: one epoch)."""
    seeds = readable_ids(seeds, "seeds").cpu()
    topo = getattr(sampler, "csr_topo", None)
    # The seeds SampleLoader takes: a mask of one bool per node, narrow int ids widened
    if seeds.dtype == torch.bool and topo is not None and seeds.dim() == 1 \
            and seeds.numel() == topo.node_count:
        seeds = torch.nonzero(seeds).view(-1)
    elif holds_integers(seeds) and seeds.dtype not in (torch.int32, torch.int64):
        seeds = checked_node_ids(seeds, topo.node_count, "seeds") if topo is not None \
            else seeds.long()  # (uint64 ids past int64 are named there)
    if seeds.dim() != 1 or seeds.numel() == 0:
        raise ValueError(f"seeds must be a non-empty 1-D tensor, got shape {tuple(seeds.shape)}")
    size, count = as_int(batch_size), None if num_batches is None else as_int(num_batches)
    if size is None or size < 1:
        raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
    if num_batches is not None and (count is None or count < 0):
        raise ValueError(f"num_batches must be None (one epoch) or an int >= 0, got "
                         f"{num_batches!r}")
    check_generator(generator)
    batch_size, num_batches = size, count
    if topo is not None and holds_integers(seeds):
        # By position in seeds, before the shuffle (the sampler names one in its batch).
        checked_node_ids(seeds, topo.node_count, "seeds")
    batches = seeds[torch.randperm(seeds.numel(), generator=generator,
                                   device="cpu")].split(batch_size)
    # With a generator, the sampling draws come from it too (a generator of the sampling
    # device, seeded from it), so that the same generator gives the same order.
    sampling = None
    if generator is not None:
        draw = torch.empty((), dtype=torch.int64, device="cpu").random_(generator=generator)
        sampling = torch.Generator(sampler.device).manual_seed(int(draw))
    for batch in batches[:num_batches] if num_batches is not None else batches:
        yield sampler.sample_subgraph(batch, sampling)


def presample_hot_order(sampler, seeds: Tensor, batch_size: int = 1024,
                        num_batches: Optional[int] = None,
                        generator: Optional[torch.Generator] = None) -> Tensor:
    """Node ids hottest first, by how many sampled batches read each node's row.

    Runs ``sampler`` over shuffled batches of ``seeds`` (``num_batches`` of them, default
    one epoch) and counts the batches each node appears in. Ties, such as nodes never
    sampled, go by degree. Pass the result as ``hot_order`` to
    :meth:`Feature.from_cpu_tensor`.
    """
    topo = _topology_of(sampler)
    counts = torch.zeros(topo.node_count, dtype=torch.int32, device=sampler.device)
    for node_ids, *_ in _presampled_batches(sampler, seeds, batch_size, num_batches, generator):
        counts[node_ids] += 1  # a batch lists each node once
    by_degree = degree_order(topo.degree.to(counts.device))
    return by_degree[torch.argsort(counts[by_degree], descending=True, stable=True)].cpu()


def presample_topology_order(sampler, seeds: Tensor, batch_size: int = 1024,
                             num_batches: Optional[int] = 20,
                             generator: Optional[torch.Generator] = None) -> Tensor:
    """Node ids best first for a topology cache (``GraphSageSampler(topology_cache=...,
    hot_order=...)``): by how many sampled edges ``sampler`` read from each node's
    neighbor list over ``num_batches`` shuffled batches of ``seeds``, per byte the list
    takes (its entries plus the 4 bytes of its start).

    Degree is a poor order here: a hub's list costs its whole degree in bytes but yields
    at most a fanout of reads per visit, while the training seeds' own short lists are
    read in full by every batch that draws them. Nodes never sampled go last, by degree.
    """
    topo = _topology_of(sampler)
    reads = torch.zeros(topo.node_count, dtype=torch.float64, device=sampler.device)
    for node_ids, _, cols, *_ in _presampled_batches(sampler, seeds, batch_size, num_batches,
                                                     generator):
        reads.index_add_(0, node_ids[cols], torch.ones(cols.numel(), dtype=torch.float64,
                                                        device=reads.device))
    degree = topo.degree.to(reads.device)
    by_degree = degree_order(degree)
    score = reads / (degree * topo.indices.element_size() + 4).double()
    return by_degree[torch.argsort(score[by_degree], descending=True, stable=True)].cpu()


def check_hot_order(order, num_rows: int) -> Tensor:
    """``order`` as int64 after checking it lists each of ``num_rows`` rows exactly once."""
    order = readable_ids(order, "hot_order").cpu()
    ops.check_permutation(order, num_rows, "hot_order")
    return order.long()


def positions_of(order) -> Tensor:
    """The inverse permutation, int32 where it fits: positions[order[p]] = p. An ``order``
    that is not a permutation of ``range(len(order))`` raises (the output had held
    uninitialised memory where an id was missing)."""
    order = readable_ids(order, "order").cpu()
    ops.check_permutation(order, order.numel(), "order")
    return inverse_of_checked(order)


def inverse_of_checked(order: Tensor) -> Tensor:
    """:func:`positions_of` for an order already checked (a store's hot order, checked
    when it was given: a second check would read every id again)."""
    dtype = torch.int32 if order.numel() <= INT32_MAX else torch.int64
    positions = torch.empty(order.numel(), dtype=dtype, device=order.device)
    positions[order] = torch.arange(order.numel(), dtype=dtype, device=order.device)
    return positions


def check_positions(positions: Tensor, num_rows: int, what: str = "positions") -> Tensor:
    """``positions`` after checking it is a permutation of ``range(num_rows)`` (e.g. read
    back from a file), so a corrupt map raises here instead of gathering wrong rows."""
    try:
        positions = readable_ids(positions, what)
        ops.check_permutation(positions, num_rows, what)
    except (ValueError, IndexError) as error:
        why = str(error).removeprefix(f"{what} is not a permutation: ")  # said once
        raise ValueError(f"{what} is not a permutation of the {num_rows} rows: {why}") from None
    return positions
