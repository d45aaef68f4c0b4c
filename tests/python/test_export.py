"""Models that call the quiver ops, without Python at run time: torch.export +
AOTInductor packages (examples/export_sage.py) run from Python and from C++
(examples/cpp/run_exported), torch.compile without graph breaks, and the ops' PT2 tags."""
import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import torch_quiver_ops as qv

REPO = Path(__file__).resolve().parents[2]
RUNNER = os.environ.get("QUIVER_CPP_EXPORT_RUNNER")
if not RUNNER and os.environ.get("QUIVER_REQUIRE_CPP_TESTS") == "1":
    raise RuntimeError("QUIVER_CPP_EXPORT_RUNNER is not set: scripts/test.sh builds examples/cpp")
OPS = ["check_csr", "check_permutation", "check_fanouts", "csr_from_coo", "sample_neighbors", "sample_subgraph", "neighbor_sample",
       "hetero_neighbor_sample",
       "sample_negatives", "gather_rows", "gather_tiered_rows"]


def load_example():
    spec = importlib.util.spec_from_file_location("export_sage",
                                                  REPO / "examples" / "export_sage.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["export_sage"] = module  # torch.compile looks the model's module up by name
    spec.loader.exec_module(module)
    return module


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() and qv.cuda_kernels_built() else [])


@pytest.fixture(scope="module", params=DEVICES)
def exported(request, tmp_path_factory):
    directory = tmp_path_factory.mktemp(f"export-{request.param}")
    # main() also checks the package against eager PyTorch.
    result = load_example().main([str(directory), "--device", request.param])
    result["directory"] = directory
    result["device"] = request.param
    return result


def eager(model, inputs, seeds, seed):
    with torch.no_grad():
        torch.manual_seed(seed)
        return model(*inputs, seeds)


@pytest.mark.parametrize("batch", [1, 37, 700])
def test_package_gives_eager_outputs_for_any_batch_size(exported, batch):
    package = torch._inductor.aoti_load_package(str(exported["package"]))
    seeds = torch.randperm(exported["inputs"][0].numel() - 1)[:batch].to(exported["device"])
    torch.manual_seed(3)
    packaged = package(*exported["inputs"], seeds)
    torch.testing.assert_close(packaged, eager(exported["model"], exported["inputs"], seeds, 3))
    assert packaged.shape == (batch, exported["num_classes"])


def test_loaded_package_refuses_a_feature_table_of_another_width(exported):
    """The kernels read the table with the width they were compiled for: a narrower one was
    read past its end (outputs changing from call to call), a wider one gave wrong scores."""
    package = qv.aoti.load_package(exported["package"])
    indptr, indices, table = exported["inputs"]
    seeds = torch.tensor([0, 1], device=exported["device"])
    for bad in (table[:, :1].contiguous(), torch.cat([table, table], 1), table.double(),
                table.t().contiguous().t()):  # (the last one's refusal was in a log only)
        with pytest.raises(ValueError, match="the feature table"):
            package(indptr, indices, bad, seeds)
    # Other refusals come from inside the package: the error says where the op's own is.
    with pytest.raises(RuntimeError, match="failed on these inputs: the error of the op"):
        package(indptr, indices, table, torch.tensor([0, indptr.numel()], device=seeds.device))
    assert package(indptr, indices, table, seeds).shape[0] == 2
    assert package.get_metadata()["quiver.feature_width"] == str(table.size(1))


def test_package_raises_on_bad_ids(exported, capfd):
    package = torch._inductor.aoti_load_package(str(exported["package"]))
    nodes = exported["inputs"][0].numel() - 1
    # The op's own message ("... out of range") goes to stderr; AOTInductor's runner raises
    # a RuntimeError that names the failed call (any RuntimeError had passed).
    capfd.readouterr()
    with pytest.raises(RuntimeError, match="run_func_.* API call failed"):
        package(*exported["inputs"], torch.tensor([0, nodes], device=exported["device"]))
    said = capfd.readouterr().err
    assert f"= {nodes} is out of range" in said, said[-2000:]
    torch.manual_seed(0)  # and the package (and the GPU) still work afterwards
    ok = package(*exported["inputs"], torch.tensor([0, 1], device=exported["device"]))
    assert ok.shape[0] == 2


@pytest.mark.skipif(not RUNNER, reason="QUIVER_CPP_EXPORT_RUNNER is not set (scripts/test.sh "
                    "builds examples/cpp)")
def test_the_runner_names_what_it_cannot_use(tmp_path):
    """--help is usage (exit 0); a package that is missing, a folder or not a package, and
    an unknown option, are named (exit 2)."""
    done = subprocess.run([RUNNER, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "usage: run_exported" in done.stdout
    not_a_package = tmp_path / "model.pt2"
    not_a_package.write_text("{}")
    graph = tmp_path / "graph"  # a whole graph, so that the package is what fails
    qv.save_arrays(graph / "topology", "csr", {"indptr": torch.tensor([0, 1, 2]),
                                               "indices": torch.tensor([1, 0])})
    qv.save_arrays(graph / "features", "feature", {"rows": torch.zeros(2, 3)})
    qv.save_arrays(graph / "labels", "labels", {"y": torch.tensor([0, 1])})
    # Zips of another layout crashed torch's loader (the process, exit 139): refused first.
    loose, nested = tmp_path / "loose.pt2", tmp_path / "nested.pt2"
    with zipfile.ZipFile(loose, "w") as z:
        z.writestr("a.txt", "x")
    with zipfile.ZipFile(nested, "w") as z:
        z.writestr("pkg/a.txt", "x")
    # One flipped byte of a compiled model: torch's C++ reader skips the CRC-32s, and such a
    # package had crashed the runner (SIGILL).
    damaged = tmp_path / "damaged.pt2"
    writer = torch._C.PyTorchFileWriter(str(damaged))
    for record, data in (("archive_format", b"pt2"),
                         ("data/aotinductor/model/x.so", b"\x7fELF" + bytes(5000)),
                         ("data/aotinductor/model/x_metadata.json", b"{}")):
        writer.write_record(record, data, len(data))
    writer.write_end_of_file()
    data = bytearray(damaged.read_bytes())
    data[data.index(b"\x7fELF") + 100] ^= 0xFF
    damaged.write_bytes(bytes(data))
    for package, words in ((tmp_path / "nothing.pt2", "is not a file"),
                           (tmp_path, "is not a file"),
                           (not_a_package, "is not an AOTInductor package"),
                           (loose, "is not an AOTInductor package"),
                           (nested, "is not an AOTInductor package"),
                           (damaged, "is damaged: the record damaged/data/aotinductor/model/x.so "
                                     "fails its CRC-32")):
        done = subprocess.run([RUNNER, str(package), str(graph), "--seeds", "0:2"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and str(package) in done.stderr and words in done.stderr, \
            done.stderr
    done = subprocess.run([RUNNER, str(not_a_package), str(tmp_path), "--verbose"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "unknown option --verbose" in done.stderr, done.stderr
    done = subprocess.run([RUNNER, str(not_a_package), str(graph), "--seed", "1", "--seed", "2"],
                          capture_output=True, text=True, timeout=60)  # (the second had won)
    assert done.returncode == 2 and "option --seed is given twice" in done.stderr, done.stderr
    # -h as an option's value is that value, not a call for help (it had printed usage and
    # written nothing, exit 0); an empty --out is refused (nothing had been written, unsaid).
    done = subprocess.run([RUNNER, str(not_a_package), str(graph), "--out", "-h"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "usage" not in done.stdout, (done.stdout, done.stderr)
    done = subprocess.run([RUNNER, str(not_a_package), str(graph), "--out", ""],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "option --out needs a value, got an empty one" in \
        done.stderr, done.stderr
    done = subprocess.run([RUNNER, str(not_a_package), "--help"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "usage: run_exported" in done.stdout
    done = subprocess.run([RUNNER, str(loose), str(tmp_path / "in"), "--inputs", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--inputs DIR takes the place of GRAPH_DIR" in done.stderr
    for device in ("gpu", "meta", "cpu:3"):
        done = subprocess.run([RUNNER, str(loose), str(graph), "--device", device],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and "--device takes cpu or cuda[:N]" in done.stderr, \
            done.stderr
    # The graph's arrays are checked before the package runs on them, each error naming its
    # file: a corrupt CSR failed inside the package under a generated op's name, 2-D labels
    # broadcast into a wrong accuracy with exit 0, and an --out that cannot be written was
    # found only after the run.
    cases = [("topology", "csr", {"indptr": torch.tensor([0, 2, 1, 2]), "indices": torch.tensor([1, 0])},
              "topology: indptr must be non-decreasing"),
             ("topology", "csr", {"indptr": torch.tensor([0, 1, 2]), "indices": torch.tensor([1, 5])},
              "topology: indices holds node id 5, out of range [0, 2)"),
             ("labels", "labels", {"y": torch.tensor([[0], [1]])},
              "labels: y must be 1-D integer ids, got torch.int64 of shape [2, 1]"),
             ("labels", "labels", {"y": torch.tensor([0.0, 1.0])},
              "labels: y must be 1-D integer ids, got torch.float32"),
             ("labels", "labels", {"y": torch.tensor([0])},
              "labels: y holds 1 labels for the topology's 2 nodes")]
    for case, (part, stem, arrays, words) in enumerate(cases):
        broken = tmp_path / f"broken-{case}"
        shutil.copytree(graph, broken)
        qv.save_arrays(broken / part, stem, arrays)
        done = subprocess.run([RUNNER, str(not_a_package), str(broken), "--seeds", "0:2"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and str(broken) in done.stderr and words in done.stderr, \
            done.stderr
    for argv, words in ((["--seeds", "1:1"], "--seeds A:B takes A < B"),
                        (["--out", "/proc/quiver-out"], "nothing can be written in /proc"),
                        (["--out", str(not_a_package)], "is not a folder")):
        done = subprocess.run([RUNNER, str(not_a_package), str(graph), *argv],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and words in done.stderr, (argv, done.stderr)


@pytest.mark.skipif(not RUNNER, reason="QUIVER_CPP_EXPORT_RUNNER is not set (scripts/test.sh "
                    "builds examples/cpp)")
def test_cpp_runs_the_package_as_eager_does(exported, tmp_path):
    done = subprocess.run([RUNNER, str(exported["package"]), str(exported["directory"] / "graph"),
                           "--seeds", "100:400", "--seed", "5", "--device", exported["device"],
                           "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    arrays, _ = qv.load_arrays(tmp_path / "out", "output")
    seeds = torch.arange(100, 400)
    assert torch.equal(arrays["seeds"], seeds)
    expected = eager(exported["model"], exported["inputs"], seeds.to(exported["device"]), 5)
    torch.testing.assert_close(arrays["scores"], expected.cpu())
    bad = subprocess.run([RUNNER, str(exported["package"]), str(exported["directory"] / "graph"),
                          "--seeds", "0:999999999"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "--seeds" in bad.stderr


@pytest.mark.skipif(not RUNNER, reason="QUIVER_CPP_EXPORT_RUNNER is not set (scripts/test.sh "
                    "builds examples/cpp)")
def test_cpp_refuses_scores_it_cannot_trust(exported, tmp_path):
    """NaN rows scored every seed class 0 and printed an accuracy, rc 0; labels past the
    package's classes were compared all the same; the default --seeds 0:1024 on a smaller
    graph was blamed on the user (a probe)."""
    graph = exported["directory"] / "graph"

    def with_part(name, part, stem, arrays):
        other = tmp_path / name
        other.mkdir()
        for kept in {"topology", "features", "labels"} - {part}:
            (other / kept).symlink_to(graph / kept, target_is_directory=True)
        qv.save_arrays(other / part, stem, arrays)
        return subprocess.run([RUNNER, str(exported["package"]), str(other), "--seeds", "0:64",
                               "--device", exported["device"]],
                              capture_output=True, text=True, timeout=300)

    rows, _ = qv.load_arrays(graph / "features", "feature")
    done = with_part("nan", "features", "feature",
                     {"rows": torch.full_like(rows["rows"], float("nan"))})
    assert done.returncode == 2 and "scores that are not finite" in done.stderr, done.stderr
    labels, _ = qv.load_arrays(graph / "labels", "labels")
    y = labels["y"].clone()
    y[3] = 1000
    done = with_part("labels", "labels", "labels", {**labels, "y": y})
    assert done.returncode == 2 and "labels reach 1000 for these seeds" in done.stderr, \
        done.stderr
    small = tmp_path / "small"
    indptr = torch.tensor([0, 1, 2])
    qv.save_arrays(small / "topology", "csr", {"indptr": indptr, "indices": torch.tensor([1, 0])})
    qv.save_arrays(small / "features", "feature", {"rows": rows["rows"][:2].clone()})
    qv.save_arrays(small / "labels", "labels", {"y": labels["y"][:2].clone()})
    done = subprocess.run([RUNNER, str(exported["package"]), str(small), "--device",
                           exported["device"]], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "on 2 seeds" in done.stdout, done.stdout + done.stderr


@pytest.mark.skipif(not RUNNER, reason="QUIVER_CPP_EXPORT_RUNNER is not set (scripts/test.sh "
                    "builds examples/cpp)")
def test_cpp_refuses_a_table_the_package_was_not_built_for(exported, tmp_path):
    """The compiled kernels read rows of the width and dtype they were exported with: a
    table of another width read past its end (or as other numbers) and scored, rc 0."""
    graph = exported["directory"] / "graph"
    rows, _ = qv.load_arrays(graph / "features", "feature")
    width = rows["rows"].size(1)
    topology, _ = qv.load_arrays(graph / "topology", "csr")
    for table, words in ((torch.zeros(rows["rows"].size(0), width // 2),
                          f"was exported for rows of {width} features"),
                         (torch.zeros(rows["rows"].size(0), width, dtype=torch.float64),
                          "was exported for float32")):
        other = tmp_path / f"graph-{table.size(1)}-{table.dtype}".replace("torch.", "")
        other.mkdir()
        for part in ("topology", "labels"):
            (other / part).symlink_to(graph / part, target_is_directory=True)
        qv.save_arrays(other / "features", "feature", {"rows": table})
        done = subprocess.run([RUNNER, str(exported["package"]), str(other), "--seeds", "0:10",
                               "--device", exported["device"]],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 2 and words in done.stderr, done.stdout + done.stderr
        # The arrays form takes the package's inputs as they are: the table checked alike
        # (it ran on a half-width table and wrote NaN scores, rc 0).
        qv.save_arrays(other / "inputs", "inputs",
                       {"input_0": topology["indptr"], "input_1": topology["indices"],
                        "input_2": table, "input_3": torch.arange(10)})
        done = subprocess.run([RUNNER, str(exported["package"]), "--inputs", str(other / "inputs"),
                               "--out", str(other / "outputs"), "--device", exported["device"]],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 2 and words in done.stderr and "input_2 of --inputs" in \
            done.stderr, done.stdout + done.stderr


def test_compiled_training_step_has_no_graph_break(exported):
    model, inputs, labels = exported["model"], exported["inputs"], exported["labels"]
    model.train()

    def step(indptr, indices, table, seeds):
        scores = model(indptr, indices, table, seeds)
        torch._check(scores.size(0) == seeds.size(0))  # see export_sage.py's docstring
        return F.cross_entropy(scores, labels[seeds])

    seeds = torch.arange(64, device=exported["device"])
    # Dynamo's two switches for data-dependent sizes: the sampled sizes (ops whose output
    # shape depends on their input) and the per-hop counts read from them stay in the graph.
    # fallback_random: dropout draws as eager does, so the losses can be compared.
    with torch._dynamo.config.patch(capture_scalar_outputs=True,
                                    capture_dynamic_output_shape_ops=True), \
            torch._inductor.config.patch(fallback_random=True):
        explanation = torch._dynamo.explain(step)(*inputs, seeds)
        assert explanation.graph_break_count == 0, explanation.break_reasons
        compiled = torch.compile(step, fullgraph=True, dynamic=True)
        for seed in (1, 2):
            torch.manual_seed(seed)
            expected = step(*inputs, seeds)
            torch.manual_seed(seed)
            loss = compiled(*inputs, seeds)
            torch.testing.assert_close(loss, expected)
        loss.backward()
    assert all(p.grad is not None for p in model.parameters())
    model.eval()


def test_every_op_is_tagged_pt2_compliant():
    registered = sorted(name.split("::")[1] for name in torch._C._dispatch_get_all_op_names()
                        if name.startswith("quiver::"))
    assert registered == sorted(OPS)
    for name in OPS:
        assert torch.Tag.pt2_compliant_tag in getattr(torch.ops.quiver, name).default.tags, name


class HoldsTiers(torch.nn.Module):
    def __init__(self, tiers):
        super().__init__()
        self.tiers = tiers
        self.lin = torch.nn.Linear(6, 3)

    def forward(self, ids):
        return self.lin(self.tiers.gather(ids))


def export_holding_tiers():
    """(table, model, exported program) for a model holding a two-tier, reordered table."""
    table = torch.randn(40, 6)
    order = torch.randperm(40)
    positions = torch.empty_like(order)
    positions[order] = torch.arange(40)
    tiers = torch.classes.quiver.FeatureTiers([table[order[:10]].clone(),
                                               table[order[10:]].clone()], positions)
    model = HoldsTiers(tiers)
    count = torch.export.Dim("count", min=1, max=1 << 20)
    program = torch.export.export(model, (torch.tensor([0, 39, 5]),), strict=False,
                                  dynamic_shapes=({0: count},))
    return table, model, program


def test_export_traces_a_model_holding_feature_tiers():
    table, model, program = export_holding_tiers()
    assert any("call_torchbind" in str(node.target) for node in program.graph.nodes)
    ids = torch.randint(40, (25,))
    with torch.no_grad():
        torch.testing.assert_close(program.module()(ids), model.lin(table[ids]))


def test_package_holds_feature_tiers(tmp_path):
    """AOTInductor packages the held FeatureTiers too (through its pickle)."""
    table = torch.randn(40, 6)
    tiers = torch.classes.quiver.FeatureTiers([table[:15].clone(), table[15:].clone()], None)
    model = HoldsTiers(tiers)
    count = torch.export.Dim("count", min=1, max=1 << 20)
    program = torch.export.export(model, (torch.tensor([0, 39, 5]),), strict=False,
                                  dynamic_shapes=({0: count},))
    path = torch._inductor.aoti_compile_and_package(program, package_path=str(tmp_path / "t.pt2"))
    package = torch._inductor.aoti_load_package(path)
    ids = torch.randint(40, (25,))
    with torch.no_grad():
        torch.testing.assert_close(package(ids), model.lin(table[ids]))


def run_package_in_cpp(package, inputs, tmp_path):
    """The package run by examples/cpp/run_exported on raw arrays: its outputs."""
    qv.save_arrays(tmp_path / "inputs", "inputs",
                   {f"input_{i}": t for i, t in enumerate(inputs)})
    done = subprocess.run([RUNNER, str(package), "--inputs", str(tmp_path / "inputs"),
                           "--out", str(tmp_path / "outputs")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    arrays, _ = qv.load_arrays(tmp_path / "outputs", "outputs")
    return [arrays[f"output_{i}"] for i in range(len(arrays))]


@pytest.mark.skipif(not RUNNER, reason="QUIVER_CPP_EXPORT_RUNNER is not set (scripts/test.sh "
                    "builds examples/cpp)")
def test_cpp_runs_a_package_holding_feature_tiers(tmp_path):
    table, model, program = export_holding_tiers()
    path = torch._inductor.aoti_compile_and_package(program, package_path=str(tmp_path / "t.pt2"))
    ids = torch.randint(40, (57,))
    (scores,) = run_package_in_cpp(path, [ids], tmp_path)
    with torch.no_grad():
        torch.testing.assert_close(scores, model.lin(table[ids]))
    # A bad id: its one-line error, without the 40 lines of C++ frames the package's log
    # of the op's exception had held.
    qv.save_arrays(tmp_path / "bad", "inputs", {"input_0": torch.tensor([0, 41])})
    done = subprocess.run([RUNNER, str(path), "--inputs", str(tmp_path / "bad"), "--out",
                           str(tmp_path / "bad_out")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "ids[1] = 41 is out of range [0, 40)" in done.stderr
    assert "frame #" not in done.stderr, done.stderr


class HoldsShardMap(torch.nn.Module):
    """Where each id lives (host, local row), and a score from the local rows of a table."""

    def __init__(self, shard_map, tiers):
        super().__init__()
        self.shard_map = shard_map
        self.tiers = tiers

    def forward(self, ids):
        host, local = self.shard_map.locate(ids)
        mine = (host <= 0).unsqueeze(1)  # replicated or on host 0
        return host, local, torch.where(mine, self.tiers.gather(ids), 0.0).sum(1)


def test_export_and_package_a_model_holding_a_shard_map(tmp_path):
    n = 60
    shard_map = qv.dist.build_shard_map(n, 3, torch.randperm(n), 0.25)
    table = torch.randn(n, 4)
    model = HoldsShardMap(shard_map,
                          torch.classes.quiver.FeatureTiers([table.clone()], None))
    count = torch.export.Dim("count", min=1, max=1 << 20)
    program = torch.export.export(model, (torch.tensor([0, 59, 5]),), strict=False,
                                  dynamic_shapes=({0: count},))
    ids = torch.randint(n, (33,))
    host_of, local_index = shard_map.host_of().long(), shard_map.local_index()
    expected = (host_of[ids], local_index[ids],
                torch.where((host_of[ids] <= 0).unsqueeze(1), table[ids], 0.0).sum(1))
    for outputs in (model(ids), program.module()(ids)):
        for got, want in zip(outputs, expected):
            torch.testing.assert_close(got, want)
    path = torch._inductor.aoti_compile_and_package(program, package_path=str(tmp_path / "m.pt2"))
    for got, want in zip(torch._inductor.aoti_load_package(path)(ids), expected):
        torch.testing.assert_close(got, want)
    with pytest.raises(IndexError, match="out of range"):
        program.module()(torch.tensor([n]))  # the real map checks ids when the program runs
    if RUNNER:
        for got, want in zip(run_package_in_cpp(path, [ids], tmp_path), expected):
            torch.testing.assert_close(got, want)


def test_fake_transport_and_dist_feature_answer_as_the_real_ones():
    from torch_quiver_ops import _fake
    flat = dict(torch.classes.quiver.ShardMap.build(torch.arange(10), 2, 2, None).__obj_flatten__())
    assert set(flat) == {"host_of", "local_index", "num_hosts", "num_replicated", "local_rows",
                         "fingerprint"} and flat["num_hosts"] == 2
    fake = _fake.FakeDistFeature(torch.empty(0, 5, dtype=torch.bfloat16), 10, 0, 2)
    rows = fake.gather(torch.zeros(7, dtype=torch.long))
    assert rows.shape == (7, 5) and rows.dtype == torch.bfloat16
    # DistFeature.__getitem__ passes this thread's host_read_blocks too.
    assert fake.gather(torch.zeros(3, dtype=torch.long), 0).shape == (3, 5)
    # 0-d ids failed the trace with "tuple index out of range", and 2-D ids traced, to be
    # refused when the program ran (a probe): the kernels' refusal, while traced.
    shard_map = _fake.FakeShardMap(**flat)
    for call in (fake.gather, shard_map.locate):
        with pytest.raises(ValueError, match=r"ids must be a 1-D tensor, got shape \[\]"):
            call(torch.tensor(3))
        with pytest.raises(ValueError, match=r"ids must be a 1-D tensor, got shape \[1, 2\]"):
            call(torch.tensor([[1, 2]]))


class ReadsSettings(torch.nn.Module):
    """Branches on a FeatureTiers' setting and reads a ShardMap's counts and local ids."""

    def __init__(self, shard_map, tiers):
        super().__init__()
        self.shard_map = shard_map
        self.tiers = tiers

    def forward(self, ids):
        rows = self.tiers.gather(ids)
        if self.tiers.stages_host_rows() and self.tiers.follows_loader_pace():
            rows = rows * 2
        local = self.shard_map.local_ids(1)
        return (rows.sum(1) + self.shard_map.num_replicated() + self.shard_map.local_rows(0),
                local.float().sum().expand(1))


def test_fake_classes_answer_every_method_as_the_real_ones():
    """The fakes lacked most of the real classes' methods (export failed on
    host_read_share, num_replicated, local_rows, local_ids), and stages_host_rows was
    always False, so a model that branched on it exported the other branch (a probe)."""
    n = 30
    table = torch.randn(n, 4)
    shard_map = qv.dist.build_shard_map(n, 2, torch.randperm(n), 0.2)
    for stage in (False, True):
        tiers = torch.classes.quiver.FeatureTiers([table.clone()], None)
        tiers.set_stage_host_rows(stage)
        model = ReadsSettings(shard_map, tiers)
        program = torch.export.export(model, (torch.tensor([0, 5, 7]),), strict=False)
        ids = torch.tensor([3, 1, 4])
        for got, want in zip(program.module()(ids), model(ids)):
            torch.testing.assert_close(got, want)
    # a fake rebuilt from the real object's flattened state keeps its settings
    from torch_quiver_ops import _fake
    tiers.set_host_read_share(0.25)
    fake = _fake.FakeFeatureTiers(**dict(tiers.__obj_flatten__()))
    assert fake.stages_host_rows() and fake.host_read_share() == 0.25
    assert fake.host_read_share_fixed() and fake.follows_loader_pace()
    # A learned share (it moves batch by batch) is not flattened: torch.compile guards on
    # every flattened value and recompiled as it moved.
    tiers.set_host_read_share(None)
    assert dict(tiers.__obj_flatten__())["fixed_host_read_share"] == -1.0
    learning = _fake.FakeFeatureTiers(**dict(tiers.__obj_flatten__()))
    assert not learning.host_read_share_fixed()
    # an unfixed fake answers the share a fresh real layout starts from (one constant, in C++)
    fresh = torch.classes.quiver.FeatureTiers([table.clone()], None)
    assert learning.host_read_share() == fresh.host_read_share() == pytest.approx(0.3)
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        fake.set_host_read_share(2.0)
    fake_map = _fake.FakeShardMap(**dict(shard_map.__obj_flatten__()))
    assert [fake_map.local_rows(h) for h in range(2)] == [shard_map.local_rows(h)
                                                          for h in range(2)]
    assert fake_map.fingerprint() == shard_map.fingerprint()


def test_a_features_first_read_may_be_compiled():
    """The store's first read built its FeatureTiers inside the traced function, as a fake
    without the setters the build calls: torch.compile failed (a probe). It is built
    eagerly now; later reads compile in one graph."""
    table = torch.randn(50, 3)
    feature = qv.Feature(rank=0, device_list=[], device_cache_size=0)
    feature.from_cpu_tensor(table)
    ids = torch.tensor([1, 5, 7])
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(lambda i: feature[i] * 2)(ids), table[ids] * 2)
    again = torch.compile(lambda i: feature[i] + 1, fullgraph=True)
    torch.testing.assert_close(again(ids), table[ids] + 1)


@pytest.mark.parametrize("call, inputs, error, words", [
    (lambda t, i: qv.ops.gather_rows(t, i), (torch.randn(4, 2), torch.tensor(1)), ValueError,
     "ids must be a 1-D tensor"),
    (lambda t, i: qv.ops.gather_rows(t, i), (torch.randn(4, 2), torch.tensor([1.0])), TypeError,
     "ids must hold int32 or int64 ids"),
    (lambda i: torch.ops.quiver.gather_tiered_rows([], None, i), (torch.tensor([1]),),
     ValueError, "tiers must hold 1 to 17 tensors, got 0"),
    (lambda a, b, i: torch.ops.quiver.gather_tiered_rows([a, b], None, i),
     (torch.randn(4, 2), torch.randn(4, 3), torch.tensor([1])), ValueError,
     "tiers\\[1\\] has rows of shape"),
    (lambda r, c: qv.ops.csr_from_coo(r, c, -5), (torch.tensor([0]), torch.tensor([1])),
     ValueError, "num_nodes must be >= 0, got -5"),
    # (a probe: indices took col's size and edge_ids row's, so code adding them failed with
    # a shape error while traced)
    (lambda r, c: (lambda out: out[1] + out[2])(torch.ops.quiver.csr_from_coo(r, c, 5)),
     (torch.tensor([0, 1, 2]), torch.tensor([1, 2])), ValueError,
     r"row has \S+ entries but col has"),
    (lambda p, i, s: torch.ops.quiver.sample_subgraph(p, i, s, []),
     (torch.tensor([0, 1]), torch.tensor([0]), torch.tensor([0])), ValueError,
     "fanouts must name at least one hop"),
    (lambda p, i, s: qv.ops.sample_negatives(p, i, s, -1),
     (torch.tensor([0, 1]), torch.tensor([0]), torch.tensor([0])), ValueError,
     "per_src must be >= 0, got -1"),
    # Sizes past the kernels' bounds (a probe: torch's "Storage size calculation
    # overflowed" and "Overflow when unpacking long long" while traced)
    (lambda r, c: qv.ops.csr_from_coo(r, c, 2**61), (torch.tensor([0]), torch.tensor([1])),
     ValueError, "num_nodes = 2305843009213693952 is too large"),
    (lambda p, i, s: qv.ops.sample_negatives(p, i, s, 2**62),
     (torch.tensor([0, 1, 2]), torch.tensor([1, 0]), torch.tensor([0, 1, 0, 1])), ValueError,
     r"the negatives \(src x per_src\) would be \S+, over the limit of 4294967294: draw "
     r"fewer negatives per source \(per_src\)"),
    # What a fake also knows of the checks and samplers (they had passed while traced)
    (lambda o: qv.ops.check_permutation(o, 3, "order"), (torch.tensor([[0, 1, 2]]),),
     TypeError, "order must be a 1-D tensor of int32/int64 ids"),
    (lambda o: qv.ops.check_permutation(o, 4, "order"), (torch.arange(3),), ValueError,
     "order must list each of the 4 rows once, got 3 ids"),  # (a number, not a symbol)
    (lambda p, i, s: torch.ops.quiver.sample_neighbors(p, i, s, 1),
     (torch.empty(0, dtype=torch.long), torch.tensor([0]), torch.tensor([0])), ValueError,
     r"indptr must be a 1-D tensor of num_nodes \+ 1 offsets, got shape \[0\]"),
    # (traced, then refused only when the program ran: a probe)
    (lambda p, i, e: torch.ops.quiver.check_csr(p, i, e),
     (torch.tensor([0, 2, 3]), torch.tensor([1, 0, 1]), torch.tensor([0])), ValueError,
     r"edge_ids has \S+ entries but indices has"),
    (lambda p, i, s: qv.ops.sample_negatives(p, i, s, 1, max_trials=0),
     (torch.tensor([0, 1]), torch.tensor([0]), torch.tensor([0])), ValueError,
     r"max_trials must be in \[1, 1000\], got 0"),
    (lambda p, i, s: qv.ops.sample_negatives(p, i, s, 1, dst_begin=2),
     (torch.tensor([0, 1]), torch.tensor([0]), torch.tensor([0])), ValueError,
     "dst_begin = 2 is outside the graph's"),
    (lambda p, i, s, w: torch.ops.quiver.neighbor_sample(p, i, s, [1], edge_weight=w),
     (torch.tensor([0, 2, 3]), torch.tensor([1, 0, 1]), torch.tensor([0]),
      torch.ones(3, dtype=torch.float64)), TypeError,
     "edge_weight must be torch.float32, got torch.float64"),
    # Two checks failing at once: the first in the kernel's order (the fake had raised the
    # other, of another type: a probe).
    (lambda p, i, s, t, e: torch.ops.quiver.neighbor_sample(p, i, s, [1], edge_time=e,
                                                            seed_time=t),
     (torch.tensor([0, 2, 3]), torch.tensor([1, 0, 1]), torch.tensor([0]),
      torch.tensor([5], dtype=torch.int32), torch.zeros(3, dtype=torch.long)), TypeError,
     "seed_time must be int64, got torch.int32"),
    (lambda r, c: qv.ops.csr_from_coo(r, c, 20), (torch.arange(8), torch.arange(3).int()),
     ValueError, r"row has \S+ entries but col has"),
])
def test_traced_calls_raise_the_ops_own_errors(call, inputs, error, words):
    """Under torch.compile a bad call failed in the fake kernel with an unrelated error
    (IndexError: tuple index out of range for 0-d ids, a negative dimension): the fakes
    now make the ops' checks of what a fake tensor also has, with their sentences."""
    with pytest.raises(error, match=words):
        call(*inputs)  # eager: the op's own check
    torch._dynamo.reset()
    # Raised while tracing (dynamo wraps the fake's error): a fake that let the call through
    # would leave the op to raise the same words when the graph runs, as its own type.
    with pytest.raises(torch._dynamo.exc.TorchRuntimeError, match=words):
        torch.compile(call, fullgraph=True, dynamic=True)(*inputs)


def test_the_fanouts_check_checks_its_fanouts_while_traced():
    # (its fake had returned at once: a bad list passed while traced, to raise when run)
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        torch.ops.quiver.check_fanouts([2, -1, 0], False, "sizes")
        with pytest.raises(ValueError, match=r"sizes must name at least one hop, got \[\]"):
            torch.ops.quiver.check_fanouts([], False, "sizes")
        with pytest.raises(ValueError, match=r"sizes\[1\] must be -1 \(all neighbors\) or "
                                             r">= 0, got -2"):
            torch.ops.quiver.check_fanouts([3, -2], False, "sizes")
        torch.ops.quiver.check_fanouts([2**33], False, "sizes")  # without replacement: fine
        with pytest.raises(ValueError, match=r"sizes\[0\] with replacement, the picks of one "
                                             r"node would be 8589934592, over the limit"):
            torch.ops.quiver.check_fanouts([2**33], True, "sizes")
    with pytest.raises(ValueError, match="the picks of one node would be 8589934592"):
        torch.ops.quiver.check_fanouts([2**33], True, "sizes")  # eager: the kernel's words


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("check, inputs, error, words", [
    (qv.ops.check_csr, (torch.tensor([0, 2, 3]), torch.tensor([0, 7, 1])), IndexError,
     "indices holds node id 7, out of range"),
    (lambda order: qv.ops.check_permutation(order, 3, "order"), (torch.tensor([0, 1, 1]),),
     ValueError, "order is not a permutation"),
])
def test_checks_that_return_nothing_still_run_when_compiled(backend, check, inputs, error,
                                                             words):
    """A probe: torch.compile dropped the check ops (they return nothing) as dead code, so
    a corrupt CSR passed silently where eager and export raise."""
    def step(x, *args):
        check(*args)
        return x + 1

    torch._dynamo.reset()
    # Not from a cache another build of the library filled (it may hold the graph without
    # the check).
    with torch._inductor.config.patch(fx_graph_cache=False), \
            torch._functorch.config.patch(enable_autograd_cache=False):
        compiled = torch.compile(step, backend=backend, fullgraph=True)
        with pytest.raises(error, match=words):
            compiled(torch.ones(2), *inputs)


def test_meta_positions_beside_real_tensors_are_refused():
    """A meta positions tensor beside real tiers and ids ran the fake and returned
    uninitialized memory (a probe); check_csr with a meta indptr checked nothing."""
    table = torch.arange(6.0).view(3, 2)
    with pytest.raises(ValueError, match="positions on the meta device"):
        qv.ops.gather_tiered_rows([table], torch.arange(3).to("meta"), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="indptr on the meta device"):
        qv.ops.check_csr(torch.tensor([0, 1, 1]).to("meta"), torch.tensor([99]))


def test_a_file_that_is_no_package_is_named(tmp_path):
    from torch_quiver_ops import aoti
    junk = tmp_path / "model.pt2"
    junk.write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="model.pt2 is not an AOTInductor package"):
        aoti.load_package(junk)
    with pytest.raises(FileNotFoundError, match="no AOTInductor package at"):
        aoti.load_package(tmp_path / "missing.pt2")


def static_libstdcxx_compiler(tmp_path) -> str:
    """A g++ that links libstdc++ statically into shared libraries, as the GPU machine's
    default compiler does."""
    wrapper = tmp_path / "static-g++"
    wrapper.write_text('#!/bin/sh\nexec g++ -static-libstdc++ "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


@pytest.mark.skipif(not Path("/usr/bin/g++").exists(), reason="needs g++")
def test_a_compiler_linking_libstdcxx_statically_is_refused_before_compiling(tmp_path):
    wrapper = static_libstdcxx_compiler(tmp_path)
    # config.patch, not monkeypatch: undoing a monkeypatch deletes the option from
    # inductor's config, and every later compile in the process then fails.
    with torch._inductor.config.patch({"cpp.cxx": (wrapper,)}):
        with pytest.raises(RuntimeError,
                           match="links libstdc\\+\\+ statically.*CXX=/usr/bin/g\\+\\+"):
            qv.aoti.check_compiler()
        program = torch.export.export(torch.nn.Linear(2, 2), (torch.ones(1, 2),))
        with pytest.raises(RuntimeError, match="static-g\\+\\+"):
            qv.aoti.compile_and_package(program, tmp_path / "never.pt2")
    assert not (tmp_path / "never.pt2").exists()
    with torch._inductor.config.patch({"cpp.cxx": ("/usr/bin/g++",)}):
        assert qv.aoti.check_compiler() == "/usr/bin/g++"


@pytest.mark.skipif(not Path("/usr/bin/g++").exists(), reason="needs g++")
def test_a_package_linking_libstdcxx_statically_is_refused_before_loading(tmp_path):
    source = tmp_path / "model.cpp"
    source.write_text('#include <string>\nextern "C" int f() { return std::string("x").size(); }\n')
    library = tmp_path / "model.so"
    subprocess.run([static_libstdcxx_compiler(tmp_path), "-shared", "-fPIC", str(source), "-o",
                    str(library)], check=True)
    package = tmp_path / "model.pt2"
    with zipfile.ZipFile(package, "w") as archive:
        archive.writestr("model/archive_format", "pt2")  # the layout torch's loader needs
        archive.write(library, "model/data/aotinductor/model/model.so")
        archive.writestr("model/data/aotinductor/model/model_metadata.json", "{}")
    with pytest.raises(RuntimeError, match="model.pt2 holds .*links libstdc\\+\\+ statically"):
        qv.aoti.load_package(package)
    # One flipped byte of the compiled model: zipfile's CRC error named no package.
    data = bytearray(package.read_bytes())
    data[data.index(b"ELF") + 100] ^= 0xFF
    package.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="model.pt2 is corrupt \\(a damaged zip archive"):
        qv.aoti.load_package(package)


def test_a_feature_table_given_by_keyword_is_refused_not_passed_unchecked():
    """From a probe: the wrapper checked the table only by position, so one given by
    keyword reached the package unchecked (and a narrower one is read past its end)."""
    from torch_quiver_ops.aoti import FeatureCheckedPackage
    calls = []
    package = FeatureCheckedPackage(lambda *a, **k: calls.append((a, k)) or "ran", 1, 4,
                                    "float32", "model.pt2")
    ids = torch.tensor([0, 1])
    with pytest.raises(ValueError, match="pass model.pt2's inputs by position: the feature "
                                         r"table is argument 1, .* keywords \['table'\]"):
        package(ids, table=torch.zeros(5, 3))
    with pytest.raises(ValueError, match="the feature table"):
        package(ids, torch.zeros(5, 3))
    assert calls == []
    assert package(ids, torch.zeros(5, 4)) == "ran"
