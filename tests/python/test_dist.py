"""Distributed features (torch_quiver_ops.dist): the shard map, the partitioning step, and
DistFeature over real process groups: Gloo on loopback with 2 to 4 processes as hosts,
two hosts in separate network namespaces joined by veth under torchrun --nnodes 2, and
(on the GPU machine) NCCL between GPUs. Every gather is checked against x[ids]."""
import contextlib
import importlib.util
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import traceback
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from multiprocessing.reduction import ForkingPickler

import torch_quiver_ops as qv
from conftest import HAS_CUDA, run_script_cases, spawn_workers, worker_process
from torch_quiver_ops.synthetic import synthetic_graph

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def table(rows=600, width=6, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, width, generator=gen) * 10).to(dtype)


# ---- the shard map ----

@pytest.mark.parametrize("num_hosts", [1, 2, 3, 5])
@pytest.mark.parametrize("fraction", [0.0, 0.2, 1.0])
def test_shard_map_places_every_row_once(num_hosts, fraction):
    n = 97
    hot = torch.randperm(n, generator=torch.Generator().manual_seed(num_hosts))
    shard_map = qv.dist.build_shard_map(n, num_hosts, hot, fraction)
    host_of, local = shard_map.host_of(), shard_map.local_index()
    replicated = int(round(fraction * n))
    assert shard_map.num_replicated() == replicated
    assert torch.equal(torch.sort(hot[:replicated]).values,
                       torch.nonzero(host_of == -1).flatten())
    assert torch.equal(local[hot[:replicated]], torch.arange(replicated))  # hot order
    sizes = [shard_map.local_rows(h) - replicated for h in range(num_hosts)]
    assert sum(sizes) == n - replicated and max(sizes) - min(sizes) <= 1  # balanced ranges
    for h in range(num_hosts):
        ids = shard_map.local_ids(h)
        assert ids.numel() == shard_map.local_rows(h)
        assert torch.equal(ids[:replicated], hot[:replicated])
        own = ids[replicated:]
        assert torch.all(host_of[own] == h) and torch.equal(local[own], torch.arange(replicated, ids.numel()))
        if own.numel() > 1:  # contiguous range of ids, in hot order within the host
            assert int(own.max() - own.min()) < n
            rank = torch.empty(n, dtype=torch.long)
            rank[hot] = torch.arange(n)
            assert torch.all(rank[own][1:] > rank[own][:-1])
    owner, where = shard_map.locate(torch.tensor([0, n - 1], dtype=torch.int32))
    assert owner.tolist() == host_of[[0, n - 1]].tolist() and where.tolist() == local[[0, n - 1]].tolist()


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_shard_map_locates_many_ids_as_its_tables_say(dtype):
    n = 5000
    shard_map = qv.dist.build_shard_map(n, 3, torch.randperm(n), 0.2)
    ids = torch.randint(n, (70_000,), dtype=dtype)  # several parallel tasks
    owner, where = shard_map.locate(ids)
    assert owner.dtype == where.dtype == torch.long
    assert torch.equal(owner, shard_map.host_of()[ids.long()].long())
    assert torch.equal(where, shard_map.local_index()[ids.long()].long())
    ids[40_000] = -3
    with pytest.raises(IndexError, match=r"ids\[40000\] = -3 is out of range"):
        shard_map.locate(ids)


def two_tables_worker(rank, world, port, results, lanes):
    """Two DistFeatures over one Gloo world, used as a loader does: one table fetched on its
    own thread (gather_async) while the other is gathered, then both from two threads of
    their own at once; a fetch waited on by four threads; the small Python faces."""
    import threading
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=60))
    with reported(results, rank):
        n = 900
        shard_map = qv.dist.build_shard_map(n, world, None, 0.1)
        x, y = table(n, 8, seed=1), table(n, 2, seed=2)

        def dist_feature(rows):
            local = qv.Feature(device_list=[]).from_cpu_tensor(rows[shard_map.local_ids(rank)])
            return qv.dist.DistFeature(shard_map, local, transport="gloo", timeout=20.0,
                                       lanes=lanes)

        before = set(qv.dist._LANES)
        fx, fy = dist_feature(x), dist_feature(y)
        # Each table's transport got the lanes asked for, set up (one lane is its own group
        # alone): rows that came right over fewer lanes would pass everything below.
        made = [len(kept) for key, kept in qv.dist._LANES.items()
                if key not in before and key[1] == "features"]
        assert made == ([lanes, lanes] if lanes > 1 else []), made
        gen = torch.Generator().manual_seed(rank)
        for step in range(15):
            ids = torch.randint(n, (int(torch.randint(1, 300, (1,), generator=gen)),),
                                generator=gen)
            work = fx.gather_async(ids)
            if step % 3 == 0:  # at once, with no limit
                assert torch.equal(work.wait(), x[ids])
                continue
            assert torch.equal(fy[ids], y[ids])
            assert torch.equal(work.wait(30.0), x[ids])
        failures = []

        def gather_often(feature, rows, seed):
            try:
                g = torch.Generator().manual_seed(seed)
                for _ in range(15):
                    ids = torch.randint(n, (200,), generator=g)
                    assert torch.equal(feature[ids], rows[ids])
            except Exception as error:  # noqa: BLE001
                failures.append(repr(error))

        threads = [threading.Thread(target=gather_often, args=(fx, x, 10 + rank)),
                   threading.Thread(target=gather_often, args=(fy, y, 20 + rank))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not failures, failures
        # One fetch, four waiters: one takes the rows, the others are told so.
        ids = torch.randint(n, (100,), generator=gen)
        work, taken = fx.gather_async(ids), []

        def wait_for_it():
            try:
                taken.append(work.wait(30.0))
            except RuntimeError as error:
                taken.append(str(error))

        waiters = [threading.Thread(target=wait_for_it) for _ in range(4)]
        for t in waiters:
            t.start()
        for t in waiters:
            t.join()
        rows = [t for t in taken if isinstance(t, torch.Tensor)]
        assert len(rows) == 1 and torch.equal(rows[0], x[ids]), taken
        assert all("already taken" in t for t in taken if isinstance(t, str)), taken
        assert work.done()
        assert fx[[]].shape == (0, 8)  # an empty list is no ids (every host, in step)
        with pytest.raises(ValueError, match=r"unknown \['qps_per_peerr'\]"):
            qv.dist.DistFeature(shard_map, fx.local, transport="gloo", rdma={"qps_per_peerr": 2})
        # One host's bad option is told to the other, which raises at once naming it
        # (it had waited out the timeout in the transport's own exchange).
        bad = {"qps_per_peer": "2"} if rank == 0 else None
        started = time.monotonic()
        with pytest.raises(ValueError, match="rdma option qps_per_peer must be an int"):
            qv.dist.DistFeature(shard_map, fx.local, transport="gloo", rdma=bad, timeout=20)
        assert time.monotonic() - started < 15
        # Tables of one map, dtype and shape built in different orders were paired with
        # each other's rows, silently (found by a probe): names tell them apart at once.
        z = table(n, 8, seed=3)
        local_z = qv.Feature(device_list=[]).from_cpu_tensor(z[shard_map.local_ids(rank)])
        first = ("x", fx.local) if rank == 0 else ("z", local_z)
        with pytest.raises(ValueError, match="host 0 name 'x', host 1 name 'z': every host "
                                             "must build its DistFeatures in the same order"):
            qv.dist.DistFeature(shard_map, first[1], transport="gloo", name=first[0])
        with pytest.raises(ValueError, match="name must be a str or None, got 3"):
            qv.dist.DistFeature(shard_map, local_z, transport="gloo", name=3)
        # Rows of no bytes are refused on every host; the message had given the shape of
        # no row ([0, 0]) for the table (a probe).
        empty = qv.Feature(device_list=[]).from_cpu_tensor(
            torch.empty(shard_map.local_rows(rank), 0))
        with pytest.raises(ValueError, match=rf"its table's rows hold no bytes "
                                             rf"\({shard_map.local_rows(rank)} rows of shape "
                                             rf"\[0\]\)"):
            qv.dist.DistFeature(shard_map, empty, transport="gloo", name="empty")
        fz = qv.dist.DistFeature(shard_map, local_z, transport="gloo", name="z", lanes=lanes)
        ids = torch.randint(n, (200,), generator=torch.Generator().manual_seed(5))
        assert torch.equal(fz[ids], z[ids]) and fz.name == "z"
        fz.close()
        fx.close()
        assert "transport=closed" in repr(fx)
        fy.close()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("lanes", [1, 4])
def test_two_tables_fetched_side_by_side_over_gloo(tmp_path, lanes):
    spawn_workers(two_tables_worker, args=(2, free_port(), str(tmp_path), lanes), nprocs=2)
    seen = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert seen == {"ok_0": "ok", "ok_1": "ok"}, seen


def test_a_shard_map_keeps_its_own_copy_of_its_tensors():
    """The map checks its rows once: a later write to the tensors it was built from, or to
    those it hands out, must not reach it (an owner out of range would be read unchecked)."""
    host_of = torch.tensor([0, 1, -1, 1], dtype=torch.int32)
    local_index = torch.tensor([1, 1, 0, 2])
    shard_map = torch.classes.quiver.ShardMap(host_of, local_index, 2)
    host_of.fill_(7)
    local_index.fill_(-5)
    shard_map.host_of().fill_(9)
    state = shard_map.__getstate__()[0]  # (a probe's writes to these crashed a fetch)
    state[0].fill_(7)
    state[1].fill_(-5)
    owner, where = shard_map.locate(torch.arange(4))
    assert owner.tolist() == [0, 1, -1, 1] and where.tolist() == [1, 1, 0, 2]
    # Hosts are checked as given: as int32 first, 2**32 was host 0.
    with pytest.raises(ValueError, match=r"host_of holds host 4294967296, outside \[-1, 2\)"):
        torch.classes.quiver.ShardMap(torch.tensor([2**32, 0]), torch.tensor([0, 0]), 2)
    # ... and uint64 ones past int64: 2**64 - 1 had become host -1, a replicated row (a probe).
    with pytest.raises(ValueError, match=r"host_of holds 18446744073709551615, past int64"):
        torch.classes.quiver.ShardMap(torch.tensor([2**64 - 1, 0], dtype=torch.uint64),
                                      torch.tensor([0, 1]), 1)
    # Meta tensors had met torch's "Cannot copy out of meta tensor" (a probe).
    meta = torch.zeros(3, dtype=torch.long, device="meta")
    with pytest.raises(ValueError, match="host_of is on the meta device, which holds no data"):
        torch.classes.quiver.ShardMap(meta, torch.arange(3), 1)
    with pytest.raises(ValueError, match="hot_order is on the meta device"):
        torch.classes.quiver.ShardMap.build(meta, 1, 0, None)


def test_shard_map_follows_an_assignment_and_rejects_bad_input():
    assignment = torch.tensor([2, 0, 1, 2, 0, 1])
    shard_map = qv.dist.build_shard_map(6, 3, replicate_fraction=0.0, assignment=assignment)
    assert torch.equal(shard_map.host_of(), assignment.int())
    with pytest.raises(IndexError, match=r"ids\[1\] = 6 is out of range \[0, 6\)"):
        shard_map.locate(torch.tensor([0, 6]))
    with pytest.raises(ValueError, match="assignment holds host 3"):
        qv.dist.build_shard_map(6, 3, replicate_fraction=0.0, assignment=assignment + 1)
    with pytest.raises(ValueError, match="not a permutation"):
        qv.dist.build_shard_map(3, 2, torch.tensor([0, 0, 1]))
    with pytest.raises(ValueError, match="replicate_fraction"):
        qv.dist.build_shard_map(3, 2, replicate_fraction=1.5)
    # A short order used to leave the last row on no host (an IndexError later, as an id).
    with pytest.raises(ValueError, match="hot_order.*10"):
        qv.dist.build_shard_map(10, 2, torch.arange(9))
    for bad, match in [(dict(num_hosts=2.0), "num_hosts must be an int"),
                       (dict(num_hosts=True), "num_hosts must be an int"),
                       (dict(num_hosts=0), "num_hosts must be an int >= 1"),
                       (dict(replicate_fraction="20%"), "replicate_fraction must be a number"),
                       (dict(num_rows=-1), "num_rows must be an int >= 0")]:
        args = {"num_rows": 10, "num_hosts": 2, **bad}
        with pytest.raises(ValueError, match=match):
            qv.dist.build_shard_map(**args)
    host_of = shard_map.host_of()
    with pytest.raises(ValueError, match="host_of holds host 7"):
        torch.classes.quiver.ShardMap(host_of.clone().fill_(7), shard_map.local_index(), 3)
    local = shard_map.local_index().clone()
    local[0] = local[3]  # two rows of host 2 in one slot
    with pytest.raises(ValueError, match="names a row of some host twice"):
        torch.classes.quiver.ShardMap(host_of, local, 3)
    local[0] = 99
    with pytest.raises(ValueError, match=r"local_index\[0\] = 99 is outside host 2's rows"):
        torch.classes.quiver.ShardMap(host_of, local, 3)


class Locate(torch.nn.Module):
    def __init__(self, shard_map):
        super().__init__()
        self.shard_map = shard_map

    def forward(self, ids: torch.Tensor):
        return self.shard_map.locate(ids)


def test_shard_map_in_a_saved_scripted_module(tmp_path):
    shard_map = qv.dist.build_shard_map(50, 3, torch.randperm(50), 0.2)
    torch.jit.script(Locate(shard_map)).save(str(tmp_path / "locate.pt"))
    loaded = torch.jit.load(str(tmp_path / "locate.pt"))
    ids = torch.arange(50)
    for a, b in zip(loaded(ids), shard_map.locate(ids)):
        assert torch.equal(a, b)
    assert loaded.shard_map.fingerprint() == shard_map.fingerprint()


def assert_shards_hold_the_rows(directory, x, hosts):
    """Each host's shard under ``directory`` holds exactly the rows of ``x`` its shard map
    says it holds, in its local order (a shard map alone says nothing of the rows)."""
    shard_map = qv.dist.load_shard_map(directory, verify=True)
    for h in range(hosts):
        local = qv.Feature.load_shared(Path(directory) / f"host_{h}", device_list=[])
        assert torch.equal(local[torch.arange(len(local))], x[shard_map.local_ids(h)]), h
    return shard_map


def test_partition_writes_checked_shards(tmp_path):
    x = table(300)
    qv.dist.partition_features(x, tmp_path, 3, torch.randperm(300), 0.2)
    assert_shards_hold_the_rows(tmp_path, x, 3)
    shard = tmp_path / "host_1" / "rows.bin"
    data = bytearray(shard.read_bytes())
    data[7] ^= 0xFF  # same size, one flipped byte
    shard.write_bytes(bytes(data))
    from torch_quiver_ops import _sharing
    with pytest.raises(ValueError, match="does not match the checksum"):
        _sharing.map_arrays(tmp_path / "host_1", "feature", verify=True)
    os.truncate(shard, 100)
    with pytest.raises(ValueError, match="truncated"):
        qv.Feature.load_shared(tmp_path / "host_1")


def test_a_table_with_nans_is_partitioned(tmp_path):
    """A NaN (a missing feature) is unequal to itself: the read-back check refused every
    table that held one, after writing part of the partition (a probe)."""
    x = table(40)
    x[3, 1] = float("nan")
    qv.dist.partition_features(x, tmp_path, 2)
    shard_map = qv.dist.load_shard_map(tmp_path, verify=True)
    for h in range(2):
        local = qv.Feature.load_shared(tmp_path / f"host_{h}", device_list=[])
        assert torch.equal(local[torch.arange(len(local))].isnan(),
                           x[shard_map.local_ids(h)].isnan())


def test_a_shard_map_whose_metadata_is_corrupt_is_named(tmp_path):
    """From a probe: num_hosts of 2**70 or true, and float host_of/local_index, raised
    torch's binding error or a bare TypeError, naming no file (or blamed host 1)."""
    qv.dist.partition_features(table(10), tmp_path, 2)
    meta_path = tmp_path / "shard_map" / "shard_map.json"
    good = meta_path.read_text()
    for edit, words in ((lambda m: m.update(num_hosts=2 ** 70), "names 1180591620717411303424 hosts"),
                        (lambda m: m.update(num_hosts=True), "names no host count"),
                        (lambda m: m["arrays"]["local_index"].update(dtype="float64"),
                         r"\(local_index.bin\) holds torch.float64, not integer ids")):
        meta = json.loads(good)
        edit(meta)
        meta_path.write_text(json.dumps(meta))
        with pytest.raises(ValueError, match=f"shard_map.* {words}"):
            qv.dist.load_shard_map(tmp_path)
    meta_path.write_text(good)
    assert qv.dist.load_shard_map(tmp_path).num_hosts() == 2


def test_a_host_folder_left_from_another_partitioning_is_refused(tmp_path, monkeypatch):
    # Two partitionings of one table by different hot orders give every host as many rows:
    # a host folder of the first beside the second's shard map would serve wrong rows.
    x = table(300)
    first, second = tmp_path / "first", tmp_path / "second"
    qv.dist.partition_features(x, first, 2, torch.randperm(300), 0.2)
    qv.dist.partition_features(x, second, 2, torch.randperm(300), 0.2)
    shutil.rmtree(second / "host_1")
    shutil.copytree(first / "host_1", second / "host_1")
    monkeypatch.setattr(qv.dist.dist, "get_rank", lambda group: 1)
    monkeypatch.setattr(qv.dist.dist, "get_world_size", lambda group: 2)
    with pytest.raises(ValueError, match="host_1 was not cut for host 1 of this shard map"):
        qv.dist.DistFeature.load(second, group=object(), device_list=[])
    # Nor is a folder cut for another host of the same map.
    shutil.rmtree(second / "host_1")
    shutil.copytree(second / "host_0", second / "host_1")
    with pytest.raises(ValueError, match="names fingerprint .*, host 0"):
        qv.dist.DistFeature.load(second, group=object(), device_list=[])
    # Nor one of another run with the same hot order (the same fingerprint): a re-run over
    # another table that stopped part-way left the new host_0 beside the old host_1.
    order = torch.randperm(300)
    qv.dist.partition_features(x, first, 2, order, 0.2)
    qv.dist.partition_features(table(300, seed=1), second, 2, order, 0.2)
    shutil.rmtree(second / "host_1")
    shutil.copytree(first / "host_1", second / "host_1")
    with pytest.raises(ValueError, match="left from another partitioning .*run"):
        qv.dist.DistFeature.load(second, group=object(), device_list=[])
    # A map cut for 2 hosts loaded by 3 is named on every host (one lacked its folder and
    # the others waited for it).
    monkeypatch.setattr(qv.dist.dist, "get_world_size", lambda group: 3)
    with pytest.raises(ValueError, match="cut for 2 hosts, but the process group has 3"):
        qv.dist.DistFeature.load(first, group=object(), device_list=[])


@contextlib.contextmanager
def reported(results, rank):
    """Runs a worker's body: writes ok_<rank> if it finishes, else error_<rank> with the
    error (the parent reads what each process saw); then leaves the process group."""
    try:
        yield
        (Path(results) / f"ok_{rank}").write_text("ok")
    except Exception as error:  # noqa: BLE001
        where = traceback.extract_tb(error.__traceback__)[-1]  # a bare assert says nothing
        (Path(results) / f"error_{rank}").write_text(
            f"{type(error).__name__}: {error}" + ("" if str(error) else
                                                  f" (at {Path(where.filename).name}:"
                                                  f"{where.lineno}: {where.line})"))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


# ---- DistFeature over Gloo, processes as hosts ----

def gloo_worker(rank, world, port, base, results, die_rank):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=60))
    with reported(results, rank):
        for config in sorted(Path(base).iterdir()):
            x = torch.load(config / "x.pt")
            feature = qv.dist.DistFeature.load(config, device_list=[], timeout=10.0)
            if rank == die_rank:
                os._exit(0)  # gone without a word, mid-run: peers must name it, not hang
            gen = torch.Generator().manual_seed(rank)
            for step in range(3):
                ids = torch.randint(x.size(0), (int(torch.randint(1, 400, (1,), generator=gen)),),
                                    generator=gen)
                out = feature[ids.int() if step == 1 else ids]
                assert out.dtype == x.dtype and torch.equal(out, x[ids]), (config.name, step)
            ids = torch.empty(0, dtype=torch.long) if rank == 0 else torch.arange(x.size(0))
            assert torch.equal(feature[ids], x[ids])  # an empty batch still takes part
            ids = torch.randint(x.size(0), (250,), generator=gen)
            work = feature.gather_async(ids)
            # No limit (infinity) on one host, 30 s on the other.
            assert torch.equal(work.wait(math.inf if rank == 0 else 30.0), x[ids])
            with pytest.raises(IndexError, match="out of range"):
                feature[torch.tensor([x.size(0)])]  # checked before any exchange
            # A table replaced under the store that serves it is refused: every host had
            # gone on reading the old rows, this one's too (a probe). Closed, it may go.
            local_rows = feature.local.table.clone()
            with pytest.raises(RuntimeError, match="served to other hosts by DistFeature"):
                feature.local.from_cpu_tensor(local_rows + 1)
            feature.close()
            with pytest.raises(RuntimeError, match="was closed"):
                feature[ids]
            feature.local.from_cpu_tensor(local_rows + 1)


def run_hosts(world, configs, tmp_path, die_rank=-1):
    base, results = tmp_path / "configs", tmp_path / "results"
    base.mkdir()
    results.mkdir()
    for name, (x, fraction) in configs.items():
        qv.dist.partition_features(x, base / name, world, torch.randperm(x.size(0)), fraction)
        torch.save(x, base / name / "x.pt")
    spawn_workers(gloo_worker, args=(world, free_port(), str(base), str(results), die_rank),
                  nprocs=world)
    return {p.name: p.read_text() for p in results.iterdir()}


@pytest.mark.timeout(600)
def test_two_hosts_every_fraction_and_dtype(tmp_path):
    configs = {f"{str(dtype)[6:]}_{fraction}": (table(500, 4, dtype, seed=len(str(dtype))), fraction)
               for dtype in DTYPES for fraction in (0.0, 0.2, 1.0)}
    seen = run_hosts(2, configs, tmp_path)
    assert seen == {"ok_0": "ok", "ok_1": "ok"}, seen


@pytest.mark.timeout(600)
@pytest.mark.parametrize("world", [3, 4])
def test_more_hosts(tmp_path, world):
    seen = run_hosts(world, {"f32": (table(700, 3), 0.2)}, tmp_path)
    assert seen == {f"ok_{r}": "ok" for r in range(world)}, seen


@pytest.mark.timeout(600)
def test_gloo_lanes_move_rows_smaller_than_a_verdict(tmp_path):
    # 2-byte rows: each peer's answer leads with 4 header rows, which travel whole on lane 0.
    # Host 1's fetch of every row takes about 1.1M rows (2.1 MB) from each peer: 4 parts
    # over 4 lanes (a block travels in parts of 512 KiB or more); the small fetches, whole.
    seen = run_hosts(3, {"f16": (table(4_000_000, 1, torch.float16), 0.2)}, tmp_path)
    assert seen == {f"ok_{r}": "ok" for r in range(3)}, seen


@pytest.mark.timeout(600)
def test_a_host_with_an_empty_shard_still_serves_and_fetches(tmp_path):
    # 2 rows over 3 hosts, none replicated: host 2 holds nothing and is asked for nothing.
    seen = run_hosts(3, {"tiny": (table(2, 3), 0.0)}, tmp_path)
    assert seen == {f"ok_{r}": "ok" for r in range(3)}, seen


@pytest.mark.timeout(600)
def test_a_peer_that_dies_is_named_by_every_survivor(tmp_path):
    seen = run_hosts(3, {"f32": (table(300, 3), 0.2)}, tmp_path, die_rank=2)
    assert set(seen) == {"error_0", "error_1"}, seen
    for message in seen.values():
        assert "RuntimeError" in message and "host 2 has stopped answering" in message, message
        assert "frame #" not in message, message  # Gloo's error without its C++ frames


def mismatched_worker(rank, port, results, lanes, backend="gloo"):
    """Hosts whose shard maps disagree (each built its own): both must refuse at
    construction, naming the other host, before any fetch could ask a peer for rows outside
    its table; a transport made over the same group afterwards still works."""
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=2, device_id=device)
    else:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=2, timeout=timedelta(seconds=60))
    feature = transport = None
    try:
        n = 100
        # Host 0 believes it owns rows 0-29, host 1 believes host 0 owns rows 0-69.
        owners = torch.where(torch.arange(n) < (30 if rank == 0 else 70), 0, 1)
        shard_map = qv.dist.build_shard_map(n, 2, None, 0.0, owners)
        rows = shard_map.local_rows(rank)
        table = (torch.arange(rows * 4, dtype=torch.float32).view(rows, 4) + 1000 * rank)
        groups = [dist.new_group([0, 1], backend="gloo") for _ in range(lanes)]
        transport = torch.classes.quiver.Transport.collective(
            dist.group.WORLD.boxed(), 20.0, [g.boxed() for g in groups])
        began = time.monotonic()
        try:
            torch.classes.quiver.DistFeature(
                shard_map, torch.classes.quiver.FeatureTiers([table.to(device)], None), transport)
            raise AssertionError("hosts with different shard maps connected")
        except ValueError as error:
            message = str(error)
        assert time.monotonic() - began < 10, "the refusal waited for a timeout"
        assert "shard map differs from that of hosts [" + str(1 - rank) + "]" in message, message
        # The same hosts with one map work over the same transport.
        shard_map = qv.dist.build_shard_map(n, 2, None, 0.0, torch.arange(n) % 2)
        x = torch.arange(n * 4, dtype=torch.float32).view(n, 4)
        local = x[shard_map.local_ids(rank)].to(device)
        feature = torch.classes.quiver.DistFeature(
            shard_map, torch.classes.quiver.FeatureTiers([local], None), transport)
        assert torch.equal(feature.gather(torch.arange(n, device=device)).cpu(), x)
        (Path(results) / f"ok_{rank}").write_text(message)
    except Exception as error:  # noqa: BLE001
        where = traceback.extract_tb(error.__traceback__)[-1]  # a bare assert says nothing
        (Path(results) / f"error_{rank}").write_text(
            f"{type(error).__name__}: {error}" + ("" if str(error) else
                                                  f" (at {Path(where.filename).name}:"
                                                  f"{where.lineno}: {where.line})"))
    finally:
        feature = transport = None
        if dist.is_initialized():
            dist.destroy_process_group()


def absent_host_worker(rank, port, results):
    """Host 1 does not come to the lanes' setup: host 0 is told so within its timeout."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2, timeout=timedelta(seconds=60))
    with reported(results, rank):
        if rank == 1:
            time.sleep(4)
            return
        started = time.monotonic()
        with pytest.raises(RuntimeError, match=r"connecting lane 0 for features among hosts "
                                               r"\[0, 1\] failed within 1.5 s: a host did not "
                                               r"come"):
            qv.dist._gloo_lanes(dist.group.WORLD, 2, 1.5)
        assert time.monotonic() - started < 4


@pytest.mark.timeout(120)
def test_a_host_absent_from_the_lanes_setup_is_said_to_be(tmp_path):
    # It was the store's bare "wait timeout after 1500ms, keys: /default_pg/..." (a probe).
    spawn_workers(absent_host_worker, args=(free_port(), str(tmp_path)), nprocs=2)
    seen = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert set(seen) == {"ok_0", "ok_1"}, seen


def stale_copy_worker(rank, port, base, results):
    """Ids that cannot be read (None) on one host: it still takes its turn, so the steps
    after stay paired; then each host loads its own copy of the folder, host 1's from
    another run of the same shape: both refuse at once, naming the runs."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2, timeout=timedelta(seconds=60))
    with reported(results, rank):
        x = torch.load(Path(base) / "a" / "x.pt")
        feature = qv.dist.DistFeature.load(Path(base) / "a", device_list=[], timeout=10.0)
        # (a meta tensor and a slice named no ids in torch's own errors: from a probe)
        for unreadable, words in ((None, "ids must be integer ids"),
                                  (slice(0, 3), "ids must be integer ids"),
                                  (torch.empty(3, dtype=torch.long, device="meta"),
                                   "ids are a meta tensor")):
            if rank == 0:
                with pytest.raises(TypeError, match=words):
                    feature[unreadable]
            else:
                assert torch.equal(feature[torch.arange(7)], x[:7])
        for step in range(2):
            ids = torch.arange(step, x.size(0), 3 + rank)
            assert torch.equal(feature[ids], x[ids]), step
        feature.close()
        began = time.monotonic()
        with pytest.raises(ValueError, match="different partition_features runs"):
            qv.dist.DistFeature.load(Path(base) / ("a" if rank == 0 else "b"), device_list=[],
                                     timeout=20.0)
        assert time.monotonic() - began < 10, "the refusal waited for the timeout"


@pytest.mark.timeout(300)
def test_unreadable_ids_keep_the_hosts_in_step_and_stale_copies_are_refused(tmp_path):
    base, results = tmp_path / "base", tmp_path / "results"
    results.mkdir()
    order = torch.randperm(200)
    for name, seed in (("a", 0), ("b", 1)):
        x = table(200, seed=seed)
        qv.dist.partition_features(x, base / name, 2, order, 0.2)
        torch.save(x, base / name / "x.pt")
    spawn_workers(stale_copy_worker, args=(free_port(), str(base), str(results)), nprocs=2)
    seen = {p.name: p.read_text() for p in results.iterdir()}
    assert set(seen) == {"ok_0", "ok_1"}, seen


@pytest.mark.timeout(300)
@pytest.mark.parametrize("lanes", [0, 3])  # rows over the group itself, or over 3 lanes
def test_hosts_with_different_shard_maps_refuse_on_both_sides(tmp_path, lanes):
    spawn_workers(mismatched_worker, args=(free_port(), str(tmp_path), lanes), nprocs=2)
    seen = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert set(seen) == {"ok_0", "ok_1"}, seen


def test_lanes_must_be_a_positive_count():
    for lanes in (0, -1, 2.0, 65, 10_000):
        with pytest.raises(ValueError, match=r"lanes must be an int in \[1, 64\]"):
            qv.dist.DistFeature(None, None, transport="gloo", lanes=lanes)
    # (torch's own error said that the group "world" was not initialized: from a probe)
    with pytest.raises(ValueError, match="group must be a torch.distributed ProcessGroup or "
                                         "None .*got 'world'"):
        qv.dist.DistFeature(None, None, group="world", transport="gloo")


def test_a_lane_that_is_the_main_group_or_another_lane_is_refused():
    """From a probe: Transport.collective took its own group as a lane, and one group as
    two lanes, whose exchanges then share a group with others posted at once."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        world = dist.group.WORLD
        with pytest.raises(ValueError, match=r"lanes\[0\] is the main group itself"):
            torch.classes.quiver.Transport.collective(world.boxed(), 5.0, [world.boxed()])
        lane = dist.new_group([0], backend="gloo")
        with pytest.raises(ValueError, match=r"lanes\[0\] and lanes\[1\] are one group"):
            torch.classes.quiver.Transport.collective(world.boxed(), 5.0,
                                                      [lane.boxed(), lane.boxed()])
        other = dist.new_group([0], backend="gloo")
        transport = torch.classes.quiver.Transport.collective(world.boxed(), 5.0,
                                                              [lane.boxed(), other.boxed()])
        assert transport.kind() == "collective:gloo"
    finally:
        dist.destroy_process_group()


def test_a_corrupt_shard_map_names_its_files_and_a_huge_one_its_size(tmp_path):
    """From a probe: a flipped byte of local_index.bin was named as the map's own problem
    without its folder, and 2**62 rows as torch's storage size overflow."""
    from torch_quiver_ops import preflight
    qv.dist.partition_features(table(100), tmp_path, 2, torch.randperm(100), 0.2)
    index = tmp_path / "shard_map" / "local_index.bin"
    data = bytearray(index.read_bytes())
    data[0] ^= 0x01
    index.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"shard_map \(host_of.bin, local_index.bin\) is no "
                                         r"valid shard map: local_index names a row"):
        qv.dist.load_shard_map(tmp_path)
    with pytest.raises(preflight.ResourceLimitError, match="a shard map of num_rows="):
        qv.dist.build_shard_map(2**62, 2)


class HoldsDistFeature(torch.nn.Module):
    def __init__(self, feature, width):
        super().__init__()
        self.feature = feature  # torch.classes.quiver.DistFeature
        self.lin = torch.nn.Linear(width, 3)

    def forward(self, ids):
        return self.lin(self.feature.gather(ids))


def export_worker(rank, world, port, directory, results):
    """Each host exports a model holding its DistFeature (traced with the fake class, no
    exchange) and runs the exported program, whose gathers then fetch from the peer."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=60))
    try:
        x = torch.load(Path(directory) / "x.pt")
        feature = qv.dist.DistFeature.load(directory, device_list=[], timeout=20.0)
        torch.manual_seed(0)  # the same weights on both hosts
        model = HoldsDistFeature(feature._runtime, x.size(1))
        count = torch.export.Dim("count", min=1, max=1 << 20)
        program = torch.export.export(model, (torch.tensor([0, 1, 2]),), strict=False,
                                      dynamic_shapes=({0: count},))
        assert any("call_torchbind" in str(n.target) for n in program.graph.nodes)
        exported = program.module()
        gen = torch.Generator().manual_seed(rank)
        with torch.no_grad():
            for size in (1, 57, 300):
                ids = torch.randint(x.size(0), (size,), generator=gen)
                torch.testing.assert_close(exported(ids), model.lin(x[ids]))
        (Path(results) / f"ok_{rank}").write_text("ok")
    except Exception as error:  # noqa: BLE001
        where = traceback.extract_tb(error.__traceback__)[-1]  # a bare assert says nothing
        (Path(results) / f"error_{rank}").write_text(
            f"{type(error).__name__}: {error}" + ("" if str(error) else
                                                  f" (at {Path(where.filename).name}:"
                                                  f"{where.lineno}: {where.line})"))
    finally:
        feature = model = program = exported = None
        if dist.is_initialized():
            dist.destroy_process_group()


def run_on_a_split_table(worker, tmp_path, nprocs, *args):
    """Splits a 400 x 5 table over two hosts (20% replicated), runs
    worker(rank, *args, parts, results) in `nprocs` processes, and returns what each wrote."""
    x = table(400, 5)
    parts, results = tmp_path / "parts", tmp_path / "results"
    qv.dist.partition_features(x, parts, 2, torch.randperm(400), 0.2)
    torch.save(x, parts / "x.pt")
    results.mkdir()
    spawn_workers(worker, args=(*args, str(parts), str(results)), nprocs=nprocs)
    return {p.name: p.read_text() for p in results.iterdir()}


@pytest.mark.timeout(600)
def test_exported_model_holding_a_dist_feature_gathers_across_hosts(tmp_path):
    seen = run_on_a_split_table(export_worker, tmp_path, 2, 2, free_port())
    assert seen == {"ok_0": "ok", "ok_1": "ok"}, seen


def host_group_worker(rank, port, directory, results):
    """Two nodes of two processes each (as torchrun --nproc-per-node 2 would start them):
    local rank r's processes form one group of hosts, each with its own Gloo lanes."""
    os.environ["LOCAL_WORLD_SIZE"] = "2"
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=4, timeout=timedelta(seconds=60))
    with reported(results, rank):
        group = qv.dist.host_groups()
        assert dist.get_process_group_ranks(group) == [rank % 2, rank % 2 + 2]
        x = torch.load(Path(directory) / "x.pt")
        feature = qv.dist.DistFeature.load(directory, group=group, device_list=[], timeout=20.0)
        for seed in range(3):
            ids = torch.randint(x.size(0), (300,), generator=torch.Generator().manual_seed(seed))
            assert torch.equal(feature[ids], x[ids])
        feature.close()


@pytest.mark.parametrize("local", ["3", "0", "-1", "abc"])
def test_host_groups_name_a_local_world_size_that_cannot_be(monkeypatch, local):
    """Checked before any group is made: 3 used to fail inside pybind, 0 and -1 to give
    no group (so DistFeature fell back to the whole world)."""
    monkeypatch.setenv("LOCAL_WORLD_SIZE", local)
    monkeypatch.setattr(qv.dist.dist, "get_world_size", lambda *a: 2)
    with pytest.raises(ValueError, match=f"LOCAL_WORLD_SIZE='{local}'.*WORLD_SIZE=2"):
        qv.dist.host_groups()


@pytest.mark.timeout(300)
def test_groups_of_hosts_each_with_their_own_lanes(tmp_path):
    seen = run_on_a_split_table(host_group_worker, tmp_path, 4, free_port())
    assert seen == {f"ok_{r}": "ok" for r in range(4)}, seen


# ---- two hosts in separate network namespaces, torchrun --nnodes 2 ----

NETNS_WORKER = textwrap.dedent('''
    import os, sys, torch, torch.distributed as dist
    import torch_quiver_ops as qv
    directory = sys.argv[1]
    dist.init_process_group("gloo")
    group = qv.dist.host_groups()
    x = torch.load(os.path.join(directory, "x.pt"))
    feature = qv.dist.DistFeature.load(directory, group=group, device_list=[], timeout=20.0)
    for seed in range(3):
        ids = torch.randint(x.size(0), (300,), generator=torch.Generator().manual_seed(seed))
        assert torch.equal(feature[ids], x[ids])
    print(f"host {dist.get_rank(group)} of {dist.get_world_size(group)} on node "
          f"{os.environ['GROUP_RANK']} gathered from every shard", flush=True)
    dist.destroy_process_group()
''')


def netns_usable() -> bool:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return False
    probe = subprocess.run(["ip", "netns", "add", "quiver-probe"], capture_output=True)
    subprocess.run(["ip", "netns", "del", "quiver-probe"], capture_output=True)
    return probe.returncode == 0


def run_in_namespaces(script: Path, *args) -> list:
    """``script ARGS`` under torchrun on two hosts, each in its own network namespace
    (scripts/netns_hosts.sh: its own eth0 on a bridge): the processes' outputs, after
    checking that both exited cleanly."""
    netns = Path(__file__).resolve().parents[2] / "scripts" / "netns_hosts.sh"
    names = subprocess.run(["bash", str(netns), "up", "2"], capture_output=True, text=True,
                           check=True).stdout.split()
    try:
        port = free_port()
        # Gloo finds its interface from the hostname, which no namespace resolves: name it.
        env = {**os.environ, "GLOO_SOCKET_IFNAME": "eth0"}
        runs = [subprocess.Popen(
            ["ip", "netns", "exec", name, sys.executable, "-m", "torch.distributed.run",
             "--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", "1",
             "--master-addr", "10.77.0.1", "--master-port", str(port), str(script),
             *map(str, args)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
            for node, name in enumerate(names)]
        try:
            outputs = [run.communicate(timeout=180)[0] for run in runs]
        finally:
            for run in runs:
                run.kill()
    finally:
        subprocess.run(["bash", str(netns), "down", "2"], capture_output=True)
    for run, output in zip(runs, outputs):
        assert run.returncode == 0, output[-3000:]
    return outputs


@pytest.mark.timeout(600)
@pytest.mark.skipif(not netns_usable(), reason="needs root and `ip netns` (network namespaces)")
def test_two_hosts_in_network_namespaces(tmp_path):
    directory = tmp_path / "features"
    x = table(400, 5)
    qv.dist.partition_features(x, directory, 2, torch.randperm(400), 0.2)
    torch.save(x, directory / "x.pt")
    (tmp_path / "worker.py").write_text(NETNS_WORKER)
    outputs = run_in_namespaces(tmp_path / "worker.py", directory)
    assert sum("gathered from every shard" in o for o in outputs) == 2, outputs


# ---- NCCL between GPUs (the GPU machine) ----

def nccl_worker(rank, world, port, directory, results):
    """Gathers over NCCL, which takes the slotted fetch: the first gather overflows the
    empty slots and is fetched again; larger batches grow the slots, smaller shrink them;
    a bad id raises on its host only, and the hosts stay in step after it."""
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, device_id=torch.device("cuda", rank))
    with reported(results, rank):
        x = torch.load(Path(directory) / "x.pt")
        feature = qv.dist.DistFeature.load(directory, rank=rank, device_list=[rank],
                                           device_cache_size=x[0].nbytes * 50, timeout=30.0)
        assert feature.transport.kind() == "collective:nccl"
        gen = torch.Generator().manual_seed(rank)
        sizes = [3000, 3000, 40000, 200, 1, 5000]
        for step, size in enumerate(sizes):
            ids = torch.randint(x.size(0), (size,), generator=gen)
            out = feature[(ids.int() if step == 1 else ids).cuda()]
            assert out.device == torch.device("cuda", rank), step
            assert torch.equal(out.cpu(), x[ids]), step
        ids = torch.empty(0, dtype=torch.long) if rank == 0 else torch.arange(x.size(0))
        assert torch.equal(feature[ids.cuda()].cpu(), x[ids])  # an empty batch takes part
        # A bad id raises on its host after the fetch, which every host completes.
        ids = torch.randint(x.size(0), (700,), generator=gen)
        if rank == 0:
            ids[123] = x.size(0) + 5
            with pytest.raises(IndexError, match=r"ids\[123\] = .* out of range"):
                feature[ids.cuda()]
        else:
            assert torch.equal(feature[ids.cuda()].cpu(), x[ids])
        ids = torch.randint(x.size(0), (2500,), generator=gen)
        assert torch.equal(feature[ids.cuda()].cpu(), x[ids])  # still in step
        work = feature.gather_async(ids.cuda())
        assert torch.equal(work.wait(60.0).cpu(), x[ids])
        dist.barrier()


# Each NCCL test both ways the transport drives NCCL: its own communicator ("1": required,
# so a silent fall back would fail the test) and c10d's all-to-all ("0").
NCCL_WAYS = pytest.mark.parametrize("direct", ["1", "0"], ids=["direct", "c10d"])


@pytest.mark.timeout(600)
@pytest.mark.parametrize("world", [2, 3, 4])  # one GPU per host
@NCCL_WAYS
def test_nccl_between_gpus(tmp_path, monkeypatch, direct, world):
    if not HAS_CUDA or torch.cuda.device_count() < world:
        pytest.skip(f"needs {world} GPUs")
    monkeypatch.setenv("QUIVER_NCCL_DIRECT", direct)
    x = table(50000, 16, torch.bfloat16)
    results = tmp_path / "results"
    results.mkdir()
    qv.dist.partition_features(x, tmp_path, world, torch.randperm(x.size(0)), 0.2)
    torch.save(x, tmp_path / "x.pt")
    spawn_workers(nccl_worker, args=(world, free_port(), str(tmp_path), str(results)), nprocs=world)
    seen = {p.name: p.read_text() for p in results.iterdir()}
    assert seen == {f"ok_{r}": "ok" for r in range(world)}, seen


@pytest.mark.timeout(300)
@pytest.mark.skipif(not HAS_CUDA or torch.cuda.device_count() < 2, reason="needs two GPUs")
@NCCL_WAYS
def test_nccl_hosts_with_different_shard_maps_refuse_on_both_sides(tmp_path, monkeypatch,
                                                                    direct):
    monkeypatch.setenv("QUIVER_NCCL_DIRECT", direct)
    spawn_workers(mismatched_worker, args=(free_port(), str(tmp_path), 0, "nccl"), nprocs=2)
    seen = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert set(seen) == {"ok_0", "ok_1"}, seen


def run_two_nccl_processes(worker, tmp_path, patience):
    """Two hosts over a small split table, as processes of their own that may exit hard
    (os._exit): those that are still running after `patience` seconds are killed. Returns
    what each wrote into the results folder."""
    x = table(2000, 8)
    results = tmp_path / "results"
    results.mkdir()
    qv.dist.partition_features(x, tmp_path, 2, torch.randperm(x.size(0)), 0.2)
    torch.save(x, tmp_path / "x.pt")
    port = free_port()
    procs = [worker_process(worker, r, port, str(tmp_path), str(results))
             for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(patience)
        if p.is_alive():
            p.kill()
    return {p.name: p.read_text() for p in results.iterdir()}


def nccl_dying_worker(rank, port, directory, results):
    """Host 1 leaves after the first gather; host 0's next gather must raise naming it
    within the timeout (its NCCL kernels then wait forever: the process exits hard)."""
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2, device_id=torch.device("cuda", rank))
    x = torch.load(Path(directory) / "x.pt")
    feature = qv.dist.DistFeature.load(directory, rank=rank, device_list=[rank], timeout=8.0)
    ids = torch.randint(x.size(0), (300,), generator=torch.Generator().manual_seed(rank))
    assert torch.equal(feature[ids.cuda()].cpu(), x[ids])
    torch.cuda.synchronize()
    if rank == 1:
        os._exit(0)
    try:
        for _ in range(3):
            feature[ids.cuda()]
        (Path(results) / "returned_0").write_text("a gather without its peer returned")
    except Exception as error:  # noqa: BLE001
        (Path(results) / "error_0").write_text(f"{type(error).__name__}: {error}")
    os._exit(0)


@pytest.mark.timeout(300)
@pytest.mark.skipif(not HAS_CUDA or torch.cuda.device_count() < 2, reason="needs two GPUs")
@NCCL_WAYS
def test_nccl_peer_that_dies_is_named(tmp_path, monkeypatch, direct):
    monkeypatch.setenv("QUIVER_NCCL_DIRECT", direct)
    seen = run_two_nccl_processes(nccl_dying_worker, tmp_path, patience=240)
    assert set(seen) == {"error_0"}, seen
    assert "RuntimeError" in seen["error_0"] and "host 1" in seen["error_0"], seen


def nccl_late_worker(rank, port, directory, results):
    """Host 0 reaches its first gather after host 1 gave up waiting for it: host 1 raises
    in the communicator's set-up, and host 0, finding host 1's side of the agreement there,
    must not wait forever for host 1 to join the communicator."""
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2, device_id=torch.device("cuda", rank))
    x = torch.load(Path(directory) / "x.pt")
    feature = qv.dist.DistFeature.load(directory, rank=rank, device_list=[rank], timeout=4.0)
    if rank == 0:
        time.sleep(7)
    try:
        feature[torch.arange(100).cuda()]
        (Path(results) / f"returned_{rank}").write_text("returned")
    except Exception as error:  # noqa: BLE001
        where = traceback.extract_tb(error.__traceback__)[-1]  # a bare assert says nothing
        (Path(results) / f"error_{rank}").write_text(
            f"{type(error).__name__}: {error}" + ("" if str(error) else
                                                  f" (at {Path(where.filename).name}:"
                                                  f"{where.lineno}: {where.line})"))
    os._exit(0)  # host 0's abandoned join may still be waiting inside NCCL


@pytest.mark.timeout(300)
@pytest.mark.skipif(not HAS_CUDA or torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_nccl_host_late_to_the_communicator_raises_on_both(tmp_path, monkeypatch):
    monkeypatch.setenv("QUIVER_NCCL_DIRECT", "1")
    seen = run_two_nccl_processes(nccl_late_worker, tmp_path, patience=120)
    assert set(seen) == {"error_0", "error_1"}, seen
    assert "set-up" in seen["error_1"], seen
    assert "set-up" in seen["error_0"] and "did not join" in seen["error_0"], seen


# ---- RDMA (one-sided reads; runs where a device exists: scripts/rdma_vm.sh) ----

def rdma_worker(rank, world, port, directory, results):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    try:
        x = torch.load(Path(directory) / "x.pt")
        feature = qv.dist.DistFeature.load(directory, device_list=[], timeout=60.0,
                                           rdma={"qps_per_peer": 2, "staging_bytes": 1 << 16})
        assert feature.transport.kind().startswith("rdma:"), feature.transport.kind()
        # the device it opened is one the host lists (what the device option may name)
        assert feature.transport.kind()[len("rdma:"):] in \
            torch.classes.quiver.Transport.rdma_devices()
        for seed in range(2):
            ids = torch.randint(x.size(0), (700,), generator=torch.Generator().manual_seed(seed + rank))
            assert torch.equal(feature[ids], x[ids])
        # One-sided: a host reads while its peer does nothing at all.
        if rank == 0:
            ids = torch.arange(x.size(0))
            assert torch.equal(feature[ids], x[ids])
        dist.barrier()
        # A served table is not replaced (its peers had read the old rows, unsaid).
        with pytest.raises(RuntimeError, match="served to other hosts by DistFeature"):
            feature.local.from_cpu_tensor(feature.local.table.clone())
        # close() waits for this host's own fetch in flight before the hosts let go of
        # their tables: the fetch had waited out the timeout, then blamed the live peer.
        remote = feature.shard_map.local_ids(1 - rank).repeat(100)
        pending = feature.gather_async(remote) if rank == 0 else None
        feature.close()
        if pending is not None:
            assert torch.equal(pending.wait(30), x[remote])
        (Path(results) / f"ok_{rank}").write_text("ok")
    except Exception as error:  # noqa: BLE001
        where = traceback.extract_tb(error.__traceback__)[-1]  # a bare assert says nothing
        (Path(results) / f"error_{rank}").write_text(
            f"{type(error).__name__}: {error}" + ("" if str(error) else
                                                  f" (at {Path(where.filename).name}:"
                                                  f"{where.lineno}: {where.line})"))
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(900)
@pytest.mark.skipif(not torch.classes.quiver.Transport.rdma_available(),
                    reason="no RDMA device here; scripts/rdma_vm.sh runs this over soft-RoCE")
def test_rdma_between_hosts(tmp_path):
    directory, results = tmp_path / "features", tmp_path / "results"
    results.mkdir()
    x = table(800, 6, torch.bfloat16)
    qv.dist.partition_features(x, directory, 2, torch.randperm(800), 0.2)
    torch.save(x, directory / "x.pt")
    spawn_workers(rdma_worker, args=(2, free_port(), str(directory), str(results)), nprocs=2)
    seen = {p.name: p.read_text() for p in results.iterdir()}
    assert seen == {"ok_0": "ok", "ok_1": "ok"}, seen


def rdma_edges_worker(rank, world, port, base, results):
    """The RDMA transport with its default buffers, over the batches that need no remote
    row (empty, all local, everything replicated) and after this host's table moved in
    memory (pickling a Feature for worker processes runs share_memory_ on it)."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=300))
    with reported(results, rank):
        for config in sorted(Path(base).iterdir()):
            x = torch.load(config / "x.pt")
            shard_map = qv.dist.load_shard_map(config)
            local = qv.Feature(device_list=[])  # in private memory, as a user's own table
            local.from_cpu_tensor(x[shard_map.local_ids(rank)].clone())
            feature = qv.dist.DistFeature(shard_map, local, timeout=120.0)
            assert feature.transport.kind().startswith("rdma:"), feature.transport.kind()
            none = torch.empty(0, dtype=torch.long)
            for ids in (none, shard_map.local_ids(rank), none, shard_map.local_ids(rank)[:3]):
                out = feature[ids]
                assert out.shape == (ids.numel(), x.size(1)) and torch.equal(out, x[ids])
            ids = torch.randint(x.size(0), (5000,), generator=torch.Generator().manual_seed(rank))
            assert torch.equal(feature[ids], x[ids])
            dist.barrier()
            with pytest.warns(UserWarning, match="moving the feature table into shared memory"):
                ForkingPickler.dumps(local)  # moves the table the transport serves
            dist.barrier()
            assert torch.equal(feature[ids], x[ids]), f"{config.name}: wrong rows after a move"
            dist.barrier()
            feature.close()


@pytest.mark.timeout(1200)
@pytest.mark.skipif(not torch.classes.quiver.Transport.rdma_available(),
                    reason="no RDMA device here; scripts/rdma_vm.sh runs this over soft-RoCE")
def test_rdma_empty_local_and_moved_tables(tmp_path):
    base, results = tmp_path / "configs", tmp_path / "results"
    results.mkdir()
    for name, rows, fraction in (("split", 3000, 0.2), ("replicated", 300, 1.0),
                                 ("small", 256, 0.0)):  # small: 16 KiB, on malloc's heap
        x = table(rows, 16, seed=rows)
        qv.dist.partition_features(x, base / name, 2, torch.randperm(rows), fraction)
        torch.save(x, base / name / "x.pt")
    spawn_workers(rdma_edges_worker, args=(2, free_port(), str(base), str(results)), nprocs=2)
    seen = {p.name: p.read_text() for p in results.iterdir()}
    assert seen == {"ok_0": "ok", "ok_1": "ok"}, seen


def rdma_mismatch_worker(rank, world, port, results):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=300))
    with reported(results, rank):
        shard_map = qv.dist.build_shard_map(200, 2, None, 0.0)
        x = table(200, 4)
        local = qv.Feature(device_list=[])
        local.from_cpu_tensor((x.int() if rank == 1 else x)[shard_map.local_ids(rank)].clone())
        with pytest.raises((ValueError, RuntimeError), match="Int|int32"):
            qv.dist.DistFeature(shard_map, local, transport="rdma", timeout=60.0)
        # From a probe over soft-RoCE: a GID slot that is empty on host 1 left host 0 waiting
        # out its timeout, naming no cause; GIDs of two kinds (IPv4 and link-local) failed
        # as "moving a queue pair to RTR failed (Invalid argument)" on both.
        local.from_cpu_tensor(x[shard_map.local_ids(rank)].clone())
        began = time.monotonic()
        with pytest.raises((ValueError, RuntimeError),
                           match="gid_index 200 of rxe0 port 1 holds no GID"):
            qv.dist.DistFeature(shard_map, local, transport="rdma", timeout=60.0,
                                rdma={"gid_index": (-1, 200)[rank]})
        assert time.monotonic() - began < 30, "host 0 waited out the timeout"
        ipv4 = int(os.environ.get("RXE_GID_INDEX", "1"))
        with pytest.raises(ValueError, match="give every host a gid_index of one kind"):
            qv.dist.DistFeature(shard_map, local, transport="rdma", timeout=60.0,
                                rdma={"gid_index": (ipv4, 0)[rank]})
        feature = qv.dist.DistFeature(shard_map, local, transport="rdma", timeout=60.0)
        assert torch.equal(feature[torch.arange(200)], x)
        feature.close()


@pytest.mark.timeout(900)
@pytest.mark.skipif(not torch.classes.quiver.Transport.rdma_available(),
                    reason="no RDMA device here; scripts/rdma_vm.sh runs this over soft-RoCE")
def test_rdma_hosts_with_another_dtype_refuse(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    spawn_workers(rdma_mismatch_worker, args=(2, free_port(), str(results)), nprocs=2)
    seen = {p.name: p.read_text() for p in results.iterdir()}
    assert seen == {"ok_0": "ok", "ok_1": "ok"}, seen


def rdma_killed_worker(rank, port, directory, results):
    """Host 1 dies after connecting; host 0's next fetch, larger than its queue pairs take
    at once (default buffers), must raise naming host 1 within the timeout."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2, timeout=timedelta(seconds=300))
    x = torch.load(Path(directory) / "x.pt")
    feature = qv.dist.DistFeature.load(directory, device_list=[], timeout=20.0)
    ids = torch.randint(x.size(0), (500,), generator=torch.Generator().manual_seed(rank))
    assert torch.equal(feature[ids], x[ids])
    dist.barrier()
    if rank == 1:
        os._exit(0)
    time.sleep(1)
    began = time.monotonic()
    try:
        feature[torch.arange(x.size(0)).repeat(4)]
        (Path(results) / "returned_0").write_text("a fetch from a dead peer returned")
    except Exception as error:  # noqa: BLE001
        took = time.monotonic() - began
        (Path(results) / "error_0").write_text(f"{took:.1f} {type(error).__name__}: {error}")
    os._exit(0)


@pytest.mark.timeout(900)
@pytest.mark.skipif(not torch.classes.quiver.Transport.rdma_available(),
                    reason="no RDMA device here; scripts/rdma_vm.sh runs this over soft-RoCE")
def test_rdma_killed_peer_with_default_buffers(tmp_path):
    directory, results = tmp_path / "features", tmp_path / "results"
    results.mkdir()
    x = table(6000, 8)
    qv.dist.partition_features(x, directory, 2, torch.randperm(6000), 0.0)
    torch.save(x, directory / "x.pt")
    port = free_port()
    procs = [worker_process(rdma_killed_worker, r, port, str(directory), str(results))
             for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(600)
        if p.is_alive():
            p.kill()
    seen = {p.name: p.read_text() for p in results.iterdir()}
    assert set(seen) == {"error_0"}, seen
    took, message = seen["error_0"].split(" ", 1)
    assert "host 1" in message, message
    # Named when its heartbeat has been silent, and none of its awaited reads has
    # completed, for three periods (6 s of the 20 s timeout), not at the fetch's deadline:
    # reads to a dead peer never complete over soft-RoCE.
    assert "reads from host 1 are not completing" in message, message
    assert float(took) < 19, seen


# ---- the partitioning script and the distributed training example ----

REPO = Path(__file__).resolve().parents[2]


def test_partition_script_writes_and_checks_shards(tmp_path):
    x = table(240, 4, torch.float16)
    torch.save(x, tmp_path / "x.pt")
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "partition_features.py"),
                             "--features", str(tmp_path / "x.pt"), "--out", str(tmp_path / "parts"),
                             "--hosts", "3", "--replicate", "0.1"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "over 3 hosts" in result.stdout and "24 rows replicated" in result.stdout
    shard_map = assert_shards_hold_the_rows(tmp_path / "parts", x, 3)
    assert sum(shard_map.local_rows(h) - 24 for h in range(3)) == 216


def train_on_two_nodes(tmp_path, per_node: int, *args, check: bool = True,
                       node_args=((), ())) -> list:
    """examples/train_sage_dist.py under torchrun as two nodes on loopback, ``per_node``
    processes each (``node_args``: options of each node's own, after ``args``): their
    outputs, after checking that both exited cleanly (unless not ``check``: then (return
    code, output) pairs)."""
    port = free_port()
    runs = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node),
         "--nproc-per-node", str(per_node), "--master-addr", "127.0.0.1", "--master-port",
         str(port), str(REPO / "examples" / "train_sage_dist.py"), "--data",
         str(tmp_path / "data"), "--size", "small", "--eval-nodes", "2000",
         "--transport", "gloo", *args, *node_args[node]],  # (both share this machine, its GPU)
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for node in range(2)]
    try:
        outputs = [run.communicate(timeout=500)[0] for run in runs]
    finally:
        for run in runs:
            run.kill()
    if not check:
        return [(run.returncode, output) for run, output in zip(runs, outputs)]
    for run, output in zip(runs, outputs):
        assert run.returncode == 0, output[-3000:]
    return outputs


def accuracy_and_chance(output: str, epoch: int):
    last = [line for line in output.splitlines() if line.startswith(f"epoch {epoch}")][0]
    return (float(last.split("test accuracy ")[1].split()[0]),
            float(last.split("(chance ")[1].rstrip(")")), last)


@pytest.mark.timeout(600)
def test_distributed_training_example_learns_on_two_hosts(tmp_path):
    # Two torchrun nodes on loopback (one process each): each maps only its shard.
    outputs = train_on_two_nodes(tmp_path, 1, "--epochs", "2")
    accuracy, chance, last = accuracy_and_chance(outputs[0], 2)
    assert accuracy > 10 * chance, last
    assert "2 hosts x 1 processes" in outputs[0]


@pytest.mark.timeout(600)
def test_partitioned_training_example_learns_on_two_hosts_of_two_processes(tmp_path):
    """--partitioned, as GLT's example: the graph split in two, then two torchrun nodes of
    two processes each; every host maps only its part and samples remote nodes through
    their owners."""
    outputs = train_on_two_nodes(tmp_path, 2, "--epochs", "4", "--fanouts", "10,5",
                                 "--partitioned", "--partition-method", "random")
    assert "partitioned into 2 by random" in outputs[0]
    accuracy, chance, last = accuracy_and_chance(outputs[0], 4)
    assert accuracy > 10 * chance, last
    assert "2 hosts x 2 processes" in outputs[0]


@pytest.mark.timeout(600)
def test_partitioned_example_trains_on_a_partition_of_the_users_own(tmp_path):
    """--data as scripts/partition_graph.py's --out (the docstring's "your own graph"): it
    was ignored without a word, a synthetic graph built and partitioned into it instead."""
    subprocess.run([sys.executable, str(REPO / "scripts" / "partition_graph.py"), "--synthetic",
                    "tiny", "--parts", "2", "--method", "random", "--out",
                    str(tmp_path / "data")], check=True, capture_output=True, timeout=300,
                   env={**os.environ, "PYTHONPATH": str(REPO)})
    before = sorted(p.name for p in (tmp_path / "data").iterdir())
    outputs = train_on_two_nodes(tmp_path, 1, "--size", "tiny", "--epochs", "2", "--fanouts",
                                 "5,5", "--partitioned")
    assert "partitioned into" not in outputs[0], outputs[0]
    assert "2 hosts x 1 processes" in outputs[0] and "epoch 2:" in outputs[0], outputs[0]
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == before  # nothing written

    # One host's part missing a file: both hosts stop at once naming it (the other waited
    # --timeout, then said only that host 1 had not come).
    (tmp_path / "data" / "part_1" / "indices.bin").unlink()
    started = time.monotonic()
    results = train_on_two_nodes(tmp_path, 1, "--size", "tiny", "--partitioned", "--timeout",
                                 "100", check=False)
    assert time.monotonic() - started < 60
    for code, output in results:
        assert code != 0
        assert "train_sage_dist.py: " in output and "part_1/indices.bin is missing" in output, \
            output[-3000:]


@pytest.mark.timeout(300)
def test_a_diverged_distributed_run_stops_on_every_host(tmp_path):
    """A learning rate past reason trained on to NaN losses, never printed, and exited 0
    (the one-host example already stopped): every host now ends after the first such epoch."""
    results = train_on_two_nodes(tmp_path, 1, "--size", "tiny", "--epochs", "5", "--lr", "1e30",
                                 check=False)
    for code, output in results:
        stop = re.search(r"the loss is nan after epoch (\d): training diverged \(--lr 1e\+30",
                         output)
        assert code != 0 and stop, output[-3000:]
        assert f"epoch {int(stop[1]) + 1}:" not in output, output[-3000:]
    assert "loss nan" in results[0][1]


@pytest.mark.timeout(300)
def test_distributed_example_refuses_options_that_differ_between_hosts(tmp_path):
    """A --batch-size of 64 on one host and 16 on the other: one host aborted in a Gloo
    collective and the other failed in DDP's backward, neither naming the option (a
    probe). Every host now says which option differs, before any data is built."""
    results = train_on_two_nodes(tmp_path, 1, "--size", "tiny", check=False,
                                 node_args=(["--batch-size", "64"], ["--batch-size", "16"]))
    for code, output in results:
        assert code != 0 and ("train_sage_dist.py: --batch-size must be the same on every "
                              "process, got process 0: 64, process 1: 16") in output, output[-3000:]
    assert not (tmp_path / "data").exists()
    # Compared before the process group exists: on a GPU host "auto" picks NCCL where
    # "gloo" picks Gloo, and the group's own setup would wait for the other backend.
    results = train_on_two_nodes(tmp_path, 1, "--size", "tiny", check=False,
                                 node_args=(["--transport", "auto"], ["--transport", "gloo"]))
    for code, output in results:
        assert code != 0 and "--transport must be the same on every process" in output, \
            output[-3000:]


def test_distributed_example_refuses_another_jobs_data_in_one_line(tmp_path):
    (tmp_path / "ready.json").write_text('{"hosts": 5, "size": "tiny"}')
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(REPO / "examples" / "train_sage_dist.py"), "--data", str(tmp_path), "--size", "tiny",
         "--transport", "gloo"],  # (two NCCL ranks cannot share a one-GPU machine's GPU)
        capture_output=True, text=True, timeout=120)
    # Said by every process (rank 0 alone had said it: the other host's log said nothing),
    # and a host count of one reads "1 host" (it had read "for 1 hosts"). (torchrun's
    # OMP_NUM_THREADS notice may come first.)
    said = [line for line in result.stderr.splitlines() if "train_sage_dist.py: " in line]
    assert len(said) == 2 and all(line.startswith("train_sage_dist.py: ") for line in said), \
        result.stderr
    first = said[0]
    assert "for 5 hosts" in first and "on 1 host:" in first, first
    assert "exitcode  : 2" in result.stderr, result.stderr  # torchrun's summary of the worker
    # The worker itself printed no traceback (what follows is torchrun's own report).
    worker_part = result.stderr.split("torch/distributed/elastic")[0]
    assert "Traceback" not in worker_part, result.stderr
    assert result.returncode != 0


def test_distributed_example_refuses_data_built_with_another_seed(tmp_path):
    (tmp_path / "ready.json").write_text('{"hosts": 1, "size": "tiny", "seed": 3, '
                                         '"replicate": 0.2}')
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1",
         str(REPO / "examples" / "train_sage_dist.py"), "--data", str(tmp_path), "--size", "tiny"],
        capture_output=True, text=True, timeout=120)
    first = result.stderr.strip().splitlines()[0]
    assert "built with --seed 3, but this job gives --seed 0" in first, result.stderr
    assert result.returncode != 0


def test_distributed_example_refuses_a_partition_made_another_way(tmp_path):
    """--partition-method range over a folder partitioned by METIS was ignored without a word
    (a probe): refused as another --seed is."""
    (tmp_path / "ready.json").write_text('{"hosts": 1, "size": "tiny", "partitioned": true, '
                                         '"seed": 0, "replicate": 0.2, '
                                         '"partition-method": "metis"}')
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1",
         str(REPO / "examples" / "train_sage_dist.py"), "--data", str(tmp_path), "--size", "tiny",
         "--partitioned", "--partition-method", "range"],
        capture_output=True, text=True, timeout=120)
    assert ("built with --partition-method metis, but this job gives --partition-method range"
            in result.stderr), result.stderr[-3000:]
    assert result.returncode != 0


@pytest.mark.timeout(300)
def test_distributed_example_names_a_host_with_fewer_train_ids_than_processes(tmp_path):
    """A host owning fewer train ids than its processes trained on an empty batch: the loss
    was NaN and the run ended blaming --lr (a probe). Every process now names the host."""
    from torch_quiver_ops.partition import partition_graph
    graph = synthetic_graph("tiny", seed=0)
    topo = qv.CSRTopo(graph.edge_index, num_nodes=graph.num_nodes)
    partition_graph(tmp_path, topo, 1, "range", x=graph.x, y=graph.y,
                    splits={"train": graph.train_idx[:1], "test": graph.test_idx})
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(REPO / "examples" / "train_sage_dist.py"), "--data", str(tmp_path), "--size", "tiny",
         "--partitioned", "--transport", "gloo", "--eval-nodes", "100", "--epochs", "1"],
        capture_output=True, text=True, timeout=240)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert output.count("train_sage_dist.py: host(s) [0] own fewer train ids than their 2 "
                        "process(es) (train ids a host: {0: 1})") == 2, output[-3000:]
    assert "loss" not in output and "diverged" not in output, output[-3000:]
    # Train ids enough, test ids fewer than the processes: said by every process, which
    # closes what it holds and exits 2 (a bare SystemExit had closed nothing: a review).
    partition_graph(tmp_path / "few_tests", topo, 1, "range", x=graph.x, y=graph.y,
                    splits={"train": graph.train_idx[:8], "test": graph.test_idx[:1]})
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(REPO / "examples" / "train_sage_dist.py"), "--data", str(tmp_path / "few_tests"),
         "--size", "tiny", "--partitioned", "--transport", "gloo", "--eval-nodes", "100",
         "--epochs", "1"], capture_output=True, text=True, timeout=240)
    output = result.stdout + result.stderr
    assert "exitcode  : 2" in output, output[-3000:]
    assert output.count("train_sage_dist.py: some of the 2 processes have no test node to "
                        "score") == 2, output[-3000:]


def test_distributed_example_checks_its_options_before_starting(capsys, monkeypatch, tmp_path):
    sys.path.insert(0, str(REPO / "examples"))  # it imports train_sage's model
    try:
        spec = importlib.util.spec_from_file_location(
            "train_sage_dist", REPO / "examples" / "train_sage_dist.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(REPO / "examples"))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    for option, value, words in (("--eval-nodes", "0", "--eval-nodes must be >= 1, got 0"),
                                 ("--batch-size", "0", "--batch-size must be >= 1"),
                                 ("--fanouts", "1,,2", "--fanouts takes whole numbers"),
                                 ("--fanouts", "5,-3", "-1 for every neighbor"),
                                 ("--replicate", "1.5", "--replicate is a share"),
                                 ("--epochs", "-1", "--epochs must be >= 0"),
                                 ("--cache-size", "2O%", "a percentage such as '20%', got '2O%'"),
                                 # (1e300 overflowed timedelta; 1e9 was refused by the
                                 # library after the graph was built)
                                 ("--timeout", "1e300", "--timeout is seconds in [1, 31536000]"),
                                 ("--timeout", "1e9", "--timeout is seconds in [1, 31536000]"),
                                 ("--timeout", "0.001", "got 0.001")):
        with pytest.raises(SystemExit):
            module.parse_args(["--data", "d", option, value])
        assert words in capsys.readouterr().err, (option, value)
    # Outside torchrun: one line saying how to launch it (it was a traceback).
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(SystemExit):
        module.parse_args(["--data", "d"])
    assert "run it under torchrun" in capsys.readouterr().err
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "4")
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    for argv, words in ((["--eval-nodes", "3"], "leaves some of the 4 processes no test node"),
                        (["--partition-method", "range"], "give --partitioned too"),
                        (["--data", str(a_file)], "is not a directory")):
        with pytest.raises(SystemExit):
            module.parse_args(["--data", "d", *argv])
        assert words in capsys.readouterr().err, argv
    assert module.parse_args(["--data", "d"]).eval_nodes == 10_000


# ---- a typed table split over hosts in the heterogeneous PyG loader ----

def hetero_dist_worker(rank, world, port, base, results):
    from test_pyg_hetero import hetero_data
    from torch_quiver_ops import pyg as qpyg

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=60))
    with reported(results, rank):
        data = hetero_data(7, papers=120, authors=80)
        features, graph = qpyg.to_stores(data, "cpu")
        # The paper rows live split over the hosts: each holds its shard, fetches the rest.
        papers = qv.dist.DistFeature.load(base, device_list=[], timeout=20.0)
        features.put_feature(papers, "x", node_type="paper")
        torch.manual_seed(3)  # the same batches on every host: each gathers once a batch
        loader = qpyg.NeighborLoader((features, graph), [3, 2],
                                     input_nodes=("paper", torch.arange(120)), batch_size=32,
                                     shuffle=True, device="cpu")
        count = 0
        for batch in loader:
            n_id = batch["paper"].n_id
            assert torch.equal(batch["paper"].x, data["paper"].x[n_id])
            assert torch.equal(batch["author"].x, data["author"].x[batch["author"].n_id])
            count += 1
        assert count == 4


@pytest.mark.timeout(300)
def test_hetero_loader_gathers_a_table_split_over_hosts(tmp_path):
    from test_pyg_hetero import hetero_data
    base, results = tmp_path / "papers", tmp_path / "results"
    results.mkdir()
    x = hetero_data(7, papers=120, authors=80)["paper"].x
    qv.dist.partition_features(x, base, 2, torch.randperm(x.size(0)), 0.1)
    spawn_workers(hetero_dist_worker, args=(2, free_port(), str(base), str(results)), nprocs=2)
    seen = {p.name: p.read_text() for p in results.iterdir()}
    assert seen == {"ok_0": "ok", "ok_1": "ok"}, seen


def test_rdma_options_are_checked_by_type_and_range_before_any_host_connects():
    for given, words in [(5, "rdma takes a dict"), ("fast", "rdma takes a dict"),
                         ({"staging_bytes": "big"}, "staging_bytes must be an int"),
                         ({"qps_per_peer": True}, "qps_per_peer must be an int"),
                         ({"qps_per_peer": 2.0}, "qps_per_peer must be an int"),
                         ({"device": 3}, "device must be a device name")]:
        with pytest.raises(ValueError, match=words):
            qv.dist._rdma_options(given)
    check = torch.classes.quiver.Transport.check_rdma_options
    check(1, -1, 4, 64 << 20)
    for args, words in [((1, -1, 0, 0), r"qps_per_peer must be in \[1, 16\], got 0"),
                        ((0, -1, 4, 0), "port must be in"), ((1, 256, 4, 0), "gid_index"),
                        ((1, -1, 4, 2 << 30), r"staging_bytes must be in \[0, 1073741824\]")]:
        with pytest.raises(ValueError, match=words):
            check(*args)


def test_rdma_defaults_come_from_the_runtime():
    """The options DistFeature and DistGraphSampler fill in are RdmaOptions' own defaults."""
    defaults = dict(torch.classes.quiver.Transport.rdma_defaults())
    assert defaults == {"port": 1, "gid_index": -1, "qps_per_peer": 4,
                        "staging_bytes": 64 << 20}


def test_distributed_example_checks_its_folder_and_transport_where_it_starts(tmp_path):
    """Found by a probe: a --data folder that cannot be made, --transport rdma on a host
    without a device and nccl without a GPU, and a batch size past int64 were tracebacks
    after the graph was built. Argparse errors now (exit 2), read as one worker."""
    env = dict(os.environ, RANK="0", WORLD_SIZE="1", PYTHONPATH=str(REPO))
    cases = [(["--data", "/proc/x"], "--data /proc/x cannot be made"),
             (["--data", str(tmp_path / "d"), "--batch-size", str(10**20)],
              "--batch-size must be at most")]
    if not torch.classes.quiver.Transport.rdma_available():
        cases.append((["--data", str(tmp_path / "d"), "--transport", "rdma"],
                      "--transport rdma: this host lists no RDMA device"))
    if not torch.cuda.is_available():
        cases.append((["--data", str(tmp_path / "d"), "--transport", "nccl"],
                      "--transport nccl moves rows between GPUs"))
    results = run_script_cases([(REPO / "examples" / "train_sage_dist.py",
                                 ["--size", "tiny", *argv]) for argv, _ in cases],
                               timeout=120, env=env)
    for (argv, words), result in zip(cases, results):
        assert result.returncode == 2 and words in result.stderr, (argv, result.stderr[-2000:])
    assert not (tmp_path / "d").exists()
