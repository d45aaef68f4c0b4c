"""quiver::gather_tiered_rows against x[ids] on every placement (CPU; GPU: memory tiers in
HBM, host tier pinned; UVA: every tier pinned on the host)."""
import pytest
import torch

import torch_quiver_ops as qv
from conftest import requires_cuda
from reference import ids_device, permutation_positions, random_table, split_tiers


def sample_inputs(mode):
    """The op's cases on one placement, degenerate ones included: ``(table, name, args)``
    where the expected output is ``table[args[2]]``."""
    device = ids_device(mode)
    table = random_table(60, 6, torch.float16)
    order, positions = permutation_positions(60, torch.int32)
    tiers = split_tiers(table[order], [7, 20], mode)
    ids = torch.tensor([3, 3, 59, 0, 41])
    cases = [
        ("three tiers, int32 positions", (tiers, positions.to(device), ids.to(device))),
        ("int64 positions", (tiers, positions.long().to(device), ids.to(device))),
        ("int32 ids", (tiers, positions.to(device), ids.int().to(device))),
        ("no positions: identity", (split_tiers(table, [30], mode), None, ids.to(device))),
        ("one tier", (split_tiers(table, [], mode), None, ids.to(device))),
        ("empty ids", (tiers, positions.to(device), ids[:0].to(device))),
        ("empty tiers", (split_tiers(table, [0, 60], mode), None, ids.to(device))),
    ]
    return table, cases


def test_sample_inputs_match_indexing(mode):
    table, cases = sample_inputs(mode)
    for name, (tiers, positions, ids) in cases:
        out = qv.ops.gather_tiered_rows(tiers, positions, ids)
        assert out.device.type == ids.device.type, name
        assert torch.equal(out.cpu(), table[ids.cpu().long()]), name


def test_opcheck(mode):
    if mode == "UVA":
        pytest.skip("opcheck copies inputs into pageable memory; the GPU-mode run checks "
                    "the same kernel and fake")
    _, cases = sample_inputs(mode)
    for name, args in cases:
        if mode == "GPU":  # opcheck's copies of the pinned host tier are pageable
            args = ([t.cuda() for t in args[0]], *args[1:])
        torch.library.opcheck(torch.ops.quiver.gather_tiered_rows.default, args)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64,
                                   torch.uint8])
@pytest.mark.parametrize("width", [1, 3, 100, 129])
@pytest.mark.parametrize("positions_dtype", [None, torch.int32, torch.int64])
def test_matches_indexing(mode, dtype, width, positions_dtype, index_dtype):
    table = random_table(700, width, dtype, seed=width)
    gen = torch.Generator().manual_seed(3)
    if positions_dtype is None:
        order, positions = torch.arange(700), None
    else:
        order, positions = permutation_positions(700, positions_dtype)
    tiers = split_tiers(table[order], [50, 51, 300], mode)  # one tier of a single row
    device = ids_device(mode)
    ids = torch.randint(700, (2000,), generator=gen)  # with duplicates
    out = qv.ops.gather_tiered_rows(tiers, None if positions is None else positions.to(device),
                                    ids.to(index_dtype).to(device))
    assert out.dtype == dtype and out.shape == (2000, width) and out.device.type == device.type
    assert torch.equal(out.cpu(), table[ids])


def test_rejects_bad_input(mode):
    device = ids_device(mode)
    table = random_table(10, 4, torch.float32)
    tiers = split_tiers(table, [4], mode)
    with pytest.raises(IndexError, match=r"ids\[1\] = 10 is out of range \[0, 10\)"):
        qv.ops.gather_tiered_rows(tiers, None, torch.tensor([0, 10], device=device))
    with pytest.raises(IndexError, match=r"ids\[0\] = -3 is out of range"):
        qv.ops.gather_tiered_rows(tiers, None, torch.tensor([-3], device=device))
    positions = torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 12], device=device)  # corrupt
    with pytest.raises(IndexError, match=r"positions\[9\] = 12 is out of range \[0, 10\)"):
        qv.ops.gather_tiered_rows(tiers, positions, torch.tensor([9], device=device))
    with pytest.raises(TypeError,
                       match=r"tiers\[1\] holds torch.float64 but tiers\[0\] holds torch.float32"):
        qv.ops.gather_tiered_rows([tiers[0], tiers[1].double()], None,
                                  torch.tensor([0], device=device))
    with pytest.raises(ValueError, match=r"tiers\[1\] has rows of shape \[2\]"):
        qv.ops.gather_tiered_rows([tiers[0], tiers[1][:, :2].contiguous()], None,
                                  torch.tensor([0], device=device))
    with pytest.raises(ValueError, match="tiers must hold 1 to 17 tensors, got 0"):
        qv.ops.gather_tiered_rows([], None, torch.tensor([0], device=device))
    with pytest.raises(TypeError, match="ids must hold int32 or int64 ids, got torch.float32"):
        qv.ops.gather_tiered_rows(tiers, None, torch.tensor([0.0], device=device))
    with pytest.raises(TypeError, match="positions must hold int32 or int64 ids"):
        qv.ops.gather_tiered_rows(tiers, positions.float(), torch.tensor([0], device=device))


@requires_cuda
def test_placement_errors():
    table = random_table(10, 4, torch.float32)
    with pytest.raises(RuntimeError, match=r"tiers\[1\] is in pageable host memory"):
        qv.ops.gather_tiered_rows([table[:4].cuda(), table[4:]], None,
                                  torch.tensor([5], device="cuda"))
    with pytest.raises(RuntimeError, match="needs ids on a GPU"):
        qv.ops.gather_tiered_rows([table[:4].cuda(), table[4:].pin_memory()], None,
                                  torch.tensor([5]))
    with pytest.raises(RuntimeError, match="positions is in pageable host memory"):
        qv.ops.gather_tiered_rows([table.cuda()], torch.arange(10), torch.tensor([5], device="cuda"))


def test_rows_of_no_bytes_still_check_their_ids(mode):
    """A table of [N, 0] rows moves nothing, so no kernel sees the ids: they are checked all
    the same (ids, then the positions they name)."""
    device = ids_device(mode)
    table = torch.empty(5, 0)
    tiers = split_tiers(table, [2], mode)
    assert qv.ops.gather_tiered_rows(tiers, None, torch.tensor([4, 0], device=device)).shape == (2, 0)
    with pytest.raises(IndexError, match=r"ids\[1\] = 99 is out of range \[0, 5\)"):
        qv.ops.gather_tiered_rows(tiers, None, torch.tensor([0, 99], device=device))
    with pytest.raises(IndexError, match=r"ids\[0\] = -7"):
        qv.ops.gather_rows(tiers[0] if mode == "CPU" else table[:2].to(device), torch.tensor([-7], device=device))
    positions = torch.tensor([0, 9, 1])
    positions = positions.to(device) if mode == "CPU" or mode == "GPU" else positions.pin_memory()
    with pytest.raises(IndexError, match=r"positions\[1\] = 9 is out of range \[0, 5\)"):
        qv.ops.gather_tiered_rows(tiers, positions, torch.tensor([0, 1], device=device))


def test_a_table_that_requires_grad_is_refused_at_backward(mode):
    """No silent None gradient: backward through a gather raises (gather a trainable table
    with table[ids])."""
    device = ids_device(mode)
    weight = torch.nn.Embedding(4, 3).weight.to(device).detach().requires_grad_()
    ids = torch.tensor([1, 2, 2], device=device)
    for out in (qv.ops.gather_rows(weight, ids), qv.ops.gather_tiered_rows([weight], None, ids)):
        assert torch.equal(out.detach(), weight.detach()[ids])
        with pytest.raises(RuntimeError, match="not implemented"):
            out.sum().backward()


@pytest.mark.skipif(not (torch.cuda.is_available() and torch.cuda.device_count() >= 2
                         and torch.cuda.can_device_access_peer(0, 1)),
                    reason="needs two GPUs with peer access")
def test_a_peer_gpus_tier_is_read_after_its_queued_work():
    """A tier on another GPU, written on that GPU's stream behind a long kernel: the gather
    reads what the write leaves, as a copy between the devices would."""
    rows = torch.zeros(1 << 16, 64, device="cuda:1")
    ids = torch.arange(rows.size(0), device="cuda:0")
    qv.ops.gather_rows(rows, ids)  # peer access enabled once
    for value, gather in ((1.0, lambda: qv.ops.gather_rows(rows, ids)),
                          (2.0, lambda: qv.ops.gather_tiered_rows(
                              [torch.zeros(0, 64, device="cuda:0"), rows], None, ids))):
        torch.cuda.synchronize(1)
        with torch.cuda.device(1):
            torch.cuda._sleep(int(1e9))  # about half a second on cuda:1's stream
            rows.fill_(value)
        out = gather()
        assert float(out.min()) == float(out.max()) == value


def test_torch_compile_fullgraph():
    table = random_table(64, 4, torch.float32)
    tiers, positions = [table[:10], table[10:]], torch.arange(64)

    @torch.compile(fullgraph=True, backend="aot_eager")
    def gather_sum(tiers, positions, ids):
        return qv.ops.gather_tiered_rows(tiers, positions, ids).sum(1)

    ids = torch.tensor([3, 63, 3])
    assert torch.allclose(gather_sum(tiers, positions, ids), table[ids].sum(1))


@requires_cuda
def test_threads_that_come_and_go_reuse_error_words():
    # Each gathering thread needs a word the kernel can report into; a thread that ends
    # must give it back, or a server churning threads pins a page per thread.
    import threading
    table = random_table(100, 4).cuda()
    ids = torch.tensor([1, 99], device="cuda")

    def gather():
        qv.ops.gather_tiered_rows([table], None, ids)

    def resident_kib():  # pinned host pages do not show in VmLck/VmPin, but in VmRSS
        status = dict(line.split(":", 1) for line in open("/proc/self/status"))
        return int(status["VmRSS"].split()[0])

    def churn(count):
        for _ in range(count):
            thread = threading.Thread(target=gather)
            thread.start()
            thread.join()

    churn(50)  # warm up
    before = resident_kib()
    churn(3000)  # a pinned page (4 KiB at least) per thread would add 12 MiB or more
    assert resident_kib() - before < 6 * 1024, "each thread pinned memory of its own"
    # and the words still report: the kernel's own words for this id, not any IndexError
    with pytest.raises(IndexError, match=r"ids\[0\] = 100 is out of range \[0, 100\)"):
        qv.ops.gather_tiered_rows([table], None, torch.tensor([100], device="cuda"))


HOST_READS = {"id order": (False, False), "grouped": (True, False), "staged": (True, True),
              "staged, not grouped": (False, True)}


def gather_read_as(reads, tiers, positions, ids, host_read_blocks=0):
    """The op's rows through a layout whose host reads are set as HOST_READS[reads] says
    (how host rows are read is an option of the layout object, not of the op)."""
    group_host_reads, stage_host_rows = HOST_READS[reads]
    layout = torch.classes.quiver.FeatureTiers(tiers, positions)
    layout.set_group_host_reads(group_host_reads)
    layout.set_stage_host_rows(stage_host_rows)
    return layout.gather(ids, host_read_blocks)


@pytest.mark.parametrize("reads", HOST_READS)
@pytest.mark.parametrize("positions_dtype", [torch.int32, torch.int64])
def test_large_batches_read_in_position_order_give_the_same_rows(mode, reads, positions_dtype):
    # Past 16384 ids a CUDA gather that reads pinned host memory sorts the positions first
    # and scatters rows back; staged, CPU threads gather the host tiers' rows and the copy
    # engine moves them (in UVA mode every tier is a host tier). Results and errors must
    # not change.
    table = random_table(5000, 7, torch.float16, seed=6)
    order, positions = permutation_positions(5000, positions_dtype, seed=8)
    tiers = split_tiers(table[order], [300, 301], mode)
    device = ids_device(mode)
    gen = torch.Generator().manual_seed(2)
    ids = torch.randint(5000, (40_000,), generator=gen)  # many duplicates
    out = gather_read_as(reads, tiers, positions.to(device), ids.to(device))
    assert torch.equal(out.cpu(), table[ids])
    bad = ids.clone()
    bad[31_337] = 5000
    with pytest.raises(IndexError, match=r"ids\[31337\] = 5000 is out of range \[0, 5000\)"):
        gather_read_as(reads, tiers, positions.to(device), bad.to(device))
    corrupt = positions.clone()
    corrupt[int(ids[20_000])] = 9999
    with pytest.raises(IndexError, match=r"positions\[\d+\] = 9999 is out of range"):
        gather_read_as(reads, tiers, corrupt.to(device), ids.to(device))


@pytest.mark.parametrize("reads", HOST_READS)
@pytest.mark.parametrize("blocks", [1, 5, 48])
def test_few_blocks_for_host_reads_give_the_same_rows(mode, reads, blocks):
    # host_read_blocks caps the grid of a CUDA gather that reads pinned host memory: each
    # block then strides over many rows, in small batches and in large ones (grouped by
    # position or staged). Rows and errors must not change.
    table = random_table(5000, 100, torch.float32, seed=7)
    order, positions = permutation_positions(5000, torch.int64, seed=9)
    tiers = split_tiers(table[order], [300, 301], mode)
    device = ids_device(mode)
    positions = positions.to(device)
    gen = torch.Generator().manual_seed(5)
    for n in (100, 40_000):
        ids = torch.randint(5000, (n,), generator=gen)
        out = gather_read_as(reads, tiers, positions, ids.to(device), blocks)
        assert torch.equal(out.cpu(), table[ids]), n
    ids[-1] = 5000
    with pytest.raises(IndexError, match=r"ids\[39999\] = 5000 is out of range \[0, 5000\)"):
        gather_read_as(reads, tiers, positions, ids.to(device), blocks)


@pytest.mark.parametrize("layout", ["host tier last", "host tier between GPU tiers"])
def test_staged_host_rows_of_wide_rows_over_many_slices(mode, layout):
    # 400-byte rows: a staged batch's host rows cross dozens of 512 KiB slices, each copied
    # on its own. A host tier followed by a GPU tier is not staged (only trailing host tiers
    # are); both must match indexing, and an empty batch or one of only cached rows too.
    table = random_table(3000, 100, torch.float32, seed=11)
    order, positions = permutation_positions(3000, torch.int64, seed=12)
    tiers = split_tiers(table[order], [600, 1500], mode)
    if layout != "host tier last":
        if mode != "GPU":
            pytest.skip("only GPU mode has GPU tiers to put after a host tier")
        tiers = [tiers[0], tiers[1].cpu().pin_memory(), tiers[2].cuda()]
    device = ids_device(mode)
    gen = torch.Generator().manual_seed(4)
    positions = positions.to(device)
    for ids in (torch.randint(3000, (50_000,), generator=gen), order[:600].repeat(30),
                torch.empty(0, dtype=torch.long)):
        out = gather_read_as("staged", tiers, positions, ids.to(device))
        assert torch.equal(out.cpu(), table[ids]), layout


@requires_cuda
@pytest.mark.parametrize("positions_dtype", [None, torch.int32, torch.int64])
def test_gathers_on_one_gpu_return_early_and_still_raise_in_their_own_call(positions_dtype):
    # Every tier (and the positions) in the ids' GPU's memory: a call waits only for a check
    # of its ids and returns with its gather queued. Back-to-back calls must give the rows,
    # a bad id must raise in its own call, naming it, and leave no report for the next call.
    table = random_table(50_000, 100, torch.float32, seed=11)
    if positions_dtype is None:
        order, positions = torch.arange(50_000), None
    else:
        order, positions = permutation_positions(50_000, positions_dtype, seed=12)
        positions = positions.cuda()
    tiers = [t.cuda() for t in table[order].split([20_000, 30_000])]
    gen = torch.Generator().manual_seed(13)
    batches = [torch.randint(50_000, (200_000,), generator=gen) for _ in range(6)]
    outs = [qv.ops.gather_tiered_rows(tiers, positions, ids.cuda()) for ids in batches]
    bad = batches[0].clone()
    bad[123_456] = 50_000
    for _ in range(3):
        with pytest.raises(IndexError, match=r"ids\[123456\] = 50000 is out of range"):
            qv.ops.gather_tiered_rows(tiers, positions, bad.cuda())
        good = qv.ops.gather_tiered_rows(tiers, positions, batches[1].cuda())
        assert torch.equal(good.cpu(), table[batches[1]])
    for ids, out in zip(batches, outs):
        assert torch.equal(out.cpu(), table[ids])
    if positions is not None:
        corrupt = positions.clone()
        corrupt[int(batches[2][7])] = 50_000
        with pytest.raises(IndexError, match=r"positions\[\d+\] = 50000 is out of range"):
            qv.ops.gather_tiered_rows(tiers, corrupt, batches[2].cuda())


@requires_cuda
def test_a_layout_released_right_after_its_gathers_waits_for_their_rows():
    # Gathers from a layout on one GPU return before their rows are written, on whatever
    # stream is current; release() must wait for those kernels before the tiers go, and
    # fresh allocations that reuse the tiers' memory must not reach the rows.
    table = random_table(100_000, 100, torch.float32, seed=14)
    gen = torch.Generator().manual_seed(15)
    ids = torch.randint(100_000, (400_000,), generator=gen)
    for _ in range(3):
        layout = torch.classes.quiver.FeatureTiers([table.cuda()], None)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            rows = [layout.gather(ids.cuda()) for _ in range(4)]
        layout.release()
        del layout
        overwrite = torch.full((100_000, 100), -1.0, device="cuda")  # may reuse the tiers
        torch.cuda.current_stream().wait_stream(side)
        for out in rows:
            assert torch.equal(out.cpu(), table[ids])
        del overwrite
