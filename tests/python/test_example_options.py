"""The examples refuse bad options when they parse them (argparse errors naming the option
and the value), before a graph is built or a file written, rather than trimming a count
silently or crashing after an epoch; the splits they make from the data are refused, when
one comes out empty, before the first epoch."""
import os
import re

import pytest
import torch
from conftest import load_example, run_script_cases
from torch_quiver_ops._device import gpus_usable

pytest.importorskip("torch_geometric")


@pytest.fixture(scope="module")
def hetero():
    return load_example("train_hetero")


@pytest.fixture(scope="module")
def link():
    return load_example("link_prediction")


@pytest.fixture(scope="module")
def temporal():
    return load_example("temporal_link_prediction")


@pytest.fixture(scope="module")
def export_sage():
    return load_example("export_sage")


def refused(capsys, parse, argv, *expected):
    """parse(argv) exits through argparse; its message names each of ``expected``."""
    with pytest.raises(SystemExit) as exit_info:
        parse(argv)
    assert exit_info.value.code == 2  # argparse's usage error
    err = capsys.readouterr().err
    for text in expected:
        assert text in err, err
    return err


# Options every training example checks the same way: (argv, texts the message names).
COMMON = [
    (["--epochs", "-1"], ["--epochs", "-1"]),
    (["--batch-size", "0"], ["--batch-size", "0"]),
    (["--batch-size", "-5"], ["--batch-size", "-5"]),
    (["--hidden", "0"], ["--hidden", "0"]),
    # (the first weight matrix reached torch's allocator, whose error names no option)
    (["--hidden", "1000000000000"], ["--hidden must be at most 8,192, got 1000000000000"]),
    (["--lr", "0"], ["--lr", "0.0"]),
    (["--lr", "-0.1"], ["--lr", "-0.1"]),
    (["--lr", "nan"], ["--lr", "nan"]),
    (["--num-neighbors", "15,,10"], ["--num-neighbors", "'15,,10'"]),
    (["--num-neighbors", ""], ["--num-neighbors", "''"]),
    (["--num-neighbors", "a,5"], ["--num-neighbors", "'a,5'"]),
    (["--num-neighbors", "10,-2"], ["--num-neighbors", "10,-2"]),
]
# Examples with a feature cache: its size read on CPU-only machines too.
CACHED = [
    (["--cache-size", "bogus"], ["cannot read --cache-size='bogus'"]),
    (["--cache-size", "101%"], ["--cache-size: a share must be in [0%, 100%], got '101%'"]),
]
HETERO = COMMON + CACHED + [
    (["--train-papers", "0"], ["--train-papers", "0"]),
    (["--train-papers", "-3"], ["--train-papers", "-3"]),
    (["--eval-papers", "0"], ["--eval-papers", "0"]),
    (["--eval-papers", "-1"], ["--eval-papers", "-1"]),
    (["--scale", "0"], ["--scale", "0.0"]),
    (["--scale", "-0.5"], ["--scale", "-0.5"]),
    (["--scale", "nan"], ["--scale", "nan"]),
    (["--scale", "inf"], ["--scale", "inf"]),
]
LINK = COMMON + CACHED + [
    (["--train-edges", "0"], ["--train-edges", "0"]),
    (["--train-edges", "-10"], ["--train-edges", "-10"]),
    (["--held-out", "0"], ["--held-out", "0.0"]),
    (["--held-out", "1"], ["--held-out", "1.0"]),
    (["--held-out", "-0.1"], ["--held-out", "-0.1"]),
    (["--held-out", "1.5"], ["--held-out", "1.5"]),
    # (a traceback when the first batch drew its negatives; from a probe)
    (["--batch-size", "1000000000000"], ["--batch-size 1,000,000,000,000 draws"]),
]
TEMPORAL = COMMON + [
    (["--train-edges", "0"], ["--train-edges", "0"]),
    (["--train-edges", "-10"], ["--train-edges", "-10"]),
    (["--eval-edges", "0"], ["--eval-edges", "0"]),
    (["--eval-edges", "-1"], ["--eval-edges", "-1"]),
    (["--mrr-negatives", "0"], ["--mrr-negatives", "0"]),
    (["--train-until", "-1"], ["--train-until -1"]),
    (["--train-until", "0"], ["--train-until 0"]),  # nothing is older than time 0
    (["--train-until", "900"], ["--train-until 900", "--test-from 900"]),
    (["--train-until", "950"], ["--train-until 950", "--test-from 900"]),
    (["--test-from", "1000"], ["--test-from 1000"]),  # times end at 999
    (["--test-from", "5000"], ["--test-from 5000"]),
    # (a traceback after the training epochs, when the test drew its negatives)
    (["--mrr-negatives", "4194303"], ["--mrr-negatives 4,194,303 draws", "GiB"]),
    (["--batch-size", "1000000000000"], ["--batch-size 1,000,000,000,000 draws"]),
]


@pytest.mark.parametrize("argv,expected", HETERO, ids=lambda v: " ".join(v))
def test_train_hetero_refuses(hetero, capsys, argv, expected):
    refused(capsys, hetero.parse_args, argv, *expected)


@pytest.mark.parametrize("argv,expected", LINK, ids=lambda v: " ".join(v))
def test_link_prediction_refuses(link, capsys, argv, expected):
    refused(capsys, link.parse_args, argv, *expected)


@pytest.mark.parametrize("argv,expected", TEMPORAL, ids=lambda v: " ".join(v))
def test_temporal_link_prediction_refuses(temporal, capsys, argv, expected):
    refused(capsys, temporal.parse_args, argv, *expected)


@pytest.mark.parametrize("name", ["hetero", "link", "temporal"])
def test_report_paths_that_cannot_be_written_are_refused(request, capsys, tmp_path, name):
    parse = request.getfixturevalue(name).parse_args
    missing = tmp_path / "no-such-folder" / "report.json"
    refused(capsys, parse, ["--report", str(missing)], "--report", str(missing),
            "does not exist")
    refused(capsys, parse, ["--report", str(tmp_path)], "--report", str(tmp_path),
            "is a folder")
    a_file = tmp_path / "a-file"
    a_file.write_text("")  # (it had said the folder a-file did not exist)
    refused(capsys, parse, ["--report", str(a_file / "report.json")], "--report",
            f"{a_file} is a file, not a folder")
    assert parse(["--report", str(tmp_path / "report.json")]).report == str(
        tmp_path / "report.json")


@pytest.mark.parametrize("name", ["link", "temporal", "export_sage", "train_sage"])
def test_a_preset_past_host_memory_is_refused_naming_the_ones_that_fit(
        request, capsys, monkeypatch, tmp_path, name):
    """--size papers on a host without the memory to draw it ended in a traceback from the
    generator, whose fix named settings no option gives (a probe)."""
    from torch_quiver_ops import preflight
    module = (load_example("train_sage") if name == "train_sage"
              else request.getfixturevalue(name))
    monkeypatch.setattr(preflight, "available_memory", lambda: 2 << 30)
    argv = ["--size", "papers", "--device", "cpu"]
    argv = [str(tmp_path / "out"), *argv] if name == "export_sage" else argv
    refused(capsys, module.parse_args, argv,
            "--size papers needs about", "GiB of host memory to draw its graph, but 2 GiB is "
            "available: give a smaller preset (tiny, small, medium)")


def umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_reports_are_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """A full disk as a run ended left half a report and a traceback (a probe): the report
    is written beside its path and renamed over it, and an error names the path."""
    import json
    option_checks = load_example("option_checks")
    path = tmp_path / "report.json"
    path.write_text('{"earlier": 1}')
    option_checks.write_report(str(path), {"history": [1, 2]})
    assert json.loads(path.read_text()) == {"history": [1, 2]}

    def disk_fills(result, f, **_):
        f.write('{"history": [')
        f.flush()
        raise OSError(28, "No space left on device")
    with monkeypatch.context() as patch:
        patch.setattr(json, "dump", disk_fills)
        with pytest.raises(OSError, match=re.escape(
                f"the report could not be written (No space left on device): '{path}'")):
            option_checks.write_report(str(path), {"history": [1, 2, 3]})
    assert json.loads(path.read_text()) == {"history": [1, 2]}  # the last one, whole
    path.chmod(0o640)  # a report's mode is kept; a new one's is open()'s (mkstemp's: 0600)
    option_checks.write_report(str(path), {"history": [3]})
    assert path.stat().st_mode & 0o777 == 0o640
    option_checks.write_report(str(tmp_path / "new.json"), {"history": [3]})
    assert (tmp_path / "new.json").stat().st_mode & 0o777 == 0o666 & ~umask()
    (tmp_path / "new.json").unlink()
    assert os.listdir(tmp_path) == ["report.json"]  # nothing staged left beside it
    if os.path.exists("/dev/full"):  # a device is written in place (not renamed over)
        with pytest.raises(OSError, match=re.escape("could not be written (No space left on "
                                                    "device): '/dev/full'")):
            option_checks.write_report("/dev/full", {"history": []})
        assert not os.path.isfile("/dev/full")


def test_defaults_and_valid_values_parse(hetero, link, temporal):
    args = hetero.parse_args([])
    assert (args.scale, args.train_papers, args.eval_papers) == (1.0, None, 20_000)
    args = hetero.parse_args(["--scale", "0.01", "--train-papers", "1", "--eval-papers", "1",
                              "--num-neighbors=-1,0", "--epochs", "0"])
    assert (args.train_papers, args.num_neighbors, args.epochs) == (1, [-1, 0], 0)
    args = link.parse_args([])
    assert (args.held_out, args.train_edges, args.num_neighbors) == (0.05, None, [10, 5])
    assert link.parse_args(["--held-out", "0.5", "--train-edges", "1"]).held_out == 0.5
    args = temporal.parse_args([])
    assert (args.train_until, args.test_from, args.train_edges, args.eval_edges,
            args.mrr_negatives) == (800, 900, None, 20_000, 20)
    args = temporal.parse_args(["--train-until", "1", "--test-from", "999",
                                "--mrr-negatives", "1", "--eval-edges", "1"])
    assert (args.train_until, args.test_from) == (1, 999)
    for module in (link, temporal):  # each refusal's bound lets its least value through
        args = module.parse_args(["--epochs", "0", "--batch-size", "1", "--hidden", "8192",
                                  "--train-edges", "1"])
        assert (args.epochs, args.batch_size, args.hidden, args.train_edges) == (0, 1, 8192, 1)


def test_export_sage_checks_its_options_before_writing(export_sage, capsys, tmp_path):
    out = tmp_path / "sage"
    args = export_sage.parse_args([str(out)])
    assert (args.fanouts, args.hidden) == ([10, 5], 64)
    assert export_sage.parse_args([str(out), "--fanouts=-1,0"]).fanouts == [-1, 0]
    # auto, as every other example takes it (it had been refused; a probe)
    assert export_sage.parse_args([str(out), "--device", "auto"]).device == (
        "cuda" if gpus_usable() else "cpu")
    for argv, expected in [(["--fanouts", "10,,5"], ["--fanouts", "'10,,5'"]),
                           (["--fanouts", "x"], ["--fanouts", "'x'"]),
                           (["--fanouts", "10,-3"], ["--fanouts", "10,-3"]),
                           # A probe: passed the checks, wrote the graph, then a cast error.
                           (["--fanouts", "99999999999999999999"],
                            ["--fanouts[0] = 99999999999999999999 does not fit in 64 bits"]),
                           (["--hidden", "0"], ["--hidden", "0"]),
                           (["--hidden", "70000"], ["--hidden must be at most 8,192"]),
                           (["--device", "foo"], ["--device", "'foo'"]),
                           (["--device", "cuda:99"], ["--device", "cuda:99"])]:
        refused(capsys, export_sage.main, [str(out)] + argv, *expected)
    if not torch.cuda.is_available():  # refused before the graph is written
        refused(capsys, export_sage.main, [str(out), "--device", "cuda"], "--device",
                "no usable GPU")
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    refused(capsys, export_sage.main, [str(a_file)], str(a_file), "not a directory")
    refused(capsys, export_sage.main, [str(a_file / "sage")], str(a_file), "not a directory")
    # Outputs that could not be written were found after the training and the compile, a
    # minute in, as tracebacks (a probe); "" wrote into the current directory.
    outputs = tmp_path / "outputs"
    (outputs / "c" / "model.pt2").mkdir(parents=True)
    refused(capsys, export_sage.main, [str(outputs / "c")], "model.pt2 is a folder")
    (outputs / "d" / "graph").mkdir(parents=True)
    (outputs / "d" / "graph" / "topology").write_text("")
    refused(capsys, export_sage.main, [str(outputs / "d")], "topology exists and is not a "
                                                            "directory")
    refused(capsys, export_sage.main, ["/proc/quiver-sage"], "nothing can be written in /proc")
    refused(capsys, export_sage.main, [""], "directory must not be empty")
    assert not out.exists()  # main refused before writing anything
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "outputs"]
    assert sorted(str(p.relative_to(outputs)) for p in outputs.rglob("*")) == [
        "c", "c/model.pt2", "d", "d/graph", "d/graph/topology"]  # only what the test made


def test_link_prediction_refuses_an_empty_split_before_training(link, capsys):
    # The tiny graph's 11,502 undirected edges: 0.0001 of them is one edge, none validates.
    with pytest.raises(SystemExit, match=r"--held-out 0\.0001 .* no validation edge"):
        link.main(["--size", "tiny", "--held-out", "0.0001", "--device", "cpu"])
    assert "epoch" not in capsys.readouterr().out


def test_temporal_refuses_an_empty_split_before_training(temporal, capsys, monkeypatch):
    def all_at_time_5(graph, gen):  # every edge at time 5: nothing validates or tests
        return graph.edge_index, torch.full((graph.edge_index.size(1),), 5)

    monkeypatch.setattr(temporal, "timed_edges", all_at_time_5)
    with pytest.raises(SystemExit, match="--train-until 800 and --test-from 900 leave no "
                                         "validation edge"):
        temporal.main(["--size", "tiny", "--device", "cpu"])
    assert "epoch" not in capsys.readouterr().out


def test_a_diverged_training_run_stops_with_an_error(link, capsys):
    """A learning rate past reason trained to a NaN loss and printed NaN AUCs every epoch,
    then exited 0: the first such epoch now ends the run with one line."""
    with pytest.raises(SystemExit, match=r"the loss is nan after epoch 1: training diverged "
                                         r"\(--lr 1e\+30"):
        link.main(["--size", "tiny", "--device", "cpu", "--epochs", "3", "--lr", "1e30"])
    out = capsys.readouterr().out
    assert "epoch 1:" in out and "epoch 2:" not in out


def test_train_hetero_refuses_a_graph_without_test_papers(hetero, capsys):
    refused(capsys, hetero.parse_args, ["--scale", "1e-6", "--device", "cpu"],
            "--scale 1e-06 leaves 1 papers and no validation or test paper")


def test_train_hetero_refuses_a_scale_past_host_memory_before_building(hetero, capsys):
    # (1e300 overflowed a count inside torch.randint; 1e6 asked the allocator for 5 PB)
    for scale in ("1e300", "1e6"):
        refused(capsys, hetero.parse_args, ["--scale", scale, "--device", "cpu"],
                f"--scale {float(scale)} needs about", "GiB of host memory")


def test_temporal_docstring_states_the_chance_mrr_it_prints(temporal):
    assert f"{temporal.chance_mrr(20):.2f}" == "0.17"
    assert "0.17 for 20" in " ".join(temporal.__doc__.split())


def test_train_hetero_scores_the_same_papers_every_epoch(hetero, monkeypatch):
    """The validation and test subsets (--eval-papers below the splits' sizes) are drawn
    once, not redrawn each epoch."""
    scored = []

    class Recording(hetero.NeighborLoader):
        def __init__(self, data, fanouts, input_nodes=None, batch_size=1, **kwargs):
            if batch_size == 4096:  # the scoring loaders (the first fixes lazy sizes)
                scored.append(input_nodes[1].clone())
            super().__init__(data, fanouts, input_nodes=input_nodes, batch_size=batch_size,
                             **kwargs)

    monkeypatch.setattr(hetero, "NeighborLoader", Recording)
    epochs = 3
    hetero.main(["--scale", "0.001", "--epochs", str(epochs), "--device", "cpu",
                 "--batch-size", "512", "--eval-papers", "5", "--num-neighbors", "3,2",
                 "--hidden", "16", "--train-papers", "64"])
    assert len(scored) == 1 + 2 * epochs
    val, test = scored[1::2], scored[2::2]
    assert all(v.numel() == 5 and torch.equal(v, val[0]) for v in val), val
    assert all(t.numel() == 5 and torch.equal(t, test[0]) for t in test), test
    assert not torch.equal(val[0], test[0])


@pytest.mark.parametrize("example", ["hetero", "link", "temporal"])
def test_training_examples_refuse_a_device_they_cannot_use(example, request, capsys):
    """A CUDA device on a machine without one, or a made-up name, ended in a traceback
    (after building the graph, for train_hetero.py at its default scale)."""
    module = request.getfixturevalue(example)
    refused(capsys, module.parse_args, ["--device", "foo"], "--device", "'foo'")
    refused(capsys, module.parse_args, ["--device", "cuda:99"], "--device cuda:99")


def test_the_pyg_drop_in_example_checks_its_sizes_before_the_graph():
    from pathlib import Path
    script = Path(__file__).resolve().parents[2] / "examples" / "pyg_neighbor_loader.py"
    cases = []
    for argv, words in ((["--batch-size", "0"], "--batch-size must be >= 1, got 0"),
                        (["--num-workers", "-1"], "--num-workers must be >= 0, got -1"),
                        (["--epochs", "-1"], "--epochs must be >= 0, got -1"),
                        # (a negative seed failed in torch.manual_seed; a worker a process)
                        (["--seed", "-1"], "--seed: must be in [0, 2**63), got -1"),
                        (["--num-workers", "100000"], "--num-workers must be at most 256"),
                        # past sys.maxsize torch's sampler raised from islice (a probe)
                        (["--batch-size", str(10**20)], "--batch-size must be at most")):
        cases.append((argv, words))
    for (argv, words), done in zip(cases, run_script_cases([(script, argv) for argv, _ in cases],
                                                           timeout=120)):
        assert done.returncode == 2 and words in done.stderr, (argv, done.stderr[-2000:])


def test_a_file_that_cannot_be_written_ends_an_example_in_one_line(capsys):
    """A folder where export_sage.py writes a file (graph/features/feature.json) ended in a
    traceback after some files were written (a probe): one line, status 1."""
    option_checks = load_example("option_checks")

    def main():
        raise IsADirectoryError(21, "Is a directory", "graph/features/feature.json")
    with pytest.raises(SystemExit) as exit_info:
        option_checks.run_main(main)
    assert "error: [Errno 21] Is a directory: 'graph/features/feature.json'" in str(
        exit_info.value.code)

    def times_out():  # an OSError of no file keeps its traceback
        raise TimeoutError("the server did not answer")
    with pytest.raises(TimeoutError):
        option_checks.run_main(times_out)
