"""Splits a feature table over hosts for DistFeature: per-host shards and the shard map.

    python scripts/partition_features.py --features x.pt --out /shared/parts --hosts 4 \\
        [--replicate 0.2] [--hot-order order.pt | --csr graph_dir] [--assignment parts.pt]

--features is a tensor saved with torch.save ([rows, ...], any dtype); --hot-order a
permutation of the rows, hottest first (else degree order from --csr, a CSRTopo.save
directory, else row order); --assignment one host per row (e.g. METIS parts) for the rows
not replicated (else contiguous ranges of ids). Every shard is read back and checked
against its size and CRC-32 before the command reports success.
"""
import argparse
import re
import time

import torch

import torch_quiver_ops as qv
from torch_quiver_ops import _cli
from torch_quiver_ops._sharing import check_row_table


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--features", required=True, help="the table, a torch.save file")
    parser.add_argument("--out", required=True, help="the folder the shards are written to")
    parser.add_argument("--hosts", type=int, required=True, help="how many hosts share it")
    parser.add_argument("--replicate", type=float, default=0.2,
                        help="the share of rows, hottest first, every host holds (default: "
                             "0.2)")
    parser.add_argument("--hot-order", default=None,
                        help="a torch.save permutation of the rows, hottest first")
    parser.add_argument("--csr", default=None,
                        help="a CSRTopo.save folder whose degree order is the hot order")
    parser.add_argument("--assignment", default=None,
                        help="a torch.save tensor of one host per row (e.g. METIS parts)")
    args = parser.parse_args()
    if not 1 <= args.hosts <= 32767:  # the shard map's host ids are int16
        parser.error(f"--hosts must be in [1, 32767], got {args.hosts}")
    if not 0 <= args.replicate <= 1:
        parser.error(f"--replicate must be a share in [0, 1], got {args.replicate}")
    if not args.out:  # (wrote the parts into the current folder)
        parser.error("--out must not be empty")
    if args.hot_order and args.csr:  # --csr was dropped without a word
        parser.error("give --hot-order or --csr (whose degree order is the hot order), not both")
    _cli.check_files(parser, args, ("features", "hot_order", "assignment"))
    _cli.run(parser, split, args)


def split(args) -> None:
    start = time.perf_counter()
    x = _cli.load_file("features", args.features, torch.Tensor)
    check_row_table(x, f"--features {args.features}")
    hot_order = None
    if args.hot_order:
        hot_order = _cli.load_file("hot-order", args.hot_order, torch.Tensor)
    elif args.csr:
        topo = qv.CSRTopo.load_shared(args.csr)
        if topo.node_count != x.size(0):  # (was named as a --hot-order the user never gave)
            raise ValueError(f"--csr {args.csr} has {topo.node_count} nodes, --features "
                             f"{args.features} {x.size(0)} rows: the degree order needs one "
                             f"row per node")
        hot_order = topo.feature_order
    assignment = (_cli.load_file("assignment", args.assignment, torch.Tensor)
                  if args.assignment else None)
    try:
        qv.dist.partition_features(x, args.out, args.hosts, hot_order, args.replicate,
                                   assignment)
    except (ValueError, IndexError, TypeError) as error:  # named as the user wrote them
        flags = {"hot_order": "--hot-order", "assignment": "--assignment", "num_hosts": "--hosts"}
        raise type(error)(re.sub(r"\b(hot_order|assignment|num_hosts)\b",
                                 lambda m: flags[m[1]], str(error))) from None
    shard_map = qv.dist.load_shard_map(args.out, verify=True)
    rows = [shard_map.local_rows(h) for h in range(args.hosts)]
    print(f"{tuple(x.shape)} {x.dtype} over {args.hosts} hosts in {args.out}: "
          f"{shard_map.num_replicated():,} rows replicated, local tables of {rows} rows; "
          f"checked in {time.perf_counter() - start:.1f}s")


if __name__ == "__main__":
    main()
