import multiprocessing
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

# The multi-host tests' fork server (see WORKER_START), started before this process imports
# torch when QUIVER_EARLY_FORKSERVER=1, so that both imports run at once: on the soft-RoCE
# guest (scripts/test.sh sets it there) each takes a minute and a half of emulated CPU.
# The modules the server imports import this file again: the second variable stops it there.
if os.environ.get("QUIVER_EARLY_FORKSERVER") == "1" and \
        "QUIVER_FORKSERVER_STARTED" not in os.environ:
    os.environ["QUIVER_FORKSERVER_STARTED"] = "1"  # what the server inherits
    multiprocessing.set_forkserver_preload(
        ["torch", "torch.distributed", "torch_quiver_ops", "test_dist", "test_dist_faults",
         "test_dist_sampler"])
    from multiprocessing import forkserver
    forkserver.ensure_running()

import torch  # noqa: E402
import torch_quiver_ops as qv  # noqa: E402

HAS_CUDA = torch.cuda.is_available() and qv.cuda_kernels_built()
MODES = ["CPU"] + (["GPU", "UVA"] if HAS_CUDA else [])
requires_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU and the CUDA kernels")
EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")

# The multi-host tests' worker processes. Spawned, each imports torch afresh: about 2 s on
# this machine, 60-80 s on the soft-RoCE guest's emulated CPU (scripts/test.sh), twice a
# test. Without a GPU they are forked instead from one server that imported torch, our
# package and the test modules once. With a GPU they are spawned: that server would have
# initialized CUDA's driver (HAS_CUDA asks torch.cuda.is_available()), which a forked
# child cannot use.
WORKER_START = "spawn" if torch.cuda.is_available() else "forkserver"


def worker_context():
    """The multiprocessing context of the multi-host tests' workers (WORKER_START)."""
    if WORKER_START == "forkserver":  # read once, when the server starts (unless it has)
        # The modules whose functions the workers run (test_dist*), already imported here.
        multiprocessing.set_forkserver_preload(
            ["torch", "torch.distributed", "torch_quiver_ops",
             *sorted(name for name in sys.modules if name.startswith("test_dist"))])
    return torch.multiprocessing.get_context(WORKER_START)


def in_environment(rank, environment, fn, *args):
    """fn(rank, *args) under ``environment``: the parent's when the worker was started (a
    fork server's children would otherwise see the server's, which monkeypatch.setenv does
    not reach)."""
    os.environ.clear()
    os.environ.update(environment)
    return fn(rank, *args)


def spawn_workers(fn, args=(), nprocs=1):
    """torch.multiprocessing.spawn(fn, args, nprocs) through worker_context(), joined."""
    worker_context()
    torch.multiprocessing.start_processes(
        in_environment, args=(dict(os.environ), fn, *args), nprocs=nprocs,
        start_method=WORKER_START)


def worker_process(fn, rank, *args):
    """A worker process, not started, that runs fn(rank, *args) (worker_context())."""
    return worker_context().Process(target=in_environment,
                                    args=(rank, dict(os.environ), fn, *args))


def run_commands(commands, timeout):
    """subprocess.run(command, capture_output=True, text=True) of each command, two at a
    time (each mostly imports torch on one core), in the order given."""
    import subprocess
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(lambda command: subprocess.run(
            command, capture_output=True, text=True, timeout=timeout), commands))


# Runs scripts as `python script.py *argv` would, one after another in one process (see
# run_script_cases): each as __main__, with its own sys.argv, sys.path, environment, output
# and exit status, and a time limit of its own. Modules a case imports from its script's
# folder (the scripts' helpers) are dropped after it, so that the next finds only its own;
# libraries and our package stay imported (torch's and PyG's modules cannot be imported
# twice).
_SCRIPT_CASES_DRIVER = r"""
import contextlib, faulthandler, io, json, os, runpy, signal, sys, traceback
import torch, torch_quiver_ops
limit, cases = json.load(sys.stdin)

class CaseTimeout(BaseException):  # (a script's own except Exception must not take it)
    pass

def too_long(signum, frame):
    raise CaseTimeout(f"the case ran past its {limit} s")

signal.signal(signal.SIGALRM, too_long)
for path, argv in cases:
    out, err, code = io.StringIO(), io.StringIO(), 0
    path_before, environment = sys.path[:], dict(os.environ)
    modules = set(sys.modules)
    sys.argv = [path, *argv]
    sys.path.insert(0, os.path.dirname(path))
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        signal.alarm(limit)
        # Where the alarm cannot reach (a case stuck in C), the process ends with the stacks.
        faulthandler.dump_traceback_later(limit + 30, exit=True, file=sys.__stderr__)
        try:
            runpy.run_path(path, run_name="__main__")
        except SystemExit as end:  # as the interpreter ends: a message goes to stderr, 1
            if end.code is None or isinstance(end.code, int):
                code = end.code or 0
            else:
                print(end.code, file=sys.stderr)
                code = 1
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            signal.alarm(0)
            faulthandler.cancel_dump_traceback_later()
    sys.path[:] = path_before
    os.environ.clear()
    os.environ.update(environment)
    for name in set(sys.modules) - modules:
        where = getattr(sys.modules[name], "__file__", None) or ""
        if where.startswith(os.path.dirname(path) + os.sep):
            del sys.modules[name]
    result = {"returncode": code, "stdout": out.getvalue(), "stderr": err.getvalue()}
    # (on a line of its own: a case may have written to the real stdout without a newline)
    sys.__stdout__.write("\n@@case@@" + json.dumps(result) + "\n")
    sys.__stdout__.flush()
"""


def run_script_cases(cases, timeout, env=None, cwd=None):
    """Each ``(script path, argv)`` of ``cases`` run as ``python script *argv`` would run
    it, all in one process (with ``env`` and in ``cwd``, if given), in order, each for at most
    ``timeout`` seconds: results with the ``returncode``, ``stdout`` and ``stderr`` of
    each. For scripts' refusals of bad options, which had cost a process and a torch
    import each (3-7 s apiece here, minutes of CI in all)."""
    import json
    import subprocess
    from types import SimpleNamespace
    cases = [[str(path), [str(a) for a in argv]] for path, argv in cases]
    try:
        done = subprocess.run([sys.executable, "-c", _SCRIPT_CASES_DRIVER],
                              input=json.dumps([max(1, int(timeout)), cases]),
                              capture_output=True, text=True, env=env, cwd=cwd,
                              timeout=timeout * len(cases) + 120)
        stdout, stderr, status = done.stdout, done.stderr, done.returncode
    except subprocess.TimeoutExpired as expired:  # a case stuck where no alarm reaches
        stdout, stderr, status = expired.stdout or "", expired.stderr or "", "a timeout"
        stdout, stderr = (t.decode() if isinstance(t, bytes) else t for t in (stdout, stderr))
    results = [SimpleNamespace(**json.loads(line.partition("@@case@@")[2]))
               for line in stdout.splitlines() if "@@case@@" in line]
    assert len(results) == len(cases), (
        f"the scripts' driver ended ({status}) in case {len(results)}, {cases[len(results)]}: "
        f"{stderr[-3000:]}")
    return results


def load_example(name):
    """examples/<name>.py as a module (the examples are scripts, not a package)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, os.path.join(EXAMPLES, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(params=MODES)
def mode(request):
    return request.param


@pytest.fixture(params=[torch.int32, torch.int64], ids=["int32", "int64"])
def index_dtype(request):
    return request.param
