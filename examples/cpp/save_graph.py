"""Saves a synthetic graph for examples/cpp/train_sage (``--data DIR``): the topology
(``CSRTopo.save``), the feature table with its presampled hot order (``Feature.save``) and
the labels and splits, all in the package's raw-file format (``torch_quiver_ops.save_arrays``).

    python examples/cpp/save_graph.py /dev/shm/products --size products
"""
import argparse
from pathlib import Path

import torch

import torch_quiver_ops as qv
from torch_quiver_ops import _cli
from torch_quiver_ops.synthetic import PRESETS, synthetic_graph


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory")
    parser.add_argument("--size", default="small", choices=sorted(PRESETS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=1024,
                        help="batch size of the presampling that orders the rows by heat")
    args = parser.parse_args(argv)
    if args.batch_size < 1 or args.batch_size >= 2 ** 63:  # before the graph is built
        parser.error(f"--batch-size must be in [1, 2**63), got {args.batch_size}")
    if not 0 <= args.seed < 2 ** 63:  # (2**63 had given seed 0's graph)
        parser.error(f"--seed must be in [0, 2**63), got {args.seed}")
    if not args.directory:  # ("" + "/topology" wrote under /)
        parser.error("directory must not be empty")
    _cli.run(parser, save, args)


def save(args) -> None:
    device = torch.device("cuda") if torch.cuda.is_available() and qv.cuda_kernels_built() \
        else None
    graph = synthetic_graph(args.size, seed=args.seed, device=device)
    topo = qv.CSRTopo(graph.edge_index, num_nodes=graph.num_nodes)
    # The labels are written last and an earlier save's record of them removed first: a
    # save cut short (a Ctrl-C, a full disk) over an older graph left the new topology
    # beside the old rows and labels, which loaded together when the sizes agreed. Now
    # such a folder is refused for its missing labels until a save completes.
    Path(args.directory, "labels", "labels.json").unlink(missing_ok=True)
    topo.save(f"{args.directory}/topology")
    sampler = qv.GraphSageSampler(topo, [15, 10, 5], device=device or "cpu")
    hot = qv.presample_hot_order(sampler, graph.train_idx, args.batch_size,
                                 generator=torch.Generator().manual_seed(args.seed))
    qv.Feature(device_list=[]).from_cpu_tensor(graph.x, hot_order=hot).save(
        f"{args.directory}/features")
    qv.save_arrays(f"{args.directory}/labels", "labels",
                   {"y": graph.y, "train_idx": graph.train_idx, "test_idx": graph.test_idx},
                   num_classes=graph.num_classes)
    print(f"saved '{args.size}' ({graph.num_nodes:,} nodes, {topo.edge_count:,} edges) to "
          f"{args.directory}")


if __name__ == "__main__":
    main()
