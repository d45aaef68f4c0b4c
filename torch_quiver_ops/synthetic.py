"""Synthetic graphs with power-law degrees and planted communities, sized like public
benchmarks when scaled up, with labels a GNN can learn.

Each node belongs to one of ``num_classes`` communities (its label). Edges follow a
Chung-Lu model, so expected degrees follow a power law, and with probability
``homophily`` an edge stays inside its source's community. Features are a weak class
signal under strong noise: one node's features say little about its label, its sampled
neighborhood says much more, which is what a GNN exploits.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, fields, replace
from typing import Optional

import torch
from torch import Tensor

from . import preflight
from ._device import as_int, as_real, check_flag, device_or_cpu, generator_seed


@dataclass(frozen=True)
class GraphSpec:
    num_nodes: int
    # Directed edges per node (each undirected edge counts twice), as a target: pairs
    # drawn twice or self-loops are drawn again 4 times at most, so heavy tails and small
    # graphs fall a little short (tiny: 11.5 of 12); under 90% of it, generate() warns.
    avg_degree: float
    num_features: int
    num_classes: int
    exponent: float = 2.3      # power-law exponent of the degree distribution
    max_degree_ratio: float = 400.0  # cap on a node's expected degree, in multiples of the mean
    homophily: float = 0.8     # chance an edge stays inside its source's community
    feature_signal: float = 0.2  # class-centroid scale against unit noise
    train_fraction: float = 0.08
    val_fraction: float = 0.02


PRESETS = {
    "tiny": GraphSpec(num_nodes=2_000, avg_degree=12, num_features=16, num_classes=4),
    "small": GraphSpec(num_nodes=100_000, avg_degree=20, num_features=100, num_classes=47),
    "medium": GraphSpec(num_nodes=400_000, avg_degree=40, num_features=100, num_classes=47),
    # ogbn-products: 2,449,029 nodes, 123,718,280 directed edges, 100 features, 47 classes.
    "products": GraphSpec(num_nodes=2_449_029, avg_degree=123_718_280 / 2_449_029,
                          num_features=100, num_classes=47),
    # Reddit: 232,965 nodes, 114,615,892 directed edges, 602 features, 41 classes; dense.
    "reddit": GraphSpec(num_nodes=232_965, avg_degree=114_615_892 / 232_965, num_features=602,
                        num_classes=41, exponent=3.0, max_degree_ratio=40.0),
    # ogbn-papers100M: 111,059,956 nodes, 1,615,685,872 directed edges, 128 features, 172
    # classes. Generate it on a GPU with csr=True (the CSR is built there too) and, for a
    # 28 GB rather than 57 GB table, feature_dtype=torch.bfloat16.
    "papers": GraphSpec(num_nodes=111_059_956, avg_degree=1_615_685_872 / 111_059_956,
                        num_features=128, num_classes=172),
}

# Feature tables larger than this many values are drawn in slices, so that a GPU holds only
# a slice at a time (smaller tables are drawn at once, as they always were).
_FEATURE_SLICE = 1 << 28
_CENTROID_ROWS_VALUES = 1 << 22  # values of the rows given their centroids at once


@dataclass
class SyntheticGraph:
    edge_index: Optional[Tensor]  # [2, E] int64, both directions of every undirected edge
    x: Optional[Tensor]  # [N, F] float32 (or the feature_dtype asked for)
    y: Tensor           # [N] int64 community = label
    train_idx: Tensor
    val_idx: Tensor
    test_idx: Tensor
    num_classes: int
    # With csr=True, the CSR instead of edge_index: int64 indptr, int32 (or int64) indices.
    indptr: Optional[Tensor] = None
    indices: Optional[Tensor] = None

    @property
    def num_nodes(self) -> int:
        return self.y.numel()

    @property
    def num_edges(self) -> int:
        return self.indices.numel() if self.edge_index is None else self.edge_index.size(1)

    def topology(self):
        """The graph as a :class:`~torch_quiver_ops.CSRTopo`."""
        from .topology import CSRTopo
        if self.edge_index is None:
            return CSRTopo(indptr=self.indptr, indices=self.indices)
        return CSRTopo(self.edge_index, num_nodes=self.num_nodes)


def _sample_pairs(count: int, node_order: Tensor, cum_weight: Tensor, community: Tensor,
                  community_low: Tensor, community_high: Tensor, homophily: float,
                  gen: torch.Generator) -> Tensor:
    """Draws `count` node pairs as undirected keys min * N + max, self-loops dropped."""
    n = node_order.numel()
    total = cum_weight[-1]
    device = node_order.device
    keys = []
    chunk = 1 << 22
    for start in range(0, count, chunk):
        size = min(chunk, count - start)
        src_pos = torch.searchsorted(cum_weight, torch.rand(size, generator=gen, dtype=torch.float64,
                                                            device=device) * total,
                                     right=True).clamp_(max=n - 1)
        src = node_order[src_pos]
        inside = torch.rand(size, generator=gen, device=device) < homophily
        comm = community[src]
        low = torch.where(inside, community_low[comm],
                          torch.zeros((), dtype=torch.float64, device=device))
        high = torch.where(inside, community_high[comm], total)
        r = low + torch.rand(size, generator=gen, dtype=torch.float64, device=device) * (high - low)
        dst = node_order[torch.searchsorted(cum_weight, r, right=True).clamp_(max=n - 1)]
        keep = src != dst
        src, dst = src[keep], dst[keep]
        keys.append(torch.minimum(src, dst) * n + torch.maximum(src, dst))
    return torch.cat(keys) if keys else torch.empty(0, dtype=torch.long, device=device)


def check_spec(spec: GraphSpec) -> None:
    """Each field of ``spec`` in its range, named when it is not (a negative degree gave no
    edges, an exponent of 1 a ZeroDivisionError, fractions over 1 an empty test set, and an
    exponent under 2, whose degrees have no finite mean, a graph of a few edges: its weights
    overflowed, or most drawn pairs fell on one hub and were dropped as repeats)."""
    if not isinstance(spec, GraphSpec):  # (5 had failed on a missing num_nodes)
        raise TypeError(f"spec must be a GraphSpec (or use synthetic_graph(name)), got "
                        f"{type(spec).__name__}")
    def number(value) -> bool:
        value = as_real(value)  # (NumPy's numbers too)
        return value is not None and math.isfinite(value)

    problems = [f"{name} must be an int >= 1, got {getattr(spec, name)!r}"
                for name in _INT_FIELDS
                if as_int(getattr(spec, name)) is None or getattr(spec, name) < 1]
    ranges = {"avg_degree": (">= 0", lambda v: v >= 0),
              "max_degree_ratio": ("> 0", lambda v: v > 0),
              "homophily": ("in [0, 1]", lambda v: 0 <= v <= 1),
              "feature_signal": ("", lambda v: True),
              "exponent": (">= 2 (a power law with a finite mean degree)", lambda v: v >= 2),
              "train_fraction": ("in (0, 1)", lambda v: 0 < v < 1),
              "val_fraction": ("in (0, 1)", lambda v: 0 < v < 1)}
    for name, (what, holds) in ranges.items():
        value = getattr(spec, name)
        if not number(value) or not holds(value):
            problems.append(f"{name} must be a finite number {what}".rstrip()
                            + f", got {value!r}")
    if not problems and spec.train_fraction + spec.val_fraction >= 1:
        problems.append(f"train_fraction + val_fraction must be under 1 (the rest are the "
                        f"test nodes), got {spec.train_fraction} + {spec.val_fraction}")
    if not problems:
        n = spec.num_nodes
        split = max(1, int(n * spec.train_fraction)) + max(1, int(n * spec.val_fraction))
        if split >= n:  # a train and a validation node at least, then the test nodes
            problems.append(f"num_nodes {n} leaves no test node (train and validation take "
                            f"{split}): give more nodes or smaller fractions")
        elif spec.avg_degree > n - 1:  # a simple graph (no self-loop or repeated pair)
            problems.append(f"avg_degree {spec.avg_degree} is more than a graph of {n} nodes "
                            f"without repeated edges holds ({n - 1} a node)")
    if problems:
        raise ValueError("bad graph spec: " + "; ".join(problems))


_INT_FIELDS = ("num_nodes", "num_features", "num_classes")


def _with_plain_numbers(spec: GraphSpec) -> GraphSpec:
    """``spec`` (checked) with NumPy's numbers as Python's, as the drawing takes them."""
    return replace(spec, **{f.name: as_int(getattr(spec, f.name)) if f.name in _INT_FIELDS
                            else as_real(getattr(spec, f.name)) for f in fields(spec)})


def _host_bytes(spec: GraphSpec, features: bool, on_cpu: bool, csr: bool,
                feature_dtype: torch.dtype) -> int:
    """An estimate, on the low side, of the host memory :func:`generate` holds at its
    peak: the edges it returns or, on the CPU, the drawn pairs as they are made unique
    (whichever is more), the features, and what it keeps per node. (A large override had
    drawn for minutes, then failed in the allocator naming nothing; a probe.)"""
    n, pairs = spec.num_nodes, int(spec.num_nodes * spec.avg_degree / 2)
    edges = 8 * pairs + 8 * n if csr else 32 * pairs  # (int32 indices; int64 edge_index)
    drawing = 24 * pairs if on_cpu else 0             # keys, their copy and unique's sort
    rows = n * spec.num_features * feature_dtype.itemsize if features else 0
    # communities, weights and their sums (on a GPU: the communities and the split)
    per_node = 40 if on_cpu else 24
    return max(edges, drawing) + rows + per_node * n


def generate(spec: GraphSpec, seed: int = 0, features: bool = True,
             device: Optional[torch.device] = None, csr: bool = False,
             feature_dtype: torch.dtype = torch.float32) -> SyntheticGraph:
    """Builds a graph from `spec`; the same seed (and device) gives the same graph. With a
    CUDA `device` the work runs there (much faster at scale); the result is on the CPU.
    With `csr`, the CSR is built where the graph is drawn (csr_from_coo, on the GPU for a
    CUDA device) and returned instead of edge_index: at papers100M scale this takes
    seconds, where an int64 edge_index alone would be 26 GB and a CPU build minutes."""
    check_spec(spec)
    spec = _with_plain_numbers(spec)
    seed = generator_seed(seed)
    features, csr = check_flag(features, "features"), check_flag(csr, "csr")
    if not (isinstance(feature_dtype, torch.dtype) and feature_dtype.is_floating_point):
        # a string was torch's "Invalid device string"; int64 or bool rounded the features
        raise TypeError(f"feature_dtype must be a floating torch.dtype such as "
                        f"torch.bfloat16, got {feature_dtype!r}")
    device = device_or_cpu(device)
    preflight.check_host_memory(
        _host_bytes(spec, features, device.type == "cpu", csr, feature_dtype),
        f"a synthetic graph of {spec.num_nodes:,} nodes, avg_degree {spec.avg_degree:g} and "
        f"{spec.num_features if features else 0} features",
        "give a smaller num_nodes, avg_degree or num_features")
    gen = torch.Generator(device=device).manual_seed(seed)
    n, num_classes = spec.num_nodes, spec.num_classes
    community = torch.randint(num_classes, (n,), generator=gen, device=device)

    # Chung-Lu weights: Pareto tails give a power law with the requested exponent.
    weight = torch.rand(n, generator=gen, dtype=torch.float64, device=device).clamp_(min=1e-12)
    weight = weight.pow(-1.0 / (spec.exponent - 1.0))
    weight.clamp_(max=float(weight.mean()) * spec.max_degree_ratio)
    node_order = torch.argsort(community, stable=True)
    # On the CPU: a GPU scan of floats may round differently from run to run (its partial
    # sums combine in whatever order the blocks finish), and a few edges then land on other
    # nodes; seen on an H200, 1,694 of 124M neighbor entries between two processes.
    cum_weight = torch.cumsum(weight[node_order].cpu(), 0).to(device)
    ends = torch.cumsum(torch.bincount(community, minlength=num_classes), 0)
    starts = ends - torch.bincount(community, minlength=num_classes)
    padded = torch.cat([torch.zeros(1, dtype=torch.float64, device=device), cum_weight])
    community_low, community_high = padded[starts], padded[ends]

    target = int(round(n * spec.avg_degree / 2))
    keys = torch.empty(0, dtype=torch.long, device=device)
    for _ in range(4):  # top up what self-loops and duplicates took away
        missing = target - keys.numel()
        if missing <= 0:
            break
        fresh = _sample_pairs(int(missing * 1.1) + 16, node_order, cum_weight, community,
                              community_low, community_high, spec.homophily, gen)
        keys = torch.unique(torch.cat([keys, fresh]))
    if keys.numel() > target:
        keys = keys[torch.randperm(keys.numel(), generator=gen, device=device)[:target]]
        keys = keys.sort().values
    elif keys.numel() < 0.9 * target:  # (a few % short is the usual: tiny has 11.5 of 12)
        warnings.warn(f"the graph has {2 * keys.numel():,} directed edges, "
                      f"{keys.numel() / target:.0%} of avg_degree {spec.avg_degree:g}'s "
                      f"{2 * target:,}: most pairs drawn again fell on the same hubs (a "
                      f"heavy tail: exponent {spec.exponent:g}, max_degree_ratio "
                      f"{spec.max_degree_ratio:g}) or in small communities (num_classes "
                      f"{num_classes}, homophily {spec.homophily:g})")
    low, high = keys // n, keys % n
    del keys
    edge_index = indptr = indices = None
    if csr:
        from .ops import csr_from_coo
        ids = torch.int32 if n <= torch.iinfo(torch.int32).max else torch.int64
        low, high = low.to(ids), high.to(ids)
        row, col = torch.cat([low, high]), torch.cat([high, low])
        del low, high
        indptr, indices, _ = csr_from_coo(row, col, n)
        del row, col
        indptr, indices = indptr.cpu(), indices.cpu()
    else:  # filled in place (stacking two concatenations had held it twice)
        pairs = low.numel()
        edge_index = torch.empty(2, 2 * pairs, dtype=low.dtype, device=low.device)
        edge_index[0, :pairs], edge_index[0, pairs:] = low, high
        edge_index[1, :pairs], edge_index[1, pairs:] = high, low
        del low, high
        edge_index = edge_index.cpu()

    # The split is drawn before the features, so that a graph without them (features=False)
    # has the same split as with them.
    perm = torch.randperm(n, generator=gen, device=device).cpu()
    x = None
    if features:
        centroids = torch.randn(num_classes, spec.num_features, generator=gen, device=device)
        if n * spec.num_features <= _FEATURE_SLICE:
            x = torch.randn(n, spec.num_features, generator=gen, device=device)
            # The centroids added a slice of rows at a time: centroids[community] whole
            # had been a second table as large as x (a probe: 3x the output at the peak).
            step = max(1, _CENTROID_ROWS_VALUES // spec.num_features)
            for start in range(0, n, step):
                x[start:start + step].add_(centroids[community[start:start + step]],
                                           alpha=spec.feature_signal)
            x = x.to(feature_dtype).cpu()
        else:
            x = torch.empty(n, spec.num_features, dtype=feature_dtype)
            step = max(1, _FEATURE_SLICE // spec.num_features)
            for start in range(0, n, step):
                part = torch.randn(min(step, n - start), spec.num_features, generator=gen,
                                   device=device)
                part.add_(centroids[community[start:start + part.size(0)]],
                          alpha=spec.feature_signal)
                x[start:start + part.size(0)] = part.to(feature_dtype).cpu()

    community = community.cpu()
    num_train = max(1, int(n * spec.train_fraction))
    num_val = max(1, int(n * spec.val_fraction))
    return SyntheticGraph(edge_index=edge_index, x=x, y=community,
                          train_idx=perm[:num_train].sort().values,
                          val_idx=perm[num_train:num_train + num_val].sort().values,
                          test_idx=perm[num_train + num_val:].sort().values,
                          num_classes=num_classes, indptr=indptr, indices=indices)


def _preset(size: str) -> GraphSpec:
    if size not in PRESETS:
        raise ValueError(f"unknown size {size!r}; choose one of {sorted(PRESETS)}")
    return PRESETS[size]


def preset_host_bytes(size: str, device: Optional[torch.device] = None) -> int:
    """About the host memory (low side) that ``synthetic_graph(size, device=device)`` holds
    at its peak: what its memory check asks for, known before a run starts drawing."""
    return _host_bytes(_preset(size), True, device_or_cpu(device).type == "cpu", False,
                       torch.float32)


def synthetic_graph(size: str = "tiny", seed: int = 0, features: bool = True,
                    device: Optional[torch.device] = None, csr: bool = False,
                    feature_dtype: torch.dtype = torch.float32, **overrides) -> SyntheticGraph:
    """A preset graph by name ("tiny", "small", "medium", "products", "reddit", "papers"),
    with optional field overrides, e.g. ``synthetic_graph("small", num_nodes=10_000)``;
    `csr` and `feature_dtype` as in :func:`generate`."""
    return generate(replace(_preset(size), **overrides), seed=seed, features=features,
                    device=device, csr=csr, feature_dtype=feature_dtype)
