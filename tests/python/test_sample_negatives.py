"""quiver::sample_negatives: uniform over the non-neighbors of each source (chi-square),
true edges excluded, PyG's collision rate without exclusion, bad input named."""
import pytest
import torch
from scipy.stats import chisquare

import torch_quiver_ops as qv
from reference import place, random_graph
from stats import P_VALUE_FLOOR


def sources_of(graph):
    """{v: set of u with u -> v}: the CSR rows list each node's sources."""
    return {v: set(graph.neighbors(v).tolist()) for v in range(graph.num_nodes)}


def test_negatives_are_uniform_over_non_neighbors(mode):
    graph = random_graph(num_nodes=30, num_edges=200, seed=3)
    (indptr, indices, _), dev = place(graph, mode)
    src = torch.full((3000,), 4, device=dev)
    out = qv.ops.sample_negatives(indptr, indices, src, 2).cpu()
    assert out.numel() == 6000
    allowed = [v for v in range(30) if 4 not in set(graph.neighbors(v).tolist())]
    assert set(out.tolist()) <= set(allowed)
    counts = torch.bincount(out, minlength=30)[allowed]
    p = chisquare(counts.double().numpy()).pvalue
    assert p > P_VALUE_FLOOR, counts.tolist()


def test_without_exclusion_collisions_follow_density(mode):
    graph = random_graph(num_nodes=40, num_edges=600, seed=4)
    (indptr, indices, _), dev = place(graph, mode)
    src = torch.randint(0, 40, (20000,), generator=torch.Generator().manual_seed(1)).to(dev)
    incoming = sources_of(graph)
    out = qv.ops.sample_negatives(indptr, indices, src, 1, exclude_edges=False).cpu()
    hits = sum(s in incoming[v] for s, v in zip(src.cpu().tolist(), out.tolist()))
    distinct_pairs = sum(len(s) for s in incoming.values())
    density = distinct_pairs / 40 ** 2
    assert abs(hits / 20000 - density) < 0.02
    # A dense graph (some sources reach most nodes): enough trials that none is left.
    excluded = qv.ops.sample_negatives(indptr, indices, src, 1, max_trials=200).cpu()
    assert not any(s in incoming[v] for s, v in zip(src.cpu().tolist(), excluded.tolist()))


def test_layout_and_seeding(mode, index_dtype):
    graph = random_graph(num_nodes=100, num_edges=800, seed=5, dtype=index_dtype)
    (indptr, indices, _), dev = place(graph, mode)
    src = torch.tensor([3, 7, 7, 99], device=dev, dtype=torch.int32)
    gen = torch.Generator(dev).manual_seed(2)
    a = qv.ops.sample_negatives(indptr, indices, src, 5, generator=gen)
    gen.manual_seed(2)
    b = qv.ops.sample_negatives(indptr, indices, src, 5, generator=gen)
    assert a.shape == (20,) and a.dtype == torch.long and a.device == src.device
    assert torch.equal(a, b)
    assert not torch.equal(a[5:10], a[10:15])  # each source draws its own
    assert qv.ops.sample_negatives(indptr, indices, src[:0], 5).numel() == 0


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(src=torch.tensor([0, 100])), IndexError, r"src\[1\] = 100 is out of range \[0, 100\)"),
    (dict(per_src=-1), ValueError, "per_src must be >= 0, got -1"),
    (dict(max_trials=0), ValueError, r"max_trials must be in \[1, 1000\], got 0"),
    (dict(src=torch.tensor([0.5])), TypeError, "src must hold int32 or int64 ids"),
])
def test_bad_input_is_named(mode, kwargs, error, match):
    graph = random_graph(num_nodes=100, num_edges=800, seed=5)
    (indptr, indices, _), dev = place(graph, mode)
    args = dict(indptr=indptr, indices=indices, src=torch.tensor([1, 2]), per_src=2)
    args.update(kwargs)
    args["src"] = args["src"].to(dev)
    with pytest.raises(error, match=match):
        qv.ops.sample_negatives(**args)


def test_opcheck(mode):
    if mode == "UVA":
        pytest.skip("opcheck copies inputs into pageable memory")
    graph = random_graph(num_nodes=60, num_edges=400, seed=6)
    (indptr, indices, _), dev = place(graph, mode)
    src = torch.tensor([0, 7, 59], device=dev)
    for args in [(indptr, indices, src, 3), (indptr, indices, src, 1, False),
                 (indptr, indices, src[:0], 2)]:
        torch.library.opcheck(torch.ops.quiver.sample_negatives.default, args)


def test_out_rows_reads_the_source_row(mode):
    """out_rows: (s, v) is an edge when v is in row s (a CSRTopo built from edge_index)."""
    graph = random_graph(num_nodes=30, num_edges=300, seed=8)
    (indptr, indices, _), dev = place(graph, mode)
    src = torch.arange(30).repeat(100).to(dev)
    out = qv.ops.sample_negatives(indptr, indices, src, 1, out_rows=True, max_trials=100).cpu()
    for s, v in zip(src.cpu().tolist(), out.tolist()):
        assert v not in set(graph.neighbors(s).tolist())


def test_draws_narrowed_to_a_node_range(mode):
    """dst_begin / dst_count: one node type of a graph with global ids; true edges still
    redrawn, the rest uniform over the range."""
    graph = random_graph(num_nodes=100, num_edges=1500, seed=9)
    (indptr, indices, _), dev = place(graph, mode)
    # The source with the most true edges into the range.
    source = int(torch.cat([graph.neighbors(v) for v in range(30, 50)]).mode().values)
    src = torch.full((4000,), source, device=dev)
    out = qv.ops.sample_negatives(indptr, indices, src, 1, max_trials=100, dst_begin=30,
                                  dst_count=20).cpu()
    allowed = [v for v in range(30, 50) if source not in set(graph.neighbors(v).tolist())]
    assert len(allowed) < 20  # the source has true edges inside the range
    assert set(out.tolist()) <= set(allowed)
    p = chisquare(torch.bincount(out, minlength=100)[allowed].double().numpy()).pvalue
    assert p > P_VALUE_FLOOR
    tail = qv.ops.sample_negatives(indptr, indices, src[:50], 2, dst_begin=90).cpu()
    assert bool(((tail >= 90) & (tail < 100)).all())


@pytest.mark.parametrize("kwargs,match", [
    (dict(dst_begin=-1), r"dst_begin = -1 is outside the graph's 100 nodes"),
    (dict(dst_begin=101), r"dst_begin = 101 is outside"),
    (dict(dst_begin=90, dst_count=11), r"dst_count = 11 from dst_begin = 90 reaches past"),
    (dict(dst_count=-2), r"dst_count = -2"),
    (dict(dst_begin=100), r"empty range of nodes \(dst_begin = 100"),
    (dict(dst_begin=5, dst_count=0), r"empty range of nodes"),
])
def test_bad_range_is_named(mode, kwargs, match):
    graph = random_graph(num_nodes=100, num_edges=800, seed=5)
    (indptr, indices, _), dev = place(graph, mode)
    with pytest.raises(ValueError, match=match):
        qv.ops.sample_negatives(indptr, indices, torch.tensor([1, 2], device=dev), 2, **kwargs)


def test_meta_beside_real_tensors_is_refused():
    """The Meta key wins the dispatch: the fake kernel handed back uninitialized ids."""
    indptr, indices = torch.tensor([0, 2, 3]), torch.tensor([1, 0, 1])
    with pytest.raises(ValueError, match="on the meta device"):
        torch.ops.quiver.sample_negatives(indptr.to("meta"), indices.to("meta"),
                                          torch.tensor([0, 1]), 3)


def test_max_trials_is_bounded():
    n = 4
    indptr, indices = torch.arange(0, n * n + 1, n), torch.arange(n).repeat(n)
    with pytest.raises(ValueError, match=r"max_trials must be in \[1, 1000\]"):
        qv.ops.sample_negatives(indptr, indices, torch.tensor([0]), 1, max_trials=2**62)


def test_zero_weight_edges_stay_true_edges_for_negatives():
    """Zero-weight edges leave the sampler's graph; negatives read the graph as given."""
    indptr = torch.tensor([0, 2, 4, 5, 7, 7])
    indices = torch.tensor([1, 2, 0, 3, 4, 0, 1])
    topo = qv.CSRTopo(indptr=indptr, indices=indices)
    weights = torch.ones(7)
    weights[0] = 0  # the edge 0 -> 1
    sampler = qv.GraphSageSampler(topo, [2], device="cpu", mode="CPU", weights=weights)
    drawn = sampler.sample_negatives(torch.zeros(3000, dtype=torch.long), 1)
    # A true edge stands after 8 true draws in a row: (2/5)^8 of draws, about 2 of 3000;
    # with the masked edge forgotten, node 1 came back a quarter of the time.
    assert int(((drawn == 1) | (drawn == 2)).sum()) <= 15
    counts = torch.bincount(drawn, minlength=5)  # the other nodes uniformly
    assert chisquare(counts[[0, 3, 4]].double().numpy()).pvalue > P_VALUE_FLOOR, counts


def test_negatives_past_host_memory_are_named():
    """The CPU op's allocation would be granted (overcommit) and the process die filling it;
    its refusal names src x per_src and this host's memory."""
    import os
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    per_src = memory // 8 + 1
    if per_src > (1 << 32) - 2:
        pytest.skip(f"this host's {memory >> 30} GiB hold the largest draw the op allows")
    indptr, indices = torch.tensor([0, 1, 1]), torch.tensor([1])
    with pytest.raises(ValueError, match=rf"the negatives \(src x per_src = 1 x {per_src}\) "
                                         r"would take \d+ MiB, more than this host's"):
        torch.ops.quiver.sample_negatives(indptr, indices, torch.tensor([0]), per_src)


def test_a_count_past_int64_is_named():
    # (the op's schema had said "Expected a value of type 'int' for argument 'per_src'")
    sampler = qv.GraphSageSampler(qv.CSRTopo(torch.tensor([[0, 1], [1, 0]])), [2], mode="CPU")
    with pytest.raises(ValueError, match="per_src must be an int >= 0, got 9223372036854775808"):
        sampler.sample_negatives(torch.tensor([0]), 2**63)
    with pytest.raises(ValueError, match="strict_time=True .* needs edge_time or node_time"):
        qv.GraphSageSampler(qv.CSRTopo(torch.tensor([[0, 1], [1, 0]])), [2], mode="CPU",
                            strict_time=True)
