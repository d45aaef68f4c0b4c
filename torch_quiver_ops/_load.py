"""Finds and loads the compiled op library, after checking it matches the running torch.

The library is installed inside the package (``torch_quiver_ops/lib``) by ``pip install``.
A Python started in the repository root imports the *source* tree first (the current
directory leads ``sys.path``), and the source tree holds no compiled library: it then
loads the installed copy's library, so the source tree imports as the installed package
would.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

import torch

LIBRARY_NAME = "libtorch_quiver_ops.so"
_PACKAGE_DIR = Path(__file__).resolve().parent
# Where find_package(TorchQuiverOps) finds its configuration, under a package folder.
_CMAKE_CONFIG = Path("lib") / "cmake" / "TorchQuiverOps"


def _is_source_checkout(package_dir: Path) -> bool:
    return (package_dir.parent / "pyproject.toml").exists() and \
        (package_dir.parent / "library.cpp").exists()


def _installed_package_dir() -> Optional[Path]:
    """The package folder pip installed, when it is not this one (this one being a source
    checkout that shadows it), and it holds the compiled library."""
    try:
        from importlib import metadata
        installed = metadata.distribution("torch-quiver-ops").locate_file("torch_quiver_ops")
    except Exception:  # noqa: BLE001 (not installed, or metadata unreadable: none found)
        return None
    installed = Path(str(installed)).resolve()
    if installed == _PACKAGE_DIR or not (installed / "lib" / LIBRARY_NAME).exists():
        return None
    return installed


def package_root() -> Path:
    """The package folder whose compiled library is loaded: this one, or the installed copy
    when this one is a source checkout without a build."""
    override = os.environ.get("TORCH_QUIVER_OPS_LIBRARY")
    if override:
        # A library inside an installed package (<package>/lib/<library>) brings its CMake
        # configuration; a build folder's library does not, and find_package then looks
        # in the installed copy.
        root = Path(override).expanduser().resolve().parent.parent
        if (root / _CMAKE_CONFIG).exists():
            return root
    if (_PACKAGE_DIR / "lib" / LIBRARY_NAME).exists():
        return _PACKAGE_DIR
    if _is_source_checkout(_PACKAGE_DIR):
        installed = _installed_package_dir()
        if installed is not None:
            return installed
    return _PACKAGE_DIR


def library_path() -> Path:
    """The shared library to load: $TORCH_QUIVER_OPS_LIBRARY, else the one installed inside
    the package by `pip install .` (the installed copy's, for a source checkout)."""
    override = os.environ.get("TORCH_QUIVER_OPS_LIBRARY")
    if override:
        return Path(override).expanduser().resolve()
    return package_root() / "lib" / LIBRARY_NAME


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
    if built_cuda and not running_cuda:
        # The library links torch's CUDA libraries and CUDA's runtime: loading it would fail
        # in the dynamic linker, naming a file rather than the cause.
        raise ImportError(
            f"torch-quiver-ops was built with CUDA {built_cuda}, but this torch "
            f"({torch.__version__}) has no CUDA; install a CUDA build of torch "
            f"{built_torch or ''}, or rebuild torch-quiver-ops against this torch.")
    if built_cuda and running_cuda and _major_minor(built_cuda) != _major_minor(running_cuda):
        raise ImportError(
            f"torch-quiver-ops was built with CUDA {built_cuda}, but this torch uses CUDA "
            f"{running_cuda}; rebuild it against the running torch."
        )


def _missing_library_message(path: Path) -> str:
    if os.environ.get("TORCH_QUIVER_OPS_LIBRARY"):
        return (f"TORCH_QUIVER_OPS_LIBRARY points at {path}, which does not exist; unset it to "
                f"use the installed package's library, or point it at a built {LIBRARY_NAME}.")
    if _is_source_checkout(_PACKAGE_DIR):
        return (f"torch_quiver_ops was imported from the source checkout at {_PACKAGE_DIR} "
                f"(Python puts the current directory first on sys.path), which holds no "
                f"compiled library, and no installed torch-quiver-ops was found beside it. "
                f"Run `bash scripts/setup.sh` in {_PACKAGE_DIR.parent} (it builds the library "
                f"and installs the package into .venv) and use .venv/bin/python; or, in an "
                f"environment of your own with torch {_release(torch.__version__)} and "
                f"scikit-build-core, run `pip install --no-build-isolation .` there.")
    return (f"the installed torch_quiver_ops at {_PACKAGE_DIR} lacks its compiled library "
            f"{path.name}: the install is incomplete; reinstall it with "
            f"`pip install --no-build-isolation --force-reinstall .` from the source checkout.")


def load_library() -> Path:
    path = library_path()
    if not path.exists():
        raise ImportError(_missing_library_message(path))
    info_file = path.parent / "build_info.json"
    try:
        build_info = json.loads(info_file.read_text()) if info_file.exists() else {}
    except (OSError, ValueError) as error:
        raise ImportError(f"{info_file} is not the build record the install writes ({error}): "
                          f"reinstall torch-quiver-ops") from None
    if not isinstance(build_info, dict) or not all(
            isinstance(build_info.get(key, ""), str) for key in ("torch", "cuda")):
        raise ImportError(f"{info_file} is not the build record the install writes: reinstall "
                          f"torch-quiver-ops")
    check_build_matches(build_info)
    fix = ("; $TORCH_QUIVER_OPS_LIBRARY points there: unset it or point it at a built "
           f"{LIBRARY_NAME}" if os.environ.get("TORCH_QUIVER_OPS_LIBRARY") else
           ": reinstall torch-quiver-ops")
    try:
        torch.ops.load_library(str(path))
    except OSError as error:
        # torch's own message only names the path; the loader's (a missing dependency, a
        # bad ELF header) is its cause.
        raise ImportError(f"{path} could not be loaded as torch-quiver-ops' library "
                          f"({error.__cause__ or error}){fix}") from None
    if not _has_kernels("CPU"):  # a shared library that loads but registers none of our ops
        raise ImportError(f"{path} loaded, but it is not torch-quiver-ops' library (it "
                          f"registers no quiver ops){fix}")
    return path


def _has_kernels(dispatch_key: str) -> bool:
    """Whether the loaded library registered the ops' kernels for ``dispatch_key``."""
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key("quiver::sample_subgraph",
                                                               dispatch_key)
    except RuntimeError:  # "operator quiver::sample_subgraph does not exist"
        return False


def cuda_kernels_built() -> bool:
    """True when the library holds CUDA kernels (torch had CUDA and nvcc was found)."""
    return _has_kernels("CUDA")
