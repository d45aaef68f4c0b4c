"""Inputs that torch or NumPy hand over in a less usual form: NumPy views torch cannot share
(negative strides, another byte order), sparse and meta tensors, narrow integer ids, empty
slices, non-contiguous tables. Each is either taken and gives the result of its plain form,
or refused naming the argument (a probe had found torch's own errors, which name none)."""
import numpy as np
import pytest
import torch

import torch_quiver_ops as qv
from torch_quiver_ops import pyg as qpyg


@pytest.fixture(scope="module")
def topo_and_edges():
    edge_index = torch.randint(0, 30, (2, 200), generator=torch.Generator().manual_seed(5))
    return qv.CSRTopo(edge_index, num_nodes=30), edge_index


def draw(sampler, seeds, **kwargs):
    return sampler.neighbor_sample(seeds, generator=torch.Generator().manual_seed(1), **kwargs)


def same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))


def test_numpy_views_with_negative_strides_or_another_byte_order_are_copied(topo_and_edges):
    topo, edge_index = topo_and_edges
    flipped = np.flip(edge_index.numpy(), 1)  # negative strides: torch cannot view it
    got, want = qv.CSRTopo(flipped, num_nodes=30), qv.CSRTopo(edge_index.flip(1), num_nodes=30)
    for name in ("indptr", "indices", "eid"):  # (a flip leaves indptr alone: the whole CSR)
        assert torch.equal(getattr(got, name), getattr(want, name)), name
    big_endian = edge_index.numpy().astype(">i8")
    assert torch.equal(qv.CSRTopo(big_endian, num_nodes=30).indices, topo.indices)

    sampler = qv.GraphSageSampler(topo, [4, 2], device="cpu")
    seeds = np.array([9, 3, 7, 1])
    assert same(draw(sampler, seeds[::-1]), draw(sampler, torch.tensor([1, 7, 3, 9])))

    # (arange[::-1] + 1 would be a new contiguous array: a view with negative strides, and
    # every seed, whose draws depend on the weights' order)
    weights = (np.arange(200, dtype=np.float32) ** 3 + 1)[::-1]
    assert weights.strides[0] < 0
    every = torch.arange(30)
    weighted = qv.GraphSageSampler(topo, [3], device="cpu", weights=weights)
    assert same(draw(weighted, every),
                draw(qv.GraphSageSampler(topo, [3], device="cpu",
                                         weights=torch.from_numpy(weights.copy())), every))

    times = np.arange(200)[::-1]
    timed = qv.GraphSageSampler(topo, [3], device="cpu", edge_time=times)
    plain = qv.GraphSageSampler(topo, [3], device="cpu", edge_time=torch.from_numpy(times.copy()))
    assert same(draw(timed, every, seed_time=torch.full((30,), 100)),
                draw(plain, every, seed_time=torch.full((30,), 100)))
    seed_time = np.array([150, 60])[::-1]
    assert same(draw(timed, [2, 4], seed_time=seed_time),
                draw(timed, [2, 4], seed_time=torch.tensor([60, 150])))

    table = torch.randn(30, 3)
    feature = qv.Feature(device_list=[]).from_cpu_tensor(table)
    assert torch.equal(feature[np.array([4, 8, 2])[::-1]], table[[2, 8, 4]])

    loader = qv.SampleLoader(sampler, table, np.arange(8)[::-1], batch_size=4, prefetch=0,
                             shuffle=False, labels=np.arange(30)[::-1])
    batch = next(iter(loader))
    assert torch.equal(batch.n_id[:4], torch.tensor([7, 6, 5, 4]))
    assert torch.equal(batch.y, 29 - batch.n_id[:4])

    types = {"a": 30, "b": 30}
    hetero = qv.HeteroCSRTopo({("a", "to", "b"): flipped}, types)
    plain = qv.HeteroCSRTopo({("a", "to", "b"): edge_index.flip(1)}, types)
    assert hetero.num_edges_dict[("a", "to", "b")] == 200
    for name in ("indptr", "indices", "eid"):
        assert torch.equal(getattr(hetero, name), getattr(plain, name)), name


def test_sparse_and_meta_tensors_are_refused_by_name(topo_and_edges):
    topo, edge_index = topo_and_edges
    sampler = qv.GraphSageSampler(topo, [4, 3], device="cpu")
    cases = [
        (lambda: qv.CSRTopo(edge_index.to_sparse(), num_nodes=30),
         "edge_index is a torch.sparse_coo tensor"),
        (lambda: qv.CSRTopo(indptr=topo.indptr.to_sparse(), indices=topo.indices),
         "indptr is a torch.sparse_coo tensor"),
        (lambda: sampler.sample(torch.tensor([1, 2]).to_sparse()),
         "seeds are a torch.sparse_coo tensor"),
        (lambda: qv.Feature(device_list=[]).from_cpu_tensor(torch.randn(30, 2))[
            torch.tensor([1]).to_sparse()], "ids are a torch.sparse_coo tensor"),
        (lambda: qv.GraphSageSampler(topo, [-1], device="cpu",
                                     weights=torch.rand(200).to_sparse()),
         "weights is a torch.sparse_coo tensor"),
        (lambda: qv.GraphSageSampler(topo, [-1], device="cpu",
                                     weights=torch.rand(200, device="meta")),
         "weights is a meta tensor"),
        (lambda: qv.SampleLoader(sampler, None, [1, 2], batch_size=4,
                                 labels=torch.arange(30).to_sparse()),
         "labels is a torch.sparse_coo tensor"),
        (lambda: qv.SampleLoader(sampler, None, [1, 2], batch_size=4,
                                 labels=torch.arange(30, device="meta")),
         "labels is a meta tensor"),
        (lambda: qv.SampleLoader(sampler, torch.randn(30, 2).to_sparse(), [1, 2],
                                 batch_size=4),
         "feature is a torch.sparse_coo tensor"),
    ]
    for make, message in cases:
        with pytest.raises(TypeError, match=message):
            make()


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.uint8, torch.uint16,
                                   torch.uint32, torch.uint64])
def test_narrow_and_unsigned_integer_ids_are_taken(topo_and_edges, dtype):
    topo, _ = topo_and_edges
    sampler = qv.GraphSageSampler(topo, [4, 2], device="cpu")
    seeds = torch.tensor([9, 3, 7])
    assert same(draw(sampler, seeds.to(dtype)), draw(sampler, seeds))
    assert torch.equal(sampler.sample(seeds.to(dtype))[0][:3], seeds)
    table = torch.randn(30, 3)
    feature = qv.Feature(device_list=[]).from_cpu_tensor(table)
    assert torch.equal(feature[seeds.to(dtype)], table[seeds])


def test_unsigned_ids_past_int64_are_refused_by_name(topo_and_edges):
    topo, _ = topo_and_edges
    sampler = qv.GraphSageSampler(topo, [4], device="cpu")
    with pytest.raises(IndexError, match=r"seeds\[1\] = 18446744073709551615 is past int64"):
        sampler.sample(torch.tensor([3, 2**64 - 1], dtype=torch.uint64))


def test_empty_slices_select_no_rows():
    table = torch.randn(30, 4)
    feature = qv.Feature(device_list=[]).from_cpu_tensor(table)
    for rows in (slice(5, 2), slice(2, 5, -1), slice(10, 10), slice(40, 50)):
        assert feature[rows].shape == table[5:2].shape == (0, 4)
    assert torch.equal(feature[::-3], table[torch.arange(29, -1, -3)])
    store = qpyg.FeatureStore(device="cpu")
    store.put_tensor(table, group_name=None, attr_name="x", index=None)
    assert store.get_tensor(group_name=None, attr_name="x", index=slice(5, 2)).shape == (0, 4)
    assert torch.equal(store.get_tensor(group_name=None, attr_name="x", index=slice(3, 9, 2)),
                       table[3:9:2])


class FirstRows(torch.nn.Module):
    def forward(self, x, adjs):
        return x[:adjs[-1].size[1]]


@pytest.mark.parametrize("layout", ["transposed", "strided", "expanded", "numpy"])
def test_the_serving_runtime_takes_a_table_in_any_dense_layout(topo_and_edges, layout):
    from torch_quiver_ops.serving import ServingRuntime
    topo, _ = topo_and_edges
    plain = torch.randn(30, 4)
    table = {"transposed": plain.t().contiguous().t(), "strided": torch.randn(30, 8)[:, ::2],
             "expanded": torch.randn(1, 4).expand(30, 4), "numpy": plain.numpy()}[layout]
    expected = torch.as_tensor(table)[[3, 5, 11]]
    runtime = ServingRuntime(FirstRows(), topo, [2, 2], table, device="cpu", cpu_samplers=1,
                             gpu_streams=0, threshold=0.0)
    try:
        assert torch.equal(runtime.submit([3, 5, 11]).result(30), expected)
        # (a reversed NumPy view had been refused as "node ids must be 64-bit integers")
        assert torch.equal(runtime.submit(np.array([11, 5, 3])[::-1]).result(30), expected)
    finally:
        runtime.close()


def test_the_serving_runtime_names_a_feature_it_cannot_read(topo_and_edges):
    from torch_quiver_ops.serving import ServingRuntime
    topo, _ = topo_and_edges
    for feature, error, message in (
            (torch.randn(30, 4).to_sparse(), TypeError, "feature is a torch.sparse_coo tensor"),
            (torch.tensor(1.0), ValueError, "feature must hold a row per node"),
            ([[1.0]] * 30, TypeError, "feature must be a Feature or a tensor of rows, got list")):
        with pytest.raises(error, match=message):
            ServingRuntime(FirstRows(), topo, [2], feature, device="cpu", cpu_samplers=1,
                           gpu_streams=0, threshold=0.0)


@pytest.mark.skipif(not torch.cuda.is_available() or not qv.cuda_kernels_built(),
                    reason="needs a GPU")
@pytest.mark.parametrize("dtype", [torch.int16, torch.uint8])
def test_narrow_ids_on_a_gpu_are_taken_at_every_gather(dtype):
    # (the first gather widened them; later ones took the hot path, which had not)
    table = torch.randn(30, 3)
    feature = qv.Feature(device_list=[0], device_cache_size="50%").from_cpu_tensor(table)
    ids = torch.tensor([9, 3, 7], device="cuda")
    for _ in range(2):
        assert torch.equal(feature[ids.to(dtype)].cpu(), table[ids.cpu()])


def test_a_default_device_leaves_the_callers_tensors_and_the_cpu_paths_alone():
    """Under torch.set_default_device (or ``with torch.device(...)``), torch.as_tensor copies
    a tensor to that device, and factories without a device make their tensors there: a CPU
    sampler's seeds, a Feature's ids and every loader's epoch plan had gone to it ("seeds are
    a meta tensor"; under "cuda", CPU generators on a GPU draw). "meta" stands for any other
    device here: each result must be what it is without a default (a probe)."""
    from torch_geometric.data import Data
    from torch_quiver_ops.synthetic import synthetic_graph
    g = synthetic_graph("tiny", seed=0)
    topo = qv.CSRTopo(g.edge_index, num_nodes=g.num_nodes)
    sampler = qv.GraphSageSampler(topo, [5, 3], device="cpu", mode="CPU")
    feature = qv.Feature(0, []).from_cpu_tensor(g.x)
    data = Data(x=g.x, y=g.y, edge_index=g.edge_index, num_nodes=g.num_nodes)
    runs = {
        "sample": lambda: sampler.sample(g.train_idx[:16])[0],
        "gather": lambda: feature[g.train_idx[:16]],
        "loader": lambda: next(iter(qv.SampleLoader(sampler, feature, g.train_idx, 32,
                                                    labels=g.y, prefetch=0))).x,
        "link loader": lambda: next(iter(qv.LinkSampleLoader(
            sampler, feature, g.edge_index[:, :200], batch_size=64, prefetch=0))).x,
        "pyg": lambda: next(iter(qpyg.NeighborLoader(
            data, input_nodes=g.train_idx, num_neighbors=[5, 3], batch_size=64,
            device="cpu"))).n_id,
        "pyg link": lambda: next(iter(qpyg.LinkNeighborLoader(
            data, num_neighbors=[5, 3], batch_size=64, neg_sampling_ratio=1.0,
            device="cpu"))).n_id,
        "hot order": lambda: qv.presample_hot_order(sampler, g.train_idx, 64),
    }
    for name, run in runs.items():
        torch.manual_seed(3)
        plain = run()
        torch.manual_seed(3)
        with torch.device("meta"):
            under_default = run()
        assert under_default.device.type == "cpu", name
        assert torch.equal(under_default, plain), name


def test_a_table_that_requires_grad_is_warned_of_its_copy():
    """PyG's own loader builds batch.x with index_select, so a Parameter as data.x gets
    gradients there; ours hold a copy, and a learnable embedding silently never trained (a
    probe). Said once, at the table, with what to do instead."""
    from torch_geometric.data import Data
    embedding = torch.nn.Parameter(torch.randn(30, 4))
    with pytest.warns(UserWarning, match="carry no gradient back to it; .*torch.nn.Embedding"):
        feature = qv.Feature(0, []).from_cpu_tensor(embedding)
    assert not feature[torch.arange(3)].requires_grad
    edge_index = torch.randint(0, 30, (2, 100), generator=torch.Generator().manual_seed(0))
    with pytest.warns(UserWarning, match="requires grad") as warned:
        loader = qpyg.NeighborLoader(Data(x=embedding, edge_index=edge_index, num_nodes=30),
                                     num_neighbors=[3], batch_size=8, device="cpu")
    assert warned[0].filename == __file__  # the caller's line, not the store's
    with pytest.warns(UserWarning, match="requires grad") as warned:  # through PyG's own API
        qpyg.FeatureStore(device="cpu").put_tensor(embedding, group_name=None, attr_name="x",
                                                   index=None)
    assert warned[0].filename == __file__, warned[0].filename
    batch = next(iter(loader))
    assert torch.equal(batch.x, embedding.detach()[batch.n_id])
