"""Pinned host memory for UVA mode: page-lock tensors where they lie."""
from __future__ import annotations

import warnings

import torch
from torch import Tensor

# Below this size a pinned copy is cheaper than explaining why in-place pinning failed.
_COPY_FALLBACK_BYTES = 64 << 20


def pin_in_place(tensor: Tensor) -> "torch.ScriptObject":
    """Page-locks a contiguous CPU tensor without copying it (``cudaHostRegister``), so GPU
    kernels can read it directly. Returns a handle: the memory stays pinned while the
    handle lives and is unregistered when it is destroyed. A tensor that is pinned already
    is left as it is. Raises RuntimeError, naming the cause, when CUDA refuses (memory
    already registered, memlock limits)."""
    return torch.classes.quiver.HostPin(tensor)


def pinned(tensor: Tensor):
    """``(tensor_to_use, handle)``: ``tensor`` pinned in place, or for small tensors that
    cannot be (e.g. they share a page with memory pinned elsewhere) a pinned copy."""
    tensor = tensor.contiguous()
    try:
        return tensor, pin_in_place(tensor)
    except RuntimeError as error:
        if tensor.nbytes > _COPY_FALLBACK_BYTES:
            raise
        warnings.warn(f"{error} Using a pinned copy of this {tensor.nbytes}-byte tensor instead.")
        return tensor.pin_memory(), None
