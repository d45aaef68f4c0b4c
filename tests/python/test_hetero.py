"""quiver::hetero_neighbor_sample and HeteroSampler: a plain-Python breadth-first reference
for all-neighbor hops (exact), the graph itself for sampled ones (every edge real, counts
per relation, hop structure), chi-square tests per relation slice, and the weighted,
temporal and disjoint rules, on every placement."""
import itertools
import re
from collections import defaultdict

import numpy as np
import pytest
import torch

import torch_quiver_ops as qv
from conftest import requires_cuda
from reference import picks_per_target
from stats import assert_uniform, subset_counts

TYPES = {"paper": 40, "author": 25, "field": 8, "lonely": 3}
EDGE_TYPES = [("author", "writes", "paper"), ("paper", "rev_writes", "author"),
              ("paper", "cites", "paper"), ("paper", "has", "field"),
              ("field", "rev_has", "paper")]


def random_hetero(seed=0, edges=(90, 90, 160, 50, 50), types=TYPES):
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for et, count in zip(EDGE_TYPES, edges):
        src = torch.randint(types[et[0]], (count,), generator=gen)
        dst = (torch.rand(count, generator=gen).square() * types[et[2]]).long()  # skewed
        out[et] = torch.stack([src, dst])
    return out


def sampler(topo, num_neighbors, mode, **kwargs):
    device = "cpu" if mode == "CPU" else "cuda"
    return qv.HeteroSampler(topo, num_neighbors, device=device, mode=mode, **kwargs)


def breadth_first(edge_index_dict, types, seeds, hops):
    """All-neighbor hops in plain Python, numbered as the op numbers them: per hop, each
    frontier node in order, each relation that ends at its type in relation order, its
    edges in input order; a node new to its type is appended to it."""
    node = {t: [] for t in types}
    where = {}
    for t, ids in seeds.items():
        for v in ids:
            where.setdefault((t, v), len(node[t]))
            node[t].append(v)
    incoming = defaultdict(list)  # (type, node) -> [(relation, edge id, source)]
    for r, (et, ei) in enumerate(edge_index_dict.items()):
        for e, (s, d) in enumerate(ei.t().tolist()):
            incoming[(et[2], d)].append((r, e, s))
    edge_types = list(edge_index_dict)
    rows, cols, eids = ({et: [] for et in edge_types} for _ in range(3))
    frontier = [(t, i) for t in types for i in range(len(node[t]))]
    for _ in range(hops):
        added = []
        for t, i in frontier:
            v = node[t][i]
            for r, e, s in sorted(incoming[(t, v)]):
                et = edge_types[r]
                src_type = et[0]
                if (src_type, s) not in where:
                    where[(src_type, s)] = len(node[src_type])
                    node[src_type].append(s)
                    added.append((src_type, where[(src_type, s)]))
                rows[et].append(where[(src_type, s)])
                cols[et].append(i)
                eids[et].append(e)
        frontier = added
    return node, rows, cols, eids


@pytest.mark.parametrize("int32", [False, True])
def test_all_neighbor_hops_match_breadth_first(mode, int32):
    edges = random_hetero(1)
    topo = qv.HeteroCSRTopo(edges, TYPES)
    if not int32:
        topo.indices = topo.indices.long()
    s = sampler(topo, [-1, -1], mode)
    seeds = {"paper": [3, 0, 17], "author": [5]}
    out = s.sample({t: torch.tensor(v) for t, v in seeds.items()})
    node, rows, cols, eids = breadth_first(edges, TYPES, seeds, 2)
    for t in TYPES:
        assert out.node[t].cpu().tolist() == node[t], t
    # Edges are grouped by relation; within one, hop by hop in the reference's order, but
    # the GPU writes a hop's rows in any order: compare as sets per relation.
    for et in EDGE_TYPES:
        got = sorted(zip(out.row[et].cpu().tolist(), out.col[et].cpu().tolist(),
                         out.edge[et].cpu().tolist()))
        assert got == sorted(zip(rows[et], cols[et], eids[et])), et
    assert sum(sum(v) for v in out.num_sampled_edges.values()) == sum(
        len(v) for v in rows.values())


def test_a_hetero_sampler_says_what_it_samples():
    topo = qv.HeteroCSRTopo(random_hetero(), TYPES)
    per_type = {et: [2 + i, 1] for i, et in enumerate(EDGE_TYPES)}
    text = repr(qv.HeteroSampler(topo, per_type, device="cpu", replace=True))
    assert text.startswith("HeteroSampler(fanouts per hop and relation=[[2, 3, 4, 5, 6], "
                           "[1, 1, 1, 1, 1]], mode='CPU', device=cpu, replace, topo="), text
    assert "HeteroCSRTopo(nodes=" in text


def test_one_type_one_relation_is_neighbor_sample(mode):
    gen = torch.Generator().manual_seed(4)
    ei = torch.randint(50, (2, 400), generator=gen)
    topo = qv.HeteroCSRTopo({("n", "to", "n"): ei}, {"n": 50})
    s = sampler(topo, [-1, -1], mode)
    seeds = torch.tensor([4, 9, 4, 31])
    out = s.sample(("n", seeds))
    dev = s.device
    homo = qv.ops.neighbor_sample(s._arrays["indptr"], s._arrays["indices"], seeds.to(dev),
                                  [-1, -1], edge_ids=s._arrays["eid"])
    assert torch.equal(out.node["n"].cpu(), homo[0].cpu())
    et = ("n", "to", "n")
    got = sorted(zip(out.row[et].tolist(), out.col[et].tolist(), out.edge[et].tolist()))
    want = sorted(zip(homo[2].tolist(), homo[3].tolist(), homo[4].tolist()))
    assert got == want


def check_sample(out, edges, topo, fanouts, replace=False, counted=None):
    """Every sampled edge is real and typed right; per node and relation the count is the
    fanout's (over the edges ``counted`` marks, per edge type: default all); each node is
    expanded at the hop after it was added."""
    types = topo.num_nodes_dict
    for t in types:
        assert len(out.node[t]) == sum(out.num_sampled_nodes[t])
    degree = {}
    for et, ei in edges.items():
        targets = ei[1] if counted is None else ei[1, counted[et]]
        degree[et] = torch.bincount(targets, minlength=types[et[2]])
    for r, et in enumerate(topo.edge_types):
        src, _, dst = et
        row, col, eid = (x.cpu() for x in (out.row[et], out.col[et], out.edge[et]))
        assert len(row) == sum(out.num_sampled_edges[et])
        if len(row) == 0:
            continue
        assert int(row.max()) < len(out.node[src]) and int(col.max()) < len(out.node[dst])
        ei = edges[et]
        assert torch.equal(ei[0, eid], out.node[src].cpu()[row])
        assert torch.equal(ei[1, eid], out.node[dst].cpu()[col])
        # Hop structure: the edges of hop h leave nodes added at hop h (seeds: h = 0).
        node_bounds = [0] + list(itertools.accumulate(out.num_sampled_nodes[dst]))
        edge_bounds = [0] + list(itertools.accumulate(out.num_sampled_edges[et]))
        for h, f in enumerate(fanouts[et]):
            cols_h = col[edge_bounds[h]:edge_bounds[h + 1]]
            eids_h = eid[edge_bounds[h]:edge_bounds[h + 1]]
            if len(cols_h):
                assert int(cols_h.min()) >= node_bounds[h]
                assert int(cols_h.max()) < node_bounds[h + 1]
            per_node = torch.bincount(cols_h - node_bounds[h],
                                      minlength=node_bounds[h + 1] - node_bounds[h])
            d = degree[et][out.node[dst].cpu()[node_bounds[h]:node_bounds[h + 1]]]
            assert torch.equal(per_node, picks_per_target(d, f, replace)), (et, h)
            if not replace:
                pairs = set(zip(cols_h.tolist(), eids_h.tolist()))
                assert len(pairs) == len(cols_h), "an edge sampled twice for one node"


@pytest.mark.parametrize("replace", [False, True])
def test_sampled_hops_are_real_and_sized(mode, replace):
    edges = random_hetero(2)
    topo = qv.HeteroCSRTopo(edges, TYPES)
    fanouts = {EDGE_TYPES[0]: [3, 2, 1], EDGE_TYPES[1]: [2, 2, 2], EDGE_TYPES[2]: [4, 0, 2],
               EDGE_TYPES[3]: [1, 1, 1], EDGE_TYPES[4]: [-1, 3, 1]}
    s = sampler(topo, fanouts, mode, replace=replace)
    torch.manual_seed(0)
    for trial in range(5):
        out = s.sample({"paper": torch.randperm(40)[:12], "field": torch.tensor([trial])})
        check_sample(out, edges, topo, fanouts, replace)
        for t in TYPES:  # without disjoint trees a node appears once a type
            assert out.node[t].unique().numel() == out.node[t].numel()


def test_each_relation_slice_is_sampled_uniformly(mode):
    # Paper 0 has 5 'writes' edges and 4 'cites' edges (interleaved in the input); fanout
    # 2 of writes and 1 of cites: each draw stays in its relation, uniformly.
    writes = torch.tensor([[0, 1, 2, 3, 4], [0, 0, 0, 0, 0]])
    cites = torch.tensor([[1, 2, 3, 4], [0, 0, 0, 0]])
    edges = {("author", "writes", "paper"): writes, ("paper", "cites", "paper"): cites}
    topo = qv.HeteroCSRTopo(edges, {"paper": 5, "author": 5})
    fanouts = {("author", "writes", "paper"): [2], ("paper", "cites", "paper"): [1]}
    s = sampler(topo, fanouts, mode)
    trials = 3000
    torch.manual_seed(1)
    out = s.sample(("paper", torch.zeros(trials, dtype=torch.long)))
    et_w, et_c = list(edges)
    picks_w = [[] for _ in range(trials)]
    for c, e in zip(out.col[et_w].tolist(), out.edge[et_w].tolist()):
        picks_w[c].append(e)
    assert all(len(p) == 2 for p in picks_w)
    assert_uniform(subset_counts(torch.tensor(picks_w), 5, 2))
    counts = torch.bincount(out.edge[et_c].cpu(), minlength=4)
    assert counts.sum() == trials
    assert_uniform(counts)


def test_negatives_avoid_true_edges_between_the_two_types(mode):
    """HeteroSampler.sample_negatives: destinations of the edge type's destination type,
    never a true edge of a relation between the two types, uniform over the rest; without
    exclusion, true edges about as often as the relation's density."""
    types = {"paper": 30, "author": 12}
    gen = torch.Generator().manual_seed(4)
    writes = torch.stack([torch.randint(12, (150,), generator=gen),
                          torch.randint(30, (150,), generator=gen)])
    cites = torch.randint(30, (2, 100), generator=gen)
    et = ("author", "writes", "paper")
    edges = {et: writes, ("paper", "cites", "paper"): cites,
             ("paper", "rev_writes", "author"): writes.flip(0)}
    s = sampler(qv.HeteroCSRTopo(edges, types), [2], mode)
    true = set(map(tuple, writes.t().tolist()))
    # A dense graph (a third of the pairs are edges): enough trials that none is left.
    out = s.sample_negatives(et, torch.full((3000,), 3), 1, max_trials=100).cpu()
    allowed = [v for v in range(30) if (3, v) not in true]
    assert len(allowed) < 30 and set(out.tolist()) <= set(allowed)
    assert_uniform(torch.bincount(out, minlength=30)[allowed])
    src = torch.randint(12, (20000,), generator=gen)
    loose = s.sample_negatives(et, src, 1, exclude_edges=False).cpu()
    assert bool(((loose >= 0) & (loose < 30)).all())
    hits = sum((a, b) in true for a, b in zip(src.tolist(), loose.tolist()))
    assert abs(hits / 20000 - len(true) / (12 * 30)) < 0.02
    triplets = s.sample_negatives(et, src[:500], 4, max_trials=100).cpu().view(500, 4)
    for a, row in zip(src[:500].tolist(), triplets.tolist()):
        assert not any((a, b) in true for b in row)
    # paper -> paper: a cites pair; the other relations into paper have other sources.
    cited = set(map(tuple, cites.t().tolist()))
    src = torch.randint(30, (2000,), generator=gen)
    drawn = s.sample_negatives(("paper", "cites", "paper"), src, 1).cpu()
    assert not any((a, b) in cited for a, b in zip(src.tolist(), drawn.tolist()))
    with pytest.raises(IndexError, match="outside the 12 nodes of type 'author'"):
        s.sample_negatives(et, torch.tensor([0, 12]), 1)
    with pytest.raises(ValueError, match="is not one of the graph's"):
        s.sample_negatives(("author", "cites", "paper"), torch.tensor([0]), 1)


@pytest.mark.parametrize("rules", ["plain", "weighted", "temporal", "disjoint"])
def test_replayed_batches_equal_calls_run_as_usual(mode, rules):
    """A sampler's repeated CUDA calls of one shape are captured as a CUDA graph and
    replayed (as neighbor_sample's); each replay reads its own seeds (and seed times) and
    gives what a sampler that does not capture gives (on the CPU, neither captures)."""
    edges = random_hetero(8)
    gen = torch.Generator().manual_seed(7)
    node_time = {t: torch.randint(100, (n,), generator=gen) for t, n in TYPES.items()}
    topo = qv.HeteroCSRTopo(edges, TYPES,
                            node_time_dict=node_time if rules == "temporal" else None)
    kwargs = {"plain": {}, "disjoint": dict(disjoint=True),
              "weighted": dict(weights={et: torch.rand(ei.size(1), generator=gen) + 0.1
                                        for et, ei in edges.items()}),
              "temporal": {}}[rules]
    captured = sampler(topo, [3, 2], mode, **kwargs)
    launched = sampler(topo, [3, 2], mode, capture_batches=False, **kwargs)
    batches = [(torch.randint(0, TYPES["paper"], (12,), generator=gen),
                torch.randint(0, 120, (12,), generator=gen)) for _ in range(5)]

    def calls(s):
        sampling = torch.Generator(s.device).manual_seed(9)
        return [s.sample(("paper", seeds), seed_time if rules == "temporal" else None,
                         generator=sampling) for seeds, seed_time in batches]

    for k, (a, b) in enumerate(zip(calls(launched), calls(captured))):
        for field in ("node", "row", "col", "edge"):
            for key in getattr(a, field):
                assert torch.equal(getattr(a, field)[key], getattr(b, field)[key]), (k, field)
        for key in (a.batch or {}):
            assert torch.equal(a.batch[key], b.batch[key]), (k, "batch")
        assert a.num_sampled_nodes == b.num_sampled_nodes
        assert a.num_sampled_edges == b.num_sampled_edges


@pytest.mark.parametrize("strategy", ["uniform", "last"])
def test_temporal_trees_take_only_the_past(mode, strategy):
    edges = random_hetero(3)
    gen = torch.Generator().manual_seed(5)
    node_time = {t: torch.randint(100, (n,), generator=gen) for t, n in TYPES.items()}
    topo = qv.HeteroCSRTopo(edges, TYPES, node_time_dict=node_time)
    fanouts = [3, 2]
    s = sampler(topo, fanouts, mode, temporal_strategy=strategy)
    assert s.disjoint
    seeds = torch.arange(0, 40, 3)
    seed_time = node_time["paper"][seeds] + 10
    out = s.sample(("paper", seeds), seed_time=seed_time)
    for et in EDGE_TYPES:
        src, _, dst = et
        row, col = out.row[et].cpu(), out.col[et].cpu()
        tree = out.batch[dst].cpu()[col]
        assert torch.equal(tree, out.batch[src].cpu()[row]), "an edge crosses trees"
        times = node_time[src][out.node[src].cpu()[row]]
        assert bool((times <= seed_time[tree]).all()), et
        if strategy == "last" and len(row):
            # The newest admitted edges: no admitted edge of the same row and relation is
            # newer than the oldest one taken.
            ei = edges[et]
            for c in col.unique()[:10].tolist():
                d = int(out.node[dst].cpu()[c])
                t_seed = int(seed_time[int(out.batch[dst].cpu()[c])])
                admitted = sorted(int(node_time[src][s_]) for s_ in ei[0, ei[1] == d].tolist()
                                  if int(node_time[src][s_]) <= t_seed)
                taken = sorted(int(t) for t in times[col == c].tolist())
                # Hop 0 rows take 3, hop 1 rows 2: the taken are a newest suffix.
                assert taken == admitted[len(admitted) - len(taken):]
        # Per hop, node and relation: min(fanout, edges its tree's seed time admits). The
        # time bound alone held for a sampler that kept one edge a node, or that admitted
        # every tree's edges by the batch's earliest seed time.
        node_bounds = [0] + list(itertools.accumulate(out.num_sampled_nodes[dst]))
        edge_bounds = [0] + list(itertools.accumulate(out.num_sampled_edges[et]))
        edge_time = node_time[src][edges[et][0]]
        for h, fanout in enumerate(fanouts):
            lo, hi = node_bounds[h], node_bounds[h + 1]
            cols_h = col[edge_bounds[h]:edge_bounds[h + 1]] - lo
            targets = out.node[dst].cpu()[lo:hi, None]
            limit = seed_time[out.batch[dst].cpu()[lo:hi]][:, None]
            admitted = ((edges[et][1] == targets) & (edge_time <= limit)).sum(1)
            assert bool(((cols_h >= 0) & (cols_h < hi - lo)).all()), (et, h)
            assert torch.equal(torch.bincount(cols_h, minlength=hi - lo),
                               admitted.clamp(max=fanout)), (et, h)


def test_temporal_uniform_takes_admitted_edges_uniformly(mode):
    """Paper 0 cited by papers 1-6 at times 1, 2, 3, 5, 8, 13, each tree's seed at time 5:
    every tree takes 2 of the 4 admitted citations, each pair equally likely (a sampler
    that took the newest ones passed the time bound above)."""
    cites = torch.tensor([[1, 2, 3, 4, 5, 6], [0, 0, 0, 0, 0, 0]])
    node_time = {"paper": torch.tensor([0, 1, 2, 3, 5, 8, 13])}
    et = ("paper", "cites", "paper")
    topo = qv.HeteroCSRTopo({et: cites}, {"paper": 7}, node_time_dict=node_time)
    s = sampler(topo, [2], mode, temporal_strategy="uniform")
    trials = 3000
    torch.manual_seed(3)
    out = s.sample(("paper", torch.zeros(trials, dtype=torch.long)),
                   seed_time=torch.full((trials,), 5))
    picks = [[] for _ in range(trials)]
    for c, e in zip(out.col[et].tolist(), out.edge[et].tolist()):
        picks[c].append(e)
    assert all(len(p) == 2 and max(p) < 4 for p in picks)  # edges 0-3 are the admitted
    assert_uniform(subset_counts(torch.tensor(picks), 4, 2))


@pytest.mark.parametrize("strict", [False, True])
def test_strict_time_refuses_edges_at_the_seed_time(mode, strict):
    """Paper 0 cited by papers 1-4 at times 5, 5, 4, 9, the seed at time 5: strict_time
    keeps only the strictly older citation."""
    cites = torch.tensor([[1, 2, 3, 4], [0, 0, 0, 0]])
    node_time = {"paper": torch.tensor([0, 5, 5, 4, 9])}
    topo = qv.HeteroCSRTopo({("paper", "cites", "paper"): cites}, {"paper": 5},
                            node_time_dict=node_time)
    s = sampler(topo, [-1], mode, strict_time=strict)
    out = s.sample(("paper", torch.tensor([0])), seed_time=torch.tensor([5]))
    assert sorted(out.node["paper"].cpu().tolist()) == ([0, 3] if strict else [0, 1, 2, 3])


@pytest.mark.parametrize("view", ["expanded", "strided"])
def test_seed_time_may_be_a_view(mode, view):
    indptr, indices = torch.tensor([0, 4, 4, 4, 4, 4]), torch.tensor([1, 2, 3, 4])
    edge_time = torch.tensor([0, 10, 20, 30])
    dev = "cpu" if mode == "CPU" else "cuda"
    where = (lambda t: t) if mode == "CPU" else (lambda t: t.cuda() if mode == "GPU" else t.pin_memory())
    seed_time = (torch.tensor(5, device=dev).expand(4) if view == "expanded"
                 else torch.tensor([5, 99] * 4, device=dev)[::2])
    out = qv.ops.hetero_neighbor_sample(
        where(indptr), where(indices), where(torch.arange(4)),
        torch.zeros(4, dtype=torch.long, device=dev), [0, 5], [0], [0], [0, 4], [-1],
        edge_time=where(edge_time), seed_time=seed_time, disjoint=True)
    assert edge_time[out[4].cpu()].tolist() == [0] * 4


def test_seed_times_follow_the_callers_order(mode):
    """Seeds given b first: seed_time and the trees' numbers follow that order, not the
    graph's node type order."""
    edges = {("a", "r", "b"): torch.tensor([[0, 1], [0, 0]]),
             ("b", "s", "a"): torch.tensor([[0, 0], [0, 1]])}
    times = {et: torch.tensor([100, 100]) for et in edges}
    topo = qv.HeteroCSRTopo(edges, {"a": 2, "b": 1}, edge_time_dict=times)
    s = sampler(topo, [-1], mode)
    out = s.sample({"b": torch.tensor([0]), "a": [0]}, torch.tensor([200, 0]))
    assert out.num_sampled_edges[("a", "r", "b")] == [2]  # b at 200 takes both edges
    assert out.num_sampled_edges[("b", "s", "a")] == [0]  # a at 0 takes none
    assert out.batch["b"].tolist() == [0] and out.batch["a"].tolist() == [1, 0, 0]
    strided = s.sample({"a": torch.tensor([0, 9, 1])[::2]}, torch.tensor([200, 200]))
    assert strided.node["a"][:2].tolist() == [0, 1]
    assert s.sample(("a", []), torch.tensor([], dtype=torch.long)).node["a"].numel() == 0
    with pytest.raises(ValueError, match=r"edge_time_dict names edge types \[\('q', 'q', 'q'\)\]"):
        qv.HeteroCSRTopo(edges, {"a": 2, "b": 1}, edge_time_dict={**times, ("q", "q", "q"): [1]})


def test_disjoint_trees_never_share_nodes(mode):
    edges = random_hetero(6)
    topo = qv.HeteroCSRTopo(edges, TYPES)
    s = sampler(topo, [2, 2], mode, disjoint=True)
    torch.manual_seed(6)
    out = s.sample({"paper": torch.tensor([1, 1, 7]), "author": torch.tensor([3])})
    # Every edge real; per tree, node and relation min(fanout, degree) edges, each once.
    check_sample(out, edges, topo, {et: [2, 2] for et in EDGE_TYPES})
    # The two trees of paper 1 draw apart: not one tree copied.
    trees = [sorted((et, e) for et in EDGE_TYPES
                    for e in out.edge[et].cpu()[out.batch[et[2]].cpu()[out.col[et].cpu()] == tree]
                    .tolist()) for tree in (0, 1)]
    assert trees[0] != trees[1]
    for t in TYPES:
        pairs = list(zip(out.batch[t].tolist(), out.node[t].tolist()))
        assert len(set(pairs)) == len(pairs)
    assert out.batch["paper"][:3].tolist() == [0, 1, 2]
    assert out.batch["author"][:1].tolist() == [3]
    for et in EDGE_TYPES:
        src, _, dst = et
        assert torch.equal(out.batch[src][out.row[et]], out.batch[dst][out.col[et]])


def test_weighted_relation_draws_by_weight(mode):
    sources = torch.arange(6)
    writes = torch.stack([sources, torch.zeros(6, dtype=torch.long)])
    cites = torch.tensor([[1, 2], [0, 0]])
    edges = {("author", "writes", "paper"): writes, ("paper", "cites", "paper"): cites}
    topo = qv.HeteroCSRTopo(edges, {"paper": 3, "author": 6})
    w = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    weights = {("author", "writes", "paper"): w, ("paper", "cites", "paper"): torch.ones(2)}
    fanouts = {("author", "writes", "paper"): [1], ("paper", "cites", "paper"): [1]}
    s = sampler(topo, fanouts, mode, weights=weights)
    trials = 4200
    torch.manual_seed(2)
    out = s.sample(("paper", torch.zeros(trials, dtype=torch.long)))
    counts = torch.bincount(out.edge[("author", "writes", "paper")].cpu(), minlength=6)
    from scipy.stats import chisquare
    p = chisquare(counts.double().numpy(), (w / w.sum() * trials).numpy()).pvalue
    assert p > 1e-4, counts.tolist()
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="finite and >= 0"):
            sampler(topo, fanouts, mode, weights={**weights, ("paper", "cites", "paper"):
                                                  torch.tensor([1.0, bad])})
    with pytest.raises(ValueError, match=re.escape(  # (a 2-D NaN had failed in torch's words)
            "weights[('paper', 'cites', 'paper')] must hold one weight per edge (1-D)")):
        sampler(topo, fanouts, mode, weights={**weights, ("paper", "cites", "paper"):
                                              torch.tensor([[1.0, float("nan")]])})
    # As float32 1e300 read inf and 1e-50 read 0, which masked the edge without a word;
    # 2e-45 read the subnormal 1.4e-45, as 1e-45 does (their odds changed; a probe).
    for bad, words in ((1e300, "past float32's range"), (1e-50, "below float32's normal range"),
                       (2e-45, "below float32's normal range")):
        with pytest.raises(ValueError, match=re.escape(
                f"weights[('paper', 'cites', 'paper')][1] = {bad} is {words}")):
            sampler(topo, fanouts, mode, weights={
                **weights, ("paper", "cites", "paper"): torch.tensor([1.0, bad], dtype=torch.float64)})


@pytest.mark.parametrize("replace", [False, True])
def test_zero_weight_edges_are_never_sampled(mode, replace):
    """PyG's weight_attr may hold zeros (masked edges): they are never drawn, a node whose
    edges of a relation all weigh 0 gets none of them, and the edge ids returned are the
    caller's (local to the type), not the sampler's renumbered ones."""
    edges = random_hetero(seed=5)
    topo = qv.HeteroCSRTopo(edges, TYPES)
    gen = torch.Generator().manual_seed(5)
    weights = {et: torch.rand(ei.size(1), generator=gen) for et, ei in edges.items()}
    for et, w in weights.items():
        w[torch.rand(w.numel(), generator=gen) < 0.4] = 0.0
    cites = ("paper", "cites", "paper")
    weights[cites][edges[cites][1] == 0] = 0.0  # paper 0: every citation masked
    fanouts = [4, 3]
    s = sampler(topo, fanouts, mode, weights=weights, replace=replace)
    seen = 0
    for seed in range(3):
        torch.manual_seed(seed)
        out = s.sample(("paper", torch.arange(TYPES["paper"])))
        for et, ids in out.edge.items():
            ids = ids.cpu()
            assert bool((weights[et][ids] > 0).all()), et
            src, _, dst = et
            # The ids name the caller's edges: their ends are the sampled pair.
            assert torch.equal(edges[et][0][ids], out.node[src].cpu()[out.row[et].cpu()])
            assert torch.equal(edges[et][1][ids], out.node[dst].cpu()[out.col[et].cpu()])
            seen += ids.numel()
        first_hop = out.num_sampled_edges[cites][0]
        seed_col = out.col[cites][:first_hop].cpu()
        assert not bool((out.node["paper"].cpu()[seed_col] == 0).any())
        # Only the zero-weight edges leave: each hop's new targets get the fanout's count
        # of their edges of positive weight (a sampler masking more had passed the above).
        check_sample(out, edges, topo, {et: fanouts for et in edges}, replace,
                     counted={et: w > 0 for et, w in weights.items()})
    assert seen > 0


def test_weighted_relation_of_fanout_two_is_successive_sampling(mode):
    """Paper i (i < T) is cited by paper T + i alone, which is written by authors 0-5 of
    weights 6, 1, 2, 0.5, 3 and 0: the second hop takes 2 of each one's 5 weighted
    authors, subsets following successive sampling exactly (fanout 1 and zero weights
    were all the weighted tests drew: weights that only masked edges passed them)."""
    from test_neighbor_sample import assert_fits, successive_subset_probabilities
    trials = 3000
    w = torch.tensor([6.0, 1.0, 2.0, 0.5, 3.0, 0.0])
    cites = torch.stack([torch.arange(trials, 2 * trials), torch.arange(trials)])
    writes = torch.stack([torch.arange(6).repeat(trials),
                          torch.arange(trials, 2 * trials).repeat_interleave(6)])
    edges = {("author", "writes", "paper"): writes, ("paper", "cites", "paper"): cites}
    topo = qv.HeteroCSRTopo(edges, {"paper": 2 * trials, "author": 6})
    weights = {("author", "writes", "paper"): w.repeat(trials),
               ("paper", "cites", "paper"): torch.ones(trials)}
    s = sampler(topo, [1, 2], mode, weights=weights)
    torch.manual_seed(4)
    out = s.sample(("paper", torch.arange(trials)))
    et = ("author", "writes", "paper")
    assert out.num_sampled_edges[et] == [0, 2 * trials]
    authors = writes[0][out.edge[et].cpu()]  # the caller's edge ids: author i is edge 6t + i
    targets = out.col[et].cpu()
    observed = {}
    for pair in authors[targets.argsort(stable=True)].view(trials, 2).tolist():
        observed[tuple(sorted(pair))] = observed.get(tuple(sorted(pair)), 0) + 1
    assert_fits(observed, successive_subset_probabilities(w[:5], 2), trials)


def test_negatives_exclude_zero_weight_edges_too(mode):
    """Masked edges leave the sampler's graph but are true edges: never a negative."""
    edges = {("author", "writes", "paper"): torch.tensor([[0, 0, 1], [0, 1, 2]])}
    types = {"author": 2, "paper": 3}
    topo = qv.HeteroCSRTopo(edges, types)
    weights = {("author", "writes", "paper"): torch.tensor([0.0, 1.0, 1.0])}
    s = sampler(topo, [2], mode, weights=weights)
    drawn = s.sample_negatives(("author", "writes", "paper"),
                               torch.zeros(2000, dtype=torch.long), 1, max_trials=1000).cpu()
    assert bool((drawn == 2).all())


@pytest.mark.parametrize("damage", ["edge id out of range", "edge id of another relation",
                                    "neighbor of another type"])
def test_a_layout_whose_tables_disagree_is_refused(mode, damage):
    """hetero_neighbor_sample trusted each row's edge ids and neighbor types: a CSR built by
    hand (HeteroCSRTopo.from_csr) whose ids or types disagree with the relations filed
    edges under the wrong relation, or reported them between the wrong types."""
    edges = {("a", "r0", "b"): torch.tensor([[0, 1], [0, 0]]),
             ("b", "r1", "a"): torch.tensor([[0], [1]])}
    topo = qv.HeteroCSRTopo(edges, {"a": 2, "b": 1})
    indices, eid = topo.indices.clone(), topo.eid.clone()
    at = int(topo.indptr[2])  # node b0's row: its two r0 edges
    if damage == "edge id out of range":
        eid[at] = 50
        error, words = IndexError, "edge_ids holds 50"
    elif damage == "edge id of another relation":
        eid[at] = 2  # r1's edge, whose ends are b -> a
        error, words = ValueError, "indices, edge_ids and the type tables disagree"
    else:
        indices[at] = 2  # b0 as a neighbor through r0, whose sources are a's
        error, words = ValueError, "indices, edge_ids and the type tables disagree"
    dev = "cpu" if mode == "CPU" else "cuda"
    indptr = topo.indptr.to(dev)
    if mode == "GPU":
        indices, eid = indices.to(dev), eid.to(dev)
    elif mode == "UVA":
        indices, eid = indices.pin_memory(), eid.pin_memory()
    with pytest.raises(error, match=words):
        torch.ops.quiver.hetero_neighbor_sample(
            indptr, indices, eid, torch.tensor([2], device=dev), topo.node_type_offsets,
            topo.relation_src_types, topo.relation_dst_types, topo.relation_edge_offsets,
            [-1, -1])


def test_per_edge_and_per_node_values_are_one_dimensional():
    edges = {("a", "r0", "b"): torch.tensor([[0, 1], [0, 0]])}
    with pytest.raises(ValueError, match="edge_time_dict.* must hold one value per edge"):
        qv.HeteroCSRTopo(edges, {"a": 2, "b": 1},
                         edge_time_dict={("a", "r0", "b"): torch.tensor([[1, 2], [3, 4]])})
    with pytest.raises(ValueError, match="node_time_dict.* must hold one value per node"):
        qv.HeteroCSRTopo(edges, {"a": 2, "b": 1},
                         node_time_dict={"a": torch.zeros(2, 1, dtype=torch.long),
                                         "b": torch.zeros(1, 1, dtype=torch.long)})


@requires_cuda
@pytest.mark.parametrize("uva", [False, True])
def test_cpu_seeds_for_a_graph_on_the_gpu_are_refused(uva):
    """The sampler object takes CPU seeds to the CPU's sampler, which must not read a graph
    held on the GPU through host pointers."""
    indptr = torch.tensor([0, 2, 3, 3], device="cuda")
    indices = torch.tensor([1, 2, 0])
    indices = indices.pin_memory() if uva else indices.cuda()
    eid = torch.arange(3, device="cuda")
    s = torch.classes.quiver.HeteroSubgraphSampler(indptr, indices, eid, [0, 3], [0], [0],
                                                   [0, 3], [2], False, None, None, False,
                                                   "uniform", False, None, None, False)
    with pytest.raises(ValueError, match="indptr is on cuda:0: pass the seeds on that device"):
        s.sample(torch.tensor([0, 1]), None, None)
    assert s.sample(torch.tensor([0, 1], device="cuda"), None, None)[0].numel() >= 2


def test_node_counts_are_whole_and_not_negative():
    """A probe: from_csr took {'a': -3} (sampling then mixed the types) and 10.5 as 10."""
    csr = ([("b", "r", "b")], torch.tensor([0, 1, 2, 3]), torch.tensor([1, 2, 0]),
           torch.tensor([0, 1, 2]), [0, 3])
    edges = {("b", "r", "b"): torch.tensor([[0, 1], [1, 2]])}
    for counts, error, words in [({"a": -3, "b": 3}, ValueError, r"\['a'\] = -3 is negative"),
                                 ({"a": 10.5, "b": 3}, TypeError, r"\['a'\] must be an int"),
                                 ({"a": True, "b": 3}, TypeError, r"\['a'\] must be an int")]:
        with pytest.raises(error, match=words):
            qv.HeteroCSRTopo.from_csr(counts, *csr)
        with pytest.raises(error, match=words):
            qv.HeteroCSRTopo(edges, counts)
    topo = qv.HeteroCSRTopo.from_csr({"a": torch.tensor(0), "b": np.int64(3)}, *csr)
    assert topo.num_nodes_dict == {"a": 0, "b": 3}


def test_bad_input_is_named(mode):
    edges = random_hetero(7)
    topo = qv.HeteroCSRTopo(edges, TYPES)
    s = sampler(topo, [2], mode)
    with pytest.raises(IndexError, match="'author'"):
        s.sample(("author", torch.tensor([25])))
    for bad in (("author",), ("author", torch.tensor([0]), "extra")):  # IndexError; ignored
        with pytest.raises(TypeError, match="seeds must be a dict .* or a pair"):
            s.sample(bad)
    with pytest.raises(KeyError, match="venue"):
        s.sample({"venue": torch.tensor([0])})
    for ids in (torch.tensor([0.5]), torch.tensor([0j])):
        with pytest.raises(TypeError, match="1-D integer tensor"):
            s.sample(("paper", ids))
    with pytest.raises(TypeError, match="num_neighbors must be a sequence of ints.*'22'"):
        sampler(topo, "22", mode)  # not two hops of 2
    with pytest.raises(TypeError, match=r"num_neighbors\[.*\] must be a sequence of ints.*2.5"):
        sampler(topo, {et: [2.5] for et in EDGE_TYPES}, mode)
    with pytest.raises(ValueError, match=r"num_neighbors names edge types "
                                         r"\[\('paper', 'likes', 'paper'\)\] that the graph lacks"):
        # (every real type given too: the "lacks edge types" refusal matched alone)
        sampler(topo, {**{et: [2] for et in EDGE_TYPES}, ("paper", "likes", "paper"): [2]}, mode)
    with pytest.raises(ValueError, match="lacks edge types"):
        sampler(topo, {EDGE_TYPES[0]: [2]}, mode)
    with pytest.raises(ValueError, match="as many hops"):
        sampler(topo, {**{et: [2] for et in EDGE_TYPES}, EDGE_TYPES[1]: [2, 2]}, mode)
    # (by edge type and hop: a flattened position, fanouts[1], named neither)
    with pytest.raises(ValueError, match=rf"num_neighbors\[{re.escape(repr(EDGE_TYPES[1]))}\]"
                                         r"\[0\] must be -1 \(all neighbors\) or >= 0, got -3"):
        sampler(topo, [2, -3], mode) if len(EDGE_TYPES) == 1 else sampler(
            topo, {**{et: [2] for et in EDGE_TYPES}, EDGE_TYPES[1]: [-3]}, mode)
    with pytest.raises(IndexError, match="outside 'paper'"):  # CSRTopo's type for the fault
        qv.HeteroCSRTopo({EDGE_TYPES[0]: torch.tensor([[0], [40]])}, TYPES)
    with pytest.raises(ValueError, match="lacks"):
        qv.HeteroCSRTopo({("a", "r", "b"): torch.tensor([[0], [0]])}, {"a": 1})
    # The op names its own arguments.
    a = s._arrays
    seeds = torch.tensor([0], device=s.device)
    args = (a["indptr"], a["indices"], a["eid"], seeds)
    R = len(EDGE_TYPES)
    good = dict(node_type_offsets=topo.node_type_offsets,
                relation_src_types=topo.relation_src_types,
                relation_dst_types=topo.relation_dst_types,
                relation_edge_offsets=topo.relation_edge_offsets, fanouts=[1] * R)
    for change, match in [(dict(node_type_offsets=[0, 10]), "node_type_offsets"),
                          (dict(relation_edge_offsets=topo.relation_edge_offsets[:-1]),
                           "relation_edge_offsets"),
                          (dict(fanouts=[1] * (R + 1)), "fanouts"),
                          (dict(fanouts=[-2] * R), "fanouts"),
                          (dict(relation_dst_types=[0] * (R - 1) + [9]), "relation 4")]:
        with pytest.raises(ValueError, match=match):
            qv.ops.hetero_neighbor_sample(*args, **{**good, **change})


def test_opcheck(mode):
    if mode == "UVA":
        pytest.skip("opcheck copies inputs into pageable memory; the GPU-mode run checks "
                    "the same kernel and fake")
    edges = random_hetero(8)
    gen = torch.Generator().manual_seed(1)
    node_time = {t: torch.randint(100, (n,), generator=gen) for t, n in TYPES.items()}
    topo = qv.HeteroCSRTopo(edges, TYPES, node_time_dict=node_time)
    dev = torch.device("cpu") if mode == "CPU" else torch.device("cuda")
    indptr, indices, eid, times = (t.to(dev) for t in (topo.indptr, topo.indices, topo.eid,
                                                       topo.edge_time))
    tables = (topo.node_type_offsets, topo.relation_src_types, topo.relation_dst_types,
              topo.relation_edge_offsets)
    R = len(EDGE_TYPES)
    seeds = torch.tensor([0, 41, 39, 70], device=dev)
    seed_time = torch.tensor([50, 10, 99, 70], device=dev)
    cases = [
        (indptr, indices, eid, seeds, *tables, [2] * R + [1] * R),
        (indptr, indices, eid, seeds, *tables, [2] * R, True),
        (indptr, indices, eid, seeds, *tables, [3] * R, False, None, times, seed_time, False,
         "last", True),
        (indptr, indices, eid, seeds[:0], *tables, [3] * R),
    ]
    for args in cases:
        torch.library.opcheck(torch.ops.quiver.hetero_neighbor_sample.default, args)


def test_scriptable(mode):
    scripted = torch.jit.script(qv.ops.hetero_neighbor_sample)
    topo = qv.HeteroCSRTopo(random_hetero(9), TYPES)
    s = sampler(topo, [2, 2], mode)
    a = s._arrays
    seeds = torch.tensor([0, 5], device=s.device)
    torch.manual_seed(3)
    first = scripted(a["indptr"], a["indices"], a["eid"], seeds, topo.node_type_offsets,
                     topo.relation_src_types, topo.relation_dst_types,
                     topo.relation_edge_offsets, s.fanouts)
    torch.manual_seed(3)
    again = qv.ops.hetero_neighbor_sample(a["indptr"], a["indices"], a["eid"], seeds,
                                          topo.node_type_offsets, topo.relation_src_types,
                                          topo.relation_dst_types, topo.relation_edge_offsets,
                                          s.fanouts)
    for x, y in zip(first, again):
        assert torch.equal(x.cpu(), y.cpu())


def test_exports_and_runs_the_exported_program():
    topo = qv.HeteroCSRTopo(random_hetero(10), TYPES)

    class Sample(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("indptr", topo.indptr)
            self.register_buffer("indices", topo.indices)
            self.register_buffer("eid", topo.eid)

        def forward(self, seeds):
            out = qv.ops.hetero_neighbor_sample(
                self.indptr, self.indices, self.eid, seeds, topo.node_type_offsets,
                topo.relation_src_types, topo.relation_dst_types, topo.relation_edge_offsets,
                [-1] * len(EDGE_TYPES))
            return out[0], out[2], out[3]

    seeds = torch.tensor([0, 5])
    program = torch.export.export(Sample(), (seeds,), strict=False)
    got = program.module()(seeds)
    want = Sample()(seeds)
    for x, y in zip(got, want):  # all neighbors: the same output both ways
        assert torch.equal(x, y)


def test_slice_starts_give_the_searches_results(mode):
    edges = random_hetero(11)
    topo = qv.HeteroCSRTopo(edges, TYPES)
    s = sampler(topo, [3, 2], mode)
    a = s._arrays
    assert a["slice_starts"].dtype == torch.int32
    # paper has 3 incoming relations (writes, cites, rev_has): 2 starts a paper.
    assert a["slice_starts"].numel() == 2 * TYPES["paper"]  # the other types have one
    seeds = torch.tensor([0, 3, 41, 70], device=s.device)
    args = (a["indptr"], a["indices"], a["eid"], seeds, topo.node_type_offsets,
            topo.relation_src_types, topo.relation_dst_types, topo.relation_edge_offsets,
            s.fanouts)

    def with_starts(starts):
        # The starts are an option of the sampler object, not an argument of the op.
        return torch.classes.quiver.HeteroSubgraphSampler(
            *args[:3], *args[4:], False, None, None, False, "uniform", False, None, starts,
            False).sample(seeds, None, None)

    torch.manual_seed(5)
    searched = qv.ops.hetero_neighbor_sample(*args)
    torch.manual_seed(5)
    read = with_starts(a["slice_starts"])
    for x, y in zip(searched, read):
        assert torch.equal(x.cpu(), y.cpu())
    # Garbage starts cannot reach outside a row; a wrong size or dtype is named.
    garbage = torch.randint(-50, 50, a["slice_starts"].shape, dtype=torch.int32,
                            device=a["slice_starts"].device)
    out = with_starts(garbage)
    assert out[2].numel() == out[-1].sum()
    nodes, cols, eids = out[0].cpu(), out[3].cpu(), out[4].cpu()  # each edge in its row
    type_start = [0, *itertools.accumulate(out[5].sum(1).tolist())]
    edge_start = [0, *itertools.accumulate(out[6].sum(1).tolist())]
    for relation, dst in enumerate(topo.relation_dst_types):
        low, high = edge_start[relation], edge_start[relation + 1]
        targets = topo.node_type_offsets[dst] + nodes[type_start[dst] + cols[low:high]]
        for target, edge in zip(targets.tolist(),
                                (eids[low:high] + topo.relation_edge_offsets[relation]).tolist()):
            assert edge in topo.eid[topo.indptr[target]:topo.indptr[target + 1]].tolist()
    with pytest.raises(ValueError, match="relation_slice_starts"):
        with_starts(garbage[1:])
    with pytest.raises(TypeError, match="relation_slice_starts"):
        with_starts(garbage.long())


def test_hundreds_of_relations_in_one_pass(mode):
    # 120 node types, 400 relations (a knowledge graph's shape): the op's tables and counts
    # hold them all; all-neighbor hops still match the breadth-first reference exactly.
    gen = torch.Generator().manual_seed(12)
    types = {f"t{i}": int(torch.randint(1, 6, (1,), generator=gen)) for i in range(120)}
    names = list(types)
    edges = {}
    for r in range(400):
        src, dst = (names[int(i)] for i in torch.randint(120, (2,), generator=gen))
        count = int(torch.randint(0, 6, (1,), generator=gen))
        edges[(src, f"r{r}", dst)] = torch.stack([
            torch.randint(types[src], (count,), generator=gen),
            torch.randint(types[dst], (count,), generator=gen)])
    topo = qv.HeteroCSRTopo(edges, types)
    s = sampler(topo, [-1, -1], mode)
    seeds = {"t0": list(range(types["t0"])), "t7": [0]}
    out = s.sample({t: torch.tensor(v) for t, v in seeds.items()})
    node, rows, cols, eids = breadth_first(edges, types, seeds, 2)
    for t in types:
        assert out.node[t].cpu().tolist() == node[t], t
    for et in edges:
        got = sorted(zip(out.row[et].cpu().tolist(), out.col[et].cpu().tolist(),
                         out.edge[et].cpu().tolist()))
        assert got == sorted(zip(rows[et], cols[et], eids[et])), et


def test_a_pickled_sampler_samples_as_the_original(mode):
    """DataLoader workers and spawned processes get the sampler pickled: its runtime object
    is made again on the other side, and one seed gives the same batch."""
    import pickle
    if mode != "CPU":
        pytest.skip("GPU tensors pickle as CUDA IPC handles: the CPU case covers the state")
    topo = qv.HeteroCSRTopo(random_hetero(4), TYPES)
    s = sampler(topo, [3, 2], mode)
    copy = pickle.loads(pickle.dumps(s))
    seeds = ("paper", torch.arange(0, 12, 2))
    a = s.sample(seeds, generator=torch.Generator().manual_seed(3))
    b = copy.sample(seeds, generator=torch.Generator().manual_seed(3))
    for field in ("node", "row", "col", "edge"):
        for key in getattr(a, field):
            assert torch.equal(getattr(a, field)[key], getattr(b, field)[key]), (field, key)


def test_the_fake_kernel_refuses_no_node_types_as_the_kernel_does():
    """Under torch.compile or export an empty node_type_offsets was "negative dimension -1"
    (a probe): the fake kernel now makes the kernel's own check."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    args = (torch.tensor([0, 1, 2, 2, 2, 2]), torch.tensor([1, 0]), torch.tensor([0, 1]),
            torch.tensor([0]))
    words = r"node_type_offsets must hold num_types \+ 1 >= 2 entries, got \[\]"
    with pytest.raises(ValueError, match=words):
        torch.ops.quiver.hetero_neighbor_sample(*args, [], [0], [0], [0, 2], [-1])
    with FakeTensorMode(allow_non_fake_inputs=False) as fake_mode:
        fake = [fake_mode.from_tensor(t) for t in args]
        with pytest.raises(ValueError, match=words):
            torch.ops.quiver.hetero_neighbor_sample(*fake, [], [0], [0], [0, 2], [-1])


def test_edges_and_counts_that_hetero_topologies_misread_are_named():
    """From a probe, each as CSRTopo names it: a uint64 id past int64's range was named as
    a negative node, [[], []] as floats, a count past memory as torch's storage overflow,
    and relation_edge_offsets of 1.7 was cut to 1."""
    from torch_quiver_ops import preflight
    relation = ("a", "r", "b")
    with pytest.raises(IndexError, match=r"\[0, 0\] = 9223372036854775809 is past int64.s range"):
        qv.HeteroCSRTopo({relation: torch.tensor([[2**63 + 1], [0]], dtype=torch.uint64)},
                         {"a": 2, "b": 2})
    assert qv.HeteroCSRTopo({relation: [[], []]}, {"a": 1, "b": 1}).indices.numel() == 0
    with pytest.raises(preflight.ResourceLimitError, match="HeteroCSRTopo's offsets"):
        qv.HeteroCSRTopo({relation: torch.tensor([[0], [0]])}, {"a": 1, "b": 2**62})
    topo = qv.HeteroCSRTopo({relation: torch.tensor([[0, 1], [0, 1]])}, {"a": 2, "b": 2})
    with pytest.raises(TypeError, match="relation_edge_offsets must hold ints"):
        qv.HeteroCSRTopo.from_csr(topo.num_nodes_dict, topo.edge_types, topo.indptr,
                                  topo.indices, topo.eid, [0, 1.7])


def test_per_type_inputs_flags_seeds_and_generators_are_named():
    """From a probe: replace="False" sampled with replacement, times were checked only once
    every type's were joined (an empty [] made int times "float32", a bool type beside an
    int one read as times 1 and 0, uint64 beside int64 failed in torch's promotion), complex
    weights lost their imaginary part, a bad generator, seeds that are no dict, meta
    tensors and an eid past the edges met errors that named none of them."""
    edges = {("a", "r", "a"): torch.tensor([[0, 1, 2, 3], [0, 0, 0, 0]]),
             ("a", "e", "a"): torch.empty(2, 0, dtype=torch.long)}
    topo = qv.HeteroCSRTopo(edges, {"a": 4})
    for flag in ("replace", "disjoint", "strict_time"):
        with pytest.raises(TypeError, match=f"{flag} must be True or False, got 'False'"):
            qv.HeteroSampler(topo, [4], mode="CPU", **{flag: "False"})
    timed = qv.HeteroCSRTopo(edges, {"a": 4}, edge_time_dict={("a", "r", "a"): [5, 6, 7, 8],
                                                              ("a", "e", "a"): []})
    assert sorted(timed.edge_time.tolist()) == [5, 6, 7, 8]
    for bad, error, words in (
            (torch.tensor([True, False, True, False]), TypeError, "must hold integer times"),
            (torch.tensor([1.5, 2, 3, 4]), TypeError, "must hold integer times"),
            (torch.empty(4, dtype=torch.long, device="meta"), TypeError, "is a meta tensor")):
        with pytest.raises(error, match=re.escape("edge_time_dict[('a', 'r', 'a')] ") + words):
            qv.HeteroCSRTopo(edges, {"a": 4}, edge_time_dict={
                ("a", "r", "a"): bad, ("a", "e", "a"): torch.empty(0, dtype=torch.long)})
    wide = qv.HeteroCSRTopo(edges, {"a": 4}, edge_time_dict={
        ("a", "r", "a"): torch.tensor([1, 2, 3, 4], dtype=torch.uint64),
        ("a", "e", "a"): torch.empty(0, dtype=torch.long)})
    assert sorted(wide.edge_time.tolist()) == [1, 2, 3, 4]
    with pytest.raises(TypeError, match=re.escape("weights[('a', 'r', 'a')] must hold real")):
        qv.HeteroSampler(topo, [1], mode="CPU", weights={
            ("a", "r", "a"): torch.tensor([1, 1, 1, 1 + 5j]), ("a", "e", "a"): torch.empty(0)})
    sampler = qv.HeteroSampler(topo, [1], mode="CPU")
    with pytest.raises(TypeError, match="generator must be a torch.Generator or None, got 5"):
        sampler.sample({"a": [0]}, generator=5)
    for seeds in (torch.tensor([0]), None):
        with pytest.raises(TypeError, match="seeds must be a dict"):
            sampler.sample(seeds)
    with pytest.raises(TypeError, match=r"seeds\['a'\] are a meta tensor"):
        sampler.sample({"a": torch.tensor([0], device="meta")})
    with pytest.raises(TypeError, match=re.escape("edge_index_dict[('a', 'r', 'a')] is a meta")):
        qv.HeteroCSRTopo({("a", "r", "a"): torch.empty(2, 3, dtype=torch.long, device="meta")})
    with pytest.raises(IndexError, match=r"eid holds edge id 103, out of range \[0, 4\)"):
        qv.HeteroCSRTopo.from_csr({"a": 4}, topo.edge_types, topo.indptr, topo.indices,
                                  topo.eid + 100, topo.relation_edge_offsets)


@pytest.mark.parametrize("times", [False, True])
def test_the_csr_order_is_target_relation_time_then_edge_id(times):
    """The layout's order, against plain stable sorts of every edge (the build now uses a
    counting sort by target and sorts each relation's run by time on its own)."""
    gen = torch.Generator().manual_seed(0)
    counts = {"a": 50, "b": 60}
    edges = {("a", "r1", "b"): (400, "a", "b"), ("b", "r2", "a"): (300, "b", "a"),
             ("a", "r3", "a"): (200, "a", "a")}
    edge_index = {et: torch.stack([torch.randint(0, counts[s], (m,), generator=gen),
                                   torch.randint(0, counts[d], (m,), generator=gen)])
                  for et, (m, s, d) in edges.items()}
    edge_time = ({et: torch.randint(0, 5, (ei.size(1),), generator=gen)  # many ties
                  for et, ei in edge_index.items()} if times else None)
    topo = qv.HeteroCSRTopo(edge_index, counts, edge_time_dict=edge_time)
    offset = {"a": 0, "b": 50}
    source = torch.cat([ei[0] + offset[et[0]] for et, ei in edge_index.items()])
    target = torch.cat([ei[1] + offset[et[2]] for et, ei in edge_index.items()])
    relation = torch.cat([torch.full((ei.size(1),), r) for r, ei in enumerate(edge_index.values())])
    order = torch.arange(source.numel())
    if times:
        time = torch.cat(list(edge_time.values()))
        order = torch.sort(time, stable=True).indices
    order = order[torch.sort(relation[order], stable=True).indices]
    order = order[torch.sort(target[order], stable=True).indices]
    assert torch.equal(topo.eid, order)
    assert torch.equal(topo.indices.long(), source[order])
    if times:
        assert torch.equal(topo.edge_time, time[order])


def test_arguments_of_the_wrong_kind_are_named():
    """A probe: capture_batches="no" read as True, sample_negatives took per_src=True as one
    and exclude_edges=None as no exclusion (and met 2.0, "no" or a bad generator in the op's
    schema words), strict_time=True without times was taken and ignored, and a list where a
    dict or a HeteroCSRTopo belongs failed on a missing attribute."""
    e = ("a", "to", "b")
    topo = qv.HeteroCSRTopo({e: torch.tensor([[0, 1], [1, 0]]),
                             ("b", "to", "a"): torch.tensor([[0, 1], [0, 1]])})
    for value in ("no", None, 1.0):
        with pytest.raises(TypeError, match="capture_batches must be True or False, got"):
            qv.HeteroSampler(topo, [2], mode="CPU", capture_batches=value)
    with pytest.raises(ValueError, match="strict_time=True .* needs a topo with edge_time_dict"):
        qv.HeteroSampler(topo, [2], mode="CPU", strict_time=True)
    sampler = qv.HeteroSampler(topo, [2], mode="CPU")
    src = torch.tensor([0])
    for args, kwargs, error, words in [
            ((True,), {}, TypeError, "per_src must be an int >= 0, got True"),
            ((2.0,), {}, TypeError, "per_src must be an int >= 0, got 2.0"),
            ((2**63,), {}, ValueError, "per_src must be an int >= 0, got 9223372036854775808"),
            ((2,), {"exclude_edges": None}, TypeError, "exclude_edges must be True or False"),
            ((2,), {"exclude_edges": "no"}, TypeError, "exclude_edges must be True or False"),
            ((2,), {"max_trials": True}, TypeError, r"max_trials must be an int in \[1, 1000\]"),
            ((2,), {"generator": "g"}, TypeError, "generator must be a torch.Generator")]:
        with pytest.raises(error, match=words):
            sampler.sample_negatives(e, src, *args, **kwargs)
    assert sampler.sample_negatives(e, torch.tensor([0, 1]), 3).tolist() == [0, 0, 0, 1, 1, 1]
    with pytest.raises(TypeError, match="HeteroSampler samples a HeteroCSRTopo .*got int"):
        qv.HeteroSampler(5, [2])
    with pytest.raises(TypeError, match="num_nodes_dict must be a dict .* got list"):
        qv.HeteroCSRTopo({e: torch.tensor([[0], [1]])}, num_nodes_dict=[2, 2])
    with pytest.raises(TypeError, match="edge_index_dict must be a dict .* got list"):
        qv.HeteroCSRTopo([torch.tensor([[0], [1]])])
