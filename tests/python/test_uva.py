"""torch_quiver_ops.uva and torch.classes.quiver.HostPin: pinning in place, shared pins,
and overlaps refused in both directions."""
import gc

import numpy as np
import pytest
import torch

import torch_quiver_ops as qv
from conftest import HAS_CUDA, requires_cuda
from torch_quiver_ops.uva import pin_in_place, pinned


def separate_storages(array, *slices):
    """Tensors with storages of their own over parts of one numpy buffer: memory that
    overlaps without being one storage (as two arrays sharing pages would)."""
    return [torch.from_numpy(array[s]) for s in slices]


@requires_cuda
def test_pin_in_place_without_copy_and_unpin_on_release():
    # torch's is_pinned asks CUDA on a device where torch made a context: make one first
    # (run first in a process, is_pinned said False for registered memory).
    torch.zeros(1, device="cuda")
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
    del handle
    assert t.is_pinned()


@requires_cuda
def test_two_pins_of_one_memory_share_it():
    t = torch.zeros(4 << 20, dtype=torch.uint8)
    first, second = pin_in_place(t), pin_in_place(t[1 << 20:])  # the same storage
    assert first.registered_here() and second.registered_here()
    del first
    gc.collect()
    assert t.is_pinned(), "the first pin's release unpinned memory the second still holds"
    del second
    assert not t.is_pinned()


@requires_cuda
def test_two_uva_samplers_over_one_topology_outlive_each_other():
    topo = qv.CSRTopo(torch.randint(1000, (2, 20_000)))
    a = qv.GraphSageSampler(topo, [5], mode="UVA")
    b = qv.GraphSageSampler(topo, [-1], mode="UVA")
    del a
    gc.collect()
    n_id, _, _ = b.sample(torch.arange(10))
    assert n_id.numel() >= 10


@requires_cuda
def test_a_view_deep_in_its_storage_is_pinned_whole():
    base = torch.zeros(4 << 20, dtype=torch.uint8)
    view = base[1 << 20:]  # starts a page and more into its storage
    handle = pin_in_place(view)
    assert view.is_pinned() and base.is_pinned()
    out = qv.ops.gather_rows(view.view(-1, 16), torch.tensor([100_000], device="cuda"))
    assert out.shape == (1, 16)
    del handle


@requires_cuda
def test_storage_swapped_after_pinning_is_refused_not_read():
    t = torch.zeros(1 << 22)
    handle = pin_in_place(t)
    old = t.data_ptr()
    t.share_memory_()  # new memory in the same storage: the pin holds the old memory
    assert not t.is_pinned() and t.data_ptr() != old
    with pytest.raises(RuntimeError, match="pageable host memory"):
        qv.ops.gather_rows(t.view(-1, 4), torch.tensor([0], device="cuda"))
    # The registered range stays allocated while pinned: a new tensor never lands in it
    # (freed, the 16 MiB mapping's address comes straight back) and inherits the pin.
    fresh = [torch.empty(1 << 22) for _ in range(8)]
    assert all(f.data_ptr() != old for f in fresh)
    assert not any(f.is_pinned() for f in fresh)
    del handle


@requires_cuda
def test_overlap_in_either_direction_gives_a_clear_error():
    buffer = np.zeros(4 << 20, dtype=np.uint8)
    middle, head, tail = separate_storages(buffer, slice(1 << 20, 3 << 20), slice(0, 2 << 20),
                                           slice(2 << 20, 4 << 20))
    first = pin_in_place(middle)
    with pytest.raises(RuntimeError, match="covers the pinned range .* in part"):
        pin_in_place(head)  # starts before the pinned range and ends inside it
    with pytest.raises(RuntimeError, match="covers only part of the pinned range"):
        pin_in_place(tail)  # starts inside the pinned range and runs past its end
    del first


@requires_cuda
def test_small_tensor_falls_back_to_a_pinned_copy():
    buffer = np.zeros(4 << 20, dtype=np.uint8)
    middle, head = separate_storages(buffer, slice(1 << 20, 3 << 20), slice(0, 2 << 20))
    keep = pin_in_place(middle)
    with pytest.warns(UserWarning, match="pinned copy"):
        copy, handle = pinned(head)
    assert handle is None and copy.is_pinned() and copy.data_ptr() != head.data_ptr()
    del keep


@requires_cuda
def test_feature_layout_outlives_its_feature():
    x = torch.randn(100_000, 16)
    layout = qv.Feature(device_cache_size="1K").from_cpu_tensor(x).tiers()
    gc.collect()
    ids = torch.tensor([99_999, 5])
    assert torch.equal(layout.gather(ids.cuda()).cpu(), x[ids])


@pytest.mark.skipif(HAS_CUDA, reason="checks the error without a GPU")
def test_without_a_gpu_pinning_explains_itself():
    with pytest.raises(RuntimeError, match="pin"):
        pin_in_place(torch.zeros(1 << 16))


def test_rejects_gpu_and_strided_tensors():
    with pytest.raises(RuntimeError, match="contiguous"):
        pin_in_place(torch.zeros(8, 8).t())
    if HAS_CUDA:
        with pytest.raises(RuntimeError, match="needs a CPU tensor"):
            pin_in_place(torch.zeros(8, device="cuda"))


def huge_page_bytes(tensor):
    """Bytes of transparent huge pages (smaps' AnonHugePages) in the mappings that hold
    ``tensor``'s memory."""
    start, end = tensor.data_ptr(), tensor.data_ptr() + tensor.nbytes
    total, holds_tensor = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            field = line.split()
            if "-" in field[0] and not field[0].endswith(":"):  # a mapping's first line
                low, high = (int(address, 16) for address in field[0].split("-"))
                holds_tensor = low < end and high > start
            elif field[0] == "AnonHugePages:" and holds_tensor:
                total += int(field[1]) * 1024
    return total


def test_back_with_huge_pages_keeps_the_contents():
    # A staged Feature moves a large table onto huge pages before pinning it. Whether Linux
    # can (kernel, memory kind) varies, so the answer may be either; no byte changes either
    # way, and an answer of True means the interior is on huge pages (an answer alone
    # passed with no madvise made).
    x = torch.randn(12 << 20)  # 48 MiB: a 2 MiB-aligned interior to collapse
    before = x.clone()
    done = qv.uva.back_with_huge_pages(x)
    assert isinstance(done, bool)
    assert torch.equal(x, before)
    if done:
        huge = 2 << 20
        interior = ((x.data_ptr() + x.nbytes) // huge - -(-x.data_ptr() // huge)) * huge
        assert huge_page_bytes(x) >= interior, (huge_page_bytes(x), interior)
    assert qv.uva.back_with_huge_pages(torch.randn(10)) is False  # no aligned 2 MiB inside
    assert qv.uva.back_with_huge_pages(x[:0]) is False


def test_huge_pages_take_a_tensor_and_skip_other_layouts():
    from torch_quiver_ops.uva import back_with_huge_pages
    for value in (None, [1, 2]):
        with pytest.raises(TypeError, match="back_with_huge_pages takes a CPU tensor"):
            back_with_huge_pages(value)
    assert back_with_huge_pages(torch.eye(4).to_sparse()) is False


def test_pinning_what_is_no_tensor_is_named():
    """From a probe: pin_in_place(None) failed as "tensor does not have a device", and
    pinned([1]) with an AttributeError."""
    with pytest.raises(TypeError, match="pin_in_place pins a tensor, got NoneType"):
        pin_in_place(None)
    with pytest.raises(TypeError, match="pinned pins a tensor, got list"):
        pinned([1])


def test_pinned_names_a_tensor_it_cannot_pin():
    # (contiguous() had failed with "unsupported memory format option", naming nothing)
    with pytest.raises(TypeError, match="pinned pins a dense tensor with data, got a "
                                        "torch.sparse_coo tensor"):
        pinned(torch.randn(4, 2).to_sparse())


_PINS_FOR_GPU_1 = """
import torch, torch_quiver_ops as qv
from torch_quiver_ops.synthetic import synthetic_graph
graph = synthetic_graph("tiny", seed=0)
topo = qv.CSRTopo(graph.edge_index)
sampler = qv.GraphSageSampler(topo, [4, 2], device=DEVICE, mode=MODE)
n_id, _, _ = sampler.sample(torch.arange(64))
feature = qv.Feature(rank=RANK, device_list=[RANK], device_cache_size=0)
feature.from_cpu_tensor(graph.x)
rows = feature[n_id]
assert torch.equal(rows.cpu(), graph.x[n_id.cpu()])
if DEVICE != "cpu":
    assert rows.device == torch.device("cuda", 1)
    print("context on GPU 0:", torch._C._cuda_hasPrimaryContext(0))
"""


@pytest.mark.skipif(not HAS_CUDA or torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_tables_pinned_for_gpu_1_make_no_context_on_gpu_0():
    # A spawned worker of GPU 1 that has not called torch.cuda.set_device: its UVA sampler
    # and host rows are pinned through GPU 1's context, not a new one on GPU 0.
    import subprocess
    import sys
    script = 'DEVICE, MODE, RANK = 1, "UVA", 1' + _PINS_FOR_GPU_1
    done = subprocess.run([sys.executable, "-c", script], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "context on GPU 0: False" in done.stdout, done.stdout
