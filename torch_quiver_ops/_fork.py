"""Runtime objects a forked child inherits without their threads.

A ``ServingRuntime`` or a C++ ``BatchPrefetcher`` runs C++ threads that wait on condition
variables. ``os.fork()`` copies the objects but not the threads, so in the child closing or
destroying one waits for waiters that are not there: a child that merely exited hung (a
probe). Such objects are marked when made; in a child each is kept alive for good (never
destroyed) and named as inherited, so that the library skips it at exit and refuses to use
it, while objects made in the child work as usual.
"""
from __future__ import annotations

import ctypes
import os
import weakref

_threaded: "weakref.WeakSet" = weakref.WeakSet()
_inherited: set = set()  # ids of the kept objects (stable: they are never freed here)


def made_with_threads(obj):
    """Marks ``obj`` as an object whose C++ threads a fork does not copy; returns it."""
    _threaded.add(obj)
    return obj


def inherited(obj) -> bool:
    """Whether ``obj`` was made before this process was forked (its threads are not here)."""
    return id(obj) in _inherited


def _after_fork_in_child() -> None:
    for obj in list(_threaded):
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))  # its destructor would wait
        _inherited.add(id(obj))
    _threaded.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
