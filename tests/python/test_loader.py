"""torch_quiver_ops.loader: prefetched batches equal the serial ones for the same seed, in
order, with bounded look-ahead, errors raised in the caller, and clean early exits; on every
placement (side CUDA streams on GPUs)."""
import threading
import time

import pytest
import torch

import torch_quiver_ops as qv
from conftest import HAS_CUDA, load_example, requires_cuda
from reference import random_coo


def device_of(mode):
    return torch.device("cpu") if mode == "CPU" else torch.device("cuda", 0)


def setup(mode, num_nodes=300, num_edges=4000, width=5):
    row, col = random_coo(num_nodes, num_edges, seed=1)
    topo = qv.CSRTopo(torch.stack([row, col]), num_nodes=num_nodes)
    device = device_of(mode)
    sampler = qv.GraphSageSampler(topo, [4, 3], device=device, mode=mode)
    table = torch.randn(num_nodes, width, generator=torch.Generator().manual_seed(2))
    feature = qv.Feature(rank=0, device_list=[0] if device.type == "cuda" else [],
                         device_cache_size="30%", csr_topo=topo)
    feature.from_cpu_tensor(table)
    labels = torch.randint(0, 7, (num_nodes,), generator=torch.Generator().manual_seed(3))
    return sampler, feature, table, labels


def flatten(batch):
    n_id, batch_size, adjs, x, y = batch
    parts = [n_id, x, y] + [t for adj in adjs for t in (adj.edge_index,)]
    return batch_size, [t.cpu() for t in parts]


def epoch(loader, noise_device=None):
    out = []
    for batch in loader:
        if noise_device is not None:  # a model drawing random numbers meanwhile
            torch.rand(1000, device=noise_device)
            torch.rand(10)
        out.append(flatten(batch))
    return out


def same(a, b):
    return len(a) == len(b) and all(
        x[0] == y[0] and all(torch.equal(p, q) for p, q in zip(x[1], y[1])) for x, y in zip(a, b))


@pytest.mark.parametrize("depth", [1, 3])
def test_prefetched_batches_equal_serial_ones(mode, depth):
    sampler, feature, table, labels = setup(mode)
    seeds = torch.arange(0, 300, 2)
    serial = qv.SampleLoader(sampler, feature, seeds, 16, labels=labels, prefetch=0)
    ahead = qv.SampleLoader(sampler, feature, seeds, 16, labels=labels, prefetch=depth)
    torch.manual_seed(5)
    first = epoch(serial)
    torch.manual_seed(5)
    second = epoch(ahead, noise_device=device_of(mode))
    assert same(first, second)
    again = epoch(ahead)
    assert not same(first, again)  # the next epoch draws anew

    def order(batches):
        return torch.cat([parts[0][:size].cpu() for size, parts in batches])
    for batches in (first, again):  # every seed once, shuffled
        assert torch.equal(order(batches).sort().values, seeds)
        assert not torch.equal(order(batches), seeds)
    assert not torch.equal(order(first), order(again))  # a new order, not only new draws
    in_order = qv.SampleLoader(sampler, feature, seeds, 16, labels=labels, shuffle=False,
                               prefetch=depth)
    assert torch.equal(order(epoch(in_order)), seeds)


def test_batches_hold_the_rows_and_labels_and_cover_every_seed(mode):
    sampler, feature, table, labels = setup(mode)
    seeds = torch.randperm(300)[:101]
    loader = qv.SampleLoader(sampler, feature, seeds, 20, labels=labels)
    assert len(loader) == 6
    seen = []
    for n_id, batch_size, adjs, x, y in loader:
        assert x.device == n_id.device == device_of(mode)
        assert torch.equal(x.cpu(), table[n_id.cpu()])
        assert torch.equal(y.cpu(), labels[n_id[:batch_size].cpu()])
        assert adjs[-1].size[1] == batch_size
        seen.append(n_id[:batch_size].cpu())
    assert torch.equal(torch.cat(seen).sort().values, seeds.sort().values)
    dropped = qv.SampleLoader(sampler, feature, seeds, 20, drop_last=True, shuffle=False)
    sizes = [b.batch_size for b in dropped]
    assert sizes == [20] * 5 and len(dropped) == 5


def test_prefetching_a_pyg_neighbor_loader_gives_the_same_batches(mode):
    from torch_geometric.data import Data
    row, col = random_coo(200, 2000, seed=4)
    data = Data(edge_index=torch.stack([row, col]), x=torch.randn(200, 3),
                y=torch.arange(200), num_nodes=200)
    loader = qv.pyg.NeighborLoader(data, [3, 2], batch_size=32, shuffle=True,
                                   device=device_of(mode), mode=mode)
    torch.manual_seed(9)
    plain = [(b.n_id.cpu(), b.edge_index.cpu(), b.x.cpu()) for b in loader]
    torch.manual_seed(9)
    fetched = []
    for b in qv.Prefetcher(loader, device_of(mode), depth=2):
        torch.rand(100, device=device_of(mode))
        fetched.append((b.n_id.cpu(), b.edge_index.cpu(), b.x.cpu()))
    assert len(plain) == len(fetched) == 7
    assert all(all(torch.equal(p, q) for p, q in zip(a, b)) for a, b in zip(plain, fetched))


class Counting:
    """Batches of one tensor each, counting how many the producer has built."""

    def __init__(self, count, fail_at=None):
        self.count, self.fail_at, self.built = count, fail_at, 0
        self.lock = threading.Lock()

    def __len__(self):
        return self.count

    def __iter__(self):
        for i in range(self.count):
            yield self._build(i)

    def _build(self, i):
        if i == self.fail_at:
            raise IndexError(f"batch {i} names node 999, out of range")
        with self.lock:
            self.built += 1
        time.sleep(0.001 * (i % 3))  # workers finish out of turn
        return torch.full((4,), i)

    def batch_builders(self):
        return [lambda i=i: self._build(i) for i in range(self.count)]


@pytest.mark.parametrize("depth,workers", [(1, 1), (2, 1), (4, 1), (2, 2), (5, 3)])
def test_look_ahead_is_bounded(depth, workers):
    source = Counting(20)
    taken = 0
    for batch in qv.Prefetcher(source, "cpu", depth=depth, workers=workers):
        taken += 1
        assert int(batch[0]) == taken - 1  # in order, whichever worker built it
        time.sleep(0.01)  # a slow model: the producers fill their queues and wait
        assert source.built <= taken + depth + workers
    assert taken == 20


@pytest.mark.parametrize("workers", [1, 3])
def test_errors_reach_the_caller_and_early_exits_stop_the_thread(workers):
    threads = threading.active_count()
    taken = []
    with pytest.raises(IndexError, match="node 999"):
        for batch in qv.Prefetcher(Counting(10, fail_at=3), "cpu", depth=3, workers=workers):
            taken.append(int(batch[0]))
    assert taken == [0, 1, 2]  # the failure comes in its batch's turn
    for i, _ in enumerate(qv.Prefetcher(Counting(1000), "cpu", depth=3, workers=workers)):
        if i == 2:
            break
    deadline = time.time() + 5
    while threading.active_count() > threads and time.time() < deadline:
        time.sleep(0.01)
    assert threading.active_count() == threads


def test_prefetcher_caps_host_reads_in_its_own_thread_only():
    # Its thread's Feature gathers of host rows run on few thread blocks (feature.
    # host_read_blocks), leaving the SMs to the model; the caller's thread is untouched.
    from torch_quiver_ops import feature as feature_module

    def current():
        return getattr(feature_module._THREAD_GATHERS, "host_read_blocks", 0)

    seen = []

    class Probe:
        def __len__(self):
            return 3

        def __iter__(self):
            for step in range(3):
                seen.append(current())
                yield torch.tensor([step])

    assert [int(b) for b in qv.Prefetcher(Probe(), "cpu", 2, host_read_blocks=7)] == [0, 1, 2]
    assert seen == [7, 7, 7] and current() == 0
    seen.clear()
    list(qv.Prefetcher(Probe(), "cpu", 2))
    assert seen == [qv.loader.HOST_READ_BLOCKS] * 3
    seen.clear()
    list(qv.Prefetcher(Probe(), "cpu", 0, host_read_blocks=7))  # built in the caller's thread
    assert seen == [0, 0, 0]
    with feature_module.host_read_blocks(5):
        assert current() == 5
        with feature_module.host_read_blocks(0):
            assert current() == 0
        assert current() == 5
    assert current() == 0
    for bad in (-1, 2.5, True, 2**31):
        with pytest.raises(ValueError, match=r"must be an int in \[0, 2\*\*31\)"):
            qv.Prefetcher(Probe(), "cpu", host_read_blocks=bad)
        with pytest.raises(ValueError, match=r"must be an int in \[0, 2\*\*31\)"):
            with feature_module.host_read_blocks(bad):
                pass


def test_bad_arguments_raise():
    sampler, feature, _, labels = setup("CPU")
    for bad in (0, -1, True, 2.0, 10**6):
        with pytest.raises(ValueError, match=r"workers must be an int in \[1, 256\]"):
            qv.Prefetcher(Counting(3), "cpu", workers=bad)
    # (named as the loader's argument: it said "depth", Prefetcher's name)
    with pytest.raises(ValueError, match="so prefetch must be at least 3, got 2"):
        qv.SampleLoader(sampler, feature, torch.arange(3), 2, prefetch=2, workers=3)
    with pytest.raises(ValueError, match="has no batch_builders"):
        qv.Prefetcher([torch.zeros(1)], "cpu", workers=2)
    with pytest.raises(ValueError, match="need a stream each"):
        qv.Prefetcher(Counting(3), "cpu", stream=object(), workers=2)
    with pytest.raises(ValueError, match="stream must be a CUDA stream of the Prefetcher's "
                                         "device cpu, got one of cpu"):
        qv.Prefetcher([1, 2], "cpu", stream=torch.Stream("cpu"))  # (had failed in CUDA's words)
    with pytest.raises(ValueError, match="device must be the CPU or a GPU, got 'meta'"):
        qv.Prefetcher([1, 2], "meta")
    with pytest.raises(ValueError, match="batch_size"):
        qv.SampleLoader(sampler, feature, torch.arange(3), 0)
    with pytest.raises(ValueError, match="labels has 5 rows"):
        qv.SampleLoader(sampler, feature, torch.arange(3), 2, labels=torch.zeros(5))
    with pytest.raises(ValueError, match="depth"):
        qv.Prefetcher([], "cpu", depth=-1)
    with pytest.raises(ValueError, match="pace must be a callable taking a bool, got 3"):
        qv.Prefetcher([], "cpu", pace=3)
    # A seed outside the graph, named by its place in seeds when the loader is built (it
    # was raised in its batch's turn, an epoch in, by its place in the batch).
    with pytest.raises(IndexError, match=r"seeds\[45\] = 300 is out of range \[0, 300\)"):
        qv.SampleLoader(sampler, feature, torch.cat([torch.arange(45), torch.tensor([300])]),
                        10, shuffle=False)
    with pytest.raises(TypeError, match="seeds must hold integer node ids"):
        qv.SampleLoader(sampler, feature, torch.arange(3.0), 2)
    assert len(qv.SampleLoader(sampler, feature, [], 2)) == 0  # no seeds: an empty epoch
    import numpy as np
    for bad in (2.5, True, np.float64(2.0)):  # failed later, inside torch
        with pytest.raises(ValueError, match="batch_size must be an int >= 1"):
            qv.SampleLoader(sampler, feature, torch.arange(3), bad)
    for size in (np.int64(2), torch.tensor(2)):  # taken as ints, as torch's DataLoader does
        assert qv.SampleLoader(sampler, feature, torch.arange(3), size).batch_size == 2
    for bad in (1.5, None):
        with pytest.raises(ValueError, match="prefetch.* must be an int >= 0"):
            qv.SampleLoader(sampler, feature, torch.arange(3), 2, prefetch=bad)
    # By edge time, a sampler needs a time per seed, which SampleLoader does not pass.
    timed = qv.GraphSageSampler(sampler.csr_topo, [2], mode="CPU",
                                edge_time=torch.zeros(sampler.csr_topo.edge_count,
                                                      dtype=torch.long))
    with pytest.raises(ValueError, match="needs a time per seed"):
        qv.SampleLoader(timed, feature, torch.arange(3), 2)


@pytest.mark.parametrize("workers", [2, 3])
def test_workers_build_the_same_batches_in_order(mode, workers):
    # Each batch samples from its own seed, so threads building batches out of turn, on
    # streams of their own, give exactly the batches of one thread, and of none.
    sampler, feature, table, labels = setup(mode)
    seeds = torch.arange(0, 300, 2)
    serial = qv.SampleLoader(sampler, feature, seeds, 8, labels=labels, prefetch=0)
    parallel = qv.SampleLoader(sampler, feature, seeds, 8, labels=labels, prefetch=4,
                               workers=workers)
    wrapped = qv.Prefetcher(serial, device_of(mode), depth=workers, workers=workers)
    torch.manual_seed(6)
    first = epoch(serial)
    assert len(first) == 19
    torch.manual_seed(6)
    assert same(first, epoch(parallel, noise_device=device_of(mode)))
    torch.manual_seed(6)
    assert same(first, epoch(wrapped))
    for batch in first:  # rows and labels of the sampled nodes
        n_id, x, y = batch[1][:3]
        assert torch.equal(x, table[n_id]) and torch.equal(y, labels[n_id[:batch[0]]])


def test_a_loader_without_feature_gives_batches_without_rows(mode):
    sampler, feature, _, labels = setup(mode)
    with_rows = qv.SampleLoader(sampler, feature, torch.arange(50), 10, labels=labels)
    without = qv.SampleLoader(sampler, None, torch.arange(50), 10, labels=labels, prefetch=3,
                              workers=2)
    torch.manual_seed(1)
    a = list(with_rows)
    torch.manual_seed(1)
    b = list(without)
    assert len(a) == len(b) == 5
    for p, q in zip(a, b):
        assert q.x is None and torch.equal(p.n_id, q.n_id) and torch.equal(p.y, q.y)


@pytest.mark.skipif(not (torch.cuda.is_available() and qv.cuda_kernels_built()),
                    reason="needs a CUDA GPU and the CUDA kernels")
@pytest.mark.parametrize("workers,in_cpp", [(1, False), (3, False), (1, True)])
def test_side_stream_batches_are_ready_for_a_busy_main_stream(workers, in_cpp):
    sampler, feature, table, labels = setup("GPU", num_nodes=300)
    loader = qv.SampleLoader(sampler, feature, torch.arange(300), 8, labels=labels, prefetch=3,
                             workers=workers, prefetch_in_cpp=in_cpp)
    big = torch.randn(2048, 2048, device="cuda")
    for n_id, batch_size, adjs, x, y in loader:
        for _ in range(4):  # keep the main stream busy while batches are built beside it
            big = (big @ big).tanh_()
        x = x * 1.0  # read on the main stream after the event
        assert torch.equal(x.cpu(), table[n_id.cpu()])
        assert torch.equal(y.cpu(), labels[n_id[:batch_size].cpu()])
        del n_id, adjs, x, y  # freed while the main stream may still use them: record_stream
    torch.cuda.synchronize()


@requires_cuda
@pytest.mark.parametrize("in_cpp", [False, True])
def test_the_training_loop_may_synchronize_beside_a_prefetching_loader(in_cpp):
    """CUDA forbids synchronizing the device while any stream captures a graph: the
    loader's sampler captures its batch shapes in the iterating thread, not its own."""
    sampler, feature, table, labels = setup("GPU", num_nodes=3000, num_edges=40000)
    loader = qv.SampleLoader(sampler, feature, torch.arange(2990), 256, labels=labels,
                             prefetch=2, prefetch_in_cpp=in_cpp)
    for _ in range(2):
        for n_id, _, _, x, _ in loader:
            torch.cuda.synchronize()
            assert torch.equal(x.cpu(), table[n_id.cpu()])
    # The epoch's batches are what they would have been without the captures first.
    torch.manual_seed(3)
    captured = epoch(loader)
    torch.manual_seed(3)
    plain = qv.SampleLoader(qv.GraphSageSampler(sampler.csr_topo, [4, 3], device=0, mode="GPU",
                                                capture_batches=False),
                            feature, torch.arange(2990), 256, labels=labels, prefetch=2,
                            prefetch_in_cpp=in_cpp)
    assert same(captured, epoch(plain))


@requires_cuda
def test_closing_the_feature_mid_epoch_fails_the_epoch_cleanly():
    """Feature.close() while the loader's C++ thread gathers: the gather under way finishes
    first, later ones raise (the memory was freed under them before)."""
    sampler, feature, _, _ = setup("GPU", num_nodes=20000, num_edges=400000, width=64)
    loader = qv.SampleLoader(sampler, feature, torch.arange(20000), 512, prefetch=4,
                             prefetch_in_cpp=True)
    batches = iter(loader)
    next(batches)
    feature.close()
    with pytest.raises(RuntimeError, match="released"):
        for _ in batches:
            pass
    assert int(torch.arange(10, device="cuda").sum()) == 45  # the context still works


@requires_cuda
def test_strided_gpu_ids_gather_every_time():
    _, feature, table, _ = setup("GPU")
    pairs = torch.randint(0, 300, (50, 2), device="cuda")
    for _ in range(3):  # the first call builds the device's view; later ones take it
        assert torch.equal(feature[pairs[:, 0]].cpu(), table[pairs[:, 0].cpu()])


def test_hit_rate_checks_its_ids():
    _, feature, _, _ = setup("CPU")
    with pytest.raises(IndexError, match=r"ids\[0\] = -1 is out of range \[0, 300\)"):
        feature.hit_rate([-1, 2])
    with pytest.raises(TypeError, match="integer ids"):
        feature.hit_rate(torch.tensor([0.5]))
    with pytest.raises(TypeError, match="integer ids"):
        feature.hit_rate(torch.ones(300, dtype=torch.bool))


@requires_cuda
@pytest.mark.parametrize("where", ["stream", "green stream", "sms", "sms, 2 workers"])
def test_batches_built_on_a_given_stream_equal_serial_ones(where):
    # Prefetcher(stream=...): a stream of the caller's choosing, such as one of a green
    # context; Prefetcher(sms=...) / SampleLoader(prefetch_sms=...): a green context made
    # for the loader (SMs of its own), where this torch supports them.
    if where != "stream" and not torch.cuda.green_contexts.SUPPORTED:
        pytest.skip("this torch was built without green contexts")
    sampler, feature, table, labels = setup("GPU")
    seeds = torch.arange(0, 300, 2)
    serial = qv.SampleLoader(sampler, feature, seeds, 16, labels=labels, prefetch=0)
    if where.startswith("sms"):
        workers = 2 if "workers" in where else 1
        ahead = qv.SampleLoader(sampler, feature, seeds, 16, labels=labels, prefetch=2,
                                prefetch_sms=8, workers=workers)
        assert len({s.stream_id for s in ahead._prefetcher._streams}) == workers
    elif where == "green stream":
        context = torch.cuda.green_contexts.GreenContext.create(8, torch.cuda.current_device())
        ahead = qv.Prefetcher(serial, stream=context.Stream())
    else:
        ahead = qv.Prefetcher(serial, stream=torch.cuda.Stream())
    torch.manual_seed(5)
    first = epoch(serial)
    torch.manual_seed(5)
    assert same(first, epoch(ahead))


def test_loader_sms_are_checked():
    sampler, feature, table, labels = setup("CPU")
    with pytest.raises(ValueError, match="SMs are a GPU's"):
        qv.Prefetcher([], "cpu", sms=8)
    with pytest.raises(ValueError, match="not both"):
        qv.Prefetcher([], "cpu", stream=object(), sms=8)
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"sms must be in \[1, "):
            qv.Prefetcher([], 0, sms=100_000)


# ---- LinkSampleLoader: the torch-quiver-style loader for link prediction ----

def _link_setup(mode, neg_ratio=1.0, **kwargs):
    from reference import random_graph
    graph = random_graph(num_nodes=300, num_edges=3000, seed=12)
    topo = qv.CSRTopo(torch.stack([graph.row, graph.col]), num_nodes=300)
    device = "cpu" if mode == "CPU" else "cuda"
    sampler = qv.GraphSageSampler(topo, [4, 3], device=device, mode=mode)
    x = torch.randn(300, 5, generator=torch.Generator().manual_seed(1))
    edges = torch.stack([graph.row, graph.col])[:, :1000]
    loader = qv.LinkSampleLoader(sampler, x.to(device), edges, 128, neg_ratio=neg_ratio,
                                 **kwargs)
    return graph, x, edges, loader


def test_link_sample_loader_batches(mode):
    graph, x, edges, loader = _link_setup(mode, neg_ratio=2.0,
                                          generator=torch.Generator().manual_seed(0))
    true_edges = set(zip(graph.row.tolist(), graph.col.tolist()))
    seen = set()
    for n_id, batch_size, adjs, rows, edge_label_index, edge_label in loader:
        n_id, eli, label = n_id.cpu(), edge_label_index.cpu(), edge_label.cpu()
        assert torch.equal(rows.cpu(), x[n_id])
        assert int(eli.max()) < batch_size  # every endpoint is a seed of the batch
        pairs = n_id[eli]
        positives = pairs[:, label == 1]
        assert (label == 0).sum() == 2 * positives.size(1)
        seen |= set(zip(*positives.tolist()))
        assert not any(p in true_edges for p in zip(*pairs[:, label == 0].tolist()))
        assert adjs[-1].size[1] == batch_size
    assert seen == set(zip(*edges.tolist()))


def test_link_sample_loader_prefetch_gives_the_same_batches(mode):
    def epoch(prefetch):
        _, _, _, loader = _link_setup(mode, prefetch=prefetch,
                                      generator=torch.Generator().manual_seed(4))
        return [(b.n_id.cpu(), b.edge_label_index.cpu(), b.edge_label.cpu(), b.x.cpu())
                for b in loader]
    serial, ahead = epoch(0), epoch(2)
    assert len(serial) == len(ahead) == 8  # 1000 seed edges in batches of 128 (zip stops short)
    for one, other in zip(serial, ahead):
        assert all(torch.equal(a, b) for a, b in zip(one, other))


def test_a_link_loader_with_a_feature_store_builds_link_batches(mode):
    # A Feature (or no rows) would let the C++ thread build a GPU sampler's batches by
    # default; it builds node batches, so a link loader must keep to its own.
    _, x, edges, with_a_tensor = _link_setup(mode)
    sampler = with_a_tensor.sampler
    feature = qv.Feature(rank=0, device_list=[0] if mode != "CPU" else [],
                         device_cache_size="30%", csr_topo=sampler.csr_topo)
    feature.from_cpu_tensor(x)
    for rows in (feature, None):
        loader = qv.LinkSampleLoader(sampler, rows, edges, 128)
        batches = list(loader)
        assert not loader.prefetch_in_cpp and len(batches) == 8
        assert sum(batch.edge_label.numel() for batch in batches) == 2000  # 1 negative each
        for batch in batches:
            assert isinstance(batch, qv.loader.LinkBatch)
            if rows is not None:
                assert torch.equal(batch.x.cpu(), x[batch.n_id.cpu()])


def test_link_negatives_count_as_decimals_and_take_more_trials_when_asked():
    """100 * 0.07 is 7.000000000000001 in floats, whose ceiling drew an 8th negative; and on
    a dense graph the cap of 8 draws left a share of true edges among the negatives, with no
    way to raise it from the loader (probes)."""
    n = 10
    pairs = torch.cartesian_prod(torch.arange(n), torch.arange(n)).t()
    dense = pairs[:, (pairs[0] != pairs[1]) & ~((pairs[0] == 0) & (pairs[1] == 1))]
    sampler = qv.GraphSageSampler(qv.CSRTopo(dense, num_nodes=n), [2], device="cpu")
    seeds = torch.zeros(2, 100, dtype=torch.long)
    batch = next(iter(qv.LinkSampleLoader(sampler, None, seeds, 100, neg_ratio=0.07, prefetch=0)))
    assert int((batch.edge_label == 0).sum()) == 7
    true_edges = set(zip(*dense.tolist()))

    def true_share(trials):
        loader = qv.LinkSampleLoader(sampler, None, dense[:, :50], 50, neg_ratio=200,
                                     prefetch=0, neg_max_trials=trials,
                                     generator=torch.Generator().manual_seed(0))
        batch = next(iter(loader))
        negatives = batch.n_id[batch.edge_label_index][:, batch.edge_label == 0]
        return sum(p in true_edges for p in zip(*negatives.tolist())) / negatives.size(1)
    # All but node 0 link to 9 of the 10 nodes: (9/10)**8 = 0.43 of their draws stay true
    # edges at 8 trials, (9/10)**100 < 1e-4 at 100.
    assert 0.3 < true_share(8) < 0.5
    assert true_share(100) < 0.01


def test_link_sample_loader_refuses_bad_input():
    graph, _, edges, _ = _link_setup("CPU")
    topo = qv.CSRTopo(torch.stack([graph.row, graph.col]), num_nodes=300)
    sampler = qv.GraphSageSampler(topo, [2], device="cpu")
    with pytest.raises(IndexError, match="edge_label_index holds node 300"):
        qv.LinkSampleLoader(sampler, None, torch.tensor([[0], [300]]), 8)
    for ratio in (-1, float("nan"), float("inf")):  # NaN would draw no negatives, unsaid
        with pytest.raises(ValueError, match="neg_ratio must be a finite number >= 0"):
            qv.LinkSampleLoader(sampler, None, edges, 8, neg_ratio=ratio)
    for dtype in (torch.bool, torch.complex64):  # True and False are no node ids
        with pytest.raises(ValueError, match=r"\[2, num_edges\] tensor of node ids"):
            qv.LinkSampleLoader(sampler, None, torch.ones(2, 3, dtype=dtype), 8)
    temporal = qv.GraphSageSampler(topo, [2], device="cpu", node_time=torch.zeros(300, dtype=torch.long))
    with pytest.raises(ValueError, match="LinkNeighborLoader"):
        qv.LinkSampleLoader(temporal, None, edges, 8)
    # (a probe: AttributeError on disjoint, torch's "Could not infer dtype of NoneType" and
    # "new(): invalid data type 'str'", none naming the argument)
    for bad in (None, "s"):
        with pytest.raises(TypeError, match="sampler must be a GraphSageSampler"):
            qv.LinkSampleLoader(bad, None, edges, 8)
    for bad in (None, "x", [[1], [2, 3]]):
        with pytest.raises(TypeError, match="edge_label_index must be a .2, num_edges. tensor"):
            qv.LinkSampleLoader(sampler, None, bad, 8)
    for bad in ("abc", [[1], [2, 3]]):
        with pytest.raises(TypeError, match="edge_label must be one label per seed edge"):
            qv.LinkSampleLoader(sampler, None, edges, 8, edge_label=bad)


def test_a_sample_loader_builds_ahead_in_cpp_with_the_same_batches(mode):
    # prefetch_in_cpp=True builds the batches ahead in a C++ thread (BatchPrefetcher) rather
    # than the Prefetcher's Python one. Same batches, same order, either way, with and
    # without rows and labels, and on the epochs that follow.
    sampler, feature, table, labels = setup(mode)
    seeds = torch.arange(0, 300, 3)
    for rows, ys in [(feature, labels), (None, labels), (feature, None)]:
        native = qv.SampleLoader(sampler, rows, seeds, 16, labels=ys, prefetch_in_cpp=True)
        python = qv.SampleLoader(sampler, rows, seeds, 16, labels=ys, prefetch_in_cpp=False)
        for seed in (4, 5):
            torch.manual_seed(seed)
            built = list(native)
            torch.manual_seed(seed)
            assert same([flatten_all(b) for b in built], [flatten_all(b) for b in python])
        assert native.prefetch_in_cpp and not python.prefetch_in_cpp
        for batch in built:
            assert (batch.x is None) == (rows is None) and (batch.y is None) == (ys is None)
            if rows is not None:
                assert torch.equal(batch.x.cpu(), table[batch.n_id.cpu()])


@pytest.mark.parametrize("in_cpp", [True, False])
def test_a_prefetching_loader_tells_the_feature_store_its_pace(in_cpp):
    # Ahead of a slow model (the thread waited for room), staged gathers leave the GPU less
    # of the host rows; when the model waits for batches, it takes them back
    # (HostReadSplit::note_pace). The pace is the building thread's, whatever the device.
    num_nodes = 20000
    row, col = random_coo(num_nodes, 400000, seed=1)
    topo = qv.CSRTopo(torch.stack([row, col]), num_nodes=num_nodes)
    sampler = qv.GraphSageSampler(topo, [25, 10], device=torch.device("cpu"), mode="CPU")
    feature = qv.Feature(rank=0, device_list=[], device_cache_size="30%", csr_topo=topo)
    feature.from_cpu_tensor(torch.randn(num_nodes, 8))
    first = feature.current_host_read_share("cpu")
    slow = qv.SampleLoader(sampler, feature, torch.arange(640), 64, prefetch_in_cpp=in_cpp)
    for _ in slow:
        time.sleep(0.02)  # a model slower than the loader
    # 10 batches, 2 built ahead: at least the last 5 waited for room.
    assert feature.current_host_read_share("cpu") <= first * 0.9 ** 5 + 1e-9
    fast = qv.SampleLoader(sampler, feature, torch.arange(num_nodes), 2048,
                           prefetch_in_cpp=in_cpp)
    for _ in range(10):  # a model that takes no time waits for batches: back whole in 8
        for _ in fast:
            pass
        if feature.current_host_read_share("cpu") == pytest.approx(first):
            break
    assert feature.current_host_read_share("cpu") == pytest.approx(first)


@requires_cuda
@pytest.mark.parametrize("in_cpp", [True, False])
def test_on_a_gpu_the_loaders_pace_is_the_gpus(in_cpp):
    # The host's loop runs ahead of its stream, so on a GPU the pace is read from events:
    # a model whose GPU work outlasts the builds leaves the loader ahead however fast the
    # host asks, and a model with no GPU work waits for its batches.
    sampler, feature, _, labels = setup("GPU", num_nodes=3000, num_edges=60000)
    first = feature.current_host_read_share()
    slow = qv.SampleLoader(sampler, feature, torch.arange(160), 16, prefetch_in_cpp=in_cpp)
    assert slow.prefetch_in_cpp == in_cpp
    for _ in slow:
        torch.cuda._sleep(40_000_000)  # tens of milliseconds of GPU time, none of the host's
    torch.cuda.synchronize()
    assert feature.current_host_read_share() <= first * 0.9 ** 5 + 1e-9
    fast = qv.SampleLoader(sampler, feature, torch.arange(3000), 256, prefetch_in_cpp=in_cpp)
    for _ in range(10):
        for _ in fast:
            pass
        if feature.current_host_read_share() == pytest.approx(first):
            break
    assert feature.current_host_read_share() == pytest.approx(first)


def flatten_all(batch):
    n_id, batch_size, adjs, x, y = batch
    parts = [n_id] + [t for t in (x, y) if t is not None]
    parts += [t for adj in adjs for t in (adj.edge_index,)]
    return batch_size, [t.cpu() for t in parts]


def test_loaders_the_cpp_thread_cannot_build_are_refused(mode):
    sampler, feature, table, labels = setup(mode)
    weighted = qv.GraphSageSampler(sampler.csr_topo, [4, 3], device=device_of(mode), mode=mode,
                                   weights=torch.rand(sampler.csr_topo.edge_count))
    seeds = torch.arange(40)
    refused = [({"prefetch": 0}, "prefetch is 0"),
               ({"prefetch": 2, "workers": 2}, "workers=2"),
               ({"prefetch_sms": 8}, "prefetch_sms is given"),
               ({"sampler": weighted}, "the sampler has rules"),
               ({"feature": table}, "the feature is a Tensor, not a Feature")]
    for kwargs, why in refused:
        kwargs = {"sampler": sampler, "feature": feature, **kwargs}
        with pytest.raises(ValueError, match=f"prefetch_in_cpp=True .* here {why}"):
            qv.SampleLoader(seeds=seeds, batch_size=8, prefetch_in_cpp=True, **kwargs)
    # By default the C++ thread wherever it can build a GPU-mode sampler's batches, else
    # the Python thread, without a word.
    loader = qv.SampleLoader(sampler, feature, seeds, 8)
    assert len(list(loader)) == 5 and loader.prefetch_in_cpp == (mode == "GPU")
    assert not qv.SampleLoader(sampler, feature, seeds, 8, prefetch_in_cpp=0).prefetch_in_cpp
    for kwargs in [{"workers": 2}, {"sampler": weighted}, {"feature": table}]:
        kwargs = {"sampler": sampler, "feature": feature, **kwargs}
        assert not qv.SampleLoader(seeds=seeds, batch_size=8, **kwargs).prefetch_in_cpp
    assert not qv.SampleLoader(sampler, feature, seeds, 8, prefetch_in_cpp=False).prefetch_in_cpp


def test_the_cpp_thread_raises_in_turn_and_stops_on_early_exits(mode):
    sampler, feature, table, labels = setup(mode)
    bad = torch.cat([torch.arange(40), torch.tensor([999])])  # batch 2 holds node 999
    for in_cpp in (True, False):
        loader = qv.SampleLoader(sampler, feature, torch.arange(41), 16, labels=labels,
                                 shuffle=False, prefetch_in_cpp=in_cpp)
        loader.seeds = bad  # past the loader's own check of its seeds: a batch that fails
        taken = []
        with pytest.raises(IndexError, match="999"):
            for batch in loader:
                taken.append(batch.batch_size)
        assert taken == [16, 16]
    loader = qv.SampleLoader(sampler, feature, torch.arange(300), 4, labels=labels,
                             prefetch_in_cpp=True)
    for _ in range(3):  # leave epochs early: the thread stops, the next epoch starts afresh
        for i, _ in enumerate(loader):
            if i == 2:
                break
    assert len(list(loader)) == 75


def test_epochs_of_the_cpp_thread_are_drawn_at_iter_and_kept_apart(mode):
    # As with the Python thread: each iter() draws its epoch at once, and two epochs alive
    # at once (or one left unfinished) each get their own batches.
    sampler, feature, table, labels = setup(mode)
    seeds = torch.arange(0, 300, 3)
    outs = []
    for in_cpp in (True, False):
        loader = qv.SampleLoader(sampler, feature, seeds, 16, labels=labels,
                                 prefetch_in_cpp=in_cpp)
        torch.manual_seed(8)
        first, second = iter(loader), iter(loader)
        torch.rand(5)  # a draw between iter() and the first batch changes nothing
        a = [flatten_all(next(first))]
        b = [flatten_all(batch) for batch in second]
        a += [flatten_all(batch) for batch in first]
        left = iter(loader)
        next(left)  # left unfinished
        c = [flatten_all(batch) for batch in loader]
        outs.append((a, b, c))
    for cpp, python in zip(*outs):
        assert same(cpp, python)
    assert not same(outs[0][0], outs[0][1])


def test_no_seeds_give_no_batch_on_either_thread(mode):
    sampler, feature, table, labels = setup(mode)
    for in_cpp in (True, False):
        for drop_last in (True, False):
            loader = qv.SampleLoader(sampler, feature, torch.empty(0, dtype=torch.long), 16,
                                     labels=labels, drop_last=drop_last, prefetch_in_cpp=in_cpp)
            assert len(loader) == 0 and list(loader) == []


def test_the_cpp_thread_is_kept_from_epoch_to_epoch_unless_in_use_or_remade(mode):
    # A finished epoch's C++ prefetcher (and its side stream) serves the next one; one still
    # in use is not shared, and one made of other labels is not taken.
    sampler, feature, table, labels = setup(mode)
    loader = qv.SampleLoader(sampler, feature, torch.arange(0, 300, 3), 16, labels=labels,
                             prefetch_in_cpp=True)
    assert len(list(loader)) == 7
    kept = loader._spare_native[0]
    assert len(list(loader)) == 7 and loader._spare_native[0] is kept
    first = iter(loader)
    next(first)
    assert loader._spare_native is None
    second = iter(loader)
    assert len(list(second)) == 7 and loader._spare_native[0] is not kept
    assert len(list(first)) == 6 and loader._spare_native[0] is kept
    relabelled = (labels + 1) % 7
    loader.labels = relabelled.to(loader.device)
    built = list(loader)
    assert loader._spare_native[0] is not kept
    for batch in built:
        assert torch.equal(batch.y.cpu(), relabelled[batch.n_id[:batch.batch_size].cpu()])


@requires_cuda
@pytest.mark.parametrize("in_cpp", [True, False])
def test_epochs_reuse_the_side_streams_memory_and_follow_the_callers_stream(in_cpp):
    # Each epoch on the same side stream: the caching allocator reuses blocks only on the
    # stream that allocated them, so a stream per epoch would reserve more memory each epoch.
    sampler, feature, table, labels = setup("GPU")
    loader = qv.SampleLoader(sampler, feature, torch.arange(300), 8, labels=labels,
                             prefetch_in_cpp=in_cpp)
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    big = torch.randn(1024, 1024, device="cuda")
    reserved = []
    for _ in range(12):
        batches = iter(loader)
        for i in range(len(loader)):
            # The stream current at each next() waits for its batch, whichever it is.
            with torch.cuda.stream(streams[i % 2]):
                n_id, batch_size, adjs, x, y = next(batches)
                for _ in range(2):
                    big = (big @ big).tanh_()
                x = x * 1.0  # read on this stream after its wait
                assert torch.equal(x.cpu(), table[n_id.cpu()])
                assert torch.equal(y.cpu(), labels[n_id[:batch_size].cpu()])
            del n_id, adjs, x, y
        assert next(batches, None) is None
        torch.cuda.synchronize()
        reserved.append(torch.cuda.memory_reserved())
    assert reserved[-1] - reserved[2] < 8 * 2**20, reserved


def test_batch_prefetcher_refuses_bad_arguments():
    sampler, feature, _, labels = setup("CPU")
    sampler._ensure_placed()

    def make(labels=None, device=-1, depth=2, blocks=0, threads=0):
        return torch.classes.quiver.BatchPrefetcher(sampler._sampler, None, labels, device,
                                                    depth, blocks, threads)

    for kwargs, message in [({"depth": 0}, "depth must be >= 1, got 0"),
                            ({"device": -2}, "GPU index or -1 for the CPU, got -2"),
                            ({"device": 64}, "device=64"),
                            ({"blocks": -1}, "host_read_blocks must be >= 0, got -1"),
                            ({"threads": -3}, r"gather_threads must be in \[0, 4096\], got -3"),
                            ({"threads": 5000}, "got 5000"),
                            ({"labels": torch.tensor(1)}, "a row per node"),
                            ({"labels": torch.zeros(7)}, r"graph \(300\), got shape \[7\]")]:
        with pytest.raises(ValueError, match=message):
            make(**kwargs)
    if HAS_CUDA:
        with pytest.raises(ValueError, match="labels are on cpu, but batches are sampled on cuda"):
            make(labels=labels, device=0)
    prefetcher = make()
    assert prefetcher.next() == []  # no epoch started
    with pytest.raises(ValueError, match="2 seed batches but 1 sampling seeds"):
        prefetcher.start([torch.arange(3), torch.arange(3)], [1])
    with pytest.raises(ValueError, match=r"seed_batches\[0\] must be 1-D node ids in host"):
        prefetcher.start([torch.arange(6).view(2, 3)], [1])
    prefetcher.start([torch.arange(3), torch.arange(3, 9)], [1, 2])
    assert [len(prefetcher.next()) for _ in range(3)] == [8, 8, 0]
    # Features of fewer rows than nodes (the first batch named ids, not the features).
    few = torch.classes.quiver.FeatureTiers([torch.zeros(2, 4)], None)
    with pytest.raises(ValueError, match=r"features hold 2 rows, fewer than .* nodes \(300\)"):
        torch.classes.quiver.BatchPrefetcher(sampler._sampler, few, None, -1, 2, 0, 0)
    # Released features were taken and failed at the first batch (a probe).
    released = torch.classes.quiver.FeatureTiers([torch.zeros(300, 4)], None)
    released.release()
    with pytest.raises(ValueError, match="features were released"):
        torch.classes.quiver.BatchPrefetcher(sampler._sampler, released, None, -1, 2, 0, 0)


def run_script(script, timeout: int):
    """``script`` run by this interpreter in a process of its own, its output captured."""
    import subprocess
    import sys
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=timeout)


def test_a_batch_prefetcher_started_from_two_threads_at_once_does_not_hang(tmp_path):
    """From a probe: two threads' start() joined and replaced one worker together, and one
    of them waited forever (3 runs of 3). In a subprocess, so that a hang fails the test."""
    script = tmp_path / "two_starters.py"
    script.write_text(
        "import os, sys, threading, torch\n"
        f"sys.path.insert(0, {str(__import__('os').path.dirname(__file__))!r})\n"
        "from test_loader import setup\n"
        "sampler, _, _, _ = setup('CPU')\n"
        "sampler._ensure_placed()\n"
        "p = torch.classes.quiver.BatchPrefetcher(sampler._sampler, None, None, -1, 1, 0, 1)\n"
        "def starter():\n"
        "    for i in range(200):\n"
        "        p.start([torch.arange(4)] * 4, [0, 1, 2, 3])\n"
        "threads = [threading.Thread(target=starter, daemon=True) for _ in range(2)]\n"
        "[t.start() for t in threads]\n"
        "[t.join(timeout=60) for t in threads]\n"
        "alive = [t.is_alive() for t in threads]\n"
        "print('alive', alive, flush=True)\n"
        "os._exit(3 if any(alive) else 0)\n")
    done = run_script(script, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]


def test_a_batch_prefetcher_freed_by_python_mid_epoch_stops_without_deadlock(tmp_path):
    # Python frees the object holding its lock, and the destructor joins the thread; the
    # seeds Python made must not be released by that thread (that takes the same lock).
    # Here the thread waits for room when the object goes: it must stop, and the process
    # exit cleanly. In a subprocess, so that a deadlock fails the test instead of hanging.
    script = tmp_path / "freed.py"
    script.write_text(
        "import gc, sys, torch\n"
        f"sys.path.insert(0, {str(__import__('os').path.dirname(__file__))!r})\n"
        "from test_loader import setup\n"
        "sampler, _, _, labels = setup('CPU')\n"
        "sampler._ensure_placed()\n"
        "for _ in range(20):\n"
        "    p = torch.classes.quiver.BatchPrefetcher(sampler._sampler, None, labels, -1, 1,"
        " 0, 0)\n"
        "    p.start([torch.arange(i, i + 4) for i in range(0, 200, 4)], list(range(50)))\n"
        "    assert len(p.next()) == 8\n"
        "    del p\n"
        "    gc.collect()\n"
        "q = torch.classes.quiver.BatchPrefetcher(sampler._sampler, None, None, -1, 1, 0, 0)\n"
        "q.start([torch.arange(4) for _ in range(30)], list(range(30)))\n"
        "print('done')\n")  # q is still building when the interpreter exits
    done = run_script(script, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr[-2000:]


# Each alone: in one process together the Python threads' aborts did not show.
@pytest.mark.parametrize("left_open", ["python_thread", "two_workers", "cpp_thread,prefetcher"])
def test_an_epoch_left_unfinished_at_exit_does_not_abort_the_process(tmp_path, left_open):
    # Builder threads still inside torch while the interpreter finalized aborted the process
    # ("terminate called without an active exception", status 134, each of the first two
    # every time; found by a probe): the loaders' epochs left mid-way are now stopped at exit.
    script = tmp_path / "unfinished.py"
    script.write_text(
        "import sys, torch\n"
        "import torch_quiver_ops as qv\n"
        f"sys.path.insert(0, {str(__import__('os').path.dirname(__file__))!r})\n"
        "from test_loader import setup\n"
        "sampler, feature, _, labels = setup('CPU')\n"
        "seeds = torch.arange(300)\n"
        "def matmuls():\n"
        "    a = torch.randn(300, 300)\n"
        "    while True:\n"
        "        yield a @ a\n"
        "epochs = {\n"
        "    'python_thread': lambda: qv.SampleLoader(sampler, feature, seeds, 8, labels=labels,\n"
        "                                             prefetch=2),\n"
        "    'two_workers': lambda: qv.SampleLoader(sampler, feature, seeds, 8, prefetch=4,\n"
        "                                           workers=2),\n"
        "    'cpp_thread': lambda: qv.SampleLoader(sampler, feature, seeds, 8, prefetch=2,\n"
        "                                          prefetch_in_cpp=True),\n"
        "    'prefetcher': lambda: qv.Prefetcher(matmuls(), torch.device('cpu'))}\n"
        f"left = [iter(epochs[name]()) for name in {left_open.split(',')!r}]\n"
        "for epoch in left:\n"
        "    next(epoch)\n"
        "print('done')\n")
    done = run_script(script, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr[-2000:]


def test_a_compiled_model_takes_every_batch_without_recompiling(mode):
    """examples/train_sage.py's GraphSAGE under torch.compile(dynamic=True), over the loader's
    batches, whose sizes change every batch: traced once (twice at most: sizes equal in the
    first batch share a symbol until they differ), the eager model's outputs, a backward
    through it; what `scripts/bench_e2e.py --compile-model` and `train_sage.py --compile`
    run."""
    from torch._dynamo.testing import CompileCounter

    example = load_example("train_sage")
    sampler, feature, _, labels = setup(mode)
    device = device_of(mode)
    torch.manual_seed(0)
    model = example.SAGE(5, 8, 7, 2).to(device).eval()  # eval: no dropout, outputs compare
    torch._dynamo.reset()
    counter = CompileCounter()  # runs each traced graph eagerly and counts the traces
    compiled = torch.compile(model, dynamic=True, backend=counter)
    loader = qv.SampleLoader(sampler, feature, torch.arange(0, 300, 3), 16, labels=labels,
                             prefetch=2)
    sizes, traces = set(), []
    for _, batch_size, adjs, x, y in loader:
        out = compiled(x, adjs)
        torch.testing.assert_close(out, model(x, adjs))
        torch.nn.functional.cross_entropy(out, y).backward()
        sizes.add((batch_size, x.size(0)))
        traces.append(counter.frame_count)
    assert len(traces) == 7 and len(sizes) >= 5  # 100 seeds in batches of 16
    assert traces[0] >= 1 and traces[-1] <= traces[0] + 1, traces
    assert all(p.grad is not None for p in model.parameters())


def test_a_seed_mask_must_cover_every_node():
    """A mask of 2 entries over 2,000 nodes trained on node 1 alone, silently."""
    topo = qv.CSRTopo(torch.stack(random_coo(2000, 8000, seed=0)), num_nodes=2000)
    sampler = qv.GraphSageSampler(topo, [2], device="cpu", mode="CPU")
    x = torch.randn(2000, 4)
    with pytest.raises(ValueError, match=r"one bool per node \(2000\)"):
        qv.SampleLoader(sampler, x, torch.tensor([False, True]), 5)
    mask = torch.zeros(2000, dtype=torch.bool)
    mask[[3, 7]] = True
    loader = qv.SampleLoader(sampler, x, mask, 5, shuffle=False)
    seen = [int(n) for n_id, batch_size, *_ in loader for n in n_id[:batch_size]]
    assert sorted(seen) == [3, 7]


def test_own_stream_is_a_bool():
    """Checked as every other flag is: a TypeError, with 0 and 1 taken as False and True."""
    sampler, feature, _, _ = setup("CPU")
    assert qv.SampleLoader(sampler, feature, torch.arange(10), 4, own_stream=0).own_stream is False
    with pytest.raises(TypeError, match="own_stream must be True or False, got 2"):
        qv.SampleLoader(sampler, feature, torch.arange(10), 4, own_stream=2)
    with pytest.raises(TypeError, match="own_stream must be True or False, got 'no'"):
        qv.Prefetcher([], "cpu", own_stream="no")
    loader = qv.SampleLoader(sampler, feature, torch.arange(10), 4)
    assert loader.own_stream is True
    with pytest.raises(TypeError, match="own_stream must be True or False, got None"):
        loader.own_stream = None
    loader.own_stream = False
    assert loader.own_stream is False


@requires_cuda
@pytest.mark.parametrize("in_cpp", [False, True])
def test_a_prefetching_loop_runs_its_steps_on_the_loaders_own_stream(in_cpp):
    # Iterated from the default stream, the steps run on a stream of the loader's own (the
    # same one every epoch); the default stream is current again after the loop, a break
    # or an error, and has waited for the steps' work.
    sampler, feature, table, labels = setup("GPU", num_nodes=3000, num_edges=40000)
    device = torch.device("cuda", 0)
    default = torch.cuda.default_stream(device)
    loader = qv.SampleLoader(sampler, feature, torch.arange(2990), 256, labels=labels,
                             prefetch=2, prefetch_in_cpp=in_cpp)
    assert torch.cuda.current_stream(device) == default
    seen = set()
    sums = []
    for n_id, batch_size, _, x, _ in loader:
        current = torch.cuda.current_stream(device)
        assert current != default
        seen.add(current)
        torch.cuda._sleep(2_000_000)  # the step's work, still queued when the loop ends
        sums.append(x[:batch_size].sum(dim=0))  # the seeds' rows: each seed once an epoch
    assert torch.cuda.current_stream(device) == default
    # read on the default stream without a sync: it waited for the steps' stream
    assert torch.allclose(torch.stack(sums).sum(dim=0).cpu(), table[:2990].sum(dim=0),
                          rtol=1e-4, atol=1e-3)
    for n_id, _, _, x, _ in loader:  # the same stream next epoch
        seen.add(torch.cuda.current_stream(device))
        break
    assert len(seen) == 1
    assert torch.cuda.current_stream(device) == default
    with pytest.raises(RuntimeError, match="a step failed"):
        for _ in loader:
            raise RuntimeError("a step failed")
    assert torch.cuda.current_stream(device) == default
    # A caller on a stream of its own keeps it; own_stream=False keeps the default one.
    side = torch.cuda.Stream(device)
    with torch.cuda.stream(side):
        for _ in loader:
            assert torch.cuda.current_stream(device) == side
    loader.own_stream = False
    for _ in loader:
        assert torch.cuda.current_stream(device) == default
    torch.cuda.synchronize()


@requires_cuda
def test_batches_on_the_loaders_own_stream_equal_serial_ones():
    # The rows each step reads on the loader's stream are the batch's; work queued on the
    # default stream before the loop is done before the first step reads it, and work the
    # steps queue is done before the default stream reads it after the loop. Nothing in
    # the loop waits on the host, so only the streams' ordering makes the results right.
    sampler, feature, table, labels = setup("GPU", num_nodes=3000, num_edges=40000)
    seeds = torch.arange(0, 3000, 3)
    serial = qv.SampleLoader(sampler, feature, seeds, 64, labels=labels, prefetch=0)
    ahead = qv.SampleLoader(sampler, feature, seeds, 64, labels=labels, prefetch=2)
    torch.manual_seed(11)
    first = epoch(serial)
    device = torch.device("cuda", 0)
    before = torch.zeros(1, device=device)
    torch.cuda._sleep(50_000_000)  # the default stream busy, then the write the steps read
    before += 7
    torch.manual_seed(11)
    batches, steps, seen = [], [], []
    for batch in ahead:
        seen.append(before * 1)  # queued on the loader's stream: after the write above
        torch.cuda._sleep(1_000_000)  # the step's kernels lag the host
        steps.append(batch.x * 2 + 1)
        batches.append(batch)
    # read on the default stream, no sync asked for: ordered after the steps' stream
    assert all(int(v) == 7 for v in seen)
    assert same(first, [flatten(b) for b in batches])
    for (_, parts), doubled in zip(first, steps):
        assert torch.equal(doubled.cpu(), parts[1] * 2 + 1)


@requires_cuda
def test_every_loader_steps_on_one_stream_of_the_greatest_priority():
    sampler, feature, _, labels = setup("GPU", num_nodes=3000, num_edges=40000)
    device = torch.device("cuda", 0)
    streams = set()
    for in_cpp in (False, True):
        loader = qv.SampleLoader(sampler, feature, torch.arange(600), 128, labels=labels,
                                 prefetch=2, prefetch_in_cpp=in_cpp)
        for _ in loader:
            streams.add(torch.cuda.current_stream(device))
    assert len(streams) == 1
    (stream,) = streams
    assert stream.priority == torch.cuda.Stream.priority_range()[1]
    torch.cuda.synchronize()


def test_a_ctrl_c_in_a_dropped_epochs_cleanup_reaches_the_program(monkeypatch):
    """An epoch left unfinished is stopped when its generator is collected; a Ctrl-C that
    lands in that cleanup was "ignored" by Python, and the program trained on as if it never
    came (found when the examples' Ctrl-C test hung under CI's load). The cleanup finishes
    and the Ctrl-C reaches the main thread."""
    import gc
    import signal
    from torch_quiver_ops import loader as loader_module
    real = loader_module._builds_stopped
    landed = []

    def interrupted_once(token):  # where the Ctrl-C lands: inside the generator's cleanup
        if not landed:
            landed.append(token)
            raise KeyboardInterrupt
        real(token)

    monkeypatch.setattr(loader_module, "_builds_stopped", interrupted_once)
    # Python's own Ctrl-C handler, as a terminal's program has it (SIGINT starts ignored
    # under a shell's background job, and then no Ctrl-C reaches Python at all).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    # No collection in between: the handed-back Ctrl-C landing in another object's
    # finalizer (a CI run's gc.collect() met one of torch's) would be ignored in its turn.
    gc.collect()
    gc.disable()
    try:
        batches = iter(qv.Prefetcher(Counting(50), "cpu", depth=2))
        next(batches)
        with pytest.raises(KeyboardInterrupt):
            del batches  # the last reference: the generator is finalized here
            for _ in range(1000):  # the handed-back Ctrl-C arrives between bytecodes
                time.sleep(0.001)
    finally:
        gc.enable()
        signal.signal(signal.SIGINT, previous)
    assert landed
    deadline = time.monotonic() + 10
    while any(t.name.startswith("quiver-prefetch") for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the dropped epoch's producer still runs"
        time.sleep(0.01)
    assert not loader_module._RUNNING_BUILDS


def test_sizes_past_int64_and_labels_that_are_no_tensor_are_named():
    """From a probe: batch_size 2**63 failed at the first batch in torch's split, prefetch
    2**63 in the C++ thread's binding, and labels="abc" in torch.as_tensor, none of them
    naming the argument."""
    sampler, feature, table, labels = setup("CPU")
    seeds = torch.arange(0, 300, 7)
    whole = list(qv.SampleLoader(sampler, feature, seeds, 2 ** 63, labels=labels, prefetch=0))
    assert len(whole) == 1 and whole[0].batch_size == seeds.numel()
    assert list(qv.SampleLoader(sampler, feature, seeds, 2 ** 63, drop_last=True)) == []
    with pytest.raises(ValueError, match=r"depth \(a loader's prefetch\) must be an int >= 0 "
                                         r"and < 2\*\*63, got 9223372036854775808"):
        qv.SampleLoader(sampler, feature, seeds, 8, prefetch=2 ** 63)
    with pytest.raises(TypeError, match="labels must be a tensor .* got str"):
        qv.SampleLoader(sampler, feature, seeds, 8, labels="abc")
    # A feature that cannot be indexed by rows was taken, then failed at the first batch;
    # a Prefetcher over no iterable failed at iter() (a probe).
    for bad, words in ((torch.tensor(1.0), "got Tensor of 0 dimensions"), (5, "got int"),
                       ("abc", "got str"),
                       (table.tolist(), r"got list \(pass torch.as_tensor\(rows\)\)")):
        with pytest.raises(TypeError, match=f"feature must be a Feature, a tensor of rows or "
                                            f"anything indexable by node ids, {words}"):
            qv.SampleLoader(sampler, bad, seeds, 8)

    class Rows:  # what the docstring promises: anything indexable by node ids
        def __getitem__(self, ids):
            return table[ids]

    batch = next(iter(qv.SampleLoader(sampler, Rows(), seeds, 8, prefetch=0)))
    assert torch.equal(batch.x, table[batch.n_id])
    with pytest.raises(TypeError, match="loader must be an iterable of batches, got int"):
        qv.Prefetcher(5, device="cpu")


def test_loaders_copy_and_pickle_and_give_the_same_batches():
    """A loader could not be deep-copied or pickled at all: threading.local, which holds
    each building thread's generator, refused (a probe). A copy makes its own."""
    import copy
    import pickle
    edge_index = torch.randint(30, (2, 100), generator=torch.Generator().manual_seed(0))
    sampler = qv.GraphSageSampler(qv.CSRTopo(edge_index, num_nodes=30), [3, 2], mode="CPU")
    feature = qv.Feature(rank=0, device_list=[]).from_cpu_tensor(torch.randn(30, 4))
    loader = qv.SampleLoader(sampler, feature, torch.arange(30), 4, labels=torch.arange(30),
                             generator=torch.Generator().manual_seed(1))
    list(loader)  # after an epoch, too
    for copied in (copy.deepcopy(loader), pickle.loads(pickle.dumps(loader))):
        loader.generator.manual_seed(3)
        copied.generator.manual_seed(3)
        ours, theirs = list(loader), list(copied)
        assert len(ours) == len(theirs) == 8
        for a, b in zip(ours, theirs):
            assert torch.equal(a.n_id, b.n_id) and torch.equal(a.x, b.x) and torch.equal(a.y, b.y)
    links = qv.LinkSampleLoader(sampler, None, edge_index[:, :20], 4)
    assert len(list(copy.deepcopy(links))) == len(list(pickle.loads(pickle.dumps(links)))) == 5
    # A shallow copy iterated the original (its Prefetcher's epochs were the original's):
    # what is set on the copy was ignored, and len() disagreed with the batches (a probe).
    shallow = copy.copy(loader)
    shallow.batch_size, shallow.feature = 10, None
    batches = list(shallow)
    assert len(shallow) == len(batches) == 3 and [b.batch_size for b in batches] == [10, 10, 10]
    assert all(b.x is None for b in batches) and all(b.x is not None for b in loader)
    assert len(list(copy.copy(links))) == 5
    # (its Prefetcher had been deep-copied, and the Feature its pace reports to with it:
    # the whole table copied, and the pace sent to a store nothing read: a review)
    shallow = copy.copy(loader)
    assert shallow._prefetcher.pace.func.__self__ is loader.feature
    # After a GPU epoch the Python prefetcher holds its side streams and the C++ one its
    # thread: a copy makes its own.
    for in_cpp in ([False, True] if HAS_CUDA else []):
        on_gpu = qv.SampleLoader(qv.GraphSageSampler(sampler.csr_topo, [3, 2], mode="UVA"),
                                 feature, torch.arange(30), 4, prefetch_in_cpp=in_cpp)
        first = list(on_gpu)
        for copied in (copy.deepcopy(on_gpu), pickle.loads(pickle.dumps(on_gpu))):
            assert [b.n_id.numel() > 0 for b in copied] == [True] * len(first)
    if HAS_CUDA:
        with pytest.raises(TypeError, match="given a stream or sms .* cannot be copied"):
            copy.deepcopy(qv.Prefetcher(first, "cuda", stream=torch.cuda.Stream()))


def test_a_cpp_prefetched_epoch_left_open_at_exit_exits_quietly(tmp_path):
    """An epoch of the C++ thread still open as the interpreter exits: the exit hook stops
    it, and the epoch's own stop, run again as its generator closed during shutdown, printed
    an ImportError ("sys.meta_path is None") (a probe)."""
    script = tmp_path / "open_epoch.py"
    script.write_text(
        "import torch, torch_quiver_ops as qv\n"
        "ei = torch.randint(0, 200, (2, 2000), generator=torch.Generator().manual_seed(0))\n"
        "sampler = qv.GraphSageSampler(qv.CSRTopo(ei), [3, 2], device='cpu')\n"
        "feature = qv.Feature(device_list=[]).from_cpu_tensor(torch.randn(200, 4))\n"
        "def train(batch):\n"
        "    pass\n"
        "loader = qv.SampleLoader(sampler, feature, torch.arange(200), 16, prefetch=2,\n"
        "                         prefetch_in_cpp=True)\n"
        "it = iter(loader)\n"
        "train(next(it))\n")
    done = run_script(script, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr


def test_a_prefetchers_device_and_stream_are_named():
    """From a probe: device='bogus' raised torch's device-string error and stream=object()
    an AttributeError on 'stream_id'."""
    with pytest.raises(ValueError, match="device must be a torch.device, .* got 'bogus'"):
        qv.Prefetcher([], device="bogus")
    with pytest.raises(TypeError, match=r"stream must be a torch.cuda.Stream \(or torch.Stream\) "
                                        r"or None, got object"):
        qv.Prefetcher([], device="cpu", stream=object())
    if HAS_CUDA:  # a plain torch.Stream (a green context's) is taken, as before
        qv.Prefetcher([], device="cuda", stream=torch.Stream(device="cuda"))
