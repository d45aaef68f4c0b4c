"""torch_quiver_ops.GraphedStep: a training step on batches padded to fixed shapes (replayed
as a CUDA graph on a GPU) takes the same steps as the eager step on the real batches;
batches over the shapes run eager; bad arguments are refused by name."""
import re
import warnings

import pytest
import torch
import torch.nn.functional as F

import torch_quiver_ops as qv
from conftest import load_example, requires_cuda
from reference import random_coo

SAGE = load_example("train_sage").SAGE


def batches_of(mode, num_nodes=2000, num_edges=30000, width=12, batch_size=64, seeds=400,
               fanouts=(5, 4, 3), gpu=0):
    row, col = random_coo(num_nodes, num_edges, seed=1)
    topo = qv.CSRTopo(torch.stack([row, col]), num_nodes=num_nodes)
    device = torch.device("cpu") if mode == "CPU" else torch.device("cuda", gpu)
    sampler = qv.GraphSageSampler(topo, list(fanouts), device=device, mode=mode)
    table = torch.randn(num_nodes, width, generator=torch.Generator().manual_seed(2))
    feature = qv.Feature(rank=gpu, device_list=[] if mode == "CPU" else [gpu],
                         device_cache_size=0 if mode == "CPU" else "30%", csr_topo=topo)
    feature.from_cpu_tensor(table)
    labels = table[:, :5].argmax(1)  # learnable from a node's own row
    torch.manual_seed(4)
    loader = qv.SampleLoader(sampler, feature, torch.arange(seeds), batch_size, labels=labels,
                             prefetch=0)
    return list(loader), device


class GAT(torch.nn.Module):
    """Attention over each layer's incoming edges: a softmax per target row."""

    def __init__(self, width, hidden, classes, layers):
        super().__init__()
        from torch_geometric.nn import GATConv
        dims = [width] + [hidden] * (layers - 1) + [classes]
        self.convs = torch.nn.ModuleList(GATConv((a, a), b, heads=2, concat=False,
                                                 add_self_loops=False)
                                         for a, b in zip(dims[:-1], dims[1:]))

    def forward(self, x, adjs):
        for i, (edge_index, _, size) in enumerate(adjs):
            x = self.convs[i]((x, x[:size[1]]), edge_index)
            if i < len(self.convs) - 1:
                x = F.elu(x)
        return x


def twin_models(device, width=12, optimizer=lambda p: torch.optim.SGD(p, lr=0.05),
                kind=SAGE):
    """Two copies of one model (dropout off), each with its optimizer."""
    pairs = []
    for _ in range(2):
        torch.manual_seed(7)
        model = kind(width, 16, 5, 3).to(device).eval()
        pairs.append((model, optimizer(model.parameters())))
    return pairs


def eager_step(model, optimizer, batch):
    _, _, adjs, x, y = batch
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x, adjs), y)
    loss.backward()
    optimizer.step()
    return loss


def largest_difference(a, b):
    return max((p - q).abs().max().item() for p, q in zip(a.parameters(), b.parameters()))


@pytest.mark.parametrize("kind", [SAGE, GAT], ids=["sage", "gat"])
def test_padded_steps_equal_the_eager_steps_on_the_cpu(kind):
    batches, device = batches_of("CPU")
    assert batches[-1].batch_size < batches[0].batch_size  # the epoch's short last batch
    (model, optimizer), (twin, twin_optimizer) = twin_models(device, kind=kind)
    step = qv.GraphedStep(twin, twin_optimizer, batches, spare=16)
    assert step.graph is None and all(step.fits(b) for b in batches)
    for batch in batches:
        expected = eager_step(model, optimizer, batch)
        got = step(batch)
        assert torch.allclose(got, expected, rtol=1e-5, atol=1e-6), (got, expected)
    assert largest_difference(model, twin) < 1e-5
    assert step.eager_steps == 0
    # the padding was real: padded rows, edges and labels were there
    assert step.rows.size(0) > batches[0].x.size(0)
    assert (step.labels == -100).sum() >= 16


def test_a_batch_over_the_shapes_runs_eager_and_is_counted():
    batches, device = batches_of("CPU")
    small, large = fewest_and_most_edges(batches)
    assert large.adjs[0].edge_index.size(1) > small.adjs[0].edge_index.size(1)
    (model, optimizer), (twin, twin_optimizer) = twin_models(device)
    step = qv.GraphedStep(twin, twin_optimizer, [small], margin=1.0, spare=4)
    assert not step.fits(large)
    assert torch.allclose(step(large), eager_step(model, optimizer, large), atol=1e-6)
    assert step.eager_steps == 1
    assert largest_difference(model, twin) < 1e-6


def test_bad_arguments_are_refused_by_name():
    batches, device = batches_of("CPU", seeds=128)
    model, optimizer = twin_models(device)[0]
    for kwargs, words in [({"margin": 0.9}, "margin"), ({"margin": "2"}, "margin"),
                          ({"margin": float("inf")}, "margin"), ({"margin": True}, "margin"),
                          ({"spare": 0}, "spare"), ({"spare": 2.5}, "spare"),
                          ({"warmup": 0}, "warmup"), ({"ignore_index": 0.5}, "ignore_index"),
                          ({"ignore_index": None}, "ignore_index")]:
        with pytest.raises(ValueError, match=words):
            qv.GraphedStep(model, optimizer, batches, **kwargs)
    import numpy as np
    assert qv.GraphedStep(model, optimizer, batches, spare=np.int64(4)).spare == 4
    with pytest.raises(ValueError, match=r"batches\[0\].x must be 2-D"):
        qv.GraphedStep(model, optimizer, [batches[0]._replace(x=batches[0].x[:, 0])])
    with pytest.raises(ValueError, match=r"batches\[0\].y must be 1-D"):
        qv.GraphedStep(model, optimizer, [batches[0]._replace(y=batches[0].y[:, None])])
    with pytest.raises(ValueError, match="batches is empty"):
        qv.GraphedStep(model, optimizer, [])
    unlabeled = batches[0]._replace(y=None)
    with pytest.raises(ValueError, match=r"batches\[0\].*labels"):
        qv.GraphedStep(model, optimizer, [unlabeled])
    # (refused by its own layout first: two layers end on the second one's targets)
    with pytest.raises(ValueError, match=r"batches\[1\]: the last layer has \d+ targets"):
        qv.GraphedStep(model, optimizer, [batches[0], batches[1]._replace(
            adjs=batches[1].adjs[:2])])
    with pytest.raises(ValueError, match="expected a SampleLoader batch"):
        qv.GraphedStep(model, optimizer, [(1, 2)])
    step = qv.GraphedStep(model, optimizer, batches)
    with pytest.raises(ValueError, match="captured for rows of 12 torch.float32"):
        step(batches[0]._replace(x=batches[0].x.double()))
    # a row one feature wide would broadcast over the buffer's 12 columns
    with pytest.raises(ValueError, match="captured for rows of 12"):
        step(batches[0]._replace(x=batches[0].x[:, :1]))


def test_malformed_batches_are_refused_as_the_eager_step_would():
    # The padded path copies into fixed buffers, where a malformed batch would have trained
    # silently (found by a probe): each is refused by name instead.
    batches, device = batches_of("CPU", seeds=128)
    (model, optimizer), (twin, twin_optimizer) = twin_models(device)
    step = qv.GraphedStep(model, optimizer, batches, spare=4)
    b = batches[0]
    adjs = list(b.adjs)
    last = adjs[-1]
    cases = [
        (b._replace(y=torch.cat([b.y, b.y[:1]])), ValueError, "targets but y has"),
        (b._replace(y=b.y.float() + 0.7), ValueError, "batch.y holds torch.float32"),
        (b._replace(adjs=adjs[:-1] + [last._replace(edge_index=last.edge_index.float())]),
         ValueError, r"adjs\[2\].edge_index must be an int32 or int64 tensor"),
        (b._replace(adjs=adjs[:-1] + [last._replace(edge_index=last.edge_index[:1])]),
         ValueError, r"of shape \(2, edges\)"),
        (b._replace(adjs=adjs[:-1] + [last._replace(size=(last.size[0] + 1, last.size[1]))]),
         ValueError, "layer 2 has"),
        (b._replace(adjs=None), ValueError, "non-empty list of layers"),
        (b._replace(x=b.x.requires_grad_(False).clone().requires_grad_(True)), ValueError,
         "requires grad"),
    ]
    bad_index = last.edge_index.clone()
    bad_index[0, 0] = last.size[0]  # one source past the layer's sources
    cases.append((b._replace(adjs=adjs[:-1] + [last._replace(edge_index=bad_index)]),
                  IndexError, r"adjs\[2\].edge_index holds sources"))
    for batch, error, words in cases:
        with pytest.raises(error, match=words):
            step(batch)
    assert step.eager_steps == 0
    # plain tuples are layers too, as the eager path takes them: the padded step trains as
    # the eager one (and the refusals above left the model as it was)
    loss = step(b._replace(adjs=[tuple(adj) for adj in adjs]))
    expected = eager_step(twin, twin_optimizer, b)
    assert torch.allclose(loss, expected, atol=1e-6) and step.eager_steps == 0
    assert largest_difference(model, twin) < 1e-5


def test_odd_constructor_arguments_are_refused_by_name():
    batches, device = batches_of("CPU", seeds=128)
    model, optimizer = twin_models(device)[0]
    for args, kwargs, words in [
            ((None, optimizer, batches), {}, "model must be a torch.nn.Module"),
            ((model, None, batches), {}, "optimizer must be a torch.optim.Optimizer"),
            ((model, torch.optim.LBFGS(model.parameters()), batches), {}, "LBFGS"),
            ((model, optimizer, None), {}, "batches must be a list"),
            ((model, optimizer, batches, None), {}, "loss_fn must be callable"),
            ((model, optimizer, batches), {"margin": 1e15}, "at most 4"),
            ((model, optimizer, batches), {"spare": 2**62}, "at most 2\\*\\*20"),
            ((model, optimizer, [batches[0]._replace(y=batches[0].y.to(torch.uint8))]), {},
             "ignore_index=-100 does not fit")]:
        with pytest.raises(ValueError, match=words):
            qv.GraphedStep(*args, **kwargs)
    import numpy as np
    assert qv.GraphedStep(model, optimizer, batches, ignore_index=np.int64(-1)).ignore_index == -1


def test_bools_narrow_ids_and_layers_with_more_targets_than_sources_are_refused():
    """From a probe: ignore_index=True was taken as label 1 (its real class-1 labels then
    ignored by the loss), a layer of more targets than sources trained on the padding's
    zero rows, and uint8 edge indices wrapped the padded edges' indices."""
    import numpy as np
    batches, device = batches_of("CPU", seeds=128)
    model, optimizer = twin_models(device)[0]
    for value in (True, np.bool_(True), torch.tensor(True)):
        with pytest.raises(ValueError, match=f"ignore_index must be an int .*got {re.escape(repr(value))}"):
            qv.GraphedStep(model, optimizer, batches, ignore_index=value)
    with pytest.raises(ValueError, match="spare must be an int >= 1, got tensor.True."):
        qv.GraphedStep(model, optimizer, batches, spare=torch.tensor(True))
    with pytest.raises(ValueError, match=r"spare must be an int >= 1, got tensor\(\[\[4\]\]\)"):
        qv.GraphedStep(model, optimizer, batches, spare=torch.tensor([[4]]))
    step = qv.GraphedStep(model, optimizer, batches, spare=4)
    b = batches[0]
    adjs = list(b.adjs)
    last = adjs[-1]
    cases = [
        (b._replace(adjs=adjs[:-1] + [last._replace(edge_index=last.edge_index.to(torch.uint8))]),
         r"adjs\[2\].edge_index must be an int32 or int64 tensor"),
        (b._replace(adjs=adjs[:-1] + [last._replace(edge_index=last.edge_index.to(torch.int16))]),
         r"adjs\[2\].edge_index must be an int32 or int64 tensor"),
        (b._replace(adjs=adjs[:-1] + [last._replace(size=(last.size[0], True))]),
         r"adjs\[2\].size must be two counts"),
        (b._replace(adjs=adjs[:-1] + [last._replace(size=(float(last.size[0]), last.size[1]))]),
         r"adjs\[2\].size must be two counts"),
    ]
    # a last layer of 8 targets over 5 sources, the rows and labels agreeing with it
    empty = torch.zeros(2, 0, dtype=torch.long)
    cases.append((b._replace(adjs=[adjs[0]._replace(size=(b.x.size(0), 5)),
                                   adjs[1]._replace(edge_index=empty, size=(5, 5)),
                                   last._replace(edge_index=empty, size=(5, 8))],
                             y=torch.zeros(8, dtype=b.y.dtype)),
                  r"adjs\[2\].size must be two counts .*no more targets than sources"))
    for batch, words in cases:
        with pytest.raises(ValueError, match=words):
            step(batch)
    assert step.eager_steps == 0


def test_the_default_loss_ignores_the_given_ignore_index():
    # F.cross_entropy ignores -100 unless told: with ignore_index=-1 the padded seeds' -1
    # labels were out of range, and with 0 the padding counted in the loss.
    batches, device = batches_of("CPU", seeds=128)
    for ignore in (-1, 0):
        (model, optimizer), (twin, twin_optimizer) = twin_models(device)
        step = qv.GraphedStep(twin, twin_optimizer, batches, spare=4, ignore_index=ignore)
        b = batches[0]
        y = b.y.clone()
        y[y == ignore] = 1  # no real seed carries the ignored label
        b = b._replace(y=y)
        expected = F.cross_entropy(model(b.x, b.adjs), y, ignore_index=ignore)
        assert torch.allclose(step(b), expected, atol=1e-6)
        assert step.eager_steps == 0  # the padded path, whose padding carries the label


class ReadsLayerFields(torch.nn.Module):
    """A model that reads its layers by the fields of Adj, as a loader batch gives them."""

    def __init__(self):
        super().__init__()
        self.inner = SAGE(12, 16, 5, 3)

    def forward(self, x, adjs):
        assert all(isinstance(adj, qv.Adj) for adj in adjs)
        return self.inner(x, [(adj.edge_index, adj.e_id, adj.size) for adj in adjs])


def test_the_model_gets_layers_as_adj_on_both_paths():
    batches, device = batches_of("CPU")
    small, large = fewest_and_most_edges(batches)
    model = ReadsLayerFields().eval()
    step = qv.GraphedStep(model, torch.optim.SGD(model.parameters(), lr=0.1), [small],
                          margin=1.0, spare=4)
    step(small)
    step(large)
    assert step.eager_steps == 1


def fewest_and_most_edges(batches):
    return (min(batches, key=lambda b: b.adjs[0].edge_index.size(1)),
            max(batches, key=lambda b: b.adjs[0].edge_index.size(1)))


def captured_on_the_smallest_batch():
    """On a GPU: the batches with the fewest and the most edges, an eager model that took
    the same warm-up step as its twin, the twin and a GraphedStep of it captured on the
    smallest batch alone (so the largest runs eager)."""
    batches, device = batches_of("GPU", seeds=640)
    small, large = fewest_and_most_edges(batches)
    (model, optimizer), (twin, twin_optimizer) = twin_models(device)
    step = qv.GraphedStep(twin, twin_optimizer, [small], margin=1.0, spare=4, warmup=1)
    eager_step(model, optimizer, small)
    return small, large, (model, optimizer), twin, step


@requires_cuda
def test_graphed_steps_follow_the_eager_steps_on_a_gpu():
    batches, device = batches_of("GPU", seeds=640)
    (model, optimizer), (twin, twin_optimizer) = twin_models(device)
    step = qv.GraphedStep(twin, twin_optimizer, batches[:4], warmup=2)
    assert step.graph is not None
    for _ in range(2):  # the warm-up's steps, on the first batch
        eager_step(model, optimizer, batches[0])
    # atomic adds sum in any order: equal up to rounding
    for batch in batches[1:]:
        expected = eager_step(model, optimizer, batch)
        got = step(batch).clone()
        assert torch.allclose(got, expected, rtol=1e-4, atol=1e-5), (got, expected)
    assert largest_difference(model, twin) < 1e-4
    assert step.eager_steps == 0


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                    reason="needs two GPUs")
def test_steps_on_two_gpus_capture_and_replay_on_their_own_gpu():
    # torch's own capture stream is one for the process, made on the GPU current at the
    # first capture: a step on GPU 1 captured through it recorded nothing of its kernels.
    for gpu in (0, 1):
        with torch.cuda.device(0):  # GPU 0 current throughout, whatever the step's GPU
            batches, device = batches_of("GPU", seeds=320, gpu=gpu)
            (model, optimizer), (twin, twin_optimizer) = twin_models(device)
            step = qv.GraphedStep(twin, twin_optimizer, batches[:3], warmup=1)
            eager_step(model, optimizer, batches[0])
            for batch in batches[1:]:
                expected = eager_step(model, optimizer, batch)
                got = step(batch).clone()
                assert torch.allclose(got, expected, rtol=1e-4, atol=1e-5), (gpu, got, expected)
            assert largest_difference(model, twin) < 1e-4
            assert step.eager_steps == 0


@requires_cuda
def test_a_graphed_epoch_trains_with_adam_and_dropout():
    batches, device = batches_of("GPU", seeds=2000)
    torch.manual_seed(7)
    model = SAGE(12, 32, 5, 3).to(device)  # train mode: dropout inside the graph
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, capturable=True)
    step = qv.GraphedStep(model, optimizer, batches[:8])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. autograd waiting on the capture's stream
        first = [step(b).item() for b in batches[:6]]
        for _ in range(15):
            losses = [step(b).item() for b in batches]
    assert sum(losses[:6]) < 0.7 * sum(first), (first, losses[:6])
    assert all(torch.isfinite(p).all() for p in model.parameters())


@requires_cuda
def test_an_oversized_batch_runs_eager_beside_the_graph_without_stream_warnings():
    """An eager step between replays: autograd must not find gradient nodes the capture
    made on its own stream (PyTorch warns, and waits for that stream at every gradient)."""
    small, large, (model, optimizer), twin, step = captured_on_the_smallest_batch()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for batch in (large, small, large):
            expected = eager_step(model, optimizer, batch)
            assert torch.allclose(step(batch), expected, rtol=1e-4, atol=1e-5)
    assert step.eager_steps == 2
    assert largest_difference(model, twin) < 1e-4


@requires_cuda
def test_cpu_sampled_layers_beside_gpu_rows_are_copied_over():
    """CPU sampling with rows gathered onto the GPU: layers and labels on the CPU, in the
    graphed path and in the eager fallback."""
    batches, _ = batches_of("CPU", seeds=640)
    device = torch.device("cuda", 0)
    batches = [b._replace(x=b.x.to(device)) for b in batches]
    assert batches[0].adjs[0].edge_index.is_cpu and batches[0].y.is_cpu
    small, large = fewest_and_most_edges(batches)
    (model, optimizer), (twin, twin_optimizer) = twin_models(device)
    step = qv.GraphedStep(twin, twin_optimizer, [small], margin=1.0, spare=4, warmup=1)
    moved = lambda b: b._replace(adjs=[a.to(device) for a in b.adjs], y=b.y.to(device))
    eager_step(model, optimizer, moved(small))
    for batch in (large, small):
        expected = eager_step(model, optimizer, moved(batch))
        assert torch.allclose(step(batch), expected, rtol=1e-4, atol=1e-5)
    assert step.eager_steps == 1
    assert largest_difference(model, twin) < 1e-4


@requires_cuda
def test_gradients_stay_the_graphs_after_an_eager_step():
    """p.grad after a replay shows that step's gradients, before and after an eager step."""
    small, large, (model, optimizer), twin, step = captured_on_the_smallest_batch()
    before = [p.grad for p in twin.parameters()]
    for batch in (small, large, small):
        eager_step(model, optimizer, batch)
        step(batch)
        for mine, theirs in zip(twin.parameters(), model.parameters()):
            assert torch.allclose(mine.grad, theirs.grad, rtol=1e-4, atol=1e-5)
    assert all(p.grad is g for p, g in zip(twin.parameters(), before))
    assert step.eager_steps == 1


@requires_cuda
def test_an_optimizer_that_cannot_be_captured_is_refused_by_name():
    batches, device = batches_of("GPU", seeds=128)
    torch.manual_seed(7)
    model = SAGE(12, 16, 5, 3).to(device)
    with pytest.raises(ValueError, match="capturable=True"):
        qv.GraphedStep(model, torch.optim.Adam(model.parameters()), batches)
    cpu_model = SAGE(12, 16, 5, 3)
    with pytest.raises(ValueError, match="model parameter .* is on cpu"):
        qv.GraphedStep(cpu_model, torch.optim.SGD(cpu_model.parameters(), lr=0.1), batches)


class NormalizesRows(torch.nn.Module):
    """Each row scaled to unit length first: finite on every real row, NaN on a zero row."""

    def __init__(self, width, hidden, classes, layers):
        super().__init__()
        self.inner = SAGE(width, hidden, classes, layers)

    def forward(self, x, adjs):
        return self.inner(x / x.norm(dim=-1, keepdim=True), adjs)


def test_rows_past_a_batch_are_real_rows_so_a_models_arithmetic_stays_finite():
    # The padded rows had been zeros: x / x.norm() made them NaN, the padded edges carried
    # it to the spare rows, and 0 x NaN in the backward pass made every weight NaN while the
    # step's loss looked right (a probe).
    batches, device = batches_of("CPU")
    (model, optimizer), (twin, twin_optimizer) = twin_models(device, kind=NormalizesRows)
    step = qv.GraphedStep(twin, twin_optimizer, batches, spare=8)
    assert step.rows.size(0) > max(b.x.size(0) for b in batches)  # rows no batch fills
    assert bool((step.rows.norm(dim=1) > 0).all())
    for batch in batches:
        expected = eager_step(model, optimizer, batch)
        assert torch.allclose(step(batch), expected, rtol=1e-5, atol=1e-6)
    assert all(bool(p.isfinite().all()) for p in twin.parameters())
    assert largest_difference(model, twin) < 1e-5


def test_norms_across_rows_are_refused():
    """A batch norm in training mode (GIN's MLP, GENConv's default) and PyG's norms over a
    graph's nodes counted the padded rows: the padded step trained differently from the
    eager one without a word (a probe). Norms of each row, and batch norm in eval mode, are
    the same either way."""
    from torch_geometric.nn.norm import GraphNorm, GraphSizeNorm, LayerNorm as PygLayerNorm

    class OwnGraphNorm(GraphNorm):  # (a subclass in the user's module)
        pass
    batches, device = batches_of("CPU")
    for norm, words in ((torch.nn.BatchNorm1d(5), "model.norm normalizes across rows"),
                        (torch.nn.BatchNorm1d(5, track_running_stats=False).eval(),
                         "in eval mode with running statistics"),
                        (GraphNorm(5), "model.norm normalizes across rows"),
                        (OwnGraphNorm(5), "model.norm normalizes across rows"),
                        (GraphSizeNorm(), "model.norm normalizes across rows"),
                        (PygLayerNorm(5, mode="graph"), "model.norm normalizes across rows")):
        model, optimizer = twin_models(device)[0]
        model.norm = norm
        with pytest.raises(ValueError, match=words):
            qv.GraphedStep(model, optimizer, batches, spare=8)
    for norm in (torch.nn.BatchNorm1d(5).eval(), torch.nn.LayerNorm(5),
                 PygLayerNorm(5, mode="node")):
        model, optimizer = twin_models(device)[0]
        model.norm = norm
        qv.GraphedStep(model, optimizer, batches, spare=8)


@requires_cuda
def test_an_optimizer_state_loaded_after_the_capture_is_refused():
    # load_state_dict gives the optimizer new state tensors; the graph would go on updating
    # the old ones, the checkpoint's moments ignored without a word.
    batches, device = batches_of("GPU")
    model, optimizer = twin_models(device, optimizer=lambda p: torch.optim.Adam(
        p, lr=torch.tensor(0.01, device=device), capturable=True))[0]
    step = qv.GraphedStep(model, optimizer, batches, spare=8)
    step(batches[0])
    optimizer.load_state_dict(optimizer.state_dict())
    with pytest.raises(RuntimeError, match="the optimizer's state was replaced after the "
                                           "capture"):
        step(batches[1])
