"""torch_quiver_ops.pyg: PyG's NeighborLoader on our sampler and stores, against the graph
itself, PyG's conventions (edge direction, hop layout for trim_to_layer, input ids) and a
uniformity test, on every placement."""
import gc
import re
import warnings
from collections import Counter

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Data, HeteroData
from torch_geometric.nn import SAGEConv
from torch_geometric.utils import trim_to_layer

import torch_quiver_ops as qv
from torch_quiver_ops import pyg as qpyg
from conftest import MODES, requires_cuda
from reference import random_coo
from stats import P_VALUE_FLOOR, assert_halves_hypergeometric, assert_uniform


def test_triplet_negatives_of_disjoint_trees_name_their_pair(mode):
    """batch numbers each tree by its seed edge: source i's negatives are pair i's."""
    gen = torch.Generator().manual_seed(0)
    edge_index, times = torch.randint(40, (2, 300), generator=gen), torch.randint(50, (300,), generator=gen)
    data = Data(x=torch.randn(40, 3), edge_index=edge_index, edge_time=times, num_nodes=40)
    for rules in (dict(edge_label_time=times - 1, time_attr="edge_time"), dict(disjoint=True)):
        loader = qpyg.LinkNeighborLoader(data, [3, 3], edge_label_index=edge_index,
                                         neg_sampling=dict(mode="triplet", amount=3),
                                         batch_size=4, device=device_of(mode), mode=mode,
                                         **rules)
        batch = next(iter(loader))
        pairs = torch.arange(4)
        assert torch.equal(batch.batch[batch.src_index].cpu(), pairs)
        assert torch.equal(batch.batch[batch.dst_neg_index].cpu(), pairs.view(4, 1).expand(4, 3))
        # Binary negatives, a ratio that is no whole number: both ends of a pair, negative
        # pair n numbered (and timed) as positive n % 4.
        loader = qpyg.LinkNeighborLoader(data, [3, 3], edge_label_index=edge_index,
                                         neg_sampling=dict(mode="binary", amount=1.5),
                                         batch_size=4, device=device_of(mode), mode=mode,
                                         **rules)
        batch = next(iter(loader))
        src, dst = batch.edge_label_index.cpu()
        assert src.numel() == 4 + 6
        assert torch.equal(batch.batch[src].cpu(), torch.arange(10) % 4)
        assert torch.equal(batch.batch[dst].cpu(), torch.arange(10) % 4)


def device_of(mode):
    return torch.device("cpu") if mode == "CPU" else torch.device("cuda", 0)


def directed_data(num_nodes=200, num_edges=2500, seed=0, width=6):
    """A directed graph (in- and out-neighbors differ) with features, labels and a mask."""
    row, col = random_coo(num_nodes, num_edges, seed)
    gen = torch.Generator().manual_seed(seed)
    return Data(edge_index=torch.stack([row, col]).long(),
                x=torch.randn(num_nodes, width, generator=gen),
                y=torch.randint(0, 5, (num_nodes,), generator=gen),
                train_mask=torch.rand(num_nodes, generator=gen) < 0.5,
                num_nodes=num_nodes)


def edge_set(edge_index):
    return set(map(tuple, edge_index.t().tolist()))


def check_batch(data, batch, fanouts, input_nodes, replace=False, with_eid=False):
    """Every property PyG users rely on, against the graph."""
    n_id = batch.n_id.cpu()
    bs = batch.batch_size
    assert torch.equal(n_id[:bs], input_nodes[batch.input_id.cpu()])
    assert n_id[bs:].unique().numel() == n_id.numel() - bs  # new nodes appear once
    assert batch.num_nodes == n_id.numel()
    assert torch.equal(batch.x.cpu(), data.x[n_id])
    assert torch.equal(batch.y.cpu(), data.y[n_id])
    assert torch.equal(batch.train_mask.cpu(), data.train_mask[n_id])
    assert sum(batch.num_sampled_nodes) == n_id.numel()
    assert batch.num_sampled_nodes[0] == bs
    ei = batch.edge_index.cpu()
    assert sum(batch.num_sampled_edges) == ei.size(1)
    # Messages flow from the sampled neighbor (row) to the node it was sampled for (col),
    # along an edge (source, target) of the graph.
    graph_edges = edge_set(data.edge_index)
    global_edges = torch.stack([n_id[ei[0]], n_id[ei[1]]])
    assert edge_set(global_edges) <= graph_edges
    if with_eid:
        assert torch.equal(data.edge_index[:, batch.e_id.cpu()], global_edges)
    else:
        assert "e_id" not in batch
    # Hop h's edges point at the nodes hop h - 1 added (the seeds for the first hop), and
    # each such node gets min(fanout, in-degree) distinct neighbors without replacement.
    in_degree = torch.bincount(data.edge_index[1], minlength=data.num_nodes)
    node_bounds = torch.tensor([0] + batch.num_sampled_nodes).cumsum(0).tolist()
    edge_bounds = torch.tensor([0] + batch.num_sampled_edges).cumsum(0).tolist()
    for hop, fanout in enumerate(fanouts):
        targets = ei[1, edge_bounds[hop]:edge_bounds[hop + 1]]
        sources = ei[0, edge_bounds[hop]:edge_bounds[hop + 1]]
        assert bool(((targets >= node_bounds[hop]) & (targets < node_bounds[hop + 1])).all())
        assert bool((sources < node_bounds[hop + 2]).all())
        counts = torch.bincount(targets - node_bounds[hop],
                                minlength=node_bounds[hop + 1] - node_bounds[hop])
        frontier = n_id[node_bounds[hop]:node_bounds[hop + 1]]
        want = in_degree[frontier] if fanout < 0 else (
            torch.full_like(frontier, fanout) if replace else in_degree[frontier].clamp(max=fanout))
        if replace:
            want = torch.where(in_degree[frontier] > 0, want, 0)
        assert torch.equal(counts, want)


def test_graph_store_layouts_agree_and_hold_in_neighbors():
    data = directed_data()
    row, col = data.edge_index
    n = data.num_nodes
    coo = qpyg.GraphStore()
    coo.put_edge_index((row, col), edge_type=None, layout="coo", size=(n, n))
    perm = torch.argsort(row * n + col)
    rowptr = torch.ops.quiver.csr_from_coo(row, col, n)[0]
    csr = qpyg.GraphStore()
    csr.put_edge_index((rowptr, col[torch.argsort(row, stable=True)]), edge_type=None,
                       layout="csr", size=(n, n))
    colptr, csc_rows, _ = torch.ops.quiver.csr_from_coo(col, row, n)
    csc = qpyg.GraphStore()
    csc.put_edge_index((csc_rows, colptr), edge_type=None, layout="csc", size=(n, n))
    for store in (coo, csr, csc):
        topo = store.topo
        assert topo.node_count == n
        for v in (0, 5, 17, n - 1):  # v's neighbor list holds the sources of its in-edges
            got = sorted(topo.indices[topo.indptr[v]:topo.indptr[v + 1]].tolist())
            assert got == sorted(row[col == v].tolist())
        back = store.get_edge_index(edge_type=None, layout="coo")
        assert edge_set(torch.stack(back)) == edge_set(data.edge_index)
        assert store.get_all_edge_attrs()[0].size == (n, n)
    assert perm.numel() == row.numel()
    # int32 (row, colptr) as COO takes int32 ids; errors name colptr and row, not the
    # CSRTopo arguments the caller never passed (a probe).
    narrow = qpyg.GraphStore()
    narrow.put_edge_index((csc_rows.int(), colptr.int()), edge_type=None, layout="csc",
                          size=(n, n))
    assert torch.equal(narrow.topo.indptr, csc.topo.indptr)
    falling = colptr.clone()
    falling[1] = falling[2] + 1
    with pytest.raises(ValueError, match=r"colptr must be non-decreasing"):
        qpyg.GraphStore().put_edge_index((csc_rows, falling), edge_type=None,
                                         layout="csc", size=(n, n))
    with pytest.raises(IndexError, match=rf"row holds node id \d+, out of range \[0, {n}\)"):
        qpyg.GraphStore().put_edge_index((csc_rows + n + 3, colptr), edge_type=None,
                                         layout="csc", size=(n, n))
    with pytest.raises(ValueError, match="HeteroGraphStore"):
        qpyg.GraphStore().put_edge_index((row, col), edge_type=("a", "to", "b"), layout="coo",
                                         size=(n, n))
    with pytest.raises(ValueError, match="already holds"):
        coo.put_edge_index((row, col), edge_type=None, layout="coo", size=(n, n))


def test_malformed_edge_indices_are_refused_not_truncated():
    x = torch.randn(4, 2)
    for edge_index, error, words in [
            (torch.tensor([[0.9, 1.5], [1.7, 2.2]]), TypeError, "row must hold integer node ids"),
            (torch.tensor([[0, 1], [1, 2], [3, 3]]), ValueError, r"shape \[2, E\], got \(3, 2\)")]:
        data = Data(x=x, edge_index=edge_index, num_nodes=4)
        with pytest.raises(error, match=words):
            next(iter(qpyg.NeighborLoader(data, num_neighbors=[-1], batch_size=4, device="cpu")))
        hetero = HeteroData()
        hetero["a"].x = x
        hetero["a", "to", "a"].edge_index = edge_index
        with pytest.raises(error, match=words):
            next(iter(qpyg.NeighborLoader(hetero, num_neighbors=[-1], batch_size=4,
                                          input_nodes="a", device="cpu")))
    for pair, layout, error, words in [
            ((torch.tensor([0.7, 1.2]), torch.tensor([1, 2])), "coo", TypeError, "row must hold"),
            ((torch.tensor([0, 1, 2]), torch.tensor([1, 2])), "coo", ValueError,
             "row and col must have equal length, got 3 and 2"),
            ((torch.tensor([0, 3, 1, 4]), torch.tensor([1, 2, 0, 1])), "csr", ValueError,
             "rowptr must start at 0, never decrease and end at 4"),
            ((torch.tensor([0, 1, 2]), torch.tensor([1, 2, 0, 1])), "csr", ValueError,
             "the CSR is corrupt")]:
        with pytest.raises(error, match=words):
            qpyg.GraphStore().put_edge_index(pair, edge_type=None, layout=layout, size=(3, 3))
        with pytest.raises(error, match=words):
            qpyg.HeteroGraphStore().put_edge_index(pair, edge_type=("a", "to", "a"),
                                                   layout=layout, size=(3, 3))


def test_node_tables_without_a_row_per_node_are_refused_by_name():
    """x with 8 rows on 10 nodes went into every batch whole (PyG's rule for what is neither
    a node nor an edge attribute), and one with as many rows as edges was gathered by edge
    ids: a model read other nodes' rows unsaid. A hand-built FeatureStore shorter than its
    GraphStore failed at the first batch to reach past it, naming neither (probes)."""
    edge_index = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
    for key, value in [("x", torch.randn(8, 3)), ("x", torch.randn(4, 3)),
                       ("y", torch.arange(11)), ("pos", torch.randn(3, 2))]:
        data = Data(edge_index=edge_index, num_nodes=10, **{key: value})
        with pytest.raises(ValueError, match=f"node attribute '{key}' has {value.size(0)} rows, "
                                             f"but the graph has 10 nodes"):
            qpyg.NeighborLoader(data, [-1], batch_size=1, device="cpu")
    # One label for the whole graph is graph-level, as PyG copies it.
    data = Data(edge_index=edge_index, num_nodes=10, y=torch.tensor([1]))
    batch = next(iter(qpyg.NeighborLoader(data, [-1], input_nodes=[4], batch_size=1,
                                          device="cpu")))
    assert batch.y.tolist() == [1]
    hetero = HeteroData()
    hetero["a"].x, hetero["a"].num_nodes = torch.randn(4, 2), 5
    hetero["a", "to", "a"].edge_index = edge_index
    with pytest.raises(ValueError, match="node attribute 'x' of node type 'a' has 4 rows, but "
                                         "the graph has 5 nodes"):
        qpyg.NeighborLoader(hetero, [-1], input_nodes="a", batch_size=1, device="cpu")
    graph_store = qpyg.GraphStore.from_edge_index(edge_index, num_nodes=12)
    feature_store = qpyg.FeatureStore(device="cpu")
    feature_store.put_tensor(torch.randn(10, 3), group_name=None, attr_name="x", index=None)
    with pytest.raises(ValueError, match="node table 'x' has 10 rows, but the graph store has "
                                         "12 nodes"):
        qpyg.NeighborLoader((feature_store, graph_store), [-1], batch_size=4, device="cpu")
    # A longer one is fine: a store counted from its edges misses the last nodes without
    # any, whose rows are never read (a review).
    counted = qpyg.GraphStore.from_edge_index(edge_index)  # 5 nodes
    feature_store = qpyg.FeatureStore(device="cpu")
    feature_store.put_tensor(torch.randn(7, 3), group_name=None, attr_name="x", index=None)
    batch = next(iter(qpyg.NeighborLoader((feature_store, counted), [-1], batch_size=5,
                                          device="cpu")))
    assert batch.x.shape == (batch.n_id.numel(), 3)
    # A node type PyG counts no nodes of (only labels): the graph's count of it (a review).
    hetero = HeteroData()
    hetero["a"].x = torch.randn(5, 2)
    hetero["b"].y = torch.arange(4)
    hetero["a", "to", "b"].edge_index = torch.tensor([[0, 1, 2, 3], [0, 1, 2, 3]])
    batch = next(iter(qpyg.NeighborLoader(hetero, [-1], input_nodes="b", batch_size=4,
                                          device="cpu")))
    assert torch.equal(batch["b"].y, batch["b"].n_id)
    hetero["b"].y = torch.arange(3)
    with pytest.raises(ValueError, match="node attribute 'y' of node type 'b' has 3 rows, but "
                                         "the graph has 4 nodes"):
        qpyg.NeighborLoader(hetero, [-1], input_nodes="b", batch_size=4, device="cpu")


def test_an_id_out_of_range_is_named_where_it_is_in_edge_index():
    """A probe: the error named edge_index[1, 1] for a bad source at [0, 1], and the
    reverse (the graph store stacks the rows the other way round for the CSR)."""
    for edge_index, words in [([[0, 55], [1, 2]], r"edge_index\[0, 1\] = 55"),
                              ([[0, 1], [1, 55]], r"edge_index\[1, 1\] = 55"),
                              ([[0, 1, 2], [-4, 1, 2]], r"edge_index\[1, 0\] = -4")]:
        data = Data(x=torch.randn(10, 2), edge_index=torch.tensor(edge_index), num_nodes=10)
        with pytest.raises(IndexError, match=words):
            next(iter(qpyg.NeighborLoader(data, [-1], batch_size=4, device="cpu")))


def test_feature_store_gathers_and_names_what_it_lacks(mode):
    device = device_of(mode)
    data = directed_data()
    store = qpyg.FeatureStore(device=device, cache_size="30%")
    store.put_tensor(data.x, group_name=None, attr_name="x", index=None)
    store[None, "y", None] = data.y  # PyG's item form
    ids = torch.tensor([3, 0, 199, 3], device=device)
    assert torch.equal(store.get_tensor(None, "x", ids).cpu(), data.x[ids.cpu()])
    assert store.get_tensor(None, "x", ids).device == device
    assert torch.equal(store.get_tensor(None, "y", ids.cpu()).cpu(), data.y[ids.cpu()])
    assert torch.equal(store.get_tensor(None, "x", None).cpu(), data.x)
    assert store.get_tensor_size(None, "x") == (200, 6)
    assert {a.attr_name for a in store.get_all_tensor_attrs()} == {"x", "y"}
    with pytest.raises(KeyError, match="'z'"):
        store.get_tensor(None, "z", ids)
    with pytest.raises(IndexError):
        store.get_tensor(None, "x", torch.tensor([200], device=device))
    with pytest.raises(KeyError, match="paper"):
        store.get_tensor("paper", "x", ids)
    assert store.remove_tensor(None, "y", None) and store.get_tensor_size(None, "y") is None
    # PyG's IndexType allows slices
    assert torch.equal(store.get_tensor(None, "x", slice(2, 5)).cpu(), data.x[2:5])
    # bad options are refused when the store is made, not at its first put_tensor
    with pytest.raises(ValueError, match="host_reads must be one of .*got 'bogus'"):
        qpyg.FeatureStore(device=device, host_reads="bogus")
    with pytest.raises(ValueError, match="cache_policy must be one of .*got 'bogus'"):
        qpyg.FeatureStore(device=device, cache_policy="bogus")


@pytest.mark.parametrize("fanouts,replace,with_eid", [([4, 3], False, False),
                                                     ([3, -1], False, True),
                                                     ([5, 2, 2], True, False)])
def test_neighbor_loader_batches_against_the_graph(mode, fanouts, replace, with_eid):
    data = directed_data()
    device = device_of(mode)
    train = torch.nonzero(data.train_mask).view(-1)
    loader = qpyg.NeighborLoader(data, num_neighbors=fanouts, input_nodes=train, batch_size=16,
                                 shuffle=True, replace=replace, return_eid=with_eid,
                                 device=device, mode=mode, cache_size="25%")
    multiplicity = Counter(map(tuple, data.edge_index.t().tolist()))  # (it has repeated edges)
    seen = []
    for batch in loader:
        assert batch.edge_index.device == device and batch.x.device == device
        check_batch(data, batch, fanouts, train, replace, with_eid)
        seen.append(batch.n_id[:batch.batch_size].cpu())
        if not replace:  # no edge drawn more often than the graph holds it
            n_id, ei = batch.n_id.cpu(), batch.edge_index.cpu()
            drawn = Counter(zip(n_id[ei[0]].tolist(), n_id[ei[1]].tolist()))
            assert all(count <= multiplicity[pair] for pair, count in drawn.items())
            if with_eid:
                assert batch.e_id.unique().numel() == batch.e_id.numel()
    assert torch.equal(torch.cat(seen).sort().values, train)  # every input node once
    assert len(loader) == (train.numel() + 15) // 16


def test_input_nodes_default_to_every_node_and_accept_a_mask(mode):
    data = directed_data(num_nodes=50, num_edges=300)
    loader = qpyg.NeighborLoader(data, [2], batch_size=64, device=device_of(mode), mode=mode)
    assert torch.equal(next(iter(loader)).n_id[:50].cpu(), torch.arange(50))
    masked = qpyg.NeighborLoader(data, [2], input_nodes=data.train_mask, batch_size=64,
                                 device=device_of(mode), mode=mode)
    batch = next(iter(masked))
    assert torch.equal(batch.n_id[:batch.batch_size].cpu(), torch.nonzero(data.train_mask).view(-1))


def test_trim_to_layer_gives_the_same_seed_outputs(mode):
    data = directed_data(width=8)
    device = device_of(mode)
    loader = qpyg.NeighborLoader(data, [4, 3, 2], batch_size=32, device=device, mode=mode)
    torch.manual_seed(0)
    convs = torch.nn.ModuleList([SAGEConv(8, 8) for _ in range(3)]).to(device)
    for batch in loader:
        full, x, edge_index = batch.x, batch.x, batch.edge_index
        for conv in convs:
            full = conv(full, batch.edge_index).relu()
        sizes = []
        for layer, conv in enumerate(convs):
            x, edge_index, _ = trim_to_layer(layer, batch.num_sampled_nodes,
                                             batch.num_sampled_edges, x, edge_index)
            sizes.append(x.size(0))
            x = conv(x, edge_index).relu()
        # each layer after the first drops the last hop's nodes it no longer needs
        assert sizes[0] > sizes[1] > sizes[2] >= batch.batch_size
        torch.testing.assert_close(x[:batch.batch_size], full[:batch.batch_size])
        break


def test_first_hop_is_uniform_over_in_neighbors(mode):
    # Node 0's in-neighbors are 1..30; node 0 itself points at 31..40 (never sampled for 0).
    sources = torch.cat([torch.arange(1, 31), torch.zeros(10, dtype=torch.long)])
    targets = torch.cat([torch.zeros(30, dtype=torch.long), torch.arange(31, 41)])
    data = Data(edge_index=torch.stack([sources, targets]), num_nodes=41)
    loader = qpyg.NeighborLoader(data, [3], input_nodes=torch.zeros(3000, dtype=torch.long),
                                 batch_size=1000, device=device_of(mode), mode=mode)
    rows = []
    for batch in loader:
        ei = batch.edge_index.cpu()
        order = torch.argsort(ei[1], stable=True)  # each seed's 3 picks together
        rows.append(batch.n_id.cpu()[ei[0, order]].view(-1, 3))
    picks = torch.cat(rows)
    assert picks.shape == (3000, 3) and bool(((picks >= 1) & (picks <= 30)).all())
    assert bool((picks.sort(1).values.diff(dim=1) != 0).all())  # 3 distinct neighbors
    assert_uniform(torch.bincount(picks.view(-1) - 1, minlength=30))
    assert_halves_hypergeometric(picks - 1, 30)  # without replacement, not only uniform


def test_manual_seed_reproduces_an_epoch_whatever_else_draws(mode):
    data = directed_data()
    device = device_of(mode)
    loader = qpyg.NeighborLoader(data, [3, 2], batch_size=20, shuffle=True, device=device,
                                 mode=mode)

    def epoch(noise):
        out = []
        for batch in loader:
            if noise:  # a model's dropout drawing from the same default generators
                torch.rand(100, device=device)
                torch.rand(100)
            out.append((batch.n_id.cpu(), batch.edge_index.cpu()))
        return out

    torch.manual_seed(3)
    first = epoch(noise=False)
    torch.manual_seed(3)
    again = epoch(noise=True)
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(first, again))
    assert not all(torch.equal(a[0], b[0]) for a, b in zip(first, epoch(noise=False)))


@pytest.mark.parametrize("shuffle,drop_last,own_generator",
                         [(True, False, False), (True, True, True), (False, False, False)])
def test_batches_drawn_directly_cover_the_seeds_as_the_dataloaders_do(mode, shuffle, drop_last,
                                                                       own_generator):
    # Without workers the loader draws its batches itself (no list of Python ints a batch):
    # one permutation an epoch from the loader's generator (or the default one), every seed
    # once, batches as the DataLoader sizes them; in order without shuffle, exactly the
    # DataLoader's batches.
    data = directed_data()
    generator = torch.Generator().manual_seed(9) if own_generator else None
    loader = qpyg.NeighborLoader(data, [3, 2], batch_size=23, shuffle=shuffle,
                                 drop_last=drop_last, device=device_of(mode), mode=mode,
                                 generator=generator)
    assert loader._batches_directly

    def epoch(seed=5):
        torch.manual_seed(seed)
        if generator is not None:
            generator.manual_seed(9 + seed)
        return [(b.n_id.cpu(), b.edge_index.cpu(), b.input_id.cpu(), b.batch_size)
                for b in loader]

    direct = epoch()
    again = epoch()  # the same seeds, the same epoch
    assert all(torch.equal(a[2], b[2]) for a, b in zip(direct, again))
    loader._batches_directly = False
    through_dataloader = epoch()
    assert len(direct) == len(through_dataloader) == len(loader)
    assert [a[3] for a in direct] == [b[3] for b in through_dataloader]
    seeds = torch.cat([a[2] for a in direct])
    if drop_last:
        assert seeds.numel() == len(loader) * 23 and seeds.unique().numel() == seeds.numel()
    else:
        assert torch.equal(seeds.sort().values, torch.arange(data.num_nodes))
    if not shuffle:
        assert torch.equal(seeds, torch.arange(data.num_nodes))
        for a, b in zip(direct, through_dataloader):
            assert all(torch.equal(x, y) for x, y in zip(a[:3], b[:3])) and a[3] == b[3]
    else:
        loader._batches_directly = True
        other = torch.cat([a[2] for a in epoch(seed=6)])
        assert not torch.equal(seeds, other)  # another seed, another order


def test_a_sampler_of_the_users_own_goes_through_the_dataloader():
    data = directed_data()
    loader = qpyg.NeighborLoader(data, [2], batch_size=10, device="cpu",
                                 sampler=torch.utils.data.SubsetRandomSampler(range(30)))
    assert not loader._batches_directly
    assert sum(b.batch_size for b in loader) == 30


def test_a_sampler_over_some_positions_and_a_batch_sampler_are_honoured():
    """A SequentialSampler or RandomSampler over some positions is no DataLoader default:
    it draws only those seeds (the fast path took every seed); a batch_sampler gives the
    batches (it failed with a bare TypeError)."""
    data = directed_data()
    for sampler in (torch.utils.data.SequentialSampler(range(5)),
                    torch.utils.data.RandomSampler(range(5))):
        loader = qpyg.NeighborLoader(data, [2], batch_size=4, device="cpu", sampler=sampler)
        seeds = [b.n_id[:b.batch_size].tolist() for b in loader]
        assert len(loader) == len(seeds) == 2
        assert sorted(sum(seeds, [])) == [0, 1, 2, 3, 4]
    batch_sampler = torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(range(10)),
                                                  3, drop_last=True)
    loader = qpyg.NeighborLoader(data, [2], device="cpu", batch_sampler=batch_sampler)
    assert [b.n_id[:b.batch_size].tolist() for b in loader] == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]


def test_a_data_made_in_inference_mode_loads():
    """Inference tensors keep no version counter (reading it raises): the stores' stamp of
    what the data holds must do without it."""
    with torch.inference_mode():
        data = directed_data()
    loader = qpyg.NeighborLoader(data, [2], batch_size=50, device="cpu")
    assert sum(b.batch_size for b in loader) == 200


def test_input_nodes_as_a_list_tuple_or_range():
    data = directed_data()
    for ids in ([3, 4, 7], (3, 4, 7), range(3, 6)):
        loader = qpyg.NeighborLoader(data, [2], input_nodes=ids, batch_size=8, device="cpu")
        batch = next(iter(loader))
        assert batch.n_id[:batch.batch_size].tolist() == list(ids)
    with pytest.raises(TypeError, match="input_nodes"):
        qpyg.NeighborLoader(data, [2], input_nodes={"a": 1}, batch_size=8, device="cpu")
    # Found by a probe: int16 ids passed the loader and failed at the first batch as
    # "seeds"; they are widened. uint8 ones, which torch reads as a mask, are named.
    for dtype in (torch.int8, torch.int16):
        loader = qpyg.NeighborLoader(data, [2], input_nodes=torch.tensor([3, 4], dtype=dtype),
                                     batch_size=8, device="cpu")
        assert next(iter(loader)).n_id[:2].tolist() == [3, 4]
    with pytest.raises(TypeError, match="input_nodes are uint8, which torch reads as a mask"):
        qpyg.NeighborLoader(data, [2], input_nodes=torch.tensor([3, 4], dtype=torch.uint8),
                            device="cpu")
    # ... and a bad num_neighbors was named as the sampler's "sizes".
    with pytest.raises(ValueError, match=r"num_neighbors must name at least one hop"):
        qpyg.NeighborLoader(data, [], device="cpu")
    with pytest.raises(ValueError, match=r"num_neighbors\[1\] must be -1 \(all neighbors\)"):
        qpyg.NeighborLoader(data, [2, -2], device="cpu")


def test_an_empty_list_of_seeds_is_an_empty_loader_and_bad_attrs_are_named_by_the_loader():
    """From a probe: input_nodes=[] was refused as float32 ids (PyG reads it as no seeds);
    a 2-D weight_attr and a float time_attr were named by the sampler's own arguments
    (weights, node_time), which the caller never gave."""
    data = directed_data()
    assert len(qpyg.NeighborLoader(data, [2], input_nodes=[], batch_size=2, device="cpu")) == 0
    data.w2 = torch.rand(data.edge_index.size(1), 2)
    with pytest.raises(ValueError, match=r"weight_attr='w2' must hold one value per edge \(1-D\)"):
        qpyg.NeighborLoader(data, [2], weight_attr="w2", device="cpu")
    data.t = torch.rand(data.num_nodes)
    with pytest.raises(TypeError, match="time_attr='t' must hold integer times"):
        qpyg.NeighborLoader(data, [2], time_attr="t", device="cpu")


def test_numpy_attributes_are_gathered_and_lists_refused():
    """As PyG's batches: a numpy attribute with a row per node or edge comes as a tensor of
    the sampled rows (it was copied whole into every batch); a per-node list is refused by
    name (PyG's batches fail on it without naming it)."""
    data = directed_data()
    data.np_rows = np.arange(400).reshape(200, 2)
    data.np_edges = np.arange(2500, dtype=np.float32)
    batch = next(iter(qpyg.NeighborLoader(data, [3], batch_size=8, device="cpu",
                                          return_eid=True)))
    assert torch.equal(batch.np_rows, torch.from_numpy(data.np_rows)[batch.n_id])
    assert torch.equal(batch.np_edges, torch.from_numpy(data.np_edges)[batch.e_id])
    data.names = [f"node {i}" for i in range(200)]
    with pytest.raises(TypeError, match="'names' is a list with a row per node"):
        qpyg.NeighborLoader(data, [3], batch_size=8, device="cpu")


def test_num_neighbors_must_be_integers():
    with pytest.raises(TypeError, match="num_neighbors.*2.9"):
        qpyg.NeighborLoader(directed_data(), [2.9], batch_size=8, device="cpu")


def test_the_loader_reads_the_data_as_it_is_at_each_epoch():
    """As PyG's loaders, which read the data at every batch: loader.data is the Data, and an
    attribute set, replaced, deleted or changed in place (the graph too) shows from the next
    epoch on. A new loader after an in-place change of edge_index samples the new graph (a
    shared topology was keyed on the tensor alone)."""
    data = directed_data()
    loader = qpyg.NeighborLoader(data, [-1], batch_size=200, device="cpu")
    assert loader.data is data
    data.x = torch.full_like(data.x, 7.0)
    data.z = torch.arange(200) * 3
    del data.train_mask
    batch = next(iter(loader))
    assert bool((batch.x == 7.0).all()) and torch.equal(batch.z, batch.n_id * 3)
    assert "train_mask" not in batch
    data.x.mul_(2)  # in place
    assert bool((next(iter(loader)).x == 14.0).all())
    # The graph changed in place: node 0 now has every node as an in-neighbor.
    old = qpyg.NeighborLoader(data, [-1], input_nodes=torch.tensor([0]), batch_size=1,
                              device="cpu")
    next(iter(old))
    data.edge_index[1, :200] = 0
    data.edge_index[0, :200] = torch.arange(200)
    expected = int((data.edge_index[1] == 0).sum())
    new = qpyg.NeighborLoader(data, [-1], input_nodes=torch.tensor([0]), batch_size=1,
                              device="cpu")
    for loader in (new, old):
        assert next(iter(loader)).edge_index.size(1) == expected
    # PyG's layer-wise inference recipe
    loader = qpyg.NeighborLoader(data, [-1], batch_size=50, device="cpu")
    del loader.data.x, loader.data.y
    loader.data.num_nodes = 200
    batch = next(iter(loader))
    assert "x" not in batch and "y" not in batch and batch.n_id.numel() > 0
    # A sampler of the caller's cannot follow a new graph: said, not sampled stale.
    data.x = torch.randn(200, 6)
    stores = qpyg.to_stores(data, "cpu")
    given = qpyg.NeighborSampler(stores[1], [2])
    loader = qpyg.NeighborLoader(data, [2], batch_size=50, device="cpu", neighbor_sampler=given)
    data.x = torch.zeros(200, 6)  # features alone: the sampler still fits
    assert bool((next(iter(loader)).x == 0).all())
    data.edge_index = data.edge_index.flip(0)
    with pytest.raises(ValueError, match="graph changed"):
        next(iter(loader))


def test_new_features_keep_the_sampler_and_new_weights_or_edges_replace_it():
    """An epoch after only the Data's features changed keeps the loader's sampler (a new one
    copies the whole topology to the GPU again in GPU mode); weights or edges changed, in
    place or replaced, get a new sampler that reads them."""
    data = directed_data()
    data.w = torch.rand(data.edge_index.size(1)) + 0.1
    loader = qpyg.NeighborLoader(data, [3], batch_size=50, device="cpu", weight_attr="w")
    next(iter(loader))
    sampler = loader.quiver_sampler
    data.x = torch.zeros_like(data.x)
    data.x.add_(1)
    data.z = torch.arange(200)
    batch = next(iter(loader))
    assert bool((batch.x == 1).all()) and torch.equal(batch.z, batch.n_id)
    assert loader.quiver_sampler is sampler
    data.w.fill_(-1.0)  # in place: the new sampler reads them, and refuses them
    with pytest.raises(ValueError, match="must be finite and >= 0"):
        next(iter(loader))
    data.w = torch.ones(data.edge_index.size(1))
    next(iter(loader))
    assert loader.quiver_sampler is not sampler
    sampler = loader.quiver_sampler
    data.edge_index[1, :200] = 0
    data.edge_index[0, :200] = torch.arange(200)
    whole = qpyg.NeighborLoader(data, [-1], input_nodes=torch.tensor([0]), batch_size=1,
                                device="cpu")
    next(iter(loader))
    assert loader.quiver_sampler is not sampler
    assert next(iter(whole)).edge_index.size(1) == int((data.edge_index[1] == 0).sum())


def test_bidirectional_subgraph_has_both_directions(mode):
    data = directed_data()

    def first(**kwargs):
        torch.manual_seed(9)  # the same draws for both loaders
        loader = qpyg.NeighborLoader(data, [3, 2], batch_size=25, device=device_of(mode),
                                     mode=mode, **kwargs)
        batch = next(iter(loader))
        n_id, ei = batch.n_id.cpu(), batch.edge_index.cpu()
        return edge_set(torch.stack([n_id[ei[0]], n_id[ei[1]]]))
    plain, both = first(), first(subgraph_type="bidirectional")
    assert len(plain) > 0
    assert both == plain | {(v, u) for u, v in plain}  # the directed edges, each both ways
    assert both <= edge_set(data.edge_index) | edge_set(data.edge_index.flip(0))


def test_stores_of_one_data_are_shared_between_loaders():
    data = directed_data()
    train = qpyg.NeighborLoader(data, [2], batch_size=8, device="cpu")
    test = qpyg.NeighborLoader(data, [-1], batch_size=8, device="cpu")
    assert train.stores[1] is test.stores[1]
    assert train.stores[0]._tables["x"] is test.stores[0]._tables["x"]


def test_user_stores_and_own_sampler(mode):
    data = directed_data()
    device = device_of(mode)
    graph = qpyg.GraphStore.from_edge_index(data.edge_index, data.num_nodes)
    features = qpyg.FeatureStore(device=device, cache_size="10%", csr_topo=graph.topo)
    features.put_tensor(data.x, group_name=None, attr_name="x", index=None)
    features.put_tensor(data.y, group_name=None, attr_name="y", index=None)
    features.put_tensor(data.train_mask, group_name=None, attr_name="train_mask", index=None)
    gen = torch.Generator(device).manual_seed(1)
    sampler = qpyg.NeighborSampler(graph, [4, 3], device=device, mode=mode, generator=gen)
    loader = qpyg.NeighborLoader((features, graph), [4, 3], input_nodes=torch.arange(40),
                                 batch_size=10, neighbor_sampler=sampler)
    for batch in loader:
        check_batch(data, batch, [4, 3], torch.arange(40))


def test_cpu_workers_sample_valid_and_different_batches():
    data = directed_data()
    loader = qpyg.NeighborLoader(data, [3, 2], input_nodes=torch.zeros(64, dtype=torch.long),
                                 batch_size=8, device="cpu", num_workers=2)
    batches = list(loader)
    for batch in batches:
        check_batch(data, batch, [3, 2], torch.zeros(64, dtype=torch.long))
    distinct = {tuple(b.n_id.tolist()) for b in batches}
    assert len(distinct) > 1  # workers do not repeat each other's draws


@pytest.mark.parametrize("persistent", [False, True])
def test_a_users_generator_with_workers_draws_anew_each_epoch_and_worker(persistent):
    """A sampling_generator copied into DataLoader workers as it was: every worker drew the
    same stream, and every epoch repeated the first (found by a probe). Now each epoch's
    workers are seeded by one draw from it and their ids: epochs and workers differ, and
    the run still repeats from the same generator seed."""
    data = directed_data()
    seeds = torch.zeros(32, dtype=torch.long)  # one node: only the draws tell batches apart

    def epochs(generator_seed: int):
        loader = qpyg.NeighborLoader(data, [3, 2], input_nodes=seeds, batch_size=8,
                                     device="cpu", num_workers=2, persistent_workers=persistent,
                                     sampling_generator=torch.Generator().manual_seed(
                                         generator_seed))
        return [[tuple(b.n_id.tolist()) for b in loader] for _ in range(2)]

    first, second = epochs(0)
    for batches in (first, second):
        for batch in batches:
            assert batch[0] == 0
    assert first != second  # epochs differ
    assert first[0] != first[1]  # workers differ: batch 0 is worker 0's first, 1 worker 1's
    assert epochs(0) == [first, second]  # reproducible from the generator
    assert epochs(1) != [first, second]


@pytest.mark.parametrize("kind", ["node", "link"])
@pytest.mark.parametrize("workers", [0, 1])
def test_a_dropped_loader_goes_at_once_with_its_workers(kind, workers):
    """PyG hands the DataLoader the loader's own collate_fn and filter_fn: a loader was in
    a reference cycle and went only at a collection, and its persistent workers' queues
    were finalized before torch shut them down, so each stopped at torch's 5 s join
    timeout (about 10 s at the next epoch of any loader; a probe)."""
    import gc
    import weakref
    data = directed_data()
    options = dict(batch_size=16, device="cpu", num_workers=workers,
                   persistent_workers=workers > 0)
    if kind == "node":
        loader = qpyg.NeighborLoader(data, [3, 2], input_nodes=torch.arange(48), **options)
    else:
        loader = qpyg.LinkNeighborLoader(data, [3, 2], edge_label_index=data.edge_index[:, :48],
                                         neg_sampling="binary", **options)
    assert sum(1 for _ in loader) == 3 and sum(1 for _ in loader) == 3
    workers_seen = [w for w in getattr(loader._iterator, "iterator", loader._iterator)._workers
                    ] if workers else []
    dropped = weakref.ref(loader)
    gc.disable()
    try:
        del loader
        assert dropped() is None  # no cycle held it
    finally:
        gc.enable()
    for worker in workers_seen:  # stopped by torch's shutdown, not left to a timeout
        worker.join(timeout=3)
        assert not worker.is_alive()


@pytest.mark.parametrize("kind", ["node", "link"])
@pytest.mark.parametrize("workers,persistent", [(0, False), (1, False), (1, True)])
def test_a_loader_given_no_name_lasts_its_epoch(kind, workers, persistent):
    """With the loader's own methods held weakly, an iterator that alone kept it (``for b in
    Loader(...)``, workers or a sampler of the caller's) lost it at its first batch (a
    review): the epoch's iterator holds it."""
    import copy
    from torch.utils.data import SequentialSampler
    data = directed_data()
    options = dict(batch_size=16, device="cpu", num_workers=workers,
                   persistent_workers=persistent)
    if not workers:  # through the DataLoader, as with workers
        options["sampler"] = SequentialSampler(range(48))

    def loader():
        if kind == "node":
            return qpyg.NeighborLoader(data, [3, 2], input_nodes=torch.arange(48), **options)
        return qpyg.LinkNeighborLoader(data, [3, 2], edge_label_index=data.edge_index[:, :48],
                                       neg_sampling="binary", **options)
    assert sum(1 for _ in loader()) == 3
    epoch = iter(loader())
    next(epoch)
    assert sum(1 for _ in epoch) == 2
    assert sum(1 for _ in copy.deepcopy(loader())) == 3
    # A shallow copy held the original's methods (weakly): once the original was gone it
    # raised "deleted while one of its iterators ran" (a probe).
    original = loader()
    shallow = copy.copy(original)
    assert sum(1 for _ in shallow) == 3
    del original
    gc.collect()
    assert sum(1 for _ in shallow) == 3


def test_options_a_given_sampler_was_not_built_with_are_refused():
    """Beside a neighbor_sampler the loaders dropped subgraph_type, return_eid, replace,
    mode, sampling_generator and neg_exclude_edges without a word, and the refusal of the
    others named options not given (temporal_strategy, whose default is truthy): probes."""
    data = directed_data()
    graph = qpyg.to_stores(data, "cpu")[1]
    given = qpyg.NeighborSampler(graph, [3, 2], device="cpu")
    for option, said in ((dict(subgraph_type="bidirectional"), "subgraph_type='bidirectional' "
                                                               "(the sampler is 'directional')"),
                         (dict(return_eid=True), "return_eid=True (the sampler returns no"),
                         (dict(replace=True), "replace=True"),
                         (dict(mode="GPU"), "mode='GPU'"),
                         (dict(sampling_generator=torch.Generator()), "sampling_generator"),
                         (dict(weight_attr="w"), "weight_attr='w' (the sampler samples "
                                                 "without weights)"),
                         (dict(disjoint=True), "disjoint=True (the sampler samples one shared "
                                               "subgraph): build")):  # and nothing else named
        with pytest.raises(ValueError, match="NeighborLoader got a neighbor_sampler and sampling "
                                             "options it was not built with: "
                                             + re.escape(said)):
            qpyg.NeighborLoader(data, [3, 2], batch_size=8, device="cpu", neighbor_sampler=given,
                                **option)
    with pytest.raises(ValueError, match=re.escape("neg_exclude_edges=False (the sampler was "
                                                   "built with neg_exclude_edges=True)")):
        qpyg.LinkNeighborLoader(data, [3, 2], batch_size=8, neg_sampling="binary", device="cpu",
                                neighbor_sampler=given, neg_exclude_edges=False)
    data.w = torch.rand(data.num_edges) + 0.1
    weighted = qpyg.NeighborSampler(graph, [3, 2], device="cpu", weights=data.w,
                                    return_eid=True)  # (w is an edge attribute: by e_id)
    next(iter(qpyg.NeighborLoader(data, [3, 2], batch_size=8, device="cpu",
                                  neighbor_sampler=weighted, weight_attr="w")))
    del data.w
    built = qpyg.NeighborSampler(graph, [3, 2], device="cpu", disjoint=True, replace=True,
                                 neg_exclude_edges=False)
    batch = next(iter(qpyg.LinkNeighborLoader(data, [3, 2], batch_size=8, neg_sampling="binary",
                                              device="cpu", neighbor_sampler=built, disjoint=True,
                                              replace=True, neg_exclude_edges=False)))
    assert "batch" in batch


@requires_cuda
@pytest.mark.parametrize("kind", ["node", "link"])
def test_pin_memory_pins_cpu_batches(kind):
    """pin_memory=True was accepted and ignored where the loader draws its batches itself
    (no workers): batches for a GPU came unpinned (a probe)."""
    data = directed_data()
    if kind == "node":
        loader = qpyg.NeighborLoader(data, [3, 2], batch_size=16, device="cpu", pin_memory=True)
    else:
        loader = qpyg.LinkNeighborLoader(data, [3, 2], batch_size=16, device="cpu",
                                         neg_sampling="binary", pin_memory=True)
    batch = next(iter(loader))
    assert batch.x.is_pinned() and batch.n_id.is_pinned() and batch.edge_index.is_pinned()


def test_making_a_loader_draws_nothing_from_pytorchs_generator():
    """The drop-ins' samplers seeded themselves from PyTorch's default generator when made,
    where PyG's loaders draw nothing: making a validation loader changed the training
    loader's batches, and the model's initialization after it (a probe). They draw at their
    first epoch (or, used alone, their first batch) instead."""
    data = directed_data()
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    qpyg.NeighborLoader(data, [3, 2], batch_size=8, device="cpu")
    qpyg.LinkNeighborLoader(data, [3, 2], batch_size=8, device="cpu", neg_sampling="binary")
    assert torch.equal(torch.rand(3), expected)

    def first_epoch(with_another_loader):
        torch.manual_seed(0)
        train = qpyg.NeighborLoader(data, [3, 2], input_nodes=torch.arange(32), batch_size=8,
                                    shuffle=True, device="cpu")
        if with_another_loader:
            qpyg.NeighborLoader(data, [3, 2], input_nodes=torch.arange(8), batch_size=8,
                                device="cpu")
        return [b.n_id.tolist() for b in train]
    assert first_epoch(False) == first_epoch(True)
    # Used alone, a sampler is seeded at its first batch, by torch.manual_seed.
    from torch_geometric.sampler import NodeSamplerInput
    store = qpyg.to_stores(data, "cpu")[1]

    def alone(seed):
        torch.manual_seed(seed)
        sampler = qpyg.NeighborSampler(store, [3, 2], device="cpu", mode="CPU")
        return sampler.sample_from_nodes(NodeSamplerInput(None, torch.zeros(20, dtype=torch.long))
                                         ).node
    assert torch.equal(alone(1), alone(1)) and not torch.equal(alone(1), alone(2))


def test_spawned_workers_sample_and_persistent_ones_see_the_data_change():
    """Both found by a probe. Spawned (and forkserver) workers failed to start: the loader
    and sampler hold torch.Generators, which torch sends as shared-memory descriptors a
    spawned process cannot open. Persistent workers kept sampling the graph and weights of
    the first epoch after the data changed (the main process rebuilt its stores, the
    workers kept their copies)."""
    data = directed_data()
    loader = qpyg.NeighborLoader(data, [3, 2], input_nodes=torch.arange(64), batch_size=16,
                                 device="cpu", num_workers=2, multiprocessing_context="spawn",
                                 sampling_generator=torch.Generator().manual_seed(3))
    batches = list(loader)
    assert len(batches) == 4
    for batch in batches:
        check_batch(data, batch, [3, 2], torch.arange(64))
    data = directed_data()
    data.w = torch.ones(data.num_edges)
    loader = qpyg.NeighborLoader(data, [5, 5], batch_size=50, device="cpu", return_eid=True,
                                 weight_attr="w", num_workers=2, persistent_workers=True)
    list(loader)  # the workers start
    data.w.zero_()
    data.w[::7] = 1.0  # now only every 7th edge may be drawn
    for batch in loader:
        assert bool((batch.e_id % 7 == 0).all())


def test_data_refused_at_an_epoch_and_put_back_is_read_as_it_was():
    """The loader's set-up at an epoch's start set edge rows, graph attributes and the like
    before the checks that refuse the data; data put back as it was then matched its stamp
    again, and the epochs after ran on the refused data's half: edge weights of the refused
    tensor, graph attributes gone, or no e_id left for a given sampler (a probe)."""
    import warnings
    gen = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, 50, (2, 300), generator=gen)
    weight = torch.rand(300, generator=gen) + 0.1
    data = Data(x=torch.randn(50, 8, generator=gen), edge_index=edge_index,
                edge_weight=weight, num_nodes=50)
    data.scale = 3.5
    loader = qpyg.NeighborLoader(data, [3, 2], batch_size=16, weight_attr="edge_weight",
                                 device="cpu", shuffle=False)
    next(iter(loader))
    data.edge_weight = -torch.ones(300)
    with pytest.raises(ValueError, match="every weight must be finite and >= 0"):
        next(iter(loader))
    data.edge_weight = weight
    batch = next(iter(loader))
    assert torch.equal(batch.edge_weight, weight[batch.e_id]) and batch.scale == 3.5
    data.pos = torch.randn(51, 3)  # a row too many: refused
    with pytest.raises(ValueError):
        next(iter(loader))
    del data.pos
    batch = next(iter(loader))
    assert batch.scale == 3.5 and torch.equal(batch.edge_weight, weight[batch.e_id])

    plain = Data(x=torch.randn(50, 8, generator=gen), edge_index=edge_index, num_nodes=50)
    given = qpyg.NeighborSampler(qpyg.to_stores(plain, "cpu")[1], [3, 2], device="cpu",
                                 return_eid=False)
    loader = qpyg.NeighborLoader(plain, [3, 2], batch_size=16, device="cpu",
                                 neighbor_sampler=given)
    next(iter(loader))
    plain.edge_weight = torch.rand(300)
    with warnings.catch_warnings(), pytest.raises(ValueError, match="gathered by edge id"):
        warnings.simplefilter("ignore")
        next(iter(loader))
    del plain.edge_weight
    batch = next(iter(loader))  # (AttributeError: no e_id, at every epoch after)
    assert batch.n_id.numel() > 0 and "e_id" not in batch


@pytest.mark.parametrize("kind", ["node", "link"])
@pytest.mark.parametrize("gone", [True, False])
def test_persistent_workers_stopped_by_a_ctrl_c_are_replaced(kind, gone):
    """A Ctrl-C in a terminal reaches the workers too; a program that caught it and went on
    got "worker exited unexpectedly" (or a FileNotFoundError) at the next epoch, from
    torch's reset of the kept iterator (found by a probe). New workers are started, whether
    the old ones are gone when the epoch begins or still exiting."""
    import signal
    # The workers take Python's Ctrl-C handler from this process, as a terminal's program
    # has it (under a shell's background job, CI's perhaps, SIGINT starts ignored).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        check_workers_replaced(kind, gone)
    finally:
        signal.signal(signal.SIGINT, previous)


def check_workers_replaced(kind, gone):
    import os
    import signal
    data = directed_data()
    if kind == "node":
        loader = qpyg.NeighborLoader(data, [3, 2], input_nodes=torch.arange(64), batch_size=8,
                                     device="cpu", num_workers=2, persistent_workers=True)
    else:
        loader = qpyg.LinkNeighborLoader(data, [3, 2], edge_label_index=data.edge_index[:, :64],
                                         batch_size=8, device="cpu", num_workers=2,
                                         persistent_workers=True)
    for step, _ in enumerate(loader):
        if step == 1:
            break  # the workers have more batches queued
    workers = loader._iterator.iterator._workers
    for worker in workers:
        os.kill(worker.pid, signal.SIGINT)  # as a terminal's Ctrl-C does
    if gone:
        for worker in workers:
            worker.join(30)
        assert not any(worker.is_alive() for worker in workers)
    assert sum(1 for _ in loader) == 8
    assert sum(1 for _ in loader) == 8  # the new workers persist


DROPPED_PERSISTENT_LOADER = """
import gc, torch
from torch_geometric.data import Data
from torch_quiver_ops.pyg import NeighborLoader

def collect(_):
    gc.collect()

if __name__ == "__main__":
    data = Data(x=torch.randn(30, 2), edge_index=torch.randint(30, (2, 90)))
    gc.disable()  # garbage is collected only where this program says
    kept = NeighborLoader(data, [2], batch_size=8, num_workers=2, persistent_workers=True)
    for _ in kept:
        pass
    del kept
    fresh = NeighborLoader(data, [2], batch_size=8, num_workers=1, worker_init_fn=collect)
    print(sum(1 for _ in fresh))
"""


def test_a_dropped_loaders_workers_are_not_shut_down_from_new_workers(tmp_path):
    """A loader with persistent workers, dropped, lives on in its reference cycle until a
    collection; a new loader's workers, forked before it, inherited its iterator and
    collected it there, where torch's shutdown asserted ("can only test a child process", a
    traceback on stderr; a probe). Here the workers collect at their start."""
    import subprocess
    import sys
    script = tmp_path / "dropped.py"
    script.write_text(DROPPED_PERSISTENT_LOADER)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.split() == ["4"], done.stdout + done.stderr
    assert "can only test a child process" not in done.stderr, done.stderr


def test_filter_per_worker_true_warns_that_it_is_ignored():
    """It was taken and dropped silently (a probe): attributes are gathered in the main
    process, from the store on the sampling device."""
    data = directed_data()
    with pytest.warns(UserWarning, match="filter_per_worker=True is ignored"):
        qpyg.NeighborLoader(data, [2], device="cpu", filter_per_worker=True)
    with pytest.warns(UserWarning, match="LinkNeighborLoader gathers"):
        qpyg.LinkNeighborLoader(data, [2], device="cpu", filter_per_worker=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        qpyg.NeighborLoader(data, [2], device="cpu", filter_per_worker=False)


def test_unsupported_arguments_raise_clearly():
    data = directed_data()
    with pytest.raises(ValueError, match="time_attr 't' is not an attribute of data"):
        qpyg.NeighborLoader(data, [2], input_time=torch.zeros(200), time_attr="t", device="cpu")
    with pytest.raises(NotImplementedError, match="directed=False"):
        qpyg.NeighborLoader(data, [2], directed=False, device="cpu")
    with pytest.raises(ValueError, match="no edge types"):
        qpyg.NeighborLoader(HeteroData(), [2], device="cpu")
    with pytest.raises(ValueError, match="heterogeneous"):
        qpyg.NeighborLoader(data, {("a", "to", "a"): [2]}, device="cpu")
    with pytest.raises(NotImplementedError, match="induced"):
        qpyg.NeighborLoader(data, [2], subgraph_type="induced", device="cpu")
    with pytest.raises(TypeError, match="Data"):
        qpyg.NeighborLoader(data.edge_index, [2], device="cpu")
    with pytest.raises(ValueError, match="cannot read cache_size='1x' as a size"):  # on the CPU too
        qpyg.NeighborLoader(data, [2], cache_size="1x", device="cpu")
    # When the loader is made (a mask longer than the graph, too), not at the batch
    # that holds the id somewhere in an epoch.
    with pytest.raises(IndexError, match=r"input_nodes\[1\] = 200 is out of range \[0, "):
        qpyg.NeighborLoader(data, [2], input_nodes=torch.tensor([0, 200]), batch_size=2,
                            device="cpu")
    mask = torch.zeros(data.num_nodes + 3, dtype=torch.bool)
    mask[-1] = True
    with pytest.raises(IndexError, match=r"input_nodes as a bool mask needs one entry per "
                                         r"node \(200\), got shape \(203,\)"):
        qpyg.NeighborLoader(data, [2], input_nodes=mask, batch_size=2, device="cpu")
    # Named when the loader is made, not at the first batch under the sampler's own name
    # (a float id was cut to an integer there).
    with pytest.raises(TypeError, match=r"input_nodes must be 1-D integer node ids or a bool "
                                        r"mask, got torch.float32 of shape \(2,\)"):
        qpyg.NeighborLoader(data, [2], input_nodes=torch.tensor([1.5, 2.0]), device="cpu")
    with pytest.raises(TypeError, match=r"shape \(2, 2\)"):
        qpyg.NeighborLoader(data, [2], input_nodes=torch.arange(4).view(2, 2), device="cpu")
    with pytest.raises(ValueError, match="batch_size must be an int >= 1, got None"):
        qpyg.NeighborLoader(data, [2], batch_size=None, device="cpu")


@pytest.mark.skipif(not (torch.cuda.is_available() and qv.cuda_kernels_built()),
                    reason="needs a CUDA GPU and the CUDA kernels")
def test_gpu_loader_runs_in_the_main_process():
    data = directed_data()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = qpyg.NeighborLoader(data, [2], batch_size=50, num_workers=4,
                                     persistent_workers=True, device=0, mode="GPU")
    assert loader.num_workers == 0
    assert any("num_workers=4 is set to 0" in str(w.message) for w in caught)
    assert len(list(loader)) == 4


def test_pyg_training_loop_learns():
    """A PyG user's loop, unchanged but for the loader: learns the synthetic labels."""
    graph = qv.synthetic.synthetic_graph("tiny", seed=0)
    data = Data(x=graph.x, y=graph.y, edge_index=graph.edge_index)
    torch.manual_seed(0)
    train = qpyg.NeighborLoader(data, [10, 5], input_nodes=graph.train_idx, batch_size=64,
                                shuffle=True, device="cpu")
    test = qpyg.NeighborLoader(data, [10, 5], input_nodes=graph.test_idx, batch_size=256,
                               device="cpu")

    class SAGE(torch.nn.Module):
        def __init__(self, width, classes):
            super().__init__()
            self.conv1, self.conv2 = SAGEConv(width, 64), SAGEConv(64, classes)

        def forward(self, x, edge_index):
            return self.conv2(F.relu(self.conv1(x, edge_index)), edge_index)

    model = SAGE(graph.x.size(1), graph.num_classes)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(5):
        for batch in train:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            optimizer.step()
    correct = total = 0
    with torch.no_grad():
        for batch in test:
            pred = model(batch.x, batch.edge_index)[:batch.batch_size].argmax(-1)
            correct += int((pred == batch.y[:batch.batch_size]).sum())
            total += batch.batch_size
    assert correct / total > 2.0 / graph.num_classes


@pytest.mark.parametrize("mode", MODES)
def test_edge_attributes_ride_with_their_edges(mode):
    data = directed_data()
    gen = torch.Generator().manual_seed(1)
    data.edge_attr = torch.randn(data.num_edges, 8, generator=gen)  # tiered
    data.edge_weight = torch.rand(data.num_edges, generator=gen)   # small rows: whole on GPU
    data.num_classes = 5                                            # graph-level
    data.note = torch.tensor([7, 7, 7])                             # graph-level tensor
    loader = qpyg.NeighborLoader(data, [4, 3], batch_size=32, shuffle=True,
                                 device=device_of(mode), mode=mode)
    seen = 0
    for batch in loader:
        e_id = batch.e_id.cpu()
        ei = batch.edge_index.cpu()
        n_id = batch.n_id.cpu()
        assert torch.equal(data.edge_index[:, e_id], torch.stack([n_id[ei[0]], n_id[ei[1]]]))
        assert torch.equal(batch.edge_attr.cpu(), data.edge_attr[e_id])
        assert torch.equal(batch.edge_weight.cpu(), data.edge_weight[e_id])
        assert batch.edge_attr.device == batch.edge_index.device
        assert batch.num_classes == 5 and torch.equal(batch.note, data.note)
        seen += 1
    assert seen == len(loader)


def test_edge_attributes_need_edge_ids():
    data = directed_data()
    data.edge_attr = torch.randn(data.num_edges, 3)
    stores = qpyg.to_stores(data, "cpu")
    assert stores[0].edge_feature_names == ["edge_attr"]
    sampler = qpyg.NeighborSampler(stores[1], [2], device="cpu", mode="CPU")
    with pytest.raises(ValueError, match="return_eid=True"):
        qpyg.NeighborLoader(stores, [2], neighbor_sampler=sampler, batch_size=8)
    # Bidirectional: a reversed edge carries its edge's id, and so its attributes (PyG's).
    for batch in qpyg.NeighborLoader(data, [3, 2], subgraph_type="bidirectional",
                                     batch_size=16, device="cpu"):
        ends = torch.stack([batch.n_id[batch.edge_index[0]], batch.n_id[batch.edge_index[1]]])
        named = data.edge_index[:, batch.e_id]
        assert bool(((ends == named).all(0) | (ends == named.flip(0)).all(0)).all())
        assert torch.equal(batch.edge_attr, data.edge_attr[batch.e_id])
    # The stores alone: an edge feature put by hand rides along too.
    features, graph = qpyg.FeatureStore("cpu"), qpyg.GraphStore.from_edge_index(data.edge_index)
    features.put_tensor(data.x, group_name=None, attr_name="x", index=None)
    features.put_edge_feature(data.edge_attr * 2, "edge_attr")
    batch = next(iter(qpyg.NeighborLoader((features, graph), [3], batch_size=16,
                                          device="cpu")))
    assert torch.equal(batch.edge_attr, 2 * data.edge_attr[batch.e_id])


def test_a_transform_sees_the_whole_batch_and_runs_last():
    data = directed_data()
    data.edge_attr = torch.randn(data.num_edges, 3)
    data.num_classes = 5
    seen = []

    def transform(batch):
        seen.append(sorted(batch.keys()))
        return batch, "extra"  # PyG lets a transform return anything

    loader = qpyg.NeighborLoader(data, [3], batch_size=16, device="cpu", transform=transform)
    assert loader.transform is transform
    batch, extra = next(iter(loader))
    assert extra == "extra" and {"edge_attr", "num_classes", "e_id", "x"} <= set(seen[0])
    assert torch.equal(batch.edge_attr, data.edge_attr[batch.e_id])


@pytest.mark.parametrize("undirected", [True, False])
def test_a_random_link_split_gives_the_loaders_own_labels(undirected):
    # PyG's recipe: RandomLinkSplit, then LinkNeighborLoader over its train split with its
    # labels. The split's own edge_label / edge_label_index attributes (the whole split's)
    # must not replace the batch's, nor be taken for edge attributes.
    import torch_geometric.transforms as T
    torch.manual_seed(0)
    row, col = random_coo(100, 600, 3)
    data = Data(edge_index=torch.stack([row, col]).long(), x=torch.randn(100, 4), num_nodes=100)
    train, _, _ = T.RandomLinkSplit(is_undirected=undirected,
                                    add_negative_train_samples=False)(data)
    loader = qpyg.LinkNeighborLoader(train, [5, 5], edge_label_index=train.edge_label_index,
                                     edge_label=train.edge_label, neg_sampling_ratio=2.0,
                                     batch_size=16, device="cpu")
    batch = next(iter(loader))
    assert batch.edge_label.numel() == 48 and int(batch.edge_label.sum()) == 16
    assert batch.edge_label_index.shape == (2, 48)
    assert int(batch.edge_label_index.max()) < batch.num_nodes
    pos = batch.edge_label_index[:, batch.edge_label == 1]
    assert torch.equal(batch.n_id[pos], train.edge_label_index[:, batch.input_id])


def test_a_node_loader_gathers_a_per_edge_edge_label_with_its_edges():
    # Edge classification: edge_label with a row per edge is an edge attribute to a node
    # loader (only link loaders write edge_label themselves).
    data = directed_data()
    data.edge_label = torch.randint(0, 3, (data.num_edges,))
    batch = next(iter(qpyg.NeighborLoader(data, [3], batch_size=8, device="cpu")))
    assert torch.equal(batch.edge_label, data.edge_label[batch.e_id])


def test_edge_attributes_pyg_indexes_along_their_last_dimension_are_gathered_along_it():
    # RandomLinkSplit's training split holds edge_label_index with a column per edge: a node
    # loader had left it out of its batches unsaid, where PyG's gathers it with the edges.
    data = directed_data()
    data.edge_label_index = data.edge_index.flip(0) + 7
    data.pair_index = torch.randint(0, 200, (3, data.num_edges))  # PyG: indexed along dim -1
    batch = next(iter(qpyg.NeighborLoader(data, [3], batch_size=8, device="cpu")))
    assert torch.equal(batch.edge_label_index, data.edge_label_index[:, batch.e_id])
    assert torch.equal(batch.pair_index, data.pair_index[:, batch.e_id])
    hetero = HeteroData()
    hetero["u"].x, hetero["i"].x = torch.randn(10, 2), torch.randn(12, 2)
    edges = torch.stack([torch.randint(0, 10, (40,)), torch.randint(0, 12, (40,))])
    hetero["u", "r", "i"].edge_index = edges
    hetero["i", "rev", "u"].edge_index = edges.flip(0)
    hetero["u", "r", "i"].edge_label_index = edges + 100
    batch = next(iter(qpyg.NeighborLoader(hetero, {("u", "r", "i"): [3], ("i", "rev", "u"): [3]},
                                          input_nodes="u", batch_size=4, device="cpu")))
    typed = batch["u", "r", "i"]
    assert torch.equal(typed.edge_label_index, edges[:, typed.e_id] + 100)
    # A link loader writes its own edge_label_index over the data's, and the data's asks
    # for no edge ids (a review: it had forced return_eid, refusing a sampler without it).
    del data.pair_index
    link = next(iter(qpyg.LinkNeighborLoader(data, [3], batch_size=4, device="cpu",
                                             edge_label_index=data.edge_index[:, :8])))
    assert link.edge_label_index.shape == (2, 4) and int(link.edge_label_index.max()) < \
        link.num_nodes
    assert "e_id" not in link
    graph_store = qpyg.to_stores(data, device="cpu")[1]
    own = qpyg.LinkNeighborLoader(data, [3], batch_size=4, device="cpu",
                                  edge_label_index=data.edge_index[:, :8],
                                  neighbor_sampler=qpyg.NeighborSampler(graph_store, [3]))
    assert next(iter(own)).edge_label_index.shape == (2, 4)
    # NumPy attributes of another byte order are copied, as reversed views are.
    data.y = np.arange(data.num_nodes).astype(">i8")
    batch = next(iter(qpyg.NeighborLoader(data, [3], batch_size=8, device="cpu")))
    assert torch.equal(batch.y, batch.n_id)


def test_node_attributes_pyg_indexes_along_another_dimension_are_refused():
    data = directed_data()
    data.node_index = torch.randint(0, 200, (2, data.num_nodes))  # PyG: indexed along dim -1
    with pytest.raises(NotImplementedError, match="'node_index' .* along dimension -1"):
        qpyg.NeighborLoader(data, [3], batch_size=8, device="cpu")


# ---- link prediction ----

def link_batches(data, mode, **kwargs):
    loader = qpyg.LinkNeighborLoader(data, [3, 2], device=device_of(mode), mode=mode,
                                     **kwargs)
    return loader, list(loader)


@pytest.mark.parametrize("mode", MODES)
def test_link_batches_hold_their_seed_edges_and_binary_negatives(mode):
    data = directed_data()
    data.edge_attr = torch.randn(data.num_edges, 4)
    seeds = data.edge_index[:, torch.randperm(data.num_edges)[:300]]
    loader, batches = link_batches(data, mode, edge_label_index=seeds, batch_size=64,
                                   shuffle=True, neg_sampling="binary")
    assert len(batches) == 5
    seen = []
    for batch in batches:
        n_id = batch.n_id.cpu()
        label_index = batch.edge_label_index.cpu()
        label = batch.edge_label.cpu()
        positives = int((label == 1).sum())
        assert label_index.shape == (2, 2 * positives) and label.tolist() == \
            [1.0] * positives + [0.0] * positives  # 1:1 negatives, PyG's layout
        assert torch.equal(n_id[label_index[:, :positives]], seeds[:, batch.input_id.cpu()])
        seen.append(batch.input_id.cpu())
        assert batch.edge_label_index.device == batch.edge_index.device
        assert torch.equal(batch.edge_attr.cpu(), data.edge_attr[batch.e_id.cpu()])
        # Every endpoint is a seed of the sampling: its sampled neighbors are in the batch.
        ei = batch.edge_index.cpu()
        assert edge_set(torch.stack([n_id[ei[0]], n_id[ei[1]]])) <= edge_set(data.edge_index)
        endpoints = set(n_id[label_index.flatten()].tolist())
        assert endpoints <= set(n_id[:len(endpoints)].tolist())
    assert torch.equal(torch.sort(torch.cat(seen)).values, torch.arange(300))


def test_link_negatives_are_uniform_over_their_sources_non_neighbors():
    """Each binary negative's destination is uniform over the nodes its source has no edge
    to. (This test had taken them for uniform over all nodes, which on this dense graph
    they are not: nodes of high in-degree are drawn less, and it passed by the luck of the
    stream it was given.)"""
    from scipy.stats import chisquare
    num_nodes = 40
    data = directed_data(num_nodes=num_nodes, num_edges=300)
    neighbors = [set() for _ in range(num_nodes)]
    for src, dst in data.edge_index.t().tolist():
        neighbors[src].add(dst)
    torch.manual_seed(0)
    loader, batches = link_batches(data, "CPU", batch_size=300, neg_sampling=dict(
        mode="binary", amount=20))
    counts, expected = torch.zeros(num_nodes), torch.zeros(num_nodes)
    for batch in batches:
        pairs = batch.n_id[batch.edge_label_index[:, batch.edge_label == 0]]
        counts += torch.bincount(pairs[1], minlength=num_nodes)
        for src in pairs[0].tolist():
            allowed = [v for v in range(num_nodes) if v not in neighbors[src]]
            expected[allowed] += 1 / len(allowed)
    p = chisquare(counts.numpy(), (expected * counts.sum() / expected.sum()).numpy()).pvalue
    assert p > P_VALUE_FLOOR, (p, counts.tolist())


@pytest.mark.parametrize("mode", MODES)
def test_link_triplets_follow_pygs_layout(mode):
    data = directed_data()
    seeds = data.edge_index[:, :128]
    loader, batches = link_batches(data, mode, edge_label_index=seeds, batch_size=32,
                                   neg_sampling=dict(mode="triplet", amount=3))
    for batch in batches:
        n_id = batch.n_id.cpu()
        src, pos = batch.src_index.cpu(), batch.dst_pos_index.cpu()
        neg = batch.dst_neg_index.cpu()
        assert neg.shape == (32, 3)
        assert torch.equal(torch.stack([n_id[src], n_id[pos]]), seeds[:, batch.input_id.cpu()])
        assert int(neg.max()) < n_id.numel()


def test_seed_edges_over_a_pair_of_stores_in_pygs_typed_form():
    """Over a (FeatureStore, GraphStore) pair PyG takes (edge type, ids), None the type."""
    data = directed_data()
    stores = qpyg.to_stores(data, "cpu")
    seeds = data.edge_index[:, :8]
    batch = next(iter(qpyg.LinkNeighborLoader(stores, [2], edge_label_index=(None, seeds),
                                              batch_size=8, device="cpu")))
    assert torch.equal(batch.n_id[batch.edge_label_index], seeds)


def test_link_loader_refuses_bad_input():
    data = directed_data()
    with pytest.raises(IndexError, match="edge_label_index holds node 200"):
        qpyg.LinkNeighborLoader(data, [2], edge_label_index=torch.tensor([[0, 1], [2, 200]]),
                                device="cpu")
    with pytest.raises(ValueError, match=r"\[2, num_edges\]"):
        qpyg.LinkNeighborLoader(data, [2], edge_label_index=torch.tensor([0, 1, 2]),
                                device="cpu")
    with pytest.raises(ValueError, match="edge_label has 3 labels for 2 seed edges"):
        qpyg.LinkNeighborLoader(data, [2], edge_label_index=torch.tensor([[0, 1], [2, 3]]),
                                edge_label=torch.ones(3), device="cpu")
    with pytest.raises(ValueError, match="time_attr 'time' is not an attribute of data"):
        qpyg.LinkNeighborLoader(data, [2], edge_label_time=torch.zeros(2500),
                                time_attr="time", device="cpu")
    with pytest.raises(ValueError, match="edge_label_time needs temporal sampling"):
        qpyg.LinkNeighborLoader(data, [2], edge_label_time=torch.zeros(2500), device="cpu")
    with pytest.raises(ValueError, match="one label per seed edge, got a scalar"):
        qpyg.LinkNeighborLoader(data, [2], edge_label_index=torch.tensor([[0, 1], [2, 3]]),
                                edge_label=torch.tensor(1.0), device="cpu")


def test_link_loader_takes_narrow_ids_and_vector_labels():
    """Found by a probe: int16 seed edges failed at the first batch, and an [E, k] edge_label
    (multi-label edges, regression targets), which PyG carries through, was refused."""
    data = directed_data()
    seeds = torch.tensor([[0, 1, 5], [2, 3, 9]])
    labels = torch.rand(3, 4)
    loader = qpyg.LinkNeighborLoader(data, [2], edge_label_index=seeds.to(torch.int16),
                                     edge_label=labels, batch_size=3, device="cpu")
    batch = next(iter(loader))
    assert torch.equal(batch.n_id[batch.edge_label_index], seeds[:, batch.input_id])
    assert torch.equal(batch.edge_label, labels[batch.input_id])
    classes = torch.tensor([[0, 1, 0, 2], [1, 1, 0, 0], [2, 0, 1, 1]])
    binary = qpyg.LinkNeighborLoader(data, [2], edge_label_index=seeds, edge_label=classes,
                                     neg_sampling="binary", batch_size=3, device="cpu")
    batch = next(iter(binary))
    assert batch.edge_label.shape == (6, 4)
    # PyG's rule: labels whose least is 0 move up by one, so that 0 means a negative.
    assert torch.equal(batch.edge_label[:3], classes[batch.input_id] + 1)
    assert not batch.edge_label[3:].any()


def test_disjoint_link_trees_are_named_by_their_pair_on_every_path():
    """Both ends of pair n (negatives after the positives) in tree n % positives, whose time
    they take, whichever path samples: node times went through PyG's edge_sample, whose
    tree % positives put a binary negative's destination in another pair's tree than its
    source (a probe)."""
    torch.manual_seed(0)
    n = 20
    data = Data(edge_index=torch.randint(n, (2, 80)), num_nodes=n)
    data.node_time = torch.zeros(n, dtype=torch.long)
    data.edge_time = torch.zeros(80, dtype=torch.long)
    seeds, times = data.edge_index[:, :4], torch.tensor([10, 11, 12, 13])
    for options in (dict(disjoint=True), dict(time_attr="edge_time", edge_label_time=times),
                    dict(time_attr="node_time", edge_label_time=times)):
        batch = next(iter(qpyg.LinkNeighborLoader(
            data, [1], edge_label_index=seeds, neg_sampling=("binary", 0.5), batch_size=4,
            device="cpu", **options)))
        for end in batch.edge_label_index:
            assert batch.batch[end].tolist() == [0, 1, 2, 3, 0, 1], options
        if "time_attr" in options:
            assert batch.edge_label_time.tolist() == [10, 11, 12, 13, 10, 11]


def test_edge_time_sampling_without_input_time_is_named_at_construction():
    """On a Data, a time_attr of edge times without input_time failed at the first batch,
    naming the sampler's seed_time (a HeteroData named input_time at once; from a probe)."""
    data = directed_data()
    data.edge_time = torch.arange(data.edge_index.size(1))
    with pytest.raises(ValueError, match="by edge time needs input_time"):
        qpyg.NeighborLoader(data, [2], time_attr="edge_time", device="cpu")
    loader = qpyg.NeighborLoader(data, [2], time_attr="edge_time", batch_size=4,
                                 input_nodes=torch.arange(4), input_time=torch.full((4,), 10**9),
                                 device="cpu")
    assert next(iter(loader)).batch_size == 4


def test_a_graph_without_edges_or_nodes_keeps_its_empty_tables():
    """Empty [0, F] tables (no nodes, no edges) load: 0 batches, not an IndexError."""
    data = Data(x=torch.empty(0, 8), edge_index=torch.empty(2, 0, dtype=torch.long),
                edge_attr=torch.empty(0, 4))
    assert len(list(qpyg.NeighborLoader(data, [2], batch_size=4, device="cpu"))) == 0
    data = Data(x=torch.randn(5, 8), edge_index=torch.empty(2, 0, dtype=torch.long),
                edge_attr=torch.empty(0, 4))
    batch = next(iter(qpyg.NeighborLoader(data, [2], batch_size=5, device="cpu")))
    assert torch.equal(batch.x, data.x) and batch.edge_attr.shape == (0, 4)


@pytest.mark.parametrize("link", [False, True])
def test_an_epochs_iterator_has_its_length_without_workers(link):
    """len(iter(loader)) failed with "object of type 'generator' has no len()" when the
    batches were drawn without the DataLoader (no workers), where PyG's and torch's
    iterators have one (a probe)."""
    data = directed_data()
    loader = (qpyg.LinkNeighborLoader(data, [3], batch_size=50, device="cpu") if link
              else qpyg.NeighborLoader(data, [3], batch_size=7, device="cpu"))
    epoch = iter(loader)
    assert len(epoch) == len(loader) > 1
    assert sum(1 for _ in epoch) == len(loader)


def test_flags_and_generators_of_the_wrong_kind_are_named():
    """A probe: disjoint="no" sampled disjoint trees, neg_exclude_edges="no" was kept as
    True (or as 'no'), and generator=5 was taken and failed at the first batch."""
    edge_index = torch.tensor([[0, 1, 2, 3, 0], [1, 2, 3, 0, 2]])
    data = Data(x=torch.zeros(4, 4), edge_index=edge_index, y=torch.arange(4))
    with pytest.raises(TypeError, match="disjoint must be True or False, got 'no'"):
        qpyg.NeighborLoader(data, [2], batch_size=2, mode="CPU", disjoint="no")
    with pytest.raises(TypeError, match="neg_exclude_edges must be True or False, got 'no'"):
        qpyg.LinkNeighborLoader(data, [2], batch_size=2, mode="CPU", neg_sampling="binary",
                                neg_exclude_edges="no")
    topo = qv.CSRTopo(edge_index)
    with pytest.raises(TypeError, match="neg_exclude_edges must be True or False, got 'no'"):
        qpyg.NeighborSampler(topo, [2], mode="CPU", neg_exclude_edges="no")
    with pytest.raises(TypeError, match="generator must be a torch.Generator or None, got 5"):
        qpyg.NeighborSampler(topo, [2], mode="CPU", generator=5)
