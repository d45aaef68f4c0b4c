"""Pinned host memory for UVA mode: page-lock tensors where they lie."""
from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import sys
import warnings

import torch
from torch import Tensor

# Below this size a pinned copy is cheaper than explaining why in-place pinning failed.
_COPY_FALLBACK_BYTES = 64 << 20

_HUGE_PAGE = 2 << 20
_MADV_HUGEPAGE = 14
_MADV_COLLAPSE = 25  # Linux 6.1 and later
_COLLAPSE_PART = 256 << 20


def back_with_huge_pages(tensor: Tensor) -> bool:
    """Asks Linux to move the 2 MiB-aligned interior of a CPU tensor's memory onto huge
    pages now (``madvise`` ``MADV_HUGEPAGE``, then ``MADV_COLLAPSE``, in parts on several
    threads; contents kept). Call it on a feature table before a :class:`Feature` pins it:
    CPU threads reading random rows of a table of tens of GB (``host_reads="staged"``) then
    miss the TLB less. On the H100 host, collapsing a 32 GiB table took 13 s and its staged
    reads gained 4% (tables on huge pages from their first touch: 0-16% in two runs;
    docs/benchmarks.md), so it is left to the caller. Best effort: returns whether
    Linux did it (not on other systems, older kernels, or memory it cannot collapse, such as
    shared memory where shmem huge pages are off, or pages already pinned)."""
    if not isinstance(tensor, Tensor):
        raise TypeError(f"back_with_huge_pages takes a CPU tensor, got {type(tensor).__name__}")
    if (not sys.platform.startswith("linux") or tensor.device.type != "cpu"
            or tensor.layout != torch.strided):
        return False
    start = tensor.data_ptr()
    begin = (start + _HUGE_PAGE - 1) // _HUGE_PAGE * _HUGE_PAGE
    end = (start + tensor.nbytes) // _HUGE_PAGE * _HUGE_PAGE
    if end <= begin:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.madvise(begin, end - begin, _MADV_HUGEPAGE)  # keeps khugepaged from splitting them
    # The kernel copies each 2 MiB into a fresh huge page; threads collapse parts side by
    # side (ctypes lets go of the GIL during the call).
    step = _COLLAPSE_PART
    parts = [(at, min(step, end - at)) for at in range(begin, end, step)]
    threads = max(1, min(len(parts), torch.get_num_threads()))
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        done = list(pool.map(lambda part: libc.madvise(part[0], part[1], _MADV_COLLAPSE) == 0,
                             parts))
    return all(done)


def pin_in_place(tensor: Tensor) -> "torch.ScriptObject":
    """Page-locks a contiguous CPU tensor without copying it (``cudaHostRegister``), so GPU
    kernels can read it directly. Returns a handle: the memory stays pinned while the
    handle lives and is unregistered when it is destroyed. A tensor that is pinned already
    is left as it is. Raises RuntimeError, naming the cause, when CUDA refuses (memory
    already registered, memlock limits)."""
    if not isinstance(tensor, Tensor):  # the class's own error named no argument
        raise TypeError(f"pin_in_place pins a tensor, got {type(tensor).__name__}")
    return torch.classes.quiver.HostPin(tensor)


def pinned(tensor: Tensor, device=None):
    """``(tensor_to_use, handle)``: ``tensor`` pinned in place, or for small tensors that
    cannot be (e.g. they share a page with memory pinned elsewhere) a pinned copy.
    ``device``: the GPU that will read it. CUDA pins through the current GPU's context, so
    a worker of GPU 1 that had not yet called ``torch.cuda.set_device`` would otherwise
    make a context (hundreds of MB) on GPU 0 to pin its tables."""
    if not isinstance(tensor, Tensor):
        raise TypeError(f"pinned pins a tensor, got {type(tensor).__name__}")
    if tensor.layout != torch.strided or tensor.is_meta:  # (contiguous() failed unnamed)
        raise TypeError(f"pinned pins a dense tensor with data, got a "
                        f"{'meta' if tensor.is_meta else tensor.layout} tensor")
    tensor = tensor.contiguous()
    reader = None if device is None else torch.device(device)
    with (torch.cuda.device(reader) if reader is not None and reader.type == "cuda"
          else contextlib.nullcontext()):  # (the pinned copy below too)
        try:
            return tensor, pin_in_place(tensor)
        except RuntimeError as error:
            if tensor.nbytes > _COPY_FALLBACK_BYTES or not torch.cuda.is_available():
                raise  # (without a GPU a pinned copy fails too, less clearly)
            warnings.warn(f"{error} Using a pinned copy of this {tensor.nbytes}-byte tensor "
                          f"instead.")
            return tensor.pin_memory(), None
