import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))

import torch_quiver_ops as qv  # noqa: E402

HAS_CUDA = torch.cuda.is_available() and qv.cuda_kernels_built()
MODES = ["CPU"] + (["GPU", "UVA"] if HAS_CUDA else [])
requires_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU and the CUDA kernels")
EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


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
