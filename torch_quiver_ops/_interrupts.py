"""Ctrl-C during the library's waits.

The runtime's waits for peers, the rendezvous store, collectives, batches and answers end on
SIGINT once they have lasted half a second (``runtime/interrupt_watch.h``), raising a
RuntimeError that says "interrupted by SIGINT (Ctrl-C)". Python runs its own SIGINT handler
only at its next check, which may fall in any later line (or never, for an error on its way
out of the program), so ``except KeyboardInterrupt`` would miss it. The library's entry
points that wait run the handler at once instead, through :data:`ctrl_c_ends_waits`:
KeyboardInterrupt by default, chained to the RuntimeError; whatever the program's own
handler does otherwise (and the RuntimeError follows if that handler returns)."""
import ctypes
import functools


class _CtrlCEndsWaits:
    """A context manager, and a decorator, that runs Python's pending signal handlers when
    the code inside raises (a wait's "interrupted by SIGINT" RuntimeError among others).
    Stateless: one is shared (a class, not a generator: it wraps every batch of a loader)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, error, traceback) -> bool:
        if kind is not None:
            # Any error, not only the interrupted wait's: a wait inside a fallback (a host's
            # empty turn after ids it could not read) ends on SIGINT too, and its error is
            # swallowed there. With no signal pending this does nothing; with one, it runs
            # the handler now, as Python would at its next check anyway. Raises what the
            # handler raises (ctypes raises the Python error it left set). Off the main
            # thread the handlers do not run here: the main thread runs them.
            ctypes.pythonapi.PyErr_CheckSignals()
        return False

    def __call__(self, function):
        @functools.wraps(function)
        def waiting(*args, **kwargs):
            with self:
                return function(*args, **kwargs)
        return waiting


ctrl_c_ends_waits = _CtrlCEndsWaits()


def runtime_timeout(timeout) -> float:
    """A Python wait's ``timeout`` as the runtime's waits take it, read as
    concurrent.futures reads one: None is no limit (the runtime's -1), 0 or less only what is
    in already (a deadline past is no wait), NaN left for the runtime to refuse."""
    if timeout is None:
        return -1.0
    if isinstance(timeout, (bool, str, bytes)):  # float() took "5" and True as seconds
        raise TypeError(f"timeout must be a number of seconds or None, got {timeout!r}")
    timeout = float(timeout)
    return 0.0 if timeout < 0 else timeout
