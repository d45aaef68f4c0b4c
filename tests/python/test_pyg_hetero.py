"""torch_quiver_ops.pyg on heterogeneous graphs: HeteroData batches from NeighborLoader and
LinkNeighborLoader with every field PyG's loaders give, typed stores, the shared GPU
cache budget, and a to_hetero(GraphSAGE) model training on the batches, on every placement."""
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import HeteroData
from torch_geometric.nn import SAGEConv, to_hetero

from torch_quiver_ops import pyg as qpyg
from reference import picks_per_target

WRITES = ("author", "writes", "paper")
CITES = ("paper", "cites", "paper")
HAS = ("paper", "has", "field")


def device_of(mode):
    return torch.device("cpu") if mode == "CPU" else torch.device("cuda")


def hetero_data(seed=0, papers=60, authors=40, fields=6):
    gen = torch.Generator().manual_seed(seed)
    d = HeteroData()
    d["paper"].x = torch.randn(papers, 8, generator=gen)
    d["paper"].y = (d["paper"].x[:, 0] > 0).long()
    d["paper"].time = torch.randint(100, (papers,), generator=gen)
    d["author"].x = torch.randn(authors, 8, generator=gen)
    d["author"].time = torch.randint(100, (authors,), generator=gen)
    d["field"].num_nodes = fields
    d["field"].time = torch.zeros(fields, dtype=torch.long)
    d[WRITES].edge_index = torch.stack([torch.randint(authors, (150,), generator=gen),
                                        torch.randint(papers, (150,), generator=gen)])
    d["paper", "rev_writes", "author"].edge_index = d[WRITES].edge_index.flip(0)
    d[CITES].edge_index = torch.randint(papers, (2, 200), generator=gen)
    d[CITES].edge_attr = torch.randn(200, 3, generator=gen)
    d[HAS].edge_index = torch.stack([torch.arange(papers), torch.arange(papers) % fields])
    d["field", "rev_has", "paper"].edge_index = d[HAS].edge_index.flip(0)
    for et in d.edge_types:
        d[et].w = torch.rand(d[et].edge_index.size(1), generator=gen) + 0.1
    return d


def check_batch(batch, data, input_type):
    for t in batch.node_types:
        n_id = batch[t].n_id.cpu()
        assert batch[t].num_nodes == n_id.numel() == sum(batch[t].num_sampled_nodes)
        for key in ("x", "y", "time"):
            if key in data[t]:
                assert torch.equal(batch[t][key].cpu(), data[t][key][n_id]), (t, key)
    for et in batch.edge_types:
        src, _, dst = et
        ei, e_id = batch[et].edge_index.cpu(), batch[et].e_id.cpu()
        assert ei.size(1) == e_id.numel() == sum(batch[et].num_sampled_edges)
        want = data[et].edge_index[:, e_id]
        assert torch.equal(batch[src].n_id.cpu()[ei[0]], want[0]), et
        assert torch.equal(batch[dst].n_id.cpu()[ei[1]], want[1]), et
        if "edge_attr" in data[et]:
            assert torch.equal(batch[et].edge_attr.cpu(), data[et].edge_attr[e_id])
    b = batch[input_type]
    assert torch.equal(b.n_id[:b.batch_size].cpu(), b.input_id.cpu())


def test_neighbor_loader_gives_pyg_hetero_batches(mode):
    data = hetero_data()
    loader = qpyg.NeighborLoader(data, {et: [3, 2] for et in data.edge_types},
                                 input_nodes=("paper", torch.arange(50)), batch_size=16,
                                 shuffle=True, device=device_of(mode), mode=mode,
                                 cache_size="30%", return_eid=True)
    seen = []
    for batch in loader:
        assert batch["paper"].x.device.type == device_of(mode).type
        check_batch(batch, data, "paper")
        seen.append(batch["paper"].input_id.cpu())
    assert torch.equal(torch.cat(seen).sort().values, torch.arange(50))


def test_per_edge_type_fanouts_and_node_type_input(mode):
    data = hetero_data(1)
    fanouts = {WRITES: [2, 0], CITES: [1, 1], HAS: [0, 0],
               ("paper", "rev_writes", "author"): [0, 4],
               ("field", "rev_has", "paper"): [-1, 0]}
    loader = qpyg.NeighborLoader(data, fanouts, input_nodes="paper", batch_size=60,
                                 device=device_of(mode), mode=mode)
    batch = next(iter(loader))
    check_batch(batch, data, "paper")
    assert batch[HAS].num_sampled_edges == [0, 0]
    assert batch[WRITES].num_sampled_edges[1] == 0
    # Hop 0 expands the 60 papers: at most 2 writes each, all their fields' papers.
    assert batch[WRITES].num_sampled_edges[0] <= 120
    assert batch[("field", "rev_has", "paper")].num_sampled_edges[0] == 60  # each paper's one
    # every target of a hop got min(in-degree, that type's fanout) edges, all for -1
    for et, fanout in fanouts.items():
        ei = batch[et].edge_index.cpu()
        in_degree = torch.bincount(data[et].edge_index[1], minlength=data[et[2]].num_nodes)
        bounds = [0] + torch.tensor(batch[et[2]].num_sampled_nodes).cumsum(0).tolist()
        start = 0
        for hop, count in enumerate(batch[et].num_sampled_edges):
            targets = ei[1, start:start + count]  # the nodes the previous hop added
            start += count
            low, high = bounds[hop], bounds[hop + 1]
            got = torch.bincount(targets - low, minlength=high - low)
            degree = in_degree[batch[et[2]].n_id.cpu()[low:high]]
            assert torch.equal(got, picks_per_target(degree, fanout[hop])), (et, hop)


def test_pyg_num_neighbors_forms(mode):
    """PyG's NumNeighbors (its default for the types it leaves out) and its string keys."""
    from torch_geometric.sampler.base import NumNeighbors
    data = hetero_data(1)
    string_keys = {"__".join(et): [2] for et in data.edge_types}
    for num_neighbors in (NumNeighbors({WRITES: [2]}, default=[0]), string_keys,
                          NumNeighbors(string_keys)):
        loader = qpyg.NeighborLoader(data, num_neighbors, input_nodes="paper", batch_size=20,
                                     device=device_of(mode), mode=mode)
        batch = next(iter(loader))
        check_batch(batch, data, "paper")
        if isinstance(num_neighbors, NumNeighbors) and num_neighbors.default == [0]:
            assert batch[WRITES].num_sampled_edges[0] > 0
            assert all(sum(batch[et].num_sampled_edges) == 0
                       for et in batch.edge_types if et != WRITES)


def test_a_node_type_without_attributes_is_counted_from_its_edges(mode):
    data = HeteroData()
    data["paper"].x = torch.randn(5, 4)
    writes = torch.tensor([[0, 7, 3], [0, 1, 4]])
    data[WRITES].edge_index = writes
    data["paper", "rev_writes", "author"].edge_index = writes.flip(0)
    loader = qpyg.NeighborLoader(data, [2], input_nodes="paper", batch_size=5,
                                 device=device_of(mode), mode=mode)
    assert sorted(next(iter(loader))["author"].n_id.tolist()) == [0, 3, 7]


def test_temporal_link_negatives_exist_by_their_pair_time(mode):
    """As PyG's: with node times a negative is a node already there at its pair's time;
    without edge_label_time a pair's time is its source's node time."""
    gen = torch.Generator().manual_seed(0)
    data = HeteroData()
    data["paper"].x = torch.randn(50, 4, generator=gen)
    data["paper"].time = torch.arange(50) * 2  # papers appear over times 0..98
    data["author"].x = torch.randn(30, 4, generator=gen)
    data["author"].time = torch.zeros(30, dtype=torch.long)
    writes = torch.stack([torch.randint(30, (100,), generator=gen),
                          torch.randint(50, (100,), generator=gen)])
    data[WRITES].edge_index = writes
    data["paper", "rev_writes", "author"].edge_index = writes.flip(0)
    at_ten = torch.full((100,), 10)
    for neg in (dict(mode="binary", amount=5), dict(mode="triplet", amount=3)):
        loader = qpyg.LinkNeighborLoader(data, [2], edge_label_index=WRITES,
                                         edge_label_time=at_ten, time_attr="time",
                                         neg_sampling=neg, batch_size=100,
                                         device=device_of(mode), mode=mode)
        batch = next(iter(loader))
        n_id = batch["paper"].n_id.cpu()
        if neg["mode"] == "binary":
            label_index, label = batch[WRITES].edge_label_index.cpu(), batch[WRITES].edge_label
            negatives = n_id[label_index[1][label.cpu() == 0]]
        else:
            negatives = n_id[batch["paper"].dst_neg_index.cpu()].view(-1)
        assert negatives.numel() and int((data["paper"].time[negatives] > 10).sum()) == 0
    loader = qpyg.LinkNeighborLoader(data, [2], edge_label_index=WRITES, time_attr="time",
                                     neg_sampling="binary", batch_size=10,
                                     device=device_of(mode), mode=mode)
    assert next(iter(loader))[WRITES].edge_label_time.tolist() == [0] * 20


def test_temporal_and_weighted_hetero_loader(mode):
    data = hetero_data(2)
    gen = torch.Generator().manual_seed(3)
    for et in data.edge_types:  # half the edges masked by weight 0
        data[et].w[torch.rand(data[et].w.numel(), generator=gen) < 0.5] = 0.0
    loader = qpyg.NeighborLoader(data, [3, 3], input_nodes=("paper", torch.arange(30)),
                                 batch_size=10, time_attr="time", weight_attr="w",
                                 device=device_of(mode), mode=mode)
    for batch in loader:
        check_batch(batch, data, "paper")
        seed_time = batch["paper"].time[:batch["paper"].batch_size]
        for t in batch.node_types:
            if batch[t].num_nodes:
                tree_time = seed_time[batch[t].batch]
                assert bool((batch[t].time <= tree_time).all()), t
        for et in batch.edge_types:
            assert bool((data[et].w[batch[et].e_id.cpu()] > 0).all()), et
    # One heavy in-edge among 20: drawn 98% of the time (5% if the weights were ignored).
    star = HeteroData()
    star["author"].x, star["paper"].x = torch.randn(20, 2), torch.randn(1, 2)
    star["author"].time = torch.zeros(20, dtype=torch.long)
    star["paper"].time = torch.ones(1, dtype=torch.long)
    star[WRITES].edge_index = torch.stack([torch.arange(20), torch.zeros(20, dtype=torch.long)])
    star[WRITES].w = torch.full((20,), 0.01)
    star[WRITES].w[7] = 10.0
    batch = next(iter(qpyg.NeighborLoader(
        star, [1], input_nodes=("paper", torch.zeros(400, dtype=torch.long)), batch_size=400,
        time_attr="time", weight_attr="w", device=device_of(mode), mode=mode)))
    picked = star[WRITES].edge_index[0, batch[WRITES].e_id.cpu()]
    assert picked.numel() == 400 and (picked == 7).float().mean() > 0.9


def test_time_on_some_node_types_samples_the_others_regardless(mode):
    # As PyG with pyg-lib: node times when any node type has them; a type without (here
    # "field", an entity table) is sampled whatever the seed's time; its seeds need
    # input_time.
    data = hetero_data(3)
    del data["field"].time
    data["paper"].time = torch.randint(50, 100, (60,), generator=torch.Generator().manual_seed(4))
    loader = qpyg.NeighborLoader(data, [4, 4], input_nodes=("paper", torch.arange(60)),
                                 batch_size=20, time_attr="time", device=device_of(mode),
                                 mode=mode)
    fields = 0
    for batch in loader:
        check_batch(batch, data, "paper")
        seed_time = batch["paper"].time[:batch["paper"].batch_size]
        for t in ("paper", "author"):
            if batch[t].num_nodes:
                assert bool((batch[t].time <= seed_time[batch[t].batch]).all()), t
        fields += batch["field"].num_nodes
    assert fields > 0  # every paper has a field, reached whatever the time
    with pytest.raises(ValueError, match="node type 'field' has no node times.*give input_time"):
        qpyg.NeighborLoader(data, [2], input_nodes="field", batch_size=4, time_attr="time",
                            device=device_of(mode), mode=mode)  # named when built
    batch = next(iter(qpyg.NeighborLoader(data, [2], input_nodes="field", batch_size=6,
                                          input_time=torch.full((6,), 75), time_attr="time",
                                          device=device_of(mode), mode=mode)))
    assert bool((batch["paper"].time <= 75).all())
    with pytest.raises(ValueError, match=r"temporal_strategy='last' needs times on every node "
                                         r"type that is a neighbor .*; \['field'\]"):
        qpyg.NeighborLoader(data, [2], input_nodes="paper", time_attr="time", device="cpu",
                            temporal_strategy="last")
    # An untimed type that is no edge's source is never a neighbor: "last" is fine.
    leaf = data.clone()
    leaf["venue"].num_nodes = 3
    leaf["paper", "in", "venue"].edge_index = torch.tensor([[0, 1], [2, 2]])
    del leaf["field"]
    for et in [et for et in leaf.edge_types if "field" in (et[0], et[2])]:
        del leaf[et]
    batch = next(iter(qpyg.NeighborLoader(leaf, [3, 3], input_nodes=("paper", torch.arange(20)),
                                          batch_size=20, time_attr="time", device="cpu",
                                          temporal_strategy="last")))
    assert bool((batch["paper"].time <= batch["paper"].time[:20][batch["paper"].batch]).all())
    by_edge = hetero_data(3)
    for et in by_edge.edge_types:
        by_edge[et].stamp = torch.zeros(by_edge[et].edge_index.size(1), dtype=torch.long)
    with pytest.raises(ValueError, match="by edge time needs input_time"):
        qpyg.NeighborLoader(by_edge, [2], input_nodes="paper", time_attr="stamp",
                            device="cpu")
    data["paper"].time = data["paper"].time.float()
    with pytest.raises(TypeError, match="time_attr='time' of 'paper' must hold integer times"):
        qpyg.NeighborLoader(data, [2], input_nodes="paper", time_attr="time", device="cpu")
    data["paper", "cites", "paper"].time = torch.zeros(200, dtype=torch.long)
    with pytest.raises(ValueError, match="names both node and edge attributes"):
        qpyg.NeighborLoader(data, [2], input_nodes="paper", time_attr="time", device="cpu")


def test_link_loader_on_an_edge_type(mode):
    data = hetero_data(3)
    true = set(map(tuple, data[WRITES].edge_index.t().tolist()))
    loader = qpyg.LinkNeighborLoader(data, [2, 2], edge_label_index=WRITES,
                                     neg_sampling="binary", batch_size=32,
                                     device=device_of(mode), mode=mode)
    for batch in loader:
        eli, label = batch[WRITES].edge_label_index.cpu(), batch[WRITES].edge_label.cpu()
        assert eli.size(1) == label.numel() and int(label.sum()) == label.numel() // 2
        src = batch["author"].n_id.cpu()[eli[0]]
        dst = batch["paper"].n_id.cpu()[eli[1]]
        for s, t, lab in zip(src.tolist(), dst.tolist(), label.tolist()):
            assert ((s, t) in true) == (lab == 1)  # negatives kept off the true edges
    triplets = qpyg.LinkNeighborLoader(data, [2], edge_label_index=(CITES, None),
                                       neg_sampling=dict(mode="triplet", amount=3),
                                       batch_size=20, device=device_of(mode), mode=mode)
    batch = next(iter(triplets))
    p = batch["paper"]
    assert p.src_index.numel() == p.dst_pos_index.numel() == 20
    assert tuple(p.dst_neg_index.shape) == (20, 3)
    pairs = set(map(tuple, data[CITES].edge_index.t().tolist()))
    sources = p.n_id.cpu()[p.src_index.cpu()].tolist()
    for s, t in zip(sources, p.n_id.cpu()[p.dst_pos_index.cpu()].tolist()):
        assert (s, t) in pairs
    for s, row in zip(sources, p.n_id.cpu()[p.dst_neg_index.cpu()].tolist()):
        assert not any((s, t) in pairs for t in row)
    uniform = qpyg.LinkNeighborLoader(data, [2], edge_label_index=WRITES, batch_size=150,
                                      neg_sampling=dict(mode="binary", amount=20),
                                      neg_exclude_edges=False, device=device_of(mode),
                                      mode=mode)
    batch = next(iter(uniform))
    eli, label = batch[WRITES].edge_label_index.cpu(), batch[WRITES].edge_label.cpu()
    pairs = zip(batch["author"].n_id.cpu()[eli[0]].tolist(),
                batch["paper"].n_id.cpu()[eli[1]].tolist(), label.tolist())
    assert sum((s, t) in true for s, t, lab in pairs if lab == 0) > 0  # PyG's rule


@pytest.mark.parametrize("edge_type", [WRITES, CITES])
def test_temporal_and_disjoint_link_loaders(mode, edge_type):
    data = hetero_data(9)
    src_type, _, dst_type = edge_type
    times = torch.randint(30, 100, (data[edge_type].edge_index.size(1),))
    loader = qpyg.LinkNeighborLoader(data, [3, 2], edge_label_index=edge_type,
                                     edge_label_time=times, time_attr="time",
                                     neg_sampling="binary", batch_size=16,
                                     device=device_of(mode), mode=mode)
    for batch in loader:
        b = batch[edge_type]
        eli, label = b.edge_label_index.cpu(), b.edge_label.cpu()
        num_pos = int(label.sum())
        # Each pair's endpoints grow their own trees, keyed by the pair (% positives).
        src_batch = batch[src_type].batch.cpu()[eli[0]]
        dst_batch = batch[dst_type].batch.cpu()[eli[1]]
        assert torch.equal(src_batch, dst_batch)
        assert torch.equal(src_batch, torch.arange(eli.size(1)) % num_pos)
        pair_time = times[b.input_id.cpu()]
        for t in batch.node_types:
            if batch[t].num_nodes == 0:
                continue
            tree = batch[t].batch.cpu()
            node_time = batch[t].time.cpu()
            # No sampled node is newer than its tree's seed edge (seeds themselves aside).
            seeds_here = set(eli[0].tolist()) if t == src_type else set()
            seeds_here |= set(eli[1].tolist()) if t == dst_type else set()
            sampled = torch.tensor([i not in seeds_here for i in range(tree.numel())])
            assert bool((node_time[sampled] <= pair_time[tree[sampled]]).all()), t
    plain = qpyg.LinkNeighborLoader(data, [3], edge_label_index=WRITES, disjoint=True,
                                    neg_sampling=dict(mode="triplet", amount=2),
                                    batch_size=8, device=device_of(mode), mode=mode)
    batch = next(iter(plain))
    paper = batch["paper"]
    assert tuple(paper.dst_neg_index.shape) == (8, 2)
    # Disjoint: each source and destination is its own tree's seed.
    assert torch.equal(batch["author"].batch[batch["author"].src_index].cpu(), torch.arange(8))
    assert torch.equal(paper.batch[paper.dst_neg_index].cpu(),
                       torch.arange(8).repeat_interleave(2).view(8, 2))


def test_shared_cache_budget_ranks_rows_by_reads_per_byte():
    degree = {"a": torch.tensor([10, 1, 5]), "b": torch.tensor([8, 8, 0, 3])}
    # a's rows take 4 bytes, b's 2: scores a = 2.5, .25, 1.25; b = 4, 4, 0, 1.5.
    rows = qpyg.split_cache_budget(degree, {"a": 4, "b": 2}, budget=9)
    assert rows == {"a": 1, "b": 2}  # b0, b1 (4 bytes), a0 (4): 8 <= 9; b3 next would pass
    assert qpyg.split_cache_budget(degree, {"a": 4, "b": 2}, budget=0) == {"a": 0, "b": 0}
    assert sum(qpyg.split_cache_budget(degree, {"a": 4, "b": 2}, budget=1 << 20).values()) == 7


def test_a_removed_edge_types_size_goes_with_it():
    """Node counts from a size put with an edge type had stayed after it was removed: put
    again with the right size, sampling and negatives were sized for the wrong one."""
    graph = qpyg.HeteroGraphStore()
    edges = torch.tensor([[0, 1, 2], [3, 4, 5]])
    graph.put_edge_index(edges, edge_type=("a", "to", "b"), layout="coo", size=(1000, 1000))
    assert graph.num_nodes_dict == {"a": 1000, "b": 1000}
    graph.remove_edge_index(edge_type=("a", "to", "b"), layout="coo")
    graph.put_edge_index(edges, edge_type=("a", "to", "b"), layout="coo", size=(30, 40))
    assert graph.num_nodes_dict == {"a": 30, "b": 40}
    given = qpyg.HeteroGraphStore({"a": 50})  # counts given at construction stay
    given.put_edge_index(edges, edge_type=("a", "to", "b"), layout="coo", size=(30, 40))
    assert given.num_nodes_dict == {"a": 50, "b": 40}


@pytest.mark.parametrize("cache_size", ["25%", 600])
def test_hetero_stores_share_one_budget(mode, cache_size):
    data = hetero_data(4)
    features, graph = qpyg.to_stores(data, device_of(mode), cache_size=cache_size)
    assert isinstance(graph, qpyg.HeteroGraphStore)
    rows = features.cache_rows
    total = data["paper"].x.nbytes + data["author"].x.nbytes
    budget = total // 4 if cache_size == "25%" else cache_size
    used = rows[("paper", "x")] * 32 + rows[("author", "x")] * 32
    if mode == "CPU":
        assert used == 0
    else:
        assert 0 < used <= budget and budget - used < 32
    ids = torch.tensor([5, 0, 59])
    assert torch.equal(features.get_tensor("paper", "x", ids).cpu(), data["paper"].x[ids])
    assert torch.equal(features.get_tensor("paper", "y", ids).cpu(), data["paper"].y[ids])
    attrs = {(a.group_name, a.attr_name) for a in features.get_all_tensor_attrs()}
    assert ("author", "x") in attrs and ("paper", "y") in attrs
    for layout in ("coo", "csr", "csc"):
        back = graph.get_edge_index(edge_type=WRITES, layout=layout)
        if layout == "coo":
            assert torch.equal(torch.stack(back), data[WRITES].edge_index)
        else:
            assert back[0].numel() > 0
    assert {a.edge_type for a in graph.get_all_edge_attrs()} == set(data.edge_types)


def test_to_hetero_graphsage_trains(mode):
    torch.manual_seed(0)
    data = hetero_data(5, papers=300, authors=200, fields=10)
    device = device_of(mode)
    loader = qpyg.NeighborLoader(data, [5, 5], input_nodes=("paper", torch.arange(300)),
                                 batch_size=64, shuffle=True, device=device, mode=mode)

    class GNN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = SAGEConv((-1, -1), 32)
            self.conv2 = SAGEConv((-1, -1), 2)

        def forward(self, x, edge_index):
            return self.conv2(self.conv1(x, edge_index).relu(), edge_index)

    model = to_hetero(GNN(), data.metadata(), aggr="sum").to(device)
    field_embedding = torch.nn.Embedding(10, 8).to(device)  # fields have no features
    batch = next(iter(loader))

    def inputs(batch):
        x = {t: batch[t].x for t in ("paper", "author")}
        x["field"] = field_embedding(batch["field"].n_id)
        return x

    with torch.no_grad():
        model(inputs(batch), batch.edge_index_dict)  # lazy shapes
    optimizer = torch.optim.Adam(list(model.parameters()) + list(field_embedding.parameters()),
                                 lr=0.02)
    losses = []
    for epoch in range(6):
        total = 0.0
        for batch in loader:
            optimizer.zero_grad()
            out = model(inputs(batch), batch.edge_index_dict)["paper"][:batch["paper"].batch_size]
            loss = F.cross_entropy(out, batch["paper"].y[:batch["paper"].batch_size])
            loss.backward()
            optimizer.step()
            total += float(loss.detach())
        losses.append(total)
    assert losses[-1] < 0.6 * losses[0], losses


def test_hgt_and_rgcn_train_on_the_batches(mode):
    """HGTConv on the typed batches as they are, R-GCN on their homogeneous view."""
    from torch_geometric.nn import HGTConv, RGCNConv
    torch.manual_seed(0)
    data = hetero_data(8, papers=300, authors=200, fields=10)
    device = device_of(mode)
    loader = qpyg.NeighborLoader(data, [5, 5], input_nodes=("paper", torch.arange(300)),
                                 batch_size=64, shuffle=True, device=device, mode=mode)
    field_embedding = torch.nn.Embedding(10, 8).to(device)

    def inputs(batch):
        return {"paper": batch["paper"].x, "author": batch["author"].x,
                "field": field_embedding(batch["field"].n_id)}

    hgt = torch.nn.ModuleList([HGTConv(8, 16, data.metadata(), heads=2),
                               torch.nn.Linear(16, 2)]).to(device)
    rgcn = torch.nn.ModuleList([RGCNConv(8, 16, len(data.edge_types)),
                                RGCNConv(16, 2, len(data.edge_types))]).to(device)

    def hgt_out(batch):
        h = hgt[0](inputs(batch), batch.edge_index_dict)
        return hgt[1](h["paper"])[:batch["paper"].batch_size]

    def rgcn_out(batch):
        x = inputs(batch)
        for t in batch.node_types:  # to_homogeneous concatenates each type's x
            batch[t].x = x[t]
        homo = batch.to_homogeneous()
        h = rgcn[0](homo.x, homo.edge_index, homo.edge_type).relu()
        h = rgcn[1](h, homo.edge_index, homo.edge_type)
        paper = batch.node_types.index("paper")
        return h[homo.node_type == paper][:batch["paper"].batch_size]

    for model, forward in ((hgt, hgt_out), (rgcn, rgcn_out)):
        optimizer = torch.optim.Adam(list(model.parameters()) +
                                     list(field_embedding.parameters()), lr=0.02)
        losses = []
        for epoch in range(6):
            total = 0.0
            for batch in loader:
                optimizer.zero_grad()
                loss = F.cross_entropy(forward(batch),
                                       batch["paper"].y[:batch["paper"].batch_size])
                loss.backward()
                optimizer.step()
                total += float(loss.detach())
            losses.append(total)
        assert losses[-1] < 0.7 * losses[0], (type(model[0]).__name__, losses)


def test_a_changed_hetero_data_is_read_again_and_pair_rules_are_named():
    """A HeteroData changed after its loader was built is read again at the next epoch (a
    second loader of it got the first's stale stores); over a pair of stores, weight_attr
    and time_attr name attributes the pair does not have: refused, not ignored."""
    data = hetero_data()
    loader = qpyg.NeighborLoader(data, [3, 3], input_nodes="paper", batch_size=60, device="cpu")
    assert loader.data is data
    next(iter(loader))
    data["paper"].x = torch.full((60, 8), 5.0)
    batch = next(iter(loader))
    assert bool((batch["paper"].x == 5.0).all())
    other = qpyg.NeighborLoader(data, [3, 3], input_nodes="paper", batch_size=60, device="cpu")
    assert bool((next(iter(other))["paper"].x == 5.0).all())
    # A numpy attribute is gathered per node type as a tensor (it was dropped).
    data["paper"].np_rows = np.arange(120).reshape(60, 2)
    batch = next(iter(loader))
    assert torch.equal(batch["paper"].np_rows,
                       torch.from_numpy(data["paper"].np_rows)[batch["paper"].n_id])
    stores = qpyg.to_stores(data, "cpu")
    for rules in (dict(weight_attr="w"), dict(time_attr="time"),
                  dict(time_attr="time", temporal_strategy="last")):
        with pytest.raises(ValueError, match="pair pass a HeteroNeighborSampler"):
            qpyg.NeighborLoader(stores, [3, 3], input_nodes="paper", batch_size=8,
                                device="cpu", **rules)
        with pytest.raises(ValueError, match="pair pass a HeteroNeighborSampler"):
            qpyg.LinkNeighborLoader(stores, [3, 3], edge_label_index=WRITES, batch_size=8,
                                    device="cpu", **rules)


def test_new_hetero_features_keep_the_graph_and_sampler():
    """New features of a HeteroData keep its graph store and the loader's sampler (they were
    built again, and a loader given its own sampler then said the graph had changed); new
    edges or weights replace them."""
    data = hetero_data()
    loader = qpyg.NeighborLoader(data, [3, 3], input_nodes="paper", batch_size=60,
                                 device="cpu", weight_attr="w")
    next(iter(loader))
    sampler, graph = loader.quiver_sampler, loader.stores[1]
    data["author"].x = torch.full((40, 8), 2.0)
    batch = next(iter(loader))
    assert bool((batch["author"].x == 2.0).all())
    assert loader.quiver_sampler is sampler and loader.stores[1] is graph
    data[CITES].w.mul_(3)
    next(iter(loader))
    assert loader.quiver_sampler is not sampler and loader.stores[1] is graph
    given = qpyg.HeteroNeighborSampler(qpyg.to_stores(data, "cpu")[1], [3, 3], return_eid=True)
    mine = qpyg.NeighborLoader(data, [3, 3], input_nodes="paper", batch_size=60,
                               device="cpu", neighbor_sampler=given)
    data["paper"].x = torch.zeros(60, 8)
    assert bool((next(iter(mine))["paper"].x == 0).all())
    data[CITES].edge_index = data[CITES].edge_index.flip(0)
    with pytest.raises(ValueError, match="graph changed"):
        next(iter(mine))
    next(iter(loader))
    assert loader.stores[1] is not graph
    assert torch.equal(loader.stores[1].edge_index_dict[CITES], data[CITES].edge_index)


def test_options_a_given_sampler_was_not_built_with_are_refused():
    """Beside a neighbor_sampler the hetero loaders dropped time_attr (batches then held
    nodes later than their seeds), disjoint, weight_attr, temporal_strategy, replace, mode
    and neg_exclude_edges without a word: probes. What the sampler was built with passes."""
    data = hetero_data()
    graph = qpyg.to_stores(data, "cpu")[1]
    given = qpyg.HeteroNeighborSampler(graph, [3, 2], "cpu", return_eid=True)
    node = dict(input_nodes="paper", batch_size=8, device="cpu", neighbor_sampler=given)
    for option, said in ((dict(time_attr="time"), "time_attr='time' (the sampler samples "
                                                  "without time)"),
                         (dict(disjoint=True), "disjoint=True (the sampler samples one shared"),
                         (dict(weight_attr="w"), "weight_attr='w' (the sampler samples "
                                                 "without weights)"),
                         (dict(temporal_strategy="last"), "temporal_strategy='last'"),
                         (dict(replace=True), "replace=True (the sampler draws without"),
                         (dict(mode="GPU"), "mode='GPU' (the sampler samples in mode 'CPU')"),
                         (dict(subgraph_type="bidirectional"), "subgraph_type='bidirectional'"),
                         (dict(sampling_generator=torch.Generator()), "sampling_generator")):
        with pytest.raises(ValueError, match="NeighborLoader got a neighbor_sampler and sampling "
                                             "options it was not built with: "
                                             + re.escape(said)):
            qpyg.NeighborLoader(data, [3, 2], **node, **option)
    with pytest.raises(ValueError, match=re.escape("neg_exclude_edges=False (the sampler was "
                                                   "built with neg_exclude_edges=True)")):
        qpyg.LinkNeighborLoader(data, [3, 2], edge_label_index=CITES, neg_sampling="binary",
                                batch_size=8, device="cpu", neighbor_sampler=given,
                                neg_exclude_edges=False)
    timed = qpyg.HeteroNeighborSampler(graph, [3, 2], "cpu", return_eid=True, disjoint=True,
                                       node_time_dict=dict(data.collect("time")))
    loader = qpyg.NeighborLoader(data, [3, 2], input_nodes="paper", batch_size=8, device="cpu",
                                 neighbor_sampler=timed, time_attr="time", disjoint=True)
    batch = next(iter(loader))
    assert "batch" in batch["paper"]
    weighted = qpyg.HeteroNeighborSampler(graph, [3, 2], "cpu", return_eid=True,
                                          weights=dict(data.collect("w")))
    next(iter(qpyg.NeighborLoader(data, [3, 2], input_nodes="paper", batch_size=8, device="cpu",
                                  neighbor_sampler=weighted, weight_attr="w")))
    seed_time = data["paper"].time[batch["paper"].n_id[:batch["paper"].batch_size]]
    assert bool((data["author"].time[batch["author"].n_id]
                 <= seed_time[batch["author"].batch].view(-1)).all())


def test_types_without_rows_keep_their_tables(mode):
    """A node type of no nodes with an [0, F] table, and an edge type of no edges with an
    [0, F] edge attribute (as after a split by time), load and give empty tables."""
    data = hetero_data(8)
    data["venue"].x = torch.empty(0, 8)
    data["venue", "hosts", "paper"].edge_index = torch.empty(2, 0, dtype=torch.long)
    data["venue", "hosts", "paper"].edge_attr = torch.empty(0, 3)
    loader = qpyg.NeighborLoader(data, [2, 2], input_nodes="paper", batch_size=16,
                                 device=device_of(mode), mode=mode)
    for batch in loader:
        check_batch(batch, data, "paper")
        assert batch["venue"].x.shape == (0, 8)
        assert batch["venue", "hosts", "paper"].edge_attr.shape == (0, 3)


def test_bidirectional_hetero_subgraphs(mode):
    """subgraph_type='bidirectional' joins each edge type with its rev_ type (and an edge
    type between one node type with its own reverse), as PyG's HeteroSamplerOutput
    .to_bidirectional: every edge sampled either way appears both ways, each edge is real,
    and (as in PyG) those types carry no e_id; 'induced' is refused by name."""
    data = hetero_data(9)
    rev_writes = ("paper", "rev_writes", "author")
    known = {et: set(zip(*data[et].edge_index.tolist())) for et in data.edge_types}
    for make in (lambda **kw: qpyg.NeighborLoader(data, [3, 2], input_nodes="paper",
                                                  batch_size=16, **kw),
                 lambda **kw: qpyg.LinkNeighborLoader(data, [3, 2], edge_label_index=WRITES,
                                                      batch_size=16, **kw)):
        torch.manual_seed(9)  # each loader seeds its sampler from it: the same draws
        plain = next(iter(make(device=device_of(mode), mode=mode)))
        torch.manual_seed(9)
        both = next(iter(make(device=device_of(mode), mode=mode,
                              subgraph_type="bidirectional")))
        assert "e_id" not in both[CITES]

        def pairs(batch, et):
            src, _, dst = et
            ends = batch[et].edge_index.cpu()
            return set(zip(batch[src].n_id.cpu()[ends[0]].tolist(),
                           batch[dst].n_id.cpu()[ends[1]].tolist()))
        for et in both.edge_types:
            assert pairs(both, et) <= known[et] | {(b, a) for a, b in known[et]}, et
        writes, reverse = pairs(both, WRITES), pairs(both, rev_writes)
        assert writes == {(b, a) for a, b in reverse}
        assert pairs(plain, WRITES) <= writes
        assert {(b, a) for a, b in pairs(plain, rev_writes)} <= writes
        cites = pairs(both, CITES)
        assert cites == {(b, a) for a, b in cites} and pairs(plain, CITES) <= cites
    with pytest.raises(NotImplementedError, match="subgraph_type 'induced'"):
        qpyg.NeighborLoader(data, [2], input_nodes="paper", subgraph_type="induced",
                            device="cpu")


def test_pyg_short_edge_type_forms_for_seed_edges():
    """PyG reads ("author", "paper") and a relation name alone as the one edge type that
    matches (HeteroData._to_canonical), bare or with ids; an ambiguous form is named."""
    data = hetero_data(7)
    ids = data[WRITES].edge_index[:, :8]
    for form in [("author", "paper"), (("author", "paper"), ids), "writes", ("writes", ids)]:
        batch = next(iter(qpyg.LinkNeighborLoader(data, [2], edge_label_index=form,
                                                  batch_size=8, device="cpu")))
        label = batch[WRITES].edge_label_index
        ends = torch.stack([batch["author"].n_id[label[0]], batch["paper"].n_id[label[1]]])
        if isinstance(form[-1], torch.Tensor):
            assert torch.equal(ends, ids)
        else:  # every edge of the type is a seed: each one a real edge
            known = set(zip(*data[WRITES].edge_index.tolist()))
            assert all(pair in known for pair in zip(*ends.tolist()))
    data["author", "reviews", "paper"].edge_index = torch.tensor([[0], [1]])
    with pytest.raises(ValueError, match=r"several of the graph's edge types match: \["):
        qpyg.LinkNeighborLoader(data, [2], edge_label_index=("author", "paper"), device="cpu")
    with pytest.raises(ValueError, match="none of the graph's edge types match"):
        qpyg.LinkNeighborLoader(data, [2], edge_label_index=("paper", "venue"), device="cpu")


def test_bad_hetero_arguments_are_named():
    data = hetero_data(6)
    with pytest.raises(ValueError, match="'venue'"):
        qpyg.NeighborLoader(data, [2], input_nodes="venue", device="cpu")
    with pytest.raises(ValueError, match="node type or"):
        qpyg.NeighborLoader(data, [2], input_nodes=torch.arange(3), device="cpu")
    with pytest.raises(ValueError, match="edge types"):
        qpyg.NeighborLoader(data, {("paper", "likes", "paper"): [2]}, input_nodes="paper",
                            device="cpu")
    with pytest.raises(ValueError, match="lacks edge types"):
        qpyg.NeighborLoader(data, {WRITES: [2]}, input_nodes="paper", device="cpu")
    with pytest.raises(ValueError, match="edge type"):
        qpyg.LinkNeighborLoader(data, [2], edge_label_index=("a", "b", "c"), device="cpu")
    with pytest.raises(IndexError, match="'paper'"):
        qpyg.LinkNeighborLoader(data, [2], edge_label_index=(WRITES, torch.tensor([[0], [60]])),
                                device="cpu")
    with pytest.raises(ValueError, match="lack it"):
        qpyg.NeighborLoader(data, [2], input_nodes="paper", weight_attr="edge_attr",
                            device="cpu")
    weighted = qpyg.LinkNeighborLoader(data, [2], edge_label_index=WRITES,
                                       neg_sampling=dict(mode="binary", dst_weight=torch.ones(60)),
                                       device="cpu")
    with pytest.raises(NotImplementedError, match="weighted negatives"):
        next(iter(weighted))
    # When the loader is made, not at the batch that holds it somewhere in an epoch.
    with pytest.raises(IndexError, match=r"input_nodes\[1\]\[1\] = 60 is out of range "
                                         r"\[0, 60\) \(nodes of type 'paper'\)"):
        qpyg.NeighborLoader(data, [2], input_nodes=("paper", torch.tensor([0, 60])),
                            batch_size=2, device="cpu")
    # Ids in a form no batch can take are named when the loader is made too (they were
    # met at the first batch, as "seeds['paper']").
    with pytest.raises(TypeError, match=r"input_nodes\[1\] must be 1-D integer node ids or a "
                                        r"bool mask, got torch.float32"):
        qpyg.NeighborLoader(data, [2], input_nodes=("paper", torch.tensor([1.5])),
                            device="cpu")
    long_mask = torch.zeros(61, dtype=torch.bool)
    long_mask[60] = True
    with pytest.raises(IndexError, match=r"input_nodes\[1\] as a bool mask needs one entry "
                                         r"per node \(60\), got shape \(61,\)"):
        qpyg.NeighborLoader(data, [2], input_nodes=("paper", long_mask), device="cpu")
    with pytest.raises(ValueError, match="batch_size must be an int >= 1, got None"):
        qpyg.NeighborLoader(data, [2], input_nodes="paper", batch_size=None, device="cpu")
    sparse = hetero_data(6)
    sparse["author"].x = sparse["author"].x.to_sparse()
    with pytest.raises(TypeError, match="node attribute 'x' is a torch.sparse_coo tensor"):
        qpyg.NeighborLoader(sparse, [2], input_nodes="paper", device="cpu")


def test_attributes_named_like_the_loaders_keys_are_said_to_be_left_out():
    """A node or edge attribute named as a key the loader writes (``batch``, ``n_id``, ...)
    was dropped unsaid."""
    data = hetero_data(7)
    data["author"].batch = torch.arange(data["author"].num_nodes)
    with pytest.warns(UserWarning, match="attribute 'batch' of node type 'author' is not "
                                         "carried into batches"):
        loader = qpyg.NeighborLoader(data, [2], input_nodes="paper", batch_size=4,
                                     device="cpu")
    assert "batch" not in next(iter(loader))["author"]


def test_type_attributes_that_are_no_rows_come_whole_and_types_keep_their_order():
    """A probe: a node type's class count and class weights, a relation's embedding and a
    tensor whose rows do not match its type's count were left out of every batch (PyG's
    batches, a copy of the data, hold them whole), and a type without attributes came last,
    so type ids from to_homogeneous() disagreed between a batch and the whole graph."""
    data = HeteroData()
    data["paper"].x = torch.randn(10, 2)
    data["paper"].num_classes = 3
    data["paper"].class_weight = torch.tensor([0.2, 0.3, 0.5])
    data["paper"].short = torch.arange(7)  # 7 rows for 10 papers: no row per node
    data["author"].num_nodes = 5           # no attributes, declared second
    data["venue"].x = torch.randn(4, 2)
    data["author", "writes", "paper"].edge_index = torch.tensor([[0, 1, 4], [0, 1, 2]])
    data["paper", "in", "venue"].edge_index = torch.tensor([[0, 1, 2], [0, 1, 3]])
    data["paper", "in", "venue"].rel_emb = torch.randn(2)
    data["venue", "has", "paper"].edge_index = torch.tensor([[0, 1, 3], [0, 1, 2]])
    data["venue", "has", "paper"].edge_attr = torch.randn(3, 2)
    # A split's labels on another edge type: kept whole, as in PyG (which overwrites them
    # only on the seed edges' type).
    data["venue", "has", "paper"].edge_label_index = torch.tensor([[0], [1]])
    for loader in (
            qpyg.NeighborLoader(data, [-1, -1], input_nodes="paper", batch_size=4,
                                device="cpu"),
            qpyg.LinkNeighborLoader(data, [-1], edge_label_index=("paper", "in", "venue"),
                                    batch_size=2, device="cpu")):
        for batch in loader:
            assert batch.node_types == data.node_types
            assert batch.edge_types == data.edge_types
            paper = batch["paper"]
            assert paper.num_classes == 3
            assert torch.equal(paper.class_weight, data["paper"].class_weight)
            assert torch.equal(paper.short, torch.arange(7))
            assert torch.equal(batch["paper", "in", "venue"].rel_emb,
                               data["paper", "in", "venue"].rel_emb)
            has = batch["venue", "has", "paper"]
            assert torch.equal(has.edge_attr, data["venue", "has", "paper"].edge_attr[has.e_id])
            assert torch.equal(has.edge_label_index, torch.tensor([[0], [1]]))
            if isinstance(loader, qpyg.LinkNeighborLoader):  # the loader's own, seeds first
                seeds = batch["paper", "in", "venue"].edge_label_index
                assert seeds.size(0) == 2 and 0 < seeds.size(1) <= 2  # batch_size 2
            homogeneous = batch.to_homogeneous()
            author = batch.node_types.index("author")
            assert author == data.node_types.index("author")
            starts = torch.tensor([0] + [batch[t].num_nodes for t in batch.node_types]).cumsum(0)
            assert bool((homogeneous.node_type[starts[author]:starts[author + 1]]
                         == author).all())


def test_a_link_split_s_whole_labels_stay_out_of_link_batches_on_the_seed_type():
    """A RandomLinkSplit split's whole edge_label_index (global ids past the batch's nodes)
    came into triplet batches, and its whole edge_label into batches without negatives or
    given labels; PyG deletes both there (a probe). A negative seed id was named with a
    bound of 2**62, not its end's node type."""
    import torch_geometric.transforms as T
    torch.manual_seed(0)
    data = HeteroData()
    data["user"].x, data["item"].x = torch.randn(20, 4), torch.randn(15, 4)
    et = ("user", "buys", "item")
    data[et].edge_index = torch.stack([torch.randint(20, (40,)), torch.randint(15, (40,))])
    data = T.ToUndirected()(data)
    train, val, _ = T.RandomLinkSplit(num_val=0.2, num_test=0.2, edge_types=[et],
                                      rev_edge_types=[("item", "rev_buys", "user")])(data)
    assert train[et].edge_label_index.size(1) != train[et].edge_index.size(1)
    batch = next(iter(qpyg.LinkNeighborLoader(
        train, [5], edge_label_index=(et, train[et].edge_index), neg_sampling="triplet",
        batch_size=4, device="cpu")))
    assert "edge_label_index" not in batch[et] and "edge_label" not in batch[et]
    assert batch["user"].src_index.numel() == 4
    batch = next(iter(qpyg.LinkNeighborLoader(
        val, [5], edge_label_index=(et, val[et].edge_label_index[:, :6]), batch_size=4,
        device="cpu")))
    assert batch[et].edge_label_index.shape == (2, 4) and "edge_label" not in batch[et]
    with pytest.raises(IndexError, match="edge_label_index\\[0\\] holds node -1, outside "
                                         "'user''s 20 nodes"):
        qpyg.LinkNeighborLoader(data, [2], edge_label_index=(et, torch.tensor([[-1], [0]])),
                                device="cpu")


def test_a_bad_fanout_is_named_by_its_edge_type_and_hop_and_empty_seeds_load_nothing():
    """From a probe: the hetero check named a flattened position (fanouts[8]); a 2-D
    weight_attr was named as the sampler's weights; ('paper', []) was refused as floats."""
    data = hetero_data()
    fanouts = {et: [2, 2] for et in data.edge_types}
    fanouts[CITES] = [2, -5]
    with pytest.raises(ValueError, match=rf"num_neighbors\[{re.escape(repr(CITES))}\]\[1\] must "
                                         r"be -1 \(all neighbors\) or >= 0, got -5"):
        next(iter(qpyg.NeighborLoader(data, fanouts, input_nodes="paper", batch_size=4,
                                      device="cpu")))
    data[CITES].w = torch.rand(data[CITES].edge_index.size(1), 2)
    with pytest.raises(ValueError, match=r"weight_attr='w' of .*'cites'.* must hold one value "
                                         r"per edge \(1-D\)"):
        next(iter(qpyg.NeighborLoader(data, [2], input_nodes="paper", weight_attr="w",
                                      batch_size=4, device="cpu")))
    assert len(qpyg.NeighborLoader(hetero_data(), [2], input_nodes=("paper", []), batch_size=4,
                                   device="cpu")) == 0
