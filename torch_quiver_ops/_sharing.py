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

import copyreg
import json
import math
import os
import re
import fcntl
import secrets
import stat
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from . import preflight
from ._device import as_int, check_flag, is_int

_CRC_CHUNK = 64 << 20
# The json's key for the id of one save (see save_arrays).
_SAVE_ID = "save_id"
# The layout of a save (its json and files); a reader refuses a later one by name rather
# than misreading it. Saves from before the key are of the first.
_FORMAT_VERSION = "format_version"
_READS_UP_TO = 1


# The dtypes a save may hold (what torch.from_file maps), by their names in the metadata.
_DTYPES = {name: getattr(torch, name) for name in (
    "bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32",
    "float64", "complex64", "complex128")}
# An array's name is a file name in the save's directory, never a path out of it (matched
# whole: "$" would let a final newline through), short enough for its ".bin.partial" to fit
# a file name's 255 bytes.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
MAX_NAME = 200


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _check_name(name: str, where: str) -> None:
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name:
        raise ValueError(f"{where}: array name {name!r} is not a plain file name (letters, "
                         f"digits, '_', '.', '-'; no path separators)")
    if len(name) > MAX_NAME:
        raise ValueError(f"{where}: array name {name[:24]!r}... has {len(name)} characters, "
                         f"more than {MAX_NAME} (a file name's limit, with its suffix)")


# A record or manifest is a few KB; one far larger is not ours.
MAX_RECORD_BYTES = 64 << 20


def check_savable(t: Tensor, label: str) -> None:
    """TypeError naming ``label`` unless :func:`save_arrays` can write the tensor ``t``: a
    dense one of a dtype it saves. Callers that save several arrays check each first, so
    that a refusal comes before an earlier save is written over."""
    if t.is_meta:
        raise TypeError(f"{label} cannot be saved: a meta tensor holds no data")
    if t.layout != torch.strided or t.is_nested or t.is_quantized:
        raise TypeError(f"{label} cannot be saved: it is a "
                        f"{'quantized' if t.is_quantized else 'nested' if t.is_nested else t.layout}"
                        f" tensor, and saves hold dense rows (save its dense form)")
    if _dtype_name(t.dtype) not in _DTYPES:
        raise TypeError(f"{label} cannot be saved: its dtype is {t.dtype} (saves hold "
                        f"{', '.join(sorted(_DTYPES))})")


def check_row_table(t, label: str) -> None:
    """A table of rows (features or labels, [rows, ...]) that a save can write, else a
    TypeError or ValueError naming ``label``: checked before a partitioning writes any file
    (a uint16 table had been refused after every part was written over the last run's,
    and a 0-d one with torch's "Dimension specified as 0")."""
    if not isinstance(t, Tensor):
        raise TypeError(f"{label} must be a tensor of rows, got {type(t).__name__}")
    if t.dim() == 0:
        raise ValueError(f"{label} must be a table of rows ([rows, ...]), got a 0-d tensor")
    check_savable(t, label)


def read_record(path: Path) -> str:
    """The text of a small JSON record. Anything but a regular file (a FIFO, a device) is
    refused before it is opened: opening a FIFO waits for a writer, forever."""
    info = path.stat()
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{path} is not a regular file: it cannot be a saved record")
    if info.st_size > MAX_RECORD_BYTES:
        raise ValueError(f"{path} holds {info.st_size} bytes, more than a record's "
                         f"{MAX_RECORD_BYTES}: it is not one")
    return path.read_text()


# What a save's CRC-32 covers: the array's dtype and shape, then its bytes (so a dtype or a
# shape changed in the metadata alone fails the check too). Saves without this mark (older
# ones) have a CRC of the bytes alone.
_CRC_OF = "dtype,shape,bytes"


def _crc32(t: Tensor, described: bool = True) -> int:
    data = t.contiguous().view(-1).view(torch.uint8).numpy()
    crc = zlib.crc32(f"{_dtype_name(t.dtype)}{list(t.shape)}".encode()) if described else 0
    for start in range(0, data.size, _CRC_CHUNK):
        crc = zlib.crc32(memoryview(data[start:start + _CRC_CHUNK]), crc)
    return crc


@dataclass
class Streamed:
    """An array that :func:`save_arrays` writes chunk by chunk, so that it is never whole in
    memory (a partition's neighbor lists): its dtype, shape, and its chunks in order."""
    dtype: torch.dtype
    shape: Sequence[int]
    chunks: Iterable[Tensor]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def _write_streamed(name: str, array: Streamed, partial: Path) -> int:
    """Writes ``array``'s chunks to ``partial``; returns its CRC-32 (as :func:`_crc32`)."""
    crc = zlib.crc32(f"{_dtype_name(array.dtype)}{list(array.shape)}".encode())
    written = 0
    with open(partial, "wb") as out:
        for chunk in array.chunks:
            if chunk.dtype != array.dtype:
                raise TypeError(f"a chunk of {name} holds {chunk.dtype}, not {array.dtype}")
            data = memoryview(chunk.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy())
            out.write(data)
            crc = zlib.crc32(data, crc)
            written += data.nbytes
    if written != array.nbytes:
        raise ValueError(f"the chunks of {name} held {written} bytes where its shape "
                         f"{list(array.shape)} needs {array.nbytes}")
    return crc


def save_arrays(directory: Union[str, Path], stem: str,
                arrays: Dict[str, Union[None, Tensor, Streamed]], **meta) -> Path:
    """Writes each array as ``<name>.bin`` (raw bytes) and ``<stem>.json`` describing them
    (dtype, shape, bytes, CRC-32) plus ``meta``, into ``directory``; :func:`map_arrays`
    reads them back. A :class:`Streamed` array is written chunk by chunk. An earlier
    save's json is removed before any of its files is replaced, and the new one is written
    last and atomically, with an id of this save: an interrupted save leaves nothing to
    load rather than a mix of two saves, and a concurrent :func:`map_arrays` sees the whole
    save or raises (it reads the json again once it has mapped the files). Saves into one
    directory take turns (a lock on it), and one that fails leaves none of its files.
    Checks first that the directory's file system has room for every array (a RAM-backed
    /dev/shm is often small)."""
    directory = Path(directory)
    _check_name(stem, str(directory))
    if not isinstance(arrays, Mapping):  # (a list had failed on a missing items())
        raise TypeError(f"arrays must be a dict of names to tensors, got "
                        f"{type(arrays).__name__}")
    present = {name: t for name, t in arrays.items() if t is not None}
    for name in present:
        _check_name(name, str(directory))
    # What can be checked is checked before the old save is touched: a refusal after its
    # json was removed would have lost it. (A Streamed array's chunks are seen only as they
    # are written: one that falls short fails the save like an interruption.)
    for name, t in present.items():
        if not isinstance(t, (Tensor, Streamed)):
            raise TypeError(f"save_arrays saves tensors (or Streamed arrays): {name} is a "
                            f"{type(t).__name__}")
        if isinstance(t, Streamed):
            present[name] = _checked_streamed(name, t)
            t = torch.empty(0, dtype=t.dtype)  # (its dtype checked as a tensor's is)
        check_savable(t, name)
        if isinstance(t, Tensor) and (t.is_conj() or t.is_neg()):
            present[name] = t.resolve_conj().resolve_neg()
    for reserved in (_SAVE_ID, _FORMAT_VERSION):
        if reserved in meta:
            raise ValueError(f"meta may not use the key {reserved!r}: it marks each save")
    try:
        json.dumps(meta)
    except (TypeError, ValueError) as error:
        raise TypeError(f"save_arrays' meta must be JSON data (numbers, strings, lists, "
                        f"dicts): {error}") from None
    if directory.exists() and not directory.is_dir():  # (mkdir's FileExistsError said less)
        raise NotADirectoryError(f"{directory} is a file, not a folder: the arrays are saved "
                                 f"as files in a folder")
    directory.mkdir(parents=True, exist_ok=True)
    # One save at a time in a folder (a lock on the folder itself, held until the save is
    # whole): two at once renamed each other's partial files away and could leave one's
    # json beside the other's files.
    folder = os.open(directory, os.O_RDONLY)
    try:
        try:
            fcntl.flock(folder, fcntl.LOCK_EX)
        except OSError:
            pass  # a file system without locks (some network mounts): unguarded, as before
        return _save_locked(directory, stem, present, meta)
    finally:
        os.close(folder)  # (and the lock with it)


def _checked_streamed(name: str, array: Streamed) -> Streamed:
    """``array`` with its shape as Python ints, else a TypeError or ValueError naming
    ``name``: checked before the old save is touched (a shape of -1 or a chunks of None
    failed once the old json was gone, and numpy ints failed the json itself)."""
    if not isinstance(array.dtype, torch.dtype):
        raise TypeError(f"Streamed {name}'s dtype must be a torch.dtype, got {array.dtype!r}")
    # A list or tuple of Python's or numpy's ints (numpy's are no JSON), not bools.
    shape = ([as_int(d) for d in array.shape] if isinstance(array.shape, (list, tuple))
             else [None])
    if any(d is None or d < 0 for d in shape):
        raise ValueError(f"Streamed {name}'s shape must be a list of ints >= 0, got "
                         f"{array.shape!r}")
    if isinstance(array.chunks, (str, bytes)) or not hasattr(array.chunks, "__iter__"):
        raise TypeError(f"Streamed {name}'s chunks must be an iterable of tensors, got "
                        f"{type(array.chunks).__name__}")
    return Streamed(array.dtype, shape, array.chunks)


def _save_locked(directory: Path, stem: str, present: dict, meta: dict) -> Path:
    """:func:`save_arrays`' writing, with the folder locked."""
    # Each file is written beside the one it replaces, then takes its place: the room a
    # re-save needs at most is what the files before have grown, plus the file being written.
    needed = grown = 0
    for name, t in present.items():
        path = directory / f"{name}.bin"
        needed = max(needed, grown + t.nbytes)
        grown += t.nbytes - (path.stat().st_size if path.is_file() else 0)
    preflight.check_room(directory, needed, f"saving {', '.join(present) or 'nothing'}")
    record = directory / f"{stem}.json"
    # Files are named by array, not by save: another save in this directory that lists one
    # of these names would load this one's bytes as its own.
    for other in directory.glob("*.json"):
        if other == record:
            continue
        try:
            listed = json.loads(read_record(other)).get("arrays", {})
        except (OSError, ValueError, AttributeError):
            continue  # not a save of save_arrays
        shared = sorted(set(listed) & set(present)) if isinstance(listed, dict) else []
        if shared:
            raise ValueError(f"{directory} holds another save, {other.name}, with arrays named "
                             f"{shared}: its files would be overwritten; save to a directory "
                             f"of its own")
    record.unlink(missing_ok=True)
    described = {}
    written = []  # this save's files: removed if it fails (no json will ever list them)
    name, nbytes, partial = record.name, 0, record.with_suffix(".json.partial")
    try:
        for name, t in present.items():
            path = directory / f"{name}.bin"
            partial, nbytes = path.with_suffix(".bin.partial"), t.nbytes
            if isinstance(t, Streamed):
                crc = _write_streamed(name, t, partial)
            else:
                t = t.detach().cpu().contiguous()
                t.view(-1).view(torch.uint8).numpy().tofile(partial)
                crc = _crc32(t)
            os.replace(partial, path)
            written.append(path)
            described[name] = {"dtype": _dtype_name(t.dtype), "shape": list(t.shape),
                               "nbytes": t.nbytes, "crc32": crc, "crc32_of": _CRC_OF}
        name, nbytes, partial = record.name, 0, record.with_suffix(".json.partial")
        partial.write_text(json.dumps({"arrays": described, **meta,
                                       _FORMAT_VERSION: _READS_UP_TO,
                                       _SAVE_ID: secrets.token_hex(8)}))
        os.replace(partial, record)
    except BaseException as error:  # a failed chunk, a full disk, a Ctrl-C
        for done in [partial, *written]:
            try:
                done.unlink(missing_ok=True)
            except OSError:
                pass  # what can be removed is; the error below is the one to tell
        if isinstance(error, OSError):  # numpy's own names neither file nor cause
            raise OSError(error.errno, f"save_arrays could not write {name} "
                                       f"({nbytes} bytes) in {directory}: "
                                       f"{error.strerror or error} (is its file system "
                                       f"full?); nothing of this save is left") from None
        raise
    return directory


def _described(info, name: str, record: Path) -> Tuple[torch.dtype, list, int]:
    """An array's (dtype, shape, nbytes) from the metadata, checked against each other."""
    bad = f"{record} describes {name}.bin"
    if not isinstance(info, dict):
        raise ValueError(f"{bad} as {info!r}, not as a dtype, shape and size")
    dtype = _DTYPES.get(info.get("dtype")) if isinstance(info.get("dtype"), str) else None
    if dtype is None:
        raise ValueError(f"{bad} with dtype {info.get('dtype')!r}, which is none of "
                         f"{sorted(_DTYPES)}")
    shape, nbytes = info.get("shape"), info.get("nbytes")
    if not isinstance(shape, list) or not all(
            is_int(d) and d >= 0 for d in shape):
        raise ValueError(f"{bad} with shape {shape!r}: a list of sizes >= 0 is expected")
    expected = math.prod(shape) * dtype.itemsize
    if nbytes != expected:
        raise ValueError(f"{bad} as {info['dtype']} {shape} ({expected} bytes) but with "
                         f"nbytes {nbytes!r}: the metadata is corrupt")
    return dtype, shape, nbytes


def _writable(path: Path) -> bool:
    """Whether the file can be opened for writing (not on a read-only mount, say)."""
    try:
        with open(path, "r+b"):
            return True
    except OSError:
        return False


def _changed(record: Path, text: str) -> bool:
    """Whether ``record`` no longer reads ``text`` (removed or rewritten by a save)."""
    try:
        return read_record(record) != text
    except OSError:
        return True


def _saved_over_while_loading(directory: Path) -> str:
    return (f"{directory} was saved over while it was being loaded: load it again once that "
            f"save has finished")


def map_arrays(directory: Union[str, Path], stem: str,
               verify: bool = False,
               names: Optional[Sequence[str]] = None,
               required: Sequence[str] = ()) -> Tuple[Dict[str, Tensor], dict]:
    """Maps the arrays of a :func:`save_arrays` directory (no copy) after checking each
    file holds exactly the bytes its metadata names; with ``verify``, its CRC-32 too.
    ``names``, when given, are the arrays the caller expects: others in the metadata raise;
    ``required`` ones must be there. Returns ``(arrays, meta)``.

    The files are mapped shared (MAP_SHARED), so that every process that maps the save
    reads the same pages, also once they are pinned for a GPU (a private mapping would be
    copied by pinning: measured in docs/benchmarks.md). The mapping is the save itself:
    an in-place write reaches every process and later loads (``clone()`` a table to change
    it privately). A save on a read-only file system is mapped privately instead.
    Objects that hold such arrays go to worker processes as their files
    (:func:`send_saves_as_files`); a bare array cannot go to another process through
    torch's pickling: load it there.
    """
    directory = Path(directory)
    _check_name(stem, str(directory))  # as save_arrays: no path that leaves the directory
    verify = check_flag(verify, "verify")  # ("no" would verify)
    for option, given in (("names", names), ("required", required)):
        if isinstance(given, (str, bytes)):  # (read as its characters)
            raise TypeError(f"{option} must be a sequence of array names, got {given!r}")
    record = directory / f"{stem}.json"
    if not record.exists():
        raise FileNotFoundError(f"{record} does not exist: nothing was saved in {directory}, "
                                f"or the save has not finished")
    try:
        text = read_record(record)
        meta = json.loads(text)
    except FileNotFoundError:  # removed since: a save over this one has begun
        raise FileNotFoundError(f"{record} does not exist: nothing was saved in {directory}, "
                                f"or the save has not finished") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"{record} is not the JSON save_arrays writes ({error}): the save "
                         f"is corrupt") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("arrays"), dict):
        raise ValueError(f"{record} lists no arrays: it is not a save of save_arrays")
    version = meta.pop(_FORMAT_VERSION, 1)
    if not is_int(version) or not 1 <= version <= _READS_UP_TO:
        raise ValueError(f"{record} is a save of format {version!r}, and this "
                         f"torch_quiver_ops reads formats 1 to {_READS_UP_TO}: it was written "
                         f"by a later version; load it with that one (or upgrade)")
    arrays = {}
    for name, info in meta.pop("arrays").items():
        _check_name(name, str(record))
        if names is not None and name not in names:
            raise ValueError(f"{record} lists an array {name!r}, none of the expected "
                             f"{sorted(names)}: the save is from something else")
        dtype, shape, nbytes = _described(info, name, record)
        path = directory / f"{name}.bin"
        if not path.exists():
            raise ValueError(f"{path} is missing, but {record.name} lists it ({nbytes} "
                             f"bytes): the save is incomplete")
        if not path.is_file():
            raise ValueError(f"{path} is not a regular file (a folder, a device, ...): "
                             f"{record.name} lists it as an array's bytes")
        size = path.stat().st_size
        if size != nbytes:
            if _changed(record, text):  # a save over this one, not a damaged file
                raise ValueError(_saved_over_while_loading(directory))
            raise ValueError(f"{path} holds {size} bytes but {record.name} says {nbytes}: the "
                             f"file is truncated or from another save")
        count = math.prod(shape)
        if count == 0:
            arrays[name] = torch.empty(shape, dtype=dtype, device="cpu")
        else:
            arrays[name] = torch.from_file(str(path), shared=_writable(path), size=count,
                                           dtype=dtype).view(shape)
        if verify and not is_int(info.get("crc32")):
            raise ValueError(f"{record} records no checksum for {name} (crc32 is "
                             f"{info.get('crc32')!r}): its metadata is corrupt")
        if verify and _crc32(arrays[name], info.get("crc32_of") == _CRC_OF) != info.get("crc32"):
            raise ValueError(f"{path} does not match the checksum in {record.name}: the file "
                             f"is corrupt")
    missing = [name for name in required if name not in arrays]
    if missing:
        raise ValueError(f"{record} lists no {', '.join(missing)}: the save is incomplete or "
                         f"from something else")
    # A save over this one began while the files were mapped (it removes the json first):
    # some of them may be the new save's.
    if _changed(record, text):
        raise ValueError(_saved_over_while_loading(directory))
    meta.pop(_SAVE_ID, None)
    return arrays, meta


# ---- mapped saves across a pickle (mp.spawn workers) ----

def _mapped_inode(address: int) -> Optional[int]:
    """The inode of the file this process maps at ``address`` (/proc/self/maps), None where
    that cannot be read."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                span, _perms, _offset, _device, inode = line.split(maxsplit=5)[:5]
                low, high = (int(end, 16) for end in span.split("-"))
                if low <= address < high:
                    return int(inode)
    except (OSError, ValueError):
        pass
    return None


def _saved_over(path: str) -> str:
    return (f"{path} was saved over after the table was mapped from it: another process "
            f"would map the new save's rows, not these; load the save again (or clone() the "
            f"table)")


def _map_again(path: str, nbytes: int, dtype: torch.dtype, offset: int,
               size: Sequence[int], stride: Sequence[int], inode: Optional[int] = None) -> Tensor:
    """The worker side of :func:`portable`: the same view of the file, mapped shared."""
    now = os.path.getsize(path) if os.path.isfile(path) else None
    if now != nbytes:
        raise ValueError(f"{path} holds {now if now is not None else 'no'} bytes where the "
                         f"table mapped from it held {nbytes}: the save changed after it was "
                         f"loaded")
    if inode is not None and os.stat(path).st_ino != inode:  # same size, another save
        raise ValueError(_saved_over(path))
    whole = torch.from_file(path, shared=True, size=nbytes, dtype=torch.uint8)
    return whole.view(dtype).as_strided(size, stride, offset)


class _MappedView:
    """A tensor over a mapped save file, pickled as that file: unpickled, the same view of
    it mapped again (see :func:`portable`)."""

    def __init__(self, t: Tensor, path: str):
        storage = t.untyped_storage()
        # The file this process maps: a save over the path since then replaced it (the
        # pages mapped here are the old file's), and a worker mapping the path would read
        # the new one without a word.
        inode = _mapped_inode(storage.data_ptr())
        if inode is not None and inode != os.stat(path).st_ino:
            raise ValueError(_saved_over(path))
        self.args = (path, storage.nbytes(), t.dtype, t.storage_offset(), tuple(t.shape),
                     t.stride(), inode)

    def __reduce__(self):
        return _map_again, self.args


def portable(value):
    """``value``, or, for a CPU tensor over a file that :func:`map_arrays` mapped shared,
    what pickles as that file: torch's own reductions cannot pass such pages to another
    process (EBADF under the file_descriptor strategy) or copy them into a new segment
    (file_system), which cuts the table off its save. A worker maps the file again: the
    same pages, no copy."""
    if not isinstance(value, Tensor) or value.device.type != "cpu" or not value.is_shared():
        return value
    path = value.untyped_storage().filename
    if not path or not os.path.isfile(path):  # shared memory segments name no file
        return value
    return _MappedView(value, path)


def portable_state(state, as_bytes: bool = False):
    """A pickled state (a ``__getstate__`` dict, a ``(dict, slots)`` pair, a C++ class's
    tuple) with every tensor over a mapped save made :func:`portable`, within dicts (a
    GraphPartition's splits), lists and tuples too; with ``as_bytes`` every CPU tensor
    travels as its bytes (see ``_STATES_OF_COPIES``)."""
    if isinstance(state, dict):
        return {key: portable_state(value, as_bytes) for key, value in state.items()}
    if type(state) in (list, tuple):  # (exactly: a NamedTuple is built otherwise)
        return type(state)(portable_state(value, as_bytes) for value in state)
    if as_bytes and isinstance(state, Tensor) and state.device.type == "cpu":
        return _TensorBytes(state)
    return portable(state)


def reduce_with_files(obj):
    """``obj`` as pickling takes it (its ``__getstate__``; a ``(dict, slots)`` state of a
    class with slots too), with its tensors over a mapped save made :func:`portable`."""
    return copyreg.__newobj__, (type(obj),), portable_state(obj.__getstate__())


def send_saves_as_files(cls, reduce=reduce_with_files) -> None:
    """Sends ``cls`` to worker processes (multiprocessing's pickler: ``mp.spawn``, queues,
    DataLoader workers) by ``reduce``, by default with its tensors over a mapped save as
    their files (see :func:`portable`). Other pickling (``copy.deepcopy``, ``torch.save``)
    copies the rows: as files, a deepcopy had written through to the original and its
    save, and a ``torch.save`` checkpoint had held only paths. A class that defines its own
    ``__reduce__`` or ``__reduce_ex__`` (or inherits one from a class of its own) is left
    to it."""
    if any(klass is not object and {"__reduce__", "__reduce_ex__"} & vars(klass).keys()
           for klass in cls.__mro__):
        return
    from multiprocessing.reduction import ForkingPickler
    ForkingPickler.register(cls, reduce)


# ---- CUDA IPC: clique shards between processes ----

def shareable_copy(rows: Tensor, device: int):
    """``rows`` copied onto ``device`` into memory other processes can map: returns
    ``(buffer, shard)``, the ``torch.classes.quiver.IpcBuffer`` and the rows as a tensor
    over it (which keeps the buffer alive)."""
    buffer = torch.classes.quiver.IpcBuffer(rows.nbytes, device)
    shard = buffer.tensor().view(rows.dtype).view(rows.shape)
    shard.copy_(rows)
    # Done before a handle goes out: a peer process maps the memory and reads it on its own
    # streams, which nothing in this process's queue orders (a Gloo swap does not wait for
    # the GPU).
    torch.cuda.current_stream(shard.device).synchronize()
    return buffer, shard


def ipc_payload(buffer, shard: Tensor) -> tuple:
    """What a peer process needs to map ``shard`` (from :func:`shareable_copy`): plain data."""
    handle = buffer.handle()
    return (bytes(handle.numpy()), buffer.device(), shard.dtype, tuple(shard.shape))


def open_payload(payload: tuple, reader: int) -> Tensor:
    """Maps a peer's shard for kernels on GPU ``reader``."""
    handle, owner, dtype, shape = payload
    nbytes = math.prod(shape) * dtype.itemsize
    memory = torch.classes.quiver.IpcBuffer.open(
        torch.frombuffer(bytearray(handle), dtype=torch.uint8), nbytes, owner, reader)
    return memory.view(dtype).view(shape)


def local_shards(rows_of: Callable, clique: List[int], shard_ranks, skip=()) -> Dict[int, tuple]:
    """This process's ``(buffer, shard)`` of each of a clique's members (but those in
    ``skip``); ``rows_of(ranks, device)`` gives a member's rows (its ``shard_ranks``
    entry) on its GPU."""
    return {device: shareable_copy(rows_of(ranks, device), device)
            for device, ranks in zip(clique, shard_ranks) if device not in skip}


def gpus_of_several_workers(gathered: List[tuple], clique: List[int]) -> Dict[int, List[int]]:
    """The clique's GPUs that several workers (ranks) named as their current GPU in a
    shard swap (``gathered[rank] = (gpu, payload)``)."""
    ranks_of: Dict[int, List[int]] = {}
    for rank, (gpu, _) in enumerate(gathered):
        if gpu in clique:
            ranks_of.setdefault(gpu, []).append(rank)
    return {gpu: ranks for gpu, ranks in ranks_of.items() if len(ranks) > 1}


def shards_swapped_over(group):
    """Builds each clique's shards across torch.distributed workers: a worker copies only
    the shard of its current GPU, then all workers swap CUDA IPC handles (every worker
    takes part in every swap, so all must place the same cliques in the same order). A
    worker that fails to build its shard still takes part and sends its error, so every
    worker raises instead of waiting for it."""
    import torch.distributed as dist

    def make_shards(rows_of: Callable, clique: List[int], shard_ranks) -> Dict[int, tuple]:
        mine = torch.cuda.current_device()
        made: Dict[int, tuple] = {}
        payload = (mine, None)
        try:
            if mine in clique:
                made[mine] = shareable_copy(rows_of(shard_ranks[clique.index(mine)], mine), mine)
                payload = (mine, ipc_payload(*made[mine]))
        except Exception as error:  # noqa: BLE001 (sent to every worker, then raised)
            payload = ("error", f"{type(error).__name__}: {error}")
        gathered = [None] * dist.get_world_size(group)
        dist.all_gather_object(gathered, payload, group=group)
        failures = [f"rank {rank}: {item[1]}" for rank, item in enumerate(gathered)
                    if item[0] == "error"]
        if failures:
            raise RuntimeError("building the clique's shards failed on " + "; ".join(failures))
        shared = gpus_of_several_workers(gathered, clique)
        if shared:
            raise RuntimeError(
                f"Feature.load_shared: workers share a GPU of the clique {clique} ("
                + "; ".join(f"GPU {gpu}: ranks {ranks}" for gpu, ranks in shared.items())
                + "), so each would build and hold the same shard: every worker builds "
                  "the shard of its current GPU; call torch.cuda.set_device(LOCAL_RANK) "
                  "before load_shared")
        if mine not in clique:
            return {}  # this worker reads another clique's shards
        for gpu, shard in gathered:
            if gpu in clique and gpu not in made:
                made[gpu] = (None, open_payload(shard, mine))  # a peer's, mapped
        # The shards of GPUs no worker runs on.
        made.update(local_shards(rows_of, clique, shard_ranks, skip=made))
        return made

    return make_shards


# ---- generators across spawned processes ----

def _generator_of(device: str, state: bytes) -> torch.Generator:
    generator = torch.Generator(device)
    generator.set_state(torch.frombuffer(bytearray(state), dtype=torch.uint8))
    return generator


def _reduce_generator(generator: torch.Generator):
    # torch's own reduction sends the state as a tensor, and torch.multiprocessing sends a
    # tensor as a shared-memory file descriptor, which a spawned process cannot open here
    # ("bad value(s) in fds_to_keep", or a worker that dies): our samplers and loaders hold
    # generators, so every DataLoader with multiprocessing_context="spawn" failed. As bytes,
    # the state travels in the pickle (a few KB).
    return _generator_of, (str(generator.device), generator.get_state().numpy().tobytes())


def _send_generators_as_bytes() -> None:
    from multiprocessing.reduction import ForkingPickler
    ForkingPickler.register(torch.Generator, _reduce_generator)


_send_generators_as_bytes()


# ---- our C++ classes across spawned processes ----

def _tensor_of_bytes(data: bytes, dtype: torch.dtype, shape: Tuple[int, ...]) -> Tensor:
    if not data:
        return torch.empty(shape, dtype=dtype, device="cpu")
    return torch.frombuffer(bytearray(data), dtype=dtype).reshape(shape)


class _TensorBytes:
    """A CPU tensor pickled as its bytes."""

    def __init__(self, t: Tensor):
        self.args = (t.contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b"",
                     t.dtype, tuple(t.shape))

    def __reduce__(self):
        return _tensor_of_bytes, self.args


# Classes whose pickled state is made of fresh copies (a ShardMap's, so that a write to the
# state cannot reach the live map). torch.multiprocessing sends a tensor as a shared-memory
# file descriptor, which closes when the copy is freed, before a spawned process starts
# ("bad value(s) in fds_to_keep"): their tensors travel in the pickle instead.
_STATES_OF_COPIES = {"__torch__.torch.classes.quiver.ShardMap"}


def _reduce_script_object(obj):
    """One of our C++ objects (a ``torch.classes.quiver`` class) sent to worker processes:
    its tensors over a mapped save as their files (a FeatureTiers of a ``load_shared``
    table failed with EBADF), fresh copies as bytes; other classes as torch sends them."""
    rebuild, args, (state, name), *rest = obj.__reduce_ex__(4)
    if name.startswith("__torch__.torch.classes.quiver."):
        state = portable_state(state, as_bytes=name in _STATES_OF_COPIES)
    return (rebuild, args, (state, name), *rest)


def _send_script_objects_for_workers() -> None:
    from multiprocessing.reduction import ForkingPickler
    ForkingPickler.register(torch.ScriptObject, _reduce_script_object)


_send_script_objects_for_workers()
