"""Saved arrays (torch_quiver_ops._sharing, behind Feature/CSRTopo save and load_shared and
the distributed partitions): metadata is checked against itself and the files before
anything is mapped, names stay inside the directory, and a load never changes the save."""
import json
import os
import re
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
import torch

import torch_quiver_ops as qv
from torch_quiver_ops import _sharing
from torch_quiver_ops.partition import read_manifest


def saved(tmp_path, rows=None):
    rows = torch.arange(24, dtype=torch.float32).view(6, 4) if rows is None else rows
    qv.Feature(device_list=[]).from_cpu_tensor(rows)  # sanity: a table Feature accepts
    _sharing.save_arrays(tmp_path, "feature", {"rows": rows})
    return rows


def edit_metadata(directory, **changes):
    record = Path(directory) / "feature.json"
    meta = json.loads(record.read_text())
    meta["arrays"]["rows"].update(changes)
    record.write_text(json.dumps(meta))


def test_an_interrupted_save_over_another_leaves_nothing_to_load(tmp_path, monkeypatch):
    """Two saves of the same sizes: one stopped after replacing its first file must not
    load as a mix of the two (the earlier save's json goes first)."""
    first = {"a": torch.zeros(4), "b": torch.zeros(4)}
    _sharing.save_arrays(tmp_path, "pair", first)
    replaced = []
    real_replace = os.replace

    def stop_after_one(source, target):
        if replaced:
            raise KeyboardInterrupt
        replaced.append(target)
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", stop_after_one)
    with pytest.raises(KeyboardInterrupt):
        _sharing.save_arrays(tmp_path, "pair", {"a": torch.ones(4), "b": torch.ones(4)})
    monkeypatch.setattr(os, "replace", real_replace)
    with pytest.raises(FileNotFoundError, match="has not finished"):
        _sharing.map_arrays(tmp_path, "pair")


@pytest.mark.parametrize("stop", [TypeError, KeyboardInterrupt])
def test_a_write_that_fails_leaves_no_half_file(tmp_path, stop):
    """An interrupted partition_graph left its half-written arrays as *.bin.partial files (a
    probe; never loaded, since the json goes last, but as large as what was written), and
    the arrays written before the failure too (no json would ever list them)."""
    def chunks():
        yield torch.zeros(4, dtype=torch.int64)
        if stop is KeyboardInterrupt:
            raise KeyboardInterrupt
        yield torch.zeros(4, dtype=torch.int32)  # not the array's dtype: a TypeError

    with pytest.raises(stop):
        _sharing.save_arrays(tmp_path, "lists", {
            "whole": torch.ones(3),
            "streamed": _sharing.Streamed(torch.int64, [8], chunks())})
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_write_that_fails_names_the_array_and_folder(tmp_path, monkeypatch):
    """numpy's own error on a full disk named neither ("4194304 requested and 2097152
    written"), and the arrays written before it stayed, listed by no json."""
    real = torch.Tensor.numpy

    def full_disk(t, *args, **kwargs):
        array = real(t, *args, **kwargs)
        if t.numel() == 64:
            class Full:
                def tofile(self, path):
                    raise OSError("4194304 requested and 2097152 written")
            return Full()
        return array
    monkeypatch.setattr(torch.Tensor, "numpy", full_disk)
    with pytest.raises(OSError, match=rf"save_arrays could not write b \(64 bytes\) in "
                                      rf"{tmp_path}: .* nothing of this save is left"):
        _sharing.save_arrays(tmp_path, "s", {"a": torch.ones(4), "b": torch.zeros(64, dtype=torch.uint8)})
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def _save_many(directory, value, count):
    for _ in range(count):
        _sharing.save_arrays(directory, "feature", {"rows": torch.full((2000, 50), value)})


def test_saves_into_one_folder_at_once_take_turns(tmp_path):
    """Two processes saving into one folder renamed each other's partial files away
    (FileNotFoundError) and could leave one's json beside the other's rows (a probe)."""
    import multiprocessing
    context = multiprocessing.get_context("spawn")
    savers = [context.Process(target=_save_many, args=(tmp_path, float(v), 40)) for v in (1, 2)]
    for saver in savers:
        saver.start()
    for saver in savers:
        saver.join(timeout=240)
    assert [saver.exitcode for saver in savers] == [0, 0]
    rows = _sharing.map_arrays(tmp_path, "feature", verify=True)[0]["rows"]
    assert rows.unique().numel() == 1  # one save's rows, whole
    assert not list(tmp_path.glob("*.partial"))


def test_files_that_are_no_files_and_checksums_that_are_none_are_named(tmp_path):
    _sharing.save_arrays(tmp_path, "s", {"a": torch.ones(4)})
    record = tmp_path / "s.json"
    meta = json.loads(record.read_text())
    meta["arrays"]["a"]["crc32"] = "none"
    record.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="records no checksum for a .*its metadata is corrupt"):
        _sharing.map_arrays(tmp_path, "s", verify=True)
    (tmp_path / "a.bin").unlink()
    (tmp_path / "a.bin").mkdir()
    with pytest.raises(ValueError, match="a.bin is not a regular file"):
        _sharing.map_arrays(tmp_path, "s")


def test_two_saves_in_one_directory_may_not_share_an_array_name(tmp_path):
    """Files are named by array: a second stem writing ids.bin would change the first
    save's data under its json."""
    _sharing.save_arrays(tmp_path, "train", {"ids": torch.arange(4)})
    with pytest.raises(ValueError, match=r"another save, train.json, with arrays named \['ids'\]"):
        _sharing.save_arrays(tmp_path, "test", {"ids": torch.arange(100, 104)})
    _sharing.save_arrays(tmp_path, "test", {"test_ids": torch.arange(100, 104)})  # other names
    assert torch.equal(_sharing.map_arrays(tmp_path, "train")[0]["ids"], torch.arange(4))
    _sharing.save_arrays(tmp_path, "train", {"ids": torch.arange(8)})  # the same save again


def test_a_load_that_a_save_overtook_is_refused(tmp_path, monkeypatch):
    """A save over the directory while a load maps it: the load raises rather than return
    files of two saves."""
    _sharing.save_arrays(tmp_path, "pair", {"a": torch.zeros(4)})
    real_from_file = torch.from_file

    def save_meanwhile(*args, **kwargs):
        mapped = real_from_file(*args, **kwargs)
        monkeypatch.setattr(torch, "from_file", real_from_file)
        _sharing.save_arrays(tmp_path, "pair", {"a": torch.ones(4)})
        return mapped

    monkeypatch.setattr(torch, "from_file", save_meanwhile)
    with pytest.raises(ValueError, match="saved over while it was being loaded"):
        _sharing.map_arrays(tmp_path, "pair")
    arrays, meta = _sharing.map_arrays(tmp_path, "pair")
    assert torch.equal(arrays["a"], torch.ones(4)) and "save_id" not in meta


@pytest.mark.parametrize("shape", [[12, 4], [3, 4], [6, 2]])
def test_a_shape_that_disagrees_with_the_bytes_is_refused_and_the_file_left_alone(tmp_path,
                                                                                  shape):
    saved(tmp_path)
    size = (tmp_path / "rows.bin").stat().st_size
    edit_metadata(tmp_path, shape=shape)  # nbytes unchanged: the shape lies
    with pytest.raises(ValueError, match="the metadata is corrupt"):
        qv.Feature.load_shared(tmp_path)
    assert (tmp_path / "rows.bin").stat().st_size == size


@pytest.mark.parametrize("dtype", ["int32", "save", "Tensor", 7, ["int32"]])
def test_a_dtype_is_one_of_a_fixed_set_and_agrees_with_the_bytes(tmp_path, dtype):
    saved(tmp_path)
    edit_metadata(tmp_path, dtype=dtype)
    # int32 has float32's size, so the bytes agree: it is the CRC that tells, on request.
    if dtype == "int32":
        with pytest.raises(ValueError, match="does not match the checksum"):
            _sharing.map_arrays(tmp_path, "feature", verify=True)
    else:
        with pytest.raises(ValueError, match="which is none of"):
            _sharing.map_arrays(tmp_path, "feature")


@pytest.mark.parametrize("name", ["../outside", "a/b", "..", "/etc/passwd", ""])
def test_names_stay_inside_the_directory(tmp_path, name):
    inside = tmp_path / "save"
    saved(inside)
    (tmp_path / "outside.bin").write_bytes(bytes(96))
    record = inside / "feature.json"
    meta = json.loads(record.read_text())
    meta["arrays"][name] = meta["arrays"].pop("rows")
    record.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="not a plain file name"):
        _sharing.map_arrays(inside, "feature")
    with pytest.raises(ValueError, match="not a plain file name"):
        _sharing.save_arrays(inside, "feature", {name: torch.zeros(3)})
    assert (tmp_path / "outside.bin").read_bytes() == bytes(96)
    # The record's own name too, as save_arrays checks it (it was read from outside).
    with pytest.raises(ValueError, match="not a plain file name"):
        _sharing.map_arrays(inside, "../save/feature")


def test_unexpected_missing_arrays_and_corrupt_json_are_refused(tmp_path):
    saved(tmp_path)
    _sharing.save_arrays(tmp_path / "only_order", "feature", {"order": torch.arange(3)})
    with pytest.raises(ValueError, match="lists no rows"):
        qv.Feature.load_shared(tmp_path / "only_order")
    with pytest.raises(ValueError, match="none of the expected"):
        _sharing.map_arrays(tmp_path, "feature", names=["order"])
    (tmp_path / "feature.json").write_text("{not json")
    with pytest.raises(ValueError, match="is not the JSON save_arrays writes"):
        qv.Feature.load_shared(tmp_path)


def test_a_record_that_is_no_regular_file_is_refused_not_waited_on(tmp_path):
    """A FIFO in place of a record (or of a partition's manifest) blocked the load forever:
    opening it waits for a writer. It is now refused by name, as is a huge record."""
    saved(tmp_path)
    record = tmp_path / "feature.json"
    record.unlink()
    os.mkfifo(record)
    parts = tmp_path / "parts"
    parts.mkdir()
    os.mkfifo(parts / "manifest.json")
    calls = [lambda: qv.Feature.load_shared(tmp_path),
             lambda: _sharing.save_arrays(tmp_path, "other", {"rows": torch.ones(2)}),
             lambda: read_manifest(parts)]
    outcomes = []
    worker = threading.Thread(target=lambda: [outcomes.append(_outcome(c)) for c in calls],
                              daemon=True)
    worker.start()
    worker.join(60)
    if worker.is_alive():  # release the blocked open, so that the process can end
        for fifo in (record, parts / "manifest.json"):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail(f"a load waited on a FIFO (done before: {outcomes})")
    assert "not a regular file" in outcomes[0] and "not a regular file" in outcomes[2]
    assert outcomes[1] == "ok"  # the save passes over the FIFO (not a save of its own)
    record.unlink()
    with open(record, "wb") as f:
        f.truncate(_sharing.MAX_RECORD_BYTES + 1)
    with pytest.raises(ValueError, match="more than a record's"):
        qv.Feature.load_shared(tmp_path)


def test_a_saved_table_of_no_rows_dimension_is_named(tmp_path):
    """rows saved as one value (shape []) reached a bare torch IndexError."""
    _sharing.save_arrays(tmp_path, "feature", {"rows": torch.tensor(1.5)})
    with pytest.raises(ValueError, match=r"rows.bin holds one value \(shape \[\]\)"):
        qv.Feature.load_shared(tmp_path)


def _outcome(call) -> str:
    try:
        call()
        return "ok"
    except Exception as error:  # noqa: BLE001 (what was raised is the result)
        return f"{type(error).__name__}: {error}"


def test_verify_finds_a_flipped_byte_through_every_loader(tmp_path):
    rows = saved(tmp_path / "feature")
    qv.CSRTopo(torch.tensor([[0, 1, 2], [1, 2, 0]])).save(tmp_path / "csr")
    for path in (tmp_path / "feature" / "rows.bin", tmp_path / "csr" / "indices.bin"):
        data = bytearray(path.read_bytes())
        data[3] ^= 0x40
        path.write_bytes(bytes(data))
    loaded = qv.Feature.load_shared(tmp_path / "feature", device_list=[])  # sizes only: loads
    assert not torch.equal(loaded[torch.arange(6)], rows)
    with pytest.raises(ValueError, match="does not match the checksum"):
        qv.Feature.load_shared(tmp_path / "feature", device_list=[], verify=True)
    with pytest.raises(ValueError, match="does not match the checksum"):
        qv.CSRTopo.load_shared(tmp_path / "csr", verify=True)


def test_an_in_place_write_reaches_the_save_as_documented(tmp_path):
    # MAP_SHARED: one copy per machine, also once pinned (a private mapping is copied by
    # pinning, measured in docs/benchmarks.md), so a write goes to the save. clone() to
    # change rows privately.
    saved(tmp_path)
    table = _sharing.map_arrays(tmp_path, "feature")[0]["rows"]
    private = table.clone()
    private[0, 0] = -5
    assert _sharing.map_arrays(tmp_path, "feature")[0]["rows"][0, 0] == 0
    table[0, 0] = -123
    assert _sharing.map_arrays(tmp_path, "feature")[0]["rows"][0, 0] == -123


def read_only_mount(source: Path, target: Path) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    target.mkdir()
    if subprocess.run(["mount", "--bind", str(source), str(target)],
                      capture_output=True).returncode != 0:
        return False
    if subprocess.run(["mount", "-o", "remount,bind,ro", str(target)],
                      capture_output=True).returncode != 0:
        subprocess.run(["umount", str(target)], capture_output=True)
        return False
    return True


def test_a_save_on_a_read_only_mount_loads_and_stays_unchanged(tmp_path):
    rows = saved(tmp_path / "save")
    qv.CSRTopo(torch.tensor([[0, 1, 2], [1, 2, 0]])).save(tmp_path / "save" / "csr")
    mounted = tmp_path / "ro"
    if not read_only_mount(tmp_path / "save", mounted):
        pytest.skip("needs root and bind mounts to make a read-only file system")
    try:
        feature = qv.Feature.load_shared(mounted, device_list=[], verify=True)
        assert torch.equal(feature[torch.arange(6)], rows)
        table = feature.table
        table[0, 0] = 77  # a private page: the read-only file is not written
        assert (tmp_path / "save" / "rows.bin").read_bytes()[:4] == bytes(4)
        topo = qv.CSRTopo.load_shared(mounted / "csr", verify=True)
        assert topo.edge_count == 3
        del feature, table, topo
    finally:
        subprocess.run(["umount", str(mounted)], capture_output=True)


def test_a_refused_save_leaves_the_previous_one_whole(tmp_path):
    # A dtype it cannot save, meta that is no JSON, or the save id's key were refused only
    # after the old save's json was removed and a file overwritten (found by a probe).
    rows = torch.arange(12.).view(3, 4)
    _sharing.save_arrays(tmp_path, "s", {"a": rows}, note="first")
    for arrays, meta, error, words in [
            ({"a": rows.to(torch.uint16)}, {}, TypeError, "a cannot be saved: its dtype is torch.uint16"),
            ({"a": rows * 2}, {"note": torch.ones(1)}, TypeError, "meta must be JSON data"),
            ({"a": rows * 2}, {"save_id": "mine"}, ValueError, "may not use the key 'save_id'"),
            ({"a": rows * 2}, {"format_version": 1}, ValueError,
             "may not use the key 'format_version'"),
            ({"a": rows.numpy()}, {}, TypeError, "a is a ndarray"),
            ({"a": torch.empty(3, 4, device="meta")}, {}, TypeError, "meta tensor"),
            # (torch's "nbytes is not defined for sparse tensors" had named no array)
            ({"a": torch.eye(3).to_sparse()}, {}, TypeError,
             "a cannot be saved: it is a torch.sparse_coo tensor")]:
        with pytest.raises(error, match=words):
            _sharing.save_arrays(tmp_path, "s", arrays, **meta)
        loaded, meta_loaded = _sharing.map_arrays(tmp_path, "s", names=["a"])
        assert torch.equal(loaded["a"], rows) and meta_loaded["note"] == "first"
    # A Streamed array's shape, chunks and dtype are checked first too; numpy ints in its
    # shape failed the json after the files were written, leaving them behind.
    import numpy as np
    for streamed, error, words in [
            (_sharing.Streamed(torch.float32, [-1], []), ValueError, "shape must be a list of"),
            (_sharing.Streamed(torch.float32, [2.5], []), ValueError, "shape must be a list of"),
            (_sharing.Streamed(torch.float32, [True], []), ValueError, "shape must be a list of"),
            (_sharing.Streamed(torch.float32, [2], None), TypeError, "chunks must be an iterable"),
            (_sharing.Streamed("float32", [2], []), TypeError, "dtype must be a torch.dtype")]:
        with pytest.raises(error, match=f"Streamed b's {words}"):
            _sharing.save_arrays(tmp_path, "s", {"a": rows * 2, "b": streamed})
        loaded, meta_loaded = _sharing.map_arrays(tmp_path, "s", names=["a"])
        assert torch.equal(loaded["a"], rows) and meta_loaded["note"] == "first"
    _sharing.save_arrays(tmp_path, "t", {"b": _sharing.Streamed(
        torch.float32, (np.int64(2),), [torch.ones(1), torch.ones(1)])})
    loaded, _ = _sharing.map_arrays(tmp_path, "t", names=["b"])
    assert loaded["b"].tolist() == [1.0, 1.0]
    with pytest.raises(TypeError, match="verify must be True or False, got 'no'"):
        _sharing.map_arrays(tmp_path, "s", verify="no")
    # a negated or conjugated view is saved as its values
    _sharing.save_arrays(tmp_path, "s", {"a": torch.tensor([1j, 2j])._neg_view()})
    loaded, _ = _sharing.map_arrays(tmp_path, "s", names=["a"])
    assert torch.equal(loaded["a"], torch.tensor([-1j, -2j]))


def test_a_save_over_the_one_being_loaded_is_named_as_such(tmp_path, monkeypatch):
    """A loader racing a save met a file of the new save's size and blamed corruption
    ("truncated or from another save"), or a bare FileNotFoundError (a probe)."""
    _sharing.save_arrays(tmp_path, "s", {"a": torch.ones(4)})
    with open(tmp_path / "a.bin", "ab") as grown:  # the new save's bigger file
        grown.write(b"\0" * 16)
    real, reads = _sharing.read_record, []

    def json_rewritten_after_the_first_read(path):
        reads.append(path)
        return real(path) if len(reads) == 1 else "{}"
    monkeypatch.setattr(_sharing, "read_record", json_rewritten_after_the_first_read)
    with pytest.raises(ValueError, match="was saved over while it was being loaded"):
        _sharing.map_arrays(tmp_path, "s")

    def json_removed(path):
        raise FileNotFoundError(2, "No such file or directory", str(path))
    monkeypatch.setattr(_sharing, "read_record", json_removed)
    with pytest.raises(FileNotFoundError, match="or the save has not finished"):
        _sharing.map_arrays(tmp_path, "s")


def test_names_too_long_or_ending_in_a_newline_are_refused_before_the_save(tmp_path):
    """From a probe: a 250-character name failed mid-save with ENAMETOOLONG after the old
    save's record was removed (nothing loaded after, a stray file left), and 'x\\n' passed
    the name check ('$' matches before a final newline)."""
    qv.save_arrays(tmp_path, "st", {"x": torch.arange(3)})
    for stem, arrays, words in [
            ("st", {"x": torch.arange(4), "b" * 250: torch.arange(3)}, "has 250 characters"),
            ("st", {"abc\n": torch.arange(3)}, "is not a plain file name"),
            ("st\n", {"x": torch.arange(3)}, "is not a plain file name")]:
        with pytest.raises(ValueError, match=words):
            qv.save_arrays(tmp_path, stem, arrays)
    arrays, _ = qv.load_arrays(tmp_path, "st")
    assert torch.equal(arrays["x"], torch.arange(3))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["st.json", "x.bin"]


def test_a_save_that_fails_writing_its_json_leaves_none_of_its_files(tmp_path, monkeypatch):
    """The json was written outside the cleanup: a failure there left the arrays' files."""
    real_write = Path.write_text

    def failing_write(self, *args, **kwargs):
        if self.name.endswith(".json.partial"):
            raise OSError(28, "No space left on device")
        return real_write(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", failing_write)
    with pytest.raises(OSError, match=r"could not write u.json .* nothing of this save is left"):
        _sharing.save_arrays(tmp_path, "u", {"c": torch.arange(4)})
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_save_into_a_path_that_is_a_file_is_named(tmp_path):
    """From a probe: Feature.save onto an existing file raised mkdir's FileExistsError."""
    (tmp_path / "taken").write_text("a file")
    feature = qv.Feature().from_cpu_tensor(torch.randn(4, 2))
    with pytest.raises(NotADirectoryError, match="taken is a file, not a folder"):
        feature.save(tmp_path / "taken")
    assert (tmp_path / "taken").read_text() == "a file"


def test_a_save_of_a_later_format_is_refused_by_name(tmp_path):
    """Saves carry their layout's version: a later one is refused by name rather than
    misread; one from before the key (none) is read as the first."""
    import json
    _sharing.save_arrays(tmp_path, "s", {"a": torch.arange(4.)}, note="x")
    record = tmp_path / "s.json"
    meta = json.loads(record.read_text())
    assert meta["format_version"] == 1
    arrays, read = _sharing.map_arrays(tmp_path, "s")
    assert read == {"note": "x"} and torch.equal(arrays["a"], torch.arange(4.))
    del meta["format_version"]
    record.write_text(json.dumps(meta))
    assert torch.equal(_sharing.map_arrays(tmp_path, "s")[0]["a"], torch.arange(4.))
    for version in (2, "1", None):
        record.write_text(json.dumps(dict(meta, format_version=version)))
        with pytest.raises(ValueError, match=f"is a save of format {re.escape(repr(version))}, "
                                             f"and this torch_quiver_ops reads formats 1 to 1"):
            _sharing.map_arrays(tmp_path, "s")


def test_arrays_and_names_of_the_wrong_kind_are_named(tmp_path):
    # (a list of arrays failed on a missing items(); names="a" was read as its characters)
    with pytest.raises(TypeError, match="arrays must be a dict of names to tensors, got list"):
        qv.save_arrays(tmp_path, "s", [torch.zeros(2)])
    qv.save_arrays(tmp_path, "s", {"a": torch.zeros(2)})
    for option in ("names", "required"):
        with pytest.raises(TypeError, match=f"{option} must be a sequence of array names, "
                                            f"got 'a'"):
            qv.load_arrays(tmp_path, "s", **{option: "a"})
    assert qv.load_arrays(tmp_path, "s", names=["a"])[0]["a"].tolist() == [0.0, 0.0]
