"""Partitions a graph over hosts: each host's nodes with their neighbor lists, features,
labels and split ids, the node -> owner map and a manifest (torch_quiver_ops.partition).

    python scripts/partition_graph.py --csr GRAPH_DIR | --edge-index E.pt | --synthetic NAME
        --parts 4 --out /shared/parts [--method metis|range|random] [--features x.pt]
        [--labels y.pt] [--splits splits.pt] [--replicate 0.2] [--seed 0] [--no-features]

--csr is a CSRTopo.save directory (memory-mapped: only the pages read are resident), its
neighbor lists sampled as they are; --edge-index a PyG edge_index ([2, E] sources then
targets, saved with torch.save), each node's list then holding the sources of its
in-edges, as PyG's NeighborLoader samples (DistNeighborLoader's edge_index and e_id then
agree with it), with --num-nodes nodes (default: the rows of --features or --labels, else
the largest id + 1); --synthetic one of the package's
synthetic presets (features, labels and a train/val/test split included). --features and
--labels are tensors saved with torch.save, --splits a dict of node-id tensors. Prints the
edge cut, the balance, the time and the peak resident memory, then reads every part back
(sizes and CRC-32) before it reports success.
"""
from __future__ import annotations

import argparse
import re
import resource
import threading
import time

from pathlib import Path

import torch

import torch_quiver_ops as qv
from torch_quiver_ops import _cli, preflight
from torch_quiver_ops._sharing import check_row_table
from torch_quiver_ops.partition import METHODS, load_partition, partition_graph


class AnonymousPeak:
    """Samples this process's anonymous resident memory (RssAnon: what it allocated, not the
    pages of memory-mapped inputs, which the kernel can drop) every 20 ms; .peak in bytes."""

    def __init__(self):
        self._stop = threading.Event()
        self.start = self.peak = self._read()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    @staticmethod
    def _read() -> int:
        return max(0, preflight.proc_bytes("/proc/self/status", "RssAnon"))

    def _watch(self):
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self._read())

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--csr", help="a CSRTopo.save directory")
    source.add_argument("--edge-index", help="a [2, E] tensor saved with torch.save")
    source.add_argument("--synthetic", help="a synthetic preset (tiny, small, products, ...)")
    parser.add_argument("--num-nodes", type=int, default=None,
                        help="with --edge-index: the node count (default: the rows of "
                             "--features or --labels, else the largest id + 1)")
    parser.add_argument("--parts", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--method", choices=METHODS, default="metis")
    parser.add_argument("--features")
    parser.add_argument("--labels")
    parser.add_argument("--splits")
    parser.add_argument("--replicate", type=float, default=None,
                        help="share of the hottest feature rows kept on every host (default "
                             "0.2; with features only)")
    parser.add_argument("--seed", type=_cli.seed, default=0)
    parser.add_argument("--no-features", action="store_true",
                        help="with --synthetic: topology, labels and splits only")
    args = parser.parse_args(argv)
    if args.parts < 1:
        parser.error(f"--parts must be >= 1, got {args.parts}")
    if not args.out:  # (wrote the parts into the current folder)
        parser.error("--out must not be empty")
    if args.replicate is not None and not 0 <= args.replicate <= 1:
        parser.error(f"--replicate must be a share in [0, 1], got {args.replicate}")
    # Options that the source chosen would ignore (a run that "worked" with them dropped).
    if args.num_nodes is not None and not args.edge_index:
        parser.error("--num-nodes goes with --edge-index only (--csr and --synthetic know "
                     "their node count)")
    if args.no_features and not args.synthetic:
        parser.error("--no-features goes with --synthetic only (give --features or not)")
    if args.no_features and args.features:
        parser.error("--no-features and --features contradict each other")
    if args.replicate is not None and (args.no_features or not (args.features or args.synthetic)):
        parser.error("--replicate places feature rows: it goes with features")
    if args.synthetic:
        from torch_quiver_ops.synthetic import PRESETS
        if args.synthetic not in PRESETS:
            parser.error(f"--synthetic must be one of {sorted(PRESETS)}, got {args.synthetic!r}")
    _cli.check_files(parser, args, ("edge_index", "features", "labels", "splits"))
    _cli.run(parser, partition, args)


def partition(args) -> None:
    started = time.perf_counter()
    x = y = splits = None
    if args.synthetic:
        from torch_quiver_ops.synthetic import synthetic_graph
        # On a GPU the graph and its CSR are drawn there (seconds at papers100M size, where
        # a CPU int64 edge_index alone is 26 GB); features in bf16 halve the table.
        on_gpu = torch.cuda.is_available() and qv.cuda_kernels_built()
        graph = synthetic_graph(args.synthetic, seed=args.seed, features=not args.no_features,
                                device="cuda" if on_gpu else None, csr=on_gpu,
                                feature_dtype=torch.bfloat16 if on_gpu else torch.float32)
        topo = graph.topology()
        x, y = graph.x, graph.y
        splits = {name: getattr(graph, f"{name}_idx") for name in ("train", "val", "test")
                  if getattr(graph, f"{name}_idx", None) is not None}
    elif args.csr:
        topo = qv.CSRTopo.load_shared(args.csr)
    else:
        edge_index = _cli.load_file("edge-index", args.edge_index, torch.Tensor)
        num_nodes = args.num_nodes
        if num_nodes is None:  # nodes past the last one with an edge still count
            for table in (args.features, args.labels):
                if table:
                    flag = "features" if table == args.features else "labels"
                    rows = _cli.load_file(flag, table, torch.Tensor, mmap=True)
                    check_row_table(rows, f"--{flag} {table}")
                    num_nodes = rows.size(0)
                    break
        try:
            topo = qv.CSRTopo(edge_index.flip(0), num_nodes=num_nodes)  # in-neighbor lists
        except IndexError as error:  # it names a row of the flipped edges: the user's other
            raise IndexError(re.sub(r"edge_index\[([01]), ",
                                    lambda m: f"edge_index[{1 - int(m[1])}, ",
                                    str(error))) from None
    if args.features:
        x = _cli.load_file("features", args.features, torch.Tensor, mmap=True)
        check_row_table(x, f"--features {args.features}")
    if args.labels:
        y = _cli.load_file("labels", args.labels, torch.Tensor)
        check_row_table(y, f"--labels {args.labels}")
    if args.splits:
        splits = _cli.load_file("splits", args.splits, dict)
    loaded = time.perf_counter() - started
    watch = AnonymousPeak()
    before = watch.start
    manifest = partition_graph(args.out, topo, args.parts, args.method, x=x, y=y, splits=splits,
                               replicate=args.replicate, seed=args.seed)
    anonymous_gib = watch.stop() / 2**30
    for part in range(args.parts):
        load_partition(args.out, part, verify=True)
    owner_gib = sum(f.stat().st_size for f in (Path(args.out) / "owner").iterdir()) / 2**30
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    def bytes_under(folder: Path) -> int:
        return sum(f.stat().st_size for f in folder.iterdir()) if folder.exists() else 0

    largest = max(bytes_under(Path(args.out) / f"part_{p}") +
                  bytes_under(Path(args.out) / "features" / f"host_{p}")
                  for p in range(args.parts))
    print(f"{topo.node_count} nodes, {topo.edge_count} edges into {args.parts} parts by "
          f"{manifest['method']}: edge cut {manifest['edge_cut']:.3f}, balance "
          f"{manifest['node_balance']:.3f} (nodes) / {manifest['edge_balance']:.3f} (edges); "
          f"loaded in {loaded:.1f}s, owners in {manifest['seconds']['assign']:.1f}s, written "
          f"in {manifest['seconds']['total']:.1f}s; peak resident {peak_gib:.2f} GiB (inputs "
          f"and mapped pages included), anonymous while partitioning {anonymous_gib:.2f} GiB "
          f"({anonymous_gib - before / 2**30:.2f} above the {before / 2**30:.2f} held before: "
          f"the process, and inputs not mapped from files); largest part "
          f"{largest / 2**30:.2f} GiB on disk, owner map {owner_gib:.2f} GiB")
    for part, info in enumerate(manifest["parts"]):
        print(f"  part {part}: {info['nodes']} nodes, {info['edges']} edges")
    print(f"every part read back and verified: {args.out}")


if __name__ == "__main__":
    main()
