"""What the command-line scripts share: bad input ends a command with argparse's one-line
error, not a traceback."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable, Dict, Iterable

# What the library raises for input it refuses (a missing or corrupt file, an id out of
# range, a wrong dtype): the user's to fix, so the message is all they need.
BAD_INPUT = (ValueError, TypeError, IndexError, OSError)


def check_files(parser: argparse.ArgumentParser, args: argparse.Namespace,
                flags: Iterable[str]) -> None:
    """parser.error for each of ``flags`` (attribute names) given a path that is no file."""
    for flag in flags:
        path = getattr(args, flag)
        if path and not Path(path).is_file():
            parser.error(f"--{flag.replace('_', '-')} {path} is not a file")


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace,
                at_least: Dict[str, int] = None, graphs: Iterable[str] = (),
                at_most: Dict[str, int] = None) -> None:
    """parser.error for an option below its least value (``at_least``: dest name -> least;
    None, an option left out, passes) or above its most (``at_most``: past it, a run failed
    in the allocator, naming no option), and for a graph preset ``graphs`` (dest names of a
    preset or a comma list of them) that torch_quiver_ops.synthetic does not have."""
    from .synthetic import PRESETS
    for name, least in (at_least or {}).items():
        value = getattr(args, name)
        if value is not None and not value >= least:
            parser.error(f"--{name.replace('_', '-')} must be >= {least}, got {value}")
    for name, most in (at_most or {}).items():
        value = getattr(args, name)
        if value is not None and not value <= most:
            parser.error(f"--{name.replace('_', '-')} must be <= {most}, got {value}")
    for name in graphs:
        unknown = [g for g in str(getattr(args, name)).split(",") if g not in PRESETS]
        if unknown:
            parser.error(f"--{name.replace('_', '-')} takes presets of {sorted(PRESETS)}, got "
                         f"{unknown}")


def check_folder_writable(parser: argparse.ArgumentParser, what: str, folder) -> None:
    """parser.error, naming ``what`` (the option and its value), unless a file can be made
    in ``folder``. A file made and dropped answers for root too, whom access() lets write
    anywhere (/proc, say)."""
    import tempfile
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        parser.error(f"{what}: no file can be written in {folder} ({error.strerror})")


def check_output_file(parser: argparse.ArgumentParser, flag: str, path) -> None:
    """parser.error unless a file can be written at ``path`` (``flag`` names the option):
    found only once a run was over, its model or report was lost."""
    import os
    text = os.fspath(path)
    try:
        if Path(text).is_dir() or text.endswith(os.sep):  # (open() failed once the run was over)
            parser.error(f"--{flag} {path} is a folder: give a file name in it")
        # Not resolved: "missing/../x" names no file where the folder "missing" is absent,
        # though resolve() read it as "x" (the run then failed at its end).
        folder = Path(text).absolute().parent
        if folder.exists() and not folder.is_dir():  # (it had said the folder did not exist)
            parser.error(f"--{flag} {path}: {folder} is a file, not a folder")
        if not folder.is_dir():
            parser.error(f"--{flag} {path}: the folder {folder} does not exist")
        check_folder_writable(parser, f"--{flag} {path}", folder)
        # The name itself, without making it (ranks of one job check one path at once)
        if "\0" in text:
            raise ValueError("embedded null byte")
        name_max = os.pathconf(folder, "PC_NAME_MAX")
        if len(os.fsencode(Path(text).name)) > name_max:
            raise OSError(36, f"File name too long (over {name_max} bytes)")
        if Path(text).exists() and not os.access(text, os.W_OK):
            parser.error(f"--{flag} {path}: the file exists and this process may not write it")
    except (OSError, ValueError) as error:  # a name too long, or with a NUL byte
        why = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        parser.error(f"--{flag} {path!r}: no file can be written by that name ({why})")


def check_outputs(parser: argparse.ArgumentParser, args: argparse.Namespace,
                  flags: Iterable[str]) -> None:
    """:func:`check_output_file` for each of ``flags`` (dest names) that was given, before
    the run (after it, a bad path lost its results); an empty path is refused (it was read
    as no output, and nothing was written)."""
    for flag in flags:
        path = getattr(args, flag)
        if path is None:
            continue
        option = flag.replace("_", "-")
        if not str(path):
            parser.error(f"--{option} must not be empty")
        check_output_file(parser, option, path)


def check_size(parser: argparse.ArgumentParser, flag: str, text) -> None:
    """parser.error unless ``text`` is a memory size the library reads: bytes, '1G', or a
    share such as '20%' (a bad one was ignored where the option had no use, as on a CPU)."""
    from ._device import parse_share, parse_size
    try:
        if parse_share(text, f"--{flag}") is None:
            parse_size(text, f"--{flag}")
    except (ValueError, TypeError) as error:  # (it names --flag and the value)
        parser.error(str(error))


def int_list(parser: argparse.ArgumentParser, flag: str, text: str, least: int = 0) -> list:
    """A comma list of ints, each >= ``least``, else parser.error naming ``--flag``."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        parser.error(f"--{flag} takes a comma list of whole numbers, got {text!r}")
    bad = [v for v in values if v < least]
    if bad:
        parser.error(f"--{flag} values must be >= {least}, got {bad}")
    return values


def from_child(messages, child, timeout: float, what: str = "the server process"):
    """The next message a child process puts on ``messages``; SystemExit at once when the
    child has exited without one (its own traceback is above: waiting out the timeout for
    a dead process told nothing), or after ``timeout`` seconds of silence."""
    import queue
    import time
    deadline = time.monotonic() + timeout
    while True:
        try:
            return messages.get(timeout=1.0)
        except queue.Empty:
            if not child.is_alive():
                raise SystemExit(f"{what} exited (code {child.exitcode}) before answering: "
                                 f"see its output above") from None
            if time.monotonic() > deadline:
                raise SystemExit(f"{what} sent nothing within {timeout:g} s") from None


def seed(text: str) -> int:
    """argparse's type for ``--seed``: a whole number that every seed it reaches takes (a
    larger one failed after parsing with "Overflow when unpacking long long")."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number, got {text!r}") from None
    if not 0 <= value < 2**63:  # the ops take int64 seeds
        raise argparse.ArgumentTypeError(f"must be in [0, 2**63), got {value}")
    return value


def require_gpu(parser: argparse.ArgumentParser) -> None:
    """parser.error unless torch sees a CUDA GPU and the library has its CUDA kernels: for
    scripts that measure GPU paths (they failed deep inside torch on a CPU-only machine)."""
    import torch
    from ._device import gpus_usable
    if not gpus_usable():
        parser.error(f"{parser.prog} measures GPU paths: it needs a CUDA GPU (torch sees "
                     f"{torch.cuda.device_count()}) and the library built with its CUDA kernels")


def load_failure(error: Exception, path=None) -> str:
    """Why ``torch.load`` failed, in a line: its UnpicklingError goes on to advise
    weights_only=False, which runs a file's code, no advice for a user's input file. With
    ``path``, a file that is neither a zip archive nor a pickle (what torch.save writes) is
    said to be so: a JSON report had been told it held more than tensors."""
    import pickle
    head = None
    if path is not None:
        try:
            with open(path, "rb") as file:
                head = file.read(4)
        except OSError:
            pass
    if head == b"":
        return "the file is empty"
    if head is not None and not (head.startswith(b"PK\x03\x04") or head.startswith(b"\x80")):
        return ("it is not a file torch.save writes (neither a zip archive nor a pickle): "
                "another kind of file?")
    if isinstance(error, pickle.UnpicklingError):
        return "it holds more than tensors and plain values, which torch.load refuses to unpickle"
    return (str(error).splitlines() or ["(no message: an empty file?)"])[0]


def load_file(flag: str, path, kind: type = None, mmap: bool = False):
    """``torch.load(path)`` of the file given as ``--flag``: whatever torch.load raises on a
    truncated or foreign file (a pickle KeyError, a zip error, EINVAL) becomes a ValueError
    naming the flag and the file, and a value that is not a ``kind`` is refused too."""
    import torch
    try:
        value = torch.load(path, mmap=mmap)
    except Exception as error:  # noqa: BLE001  (pickle, zip and I/O errors alike)
        raise ValueError(f"--{flag} {path} is not a file torch.save wrote whole "
                         f"({type(error).__name__}: {load_failure(error, path)})") from None
    if kind is not None and not isinstance(value, kind):
        raise ValueError(f"--{flag} {path} holds a {type(value).__name__}, not a "
                         f"{kind.__name__}")
    return value


def run(parser: argparse.ArgumentParser, body: Callable[[argparse.Namespace], None],
        args: argparse.Namespace) -> None:
    """``body(args)``; bad input exits with status 1 and ``prog: error: message``, a Ctrl-C
    with 130 and one line (it was a traceback of twenty lines)."""
    try:
        body(args)
    except BAD_INPUT as error:
        parser.exit(1, f"{parser.prog}: error: {error}\n")
    except KeyboardInterrupt:
        parser.exit(130, f"{parser.prog}: interrupted (Ctrl-C); what it was writing may be "
                         f"incomplete\n")
