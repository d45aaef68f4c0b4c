"""quiver::neighbor_sample (weighted, temporal and disjoint multi-hop sampling) against exact
distributions, plain-Python references and the graph itself, on every placement."""
import itertools
import math

import pytest
import torch
from scipy.stats import chisquare, mannwhitneyu

import torch_quiver_ops as qv
from reference import place, random_graph, subgraph_sampler
from stats import P_VALUE_FLOOR, assert_uniform, star_graph

TRIALS = 6000


def place_extra(tensor, mode):
    """A per-edge array where the sampler in `mode` reads it (like indices)."""
    if mode == "GPU":
        return tensor.cuda()
    if mode == "UVA":
        return tensor.pin_memory()
    return tensor


def device_of(mode):
    return torch.device("cpu") if mode == "CPU" else torch.device("cuda")


def star_rows(mode, degree, fanout, trials=TRIALS, replace=False, weights=None, times=None,
              seed_time=None, strategy="uniform", cumsum=False):
    """`trials` independent one-hop draws from node 0 of a star graph: a list of the CSR
    offsets each draw picked (a repeated seed is one row per repetition)."""
    indptr, indices = star_graph(degree)
    dev = device_of(mode)
    seeds = torch.zeros(trials, dtype=torch.long, device=dev)
    kwargs = {}
    if weights is not None:
        kwargs["edge_weight"] = place_extra(weights.float(), mode)
        if cumsum:
            kwargs["edge_weight_cumsum"] = place_extra(
                qv.ops.row_cumsum(indptr, weights.float()), mode)
    if times is not None:
        kwargs.update(edge_time=place_extra(times, mode), disjoint=True,
                      seed_time=torch.full((trials,), seed_time, device=dev),
                      temporal_strategy=strategy)
    torch.manual_seed(7)
    out = qv.ops.neighbor_sample(place_extra(indptr, mode), place_extra(indices, mode), seeds,
                                 [fanout], replace, **kwargs)
    cols, eids = out[3].cpu(), out[4].cpu()
    rows = [[] for _ in range(trials)]
    for c, e in zip(cols.tolist(), eids.tolist()):
        rows[c].append(e)
    return rows


def successive_subset_probabilities(weights, k):
    """Exact probability of each k-subset under successive sampling: the first pick is i
    with w_i / W, each next one likewise among those left."""
    w = [float(x) for x in weights]
    probs = {}
    for order in itertools.permutations(range(len(w)), k):
        p, left = 1.0, sum(w)
        for i in order:
            p *= w[i] / left
            left -= w[i]
        key = tuple(sorted(order))
        probs[key] = probs.get(key, 0.0) + p
    return probs


def assert_fits(observed: dict, expected: dict, trials: int):
    keys = sorted(expected)
    f_obs = [observed.get(k, 0) for k in keys]
    f_exp = [expected[k] * trials for k in keys]
    assert sum(f_obs) == trials, "a draw fell outside the expected outcomes"
    p = chisquare(f_obs, f_exp).pvalue
    assert p > P_VALUE_FLOOR, f"p = {p:.2e}: observed {f_obs}, expected {f_exp}"


# ---- weighted ----

@pytest.mark.parametrize("cumsum", [False, True], ids=["keys", "sums"])
@pytest.mark.parametrize("degree,fanout", [(4, 1), (5, 2), (6, 3), (7, 5)])
def test_weighted_without_replacement_is_successive_sampling(mode, degree, fanout, cumsum):
    weights = torch.tensor([1.0, 2.0, 4.0, 0.5, 3.0, 1.5, 6.0])[:degree]
    rows = star_rows(mode, degree, fanout, weights=weights, cumsum=cumsum)
    assert all(len(r) == fanout and len(set(r)) == fanout for r in rows)
    observed = {}
    for r in rows:
        observed[tuple(sorted(r))] = observed.get(tuple(sorted(r)), 0) + 1
    assert_fits(observed, successive_subset_probabilities(weights, fanout), len(rows))


def test_weighted_inclusion_is_not_proportional(mode):
    """The known confusion (DGL#6917): a heavy edge's inclusion saturates near 1, so
    inclusion frequencies are not proportional to weight. Documented, and held here."""
    weights = torch.tensor([10.0, 1.0, 1.0, 1.0])
    rows = star_rows(mode, 4, 2, weights=weights)
    heavy = sum(0 in r for r in rows) / len(rows)
    light = sum(1 in r for r in rows) / len(rows)
    exact = successive_subset_probabilities(weights, 2)
    assert abs(heavy - sum(p for s, p in exact.items() if 0 in s)) < 0.02
    assert heavy / light < 10 / 1 * 0.5  # far from proportional


@pytest.mark.parametrize("cumsum", [False, True], ids=["keys", "sums"])
@pytest.mark.parametrize("degree,fanout", [(3, 4), (6, 40)])
def test_weighted_with_replacement_draws_by_weight(mode, degree, fanout, cumsum):
    weights = torch.tensor([1.0, 2.0, 4.0, 0.5, 3.0, 1.5])[:degree]
    rows = star_rows(mode, degree, fanout, replace=True, weights=weights, trials=800,
                     cumsum=cumsum)
    assert all(len(r) == fanout for r in rows)
    picks = torch.tensor([e for r in rows for e in r])
    f_obs = torch.bincount(picks, minlength=degree).double()
    f_exp = weights.double() / weights.sum() * picks.numel()
    p = chisquare(f_obs.numpy(), f_exp.numpy()).pvalue
    assert p > P_VALUE_FLOOR, (f_obs.tolist(), f_exp.tolist())


def test_sums_fall_back_to_keys_exactly_on_skewed_rows(mode):
    """One edge with nearly all the weight: the draws by prefix sums keep meeting it, give
    up after their budget and finish by keys; the subsets still follow successive
    sampling exactly."""
    weights = torch.tensor([2000.0, 1.0, 2.0, 3.0, 1.5])
    rows = star_rows(mode, 5, 3, weights=weights, cumsum=True)
    observed = {}
    for r in rows:
        assert len(set(r)) == 3
        observed[tuple(sorted(r))] = observed.get(tuple(sorted(r)), 0) + 1
    assert_fits(observed, successive_subset_probabilities(weights, 3), len(rows))


def test_sums_of_many_picks_follow_the_keys_law(mode):
    """Past 64 picks a row's draws by prefix sums mark the edges met by flags (a scan of
    the picks cost count^2: 15 s for 99,000 picks of a hub; a probe). 30 edges of weight
    1e6 among 70 of weight 1: the heavy ones are all taken before any light one (the draws
    keep meeting them and finish by keys), and the 40 light picks are uniform. And with
    weights 3 and 1, 80 of 100 picks take as many heavy edges as the keys do."""
    weights = torch.cat([torch.full((30,), 1e6), torch.ones(70)])
    rows = star_rows(mode, 100, 70, trials=400, weights=weights, cumsum=True)
    assert all(len(r) == 70 and len(set(r)) == 70 for r in rows)
    assert all(set(range(30)) <= set(r) for r in rows)
    light = torch.tensor([e for r in rows for e in r if e >= 30])
    assert_uniform(torch.bincount(light - 30, minlength=70))
    weights = torch.cat([torch.full((50,), 3.0), torch.ones(50)])
    drawn = {cumsum: star_rows(mode, 100, 80, trials=2000, weights=weights, cumsum=cumsum)
             for cumsum in (False, True)}
    assert all(len(r) == 80 and len(set(r)) == 80 for r in drawn[True])
    heavy = {cumsum: [sum(e < 50 for e in r) for r in rows] for cumsum, rows in drawn.items()}
    p = mannwhitneyu(heavy[False], heavy[True]).pvalue
    assert p > P_VALUE_FLOOR, (sum(heavy[False]) / 2000, sum(heavy[True]) / 2000)


@pytest.mark.parametrize("cumsum", [False, True], ids=["keys", "sums"])
def test_a_thousand_picks_of_a_hub_follow_successive_sampling(mode, cumsum):
    """1,000 picks of 3,000 edges, the first 1,000 of weight 4 and the rest of weight 1:
    the heavy picks a row against successive sampling simulated here (exponential clocks),
    on both weighted paths (keys in the row's scratch, many at once; draws by prefix sums
    with the edges met in a set). Then 100 edges of weight 1e6: the draws by sums meet only
    them and finish by keys, 900 of the 2,900 light edges, uniform among them."""
    degree, fanout, trials = 3000, 1000, 200
    weights = torch.cat([torch.full((1000,), 4.0), torch.ones(2000)])
    rows = star_rows(mode, degree, fanout, weights=weights, trials=trials, cumsum=cumsum)
    assert all(len(r) == fanout and len(set(r)) == fanout for r in rows)
    heavy = torch.tensor([sum(e < 1000 for e in r) for r in rows], dtype=torch.float64)
    gen = torch.Generator().manual_seed(5)
    clocks = torch.empty(2000, degree, dtype=torch.float64).exponential_(generator=gen)
    picked = (clocks / weights.double()).topk(fanout, dim=1, largest=False).indices
    law = (picked < 1000).sum(dim=1).double()
    spread = math.sqrt(law.var() / trials + law.var() / law.numel())
    assert abs(float(heavy.mean() - law.mean())) < 5 * spread, (heavy.mean(), law.mean())
    weights = torch.cat([torch.full((100,), 1e6), torch.ones(2900)])
    rows = star_rows(mode, degree, fanout, weights=weights, trials=trials, cumsum=cumsum)
    assert all(len(set(r)) == fanout and set(range(100)) <= set(r) for r in rows)
    light = torch.tensor([e - 100 for r in rows for e in r if e >= 100])
    assert_uniform(torch.bincount(light, minlength=2900))


def test_hub_rows_sample_alike_on_any_number_of_threads():
    """On the CPU a hop's rows are split into tasks by rows and by picks (a few hubs of
    thousands of picks had been one task): whatever the threads, the same batch."""
    gen = torch.Generator().manual_seed(8)
    hubs, degree, nodes = 6, 4000, 50_000
    indptr = torch.zeros(nodes + 1, dtype=torch.long)
    indptr[1:hubs + 1] = torch.arange(1, hubs + 1) * degree
    indptr[hubs + 1:] = hubs * degree
    indices = torch.randint(hubs, nodes, (hubs * degree,), generator=gen)
    weights = torch.rand(hubs * degree, generator=gen) + 0.1
    sums = qv.ops.row_cumsum(indptr, weights)
    seeds = torch.arange(hubs + 300)  # the hubs, then nodes without neighbors
    threads = torch.get_num_threads()
    try:
        for rules in ({}, {"edge_weight": weights, "edge_weight_cumsum": sums}):
            outs = []
            for n in (1, 2, 4):
                torch.set_num_threads(n)
                outs.append(qv.ops.neighbor_sample(
                    indptr, indices, seeds, [3000, 2], generator=torch.Generator().manual_seed(1),
                    **rules))
            for out in outs[1:]:
                assert all(torch.equal(a, b) for a, b in zip(outs[0], out))
            assert outs[0][-1].tolist()[0] == hubs * 3000
    finally:
        torch.set_num_threads(threads)


def test_sums_match_keys_on_a_random_graph(mode):
    """Long rows, several hops: both weighted paths give the same kind of subgraph, real
    edges, min(fanout, degree) picks a row."""
    graph = random_graph(num_nodes=100, num_edges=6000, seed=13)
    (indptr, indices, eid), dev = place(graph, mode)
    weights = torch.rand(graph.indices.numel(), generator=torch.Generator().manual_seed(2)) + 0.1
    sums = qv.ops.row_cumsum(graph.indptr, weights)
    seeds = torch.arange(0, 100, 3, device=dev)
    out = qv.ops.neighbor_sample(indptr, indices, seeds, [10, 5], edge_ids=eid,
                                 edge_weight=place_extra(weights, mode),
                                 edge_weight_cumsum=place_extra(sums, mode))
    node_ids, _, rows, cols, eids, nph, eph = (t.cpu() for t in out)
    assert torch.equal(graph.row[eids], node_ids[cols])
    assert torch.equal(graph.col[eids], node_ids[rows])
    degree = graph.indptr[1:] - graph.indptr[:-1]
    first = cols[:int(eph[0])]
    counts = torch.bincount(first, minlength=seeds.numel())
    assert torch.equal(counts, degree[seeds.cpu()].clamp(max=10))
    pairs = torch.stack([cols, eids])
    assert pairs.unique(dim=1).size(1) == pairs.size(1)  # no edge twice for one node


@pytest.mark.parametrize("disjoint", [False, True])
@pytest.mark.parametrize("cumsum", [False, True], ids=["keys", "sums"])
def test_weighted_second_hop_is_successive_sampling(mode, cumsum, disjoint):
    """Seed i's one neighbor T + i has five leaves of skewed weights: hop 1 reaches it, hop
    2 takes 2 of its leaves, subsets following successive sampling exactly. The one-hop
    stars above never reach a later hop's weights (a sampler that drew later hops
    uniformly passed every weighted test)."""
    trials, weights = 3000, torch.tensor([6.0, 1.0, 2.0, 0.5, 3.0])
    leaves = torch.arange(2 * trials, 2 * trials + 5)
    indptr = torch.cat([torch.arange(trials + 1),
                        trials + 5 * torch.arange(1, trials + 1), torch.full((5,), 6 * trials)])
    indices = torch.cat([torch.arange(trials, 2 * trials), leaves.repeat(trials)])
    edge_weight = torch.cat([torch.ones(trials), weights.repeat(trials)])
    kwargs = dict(edge_weight=place_extra(edge_weight, mode), disjoint=disjoint)
    if cumsum:
        kwargs["edge_weight_cumsum"] = place_extra(qv.ops.row_cumsum(indptr, edge_weight), mode)
    torch.manual_seed(11)
    out = qv.ops.neighbor_sample(place_extra(indptr, mode), place_extra(indices, mode),
                                 torch.arange(trials, device=device_of(mode)), [1, 2], **kwargs)
    node_ids, cols, eids, eph = out[0].cpu(), out[3].cpu(), out[4].cpu(), out[6].cpu()
    assert eph.tolist() == [trials, 2 * trials]
    second, targets = eids[trials:], node_ids[cols[trials:]]
    offsets = second - indptr[targets]  # the leaf's offset in its row
    assert bool(((offsets >= 0) & (offsets < 5)).all())
    observed = {}
    for pair in offsets[targets.argsort(stable=True)].view(trials, 2).tolist():
        observed[tuple(sorted(pair))] = observed.get(tuple(sorted(pair)), 0) + 1
    assert_fits(observed, successive_subset_probabilities(weights, 2), trials)


def test_row_cumsum_and_bad_sums(mode):
    indptr, indices = star_graph(4)
    weights = torch.tensor([1.0, 2.0, 3.0, 4.0])
    sums = qv.ops.row_cumsum(indptr, weights)
    assert torch.equal(sums, torch.tensor([1.0, 3.0, 6.0, 10.0], dtype=torch.double))
    with pytest.raises(ValueError, match=r"edge_weight\[1\] = 0.0"):
        qv.ops.row_cumsum(indptr, torch.tensor([1.0, 0.0, 3.0, 4.0]))
    dev = device_of(mode)
    seeds = torch.zeros(64, dtype=torch.long, device=dev)
    flat = torch.tensor([1.0, 3.0, 6.0, float("nan")], dtype=torch.double)
    with pytest.raises(ValueError, match="edge_weight_cumsum does not grow at CSR position 3"):
        qv.ops.neighbor_sample(place_extra(indptr, mode), place_extra(indices, mode), seeds, [2],
                               edge_weight=place_extra(weights, mode),
                               edge_weight_cumsum=place_extra(flat, mode))
    with pytest.raises(ValueError, match="pass edge_weight too"):
        qv.ops.neighbor_sample(place_extra(indptr, mode), place_extra(indices, mode), seeds, [2],
                               edge_weight_cumsum=place_extra(sums, mode))
    with pytest.raises(TypeError, match="edge_weight_cumsum must be torch.float64"):
        qv.ops.neighbor_sample(place_extra(indptr, mode), place_extra(indices, mode), seeds, [2],
                               edge_weight=place_extra(weights, mode),
                               edge_weight_cumsum=place_extra(sums.float(), mode))


@pytest.mark.parametrize("sums", ["global", "falling"])
def test_sums_that_do_not_restart_or_fall_are_refused(mode, sums):
    """A cumsum over the whole CSR (not per row) grows everywhere, and falling sums send the
    binary search anywhere: both were sampled, silently skewed (edge 4 drawn 5x its share;
    only the first edge of falling sums)."""
    indptr = torch.tensor([0, 4, 8])
    indices = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    weights = torch.ones(8)
    if sums == "global":
        bad = weights.double().cumsum(0)
        words = "edge_weight_cumsum at CSR position 4 .* is not that edge's weight"
        seeds = torch.ones(64, dtype=torch.long)
    else:
        bad = torch.tensor([1.0, 0.5, 0.25, 0.125] * 2, dtype=torch.double)
        words = "edge_weight_cumsum does not grow"
        seeds = torch.zeros(64, dtype=torch.long)
    with pytest.raises(ValueError, match=words):
        qv.ops.neighbor_sample(place_extra(indptr, mode), place_extra(indices, mode),
                               seeds.to(device_of(mode)), [1], replace=True,
                               edge_weight=place_extra(weights, mode),
                               edge_weight_cumsum=place_extra(bad, mode))


def test_row_cumsum_rows_start_at_their_first_weight_beside_heavy_rows():
    """A row of weights 1e-3 after rows summing to 1e9: the global running sum left its
    first sum 1e-7 off its weight, which the op's per-row check (1e-6 relative) refused."""
    indptr = torch.tensor([0, 3, 6])
    weights = torch.tensor([4e8, 3e8, 3e8, 1.1e-3, 2e-3, 3e-3])
    sums = qv.ops.row_cumsum(indptr, weights)
    assert float(sums[3]) == float(weights[3])
    out = qv.ops.neighbor_sample(indptr, torch.tensor([0, 1, 0, 1, 0, 1]), torch.tensor([1]),
                                 [2], edge_weight=weights, edge_weight_cumsum=sums)
    assert out[2].numel() == 2


def test_row_cumsum_names_bad_offsets():
    for indptr in (torch.tensor([1, 2, 4]), torch.tensor([0, 3, 2, 4])):
        with pytest.raises(ValueError, match="indptr must be a CSR's row offsets"):
            qv.ops.row_cumsum(indptr, torch.ones(4))


def test_sort_rows_by_time_names_a_bad_csr_and_edge_ids():
    indptr, indices = torch.tensor([0, 2, 3]), torch.tensor([1, 0, 1])
    with pytest.raises(ValueError, match="indptr"):
        qv.ops.sort_rows_by_time(torch.tensor([0, 3, 2]), indices, edge_time=torch.arange(3))
    with pytest.raises(IndexError, match="-1"):
        qv.ops.sort_rows_by_time(indptr, torch.tensor([1, -1, 1]), node_time=torch.arange(2))
    with pytest.raises(ValueError, match="edge_ids must hold one id per CSR edge"):
        qv.ops.sort_rows_by_time(indptr, indices, torch.arange(5), edge_time=torch.arange(3))


def test_disjoint_trees_with_large_fanouts_size_their_table_by_what_is_reached():
    """The reindexing table was sized for fanout products over a key space of nodes x
    batch: a ring of 10^6 nodes with fanouts [2^31] asked for 32 GiB before sampling."""
    n = 1_000_000
    indptr, indices = torch.arange(n + 1), (torch.arange(n) + 1) % n
    out = qv.ops.neighbor_sample(indptr, indices, torch.arange(1000), [2**31, 2**31],
                                 disjoint=True)
    assert out[0].numel() == 3000 and out[2].numel() == 2000


def test_row_cumsum_of_rows_far_lighter_than_the_rows_before():
    """A row of weights about 1e-16 of the running total before it: a global running sum
    would leave its sums flat; it is summed on its own."""
    indptr = torch.tensor([0, 2, 5])
    weights = torch.tensor([1e12, 1e12, 3e-5, 1e-5, 2e-5])
    sums = qv.ops.row_cumsum(indptr, weights)
    want = torch.cat([weights[:2].double().cumsum(0), weights[2:].double().cumsum(0)])
    torch.testing.assert_close(sums, want, rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match=r"one weight per CSR edge \(5\), got shape \(4,\)"):
        qv.ops.row_cumsum(indptr, weights[:4])


def test_row_cumsum_steps_are_the_weights_of_a_row_light_beside_the_rows_before():
    """A row of weights near 1e4 after a row of 1e20: rounding against the running total
    had left its steps [33404, 16384, 32768] for weights [33404, 8249, 40920], and the
    sampler drew the second edge at twice its rate without a word (a probe)."""
    indptr = torch.tensor([0, 1, 4])
    weights = torch.tensor([1e20, 33404.0, 8249.0, 40920.0])
    sums = qv.ops.row_cumsum(indptr, weights)
    torch.testing.assert_close(sums[1:], weights[1:].double().cumsum(0), rtol=1e-12, atol=0)
    qv.ops.check_row_tables(indptr, edge_weight=weights, edge_weight_cumsum=sums)
    seeds = torch.full((100_000,), 1)
    out = qv.ops.neighbor_sample(indptr, torch.tensor([1, 0, 0, 0]), seeds, [1],
                                 edge_ids=torch.arange(4), edge_weight=weights,
                                 edge_weight_cumsum=sums)
    counts = torch.bincount(out[4], minlength=4)[1:].double()
    assert chisquare(counts, weights[1:].double() / weights[1:].sum() * counts.sum()
                     ).pvalue > P_VALUE_FLOOR
    # The old sums (within 1e-6 of the row's total at the last step, yet each step wrong)
    # and a light edge's step doubled beside a heavy one are refused by the check.
    old = torch.tensor([1e20, 33404.0, 49788.0, 82556.0], dtype=torch.double)
    with pytest.raises(ValueError, match=r"edge_weight_cumsum\[2\] = 49788.0 is not the "):
        qv.ops.check_row_tables(indptr, edge_weight=weights, edge_weight_cumsum=old)
    with pytest.raises(ValueError, match=r"edge_weight_cumsum\[1\] = 10000002.0 is not"):
        qv.ops.check_row_tables(torch.tensor([0, 2]), edge_weight=torch.tensor([1e7, 1.0]),
                                edge_weight_cumsum=torch.tensor([1e7, 1e7 + 2.0]))


def test_row_cumsum_matches_each_rows_own_sums_at_mixed_scales():
    """Rows of weights at scales from 1e-20 to 1e20 in random order: every step is its
    weight to 1e-6 and every sum the row's own to 1e-6, which check_row_tables accepts."""
    generator = torch.Generator().manual_seed(7)
    for _ in range(100):
        n = int(torch.randint(1, 40, (1,), generator=generator))
        degrees = torch.randint(0, 6, (n,), generator=generator)
        indptr = torch.cat([torch.zeros(1, dtype=torch.long), degrees.cumsum(0)])
        scale = torch.repeat_interleave(
            10 ** (torch.rand(n, generator=generator, dtype=torch.double) * 40 - 20), degrees)
        weights = (scale * 10 ** (torch.rand(scale.numel(), generator=generator,
                                             dtype=torch.double) * 4)).float()
        sums = qv.ops.row_cumsum(indptr, weights)
        own = torch.cat([weights[a:b].double().cumsum(0)
                         for a, b in zip(indptr[:-1].tolist(), indptr[1:].tolist())])
        torch.testing.assert_close(sums, own, rtol=1e-6, atol=0)
        steps = sums - torch.cat([sums.new_zeros(1), sums[:-1]])
        firsts = indptr[:-1][degrees > 0]
        steps[firsts] = sums[firsts]
        torch.testing.assert_close(steps, weights.double(), rtol=1e-6, atol=0)
        qv.ops.check_row_tables(indptr, edge_weight=weights, edge_weight_cumsum=sums)


def test_row_cumsum_past_float64_and_in_pieces(monkeypatch):
    """A running sum past float64's range left NaN sums that passed the step check; rows
    summed again go in pieces of bounded size (a review); a row whose own weights span
    2^53 gets a step of 0 (never drawn), which check_row_tables accepts."""
    sums = qv.ops.row_cumsum(torch.tensor([0, 1, 2, 4]),
                             torch.tensor([1e308, 1e308, 1.0, 2.0], dtype=torch.double))
    assert sums[2:].tolist() == [1.0, 3.0]
    span = torch.tensor([1.0, 1e16, 1.0], dtype=torch.double)
    qv.ops.check_row_tables(torch.tensor([0, 3]), edge_weight=span,
                            edge_weight_cumsum=qv.ops.row_cumsum(torch.tensor([0, 3]), span))
    monkeypatch.setattr(qv.ops, "_RESUM_EDGES", 5)
    generator = torch.Generator().manual_seed(1)
    degrees = torch.randint(0, 7, (300,), generator=generator)
    indptr = torch.cat([torch.zeros(1, dtype=torch.long), degrees.cumsum(0)])
    weights = 10 ** (torch.rand(int(indptr[-1]), generator=generator, dtype=torch.double) * 6 - 3)
    weights[0] = 1e18  # every later row summed again, five edges at a time
    own = torch.cat([weights[a:b].cumsum(0)
                     for a, b in zip(indptr[:-1].tolist(), indptr[1:].tolist())])
    torch.testing.assert_close(qv.ops.row_cumsum(indptr, weights), own, rtol=1e-12, atol=0)


def test_sort_rows_by_time_refuses_fractional_times():
    indptr, indices = star_graph(2)
    with pytest.raises(TypeError, match="edge_time must hold integer times"):
        qv.ops.sort_rows_by_time(indptr, indices, edge_time=torch.tensor([0.7, 0.3]))
    with pytest.raises(TypeError, match="node_time must hold integer times"):
        qv.ops.sort_rows_by_time(indptr, indices, node_time=torch.tensor([0.0, 0.7, 0.3]))


@pytest.mark.parametrize("cumsum", [False, True], ids=["keys", "sums"])
def test_weighted_large_fanout_beyond_shared_buffer(mode, cumsum):
    """More picks than a GPU warp holds in registers: the keys kept in the row's scratch,
    or the draws by prefix sums with the edges met in a set there."""
    degree, fanout = 60, 40
    weights = torch.linspace(0.5, 5.0, degree)
    rows = star_rows(mode, degree, fanout, weights=weights, trials=400, cumsum=cumsum)
    assert all(len(r) == fanout and len(set(r)) == fanout for r in rows)
    # Each edge's count against successive sampling simulated here (exponential clocks
    # E_i / w_i, the 40 shortest picked). Lighter edges less often was all it checked: a
    # sampler that always took the 40 heaviest passed (a review).
    counts = torch.bincount(torch.tensor([e for r in rows for e in r]), minlength=degree)
    gen = torch.Generator().manual_seed(0)
    clocks = torch.empty(100_000, degree, dtype=torch.float64).exponential_(generator=gen)
    picked = (clocks / weights.double()).argsort(dim=1)[:, :fanout]
    p = torch.bincount(picked.reshape(-1), minlength=degree).double() / 100_000
    statistic = float(((counts - len(rows) * p) ** 2 / (len(rows) * p * (1 - p))).sum())
    assert statistic < 120, statistic  # about 59 expected; P(> 120) is below 1e-5


@pytest.mark.parametrize("cumsum", [False, True], ids=["keys", "sums"])
def test_weighted_more_picks_than_a_warp_is_successive_sampling(mode, cumsum):
    """33 picks of 34 edges (past the 32 a GPU warp holds in registers): a draw is told by
    the one edge left out, the edge whose exponential clock E_i / w_i runs longest, with
    probability integral of w_i exp(-w_i t) prod_{j != i} (1 - exp(-w_j t)) dt."""
    from scipy.integrate import quad
    degree, fanout = 34, 33
    weights = torch.linspace(0.5, 5.0, degree, dtype=torch.float64)
    w = weights.tolist()

    def left_out(i):
        def density(t):
            return w[i] * math.exp(-w[i] * t) * math.prod(
                1 - math.exp(-w[j] * t) for j in range(degree) if j != i)
        return quad(density, 0, math.inf, limit=200)[0]

    expected = torch.tensor([left_out(i) for i in range(degree)], dtype=torch.float64)
    assert abs(float(expected.sum()) - 1) < 1e-6
    rows = star_rows(mode, degree, fanout, weights=weights.float(), cumsum=cumsum)
    assert all(len(r) == fanout and len(set(r)) == fanout for r in rows)
    left = torch.tensor([next(iter(set(range(degree)) - set(r))) for r in rows])
    observed = torch.bincount(left, minlength=degree)
    p = chisquare(observed.numpy(), (expected / expected.sum() * len(rows)).numpy()).pvalue
    assert p > P_VALUE_FLOOR, (observed.tolist(), (expected * len(rows)).tolist())


def test_weights_far_below_the_rest_are_still_weighted(mode):
    """16 edges of weight 1 among many of weight 1e-20, one pick a row: a light edge has
    probability about 1e-15. A uniform that reaches 1.0, or a fast log that reads 0 near
    1, makes a key 0 that beats every weight (about degree / 2^24 a row on the GPU's
    float keys before)."""
    degree, trials = (1 << 20, 2000) if mode != "CPU" else (1 << 16, 200)
    weights = torch.full((degree,), 1e-20)
    weights[torch.arange(0, degree, degree // 16)] = 1.0
    rows = star_rows(mode, degree, 1, weights=weights, trials=trials)
    picks = torch.tensor([r[0] for r in rows])
    assert int((weights[picks] < 1).sum()) == 0


def test_sums_fallback_with_tiny_weights_stays_in_the_row(mode):
    """Draws by prefix sums that never meet two edges of weight 1.4e-45 (their sums do not
    move in float64) end by keys, which must still fill every pick from the seed's own row
    (float keys of such weights are -inf; an unfilled pick read the row before)."""
    indptr = torch.tensor([0, 1, 4, 4, 4, 4, 4])
    indices = torch.tensor([5, 2, 3, 4])
    weights = torch.tensor([1.0, 1.0, 1e-45, 1e-45])
    assert bool((weights > 0).all())
    sums = qv.ops.row_cumsum(indptr, weights)
    dev = device_of(mode)
    seeds = torch.ones(200, dtype=torch.long, device=dev)
    out = qv.ops.neighbor_sample(place_extra(indptr, mode), place_extra(indices, mode), seeds,
                                 [2], edge_weight=place_extra(weights, mode),
                                 edge_weight_cumsum=place_extra(sums, mode))
    eids, eph = out[4].cpu(), out[6].cpu()
    assert int(eph[0]) == 2 * 200
    assert set(eids.tolist()) <= {1, 2, 3}
    cols = out[3].cpu()
    assert torch.equal(torch.bincount(cols, minlength=200), torch.full((200,), 2))


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_weights_raise(mode, bad):
    weights = torch.tensor([1.0, 2.0, bad, 1.0, 1.0])
    with pytest.raises(ValueError, match=r"edge_weight\[2\] = .* must be finite and > 0"):
        star_rows(mode, 5, 2, weights=weights, trials=4)


# ---- temporal ----

def test_temporal_uniform_samples_only_admitted_edges_uniformly(mode):
    times = torch.tensor([1, 2, 3, 5, 8, 13])
    rows = star_rows(mode, 6, 2, times=times, seed_time=5)  # admits offsets 0..3
    observed = {}
    for r in rows:
        observed[tuple(sorted(r))] = observed.get(tuple(sorted(r)), 0) + 1
    expected = {s: 1 / 6 for s in itertools.combinations(range(4), 2)}
    assert_fits(observed, expected, len(rows))


@pytest.mark.parametrize("strict", [False, True])
def test_temporal_last_takes_the_most_recent(mode, strict):
    indptr, indices = star_graph(6)
    times = torch.tensor([1, 2, 3, 5, 5, 13])
    dev = device_of(mode)
    out = qv.ops.neighbor_sample(place_extra(indptr, mode), place_extra(indices, mode),
                                 torch.zeros(3, dtype=torch.long, device=dev), [2],
                                 edge_time=place_extra(times, mode),
                                 seed_time=torch.tensor([5, 2, 0], device=dev), strict_time=strict,
                                 temporal_strategy="last", disjoint=True)
    cols, eids = out[3].cpu(), out[4].cpu()
    per_seed = [sorted(eids[cols == i].tolist()) for i in range(3)]
    if strict:
        assert per_seed == [[1, 2], [0], []]
    else:
        assert per_seed == [[3, 4], [0, 1], []]


def temporal_graph(seed, num_nodes=200, num_edges=2500):
    graph = random_graph(num_nodes=num_nodes, num_edges=num_edges, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    edge_time = torch.randint(0, 100, (graph.indices.numel(),), generator=gen)
    indices, eid, times = qv.ops.sort_rows_by_time(graph.indptr, graph.indices, graph.eid,
                                                   edge_time=edge_time)
    return graph, indices, eid, times


@pytest.mark.parametrize("strategy", ["uniform", "last"])
@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("seed", [1, 2])
def test_temporal_rule_never_broken(mode, strategy, strict, seed):
    """Property test on random graphs: every sampled edge is real and obeys its tree's
    seed time; each node yields min(fanout, admitted); `last` takes exactly the most
    recent edges."""
    graph, indices, eid, times = temporal_graph(seed)
    gen = torch.Generator().manual_seed(seed + 10)
    seeds = torch.randint(0, graph.num_nodes, (40,), generator=gen)
    seed_time = torch.randint(0, 100, (40,), generator=gen)
    dev = device_of(mode)
    fanouts = [4, 3]
    out = qv.ops.neighbor_sample(place_extra(graph.indptr, mode), place_extra(indices, mode),
                                 seeds.to(dev), fanouts, edge_ids=place_extra(eid, mode),
                                 edge_time=place_extra(times, mode), seed_time=seed_time.to(dev),
                                 strict_time=strict, temporal_strategy=strategy, disjoint=True)
    node_ids, batch, rows, cols, eids, nph, eph = (t.cpu() for t in out)
    time_of_input_edge = torch.empty_like(times)
    time_of_input_edge[eid] = times
    csr_pos_of = torch.empty_like(eid)
    csr_pos_of[eid] = torch.arange(eid.numel())
    limit = seed_time[batch[cols]]
    t = time_of_input_edge[eids]
    assert bool(((t < limit) if strict else (t <= limit)).all())
    # every edge is real: the input edge eids[k] runs from the expanded node to the neighbor
    assert torch.equal(graph.row[eids], node_ids[cols])
    assert torch.equal(graph.col[eids], node_ids[rows])
    # per expanded node: min(fanout, admitted) edges; `last` takes the newest admitted ones
    hop_edges = eph.tolist()
    start = 0
    for hop, fanout in enumerate(fanouts):
        hop_cols, hop_eids = cols[start:start + hop_edges[hop]], eids[start:start + hop_edges[hop]]
        lo, hi = int(nph[:hop].sum()), int(nph[:hop + 1].sum())
        for local in range(lo, hi):
            v, tree = int(node_ids[local]), int(batch[local])
            b, e = int(graph.indptr[v]), int(graph.indptr[v + 1])
            row_times = times[b:e]
            limit_v = int(seed_time[tree])
            admitted = int(((row_times < limit_v) if strict else (row_times <= limit_v)).sum())
            mine = hop_eids[hop_cols == local]
            assert mine.numel() == min(fanout, admitted)
            if strategy == "last":
                expected = eid[b + admitted - mine.numel():b + admitted]
                assert sorted(mine.tolist()) == sorted(expected.tolist())
        start += hop_edges[hop]


@pytest.mark.parametrize("view", ["expanded", "strided"])
def test_seed_time_may_be_a_view(mode, view):
    """One time for every seed passed as an expanded tensor, or every other element of a
    longer one: the seeds' times are what the view shows (not its storage read as if
    contiguous)."""
    indptr, indices = star_graph(5)
    times = torch.tensor([0, 0, 10, 20, 30])
    dev = device_of(mode)
    seed_time = (torch.tensor(5, device=dev).expand(4) if view == "expanded"
                 else torch.tensor([5, 99] * 4, device=dev)[::2])
    out = qv.ops.neighbor_sample(place_extra(indptr, mode), place_extra(indices, mode),
                                 torch.zeros(4, dtype=torch.long, device=dev), [5],
                                 edge_time=place_extra(times, mode), seed_time=seed_time,
                                 disjoint=True)
    eids = out[4].cpu()
    assert eids.numel() == 4 * 2 and bool((times[eids] <= 5).all())


def test_sums_path_checks_the_weights_it_reads(mode):
    """A hand-made edge_weight_cumsum that hides bad weights: an edge the keys reach, or a
    row taken whole, still has its weight checked (the draws by sums skip edges they never
    land on)."""
    indptr, indices = star_graph(3)
    dev = device_of(mode)
    seeds = torch.zeros(4, dtype=torch.long, device=dev)

    def call(weights, sums, fanout):
        return qv.ops.neighbor_sample(
            place_extra(indptr, mode), place_extra(indices, mode), seeds, [fanout],
            edge_weight=place_extra(torch.tensor(weights), mode),
            edge_weight_cumsum=place_extra(torch.tensor(sums, dtype=torch.double), mode))

    with pytest.raises(ValueError, match=r"edge_weight\[[12]\] = 0"):
        call([1.0, 0.0, 0.0], [1.0, 1.0, 1.0], 2)  # zero-width edges: reached by keys only
    with pytest.raises(ValueError, match=r"edge_weight\[1\] = nan"):
        call([1.0, float("nan"), 1.0], [1.0, 2.0, 3.0], -1)  # the row taken whole


def test_unsorted_times_are_caught(mode):
    indptr, indices = star_graph(5)
    times = torch.tensor([9, 1, 2, 3, 4])  # not sorted: the first edge is the newest
    dev = device_of(mode)
    with pytest.raises(ValueError, match="not non-decreasing within the row of node 0"):
        qv.ops.neighbor_sample(place_extra(indptr, mode), place_extra(indices, mode),
                               torch.zeros(64, dtype=torch.long, device=dev), [3],
                               edge_time=place_extra(times, mode),
                               seed_time=torch.full((64,), 4, device=dev), disjoint=True)


def test_sort_rows_by_time_node_times():
    graph = random_graph(num_nodes=50, num_edges=300, seed=3)
    node_time = torch.randint(0, 20, (50,))
    indices, eid, times = qv.ops.sort_rows_by_time(graph.indptr, graph.indices,
                                                   node_time=node_time)
    assert torch.equal(times, node_time[indices.long()])
    for v in range(50):
        b, e = int(graph.indptr[v]), int(graph.indptr[v + 1])
        assert bool((times[b + 1:e] >= times[b:e - 1]).all())
        assert sorted(indices[b:e].tolist()) == sorted(graph.indices[b:e].tolist())
    assert torch.equal(graph.indices[eid], indices)


# ---- disjoint ----

def test_disjoint_second_hop_draws_apart_from_the_first(mode):
    """Each tree picks one of node 0's three neighbors, then one of its three leaves: the
    nine pairs equally likely over the trees of one batch (a second hop that reused the
    first hop's random stream would pick the leaf at the neighbor's offset)."""
    from stats import assert_uniform
    from test_sample_subgraph import star_of_stars
    indptr, indices = star_of_stars()
    dev = device_of(mode)
    torch.manual_seed(9)
    trees = 900
    out = qv.ops.neighbor_sample(place_extra(indptr, mode), place_extra(indices, mode),
                                 torch.zeros(trees, dtype=torch.long, device=dev), [1, 1],
                                 disjoint=True)
    batch, cols, eids, eph = out[1].cpu(), out[3].cpu(), out[4].cpu(), out[6].cpu()
    assert eph.tolist() == [trees, trees]
    first = torch.empty(trees, dtype=torch.long)
    second = torch.empty(trees, dtype=torch.long)
    first[batch[cols[:trees]]] = eids[:trees]
    second[batch[cols[trees:]]] = eids[trees:]
    leaf = second - 3 * (first + 1)
    assert bool(((leaf >= 0) & (leaf < 3)).all())
    assert_uniform(torch.bincount(3 * first + leaf, minlength=9))


def assert_each_node_takes_its_fanout(indptr, node_ids, cols, nph, eph, fanouts):
    """Per hop, each node the hop before added (in its own tree) is the target of
    min(fanout, degree) edges, or of all its edges where the fanout is -1."""
    degree = indptr[1:] - indptr[:-1]
    node_bounds = [0] + nph.cumsum(0).tolist()
    edge_bounds = [0] + eph.cumsum(0).tolist()
    for hop, fanout in enumerate(fanouts):
        lo, hi = node_bounds[hop], node_bounds[hop + 1]
        hop_cols = cols[edge_bounds[hop]:edge_bounds[hop + 1]]
        assert bool(((hop_cols >= lo) & (hop_cols < hi)).all()), hop
        want = degree[node_ids[lo:hi]]
        if fanout >= 0:
            want = want.clamp(max=fanout)
        assert torch.equal(torch.bincount(hop_cols - lo, minlength=hi - lo), want), hop


@pytest.mark.parametrize("weighted", [False, True])
def test_disjoint_trees_never_share_nodes(mode, index_dtype, weighted):
    graph = random_graph(num_nodes=120, num_edges=1500, seed=4, dtype=index_dtype)
    seeds = torch.tensor([3, 3, 17, 40, 3, 99])  # repeated seeds grow separate trees
    (indptr, indices, eid), dev = place(graph, mode)
    kwargs = {}
    torch.manual_seed(4)
    if weighted:
        kwargs["edge_weight"] = place_extra(torch.rand(graph.indices.numel()) + 0.1, mode)
    out = qv.ops.neighbor_sample(indptr, indices, seeds.to(dev), [5, 3, 2], edge_ids=eid,
                                 disjoint=True, **kwargs)
    node_ids, batch, rows, cols, eids, nph, eph = (t.cpu() for t in out)
    assert torch.equal(node_ids[:6], seeds) and torch.equal(batch[:6], torch.arange(6))
    assert torch.equal(batch[rows], batch[cols])  # edges stay inside their tree
    for tree in range(6):
        members = node_ids[batch == tree]
        assert members.unique().numel() == members.numel()
    assert torch.equal(graph.row[eids], node_ids[cols])
    assert torch.equal(graph.col[eids], node_ids[rows])
    # tree of a repeated seed is sampled on its own: same structure as a one-seed call
    assert int(eph.sum()) == rows.numel() and int(nph.sum()) == node_ids.numel()
    # Every node of every tree takes min(fanout, degree) edges (the sums above hold for a
    # sampler that keeps one edge a node), each edge once.
    assert_each_node_takes_its_fanout(graph.indptr, node_ids, cols, nph, eph, [5, 3, 2])
    pairs = torch.stack([cols, eids])
    assert pairs.unique(dim=1).size(1) == pairs.size(1)
    # The three trees of seed 3 (degree 13 > 5) draw apart: not one tree copied.
    assert graph.degree(3) > 5
    trees = [sorted(eids[batch[cols] == tree].tolist()) for tree in (0, 1, 4)]
    assert not trees[0] == trees[1] == trees[2]


def test_not_disjoint_matches_sample_subgraph_layout(mode):
    from test_sample_subgraph import check_subgraph
    graph = random_graph(num_nodes=100, num_edges=900, seed=8)
    (indptr, indices, eid), dev = place(graph, mode)
    seeds = torch.tensor([1, 5, 9, 5], device=dev)
    torch.manual_seed(12)
    out = qv.ops.neighbor_sample(indptr, indices, seeds, [4, 2], edge_ids=eid)
    assert out[1].numel() == 0
    node_ids, rows, cols = out[0].cpu(), out[2].cpu(), out[3].cpu()
    assert torch.equal(node_ids[:4], seeds.cpu())
    rest = node_ids[4:]
    assert rest.unique().numel() == rest.numel()
    assert torch.equal(graph.row[out[4].cpu()], node_ids[cols])
    assert torch.equal(graph.col[out[4].cpu()], node_ids[rows])
    # Every property of sample_subgraph's layout, per-node counts min(fanout, degree) and
    # the numbering by first appearance included, on the graph itself.
    layout = out[:1] + out[2:]
    check_subgraph(graph, seeds, [4, 2], False, layout)
    # And the very sample sample_subgraph draws from the same random state.
    torch.manual_seed(12)
    same = qv.ops.sample_subgraph(indptr, indices, seeds, [4, 2], False, eid)
    assert all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(layout, same))


# ---- bad input ----

def bad_call(mode, **overrides):
    indptr, indices = star_graph(5)
    dev = device_of(mode)
    args = dict(indptr=place_extra(indptr, mode), indices=place_extra(indices, mode),
                seeds=torch.zeros(3, dtype=torch.long, device=dev), fanouts=[2])
    args.update(overrides)
    return qv.ops.neighbor_sample(**args)


@pytest.mark.parametrize("overrides,error,match", [
    (dict(edge_weight=torch.ones(4)), ValueError, r"edge_weight must hold one value per CSR edge \(5\)"),
    (dict(edge_weight=torch.ones(5, dtype=torch.float64)), TypeError, "edge_weight must be torch.float32"),
    (dict(edge_time=torch.arange(5), seed_time=torch.zeros(2, dtype=torch.long), disjoint=True),
     ValueError, r"seed_time must hold one time per seed \(3\)"),
    (dict(edge_time=torch.arange(5), seed_time=torch.zeros(3, dtype=torch.long)),
     ValueError, "needs disjoint=True"),
    (dict(edge_time=torch.arange(5)), ValueError, "got only edge_time"),
    (dict(edge_time=torch.arange(5), seed_time=torch.zeros(3, dtype=torch.long), disjoint=True,
          temporal_strategy="latest"), ValueError, "'uniform' or 'last', got 'latest'"),
    (dict(edge_time=torch.arange(5), seed_time=torch.zeros(3, dtype=torch.long), disjoint=True,
          temporal_strategy="last", replace=True), ValueError, "cannot sample with replacement"),
    (dict(temporal_strategy="last"), ValueError, "'last' needs edge_time"),
    (dict(fanouts=[-2]), ValueError, r"fanouts\[0\] must be -1"),
    (dict(seeds=torch.tensor([0, 9])), IndexError, r"seeds\[1\] = 9 is out of range"),
])
def test_bad_input_is_named(mode, overrides, error, match):
    dev = device_of(mode)
    overrides = dict(overrides)  # the parameters are shared by every mode
    for name in ("edge_weight", "edge_time"):
        if name in overrides:
            overrides[name] = place_extra(overrides[name], mode)
    for name in ("seed_time", "seeds"):
        if name in overrides:
            overrides[name] = overrides[name].to(dev)
    with pytest.raises(error, match=match):
        bad_call(mode, **overrides)


def test_disjoint_seed_out_of_range(mode):
    dev = device_of(mode)
    with pytest.raises(IndexError, match=r"seeds\[1\] = 9 is out of range"):
        bad_call(mode, seeds=torch.tensor([0, 9], device=dev), disjoint=True)


# ---- the op's contracts ----

def test_opcheck(mode):
    if mode == "UVA":
        pytest.skip("opcheck copies inputs into pageable memory; the GPU-mode run checks "
                    "the same kernel and fake")
    graph, indices, eid, times = temporal_graph(5, num_nodes=60, num_edges=400)
    dev = device_of(mode)
    indptr, indices, eid, times = (t.to(dev) for t in (graph.indptr, indices, eid, times))
    weights = (torch.rand(indices.numel()) + 0.5).to(dev)
    seeds = torch.tensor([0, 7, 59, 7], device=dev)
    seed_time = torch.tensor([50, 10, 99, 70], device=dev)
    cases = [
        (indptr, indices, seeds, [3, 2], False, eid, weights),
        (indptr, indices, seeds, [3, 2], True, None, weights),
        (indptr, indices, seeds, [3, 2], False, eid, None, times, seed_time, False, "last", True),
        (indptr, indices, seeds, [3, -1], False, eid, weights, times, seed_time, True, "uniform",
         True),
        (indptr, indices, seeds[:0], [3], False, None, None, None, None, False, "uniform", True),
    ]
    for args in cases:
        torch.library.opcheck(torch.ops.quiver.neighbor_sample.default, args)


def test_scriptable_and_seeded(mode):
    scripted = torch.jit.script(qv.ops.neighbor_sample)
    graph = random_graph(num_nodes=80, num_edges=600, seed=9)
    (indptr, indices, eid), dev = place(graph, mode)
    weights = place_extra(torch.rand(graph.indices.numel()) + 0.1, mode)
    seeds = torch.arange(10, device=dev)
    torch.manual_seed(3)
    first = scripted(indptr, indices, seeds, [3, 3], False, eid, weights, None, None, False,
                     "uniform", True, None)
    torch.manual_seed(3)
    again = qv.ops.neighbor_sample(indptr, indices, seeds, [3, 3], edge_ids=eid,
                                   edge_weight=weights, disjoint=True)
    for a, b in zip(first, again):
        assert torch.equal(a.cpu(), b.cpu())


class TemporalSampler(torch.nn.Module):
    """A module that samples temporal trees and sums its nodes' features: what an exported
    serving model would hold."""

    def __init__(self, indptr, indices, times, x):
        super().__init__()
        self.register_buffer("indptr", indptr)
        self.register_buffer("indices", indices)
        self.register_buffer("times", times)
        self.register_buffer("x", x)

    def forward(self, seeds, seed_time):
        node_ids, batch, rows, cols, eids, _, _ = torch.ops.quiver.neighbor_sample(
            self.indptr, self.indices, seeds, [-1], False, None, None, self.times, seed_time,
            False, "last", True)
        return torch.zeros(seeds.numel(), self.x.size(1)).index_add_(0, batch, self.x[node_ids])


def test_torch_export_traces_neighbor_sample():
    graph, indices, eid, times = temporal_graph(6, num_nodes=40, num_edges=300)
    model = TemporalSampler(graph.indptr, indices, times, torch.randn(40, 3))
    seeds, seed_time = torch.tensor([0, 39, 5]), torch.tensor([10, 90, 50])
    count = torch.export.Dim("count", min=1, max=1 << 20)
    program = torch.export.export(model, (seeds, seed_time), strict=False,
                                  dynamic_shapes=({0: count}, {0: count}))
    assert any("neighbor_sample" in str(node.target) for node in program.graph.nodes)
    other = (torch.tensor([3, 4, 7, 8]), torch.tensor([99, 0, 30, 60]))
    assert torch.allclose(program.module()(*other), model(*other))


# A sampler object's repeated CUDA calls of one shape are captured as a CUDA graph and
# replayed, as for sample_subgraph; each replay reads its own seeds and seed times.

@pytest.mark.parametrize("rules", ["weighted", "temporal", "last", "disjoint"])
def test_replayed_batches_equal_calls_run_as_usual(mode, rules):
    """On the CPU too: the sampler object gives the op's batches."""
    graph, indices, eid, times = temporal_graph(11, num_nodes=400, num_edges=5000)
    dev = device_of(mode)
    indptr, indices, eid, times = (place_extra(t, mode) for t in (graph.indptr, indices, eid,
                                                                   times))
    weights = place_extra(torch.rand(indices.numel()) + 0.1, mode)
    kwargs = {"weighted": dict(edge_weight=weights),
              "temporal": dict(edge_time=times, disjoint=True),
              "last": dict(edge_time=times, disjoint=True, temporal_strategy="last"),
              "disjoint": dict(disjoint=True)}[rules]
    gen = torch.Generator().manual_seed(5)
    batches = [(torch.randint(0, 400, (48,), generator=gen).to(dev),
                torch.randint(0, 100, (48,), generator=gen).to(dev)) for _ in range(5)]

    def calls(capture):
        sampling = torch.Generator(dev).manual_seed(9)
        times = [seed_time if "edge_time" in kwargs else None for _, seed_time in batches]
        if capture is None:  # the op
            return [qv.ops.neighbor_sample(indptr, indices, seeds, [6, 4], edge_ids=eid,
                                           seed_time=t, generator=sampling, **kwargs)
                    for (seeds, _), t in zip(batches, times)]
        sampler = subgraph_sampler(indptr, indices, eid, [6, 4], capture=capture, **kwargs)
        return [sampler.neighbor_sample(seeds, t, sampling)
                for (seeds, _), t in zip(batches, times)]

    usual, replayed = calls(None), calls(True)
    assert all(torch.equal(x, y) for a, b in zip(usual, calls(False)) for x, y in zip(a, b))
    for k, (a, b) in enumerate(zip(usual, replayed)):
        for x, y in zip(a, b):
            assert torch.equal(x, y), (rules, k)


def test_check_row_tables_checks_what_the_ops_trust():
    """The ops read sums, times and a row's relation slices only where their draws land:
    a zero or negative weight behind a cumsum was never drawn rather than refused, an
    unsorted row lost edges, and rows with relations out of order sampled other relations'
    edges, all silently (found by a probe). check_row_tables checks such tables once."""
    indptr = torch.tensor([0, 4, 4, 7])
    weight = torch.tensor([1.0, 2.0, 3.0, 4.0, 1.0, 1.0, 1.0])
    sums = qv.ops.row_cumsum(indptr, weight)
    time = torch.tensor([1, 2, 2, 9, 0, 5, 6])
    qv.ops.check_row_tables(indptr, edge_time=time, edge_weight=weight, edge_weight_cumsum=sums)
    qv.ops.check_row_tables(indptr)  # nothing to check but the offsets
    zero = weight.clone()
    zero[1] = 0.0
    with pytest.raises(ValueError, match=r"edge_weight\[1\] = 0.0: every weight must be finite"):
        qv.ops.check_row_tables(indptr, edge_weight=zero,
                                edge_weight_cumsum=zero.double().cumsum(0))
    skewed = sums.clone()
    skewed[3] = 100.0
    with pytest.raises(ValueError, match=r"edge_weight_cumsum\[3\] = 100.0 is not the prefix "
                                         r"sum of row 0's weights there \(10.0"):
        qv.ops.check_row_tables(indptr, edge_weight=weight, edge_weight_cumsum=skewed)
    # A step below the tolerance that does not grow (found by a review).
    tiny = torch.tensor([1.0, 1e-9, 1e-9, 1.0, 1.0, 1.0, 1.0])
    flat_sums = qv.ops.row_cumsum(indptr, tiny).clone()
    flat_sums[2] = flat_sums[1] - 1e-12
    with pytest.raises(ValueError, match=r"edge_weight_cumsum\[2\] = .* is not the prefix sum"):
        qv.ops.check_row_tables(indptr, edge_weight=tiny, edge_weight_cumsum=flat_sums)
    with pytest.raises(ValueError, match="checked against edge_weight: give both"):
        qv.ops.check_row_tables(indptr, edge_weight_cumsum=sums)
    unsorted = torch.tensor([1, 5, 2, 9, 0, 5, 6])
    with pytest.raises(ValueError, match=r"edge_time falls within row 0 at CSR position 2 "
                                         r"\(5 then 2\)"):
        qv.ops.check_row_tables(indptr, edge_time=unsorted)
    indices = torch.tensor([1, 2, 0, 1, 0, 1, 2])
    _, _, sorted_time = qv.ops.sort_rows_by_time(indptr, indices, edge_time=unsorted)
    qv.ops.check_row_tables(indptr, edge_time=sorted_time)  # what the builder gives passes
    with pytest.raises(ValueError, match=r"edge_time must hold one entry per CSR edge \(7\)"):
        qv.ops.check_row_tables(indptr, edge_time=time[:5])
    # Relations: one node type, relation 0 owns edge ids [0, 2), relation 1 [2, 4).
    hetero_indptr = torch.tensor([0, 4, 4, 4])
    in_order = torch.tensor([0, 1, 2, 3])
    qv.ops.check_row_tables(hetero_indptr, in_order, [0, 2, 4],
                            edge_time=torch.tensor([5, 6, 1, 2]),  # sorted per relation slice
                            edge_weight=torch.tensor([1.0, 2.0, 3.0, 4.0]),
                            edge_weight_cumsum=torch.tensor([1.0, 3.0, 3.0, 7.0],
                                                            dtype=torch.double))
    with pytest.raises(ValueError, match=r"row 0's edges are not in ascending relation order: "
                                         r"CSR position 2 holds an edge of relation 0 after "
                                         r"one of relation 1"):
        qv.ops.check_row_tables(hetero_indptr, torch.tensor([2, 3, 0, 1]), [0, 2, 4])
    with pytest.raises(ValueError, match=r"edge_ids\[1\] = 4 is outside the relations' edge ids"):
        qv.ops.check_row_tables(hetero_indptr, torch.tensor([0, 4, 2, 3]), [0, 2, 4])
    for offsets in ([0, 5, 3, 4], [], [0]):
        with pytest.raises(ValueError, match="relation_edge_offsets must be non-decreasing"):
            qv.ops.check_row_tables(hetero_indptr, in_order, offsets)
    with pytest.raises(ValueError, match="relation_edge_offsets needs edge_ids"):
        qv.ops.check_row_tables(hetero_indptr, None, [0, 2, 4])
    from torch_quiver_ops.hetero import HeteroCSRTopo
    gen = torch.Generator().manual_seed(3)
    built = HeteroCSRTopo({("a", "to", "b"): torch.randint(0, 20, (2, 300), generator=gen),
                           ("b", "to", "b"): torch.randint(0, 20, (2, 300), generator=gen),
                           ("a", "by", "b"): torch.randint(0, 20, (2, 300), generator=gen)},
                          {"a": 20, "b": 20})
    qv.ops.check_row_tables(built.indptr, built.eid, built.relation_edge_offsets)


def test_a_strided_edge_ids_is_named_as_such_and_negative_row_counts_refused():
    """A strided edge_ids had been told its dtype and shape were wrong ("must be a contiguous
    1-D int64 tensor, got Long of shape [5]"); check_permutation took -1 rows (a probe)."""
    indptr, indices = torch.tensor([0, 2, 5]), torch.tensor([1, 0, 0, 1, 1])
    with pytest.raises(RuntimeError, match="edge_ids must be contiguous: pass it through"):
        qv.ops.sample_neighbors(indptr, indices, torch.tensor([0]), 1,
                                edge_ids=torch.arange(10)[::2])
    with pytest.raises(ValueError, match=r"num_rows must be >= 0 \(the rows order lists\), "
                                         r"got -1"):
        qv.ops.check_permutation(torch.tensor([0]), -1)
