"""Devices and sizes, from what users pass: where an op or store runs, which GPUs can read
each other's memory, and byte counts such as "200M"."""
from __future__ import annotations

import math
import numbers
import operator
import re
from fractions import Fraction
from typing import List, Optional, Sequence, Union

import numpy as np
import torch

from ._load import cuda_kernels_built

_UNITS = {"": 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def resolve_device(device: Union[None, int, str, torch.device]) -> torch.device:
    """None: the current GPU when there is one (and the CUDA kernels are built), else the
    CPU; an int: that GPU; "cuda" without an index: the current GPU."""
    if device is None:
        return torch.device("cuda", torch.cuda.current_device()) if gpus_usable() else \
            torch.device("cpu")
    if isinstance(device, bool):  # an int to isinstance: True would be GPU 1
        raise TypeError(f"device must be a torch.device, a string or a GPU index, got {device!r}")
    given = device
    if isinstance(device, str):
        device = device.strip().lower()  # torch-quiver's scripts spell it "CPU"
    try:
        device = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    except (RuntimeError, TypeError) as error:  # torch's own words name no argument
        why = f" ({error})" if isinstance(error, RuntimeError) else ""
        raise ValueError(f"device must be a torch.device, a string such as 'cpu' or 'cuda:0', "
                         f"or a GPU index, got {given!r}{why}") from None
    if device.type == "cuda" and device.index is None:
        if not torch.cuda.is_available():  # torch's own error ("Found no NVIDIA driver")
            raise RuntimeError(f"device {str(device)!r} is a GPU, and torch sees none (a "
                               f"CPU-only torch, or no driver): give device='cpu'")
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def gpus_usable() -> bool:
    """True when this process can run the CUDA kernels."""
    return torch.cuda.is_available() and cuda_kernels_built()


def p2p_cliques(device_list: Sequence[int]) -> List[List[int]]:
    """Splits GPUs into cliques whose members can all read each other's memory (NVLink or
    PCIe peer access, as CUDA reports it), in device_list order."""
    cliques: List[List[int]] = []
    for device in device_list:
        for clique in cliques:
            if all(torch.cuda.can_device_access_peer(device, other) and
                   torch.cuda.can_device_access_peer(other, device) for other in clique):
                clique.append(device)
                break
        else:
            cliques.append([device])
    return cliques


def init_p2p(device_list: Sequence[int]) -> List[List[int]]:
    """torch-quiver's ``quiver.init_p2p``: checks that ``device_list`` names usable GPUs and
    returns their peer-access cliques. Nothing needs turning on ahead: a gather turns peer
    access on for a pair of GPUs the first time one reads the other's cache."""
    device_list = [int(d) for d in device_list]
    if not gpus_usable():
        raise RuntimeError("init_p2p needs CUDA GPUs and the CUDA kernels")
    count = torch.cuda.device_count()
    bad = [d for d in device_list if not 0 <= d < count]
    if bad:
        raise ValueError(f"device_list names GPUs {bad}, but this process sees {count}")
    return p2p_cliques(device_list)


def device_or_cpu(device: Union[None, int, str, torch.device]) -> torch.device:
    """Where a generator draws: None is the CPU (a graph drawn on a GPU differs from one
    drawn on the CPU, so none is picked for the caller); otherwise as :func:`resolve_device`
    (an int is that GPU: ``torch.device(device or "cpu")`` had taken GPU 0 for the CPU)."""
    return torch.device("cpu") if device is None else present_device(device)


def present_device(device: Union[int, str, torch.device]) -> torch.device:
    """:func:`resolve_device`, and a GPU named must be one this process sees: else a
    RuntimeError naming ``device`` (CUDA's own errors, "no NVIDIA driver" or "invalid
    device ordinal", name no argument)."""
    resolved = resolve_device(device)
    if resolved.type != "cuda":
        return resolved
    if not torch.cuda.is_available():
        raise RuntimeError(f"device={device!r} is a GPU, and torch sees none (a CPU-only "
                           f"torch, or no driver): give device='cpu'")
    if resolved.index >= torch.cuda.device_count():
        raise RuntimeError(f"device={device!r} is GPU {resolved.index}, and this process "
                           f"sees {torch.cuda.device_count()} GPU(s)")
    return resolved


def as_real(value) -> Optional[float]:
    """``value`` as a Python float if it is a real number (Python's or NumPy's int or
    float), else None; a bool is none."""
    integer = as_int(value)
    if integer is not None:
        return float(integer)
    if isinstance(value, float) or (type(value).__module__ == "numpy"
                                    and isinstance(value, numbers.Real)):
        return float(value)
    return None


def is_int(value) -> bool:
    """Whether ``value`` is a Python int and not a bool (``isinstance(True, int)`` holds, and
    True is no count, id or size)."""
    return isinstance(value, int) and not isinstance(value, bool)


def as_int(value) -> Optional[int]:
    """``value`` as a Python int if it is an integer (Python's, NumPy's or a 0-d integer
    tensor's), else None: a bool is none (``operator.index(True)`` is 1, which would pass
    as a count or a label), and so is a tensor of more dimensions (``operator.index`` takes
    ``[[5]]`` as 5)."""
    if (isinstance(value, bool) or (type(value).__module__ == "numpy"
                                    and type(value).__name__ in ("bool", "bool_"))
            or (isinstance(value, torch.Tensor) and (value.dtype == torch.bool
                                                     or value.dim() != 0))):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def check_flag(value, name: str) -> bool:
    """``value`` as a bool if it is one (Python's or numpy's, or the int 0 or 1), else a
    TypeError naming ``name``: the string 'False' is truthy and None falsy, and neither is
    an answer."""
    if isinstance(value, bool) or (type(value).__module__ == "numpy"
                                   and type(value).__name__ in ("bool", "bool_")):
        return bool(value)
    if is_int(value) and value in (0, 1):
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {value!r}")


def check_generator(generator, name: str = "generator") -> None:
    """None or a ``torch.Generator``, else a TypeError naming ``name`` (torch's own error
    came from deep inside a draw, naming an argument of an op)."""
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"{name} must be a torch.Generator or None, got {generator!r}")


def holds_integers(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` holds integers that can be ids or times: not floats (which would
    be truncated), complex numbers or bools (True and False are no node ids)."""
    dtype = tensor.dtype
    return not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)


def as_int64(values: torch.Tensor, name: str, what: str, error=IndexError) -> torch.Tensor:
    """Integer ``values`` as int64. A uint64 past int64's range would turn negative there
    (a node id out of range, a time before every other): it is an ``error`` naming
    ``name``, where it is and its value as given, with ``what`` saying what it should be."""
    wide = values.to(torch.int64)
    if values.dtype == torch.uint64 and wide.numel():
        wrapped = wide < 0
        if bool(wrapped.any()):
            at = tuple(int(i) for i in wrapped.nonzero()[0])
            raise error(f"{name}[{', '.join(map(str, at))}] = {int(wide[at]) + 2**64} is "
                        f"past int64's range ({what})")
    return wide


def as_ids(ids, name: str = "ids") -> torch.Tensor:
    """``ids`` as a tensor; an empty list is no int64 ids (``torch.as_tensor([])`` would be
    floats, which the ops refuse). ``name`` names them in the errors."""
    if ids is None or isinstance(ids, (str, bytes, slice)):
        raise TypeError(f"{name} must be integer ids (a tensor, an array or a list), got "
                        f"{ids!r}")
    if isinstance(ids, (list, tuple)) and len(ids) == 0:
        return torch.empty(0, dtype=torch.long)
    if (isinstance(ids, (list, tuple)) and any(isinstance(v, bool) for v in ids)
            and not all(isinstance(v, bool) for v in ids)):
        # torch.as_tensor([0, True]) is [0, 1]: True would be read as node 1
        raise TypeError(f"{name} mix bools with ints ({list(ids)[:8]!r}): True and False "
                        f"are no ids")
    try:
        return as_tensor(ids)
    except (OverflowError, ValueError, RuntimeError) as error:
        if "Overflow" not in str(error):
            raise
        # torch says "Overflow when unpacking long long", naming neither ids nor the value
        raise IndexError(f"{name} hold an int past int64's range ({error})") from None


def slice_ids(rows: slice, length: int) -> torch.Tensor:
    """The row ids ``rows`` selects of ``length`` rows, as a tensor's ``[rows]`` takes them:
    an empty selection whose bounds run against its step (``5:2``) is no rows
    (``torch.arange`` refused it, "upper bound and lower bound inconsistent with step
    sign")."""
    start, stop, step = rows.indices(length)
    if len(range(start, stop, step)) == 0:
        return torch.empty(0, dtype=torch.long)
    return torch.arange(start, stop, step)


def generator_seed(seed, name: str = "seed") -> int:
    """``seed`` as the int a torch.Generator takes (Python's or NumPy's), else a TypeError
    or ValueError naming ``name``: manual_seed named no argument refusing 1.5 or 2**64, and
    NumPy's ints failed there with "an integer is required"."""
    value = as_int(seed)
    if value is None:
        raise TypeError(f"{name} must be an int, got {seed!r}")
    if not -2**63 <= value < 2**64:
        raise ValueError(f"{name} must be in [-2**63, 2**64), got {value}")
    return value


def as_tensor(value, dtype: Optional[torch.dtype] = None, device=None) -> torch.Tensor:
    """``torch.as_tensor(value, dtype, device)``, copying first a NumPy array that torch cannot
    view (negative strides, as ``arr[::-1]`` or ``np.flip`` give, or another byte order):
    torch refused those in words that name no argument, wherever ids, edges or times
    were taken (a probe). Others are shared, as ``torch.as_tensor`` shares them."""
    if isinstance(value, np.ndarray) and (value.dtype.byteorder not in "=|"
                                          or any(step < 0 for step in value.strides)):
        value = value.astype(value.dtype.newbyteorder("="), order="C")
    if device is None and isinstance(value, torch.Tensor):
        # A tensor stays where it is: under torch.set_default_device, torch.as_tensor copies
        # it to that device (a CPU sampler's seeds went to "meta" or a GPU; a probe).
        device = value.device
    return torch.as_tensor(value, dtype=dtype, device=device)


def no_meta(value, name: str, holds: str = "data", verb: str = "is"):
    """``value``, unless it is a tensor that holds no dense data: a meta tensor, or a
    sparse one (any layout but strided). A TypeError names ``name`` (``verb``: "are" for
    a plural such as seeds): torch's own "Cannot copy out of meta tensor", item() error or
    "Could not run 'aten::min' with arguments from the 'SparseCPU' backend" named no
    argument."""
    if isinstance(value, torch.Tensor):
        if value.is_meta:
            raise TypeError(f"{name} {verb} a meta tensor, which holds no {holds}")
        if value.layout != torch.strided:
            raise TypeError(f"{name} {verb} a {value.layout} tensor: pass a dense one "
                            f"({name}.to_dense())")
    return value


# Integer dtypes the ops take as ids; narrower ones are widened (they were refused here and
# taken elsewhere: CSRTopo and the loaders' seeds took int16 and uint8 ids).
_OP_ID_DTYPES = (torch.int32, torch.int64)


def readable_ids(ids, name: str = "ids") -> torch.Tensor:
    """:func:`as_ids`, refusing a tensor without dense data (:func:`no_meta`), with integer
    ids of a dtype the ops do not take (int8, int16, uint8 to uint64) as int64; uint64 ids
    past int64's range are an IndexError naming ``name``."""
    ids = no_meta(as_ids(ids, name), name, "ids", verb="are")
    if holds_integers(ids) and ids.dtype not in _OP_ID_DTYPES:
        ids = as_int64(ids, name, "ids are int64")
    return ids


def checked_node_ids(ids: torch.Tensor, num_nodes: int, name: str) -> torch.Tensor:
    """``ids`` as int64, each in [0, num_nodes), else an IndexError naming ``name``."""
    ids = ids.long()
    bad = (ids < 0) | (ids >= num_nodes)
    if bool(bad.any()):
        at = int(bad.nonzero()[0])
        raise IndexError(f"{name}[{at}] = {int(ids[at])} is out of range [0, {num_nodes})")
    return ids


def parse_share(size, name: str) -> Optional[Fraction]:
    """The fraction a size such as "20%" names, exactly (None for any other size): a share
    of N rows is ``int(share * N)`` with no float rounding ("29%" of 100 rows is 29, where
    0.29 * 100 is 28.999...). ``name``: the argument, named in the errors."""
    if not (isinstance(size, str) and size.strip().endswith("%")):
        return None
    try:
        share = Fraction(size.strip()[:-1].strip()) / 100
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"{name}: a share must be a percentage such as '20%', got "
                         f"{size!r}") from None
    if not 0 <= share <= 1:
        raise ValueError(f"{name}: a share must be in [0%, 100%], got {size!r}")
    return share


def parse_size(size: Union[int, float, str], name: str = "size") -> int:
    """Bytes from 1024, "200M", "0.9G", "1.5GB" or "20MiB" (units of 1024, a fraction of one
    rounded down to whole bytes); ``name``: the argument, named in the errors."""
    if isinstance(size, bool):
        raise ValueError(f"{name} must be a byte count, got {size!r}")
    if isinstance(size, (int, float)):
        # (an int too large for a float is finite: math.isfinite raised OverflowError)
        if size < 0 or (isinstance(size, float) and not math.isfinite(size)):
            raise ValueError(f"{name} must be a byte count >= 0, got {size}")
        if isinstance(size, float) and 0 < size < 1:
            raise ValueError(f"{name} of {size} bytes is less than one byte: for a "
                             f"share of the table write a percentage such as "
                             f"'{size * 100:g}%'")
        if isinstance(size, float) and not size.is_integer():  # (2.5 had been 2 bytes)
            raise ValueError(f"{name} must be a whole number of bytes, got {size}")
        return int(size)
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(?:([KMGT])I?)?B?\s*", str(size).upper())
    if not match:
        raise ValueError(f"cannot read {name}={size!r} as a size; use bytes or e.g. '200M', "
                         f"'1.5G'")
    count = float(match.group(1)) * _UNITS[match.group(2) or ""]
    if not math.isfinite(count):
        raise ValueError(f"{name} must be a byte count, got {size!r}")
    if 0 < count < 1:  # as for a number: a share is a percentage
        raise ValueError(f"{name} of {size!r} is less than one byte: for a share of the "
                         f"table write a percentage such as '{count * 100:g}%'")
    if match.group(2) is None and not count.is_integer():  # as for a number ("2.5": 2 bytes)
        raise ValueError(f"{name} must be a whole number of bytes, got {size!r}")
    return int(count)
