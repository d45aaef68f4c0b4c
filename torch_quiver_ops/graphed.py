"""A GraphSAGE-style training step replayed as one CUDA graph, on the loader's batches
padded to fixed shapes.

A training step issues a few thousand kernels (forward, backward, optimizer). Where the
host issues them more slowly than the GPU runs them, the step is bound by the host, its
pace drifts with whatever else the host does, and a prefetching loader's own host work
slows it further. :class:`GraphedStep` captures the step once and then replays it: a
step's host work becomes a few copies into fixed buffers and one graph launch.

A graph has fixed shapes and a sampled batch does not, so each batch is padded up to
shapes taken from some batches given at construction (the largest of each layer's
sources, targets and edges, grown by ``margin``). Padding changes no real output: each
layer keeps its last ``spare`` target rows out of the batch, padded edges end only on
them, and padded labels are ``ignore_index``. A layer's real targets then aggregate only
real edges, the loss averages over the real seeds only, and every gradient is the real
batch's. Rows past a batch's hold real rows (of the first batch, or of earlier ones), so
that a model's arithmetic on them stays finite (zeros had made ``x / x.norm()`` a NaN there,
and 0 x NaN a NaN in every weight's gradient). Dropout draws its masks over the padded
shapes: the same in distribution as the eager step, not mask for mask. A batch larger than
the captured shapes runs eager (``eager_steps`` counts them).

What the model and loss must do for that to hold:

- the model is called ``model(x, adjs)`` with torch-quiver's layers (``(edge_index, e_id,
  (sources, targets))``, outermost first, a layer's targets the first rows of its sources),
  and row ``i`` of a layer's output depends only on row ``i`` of its targets and the edges
  into ``i`` (message passing over a bipartite layer, as SAGEConv or GATConv). Not: a
  normalization by degree of the source rows (GCNConv's): padded edges raise the in-degree
  of the spare rows, which are sources too; nor a norm across rows (refused: batch norm in
  training mode or without running statistics, PyG's GraphNorm, InstanceNorm, PairNorm,
  DiffGroupNorm, MeanSubtractionNorm, GraphSizeNorm, HeteroBatchNorm in training mode and
  graph-mode LayerNorm, whose statistics would count the padded rows); nor an aggregation
  that needs the edges sorted by target (SAGEConv's ``aggr="lstm"``): padded edges cycle
  over the spare rows;
- it reads no edge ids: the padded layers carry ``e_id=None``;
- ``loss_fn(out, y)`` ignores targets equal to ``ignore_index`` and averages over the rest
  (the default loss is :func:`torch.nn.functional.cross_entropy` given ``ignore_index``);
- the optimizer's step can be captured: Adam and AdamW built with ``capturable=True``.

The model's mode (train or eval), its parameters' addresses and the optimizer's
hyperparameters are fixed at capture: change weights in place (``load_state_dict`` does),
not by replacing parameters, nor by the optimizer's ``load_state_dict``, which replaces
its state (refused at the next step: build the step after loading a checkpoint), and give
a learning rate that a scheduler will change as a tensor
(``Adam(..., lr=torch.tensor(0.003, device=...), capturable=True)``): a float one is baked
into the graph, and only eager steps would see a new value. Each spare row takes
about ``padded edges / spare`` edges: with a sum aggregation in 16-bit floats, give enough
spare rows that their sums cannot overflow (an inf there, times a zero gradient, is a NaN
in the weights' gradients). On the
CPU nothing is captured: the step runs eager on the padded batch (the same arithmetic,
which is what the CPU tests check).

Each batch's layout is checked on the host (dtypes, shapes, each layer's sizes against the
rows, the next layer and the labels). Its edge indices are checked against the layer's
sizes on the CPU only: on a GPU that check would wait for the device at every step, which
is what the graph exists to avoid, so a GPU batch's indices are trusted, as the loader's
batches can be.
"""
from __future__ import annotations

import functools
import math
import numbers
from typing import Callable, List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from ._device import as_int
from .sampler import Adj

__all__ = ["GraphedStep"]


def _layer(adj, where: str) -> Adj:
    """``adj`` as an :class:`Adj` (a plain ``(edge_index, e_id, size)`` tuple too), its
    edge_index an int32 or int64 ``(2, E)`` tensor and its size two counts, no more targets
    than sources (a layer's targets are its first sources)."""
    try:
        edge_index, e_id, size = adj
        sources, targets = size
    except (TypeError, ValueError):
        raise ValueError(f"{where} must be a layer (edge_index, e_id, (sources, targets)), "
                         f"got {type(adj).__name__}") from None
    # (Narrower ids would wrap the padded edges' indices, and torch reads uint8 as a mask.)
    if (not isinstance(edge_index, Tensor) or edge_index.dim() != 2 or edge_index.size(0) != 2
            or edge_index.dtype not in (torch.int32, torch.int64)):
        shape = tuple(edge_index.shape) if isinstance(edge_index, Tensor) else None
        raise ValueError(f"{where}.edge_index must be an int32 or int64 tensor of shape "
                         f"(2, edges), got {type(edge_index).__name__} "
                         f"{getattr(edge_index, 'dtype', '')} of shape {shape}")
    counts = as_int(sources), as_int(targets)
    if None in counts or min(counts) < 0 or counts[1] > counts[0]:
        raise ValueError(f"{where}.size must be two counts (sources, targets) >= 0 with no "
                         f"more targets than sources, got {size!r}")
    return Adj(edge_index, e_id, counts)


# PyG's norms whose statistics run over a graph's nodes in any mode (GraphSizeNorm divides
# by the node count), and those that do so in training mode.
_ROW_NORMS = ("GraphNorm", "InstanceNorm", "PairNorm", "DiffGroupNorm", "MeanSubtractionNorm",
              "GraphSizeNorm")
_ROW_NORMS_IN_TRAINING = ("HeteroBatchNorm",)


def _norm_across_rows(model: torch.nn.Module) -> Optional[str]:
    """The name of a module of ``model`` whose output mixes statistics of several rows
    (padded rows included): a batch norm in training mode (or without running
    statistics), or one of PyG's norms over a graph's nodes (subclasses too)."""
    try:
        from torch_geometric.nn import norm as pyg
    except ImportError:  # (PyG is optional)
        pyg = None
    always = tuple(getattr(pyg, n) for n in _ROW_NORMS if hasattr(pyg, n))
    training = tuple(getattr(pyg, n) for n in _ROW_NORMS_IN_TRAINING if hasattr(pyg, n))
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            mixes = module.training or not module.track_running_stats
        else:
            mixes = (isinstance(module, always)
                     or (isinstance(module, training) and module.training)
                     or (pyg is not None and isinstance(module, pyg.LayerNorm)
                         and getattr(module, "mode", "") == "graph"))
        if mixes:
            return name or "(the model itself)"
    return None


def _parts(batch, where: str):
    """``(adjs, x, y)`` of a :class:`~torch_quiver_ops.loader.Batch`, checked on the host:
    types, shapes, and each layer's sizes against the rows, the next layer and the labels
    (not the edge indices: see :meth:`GraphedStep._check_indices`)."""
    try:
        _, _, adjs, x, y = batch
    except (TypeError, ValueError):
        raise ValueError(f"{where}: expected a SampleLoader batch (n_id, batch_size, adjs, x, "
                         f"y), got {type(batch).__name__}") from None
    if x is None or y is None:
        raise ValueError(f"{where}: the batch has no {'rows' if x is None else 'labels'}: "
                         f"build the SampleLoader with a feature and labels")
    if not isinstance(x, Tensor) or not isinstance(y, Tensor):
        raise ValueError(f"{where}: x and y must be tensors, got {type(x).__name__} and "
                         f"{type(y).__name__}")
    if not isinstance(adjs, (list, tuple)) or len(adjs) == 0:
        raise ValueError(f"{where}: the batch's adjs must be a non-empty list of layers, got "
                         f"{adjs!r:.60}")
    adjs = [_layer(adj, f"{where}.adjs[{i}]") for i, adj in enumerate(adjs)]
    if x.dim() != 2:
        raise ValueError(f"{where}.x must be 2-D (rows, features), got shape {tuple(x.shape)}")
    if y.dim() != 1:
        raise ValueError(f"{where}.y must be 1-D (one label a seed), got shape "
                         f"{tuple(y.shape)}")
    if adjs[0].size[0] != x.size(0):
        raise ValueError(f"{where}: the first layer has {adjs[0].size[0]} sources but x has "
                         f"{x.size(0)} rows")
    for i in range(len(adjs) - 1):
        if adjs[i + 1].size[0] != adjs[i].size[1]:
            raise ValueError(f"{where}: layer {i + 1} has {adjs[i + 1].size[0]} sources but "
                             f"layer {i} has {adjs[i].size[1]} targets")
    if adjs[-1].size[1] != y.numel():
        raise ValueError(f"{where}: the last layer has {adjs[-1].size[1]} targets but y has "
                         f"{y.numel()} labels")
    return adjs, x, y


def _count(name: str, value, least: int) -> int:
    """An integer argument (a Python or NumPy int, not a bool) of at least ``least``."""
    number = as_int(value)
    if number is None or number < least:
        raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
    return number


class GraphedStep:
    """``step(batch)``: one training step (zero the gradients, forward, ``loss_fn``,
    backward, ``optimizer.step()``) on a :class:`~torch_quiver_ops.SampleLoader` batch,
    replayed as one CUDA graph. Returns the loss, a tensor the next call overwrites (clone
    it to keep it; reading it with ``.item()`` waits for the step).

    Args:
        model: called as ``model(x, adjs)``; see the module's notes for what it must do.
        optimizer: steps ``model``'s parameters; capturable (``capturable=True`` for Adam).
        batches: a few batches of the loader (the more, the fewer that run eager); the
            first also warms the step up before the capture, taking ``warmup`` real steps.
        loss_fn: ``loss_fn(out, y)``, ignoring ``ignore_index`` targets.
        margin: the captured shapes are the largest of ``batches``' times this (>= 1).
        spare: target rows each layer keeps for padded edges (>= 1); more spreads their
            atomic adds thinner (one row made the step half again as slow on an H200).
        ignore_index: the label of padded seeds.
        warmup: steps taken on ``batches[0]`` before the capture (CUDA only, >= 1).
    """

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 batches: Sequence, loss_fn: Callable[[Tensor, Tensor], Tensor] = F.cross_entropy,
                 *, margin: float = 1.02, spare: int = 1024, ignore_index: int = -100,
                 warmup: int = 3):
        if (isinstance(margin, bool) or not isinstance(margin, numbers.Real)
                or not math.isfinite(margin) or margin < 1.0):
            raise ValueError(f"margin must be a finite number >= 1, got {margin!r}")
        margin = float(margin)
        spare = _count("spare", spare, 1)
        warmup = _count("warmup", warmup, 1)
        given, ignore_index = ignore_index, as_int(ignore_index)
        if ignore_index is None:
            raise ValueError(f"ignore_index must be an int (the label of padded seeds), got "
                             f"{given!r}")
        if not isinstance(model, torch.nn.Module):
            raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise ValueError(f"optimizer must be a torch.optim.Optimizer, got "
                             f"{type(optimizer).__name__}")
        if isinstance(optimizer, torch.optim.LBFGS):
            raise ValueError("optimizer LBFGS steps with a closure that re-evaluates the model, "
                             "which one captured step cannot: give Adam, AdamW or SGD")
        if not callable(loss_fn):
            raise ValueError(f"loss_fn must be callable as loss_fn(out, y), got {loss_fn!r}")
        if margin > 4.0:
            raise ValueError(f"margin must be at most 4 (a batch padded to more than 4 times "
                             f"its size trains faster eager), got {margin!r}")
        if spare > 2**20:
            raise ValueError(f"spare must be at most 2**20 rows, got {spare}")
        try:
            batches = list(batches)
        except TypeError:
            raise ValueError(f"batches must be a list of loader batches, got "
                             f"{type(batches).__name__}") from None
        if not batches:
            raise ValueError("batches is empty: give at least one batch to take shapes from")
        parts = [_parts(b, f"batches[{i}]") for i, b in enumerate(batches)]
        adjs, x, y = parts[0]
        layers = len(adjs)
        for i, (a, rows, labels) in enumerate(parts):
            if len(a) != layers:
                raise ValueError(f"batches[{i}] has {len(a)} layers, batches[0] has {layers}")
            if rows.device != x.device or rows.dtype != x.dtype or rows.size(1) != x.size(1):
                raise ValueError(f"batches[{i}].x is {tuple(rows.shape)} {rows.dtype} on "
                                 f"{rows.device}, batches[0].x is {tuple(x.shape)} {x.dtype} "
                                 f"on {x.device}")
        device = x.device
        if y.dtype.is_floating_point or y.dtype.is_complex or y.dtype == torch.bool:
            raise ValueError(f"batches[0].y holds {y.dtype}: the padded seeds need an integer "
                             f"label (ignore_index)")
        info = torch.iinfo(y.dtype)
        if not info.min <= ignore_index <= info.max:
            raise ValueError(f"ignore_index={ignore_index} does not fit the labels' dtype "
                             f"{y.dtype} ([{info.min}, {info.max}])")
        across_rows = _norm_across_rows(model)
        if across_rows is not None:
            raise ValueError(f"model.{across_rows} normalizes across rows, whose statistics "
                             f"would count the padded rows (training differs from eager): "
                             f"put a batch norm in eval mode with running statistics, or use "
                             f"a norm of each row (torch.nn.LayerNorm, or PyG's "
                             f"LayerNorm(mode='node'))")
        for name, param in model.named_parameters():
            if param.device != device:
                raise ValueError(f"model parameter {name} is on {param.device}, the batches' "
                                 f"rows on {device}")
        if device.type == "cuda":
            for group in optimizer.param_groups:
                if group.get("capturable") is False:
                    raise ValueError(f"optimizer {type(optimizer).__name__} has capturable="
                                     f"False: build it with capturable=True so that its step "
                                     f"can be captured in a CUDA graph")
        if loss_fn is F.cross_entropy:  # it ignores -100 unless told otherwise
            loss_fn = functools.partial(F.cross_entropy, ignore_index=ignore_index)
        self.model, self.optimizer, self.loss_fn = model, optimizer, loss_fn
        self.spare, self.ignore_index = spare, ignore_index
        self.eager_steps = 0

        def grow(count: int) -> int:
            return int(count * margin) + 1

        largest = [(max(p[0][i].size[0] for p in parts), max(p[0][i].size[1] for p in parts),
                    max(p[0][i].edge_index.size(1) for p in parts)) for i in range(layers)]
        seeds = max(p[2].numel() for p in parts)
        # A layer's targets are its first sources, and layer i + 1 reads layer i's targets.
        self.targets: List[int] = [grow(dst) + spare for _, dst, _ in largest[:-1]]
        self.targets.append(grow(seeds) + spare)
        self.sources: List[int] = [max(grow(largest[0][0]), self.targets[0])] + self.targets[:-1]
        self.edges: List[int] = [grow(edges) for _, _, edges in largest]
        # Real rows throughout (see the module's note): the first batch's, round and round.
        cycle = torch.arange(self.sources[0], device=device) % max(x.size(0), 1)
        self.rows = (x.detach()[cycle] if x.size(0) else
                     torch.zeros(self.sources[0], x.size(1), dtype=x.dtype, device=device))
        self.labels = torch.full((self.targets[-1],), ignore_index, dtype=y.dtype,
                                 device=device)
        # Padded edge k joins source k mod S (any row: it feeds only spare targets) to spare
        # target k mod spare.
        self._padding: List[Tensor] = []
        self.edge_index: List[Tensor] = []
        index_dtype = adjs[0].edge_index.dtype
        for src, dst, count in zip(self.sources, self.targets, self.edges):
            k = torch.arange(count, device=device, dtype=index_dtype)
            pad = torch.stack([k % src, dst - spare + k % spare])
            self._padding.append(pad)
            self.edge_index.append(pad.clone())
        self.layers = [Adj(ei, None, (src, dst))
                       for ei, src, dst in zip(self.edge_index, self.sources, self.targets)]
        self.graph: Optional[torch.cuda.CUDAGraph] = None
        self.loss: Optional[Tensor] = None
        if device.type == "cuda":
            self._capture(batches[0], warmup)
        # The state the graph updates: load_state_dict gives the optimizer new tensors.
        self._captured_state = optimizer.state

    def __repr__(self) -> str:
        return (f"GraphedStep(sources={self.sources}, targets={self.targets}, "
                f"edges={self.edges}, spare={self.spare}, captured={self.graph is not None}, "
                f"eager_steps={self.eager_steps})")

    def _step(self, x: Tensor, adjs, y: Tensor) -> Tensor:
        # Once captured, the gradients are the graph's tensors: an eager step zeroes and
        # fills them in place, so that `p.grad` keeps showing each step's gradients.
        self.optimizer.zero_grad(set_to_none=self.graph is None)
        loss = self.loss_fn(self.model(x, adjs), y)
        loss.backward()
        self.optimizer.step()
        return loss

    def _padded_step(self) -> Tensor:
        return self._step(self.rows, self.layers, self.labels)

    def _capture(self, batch, warmup: int) -> None:
        device = self.rows.device
        side = torch.cuda.Stream(device)
        current = torch.cuda.current_stream(device)
        self._fill(*_parts(batch, "batch"))
        # Warm-up on a side stream, as CUDA graph capture asks: libraries' workspaces are
        # made there, outside the graph.
        side.wait_stream(current)
        with torch.cuda.stream(side):
            for _ in range(warmup):
                self._padded_step()
        current.wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        # gradients made inside the graph live in its memory, at fixed addresses
        self.optimizer.zero_grad(set_to_none=True)
        # On the rows' GPU and a stream of it: torch's own capture stream is one for the
        # process, made on whichever GPU was current at its first capture.
        with torch.cuda.device(device), torch.cuda.graph(self.graph, stream=side):
            loss = self._padded_step()
        # Kept without its autograd graph: that graph would keep the parameters' gradient
        # nodes made on the capture's stream alive, and an eager step on another stream
        # would then wait for that stream at every gradient (PyTorch warns of it).
        self.loss = loss.detach()

    def fits(self, batch) -> bool:
        """Whether ``batch`` fits the captured shapes (else ``step`` runs it eager). A batch
        whose rows or labels differ in width, dtype or device is refused by ``step``
        either way."""
        return self._fits(*_parts(batch, "batch"))

    def _fits(self, adjs, x: Tensor, y: Tensor) -> bool:
        return (len(adjs) == len(self.targets) and x.size(0) <= self.sources[0]
                and y.numel() <= self.targets[-1] - self.spare
                and all(adj.size[1] <= dst - self.spare and adj.edge_index.size(1) <= count
                        for adj, dst, count in zip(adjs, self.targets, self.edges)))

    @torch.no_grad()  # the buffers are the graph's inputs, not part of any autograd graph
    def _fill(self, adjs, x: Tensor, y: Tensor) -> None:
        self.rows[:x.size(0)].copy_(x)
        for edge_index, pad, adj in zip(self.edge_index, self._padding, adjs):
            count = adj.edge_index.size(1)
            edge_index[:, :count].copy_(adj.edge_index)
            edge_index[:, count:].copy_(pad[:, count:])
        self.labels[:y.numel()].copy_(y)
        self.labels[y.numel():].fill_(self.ignore_index)

    @staticmethod
    def _check_indices(adjs) -> None:
        """Each layer's edge indices within its sizes: on the CPU only (module notes)."""
        for i, adj in enumerate(adjs):
            edge_index = adj.edge_index
            if edge_index.device.type != "cpu" or edge_index.numel() == 0:
                continue
            sources, targets = adj.size
            (low_source, low_target), (high_source, high_target) = (
                edge_index.min(dim=1).values.tolist(), edge_index.max(dim=1).values.tolist())
            if (min(low_source, low_target) < 0 or high_source >= sources
                    or high_target >= targets):
                raise IndexError(f"batch.adjs[{i}].edge_index holds sources {low_source}.."
                                 f"{high_source} and targets {low_target}..{high_target} for a "
                                 f"layer of {sources} sources and {targets} targets")

    def __call__(self, batch) -> Tensor:
        adjs, x, y = _parts(batch, "batch")
        if x.device != self.rows.device or x.dtype != self.rows.dtype \
                or x.size(1) != self.rows.size(1):
            raise ValueError(f"batch.x is {tuple(x.shape)} {x.dtype} on {x.device}; the step "
                             f"was captured for rows of {self.rows.size(1)} {self.rows.dtype} "
                             f"on {self.rows.device}")
        if y.dtype != self.labels.dtype:
            raise ValueError(f"batch.y holds {y.dtype}; the step was captured for labels of "
                             f"{self.labels.dtype}")
        if x.requires_grad:
            raise ValueError("batch.x requires grad (rows computed by a learnable layer): the "
                             "step copies rows into its fixed buffer, which would cut them off "
                             "from their gradients; run such a step eager")
        self._check_indices(adjs)
        if self.graph is not None and self.optimizer.state is not self._captured_state:
            raise RuntimeError("the optimizer's state was replaced after the capture (its "
                               "load_state_dict gives it new tensors, which the graph does not "
                               "update): build a new GraphedStep after loading a checkpoint")
        if not self._fits(adjs, x, y):
            # A CPU sampler's layers and labels come on the CPU beside rows on the GPU; the
            # padded path copies them over, and so must this one.
            device = self.rows.device
            adjs = [adj.to(device) for adj in adjs]
            loss = self._step(x, adjs, y.to(device))
            self.eager_steps += 1  # counted once it ran
            return loss
        self._fill(adjs, x, y)
        if self.graph is None:  # CPU: the same padded step, eager
            return self._padded_step()
        with torch.cuda.device(self.rows.device):  # replays on the current GPU's stream
            self.graph.replay()
        return self.loss
