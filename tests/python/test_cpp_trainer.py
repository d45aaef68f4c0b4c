"""examples/cpp/train_sage: GraphSAGE trained by a libtorch program with the quiver ops,
on its own synthetic graph and on one saved by Python. scripts/test.sh builds it (a
separate CMake project on the installed package) and names it in QUIVER_CPP_TRAINER."""
import importlib.util
import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

import torch_quiver_ops as qv

REPO = Path(__file__).resolve().parents[2]
TRAINER = os.environ.get("QUIVER_CPP_TRAINER")
if not TRAINER:
    if os.environ.get("QUIVER_REQUIRE_CPP_TESTS") == "1":
        raise RuntimeError("QUIVER_CPP_TRAINER is not set: scripts/test.sh builds examples/cpp")
    pytest.skip("QUIVER_CPP_TRAINER is not set (scripts/test.sh builds examples/cpp)",
                allow_module_level=True)

MODES = ["CPU"] + (["GPU", "UVA"] if torch.cuda.is_available() else [])


def train(*args, timeout=600):
    return subprocess.run([TRAINER, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def final_accuracy(stdout: str) -> float:
    lines = [line for line in stdout.splitlines() if line.startswith("epoch ")]
    assert lines, stdout
    return float(lines[-1].split("test accuracy")[1].split()[0])


@pytest.fixture(scope="module")
def saved_graph(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("save_graph",
                                                  REPO / "examples" / "cpp" / "save_graph.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    directory = tmp_path_factory.mktemp("graph")
    module.main([str(directory), "--size", "tiny"])
    return directory


@pytest.mark.parametrize("mode", MODES)
def test_learns_its_synthetic_graph(mode):
    done = train("--mode", mode, "--epochs", "3", "--hidden", "64", "--min-accuracy", "0.6")
    assert done.returncode == 0, done.stdout + done.stderr
    # Each epoch's line with its split ("sample" alone matched the graph's "sampler mode").
    import re
    epochs = re.findall(r"^epoch (\d+): [0-9.]+s \(sample [0-9.]+s, gather [0-9.]+s, model "
                        r"[0-9.]+s\)", done.stdout, re.M)
    assert epochs == ["1", "2", "3"], done.stdout
    assert final_accuracy(done.stdout) > 0.6  # eight classes: chance is 0.125


@pytest.mark.parametrize("mode", MODES)
def test_learns_with_batches_built_ahead_by_a_batch_prefetcher(mode):
    # --prefetch 2: a quiver::runtime::BatchPrefetcher thread samples, gathers and reads the
    # labels two batches ahead (on a side stream on a GPU) while the program trains.
    done = train("--mode", mode, "--epochs", "3", "--hidden", "64", "--prefetch", "2",
                 "--min-accuracy", "0.6")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("built 2 ahead by a BatchPrefetcher") == 3
    assert final_accuracy(done.stdout) > 0.6


@pytest.mark.parametrize("mode", MODES)
def test_learns_a_graph_saved_by_python(saved_graph, mode):
    done = train("--data", saved_graph, "--mode", mode, "--epochs", "6", "--batch-size", "64",
                 "--hidden", "64", "--min-accuracy", "0.5")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2000 nodes" in done.stdout
    assert final_accuracy(done.stdout) > 0.5  # four classes: chance is 0.25


@pytest.mark.parametrize("mode", MODES)
def test_serves_its_model_with_the_cpp_runtime(mode):
    """--serve: the trained model behind quiver::runtime::ServingRuntime, no Python: every
    request answered, as accurately as the offline test pass."""
    import re
    done = train("--mode", mode, "--epochs", "2", "--hidden", "64", "--serve", "200",
                 "--clients", "3", "--min-accuracy", "0.5")
    assert done.returncode == 0, done.stdout + done.stderr
    served = re.search(r"served (\d+) requests .* (\d+) batches \((\d+) sampled on the CPU, "
                       r"(\d+) on the GPU.*served accuracy ([0-9.]+)", done.stdout)
    assert served, done.stdout
    requests, batches, on_cpu, on_gpu, accuracy = served.groups()
    assert int(requests) == 200 and int(on_cpu) + int(on_gpu) == int(batches) >= 1
    assert mode != "CPU" or int(on_gpu) == 0
    assert abs(float(accuracy) - final_accuracy(done.stdout)) < 0.15


@pytest.mark.parametrize("mode", MODES)
def test_measures_the_runtime_under_open_loop_load(mode):
    """--load-rates: each configuration's runtime under Poisson arrivals, no Python. At a
    rate far below capacity every request is answered, none refused, and each configuration
    samples only where it may (gpu2, with two GPUs: on both)."""
    import re
    configs = "cpu" if mode == "CPU" else "cpu,gpu,dispatch"
    if mode != "CPU" and torch.cuda.device_count() >= 2:
        configs += ",gpu2"
    # On a GPU the threads' waits yield (CUDA's device flags, set before the first use).
    # Batches of at most 16 seeds: requests (up to 256 ids, 1 in 64 over 16) are cut to fit.
    done = train("--mode", mode, "--epochs", "0", "--hidden", "32", "--load-rates", "100,200",
                 "--load-seconds", "1", "--load-configs", configs, "--cpu-samplers", "2",
                 "--gpu-streams", "2", "--max-batch", "16", "--cuda-sync", "yield")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = re.findall(r"^(cpu|gpu2|gpu|dispatch)\s+(\d+)\s+([0-9.]+)\s+(\d+)\s+(\d+)\s+"
                      r"([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+(\d+)\s+(\d+)\s+[0-9.]+\s+(\d+)\s+"
                      r"(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)$",
                      done.stdout, re.M)
    assert len(rows) == 2 * len(configs.split(",")), done.stdout
    for (config, rate, per_s, refused, failed, p50, p99, _, on_cpu, on_gpu, _, _, wait_ms,
         prepare_ms, model_side_ms, late_ms, late_p99_ms) in rows:
        assert int(refused) == 0 and int(failed) == 0, done.stdout
        # Poisson counts over one second: a rate of 100 sends 100 +- 10 on average.
        assert 0.6 * int(rate) < float(per_s) < 1.4 * int(rate), done.stdout
        assert 0 < float(p50) <= float(p99) < 5000, done.stdout
        assert int(on_cpu) + int(on_gpu) >= 1
        assert config != "cpu" or int(on_gpu) == 0
        assert config not in ("gpu", "gpu2") or int(on_cpu) == 0
        # A batch's parts: each sampled and gathered in some time, and no part longer than
        # a request's whole latency could allow.
        assert float(prepare_ms) > 0, done.stdout
        assert max(float(wait_ms), float(prepare_ms), float(model_side_ms)) < 5000, done.stdout
        # (a mean may exceed the 99th percentile: one stall among 200 requests)
        assert 0 <= float(late_ms) < 5000 and 0 <= float(late_p99_ms) < 5000, done.stdout
    for config in configs.split(","):
        # The highest rate whose every lower rate also held p99 <= 30 ms (all were answered
        # above); any number had passed, 0 too.
        best = 0
        for row in sorted((r for r in rows if r[0] == config), key=lambda r: int(r[1])):
            if float(row[6]) > 30:
                break
            best = int(row[1])
        assert f"highest rate with p99 <= 30 ms, {config}: {best} requests/s" in done.stdout, \
            done.stdout


def test_low_accuracy_is_a_failure():
    done = train("--epochs", "1", "--nodes", "2000", "--min-accuracy", "1.01")
    assert done.returncode == 1 and "below --min-accuracy" in done.stderr
    # A serve-only run is scored by its answers (its 0 from no training had failed any
    # --min-accuracy: a probe).
    done = train("--epochs", "0", "--nodes", "2000", "--serve", "50", "--min-accuracy", "0.01")
    assert done.returncode == 0 and "served accuracy" in done.stdout, done.stderr


def test_a_diverged_run_stops_naming_the_learning_rate():
    """A NaN loss trained on to exit 0 with a normal-looking accuracy (a probe)."""
    done = train("--epochs", "3", "--nodes", "2000", "--lr", "1e30")
    assert done.returncode == 2 and "training diverged (--lr 1e+30" in done.stderr, done.stderr
    assert "epoch 3:" not in done.stdout


def copied(saved_graph, tmp_path):
    broken = tmp_path / "graph"
    for part in ("topology", "features", "labels"):
        (broken / part).mkdir(parents=True)
        for file in (saved_graph / part).iterdir():
            (broken / part / file.name).write_bytes(file.read_bytes())
    return broken


def test_a_save_cut_short_over_an_older_graph_is_refused(saved_graph, tmp_path, monkeypatch):
    """A Ctrl-C after the new topology was written had left it beside the older save's rows
    and labels, loaded together when the sizes agreed: the labels' record is removed first
    and written last, so such a folder is refused until a save completes."""
    spec = importlib.util.spec_from_file_location("save_graph",
                                                  REPO / "examples" / "cpp" / "save_graph.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    broken = copied(saved_graph, tmp_path)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(module.qv.Feature, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        module.save(module.argparse.Namespace(directory=str(broken), size="tiny", seed=1,
                                              batch_size=1024))
    done = train("--data", broken, "--epochs", "1")
    assert done.returncode == 2 and "labels" in done.stderr, done.stderr


def test_truncated_file_is_an_error(saved_graph, tmp_path):
    broken = copied(saved_graph, tmp_path)
    rows = broken / "features" / "rows.bin"
    rows.write_bytes(rows.read_bytes()[:-4])
    done = train("--data", broken)
    assert done.returncode == 2 and "truncated" in done.stderr, done.stderr
    # A missing array file is missing (it had "held -1 bytes"), a folder in its place is
    # named in our words (std::filesystem's had come).
    y = copied(saved_graph, tmp_path / "second") / "labels" / "y.bin"
    y.unlink()
    done = train("--data", y.parents[1])
    assert done.returncode == 2 and f"{y} is missing: " in done.stderr, done.stderr
    y.mkdir()
    done = train("--data", y.parents[1])
    assert done.returncode == 2 and f"{y} is not a regular file" in done.stderr, done.stderr


@pytest.mark.parametrize("damage", ["cut", "overflow", "unreadable entry"])
def test_a_damaged_record_is_an_error(saved_graph, tmp_path, damage):
    """A record cut short still holds its first entries whole, which the program read as
    the whole save; an nbytes past int64 and an entry that does not parse are named too."""
    broken = copied(saved_graph, tmp_path)
    record = broken / "topology" / "csr.json"
    text = record.read_text()
    if damage == "cut":
        record.write_text(text[:text.index('"indices"')])
        words = "is not a whole record"
    elif damage == "overflow":
        meta = json.loads(text)
        meta["arrays"]["indices"]["nbytes"] = 99999999999999999999
        record.write_text(json.dumps(meta))
        words = "past any file's size"
    else:
        meta = json.loads(text)
        meta["arrays"]["indices"]["shape"] = [-1]
        record.write_text(json.dumps(meta))
        words = "the shape [-1]: the metadata is corrupt"
    done = train("--data", broken)
    assert done.returncode == 2 and words in done.stderr, done.stderr


@pytest.mark.parametrize("form", ["long note", "spaces", "deep", "name with - and .",
                                  "text after", "fraction"])
def test_records_are_read_by_a_parser_that_cannot_overflow(saved_graph, tmp_path, form):
    """The record was matched by std::regex, which recursed once per character: a valid
    save with a long note (or a long run of spaces) crashed the program (exit 139). Names
    with '-' and '.' (which Python allows) were called corrupt."""
    broken = copied(saved_graph, tmp_path)
    labels = broken / "labels"
    record = labels / "labels.json"
    text = record.read_text()
    good = True
    if form == "long note":
        arrays, meta = qv.load_arrays(labels, "labels")
        qv.save_arrays(labels, "labels", dict(arrays), **meta, note="x" * 300000)
    elif form == "spaces":
        record.write_text("{" + " " * 300000 + text[1:])
    elif form == "deep":
        record.write_text(text[:-1] + ', "m": ' + "[" * 200 + "]" * 200 + "}")
        good, words = False, "nests deeper than the format ever does"
    elif form == "name with - and .":
        arrays, meta = qv.load_arrays(labels, "labels")
        qv.save_arrays(labels, "labels", {**arrays, "val-idx.v2": arrays["test_idx"]}, **meta)
    elif form == "text after":
        record.write_text(text + " x")
        good, words = False, "has text after its closing brace"
    else:
        meta = json.loads(text)
        record.write_text(json.dumps(meta).replace('"nbytes": 16000', '"nbytes": 16000.0', 1))
        good, words = False, "something other than an integer"
    done = train("--data", broken, "--epochs", "1")
    if good:
        assert done.returncode == 0, done.stderr
    else:
        assert done.returncode == 2 and words in done.stderr, done.stderr


@pytest.mark.parametrize("damage", ["3-D rows", "float16 rows", "negative label",
                                    "train id out of range", "no train ids", "order repeats",
                                    "float labels", "2-D train ids", "no test ids",
                                    "no features", "int32 indptr", "a label past the classes"])
def test_arrays_the_model_cannot_use_are_named(saved_graph, tmp_path, damage):
    broken = copied(saved_graph, tmp_path)
    part, stem = ("features", "feature") if any(w in damage for w in ("rows", "order",
                                                                      "features")) else \
        ("topology", "csr") if "indptr" in damage else ("labels", "labels")
    arrays, meta = qv.load_arrays(broken / part, stem)
    arrays = {k: v.clone() for k, v in arrays.items()}
    if damage == "3-D rows":
        arrays["rows"] = arrays["rows"].view(arrays["rows"].shape[0], 1, -1)
        words = "rows must be [nodes, features]"
    elif damage == "float16 rows":
        arrays["rows"] = arrays["rows"].half()
        words = "rows must be float32 (the model's dtype), got torch.float16"
    elif damage == "negative label":
        arrays["y"][arrays["test_idx"][0]] = -1
        words = "y must hold class ids in [0, 1048576), got -1"
    elif damage == "a label past the classes":  # (it sized the model: an allocator's error)
        arrays["y"][0] = 10**12
        words = "y must hold class ids in [0, 1048576)"
    elif damage == "float labels":  # (cut to integers without a word)
        arrays["y"] = arrays["y"].double() + 0.7
        words = "labels: y must be 1-D integer ids, got torch.float64"
    elif damage == "2-D train ids":  # (torch's "index out of range in self")
        arrays["train_idx"] = arrays["train_idx"][:80].view(40, 2)
        words = "labels: train_idx must be 1-D integer ids, got torch.int64 of shape [40, 2]"
    elif damage == "no test ids":  # (a test accuracy of 0 was printed, exit 0)
        arrays["test_idx"] = arrays["test_idx"][:0]
        words = "labels: test_idx is empty"
    elif damage == "no features":  # (torch's "from is out of bounds for float")
        arrays["rows"] = arrays["rows"][:, :0]
        words = "rows must be [nodes, features] with at least one feature"
    elif damage == "int32 indptr":  # (the op's error, naming no file, after the first line)
        arrays["indptr"] = arrays["indptr"].int()
        words = "topology: indptr must be int64, got torch.int32"
    elif damage == "train id out of range":
        arrays["train_idx"][0] = arrays["y"].numel()
        words = "train_idx holds node ids outside"
    elif damage == "no train ids":
        arrays["train_idx"] = arrays["train_idx"][:0]
        words = "train_idx is empty"
    else:
        order = torch.arange(arrays["rows"].shape[0])
        order[1] = 0
        arrays["order"] = order
        words = "order must hold each of the"
    qv.save_arrays(broken / part, stem, arrays, **meta)
    done = train("--data", broken, "--epochs", "1")
    assert done.returncode == 2 and words in done.stderr, done.stderr


def test_a_shape_that_disagrees_with_the_bytes_is_an_error_and_the_file_left_alone(
        saved_graph, tmp_path):
    broken = copied(saved_graph, tmp_path)
    record = broken / "features" / "feature.json"
    meta = json.loads(record.read_text())
    meta["arrays"]["rows"]["shape"][0] *= 2  # nbytes unchanged
    record.write_text(json.dumps(meta))
    size = (broken / "features" / "rows.bin").stat().st_size
    done = train("--data", broken)
    assert done.returncode == 2 and "the metadata is corrupt" in done.stderr, done.stderr
    assert (broken / "features" / "rows.bin").stat().st_size == size


def test_a_label_past_the_records_classes_is_refused(saved_graph, tmp_path):
    """One corrupt label (50,000 in a graph of 4 classes) had made a model of 50,001 classes,
    trained with exit status 0 (a probe); the record's num_classes bounds the labels."""
    broken = copied(saved_graph, tmp_path)
    arrays, _ = qv.load_arrays(broken / "labels", "labels")
    arrays = {name: array.clone() for name, array in arrays.items()}
    classes = int(arrays["y"].max()) + 1
    arrays["y"][int(arrays["train_idx"][0])] = 50_000
    qv.save_arrays(broken / "labels", "labels", arrays, num_classes=classes)
    done = train("--data", broken, "--epochs", 1)
    assert done.returncode == 2 and (f"y holds class id 50000 but the record says num_classes "
                                     f"{classes}") in done.stderr, done.stdout + done.stderr
    # Other entries of any JSON beside it are read past (a seed past int64 among them); a
    # num_classes that is no whole number is named.
    arrays["y"][int(arrays["train_idx"][0])] = 0
    for num_classes, words in ((classes, None), (4.0, "num_classes is not a whole number"),
                               (0, "num_classes is 0, not in [1, ")):
        qv.save_arrays(broken / "labels", "labels", arrays, num_classes=num_classes,
                       seed=2**64 - 1, note={"a": [1.5]})
        done = train("--data", broken, "--epochs", 1, "--min-accuracy", 0)
        if words is None:
            assert done.returncode == 0, done.stdout + done.stderr
        else:
            assert done.returncode == 2 and words in done.stderr, done.stdout + done.stderr


def test_bad_arguments_are_errors(tmp_path):
    done = train("--max-wait-ms", "1e6")
    assert done.returncode == 2 and "--max-wait-ms must be in [0, 10000], got 1e+06" in \
        done.stderr, done.stderr
    done = train("--data", tmp_path / "nothing")
    assert done.returncode == 2 and "does not exist" in done.stderr
    done = train("--mode", "TPU")
    assert done.returncode == 2 and "--mode must be GPU, UVA or CPU" in done.stderr
    done = train("--fanouts")
    assert done.returncode == 2 and "needs a value" in done.stderr
    done = train("--prefetch", "-1")
    assert done.returncode == 2 and "--prefetch must be in [0, 64], got -1" in done.stderr
    done = train("--load-rates", "100,-5")
    assert done.returncode == 2 and "--load-rates must be positive, got -5" in done.stderr
    done = train("--load-configs", "cpu,tpu")
    assert done.returncode == 2 and "--load-configs takes cpu, gpu, dispatch and gpu2, got tpu" in done.stderr
    done = train("--cuda-sync", "sleep")
    assert done.returncode == 2 and "--cuda-sync takes auto, spin, yield or block, got sleep" in done.stderr
    # Numbers are read whole: 1e4 is not the batch size 1, '' is not a fanout of 0.
    for option, value in (("--batch-size", "1e4"), ("--epochs", "3x")):
        done = train(option, value)
        assert done.returncode == 2 and f"{option} takes a whole number, got '{value}'" in done.stderr
    done = train("--lr", "0.0o1")
    assert done.returncode == 2 and "--lr takes a number, got '0.0o1'" in done.stderr
    # Lists have no empty item (a trailing comma was dropped), numbers are finite (an inf
    # load ran without end), and an unknown flag is named as one.
    for option, value in (("--fanouts", "15,,5"), ("--fanouts", "15,10,"),
                          ("--load-rates", "10,"), ("--load-configs", "")):
        done = train(option, value)
        assert done.returncode == 2 and (f"{option} takes a comma-separated list with no empty "
                                         f"item, got '{value}'") in done.stderr
    for option in ("--load-seconds", "--min-accuracy"):
        done = train(option, "inf")
        assert done.returncode == 2 and f"{option} takes a finite number, got 'inf'" in done.stderr
    done = train("--verbose")
    assert done.returncode == 2 and "unknown option --verbose" in done.stderr
    # Each refused before anything is built (found by a probe): an empty --data trained on
    # the synthetic graph, a second value won silently, --lr 0 trained on, sizes reached
    # torch's allocator, and --min-accuracy failed a run that scored nothing.
    for argv, words in ((["--data", ""], "--data takes a directory, got ''"),
                        (["--epochs", "1", "--epochs", "2"], "option --epochs is given twice"),
                        (["--lr", "0"], "--lr must be a finite number > 0, got 0"),
                        (["--hidden", "100000000000"], "must be at most 8192"),
                        (["--classes", "1000000000000"], "must be at most 8192, 1048576"),
                        # each bounded alone, their product had reached the allocator
                        (["--nodes", "100", "--hidden", "8192", "--classes", "1048576"],
                         "a layer of the model would hold 8589934592 weights (--features 32, "
                         "--hidden 8192 and --classes 1048576, 3 layers), more than 2**28"),
                        # one check for six options had named none, nor the value
                        (["--max-wait-ms", "-1"], "--max-wait-ms must be in [0, 10000], got -1"),
                        (["--cpu-samplers", "100000"],
                         "--cpu-samplers must be in [1, 1024] (a thread each), got 100000"),
                        (["--nodes", "1000000000000", "--epochs", "0"],
                         "GiB for the synthetic graph; this machine has"),
                        (["--epochs", "0", "--min-accuracy", "0.5"], "nothing is scored"),
                        (["--load-configs", "cpu,cpu"], "--load-configs names cpu twice"),
                        # (7 had read as on)
                        (["--split", "7"], "--split takes 0 or 1, got '7'"),
                        (["--capture", "-1"], "--capture takes 0 or 1, got '-1'")):
        done = train(*argv)
        assert done.returncode == 2 and words in done.stderr, (argv, done.stderr)
    # A rate of which no request was answered (a window too short to send one) is no rate
    # met: it was reported as the highest one within the objective.
    done = train("--nodes", "200", "--epochs", "0", "--load-rates", "50", "--load-configs", "cpu",
                 "--load-seconds", "0.001")
    assert done.returncode == 0 and "cpu: 0 requests/s" in done.stdout, done.stdout
    for option, value, words in (("--eval-nodes", "0", "--eval-nodes must be >= 1, got 0"),
                                 ("--hidden", "0", "--hidden, --nodes"),
                                 ("--degree", "-1", "and --degree must be"),
                                 ("--nodes", "1", "--nodes (half of them train)"),
                                 ("--clients", "2000", "--clients in [1, 1024]"),
                                 ("--fanouts", "5,-2", "-1 for every neighbor, got -2")):
        done = train(option, value)
        assert done.returncode == 2 and words in done.stderr, (option, done.stderr)
    done = train("--epochs", "0", "--load-rates", "100000000", "--load-seconds", "1",
                 "--load-configs", "cpu")
    assert done.returncode == 2 and "at most 1e7, got 100000000 x 1" in done.stderr
    if not torch.cuda.is_available():
        done = train("--epochs", "0", "--load-rates", "10", "--load-configs", "gpu")
        assert done.returncode == 2 and "samples on a GPU, and this run has none" in done.stderr
        # Refused before the graph and the training (it came after both, and a table header).
        done = train("--epochs", "50", "--load-rates", "10", timeout=60)
        assert done.returncode == 2 and "samples on a GPU, and this run has none" in done.stderr
        assert "epoch" not in done.stdout, done.stdout
    if torch.cuda.device_count() == 1:
        done = train("--mode", "GPU", "--epochs", "0", "--load-rates", "10", "--load-configs",
                     "gpu2")
        assert done.returncode == 2 and "gpu2 needs two GPUs" in done.stderr
