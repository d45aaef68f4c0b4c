"""The README's main job, shortened: it must train to well above chance."""
import importlib.util
from pathlib import Path

import pytest


def test_train_sage_learns():
    pytest.importorskip("torch_geometric")
    path = Path(__file__).resolve().parents[2] / "examples" / "train_sage.py"
    spec = importlib.util.spec_from_file_location("train_sage", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.main(["--size", "small", "--epochs", "3", "--eval-nodes", "3000",
                          "--device", "cpu"])
    final = result["history"][-1]
    chance = 1 / result["num_classes"]
    assert final["accuracy"] > 10 * chance, result
    assert final["sample"] > 0 and final["gather"] > 0 and final["model"] > 0
