"""torch.classes.quiver.FeatureTiers: one GPU's layout of a feature table as TorchScript,
torch.compile and C++ see it, and saved with a scripted module (its pickle pair)."""
import copy
import pickle

import pytest
import torch

import torch_quiver_ops as qv
from conftest import HAS_CUDA
from reference import permutation_positions, random_table


def layout(table, on_gpu=False):
    order, positions = permutation_positions(table.size(0), torch.int32)
    hot_first = table[order]
    if on_gpu:
        tiers = [hot_first[:20].cuda(), hot_first[20:].pin_memory()]
        return torch.classes.quiver.FeatureTiers(tiers, positions.cuda())
    return torch.classes.quiver.FeatureTiers([hot_first[:20], hot_first[20:]], positions)


def test_torchscript_reaches_the_layout():
    table = random_table(50, 3)
    tiers = layout(table)

    @torch.jit.script
    def gather(layout: torch.classes.quiver.FeatureTiers, ids: torch.Tensor) -> torch.Tensor:
        return layout.gather(ids)

    ids = torch.tensor([49, 0, 21])
    assert torch.equal(gather(tiers, ids), table[ids])
    assert tiers.num_rows() == 50 and tiers.shape() == [50, 3] and tiers.leading_rows() == 20


class GatherModule(torch.nn.Module):
    def __init__(self, tiers):
        super().__init__()
        self.tiers = tiers

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.tiers.gather(ids)


@pytest.mark.parametrize("on_gpu", [False] + ([True] if HAS_CUDA else []))
def test_scripted_module_holding_a_layout_saves_and_loads(tmp_path, on_gpu):
    table = random_table(50, 3)
    tiers = layout(table, on_gpu)
    tiers.set_stage_host_rows(True)  # not the defaults: they travel with the layout
    tiers.set_group_host_reads(False)
    # (a fixed share came back learned, and the pace followed again: a probe)
    tiers.set_host_read_share(0.2)
    tiers.set_follow_loader_pace(False)
    module = torch.jit.script(GatherModule(tiers))
    path = tmp_path / "gather.pt"
    module.save(str(path))
    loaded = torch.jit.load(str(path))
    ids = torch.tensor([49, 0, 21, 0])
    if on_gpu:
        ids = ids.cuda()
    assert torch.equal(loaded(ids).cpu(), table[ids.cpu()])
    restored = loaded.tiers
    assert restored.num_rows() == 50 and restored.leading_rows() == 20
    assert restored.stages_host_rows()  # (grouping is checked in C++: test_feature_tiers.cpp)
    assert restored.host_read_share_fixed() and restored.host_read_share() == 0.2
    assert not restored.follows_loader_pace()
    learned = layout(table, on_gpu)  # a learned share stays learned
    learned_copy = copy.deepcopy(torch.jit.script(GatherModule(learned))).tiers
    assert not learned_copy.host_read_share_fixed() and learned_copy.follows_loader_pace()


def test_torch_compile_fullgraph_over_a_layouts_tensors():
    table = random_table(64, 4)
    tiers = qv.Feature().from_cpu_tensor(table).tiers("cpu")

    @torch.compile(fullgraph=True, backend="aot_eager")
    def gather_sum(tiers, positions, ids):
        rows = qv.ops.gather_tiered_rows(tiers, positions, ids)
        return rows, rows.sum(1)

    ids = torch.tensor([3, 63, 3])
    # against the source table: tiers.gather runs the same op, so it would agree with
    # rows the layout got wrong; the rows too (a sum hides columns out of order)
    rows, sums = gather_sum(tiers.tiers(), tiers.positions(), ids)
    assert torch.allclose(sums, table[ids].sum(1)) and torch.equal(rows, table[ids])


@pytest.mark.parametrize("on_gpu", [False] + ([True] if HAS_CUDA else []))
def test_every_gather_through_a_layout_reads_as_its_feature_says(on_gpu):
    """One door: a Feature's host_reads (and the thread's block cap) reach its layouts, so
    TorchScript, C++ and DistFeature gather as Feature does, also after host_reads changes."""
    table = random_table(3000, 8)
    device = 0 if on_gpu else None
    feature = qv.Feature(device_list=[0] if on_gpu else [], device_cache_size="10%",
                         host_reads="staged").from_cpu_tensor(table)
    tiers = feature.tiers(device)
    assert tiers.stages_host_rows()
    feature.host_reads = "zero_copy"
    assert not tiers.stages_host_rows() and not feature.tiers(device).stages_host_rows()
    feature.host_reads = "staged"
    assert tiers.stages_host_rows()
    with pytest.raises(ValueError, match="host_reads must be one of"):
        feature.host_reads = "copy"
    ids = torch.randint(3000, (2500,))
    ids = ids.cuda() if on_gpu else ids
    for blocks in (0, 4):
        assert torch.equal(tiers.gather(ids, host_read_blocks=blocks).cpu(), table[ids.cpu()])
    with pytest.raises(ValueError, match="host_read_blocks must be >= 0"):
        tiers.gather(ids, host_read_blocks=-1)


@pytest.mark.parametrize("on_gpu", [False] + ([True] if HAS_CUDA else []))
def test_a_fixed_host_read_share_reaches_every_layout_and_changes_no_row(on_gpu):
    """Feature.host_read_share fixes the GPU's share of a staged gather's host rows in
    every layout (made before or after), travels with a pickled Feature, and None learns
    again; every share gathers the same rows."""
    table = random_table(3000, 8)
    device = 0 if on_gpu else None
    feature = qv.Feature(device_list=[0] if on_gpu else [], device_cache_size="10%",
                         host_reads="staged").from_cpu_tensor(table)
    tiers = feature.tiers(device)
    assert feature.host_read_share is None and not tiers.host_read_share_fixed()
    assert feature.current_host_read_share(device) == pytest.approx(0.3)  # the first share
    ids = torch.randint(3000, (2500,))
    ids = ids.cuda() if on_gpu else ids
    for share in (0.0, 0.5, 1, 1.0):
        feature.host_read_share = share
        assert tiers.host_read_share_fixed() and tiers.host_read_share() == share
        for _ in range(2):  # a gather measures both parts; a fixed share is kept
            assert torch.equal(tiers.gather(ids).cpu(), table[ids.cpu()])
        assert feature.current_host_read_share(device) == share
    feature.host_read_share = 0.25
    assert pickle.loads(pickle.dumps(feature)).host_read_share == 0.25
    tiers = feature.tiers(device)  # pickling moved the table to shared memory: new layouts
    assert tiers.host_read_share() == 0.25
    feature.host_read_share = None
    assert not tiers.host_read_share_fixed()
    assert feature.current_host_read_share(device) == pytest.approx(0.25)  # learns from there
    for bad in (1.5, -0.1, float("nan"), True, "0.5", [0.5]):
        with pytest.raises(ValueError, match=r"host_read_share is the GPU's share .* got"):
            feature.host_read_share = bad
    assert not tiers.host_read_share_fixed()  # a refused value changes nothing
    with pytest.raises(ValueError, match=r"set_host_read_share: share .* in \[0, 1\].* got 2"):
        tiers.set_host_read_share(2.0)
    # A share of -0.0 was taken with its sign, saved as a negative word and refused as a
    # corrupt state on load (a probe): it is 0.
    tiers.set_host_read_share(-0.0)
    assert str(tiers.host_read_share()) == "0.0"
    restored = copy.deepcopy(tiers)
    assert restored.host_read_share() == 0.0 and restored.host_read_share_fixed()


@pytest.mark.parametrize("on_gpu", [False] + ([True] if HAS_CUDA else []))
def test_host_read_pace_switches_the_loaders_pace_off_in_every_layout(on_gpu):
    """Feature.host_read_pace False: a loader's pace no longer moves any layout's share
    (made before or after), it travels with a pickled Feature, and True follows it again."""
    table = random_table(3000, 8)
    device = 0 if on_gpu else None
    feature = qv.Feature(device_list=[0] if on_gpu else [], device_cache_size="10%",
                         host_reads="staged").from_cpu_tensor(table)
    tiers = feature.tiers(device)
    assert feature.host_read_pace and tiers.follows_loader_pace()
    first = feature.current_host_read_share(device)
    feature.note_loader_pace(True, device)
    assert feature.current_host_read_share(device) == pytest.approx(first * 0.9)
    feature.host_read_pace = False  # the whole balanced share back, whatever the pace
    assert not tiers.follows_loader_pace()
    assert feature.current_host_read_share(device) == pytest.approx(first)
    for _ in range(5):
        feature.note_loader_pace(True, device)
    assert feature.current_host_read_share(device) == pytest.approx(first)
    copy = pickle.loads(pickle.dumps(feature))
    assert copy.host_read_pace is False and not copy.tiers(device).follows_loader_pace()
    tiers = feature.tiers(device)  # pickling moved the table to shared memory: new layouts
    assert not tiers.follows_loader_pace()
    feature.host_read_pace = True
    feature.note_loader_pace(True, device)
    assert feature.current_host_read_share(device) == pytest.approx(first * 0.9)
    for bad in (0, 1, None, "yes"):
        with pytest.raises(ValueError, match="host_read_pace is True or False, got"):
            feature.host_read_pace = bad
    assert tiers.follows_loader_pace()


def test_a_dist_feature_reads_its_own_rows_through_its_features_layout():
    """DistFeature's own rows come through the local Feature's layout with its options
    (before, staged host reads were silently dropped in distributed runs)."""
    import torch.distributed as dist
    table = random_table(400, 4)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        shard_map = qv.dist.build_shard_map(400, 1)
        local = qv.Feature(device_list=[], host_reads="staged").from_cpu_tensor(table)
        feature = qv.dist.DistFeature(shard_map, local, transport="gloo", timeout=10.0)
        assert feature._runtime.local().stages_host_rows()
        ids = torch.randint(400, (50,))
        with qv.feature.host_read_blocks(2):
            assert torch.equal(feature[ids], table[ids])
        with pytest.raises(ValueError, match="host_read_blocks must be >= 0"):
            feature._runtime.gather(ids, -1)
        feature.close()
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("bad", [-1, 50, 2**40])
def test_positions_past_the_tiers_refused_where_the_layout_is_made(bad):
    """A positions entry outside the tiers' rows fails at construction, naming the entry,
    not at the first gather that happens to read it."""
    table = random_table(50, 3)
    if bad == -1:  # positions on the meta device: torch's item() error had named nothing
        with pytest.raises(ValueError, match="positions is on the meta device"):
            torch.classes.quiver.FeatureTiers([table], torch.zeros(50, dtype=torch.long,
                                                                   device="meta"))
    positions = torch.arange(50)
    positions[7] = bad
    with pytest.raises(IndexError, match=rf"positions\[7\] = {bad} is out of range \[0, 50\)"):
        torch.classes.quiver.FeatureTiers([table[:20], table[20:]], positions)
    if HAS_CUDA:
        with pytest.raises(IndexError, match=rf"positions\[7\] = {bad}"):
            torch.classes.quiver.FeatureTiers([table[:20].cuda(), table[20:].pin_memory()],
                                              positions.cuda())
