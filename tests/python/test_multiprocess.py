"""A sampler built once, handed to torch.multiprocessing.spawn workers; a topology saved
once, mapped by independent torchrun workers."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

import torch_quiver_ops as qv
from conftest import HAS_CUDA, MODES
from torch_quiver_ops.synthetic import synthetic_graph


def torchrun(script, directory, *args) -> str:
    """Runs tests/python/<script> under torchrun with two workers, given `directory` and
    `args`; removes the directory afterwards and returns what the workers printed."""
    worker = Path(__file__).with_name(script)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
             "2", str(worker), str(directory), *map(str, args)],
            capture_output=True, text=True, timeout=240)
    finally:
        for f in directory.iterdir():
            f.unlink()
        directory.rmdir()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def worker(rank, sampler, graph_edges, seeds, mode):
    if mode != "CPU":
        torch.cuda.set_device(0)
    n_id, batch_size, adjs = sampler.sample(seeds)
    allocated = torch.cuda.memory_allocated() if mode != "CPU" else 0
    edge_index, e_id, size = adjs[-1]
    # the seeds asked for are the ones sampled (real edges of other seeds would pass below)
    assert batch_size == seeds.numel() and torch.equal(n_id[:batch_size].cpu(), seeds)
    # the innermost layer's edges are real edges: target -> neighbor
    assert torch.equal(graph_edges[0][e_id.cpu()], n_id.cpu()[edge_index[1].cpu()])
    assert torch.equal(graph_edges[1][e_id.cpu()], n_id.cpu()[edge_index[0].cpu()])
    # and each seed got min(degree, fanout) of them, no edge twice (without replacement)
    degree = torch.bincount(graph_edges[0], minlength=int(seeds.max()) + 1)[seeds]
    counts = torch.bincount(edge_index[1].cpu(), minlength=batch_size)
    assert torch.equal(counts, degree.clamp(max=sampler.sizes[0]))
    assert e_id.unique().numel() == e_id.numel()
    if mode in ("CPU", "UVA"):
        # the worker maps the parent's pages: shared memory, not a private copy
        assert sampler._indices.is_shared(), "topology was copied into the worker"
    if mode == "UVA":  # neighbor lists pinned on the host, offsets on the GPU
        assert sampler._indices.is_pinned() and sampler._eid.is_pinned()
        assert sampler._indptr.device.type == "cuda"
    if mode == "GPU":  # the parent's copy on this GPU, mapped through CUDA IPC
        assert sampler._indices.device.type == "cuda"
        assert allocated < sampler._indices.nbytes, "the topology was copied again"


@pytest.mark.timeout(300)
def test_spawned_workers_share_the_sampler(mode):
    graph = synthetic_graph("tiny", seed=2)
    topo = qv.CSRTopo(graph.edge_index)
    if mode == "CPU":
        topo.share_memory_()
    sampler = qv.GraphSageSampler(topo, [4, 3], device="cpu" if mode == "CPU" else 0, mode=mode,
                                  return_eid=True)
    mp.spawn(worker, args=(sampler, graph.edge_index, graph.train_idx[:32], mode), nprocs=2,
             join=True)


@pytest.mark.timeout(300)
def test_torchrun_workers_map_one_copy(mode, tmp_path):
    graph = synthetic_graph("tiny", seed=4)
    shm = Path("/dev/shm")
    directory = (shm if shm.is_dir() else tmp_path) / f"quiver-test-{os.getpid()}-{mode}"
    qv.CSRTopo(graph.edge_index).save(directory)
    assert torchrun("torchrun_worker.py", directory, mode).count("from the shared topology") == 2


# ---- the feature store ----

def gpus_for(workers):
    return [rank % torch.cuda.device_count() for rank in range(workers)]


def feature_worker(rank, feature, x, ids, on_gpu):
    if on_gpu:
        torch.cuda.set_device(gpus_for(2)[rank])
    assert feature._host.is_shared(), "the host table was copied into the worker"
    out = feature[ids]
    assert torch.equal(out.cpu(), x[ids])
    if on_gpu:
        assert out.device == torch.device("cuda", torch.cuda.current_device())
        tiers = feature.tiers().tiers()
        # the parent's shared pages, pinned in place here: no private host copy
        assert tiers[-1].data_ptr() == feature._host[feature._host.size(0) - tiers[-1].size(0):].data_ptr()
        assert tiers[-1].is_pinned()
        assert tiers[0].is_cuda and feature.hit_rate(ids) > 0


@pytest.mark.timeout(300)
@pytest.mark.parametrize("policy", ["device_replicate", "p2p_clique_replicate"])
def test_spawned_workers_share_the_feature(mode, policy):
    if mode == "UVA":
        pytest.skip("the feature store has one GPU layout; GPU covers it")
    graph = synthetic_graph("tiny", seed=6)
    topo = qv.CSRTopo(graph.edge_index)
    on_gpu = mode == "GPU"
    devices = sorted(set(gpus_for(2))) if on_gpu else [0]
    feature = qv.Feature(0, devices, graph.x.size(0) // 3 * graph.x[0].nbytes, policy,
                         csr_topo=topo).from_cpu_tensor(graph.x)
    ids = torch.randint(graph.x.size(0), (500,))
    mp.spawn(feature_worker, args=(feature, graph.x.share_memory_(), ids, on_gpu), nprocs=2,
             join=True)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("policy", ["device_replicate", "p2p_clique_replicate"])
def test_torchrun_workers_map_one_feature_table(mode, policy, tmp_path):
    if mode == "UVA":
        pytest.skip("the feature store has one GPU layout; GPU covers it")
    graph = synthetic_graph("tiny", seed=7)
    topo = qv.CSRTopo(graph.edge_index)
    shm = Path("/dev/shm")
    directory = (shm if shm.is_dir() else tmp_path) / f"quiver-feature-{os.getpid()}-{mode}"
    qv.Feature(csr_topo=topo).from_cpu_tensor(graph.x).save(directory)
    torch.save(graph.x, tmp_path / "x.pt")
    output = torchrun("torchrun_feature_worker.py", directory, tmp_path / "x.pt", mode, policy)
    assert output.count("from the shared feature table") == 2


def two_gpu_reader(rank, feature, x, ids):
    torch.cuda.set_device(0)
    for device in (0, 1):  # one worker gathers through both clique GPUs
        out = feature[ids.to(f"cuda:{device}")]
        assert out.device == torch.device("cuda", device)
        assert torch.equal(out.cpu(), x[ids])


def peer_gpus():
    return (HAS_CUDA and torch.cuda.device_count() >= 2 and
            torch.cuda.can_device_access_peer(0, 1) and torch.cuda.can_device_access_peer(1, 0))


@pytest.mark.timeout(300)
@pytest.mark.skipif(not peer_gpus(), reason="needs two GPUs with peer access")
def test_one_worker_gathers_on_two_clique_gpus():
    # A peer's shard mapped for GPU 0 cannot be read by kernels on GPU 1: each reader
    # opens its own mapping.
    x = torch.randn(4000, 8).share_memory_()
    feature = qv.Feature(0, [0, 1], x.size(0) // 4 * x[0].nbytes,
                         "p2p_clique_replicate").from_cpu_tensor(x)
    mp.spawn(two_gpu_reader, args=(feature, x, torch.randint(4000, (1000,))), nprocs=1, join=True)


@pytest.mark.timeout(300)
@pytest.mark.skipif(not peer_gpus(), reason="needs two GPUs with peer access")
def test_a_clique_shard_may_be_empty():
    # One row over two GPUs: the second GPU's shard is empty and must still be shareable.
    x = torch.randn(1, 4).share_memory_()
    feature = qv.Feature(0, [0, 1], "1G", "p2p_clique_replicate").from_cpu_tensor(x)
    mp.spawn(two_gpu_reader, args=(feature, x, torch.tensor([0, 0])), nprocs=1, join=True)


def ipc_reader(rank, payloads, expected):
    from torch_quiver_ops._sharing import open_payload
    payload, empty = payloads
    torch.cuda.set_device(payload[1])
    shard = open_payload(payload, reader=payload[1])
    assert shard.shape == expected.shape and shard.dtype == expected.dtype
    assert torch.equal(shard.cpu(), expected)
    assert open_payload(empty, reader=payload[1]).shape == (0, 7)  # an empty shard maps too
    handle, owner, dtype, shape = payload
    with pytest.raises(ValueError, match="names a .*-byte allocation"):  # a lying size
        open_payload((handle, owner, dtype, (shape[0] * 10, shape[1])), reader=payload[1])


@pytest.mark.timeout(300)
def test_cuda_ipc_shards_map_in_another_process():
    if "GPU" not in MODES:
        pytest.skip("needs a CUDA GPU and the CUDA kernels")
    from torch_quiver_ops._sharing import ipc_payload, shareable_copy
    rows = torch.randn(50, 7).half()
    buffer, shard = shareable_copy(rows, 0)
    assert torch.equal(shard.cpu(), rows)
    empty = shareable_copy(rows[:0], 0)
    mp.spawn(ipc_reader, args=((ipc_payload(buffer, shard), ipc_payload(*empty)), rows),
             nprocs=1, join=True)


def loaded_worker(rank, feature, topo, sampler, seeds):
    # The worker maps the save again: the same file, the same values, no private copy.
    for t in (feature._host, topo.indices, sampler.csr_topo.indptr):
        assert t.untyped_storage().filename is not None, "a copy, not the saved file"
    assert torch.equal(feature[torch.arange(6)].cpu(), torch.arange(12.0).view(6, 2))
    assert torch.equal(topo.indices.long(), torch.tensor([1, 2, 0]))
    n_id, batch_size, adjs = sampler.sample(seeds)
    assert batch_size == seeds.numel() and torch.equal(n_id[:batch_size], seeds)
    # Each seed's one neighbor (fanout 2) is sampled: exactly the saved graph's edges 0 -> 1
    # and 1 -> 2, as (target, neighbor) pairs.
    edge_index = adjs[-1][0]
    pairs = torch.stack([n_id[edge_index[1]], n_id[edge_index[0]]], 1).tolist()
    assert sorted(pairs) == [[0, 1], [1, 2]]
    feature._host[5] = -1.0  # reaches the parent: one set of pages


@pytest.mark.timeout(300)
@pytest.mark.parametrize("strategy", ["file_descriptor", "file_system"])
def test_loaded_saves_pass_to_spawned_workers(tmp_path, strategy):
    """A Feature, CSRTopo or sampler from load_shared goes to mp.spawn workers as its files:
    torch's own pickling failed (EBADF) or silently copied the table off its save."""
    before = mp.get_sharing_strategy()
    mp.set_sharing_strategy(strategy)
    try:
        qv.Feature(0, [], 0).from_cpu_tensor(torch.arange(12.0).view(6, 2)).save(tmp_path / "f")
        qv.CSRTopo(torch.tensor([[0, 1, 2], [1, 2, 0]]), num_nodes=6).save(tmp_path / "t")
        feature = qv.Feature.load_shared(tmp_path / "f")
        topo = qv.CSRTopo.load_shared(tmp_path / "t")
        sampler = qv.GraphSageSampler(qv.CSRTopo.load_shared(tmp_path / "t"), [2],
                                      device="cpu", mode="CPU")
        mp.spawn(loaded_worker, args=(feature, topo, sampler, torch.tensor([0, 1])), nprocs=1)
        assert feature._host.untyped_storage().filename == str(tmp_path / "f" / "rows.bin")
        assert torch.equal(feature[torch.tensor([5])].cpu(), torch.full((1, 2), -1.0))
        saved, _ = qv.load_arrays(tmp_path / "f", "feature")
        assert torch.equal(saved["rows"][5], torch.full((2,), -1.0))
    finally:
        mp.set_sharing_strategy(before)


def script_objects_worker(rank, shard_map, expected, tiers, rows):
    assert torch.equal(shard_map.host_of(), expected[0])
    assert torch.equal(shard_map.local_index(), expected[1])
    assert shard_map.fingerprint() == expected[2]
    assert torch.equal(tiers.gather(torch.arange(rows.size(0))), rows)
    # The tiers map the save again: a write reaches the parent (one set of pages).
    tiers.tiers()[0][1] = -1.0


@pytest.mark.timeout(300)
@pytest.mark.parametrize("strategy", ["file_descriptor", "file_system"])
def test_shard_maps_and_layouts_pass_to_spawned_workers(tmp_path, strategy):
    """A ShardMap failed to reach mp.spawn workers ("bad value(s) in fds_to_keep": its state
    is fresh copies, freed before the child starts), and a FeatureTiers of a load_shared
    table failed with EBADF: probes."""
    from torch_quiver_ops import dist as qdist
    before = mp.get_sharing_strategy()
    mp.set_sharing_strategy(strategy)
    try:
        shard_map = qdist.build_shard_map(1000, 3, hot_order=torch.randperm(1000))
        qv.Feature(0, [], 0).from_cpu_tensor(torch.arange(12.0).view(6, 2)).save(tmp_path / "f")
        feature = qv.Feature.load_shared(tmp_path / "f", device_list=[])
        expected = (shard_map.host_of(), shard_map.local_index(), shard_map.fingerprint())
        mp.spawn(script_objects_worker, args=(shard_map, expected, feature.tiers("cpu"),
                                              torch.arange(12.0).view(6, 2)), nprocs=1)
        assert torch.equal(feature[torch.tensor([0])].cpu(), torch.tensor([[0.0, 1.0]]))
        assert torch.equal(feature[torch.tensor([1])].cpu(), torch.full((1, 2), -1.0))
    finally:
        mp.set_sharing_strategy(before)
