"""Plain-PyTorch references and graph builders for the op tests."""
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor


def random_coo(num_nodes: int, num_edges: int, seed: int, isolated_fraction: float = 0.1):
    """Random directed edges (duplicates allowed); a share of nodes has no out-edges."""
    gen = torch.Generator().manual_seed(seed)
    num_sources = max(1, int(num_nodes * (1 - isolated_fraction)))
    # skewed degrees: square a uniform so low ids get more edges
    row = (torch.rand(num_edges, generator=gen).square() * num_sources).long()
    col = torch.randint(num_nodes, (num_edges,), generator=gen)
    return row, col


def csr_reference(row: Tensor, col: Tensor, num_nodes: int):
    perm = torch.argsort(row, stable=True)
    counts = torch.bincount(row, minlength=num_nodes)
    indptr = torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)])
    return indptr, col[perm], perm


@dataclass
class Graph:
    indptr: Tensor
    indices: Tensor
    eid: Tensor
    row: Tensor
    col: Tensor

    @property
    def num_nodes(self) -> int:
        return self.indptr.numel() - 1

    def degree(self, v: int) -> int:
        return int(self.indptr[v + 1] - self.indptr[v])

    def neighbors(self, v: int) -> Tensor:
        return self.indices[self.indptr[v]:self.indptr[v + 1]].long()


def random_graph(num_nodes=300, num_edges=3000, seed=0, dtype=torch.int64) -> Graph:
    row, col = random_coo(num_nodes, num_edges, seed)
    indptr, indices, eid = csr_reference(row, col, num_nodes)
    return Graph(indptr, indices.to(dtype), eid, row, col)


def place(graph: Graph, mode: str, seeds: Optional[Tensor] = None):
    """The (indptr, indices, eid) a sampler in `mode` hands the op, and the seeds' device."""
    tensors = (graph.indptr, graph.indices, graph.eid)
    if mode == "GPU":
        return tuple(t.cuda() for t in tensors), torch.device("cuda")
    if mode == "UVA":
        return tuple(t.pin_memory() for t in tensors), torch.device("cuda")
    return tensors, torch.device("cpu")


def reindex_reference(seeds: Tensor, hop_neighbors):
    """Python-dict reindexing: seeds first, then new ids in order of first appearance."""
    local = {}
    nodes = seeds.tolist()
    for i, s in enumerate(nodes):
        local.setdefault(s, i)
    rows = []
    for neighbors in hop_neighbors:
        for g in neighbors.tolist():
            if g not in local:
                local[g] = len(nodes)
                nodes.append(g)
            rows.append(local[g])
    return torch.tensor(nodes, dtype=torch.long), torch.tensor(rows, dtype=torch.long)


# ---- feature tables ----

def random_table(rows, width, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, width, generator=gen) * 30).to(dtype)


def split_tiers(hot_first, bounds, mode):
    """Cuts a hot-ordered table at `bounds`: memory tiers first (on the GPU in GPU mode),
    then the host tier (pinned in GPU and UVA modes)."""
    cuts = [0, *bounds, hot_first.size(0)]
    parts = [hot_first[a:b].contiguous() for a, b in zip(cuts[:-1], cuts[1:])]
    if mode == "GPU":
        return [p.cuda() for p in parts[:-1]] + [parts[-1].pin_memory()]
    if mode == "UVA":
        return [p.pin_memory() for p in parts]
    return parts


def picks_per_target(degree: Tensor, fanout: int, replace: bool = False) -> Tensor:
    """How many neighbors each target of a hop gets: all for a fanout of -1, else
    min(degree, fanout) without replacement, fanout (when it has any) with."""
    if fanout < 0:
        return degree
    return torch.where(degree > 0, fanout, 0) if replace else degree.clamp(max=fanout)


def ids_device(mode):
    """Where a mode's ids (and so the op) live."""
    return torch.device("cpu") if mode == "CPU" else torch.device("cuda")


def permutation_positions(num_rows, dtype, seed=3):
    """A random hot order and its positions map (positions[order[p]] = p)."""
    order = torch.randperm(num_rows, generator=torch.Generator().manual_seed(seed))
    positions = torch.empty(num_rows, dtype=dtype)
    positions[order] = torch.arange(num_rows, dtype=dtype)
    return order, positions


def subgraph_sampler(indptr, indices, eid, fanouts, replace=False, cached=(None, None),
                     capture=True, edge_weight=None, edge_time=None, strict_time=False,
                     temporal_strategy="uniform", disjoint=False, edge_weight_cumsum=None):
    """The runtime's sampler object over these arrays (torch.classes.quiver.SubgraphSampler):
    on a GPU, with ``capture``, its batches are captured as CUDA graphs and replayed."""
    return torch.classes.quiver.SubgraphSampler(
        indptr, indices, eid, list(fanouts), replace, cached[0], cached[1], edge_weight,
        edge_time, strict_time, temporal_strategy, disjoint, edge_weight_cumsum, capture)
