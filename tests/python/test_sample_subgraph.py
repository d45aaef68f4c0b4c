"""quiver::sample_subgraph (multi-hop sampling fused with reindexing, PyG's layout) against
the graph and a dict-based reindexing reference, on every placement."""
import pytest
import torch

import torch_quiver_ops as qv
from reference import (Graph, csr_reference, place, random_graph, reindex_reference,
                       subgraph_sampler)
from stats import assert_halves_hypergeometric, assert_uniform, star_graph, subset_counts
from test_sample_neighbors import expected_count, place_pair


def sample_inputs(mode):
    """The op's cases on one placement, degenerate ones included: ``(graph, cases)`` with
    cases ``(name, args)`` in the op's argument order."""
    graph = random_graph(num_nodes=60, num_edges=400, seed=5)
    (indptr, indices, eid), device = place(graph, mode)
    seeds = torch.tensor([0, 7, 59, 7], device=device)  # a duplicate; node 59 has no edges
    narrow = place(random_graph(num_nodes=60, num_edges=400, seed=5, dtype=torch.int32), mode)[0]
    cases = [
        ("two hops with edge ids", (indptr, indices, seeds, [3, 2], False, eid)),
        ("all neighbors (-1), int32 seeds", (indptr, indices, seeds.int(), [-1], False, None)),
        ("with replacement", (indptr, indices, seeds, [2, 2], True, None)),
        ("empty batch", (indptr, indices, seeds[:0], [3], False, None)),
        ("zero-degree seed", (indptr, indices, seeds[2:3], [2, 2], False, None)),
        ("fanout 0 first", (indptr, indices, seeds, [0, 3], False, eid)),
        ("-1 after a finite hop", (indptr, indices, seeds, [2, -1], False, eid)),
        ("int32 indices", (narrow[0], narrow[1], seeds, [4, 3], False, narrow[2])),
    ]
    return graph, cases


def check_subgraph(graph, seeds, fanouts, replace, out, edge_ids_given=True):
    """Every property of the PyG layout, against the graph itself."""
    node_ids, rows, cols, eids, nodes_per_hop, edges_per_hop = (t.cpu() for t in out)
    assert nodes_per_hop.device.type == "cpu" and edges_per_hop.device.type == "cpu"
    assert nodes_per_hop.tolist()[0] == seeds.numel()
    assert torch.equal(node_ids[:seeds.numel()], seeds.cpu().long())
    assert node_ids.numel() == int(nodes_per_hop.sum())
    assert rows.numel() == cols.numel() == eids.numel() == int(edges_per_hop.sum())
    # beyond the seeds, every node appears once and is not a seed
    rest = node_ids[seeds.numel():]
    assert rest.unique().numel() == rest.numel()
    assert not torch.isin(rest, seeds.cpu().long()).any()

    cum_nodes = [0] + nodes_per_hop.cumsum(0).tolist()
    edge_begin = 0
    hop_neighbors = []
    for hop, fanout in enumerate(fanouts):
        edge_end = edge_begin + int(edges_per_hop[hop])
        r, c, e = rows[edge_begin:edge_end], cols[edge_begin:edge_end], eids[edge_begin:edge_end]
        # targets are exactly the nodes the previous hop added, each with its expected count
        frontier = torch.arange(cum_nodes[hop], cum_nodes[hop + 1])
        got = torch.bincount(c - cum_nodes[hop], minlength=frontier.numel())
        assert torch.all(c >= cum_nodes[hop]) and torch.all(c < cum_nodes[hop + 1])
        want = [expected_count(graph.degree(v), fanout, replace) for v in node_ids[frontier].tolist()]
        assert got.tolist() == want
        assert torch.all(r < cum_nodes[hop + 2])
        # reindexed ids map back to real edges target -> neighbor
        if edge_ids_given:
            assert torch.equal(graph.row[e], node_ids[c])
            assert torch.equal(graph.col[e], node_ids[r])
        else:  # CSR positions inside the target's row
            assert torch.all(e >= graph.indptr[node_ids[c]])
            assert torch.all(e < graph.indptr[node_ids[c] + 1])
            assert torch.equal(graph.indices[e].long(), node_ids[r])
        if not replace:
            key = c * graph.row.numel() + e
            assert key.unique().numel() == key.numel()
        hop_neighbors.append(node_ids[r])
        edge_begin = edge_end
    # numbering: seeds first, then new nodes in order of first appearance
    ref_nodes, ref_rows = reindex_reference(seeds.cpu().long(), hop_neighbors)
    assert torch.equal(ref_nodes, node_ids)
    assert torch.equal(ref_rows, rows)


def test_sample_inputs_against_graph(mode):
    graph, cases = sample_inputs(mode)
    for name, args in cases:
        out = qv.ops.sample_subgraph(*args)
        for t in out[:4]:
            assert t.device.type == args[2].device.type and t.dtype == torch.long, name
        check_subgraph(graph, args[2], args[3], args[4], out, args[5] is not None)


def test_opcheck(mode):
    if mode == "UVA":
        pytest.skip("opcheck copies inputs into pageable memory; the GPU-mode run checks "
                    "the same kernel and fake")
    for name, args in sample_inputs(mode)[1]:
        torch.library.opcheck(torch.ops.quiver.sample_subgraph.default, args)


# 15 hops: 61 output parts, joined in one launch on a GPU; 17 hops: 69, past its 64 (at::cat).
@pytest.mark.parametrize("fanouts", [[5], [4, 3], [15, 10, 5], [-1, 2], [3, 0, 2], [2] * 15,
                                     [1] * 17])
@pytest.mark.parametrize("replace", [False, True])
def test_layout_against_graph(mode, index_dtype, fanouts, replace):
    graph = random_graph(num_nodes=400, num_edges=4000, dtype=index_dtype, seed=len(fanouts))
    gen = torch.Generator().manual_seed(11)
    seeds = torch.randperm(graph.num_nodes, generator=gen)[:32]
    seeds = torch.cat([seeds, torch.tensor([graph.num_nodes - 1])])  # a zero-degree seed
    (indptr, indices, eid), device = place(graph, mode)
    out = qv.ops.sample_subgraph(indptr, indices, seeds.to(device), fanouts, replace, eid)
    for t in out[:4]:
        assert t.device.type == device.type and t.dtype == torch.long
    check_subgraph(graph, seeds, fanouts, replace, out)


def test_hubs_named_by_many_edges_are_numbered_at_their_first_mention(mode):
    """Every node links to the hubs 0 and 1 and to four others, so a hop names each hub by
    hundreds of edges at once, before and after the hub was numbered: the numbering still
    follows first appearance, as the reference's."""
    num_nodes = 500
    gen = torch.Generator().manual_seed(4)
    hubs = torch.tensor([0, 1]).repeat(num_nodes, 1)
    col = torch.cat([hubs, torch.randint(num_nodes, (num_nodes, 4), generator=gen)], 1).flatten()
    row = torch.arange(num_nodes).repeat_interleave(6)
    graph = Graph(*csr_reference(row, col, num_nodes), row, col)
    (indptr, indices, eid), device = place(graph, mode)
    for seeds in (torch.randperm(num_nodes - 2, generator=gen)[:64] + 2, torch.tensor([1, 9, 0])):
        for fanouts in ([6, 6, 6], [3, 3]):  # every neighbor taken, and a few
            out = qv.ops.sample_subgraph(indptr, indices, seeds.to(device), fanouts, False, eid)
            check_subgraph(graph, seeds, fanouts, False, out)


def test_duplicate_and_int32_seeds(mode):
    graph = random_graph(seed=4)
    seeds = torch.tensor([5, 9, 5, 0, 9], dtype=torch.int32)
    (indptr, indices, eid), device = place(graph, mode)
    out = qv.ops.sample_subgraph(indptr, indices, seeds.to(device), [3, 2], False, eid)
    check_subgraph(graph, seeds, [3, 2], False, out)


def test_zero_degree_seeds(mode):
    graph = random_graph(num_nodes=100, num_edges=500)
    isolated = torch.nonzero(graph.indptr[1:] == graph.indptr[:-1]).flatten()[:3]
    assert isolated.numel() == 3
    (indptr, indices, eid), device = place(graph, mode)
    node_ids, rows, cols, eids, nodes_per_hop, edges_per_hop = qv.ops.sample_subgraph(
        indptr, indices, isolated.to(device), [4, 4], False, eid)
    assert node_ids.cpu().tolist() == isolated.tolist()
    assert rows.numel() == cols.numel() == eids.numel() == 0
    assert nodes_per_hop.tolist() == [3, 0, 0] and edges_per_hop.tolist() == [0, 0]


def test_first_hop_is_uniform(mode):
    torch.manual_seed(321)
    indptr, indices = star_graph(25)
    (indptr, indices), device = place_pair(indptr, indices, mode)
    seeds = torch.zeros(2000, dtype=torch.long, device=device)
    node_ids, rows, cols, _, _, edges_per_hop = qv.ops.sample_subgraph(indptr, indices, seeds, [4])
    assert edges_per_hop.tolist() == [8000]
    picks = node_ids.cpu()[rows.cpu()] - 1
    assert_uniform(torch.bincount(picks, minlength=25))
    # Whole subsets, not only neighbors, are uniform (a random window of consecutive
    # neighbors is uniform per neighbor): per seed, the picks' halves of the row, and on
    # a star of 7 (35 subsets of 3) each subset.
    per_seed = picks[cols.cpu().argsort(stable=True)].view(2000, 4)
    ordered = per_seed.sort(dim=1).values
    assert bool((ordered[:, 1:] != ordered[:, :-1]).all()), "a seed took a neighbor twice"
    assert_halves_hypergeometric(per_seed, 25)
    (indptr, indices), device = place_pair(*star_graph(7), mode)
    node_ids, rows, cols, _, _, _ = qv.ops.sample_subgraph(indptr, indices, seeds, [3])
    picks = (node_ids.cpu()[rows.cpu()] - 1)[cols.cpu().argsort(stable=True)].view(2000, 3)
    assert_uniform(subset_counts(picks, 7, 3))


def star_of_stars():
    """Node 0's neighbors 1, 2, 3; node k's (k = 1..3) the three leaves 3k+1..3k+3."""
    indptr = torch.tensor([0, 3, 6, 9, 12] + [12] * 9)
    indices = torch.tensor([1, 2, 3] + list(range(4, 13)))
    return indptr, indices


def test_second_hop_draws_apart_from_the_first(mode):
    """Hop 1 picks one of node 0's three neighbors, hop 2 one of its three leaves: the nine
    (neighbor, leaf) pairs are equally likely. A second hop that reused the first hop's
    random stream would pick the leaf at the neighbor's offset every time."""
    torch.manual_seed(5)
    (indptr, indices), device = place_pair(*star_of_stars(), mode)
    seed = torch.zeros(1, dtype=torch.long, device=device)
    pairs = torch.zeros(9, dtype=torch.long)
    for _ in range(450):
        _, _, _, eids, _, edges_per_hop = qv.ops.sample_subgraph(indptr, indices, seed, [1, 1])
        assert edges_per_hop.tolist() == [1, 1]
        first, second = eids.cpu().tolist()  # CSR positions: 0..2, then 3 * (first + 1) + leaf
        pairs[3 * first + (second - 3 * (first + 1))] += 1
    assert_uniform(pairs)


def test_manual_seed_reproduces_and_calls_differ(mode):
    graph = random_graph(seed=8)
    (indptr, indices, eid), device = place(graph, mode)
    seeds = torch.arange(0, 200, 7, device=device)
    torch.manual_seed(42)
    first = qv.ops.sample_subgraph(indptr, indices, seeds, [5, 5], False, eid)
    second = qv.ops.sample_subgraph(indptr, indices, seeds, [5, 5], False, eid)
    torch.manual_seed(42)
    again = qv.ops.sample_subgraph(indptr, indices, seeds, [5, 5], False, eid)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not torch.equal(first[3], second[3])


def test_own_generator_reproduces_and_leaves_the_default_alone(mode):
    graph = random_graph(seed=8)
    (indptr, indices, eid), device = place(graph, mode)
    seeds = torch.arange(0, 200, 7, device=device)
    default_state = (torch.cuda.get_rng_state(device) if device.type == "cuda"
                     else torch.get_rng_state())
    gen = torch.Generator(device).manual_seed(5)
    first = qv.ops.sample_subgraph(indptr, indices, seeds, [5, 5], False, eid, gen)
    second = qv.ops.sample_subgraph(indptr, indices, seeds, [5, 5], False, eid, gen)
    gen.manual_seed(5)
    again = qv.ops.sample_subgraph(indptr, indices, seeds, [5, 5], False, eid, generator=gen)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not torch.equal(first[3], second[3])
    after = torch.cuda.get_rng_state(device) if device.type == "cuda" else torch.get_rng_state()
    assert torch.equal(default_state, after)
    check_subgraph(graph, seeds, [5, 5], False, first)


def test_generator_on_another_device_raises(mode):
    graph = random_graph(seed=8)
    (indptr, indices, eid), device = place(graph, mode)
    if device.type == "cuda":
        other = torch.Generator("cpu")
    elif torch.cuda.is_available():
        other = torch.Generator("cuda")
    else:
        pytest.skip("needs a CUDA device for a generator on another device type")
    with pytest.raises(RuntimeError, match="generator"):
        qv.ops.sample_subgraph(indptr, indices, torch.arange(3, device=device), [2], False, eid,
                               other)


def test_bad_input(mode):
    graph = random_graph(num_nodes=50, num_edges=400)
    (indptr, indices, eid), device = place(graph, mode)
    seeds = torch.tensor([1, 2, 3], device=device)
    op = qv.ops.sample_subgraph
    with pytest.raises(IndexError, match=r"seeds\[2\] = 77 is out of range \[0, 50\)"):
        op(indptr, indices, torch.tensor([0, 1, 77], device=device), [2])
    with pytest.raises(ValueError, match=r"fanouts\[1\] must be -1 .* got -5"):
        op(indptr, indices, seeds, [2, -5])
    with pytest.raises(ValueError, match="at least one hop"):
        op(indptr, indices, seeds, [])
    with pytest.raises(TypeError, match="indices must hold int32 or int64 ids, got torch.float32"):
        op(indptr, indices.float(), seeds, [2])
    with pytest.raises(ValueError, match="indptr and indices disagree"):
        op(indptr, indices[:-1], seeds, [2])
    with pytest.raises(ValueError, match="edge_ids has 399 entries"):
        op(indptr, indices, seeds, [2], False, eid[1:])


def test_corrupt_row_is_reported_not_read(mode):
    graph = random_graph(num_nodes=50, num_edges=400)
    graph.indptr[6] = -4
    (indptr, indices, _), device = place(graph, mode)
    with pytest.raises(ValueError, match="indptr and indices disagree at node"):
        qv.ops.sample_subgraph(indptr, indices, torch.tensor([5], device=device), [2])


# ---- limits: huge fanouts and huge graphs (review findings 1, 9, 10) ----

def test_huge_fanouts_raise_instead_of_wrapping(mode):
    graph = random_graph(num_nodes=50, num_edges=400)
    (indptr, indices, _), device = place(graph, mode)
    seeds = torch.arange(4, device=device)
    with pytest.raises(ValueError, match="over the limit"):
        qv.ops.sample_subgraph(indptr, indices, seeds, [2**62], True)
    with pytest.raises(ValueError, match="over the limit"):  # 4 seeds x 2^31 picks
        qv.ops.sample_subgraph(indptr, indices, seeds, [2**31], True)
    with pytest.raises(ValueError, match="over the limit"):
        qv.ops.sample_subgraph(indptr, indices, seeds, [3, 2**62], True)


def test_a_hop_larger_than_the_hosts_memory_raises_instead_of_being_killed():
    # A legal fanout with replacement whose hop alone would not fit in this host's memory:
    # the allocation would succeed (overcommit) and the process die filling it.
    import os
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    fanout = memory // 16 + 1  # sample_neighbors: 16 bytes an edge; sample_subgraph: 24
    if fanout > (1 << 32) - 2:
        pytest.skip(f"this host's {memory >> 30} GiB hold the largest hop the ops allow")
    graph = random_graph(num_nodes=50, num_edges=400)
    seeds = graph.indptr.diff().argmax().reshape(1)  # a node with neighbors
    with pytest.raises(ValueError, match=r"edges\) would take \d+ MiB, more than this host's"):
        qv.ops.sample_subgraph(graph.indptr, graph.indices, seeds, [fanout], True)
    with pytest.raises(ValueError, match=r"edges\) would take \d+ MiB, more than this host's"):
        qv.ops.sample_neighbors(graph.indptr, graph.indices, seeds, fanout, True)


@pytest.mark.parametrize("fanout", [10**9, 2**31 - 1, 2**62, 2**62 + 1])
def test_huge_finite_fanout_without_replacement_takes_every_neighbor(mode, fanout):
    graph = random_graph(num_nodes=200, num_edges=2000, seed=9)
    (indptr, indices, eid), device = place(graph, mode)
    seeds = torch.arange(8, device=device)
    out = qv.ops.sample_subgraph(indptr, indices, seeds, [fanout, 2], False, eid)
    check_subgraph(graph, seeds, [fanout, 2], False, out)
    assert int(out[5][0]) == sum(graph.degree(s) for s in range(8))


def test_all_neighbor_hop_sizes_the_table_by_the_batch_not_the_graph(mode):
    # 2M nodes, edges only among the first 1000: one seed's [-1] reaches few nodes, and
    # the reindexing table must not be sized (and cleared) for the whole graph.
    num_nodes = 2_000_000
    indptr = torch.cat([torch.zeros(1, dtype=torch.long),
                        torch.arange(1, num_nodes + 1).clamp(max=1000)])
    indices = torch.randint(1000, (1000,), generator=torch.Generator().manual_seed(0),
                            dtype=torch.int32)
    graph_bytes = 16 * num_nodes  # what a whole-graph table would take (and more)
    if mode == "CPU":
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            out = qv.ops.sample_subgraph(indptr, indices, torch.tensor([5]), [-1, 3])
        largest = max(e.cpu_memory_usage for e in prof.events())
    else:
        (indptr, indices), device = place_pair(indptr, indices, mode)
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        out = qv.ops.sample_subgraph(indptr, indices, torch.tensor([5], device=device), [-1, 3])
        largest = torch.cuda.max_memory_allocated() - before
    assert int(out[4][0]) == 1 and int(out[5][0]) == 1  # node 5 has one neighbor
    assert largest < graph_bytes // 100, f"{largest} bytes allocated for one seed"


def test_all_neighbor_hop_after_a_wide_hop_grows_the_table(mode):
    graph = random_graph(num_nodes=3000, num_edges=60_000, seed=12)
    (indptr, indices, eid), device = place(graph, mode)
    seeds = torch.arange(0, 3000, 97, device=device)
    for fanouts in ([2, -1], [-1, -1], [1, -1, 2]):
        out = qv.ops.sample_subgraph(indptr, indices, seeds, fanouts, False, eid)
        check_subgraph(graph, seeds, fanouts, False, out)


# ---- topology cache: the hottest lists in GPU memory, read instead of indices ----

def cache_for(graph, mode, share, order=None, eid_given=True):
    (indptr, indices, eid), device = place(graph, mode)
    order = order if order is not None else torch.randperm(graph.num_nodes,
                                                           generator=torch.Generator().manual_seed(3))
    budget = 4 * graph.num_nodes + int(share * indices.numel() * indices.element_size())
    cached = qv.topology.build_topology_cache(indptr, indices, order, budget, device,
                                         max_chunk_edges=97)  # many chunks
    return (indptr, indices, eid if eid_given else None), device, cached


@pytest.mark.parametrize("share", [0.0, 0.3, 1.0])
def test_build_topology_cache_copies_the_hottest_lists_within_the_budget(mode, index_dtype, share):
    graph = random_graph(num_nodes=300, num_edges=3000, dtype=index_dtype, seed=2)
    order = torch.argsort(graph.indptr[1:] - graph.indptr[:-1], descending=True, stable=True)
    (indptr, indices, _), device, (cached_indices, cached_starts) = cache_for(graph, mode, share,
                                                                             order)
    assert cached_indices.device.type == cached_starts.device.type == device.type
    assert cached_indices.dtype == index_dtype and cached_starts.dtype == torch.int32
    assert cached_indices.numel() <= share * graph.indices.numel()
    starts = cached_starts.cpu()
    hit = torch.nonzero(starts >= 0).flatten()
    # a prefix of the hot order, each list copied whole
    assert torch.equal(torch.sort(order[:hit.numel()]).values, hit)
    for v in hit.tolist():
        lo, hi = int(graph.indptr[v]), int(graph.indptr[v + 1])
        got = cached_indices.cpu()[starts[v]:starts[v] + hi - lo]
        assert torch.equal(got, graph.indices[lo:hi])
    if share == 1.0:
        assert hit.numel() == graph.num_nodes


def sample_with_cache(indptr, indices, seeds, fanouts, replace, eid, cache):
    """The op's batch through a sampler object holding a topology cache (an option of the
    object, not an argument of the op), each batch run as launched."""
    sampler = subgraph_sampler(indptr, indices, eid, fanouts, replace, tuple(cache),
                               capture=False)
    return sampler.sample_subgraph(seeds, None)


@pytest.mark.parametrize("fanouts,replace", [([15, 10, 5], False), ([4, 3], True), ([-1, 2], False),
                                             ([40], False)])
def test_cache_gives_the_same_samples(mode, index_dtype, fanouts, replace):
    """With a cache of any size a sampler's output is bit for bit the op's without one."""
    graph = random_graph(num_nodes=500, num_edges=8000, dtype=index_dtype, seed=9)
    seeds = torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(1))[:64]
    for share, eid_given, wide_starts in [(0.0, True, False), (0.25, True, False),
                                          (0.25, False, True), (1.0, False, False),
                                          (1.0, True, True)]:
        (indptr, indices, eid), device, cache = cache_for(graph, mode, share,
                                                          eid_given=eid_given)
        if wide_starts:  # int64 starts, as a cache of 2^31 entries or more has
            cache = (cache[0], cache[1].long())
        torch.manual_seed(5)
        plain = qv.ops.sample_subgraph(indptr, indices, seeds.to(device), fanouts, replace, eid)
        torch.manual_seed(5)
        cached = sample_with_cache(indptr, indices, seeds.to(device), fanouts, replace, eid,
                                   cache)
        for a, b in zip(plain, cached):
            assert torch.equal(a, b), (share, eid_given)
        check_subgraph(graph, seeds, fanouts, replace, cached, eid_given)


@pytest.mark.parametrize("fanouts,replace", [([5, 3], False), ([2, 2], True), ([40], False)])
def test_uva_rows_visited_in_list_order_give_the_same_samples(mode, index_dtype, fanouts,
                                                              replace):
    """UVA hops of 2^14 rows or more visit rows in the order of their lists' addresses
    (by default on lists of 2 GiB or more; a sampler's uva_row_order 1 always, 0 never):
    the samples are bit for bit the same."""
    if mode != "UVA":
        pytest.skip("rows are ordered only when the lists are in pinned host memory")
    graph = random_graph(num_nodes=40000, num_edges=400000, dtype=index_dtype, seed=4)
    seeds = torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(2))[:20000]
    (indptr, indices, eid), device, cache = cache_for(graph, mode, 0.3)
    for extra in [(None, None), cache]:  # with and without a topology cache
        outs = []
        for order in [0, 1]:
            sampler = subgraph_sampler(indptr, indices, eid, fanouts, replace, tuple(extra),
                                       capture=False)
            sampler.set_uva_row_order(order)
            torch.manual_seed(11)
            outs.append(sampler.sample_subgraph(seeds.to(device), None))
        for a, b in zip(*outs):
            assert torch.equal(a, b)
        check_subgraph(graph, seeds, fanouts, replace, outs[1])


def test_cache_input_is_checked(mode):
    graph = random_graph(num_nodes=50, num_edges=300, seed=4)
    (indptr, indices, eid), device, (cached_indices, cached_starts) = cache_for(graph, mode, 1.0)
    seeds = torch.arange(10, device=device)
    with pytest.raises(ValueError, match=r"cannot hold even the per-node starts of 50 nodes"):
        qv.topology.build_topology_cache(indptr, indices, torch.arange(50), 199, device)
    def sample(*cache):
        return sample_with_cache(indptr, indices, seeds, [3], False, None, cache)

    with pytest.raises(ValueError, match="needs both cached_indices and cached_starts"):
        sample(cached_indices, None)
    with pytest.raises(TypeError, match="cached_indices is torch.int32 but indices is torch.int64"):
        sample(cached_indices.int(), cached_starts)
    with pytest.raises(ValueError, match=r"one start per node \(50\)"):
        sample(cached_indices, cached_starts[:-1])
    with pytest.raises(TypeError, match="cached_starts must be int32 or int64"):
        sample(cached_indices, cached_starts.short())
    if device.type == "cuda":  # the GPU reads the cache: a corrupt one is reported, not read
        degree = int(graph.indptr[4] - graph.indptr[3])
        for corrupt in (cached_starts.clone(), cached_starts.long()):
            corrupt[3] = cached_indices.numel() - degree + 1
            with pytest.raises(ValueError,
                               match=r"cached_starts\[3\] = .* the topology cache is corrupt"):
                sample(cached_indices, corrupt)
        with pytest.raises(RuntimeError, match="must be in the memory of cuda"):
            sample(cached_indices.cpu(), cached_starts.cpu())
        out = sample(cached_indices, cached_starts)  # the GPU still works
        assert out[0].numel() >= 10


def test_sampler_topology_cache(mode):
    from torch_quiver_ops.synthetic import synthetic_graph
    topo = qv.CSRTopo(synthetic_graph("tiny", seed=1).edge_index)
    with pytest.raises(ValueError, match="hot_order is not a permutation"):
        qv.pyg.GraphSageSampler(topo, [5], mode=mode,
                                hot_order=torch.zeros(topo.node_count, dtype=torch.long))
    if mode != "UVA":
        with pytest.raises(ValueError, match="topology_cache is for UVA mode"):
            qv.pyg.GraphSageSampler(topo, [5, 5], mode=mode, topology_cache="20%")
        return
    plain = qv.pyg.GraphSageSampler(topo, [10, 5], mode="UVA")
    cached = qv.pyg.GraphSageSampler(topo, [10, 5], mode="UVA", topology_cache="20%")
    assert cached.topology_cache_bytes == int(0.2 * topo.indices.nbytes)
    # UVA by default on a GPU, or named in lower case: the cache is taken too.
    assert qv.pyg.GraphSageSampler(topo, [10, 5], topology_cache="20%").topology_cache_bytes
    assert qv.pyg.GraphSageSampler(topo, [10, 5], mode="uva",
                                   topology_cache="20%").topology_cache_bytes
    assert cached._cached_indices.is_cuda and 0 < cached._cached_indices.numel()
    seeds = torch.arange(0, 2000, 7)
    for seed in (0, 1):
        torch.manual_seed(seed)
        a = plain.sample_subgraph(seeds)
        torch.manual_seed(seed)
        b = cached.sample_subgraph(seeds)
        assert all(torch.equal(x, y) for x, y in zip(a, b))


# A sampler object's repeated CUDA calls of one shape are captured as a CUDA graph (the
# second call) and replayed (every later one); the op itself, and a sampler made with
# capture=False, run every call as launched.

def graph_cases(mode, index_dtype):
    graph = random_graph(num_nodes=500, num_edges=8000, dtype=index_dtype, seed=21)
    (indptr, indices, eid), device, cache = cache_for(graph, mode, 0.3)
    return graph, device, [
        ("three hops, edge ids", [15, 10, 5], False, (indptr, indices), (eid,)),
        ("with replacement, no edge ids", [4, 3], True, (indptr, indices), (None,)),
        ("large fanout (pick sets)", [40, 2], False, (indptr, indices), (eid,)),
        ("topology cache", [15, 10, 5], False, (indptr, indices), (eid, *cache)),
    ]


def calls_in_turn(graph_device_cases, seeds, through, calls=4):
    """Each case's `calls` batches: through the op ("op", which takes no topology cache: a
    cache changes no sample), or a sampler object that captures ("captured") or not
    ("launched")."""
    out = {}
    for name, fanouts, replace, csr, extra in graph_device_cases:
        gen = torch.Generator(seeds.device).manual_seed(7)
        if through == "op":
            out[name] = [qv.ops.sample_subgraph(*csr, seeds, fanouts, replace, extra[0], gen)
                         for _ in range(calls)]
            continue
        cached = tuple(extra[1:]) or (None, None)
        sampler = subgraph_sampler(*csr, extra[0], fanouts, replace, cached,
                                   capture=through == "captured")
        assert sampler.captures_batches() == (through == "captured")
        out[name] = [sampler.sample_subgraph(seeds, gen) for _ in range(calls)]
    return out


def graph_for_captures(mode, num_nodes, num_edges, seed):
    """A random graph and its CSR placed for `mode` (whose sampler objects capture batches
    as CUDA graphs); skips CPU mode, CUDA graphs being a GPU's."""
    if mode == "CPU":
        pytest.skip("CUDA graphs are a GPU's")
    graph = random_graph(num_nodes=num_nodes, num_edges=num_edges, seed=seed)
    return (graph, *place(graph, mode))


def test_replayed_batches_equal_calls_run_as_usual(mode, index_dtype):
    """On the CPU too: the sampler object gives the op's batches."""
    graph, device, cases = graph_cases(mode, index_dtype)
    seeds = torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(4))[:64]
    seeds = seeds.to(device)
    usual = calls_in_turn(cases, seeds, "op")
    launched = calls_in_turn(cases, seeds, "launched")
    replayed = calls_in_turn(cases, seeds, "captured")
    for name, fanouts, replace, _, extra in cases:
        for k, (a, b, c) in enumerate(zip(usual[name], replayed[name], launched[name])):
            for x, y, z in zip(a, b, c):
                assert torch.equal(x, y) and torch.equal(x, z), (name, k)
            check_subgraph(graph, seeds, fanouts, replace, b, extra[0] is not None)
        # successive calls draw fresh numbers, replayed or not
        assert not torch.equal(replayed[name][2][1], replayed[name][3][1])


def test_captures_leave_other_threads_streams_alone(mode):
    """A batch is captured on a stream of its own, never on one of PyTorch's pool streams:
    another thread whose current stream is a pool stream (torch.cuda.Stream() takes one;
    a serving runtime's samplers do too) keeps copying from pageable memory meanwhile. On a
    pool stream, its copies were refused during the capture ("Cannot copy between CPU and
    CUDA tensors during CUDA graph capture"), and its kernels would have been recorded."""
    import threading
    graph, (indptr, indices, eid), device = graph_for_captures(mode, 400, 6000, 23)
    sampler = subgraph_sampler(indptr, indices, eid, [4, 3])
    streams = [torch.cuda.Stream(device) for _ in range(40)]  # every pool stream, in turn
    pageable = torch.arange(4096)
    failures, done = [], threading.Event()

    def copier():
        while not done.is_set():
            for stream in streams:
                try:
                    with torch.cuda.stream(stream):
                        pageable.to(device, non_blocking=True)
                except RuntimeError as error:
                    failures.append(str(error))
                    return

    thread = threading.Thread(target=copier)
    thread.start()
    try:
        gen = torch.Generator(device).manual_seed(1)
        for size in range(8, 8 + 30):  # 30 shapes: captured at their second call, until
            # captures churn (ops/cuda/batch_graphs.h: kMaxCapturesLetGo)
            seeds = torch.arange(size, device=device)
            for _ in range(3):
                out = sampler.sample_subgraph(seeds, gen)
            check_subgraph(graph, seeds, [4, 3], False, out)
    finally:
        done.set()
        thread.join()
    torch.cuda.synchronize(device)
    assert not failures, failures[0]


def device_allocations(device):
    """The caching allocator's cudaMalloc calls on `device` so far (a capture's memory pool
    takes fresh ones)."""
    torch.cuda.synchronize(device)
    return torch.cuda.memory_stats(device).get("num_device_alloc", 0)


def test_shapes_that_keep_changing_stop_being_captured(mode):
    """A sampler whose batches keep changing size (a serving runtime's) captured shape after
    shape and let each go: every capture took fresh device memory, which came back only when
    an allocation failed and the allocator freed all it held (a device-wide stall). Past a
    few captures let go, new shapes run as launched; their samples stay right."""
    graph, (indptr, indices, eid), device = graph_for_captures(mode, 500, 8000, 24)
    sampler = subgraph_sampler(indptr, indices, eid, [4, 3])
    gen = torch.Generator(device).manual_seed(2)
    before = device_allocations(device)
    for size in range(5, 5 + 120):
        seeds = torch.arange(size, device=device)
        for _ in range(3):  # run, then captured (while captures do not churn), then replayed
            out = sampler.sample_subgraph(seeds, gen)
        if size % 17 == 0:
            check_subgraph(graph, seeds, [4, 3], False, out)
    allocations = device_allocations(device) - before
    # Each capture takes memory of its own (a pool): 120 shapes captured took 120 or more.
    assert allocations < 60, allocations


def test_shapes_that_take_turns_keep_being_captured(mode):
    """Four shapes taking turns (a loader's training and evaluation batches, say) evict one
    another from the three kept, but each replays many times first: such captures paid for
    themselves, so the sampler keeps capturing them and never freezes."""
    graph, (indptr, indices, eid), device = graph_for_captures(mode, 500, 8000, 25)
    sampler = subgraph_sampler(indptr, indices, eid, [4, 3])
    gen = torch.Generator(device).manual_seed(3)

    def rounds(count):
        for _ in range(count):
            for size in (40, 41, 42, 43):
                seeds = torch.arange(size, device=device)
                for _ in range(8):  # run, captured, then replayed 6 times
                    out = sampler.sample_subgraph(seeds, gen)
        return seeds, out

    rounds(6)  # past kMaxCapturesLetGo let-gos, had they counted
    before = device_allocations(device)
    seeds, out = rounds(3)
    # Still capturing: each recapture takes memory of its own.
    assert device_allocations(device) - before >= 4
    check_subgraph(graph, seeds, [4, 3], False, out)


def test_a_replayed_batch_reports_bad_seeds_then_samples_again(mode):
    graph, (indptr, indices, eid), device = graph_for_captures(mode, 300, 3000, 22)
    sampler = subgraph_sampler(indptr, indices, eid, [5, 3])
    seeds = torch.arange(0, 300, 10, device=device)
    gen = torch.Generator(device)
    for _ in range(3):  # run, captured, replayed
        sampler.sample_subgraph(seeds, gen)
    bad = seeds.clone()
    bad[4] = 300
    with pytest.raises(IndexError, match=r"seeds\[4\] = 300 is out of range \[0, 300\)"):
        sampler.sample_subgraph(bad, gen)
    gen.manual_seed(3)
    replayed = sampler.sample_subgraph(seeds, gen)
    gen.manual_seed(3)
    usual = qv.ops.sample_subgraph(indptr, indices, seeds, [5, 3], False, eid, gen)
    for a, b in zip(usual, replayed):
        assert torch.equal(a, b)


def test_seeds_from_the_host_give_the_batches_of_seeds_on_the_gpu(mode):
    """sample_subgraph_on takes seeds in host memory, carried to the GPU with the batch's
    bookkeeping: as launched, captured and replayed, and at another batch size, the samples
    are those of the same seeds copied to the GPU first; the outputs are on the GPU; bad
    seeds raise the usual errors, and the sampler samples again after."""
    graph, (indptr, indices, eid), device = graph_for_captures(mode, 300, 3000, 27)
    on_host = subgraph_sampler(indptr, indices, eid, [5, 3])
    on_gpu = subgraph_sampler(indptr, indices, eid, [5, 3])
    gen = torch.Generator(device)
    index = torch.cuda.current_device()
    batches = [torch.randperm(300, generator=torch.Generator().manual_seed(i))[:40]
               for i in range(4)] + [torch.arange(7, dtype=torch.int32)]
    for seeds in batches + batches:
        gen.manual_seed(9)
        got = on_host.sample_subgraph_on(seeds, index, gen)
        gen.manual_seed(9)
        want = on_gpu.sample_subgraph(seeds.to(device), gen)
        for a, b in zip(got, want):
            assert a.device == b.device and torch.equal(a, b)
        check_subgraph(graph, seeds, [5, 3], False, got)
    empty = on_host.sample_subgraph_on(torch.empty(0, dtype=torch.long), index, gen)
    assert all(t.numel() == 0 for t in empty[:4]) and empty[0].is_cuda
    bad = batches[0].clone()
    bad[4] = 300
    with pytest.raises(IndexError, match=r"seeds\[4\] = 300 is out of range \[0, 300\)"):
        on_host.sample_subgraph_on(bad, index, gen)
    with pytest.raises(TypeError, match="int32 or int64"):
        on_host.sample_subgraph_on(batches[0].float(), index, gen)
    for wrong in (-1, 255, torch.cuda.device_count()):
        with pytest.raises(ValueError, match=f"device must be a GPU index below .*, got {wrong}"):
            on_host.sample_subgraph_on(batches[0], wrong, gen)
    again = on_host.sample_subgraph_on(batches[1], index, gen)
    check_subgraph(graph, batches[1], [5, 3], False, again)


def test_replayed_outputs_are_the_callers_own_on_any_stream(mode):
    """A replay's outputs are copies: the next replay (here on another stream, with other
    seeds) leaves them as they were."""
    graph, (indptr, indices, eid), device = graph_for_captures(mode, 400, 6000, 23)
    sampler = subgraph_sampler(indptr, indices, eid, [6, 4])
    gen = torch.Generator(device).manual_seed(1)
    seeds = [torch.randperm(400, device=device)[:32] for _ in range(4)]
    outs = [sampler.sample_subgraph(s, gen) for s in seeds[:3]]
    kept = [[t.clone() for t in out] for out in outs]
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        last = sampler.sample_subgraph(seeds[3], gen)
    torch.cuda.current_stream(device).wait_stream(side)
    for out, copy in zip(outs, kept):
        for a, b in zip(out, copy):
            assert torch.equal(a, b)
    for s, out in zip(seeds, outs + [last]):
        check_subgraph(graph, s, [6, 4], False, out)


def test_threads_sampling_one_shape_at_once_get_their_own_batches(mode):
    """One thread replays a captured shape while another finds it busy and runs as usual:
    each gets what its own generator draws."""
    import threading
    graph, (indptr, indices, eid), device = graph_for_captures(mode, 400, 6000, 24)
    seeds = torch.arange(0, 400, 9, device=device)
    shared = subgraph_sampler(indptr, indices, eid, [5, 5])

    def run(seed, results, sampler=shared):
        gen = torch.Generator(device).manual_seed(seed)
        with torch.cuda.stream(torch.cuda.Stream(device)):
            for _ in range(20):
                out = sampler.sample_subgraph(seeds, gen)
                results.append([t.cpu() for t in out])

    got = {1: [], 2: []}
    threads = [threading.Thread(target=run, args=(s, got[s])) for s in got]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [len(got[s]) for s in got] == [20, 20]  # neither thread failed
    launched = subgraph_sampler(indptr, indices, eid, [5, 5], capture=False)
    for seed in got:
        want = []
        run(seed, want, launched)
        for a, b in zip(want, got[seed]):
            for x, y in zip(a, b):
                assert torch.equal(x, y)


def test_capturing_batches_leaves_other_threads_random_numbers_alone(mode):
    """While one thread captures batches, another draws from PyTorch's default CUDA
    generator (as a model beside a prefetching loader does): its numbers are the ones it
    draws with nobody sampling."""
    import threading
    graph, (indptr, indices, eid), device = graph_for_captures(mode, 400, 6000, 25)
    sampler = subgraph_sampler(indptr, indices, eid, [4, 3])
    done = threading.Event()
    failures = []

    def sample():
        try:
            gen = torch.Generator(device).manual_seed(0)
            with torch.cuda.stream(torch.cuda.Stream(device)):
                for size in range(20, 60):  # a new shape each time: 40 captures
                    seeds = torch.arange(size, device=device)
                    for _ in range(2):
                        sampler.sample_subgraph(seeds, gen)
        except BaseException as error:  # noqa: BLE001 - reported below
            failures.append(error)
        finally:
            done.set()

    torch.manual_seed(0)
    thread = threading.Thread(target=sample)
    thread.start()
    drawn = []
    while not done.is_set() or len(drawn) < 50:
        drawn.append(torch.rand(64, device=device))
    thread.join()
    assert not failures, failures
    torch.manual_seed(0)
    for got in drawn:
        assert torch.equal(got, torch.rand(64, device=device))


def test_a_shape_whose_first_call_failed_samples_as_usual_after(mode):
    """A first call that raised says nothing of its shape: an all-neighbor hop (which waits
    for sizes, so is never captured) then samples as usual call after call."""
    graph, (indptr, indices, eid), device = graph_for_captures(mode, 300, 3000, 26)
    seeds = torch.arange(0, 300, 15, device=device)
    bad = seeds.clone()
    bad[0] = -1
    outs = {}
    for capture in [True, False]:
        sampler = subgraph_sampler(indptr, indices, eid, [-1, 2], capture=capture)
        with pytest.raises(IndexError, match=r"seeds\[0\] = -1 is out of range"):
            sampler.sample_subgraph(bad, None)
        gen = torch.Generator(device).manual_seed(4)
        outs[capture] = [sampler.sample_subgraph(seeds, gen) for _ in range(3)]
    for a, b in zip(outs[True], outs[False]):
        for x, y in zip(a, b):
            assert torch.equal(x, y)
    check_subgraph(graph, seeds, [-1, 2], False, outs[True][2])
