"""What the command-line scripts share: bad input ends a command with argparse's one-line
error, not a traceback."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable, Iterable

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


def run(parser: argparse.ArgumentParser, body: Callable[[argparse.Namespace], None],
        args: argparse.Namespace) -> None:
    """``body(args)``; bad input exits with status 1 and ``prog: error: message``."""
    try:
        body(args)
    except BAD_INPUT as error:
        parser.exit(1, f"{parser.prog}: error: {error}\n")
