"""quiver::gather_rows against table[ids] on every placement (CPU; GPU: table in HBM; UVA:
table pinned on the host)."""
import pytest
import torch

import torch_quiver_ops as qv
from conftest import requires_cuda
from reference import random_table


def place_table(table, ids, mode):
    """CPU: both on the host; GPU: table in HBM; UVA: table pinned on the host. Ids follow
    the device the rows should land on."""
    if mode == "GPU":
        return table.cuda(), ids.cuda()
    if mode == "UVA":
        return table.pin_memory(), ids.cuda()
    return table, ids


def sample_inputs(mode):
    """The op's cases on one placement, degenerate ones included: ``(table, cases)``, each
    case ``(name, (placed_table, placed_ids))`` with the expected rows ``table[ids]``."""
    table = random_table(30, 5)
    ids = torch.tensor([3, 3, 29])
    cases = [
        ("duplicates", place_table(table, ids, mode)),
        ("int32 ids", place_table(table, ids.int(), mode)),
        ("one id", place_table(table, torch.tensor([0]), mode)),
        ("empty ids", place_table(table, ids[:0], mode)),
    ]
    return table, cases


def test_sample_inputs_match_indexing(mode):
    table, cases = sample_inputs(mode)
    for name, (placed_table, ids) in cases:
        out = qv.ops.gather_rows(placed_table, ids)
        assert out.device == ids.device, name
        assert torch.equal(out.cpu(), table[ids.cpu().long()]), name


def test_opcheck(mode):
    if mode == "UVA":
        pytest.skip("opcheck copies inputs into pageable memory; the GPU-mode run checks "
                    "the same kernel and fake")
    for name, args in sample_inputs(mode)[1]:
        torch.library.opcheck(torch.ops.quiver.gather_rows.default, args)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64,
                                   torch.uint8])
@pytest.mark.parametrize("width", [1, 3, 100, 129])
def test_matches_indexing(mode, dtype, width, index_dtype):
    gen = torch.Generator().manual_seed(width)
    table = (torch.randn(500, width, generator=gen) * 50).to(dtype)
    ids = torch.randint(500, (1000,), generator=gen).to(index_dtype)  # with duplicates
    placed_table, placed_ids = place_table(table, ids, mode)
    out = qv.ops.gather_rows(placed_table, placed_ids)
    assert out.dtype == dtype and out.shape == (1000, width)
    assert out.device == placed_ids.device
    assert torch.equal(out.cpu(), table[ids.long()])


def test_out_of_range_on_every_placement(mode):
    table, ids = place_table(torch.randn(10, 4), torch.tensor([0, 3, 10, 2]), mode)
    with pytest.raises(IndexError, match=r"ids\[2\] = 10 is out of range \[0, 10\)"):
        qv.ops.gather_rows(table, ids)
    with pytest.raises(IndexError, match=r"= -1 is out of range"):
        qv.ops.gather_rows(table, ids.new_tensor([-1]))


def test_higher_rank_and_empty():
    table = torch.randn(20, 3, 4)
    ids = torch.tensor([19, 0, 0, 7])
    assert torch.equal(qv.ops.gather_rows(table, ids), table[ids])
    empty = qv.ops.gather_rows(table, ids[:0])
    assert empty.shape == (0, 3, 4)
    assert qv.ops.gather_rows(table[:0], ids[:0]).shape == (0, 3, 4)


def test_bad_input():
    table = torch.randn(10, 4)
    with pytest.raises(IndexError, match=r"ids\[1\] = 10 is out of range \[0, 10\)"):
        qv.ops.gather_rows(table, torch.tensor([0, 10]))
    with pytest.raises(IndexError, match=r"ids\[0\] = -1"):
        qv.ops.gather_rows(table, torch.tensor([-1]))
    with pytest.raises(ValueError, match="contiguous"):
        qv.ops.gather_rows(table.t(), torch.tensor([0]))
    with pytest.raises(TypeError, match="ids must hold int32 or int64 ids, got torch.float32"):
        qv.ops.gather_rows(table, torch.tensor([0.0]))
    with pytest.raises(ValueError, match="ids must be a 1-D tensor"):
        qv.ops.gather_rows(table, torch.tensor([[0]]))
    with pytest.raises(ValueError, match="at least one dimension"):
        qv.ops.gather_rows(torch.tensor(3.0), torch.tensor([0]))


@requires_cuda
def test_a_pageable_table_is_named_as_gather_rows_names_it():
    with pytest.raises(RuntimeError, match="^table is in pageable host memory"):
        qv.ops.gather_rows(torch.randn(4, 3), torch.tensor([0, 1], device="cuda"))


@pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.device_count() < 2,
                    reason="fake tensors on cuda:1 need a second GPU when CUDA is present")
def test_fake_puts_rows_on_the_ids_device():
    # torch.compile and export see the output device of the real op: the ids' device,
    # also for a table on a peer GPU (checked without GPUs: fake tensors).
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        table = torch.empty(10, 4, device="cuda:1")
        ids = torch.empty(3, dtype=torch.long, device="cuda:0")
        assert torch.ops.quiver.gather_rows(table, ids).device == torch.device("cuda:0")
        assert torch.ops.quiver.gather_tiered_rows([table], None, ids).device == ids.device


def test_a_meta_table_beside_real_ids_is_refused():
    """The fake kernels ran for a meta table among real tensors and returned uninitialized
    rows; a meta COO among real ids the same. All on meta (tracing) still works."""
    table, ids = torch.empty(3, 4, device="meta"), torch.tensor([0, 1])
    with pytest.raises(ValueError, match="table on the meta device"):
        torch.ops.quiver.gather_rows(table, ids)
    with pytest.raises(ValueError, match=r"tiers\[0\] on the meta device"):
        torch.ops.quiver.gather_tiered_rows([table], None, ids)
    with pytest.raises(ValueError, match="row on the meta device"):
        torch.ops.quiver.csr_from_coo(ids.to("meta"), ids, 2)
    assert torch.ops.quiver.gather_rows(table, ids.to("meta")).shape == (2, 4)
