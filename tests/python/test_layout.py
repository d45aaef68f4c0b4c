"""The source tree keeps its one-way layers: ops/ never includes runtime/ (nor the runtime's
public headers), runtime/ reaches ops/ only through its faces (<quiver/ops.h>, the shared
headers at ops/'s top and ops/internal/, never a backend's private ops/cpu/ or ops/cuda/
headers), every file under ops/cpu/ and ops/cuda/ serves an op (code that serves none lives
in runtime/), the registrar (library.cpp) is the one TORCH_LIBRARY, backends only add
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
    def from_runtime(p, inc):  # (a relative path too, as from the including file's folder)
        resolved = (p.parent / inc).resolve()
        return (inc.startswith("runtime/") or
                (inc.startswith("quiver/") and inc.split("/", 1)[1] in RUNTIME_HEADERS) or
                (resolved.exists() and (REPO / "runtime") in resolved.parents))
    offenders = [f"{p.relative_to(REPO)}: {inc}" for p in sources("ops") for inc in includes(p)
                 if from_runtime(p, inc)]
    assert not offenders, offenders


@pytest.mark.skipif(not (REPO / "ops").is_dir(), reason="needs the source tree")
def test_runtime_reaches_ops_only_through_its_faces():
    offenders = [f"{p.relative_to(REPO)}: {inc}" for p in sources("runtime") for inc in includes(p)
                 if inc.startswith(("ops/cpu/", "ops/cuda/"))]
    assert not offenders, offenders


@pytest.mark.skipif(not (REPO / "ops").is_dir(), reason="needs the source tree")
def test_backend_folders_hold_only_what_serves_an_op():
    """A backend's file is an op's entry (it registers a kernel) or is reached from one
    through the includes of its folder and ops/'s top: a kernel that no op calls (as the
    distributed fetch's owner slots were) belongs in runtime/."""
    backend = [p for folder in ("ops/cpu", "ops/cuda") for p in sources(folder)]
    reached = {p for p in backend if "TORCH_LIBRARY_IMPL" in p.read_text()}
    frontier = list(reached)
    while frontier:
        path = frontier.pop()
        targets = [REPO / inc for inc in includes(path)]
        if path.suffix == ".h":  # a kernel's header reaches its .cu (same stem)
            targets.append(path.with_suffix(".cu"))
        for target in targets:
            if target in backend and target not in reached:
                reached.add(target)
                frontier.append(target)
    unreached = sorted(str(p.relative_to(REPO)) for p in set(backend) - reached)
    assert not unreached, unreached


@pytest.mark.skipif(not (REPO / "ops").is_dir(), reason="needs the source tree")
def test_one_registrar_and_torch_free_kernels():
    every = sources("ops") + sources("runtime") + [REPO / "library.cpp"]
    # (TORCH_LIBRARY_FRAGMENT defines ops too; backends only add _IMPL blocks)
    registrars = [p for p in every
                  if re.search(r"\bTORCH_LIBRARY(_FRAGMENT)?\s*\(", p.read_text())]
    assert registrars == [REPO / "library.cpp"]
    kernels = [p for p in every if p.suffix in (".cu", ".cuh")]
    assert kernels
    torch_in_kernels = [f"{p.relative_to(REPO)}: {inc}" for p in kernels for inc in includes(p)
                        if inc.split("/")[0] in ("ATen", "c10", "torch")]
    assert not torch_in_kernels, torch_in_kernels
