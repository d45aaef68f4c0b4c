import pytest
import torch

from conftest import HAS_CUDA, requires_cuda
from torch_quiver_ops.uva import pin_in_place, pinned


@requires_cuda
def test_pin_in_place_without_copy_and_unpin_on_release():
    t = torch.arange(1 << 20, dtype=torch.int32)  # 4 MiB: its own pages
    address = t.data_ptr()
    assert not t.is_pinned()
    handle = pin_in_place(t)
    assert t.is_pinned() and handle.registered_here() and handle.tensor().data_ptr() == address
    del handle
    assert not t.is_pinned()


@requires_cuda
def test_already_pinned_is_left_alone():
    t = torch.ones(1000).pin_memory()
    handle = pin_in_place(t)
    assert not handle.registered_here() and t.is_pinned()


@requires_cuda
def test_overlap_gives_a_clear_error():
    t = torch.zeros(4 << 20, dtype=torch.uint8)
    first = pin_in_place(t[1 << 20:3 << 20])
    with pytest.raises(RuntimeError, match="already registered"):
        pin_in_place(t[:2 << 20])
    del first


@requires_cuda
def test_small_tensor_falls_back_to_a_pinned_copy():
    t = torch.zeros(4 << 20, dtype=torch.uint8)
    keep = pin_in_place(t[1 << 20:3 << 20])
    with pytest.warns(UserWarning, match="pinned copy"):
        copy, handle = pinned(t[:2 << 20])
    assert handle is None and copy.is_pinned() and copy.data_ptr() != t.data_ptr()
    del keep


@pytest.mark.skipif(HAS_CUDA, reason="checks the error without a GPU")
def test_without_a_gpu_pinning_explains_itself():
    with pytest.raises(RuntimeError, match="pin"):
        pin_in_place(torch.zeros(1 << 16))


def test_rejects_gpu_and_strided_tensors():
    with pytest.raises(RuntimeError, match="contiguous"):
        pin_in_place(torch.zeros(8, 8).t())
