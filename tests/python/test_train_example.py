"""The README's main job and the PyG example, shortened: they must train to well above
chance, in line or prefetching (the same batches), alone or under torchrun."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import load_example, requires_cuda

pytest.importorskip("torch_geometric")
REPO = Path(__file__).resolve().parents[2]


def test_train_sage_learns():
    result = load_example("train_sage").main(
        ["--size", "small", "--epochs", "3", "--eval-nodes", "3000", "--device", "cpu"])
    final = result["history"][-1]
    chance = 1 / result["num_classes"]
    assert final["accuracy"] > 10 * chance, result
    assert final["wait"] >= 0 and final["model"] > 0


def test_train_hetero_learns():
    """examples/train_hetero.py: to_hetero(GraphSAGE) with embeddings for the featureless
    types, on a 1% ogbn-mag-like graph."""
    result = load_example("train_hetero").main(
        ["--scale", "0.01", "--epochs", "2", "--device", "cpu", "--batch-size", "512"])
    final = result["history"][-1]
    assert final["test_accuracy"] > 50 / result["num_classes"], result
    assert final["loss"] < result["history"][0]["loss"]


def test_prefetching_trains_exactly_as_in_line():
    args = ["--size", "tiny", "--epochs", "3", "--batch-size", "64", "--device", "cpu"]
    module = load_example("train_sage")
    inline = module.main(args + ["--prefetch", "0"])["history"]
    ahead = module.main(args + ["--prefetch", "3"])["history"]
    assert [h["accuracy"] for h in inline] == [h["accuracy"] for h in ahead]
    assert all(h["sample"] > 0 and h["gather"] > 0 and h["model"] > 0 for h in inline)


def test_a_compiled_model_learns():
    """--compile: the model under torch.compile(dynamic=True) over batches of changing size
    (Inductor's own dropout draws other numbers than eager's, so the runs are not equal)."""
    import torch._dynamo
    torch._dynamo.reset()
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    result = load_example("train_sage").main(
        ["--size", "tiny", "--epochs", "3", "--batch-size", "64", "--device", "cpu",
         "--compile"])
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] > graphs  # it was compiled
    history = result["history"]
    assert history[-1]["accuracy"] > 2 / result["num_classes"], result


def test_train_sage_refuses_bad_options_before_building(tmp_path, capsys):
    module = load_example("train_sage")
    for args, words in ((["--lr", "-1"], "--lr must be a finite number > 0, got -1.0"),
                        # inf trained to NaN, which the link examples scored as AUC 1.0
                        (["--lr", "inf"], "--lr must be a finite number > 0, got inf"),
                        # unwritable: found only after the run, the report lost
                        (["--report", "/proc/no-such-dir/r.json"], "does not exist"),
                        (["--report", "/proc/report.json"], "no file can be written in /proc"),
                        (["--report", ""], "--report must not be empty"),
                        (["--loader-workers", "1000000"], "--loader-workers must be at most"),
                        # an allocator's traceback after the graph was built
                        (["--hidden", str(10**12)], "--hidden must be at most 8,192"),
                        (["--seed", str(10**20)], "argument --seed: must be in [0, 2**63)"),
                        (["--device", "foo"], "--device takes auto, cpu or a CUDA device"),
                        (["--device", "cuda:99"], "--device cuda:99"),
                        (["--device", "cpu", "--mode", "GPU"], "--mode GPU samples on a GPU"),
                        (["--device", "cpu", "--cache-size", "20"],  # bytes, and fine
                         None),
                        (["--device", "cpu", "--cache-size", "bogus"],
                         "cannot read --cache-size='bogus'"),
                        (["--cache-size", "150%"], "a share must be in [0%, 100%]"),
                        (["--save", str(tmp_path)], "is a folder: give a file name in it"),
                        # passed the check, then failed after the run (a probe)
                        (["--save", f"{tmp_path}/m.pt/"], "is a folder: give a file name"),
                        (["--report", f"{tmp_path}/missing/../r.json"],
                         "/missing/.. does not exist"),
                        (["--report", f"{tmp_path}/{'a' * 300}"],
                         "no file can be written by that name (File name too long)"),
                        # past int64 the loader's split raised an overflow (a probe)
                        (["--batch-size", str(10**20)], "--batch-size must be at most")):
        if words is None:
            module.parse_args(args)
            continue
        with pytest.raises(SystemExit):
            module.parse_args(args)
        assert words in capsys.readouterr().err, args


def test_ctrl_c_ends_an_example_with_one_line(capsys):
    """Ctrl-C printed a traceback of 23 to 40 lines through whatever the example was doing
    (found by a probe): one line now, and status 130 as a shell's."""
    option_checks = load_example("option_checks")

    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as stopped:
        option_checks.run_main(interrupted)
    assert stopped.value.code == 130
    assert capsys.readouterr().err == "interrupted (Ctrl-C)\n"
    option_checks.run_main(lambda: None)  # a run that ends is left alone


def test_cuda_graph_is_refused_where_it_cannot_replay(capsys, monkeypatch):
    module = load_example("train_sage")
    # Before anything is built (it came after the graph was built and shared).
    with pytest.raises(SystemExit) as refused:
        module.main(["--size", "tiny", "--epochs", "1", "--device", "cpu", "--cuda-graph"])
    assert refused.value.code == 2
    assert "--cuda-graph replays the step on one GPU" in capsys.readouterr().err
    monkeypatch.setenv("WORLD_SIZE", "2")  # under torchrun
    with pytest.raises(SystemExit):
        module.parse_args(["--cuda-graph"])
    assert "not under torchrun" in capsys.readouterr().err
    monkeypatch.delenv("WORLD_SIZE")
    with pytest.raises(SystemExit):
        module.parse_args(["--cuda-graph", "--compile"])
    assert "--cuda-graph and --compile are two ways" in capsys.readouterr().err


@requires_cuda
def test_a_graphed_step_learns_on_a_gpu():
    """--cuda-graph: the step replayed as one CUDA graph on padded batches (GraphedStep)."""
    result = load_example("train_sage").main(
        ["--size", "small", "--epochs", "3", "--eval-nodes", "3000", "--cuda-graph"])
    final = result["history"][-1]
    assert final["accuracy"] > 10 / result["num_classes"], result


def test_a_compiled_model_trains_under_torchrun(tmp_path):
    """--compile with DDP (its default lean step: a static graph, bucket views), two Gloo
    processes."""
    report = tmp_path / "report.json"
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(REPO / "examples" / "train_sage.py"), "--size", "tiny", "--epochs", "3",
         "--batch-size", "32", "--device", "cpu", "--compile", "--report", str(report)],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    together = json.loads(report.read_text())
    assert together["world_size"] == 2
    assert together["history"][-1]["accuracy"] > 2 / together["num_classes"], together


@pytest.mark.parametrize("step", ["plain", "lean"])
def test_train_sage_under_torchrun_matches_one_process(tmp_path, step):
    """Lean steps: DDP with a static graph and bucket views (fused Adam needs a GPU)."""
    args = ["--size", "tiny", "--epochs", "6", "--batch-size", "32", "--device", "cpu",
            "--step", step]
    alone = load_example("train_sage").main(args)["history"][-1]["accuracy"]
    report = tmp_path / "report.json"
    before = {p.name for p in Path("/dev/shm").glob("quiver-train-*")}
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(REPO / "examples" / "train_sage.py"), *args, "--report", str(report)],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    together = json.loads(report.read_text())
    assert together["world_size"] == 2
    accuracy = together["history"][-1]["accuracy"]
    assert accuracy > 2 / together["num_classes"] and abs(accuracy - alone) < 0.1, (accuracy, alone)
    # Rank 0's wait for batches, and the longest of any rank's (a max over both ranks).
    assert all(h["wait_max"] >= h["wait"] >= 0 for h in together["history"])
    # The loss over both ranks' batches, as the accuracy (it was rank 0's alone).
    assert all(0 < h["loss"] < 10 for h in together["history"])
    assert {p.name for p in Path("/dev/shm").glob("quiver-train-*")} == before  # cleaned up


@pytest.mark.parametrize("workers", ["0", "2"])  # 0: in the main process, no persistent workers
def test_pyg_example_learns_with_few_changed_lines(workers):
    script = REPO / "examples" / "pyg_neighbor_loader.py"
    changed = [line for line in script.read_text().splitlines()
               if "# quiver" in line and not line.lstrip().startswith(("#", "``"))]
    assert 0 < len(changed) <= 5, changed  # the README's promise: at most 5 lines differ
    result = subprocess.run([sys.executable, "-W", "ignore", str(script), "--size", "tiny",
                             "--epochs", "4", "--num-workers", workers],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    final = [line for line in result.stdout.splitlines() if line.startswith("Epoch")][-1]
    accuracy = float(final.rsplit("Test:", 1)[1])
    assert accuracy > 0.5, result.stdout  # four classes: chance is 0.25


def test_nan_scores_are_no_wins():
    """A model trained to NaN (--lr inf, since refused) scored AUC 1.0 and MRR 1.0: NaN
    compares false, so it ranked above every negative (found by a probe)."""
    import math
    from types import SimpleNamespace
    auc = load_example("link_prediction").auc
    assert auc(torch.tensor([2.0, 3.0]), torch.tensor([1.0])) == 1.0
    assert math.isnan(auc(torch.tensor([float("nan"), 3.0]), torch.tensor([1.0])))
    inf = float("inf")  # infinite scores rank as any other (they had given NaN)
    assert auc(torch.tensor([inf]), torch.tensor([0.0])) == 1.0
    assert auc(torch.tensor([-inf, 1.0]), torch.tensor([0.0])) == 0.5
    ranks_of = load_example("temporal_link_prediction").ranks_of
    z = torch.tensor([[1.0], [2.0], [0.5], [float("nan")]])
    batch = SimpleNamespace(src_index=torch.tensor([0, 3]), dst_pos_index=torch.tensor([1, 1]),
                            dst_neg_index=torch.tensor([[2, 2], [2, 2]]))
    assert ranks_of(z, batch).tolist() == [1, 3]  # the NaN source's edge ranks last


def test_link_prediction_example_learns():
    def run(num_neighbors):  # (5,5 and 64 wide: half the time of 10,5 and 128 wide)
        return load_example("link_prediction").main(
            ["--size", "tiny", "--epochs", "3", "--batch-size", "256", "--device", "cpu",
             "--num-neighbors", num_neighbors, "--hidden", "64"])
    result = run("5,5")
    final = result["history"][-1]
    # Held-out edges leave the graph in both directions (AUC about 0.7 after 2-4 epochs on
    # 300 edges; with their reverses left in it read 0.8).
    assert final["test_auc"] > 0.62 and final["val_auc"] > 0.62, result  # chance: 0.5
    assert final["loss"] < result["history"][0]["loss"] + 0.05
    # The graph must count: the features alone reach about 0.65 here (0.745 with the
    # neighbors), and a sampler that drew random nodes as neighbors 0.68-0.70 (a review
    # found the bar above met without the graph).
    alone = run("0,0")["history"][-1]
    assert final["test_auc"] > alone["test_auc"] + 0.07, (final, alone)


def test_temporal_example_ranks_against_each_sources_own_negatives():
    from types import SimpleNamespace
    ranks_of = load_example("temporal_link_prediction").ranks_of
    z = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [2.0, 0.0], [0.5, 0.0]])
    # Source 0: positive 1 (score 1) against negative 2 (0): first. Source 3: positive 4
    # (1) against negative 1 (2): second. One negative each, squeezed to [B] as PyG does.
    batch = SimpleNamespace(src_index=torch.tensor([0, 3]), dst_pos_index=torch.tensor([1, 4]),
                            dst_neg_index=torch.tensor([2, 1]))
    assert ranks_of(z, batch).tolist() == [1, 2]
    batch.dst_neg_index = torch.tensor([[2, 1], [2, 4]])  # each ties one: it counts half
    assert ranks_of(z, batch).tolist() == [1.5, 1.5]
    # A constant model (every score tied): the middle rank, not the last (a probe).
    batch.dst_neg_index = torch.tensor([[1, 1], [4, 4]])
    assert ranks_of(torch.ones(5, 2), batch).tolist() == [2.0, 2.0]


def test_temporal_example_refuses_more_negatives_than_a_batch_takes(capsys):
    """They failed in the test after the training epochs (found by a probe)."""
    module = load_example("temporal_link_prediction")
    with pytest.raises(SystemExit):
        module.parse_args(["--mrr-negatives", str(10**12)])
    assert "--mrr-negatives must be at most 4,194,303" in capsys.readouterr().err
    # (4,194,303 itself is refused too where its 256 GiB of negatives cannot fit)
    assert module.parse_args(["--mrr-negatives", "1000"]).mrr_negatives == 1000


def test_temporal_link_prediction_example_learns():
    result = load_example("temporal_link_prediction").main(
        ["--size", "tiny", "--epochs", "2", "--batch-size", "256", "--device", "cpu",
         "--num-neighbors", "5,5", "--hidden", "64"])  # half the time of 10,5 and 128 wide
    final = result["history"][-1]
    assert final["test_auc"] > 0.65 and final["val_auc"] > 0.65, result  # chance: 0.5
    assert final["test_mrr"] > 1.5 * result["chance_mrr"], result


DIES_WHILE_THE_GRAPH_IS_SAVED = '''
import os, sys, time
sys.path.insert(0, sys.argv[1])
import torch_quiver_ops as qv
import train_sage
if os.environ["LOCAL_RANK"] == "1":  # dies before mapping the graph: torchrun ends rank 0
    qv.CSRTopo.load_shared = lambda *a, **k: os._exit(7)
else:  # still saving the graph (not in a collective) when SIGTERM comes
    save = qv.Feature.save
    qv.Feature.save = lambda self, d: (save(self, d), time.sleep(120))[0]
train_sage.main(["--size", "tiny", "--epochs", "1", "--device", "cpu"])
'''


def fails_under_torchrun_leaving_no_graph(tmp_path, script_text: str, said: str) -> None:
    """``script_text`` (train_sage with a worker made to fail) under torchrun with two
    workers: the job fails, torchrun's report says ``said``, and no copy of the graph is left
    in /dev/shm."""
    script = tmp_path / "fails.py"
    script.write_text(script_text)
    before = {p.name for p in Path("/dev/shm").glob("quiver-train-*")}
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(script), str(REPO / "examples")], capture_output=True, text=True, timeout=300)
    assert result.returncode != 0 and said in result.stderr, result.stderr[-3000:]
    assert {p.name for p in Path("/dev/shm").glob("quiver-train-*")} == before


def test_a_worker_ended_by_torchrun_leaves_no_graph_in_shared_memory(tmp_path):
    """torchrun SIGTERMs the other workers when one fails; the first worker's copy of the
    graph in /dev/shm used to stay behind (GBs at products size)."""
    fails_under_torchrun_leaving_no_graph(tmp_path, DIES_WHILE_THE_GRAPH_IS_SAVED,
                                          "exitcode  : 7")


KILLED_AFTER_SAVING_THE_GRAPH = '''
import os, signal, sys
sys.path.insert(0, sys.argv[1])
import torch_quiver_ops as qv
import train_sage
if os.environ["LOCAL_RANK"] == "0":  # killed outright (the OOM killer) once it has saved
    save = qv.Feature.save
    qv.Feature.save = lambda self, d: (save(self, d), os.kill(os.getpid(), signal.SIGKILL))
train_sage.main(["--size", "tiny", "--epochs", "1", "--device", "cpu"])
'''


def test_a_first_worker_killed_while_building_leaves_no_graph_in_shared_memory(tmp_path):
    """The first worker alone removed the machine's copy: SIGKILLed, it left it for good
    (a probe); the other workers now remove it too when torchrun ends them."""
    fails_under_torchrun_leaving_no_graph(tmp_path, KILLED_AFTER_SAVING_THE_GRAPH, "Signal 9")


def test_an_interrupted_run_reports_the_epochs_that_ran(tmp_path, monkeypatch, capsys):
    """--report wrote nothing when a run was interrupted (Ctrl-C, SIGTERM, a diverged
    loss): the epochs that ran are reported, marked interrupted."""
    train_sage = load_example("train_sage")

    def interrupted_after_the_second(loss, epoch, lr):
        if epoch == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(train_sage.option_checks, "stop_if_diverged",
                        interrupted_after_the_second)
    report = tmp_path / "report.json"
    with pytest.raises(KeyboardInterrupt):
        train_sage.main(["--size", "tiny", "--epochs", "4", "--batch-size", "64", "--device",
                         "cpu", "--report", str(report)])
    seen = json.loads(report.read_text())
    assert seen["interrupted"] is True
    assert [h["epoch"] for h in seen["history"]] == [1, 2]
    assert "the report of the 2 epoch(s) that ran" in capsys.readouterr().err


def test_saving_after_no_epochs_says_the_model_is_untrained(tmp_path, capsys):
    load_example("train_sage").main(["--size", "tiny", "--epochs", "0", "--device", "cpu",
                                     "--save", str(tmp_path / "model.pt")])
    assert "--epochs 0: the model saved is untrained" in capsys.readouterr().err
    assert (tmp_path / "model.pt").is_file()
