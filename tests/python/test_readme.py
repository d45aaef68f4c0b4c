"""The README as a newcomer reads it: its runnable snippets run verbatim from the repository
root (where Python imports the source tree), its C++ prefix command finds the installed
CMake package from there, its diff of the PyG example is the example, and every file the
docs name exists inside the repository."""
import os
import re
import subprocess
import sys
from pathlib import Path

import importlib.metadata

import pytest

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def blocks(language):
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def installed() -> bool:
    try:
        importlib.metadata.distribution("torch-quiver-ops")
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


# The README's commands presume the set-up its two commands make (the package installed);
# machines that test a build folder instead (the GPU machine's check) skip them.
needs_the_installed_package = pytest.mark.skipif(
    not installed(), reason="the package is not installed (scripts/setup.sh installs it)")


def from_the_root(args, **kwargs):
    env = {k: v for k, v in os.environ.items() if k != "TORCH_QUIVER_OPS_LIBRARY"}
    env.pop("PYTHONPATH", None)
    return subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, **kwargs)


@needs_the_installed_package
def test_the_first_snippet_runs_from_the_repository_root():
    snippet = blocks("python")[0]
    assert snippet.startswith("import torch\nimport torch_quiver_ops as qv"), snippet[:80]
    result = from_the_root([sys.executable, "-c", snippet], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]


@needs_the_installed_package
def test_the_cpp_prefix_command_finds_the_package_from_the_repository_root():
    line = next(l for bash in blocks("bash") for l in bash.splitlines() if l.startswith("prefix="))
    python = REPO / ".venv" / "bin" / "python"
    if not python.exists():  # machines that set up no .venv (the GPU machine's own Python)
        line = line.replace(".venv/bin/python", sys.executable)
    result = from_the_root(["bash", "-c", f'{line}\nprintf %s "$prefix"'], timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    ours, torchs = result.stdout.split(";")
    assert (Path(ours) / "lib" / "cmake" / "TorchQuiverOps" / "TorchQuiverOpsConfig.cmake").exists()
    assert (Path(torchs) / "Torch" / "TorchConfig.cmake").exists()


def test_the_pyg_diff_is_the_example():
    diff = next(b for b in re.findall(r"```diff\n(.*?)```", README, flags=re.S)
                if "NeighborLoader" in b)
    example = (REPO / "examples" / "pyg_neighbor_loader.py").read_text()
    stripped = [re.sub(r"\s+#.*$", "", line).strip() for line in example.splitlines()]
    for line in diff.splitlines():
        sign, text = line[:1], line[1:].strip()
        if sign == "-" or text in ("", "..."):
            continue
        assert text in stripped, f"the README's diff line {line!r} is not in the example"


# Paths the docs name in backticks: under one of the repository's folders, or its top files.
ROOTS = ("ops/", "runtime/", "scripts/", "examples/", "tests/", "docs/", "torch_quiver_ops/",
         ".ci/")


def named_paths(text):
    for token in re.findall(r"`([^`\s]+)`", text):
        token = re.sub(r":\d+(-\d+)?$", "", token)  # file:line
        if any(c in token for c in "<>*{}$…") or "://" in token:
            continue
        if token.startswith(ROOTS) or token in ("library.cpp", "CMakeLists.txt", "README.md",
                                                 "pyproject.toml"):
            yield token.rstrip(".,;:)")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_path_the_docs_name_exists_in_the_repository(doc):
    text = doc.read_text()
    missing = sorted({p for p in named_paths(text) if not (REPO / p).exists()})
    assert not missing, f"{doc.name} names files that do not exist: {missing}"
    for target in re.findall(r"\]\(([^)#\s]+)", text):  # markdown links
        if "://" in target:
            continue
        resolved = (doc.parent / target).resolve()
        assert resolved.is_relative_to(REPO), f"{doc.name} links outside the repository: {target}"
        assert resolved.exists(), f"{doc.name} links to a missing file: {target}"
