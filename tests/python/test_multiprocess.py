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
from conftest import MODES
from torch_quiver_ops.synthetic import synthetic_graph


def worker(rank, sampler, graph_edges, seeds, mode):
    if mode != "CPU":
        torch.cuda.set_device(0)
    n_id, batch_size, adjs = sampler.sample(seeds)
    allocated = torch.cuda.memory_allocated() if mode != "CPU" else 0
    edge_index, e_id, size = adjs[-1]
    # the innermost layer's edges are real edges: target -> neighbor
    assert torch.equal(graph_edges[0][e_id.cpu()], n_id.cpu()[edge_index[1].cpu()])
    assert torch.equal(graph_edges[1][e_id.cpu()], n_id.cpu()[edge_index[0].cpu()])
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
    worker = Path(__file__).with_name("torchrun_worker.py")
    try:
        result = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
             "2", str(worker), str(directory), mode],
            capture_output=True, text=True, timeout=240)
    finally:
        for f in directory.iterdir():
            f.unlink()
        directory.rmdir()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stdout.count("from the shared topology") == 2
