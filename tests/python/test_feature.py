"""The tiered feature store: quiver::gather_tiered_rows against x[ids] on every placement,
and Feature over every policy, order, dtype and cache size."""
import pytest
import torch

import torch_quiver_ops as qv
from conftest import HAS_CUDA, requires_cuda
from torch_quiver_ops.feature import p2p_cliques
from torch_quiver_ops.synthetic import synthetic_graph

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def random_table(rows, width, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, width, generator=gen) * 30).to(dtype)


def split_tiers(hot_first, bounds, mode):
    """Cuts a hot-ordered table at `bounds`: memory tiers first (on the GPU in GPU mode),
    then the host tier (pinned in GPU and UVA modes)."""
    cuts = [0, *bounds, hot_first.size(0)]
    parts = [hot_first[a:b].contiguous() for a, b in zip(cuts[:-1], cuts[1:])]
    if mode == "GPU":
        return [p.cuda() for p in parts[:-1]] + [parts[-1].pin_memory()]
    if mode == "UVA":
        return [p.pin_memory() for p in parts]
    return parts


def ids_device(mode):
    return torch.device("cpu") if mode == "CPU" else torch.device("cuda")


# ---- the op ----

@pytest.mark.parametrize("dtype", DTYPES + [torch.int64, torch.uint8])
@pytest.mark.parametrize("width", [1, 3, 100, 129])
@pytest.mark.parametrize("positions_dtype", [None, torch.int32, torch.int64])
def test_op_matches_indexing(mode, dtype, width, positions_dtype, index_dtype):
    table = random_table(700, width, dtype, seed=width)
    gen = torch.Generator().manual_seed(3)
    if positions_dtype is None:
        order, positions = torch.arange(700), None
    else:
        order = torch.randperm(700, generator=gen)
        positions = torch.empty(700, dtype=positions_dtype)
        positions[order] = torch.arange(700, dtype=positions_dtype)
    tiers = split_tiers(table[order], [50, 51, 300], mode)  # one tier of a single row
    device = ids_device(mode)
    ids = torch.randint(700, (2000,), generator=gen)  # with duplicates
    out = qv.ops.gather_tiered_rows(tiers, None if positions is None else positions.to(device),
                                    ids.to(index_dtype).to(device))
    assert out.dtype == dtype and out.shape == (2000, width) and out.device.type == device.type
    assert torch.equal(out.cpu(), table[ids])


def test_op_empty_ids_and_empty_tiers(mode):
    table = random_table(40, 5, torch.float32)
    device = ids_device(mode)
    tiers = split_tiers(table, [0, 40], mode)  # an empty memory tier and an empty host tier
    none = torch.empty(0, dtype=torch.long, device=device)
    assert qv.ops.gather_tiered_rows(tiers, None, none).shape == (0, 5)
    ids = torch.tensor([39, 0, 0], device=device)
    assert torch.equal(qv.ops.gather_tiered_rows(tiers, None, ids).cpu(), table[ids.cpu()])


def test_op_rejects_bad_input(mode):
    device = ids_device(mode)
    table = random_table(10, 4, torch.float32)
    tiers = split_tiers(table, [4], mode)
    with pytest.raises(IndexError, match=r"ids\[1\] = 10 is out of range \[0, 10\)"):
        qv.ops.gather_tiered_rows(tiers, None, torch.tensor([0, 10], device=device))
    with pytest.raises(IndexError, match=r"ids\[0\] = -3 is out of range"):
        qv.ops.gather_tiered_rows(tiers, None, torch.tensor([-3], device=device))
    positions = torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 12], device=device)  # corrupt
    with pytest.raises(IndexError, match=r"positions\[9\] = 12 is out of range \[0, 10\)"):
        qv.ops.gather_tiered_rows(tiers, positions, torch.tensor([9], device=device))
    with pytest.raises(TypeError, match=r"tiers\[1\] holds Double but tiers\[0\] holds Float"):
        qv.ops.gather_tiered_rows([tiers[0], tiers[1].double()], None, torch.tensor([0], device=device))
    with pytest.raises(ValueError, match=r"tiers\[1\] has rows of shape \[2\]"):
        qv.ops.gather_tiered_rows([tiers[0], tiers[1][:, :2].contiguous()], None,
                                  torch.tensor([0], device=device))
    with pytest.raises(ValueError, match="tiers must hold 1 to 17 tensors, got 0"):
        qv.ops.gather_tiered_rows([], None, torch.tensor([0], device=device))
    with pytest.raises(TypeError, match="ids must hold int32 or int64 ids, got Float"):
        qv.ops.gather_tiered_rows(tiers, None, torch.tensor([0.0], device=device))
    with pytest.raises(TypeError, match="positions must hold int32 or int64 ids"):
        qv.ops.gather_tiered_rows(tiers, positions.float(), torch.tensor([0], device=device))


@requires_cuda
def test_op_placement_errors():
    table = random_table(10, 4, torch.float32)
    with pytest.raises(RuntimeError, match=r"tiers\[1\] is in pageable host memory"):
        qv.ops.gather_tiered_rows([table[:4].cuda(), table[4:]], None,
                                  torch.tensor([5], device="cuda"))
    with pytest.raises(RuntimeError, match="needs ids on a GPU"):
        qv.ops.gather_tiered_rows([table[:4].cuda(), table[4:].pin_memory()], None,
                                  torch.tensor([5]))
    with pytest.raises(RuntimeError, match="positions is in pageable host memory"):
        qv.ops.gather_tiered_rows([table.cuda()], torch.arange(10), torch.tensor([5], device="cuda"))


def test_op_opcheck(mode):
    if mode == "UVA":
        pytest.skip("opcheck copies inputs into pageable memory; the GPU-mode run checks "
                    "the same kernel and fake")
    device = ids_device(mode)
    table = random_table(30, 6, torch.float16).to(device)
    positions = torch.randperm(30).to(device)
    for ids in [torch.tensor([3, 3, 29]), torch.tensor([0], dtype=torch.int32),
                torch.empty(0, dtype=torch.long)]:
        args = ([table[:7], table[7:]], positions, ids.to(device))
        torch.library.opcheck(torch.ops.quiver.gather_tiered_rows.default, args)
        torch.library.opcheck(torch.ops.quiver.gather_tiered_rows.default,
                              ([table], None, ids.to(device)))


def test_torchscript_reaches_the_layout(tmp_path):
    table = random_table(50, 3, torch.float32)
    layout = torch.classes.quiver.FeatureTiers([table[:20], table[20:]], None)

    @torch.jit.script
    def gather(layout: torch.classes.quiver.FeatureTiers, ids: torch.Tensor) -> torch.Tensor:
        return layout.gather(ids)

    ids = torch.tensor([49, 0, 21])
    assert torch.equal(gather(layout, ids), table[ids])
    assert layout.num_rows() == 50 and layout.shape() == [50, 3] and layout.leading_rows() == 20


def test_torch_compile_fullgraph():
    feature = qv.Feature().from_cpu_tensor(random_table(64, 4, torch.float32))
    layout = feature.tiers("cpu")

    @torch.compile(fullgraph=True, backend="aot_eager")
    def gather_sum(tiers, positions, ids):
        return qv.ops.gather_tiered_rows(tiers, positions, ids).sum(1)

    ids = torch.tensor([3, 63, 3])
    assert torch.allclose(gather_sum(layout.tiers(), layout.positions(), ids),
                          layout.gather(ids).sum(1))


# ---- Feature ----

def graph_and_ids(seed=0):
    graph = synthetic_graph("tiny", seed=seed)
    topo = qv.CSRTopo(graph.edge_index)
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(topo.node_count, (3000,), generator=gen)
    return graph, topo, ids


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("policy", ["device_replicate", "p2p_clique_replicate"])
@pytest.mark.parametrize("cached_fraction", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("order", ["given", "degree", "user"])
def test_feature_matches_indexing(dtype, policy, cached_fraction, order):
    graph, topo, ids = graph_and_ids()
    x = graph.x.to(dtype)
    row_bytes = x[0].nbytes
    cache = int(cached_fraction * x.size(0)) * row_bytes
    hot_order = torch.randperm(x.size(0)) if order == "user" else None
    feature = qv.Feature(rank=0, device_list=[0], device_cache_size=cache, cache_policy=policy,
                         csr_topo=topo if order == "degree" else None)
    feature.from_cpu_tensor(x, hot_order=hot_order)
    out = feature[ids]
    assert out.dtype == dtype and out.shape == (ids.numel(), x.size(1))
    assert out.device.type == ("cuda" if HAS_CUDA else "cpu")
    assert torch.equal(out.cpu(), x[ids])
    assert feature[ids[:0]].shape == (0, x.size(1))
    expected_cached = int(cached_fraction * x.size(0)) if HAS_CUDA else 0
    assert feature.cached_rows == expected_cached
    hot = (hot_order if order == "user" else
           topo.feature_order if order == "degree" else torch.arange(x.size(0)))
    cached = torch.zeros(x.size(0), dtype=torch.bool)
    cached[hot[:expected_cached]] = True
    assert feature.hit_rate(ids) == pytest.approx(cached[ids].double().mean().item())
    if HAS_CUDA:  # CPU ids are served on the current GPU; CPU-side reads still work
        assert torch.equal(feature[ids.cuda()].cpu(), x[ids])
        assert torch.equal(feature.tiers("cpu").gather(ids), x[ids])


def test_feature_shape_and_row_shapes():
    x = torch.randn(30, 2, 5)
    feature = qv.Feature(device_cache_size="1K").from_cpu_tensor(x)
    assert feature.shape == x.shape and feature.size() == x.shape and feature.size(2) == 5
    assert feature.dim() == 3 and len(feature) == 30 and feature.dtype == torch.float32
    assert torch.equal(feature[[4, 29]].cpu(), x[[4, 29]])


def test_presampled_order_beats_degree_on_sampled_batches():
    graph, topo, _ = graph_and_ids(seed=5)
    device = "cuda" if HAS_CUDA else "cpu"
    sampler = qv.GraphSageSampler(topo, [10, 5], device=device,
                                  mode="GPU" if HAS_CUDA else "CPU")
    train = graph.train_idx
    torch.manual_seed(11)
    hot = qv.presample_hot_order(sampler, train, batch_size=64,
                                 generator=torch.Generator().manual_seed(1))
    assert torch.equal(torch.sort(hot).values, torch.arange(topo.node_count))
    # Replays the same batches (same seeds) and counts: hotter rows were read more often,
    # and equally often read rows go by degree.
    torch.manual_seed(11)
    counts = torch.zeros(topo.node_count, dtype=torch.long)
    shuffled = train[torch.randperm(train.numel(), generator=torch.Generator().manual_seed(1))]
    for batch in shuffled.split(64):
        counts[sampler.sample_subgraph(batch)[0].cpu()] += 1
    assert counts.sum() > 0 and (counts == 0).any()
    ranked = counts[hot]
    assert bool((ranked[:-1] >= ranked[1:]).all())
    degree = topo.degree[hot]
    ties = ranked[:-1] == ranked[1:]
    assert bool((degree[:-1][ties] >= degree[1:][ties]).all())
    # Its cache serves sampled batches at least as well as a degree-ordered cache.
    x = graph.x
    cache = x.size(0) // 5 * x[0].nbytes
    batches = [sampler.sample_subgraph(b)[0].cpu() for b in train[:640].split(64)]
    by_access = qv.Feature(device_cache_size=cache).from_cpu_tensor(x, hot_order=hot)
    by_degree = qv.Feature(device_cache_size=cache, csr_topo=topo).from_cpu_tensor(x)
    for n_id in batches:
        assert torch.equal(by_access[n_id].cpu(), x[n_id])
    if HAS_CUDA:
        access_hits = sum(by_access.hit_rate(b) for b in batches)
        degree_hits = sum(by_degree.hit_rate(b) for b in batches)
        assert access_hits >= degree_hits > 0


def test_feature_rejects_bad_input():
    x = torch.randn(10, 3)
    with pytest.raises(ValueError, match="cache_policy must be one of"):
        qv.Feature(cache_policy="lru")
    with pytest.raises(ValueError, match="names a GPU twice"):
        qv.Feature(device_list=[0, 0])
    with pytest.raises(ValueError, match="cannot read 'lots'"):
        qv.Feature(device_cache_size="lots")
    with pytest.raises(RuntimeError, match="holds no data yet"):
        qv.Feature()[torch.tensor([0])]
    with pytest.raises(ValueError, match="at least one dimension"):
        qv.Feature().from_cpu_tensor(torch.tensor(1.0))
    with pytest.raises(ValueError, match="hot_order must list each of the 10 rows once, got 9"):
        qv.Feature().from_cpu_tensor(x, hot_order=torch.arange(9))
    with pytest.raises(ValueError, match="not a permutation: row 9 is missing"):
        qv.Feature().from_cpu_tensor(x, hot_order=torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 8]))
    with pytest.raises(IndexError, match="hot_order holds id 10"):
        qv.Feature().from_cpu_tensor(x, hot_order=torch.arange(1, 11))
    with pytest.raises(TypeError, match="hot_order must be a 1-D tensor of int32/int64"):
        qv.Feature().from_cpu_tensor(x, hot_order=torch.arange(10.0))
    feature = qv.Feature(device_cache_size="64").from_cpu_tensor(x)
    with pytest.raises(IndexError, match=r"ids\[1\] = 10 is out of range \[0, 10\)"):
        feature[torch.tensor([0, 10])]
    with pytest.raises(ValueError, match="needs 1-D ids"):
        feature[torch.tensor([[0]])]
    with pytest.raises(ValueError, match="csr_topo has"):
        qv.Feature(csr_topo=qv.CSRTopo(torch.tensor([[0], [1]]), num_nodes=4)).from_cpu_tensor(x)


@requires_cuda
def test_gpu_outside_device_list_is_refused():
    feature = qv.Feature(device_list=[0], device_cache_size="1K").from_cpu_tensor(torch.randn(99, 4))
    with pytest.raises(ValueError, match="caches rows on GPUs \\[0\\], and cuda:7 is not one"):
        feature.tiers("cuda:7")


@requires_cuda
def test_host_tier_is_pinned_in_place_and_cache_in_hbm():
    x = torch.randn(1000, 16)
    feature = qv.Feature(device_cache_size=100 * x[0].nbytes).from_cpu_tensor(x)
    tiers = feature.tiers().tiers()
    assert [t.device.type for t in tiers] == ["cuda", "cpu"]
    assert tiers[0].shape[0] == 100 and tiers[1].shape[0] == 900
    assert tiers[1].is_pinned() and tiers[1].is_shared()
    assert tiers[1].data_ptr() == feature._host[100:].data_ptr()  # no second host copy


def test_p2p_cliques_follow_peer_access(monkeypatch):
    links = {(0, 1), (1, 0), (2, 3), (3, 2), (0, 2), (2, 0)}
    monkeypatch.setattr(torch.cuda, "can_device_access_peer", lambda a, b: (a, b) in links)
    assert p2p_cliques([0, 1, 2, 3]) == [[0, 1], [2, 3]]
    assert p2p_cliques([0, 2, 1]) == [[0, 2], [1]]
    assert p2p_cliques([]) == []


@pytest.mark.skipif(not HAS_CUDA or torch.cuda.device_count() < 2, reason="needs two GPUs")
@pytest.mark.parametrize("policy", ["device_replicate", "p2p_clique_replicate"])
def test_two_gpus(policy):
    if policy == "p2p_clique_replicate" and not torch.cuda.can_device_access_peer(0, 1):
        pytest.skip("GPUs 0 and 1 cannot read each other's memory")
    graph, topo, ids = graph_and_ids(seed=9)
    x = graph.x
    cache = x.size(0) // 4 * x[0].nbytes
    feature = qv.Feature(0, [0, 1], cache, policy, csr_topo=topo).from_cpu_tensor(x)
    for device in (0, 1):
        out = feature[ids.to(f"cuda:{device}")]
        assert out.device == torch.device("cuda", device)
        assert torch.equal(out.cpu(), x[ids])
        tiers = feature.tiers(device).tiers()
        if policy == "p2p_clique_replicate":  # both halves, read through peer pointers
            assert [t.device.index for t in tiers[:2]] == [0, 1]
            assert sum(t.size(0) for t in tiers[:2]) == 2 * feature.cached_rows
        else:
            assert tiers[0].device.index == device and tiers[0].size(0) == feature.cached_rows
    assert feature.hit_rate(ids, 0) == feature.hit_rate(ids, 1)


def test_empty_device_list_gathers_on_the_cpu():
    x = torch.randn(20, 3)
    feature = qv.Feature(device_list=[], device_cache_size="1M").from_cpu_tensor(x)
    out = feature[torch.tensor([3, 19])]
    assert out.device.type == "cpu" and torch.equal(out, x[[3, 19]])
    assert feature.cached_rows == 0
