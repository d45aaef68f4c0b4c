"""quiver::sample_neighbors against the graph itself (real neighbors, counts, no
duplicates without replacement) and chi-square tests of uniformity, on every placement."""
import math

import pytest
import torch
from scipy.stats import chisquare

import torch_quiver_ops as qv
from reference import place, random_graph
from stats import (P_VALUE_FLOOR, assert_halves_hypergeometric, assert_uniform, star_graph,
                   subset_counts)


def sample_inputs(mode):
    """The op's cases on one placement, degenerate ones included: ``(graph, cases)`` with
    cases ``(name, args)`` in the op's argument order."""
    graph = random_graph(num_nodes=60, num_edges=400, seed=2)
    (indptr, indices, eid), device = place(graph, mode)
    seeds = torch.tensor([0, 7, 59, 7], device=device)  # a duplicate; node 59 has no edges
    narrow = place(random_graph(num_nodes=60, num_edges=400, seed=2, dtype=torch.int32), mode)[0]
    cases = [
        ("fanout 3 with edge ids", (indptr, indices, seeds, 3, False, eid)),
        ("all neighbors (-1), int32 seeds", (indptr, indices, seeds.int(), -1, False, None)),
        ("with replacement", (indptr, indices, seeds, 2, True, None)),
        ("empty batch", (indptr, indices, seeds[:0], 3, False, None)),
        ("fanout 0", (indptr, indices, seeds, 0, False, eid)),
        ("zero-degree seed", (indptr, indices, seeds[2:3], 4, False, None)),
        ("int32 indices", (narrow[0], narrow[1], seeds, 5, False, narrow[2])),
    ]
    return graph, cases


def expected_count(degree, fanout, replace):
    if fanout < 0:
        return degree
    if degree == 0:
        return 0
    return fanout if replace else min(fanout, degree)


def check_against_graph(graph, seeds, fanout, replace, out, edge_ids_given=True):
    """Counts, real neighbors and (without replacement) no repeats, checked on the graph."""
    counts, neighbors, edge_ids = (t.cpu() for t in out)
    seeds = seeds.cpu().long()
    want = [expected_count(graph.degree(s), fanout, replace) for s in seeds.tolist()]
    assert counts.tolist() == want
    assert neighbors.numel() == sum(want) == edge_ids.numel()
    owner = torch.repeat_interleave(seeds, counts)
    if edge_ids_given:  # edge ids are input positions: the edge really runs seed -> neighbor
        assert torch.equal(graph.row[edge_ids], owner)
        assert torch.equal(graph.col[edge_ids], neighbors)
    else:  # CSR positions inside the seed's row
        assert torch.all(edge_ids >= graph.indptr[owner])
        assert torch.all(edge_ids < graph.indptr[owner + 1])
        assert torch.equal(graph.indices[edge_ids].long(), neighbors)
    if not replace:
        for part in edge_ids.split(counts.tolist()):
            assert part.unique().numel() == part.numel()


def assert_draws_independent(picks: torch.Tensor, degree: int):
    """Rows of draws with replacement from range(degree): if the draws are independent, each
    draw minus the one before (mod degree) is uniform, and so is the last minus the first.
    Per-neighbor counts miss draws that copy one another (a last draw that repeats the
    first leaves every row's difference 0)."""
    assert_uniform(torch.bincount(((picks[:, 1:] - picks[:, :-1]) % degree).flatten(),
                                  minlength=degree))
    assert_uniform(torch.bincount((picks[:, -1] - picks[:, 0]) % degree, minlength=degree))


def assert_last_draw_repeats_the_first_by_chance(graph, seeds, out):
    """With replacement on a graph of mixed degrees: a row's last draw is the same edge as its
    first with probability 1 / degree, so the rows where it is number about the sum of those
    (a Poisson binomial: chi-square against a binomial's variance errs on passing)."""
    counts, _, edge_ids = (t.cpu() for t in out)
    ends = counts.cumsum(0)
    several = counts >= 2
    first, last = edge_ids[(ends - counts)[several]], edge_ids[ends[several] - 1]
    degree = torch.tensor([graph.degree(s) for s in seeds.cpu().tolist()],
                          dtype=torch.double)[several]
    repeats = int((first == last).sum())
    expected = float((1 / degree).sum())
    assert expected >= 20, "too few rows for a chi-square test"
    rows = int(several.sum())
    p = chisquare([repeats, rows - repeats], [expected, rows - expected]).pvalue
    assert p > P_VALUE_FLOOR, f"{repeats} rows end on their first draw, {expected:.1f} expected"


def test_sample_inputs_against_graph(mode):
    graph, cases = sample_inputs(mode)
    for name, args in cases:
        out = qv.ops.sample_neighbors(*args)
        for t in out:
            assert t.device.type == args[2].device.type and t.dtype == torch.long, name
        check_against_graph(graph, args[2], args[3], args[4], out, args[5] is not None)


def test_opcheck(mode):
    if mode == "UVA":
        pytest.skip("opcheck copies inputs into pageable memory; the GPU-mode run checks "
                    "the same kernel and fake")
    for name, args in sample_inputs(mode)[1]:
        torch.library.opcheck(torch.ops.quiver.sample_neighbors.default, args)


def pick_seeds(graph, n=200, seed=0):
    gen = torch.Generator().manual_seed(seed)
    seeds = torch.randint(graph.num_nodes, (n,), generator=gen)
    return torch.cat([seeds, seeds[:10], torch.tensor([graph.num_nodes - 1])])  # dups, isolated


@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("fanout", [0, 1, 5, 25, -1])
def test_real_neighbors_counts_and_no_duplicates(mode, index_dtype, replace, fanout):
    graph = random_graph(dtype=index_dtype, seed=fanout + 7)
    seeds = pick_seeds(graph)
    (indptr, indices, eid), device = place(graph, mode)
    out = qv.ops.sample_neighbors(indptr, indices, seeds.to(device), fanout, replace, eid)
    for t in out:
        assert t.device.type == device.type and t.dtype == torch.long
    check_against_graph(graph, seeds, fanout, replace, out)
    if replace and fanout >= 2:
        assert_last_draw_repeats_the_first_by_chance(graph, seeds, out)


def test_positions_without_edge_ids(mode):
    graph = random_graph()
    seeds = pick_seeds(graph)
    (indptr, indices, _), device = place(graph, mode)
    out = qv.ops.sample_neighbors(indptr, indices, seeds.to(device), 4)
    check_against_graph(graph, seeds, 4, False, out, edge_ids_given=False)


def test_own_generator_reproduces_and_is_uniform(mode):
    indptr, indices = star_graph(30)
    (indptr, indices), device = place_pair(indptr, indices, mode)
    seeds = torch.zeros(1000, dtype=torch.long, device=device)
    gen = torch.Generator(device).manual_seed(3)
    counts, neighbors, _ = qv.ops.sample_neighbors(indptr, indices, seeds, 10, True, None, gen)
    gen.manual_seed(3)
    again = qv.ops.sample_neighbors(indptr, indices, seeds, 10, True, generator=gen)[1]
    assert torch.equal(neighbors, again)
    assert_uniform(torch.bincount(neighbors.cpu() - 1, minlength=30))
    assert_draws_independent(neighbors.cpu().view(1000, 10) - 1, 30)


@pytest.mark.parametrize("degree,fanout", [(20, 5), (200, 3), (7, 6), (7, 3), (300, 100)])
def test_without_replacement_is_uniform(mode, degree, fanout):
    torch.manual_seed(1234)
    indptr, indices = star_graph(degree)
    (indptr, indices), device = place_pair(indptr, indices, mode)
    trials = max(2000, 40 * degree // fanout)
    seeds = torch.zeros(trials, dtype=torch.long, device=device)
    counts, neighbors, _ = qv.ops.sample_neighbors(indptr, indices, seeds, fanout)
    assert torch.all(counts == fanout)
    picks = neighbors.cpu().view(trials, fanout) - 1
    ordered = picks.sort(dim=1).values
    assert bool((ordered[:, 1:] != ordered[:, :-1]).all()), "a row holds a neighbor twice"
    assert_uniform(torch.bincount(picks.flatten(), minlength=degree))
    # Every k-subset equally likely, not only every neighbor (a random window of
    # consecutive neighbors is uniform per neighbor): counted where the subsets are few,
    # through how many picks fall in each half of the row otherwise.
    if math.comb(degree, fanout) <= 50:
        assert_uniform(subset_counts(picks, degree, fanout))
    else:
        assert_halves_hypergeometric(picks, degree)


def test_without_replacement_subsets_are_uniform(mode):
    torch.manual_seed(99)
    indptr, indices = star_graph(6)
    (indptr, indices), device = place_pair(indptr, indices, mode)
    trials = 3000
    _, neighbors, _ = qv.ops.sample_neighbors(
        indptr, indices, torch.zeros(trials, dtype=torch.long, device=device), 2)
    assert_uniform(subset_counts(neighbors.cpu().view(trials, 2) - 1, 6, 2))


def test_with_replacement_is_uniform(mode):
    torch.manual_seed(7)
    indptr, indices = star_graph(30)
    (indptr, indices), device = place_pair(indptr, indices, mode)
    seeds = torch.zeros(1000, dtype=torch.long, device=device)
    counts, neighbors, _ = qv.ops.sample_neighbors(indptr, indices, seeds, 10, True)
    assert torch.all(counts == 10)
    picks = neighbors.cpu() - 1
    assert_uniform(torch.bincount(picks, minlength=30))
    assert any(row.unique().numel() < 10 for row in picks.view(1000, 10))  # repeats happen
    assert_draws_independent(picks.view(1000, 10), 30)  # and only by chance


def place_pair(indptr, indices, mode):
    if mode == "GPU":
        return (indptr.cuda(), indices.cuda()), torch.device("cuda")
    if mode == "UVA":
        return (indptr.pin_memory(), indices.pin_memory()), torch.device("cuda")
    return (indptr, indices), torch.device("cpu")


def test_manual_seed_reproduces_and_calls_differ(mode):
    graph = random_graph(seed=3)
    seeds = pick_seeds(graph)
    (indptr, indices, eid), device = place(graph, mode)
    seeds = seeds.to(device)
    torch.manual_seed(5)
    first = qv.ops.sample_neighbors(indptr, indices, seeds, 3)
    second = qv.ops.sample_neighbors(indptr, indices, seeds, 3)
    torch.manual_seed(5)
    again = qv.ops.sample_neighbors(indptr, indices, seeds, 3)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not torch.equal(first[1], second[1])


def test_bad_input(mode):
    graph = random_graph(num_nodes=50, num_edges=400)
    (indptr, indices, eid), device = place(graph, mode)
    seeds = torch.tensor([1, 2, 3], device=device)
    op = qv.ops.sample_neighbors
    with pytest.raises(IndexError, match=r"seeds\[1\] = 50 is out of range \[0, 50\)"):
        op(indptr, indices, torch.tensor([0, 50], device=device), 2)
    with pytest.raises(IndexError, match=r"seeds\[0\] = -3"):
        op(indptr, indices, torch.tensor([-3], device=device), 2)
    with pytest.raises(ValueError, match="fanout must be -1 .* got -2"):
        op(indptr, indices, seeds, -2)
    with pytest.raises(TypeError, match="seeds must hold int32 or int64 ids, got torch.float32"):
        op(indptr, indices, seeds.float(), 2)
    with pytest.raises(TypeError, match="indptr must be int64, got torch.int32"):
        op(indptr.int(), indices, seeds, 2)
    with pytest.raises(ValueError, match="edge_ids has 3 entries but indices has 400"):
        op(indptr, indices, seeds, 2, False, eid[:3])
    with pytest.raises(ValueError, match="indptr and indices disagree"):
        op(indptr, indices[:-5], seeds, 2)
    with pytest.raises(ValueError, match="seeds must be a 1-D tensor"):
        op(indptr, indices, seeds.view(3, 1), 2)


def test_corrupt_row_is_reported_not_read(mode):
    graph = random_graph(num_nodes=50, num_edges=400)
    graph.indptr[10] = 10_000  # row 9 and row 10 now point past the index array
    (indptr, indices, _), device = place(graph, mode)
    with pytest.raises(ValueError, match="indptr and indices disagree at node 9"):
        qv.ops.sample_neighbors(indptr, indices, torch.tensor([3, 9], device=device), 2)


# ---- limits and lifetimes (review findings 1, 2, 8) ----

def test_huge_fanouts_raise_instead_of_wrapping(mode):
    graph = random_graph(num_nodes=50, num_edges=400)
    (indptr, indices, _), device = place(graph, mode)
    seeds = torch.tensor([0, 2, 4, 6], device=device)
    with pytest.raises(ValueError, match="over the limit"):
        qv.ops.sample_neighbors(indptr, indices, seeds, 2**62, True)
    with pytest.raises(ValueError, match="over the limit"):  # 4 seeds x 2^31 picks
        qv.ops.sample_neighbors(indptr, indices, seeds, 2**31, True)
    counts, neighbors, _ = qv.ops.sample_neighbors(indptr, indices, seeds, 2**62, False)
    assert counts.cpu().tolist() == [graph.degree(s) for s in (0, 2, 4, 6)]


@pytest.mark.timeout(120)
def test_large_fanout_without_replacement_is_fast_and_distinct(mode):
    # Floyd's membership test must not scan every earlier pick: 50k picks of 100k
    # neighbors would take minutes at O(k^2) in one GPU lane.
    torch.manual_seed(4)
    indptr, indices = star_graph(100_000)
    (indptr, indices), device = place_pair(indptr, indices, mode)
    seeds = torch.zeros(3, dtype=torch.long, device=device)
    counts, neighbors, _ = qv.ops.sample_neighbors(indptr, indices, seeds, 50_000)
    assert counts.tolist() == [50_000] * 3
    for row in neighbors.cpu().view(3, 50_000):
        assert row.unique().numel() == 50_000 and int(row.min()) >= 1
    # still uniform: each neighbor is picked with probability 1/2
    torch.manual_seed(5)
    indptr, indices = star_graph(80)
    (indptr, indices), device = place_pair(indptr, indices, mode)
    _, neighbors, _ = qv.ops.sample_neighbors(
        indptr, indices, torch.zeros(600, dtype=torch.long, device=device), 40)
    assert_uniform(torch.bincount(neighbors.cpu() - 1, minlength=80))
    assert_halves_hypergeometric(neighbors.cpu().view(600, 40) - 1, 80)  # whole subsets too


@pytest.mark.parametrize("fanout", [33, 40, 70])
def test_many_picks_without_replacement_are_uniform_subsets(mode, fanout):
    """Rows of more than 32 picks (on the GPU the lanes draw positions together, and past
    half the row the positions left out): every pick distinct and real, each neighbor equally
    likely, whole subsets too."""
    torch.manual_seed(6)
    indptr, indices = star_graph(80)
    (indptr, indices), device = place_pair(indptr, indices, mode)
    trials = 800
    seeds = torch.zeros(trials, dtype=torch.long, device=device)
    counts, neighbors, _ = qv.ops.sample_neighbors(indptr, indices, seeds, fanout)
    assert counts.tolist() == [fanout] * trials
    picks = neighbors.cpu().view(trials, fanout) - 1
    assert int(picks.min()) >= 0 and int(picks.max()) < 80
    assert all(row.unique().numel() == fanout for row in picks)
    assert_uniform(torch.bincount(picks.flatten(), minlength=80))
    assert_halves_hypergeometric(picks, 80)


def test_pinned_temporaries_outlive_the_kernel(mode):
    if mode != "UVA":
        pytest.skip("only UVA reads pinned host memory after the op returns")
    # A temporary pinned copy goes back to torch's pinned cache when the call returns;
    # the op must keep it until its kernel has read it, or the next pin_memory() of the
    # same size overwrites it mid-read.
    gen = torch.Generator().manual_seed(0)
    num_nodes, degree = 200_000, 50
    indptr = torch.arange(0, (num_nodes + 1) * degree, degree)
    indices = torch.randint(num_nodes, (num_nodes * degree,), generator=gen)
    indptr_gpu = indptr.cuda()
    seeds = torch.randint(num_nodes, (num_nodes,), generator=gen).cuda()
    poison = torch.full_like(indices, -7)
    for _ in range(5):
        counts, neighbors, _ = qv.ops.sample_neighbors(indptr_gpu, indices.pin_memory(), seeds, 25)
        junk = poison.pin_memory()  # reuses a freed block of the same size if one is free
        assert bool((neighbors >= 0).all()), "the kernel read memory handed out again"
        del junk
