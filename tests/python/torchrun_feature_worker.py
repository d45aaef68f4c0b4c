"""Run by test_multiprocess.py under torchrun: each worker maps the saved feature table
(one copy per machine), places its GPU tiers (swapping clique shards with its peers over
torch.distributed) and checks its gathers against the original table."""
import os
import sys

import torch
import torch.distributed as dist

import torch_quiver_ops as qv


def main(directory: str, x_path: str, mode: str, policy: str):
    rank = int(os.environ["LOCAL_RANK"])
    on_gpu = mode != "CPU"
    if on_gpu:
        torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group("gloo")
    devices = sorted({r % torch.cuda.device_count() for r in range(2)}) if on_gpu else [0]
    x = torch.load(x_path)
    feature = qv.Feature.load_shared(directory, rank, devices, x.size(0) // 3 * x[0].nbytes,
                                     policy)
    assert feature._host.untyped_storage().filename is not None, "table copied into the worker"
    ids = torch.randint(x.size(0), (700,), generator=torch.Generator().manual_seed(rank))
    out = feature[ids]
    assert torch.equal(out.cpu(), x[ids])
    tiers = None
    if on_gpu:
        tiers = feature.tiers().tiers()
        assert tiers[-1].is_pinned() and tiers[0].is_cuda
        if len(devices) > 1 and policy == "p2p_clique_replicate":
            assert sorted(t.device.index for t in tiers[:-1]) == devices
    print(f"rank {rank}: gathered {ids.numel()} rows from the shared feature table", flush=True)
    del tiers
    if len(devices) > 1 and policy == "p2p_clique_replicate":
        # Rank 0 drops its store without close() and grabs GPU memory while rank 1 still
        # reads rank 0's shard: the shard must stay allocated (freeing exported memory a
        # peer reads is undefined), so rank 1's rows stay right.
        if rank == 0:
            del feature
            filler = torch.full((64 << 20,), -1.0, device="cuda")
            dist.barrier()  # rank 0 has dropped its store
            dist.barrier()  # rank 1 has read again
            del filler
        else:
            dist.barrier()
            assert torch.equal(feature[ids].cpu(), x[ids]), "a peer's shard changed under us"
            dist.barrier()
            feature._shards.clear()
    else:
        feature.close()  # collective: drops peers' shards, waits, then frees its own
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:5])
