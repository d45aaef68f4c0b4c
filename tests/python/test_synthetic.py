import pytest
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


def test_papers_preset_matches_ogbn_papers100m():
    spec = PRESETS["papers"]
    assert spec.num_nodes == 111_059_956 and spec.num_features == 128
    assert spec.num_classes == 172
    assert round(spec.num_nodes * spec.avg_degree) == 1_615_685_872


def test_csr_layout_is_the_coo_graphs_csr():
    """csr=True gives the CSR of the very graph csr=False gives as edge_index."""
    coo = synthetic_graph("tiny", seed=3)
    csr = synthetic_graph("tiny", seed=3, csr=True)
    assert csr.edge_index is None and csr.num_edges == coo.num_edges
    assert torch.equal(csr.x, coo.x) and torch.equal(csr.y, coo.y)
    expected = coo.topology()
    got = csr.topology()
    assert torch.equal(got.indptr, expected.indptr)
    assert torch.equal(got.indices, expected.indices)  # same neighbor order, too


def test_large_feature_tables_are_drawn_in_slices(monkeypatch):
    from torch_quiver_ops import synthetic
    monkeypatch.setattr(synthetic, "_FEATURE_SLICE", 1000)  # tiny: 2000 x 16 values
    g = synthetic_graph("tiny", seed=2, feature_dtype=torch.bfloat16)
    assert g.x.dtype == torch.bfloat16 and g.x.shape == (2000, 16)
    # Still a class signal: class means differ more than the noise of a mean.
    means = torch.stack([g.x[g.y == c].float().mean(0) for c in range(4)])
    assert (means[0] - means[1]).norm() > 0.3


def test_a_graph_without_features_has_the_same_split():
    """partition_graph.py --no-features wrote another split than the run with features."""
    a, b = synthetic_graph("tiny", seed=3), synthetic_graph("tiny", seed=3, features=False)
    assert b.x is None and torch.equal(a.edge_index, b.edge_index) and torch.equal(a.y, b.y)
    for name in ("train_idx", "val_idx", "test_idx"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name


@pytest.mark.parametrize("override, named", [
    (dict(avg_degree=-3), "avg_degree must be a finite number >= 0"),
    (dict(exponent=1.0), "exponent must be a finite number >= 2"),
    (dict(exponent=1.03), "exponent must be a finite number >= 2"),  # gave 0 edges of 6,000
    (dict(num_classes=0), "num_classes must be an int >= 1"),
    (dict(num_nodes=True), "num_nodes must be an int >= 1"),
    (dict(homophily=1.5), r"homophily must be a finite number in \[0, 1\]"),
    (dict(train_fraction=1.0), r"train_fraction must be a finite number in \(0, 1\)"),
    (dict(train_fraction=0.7, val_fraction=0.5), "must be under 1"),
    (dict(feature_signal=float("nan")), "feature_signal must be a finite number, got nan"),
    # (accepted before: an empty test split, and 90 edges for the 1,000 asked; a probe)
    (dict(num_nodes=2), "num_nodes 2 leaves no test node"),
    (dict(num_nodes=10, avg_degree=100), "avg_degree 100 is more than a graph of 10 nodes"),
])
def test_a_spec_out_of_range_is_named(override, named):
    with pytest.raises(ValueError, match=named):
        synthetic_graph("tiny", **override)


def test_seed_and_feature_dtype_of_the_wrong_kind_are_named():
    with pytest.raises(TypeError, match="feature_dtype must be a floating torch.dtype"):
        synthetic_graph("tiny", feature_dtype="float16")  # torch: 'Invalid device string'
    with pytest.raises(TypeError, match="feature_dtype must be a floating torch.dtype"):
        synthetic_graph("tiny", feature_dtype=torch.int64)  # rounded every feature
    with pytest.raises(TypeError, match="seed must be an int, got 1.7"):
        synthetic_graph("tiny", seed=1.7)
    with pytest.raises(ValueError,
                       match=r"seed must be in \[-2\*\*63, 2\*\*64\), got 18446744073709551616"):
        synthetic_graph("tiny", seed=2**64)  # was "Overflow when unpacking long long"
    import numpy as np  # NumPy's ints passed the check, then failed in manual_seed
    assert torch.equal(synthetic_graph("tiny", seed=np.int64(3), features=False).edge_index,
                       synthetic_graph("tiny", seed=3, features=False).edge_index)


def test_a_graph_well_short_of_its_degree_warns():
    """An exponent of 2 drew most pairs on the same hubs: 71% of the edges asked for,
    silently (a probe)."""
    with pytest.warns(UserWarning, match=r"17,082 directed edges, 71% of avg_degree 12's"):
        synthetic_graph("tiny", exponent=2.0, features=False)


def test_a_graph_past_host_memory_is_refused_before_drawing():
    """A large override had drawn pairs for 100 s, then failed in the allocator naming no
    option (a probe): refused at once, naming the sizes."""
    from torch_quiver_ops.preflight import ResourceLimitError
    with pytest.raises(ResourceLimitError, match=r"a synthetic graph of 1,000,000 nodes, "
                                                 r"avg_degree 50000 and 0 features needs"):
        synthetic_graph("tiny", num_nodes=10**6, avg_degree=50_000, features=False)
    with pytest.raises(ResourceLimitError, match="100000000 features needs"):
        synthetic_graph("tiny", num_features=10**8)


def test_numpy_numbers_flags_and_gpu_indices_are_taken_as_meant():
    """NumPy's numbers had been refused as "not an int" (a probe); the string 'False' for
    `features` built features; device=0 (GPU 0 everywhere else) drew on the CPU."""
    import numpy as np
    plain = synthetic_graph("tiny", num_nodes=300, avg_degree=4, features=False)
    given = synthetic_graph("tiny", num_nodes=np.int64(300), avg_degree=np.float32(4),
                            features=np.bool_(False))
    assert torch.equal(plain.edge_index, given.edge_index) and given.x is None
    for name in ("features", "csr"):
        with pytest.raises(TypeError, match=f"{name} must be True or False, got 'False'"):
            synthetic_graph("tiny", **{name: "False"})
    with pytest.raises(ValueError, match=r"num_nodes must be an int >= 1, got 300.5"):
        synthetic_graph("tiny", num_nodes=300.5)
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="device=0 is a GPU, and torch sees none"):
            synthetic_graph("tiny", device=0)
    with pytest.raises(ValueError, match="device must be a torch.device"):
        synthetic_graph("tiny", device="gpu")


def test_a_spec_that_is_no_spec_is_named():
    from torch_quiver_ops.synthetic import generate
    with pytest.raises(TypeError, match=r"spec must be a GraphSpec \(or use synthetic_graph"):
        generate(5)  # (had failed on a missing num_nodes)
