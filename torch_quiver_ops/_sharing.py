"""Sharing one copy of the graph and the features between processes.

* Raw array files (:func:`save_arrays`, :func:`map_arrays`): the one format behind
  ``CSRTopo.save``/``load_shared`` and ``Feature.save``/``load_shared``. Every process that
  maps the same directory (on /dev/shm, say) reads the same pages. The metadata is written
  last, so a loader never sees a half-written save; sizes are checked on every load (a
  truncated file is an error, never zeros) and a CRC-32 on request.
* CUDA IPC payloads of clique shards (``IpcBuffer`` memory), opened in the reading GPU's
  context, and the torch.distributed swap that builds a clique's shards across torchrun
  workers.
"""
from __future__ import annotations

import json
import math
import os
import zlib
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple, Union

import torch
from torch import Tensor

_CRC_CHUNK = 64 << 20


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _crc32(t: Tensor) -> int:
    data = t.contiguous().view(-1).view(torch.uint8).numpy()
    crc = 0
    for start in range(0, data.size, _CRC_CHUNK):
        crc = zlib.crc32(memoryview(data[start:start + _CRC_CHUNK]), crc)
    return crc


def save_arrays(directory: Union[str, Path], stem: str, arrays: Dict[str, Optional[Tensor]],
                **meta) -> Path:
    """Writes each array as ``<name>.bin`` (raw bytes) and ``<stem>.json`` describing them
    (dtype, shape, bytes, CRC-32) plus ``meta``. The json is written last and atomically, so
    a concurrent :func:`map_arrays` sees the whole save or none of it."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    described = {}
    for name, t in arrays.items():
        if t is None:
            continue
        t = t.detach().cpu().contiguous()
        path = directory / f"{name}.bin"
        partial = path.with_suffix(".bin.partial")
        t.view(-1).view(torch.uint8).numpy().tofile(partial)
        os.replace(partial, path)
        described[name] = {"dtype": _dtype_name(t.dtype), "shape": list(t.shape),
                           "nbytes": t.nbytes, "crc32": _crc32(t)}
    record = directory / f"{stem}.json"
    partial = record.with_suffix(".json.partial")
    partial.write_text(json.dumps({"arrays": described, **meta}))
    os.replace(partial, record)
    return directory


def map_arrays(directory: Union[str, Path], stem: str,
               verify: bool = False) -> Tuple[Dict[str, Tensor], dict]:
    """Maps the arrays of a :func:`save_arrays` directory with MAP_SHARED (no copy), after
    checking each file holds exactly the bytes the metadata names (and, with ``verify``, its
    CRC-32). Returns ``(arrays, meta)``."""
    directory = Path(directory)
    record = directory / f"{stem}.json"
    if not record.exists():
        raise FileNotFoundError(f"{record} does not exist: nothing was saved in {directory}, "
                                f"or the save has not finished")
    meta = json.loads(record.read_text())
    arrays = {}
    for name, info in meta.pop("arrays").items():
        path = directory / f"{name}.bin"
        dtype = getattr(torch, info["dtype"])
        shape = info["shape"]
        size = path.stat().st_size if path.exists() else None
        if size != info["nbytes"]:
            raise ValueError(f"{path} holds {size if size is not None else 'no'} bytes but "
                             f"{record.name} says {info['nbytes']}: the file is truncated or "
                             f"from another save")
        count = math.prod(shape)
        if count == 0:
            arrays[name] = torch.empty(shape, dtype=dtype)
        else:
            arrays[name] = torch.from_file(str(path), shared=True, size=count,
                                           dtype=dtype).view(shape)
        if verify and _crc32(arrays[name]) != info["crc32"]:
            raise ValueError(f"{path} does not match the checksum in {record.name}: the file "
                             f"is corrupt")
    return arrays, meta


def shm_has_room(nbytes: int) -> bool:
    """Whether /dev/shm can take ``nbytes`` more (with 64 MiB to spare)."""
    try:
        stat = os.statvfs("/dev/shm")
    except OSError:
        return True  # no /dev/shm to ask: let torch try
    return stat.f_bavail * stat.f_frsize >= nbytes + (64 << 20)


# ---- CUDA IPC: clique shards between processes ----

def shareable_copy(rows: Tensor, device: int):
    """``rows`` copied onto ``device`` into memory other processes can map: returns
    ``(buffer, shard)``, the ``torch.classes.quiver.IpcBuffer`` and the rows as a tensor
    over it (which keeps the buffer alive)."""
    buffer = torch.classes.quiver.IpcBuffer(rows.nbytes, device)
    shard = buffer.tensor().view(rows.dtype).view(rows.shape)
    shard.copy_(rows)
    return buffer, shard


def ipc_payload(buffer, shard: Tensor) -> tuple:
    """What a peer process needs to map ``shard`` (from :func:`shareable_copy`): plain data."""
    handle = buffer.handle()
    return (bytes(handle.numpy()), buffer.device(), shard.dtype, tuple(shard.shape))


def open_payload(payload: tuple, reader: int) -> Tensor:
    """Maps a peer's shard for kernels on GPU ``reader``."""
    handle, owner, dtype, shape = payload
    nbytes = math.prod(shape) * torch.empty(0, dtype=dtype).element_size()
    memory = torch.classes.quiver.IpcBuffer.open(
        torch.frombuffer(bytearray(handle), dtype=torch.uint8), nbytes, owner, reader)
    return memory.view(dtype).view(shape)


def local_shards(rows_of: Callable, clique: List[int], bounds, skip=()) -> Dict[int, tuple]:
    """This process's ``(buffer, shard)`` of each of a clique's members (but those in
    ``skip``); ``rows_of(begin, end, device)`` gives a member's rows on its GPU."""
    return {device: shareable_copy(rows_of(begin, end, device), device)
            for device, (begin, end) in zip(clique, bounds) if device not in skip}


def shards_swapped_over(group):
    """Builds each clique's shards across torch.distributed workers: a worker copies only
    the shard of its current GPU, then all workers swap CUDA IPC handles (every worker
    takes part in every swap, so all must place the same cliques in the same order). A
    worker that fails to build its shard still takes part and sends its error, so every
    worker raises instead of waiting for it."""
    import torch.distributed as dist

    def make_shards(rows_of: Callable, clique: List[int], bounds) -> Dict[int, tuple]:
        mine = torch.cuda.current_device()
        made: Dict[int, tuple] = {}
        payload = None
        try:
            if mine in clique:
                begin, end = bounds[clique.index(mine)]
                made[mine] = shareable_copy(rows_of(begin, end, mine), mine)
                payload = (mine, ipc_payload(*made[mine]))
        except Exception as error:  # noqa: BLE001 (sent to every worker, then raised)
            payload = ("error", f"{type(error).__name__}: {error}")
        gathered = [None] * dist.get_world_size(group)
        dist.all_gather_object(gathered, payload, group=group)
        failures = [f"rank {rank}: {item[1]}" for rank, item in enumerate(gathered)
                    if item is not None and item[0] == "error"]
        if failures:
            raise RuntimeError("building the clique's shards failed on " + "; ".join(failures))
        if mine not in clique:
            return {}  # this worker reads another clique's shards
        for item in gathered:
            if item is not None and item[0] in clique and item[0] not in made:
                made[item[0]] = (None, open_payload(item[1], mine))  # a peer's, mapped
        made.update(local_shards(rows_of, clique, bounds, skip=made))  # GPUs no worker runs on
        return made

    return make_shards
