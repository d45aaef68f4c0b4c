"""Sampling over a partitioned graph, processes as hosts over Gloo: every sampled edge is a
real edge with its global id, counts are min(degree, fanout), the layout is
sample_subgraph's, a node's neighbors are drawn uniformly whichever host owns it (chi-square
against single-host sampling's distribution), a fixed seed reproduces a batch, and a peer
that dies mid-batch is named by every survivor."""
import contextlib
import dataclasses
import os
import socket
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist

import torch_quiver_ops as qv
from conftest import HAS_CUDA, spawn_workers
from test_dist import free_port, reported, run_two_nccl_processes
from torch_quiver_ops.partition import DistGraphSampler, load_partition, partition_graph


@contextlib.contextmanager
def host_of(rank, world, port, results, timeout, backend="gloo", gpu=False):
    """A worker's body as host ``rank`` of a group (Gloo, or NCCL with a GPU a host; with
    ``gpu``, GPU rank modulo the GPUs is current): what it saw lands in ``results``."""
    if gpu or backend == "nccl":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=timeout))
    with reported(results, rank):
        yield


def graph(n=400, degree=10, seed=0):
    gen = torch.Generator().manual_seed(seed)
    edge_index = torch.stack([torch.randint(n, (n * degree,), generator=gen),
                              torch.randint(n, (n * degree,), generator=gen)])
    hub = torch.stack([torch.zeros(60, dtype=torch.long), torch.arange(100, 160)])
    return torch.cat([edge_index, hub], 1)  # node 0: 60 more neighbors, for the chi-square


def check_batch(out, seeds, edge_index, degree, fanouts, seeds_distinct=True):
    """The layout and every edge of one sample against the whole graph (the outputs of a
    GPU part come on its GPU, the counts on the CPU)."""
    assert out[4].device.type == out[5].device.type == "cpu"
    node_ids, rows, cols, eids, nodes_per_hop, edges_per_hop = (t.cpu() for t in out)
    assert torch.equal(node_ids[:seeds.numel()], seeds)
    assert int(nodes_per_hop.sum()) == node_ids.numel()
    assert int(edges_per_hop.sum()) == rows.numel() == cols.numel() == eids.numel()
    assert node_ids[seeds.numel():].unique().numel() == node_ids.numel() - seeds.numel()
    # Each sampled edge (v <- u) is input edge eid: edge_index[:, eid] == (v, u).
    assert torch.equal(edge_index[0, eids], node_ids[cols])
    assert torch.equal(edge_index[1, eids], node_ids[rows])
    # Per hop: the frontier is the previous hop's new nodes, each sampled min(deg, f) times.
    node_begin, edge_begin = 0, 0
    for hop, fanout in enumerate(fanouts):
        frontier = range(node_begin, node_begin + int(nodes_per_hop[hop]))
        hop_cols = cols[edge_begin:edge_begin + int(edges_per_hop[hop])]
        counts = torch.bincount(hop_cols - node_begin, minlength=len(frontier))
        want = degree[node_ids[list(frontier)]]
        want = want if fanout < 0 else want.clamp(max=fanout)
        assert torch.equal(counts, want), hop
        if seeds_distinct or hop > 0:  # a seed given twice is sampled twice
            assert eids[edge_begin:edge_begin + int(edges_per_hop[hop])].unique().numel() == \
                int(edges_per_hop[hop])  # without replacement: no edge twice for one node
        # The hop's new nodes are numbered in the order their first edges come.
        new_begin = node_begin + int(nodes_per_hop[hop])
        hop_rows = rows[edge_begin:edge_begin + int(edges_per_hop[hop])]
        added = int(nodes_per_hop[hop + 1])
        first_edge = [int((hop_rows == new_begin + k).nonzero()[0]) for k in range(added)]
        assert first_edge == sorted(first_edge)
        assert hop_rows.numel() == 0 or int(hop_rows.max()) < new_begin + added
        node_begin += int(nodes_per_hop[hop])
        edge_begin += int(edges_per_hop[hop])


def worker(rank, world, port, directory, results, die_rank, mode="CPU", backend="gloo",
           draws=None):
    with host_of(rank, world, port, results, 60, backend, gpu=mode != "CPU"):
        directory = Path(directory)
        edge_index = torch.load(directory / "edge_index.pt")
        topo = qv.CSRTopo(edge_index, num_nodes=400)
        degree = topo.degree.long()
        part = load_partition(directory / "parts", rank, verify=True)
        fanouts = [4, 3]
        sampler = DistGraphSampler(part, fanouts, timeout=10.0, mode=mode, draws=draws)
        assert sampler.mode == mode and sampler.draws == (draws or "owner")
        gen = torch.Generator().manual_seed(rank)
        for step in range(4):  # hosts ask for different numbers of seeds, none included
            count = 0 if (rank == 1 and step == 2) else int(torch.randint(1, 60, (1,), generator=gen))
            seeds = torch.randperm(400, generator=gen)[:count]
            check_batch(sampler.sample_subgraph(seeds), seeds, edge_index, degree, fanouts)
        remote_nodes, remote_edges = sampler.remote_share()
        assert len(remote_nodes) == 2 and sum(remote_nodes) > 0 and sum(remote_edges) > 0
        twice = torch.tensor([3, 7, 3, 11])  # a seed given twice is sampled twice
        check_batch(sampler.sample_subgraph(twice), twice, edge_index, degree, fanouts,
                    seeds_distinct=False)
        where = sampler.sample_subgraph(torch.tensor([1, 2]))  # as GraphSageSampler's
        assert all(t.device.type == ("cpu" if mode == "CPU" else "cuda") for t in where[:4])
        n_id, batch_size, adjs = sampler.sample(torch.tensor([5, 6]))
        assert batch_size == 2 and len(adjs) == 2 and adjs[-1].size[1] == 2
        # A fixed seed on every host reproduces the batch.
        seeds = torch.arange(30)
        first = sampler.sample_subgraph(seeds, torch.Generator().manual_seed(7))
        again = sampler.sample_subgraph(seeds, torch.Generator().manual_seed(7))
        assert all(torch.equal(a, b) for a, b in zip(first, again))
        # ... and another seed, another batch (a generator whose state was ignored passed)
        other = sampler.sample_subgraph(seeds, torch.Generator().manual_seed(8))
        assert not torch.equal(first[3], other[3])
        # Node 0 (owned by host 0) sampled by every host: its 1-hop draws counted.
        one_hop = DistGraphSampler(part, [5], timeout=10.0, mode=mode, draws=draws)
        counts = torch.zeros(topo.edge_count, dtype=torch.long)
        for _ in range(1500):
            _, _, _, eids, _, _ = one_hop.sample_subgraph(torch.tensor([0]))
            counts[eids.cpu()] += 1
        torch.save(counts, Path(results) / f"counts_{rank}.pt")
        if rank == die_rank:
            os._exit(0)  # gone mid-run: the survivors must name it, not hang
        with pytest.raises(IndexError, match="out of range"):  # as GraphSageSampler's
            sampler.sample_subgraph(torch.tensor([400]))  # every host's seeds bad
        with pytest.raises(TypeError, match="seeds must be integers, got torch.float32"):
            sampler.sample_subgraph(torch.tensor([1.0]))
        # One host's seeds bad: it takes part with none and raises after the batch, so the
        # hosts stay in step for the next one.
        seeds = torch.arange(20)
        if rank == 0:
            with pytest.raises(IndexError, match="seed 400 is out of range"):
                sampler.sample_subgraph(torch.tensor([1, 400]))
        else:
            check_batch(sampler.sample_subgraph(seeds), seeds, edge_index, degree, fanouts)
        check_batch(sampler.sample_subgraph(seeds), seeds, edge_index, degree, fanouts)
        if die_rank >= 0:
            sampler.sample_subgraph(torch.arange(10))  # the peer is gone: raises


def spawn_hosts(tmp_path, worker_fn, world, method, *extra, nodes=400):
    """Partitions graph(nodes) into ``world`` parts by ``method`` and runs ``worker_fn`` as
    that many hosts: the whole topology, what each host reported, and the results folder."""
    edge_index = graph(nodes)
    topo = qv.CSRTopo(edge_index, num_nodes=nodes)
    torch.save(edge_index, tmp_path / "edge_index.pt")
    partition_graph(tmp_path / "parts", topo, world, method)
    return (topo, *spawned(tmp_path, worker_fn, world, *extra))


def spawned(tmp_path, worker_fn, world, *extra):
    """``worker_fn`` run as ``world`` hosts over tmp_path: what each reported (ok_<rank> or
    error_<rank>), and the results folder."""
    results = tmp_path / "results"
    results.mkdir()
    spawn_workers(worker_fn, args=(world, free_port(), str(tmp_path), str(results), *extra),
                  nprocs=world)
    seen = {p.name: p.read_text() for p in results.iterdir() if p.name.startswith(("ok", "error"))}
    return seen, results


@pytest.mark.timeout(600)
@pytest.mark.parametrize("method,world,draws", [("range", 2, None), ("random", 3, None),
                                                ("random", 2, "requester")])
def test_partitioned_sampling_over_gloo(tmp_path, method, world, draws):
    """draws="requester": the host that asks draws, reading the owners' arrays over Gloo
    (RDMA's protocol over collectives)."""
    topo, seen, results = spawn_hosts(tmp_path, worker, world, method, -1, "CPU", "gloo", draws)
    assert seen == {f"ok_{r}": "ok" for r in range(world)}, seen
    assert_hub_drawn_uniformly(topo, results, world)


# 16-21 s on an H100; 240 s turns a stall (seen twice on an H200, cause not found) into a
# failure with stacks rather than ten minutes of a GPU run
@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode,backend", [("GPU", "gloo"), ("UVA", "gloo"), ("GPU", "nccl"),
                                          ("CPU", "nccl")])
def test_partitioned_sampling_on_gpus(tmp_path, mode, backend):
    """Own nodes (and peers' requests) sampled by the GPU kernels, exchanges over Gloo (the
    hosts may share one GPU) or NCCL (a GPU each): the same checks as on the CPU."""
    gpus = 2 if backend == "nccl" else 1
    if not HAS_CUDA or torch.cuda.device_count() < gpus:
        pytest.skip(f"needs {gpus} GPU(s) and the CUDA kernels")
    topo, seen, results = spawn_hosts(tmp_path, worker, 2, "random", -1, mode, backend)
    assert seen == {"ok_0": "ok", "ok_1": "ok"}, seen
    assert_hub_drawn_uniformly(topo, results, 2)


def same_seed_worker(rank, world, port, directory, results, mode, draws):
    """The same seeds and generator seed through an NCCL group and a Gloo group of the same
    processes: the owners (or, with draws="requester", the hosts that ask) draw with the
    same kernels in the same order, so the batches are equal, whichever collective carried
    them."""
    with host_of(rank, world, port, results, 60, "nccl"):
        part = load_partition(Path(directory) / "parts", rank)
        gloo = dist.new_group(backend="gloo")
        over_nccl = DistGraphSampler(part, [4, 3], timeout=10.0, mode=mode, draws=draws)
        over_gloo = DistGraphSampler(part, [4, 3], group=gloo, timeout=10.0, mode=mode,
                                     draws=draws)
        for step in range(3):
            seeds = torch.randperm(400, generator=torch.Generator().manual_seed(rank + 10 * step))[:40]
            first = over_nccl.sample_subgraph(seeds, torch.Generator().manual_seed(step))
            second = over_gloo.sample_subgraph(seeds, torch.Generator().manual_seed(step))
            assert all(torch.equal(a, b) for a, b in zip(first, second)), step


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode,draws", [("GPU", "owner"), ("CPU", "owner"),
                                        ("GPU", "requester"), ("CPU", "requester")])
def test_nccl_and_gloo_give_identical_batches_for_one_seed(tmp_path, mode, draws):
    if not HAS_CUDA or torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs (NCCL: a GPU a host)")
    _, seen, _ = spawn_hosts(tmp_path, same_seed_worker, 2, "random", mode, draws)
    assert seen == {"ok_0": "ok", "ok_1": "ok"}, seen


def slot_bounds(largest_batch, fanouts, num_nodes):
    """DistSampler's bound of each hop's block: the largest batch times the fanouts before
    the hop, at most the graph's nodes from the second hop on."""
    rows, bounds = largest_batch, []
    for fanout in fanouts:
        bounds.append(rows)
        rows = min(rows * fanout, num_nodes)
    return bounds


def bounded_slots_worker(rank, world, port, directory, results, mode):
    """GPU parts over NCCL: slots sized by bounds (every hop queued in fixed blocks; a
    shape's second batch captured as a CUDA graph, later ones replayed) and exact counts
    exchanged first give the same batch and the same remote shares, with hosts asking for
    different numbers of seeds (none included) and an empty hop. Blocks sized by what was
    seen (the default margin, taken without an exchange of batch sizes once agreed) end up
    smaller than the bounds; a batch that asks for more (60 seeds after 30) and, with a
    margin of 0.5, most batches overflow their blocks and are taken again in blocks of the
    bounds, with the same draws."""
    with host_of(rank, world, port, results, 60, "nccl"):
        directory = Path(directory)
        edge_index = torch.load(directory / "edge_index.pt")
        degree = qv.CSRTopo(edge_index, num_nodes=400).degree.long()
        part = load_partition(directory / "parts", rank)
        counts = (30, 30, 0 if rank == 1 else 7, 30, 1, 60, 30, 30, 30, 30)
        for fanouts in ([4, 3], [2, 0, 3], [5, 5, 5]):
            exact_counts = DistGraphSampler(part, fanouts, timeout=10.0, mode=mode,
                                            bounded_slots=False)
            seen = DistGraphSampler(part, fanouts, timeout=10.0, mode=mode, bounded_slots=True)
            overflowing = DistGraphSampler(part, fanouts, timeout=10.0, mode=mode,
                                           bounded_slots=True)
            overflowing._sampler.set_slot_margin(0.5)
            gen = torch.Generator().manual_seed(rank)
            smaller = False
            for step, count in enumerate(counts):
                seeds = torch.randperm(400, generator=gen)[:count]
                exact = exact_counts.sample_subgraph(seeds, torch.Generator().manual_seed(step))
                exact_share = exact_counts.remote_share()
                assert exact_counts._sampler.last_slot_rows() == []
                check_batch(exact, seeds, edge_index, degree, fanouts)
                largest = max(counts[step], 7 if step == 2 else 0)
                bounds = slot_bounds(largest, fanouts, 400)
                for sampler in (seen, overflowing):
                    batch = sampler.sample_subgraph(seeds, torch.Generator().manual_seed(step))
                    assert all(torch.equal(a, b) for a, b in zip(batch, exact)), (fanouts, step)
                    assert sampler.remote_share() == exact_share, (fanouts, step)
                    rows = sampler._sampler.last_slot_rows()
                    assert len(rows) == len(fanouts) and min(rows) >= 0, rows
                smaller |= sum(seen._sampler.last_slot_rows()) < sum(bounds)
            # Blocks sized by what was seen were smaller than the bounds (30 seeds after 30:
            # about 15 a host); at a margin of 0.5 the second and fourth batches (30 seeds
            # after 30) overflowed, and at the default the 60 seeds after 30 did, and few.
            assert smaller, fanouts
            assert overflowing._sampler.overflowed_batches() >= 2, fanouts
            assert 1 <= seen._sampler.overflowed_batches() <= len(counts) // 2, fanouts
            # Sizes are exchanged for the first batch and to take an overflowing one again;
            # the other batches ask nothing first. A host that cannot take slots says so
            # every batch.
            for sampler in (seen, overflowing):
                overflows = sampler._sampler.overflowed_batches()
                assert sampler._sampler.size_exchanges() == 1 + overflows, fanouts
            assert exact_counts._sampler.size_exchanges() == len(counts)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["GPU", "UVA"])
def test_bounded_and_exact_slots_give_identical_batches(tmp_path, mode):
    if not HAS_CUDA or torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs (NCCL: a GPU a host)")
    _, seen, _ = spawn_hosts(tmp_path, bounded_slots_worker, 2, "random", mode)
    assert seen == {"ok_0": "ok", "ok_1": "ok"}, seen


def lanes_worker(rank, world, port, directory, results, nodes, scale):
    """One seed through Gloo samplers that move a hop's bulk over 1, 3 and 4 lanes (owner
    draws: the answers; requester draws: the three reads' rows) gives one batch: the lanes
    only carry the bytes. Hosts ask for different numbers of seeds, none included, so that
    some parts of a lane carry nothing. A block travels in parts of 512 KiB or more: on the
    400-node graph every block travels whole on one lane; on the 100,000-node graph, with
    1,000 times the seeds, the requester's second-hop reads are about 1 MB a block, in 2
    parts."""
    with host_of(rank, world, port, results, 60):
        part = load_partition(Path(directory) / "parts", rank)
        for draws in ("owner", "requester"):
            before = set(qv.dist._LANES)
            samplers = [DistGraphSampler(part, [4, 3], timeout=10.0, draws=draws, lanes=lanes)
                        for lanes in (1, 3, 4)]
            assert [s.lanes for s in samplers] == [1, 3, 4]
            # ... and the lanes were set up as asked (one lane is the sampler's group alone):
            # identical batches over lanes that were never made would prove nothing.
            made = [len(kept) for key, kept in qv.dist._LANES.items()
                    if key not in before and key[1] == "sampling"]
            assert made == [3, 4], made
            for step in range(3):
                count = 0 if (rank == 1 and step == 1) else (20 + 15 * rank) * scale
                gen = torch.Generator().manual_seed(rank + 10 * step)
                seeds = torch.randperm(nodes, generator=gen)[:count]
                batches = [s.sample_subgraph(seeds, torch.Generator().manual_seed(step))
                           for s in samplers]
                for other in batches[1:]:
                    assert all(torch.equal(a, b) for a, b in zip(batches[0], other)), \
                        (draws, step)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("nodes,scale", [(400, 1), (100_000, 1000)])
def test_gloo_lanes_give_identical_batches_for_one_seed(tmp_path, nodes, scale):
    _, seen, _ = spawn_hosts(tmp_path, lanes_worker, 3, "random", nodes, scale, nodes=nodes)
    assert seen == {f"ok_{r}": "ok" for r in range(3)}, seen


def mixed_hops_worker(rank, world, port, directory, results, mode):
    """One batch with every kind of hop: a fanout (answers in slots), none (empty slots),
    and every neighbor (no slot: the answers' counts travel first), in either order."""
    with host_of(rank, world, port, results, 60, gpu=mode != "CPU"):
        directory = Path(directory)
        edge_index = torch.load(directory / "edge_index.pt")
        degree = qv.CSRTopo(edge_index, num_nodes=400).degree.long()
        part = load_partition(directory / "parts", rank)
        for fanouts in ([3, -1], [-1, 2], [2, 0, 3], [0, 4]):
            sampler = DistGraphSampler(part, fanouts, timeout=10.0, mode=mode)
            gen = torch.Generator().manual_seed(rank)
            for count in (5, 0, 20):
                seeds = torch.randperm(400, generator=gen)[:count]
                check_batch(sampler.sample_subgraph(seeds), seeds, edge_index, degree, fanouts)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", ["CPU", "GPU"])
def test_hops_in_slots_mix_with_all_neighbor_and_empty_hops(tmp_path, mode):
    if mode == "GPU" and not HAS_CUDA:
        pytest.skip("needs a GPU and the CUDA kernels")
    _, seen, _ = spawn_hosts(tmp_path, mixed_hops_worker, 2, "random", mode)
    assert seen == {"ok_0": "ok", "ok_1": "ok"}, seen


def assert_hub_drawn_uniformly(topo, results, world):
    """Chi-square: node 0's 5 of its neighbors, drawn 1500 times by each host, hit each of
    its edges equally often (expected 5/deg of the draws), the owner's and the others'."""
    from scipy import stats  # here: a minute to import on the soft-RoCE guest's emulated CPU
    row = slice(int(topo.indptr[0]), int(topo.indptr[1]))
    deg = row.stop - row.start
    for rank in range(world):
        counts = torch.load(results / f"counts_{rank}.pt")
        hits = counts[topo.eid[row]].double()
        assert int(hits.sum()) == 1500 * 5
        p = stats.chisquare(hits.numpy(), [1500 * 5 / deg] * deg).pvalue
        assert p > 1e-4, (rank, p)


@pytest.mark.timeout(600)
def test_a_peer_that_dies_mid_batch_is_named(tmp_path):
    _, seen, _ = spawn_hosts(tmp_path, worker, 3, "range", 2)
    assert set(seen) == {"error_0", "error_1"}, seen
    for message in seen.values():
        assert "RuntimeError" in message and "host 2 has stopped answering" in message, message
        assert "frame #" not in message, message  # Gloo's error without its C++ frames


def long_timeout_dying_worker(rank, world, port, directory, results):
    """Host 1 leaves after two batches; host 0, with a timeout of 100 s, times how long its
    next batch takes to name it."""
    with host_of(rank, world, port, results, 300):
        part = load_partition(Path(directory) / "parts", rank)
        sampler = DistGraphSampler(part, [4, 3], timeout=100.0)
        for _ in range(2):
            sampler.sample_subgraph(torch.arange(20))
        if rank == 1:
            os._exit(0)
        started = time.monotonic()
        with pytest.raises(RuntimeError, match="host 1 has stopped answering"):
            sampler.sample_subgraph(torch.arange(20))
        (Path(results) / "named_after_s").write_text(f"{time.monotonic() - started:.1f}")


@pytest.mark.timeout(300)
def test_a_dead_peer_is_named_within_seconds_whatever_the_timeout(tmp_path):
    """Heartbeats a tenth of the timeout apart named a dead peer after three silent ones: 24 s
    at a timeout of 60, 36-48 s at torchrun's example's 120 (a probe). They are at most a
    second apart now (in groups of up to 33 hosts)."""
    seen, results = spawn_hosts(tmp_path, long_timeout_dying_worker, 2, "range")[1:]
    assert seen == {"ok_0": "ok"}, seen
    assert float((results / "named_after_s").read_text()) < 10.0


def nccl_dying_sampler_worker(rank, port, directory, results):
    """GPU parts over NCCL (slots sized by bounds): host 1 leaves after three batches of
    one shape (the second captured as a CUDA graph, the third replayed); host 0's next batch
    must raise naming it within the timeout, its graphs let go of so that NCCL's abort ends
    (the process then exits hard)."""
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2, device_id=torch.device("cuda", rank))
    part = load_partition(Path(directory) / "parts", rank)
    sampler = DistGraphSampler(part, [4, 3], timeout=8.0, mode="GPU")
    for _ in range(3):
        sampler.sample_subgraph(torch.arange(20))
    torch.cuda.synchronize()
    if rank == 1:
        os._exit(0)
    try:
        for _ in range(3):
            sampler.sample_subgraph(torch.arange(20))
        (Path(results) / "returned_0").write_text("a batch without its peer returned")
    except Exception as error:  # noqa: BLE001
        (Path(results) / "error_0").write_text(f"{type(error).__name__}: {error}")
    os._exit(0)


@pytest.mark.timeout(300)
def test_a_peer_that_dies_is_named_over_nccl_in_bounded_slots(tmp_path):
    if not HAS_CUDA or torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs (NCCL: a GPU a host)")
    edge_index = graph()
    partition_graph(tmp_path / "parts", qv.CSRTopo(edge_index, num_nodes=400), 2, "random")
    seen = run_two_nccl_processes(nccl_dying_sampler_worker, tmp_path, patience=240)
    assert set(seen) == {"error_0"}, seen
    assert "RuntimeError" in seen["error_0"] and "host 1" in seen["error_0"], seen
    assert "RuntimeError" in seen["error_0"] and "host 1 has stopped answering" in seen["error_0"], seen


def test_the_runtime_sampler_names_fanouts_past_what_it_can_hold():
    """From a probe of torch.classes.quiver.DistSampler called directly: fanouts past a
    hop's edge limit with replacement, or past what slots can hold without, failed in the
    allocator, naming no fanout."""
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        def runtime_sampler(fanout, replace):
            return torch.classes.quiver.DistSampler(
                dist.group.WORLD.boxed(), torch.tensor([0, 2, 3, 5, 6]),
                torch.tensor([1, 2, 0, 3, 1, 2]), torch.arange(6),
                torch.zeros(4, dtype=torch.int32), torch.arange(4), [fanout], replace, 5.0, [],
                [])
        with pytest.raises(ValueError, match=r"DistSampler: fanouts\[0\] with replacement"):
            runtime_sampler(2**40, True)
        with pytest.raises(RuntimeError, match="a hop's slots .* fanout 4611686018427387904"):
            runtime_sampler(2**62, False).sample(torch.tensor([0]), None)
        # None as seeds raised before this host's step (its peers would wait), unnamed.
        sampler = runtime_sampler(2, False)
        with pytest.raises(TypeError, match="seeds must be a tensor of node ids, got None .*"
                                            "stay in step"):
            sampler.sample(None, None)
        assert sampler.sample(torch.tensor([0]), None)[0][0] == 0  # still in step
        with pytest.raises(ValueError, match="set_slot_margin: margin must be"):
            sampler.set_slot_margin(-1.0)
    finally:
        dist.destroy_process_group()


def test_a_part_loaded_on_the_wrong_rank_or_corrupt_is_refused(tmp_path):
    import dataclasses
    edge_index = graph()
    topo = qv.CSRTopo(edge_index, num_nodes=400)
    partition_graph(tmp_path / "two", topo, 2, "range")
    partition_graph(tmp_path / "one", topo, 1, "range")
    part = load_partition(tmp_path / "two", 1)
    whole = load_partition(tmp_path / "one", 0)
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        with pytest.raises(ValueError, match="rank 0 of 1 but holds part 1 of 2"):
            DistGraphSampler(part, [3])
        from torch_quiver_ops.pyg import DistNeighborLoader
        # A loader in a group of another size than the parts: every rank was told its part
        # (one past the parts was told only that its part was out of range: a probe).
        with pytest.raises(ValueError, match=r"rank 0 of 1, but .*two holds 2 parts: run one "
                                             r"process per part"):
            DistNeighborLoader(tmp_path / "two", [3], input_nodes=torch.arange(4), timeout=5.0)
        far = whole.indices.clone()
        far[17] = 400  # a neighbor id past the graph
        with pytest.raises(IndexError, match=r"node id 400, out of range \[0, 400\)"):
            DistGraphSampler(dataclasses.replace(whole, indices=far), [3])
        backwards = whole.indptr.clone()
        backwards[5] = backwards[6] + 1
        with pytest.raises(ValueError, match="must be non-decreasing"):
            DistGraphSampler(dataclasses.replace(whole, indptr=backwards), [3])
        for row in (400, -1):  # a node's row past (or before) its owner's part
            rows = whole.local_index.clone()
            rows[5] = row
            with pytest.raises(ValueError, match=rf"local_index\[5\] = {row} but host 0 owns "
                                                 r"400 nodes: the partition is corrupt"):
                DistGraphSampler(dataclasses.replace(whole, local_index=rows), [3])
        # Two nodes on one row: one would be sampled with the other's neighbors, silently.
        rows = whole.local_index.clone()
        rows[150] = rows[103]
        with pytest.raises(ValueError, match=r"local_index\[103\] and local_index\[150\] both "
                                             r"name row \d+ of host 0's part"):
            DistGraphSampler(dataclasses.replace(whole, local_index=rows), [3])
        for fanouts in ("3", [2.5]):
            with pytest.raises(TypeError, match="sizes must be a sequence of ints"):
                DistGraphSampler(whole, fanouts)
        # The whole part, after all these refusals, samples the seeds given and right.
        seeds = torch.arange(3)
        check_batch(DistGraphSampler(whole, [3]).sample_subgraph(seeds), seeds, edge_index,
                    topo.degree.long(), [3])
    finally:
        dist.destroy_process_group()


def refused_part_worker(rank, world, port, directory, results):
    """Host 0's part is corrupt (a neighbor id past the graph): the runtime refuses it on
    host 0, and host 1, whose part is whole, raises at once naming host 0's reason (it
    built its sampler and waited out the timeout in its first batch, told host 0 had
    stopped answering). Then a fanout past every degree takes what -1 does (it asked for
    its slots' terabytes). Both from a probe."""
    import dataclasses
    with host_of(rank, world, port, results, 60):
        directory = Path(directory)
        part = load_partition(directory / "parts", rank)
        far = part.indices.clone()
        far[0] = 1000
        began = time.monotonic()
        if rank == 0:
            with pytest.raises(IndexError, match="node id 1000, out of range"):
                DistGraphSampler(dataclasses.replace(part, indices=far), [3], timeout=30.0)
        else:
            with pytest.raises(ValueError, match="another host could not build its sampler: "
                                                 "host 0: .*"
                                                 "node id 1000, out of range"):
                DistGraphSampler(part, [3], timeout=30.0)
        assert time.monotonic() - began < 15, "a host waited out the timeout"
        seeds = torch.arange(0, 400, 7)
        every = DistGraphSampler(part, [-1, -1], timeout=30.0).sample_subgraph(seeds)
        huge = DistGraphSampler(part, [2**40, 2**40], timeout=30.0).sample_subgraph(seeds)
        assert torch.equal(every[3].sort().values, huge[3].sort().values)
        assert torch.equal(every[4], huge[4]) and torch.equal(every[5], huge[5])


@pytest.mark.timeout(300)
def test_a_refused_part_is_named_on_every_host_and_huge_fanouts_take_every_neighbor(tmp_path):
    _, seen, _ = spawn_hosts(tmp_path, refused_part_worker, 2, "random")
    assert seen == {"ok_0": "ok", "ok_1": "ok"}, seen


def held_resources():
    """This process's open file descriptors and OS threads (Linux)."""
    return len(os.listdir("/proc/self/fd")), len(os.listdir("/proc/self/task"))


def one_host_refusals_worker(rank, world, port, directory, results):
    """Problems of one host's own (all from a probe): setups every host refuses, repeated,
    keep no group, lanes or threads each (5 descriptors and 3 threads a refusal, 25 and 15
    with 4 lanes); a bad group, no partition or a GPU where torch sees none on one host are told
    to the other, which raises at once rather than building a sampler paired with this
    host's next setup; a refused generator still takes its turn in the step; a closed
    DistFeature is refused by DistNeighborLoader on every host (one host had failed
    mid-epoch, the other waiting out its timeout)."""
    import gc

    from torch_quiver_ops.pyg import DistNeighborLoader
    with host_of(rank, world, port, results, 60):
        directory = Path(directory)
        part = load_partition(directory / "parts", rank)
        far = part.indices.clone()
        far[0] = 1000
        held = []
        for _ in range(4):  # both hosts' parts refused by the runtime
            with pytest.raises(IndexError, match="node id 1000, out of range"):
                DistGraphSampler(dataclasses.replace(part, indices=far), [3], timeout=20.0,
                                 lanes=4)
            gc.collect()
            held.append(held_resources())
        assert held[1:] == held[:1] * 3, held  # the first refusal's group kept, no more
        # Host 0's alone: host 1 built its runtime sampler, whose heartbeat is numbered by a
        # count in the group's store that host 0's did not move, so that group is let go
        # (kept, the next samplers' beats went unmatched: a live, slow peer called silent).
        with pytest.raises((IndexError, ValueError), match="node id 1000, out of range"):
            DistGraphSampler(dataclasses.replace(part, indices=far) if rank == 0 else part, [3],
                             timeout=20.0, lanes=4)
        own_problems = [(dict(group="not a group"), "group must be a torch.distributed "
                         "ProcessGroup or None"),
                        (dict(partition=None), "partition must be a GraphPartition")]
        if not torch.cuda.is_available():
            own_problems.append((dict(mode="UVA", device="cuda"), "torch sees none"))
        for problem, words in own_problems:
            began = time.monotonic()
            with pytest.raises((ValueError, TypeError, RuntimeError), match=words):
                DistGraphSampler(**{"partition": part, "sizes": [3], "timeout": 20.0,
                                    **(problem if rank == 0 else {})})
            assert time.monotonic() - began < 10, f"{problem}: a host waited out the timeout"
        sampler = DistGraphSampler(part, [3], timeout=20.0, lanes=4)  # in step: it builds
        assert held_resources()[0] > held[0][0]  # a new group of its own (none spared)
        # Host 0's generator, then its seed past int64 (an IndexError, a review), refused:
        # its turn taken with no seeds each time, host 1's steps paired with those turns.
        for error, words, call in (
                (TypeError, "generator must be a torch.Generator",
                 lambda: sampler.sample_subgraph(torch.arange(5), "not a generator")),
                (IndexError, "past int64", lambda: sampler.sample_subgraph([2**64]))):
            if rank == 0:
                with pytest.raises(error, match=words):
                    call()
            else:
                sampler.sample_subgraph(torch.arange(5))
        for _ in range(2):  # each step paired with the other host's (one past had no peer)
            began = time.monotonic()
            sampler.sample_subgraph(torch.arange(5))
            assert time.monotonic() - began < 10, "a step waited for a peer out of step"
        sampler.close()
        feature = qv.dist.DistFeature.load(directory / "parts" / "features", timeout=20.0)
        if rank == 0:
            feature.close()
        began = time.monotonic()
        with pytest.raises(ValueError, match="feature is a DistFeature that was closed"
                           if rank == 0 else "another host's input_nodes or feature were "
                           "refused"):
            DistNeighborLoader(directory / "parts", [3], batch_size=16, feature=feature,
                               timeout=20.0)
        assert time.monotonic() - began < 10, "a host waited out the timeout"


@pytest.mark.timeout(300)
def test_one_hosts_own_problems_are_told_and_leave_nothing_behind(tmp_path):
    edge_index = graph()
    x = torch.randn(400, 5)
    partition_graph(tmp_path / "parts", qv.CSRTopo(edge_index, num_nodes=400), 2, "random",
                    x=x, y=torch.randint(4, (400,)), splits={"train": torch.arange(0, 400, 3)})
    seen, _ = spawned(tmp_path, one_host_refusals_worker, 2)
    assert seen == {"ok_0": "ok", "ok_1": "ok"}, seen


def others_of(part):
    """Nodes another host owns."""
    return (part.owner.long() != part.part).nonzero().view(-1)[:5]


def loader_worker(rank, world, port, directory, results, backend="gloo"):
    with host_of(rank, world, port, results, 60, backend):
        from torch_quiver_ops.pyg import DistNeighborLoader
        directory = Path(directory)
        x, y, edge_index = (torch.load(directory / f"{name}.pt") for name in ("x", "y", "edge_index"))
        if backend == "gloo":
            feature = qv.dist.DistFeature.load(directory / "parts" / "features", timeout=10.0)
        else:  # the sampler exchanges over NCCL; the rows are this test's whole table
            feature = x
        loader = DistNeighborLoader(directory / "parts", [4, 3], input_nodes="train",
                                    batch_size=16, shuffle=True, feature=feature, timeout=10.0,
                                    mode="CPU" if backend == "gloo" else "GPU")
        assert loader.sampler.mode == ("CPU" if backend == "gloo" else "GPU")
        assert dist.get_backend(loader.sampler_group) == backend
        lengths = torch.tensor([len(loader)])
        dist.all_gather(gathered := [torch.zeros_like(lengths) for _ in range(world)], lengths,
                        group=loader.group)
        assert len({int(t) for t in gathered}) == 1  # every host iterates as many batches
        part = loader.partition
        epoch_orders = []
        own = part.splits["train"]
        for epoch in range(2):
            in_epoch = []
            for batch in loader:
                assert batch.n_id.device.type == ("cpu" if backend == "gloo" else "cuda")
                batch = batch.cpu()
                seeds = batch.n_id[:batch.batch_size]
                assert torch.equal(loader.input_nodes[batch.input_id], seeds)  # as in PyG
                assert torch.equal(part.owner[seeds].long(), torch.full_like(seeds, rank))
                assert torch.equal(batch.x.cpu(), x[batch.n_id]) and torch.equal(batch.y, y[seeds])
                src, dst = batch.edge_index
                assert torch.equal(edge_index[0, batch.e_id], batch.n_id[dst])
                assert torch.equal(edge_index[1, batch.e_id], batch.n_id[src])
                assert sum(batch.num_sampled_nodes) == batch.num_nodes
                assert batch.batch_size > 0
                in_epoch.append(seeds)
            # Every host's every seed in each epoch (the hosts own different counts: the
            # one with fewer goes round its seeds again).
            assert torch.equal(torch.cat(in_epoch).unique(), own.unique().sort().values)
            epoch_orders.append(torch.cat(in_epoch))
        # Shuffled: each epoch in another order. (Counting the seeds seen passed with the
        # shuffle ignored: every epoch holds every seed whatever the order.)
        assert not torch.equal(epoch_orders[0], epoch_orders[1])
        if backend == "gloo":  # a host without input nodes is an error on every host
            with pytest.raises(ValueError, match="host 1 of this DistNeighborLoader has no "
                                                 "input nodes"):  # on host 0 too
                DistNeighborLoader(part, [2], input_nodes=own[:0] if rank == 1 else own)
            # A mask (PyG's train_mask) is the nodes it marks (it was seeds 0 and 1).
            mask = torch.zeros(400, dtype=torch.bool)
            mask[own] = True
            masked = DistNeighborLoader(part, [2], input_nodes=mask, batch_size=16)
            assert torch.equal(masked.input_nodes, own.unique())
            # None: every node this host owns (PyG's all nodes; it had failed unnamed)
            every = DistNeighborLoader(part, [2], input_nodes=None, batch_size=64)
            assert torch.equal(every.input_nodes, part.nodes.long())
            # Too few rows on one host, or a store that cannot be read, refused on every host
            # at once: it had failed one host mid-batch while the other waited (a probe).
            with pytest.raises(ValueError, match="feature has 100 rows for a graph of 400 nodes"
                               if rank == 1 else "another host's input_nodes or feature"):
                DistNeighborLoader(part, [2], input_nodes=own, feature=x[:100] if rank else x)
            empty = qv.Feature(device_list=[])  # (holds no data: len() raises)
            with pytest.raises(ValueError, match="feature cannot be read: this Feature holds no"
                               if rank == 1 else "another host's input_nodes or feature"):
                DistNeighborLoader(part, [2], input_nodes=own, feature=empty if rank else x)
            # Rows are read by global id: another partitioning of the same table serves them
            other = qv.dist.DistFeature.load(directory / "other_features", timeout=10.0)
            batch = next(iter(DistNeighborLoader(part, [2], input_nodes=own, feature=other)))
            assert torch.equal(batch.x, x[batch.n_id])
            other.close()
            # Found by a probe: the loader took neither the requester's draws nor a
            # generator, so a host's batches hung on the other hosts' requests. With them,
            # host 0's first batch is the same in both turns while host 1 asks for other
            # seeds each turn (its shuffle moves on an epoch).
            gen = torch.Generator().manual_seed(5)
            fixed = DistNeighborLoader(part, [4, 3], input_nodes=own, batch_size=np.int64(8),
                                       shuffle=rank == 1, draws="requester", generator=gen)
            firsts = []
            for _ in range(2):
                gen.manual_seed(5)
                firsts.append(next(iter(fixed)))
            if rank == 0:
                assert torch.equal(firsts[0].n_id, firsts[1].n_id)
                assert torch.equal(firsts[0].e_id, firsts[1].e_id)
            fixed.close()
            with pytest.raises(RuntimeError, match="this DistGraphSampler was closed"):
                fixed.sampler.sample_subgraph(own[:2])
            with pytest.raises(RuntimeError, match="this DistNeighborLoader was closed"):
                next(iter(fixed))  # (it named the sampler inside, which the user never held)
            import copy
            import pickle
            for copier in (copy.copy, copy.deepcopy, pickle.dumps):  # "cannot pickle ProcessGroup"
                with pytest.raises(TypeError, match="a DistNeighborLoader is bound to this "
                                                    "process's process group"):
                    copier(masked)
            # A split whose file holds another host's node was found mid-epoch, on that
            # host alone; now at construction, on both.
            corrupt = dataclasses.replace(part, splits=dict(part.splits, bad=others_of(part)))
            with pytest.raises(ValueError, match="split 'bad' of part 0 holds node"
                               if rank == 0 else "another host's input_nodes"):
                DistNeighborLoader(corrupt, [2], input_nodes="bad" if rank == 0 else "train")
            with pytest.raises(TypeError, match="verify must be True or False"):
                DistNeighborLoader(directory / "parts", [2], verify="yes")
            verified = DistNeighborLoader(directory / "parts", [2], verify=True)
            verified.close()
            # Input nodes one host refuses (floats; another host's nodes, whose y this part
            # lacks) raise on every host at once: the other host waited, then timed out.
            others = (part.owner.long() != rank).nonzero().view(-1)[:5]
            for bad, said in ((torch.tensor([1.5]), "input_nodes must hold integer node ids"),
                              (others, "owned by another host")):
                raised = ((TypeError if bad.is_floating_point() else ValueError) if rank == 0
                          else ValueError)  # the refusing host's own type, else "another's"
                with pytest.raises(raised, match=said if rank == 0 else "another host's"):
                    DistNeighborLoader(part, [2], input_nodes=bad if rank == 0 else own)
            # A host that stops after its sampler is made is named within the loader's
            # timeout (the batch count's all-reduce waited the group's, 30 min by default).
            if rank == 1:  # stalls between its sampler's agreement and the loader's
                own_input_nodes = DistNeighborLoader._own_input_nodes

                def stalled(self, input_nodes):
                    time.sleep(6)
                    return own_input_nodes(self, input_nodes)
                DistNeighborLoader._own_input_nodes = stalled
                try:
                    with contextlib.suppress(RuntimeError):  # it may find host 0's word
                        DistNeighborLoader(part, [2], input_nodes=own, timeout=2.0)
                finally:
                    DistNeighborLoader._own_input_nodes = own_input_nodes
            else:
                started = time.monotonic()
                with pytest.raises(RuntimeError, match="host 1"):
                    DistNeighborLoader(part, [2], input_nodes=own, timeout=2.0)
                assert time.monotonic() - started < 5.5
            with pytest.raises(ValueError, match="batch_size must be an int >= 1, got 2.5"):
                DistNeighborLoader(part, [2], batch_size=2.5)
            with pytest.raises(ValueError, match="num_neighbors"):
                DistNeighborLoader(part, [2, -2])
            # One host's bad argument is told to the other, which raised only after its
            # timeout, naming host 1 as late or dead (a probe).
            for loader_options, sampler_options, said in (
                    ({"batch_size": 0}, None, "batch_size must be an int >= 1"),
                    (None, {"timeout": 0}, "timeout must be a finite number"),
                    (None, {"draws": "bogus"}, "draws must be 'owner' or 'requester'")):
                started = time.monotonic()
                with pytest.raises(ValueError, match=said if rank == 1 else
                                   "cannot connect its hosts: host 1: " + said):
                    if loader_options is not None:
                        DistNeighborLoader(part, [2], input_nodes=own, timeout=20.0,
                                           **(loader_options if rank == 1 else {}))
                    else:
                        DistGraphSampler(part, [2], **(sampler_options if rank == 1
                                                       else {"timeout": 20.0}))
                assert time.monotonic() - started < 10, said
        with pytest.raises(ValueError, match="part must be an int, got True"):
            load_partition(directory / "parts", True)
        with pytest.raises(ValueError, match="names no split"):
            DistNeighborLoader(part, [2], input_nodes="validation")
        if backend == "gloo":
            feature.close()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("backend", ["gloo", "nccl"])
def test_dist_neighbor_loader_gives_pyg_batches_of_the_partition(tmp_path, backend):
    if backend == "nccl" and (not HAS_CUDA or torch.cuda.device_count() < 2):
        pytest.skip("needs 2 GPUs and the CUDA kernels")
    edge_index = graph()
    topo = qv.CSRTopo(edge_index, num_nodes=400)
    x, y = torch.randn(400, 5), torch.randint(4, (400,))
    for name, t in (("x", x), ("y", y), ("edge_index", edge_index)):
        torch.save(t, tmp_path / f"{name}.pt")
    partition_graph(tmp_path / "parts", topo, 2, "random", x=x, y=y,
                    splits={"train": torch.arange(0, 400, 3)}, replicate=0.1)
    qv.dist.partition_features(x, tmp_path / "other_features", 2)  # another run's rows
    seen, _ = spawned(tmp_path, loader_worker, 2, backend)
    assert seen == {"ok_0": "ok", "ok_1": "ok"}, seen


# ---- one-sided RDMA reads of the owners' rows (runs where a device exists:
# scripts/rdma_vm.sh, soft-RoCE) ----

def rdma_worker(rank, world, port, directory, results, die_rank):
    with host_of(rank, world, port, results, 120):
        directory = Path(directory)
        edge_index = torch.load(directory / "edge_index.pt")
        topo = qv.CSRTopo(edge_index, num_nodes=400)
        part = load_partition(directory / "parts", rank)
        options = {"qps_per_peer": 1, "staging_bytes": 1 << 16,
                   "device": os.environ.get("RXE_DEV", ""),
                   "gid_index": int(os.environ.get("RXE_GID_INDEX", "-1"))}
        sampler = DistGraphSampler(part, [4, 3], timeout=20.0, transport="rdma", rdma=options)
        collective = DistGraphSampler(part, [4, 3], timeout=20.0, transport="collective")
        assert sampler.transport == "rdma" and collective.transport == "collective"
        gen = torch.Generator().manual_seed(rank)
        # Hosts sample on their own: host 0 takes more batches than host 1.
        for step in range(3 if rank == 0 else 1):
            seeds = torch.randperm(400, generator=gen)[:int(torch.randint(1, 50, (1,), generator=gen))]
            check_batch(sampler.sample_subgraph(seeds), seeds, edge_index, topo.degree.long(),
                        [4, 3])
        assert sum(sampler.remote_share()[0]) > 0
        dist.barrier()
        # The host that asks draws over RDMA, and over Gloo with draws="requester": one seed,
        # the same batch, whichever carries the reads.
        over_gloo = DistGraphSampler(part, [4, 3], timeout=20.0, transport="collective",
                                     draws="requester")
        for step in range(2):
            seeds = torch.randperm(400, generator=torch.Generator().manual_seed(rank + 10 * step))[:30]
            read = sampler.sample_subgraph(seeds, torch.Generator().manual_seed(step))
            exchanged = over_gloo.sample_subgraph(seeds, torch.Generator().manual_seed(step))
            assert all(torch.equal(a, b) for a, b in zip(read, exchanged)), step
        # The same uniform draws as the collective path: node 0's 1-hop hits, counted.
        one_hop = DistGraphSampler(part, [5], timeout=20.0, transport="rdma", rdma=options)
        counts = torch.zeros(topo.edge_count, dtype=torch.long)
        for _ in range(300):
            counts[one_hop.sample_subgraph(torch.tensor([0]))[3]] += 1
        torch.save(counts, Path(results) / f"counts_{rank}.pt")
        dist.barrier()
        if rank == die_rank:
            os._exit(0)
        if die_rank >= 0:
            import time
            time.sleep(2)  # the peer is gone: its queue pairs and memory with it
            sampler.sample_subgraph(torch.arange(40))
        del collective


@pytest.mark.timeout(900)
@pytest.mark.skipif(not torch.classes.quiver.Transport.rdma_available(),
                    reason="no RDMA device here; scripts/rdma_vm.sh runs this over soft-RoCE")
@pytest.mark.parametrize("die_rank", [-1, 1])
def test_rdma_reads_of_the_owners_rows(tmp_path, die_rank):
    topo, seen, results = spawn_hosts(tmp_path, rdma_worker, 2, "random", die_rank)
    if die_rank < 0:
        from scipy import stats
        assert seen == {"ok_0": "ok", "ok_1": "ok"}, seen
        row = slice(int(topo.indptr[0]), int(topo.indptr[1]))
        deg = row.stop - row.start
        for rank in range(2):  # host 1 reads node 0's row from host 0's memory
            hits = torch.load(results / f"counts_{rank}.pt")[topo.eid[row]].double()
            assert int(hits.sum()) == 300 * 5
            assert stats.chisquare(hits.numpy(), [300 * 5 / deg] * deg).pvalue > 1e-4
    else:
        assert set(seen) == {"error_0"}, seen
        assert "host 1" in seen["error_0"], seen


NETNS_WORKER = '''
import os, sys, torch, torch.distributed as dist
sys.path.insert(0, sys.argv[2])
from test_dist_sampler import check_batch
import torch_quiver_ops as qv
from torch_quiver_ops.partition import DistGraphSampler, load_partition
directory = sys.argv[1]
dist.init_process_group("gloo")
edge_index = torch.load(os.path.join(directory, "edge_index.pt"))
degree = qv.CSRTopo(edge_index, num_nodes=400).degree.long()
sampler = DistGraphSampler(load_partition(os.path.join(directory, "parts"), dist.get_rank()),
                           [4, 3], timeout=20.0)
for seed in range(3):
    seeds = torch.randperm(400, generator=torch.Generator().manual_seed(seed + dist.get_rank()))[:40]
    check_batch(sampler.sample_subgraph(seeds), seeds, edge_index, degree, [4, 3])
print(f"host {dist.get_rank()} sampled across the namespaces, remote per hop "
      f"{sampler.remote_share()[0]}", flush=True)
dist.destroy_process_group()
'''


@pytest.mark.timeout(600)
def test_two_hosts_in_network_namespaces(tmp_path):
    """Each host in its own network namespace (its own eth0 on a bridge): the hops cross a
    network, not loopback."""
    from test_dist import netns_usable, run_in_namespaces
    if not netns_usable():
        pytest.skip("needs root and `ip netns` (network namespaces)")
    edge_index = graph()
    torch.save(edge_index, tmp_path / "edge_index.pt")
    partition_graph(tmp_path / "parts", qv.CSRTopo(edge_index, num_nodes=400), 2, "random")
    (tmp_path / "worker.py").write_text(NETNS_WORKER)
    outputs = run_in_namespaces(tmp_path / "worker.py", tmp_path, Path(__file__).parent)
    assert sum("sampled across the namespaces" in o for o in outputs) == 2, outputs


def machines_worker(rank, world, port, directory, results):
    """Slots sized by bounds by default only when every host runs on one machine: a host
    with another host name turns them off on every host; asked for, they are on."""
    with host_of(rank, world, port, results, 60):
        part = load_partition(Path(directory) / "parts", rank)
        assert DistGraphSampler(part, [2], timeout=10.0).bounded_slots is True
        if rank == 1:
            socket.gethostname = lambda: "another-machine"
        apart = DistGraphSampler(part, [2], timeout=10.0)
        assert apart.bounded_slots is False
        assert DistGraphSampler(part, [2], timeout=10.0, bounded_slots=True).bounded_slots is True
        with pytest.raises(ValueError, match="bounded_slots must be None, True or False"):
            DistGraphSampler(part, [2], bounded_slots="yes")
        apart.sample_subgraph(torch.arange(5))


@pytest.mark.timeout(300)
def test_bounded_slots_default_to_one_machine(tmp_path):
    _, seen, _ = spawn_hosts(tmp_path, machines_worker, 2, "random")
    assert seen == {"ok_0": "ok", "ok_1": "ok"}, seen


def mismatch_worker(rank, world, port, directory, results):
    with host_of(rank, world, port, results, 60):
        directory = Path(directory)
        mine = load_partition(directory / ("a" if rank == 0 else "b"), rank)
        with pytest.raises(ValueError, match=r"different partitions \(ids\).*host 0.*host 1"):
            DistGraphSampler(mine, [4, 3], timeout=10.0)
        same = load_partition(directory / "a", rank)
        with pytest.raises(ValueError, match="different fanouts"):
            DistGraphSampler(same, [4, 3] if rank == 0 else [4, 2], timeout=10.0)
        with pytest.raises(ValueError, match="different draws"):
            DistGraphSampler(same, [4, 3], timeout=10.0,
                             draws="requester" if rank == 0 else None)
        with pytest.raises(ValueError, match="different lanes"):
            DistGraphSampler(same, [4, 3], timeout=10.0, lanes=2 if rank == 0 else 3)
        with pytest.raises(ValueError, match="draws must be"):
            DistGraphSampler(same, [4, 3], draws="peer")
        with pytest.raises(ValueError, match=r"lanes must be an int in \[1, 64\], got 0"):
            DistGraphSampler(same, [4, 3], lanes=0)
        with pytest.raises(ValueError, match="requester"):
            DistGraphSampler(same, [4, 3], transport="rdma", draws="owner")
        sampler = DistGraphSampler(same, [2], timeout=10.0)  # still usable together
        sampler.sample_subgraph(torch.arange(5))


@pytest.mark.timeout(300)
def test_hosts_with_other_partitions_or_fanouts_refuse_together(tmp_path):
    topo = qv.CSRTopo(graph(), num_nodes=400)
    partition_graph(tmp_path / "a", topo, 2, "range")
    partition_graph(tmp_path / "b", topo, 2, "range")  # same sizes, another partition id
    seen, _ = spawned(tmp_path, mismatch_worker, 2)
    assert seen == {"ok_0": "ok", "ok_1": "ok"}, seen
