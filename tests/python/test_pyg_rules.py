"""Weighted, temporal and disjoint sampling through the PyG loaders and GraphSageSampler:
the options reach the op, batches carry PyG's fields, and edge attributes stay exact."""
import pytest
import torch
from torch_geometric.data import Data

import torch_quiver_ops as qv
from conftest import MODES
from torch_quiver_ops.pyg import LinkNeighborLoader, NeighborLoader

N, E = 300, 3000


def temporal_data(seed=0):
    gen = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, N, (2, E), generator=gen)
    return Data(x=torch.randn(N, 8, generator=gen), edge_index=edge_index,
                edge_weight=torch.rand(E, generator=gen) + 0.05,
                edge_time=torch.randint(0, 100, (E,), generator=gen),
                node_time=torch.randint(0, 100, (N,), generator=gen),
                edge_attr=torch.randn(E, 4, generator=gen), num_nodes=N)


def where(mode):
    return dict(device="cpu" if mode == "CPU" else "cuda", mode=mode)


def check_edges_real(data, batch):
    """Every sampled edge is the input edge e_id names, and edge_attr is its row."""
    e_id = batch.e_id.cpu()
    src, dst = batch.n_id.cpu()[batch.edge_index.cpu()]
    assert torch.equal(data.edge_index[0, e_id], src) and torch.equal(data.edge_index[1, e_id], dst)
    assert torch.equal(batch.edge_attr.cpu(), data.edge_attr[e_id])


@pytest.mark.parametrize("strategy", ["uniform", "last"])
def test_temporal_node_loader_obeys_seed_times(mode, strategy):
    data = temporal_data()
    input_time = torch.randint(20, 100, (N,), generator=torch.Generator().manual_seed(1))
    loader = NeighborLoader(data, [6, 4], batch_size=32, time_attr="edge_time",
                            input_time=input_time, temporal_strategy=strategy, shuffle=True,
                            **where(mode))
    seen = full = 0
    for batch in loader:
        check_edges_real(data, batch)
        tree = batch.batch.cpu()
        assert torch.equal(tree[:batch.batch_size], torch.arange(batch.batch_size))
        seed_time = batch.seed_time.cpu()
        cols, e_id = batch.edge_index[1].cpu(), batch.e_id.cpu()
        assert bool((data.edge_time[e_id] <= seed_time[tree[cols]]).all())
        # (upper bounds alone pass a sampler that takes fewer or older edges) hop 0: each
        # seed gets min(6, its in-edges at or before its time), "last" the latest of them
        n_id = batch.n_id.cpu()
        for c in range(batch.batch_size):
            ok = (data.edge_index[1] == int(n_id[c])) & (data.edge_time <= int(seed_time[c]))
            eligible = data.edge_time[ok].sort(descending=True).values
            picked = data.edge_time[e_id[cols == c]]
            assert picked.numel() == min(6, eligible.numel())
            if strategy == "last" and picked.numel():
                assert int(picked.min()) >= int(eligible[picked.numel() - 1])
            full += eligible.numel() > 6
        seen += batch.batch_size
    assert seen == N and full > 50  # (121 seeds: enough that a fanout of 6 binds)


@pytest.mark.parametrize("neg", ["binary", "triplet"])
def test_node_time_link_negatives_exist_by_their_pair_time_and_are_no_edges(mode, neg):
    """A Data with node times: negatives are nodes there by their pair's time (as PyG's)
    and not true edges (these batches had gone to PyG's code, whose negatives were any
    pair: about half of them true edges in a graph of density 1/2; a probe)."""
    n = 40
    gen = torch.Generator().manual_seed(3)
    src = torch.arange(n).repeat_interleave(n // 2)
    dst = torch.cat([torch.randperm(n, generator=gen)[:n // 2] for _ in range(n)])
    edges = set(zip(src.tolist(), dst.tolist()))
    data = Data(x=torch.randn(n, 2), edge_index=torch.stack([src, dst]),
                ntime=torch.arange(n) // 2, num_nodes=n)  # nodes appear over times 0..19
    loader = LinkNeighborLoader(data, [2], batch_size=100, neg_sampling=neg,
                                time_attr="ntime", edge_label_time=torch.full((len(src),), 12),
                                **where(mode))
    pairs = []
    for batch in loader:
        n_id = batch.n_id.cpu()
        if neg == "binary":
            positives = batch.input_id.numel()
            negatives = n_id[batch.edge_label_index[:, positives:].cpu()]
        else:
            negatives = torch.stack([n_id[batch.src_index.cpu()],
                                     n_id[batch.dst_neg_index.cpu()].view(-1)])
        pairs += negatives.t().tolist()
    assert len(pairs) == len(src)
    drawn = [v for s, d in pairs for v in ((s, d) if neg == "binary" else (d,))]
    assert int(data.ntime[drawn].max()) <= 12
    true_edges = sum(tuple(pair) in edges for pair in pairs)
    assert true_edges < len(pairs) // 20, f"{true_edges} of {len(pairs)} negatives are edges"


def test_node_time_defaults_to_the_seeds_times(mode):
    data = temporal_data(1)
    loader = NeighborLoader(data, [5, 5], batch_size=50, time_attr="node_time", **where(mode))
    src_time = data.node_time[data.edge_index[0]]
    full = 0
    for batch in loader:
        n_id, tree = batch.n_id.cpu(), batch.batch.cpu()
        seed_time = data.node_time[n_id[:batch.batch_size]]
        rows, cols = batch.edge_index.cpu()
        # a neighbor's time is at or before its tree's seed time
        assert bool((data.node_time[n_id[rows]] <= seed_time[tree[cols]]).all())
        # hop 0: each seed gets min(5, its in-edges from nodes at or before its own time)
        for c in range(batch.batch_size):
            v = int(n_id[c])
            eligible = int(((data.edge_index[1] == v) & (src_time <= data.node_time[v])).sum())
            assert int((cols == c).sum()) == min(5, eligible), (v, eligible)
            full += eligible >= 5
    assert full > 50


def test_weighted_loader_prefers_heavy_edges(mode):
    # node 0 has 20 in-neighbors; one edge weighs 1000x the others
    edge_index = torch.stack([torch.arange(1, 21), torch.zeros(20, dtype=torch.long)])
    weight = torch.full((20,), 0.01)
    weight[7] = 10.0
    data = Data(x=torch.randn(21, 2), edge_index=edge_index, edge_weight=weight, num_nodes=21)
    loader = NeighborLoader(data, [1], input_nodes=torch.zeros(400, dtype=torch.long),
                            batch_size=400, weight_attr="edge_weight", disjoint=True,
                            **where(mode))
    batch = next(iter(loader))
    picked = data.edge_index[0, batch.e_id.cpu()]
    assert (picked == 8).float().mean() > 0.9  # p = 10 / 10.19 each


def test_disjoint_loader_keeps_trees_apart(mode):
    data = temporal_data(2)
    loader = NeighborLoader(data, [4, 3], batch_size=20, disjoint=True, **where(mode))
    batch = next(iter(loader))
    check_edges_real(data, batch)
    tree, n_id = batch.batch.cpu(), batch.n_id.cpu()
    rows, cols = batch.edge_index.cpu()
    assert torch.equal(tree[rows], tree[cols])
    assert torch.equal(tree[:batch.batch_size], torch.arange(batch.batch_size))  # seed i: tree i
    assert bool((tree < batch.batch_size).all())
    # Disjoint trees repeat nodes across trees, never within one.
    assert len(set(zip(tree.tolist(), n_id.tolist()))) == n_id.numel() > n_id.unique().numel()


def test_temporal_link_loader(mode):
    data = temporal_data(3)
    label_time = data.edge_time.clone()
    loader = LinkNeighborLoader(data, [5, 3], batch_size=64, time_attr="edge_time",
                                edge_label_time=label_time, neg_sampling="binary",
                                **where(mode))
    for i, batch in enumerate(loader):
        check_edges_real(data, batch)
        assert batch.edge_label_index.size(1) == 2 * batch.input_id.numel()
        # PyG's layout: batch[k] is the seed edge whose tree holds node k
        limit = label_time[batch.input_id.cpu()][batch.batch.cpu()]
        cols = batch.edge_index[1].cpu()
        assert bool((data.edge_time[batch.e_id.cpu()] <= limit[cols]).all())
        if i == 3:
            break


def test_graph_sage_sampler_with_weights_and_times(mode):
    data = temporal_data(4)
    topo = qv.CSRTopo(data.edge_index, num_nodes=N)
    sampler = qv.GraphSageSampler(topo, [5, 5], return_eid=True, weights=data.edge_weight,
                                  edge_time=data.edge_time, **where(mode))
    seeds = torch.arange(30)
    seed_time = torch.full((30,), 40)
    n_id, batch_size, adjs = sampler.sample(seeds, seed_time=seed_time)
    assert batch_size == 30
    for adj in adjs:
        assert bool((data.edge_time[adj.e_id.cpu()] <= 40).all())
    with pytest.raises(ValueError, match="needs seed_time"):
        sampler.sample(seeds)
    # and the weights reach the draws: node 0's 20 edges, all at time 10, one 1000x heavier
    edge_index = torch.stack([torch.zeros(20, dtype=torch.long), torch.arange(1, 21)])
    weight = torch.full((20,), 0.01)
    weight[7] = 10.0
    star = qv.GraphSageSampler(qv.CSRTopo(edge_index, num_nodes=21), [1], return_eid=True,
                               weights=weight, edge_time=torch.full((20,), 10), **where(mode))
    _, _, adjs = star.sample(torch.zeros(400, dtype=torch.long), seed_time=torch.full((400,), 40))
    e_id = adjs[0].e_id.cpu()
    assert e_id.numel() == 400 and (e_id == 7).float().mean() > 0.9  # p = 10 / 10.19 each


@pytest.mark.parametrize("kwargs,match", [
    (dict(weight_attr="node_time"), "weight_attr 'node_time' is not an edge attribute"),
    (dict(time_attr="nope"), "time_attr 'nope' is not an attribute"),
    (dict(input_time=torch.zeros(N, dtype=torch.long)), "input_time"),
])
def test_loader_options_are_checked(kwargs, match):
    with pytest.raises(ValueError, match=match):
        NeighborLoader(temporal_data(), [3], batch_size=8, device="cpu", **kwargs)


def test_seed_times_of_the_wrong_length_are_named():
    data = temporal_data()
    with pytest.raises(ValueError, match=r"input_time must be 1-D, one time per input node "
                                         r"\(4\), got shape \(2,\)"):
        NeighborLoader(data, [2], batch_size=4, device="cpu", input_nodes=torch.arange(4),
                       time_attr="edge_time", input_time=torch.tensor([1, 2]))
    with pytest.raises(ValueError, match=r"edge_label_time must be 1-D, one time per seed edge "
                                         r"\(2\), got shape \(1,\)"):
        LinkNeighborLoader(data, [2], batch_size=4, device="cpu", time_attr="edge_time",
                           edge_label_index=torch.tensor([[0, 1], [2, 3]]),
                           edge_label_time=torch.tensor([5]))
    # The right count in the wrong shape passed, then failed in a batch as seed_time.
    with pytest.raises(ValueError, match=r"edge_label_time must be 1-D, one time per seed edge "
                                         r"\(4\), got shape \(2, 2\)"):
        LinkNeighborLoader(data, [2], batch_size=4, device="cpu", time_attr="edge_time",
                           edge_label_index=torch.tensor([[0, 1, 2, 3], [2, 3, 0, 1]]),
                           edge_label_time=torch.tensor([[5, 6], [7, 8]]))


@pytest.mark.parametrize("amount, words", [
    (float("nan"), "neg_sampling's amount must be a finite number > 0, got nan"),
    (1e12, "draws 4,000,000,000,000 negatives a batch of 4: at least"),
])
def test_negative_amounts_no_batch_can_hold_are_named(amount, words):
    """A huge amount ran for a minute and ended in the allocator's error (a probe)."""
    with pytest.raises(ValueError, match=words):
        LinkNeighborLoader(temporal_data(), [2], batch_size=4, device="cpu",
                           edge_label_index=torch.tensor([[0, 1], [2, 3]]),
                           neg_sampling=dict(mode="binary", amount=amount))


def test_bad_weights_refused_at_construction():
    data = temporal_data()
    data.edge_weight[17] = -0.5
    with pytest.raises(ValueError, match=r"weights\[17\] = -0.5: every weight must be finite "
                                         r"and >= 0"):
        NeighborLoader(data, [3], batch_size=8, weight_attr="edge_weight", device="cpu")


@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("timed", [False, True])
def test_zero_weights_mask_edges(mode, replace, timed):
    """PyG documents weights as non-negative: an edge of weight 0 is never sampled (with
    or without replacement, with times too), a node whose edges all weigh 0 gets no
    neighbors, and e_id still names the Data's edges."""
    data = temporal_data(6)
    gen = torch.Generator().manual_seed(6)
    data.edge_weight[torch.rand(data.edge_weight.numel(), generator=gen) < 0.5] = 0.0
    masked_node = int(data.edge_index[1, 0])
    data.edge_weight[data.edge_index[1] == masked_node] = 0.0
    kwargs = dict(time_attr="edge_time", input_time=torch.full((N,), 10**6)) if timed else {}
    loader = NeighborLoader(data, [6, 4], batch_size=N, weight_attr="edge_weight",
                            replace=replace, return_eid=True, **kwargs, **where(mode))
    for _ in range(3):
        batch = next(iter(loader))
        e_id = batch.e_id.cpu()
        assert e_id.numel() > 0
        assert bool((data.edge_weight[e_id] > 0).all())
        ends = batch.n_id.cpu()[batch.edge_index.cpu()]
        assert torch.equal(ends, data.edge_index[:, e_id])
        if not timed:  # one tree over every node: the masked node's own row is empty
            assert not bool((ends[1] == masked_node).any())
    # torch-quiver's layout: a node's row holds its out-edges.
    data.edge_weight[data.edge_index[0] == masked_node] = 0.0
    sampler = qv.GraphSageSampler(qv.CSRTopo(data.edge_index, num_nodes=N), [8],
                                  return_eid=True, weights=data.edge_weight, replace=replace,
                                  **where(mode))
    _, _, adjs = sampler.sample(torch.tensor([masked_node]))
    assert adjs[0].e_id.numel() == 0


@pytest.mark.parametrize("neg", ["binary", "triplet"])
def test_link_negatives_are_never_true_edges(mode, neg):
    from torch_geometric.sampler import NegativeSampling
    data = temporal_data(5)
    true_edges = set(zip(*data.edge_index.tolist()))
    sampling = NegativeSampling(neg, amount=2)
    loader = LinkNeighborLoader(data, [3], batch_size=128, neg_sampling=sampling,
                                **where(mode))
    negatives = 0
    for batch in loader:
        n_id = batch.n_id.cpu()
        if neg == "binary":
            assert batch.edge_label_index.size(1) == 3 * batch.input_id.numel()
            label = batch.edge_label.cpu()
            pairs = n_id[batch.edge_label_index.cpu()[:, label == 0]]
        else:
            assert batch.dst_neg_index.shape == (batch.input_id.numel(), 2)
            src = n_id[batch.src_index.cpu()].repeat_interleave(2)
            pairs = torch.stack([src, n_id[batch.dst_neg_index.cpu().reshape(-1)]])
            # the positives are the seed edges themselves
            pos = torch.stack([n_id[batch.src_index.cpu()], n_id[batch.dst_pos_index.cpu()]])
            assert torch.equal(pos, data.edge_index[:, batch.input_id.cpu()])
        assert not any(p in true_edges for p in zip(*pairs.tolist()))
        negatives += pairs.size(1)
    assert negatives == 2 * E


def test_link_negatives_as_pyg_when_asked(mode):
    """neg_exclude_edges=False: uniform pairs, true edges about as often as the density."""
    data = temporal_data(6)
    true_edges = set(zip(*data.edge_index.tolist()))
    loader = LinkNeighborLoader(data, [2], batch_size=512, neg_sampling="binary",
                                neg_exclude_edges=False, **where(mode))
    hits = total = 0
    for batch in loader:
        label = batch.edge_label.cpu()
        pairs = batch.n_id.cpu()[batch.edge_label_index.cpu()[:, label == 0]]
        hits += sum(p in true_edges for p in zip(*pairs.tolist()))
        total += pairs.size(1)
    density = len(true_edges) / N ** 2
    # about 100 hits expected in 3000 draws (none, as with exclusion, has p ~ e^-100)
    assert density / 3 < hits / total < 3 * density


def test_weighted_negatives_follow_their_weights(mode):
    """PyG's dst_weight: negatives drawn by PyG's code on the host, only where the weight
    is (once silently ignored: an older PyG named it ``weight``)."""
    data = temporal_data(8)
    weight = torch.zeros(N)
    weight[[5, 17, 230]] = 1.0
    loader = LinkNeighborLoader(data, [2], batch_size=256, neg_exclude_edges=False,
                                neg_sampling=dict(mode="binary", dst_weight=weight),
                                **where(mode))
    for batch in loader:
        label = batch.edge_label.cpu()
        dst = batch.n_id.cpu()[batch.edge_label_index.cpu()[1, label == 0]]
        assert set(dst.tolist()) <= {5, 17, 230}


def test_more_bad_input_is_named():
    data = temporal_data(7)
    topo = qv.CSRTopo(data.edge_index, num_nodes=N)
    with pytest.raises(ValueError, match=r"node_time must hold one time per node \(300\)"):
        qv.GraphSageSampler(topo, [2], device="cpu", node_time=torch.zeros(N - 1, dtype=torch.long))
    # Float times would be truncated (0.9 and 0.1 both 0): refused by name.
    for name, times in (("node_time", torch.rand(N)), ("edge_time", torch.rand(E))):
        with pytest.raises(TypeError, match=f"{name} must hold integer times"):
            qv.GraphSageSampler(topo, [2], device="cpu", **{name: times})
    timed = qv.GraphSageSampler(topo, [2], device="cpu", node_time=torch.arange(N))
    with pytest.raises(TypeError, match="seed_time must hold integer times"):
        timed.sample(torch.tensor([0, 1]), seed_time=torch.tensor([0.5, 0.5]))
    with pytest.raises(IndexError, match=r"seeds\[1\] = 300 is out of range \[0, 300\)"):
        timed.sample(torch.tensor([0, 300]))
    with pytest.raises(ValueError, match=r"weights must hold one value per edge \(3000\)"):
        qv.GraphSageSampler(topo, [2], device="cpu", weights=torch.ones(E + 1))
    with pytest.raises(ValueError, match="give edge_time or node_time, not both"):
        qv.GraphSageSampler(topo, [2], device="cpu", node_time=torch.zeros(N, dtype=torch.long),
                            edge_time=torch.zeros(E, dtype=torch.long))
    with pytest.raises(ValueError, match="temporal_strategy must be 'uniform' or 'last'"):
        qv.GraphSageSampler(topo, [2], device="cpu", node_time=torch.zeros(N, dtype=torch.long),
                            temporal_strategy="newest")
    with pytest.raises(ValueError, match="amount"):
        LinkNeighborLoader(data, [2], batch_size=8, device="cpu",
                           neg_sampling=dict(mode="binary", amount=-1))
    with pytest.raises(IndexError, match="edge_label_index holds node 300"):
        LinkNeighborLoader(data, [2], batch_size=8, device="cpu",
                           edge_label_index=torch.tensor([[0], [300]]))


def test_last_with_weights_is_refused_when_made_and_ignored_without_times():
    """A probe: weight_attr with temporal_strategy='last' was accepted, then the first batch
    failed naming edge_weight, an argument the caller never gave."""
    data = temporal_data(5)
    with pytest.raises(ValueError, match="'last' takes the most recent edges and ignores "
                                         "weights: leave weight_attr out"):
        NeighborLoader(data, [3], input_nodes=torch.arange(4), input_time=torch.full((4,), 50),
                       weight_attr="edge_weight", time_attr="edge_time",
                       temporal_strategy="last", batch_size=2, device="cpu")
    topo = qv.CSRTopo(data.edge_index, num_nodes=N)
    with pytest.raises(ValueError, match="leave weights out"):
        qv.GraphSageSampler(topo, [3], device="cpu", mode="CPU", weights=data.edge_weight,
                            edge_time=data.edge_time, temporal_strategy="last")
    with pytest.raises(ValueError, match="cannot sample with replacement"):
        qv.GraphSageSampler(topo, [3], replace=True, device="cpu", mode="CPU",
                            edge_time=data.edge_time, temporal_strategy="last")
    hetero = qv.HeteroCSRTopo({("n", "to", "n"): data.edge_index}, {"n": N},
                              edge_time_dict={("n", "to", "n"): data.edge_time})
    with pytest.raises(ValueError, match="leave weights out"):
        qv.HeteroSampler(hetero, [3], device="cpu", mode="CPU", temporal_strategy="last",
                         weights={("n", "to", "n"): data.edge_weight})
    # Without times the strategy means nothing, as in PyG: weighted batches as usual.
    for loader in (NeighborLoader(data, [3], input_nodes=torch.arange(4), batch_size=2,
                                  weight_attr="edge_weight", temporal_strategy="last",
                                  device="cpu"),
                   NeighborLoader(data, [3], input_nodes=torch.arange(4), batch_size=2,
                                  temporal_strategy="last", device="cpu")):
        assert sum(batch.batch_size for batch in loader) == 4
    with pytest.raises(ValueError, match="'uniform' or 'last', got 'latest'"):
        qv.GraphSageSampler(topo, [3], device="cpu", mode="CPU", temporal_strategy="latest")


def test_float_seed_times_are_named_by_the_loaders_argument():
    """A probe: a float input_time was refused naming seed_time, the sampler's argument."""
    data = temporal_data(6)
    with pytest.raises(TypeError, match="input_time must hold integer times"):
        NeighborLoader(data, [3], input_nodes=torch.arange(2), input_time=torch.tensor([5.5, 1.0]),
                       time_attr="edge_time", batch_size=2, device="cpu")
    with pytest.raises(TypeError, match="edge_label_time must hold integer times"):
        LinkNeighborLoader(data, [3], edge_label_index=data.edge_index[:, :2],
                           edge_label_time=torch.tensor([5.5, 1.0]), time_attr="edge_time",
                           batch_size=2, device="cpu")
