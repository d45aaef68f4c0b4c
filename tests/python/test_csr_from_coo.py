"""quiver::csr_from_coo against a sort-based reference."""
import pytest
import torch

import torch_quiver_ops as qv
from reference import csr_reference, random_coo


def sample_inputs():
    """The op's cases, degenerate ones included: ``(name, (row, col, num_nodes))``."""
    row, col = random_coo(40, 200, seed=1)
    return [
        ("int64", (row, col, 40)),
        ("int32, isolated tail", (row.int(), col.int(), 45)),
        ("no edges", (row[:0], col[:0], 0)),
        ("no edges, some nodes", (row[:0], col[:0], 5)),
        ("one node with a self-loop", (torch.tensor([0]), torch.tensor([0]), 1)),
    ]


def test_sample_inputs_match_reference():
    for name, (row, col, num_nodes) in sample_inputs():
        indptr, indices, eid = qv.ops.csr_from_coo(row, col, num_nodes)
        ref_indptr, ref_indices, ref_eid = csr_reference(row.long(), col.long(), num_nodes)
        assert torch.equal(indptr, ref_indptr), name
        assert torch.equal(indices.long(), ref_indices) and indices.dtype == col.dtype, name
        assert torch.equal(eid, ref_eid), name


def test_opcheck():
    for name, args in sample_inputs():
        torch.library.opcheck(torch.ops.quiver.csr_from_coo.default, args)


@pytest.mark.parametrize("num_nodes,num_edges", [(1, 0), (50, 400), (1000, 20000)])
def test_matches_reference(index_dtype, num_nodes, num_edges):
    row, col = random_coo(num_nodes, num_edges, seed=num_edges)
    indptr, indices, eid = qv.ops.csr_from_coo(row.to(index_dtype), col.to(index_dtype), num_nodes)
    ref_indptr, ref_indices, ref_eid = csr_reference(row, col, num_nodes)
    assert indptr.dtype == torch.long and eid.dtype == torch.long
    assert indices.dtype == index_dtype
    assert torch.equal(indptr, ref_indptr)
    assert torch.equal(indices.long(), ref_indices)
    assert torch.equal(eid, ref_eid)  # stable: edges of a row keep their input order


def test_inferred_num_nodes_and_isolated_tail():
    row, col = torch.tensor([0, 2, 0]), torch.tensor([1, 0, 2])
    indptr, indices, eid = qv.ops.csr_from_coo(row, col)
    assert indptr.tolist() == [0, 2, 2, 3]
    indptr, _, _ = qv.ops.csr_from_coo(row, col, 6)
    assert indptr.tolist() == [0, 2, 2, 3, 3, 3, 3]


def test_bad_input_raises_clear_errors():
    row, col = torch.tensor([0, 1, 2]), torch.tensor([1, 2, 0])
    with pytest.raises(IndexError, match=r"row\[2\] = 2 is out of range \[0, 2\)"):
        qv.ops.csr_from_coo(row, torch.tensor([1, 0, 1]), 2)
    with pytest.raises(IndexError, match=r"col\[0\] = -1"):
        qv.ops.csr_from_coo(row, torch.tensor([-1, 2, 0]), 3)
    with pytest.raises(ValueError, match="row has 3 entries but col has 2"):
        qv.ops.csr_from_coo(row, col[:2], 3)
    with pytest.raises(TypeError, match="row is Long but col is Int"):
        qv.ops.csr_from_coo(row, col.int(), 3)
    with pytest.raises(TypeError, match="int32 or int64"):
        qv.ops.csr_from_coo(row.float(), col.float(), 3)
    with pytest.raises(ValueError, match="num_nodes must be >= 0, got -1"):
        qv.ops.csr_from_coo(row, col, -1)
    with pytest.raises(ValueError, match="1-D"):
        qv.ops.csr_from_coo(row.view(3, 1), col.view(3, 1), 3)
