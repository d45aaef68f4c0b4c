"""The source tree keeps its one-way layers: ops/ never includes runtime/ (nor the runtime's
public headers), the registrar (library.cpp) is the one TORCH_LIBRARY, backends only add
TORCH_LIBRARY_IMPL blocks, and .cu files stay torch-free."""
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUNTIME_HEADERS = {p.name for p in (REPO / "runtime" / "include" / "quiver").glob("*.h")}


def sources(folder, suffixes=(".h", ".cuh", ".cpp", ".cu")):
    return [p for p in (REPO / folder).rglob("*") if p.suffix in suffixes]


def includes(path):
    return re.findall(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', path.read_text(), re.M)


@pytest.mark.skipif(not (REPO / "ops").is_dir(), reason="needs the source tree")
def test_ops_never_include_the_runtime():
    offenders = [f"{p.relative_to(REPO)}: {inc}" for p in sources("ops") for inc in includes(p)
                 if inc.startswith("runtime/") or
                 (inc.startswith("quiver/") and inc.split("/", 1)[1] in RUNTIME_HEADERS)]
    assert not offenders, offenders


@pytest.mark.skipif(not (REPO / "ops").is_dir(), reason="needs the source tree")
def test_one_registrar_and_torch_free_kernels():
    every = sources("ops") + sources("runtime") + [REPO / "library.cpp"]
    registrars = [p for p in every if re.search(r"\bTORCH_LIBRARY\s*\(", p.read_text())]
    assert registrars == [REPO / "library.cpp"]
    kernels = [p for p in every if p.suffix in (".cu", ".cuh")]
    assert kernels
    torch_in_kernels = [f"{p.relative_to(REPO)}: {inc}" for p in kernels for inc in includes(p)
                        if inc.split("/")[0] in ("ATen", "c10", "torch")]
    assert not torch_in_kernels, torch_in_kernels
