"""Graphs partitioned over hosts: each host owns a set of nodes and holds only their
neighbor lists (global ids, the rows its samplers read), their feature rows (with the
hottest rows replicated on every host, as :func:`~torch_quiver_ops.dist.partition_features`
lays them out for :class:`~torch_quiver_ops.dist.DistFeature`), their labels and the
train/val/test ids it owns, plus the node -> owner map every host needs to route a hop.

:func:`partition_graph` writes a directory::

    manifest.json          parts, sizes, method, edge cut, balance, the partition's id
    owner/                 owner[v] (int16) and local_index[v] (v's row in its owner's part)
    part_<p>/              nodes (global ids owned, ascending), indptr, indices, edge_ids,
                           labels, <split>_ids: this host's share, nothing else
    features/              DistFeature's shard map and host_<p> tables

Every array is raw bytes with its size and CRC-32 beside it (``_sharing.save_arrays``), and
:func:`load_partition` maps only one host's part (no copy, MAP_SHARED) after checking sizes
(CRC-32 too with ``verify``) and that every file is of this very partition: a truncated,
corrupt or mismatched file is refused with its name.

Memory while partitioning: the node -> owner map, one part's arrays at a time (their rows
gathered in chunks of ``chunk_edges``), and the input, which may be memory-mapped
(:meth:`CSRTopo.load_shared`, ``torch.from_file``) so that only the pages read are resident.
METIS works on an in-memory symmetric copy of the graph, so it needs several times the
graph's size; ``range`` and ``random`` do not.
"""
from __future__ import annotations

import json
import os
import secrets
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from . import _sharing, ops
from ._interrupts import ctrl_c_ends_waits
from .sampler import Adj, layers_of, sampling_placement
from .topology import CSRTopo
from ._device import as_ids, as_int, as_tensor, check_generator, is_int, readable_ids
from .hotness import check_hot_order

METHODS = ("metis", "range", "random")
FORMAT = "quiver-partition-1"
# What each part_<p> folder holds besides the splits' <name>_ids.
_PART_ARRAYS = ("nodes", "indptr", "indices", "edge_ids", "labels")


# Peak memory of method="metis" above the input, per entry of the symmetrized adjacency
# METIS is given (each undirected edge once in each direction: as many entries as input
# edges for a graph that holds both directions, up to twice as many for a directed one).
# Measured with pymetis 2025.2.2 on 16M-edge graphs: 99-107 bytes an entry for a graph
# holding both directions, 134-149 for random ones, directed or not (4.4 GB for 16M directed
# edges, 294 bytes an input edge, had passed a check of 110 an input edge: a probe).
# Building that adjacency peaks below it (94 bytes an input edge, then freed).
METIS_BYTES_PER_ENTRY = 150


def _available_memory() -> Optional[int]:
    """MemAvailable of /proc/meminfo in bytes (None where there is no such file)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _check_metis_memory(entries: int, what: str, bound: str) -> None:
    """A MemoryError where METIS's ``entries`` adjacency entries need more memory than the
    machine has available (unknown: tried)."""
    need, available = METIS_BYTES_PER_ENTRY * entries, _available_memory()
    if available is not None and need > available:
        raise MemoryError(
            f"method='metis' on {what} needs {bound}about {need / 2**30:.1f} GiB (the "
            f"symmetrized graph and METIS's own copies: about {METIS_BYTES_PER_ENTRY} bytes "
            f"an adjacency entry, each undirected edge twice, measured with pymetis), and this "
            f"machine has {available / 2**30:.1f} GiB available: use method='random' or "
            f"'range' (streamed, a few GiB at papers100M's size) or a machine with more memory")


# The most nodes whose pairs row * n + col fit in int64 (n * n <= 2^63 - 1).
MAX_METIS_NODES = 3_037_000_499


def assign_owners(topo: CSRTopo, num_parts: int, method: str = "metis", seed: int = 0) -> Tensor:
    """Each node's part (int16): ``metis`` (pymetis on the symmetrized graph: few cut edges,
    balanced node counts; in memory, about ``METIS_BYTES_PER_ENTRY`` bytes an entry of the
    symmetrized adjacency, one to two per input edge, refused with a MemoryError where the
    machine has less available: at least that for the input edges before anything is built,
    then for the adjacency's own entries before METIS runs), ``range`` (contiguous id ranges
    of equal size) or ``random``
    (a random balanced assignment, seeded)."""
    _check_topo(topo, "assign_owners")
    num_parts = _num_parts(num_parts)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if not is_int(seed):  # (torch's manual_seed or METIS named no argument)
        raise TypeError(f"seed must be an int, got {seed!r}")
    n = topo.node_count
    if method == "range":
        return (torch.arange(n, dtype=torch.int64) * num_parts // max(n, 1)).to(torch.int16)
    if method == "random":
        owner = torch.empty(n, dtype=torch.int16)
        order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
        owner[order] = (torch.arange(n) % num_parts).to(torch.int16)
        return owner
    if num_parts == 1 or n == 0:  # (METIS prints "Cannot bisect" for 0 nodes)
        return torch.zeros(n, dtype=torch.int16)
    # The arguments are named before the dependency is looked for.
    if num_parts > n:  # METIS prints its refusal and returns every node in one part
        raise ValueError(f"method='metis' splits {n} nodes into at most {n} parts, got "
                         f"num_parts={num_parts}; 'range' and 'random' leave parts empty")
    if n > MAX_METIS_NODES:  # (each pair is keyed as row * n + col in int64 below)
        raise ValueError(f"method='metis' takes graphs of at most {MAX_METIS_NODES:,} nodes, "
                         f"got {n:,}; use 'range' or 'random'")
    try:
        import pymetis
    except ImportError:
        raise ImportError("method='metis' needs pymetis (pip install pymetis); 'range' and "
                          "'random' need nothing") from None
    _check_metis_memory(topo.edge_count, f"{topo.edge_count:,} edges", "at least ")
    # METIS wants an undirected graph without self loops or repeated edges.
    row = torch.repeat_interleave(torch.arange(n, dtype=torch.int64), topo.degree.long())
    col = topo.indices.long()
    keep = row != col
    row, col = row[keep], col[keep]
    key = torch.unique(torch.cat([row * n + col, col * n + row]))
    del row, col, keep
    indptr, indices, _ = ops.csr_from_coo(key // n, key % n, n)
    del key
    _check_metis_memory(indices.numel(), f"{topo.edge_count:,} edges (symmetrized: "
                                         f"{indices.numel():,} adjacency entries)", "")
    options = pymetis.Options(seed=seed)
    if hasattr(pymetis, "CSRAdjacency"):  # pymetis >= 2025.2
        graph = {"adjacency": pymetis.CSRAdjacency(indptr.numpy(), indices.numpy())}
    else:
        graph = {"xadj": indptr.numpy(), "adjncy": indices.numpy()}
    _, membership = pymetis.part_graph(num_parts, **graph, options=options)
    owner = as_tensor(membership, dtype=torch.int16)
    if owner.numel() != n or (n and not 0 <= int(owner.min()) <= int(owner.max()) < num_parts):
        raise RuntimeError(f"METIS failed to split {n} nodes into {num_parts} parts")
    return owner


def _row_chunks(indptr: Tensor, chunk_edges: int):
    """(first, last) row ranges of a CSR whose edges fit in ``chunk_edges`` (at least one
    row each): the unit the partitioner streams in."""
    rows, first = indptr.numel() - 1, 0
    while first < rows:
        last = int(torch.searchsorted(indptr, indptr[first] + chunk_edges, right=True)) - 1
        last = min(max(last, first + 1), rows)
        yield first, last
        first = last


def _check_topo(topo, caller: str) -> None:
    """A TypeError naming ``topo`` (an edge_index or None had failed on a missing
    ``node_count``)."""
    if not isinstance(topo, CSRTopo):
        raise TypeError(f"{caller} partitions a CSRTopo (topo), got {type(topo).__name__}"
                        + (": build one with CSRTopo(edge_index)"
                           if isinstance(topo, Tensor) else ""))


def _chunk_edges(value) -> int:
    """``chunk_edges`` as a positive int (-5 and 0 had been taken, "x" failed in a sum)."""
    chunk = as_int(value)
    if chunk is None or chunk < 1:
        raise ValueError(f"chunk_edges must be an int >= 1, got {value!r}")
    return chunk


def _num_parts(value) -> int:
    """``value`` as a part count in [1, 32767] (owners are int16; NumPy's ints too)."""
    parts = as_int(value)
    if parts is None or not 1 <= parts <= 32767:
        raise ValueError(f"num_parts must be in [1, 32767], got {value!r}")
    return parts


def _checked_owner(owner, num_parts: int, n: int) -> Tensor:
    """``owner`` as a tensor after checking it gives each of ``n`` nodes a part in
    ``[0, num_parts)``, and ``num_parts`` is in [1, 32767] (owners are kept as int16)."""
    num_parts, owner = _num_parts(num_parts), as_tensor(owner)
    if owner.shape != (n,) or owner.dtype.is_floating_point or owner.dtype == torch.bool:
        raise ValueError(f"owner must be one integer part per node ({n}), got "
                         f"{owner.dtype} of shape {tuple(owner.shape)}")
    if n and (int(owner.min()) < 0 or int(owner.max()) >= num_parts):
        raise ValueError(f"owner holds parts outside [0, {num_parts})")
    return owner


def partition_quality(topo: CSRTopo, owner: Tensor, num_parts: int,
                      chunk_edges: int = 1 << 22) -> dict:
    """The share of edges whose two ends have different owners (edge cut) and the largest
    part's nodes and edges over the mean (balance, 1.0 is perfect); edges read
    ``chunk_edges`` at a time."""
    # (owners past num_parts had been counted as more parts, and num_parts <= 0 or 10**10
    # failed in torch's words; a probe)
    _check_topo(topo, "partition_quality")
    chunk_edges = _chunk_edges(chunk_edges)
    owner = _checked_owner(owner, num_parts, topo.node_count).long()
    degree = topo.degree.long()
    cut = 0
    for first, last in _row_chunks(topo.indptr, chunk_edges):
        begin, end = int(topo.indptr[first]), int(topo.indptr[last])
        row_owner = torch.repeat_interleave(owner[first:last], degree[first:last],
                                            output_size=end - begin)
        cut += int((row_owner != owner[topo.indices[begin:end].long()]).sum())
    nodes = torch.bincount(owner, minlength=num_parts).double()
    # .double(): with no nodes, bincount returns int64 whatever its weights.
    edges = torch.bincount(owner, weights=degree.double(), minlength=num_parts).double()
    return {"edge_cut": cut / max(topo.edge_count, 1),
            "node_balance": float(nodes.max() / nodes.mean().clamp(min=1e-12)),
            "edge_balance": float(edges.max() / edges.mean().clamp(min=1e-12)),
            "nodes_per_part": nodes.long().tolist(), "edges_per_part": edges.long().tolist()}


def _owned_rows(topo: CSRTopo, nodes: Tensor, chunk_edges: int):
    """The CSR rows of ``nodes`` (ascending global ids): (indptr, indices, edge_ids), the
    neighbor lists as :class:`~torch_quiver_ops._sharing.Streamed` arrays, gathered
    ``chunk_edges`` at a time as they are written: a part's lists (the bulk of its bytes)
    are never whole in memory."""
    starts = topo.indptr[nodes].long()
    degree = topo.indptr[nodes + 1].long() - starts
    indptr = torch.zeros(nodes.numel() + 1, dtype=torch.int64)
    torch.cumsum(degree, 0, out=indptr[1:])
    total = int(indptr[-1])

    def positions():  # each chunk's rows, as positions in topo's lists
        for first, last in _row_chunks(indptr, chunk_edges):
            out_begin, out_end = int(indptr[first]), int(indptr[last])
            yield torch.arange(out_begin, out_end, dtype=torch.int64) + torch.repeat_interleave(
                starts[first:last] - indptr[first:last], degree[first:last],
                output_size=out_end - out_begin)

    indices = _sharing.Streamed(topo.indices.dtype, [total],
                                (topo.indices[p] for p in positions()))
    edge_ids = _sharing.Streamed(torch.int64, [total], (
        topo.eid[p].long() if topo.eid is not None else p for p in positions()))
    return indptr, indices, edge_ids


def split_ids(name: str, ids, num_nodes: int, label: Optional[str] = None) -> Tensor:
    """A split's node ids (int64): ids, or a boolean mask over the nodes such as PyG's
    ``train_mask``, taken as the nodes it marks (its int64 value would be ids 0 and 1).
    Errors name ``label`` (default: the split)."""
    label = label or f"split {name!r}"
    ids = as_ids(ids)
    if ids.dim() != 1:
        raise ValueError(f"{label} must be 1-D node ids or a mask, got shape "
                         f"{tuple(ids.shape)}")
    if ids.dtype == torch.bool:
        if ids.numel() != num_nodes:
            raise ValueError(f"{label} is a mask of {ids.numel()} entries for a graph "
                             f"of {num_nodes} nodes")
        return ids.nonzero().view(-1)
    if ids.is_floating_point() or ids.is_complex():
        raise TypeError(f"{label} must hold integer node ids (or be a bool mask), "
                        f"got {ids.dtype}")
    ids = ids.long()
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_nodes):
        raise IndexError(f"{label} holds node ids outside [0, {num_nodes})")  # as the ops
    return ids


def partition_graph(directory: Union[str, Path], topo: CSRTopo, num_parts: int,
                    method: str = "metis", x: Optional[Tensor] = None,
                    y: Optional[Tensor] = None, splits: Optional[Dict[str, Tensor]] = None,
                    replicate: Optional[float] = None, hot_order: Optional[Tensor] = None,
                    owner: Optional[Tensor] = None, seed: int = 0,
                    chunk_edges: int = 1 << 22) -> dict:
    """Writes ``num_parts`` host partitions of ``topo`` into ``directory`` (see the module)
    and returns the manifest. ``x``: node features ([N, ...], rows of every node; the
    ``replicate`` share (default 0.2) of the hottest, by ``hot_order`` or degree, on every
    host: both only with ``x``); ``y``:
    labels ([N, ...]); ``splits``: named node-id sets (``{"train": ids, ...}``), each host
    keeping the ids it owns; ``owner``: a given assignment instead of ``method``'s."""
    directory = Path(directory)
    _check_topo(topo, "partition_graph")
    chunk_edges = _chunk_edges(chunk_edges)
    if x is None and (replicate is not None or hot_order is not None):
        raise ValueError("replicate and hot_order place feature rows: they need x")
    n = topo.node_count
    started = time.perf_counter()
    num_parts = _num_parts(num_parts)  # (a NumPy int had failed after METIS ran; a review)
    if owner is None:
        owner = assign_owners(topo, num_parts, method, seed)
    else:
        owner = _checked_owner(owner, num_parts, n).to(torch.int16)
        method = "given"
    assigned = time.perf_counter() - started
    for name, t in (("x", x), ("y", y)):
        if t is not None:
            _sharing.check_row_table(t, name)
            if t.size(0) != n:
                raise ValueError(f"{name} has {t.size(0)} rows for a graph of {n} nodes")
    # The features' options too, before any part is written over an earlier partition.
    if x is not None:
        replicate = 0.2 if replicate is None else replicate
        if (not isinstance(replicate, (int, float)) or isinstance(replicate, bool)
                or not 0.0 <= replicate <= 1.0):  # (NaN, "20%" and True; a probe)
            raise ValueError(f"replicate must be a number in [0, 1], got {replicate!r}")
        if hot_order is not None:
            check_hot_order(hot_order, n)
    for name in splits or {}:
        # A split is saved as <name>_ids beside the part's own arrays: "edge" had written
        # its ids over edge_ids, which then loaded as the part's edge ids without a word.
        if not isinstance(name, str):
            raise TypeError(f"splits must be named by strings, got {name!r}")
        if f"{name}_ids" in _PART_ARRAYS:
            raise ValueError(f"splits may not be named {name!r}: each is saved as <name>_ids "
                             f"beside the part's {', '.join(sorted(_PART_ARRAYS))}")
    splits = {name: split_ids(name, ids, n) for name, ids in (splits or {}).items()}

    partition_id = secrets.randbits(62)
    local_index = torch.empty(n, dtype=torch.int64)
    quality = partition_quality(topo, owner, num_parts, chunk_edges)
    parts = []
    for part in range(num_parts):
        nodes = (owner == part).nonzero().view(-1)
        local_index[nodes] = torch.arange(nodes.numel())
        indptr, indices, edge_ids = _owned_rows(topo, nodes, chunk_edges)
        arrays = {"nodes": nodes, "indptr": indptr, "indices": indices, "edge_ids": edge_ids,
                  "labels": y[nodes] if y is not None else None}
        for name, ids in splits.items():
            arrays[f"{name}_ids"] = ids[owner[ids].long() == part]
        _sharing.save_arrays(directory / f"part_{part}", "part", arrays, part=part,
                             num_parts=num_parts, partition_id=partition_id)
        parts.append({"nodes": nodes.numel(), "edges": int(indptr[-1]),
                      **{f"{name}_ids": arrays[f"{name}_ids"].numel() for name in splits}})
        del nodes, indptr, indices, edge_ids, arrays
    _sharing.save_arrays(directory / "owner", "owner",
                         {"owner": owner, "local_index": local_index},
                         num_parts=num_parts, partition_id=partition_id)
    if x is not None:
        from .dist import partition_features
        order = hot_order if hot_order is not None else topo.feature_order
        partition_features(x, directory / "features", num_parts, order, replicate, owner.long())
    manifest = {"format": FORMAT, "partition_id": partition_id, "num_parts": num_parts,
                **({"features_run": _features_run(directory)} if x is not None else {}),
                "num_nodes": n, "num_edges": topo.edge_count, "method": method,
                "features": x is not None, "labels": y is not None, "splits": sorted(splits),
                "parts": parts, "seconds": {"assign": assigned,
                                            "total": time.perf_counter() - started},
                **{k: v for k, v in quality.items() if not k.endswith("_per_part")}}
    partial = directory / "manifest.json.partial"
    partial.write_text(json.dumps(manifest, indent=1))
    os.replace(partial, directory / "manifest.json")  # last: a whole partition or none
    return manifest


def read_manifest(directory: Union[str, Path]) -> dict:
    path = Path(directory) / "manifest.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: {directory} is not a partition "
                                f"written by partition_graph, or it has not finished")
    try:
        manifest = json.loads(_sharing.read_record(path))
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} is not a partition manifest ({error})") from None
    except PermissionError as error:
        raise type(error)(f"{path} cannot be read as a partition manifest: {error}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError(f"{path} is not a {FORMAT} manifest")

    def count(value) -> bool:
        return is_int(value) and value >= 0

    problems = [f"{key} is {manifest.get(key)!r}, not a count"
                for key in ("num_parts", "num_nodes") if not count(manifest.get(key))]
    splits = manifest.get("splits", [])
    if not isinstance(splits, list) or not all(isinstance(s, str) for s in splits):
        # (a str was read a letter at a time, each letter named as a split)
        problems.append(f"splits is {splits!r}, not a list of split names")
    parts = manifest.get("parts")
    if not problems and not (
            isinstance(parts, list) and len(parts) == manifest["num_parts"] and all(
                isinstance(p, dict) and count(p.get("nodes")) and count(p.get("edges"))
                for p in parts)):
        problems.append(f"parts must list {manifest['num_parts']} parts' node and edge counts")
    if not is_int(manifest.get("partition_id")):
        problems.append(f"partition_id is {manifest.get('partition_id')!r}, not an int")
    if problems:
        raise ValueError(f"{path} is corrupt: {'; '.join(problems)}")
    return manifest


@dataclass
class GraphPartition:
    """One host's share of a partitioned graph (:func:`load_partition`): rows ``indptr`` /
    ``indices`` (global neighbor ids) / ``edge_ids`` (global) of the owned ``nodes``, and the
    node -> owner map (``owner``, ``local_index``) of the whole graph."""
    directory: Path
    part: int
    num_parts: int
    num_nodes: int
    nodes: Tensor
    indptr: Tensor
    indices: Tensor
    edge_ids: Tensor
    owner: Tensor
    local_index: Tensor
    labels: Optional[Tensor] = None
    splits: Dict[str, Tensor] = field(default_factory=dict)
    manifest: dict = field(default_factory=dict)

    @property
    def feature_directory(self) -> Optional[Path]:
        """Where :meth:`DistFeature.load` finds the rows, when features were written."""
        return self.directory / "features" if self.manifest.get("features") else None


# To worker processes (mp.spawn) its mapped arrays travel as their files, as CSRTopo's do
# (torch's reduction had failed with EBADF, naming neither the class nor a fix: a probe).
_sharing.send_saves_as_files(GraphPartition)


def _features_run(directory: Path) -> object:
    """The id of the partition_features run that wrote ``directory/features`` (its shard
    map's record), read without mapping the map."""
    record = directory / "features" / "shard_map" / "shard_map.json"
    try:
        return json.loads(_sharing.read_record(record)).get("run")
    except (OSError, ValueError, AttributeError) as error:
        raise ValueError(f"{record} cannot be read as the partition's shard map: "
                         f"{error}") from None


def load_partition(directory: Union[str, Path], part: int, verify: bool = False) -> GraphPartition:
    """Maps part ``part`` of a :func:`partition_graph` directory and the owner map, checking
    every file's size (and CRC-32 with ``verify``) and that all are of one partition."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    num_parts, n = manifest["num_parts"], manifest["num_nodes"]
    given, part = part, as_int(part)  # (NumPy's ints too, as partition_graph's num_parts)
    if part is None:
        raise ValueError(f"part must be an int, got {given!r}")
    if not 0 <= part < num_parts:
        raise ValueError(f"part {part} is not one of the partition's {num_parts} parts "
                         f"[0, {num_parts}) ({directory}/manifest.json)")
    splits = manifest.get("splits", [])
    arrays, meta = _sharing.map_arrays(
        directory / f"part_{part}", "part", verify=verify,
        names=(*_PART_ARRAYS, *[f"{s}_ids" for s in splits]),
        required=("nodes", "indptr", "indices", "edge_ids", *[f"{s}_ids" for s in splits]))
    owners, owner_meta = _sharing.map_arrays(directory / "owner", "owner", verify=verify,
                                             names=("owner", "local_index"),
                                             required=("owner", "local_index"))
    for where, m in ((directory / f"part_{part}" / "part.json", meta),
                     (directory / "owner" / "owner.json", owner_meta)):
        differ = [f"{key} {m.get(key)!r} against {manifest.get(key)!r}"
                  for key in ("partition_id", "num_parts") if m.get(key) != manifest.get(key)]
        if differ:  # (named by the field: two equal ids were shown for num_parts)
            raise ValueError(f"{where} is from another partition than {directory}/manifest.json "
                             f"({'; '.join(differ)})")
    if meta.get("part") != part:
        raise ValueError(f"{directory}/part_{part}/part.json describes part {meta.get('part')}")
    # The features folder too: another run's loaded beside these parts with no error, even
    # verified, and served its rows. (Manifests from before features_run are not checked.)
    if manifest.get("features") and "features_run" in manifest \
            and (directory / "features").exists():  # (a host that only samples may lack it)
        run = _features_run(directory)
        if run != manifest["features_run"]:
            raise ValueError(f"{directory}/features was written by another run than "
                             f"{directory}/manifest.json (run {run!r} against "
                             f"{manifest['features_run']!r}): partition_graph writes both, "
                             f"the features cut by the parts' owners; to cut them again (another "
                             f"replicate share, say), run partition_graph again")
    nodes, indptr, indices = arrays["nodes"], arrays["indptr"], arrays["indices"]
    expected = manifest["parts"][part]
    problems = []
    # Ids read as anything but integer vectors came back wrong without a word: float nodes
    # as zeros that passed the order check, float split ids as node 0 (a probe).
    ids = {**{name: arrays[name] for name in ("nodes", "indptr", "indices", "edge_ids")},
           **{f"{s}_ids": arrays[f"{s}_ids"] for s in splits}, **owners}
    for name, array in ids.items():
        if array.dim() != 1 or array.dtype.is_floating_point or array.dtype.is_complex \
                or array.dtype == torch.bool:
            raise ValueError(f"{directory}: {name} must be a vector of integer ids, got "
                             f"{array.dtype} of shape {list(array.shape)}")
    labels = arrays.get("labels")
    if labels is not None and (labels.dim() == 0 or labels.size(0) != nodes.numel()):
        problems.append(f"labels of shape {list(labels.shape)} for {nodes.numel()} nodes")
    if nodes.numel() != expected["nodes"] or indptr.numel() != nodes.numel() + 1:
        problems.append(f"{nodes.numel()} nodes and {indptr.numel()} offsets for the manifest's "
                        f"{expected['nodes']} nodes")
    # Each count named on its own: one message for all had read "34 neighbors for the
    # manifest's 34" when the edge ids were the ones of another length.
    if indices.numel() != expected["edges"]:
        problems.append(f"{indices.numel()} neighbors for the manifest's {expected['edges']}")
    if arrays["edge_ids"].numel() != indices.numel():
        problems.append(f"{arrays['edge_ids'].numel()} edge ids for {indices.numel()} neighbors")
    if indptr.numel() and int(indptr[-1]) != indices.numel():
        problems.append(f"offsets ending at {int(indptr[-1])} for {indices.numel()} neighbors")
    for name in ("owner", "local_index"):
        if owners[name].numel() != n:
            problems.append(f"owner/{name}.bin of {owners[name].numel()} entries for {n} nodes")
    # The runtime checks neighbors and owners; edge ids and the owned nodes it only passes
    # on, so a corrupt one came back as an edge id of -7 or a wrong node (a probe). (Edge
    # ids are the topology's own, which may pass its edge count: only their sign is known.)
    edge_ids = arrays["edge_ids"]
    if edge_ids.numel() and int(edge_ids.min()) < 0:
        problems.append("negative edge ids")
    if nodes.numel() and (int(nodes[0]) < 0 or int(nodes[-1]) >= n
                          or bool((nodes.diff() <= 0).any())):
        problems.append(f"owned nodes that are not ascending ids in [0, {n})")
    if problems:
        raise ValueError(f"{directory}/part_{part} does not match {directory}/manifest.json: "
                         + "; ".join(problems))
    return GraphPartition(directory, part, num_parts, n, nodes, indptr, indices,
                          arrays["edge_ids"], owners["owner"], owners["local_index"],
                          arrays.get("labels"), {s: arrays[f"{s}_ids"] for s in splits}, manifest)


def _largest_degree(indptr: Tensor, chunk: int = 1 << 24) -> int:
    """The most neighbors any row of a CSR holds, in chunks of rows (a part's offsets may
    be gigabytes: their differences whole would be as many again)."""
    largest = 0
    for start in range(0, max(indptr.numel() - 1, 0), chunk):
        rows = indptr[start:start + chunk + 1]
        largest = max(largest, int((rows[1:] - rows[:-1]).max()))
    return largest


def _tell_sampler_setup_problem(group, timeout, problem: str) -> None:
    """This host's part of DistGraphSampler's setup agreement when its own arguments are
    wrong, published without waiting for the others' texts: the other hosts then raise
    naming it, at once, and so does this one (dist._tell_hosts)."""
    from .dist import _tell_hosts
    mine = {"partition": None, "part": -1, "sizes": [], "replace": False, "asked": "",
            "draws": None, "lanes": 1, "rdma": False, "problem": problem,
            "machine": socket.gethostname()}
    _tell_hosts(group, "dist-sampler-setup", json.dumps(mine, sort_keys=True), timeout)


class DistGraphSampler:
    """Multi-hop sampling over a partitioned graph, :class:`GraphSageSampler`'s face: each
    process holds one :func:`load_partition` part (its rank in ``group`` is the part) and
    asks the owners of remote frontier nodes for their samples each hop
    (``torch.classes.quiver.DistSampler``, over ``group``'s collectives: Gloo for these CPU
    tensors). Every process of the group samples a batch at the same time, as DDP steps;
    a peer whose process dies makes every survivor raise, naming it: within a few seconds
    over Gloo (its connections close and it misses three heartbeats, a tenth of
    ``timeout`` apart but at most a second in groups of up to 33 hosts), within ``timeout``
    over NCCL or when its machine vanishes; one that stalls alive (its heartbeat still
    beating) is raised after ``timeout`` and up to five heartbeats more, as a peer that may
    be slow, not dead.

    Args:
        partition: this process's part.
        sizes: fanouts per hop, the seeds' hop first (-1: every neighbor).
        group: the process group (default: the world); its rank must be the part.
        replace: sample with replacement.
        timeout: seconds an exchange may take.
        transport: ``"auto"`` (RDMA when every host has a device, as
            :class:`~torch_quiver_ops.dist.DistFeature` chooses), ``"collective"`` (the
            group's all-to-alls: every host samples each batch
            at once, owners sample what they are asked for) or ``"rdma"`` (one-sided RDMA
            READs of the owners' offsets, neighbor ids and edge ids, registered read-only:
            the requester draws the positions itself with the same kernel, owners do no
            work, and hosts sample whenever they like; needs an RDMA device on every host).
        rdma: with ``"rdma"``: ``device``, ``port``, ``gid_index``, ``qps_per_peer`` and
            ``staging_bytes`` (each of the three transports registers one buffer), as for
            :class:`~torch_quiver_ops.dist.DistFeature`.
        mode: where this host samples its own nodes and those its peers ask for, as
            :class:`GraphSageSampler`'s modes: ``"GPU"`` (the part copied to ``device``),
            ``"UVA"`` (offsets on the GPU, neighbor lists in pinned host memory) or
            ``"CPU"``. Default: ``"GPU"`` when ``group`` is NCCL, else ``"CPU"``. Hosts may
            differ.
        device: the GPU of the GPU and UVA modes (default: the current one).
        draws: who draws a remote node's sample. ``"owner"`` (the collective default): the
            owner samples what it is asked for, one exchange of requests and answers a hop.
            ``"requester"`` (RDMA's way, and over collectives on request): the host that
            asks reads the node's offsets, draws the positions with its own generator and
            reads the drawn entries, three reads a hop (over NCCL the reads travel through
            the GPU and the draws are made on the host). With ``"requester"`` a fixed seed
            gives the same batch over Gloo, NCCL and RDMA; with ``"owner"``, the same over
            Gloo as over NCCL, and a host's batch is fixed only when every host's seeds and
            generators are too: an owner draws what its peers ask for with its own
            generator, after its own nodes.
        lanes: Gloo only: how many connections (Gloo groups of the same hosts, made once per
            group and kept) a hop's bulk travels over side by side: the owners' answers, or
            with ``"requester"`` the three reads' rows (one TCP stream carries about 2 GB/s).
            1 (the default): the group's own all-to-alls. A products batch moves 2-9 MB
            over three hops, and on one host's loopback 4 lanes were no faster (60-95 ms a
            batch either way, docs/benchmarks.md); lanes are for links where one
            connection cannot fill the wire; a peer's block takes one lane per 512 KiB, so
            small ones travel on one. Every host must ask for the same number. The
            batch does not depend on it. Over Gloo the sampler also makes a group of its
            own for its exchanges; it and the lanes are kept until the process exits
            (about 3 threads and 4 file descriptors each), so make one sampler a graph
            and keep it.
        bounded_slots: over NCCL with every part on its GPU, send each hop's requests and
            answers in fixed blocks per owner, so that a batch needs one host wait instead
            of three a hop and, from a shape's second batch, replays as one CUDA graph. A
            block holds the most rows any host has asked one owner for so far, times 1.15;
            once the hosts agree on the blocks they take them without asking each other
            first (the only host wait is the batch's end). A batch that asks an owner for
            more is taken again in blocks of the hop's bound (the largest batch times the
            fanouts before it), with the same draws, and the blocks grow. The padding moves
            more bytes (a products batch, [15, 10, 5], 1024 seeds: 7.5 MB with 2 parts, 11.9
            MB with 4, against 5.9 and 8.9 MB exact), cheap between the GPUs of one machine, dear
            over a network. None (the default): on when every host runs on one machine
            (same host name), else off; True or False force it. The batch does not depend
            on it.

    The exchange follows ``group``'s backend: Gloo moves CPU tensors, NCCL the same tensors
    through the current GPU (call ``torch.cuda.set_device`` first, one GPU per process).
    A CPU generator given to :meth:`sample_subgraph` for a part on a GPU seeds the
    sampler's own CUDA generator each batch, so a fixed seed still fixes the batch.
    """

    @ctrl_c_ends_waits
    def __init__(self, partition: GraphPartition, sizes: Sequence[int], group=None,
                 replace: bool = False, timeout: float = 60.0, transport: str = "auto",
                 rdma: Optional[dict] = None, mode: Optional[str] = None, device=None,
                 draws: Optional[str] = None, lanes: int = 1,
                 bounded_slots: Optional[bool] = None):
        import torch.distributed as dist
        from .dist import _checked_timeout, _rdma_options, check_lanes, not_a_group
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("DistGraphSampler needs torch.distributed: call "
                               "init_process_group first (torchrun sets up its environment)")
        group = group if group is not None else dist.group.WORLD
        try:
            bad_group = not_a_group(group)
            if bad_group is not None:
                group = dist.group.WORLD  # the problem told over the default group
                raise bad_group
            if not isinstance(partition, GraphPartition):
                raise TypeError(f"partition must be a GraphPartition (load_partition), got "
                                f"{type(partition).__name__}")
            nccl = dist.get_backend(group) == "nccl"
            timeout = _checked_timeout(timeout)
            device, self.mode = sampling_placement(device, mode or ("GPU" if nccl else "CPU"))
            rank, size = dist.get_rank(group), dist.get_world_size(group)
            if rank != partition.part or size != partition.num_parts:
                raise ValueError(f"this process is rank {rank} of {size} but holds part "
                                 f"{partition.part} of {partition.num_parts}: load part = rank "
                                 f"of a group with one process per part")
            if transport not in ("auto", "collective", "rdma"):
                raise ValueError(f"transport must be 'auto', 'collective' or 'rdma', got "
                                 f"{transport!r}")
            if draws not in (None, "owner", "requester"):
                raise ValueError(f"draws must be 'owner' or 'requester', got {draws!r}")
            if draws == "owner" and transport == "rdma":
                raise ValueError("transport 'rdma' reads the owners' memory, so the host that "
                                 "asks draws: draws must be 'requester' (or None) with it")
            check_lanes(lanes)
            if bounded_slots not in (None, True, False):
                raise ValueError(f"bounded_slots must be None, True or False, got "
                                 f"{bounded_slots!r}")
            self.partition, self.sizes = partition, ops.integer_fanouts(sizes, "sizes")
            # Three transports a host: fewer queue pairs and a smaller staging buffer each
            # than DistFeature's one.
            options = _rdma_options(rdma, qps_per_peer=2, staging_bytes=8 << 20)
        except (ValueError, TypeError, RuntimeError) as error:
            # Told to the other hosts, which wait in the setup's agreement, so that every
            # host raises at once rather than after the timeout with nothing said (a
            # RuntimeError too: a GPU asked for where torch sees none had built the others'
            # samplers, paired with this host's next setup; a probe).
            _tell_sampler_setup_problem(group, timeout, str(error))
            raise
        if draws == "owner" and transport == "auto":
            transport = "collective"
        self.transport = transport = self._agree(group, transport, replace, options, timeout,
                                                 draws, lanes)
        problem, refusal = "", None
        self._sampler = self._own_group = None
        try:
            self._sampler = self._build(group, nccl, transport, draws, lanes, options, timeout,
                                        device, replace)
        except Exception as error:  # noqa: BLE001  (told to the others, then raised)
            problem, refusal = str(error) or type(error).__name__, error
        # Every host says whether it built its sampler (the runtime checks that neighbors and
        # owners are in range; a transport may fail): one that refused its part left the
        # others waiting out the timeout in their first batch, told that it had stopped
        # answering, and one that raised without a word would leave them out of step here.
        # Under a topic of this setup's own (host 0's token in it): a host that left an
        # earlier setup between its two agreements would otherwise pair its next "built"
        # round with the others' earlier one.
        said = torch.classes.quiver.Transport.agree(
            group.boxed(), f"dist-sampler-built/{self._setup_token}", problem, float(timeout))
        troubled = [f"host {h}: {why}" for h, why in enumerate(said) if why]
        if all(said):
            # Every host refused: none made the runtime's channel (whose heartbeat numbers
            # count from the group's store), so the group is as it was on each. Where some
            # built, their counts moved and the refusing hosts' did not: the group is not
            # reused (it stays until exit, as every transport's does).
            self._spare_own_group()
        if troubled:
            self._sampler = None  # (its heartbeat thread with it, now)
        if refusal is not None:
            raise refusal
        if troubled:
            raise ValueError("DistGraphSampler: another host could not build its sampler: "
                             + "; ".join(troubled))
        # Each batch the hosts check that all of them have it on; else exact counts for all.
        self.bounded_slots = self._one_machine if bounded_slots is None else bounded_slots
        self._sampler.set_bounded_slots(self.bounded_slots)

    def _spare_own_group(self) -> None:
        """After a setup that every host refuses, each at its own point (this sampler's), or
        that every host built and then refused together (a DistNeighborLoader's over it):
        this host's sampler and transports let go, and the Gloo group made for them kept for
        the next sampler over the same group (dist._spare_own_group). Each such refusal had
        kept a group and its lanes until exit (a probe: 5 descriptors and 3 threads a
        refusal, 25 and 15 with 4 lanes)."""
        from .dist import _spare_own_group
        made, self._sampler, self._own_group = self._own_group, None, None
        if made is not None:
            _spare_own_group(*made)

    def _build(self, group, nccl: bool, transport: str, draws: Optional[str], lanes: int,
               options: dict, timeout: float, device, replace: bool):
        """The runtime sampler over this host's part, its group, lanes and read transports
        as the hosts agreed (``_agree``)."""
        from .dist import _gloo_lanes, _own_group
        partition = self.partition
        if not nccl:
            # A Gloo group of the sampler's own, so that its exchanges never pair with a
            # DistFeature's posted from another thread (see dist._own_group); spared should
            # every host refuse the setup.
            self._own_group = (group, _own_group(group, timeout))
            group = self._own_group[1]
        self.draws = draws or ("requester" if transport == "rdma" else "owner")
        self.lanes = lanes if transport == "collective" and not nccl else 1
        gloo_lanes = [lane.boxed() for lane in
                      _gloo_lanes(group, self.lanes, timeout, user="sampling")]
        reads = []
        if self.draws == "requester" and transport == "collective":
            # One transport reads all three arrays, in turn, on every host at once.
            reads = [torch.classes.quiver.Transport.collective(group.boxed(), float(timeout),
                                                               gloo_lanes)] * 3
            gloo_lanes = []  # the sampler's own exchanges are not used
        elif transport == "rdma":
            # Every host registers its three arrays, in this order, at the same point.
            reads = [torch.classes.quiver.Transport.rdma(
                group.boxed(), table.contiguous().view(-1, 1), options["device"],
                options["port"], options["gid_index"], options["qps_per_peer"],
                options["staging_bytes"], float(timeout))
                for table in (partition.indptr, partition.indices, partition.edge_ids)]
        indptr, indices, edge_ids = partition.indptr, partition.indices, partition.edge_ids
        if self.mode == "GPU":
            indptr, indices, edge_ids = (t.to(device) for t in (indptr, indices, edge_ids))
        elif self.mode == "UVA":  # pinned copies: the part's files are mapped read-only
            indptr = indptr.to(device)
            indices, edge_ids = indices.pin_memory(), edge_ids.pin_memory()
        # Without replacement a node takes min(fanout, degree) neighbors: a fanout past every
        # part's largest degree takes what that degree does, and sizes the hops' slots by it
        # (2**40 asked for its slots' terabytes, where one host's sampler takes all).
        fanouts = self.sizes if replace else [
            k if k < 0 else min(k, self._largest_degree) for k in self.sizes]
        return torch.classes.quiver.DistSampler(
            group.boxed(), indptr, indices, edge_ids, partition.owner, partition.local_index,
            fanouts, replace, float(timeout), reads, gloo_lanes)

    def __reduce__(self):
        # (pickle raised torch's words for its C++ sampler, naming no fix)
        raise TypeError("a DistGraphSampler is bound to this process's process group: build "
                        "one in each process from its own load_partition part, not a copy")

    def _agree(self, group, asked: str, replace: bool, options: dict, timeout: float,
               draws: Optional[str], lanes: int) -> str:
        """The transport every host uses, decided by all of them through the rendezvous
        store before any exchange (``"auto"``: RDMA when every host has a device), after
        checking that they hold parts of one partition and sample alike: a ValueError on
        every host, naming the hosts, instead of exchanges that pair unrelated requests."""
        from . import preflight
        rdma_here = asked in ("auto", "rdma") and torch.classes.quiver.Transport.rdma_available()
        problem = ""
        if asked == "rdma" and not rdma_here:
            problem = "transport 'rdma' asked for, but this host lists no RDMA device"
        elif rdma_here:
            try:  # peers read the three arrays; each transport registers a staging buffer
                p = self.partition
                preflight.check_memlock(p.indptr.nbytes + p.indices.nbytes + p.edge_ids.nbytes
                                        + 3 * options["staging_bytes"],
                                        "the partitioned sampler's registered memory")
            except preflight.ResourceLimitError as error:
                problem = str(error) if asked == "rdma" else ""
                rdma_here = False
        mine = {"partition": self.partition.manifest.get("partition_id"),
                "part": self.partition.part, "sizes": self.sizes, "replace": replace,
                "asked": asked, "draws": draws, "lanes": lanes, "rdma": rdma_here,
                "problem": problem, "machine": socket.gethostname(),
                "largest_degree": 0 if replace else _largest_degree(self.partition.indptr),
                "token": secrets.token_hex(8)}
        texts = torch.classes.quiver.Transport.agree(
            group.boxed(), "dist-sampler-setup", json.dumps(mine, sort_keys=True), timeout)
        everyone = [json.loads(text) for text in texts]
        self._one_machine = len({e["machine"] for e in everyone}) == 1
        self._largest_degree = max(e.get("largest_degree", 0) for e in everyone)
        self._setup_token = everyone[0].get("token")
        troubled = {h: e["problem"] for h, e in enumerate(everyone) if e["problem"]}
        if troubled:
            raise ValueError("DistGraphSampler cannot connect its hosts: " + "; ".join(
                f"host {h}: {why}" for h, why in troubled.items()))
        for key, what in (("partition", "partitions (ids)"), ("sizes", "fanouts"),
                          ("replace", "replace flags"), ("asked", "transports"),
                          ("draws", "draws"), ("lanes", "lanes")):
            if len({json.dumps(e[key]) for e in everyone}) > 1:
                raise ValueError(f"the hosts hold different {what}: " + ", ".join(
                    f"host {h} {e[key]!r}" for h, e in enumerate(everyone)) +
                    ": every host must load one partition and build its sampler alike")
        return asked if asked != "auto" else (
            "rdma" if all(e["rdma"] for e in everyone) else "collective")

    @ctrl_c_ends_waits
    def sample_subgraph(self, input_nodes, generator: Optional[torch.Generator] = None
                        ) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
        """sample_subgraph's layout: ``(node_ids, rows, cols, edge_ids, nodes_per_hop,
        edges_per_hop)``, edge ids global (the input's positions, as CSRTopo numbers them).
        As :class:`GraphSageSampler`'s: the first four on the sampling GPU in the GPU and UVA
        modes (on the CPU in the CPU mode), the counts on the CPU."""
        sampler = self._open()
        problem = None
        try:
            check_generator(generator)
            if generator is not None and generator.device.type not in ("cpu", "cuda"):
                raise ValueError(f"generator must be a CPU or CUDA torch.Generator, got one on "
                                 f"{generator.device}")
        except (TypeError, ValueError) as error:
            problem, generator = error, None  # (its turn below drawn by the sampler's own)
        if problem is None:
            try:
                seeds = readable_ids(input_nodes, "input_nodes").cpu()
            except (TypeError, ValueError, IndexError, RuntimeError,
                    NotImplementedError) as error:  # (IndexError: an id past int64; a review)
                problem = error
        if problem is not None:
            # Seeds or a generator that cannot even be read: this host still takes its turn
            # in the step, with no seeds (as for seeds the runtime refuses), so the hosts
            # stay in step (a refused generator had skipped it: a probe). A generator that
            # was fine still draws the peers' requests this host serves (draws='owner').
            try:
                sampler.sample(torch.empty(0, dtype=torch.long), generator)
            except RuntimeError:
                pass  # a peer gone too: the seeds' own error says more
            raise problem
        return sampler.sample(seeds, generator)

    def sample(self, input_nodes, generator: Optional[torch.Generator] = None
               ) -> Tuple[Tensor, int, List[Adj]]:
        """``(n_id, batch_size, adjs)`` as :meth:`GraphSageSampler.sample` returns them."""
        return layers_of(self.sample_subgraph(input_nodes, generator))

    def remote_share(self) -> Tuple[List[int], List[int]]:
        """Of the last batch, per hop: frontier nodes asked of other hosts, and the sampled
        edges that came back from them."""
        sampler = self._open()
        return sampler.last_remote_nodes(), sampler.last_remote_edges()

    def close(self) -> None:
        """Lets go of the runtime sampler and its transports (their connections, and the
        heartbeat that watches the peers through the rendezvous store): call it on every
        host before ``destroy_process_group``, or a heartbeat still beating reports the
        store's host leaving. Sampling afterwards raises."""
        self._sampler = None

    def __enter__(self) -> "DistGraphSampler":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _open(self):
        if self._sampler is None:
            raise RuntimeError("this DistGraphSampler was closed")
        return self._sampler
