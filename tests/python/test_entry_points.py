"""Every way in: TorchScript (script, save, load), a libtorch C++ binary that runs the
saved model, torch.compile, and the import-time version check."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torch_quiver_ops as qv
from torch_quiver_ops._load import check_build_matches


class SampleAndGather(torch.nn.Module):
    """Builds a CSR, samples two hops and gathers the sampled nodes' features."""

    def forward(self, row: torch.Tensor, col: torch.Tensor, num_nodes: int,
                seeds: torch.Tensor, x: torch.Tensor):
        indptr, indices, eid = torch.ops.quiver.csr_from_coo(row, col, num_nodes)
        node_ids, rows, cols, eids, nodes_per_hop, edges_per_hop = \
            torch.ops.quiver.sample_subgraph(indptr, indices, seeds, [3, 2], False, eid)
        counts, neighbors, _ = torch.ops.quiver.sample_neighbors(indptr, indices, seeds, 2,
                                                                 False, None)
        return torch.ops.quiver.gather_rows(x, node_ids), node_ids, rows, cols, counts


def ring(num_nodes=30):
    row = torch.arange(num_nodes)
    return torch.cat([row, row]), torch.cat([(row + 1) % num_nodes, (row - 1) % num_nodes])


def scripted_model_path(tmp_path: Path) -> Path:
    path = tmp_path / "sample_and_gather.pt"
    torch.jit.script(SampleAndGather()).save(str(path))
    return path


def test_torchscript_round_trip(tmp_path):
    loaded = torch.jit.load(str(scripted_model_path(tmp_path)))
    row, col = ring()
    x = torch.randn(30, 4)
    seeds = torch.tensor([0, 10])
    feats, node_ids, rows, cols, counts = loaded(row, col, 30, seeds, x)
    assert torch.equal(feats, x[node_ids])
    assert node_ids[:2].tolist() == [0, 10]
    # on a ring every edge joins ids one apart, and with fanouts of at least the degree
    # both hops take every neighbor: 4 + 8 edges over these 10 nodes (an empty sample had
    # passed the check of its edges)
    diff = (node_ids[rows] - node_ids[cols]).remainder(30)
    assert torch.all((diff == 1) | (diff == 29)) and rows.numel() == cols.numel() == 12
    assert sorted(node_ids.tolist()) == [0, 1, 2, 8, 9, 10, 11, 12, 28, 29]
    assert counts.tolist() == [2, 2]


def cpp_binary(name: str) -> Path:
    build_dir = os.environ.get("QUIVER_TEST_BINARY_DIR")
    if not build_dir:
        if os.environ.get("QUIVER_REQUIRE_CPP_TESTS"):
            pytest.fail("QUIVER_REQUIRE_CPP_TESTS is set but QUIVER_TEST_BINARY_DIR is not")
        pytest.skip("set QUIVER_TEST_BINARY_DIR to the C++ test binaries' folder")
    path = Path(build_dir) / name
    assert path.exists(), f"{path} was not built (configure with -DBUILD_TESTING=ON)"
    return path


def test_libtorch_binary_runs_the_saved_model(tmp_path):
    binary = cpp_binary("run_scripted_model")
    result = subprocess.run([str(binary), str(scripted_model_path(tmp_path))],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "sampled" in result.stdout


class HoldsRuntimeClasses(torch.nn.Module):
    """A scripted module holding a feature store layout and a shard map (pickled with it),
    with what they must answer saved beside them, so a program that loads it can check."""

    def __init__(self, table: torch.Tensor, ids: torch.Tensor):
        super().__init__()
        order = torch.randperm(table.size(0))
        positions = torch.empty_like(order)
        positions[order] = torch.arange(table.size(0))
        split = table.size(0) // 3
        self.tiers = torch.classes.quiver.FeatureTiers(
            [table[order[:split]].clone(), table[order[split:]].clone()], positions)
        self.shard_map = torch.classes.quiver.ShardMap.build(order, 3, 4, None)
        self.ids = ids
        self.expected_rows = table[ids]
        self.expected_hosts = self.shard_map.locate(ids)[0]

    def forward(self, ids: torch.Tensor):
        return self.tiers.gather(ids), self.shard_map.locate(ids)[0]


def held_classes_model_path(tmp_path: Path) -> Path:
    table = torch.randn(50, 6)
    module = HoldsRuntimeClasses(table, torch.tensor([0, 49, 7, 7, 23]))
    path = tmp_path / "holds_runtime_classes.pt"
    torch.jit.script(module).save(str(path))
    return path


def test_scripted_module_keeps_its_runtime_classes(tmp_path):
    loaded = torch.jit.load(str(held_classes_model_path(tmp_path)))
    rows, hosts = loaded(loaded.ids)
    assert torch.equal(rows, loaded.expected_rows)
    assert torch.equal(hosts, loaded.expected_hosts)


def test_libtorch_binary_runs_a_model_holding_runtime_classes(tmp_path):
    binary = cpp_binary("run_scripted_model")
    result = subprocess.run([str(binary), "--held-classes", str(held_classes_model_path(tmp_path))],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "restored" in result.stdout


def test_torch_compile_fullgraph():
    row, col = ring()
    indptr, indices, eid = qv.ops.csr_from_coo(row, col, 30)
    x = torch.randn(30, 8)

    def step(seeds):
        node_ids, rows, cols, eids, _, _ = torch.ops.quiver.sample_subgraph(
            indptr, indices, seeds, [2, 2], False, eid)
        feats = torch.ops.quiver.gather_rows(x, node_ids)
        return feats.sum(1), node_ids, rows, cols

    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    sums, node_ids, rows, cols = compiled(torch.tensor([3, 17]))
    assert torch.allclose(sums, x[node_ids].sum(1))
    diff = (node_ids[rows] - node_ids[cols]).remainder(30)
    assert torch.all((diff == 1) | (diff == 29)) and rows.numel() == 12  # every neighbor
    assert sorted(node_ids.tolist()) == [1, 2, 3, 4, 5, 15, 16, 17, 18, 19]


def test_version_mismatch_is_explained():
    check_build_matches({"torch": torch.__version__, "cuda": ""})
    with pytest.raises(ImportError, match="built against torch 1.0.0, but torch .* is running"):
        check_build_matches({"torch": "1.0.0", "cuda": ""})
    if torch.version.cuda:
        with pytest.raises(ImportError, match="built with CUDA 9.2"):
            check_build_matches({"torch": torch.__version__, "cuda": "9.2"})


def test_a_cuda_build_under_a_torch_without_cuda_is_explained(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", None)
    with pytest.raises(ImportError, match="built with CUDA 13.0, but this torch .* has no CUDA"):
        check_build_matches({"torch": torch.__version__, "cuda": "13.0"})
    check_build_matches({"torch": torch.__version__, "cuda": ""})  # a CPU build loads


def test_a_library_path_that_is_no_library_is_explained(tmp_path, monkeypatch):
    from torch_quiver_ops import _load
    fake = tmp_path / "libtorch_quiver_ops.so"
    fake.write_text("not a shared library")
    monkeypatch.setenv("TORCH_QUIVER_OPS_LIBRARY", str(fake))
    with pytest.raises(ImportError, match="could not be loaded as torch-quiver-ops' library.*"
                                          "TORCH_QUIVER_OPS_LIBRARY points there"):
        _load.load_library()
    # the loader's own reason is kept (torch's message names only the path)
    with pytest.raises(ImportError, match="header|too short|ELF"):
        _load.load_library()
    # ~ is the home folder, as in a shell
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("TORCH_QUIVER_OPS_LIBRARY", "~/libtorch_quiver_ops.so")
    assert _load.library_path() == fake.resolve()
    # and for find_package too (cmake_prefix_path had pointed at another package's library)
    package = tmp_path / "pk"
    (package / "lib").mkdir(parents=True)
    (package / "lib" / "libtorch_quiver_ops.so").write_text("")
    (package / _load._CMAKE_CONFIG).parent.mkdir(parents=True, exist_ok=True)
    (package / _load._CMAKE_CONFIG).write_text("")
    monkeypatch.setenv("TORCH_QUIVER_OPS_LIBRARY", "~/pk/lib/libtorch_quiver_ops.so")
    assert _load.package_root() == package.resolve()
    monkeypatch.setenv("TORCH_QUIVER_OPS_LIBRARY", "~/libtorch_quiver_ops.so")
    # a shared library that loads but is not ours (it had failed later, in torch, with
    # "operator quiver::check_csr does not exist")
    other = Path(torch.__file__).parent / "lib" / "libc10.so"
    result = subprocess.run([sys.executable, "-c", "import torch_quiver_ops"],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "TORCH_QUIVER_OPS_LIBRARY": str(other)})
    assert result.returncode != 0
    assert "ImportError" in result.stderr and "loaded, but it is not torch-quiver-ops' " \
        "library (it registers no quiver ops); $TORCH_QUIVER_OPS_LIBRARY points there" in \
        result.stderr, result.stderr[-800:]
    # a build record whose fields are not the strings the install writes
    (tmp_path / "build_info.json").write_text('{"torch": 2.11, "cuda": ""}')
    with pytest.raises(ImportError, match="is not the build record the install writes"):
        _load.load_library()


def test_a_source_checkout_without_a_library_names_both_ways_to_build_it(monkeypatch):
    from torch_quiver_ops import _load
    monkeypatch.delenv("TORCH_QUIVER_OPS_LIBRARY", raising=False)
    monkeypatch.setattr(_load, "_is_source_checkout", lambda directory: True)
    message = _load._missing_library_message(Path("libtorch_quiver_ops.so"))
    assert "bash scripts/setup.sh" in message
    assert "pip install --no-build-isolation ." in message and "scikit-build-core" in message


def test_without_pyg_the_package_imports_and_its_pyg_parts_say_what_to_install():
    """PyG is optional ([pyg]): without it a star import, hasattr(qv, "pyg") and
    getattr(qv, "pyg", None) had raised ModuleNotFoundError, and qv.pyg named no install
    (a probe)."""
    code = """
import importlib.machinery, sys
class Blocked(importlib.machinery.PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.split(".")[0] == "torch_geometric":
            return None
        return super().find_spec(name, path, target)
sys.meta_path[:] = [Blocked if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
import torch_quiver_ops as qv
from torch_quiver_ops import *
assert "pyg" not in qv.__all__ and not hasattr(qv, "pyg") and getattr(qv, "pyg", None) is None
try:
    import torch_quiver_ops.pyg
except ImportError as error:
    print("pyg:", error)
try:
    qv.synthetic_hetero.mag_like(scale=0.001, seed=0).to_hetero_data()
except ImportError as error:
    print("hetero:", error)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "pyg: torch_quiver_ops.pyg needs PyG: pip install torch-geometric" in result.stdout
    assert "hetero: to_hetero_data needs PyG: pip install torch-geometric" in result.stdout
