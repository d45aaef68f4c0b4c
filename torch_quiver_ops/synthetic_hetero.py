"""Synthetic heterogeneous graphs sized like ogbn-mag and MAG240M.

:func:`mag_like`: ogbn-mag's four node types and four relations (plus reverses), with paper
labels a GNN can learn: every node has a community among ``num_classes`` (a paper's is its
label), edges follow a Chung-Lu model per node type (power-law degrees) and with
probability ``homophily`` land in the source's community, and paper features carry a weak
class signal under strong noise, so the sampled neighborhood says more than the node.

:func:`mag240m_like`: MAG240M's node and edge counts (244M nodes, 1.7B edges, 3.5B once
reversed) built straight into :class:`~torch_quiver_ops.HeteroCSRTopo`'s layout, a slice of
destination nodes at a time, so that no edge list and no sort of 3.5B edges is ever held:
host memory is the CSR itself (4-byte indices, 8-byte edge ids).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from . import preflight
from ._device import as_int, as_real, device_or_cpu, generator_seed
from .hetero import EdgeType, HeteroCSRTopo

# ogbn-mag: node counts and its four relations with their edge counts.
MAG_NODES = {"paper": 736_389, "author": 1_134_649, "institution": 8_740,
             "field_of_study": 59_965}
MAG_RELATIONS = [("author", "writes", "paper", 7_145_660),
                 ("paper", "cites", "paper", 5_416_271),
                 ("author", "affiliated_with", "institution", 1_043_998),
                 ("paper", "has_topic", "field_of_study", 7_505_078)]
MAG_SPLIT = (629_571, 64_879, 41_939)  # ogbn-mag's train / val / test papers
# MAG240M (OGB-LSC): papers, authors, institutions and its three relations.
MAG240M_NODES = {"paper": 121_751_666, "author": 122_383_112, "institution": 25_721}
EXPONENT = 2.3  # power-law exponent of the degree distributions
MAX_DEGREE_RATIO = 400.0  # cap on a node's expected degree, in multiples of the mean
MAG240M_RELATIONS = [("author", "writes", "paper", 386_022_720),
                     ("author", "affiliated_with", "institution", 44_592_586),
                     ("paper", "cites", "paper", 1_297_748_926)]


@dataclass
class HeteroGraph:
    edge_index_dict: Dict[EdgeType, Tensor]
    num_nodes_dict: Dict[str, int]
    x_dict: Dict[str, Tensor]  # paper features only; other types have none
    y: Tensor                  # paper labels (communities)
    train_idx: Tensor
    val_idx: Tensor
    test_idx: Tensor
    num_classes: int

    def to_hetero_data(self):
        """The graph as PyG's ``HeteroData`` (``y`` and the split masks on papers)."""
        try:
            from torch_geometric.data import HeteroData
        except ImportError as error:
            raise ImportError("to_hetero_data needs PyG: pip install torch-geometric",
                              name="torch_geometric") from error
        data = HeteroData()
        for t, n in self.num_nodes_dict.items():
            data[t].num_nodes = n
        for t, x in self.x_dict.items():
            data[t].x = x
        data["paper"].y = self.y
        for name, idx in (("train", self.train_idx), ("val", self.val_idx),
                          ("test", self.test_idx)):
            mask = torch.zeros(self.num_nodes_dict["paper"], dtype=torch.bool)
            mask[idx] = True
            data["paper"][f"{name}_mask"] = mask
        for et, ei in self.edge_index_dict.items():
            data[et].edge_index = ei
        return data


class _Endpoints:
    """Where one node type's edge ends land: Chung-Lu weights with a power-law tail (capped
    at ``max_ratio`` times the mean), nodes grouped by community so that a draw can be kept
    inside one community."""

    def __init__(self, num_nodes: int, num_classes: int, gen: torch.Generator, device,
                 exponent: float = EXPONENT, max_ratio: float = MAX_DEGREE_RATIO):
        self.num_nodes = num_nodes
        self.community = torch.randint(num_classes, (num_nodes,), generator=gen, device=device)
        weight = torch.rand(num_nodes, generator=gen, dtype=torch.float64,
                            device=device).clamp_(min=1e-12).pow_(-1.0 / (exponent - 1.0))
        self.weight = weight.clamp_(max=float(weight.mean()) * max_ratio)
        self.order = torch.argsort(self.community, stable=True)
        self.cum = torch.cumsum(self.weight[self.order], 0)
        counts = torch.bincount(self.community, minlength=num_classes)
        ends = torch.cumsum(counts, 0)
        padded = torch.cat([self.cum.new_zeros(1), self.cum])
        self.low, self.high = padded[ends - counts], padded[ends]

    def draw(self, count: int, gen: torch.Generator, community: Optional[Tensor] = None,
             homophily: float = 0.0) -> Tensor:
        """``count`` nodes by weight; with ``community``, each inside that community with
        probability ``homophily``."""
        device = self.cum.device
        total = self.cum[-1]
        r = torch.rand(count, generator=gen, dtype=torch.float64, device=device)
        if community is None:
            r.mul_(total)
        else:
            inside = torch.rand(count, generator=gen, device=device) < homophily
            low = torch.where(inside, self.low[community], r.new_zeros(()))
            high = torch.where(inside, self.high[community], total)
            r = low + r * (high - low)
        at = torch.searchsorted(self.cum, r, right=True).clamp_(max=self.num_nodes - 1)
        return self.order[at]


def _check_scale(scale) -> float:
    """A scale is a finite number > 0 (0 or less had quietly given one node a type);
    returned as a Python float."""
    value = as_real(scale)
    if value is None or not 0 < value < float("inf"):
        raise ValueError(f"scale must be a finite number > 0, got {scale!r}")
    return value


def _count_at_least(value, name: str, least: int) -> int:
    """``value`` as a Python int (Python's or NumPy's) >= ``least``, else a ValueError
    naming ``name``."""
    count = as_int(value)
    if count is None or count < least:
        raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
    return count


def mag_like_sizes(scale: float = 1.0) -> Tuple[Dict[str, int], Dict[str, int]]:
    """:func:`mag_like`'s node counts per type and its papers' ``train`` / ``val`` /
    ``test`` split sizes at ``scale``, without building anything (a caller checks them
    first; at a tiny scale ``val`` or ``test`` is 0)."""
    return _sizes_at(_check_scale(scale))


def _sizes_at(scale: float) -> Tuple[Dict[str, int], Dict[str, int]]:
    """:func:`mag_like_sizes` of a checked ``scale``."""
    nodes = {t: max(1, int(n * scale)) for t, n in MAG_NODES.items()}
    papers = nodes["paper"]
    shares = [n / sum(MAG_SPLIT) for n in MAG_SPLIT]
    num_train = max(1, int(shares[0] * papers))
    num_val = max(1, int(shares[1] * papers))
    return nodes, {"train": num_train, "val": min(num_val, papers - num_train),
                   "test": max(0, papers - num_train - num_val)}


def mag_like_bytes(scale: float = 1.0, num_features: int = 128) -> int:
    """Host bytes :func:`mag_like` holds at its peak at ``scale`` (its edge lists with
    their reverses, the draws of one relation, the paper features twice), for a check
    before building."""
    scale = _check_scale(scale)
    nodes, _ = _sizes_at(scale)
    edges = sum(max(1, int(count * scale)) for *_, count in MAG_RELATIONS)
    return 48 * edges + 8 * nodes["paper"] * num_features + 64 * sum(nodes.values())


def mag_like(scale: float = 1.0, seed: int = 0, num_features: int = 128,
             num_classes: int = 349, homophily: float = 0.8, feature_signal: float = 0.3,
             device: Optional[torch.device] = None) -> HeteroGraph:
    """An ogbn-mag-like graph: papers, authors, institutions and fields of study with
    ogbn-mag's counts times ``scale``; ``writes``, ``cites``, ``affiliated_with`` and
    ``has_topic`` with its edge counts, ``cites`` made symmetric and every other relation
    given its reverse (``rev_writes``, ...), as ``ToUndirected`` leaves ogbn-mag: 7
    relations, about 42M edges at scale 1. ``num_features``-d float features on papers,
    ``num_classes`` paper labels, ogbn-mag's split shares. The same seed (and device) gives
    the same graph; the result is on the CPU. No paper cites itself (unless there is only
    one paper). Multi-edges are
    common, more so in small graphs: heavy nodes (up to 400 times the mean degree) and
    communities of a few members draw the same pair again. The share of a relation's edges
    that repeat an earlier one was 15-35% at scale 0.3, 20-45% at 0.1 and 30-67% at 0.01;
    the samplers take each as an edge of its own."""
    scale = _check_scale(scale)
    nodes, split = _sizes_at(scale)
    seed = generator_seed(seed)
    num_classes = _count_at_least(num_classes, "num_classes", 1)
    num_features = _count_at_least(num_features, "num_features", 1)
    given_homophily, given_signal = homophily, feature_signal
    homophily, feature_signal = as_real(homophily), as_real(feature_signal)
    if homophily is None or not 0 <= homophily <= 1:
        raise ValueError(f"homophily must be a probability in [0, 1], got {given_homophily!r}")
    if feature_signal is None or not math.isfinite(feature_signal):
        raise ValueError(f"feature_signal must be a finite number, got {given_signal!r}")
    device = device_or_cpu(device)
    preflight.check_host_memory(mag_like_bytes(scale, num_features),
                                f"mag_like(scale={scale})", "give a smaller scale")
    gen = torch.Generator(device=device).manual_seed(seed)
    ends = {t: _Endpoints(n, num_classes, gen, device) for t, n in nodes.items()}
    edges: Dict[EdgeType, Tensor] = {}
    for src_type, rel, dst_type, count in MAG_RELATIONS:
        count = max(1, int(count * scale))
        src = ends[src_type].draw(count, gen)
        dst = ends[dst_type].draw(count, gen, ends[src_type].community[src], homophily)
        if src_type == dst_type:
            dst = _without_self_loops(ends[dst_type], src, dst, gen, homophily)
            edges[(src_type, rel, dst_type)] = torch.stack(
                [torch.cat([src, dst]), torch.cat([dst, src])]).cpu()
        else:
            edges[(src_type, rel, dst_type)] = torch.stack([src, dst]).cpu()
            edges[(dst_type, f"rev_{rel}", src_type)] = torch.stack([dst, src]).cpu()
    papers = ends["paper"].community
    centroids = torch.randn(num_classes, num_features, generator=gen, device=device)
    x = torch.randn(nodes["paper"], num_features, generator=gen, device=device)
    x.add_(centroids[papers], alpha=feature_signal)
    perm = torch.randperm(nodes["paper"], generator=gen, device=device).cpu()
    num_train, num_val = split["train"], split["val"]
    return HeteroGraph(edge_index_dict=edges, num_nodes_dict=nodes, x_dict={"paper": x.cpu()},
                       y=papers.cpu(), train_idx=perm[:num_train].sort().values,
                       val_idx=perm[num_train:num_train + num_val].sort().values,
                       test_idx=perm[num_train + num_val:].sort().values,
                       num_classes=num_classes)


def _without_self_loops(ends: "_Endpoints", src: Tensor, dst: Tensor, gen: torch.Generator,
                        homophily: float, rounds: int = 8, anywhere: int = 24) -> Tensor:
    """``dst`` with each self-loop drawn again (ogbn-mag cites no paper of its own): inside
    the source's community for ``rounds`` rounds, then anywhere for up to ``anywhere`` more
    (a node that takes a fifth of the weight draws itself again one time in five), then,
    for any left, uniformly among the other papers. At small scales a community holds a
    few papers, and 11-50% of the citations had been self-loops (a probe)."""
    for round_ in range(rounds + anywhere):
        loops = (src == dst).nonzero().view(-1)
        if loops.numel() == 0 or ends.num_nodes < 2:
            return dst
        dst[loops] = ends.draw(loops.numel(), gen, ends.community[src[loops]],
                               homophily if round_ < rounds else 0.0)
    # A node holding most of the weight (few papers: the cap at 400 times the mean does not
    # bind) drew itself again round after round, and half the citations of a small graph
    # had been one paper's self-loops (a probe): the last ones go to any other paper.
    loops = (src == dst).nonzero().view(-1)
    if loops.numel() and ends.num_nodes >= 2:
        step = torch.randint(1, ends.num_nodes, (loops.numel(),), generator=gen,
                             device=dst.device)
        dst[loops] = (src[loops] + step) % ends.num_nodes
    return dst


def _relations_with_reverses(relations: Sequence[Tuple[str, str, str, int]]):
    out = []
    for src_type, rel, dst_type, count in relations:
        if src_type == dst_type:
            out.append(((src_type, rel, dst_type), 2 * count))  # symmetric
        else:
            out.append(((src_type, rel, dst_type), count))
            out.append(((dst_type, f"rev_{rel}", src_type), count))
    return out


def mag240m_like(scale: float = 1.0, seed: int = 0, device: Optional[torch.device] = None,
                 chunk_nodes: int = 1 << 22) -> HeteroCSRTopo:
    """A MAG240M-sized :class:`~torch_quiver_ops.HeteroCSRTopo` (counts times ``scale``):
    ``writes`` and ``affiliated_with`` with reverses and ``cites`` symmetric, 3.46B edges at
    scale 1, built a slice of ``chunk_nodes`` destination nodes at a time on ``device`` (a
    GPU makes it a minute) into host arrays of exactly the CSR's size (13.8 GB of int32
    indices and 27.7 GB of int64 edge ids at scale 1).

    Each relation's in-degrees are Poisson around Chung-Lu weights (power-law tails), and
    each edge's source is drawn by the source type's weights. A reverse relation is drawn
    the same way with the same edge count, not as the transpose of its forward relation
    (a transpose would need a sort of 1.3B edges): degrees, sizes and the sampler's reads
    are those of a graph this large, the exact edge pairs of the two directions are not
    each other's mirror. Relation ``r``'s edges are numbered in CSR order. The same
    ``seed``, ``chunk_nodes`` and device give the same graph; another ``chunk_nodes`` draws
    another one of the same sizes and degree law (the draws are made slice by slice)."""
    scale = _check_scale(scale)
    chunk_nodes = _count_at_least(chunk_nodes, "chunk_nodes", 1)
    device = device_or_cpu(device)
    gen = torch.Generator(device=device).manual_seed(generator_seed(seed))
    nodes = {t: max(1, int(n * scale)) for t, n in MAG240M_NODES.items()}
    relations = [(et, max(1, int(count * scale)))
                 for et, count in _relations_with_reverses(MAG240M_RELATIONS)]
    types = list(nodes)
    offsets = [0]
    for t in types:
        offsets.append(offsets[-1] + nodes[t])
    weight, cum = {}, {}
    for t in types:
        w = torch.rand(nodes[t], generator=gen, dtype=torch.float64,
                       device=device).clamp_(min=1e-12).pow_(-1.0 / (EXPONENT - 1.0))
        weight[t] = w.clamp_(max=float(w.mean()) * MAX_DEGREE_RATIO)
        cum[t] = torch.cumsum(weight[t], 0)
    degree = []
    for (_, _, dst_type), count in relations:
        rate = weight[dst_type] * (count / float(cum[dst_type][-1]))
        degree.append(torch.poisson(rate, generator=gen).to(torch.int64))
    edge_counts = [int(d.sum()) for d in degree]
    relation_edge_offsets = [0]
    for c in edge_counts:
        relation_edge_offsets.append(relation_edge_offsets[-1] + c)
    num_edges = relation_edge_offsets[-1]
    index_dtype = torch.int32 if offsets[-1] <= 2**31 - 1 else torch.int64
    indptr = torch.zeros(offsets[-1] + 1, dtype=torch.long)
    indices = torch.empty(num_edges, dtype=index_dtype)
    eid = torch.empty(num_edges, dtype=torch.long)
    slice_parts: List[Tensor] = []
    row_begin = 0  # CSR position of the current type's first edge
    for t_index, t in enumerate(types):
        into = [r for r, ((_, _, dst), _) in enumerate(relations) if dst == t]
        n = nodes[t]
        if not into:
            indptr[offsets[t_index] + 1:offsets[t_index + 1] + 1] = row_begin
            continue
        per_relation = torch.stack([degree[r] for r in into], 1)  # [n, R_t]
        row_degree = per_relation.sum(1)
        indptr[offsets[t_index] + 1:offsets[t_index + 1] + 1] = (
            torch.cumsum(row_degree, 0) + row_begin).cpu()
        if len(into) > 1:  # where slices 1 .. R_t - 1 start in each row
            slice_parts.append(torch.cumsum(per_relation, 1)[:, :-1].reshape(-1)
                               .to(torch.int32).cpu())
        base = torch.tensor([relation_edge_offsets[r] for r in into], device=device)
        sources = [(types.index(relations[r][0][0]), relations[r][0][0]) for r in into]
        position = row_begin
        for a in range(0, n, chunk_nodes):
            block = per_relation[a:a + chunk_nodes]  # [C, R_t]
            counts = block.reshape(-1)  # (node, relation) slices in row order
            total = int(counts.sum())
            if total == 0:
                continue
            within = torch.cumsum(block, 0) - block  # relation rank of each slice's start
            slice_base = (base + within).reshape(-1)
            slice_start = torch.cumsum(counts, 0) - counts
            ids = (torch.repeat_interleave(slice_base - slice_start, counts)
                   + torch.arange(total, device=device))
            which = torch.repeat_interleave(
                torch.arange(len(into), device=device).repeat(block.size(0)), counts)
            src = torch.empty(total, dtype=torch.long, device=device)
            for j, (s_index, s_type) in enumerate(sources):
                mask = which == j
                k = int(mask.sum())
                r = torch.rand(k, generator=gen, dtype=torch.float64, device=device)
                r.mul_(cum[s_type][-1])
                at = torch.searchsorted(cum[s_type], r, right=True).clamp_(max=nodes[s_type] - 1)
                src[mask] = at + offsets[s_index]
            indices[position:position + total].copy_(src.to(index_dtype))
            eid[position:position + total].copy_(ids)
            position += total
            base = base + block.sum(0)
        row_begin = position
    topo = HeteroCSRTopo.from_csr(
        nodes, [et for et, _ in relations], indptr, indices, eid, relation_edge_offsets,
        slice_starts=torch.cat(slice_parts) if slice_parts else None)
    return topo


def mag240m_like_features(num_papers: int, num_features: int = 128,
                          dtype: torch.dtype = torch.bfloat16, seed: int = 0,
                          device: Optional[torch.device] = None,
                          chunk_rows: int = 1 << 22) -> Tensor:
    """Random paper features for :func:`mag240m_like` (MAG240M gives papers 768-d float16;
    128-d bf16 keeps the table at 31 GB, within the GPU machine's 128 GiB host beside the
    topology), drawn on ``device`` a slice at a time into one host table. The same
    ``seed``, ``chunk_rows`` and device give the same rows; another ``chunk_rows`` may draw
    other ones."""
    num_papers = _count_at_least(num_papers, "num_papers", 0)
    num_features = _count_at_least(num_features, "num_features", 1)
    chunk_rows = _count_at_least(chunk_rows, "chunk_rows", 1)
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        # (an integer dtype had rounded the features to integers)
        raise TypeError(f"dtype must be a floating torch.dtype such as torch.bfloat16, got "
                        f"{dtype!r}")
    device = device_or_cpu(device)
    gen = torch.Generator(device=device).manual_seed(generator_seed(seed))
    preflight.check_host_memory(num_papers * num_features * dtype.itemsize,
                                f"mag240m_like_features({num_papers}, {num_features})",
                                "give fewer papers or features")
    x = torch.empty(num_papers, num_features, dtype=dtype)
    for a in range(0, num_papers, chunk_rows):
        rows = min(chunk_rows, num_papers - a)
        x[a:a + rows] = torch.randn(rows, num_features, generator=gen,
                                    device=device).to(dtype).cpu()
    return x
