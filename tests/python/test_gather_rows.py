import pytest
import torch

import torch_quiver_ops as qv
from torch_quiver_ops.feature import parse_size


def place_table(table, ids, mode):
    """CPU: both on the host; GPU: table in HBM; UVA: table pinned on the host. Ids follow
    the device the rows should land on."""
    if mode == "GPU":
        return table.cuda(), ids.cuda()
    if mode == "UVA":
        return table.pin_memory(), ids.cuda()
    return table, ids


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
    with pytest.raises(TypeError, match="ids must hold int32 or int64 ids, got Float"):
        qv.ops.gather_rows(table, torch.tensor([0.0]))
    with pytest.raises(ValueError, match="ids must be a 1-D tensor"):
        qv.ops.gather_rows(table, torch.tensor([[0]]))
    with pytest.raises(ValueError, match="at least one dimension"):
        qv.ops.gather_rows(torch.tensor(3.0), torch.tensor([0]))


def test_opcheck(mode):
    if mode == "UVA":
        pytest.skip("opcheck copies inputs into pageable memory; the GPU-mode run checks "
                    "the same kernel and fake")
    for ids in [torch.tensor([3, 3, 29]), torch.tensor([0], dtype=torch.int32),
                torch.empty(0, dtype=torch.long)]:
        table, ids = place_table(torch.randn(30, 5), ids, mode)
        torch.library.opcheck(torch.ops.quiver.gather_rows.default, (table, ids))


def test_feature_indexes_like_a_tensor():
    x = torch.randn(200, 7)
    feature = qv.Feature(rank=0, device_list=[0], device_cache_size=0).from_cpu_tensor(x)
    ids = torch.tensor([5, 199, 5, 0])
    assert torch.equal(feature[ids].cpu(), x[ids])
    assert feature.shape == x.shape and feature.size(1) == 7 and feature.dim() == 2
    assert len(feature) == 200 and feature.dtype == torch.float32
    with pytest.raises(IndexError, match="out of range"):
        feature[torch.tensor([200])]


def test_feature_errors():
    with pytest.raises(RuntimeError, match="from_cpu_tensor"):
        qv.Feature()[torch.tensor([0])]
    with pytest.raises(ValueError, match="cache_policy"):
        qv.Feature(cache_policy="everywhere")
    topo = qv.CSRTopo(torch.tensor([[0, 1], [1, 2]]))
    with pytest.raises(ValueError, match="3 nodes"):
        qv.Feature(csr_topo=topo).from_cpu_tensor(torch.randn(5, 2))


def test_parse_size():
    assert parse_size(1000) == 1000
    assert parse_size("200M") == 200 * 2**20
    assert parse_size("0.5G") == 2**29
    assert parse_size("1.5GB") == int(1.5 * 2**30)
    with pytest.raises(ValueError, match="cannot read"):
        parse_size("lots")
