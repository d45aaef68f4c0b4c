"""Checks the examples run on their options in parse_args, before a graph is built: each
refusal is an argparse error naming the option and its value (exit 2), not a traceback
after an epoch has gone by."""
from __future__ import annotations

import math
import sys
from typing import Callable, List, Optional, Sequence

from torch_quiver_ops._cli import seed  # noqa: F401  (argparse's type for --seed, shared)


def fanout_list(parser, text: str, option: str = "--fanouts") -> List[int]:
    """``text`` as fanouts (outermost first): whole numbers, each >= 0 or -1 (every
    neighbor)."""
    try:
        fanouts = [int(f) for f in text.split(",")]
    except ValueError:
        parser.error(f"{option} takes whole numbers such as 15,10,5, got {text!r}")
    if any(f < -1 for f in fanouts):
        parser.error(f"{option} takes counts >= 0, or -1 for every neighbor, got {text}")
    from torch_quiver_ops.ops import check_fanouts, integer_fanouts  # what the samplers take
    try:
        check_fanouts(integer_fanouts(fanouts, option), False, option)
    except ValueError as error:  # a count past 64 bits, say: the op's int[] would refuse it
        parser.error(str(error))
    return fanouts


def cache_size(parser, text: str, option: str = "--cache-size") -> None:
    """``text`` reads as a feature cache size (a share such as 20%, or bytes such as 200M),
    checked on every machine: a CPU-only run, which caches nothing, used to pass a typo on."""
    from torch_quiver_ops import _cli  # (Feature's own readers, as the scripts check sizes)
    _cli.check_size(parser, option.lstrip("-"), text)


def at_least(parser, args, names: Sequence[str], least: int) -> None:
    """Each option in ``names`` (argparse's dest names) is None (left out) or >= ``least``
    (the scripts' own check, torch_quiver_ops._cli.check_args)."""
    from torch_quiver_ops import _cli
    _cli.check_args(parser, args, {name: least for name in names})


# The widest hidden layer an example takes (the C++ trainer's bound too): 256 MiB a float
# weight matrix. Wider ones reached torch's allocator, whose error names no option, or the
# kernel's OOM killer (65,536 wide: 16 GiB a matrix, killed with no message at all).
MAX_HIDDEN = 1 << 13


# The largest batch an example takes: past it a count no longer fits the int64 (or the
# sys.maxsize) the loaders split seeds with, and the error came from inside them.
MAX_BATCH_SIZE = 1 << 40


def at_most(parser, args, names: Sequence[str], most: int) -> None:
    """Each option in ``names`` is None (left out) or <= ``most``."""
    for name in names:
        value = getattr(args, name)
        if value is not None and value > most:
            parser.error(f"--{name.replace('_', '-')} must be at most {most:,}, got {value}")


def positive(parser, args, names: Sequence[str]) -> None:
    """Each option in ``names`` is a finite number > 0 (nan and inf refused: a learning
    rate of inf trained to NaN and scored it as a perfect AUC)."""
    for name in names:
        value = getattr(args, name)
        if not (value > 0 and math.isfinite(value)):
            parser.error(f"--{name.replace('_', '-')} must be a finite number > 0, got {value}")


def stop_if_diverged(loss: float, epoch: int, lr: float) -> None:
    """Ends a run whose epoch loss is no longer a finite number, with one line and exit 1:
    such a run went on to print NaN losses and scores and exit 0 (--lr 2**63, say)."""
    if not math.isfinite(loss):
        raise SystemExit(f"error: the loss is {loss} after epoch {epoch}: training diverged "
                         f"(--lr {lr:g}; a smaller one may help)")


def negatives_fit(parser, option: str, value: int, negatives: int) -> None:
    """parser.error unless a batch's ``negatives`` fit in host memory (the link loaders' own
    check, found here and not when the first batch of that size is drawn, after training)."""
    from torch_quiver_ops import preflight
    from torch_quiver_ops.pyg.loader import NEGATIVE_BYTES
    available = preflight.available_memory()
    if 0 <= available < negatives * NEGATIVE_BYTES:
        parser.error(f"{option} {value:,} draws {negatives:,} negatives a batch: at least "
                     f"{negatives * NEGATIVE_BYTES / 2**30:,.1f} GiB, where "
                     f"{available / 2**30:,.1f} GiB are available")


def output_file(parser, name: str, path: Optional[str]) -> None:
    """``path`` (when given) can be written as a file: not a folder, in a folder that
    exists and takes files."""
    if path is None:
        return
    if not path:  # (Path("") is the current folder: "--report  is a folder")
        parser.error(f"--{name} must not be empty")
    from torch_quiver_ops import _cli  # (it refuses a folder too)
    _cli.check_output_file(parser, name, path)


def graph_fits(parser, size: str, device=None, option: str = "--size") -> None:
    """parser.error when the preset ``size`` cannot be drawn (on ``device``) in the memory
    this host has available, naming the presets that can: the run had stopped in the
    generator with a traceback whose fix named settings no option gives (a probe)."""
    from torch_quiver_ops.preflight import available_memory
    from torch_quiver_ops.synthetic import PRESETS, preset_host_bytes
    available = available_memory()
    need = preset_host_bytes(size, device)
    if 0 <= available < need:
        fitting = [name for name in PRESETS if preset_host_bytes(name, device) <= available]
        parser.error(f"{option} {size} needs about {need / 2**30:.3g} GiB of host memory to "
                     f"draw its graph, but {available / 2**30:.3g} GiB is available: give a "
                     f"smaller preset ({', '.join(fitting) or 'none fits'})")


def cuda_usable() -> bool:
    """A GPU that torch sees, and a library built with the CUDA kernels (the package's own
    check)."""
    from torch_quiver_ops._device import gpus_usable
    return gpus_usable()


def device_option(parser, text: str, option: str = "--device", auto: bool = False) -> None:
    """``text`` names a device this machine can run on: cpu, or a CUDA device when
    :func:`cuda_usable` (and ``auto`` when allowed), refused before anything is written."""
    import torch
    if auto and text == "auto":
        return
    try:
        device = torch.device(text)
    except RuntimeError:
        parser.error(f"{option} takes {'auto, ' if auto else ''}cpu or a CUDA device such as "
                     f"cuda:0, got {text!r}")
    if device.type not in ("cpu", "cuda"):
        parser.error(f"{option} takes {'auto, ' if auto else ''}cpu or a CUDA device such as "
                     f"cuda:0, got {text!r}")
    if device.type == "cuda":
        if not cuda_usable():
            parser.error(f"{option} {text}: this machine has no usable GPU (torch sees "
                         f"{torch.cuda.device_count()}, or the library was built without "
                         f"its CUDA kernels)")
        if device.index is not None and device.index >= torch.cuda.device_count():
            parser.error(f"{option} {text}: torch sees {torch.cuda.device_count()} GPU(s)")


def write_report(path, result: dict) -> None:
    """``result`` as JSON at ``path``, whole or not at all: written beside it, then renamed
    over it (a disk that filled as the run ended had left half a report). A device or pipe
    (/dev/stdout) is written in place, and a link's target through the link."""
    import contextlib
    import json
    import os
    import secrets
    import shutil
    given, path = path, os.path.realpath(path)
    try:
        if os.path.exists(path) and not os.path.isfile(path):
            with open(path, "w") as f:
                json.dump(result, f, indent=1)
            return
        # Made as open() makes files (mode 0o666 less the umask), kept as the report was.
        staged = os.path.join(os.path.dirname(path), f".report-{secrets.token_hex(6)}.json")
        fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            with open(fd, "w") as f:  # (a full disk may fail it as it closes)
                json.dump(result, f, indent=1)
            if os.path.exists(path):
                with contextlib.suppress(OSError):
                    shutil.copymode(path, staged)
            os.replace(staged, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(staged)
            raise
    except OSError as error:  # (a write's own error named no file)
        raise OSError(error.errno, f"the report could not be written "
                                   f"({error.strerror or error})", given) from None


def run_main(main: Callable[[], object]) -> None:
    """An example's ``main()``; Ctrl-C ends it with one line and status 130 (a shell's
    status for SIGINT), not a traceback through whatever it was doing, and so does a named
    file that cannot be read or written (status 1: a full disk as the report was written, a
    folder where an output goes)."""
    import os
    failed = None
    try:
        main()
        return
    except KeyboardInterrupt:
        pass
    except OSError as error:
        if error.filename is None:  # (not a file's: its traceback says more)
            raise
        failed = f"{os.path.basename(sys.argv[0])}: error: {error}"
    # Out of the except block, the interrupt and the frames its traceback held (an epoch's
    # loader among them) are let go, so the loader's cleanup stops its threads now. Exiting
    # from inside the block left them building batches inside torch while the interpreter
    # finalized: an abort ("terminate called without an active exception").
    import gc
    gc.collect()
    if failed is not None:
        sys.exit(failed)
    print("interrupted (Ctrl-C)", file=sys.stderr)
    sys.exit(130)
