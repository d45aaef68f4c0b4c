"""Where an op or store runs, from what users pass."""
from typing import Union

import torch

from ._load import cuda_kernels_built


def resolve_device(device: Union[None, int, str, torch.device]) -> torch.device:
    """None: the current GPU when there is one (and the CUDA kernels are built), else the
    CPU; an int: that GPU; "cuda" without an index: the current GPU."""
    if device is None:
        usable = torch.cuda.is_available() and cuda_kernels_built()
        return torch.device("cuda", torch.cuda.current_device()) if usable else torch.device("cpu")
    if isinstance(device, int):
        return torch.device("cuda", device)
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device
