import pytest
import torch

import torch_quiver_ops as qv
from conftest import HAS_CUDA
from torch_quiver_ops.synthetic import synthetic_graph


@pytest.fixture(scope="module")
def graph():
    return synthetic_graph("tiny", seed=3)


def test_sample_gives_torch_quiver_layout(graph, mode):
    topo = qv.CSRTopo(graph.edge_index)
    sizes = [6, 4, 3]
    device = "cpu" if mode == "CPU" else 0
    sampler = qv.GraphSageSampler(topo, sizes, device=device, mode=mode, return_eid=True)
    seeds = graph.train_idx[:50]
    n_id, batch_size, adjs = sampler.sample(seeds)
    assert batch_size == 50 and torch.equal(n_id[:50].cpu(), seeds)
    assert len(adjs) == len(sizes)
    num_sources = n_id.numel()
    for adj in adjs:  # outermost first: sources shrink toward the seeds
        edge_index, e_id, (n_src, n_dst) = adj
        assert n_src == num_sources and n_dst <= n_src
        assert edge_index.size(1) == e_id.numel()
        assert int(edge_index[0].max()) < n_src and int(edge_index[1].max()) < n_dst
        # e_id are input edge ids: edge_index[1] is the node sampled for, edge_index[0] its neighbor
        n_id_cpu, ei, eid = n_id.cpu(), edge_index.cpu(), e_id.cpu()
        assert torch.equal(graph.edge_index[0][eid], n_id_cpu[ei[1]])
        assert torch.equal(graph.edge_index[1][eid], n_id_cpu[ei[0]])
        num_sources = n_dst
    assert num_sources == batch_size
    # each layer's edges are a prefix of the layer outside it
    assert torch.equal(adjs[0].edge_index[:, :adjs[1].edge_index.size(1)], adjs[1].edge_index)
    # each hop's new targets got min(degree, that hop's fanout) neighbors (the sizes reach
    # the op: sampling every neighbor passed the checks above)
    assert int(topo.degree[seeds].max()) > sizes[0]  # the graph can tell
    prev_edges = prev_dst = 0
    for hop, adj in enumerate(reversed(adjs)):
        ei, n_dst = adj.edge_index.cpu(), adj.size[1]
        got = torch.bincount(ei[1, prev_edges:] - prev_dst, minlength=n_dst - prev_dst)
        want = topo.degree[n_id.cpu()[prev_dst:n_dst]].long().clamp(max=sizes[hop])
        assert torch.equal(got, want), hop
        prev_edges, prev_dst = ei.size(1), n_dst


def test_edge_ids_only_on_request(graph, mode):
    topo = qv.CSRTopo(graph.edge_index)
    device = "cpu" if mode == "CPU" else 0
    plain = qv.GraphSageSampler(topo, [3, 2], device=device, mode=mode)
    n_id, _, adjs = plain.sample(graph.train_idx[:8])
    assert all(adj.e_id is None for adj in adjs)
    with_ids = qv.GraphSageSampler(topo, [3, 2], device=device, mode=mode, return_eid=True)
    assert all(adj.e_id is not None for adj in with_ids.sample(graph.train_idx[:8])[2])
    # A CSR given without eid: its edges are named by their CSR positions.
    csr = qv.CSRTopo(indptr=topo.indptr, indices=topo.indices)
    n_id, _, adjs = qv.GraphSageSampler(csr, [3], device=device, mode=mode,
                                        return_eid=True).sample(graph.train_idx[:8])
    e_id, ei, n_id = adjs[0].e_id.cpu(), adjs[0].edge_index.cpu(), n_id.cpu()
    assert torch.equal(csr.indices[e_id].long(), n_id[ei[0]])  # the neighbor's CSR slot
    assert bool(((csr.indptr[n_id[ei[1]]] <= e_id) & (e_id < csr.indptr[n_id[ei[1]] + 1])).all())


def test_adjs_feed_a_pyg_model(graph):
    """With every neighbor taken, the sampled layers give the seeds what the same model
    gives them on the whole graph (a neighbor sends to the node whose list holds it)."""
    pyg = pytest.importorskip("torch_geometric.nn")
    torch.manual_seed(0)
    topo = qv.CSRTopo(graph.edge_index)
    sampler = qv.GraphSageSampler(topo, [-1, -1], mode="CPU")
    seeds = graph.train_idx[:16]
    n_id, batch_size, adjs = sampler.sample(seeds)
    convs = [pyg.SAGEConv(graph.x.size(1), 8), pyg.SAGEConv(8, 3)]
    x = graph.x[n_id]
    for conv, (edge_index, _, size) in zip(convs, adjs):
        x = conv((x, x[:size[1]]), edge_index)
    assert x.shape == (batch_size, 3)
    full = graph.x
    for conv in convs:
        full = conv(full, graph.edge_index.flip(0))
    assert torch.allclose(x, full[seeds], atol=1e-5)


def test_bad_input(graph):
    topo = qv.CSRTopo(graph.edge_index)
    sampler = qv.GraphSageSampler(topo, [3], mode="CPU")
    # the op's own checks, with the op's exception types
    with pytest.raises(ValueError, match="seeds must be a 1-D tensor"):
        sampler.sample(torch.tensor([[1, 2]]))
    with pytest.raises(TypeError, match="seeds must hold int32 or int64 ids"):
        sampler.sample(torch.tensor([1.0]))
    with pytest.raises(IndexError, match="out of range"):
        sampler.sample(torch.tensor([topo.node_count]))
    with pytest.raises(ValueError, match=r"sizes\[1\] must be -1 \(all neighbors\) or >= 0, got -2"):
        qv.GraphSageSampler(topo, [3, -2], mode="CPU")
    with pytest.raises(ValueError, match=r"sizes must name at least one hop"):
        qv.GraphSageSampler(topo, [], mode="CPU")
    # "15" is not the hops 1 and 5, nor 2.9 a fanout of 2
    for sizes, bad in [("15", "'15'"), ([2.9, 1], "2.9"), ([True], "True")]:
        with pytest.raises(TypeError, match=f"sizes must be a sequence of ints.*got {bad}"):
            qv.GraphSageSampler(topo, sizes, mode="CPU")
    assert qv.GraphSageSampler(topo, (torch.tensor(3), 2), mode="CPU").sizes == [3, 2]
    with pytest.raises(ValueError, match="seed_time is for temporal sampling"):
        sampler.sample(torch.tensor([0]), seed_time=torch.tensor([-999]))  # not ignored
    with pytest.raises(ValueError, match=r"sizes\[0\] with replacement"):
        qv.GraphSageSampler(topo, [1 << 40], mode="CPU", replace=True)
    for mode in ("TPU", 3):
        with pytest.raises(ValueError, match="mode must be one of"):
            qv.GraphSageSampler(topo, [3], mode=mode)
    # In CPU mode the device is not read, as in torch-quiver, whose scripts pass 'CPU'.
    assert qv.GraphSageSampler(topo, [3], device="CPU", mode="cpu").device.type == "cpu"
    with pytest.raises(ValueError, match="samples on a GPU"):
        qv.GraphSageSampler(topo, [3], device="cpu", mode="GPU")
    if not HAS_CUDA:
        with pytest.raises(RuntimeError, match=r"^mode 'UVA' needs (a CUDA GPU, and torch "
                                                r"sees none|the CUDA kernels)"):
            qv.GraphSageSampler(topo, [3], device=0, mode="UVA")


def test_empty_batch_gives_an_empty_subgraph(graph, mode):
    topo = qv.CSRTopo(graph.edge_index)
    sampler = qv.GraphSageSampler(topo, [3, 2], device="cpu" if mode == "CPU" else 0, mode=mode)
    for empty in (torch.tensor([], dtype=torch.long), []):  # an empty list too
        n_id, batch_size, adjs = sampler.sample(empty)
        assert n_id.numel() == 0 and batch_size == 0
        assert all(adj.edge_index.size(1) == 0 and adj.size == (0, 0) for adj in adjs)


def test_zero_degree_seed_yields_lonely_subgraph():
    topo = qv.CSRTopo(torch.tensor([[0, 1], [1, 0]]), num_nodes=4)
    n_id, batch_size, adjs = qv.GraphSageSampler(topo, [2, 2], mode="CPU").sample(torch.tensor([3]))
    assert n_id.tolist() == [3] and batch_size == 1
    assert all(adj.edge_index.size(1) == 0 and adj.size == (1, 1) for adj in adjs)


def test_layers_take_one_edge_index_tensor_as_it_is():
    """layers_of stacks rows and cols, unless they already are the two rows of one [2, E]
    tensor, which it then takes as edge_index with no copy."""
    from torch_quiver_ops.sampler import _edge_index_of
    base = torch.arange(10).view(2, 5).clone()  # a tensor of its own, not a view
    assert _edge_index_of(base[0], base[1]) is base
    assert torch.equal(_edge_index_of(torch.arange(5), torch.arange(5, 10)), base)
    swapped = _edge_index_of(base[1], base[0])
    assert swapped is not base and torch.equal(swapped, base.flip(0))
    wide = torch.arange(12).view(2, 6)
    assert torch.equal(_edge_index_of(wide[0, :5], wide[1, :5]), wide[:, :5])
    flat = base.view(-1)  # strided or reinterpreted views of the base are stacked, not taken
    assert torch.equal(_edge_index_of(flat[::2], flat[5:]), torch.stack([flat[::2], flat[5:]]))
    halves = base.view(torch.int32)
    assert torch.equal(_edge_index_of(halves[0, :5], halves[1, :5]),
                       torch.stack([halves[0, :5], halves[1, :5]]))


@pytest.mark.parametrize("gpu_mode", ["GPU", "UVA"])
def test_a_gpu_sampler_hands_its_edge_index_over_without_a_copy(graph, gpu_mode):
    """A GPU sampler object's rows and cols share one [2, E] tensor, through its first call
    (run as launched), its capture and its replays, and the layers' edge_index is that
    tensor; the op's own outputs alias nothing (its schema says so)."""
    if not HAS_CUDA:
        pytest.skip("needs a CUDA GPU and the CUDA kernels")
    from torch_quiver_ops.sampler import layers_of
    topo = qv.CSRTopo(graph.edge_index)
    sampler = qv.GraphSageSampler(topo, [4, 3], device=0, mode=gpu_mode)
    for seeds in (graph.train_idx[:20], graph.train_idx[20:40], graph.train_idx[40:60]):
        out = sampler.sample_subgraph(seeds)
        rows, cols = out[1], out[2]
        assert rows._base is not None and rows._base is cols._base
        _, _, adjs = layers_of(out, False)
        assert adjs[0].edge_index.data_ptr() == rows.data_ptr()
        assert torch.equal(adjs[0].edge_index, torch.stack([rows, cols]))
    indptr, indices = sampler._indptr, sampler._indices
    op_out = qv.ops.sample_subgraph(indptr, indices, graph.train_idx[:20].cuda(), [4, 3])
    assert all(t._base is None for t in op_out[:4])


def test_host_seeds_on_a_gpu_this_process_lacks_are_a_value_error(graph):
    """SubgraphSampler.sample_subgraph_on names its GPU by index; one past this process's
    GPUs (all of them on a machine without any) is refused before anything runs."""
    topo = qv.CSRTopo(graph.edge_index)
    sampler = torch.classes.quiver.SubgraphSampler(
        topo.indptr, topo.indices, None, [3, 2], False, None, None, None, None, False,
        "uniform", False, None, True)
    gpus = torch.cuda.device_count()
    with pytest.raises(ValueError, match=f"device must be a GPU index below {gpus} .*got {gpus}"):
        sampler.sample_subgraph_on(graph.train_idx[:4], gpus, None)


def test_weights_follow_the_topologys_eid_and_refuse_ids_past_them():
    """Per-edge weights and times are read as values[eid]. With eid a permutation of the
    columns, the weight given at position k is that of the edge whose id is k; ids that are
    no positions (a subgraph's e_id) were an IndexError from inside torch (found by a
    probe), now a ValueError that says how the values are indexed."""
    edge_index = torch.tensor([[0, 0, 0], [1, 2, 3]])  # node 0 lists 1, 2, 3
    eid = torch.tensor([2, 0, 1])  # column 0 is edge 2, column 1 edge 0, column 2 edge 1
    topo = qv.CSRTopo(edge_index, eid=eid)
    weights = torch.tensor([0.0, 0.0, 1.0])  # only edge 2 (column 0: 0 -> 1) may be drawn
    sampler = qv.GraphSageSampler(topo, [2], mode="CPU", weights=weights)
    for _ in range(5):
        nodes, _, _ = sampler.sample(torch.tensor([0]))
        assert nodes.tolist() == [0, 1]
    topo = qv.CSRTopo(edge_index, eid=torch.tensor([10, 11, 12]))
    for name in ("weights", "edge_time"):
        with pytest.raises(ValueError, match=r"indexed by csr_topo.eid, which holds 12, "
                                             r"outside \[0, 3\)"):
            qv.GraphSageSampler(topo, [2], mode="CPU", **{name: torch.ones(3)})


def test_subnormal_weights_are_refused_whatever_their_dtype():
    """float32's subnormals keep no odds on every device (the GPU's float keys of short rows
    read them as -inf), so weights below its normal range are refused as float32 too."""
    step = torch.finfo(torch.float32).tiny * 2.0 ** -23  # float32's least subnormal
    topo = qv.CSRTopo(torch.tensor([[0, 0], [1, 2]]))
    with pytest.raises(ValueError, match=r"weights\[0\] = 1\.4\d*e-45 is below float32's "
                                         r"normal range"):
        qv.GraphSageSampler(topo, [1], mode="CPU", weights=torch.tensor([step, 3 * step]))
    tiny = torch.finfo(torch.float32).tiny  # the least normal float32 is taken
    sampler = qv.GraphSageSampler(topo, [1], mode="CPU", weights=torch.tensor([tiny, 0.0]))
    assert sampler.sample(torch.tensor([0]))[0].tolist() == [0, 1]


def test_huge_fanouts_hot_order_without_a_cache_and_missing_gpus_are_named(graph):
    """A fanout past 64 bits was torch's unnamed "Expected a value of type List[int]" (a
    review). hot_order orders only the topology cache: without one it was checked and
    dropped silently. device='cuda' on a machine whose torch sees no GPU raised torch's
    own "no NVIDIA driver" from deep inside (both found by a probe)."""
    topo = qv.CSRTopo(graph.edge_index, num_nodes=graph.num_nodes)
    with pytest.raises(ValueError, match=r"sizes\[1\] = 2361183241434822606848 does not fit"):
        qv.GraphSageSampler(topo, [2, 2 ** 71], mode="CPU")  # was torch's unnamed refusal
    with pytest.raises(ValueError, match="hot_order orders the topology cache"):
        qv.GraphSageSampler(topo, [2], mode="CPU", hot_order=torch.arange(graph.num_nodes))
    assert qv.GraphSageSampler(topo, [2], device="CPU").mode == "CPU"  # without mode="CPU"
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="'cuda' is a GPU, and torch sees none"):
            qv.GraphSageSampler(topo, [2], device="cuda")
        for device in ("cuda:0", 0):  # an index is parsed; the sampler names the lack
            # (and the device asked for: it named only the default mode, never asked for)
            with pytest.raises(RuntimeError, match=f"device={device!r} \\(sampled in mode "
                                                   f"'UVA', the default on a GPU\\) needs a "
                                                   f"CUDA GPU, and torch sees none"):
                qv.GraphSageSampler(topo, [2], device=device)


def test_arguments_of_the_wrong_kind_are_named_where_they_are_given():
    """From a probe: each of these was taken silently (a flag given as 'False' turned it
    on, a uint64 time past int64's range wrapped to before every other, another device
    sampled on the CPU), or failed later naming another argument or none."""
    import numpy as np
    edge_index = torch.tensor([[0, 0, 1], [1, 2, 2]])
    topo = qv.CSRTopo(edge_index, num_nodes=3)
    sampler = qv.GraphSageSampler(topo, [2], device="cpu")
    timed = qv.GraphSageSampler(topo, [-1], device="cpu", edge_time=torch.tensor([1, 5, 5]))
    past = torch.tensor([2**64 - 1], dtype=torch.uint64)
    cases = [
        (lambda: qv.GraphSageSampler(topo, [-1], device="cpu",
                                     edge_time=torch.tensor([2**64 - 1, 5, 5], dtype=torch.uint64)),
         ValueError, "edge_time[0] = 18446744073709551615 is past int64's range"),
        (lambda: timed.neighbor_sample(torch.tensor([0]), past), ValueError, "seed_time[0]"),
        (lambda: qv.GraphSageSampler(topo, [2], device="cpu", disjoint="False"), TypeError,
         "disjoint must be True or False"),
        (lambda: qv.GraphSageSampler(topo, [2], device="cpu", return_eid="False"), TypeError,
         "return_eid must be True or False"),
        (lambda: qv.GraphSageSampler(topo, [2], device="cpu", replace=None), TypeError,
         "replace must be True or False"),
        (lambda: qv.GraphSageSampler(topo, [2], device="meta"), ValueError,
         "device must be a GPU or the CPU, got 'meta'"),
        (lambda: qv.GraphSageSampler(None, [2], device="cpu"), TypeError,
         "csr_topo must be a CSRTopo, got NoneType"),
        (lambda: qv.GraphSageSampler(topo, torch.tensor(5)), TypeError, "sizes must be"),
        (lambda: qv.GraphSageSampler(topo, [2], device="cpu",
                                     weights=torch.full((3,), 1e300, dtype=torch.float64)),
         ValueError, "weights[0] = 1e+300 is past float32's range"),
        # (1e-50 read as float32 is 0, which masked the edge: dropped with no word)
        (lambda: qv.GraphSageSampler(topo, [2], device="cpu",
                                     weights=torch.tensor([1.0, 1e-50, 1.0], dtype=torch.float64)),
         ValueError, "weights[1] = 1e-50 is below float32's normal range"),
        # (2e-45 read as float32 is the subnormal 1.4e-45, as 1e-45 is: odds of 2 to 1 read 1
        # to 1, with no word; a probe)
        (lambda: qv.GraphSageSampler(topo, [2], device="cpu",
                                     weights=torch.tensor([1.0, 2e-45, 1.0], dtype=torch.float64)),
         ValueError, "weights[1] = 2e-45 is below float32's normal range"),
        # (2-D with a NaN: named by shape, not as "only one element tensors"; a review)
        (lambda: qv.GraphSageSampler(topo, [2], device="cpu",
                                     weights=torch.tensor([[1.0, float("nan"), 1.0]])),
         ValueError, r"weights must hold one value per edge (3), got shape (1, 3)"),
        # (as a list, read as float32 first: 1e-50 was a 0 that masked its edge; a probe)
        (lambda: qv.GraphSageSampler(topo, [2], device="cpu", weights=[1.0, 1e-50, 1.0]),
         ValueError, "weights[1] = 1e-50 is below float32's normal range"),
        (lambda: qv.GraphSageSampler(topo, [2], device="cpu",
                                     weights=torch.ones(3, dtype=torch.complex64)),
         TypeError, "weights must hold real numbers"),
        (lambda: qv.GraphSageSampler(topo, [2], device="cpu", hot_order=torch.arange(3),
                                     topology_cache=0), ValueError, "hot_order orders"),
        (lambda: qv.GraphSageSampler(topo, [2], device="cpu", uva_row_order=True), ValueError,
         "uva_row_order orders"),
        (lambda: sampler.sample(torch.tensor([0]), 5), TypeError, "generator must be"),
        (lambda: sampler.sample(None), TypeError, "seeds must be integer ids"),
        (lambda: sampler.sample(torch.tensor([0], device="meta")), TypeError,
         "seeds are a meta tensor, which holds no ids"),
        (lambda: qv.GraphSageSampler(topo, [2], device="gpu0"), ValueError,
         "device must be a torch.device, a string such as 'cpu' or 'cuda:0', or a GPU index, "
         "got 'gpu0'"),
        (lambda: sampler.sample("1"), TypeError, "seeds must be integer ids"),
        (lambda: qv.SampleLoader(sampler, None, torch.arange(3), 4, drop_last="False"),
         TypeError, "drop_last must be True or False"),
        (lambda: qv.SampleLoader(sampler, None, torch.arange(3), 4, shuffle=None), TypeError,
         "shuffle must be True or False"),
        (lambda: qv.SampleLoader(sampler, None, torch.arange(3), 4,
                                 prefetch_host_read_blocks=-1),
         ValueError, "prefetch_host_read_blocks must be"),
        (lambda: qv.SampleLoader(sampler, None, torch.arange(3), 4, generator=5), TypeError,
         "generator must be a torch.Generator"),
        (lambda: qv.SampleLoader(None, None, torch.arange(3), 4), TypeError,
         "sampler must be a GraphSageSampler"),
        (lambda: qv.SampleLoader(sampler, None, torch.arange(3), 4, labels=torch.tensor(1)),
         ValueError, "labels must hold one label per node"),
        (lambda: qv.SampleLoader(sampler, torch.zeros(2, 4), torch.arange(3), 4), ValueError,
         "feature has 2 rows but the graph has 3 nodes"),
        (lambda: qv.LinkSampleLoader(sampler, None, edge_index, 4,
                                     edge_label=torch.tensor(1.0)),
         ValueError, "edge_label must hold one label per seed edge"),
        (lambda: qv.LinkSampleLoader(sampler, None, edge_index, 4, neg_ratio="1"), TypeError,
         "neg_ratio must be a number"),
        # (these failed at the first batch, in torch.randint or an allocation of petabytes)
        (lambda: qv.LinkSampleLoader(sampler, None, edge_index, 2, neg_ratio=1e15), ValueError,
         "neg_ratio=1000000000000000.0 asks for 2000000000000000 negatives a batch of 2 "
         "edges, over the limit of 4294967294: lower neg_ratio or batch_size"),
        (lambda: qv.LinkSampleLoader(sampler, None, edge_index, 2**40, neg_ratio=2**31),
         ValueError, "asks for 6442450944 negatives a batch of 3 edges"),  # (3 edges in all)
        (lambda: qv.LinkSampleLoader(sampler, None, edge_index, 2, neg_max_trials=0),
         ValueError, "neg_max_trials must be an int in [1, 1000], got 0"),
        # (None turned the exclusion off, unsaid; per_src=True drew one: a probe)
        (lambda: sampler.sample_negatives(torch.tensor([0]), 1, None), TypeError,
         "exclude_edges must be True or False, got None"),
        (lambda: sampler.sample_negatives(torch.tensor([0]), True), TypeError,
         "per_src must be an int >= 0, got True"),
        (lambda: sampler.sample_negatives(torch.tensor([0]), 1, out_rows="no"), TypeError,
         "out_rows must be True or False"),
        (lambda: sampler.sample_negatives(torch.tensor([0]), 2**33), ValueError,
         "draw fewer negatives per source (per_src) or for fewer sources at once"),
    ]
    if not torch.cuda.is_available():
        cases += [(lambda: qv.SampleLoader(sampler, None, torch.arange(3), 4, prefetch_sms=4),
                   ValueError, "prefetch_sms=4: SMs are a GPU's"),
                  (lambda: qv.Prefetcher([], device=0), RuntimeError,
                   "device=0 is a GPU, and torch sees none")]
    for make, error, words in cases:
        with pytest.raises(error) as raised:
            make()
        assert words in str(raised.value), (words, str(raised.value))
    # Taken as they are meant: numpy flags and sizes, empty seed times, narrow seed ids.
    assert qv.GraphSageSampler(topo, [2], device="cpu", replace=np.bool_(True)).replace is True
    assert timed.sample([], seed_time=[])[0].numel() == 0
    loader = qv.SampleLoader(sampler, None, torch.arange(3, dtype=torch.uint8), np.int64(2),
                             shuffle=False)
    assert [batch[1] for batch in loader] == [2, 1] and len(loader) == 2
