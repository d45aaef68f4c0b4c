"""Typed Python entry points of the quiver ops (``torch.ops.quiver.*``).

Each op wrapper is a thin call into the op, which validates its arguments itself, so the
same checks hold from Python, TorchScript and C++. Beside them are a few Python helpers
that prepare an op's inputs (``row_cumsum``, ``sort_rows_by_time``, ``integer_fanouts``,
``integer_times``): C++ callers build those inputs themselves.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import torch
from torch import Tensor

from ._device import as_int64, as_tensor, holds_integers, no_meta


def check_csr(indptr: Tensor, indices: Tensor, edge_ids: Optional[Tensor] = None,
              num_nodes: int = -1) -> None:
    """Raises unless the CSR is whole and sound: int64 ``indptr`` from 0 to ``indices``'
    length and non-decreasing, int32/int64 ``indices`` with every id in ``[0, num_nodes)``
    (default: ``indptr``'s node count), int64 ``edge_ids`` of ``indices``' length. The
    sampling ops check only the rows a batch touches; this scans every row once (ValueError,
    IndexError or TypeError, the kernels' own sentences)."""
    torch.ops.quiver.check_csr(indptr, indices, edge_ids, num_nodes)


def check_permutation(order: Tensor, num_rows: int, what: str = "order") -> None:
    """Raises unless ``order`` (1-D int32/int64, any device) lists each of ``num_rows`` rows
    exactly once (TypeError, ValueError or IndexError, naming it ``what``)."""
    torch.ops.quiver.check_permutation(order, num_rows, what)


def integer_fanouts(fanouts, what: str = "fanouts") -> List[int]:
    """``fanouts`` as a list of Python ints, else a TypeError naming ``what``: a string
    ("15" would be the hops 1 and 5), floats (2.9 would be 2) or bools are no fanouts."""
    if (isinstance(fanouts, (str, bytes)) or not hasattr(fanouts, "__iter__")
            or (isinstance(fanouts, torch.Tensor) and fanouts.dim() != 1)):
        raise TypeError(f"{what} must be a sequence of ints, one per hop, got {fanouts!r}")
    values, ints = list(fanouts), []
    for value in values:
        try:
            if isinstance(value, bool):
                raise TypeError
            ints.append(value.__index__())  # ints, numpy ints, integer 0-d tensors
        except (AttributeError, TypeError):
            raise TypeError(f"{what} must be a sequence of ints, one per hop, got {value!r} "
                            f"in {values!r}") from None
        if not -2 ** 63 <= ints[-1] < 2 ** 63:  # the ops' int[] would refuse it unnamed
            raise ValueError(f"{what}[{len(ints) - 1}] = {ints[-1]} does not fit in 64 bits")
    return ints


def check_fanouts(fanouts: List[int], replace: bool = False, what: str = "fanouts") -> None:
    """Raises ValueError unless ``fanouts`` names at least one hop, each -1 (all neighbors)
    or >= 0 (with ``replace``, within a hop's edge limit): the sampling ops' own check, for
    samplers that check when they are made."""
    torch.ops.quiver.check_fanouts(integer_fanouts(fanouts, what), replace, what)


def csr_from_coo(row: Tensor, col: Tensor, num_nodes: Optional[int] = None
                 ) -> Tuple[Tensor, Tensor, Tensor]:
    """Builds a CSR topology from COO edges ``row[k] -> col[k]``.

    Args:
        row, col: 1-D int32 or int64 tensors of equal length, ids in ``[0, num_nodes)``.
        num_nodes: node count; ``max(row, col) + 1`` when omitted.

    Returns:
        ``(indptr, indices, edge_ids)``: int64 ``indptr`` of ``num_nodes + 1`` offsets,
        ``indices`` (``col``'s dtype) with the neighbors of node ``v`` at
        ``indices[indptr[v]:indptr[v+1]]`` in input order, and int64 ``edge_ids`` giving
        each CSR edge's position in the input.
    """
    if torch.compiler.is_compiling():
        # Traced, the op and its fake check the arguments; the checks below read ids on the
        # host and /proc/meminfo, which broke a fullgraph compile (a probe).
        if num_nodes is None:
            raise ValueError("csr_from_coo under torch.compile needs num_nodes: the node "
                             "count read from the ids would make the output's size depend "
                             "on their values")
        return torch.ops.quiver.csr_from_coo(row, col, num_nodes)
    for name, t in (("row", row), ("col", col)):  # (a list failed on .numel())
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a tensor of node ids, got {type(t).__name__}")
        no_meta(t, name, "node ids")
    if num_nodes is None and row.numel() != col.numel():  # else max() of an empty one failed
        raise ValueError(f"row has {row.numel()} entries but col has {col.numel()}")
    if num_nodes is None and row.numel() and col.numel():
        low = int(torch.minimum(row.min(), col.min()))
        if low < 0:  # else the op would name a num_nodes the caller never passed
            which = "row" if int(row.min()) == low else "col"
            at = int((row if which == "row" else col).argmin())
            raise IndexError(f"{which}[{at}] = {low} is a negative node id")
    if num_nodes is None and row.numel():
        high = int(torch.maximum(row.max(), col.max()).item())
        if high >= 2**60 - 1:  # the op's bound on num_nodes, which the caller never passed
            which = "row" if int(row.max()) == high else "col"
            at = int((row if which == "row" else col).argmax())
            raise IndexError(f"{which}[{at}] = {high} is too large a node id (at most 2**60 - 2)")
        num_nodes = high + 1
    if num_nodes is None:
        num_nodes = 0
    if isinstance(num_nodes, bool) or not hasattr(num_nodes, "__index__"):
        raise TypeError(f"num_nodes must be an int, got {num_nodes!r}")
    num_nodes = num_nodes.__index__()
    if not -2**63 <= num_nodes < 2**63:  # (the binding's "expected 'int', found 'int'")
        raise ValueError(f"num_nodes must fit in int64 (and be at most 2**60), got {num_nodes}")
    if row.device.type == "cpu" and 0 <= num_nodes < 2**60:
        from .preflight import check_host_memory  # (preflight imports nothing of ours)
        # the offsets and a cursor per node (ops/cpu/csr_from_coo.cpp): past the memory
        # there is, the process was killed filling them, with no error
        check_host_memory(16 * (num_nodes + 1), f"csr_from_coo's offsets for {num_nodes:,} "
                          f"nodes", "check num_nodes, or row and col for a stray id")
    return torch.ops.quiver.csr_from_coo(row, col, num_nodes)


def sample_neighbors(indptr: Tensor, indices: Tensor, seeds: Tensor, fanout: int,
                     replace: bool = False, edge_ids: Optional[Tensor] = None,
                     generator: Optional[torch.Generator] = None
                     ) -> Tuple[Tensor, Tensor, Tensor]:
    """Samples up to ``fanout`` neighbors of every seed (``-1``: all neighbors).

    Without replacement (the default) each seed gets ``min(fanout, degree)`` distinct
    neighbors, every subset equally likely; with replacement, ``fanout`` independent
    uniform picks (none for a node without neighbors).

    Returns:
        ``(counts, neighbors, sampled_edge_ids)``: int64 per-seed counts, the neighbors of
        all seeds back to back, and their edge ids (``edge_ids[pos]`` if ``edge_ids`` is
        given, else the CSR position ``pos``). Outputs live on ``seeds``' device.

    One hop reads no neighbor's own row, so the neighbors are returned as ``indices``
    holds them, not checked against the node count (the multi-hop ops check them);
    :func:`check_csr` checks a whole CSR once, as ``CSRTopo`` does.

    Random numbers come from ``generator`` (a ``torch.Generator`` on ``seeds``' device),
    else from that device's default generator.
    """
    return torch.ops.quiver.sample_neighbors(indptr, indices, seeds, fanout, replace, edge_ids,
                                             generator)


def sample_subgraph(indptr: Tensor, indices: Tensor, seeds: Tensor, fanouts: List[int],
                    replace: bool = False, edge_ids: Optional[Tensor] = None,
                    generator: Optional[torch.Generator] = None
                    ) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Multi-hop neighbor sampling fused with reindexing, in PyG's layout.

    Hop ``h`` samples ``fanouts[h]`` neighbors of the nodes that hop ``h - 1`` added (the
    seeds for the first hop).

    Returns:
        ``(node_ids, rows, cols, sampled_edge_ids, nodes_per_hop, edges_per_hop)``:
        global ids of all sampled nodes with ``node_ids[:len(seeds)] == seeds``, then each
        hop's new nodes in order of first appearance; per edge the local index of the
        sampled neighbor (``rows``, message source) and of the node it was sampled for
        (``cols``, target), grouped by hop; edge ids as in :func:`sample_neighbors`; and
        int64 CPU tensors of new nodes per hop (seeds first) and edges per hop. Random
        numbers come from ``generator`` as in :func:`sample_neighbors`.

    A topology cache (some nodes' neighbor lists copied to GPU memory and read there
    instead of ``indices`` in pinned host memory) changes no sample, so it is not an
    argument here: a sampler object holds it (``GraphSageSampler(topology_cache=...)``, or
    ``torch.classes.quiver.SubgraphSampler`` with
    :func:`torch_quiver_ops.topology.build_topology_cache`'s tensors).
    """
    return torch.ops.quiver.sample_subgraph(indptr, indices, seeds, fanouts, replace, edge_ids,
                                            generator)


def neighbor_sample(indptr: Tensor, indices: Tensor, seeds: Tensor, fanouts: List[int],
                    replace: bool = False, edge_ids: Optional[Tensor] = None,
                    edge_weight: Optional[Tensor] = None, edge_time: Optional[Tensor] = None,
                    seed_time: Optional[Tensor] = None, strict_time: bool = False,
                    temporal_strategy: str = "uniform", disjoint: bool = False,
                    generator: Optional[torch.Generator] = None,
                    edge_weight_cumsum: Optional[Tensor] = None
                    ) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Weighted, temporal and disjoint multi-hop sampling (pyg-lib's ``neighbor_sample``).

    The hops and the layout of :func:`sample_subgraph`, with per-row rules. Per-edge
    arrays are indexed by CSR position, like ``indices`` (on CUDA: GPU or pinned host
    memory, as ``indices``).

    * ``edge_weight`` (float32, every weight of a visited row finite and ``> 0``, else
      ``ValueError``; drop an edge that must never be sampled). Without replacement the
      draw is *successive sampling*: the first neighbor is edge ``e`` with probability
      ``w_e / sum(w)``, each next one likewise among the edges not yet taken
      (Efraimidis-Spirakis keys). Inclusion probabilities are therefore not proportional
      to weight (a heavy edge's saturates at 1; the confusion of DGL#6917). With
      ``replace=True``: ``fanout`` independent draws with probability ``w_e / sum(w)``.
    * ``edge_time`` (int64, non-decreasing within each row: :func:`sort_rows_by_time`) with
      ``seed_time`` (int64, one per seed): the nodes of seed ``i``'s tree take only edges
      with ``time <= seed_time[i]`` (``<`` with ``strict_time``), as pyg-lib. For node
      times pass ``edge_time = node_time[indices]`` (``sort_rows_by_time`` does it).
      ``temporal_strategy="uniform"`` samples those edges like any row (weighted if
      ``edge_weight`` is given); ``"last"`` takes the ``fanout`` most recent. Needs
      ``disjoint=True``.
    * ``disjoint``: every seed grows its own tree (a node reached from two seeds appears
      once per tree); ``batch[k]`` is the seed index of ``node_ids[k]``.
    * ``edge_weight_cumsum`` (float64, with ``edge_weight``; :func:`row_cumsum` builds it):
      each row's prefix sums of its weights. Rows then draw by binary search in it, about
      ``fanout * log2(degree)`` reads a row instead of a key for every neighbor, from the
      same distribution (successive sampling is the order in which independent weighted
      draws first meet the edges). Worth it where rows are long: the frontier of a hop is
      biased toward high degrees. The op reads the sums only where its draws land, so it
      trusts them to be the weights' prefix sums (a step of zero width is never drawn
      rather than refused); :func:`check_row_tables` checks a table once. Likewise a row's
      times are searched, not scanned: an unsorted row can lose edges unnoticed.

    Returns:
        ``(node_ids, batch, rows, cols, sampled_edge_ids, nodes_per_hop, edges_per_hop)``
        as :func:`sample_subgraph`, with ``batch`` empty unless ``disjoint``.
    """
    return torch.ops.quiver.neighbor_sample(indptr, indices, seeds, fanouts, replace, edge_ids,
                                            edge_weight, edge_time, seed_time, strict_time,
                                            temporal_strategy, disjoint, generator,
                                            edge_weight_cumsum)


def hetero_neighbor_sample(indptr: Tensor, indices: Tensor, edge_ids: Tensor, seeds: Tensor,
                           node_type_offsets: List[int], relation_src_types: List[int],
                           relation_dst_types: List[int], relation_edge_offsets: List[int],
                           fanouts: List[int], replace: bool = False,
                           edge_weight: Optional[Tensor] = None,
                           edge_time: Optional[Tensor] = None,
                           seed_time: Optional[Tensor] = None, strict_time: bool = False,
                           temporal_strategy: str = "uniform", disjoint: bool = False,
                           generator: Optional[torch.Generator] = None,
                           edge_weight_cumsum: Optional[Tensor] = None
                           ) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """:func:`neighbor_sample` on a heterogeneous graph held as one CSR (pyg-lib's
    ``hetero_neighbor_sample``; :class:`torch_quiver_ops.hetero.HeteroCSRTopo` builds the
    layout and splits the output into PyG's dicts).

    Node ids are global: type ``t`` owns ``[node_type_offsets[t], node_type_offsets[t+1])``.
    Relation ``r`` joins ``relation_src_types[r] -> relation_dst_types[r]``; its edges carry
    the global edge ids ``[relation_edge_offsets[r], relation_edge_offsets[r+1])``
    (``edge_ids``, one per CSR position), each row's edges are grouped by relation in
    ascending relation order (trusted: a row's slices are found by binary search over its
    edge ids; :func:`check_row_tables` checks the order once), and
    ``indices`` of its edges are nodes of its source type. A node expands through every
    relation that ends at its type, ``fanouts[hop * num_relations + r]`` neighbors of
    relation ``r`` (``-1``: all), every relation in the same kernel launches of each hop.
    Weighted, temporal and disjoint rules as :func:`neighbor_sample`; with ``edge_time``
    each row is sorted by time within each relation's slice, and ``edge_weight_cumsum``
    restarts at each slice. (Where each node's relation slices start, read instead of two
    binary searches over the row's edge ids, over PCIe in UVA mode, changes no sample: a
    sampler object holds it, :class:`torch_quiver_ops.hetero.HeteroSampler` from
    :attr:`HeteroCSRTopo.slice_starts`.)

    Returns:
        ``(node_ids, batch, rows, cols, sampled_edge_ids, nodes_per_type_hop,
        edges_per_relation_hop)``: ``node_ids`` local to their type, grouped by type (each
        type's seeds first, then by hop), ``batch`` likewise when ``disjoint``; ``rows`` and
        ``cols`` (positions in the source and target type's group) and edge ids local to
        their relation, grouped by relation; and int64 CPU tensors ``[num_types, hops + 1]``
        and ``[num_relations, hops]`` of new nodes and edges per hop, whose row sums size
        the groups.
    """
    return torch.ops.quiver.hetero_neighbor_sample(
        indptr, indices, edge_ids, seeds, node_type_offsets, relation_src_types,
        relation_dst_types, relation_edge_offsets, fanouts, replace, edge_weight, edge_time,
        seed_time, strict_time, temporal_strategy, disjoint, generator, edge_weight_cumsum)


def integer_times(times, name: str) -> Tensor:
    """Times as int64, refusing floating-point ones: truncating them would let an edge at
    0.9 pass a seed at 0.5 (both would read 0). uint64 times past int64's range are
    refused: as int64 they would wrap around to before every other time."""
    if isinstance(times, (list, tuple)) and len(times) == 0:
        return torch.empty(0, dtype=torch.long, device="cpu")  # (as_tensor([]) holds floats)
    times = as_tensor(no_meta(times, name, "times"))
    if not holds_integers(times):
        raise TypeError(f"{name} must hold integer times (int64 timestamps), got "
                        f"{times.dtype}: scale them to whole units first")
    return as_int64(times, name, "times are int64 timestamps", ValueError)


def float32_weights(weights, name: str) -> Tensor:
    """Sampling weights as the kernels' float32, checked as given first (finite and >= 0),
    then as float32: 1e300 would read inf, 1e-50 would read 0, which masks its edge as a
    weight of 0 does, and 1e-45 and 2e-45 would both read 1.4e-45 (float32's subnormals
    round by up to half their value, which changes the draws' odds; the GPU's float keys
    of short rows read them as -inf, whatever they are). Complex and bool
    weights are refused (complex had lost its imaginary part with only torch's warning).
    Positions in the errors are ``weights``' own."""
    raw = no_meta(weights, name, "weights")
    weights = as_tensor(raw)
    if weights.is_floating_point() and not hasattr(raw, "dtype"):
        # A list: torch reads it as float32, where 1e-50 is 0 already (a probe)
        weights = as_tensor(raw, dtype=torch.float64)
    if weights.dtype.is_complex or weights.dtype == torch.bool:
        raise TypeError(f"{name} must hold real numbers, got {weights.dtype}")
    if weights.dim() != 1:  # (the positions below name one weight of a 1-D list)
        raise ValueError(f"{name} must hold one weight per edge (1-D), got shape "
                         f"{tuple(weights.shape)}")
    given = weights.double()
    as_float = given.float()
    for bad, why in ((~(torch.isfinite(given) & (given >= 0)),
                      ": every weight must be finite and >= 0"),
                     (torch.isinf(as_float), " is past float32's range (the sampler keeps "
                      "weights as float32): scale the weights down"),
                     ((given > 0) & (given < torch.finfo(torch.float32).tiny),
                      " is below float32's normal range (the sampler keeps weights as "
                      "float32, where it reads 0, which masks the edge, or a subnormal "
                      "that loses its odds): scale the weights up")):
        if bool(bad.any()):
            at = int(bad.nonzero()[0])
            raise ValueError(f"{name}[{at}] = {float(given[at])}{why}")
    return as_float


def _check_row_offsets(indptr: Tensor) -> None:
    """ValueError unless ``indptr`` is a CSR's row offsets: 1-D integers from 0, never
    falling (the helpers' check; the ops' own is check_csr, which also reads indices)."""
    if (indptr.dim() != 1 or indptr.numel() < 1 or not holds_integers(indptr)
            or int(indptr[0]) != 0 or bool((indptr.diff() < 0).any())):
        raise ValueError(f"indptr must be a CSR's row offsets (1-D integers from 0, never "
                         f"falling), got {indptr.dtype} of shape {tuple(indptr.shape)}"
                         + (f" from {int(indptr[0])} to {int(indptr[-1])}"
                            if indptr.dim() == 1 and indptr.numel() else ""))


def _cumsum_within_rows(weight: Tensor, indptr: Tensor) -> Tensor:
    """Each row's inclusive prefix sums by doubling (Hillis-Steele): every sum adds only its
    own row's weights, in O(edges x log(longest row))."""
    degrees = indptr.diff()
    position = (torch.arange(weight.numel(), device=weight.device)
                - torch.repeat_interleave(indptr[:-1], degrees, output_size=weight.numel()))
    out, reach, longest = weight.clone(), 1, int(degrees.max())
    while reach < longest:
        shifted = torch.zeros_like(out)
        shifted[reach:] = torch.where(position[reach:] >= reach, out[:-reach], 0.0)
        out += shifted
        reach *= 2
    return out


# Edges of the rows row_cumsum sums again on their own, at most, at once (a row longer alone).
_RESUM_EDGES = 1 << 22


def _resum_rows(out: Tensor, weight: Tensor, starts: Tensor, degrees: Tensor) -> None:
    """``out``'s sums of the rows that start at ``starts``, summed again on their own."""
    row_indptr = torch.cat([degrees.new_zeros(1), degrees.cumsum(0)])
    count = int(row_indptr[-1])
    edges = (torch.repeat_interleave(starts - row_indptr[:-1], degrees, output_size=count)
             + torch.arange(count, device=weight.device))
    out[edges] = _cumsum_within_rows(weight[edges], row_indptr)


def row_cumsum(indptr: Tensor, edge_weight: Tensor) -> Tensor:
    """Each CSR row's inclusive prefix sums of ``edge_weight`` (one weight per CSR edge,
    every one finite and > 0, else ``ValueError``), in float64: the ``edge_weight_cumsum``
    of :func:`neighbor_sample`. Runs on the weights' device."""
    _check_row_offsets(indptr)
    if edge_weight.dim() != 1 or edge_weight.numel() != int(indptr[-1]):
        raise ValueError(f"edge_weight must hold one weight per CSR edge ({int(indptr[-1])}), "
                         f"got shape {tuple(edge_weight.shape)}")
    weight = edge_weight.double()
    if weight.numel() == 0:
        return weight
    bad = ~(torch.isfinite(weight) & (weight > 0))
    if bool(bad.any()):
        at = int(bad.nonzero()[0])
        raise ValueError(f"edge_weight[{at}] = {float(weight[at])}: every weight must be "
                         f"finite and > 0")
    # A global running sum less each row's start: one pass, exact enough while a row's
    # weights are not tiny beside the rows before it. Rounding against the running total
    # (about 1e-16 of it per step) had left such rows' steps far off their weights: a row
    # of weights near 1e4 after 1e20 of others was drawn at twice some edges' rates. Rows
    # with a step off its weight by more than 1e-6 of it (the op's tolerance) are summed
    # again on their own.
    indptr = indptr.to(weight.device, torch.long)
    starts, degrees = indptr[:-1], indptr.diff()
    # (In place where it can be: a billion edges' float64 tables are 8 GB each.)
    out = weight.cumsum(0)
    before = torch.where(starts > 0, out[(starts - 1).clamp(min=0)],
                         torch.zeros_like(starts, dtype=torch.double))
    out -= torch.repeat_interleave(before, degrees, output_size=weight.numel())
    # Each row shifted so that its first sum is its first weight exactly (the op compares
    # them).
    nonempty = degrees > 0
    firsts = starts[nonempty]
    stray = torch.zeros_like(before)
    stray[nonempty] = weight[firsts] - out[firsts]
    out += torch.repeat_interleave(stray, degrees, output_size=weight.numel())
    out[firsts] = weight[firsts]
    error = out.clone()  # each step's distance from its weight, as a share of the weight
    error[1:] -= out[:-1]
    error[firsts] = out[firsts]
    error.sub_(weight).abs_().div_(weight)
    off = (~(error <= 1e-6)).nonzero().view(-1)  # (NaN too: a running sum past float64's range)
    del error
    if off.numel():
        rows = torch.unique(torch.searchsorted(indptr, off, right=True) - 1)
        ends = degrees[rows].cumsum(0)
        # In pieces of at most _RESUM_EDGES edges (a row longer alone): with weights of
        # several scales most rows may be summed again.
        first = 0
        while first < rows.numel():
            summed = int(ends[first - 1]) if first else 0  # edges of the rows before
            last = max(first + 1, int(torch.searchsorted(ends, summed + _RESUM_EDGES,
                                                          right=True)))
            _resum_rows(out, weight, starts[rows[first:last]], degrees[rows[first:last]])
            first = last
    return out


def check_row_tables(indptr: Tensor, edge_ids: Optional[Tensor] = None,
                     relation_edge_offsets: Optional[List[int]] = None,
                     edge_time: Optional[Tensor] = None, edge_weight: Optional[Tensor] = None,
                     edge_weight_cumsum: Optional[Tensor] = None) -> None:
    """Checks in full, once, the per-edge tables that the sampling ops read only where their
    draws land (so that a call costs what its sampled edges cost, not its rows' length):

    * with ``relation_edge_offsets`` (and ``edge_ids``): each row's edges in ascending
      relation order, as :func:`hetero_neighbor_sample` finds a row's relation slices by
      binary search over its edge ids (rows out of order sampled other relations' edges);
    * ``edge_time``: non-decreasing within each row (each relation's slice of a row), as
      the ops' searches for a seed's time assume (an unsorted row lost edges);
    * ``edge_weight_cumsum`` (with ``edge_weight``): each row's (slice's) inclusive prefix
      sums of the weights, each sum and each step (an edge's rate) to 1e-6, every weight
      finite and > 0 (a zero weight's step of zero width is never drawn, so the op cannot
      refuse it).

    :func:`row_cumsum`, :func:`sort_rows_by_time` and ``HeteroCSRTopo`` build tables that
    pass. O(edges), on the tables' device; ValueError naming the first row that fails."""
    _check_row_offsets(indptr)
    num_edges = int(indptr[-1])
    tables = [t for t in (edge_ids, edge_time, edge_weight, edge_weight_cumsum) if t is not None]
    device = tables[0].device if tables else indptr.device
    for name, table in (("edge_ids", edge_ids), ("edge_time", edge_time),
                        ("edge_weight", edge_weight), ("edge_weight_cumsum", edge_weight_cumsum)):
        if table is not None and (table.dim() != 1 or table.numel() != num_edges):
            raise ValueError(f"{name} must hold one entry per CSR edge ({num_edges}), got "
                             f"shape {tuple(table.shape)}")
    if num_edges == 0:
        return
    indptr = indptr.to(device, torch.long)
    rows = torch.repeat_interleave(torch.arange(indptr.numel() - 1, device=device),
                                   indptr.diff(), output_size=num_edges)
    starts = torch.ones(num_edges, dtype=torch.bool, device=device)  # where a group starts
    starts[1:] = rows[1:] != rows[:-1]
    within = "row"
    if relation_edge_offsets is not None:
        if edge_ids is None:
            raise ValueError("relation_edge_offsets needs edge_ids: a row's relations are "
                             "read from its edges' ids")
        offsets = as_tensor(list(relation_edge_offsets), dtype=torch.long, device=device)
        if offsets.numel() < 2 or bool((offsets.diff() < 0).any()):
            raise ValueError(f"relation_edge_offsets must be non-decreasing, one more than the "
                             f"relations, got {list(relation_edge_offsets)}")
        ids = edge_ids.to(device, torch.long)
        outside = (ids < offsets[0]) | (ids >= offsets[-1])
        if bool(outside.any()):
            at = int(outside.nonzero()[0])
            raise ValueError(f"edge_ids[{at}] = {int(ids[at])} is outside the relations' "
                             f"edge ids [{int(offsets[0])}, {int(offsets[-1])})")
        relation = torch.searchsorted(offsets, ids, right=True) - 1
        falls = ~starts[1:] & (relation[1:] < relation[:-1])
        if bool(falls.any()):
            at = int(falls.nonzero()[0]) + 1
            raise ValueError(
                f"row {int(rows[at])}'s edges are not in ascending relation order: CSR "
                f"position {at} holds an edge of relation {int(relation[at])} after one of "
                f"relation {int(relation[at - 1])} (hetero_neighbor_sample finds a row's "
                f"relation slices by binary search over its edge ids)")
        starts[1:] |= relation[1:] != relation[:-1]
        within = "relation's slice of a row"
    if edge_time is not None:
        times = integer_times(edge_time, "edge_time").to(device)
        falls = ~starts[1:] & (times[1:] < times[:-1])
        if bool(falls.any()):
            at = int(falls.nonzero()[0]) + 1
            raise ValueError(f"edge_time falls within row {int(rows[at])} at CSR position "
                             f"{at} ({int(times[at - 1])} then {int(times[at])}): each {within} "
                             f"must be sorted by time (sort_rows_by_time sorts them)")
    if edge_weight_cumsum is not None:
        if edge_weight is None:
            raise ValueError("edge_weight_cumsum is checked against edge_weight: give both")
        group_indptr = torch.cat([starts.nonzero().view(-1),
                                  torch.tensor([num_edges], device=device)])
        expected = row_cumsum(group_indptr, edge_weight.to(device))  # refuses bad weights
        sums = edge_weight_cumsum.to(device, torch.double)
        # Close to the sums, and each step close to its weight (the draws' rates are the
        # steps: sums within 1e-6 of a row's total still let a light edge's step double):
        # to 1e-6 of the weight, and 1e-12 of the sum so far beside it (float64 rounds a
        # sum to 1e-16 of it); never falling. So a weight below 1e-12 of the sum before it
        # may have a step of 0, never drawn, near enough its rate (a row's weights spanning
        # 2^53 leave such steps in row_cumsum's own sums).
        weight = edge_weight.to(device, torch.double)
        steps = sums.clone()
        steps[1:] -= torch.where(starts[1:], 0.0, sums[:-1])
        wrong = ~torch.isclose(sums, expected, rtol=1e-6, atol=0.0)
        wrong |= ~((steps - weight).abs() <= 1e-6 * weight + 1e-12 * sums.abs())
        wrong |= ~(steps >= 0)
        if bool(wrong.any()):
            at = int(wrong.nonzero()[0])
            raise ValueError(f"edge_weight_cumsum[{at}] = {float(sums[at])} is not the prefix "
                             f"sum of row {int(rows[at])}'s weights there ({float(expected[at])}"
                             f"; each {within} sums on its own): row_cumsum builds it")


def sort_rows_by_time(indptr: Tensor, indices: Tensor, edge_ids: Optional[Tensor] = None,
                      edge_time: Optional[Tensor] = None, node_time: Optional[Tensor] = None
                      ) -> Tuple[Tensor, Tensor, Tensor]:
    """Sorts each CSR row by time, as :func:`neighbor_sample` needs: by ``edge_time`` (one
    per CSR edge) or by the neighbor's ``node_time`` (one per node), ties kept in order.

    Returns ``(indices, edge_ids, edge_time)`` permuted alike; ``edge_ids`` defaults to the
    CSR positions, so sampled edge ids still name the input's edges. Runs on the arrays'
    device.
    """
    if (edge_time is None) == (node_time is None):
        raise ValueError("sort_rows_by_time needs exactly one of edge_time and node_time")
    check_csr(indptr, indices)  # the rows it sorts, and the neighbors whose times it reads
    if edge_ids is not None and (edge_ids.dim() != 1 or edge_ids.numel() != indices.numel()):
        raise ValueError(f"edge_ids must hold one id per CSR edge ({indices.numel()}), got "
                         f"shape {tuple(edge_ids.shape)}")
    if edge_time is None:
        node_time = integer_times(node_time, "node_time")
        if node_time.dim() != 1 or node_time.numel() != indptr.numel() - 1:
            raise ValueError(f"node_time must hold one time per node ({indptr.numel() - 1}), "
                             f"got shape {tuple(node_time.shape)}")
        edge_time = node_time.to(indices.device, torch.long)[indices.long()]
    edge_time = integer_times(edge_time, "edge_time").to(indices.device)
    if edge_time.dim() != 1 or edge_time.numel() != indices.numel():
        raise ValueError(f"edge_time must hold one time per CSR edge ({indices.numel()}), "
                         f"got shape {tuple(edge_time.shape)}")
    if edge_ids is None:
        edge_ids = torch.arange(indices.numel(), device=indices.device)
    degrees = (indptr[1:] - indptr[:-1]).to(indices.device)
    row_of = torch.repeat_interleave(torch.arange(degrees.numel(), device=indices.device), degrees)
    order = torch.argsort(edge_time, stable=True)
    order = order[torch.argsort(row_of[order], stable=True)]
    return indices[order], edge_ids.to(indices.device)[order], edge_time[order]


def sample_negatives(indptr: Tensor, indices: Tensor, src: Tensor, per_src: int,
                     exclude_edges: bool = True, max_trials: int = 8, out_rows: bool = False,
                     generator: Optional[torch.Generator] = None, dst_begin: int = 0,
                     dst_count: int = -1) -> Tensor:
    """Negative destinations for link prediction, drawn where ``src`` lives (GPU or CPU).

    ``out[i * per_src + j]`` is a node drawn uniformly from ``[0, num_nodes)`` for source
    ``src[i]``. With ``exclude_edges`` (the default) a draw that is a true edge
    ``src[i] -> v`` (``src[i]`` among ``v``'s neighbors in the CSR, whose rows list each
    node's sources, as the samplers read them) is drawn again, up to ``max_trials`` draws
    in all: the negatives are then uniform over the non-neighbors of ``src[i]``, except that
    after ``max_trials`` true edges in a row the last one stands: with probability
    ``(d / n) ** max_trials`` for a source with ``d`` of the ``n`` candidate nodes as
    neighbors (below 1e-8 at the default 8 for a source linked to under a tenth of the
    nodes, but 0.43 for a hub linked to nine tenths of them, and 1 on a complete graph,
    where no negative exists). Without it, a negative is a true edge with probability
    ``d / n``, as PyG's.

    The CSR's rows list each node's sources by default (``src[i]`` in row ``v``: the layout
    of :class:`torch_quiver_ops.pyg.GraphStore`); with ``out_rows`` its destinations (``v`` in
    row ``src[i]``: a :class:`~torch_quiver_ops.CSRTopo` built from ``edge_index``).

    ``dst_begin`` and ``dst_count`` (-1: to the last node) narrow the draws to
    ``[dst_begin, dst_begin + dst_count)``: one node type of a
    :class:`~torch_quiver_ops.HeteroCSRTopo`, whose ids are global. A pair is then kept off
    the true edges of every relation between the two types.
    """
    return torch.ops.quiver.sample_negatives(indptr, indices, src, per_src, exclude_edges,
                                             max_trials, out_rows, generator, dst_begin,
                                             dst_count)


def gather_rows(table: Tensor, ids: Tensor) -> Tensor:
    """``table[ids]`` for a contiguous table of any dtype; out-of-range ids raise."""
    return torch.ops.quiver.gather_rows(table, ids)


def gather_tiered_rows(tiers: List[Tensor], positions: Optional[Tensor], ids: Tensor) -> Tensor:
    """Rows ``ids`` of a table split over tiers.

    Tier ``k`` holds the rows at positions ``[begin_k, begin_k + len(tiers[k]))`` with
    ``begin_0 = 0``; row ``id`` sits at position ``positions[id]`` (at ``id`` when
    ``positions`` is None). On CUDA the tiers may be on the ids' GPU, on a peer GPU it can
    read (NVLink), or in pinned host memory, and one kernel reads them all; a large batch
    that reads pinned host memory is read in position order, page after page of the host
    table, which the GPU reaches faster. Out-of-range ids raise IndexError. Returns
    ``[len(ids), *row_shape]`` rows on the ids' device.

    How a GPU reads host rows changes no result, so it is set on a layout object rather
    than per call: ``layout = torch.classes.quiver.FeatureTiers(tiers, positions)``, then
    ``layout.set_stage_host_rows(True)`` (a large batch's host rows split between the
    GPU's zero-copy reads and CPU threads that gather into pinned staging for the copy
    engine, the share rebalanced after every call: 2-3x faster on host tables of tens of
    GB), ``layout.set_group_host_reads(False)`` (id order, to measure what the position
    order buys), and ``layout.gather(ids, host_read_blocks)`` (``> 0``: a gather that
    reads host rows runs on at most that many thread blocks, leaving the other SMs to a
    model training beside a prefetching loader; see :class:`Prefetcher`).
    :class:`Feature` holds one such layout per device.
    """
    return torch.ops.quiver.gather_tiered_rows(tiers, positions, ids)
