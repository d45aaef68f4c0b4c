"""torch_quiver_ops.hotness: degree order, presampled order, and the permutation checks."""
import pytest
import torch

import torch_quiver_ops as qv
from conftest import HAS_CUDA
from torch_quiver_ops.hotness import check_hot_order, check_positions, degree_order, positions_of
from torch_quiver_ops.synthetic import synthetic_graph


def test_degree_order_and_positions():
    degree = torch.tensor([3, 9, 0, 9, 1])
    order = degree_order(degree)
    assert order.tolist() == [1, 3, 0, 4, 2]  # ties keep id order
    positions = positions_of(order)
    assert positions.dtype == torch.int32
    assert torch.equal(positions[order], torch.arange(5, dtype=torch.int32))


def test_degree_order_refuses_what_is_no_degree_vector():
    """A 2-D tensor had given a 2-D "order", and a NaN degree sorted first (a probe)."""
    with pytest.raises(ValueError, match=r"degree must be a 1-D tensor .* got shape \(2, 2\)"):
        degree_order(torch.eye(2))
    with pytest.raises(TypeError, match="degree must be a 1-D tensor .* got list"):
        degree_order([1, 2])
    with pytest.raises(ValueError, match=r"degree\[1\] = nan: every degree must be finite"):
        degree_order(torch.tensor([1.0, float("nan"), 3.0]))
    assert degree_order(torch.tensor([1.0, 3.0, 3.0])).tolist() == [1, 2, 0]


def test_check_hot_order_rejects_what_is_not_a_permutation():
    assert check_hot_order(torch.tensor([2, 0, 1], dtype=torch.int32), 3).dtype == torch.int64
    with pytest.raises(ValueError, match="hot_order must list each of the 10 rows once, got 9"):
        check_hot_order(torch.arange(9), 10)
    with pytest.raises(ValueError, match="not a permutation: row 9 is missing"):
        check_hot_order(torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 8]), 10)
    with pytest.raises(IndexError, match="hot_order holds id 10"):
        check_hot_order(torch.arange(1, 11), 10)
    with pytest.raises(TypeError, match="hot_order must be a 1-D tensor of int32/int64"):
        check_hot_order(torch.arange(10.0), 10)


def test_positions_of_refuses_what_is_not_a_permutation():
    """A duplicate left the missing id's slot as uninitialised memory, and a -1 wrapped to
    the last id, passing for a permutation (a probe)."""
    assert positions_of([2, 0, 1]).tolist() == [1, 2, 0]
    with pytest.raises(ValueError, match="order is not a permutation: row 1 is missing"):
        positions_of(torch.tensor([0, 0, 2, 3]))
    with pytest.raises(IndexError, match="order holds id -1"):
        positions_of(torch.tensor([1, -1, 0, 2]))
    with pytest.raises(TypeError, match="order must be a 1-D tensor of int32/int64 ids"):
        positions_of(torch.tensor([True, False, True]))
    with pytest.raises(TypeError, match="positions are a meta tensor"):
        check_positions(torch.tensor([1, 0], device="meta"), 2)


def test_check_positions_names_the_source():
    assert check_positions(torch.tensor([1, 0]), 2) is not None
    with pytest.raises(ValueError, match="dir/positions.bin is not a permutation of the 3 rows"):
        check_positions(torch.tensor([0, 0, 1]), 3, "dir/positions.bin")
    with pytest.raises(ValueError) as raised:  # the name and "not a permutation" said once
        check_positions(torch.tensor([0, 0, 1]), 3, "dir/positions.bin")
    assert str(raised.value).count("not a permutation") == 1, raised.value
    assert "row 2 is missing" in str(raised.value)


def test_presampled_order_beats_degree_on_sampled_batches():
    graph = synthetic_graph("tiny", seed=5)
    topo = qv.CSRTopo(graph.edge_index)
    device = "cuda" if HAS_CUDA else "cpu"
    sampler = qv.GraphSageSampler(topo, [10, 5], device=device,
                                  mode="GPU" if HAS_CUDA else "CPU")
    train = graph.train_idx
    torch.manual_seed(11)
    hot = qv.presample_hot_order(sampler, train, batch_size=64,
                                 generator=torch.Generator().manual_seed(1))
    assert torch.equal(torch.sort(hot).values, torch.arange(topo.node_count))
    # Replays the same batches (the generator's shuffle, then its sampling generator) and
    # counts: hotter rows were read more often, and equally often read rows go by degree.
    given = torch.Generator().manual_seed(1)
    shuffled = train[torch.randperm(train.numel(), generator=given)]
    draw = int(torch.empty((), dtype=torch.int64).random_(generator=given))
    sampling = torch.Generator(sampler.device).manual_seed(draw)
    counts = torch.zeros(topo.node_count, dtype=torch.long)
    replayed = []
    for batch in shuffled.split(64):
        replayed.append(sampler.sample_subgraph(batch, sampling)[0].cpu())
        counts[replayed[-1]] += 1
    assert counts.sum() > 0 and (counts == 0).any()
    ranked = counts[hot]
    assert bool((ranked[:-1] >= ranked[1:]).all())
    degree = topo.degree[hot]
    ties = ranked[:-1] == ranked[1:]
    assert bool((degree[:-1][ties] >= degree[1:][ties]).all())
    # Its cache serves the batches it was drawn from at least as well as a degree-ordered
    # cache (other draws of a tiny graph's batches can go either way by a percent).
    x = graph.x
    cache = x.size(0) // 5 * x[0].nbytes
    batches = replayed
    by_access = qv.Feature(device_cache_size=cache).from_cpu_tensor(x, hot_order=hot)
    by_degree = qv.Feature(device_cache_size=cache, csr_topo=topo).from_cpu_tensor(x)
    for n_id in batches:
        assert torch.equal(by_access[n_id].cpu(), x[n_id])
    if HAS_CUDA:
        # Rows read from the cache over all of them (the order's count, summed over its
        # cached rows: the most it can be for that many rows).
        access_hits = sum(by_access.hit_rate(b) * b.numel() for b in batches)
        degree_hits = sum(by_degree.hit_rate(b) * b.numel() for b in batches)
        assert access_hits >= degree_hits - 1e-6 and degree_hits > 0


def test_presample_rejects_empty_seeds():
    topo = qv.CSRTopo(torch.tensor([[0, 1], [1, 0]]))
    sampler = qv.GraphSageSampler(topo, [2], mode="CPU")
    with pytest.raises(ValueError, match="non-empty 1-D"):
        qv.presample_hot_order(sampler, torch.tensor([], dtype=torch.long))


@pytest.mark.parametrize("option,value", [("batch_size", 0), ("batch_size", -3),
                                          ("num_batches", -1), ("batch_size", 2.5)])
def test_presample_options_are_checked(option, value):
    topo = qv.CSRTopo(torch.tensor([[0, 1], [1, 0]]))
    sampler = qv.GraphSageSampler(topo, [2], mode="CPU")
    with pytest.raises(ValueError, match=f"{option} must be"):
        qv.presample_hot_order(sampler, torch.tensor([0, 1]), **{option: value})


def test_presample_names_a_bad_generator_and_seeds_and_takes_numpy_counts():
    """From a probe: generator=3 failed in torch's randperm, seeds=None as torch's "Could not
    infer dtype", and a numpy batch size was refused (the loaders take one)."""
    import numpy as np
    topo = qv.CSRTopo(torch.tensor([[0, 1], [1, 0]]))
    sampler = qv.GraphSageSampler(topo, [2], mode="CPU")
    with pytest.raises(TypeError, match="generator must be a torch.Generator or None, got 3"):
        qv.presample_hot_order(sampler, torch.tensor([0, 1]), generator=3)
    with pytest.raises(TypeError, match="seeds must be integer ids"):
        qv.presample_hot_order(sampler, None)
    with pytest.raises(ValueError, match="batch_size must be an int >= 1, got True"):
        qv.presample_hot_order(sampler, torch.tensor([0, 1]), batch_size=True)
    with pytest.raises(TypeError, match="seeds are a meta tensor"):
        qv.presample_hot_order(sampler, torch.empty(2, dtype=torch.long, device="meta"))
    for presample in (qv.presample_hot_order, qv.presample_topology_order):
        with pytest.raises(TypeError, match="sampler must be a GraphSageSampler, got NoneType"):
            presample(None, torch.tensor([0]))
    order = qv.presample_hot_order(sampler, torch.tensor([0, 1]), batch_size=np.int64(1),
                                   num_batches=np.int32(2))
    assert sorted(order.tolist()) == [0, 1]


def test_one_generator_gives_one_order_whatever_else_draws():
    topo = qv.CSRTopo(synthetic_graph("tiny", seed=3).edge_index)
    sampler = qv.GraphSageSampler(topo, [5, 3], device="cpu", mode="CPU")
    seeds = torch.arange(0, 2000, 3)
    orders = []
    for noise in range(2):
        torch.manual_seed(noise)  # the global generator differs; the given one does not
        orders.append(qv.presample_hot_order(sampler, seeds, 64, 5,
                                             generator=torch.Generator().manual_seed(1)))
    assert torch.equal(orders[0], orders[1])


def test_presampling_takes_the_seeds_sampleloader_takes():
    """From a probe: a mask of one bool per node and uint8 ids, both taken by SampleLoader,
    were refused here."""
    topo = qv.CSRTopo(synthetic_graph("tiny", seed=3).edge_index)
    sampler = qv.GraphSageSampler(topo, [5, 3], device="cpu", mode="CPU")
    ids = torch.arange(0, 200, 3)
    mask = torch.zeros(topo.node_count, dtype=torch.bool)
    mask[ids] = True

    def order(seeds):
        return qv.presample_hot_order(sampler, seeds, 16, 3,
                                      generator=torch.Generator().manual_seed(1))

    expected = order(ids)
    assert torch.equal(order(mask), expected)
    assert torch.equal(order(ids.to(torch.uint8)), expected)


def test_presampled_topology_order_serves_more_sampled_edges_than_degree():
    """A cache of 20% of the lists' bytes chosen by presampling serves more of the edges that
    fresh batches (not the presampled ones) read than one chosen by degree."""
    from torch_quiver_ops.hotness import presample_topology_order
    graph = synthetic_graph("small", seed=2, features=False, num_nodes=40_000)
    topo = qv.CSRTopo(graph.edge_index)
    sampler = qv.GraphSageSampler(topo, [15, 10, 5], device="cpu", mode="CPU")
    order = presample_topology_order(sampler, graph.train_idx, batch_size=256, num_batches=20,
                                     generator=torch.Generator().manual_seed(0))
    assert torch.equal(torch.sort(order).values, torch.arange(topo.node_count))
    read = torch.zeros(topo.node_count)
    gen = torch.Generator().manual_seed(99)
    for _ in range(20):
        batch = graph.train_idx[torch.randint(graph.train_idx.numel(), (256,), generator=gen)]
        node_ids, _, cols = sampler.sample_subgraph(batch)[:3]
        read.index_add_(0, node_ids[cols], torch.ones(cols.numel()))

    def served(hot):  # share of read edges whose list is within 20% of the lists' entries
        fits = torch.cumsum(topo.degree[hot], 0) <= 0.2 * topo.edge_count
        return float(read[hot[fits]].sum() / read.sum())

    by_degree, presampled = served(degree_order(topo.degree)), served(order)
    assert presampled > by_degree + 0.15, (presampled, by_degree)


def test_presampling_names_a_bad_seed_by_its_position():
    topo = qv.CSRTopo(torch.tensor([[0, 1, 2], [1, 2, 0]]))
    sampler = qv.GraphSageSampler(topo, [2], device="cpu", mode="CPU")
    with pytest.raises(IndexError, match=r"seeds\[1\] = -1"):
        qv.hotness.presample_hot_order(sampler, torch.tensor([0, -1]))
