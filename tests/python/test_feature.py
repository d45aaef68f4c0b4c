"""The Feature store (torch_quiver_ops.feature) over every policy, order, dtype and cache
size, against x[ids]; the op underneath is tested in test_gather_tiered_rows.py."""
import copy
import io
import pickle
import shutil
import warnings

import numpy as np
import pytest
import torch

import torch_quiver_ops as qv
from conftest import HAS_CUDA, requires_cuda
from torch_quiver_ops.feature import host_read_blocks
from torch_quiver_ops.synthetic import synthetic_graph

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def test_feature_indexes_like_a_tensor():
    x = torch.randn(200, 7)
    feature = qv.Feature(rank=0, device_list=[0], device_cache_size=0).from_cpu_tensor(x)
    ids = torch.tensor([5, 199, 5, 0])
    assert torch.equal(feature[ids].cpu(), x[ids])
    assert feature.shape == x.shape and feature.size(1) == 7 and feature.dim() == 2
    assert len(feature) == 200 and feature.dtype == torch.float32
    with pytest.raises(IndexError, match="out of range"):
        feature[torch.tensor([200])]


def test_feature_takes_one_index_of_row_ids():
    # A tuple read as row ids returned whole rows where a tensor gives one element, and a
    # bool among ints was read as node 1 (found by a probe).
    x = torch.arange(40.).view(10, 4)
    feature = qv.Feature().from_cpu_tensor(x)
    for index in [(3, 1), (torch.tensor(3), torch.tensor(1)), ([1, 2], 0), (slice(1, 3), 0)]:
        with pytest.raises(TypeError, match="Feature takes one index, the row ids"):
            feature[index]
    for index in [None, ...]:
        with pytest.raises(TypeError, match="must be row ids"):
            feature[index]
    with pytest.raises(TypeError, match="ids mix bools with ints"):
        feature[[0, True]]
    assert torch.equal(feature[[3, 1]].cpu(), x[[3, 1]])  # (rows on a GPU where there is one)
    assert torch.equal(feature[1:3].cpu(), x[1:3])
    # One id gives its row, as a tensor does (it was "ids must be a 1-D tensor"), on the
    # GPU too when the id is there.
    ids = [3, torch.tensor(3), np.int64(3)] + ([torch.tensor(3, device="cuda")] if HAS_CUDA else [])
    for one in ids:
        assert feature[one].shape == (4,) and torch.equal(feature[one].cpu(), x[3]), one
    with pytest.raises(IndexError, match=r"ids\[0\] = 10 is out of range"):
        feature[10]
    with pytest.raises(TypeError, match="int32 or int64 ids, got torch.bool"):
        feature[True]
    assert feature.size(-1) == 4
    with pytest.raises(IndexError, match="dim 5 is out of range for a table of 2"):
        feature.size(5)


def test_a_closed_feature_says_so_and_the_pace_is_a_bool():
    feature = qv.Feature().from_cpu_tensor(torch.randn(10, 3))
    with pytest.raises(ValueError, match="loader_ahead must be True or False, got 'no'"):
        feature.note_loader_pace("no")
    feature.note_loader_pace(True)
    # close()'s timeout and group are checked with nothing to wait for too ("x" passed)
    for timeout in ("x", -1, float("nan"), True):
        with pytest.raises(ValueError, match=r"timeout must be a number of seconds in \(0, "):
            feature.close(timeout=timeout)
    with pytest.raises(TypeError, match="group must be a torch.distributed ProcessGroup .* int"):
        feature.close(group=5)
    feature.close()
    with pytest.raises(RuntimeError, match="this Feature was closed"):
        feature[[1]]


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


@pytest.mark.parametrize("host_reads", ["zero_copy", "staged"])
def test_both_ways_of_reading_host_rows_match_indexing(host_reads):
    # Batches past 16384 ids take the grouped (zero-copy) or staged (CPU threads + copy
    # engine) path on a GPU; a pickled store keeps its choice.
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(20_000, 24, generator=gen).share_memory_()
    ids = torch.randint(20_000, (30_000,), generator=gen)
    feature = qv.Feature(device_cache_size="30%", host_reads=host_reads).from_cpu_tensor(
        x, hot_order=torch.randperm(20_000, generator=gen))
    assert torch.equal(feature[ids].cpu(), x[ids])
    if HAS_CUDA:
        assert torch.equal(feature[ids.cuda()].cpu(), x[ids])
    assert pickle.loads(pickle.dumps(feature)).host_reads == host_reads


def test_a_copy_keeps_the_table_private_and_workers_get_it_shared():
    """copy.deepcopy and torch.save had moved a private table into /dev/shm (with a
    warning about worker processes): only multiprocessing's pickler, which sends the
    Feature to workers, moves it now."""
    import copy
    import io
    from multiprocessing.reduction import ForkingPickler
    x = torch.randn(200, 8)
    feature = qv.Feature(device_cache_size="25%" if HAS_CUDA else 0).from_cpu_tensor(x)
    ids = torch.randint(200, (64,))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        copied = copy.deepcopy(feature)
        saved = io.BytesIO()
        torch.save(feature, saved)
    assert not feature._host.is_shared()
    saved.seek(0)
    for other in (copied, torch.load(saved, weights_only=False)):
        assert torch.equal(other[ids].cpu(), x[ids])
    with pytest.warns(UserWarning, match="moving the feature table into shared memory"):
        sent = ForkingPickler.dumps(feature)
    assert feature._host.is_shared() and torch.equal(pickle.loads(sent)[ids].cpu(), x[ids])
    assert torch.equal(feature[ids].cpu(), x[ids])


def test_auto_host_reads_stage_only_large_tables(monkeypatch):
    x = torch.randn(1000, 8)
    feature = qv.Feature(device_cache_size="10%").from_cpu_tensor(x)
    assert feature.host_reads == "auto" and not feature._stages_host_rows()
    monkeypatch.setattr(qv.feature, "STAGED_FROM_BYTES", x.nbytes)
    assert feature._stages_host_rows()
    ids = torch.randint(1000, (20_000,))
    assert torch.equal(feature[ids].cpu(), x[ids])
    assert not qv.Feature(host_reads="zero_copy").from_cpu_tensor(x)._stages_host_rows()


def test_cache_size_as_a_share_of_the_table():
    x = torch.randn(1000, 8)
    feature = qv.Feature(device_cache_size="25%").from_cpu_tensor(x)
    assert feature.cached_rows == (250 if HAS_CUDA else 0)
    assert feature.device_cache_size == 250 * x[0].nbytes
    # Exactly: 29% of 100 rows is 29 (0.29 * 100 is 28.999... in floating point).
    for share in ("29%", "57%", "58%", "12.5%"):
        feature = qv.Feature(device_cache_size=share).from_cpu_tensor(x[:100])
        want = int(float(share[:-1]) * 100) // 100 if share != "12.5%" else 12
        assert feature.device_cache_size == want * x[0].nbytes, share
    with pytest.raises(ValueError, match="device_cache_size: a share must be a percentage .* "
                                         "got 'abc%'"):
        qv.Feature(device_cache_size="abc%")
    with pytest.raises(ValueError, match="device_cache_size of 0.2 bytes is less than one byte: "
                                         ".* '20%'"):
        qv.Feature(device_cache_size=0.2)
    with pytest.raises(ValueError, match="device_cache_size must be a whole number of bytes, "
                                         "got 2.5"):
        qv.Feature(device_cache_size=2.5)  # (had been 2 bytes)
    with pytest.raises(ValueError, match="byte count >= 0, got nan"):
        qv.Feature(device_cache_size=float("nan"))


def test_empty_lists_and_strided_ids_gather_as_tensors_do():
    x = torch.randn(20, 3)
    feature = qv.Feature(device_cache_size="25%").from_cpu_tensor(x)
    assert feature[[]].shape == (0, 3)
    ids = torch.arange(20)[::3]
    assert torch.equal(feature[ids].cpu(), x[ids])


def test_feature_shape_and_row_shapes():
    x = torch.randn(30, 2, 5)
    feature = qv.Feature(device_cache_size="1K").from_cpu_tensor(x)
    assert feature.shape == x.shape and feature.size() == x.shape and feature.size(2) == 5
    assert feature.dim() == 3 and len(feature) == 30 and feature.dtype == torch.float32
    assert torch.equal(feature[[4, 29]].cpu(), x[[4, 29]])


def test_feature_rejects_bad_input():
    x = torch.randn(10, 3)
    with pytest.raises(ValueError, match="cache_policy must be one of"):
        qv.Feature(cache_policy="lru")
    with pytest.raises(ValueError, match="host_reads must be one of .* got 'dma'"):
        qv.Feature(host_reads="dma")
    with pytest.raises(ValueError, match="names a GPU twice"):
        qv.Feature(device_list=[0, 0])
    with pytest.raises(ValueError, match="cannot read device_cache_size='lots'"):
        qv.Feature(device_cache_size="lots")
    with pytest.raises(ValueError, match=r"device_cache_size: a share must be in \[0%, 100%\]"):
        qv.Feature(device_cache_size="150%")
    with pytest.raises(RuntimeError, match="holds no data yet"):
        qv.Feature()[torch.tensor([0])]
    with pytest.raises(ValueError, match="at least one dimension"):
        qv.Feature().from_cpu_tensor(torch.tensor(1.0))
    with pytest.raises(ValueError, match="not a permutation: row 9 is missing"):
        qv.Feature().from_cpu_tensor(x, hot_order=torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 8]))
    feature = qv.Feature(device_cache_size="64").from_cpu_tensor(x)
    with pytest.raises(IndexError, match=r"ids\[1\] = 10 is out of range \[0, 10\)"):
        feature[torch.tensor([0, 10])]
    with pytest.raises(ValueError, match="ids must be a 1-D tensor"):
        feature[torch.tensor([[0]])]
    with pytest.raises(ValueError, match="csr_topo has"):
        qv.Feature(csr_topo=qv.CSRTopo(torch.tensor([[0], [1]]), num_nodes=4)).from_cpu_tensor(x)
    # Named, where they used to fail inside or pass as something else.
    with pytest.raises(TypeError, match="csr_topo must be a CSRTopo .* got Tensor"):
        qv.Feature(csr_topo=torch.tensor([[0], [1]]))
    for devices in (["cuda:0"], 0, [-1], [True]):
        with pytest.raises(ValueError, match="device_list must be a list of GPU indices"):
            qv.Feature(device_list=devices)
    with pytest.raises(ValueError, match="device_cache_size must be a byte count, got True"):
        qv.Feature(device_cache_size=True)
    with pytest.raises(TypeError, match="a feature table is a tensor .* got list"):
        qv.Feature().from_cpu_tensor([[1.0]])
    # Each named (a probe found torch's or pybind's words, or True read as 1).
    feature = qv.Feature(device_list=[]).from_cpu_tensor(x)
    for ids in (2**70, [1, 2**70], -2**70):
        with pytest.raises(IndexError, match="ids hold an int past int64's range"):
            feature[ids]
    with pytest.raises(ValueError, match=r"blocks must be an int in \[0, 2\*\*31\)"):
        with qv.feature.host_read_blocks(2**70):
            pass
    with pytest.raises(ValueError, match="device_cache_size must be a byte count"):
        qv.Feature(device_list=[], device_cache_size="9" * 400 + "G")
    for dim in (1.0, "a", True):
        with pytest.raises(TypeError, match="dim must be an int"):
            feature.size(dim)
    assert feature.size(1) == 3 and feature.size(-2) == 10
    with pytest.raises(TypeError, match="device must be a torch.device, a string or a GPU"):
        feature.hit_rate([1], device=True)


def test_ids_and_csr_arrays_whose_storage_shrank_are_refused_not_read():
    """Only the tables' storage was checked: ids, seeds and CSR arrays whose storage shrank
    under them were read past it, and gave rows or samples of the bytes after it (a
    probe)."""
    table = torch.arange(2000.0).view(1000, 2)

    def shrunk(n):
        ids = torch.zeros(n, dtype=torch.long)
        ids.untyped_storage().resize_(8)  # one id's bytes; the tensor still claims n
        return ids

    indptr, indices = torch.arange(0, 3001, 3), torch.randint(0, 1000, (3000,))
    for name, call in (
            ("ids", lambda: torch.ops.quiver.gather_tiered_rows([table], None, shrunk(3))),
            ("ids", lambda: torch.classes.quiver.FeatureTiers([table], None).gather(shrunk(3))),
            ("ids", lambda: torch.classes.quiver.ShardMap.build(torch.arange(1000), 2, 0, None)
             .locate(shrunk(3))),
            ("seeds", lambda: torch.ops.quiver.sample_neighbors(indptr, indices, shrunk(3), 2)),
            ("indptr", lambda: torch.ops.quiver.sample_neighbors(shrunk(1001), indices,
                                                                 torch.tensor([0]), 2))):
        with pytest.raises(ValueError, match=rf"{name} views \d+ bytes of its storage, which "
                                             r"holds 8: the storage was resized"):
            call()


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=requires_cuda)])
def test_a_table_whose_storage_shrank_is_refused_not_read(device):
    """A storage resized under its table left the sizes as they were, and the gathers read
    freed memory: a segfault (found by a probe). Each gather checks the storage."""
    x = torch.arange(2000.0, device=device).view(500, 4)
    feature = qv.Feature(device_list=[]).from_cpu_tensor(x) if device == "cpu" else None
    if feature is not None:
        assert torch.equal(feature[[1, 499]], x[[1, 499]])
    x.untyped_storage().resize_(16)
    message = "views 8000 bytes of its storage, which holds 16: the storage was resized"
    if feature is not None:
        with pytest.raises(ValueError, match=r"tiers\[0\] " + message):
            feature[[499]]
    with pytest.raises(ValueError, match="table " + message):
        qv.ops.gather_rows(x, torch.tensor([499], device=device))
    with pytest.raises(ValueError, match=r"tiers\[0\] " + message):
        qv.ops.gather_tiered_rows([x], None, torch.tensor([4], device=device))


def test_feature_takes_numpy_tables_slices_and_mib():
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    feature = qv.Feature(device_list=[], device_cache_size="1MiB").from_cpu_tensor(x)
    assert feature.device_cache_size == 2**20
    assert torch.equal(feature[torch.arange(6)], torch.from_numpy(x))
    assert torch.equal(feature[1:5:2], torch.from_numpy(x)[1:5:2])
    assert torch.equal(feature[-2:], torch.from_numpy(x)[-2:])


@requires_cuda
def test_gpu_outside_device_list_is_refused():
    feature = qv.Feature(device_list=[0], device_cache_size="1K").from_cpu_tensor(torch.randn(99, 4))
    with pytest.raises(ValueError, match="caches rows on GPUs \\[0\\], and cuda:7 is not one"):
        feature.tiers("cuda:7")


@requires_cuda
def test_host_tier_is_the_table_itself_pinned_in_place_and_cache_in_hbm():
    x = torch.randn(1000, 16)
    feature = qv.Feature(device_cache_size=100 * x[0].nbytes).from_cpu_tensor(x)
    tiers = feature.tiers().tiers()
    assert [t.device.type for t in tiers] == ["cuda", "cpu"]
    assert tiers[0].shape[0] == 100 and tiers[1].shape[0] == 900
    assert tiers[1].is_pinned() and x.is_pinned()
    assert tiers[1].data_ptr() == x[100:].data_ptr()  # no second host copy
    ranked = qv.Feature(device_cache_size=100 * x[0].nbytes,
                        csr_topo=qv.CSRTopo(torch.randint(1000, (2, 5000)))).from_cpu_tensor(x)
    tiers = ranked.tiers().tiers()
    assert tiers[1].shape[0] == 1000 and tiers[1].data_ptr() == x.data_ptr()  # positions rank


@pytest.mark.skipif(not HAS_CUDA, reason="the layout a GPU reads")
@pytest.mark.parametrize("order", ["given", "degree"])
def test_a_cache_of_every_row_reads_no_host_tier(order):
    """A store whose GPU holds every row has no host tier, so its gathers neither sort
    their reads nor obey a loader's cap on host-reading blocks (both meant for host rows:
    together they made such gathers 5x slower, docs/benchmarks.md), and a lone GPU keeps
    the rows in the table's own order: no positions to look up."""
    graph, topo, ids = graph_and_ids(seed=4)
    x = graph.x
    feature = qv.Feature(device_cache_size=x.nbytes,
                         csr_topo=topo if order == "degree" else None).from_cpu_tensor(x)
    layout = feature.tiers()
    assert [t.device.type for t in layout.tiers()] == ["cuda"]
    assert layout.positions() is None
    assert torch.equal(layout.tiers()[0].cpu(), x)
    with host_read_blocks(1):
        assert torch.equal(feature[ids.cuda()].cpu(), x[ids])
    assert feature.hit_rate(ids) == 1.0


@pytest.mark.parametrize("members", [2, 3, 4])
@pytest.mark.parametrize("cached_share", [0.1, 0.26, 0.5])
@pytest.mark.parametrize("order", ["given", "degree", "user"])
def test_a_cliques_layout_places_every_row_and_deals_the_hottest_round_robin(
        members, cached_share, order):
    # The clique's layout without GPUs: the shards as the members would hold them, then
    # the table, read at the positions the gather kernel is given.
    graph, topo, _ = graph_and_ids(seed=11)
    x = graph.x
    hot_order = torch.randperm(x.size(0)) if order == "user" else None
    feature = qv.Feature(device_list=[], csr_topo=topo if order == "degree" else None)
    feature.from_cpu_tensor(x, hot_order=hot_order)
    feature._cache_rows = int(cached_share * x.size(0))  # as GPUs would have sized it
    clique = list(range(members))
    shards = [feature._hot_rows(ranks) for ranks in feature._shard_ranks(clique)]
    held = min(x.size(0), members * feature._cache_rows)
    assert sum(s.size(0) for s in shards) == held
    assert max(s.size(0) for s in shards) - min(s.size(0) for s in shards) <= 1
    hot = (hot_order if order == "user" else
           topo.feature_order if order == "degree" else torch.arange(x.size(0)))
    for j, shard in enumerate(shards):  # member j holds hotness ranks j, j + k, ...
        assert torch.equal(shard, x[hot[j:held:members]])
    positions = feature._positions_for(clique, torch.device("cpu"))
    assert positions.dtype == torch.int32  # 4 bytes a row while the table allows it
    laid_out = torch.cat(shards + [x])
    assert torch.equal(laid_out[positions.long()], x)
    assert int((positions < held).sum()) == held  # every held row read from a shard


@pytest.mark.skipif(not HAS_CUDA, reason="needs a GPU")
def test_a_gpu_that_caches_nothing_reads_an_ordered_table_from_the_host():
    # No GPU cache (device_list empty): CUDA ids still gather, from the pinned table.
    graph, topo, ids = graph_and_ids(seed=6)
    feature = qv.Feature(device_list=[], csr_topo=topo).from_cpu_tensor(graph.x)
    assert torch.equal(feature[ids.cuda()].cpu(), graph.x[ids])
    assert feature.hit_rate(ids, 0) == 0.0


def test_workers_sharing_a_clique_gpu_are_named():
    # torchrun workers that skip torch.cuda.set_device all report GPU 0: each would build
    # the same shard and hold every other (k copies, no sharing); load_shared refuses it.
    from torch_quiver_ops._sharing import gpus_of_several_workers
    gathered = [(0, "p0"), (0, None), (1, "p1"), (2, None), (2, None)]
    assert gpus_of_several_workers(gathered, [0, 1]) == {0: [0, 1]}
    assert gpus_of_several_workers(gathered, [0, 1, 2]) == {0: [0, 1], 2: [3, 4]}
    assert gpus_of_several_workers([(0, "p0"), (1, "p1")], [0, 1]) == {}


@pytest.mark.skipif(not HAS_CUDA or torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_a_clique_holding_every_row_reads_no_host_tier():
    if not torch.cuda.can_device_access_peer(0, 1):
        pytest.skip("GPUs 0 and 1 cannot read each other's memory")
    graph, topo, ids = graph_and_ids(seed=5)
    x = graph.x
    half = (x.size(0) + 1) // 2 * x[0].nbytes
    feature = qv.Feature(0, [0, 1], half, "p2p_clique_replicate",
                         csr_topo=topo).from_cpu_tensor(x)
    for device in (0, 1):
        layout = feature.tiers(device)
        assert [t.device.index for t in layout.tiers()] == [0, 1]  # the two halves, no host
        assert layout.positions() is not None  # hot-ordered shards
        # The reader's GPU, where its first shard is GPU 0's (serving and DistFeature
        # move their ids there before they gather).
        assert layout.device() == torch.device("cuda", device)
        assert torch.equal(feature[ids.to(f"cuda:{device}")].cpu(), x[ids])


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
            # The hottest rows dealt in turn: GPU 0 holds the hottest, GPU 1 the next.
            hottest = topo.feature_order[:2]
            assert torch.equal(tiers[0][0].cpu(), x[hottest[0]])
            assert torch.equal(tiers[1][0].cpu(), x[hottest[1]])
        else:
            assert tiers[0].device.index == device and tiers[0].size(0) == feature.cached_rows
    assert feature.hit_rate(ids, 0) == feature.hit_rate(ids, 1)


def test_empty_device_list_gathers_on_the_cpu():
    x = torch.randn(20, 3)
    feature = qv.Feature(device_list=[], device_cache_size="1M").from_cpu_tensor(x)
    out = feature[torch.tensor([3, 19])]
    assert out.device.type == "cpu" and torch.equal(out, x[[3, 19]])
    assert feature.cached_rows == 0


# ---- sharing: files, pickles and memory (review findings 11, 12) ----

def test_save_and_load_shared_map_the_table_and_its_order(tmp_path):
    graph, topo, ids = graph_and_ids(seed=3)
    x = graph.x
    qv.Feature(csr_topo=topo).from_cpu_tensor(x).save(tmp_path)
    loaded = qv.Feature.load_shared(tmp_path, device_list=[0] if HAS_CUDA else [],
                                    device_cache_size=x.size(0) // 4 * x[0].nbytes)
    assert loaded._host.untyped_storage().filename is not None
    assert torch.equal(loaded[ids].cpu(), x[ids])


def test_truncated_or_corrupt_save_is_an_error_not_zeros(tmp_path):
    import os
    x = torch.randn(100, 8)
    qv.Feature(csr_topo=qv.CSRTopo(torch.randint(100, (2, 400)))).from_cpu_tensor(x).save(tmp_path)
    rows = tmp_path / "rows.bin"
    size = rows.stat().st_size
    os.truncate(rows, size // 2)
    with pytest.raises(ValueError, match="rows.bin holds 1600 bytes but feature.json says 3200"):
        qv.Feature.load_shared(tmp_path)
    assert rows.stat().st_size == size // 2, "the loader must not zero-extend the file"
    x.numpy().tofile(rows)
    order = tmp_path / "order.bin"
    torch.zeros(100, dtype=torch.int32).numpy().tofile(order)  # same size, not a permutation
    with pytest.raises(ValueError, match="order.bin is not a permutation"):
        qv.Feature.load_shared(tmp_path)


def test_pickling_a_feature_leaves_the_topology_alone():
    from multiprocessing.reduction import ForkingPickler
    import io
    topo = qv.CSRTopo(torch.randint(500, (2, 4000)))
    x = torch.randn(500, 4).share_memory_()
    feature = qv.Feature(device_list=[], csr_topo=topo).from_cpu_tensor(x)
    ForkingPickler(io.BytesIO()).dump(feature)
    assert not topo.indices.is_shared() and not topo.indptr.is_shared()
    assert topo._feature_order is None or not topo._feature_order.is_shared()


def test_building_a_store_makes_no_second_host_copy():
    x = torch.randn(20_000, 64)
    topo = qv.CSRTopo(torch.randint(20_000, (2, 100_000)))
    feature = qv.Feature(device_cache_size=x.nbytes // 5, csr_topo=topo).from_cpu_tensor(x)
    assert feature._host.data_ptr() == x.data_ptr()
    if HAS_CUDA:
        assert feature.tiers().tiers()[-1].data_ptr() == x.data_ptr()


@requires_cuda
def test_ipc_buffers_check_their_gpu_indices():
    count = torch.cuda.device_count()
    for device in (count, 256, -1):  # 256 would wrap to GPU 0 as an 8-bit index
        with pytest.raises(ValueError, match=rf"device must be a GPU index in \[0, {count}\), "
                                             rf"got {device}"):
            torch.classes.quiver.IpcBuffer(16, device)
    buffer = torch.classes.quiver.IpcBuffer(16, 0)
    with pytest.raises(ValueError, match="reader must be a GPU index"):
        torch.classes.quiver.IpcBuffer.open(buffer.handle(), 16, 0, 256)


def test_a_deepcopy_or_torch_save_of_a_loaded_save_copies_its_rows(tmp_path):
    """Only worker processes take a loaded save as its files: a deepcopy had written
    through to the original and its files, and a torch.save checkpoint had held only the
    paths, unloadable once the save moved (a probe)."""
    qv.Feature(device_list=[]).from_cpu_tensor(torch.arange(20.0).view(10, 2)).save(tmp_path / "f")
    qv.CSRTopo(torch.tensor([[0, 1, 2], [1, 2, 0]]), num_nodes=4).save(tmp_path / "t")
    feature = qv.Feature.load_shared(tmp_path / "f", device_list=[])
    topo = qv.CSRTopo.load_shared(tmp_path / "t")
    copied_feature, copied_topo = copy.deepcopy((feature, topo))
    copied_feature._host[0, 0] = 999.0
    copied_topo.indices[0] = 3
    assert feature[0].tolist() == [0.0, 1.0] and topo.indices.tolist() == [1, 2, 0]
    saved, _ = qv.load_arrays(tmp_path / "f", "feature")
    assert saved["rows"][0, 0].item() == 0.0
    checkpoint = io.BytesIO()
    torch.save((feature, topo), checkpoint)
    del feature, topo, saved
    shutil.rmtree(tmp_path / "f")
    shutil.rmtree(tmp_path / "t")
    checkpoint.seek(0)
    feature, topo = torch.load(checkpoint, weights_only=False)
    assert torch.equal(feature[torch.arange(10)], torch.arange(20.0).view(10, 2))
    assert topo.indices.tolist() == [1, 2, 0]


def test_a_mapped_table_saved_over_is_not_passed_to_workers_as_the_new_save(tmp_path):
    """A worker mapped the file now at the path: after a same-shape save over it, the parent
    read the old rows and the worker the new ones, without a word (a probe)."""
    import pickle
    from multiprocessing.reduction import ForkingPickler
    qv.Feature(device_list=[]).from_cpu_tensor(torch.ones(10, 4)).save(tmp_path)
    loaded = qv.Feature.load_shared(tmp_path, device_list=[])
    copy = pickle.loads(ForkingPickler.dumps(loaded))  # before any save over it: the same
    assert torch.equal(copy[torch.tensor([3])], torch.ones(1, 4))
    qv.Feature(device_list=[]).from_cpu_tensor(torch.zeros(10, 4)).save(tmp_path)
    with pytest.raises(ValueError, match="was saved over after the table was mapped from it"):
        ForkingPickler.dumps(loaded)
    assert torch.equal(loaded[torch.tensor([3])], torch.ones(1, 4))  # still its own rows
    # A save between the pickle and the worker's mapping is named there.
    fresh = qv.Feature.load_shared(tmp_path, device_list=[])
    sent = ForkingPickler.dumps(fresh)
    qv.Feature(device_list=[]).from_cpu_tensor(torch.full((10, 4), 2.0)).save(tmp_path)
    with pytest.raises(ValueError, match="was saved over after the table was mapped from it"):
        pickle.loads(sent)


@pytest.mark.parametrize("rank", [-1, "a", True])
def test_a_bad_rank_is_named_rank(rank):
    """It was named device_list (the default device_list is [rank]): a probe."""
    with pytest.raises(ValueError, match=f"rank must be an int >= 0 \\(a GPU index\\), got "
                                         f"{rank!r}"):
        qv.Feature(rank=rank)


def test_meta_ids_and_a_meta_hot_order_are_named():
    """From a probe: both raised torch's "Cannot copy out of meta tensor", naming nothing."""
    feature = qv.Feature().from_cpu_tensor(torch.randn(10, 3))
    with pytest.raises(TypeError, match="ids are a meta tensor"):
        feature[torch.tensor([1, 2], device="meta")]
    with pytest.raises(TypeError, match="hot_order are a meta tensor"):
        qv.Feature().from_cpu_tensor(torch.randn(10, 3),
                                     hot_order=torch.arange(10, device="meta"))


def test_tables_that_are_not_dense_tensors_with_data_are_named_and_numpy_views_copied():
    """From a probe: sparse, nested and meta tables failed in torch's words; a quantized one
    was taken and failed at the first gather; a reversed or big-endian numpy array failed
    in torch.from_numpy."""
    dense = torch.randn(4, 3)
    for table, words in ((dense.to_sparse(), "torch.sparse_coo tensor"),
                         (torch.quantize_per_tensor(dense, 0.1, 0, torch.qint8),
                          "quantized tensor"),
                         (torch.empty(4, 3, device="meta"), "meta tensor"),
                         (torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]),
                          "nested tensor")):
        with pytest.raises(TypeError, match=f"a feature table is a dense tensor with data, "
                                            f"got a {words}"):
            qv.Feature().from_cpu_tensor(table)
    array = np.arange(12.0, dtype=">f4").reshape(4, 3)[::-1]
    feature = qv.Feature().from_cpu_tensor(array)
    assert torch.equal(feature[[0, 3]].cpu(), torch.tensor(array[[0, 3]].astype("<f4")))


def test_a_layout_for_a_device_that_cannot_gather_is_named():
    """From a probe: f.tiers(0) without a GPU failed in a pinning call; 'meta' built a CPU
    layout under the meta device; new_from_ipc_handle took -1 and "a"."""
    feature = qv.Feature(device_list=[]).from_cpu_tensor(torch.randn(6, 2))
    with pytest.raises(ValueError, match="device must be the CPU or a GPU, got 'meta'"):
        feature.tiers("meta")
    if not qv._device.gpus_usable():
        for device in (0, "cuda:0"):
            with pytest.raises(RuntimeError, match="is a GPU, and this process can run no CUDA"):
                feature.tiers(device)
    for rank in (-1, "a", 1.5):
        with pytest.raises(ValueError, match="rank must be an int >= 0"):
            qv.Feature.new_from_ipc_handle(rank, feature)
    assert qv.Feature(rank=np.int64(0)).rank == 0


def test_a_table_replaced_or_closed_while_another_thread_gathers_is_not_read_after():
    """A gather building its layout as another thread replaced the table (or closed the
    store) had stored a layout of the old table after the swap: every later gather read
    the old rows, or rows of the closed store (a probe; 5% and 3% of tries)."""
    import re
    import sys
    import threading
    x = torch.randn(200, 4)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(300):
            store = qv.Feature(rank=0, device_list=[], device_cache_size=0).from_cpu_tensor(x)
            reader = threading.Thread(target=lambda: [store[torch.arange(5)] for _ in range(2)])
            reader.start()
            store.from_cpu_tensor(x + 1)
            reader.join()
            assert torch.equal(store[torch.arange(5)], x[:5] + 1)

            closed = qv.Feature(rank=0, device_list=[], device_cache_size=0).from_cpu_tensor(x)
            unexpected = []  # a thread's exception would only be printed: the test's to raise

            def read_until_closed():
                try:
                    for _ in range(2):
                        closed[torch.arange(5)]
                except RuntimeError as error:  # closed under it: said so, nothing else
                    # (before the gather took its layout, or while it held one)
                    if not re.search(r"this Feature was closed|this layout was released "
                                     r"\(by Feature\.close\(\)", str(error)):
                        unexpected.append(repr(error))
                except Exception as error:  # noqa: BLE001
                    unexpected.append(repr(error))
            reader = threading.Thread(target=read_until_closed)
            reader.start()
            closed.close()
            reader.join()
            assert not unexpected, unexpected
            with pytest.raises(RuntimeError, match="this Feature was closed"):
                closed[torch.arange(5)]
    finally:
        sys.setswitchinterval(interval)
