"""torch_quiver_ops.topology.CSRTopo: building, validating, saving and mapping a graph."""
import os

import numpy as np
import pytest
import torch

import torch_quiver_ops as qv
from conftest import HAS_CUDA, requires_cuda
from reference import random_coo


def test_from_edge_index_uses_int32_and_keeps_edge_ids():
    row, col = random_coo(500, 5000, seed=3)
    topo = qv.CSRTopo(torch.stack([row, col]))
    assert topo.indices.dtype == torch.int32
    assert topo.node_count == int(torch.maximum(row.max(), col.max())) + 1
    assert topo.edge_count == 5000
    # every CSR edge maps back to its input edge
    src = torch.repeat_interleave(torch.arange(topo.node_count), topo.degree)
    assert torch.equal(row[topo.eid], src)
    assert torch.equal(col[topo.eid], topo.indices.long())
    # every node once, highest degree first, ties by id (as documented): non-increasing
    # degrees alone would pass an "order" naming the top node in every slot
    assert torch.equal(topo.feature_order, torch.argsort(-topo.degree, stable=True))


def test_numpy_arrays_are_taken_as_tensors():
    """torch-quiver takes numpy CSRs (an AttributeError here before)."""
    row, col = random_coo(50, 300, seed=4)
    built = qv.CSRTopo(torch.stack([row, col]))
    for topo in (qv.CSRTopo(torch.stack([row, col]).numpy()),
                 qv.CSRTopo(indptr=built.indptr.numpy(), indices=built.indices.numpy(),
                            eid=built.eid.numpy())):
        assert torch.equal(topo.indptr, built.indptr)
        assert torch.equal(topo.indices, built.indices) and torch.equal(topo.eid, built.eid)


def test_a_csr_of_int32_offsets_and_edge_ids_is_taken_as_int64():
    """scipy's CSR has int32 offsets: the CSR path refused them (and int32 edge ids) where
    the edge_index path widened them (a probe)."""
    scipy_sparse = pytest.importorskip("scipy.sparse")
    matrix = scipy_sparse.random(40, 40, density=0.1, format="csr", random_state=0)
    topo = qv.CSRTopo(indptr=matrix.indptr, indices=matrix.indices,
                      eid=np.arange(matrix.nnz, dtype=np.int32))
    assert topo.indptr.dtype == torch.int64 and topo.eid.dtype == torch.int64
    assert topo.indptr.tolist() == matrix.indptr.tolist()
    assert topo.eid.tolist() == list(range(matrix.nnz))
    with pytest.raises(ValueError, match=r"indptr must be non-decreasing"):
        qv.CSRTopo(indptr=torch.tensor([0, 2, 1, 2], dtype=torch.int16),
                   indices=torch.tensor([1, 0]))


def test_edge_ids_given_with_edge_index_name_the_csr_edges():
    row, col = random_coo(50, 300, seed=5)
    e_id = torch.randperm(1000)[:300]  # PyG's e_id: ids of some larger edge set
    topo = qv.CSRTopo(torch.stack([row, col]), eid=e_id)
    plain = qv.CSRTopo(torch.stack([row, col]))
    assert torch.equal(topo.eid, e_id[plain.eid])
    with pytest.raises(ValueError, match=r"one integer id per column of edge_index \(300\)"):
        qv.CSRTopo(torch.stack([row, col]), eid=e_id[:10])


@requires_cuda
def test_edges_on_a_gpu_are_built_there_into_the_same_host_csr():
    row, col = random_coo(3000, 40000, seed=8)
    on_host = qv.CSRTopo(torch.stack([row, col]), num_nodes=3100)
    on_gpu = qv.CSRTopo(torch.stack([row, col]).cuda(), num_nodes=3100)
    for name in ("indptr", "indices", "eid"):
        expected, got = getattr(on_host, name), getattr(on_gpu, name)
        assert got.device.type == "cpu" and torch.equal(got, expected), name
    with pytest.raises(IndexError, match="= -1 is out of range"):
        qv.CSRTopo(torch.tensor([[0, -1], [1, 0]], device="cuda"))


def test_from_csr_is_validated_with_the_ops_exception_types():
    indptr, indices = torch.tensor([0, 2, 3]), torch.tensor([1, 0, 1])
    topo = qv.CSRTopo(indptr=indptr, indices=indices)
    assert topo.node_count == 2 and topo.indices.dtype == torch.int32
    # A num_nodes beside a CSR is checked against it (node_count would silently be indptr's)
    with pytest.raises(ValueError, match="num_nodes = 5 but indptr describes 2 nodes"):
        qv.CSRTopo(indptr=indptr, indices=indices, num_nodes=5)
    with pytest.raises(ValueError, match="non-decreasing"):
        qv.CSRTopo(indptr=torch.tensor([0, 2, 1, 3]), indices=torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="indptr\\[-1\\] = 4"):
        qv.CSRTopo(indptr=torch.tensor([0, 2, 4]), indices=torch.tensor([0, 1, 1]))
    with pytest.raises(IndexError, match="node id 7, out of range"):
        qv.CSRTopo(indptr=torch.tensor([0, 1, 2]), indices=torch.tensor([0, 7]))
    with pytest.raises(ValueError, match="indptr\\[0\\] = 1"):
        qv.CSRTopo(indptr=torch.tensor([1, 2]), indices=torch.tensor([0, 1]))
    with pytest.raises(TypeError, match="indptr must be int64"):  # (int32 is widened)
        qv.CSRTopo(indptr=torch.tensor([0.0, 1.0]), indices=torch.tensor([0]))
    with pytest.raises(TypeError, match="indices must hold int32 or int64 ids"):
        qv.CSRTopo(indptr=torch.tensor([0, 1]), indices=torch.tensor([0.0]))


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if HAS_CUDA else []))
def test_check_csr_scans_the_whole_csr_on_any_device(device):
    """The one whole-CSR check (CSRTopo and the partitioned sampler both use it): opcheck,
    and its errors on each device, with num_nodes for global ids."""
    indptr = torch.tensor([0, 2, 3, 3], device=device)
    indices = torch.tensor([1, 2, 0], dtype=torch.int32, device=device)
    eid = torch.arange(3, device=device)
    torch.library.opcheck(torch.ops.quiver.check_csr.default, (indptr, indices, eid, -1))
    qv.ops.check_csr(indptr, indices, eid, num_nodes=10)
    with pytest.raises(IndexError, match="node id 2, out of range \\[0, 2\\)"):
        qv.ops.check_csr(indptr, indices, num_nodes=2)
    with pytest.raises(ValueError, match="indptr\\[1\\] = 2 > indptr\\[2\\] = 1"):
        qv.ops.check_csr(torch.tensor([0, 2, 1, 3], device=device), indices)
    with pytest.raises(ValueError, match="edge_ids has 2 entries but indices has 3"):
        qv.ops.check_csr(indptr, indices, eid[:2])


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if HAS_CUDA else []))
def test_the_permutation_and_fanout_checks_pass_opcheck(device):
    """Both are tagged pt2_compliant beside the sampling ops: opcheck on each, and the
    faults each names."""
    for dtype in (torch.int32, torch.int64):
        order = torch.tensor([2, 0, 1], dtype=dtype, device=device)
        torch.library.opcheck(torch.ops.quiver.check_permutation.default, (order, 3, "order"))
    with pytest.raises(ValueError, match="hot_order"):
        qv.ops.check_permutation(torch.tensor([0, 0, 1], device=device), 3, "hot_order")
    torch.library.opcheck(torch.ops.quiver.check_fanouts.default, ([15, 10, -1], False, "fanouts"))
    torch.library.opcheck(torch.ops.quiver.check_fanouts.default, ([2], True, "num_neighbors"))
    with pytest.raises(ValueError, match="num_neighbors"):
        qv.ops.check_fanouts([3, -2], False, "num_neighbors")


def test_bad_edge_index():
    with pytest.raises(ValueError, match="shape \\[2, E\\]"):
        qv.CSRTopo(torch.zeros(3, 4, dtype=torch.long))
    # the op's type and sentence, naming the argument the caller gave (not the op's row/col)
    with pytest.raises(IndexError, match=r"^edge_index\[0, 1\] = -1 is out of range \[0, 2\)"):
        qv.CSRTopo(torch.tensor([[0, -1], [1, 0]]))
    with pytest.raises(IndexError, match=r"^edge_index\[1, 0\] = 5 is out of range \[0, 3\)"):
        qv.CSRTopo(torch.tensor([[0, 1], [5, 0]]), num_nodes=3)
    # Ids that int32 cannot hold are refused before the int32 CSR would wrap them onto
    # valid nodes (2**32 + 3 onto node 3).
    for bad in (2**32 + 3, -(2**32) + 1):
        with pytest.raises(IndexError, match=f"edge_index holds node {bad}, out of range"):
            qv.CSRTopo(torch.tensor([[0, 1, 2], [1, 2, bad]]), num_nodes=10)
    # Ids all negative had been named as a num_nodes of -4 the caller never gave; meta
    # tensors met torch's "Cannot copy out of meta tensor" (a probe).
    with pytest.raises(IndexError, match=r"^edge_index\[0, 0\] = -5 is out of range"):
        qv.CSRTopo(torch.tensor([[-5, -6], [-7, -5]]))
    meta = torch.empty(2, 4, dtype=torch.long, device="meta")
    with pytest.raises(TypeError, match="edge_index is a meta tensor"):
        qv.CSRTopo(meta)
    with pytest.raises(TypeError, match="eid is a meta tensor"):
        qv.CSRTopo(torch.tensor([[0, 1], [1, 0]]), eid=meta[0, :2])
    with pytest.raises(TypeError, match="indptr is a meta tensor"):
        qv.CSRTopo(indptr=meta[0], indices=torch.tensor([0, 1, 2]))


def test_save_and_load_shared_map_one_copy(tmp_path):
    row, col = random_coo(300, 3000, seed=1)
    topo = qv.CSRTopo(torch.stack([row, col]))
    topo.save(tmp_path)
    loaded = qv.CSRTopo.load_shared(tmp_path)
    for name in ("indptr", "indices", "eid"):
        assert torch.equal(getattr(loaded, name), getattr(topo, name))
        assert getattr(loaded, name).untyped_storage().filename is not None


def test_truncated_save_is_an_error_not_zeros(tmp_path):
    row, col = random_coo(300, 3000, seed=2)
    qv.CSRTopo(torch.stack([row, col])).save(tmp_path)
    path = tmp_path / "indices.bin"
    size = path.stat().st_size
    os.truncate(path, size // 2)
    with pytest.raises(ValueError, match=r"indices.bin holds \d+ bytes but csr.json says"):
        qv.CSRTopo.load_shared(tmp_path)
    assert path.stat().st_size == size // 2, "the loader must not extend the file"
    (tmp_path / "csr.json").unlink()
    with pytest.raises(FileNotFoundError, match="or the save has not finished"):
        qv.CSRTopo.load_shared(tmp_path)


def test_an_edited_save_names_the_save(tmp_path):
    """A saved CSR whose bytes were edited is refused naming the save, not only the op's
    argument (indices, edge_ids)."""
    row, col = random_coo(300, 3000, seed=2)
    qv.CSRTopo(torch.stack([row, col])).save(tmp_path)
    indices = tmp_path / "indices.bin"
    data = bytearray(indices.read_bytes())
    data[40:44] = (10**8).to_bytes(4, "little")  # int32 ids
    indices.write_bytes(bytes(data))
    with pytest.raises(IndexError, match=r"csr.json and its .bin files hold no valid CSR: "
                                         r".*100000000"):
        qv.CSRTopo.load_shared(tmp_path)


def test_unsigned_ids_are_checked_not_wrapped():
    """A uint64 id past int32 was converted to int32 and wrapped onto a valid node (with
    num_nodes given); without num_nodes, torch has no max of uint32 (a raw torch error)."""
    import numpy as np
    with pytest.raises(IndexError, match="4294967297"):
        qv.CSRTopo(np.array([[0, 2**32 + 1], [1, 2]], dtype=np.uint64), num_nodes=3)
    with pytest.raises(IndexError, match="18446744073709551615"):
        qv.CSRTopo(np.array([[0, 2**64 - 1], [1, 2]], dtype=np.uint64), num_nodes=3)
    topo = qv.CSRTopo(np.array([[0, 1], [1, 2]], dtype=np.uint32))
    assert topo.indptr.tolist() == [0, 1, 2, 2] and topo.indices.tolist() == [1, 2]


def test_a_stray_id_past_the_memory_there_is_is_named(monkeypatch):
    """One id of 2^40 sized offsets of 8 TiB: granted by overcommit, the process was killed
    filling them (here, whatever the machine, the memory available is made small)."""
    monkeypatch.setattr(qv.preflight, "available_memory", lambda: 1 << 30)
    with pytest.raises(qv.preflight.ResourceLimitError,
                       match="largest id in edge_index is 1,099,511,627,776.*give num_nodes"):
        qv.CSRTopo(torch.tensor([[0, 2**40], [1, 2]]))
    # ... and so does a num_nodes given too large (it skipped the check: killed, found by a
    # probe).
    with pytest.raises(qv.preflight.ResourceLimitError, match="num_nodes=1,099,511,627,776"):
        qv.CSRTopo(torch.tensor([[0], [1]], dtype=torch.int32), num_nodes=2**40)


def test_num_nodes_and_eid_are_checked_by_name():
    """A float num_nodes failed in a cast that named no argument, True was read as 1, and a
    uint64 eid past int64's range turned negative (found by a probe)."""
    import numpy as np
    edge_index = torch.tensor([[0, 1], [1, 2]])
    for bad in (3.7, 2.0, "3", True):
        with pytest.raises(TypeError, match="num_nodes must be an int"):
            qv.CSRTopo(edge_index, num_nodes=bad)
    for bad in (-1, 2**63):
        with pytest.raises(ValueError, match=r"num_nodes must be in \[0, 2\*\*63\)"):
            qv.CSRTopo(edge_index, num_nodes=bad)
    assert qv.CSRTopo(edge_index, num_nodes=np.int64(5)).node_count == 5
    assert qv.CSRTopo(edge_index, num_nodes=torch.tensor(4)).node_count == 4
    with pytest.raises(IndexError, match=r"eid\[0\] = 9223372036854775813 is past int64.s range"):
        qv.CSRTopo(edge_index, eid=torch.tensor([2**63 + 5, 1], dtype=torch.uint64))
    topo = qv.CSRTopo(torch.tensor([[1, 0], [0, 1]]), eid=torch.tensor([7, 1], dtype=torch.uint64))
    assert topo.eid.tolist() == [1, 7]


def test_empty_lists_are_no_edges():
    """[] and [[], []] convert to floats, which the id checks refused (found by a probe)."""
    topo = qv.CSRTopo([[], []], num_nodes=3)
    assert topo.node_count == 3 and topo.edge_count == 0
    topo = qv.CSRTopo(indptr=[0, 0], indices=[])
    assert topo.node_count == 1 and topo.edge_count == 0
    feature = qv.Feature(device_list=[]).from_cpu_tensor(torch.empty(0, 3), hot_order=[])
    assert feature[[]].shape == (0, 3)


def test_a_bad_eid_is_named_eid():
    """The op's check named the argument edge_ids, which CSRTopo calls eid (a probe)."""
    with pytest.raises(TypeError, match="eid must be a 1-D int64 tensor, got torch.float32"):
        qv.CSRTopo(indptr=torch.tensor([0, 1, 2]), indices=torch.tensor([1, 0]),
                   eid=torch.tensor([0.0, 1.0]))  # (int32 is widened)


def test_a_negative_eid_is_refused_where_the_topology_is_made(tmp_path):
    """From a probe: a saved CSR with one flipped byte in eid.bin loaded (verify off) with an
    edge id of about -2**56, which then indexed edge arrays from their end."""
    with pytest.raises(IndexError, match="eid holds -7: edge ids index edge arrays"):
        qv.CSRTopo(indptr=torch.tensor([0, 1, 2]), indices=torch.tensor([1, 0]),
                   eid=torch.tensor([0, -7]))
    with pytest.raises(IndexError, match="eid holds -1: edge ids index edge arrays"):
        qv.CSRTopo(torch.tensor([[0, 1, 2], [1, 2, 0]]), eid=torch.tensor([-1, 5, 7]))
    topo = qv.CSRTopo(indptr=torch.tensor([0, 1, 2]), indices=torch.tensor([1, 0]),
                      eid=torch.tensor([5, 3]))
    topo.save(tmp_path / "csr")
    saved = tmp_path / "csr" / "eid.bin"
    data = bytearray(saved.read_bytes())
    data[15] ^= 0x80  # the sign bit of the second id
    saved.write_bytes(bytes(data))
    with pytest.raises(IndexError, match="eid holds -"):
        qv.CSRTopo.load_shared(tmp_path / "csr")
