"""quiver::csr_from_coo against a sort-based reference, on the CPU and (with a GPU) on CUDA,
where it must give the CPU's outputs bit for bit."""
import pytest
import torch

import torch_quiver_ops as qv
from conftest import HAS_CUDA
from reference import csr_reference, random_coo

DEVICES = ["cpu"] + (["cuda"] if HAS_CUDA else [])


@pytest.fixture(params=DEVICES)
def device(request):
    return torch.device(request.param)


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


def test_sample_inputs_match_reference(device):
    for name, (row, col, num_nodes) in sample_inputs():
        indptr, indices, eid = qv.ops.csr_from_coo(row.to(device), col.to(device), num_nodes)
        assert indptr.device == indices.device == eid.device == row.to(device).device
        ref_indptr, ref_indices, ref_eid = csr_reference(row.long(), col.long(), num_nodes)
        assert torch.equal(indptr.cpu(), ref_indptr), name
        assert torch.equal(indices.long().cpu(), ref_indices) and indices.dtype == col.dtype, name
        assert torch.equal(eid.cpu(), ref_eid), name


def test_opcheck(device):
    for name, (row, col, num_nodes) in sample_inputs():
        torch.library.opcheck(torch.ops.quiver.csr_from_coo.default,
                              (row.to(device), col.to(device), num_nodes))


@pytest.mark.parametrize("num_nodes,num_edges", [(1, 0), (50, 400), (1000, 20000)])
def test_matches_reference(index_dtype, device, num_nodes, num_edges):
    row, col = random_coo(num_nodes, num_edges, seed=num_edges)
    indptr, indices, eid = qv.ops.csr_from_coo(row.to(index_dtype).to(device),
                                               col.to(index_dtype).to(device), num_nodes)
    ref_indptr, ref_indices, ref_eid = csr_reference(row, col, num_nodes)
    assert indptr.dtype == torch.long and eid.dtype == torch.long
    assert indices.dtype == index_dtype
    assert torch.equal(indptr.cpu(), ref_indptr)
    assert torch.equal(indices.long().cpu(), ref_indices)
    assert torch.equal(eid.cpu(), ref_eid)  # stable: edges of a row keep their input order


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU and the CUDA kernels")
@pytest.mark.parametrize("shape", ["hubs", "sparse rows", "uniform"])
def test_cuda_gives_the_cpu_outputs_bit_for_bit(index_dtype, shape):
    gen = torch.Generator().manual_seed(len(shape))
    if shape == "hubs":  # a few rows hold most edges, many duplicates
        n, m = 5000, 400_000
        row = torch.randint(8, (m,), generator=gen) * 617 % n
    elif shape == "sparse rows":  # long runs of empty rows between the few that have edges
        n, m = 1_000_000, 3000
        row = torch.randint(n, (m,), generator=gen)
    else:
        n, m = 200_000, 2_000_000
        row = torch.randint(n, (m,), generator=gen)
    col = torch.randint(n, (m,), generator=gen)
    row, col = row.to(index_dtype), col.to(index_dtype)
    on_cpu = qv.ops.csr_from_coo(row, col, n)
    on_gpu = qv.ops.csr_from_coo(row.cuda(), col.cuda(), n)
    for expected, got in zip(on_cpu, on_gpu):
        assert got.is_cuda and got.dtype == expected.dtype
        assert torch.equal(got.cpu(), expected)


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU and the CUDA kernels")
def test_cuda_bad_endpoints_raise_and_the_gpu_still_works():
    row, col = torch.tensor([0, 1, 2], device="cuda"), torch.tensor([1, 2, 0], device="cuda")
    with pytest.raises(IndexError, match=r"row\[2\] = 2 is out of range \[0, 2\)"):
        qv.ops.csr_from_coo(row, torch.tensor([1, 0, 1], device="cuda"), 2)
    with pytest.raises(IndexError, match=r"col\[0\] = -1"):
        qv.ops.csr_from_coo(row, torch.tensor([-1, 2, 0], device="cuda"), 3)
    with pytest.raises(RuntimeError, match="row is on cuda:0 but col is on cpu"):
        qv.ops.csr_from_coo(row, col.cpu(), 3)
    indptr, _, _ = qv.ops.csr_from_coo(row, col, 3)
    assert indptr.tolist() == [0, 1, 2, 3]
    torch.cuda.synchronize()


def test_inferred_num_nodes_and_isolated_tail():
    row, col = torch.tensor([0, 2, 0]), torch.tensor([1, 0, 2])
    indptr, indices, eid = qv.ops.csr_from_coo(row, col)
    assert indptr.tolist() == [0, 2, 2, 3]
    indptr, _, _ = qv.ops.csr_from_coo(row, col, 6)
    assert indptr.tolist() == [0, 2, 2, 3, 3, 3, 3]
    # max(row, col) + 1: col's largest id past row's (the data above has them equal)
    indptr, indices, _ = qv.ops.csr_from_coo(torch.tensor([0, 1]), torch.tensor([1, 4]))
    assert indptr.tolist() == [0, 1, 2, 2, 2, 2] and indices.tolist() == [1, 4]


def test_bad_input_raises_clear_errors():
    row, col = torch.tensor([0, 1, 2]), torch.tensor([1, 2, 0])
    with pytest.raises(IndexError, match=r"row\[2\] = 2 is out of range \[0, 2\)"):
        qv.ops.csr_from_coo(row, torch.tensor([1, 0, 1]), 2)
    with pytest.raises(IndexError, match=r"col\[0\] = -1"):
        qv.ops.csr_from_coo(row, torch.tensor([-1, 2, 0]), 3)
    with pytest.raises(ValueError, match="row has 3 entries but col has 2"):
        qv.ops.csr_from_coo(row, col[:2], 3)
    with pytest.raises(TypeError, match="row is torch.int64 but col is torch.int32"):
        qv.ops.csr_from_coo(row, col.int(), 3)
    with pytest.raises(TypeError, match="int32 or int64"):
        qv.ops.csr_from_coo(row.float(), col.float(), 3)
    with pytest.raises(ValueError, match="num_nodes must be >= 0, got -1"):
        qv.ops.csr_from_coo(row, col, -1)
    # Without num_nodes a negative id is named itself (not the count inferred from it).
    with pytest.raises(IndexError, match=r"col\[1\] = -3 is a negative node id"):
        qv.ops.csr_from_coo(row, torch.tensor([1, -3, 0]))
    with pytest.raises(ValueError, match="1-D"):
        qv.ops.csr_from_coo(row.view(3, 1), col.view(3, 1), 3)
    # (a list failed on .numel(), a meta tensor in item(), 2**63 in the binding's
    # "expected 'int', found 'int'")
    with pytest.raises(TypeError, match="row must be a tensor of node ids, got list"):
        qv.ops.csr_from_coo([0, 1], [1, 0])
    with pytest.raises(TypeError, match="col is a meta tensor"):
        qv.ops.csr_from_coo(row, torch.empty(3, dtype=torch.long, device="meta"))
    with pytest.raises(ValueError, match=r"num_nodes must fit in int64 .*, got 9223372036854775808"):
        qv.ops.csr_from_coo(row, col, 2**63)


def test_node_counts_past_memory_or_int64_are_named():
    """From a probe: a count whose offsets overflow int64 gave torch's SymInt or storage
    error, an id of 2**63 - 1 a pybind cast error, row and col of other lengths an error of
    max(), and a count whose offsets and cursors pass 8 bytes a node but not 16 killed the
    process with no error."""
    from torch_quiver_ops import ops, preflight
    empty = torch.tensor([], dtype=torch.long)
    for call, error, words in [
            (lambda: ops.csr_from_coo(empty, empty, 2**63 - 1), ValueError,
             "num_nodes = 9223372036854775807 is too large"),
            (lambda: ops.csr_from_coo(empty, empty, 2**62), ValueError, "is too large"),
            (lambda: ops.csr_from_coo(torch.tensor([2**63 - 1]), torch.tensor([0])), IndexError,
             "row[0] = 9223372036854775807 is too large a node id"),
            (lambda: ops.csr_from_coo(torch.tensor([0, 1]), empty), ValueError,
             "row has 2 entries but col has 0"),
            (lambda: ops.csr_from_coo(empty, empty, True), TypeError, "num_nodes must be an int"),
            (lambda: ops.check_fanouts([True]), TypeError, "fanouts must be a sequence of ints"),
            (lambda: ops.check_fanouts([2.5]), TypeError, "fanouts must be a sequence of ints")]:
        with pytest.raises(error) as raised:
            call()
        assert words in str(raised.value), (words, str(raised.value))
    # The op itself (the wrapper checks the memory free first): its allocator's error had
    # named neither num_nodes nor its value (a probe). Past this host's memory:
    with pytest.raises(ValueError, match=r"num_nodes = 1000000000000000: its offsets alone "
                                         r"would take \d+ MiB, more than this host's"):
        torch.ops.quiver.csr_from_coo(empty, empty, 10**15)
    available = preflight.available_memory()
    if available > 0:
        nodes = available // 12  # 8 bytes a node fit, 16 do not
        for call in (lambda: ops.csr_from_coo(torch.tensor([0]), torch.tensor([0]), nodes),
                     lambda: qv.CSRTopo(torch.tensor([[0], [0]]), num_nodes=nodes)):
            with pytest.raises(preflight.ResourceLimitError, match="of host memory"):
                call()


@pytest.mark.parametrize("device", DEVICES)
def test_the_wrapper_compiles_as_one_graph(device):
    """The wrapper's host-side checks (ids read back, /proc/meminfo) broke a fullgraph
    compile that the op alone passed (a probe): traced, it calls the op, which checks."""
    row, col = (torch.randint(0, 50, (300,), device=device) for _ in range(2))
    compiled = torch.compile(lambda r, c: qv.ops.csr_from_coo(r, c, 50), fullgraph=True)
    for got, want in zip(compiled(row, col), qv.ops.csr_from_coo(row, col, 50)):
        assert torch.equal(got, want)
    torch._dynamo.reset()
    inferred = torch.compile(lambda r, c: qv.ops.csr_from_coo(r, c), fullgraph=True)
    with pytest.raises(Exception, match="csr_from_coo under torch.compile needs num_nodes"):
        inferred(row, col)
    with pytest.raises(Exception, match=r"row\[1\] = 70 is out of range \[0, 50\)"):
        torch._dynamo.reset()
        compiled(torch.tensor([0, 70], device=device), torch.tensor([1, 2], device=device))
