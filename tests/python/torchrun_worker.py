"""Run by test_multiprocess.py under torchrun: each worker maps the saved topology, samples
in the given mode, and checks that the graph memory is the shared file, not a copy."""
import os
import sys

import torch

import torch_quiver_ops as qv


def main(directory: str, mode: str):
    rank = int(os.environ["LOCAL_RANK"])
    topo = qv.CSRTopo.load_shared(directory)
    for t in (topo.indptr, topo.indices, topo.eid):
        assert t.untyped_storage().filename is not None, "topology was copied into the worker"
    device = "cpu"
    if mode != "CPU":
        torch.cuda.set_device(0)
        device = 0
    sampler = qv.GraphSageSampler(topo, [4, 3], device=device, mode=mode, return_eid=True)
    if mode == "UVA":  # pinned where it lies: the mapped file itself
        assert sampler._indices.data_ptr() == topo.indices.data_ptr()
        assert sampler._indices.is_pinned()
    seeds = torch.arange(rank, topo.node_count, max(1, topo.node_count // 16))
    n_id, batch_size, adjs = sampler.sample(seeds)
    # the seeds asked for are the ones sampled (real edges of other seeds would pass below)
    assert batch_size == seeds.numel() and torch.equal(n_id[:batch_size].cpu(), seeds)
    edge_index, e_id, _ = adjs[-1]
    src = torch.repeat_interleave(torch.arange(topo.node_count), topo.degree)
    position = torch.empty_like(topo.eid)
    position[topo.eid] = torch.arange(topo.eid.numel())
    pos = position[e_id.cpu()]
    assert torch.equal(src[pos], n_id.cpu()[edge_index[1].cpu()])
    assert torch.equal(topo.indices[pos].long(), n_id.cpu()[edge_index[0].cpu()])
    # each seed got min(degree, fanout) of its edges, none twice (without replacement)
    counts = torch.bincount(edge_index[1].cpu(), minlength=batch_size)
    assert torch.equal(counts, topo.degree[seeds].long().clamp(max=sampler.sizes[0]))
    assert pos.unique().numel() == pos.numel()
    print(f"rank {rank}: sampled {n_id.numel()} nodes from the shared topology", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
