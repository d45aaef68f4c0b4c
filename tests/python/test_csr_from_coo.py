import pytest
import torch

import torch_quiver_ops as qv
from reference import csr_reference, random_coo


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


def test_csr_topo_from_edge_index_uses_int32_and_keeps_edge_ids():
    row, col = random_coo(500, 5000, seed=3)
    topo = qv.CSRTopo(torch.stack([row, col]))
    assert topo.indices.dtype == torch.int32
    assert topo.node_count == int(torch.maximum(row.max(), col.max())) + 1
    assert topo.edge_count == 5000
    # every CSR edge maps back to its input edge
    src = torch.repeat_interleave(torch.arange(topo.node_count), topo.degree)
    assert torch.equal(row[topo.eid], src)
    assert torch.equal(col[topo.eid], topo.indices.long())
    order = topo.feature_order
    assert torch.all(topo.degree[order][:-1] >= topo.degree[order][1:])


def test_csr_topo_from_csr_is_validated():
    indptr, indices = torch.tensor([0, 2, 3]), torch.tensor([1, 0, 1])
    topo = qv.CSRTopo(indptr=indptr, indices=indices)
    assert topo.node_count == 2 and topo.indices.dtype == torch.int32
    with pytest.raises(ValueError, match="non-decreasing"):
        qv.CSRTopo(indptr=torch.tensor([0, 2, 1, 3]), indices=torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="indptr\\[-1\\] = 4"):
        qv.CSRTopo(indptr=torch.tensor([0, 2, 4]), indices=torch.tensor([0, 1, 1]))
    with pytest.raises(ValueError, match="node id 7"):
        qv.CSRTopo(indptr=torch.tensor([0, 1, 2]), indices=torch.tensor([0, 7]))
    with pytest.raises(ValueError, match="indptr\\[0\\]"):
        qv.CSRTopo(indptr=torch.tensor([1, 2]), indices=torch.tensor([0, 1]))


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
    with pytest.raises(ValueError, match="shape \\[2, E\\]"):
        qv.CSRTopo(torch.zeros(3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="negative node id"):
        qv.CSRTopo(torch.tensor([[0, -1], [1, 0]]))


def test_opcheck():
    row, col = random_coo(40, 200, seed=1)
    for args in [(row, col, 40), (row.int(), col.int(), 45), (row[:0], col[:0], 0)]:
        torch.library.opcheck(torch.ops.quiver.csr_from_coo.default, args)
