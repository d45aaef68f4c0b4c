"""torch-quiver users: a torch-quiver training script runs with its import line changed
(tests/python/torch_quiver_script.py), and the hand-over calls it relies on check their
arguments."""
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torch_quiver_ops as quiver
from conftest import HAS_CUDA


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_torch_quiver_script_trains_with_only_its_import_changed(tmp_path):
    out = tmp_path / "result.json"
    world = min(2, torch.cuda.device_count()) if HAS_CUDA else 2
    script = Path(__file__).with_name("torch_quiver_script.py")
    result = subprocess.run([sys.executable, str(script), str(out), str(world), str(free_port())],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["world_size"] == world
    assert report["sampler_mode"] == ("UVA" if HAS_CUDA else "CPU")
    assert report["test_accuracy"] > 2.0 / report["num_classes"], report


def test_torch_quiver_names_are_where_scripts_look_for_them():
    assert quiver.pyg.GraphSageSampler is quiver.GraphSageSampler
    for name in ("CSRTopo", "Feature", "init_p2p"):
        assert hasattr(quiver, name)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        quiver.nope


def test_ipc_handles_are_the_objects_and_are_checked():
    topo = quiver.CSRTopo(torch.tensor([[0, 1], [1, 0]]))
    sampler = quiver.GraphSageSampler(topo, [1], device="cpu", mode="CPU")
    feature = quiver.Feature(rank=0, device_list=[]).from_cpu_tensor(torch.ones(2, 3))
    assert quiver.GraphSageSampler.lazy_from_ipc_handle(sampler.share_ipc()) is sampler
    assert quiver.Feature.new_from_ipc_handle(1, feature.share_ipc()).rank == 1
    assert quiver.Feature.lazy_from_ipc_handle(feature.share_ipc()) is feature
    with pytest.raises(TypeError, match="Feature.share_ipc"):
        quiver.Feature.new_from_ipc_handle(0, ({}, torch.ones(2, 3), [0], 0, "device_replicate"))
    with pytest.raises(TypeError, match="GraphSageSampler.share_ipc"):
        quiver.GraphSageSampler.lazy_from_ipc_handle((topo, [1], "UVA"))


def test_init_p2p_checks_the_devices():
    if not HAS_CUDA:
        with pytest.raises(RuntimeError, match="init_p2p needs CUDA"):
            quiver.init_p2p([0])
        return
    count = torch.cuda.device_count()
    cliques = quiver.init_p2p(list(range(count)))
    assert sorted(d for c in cliques for d in c) == list(range(count))
    with pytest.raises(ValueError, match=f"this process sees {count}"):
        quiver.init_p2p([count])
