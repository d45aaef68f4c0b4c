"""Checks made before large allocations, each failing with the limit, the size asked for
and the fix in one sentence, instead of a bus error or an opaque error from deep inside
torch, CUDA or the RDMA stack.

The two limits users of GNN data loaders meet most: shared memory (``/dev/shm``, 64 MiB in
a default Docker container) for tables that processes share, and the locked-memory limit
(``ulimit -l``) for memory an RDMA NIC registers.
"""
from __future__ import annotations

import os
import resource
from pathlib import Path
from typing import Union

# Left free on a file system after a save: other users of /dev/shm (NCCL, DataLoader
# workers) need some of it too. At most an eighth of the file system: a fixed 64 MiB
# refused every save into Docker's default 64 MB /dev/shm, even of 48 bytes.
SPARE_BYTES = 64 << 20


def spare_bytes(total: int) -> int:
    """What a save leaves free on a file system of ``total`` bytes."""
    return min(SPARE_BYTES, total // 8)


class ResourceLimitError(RuntimeError):
    """A system limit is smaller than what an operation needs."""


def _size(nbytes: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):.1f} {unit}"
    return f"{nbytes} bytes"


def _existing(path: Path) -> Path:
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _is_shm(path: Path) -> bool:
    try:
        return str(_existing(path).resolve()).startswith("/dev/shm")
    except OSError:
        return False


def check_room(directory: Union[str, Path], nbytes: int, what: str) -> None:
    """Raises ResourceLimitError when the file system of ``directory`` has less than
    ``nbytes`` free (and some to spare)."""
    if nbytes <= 0:
        return
    try:
        stat = os.statvfs(_existing(Path(directory)))
    except OSError:
        return  # nothing to ask: let the write itself tell
    free, total = stat.f_bavail * stat.f_frsize, stat.f_blocks * stat.f_frsize
    spare = spare_bytes(total)
    if free >= nbytes + spare:
        return
    if _is_shm(Path(directory)):
        fix = ("enlarge /dev/shm (`mount -o remount,size=<N>G /dev/shm` as root; in Docker "
               "`--shm-size=<N>g`; in Kubernetes an emptyDir with medium: Memory) or save to "
               "a disk directory")
    else:
        fix = "free space there or choose a directory on a larger file system"
    raise ResourceLimitError(
        f"{what} needs {_size(nbytes)} in {directory}, but its file system has "
        f"{_size(free)} free of {_size(total)}, and keeps {_size(spare)} of it spare for "
        f"other users: {fix}")


def check_shared_memory(nbytes: int, what: str) -> None:
    """Raises ResourceLimitError when /dev/shm (where torch puts tensors that processes
    share) has less than ``nbytes`` free."""
    if Path("/dev/shm").exists():
        check_room(Path("/dev/shm"), nbytes, what)


def proc_bytes(path: str, key: str) -> int:
    """A ``key: N kB`` line of a /proc file (/proc/meminfo, /proc/self/status) in bytes;
    -1 where there is none to read."""
    try:
        with open(path) as lines:
            for line in lines:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return -1


def available_memory() -> int:
    """MemAvailable of /proc/meminfo in bytes (-1 where there is none to read)."""
    return proc_bytes("/proc/meminfo", "MemAvailable")


def check_host_memory(nbytes: int, what: str, fix: str) -> None:
    """Raises ResourceLimitError when host memory has less than ``nbytes`` available: an
    allocation past it is granted by overcommit, then the process is killed as it fills it,
    with no Python error at all."""
    available = available_memory()
    if available < 0 or nbytes <= available:
        return
    raise ResourceLimitError(f"{what} needs {_size(nbytes)} of host memory, but "
                             f"{_size(available)} is available: {fix}")


def memlock_limit() -> int:
    """The soft RLIMIT_MEMLOCK in bytes (-1: unlimited)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return -1 if soft == resource.RLIM_INFINITY else soft


def check_memlock(nbytes: int, what: str) -> None:
    """Raises ResourceLimitError when ``nbytes`` of memory cannot be locked under this
    process's RLIMIT_MEMLOCK (what an RDMA registration counts against). Root is exempt
    (CAP_IPC_LOCK)."""
    limit = memlock_limit()
    if limit < 0 or nbytes <= limit or os.geteuid() == 0:
        return
    raise ResourceLimitError(
        f"{what} locks {_size(nbytes)} of memory, but this process may lock only "
        f"{_size(limit)} (RLIMIT_MEMLOCK, `ulimit -l`): raise it (`ulimit -l unlimited` in "
        f"the launching shell, `memlock` in /etc/security/limits.conf, or Docker's "
        f"`--ulimit memlock=-1`)")
