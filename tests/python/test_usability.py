"""What a newcomer meets first: help texts that describe each option, errors that say what
to pass, preflight checks that name the limit, the size and the fix, and logs without
progress bars when the output is not a terminal."""
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torch_quiver_ops as qv
from torch_quiver_ops import preflight
from conftest import run_script_cases

REPO = Path(__file__).resolve().parents[2]


def test_train_example_help_describes_every_option():
    result = subprocess.run([sys.executable, str(REPO / "examples" / "train_sage.py"), "--help"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    for option, words in (("--size", "nodes"), ("--cache-size", "GPU feature cache"),
                          ("--prefetch", "batches built ahead"), ("--progress", "terminal")):
        assert option in result.stdout and words in result.stdout, (option, result.stdout)


def test_train_example_refuses_bad_options_before_training(tmp_path):
    # Each refused by argparse (exit 2, a sentence naming the option), not after a run.
    cases = [(["--fanouts", "15,x"], "--fanouts takes whole numbers"),
             (["--batch-size", "0"], "--batch-size must be >= 1, got 0"),
             (["--prefetch", "-1"], "--prefetch must be >= 0, got -1"),
             (["--eval-nodes", "0"], "--eval-nodes must be >= 1, got 0"),
             # (each names the option given: both had been named)
             (["--prefetch", "0", "--loader-thread", "cpp"],
              "error: --loader-thread cpp builds batches ahead: it needs --prefetch 1 or more"),
             (["--prefetch", "0", "--loader-workers", "2"],
              "error: --loader-workers 2 builds batches ahead: it needs --prefetch 1 or more"),
             (["--save", str(tmp_path / "missing" / "m.pt")], "does not exist")]
    results = run_script_cases([(REPO / "examples" / "train_sage.py",
                                 ["--size", "tiny", "--device", "cpu", *options])
                                for options, _ in cases], timeout=120)
    for (options, words), result in zip(cases, results):
        assert result.returncode == 2 and words in result.stderr, (options, result.stderr)


def test_cpp_trainer_help_describes_every_option():
    trainer = os.environ.get("QUIVER_CPP_TRAINER")
    if not trainer:
        pytest.skip("QUIVER_CPP_TRAINER is not set (scripts/test.sh builds examples/cpp)")
    result = subprocess.run([trainer, "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    for option in ("--data DIR", "--mode GPU|UVA|CPU", "--cache X", "--min-accuracy X"):
        assert option in result.stdout, result.stdout


def test_training_logs_have_no_progress_bars_off_a_terminal():
    result = subprocess.run([sys.executable, str(REPO / "examples" / "train_sage.py"), "--size",
                             "tiny", "--epochs", "1", "--device", "cpu"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "\r" not in result.stdout + result.stderr  # tqdm redraws with carriage returns
    assert "epoch 1:" in result.stdout
    assert "ready in" in result.stdout and "s)" in result.stdout


def test_wrong_inputs_say_what_to_pass():
    with pytest.raises(TypeError, match="integer node ids, got torch.float32"):
        qv.CSRTopo(torch.tensor([[0.0, 1.0], [1.0, 0.0]]))
    pyg = pytest.importorskip("torch_quiver_ops.pyg")
    with pytest.raises(TypeError, match="pass the graph store alone"):
        pyg.NeighborSampler((object(), object()), [2])


def test_preflight_names_the_limit_the_size_and_the_fix(tmp_path, monkeypatch):
    with pytest.raises(preflight.ResourceLimitError, match=r"needs 1024.0 GiB in .* free of"):
        preflight.check_room(tmp_path, 1 << 40, "saving rows")
    preflight.check_room(tmp_path, 1 << 10, "saving rows")  # room enough: no error
    monkeypatch.setattr(preflight, "_is_shm", lambda path: True)
    with pytest.raises(preflight.ResourceLimitError, match="--shm-size"):
        preflight.check_room(tmp_path, 1 << 40, "saving rows")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(resource, "getrlimit", lambda which: (64 << 10, 64 << 10))
    with pytest.raises(preflight.ResourceLimitError,
                       match=r"locks 1.0 MiB .* only 64.0 KiB \(RLIMIT_MEMLOCK, `ulimit -l`\)"):
        preflight.check_memlock(1 << 20, "the RDMA transport's registered memory")
    preflight.check_memlock(1 << 10, "a small pin")


def test_saving_to_a_full_file_system_is_refused_before_writing(tmp_path, monkeypatch):
    monkeypatch.setattr(preflight, "spare_bytes", lambda total: 1 << 50)  # nearly full
    with pytest.raises(preflight.ResourceLimitError, match="saving rows"):
        qv.save_arrays(tmp_path / "save", "feature", {"rows": torch.zeros(4, 4)})
    assert not list((tmp_path / "save").glob("*.bin"))


def test_a_small_file_system_keeps_a_share_of_itself_spare_not_64_mib(tmp_path, monkeypatch):
    """Docker's default /dev/shm is 64 MB: keeping 64 MiB spare refused every save there,
    even of 48 bytes (a probe)."""
    class Stat:
        f_frsize, f_blocks, f_bavail = 4096, (64 << 20) // 4096, (60 << 20) // 4096
    monkeypatch.setattr(preflight.os, "statvfs", lambda path: Stat)
    preflight.check_room(tmp_path, 48, "saving a small graph")  # 8 MiB kept spare: fine
    with pytest.raises(preflight.ResourceLimitError,
                       match=r"has 60.0 MiB free of 64.0 MiB, and keeps 8.0 MiB of it spare"):
        preflight.check_room(tmp_path, 55 << 20, "saving rows")


def test_a_re_save_is_granted_the_room_its_old_files_free(tmp_path, monkeypatch):
    """Files are replaced one at a time: re-saving four arrays of 1 MiB needs room for one
    more file, not for all four again (the check asked for all four)."""
    arrays = {f"a{i}": torch.zeros(1 << 18) for i in range(4)}  # 1 MiB each
    qv.save_arrays(tmp_path, "four", arrays)
    asked = []
    monkeypatch.setattr(preflight, "check_room", lambda d, nbytes, what: asked.append(nbytes))
    qv.save_arrays(tmp_path, "four", arrays)
    assert asked == [1 << 20]
    qv.save_arrays(tmp_path, "four", {k: torch.zeros(1 << 19) for k in arrays})  # each grows
    assert asked[-1] == 5 << 20  # three grown by 1 MiB each, then the fourth's 2 MiB


GPU_ONLY = not (torch.cuda.is_available() and qv.cuda_kernels_built())


BENCHMARK_REFUSALS = [
    ("bench_weighted_hubs.py", ["--fanouts", "0,10"], "--fanouts must lie in [1, 99999]"),
    ("bench_weighted_hubs.py", ["--fanouts", "a"], "--fanouts takes a comma list"),
    ("bench_weighted_hubs.py", ["--compare", "/nonexistent.json", "/nonexistent.json"],
     "--compare /nonexistent.json: not a --json of this script"),
    pytest.param("bench_weighted_hubs.py", [], "this benchmark needs a GPU",
                 marks=pytest.mark.skipif(not GPU_ONLY, reason="a GPU is here")),
    ("bench_relation_rows.py", ["--relations", "0"], "--relations must lie in [1, 10000]"),
    ("bench_relation_rows.py", ["--compare", "/nonexistent.json", "/nonexistent.json"],
     "--compare /nonexistent.json: not a --json of this script"),
    pytest.param("bench_relation_rows.py", [], "this benchmark needs a GPU",
                 marks=pytest.mark.skipif(not GPU_ONLY, reason="a GPU is here")),
    ("bench_sampling.py", ["--graphs", "tiny", "--batch-size", "0"], "--batch-size must be >= 1"),
    ("bench_sampling.py", ["--graphs", "nope"], "--graphs takes presets of"),
    ("bench_e2e.py", ["--graph", "nope"], "--graph takes presets of"),
    ("bench_e2e.py", ["--graph", "tiny,small"], "--graph takes one preset"),
    # (each a traceback, some after building the graph; --replot asked for a GPU to draw)
    ("probe_reorder_pages.py", ["--graph", "tiny,small"], "--graph takes one preset"),
    ("bench_reorder.py", ["--graph", "tiny,small"], "--graph takes one preset"),
    ("bench_reorder.py", ["--orders", "degree,foo"], "--orders takes a comma list of degree, bfs"),
    ("bench_reorder.py", ["--batches", "0"], "--batches must be >= 1, got 0"),
    ("bench_reorder.py", ["--replot", "/nonexistent.json", "--plot", "p.png"],
     "--replot /nonexistent.json: not a --json of this script"),
    ("bench_reorder.py", ["--replot", "/nonexistent.json"], "--replot draws --plot"),
    ("bench_e2e.py", ["--graph", "tiny", "--fanouts", "a"], "--fanouts takes a comma list"),
    ("bench_e2e.py", ["--graph", "tiny", "--loader-workers", "0"],
     "--loader-workers values must be >= 1, got [0]"),
    ("bench_e2e.py", ["--graph", "tiny", "--train-seeds", "5000"], "--train-seeds must be below"),
    ("bench_e2e.py", ["--graph", "tiny", "--pyg-models", "bogus"], "--pyg-models takes"),
    ("bench_e2e.py", ["--graph", "tiny", "--host-reads", "bogus"], "--host-reads takes"),
    ("bench_e2e.py", ["--graph", "tiny", "--device", "bogus"], "--device takes cpu or"),
    ("bench_e2e.py", ["--model-streams", "low"], "--model-streams takes"),
    ("bench_feature.py", ["--cache-fraction", "2"], "--cache-fraction must be in (0, 1]"),
    ("bench_hetero.py", ["--scale", "-1"], "--scale must be a finite number > 0"),
    # (from a probe: each a traceback, a hang, or an option ignored without a word)
    ("bench_hetero.py", ["--scale", "inf"], "--scale must be a finite number > 0, got inf"),
    ("bench_hetero.py", ["--scale", "1e-30"], "leaves a relation without edges"),
    ("bench_hetero.py", ["--scale", "0.001", "--json", "/nonexistent/x.json"],
     "--json /nonexistent/x.json: the folder /nonexistent does not exist"),
    ("bench_hetero.py", ["--title", "t"], "--title is for the figure that --plot draws"),
    ("bench_hetero.py", ["--plot", ""], "--plot must not be empty"),
    ("bench_sampling.py", ["--graphs", "tiny", "--loader-workers", "a"],
     "--loader-workers takes a comma list of whole numbers"),
    ("bench_sampling.py", ["--graphs", "tiny", "--batch-size", "10000000000"],
     "--batch-size must be <= 16777216"),
    ("bench_sampling.py", ["--graphs", "tiny", "--topology-cache", "garbage"],
     "cannot read --topology-cache='garbage'"),
    ("bench_sampling.py", ["--graphs", "tiny", "--json", ""], "--json must not be empty"),
    ("bench_e2e.py", ["--graph", "tiny", "--cache", "bogus"], "cannot read --cache='bogus'"),
    ("bench_e2e.py", ["--graph", "tiny", "--json", "/nonexistent/x.json"],
     "--json /nonexistent/x.json: the folder"),
    ("bench_http.py", ["--graph", "nosuch"], "--graph takes presets of"),
    ("bench_http.py", ["--seconds", "0"], "--seconds must be >= 1, got 0"),
    ("bench_http.py", ["--connections", "0"], "--connections must be >= 1, got 0"),
    ("bench_http.py", ["--rounds", "0"], "--rounds must be >= 1, got 0"),
    ("partition_graph.py", ["--synthetic", "tiny", "--parts", "2", "--out", ""],
     "--out must not be empty"),
    ("partition_graph.py", ["--synthetic", "tiny", "--parts", "2", "--out", "x", "--seed",
                            "99999999999999999999"], "--seed: must be in [0, 2**63)"),
    ("partition_features.py", ["--features", "x.pt", "--out", "", "--hosts", "2"],
     "--out must not be empty"),
    ("bench_metis_memory.py", ["--parts", "0"], "--parts must be >= 1"),
    ("bench_dist_sampling.py", ["--parts", "2,0"], "--parts must be counts >= 1"),
    ("bench_dist_sampling.py", ["--methods", "bogus"], "--methods takes metis, random"),
    ("bench_serving_submit.py", ["--requests", "-1"], "--requests must be >= 1"),
    ("probe_dist_sampling.py", ["--parts", "0"], "--parts must be >= 1"),
    pytest.param("bench_feature.py", ["--graph", "tiny"], "measures GPU paths",
                 marks=pytest.mark.skipif(not GPU_ONLY, reason="a GPU is here")),
    # (from a probe: --help started them, and each ended in a CUDA driver's traceback)
    pytest.param("sanitize_kernels.py", [], "it needs a CUDA GPU",
                 marks=pytest.mark.skipif(not GPU_ONLY, reason="a GPU is here")),
    pytest.param("compare_sampling_builds.py", ["x.pt"], "it needs a CUDA GPU",
                 marks=pytest.mark.skipif(not GPU_ONLY, reason="a GPU is here")),
    pytest.param("compare_sampler_capture.py", ["label"], "it needs a CUDA GPU",
                 marks=pytest.mark.skipif(not GPU_ONLY, reason="a GPU is here")),
    pytest.param("bench_csr.py", [], "measures GPU paths",
                 marks=pytest.mark.skipif(not GPU_ONLY, reason="a GPU is here")),
    pytest.param("bench_e2e.py", ["--graph", "tiny", "--scaling", "2"], "no CUDA GPU",
                 marks=pytest.mark.skipif(not GPU_ONLY, reason="a GPU is here")),
    pytest.param("bench_sampling.py", ["--graphs", "tiny", "--profile"], "--profile profiles",
                 marks=pytest.mark.skipif(not GPU_ONLY, reason="a GPU is here")),
]


def _runs_here(case) -> bool:
    """Whether no skipif mark of the case holds here."""
    return not any(mark.name == "skipif" and mark.args and mark.args[0]
                   for mark in getattr(case, "marks", ()))


@pytest.fixture(scope="module")
def benchmark_refusals():
    """Every case of BENCHMARK_REFUSALS that runs here, run in one process (a torch import
    each had cost this file minutes): (script, args) -> its result."""
    cases = [getattr(case, "values", case) for case in BENCHMARK_REFUSALS if _runs_here(case)]
    results = run_script_cases([(REPO / "scripts" / script, args) for script, args, _ in cases],
                               timeout=120)
    return {(script, tuple(args)): result for (script, args, _), result in zip(cases, results)}


@pytest.mark.parametrize("script, args, words", BENCHMARK_REFUSALS)
def test_benchmark_scripts_name_a_bad_option_before_running(benchmark_refusals, script, args,
                                                            words):
    """Zero sizes, unknown presets and GPU-only scripts on a CPU machine ended in
    ZeroDivisionError, negative-dimension or "no NVIDIA driver" tracebacks."""
    done = benchmark_refusals[(script, tuple(args))]
    assert done.returncode == 2 and words in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr


def test_every_script_and_example_answers_help_and_starts_nothing(tmp_path):
    """--help on every script and example: exit 0, its usage (or its docstring) on stdout,
    no traceback, and nothing written where it runs. Plot scripts had needed matplotlib for
    it, and four took no --help at all (they drew)."""
    import ast
    scripts = [path for folder in ("scripts", "examples") for path in sorted(
        (REPO / folder).glob("*.py")) if path.name != "option_checks.py"]  # (a module)
    for path, done in zip(scripts, run_script_cases([(p, ["--help"]) for p in scripts],
                                                    timeout=60, cwd=tmp_path)):
        assert done.returncode == 0, (path.name, done.stderr[-2000:])
        assert "Traceback" not in done.stderr and done.stdout.strip(), (path.name, done.stderr)
        first = done.stdout.strip().splitlines()[0]
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        assert first.startswith("usage:") or (doc and first == doc.splitlines()[0].strip()), (
            path.name, done.stdout[:500])
    assert not list(tmp_path.iterdir()), list(tmp_path.iterdir())  # (a script that ran)


def test_gpu_check_takes_help_and_starts_nothing(tmp_path):
    """--help had started the whole GPU run (a probe): it prints the header, makes no
    folder, and any other argument is refused the same way with status 1."""
    out = tmp_path / "out"
    for argument, status in (("--help", 0), ("--fast", 1)):
        done = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), argument],
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, "OUT": str(out)})
        assert done.returncode == status and "QUIVER_GPU_STAGES" in done.stdout, done.stderr
        assert not out.exists()


def test_a_wait_timeout_is_a_number_of_seconds():
    """From a probe: PendingRows.wait and the serving waits took "5" and True as seconds."""
    from torch_quiver_ops._interrupts import runtime_timeout
    for bad in ("5", True, b"5"):
        with pytest.raises(TypeError, match="timeout must be a number of seconds or None"):
            runtime_timeout(bad)
    assert runtime_timeout(None) == -1.0 and runtime_timeout(-3) == 0.0
    assert runtime_timeout(2) == 2.0
