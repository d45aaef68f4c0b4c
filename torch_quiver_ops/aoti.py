"""AOTInductor packages of models that call the quiver ops, built and loaded safely.

An AOTInductor package is a shared library compiled by the C++ compiler torch finds
(``$CXX``, else ``g++``). A compiler that links libstdc++ statically into shared libraries
(some toolchain images wrap g++ so) builds a package that carries its own copy of the C++
runtime; loading it into a process that already runs libstdc++ (PyTorch does) crashes the
process. :func:`check_compiler` finds that out before anything is compiled, and
:func:`check_package` before a package is loaded, each with a sentence naming the compiler
and the fix, never a segfault.
"""
from __future__ import annotations

import functools
import shutil
import subprocess
import tempfile
import zipfile
import zlib
from pathlib import Path
from typing import Dict, List, Optional, Union

import torch

_PROBE = '#include <string>\nextern "C" int quiver_probe(const char* s) ' \
         '{ return static_cast<int>(std::string(s).size()); }\n'


def _needed_libraries(shared_object: Path) -> Optional[List[str]]:
    """The DT_NEEDED entries of an ELF shared object (None when no tool is installed to
    read them; a ValueError when the tools cannot read it: no shared object)."""
    tried = False
    for tool, args in (("readelf", ["-d"]), ("objdump", ["-p"])):
        if shutil.which(tool) is None:
            continue
        tried = True
        listing = subprocess.run([tool, *args, str(shared_object)], capture_output=True,
                                 text=True, timeout=60)
        if listing.returncode != 0:
            continue
        needed = []
        for line in listing.stdout.splitlines():
            if "NEEDED" in line:
                needed.append(line.split()[-1].strip("[]"))
        return needed
    if tried:
        raise ValueError(f"{shared_object.name} is not a shared library the ELF tools can read")
    return None


def _links_libstdcxx_dynamically(shared_object: Path) -> Optional[bool]:
    needed = _needed_libraries(shared_object)
    if needed is None:
        return None
    return any(name.startswith("libstdc++") or name.startswith("libc++") for name in needed)


def compiler() -> str:
    """The C++ compiler AOTInductor will run (torch's own search: ``$CXX``, else g++)."""
    from torch._inductor import cpp_builder
    return cpp_builder.get_cpp_compiler()


@functools.lru_cache(maxsize=None)
def _check_compiler(cxx: str) -> None:
    with tempfile.TemporaryDirectory(prefix="quiver-aoti-probe-") as scratch:
        source = Path(scratch) / "probe.cpp"
        source.write_text(_PROBE)
        library = Path(scratch) / "probe.so"
        try:
            built = subprocess.run([cxx, "-shared", "-fPIC", str(source), "-o", str(library)],
                                   capture_output=True, text=True, timeout=300)
        except FileNotFoundError:
            raise RuntimeError(f"AOTInductor compiles packages with {cxx!r}, which is not "
                               f"installed: install g++ or point CXX at a C++ compiler") from None
        if built.returncode != 0:
            raise RuntimeError(f"AOTInductor compiles packages with {cxx!r}, which could not "
                               f"build a small shared library:\n{built.stderr[-2000:]}")
        if _links_libstdcxx_dynamically(library) is False:
            raise RuntimeError(
                f"the C++ compiler AOTInductor would use ({cxx!r}) links libstdc++ statically "
                f"into shared libraries: a package built with it crashes the process that "
                f"loads it. Use a compiler that links it dynamically, e.g. "
                f"CXX=/usr/bin/g++ (set before torch is imported, or "
                f"torch._inductor.config.cpp.cxx = ('/usr/bin/g++',)).")


def check_compiler() -> str:
    """Raises RuntimeError naming the compiler and the fix when AOTInductor's compiler
    cannot build a package that loads safely here; returns the compiler. The probe (one
    small compile) runs once per compiler and process."""
    cxx = compiler()
    _check_compiler(cxx)
    return cxx


def check_package(package_path: Union[str, Path]) -> None:
    """Raises RuntimeError when a package's compiled model links libstdc++ statically (it
    would crash this process on load), naming the package and the fix."""
    package_path = Path(package_path)
    if not package_path.is_file():
        raise FileNotFoundError(f"no AOTInductor package at {package_path}")
    if not zipfile.is_zipfile(package_path):
        raise ValueError(f"{package_path} is not an AOTInductor package (.pt2, a zip archive): "
                         f"make one with torch_quiver_ops.aoti.compile_and_package")
    try:
        _check_archive(package_path)
    except (zipfile.BadZipFile, zlib.error, EOFError) as error:  # torch's words name no file
        raise ValueError(f"{package_path} is corrupt (a damaged zip archive: {error}): make "
                         f"it again with torch_quiver_ops.aoti.compile_and_package") from None


def _check_archive(package_path: Path) -> None:
    """check_package's reading of the archive, whose damage zipfile raises as it reads."""
    with zipfile.ZipFile(package_path) as archive, \
            tempfile.TemporaryDirectory(prefix="quiver-aoti-package-") as scratch:
        _check_layout(package_path, archive.namelist(), archive.read)
        for name in archive.namelist():
            if not name.endswith(".so"):
                continue
            extracted = Path(archive.extract(name, scratch))
            try:
                needed = _needed_libraries(extracted)
            except ValueError as error:
                raise ValueError(f"{package_path} holds {name}: {error}") from None
            if needed == []:
                raise ValueError(f"{package_path} holds {name}, which names no shared library "
                                 f"(a model AOTInductor compiled needs libtorch's): not a "
                                 f"compiled model")
            if _links_libstdcxx_dynamically(extracted) is False:
                raise RuntimeError(
                    f"{package_path} holds {name}, compiled by a C++ compiler that links "
                    f"libstdc++ statically: loading it would crash this process. Build the "
                    f"package again with a compiler that links it dynamically, e.g. "
                    f"CXX=/usr/bin/g++.")


def _check_layout(package_path: Path, names: List[str], read) -> None:
    """torch's package loader takes a zip without the layout it writes (one folder holding
    ``archive_format`` "pt2" and the compiled model under ``data/aotinductor/model/``) for
    an older format, and crashes the process reading it: a ValueError naming the file."""
    refused = (f"{package_path} is not an AOTInductor package (make one with "
               f"torch_quiver_ops.aoti.compile_and_package): ")
    roots = {name.split("/", 1)[0] for name in names}
    if len(roots) != 1 or any("/" not in name for name in names):
        raise ValueError(refused + f"its files must lie in one folder, got {sorted(roots)[:5]}")
    root = roots.pop()
    try:
        format_ = read(f"{root}/archive_format")[:16].decode(errors="replace")
    except KeyError:
        format_ = None
    if format_ != "pt2":
        raise ValueError(refused + f"its archive_format is "
                         f"{'missing' if format_ is None else repr(format_)}, not 'pt2'")
    model_dir = f"{root}/data/aotinductor/model/"
    if not any(name.startswith(model_dir) and name.endswith(".so") for name in names):
        raise ValueError(refused + "it holds no compiled model (data/aotinductor/model/*.so)")
    # torch's loader needs the model's metadata beside it ("File not found" otherwise).
    if not any(name.startswith(model_dir) and name.endswith("_metadata.json") for name in names):
        raise ValueError(refused + "it holds no model metadata "
                                   "(data/aotinductor/model/*_metadata.json)")


def compile_and_package(program: "torch.export.ExportedProgram",
                        package_path: Union[str, Path],
                        metadata: Optional[Dict[str, str]] = None) -> str:
    """``torch._inductor.aoti_compile_and_package`` after :func:`check_compiler`.
    ``metadata`` (strings to strings) travels in the package; a libtorch program reads it
    with ``AOTIModelPackageLoader::get_metadata()`` (``examples/cpp/run_exported`` checks
    the feature width and dtype that ``examples/export_sage.py`` records there)."""
    if metadata is not None and not (isinstance(metadata, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())):
        raise ValueError(f"metadata must map strings to strings, got {metadata!r}")
    check_compiler()
    configs = {"aot_inductor.metadata": dict(metadata)} if metadata else None
    return torch._inductor.aoti_compile_and_package(program, package_path=str(package_path),
                                                    inductor_configs=configs)


def load_package(package_path: Union[str, Path]):
    """``torch._inductor.aoti_load_package`` after :func:`check_package`. A package whose
    metadata names its feature table (``quiver.feature_input``, the argument's position,
    with ``quiver.feature_width`` and ``quiver.feature_dtype``, as ``examples/export_sage.py``
    writes them) is returned wrapped: each call checks that argument first, since the
    compiled kernels read a table with the width they were built for and another one would
    be read past its end, with no error."""
    check_package(package_path)
    package = torch._inductor.aoti_load_package(str(package_path))
    metadata = package.get_metadata()
    if "quiver.feature_input" not in metadata:
        return package
    return FeatureCheckedPackage(package, int(metadata["quiver.feature_input"]),
                                 int(metadata["quiver.feature_width"]),
                                 metadata["quiver.feature_dtype"], str(package_path))


class FeatureCheckedPackage:
    """A loaded package whose calls check the feature table they are given (see
    :func:`load_package`); every other attribute is the package's."""

    def __init__(self, package, feature_input: int, width: int, dtype: str, path: str):
        self._package, self._feature_input = package, feature_input
        self._width, self._dtype, self._path = width, dtype, path

    def __call__(self, *args, **kwargs):
        if len(args) <= self._feature_input and kwargs:
            # A table passed by keyword would skip the check below (and a narrower one is
            # read past its end with no error).
            raise ValueError(f"pass {self._path}'s inputs by position: the feature table is "
                             f"argument {self._feature_input}, got {len(args)} positional "
                             f"and keywords {sorted(kwargs)}")
        if len(args) > self._feature_input:
            table = args[self._feature_input]
            dtype = str(getattr(table, "dtype", "")).removeprefix("torch.")
            if (not isinstance(table, torch.Tensor) or table.dim() != 2
                    or table.size(1) != self._width or dtype != self._dtype):
                shape = tuple(table.shape) if isinstance(table, torch.Tensor) else type(table)
                raise ValueError(f"argument {self._feature_input} (the feature table) is "
                                 f"{dtype or 'not a tensor'} of shape {shape}, but "
                                 f"{self._path} was compiled for [N, {self._width}] "
                                 f"{self._dtype} rows")
            if not table.is_contiguous():  # the op's refusal was only in AOTInductor's log
                raise ValueError(f"argument {self._feature_input} (the feature table) is not "
                                 f"contiguous (row-major): pass table.contiguous()")
        try:
            return self._package(*args, **kwargs)
        except RuntimeError as error:
            if "run_func_" not in str(error):
                raise
            # AOTInductor raises only "run_func_(...) API call failed"; the op's own
            # sentence (which argument, which value) is in the log it printed before.
            raise RuntimeError(f"{self._path} failed on these inputs: the error of the op "
                               f"that refused them (naming the argument and its value) is "
                               f"printed above this traceback ({error})") from None

    def __getattr__(self, name):
        return getattr(self._package, name)
