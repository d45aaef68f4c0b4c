"""The graph partitioner: every method writes parts whose rows are exactly the whole graph's,
owners and local indices agree, features, labels and splits land with their owners, METIS
cuts fewer edges than random on a graph with communities, and a truncated, corrupt or
mismatched file is refused with its name."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import torch_quiver_ops as qv
from torch_quiver_ops.partition import (assign_owners, load_partition, partition_graph,
                                        partition_quality, read_manifest)

REPO = Path(__file__).resolve().parents[2]


def community_graph(n=600, communities=4, degree=8, seed=0):
    """Nodes in `communities` id-interleaved groups; 90% of the edges inside a group."""
    gen = torch.Generator().manual_seed(seed)
    group = torch.arange(n) % communities
    src = torch.randint(n, (n * degree,), generator=gen)
    inside = torch.rand(n * degree, generator=gen) < 0.9
    members = [torch.nonzero(group == g).view(-1) for g in range(communities)]
    dst = torch.randint(n, (n * degree,), generator=gen)
    for g in range(communities):
        mask = inside & (group[src] == g)
        pick = torch.randint(members[g].numel(), (int(mask.sum()),), generator=gen)
        dst[mask] = members[g][pick]
    return qv.CSRTopo(torch.stack([src, dst]), num_nodes=n)


def has_pymetis():
    try:
        import pymetis  # noqa: F401
        return True
    except ImportError:
        return False


METHODS = ["range", "random"] + (["metis"] if has_pymetis() else [])


def assert_feature_shards_hold_the_rows(directory, x, parts):
    """Each part's feature shard holds exactly the rows of ``x`` the shard map says it
    holds, in its local order: owners alone would pass with every row wrong."""
    shard_map = qv.dist.load_shard_map(directory, verify=True)
    for h in range(parts):
        local = qv.Feature.load_shared(Path(directory) / f"host_{h}", device_list=[])
        assert torch.equal(local[torch.arange(len(local))], x[shard_map.local_ids(h)]), h
    return shard_map


@pytest.mark.parametrize("method", METHODS)
def test_parts_hold_exactly_the_whole_graph(tmp_path, method):
    topo = community_graph()
    n = topo.node_count
    x = torch.randn(n, 5)
    y = torch.randint(3, (n,))
    splits = {"train": torch.randperm(n)[:300], "test": torch.arange(0, n, 7)}
    manifest = partition_graph(tmp_path, topo, 3, method, x=x, y=y, splits=splits,
                               chunk_edges=97)  # many chunks per part
    assert manifest["num_parts"] == 3 and sum(p["nodes"] for p in manifest["parts"]) == n
    seen = torch.zeros(n, dtype=torch.long)
    for part in range(3):
        p = load_partition(tmp_path, part, verify=True)
        seen[p.nodes] += 1
        assert torch.equal(p.owner[p.nodes].long(), torch.full_like(p.nodes, part))
        assert torch.equal(p.local_index[p.nodes], torch.arange(p.nodes.numel()))
        for i, v in enumerate(p.nodes.tolist()):
            whole = topo.indices[topo.indptr[v]:topo.indptr[v + 1]]
            mine = p.indices[p.indptr[i]:p.indptr[i + 1]]
            assert torch.equal(whole, mine)
            assert torch.equal(p.edge_ids[p.indptr[i]:p.indptr[i + 1]],
                               topo.eid[topo.indptr[v]:topo.indptr[v + 1]])
        assert torch.equal(p.labels, y[p.nodes])
        for name, ids in splits.items():
            assert torch.equal(p.splits[name].sort().values,
                               ids[p.owner[ids].long() == part].sort().values)
        assert p.feature_directory is not None
    assert torch.equal(seen, torch.ones(n, dtype=torch.long))
    # The feature shards follow the same owners (replicated hot rows aside).
    shard_map = assert_feature_shards_hold_the_rows(tmp_path / "features", x, 3)
    host_of, _ = shard_map.locate(torch.arange(n))
    owner = load_partition(tmp_path, 0).owner.long()
    replicated = host_of < 0
    assert torch.equal(host_of[~replicated], owner[~replicated])


@pytest.mark.parametrize("method", METHODS)
def test_a_graph_without_nodes_makes_empty_parts(tmp_path, method):
    """A probe: partitioning an empty edge_index ended in a traceback from the balance
    report (bincount with weights returned int64 for no nodes)."""
    topo = qv.CSRTopo(torch.empty(2, 0, dtype=torch.long), num_nodes=0)
    manifest = partition_graph(tmp_path, topo, 2, method)
    assert [p["nodes"] for p in manifest["parts"]] == [0, 0]
    for part in range(2):
        assert load_partition(tmp_path, part, verify=True).nodes.numel() == 0


def test_balance_and_what_each_method_cuts():
    topo = community_graph(n=800)
    for method in METHODS:
        owner = assign_owners(topo, 4, method, seed=1)
        quality = partition_quality(topo, owner, 4)
        assert quality["node_balance"] <= 1.1, (method, quality)
        if method == "random":
            assert 0.6 < quality["edge_cut"] < 0.9  # about 3/4 of the edges cross
        if method == "metis":  # finds the communities: about the 10% planted across
            assert quality["edge_cut"] < 0.3, quality
        if method == "range":  # contiguous id ranges of equal size (any balanced owner passed)
            assert torch.equal(owner.long(), torch.arange(800) // 200)
        # Read a few edges at a time, the counts are the same (only the last chunk's cut
        # had gone unnoticed), and the edge balance is the largest part's edges over the mean.
        assert partition_quality(topo, owner, 4, chunk_edges=97) == quality, method
        edges = quality["edges_per_part"]
        assert sum(edges) == topo.edge_count
        assert quality["edge_balance"] == pytest.approx(max(edges) * 4 / sum(edges)), method
    assert torch.equal(assign_owners(topo, 4, "random", seed=3), assign_owners(topo, 4, "random", seed=3))
    # ... and another seed, another assignment (a seed ignored would pass the line above)
    assert not torch.equal(assign_owners(topo, 4, "random", seed=3),
                           assign_owners(topo, 4, "random", seed=4))
    with pytest.raises(ValueError, match="method"):
        assign_owners(topo, 4, "spectral")
    # Owners past num_parts were counted as more parts, and 0 or 10**10 parts failed in
    # torch's words (a probe).
    owner = assign_owners(topo, 4, "random", seed=1)
    for parts, words in ((1, r"owner holds parts outside \[0, 1\)"),
                         (0, "num_parts must be in"), (10**10, "num_parts must be in")):
        with pytest.raises(ValueError, match=words):
            partition_quality(topo, owner, parts)
    import numpy as np  # NumPy's ints are counts too
    assert partition_quality(topo, owner, np.int64(4)) == partition_quality(topo, owner, 4)
    with pytest.raises(ValueError, match="num_parts"):
        assign_owners(topo, 0, "range")


@pytest.mark.skipif(not has_pymetis(), reason="needs pymetis")
def test_metis_beyond_the_memory_available_is_refused_up_front(monkeypatch):
    import torch_quiver_ops.partition as partition
    topo = community_graph(n=300)  # directed: its symmetrized adjacency has more entries
    rows = torch.repeat_interleave(torch.arange(300), topo.degree.long())
    pairs = torch.cat([torch.stack([rows, topo.indices.long()]),
                       torch.stack([topo.indices.long(), rows])], 1)
    pairs = pairs[:, pairs[0] != pairs[1]]
    entries = torch.unique(pairs[0] * 300 + pairs[1]).numel()
    assert entries > 1.5 * topo.edge_count
    available = partition._available_memory()  # this machine's (Linux: /proc/meminfo)
    assert available is None or available > 0
    # Below what the input edges alone need: refused before anything is built.
    at_least = partition.METIS_BYTES_PER_ENTRY * topo.edge_count
    monkeypatch.setattr(partition, "_available_memory", lambda: at_least - 1)
    with pytest.raises(MemoryError, match=f"on {topo.edge_count:,} edges needs at least "
                                          f"about .*'random'"):
        assign_owners(topo, 2, "metis")
    # Enough for the input edges, not for the symmetrized adjacency (a directed graph had
    # passed a check per input edge and used 2.7x its estimate: a probe).
    need = partition.METIS_BYTES_PER_ENTRY * entries
    monkeypatch.setattr(partition, "_available_memory", lambda: need - 1)
    with pytest.raises(MemoryError, match=f"symmetrized: {entries:,} adjacency entries\\) "
                                          f"needs about"):
        assign_owners(topo, 2, "metis")
    monkeypatch.setattr(partition, "_available_memory", lambda: need)
    assert assign_owners(topo, 2, "metis").unique().tolist() == [0, 1]
    monkeypatch.setattr(partition, "_available_memory", lambda: None)  # unknown: tried
    assert assign_owners(topo, 2, "metis").numel() == 300


@pytest.mark.skipif(not has_pymetis(), reason="needs pymetis")
def test_metis_refuses_more_nodes_than_its_pair_keys_hold():
    """Each pair is keyed as row * n + col in int64: past 3,037,000,499 nodes a key wrapped
    negative and csr_from_coo blamed a row out of range (a probe's arithmetic)."""
    import torch_quiver_ops.partition as partition
    n = partition.MAX_METIS_NODES
    assert n * n < 2 ** 63 <= (n + 1) ** 2

    class Huge(qv.CSRTopo):  # (a real one needs a 24 GB indptr)
        node_count, edge_count = n + 1, 1
    huge = Huge.__new__(Huge)
    with pytest.raises(ValueError, match=f"at most {n:,} nodes, got {n + 1:,}; use 'range'"):
        assign_owners(huge, 2, "metis")


def test_corrupt_truncated_and_mismatched_files_are_refused(tmp_path):
    topo = community_graph(n=300)
    partition_graph(tmp_path / "a", topo, 2, "range", y=torch.zeros(300, dtype=torch.long))
    partition_graph(tmp_path / "b", topo, 2, "range", y=torch.zeros(300, dtype=torch.long))
    with pytest.raises(ValueError, match=r"part 2 is not one of the partition's 2 parts"):
        load_partition(tmp_path / "a", 2)
    # NumPy's ints are parts, as partition_graph takes them for num_parts (a probe).
    assert load_partition(tmp_path / "a", np.int64(1)).part == 1
    # A part from another run of the partitioner.
    (tmp_path / "a" / "part_1" / "part.json").write_text(
        (tmp_path / "b" / "part_1" / "part.json").read_text())
    with pytest.raises(ValueError, match=r"part_1/part.json is from another partition"):
        load_partition(tmp_path / "a", 1)
    # Truncated.
    indices = tmp_path / "b" / "part_0" / "indices.bin"
    indices.write_bytes(indices.read_bytes()[:-4])
    with pytest.raises(ValueError, match=r"part_0/indices.bin holds"):
        load_partition(tmp_path / "b", 0)
    # A flipped byte: the checksum, when verified.
    labels = tmp_path / "b" / "part_1" / "labels.bin"
    data = bytearray(labels.read_bytes())
    data[3] ^= 0xFF
    labels.write_bytes(bytes(data))
    load_partition(tmp_path / "b", 1)  # sizes alone pass
    with pytest.raises(ValueError, match=r"part_1/labels.bin does not match the checksum"):
        load_partition(tmp_path / "b", 1, verify=True)
    with pytest.raises(FileNotFoundError, match="manifest.json"):
        load_partition(tmp_path / "nothing", 0)
    manifest = tmp_path / "a" / "manifest.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "format": "x"}))
    with pytest.raises(ValueError, match="is not a quiver-partition-1 manifest"):
        read_manifest(tmp_path / "a")
    # Fields missing or of the wrong kind are named, not a bare KeyError or TypeError.
    good = json.loads((tmp_path / "b" / "manifest.json").read_text())
    for edit, words in ((lambda m: m.pop("num_parts"), "num_parts is None, not a count"),
                        (lambda m: m.update(num_nodes="400"), "num_nodes is '400', not a count"),
                        (lambda m: m.update(parts=m["parts"][:1]), "parts must list 2 parts'"),
                        (lambda m: m.pop("partition_id"), "partition_id is None, not an int"),
                        # (from a probe: a str id was said to be of another partition with
                        # both ids shown equal, and a str of splits read a letter at a time)
                        (lambda m: m.update(partition_id=str(m["partition_id"])),
                         "partition_id is '.*', not an int"),
                        (lambda m: m.update(splits="train"),
                         "splits is 'train', not a list of split names")):
        edited = dict(good)
        edit(edited)
        manifest.write_text(json.dumps(edited))
        with pytest.raises(ValueError, match=f"manifest.json is corrupt: {words}"):
            load_partition(tmp_path / "a", 0)


def test_a_part_of_another_part_count_and_corrupt_edge_ids_or_nodes_are_named(tmp_path):
    """From a probe: a manifest edited to one part was said to be of another partition
    with both ids shown equal; an edge id of -7 and owned nodes out of order came back
    from the sampler without a word (verify off)."""
    topo = community_graph(n=300)
    partition_graph(tmp_path / "a", topo, 2, "range")
    manifest = tmp_path / "a" / "manifest.json"
    good = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**good, "num_parts": 1, "parts": good["parts"][:1]}))
    with pytest.raises(ValueError, match=r"part.json is from another partition than .* "
                                         r"\(num_parts 2 against 1\)"):
        load_partition(tmp_path / "a", 0)
    manifest.write_text(json.dumps(good))
    for name, damage, words in (("edge_ids", lambda t: t.__setitem__(0, -7), "negative edge ids"),
                                ("nodes", lambda t: t.copy_(t.flip(0)), "owned nodes that are "
                                                                         "not ascending")):
        path = tmp_path / "a" / "part_0" / f"{name}.bin"
        kept = path.read_bytes()
        values = torch.frombuffer(bytearray(kept), dtype=torch.int64).clone()
        damage(values)
        path.write_bytes(values.numpy().tobytes())
        with pytest.raises(ValueError, match=f"part_0 does not match .*manifest.json: {words}"):
            load_partition(tmp_path / "a", 0)
        path.write_bytes(kept)
    load_partition(tmp_path / "a", 0)


def test_features_of_another_run_and_arrays_of_another_length_are_named(tmp_path):
    """From a probe: a features folder copied from another partitioning loaded beside the
    parts, verified, and served that run's rows; edge ids or an owner map of another length
    were named by counts that agreed ("34 neighbors for the manifest's 34")."""
    topo = community_graph(n=100)
    partition_graph(tmp_path / "a", topo, 2, "random", x=torch.zeros(100, 4))
    partition_graph(tmp_path / "b", topo, 2, "random", x=torch.ones(100, 4))
    load_partition(tmp_path / "a", 0, verify=True)
    import shutil
    shutil.rmtree(tmp_path / "a" / "features")
    shutil.copytree(tmp_path / "b" / "features", tmp_path / "a" / "features")
    for verify in (False, True):
        with pytest.raises(ValueError, match="features was written by another run than"):
            load_partition(tmp_path / "a", 1, verify=verify)
    shutil.rmtree(tmp_path / "a" / "features")  # a host that only samples may have none
    assert load_partition(tmp_path / "a", 1).feature_directory == tmp_path / "a" / "features"
    for folder, stem, name, words in (("part_0", "part", "edge_ids", "edge ids for"),
                                      ("owner", "owner", "local_index",
                                       "owner/local_index.bin of 200 entries for 100 nodes")):
        record = tmp_path / "b" / folder / f"{stem}.json"
        good = record.read_text()
        meta = json.loads(good)  # twice the entries in the same bytes
        meta["arrays"][name].update(dtype="int32", shape=[meta["arrays"][name]["shape"][0] * 2])
        record.write_text(json.dumps(meta))
        with pytest.raises(ValueError, match=words):
            load_partition(tmp_path / "b", 0)
        record.write_text(good)
    load_partition(tmp_path / "b", 0)


def test_ids_that_are_not_integer_vectors_and_labels_of_another_length_are_named(tmp_path):
    """From a probe: a part.json edited to call nodes or split ids float64 loaded them as
    zeros (the order check passed), and labels a row short or of shape [1, n] loaded too."""
    topo = community_graph(n=120)
    partition_graph(tmp_path / "a", topo, 2, "random", y=torch.arange(120) * 10,
                    splits={"train": torch.arange(60)})
    meta_path = tmp_path / "a" / "part_0" / "part.json"
    good = meta_path.read_text()

    def edited(edit):
        meta = json.loads(good)
        edit(meta["arrays"])
        meta_path.write_text(json.dumps(meta))

    for name in ("nodes", "train_ids", "edge_ids"):
        edited(lambda arrays: arrays[name].__setitem__("dtype", "float64"))
        with pytest.raises(ValueError, match=f"{name} must be a vector of integer ids, got "
                                             "torch.float64"):
            load_partition(tmp_path / "a", 0)
    nodes = load_partition(tmp_path / "a", 0).nodes.numel() if meta_path.write_text(good) else 0
    edited(lambda arrays: arrays["labels"].__setitem__("shape", [1, nodes]))
    with pytest.raises(ValueError, match=rf"labels of shape \[1, {nodes}\] for {nodes} nodes"):
        load_partition(tmp_path / "a", 0)
    meta_path.write_text(good)
    assert torch.equal(load_partition(tmp_path / "a", 0).labels,
                       load_partition(tmp_path / "a", 0).nodes * 10)


def test_given_owners_and_bad_inputs(tmp_path):
    topo = community_graph(n=200)
    owner = torch.arange(200) % 2
    manifest = partition_graph(tmp_path, topo, 2, owner=owner)
    assert manifest["method"] == "given"
    assert torch.equal(load_partition(tmp_path, 1).nodes, torch.arange(1, 200, 2))
    with pytest.raises(ValueError, match="outside"):
        partition_graph(tmp_path / "x", topo, 2, owner=owner * 2)
    with pytest.raises(ValueError, match="x has 5 rows"):
        partition_graph(tmp_path / "x", topo, 2, "range", x=torch.zeros(5, 2))
    # the ops' exception types (both were ValueErrors)
    with pytest.raises(IndexError, match="split 'train' holds node ids outside"):
        partition_graph(tmp_path / "x", topo, 2, "range", splits={"train": torch.tensor([200])})
    with pytest.raises(TypeError, match="split 'train' must hold integer node ids"):
        partition_graph(tmp_path / "x", topo, 2, "range", splits={"train": torch.tensor([3.7])})
    with pytest.raises(ValueError, match="a mask of 5 entries for a graph of 200 nodes"):
        partition_graph(tmp_path / "x", topo, 2, "range",
                        splits={"train": torch.ones(5, dtype=torch.bool)})
    # A boolean mask (PyG's train_mask) names the nodes it marks.
    mask = torch.zeros(200, dtype=torch.bool)
    mask[[3, 4, 150]] = True
    partition_graph(tmp_path / "masked", topo, 2, owner=owner, splits={"train": mask})
    assert load_partition(tmp_path / "masked", 0).splits["train"].tolist() == [4, 150]
    assert load_partition(tmp_path / "masked", 1).splits["train"].tolist() == [3]
    # The features' options are checked before any part is written over the one there;
    # so are tables a save cannot hold (a uint16 x had been refused, naming "rows", after
    # every part was written over) and split names that are a part's own array ("edge" had
    # written its ids over edge_ids, which loaded as the part's edge ids).
    for bad, error, words in (
            ({"replicate": 1.5}, ValueError, r"replicate must be a number in \[0, 1\], got 1.5"),
            ({"replicate": "20%"}, ValueError, r"replicate must be a number .* got '20%'"),
            ({"replicate": True}, ValueError, r"replicate must be a number .* got True"),
            ({"chunk_edges": 0}, ValueError, r"chunk_edges must be an int >= 1, got 0"),
            ({"hot_order": torch.arange(40)}, ValueError, "hot_order"),
            ({"x": torch.zeros(200, 2, dtype=torch.uint16)}, TypeError,
             "x cannot be saved: its dtype is torch.uint16"),
            ({"x": torch.tensor(3.0)}, ValueError, r"x must be a table of rows \(\[rows, ...\]\), "
                                                   "got a 0-d tensor"),
            ({"y": torch.eye(200).to_sparse()}, TypeError, "y cannot be saved: it is a "
                                                           "torch.sparse_coo tensor"),
            ({"splits": {"edge": torch.arange(5)}}, ValueError, "splits may not be named 'edge'")):
        with pytest.raises(error, match=words):
            partition_graph(tmp_path, topo, 2, owner=owner, **{"x": torch.zeros(200, 2), **bad})
        assert load_partition(tmp_path, 1, verify=True).num_nodes == 200


def test_options_without_effect_and_arguments_of_the_wrong_kind_are_named(tmp_path):
    """A probe: replicate and hot_order were taken without x (and replicate unchecked),
    chunk_edges of -5 or "x" passed or failed in a sum, METIS asked for more parts than
    nodes printed its refusal and put every node in one part, and a seed or topo of the
    wrong kind failed in torch's, METIS's or an attribute's words."""
    topo = community_graph(n=50)
    for bad in ({"replicate": 0.5}, {"hot_order": torch.arange(50)}):
        with pytest.raises(ValueError, match="replicate and hot_order place feature rows: "
                                             "they need x"):
            partition_graph(tmp_path, topo, 2, "range", **bad)
    for chunk in (-5, "x", 2.0):
        with pytest.raises(ValueError, match="chunk_edges must be an int >= 1"):
            partition_graph(tmp_path, topo, 2, "range", chunk_edges=chunk)
        with pytest.raises(ValueError, match="chunk_edges must be an int >= 1"):
            partition_quality(topo, torch.zeros(50, dtype=torch.int16), 2, chunk_edges=chunk)
    with pytest.raises(ValueError, match="method='metis' splits 50 nodes into at most 50 "
                                         "parts, got num_parts=60"):
        assign_owners(topo, 60)
    assert sorted(assign_owners(topo, 60, "random").unique().tolist()) == list(range(50))
    for seed in ("x", 1.5, True):
        with pytest.raises(TypeError, match="seed must be an int"):
            assign_owners(topo, 2, "random", seed=seed)
    with pytest.raises(TypeError, match="partition_graph partitions a CSRTopo .* got Tensor: "
                                        "build one with CSRTopo"):
        partition_graph(tmp_path, torch.tensor([[0, 1], [1, 0]]), 2)
    with pytest.raises(TypeError, match="assign_owners partitions a CSRTopo .* got NoneType"):
        assign_owners(None, 2)
    assert not (tmp_path / "manifest.json").exists()


def test_the_script_reads_a_pyg_edge_index_as_in_neighbor_lists(tmp_path):
    # A directed chain 0 -> 1 -> ... -> 5 and two isolated nodes past it (8 rows of x):
    # node v's list holds its in-neighbor v - 1, as PyG samples, and every node counts.
    edge_index = torch.stack([torch.arange(5), torch.arange(1, 6)])
    torch.save(edge_index, tmp_path / "edges.pt")
    torch.save(torch.randn(8, 3), tmp_path / "x.pt")
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "partition_graph.py"),
                           "--edge-index", str(tmp_path / "edges.pt"), "--features",
                           str(tmp_path / "x.pt"), "--parts", "1", "--method", "range",
                           "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    part = load_partition(tmp_path / "out", 0, verify=True)
    assert part.num_nodes == 8
    v = 3
    neighbors = part.indices[part.indptr[v]:part.indptr[v + 1]]
    assert neighbors.tolist() == [2]
    edge = part.edge_ids[part.indptr[v]]
    assert edge_index[:, edge].tolist() == [2, 3]  # e_id names the input edge (2, 3)


def test_the_script_partitions_a_saved_graph(tmp_path):
    topo = community_graph(n=400)
    topo.save(tmp_path / "csr")
    x = torch.randn(400, 3)
    torch.save(x, tmp_path / "x.pt")
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "partition_graph.py"),
                           "--csr", str(tmp_path / "csr"), "--features", str(tmp_path / "x.pt"),
                           "--parts", "2", "--method", "random", "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "edge cut" in done.stdout and "balance" in done.stdout
    assert load_partition(tmp_path / "out", 1, verify=True).num_nodes == 400
    assert_feature_shards_hold_the_rows(tmp_path / "out" / "features", x, 2)
    # Without features (the default --replicate had then been refused as rows' option)
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "partition_graph.py"),
                           "--csr", str(tmp_path / "csr"), "--parts", "2", "--method", "range",
                           "--out", str(tmp_path / "bare")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not read_manifest(tmp_path / "bare")["features"]


@pytest.mark.parametrize("script, args, said", [
    ("scripts/partition_graph.py", ["--synthetic", "tiny", "--parts", "0"], "--parts must be >= 1"),
    ("scripts/partition_graph.py", ["--csr", "/nonexistent", "--parts", "2"],
     "/nonexistent/csr.json does not exist"),
    ("scripts/partition_graph.py", ["--synthetic", "bogus", "--parts", "2"],
     "--synthetic must be one of"),
    # ignored by the source chosen: a run that "worked" without them (found by a probe)
    ("scripts/partition_graph.py", ["--synthetic", "tiny", "--parts", "2", "--num-nodes", "5"],
     "--num-nodes goes with --edge-index only"),
    ("scripts/partition_graph.py", ["--csr", "/nonexistent", "--parts", "2", "--no-features"],
     "--no-features goes with --synthetic only"),
    ("scripts/partition_graph.py", ["--synthetic", "tiny", "--parts", "2", "--no-features",
                                    "--replicate", "0.3"], "--replicate places feature rows"),
    ("scripts/partition_features.py", ["--features", "/nonexistent.pt", "--hosts", "2"],
     "--features /nonexistent.pt is not a file"),
    ("scripts/partition_features.py", ["--features", "/nonexistent.pt", "--hosts", "40000"],
     "--hosts must be in [1, 32767], got 40000"),
    ("scripts/partition_features.py", ["--features", "/nonexistent.pt", "--hosts", "2",
                                       "--hot-order", "o.pt", "--csr", "g"],
     "give --hot-order or --csr"),
    ("examples/cpp/save_graph.py", ["--batch-size", "0"], "--batch-size must be in [1, 2**63)"),
    ("examples/cpp/save_graph.py", ["--seed", str(2 ** 63)], "--seed must be in [0, 2**63)"),
])
def test_the_scripts_name_a_bad_argument_without_a_traceback(tmp_path, script, args, said):
    done = subprocess.run([sys.executable, str(REPO / script), *args,
                           *(["--out", str(tmp_path / "out")] if "partition" in script
                             else [str(tmp_path / "out")])],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr


def test_an_empty_folder_a_foreign_file_and_a_ctrl_c_end_a_script_in_one_line(tmp_path):
    """From a probe: save_graph.py "" wrote /topology, /features and /labels; a file that
    torch.save did not write was refused with torch's advice to pass weights_only=False
    (which runs the file's code); a Ctrl-C in these scripts printed twenty lines."""
    done = subprocess.run([sys.executable, str(REPO / "examples" / "cpp" / "save_graph.py"), "",
                           "--size", "tiny"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "directory must not be empty" in done.stderr, done.stderr
    (tmp_path / "ei.pt").write_text("not a tensor\n")
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "partition_graph.py"),
                           "--edge-index", str(tmp_path / "ei.pt"), "--parts", "2", "--out",
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "is not a file torch.save wrote whole" in done.stderr
    assert "weights_only" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    import argparse
    from torch_quiver_ops import _cli

    def interrupted(args):
        raise KeyboardInterrupt
    with pytest.raises(SystemExit) as ended:
        _cli.run(argparse.ArgumentParser(prog="x"), interrupted, argparse.Namespace())
    assert ended.value.code == 130


def test_partition_features_names_its_flags_not_the_functions_arguments(tmp_path):
    """Data errors named hot_order, assignment and num_hosts (the Python arguments)."""
    torch.save(torch.randn(50, 4), tmp_path / "x.pt")
    torch.save(torch.arange(49), tmp_path / "order.pt")
    torch.save(torch.full((50,), 7), tmp_path / "parts.pt")
    for args, said in ((["--hot-order", str(tmp_path / "order.pt")],
                        "--hot-order must list each of the 50 rows once, got 49 ids"),
                       (["--assignment", str(tmp_path / "parts.pt")],
                        "--assignment holds host 7, outside [0, 2)")):
        done = subprocess.run([sys.executable, str(REPO / "scripts" / "partition_features.py"),
                               "--features", str(tmp_path / "x.pt"), "--hosts", "2", "--out",
                               str(tmp_path / "out"), *args],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode != 0 and said in done.stderr, done.stderr
        assert "Traceback" not in done.stderr, done.stderr
    # --csr of another node count had been named as a --hot-order never given, and a 0-d
    # --features by torch's "Dimension specified as 0".
    community_graph(n=60).save(tmp_path / "csr60")
    torch.save(torch.tensor(3.0), tmp_path / "x0.pt")
    for args, said in ((["--features", str(tmp_path / "x.pt"), "--csr", str(tmp_path / "csr60")],
                        "has 60 nodes, --features"),
                       (["--features", str(tmp_path / "x0.pt")],
                        "x0.pt must be a table of rows ([rows, ...]), got a 0-d tensor")):
        done = subprocess.run([sys.executable, str(REPO / "scripts" / "partition_features.py"),
                               "--hosts", "2", "--out", str(tmp_path / "out"), *args],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode != 0 and said in done.stderr, done.stderr
        assert "Traceback" not in done.stderr, done.stderr


def test_an_edge_out_of_range_is_named_where_the_file_holds_it(tmp_path):
    """The script checks the flipped edges (in-neighbor lists), and named the other row."""
    torch.save(torch.tensor([[0, -5], [1, 2]]), tmp_path / "ei.pt")
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "partition_graph.py"),
                           "--edge-index", str(tmp_path / "ei.pt"), "--parts", "2", "--out",
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "edge_index[0, 1] = -5 is out of range" in done.stderr, \
        done.stderr


@pytest.mark.parametrize("damage", ["garbage", "truncated", "a dict as edge index",
                                    "a tensor as splits"])
def test_the_scripts_name_a_bad_input_file_without_a_traceback(tmp_path, damage):
    """torch.load's own errors (a pickle KeyError, EINVAL with no file named) and inputs of
    the wrong kind went up as tracebacks deep in torch or in the partitioner."""
    edge_index = torch.randint(50, (2, 200))
    good, bad = tmp_path / "ei.pt", tmp_path / "bad.pt"
    torch.save(edge_index, good)
    flag, words = "--edge-index", "is not a file torch.save wrote whole"
    if damage == "garbage":
        bad.write_bytes(b"\x80\x02}q\x00K\x65" + bytes(range(200)))
    elif damage == "truncated":
        bad.write_bytes(good.read_bytes()[:300])
    elif damage == "a dict as edge index":
        torch.save({"edge_index": edge_index}, bad)
        words = "holds a dict, not a Tensor"
    else:
        torch.save(torch.arange(10), bad)
        flag, words = "--splits", "holds a Tensor, not a dict"
    args = ["--edge-index", str(good), "--splits", str(bad)] if flag == "--splits" else \
        ["--edge-index", str(bad)]
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "partition_graph.py"), *args,
                           "--parts", "2", "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and f"{flag} {bad}" in done.stderr and words in done.stderr, \
        done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    if flag == "--splits":
        return
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "partition_features.py"),
                           "--features", str(bad), "--hosts", "2", "--out", str(tmp_path / "f")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and f"--features {bad}" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr


def test_the_largest_degree_is_found_chunk_by_chunk():
    """DistGraphSampler sizes its slots by every part's largest degree, read in chunks of
    rows (a part's offsets whole would need as many bytes again)."""
    from torch_quiver_ops.partition import _largest_degree
    indptr = torch.tensor([0, 2, 2, 9, 10, 10, 14])
    for chunk in (1, 2, 4, 100):
        assert _largest_degree(indptr, chunk) == 7
    assert _largest_degree(torch.tensor([0])) == 0


def test_a_loaded_partition_travels_to_worker_processes_as_its_files(tmp_path):
    """mp.spawn pickles its arguments with multiprocessing's pickler, whose reduction of
    tensors over mapped files had failed with EBADF (a probe): a partition's arrays, its
    splits' too, travel as their files and map the same pages again."""
    import pickle
    from multiprocessing.reduction import ForkingPickler
    topo = community_graph(n=120)
    partition_graph(tmp_path, topo, 2, "random", y=torch.arange(120),
                    splits={"train": torch.arange(0, 120, 3)})
    part = load_partition(tmp_path, 1)
    sent = pickle.loads(ForkingPickler.dumps(part))
    for name in ("nodes", "indptr", "indices", "edge_ids", "owner", "local_index", "labels"):
        assert torch.equal(getattr(sent, name), getattr(part, name)), name
    assert torch.equal(sent.splits["train"], part.splits["train"])
    assert sent.indices.untyped_storage().filename == part.indices.untyped_storage().filename
    assert (sent.part, sent.num_parts, sent.directory) == (1, 2, part.directory)
