"""Finds and loads the compiled op library, after checking it matches the running torch."""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch

LIBRARY_NAME = "libtorch_quiver_ops.so"
_PACKAGE_DIR = Path(__file__).resolve().parent


def library_path() -> Path:
    """The shared library to load: $TORCH_QUIVER_OPS_LIBRARY, else the one installed
    inside this package by `pip install .`."""
    override = os.environ.get("TORCH_QUIVER_OPS_LIBRARY")
    if override:
        return Path(override).resolve()
    return _PACKAGE_DIR / "lib" / LIBRARY_NAME


def _release(version: str) -> str:
    """'2.11.0+cu130' -> '2.11.0'."""
    return version.split("+")[0]


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def check_build_matches(build_info: dict) -> None:
    """Raises ImportError, in a sentence, when the library was built for another torch or CUDA."""
    built_torch = build_info.get("torch", "")
    if built_torch and _release(built_torch) != _release(torch.__version__):
        raise ImportError(
            f"torch-quiver-ops was built against torch {built_torch}, but torch "
            f"{torch.__version__} is running; reinstall it with this torch "
            f"(pip install --no-build-isolation .) or install torch=={built_torch}."
        )
    built_cuda = build_info.get("cuda", "")
    running_cuda = torch.version.cuda
    if built_cuda and running_cuda and _major_minor(built_cuda) != _major_minor(running_cuda):
        raise ImportError(
            f"torch-quiver-ops was built with CUDA {built_cuda}, but this torch uses CUDA "
            f"{running_cuda}; rebuild it against the running torch."
        )


def load_library() -> Path:
    path = library_path()
    if not path.exists():
        raise ImportError(
            f"torch-quiver-ops could not find its compiled library at {path}; install the "
            f"package with `pip install --no-build-isolation .` or point "
            f"TORCH_QUIVER_OPS_LIBRARY at a built {LIBRARY_NAME}."
        )
    info_file = path.parent / "build_info.json"
    build_info = json.loads(info_file.read_text()) if info_file.exists() else {}
    check_build_matches(build_info)
    torch.ops.load_library(str(path))
    return path


def cuda_kernels_built() -> bool:
    """True when the library holds CUDA kernels (torch had CUDA and nvcc was found)."""
    return torch._C._dispatch_has_kernel_for_dispatch_key("quiver::sample_subgraph", "CUDA")
