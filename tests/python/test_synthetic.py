import torch

import torch_quiver_ops as qv
from torch_quiver_ops.synthetic import PRESETS, synthetic_graph


def test_deterministic_and_well_formed():
    a = synthetic_graph("tiny", seed=5)
    b = synthetic_graph("tiny", seed=5)
    assert torch.equal(a.edge_index, b.edge_index) and torch.equal(a.x, b.x)
    spec = PRESETS["tiny"]
    assert a.x.shape == (spec.num_nodes, spec.num_features)
    assert a.y.min() >= 0 and a.y.max() < spec.num_classes
    ei = a.edge_index
    assert torch.all(ei[0] != ei[1])  # no self-loops
    keys = ei[0] * a.num_nodes + ei[1]
    assert keys.unique().numel() == keys.numel()  # no duplicate edges
    reverse = ei[1] * a.num_nodes + ei[0]
    assert torch.equal(keys.sort().values, reverse.sort().values)  # undirected
    splits = torch.cat([a.train_idx, a.val_idx, a.test_idx])
    assert torch.equal(splits.sort().values, torch.arange(a.num_nodes))
    assert abs(a.train_idx.numel() / a.num_nodes - spec.train_fraction) < 0.01


def test_power_law_and_communities():
    g = synthetic_graph("small", seed=1)
    degree = qv.CSRTopo(g.edge_index).degree.double()
    assert abs(degree.mean().item() - PRESETS["small"].avg_degree) < 1.0
    assert degree.max() > 20 * degree.mean()  # heavy tail
    same = (g.y[g.edge_index[0]] == g.y[g.edge_index[1]]).double().mean()
    assert same > 0.7  # homophilous: the structure carries the labels


def test_products_preset_matches_ogbn_products():
    spec = PRESETS["products"]
    assert spec.num_nodes == 2_449_029 and spec.num_features == 100 and spec.num_classes == 47
    assert round(spec.num_nodes * spec.avg_degree) == 123_718_280
